(** * Masking a key is dropping it (over [R]).

    [masked_keys visible ss vs] keeps every key and gives the masked ones
    the score [None] (the code's -inf).  Here: the two-pass result and the
    streamed result on those keys are the two-pass softmax of the visible
    keys alone, listed by [filter visible] over the key indices; a row with
    no visible key is exactly zeros with lse [None] (-inf), the streaming
    state staying [None] so no division or log happens; and what the
    causal, sliding-window and explicit masks of [visibility] keep. *)

From Coq Require Import Reals List Lra Arith Lia Bool Permutation.
From Ojas Require Import ScalarOps Vector VectorFacts Attention.OnlineSoftmax
  Attention.StreamCorrect.
Import ListNotations.
Open Scope R_scope.

Local Notation rkey := (@key R).

(** ** Structure of [masked_keys] *)

Lemma masked_keys_nil_l : forall {T} visible (vs : list (list T)),
  masked_keys visible [] vs = [].
Proof. reflexivity. Qed.

Lemma masked_keys_nil_r : forall {T} visible (ss : list T),
  masked_keys visible ss [] = [].
Proof. intros T visible [|s ss]; reflexivity. Qed.

Lemma masked_keys_cons : forall {T} visible (s : T) ss v vs,
  masked_keys visible (s :: ss) (v :: vs)
  = @cons (@key T) (if visible 0%nat then Some s else None, v)
      (masked_keys (fun j => visible (S j)) ss vs).
Proof.
  intros T visible s ss v vs; unfold masked_keys; cbn [length seq combine map].
  f_equal; rewrite <- seq_shift, combine_map_l, map_map.
  apply map_ext; intros [j [s' v']]; reflexivity.
Qed.

(** Every key of [masked_keys] is key [j] of the row, masked iff [visible j = false]. *)
Lemma in_masked_keys : forall {T} visible (ss : list T) vs k,
  In k (masked_keys visible ss vs) ->
  exists j, (j < length ss)%nat /\ (visible j = false -> fst k = None).
Proof.
  intros T visible ss vs k H; unfold masked_keys in H.
  apply in_map_iff in H; destruct H as [[j [s v]] [Hk Hin]].
  apply in_combine_l, in_seq in Hin.
  exists j; split; [lia|]; intros Hv; rewrite <- Hk; simpl; rewrite Hv; reflexivity.
Qed.

Lemma filter_map_S : forall (f : nat -> bool) l,
  filter f (map S l) = map S (filter (fun j => f (S j)) l).
Proof.
  intros f l; induction l as [|x l IH]; simpl; [reflexivity|].
  destruct (f (S x)); simpl; rewrite IH; reflexivity.
Qed.

(** The unmasked keys of [masked_keys] are the visible ones, in order. *)
Lemma unmasked_masked_keys : forall {T} (dflt : T) visible (ss : list T) vs,
  length vs = length ss ->
  unmasked (masked_keys visible ss vs)
  = map (fun j => (nth j ss dflt, nth j vs [])) (filter visible (seq 0 (length ss))).
Proof.
  intros T dflt visible ss; revert visible; induction ss as [|s ss IH];
    intros visible [|v vs] Hl; try discriminate; [reflexivity|].
  rewrite masked_keys_cons; cbn [length seq]; rewrite <- seq_shift; cbn [filter].
  simpl in Hl; injection Hl as Hl.
  destruct (visible 0%nat); cbv iota beta;
    [rewrite unmasked_cons_Some, IH by exact Hl|rewrite unmasked_cons_None, IH by exact Hl];
    rewrite filter_map_S; cbn [map]; rewrite map_map; reflexivity.
Qed.

Lemma unmasked_visible : forall {T} (xs : list (T * list T)),
  unmasked (map (fun x => (Some (fst x), snd x)) xs) = xs.
Proof.
  induction xs as [|[s v] xs IH]; [reflexivity|].
  simpl; f_equal; exact IH.
Qed.

(** [two_pass] only sees the unmasked keys. *)
Lemma two_pass_unmasked_eq : forall {T} (o : ScalarOps T) d keys keys',
  unmasked keys = unmasked keys' -> two_pass o d keys = two_pass o d keys'.
Proof. intros T o d keys keys' H; unfold two_pass; rewrite H; reflexivity. Qed.

(** ** Masking is dropping *)

(** The two-pass softmax of a row with masked keys is the two-pass
    softmax of the visible keys alone (the masked ones dropped). *)
Theorem two_pass_masked_keys : forall d visible (ss : list R) vs,
  length vs = length ss ->
  two_pass R_ops d (masked_keys visible ss vs)
  = two_pass R_ops d (map (fun j => (Some (nth j ss 0), nth j vs []))
                          (filter visible (seq 0 (length ss)))).
Proof.
  intros d visible ss vs Hl; apply two_pass_unmasked_eq.
  rewrite (unmasked_masked_keys 0 visible ss vs Hl).
  rewrite <- (unmasked_visible (map (fun j => (nth j ss 0, nth j vs [])) _)), map_map.
  reflexivity.
Qed.

(** The streamed row (any tile size) over masked keys is the two-pass
    softmax of the visible keys alone. *)
Theorem stream_row_masked_keys : forall b d visible (ss : list R) vs,
  length vs = length ss ->
  row_eq (stream_row R_ops b d (masked_keys visible ss vs))
         (two_pass R_ops d (map (fun j => (Some (nth j ss 0), nth j vs []))
                                (filter visible (seq 0 (length ss))))).
Proof.
  intros b d visible ss vs Hl; rewrite <- two_pass_masked_keys by exact Hl.
  apply stream_row_correct.
Qed.

(** ** Fully masked rows *)

Lemma unmasked_all_masked : forall {T} (keys : list (@key T)),
  (forall k, In k keys -> fst k = None) -> unmasked keys = [].
Proof.
  intros T keys H; induction keys as [|[[s|] v] keys IH]; [reflexivity| |].
  - specialize (H _ (or_introl eq_refl)); discriminate.
  - rewrite unmasked_cons_None; apply IH; intros k Hk; apply H; right; exact Hk.
Qed.

Lemma block_max_all_masked : forall keys,
  (forall k, In k keys -> fst k = None) -> block_max R_ops keys = None.
Proof.
  intros keys H; rewrite block_max_unmasked, unmasked_all_masked by exact H.
  reflexivity.
Qed.

(** The streaming state stays empty ([None]: m = -inf, l = 0, acc = 0)
    exactly when every key is masked. *)
Theorem stream_None_iff_masked : forall blocks,
  stream R_ops blocks = None <-> (forall k, In k (concat blocks) -> fst k = None).
Proof.
  intros blocks; pose proof (stream_represents blocks) as H; split.
  - intros E; rewrite E in H; simpl in H; apply block_max_None_masked; exact H.
  - intros Hm; destruct (stream R_ops blocks) as [s|]; [|reflexivity].
    destruct H as (H & _); rewrite block_max_all_masked in H by exact Hm; discriminate.
Qed.

Lemma masked_keys_all_masked : forall {T} visible (ss : list T) vs,
  (forall j, (j < length ss)%nat -> visible j = false) ->
  forall k, In k (masked_keys visible ss vs) -> fst k = None.
Proof.
  intros T visible ss vs H k Hk.
  destruct (in_masked_keys visible ss vs k Hk) as [j [Hj Hf]]; apply Hf, H, Hj.
Qed.

(** A row whose keys are all masked gives exactly zeros and lse [None]
    (-inf) in the two-pass specification. *)
Theorem two_pass_fully_masked : forall d visible (ss : list R) vs,
  (forall j, (j < length ss)%nat -> visible j = false) ->
  two_pass R_ops d (masked_keys visible ss vs) = (vzero R_ops d, None).
Proof.
  intros d visible ss vs H; unfold two_pass.
  rewrite unmasked_all_masked by (apply masked_keys_all_masked; exact H).
  reflexivity.
Qed.

(** A row whose keys are all masked: the streaming state stays [None]
    for every tiling (no division, no log) ... *)
Theorem stream_fully_masked : forall b visible (ss : list R) vs,
  (forall j, (j < length ss)%nat -> visible j = false) ->
  stream R_ops (chunk b (masked_keys visible ss vs)) = None.
Proof.
  intros b visible ss vs H; apply stream_None_iff_masked.
  rewrite concat_chunk; apply masked_keys_all_masked; exact H.
Qed.

(** ... and the streamed row is exactly zeros with lse [None] (-inf). *)
Theorem stream_row_fully_masked : forall b d visible (ss : list R) vs,
  (forall j, (j < length ss)%nat -> visible j = false) ->
  stream_row R_ops b d (masked_keys visible ss vs) = (vzero R_ops d, None).
Proof.
  intros b d visible ss vs H; unfold stream_row.
  rewrite stream_fully_masked by exact H; reflexivity.
Qed.

(** ** What the masks of [visibility] keep *)

(** [visibility] is the conjunction of the requested masks. *)
Theorem visibility_true_iff : forall is_causal window mask i j,
  visibility is_causal window mask i j = true <->
  (is_causal = true -> (j <= i)%nat)
  /\ (forall w, window = Some w -> (i < j + w)%nat /\ (j < i + w)%nat)
  /\ (forall m, mask = Some m -> nth j (nth i m []) false = true).
Proof.
  intros is_causal window mask i j; unfold visibility, causal, in_window, explicit_mask.
  rewrite !andb_true_iff.
  destruct is_causal, window as [w|], mask as [m|];
    rewrite ?Nat.leb_le, ?andb_true_iff, ?Nat.ltb_lt;
    (split; [intros H; repeat split; intros; try congruence;
             repeat match goal with
                    | H : Some _ = Some _ |- _ => injection H as <-
                    end; tauto || lia
            | intros (H1 & H2 & H3)]);
    repeat split;
    try (apply H1; reflexivity); try (apply H3; reflexivity);
    try (destruct (H2 w eq_refl); lia).
Qed.

(** The causal mask keeps key [j] for query [i] iff [j <= i]. *)
Theorem visibility_causal : forall i j,
  visibility true None None i j = true <-> (j <= i)%nat.
Proof.
  intros i j; unfold visibility, causal; rewrite !andb_true_r; apply Nat.leb_le.
Qed.

(** The sliding window of [w] keeps key [j] for query [i] iff |i - j| < w. *)
Theorem visibility_window : forall w i j,
  visibility false (Some w) None i j = true <-> (i < j + w /\ j < i + w)%nat.
Proof.
  intros w i j; unfold visibility, in_window; simpl; rewrite andb_true_r, andb_true_iff,
    !Nat.ltb_lt; lia.
Qed.

(** An explicit boolean mask keeps exactly the entries marked [true]. *)
Theorem visibility_explicit : forall m i j,
  visibility false None (Some m) i j = nth j (nth i m []) false.
Proof. reflexivity. Qed.

Lemma filter_le_seq : forall i n,
  filter (fun j => Nat.leb j i) (seq 0 n) = seq 0 (Nat.min n (S i)).
Proof.
  intros i n; induction n as [|n IH]; [reflexivity|].
  rewrite seq_S, filter_app, IH; cbn [filter Nat.add].
  destruct (Nat.leb_spec n i).
  - replace (Nat.min (S n) (S i)) with (S n) by lia.
    replace (Nat.min n (S i)) with n by lia. rewrite seq_S; reflexivity.
  - replace (Nat.min (S n) (S i)) with (S i) by lia.
    replace (Nat.min n (S i)) with (S i) by lia. apply app_nil_r.
Qed.

(** Under the causal mask, query row [i] keeps keys [0 .. i]. *)
Theorem filter_causal : forall i n,
  filter (visibility true None None i) (seq 0 n) = seq 0 (Nat.min n (S i)).
Proof.
  intros i n; rewrite <- filter_le_seq; apply filter_ext; intros j.
  unfold visibility, causal; rewrite !andb_true_r; reflexivity.
Qed.

(** The streamed causal row [i] is the two-pass softmax of keys [0 .. i]. *)
Theorem stream_row_causal : forall b d i (ss : list R) vs,
  length vs = length ss ->
  row_eq (stream_row R_ops b d (masked_keys (visibility true None None i) ss vs))
         (two_pass R_ops d (map (fun j => (Some (nth j ss 0), nth j vs []))
                                (seq 0 (Nat.min (length ss) (S i))))).
Proof.
  intros b d i ss vs Hl; rewrite <- filter_causal; apply stream_row_masked_keys, Hl.
Qed.
