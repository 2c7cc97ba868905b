(** * Witnesses of Attention/Float/ForwardPosteriori.v (ojas_ref/verification/proof_audit.py):
    [bf16_fp32]; the online softmax over one tile of one score [0] of value [1] ([K = 0]); the
    forward attention at the witnesses' constants of Witnesses/Attention/Float/ForwardError.v
    (one query [[1]], one key [[1]] of value [1], [c = rnd (1 / ln 2)]); every premise proved
    together. *)

From Coq Require Import Reals ZArith QArith Qreals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision Attention.Float.OnlineSoftmaxTile Attention.Float.ForwardError.
From Ojas Require Import Attention.Float.ForwardPosteriori.
From Ojas Require Import Bounds.Rational Witnesses.Instances Witnesses.Bounds.Attention Witnesses.Attention.Float.ForwardError.
From Ojas Require Import FloatModel.DotError FloatModel.TensorCoreSum FloatModel.Tf32Product Witnesses.FloatModel.Tf32Product.
Import ListNotations.
Open Scope R_scope.

Local Notation u := (ff_u (mp_a wM)).

Lemma wp_zero : forall x : unit, In x [tt] -> Rabs (0 - 0) <= 0.
Proof. intros; rewrite Rminus_0_r, Rabs_R0; lra. Qed.

Definition softmax_perturbation_post_witness :=
  softmax_perturbation_post [tt] (fun _ => 0) (fun _ => 0) (fun _ => 1) 0 (Rle_refl 0) wp_zero.

(** ** The online softmax over [[[(0, 1)]]] *)

Definition wp_tiles : list (list (R * R)) := [[(0, 1)]].

Lemma wp_mrun : acc_m_run 0 wp_tiles = 0.
Proof. unfold acc_m_run, wp_tiles; cbn [mrun]; unfold tmax; simpl; apply Rmax_left; lra. Qed.

Lemma wp_m0 : exists q, In q (concat wp_tiles) /\ fst q = 0.
Proof. exists (0, 1); split; [left; reflexivity | reflexivity]. Qed.

Lemma wp_items : forall q, In q (concat wp_tiles) ->
  Rabs (snd q) <= 1 /\ ff_fmt (mp_a wM) (fst q) /\ acc_m_run 0 wp_tiles - fst q <= 0.
Proof.
  intros q [<- | []]; cbn [fst snd]; rewrite wp_mrun, Rabs_R1.
  split; [lra | split; [apply ff_fmt_0 | lra]].
Qed.

Definition wp_bL : R := out_bL wM 0 0 1 1 1 1 (acc_m_run 0 wp_tiles).

Lemma wp_bL_lt_1 : wp_bL < 1.
Proof.
  pose proof wf_pre as [_ _ _ _ _ _ _ HX _ HP1 HCG HCR HL].
  unfold wp_bL; rewrite wp_mrun.
  assert (HX0 : Rpower 2 (u * 0) <= Q2R wf_X).
  { rewrite Rmult_0_r, Rpower_O by lra; rewrite <- Q2R_1; apply Qle_bool_R; vm_compute; reflexivity. }
  destruct (out_bL_apriori wM 0 0 1 1 1 1 0 (Q2R wf_X) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR)
              (Rle_refl 0) (le_n 1) (Rle_refl 0) ltac:(lra) HX0 HP1 HCG HCR).
  lra.
Qed.

Definition online_softmax_posteriori_witness :=
  online_softmax_posteriori wM 0 0 1 1 1 1 wp_tiles
    (Gk wM (H_acc wM 0 1) 0 1 (acc_m_run 0 wp_tiles) - 1) wp_bL (Rk wM 0 (H_acc wM 0 1) (Ry_acc wM 1 1) (INR 1 * 1) 1 1)
    (Rle_refl 0) Rle_0_1 (le_n 1) wp_m0 wp_items ltac:(repeat constructor) (le_n 1) (le_n 1)
    (Rle_refl _) wp_bL_lt_1 (Rle_refl _) (Rle_refl _).

(** ** The forward attention *)

Definition attention_forward_posteriori_witness :=
  attention_forward_posteriori wM [1] wa_c 1 u 1 1 (Q2R wf_X) (Q2R wf_Y) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR)
    1 1 1 1 wa_key [] [] wf_pre eq_refl wf_keys wf_tiles_B (le_n 1) (le_n 1).

Definition attention_forward_posteriori_masked_witness :=
  attention_forward_posteriori_masked wM [1] wa_c 1 u 1 1 (Q2R wf_X) (Q2R wf_Y) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR)
    1 1 1 1 (fun _ => true) [[wa_key]] wa_exp2_0 wa_vis wf_pre eq_refl wf_keys_vis wf_tiles_B (le_n 1) (le_n 1).

(** ** The dot as a parameter: the blocked fp32 instance, and 3xTF32 on tensor cores
    (the constants of Witnesses/Attention/Float/ForwardError.v: the query [[0]] for 3xTF32) *)

Definition attention_forward_posteriori_dot_witness :=
  attention_forward_posteriori_dot wM (bdot (mp_a wM)) (gamma u 1) ((1 + gamma u (1 - 1)) * INR 1 * ff_eta (mp_a wM))
    [1] wa_c 1 u 1 1 (Q2R wf_X) (Q2R wf_Y) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR)
    1 1 1 1 wa_key [] [] wf_dm wf_pre_de eq_refl wf_keys wf_tiles_B (le_n 1) (le_n 1).

Definition attention_forward_posteriori_masked_dot_witness :=
  attention_forward_posteriori_masked_dot wM (bdot (mp_a wM)) (gamma u 1) ((1 + gamma u (1 - 1)) * INR 1 * ff_eta (mp_a wM))
    [1] wa_c 1 u 1 1 (Q2R wf_X) (Q2R wf_Y) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR)
    1 1 1 1 (fun _ => true) [[wa_key]] wa_exp2_0 wa_vis wf_dm wf_pre_de eq_refl wf_keys_vis wf_tiles_B (le_n 1) (le_n 1).

Definition attention_forward_posteriori_masked_tf32x3_witness :=
  attention_forward_posteriori_masked_tf32x3 wM (rz_flx 24) (bpow radix2 (1 - 24)) 27 8 1
    [0] wa_c 1 u 0 1 (Q2R wf_X) (Q2R wf_Y) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR) 1 1 1 1 (fun _ => true) [[wa_key]]
    (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl) ltac:(lia) ltac:(lia) ltac:(lia) w_delta_trunc3
    wa_exp2_0 wa_vis (wt_pre _) eq_refl wt_keys_vis wf_tiles_B (le_n 1) (le_n 1).

Definition attention_forward_posteriori_masked_tf32x3_op_witness :=
  attention_forward_posteriori_masked_tf32x3_op wM (rz_flx 24) (bpow radix2 (1 - 24)) 26 8 1
    [0] wa_c 1 u 0 1 (Q2R wf_X) (Q2R wf_Y) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR) 1 1 1 1 (fun _ => true) [[wa_key]]
    (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl) ltac:(lia) ltac:(lia) ltac:(lia) w_delta_op3
    wa_exp2_0 wa_vis (wt_pre _) eq_refl wt_keys_vis wf_tiles_B (le_n 1) (le_n 1).
