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

(** [q tc_delta k < 1] for an alignment to [F >= 11] bits, any output error up to [1/16],
    [q <= 3] blocks of [k <= 16]. *)
Lemma w_delta_small : forall F q k ur, (11 <= F)%Z -> (q <= 3)%nat -> (k <= 16)%nat -> 0 <= ur <= / 16 ->
  INR q * tc_delta (bpow radix2 (1 - F)) ur k < 1.
Proof.
  intros F q k ur HF Hq Hk [Hu0 Hu1]; unfold tc_delta.
  set (a := bpow radix2 (1 - F)).
  assert (Ha : a <= / 1024) by (unfold a; rewrite <- w_bpow_m10; apply bpow_le; lia).
  assert (Ha0 : 0 <= a) by apply bpow_ge_0.
  assert (HQ : INR q <= 3) by (replace 3 with (INR 3) by (simpl; ring); apply le_INR; exact Hq).
  assert (HK : INR (S k) <= 17) by (replace 17 with (INR 17) by (simpl; ring); apply le_INR; lia).
  pose proof (pos_INR q) as Hq0; pose proof (pos_INR (S k)) as Hk0.
  assert (H1 : INR (S k) * a <= 17 * / 1024) by (apply Rmult_le_compat; lra).
  assert (H2 : (1 + ur) * (INR (S k) * a) <= (1 + / 16) * (17 * / 1024))
    by (apply Rmult_le_compat; [lra | apply Rmult_le_pos; lra | lra | exact H1]).
  assert (H3 : INR q * ((1 + ur) * (INR (S k) * a) + ur) <= 3 * ((1 + / 16) * (17 * / 1024) + / 16)).
  { apply Rmult_le_compat; [lra | | lra | lra].
    assert (0 <= (1 + ur) * (INR (S k) * a)) by (apply Rmult_le_pos; [lra | apply Rmult_le_pos; lra]); lra. }
  lra.
Qed.

Lemma w_ur_nearest : 0 <= bpow radix2 (- (24)) <= / 16.
Proof. split; [apply bpow_ge_0 | rewrite <- w_bpow_m4; apply bpow_le; lia]. Qed.

Lemma w_ur_trunc : 0 <= bpow radix2 (1 - 24) <= / 16.
Proof. split; [apply bpow_ge_0 | rewrite <- w_bpow_m4; apply bpow_le; lia]. Qed.

Lemma w_delta_nearest : INR 1 * tc_delta (bpow radix2 (1 - 27)) (bpow radix2 (- (24))) 8 < 1.
Proof. apply w_delta_small; [lia | lia | lia | exact w_ur_nearest]. Qed.

Lemma w_delta_trunc : INR 1 * tc_delta (bpow radix2 (1 - 27)) (bpow radix2 (1 - 24)) 8 < 1.
Proof. apply w_delta_small; [lia | lia | lia | exact w_ur_trunc]. Qed.

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

(** The fp32 theorems' premise: [tc_delta] at the output error's value [c]. *)
Lemma w_fp32 : forall F q k ur c, ur = c -> INR q * tc_delta (bpow radix2 (1 - F)) ur k < 1 ->
  INR q * ((1 + c) * (INR (S k) * bpow radix2 (1 - F)) + c) < 1.
Proof. intros F q k ur c <- H; exact H. Qed.

Lemma w_bpow_m24 : bpow radix2 (- (24)) = / 16777216.
Proof. simpl; unfold Z.pow_pos; simpl; field. Qed.

Lemma w_bpow_m23 : bpow radix2 (1 - 24) = / 8388608.
Proof. simpl; unfold Z.pow_pos; simpl; field. Qed.

Definition tc_dot_error_fp32_nearest_witness :=
  tc_dot_error_fp32_nearest 27 8 1 [1] [1] ltac:(lia) ltac:(lia) ltac:(simpl; lia)
    (w_fp32 _ _ _ _ _ w_bpow_m24 w_delta_nearest).

Definition tc_dot_error_fp32_trunc_witness :=
  tc_dot_error_fp32_trunc 27 8 1 [1] [1] ltac:(lia) ltac:(lia) ltac:(simpl; lia)
    (w_fp32 _ _ _ _ _ w_bpow_m23 w_delta_trunc).

(** The H100's model (blocks aligned to their operands' exponents): [F = 26]
    (two bits below float32's 24), the output truncated or rounded to nearest
    even in precision 24, blocks of [k = 16], the product [1 * 1]. *)

Lemma w_op_delta_trunc : INR 1 * tc_delta (bpow radix2 (1 - 26)) (bpow radix2 (1 - 24)) 16 < 1.
Proof. apply w_delta_small; [lia | lia | lia | exact w_ur_trunc]. Qed.

Lemma w_op_delta_nearest : INR 1 * tc_delta (bpow radix2 (1 - 26)) (bpow radix2 (- (24))) 16 < 1.
Proof. apply w_delta_small; [lia | lia | lia | exact w_ur_nearest]. Qed.

Definition tc_block_op_error_witness :=
  tc_block_op_error (tc_align_op 26) (rz_flx 24) (bpow radix2 (1 - 26)) (bpow radix2 (1 - 24))
    (bpow_ge_0 _ _) (bpow_ge_0 _ _) (tc_align_op_err 26) (tc_align_op_0 26) (rz_flx_err 24 eq_refl)
    16 1 [(1, 1)] ltac:(simpl; lia).

Definition tc_dot_op_error_bound_witness :=
  tc_dot_op_error_bound (tc_align_op 26) (rz_flx 24) (bpow radix2 (1 - 26)) (bpow radix2 (1 - 24))
    (bpow_ge_0 _ _) (bpow_ge_0 _ _) (tc_align_op_err 26) (tc_align_op_0 26) (rz_flx_err 24 eq_refl)
    16 1 [1] [1] ltac:(lia) ltac:(lia) ltac:(simpl; lia) w_op_delta_trunc.

Definition tc_dot_op_error_fp32_trunc_witness :=
  tc_dot_op_error_fp32_trunc 26 16 1 [1] [1] ltac:(lia) ltac:(lia) ltac:(simpl; lia)
    (w_fp32 _ _ _ _ _ w_bpow_m23 w_op_delta_trunc).

Definition tc_dot_op_error_fp32_nearest_witness :=
  tc_dot_op_error_fp32_nearest 26 16 1 [1] [1] ltac:(lia) ltac:(lia) ltac:(simpl; lia)
    (w_fp32 _ _ _ _ _ w_bpow_m24 w_op_delta_nearest).

Definition tc_acc_dot_op_error_bound_witness :=
  tc_acc_dot_op_error_bound (tc_align_op 26) (rz_flx 24) (bpow radix2 (1 - 26)) (bpow radix2 (1 - 24))
    (bpow_ge_0 _ _) (bpow_ge_0 _ _) (tc_align_op_err 26) (tc_align_op_0 26) (rz_flx_err 24 eq_refl)
    16 1 1 [1] [1] ltac:(lia) ltac:(lia) ltac:(simpl; lia) w_op_delta_trunc.
