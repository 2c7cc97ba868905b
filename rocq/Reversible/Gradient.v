(** * Backpropagation through a reversible stack from reconstructed
    activations.

    Ordinary backpropagation stores the input of every layer during the
    forward pass ([forward_acts]) and then, last layer first, calls the
    local vector-Jacobian product of each layer on its stored input
    ([backprop_stored]).  A reversible network stores only the output:
    its backward pass ([backprop_reversible]) is a fold over the reversed
    layers carrying [(y, dy)]: it reconstructs the input of the layer
    with the layer's inverse, [x = invert l y], calls the same local
    vector-Jacobian product on [(x, dy)], and continues with [(x, dx)].

    The local backward of a layer is a given function
    [vjp l x dy = (dx, dparams)] (autograd of the layer's own code, in
    practice).  [backprop_reversible_correct]: if every layer is
    inverted exactly, the reversible pass makes every [vjp] call on the
    stored input, hence returns exactly the gradients of ordinary
    backprop (same input gradient, same parameter gradients, and the
    reconstructed network input).  [backprop_reversible_layerwise] says
    the same after every layer.  Both are generic in the state, layer,
    cotangent and parameter-gradient types; [backprop_coupling] is the
    instance for coupling stacks over any commutative group, in
    particular [R] ([backprop_coupling_R]) and [Z].

    [coupling_vjp] is the backward of one coupling layer written from
    the vector-Jacobian products of [f] and [g] (the RevNet formulas);
    [coupling_vjp_derive] checks, over [R] for differentiable scalar [f]
    and [g], that it is the gradient of [x |-> <dy, forward x>]. *)

From Coq Require Import List Reals Lra.
From Coquelicot Require Import Coquelicot.
From Ojas Require Import ScalarOps Reversible.Coupling Reversible.Stack.
Import ListNotations.

Section Backprop.
Context {S D P L : Type}.
(** Forward pass and exact inverse of a layer. *)
Variable apply invert : L -> S -> S.
(** The local backward of a layer at input [x]: [(dx, dparams)]. *)
Variable vjp : L -> S -> D -> D * P.

(** The forward pass storing activations: the input of every layer
    (first to last) and the output. *)
Fixpoint forward_acts (ls : list L) (x : S) : list S * S :=
  match ls with
  | [] => ([], x)
  | l :: ls' => let '(acts, y) := forward_acts ls' (apply l x) in (x :: acts, y)
  end.

(** One step of ordinary backprop: the [vjp] of layer [l] at its stored
    input [a]; parameter gradients are collected in layer order. *)
Definition stored_step (s : D * list P) (la : L * S) : D * list P :=
  let '(dy, gs) := s in
  let '(l, a) := la in
  let '(dx, g) := vjp l a dy in (dx, g :: gs).

(** Ordinary backprop from the stored inputs [acts], last layer first:
    the input gradient and the parameter gradients (in layer order). *)
Definition backprop_stored (ls : list L) (acts : list S) (dy : D) : D * list P :=
  fold_left stored_step (rev (combine ls acts)) (dy, []).

(** One step of the reversible backward pass: reconstruct the input of
    [l] from its output [y], then the [vjp] of [l] at that input. *)
Definition reversible_step (s : S * D * list P) (l : L) : S * D * list P :=
  let '(y, dy, gs) := s in
  let x := invert l y in
  let '(dx, g) := vjp l x dy in (x, dx, g :: gs).

(** Reversible backprop from the output [y] and its cotangent [dy], last
    layer first: the reconstructed network input, the input gradient
    and the parameter gradients (in layer order). *)
Definition backprop_reversible (ls : list L) (y : S) (dy : D) : S * D * list P :=
  fold_left reversible_step (rev ls) (y, dy, []).

Lemma forward_acts_run : forall ls x,
  snd (forward_acts ls x) = run_forward apply ls x.
Proof.
  induction ls as [|l ls IH]; intros x; simpl; auto.
  rewrite <- IH; destruct (forward_acts ls (apply l x)); reflexivity.
Qed.

Lemma length_forward_acts : forall ls x, length (fst (forward_acts ls x)) = length ls.
Proof.
  induction ls as [|l ls IH]; intros x; simpl; auto.
  specialize (IH (apply l x)); destruct (forward_acts ls (apply l x)); simpl in *; auto.
Qed.

Lemma forward_acts_app : forall pre post x,
  forward_acts (pre ++ post) x =
  (fst (forward_acts pre x) ++ fst (forward_acts post (run_forward apply pre x)),
   snd (forward_acts post (run_forward apply pre x))).
Proof.
  induction pre as [|l pre IH]; intros post x; simpl.
  - destruct (forward_acts post x); reflexivity.
  - rewrite IH; destruct (forward_acts pre (apply l x)); reflexivity.
Qed.

(** Every layer is inverted exactly. *)
Hypothesis invert_apply : forall l x, invert l (apply l x) = x.

(** Backprop from reconstructed activations returns exactly what ordinary
    backprop from stored activations returns (input and parameter
    gradients), and reconstructs the network input. *)
Theorem backprop_reversible_correct : forall ls x dy,
  let '(acts, y) := forward_acts ls x in
  backprop_reversible ls y dy =
  (x, fst (backprop_stored ls acts dy), snd (backprop_stored ls acts dy)).
Proof.
  induction ls as [|l ls IH]; intros x dy; [reflexivity|].
  simpl forward_acts.
  specialize (IH (apply l x) dy).
  destruct (forward_acts ls (apply l x)) as [acts y].
  unfold backprop_reversible, backprop_stored in *; simpl.
  rewrite !fold_left_app, IH; simpl.
  rewrite invert_apply.
  destruct (fold_left stored_step (rev (combine ls acts)) (dy, [])) as [d gs]; simpl.
  destruct (vjp l x d); reflexivity.
Qed.

(** At every layer: after the backward pass has gone through the layers
    [post] of a stack [pre ++ post], the reversible state holds the
    stored input of [post] (the activation ordinary backprop would have
    kept) and the same cotangent and parameter gradients as ordinary
    backprop after the same layers. *)
Theorem backprop_reversible_layerwise : forall pre post x dy,
  let acts := fst (forward_acts (pre ++ post) x) in
  let y := snd (forward_acts (pre ++ post) x) in
  let xpost := run_forward apply pre x in
  fold_left reversible_step (rev post) (y, dy, []) =
  (xpost,
   fst (fold_left stored_step (rev (combine post (skipn (length pre) acts))) (dy, [])),
   snd (fold_left stored_step (rev (combine post (skipn (length pre) acts))) (dy, []))).
Proof.
  intros pre post x dy acts y xpost.
  unfold acts, y; rewrite forward_acts_app; simpl.
  rewrite skipn_app, skipn_all2 by (rewrite length_forward_acts; auto).
  rewrite length_forward_acts, Nat.sub_diag; simpl; fold xpost.
  pose proof (backprop_reversible_correct post xpost dy) as Hc.
  destruct (forward_acts post xpost) as [acts' y']; exact Hc.
Qed.

End Backprop.

(** ** Coupling stacks *)
Section CouplingBackprop.
Context {T D P : Type} (o : group_ops T) (H : comm_group_laws o).
Variable vjp : coupling_layer T -> T * T -> D -> D * P.

(** Through a stack of coupling layers over any commutative group,
    reversible backprop equals ordinary backprop, for any local [vjp]. *)
Theorem backprop_coupling : forall ls x dy,
  let '(acts, y) := forward_acts (layer_forward o) ls x in
  backprop_reversible (layer_inverse o) vjp ls y dy =
  (x, fst (backprop_stored vjp ls acts dy), snd (backprop_stored vjp ls acts dy)).
Proof.
  intros; apply backprop_reversible_correct.
  intros l x'; apply (coupling_inverse_forward _ H).
Qed.

End CouplingBackprop.

(** Over [R]: reversible backprop through a coupling stack equals
    ordinary backprop, for any local [vjp]. *)
Theorem backprop_coupling_R : forall {D P} (vjp : coupling_layer R -> R * R -> D -> D * P) ls x dy,
  let '(acts, y) := forward_acts (layer_forward R_group) ls x in
  backprop_reversible (layer_inverse R_group) vjp ls y dy =
  (x, fst (backprop_stored vjp ls acts dy), snd (backprop_stored vjp ls acts dy)).
Proof. intros; apply (backprop_coupling _ R_group_laws). Qed.

(** ** The backward of one coupling layer *)
Section CouplingVjp.
Context {T Pf Pg : Type} (o : group_ops T).

(** RevNet backward of [y1 = x1 + f x2], [y2 = x2 + g y1] at input
    [(x1, x2)] for the cotangent [(dy1, dy2)], from the
    vector-Jacobian products [vf] of [f] and [vg] of [g] (each returns
    the input cotangent and the parameter gradient):
    [dz = dy1 + g'(y1)^T dy2], [dx1 = dz], [dx2 = dy2 + f'(x2)^T dz]. *)
Definition coupling_vjp (f : T -> T) (vf : T -> T -> T * Pf) (vg : T -> T -> T * Pg)
    (x : T * T) (dy : T * T) : (T * T) * (Pf * Pg) :=
  let '(x1, x2) := x in
  let '(dy1, dy2) := dy in
  let y1 := g_add o x1 (f x2) in
  let '(dgy, pg) := vg y1 dy2 in
  let dz := g_add o dy1 dgy in
  let '(dfx, pf) := vf x2 dz in
  ((dz, g_add o dy2 dfx), (pf, pg)).

(** Reversible backward of a coupling stack with the RevNet local
    backward: [vf l] and [vg l] are the vector-Jacobian products of the
    two functions of layer [l]. *)
Definition coupling_stack_backward (vf : coupling_layer T -> T -> T -> T * Pf)
    (vg : coupling_layer T -> T -> T -> T * Pg) (ls : list (coupling_layer T))
    (y dy : T * T) : (T * T) * (T * T) * list (Pf * Pg) :=
  backprop_reversible (layer_inverse o)
    (fun l x d => coupling_vjp (layer_f l) (vf l) (vg l) x d) ls y dy.

(** [coupling_stack_backward] over a commutative group returns exactly
    what ordinary backprop with stored inputs and the same local backward
    returns. *)
Theorem coupling_stack_backward_correct : comm_group_laws o -> forall vf vg ls x dy,
  let vjp := fun l x d => coupling_vjp (layer_f l) (vf l) (vg l) x d in
  let '(acts, y) := forward_acts (layer_forward o) ls x in
  coupling_stack_backward vf vg ls y dy =
  (x, fst (backprop_stored vjp ls acts dy), snd (backprop_stored vjp ls acts dy)).
Proof. intros H vf vg ls x dy vjp; apply (backprop_coupling _ H). Qed.

End CouplingVjp.

Open Scope R_scope.

(** Over [R], for differentiable scalar [f], [g] (derivatives [f'], [g']),
    [coupling_vjp] with [vf x d = f'(x) d] and [vg y d = g'(y) d] gives
    the partial derivatives of [x |-> dy1 y1 + dy2 y2]. *)
Theorem coupling_vjp_derive : forall (f g f' g' : R -> R) x1 x2 dy1 dy2,
  (forall t, is_derive f t (f' t)) -> (forall t, is_derive g t (g' t)) ->
  let loss := fun x1 x2 =>
    let y := coupling_forward R_group f g (x1, x2) in dy1 * fst y + dy2 * snd y in
  let dx := fst (coupling_vjp R_group f (fun t d => (f' t * d, tt)) (fun t d => (g' t * d, tt))
                   (x1, x2) (dy1, dy2)) in
  is_derive (fun t => loss t x2) x1 (fst dx) /\ is_derive (fun t => loss x1 t) x2 (snd dx).
Proof.
  intros f g f' g' x1 x2 dy1 dy2 Hf Hg loss dx; unfold loss, dx; simpl.
  split.
  - auto_derive.
    + exists (g' (x1 + f x2)); apply Hg.
    + replace (Derive (fun x : R => g x) (x1 + f x2)) with (g' (x1 + f x2))
        by (symmetry; apply is_derive_unique, Hg).
      ring.
  - auto_derive.
    + repeat split; [exists (f' x2); apply Hf | exists (g' (x1 + f x2)); apply Hg
                    | exists (f' x2); apply Hf].
    + replace (Derive (fun x : R => g x) (x1 + f x2)) with (g' (x1 + f x2))
        by (symmetry; apply is_derive_unique, Hg).
      replace (Derive (fun x : R => f x) x2) with (f' x2)
        by (symmetry; apply is_derive_unique, Hf).
      ring.
Qed.
