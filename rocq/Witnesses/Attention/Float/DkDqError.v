(** * Witnesses of Attention/Float/DkDqError.v (ojas_ref/verification/proof_audit.py): [bf16_fp32],
    [scale = cs = 1] ([ucs = 0]), the fp32 constant [c = rnd (1 / ln 2)], one query [[1]] and one
    key [[1]] whose saved [lse2] is the score [s] ([Am = 0], [Lx = s ln 2], [Dl = 0]), value and
    [dO] rows [[1]] ([dP = D = 1]: [Ym = 0]), [delta] and [X] as in Witnesses/Attention/Float/DvError.v;
    [delta_close] on the one product [1 * 1], [dot_R_perturb] on [[1]].  Every premise proved
    together. *)

From Coq Require Import Reals ZArith List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import FloatModel.DotError.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision FloatModel.BlockedSum Attention.Float.ForwardError.
From Ojas Require Import Attention.Float.DkDqError.
From Ojas Require Import Witnesses.Instances Witnesses.Bounds.Attention Witnesses.Attention.Float.ForwardError.
From Ojas Require Import Witnesses.Attention.Float.DvError.
From Ojas Require Import FloatModel.TensorCoreSum FloatModel.Tf32Product Witnesses.FloatModel.TensorCoreSum.
From Ojas Require Import Witnesses.FloatModel.Tf32Product.
Import ListNotations.
Open Scope R_scope.

Local Notation u := (ff_u (mp_a wM)).
Local Notation ea := (ff_eta (mp_a wM)).

Definition wg_X : R := Rpower 2 ((ws_delta + 0) / ln 2 + u * 0 + ea).

Lemma wg_cs : Rabs (1 - 1) <= 0 * 1.
Proof. rewrite Rmult_0_l; apply ws_zero. Qed.

(** ** The generic gradient: one key of the unit type *)

Lemma wg_items : forall x : unit, In x (concat [[tt]]) -> (fun _ => true) x = true ->
  Rabs (score2 (mp_a wM) wa_c [1] [1] * ln 2 - 1 * dot_R [1] [1]) <= ws_delta /\
  Rabs (ws * ln 2 - ws * ln 2) <= 0 /\
  Rabs (score2 (mp_a wM) wa_c [1] [1] - ws) <= 0 /\ Rabs (1 - 1) <= 0 /\ Rabs (1 - 1) <= 0 /\
  0 <= 0 /\ Rabs (1 - 1) <= 0 /\ Rabs 1 <= 1.
Proof.
  intros _ _ _; rewrite Rabs_R1.
  split; [exact ws_err |]; repeat split; try apply ws_zero; lra.
Qed.

Definition grad_error_witness :=
  grad_error wM unit (fun _ => [1]) (fun _ => [1]) (fun _ => ws) (fun _ => 1) (fun _ => 1) (fun _ => 1)
    (fun _ => true) wa_c 1 1 0 [[tt]] (fun _ => ws * ln 2) (fun _ => 1) (fun _ => 1) (fun _ => 0)
    ws_delta 0 0 wg_X 0 0 0 1 1
    Rle_0_1 (Rle_refl 0) wg_cs (Rle_refl 0) (Rle_refl 0) (Rle_refl 0) Rle_0_1 ltac:(repeat constructor)
    ws_b (Rle_refl _) wg_items.

(** ** [dK]: the query row [[1]], the [dO] row [[1]], [lse2 = s], [D = 1] *)

Definition wk_x : list R * list R * (R * R) := ([1], [1], (ws, 1)).

Lemma wg_E_u : INR 1 * u < 1.
Proof. exact wf_E_u. Qed.

Lemma wk_items : forall x, In x (concat [[wk_x]]) -> (fun _ : list R * list R * (R * R) => true) x = true ->
  Rabs (score2 (mp_a wM) wa_c [1] (fst (fst x)) * ln 2 - 1 * dot_R [1] (fst (fst x))) <= ws_delta /\
  Rabs (fst (snd x) * ln 2 - ws * ln 2) <= 0 /\
  Rabs (score2 (mp_a wM) wa_c [1] (fst (fst x)) - fst (snd x)) <= 0 /\
  length (snd (fst x)) = 1%nat /\
  dot_abs [1] (snd (fst x)) <= 1 /\ Rabs (snd (snd x) - 1) <= 0 /\ 0 <= 0 /\
  Rabs (dot_R [1] (snd (fst x)) - 1) <= 0 /\ Rabs (nth 0 (fst (fst x)) 0) <= 1.
Proof.
  intros x [<- | []] _; cbn [fst snd wk_x nth].
  split; [exact ws_err |]; rewrite ws_dot, wa_dot_abs, Rabs_R1.
  repeat split; try apply ws_zero; lra.
Qed.

Definition dk_error_witness :=
  dk_error wM (fun _ => true) wa_c 1 1 0 [1] [1] 0 [[wk_x]] (fun _ => ws * ln 2) (fun _ => 1) (fun _ => 0)
    ws_delta 0 0 wg_X 1 1 0 0 1 1
    Rle_0_1 (Rle_refl 0) wg_cs Rle_0_1 (Rle_refl 0) (Rle_refl 0) Rle_0_1 eq_refl (le_n 1) wg_E_u
    ltac:(repeat constructor) ws_b (Rle_refl _) wk_items.

(** ** [dQ]: the key row [[1]], the value row [[1]], [lse2 = s], [D = 1] *)

Lemma wq_items : forall y, In y (concat [[([1], [1])]]) -> (fun _ : list R * list R => true) y = true ->
  Rabs (score2 (mp_a wM) wa_c [1] (fst y) * ln 2 - 1 * dot_R [1] (fst y)) <= ws_delta /\
  Rabs (score2 (mp_a wM) wa_c [1] (fst y) - ws) <= 0 /\ length (snd y) = 1%nat /\
  dot_abs [1] (snd y) <= 1 /\ Rabs (dot_R [1] (snd y) - 1) <= 0 /\ Rabs (nth 0 (fst y) 0) <= 1.
Proof.
  intros y [<- | []] _; cbn [fst snd nth].
  split; [exact ws_err |]; rewrite ws_dot, wa_dot_abs, Rabs_R1.
  repeat split; try apply ws_zero; lra.
Qed.

Definition dq_error_witness :=
  dq_error wM (fun _ => true) wa_c 1 1 0 [1] [1] ws 1 0 [[([1], [1])]] (ws * ln 2) 1 0 ws_delta 0 0 wg_X
    1 1 0 1 1
    Rle_0_1 (Rle_refl 0) wg_cs Rle_0_1 (Rle_refl 0) Rle_0_1 eq_refl (le_n 1) wg_E_u
    ltac:(repeat constructor) ws_b (Rle_refl _) (ws_zero _) (ws_zero _) wq_items.

(** ** [delta_close] on the one product [1 * 1]; [dot_R_perturb] on [[1]] *)

Lemma wd_u : INR 0 * u < 1.
Proof. simpl; rewrite Rmult_0_l; lra. Qed.

Definition delta_close_witness :=
  delta_close wM (Leaf (ff_rnd (mp_a wM) (1 * 1))) [1] [1] 0 eq_refl (le_n 0) wd_u.

Lemma wd_nth : forall i, (i < length [1])%nat -> Rabs (nth i [1] 0 - nth i [1] 0) <= 0.
Proof. intros; apply ws_zero. Qed.

Definition dot_R_perturb_witness := dot_R_perturb [1] [1] [1] 0 (Rle_refl 0) eq_refl wd_nth.

(** ** The dots as parameters, at their blocked fp32 instance ([blocked_dot_model]) *)

Definition grad_error_with_witness :=
  grad_error_with wM unit (bdot (mp_a wM)) (fun _ => [1]) (fun _ => [1]) (fun _ => ws) (fun _ => 1) (fun _ => 1)
    (fun _ => 1) (fun _ => true) wa_c 1 1 0 [[tt]] (fun _ => ws * ln 2) (fun _ => 1) (fun _ => 1) (fun _ => 0)
    ws_delta 0 0 wg_X 0 0 0 1 1
    Rle_0_1 (Rle_refl 0) wg_cs (Rle_refl 0) (Rle_refl 0) (Rle_refl 0) Rle_0_1 ltac:(repeat constructor)
    ws_b (Rle_refl _) wg_items.

Definition dk_error_dot_witness :=
  dk_error_dot wM (bdot (mp_a wM)) (bdot (mp_a wM)) (gamma u 1) ((1 + gamma u (1 - 1)) * INR 1 * ea)
    (fun _ => true) wa_c 1 1 0 [1] [1] 0 [[wk_x]] (fun _ => ws * ln 2) (fun _ => 1) (fun _ => 0)
    ws_delta 0 0 wg_X 1 1 0 0 1 1
    Rle_0_1 (Rle_refl 0) wg_cs Rle_0_1 (Rle_refl 0) (Rle_refl 0) Rle_0_1 eq_refl wf_dm
    ltac:(repeat constructor) ws_b (Rle_refl _) wk_items.

Definition dq_error_dot_witness :=
  dq_error_dot wM (bdot (mp_a wM)) (bdot (mp_a wM)) (gamma u 1) ((1 + gamma u (1 - 1)) * INR 1 * ea)
    (fun _ => true) wa_c 1 1 0 [1] [1] ws 1 0 [[([1], [1])]] (ws * ln 2) 1 0 ws_delta 0 0 wg_X
    1 1 0 1 1
    Rle_0_1 (Rle_refl 0) wg_cs Rle_0_1 (Rle_refl 0) Rle_0_1 eq_refl wf_dm
    ltac:(repeat constructor) ws_b (Rle_refl _) (ws_zero _) (ws_zero _) wq_items.

(** ** The tiles accumulated by [tl.dot], at the fp32 per-product model
    ([blocked_acc_dot_model] at [n = 1]: tiles of one item) *)
Definition grad_error_acc_with_witness :=
  grad_error_acc_with wM unit (bdot (mp_a wM)) (fun _ => [1]) (fun _ => [1]) (fun _ => ws) (fun _ => 1)
    (fun _ => 1) (fun _ => 1) _ 1 _ _ (fun _ => true) wa_c 1 1 0 [[tt]] (fun _ => ws * ln 2) (fun _ => 1)
    (fun _ => 1) (fun _ => 0) ws_delta 0 0 wg_X 0 0 0 1
    blocked_acc_dot_model_witness ltac:(repeat constructor)
    Rle_0_1 (Rle_refl 0) wg_cs (Rle_refl 0) (Rle_refl 0) (Rle_refl 0) Rle_0_1 (Rle_refl _) wg_items.

Definition dk_error_acc_witness :=
  dk_error_acc wM _ 1 _ _ (bdot (mp_a wM)) (bdot (mp_a wM)) (gamma u 1) ((1 + gamma u (1 - 1)) * INR 1 * ea)
    (fun _ => true) wa_c 1 1 0 [1] [1] 0 [[wk_x]] (fun _ => ws * ln 2) (fun _ => 1) (fun _ => 0)
    ws_delta 0 0 wg_X 1 1 0 0 1
    blocked_acc_dot_model_witness ltac:(repeat constructor)
    Rle_0_1 (Rle_refl 0) wg_cs Rle_0_1 (Rle_refl 0) (Rle_refl 0) Rle_0_1 eq_refl wf_dm
    (Rle_refl _) wk_items.

Definition dq_error_acc_witness :=
  dq_error_acc wM _ 1 _ _ (bdot (mp_a wM)) (bdot (mp_a wM)) (gamma u 1) ((1 + gamma u (1 - 1)) * INR 1 * ea)
    (fun _ => true) wa_c 1 1 0 [1] [1] ws 1 0 [[([1], [1])]] (ws * ln 2) 1 0 ws_delta 0 0 wg_X
    1 1 0 1
    blocked_acc_dot_model_witness ltac:(repeat constructor)
    Rle_0_1 (Rle_refl 0) wg_cs Rle_0_1 (Rle_refl 0) Rle_0_1 eq_refl wf_dm
    (Rle_refl _) (ws_zero _) (ws_zero _) wq_items.

(** ** The H100 instances: the query (dK) or key (dQ) row [[0]] ([P = 0]), 26 bits, blocks of 8,
    the output truncated, tiles of one item, head dim 1; the score error from [score2_with_error]
    at the scores' dot model. *)
Lemma wh_items_k : forall (dotf : list R -> list R -> R) d,
  Rabs (score2_with (mp_a wM) dotf wa_c [0] [1] * ln 2 - 1 * dot_R [0] [1]) <= d ->
  forall x, In x (concat [[([1], [1], (score2_with (mp_a wM) dotf wa_c [0] [1], 1))]]) ->
  (fun _ : list R * list R * (R * R) => true) x = true ->
  Rabs (score2_with (mp_a wM) dotf wa_c [0] (fst (fst x)) * ln 2 - 1 * dot_R [0] (fst (fst x))) <= d /\
  Rabs (fst (snd x) * ln 2 - score2_with (mp_a wM) dotf wa_c [0] [1] * ln 2) <= 0 /\
  Rabs (score2_with (mp_a wM) dotf wa_c [0] (fst (fst x)) - fst (snd x)) <= 0 /\
  length (snd (fst x)) = 1%nat /\
  dot_abs [1] (snd (fst x)) <= 1 /\ Rabs (snd (snd x) - 1) <= 0 /\ 0 <= 0 /\
  Rabs (dot_R [1] (snd (fst x)) - 1) <= 0 /\ Rabs (nth 0 (fst (fst x)) 0) <= 1.
Proof.
  intros dotf d Hs x [<- | []] _; cbn [fst snd nth].
  split; [exact Hs |]; rewrite ws_dot, wa_dot_abs, Rabs_R1.
  repeat split; try apply ws_zero; lra.
Qed.

Lemma wh_items_q : forall (dotf : list R -> list R -> R) d,
  Rabs (score2_with (mp_a wM) dotf wa_c [0] [1] * ln 2 - 1 * dot_R [0] [1]) <= d ->
  forall y, In y (concat [[([1], [1])]]) -> (fun _ : list R * list R => true) y = true ->
  Rabs (score2_with (mp_a wM) dotf wa_c [0] (fst y) * ln 2 - 1 * dot_R [0] (fst y)) <= d /\
  Rabs (score2_with (mp_a wM) dotf wa_c [0] (fst y) - score2_with (mp_a wM) dotf wa_c [0] [1]) <= 0 /\
  length (snd y) = 1%nat /\ dot_abs [1] (snd y) <= 1 /\ Rabs (dot_R [1] (snd y) - 1) <= 0 /\
  Rabs (nth 0 (fst y) 0) <= 1.
Proof.
  intros dotf d Hs y [<- | []] _; cbn [fst snd nth].
  split; [exact Hs |]; rewrite ws_dot, wa_dot_abs, Rabs_R1.
  repeat split; try apply ws_zero; lra.
Qed.

Definition wh_d3 : R := w_delta wv_rel3 0 [0] [1].
Definition wh_err3 := w_score_err wv_dotf3 _ _ [0] [1] tf32x3_tc_op_dot_model_witness eq_refl eq_refl.

Definition wh_d1 : R := w_delta wv_rel1 0 [0] [1].
Definition wh_err1 := w_score_err wv_dotf1 _ _ [0] [1] tc_op_dot_model_witness eq_refl eq_refl.

Definition dk_error_tf32x3_op_witness :=
  dk_error_tf32x3_op wM (rz_flx 24) (bpow radix2 (1 - 24)) 26 8 1 1 1 (fun _ => true) wa_c 1 1 0 [0] [1] 0
    [[([1], [1], (score2_with (mp_a wM) wv_dotf3 wa_c [0] [1], 1))]]
    (fun _ => score2_with (mp_a wM) wv_dotf3 wa_c [0] [1] * ln 2) (fun _ => 1) (fun _ => 0)
    wh_d3 0 0 (Rpower 2 ((wh_d3 + 0) / ln 2 + u * 0 + ea)) 1 1 0 0 1
    (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl) ltac:(lia) ltac:(lia) ltac:(lia) w_delta_op3 ltac:(lia) ltac:(lia)
    w_delta_op3 ltac:(repeat constructor) Rle_0_1 (Rle_refl 0) wg_cs Rle_0_1 (Rle_refl 0) (Rle_refl 0) Rle_0_1
    eq_refl (Rle_refl _) (wh_items_k wv_dotf3 wh_d3 wh_err3).

Definition dq_error_tf32x3_op_witness :=
  dq_error_tf32x3_op wM (rz_flx 24) (bpow radix2 (1 - 24)) 26 8 1 1 1 (fun _ => true) wa_c 1 1 0 [0] [1]
    (score2_with (mp_a wM) wv_dotf3 wa_c [0] [1]) 1 0 [[([1], [1])]]
    (score2_with (mp_a wM) wv_dotf3 wa_c [0] [1] * ln 2) 1 0 wh_d3 0 0 (Rpower 2 ((wh_d3 + 0) / ln 2 + u * 0 + ea))
    1 1 0 1
    (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl) ltac:(lia) ltac:(lia) ltac:(lia) w_delta_op3 ltac:(lia) ltac:(lia)
    w_delta_op3 ltac:(repeat constructor) Rle_0_1 (Rle_refl 0) wg_cs Rle_0_1 (Rle_refl 0) Rle_0_1
    eq_refl (Rle_refl _) (ws_zero _) (ws_zero _) (wh_items_q wv_dotf3 wh_d3 wh_err3).

Definition dk_error_tc_op_witness :=
  dk_error_tc_op wM (rz_flx 24) (bpow radix2 (1 - 24)) 26 8 1 1 1 (fun _ => true) wa_c 1 1 0 [0] [1] 0
    [[([1], [1], (score2_with (mp_a wM) wv_dotf1 wa_c [0] [1], 1))]]
    (fun _ => score2_with (mp_a wM) wv_dotf1 wa_c [0] [1] * ln 2) (fun _ => 1) (fun _ => 0)
    wh_d1 0 0 (Rpower 2 ((wh_d1 + 0) / ln 2 + u * 0 + ea)) 1 1 0 0 1
    (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl) ltac:(lia) ltac:(lia) ltac:(lia) wt_delta_op1 ltac:(lia) ltac:(lia)
    wt_delta_op1 ltac:(repeat constructor) Rle_0_1 (Rle_refl 0) wg_cs Rle_0_1 (Rle_refl 0) (Rle_refl 0) Rle_0_1
    eq_refl (Rle_refl _) (wh_items_k wv_dotf1 wh_d1 wh_err1).

Definition dq_error_tc_op_witness :=
  dq_error_tc_op wM (rz_flx 24) (bpow radix2 (1 - 24)) 26 8 1 1 1 (fun _ => true) wa_c 1 1 0 [0] [1]
    (score2_with (mp_a wM) wv_dotf1 wa_c [0] [1]) 1 0 [[([1], [1])]]
    (score2_with (mp_a wM) wv_dotf1 wa_c [0] [1] * ln 2) 1 0 wh_d1 0 0 (Rpower 2 ((wh_d1 + 0) / ln 2 + u * 0 + ea))
    1 1 0 1
    (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl) ltac:(lia) ltac:(lia) ltac:(lia) wt_delta_op1 ltac:(lia) ltac:(lia)
    wt_delta_op1 ltac:(repeat constructor) Rle_0_1 (Rle_refl 0) wg_cs Rle_0_1 (Rle_refl 0) Rle_0_1
    eq_refl (Rle_refl _) (ws_zero _) (ws_zero _) (wh_items_q wv_dotf1 wh_d1 wh_err1).
