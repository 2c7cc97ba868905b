(** * Witnesses of Attention/Float/BackwardChainError.v (ojas_ref/verification/proof_audit.py):
    [bf16_fp32], [tl.log2] the exact [log2] rounded to fp32 (Witnesses/Attention/Float/SavedLseError.v),
    [scale = cs = 1] ([ucs = 0]), the fp32 constants [c = c2 = rnd (1 / ln 2)], [cl = rnd (ln 2)],
    one query [[1]], one key [[1]] of value [[1]] in the forward (the constants of
    Witnesses/Attention/Float/ForwardError.v) and in the backward, [dO = [1]], [delta]'s tree the one
    product, [Lm = |LSE|], [Ym = |dP - D|] and [X] the bound's own [2^(..)]; every premise proved
    together.  [dot_R_perturb_each] on [[1]]. *)

From Coq Require Import Reals ZArith QArith Qreals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision FloatModel.BlockedSum FloatModel.DotError.
From Ojas Require Import Attention.Float.OnlineSoftmaxTile Attention.Float.ForwardError Attention.Float.SavedLseError.
From Ojas Require Import Attention.Float.ForwardPosteriori.
From Ojas Require Import Attention.Float.DkDqError Attention.Float.BackwardChainError.
From Ojas Require Import Bounds.Rational Witnesses.Instances Witnesses.Bounds.Attention Witnesses.Attention.Float.ForwardError.
From Ojas Require Import Witnesses.Attention.Float.SavedLseError Witnesses.Attention.Float.DvError.
From Ojas Require Import Witnesses.Attention.Float.DkDqError.
Import ListNotations.
Open Scope R_scope.

Local Notation u := (ff_u (mp_a wM)).
Local Notation ea := (ff_eta (mp_a wM)).

Lemma wc_nth : forall i, (i < length [1])%nat -> Rabs (nth i [1] 0 - nth i [1] 0) <= nth i [0] 0.
Proof. intros [|i] Hi; [apply ws_zero | simpl in Hi; lia]. Qed.

Definition dot_R_perturb_each_witness := dot_R_perturb_each [1] [1] [0] [1] eq_refl eq_refl wc_nth.

(** ** The forward's constants, one query row *)

Definition wc_Lb : R :=
  lse_bound u ea (u + ea) u (score_max (mp_a wM) 1 u 1 1) (score_delta (mp_a wM) 1 u 1 1) 0 (- ln (1 - wl_bL)).
Definition wc_r : R :=
  afp_rel u (mp_ue wM) (mp_eta_e wM) ea (ff_u (mp_s wM)) 1 1 1
    (Q2R wf_X) (Q2R wf_Y) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR).
Definition wc_a : R :=
  afp_abs u (mp_ue wM) (mp_eta_e wM) ea (ff_u (mp_s wM)) (ff_eta (mp_s wM)) 1 1 1 1
    (Q2R wf_X) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR).

Lemma wc_consts : fwd_consts wM (u + ea) (/ 2) 2 wa_c 1 u 1 1 wa_cl u 0 wc_Lb wc_r wc_a 1 1 1 1.
Proof.
  pose proof wf_pre as Hpre; destruct wf_pre as [_ _ _ _ _ _ _ HX HY HP HG HC HL].
  split.
  - exists (Q2R wf_X), (Q2R wf_Y), (Q2R wf_P1), (Q2R wf_CG), (Q2R wf_CR).
    split; [exact Hpre | split; apply Rle_refl].
  - exists (Q2R wf_X), (Q2R wf_P1), (Q2R wf_CG), (Q2R wf_CR), (- ln (1 - wl_bL)).
    repeat split; try assumption; try apply Rle_refl; [exact wl_lmin | exact wl_lmax].
  - apply ff_u_nonneg.
  - exact wa_cl_err.
  - exact wl_ln_N.
Qed.

Definition wc_fvis : nat -> list R * R -> bool := fun _ _ => true.
Definition wc_fts : nat -> list (list (list R * R)) := fun _ => [[wa_key]].

Lemma wc_row : fwd_row_ok [1] 1 1 1 1 1 1 wc_fvis wc_fts 1.
Proof.
  split; [reflexivity |].
  intros j _; split; [exact wa_vis | split; [exact wf_keys_vis | split; [exact wf_tiles_B |]]].
  simpl; lia.
Qed.

Definition wc_LSE : R := fwd_LSE 1 [1] (wc_fvis 0%nat) (wc_fts 0%nat).
Definition wc_D : R := dot_R (fwd_O 1 [1] wc_fvis wc_fts 1) [1].
Definition wc_o : list R := fwd_o wM wa_c [1] wc_fvis wc_fts 1.
Definition wc_eD : R := chain_eD wM 0 1 (dot_abs wc_o [1]) wc_r wc_a (fwd_W 1 [1] wc_fvis wc_fts 1) [1].
Definition wc_X : R :=
  Rpower 2 (2 * (score_delta (mp_a wM) 1 u 1 1 + chain_Dl wM u wc_Lb (Rabs wc_LSE))
            + u * chain_Am wM u (score_max (mp_a wM) 1 u 1 1) wc_Lb (Rabs wc_LSE) + ea).
Definition wc_shape : stree := Leaf (ff_rnd (mp_a wM) (fwd_out wM wa_c [1] (wc_fvis 0%nat) (wc_fts 0%nat) * 1)).

(** ** dQ *)

Lemma wc_keys : forall y, In y (concat [[([1], [1])]]) -> (fun _ : list R * list R => true) y = true ->
  length (fst y) = 1%nat /\ dot_abs [1] (fst y) <= 1
  /\ length (snd y) = 1%nat /\ dot_abs [1] (snd y) <= 1
  /\ Rabs (dot_R [1] (snd y) - wc_D) <= Rabs (dot_R [1] [1] - wc_D) /\ Rabs (nth 0 (fst y) 0) <= 1.
Proof.
  intros y [<- | []] _; cbn [fst snd nth]; rewrite wa_dot_abs, Rabs_R1.
  repeat split; lra.
Qed.

Definition dq_error_from_forward_witness :=
  dq_error_from_forward wM wa_lg (u + ea) (/ 2) 2 wl_lg [1] [1] wa_c 1 u 1 1 wa_cl u 0 wc_Lb wc_r wc_a
    wa_c u (Rabs wc_LSE) 1 1 1 1 1 0 wc_fvis wc_fts wc_shape (fun _ => true) 1 0 0 [[([1], [1])]]
    wc_X 1 wc_eD (Rabs (dot_R [1] [1] - wc_D)) 1 1
    wc_consts wa_exp2_0 wc_row (Rle_refl _) eq_refl (le_n 0) wd_u (Rle_refl _)
    (ff_u_nonneg _) wv_c2 (Rle_refl 0) wg_cs Rle_0_1 (Rabs_pos _) Rle_0_1
    eq_refl (le_n 1) wf_E_u ltac:(repeat constructor) ws_b wc_keys (Rle_refl _).

(** ** dK: one row of the unit type *)

Lemma wc_rows : forall x, In x (concat [[tt]]) -> (fun _ : unit => true) x = true ->
  fwd_row_ok [1] 1 1 1 1 1 1 wc_fvis wc_fts 1 /\ dot_abs [1] [1] <= 1 /\ Rabs wc_LSE <= Rabs wc_LSE
  /\ leaves wc_shape = dot_terms (mp_a wM) wc_o [1] /\ (depth wc_shape <= 0)%nat /\ wc_eD <= Rmax 0 wc_eD
  /\ length [1] = 1%nat /\ dot_abs [1] [1] <= 1
  /\ Rabs (dot_R [1] [1] - wc_D) <= Rabs (dot_R [1] [1] - wc_D) /\ Rabs (nth 0 [1] 0) <= 1.
Proof.
  intros _ _ _; rewrite wa_dot_abs; cbn [nth]; rewrite Rabs_R1.
  split; [exact wc_row |]; repeat split; try lra; try apply Rle_refl; try apply Rmax_r; try reflexivity.
Qed.

Definition dk_error_from_forward_witness :=
  dk_error_from_forward wM wa_lg (u + ea) (/ 2) 2 wl_lg (fun _ : unit => [1]) (fun _ => [1]) (fun _ => wc_fvis)
    (fun _ => wc_fts) (fun _ => wc_shape) (fun _ => true) wa_c 1 u 1 1 wa_cl u 0 wc_Lb wc_r wc_a
    wa_c u (Rabs wc_LSE) 1 0 [1] [1] 0 [[tt]] 1 1 1 1 1 0
    wc_X 1 (Rmax 0 wc_eD) (Rabs (dot_R [1] [1] - wc_D)) 1 1
    wc_consts wa_exp2_0 (ff_u_nonneg _) wv_c2 (Rle_refl 0) wg_cs Rle_0_1 (Rmax_l _ _) (Rabs_pos _) Rle_0_1 eq_refl eq_refl (le_n 1) wf_E_u wd_u ltac:(repeat constructor) ws_b wc_rows (Rle_refl _).

(** ** The dots as parameters, at the blocked fp32 instances ([blocked_dot_model],
    [blocked_acc_dot_model]: tiles of one item) *)

Definition wc_consts_blocked :=
  fwd_consts_blocked wM (u + ea) (/ 2) 2 wa_c 1 u 1 1 wa_cl u 0 wc_Lb wc_r wc_a 1 1 1 1 wc_consts.

Definition dq_error_acc_from_forward_witness :=
  dq_error_acc_from_forward wM wa_lg (u + ea) (/ 2) 2 wl_lg _ 1 _ _ (bdot (mp_a wM)) (bdot (mp_a wM))
    (gamma u 1) ((1 + gamma u (1 - 1)) * INR 1 * ea) (gamma u 1) ((1 + gamma u (1 - 1)) * INR 1 * ea)
    [1] [1] wa_c 1 u 1 1 wa_cl u 0 wc_Lb wc_r wc_a wa_c u (Rabs wc_LSE) 1 1 1 1 1 0 wc_fvis wc_fts wc_shape
    (fun _ => true) 1 0 0 [[([1], [1])]] wc_X 1 wc_eD (Rabs (dot_R [1] [1] - wc_D)) 1
    wc_consts_blocked wa_exp2_0 wc_row (Rle_refl _) eq_refl (le_n 0) wd_u (Rle_refl _)
    blocked_acc_dot_model_witness ltac:(repeat constructor) (ff_u_nonneg _) wv_c2 (Rle_refl 0) wg_cs
    Rle_0_1 (Rabs_pos _) Rle_0_1 eq_refl (le_n 1) wf_dm wc_keys (Rle_refl _).

Definition dk_error_acc_from_forward_witness :=
  dk_error_acc_from_forward wM wa_lg (u + ea) (/ 2) 2 wl_lg _ 1 _ _ (bdot (mp_a wM)) (bdot (mp_a wM))
    (gamma u 1) ((1 + gamma u (1 - 1)) * INR 1 * ea) (gamma u 1) ((1 + gamma u (1 - 1)) * INR 1 * ea)
    (fun _ : unit => [1]) (fun _ => [1]) (fun _ => wc_fvis) (fun _ => wc_fts) (fun _ => wc_shape) (fun _ => true)
    wa_c 1 u 1 1 wa_cl u 0 wc_Lb wc_r wc_a wa_c u (Rabs wc_LSE) 1 0 [1] [1] 0 [[tt]] 1 1 1 1 1 0
    wc_X 1 (Rmax 0 wc_eD) (Rabs (dot_R [1] [1] - wc_D)) 1
    wc_consts_blocked wa_exp2_0 blocked_acc_dot_model_witness ltac:(repeat constructor) (ff_u_nonneg _) wv_c2
    (Rle_refl 0) wg_cs Rle_0_1 (Rmax_l _ _) (Rabs_pos _) Rle_0_1 eq_refl eq_refl (le_n 1) wf_dm wd_u wc_rows
    (Rle_refl _).
