(** * Correctness of the attention backward pass over [R].

    For one query row with scores [s_j], value rows [v_j], the forward
    output [o = sum_j P_j v_j] (two-pass softmax, [P_j = exp s_j / Z] on
    visible keys, [0] on masked ones) and an upstream gradient [dO], we
    prove that the formulas of [Attention/Backward.v] are the gradient of
    the scalar loss [L = dO . o]:

    - [backward_D_identity]: [D = dO . o = sum_j P_j dP_j];
    - [row_dscores_is_derive]: [dL/ds_j] is entry [j] of [row_dscores];
    - [dV], [dQ], [dK] rows are the partial derivatives of [L] in the
      values, the query and the keys (with [s_j = scale * q . k_j]);
    - tiling: the sums of the backward pass may be split over any
      partition of the rows into tiles.

    Derivatives are Coquelicot's [is_derive]. *)

From Coq Require Import Reals List Lra Lia Arith.
From Coquelicot Require Import Coquelicot.
From Ojas Require Import ScalarOps Vector VectorFacts Attention.OnlineSoftmax Attention.Backward.
Import ListNotations.
Open Scope R_scope.

(** ** Replacing one entry of a list *)

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

Lemma replace_nth_same : forall {A} j (l : list A) d, (j < length l)%nat ->
  replace_nth j (nth j l d) l = l.
Proof.
  intros A j l; revert j; induction l as [|y l IH]; intros [|j] d H; simpl in *; try lia;
    auto.
  rewrite IH by lia; reflexivity.
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

Lemma dot_nil_r : forall a, dot R_ops a [] = 0.
Proof. intros [|x a]; reflexivity. Qed.

Lemma dot_vadd_r : forall a x y,
  dot R_ops a (vadd R_ops x y) = dot R_ops a x + dot R_ops a y.
Proof.
  induction a as [|z a IH]; intros x y; simpl; [lra|].
  destruct x as [|x0 x]; destruct y as [|y0 y]; simpl; try lra.
  rewrite IH; lra.
Qed.

Lemma dot_vscale_r : forall a k x,
  dot R_ops a (vscale R_ops k x) = k * dot R_ops a x.
Proof.
  induction a as [|z a IH]; intros k x; simpl; [lra|].
  destruct x as [|x0 x]; simpl; [lra|].
  rewrite IH; lra.
Qed.

Lemma bw_linear_dot : forall a, bw_linear (dot R_ops a).
Proof.
  intros a; split; [|split].
  - apply dot_vadd_r.
  - apply dot_vscale_r.
  - apply dot_nil_r.
Qed.

(** Changing one coordinate of either argument of a dot product. *)
Lemma dot_replace_nth_r : forall a b c y, (c < length b)%nat ->
  dot R_ops a (replace_nth c y b) = dot R_ops a b + nth c a 0 * (y - nth c b 0).
Proof.
  intros a b; revert a; induction b as [|z b IH]; intros a c y Hc; simpl in Hc; [lia|].
  destruct a as [|x a]; destruct c as [|c]; simpl.
  - destruct b; lra.
  - destruct (replace_nth c y b); lra.
  - destruct b; lra.
  - rewrite IH by lia; lra.
Qed.

Lemma dot_replace_nth_l : forall a b c y, (c < length a)%nat ->
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
      + rewrite dot_replace_nth_r by exact Hc; fold vj; ring.
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
      rewrite dot_replace_nth_l by exact Hc; unfold S, G; ring.
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
      + rewrite dot_replace_nth_r by exact Hc; fold kj; ring.
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
