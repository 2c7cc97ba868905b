(** * The forward kernel's log-sum-exp in mixed precision, the rounding of the scores included.

    The forward kernel (kernels/ojas_kernels/attention_forward.py, [_fwd_kernel]) saves, per query
    row, [lse = (m + tl.log2 (l)) * 0.6931471805599453] in fp32: the
    running max [m] and sum [l] of its tile loop, the computed [log2] ([lg]
    below, with absolute error [el]: an assumption about [tl.log2], a
    Section hypothesis), the fp32 constant [cl] of [ln 2].  The backward
    kernels recompute [P = exp2 (s2 - lse2)] from it.

    [attention_lse_error]: with the premises of
    [ForwardError.attention_forward_error] (fully visible tiles),
    [ln N <= LN], [- ln (1 - bL) <= NL] ([bL = afe_bL < 1]),
      |rnd (rnd (m + lg l) * cl) - ln (sum_j exp (scale q.k_j))|
        <= [lse_bound] u ea el ucl (score_max ..) (score_delta ..) LN NL,
    from: [l] within [bL l_exact] ([l_fold_inv], OnlineSoftmaxTile.v), so
    [|ln l - ln L| <= - ln (1 - bL)] ([afe_ln_ratio]); [m ln 2 + ln L] is the
    log-sum-exp of the kernel's scores; log-sum-exp moves by at most
    [delta] when every score does ([lse_perturbation]); the two fp32
    roundings and [|cl - ln 2| <= ucl ln 2].

    [attention_lse_error_masked]: the same for the kernel's loop from its
    start under any boolean mask (causal, window, bounds), against the
    log-sum-exp over the visible keys.

    [attention_lse_error_dot], [attention_lse_error_masked_dot]: the scores'
    dot as a parameter with its [dot_model] (ForwardError.v, PART B');
    [attention_lse_error_masked_tf32x3]: the fp32 path on CUDA, 3xTF32
    scores on tensor cores.

    [attention_lse_error_dot_gen]: the proof, for any relative bound [bL] of [l]
    ([l_fold_rel]) and any bound [D] of log-sum-exp's move under the scores' errors;
    [attention_lse_error_dot] is its instance at [l_fold_rel_uniform] and [D = delta],
    PerPairScoreError.v's and ForwardAccRunningCounted.v's lse theorems are others.

    Not covered: as in Attention/Float/ForwardError.v (the order inside the dots,
    [tl.sum] as a tree, FMA contraction, additive masks), and [el] itself:
    the hypothesis is for [x] in [[lmin, lmax]], which holds [l]. *)

From Coq Require Import Reals ZArith List Lra Lia Arith.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.NoUnderflow FloatModel.DotError Attention.BackwardCorrect Attention.ScorePerturbation.
From Ojas Require Import FloatModel.MixedPrecision FloatModel.BlockedSum FloatModel.TensorCoreSum FloatModel.Tf32Product.
From Ojas Require Import FloatModel.Notations.
From Ojas Require Import Attention.Float.OnlineSoftmaxError Attention.Float.OnlineSoftmaxTile Attention.Float.ForwardError.
Import ListNotations.
Open Scope R_scope.

Lemma afe_ln_le : forall x y, 0 < x -> x <= y -> ln x <= ln y.
Proof.
  intros x y Hx H; destruct (Rle_lt_or_eq_dec x y H) as [Hl | ->]; [left; apply ln_increasing; lra | lra].
Qed.

(** log-sum-exp is 1-Lipschitz in the largest score change. *)
Theorem lse_perturbation : forall {T} (xs : list T) (S S' : T -> R) delta, xs <> [] ->
  (forall x, In x xs -> Rabs (S' x - S x) <= delta) ->
  Rabs (ln (rsum (map (fun x => exp (S' x)) xs)) - ln (rsum (map (fun x => exp (S x)) xs))) <= delta.
Proof.
  intros T xs S S' delta Hne HS.
  destruct xs as [| d xs']; [congruence |].
  set (Z := rsum (map (fun x => exp (S x)) (d :: xs'))).
  set (Z' := rsum (map (fun x => exp (S' x)) (d :: xs'))).
  assert (HZ : 0 < Z) by apply bw_rsum_exp_pos.
  assert (HZ' : 0 < Z') by apply bw_rsum_exp_pos.
  assert (H1 : Z' <= Z * exp delta).
  { unfold Z, Z'; rewrite <- bw_rsum_map_scal_r; apply bw_rsum_le; intros x Hx.
    rewrite <- exp_plus; apply sp_exp_le; pose proof (sp_Rabs_le_inv _ _ (HS x Hx)); lra. }
  assert (H2 : Z <= Z' * exp delta).
  { unfold Z, Z'; rewrite <- bw_rsum_map_scal_r; apply bw_rsum_le; intros x Hx.
    rewrite <- exp_plus; apply sp_exp_le; pose proof (sp_Rabs_le_inv _ _ (HS x Hx)); lra. }
  pose proof (afe_ln_le _ _ HZ' H1) as L1; pose proof (afe_ln_le _ _ HZ H2) as L2.
  rewrite ln_mult, ln_exp in L1, L2 by (apply exp_pos || lra).
  apply Rabs_le; lra.
Qed.

(** A relative error [b < 1] is a log error of at most [- ln (1 - b)]. *)
Lemma afe_ln_ratio : forall l L b, 0 < L -> 0 <= b < 1 -> Rabs (l - L) <= b * L ->
  0 < l /\ Rabs (ln l - ln L) <= - ln (1 - b).
Proof.
  intros l L b HL Hb H; pose proof (sp_Rabs_le_inv _ _ H) as [H1 H2].
  assert (Hl : 0 < (1 - b) * L) by (apply Rmult_lt_0_compat; lra).
  split; [nra |].
  assert (Hlo : ln ((1 - b) * L) <= ln l) by (apply afe_ln_le; [exact Hl | nra]).
  assert (Hhi : ln l <= ln ((1 + b) * L)) by (apply afe_ln_le; [nra | nra]).
  rewrite ln_mult in Hlo, Hhi by lra.
  assert (Hb2 : ln (1 + b) + ln (1 - b) <= 0).
  { rewrite <- ln_mult by lra; rewrite <- ln_1; apply afe_ln_le; nra. }
  apply Rabs_le; lra.
Qed.

Definition lse_bound (u ea el ucl smax delta LN NL : R) : R :=
  let A := smax + 2 * (LN + NL) + el in
  let A2 := (1 + u) * A + ea in
  u * A2 * (1 + ucl) + ea + A2 * ucl + (u * A + ea) + el + NL + delta.

Lemma mrun_ge_all : forall M {Key} (sc : Key -> R) tiles m, ff_fmt (mp_a M) m ->
  (forall k, In k (concat tiles) -> ff_fmt (mp_a M) (sc k)) ->
  forall k, In k (concat tiles) -> sc k <= mrun Key sc m tiles.
Proof.
  intros M Key sc; induction tiles as [|tl rest IH]; intros m Fm Fk k Hk; [destruct Hk |].
  cbn [mrun]; apply in_app_or in Hk.
  assert (Ftl : forall k, In k tl -> ff_fmt (mp_a M) (sc k)) by (intros; apply Fk, in_or_app; left; assumption).
  assert (Frest : forall k, In k (concat rest) -> ff_fmt (mp_a M) (sc k))
    by (intros; apply Fk, in_or_app; right; assumption).
  destruct (tmax_props M Key sc tl m Fm Ftl) as [F1 [_ H2]].
  destruct Hk as [Hk | Hk].
  - eapply Rle_trans; [apply H2, Hk | apply (mrun_ge M Key sc rest _ F1 Frest)].
  - apply IH; assumption.
Qed.

Lemma afe_Rabs_sum6 : forall a b c d e f,
  Rabs (a + b + c + d + e + f) <= Rabs a + Rabs b + Rabs c + Rabs d + Rabs e + Rabs f.
Proof.
  intros.
  pose proof (Rabs_triang (a + b + c + d + e) f); pose proof (Rabs_triang (a + b + c + d) e).
  pose proof (Rabs_triang (a + b + c) d); pose proof (Rabs_triang (a + b) c); pose proof (Rabs_triang a b).
  lra.
Qed.

(** ** The relative bound of [l], a premise

    [l_fold_rel X B N Tt bL m0 stiles]: the kernel's [l] after the score tiles [stiles], from
    [l = 0] at [m0], is within [bL L] of the exact [L] whenever the tiles meet the fold's side
    conditions (every score within [K] below the last running max, [2^(u K) <= X], ...).
    [l_fold_rel_uniform]: it holds at [bL = afe_bL .. CG ..] for [CG >= cg^Tt] ([l_fold_inv],
    [out_bL_apriori]); ForwardAccRunningCounted.v's [l_fold_rel_counted] gives it at
    [CG := CGc] with the tiles that keep the running max counted.  The lse proof
    ([attention_lse_error_dot_gen]) and PerPairScoreError.v's forward output proof take it as
    a premise, so that the uniform, per-pair and counted theorems are instances of one proof. *)
Section LFold.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

Definition l_fold_rel (X : R) (B N Tt : nat) (bL m0 : R) (stiles : list (list R)) : Prop :=
  forall K, 0 <= K -> Rpower 2 (u * K) <= X -> fmt m0 -> (1 <= B)%nat ->
  (forall s, In s (concat stiles) -> fmt s /\ m_run m0 stiles - s <= K) ->
  Forall (fun tl => (length tl <= B)%nat) stiles ->
  (length (concat stiles) <= N)%nat -> (length stiles <= Tt)%nat ->
  m0 <= m_run m0 stiles -> m_run m0 stiles - m0 <= K ->
  1 <= exact_l (m_run m0 stiles) (concat stiles) ->
  Rabs (l_run M m0 0 stiles - exact_l (m_run m0 stiles) (concat stiles))
  <= bL * exact_l (m_run m0 stiles) (concat stiles).

(** [inv G Rr l L L] with [L >= 1] is a relative error [G - 1 + Rr]. *)
Lemma l_rel_of_inv : forall G Rr l L bL, 1 <= L -> 0 <= Rr -> G - 1 + Rr <= bL ->
  inv G Rr l L L -> Rabs (l - L) <= bL * L.
Proof.
  intros G Rr l L bL HL HR Hb Hi; unfold inv in Hi.
  assert (Rr <= Rr * L) by (rewrite <- (Rmult_1_r Rr) at 1; apply Rmult_le_compat_l; lra).
  assert ((G - 1 + Rr) * L <= bL * L) by (apply Rmult_le_compat_r; lra).
  lra.
Qed.

Lemma l_fold_rel_uniform : forall X P1 CG CR B N Tt m0 stiles,
  (1 + u) ^ (B - 1) <= P1 -> cg M ^ Tt <= CG -> cr M ^ Tt <= CR ->
  l_fold_rel X B N Tt (afe_bL u ue ee ea B N Tt X P1 CG CR) m0 stiles.
Proof.
  intros X P1 CG CR B N Tt m0 stiles HP HG HC K HK HX Fm0 HB Hks HBt HN HT Hm0 HmK HL1.
  pose proof (l_fold_inv M K m0 B N Tt stiles HK Fm0 HB Hks HBt HN HT HmK) as Cl.
  destruct (out_bL_apriori M K m0 B N Tt (length stiles) (m_run m0 stiles) X P1 CG CR HK HT Hm0 HmK HX HP HG HC)
    as [_ bL1].
  destruct (H_l_bounds M K B X P1 HK HX HP) as [Hl1 _].
  assert (HRy : 0 <= Ry_l M B).
  { unfold Ry_l; pose proof (mp_eta_e_nonneg M); pose proof (ff_u_nonneg A_).
    apply Rmult_le_pos; [apply pow_le; lra | apply Rmult_le_pos; [apply pos_INR | lra]]. }
  exact (l_rel_of_inv _ _ _ _ _ HL1 (Rk_nonneg M K (H_l M K B) (Ry_l M B) (INR N) Tt Hl1 HRy (pos_INR N) (length stiles))
           bL1 Cl).
Qed.

End LFold.

Section Lse.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

(** The kernel's [tl.log2], within [el] of [log2] on [[lmin, lmax]]: an assumption.  On a
    bounded range: on all [x > 0] no float-valued function is within a fixed [el] of
    [log2] (unbounded, while the gaps between floats grow); each theorem asks
    [lmin <= 1 - bL] and [(1 + bL) e^LN <= lmax], which put the kernel's [l] there. *)
Variable lg : R -> R.
Variables el lmin lmax : R.
Hypothesis lg_err : forall x, lmin <= x <= lmax -> Rabs (lg x - ln x / ln 2) <= el.

(** From [l]'s relative bound against any [Lc = 2^(-mt) Sg] with [1 <= Lc <= N] and the
    move [D] of [ln Sg] to the exact log-sum-exp: the saved lse's bound (the tail of
    [attention_lse_error_dot_gen]; PerPairExpArg.v takes [Sg] over the effective scores). *)
Lemma lse_of_l_rel : forall (mt l Lc Sg LSE bL smax cl ucl LN NL D : R) (N : nat),
  1 <= Lc -> Lc <= INR N -> Rabs (l - Lc) <= bL * Lc -> Lc = exp (- (mt * ln 2)) * Sg -> 0 < Sg ->
  Rabs mt <= smax -> bL < 1 -> 0 <= ucl -> Rabs (cl - ln 2) <= ucl * ln 2 -> ln (INR N) <= LN ->
  - ln (1 - bL) <= NL -> lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax -> Rabs (ln Sg - LSE) <= D ->
  Rabs (rnd (rnd (mt + lg l) * cl) - LSE) <= lse_bound u ea el ucl smax D LN NL.
Proof.
  intros mt l Lc Sg LSE bL smax cl ucl LN NL D N HL1 HLN' Hrel ELc HSg Hmt HbL Hucl Hcl HLN HNL Hlmin Hlmax Hp.
  pose proof (ff_u_nonneg A_) as Hu0; pose proof (ff_eta_nonneg A_) as Hea.
  pose proof afe_ln2_bounds as [L2a L2b].
  assert (HbL0 : 0 <= bL) by (pose proof (Rabs_pos (l - Lc)); nra).
  destruct (afe_ln_ratio l Lc bL ltac:(lra) ltac:(lra) Hrel) as [Hl0 Hln].
  assert (Hdom : lmin <= l <= lmax).
  { assert (HNe : INR N <= exp LN) by (rewrite <- (exp_ln (INR N)) by lra; apply ose_exp_le, HLN).
    pose proof (sp_Rabs_le_inv _ _ Hrel).
    assert ((1 + bL) * Lc <= (1 + bL) * exp LN) by (apply Rmult_le_compat_l; lra).
    assert ((1 - bL) * 1 <= (1 - bL) * Lc) by (apply Rmult_le_compat_l; lra).
    split; lra. }
  assert (ElnL : ln Lc = ln Sg - mt * ln 2)
    by (rewrite ELc, ln_mult, ln_exp by (apply exp_pos || exact HSg); ring).
  (* magnitudes *)
  assert (HLc0 : 0 <= ln Lc) by (rewrite <- ln_1; apply afe_ln_le; lra).
  assert (HLcN : ln Lc <= LN) by (apply Rle_trans with (ln (INR N)); [apply afe_ln_le; lra | exact HLN]).
  assert (Hlnl : Rabs (ln l) <= NL + LN)
    by (pose proof (sp_Rabs_le_inv _ _ Hln); apply Rabs_le; lra).
  assert (Hlg : Rabs (lg l) <= 2 * (LN + NL) + el).
  { pose proof (lg_err l Hdom) as H.
    assert (Rabs (ln l / ln 2) <= 2 * (NL + LN)).
    { unfold Rdiv; rewrite Rabs_mult, (Rabs_right (/ ln 2)) by (left; apply Rinv_0_lt_compat; lra).
      assert (/ ln 2 <= 2).
      { apply (Rmult_le_reg_l (ln 2)); [lra |]; rewrite Rinv_r by lra; lra. }
      apply Rle_trans with (Rabs (ln l) * 2); [apply Rmult_le_compat_l; [apply Rabs_pos | lra] | lra]. }
    replace (lg l) with ((lg l - ln l / ln 2) + ln l / ln 2) by ring.
    eapply Rle_trans; [apply Rabs_triang | lra]. }
  set (Am := smax + 2 * (LN + NL) + el).
  assert (HA : Rabs (mt + lg l) <= Am) by (unfold Am; eapply Rle_trans; [apply Rabs_triang | lra]).
  pose proof (ff_abs A_ (mt + lg l)) as R1.
  set (x2 := rnd (mt + lg l)) in *.
  assert (HA2 : Rabs x2 <= (1 + u) * Am + ea).
  { replace x2 with ((x2 - (mt + lg l)) + (mt + lg l)) by ring.
    eapply Rle_trans; [apply Rabs_triang |].
    assert (u * Rabs (mt + lg l) <= u * Am) by (apply Rmult_le_compat_l; lra). lra. }
  set (A2 := (1 + u) * Am + ea) in *.
  pose proof (ff_abs A_ (x2 * cl)) as R2.
  assert (Hcla : Rabs cl <= 1 + ucl).
  { replace cl with ((cl - ln 2) + ln 2) by ring; eapply Rle_trans; [apply Rabs_triang |].
    rewrite (Rabs_right (ln 2)) by lra.
    assert (ucl * ln 2 <= ucl * 1) by (apply Rmult_le_compat_l; lra). lra. }
  assert (T1 : Rabs (rnd (x2 * cl) - x2 * cl) <= u * A2 * (1 + ucl) + ea).
  { eapply Rle_trans; [exact R2 |]; rewrite Rabs_mult.
    assert (Rabs x2 * Rabs cl <= A2 * (1 + ucl)) by (apply Rmult_le_compat; try apply Rabs_pos; lra).
    assert (u * (Rabs x2 * Rabs cl) <= u * (A2 * (1 + ucl))) by (apply Rmult_le_compat_l; lra).
    lra. }
  assert (T2 : Rabs (x2 * (cl - ln 2)) <= A2 * ucl).
  { rewrite Rabs_mult; apply Rmult_le_compat; try apply Rabs_pos; [lra |].
    eapply Rle_trans; [exact Hcl |].
    assert (ucl * ln 2 <= ucl * 1) by (apply Rmult_le_compat_l; lra). lra. }
  assert (T3 : Rabs ((x2 - (mt + lg l)) * ln 2) <= u * Am + ea).
  { rewrite Rabs_mult, (Rabs_right (ln 2)) by lra.
    assert (u * Rabs (mt + lg l) <= u * Am) by (apply Rmult_le_compat_l; lra).
    assert (Rabs (x2 - (mt + lg l)) <= u * Am + ea) by lra.
    assert (0 <= Rabs (x2 - (mt + lg l))) by apply Rabs_pos.
    apply Rle_trans with (Rabs (x2 - (mt + lg l)) * 1); [apply Rmult_le_compat_l | ]; lra. }
  assert (T4 : Rabs ((lg l - ln l / ln 2) * ln 2) <= el).
  { rewrite Rabs_mult, (Rabs_right (ln 2)) by lra; pose proof (lg_err l Hdom).
    pose proof (Rabs_pos (lg l - ln l / ln 2)).
    apply Rle_trans with (Rabs (lg l - ln l / ln 2) * 1); [apply Rmult_le_compat_l | ]; lra. }
  replace (rnd (x2 * cl) - LSE)
    with ((rnd (x2 * cl) - x2 * cl) + x2 * (cl - ln 2) + (x2 - (mt + lg l)) * ln 2
          + (lg l - ln l / ln 2) * ln 2 + (ln l - ln Lc) + (ln Sg - LSE))
    by (rewrite ElnL; field; lra).
  unfold lse_bound; fold Am; fold A2.
  eapply Rle_trans; [apply afe_Rabs_sum6 |].
  lra.
Qed.

(** The lse for any relative bound [bL] of [l] ([l_fold_rel]) and any bound [D] of the move of
    log-sum-exp from the exact scores to the kernel's: [lse_bound .. smax D LN NL].
    [attention_lse_error_dot] ([bL] at [CG], [D = delta]), PerPairScoreError.v's
    [attention_lse_error_dot_pp] ([D = Dsc]) and ForwardAccRunningCounted.v's
    [attention_lse_error_dot_counted_pp] ([bL] at [CGc]) are its instances. *)
Lemma attention_lse_error_dot_gen : forall (dotf : list R -> list R -> R) (g_rel g_abs : R) (q : list R) (c scale uc P X bL cl ucl LN NL D : R) (E B N Tt : nat)
    (k0 : list R * R) (tl0 : list (list R * R)) (rest : list (list (list R * R))),
  let tiles := (k0 :: tl0) :: rest in
  let ktiles := map (map (kv_pair_with M dotf c q)) tiles in
  let m0 := score2_with A_ dotf c q (fst k0) in
  let mt := acc_m_run m0 ktiles in
  let l := l_run M m0 0 (map (map fst) ktiles) in
  l_fold_rel M X B N Tt bL m0 (map (map fst) ktiles) ->
  dot_model dotf E g_rel g_abs -> length q = E ->
  (forall kv, In kv (concat tiles) -> length (fst kv) = E /\ dot_abs q (fst kv) <= P) ->
  0 < scale -> 0 <= uc -> Rabs (c * ln 2 - scale) <= uc * scale ->
  (1 <= B)%nat -> Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (concat tiles) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rpower 2 (u * (2 * score_max_de A_ scale uc P (g_rel * P + g_abs))) <= X -> bL < 1 ->
  0 <= ucl -> Rabs (cl - ln 2) <= ucl * ln 2 -> ln (INR N) <= LN -> - ln (1 - bL) <= NL ->
  lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  Rabs (ln (rsum (map (fun kv => exp (score2_with A_ dotf c q (fst kv) * ln 2)) (concat tiles)))
        - ln (rsum (map (fun kv => exp (scale * dot_R q (fst kv))) (concat tiles)))) <= D ->
  Rabs (rnd (rnd (mt + lg l) * cl) - ln (rsum (map (fun kv => exp (scale * dot_R q (fst kv))) (concat tiles))))
  <= lse_bound u ea el ucl (score_max_de A_ scale uc P (g_rel * P + g_abs)) D LN NL.
Proof.
  intros dotf g_rel g_abs q c scale uc P X bL cl ucl LN NL D E B N Tt k0 tl0 rest tiles ktiles m0 mt l
    Hl Hdm Hq Hkeys Hs Huc Hc HB HBt HN HT HX HbL Hucl Hcl HLN HNL Hlmin Hlmax Hp.
  pose proof (ff_u_nonneg A_) as Hu0; pose proof (ff_eta_nonneg A_) as Hea.
  pose proof afe_ln2_bounds as [L2a L2b].
  destruct (kernel_scores_ok M dotf g_rel g_abs q c scale uc P E k0 tl0 rest Hdm Hq Hkeys Hs Huc Hc)
    as [Hsc [Hdelta [Hsmax [Ecat [_ [Fk [Hm0t [Hmt HmK]]]]]]]].
  fold tiles in Hsc, Ecat, Fk, Hm0t, Hmt, HmK; fold ktiles m0 in Ecat, Fk, Hm0t, Hmt, HmK; fold mt in Hm0t, Hmt, HmK.
  set (smax := score_max_de A_ scale uc P (g_rel * P + g_abs)) in *.
  set (K := 2 * smax) in *.
  assert (HK : 0 <= K) by (unfold K; lra).
  assert (Hk0 : In k0 (concat tiles)) by (left; reflexivity).
  assert (Fm0 : fmt m0) by apply ff_rnd_fmt.
  (* the l fold *)
  set (stiles := map (map fst) ktiles).
  change (l_fold_rel M X B N Tt bL m0 stiles) in Hl.
  assert (Hmr : m_run m0 stiles = mt) by (unfold m_run, stiles, mt, acc_m_run; apply mrun_map).
  assert (Escat : concat stiles = map (fun kv => score2_with A_ dotf c q (fst kv)) (concat tiles))
    by (unfold stiles; rewrite <- concat_map, Ecat, map_map; reflexivity).
  assert (HBt' : Forall (fun tl => (length tl <= B)%nat) stiles).
  { apply Forall_forall; intros tl Htl; unfold stiles, ktiles in Htl; rewrite map_map in Htl.
    apply in_map_iff in Htl; destruct Htl as [tl' [<- Htl']]; rewrite !map_length.
    exact (proj1 (Forall_forall _ _) HBt tl' Htl'). }
  assert (Hlen : length stiles = length tiles) by (unfold stiles, ktiles; rewrite !map_length; reflexivity).
  assert (Hks : forall s, In s (concat stiles) -> fmt s /\ m_run m0 stiles - s <= K).
  { intros s Hs'; rewrite Escat in Hs'; apply in_map_iff in Hs'; destruct Hs' as [kv [<- Hkv]].
    split; [apply ff_rnd_fmt |]; rewrite Hmr.
    pose proof (Rle_abs mt); pose proof (Rle_abs (- score2_with A_ dotf c q (fst kv))).
    rewrite Rabs_Ropp in *; pose proof (proj2 (Hsc kv Hkv)); unfold K; lra. }
  set (Lc := exact_l mt (concat stiles)) in *.
  (* L >= 1: the last running max is a score *)
  assert (HL1 : 1 <= Lc).
  { assert (Hqs : exists s, In s (concat stiles) /\ s = mt).
    { destruct (mrun_attained fst ktiles m0) as [Em | [p [Hp' Ep]]].
      - exists m0; split; [rewrite Escat; apply in_map_iff; exists k0; split; [reflexivity | exact Hk0] |].
        unfold mt, acc_m_run; rewrite Em; reflexivity.
      - exists (fst p); split; [| exact Ep].
        unfold stiles; rewrite <- concat_map; apply in_map, Hp'. }
    destruct Hqs as [s [Hs' Es]]; unfold Lc, exact_l.
    replace 1 with (Rpower 2 (s - mt)) by (rewrite Es, Rminus_diag_eq, Rpower_O by (reflexivity || lra); reflexivity).
    apply ost_rsum_ge_in; [| apply in_map_iff; exists s; split; [reflexivity | exact Hs']].
    intros y Hy; apply in_map_iff in Hy; destruct Hy as [z [<- _]]; left; apply Rpower_pos. }
  assert (HLN' : Lc <= INR N).
  { unfold Lc; apply exact_l_bound; [| rewrite Escat, map_length; exact HN].
    intros s Hs'; split; [exact I |]; rewrite Escat in Hs'; apply in_map_iff in Hs'.
    destruct Hs' as [kv [<- Hkv]].
    change (score2_with A_ dotf c q (fst kv)) with (fst (kv_pair_with M dotf c q kv)).
    apply (mrun_ge_all M fst ktiles m0 Fm0 Fk); rewrite Ecat; apply in_map, Hkv. }
  (* |l - L| <= bL L *)
  assert (Hrel : Rabs (l - Lc) <= bL * Lc).
  { pose proof (Hl K HK HX Fm0 HB Hks HBt' ltac:(rewrite Escat, map_length; exact HN) ltac:(lia)
                  ltac:(rewrite Hmr; exact Hm0t) ltac:(rewrite Hmr; exact HmK) ltac:(rewrite Hmr; exact HL1)) as Hr.
    rewrite Hmr in Hr; exact Hr. }
  (* ln L = ln (sum_j 2^s_j) - mt ln 2 *)
  set (Sg := rsum (map (fun kv => exp (score2_with A_ dotf c q (fst kv) * ln 2)) (concat tiles))) in *.
  assert (ELc : Lc = exp (- (mt * ln 2)) * Sg).
  { unfold Lc, exact_l, Sg; rewrite Escat, map_map, <- rsum_map_scal_l; apply rsum_map_ext; intros kv _.
    unfold Rpower; rewrite <- exp_plus; f_equal; ring. }
  assert (HSg : 0 < Sg) by (unfold Sg, tiles; cbn [concat app]; apply bw_rsum_exp_pos).
  apply (lse_of_l_rel mt l Lc Sg _ bL smax cl ucl LN NL D N HL1 HLN' Hrel ELc HSg Hmt HbL Hucl Hcl HLN HNL
           Hlmin Hlmax Hp).
Qed.

Theorem attention_lse_error_dot : forall (dotf : list R -> list R -> R) (g_rel g_abs : R) (q : list R) (c scale uc P X P1 CG CR cl ucl LN NL : R) (E B N Tt : nat)
    (k0 : list R * R) (tl0 : list (list R * R)) (rest : list (list (list R * R))),
  let tiles := (k0 :: tl0) :: rest in
  let ktiles := map (map (kv_pair_with M dotf c q)) tiles in
  let m0 := score2_with A_ dotf c q (fst k0) in
  let mt := acc_m_run m0 ktiles in
  let l := l_run M m0 0 (map (map fst) ktiles) in
  let bL := afe_bL u ue ee ea B N Tt X P1 CG CR in
  dot_model dotf E g_rel g_abs -> length q = E ->
  (forall kv, In kv (concat tiles) -> length (fst kv) = E /\ dot_abs q (fst kv) <= P) ->
  0 < scale -> 0 <= uc -> Rabs (c * ln 2 - scale) <= uc * scale ->
  (1 <= B)%nat -> Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (concat tiles) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rpower 2 (u * (2 * score_max_de A_ scale uc P (g_rel * P + g_abs))) <= X ->
  (1 + u) ^ (B - 1) <= P1 -> cg M ^ Tt <= CG -> cr M ^ Tt <= CR -> bL < 1 ->
  0 <= ucl -> Rabs (cl - ln 2) <= ucl * ln 2 -> ln (INR N) <= LN -> - ln (1 - bL) <= NL ->
  lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  Rabs (rnd (rnd (mt + lg l) * cl) - ln (rsum (map (fun kv => exp (scale * dot_R q (fst kv))) (concat tiles))))
  <= lse_bound u ea el ucl (score_max_de A_ scale uc P (g_rel * P + g_abs)) (score_delta_de A_ scale uc P (g_rel * P + g_abs)) LN NL.
Proof.
  intros dotf g_rel g_abs q c scale uc P X P1 CG CR cl ucl LN NL E B N Tt k0 tl0 rest tiles ktiles m0 mt l bL
    Hdm Hq Hkeys Hs Huc Hc HB HBt HN HT HX HP HG HC HbL Hucl Hcl HLN HNL Hlmin Hlmax.
  destruct (kernel_scores_ok M dotf g_rel g_abs q c scale uc P E k0 tl0 rest Hdm Hq Hkeys Hs Huc Hc) as [Hsc _].
  apply (attention_lse_error_dot_gen dotf g_rel g_abs q c scale uc P X bL cl ucl LN NL _ E B N Tt k0 tl0 rest
           (l_fold_rel_uniform M X P1 CG CR B N Tt _ _ HP HG HC)); try assumption.
  apply lse_perturbation; [unfold tiles; cbn [concat app]; discriminate |].
  intros kv Hkv; exact (proj1 (Hsc kv Hkv)).
Qed.

(** The blocked fp32 dot ([score2]): the [_dot] theorem at [blocked_dot_model]. *)
Theorem attention_lse_error : forall (q : list R) (c scale uc P X P1 CG CR cl ucl LN NL : R) (E B N Tt : nat)
    (k0 : list R * R) (tl0 : list (list R * R)) (rest : list (list (list R * R))),
  let tiles := (k0 :: tl0) :: rest in
  let ktiles := map (map (kv_pair M c q)) tiles in
  let m0 := score2 A_ c q (fst k0) in
  let mt := acc_m_run m0 ktiles in
  let l := l_run M m0 0 (map (map fst) ktiles) in
  let bL := afe_bL u ue ee ea B N Tt X P1 CG CR in
  (1 <= E)%nat -> INR E * u < 1 -> length q = E ->
  (forall kv, In kv (concat tiles) -> length (fst kv) = E /\ dot_abs q (fst kv) <= P) ->
  0 < scale -> 0 <= uc -> Rabs (c * ln 2 - scale) <= uc * scale ->
  (1 <= B)%nat -> Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (concat tiles) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rpower 2 (u * (2 * score_max A_ scale uc E P)) <= X ->
  (1 + u) ^ (B - 1) <= P1 -> cg M ^ Tt <= CG -> cr M ^ Tt <= CR -> bL < 1 ->
  0 <= ucl -> Rabs (cl - ln 2) <= ucl * ln 2 -> ln (INR N) <= LN -> - ln (1 - bL) <= NL ->
  lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  Rabs (rnd (rnd (mt + lg l) * cl) - ln (rsum (map (fun kv => exp (scale * dot_R q (fst kv))) (concat tiles))))
  <= lse_bound u ea el ucl (score_max A_ scale uc E P) (score_delta A_ scale uc E P) LN NL.
Proof.
  intros q c scale uc P X P1 CG CR cl ucl LN NL E B N Tt k0 tl0 rest tiles ktiles m0 mt l bL HE HEu.
  exact (attention_lse_error_dot (bdot A_) _ _ q c scale uc P X P1 CG CR cl ucl LN NL E B N Tt k0 tl0 rest
           (blocked_dot_model A_ E HE HEu)).
Qed.

(** The kernel's loop as it runs, any mask (causal, window, bounds): the lse
    it saves from its state [(Some m, l, _)] against the log-sum-exp over the
    visible keys ([kernel_run_visible_tiles]). *)
Theorem attention_lse_error_masked_dot : forall (dotf : list R -> list R -> R) (g_rel g_abs : R) (q : list R) (c scale uc P X P1 CG CR cl ucl LN NL : R) (E B N Tt : nat)
    (vis : list R * R -> bool) (tiles : list (list (list R * R))),
  let sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv) in
  let st := kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) tiles in
  let bL := afe_bL u ue ee ea B N Tt X P1 CG CR in
  mp_exp2 M 0 = 1 -> (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  dot_model dotf E g_rel g_abs -> length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true -> length (fst kv) = E /\ dot_abs q (fst kv) <= P) ->
  0 < scale -> 0 <= uc -> Rabs (c * ln 2 - scale) <= uc * scale ->
  (1 <= B)%nat -> Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rpower 2 (u * (2 * score_max_de A_ scale uc P (g_rel * P + g_abs))) <= X ->
  (1 + u) ^ (B - 1) <= P1 -> cg M ^ Tt <= CG -> cr M ^ Tt <= CR -> bL < 1 ->
  0 <= ucl -> Rabs (cl - ln 2) <= ucl * ln 2 -> ln (INR N) <= LN -> - ln (1 - bL) <= NL ->
  lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  Rabs (rnd (rnd (m_use (ks_m st) + lg (ks_l st)) * cl)
        - ln (rsum (map (fun kv => exp (scale * dot_R q (fst kv))) (filter vis (concat tiles)))))
  <= lse_bound u ea el ucl (score_max_de A_ scale uc P (g_rel * P + g_abs)) (score_delta_de A_ scale uc P (g_rel * P + g_abs)) LN NL.
Proof.
  intros dotf g_rel g_abs q c scale uc P X P1 CG CR cl ucl LN NL E B N Tt vis tiles sck st bL
    Hexp0 Hvis Hdm Hq Hkeys Hs Huc Hc HB HBt HN HT HX HP HG HC HbL Hucl Hcl HLN HNL Hlmin Hlmax.
  destruct (kernel_run_visible_tiles_with M dotf c q vis B tiles Hexp0 Hvis HBt) as [k0 [r [rest [Ecat [HBf [Hlen Est]]]]]].
  unfold st, sck; rewrite Est; cbn [ks_m ks_l m_use]; rewrite <- Ecat.
  apply (attention_lse_error_dot dotf g_rel g_abs q c scale uc P X P1 CG CR cl ucl LN NL E B N Tt k0 r rest); auto.
  - intros kv Hkv; rewrite Ecat in Hkv; apply filter_In in Hkv; destruct Hkv; auto.
  - rewrite Ecat; exact HN.
  - lia.
Qed.

(** The blocked fp32 dot ([score2]): the [_dot] theorem at [blocked_dot_model]. *)
Theorem attention_lse_error_masked : forall (q : list R) (c scale uc P X P1 CG CR cl ucl LN NL : R) (E B N Tt : nat)
    (vis : list R * R -> bool) (tiles : list (list (list R * R))),
  let sck := fun kv : list R * R => score2 A_ c q (fst kv) in
  let st := kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) tiles in
  let bL := afe_bL u ue ee ea B N Tt X P1 CG CR in
  mp_exp2 M 0 = 1 -> (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  (1 <= E)%nat -> INR E * u < 1 -> length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true -> length (fst kv) = E /\ dot_abs q (fst kv) <= P) ->
  0 < scale -> 0 <= uc -> Rabs (c * ln 2 - scale) <= uc * scale ->
  (1 <= B)%nat -> Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rpower 2 (u * (2 * score_max A_ scale uc E P)) <= X ->
  (1 + u) ^ (B - 1) <= P1 -> cg M ^ Tt <= CG -> cr M ^ Tt <= CR -> bL < 1 ->
  0 <= ucl -> Rabs (cl - ln 2) <= ucl * ln 2 -> ln (INR N) <= LN -> - ln (1 - bL) <= NL ->
  lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  Rabs (rnd (rnd (m_use (ks_m st) + lg (ks_l st)) * cl)
        - ln (rsum (map (fun kv => exp (scale * dot_R q (fst kv))) (filter vis (concat tiles)))))
  <= lse_bound u ea el ucl (score_max A_ scale uc E P) (score_delta A_ scale uc E P) LN NL.
Proof.
  intros q c scale uc P X P1 CG CR cl ucl LN NL E B N Tt vis tiles sck st bL Hexp0 Hvis HE HEu.
  exact (attention_lse_error_masked_dot (bdot A_) _ _ q c scale uc P X P1 CG CR cl ucl LN NL E B N Tt vis tiles
           Hexp0 Hvis (blocked_dot_model A_ E HE HEu)).
Qed.

(** The float32 lse on CUDA with 3xTF32 scores on tensor cores
    ([tf32x3_tc_dot_model], ForwardError.v PART E): the kernel's loop under
    any mask. *)
Theorem attention_lse_error_masked_tf32x3 : forall (out : R -> R) (ur : R) (F : Z) (k qb : nat)
    (q : list R) (c scale uc P X P1 CG CR cl ucl LN NL : R) (E B N Tt : nat)
    (vis : list R * R -> bool) (tiles : list (list (list R * R))),
  let dotf := tf32x3_dot_tc tf32_rna tf32_rz (tc_align F) out k in
  let de := tf32x3_tc_rel (bpow radix2 (1 - F)) ur k qb * P + 0 in
  let sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv) in
  let st := kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) tiles in
  let bL := afe_bL u ue ee ea B N Tt X P1 CG CR in
  0 <= ur -> (forall x, Rabs (out x - x) <= ur * Rabs x) ->
  (1 <= k)%nat -> (1 <= qb)%nat -> (E <= qb * k)%nat ->
  INR (3 * qb) * tc_delta (bpow radix2 (1 - F)) ur k < 1 ->
  mp_exp2 M 0 = 1 -> (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true -> length (fst kv) = E /\ dot_abs q (fst kv) <= P) ->
  0 < scale -> 0 <= uc -> Rabs (c * ln 2 - scale) <= uc * scale ->
  (1 <= B)%nat -> Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rpower 2 (u * (2 * score_max_de A_ scale uc P de)) <= X ->
  (1 + u) ^ (B - 1) <= P1 -> cg M ^ Tt <= CG -> cr M ^ Tt <= CR -> bL < 1 ->
  0 <= ucl -> Rabs (cl - ln 2) <= ucl * ln 2 -> ln (INR N) <= LN -> - ln (1 - bL) <= NL ->
  lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  Rabs (rnd (rnd (m_use (ks_m st) + lg (ks_l st)) * cl)
        - ln (rsum (map (fun kv => exp (scale * dot_R q (fst kv))) (filter vis (concat tiles)))))
  <= lse_bound u ea el ucl (score_max_de A_ scale uc P de) (score_delta_de A_ scale uc P de) LN NL.
Proof.
  intros out ur F k qb q c scale uc P X P1 CG CR cl ucl LN NL E B N Tt vis tiles dotf de sck st bL
    Hur Hout Hk Hq HE Hn Hexp0 Hvis.
  exact (attention_lse_error_masked_dot dotf _ 0 q c scale uc P X P1 CG CR cl ucl LN NL E B N Tt vis tiles
           Hexp0 Hvis (tf32x3_tc_dot_model out ur F k qb E Hur Hout Hk Hq HE Hn)).
Qed.

(** The same on the H100's tensor cores (operand-exponent alignment, [tf32x3_tc_op_dot_model]). *)
Theorem attention_lse_error_masked_tf32x3_op : forall (out : R -> R) (ur : R) (F : Z) (k qb : nat)
    (q : list R) (c scale uc P X P1 CG CR cl ucl LN NL : R) (E B N Tt : nat)
    (vis : list R * R -> bool) (tiles : list (list (list R * R))),
  let dotf := tf32x3_dot_tc_op tf32_rna tf32_rz (tc_align_op F) out k in
  let de := tf32x3_tc_rel (bpow radix2 (1 - F)) ur k qb * P + 0 in
  let sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv) in
  let st := kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) tiles in
  let bL := afe_bL u ue ee ea B N Tt X P1 CG CR in
  0 <= ur -> (forall x, Rabs (out x - x) <= ur * Rabs x) ->
  (1 <= k)%nat -> (1 <= qb)%nat -> (E <= qb * k)%nat ->
  INR (3 * qb) * tc_delta (bpow radix2 (1 - F)) ur k < 1 ->
  mp_exp2 M 0 = 1 -> (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true -> length (fst kv) = E /\ dot_abs q (fst kv) <= P) ->
  0 < scale -> 0 <= uc -> Rabs (c * ln 2 - scale) <= uc * scale ->
  (1 <= B)%nat -> Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rpower 2 (u * (2 * score_max_de A_ scale uc P de)) <= X ->
  (1 + u) ^ (B - 1) <= P1 -> cg M ^ Tt <= CG -> cr M ^ Tt <= CR -> bL < 1 ->
  0 <= ucl -> Rabs (cl - ln 2) <= ucl * ln 2 -> ln (INR N) <= LN -> - ln (1 - bL) <= NL ->
  lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  Rabs (rnd (rnd (m_use (ks_m st) + lg (ks_l st)) * cl)
        - ln (rsum (map (fun kv => exp (scale * dot_R q (fst kv))) (filter vis (concat tiles)))))
  <= lse_bound u ea el ucl (score_max_de A_ scale uc P de) (score_delta_de A_ scale uc P de) LN NL.
Proof.
  intros out ur F k qb q c scale uc P X P1 CG CR cl ucl LN NL E B N Tt vis tiles dotf de sck st bL
    Hur Hout Hk Hq HE Hn Hexp0 Hvis.
  exact (attention_lse_error_masked_dot dotf _ 0 q c scale uc P X P1 CG CR cl ucl LN NL E B N Tt vis tiles
           Hexp0 Hvis (tf32x3_tc_op_dot_model out ur F k qb E Hur Hout Hk Hq HE Hn)).
Qed.

End Lse.
