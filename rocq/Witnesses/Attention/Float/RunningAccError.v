(** * Witnesses of Attention/Float/RunningAccError.v (ojas_ref/verification/proof_audit.py): one tile of one item,
    the fp32 per-product model split ([blocked_acc_dot_split_model] at [n = 1], as
    [dv_error_acc_witness]), the bounds [bp], [bt] those of [running_split_bp], [running_split_bt]
    (which meet [running_split_premise] with equality, [running_split_bs_premise]).
    [acc_chain_running_error]: the item [1], [wt = w = id], [z x = x * x]
    ([r = 0]).  The kernels: [bf16_fp32], the data of Witnesses/Attention/Float/DvError.v and
    DkDqError.v ([ws], [wv_x], [wk_x], ...), [delta] and [X] as there, now as constant functions, and
    so the lse's error [Dl] (0, the saved lse exact there) and [Am] (0).
    Every premise proved together. *)

From Coq Require Import Reals ZArith List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.DotError FloatModel.MixedPrecision Attention.Float.ForwardError.
From Ojas Require Import Attention.Float.DvError Attention.Float.DkDqError Attention.Float.RunningAccError.
From Ojas Require Import Witnesses.Instances Witnesses.Bounds.Attention Witnesses.Attention.Float.ForwardError.
From Ojas Require Import Witnesses.Attention.Float.DvError Witnesses.Attention.Float.DkDqError.
Import ListNotations.
Open Scope R_scope.

Local Notation u := (ff_u (mp_a wM)).
Local Notation ea := (ff_eta (mp_a wM)).

(** ** The generic chain: the item [1] *)

Lemma wr_items : forall x : R, In x (concat [[1]]) -> Rabs (x * x - x * x) <= 0.
Proof. intros x _; apply ws_zero. Qed.

Definition acc_chain_running_error_witness :=
  acc_chain_running_error _ 1 _ _ _ (fun x => x) (fun x => x) (fun x => x * x) (fun _ => 0) [[1]]
    (running_split_bp (fun x => x * x) (fun _ => 0) [[1]]) (running_split_bt (fun x => x * x) (fun _ => 0) [[1]])
    blocked_acc_dot_split_model_witness ltac:(repeat constructor) wr_items (running_split_bs_premise _ _ _).

(** ** dV: the query [[1]] of [wv_x] against the key [[1]] *)

Lemma wr_v_items : forall x, In x (concat [[wv_x]]) -> (fun _ : list R * (R * R) => true) x = true ->
  Rabs (score2 (mp_a wM) wa_c (fst x) [1] * ln 2 - 1 * dot_R (fst x) [1]) <= ws_delta /\
  Rabs (snd (snd x) * ln 2 - ws * ln 2) <= 0 /\ Rabs (score2 (mp_a wM) wa_c (fst x) [1] - snd (snd x)) <= 0 /\
  Rpower 2 ((ws_delta + 0) / ln 2 + u * 0 + ea) <= Rpower 2 ((ws_delta + 0) / ln 2 + u * 0 + ea).
Proof.
  intros x Hx Hv; destruct (wv_items x Hx Hv) as [H1 [H2 [H3 _]]].
  split; [exact H1 | split; [exact H2 | split; [exact H3 | apply Rle_refl]]].
Qed.

Definition dv_error_acc_running_witness :=
  dv_error_acc_running wM _ 1 _ _ _ (bdot (mp_a wM)) (fun _ => true) wa_c 1 [1] [[wv_x]] (fun _ => ws * ln 2)
    (fun _ => ws_delta) (fun _ => Rpower 2 ((ws_delta + 0) / ln 2 + u * 0 + ea)) (fun _ => 0) (fun _ => 0)
    (running_split_bp _ _ _) (running_split_bt _ _ _)
    blocked_acc_dot_split_model_witness ltac:(repeat constructor) wr_v_items (running_split_bs_premise _ _ _).

(** ** dK and dQ: the items of Witnesses/Attention/Float/DkDqError.v *)

Lemma wr_g_items : forall x : unit, In x (concat [[tt]]) -> (fun _ => true) x = true ->
  Rabs (score2 (mp_a wM) wa_c [1] [1] * ln 2 - 1 * dot_R [1] [1]) <= ws_delta /\
  Rabs (ws * ln 2 - ws * ln 2) <= 0 /\
  Rabs (score2 (mp_a wM) wa_c [1] [1] - ws) <= 0 /\ wg_X <= wg_X /\ Rabs (1 - 1) <= 0 /\ Rabs (1 - 1) <= 0 /\
  0 <= 0 /\ Rabs (1 - 1) <= 0 /\ Rabs 1 <= 1.
Proof.
  intros x Hx Hv; destruct (wg_items x Hx Hv) as [H1 [H2 [H3 H4]]].
  repeat split; try apply Rle_refl; tauto.
Qed.

Definition grad_error_acc_running_with_witness :=
  grad_error_acc_running_with wM unit (bdot (mp_a wM)) (fun _ => [1]) (fun _ => [1]) (fun _ => ws) (fun _ => 1)
    (fun _ => 1) (fun _ => 1) _ 1 _ _ _ (fun _ => true) wa_c 1 1 0 [[tt]] (fun _ => ws * ln 2) (fun _ => 1)
    (fun _ => 1) (fun _ => 0) (fun _ => ws_delta) (fun _ => wg_X) (fun _ => 0) (fun _ => 0) 0 0 0 1
    (running_split_bp _ _ _) (running_split_bt _ _ _)
    blocked_acc_dot_split_model_witness ltac:(repeat constructor) Rle_0_1 (Rle_refl 0) wg_cs wr_g_items
    (running_split_bs_premise _ _ _).

Lemma wr_k_items : forall x, In x (concat [[wk_x]]) -> (fun _ : list R * list R * (R * R) => true) x = true ->
  Rabs (score2 (mp_a wM) wa_c [1] (fst (fst x)) * ln 2 - 1 * dot_R [1] (fst (fst x))) <= ws_delta /\
  Rabs (fst (snd x) * ln 2 - ws * ln 2) <= 0 /\
  Rabs (score2 (mp_a wM) wa_c [1] (fst (fst x)) - fst (snd x)) <= 0 /\ wg_X <= wg_X /\
  length (snd (fst x)) = 1%nat /\
  dot_abs [1] (snd (fst x)) <= 1 /\ Rabs (snd (snd x) - 1) <= 0 /\ 0 <= 0 /\
  Rabs (dot_R [1] (snd (fst x)) - 1) <= 0 /\ Rabs (nth 0 (fst (fst x)) 0) <= 1.
Proof.
  intros x Hx Hv; destruct (wk_items x Hx Hv) as [H1 [H2 [H3 H4]]].
  repeat split; try apply Rle_refl; tauto.
Qed.

Definition dk_error_acc_running_witness :=
  dk_error_acc_running wM _ 1 _ _ _ (bdot (mp_a wM)) (bdot (mp_a wM)) (gamma u 1) ((1 + gamma u (1 - 1)) * INR 1 * ea)
    (fun _ => true) wa_c 1 1 0 [1] [1] 0 [[wk_x]] (fun _ => ws * ln 2) (fun _ => 1) (fun _ => 0)
    (fun _ => ws_delta) (fun _ => wg_X) (fun _ => 0) (fun _ => 0) 1 1 0 0 1
    (running_split_bp _ _ _) (running_split_bt _ _ _)
    blocked_acc_dot_split_model_witness ltac:(repeat constructor) Rle_0_1 (Rle_refl 0) wg_cs eq_refl wf_dm
    wr_k_items (running_split_bs_premise _ _ _).

Lemma wr_q_items : forall y, In y (concat [[([1], [1])]]) -> (fun _ : list R * list R => true) y = true ->
  Rabs (score2 (mp_a wM) wa_c [1] (fst y) * ln 2 - 1 * dot_R [1] (fst y)) <= ws_delta /\
  Rabs (score2 (mp_a wM) wa_c [1] (fst y) - ws) <= 0 /\ wg_X <= wg_X /\ length (snd y) = 1%nat /\
  dot_abs [1] (snd y) <= 1 /\ Rabs (dot_R [1] (snd y) - 1) <= 0 /\ Rabs (nth 0 (fst y) 0) <= 1.
Proof.
  intros y Hy Hv; destruct (wq_items y Hy Hv) as [H1 [H2 H3]].
  repeat split; try apply Rle_refl; tauto.
Qed.

Definition dq_error_acc_running_witness :=
  dq_error_acc_running wM _ 1 _ _ _ (bdot (mp_a wM)) (bdot (mp_a wM)) (gamma u 1) ((1 + gamma u (1 - 1)) * INR 1 * ea)
    (fun _ => true) wa_c 1 1 0 [1] [1] ws 1 0 [[([1], [1])]] (ws * ln 2) 1 0
    (fun _ => ws_delta) (fun _ => wg_X) (fun _ => 0) 0 1 1 0 1
    (running_split_bp _ _ _) (running_split_bt _ _ _)
    blocked_acc_dot_split_model_witness ltac:(repeat constructor) Rle_0_1 (Rle_refl 0) wg_cs eq_refl wf_dm
    (ws_zero _) (ws_zero _) wr_q_items (running_split_bs_premise _ _ _).
