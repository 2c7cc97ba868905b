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

(** ** dQ from the forward *)

Definition wc_LSE : R :=
  ln (rsum (map (fun kv => exp (1 * dot_R [1] (fst kv))) (filter (fun _ => true) (concat [[wa_key]])))).
Definition wc_D : R :=
  dot_R (map (fun j : nat => exact_softmax 1 [1] (filter (fun _ => true) (concat [[wa_key]]))) (seq 0 1)) [1].
Definition wc_Lb : R :=
  lse_bound u ea (u + ea) u (score_max (mp_a wM) 1 u 1 1) (score_delta (mp_a wM) 1 u 1 1) 0 (- ln (1 - wl_bL)).
Definition wc_X : R :=
  Rpower 2 (2 * (score_delta (mp_a wM) 1 u 1 1 + chain_Dl wM u wc_Lb (Rabs wc_LSE))
            + u * chain_Am wM u (score_max (mp_a wM) 1 u 1 1) wc_Lb (Rabs wc_LSE) + ea).
Definition wc_shape : stree :=
  Leaf (ff_rnd (mp_a wM) (fwd_out wM wa_c [1] (fun _ => true) [[wa_key]] * 1)).

Lemma wc_fwd : forall j, (j < 1)%nat ->
  (exists kv, In kv (concat [[wa_key]]) /\ (fun _ : list R * R => true) kv = true)
  /\ (forall kv, In kv (concat [[wa_key]]) -> (fun _ : list R * R => true) kv = true ->
        length (fst kv) = 1%nat /\ dot_abs [1] (fst kv) <= 1 /\ Rabs (snd kv) <= 1)
  /\ Forall (fun tl => (length tl <= 1)%nat) [[wa_key]]
  /\ (length (filter (fun _ : list R * R => true) (concat [[wa_key]])) <= 1)%nat
  /\ (length [[wa_key]] <= 1)%nat.
Proof.
  intros j _; split; [exact wa_vis | split; [exact wf_keys_vis | split; [exact wf_tiles_B |]]].
  simpl; lia.
Qed.

Lemma wc_keys : forall y, In y (concat [[([1], [1])]]) -> (fun _ : list R * list R => true) y = true ->
  length (fst y) = 1%nat /\ dot_abs [1] (fst y) <= 1
  /\ length (snd y) = 1%nat /\ dot_abs [1] (snd y) <= 1
  /\ Rabs (dot_R [1] (snd y) - wc_D) <= Rabs (dot_R [1] [1] - wc_D) /\ Rabs (nth 0 (fst y) 0) <= 1.
Proof.
  intros y [<- | []] _; cbn [fst snd nth]; rewrite wa_dot_abs, Rabs_R1.
  repeat split; lra.
Qed.

Definition dq_error_from_forward_witness :=
  dq_error_from_forward wM wa_lg (u + ea) (/ 2) 2 wl_lg [1] [1] wa_c 1 u 1 1
    (Q2R wf_X) (Q2R wf_Y) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR) wa_cl u 0 (- ln (1 - wl_bL)) wa_c u (Rabs wc_LSE)
    1 1 1 1 1 0 (fun _ _ => true) (fun _ => [[wa_key]]) wc_shape (fun _ => true) 1 0 0 [[([1], [1])]]
    wc_X 1 (Rabs (dot_R [1] [1] - wc_D)) 1 1
    wa_exp2_0 wf_pre eq_refl wc_fwd (ff_u_nonneg _) wa_cl_err wl_ln_N (Rle_refl _) wl_lmin wl_lmax (Rle_refl _)
    eq_refl (le_n 0) wd_u (ff_u_nonneg _) wv_c2 (Rle_refl 0) wg_cs Rle_0_1 (Rabs_pos _) Rle_0_1
    eq_refl (le_n 1) wf_E_u ltac:(repeat constructor) ws_b wc_keys (Rle_refl _).
