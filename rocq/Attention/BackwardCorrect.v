(** * Correctness of the attention backward pass over [R].

    For one query row with scores [s_j], value rows [v_j], the forward
    output [o = sum_j P_j v_j] (the two-pass softmax [two_pass]: [P_j =
    exp s_j / Z] on visible keys, [0] on masked ones), the lse saved from
    it and an upstream gradient [dO], the formulas of [Attention/Backward.v]
    are the gradient of the scalar loss [L = dO . o]:

    - [backward_D_identity]: [D = dO . o = sum_j P_j dP_j];
    - [row_dscores_is_derive]: [dL/ds_j] is entry [j] of [row_dscores];
    - [dV_row_is_derive], [dQ_row_is_derive], [dK_row_is_derive]: the
      partial derivatives of [L] in the values, the query and the keys
      (with [s_j = scale * q . k_j]);
    - [attention_backward_dV_is_derive], [attention_backward_dK_is_derive],
      [attention_backward_dQ_is_derive]: for a whole head, the three
      outputs of [attention_backward] are the partial derivatives of
      [attention_loss = sum_i dO_i . o_i];
    - tiling ([weighted_sum_app], [weighted_sum_tiles], [weighted_sum_chunk],
      [attention_backward_split_queries], [attention_backward_query_tiles],
      [attention_backward_dQ_key_tiles]): the sums of the backward pass may
      be accumulated over any partition of the rows into tiles.

    [row_dscores_is_derive_stream] and [attention_backward_forward_eq]
    carry these over to the forward pass the code runs (streamed, tiled:
    [stream_row], [attention_forward]), through [Attention/StreamCorrect.v].

    Vectors are compared coordinate by coordinate ([nth c _ 0]).
    Derivatives are Coquelicot's [is_derive].  Lemmas local to this file
    are prefixed [bw_]. *)

From Coq Require Import Reals List Lra Lia Arith.
From Coquelicot Require Import Coquelicot.
From Ojas Require Import ScalarOps Vector VectorFacts Attention.OnlineSoftmax Attention.Backward
  Attention.StreamCorrect.
Import ListNotations.
Open Scope R_scope.

(** ** Replacing one entry of a list *)

(** [l] with entry [j] replaced by [x] (unchanged if [j] is out of range):
    how a single score, query, key or value coordinate is varied. *)
Fixpoint replace_nth {A} (j : nat) (x : A) (l : list A) : list A :=
  match l, j with
  | [], _ => []
  | _ :: l', O => x :: l'
  | y :: l', S j' => y :: replace_nth j' x l'
  end.

Lemma length_replace_nth : forall {A} j (x : A) l, length (replace_nth j x l) = length l.
Proof.
  intros A j x l; revert j; induction l as [|y l IH]; intros [|j]; simpl; auto.
Qed.

Lemma nth_replace_nth : forall {A} j (x : A) l k d, (j < length l)%nat ->
  nth k (replace_nth j x l) d = if Nat.eqb k j then x else nth k l d.
Proof.
  intros A j x l; revert j; induction l as [|y l IH]; intros [|j] [|k] d H;
    simpl in *; try lia; auto.
  apply IH; lia.
Qed.

(** ** Sums over index lists *)

Lemma bw_rsum_map_minus : forall {A} (f g : A -> R) (l : list A),
  rsum (map (fun x => f x - g x) l) = rsum (map f l) - rsum (map g l).
Proof.
  intros A f g l; induction l as [|x l IH]; cbn [map].
  - unfold rsum; simpl; lra.
  - rewrite !rsum_cons, IH; lra.
Qed.

Lemma bw_rsum_map_scal_r : forall {A} (k : R) (f : A -> R) (l : list A),
  rsum (map (fun x => f x * k) l) = rsum (map f l) * k.
Proof.
  intros A k f l; rewrite (rsum_map_ext _ (fun x => k * f x)) by (intros; ring).
  rewrite rsum_map_scal_l; ring.
Qed.

Lemma bw_rsum_le : forall {A} (f g : A -> R) (l : list A),
  (forall x, In x l -> f x <= g x) -> rsum (map f l) <= rsum (map g l).
Proof.
  intros A f g l; induction l as [|x l IH]; intros H; cbn [map].
  - unfold rsum; simpl; lra.
  - rewrite !rsum_cons.
    assert (f x <= g x) by (apply H; left; reflexivity).
    assert (rsum (map f l) <= rsum (map g l)) by (apply IH; intros; apply H; right; auto).
    lra.
Qed.

Lemma bw_rsum_abs : forall {A} (f : A -> R) (l : list A),
  Rabs (rsum (map f l)) <= rsum (map (fun x => Rabs (f x)) l).
Proof.
  intros A f l; induction l as [|x l IH]; cbn [map].
  - unfold rsum; simpl; rewrite Rabs_R0; lra.
  - rewrite !rsum_cons.
    eapply Rle_trans; [apply Rabs_triang|]; lra.
Qed.

(** Terms outside the filter vanish: the sum over the filtered list. *)
Lemma bw_rsum_filter : forall {A} (vis : A -> bool) (f : A -> R) (l : list A),
  (forall x, In x l -> vis x = false -> f x = 0) ->
  rsum (map f l) = rsum (map f (filter vis l)).
Proof.
  intros A vis f l; induction l as [|x l IH]; intros H; cbn [map filter]; [reflexivity|].
  rewrite rsum_cons, IH by (intros; apply H; auto; right; auto).
  destruct (vis x) eqn:E; cbn [map]; [reflexivity|].
  rewrite H by (simpl; auto); lra.
Qed.

(** A sum with one nonzero term. *)
Lemma bw_rsum_delta : forall (l : list nat) (j : nat) (c : R), NoDup l ->
  rsum (map (fun k => if Nat.eqb k j then c else 0) l) =
  if in_dec Nat.eq_dec j l then c else 0.
Proof.
  induction l as [|k l IH]; intros j c Hnd; cbn [map]; [reflexivity|].
  inversion Hnd as [|k' l' Hk Hnd' E]; subst.
  rewrite rsum_cons, IH by exact Hnd'.
  destruct (in_dec Nat.eq_dec j (k :: l)) as [Hin'|Hin'];
    destruct (in_dec Nat.eq_dec j l) as [Hin|Hin];
    destruct (Nat.eqb_spec k j) as [->|Hne]; try lra.
  all: exfalso; simpl in *; intuition congruence.
Qed.

Lemma bw_rsum_delta_filter : forall (vis : nat -> bool) (n j : nat) (c : R), (j < n)%nat ->
  rsum (map (fun k => if Nat.eqb k j then c else 0) (filter vis (seq 0 n))) =
  if vis j then c else 0.
Proof.
  intros vis n j c Hj.
  rewrite bw_rsum_delta by (apply NoDup_filter, seq_NoDup).
  destruct (in_dec Nat.eq_dec j (filter vis (seq 0 n))) as [Hin|Hin].
  - apply filter_In in Hin; destruct Hin as [_ ->]; reflexivity.
  - destruct (vis j) eqn:E; [|reflexivity].
    exfalso; apply Hin, filter_In; split; [apply in_seq; lia | exact E].
Qed.

(** ** Lists as maps over their indices *)

Lemma bw_map_seq_shift : forall {A} (f : nat -> A) st n,
  map f (seq (S st) n) = map (fun k => f (S k)) (seq st n).
Proof.
  intros A f st n; rewrite <- seq_shift, map_map; reflexivity.
Qed.

Lemma bw_list_as_map : forall {A} (l : list A) (d : A),
  l = map (fun k => nth k l d) (seq 0 (length l)).
Proof.
  intros A l d; induction l as [|x l IH]; simpl; [reflexivity|].
  rewrite bw_map_seq_shift; simpl; rewrite <- IH; reflexivity.
Qed.

Lemma bw_combine_as_map : forall {A B} (l1 : list A) (l2 : list B) d1 d2 n,
  length l1 = n -> length l2 = n ->
  combine l1 l2 = map (fun k => (nth k l1 d1, nth k l2 d2)) (seq 0 n).
Proof.
  intros A B l1 l2 d1 d2 n H1 H2.
  rewrite (bw_list_as_map l1 d1) at 1; rewrite (bw_list_as_map l2 d2) at 1.
  rewrite H1, H2, combine_map_map; reflexivity.
Qed.

Lemma bw_nth_map_seq : forall {A} (f : nat -> A) n k d, (k < n)%nat ->
  nth k (map f (seq 0 n)) d = f k.
Proof.
  intros A f n k d Hk.
  rewrite (nth_indep _ d (f 0%nat)) by (rewrite map_length, seq_length; exact Hk).
  rewrite map_nth, seq_nth by exact Hk; reflexivity.
Qed.

Lemma bw_nth_map_lt : forall {A B} (f : A -> B) l k d d', (k < length l)%nat ->
  nth k (map f l) d = f (nth k l d').
Proof.
  intros A B f l k d d' Hk.
  rewrite (nth_indep _ d (f d')) by (rewrite map_length; exact Hk).
  apply map_nth.
Qed.

(** ** Linear functionals on vectors *)

Definition bw_linear (phi : list R -> R) : Prop :=
  (forall x y, phi (vadd R_ops x y) = phi x + phi y) /\
  (forall k x, phi (vscale R_ops k x) = k * phi x) /\
  phi [] = 0.

Lemma bw_linear_fold : forall phi, bw_linear phi -> forall wvs acc,
  phi (fold_left (fun acc wv => vadd R_ops acc (vscale R_ops (fst wv) (snd wv))) wvs acc)
  = phi acc + rsum (map (fun wv => fst wv * phi (snd wv)) wvs).
Proof.
  intros phi [Hadd [Hscal Hnil]]; induction wvs as [|wv wvs IH]; intros acc;
    cbn [fold_left map].
  - unfold rsum; simpl; lra.
  - rewrite IH, Hadd, Hscal, rsum_cons; lra.
Qed.

Lemma bw_linear_weighted_sum : forall phi, bw_linear phi -> forall ws vs,
  phi (weighted_sum R_ops ws vs) = rsum (map (fun wv => fst wv * phi (snd wv)) (combine ws vs)).
Proof.
  intros phi Hl ws vs; unfold weighted_sum; rewrite (bw_linear_fold phi Hl).
  destruct Hl as [_ [_ Hnil]]; rewrite Hnil; lra.
Qed.

Lemma bw_linear_vzero : forall phi, bw_linear phi -> forall d, phi (vzero R_ops d) = 0.
Proof.
  intros phi [_ [Hscal _]] d.
  assert (E : vzero R_ops d = vscale R_ops 0 (vzero R_ops d)).
  { unfold vzero, vscale; simpl; induction d as [|d IH]; simpl; [reflexivity|].
    rewrite <- IH, Rmult_0_l; reflexivity. }
  rewrite E, Hscal; ring.
Qed.

Lemma bw_linear_nth : forall c, bw_linear (fun x => nth c x 0).
Proof.
  intros c; split; [|split].
  - intros x y; apply nth_vadd.
  - intros k x; apply nth_vscale.
  - destruct c; reflexivity.
Qed.

Lemma bw_dot_nil_r : forall a, dot R_ops a [] = 0.
Proof. intros [|x a]; reflexivity. Qed.

Lemma bw_dot_vadd_r : forall a x y,
  dot R_ops a (vadd R_ops x y) = dot R_ops a x + dot R_ops a y.
Proof.
  induction a as [|z a IH]; intros x y; simpl; [lra|].
  destruct x as [|x0 x]; destruct y as [|y0 y]; simpl; try lra.
  rewrite IH; lra.
Qed.

Lemma bw_dot_vscale_r : forall a k x,
  dot R_ops a (vscale R_ops k x) = k * dot R_ops a x.
Proof.
  induction a as [|z a IH]; intros k x; simpl; [lra|].
  destruct x as [|x0 x]; simpl; [lra|].
  rewrite IH; lra.
Qed.

Lemma bw_linear_dot : forall a, bw_linear (dot R_ops a).
Proof.
  intros a; split; [|split].
  - apply bw_dot_vadd_r.
  - apply bw_dot_vscale_r.
  - apply bw_dot_nil_r.
Qed.

(** Changing one coordinate of either argument of a dot product. *)
Lemma bw_dot_replace_nth_r : forall a b c y, (c < length b)%nat ->
  dot R_ops a (replace_nth c y b) = dot R_ops a b + nth c a 0 * (y - nth c b 0).
Proof.
  intros a b; revert a; induction b as [|z b IH]; intros a c y Hc; simpl in Hc; [lia|].
  destruct a as [|x a]; destruct c as [|c]; simpl.
  - destruct b; lra.
  - destruct (replace_nth c y b); lra.
  - destruct b; lra.
  - rewrite IH by lia; lra.
Qed.

Lemma bw_dot_replace_nth_l : forall a b c y, (c < length a)%nat ->
  dot R_ops (replace_nth c y a) b = dot R_ops a b + (y - nth c a 0) * nth c b 0.
Proof.
  induction a as [|z a IH]; intros b c y Hc; simpl in Hc; [lia|].
  destruct b as [|x b]; destruct c as [|c]; simpl.
  - destruct a; lra.
  - destruct (replace_nth c y a); lra.
  - destruct a; lra.
  - rewrite IH by lia; lra.
Qed.

Lemma bw_rsum_exp_pos : forall {A} (f : A -> R) (x : A) (l : list A),
  0 < rsum (map (fun k => exp (f k)) (x :: l)).
Proof.
  intros A f x l; apply (rsum_pos _ (exp (f x))).
  - intros y Hy; apply in_map_iff in Hy; destruct Hy as [k [<- _]].
    apply Rlt_le, exp_pos.
  - left; reflexivity.
  - apply exp_pos.
Qed.

(** two_pass on a nonempty list of unmasked keys: the output is
    [sum_k exp s_k v_k / sum_k exp s_k] and the lse is [ln (sum_k exp s_k)],
    whatever the max [M] used for stability. *)
Lemma bw_two_pass_cons : forall d K s0 v0 ks,
  unmasked K = (s0, v0) :: ks ->
  (forall phi, bw_linear phi ->
     phi (fst (two_pass R_ops d K)) =
     rsum (map (fun k => exp (fst k) * phi (snd k)) ((s0, v0) :: ks)) /
     rsum (map (fun k => exp (fst k)) ((s0, v0) :: ks))) /\
  snd (two_pass R_ops d K) = Some (ln (rsum (map (fun k => exp (fst k)) ((s0, v0) :: ks)))).
Proof.
  intros d K s0 v0 ks HK.
  unfold two_pass; rewrite HK.
  set (U := (s0, v0) :: ks).
  set (M := list_max R_ops s0 (map fst U)).
  cbv zeta. cbn [fst snd sc_exp sc_sub sc_div sc_add sc_ln R_ops].
  rewrite sc_sum_R, map_map.
  set (Z := rsum (map (fun k => exp (fst k)) U)).
  assert (HZ : 0 < Z) by apply bw_rsum_exp_pos.
  assert (HZM : rsum (map (fun x => exp (fst x - M)) U) = exp (- M) * Z).
  { unfold Z; rewrite <- rsum_map_scal_l; apply rsum_map_ext; intros k _.
    unfold Rminus; rewrite exp_plus; ring. }
  rewrite HZM.
  assert (HeM : 0 < exp (- M)) by apply exp_pos.
  split.
  - intros phi Hl.
    rewrite (bw_linear_weighted_sum phi Hl), combine_map_map, map_map; cbn [fst snd].
    rewrite (rsum_map_ext _ (fun k => exp (- M) / (exp (- M) * Z) * (exp (fst k) * phi (snd k))))
      by (intros k _; unfold Rminus; rewrite exp_plus; field; lra).
    rewrite rsum_map_scal_l; field; lra.
  - f_equal. rewrite ln_mult by lra. rewrite ln_exp; ring.
Qed.

(** The keys of one query row, as a map over the key indices. *)
Lemma bw_combine_map_r : forall {A B} (g : A -> B) (l : list A),
  combine l (map g l) = map (fun k => (k, g k)) l.
Proof.
  intros A B g l; induction l as [|x l IH]; simpl; [reflexivity|]; rewrite IH; reflexivity.
Qed.

Lemma bw_masked_keys_map : forall (vis : nat -> bool) (ss : list R) (vs : list (list R)),
  length vs = length ss ->
  masked_keys vis ss vs =
  map (fun k => (if vis k then Some (nth k ss 0) else None, nth k vs [])) (seq 0 (length ss)).
Proof.
  intros vis ss vs H; unfold masked_keys.
  rewrite (bw_combine_as_map ss vs 0 [] (length ss)) by auto.
  rewrite bw_combine_map_r, map_map; reflexivity.
Qed.

Lemma bw_unmasked_map : forall (vis : nat -> bool) (S : nat -> R) (V : nat -> list R) l,
  unmasked (map (fun k => (if vis k then Some (S k) else None, V k)) l) =
  map (fun k => (S k, V k)) (filter vis l).
Proof.
  intros vis S V l; induction l as [|k l IH]; [reflexivity|].
  unfold unmasked in *; simpl; destruct (vis k); simpl; rewrite IH; reflexivity.
Qed.

(** ** The two-pass forward pass, indexed by keys *)

Section Index.
Variables (d : nat) (vis : nat -> bool) (ss : list R) (vs : list (list R)).
Hypothesis Hlen : length vs = length ss.

Let n := length ss.
Let idx := filter vis (seq 0 n).
Let Z := rsum (map (fun k => exp (nth k ss 0)) idx).
Let K := masked_keys vis ss vs.

Lemma bw_unmasked_index :
  unmasked K = map (fun k => (nth k ss 0, nth k vs [])) idx.
Proof. unfold K; rewrite bw_masked_keys_map by exact Hlen; apply bw_unmasked_map. Qed.

Lemma bw_two_pass_index : forall phi, bw_linear phi ->
  phi (fst (two_pass R_ops d K)) =
  rsum (map (fun k => exp (nth k ss 0) * phi (nth k vs [])) idx) / Z.
Proof.
  intros phi Hl; pose proof bw_unmasked_index as HU.
  unfold Z; destruct idx as [|k0 idx'] eqn:E.
  - unfold two_pass; rewrite HU; simpl.
    rewrite (bw_linear_vzero phi Hl); unfold rsum; simpl; unfold Rdiv; ring.
  - simpl in HU. destruct (bw_two_pass_cons d K _ _ _ HU) as [H _].
    rewrite (H phi Hl); cbn [map fst snd]; rewrite !map_map; reflexivity.
Qed.

Lemma bw_lse_index : idx <> [] -> snd (two_pass R_ops d K) = Some (ln Z).
Proof.
  intros Hne; pose proof bw_unmasked_index as HU.
  unfold Z; destruct idx as [|k0 idx'] eqn:E; [congruence|].
  simpl in HU. destruct (bw_two_pass_cons d K _ _ _ HU) as [_ H].
  rewrite H; cbn [map fst snd]; rewrite !map_map; reflexivity.
Qed.

Lemma bw_Z_pos : idx <> [] -> 0 < Z.
Proof. intros Hne; unfold Z; destruct idx; [congruence|]; apply bw_rsum_exp_pos. Qed.

Lemma bw_in_idx : forall j, (j < n)%nat -> vis j = true -> In j idx.
Proof. intros j Hj Hv; apply filter_In; split; [apply in_seq; lia | exact Hv]. Qed.

Lemma bw_length_row_probs : forall lse, length (row_probs R_ops K lse) = n.
Proof.
  intros lse; unfold row_probs, K; rewrite map_length, bw_masked_keys_map by exact Hlen.
  rewrite map_length, seq_length; reflexivity.
Qed.

(** Entry [j] of the recomputed P row. *)
Lemma bw_row_probs_index : forall j, (j < n)%nat ->
  nth j (row_probs R_ops K (snd (two_pass R_ops d K))) 0 =
  if vis j then exp (nth j ss 0) / Z else 0.
Proof.
  intros j Hj; unfold row_probs.
  assert (HK : K = map (fun k => (if vis k then Some (nth k ss 0) else None, nth k vs []))
                       (seq 0 n)) by (apply bw_masked_keys_map; exact Hlen).
  rewrite HK at 1; rewrite map_map, bw_nth_map_seq by exact Hj; cbn [fst].
  destruct (vis j) eqn:Ev; [|reflexivity].
  assert (Hne : idx <> []).
  { intros E; pose proof (bw_in_idx j Hj Ev) as Hin; rewrite E in Hin; destruct Hin. }
  rewrite (bw_lse_index Hne); cbn [sc_exp sc_sub R_ops].
  pose proof (bw_Z_pos Hne).
  unfold Rminus; rewrite exp_plus, exp_Ropp, exp_ln by lra; unfold Rdiv; reflexivity.
Qed.

End Index.

(** ** Derivatives *)

Lemma bw_is_derive_eq : forall (f : R -> R) (x l l' : R), is_derive f x l -> l = l' -> is_derive f x l'.
Proof. intros f x l l' H <-; exact H. Qed.

Lemma bw_is_derive_rsum : forall (l : list nat) (F : nat -> R -> R) (F' : nat -> R) (x0 : R),
  (forall k, In k l -> is_derive (F k) x0 (F' k)) ->
  is_derive (fun x => rsum (map (fun k => F k x) l)) x0 (rsum (map F' l)).
Proof.
  induction l as [|k l IH]; intros F F' x0 H; cbn [map].
  - apply (is_derive_const 0).
  - apply (is_derive_plus (F k) (fun x => rsum (map (fun k => F k x) l))).
    + apply H; left; reflexivity.
    + apply IH; intros; apply H; right; assumption.
Qed.

Lemma bw_is_derive_exp_mul : forall (s a : R -> R) (s' a' x0 : R),
  is_derive s x0 s' -> is_derive a x0 a' ->
  is_derive (fun x => exp (s x) * a x) x0 (s' * exp (s x0) * a x0 + exp (s x0) * a' ).
Proof.
  intros s a s' a' x0 Hs Ha.
  eapply bw_is_derive_eq.
  - apply (Derive.is_derive_mult (fun x => exp (s x)) a); [|exact Ha].
    apply (is_derive_comp exp s); [apply is_derive_exp | exact Hs].
  - change (scal s' (exp (s x0))) with (s' * exp (s x0)); ring.
Qed.

(** The derivative of a softmax-weighted average [sum_k exp s_k a_k / sum_k exp s_k]
    whose scores and values depend on a parameter. *)
Lemma bw_is_derive_softmax : forall (idx : list nat) (s a : nat -> R -> R) (s' a' : nat -> R) (x0 : R),
  (forall k, In k idx -> is_derive (s k) x0 (s' k)) ->
  (forall k, In k idx -> is_derive (a k) x0 (a' k)) ->
  let N x := rsum (map (fun k => exp (s k x) * a k x) idx) in
  let Z x := rsum (map (fun k => exp (s k x)) idx) in
  is_derive (fun x => N x / Z x) x0
    (rsum (map (fun k => exp (s k x0) / Z x0 * (s' k * (a k x0 - N x0 / Z x0) + a' k)) idx)).
Proof.
  intros idx s a s' a' x0 Hs Ha.
  destruct idx as [|k0 idx'] eqn:E; intros N Z.
  - eapply is_derive_ext; [|apply (is_derive_const 0)].
    intros t; unfold N, Z; cbn; unfold rsum; simpl; unfold Rdiv; ring.
  - assert (HZ : 0 < Z x0) by (unfold Z; apply bw_rsum_exp_pos).
    eapply bw_is_derive_eq.
    + apply is_derive_div; [| |lra].
      * apply (bw_is_derive_rsum (k0 :: idx') (fun k x => exp (s k x) * a k x)
                 (fun k => s' k * exp (s k x0) * a k x0 + exp (s k x0) * a' k)).
        intros k Hk; apply bw_is_derive_exp_mul; auto.
      * apply (bw_is_derive_rsum (k0 :: idx') (fun k x => exp (s k x)) (fun k => s' k * exp (s k x0))).
        intros k Hk; eapply bw_is_derive_eq.
        -- apply (is_derive_comp exp (s k)); [apply is_derive_exp | apply Hs; exact Hk].
        -- reflexivity.
    + rewrite (rsum_map_ext
          (fun k => exp (s k x0) / Z x0 * (s' k * (a k x0 - N x0 / Z x0) + a' k)) (fun k =>
          / Z x0 * (s' k * exp (s k x0) * a k x0 + exp (s k x0) * a' k)
          - N x0 / (Z x0 * Z x0) * (s' k * exp (s k x0))))
        by (intros k _; field; lra).
      rewrite bw_rsum_map_minus, !rsum_map_scal_l.
      fold (N x0) (Z x0). field; lra.
Qed.

(** Sums against the recomputed P row: P_k = exp s_k / Z on visible keys, 0 elsewhere. *)
Lemma bw_rsum_probs : forall d vis (ss : list R) (vs : list (list R)) (g : nat -> R),
  length vs = length ss ->
  let K := masked_keys vis ss vs in
  let p := row_probs R_ops K (snd (two_pass R_ops d K)) in
  let idx := filter vis (seq 0 (length ss)) in
  rsum (map (fun k => nth k p 0 * g k) (seq 0 (length ss))) =
  rsum (map (fun k => exp (nth k ss 0) * g k) idx) /
  rsum (map (fun k => exp (nth k ss 0)) idx).
Proof.
  intros d vis ss vs g Hlen K p idx.
  rewrite (bw_rsum_filter vis).
  2:{ intros k Hk Hv; apply in_seq in Hk.
      unfold p, K; rewrite bw_row_probs_index, Hv by (auto; lia); ring. }
  rewrite <- rsum_map_div; apply rsum_map_ext; intros k Hk.
  apply filter_In in Hk; destruct Hk as [Hk Hv]; apply in_seq in Hk.
  unfold p, K; rewrite bw_row_probs_index, Hv by (auto; lia).
  fold idx; unfold Rdiv; ring.
Qed.

(** Theorem 1, general form: [dO . (sum_j w_j v_j) = sum_j w_j (dO . v_j)]. *)
Theorem dot_weighted_sum : forall a ws vs,
  dot R_ops a (weighted_sum R_ops ws vs) =
  rsum (map (fun wv => fst wv * dot R_ops a (snd wv)) (combine ws vs)).
Proof. intros a; apply bw_linear_weighted_sum, bw_linear_dot. Qed.

(** Theorem 1, for one query row of the code: [D = dO . o] equals
    [sum_j P_j dP_j] with [dP_j = dO . v_j] and [P] the row the backward
    pass recomputes from the saved lse. *)
Theorem backward_D_identity : forall d vis (ss : list R) vs dO,
  length vs = length ss ->
  let K := masked_keys vis ss vs in
  let fw := two_pass R_ops d K in
  let p := row_probs R_ops K (snd fw) in
  dot R_ops dO (fst fw) =
  rsum (map (fun pv => fst pv * dot R_ops dO (snd pv)) (combine p vs)).
Proof.
  intros d vis ss vs dO Hlen K fw p.
  unfold fw, K; rewrite (bw_two_pass_index d vis ss vs Hlen _ (bw_linear_dot dO)).
  rewrite (bw_combine_as_map p vs 0 [] (length ss)) by
    (unfold p, K; rewrite ?bw_length_row_probs; auto).
  rewrite map_map; cbn [fst snd].
  unfold p, fw, K; rewrite bw_rsum_probs by exact Hlen; reflexivity.
Qed.

Lemma bw_nth_row_dscores : forall p vs dO out j,
  length p = length vs -> (j < length p)%nat ->
  nth j (row_dscores R_ops p vs dO out) 0 =
  nth j p 0 * (dot R_ops dO (nth j vs []) - dot R_ops dO out).
Proof.
  intros p vs dO out j Hl Hj; unfold row_dscores.
  rewrite (bw_nth_map_lt _ _ _ _ (0, [])) by (rewrite combine_length; lia).
  rewrite combine_nth by exact Hl; reflexivity.
Qed.

(** Theorem 2: the entry [dS_j = P_j (dP_j - D)] of [row_dscores] is the
    derivative of [L(s) = dO . softmax(s) V] with respect to the score [s_j]. *)
Theorem row_dscores_is_derive : forall d vis (ss : list R) vs dO j,
  length vs = length ss -> (j < length ss)%nat ->
  let K := masked_keys vis ss vs in
  let fw := two_pass R_ops d K in
  let p := row_probs R_ops K (snd fw) in
  is_derive
    (fun x : R => dot R_ops dO (fst (two_pass R_ops d (masked_keys vis (replace_nth j x ss) vs))))
    (nth j ss 0)
    (nth j (row_dscores R_ops p vs dO (fst fw)) 0).
Proof.
  intros d vis ss vs dO j Hlen Hj K fw p.
  set (n := length ss). set (idx := filter vis (seq 0 n)).
  set (s := fun k x => if Nat.eqb k j then x else nth k ss 0).
  set (a := fun k (x : R) => dot R_ops dO (nth k vs [])).
  set (s' := fun k => if Nat.eqb k j then 1 else 0).
  assert (Hs0 : forall k, s k (nth j ss 0) = nth k ss 0)
    by (intros k; unfold s; destruct (Nat.eqb_spec k j); subst; reflexivity).
  apply (is_derive_ext (fun x => rsum (map (fun k => exp (s k x) * a k x) idx) /
                                 rsum (map (fun k => exp (s k x)) idx))).
  { intros x; cbv beta.
    assert (Hl' : length vs = length (@replace_nth R j x ss)) by (rewrite length_replace_nth; auto).
    rewrite (bw_two_pass_index d vis _ vs Hl' _ (bw_linear_dot dO)), length_replace_nth.
    f_equal; apply rsum_map_ext; intros k _; unfold s;
      rewrite nth_replace_nth by exact Hj; reflexivity. }
  eapply bw_is_derive_eq.
  { apply (bw_is_derive_softmax idx s a s' (fun _ => 0)).
    - intros k _; unfold s, s'; destruct (Nat.eqb k j).
      + eapply bw_is_derive_eq; [apply is_derive_id | reflexivity].
      + eapply bw_is_derive_eq; [apply is_derive_const | reflexivity].
    - intros k _; eapply bw_is_derive_eq; [apply is_derive_const | reflexivity]. }
  cbv beta.
  set (Z := rsum (map (fun k => exp (nth k ss 0)) idx)).
  set (N := rsum (map (fun k => exp (nth k ss 0) * a k 0) idx)).
  assert (HZ : rsum (map (fun k => exp (s k (nth j ss 0))) idx) = Z)
    by (apply rsum_map_ext; intros k _; rewrite Hs0; reflexivity).
  assert (HN : rsum (map (fun k => exp (s k (nth j ss 0)) * a k (nth j ss 0)) idx) = N)
    by (apply rsum_map_ext; intros k _; rewrite Hs0; reflexivity).
  rewrite HZ, HN.
  rewrite (rsum_map_ext _ (fun k => if Nat.eqb k j
                                    then exp (nth j ss 0) / Z * (a j 0 - N / Z) else 0)).
  2:{ intros k _; rewrite Hs0; unfold s', a; destruct (Nat.eqb_spec k j); [subst|]; ring. }
  unfold idx; rewrite bw_rsum_delta_filter by exact Hj.
  assert (Hlp : length p = n) by (unfold p, K; apply bw_length_row_probs; exact Hlen).
  rewrite bw_nth_row_dscores by lia.
  unfold p, fw, K; rewrite bw_row_probs_index by auto.
  rewrite (bw_two_pass_index d vis ss vs Hlen _ (bw_linear_dot dO)).
  fold n idx Z. destruct (vis j); [|ring].
  unfold N, a; ring.
Qed.

(** The loss of one row as a function of a parameter [x] on which the scores
    and the value rows depend: its derivative. *)
Lemma bw_is_derive_row : forall d vis n (ssx : R -> list R) (vsx : R -> list (list R)) dO
    (s a : nat -> R -> R) (s' a' : nat -> R) (x0 : R),
  (forall x, length (ssx x) = n) -> (forall x, length (vsx x) = n) ->
  (forall x k, (k < n)%nat -> nth k (ssx x) 0 = s k x) ->
  (forall x k, (k < n)%nat -> dot R_ops dO (nth k (vsx x) []) = a k x) ->
  (forall k, (k < n)%nat -> is_derive (s k) x0 (s' k)) ->
  (forall k, (k < n)%nat -> is_derive (a k) x0 (a' k)) ->
  let idx := filter vis (seq 0 n) in
  let N := rsum (map (fun k => exp (s k x0) * a k x0) idx) in
  let Z := rsum (map (fun k => exp (s k x0)) idx) in
  is_derive (fun x : R => dot R_ops dO (fst (two_pass R_ops d (masked_keys vis (ssx x) (vsx x)))))
    x0 (rsum (map (fun k => exp (s k x0) / Z * (s' k * (a k x0 - N / Z) + a' k)) idx)).
Proof.
  intros d vis n ssx vsx dO s a s' a' x0 Hls Hlv Hs Ha Hds Hda idx N Z.
  apply (is_derive_ext (fun x => rsum (map (fun k => exp (s k x) * a k x) idx) /
                                 rsum (map (fun k => exp (s k x)) idx))).
  { intros x; cbv beta.
    assert (Hl : length (vsx x) = length (ssx x)) by (rewrite Hls, Hlv; reflexivity).
    rewrite (bw_two_pass_index d vis _ _ Hl _ (bw_linear_dot dO)), Hls.
    f_equal; apply rsum_map_ext; intros k Hk; apply filter_In in Hk;
      destruct Hk as [Hk _]; apply in_seq in Hk;
      rewrite Hs by lia; [rewrite Ha by lia|]; reflexivity. }
  apply (bw_is_derive_softmax idx s a s' a' x0);
    intros k Hk; apply filter_In in Hk; destruct Hk as [Hk _]; apply in_seq in Hk;
    [apply Hds | apply Hda]; lia.
Qed.

Lemma bw_nth_scores : forall scale q ks k, (k < length ks)%nat ->
  nth k (scores R_ops scale q ks) 0 = scale * dot R_ops q (nth k ks []).
Proof.
  intros scale q ks k Hk; unfold scores.
  rewrite (bw_nth_map_lt _ _ _ _ []) by exact Hk; reflexivity.
Qed.

Lemma bw_length_scores : forall scale q ks, length (scores R_ops scale q ks) = length ks.
Proof. intros; unfold scores; apply map_length. Qed.

Lemma bw_is_derive_const : forall b x0 : R, is_derive (fun _ : R => b) x0 0.
Proof. intros b x0; apply (is_derive_const b). Qed.

Lemma bw_is_derive_affine : forall (b c x0 : R),
  is_derive (fun x : R => b + c * (x - x0)) x0 c.
Proof.
  intros b c x0; eapply bw_is_derive_eq.
  - apply (is_derive_plus (fun _ : R => b) (fun x : R => c * (x - x0))).
    + apply is_derive_const.
    + apply is_derive_scal.
      apply (is_derive_minus (fun x : R => x) (fun _ : R => x0)).
      * apply is_derive_id.
      * apply is_derive_const.
  - change (0 + c * (1 - 0) = c); ring.
Qed.

(** Theorem 3 (values): the derivative of [L] in coordinate [c] of the value
    row [v_j] is [P_j * dO_c], row [i]'s term of [dV_j = sum_i P_ij dO_i]. *)
Theorem dV_row_is_derive : forall d vis (ss : list R) vs dO j c,
  length vs = length ss -> (j < length ss)%nat -> (c < length (nth j vs []))%nat ->
  let K := masked_keys vis ss vs in
  let p := row_probs R_ops K (snd (two_pass R_ops d K)) in
  is_derive
    (fun y : R => dot R_ops dO
       (fst (two_pass R_ops d (masked_keys vis ss (replace_nth j (replace_nth c y (nth j vs [])) vs)))))
    (nth c (nth j vs []) 0)
    (nth j p 0 * nth c dO 0).
Proof.
  intros d vis ss vs dO j c Hlen Hj Hc K p.
  set (vj := nth j vs []).
  eapply bw_is_derive_eq.
  { apply (bw_is_derive_row d vis (length ss) (fun _ => ss)
             (fun y => replace_nth j (replace_nth c y vj) vs) dO
             (fun k _ => nth k ss 0)
             (fun k y => dot R_ops dO (nth k vs []) +
                         (if Nat.eqb k j then nth c dO 0 else 0) * (y - nth c vj 0))
             (fun _ => 0) (fun k => if Nat.eqb k j then nth c dO 0 else 0)).
    - reflexivity.
    - intros y; rewrite length_replace_nth; exact Hlen.
    - reflexivity.
    - intros y k Hk; rewrite nth_replace_nth by lia.
      destruct (Nat.eqb_spec k j) as [->|Hne].
      + rewrite bw_dot_replace_nth_r by exact Hc; fold vj; ring.
      + ring.
    - intros k _; apply bw_is_derive_const.
    - intros k _; apply bw_is_derive_affine. }
  cbv beta.
  rewrite (rsum_map_ext _ (fun k => if Nat.eqb k j
              then exp (nth j ss 0) / rsum (map (fun k => exp (nth k ss 0))
                                               (filter vis (seq 0 (length ss)))) * nth c dO 0
              else 0)).
  2:{ intros k _; destruct (Nat.eqb_spec k j); [subst|]; ring. }
  rewrite bw_rsum_delta_filter by exact Hj.
  unfold p, K; rewrite bw_row_probs_index by auto.
  destruct (vis j); ring.
Qed.

(** Theorem 3 (query): the derivative of [L] in coordinate [c] of the query
    [q] is coordinate [c] of the code's [dQ] row [scale * sum_j dS_j k_j]. *)
Theorem dQ_row_is_derive : forall d vis scale q (ks vs : list (list R)) dO c,
  length vs = length ks -> (c < length q)%nat ->
  let K := masked_keys vis (scores R_ops scale q ks) vs in
  let fw := two_pass R_ops d K in
  let p := row_probs R_ops K (snd fw) in
  is_derive
    (fun x : R => dot R_ops dO
       (fst (two_pass R_ops d (masked_keys vis (scores R_ops scale (replace_nth c x q) ks) vs))))
    (nth c q 0)
    (nth c (vscale R_ops scale (weighted_sum R_ops (row_dscores R_ops p vs dO (fst fw)) ks)) 0).
Proof.
  intros d vis scale q ks vs dO c Hlen Hc K fw p.
  set (n := length ks). set (idx := filter vis (seq 0 n)).
  set (S := fun k => scale * dot R_ops q (nth k ks [])).
  set (A := fun k => dot R_ops dO (nth k vs [])).
  set (G := fun k => scale * nth c (nth k ks []) 0).
  eapply bw_is_derive_eq.
  { apply (bw_is_derive_row d vis n (fun x => scores R_ops scale (replace_nth c x q) ks)
             (fun _ => vs) dO
             (fun k x => S k + G k * (x - nth c q 0)) (fun k _ => A k) G (fun _ => 0)).
    - intros x; apply bw_length_scores.
    - intros x; exact Hlen.
    - intros x k Hk; rewrite bw_nth_scores by exact Hk.
      rewrite bw_dot_replace_nth_l by exact Hc; unfold S, G; ring.
    - reflexivity.
    - intros k _; apply bw_is_derive_affine.
    - intros k _; apply bw_is_derive_const. }
  cbv beta. fold idx.
  assert (HS : forall k, S k + G k * (nth c q 0 - nth c q 0) = S k) by (intros; ring).
  set (Z := rsum (map (fun k => exp (S k)) idx)).
  set (N := rsum (map (fun k => exp (S k) * A k) idx)).
  assert (HZ : rsum (map (fun k => exp (S k + G k * (nth c q 0 - nth c q 0))) idx) = Z)
    by (apply rsum_map_ext; intros k _; rewrite HS; reflexivity).
  assert (HN : rsum (map (fun k => exp (S k + G k * (nth c q 0 - nth c q 0)) * A k) idx) = N)
    by (apply rsum_map_ext; intros k _; rewrite HS; reflexivity).
  rewrite HZ, HN.
  rewrite (rsum_map_ext _ (fun k => scale * (exp (S k) * ((A k - N / Z) * nth c (nth k ks []) 0) / Z)))
    by (intros k _; rewrite HS; unfold G; unfold Rdiv; ring).
  rewrite rsum_map_scal_l, rsum_map_div.
  (* right-hand side *)
  assert (HlenS : length vs = length (scores R_ops scale q ks)) by (rewrite bw_length_scores; auto).
  assert (Hlp : length p = n)
    by (unfold p, fw, K; rewrite bw_length_row_probs by exact HlenS; apply bw_length_scores).
  assert (Hld : length (row_dscores R_ops p vs dO (fst fw)) = n)
    by (unfold row_dscores; rewrite map_length, combine_length; lia).
  rewrite nth_vscale, nth_weighted_sum.
  rewrite (bw_combine_as_map _ ks 0 [] n) by auto.
  rewrite map_map; cbn [fst snd].
  rewrite (rsum_map_ext
    (fun k => nth k (row_dscores R_ops p vs dO (fst fw)) 0 * nth c (nth k ks []) 0)
    (fun k => nth k p 0 * ((A k - dot R_ops dO (fst fw)) * nth c (nth k ks []) 0))).
  2:{ intros k Hk; apply in_seq in Hk; rewrite bw_nth_row_dscores by lia; unfold A; ring. }
  unfold n; rewrite <- (bw_length_scores scale q ks).
  unfold p, fw, K; rewrite (bw_rsum_probs d vis _ vs _ HlenS).
  rewrite (bw_two_pass_index d vis _ vs HlenS _ (bw_linear_dot dO)).
  rewrite bw_length_scores; fold n idx.
  assert (Hsc : forall k, In k idx -> nth k (scores R_ops scale q ks) 0 = S k).
  { intros k Hk; apply filter_In in Hk; destruct Hk as [Hk _]; apply in_seq in Hk.
    apply bw_nth_scores; lia. }
  rewrite (rsum_map_ext (fun k => exp (nth k (scores R_ops scale q ks) 0)) (fun k => exp (S k)))
    by (intros k Hk; rewrite Hsc; auto).
  fold Z.
  rewrite (rsum_map_ext (fun k => exp (nth k (scores R_ops scale q ks) 0) * A k) (fun k => exp (S k) * A k))
    by (intros k Hk; rewrite Hsc; auto).
  fold N.
  apply f_equal, f_equal2; [|reflexivity].
  apply rsum_map_ext; intros k Hk; rewrite Hsc by exact Hk; reflexivity.
Qed.

(** Theorem 3 (keys): the derivative of [L] in coordinate [c] of the key
    row [k_j] is [scale * dS_j * q_c], row [i]'s term of
    [dK_j = scale * sum_i dS_ij q_i]. *)
Theorem dK_row_is_derive : forall d vis scale q (ks vs : list (list R)) dO j c,
  length vs = length ks -> (j < length ks)%nat -> (c < length (nth j ks []))%nat ->
  let K := masked_keys vis (scores R_ops scale q ks) vs in
  let fw := two_pass R_ops d K in
  let p := row_probs R_ops K (snd fw) in
  is_derive
    (fun x : R => dot R_ops dO
       (fst (two_pass R_ops d
          (masked_keys vis (scores R_ops scale q (replace_nth j (replace_nth c x (nth j ks [])) ks)) vs))))
    (nth c (nth j ks []) 0)
    (scale * nth j (row_dscores R_ops p vs dO (fst fw)) 0 * nth c q 0).
Proof.
  intros d vis scale q ks vs dO j c Hlen Hj Hc K fw p.
  set (n := length ks). set (idx := filter vis (seq 0 n)).
  set (kj := nth j ks []).
  set (S := fun k => scale * dot R_ops q (nth k ks [])).
  set (A := fun k => dot R_ops dO (nth k vs [])).
  set (G := fun k => if Nat.eqb k j then scale * nth c q 0 else 0).
  eapply bw_is_derive_eq.
  { apply (bw_is_derive_row d vis n
             (fun x => scores R_ops scale q (replace_nth j (replace_nth c x kj) ks))
             (fun _ => vs) dO
             (fun k x => S k + G k * (x - nth c kj 0)) (fun k _ => A k) G (fun _ => 0)).
    - intros x; rewrite bw_length_scores, length_replace_nth; reflexivity.
    - intros x; exact Hlen.
    - intros x k Hk; rewrite bw_nth_scores by (rewrite length_replace_nth; exact Hk).
      rewrite nth_replace_nth by exact Hj.
      unfold S, G; destruct (Nat.eqb_spec k j) as [->|Hne].
      + rewrite bw_dot_replace_nth_r by exact Hc; fold kj; ring.
      + ring.
    - reflexivity.
    - intros k _; apply bw_is_derive_affine.
    - intros k _; apply bw_is_derive_const. }
  cbv beta. fold idx.
  assert (HS : forall k, S k + G k * (nth c kj 0 - nth c kj 0) = S k) by (intros; ring).
  set (Z := rsum (map (fun k => exp (S k)) idx)).
  set (N := rsum (map (fun k => exp (S k) * A k) idx)).
  assert (HZ : rsum (map (fun k => exp (S k + G k * (nth c kj 0 - nth c kj 0))) idx) = Z)
    by (apply rsum_map_ext; intros k _; rewrite HS; reflexivity).
  assert (HN : rsum (map (fun k => exp (S k + G k * (nth c kj 0 - nth c kj 0)) * A k) idx) = N)
    by (apply rsum_map_ext; intros k _; rewrite HS; reflexivity).
  rewrite HZ, HN.
  rewrite (rsum_map_ext _ (fun k => if Nat.eqb k j
              then exp (S j) / Z * (scale * nth c q 0 * (A j - N / Z)) else 0)).
  2:{ intros k _; rewrite HS; unfold G; destruct (Nat.eqb_spec k j); [subst|]; ring. }
  unfold idx, n; rewrite bw_rsum_delta_filter by exact Hj.
  (* right-hand side *)
  assert (HlenS : length vs = length (scores R_ops scale q ks)) by (rewrite bw_length_scores; auto).
  assert (Hlp : length p = n)
    by (unfold p, fw, K; rewrite bw_length_row_probs by exact HlenS; apply bw_length_scores).
  rewrite bw_nth_row_dscores by (unfold n in Hlp; lia).
  unfold p, fw, K; rewrite (bw_row_probs_index d vis _ vs HlenS) by (rewrite bw_length_scores; exact Hj).
  rewrite (bw_two_pass_index d vis _ vs HlenS _ (bw_linear_dot dO)).
  rewrite bw_length_scores; fold n idx.
  assert (Hsc : forall k, (k < n)%nat -> nth k (scores R_ops scale q ks) 0 = S k)
    by (intros k Hk; apply bw_nth_scores; exact Hk).
  assert (Hsc' : forall k, In k idx -> nth k (scores R_ops scale q ks) 0 = S k).
  { intros k Hk; apply filter_In in Hk; destruct Hk as [Hk _]; apply in_seq in Hk.
    apply Hsc; lia. }
  rewrite (rsum_map_ext (fun k => exp (nth k (scores R_ops scale q ks) 0)) (fun k => exp (S k)))
    by (intros k Hk; rewrite Hsc'; auto).
  fold Z.
  rewrite (rsum_map_ext (fun k => exp (nth k (scores R_ops scale q ks) 0) * dot R_ops dO (nth k vs []))
             (fun k => exp (S k) * A k))
    by (intros k Hk; rewrite Hsc'; auto).
  fold N. rewrite Hsc by exact Hj.
  destruct (vis j); unfold A; ring.
Qed.

(** ** Tiling of the backward sums *)

Lemma bw_combine_app : forall {A B} (a1 a2 : list A) (b1 b2 : list B),
  length a1 = length b1 -> combine (a1 ++ a2) (b1 ++ b2) = combine a1 b1 ++ combine a2 b2.
Proof.
  intros A B a1; induction a1 as [|x a1 IH]; intros a2 [|y b1] b2 H; simpl in *;
    try discriminate; [reflexivity|].
  rewrite IH by lia; reflexivity.
Qed.

(** Theorem 4: a weighted sum over a concatenation is, coordinate by
    coordinate, the [vadd] of the weighted sums of the two parts. *)
Theorem weighted_sum_app : forall ws1 ws2 vs1 vs2 c,
  length ws1 = length vs1 ->
  nth c (weighted_sum R_ops (ws1 ++ ws2) (vs1 ++ vs2)) 0 =
  nth c (vadd R_ops (weighted_sum R_ops ws1 vs1) (weighted_sum R_ops ws2 vs2)) 0.
Proof.
  intros ws1 ws2 vs1 vs2 c H.
  rewrite nth_vadd, !nth_weighted_sum, bw_combine_app, map_app, rsum_app by exact H.
  reflexivity.
Qed.

Lemma bw_nth_fold_vadd : forall xs acc c,
  nth c (fold_left (vadd R_ops) xs acc) 0 = nth c acc 0 + rsum (map (fun x => nth c x 0) xs).
Proof.
  induction xs as [|x xs IH]; intros acc c; cbn [fold_left map].
  - unfold rsum; simpl; lra.
  - rewrite IH, nth_vadd, rsum_cons; lra.
Qed.

(** Theorem 4: a weighted sum over any partition into tiles (pairs of
    weights and vectors of equal lengths) is the [vadd]-accumulation of the
    per-tile weighted sums, coordinate by coordinate. *)
Theorem weighted_sum_tiles : forall (tiles : list (list R * list (list R))%type) c,
  List.Forall (fun t => length (fst t) = length (snd t)) tiles ->
  nth c (weighted_sum R_ops (concat (map fst tiles)) (concat (map snd tiles))) 0 =
  nth c (fold_left (vadd R_ops) (map (fun t => weighted_sum R_ops (fst t) (snd t)) tiles) []) 0.
Proof.
  intros tiles c H; rewrite bw_nth_fold_vadd, map_map.
  assert (E : nth c (@nil R) 0 = 0) by (destruct c; reflexivity); rewrite E.
  induction H as [|t tiles Ht H IH]; cbn [map concat].
  - rewrite nth_weighted_sum; unfold rsum; simpl; lra.
  - rewrite weighted_sum_app, nth_vadd, IH, rsum_cons by exact Ht; lra.
Qed.

Lemma bw_concat_chunk_fuel : forall {A} fuel b (xs : list A),
  (1 <= b)%nat -> (length xs <= fuel)%nat -> concat (chunk_fuel fuel b xs) = xs.
Proof.
  intros A fuel; induction fuel as [|fuel IH]; intros b xs Hb Hl.
  - destruct xs; simpl in *; [reflexivity | lia].
  - destruct xs as [|x xs']; [reflexivity|].
    cbn [chunk_fuel concat]. rewrite IH; [apply firstn_skipn | exact Hb |].
    rewrite skipn_length; cbn [length] in *; lia.
Qed.

Lemma bw_concat_chunk : forall {A} b (xs : list A), concat (chunk b xs) = xs.
Proof. intros; apply bw_concat_chunk_fuel; lia. Qed.

Lemma bw_chunk_fuel_tiles : forall {A B} fuel b (xs : list A) (ys : list B),
  length xs = length ys ->
  length (chunk_fuel fuel b xs) = length (chunk_fuel fuel b ys) /\
  List.Forall (fun t => length (fst t) = length (snd t))
         (combine (chunk_fuel fuel b xs) (chunk_fuel fuel b ys)).
Proof.
  intros A B fuel; induction fuel as [|fuel IH]; intros b xs ys H; [split; simpl; auto|].
  destruct xs as [|x xs']; destruct ys as [|y ys']; simpl in H; try discriminate;
    [split; simpl; auto|].
  destruct (IH b (skipn b (x :: xs')) (skipn b (y :: ys'))) as [H1 H2].
  { rewrite !skipn_length; cbn [length] in *; lia. }
  cbn [chunk_fuel length combine]; split; [lia|].
  constructor; [|exact H2].
  cbn [fst snd]; rewrite !firstn_length; cbn [length] in *; lia.
Qed.

Lemma bw_map_fst_combine : forall {A B} (l1 : list A) (l2 : list B),
  length l1 = length l2 -> map fst (combine l1 l2) = l1.
Proof.
  intros A B l1; induction l1 as [|x l1 IH]; intros [|y l2] H; simpl in *;
    try discriminate; [reflexivity|]; rewrite IH by lia; reflexivity.
Qed.

Lemma bw_map_snd_combine : forall {A B} (l1 : list A) (l2 : list B),
  length l1 = length l2 -> map snd (combine l1 l2) = l2.
Proof.
  intros A B l1; induction l1 as [|x l1 IH]; intros [|y l2] H; simpl in *;
    try discriminate; [reflexivity|]; rewrite IH by lia; reflexivity.
Qed.

(** Theorem 4 with the code's tiles: cutting weights and vectors into tiles
    of [b] ([chunk]) and accumulating the per-tile weighted sums gives the
    weighted sum, coordinate by coordinate. *)
Theorem weighted_sum_chunk : forall b ws vs c,
  length ws = length vs ->
  nth c (weighted_sum R_ops ws vs) 0 =
  nth c (fold_left (vadd R_ops)
           (map (fun t => weighted_sum R_ops (fst t) (snd t)) (combine (chunk b ws) (chunk b vs)))
           []) 0.
Proof.
  intros b ws vs c H.
  unfold chunk; rewrite H.
  destruct (bw_chunk_fuel_tiles (length vs) (Nat.max 1 b) ws vs H) as [H1 H2].
  rewrite <- weighted_sum_tiles by exact H2.
  rewrite bw_map_fst_combine, bw_map_snd_combine by exact H1.
  rewrite !bw_concat_chunk_fuel by lia; reflexivity.
Qed.

(** ** Tiling the query rows of [attention_backward] *)

Definition bw_P (scale : R) (vis : nat -> nat -> bool) (qs ks vs : list (list R))
    (lses : list (option R)) : list (list R) :=
  map (fun '(i, q) => row_probs R_ops (masked_keys (vis i) (scores R_ops scale q ks) vs)
                                (nth i lses None))
      (combine (seq 0 (length qs)) qs).

Definition bw_dS (vs outs dOs P : list (list R)) : list (list R) :=
  map (fun '(i, p) => row_dscores R_ops p vs (nth i dOs []) (nth i outs []))
      (combine (seq 0 (length P)) P).

Lemma bw_attention_backward_eq : forall scale vis qs ks vs outs lses dOs,
  attention_backward R_ops scale vis qs ks vs outs lses dOs =
  (map (fun ds => vscale R_ops scale (weighted_sum R_ops ds ks))
       (bw_dS vs outs dOs (bw_P scale vis qs ks vs lses)),
   map (fun j => vscale R_ops scale
          (weighted_sum R_ops (column R_ops (bw_dS vs outs dOs (bw_P scale vis qs ks vs lses)) j) qs))
       (seq 0 (length ks)),
   map (fun j => weighted_sum R_ops (column R_ops (bw_P scale vis qs ks vs lses) j) dOs)
       (seq 0 (length ks))).
Proof. reflexivity. Qed.

Lemma bw_length_indexed : forall {A B} (f : nat * A -> B) (l : list A),
  length (map f (combine (seq 0 (length l)) l)) = length l.
Proof.
  intros; rewrite map_length, combine_length, seq_length; lia.
Qed.

Lemma bw_combine_seq_shift : forall {A} k s n (l : list A),
  combine (seq (k + s) n) l = map (fun p => ((k + fst p)%nat, snd p)) (combine (seq s n) l).
Proof.
  intros A k s n; revert s; induction n as [|n IH]; intros s l; [reflexivity|].
  destruct l as [|x l]; [reflexivity|].
  cbn [seq combine map fst snd].
  replace (S (k + s)) with (k + S s)%nat by lia.
  rewrite IH; reflexivity.
Qed.

(** Indexed maps over a concatenation: the second part sees shifted indices. *)
Lemma bw_map_indexed_app : forall {A B} (f : nat * A -> B) (l1 l2 : list A),
  map f (combine (seq 0 (length (l1 ++ l2))) (l1 ++ l2)) =
  map f (combine (seq 0 (length l1)) l1) ++
  map (fun p => f ((length l1 + fst p)%nat, snd p)) (combine (seq 0 (length l2)) l2).
Proof.
  intros A B f l1 l2.
  rewrite app_length, seq_app, bw_combine_app by apply seq_length.
  rewrite map_app; f_equal.
  replace (0 + length l1)%nat with (length l1 + 0)%nat by lia.
  rewrite bw_combine_seq_shift, map_map; reflexivity.
Qed.

Lemma bw_in_indexed : forall {A} (l : list A) i x,
  In (i, x) (combine (seq 0 (length l)) l) -> (i < length l)%nat.
Proof.
  intros A l i x H; apply in_combine_l, in_seq in H; lia.
Qed.

Lemma bw_P_app : forall scale vis vis2 qs1 qs2 ks vs lses1 lses2,
  length lses1 = length qs1 ->
  (forall i j, vis2 i j = vis (length qs1 + i)%nat j) ->
  bw_P scale vis (qs1 ++ qs2) ks vs (lses1 ++ lses2) =
  bw_P scale vis qs1 ks vs lses1 ++ bw_P scale vis2 qs2 ks vs lses2.
Proof.
  intros scale vis vis2 qs1 qs2 ks vs lses1 lses2 Hl Hv.
  unfold bw_P; rewrite bw_map_indexed_app; f_equal.
  - apply map_ext_in; intros [i q] Hin; apply bw_in_indexed in Hin.
    rewrite app_nth1 by lia; reflexivity.
  - apply map_ext; intros [i q]; cbn [fst snd].
    rewrite <- Hl, app_nth2_plus, Hl.
    f_equal; unfold masked_keys; apply map_ext; intros [j [s v]]; rewrite Hv; reflexivity.
Qed.

Lemma bw_dS_app : forall vs outs1 outs2 dOs1 dOs2 P1 P2,
  length outs1 = length P1 -> length dOs1 = length P1 ->
  bw_dS vs (outs1 ++ outs2) (dOs1 ++ dOs2) (P1 ++ P2) =
  bw_dS vs outs1 dOs1 P1 ++ bw_dS vs outs2 dOs2 P2.
Proof.
  intros vs outs1 outs2 dOs1 dOs2 P1 P2 Ho Hd.
  unfold bw_dS; rewrite bw_map_indexed_app; f_equal.
  - apply map_ext_in; intros [i p] Hin; apply bw_in_indexed in Hin.
    rewrite !app_nth1 by lia; reflexivity.
  - apply map_ext; intros [i p]; cbn [fst snd].
    rewrite <- Ho at 2; rewrite app_nth2_plus.
    rewrite <- Hd, app_nth2_plus; reflexivity.
Qed.

Lemma bw_length_P : forall scale vis qs ks vs lses, length (bw_P scale vis qs ks vs lses) = length qs.
Proof. intros; apply bw_length_indexed. Qed.

Lemma bw_length_dS : forall vs outs dOs P, length (bw_dS vs outs dOs P) = length P.
Proof. intros; apply bw_length_indexed. Qed.

Lemma bw_nth_map_seq_default : forall {A} (f : nat -> list A) n j,
  nth j (map f (seq 0 n)) [] = if Nat.ltb j n then f j else [].
Proof.
  intros A f n j; destruct (Nat.ltb_spec j n).
  - apply bw_nth_map_seq; exact H.
  - apply nth_overflow; rewrite map_length, seq_length; exact H.
Qed.

(** Theorem 4 for the backward pass: splitting the query rows into two
    blocks (the second one seeing its rows' global indices through [vis2]),
    [dQ] is the concatenation of the blocks' [dQ], and [dK], [dV] are the
    sums of the blocks' [dK], [dV], coordinate by coordinate. *)
Theorem attention_backward_split_queries : forall scale vis vis2 qs1 qs2 ks vs
    outs1 outs2 lses1 lses2 dOs1 dOs2,
  length outs1 = length qs1 -> length lses1 = length qs1 -> length dOs1 = length qs1 ->
  (forall i j, vis2 i j = vis (length qs1 + i)%nat j) ->
  let B := attention_backward R_ops scale vis (qs1 ++ qs2) ks vs
             (outs1 ++ outs2) (lses1 ++ lses2) (dOs1 ++ dOs2) in
  let B1 := attention_backward R_ops scale vis qs1 ks vs outs1 lses1 dOs1 in
  let B2 := attention_backward R_ops scale vis2 qs2 ks vs outs2 lses2 dOs2 in
  fst (fst B) = fst (fst B1) ++ fst (fst B2) /\
  (forall j c, nth c (nth j (snd (fst B)) []) 0 =
               nth c (nth j (snd (fst B1)) []) 0 + nth c (nth j (snd (fst B2)) []) 0) /\
  (forall j c, nth c (nth j (snd B) []) 0 =
               nth c (nth j (snd B1) []) 0 + nth c (nth j (snd B2) []) 0).
Proof.
  intros scale vis vis2 qs1 qs2 ks vs outs1 outs2 lses1 lses2 dOs1 dOs2 Ho Hl Hd Hv B B1 B2.
  unfold B, B1, B2; rewrite !bw_attention_backward_eq; cbn [fst snd].
  rewrite (bw_P_app scale vis vis2 qs1 qs2 ks vs lses1 lses2 Hl Hv).
  rewrite bw_dS_app by (rewrite bw_length_P; assumption).
  split; [|split].
  - apply map_app.
  - intros j c; rewrite !bw_nth_map_seq_default.
    destruct (Nat.ltb j (length ks)); [|destruct c; simpl; ring].
    rewrite !nth_vscale; unfold column at 1; rewrite map_app.
    rewrite weighted_sum_app, nth_vadd; [unfold column; ring|].
    rewrite map_length, bw_length_dS, bw_length_P; reflexivity.
  - intros j c; rewrite !bw_nth_map_seq_default.
    destruct (Nat.ltb j (length ks)); [|destruct c; simpl; ring].
    unfold column at 1; rewrite map_app.
    rewrite weighted_sum_app, nth_vadd; [unfold column; ring|].
    rewrite map_length, bw_length_P; auto.
Qed.

(** The backward pass run tile by tile over the query rows, as the tiled
    kernel does: tile [t] holds its rows' (q, o, lse, dO) and sees the
    visibility of its global row indices. *)
Fixpoint backward_query_tiles (scale : R) (vis : nat -> nat -> bool)
    (tiles : list (list (list R) * list (list R) * list (option R) * list (list R)))
    (ks vs : list (list R)) : list (list (list R) * list (list R) * list (list R)) :=
  match tiles with
  | [] => []
  | (qs, outs, lses, dOs) :: rest =>
      attention_backward R_ops scale vis qs ks vs outs lses dOs
      :: backward_query_tiles scale (fun i j => vis (length qs + i)%nat j) rest ks vs
  end.

Definition bw_tile_ok (t : list (list R) * list (list R) * list (option R) * list (list R)) : Prop :=
  let '(qs, outs, lses, dOs) := t in
  length outs = length qs /\ length lses = length qs /\ length dOs = length qs.

(** Theorem 4, any partition of the query rows into tiles: [dQ] is the
    concatenation of the tiles' [dQ]; [dK] and [dV] are the sums over the
    tiles of their [dK], [dV], coordinate by coordinate. *)
Theorem attention_backward_query_tiles : forall scale vis tiles ks vs,
  List.Forall bw_tile_ok tiles ->
  let qs := concat (map (fun t => fst (fst (fst t))) tiles) in
  let outs := concat (map (fun t => snd (fst (fst t))) tiles) in
  let lses := concat (map (fun t => snd (fst t)) tiles) in
  let dOs := concat (map (fun t => snd t) tiles) in
  let B := attention_backward R_ops scale vis qs ks vs outs lses dOs in
  let Bs := backward_query_tiles scale vis tiles ks vs in
  fst (fst B) = concat (map (fun b => fst (fst b)) Bs) /\
  (forall j c, nth c (nth j (snd (fst B)) []) 0 =
               rsum (map (fun b => nth c (nth j (snd (fst b)) []) 0) Bs)) /\
  (forall j c, nth c (nth j (snd B) []) 0 =
               rsum (map (fun b => nth c (nth j (snd b) []) 0) Bs)).
Proof.
  intros scale vis tiles ks vs H; revert vis.
  induction H as [|[[[qs1 outs1] lses1] dOs1] tiles Ht H IH]; intros vis.
  - cbv zeta; cbn [map concat backward_query_tiles].
    rewrite bw_attention_backward_eq; unfold bw_P, bw_dS, column; cbn.
    split; [reflexivity|].
    split; intros j c; rewrite bw_nth_map_seq_default;
      destruct (Nat.ltb j (length ks)); destruct c; unfold rsum; simpl; ring.
  - destruct Ht as [Ho [Hl Hd]].
    destruct (IH (fun i j => vis (length qs1 + i)%nat j)) as [IH1 [IH2 IH3]].
    cbv zeta in *; cbn [map concat backward_query_tiles fst snd].
    destruct (attention_backward_split_queries scale vis (fun i j => vis (length qs1 + i)%nat j)
                qs1 (concat (map (fun t => fst (fst (fst t))) tiles)) ks vs
                outs1 (concat (map (fun t => snd (fst (fst t))) tiles))
                lses1 (concat (map (fun t => snd (fst t)) tiles))
                dOs1 (concat (map (fun t => snd t) tiles)) Ho Hl Hd (fun i j => eq_refl))
      as [S1 [S2 S3]].
    cbv zeta in S1, S2, S3.
    split; [|split].
    + rewrite S1, IH1; reflexivity.
    + intros j c; rewrite S2, IH2, rsum_cons; reflexivity.
    + intros j c; rewrite S3, IH3, rsum_cons; reflexivity.
Qed.

(** ** The whole head: [attention_backward] is the gradient of [sum_i dO_i . o_i] *)

(** The scalar whose gradient the backward pass computes: the sum over the
    query rows of [dO_i . o_i], with [o_i] the two-pass softmax output. *)
Definition attention_loss (d : nat) (scale : R) (vis : nat -> nat -> bool)
    (qs ks vs dOs : list (list R)) : R :=
  rsum (map (fun '(dO, r) => dot R_ops dO (fst r))
            (combine dOs (attention_two_pass R_ops d scale vis qs ks vs))).

Lemma bw_nth_indexed : forall {A B} (f : nat * A -> B) (l : list A) i d d',
  (i < length l)%nat -> nth i (map f (combine (seq 0 (length l)) l)) d = f (i, nth i l d').
Proof.
  intros A B f l i d d' Hi.
  rewrite (bw_combine_as_map (seq 0 (length l)) l 0%nat d' (length l)) by
    (rewrite ?seq_length; reflexivity).
  rewrite map_map, bw_nth_map_seq by exact Hi.
  rewrite seq_nth by exact Hi; reflexivity.
Qed.

Lemma bw_length_attention_two_pass : forall d scale vis qs ks vs,
  length (attention_two_pass R_ops d scale vis qs ks vs) = length qs.
Proof. intros; apply bw_length_indexed. Qed.

Lemma bw_nth_attention_two_pass : forall d scale vis qs ks vs i d0, (i < length qs)%nat ->
  nth i (attention_two_pass R_ops d scale vis qs ks vs) d0 =
  two_pass R_ops d (masked_keys (vis i) (scores R_ops scale (nth i qs []) ks) vs).
Proof. intros; unfold attention_two_pass; rewrite (bw_nth_indexed _ _ _ _ []); auto. Qed.

Lemma bw_attention_loss_index : forall d scale vis qs ks vs dOs,
  length dOs = length qs ->
  attention_loss d scale vis qs ks vs dOs =
  rsum (map (fun i => dot R_ops (nth i dOs [])
              (fst (two_pass R_ops d (masked_keys (vis i) (scores R_ops scale (nth i qs []) ks) vs))))
            (seq 0 (length qs))).
Proof.
  intros d scale vis qs ks vs dOs H; unfold attention_loss.
  rewrite (bw_combine_as_map dOs _ [] ([], None) (length qs))
    by (rewrite ?bw_length_attention_two_pass; auto).
  rewrite map_map; apply rsum_map_ext; intros i Hi; apply in_seq in Hi.
  rewrite bw_nth_attention_two_pass by lia; reflexivity.
Qed.

Section Head.
Variables (d : nat) (scale : R) (vis : nat -> nat -> bool) (qs ks vs dOs : list (list R)).
Hypothesis Hvs : length vs = length ks.
Hypothesis HdO : length dOs = length qs.

Let fw := attention_two_pass R_ops d scale vis qs ks vs.
Let B := attention_backward R_ops scale vis qs ks vs (map fst fw) (map snd fw) dOs.
Let Krow i := masked_keys (vis i) (scores R_ops scale (nth i qs []) ks) vs.
Let Prow i := row_probs R_ops (Krow i) (snd (two_pass R_ops d (Krow i))).
Let dSrow i := row_dscores R_ops (Prow i) vs (nth i dOs []) (fst (two_pass R_ops d (Krow i))).

Lemma bw_nth_P : forall i, (i < length qs)%nat ->
  nth i (bw_P scale vis qs ks vs (map snd fw)) [] = Prow i.
Proof.
  intros i Hi; unfold bw_P; rewrite (bw_nth_indexed _ _ _ _ []) by exact Hi.
  unfold Prow, Krow; f_equal.
  rewrite (bw_nth_map_lt _ _ _ _ ([], None)) by (unfold fw; rewrite bw_length_attention_two_pass; exact Hi).
  unfold fw; rewrite bw_nth_attention_two_pass by exact Hi; reflexivity.
Qed.

Lemma bw_nth_dS : forall i, (i < length qs)%nat ->
  nth i (bw_dS vs (map fst fw) dOs (bw_P scale vis qs ks vs (map snd fw))) [] = dSrow i.
Proof.
  intros i Hi; unfold bw_dS.
  rewrite (bw_nth_indexed _ _ _ _ []) by (rewrite bw_length_P; exact Hi).
  rewrite bw_nth_P by exact Hi; unfold dSrow; f_equal.
  rewrite (bw_nth_map_lt _ _ _ _ ([], None)) by (unfold fw; rewrite bw_length_attention_two_pass; exact Hi).
  unfold fw; rewrite bw_nth_attention_two_pass by exact Hi; reflexivity.
Qed.

Lemma bw_nth_column_weighted_sum : forall (M xs : list (list R)) j c,
  length M = length xs ->
  nth c (weighted_sum R_ops (column R_ops M j) xs) 0 =
  rsum (map (fun i => nth j (nth i M []) 0 * nth c (nth i xs []) 0) (seq 0 (length xs))).
Proof.
  intros M xs j c H.
  rewrite nth_weighted_sum, (bw_combine_as_map _ xs 0 [] (length xs))
    by (unfold column; rewrite ?map_length; auto).
  rewrite map_map; apply rsum_map_ext; intros i Hi; apply in_seq in Hi; cbn [fst snd].
  unfold column; rewrite (bw_nth_map_lt _ _ _ _ []) by lia; reflexivity.
Qed.

(** Whole head, values: coordinate [c] of [dV_j] is the derivative of the
    loss [sum_i dO_i . o_i] in coordinate [c] of the value row [v_j]. *)
Theorem attention_backward_dV_is_derive : forall j c,
  (j < length ks)%nat -> (c < length (nth j vs []))%nat ->
  is_derive
    (fun y : R => attention_loss d scale vis qs ks
                    (replace_nth j (replace_nth c y (nth j vs [])) vs) dOs)
    (nth c (nth j vs []) 0)
    (nth c (nth j (snd B) []) 0).
Proof.
  intros j c Hj Hc.
  apply (is_derive_ext (fun y => rsum (map (fun i => dot R_ops (nth i dOs [])
     (fst (two_pass R_ops d (masked_keys (vis i) (scores R_ops scale (nth i qs []) ks)
                                 (replace_nth j (replace_nth c y (nth j vs [])) vs)))))
     (seq 0 (length qs))))).
  { intros y; rewrite bw_attention_loss_index by exact HdO; reflexivity. }
  eapply bw_is_derive_eq.
  { apply (bw_is_derive_rsum (seq 0 (length qs)) (fun i y => dot R_ops (nth i dOs [])
     (fst (two_pass R_ops d (masked_keys (vis i) (scores R_ops scale (nth i qs []) ks)
                                 (replace_nth j (replace_nth c y (nth j vs [])) vs)))))
     (fun i => nth j (Prow i) 0 * nth c (nth i dOs []) 0)).
    intros i _; apply dV_row_is_derive; rewrite ?bw_length_scores; auto. }
  unfold B; rewrite bw_attention_backward_eq; cbn [snd].
  rewrite bw_nth_map_seq by exact Hj.
  rewrite bw_nth_column_weighted_sum by (rewrite bw_length_P; auto).
  rewrite HdO; apply rsum_map_ext; intros i Hi; apply in_seq in Hi.
  rewrite bw_nth_P by lia; reflexivity.
Qed.

(** Whole head, keys: coordinate [c] of [dK_j] is the derivative of the
    loss in coordinate [c] of the key row [k_j]. *)
Theorem attention_backward_dK_is_derive : forall j c,
  (j < length ks)%nat -> (c < length (nth j ks []))%nat ->
  is_derive
    (fun x : R => attention_loss d scale vis qs
                    (replace_nth j (replace_nth c x (nth j ks [])) ks) vs dOs)
    (nth c (nth j ks []) 0)
    (nth c (nth j (snd (fst B)) []) 0).
Proof.
  intros j c Hj Hc.
  apply (is_derive_ext (fun x => rsum (map (fun i => dot R_ops (nth i dOs [])
     (fst (two_pass R_ops d (masked_keys (vis i)
        (scores R_ops scale (nth i qs []) (replace_nth j (replace_nth c x (nth j ks [])) ks)) vs))))
     (seq 0 (length qs))))).
  { intros x; rewrite bw_attention_loss_index by exact HdO; reflexivity. }
  eapply bw_is_derive_eq.
  { apply (bw_is_derive_rsum (seq 0 (length qs)) (fun i x => dot R_ops (nth i dOs [])
     (fst (two_pass R_ops d (masked_keys (vis i)
        (scores R_ops scale (nth i qs []) (replace_nth j (replace_nth c x (nth j ks [])) ks)) vs))))
     (fun i => scale * nth j (dSrow i) 0 * nth c (nth i qs []) 0)).
    intros i _; apply dK_row_is_derive; auto. }
  unfold B; rewrite bw_attention_backward_eq; cbn [fst snd].
  rewrite bw_nth_map_seq by exact Hj.
  rewrite nth_vscale, bw_nth_column_weighted_sum
    by (rewrite bw_length_dS, bw_length_P; auto).
  rewrite <- rsum_map_scal_l; apply rsum_map_ext; intros i Hi; apply in_seq in Hi.
  rewrite bw_nth_dS by lia; ring.
Qed.

(** Whole head, queries: coordinate [c] of [dQ_i] is the derivative of the
    loss in coordinate [c] of the query row [q_i]. *)
Theorem attention_backward_dQ_is_derive : forall i c,
  (i < length qs)%nat -> (c < length (nth i qs []))%nat ->
  is_derive
    (fun x : R => attention_loss d scale vis
                    (replace_nth i (replace_nth c x (nth i qs [])) qs) ks vs dOs)
    (nth c (nth i qs []) 0)
    (nth c (nth i (fst (fst B)) []) 0).
Proof.
  intros i c Hi Hc.
  set (qx := fun x => replace_nth i (replace_nth c x (nth i qs [])) qs).
  assert (Hqx : forall x i', nth i' (qx x) [] =
                             if Nat.eqb i' i then replace_nth c x (nth i qs []) else nth i' qs [])
    by (intros x i'; unfold qx; apply nth_replace_nth; exact Hi).
  apply (is_derive_ext (fun x => rsum (map (fun i' => dot R_ops (nth i' dOs [])
     (fst (two_pass R_ops d (masked_keys (vis i') (scores R_ops scale (nth i' (qx x) []) ks) vs))))
     (seq 0 (length qs))))).
  { intros x; rewrite bw_attention_loss_index; unfold qx; rewrite ?length_replace_nth; auto. }
  eapply bw_is_derive_eq.
  { apply (bw_is_derive_rsum (seq 0 (length qs)) (fun i' x => dot R_ops (nth i' dOs [])
     (fst (two_pass R_ops d (masked_keys (vis i') (scores R_ops scale (nth i' (qx x) []) ks) vs))))
     (fun i' => if Nat.eqb i' i
                then nth c (vscale R_ops scale (weighted_sum R_ops (dSrow i) ks)) 0 else 0)).
    intros i' _; destruct (Nat.eqb_spec i' i) as [->|Hne].
    - apply (is_derive_ext (fun x => dot R_ops (nth i dOs [])
        (fst (two_pass R_ops d (masked_keys (vis i)
           (scores R_ops scale (replace_nth c x (nth i qs [])) ks) vs))))).
      { intros x; rewrite Hqx, Nat.eqb_refl; reflexivity. }
      apply dQ_row_is_derive; auto.
    - apply (is_derive_ext (fun _ => dot R_ops (nth i' dOs [])
        (fst (two_pass R_ops d (masked_keys (vis i') (scores R_ops scale (nth i' qs []) ks) vs))))).
      { intros x; rewrite Hqx; destruct (Nat.eqb_spec i' i); [congruence|reflexivity]. }
      apply bw_is_derive_const. }
  rewrite bw_rsum_delta by apply seq_NoDup.
  destruct (in_dec Nat.eq_dec i (seq 0 (length qs))) as [_|Hn];
    [|exfalso; apply Hn, in_seq; lia].
  unfold B; rewrite bw_attention_backward_eq; cbn [fst snd].
  rewrite (bw_nth_map_lt _ _ _ _ []) by (rewrite bw_length_dS, bw_length_P; exact Hi).
  rewrite bw_nth_dS by exact Hi; reflexivity.
Qed.

(** Theorem 4, key tiles (what the kernel does for [dQ]): row [i] of [dQ]
    accumulated over key tiles of size [b] ([chunk b]) is row [i] of the
    [dQ] of [attention_backward], coordinate by coordinate. *)
Theorem attention_backward_dQ_key_tiles : forall i b c, (i < length qs)%nat ->
  nth c (nth i (fst (fst B)) []) 0 =
  nth c (fold_left (vadd R_ops)
           (map (fun t => vscale R_ops scale (weighted_sum R_ops (fst t) (snd t)))
                (combine (chunk b (dSrow i)) (chunk b ks))) []) 0.
Proof.
  intros i b c Hi.
  assert (Hl : length (dSrow i) = length ks).
  { unfold dSrow, row_dscores; rewrite map_length, combine_length.
    unfold Prow, Krow; rewrite bw_length_row_probs, bw_length_scores
      by (rewrite bw_length_scores; exact Hvs).
    lia. }
  unfold B; rewrite bw_attention_backward_eq; cbn [fst snd].
  rewrite (bw_nth_map_lt _ _ _ _ []) by (rewrite bw_length_dS, bw_length_P; exact Hi).
  rewrite bw_nth_dS by exact Hi.
  rewrite nth_vscale, (weighted_sum_chunk b) by exact Hl.
  rewrite !bw_nth_fold_vadd, !map_map.
  assert (E : nth c (@nil R) 0 = 0) by (destruct c; reflexivity); rewrite !E.
  rewrite (rsum_map_ext (fun x => nth c (vscale R_ops scale (weighted_sum R_ops (fst x) (snd x))) 0)
             (fun x => scale * nth c (weighted_sum R_ops (fst x) (snd x)) 0))
    by (intros; apply nth_vscale).
  rewrite rsum_map_scal_l; ring.
Qed.

End Head.

(** ** With the forward pass the code runs (the streamed [stream_row]) *)

Lemma bw_dot_cons : forall z a x,
  dot R_ops (z :: a) x = z * nth 0 x 0 + dot R_ops a (tl x).
Proof. intros z a [|x0 x]; simpl; [rewrite bw_dot_nil_r|]; ring. Qed.

Lemma bw_dot_veq : forall a x y, veq x y -> dot R_ops a x = dot R_ops a y.
Proof.
  induction a as [|z a IH]; intros x y H; [reflexivity|].
  rewrite !bw_dot_cons, (H 0%nat), (IH (tl x) (tl y)); [reflexivity|].
  intros c; specialize (H (S c)); destruct x, y; destruct c; simpl in *; auto.
Qed.

Lemma bw_row_dscores_D : forall p vs dO out out',
  dot R_ops dO out = dot R_ops dO out' ->
  row_dscores R_ops p vs dO out = row_dscores R_ops p vs dO out'.
Proof. intros p vs dO out out' H; unfold row_dscores; rewrite H; reflexivity. Qed.

(** Theorem 2 with the forward pass of the code: [out] and [lse] saved by the
    streamed forward pass (tiles of [b] keys), and [L] computed by it too. *)
Theorem row_dscores_is_derive_stream : forall b d vis (ss : list R) vs dO j,
  length vs = length ss -> (j < length ss)%nat ->
  let K := masked_keys vis ss vs in
  let fw := stream_row R_ops b d K in
  let p := row_probs R_ops K (snd fw) in
  is_derive
    (fun x : R => dot R_ops dO (fst (stream_row R_ops b d (masked_keys vis (replace_nth j x ss) vs))))
    (nth j ss 0)
    (nth j (row_dscores R_ops p vs dO (fst fw)) 0).
Proof.
  intros b d vis ss vs dO j Hlen Hj K fw p.
  apply (is_derive_ext
    (fun x : R => dot R_ops dO (fst (two_pass R_ops d (masked_keys vis (replace_nth j x ss) vs))))).
  { intros x; apply bw_dot_veq, veq_sym, stream_row_correct. }
  destruct (stream_row_correct b d K) as [Hout Hlse].
  unfold p, fw; rewrite Hlse, (bw_row_dscores_D _ _ _ _ _ (bw_dot_veq dO _ _ Hout)).
  apply row_dscores_is_derive; assumption.
Qed.

(** The backward pass fed with the outputs and lse of the streamed forward
    pass [attention_forward] (what the code saves) computes the same
    [dQ, dK, dV] as when fed with the two-pass specification; so the
    whole-head theorems above hold for the code's forward pass. *)
Theorem attention_backward_forward_eq : forall b d scale vis qs ks vs dOs,
  let fw := attention_forward R_ops b d scale vis qs ks vs in
  let tp := attention_two_pass R_ops d scale vis qs ks vs in
  attention_backward R_ops scale vis qs ks vs (map fst fw) (map snd fw) dOs =
  attention_backward R_ops scale vis qs ks vs (map fst tp) (map snd tp) dOs.
Proof.
  intros b d scale vis qs ks vs dOs fw tp.
  pose proof (attention_forward_correct b d scale vis qs ks vs) as H; fold fw tp in H.
  assert (Hsnd : map snd fw = map snd tp).
  { clear -H; induction H as [|x y l l' Hxy _ IH]; [reflexivity|].
    destruct Hxy as [_ E]; simpl; rewrite E, IH; reflexivity. }
  assert (Hfst : forall i, veq (nth i (map fst fw) []) (nth i (map fst tp) [])).
  { clear -H; induction H as [|x y l l' Hxy _ IH]; intros i; [apply veq_refl|].
    destruct i; simpl; [apply Hxy | apply IH]. }
  rewrite !bw_attention_backward_eq, Hsnd.
  assert (HdS : bw_dS vs (map fst fw) dOs (bw_P scale vis qs ks vs (map snd tp)) =
                bw_dS vs (map fst tp) dOs (bw_P scale vis qs ks vs (map snd tp))).
  { unfold bw_dS; apply map_ext; intros [i p].
    apply bw_row_dscores_D, bw_dot_veq, Hfst. }
  rewrite HdS; reflexivity.
Qed.
