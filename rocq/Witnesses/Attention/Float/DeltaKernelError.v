(** * Witnesses of Attention/Float/DeltaKernelError.v (ojas_ref/verification/proof_audit.py):
    [bf16_fp32] ([wM]); one tile of one visible key, value [1] ([n = 1], the fp32
    per-product accumulating dot split, [blocked_acc_dot_split_model], one output coordinate), [dO = 1],
    [tb = lb = 1/2].  [attention_delta_kernel_error]: the key is its score [0], the exact
    score [0] with no score error ([dl = dmax = 0], [K = 0]).  [attention_delta_kernel_error_dot]:
    the key [([1], [1])] against the query [[1]] by the blocked fp32 dot, [c = rnd (1 / ln 2)],
    [scale = 1], [uc = u], [P = 1] (the constants of Witnesses/Attention/Float/ForwardError.v,
    whose [X], [Y] bound [2^(u K)] and [e^dmax]).  The H100 instances [_tf32x3_op], [_tc_op]:
    the first witness's key with the P.V dot at the tensor-core constants used there (26 bits,
    blocks of 8, output truncated to 24 bits, [qv = 1]).  Every premise proved together. *)

From Coq Require Import Reals ZArith QArith Qreals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision.
From Ojas Require Import Attention.Float.OnlineSoftmaxTile Attention.Float.ForwardError Attention.Float.ForwardSharedWeights.
From Ojas Require Import Attention.Float.DeltaKernelError.
From Ojas Require Import FloatModel.DotError Attention.ScorePerturbation Bounds.Rational Witnesses.Instances Witnesses.Bounds.Attention.
From Ojas Require Import FloatModel.TensorCoreSum Witnesses.FloatModel.Tf32Product Witnesses.Attention.Float.ForwardError.
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

Lemma wdk_gap : forall j k : R, In j (concat [[0]]) -> In k (concat [[0]]) ->
  (fun _ : R => true) j = true -> (fun _ : R => true) k = true -> (fun s : R => s) j - (fun s : R => s) k <= (fun _ : R => 0) k.
Proof. intros j k [<- | []] [<- | []] _ _; lra. Qed.

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
  unfold dk_tb_sum, dk_P, dk_tw, dk_r, dk_lam; cbv beta zeta; cbn [concat app map filter length seq firstn INR pow];
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

Lemma wdk_half_lt_1 : / 2 < 1.
Proof. lra. Qed.

Lemma wdk_tb : dk_tb_sum wM R (fun _ => true) (fun _ => 0) (fun _ => 0) (fun _ => 0) [[0]] 0 0 <= / 2.
Proof. wdk_num; wdk_tb_close. Qed.

Lemma wdk_lb : dk_lam wM 1 (length [[0]]) 0 (/ 2) <= / 2.
Proof. wdk_num; wdk_lb_close. Qed.

Lemma wdk_pre : dk_premises wM R (fun s => s) (fun _ => true) 1 (fun _ => 0) (fun _ => 0) (fun _ => 0) 1 [[0]] [0%nat]
  0 0 0 (/ 2) (/ 2).
Proof. exact (Build_dk_premises _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ (Rle_refl 0) wdk_tiles_n wdk_keys wdk_scores wdk_gap wdk_vis wdk_cs
                wdk_tb wdk_half_lt_1 wdk_lb wdk_half_lt_1). Qed.

Definition attention_delta_kernel_error_witness :=
  attention_delta_kernel_error wM R (fun s => s) (fun _ => true) (fun _ _ => 1)
    (fun c a b => ff_rnd (mp_a wM) (c + bdot (mp_a wM) a b)) 1 _ _ _ (fun _ => 0) (fun _ => 0) (fun _ => 0) 1 [[0]] [0%nat]
    (fun _ => 1) 0 0 0 (/ 2) (/ 2) wdk_exp2_nonneg blocked_acc_dot_split_model_witness wdk_pre.

(** ** The scores by the blocked fp32 dot: the witnesses' query [[1]], one key [([1], [1])],
    [c = rnd (1 / ln 2)], [scale = 1], [uc = u], [P = 1] (Witnesses/Attention/Float/ForwardError.v) *)

Lemma wdk_dot_keys : forall kv : list R * list R, In kv (concat [[([1], [1])]]) ->
  (fun _ : list R * list R => true) kv = true -> length (fst kv) = 1%nat /\ dot_abs [1] (fst kv) <= 1.
Proof. intros kv [<- | []] _; split; [reflexivity | exact wf_dot_abs]. Qed.

Lemma wdk_dot_tiles_n : forall tl : list (list R * list R), In tl [[([1], [1])]] -> length tl = 1%nat.
Proof. intros tl [<- | []]; reflexivity. Qed.

Lemma wdk_dot_vis : exists kv : list R * list R, In kv (concat [[([1], [1])]]) /\ (fun _ : list R * list R => true) kv = true.
Proof. exists ([1], [1]); split; [left; reflexivity | reflexivity]. Qed.

Lemma wdk_q_le : forall x : Q, Qle_bool x (101 # 100) = true -> Q2R x <= 101 / 100.
Proof.
  intros x H; replace (101 / 100) with (Q2R (101 # 100)) by (unfold Q2R; simpl; field).
  apply Qle_bool_R, H.
Qed.

Lemma wdk_dot_consts :
  let de := gamma (ff_u (mp_a wM)) 1 * 1 + (1 + gamma (ff_u (mp_a wM)) (1 - 1)) * INR 1 * ff_eta (mp_a wM) in
  Rpower 2 (ff_u (mp_a wM) * (2 * score_max_de (mp_a wM) 1 (ff_u (mp_a wM)) 1 de)) <= 101 / 100
  /\ 0 <= score_delta_de (mp_a wM) 1 (ff_u (mp_a wM)) 1 de
  /\ exp (score_delta_de (mp_a wM) 1 (ff_u (mp_a wM)) 1 de) <= 101 / 100.
Proof.
  cbv zeta; destruct wf_pre_de as [_ _ _ _ _ HX HY _ _ _ _].
  pose proof (wdk_q_le wf_X eq_refl) as HX1; pose proof (Qle_bool_R wf_Y (1 # 100) eq_refl) as HY1.
  replace (Q2R (1 # 100)) with (1 / 100) in HY1 by (unfold Q2R; simpl; field).
  destruct score2_with_error_witness as [Hd _].
  set (dl := score_delta_de _ _ _ _ _) in *.
  assert (H0 : 0 <= dl) by (eapply Rle_trans; [apply Rabs_pos | exact Hd]).
  split; [lra | split; [exact H0 |]].
  assert (exp dl <= exp (2 * dl)) by (apply sp_exp_le; lra). lra.
Qed.

Local Notation wde := (gamma (ff_u (mp_a wM)) 1 * 1 + (1 + gamma (ff_u (mp_a wM)) (1 - 1)) * INR 1 * ff_eta (mp_a wM)).

Lemma wdk_dot_tb :
  dk_tb_sum wM (list R * list R) (fun _ : list R * list R => true)
    (fun kv : list R * list R => 1 * dot_R [1] (fst kv))
    (fun kv : list R * list R =>
       score_delta_de (mp_a wM) 1 (ff_u (mp_a wM)) (dot_abs [1] (fst kv))
         (gamma (ff_u (mp_a wM)) 1 * dot_abs [1] (fst kv) + (1 + gamma (ff_u (mp_a wM)) (1 - 1)) * INR 1 * ff_eta (mp_a wM)))
    (fun _ : list R * list R => 2 * score_max_de (mp_a wM) 1 (ff_u (mp_a wM)) 1 wde)
    [[([1], [1])]] (2 * score_max_de (mp_a wM) 1 (ff_u (mp_a wM)) 1 wde) (score_delta_de (mp_a wM) 1 (ff_u (mp_a wM)) 1 wde)
  <= / 2.
Proof.
  pose proof wdk_dot_consts as [HX [H0 HE]]; cbv zeta in HX, H0, HE.
  unfold dk_tb_sum, dk_P, dk_tw, dk_r, Rw; cbv beta; cbn [concat app map filter length fst pow].
  rewrite !rsum_cons, !rsum_nil, wa_dot_abs.
  pose proof wdk_small as [[Hx0 Hx1] [[Hy0 Hy1] _]].
  set (RP := Rpower 2 _) in *; set (ED := exp (score_delta_de _ _ _ _ _)) in *.
  assert (0 < RP) by apply Rpower_pos; assert (0 < ED) by apply exp_pos.
  set (EP := exp (1 * dot_R [1] [1])).
  replace (EP / (EP + 0)) with 1 by (field; unfold EP; apply Rgt_not_eq, exp_pos).
  set (x := mp_ue wM) in *; set (y := mp_eta_e wM) in *.
  assert (B1 : (1 + x) * 1 * RP * ED <= (1 + / 16777216) * 1 * (101 / 100) * (101 / 100))
    by (repeat first [apply Rmult_le_pos | apply Rmult_le_compat]; lra).
  assert (B2 : 1 * ((1 + x + y) * (1 + x) * 1) * RP * y * ED
               <= 1 * ((2 * 2) * 1) * (101 / 100) * / 16777216 * (101 / 100))
    by (repeat first [apply Rmult_le_pos | apply Rmult_le_compat]; lra).
  cbn [INR] in *; lra.
Qed.

Lemma wdk_dot_lb : dk_lam wM 1 (length [[([1], [1])]]) (score_delta_de (mp_a wM) 1 (ff_u (mp_a wM)) 1 wde) (/ 2) <= / 2.
Proof.
  pose proof wdk_dot_consts as [_ [H0 HE]]; cbv zeta in H0, HE.
  unfold dk_lam, l_growth; cbn [length INR pow]; replace (1 - 1 + 2 * 1)%nat with 2%nat by reflexivity; cbn [pow].
  pose proof wdk_small as [[Hx0 Hx1] [[Hy0 Hy1] [[Ha0 Ha1] [He0 He1]]]].
  set (ED := exp (score_delta_de _ _ _ _ _)) in *; assert (0 < ED) by apply exp_pos.
  set (a := ff_u (mp_a wM)) in *; set (x := mp_ue wM) in *; set (y := mp_eta_e wM) in *; set (e := ff_eta (mp_a wM)) in *.
  replace (1 - / 2) with (/ 2) by field; unfold Rdiv; rewrite Rinv_inv.
  assert (B1 : (1 + a) * ((1 + a) * 1) <= (1 + / 16777216) * ((1 + / 16777216) * 1)) by (repeat first [apply Rmult_le_pos | apply Rmult_le_compat]; lra).
  assert (B2 : 1 * ((1 + a) * ((1 + a) * 1) * (1 + x + y) * 1) * e * ED
               <= 1 * ((2 * (2 * 1)) * 2 * 1) * / 16777216 * (101 / 100))
    by (repeat first [apply Rmult_le_pos | apply Rmult_le_compat]; lra).
  lra.
Qed.

Definition attention_delta_kernel_error_dot_witness :=
  attention_delta_kernel_error_dot wM (bdot (mp_a wM)) 1 _ _
    (fun c a b => ff_rnd (mp_a wM) (c + bdot (mp_a wM) a b)) 1 _ _ _ [1] wa_c 1 (ff_u (mp_a wM)) 1 (fun _ => true) 1
    [[([1], [1])]] [0%nat] (fun _ => 1) (/ 2) (/ 2) wdk_exp2_nonneg blocked_acc_dot_split_model_witness wf_dm Rlt_0_1
    (ff_u_nonneg _) wa_c_err eq_refl wdk_dot_keys wdk_dot_tiles_n wdk_dot_vis wdk_cs wdk_dot_tb wdk_half_lt_1
    wdk_dot_lb wdk_half_lt_1.

(** ** The H100 instances: the first witness's key and premises, the P.V dot at the
    tensor-core constants of Witnesses/Attention/Float/ForwardError.v (26 bits, blocks of 8,
    output truncated to 24 bits, [qv = 1]). *)
Definition attention_delta_kernel_error_tf32x3_op_witness :=
  attention_delta_kernel_error_tf32x3_op wM R (fun s => s) (fun _ => true) (fun _ _ => 1)
    (rz_flx 24) (bpow radix2 (1 - 24)) 26 8 1 1 (fun _ => 0) (fun _ => 0) (fun _ => 0) 1 [[0]] [0%nat] (fun _ => 1) 0 0 0 (/ 2) (/ 2)
    (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl) ltac:(lia) ltac:(lia) ltac:(lia) w_delta_op3
    wdk_exp2_nonneg wdk_pre.

Definition attention_delta_kernel_error_tc_op_witness :=
  attention_delta_kernel_error_tc_op wM R (fun s => s) (fun _ => true) (fun _ _ => 1)
    (rz_flx 24) (bpow radix2 (1 - 24)) 26 8 1 1 (fun _ => 0) (fun _ => 0) (fun _ => 0) 1 [[0]] [0%nat] (fun _ => 1) 0 0 0 (/ 2) (/ 2)
    (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl) ltac:(lia) ltac:(lia) ltac:(lia) wt_delta_op1
    wdk_exp2_nonneg wdk_pre.
