(** * The log-sum-exp the forward pass saves (over [R]).

    [two_pass] returns [lse = M + ln Z] with [M] the max of the unmasked
    scores and [Z = sum_j exp (s_j - M)].  Here: [Z > 0] (no log of zero),
    [lse] is the log of [sum_j exp s_j], shifting every score by [c]
    shifts [lse] by [c] and leaves the output unchanged, and the backward
    pass's recomputation [exp (s_j - lse)] ([row_probs]) gives exactly the
    two-pass softmax weights [w_j / Z] (0 for a masked key), which sum to
    1 and give the output as [sum_j P_j v_j].  The streamed state's lse is
    [m + ln l] with [l > 0]. *)

From Coq Require Import Reals List Lra Permutation.
From Ojas Require Import ScalarOps Vector VectorFacts Attention.OnlineSoftmax
  Attention.Backward Attention.StreamCorrect.
Import ListNotations.
Open Scope R_scope.

Local Notation rkey := (@key R).

(** ** [two_pass] in terms of the max and the exact sums *)

(** A row with no unmasked key gives zeros and lse [None]. *)
Lemma two_pass_None : forall d keys,
  block_max R_ops keys = None -> two_pass R_ops d keys = (vzero R_ops d, None).
Proof.
  intros d keys H; pose proof (block_max_unmasked R_ops keys) as Hb; rewrite H in Hb.
  unfold two_pass; destruct (unmasked keys) as [|[s0 v0] rest]; [reflexivity|discriminate].
Qed.

(** A row whose max unmasked score is [M]: the two-pass output is
    [sum_j exp (s_j - M) / Z * v_j] and the lse is [M + ln Z], with
    [Z = sum_j exp (s_j - M)] over the unmasked keys. *)
Lemma two_pass_Some : forall d keys M,
  block_max R_ops keys = Some M ->
  two_pass R_ops d keys =
  (weighted_sum R_ops (map (fun k => exp (fst k - M) / kw_sum M keys) (unmasked keys))
                      (map snd (unmasked keys)),
   Some (M + ln (kw_sum M keys))).
Proof.
  intros d keys M H; pose proof (block_max_unmasked R_ops keys) as Hb; rewrite H in Hb.
  rewrite (kw_sum_unmasked M keys).
  unfold two_pass; destruct (unmasked keys) as [|[s0 v0] rest]; [discriminate|].
  assert (HM : list_max R_ops s0 (map fst ((s0, v0) :: rest)) = M) by congruence.
  rewrite HM; cbv zeta; rewrite sc_sum_R, map_map; reflexivity.
Qed.

(** ** No log of zero *)

(** With [M] the max of the unmasked scores, [Z = sum_j exp (s_j - M) > 0]. *)
Theorem two_pass_Z_pos : forall keys M,
  block_max R_ops keys = Some M -> 0 < kw_sum M keys.
Proof. exact kw_sum_pos. Qed.

(** The two-pass lse is [M + ln Z] with [M] the max unmasked score and
    [Z = sum_j exp (s_j - M) > 0]; it is [None] (-inf) iff every key is masked. *)
Theorem two_pass_lse : forall d keys,
  match block_max R_ops keys with
  | None => snd (two_pass R_ops d keys) = None
  | Some M => snd (two_pass R_ops d keys) = Some (M + ln (kw_sum M keys))
              /\ 0 < kw_sum M keys
  end.
Proof.
  intros d keys; destruct (block_max R_ops keys) as [M|] eqn:E.
  - rewrite (two_pass_Some d keys M E); split; [reflexivity|apply kw_sum_pos, E].
  - rewrite (two_pass_None d keys E); reflexivity.
Qed.

Lemma exp_sub_ln : forall x y, 0 < y -> exp (x - ln y) = exp x / y.
Proof.
  intros x y Hy; unfold Rminus, Rdiv; rewrite exp_plus, exp_Ropp, exp_ln by exact Hy.
  reflexivity.
Qed.

(** The lse is the log of the sum of [exp s_j] over the unmasked keys. *)
Theorem two_pass_lse_log_sum_exp : forall d keys L,
  snd (two_pass R_ops d keys) = Some L ->
  L = ln (rsum (map (fun k => exp (fst k)) (unmasked keys))).
Proof.
  intros d keys L H; destruct (block_max R_ops keys) as [M|] eqn:E.
  - rewrite (two_pass_Some d keys M E) in H; injection H as <-.
    pose proof (kw_sum_pos keys M E) as HZ.
    replace (rsum (map (fun k => exp (fst k)) (unmasked keys)))
      with (exp M * kw_sum M keys).
    + rewrite ln_mult, ln_exp by (apply exp_pos || exact HZ); reflexivity.
    + rewrite kw_sum_unmasked, <- rsum_map_scal_l; apply rsum_map_ext; intros k _.
      rewrite <- exp_plus; f_equal; ring.
  - rewrite (two_pass_None d keys E) in H; discriminate.
Qed.

(** ** Shift invariance *)

(** Every unmasked score shifted by [c]. *)
Definition shift_scores (c : R) (keys : list rkey) : list rkey :=
  map (fun k => (option_map (fun s => s + c) (fst k), snd k)) keys.

Lemma unmasked_shift : forall c keys,
  unmasked (shift_scores c keys) = map (fun p => (fst p + c, snd p)) (unmasked keys).
Proof.
  intros c keys; unfold shift_scores; induction keys as [|[[s|] v] keys IH]; simpl;
    [reflexivity|f_equal; exact IH|exact IH].
Qed.

Lemma list_max_shift : forall c x xs,
  list_max R_ops (x + c) (map (fun y => y + c) xs) = list_max R_ops x xs + c.
Proof.
  intros c x xs; unfold list_max; revert x; induction xs as [|y xs IH]; intros x;
    [reflexivity|].
  cbn [map fold_left]; rewrite !R_max_eq, <- IH; f_equal.
  rewrite <- R_max_eq, <- R_max_eq at 1; rewrite !R_max_eq.
  unfold Rmax; destruct (Rle_dec x y), (Rle_dec (x + c) (y + c)); lra.
Qed.

Lemma block_max_shift : forall c keys,
  block_max R_ops (shift_scores c keys) = option_map (fun M => M + c) (block_max R_ops keys).
Proof.
  intros c keys; rewrite !block_max_unmasked, unmasked_shift.
  destruct (unmasked keys) as [|[s0 v0] rest]; [reflexivity|].
  cbn [map option_map fst snd].
  rewrite <- list_max_shift; f_equal; f_equal; cbn [map fst]; f_equal.
  rewrite !map_map; reflexivity.
Qed.

Lemma kw_sum_shift_scores : forall c M keys,
  kw_sum (M + c) (shift_scores c keys) = kw_sum M keys.
Proof.
  intros c M keys; rewrite !kw_sum_unmasked, unmasked_shift, map_map.
  apply rsum_map_ext; intros k _; simpl; f_equal; ring.
Qed.

(** Shifting every score by [c] leaves the two-pass output unchanged and
    shifts the lse by [c]. *)
Theorem two_pass_shift : forall d c keys,
  two_pass R_ops d (shift_scores c keys)
  = (fst (two_pass R_ops d keys), option_map (fun L => L + c) (snd (two_pass R_ops d keys))).
Proof.
  intros d c keys; destruct (block_max R_ops keys) as [M|] eqn:E.
  - assert (E' : block_max R_ops (shift_scores c keys) = Some (M + c))
      by (rewrite block_max_shift, E; reflexivity).
    rewrite (two_pass_Some d _ _ E'), (two_pass_Some d _ _ E), kw_sum_shift_scores.
    cbn [fst snd option_map]; f_equal; [|f_equal; ring].
    rewrite unmasked_shift, !map_map; f_equal.
    apply map_ext; intros k; simpl; f_equal; f_equal; ring.
  - assert (E' : block_max R_ops (shift_scores c keys) = None)
      by (rewrite block_max_shift, E; reflexivity).
    rewrite (two_pass_None d _ E'), (two_pass_None d _ E); reflexivity.
Qed.

(** The streamed row is shift invariant too (any tile size). *)
Theorem stream_row_shift : forall b d c keys,
  row_eq (stream_row R_ops b d (shift_scores c keys))
         (fst (stream_row R_ops b d keys),
          option_map (fun L => L + c) (snd (stream_row R_ops b d keys))).
Proof.
  intros b d c keys; destruct (stream_row_correct b d keys) as [H1 H2].
  eapply row_eq_trans; [apply stream_row_correct|].
  rewrite two_pass_shift; split; cbn [fst snd].
  - apply veq_sym, H1.
  - rewrite H2; reflexivity.
Qed.

(** ** Recomputing the probabilities from the saved lse *)

(** The two-pass softmax weights of every key: [w_j / Z] with
    [w_j = exp (s_j - M)], [Z = sum_j w_j], as [two_pass] computes them;
    0 for a masked key. *)
Definition two_pass_probs (keys : list rkey) : list R :=
  match unmasked keys with
  | [] => map (fun _ => 0) keys
  | ((s0, _) :: _) as ks =>
      let M := list_max R_ops s0 (map fst ks) in
      let Z := sc_sum R_ops (map (fun k => exp (fst k - M)) ks) in
      map (fun k => match fst k with None => 0 | Some s => exp (s - M) / Z end) keys
  end.

Lemma two_pass_probs_Some : forall keys M,
  block_max R_ops keys = Some M ->
  two_pass_probs keys
  = map (fun k => match fst k with None => 0 | Some s => exp (s - M) / kw_sum M keys end) keys.
Proof.
  intros keys M H; pose proof (block_max_unmasked R_ops keys) as Hb; rewrite H in Hb.
  rewrite (kw_sum_unmasked M keys).
  unfold two_pass_probs; destruct (unmasked keys) as [|[s0 v0] rest]; [discriminate|].
  assert (HM : list_max R_ops s0 (map fst ((s0, v0) :: rest)) = M) by congruence.
  rewrite HM; cbv zeta; rewrite sc_sum_R; reflexivity.
Qed.

(** For an unmasked key [j], [exp (s_j - lse) = w_j / Z]: the backward
    pass recomputes the two-pass weight from the saved lse alone. *)
Theorem exp_sub_lse : forall d keys L M s,
  snd (two_pass R_ops d keys) = Some L -> block_max R_ops keys = Some M ->
  exp (s - L) = exp (s - M) / kw_sum M keys.
Proof.
  intros d keys L M s HL HM; rewrite (two_pass_Some d keys M HM) in HL.
  injection HL as <-.
  replace (s - (M + ln (kw_sum M keys))) with ((s - M) - ln (kw_sum M keys)) by ring.
  apply exp_sub_ln, kw_sum_pos, HM.
Qed.

(** [row_probs] on the two-pass lse is exactly the two-pass softmax
    weights (0 for a masked key). *)
Theorem row_probs_two_pass : forall d keys,
  row_probs R_ops keys (snd (two_pass R_ops d keys)) = two_pass_probs keys.
Proof.
  intros d keys; unfold row_probs; destruct (block_max R_ops keys) as [M|] eqn:E.
  - rewrite (two_pass_probs_Some keys M E), (two_pass_Some d keys M E); cbn [snd].
    apply map_ext; intros [[s|] v]; cbn [fst]; [|reflexivity].
    change (sc_exp R_ops) with exp; change (sc_sub R_ops) with Rminus.
    replace (s - (M + ln (kw_sum M keys))) with ((s - M) - ln (kw_sum M keys)) by ring.
    apply exp_sub_ln, kw_sum_pos, E.
  - rewrite (two_pass_None d keys E); unfold two_pass_probs.
    rewrite block_max_unmasked in E; destruct (unmasked keys) as [|[s0 v0] rest];
      [|discriminate].
    apply map_ext; intros [[s|] v]; reflexivity.
Qed.

(** The two-pass weights sum to 1 when some key is unmasked. *)
Theorem two_pass_probs_sum : forall keys,
  block_max R_ops keys <> None -> rsum (two_pass_probs keys) = 1.
Proof.
  intros keys H; destruct (block_max R_ops keys) as [M|] eqn:E; [|congruence].
  rewrite (two_pass_probs_Some keys M E).
  pose proof (kw_sum_pos keys M E) as HZ.
  transitivity (rsum (map (key_weight R_ops M) keys) / kw_sum M keys);
    [|fold (kw_sum M keys); field; lra].
  rewrite <- rsum_map_div; apply rsum_map_ext.
  intros [[s|] v] _; rewrite key_weight_R; cbn [fst]; [reflexivity|unfold Rdiv; ring].
Qed.

(** The recomputed probabilities [P_j = exp (s_j - lse)] sum to 1. *)
Theorem row_probs_sum : forall d keys,
  block_max R_ops keys <> None ->
  rsum (row_probs R_ops keys (snd (two_pass R_ops d keys))) = 1.
Proof. intros d keys H; rewrite row_probs_two_pass; apply two_pass_probs_sum, H. Qed.

(** The two-pass output is [sum_j P_j v_j] with the recomputed
    probabilities [P_j = exp (s_j - lse)] (zeros for a fully masked row). *)
Theorem two_pass_out_row_probs : forall d keys,
  veq (fst (two_pass R_ops d keys))
      (weighted_sum R_ops (row_probs R_ops keys (snd (two_pass R_ops d keys))) (map snd keys)).
Proof.
  intros d keys c; rewrite row_probs_two_pass.
  destruct (block_max R_ops keys) as [M|] eqn:E.
  - rewrite (two_pass_probs_Some keys M E), (two_pass_Some d keys M E); cbn [fst].
    rewrite !nth_weighted_sum_map.
    transitivity (kw_acc M keys c / kw_sum M keys).
    + rewrite kw_acc_unmasked, <- rsum_map_div; apply rsum_map_ext; intros k _.
      unfold Rdiv; ring.
    + unfold kw_acc; rewrite <- rsum_map_div; apply rsum_map_ext.
      intros [[s|] v] _; rewrite key_weight_R; cbn [fst snd]; unfold Rdiv; ring.
  - rewrite (two_pass_None d keys E); cbn [fst]; rewrite nth_vzero.
    unfold two_pass_probs; rewrite block_max_unmasked in E.
    destruct (unmasked keys) as [|[s0 v0] rest]; [|discriminate].
    rewrite nth_weighted_sum_map; symmetry; apply rsum_map_zero; intros k _; ring.
Qed.

(** ** The lse of the streamed state *)

(** A non-empty streaming state has [l > 0], so its lse [m + ln l] takes
    no log of zero; [m] and [l] are the max and the sum of the two-pass
    specification. *)
Theorem stream_lse : forall d blocks s,
  stream R_ops blocks = Some s ->
  0 < st_sum s
  /\ snd (finalize R_ops d (stream R_ops blocks)) = Some (st_max s + ln (st_sum s))
  /\ block_max R_ops (concat blocks) = Some (st_max s)
  /\ st_sum s = kw_sum (st_max s) (concat blocks).
Proof.
  intros d blocks s E; pose proof (stream_represents blocks) as H; rewrite E in H.
  split; [apply (represents_sum_pos s (concat blocks) H)|].
  rewrite E; destruct H as (H1 & H2 & _); split; [reflexivity|split; assumption].
Qed.

(** The probabilities the backward pass recomputes from the lse saved by
    the streamed forward pass (any tile size) are the two-pass weights. *)
Theorem row_probs_stream_row : forall b d keys,
  row_probs R_ops keys (snd (stream_row R_ops b d keys)) = two_pass_probs keys.
Proof.
  intros b d keys; destruct (stream_row_correct b d keys) as [_ H].
  rewrite H; apply row_probs_two_pass.
Qed.
