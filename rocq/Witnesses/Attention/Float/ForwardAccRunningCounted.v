(** * Witnesses of Attention/Float/ForwardAccRunningCounted.v (ojas_ref/verification/proof_audit.py).

    The constants and premises of Witnesses/Attention/Float/PerPairScoreError.v (one key, the
    H100 instances' dots), with [C = 0] (one visible key: none after the first) and
    [CGc = CG] ([cg^Tt <= CG] and [afe_bL < 1] of its premise bundle). *)

From Coq Require Import Reals ZArith QArith Qreals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import FloatModel.MixedPrecision FloatModel.DotError FloatModel.TensorCoreSum.
From Ojas Require Import Attention.Float.OnlineSoftmaxTile Attention.Float.ForwardError Attention.Float.ForwardAccRunningCounted.
From Ojas Require Import Witnesses.Instances Witnesses.Bounds.Attention Witnesses.FloatModel.Tf32Product.
From Ojas Require Import Witnesses.Attention.Float.ForwardError Witnesses.Attention.Float.SavedLseError.
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

(** The H100 forward instances differ only in the dot ([dotf]: the executable model's per-key
    errors [wpp_d]) and its error premise ([delta]). *)
Ltac wc_fwd thm dotf delta :=
  exact (thm wM (rz_flx 24) (bpow radix2 (1 - 24)) 26%Z 8%nat 1%nat 1%nat
    [0] wa_c 1 u 0 1 (Q2R wf_X) (Q2R wf_Y) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR) _ _ _ 1%nat 1%nat 1%nat 1%nat
    (fun _ => true) [[wa_key]] [1] (wpp_d dotf [0]) (wpp_Dsc dotf [0] [wa_key]) (wpp_Yw dotf [0] [wa_key]) 0%nat (Q2R wf_CG)
    (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl) ltac:(lia) ltac:(lia) ltac:(lia) delta
    ltac:(lia) ltac:(lia) delta
    wa_exp2_0 wa_vis (wt_pre _) (Rle_refl _) (Rle_refl _) (Rle_refl _) eq_refl wt_keys_vis wfa_tiles_n (le_n 1) (le_n 1)
    (wfr_premise 1 [0]) (fun _ _ => Rle_refl _) (Rle_refl _) (Rle_refl _)
    (wc_CGc _ _ _ _ _ _ _ _ _ _ _ _ _ (wt_pre 0)) (wc_bL _ _ _ _ _ _ _ _ _ _ _ _ _ _ (wt_pre 0))
    (fun k0 rs H => wc_rec wa_key _ _ k0 rs H _)).

Definition wc_tc_bf := tc_dot_op (tc_align_op 26) (rz_flx 24) 8.

Definition attention_forward_acc_running_counted_tf32x3_op_pp_witness :=
  ltac:(wc_fwd attention_forward_acc_running_counted_tf32x3_op_pp wpp_tc_op w_delta_op3).

Definition attention_forward_acc_running_counted_tc_op_pp_witness :=
  ltac:(wc_fwd attention_forward_acc_running_counted_tc_op_pp wc_tc_bf wt_delta_op1).

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

(** The H100 lse instances, likewise. *)
Ltac wc_lse thm dotf delta :=
  refine (thm wM wa_lg (u + ff_eta (mp_a wM)) (/ 2) 2 wl_lg
            (rz_flx 24) (bpow radix2 (1 - 24)) 26%Z 8%nat 1%nat [0] wa_c 1 u 0
            (Q2R wf_X) (Q2R wf_P1) (Q2R wf_CR) wa_cl u 0 (- ln (1 - wl_bL))
            (wpp_d dotf [0]) (wpp_Dsc dotf [0] [wa_key]) 1%nat 1%nat 1%nat 1%nat 0%nat (Q2R wf_CG)
            (fun _ => true) [[wa_key]] (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl) ltac:(lia) ltac:(lia)
            ltac:(lia) delta _ _ _ wl_keys0_vis _ _ _ _ _ _ _ (wl_X_rel _) _
            (wc_CGc _ _ _ _ _ _ _ _ _ _ _ _ _ (wt_pre 0)) _ _ _ _ _ _ _ _ _ _
            (fun k0 rs H => wc_rec wa_key _ _ k0 rs H _)); wpp_close.

Definition attention_lse_error_masked_counted_tf32x3_op_pp_witness :=
  ltac:(wc_lse attention_lse_error_masked_counted_tf32x3_op_pp wpp_tc_op w_delta_op3).

Definition attention_lse_error_masked_counted_tc_op_pp_witness :=
  ltac:(wc_lse attention_lse_error_masked_counted_tc_op_pp wc_tc_bf wt_delta_op1).
