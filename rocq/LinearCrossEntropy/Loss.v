(** * The per-token loss computed by the vocabulary loop (over [R]).

    The vocabulary loop of one token carries the online-softmax (max, sum)
    state, the target logit and the sum of the logits over the vocabulary
    chunks.  Whatever the chunk size, its result is

      loss = (1 - eps) (lse - z_t) + eps (lse - (1/V) sum_v z_v) + lam lse^2

    with [lse = ln (sum_v exp z_v)] ([ce_token_loss_R]), which is
    [F.cross_entropy]'s label-smoothed loss plus the PaLM z-loss:

      loss = - (1 - eps) ln p_t - (eps / V) sum_v ln p_v + lam lse^2,
      p_v  = exp z_v / sum_u exp z_u.

    Targets are in [0, V) for the kept tokens (PyTorch raises an error
    otherwise; the loop reads an out-of-range target's logit as 0). *)

From Coq Require Import Reals List Lra Arith Lia ZArith.
From Ojas Require Import ScalarOps Vector VectorFacts Attention.OnlineSoftmax
  Attention.StreamCorrect Attention.Merge LinearCrossEntropy.Definitions LinearCrossEntropy.ChunkedLse.
Import ListNotations.
Open Scope R_scope.

(** ** The specification *)

(** The log-sum-exp of a logit row. *)
Definition lse_row (zs : list R) : R := ln (rsum (map exp zs)).

(** The per-token loss of the logit row [zs] and target [t]. *)
Definition ce_token_loss_R (eps lam : R) (t : Z) (zs : list R) : R :=
  let L := lse_row zs in
  (1 - eps) * (L - nth (Z.to_nat t) zs 0) + eps * (L - rsum zs / INR (length zs)) + lam * (L * L).

(** The softmax of the logit row [zs] at [v]. *)
Definition softmax_R (zs : list R) (v : nat) : R := exp (nth v zs 0) / rsum (map exp zs).

(** ** Facts about indexed lists *)

Lemma sc_of_nat_R : forall n, sc_of_nat R_ops n = INR n.
Proof.
  induction n as [|n IH]; [reflexivity|].
  change (sc_of_nat R_ops (S n)) with (sc_of_nat R_ops n + 1).
  rewrite IH, S_INR; reflexivity.
Qed.

Lemma map_snd_combine_seq : forall {A} k (l : list A),
  map snd (combine (seq k (length l)) l) = l.
Proof.
  intros A k l; revert k; induction l as [|x l IH]; intros k; simpl; [reflexivity|].
  rewrite IH; reflexivity.
Qed.

Lemma map_fst_combine_seq : forall {A} k (l : list A),
  map fst (combine (seq k (length l)) l) = seq k (length l).
Proof.
  intros A k l; revert k; induction l as [|x l IH]; intros k; simpl; [reflexivity|].
  rewrite IH; reflexivity.
Qed.

Lemma in_combine_seq : forall {A} k (l : list A) j x,
  In (j, x) (combine (seq k (length l)) l) -> (k <= j)%nat /\ nth (j - k) l x = x.
Proof.
  intros A k l; revert k; induction l as [|y l IH]; intros k j x H; [destruct H|].
  destruct H as [H|H].
  - injection H as <- <-; rewrite Nat.sub_diag; split; [lia|reflexivity].
  - destruct (IH (S k) j x H) as [H1 H2]; split; [lia|].
    replace (j - k)%nat with (S (j - S k)) by lia; exact H2.
Qed.

Lemma map_nth_seq : forall (zs : list R),
  map (fun v => nth v zs 0) (seq 0 (length zs)) = zs.
Proof.
  induction zs as [|z zs IH]; [reflexivity|].
  cbn [length seq map nth]; rewrite <- seq_shift, map_map; cbn [nth]; rewrite IH; reflexivity.
Qed.

Lemma map_pair_fst : forall {A B} (g : nat * A -> B) (l : list (nat * A)),
  map (fun e => (fst e, g e)) l = combine (map fst l) (map g l).
Proof.
  intros A B g l; induction l as [|e l IH]; simpl; [reflexivity|]; rewrite IH; reflexivity.
Qed.

Lemma chunk_fuel_map : forall {A B} (f : A -> B) fuel b xs,
  chunk_fuel fuel b (map f xs) = map (map f) (chunk_fuel fuel b xs).
Proof.
  intros A B f fuel; induction fuel as [|fuel IH]; intros b xs; [reflexivity|].
  destruct xs as [|x xs]; [reflexivity|].
  change (map f (x :: xs)) with (f x :: map f xs).
  cbn [chunk_fuel]; rewrite <- map_cons, firstn_map, skipn_map, IH; reflexivity.
Qed.

(** Cutting into chunks commutes with [map]. *)
Lemma chunk_map : forall {A B} (f : A -> B) b xs,
  chunk b (map f xs) = map (map f) (chunk b xs).
Proof.
  intros A B f b xs; unfold chunk; rewrite map_length; apply chunk_fuel_map.
Qed.

(** ** The target logit *)

(** The target-logit sum of the loop over the logits [zs]. *)
Definition target_sum (t : Z) (zs : list (nat * R)) : R :=
  rsum (map (fun z => if is_target t (fst z) then snd z else 0) zs).

Lemma target_sum_app : forall t xs ys,
  target_sum t (xs ++ ys) = target_sum t xs + target_sum t ys.
Proof. intros; unfold target_sum; rewrite map_app, rsum_app; reflexivity. Qed.

Lemma target_sum_seq : forall (zs : list R) k j,
  (j < length zs)%nat ->
  target_sum (Z.of_nat (k + j)) (combine (seq k (length zs)) zs) = nth j zs 0.
Proof.
  induction zs as [|z zs IH]; intros k j Hj; [simpl in Hj; lia|].
  unfold target_sum; cbn [length seq combine map]; rewrite rsum_cons; cbn [fst snd].
  destruct j as [|j].
  - unfold is_target; rewrite Nat.add_0_r, Z.eqb_refl.
    fold (target_sum (Z.of_nat k) (combine (seq (S k) (length zs)) zs)).
    rewrite (rsum_map_zero _ _); [simpl; ring|].
    intros [v x] Hin; cbn [fst snd]; apply in_combine_seq in Hin as [Hk _].
    unfold is_target; destruct (Z.eqb_spec (Z.of_nat v) (Z.of_nat k)); [lia|reflexivity].
  - unfold is_target at 1.
    destruct (Z.eqb_spec (Z.of_nat k) (Z.of_nat (k + S j))); [lia|].
    fold (target_sum (Z.of_nat (k + S j)) (combine (seq (S k) (length zs)) zs)).
    replace (k + S j)%nat with (S k + j)%nat by lia.
    rewrite IH by (simpl in Hj; lia); simpl; ring.
Qed.

(** ** The vocabulary loop *)

(** The lse state of the loop is the stream of the chunks' keys. *)
Lemma fold_vocab_step_lse : forall t zchunks ts,
  ts_lse (fold_left (vocab_step R_ops t) zchunks ts)
  = fold_left (block_step R_ops) (map lse_keys zchunks) (ts_lse ts).
Proof.
  intros t zchunks; induction zchunks as [|zc zcs IH]; intros ts; simpl; [reflexivity|].
  rewrite IH; reflexivity.
Qed.

Lemma fold_vocab_step_sums : forall t zchunks ts,
  let ts' := fold_left (vocab_step R_ops t) zchunks ts in
  ts_zt ts' = ts_zt ts + target_sum t (concat zchunks)
  /\ ts_zsum ts' = ts_zsum ts + rsum (map snd (concat zchunks)).
Proof.
  intros t zchunks; induction zchunks as [|zc zcs IH]; intros ts; simpl.
  - unfold target_sum; simpl; split; ring.
  - destruct (IH (vocab_step R_ops t ts zc)) as [H1 H2]; rewrite H1, H2.
    unfold vocab_step; cbn [ts_zt ts_zsum]; unfold target_logit.
    rewrite !sc_sum_R, target_sum_app, map_app, rsum_app; unfold target_sum.
    change (sc_add R_ops) with Rplus; change (sc_zero R_ops) with 0; split; ring.
Qed.

(** For any cut of the logits into chunks, the vocabulary loop ends with
    the chunked lse [ln (sum_v exp z_v)], the target logit (the sum of
    the logits whose index is the target) and the sum of the logits. *)
Theorem vocab_loop_correct : forall t zchunks,
  let ts := vocab_loop R_ops t zchunks in
  snd (finalize R_ops 0 (ts_lse ts)) = chunked_lse R_ops zchunks
  /\ chunked_lse R_ops zchunks
     = match concat zchunks with [] => None | zs => Some (lse_R zs) end
  /\ ts_zt ts = target_sum t (concat zchunks)
  /\ ts_zsum ts = rsum (map snd (concat zchunks)).
Proof.
  intros t zchunks; unfold vocab_loop.
  destruct (fold_vocab_step_sums t zchunks (tok_init R_ops)) as [H1 H2].
  rewrite fold_vocab_step_lse, H1, H2.
  split; [reflexivity|split; [apply chunked_lse_correct|]].
  simpl; split; ring.
Qed.

(** The per-token (loss, lse) of the loop over the logit row [zs] cut into
    chunks of [bv]: the specification, for every chunk size. *)
Theorem token_loss_chunked : forall eps lam bv t (zs : list R),
  zs <> [] -> (0 <= t < Z.of_nat (length zs))%Z ->
  token_loss R_ops (length zs) eps lam
    (vocab_loop R_ops t (chunk bv (combine (seq 0 (length zs)) zs)))
  = (ce_token_loss_R eps lam t zs, lse_row zs).
Proof.
  intros eps lam bv t zs Hne Ht.
  destruct (vocab_loop_correct t (chunk bv (combine (seq 0 (length zs)) zs)))
    as (E1 & E2 & E3 & E4).
  rewrite concat_chunk in E2, E3, E4.
  unfold token_loss; rewrite E1, E2, E3, E4.
  destruct zs as [|z0 zs'] eqn:Ez; [contradiction|]; rewrite <- Ez in *.
  assert (HL : lse_R (combine (seq 0 (length zs)) zs) = lse_row zs).
  { unfold lse_R, lse_row; rewrite <- (map_map snd exp), map_snd_combine_seq; reflexivity. }
  assert (Ht' : target_sum t (combine (seq 0 (length zs)) zs) = nth (Z.to_nat t) zs 0).
  { rewrite <- (target_sum_seq zs 0 (Z.to_nat t)) by lia; f_equal; lia. }
  assert (Hne' : combine (seq 0 (length zs)) zs <> []) by (rewrite Ez; discriminate).
  destruct (combine (seq 0 (length zs)) zs) as [|p ps] eqn:Ec; [contradiction|].
  rewrite <- Ec in *; rewrite HL, Ht', map_snd_combine_seq, sc_of_nat_R.
  unfold ce_token_loss_R; reflexivity.
Qed.

(** The loss as a function of the logits, computed by the vocabulary
    loop with chunks of any size [bv], is the specification. *)
Theorem logits_loss_correct : forall eps lam bv t (zs : list R),
  zs <> [] -> (0 <= t < Z.of_nat (length zs))%Z ->
  logits_loss R_ops eps lam bv t zs = ce_token_loss_R eps lam t zs.
Proof.
  intros; unfold logits_loss; rewrite token_loss_chunked by assumption; reflexivity.
Qed.

(** The lse of the loop does not depend on the target (nor on its range). *)
Lemma token_loss_chunked_lse : forall eps lam bv t (zs : list R),
  zs <> [] ->
  snd (token_loss R_ops (length zs) eps lam
         (vocab_loop R_ops t (chunk bv (combine (seq 0 (length zs)) zs))))
  = lse_row zs.
Proof.
  intros eps lam bv t zs Hne.
  destruct (vocab_loop_correct t (chunk bv (combine (seq 0 (length zs)) zs)))
    as (E1 & E2 & _ & _).
  rewrite concat_chunk in E2.
  unfold token_loss; rewrite E1, E2.
  assert (HL : lse_R (combine (seq 0 (length zs)) zs) = lse_row zs).
  { unfold lse_R, lse_row; rewrite <- (map_map snd exp), map_snd_combine_seq; reflexivity. }
  assert (Hne' : combine (seq 0 (length zs)) zs <> [])
    by (destruct zs; [contradiction|discriminate]).
  destruct (combine (seq 0 (length zs)) zs) as [|p ps] eqn:Ec; [contradiction|].
  rewrite <- Ec in *; rewrite HL; reflexivity.
Qed.

(** The token loop's per-token forward is the vocabulary loop over the
    chunks of the logit row [z_v = cap (h . w_v + b_v)]. *)
Lemma token_forward_logits : forall cfg bv W bias h t,
  let zs := logits_row R_ops (ce_softcap cfg) bias W h in
  token_forward R_ops cfg bv W bias h t
  = token_loss R_ops (length zs) (ce_smoothing cfg) (ce_z_loss cfg)
      (vocab_loop R_ops t (chunk bv (combine (seq 0 (length zs)) zs))).
Proof.
  intros cfg bv W bias h t zs.
  assert (Hlen : length zs = length W)
    by (unfold zs, logits_row; rewrite map_length; unfold vocab;
        rewrite combine_length, seq_length; apply Nat.min_id).
  unfold token_forward; rewrite Hlen; f_equal; f_equal.
  unfold chunk_logits; rewrite <- chunk_map; f_equal.
  rewrite (map_pair_fst (fun e => softcap R_ops (ce_softcap cfg) (raw_logit R_ops bias h e))).
  unfold vocab at 1; rewrite map_fst_combine_seq.
  reflexivity.
Qed.

Lemma logits_row_nil : forall cap bias (W : list (list R)) h,
  W <> [] -> logits_row R_ops cap bias W h <> [].
Proof. intros cap bias [|w W] h H; [contradiction|discriminate]. Qed.

Lemma logits_row_length : forall cap bias (W : list (list R)) h,
  length (logits_row R_ops cap bias W h) = length W.
Proof.
  intros; unfold logits_row, vocab; rewrite map_length, combine_length, seq_length.
  apply Nat.min_id.
Qed.

(** The token loop's per-token forward from the hidden row [h]: the
    vocabulary chunks of [W] (and bias, softcap) give the logit row
    [z_v = cap (h . w_v + b_v)], and the result is the specification's
    loss and lse of that row. *)
Theorem token_forward_correct : forall cfg bv W bias h t,
  W <> [] -> (0 <= t < Z.of_nat (length W))%Z ->
  let zs := logits_row R_ops (ce_softcap cfg) bias W h in
  token_forward R_ops cfg bv W bias h t
  = (ce_token_loss_R (ce_smoothing cfg) (ce_z_loss cfg) t zs, lse_row zs).
Proof.
  intros cfg bv W bias h t HW Ht zs.
  rewrite token_forward_logits; fold zs.
  apply token_loss_chunked; [apply logits_row_nil, HW|].
  unfold zs; rewrite logits_row_length; exact Ht.
Qed.

(** The lse of the per-token forward, whatever the target (ignored or not). *)
Theorem token_forward_lse : forall cfg bv W bias h t,
  W <> [] ->
  snd (token_forward R_ops cfg bv W bias h t)
  = lse_row (logits_row R_ops (ce_softcap cfg) bias W h).
Proof.
  intros cfg bv W bias h t HW.
  rewrite token_forward_logits; apply token_loss_chunked_lse, logits_row_nil, HW.
Qed.

(** ** The loss in terms of the softmax *)

Lemma rsum_exp_pos : forall zs : list R, zs <> [] -> 0 < rsum (map exp zs).
Proof.
  intros [|z zs] H; [contradiction|].
  apply (rsum_pos _ (exp z)); [|left; reflexivity|apply exp_pos].
  intros y Hy; apply in_map_iff in Hy; destruct Hy as [x [<- _]]; left; apply exp_pos.
Qed.

Lemma rsum_map_minus_const : forall {A} (f : A -> R) c l,
  rsum (map (fun x => f x - c) l) = rsum (map f l) - INR (length l) * c.
Proof.
  intros A f c l; induction l as [|x l IH]; [simpl; unfold rsum; simpl; ring|].
  cbn [map length]; rewrite !rsum_cons, IH, S_INR; ring.
Qed.

(** [ln p_v = z_v - lse]. *)
Lemma ln_softmax : forall zs v, zs <> [] -> ln (softmax_R zs v) = nth v zs 0 - lse_row zs.
Proof.
  intros zs v H; unfold softmax_R, lse_row.
  rewrite <- (exp_ln (rsum (map exp zs))) at 1 by (apply rsum_exp_pos, H).
  rewrite <- exp_minus, ln_exp; reflexivity.
Qed.

(** The per-token loss is [F.cross_entropy]'s label-smoothed loss,
    [-(1-eps) ln p_t - (eps/V) sum_v ln p_v], plus the z-loss [lam lse^2]. *)
Theorem ce_token_loss_softmax : forall eps lam t zs,
  zs <> [] ->
  ce_token_loss_R eps lam t zs
  = - (1 - eps) * ln (softmax_R zs (Z.to_nat t))
    - eps * (rsum (map (fun v => ln (softmax_R zs v)) (seq 0 (length zs))) / INR (length zs))
    + lam * (lse_row zs * lse_row zs).
Proof.
  intros eps lam t zs H; unfold ce_token_loss_R.
  rewrite ln_softmax by exact H.
  rewrite (rsum_map_ext _ (fun v => nth v zs 0 - lse_row zs)) by (intros v _; apply ln_softmax, H).
  rewrite rsum_map_minus_const, map_nth_seq, seq_length.
  assert (HV : INR (length zs) <> 0)
    by (destruct zs; [contradiction|]; apply not_0_INR; discriminate).
  field; exact HV.
Qed.

(** Without smoothing and z-loss, the loss [lse - z_t] is the negative
    log-likelihood [- ln p_t] of the target. *)
Theorem ce_token_loss_nll : forall t zs,
  zs <> [] -> ce_token_loss_R 0 0 t zs = - ln (softmax_R zs (Z.to_nat t)).
Proof.
  intros t zs H; rewrite ce_token_loss_softmax by exact H; ring.
Qed.

(** With smoothing [eps] and z-loss [lam], the loss is
    [(1-eps) (lse - z_t) + eps (lse - mean_v z_v) + lam lse^2] where
    [lse - z_t = - ln p_t] and [lse - mean_v z_v = - mean_v ln p_v]. *)
Theorem ce_token_loss_terms : forall eps lam t zs,
  zs <> [] ->
  lse_row zs - nth (Z.to_nat t) zs 0 = - ln (softmax_R zs (Z.to_nat t))
  /\ lse_row zs - rsum zs / INR (length zs)
     = - (rsum (map (fun v => ln (softmax_R zs v)) (seq 0 (length zs))) / INR (length zs))
  /\ ce_token_loss_R eps lam t zs
     = (1 - eps) * (lse_row zs - nth (Z.to_nat t) zs 0)
       + eps * (lse_row zs - rsum zs / INR (length zs)) + lam * (lse_row zs * lse_row zs).
Proof.
  intros eps lam t zs H.
  pose proof (ce_token_loss_nll t zs H) as H1; unfold ce_token_loss_R in H1.
  pose proof (ce_token_loss_softmax 1 0 t zs H) as H2; unfold ce_token_loss_R in H2.
  split; [lra|split; [lra|reflexivity]].
Qed.
