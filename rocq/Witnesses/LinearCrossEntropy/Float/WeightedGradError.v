(** * Witnesses of LinearCrossEntropy/Float/WeightedGradError.v (ojas_ref/verification/proof_audit.py):
    [bf16_fp32], [tl.exp] and [tl.log] the rounded [exp] and [ln] (Witnesses/Instances.v); one item
    (one kept token, its target, logit 0, other operand 1, token weight 1), the accumulation of a
    product's terms exact ([gd = 0]), grad_output 1 exact; for the two-level forward the row of
    one logit [0] in one group of one tile, its lse the one the forward computes
    (Witnesses/LinearCrossEntropy/Float/LseLossError.v's [w_bL2]). *)

From Coq Require Import Reals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision FloatModel.BlockedSum LinearCrossEntropy.Float.LseLossError.
From Ojas Require Import LinearCrossEntropy.Float.GradError LinearCrossEntropy.Float.WeightedGradError.
From Ojas Require Import Witnesses.Instances Witnesses.LinearCrossEntropy.Float.LseLossError.
From Ojas Require Import Witnesses.LinearCrossEntropy.Float.GradError.
Import ListNotations.
Open Scope R_scope.

Local Notation u := (ff_u (mp_a wM)).
Local Notation eta := (ff_eta (mp_a wM)).

Lemma w_abs00 : Rabs (0 - 0) <= 0.
Proof. rewrite Rminus_0_r, Rabs_R0; apply Rle_refl. Qed.

Lemma w_w11 : Rabs (1 - 1) <= 0 * Rabs 1.
Proof. exact w_alpha. Qed.

Definition ce_wg_close_witness :=
  ce_wg_close wM w_ex u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_ex_err 0 0 0 0 1 1 0 0 0 0 w_X true
    (Rle_refl 0) w_w11 w_abs00 w_abs00 w_abs00 (Rle_refl w_X).

(** The item of dW's product: token weight 1, exact. *)
Definition w_one (_ : unit) : R := 1.

Lemma w_cw_ok : forall xs x, In x xs -> cw_ok unit w_z w_z w_z w_z w_one w_one 0 0 0 0 x.
Proof. intros xs x _; unfold w_z, w_one; repeat split; first [apply w_abs00 | apply w_w11]. Qed.

Definition ce_dw4_error_witness :=
  ce_dw4_error wM w_ex u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_ex_err unit w_z w_z w_z w_z w_h w_one w_one w_t
    rsum 0 0 0 0 0 w_X [tt; tt] (Rle_refl 0) (Rle_refl 0) (Rle_refl w_X) (w_exact_sum _) (w_cw_ok _).

Definition ce_dh4_error_witness :=
  ce_dh4_error wM w_ex u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_ex_err unit w_z w_z w_z w_z w_h w_t w_t
    rsum 1 1 0 0 0 0 0 w_X 1 [tt]
    (Rle_refl 0) w_alpha (Rle_refl 0) (Rle_refl 0) (Rle_refl 0) (Rle_refl 0) (Rle_refl w_X)
    (w_exact_sum _) (w_ok_all _).
