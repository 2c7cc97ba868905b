(** * Witnesses of Attention/Float/SavedLseError.v (ojas_ref/verification/proof_audit.py):
    [bf16_fp32], [tl.log2] the exact [log2] rounded to fp32 (within [el = u + eta] on
    [[1/2, 2]], Witnesses/Bounds/Attention.v), the fp32 constants [c = rnd (1 / ln 2)] and
    [cl = rnd (ln 2)] ([uc = ucl = u]), one query [[1]] and one key [[1]], the constants of
    Witnesses/Attention/Float/ForwardError.v ([afe_bL <= 1/2], so that [[1 - bL, (1 + bL) e^0]]
    lies in [[1/2, 2]]), [LN = ln 1 = 0], [NL = - ln (1 - bL)]; every premise proved together. *)

From Coq Require Import Reals ZArith QArith Qreals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision Attention.Float.OnlineSoftmaxTile Attention.Float.ForwardError.
From Ojas Require Import Attention.Float.SavedLseError.
From Ojas Require Import Bounds.Rational Witnesses.Instances Witnesses.Bounds.Attention Witnesses.Attention.Float.ForwardError.
From Ojas Require Import FloatModel.DotError FloatModel.TensorCoreSum FloatModel.Tf32Product Witnesses.FloatModel.Tf32Product.
Import ListNotations.
Open Scope R_scope.

Local Notation u := (ff_u (mp_a wM)).

Lemma wl_zero : forall x : unit, In x [tt] -> Rabs (0 - 0) <= 0.
Proof. intros; rewrite Rminus_0_r, Rabs_R0; lra. Qed.

Definition lse_perturbation_witness :=
  lse_perturbation [tt] (fun _ => 0) (fun _ => 0) 0 ltac:(discriminate) wl_zero.

Definition wl_bL : R :=
  afe_bL u (mp_ue wM) (mp_eta_e wM) (ff_eta (mp_a wM)) 1 1 1 (Q2R wf_X) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR).

Lemma wl_lg : forall x, / 2 <= x <= 2 -> Rabs (wa_lg x - ln x / ln 2) <= u + ff_eta (mp_a wM).
Proof. exact wa_lg_err. Qed.

Lemma wl_keys : forall kv, In kv (concat [[wa_key]]) -> length (fst kv) = 1%nat /\ dot_abs [1] (fst kv) <= 1.
Proof. intros kv Hk; destruct (wf_keys kv Hk) as [A [B _]]; split; assumption. Qed.

Lemma wl_keys_vis : forall kv, In kv (concat [[wa_key]]) -> (fun _ : list R * R => true) kv = true ->
  length (fst kv) = 1%nat /\ dot_abs [1] (fst kv) <= 1.
Proof. intros kv Hk _; exact (wl_keys kv Hk). Qed.

Lemma wl_ln_N : ln (INR 1) <= 0.
Proof. simpl INR; rewrite ln_1; lra. Qed.

Lemma wl_lmin : / 2 <= 1 - wl_bL.
Proof. pose proof wf_bL_half; unfold wl_bL; lra. Qed.

Lemma wl_lmax : (1 + wl_bL) * exp 0 <= 2.
Proof. pose proof wf_bL_half; unfold wl_bL in *; rewrite exp_0; lra. Qed.

Ltac wl_close :=
  first [ exact (le_n 1) | exact wf_E_u | exact wl_keys | exact wl_keys_vis | exact Rlt_0_1
        | exact (ff_u_nonneg _) | exact wa_c_err | exact wf_tiles_B | exact wa_cl_err
        | exact wl_ln_N | exact (Rle_refl _) | exact wl_lmin | exact wl_lmax
        | exact wa_exp2_0 | exact wa_vis | reflexivity
        | destruct wf_pre; assumption ].

Definition attention_lse_error_witness :=
  ltac:(refine (attention_lse_error wM wa_lg (u + ff_eta (mp_a wM)) (/ 2) 2 wl_lg [1] wa_c 1 u 1
                  (Q2R wf_X) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR) wa_cl u 0 (- ln (1 - wl_bL)) 1 1 1 1
                  wa_key [] [] _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _); wl_close).

Definition attention_lse_error_masked_witness :=
  ltac:(refine (attention_lse_error_masked wM wa_lg (u + ff_eta (mp_a wM)) (/ 2) 2 wl_lg [1] wa_c 1 u 1
                  (Q2R wf_X) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR) wa_cl u 0 (- ln (1 - wl_bL)) 1 1 1 1
                  (fun _ => true) [[wa_key]] _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _); wl_close).

(** ** The dot as a parameter: the blocked fp32 instance, and 3xTF32 on tensor cores
    (alignment to 27 bits, blocks of 8, output truncated; the query [[0]], [P = 0], as in
    Witnesses/Attention/Float/ForwardError.v) *)

Definition attention_lse_error_dot_witness :=
  ltac:(refine (attention_lse_error_dot wM wa_lg (u + ff_eta (mp_a wM)) (/ 2) 2 wl_lg
                  (bdot (mp_a wM)) (gamma u 1) ((1 + gamma u (1 - 1)) * INR 1 * ff_eta (mp_a wM)) [1] wa_c 1 u 1
                  (Q2R wf_X) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR) wa_cl u 0 (- ln (1 - wl_bL)) 1 1 1 1
                  wa_key [] [] wf_dm _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _); wl_close).

Definition attention_lse_error_masked_dot_witness :=
  ltac:(refine (attention_lse_error_masked_dot wM wa_lg (u + ff_eta (mp_a wM)) (/ 2) 2 wl_lg
                  (bdot (mp_a wM)) (gamma u 1) ((1 + gamma u (1 - 1)) * INR 1 * ff_eta (mp_a wM)) [1] wa_c 1 u 1
                  (Q2R wf_X) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR) wa_cl u 0 (- ln (1 - wl_bL)) 1 1 1 1
                  (fun _ => true) [[wa_key]] _ _ wf_dm _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _); wl_close).

(** The [X] premise at the query [[0]], for any dot model's [g_rel]. *)
Lemma wl_X_rel : forall g, Rpower 2 (u * (2 * score_max_de (mp_a wM) 1 u 0 (g * 0 + 0))) <= Q2R wf_X.
Proof. intros g; destruct (wt_pre g); assumption. Qed.

Lemma wl_keys0_vis : forall kv, In kv (concat [[wa_key]]) -> (fun _ : list R * R => true) kv = true ->
  length (fst kv) = 1%nat /\ dot_abs [0] (fst kv) <= 0.
Proof. intros kv Hk Hv; destruct (wt_keys_vis kv Hk Hv) as [A [B _]]; split; assumption. Qed.

Definition attention_lse_error_masked_tf32x3_witness :=
  ltac:(refine (attention_lse_error_masked_tf32x3 wM wa_lg (u + ff_eta (mp_a wM)) (/ 2) 2 wl_lg
                  (rz_flx 24) (bpow radix2 (1 - 24)) 27 8 1 [0] wa_c 1 u 0
                  (Q2R wf_X) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR) wa_cl u 0 (- ln (1 - wl_bL)) 1 1 1 1
                  (fun _ => true) [[wa_key]] (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl) ltac:(lia) ltac:(lia)
                  ltac:(lia) w_delta_trunc3 _ _ _ wl_keys0_vis _ _ _ _ _ _ _ (wl_X_rel _) _ _ _ _ _ _ _ _ _ _);
        wl_close).

Definition attention_lse_error_masked_tf32x3_op_witness :=
  ltac:(refine (attention_lse_error_masked_tf32x3_op wM wa_lg (u + ff_eta (mp_a wM)) (/ 2) 2 wl_lg
                  (rz_flx 24) (bpow radix2 (1 - 24)) 26 8 1 [0] wa_c 1 u 0
                  (Q2R wf_X) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR) wa_cl u 0 (- ln (1 - wl_bL)) 1 1 1 1
                  (fun _ => true) [[wa_key]] (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl) ltac:(lia) ltac:(lia)
                  ltac:(lia) w_delta_op3 _ _ _ wl_keys0_vis _ _ _ _ _ _ _ (wl_X_rel _) _ _ _ _ _ _ _ _ _ _);
        wl_close).
