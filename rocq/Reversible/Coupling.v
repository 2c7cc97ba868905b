(** * Additive coupling layers and their exact inverse.

    A coupling layer splits its input in two halves [(x1, x2)] and, for
    two arbitrary functions [f] and [g] (the "residual" sub-networks),
    computes

      y1 = x1 + f x2
      y2 = x2 + g y1

    Its inverse recomputes [f] and [g] on values it already has:

      x2 = y2 - g y1
      x1 = y1 - f x2

    The layer is written over a record [group_ops] of the operations
    [+ - 0] of an abstract type, so that it is extracted once and run by
    the oracle with floats (inexact) and with integers (exact, see
    [FixedPoint.v]).  The inversion theorems need only that the
    operations form a commutative group ([comm_group_laws]); they hold
    for every [f] and [g], with no continuity or invertibility
    assumption on them.  Instances proved here: any commutative group
    (e.g. [R], [Z]), and vectors as lists whose halves have one length
    [n], pointwise, when [f] and [g] map length-[n] lists to length-[n]
    lists. *)

From Coq Require Import List Reals Lra.
From Ojas Require Import ScalarOps.
Import ListNotations.

(** The operations a coupling layer uses: zero, addition, subtraction. *)
Record group_ops (T : Type) : Type := {
  g_zero : T;
  g_add : T -> T -> T;
  g_sub : T -> T -> T
}.

Arguments g_zero {T}. Arguments g_add {T}. Arguments g_sub {T}.

(** The group operations of a [ScalarOps] (floats in the oracle, [R_ops]
    or a rounding model in the proofs). *)
Definition scalar_group {T} (o : ScalarOps T) : group_ops T :=
  {| g_zero := sc_zero o; g_add := sc_add o; g_sub := sc_sub o |}.

(** Exact real arithmetic. *)
Definition R_group : group_ops R := scalar_group R_ops.

(** ** Vectors: lists, pointwise.

    Like [Vector.vadd], the operations pad the shorter argument (a
    missing entry behaves as zero).  On lists of equal length they are the
    pointwise group operations. *)
Section ListGroup.
Context {T : Type} (o : group_ops T).

Fixpoint list_add (a b : list T) : list T :=
  match a, b with
  | x :: a', y :: b' => g_add o x y :: list_add a' b'
  | [], _ => b
  | _, [] => a
  end.

Fixpoint list_sub (a b : list T) : list T :=
  match a, b with
  | x :: a', y :: b' => g_sub o x y :: list_sub a' b'
  | [], _ => map (g_sub o (g_zero o)) b
  | _, [] => a
  end.

(** Pointwise operations on lists. *)
Definition list_group : group_ops (list T) :=
  {| g_zero := []; g_add := list_add; g_sub := list_sub |}.

End ListGroup.

(** ** The layer *)
Section Coupling.
Context {T : Type} (o : group_ops T).

(** Forward: [y1 = x1 + f x2], [y2 = x2 + g y1]. *)
Definition coupling_forward (f g : T -> T) (x : T * T) : T * T :=
  let '(x1, x2) := x in
  let y1 := g_add o x1 (f x2) in
  (y1, g_add o x2 (g y1)).

(** Inverse: [x2 = y2 - g y1], [x1 = y1 - f x2]. *)
Definition coupling_inverse (f g : T -> T) (y : T * T) : T * T :=
  let '(y1, y2) := y in
  let x2 := g_sub o y2 (g y1) in
  (g_sub o y1 (f x2), x2).

End Coupling.

(** ** Commutative group laws *)

(** [+] is associative and commutative with neutral [0], and [a - b] is
    the solution of [? + b = a]: a commutative group written with
    subtraction instead of an opposite (the opposite of [b] is [0 - b]). *)
Record comm_group_laws {T} (o : group_ops T) : Prop := {
  g_add_assoc : forall a b c, g_add o (g_add o a b) c = g_add o a (g_add o b c);
  g_add_comm : forall a b, g_add o a b = g_add o b a;
  g_add_0_r : forall a, g_add o a (g_zero o) = a;
  g_sub_add : forall a b, g_add o (g_sub o a b) b = a
}.

Section GroupFacts.
Context {T : Type} (o : group_ops T) (H : comm_group_laws o).

Lemma g_add_cancel_r : forall a b c, g_add o a c = g_add o b c -> a = b.
Proof.
  intros a b c E.
  assert (K : forall x, g_add o (g_add o x c) (g_sub o (g_zero o) c) = x).
  { intros x; rewrite (g_add_assoc _ H), (g_add_comm _ H c), (g_sub_add _ H),
      (g_add_0_r _ H); reflexivity. }
  rewrite <- (K a), <- (K b), E; reflexivity.
Qed.

Lemma g_add_sub : forall a b, g_sub o (g_add o a b) b = a.
Proof.
  intros a b; apply (g_add_cancel_r _ _ b); apply (g_sub_add _ H).
Qed.

End GroupFacts.

(** [R] is a commutative group. *)
Lemma R_group_laws : comm_group_laws R_group.
Proof. split; intros; simpl; ring. Qed.

(** ** Exact inversion *)
Section Inverse.
Context {T : Type} (o : group_ops T) (H : comm_group_laws o).

(** The inverse undoes the forward pass exactly, for arbitrary [f], [g]. *)
Theorem coupling_inverse_forward : forall f g x,
  coupling_inverse o f g (coupling_forward o f g x) = x.
Proof.
  intros f g [x1 x2]; unfold coupling_forward, coupling_inverse.
  rewrite !(g_add_sub _ H); reflexivity.
Qed.

(** The forward pass undoes the inverse exactly, for arbitrary [f], [g]. *)
Theorem coupling_forward_inverse : forall f g y,
  coupling_forward o f g (coupling_inverse o f g y) = y.
Proof.
  intros f g [y1 y2]; unfold coupling_forward, coupling_inverse.
  rewrite !(g_sub_add _ H); reflexivity.
Qed.

End Inverse.

(** ** Vectors as lists of one length *)
Section ListInverse.
Context {T : Type} (o : group_ops T) (H : comm_group_laws o).

Lemma length_list_add : forall a b,
  length b = length a -> length (list_add o a b) = length a.
Proof.
  induction a as [|x a IH]; intros [|y b] E; simpl in *; try discriminate; auto.
Qed.

Lemma length_list_sub : forall a b,
  length b = length a -> length (list_sub o a b) = length a.
Proof.
  induction a as [|x a IH]; intros [|y b] E; simpl in *; try discriminate; auto.
Qed.

Lemma list_add_sub : forall a b,
  length b = length a -> list_sub o (list_add o a b) b = a.
Proof.
  induction a as [|x a IH]; intros [|y b] E; simpl in *; try discriminate; auto.
  rewrite (g_add_sub _ H), IH; auto.
Qed.

Lemma list_sub_add : forall a b,
  length b = length a -> list_add o (list_sub o a b) b = a.
Proof.
  induction a as [|x a IH]; intros [|y b] E; simpl in *; try discriminate; auto.
  rewrite (g_sub_add _ H), IH; auto.
Qed.

(** [f] maps lists of length [n] to lists of length [n]. *)
Definition keeps_length (n : nat) (f : list T -> list T) : Prop :=
  forall v, length v = n -> length (f v) = n.

(** On vectors (lists) of one length [n], the inverse undoes the forward
    pass exactly, for arbitrary length-preserving [f], [g]. *)
Theorem coupling_inverse_forward_list : forall n f g x1 x2,
  keeps_length n f -> keeps_length n g -> length x1 = n -> length x2 = n ->
  coupling_inverse (list_group o) f g (coupling_forward (list_group o) f g (x1, x2))
  = (x1, x2).
Proof.
  intros n f g x1 x2 Hf Hg H1 H2; simpl.
  assert (Ly1 : length (list_add o x1 (f x2)) = n)
    by (rewrite length_list_add; [exact H1 | rewrite Hf; congruence]).
  rewrite list_add_sub by (rewrite Hg; congruence).
  rewrite list_add_sub by (rewrite Hf; congruence).
  reflexivity.
Qed.

(** On vectors (lists) of one length [n], the forward pass undoes the
    inverse exactly, for arbitrary length-preserving [f], [g]. *)
Theorem coupling_forward_inverse_list : forall n f g y1 y2,
  keeps_length n f -> keeps_length n g -> length y1 = n -> length y2 = n ->
  coupling_forward (list_group o) f g (coupling_inverse (list_group o) f g (y1, y2))
  = (y1, y2).
Proof.
  intros n f g y1 y2 Hf Hg H1 H2; simpl.
  assert (Lx2 : length (list_sub o y2 (g y1)) = n)
    by (rewrite length_list_sub; [exact H2 | rewrite Hg; congruence]).
  rewrite list_sub_add by (rewrite Hf; congruence).
  rewrite list_sub_add by (rewrite Hg; congruence).
  reflexivity.
Qed.

End ListInverse.
