(** * Witnesses of Attention/Float/ForwardAccRunning.v (ojas_ref/verification/proof_audit.py):
    the settings of Witnesses/Attention/Float/ForwardAccError.v ([bf16_fp32]; the running fold
    over one tile of one key of score [0] and value [1], [K = 0], the fp32 per-product
    accumulating dot [blocked_acc_dot_model], [n = 1], [mf = 0], [Lf = 1]; the forward
    attention at the witnesses' constants of Witnesses/Attention/Float/ForwardError.v, one
    query, one key [[1]] of value [1], one tile, [CGA = cgA g_rel], [CRA = crA g_rel],
    [CB = (1 + afr_gb)^1]; the H100 instances at the tensor-core constants used there) with
    the per-tile bounds [bs = [1]] (the one tile: empty prefix, weight [1] times [|v| = 1]);
    every premise proved together. *)

From Coq Require Import Reals ZArith QArith Qreals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision FloatModel.DotError.
From Ojas Require Import Attention.Float.OnlineSoftmaxTile Attention.Float.ForwardError Attention.Float.NumeratorError.
From Ojas Require Import Attention.Float.ForwardAccError Attention.Float.ForwardAccRunning.
From Ojas Require Import Bounds.Rational Witnesses.Instances Witnesses.Bounds.Attention Witnesses.Attention.Float.ForwardError.
From Ojas Require Import FloatModel.TensorCoreSum FloatModel.Tf32Product Witnesses.FloatModel.TensorCoreSum.
From Ojas Require Import Witnesses.FloatModel.Tf32Product Witnesses.Attention.Float.ForwardAccError.
Import ListNotations.
Open Scope R_scope.

Local Notation u := (ff_u (mp_a wM)).

(** ** The running fold: one tile of one key, score [0], value [1] *)

Lemma wfr_bs : forall t, (t < length [[0]])%nat ->
  Rabs (exact_pv 0 (kpairs R (fun s => s) (fun _ => true) (fun _ _ => 1) 0 (concat (firstn t [[0]]))))
  + exact_pv_abs 0 (kpairs R (fun s => s) (fun _ => true) (fun _ _ => 1) 0 (nth t [[0]] [])) <= 1 * nth t [1] 0.
Proof.
  intros t Ht; destruct t as [|t]; [| cbn in Ht; lia].
  unfold exact_pv, exact_pv_abs, kpairs, rsum; cbn.
  rewrite Rminus_0_r, Rpower_O, Rabs_R0, Rabs_R1 by lra; lra.
Qed.

Definition acc_kernel_running_witness :=
  acc_kernel_running wM R (fun s => s) (fun _ => true) (fun _ _ => 1) _ 1 _ _ 0 1 0 1 1 0 0 1 _ [[0]] [1]
    (kernel_start 1) blocked_acc_dot_model_witness (Rle_refl 0) Rle_0_1 Rlt_0_1 (Rle_refl _)
    ltac:(repeat constructor) (le_n 1) (le_n 1) wfa_keys eq_refl wfr_bs eq_refl ltac:(cbn; lia) 0 wfa_m.

(** ** The forward attention: the caller's bounds of the one tile *)

Lemma wfr_premise : forall scale q, fwd_running_premise scale q (fun _ => true) [[wa_key]] [1].
Proof.
  intros scale q; split; [reflexivity |]; intros t Ht; destruct t as [|t]; [| cbn in Ht; lia].
  unfold fwd_prefix, fwd_tile_abs, fwd_Z, wa_key, rsum; cbn.
  pose proof (exp_pos (scale * dot_R q [1])).
  rewrite Rabs_R1; unfold Rdiv; rewrite Rmult_0_l, Rabs_R0, !Rplus_0_r, Rmult_1_r, Rinv_r by lra; lra.
Qed.

Definition attention_forward_acc_running_witness :=
  attention_forward_acc_running wM (bdot (mp_a wM)) (gamma u 1) ((1 + gamma u (1 - 1)) * INR 1 * ff_eta (mp_a wM))
    (fun c a b => ff_rnd (mp_a wM) (c + bdot (mp_a wM) a b)) 1 _ _
    [1] wa_c 1 u 1 1 (Q2R wf_X) (Q2R wf_Y) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR) _ _ _
    1 1 1 (fun _ => true) [[wa_key]] [1] wa_exp2_0 wa_vis wf_dm blocked_acc_dot_model_witness wf_pre_de
    (Rle_refl _) (Rle_refl _) (Rle_refl _) eq_refl wf_keys_vis wfa_tiles_n (le_n 1) (le_n 1) (wfr_premise 1 [1]).

(** ** The H100 instances (the query [[0]]) *)

Definition attention_forward_acc_running_tf32x3_op_witness :=
  attention_forward_acc_running_tf32x3_op wM (rz_flx 24) (bpow radix2 (1 - 24)) 26 8 1 1
    [0] wa_c 1 u 0 1 (Q2R wf_X) (Q2R wf_Y) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR) _ _ _ 1 1 1 1 (fun _ => true) [[wa_key]] [1]
    (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl) ltac:(lia) ltac:(lia) ltac:(lia) w_delta_op3
    ltac:(lia) ltac:(lia) w_delta_op3
    wa_exp2_0 wa_vis (wt_pre _) (Rle_refl _) (Rle_refl _) (Rle_refl _) eq_refl wt_keys_vis wfa_tiles_n (le_n 1) (le_n 1)
    (wfr_premise 1 [0]).

Definition attention_forward_acc_running_tc_op_witness :=
  attention_forward_acc_running_tc_op wM (rz_flx 24) (bpow radix2 (1 - 24)) 26 8 1 1
    [0] wa_c 1 u 0 1 (Q2R wf_X) (Q2R wf_Y) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR) _ _ _ 1 1 1 1 (fun _ => true) [[wa_key]] [1]
    (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl) ltac:(lia) ltac:(lia) ltac:(lia) wt_delta_op1
    ltac:(lia) ltac:(lia) wt_delta_op1
    wa_exp2_0 wa_vis (wt_pre _) (Rle_refl _) (Rle_refl _) (Rle_refl _) eq_refl wt_keys_vis wfa_tiles_n (le_n 1) (le_n 1)
    (wfr_premise 1 [0]).
