(** * Witnesses of Attention/Float/ForwardAccRunningCounted.v (ojas_ref/verification/proof_audit.py).

    The constants and premises of Witnesses/Attention/Float/PerPairScoreError.v (one key, the
    H100 instances' dots), with [C = 0] (one visible key: none after the first) and
    [CGc = CG] ([cg^Tt <= CG] and [afe_bL < 1] of its premise bundle). *)

From Coq Require Import Reals ZArith QArith Qreals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision Attention.Float.OnlineSoftmaxTile Attention.Float.ForwardError.
From Ojas Require Import Attention.Float.SavedLseError Attention.Float.PerPairScoreError.
From Ojas Require Import Bounds.Rational Witnesses.Instances Witnesses.Bounds.Attention Witnesses.Attention.Float.ForwardError.
From Ojas Require Import FloatModel.DotError FloatModel.TensorCoreSum FloatModel.Tf32Product Witnesses.FloatModel.Tf32Product.
From Ojas Require Import Attention.Float.NumeratorError Attention.Float.ForwardPosteriori Attention.Float.ForwardAccError.
From Ojas Require Import Attention.Float.ForwardAccRunning Attention.Float.ForwardAccRunningCounted.
From Ojas Require Import Witnesses.Attention.Float.SavedLseError Witnesses.FloatModel.TensorCoreSum.
From Ojas Require Import Witnesses.Attention.Float.ForwardAccError Witnesses.Attention.Float.ForwardAccRunning.
From Ojas Require Import Witnesses.Attention.Float.PerPairScoreError.
Import ListNotations.
Open Scope R_scope.

Local Notation u := (ff_u (mp_a wM)).

Lemma wc_CGc : forall c scale uc P de V X Y P1 CG CR B N,
  afe_premises_de wM c scale uc P de V X Y P1 CG CR B N 1 -> cg wM ^ 0 * (1 + ff_u (mp_a wM)) ^ 1 <= CG.
Proof.
  intros c scale uc P de V X Y P1 CG CR B N [_ _ _ _ _ _ _ _ HG _ _].
  pose proof (u_le_cg wM); cbn [pow] in *; lra.
Qed.

Lemma wc_bL : forall c scale uc P de V X Y P1 CG CR B N Tt,
  afe_premises_de wM c scale uc P de V X Y P1 CG CR B N Tt ->
  afe_bL (ff_u (mp_a wM)) (mp_ue wM) (mp_eta_e wM) (ff_eta (mp_a wM)) B N Tt X P1 CG CR < 1.
Proof. intros c scale uc P de V X Y P1 CG CR B N Tt [_ _ _ _ _ _ _ _ _ _ H]; exact H. Qed.

Lemma wc_rec : forall (x : list R * R) (lo hi : list R * R -> R) k0 rs,
  filter (fun _ => true) (concat [[x]]) = k0 :: rs -> forall mx, le (nrec (list R * R) lo hi mx rs) 0.
Proof. intros x lo hi k0 rs H mx; cbn in H; injection H as _ <-; cbn; lia. Qed.

Definition attention_forward_acc_running_counted_tf32x3_op_pp_witness :=
  attention_forward_acc_running_counted_tf32x3_op_pp wM (rz_flx 24) (bpow radix2 (1 - 24)) 26 8 1 1
    [0] wa_c 1 u 0 1 (Q2R wf_X) (Q2R wf_Y) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR) _ _ _ 1 1 1 1 (fun _ => true) [[wa_key]] [1]
    (wpp_d wpp_tc_op [0]) (wpp_Dsc wpp_tc_op [0] [wa_key]) (wpp_Yw wpp_tc_op [0] [wa_key]) 0 (Q2R wf_CG)
    (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl) ltac:(lia) ltac:(lia) ltac:(lia) w_delta_op3
    ltac:(lia) ltac:(lia) w_delta_op3
    wa_exp2_0 wa_vis (wt_pre _) (Rle_refl _) (Rle_refl _) (Rle_refl _) eq_refl wt_keys_vis wfa_tiles_n (le_n 1) (le_n 1)
    (wfr_premise 1 [0]) (fun _ _ => Rle_refl _) (Rle_refl _) (Rle_refl _)
    (wc_CGc _ _ _ _ _ _ _ _ _ _ _ _ _ (wt_pre 0)) (wc_bL _ _ _ _ _ _ _ _ _ _ _ _ _ _ (wt_pre 0))
    (fun k0 rs H => wc_rec wa_key _ _ k0 rs H _).

Definition wc_tc_bf := tc_dot_op (tc_align_op 26) (rz_flx 24) 8.

Definition attention_forward_acc_running_counted_tc_op_pp_witness :=
  attention_forward_acc_running_counted_tc_op_pp wM (rz_flx 24) (bpow radix2 (1 - 24)) 26 8 1 1
    [0] wa_c 1 u 0 1 (Q2R wf_X) (Q2R wf_Y) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR) _ _ _ 1 1 1 1 (fun _ => true) [[wa_key]] [1]
    (wpp_d wc_tc_bf [0]) (wpp_Dsc wc_tc_bf [0] [wa_key]) (wpp_Yw wc_tc_bf [0] [wa_key]) 0 (Q2R wf_CG)
    (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl) ltac:(lia) ltac:(lia) ltac:(lia) wt_delta_op1
    ltac:(lia) ltac:(lia) wt_delta_op1
    wa_exp2_0 wa_vis (wt_pre _) (Rle_refl _) (Rle_refl _) (Rle_refl _) eq_refl wt_keys_vis wfa_tiles_n (le_n 1) (le_n 1)
    (wfr_premise 1 [0]) (fun _ _ => Rle_refl _) (Rle_refl _) (Rle_refl _)
    (wc_CGc _ _ _ _ _ _ _ _ _ _ _ _ _ (wt_pre 0)) (wc_bL _ _ _ _ _ _ _ _ _ _ _ _ _ _ (wt_pre 0))
    (fun k0 rs H => wc_rec wa_key _ _ k0 rs H _).

(** The saved lse, counted: the constants of Witnesses/Attention/Float/PerPairScoreError.v's
    lse witnesses, [C = 0], [CGc = CG]. *)

Definition attention_lse_error_dot_counted_pp_witness :=
  ltac:(refine (attention_lse_error_dot_counted_pp wM wa_lg (u + ff_eta (mp_a wM)) (/ 2) 2 wl_lg
                  (bdot (mp_a wM)) (gamma u 1) ((1 + gamma u (1 - 1)) * INR 1 * ff_eta (mp_a wM)) [1] wa_c 1 u 1
                  (Q2R wf_X) (Q2R wf_P1) (Q2R wf_CR) wa_cl u 0 (- ln (1 - wl_bL))
                  (wpp_d (bdot (mp_a wM)) [1]) (wpp_Dsc (bdot (mp_a wM)) [1] [wa_key]) 1 1 1 1 0 (Q2R wf_CG)
                  wa_key [] [] wa_exp2_0 wf_dm _ _ _ _ _ _ _ _ _ _ _
                  (wc_CGc _ _ _ _ _ _ _ _ _ _ _ _ _ (wt_pre 0)) _ _ _ _ _ _ _ _ _ _ ltac:(cbn; lia)); wpp_close).

Definition attention_lse_error_masked_dot_counted_pp_witness :=
  ltac:(refine (attention_lse_error_masked_dot_counted_pp wM wa_lg (u + ff_eta (mp_a wM)) (/ 2) 2 wl_lg
                  (bdot (mp_a wM)) (gamma u 1) ((1 + gamma u (1 - 1)) * INR 1 * ff_eta (mp_a wM)) [1] wa_c 1 u 1
                  (Q2R wf_X) (Q2R wf_P1) (Q2R wf_CR) wa_cl u 0 (- ln (1 - wl_bL))
                  (wpp_d (bdot (mp_a wM)) [1]) (wpp_Dsc (bdot (mp_a wM)) [1] [wa_key]) 1 1 1 1 0 (Q2R wf_CG)
                  (fun _ => true) [[wa_key]] _ _ wf_dm _ _ _ _ _ _ _ _ _ _ _
                  (wc_CGc _ _ _ _ _ _ _ _ _ _ _ _ _ (wt_pre 0)) _ _ _ _ _ _ _ _ _ _
                  (fun k0 rs H => wc_rec wa_key _ _ k0 rs H _)); wpp_close).

Definition attention_lse_error_masked_counted_tf32x3_op_pp_witness :=
  ltac:(refine (attention_lse_error_masked_counted_tf32x3_op_pp wM wa_lg (u + ff_eta (mp_a wM)) (/ 2) 2 wl_lg
                  (rz_flx 24) (bpow radix2 (1 - 24)) 26 8 1 [0] wa_c 1 u 0
                  (Q2R wf_X) (Q2R wf_P1) (Q2R wf_CR) wa_cl u 0 (- ln (1 - wl_bL))
                  (wpp_d wpp_tc_op [0]) (wpp_Dsc wpp_tc_op [0] [wa_key]) 1 1 1 1 0 (Q2R wf_CG)
                  (fun _ => true) [[wa_key]] (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl) ltac:(lia) ltac:(lia)
                  ltac:(lia) w_delta_op3 _ _ _ wl_keys0_vis _ _ _ _ _ _ _ (wl_X_rel _) _
                  (wc_CGc _ _ _ _ _ _ _ _ _ _ _ _ _ (wt_pre 0)) _ _ _ _ _ _ _ _ _ _
                  (fun k0 rs H => wc_rec wa_key _ _ k0 rs H _)); wpp_close).

Definition attention_lse_error_masked_counted_tc_op_pp_witness :=
  ltac:(refine (attention_lse_error_masked_counted_tc_op_pp wM wa_lg (u + ff_eta (mp_a wM)) (/ 2) 2 wl_lg
                  (rz_flx 24) (bpow radix2 (1 - 24)) 26 8 1 [0] wa_c 1 u 0
                  (Q2R wf_X) (Q2R wf_P1) (Q2R wf_CR) wa_cl u 0 (- ln (1 - wl_bL))
                  (wpp_d wc_tc_bf [0]) (wpp_Dsc wc_tc_bf [0] [wa_key]) 1 1 1 1 0 (Q2R wf_CG)
                  (fun _ => true) [[wa_key]] (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl) ltac:(lia) ltac:(lia)
                  ltac:(lia) wt_delta_op1 _ _ _ wl_keys0_vis _ _ _ _ _ _ _ (wl_X_rel _) _
                  (wc_CGc _ _ _ _ _ _ _ _ _ _ _ _ _ (wt_pre 0)) _ _ _ _ _ _ _ _ _ _
                  (fun k0 rs H => wc_rec wa_key _ _ k0 rs H _)); wpp_close).
