(** * Witnesses of Attention/Float/DvError.v (ojas_ref/verification/proof_audit.py): [bf16_fp32],
    [scale = 1], the fp32 constant [c = rnd (1 / ln 2)] ([uc = u], Witnesses/Bounds/Attention.v),
    one key [[1]] and one query [[1]] whose saved [lse2] is its own score [s] ([Am = 0]),
    [Lx = s ln 2] ([Dl = 0]), [dO = 1], [delta] the score error of [score2_error],
    [X = 2^(delta / ln 2 + ea)]; [lse2_close] at [lse = LSE = 0], [c2 = c].  Every premise proved
    together.  [ws], [ws_err], [ws_dot] serve the witnesses of DkDqError.v too. *)

From Coq Require Import Reals ZArith List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision Attention.Float.ForwardError Attention.Float.DvError.
From Ojas Require Import Witnesses.Instances Witnesses.Bounds.Attention Witnesses.Attention.Float.ForwardError.
From Ojas Require Import FloatModel.DotError FloatModel.TensorCoreSum FloatModel.Tf32Product Witnesses.FloatModel.TensorCoreSum.
From Ojas Require Import Witnesses.FloatModel.Tf32Product.
Import ListNotations.
Open Scope R_scope.

Local Notation u := (ff_u (mp_a wM)).
Local Notation ea := (ff_eta (mp_a wM)).

(** The score of the query [[1]] against the key [[1]], and its error. *)
Definition ws : R := score2 (mp_a wM) wa_c [1] [1].
Definition ws_delta : R := score_delta (mp_a wM) 1 u 1 1.

Lemma ws_err : Rabs (ws * ln 2 - 1 * dot_R [1] [1]) <= ws_delta.
Proof. exact (proj1 score2_error_witness). Qed.

Lemma ws_delta_nonneg : 0 <= ws_delta.
Proof. pose proof ws_err; pose proof (Rabs_pos (ws * ln 2 - 1 * dot_R [1] [1])); lra. Qed.

Lemma ws_dot : dot_R [1] [1] = 1.
Proof. unfold dot_R, rsum; simpl; ring. Qed.

Lemma ws_zero : forall x : R, Rabs (x - x) <= 0.
Proof. intros; rewrite Rminus_diag_eq, Rabs_R0 by reflexivity; lra. Qed.

Lemma ws_b : INR (1 - 1 + (1 - 1)) * u < 1.
Proof. simpl; rewrite Rmult_0_l; lra. Qed.

Definition wv_x : list R * (R * R) := ([1], (1, ws)).

Lemma wv_items : forall x, In x (concat [[wv_x]]) -> (fun _ : list R * (R * R) => true) x = true ->
  Rabs (score2 (mp_a wM) wa_c (fst x) [1] * ln 2 - 1 * dot_R (fst x) [1]) <= ws_delta /\
  Rabs (snd (snd x) * ln 2 - ws * ln 2) <= 0 /\ Rabs (score2 (mp_a wM) wa_c (fst x) [1] - snd (snd x)) <= 0 /\
  Rabs (fst (snd x)) <= 1.
Proof.
  intros x [<- | []] _; cbn [fst snd wv_x].
  split; [exact ws_err | split; [apply ws_zero | split; [apply ws_zero | rewrite Rabs_R1; lra]]].
Qed.

Definition dv_error_witness :=
  dv_error wM (fun _ => true) wa_c 1 [1] [[wv_x]] (fun _ => ws * ln 2) ws_delta 0 0
    (Rpower 2 ((ws_delta + 0) / ln 2 + u * 0 + ea)) 1 1
    ws_delta_nonneg (Rle_refl 0) (Rle_refl 0) Rle_0_1 ltac:(repeat constructor) ws_b wv_items (Rle_refl _).

Lemma wv_c2 : Rabs (wa_c * ln 2 - 1) <= u.
Proof. rewrite <- (Rmult_1_r u); exact wa_c_err. Qed.

Definition lse2_close_witness :=
  lse2_close wM 0 0 0 wa_c u (ff_u_nonneg _) (ws_zero 0) wv_c2.

(** The scores' dot as a parameter, at its blocked fp32 instance. *)
Definition dv_error_dot_witness :=
  dv_error_dot wM (bdot (mp_a wM)) (fun _ => true) wa_c 1 [1] [[wv_x]] (fun _ => ws * ln 2) ws_delta 0 0
    (Rpower 2 ((ws_delta + 0) / ln 2 + u * 0 + ea)) 1 1
    ws_delta_nonneg (Rle_refl 0) (Rle_refl 0) Rle_0_1 ltac:(repeat constructor) ws_b wv_items (Rle_refl _).

(** [dV] accumulated by [tl.dot] over query tiles of one row, at the fp32 per-product model. *)
Definition dv_error_acc_witness :=
  dv_error_acc wM _ 1 _ _ (bdot (mp_a wM)) (fun _ => true) wa_c 1 [1] [[wv_x]] (fun _ => ws * ln 2) ws_delta 0 0
    (Rpower 2 ((ws_delta + 0) / ln 2 + u * 0 + ea)) 1
    blocked_acc_dot_model_witness ltac:(repeat constructor) ws_delta_nonneg (Rle_refl 0) (Rle_refl 0) Rle_0_1
    wv_items (Rle_refl _).

(** The H100 instances: the key [[0]] ([P = 0]) and the query [[1]] whose [lse2] is its score,
    26 bits, blocks of 8, the output truncated, query tiles of one row ([n = qb = 1]); the score
    error from [score2_with_error] at the scores' dot model. *)
Lemma wv_items_with : forall (dotf : list R -> list R -> R) d,
  Rabs (score2_with (mp_a wM) dotf wa_c [1] [0] * ln 2 - 1 * dot_R [1] [0]) <= d ->
  forall x, In x (concat [[([1], (1, score2_with (mp_a wM) dotf wa_c [1] [0]))]]) ->
  (fun _ : list R * (R * R) => true) x = true ->
  Rabs (score2_with (mp_a wM) dotf wa_c (fst x) [0] * ln 2 - 1 * dot_R (fst x) [0]) <= d /\
  Rabs (snd (snd x) * ln 2 - score2_with (mp_a wM) dotf wa_c [1] [0] * ln 2) <= 0 /\
  Rabs (score2_with (mp_a wM) dotf wa_c (fst x) [0] - snd (snd x)) <= 0 /\ Rabs (fst (snd x)) <= 1.
Proof.
  intros dotf d Hs x [<- | []] _; cbn [fst snd].
  split; [exact Hs | split; [apply ws_zero | split; [apply ws_zero | rewrite Rabs_R1; lra]]].
Qed.

(** The score of [a] against [b] (one coordinate each) at any dot model: [score2_with_error]
    at [P = dot_abs a b], its error [score_delta_de] of [g_rel P + g_abs]. *)
Definition w_delta (g_rel g_abs : R) (a b : list R) : R :=
  score_delta_de (mp_a wM) 1 u (dot_abs a b) (g_rel * dot_abs a b + g_abs).

Lemma w_score_err : forall dotf g_rel g_abs (a b : list R), dot_model dotf 1 g_rel g_abs ->
  length a = 1%nat -> length b = 1%nat ->
  Rabs (score2_with (mp_a wM) dotf wa_c a b * ln 2 - 1 * dot_R a b) <= w_delta g_rel g_abs a b.
Proof.
  intros dotf g_rel g_abs a b Hm Ha Hb.
  exact (proj1 (score2_with_error (mp_a wM) dotf 1 _ _ wa_c 1 u a b (dot_abs a b)
                  Hm Ha Hb Rlt_0_1 (ff_u_nonneg _) wa_c_err (Rle_refl _))).
Qed.

Lemma w_delta_nonneg : forall dotf g_rel g_abs (a b : list R), dot_model dotf 1 g_rel g_abs ->
  length a = 1%nat -> length b = 1%nat -> 0 <= w_delta g_rel g_abs a b.
Proof. intros; eapply Rle_trans; [apply Rabs_pos | apply w_score_err with (dotf := dotf); assumption]. Qed.

Definition wv_dotf3 := tf32x3_dot_tc_op tf32_rna tf32_rz (tc_align_op 26) (rz_flx 24) 8.
Definition wv_rel3 := tf32x3_tc_rel (bpow radix2 (1 - 26)) (bpow radix2 (1 - 24)) 8 1.
Definition wv_d3 : R := w_delta wv_rel3 0 [1] [0].
Definition wv_err3 := w_score_err wv_dotf3 _ _ [1] [0] tf32x3_tc_op_dot_model_witness eq_refl eq_refl.

Definition dv_error_tf32x3_op_witness :=
  dv_error_tf32x3_op wM (rz_flx 24) (bpow radix2 (1 - 24)) 26 8 1 1 (fun _ => true) wa_c 1 [0]
    [[([1], (1, score2_with (mp_a wM) wv_dotf3 wa_c [1] [0]))]]
    (fun _ => score2_with (mp_a wM) wv_dotf3 wa_c [1] [0] * ln 2) wv_d3 0 0
    (Rpower 2 ((wv_d3 + 0) / ln 2 + u * 0 + ea)) 1
    (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl) ltac:(lia) ltac:(lia) ltac:(lia) w_delta_op3
    ltac:(repeat constructor) (w_delta_nonneg wv_dotf3 _ _ [1] [0] tf32x3_tc_op_dot_model_witness eq_refl eq_refl)
    (Rle_refl 0) (Rle_refl 0) Rle_0_1 (wv_items_with wv_dotf3 wv_d3 wv_err3) (Rle_refl _).

Definition wv_dotf1 := tc_dot_op (tc_align_op 26) (rz_flx 24) 8.
Definition wv_rel1 := gamma (tc_delta (bpow radix2 (1 - 26)) (bpow radix2 (1 - 24)) 8) 1.
Definition wv_d1 : R := w_delta wv_rel1 0 [1] [0].
Definition wv_err1 := w_score_err wv_dotf1 _ _ [1] [0] tc_op_dot_model_witness eq_refl eq_refl.

Definition dv_error_tc_op_witness :=
  dv_error_tc_op wM (rz_flx 24) (bpow radix2 (1 - 24)) 26 8 1 1 (fun _ => true) wa_c 1 [0]
    [[([1], (1, score2_with (mp_a wM) wv_dotf1 wa_c [1] [0]))]]
    (fun _ => score2_with (mp_a wM) wv_dotf1 wa_c [1] [0] * ln 2) wv_d1 0 0
    (Rpower 2 ((wv_d1 + 0) / ln 2 + u * 0 + ea)) 1
    (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl) ltac:(lia) ltac:(lia) ltac:(lia) wt_delta_op1
    ltac:(repeat constructor) (w_delta_nonneg wv_dotf1 _ _ [1] [0] tc_op_dot_model_witness eq_refl eq_refl)
    (Rle_refl 0) (Rle_refl 0) Rle_0_1 (wv_items_with wv_dotf1 wv_d1 wv_err1) (Rle_refl _).
