(** * Witnesses of Attention/Float/ForwardError.v (ojas_ref/verification/proof_audit.py):
    [bf16_fp32], [scale = 1], the fp32 constant [c = rnd (1 / ln 2)] ([uc = u]), one query [[1]]
    and one key [[1]] of value [1] ([P = V = 1], [E = B = N = Tt = 1]), the upper bounds
    [X, Y, P1, CG, CR] the oracle computes ([afe_consts] of Bounds/Attention.v, values written
    out, checked by [vm_compute]); every premise proved together.  [wf_pre] serves the witnesses
    of ForwardPosteriori.v and SavedLseError.v too. *)

From Coq Require Import Reals ZArith QArith Qreals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision FloatModel.DotError Attention.Float.OnlineSoftmaxTile Attention.Float.ForwardError.
From Ojas Require Import Bounds.Rational Bounds.Attention Witnesses.Instances Witnesses.Bounds.Attention.
From Ojas Require Import FloatModel.TensorCoreSum FloatModel.Tf32Product Witnesses.FloatModel.TensorCoreSum.
From Ojas Require Import Witnesses.FloatModel.Tf32Product.
Import ListNotations.
Open Scope R_scope.

Local Notation u := (ff_u (mp_a wM)).

(** [afe_consts] at the witnesses' constants. *)
Definition wf_X : Q := 1606938427382989671855000914028220881741622293106206833806412
                       # 1606938044258990275541962092341162602522202993782792835301376.
Definition wf_Y : Q := 574685976258499669287765267276902221658120942548479167
                       # 1606938044258990275541962092341162602522202993782792835301376.
Definition wf_P1 : Q := 1.
Definition wf_CG : Q := 4722367327294625677313 # 4722366482869645213696.
Definition wf_CR : Q := 6739987871991264978639365764459418431679193958722187126722879553536
                        # 6739986666787659948666753771754907668409286105635143120275902562304.

Lemma wf_consts_eq : afe_consts wa_u wa_u wa_eta wa_eta wa_us wa_es wa_u 1 1 1 1 1 1 1
                     = Some (wf_X, wf_Y, wf_P1, wf_CG, wf_CR).
Proof. vm_compute; reflexivity. Qed.

(** [afe_bL <= 1/2]: the range [[1/2, 2]] of [tl.log2] in SavedLseError.v's witnesses. *)
Lemma wf_bL_half : afe_bL u (mp_ue wM) (mp_eta_e wM) (ff_eta (mp_a wM)) 1 1 1
                     (Q2R wf_X) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR) <= / 2.
Proof.
  change 1%nat with (N.to_nat 1).
  rewrite <- (Q2R_afe_bL wM wa_u wa_u wa_eta wa_eta 1 1 1 wa_u_R wa_ue_R wa_ee_R wa_ea_R).
  replace (/ 2) with (Q2R (1 # 2)) by (unfold Q2R; simpl; field).
  apply Qle_bool_R; vm_compute; reflexivity.
Qed.

Lemma wf_pre : afe_premises wM wa_c 1 u 1 1 (Q2R wf_X) (Q2R wf_Y) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR) 1 1 1 1.
Proof.
  destruct (afe_consts_spec wM wa_u wa_u wa_eta wa_eta wa_us wa_es wa_u 1 1 1 1 1 1 1
              wa_u_R wa_ue_R wa_ee_R wa_ea_R _ _ _ _ _ wf_consts_eq)
    as [HE1 [HEu [HV [Hs [Huc [HB1 [HX [HY [HP1 [HG [HC HL]]]]]]]]]]].
  rewrite (Q2R_afe_bL wM wa_u wa_u wa_eta wa_eta 1 1 1 wa_u_R wa_ue_R wa_ee_R wa_ea_R) in HL.
  rewrite Q2R_1, wa_u_R in *.
  constructor; try assumption.
  exact wa_c_err.
Qed.

Lemma wf_keys : forall kv, In kv (concat [[wa_key]]) ->
  length (fst kv) = 1%nat /\ dot_abs [1] (fst kv) <= 1 /\ Rabs (snd kv) <= 1.
Proof. intros kv Hk; pose proof (wa_keys kv Hk) as H; rewrite Q2R_1 in H; exact H. Qed.

Lemma wf_keys_vis : forall kv, In kv (concat [[wa_key]]) -> (fun _ : list R * R => true) kv = true ->
  length (fst kv) = 1%nat /\ dot_abs [1] (fst kv) <= 1 /\ Rabs (snd kv) <= 1.
Proof. intros kv Hk _; exact (wf_keys kv Hk). Qed.

Lemma wf_tiles_B : Forall (fun tl : list (list R * R) => (length tl <= 1)%nat) [[wa_key]].
Proof. repeat constructor. Qed.

(** ** The witnesses *)

Lemma wf_abs_le : forall x : unit, In x [tt] -> Rabs (0 - 0) <= 0.
Proof. intros; rewrite Rminus_0_r, Rabs_R0; lra. Qed.

Lemma wf_v_le : forall x : unit, In x [tt] -> Rabs 1 <= 1.
Proof. intros; rewrite Rabs_R1; lra. Qed.

Definition softmax_average_perturbation_witness :=
  softmax_average_perturbation [tt] (fun _ => 0) (fun _ => 0) (fun _ => 1) 0 1
    (Rle_refl 0) Rle_0_1 wf_abs_le wf_v_le.

Lemma wf_E_u : INR 1 * u < 1.
Proof. rewrite w_u; simpl; lra. Qed.

Lemma wf_dot_abs : dot_abs [1] [1] <= 1.
Proof. rewrite wa_dot_abs; lra. Qed.

Definition score2_error_witness :=
  score2_error (mp_a wM) wa_c 1 u [1] [1] 1 1 eq_refl eq_refl (le_n 1) wf_E_u Rlt_0_1
    (ff_u_nonneg _) wa_c_err wf_dot_abs.

Definition attention_forward_error_witness :=
  attention_forward_error wM [1] wa_c 1 u 1 1 (Q2R wf_X) (Q2R wf_Y) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR)
    1 1 1 1 wa_key [] [] wf_pre eq_refl wf_keys wf_tiles_B (le_n 1) (le_n 1).

Definition attention_forward_error_masked_witness :=
  attention_forward_error_masked wM [1] wa_c 1 u 1 1 (Q2R wf_X) (Q2R wf_Y) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR)
    1 1 1 1 (fun _ => true) [[wa_key]] wa_exp2_0 wa_vis wf_pre eq_refl wf_keys_vis wf_tiles_B (le_n 1) (le_n 1).

(** The dot as a parameter, at its blocked fp32 instance ([blocked_dot_model]). *)
Definition wf_dm := blocked_dot_model (mp_a wM) 1 (le_n 1) wf_E_u.

Definition score2_with_error_witness :=
  score2_with_error (mp_a wM) (bdot (mp_a wM)) 1 (gamma u 1) ((1 + gamma u (1 - 1)) * INR 1 * ff_eta (mp_a wM))
    wa_c 1 u [1] [1] 1 wf_dm eq_refl eq_refl Rlt_0_1 (ff_u_nonneg _) wa_c_err wf_dot_abs.

Definition wf_pre_de := afe_premises_blocked wM wa_c 1 u 1 1 (Q2R wf_X) (Q2R wf_Y) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR)
                          1 1 1 1 wf_pre.

Definition attention_forward_error_dot_witness :=
  attention_forward_error_dot wM (bdot (mp_a wM)) (gamma u 1) ((1 + gamma u (1 - 1)) * INR 1 * ff_eta (mp_a wM))
    [1] wa_c 1 u 1 1 (Q2R wf_X) (Q2R wf_Y) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR)
    1 1 1 1 wa_key [] [] wf_dm wf_pre_de eq_refl wf_keys wf_tiles_B (le_n 1) (le_n 1).

Definition attention_forward_error_masked_dot_witness :=
  attention_forward_error_masked_dot wM (bdot (mp_a wM)) (gamma u 1) ((1 + gamma u (1 - 1)) * INR 1 * ff_eta (mp_a wM))
    [1] wa_c 1 u 1 1 (Q2R wf_X) (Q2R wf_Y) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR)
    1 1 1 1 (fun _ => true) [[wa_key]] wa_exp2_0 wa_vis wf_dm wf_pre_de eq_refl wf_keys_vis wf_tiles_B (le_n 1) (le_n 1).

(** ** 3xTF32 scores (PART E)

    The dot models: on tensor cores the alignment to 27 bits, blocks of 8,
    the output truncated ([ur = 2^-23]), [E = 1] in one block; left to right
    in float32, [E = 1].  The attention theorems: the query [[0]] ([P = 0], so
    the dot's error [g 0 + 0] is 0 for every [g]) and the key [[1]] of value
    [1], the constants [X, Y, P1, CG, CR] above: the scores' terms at
    [P = 0, de = 0] are at most those at [P = 1, de = dot_err 1 1]. *)

Definition tf32x3_tc_dot_model_witness :=
  tf32x3_tc_dot_model (rz_flx 24) (bpow radix2 (1 - 24)) 27 8 1 1 (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl)
    ltac:(lia) ltac:(lia) ltac:(lia) w_delta_trunc3.

Lemma wt_seq_small : INR (3 * 1) * / 16777216 < 1.
Proof. simpl; lra. Qed.

Definition tf32x3_seq_dot_model_witness := tf32x3_seq_dot_model 1 wt_seq_small.

Lemma wt_score_le : forall g,
  score_max_de (mp_a wM) 1 u 0 (g * 0 + 0) <= score_max (mp_a wM) 1 u 1 1
  /\ score_delta_de (mp_a wM) 1 u 0 (g * 0 + 0) <= score_delta (mp_a wM) 1 u 1 1.
Proof.
  intros g; pose proof (dot_err_nonneg (mp_a wM) 1 1 wf_E_u Rle_0_1) as Hd.
  pose proof (ff_u_nonneg (mp_a wM)) as Hu.
  unfold score_max_de, score_delta_de, score_max, score_delta.
  set (d := dot_err (mp_a wM) 1 1) in *.
  replace (g * 0 + 0) with 0 by ring.
  split.
  - assert (0 <= 2 * (1 * (1 + u) * (1 + d)) * (1 + u)) by (apply Rmult_le_pos; [apply Rmult_le_pos; [lra | apply Rmult_le_pos; lra] | lra]).
    replace (2 * (1 * (1 + u) * (0 + 0)) * (1 + u)) with 0 by ring; lra.
  - assert (0 <= (1 + d) * (u * (1 + u) + u)) by (apply Rmult_le_pos; [lra | nra]).
    replace (1 * ((0 + 0) * (u * (1 + u) + u) + 0)) with 0 by ring; lra.
Qed.

Lemma wt_pre : forall g,
  afe_premises_de wM wa_c 1 u 0 (g * 0 + 0) 1 (Q2R wf_X) (Q2R wf_Y) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR) 1 1 1.
Proof.
  intros g; destruct wf_pre as [HE HEu HV Hs Huc Hc HB HX HY HP HG HC HbL].
  destruct (wt_score_le g) as [Hm Hd].
  pose proof (ff_u_nonneg (mp_a wM)) as Hu.
  split; try assumption.
  - eapply Rle_trans; [| exact HX].
    apply Rle_Rpower; [lra |].
    apply Rmult_le_compat_l; [exact Hu | lra].
  - eapply Rle_trans; [| exact HY].
    assert (exp (2 * score_delta_de (mp_a wM) 1 u 0 (g * 0 + 0)) <= exp (2 * score_delta (mp_a wM) 1 u 1 1)).
    { destruct (Rle_lt_or_eq_dec _ _ Hd) as [Hl | ->]; [| lra].
      left; apply exp_increasing; lra. }
    lra.
Qed.

Lemma wt_keys_vis : forall kv, In kv (concat [[wa_key]]) -> (fun _ : list R * R => true) kv = true ->
  length (fst kv) = 1%nat /\ dot_abs [0] (fst kv) <= 0 /\ Rabs (snd kv) <= 1.
Proof.
  intros kv Hk _; destruct (wf_keys kv Hk) as [Hl [_ Hv]]; split; [exact Hl | split; [| exact Hv]].
  destruct Hk as [<- | []]; unfold dot_abs, rsum; simpl; rewrite Rmult_0_l, Rabs_R0; lra.
Qed.

Definition attention_forward_error_masked_tf32x3_witness :=
  attention_forward_error_masked_tf32x3 wM (rz_flx 24) (bpow radix2 (1 - 24)) 27 8 1
    [0] wa_c 1 u 0 1 (Q2R wf_X) (Q2R wf_Y) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR) 1 1 1 1 (fun _ => true) [[wa_key]]
    (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl) ltac:(lia) ltac:(lia) ltac:(lia) w_delta_trunc3
    wa_exp2_0 wa_vis (wt_pre _) eq_refl wt_keys_vis wf_tiles_B (le_n 1) (le_n 1).

Definition attention_forward_error_masked_tf32x3_seq_witness :=
  attention_forward_error_masked_tf32x3_seq wM
    [0] wa_c 1 u 0 1 (Q2R wf_X) (Q2R wf_Y) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR) 1 1 1 1 (fun _ => true) [[wa_key]]
    wt_seq_small wa_exp2_0 wa_vis (wt_pre _) eq_refl wt_keys_vis wf_tiles_B (le_n 1) (le_n 1).

(** The 16-bit kernels' tensor-core dot: alignment to 27 bits, blocks of 8, output truncated. *)
Definition tc_dot_model_witness :=
  tc_dot_model (rz_flx 24) (bpow radix2 (1 - 24)) 27 8 1 1 (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl)
    ltac:(lia) ltac:(lia) ltac:(lia) w_delta_trunc.

Definition attention_forward_error_masked_tc_witness :=
  attention_forward_error_masked_tc wM (rz_flx 24) (bpow radix2 (1 - 24)) 27 8 1
    [0] wa_c 1 u 0 1 (Q2R wf_X) (Q2R wf_Y) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR) 1 1 1 1 (fun _ => true) [[wa_key]]
    (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl) ltac:(lia) ltac:(lia) ltac:(lia) w_delta_trunc
    wa_exp2_0 wa_vis (wt_pre _) eq_refl wt_keys_vis wf_tiles_B (le_n 1) (le_n 1).

(** The H100's tensor cores (operand-exponent alignment, 26 bits, blocks of 8, output truncated). *)
Lemma wt_delta_op1 : INR 1 * tc_delta (bpow radix2 (1 - 26)) (bpow radix2 (1 - 24)) 8 < 1.
Proof. apply w_delta_small; [lia | lia | lia | exact w_ur_trunc]. Qed.

Definition tf32x3_tc_op_dot_model_witness :=
  tf32x3_tc_op_dot_model (rz_flx 24) (bpow radix2 (1 - 24)) 26 8 1 1 (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl)
    ltac:(lia) ltac:(lia) ltac:(lia) w_delta_op3.

Definition tc_op_dot_model_witness :=
  tc_op_dot_model (rz_flx 24) (bpow radix2 (1 - 24)) 26 8 1 1 (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl)
    ltac:(lia) ltac:(lia) ltac:(lia) wt_delta_op1.

Definition attention_forward_error_masked_tf32x3_op_witness :=
  attention_forward_error_masked_tf32x3_op wM (rz_flx 24) (bpow radix2 (1 - 24)) 26 8 1
    [0] wa_c 1 u 0 1 (Q2R wf_X) (Q2R wf_Y) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR) 1 1 1 1 (fun _ => true) [[wa_key]]
    (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl) ltac:(lia) ltac:(lia) ltac:(lia) w_delta_op3
    wa_exp2_0 wa_vis (wt_pre _) eq_refl wt_keys_vis wf_tiles_B (le_n 1) (le_n 1).

Definition attention_forward_error_masked_tc_op_witness :=
  attention_forward_error_masked_tc_op wM (rz_flx 24) (bpow radix2 (1 - 24)) 26 8 1
    [0] wa_c 1 u 0 1 (Q2R wf_X) (Q2R wf_Y) (Q2R wf_P1) (Q2R wf_CG) (Q2R wf_CR) 1 1 1 1 (fun _ => true) [[wa_key]]
    (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl) ltac:(lia) ltac:(lia) ltac:(lia) wt_delta_op1
    wa_exp2_0 wa_vis (wt_pre _) eq_refl wt_keys_vis wf_tiles_B (le_n 1) (le_n 1).

(** PART F: the accumulating dots, at the same instances (E = 1). *)
Definition acc_of_dot_model_witness :=
  acc_of_dot_model (bdot (mp_a wM)) (ff_rnd (mp_a wM)) 1 _ _ u (ff_eta (mp_a wM)) wf_dm
    (ff_u_nonneg _) (ff_abs _).

Definition blocked_acc_dot_model_witness := blocked_acc_dot_model (mp_a wM) 1 (le_n 1) wf_E_u.

Definition tc_acc_op_dot_model_witness :=
  tc_acc_op_dot_model (rz_flx 24) (bpow radix2 (1 - 24)) 26 8 1 1 (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl)
    ltac:(lia) ltac:(lia) ltac:(lia) wt_delta_op1.

Definition tf32x3_tc_op_acc_dot_model_witness :=
  tf32x3_tc_op_acc_dot_model (rz_flx 24) (ff_rnd (mp_a wM)) (bpow radix2 (1 - 24)) u (ff_eta (mp_a wM)) 26 8 1 1
    (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl) (ff_u_nonneg _) (ff_abs _) ltac:(lia) ltac:(lia) ltac:(lia) w_delta_op3.

(** The split instances (the accumulator charged apart), at the same instances. *)
Definition acc_of_dot_split_model_witness :=
  acc_of_dot_split_model (bdot (mp_a wM)) (ff_rnd (mp_a wM)) 1 _ _ u (ff_eta (mp_a wM)) wf_dm
    (ff_u_nonneg _) (ff_abs _).

Definition blocked_acc_dot_split_model_witness := blocked_acc_dot_split_model (mp_a wM) 1 (le_n 1) wf_E_u.

Definition tf32x3_tc_op_acc_dot_split_model_witness :=
  tf32x3_tc_op_acc_dot_split_model (rz_flx 24) (ff_rnd (mp_a wM)) (bpow radix2 (1 - 24)) u (ff_eta (mp_a wM)) 26 8 1 1
    (bpow_ge_0 _ _) (rz_flx_err 24 eq_refl) (ff_u_nonneg _) (ff_abs _) ltac:(lia) ltac:(lia) ltac:(lia) w_delta_op3.

(** One tile of one key of score [0] and value [1] at [m = m' = K = 0], from [acc = 0]. *)
Lemma wf_acc_svs : forall sv, In sv [(0, 1)] ->
  ff_fmt (mp_a wM) (fst sv) /\ fst sv <= 0 /\ 0 - fst sv <= 0.
Proof.
  intros sv [<- | []]; cbn [fst]; split; [apply ff_fmt_0 | lra].
Qed.

Lemma wf_inv0 : OnlineSoftmaxError.inv 1 0 0 0 0.
Proof. unfold OnlineSoftmaxError.inv; rewrite Rminus_0_r, Rabs_R0; lra. Qed.

Definition tile_acc_dot_step_witness :=
  tile_acc_dot_step wM _ 1 _ _ 1 0 0 0 0 0 0 0 [(0, 1)] blocked_acc_dot_model_witness eq_refl
    (Rle_refl 1) (Rle_refl 0) (Rle_refl 0) (ff_fmt_0 _) (ff_fmt_0 _) (Rle_refl 0)
    ltac:(rewrite Rabs_R0; apply Rle_refl) wf_acc_svs wf_inv0.

Definition acc_chain_error_witness :=
  acc_chain_error _ 1 _ _ [([1], [1])] 0 blocked_acc_dot_model_witness ltac:(repeat constructor).
