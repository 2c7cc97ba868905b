(** * Witnesses of Attention/Float/PerPairScoreError.v (ojas_ref/verification/proof_audit.py).

    Part 1: one item, exact scores, [d = 0], [D = pp_shift] itself. *)

From Coq Require Import Reals ZArith QArith Qreals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision Attention.Float.OnlineSoftmaxTile Attention.Float.ForwardError.
From Ojas Require Import Attention.Float.SavedLseError Attention.Float.PerPairScoreError.
From Ojas Require Import Bounds.Rational Witnesses.Instances Witnesses.Bounds.Attention Witnesses.Attention.Float.ForwardError.
From Ojas Require Import FloatModel.DotError FloatModel.TensorCoreSum FloatModel.Tf32Product Witnesses.FloatModel.Tf32Product.
From Ojas Require Import Attention.Float.NumeratorError Attention.Float.ForwardPosteriori Attention.Float.ForwardAccError.
From Ojas Require Import Attention.Float.ForwardAccRunning.
From Ojas Require Import Witnesses.Attention.Float.SavedLseError Witnesses.FloatModel.TensorCoreSum.
From Ojas Require Import Witnesses.Attention.Float.ForwardAccError Witnesses.Attention.Float.ForwardAccRunning.
Import ListNotations.
Open Scope R_scope.

Lemma wpp_zero : forall x : unit, In x [tt] -> Rabs ((fun _ => 0) x - (fun _ => 0) x) <= (fun _ => 0) x.
Proof. intros; rewrite Rminus_0_r, Rabs_R0; lra. Qed.

Definition lse_perturbation_pp_witness :=
  lse_perturbation_pp [tt] (fun _ => 0) (fun _ => 0) (fun _ => 0) ltac:(discriminate) wpp_zero.

Definition softmax_perturbation_pp_witness :=
  softmax_perturbation_pp [tt] (fun _ => 0) (fun _ => 0) (fun _ => 0) (fun _ => 0)
    (pp_shift [tt] (fun _ => 0) (fun _ => 0)) ltac:(discriminate) wpp_zero (Rle_refl _).

(** Part 2: the constants of Witnesses/Attention/Float/SavedLseError.v; the per-key error
    [d] is each key's actual score error ([wpp_d]), [Dsc] its [pp_shift] itself. *)

Local Notation u := (ff_u (mp_a wM)).

Definition wpp_d (dotf : list R -> list R -> R) (q : list R) : list R * R -> R :=
  fun kv => Rabs (score2_with (mp_a wM) dotf wa_c q (fst kv) * ln 2 - 1 * dot_R q (fst kv)).

Definition wpp_Dsc (dotf : list R -> list R -> R) (q : list R) (keys : list (list R * R)) : R :=
  pp_shift keys (fun kv => 1 * dot_R q (fst kv)) (wpp_d dotf q).

Ltac wpp_close := first [ wl_close | exact (fun _ _ => Rle_refl _) ].

Definition attention_lse_error_dot_pp_witness :=
  ltac:(refine (attention_lse_error_dot_pp wM wa_lg (u + ff_eta (mp_a wM)) (/ 2) 2 wl_lg
                  (bdot (mp_a wM)) (gamma u 1) ((1 + gamma u (1 - 1)) * INR 1 * ff_eta (mp_a wM)) [1] wa_c 1 u 1
                  (Q2R wf_X) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR) wa_cl u 0 (- ln (1 - wl_bL))
                  (wpp_d (bdot (mp_a wM)) [1]) (wpp_Dsc (bdot (mp_a wM)) [1] [wa_key]) 1 1 1 1
                  wa_key [] [] wf_dm _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _); wpp_close).

Definition attention_lse_error_masked_dot_pp_witness :=
  ltac:(refine (attention_lse_error_masked_dot_pp wM wa_lg (u + ff_eta (mp_a wM)) (/ 2) 2 wl_lg
                  (bdot (mp_a wM)) (gamma u 1) ((1 + gamma u (1 - 1)) * INR 1 * ff_eta (mp_a wM)) [1] wa_c 1 u 1
                  (Q2R wf_X) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR) wa_cl u 0 (- ln (1 - wl_bL))
                  (wpp_d (bdot (mp_a wM)) [1]) (wpp_Dsc (bdot (mp_a wM)) [1] [wa_key]) 1 1 1 1
                  (fun _ => true) [[wa_key]] _ _ wf_dm _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _); wpp_close).

Definition wpp_tc := tf32x3_dot_tc tf32_rna tf32_rz (tc_align 27) (rz_flx 24) 8.
Definition wpp_tc_op := tf32x3_dot_tc_op tf32_rna tf32_rz (tc_align_op 26) (rz_flx 24) 8.

Definition attention_lse_error_masked_tf32x3_pp_witness :=
  ltac:(refine (attention_lse_error_masked_tf32x3_pp wM wa_lg (u + ff_eta (mp_a wM)) (/ 2) 2 wl_lg
                  (rz_flx 24) (bpow radix2 (1 - 24)) 27 8 1 [0] wa_c 1 u 0
                  (Q2R wf_X) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR) wa_cl u 0 (- ln (1 - wl_bL))
                  (wpp_d wpp_tc [0]) (wpp_Dsc wpp_tc [0] [wa_key]) 1 1 1 1
                  (fun _ => true) [[wa_key]] (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl) ltac:(lia) ltac:(lia)
                  ltac:(lia) w_delta_trunc3 _ _ _ wl_keys0_vis _ _ _ _ _ _ _ (wl_X_rel _) _ _ _ _ _ _ _ _ _ _ _ _);
        wpp_close).

Definition attention_lse_error_masked_tf32x3_op_pp_witness :=
  ltac:(refine (attention_lse_error_masked_tf32x3_op_pp wM wa_lg (u + ff_eta (mp_a wM)) (/ 2) 2 wl_lg
                  (rz_flx 24) (bpow radix2 (1 - 24)) 26 8 1 [0] wa_c 1 u 0
                  (Q2R wf_X) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR) wa_cl u 0 (- ln (1 - wl_bL))
                  (wpp_d wpp_tc_op [0]) (wpp_Dsc wpp_tc_op [0] [wa_key]) 1 1 1 1
                  (fun _ => true) [[wa_key]] (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl) ltac:(lia) ltac:(lia)
                  ltac:(lia) w_delta_op3 _ _ _ wl_keys0_vis _ _ _ _ _ _ _ (wl_X_rel _) _ _ _ _ _ _ _ _ _ _ _ _);
        wpp_close).

(** Part 3: the constants of Witnesses/Attention/Float/ForwardAccRunning.v; [d] and [Dsc] as
    in Part 2, [Yw] the weighted sum [sum_j P_j |v_j| (e^(d_j + Dsc) - 1)] itself. *)

Definition wpp_Yw (dotf : list R -> list R -> R) (q : list R) (keys : list (list R * R)) : R :=
  sm_avg keys (fun kv => 1 * dot_R q (fst kv))
    (fun kv => Rabs (snd kv) * (exp (wpp_d dotf q kv + wpp_Dsc dotf q keys) - 1)).

Definition attention_forward_acc_running_pp_witness :=
  attention_forward_acc_running_pp wM (bdot (mp_a wM)) (gamma u 1) ((1 + gamma u (1 - 1)) * INR 1 * ff_eta (mp_a wM))
    (fun c a b => ff_rnd (mp_a wM) (c + bdot (mp_a wM) a b)) 1 _ _
    [1] wa_c 1 u 1 1 (Q2R wf_X) (Q2R wf_Y) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR) _ _ _
    1 1 1 (fun _ => true) [[wa_key]] [1]
    (wpp_d (bdot (mp_a wM)) [1]) (wpp_Dsc (bdot (mp_a wM)) [1] [wa_key]) (wpp_Yw (bdot (mp_a wM)) [1] [wa_key])
    wa_exp2_0 wa_vis wf_dm blocked_acc_dot_model_witness wf_pre_de
    (Rle_refl _) (Rle_refl _) (Rle_refl _) eq_refl wf_keys_vis wfa_tiles_n (le_n 1) (le_n 1) (wfr_premise 1 [1])
    (fun _ _ => Rle_refl _) (Rle_refl _) (Rle_refl _).

Definition attention_forward_acc_running_tf32x3_op_pp_witness :=
  attention_forward_acc_running_tf32x3_op_pp wM (rz_flx 24) (bpow radix2 (1 - 24)) 26 8 1 1
    [0] wa_c 1 u 0 1 (Q2R wf_X) (Q2R wf_Y) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR) _ _ _ 1 1 1 1 (fun _ => true) [[wa_key]] [1]
    (wpp_d wpp_tc_op [0]) (wpp_Dsc wpp_tc_op [0] [wa_key]) (wpp_Yw wpp_tc_op [0] [wa_key])
    (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl) ltac:(lia) ltac:(lia) ltac:(lia) w_delta_op3
    ltac:(lia) ltac:(lia) w_delta_op3
    wa_exp2_0 wa_vis (wt_pre _) (Rle_refl _) (Rle_refl _) (Rle_refl _) eq_refl wt_keys_vis wfa_tiles_n (le_n 1) (le_n 1)
    (wfr_premise 1 [0]) (fun _ _ => Rle_refl _) (Rle_refl _) (Rle_refl _).

Definition wpp_tc_bf := tc_dot_op (tc_align_op 26) (rz_flx 24) 8.

Definition attention_forward_acc_running_tc_op_pp_witness :=
  attention_forward_acc_running_tc_op_pp wM (rz_flx 24) (bpow radix2 (1 - 24)) 26 8 1 1
    [0] wa_c 1 u 0 1 (Q2R wf_X) (Q2R wf_Y) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR) _ _ _ 1 1 1 1 (fun _ => true) [[wa_key]] [1]
    (wpp_d wpp_tc_bf [0]) (wpp_Dsc wpp_tc_bf [0] [wa_key]) (wpp_Yw wpp_tc_bf [0] [wa_key])
    (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl) ltac:(lia) ltac:(lia) ltac:(lia) wt_delta_op1
    ltac:(lia) ltac:(lia) wt_delta_op1
    wa_exp2_0 wa_vis (wt_pre _) (Rle_refl _) (Rle_refl _) (Rle_refl _) eq_refl wt_keys_vis wfa_tiles_n (le_n 1) (le_n 1)
    (wfr_premise 1 [0]) (fun _ _ => Rle_refl _) (Rle_refl _) (Rle_refl _).
