(** * Stacks of coupling layers, and the leapfrog step.

    A stack is a list of coupling layers, each given by its two
    functions [(f, g)].  The forward pass runs them first to last
    ([stack_forward], a [fold_left]); the inverse runs the inverses of
    the layers last to first ([stack_inverse], a [fold_left] over the
    reversed list).  [stack_inverse_forward] and [stack_forward_inverse]
    prove that these are mutually inverse, exactly, over any commutative
    group; the [_list] versions cover vectors (lists of one length).

    The leapfrog (velocity Verlet) step of a Hamiltonian system
    [p' = p - h/2 dV(q); q' = q + h p'; p'' = p' - h/2 dV(q')] is the
    stack of two coupling layers [(kick, drift)] and [(kick, 0)]
    ([leapfrog_layers]), so it is inverted exactly by [stack_inverse]
    ([leapfrog_inverse_step]); over [R] it is also time-reversible
    (inverse = flip momentum, step, flip momentum). *)

From Coq Require Import List Reals Lra.
From Ojas Require Import Reversible.Coupling.
Import ListNotations.

(** A coupling layer: its two residual functions. *)
Record coupling_layer (T : Type) : Type := mk_layer {
  layer_f : T -> T;
  layer_g : T -> T
}.

Arguments mk_layer {T}. Arguments layer_f {T}. Arguments layer_g {T}.

(** ** Folding invertible maps (generic) *)
Section Fold.
Context {S L : Type} (fwd inv : L -> S -> S).

(** Run layers first to last. *)
Definition run_forward (ls : list L) (x : S) : S := fold_left (fun x l => fwd l x) ls x.

(** Run the inverses of the layers last to first. *)
Definition run_inverse (ls : list L) (y : S) : S := fold_left (fun y l => inv l y) (rev ls) y.

Lemma run_inverse_cons : forall l ls y,
  run_inverse (l :: ls) y = inv l (run_inverse ls y).
Proof. intros; unfold run_inverse; simpl; rewrite fold_left_app; reflexivity. Qed.

(** If every layer maps the invariant [P] into itself and is inverted by
    [inv] on [P], the reversed inverses invert the stack on [P]. *)
Lemma run_inverse_forward : forall (P : S -> Prop) ls x,
  (forall l, In l ls -> forall x, P x -> P (fwd l x) /\ inv l (fwd l x) = x) ->
  P x -> run_inverse ls (run_forward ls x) = x.
Proof.
  intros P ls; induction ls as [|l ls IH]; intros x Hl Px; [reflexivity|].
  rewrite run_inverse_cons; simpl.
  destruct (Hl l (or_introl eq_refl) x Px) as [Pfx Inv].
  rewrite (IH (fwd l x)); auto.
  intros l' Hin; apply Hl; right; exact Hin.
Qed.

(** Symmetrically, the stack inverts the reversed inverses on [P]. *)
Lemma run_forward_inverse : forall (P : S -> Prop) ls y,
  (forall l, In l ls -> forall y, P y -> P (inv l y) /\ fwd l (inv l y) = y) ->
  P y -> run_forward ls (run_inverse ls y) = y.
Proof.
  intros P ls; induction ls as [|l ls IH]; intros y Hl Py; [reflexivity|].
  rewrite run_inverse_cons; simpl.
  assert (Hl' : forall l', In l' ls -> forall y, P y -> P (inv l' y) /\ fwd l' (inv l' y) = y)
    by (intros l' Hin; apply Hl; right; exact Hin).
  assert (Pinv : forall zs z, (forall l', In l' zs -> forall y, P y -> P (inv l' y)) ->
            P z -> P (fold_left (fun y l => inv l y) zs z)).
  { induction zs as [|a zs IHz]; intros z Hz Pz; simpl; auto.
    apply IHz; [intros; apply Hz; [right|]; auto | apply Hz; [left|]; auto]. }
  assert (Pr : P (run_inverse ls y)).
  { apply Pinv; auto. intros l' Hin y' Py'; apply Hl'; auto.
    apply in_rev; exact Hin. }
  destruct (Hl l (or_introl eq_refl) _ Pr) as [_ Fwd].
  rewrite Fwd; apply IH; auto.
Qed.

End Fold.

(** ** Stacks of coupling layers *)
Section Stack.
Context {T : Type} (o : group_ops T).

(** The forward pass of one layer. *)
Definition layer_forward (l : coupling_layer T) (x : T * T) : T * T :=
  coupling_forward o (layer_f l) (layer_g l) x.

(** The inverse of one layer. *)
Definition layer_inverse (l : coupling_layer T) (y : T * T) : T * T :=
  coupling_inverse o (layer_f l) (layer_g l) y.

(** Forward through the stack, first layer first. *)
Definition stack_forward (ls : list (coupling_layer T)) (x : T * T) : T * T :=
  run_forward layer_forward ls x.

(** Inverse of the stack: the layer inverses, last layer first. *)
Definition stack_inverse (ls : list (coupling_layer T)) (y : T * T) : T * T :=
  run_inverse layer_inverse ls y.

(** One leapfrog step on the state [(p, q)]: the layers [(kick, drift)]
    and [(kick, 0)].  With [kick q = - h/2 dV(q)] and [drift p = h p] it
    is [p' = p - h/2 dV(q); q' = q + h p'; p'' = p' - h/2 dV(q')]. *)
Definition leapfrog_layers (kick drift : T -> T) : list (coupling_layer T) :=
  [mk_layer kick drift; mk_layer kick (fun _ => g_zero o)].

(** [n] leapfrog steps. *)
Definition leapfrog_steps (n : nat) (kick drift : T -> T) : list (coupling_layer T) :=
  concat (repeat (leapfrog_layers kick drift) n).

End Stack.

Section StackInverse.
Context {T : Type} (o : group_ops T) (H : comm_group_laws o).

(** A stack of coupling layers is inverted exactly by the reversed list of
    layer inverses (any [f], [g] in every layer). *)
Theorem stack_inverse_forward : forall ls x,
  stack_inverse o ls (stack_forward o ls x) = x.
Proof.
  intros ls x; apply (run_inverse_forward _ _ (fun _ => True)); auto.
  intros l _ x' _; split; auto; apply (coupling_inverse_forward _ H).
Qed.

(** The stack undoes its inverse exactly. *)
Theorem stack_forward_inverse : forall ls y,
  stack_forward o ls (stack_inverse o ls y) = y.
Proof.
  intros ls y; apply (run_forward_inverse _ _ (fun _ => True)); auto.
  intros l _ y' _; split; auto; apply (coupling_forward_inverse _ H).
Qed.

(** [n] leapfrog steps are inverted exactly by [stack_inverse]. *)
Theorem leapfrog_inverse_steps : forall n kick drift x,
  stack_inverse o (leapfrog_steps o n kick drift) (stack_forward o (leapfrog_steps o n kick drift) x) = x.
Proof. intros; apply stack_inverse_forward. Qed.

End StackInverse.

(** ** Vectors: stacks over lists of one length *)
Section StackList.
Context {T : Type} (o : group_ops T) (H : comm_group_laws o).

(** Both functions of every layer keep the length [n]. *)
Definition layers_keep_length (n : nat) (ls : list (coupling_layer (list T))) : Prop :=
  forall l, In l ls -> keeps_length n (layer_f l) /\ keeps_length n (layer_g l).

Lemma length_coupling_forward_list : forall n f g x1 x2,
  keeps_length n f -> keeps_length n g -> length x1 = n -> length x2 = n ->
  let y := coupling_forward (list_group o) f g (x1, x2) in
  length (fst y) = n /\ length (snd y) = n.
Proof.
  intros n f g x1 x2 Hf Hg H1 H2; simpl.
  assert (Ly1 : length (list_add o x1 (f x2)) = n)
    by (rewrite length_list_add; [exact H1 | rewrite Hf; congruence]).
  split; [exact Ly1|]; rewrite length_list_add; [exact H2 | rewrite Hg; congruence].
Qed.

Lemma length_coupling_inverse_list : forall n f g y1 y2,
  keeps_length n f -> keeps_length n g -> length y1 = n -> length y2 = n ->
  let x := coupling_inverse (list_group o) f g (y1, y2) in
  length (fst x) = n /\ length (snd x) = n.
Proof.
  intros n f g y1 y2 Hf Hg H1 H2; simpl.
  assert (Lx2 : length (list_sub o y2 (g y1)) = n)
    by (rewrite length_list_sub; [exact H2 | rewrite Hg; congruence]).
  split; [|exact Lx2]; rewrite length_list_sub; [exact H1 | rewrite Hf; congruence].
Qed.

(** On vectors of one length [n], a stack of length-preserving coupling
    layers is inverted exactly by [stack_inverse]. *)
Theorem stack_inverse_forward_list : forall n ls x1 x2,
  layers_keep_length n ls -> length x1 = n -> length x2 = n ->
  stack_inverse (list_group o) ls (stack_forward (list_group o) ls (x1, x2)) = (x1, x2).
Proof.
  intros n ls x1 x2 Hl H1 H2.
  apply (run_inverse_forward _ _ (fun x => length (fst x) = n /\ length (snd x) = n));
    [|simpl; auto].
  intros l Hin [y1 y2] [L1 L2]; destruct (Hl l Hin) as [Hf Hg]; simpl in L1, L2.
  split; [apply length_coupling_forward_list; auto|].
  apply (coupling_inverse_forward_list _ H n); auto.
Qed.

(** On vectors of one length [n], the stack undoes [stack_inverse]. *)
Theorem stack_forward_inverse_list : forall n ls y1 y2,
  layers_keep_length n ls -> length y1 = n -> length y2 = n ->
  stack_forward (list_group o) ls (stack_inverse (list_group o) ls (y1, y2)) = (y1, y2).
Proof.
  intros n ls y1 y2 Hl H1 H2.
  apply (run_forward_inverse _ _ (fun x => length (fst x) = n /\ length (snd x) = n));
    [|simpl; auto].
  intros l Hin [x1 x2] [L1 L2]; destruct (Hl l Hin) as [Hf Hg]; simpl in L1, L2.
  split; [apply length_coupling_inverse_list; auto|].
  apply (coupling_forward_inverse_list _ H n); auto.
Qed.

End StackList.

(** ** The leapfrog step over [R] *)

Open Scope R_scope.

(** Over [R], [leapfrog_layers] with [kick q = -(h/2) dV(q)] and
    [drift p = h p] computes the textbook leapfrog step. *)
Theorem leapfrog_step_R : forall h dV p q,
  let p1 := p - h / 2 * dV q in
  let q1 := q + h * p1 in
  stack_forward R_group
    (leapfrog_layers R_group (fun q => - (h / 2 * dV q)) (fun p => h * p)) (p, q)
  = (p1 - h / 2 * dV q1, q1).
Proof.
  intros h dV p q; cbv zeta; unfold stack_forward, run_forward, layer_forward; simpl.
  replace (p + - (h / 2 * dV q)) with (p - h / 2 * dV q) by ring.
  f_equal; ring.
Qed.

(** Over [R], the leapfrog step is time-reversible: its exact inverse is
    "negate the momentum, step, negate the momentum". *)
Theorem leapfrog_time_reversible : forall h dV p q,
  let kick := fun q => - (h / 2 * dV q) in
  let drift := fun p => h * p in
  stack_inverse R_group (leapfrog_layers R_group kick drift) (p, q)
  = let '(p', q') := stack_forward R_group (leapfrog_layers R_group kick drift) (- p, q) in
    (- p', q').
Proof.
  intros h dV p q kick drift.
  unfold stack_inverse, stack_forward, run_inverse, run_forward,
    layer_inverse, layer_forward, kick, drift; simpl.
  replace (q - 0) with q by ring.
  replace (q - h * (p - - (h / 2 * dV q)))
    with (q + h * (- p + - (h / 2 * dV q))) by ring.
  f_equal; ring.
Qed.
