(** * The streaming recurrence computes the two-pass softmax (over [R]).

    The invariant: after a prefix of the keys the streaming state is
    [None] exactly when every key of the prefix is masked, and otherwise
    holds the max [m] of the prefix's unmasked scores, the exact sum
    [l = sum_j exp (s_j - m)] and the exact accumulator
    [acc = sum_j exp (s_j - m) v_j] over the unmasked keys of the prefix
    ([represents]).  [block_step] keeps the invariant, and [finalize] of a
    state that represents some keys is the two-pass result on those keys. *)

From Coq Require Import Reals List Lra Arith Lia Permutation.
From Ojas Require Import ScalarOps Vector VectorFacts Attention.OnlineSoftmax.
Import ListNotations.
Open Scope R_scope.

Local Notation rkey := (@key R).

(** ** The exact sums a state stands for *)

(** [sum_j exp (s_j - m)] over the unmasked keys. *)
Definition kw_sum (m : R) (keys : list rkey) : R :=
  rsum (map (key_weight R_ops m) keys).

(** Coordinate [c] of [sum_j exp (s_j - m) v_j] over the unmasked keys. *)
Definition kw_acc (m : R) (keys : list rkey) (c : nat) : R :=
  rsum (map (fun k => key_weight R_ops m k * nth c (snd k) 0) keys).

Lemma key_weight_R : forall m (k : rkey),
  key_weight R_ops m k = match fst k with None => 0 | Some s => exp (s - m) end.
Proof. reflexivity. Qed.

Lemma key_weight_nonneg : forall m (k : rkey), 0 <= key_weight R_ops m k.
Proof.
  intros m k; rewrite key_weight_R; destruct (fst k);
    [left; apply exp_pos | right; reflexivity].
Qed.

(** Moving the reference point from [m] to [m'] rescales by [exp (m - m')]. *)
Lemma key_weight_shift : forall m m' (k : rkey),
  key_weight R_ops m' k = exp (m - m') * key_weight R_ops m k.
Proof.
  intros m m' k; rewrite !key_weight_R; destruct (fst k) as [s|]; [|lra].
  rewrite <- exp_plus; f_equal; lra.
Qed.

Lemma kw_sum_app : forall m xs ys, kw_sum m (xs ++ ys) = kw_sum m xs + kw_sum m ys.
Proof. intros; unfold kw_sum; rewrite map_app, rsum_app; reflexivity. Qed.

Lemma kw_acc_app : forall m xs ys c, kw_acc m (xs ++ ys) c = kw_acc m xs c + kw_acc m ys c.
Proof. intros; unfold kw_acc; rewrite map_app, rsum_app; reflexivity. Qed.

Lemma kw_sum_shift : forall m m' keys, kw_sum m' keys = exp (m - m') * kw_sum m keys.
Proof.
  intros m m' keys; unfold kw_sum; rewrite <- rsum_map_scal_l.
  apply rsum_map_ext; intros k _; apply key_weight_shift.
Qed.

Lemma kw_acc_shift : forall m m' keys c, kw_acc m' keys c = exp (m - m') * kw_acc m keys c.
Proof.
  intros m m' keys c; unfold kw_acc; rewrite <- rsum_map_scal_l.
  apply rsum_map_ext; intros k _; rewrite (key_weight_shift m m'); ring.
Qed.

Lemma kw_sum_perm : forall m xs ys, Permutation xs ys -> kw_sum m xs = kw_sum m ys.
Proof. intros; unfold kw_sum; apply rsum_perm, Permutation_map; assumption. Qed.

Lemma kw_acc_perm : forall m xs ys c, Permutation xs ys -> kw_acc m xs c = kw_acc m ys c.
Proof. intros; unfold kw_acc; apply rsum_perm, Permutation_map; assumption. Qed.

Lemma unmasked_cons_Some : forall {T} (s : T) v (keys : list (@key T)),
  unmasked (@cons (@key T) (Some s, v) keys) = (s, v) :: unmasked keys.
Proof. reflexivity. Qed.

Lemma unmasked_cons_None : forall {T} (v : list T) (keys : list (@key T)),
  unmasked (@cons (@key T) (None, v) keys) = unmasked keys.
Proof. reflexivity. Qed.

(** The sums only see the unmasked keys. *)
Lemma kw_sum_unmasked : forall m keys,
  kw_sum m keys = rsum (map (fun k => exp (fst k - m)) (unmasked keys)).
Proof.
  intros m keys; unfold kw_sum; induction keys as [|[[s|] v] keys IH];
    [reflexivity|rewrite unmasked_cons_Some|rewrite unmasked_cons_None];
    cbn [map]; rewrite ?rsum_cons, IH, key_weight_R; simpl; lra.
Qed.

Lemma kw_acc_unmasked : forall m keys c,
  kw_acc m keys c = rsum (map (fun k => exp (fst k - m) * nth c (snd k) 0) (unmasked keys)).
Proof.
  intros m keys c; unfold kw_acc; induction keys as [|[[s|] v] keys IH];
    [reflexivity|rewrite unmasked_cons_Some|rewrite unmasked_cons_None];
    cbn [map]; rewrite ?rsum_cons, IH, key_weight_R; simpl; lra.
Qed.

(** ** The max of the unmasked scores *)

Lemma omax_None_l : forall (a : option R), omax R_ops None a = a.
Proof. intros [a|]; reflexivity. Qed.

Lemma omax_None_r : forall (a : option R), omax R_ops a None = a.
Proof. intros [a|]; reflexivity. Qed.

Lemma omax_Some : forall x y, omax R_ops (Some x) (Some y) = Some (Rmax x y).
Proof. intros x y; simpl; rewrite R_max_eq; reflexivity. Qed.

Lemma omax_comm : forall a b, omax R_ops a b = omax R_ops b a.
Proof.
  intros [a|] [b|]; try reflexivity. rewrite !omax_Some, Rmax_comm; reflexivity.
Qed.

Lemma omax_assoc : forall a b c,
  omax R_ops a (omax R_ops b c) = omax R_ops (omax R_ops a b) c.
Proof.
  intros [a|] [b|] [c|]; try reflexivity; rewrite ?omax_Some; try reflexivity.
  rewrite Rmax_assoc; reflexivity.
Qed.

Lemma block_max_cons_fold : forall {T} (o : ScalarOps T) k keys,
  block_max o (k :: keys)
  = fold_left (fun m (k : @key T) => omax o m (fst k)) keys (omax o None (fst k)).
Proof. reflexivity. Qed.

(** [block_max] read as a fold over [Some x] (any scalar operations). *)
Lemma block_max_fold_Some : forall {T} (o : ScalarOps T) keys x,
  fold_left (fun m (k : @key T) => omax o m (fst k)) keys (Some x)
  = Some (fold_left (sc_max o) (map fst (unmasked keys)) x).
Proof.
  intros T o keys; induction keys as [|[[s|] v] keys IH]; intros x;
    [reflexivity|rewrite unmasked_cons_Some|rewrite unmasked_cons_None]; apply IH.
Qed.

(** [block_max] is the two-pass max [list_max] of the unmasked scores,
    [None] when there is none (any scalar operations). *)
Lemma block_max_unmasked : forall {T} (o : ScalarOps T) keys,
  block_max o keys =
  match unmasked keys with
  | [] => None
  | (s0, v0) :: rest => Some (list_max o s0 (map fst ((s0, v0) :: rest)))
  end.
Proof.
  intros T o keys; induction keys as [|[[s|] v] keys IH];
    [reflexivity|rewrite unmasked_cons_Some|rewrite unmasked_cons_None].
  - rewrite block_max_cons_fold; change (omax o None (fst (Some s, v))) with (Some s).
    rewrite block_max_fold_Some; unfold list_max; cbn [map fold_left fst].
    replace (sc_max o s s) with s; [reflexivity|].
    unfold sc_max; destruct (sc_ltb o s s); reflexivity.
  - rewrite <- IH; reflexivity.
Qed.

Lemma block_max_fold : forall keys m0,
  fold_left (fun m (k : rkey) => omax R_ops m (fst k)) keys m0
  = omax R_ops m0 (block_max R_ops keys).
Proof.
  induction keys as [|k keys IH]; intros m0.
  - rewrite omax_None_r; reflexivity.
  - rewrite block_max_cons_fold; cbn [fold_left].
    rewrite IH, (IH (omax R_ops None (fst k))), omax_None_l, omax_assoc; reflexivity.
Qed.

Lemma block_max_nil : block_max R_ops [] = None.
Proof. reflexivity. Qed.

Lemma block_max_cons : forall k keys,
  block_max R_ops (k :: keys) = omax R_ops (fst k) (block_max R_ops keys).
Proof.
  intros k keys; rewrite block_max_cons_fold, block_max_fold, omax_None_l; reflexivity.
Qed.

Lemma block_max_app : forall xs ys,
  block_max R_ops (xs ++ ys) = omax R_ops (block_max R_ops xs) (block_max R_ops ys).
Proof.
  intros xs ys; induction xs as [|k xs IH].
  - rewrite omax_None_l; reflexivity.
  - rewrite <- app_comm_cons, !block_max_cons, IH, omax_assoc; reflexivity.
Qed.

Lemma block_max_perm : forall xs ys, Permutation xs ys -> block_max R_ops xs = block_max R_ops ys.
Proof.
  intros xs ys H; induction H; rewrite ?block_max_cons; try congruence.
  rewrite !omax_assoc, (omax_comm (fst y)); reflexivity.
Qed.

(** No unmasked key: the sums vanish. *)
Lemma block_max_None_masked : forall keys,
  block_max R_ops keys = None -> forall k, In k keys -> fst k = None.
Proof.
  induction keys as [|k keys IH]; intros H k' Hk; [destruct Hk|].
  rewrite block_max_cons in H.
  destruct (fst k) eqn:E; [destruct (block_max R_ops keys); discriminate|].
  rewrite omax_None_l in H; destruct Hk as [<-|Hk]; auto.
Qed.

Lemma kw_sum_None : forall m keys, block_max R_ops keys = None -> kw_sum m keys = 0.
Proof.
  intros m keys H; unfold kw_sum; apply rsum_map_zero; intros k Hk.
  rewrite key_weight_R, (block_max_None_masked keys H k Hk); reflexivity.
Qed.

Lemma kw_acc_None : forall m keys c, block_max R_ops keys = None -> kw_acc m keys c = 0.
Proof.
  intros m keys c H; unfold kw_acc; apply rsum_map_zero; intros k Hk.
  rewrite key_weight_R, (block_max_None_masked keys H k Hk); ring.
Qed.

(** The max is attained by an unmasked key. *)
Lemma block_max_Some_in : forall keys M,
  block_max R_ops keys = Some M -> exists v, In (Some M, v) keys.
Proof.
  induction keys as [|[s v] keys IH]; intros M H; [discriminate|].
  rewrite block_max_cons in H; simpl in H.
  destruct s as [s|]; [destruct (block_max R_ops keys) as [b|] eqn:E|].
  - rewrite omax_Some in H; injection H as <-.
    destruct (Rle_dec s b).
    + rewrite Rmax_right by lra. destruct (IH b eq_refl) as [w Hw].
      exists w; right; exact Hw.
    + rewrite Rmax_left by lra. exists v; left; reflexivity.
  - injection H as <-; exists v; left; reflexivity.
  - rewrite omax_None_l in H; destruct (IH M H) as [w Hw]; exists w; right; exact Hw.
Qed.

(** With [m] the max, the sum [l] is positive: no log of zero. *)
Lemma kw_sum_pos : forall keys M, block_max R_ops keys = Some M -> 0 < kw_sum M keys.
Proof.
  intros keys M H; destruct (block_max_Some_in keys M H) as [v Hv].
  unfold kw_sum; apply (rsum_pos _ (key_weight R_ops M (Some M, v))).
  - intros y Hy; apply in_map_iff in Hy; destruct Hy as [k [<- _]]; apply key_weight_nonneg.
  - apply in_map; exact Hv.
  - rewrite key_weight_R; apply exp_pos.
Qed.

(** ** The invariant of the streaming state *)

(** [st] is the streaming state of the keys [keys]: [None] iff all of them
    are masked, otherwise [m] is their max and [l], [acc] are the exact
    sums against [m]. *)
Definition represents (st : option (state R)) (keys : list rkey) : Prop :=
  match st with
  | None => block_max R_ops keys = None
  | Some s =>
      block_max R_ops keys = Some (st_max s)
      /\ st_sum s = kw_sum (st_max s) keys
      /\ forall c, nth c (st_acc s) 0 = kw_acc (st_max s) keys c
  end.

Lemma represents_nil : represents None [].
Proof. reflexivity. Qed.

(** The invariant only sees the multiset of keys. *)
Lemma represents_perm : forall st xs ys,
  Permutation xs ys -> represents st xs -> represents st ys.
Proof.
  intros [s|] xs ys Hp H; simpl in *.
  - destruct H as (Hm & Hl & Ha).
    rewrite <- (block_max_perm _ _ Hp), <- (kw_sum_perm _ _ _ Hp); split; [|split]; auto.
    intros c; rewrite <- (kw_acc_perm _ _ _ _ Hp); auto.
  - rewrite <- (block_max_perm _ _ Hp); exact H.
Qed.

(** Keys all of which are masked can be added without changing the state. *)
Lemma represents_app_masked : forall st xs ys,
  block_max R_ops ys = None -> represents st xs -> represents st (xs ++ ys).
Proof.
  intros [s|] xs ys Hy H; simpl in *.
  - destruct H as (Hm & Hl & Ha).
    rewrite block_max_app, Hm, Hy, kw_sum_app, (kw_sum_None _ ys Hy).
    split; [reflexivity|split; [lra|]].
    intros c; rewrite kw_acc_app, (kw_acc_None _ ys c Hy), Ha; ring.
  - rewrite block_max_app, H, Hy; reflexivity.
Qed.

(** A state that represents [keys] has a positive sum [l]. *)
Lemma represents_sum_pos : forall s keys, represents (Some s) keys -> 0 < st_sum s.
Proof.
  intros s keys (Hm & Hl & _); rewrite Hl; apply (kw_sum_pos keys); exact Hm.
Qed.

(** One tile of the streaming recurrence keeps the invariant. *)
Lemma block_step_represents : forall st keys blk,
  represents st keys -> represents (block_step R_ops st blk) (keys ++ blk).
Proof.
  intros st keys blk H; unfold block_step.
  destruct st as [s|]; simpl option_map.
  - destruct H as (Hm & Hl & Ha).
    destruct (block_max R_ops blk) as [b|] eqn:Eb.
    + rewrite omax_Some.
      change (sc_exp R_ops) with exp; change (sc_sub R_ops) with Rminus;
      change (sc_mul R_ops) with Rmult; change (sc_add R_ops) with Rplus.
      simpl; rewrite block_max_app, Hm, Eb, omax_Some; split; [reflexivity|split].
      * rewrite sc_sum_R, Hl, kw_sum_app, <- kw_sum_shift; reflexivity.
      * intros c; rewrite nth_vadd, nth_vscale, nth_weighted_sum_map, Ha, kw_acc_app,
          <- kw_acc_shift; reflexivity.
    + simpl omax.
      change (sc_exp R_ops) with exp; change (sc_sub R_ops) with Rminus;
      change (sc_mul R_ops) with Rmult; change (sc_add R_ops) with Rplus.
      simpl; rewrite block_max_app, Hm, Eb; split; [reflexivity|split].
      * rewrite sc_sum_R, Hl, kw_sum_app, <- kw_sum_shift; reflexivity.
      * intros c; rewrite nth_vadd, nth_vscale, nth_weighted_sum_map, Ha, kw_acc_app,
          <- kw_acc_shift; reflexivity.
  - simpl in H; rewrite omax_None_l.
    destruct (block_max R_ops blk) as [b|] eqn:Eb.
    + simpl; rewrite block_max_app, H, Eb, omax_None_l; split; [reflexivity|split].
      * rewrite sc_sum_R, kw_sum_app, (kw_sum_None _ keys H); unfold kw_sum; lra.
      * intros c; rewrite nth_weighted_sum_map, kw_acc_app, (kw_acc_None _ keys c H).
        unfold kw_acc; lra.
    + simpl; rewrite block_max_app, H, Eb; reflexivity.
Qed.

(** The streaming recurrence over a list of tiles keeps the invariant. *)
Lemma fold_block_step_represents : forall blocks st keys,
  represents st keys ->
  represents (fold_left (block_step R_ops) blocks st) (keys ++ concat blocks).
Proof.
  induction blocks as [|blk blocks IH]; intros st keys H; simpl.
  - rewrite app_nil_r; exact H.
  - rewrite app_assoc; apply IH, block_step_represents, H.
Qed.

(** The state after streaming the tiles [blocks] represents their keys. *)
Lemma stream_represents : forall blocks,
  represents (stream R_ops blocks) (concat blocks).
Proof.
  intros blocks; unfold stream; apply (fold_block_step_represents blocks None []).
  exact represents_nil.
Qed.

(** Finalising a state that represents [keys] gives the two-pass result. *)
Lemma finalize_represents : forall d st keys,
  represents st keys -> row_eq (finalize R_ops d st) (two_pass R_ops d keys).
Proof.
  intros d st keys H; unfold two_pass.
  pose proof (block_max_unmasked R_ops keys) as Hb.
  destruct st as [s|]; simpl in H.
  - destruct H as (Hm & Hl & Ha).
    rewrite Hm in Hb.
    destruct (unmasked keys) as [|[s0 v0] rest] eqn:Eu; [discriminate|].
    assert (HM : list_max R_ops s0 (map fst ((s0, v0) :: rest)) = st_max s) by congruence.
    rewrite HM; clear HM Hb.
    set (M := st_max s) in *; set (ks := (s0, v0) :: rest) in *.
    change (sc_exp R_ops) with exp; change (sc_sub R_ops) with Rminus;
    change (sc_div R_ops) with Rdiv; change (sc_add R_ops) with Rplus;
    change (sc_ln R_ops) with ln.
    rewrite sc_sum_R, map_map.
    assert (HZ : rsum (map (fun k => exp (fst k - M)) ks) = st_sum s)
      by (rewrite Hl, kw_sum_unmasked, Eu; reflexivity).
    rewrite HZ; split; cbn [fst snd finalize]; [|reflexivity].
    intros c; rewrite nth_vdiv, nth_weighted_sum_map, Ha, kw_acc_unmasked, Eu.
    fold ks; rewrite <- rsum_map_div; apply rsum_map_ext; intros k _.
    unfold Rdiv; ring.
  - rewrite H in Hb.
    destruct (unmasked keys) as [|[s0 v0] rest]; [|discriminate].
    apply row_eq_refl.
Qed.

(** ** Correctness of the streaming recurrence *)

(** Streaming any list of key tiles and finalising gives the two-pass
    softmax of all their keys (output coordinate-wise, lse exactly). *)
Theorem stream_correct : forall d blocks,
  row_eq (finalize R_ops d (stream R_ops blocks)) (two_pass R_ops d (concat blocks)).
Proof.
  intros d blocks; apply finalize_represents, stream_represents.
Qed.

(** The key-by-key recurrence (tiles of one key) is the two-pass softmax. *)
Theorem stream_keywise_correct : forall d keys,
  row_eq (finalize R_ops d (stream R_ops (map (fun k => [k]) keys))) (two_pass R_ops d keys).
Proof.
  intros d keys; pose proof (stream_correct d (map (fun k => [k]) keys)) as H.
  replace (concat (map (fun k => [k]) keys)) with keys in H; [exact H|].
  clear H; induction keys as [|k keys IH]; simpl; [reflexivity|]; rewrite <- IH; reflexivity.
Qed.

Lemma concat_chunk_fuel : forall {A} fuel b (xs : list A),
  (1 <= b)%nat -> (length xs <= fuel)%nat -> concat (chunk_fuel fuel b xs) = xs.
Proof.
  intros A fuel; induction fuel as [|fuel IH]; intros b xs Hb Hl; simpl.
  - destruct xs; [reflexivity|simpl in Hl; lia].
  - destruct xs as [|x xs']; [reflexivity|].
    simpl concat; rewrite IH; [apply firstn_skipn|exact Hb|].
    rewrite skipn_length; cbn [length] in *; lia.
Qed.

(** Cutting a list into tiles and gluing them back gives the list. *)
Lemma concat_chunk : forall {A} b (xs : list A), concat (chunk b xs) = xs.
Proof.
  intros A b xs; unfold chunk; apply concat_chunk_fuel; lia.
Qed.

(** The streamed row, for any tile size [b], is the two-pass softmax. *)
Theorem stream_row_correct : forall b d keys,
  row_eq (stream_row R_ops b d keys) (two_pass R_ops d keys).
Proof.
  intros b d keys; unfold stream_row.
  rewrite <- (concat_chunk b keys) at 2; apply stream_correct.
Qed.

Lemma Forall2_map_same : forall {A B C} (P : B -> C -> Prop) (f : A -> B) (g : A -> C) l,
  (forall x, In x l -> P (f x) (g x)) -> Forall2 P (map f l) (map g l).
Proof.
  intros A B C P f g l H; induction l as [|x l IH]; simpl; constructor.
  - apply H; left; reflexivity.
  - apply IH; intros y Hy; apply H; right; exact Hy.
Qed.

(** The streamed forward pass of one head agrees, row by row, with the
    two-pass specification (any tile size, any visibility). *)
Theorem attention_forward_correct : forall b d scale visible qs ks vs,
  Forall2 row_eq (attention_forward R_ops b d scale visible qs ks vs)
                 (attention_two_pass R_ops d scale visible qs ks vs).
Proof.
  intros; unfold attention_forward, attention_two_pass.
  apply Forall2_map_same; intros [i q] _; apply stream_row_correct.
Qed.

(** ** With lengths: when every value row has [d] coordinates, the streamed
    row IS the two-pass row ([row_eq_len], i.e. equality of the pairs), not
    only coordinate-wise equal ([row_eq] ignores lengths, VectorFacts.v). *)

Lemma sc_vadd_length : forall (a b : list R),
  length (vadd R_ops a b) = Nat.max (length a) (length b).
Proof.
  induction a as [|x a IH]; intros [|y b]; simpl; try reflexivity.
  rewrite IH; reflexivity.
Qed.

Lemma ws_fold_length : forall d (cs : list (R * list R)) acc,
  (forall wv, In wv cs -> length (snd wv) = d) -> (length acc = d \/ acc = []) ->
  length (fold_left (fun acc wv => vadd R_ops acc (vscale R_ops (fst wv) (snd wv))) cs acc) = d
  \/ (cs = [] /\ fold_left (fun acc wv => vadd R_ops acc (vscale R_ops (fst wv) (snd wv))) cs acc = acc).
Proof.
  intros d; induction cs as [|wv cs IH]; intros acc Hc Ha; [right; split; reflexivity |].
  left; cbn [fold_left].
  assert (Hn : length (vadd R_ops acc (vscale R_ops (fst wv) (snd wv))) = d).
  { rewrite sc_vadd_length; unfold vscale; rewrite map_length, (Hc wv (or_introl eq_refl)).
    destruct Ha as [Ha | ->]; [rewrite Ha; apply Nat.max_id | reflexivity]. }
  destruct (IH (vadd R_ops acc (vscale R_ops (fst wv) (snd wv)))) as [H | [_ H]].
  - intros wv' Hw; apply Hc; right; exact Hw.
  - left; exact Hn.
  - exact H.
  - rewrite H; exact Hn.
Qed.

Lemma in_combine_snd : forall (ws : list R) (vs : list (list R)) wv, In wv (combine ws vs) -> In (snd wv) vs.
Proof. intros ws vs [w v] H; apply in_combine_r in H; exact H. Qed.

Lemma block_step_length : forall d st blk,
  (forall k, In k blk -> length (snd k) = d) ->
  (forall s, st = Some s -> length (st_acc s) = d) ->
  forall s, block_step R_ops st blk = Some s -> length (st_acc s) = d.
Proof.
  intros d st blk Hb Hst s Hs; unfold block_step in Hs.
  destruct (omax R_ops (option_map st_max st) (block_max R_ops blk)) as [m'|] eqn:Em.
  2: { apply Hst, Hs. }
  set (cs := combine (map (key_weight R_ops m') blk) (map snd blk)).
  assert (Hc : forall wv, In wv cs -> length (snd wv) = d).
  { intros wv Hwv; apply in_combine_snd in Hwv; apply in_map_iff in Hwv.
    destruct Hwv as [k [<- Hk]]; apply Hb, Hk. }
  destruct st as [s0|].
  - injection Hs as <-; cbn [st_acc].
    rewrite sc_vadd_length; unfold vscale; rewrite map_length, (Hst s0 eq_refl).
    unfold weighted_sum; fold cs.
    destruct (ws_fold_length d cs [] Hc (or_intror eq_refl)) as [H | [_ H]]; rewrite H;
      [apply Nat.max_id | apply Nat.max_0_r].
  - injection Hs as <-; cbn [st_acc]; unfold weighted_sum; fold cs.
    destruct (ws_fold_length d cs [] Hc (or_intror eq_refl)) as [H | [Hn _]]; [exact H |].
    exfalso; cbn [option_map] in Em; rewrite omax_None_l in Em.
    destruct blk as [|k blk]; [discriminate | discriminate].
Qed.

Lemma stream_fold_length : forall d blocks st,
  (forall k, In k (concat blocks) -> length (snd k) = d) ->
  (forall s, st = Some s -> length (st_acc s) = d) ->
  forall s, fold_left (block_step R_ops) blocks st = Some s -> length (st_acc s) = d.
Proof.
  intros d; induction blocks as [|blk blocks IH]; intros st Hk Hst; [exact Hst |].
  cbn [fold_left]; apply IH.
  - intros k Hin; apply Hk; cbn [concat]; apply in_or_app; right; exact Hin.
  - apply block_step_length; [| exact Hst].
    intros k Hin; apply Hk; cbn [concat]; apply in_or_app; left; exact Hin.
Qed.

Theorem stream_row_correct_len : forall b d keys,
  (forall k, In k keys -> length (snd k) = d) ->
  row_eq_len (stream_row R_ops b d keys) (two_pass R_ops d keys).
Proof.
  intros b d keys Hk; split; [| apply stream_row_correct].
  transitivity d.
  - unfold stream_row, finalize.
    match goal with |- context [match ?x with Some _ => _ | None => _ end] => destruct x as [s|] eqn:Es end.
    + simpl; unfold vdiv; rewrite List.map_length; unfold stream in Es.
      apply (stream_fold_length d (chunk b keys) None); [| discriminate | exact Es].
      rewrite concat_chunk; exact Hk.
    + simpl; try unfold vzero; apply repeat_length.
  - unfold two_pass.
    assert (Hu : forall sv, In sv (unmasked keys) -> length (snd sv) = d).
    { intros sv Hin; unfold unmasked in Hin; apply in_flat_map in Hin.
      destruct Hin as [k [Hk' Hin]]; destruct (fst k) as [s|]; [| destruct Hin].
      destruct Hin as [<- | []]; apply Hk, Hk'. }
    destruct (unmasked keys) as [|[s0 v0] rest] eqn:Eu.
    + cbn [fst]; unfold vzero; symmetry; apply repeat_length.
    + cbn [fst]; unfold weighted_sum.
      match goal with |- context [combine ?ws ?vs] => set (cs := combine ws vs) end.
      assert (Hc : forall wv, In wv cs -> length (snd wv) = d).
      { intros wv Hwv; apply in_combine_snd in Hwv; apply in_map_iff in Hwv.
        destruct Hwv as [k [<- Hk']]; apply Hu, Hk'. }
      destruct (ws_fold_length d cs [] Hc (or_intror eq_refl)) as [H | [Hn _]]; [symmetry; exact H |].
      unfold cs in Hn; cbn [map combine] in Hn; discriminate.
Qed.

(** Hence, with value rows of [d] coordinates, the streamed row equals the two-pass row. *)
Corollary stream_row_eq_two_pass : forall b d keys,
  (forall k, In k keys -> length (snd k) = d) ->
  stream_row R_ops b d keys = two_pass R_ops d keys.
Proof. intros b d keys Hk; apply row_eq_len_iff_eq, stream_row_correct_len, Hk. Qed.
