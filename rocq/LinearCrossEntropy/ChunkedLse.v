(** * The chunked log-sum-exp over vocabulary chunks (over [R]).

    The (max, sum) state of the vocabulary loop is the online-softmax
    state of [Attention/OnlineSoftmax.v] with keys [(Some z_v, [])], so
    the invariant [represents] of [Attention/StreamCorrect.v] and the
    [merge] of [Attention/Merge.v] apply as they are.  Here: the chunked
    lse is [ln (sum_v exp z_v)] for every chunking and every order of the
    vocabulary; the lse of two groups of chunks is the merge of their
    states; and the final state is [(M, Z)] with [M] the max logit and
    [1 <= Z <= V], so [lse = M + ln Z] with [M <= lse <= M + ln V]. *)

From Coq Require Import Reals List Lra Arith Lia Permutation.
From Ojas Require Import ScalarOps Vector VectorFacts Attention.OnlineSoftmax
  Attention.StreamCorrect Attention.Merge LinearCrossEntropy.Definitions.
Import ListNotations.
Open Scope R_scope.

(** The exact log-sum-exp of a list of logits [(v, z_v)]. *)
Definition lse_R (zs : list (nat * R)) : R := ln (rsum (map (fun z => exp (snd z)) zs)).

(** ** The keys of a list of logits *)

Lemma lse_keys_app : forall (xs ys : list (nat * R)),
  lse_keys (xs ++ ys) = lse_keys xs ++ lse_keys ys.
Proof. intros; unfold lse_keys; apply map_app. Qed.

Lemma concat_lse_keys : forall (zchunks : list (list (nat * R))),
  concat (map lse_keys zchunks) = lse_keys (concat zchunks).
Proof.
  induction zchunks as [|c cs IH]; simpl; [reflexivity|].
  rewrite lse_keys_app, IH; reflexivity.
Qed.

Lemma lse_keys_perm : forall (xs ys : list (nat * R)),
  Permutation xs ys -> Permutation (lse_keys xs) (lse_keys ys).
Proof. intros; unfold lse_keys; apply Permutation_map; assumption. Qed.

Lemma kw_sum_lse_keys : forall m (zs : list (nat * R)),
  kw_sum m (lse_keys zs) = rsum (map (fun z => exp (snd z - m)) zs).
Proof.
  intros m zs; unfold kw_sum, lse_keys; rewrite map_map; reflexivity.
Qed.

Lemma block_max_lse_keys_nil : block_max R_ops (lse_keys (@nil (nat * R))) = None.
Proof. reflexivity. Qed.

(** A nonempty list of logits has a max. *)
Lemma block_max_lse_keys_Some : forall (zs : list (nat * R)),
  zs <> [] -> exists M, block_max R_ops (lse_keys zs) = Some M.
Proof.
  intros [|z zs] H; [contradiction|].
  unfold lse_keys; cbn [map]; rewrite block_max_cons; cbn [fst].
  destruct (block_max R_ops (map (fun z => (Some (snd z), [])) zs)) as [b|].
  - rewrite omax_Some; eexists; reflexivity.
  - rewrite omax_None_r; eexists; reflexivity.
Qed.

(** The max bounds every unmasked score. *)
Lemma block_max_upper : forall keys M,
  block_max R_ops keys = Some M -> forall s v, In (Some s, v) keys -> s <= M.
Proof.
  induction keys as [|k keys IH]; intros M H s v Hin; [destruct Hin|].
  rewrite block_max_cons in H.
  destruct Hin as [Hk|Hin]; [subst k|]; cbn [fst] in H.
  - destruct (block_max R_ops keys) as [b|].
    + rewrite omax_Some in H; injection H as <-; apply Rmax_l.
    + rewrite omax_None_r in H; injection H as <-; lra.
  - destruct (block_max R_ops keys) as [b|] eqn:E.
    + assert (s <= b) by (apply (IH b eq_refl s v Hin)).
      destruct (fst k) as [x|].
      * rewrite omax_Some in H; injection H as <-.
        eapply Rle_trans; [eassumption|apply Rmax_r].
      * rewrite omax_None_l in H; injection H as <-; assumption.
    + pose proof (block_max_None_masked keys E _ Hin); discriminate.
Qed.

Lemma exp_le_mono : forall x y, x <= y -> exp x <= exp y.
Proof. intros x y [H|H]; [left; apply exp_increasing, H|right; rewrite H; reflexivity]. Qed.

Lemma rsum_le_length : forall xs, (forall x, In x xs -> x <= 1) -> rsum xs <= INR (length xs).
Proof.
  induction xs as [|x xs IH]; intros H; [simpl; lra|].
  rewrite rsum_cons; cbn [length]; rewrite S_INR.
  assert (x <= 1) by (apply H; left; reflexivity).
  assert (rsum xs <= INR (length xs)) by (apply IH; intros y Hy; apply H; right; exact Hy).
  lra.
Qed.

(** ** The final state of the vocabulary loop *)

(** The state after streaming logit chunks: [None] for no logit, else
    [(M, Z)] with [M] the largest logit and [Z = sum_v exp (z_v - M)]. *)
Lemma stream_lse_represents : forall zchunks : list (list (nat * R)),
  represents (stream R_ops (map lse_keys zchunks)) (lse_keys (concat zchunks)).
Proof.
  intros zchunks; rewrite <- concat_lse_keys; apply stream_represents.
Qed.

Lemma lse_of_state : forall s (zs : list (nat * R)),
  represents (Some s) (lse_keys zs) -> st_max s + ln (st_sum s) = lse_R zs.
Proof.
  intros s zs (Hm & Hs & _).
  pose proof (kw_sum_pos _ _ Hm) as Hpos; rewrite <- Hs in Hpos.
  rewrite Hs, kw_sum_lse_keys in *; unfold lse_R.
  assert (E : rsum (map (fun z => exp (snd z)) zs)
              = exp (st_max s) * rsum (map (fun z => exp (snd z - st_max s)) zs)).
  { rewrite <- rsum_map_scal_l; apply rsum_map_ext; intros z _.
    rewrite <- exp_plus; f_equal; ring. }
  rewrite E, ln_mult by (try apply exp_pos; exact Hpos); rewrite ln_exp; ring.
Qed.

(** Shifting by any reference point [M]: [M + ln (sum_v exp (z_v - M))]
    is the lse of a nonempty list of logits. *)
Lemma lse_R_shift : forall (zs : list (nat * R)) M,
  zs <> [] -> M + ln (rsum (map (fun z => exp (snd z - M)) zs)) = lse_R zs.
Proof.
  intros zs M Hne.
  assert (Hpos : 0 < rsum (map (fun z => exp (snd z - M)) zs)).
  { destruct zs as [|z zs]; [contradiction|].
    apply (rsum_pos _ (exp (snd z - M))); [|left; reflexivity|apply exp_pos].
    intros y Hy; apply in_map_iff in Hy; destruct Hy as [x [<- _]]; left; apply exp_pos. }
  unfold lse_R.
  assert (E : rsum (map (fun z => exp (snd z)) zs)
              = exp M * rsum (map (fun z => exp (snd z - M)) zs)).
  { rewrite <- rsum_map_scal_l; apply rsum_map_ext; intros z _.
    rewrite <- exp_plus; f_equal; ring. }
  rewrite E, ln_mult by (try apply exp_pos; exact Hpos); rewrite ln_exp; ring.
Qed.

(** For a nonempty vocabulary, the streamed state over any vocabulary
    chunking is [(M, Z)] with [M] the max logit (attained, an upper
    bound), [1 <= Z <= V], and the chunked lse is [M + ln Z]. *)
Theorem chunked_lse_max_sum : forall zchunks : list (list (nat * R)),
  concat zchunks <> [] ->
  exists s, stream R_ops (map lse_keys zchunks) = Some s
    /\ (exists v, In (v, st_max s) (concat zchunks))
    /\ (forall z, In z (concat zchunks) -> snd z <= st_max s)
    /\ 1 <= st_sum s <= INR (length (concat zchunks))
    /\ chunked_lse R_ops zchunks = Some (st_max s + ln (st_sum s)).
Proof.
  intros zchunks Hne.
  pose proof (stream_lse_represents zchunks) as Hr.
  set (zs := concat zchunks) in *.
  destruct (stream R_ops (map lse_keys zchunks)) as [s|] eqn:E.
  - exists s; split; [reflexivity|].
    destruct Hr as (Hm & Hs & _).
    assert (Hup : forall z, In z zs -> snd z <= st_max s).
    { intros z Hz; apply (block_max_upper _ _ Hm (snd z) []).
      unfold lse_keys; apply (in_map (fun z => (Some (snd z), @nil R))); exact Hz. }
    destruct (block_max_Some_in _ _ Hm) as [w Hw].
    unfold lse_keys in Hw; apply in_map_iff in Hw; destruct Hw as [[v z] [Ez Hz]].
    injection Ez as Ez _; cbn [snd] in Ez; subst z.
    split; [exists v; exact Hz|split; [exact Hup|split]].
    + rewrite Hs, kw_sum_lse_keys; split.
      * rewrite <- exp_0; replace 0 with (snd (v, st_max s) - st_max s) by (simpl; ring).
        pose proof (in_split _ _ Hz) as [l1 [l2 Hl]]; rewrite Hl, map_app, rsum_app.
        cbn [map]; rewrite rsum_cons.
        assert (0 <= rsum (map (fun z => exp (snd z - st_max s)) l1))
          by (apply rsum_nonneg; intros x Hx; apply in_map_iff in Hx;
              destruct Hx as [y [<- _]]; left; apply exp_pos).
        assert (0 <= rsum (map (fun z => exp (snd z - st_max s)) l2))
          by (apply rsum_nonneg; intros x Hx; apply in_map_iff in Hx;
              destruct Hx as [y [<- _]]; left; apply exp_pos).
        lra.
      * rewrite <- (map_length (fun z => exp (snd z - st_max s)) zs).
        apply rsum_le_length; intros x Hx; apply in_map_iff in Hx.
        destruct Hx as [z [<- Hz']]; rewrite <- exp_0; apply exp_le_mono.
        pose proof (Hup z Hz'); lra.
    + unfold chunked_lse; rewrite E; reflexivity.
  - simpl in Hr; exfalso.
    destruct (block_max_lse_keys_Some zs Hne) as [M HM]; congruence.
Qed.

(** ** The chunked lse is the log-sum-exp *)

(** For any cut of the vocabulary into chunks, the chunked lse is
    [ln (sum_v exp z_v)] (and [None] = -inf for an empty vocabulary). *)
Theorem chunked_lse_correct : forall zchunks : list (list (nat * R)),
  chunked_lse R_ops zchunks =
  match concat zchunks with [] => None | zs => Some (lse_R zs) end.
Proof.
  intros zchunks.
  pose proof (stream_lse_represents zchunks) as Hr.
  unfold chunked_lse.
  destruct (stream R_ops (map lse_keys zchunks)) as [s|] eqn:E.
  - destruct (concat zchunks) as [|z zs] eqn:Ec.
    + destruct Hr as (Hm & _); discriminate.
    + simpl; f_equal; apply lse_of_state; exact Hr.
  - simpl in Hr; destruct (concat zchunks) as [|z zs] eqn:Ec; [reflexivity|].
    destruct (block_max_lse_keys_Some (z :: zs) ltac:(discriminate)) as [M HM]; congruence.
Qed.

(** The vocabulary cut into chunks of [bv] entries, as the code does: the
    chunked lse is [ln (sum_v exp z_v)], for every chunk size. *)
Theorem chunked_lse_chunk : forall bv (zs : list (nat * R)),
  zs <> [] -> chunked_lse R_ops (chunk bv zs) = Some (lse_R zs).
Proof.
  intros bv zs Hne; rewrite chunked_lse_correct, concat_chunk.
  destruct zs; [contradiction|reflexivity].
Qed.

Lemma lse_R_perm : forall xs ys, Permutation xs ys -> lse_R xs = lse_R ys.
Proof.
  intros xs ys H; unfold lse_R; f_equal; apply rsum_perm, Permutation_map, H.
Qed.

(** Any two chunkings of the vocabulary, in any order of its entries,
    give the same chunked lse. *)
Theorem chunked_lse_any_chunking : forall zc1 zc2 : list (list (nat * R)),
  Permutation (concat zc1) (concat zc2) -> chunked_lse R_ops zc1 = chunked_lse R_ops zc2.
Proof.
  intros zc1 zc2 Hp; rewrite !chunked_lse_correct.
  destruct (concat zc1) as [|z1 l1] eqn:E1, (concat zc2) as [|z2 l2] eqn:E2.
  - reflexivity.
  - apply Permutation_nil in Hp; discriminate.
  - apply Permutation_sym, Permutation_nil in Hp; discriminate.
  - f_equal; apply lse_R_perm, Hp.
Qed.

(** ** Merging the states of groups of chunks *)

(** The state of the chunks [zc1 ++ zc2] is the merge of the states of
    [zc1] and of [zc2] (e.g. two halves of the vocabulary, or two
    vocabulary shards), hence so is the lse. *)
Theorem chunked_lse_app_merge : forall zc1 zc2 : list (list (nat * R)),
  st_eq (stream R_ops (map lse_keys (zc1 ++ zc2)))
        (merge R_ops (stream R_ops (map lse_keys zc1)) (stream R_ops (map lse_keys zc2)))
  /\ chunked_lse R_ops (zc1 ++ zc2)
     = snd (finalize R_ops 0 (merge R_ops (stream R_ops (map lse_keys zc1))
                                          (stream R_ops (map lse_keys zc2)))).
Proof.
  intros zc1 zc2.
  assert (H : st_eq (stream R_ops (map lse_keys (zc1 ++ zc2)))
                    (merge R_ops (stream R_ops (map lse_keys zc1)) (stream R_ops (map lse_keys zc2))))
    by (rewrite map_app; apply stream_app_merge).
  split; [exact H|].
  unfold chunked_lse; apply (finalize_st_eq 0 _ _ H).
Qed.

(** Split over vocabulary chunks: one state per chunk, merged in any
    order of the chunks, gives the lse [ln (sum_v exp z_v)] of the whole
    vocabulary. *)
Theorem merge_chunks_lse : forall zchunks zchunks' : list (list (nat * R)),
  Permutation zchunks zchunks' -> concat zchunks <> [] ->
  snd (finalize R_ops 0 (fold_left (merge R_ops)
         (map (fun c => stream R_ops [lse_keys c]) zchunks') None))
  = Some (lse_R (concat zchunks)).
Proof.
  intros zc zc' Hp Hne.
  pose proof (merge_blocks_correct 0 (map lse_keys zc) (map lse_keys zc')
                (Permutation_map _ Hp)) as [_ H].
  rewrite map_map in H; rewrite H.
  pose proof (stream_correct 0 (map lse_keys zc)) as [_ H2].
  rewrite <- H2; fold (chunked_lse R_ops zc); rewrite chunked_lse_correct.
  destruct (concat zc); [contradiction|reflexivity].
Qed.
