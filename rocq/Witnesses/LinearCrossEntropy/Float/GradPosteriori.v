(** * Witnesses of LinearCrossEntropy/Float/GradPosteriori.v (ojas_ref/verification/proof_audit.py):
    the instances of Witnesses/LinearCrossEntropy/Float/LseLossError.v ([bf16_fp32], [tl.exp] and
    [tl.log] the rounded [exp] and [ln], [tl.sum] left to right, one row of one logit, the target
    that logit), and for the products those of Witnesses/LinearCrossEntropy/Float/GradError.v (one
    kept target item, float32 accumulation left to right, FMA epilogue). *)

From Coq Require Import Reals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision FloatModel.BlockedSum LinearCrossEntropy.Float.LseLossError.
From Ojas Require Import LinearCrossEntropy.Float.LossPosteriori LinearCrossEntropy.Float.GradError LinearCrossEntropy.Float.GradPosteriori.
From Ojas Require Import Witnesses.Instances Witnesses.LinearCrossEntropy.Float.LseLossError Witnesses.LinearCrossEntropy.Float.GradError.
Import ListNotations.
Open Scope R_scope.

Local Notation u := (ff_u (mp_a wM)).
Local Notation eta := (ff_eta (mp_a wM)).

Lemma w_wterm : rsum (map (ce_wterm 0 0) [(0, 0)]) <= 0 * ce_sum_exp snd [(0, 0)].
Proof.
  unfold ce_wterm; cbn [map fst snd]; rewrite !Rminus_0_r, Rabs_R0, exp_0, Rminus_diag_eq, Rmult_0_r by reflexivity.
  unfold rsum; simpl; lra.
Qed.

Lemma w_neg_ln_1 : - ln (1 - 0) <= 0.
Proof. rewrite Rminus_0_r, ln_1; lra. Qed.

Lemma w_row : forall zy, In zy (concat [[(0, 0)]]) -> ff_fmt (mp_a wM) (fst zy) /\ Rabs (fst zy) <= 0.
Proof. intros zy Hi; destruct (w_row_ok zy Hi) as [F [Z _]]; split; assumption. Qed.

Definition ce_arg_posteriori_witness :=
  ltac:(refine (ce_arg_posteriori wM w_ex u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_ex_err
                  w_lg w_el (/ 2) 4 w_lg_fmt w_lg_err (0, 0) [[(0, 0)]] (tile_sum (mp_a wM)) 0 1 1 1
                  0 1 0 (- ln (1 - w_bL)) ((1 + u) ^ 0) (LseLossError.ce_Q u u ^ 1) (ce_a u u eta 1 ^ 1) 0 0 0 0
                  _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _);
        first [ apply w_row | apply w_wterm | apply w_neg_ln_1 | left; reflexivity | lra | w_close ]).

(** The item's exponent within 0 of the exact one. *)
Definition w_X0 (_ : unit) : R := exp (0 + u * 0 + eta).

Lemma w_gp_ok : forall xs x, In x xs -> ce_gp_ok wM unit w_z w_z w_z w_z w_t (fun _ => 0) (fun _ => 0) w_X0 x.
Proof.
  intros xs x _ _; unfold w_z, w_X0; rewrite !Rminus_0_r, Rabs_R0; split; [lra | split; [lra | apply Rle_refl]].
Qed.

Definition ce_gp_dw_error_witness :=
  ce_gp_dw_error wM w_ex u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_ex_err unit w_z w_z w_z w_z w_h w_t w_t
    w_dsum (fun a c => ff_rnd (mp_a wM) (1 * a + c)) 1 1 0 w_gd (fun _ => 0) (fun _ => 0) w_X0 [[tt; tt]; [tt]]
    (epi_fma_ok wM 1) (Rle_refl 0) w_alpha w_gd_nonneg w_dsum_ok_cs (w_gp_ok _).

Definition ce_gp_dh_error_witness :=
  ce_gp_dh_error wM w_ex u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_ex_err unit w_z w_z w_z w_z w_h w_t w_t
    w_dsum 1 1 0 w_gd (fun _ => 0) (fun _ => 0) w_X0 [tt; tt]
    (Rle_refl 0) w_alpha w_gd_nonneg (w_dsum_ok _ _ [tt; tt] ltac:(cbn; lia)) (w_gp_ok _).
