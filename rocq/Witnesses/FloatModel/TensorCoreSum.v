(** * Witnesses of FloatModel/TensorCoreSum.v (ojas_ref/verification/proof_audit.py):
    Flocq's truncating alignment to [F = 27] bits (three extra bits over fp32),
    the output rounded to nearest even or truncated in precision 24 (FLX),
    blocks of [k = 8], one block of the product [1 * 1]. *)

From Coq Require Import Reals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import FloatModel.TensorCoreSum.
Import ListNotations.
Open Scope R_scope.

Lemma w_bpow_m10 : bpow radix2 (-10) = / 1024.
Proof. simpl; unfold Z.pow_pos; simpl; field. Qed.

Lemma w_bpow_m4 : bpow radix2 (-4) = / 16.
Proof. simpl; unfold Z.pow_pos; simpl; field. Qed.

(** [3 tc_delta 8 < 1] for the alignment to 27 bits and any output error up to [1/16]. *)
Lemma w_tc_delta_small : forall ur, 0 <= ur <= / 16 ->
  INR 3 * tc_delta (bpow radix2 (1 - 27)) ur 8 < 1.
Proof.
  intros ur Hur; unfold tc_delta.
  assert (Ha : bpow radix2 (1 - 27) <= / 1024) by (rewrite <- w_bpow_m10; apply bpow_le; lia).
  pose proof (bpow_ge_0 radix2 (1 - 27)).
  replace (INR 3) with 3 by (simpl; ring).
  replace (INR (S 8)) with 9 by (simpl; ring).
  nra.
Qed.

Lemma w_ur_nearest : 0 <= bpow radix2 (- (24)) <= / 16.
Proof. split; [apply bpow_ge_0 | rewrite <- w_bpow_m4; apply bpow_le; lia]. Qed.

Lemma w_ur_trunc : 0 <= bpow radix2 (1 - 24) <= / 16.
Proof. split; [apply bpow_ge_0 | rewrite <- w_bpow_m4; apply bpow_le; lia]. Qed.

Lemma w_q1 : forall d, INR 3 * d < 1 -> 0 <= d -> INR 1 * d < 1.
Proof. intros d H H0; simpl in *; lra. Qed.

Lemma w_delta_nearest : INR 1 * tc_delta (bpow radix2 (1 - 27)) (bpow radix2 (- (24))) 8 < 1.
Proof.
  apply w_q1; [apply w_tc_delta_small, w_ur_nearest |].
  apply tc_delta_nonneg; apply bpow_ge_0.
Qed.

Lemma w_delta_trunc : INR 1 * tc_delta (bpow radix2 (1 - 27)) (bpow radix2 (1 - 24)) 8 < 1.
Proof.
  apply w_q1; [apply w_tc_delta_small, w_ur_trunc |].
  apply tc_delta_nonneg; apply bpow_ge_0.
Qed.

Definition tc_block_error_witness :=
  tc_block_error (tc_align 27) (rz_flx 24) (bpow radix2 (1 - 27)) (bpow radix2 (1 - 24))
    (bpow_ge_0 _ _) (bpow_ge_0 _ _) (tc_align_err 27) (rz_flx_err 24 eq_refl) 8 1 [1 * 1] ltac:(simpl; lia).

Definition tc_sum_error_bound_witness :=
  tc_sum_error_bound (tc_align 27) (rn_flx 24) (bpow radix2 (1 - 27)) (bpow radix2 (- (24)))
    (bpow_ge_0 _ _) (bpow_ge_0 _ _) (tc_align_err 27) (rn_flx_err 24 eq_refl) 8 1 [1 * 1]
    ltac:(lia) ltac:(lia) ltac:(simpl; lia) w_delta_nearest.

Definition tc_dot_error_bound_witness :=
  tc_dot_error_bound (tc_align 27) (rz_flx 24) (bpow radix2 (1 - 27)) (bpow radix2 (1 - 24))
    (bpow_ge_0 _ _) (bpow_ge_0 _ _) (tc_align_err 27) (rz_flx_err 24 eq_refl) 8 1 [1] [1]
    ltac:(lia) ltac:(lia) ltac:(simpl; lia) w_delta_trunc.

Definition tc_dot_error_nearest_witness :=
  tc_dot_error_nearest 24 27 8 1 [1] [1] eq_refl ltac:(lia) ltac:(lia) ltac:(simpl; lia) w_delta_nearest.

Definition tc_dot_error_trunc_witness :=
  tc_dot_error_trunc 24 27 8 1 [1] [1] eq_refl ltac:(lia) ltac:(lia) ltac:(simpl; lia) w_delta_trunc.

Lemma w_fp32_nearest : INR 1 * ((1 + / 16777216) * (INR (S 8) * bpow radix2 (1 - 27)) + / 16777216) < 1.
Proof.
  assert (E : bpow radix2 (- (24)) = / 16777216) by (simpl; unfold Z.pow_pos; simpl; field).
  pose proof w_delta_nearest as H; unfold tc_delta in H; rewrite E in H; exact H.
Qed.

Lemma w_fp32_trunc : INR 1 * ((1 + / 8388608) * (INR (S 8) * bpow radix2 (1 - 27)) + / 8388608) < 1.
Proof.
  assert (E : bpow radix2 (1 - 24) = / 8388608) by (simpl; unfold Z.pow_pos; simpl; field).
  pose proof w_delta_trunc as H; unfold tc_delta in H; rewrite E in H; exact H.
Qed.

Definition tc_dot_error_fp32_nearest_witness :=
  tc_dot_error_fp32_nearest 27 8 1 [1] [1] ltac:(lia) ltac:(lia) ltac:(simpl; lia) w_fp32_nearest.

Definition tc_dot_error_fp32_trunc_witness :=
  tc_dot_error_fp32_trunc 27 8 1 [1] [1] ltac:(lia) ltac:(lia) ltac:(simpl; lia) w_fp32_trunc.

(** The H100's model (blocks aligned to their operands' exponents): [F = 26]
    (two bits below float32's 24), the output truncated or rounded to nearest
    even in precision 24, blocks of [k = 16], the product [1 * 1]. *)

(** [tc_delta 16 < 1] for the alignment to 26 bits and any output error up to [1/16]. *)
Lemma w_op_delta_small : forall ur, 0 <= ur <= / 16 ->
  INR 1 * tc_delta (bpow radix2 (1 - 26)) ur 16 < 1.
Proof.
  intros ur Hur; unfold tc_delta.
  assert (Ha : bpow radix2 (1 - 26) <= / 1024) by (rewrite <- w_bpow_m10; apply bpow_le; lia).
  pose proof (bpow_ge_0 radix2 (1 - 26)).
  replace (INR 1) with 1 by (simpl; ring).
  replace (INR (S 16)) with 17 by (simpl; ring).
  nra.
Qed.

Lemma w_op_delta_trunc : INR 1 * tc_delta (bpow radix2 (1 - 26)) (bpow radix2 (1 - 24)) 16 < 1.
Proof. apply w_op_delta_small, w_ur_trunc. Qed.

Lemma w_op_delta_nearest : INR 1 * tc_delta (bpow radix2 (1 - 26)) (bpow radix2 (- (24))) 16 < 1.
Proof. apply w_op_delta_small, w_ur_nearest. Qed.

Definition tc_block_op_error_witness :=
  tc_block_op_error (tc_align_op 26) (rz_flx 24) (bpow radix2 (1 - 26)) (bpow radix2 (1 - 24))
    (bpow_ge_0 _ _) (bpow_ge_0 _ _) (tc_align_op_err 26) (tc_align_op_0 26) (rz_flx_err 24 eq_refl)
    16 1 [(1, 1)] ltac:(simpl; lia).

Definition tc_dot_op_error_bound_witness :=
  tc_dot_op_error_bound (tc_align_op 26) (rz_flx 24) (bpow radix2 (1 - 26)) (bpow radix2 (1 - 24))
    (bpow_ge_0 _ _) (bpow_ge_0 _ _) (tc_align_op_err 26) (tc_align_op_0 26) (rz_flx_err 24 eq_refl)
    16 1 [1] [1] ltac:(lia) ltac:(lia) ltac:(simpl; lia) w_op_delta_trunc.

Lemma w_op_fp32_trunc : INR 1 * ((1 + / 8388608) * (INR (S 16) * bpow radix2 (1 - 26)) + / 8388608) < 1.
Proof.
  assert (E : bpow radix2 (1 - 24) = / 8388608) by (simpl; unfold Z.pow_pos; simpl; field).
  pose proof w_op_delta_trunc as H; unfold tc_delta in H; rewrite E in H; exact H.
Qed.

Lemma w_op_fp32_nearest : INR 1 * ((1 + / 16777216) * (INR (S 16) * bpow radix2 (1 - 26)) + / 16777216) < 1.
Proof.
  assert (E : bpow radix2 (- (24)) = / 16777216) by (simpl; unfold Z.pow_pos; simpl; field).
  pose proof w_op_delta_nearest as H; unfold tc_delta in H; rewrite E in H; exact H.
Qed.

Definition tc_dot_op_error_fp32_trunc_witness :=
  tc_dot_op_error_fp32_trunc 26 16 1 [1] [1] ltac:(lia) ltac:(lia) ltac:(simpl; lia) w_op_fp32_trunc.

Definition tc_dot_op_error_fp32_nearest_witness :=
  tc_dot_op_error_fp32_nearest 26 16 1 [1] [1] ltac:(lia) ltac:(lia) ltac:(simpl; lia) w_op_fp32_nearest.

Definition tc_acc_dot_op_error_bound_witness :=
  tc_acc_dot_op_error_bound (tc_align_op 26) (rz_flx 24) (bpow radix2 (1 - 26)) (bpow radix2 (1 - 24))
    (bpow_ge_0 _ _) (bpow_ge_0 _ _) (tc_align_op_err 26) (tc_align_op_0 26) (rz_flx_err 24 eq_refl)
    16 1 1 [1] [1] ltac:(lia) ltac:(lia) ltac:(simpl; lia) w_op_delta_trunc.
