(** * Witnesses of Attention/Float/RunningAccError.v (ojas_ref/verification/proof_audit.py): one tile of one item,
    the fp32 per-product model ([blocked_acc_dot_model] at [n = 1], as [dv_error_acc_witness]),
    the bounds [bs] those of [running_bs] (which meet [running_premise] with equality,
    [running_bs_premise]).  [acc_chain_running_error]: the item [1], [wt = w = id], [z x = x * x]
    ([r = 0]).  The kernels: [bf16_fp32], the data of Witnesses/Attention/Float/DvError.v and
    DkDqError.v ([ws], [wv_x], [wk_x], ...), [delta] and [X] as there, now as constant functions.
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
  acc_chain_running_error _ 1 _ _ (fun x => x) (fun x => x) (fun x => x * x) (fun _ => 0) [[1]]
    (running_bs (fun x => x * x) (fun _ => 0) [[1]])
    blocked_acc_dot_model_witness ltac:(repeat constructor) wr_items (running_bs_premise _ _ _).

(** ** dV: the query [[1]] of [wv_x] against the key [[1]] *)

Lemma wr_v_items : forall x, In x (concat [[wv_x]]) -> (fun _ : list R * (R * R) => true) x = true ->
  Rabs (score2 (mp_a wM) wa_c (fst x) [1] * ln 2 - 1 * dot_R (fst x) [1]) <= ws_delta /\
  Rabs (snd (snd x) * ln 2 - ws * ln 2) <= 0 /\ Rabs (score2 (mp_a wM) wa_c (fst x) [1] - snd (snd x)) <= 0 /\
  Rpower 2 (2 * (ws_delta + 0) + u * 0 + ea) <= Rpower 2 (2 * (ws_delta + 0) + u * 0 + ea).
Proof.
  intros x Hx Hv; destruct (wv_items x Hx Hv) as [H1 [H2 [H3 _]]].
  split; [exact H1 | split; [exact H2 | split; [exact H3 | apply Rle_refl]]].
Qed.

Definition dv_error_acc_running_witness :=
  dv_error_acc_running wM _ 1 _ _ (bdot (mp_a wM)) (fun _ => true) wa_c 1 [1] [[wv_x]] (fun _ => ws * ln 2)
    (fun _ => ws_delta) (fun _ => Rpower 2 (2 * (ws_delta + 0) + u * 0 + ea)) 0 0 (running_bs _ _ _)
    blocked_acc_dot_model_witness ltac:(repeat constructor) wr_v_items (running_bs_premise _ _ _).
