(** * Witnesses of Attention/Float/DeltaKernelError.v (ojas_ref/verification/proof_audit.py):
    [bf16_fp32] ([wM]); one tile of one visible key of score [0] and value [1] ([K = 0],
    [n = 1], the fp32 per-product accumulating dot [blocked_acc_dot_model], one output
    coordinate), the exact score [0] with no score error ([dl = dmax = 0]), [dO = 1],
    [tb = lb = 1/2]; every premise proved together. *)

From Coq Require Import Reals List Lra Lia.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision.
From Ojas Require Import Attention.Float.OnlineSoftmaxTile Attention.Float.ForwardError Attention.Float.ForwardSharedWeights.
From Ojas Require Import Attention.Float.DeltaKernelError.
From Ojas Require Import Witnesses.Instances Witnesses.Attention.Float.ForwardError.
Import ListNotations.
Open Scope R_scope.

Lemma wdk_exp2_nonneg : forall x, 0 <= mp_exp2 wM x.
Proof. exact (mixed_fp32_exp2_nonneg bf16 bf16_in_fp32). Qed.

Lemma wdk_tiles_n : forall tl : list R, In tl [[0]] -> length tl = 1%nat.
Proof. intros tl [<- | []]; reflexivity. Qed.

Lemma wdk_keys : forall k : R, In k (concat [[0]]) -> (fun _ : R => true) k = true ->
  ff_fmt (mp_a wM) ((fun s : R => s) k) /\ 0 <= (fun s : R => s) k <= 0 + 0.
Proof. intros k [<- | []] _; split; [apply ff_fmt_0 | lra]. Qed.

Lemma wdk_scores : forall k : R, In k (concat [[0]]) -> (fun _ : R => true) k = true ->
  Rabs ((fun s : R => s) k * ln 2 - (fun _ : R => 0) k) <= (fun _ : R => 0) k /\ (fun _ : R => 0) k <= 0.
Proof. intros k [<- | []] _; rewrite Rmult_0_l, Rminus_0_r, Rabs_R0; lra. Qed.

Lemma wdk_vis : exists k : R, In k (concat [[0]]) /\ (fun _ : R => true) k = true.
Proof. exists 0; split; [left; reflexivity | reflexivity]. Qed.

Lemma wdk_cs : forall c, In c [0%nat] -> (c < 1)%nat.
Proof. intros c [<- | []]; lia. Qed.

Lemma wdk_small : 0 <= mp_ue wM <= / 16777216 /\ 0 <= mp_eta_e wM <= / 16777216
  /\ 0 <= ff_u (mp_a wM) <= / 16777216 /\ 0 <= ff_eta (mp_a wM) <= / 16777216.
Proof.
  change (mp_ue wM) with (ff_u (mp_a wM)); change (mp_eta_e wM) with (ff_eta (mp_a wM)).
  pose proof w_eta_small; rewrite w_u; lra.
Qed.

Ltac wdk_num :=
  cbv beta zeta; cbn [concat app map length seq firstn INR pow];
  rewrite ?rsum_cons, ?rsum_nil, ?exp_0, ?Rmult_0_r, ?Rpower_O by lra;
  unfold Rw, l_growth; cbn [INR pow]; rewrite ?Rmult_0_r, ?Rpower_O, ?exp_0 by lra;
  pose proof wdk_small as [[? ?] [[? ?] [[? ?] [? ?]]]].

Ltac wdk_tb_close :=
  set (x := mp_ue wM) in *; set (y := mp_eta_e wM) in *;
  replace (1 / (1 + 0)) with 1 by field;
  assert (Hq : (1 + x + y) * (1 + x) <= 4) by nra;
  assert (y * ((1 + x + y) * (1 + x)) <= / 16777216 * 4) by (apply Rmult_le_compat; nra);
  lra.

Ltac wdk_lb_close :=
  replace (1 - 1 + 2 * 1)%nat with 2%nat by reflexivity; cbn [pow];
  set (a := ff_u (mp_a wM)) in *; set (x := mp_ue wM) in *; set (y := mp_eta_e wM) in *;
  set (e := ff_eta (mp_a wM)) in *;
  replace (1 - / 2) with (/ 2) by field; unfold Rdiv; rewrite Rinv_inv;
  assert (Ha2 : (1 + a) * ((1 + a) * 1) <= 2) by nra;
  assert (Hq : (1 + a) * ((1 + a) * 1) * (1 + x + y) * 1 <= 4) by nra;
  assert (e * ((1 + a) * ((1 + a) * 1) * (1 + x + y) * 1) <= / 16777216 * 4) by (apply Rmult_le_compat; nra);
  nra.

Lemma wdk_tb_lt : / 2 < 1.
Proof. lra. Qed.

Definition attention_delta_kernel_error_witness :=
  attention_delta_kernel_error wM R (fun s => s) (fun _ => true) (fun _ _ => 1)
    (fun c a b => ff_rnd (mp_a wM) (c + bdot (mp_a wM) a b)) 1 _ _ (fun _ => 0) (fun _ => 0) 1 [[0]] [0%nat]
    (fun _ => 1) 0 0 0 (/ 2) (/ 2) wdk_exp2_nonneg blocked_acc_dot_model_witness (Rle_refl 0) wdk_tiles_n
    wdk_keys wdk_scores wdk_vis wdk_cs ltac:(wdk_num; wdk_tb_close) wdk_tb_lt
    ltac:(wdk_num; wdk_lb_close) wdk_tb_lt.
