(** * The exact integer (fixed-point) instance of coupling layers.

    In the exact mode the residual stream is carried in fixed point:
    a real activation [x] is stored as the integer [round (x * 2^k)], and
    the output of each residual function is rounded to an integer before
    it is added.  Integer addition and subtraction are exact, so the
    coupling inverse reconstructs the input bit for bit, whatever the
    residual functions compute (including their own rounding): the
    theorems below hold for arbitrary [f g : Z -> Z] (scalars) or
    [f g : list Z -> list Z] (vectors of one length).

    [Z_group] is what the oracle runs (extracted [Z] is OCaml [int]; the
    glue must keep values far from [2^62]). *)

From Coq Require Import List ZArith Reals.
From Ojas Require Import Reversible.Coupling Reversible.Stack.
Import ListNotations.

(** Integer addition and subtraction. *)
Definition Z_group : group_ops Z :=
  {| g_zero := 0%Z; g_add := Z.add; g_sub := Z.sub |}.

Lemma Z_group_laws : comm_group_laws Z_group.
Proof. split; intros; simpl; ring. Qed.

(** Integer vectors (lists), pointwise. *)
Definition Zvec_group : group_ops (list Z) := list_group Z_group.

(** A residual function on reals turned into an integer one at scale
    [s] (e.g. [s = 2^k]): dequantize, apply [F], scale, round with
    [round] (any rounding, e.g. to nearest). *)
Definition fixed_residual (s : R) (round : R -> Z) (F : R -> R) : Z -> Z :=
  fun z => round (F (IZR z / s) * s)%R.

(** Fixed point, scalars: the inverse undoes the forward pass exactly,
    for arbitrary [f g : Z -> Z]. *)
Theorem fixed_point_inverse_exact : forall (f g : Z -> Z) x,
  coupling_inverse Z_group f g (coupling_forward Z_group f g x) = x.
Proof. intros; apply (coupling_inverse_forward _ Z_group_laws). Qed.

(** Fixed point, scalars: the forward pass undoes the inverse exactly. *)
Theorem fixed_point_forward_inverse_exact : forall (f g : Z -> Z) y,
  coupling_forward Z_group f g (coupling_inverse Z_group f g y) = y.
Proof. intros; apply (coupling_forward_inverse _ Z_group_laws). Qed.

(** The exact mode: real residual functions [F], [G] rounded to integers
    at scale [s]; reconstruction is exact whatever [s], [round], [F],
    [G] are. *)
Theorem fixed_point_quantized_exact : forall s round (F G : R -> R) x,
  let f := fixed_residual s round F in
  let g := fixed_residual s round G in
  coupling_inverse Z_group f g (coupling_forward Z_group f g x) = x.
Proof. intros; apply fixed_point_inverse_exact. Qed.

(** Fixed point, vectors of length [n]: exact inversion for arbitrary
    length-preserving [f g : list Z -> list Z]. *)
Theorem fixed_point_inverse_exact_list : forall n f g x1 x2,
  keeps_length n f -> keeps_length n g -> length x1 = n -> length x2 = n ->
  coupling_inverse Zvec_group f g (coupling_forward Zvec_group f g (x1, x2)) = (x1, x2).
Proof. intros; apply (coupling_inverse_forward_list _ Z_group_laws n); auto. Qed.

(** Fixed point, a stack of scalar layers: [stack_inverse] undoes
    [stack_forward] exactly. *)
Theorem fixed_point_stack_inverse_exact : forall ls x,
  stack_inverse Z_group ls (stack_forward Z_group ls x) = x.
Proof. intros; apply (stack_inverse_forward _ Z_group_laws). Qed.

(** Fixed point, a stack over vectors of length [n] with length-preserving
    layers: [stack_inverse] undoes [stack_forward] exactly. *)
Theorem fixed_point_stack_inverse_exact_list : forall n ls x1 x2,
  layers_keep_length n ls -> length x1 = n -> length x2 = n ->
  stack_inverse Zvec_group ls (stack_forward Zvec_group ls (x1, x2)) = (x1, x2).
Proof. intros; apply (stack_inverse_forward_list _ Z_group_laws n); auto. Qed.
