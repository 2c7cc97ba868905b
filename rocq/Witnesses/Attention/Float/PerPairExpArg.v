(** * Witnesses of Attention/Float/PerPairExpArg.v (ojas_ref/verification/proof_audit.py).

    The constants of Witnesses/Attention/Float/SavedLseError.v and PerPairScoreError.v's
    witnesses (one query, one key): [bL = afe_bL_arg] at those constants, at most [afe_bL]
    ([afe_bL_arg_le]) so at most [1/2]; [d] each key's actual score error ([wpp_d]), [g = 0]
    (one key: no gap), [Dsc = pp_shift] itself; the counted ones at [C = 0], [CGc = CG] as in
    Witnesses/Attention/Float/ForwardAccRunningCounted.v. *)

From Coq Require Import Reals ZArith QArith Qreals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision Attention.Float.OnlineSoftmaxTile Attention.Float.ForwardError.
From Ojas Require Import Attention.Float.SavedLseError Attention.Float.PerPairScoreError Attention.Float.PerPairExpArg.
From Ojas Require Import Bounds.Rational Witnesses.Instances Witnesses.Bounds.Attention Witnesses.Attention.Float.ForwardError.
From Ojas Require Import FloatModel.DotError FloatModel.TensorCoreSum FloatModel.Tf32Product Witnesses.FloatModel.Tf32Product.
From Ojas Require Import Witnesses.Attention.Float.SavedLseError Witnesses.Attention.Float.PerPairScoreError.
From Ojas Require Import Attention.Float.ForwardAccRunningCounted Witnesses.Attention.Float.ForwardAccRunningCounted.
Import ListNotations.
Open Scope R_scope.

Local Notation u := (ff_u (mp_a wM)).

Definition wpa_bL : R :=
  afe_bL_arg u (mp_ue wM) (mp_eta_e wM) (ff_eta (mp_a wM)) 1 1 1 (Q2R wf_X) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR).

Lemma wpa_Q_ge : forall (a x : Q), Qle_bool a x = true -> Q2R a <= Q2R x.
Proof. intros a x H; apply Qle_Rle, Qle_bool_iff, H. Qed.

Lemma wpa_Q2R_int : forall z : Z, Q2R (inject_Z z) = IZR z.
Proof. intros z; unfold Q2R, inject_Z; cbn [Qnum Qden]; rewrite Rinv_1; ring. Qed.

Lemma wpa_bL_half : wpa_bL <= / 2.
Proof.
  eapply Rle_trans; [| exact wf_bL_half]; unfold wpa_bL.
  pose proof (wpa_Q_ge (inject_Z 1) wf_X ltac:(vm_compute; reflexivity)) as HX.
  pose proof (wpa_Q_ge (inject_Z 0) wf_P1 ltac:(vm_compute; reflexivity)) as HP.
  pose proof (wpa_Q_ge (inject_Z 0) wf_CG ltac:(vm_compute; reflexivity)) as HG.
  pose proof (wpa_Q_ge (inject_Z 0) wf_CR ltac:(vm_compute; reflexivity)) as HC.
  rewrite !wpa_Q2R_int in HX, HP, HG, HC.
  apply afe_bL_arg_le; try assumption.
  - apply ff_u_nonneg.
  - apply mp_ue_nonneg.
  - apply mp_eta_e_nonneg.
Qed.

Lemma wpa_bL_lt_1 : wpa_bL < 1.
Proof. pose proof wpa_bL_half; lra. Qed.

Lemma wpa_lmin : / 2 <= 1 - wpa_bL.
Proof. pose proof wpa_bL_half; lra. Qed.

Lemma wpa_lmax : (1 + wpa_bL) * exp 0 <= 2.
Proof. pose proof wpa_bL_half; rewrite exp_0; lra. Qed.

(** One key: every gap is [0]. *)
Lemma wpa_g : forall (sck : list R * R -> R) (kv kv' : list R * R), In kv [wa_key] -> In kv' [wa_key] ->
  u * ln 2 * (sck kv' - sck kv) <= (fun _ => 0) kv.
Proof.
  intros sck kv kv' [<- | []] [<- | []]; rewrite Rminus_diag_eq by reflexivity; rewrite Rmult_0_r; apply Rle_refl.
Qed.

Ltac wpa_close :=
  first [ exact wpa_bL_lt_1 | exact wpa_lmin | exact wpa_lmax | exact (wpa_g _) | wpp_close ].

Definition wpa_Dsc (dotf : list R -> list R -> R) (q : list R) : R :=
  pp_shift [wa_key] (fun kv => 1 * dot_R q (fst kv)) (fun kv => wpp_d dotf q kv + 0).

Definition attention_lse_error_masked_dot_pp_arg_witness :=
  ltac:(refine (attention_lse_error_masked_dot_pp_arg wM wa_lg (u + ff_eta (mp_a wM)) (/ 2) 2 wl_lg
                  (bdot (mp_a wM)) (gamma u 1) ((1 + gamma u (1 - 1)) * INR 1 * ff_eta (mp_a wM)) [1] wa_c 1 u 1
                  (Q2R wf_X) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR) wa_cl u 0 (- ln (1 - wpa_bL))
                  (wpp_d (bdot (mp_a wM)) [1]) (fun _ => 0) (wpa_Dsc (bdot (mp_a wM)) [1]) 1 1 1 1
                  (fun _ => true) [[wa_key]] _ _ wf_dm _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _); wpa_close).

Definition attention_lse_error_masked_tf32x3_op_pp_arg_witness :=
  ltac:(refine (attention_lse_error_masked_tf32x3_op_pp_arg wM wa_lg (u + ff_eta (mp_a wM)) (/ 2) 2 wl_lg
                  (rz_flx 24) (bpow radix2 (1 - 24)) 26 8 1 [0] wa_c 1 u 0
                  (Q2R wf_X) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR) wa_cl u 0 (- ln (1 - wpa_bL))
                  (wpp_d wpp_tc_op [0]) (fun _ => 0) (wpa_Dsc wpp_tc_op [0]) 1 1 1 1
                  (fun _ => true) [[wa_key]] (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl) ltac:(lia) ltac:(lia)
                  ltac:(lia) w_delta_op3 _ _ _ wl_keys0_vis _ _ _ _ _ _ (wl_X_rel _) _ _ _ _ _ _ _ _ _ _ _ _ _);
        wpa_close).

Definition attention_lse_error_masked_dot_counted_pp_arg_witness :=
  ltac:(refine (attention_lse_error_masked_dot_counted_pp_arg wM wa_lg (u + ff_eta (mp_a wM)) (/ 2) 2 wl_lg
                  (bdot (mp_a wM)) (gamma u 1) ((1 + gamma u (1 - 1)) * INR 1 * ff_eta (mp_a wM)) [1] wa_c 1 u 1
                  (Q2R wf_X) (Q2R wf_P1) (Q2R wf_CR) wa_cl u 0 (- ln (1 - wpa_bL))
                  (wpp_d (bdot (mp_a wM)) [1]) (fun _ => 0) (wpa_Dsc (bdot (mp_a wM)) [1]) 1 1 1 1 0 (Q2R wf_CG)
                  (fun _ => true) [[wa_key]] _ _ wf_dm _ _ _ _ _ _ _ _ _ _
                  (wc_CGc _ _ _ _ _ _ _ _ _ _ _ _ _ (wt_pre 0)) _ _ _ _ _ _ _ _ _ _ _
                  (fun k0 rs H => wc_rec wa_key _ _ k0 rs H _)); wpa_close).

Definition attention_lse_error_masked_counted_tf32x3_op_pp_arg_witness :=
  ltac:(refine (attention_lse_error_masked_counted_tf32x3_op_pp_arg wM wa_lg (u + ff_eta (mp_a wM)) (/ 2) 2 wl_lg
                  (rz_flx 24) (bpow radix2 (1 - 24)) 26 8 1 [0] wa_c 1 u 0
                  (Q2R wf_X) (Q2R wf_P1) (Q2R wf_CR) wa_cl u 0 (- ln (1 - wpa_bL))
                  (wpp_d wpp_tc_op [0]) (fun _ => 0) (wpa_Dsc wpp_tc_op [0]) 1 1 1 1 0 (Q2R wf_CG)
                  (fun _ => true) [[wa_key]] (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl) ltac:(lia) ltac:(lia)
                  ltac:(lia) w_delta_op3 _ _ _ wl_keys0_vis _ _ _ _ _ _ (wl_X_rel _) _
                  (wc_CGc _ _ _ _ _ _ _ _ _ _ _ _ _ (wt_pre 0)) _ _ _ _ _ _ _ _ _ _ _
                  (fun k0 rs H => wc_rec wa_key _ _ k0 rs H _)); wpa_close).

(** The one key's computed score bounds itself: [Sm] of the [_rowmax] witnesses. *)
Definition wpa_Sm (dotf : list R -> list R -> R) (q : list R) : R :=
  Rabs (score2_with (mp_a wM) dotf wa_c q (fst wa_key)).

Lemma wpa_Sm_ok : forall (dotf : list R -> list R -> R) (q : list R) kv,
  In kv (filter (fun _ : list R * R => true) (concat [[wa_key]])) ->
  Rabs (score2_with (mp_a wM) dotf wa_c q (fst kv)) <= wpa_Sm dotf q.
Proof. intros dotf q kv H; cbn in H; destruct H as [<- | []]; apply Rle_refl. Qed.

Definition attention_lse_error_masked_dot_pp_arg_rowmax_witness :=
  ltac:(refine (attention_lse_error_masked_dot_pp_arg_rowmax wM wa_lg (u + ff_eta (mp_a wM)) (/ 2) 2 wl_lg
                  (bdot (mp_a wM)) (gamma u 1) ((1 + gamma u (1 - 1)) * INR 1 * ff_eta (mp_a wM)) [1] wa_c 1 u 1
                  (Q2R wf_X) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR) wa_cl u 0 (- ln (1 - wpa_bL))
                  (wpp_d (bdot (mp_a wM)) [1]) (fun _ => 0) (wpa_Dsc (bdot (mp_a wM)) [1]) (wpa_Sm (bdot (mp_a wM)) [1]) 1 1 1 1
                  (fun _ => true) [[wa_key]] _ _ wf_dm _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _
                  (wpa_Sm_ok (bdot (mp_a wM)) [1])); wpa_close).

Definition attention_lse_error_masked_tf32x3_op_pp_arg_rowmax_witness :=
  ltac:(refine (attention_lse_error_masked_tf32x3_op_pp_arg_rowmax wM wa_lg (u + ff_eta (mp_a wM)) (/ 2) 2 wl_lg
                  (rz_flx 24) (bpow radix2 (1 - 24)) 26 8 1 [0] wa_c 1 u 0
                  (Q2R wf_X) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR) wa_cl u 0 (- ln (1 - wpa_bL))
                  (wpp_d wpp_tc_op [0]) (fun _ => 0) (wpa_Dsc wpp_tc_op [0]) (wpa_Sm wpp_tc_op [0]) 1 1 1 1
                  (fun _ => true) [[wa_key]] (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl) ltac:(lia) ltac:(lia)
                  ltac:(lia) w_delta_op3 _ _ _ wl_keys0_vis _ _ _ _ _ _ (wl_X_rel _) _ _ _ _ _ _ _ _ _ _ _ _ _
                  (wpa_Sm_ok wpp_tc_op [0]));
        wpa_close).

Definition attention_lse_error_masked_dot_counted_pp_arg_rowmax_witness :=
  ltac:(refine (attention_lse_error_masked_dot_counted_pp_arg_rowmax wM wa_lg (u + ff_eta (mp_a wM)) (/ 2) 2 wl_lg
                  (bdot (mp_a wM)) (gamma u 1) ((1 + gamma u (1 - 1)) * INR 1 * ff_eta (mp_a wM)) [1] wa_c 1 u 1
                  (Q2R wf_X) (Q2R wf_P1) (Q2R wf_CR) wa_cl u 0 (- ln (1 - wpa_bL))
                  (wpp_d (bdot (mp_a wM)) [1]) (fun _ => 0) (wpa_Dsc (bdot (mp_a wM)) [1]) (wpa_Sm (bdot (mp_a wM)) [1]) 1 1 1 1 0 (Q2R wf_CG)
                  (fun _ => true) [[wa_key]] _ _ wf_dm _ _ _ _ _ _ _ _ _ _
                  (wc_CGc _ _ _ _ _ _ _ _ _ _ _ _ _ (wt_pre 0)) _ _ _ _ _ _ _ _ _ _ _
                  (fun k0 rs H => wc_rec wa_key _ _ k0 rs H _)
                  (wpa_Sm_ok (bdot (mp_a wM)) [1])); wpa_close).

Definition attention_lse_error_masked_counted_tf32x3_op_pp_arg_rowmax_witness :=
  ltac:(refine (attention_lse_error_masked_counted_tf32x3_op_pp_arg_rowmax wM wa_lg (u + ff_eta (mp_a wM)) (/ 2) 2 wl_lg
                  (rz_flx 24) (bpow radix2 (1 - 24)) 26 8 1 [0] wa_c 1 u 0
                  (Q2R wf_X) (Q2R wf_P1) (Q2R wf_CR) wa_cl u 0 (- ln (1 - wpa_bL))
                  (wpp_d wpp_tc_op [0]) (fun _ => 0) (wpa_Dsc wpp_tc_op [0]) (wpa_Sm wpp_tc_op [0]) 1 1 1 1 0 (Q2R wf_CG)
                  (fun _ => true) [[wa_key]] (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl) ltac:(lia) ltac:(lia)
                  ltac:(lia) w_delta_op3 _ _ _ wl_keys0_vis _ _ _ _ _ _ (wl_X_rel _) _
                  (wc_CGc _ _ _ _ _ _ _ _ _ _ _ _ _ (wt_pre 0)) _ _ _ _ _ _ _ _ _ _ _
                  (fun k0 rs H => wc_rec wa_key _ _ k0 rs H _)
                  (wpa_Sm_ok wpp_tc_op [0])); wpa_close).
