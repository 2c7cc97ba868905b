(** * Witnesses of ReLU/Backward.v (ojas_ref/verification/proof_audit.py): the mask [[true]],
    the real input [1], and binary32 ([prec = 24], [emax = 128]) with the smallest positive
    subnormal [2^-149] as input and gradient. *)

From Coq Require Import Reals ZArith List Lia Lra.
From Flocq Require Import Core IEEE754.Binary.
From Ojas Require Import ReLU.Backward.
Import ListNotations.
Open Scope R_scope.

Definition unpack_pack_witness := unpack_pack [true] 0 ltac:(cbn; lia).

Definition unpack_pack_tail_witness := unpack_pack_tail [true] 1 ltac:(cbn; lia).

Definition relu_backward_eq_derive_witness := relu_backward_eq_derive 1 1 R1_neq_R0.

(** The smallest positive binary32 subnormal, [2^-149]. *)
Definition w_tiny : binary_float 24 128 := B754_finite 24 128 false 1 (-149) eq_refl.

Lemma w_tiny_finite : is_finite 24 128 w_tiny = true.
Proof. reflexivity. Qed.

Lemma w_tiny_nonzero : B2R 24 128 w_tiny <> 0.
Proof. cbn; rewrite F2R_bpow; apply Rgt_not_eq, bpow_gt_0. Qed.

Definition mask_f_relu_witness := mask_f_relu 24 128 w_tiny.

Definition relu_mask_backward_bitwise_witness := relu_mask_backward_bitwise 24 128 w_tiny w_tiny.

Definition relu_packed_backward_bitwise_witness :=
  relu_packed_backward_bitwise 24 128 [w_tiny] [w_tiny] 0 ltac:(cbn; lia).

Definition relu_mask_backward_exact_witness :=
  relu_mask_backward_exact 24 128 w_tiny w_tiny w_tiny_finite w_tiny_finite.

Definition relu_float_backward_eq_derive_witness :=
  relu_float_backward_eq_derive 24 128 w_tiny w_tiny w_tiny_finite w_tiny_finite w_tiny_nonzero.

Definition relu_float_forward_exact_witness := relu_float_forward_exact 24 128 w_tiny w_tiny_finite.
