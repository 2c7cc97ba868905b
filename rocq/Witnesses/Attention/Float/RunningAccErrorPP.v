(** * Witnesses of Attention/Float/RunningAccErrorPP.v (ojas_ref/verification/proof_audit.py): the items
    of Witnesses/Attention/Float/RunningAccError.v ([bf16_fp32], one tile of one item, the fp32
    per-product model split, [bp], [bt] those of [running_split_bp], [running_split_bt]), the
    per-item [eP] the item's own [dp] error
    ([0] for the generic theorem's [dp = dPx = 1]; for the kernels' [bdot] of [[1]] and [[1]] the
    absolute difference itself).  Every premise proved together. *)

From Coq Require Import Reals ZArith List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.DotError FloatModel.MixedPrecision Attention.Float.ForwardError.
From Ojas Require Import Attention.Float.DkDqError Attention.Float.RunningAccError Attention.Float.RunningAccErrorPP.
From Ojas Require Import Witnesses.Instances Witnesses.Bounds.Attention Witnesses.Attention.Float.ForwardError.
From Ojas Require Import Witnesses.Attention.Float.DvError Witnesses.Attention.Float.DkDqError.
From Ojas Require Import Witnesses.Attention.Float.RunningAccError.
Import ListNotations.
Open Scope R_scope.

Local Notation u := (ff_u (mp_a wM)).
Local Notation ea := (ff_eta (mp_a wM)).

Definition grad_error_acc_running_pp_witness :=
  grad_error_acc_running_pp wM unit (bdot (mp_a wM)) (fun _ => [1]) (fun _ => [1]) (fun _ => ws) (fun _ => 1)
    (fun _ => 1) (fun _ => 1) _ 1 _ _ _ (fun _ => true) wa_c 1 1 0 [[tt]] (fun _ => ws * ln 2) (fun _ => 1)
    (fun _ => 1) (fun _ => 0) (fun _ => ws_delta) (fun _ => wg_X) (fun _ => 0) (fun _ => 0) (fun _ => 0) 0 0 1
    (running_split_bp _ _ _) (running_split_bt _ _ _)
    blocked_acc_dot_split_model_witness ltac:(repeat constructor) Rle_0_1 (Rle_refl 0) wg_cs wr_g_items
    (running_split_bs_premise _ _ _).

(** The item's [dp] error: [bdot] of the value row [[1]] and the item's [dO] row against [dot_R]. *)
Definition wrp_eP (d : list R) : R := Rabs (bdot (mp_a wM) [1] d - dot_R [1] d).

Lemma wrp_k_items : forall x, In x (concat [[wk_x]]) -> (fun _ : list R * list R * (R * R) => true) x = true ->
  Rabs (score2 (mp_a wM) wa_c [1] (fst (fst x)) * ln 2 - 1 * dot_R [1] (fst (fst x))) <= ws_delta /\
  Rabs (fst (snd x) * ln 2 - ws * ln 2) <= 0 /\
  Rabs (score2 (mp_a wM) wa_c [1] (fst (fst x)) - fst (snd x)) <= 0 /\ wg_X <= wg_X /\
  Rabs (bdot (mp_a wM) [1] (snd (fst x)) - dot_R [1] (snd (fst x))) <= wrp_eP (snd (fst x)) /\
  Rabs (snd (snd x) - 1) <= 0 /\ 0 <= 0 /\
  Rabs (dot_R [1] (snd (fst x)) - 1) <= 0 /\ Rabs (nth 0 (fst (fst x)) 0) <= 1.
Proof.
  intros x Hx Hv; destruct (wk_items x Hx Hv) as [H1 [H2 [H3 [_ [_ H4]]]]].
  unfold wrp_eP; repeat split; try apply Rle_refl; tauto.
Qed.

Definition dk_error_acc_running_pp_witness :=
  dk_error_acc_running_pp wM _ 1 _ _ _ (bdot (mp_a wM)) (bdot (mp_a wM)) (fun _ => true) wa_c 1 1 0 [1] [1] 0
    [[wk_x]] (fun _ => ws * ln 2) (fun _ => 1) (fun _ => 0) (fun _ => ws_delta) (fun _ => wg_X)
    (fun x => wrp_eP (snd (fst x))) (fun _ => 0) (fun _ => 0) 0 0 1
    (running_split_bp _ _ _) (running_split_bt _ _ _)
    blocked_acc_dot_split_model_witness ltac:(repeat constructor) Rle_0_1 (Rle_refl 0) wg_cs
    wrp_k_items (running_split_bs_premise _ _ _).

Lemma wrp_q_items : forall y, In y (concat [[([1], [1])]]) -> (fun _ : list R * list R => true) y = true ->
  Rabs (score2 (mp_a wM) wa_c [1] (fst y) * ln 2 - 1 * dot_R [1] (fst y)) <= ws_delta /\
  Rabs (score2 (mp_a wM) wa_c [1] (fst y) - ws) <= 0 /\ wg_X <= wg_X /\
  Rabs (bdot (mp_a wM) [1] (snd y) - dot_R [1] (snd y)) <= wrp_eP (snd y) /\
  Rabs (dot_R [1] (snd y) - 1) <= 0 /\ Rabs (nth 0 (fst y) 0) <= 1.
Proof.
  intros y Hy Hv; destruct (wq_items y Hy Hv) as [H1 [H2 [_ [_ H3]]]].
  unfold wrp_eP; repeat split; try apply Rle_refl; tauto.
Qed.

Definition dq_error_acc_running_pp_witness :=
  dq_error_acc_running_pp wM _ 1 _ _ _ (bdot (mp_a wM)) (bdot (mp_a wM)) (fun _ => true) wa_c 1 1 0 [1] [1] ws 1 0
    [[([1], [1])]] (ws * ln 2) 1 0 (fun _ => ws_delta) (fun _ => wg_X) (fun y => wrp_eP (snd y)) (fun _ => 0) 0 0 1
    (running_split_bp _ _ _) (running_split_bt _ _ _)
    blocked_acc_dot_split_model_witness ltac:(repeat constructor) Rle_0_1 (Rle_refl 0) wg_cs (ws_zero _) (ws_zero _)
    wrp_q_items (running_split_bs_premise _ _ _).

