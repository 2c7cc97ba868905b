(** * The rounding of the exp2 argument charged per pair: the saved lse without the weights' uniform [X].

    PLAN (issue 28).  The forward kernel computes each weight as [p_j = exp2 (rnd (s_j - m'))]
    ([s_j] the fp32 base-2 score, [m'] the running max of [s_j]'s tile).  OnlineSoftmaxTile.v's
    [weight_close] charges the rounding of the ARGUMENT [s_j - m'] uniformly: the factor
    [tile_E K = (1 + ue) 2^(u K)], [K >= m' - s_j] for every key, which ForwardError.v's closed
    form [afe_bL] carries as [H = P1 (1 + ue) X], [X >= 2^(u K)], [K = 2 smax] a priori.  But
    the rounding is [rnd (s - m') = (s - m') (1 + delta)], [|delta| <= u] (a sum of two fp32
    numbers: [ff_add], purely relative), so
      p_j = exp2 (a_j - m'),   a_j := m' + rnd (s_j - m'),   |a_j - s_j| <= u (m' - s_j) <= u (M - s_j)
    ([M] the row's final max, [s_j <= m' <= M]): the kernel's [l] is, EXACTLY, the fold of the
    weights [exp2 (a_j - m')] of the "effective scores" [a_j], with an exactly represented
    argument.  So:
    - Which lemma changes: none of the existing statements.  The generic fold [run_inv]
      (OnlineSoftmaxTile.v) is instantiated at a new key type: each key annotated with
      [(a_j, m'_j)] ([ann]: the running max of its tile and its effective score); the running
      max is read from the annotation ([sc := m'_j]: [tmax] over a tile of equal annotations
      [m' >= m] is [m'], [ann_run]), the tile value is [tile_sum (exp2 (a_j - m))], its exact
      counterpart [exact_l m a] (which rescales and adds as [run_inv] asks).  Per tile the
      error is [exp2]'s own [(1 + ue)], [ee] ([tile_l_arg_inv], from [tile_terms_close] with
      [mp_exp2_err]): [H = (1 + u)^(B-1) (1 + ue)], no [2^(u K)].  The fold [l_fold_inv_arg]:
        inv (Gk H m0 t mt) (Rk K H Ry_l N Tt t) l (exact_l mt a) (exact_l mt a),
      [Gk]'s [2^(u (mt - m0))] (alpha's argument, [exp2 (rnd (m - m'))]: still a priori, [K])
      unchanged.
    - The new premise: the effective scores move log-sum-exp by at most [Dsc]: with the
      caller's per-key [d_j >= |s_j ln 2 - scale q.k_j|] and [g_j >= u ln 2 (s_i - s_j)] for
      every visible [i] (the gap to the row's max in nats times [u]),
        pp_shift keys (scale q.k) (d + g) <= Dsc
      ([Dsc >= ln sum_j P_j e^(d_j + g_j)], [P] the exact softmax), in place of
      [pp_shift .. d <= Dsc]; [|a_j ln 2 - scale q.k_j| <= d_j + g_j] per key.
    - Why sound: [l]'s relative bound is then against [La = sum_j 2^(a_j - mt)] ([La >= 1]:
      the key that attains [mt] has [a = mt], [rnd 0 = 0]), [mt ln 2 + ln La] is the
      log-sum-exp of the effective scores, and SavedLseError.v's [lse_of_l_rel] (the tail of
      the lse proof, now its own lemma) takes any such [La]; [lse_perturbation_pp] moves it to
      the exact scores by [pp_shift .. (d + g)].  The closed form of [l]'s bound is
      [afe_bL_arg]: [afe_bL] with [H = P1 (1 + ue)] ([X] only in alpha's factor and in the
      absolute [ee] term).  The kernel is not changed: same [l], same saved lse.

    Results:
    - [ann], [ann_run], [ann_in], [ann_fst], [ann_mrun]: the annotation and its facts.
    - [tile_l_arg_inv], [l_fold_inv_arg]: [l] against the effective scores' [exact_l].
    - [afe_bL_arg] ([afe_bL_arg_le]: at most [afe_bL]); [l_arg_fold_rel] ([|l - La| <= bL La], the
      premise of the lse proof) at [bL = afe_bL_arg] ([l_arg_rel_uniform]) and, with the tiles that
      keep the running max counted ([l_fold_inv_counted_arg]: ForwardAccRunningCounted.v's
      [run_inv_counted] at the annotated keys, its closed form [counted_bL_apriori_H]), at
      [CG := CGc] ([l_arg_rel_counted]).
    - [attention_lse_error_masked_dot_pp_arg_gen]: the lse proof for any such [bL];
      [attention_lse_error_masked_dot_pp_arg] and the H100 instance
      [attention_lse_error_masked_tf32x3_op_pp_arg]: the saved lse under any mask, bound
      [lse_bound u ea el ucl smax Dsc LN NL] with [bL = afe_bL_arg] in [NL] and the log2's
      domain; [attention_lse_error_masked_dot_counted_pp_arg],
      [attention_lse_error_masked_counted_tf32x3_op_pp_arg]: the same at [CG := CGc >= cg^C (1 + u)^Tt]
      with ForwardAccRunningCounted.v's count premise ([nrec .. <= C]).
    Not covered: the forward output's bound ([acc]'s fold, PerPairScoreError.v Part 3) still charges
    the argument uniformly; alpha's argument ([exp2 (rnd (m - m'))]) too (its [2^(u (mt - m0))]). *)

From Coq Require Import Reals ZArith List Lra Lia Arith.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.NoUnderflow FloatModel.DotError Attention.BackwardCorrect Attention.ScorePerturbation.
From Ojas Require Import FloatModel.MixedPrecision FloatModel.BlockedSum FloatModel.TensorCoreSum FloatModel.Tf32Product.
From Ojas Require Import FloatModel.Notations.
From Ojas Require Import Attention.Float.OnlineSoftmaxError Attention.Float.OnlineSoftmaxTile Attention.Float.ForwardError.
From Ojas Require Import Attention.Float.SavedLseError Attention.Float.PerPairScoreError Attention.Float.ForwardAccRunningCounted.
Import ListNotations.
Open Scope R_scope.

Section Ann.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

(** ** One tile of weights [exp2 (a - m)] with an exact argument *)

Definition tile_l_arg (m : R) (xs : list R) : R := tile_sum A_ (map (fun a => exp2 (a - m)) xs).

Lemma tile_l_arg_inv : forall m xs,
  inv ((1 + u) ^ (length xs - 1) * (1 + ue)) ((1 + u) ^ (length xs - 1) * (INR (length xs) * ee))
      (tile_l_arg m xs) (exact_l m xs) (exact_l m xs).
Proof.
  intros m xs; unfold inv, tile_l_arg, exact_l.
  rewrite <- (ost_rsum_const ee xs).
  apply tile_terms_close.
  - pose proof (mp_ue_nonneg M); lra.
  - intros; apply mp_exp2_fmt.
  - intros a _; rewrite Rabs_right by (left; apply Rpower_pos); lra.
  - intros a _; pose proof (mp_exp2_err M (a - m)); lra.
Qed.

(** ** The annotation: each key with its effective score [a] and its tile's running max [m'] *)

Variable T : Type.
Variable sc : T -> R.

Definition eff (m' s : R) : R := m' + rnd (s - m').

Fixpoint ann (m : R) (tiles : list (list T)) : list (list (T * (R * R))) :=
  match tiles with
  | nil => nil
  | tl :: rest => map (fun k => (k, (eff (tmax T sc m tl) (sc k), tmax T sc m tl))) tl :: ann (tmax T sc m tl) rest
  end.

Definition amax (e : T * (R * R)) : R := snd (snd e).
Definition aeff (e : T * (R * R)) : R := fst (snd e).

Definition yfa (m : R) (tl : list (T * (R * R))) : R := tile_l_arg m (map aeff tl).
Definition Yfa (m : R) (tl : list (T * (R * R))) : R := exact_l m (map aeff tl).

Lemma ppa_fold_left_map : forall {A B C} (f : A -> B -> A) (g : C -> B) l a,
  fold_left f (map g l) a = fold_left (fun a x => f a (g x)) l a.
Proof. intros A B C f g; induction l as [|x l IH]; intros a; [reflexivity | apply IH]. Qed.

Lemma tmax_ge : forall {K} (f : K -> R) tl m, m <= tmax K f m tl.
Proof.
  intros K f; unfold tmax; induction tl as [|k tl IH]; intros m; [simpl; lra |].
  cbn [fold_left]; eapply Rle_trans; [apply Rmax_l | apply IH].
Qed.

Lemma tmax_const : forall {K} (l : list K) m c, m <= c -> l <> [] ->
  fold_left (fun a _ => Rmax a c) l m = c.
Proof.
  intros K l; induction l as [|k l IH]; intros m c Hm Hl; [congruence |].
  cbn [fold_left]; rewrite Rmax_right by exact Hm.
  destruct l as [|k' l']; [reflexivity |]; apply IH; [lra | discriminate].
Qed.

Lemma ann_tmax : forall m tl,
  tmax (T * (R * R)) amax m (map (fun k => (k, (eff (tmax T sc m tl) (sc k), tmax T sc m tl))) tl) = tmax T sc m tl.
Proof.
  intros m tl; destruct tl as [|k tl']; [reflexivity |].
  unfold tmax at 1; rewrite ppa_fold_left_map; unfold amax; cbn [fst snd].
  apply tmax_const; [apply tmax_ge | discriminate].
Qed.

Lemma tmax_map_sc : forall m tl, tmax R (fun s => s) m (map sc tl) = tmax T sc m tl.
Proof. intros; unfold tmax; rewrite ppa_fold_left_map; reflexivity. Qed.

Lemma ann_mrun : forall tiles m, mrun (T * (R * R)) amax m (ann m tiles) = mrun T sc m tiles.
Proof.
  induction tiles as [|tl rest IH]; intros m; [reflexivity |].
  cbn [ann mrun]; rewrite ann_tmax; apply IH.
Qed.

(** The kernel's [l] is the fold of the annotated tiles. *)
Lemma ann_run : forall tiles m x,
  run M (T * (R * R)) amax yfa m x (ann m tiles) = l_run M m x (map (map sc) tiles).
Proof.
  unfold l_run; induction tiles as [|tl rest IH]; intros m x; [reflexivity |].
  cbn [ann run map]; rewrite ann_tmax, tmax_map_sc.
  set (m' := tmax T sc m tl).
  assert (E : yfa m' (map (fun k => (k, (eff m' (sc k), m'))) tl) = tile_l M m' (map sc tl)).
  { unfold yfa, tile_l_arg, tile_l, aeff; rewrite !map_map; cbn [fst snd]; f_equal.
    apply map_ext; intros k; unfold eff; f_equal; ring. }
  rewrite E; apply IH.
Qed.

Lemma ann_fst : forall tiles m, map fst (concat (ann m tiles)) = concat tiles.
Proof.
  induction tiles as [|tl rest IH]; intros m; [reflexivity |].
  cbn [ann concat]; rewrite map_app, map_map, IH; cbn [fst]; rewrite map_id; reflexivity.
Qed.

Lemma ann_length : forall tiles m, length (ann m tiles) = length tiles.
Proof. induction tiles as [|tl rest IH]; intros m; [reflexivity |]; cbn [ann length]; rewrite IH; reflexivity. Qed.

Lemma ann_concat_length : forall tiles m, length (concat (ann m tiles)) = length (concat tiles).
Proof. intros; rewrite <- (ann_fst tiles m), map_length; reflexivity. Qed.

Lemma ann_B : forall (B : nat) tiles m, Forall (fun tl => (length tl <= B)%nat) tiles ->
  Forall (fun tl => (length tl <= B)%nat) (ann m tiles).
Proof.
  intros B; induction tiles as [|tl rest IH]; intros m H; [constructor |].
  inversion H; subst; cbn [ann]; constructor; [rewrite map_length; assumption | apply IH; assumption].
Qed.

(** Each annotated key: its annotation is its tile's running max, a float between [m] and the
    last running max, at least its score; its effective score is [eff] of the two. *)
Lemma ann_in : forall tiles m e, fmt m -> (forall k, In k (concat tiles) -> fmt (sc k)) ->
  In e (concat (ann m tiles)) ->
  fmt (amax e) /\ sc (fst e) <= amax e /\ m <= amax e /\ amax e <= mrun T sc m tiles
  /\ aeff e = eff (amax e) (sc (fst e)).
Proof.
  induction tiles as [|tl rest IH]; intros m e Fm Fk He; [destruct He |].
  cbn [ann concat mrun] in *; apply in_app_or in He.
  assert (Ftl : forall k, In k tl -> fmt (sc k)) by (intros; apply Fk, in_or_app; left; assumption).
  assert (Frest : forall k, In k (concat rest) -> fmt (sc k)) by (intros; apply Fk, in_or_app; right; assumption).
  destruct (tmax_props M T sc tl m Fm Ftl) as [F1 [H1 H2]].
  destruct He as [He | He].
  - apply in_map_iff in He; destruct He as [k [<- Hk]]; unfold amax, aeff; cbn [fst snd].
    split; [exact F1 | split; [apply H2, Hk | split; [exact H1 | split; [| reflexivity]]]].
    apply (mrun_ge M T sc rest _ F1 Frest).
  - destruct (IH _ e F1 Frest He) as [E1 [E2 [E3 [E4 E5]]]].
    split; [exact E1 | split; [exact E2 | split; [lra | split; assumption]]].
Qed.

(** The effective score: at most the max, within [u (m' - s)] of the score. *)
Lemma eff_facts : forall m' s, fmt s -> fmt m' -> s <= m' ->
  eff m' s <= m' /\ Rabs (eff m' s - s) <= u * (m' - s).
Proof.
  intros m' s Fs Fm Hs.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (ff_u_lt_1 A_) as Hu1.
  destruct (rel_err_ex (s + - m') (rnd (s + - m')) u Hu (ff_add A_ s (- m') Fs (ff_fmt_opp A_ m' Fm)))
    as [d [Hd E]].
  unfold eff, Rminus; rewrite E.
  pose proof (sp_Rabs_le_inv _ _ Hd).
  replace (m' + (s + - m') * (1 + d) + - s) with ((s - m') * d) by ring.
  split; [nra |].
  rewrite Rabs_mult, Rabs_left1 by lra.
  replace (- (s - m')) with (m' - s) by ring.
  rewrite Rmult_comm; apply Rmult_le_compat_r; lra.
Qed.

Lemma eff_same : forall m', eff m' m' = m'.
Proof. intros; unfold eff; rewrite Rminus_diag_eq, (ff_rnd_id A_ 0 (ff_fmt_0 A_)) by reflexivity; ring. Qed.

(** ** [l] over the annotated tiles: no [2^(u K)] in the tile factor *)

Definition H_arg (B : nat) : R := (1 + u) ^ (B - 1) * (1 + ue).

Lemma H_arg_ge_1 : forall B, 1 <= H_arg B.
Proof.
  intros B; unfold H_arg; pose proof (ff_u_nonneg A_); pose proof (mp_ue_nonneg M).
  assert (1 <= (1 + u) ^ (B - 1)) by (apply pow_R1_Rle; lra). nra.
Qed.

(** The hypotheses of the folds ([run_inv], ForwardAccRunningCounted.v's [run_inv_counted]) at the
    annotated keys. *)
Lemma ann_tile_ok : forall (B : nat) (Pk : T * (R * R) -> Prop) (K m : R) tl, fmt m -> (length tl <= B)%nat ->
  (forall k, In k tl -> Pk k /\ fmt (amax k) /\ amax k <= m /\ m - amax k <= K) ->
  inv (H_arg B) (Ry_l M B) (yfa m tl) (Yfa m tl) (Yfa m tl).
Proof.
  intros B Pk K m tl _ Hl _; unfold yfa, Yfa.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (mp_eta_e_nonneg M) as Hee.
  eapply inv_mono; [apply exact_l_nonneg | | | apply tile_l_arg_inv]; rewrite map_length.
  - unfold H_arg; apply Rmult_le_compat_r; [pose proof (mp_ue_nonneg M); lra |]; apply Rle_pow; [lra | lia].
  - unfold Ry_l; apply Rmult_le_compat.
    + apply pow_le; lra.
    + apply Rmult_le_pos; [apply pos_INR | exact Hee].
    + apply Rle_pow; [lra | lia].
    + apply Rmult_le_compat_r; [exact Hee | apply le_INR, Hl].
Qed.

Lemma Yfa_abs : forall m tl, Rabs (Yfa m tl) <= Yfa m tl.
Proof. intros; unfold Yfa; rewrite Rabs_right by (apply Rle_ge, exact_l_nonneg); lra. Qed.

Lemma Yfa_resc : forall m m' tl, Yfa m tl * Rpower 2 (m - m') = Yfa m' tl.
Proof. intros; apply exact_l_resc. Qed.

Lemma Yfa_app : forall m a b, Yfa m (a ++ b) = Yfa m a + Yfa m b.
Proof. intros; unfold Yfa; rewrite map_app; apply exact_l_app. Qed.

Lemma Yfa_bound : forall (N : nat) m seen, (forall k, In k seen -> aeff k <= amax k /\ amax k <= m) ->
  (length seen <= N)%nat -> Yfa m seen <= INR N.
Proof.
  intros N m seen Hs Hl; unfold Yfa; apply exact_l_bound; [| rewrite map_length; exact Hl].
  intros q Hq; apply in_map_iff in Hq; destruct Hq as [e [<- He]]; destruct (Hs e He); split; [exact I | lra].
Qed.

Lemma ann_keys : forall (K m0 : R) tiles, fmt m0 -> (forall k, In k (concat tiles) -> fmt (sc k)) ->
  mrun T sc m0 tiles - m0 <= K ->
  forall q, In q (concat (ann m0 tiles)) ->
  aeff q <= amax q /\ fmt (amax q) /\ mrun (T * (R * R)) amax m0 (ann m0 tiles) - amax q <= K.
Proof.
  intros K m0 tiles Fm0 Fk HK0 e He; destruct (ann_in tiles m0 e Fm0 Fk He) as [E1 [E2 [E3 [E4 E5]]]].
  destruct (eff_facts (amax e) (sc (fst e)) (Fk _ ltac:(rewrite <- (ann_fst tiles m0); apply in_map, He)) E1 E2)
    as [G1 _].
  rewrite ann_mrun; split; [rewrite E5; exact G1 | split; [exact E1 | lra]].
Qed.

Lemma Yfa_nil : forall m, Yfa m [] = 0.
Proof. intros; unfold Yfa, exact_l; cbn [map]; unfold rsum; reflexivity. Qed.

Lemma l_fold_inv_arg : forall (K m0 : R) (B N Tt : nat) tiles,
  fmt m0 -> (forall k, In k (concat tiles) -> fmt (sc k)) ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (concat tiles) <= N)%nat -> (length tiles <= Tt)%nat ->
  mrun T sc m0 tiles - m0 <= K ->
  inv (Gk M (H_arg B) m0 (length tiles) (mrun T sc m0 tiles))
      (Rk M K (H_arg B) (Ry_l M B) (INR N) Tt (length tiles))
      (l_run M m0 0 (map (map sc) tiles))
      (exact_l (mrun T sc m0 tiles) (map aeff (concat (ann m0 tiles))))
      (exact_l (mrun T sc m0 tiles) (map aeff (concat (ann m0 tiles)))).
Proof.
  intros K m0 B N Tt tiles Fm0 Fk HBt HN HT HK0.
  pose proof (H_arg_ge_1 B) as HH.
  assert (HRl : 0 <= Ry_l M B).
  { unfold Ry_l; pose proof (ff_u_nonneg A_); pose proof (mp_eta_e_nonneg M).
    apply Rmult_le_pos; [apply pow_le; lra | apply Rmult_le_pos; [apply pos_INR | lra]]. }
  rewrite <- ann_run, <- (ann_mrun tiles m0), <- (ann_length tiles m0).
  change (exact_l ?m (map aeff ?xs)) with (Yfa m xs).
  replace (concat (ann m0 tiles)) with ([] ++ concat (ann m0 tiles)) by reflexivity.
  replace (length (ann m0 tiles)) with (0 + length (ann m0 tiles))%nat by reflexivity.
  apply (run_inv M (T * (R * R)) amax (fun e => aeff e <= amax e) yfa Yfa Yfa K (H_arg B) (Ry_l M B) (INR N) m0 B N Tt
           HH HRl (pos_INR N) (fun m tl => fmt_tile_sum (mp_a M) _) (ann_tile_ok B _ K) Yfa_abs Yfa_resc Yfa_resc Yfa_app Yfa_app
           (Yfa_bound N)); auto.
  - apply ff_fmt_0.
  - lra.
  - intros q [].
  - apply ann_keys; assumption.
  - apply ann_B, HBt.
  - cbn [length]; rewrite ann_concat_length; exact HN.
  - rewrite ann_length; exact HT.
  - rewrite ann_mrun; exact HK0.
  - unfold inv; rewrite Yfa_nil, Rminus_0_r, Rabs_R0, Rmult_0_r, Rplus_0_l.
    apply Rk_nonneg; [exact HH | exact HRl | apply pos_INR].
Qed.

Lemma ann_nchg : forall tiles m, nchg (T * (R * R)) amax m (ann m tiles) = nchg T sc m tiles.
Proof.
  induction tiles as [|tl rest IH]; intros m; [reflexivity |].
  cbn [ann nchg]; rewrite ann_tmax, IH; reflexivity.
Qed.

Lemma ann_nsame : forall tiles m, nsame (T * (R * R)) amax m (ann m tiles) = nsame T sc m tiles.
Proof.
  induction tiles as [|tl rest IH]; intros m; [reflexivity |].
  cbn [ann nsame]; rewrite ann_tmax, IH; reflexivity.
Qed.

(** [l_fold_inv_arg] with the tiles that keep the running max counted ([run_inv_counted]). *)
Lemma l_fold_inv_counted_arg : forall (K m0 : R) (B N Tt C : nat) (CGc : R) tiles,
  mp_exp2 M 0 = 1 -> cg M ^ C * (1 + u) ^ Tt <= CGc ->
  fmt m0 -> (forall k, In k (concat tiles) -> fmt (sc k)) ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (concat tiles) <= N)%nat -> (length tiles <= Tt)%nat -> (nchg T sc m0 tiles <= C)%nat ->
  mrun T sc m0 tiles - m0 <= K ->
  inv (Gc M (H_arg B) m0 (nchg T sc m0 tiles) (nsame T sc m0 tiles) (mrun T sc m0 tiles))
      (Rc M K (H_arg B) (Ry_l M B) (INR N) CGc (length tiles))
      (l_run M m0 0 (map (map sc) tiles))
      (exact_l (mrun T sc m0 tiles) (map aeff (concat (ann m0 tiles))))
      (exact_l (mrun T sc m0 tiles) (map aeff (concat (ann m0 tiles)))).
Proof.
  intros K m0 B N Tt C CGc tiles Hexp0 HCGc Fm0 Fk HBt HN HT HC HK0.
  pose proof (H_arg_ge_1 B) as HH.
  assert (HRl : 0 <= Ry_l M B).
  { unfold Ry_l; pose proof (ff_u_nonneg A_); pose proof (mp_eta_e_nonneg M).
    apply Rmult_le_pos; [apply pow_le; lra | apply Rmult_le_pos; [apply pos_INR | lra]]. }
  rewrite <- ann_run, <- (ann_mrun tiles m0), <- (ann_length tiles m0), <- (ann_nchg tiles m0), <- (ann_nsame tiles m0).
  change (exact_l ?m (map aeff ?xs)) with (Yfa m xs).
  replace (concat (ann m0 tiles)) with ([] ++ concat (ann m0 tiles)) by reflexivity.
  replace (length (ann m0 tiles)) with (0 + 0 + length (ann m0 tiles))%nat by reflexivity.
  replace (nchg _ amax m0 (ann m0 tiles)) with (0 + nchg _ amax m0 (ann m0 tiles))%nat by reflexivity.
  replace (nsame _ amax m0 (ann m0 tiles)) with (0 + nsame _ amax m0 (ann m0 tiles))%nat by reflexivity.
  apply (run_inv_counted M Hexp0 (T * (R * R)) amax (fun e => aeff e <= amax e) yfa Yfa Yfa K (H_arg B) (Ry_l M B)
           (INR N) m0 B N Tt HH HRl (pos_INR N) (fun m tl => fmt_tile_sum (mp_a M) _) (ann_tile_ok B _ K) Yfa_abs Yfa_resc
           Yfa_resc Yfa_app Yfa_app (Yfa_bound N) C CGc HCGc); auto.
  - apply ff_fmt_0.
  - lra.
  - intros q [].
  - apply ann_keys; assumption.
  - apply ann_B, HBt.
  - cbn [length]; rewrite ann_concat_length; exact HN.
  - rewrite ann_length; exact HT.
  - rewrite ann_nchg; exact HC.
  - rewrite ann_mrun; exact HK0.
  - unfold inv; rewrite Yfa_nil, Rminus_0_r, Rabs_R0, Rmult_0_r, Rplus_0_l.
    apply (Rc_nonneg M K (H_arg B) (Ry_l M B) (INR N) Tt HH HRl (pos_INR N) C CGc HCGc).
Qed.

End Ann.

(** ** The closed form of [l]'s relative bound: [afe_bL] with [H = P1 (1 + ue)] *)

Definition afe_bL_arg (u ue ee ea : R) (B N Tt : nat) (X P1 CG CR : R) : R :=
  let H := P1 * (1 + ue) in
  H * CG * X - 1 + INR Tt * CR * (((H * CG * X) * INR N * ee) * (1 + u) + ea + P1 * (INR B * ee)) * (1 + u).

(** Never above the uniform closed form: [afe_bL_arg <= afe_bL] for [X >= 1]. *)
Lemma afe_bL_arg_le : forall u ue ee ea B N Tt X P1 CG CR,
  0 <= u -> 0 <= ue -> 0 <= ee -> 0 <= P1 -> 0 <= CG -> 0 <= CR -> 1 <= X ->
  afe_bL_arg u ue ee ea B N Tt X P1 CG CR <= afe_bL u ue ee ea B N Tt X P1 CG CR.
Proof.
  intros u ue ee ea B N Tt X P1 CG CR Hu Hue Hee HP HG HC HX; unfold afe_bL_arg, afe_bL; cbv zeta.
  set (h := P1 * (1 + ue) * CG * X).
  assert (Hh : 0 <= h) by (unfold h; repeat apply Rmult_le_pos; lra).
  replace (P1 * ((1 + ue) * X) * CG * X) with (h * X) by (unfold h; ring).
  pose proof (pos_INR N); pose proof (pos_INR Tt).
  assert (E1 : h <= h * X) by nra.
  assert (E2 : h * INR N * ee * (1 + u) <= h * X * INR N * ee * (1 + u)).
  { apply Rmult_le_compat_r; [lra |]; apply Rmult_le_compat_r; [lra |]; apply Rmult_le_compat_r; lra. }
  assert (0 <= INR Tt * CR) by nra.
  assert (INR Tt * CR * (h * INR N * ee * (1 + u)) <= INR Tt * CR * (h * X * INR N * ee * (1 + u)))
    by (apply Rmult_le_compat_l; lra).
  nra.
Qed.

Section LArgRel.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

Lemma mrun_map_map : forall {K1 K2} (g : K1 -> K2) (f : K2 -> R) tiles m,
  mrun K2 f m (map (map g) tiles) = mrun K1 (fun k => f (g k)) m tiles.
Proof.
  intros K1 K2 g f; induction tiles as [|tl rest IH]; intros m; [reflexivity |].
  cbn [map mrun]; unfold tmax at 1; rewrite ppa_fold_left_map; apply IH.
Qed.

(** [l]'s relative bound against the effective scores' [La] (the premise of the lse proof,
    as SavedLseError.v's [l_fold_rel] is for the uniform one). *)
Definition l_arg_fold_rel (X : R) (B N Tt : nat) (bL : R) {T} (sc : T -> R) (m0 : R) (tiles : list (list T)) : Prop :=
  forall K, 0 <= K -> Rpower 2 (u * K) <= X -> fmt m0 -> (forall k, In k (concat tiles) -> fmt (sc k)) ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (concat tiles) <= N)%nat -> (length tiles <= Tt)%nat ->
  mrun T sc m0 tiles - m0 <= K ->
  1 <= exact_l (mrun T sc m0 tiles) (map (aeff T) (concat (ann M T sc m0 tiles))) ->
  Rabs (l_run M m0 0 (map (map sc) tiles) - exact_l (mrun T sc m0 tiles) (map (aeff T) (concat (ann M T sc m0 tiles))))
  <= bL * exact_l (mrun T sc m0 tiles) (map (aeff T) (concat (ann M T sc m0 tiles))).

Lemma l_arg_rel_uniform : forall {T} (sc : T -> R) (B N Tt : nat) (X P1 CG CR m0 : R) tiles,
  (1 + u) ^ (B - 1) <= P1 -> cg M ^ Tt <= CG -> cr M ^ Tt <= CR ->
  l_arg_fold_rel X B N Tt (afe_bL_arg u ue ee ea B N Tt X P1 CG CR) sc m0 tiles.
Proof.
  intros T sc B N Tt X P1 CG CR m0 tiles HP HG HC K HK HX Fm0 Fk HBt HN HT HK0 HL1.
  pose proof (l_fold_inv_arg M T sc K m0 B N Tt tiles Fm0 Fk HBt HN HT HK0) as Cl.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (mp_eta_e_nonneg M) as Hee; pose proof (mp_ue_nonneg M) as Hue.
  pose proof (H_arg_ge_1 M B) as HH.
  assert (HHb : H_arg M B <= P1 * (1 + ue)) by (unfold H_arg; apply Rmult_le_compat_r; lra).
  assert (HRy : 0 <= Ry_l M B)
    by (unfold Ry_l; apply Rmult_le_pos; [apply pow_le; lra | apply Rmult_le_pos; [apply pos_INR | lra]]).
  assert (HRy' : Ry_l M B <= P1 * (INR B * ee))
    by (unfold Ry_l; apply Rmult_le_compat_r; [apply Rmult_le_pos; [apply pos_INR | lra] | exact HP]).
  assert (Hm0t : m0 <= mrun T sc m0 tiles) by (apply (mrun_ge M T sc tiles m0 Fm0 Fk)).
  pose proof (Gk_apriori M (H_arg M B) (P1 * (1 + ue)) m0 Tt (length tiles) _ K X CG ltac:(lra) HT Hm0t HK0 HX HG).
  pose proof (Rk_apriori M K (H_arg M B) (P1 * (1 + ue)) (Ry_l M B) (P1 * (INR B * ee)) (INR N) Tt (length tiles)
                X CG CR ltac:(lra) ltac:(lra) (pos_INR N) HT HX HG HC).
  refine (l_rel_of_inv _ _ _ _ _ HL1 (Rk_nonneg M K (H_arg M B) (Ry_l M B) (INR N) Tt HH HRy (pos_INR N) (length tiles))
            _ Cl).
  unfold afe_bL_arg; cbv zeta; lra.
Qed.

(** At most [C] tiles changing the running max: [afe_bL_arg] at [CG := CGc]. *)
Lemma l_arg_rel_counted : forall {T} (sc : T -> R) (B N Tt C : nat) (X P1 CGc CR m0 : R) tiles,
  mp_exp2 M 0 = 1 -> (1 + u) ^ (B - 1) <= P1 -> cg M ^ C * (1 + u) ^ Tt <= CGc -> cr M ^ Tt <= CR ->
  (nchg T sc m0 tiles <= C)%nat ->
  l_arg_fold_rel X B N Tt (afe_bL_arg u ue ee ea B N Tt X P1 CGc CR) sc m0 tiles.
Proof.
  intros T sc B N Tt C X P1 CGc CR m0 tiles Hexp0 HP HCGc HC Hcnt K HK HX Fm0 Fk HBt HN HT HK0 HL1.
  pose proof (nchg_nsame T sc tiles m0) as Hns.
  pose proof (l_fold_inv_counted_arg M T sc K m0 B N Tt C CGc tiles Hexp0 HCGc Fm0 Fk HBt HN HT Hcnt HK0) as Cl.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (mp_ue_nonneg M) as Hue.
  assert (Hm0t : m0 <= mrun T sc m0 tiles) by (apply (mrun_ge M T sc tiles m0 Fm0 Fk)).
  assert (HHb : 1 <= H_arg M B <= P1 * (1 + ue))
    by (split; [apply H_arg_ge_1 | unfold H_arg; apply Rmult_le_compat_r; lra]).
  destruct (counted_bL_apriori_H M K m0 B N Tt C CGc (nchg T sc m0 tiles) (nsame T sc m0 tiles) (length tiles)
              _ X P1 CR _ _ HK Hcnt ltac:(lia) HT Hm0t HK0 HX HP HCGc HC HHb) as [HRl [_ bL1]].
  exact (l_rel_of_inv _ _ _ _ _ HL1 HRl bL1 Cl).
Qed.

End LArgRel.

(** ** The saved lse with the exp2 argument's rounding charged per pair *)

Section LseArg.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

Variable lg : R -> R.
Variables el lmin lmax : R.
Hypothesis lg_err : forall x, lmin <= x <= lmax -> Rabs (lg x - ln x / ln 2) <= el.

(** The lse proof for any relative bound [bL] of [l] against the effective scores ([l_arg_fold_rel] on the
    tiles of visible keys) and any bound [Sm] of the visible keys' computed scores (the magnitude of the
    final [rnd (rnd (m + lg l) * cl)]; the a-priori [smax] still sets [K = 2 smax] in [X]):
    [attention_lse_error_masked_dot_pp_arg_rowmax] ([l_arg_rel_uniform]) and
    [attention_lse_error_masked_dot_counted_pp_arg_rowmax] ([l_arg_rel_counted]) are its instances. *)
Lemma attention_lse_error_masked_dot_pp_arg_gen : forall (dotf : list R -> list R -> R) (g_rel g_abs : R) (q : list R) (c scale uc P X bL cl ucl LN NL : R) (d g : list R * R -> R) (Dsc Sm : R) (E B N Tt : nat)
    (vis : list R * R -> bool) (tiles : list (list (list R * R))),
  let sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv) in
  let st := kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) tiles in
  mp_exp2 M 0 = 1 -> (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  (forall k0 r rest, concat ((k0 :: r) :: rest) = filter vis (concat tiles) ->
     l_arg_fold_rel M X B N Tt bL sck (sck k0) ((k0 :: r) :: rest)) ->
  dot_model dotf E g_rel g_abs -> length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true -> length (fst kv) = E /\ dot_abs q (fst kv) <= P) ->
  0 < scale -> 0 <= uc -> Rabs (c * ln 2 - scale) <= uc * scale ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rpower 2 (u * (2 * score_max_de A_ scale uc P (g_rel * P + g_abs))) <= X ->
  bL < 1 ->
  0 <= ucl -> Rabs (cl - ln 2) <= ucl * ln 2 -> ln (INR N) <= LN -> - ln (1 - bL) <= NL ->
  lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  (forall kv, In kv (filter vis (concat tiles)) -> Rabs (sck kv * ln 2 - scale * dot_R q (fst kv)) <= d kv) ->
  (forall kv kv', In kv (filter vis (concat tiles)) -> In kv' (filter vis (concat tiles)) ->
     u * ln 2 * (sck kv' - sck kv) <= g kv) ->
  pp_shift (filter vis (concat tiles)) (fun kv => scale * dot_R q (fst kv)) (fun kv => d kv + g kv) <= Dsc ->
  (forall kv, In kv (filter vis (concat tiles)) -> Rabs (sck kv) <= Sm) ->
  Rabs (rnd (rnd (m_use (ks_m st) + lg (ks_l st)) * cl)
        - ln (rsum (map (fun kv => exp (scale * dot_R q (fst kv))) (filter vis (concat tiles)))))
  <= lse_bound u ea el ucl Sm Dsc LN NL.
Proof.
  intros dotf g_rel g_abs q c scale uc P X bL cl ucl LN NL d g Dsc Sm E B N Tt vis tiles sck st
    Hexp0 Hvis Hl Hdm Hq Hkeys Hs Huc Hc HBt HN HT HX HbL Hucl Hcl HLN HNL Hlmin Hlmax Hd Hg HDsc HSm.
  pose proof (ff_u_nonneg A_) as Hu; pose proof afe_ln2_bounds as [L2a L2b].
  destruct (kernel_run_visible_tiles_with M dotf c q vis B tiles Hexp0 Hvis HBt)
    as [k0 [r [rest [Ecat [HBf [Hlen Est]]]]]].
  unfold st, sck; rewrite Est; cbn [ks_m ks_l m_use]; fold sck.
  rewrite <- Ecat in HN, Hd, Hg, HDsc, HSm |- *.
  set (ft := (k0 :: r) :: rest) in *.
  assert (Hkeys' : forall kv, In kv (concat ft) -> length (fst kv) = E /\ dot_abs q (fst kv) <= P).
  { intros kv Hkv; rewrite Ecat in Hkv; apply filter_In in Hkv; destruct Hkv; auto. }
  destruct (kernel_scores_ok M dotf g_rel g_abs q c scale uc P E k0 r rest Hdm Hq Hkeys' Hs Huc Hc)
    as [_ [_ [Hsmax [_ [_ [_ [Hm0t [_ HmK]]]]]]]].
  set (smax := score_max_de A_ scale uc P (g_rel * P + g_abs)) in *.
  fold ft in Hm0t, HmK.
  set (m0 := score2_with A_ dotf c q (fst k0)) in *.
  assert (Emt : acc_m_run m0 (map (map (kv_pair_with M dotf c q)) ft) = mrun _ sck m0 ft)
    by (unfold acc_m_run; rewrite mrun_map_map; reflexivity).
  assert (El : map (map fst) (map (map (kv_pair_with M dotf c q)) ft) = map (map sck) ft).
  { rewrite map_map; apply map_ext; intros tl; rewrite map_map; reflexivity. }
  rewrite Emt in Hm0t, HmK |- *; rewrite El.
  set (mt := mrun _ sck m0 ft) in *.
  set (l := l_run M m0 0 (map (map sck) ft)).
  assert (Fk : forall kv, In kv (concat ft) -> fmt (sck kv)) by (intros; apply ff_rnd_fmt).
  assert (Fm0 : fmt m0) by apply ff_rnd_fmt.
  set (xs := concat (ann M _ sck m0 ft)).
  assert (Hfst : map fst xs = concat ft) by apply ann_fst.
  (* the key that attains the last running max *)
  assert (Hatt : exists kv, In kv (concat ft) /\ sck kv = mt).
  { destruct (mrun_attained sck ft m0) as [Em | Hq']; [| exact Hq'].
    exists k0; split; [left; reflexivity | unfold mt; rewrite Em; reflexivity]. }
  destruct Hatt as [kt [Hkt Ekt]].
  assert (Hmt : Rabs mt <= Sm) by (rewrite <- Ekt; apply HSm, Hkt).
  assert (Hin : forall kv, In kv (concat ft) -> exists e, In e xs /\ fst e = kv).
  { intros kv Hkv; rewrite <- Hfst in Hkv; apply in_map_iff in Hkv; destruct Hkv as [e [Ee He]].
    exists e; split; assumption. }
  assert (He : forall e, In e xs ->
            aeff _ e <= mt /\ Rabs (aeff _ e - sck (fst e)) <= u * (mt - sck (fst e)) /\ In (fst e) (concat ft)).
  { intros e Hex.
    assert (Hk : In (fst e) (concat ft)) by (rewrite <- Hfst; apply in_map, Hex).
    destruct (ann_in M _ sck ft m0 e Fm0 Fk Hex) as [E1 [E2 [E3 [E4 E5]]]].
    destruct (eff_facts M (amax _ e) (sck (fst e)) (Fk _ Hk) E1 E2) as [G1 G2].
    fold mt in E4; rewrite E5; split; [lra | split; [| exact Hk]].
    eapply Rle_trans; [exact G2 |]; apply Rmult_le_compat_l; lra. }
  set (La := exact_l mt (map (aeff _) xs)).
  assert (HL1 : 1 <= La).
  { destruct (Hin kt Hkt) as [e [Hex Ee]].
    destruct (ann_in M _ sck ft m0 e Fm0 Fk Hex) as [E1 [E2 [E3 [E4 E5]]]].
    rewrite Ee, Ekt in E2, E5; fold mt in E4.
    assert (Ea : amax _ e = mt) by lra.
    rewrite Ea, eff_same in E5.
    unfold La, exact_l; rewrite map_map.
    replace 1 with (Rpower 2 (aeff _ e - mt)) by (rewrite E5, Rminus_diag_eq, Rpower_O by (reflexivity || lra); reflexivity).
    apply ost_rsum_ge_in; [| apply in_map_iff; exists e; split; [reflexivity | exact Hex]].
    intros y Hy; apply in_map_iff in Hy; destruct Hy as [z [<- _]]; left; apply Rpower_pos. }
  assert (HLN' : La <= INR N).
  { unfold La; apply exact_l_bound; [| rewrite map_length, <- Hfst, map_length in *; exact HN].
    intros a Ha; apply in_map_iff in Ha; destruct Ha as [e [<- Hex]]; split; [exact I | apply (He e Hex)]. }
  assert (Hrel : Rabs (l - La) <= bL * La).
  { pose proof (Hl k0 r rest Ecat (2 * smax)) as Hl'; change (sck k0) with m0 in Hl'; fold mt xs La l in Hl'.
    apply Hl'; auto; [lra | fold ft; lia]. }
  set (Sg := rsum (map (fun e => exp (aeff _ e * ln 2)) xs)).
  assert (ELc : La = exp (- (mt * ln 2)) * Sg).
  { unfold La, exact_l, Sg; rewrite map_map, <- rsum_map_scal_l; apply rsum_map_ext; intros e _.
    unfold Rpower; rewrite <- exp_plus; f_equal; ring. }
  assert (HSg : 0 < Sg) by (unfold Sg, xs, ft; cbn [ann concat map app]; apply (bw_rsum_exp_pos (fun e => aeff _ e * ln 2))).
  apply (lse_of_l_rel M lg el lmin lmax lg_err mt l La Sg _ bL Sm cl ucl LN NL Dsc N HL1 HLN' Hrel ELc HSg Hmt
           HbL Hucl Hcl HLN HNL Hlmin Hlmax).
  (* the effective scores against the exact ones *)
  assert (Hne : xs <> []) by (unfold xs, ft; cbn [ann concat map app]; discriminate).
  pose proof (lse_perturbation_pp xs (fun e => scale * dot_R q (fst (fst e))) (fun e => aeff _ e * ln 2)
                (fun e => d (fst e) + g (fst e)) Hne) as Hpp.
  assert (Eh : forall (f : list R * R -> R), rsum (map (fun e => f (fst e)) xs) = rsum (map f (concat ft)))
    by (intros f; rewrite <- Hfst, map_map; reflexivity).
  unfold pp_shift in Hpp, HDsc; rewrite !(Eh (fun kv => exp (scale * dot_R q (fst kv) + (d kv + g kv)))) in Hpp.
  rewrite (Eh (fun kv => exp (scale * dot_R q (fst kv)))) in Hpp.
  fold Sg in Hpp.
  eapply Rle_trans; [apply Hpp | exact HDsc].
  intros e Hex; destruct (He e Hex) as [G1 [G2 G3]].
  pose proof (Hd (fst e) G3) as D1; pose proof (Hg (fst e) kt G3 Hkt) as D2; rewrite Ekt in D2.
  replace (aeff _ e * ln 2 - scale * dot_R q (fst (fst e)))
    with ((aeff _ e - sck (fst e)) * ln 2 + (sck (fst e) * ln 2 - scale * dot_R q (fst (fst e)))) by ring.
  eapply Rle_trans; [apply Rabs_triang |]; rewrite Rabs_mult, (Rabs_right (ln 2)) by lra.
  assert (Rabs (aeff _ e - sck (fst e)) * ln 2 <= u * (mt - sck (fst e)) * ln 2) by (apply Rmult_le_compat_r; lra).
  lra.
Qed.

(** Every visible key's computed score is within the a-priori [smax] ([kernel_scores_ok] at that key):
    the [_rowmax] theorems at [Sm := smax] are the theorems before them. *)
Lemma pp_arg_sck_smax : forall (dotf : list R -> list R -> R) (g_rel g_abs : R) (q : list R) (c scale uc P : R) (E : nat)
    (vis : list R * R -> bool) (tiles : list (list (list R * R))),
  dot_model dotf E g_rel g_abs -> length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true -> length (fst kv) = E /\ dot_abs q (fst kv) <= P) ->
  0 < scale -> 0 <= uc -> Rabs (c * ln 2 - scale) <= uc * scale ->
  forall kv, In kv (filter vis (concat tiles)) ->
  Rabs (score2_with A_ dotf c q (fst kv)) <= score_max_de A_ scale uc P (g_rel * P + g_abs).
Proof.
  intros dotf g_rel g_abs q c scale uc P E vis tiles Hdm Hq Hkeys Hs Huc Hc kv Hkv.
  apply filter_In in Hkv; destruct Hkv as [Hin Hv].
  assert (Hk1 : forall kv', In kv' (concat [[kv]]) -> length (fst kv') = E /\ dot_abs q (fst kv') <= P)
    by (intros kv' [<- | []]; exact (Hkeys kv Hin Hv)).
  destruct (kernel_scores_ok M dotf g_rel g_abs q c scale uc P E kv [] [] Hdm Hq Hk1 Hs Huc Hc) as [Hsc _].
  exact (proj2 (Hsc kv (or_introl eq_refl))).
Qed.

(** [attention_lse_error_masked_dot_pp_arg] with the caller's bound [Sm] of the visible keys' computed
    scores (a per-row max) in place of the a-priori [smax] in [lse_bound]. *)
Theorem attention_lse_error_masked_dot_pp_arg_rowmax : forall (dotf : list R -> list R -> R) (g_rel g_abs : R) (q : list R) (c scale uc P X P1 CG CR cl ucl LN NL : R) (d g : list R * R -> R) (Dsc Sm : R) (E B N Tt : nat)
    (vis : list R * R -> bool) (tiles : list (list (list R * R))),
  let sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv) in
  let st := kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) tiles in
  let bL := afe_bL_arg u ue ee ea B N Tt X P1 CG CR in
  mp_exp2 M 0 = 1 -> (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  dot_model dotf E g_rel g_abs -> length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true -> length (fst kv) = E /\ dot_abs q (fst kv) <= P) ->
  0 < scale -> 0 <= uc -> Rabs (c * ln 2 - scale) <= uc * scale ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rpower 2 (u * (2 * score_max_de A_ scale uc P (g_rel * P + g_abs))) <= X ->
  (1 + u) ^ (B - 1) <= P1 -> cg M ^ Tt <= CG -> cr M ^ Tt <= CR -> bL < 1 ->
  0 <= ucl -> Rabs (cl - ln 2) <= ucl * ln 2 -> ln (INR N) <= LN -> - ln (1 - bL) <= NL ->
  lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  (forall kv, In kv (filter vis (concat tiles)) -> Rabs (sck kv * ln 2 - scale * dot_R q (fst kv)) <= d kv) ->
  (forall kv kv', In kv (filter vis (concat tiles)) -> In kv' (filter vis (concat tiles)) ->
     u * ln 2 * (sck kv' - sck kv) <= g kv) ->
  pp_shift (filter vis (concat tiles)) (fun kv => scale * dot_R q (fst kv)) (fun kv => d kv + g kv) <= Dsc ->
  (forall kv, In kv (filter vis (concat tiles)) -> Rabs (sck kv) <= Sm) ->
  Rabs (rnd (rnd (m_use (ks_m st) + lg (ks_l st)) * cl)
        - ln (rsum (map (fun kv => exp (scale * dot_R q (fst kv))) (filter vis (concat tiles)))))
  <= lse_bound u ea el ucl Sm Dsc LN NL.
Proof.
  intros dotf g_rel g_abs q c scale uc P X P1 CG CR cl ucl LN NL d g Dsc Sm E B N Tt vis tiles sck st bL
    Hexp0 Hvis Hdm Hq Hkeys Hs Huc Hc HBt HN HT HX HP HG HC.
  exact (attention_lse_error_masked_dot_pp_arg_gen dotf g_rel g_abs q c scale uc P X bL cl ucl LN NL d g Dsc Sm E B N Tt
           vis tiles Hexp0 Hvis (fun _ _ _ _ => l_arg_rel_uniform M sck B N Tt X P1 CG CR _ _ HP HG HC)
           Hdm Hq Hkeys Hs Huc Hc HBt HN HT HX).
Qed.

(** PerPairScoreError.v's [attention_lse_error_masked_dot_pp] with [bL = afe_bL_arg] (no [X] in
    the weights' factor) and the per-pair premise [pp_shift .. (d + g) <= Dsc], [g_j] at least
    [u ln 2] times the gap of key [j]'s computed score to every visible key's. *)
Theorem attention_lse_error_masked_dot_pp_arg : forall (dotf : list R -> list R -> R) (g_rel g_abs : R) (q : list R) (c scale uc P X P1 CG CR cl ucl LN NL : R) (d g : list R * R -> R) (Dsc : R) (E B N Tt : nat)
    (vis : list R * R -> bool) (tiles : list (list (list R * R))),
  let sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv) in
  let st := kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) tiles in
  let bL := afe_bL_arg u ue ee ea B N Tt X P1 CG CR in
  mp_exp2 M 0 = 1 -> (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  dot_model dotf E g_rel g_abs -> length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true -> length (fst kv) = E /\ dot_abs q (fst kv) <= P) ->
  0 < scale -> 0 <= uc -> Rabs (c * ln 2 - scale) <= uc * scale ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rpower 2 (u * (2 * score_max_de A_ scale uc P (g_rel * P + g_abs))) <= X ->
  (1 + u) ^ (B - 1) <= P1 -> cg M ^ Tt <= CG -> cr M ^ Tt <= CR -> bL < 1 ->
  0 <= ucl -> Rabs (cl - ln 2) <= ucl * ln 2 -> ln (INR N) <= LN -> - ln (1 - bL) <= NL ->
  lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  (forall kv, In kv (filter vis (concat tiles)) -> Rabs (sck kv * ln 2 - scale * dot_R q (fst kv)) <= d kv) ->
  (forall kv kv', In kv (filter vis (concat tiles)) -> In kv' (filter vis (concat tiles)) ->
     u * ln 2 * (sck kv' - sck kv) <= g kv) ->
  pp_shift (filter vis (concat tiles)) (fun kv => scale * dot_R q (fst kv)) (fun kv => d kv + g kv) <= Dsc ->
  Rabs (rnd (rnd (m_use (ks_m st) + lg (ks_l st)) * cl)
        - ln (rsum (map (fun kv => exp (scale * dot_R q (fst kv))) (filter vis (concat tiles)))))
  <= lse_bound u ea el ucl (score_max_de A_ scale uc P (g_rel * P + g_abs)) Dsc LN NL.
Proof.
  intros dotf g_rel g_abs q c scale uc P X P1 CG CR cl ucl LN NL d g Dsc E B N Tt vis tiles sck st bL
    Hexp0 Hvis Hdm Hq Hkeys Hs Huc Hc HBt HN HT HX HP HG HC HbL Hucl Hcl HLN HNL Hlmin Hlmax Hd Hg HDsc.
  exact (attention_lse_error_masked_dot_pp_arg_rowmax dotf g_rel g_abs q c scale uc P X P1 CG CR cl ucl LN NL d g Dsc
           _ E B N Tt vis tiles Hexp0 Hvis Hdm Hq Hkeys Hs Huc Hc HBt HN HT HX HP HG HC HbL Hucl Hcl HLN HNL
           Hlmin Hlmax Hd Hg HDsc (pp_arg_sck_smax dotf g_rel g_abs q c scale uc P E vis tiles Hdm Hq Hkeys Hs Huc Hc)).
Qed.

(** [attention_lse_error_masked_dot_counted_pp_arg] with the caller's per-row bound [Sm]. *)
Theorem attention_lse_error_masked_dot_counted_pp_arg_rowmax : forall (dotf : list R -> list R -> R) (g_rel g_abs : R) (q : list R) (c scale uc P X P1 CR cl ucl LN NL : R) (d g : list R * R -> R) (Dsc Sm : R) (E B N Tt : nat)
    (C : nat) (CGc : R) (vis : list R * R -> bool) (tiles : list (list (list R * R))),
  let sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv) in
  let st := kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) tiles in
  let bL := afe_bL_arg u ue ee ea B N Tt X P1 CGc CR in
  mp_exp2 M 0 = 1 -> (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  dot_model dotf E g_rel g_abs -> length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true -> length (fst kv) = E /\ dot_abs q (fst kv) <= P) ->
  0 < scale -> 0 <= uc -> Rabs (c * ln 2 - scale) <= uc * scale ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rpower 2 (u * (2 * score_max_de A_ scale uc P (g_rel * P + g_abs))) <= X ->
  (1 + u) ^ (B - 1) <= P1 -> cg M ^ C * (1 + u) ^ Tt <= CGc -> cr M ^ Tt <= CR -> bL < 1 ->
  0 <= ucl -> Rabs (cl - ln 2) <= ucl * ln 2 -> ln (INR N) <= LN -> - ln (1 - bL) <= NL ->
  lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  (forall kv, In kv (filter vis (concat tiles)) -> Rabs (sck kv * ln 2 - scale * dot_R q (fst kv)) <= d kv) ->
  (forall kv kv', In kv (filter vis (concat tiles)) -> In kv' (filter vis (concat tiles)) ->
     u * ln 2 * (sck kv' - sck kv) <= g kv) ->
  pp_shift (filter vis (concat tiles)) (fun kv => scale * dot_R q (fst kv)) (fun kv => d kv + g kv) <= Dsc ->
  (forall k0 rs, filter vis (concat tiles) = k0 :: rs ->
     le (nrec (list R * R) (fun kv => scale * dot_R q (fst kv) - d kv) (fun kv => scale * dot_R q (fst kv) + d kv)
           (scale * dot_R q (fst k0) - d k0) rs) C) ->
  (forall kv, In kv (filter vis (concat tiles)) -> Rabs (sck kv) <= Sm) ->
  Rabs (rnd (rnd (m_use (ks_m st) + lg (ks_l st)) * cl)
        - ln (rsum (map (fun kv => exp (scale * dot_R q (fst kv))) (filter vis (concat tiles)))))
  <= lse_bound u ea el ucl Sm Dsc LN NL.
Proof.
  intros dotf g_rel g_abs q c scale uc P X P1 CR cl ucl LN NL d g Dsc Sm E B N Tt C CGc vis tiles sck st bL
    Hexp0 Hvis Hdm Hq Hkeys Hs Huc Hc HBt HN HT HX HP HCGc HC HbL Hucl Hcl HLN HNL Hlmin Hlmax Hd Hg HDsc Hrec HSm.
  apply (attention_lse_error_masked_dot_pp_arg_gen dotf g_rel g_abs q c scale uc P X bL cl ucl LN NL d g Dsc Sm E B N Tt
           vis tiles Hexp0 Hvis); try assumption.
  intros k0 r rest Ecat; apply (l_arg_rel_counted M sck B N Tt C X P1 CGc CR _ _ Hexp0 HP HCGc HC).
  assert (E1 : map (map fst) (map (map (kv_pair_with M dotf c q)) ((k0 :: r) :: rest)) = map (map sck) ((k0 :: r) :: rest))
    by (rewrite map_map; apply map_ext; intros tl; rewrite map_map; reflexivity).
  pose proof (nchg_kv_le M dotf c scale q d C k0 r rest ltac:(rewrite Ecat; exact Hd)
                ltac:(apply Hrec; rewrite <- Ecat; reflexivity)) as Hn.
  rewrite E1, <- (nchg_map_comm sck (fun s => s)) in Hn; exact Hn.
Qed.

(** [attention_lse_error_masked_dot_pp_arg] with the tiles that keep the running max counted, as
    ForwardAccRunningCounted.v's [attention_lse_error_masked_dot_counted_pp]: [bL = afe_bL_arg] at
    [CG := CGc >= cg^C (1 + u)^Tt], [C] at least the row's [nrec]. *)
Theorem attention_lse_error_masked_dot_counted_pp_arg : forall (dotf : list R -> list R -> R) (g_rel g_abs : R) (q : list R) (c scale uc P X P1 CR cl ucl LN NL : R) (d g : list R * R -> R) (Dsc : R) (E B N Tt : nat)
    (C : nat) (CGc : R) (vis : list R * R -> bool) (tiles : list (list (list R * R))),
  let sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv) in
  let st := kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) tiles in
  let bL := afe_bL_arg u ue ee ea B N Tt X P1 CGc CR in
  mp_exp2 M 0 = 1 -> (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  dot_model dotf E g_rel g_abs -> length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true -> length (fst kv) = E /\ dot_abs q (fst kv) <= P) ->
  0 < scale -> 0 <= uc -> Rabs (c * ln 2 - scale) <= uc * scale ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rpower 2 (u * (2 * score_max_de A_ scale uc P (g_rel * P + g_abs))) <= X ->
  (1 + u) ^ (B - 1) <= P1 -> cg M ^ C * (1 + u) ^ Tt <= CGc -> cr M ^ Tt <= CR -> bL < 1 ->
  0 <= ucl -> Rabs (cl - ln 2) <= ucl * ln 2 -> ln (INR N) <= LN -> - ln (1 - bL) <= NL ->
  lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  (forall kv, In kv (filter vis (concat tiles)) -> Rabs (sck kv * ln 2 - scale * dot_R q (fst kv)) <= d kv) ->
  (forall kv kv', In kv (filter vis (concat tiles)) -> In kv' (filter vis (concat tiles)) ->
     u * ln 2 * (sck kv' - sck kv) <= g kv) ->
  pp_shift (filter vis (concat tiles)) (fun kv => scale * dot_R q (fst kv)) (fun kv => d kv + g kv) <= Dsc ->
  (forall k0 rs, filter vis (concat tiles) = k0 :: rs ->
     le (nrec (list R * R) (fun kv => scale * dot_R q (fst kv) - d kv) (fun kv => scale * dot_R q (fst kv) + d kv)
           (scale * dot_R q (fst k0) - d k0) rs) C) ->
  Rabs (rnd (rnd (m_use (ks_m st) + lg (ks_l st)) * cl)
        - ln (rsum (map (fun kv => exp (scale * dot_R q (fst kv))) (filter vis (concat tiles)))))
  <= lse_bound u ea el ucl (score_max_de A_ scale uc P (g_rel * P + g_abs)) Dsc LN NL.
Proof.
  intros dotf g_rel g_abs q c scale uc P X P1 CR cl ucl LN NL d g Dsc E B N Tt C CGc vis tiles sck st bL
    Hexp0 Hvis Hdm Hq Hkeys Hs Huc Hc HBt HN HT HX HP HCGc HC HbL Hucl Hcl HLN HNL Hlmin Hlmax Hd Hg HDsc Hrec.
  exact (attention_lse_error_masked_dot_counted_pp_arg_rowmax dotf g_rel g_abs q c scale uc P X P1 CR cl ucl LN NL d g
           Dsc _ E B N Tt C CGc vis tiles Hexp0 Hvis Hdm Hq Hkeys Hs Huc Hc HBt HN HT HX HP HCGc HC HbL Hucl Hcl HLN
           HNL Hlmin Hlmax Hd Hg HDsc Hrec (pp_arg_sck_smax dotf g_rel g_abs q c scale uc P E vis tiles Hdm Hq Hkeys Hs Huc Hc)).
Qed.

(** [attention_lse_error_masked_tf32x3_op_pp_arg] with the caller's per-row bound [Sm]. *)
Theorem attention_lse_error_masked_tf32x3_op_pp_arg_rowmax : forall (out : R -> R) (ur : R) (F : Z) (k qb : nat)
    (q : list R) (c scale uc P X P1 CG CR cl ucl LN NL : R) (d g : list R * R -> R) (Dsc Sm : R) (E B N Tt : nat)
    (vis : list R * R -> bool) (tiles : list (list (list R * R))),
  let dotf := tf32x3_dot_tc_op tf32_rna tf32_rz (tc_align_op F) out k in
  let de := tf32x3_tc_rel (bpow radix2 (1 - F)) ur k qb * P + 0 in
  let sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv) in
  let st := kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) tiles in
  let bL := afe_bL_arg u ue ee ea B N Tt X P1 CG CR in
  0 <= ur -> (forall x, Rabs (out x - x) <= ur * Rabs x) ->
  (1 <= k)%nat -> (1 <= qb)%nat -> (E <= qb * k)%nat ->
  INR (3 * qb) * tc_delta (bpow radix2 (1 - F)) ur k < 1 ->
  mp_exp2 M 0 = 1 -> (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true -> length (fst kv) = E /\ dot_abs q (fst kv) <= P) ->
  0 < scale -> 0 <= uc -> Rabs (c * ln 2 - scale) <= uc * scale ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rpower 2 (u * (2 * score_max_de A_ scale uc P de)) <= X ->
  (1 + u) ^ (B - 1) <= P1 -> cg M ^ Tt <= CG -> cr M ^ Tt <= CR -> bL < 1 ->
  0 <= ucl -> Rabs (cl - ln 2) <= ucl * ln 2 -> ln (INR N) <= LN -> - ln (1 - bL) <= NL ->
  lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  (forall kv, In kv (filter vis (concat tiles)) -> Rabs (sck kv * ln 2 - scale * dot_R q (fst kv)) <= d kv) ->
  (forall kv kv', In kv (filter vis (concat tiles)) -> In kv' (filter vis (concat tiles)) ->
     u * ln 2 * (sck kv' - sck kv) <= g kv) ->
  pp_shift (filter vis (concat tiles)) (fun kv => scale * dot_R q (fst kv)) (fun kv => d kv + g kv) <= Dsc ->
  (forall kv, In kv (filter vis (concat tiles)) -> Rabs (sck kv) <= Sm) ->
  Rabs (rnd (rnd (m_use (ks_m st) + lg (ks_l st)) * cl)
        - ln (rsum (map (fun kv => exp (scale * dot_R q (fst kv))) (filter vis (concat tiles)))))
  <= lse_bound u ea el ucl Sm Dsc LN NL.
Proof.
  intros out ur F k qb q c scale uc P X P1 CG CR cl ucl LN NL d g Dsc Sm E B N Tt vis tiles dotf de sck st bL
    Hur Hout Hk Hq HE Hn Hexp0 Hvis.
  exact (attention_lse_error_masked_dot_pp_arg_rowmax dotf _ 0 q c scale uc P X P1 CG CR cl ucl LN NL d g Dsc Sm
           E B N Tt vis tiles Hexp0 Hvis (tf32x3_tc_op_dot_model out ur F k qb E Hur Hout Hk Hq HE Hn)).
Qed.

(** The float32 lse on the H100's tensor cores, 3xTF32 scores ([tf32x3_tc_op_dot_model]). *)
Theorem attention_lse_error_masked_tf32x3_op_pp_arg : forall (out : R -> R) (ur : R) (F : Z) (k qb : nat)
    (q : list R) (c scale uc P X P1 CG CR cl ucl LN NL : R) (d g : list R * R -> R) (Dsc : R) (E B N Tt : nat)
    (vis : list R * R -> bool) (tiles : list (list (list R * R))),
  let dotf := tf32x3_dot_tc_op tf32_rna tf32_rz (tc_align_op F) out k in
  let de := tf32x3_tc_rel (bpow radix2 (1 - F)) ur k qb * P + 0 in
  let sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv) in
  let st := kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) tiles in
  let bL := afe_bL_arg u ue ee ea B N Tt X P1 CG CR in
  0 <= ur -> (forall x, Rabs (out x - x) <= ur * Rabs x) ->
  (1 <= k)%nat -> (1 <= qb)%nat -> (E <= qb * k)%nat ->
  INR (3 * qb) * tc_delta (bpow radix2 (1 - F)) ur k < 1 ->
  mp_exp2 M 0 = 1 -> (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true -> length (fst kv) = E /\ dot_abs q (fst kv) <= P) ->
  0 < scale -> 0 <= uc -> Rabs (c * ln 2 - scale) <= uc * scale ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rpower 2 (u * (2 * score_max_de A_ scale uc P de)) <= X ->
  (1 + u) ^ (B - 1) <= P1 -> cg M ^ Tt <= CG -> cr M ^ Tt <= CR -> bL < 1 ->
  0 <= ucl -> Rabs (cl - ln 2) <= ucl * ln 2 -> ln (INR N) <= LN -> - ln (1 - bL) <= NL ->
  lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  (forall kv, In kv (filter vis (concat tiles)) -> Rabs (sck kv * ln 2 - scale * dot_R q (fst kv)) <= d kv) ->
  (forall kv kv', In kv (filter vis (concat tiles)) -> In kv' (filter vis (concat tiles)) ->
     u * ln 2 * (sck kv' - sck kv) <= g kv) ->
  pp_shift (filter vis (concat tiles)) (fun kv => scale * dot_R q (fst kv)) (fun kv => d kv + g kv) <= Dsc ->
  Rabs (rnd (rnd (m_use (ks_m st) + lg (ks_l st)) * cl)
        - ln (rsum (map (fun kv => exp (scale * dot_R q (fst kv))) (filter vis (concat tiles)))))
  <= lse_bound u ea el ucl (score_max_de A_ scale uc P de) Dsc LN NL.
Proof.
  intros out ur F k qb q c scale uc P X P1 CG CR cl ucl LN NL d g Dsc E B N Tt vis tiles dotf de sck st bL
    Hur Hout Hk Hq HE Hn Hexp0 Hvis.
  exact (attention_lse_error_masked_dot_pp_arg dotf _ 0 q c scale uc P X P1 CG CR cl ucl LN NL d g Dsc E B N Tt vis tiles
           Hexp0 Hvis (tf32x3_tc_op_dot_model out ur F k qb E Hur Hout Hk Hq HE Hn)).
Qed.

(** [attention_lse_error_masked_counted_tf32x3_op_pp_arg] with the caller's per-row bound [Sm]. *)
Theorem attention_lse_error_masked_counted_tf32x3_op_pp_arg_rowmax : forall (out : R -> R) (ur : R) (F : Z) (k qb : nat)
    (q : list R) (c scale uc P X P1 CR cl ucl LN NL : R) (d g : list R * R -> R) (Dsc Sm : R) (E B N Tt : nat)
    (C : nat) (CGc : R) (vis : list R * R -> bool) (tiles : list (list (list R * R))),
  let dotf := tf32x3_dot_tc_op tf32_rna tf32_rz (tc_align_op F) out k in
  let de := tf32x3_tc_rel (bpow radix2 (1 - F)) ur k qb * P + 0 in
  let sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv) in
  let st := kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) tiles in
  let bL := afe_bL_arg u ue ee ea B N Tt X P1 CGc CR in
  0 <= ur -> (forall x, Rabs (out x - x) <= ur * Rabs x) ->
  (1 <= k)%nat -> (1 <= qb)%nat -> (E <= qb * k)%nat ->
  INR (3 * qb) * tc_delta (bpow radix2 (1 - F)) ur k < 1 ->
  mp_exp2 M 0 = 1 -> (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true -> length (fst kv) = E /\ dot_abs q (fst kv) <= P) ->
  0 < scale -> 0 <= uc -> Rabs (c * ln 2 - scale) <= uc * scale ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rpower 2 (u * (2 * score_max_de A_ scale uc P de)) <= X ->
  (1 + u) ^ (B - 1) <= P1 -> cg M ^ C * (1 + u) ^ Tt <= CGc -> cr M ^ Tt <= CR -> bL < 1 ->
  0 <= ucl -> Rabs (cl - ln 2) <= ucl * ln 2 -> ln (INR N) <= LN -> - ln (1 - bL) <= NL ->
  lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  (forall kv, In kv (filter vis (concat tiles)) -> Rabs (sck kv * ln 2 - scale * dot_R q (fst kv)) <= d kv) ->
  (forall kv kv', In kv (filter vis (concat tiles)) -> In kv' (filter vis (concat tiles)) ->
     u * ln 2 * (sck kv' - sck kv) <= g kv) ->
  pp_shift (filter vis (concat tiles)) (fun kv => scale * dot_R q (fst kv)) (fun kv => d kv + g kv) <= Dsc ->
  (forall k0 rs, filter vis (concat tiles) = k0 :: rs ->
     le (nrec (list R * R) (fun kv => scale * dot_R q (fst kv) - d kv) (fun kv => scale * dot_R q (fst kv) + d kv)
           (scale * dot_R q (fst k0) - d k0) rs) C) ->
  (forall kv, In kv (filter vis (concat tiles)) -> Rabs (sck kv) <= Sm) ->
  Rabs (rnd (rnd (m_use (ks_m st) + lg (ks_l st)) * cl)
        - ln (rsum (map (fun kv => exp (scale * dot_R q (fst kv))) (filter vis (concat tiles)))))
  <= lse_bound u ea el ucl Sm Dsc LN NL.
Proof.
  intros out ur F k qb q c scale uc P X P1 CR cl ucl LN NL d g Dsc Sm E B N Tt C CGc vis tiles dotf de sck st bL
    Hur Hout Hk Hq HE Hn Hexp0 Hvis.
  exact (attention_lse_error_masked_dot_counted_pp_arg_rowmax dotf _ 0 q c scale uc P X P1 CR cl ucl LN NL d g Dsc Sm
           E B N Tt C CGc vis tiles Hexp0 Hvis (tf32x3_tc_op_dot_model out ur F k qb E Hur Hout Hk Hq HE Hn)).
Qed.

(** The same with the tiles that keep the running max counted. *)
Theorem attention_lse_error_masked_counted_tf32x3_op_pp_arg : forall (out : R -> R) (ur : R) (F : Z) (k qb : nat)
    (q : list R) (c scale uc P X P1 CR cl ucl LN NL : R) (d g : list R * R -> R) (Dsc : R) (E B N Tt : nat)
    (C : nat) (CGc : R) (vis : list R * R -> bool) (tiles : list (list (list R * R))),
  let dotf := tf32x3_dot_tc_op tf32_rna tf32_rz (tc_align_op F) out k in
  let de := tf32x3_tc_rel (bpow radix2 (1 - F)) ur k qb * P + 0 in
  let sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv) in
  let st := kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) tiles in
  let bL := afe_bL_arg u ue ee ea B N Tt X P1 CGc CR in
  0 <= ur -> (forall x, Rabs (out x - x) <= ur * Rabs x) ->
  (1 <= k)%nat -> (1 <= qb)%nat -> (E <= qb * k)%nat ->
  INR (3 * qb) * tc_delta (bpow radix2 (1 - F)) ur k < 1 ->
  mp_exp2 M 0 = 1 -> (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true -> length (fst kv) = E /\ dot_abs q (fst kv) <= P) ->
  0 < scale -> 0 <= uc -> Rabs (c * ln 2 - scale) <= uc * scale ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rpower 2 (u * (2 * score_max_de A_ scale uc P de)) <= X ->
  (1 + u) ^ (B - 1) <= P1 -> cg M ^ C * (1 + u) ^ Tt <= CGc -> cr M ^ Tt <= CR -> bL < 1 ->
  0 <= ucl -> Rabs (cl - ln 2) <= ucl * ln 2 -> ln (INR N) <= LN -> - ln (1 - bL) <= NL ->
  lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  (forall kv, In kv (filter vis (concat tiles)) -> Rabs (sck kv * ln 2 - scale * dot_R q (fst kv)) <= d kv) ->
  (forall kv kv', In kv (filter vis (concat tiles)) -> In kv' (filter vis (concat tiles)) ->
     u * ln 2 * (sck kv' - sck kv) <= g kv) ->
  pp_shift (filter vis (concat tiles)) (fun kv => scale * dot_R q (fst kv)) (fun kv => d kv + g kv) <= Dsc ->
  (forall k0 rs, filter vis (concat tiles) = k0 :: rs ->
     le (nrec (list R * R) (fun kv => scale * dot_R q (fst kv) - d kv) (fun kv => scale * dot_R q (fst kv) + d kv)
           (scale * dot_R q (fst k0) - d k0) rs) C) ->
  Rabs (rnd (rnd (m_use (ks_m st) + lg (ks_l st)) * cl)
        - ln (rsum (map (fun kv => exp (scale * dot_R q (fst kv))) (filter vis (concat tiles)))))
  <= lse_bound u ea el ucl (score_max_de A_ scale uc P de) Dsc LN NL.
Proof.
  intros out ur F k qb q c scale uc P X P1 CR cl ucl LN NL d g Dsc E B N Tt C CGc vis tiles dotf de sck st bL
    Hur Hout Hk Hq HE Hn Hexp0 Hvis.
  exact (attention_lse_error_masked_dot_counted_pp_arg dotf _ 0 q c scale uc P X P1 CR cl ucl LN NL d g Dsc E B N Tt C CGc
           vis tiles
           Hexp0 Hvis (tf32x3_tc_op_dot_model out ur F k qb E Hur Hout Hk Hq HE Hn)).
Qed.

End LseArg.
