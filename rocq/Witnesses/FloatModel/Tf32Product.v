(** * Witnesses of FloatModel/Tf32Product.v (ojas_ref/verification/proof_audit.py):
    Triton's conversions (the high part rounded to nearest, ties away, the low
    part truncated, both to precision 11: [tf32_rna], [tf32_rz]), float32
    accumulation left to right (Flocq's FLX format of precision 24) or on
    tensor cores (TensorCoreSum.v's instances: alignment truncated to 27 bits,
    blocks of 8, output truncated or rounded to nearest), small vectors. *)

From Coq Require Import Reals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision FloatModel.TensorCoreSum FloatModel.Tf32Product.
From Ojas Require Import Witnesses.FloatModel.TensorCoreSum.
Import ListNotations.
Open Scope R_scope.

Definition tf32_split_exact_witness :=
  tf32_split_exact Ztrunc valid_rnd_ZR 1 fp32_fmt_1.

Definition tf32_split_sub_exact_witness :=
  tf32_split_sub_exact ZnearestA (valid_rnd_N _) 1 fp32_fmt_1.

Definition tf32x3_product_error_witness :=
  tf32x3_product_error tf32_rna tf32_rz (bpow radix2 (-11)) (bpow radix2 (-10))
    (bpow_ge_0 _ _) tf32_rna_err tf32_rz_err (/ 3) (/ 7).

Lemma w_exact_chain : forall x S, Rabs (x - x) <= 0 * S.
Proof. intros; rewrite Rminus_diag_eq, Rabs_R0 by reflexivity; lra. Qed.

Definition w_s1 : R :=
  rsum (tf32x3_lo1 tf32_rna tf32_rz [/ 3] [/ 7] ++ tf32x3_lo2 tf32_rna tf32_rz [/ 3] [/ 7]).

Lemma w_chain_hi : forall S,
  Rabs (w_s1 + rsum (tf32x3_hi tf32_rna [/ 3] [/ 7]) - (w_s1 + rsum (tf32x3_hi tf32_rna [/ 3] [/ 7]))) <= 0 * S.
Proof. intros; apply w_exact_chain. Qed.

Definition tf32x3_dot_chain_error_witness :=
  tf32x3_dot_chain_error tf32_rna tf32_rz (bpow radix2 (-11)) (bpow radix2 (-10))
    (bpow_ge_0 _ _) (bpow_ge_0 _ _) tf32_rna_err tf32_rz_err [/ 3] [/ 7]
    w_s1 (w_s1 + rsum (tf32x3_hi tf32_rna [/ 3] [/ 7])) 0 0 (Rle_refl 0) (Rle_refl 0)
    (w_exact_chain _ _) (w_chain_hi _).

Lemma w_seq_small : INR (3 * length [/ 3; / 5]) * ff_u fp32_flx < 1.
Proof. rewrite fp32_flx_u; simpl; lra. Qed.

Definition tf32x3_dot_seq_error_witness :=
  tf32x3_dot_seq_error tf32_rna tf32_rz (bpow radix2 (-11)) (bpow radix2 (-10))
    (bpow_ge_0 _ _) (bpow_ge_0 _ _) tf32_rna_err tf32_rz_err fp32_flx [/ 3; / 5] [/ 7; / 11]
    eq_refl (tf32x3_terms_fp32 _ _) w_seq_small.

Definition tf32x3_dot_seq_error_fp32_witness :=
  tf32x3_dot_seq_error_fp32 [/ 3; / 5] [/ 7; / 11] eq_refl ltac:(simpl; lra).

Lemma w_delta_trunc3 : INR (3 * 1) * tc_delta (bpow radix2 (1 - 27)) (bpow radix2 (1 - 24)) 8 < 1.
Proof. apply w_delta_small; [lia | lia | lia | exact w_ur_trunc]. Qed.

Lemma w_delta_nearest3 : INR (3 * 1) * tc_delta (bpow radix2 (1 - 27)) (bpow radix2 (- (24))) 8 < 1.
Proof. apply w_delta_small; [lia | lia | lia | exact w_ur_nearest]. Qed.

Definition tf32x3_dot_tc_error_witness :=
  tf32x3_dot_tc_error tf32_rna tf32_rz (bpow radix2 (-11)) (bpow radix2 (-10))
    (bpow_ge_0 _ _) (bpow_ge_0 _ _) tf32_rna_err tf32_rz_err
    (tc_align 27) (rz_flx 24) (bpow radix2 (1 - 27)) (bpow radix2 (1 - 24))
    (bpow_ge_0 _ _) (bpow_ge_0 _ _) (tc_align_err 27) (rz_flx_err 24 eq_refl)
    8 1 [/ 3; / 5] [/ 7; / 11] ltac:(lia) ltac:(lia) eq_refl ltac:(simpl; lia) w_delta_trunc3.

Definition tf32x3_dot_tc_fp32_trunc_witness :=
  tf32x3_dot_tc_fp32_trunc 27 8 1 [/ 3; / 5] [/ 7; / 11] ltac:(lia) ltac:(lia) eq_refl ltac:(simpl; lia)
    w_delta_trunc3.

Definition tf32x3_dot_tc_fp32_nearest_witness :=
  tf32x3_dot_tc_fp32_nearest 27 8 1 [/ 3; / 5] [/ 7; / 11] ltac:(lia) ltac:(lia) eq_refl ltac:(simpl; lia)
    w_delta_nearest3.

(** On the H100's tensor cores: the block's terms aligned to the operands'
    exponents, 26 bits kept ([tc_align_op 26]), blocks of 8, output truncated. *)
Lemma w_delta_op3 : INR (3 * 1) * tc_delta (bpow radix2 (1 - 26)) (bpow radix2 (1 - 24)) 8 < 1.
Proof. apply w_delta_small; [lia | lia | lia | exact w_ur_trunc]. Qed.

Definition tf32x3_dot_tc_op_error_witness :=
  tf32x3_dot_tc_op_error tf32_rna tf32_rz (bpow radix2 (-11)) (bpow radix2 (-10))
    (bpow_ge_0 _ _) (bpow_ge_0 _ _) tf32_rna_err tf32_rz_err
    (tc_align_op 26) (rz_flx 24) (bpow radix2 (1 - 26)) (bpow radix2 (1 - 24))
    (bpow_ge_0 _ _) (bpow_ge_0 _ _) (tc_align_op_err 26) (tc_align_op_0 26) (rz_flx_err 24 eq_refl)
    8 1 [/ 3; / 5] [/ 7; / 11] ltac:(lia) ltac:(lia) eq_refl ltac:(simpl; lia) w_delta_op3.
