(** * Witnesses of Attention/Float/ForwardAccError.v (ojas_ref/verification/proof_audit.py):
    [bf16_fp32]; the accumulator's fold over one tile of one key of score [0] and value [1]
    ([K = 0], the fp32 per-product accumulating dot [blocked_acc_dot_model], [n = 1]); the
    forward attention at the witnesses' constants of Witnesses/Attention/Float/ForwardError.v
    (one query [[1]] or [[0]], one key [[1]] of value [1], [c = rnd (1 / ln 2)], one tile of
    one key), with [CGA = cgA g_rel], [CRA = crA g_rel] ([Tt = 1]); the H100 instances at
    the tensor-core constants used there (26 bits, blocks of 8, output truncated); every
    premise proved together. *)

From Coq Require Import Reals ZArith QArith Qreals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision FloatModel.DotError.
From Ojas Require Import Attention.Float.OnlineSoftmaxTile Attention.Float.ForwardError Attention.Float.NumeratorError.
From Ojas Require Import Attention.Float.ForwardAccError.
From Ojas Require Import Bounds.Rational Witnesses.Instances Witnesses.Bounds.Attention Witnesses.Attention.Float.ForwardError.
From Ojas Require Import FloatModel.TensorCoreSum FloatModel.Tf32Product Witnesses.FloatModel.TensorCoreSum.
From Ojas Require Import Witnesses.FloatModel.Tf32Product.
Import ListNotations.
Open Scope R_scope.

Local Notation u := (ff_u (mp_a wM)).

(** ** The accumulator's fold: keys are scores, every key visible, value [1] *)

Lemma wfa_keys : forall k : R, In k (concat [[0]]) -> (fun _ : R => true) k = true ->
  ff_fmt (mp_a wM) ((fun s : R => s) k) /\ 0 <= (fun s : R => s) k <= 0 + 0
  /\ Rabs ((fun (_ : R) (_ : nat) => 1) k 0%nat) <= 1.
Proof.
  intros k [<- | []] _; rewrite Rabs_R1; split; [apply ff_fmt_0 | lra].
Qed.

Lemma wfa_m : ks_m (kernel_run_acc wM R (fun s => s) (fun _ => true) (fun _ _ => 1)
                      (fun c a b => ff_rnd (mp_a wM) (c + bdot (mp_a wM) a b)) (kernel_start 1) [[0]]) = Some 0.
Proof. reflexivity. Qed.

Definition acc_kernel_inv_witness :=
  acc_kernel_inv wM R (fun s => s) (fun _ => true) (fun _ _ => 1) _ 1 _ _ 0 1 0 1 1 0 [[0]] (kernel_start 1)
    blocked_acc_dot_model_witness (Rle_refl 0) Rle_0_1 ltac:(repeat constructor) (le_n 1) (le_n 1) wfa_keys
    eq_refl ltac:(cbn; lia) 0 wfa_m.

(** ** The forward attention, the fp32 per-product scores and P.V *)

Lemma wfa_tiles_n : Forall (fun tl : list (list R * R) => length tl = 1%nat) [[wa_key]].
Proof. repeat constructor. Qed.

Definition attention_forward_acc_posteriori_witness :=
  attention_forward_acc_posteriori wM (bdot (mp_a wM)) (gamma u 1) ((1 + gamma u (1 - 1)) * INR 1 * ff_eta (mp_a wM))
    (fun c a b => ff_rnd (mp_a wM) (c + bdot (mp_a wM) a b)) 1 _ _
    [1] wa_c 1 u 1 1 (Q2R wf_X) (Q2R wf_Y) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR) _ _
    1 1 1 (fun _ => true) [[wa_key]] wa_exp2_0 wa_vis wf_dm blocked_acc_dot_model_witness wf_pre_de
    (Rle_refl _) (Rle_refl _) eq_refl wf_keys_vis wfa_tiles_n (le_n 1) (le_n 1).

(** ** The H100 instances (the query [[0]]) *)

Definition attention_forward_acc_posteriori_tf32x3_op_witness :=
  attention_forward_acc_posteriori_tf32x3_op wM (rz_flx 24) (bpow radix2 (1 - 24)) 26 8 1 1
    [0] wa_c 1 u 0 1 (Q2R wf_X) (Q2R wf_Y) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR) _ _ 1 1 1 1 (fun _ => true) [[wa_key]]
    (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl) ltac:(lia) ltac:(lia) ltac:(lia) w_delta_op3
    ltac:(lia) ltac:(lia) w_delta_op3
    wa_exp2_0 wa_vis (wt_pre _) (Rle_refl _) (Rle_refl _) eq_refl wt_keys_vis wfa_tiles_n (le_n 1) (le_n 1).

Definition attention_forward_acc_posteriori_tc_op_witness :=
  attention_forward_acc_posteriori_tc_op wM (rz_flx 24) (bpow radix2 (1 - 24)) 26 8 1 1
    [0] wa_c 1 u 0 1 (Q2R wf_X) (Q2R wf_Y) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR) _ _ 1 1 1 1 (fun _ => true) [[wa_key]]
    (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl) ltac:(lia) ltac:(lia) ltac:(lia) wt_delta_op1
    ltac:(lia) ltac:(lia) wt_delta_op1
    wa_exp2_0 wa_vis (wt_pre _) (Rle_refl _) (Rle_refl _) eq_refl wt_keys_vis wfa_tiles_n (le_n 1) (le_n 1).
