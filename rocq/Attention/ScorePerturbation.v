(** * Sensitivity of the softmax output to the scores.

    If every score moves by at most [delta] and every value coordinate is
    bounded by [V], every output coordinate of the two-pass softmax moves by
    at most [(exp (2 delta) - 1) * V]: each normalised weight changes by a
    factor within [[exp (-2 delta), exp (2 delta)]], so
    [sum_j |P'_j - P_j| <= exp (2 delta) - 1]. *)

From Coq Require Import Reals List Lra Lia Arith.
From Ojas Require Import ScalarOps Vector VectorFacts Attention.OnlineSoftmax
  Attention.BackwardCorrect.
Import ListNotations.
Open Scope R_scope.

Lemma sp_exp_le : forall x y, x <= y -> exp x <= exp y.
Proof.
  intros x y H; destruct (Rle_lt_or_eq_dec x y H) as [Hlt | ->].
  - apply Rlt_le, exp_increasing, Hlt.
  - apply Rle_refl.
Qed.

Lemma sp_Rabs_le_inv : forall x a, Rabs x <= a -> - a <= x <= a.
Proof.
  intros x a H; pose proof (Rle_abs x); pose proof (Rle_abs (- x)).
  rewrite Rabs_Ropp in *; lra.
Qed.

(** A ratio of two perturbed positive quantities: if [a] is within a factor
    [t] of [b] and [Z'] within a factor [t] of [Z], then [a / Z'] is within
    [(t^2 - 1) * b / Z] of [b / Z]. *)
Lemma sp_ratio_bound : forall a b Z Z' t,
  0 < b -> 0 < Z -> 1 <= t ->
  b <= a * t -> a <= b * t -> Z <= Z' * t -> Z' <= Z * t ->
  Rabs (a / Z' - b / Z) <= (t * t - 1) * (b / Z).
Proof.
  intros a b Z Z' t Hb HZ Ht H1 H2 H3 H4.
  assert (HZ' : 0 < Z') by nra.
  assert (Ha : 0 < a) by nra.
  replace (a / Z' - b / Z) with ((a * Z - b * Z') / (Z * Z')) by (field; lra).
  replace ((t * t - 1) * (b / Z)) with ((t * t - 1) * b * Z' / (Z * Z')) by (field; lra).
  assert (HZZ : 0 < Z * Z') by nra.
  unfold Rdiv; rewrite Rabs_mult, (Rabs_right (/ (Z * Z'))) by (apply Rle_ge, Rlt_le, Rinv_0_lt_compat, HZZ).
  apply Rmult_le_compat_r; [apply Rlt_le, Rinv_0_lt_compat, HZZ|].
  assert (Ht2 : 0 < t * t) by nra.
  apply Rabs_le; split.
  - (* b Z' - a Z <= (t^2 - 1) b Z' *)
    assert (H5 : b * Z' <= (a * t) * (Z * t)) by (apply Rmult_le_compat; lra).
    assert (H6 : 0 <= b * Z' * ((t * t - 1) * (t * t - 1))).
    { apply Rmult_le_pos; [nra | apply Rle_0_sqr]. }
    apply (Rmult_le_reg_r (t * t)); [exact Ht2|].
    ring_simplify. ring_simplify in H5. ring_simplify in H6. nra.
  - (* a Z - b Z' <= (t^2 - 1) b Z' *)
    assert (H5 : a * Z <= (b * t) * (Z' * t)) by (apply Rmult_le_compat; lra).
    nra.
Qed.

(** The bound for softmax-weighted averages over any index list. *)
Lemma sp_softmax_average_bound : forall (l : list nat) (S S' v : nat -> R) delta V,
  0 <= delta -> 0 <= V ->
  (forall k, In k l -> Rabs (S' k - S k) <= delta) ->
  (forall k, In k l -> Rabs (v k) <= V) ->
  Rabs (rsum (map (fun k => exp (S' k) * v k) l) / rsum (map (fun k => exp (S' k)) l) -
        rsum (map (fun k => exp (S k) * v k) l) / rsum (map (fun k => exp (S k)) l))
  <= (exp (2 * delta) - 1) * V.
Proof.
  intros l S S' v delta V Hd HV HS Hv.
  set (t := exp delta).
  assert (Ht : 1 <= t) by (unfold t; rewrite <- exp_0; apply sp_exp_le; exact Hd).
  assert (Htt : exp (2 * delta) = t * t) by (unfold t; rewrite <- exp_plus; f_equal; ring).
  rewrite Htt.
  destruct l as [|k0 l'] eqn:E.
  - cbn [map]; unfold rsum; simpl.
    unfold Rdiv; rewrite Rmult_0_l, Rminus_0_r, Rabs_R0.
    apply Rmult_le_pos; nra.
  - rewrite <- E in *.
    set (Z := rsum (map (fun k => exp (S k)) l)).
    set (Z' := rsum (map (fun k => exp (S' k)) l)).
    assert (HZ : 0 < Z) by (unfold Z; rewrite E; apply bw_rsum_exp_pos).
    assert (HZ' : 0 < Z') by (unfold Z'; rewrite E; apply bw_rsum_exp_pos).
    assert (Hlo : forall k, In k l -> exp (S k) <= exp (S' k) * t).
    { intros k Hk; pose proof (sp_Rabs_le_inv _ _ (HS k Hk)).
      unfold t; rewrite <- exp_plus; apply sp_exp_le; lra. }
    assert (Hhi : forall k, In k l -> exp (S' k) <= exp (S k) * t).
    { intros k Hk; pose proof (sp_Rabs_le_inv _ _ (HS k Hk)).
      unfold t; rewrite <- exp_plus; apply sp_exp_le; lra. }
    assert (HZlo : Z <= Z' * t)
      by (unfold Z, Z'; rewrite <- bw_rsum_map_scal_r; apply bw_rsum_le; exact Hlo).
    assert (HZhi : Z' <= Z * t)
      by (unfold Z, Z'; rewrite <- bw_rsum_map_scal_r; apply bw_rsum_le; exact Hhi).
    rewrite <- !rsum_map_div, <- bw_rsum_map_minus.
    rewrite (rsum_map_ext _ (fun k => (exp (S' k) / Z' - exp (S k) / Z) * v k))
      by (intros k _; unfold Rdiv; ring).
    eapply Rle_trans; [apply bw_rsum_abs|].
    eapply Rle_trans.
    { apply (bw_rsum_le _ (fun k => (t * t - 1) * V * (exp (S k) / Z))).
      intros k Hk; rewrite Rabs_mult.
      replace ((t * t - 1) * V * (exp (S k) / Z)) with ((t * t - 1) * (exp (S k) / Z) * V)
        by ring.
      apply Rmult_le_compat; [apply Rabs_pos | apply Rabs_pos | | apply Hv; exact Hk].
      apply sp_ratio_bound; auto using exp_pos. }
    rewrite rsum_map_scal_l, rsum_map_div; fold Z.
    right; field; lra.
Qed.

(** Theorem: if two score rows [s], [s'] (same length [n >= 1], same mask)
    satisfy [|s'_j - s_j| <= delta] and the value column [c] satisfies
    [|v_jc| <= V], then coordinate [c] of the two-pass softmax output moves by
    at most [(exp (2 delta) - 1) * V]. *)
Theorem softmax_output_perturbation : forall d vis (ss ss' : list R) (vs : list (list R))
    delta V c,
  length ss = length vs -> length ss' = length vs -> (1 <= length vs)%nat ->
  (forall j, (j < length vs)%nat -> Rabs (nth j ss' 0 - nth j ss 0) <= delta) ->
  (forall j, (j < length vs)%nat -> Rabs (nth c (nth j vs []) 0) <= V) ->
  Rabs (nth c (fst (two_pass R_ops d (masked_keys vis ss' vs))) 0 -
        nth c (fst (two_pass R_ops d (masked_keys vis ss vs))) 0)
  <= (exp (2 * delta) - 1) * V.
Proof.
  intros d vis ss ss' vs delta V c Hl Hl' Hn HS HV.
  rewrite (bw_two_pass_index d vis ss' vs (eq_sym Hl') _ (bw_linear_nth c)).
  rewrite (bw_two_pass_index d vis ss vs (eq_sym Hl) _ (bw_linear_nth c)).
  rewrite Hl, Hl'.
  assert (Hd : 0 <= delta) by (eapply Rle_trans; [apply Rabs_pos | apply (HS 0%nat); lia]).
  assert (HV0 : 0 <= V) by (eapply Rle_trans; [apply Rabs_pos | apply (HV 0%nat); lia]).
  apply sp_softmax_average_bound; auto;
    intros k Hk; apply filter_In in Hk; destruct Hk as [Hk _]; apply in_seq in Hk;
    [apply HS | apply HV]; lia.
Qed.

(** The same bound with every key unmasked. *)
Corollary softmax_output_perturbation_unmasked : forall d (ss ss' : list R)
    (vs : list (list R)) delta V c,
  length ss = length vs -> length ss' = length vs -> (1 <= length vs)%nat ->
  (forall j, (j < length vs)%nat -> Rabs (nth j ss' 0 - nth j ss 0) <= delta) ->
  (forall j, (j < length vs)%nat -> Rabs (nth c (nth j vs []) 0) <= V) ->
  Rabs (nth c (fst (two_pass R_ops d (masked_keys (fun _ => true) ss' vs))) 0 -
        nth c (fst (two_pass R_ops d (masked_keys (fun _ => true) ss vs))) 0)
  <= (exp (2 * delta) - 1) * V.
Proof. intros; apply softmax_output_perturbation; auto. Qed.
