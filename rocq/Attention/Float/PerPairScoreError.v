(** * Per-pair score errors: the saved lse with one error bound per (query, key) pair.

    PLACEHOLDER-HEADER *)

From Coq Require Import Reals ZArith List Lra Lia Arith.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.NoUnderflow FloatModel.DotError Attention.BackwardCorrect Attention.ScorePerturbation.
From Ojas Require Import FloatModel.MixedPrecision FloatModel.BlockedSum FloatModel.TensorCoreSum FloatModel.Tf32Product.
From Ojas Require Import FloatModel.Notations.
From Ojas Require Import Attention.Float.OnlineSoftmaxError Attention.Float.OnlineSoftmaxTile Attention.Float.ForwardError.
From Ojas Require Import Attention.Float.ForwardPosteriori Attention.Float.SavedLseError.
Import ListNotations.
Open Scope R_scope.

(** ** Part 1: log-sum-exp and softmax averages under per-item score errors *)

(** [pp_shift xs S d = ln (sum_j P_j e^(d_j))], [P = softmax S] the exact weights
    ([pp_shift_softmax]); in nats. *)
Definition pp_shift {T} (xs : list T) (S d : T -> R) : R :=
  ln (rsum (map (fun x => exp (S x + d x)) xs) / rsum (map (fun x => exp (S x)) xs)).

Lemma pp_shift_softmax : forall {T} (xs : list T) (S d : T -> R),
  pp_shift xs S d
  = ln (rsum (map (fun x => exp (S x) / rsum (map (fun y => exp (S y)) xs) * exp (d x)) xs)).
Proof.
  intros T xs S d; unfold pp_shift; f_equal; rewrite <- rsum_map_div.
  apply rsum_map_ext; intros x _; rewrite exp_plus; unfold Rdiv; ring.
Qed.

Lemma pp_ln_div : forall x y, 0 < x -> 0 < y -> ln (x / y) = ln x - ln y.
Proof.
  intros x y Hx Hy; unfold Rdiv; rewrite ln_mult, ln_Rinv by (try apply Rinv_0_lt_compat; assumption); ring.
Qed.

Lemma pp_rsum_affine : forall {T} (xs : list T) (f g : T -> R) a b,
  rsum (map (fun x => a * f x + b * g x) xs) = a * rsum (map f xs) + b * rsum (map g xs).
Proof. intros; rewrite rsum_map_plus, !rsum_map_scal_l; reflexivity. Qed.

(** Jensen for [exp] over weights summing to one. *)
Lemma pp_exp_jensen : forall {T} (xs : list T) (w f : T -> R),
  (forall x, In x xs -> 0 <= w x) -> rsum (map w xs) = 1 ->
  exp (rsum (map (fun x => w x * f x) xs)) <= rsum (map (fun x => w x * exp (f x)) xs).
Proof.
  intros T xs w f Hw H1.
  set (a := rsum (map (fun x => w x * f x) xs)).
  assert (E : rsum (map (fun x => exp a * (1 - a) * w x + exp a * (w x * f x)) xs) = exp a)
    by (rewrite pp_rsum_affine, H1; fold a; ring).
  rewrite <- E; apply bw_rsum_le; intros x Hx.
  assert (exp a * (1 + (f x - a)) <= exp (f x)).
  { replace (exp (f x)) with (exp a * exp (f x - a)) by (rewrite <- exp_plus; f_equal; ring).
    apply Rmult_le_compat_l; [left; apply exp_pos | apply exp_ineq1_le]. }
  pose proof (Hw x Hx); nra.
Qed.

(** log-sum-exp moves by at most [ln (sum_j P_j e^(d_j))] when score [j] moves by at most [d_j]
    ([P] the exact softmax): up, [sum e^S' <= sum e^(S + d)]; down, Jensen twice. *)
Theorem lse_perturbation_pp : forall {T} (xs : list T) (S S' d : T -> R), xs <> [] ->
  (forall x, In x xs -> Rabs (S' x - S x) <= d x) ->
  Rabs (ln (rsum (map (fun x => exp (S' x)) xs)) - ln (rsum (map (fun x => exp (S x)) xs))) <= pp_shift xs S d.
Proof.
  intros T xs S S' d Hne HS.
  destruct xs as [| x0 xs']; [congruence |].
  set (xs := x0 :: xs') in *.
  set (Z := rsum (map (fun x => exp (S x)) xs)).
  set (Z' := rsum (map (fun x => exp (S' x)) xs)).
  set (Zd := rsum (map (fun x => exp (S x + d x)) xs)).
  assert (HZ : 0 < Z) by apply bw_rsum_exp_pos.
  assert (HZ' : 0 < Z') by apply bw_rsum_exp_pos.
  assert (HZd : 0 < Zd) by (apply (bw_rsum_exp_pos (fun x => S x + d x))).
  unfold pp_shift; fold Z Zd; rewrite pp_ln_div by assumption.
  (* up *)
  assert (Up : Z' <= Zd).
  { apply bw_rsum_le; intros x Hx; apply sp_exp_le; pose proof (sp_Rabs_le_inv _ _ (HS x Hx)); lra. }
  pose proof (afe_ln_le _ _ HZ' Up) as L1.
  (* down: the weights [w = e^S / Z] *)
  set (w := fun x => exp (S x) / Z).
  assert (Hw : forall x, In x xs -> 0 <= w x)
    by (intros x _; unfold w; apply Rmult_le_pos; [left; apply exp_pos | left; apply Rinv_0_lt_compat, HZ]).
  assert (Hw1 : rsum (map w xs) = 1) by (unfold w; rewrite rsum_map_div; fold Z; field; lra).
  assert (Ew : forall g : T -> R, rsum (map (fun x => w x * exp (g x)) xs)
                                   = rsum (map (fun x => exp (S x + g x)) xs) / Z).
  { intros g; unfold w; rewrite <- rsum_map_div; apply rsum_map_ext; intros x _.
    rewrite exp_plus; unfold Rdiv; ring. }
  pose proof (pp_exp_jensen xs w d Hw Hw1) as J1.
  pose proof (pp_exp_jensen xs w (fun x => S' x - S x) Hw Hw1) as J2.
  rewrite Ew in J1, J2; fold Zd in J1.
  assert (EZ' : rsum (map (fun x => exp (S x + (S' x - S x))) xs) = Z')
    by (apply rsum_map_ext; intros x _; f_equal; ring).
  rewrite EZ' in J2.
  assert (Hab : - rsum (map (fun x => w x * d x) xs) <= rsum (map (fun x => w x * (S' x - S x)) xs)).
  { rewrite <- (Rmult_1_l (rsum (map (fun x => w x * d x) xs))), Ropp_mult_distr_l, <- rsum_map_scal_l.
    apply bw_rsum_le; intros x Hx; pose proof (sp_Rabs_le_inv _ _ (HS x Hx)); pose proof (Hw x Hx); nra. }
  assert (Hq1 : 0 < Zd / Z) by (apply Rdiv_lt_0_compat; lra).
  assert (Hq2 : 0 < Z' / Z) by (apply Rdiv_lt_0_compat; lra).
  apply afe_ln_le in J1; [| apply exp_pos]; apply afe_ln_le in J2; [| apply exp_pos].
  rewrite ln_exp, pp_ln_div in J1, J2 by lra.
  apply Rabs_le; lra.
Qed.

Lemma pp_shift_nonneg : forall {T} (xs : list T) (S d : T -> R), xs <> [] ->
  (forall x, In x xs -> 0 <= d x) -> 0 <= pp_shift xs S d.
Proof.
  intros T xs S d Hne Hd; eapply Rle_trans; [apply Rabs_pos |].
  apply (lse_perturbation_pp xs S S d Hne); intros x Hx; rewrite Rminus_diag_eq, Rabs_R0 by reflexivity; apply Hd, Hx.
Qed.

(** Never above the uniform bound: [d_j <= delta] for all [j] gives [pp_shift <= delta]. *)
Lemma pp_shift_le_uniform : forall {T} (xs : list T) (S d : T -> R) delta, xs <> [] ->
  (forall x, In x xs -> d x <= delta) -> pp_shift xs S d <= delta.
Proof.
  intros T xs S d delta Hne Hd; destruct xs as [| x0 xs']; [congruence |].
  unfold pp_shift.
  assert (HZ : 0 < rsum (map (fun x => exp (S x)) (x0 :: xs'))) by apply bw_rsum_exp_pos.
  assert (HZd : 0 < rsum (map (fun x => exp (S x + d x)) (x0 :: xs'))) by apply (bw_rsum_exp_pos (fun x => S x + d x)).
  rewrite <- (ln_exp delta); apply afe_ln_le; [apply Rdiv_lt_0_compat; lra |].
  apply (Rmult_le_reg_r (rsum (map (fun x => exp (S x)) (x0 :: xs')))); [exact HZ |].
  unfold Rdiv; rewrite Rmult_assoc, Rinv_l, Rmult_1_r by lra.
  rewrite <- rsum_map_scal_l; apply bw_rsum_le; intros x Hx.
  rewrite exp_plus, Rmult_comm; apply Rmult_le_compat_r; [left; apply exp_pos | apply sp_exp_le, Hd, Hx].
Qed.

(** The softmax average under per-item score errors: with [|S'_j - S_j| <= d_j] and
    [pp_shift xs S d <= D], each computed weight [P'_j] is within [e^(+-(d_j + D))] of
    [P_j], so
      |avg_S' v - avg_S v| <= sum_j P_j |v_j| (e^(d_j + D) - 1),
      avg_S' |v|           <= sum_j P_j |v_j| e^(d_j + D)
    (both sums [sm_avg xs S _]: over the exact weights).  At [d_j = delta = D] this is
    [softmax_perturbation_post]'s [(e^(2 delta) - 1) avg_S |v|]. *)
Theorem softmax_perturbation_pp : forall {T} (xs : list T) (S S' v d : T -> R) D, xs <> [] ->
  (forall x, In x xs -> Rabs (S' x - S x) <= d x) -> pp_shift xs S d <= D ->
  Rabs (sm_avg xs S' v - sm_avg xs S v) <= sm_avg xs S (fun x => Rabs (v x) * (exp (d x + D) - 1))
  /\ sm_avg xs S' (fun x => Rabs (v x)) <= sm_avg xs S (fun x => Rabs (v x) * exp (d x + D)).
Proof.
  intros T xs S S' v d D Hne HS HD.
  pose proof (lse_perturbation_pp xs S S' d Hne HS) as HL.
  destruct xs as [| x0 xs']; [congruence |].
  set (xs := x0 :: xs') in *.
  set (Z := rsum (map (fun x => exp (S x)) xs)) in *.
  set (Z' := rsum (map (fun x => exp (S' x)) xs)) in *.
  assert (HZ : 0 < Z) by apply bw_rsum_exp_pos.
  assert (HZ' : 0 < Z') by apply bw_rsum_exp_pos.
  (* the weights: [P'_x = P_x e^t], [|t| <= d_x + D] *)
  assert (Hw : forall x, In x xs ->
            exp (S' x) / Z' = exp (S x) / Z * exp ((S' x - S x) - (ln Z' - ln Z))
            /\ Rabs ((S' x - S x) - (ln Z' - ln Z)) <= d x + D).
  { intros x Hx; split.
    - replace (S' x - S x - (ln Z' - ln Z)) with (S' x + - S x + - ln Z' + ln Z) by ring.
      rewrite !exp_plus, !exp_Ropp, !exp_ln by assumption; field.
      pose proof (exp_pos (S x)); repeat split; lra.
    - pose proof (Rabs_triang (S' x - S x) (- (ln Z' - ln Z))) as Ht; rewrite Rabs_Ropp in Ht.
      replace (S' x - S x + - (ln Z' - ln Z)) with (S' x - S x - (ln Z' - ln Z)) in Ht by ring.
      pose proof (HS x Hx); lra. }
  assert (Hexp : forall t b, Rabs t <= b -> Rabs (exp t - 1) <= exp b - 1 /\ exp t <= exp b).
  { intros t b Ht; pose proof (sp_Rabs_le_inv _ _ Ht) as [H1 H2].
    assert (E1 : exp t <= exp b) by (apply sp_exp_le; lra).
    split; [| exact E1].
    assert (Hb : 0 <= b) by (pose proof (Rabs_pos t); lra).
    assert (Hm : exp (- b) <= exp t) by (apply sp_exp_le; lra).
    assert (E0 : exp b * exp (- b) = 1) by (rewrite <- exp_plus, Rplus_opp_r; apply exp_0).
    assert (1 <= exp b) by (rewrite <- exp_0; apply sp_exp_le; lra).
    assert (1 - exp (- b) <= exp b - 1).
    { assert (0 < exp (- b)) by apply exp_pos. nra. }
    apply Rabs_le; split; lra. }
  assert (HP : forall x, 0 <= exp (S x) / Z)
    by (intros x; apply Rmult_le_pos; [left; apply exp_pos | left; apply Rinv_0_lt_compat, HZ]).
  rewrite !sm_avg_terms; fold Z Z'.
  split.
  - rewrite <- bw_rsum_map_minus.
    eapply Rle_trans; [apply bw_rsum_abs |]; apply bw_rsum_le; intros x Hx.
    destruct (Hw x Hx) as [Ew Ht]; destruct (Hexp _ _ Ht) as [H1 _].
    rewrite Ew.
    replace (exp (S x) / Z * exp (S' x - S x - (ln Z' - ln Z)) * v x - exp (S x) / Z * v x)
      with (exp (S x) / Z * (v x * (exp (S' x - S x - (ln Z' - ln Z)) - 1))) by ring.
    rewrite Rabs_mult, (Rabs_right (exp (S x) / Z)) by (apply Rle_ge, HP).
    apply Rmult_le_compat_l; [apply HP |]; rewrite Rabs_mult.
    apply Rmult_le_compat_l; [apply Rabs_pos | exact H1].
  - apply bw_rsum_le; intros x Hx.
    destruct (Hw x Hx) as [Ew Ht]; destruct (Hexp _ _ Ht) as [_ H2].
    rewrite Ew, Rmult_assoc; apply Rmult_le_compat_l; [apply HP |].
    rewrite Rmult_comm; apply Rmult_le_compat_l; [apply Rabs_pos | exact H2].
Qed.

(** ** Part 2: the saved lse with per-pair score errors *)

Section LsePP.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

(** The kernel's [tl.log2], within [el] of [log2] on [[lmin, lmax]]: the assumption of
    SavedLseError.v's Section [Lse]. *)
Variable lg : R -> R.
Variables el lmin lmax : R.
Hypothesis lg_err : forall x, lmin <= x <= lmax -> Rabs (lg x - ln x / ln 2) <= el.

Theorem attention_lse_error_dot_pp : forall (dotf : list R -> list R -> R) (g_rel g_abs : R) (q : list R) (c scale uc P X P1 CG CR cl ucl LN NL : R) (d : list R * R -> R) (Dsc : R) (E B N Tt : nat)
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
  (forall kv, In kv (concat tiles) ->
     Rabs (score2_with A_ dotf c q (fst kv) * ln 2 - scale * dot_R q (fst kv)) <= d kv) ->
  pp_shift (concat tiles) (fun kv => scale * dot_R q (fst kv)) d <= Dsc ->
  Rabs (rnd (rnd (mt + lg l) * cl) - ln (rsum (map (fun kv => exp (scale * dot_R q (fst kv))) (concat tiles))))
  <= lse_bound u ea el ucl (score_max_de A_ scale uc P (g_rel * P + g_abs)) Dsc LN NL.
Proof.
  intros dotf g_rel g_abs q c scale uc P X P1 CG CR cl ucl LN NL d Dsc E B N Tt k0 tl0 rest tiles ktiles m0 mt l bL
    Hdm Hq Hkeys Hs Huc Hc HB HBt HN HT HX HP HG HC HbL Hucl Hcl HLN HNL Hlmin Hlmax Hd HDsc.
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
  assert (Hmr : m_run m0 stiles = mt) by (unfold m_run, stiles, mt, acc_m_run; apply mrun_map).
  assert (Escat : concat stiles = map (fun kv => score2_with A_ dotf c q (fst kv)) (concat tiles))
    by (unfold stiles; rewrite <- concat_map, Ecat, map_map; reflexivity).
  assert (HBt' : Forall (fun tl => (length tl <= B)%nat) stiles).
  { apply Forall_forall; intros tl Htl; unfold stiles, ktiles in Htl; rewrite map_map in Htl.
    apply in_map_iff in Htl; destruct Htl as [tl' [<- Htl']]; rewrite !map_length.
    exact (proj1 (Forall_forall _ _) HBt tl' Htl'). }
  assert (Hlen : length stiles = length tiles) by (unfold stiles, ktiles; rewrite !map_length; reflexivity).
  pose proof (l_fold_inv M K m0 B N Tt stiles HK Fm0 HB) as Cl.
  specialize (Cl ltac:(intros s Hs'; rewrite Escat in Hs'; apply in_map_iff in Hs'; destruct Hs' as [kv [<- Hkv]];
                       split; [apply ff_rnd_fmt |]; rewrite Hmr;
                       pose proof (Rle_abs mt); pose proof (Rle_abs (- score2_with A_ dotf c q (fst kv)));
                       rewrite Rabs_Ropp in *; pose proof (proj2 (Hsc kv Hkv)); unfold K; lra)
                 HBt' ltac:(rewrite Escat, map_length; exact HN) ltac:(lia) ltac:(rewrite Hmr; exact HmK)).
  rewrite Hmr, Hlen in Cl; change (l_run M m0 0 stiles) with l in Cl.
  set (Lc := exact_l mt (concat stiles)) in *.
  (* L >= 1: the last running max is a score *)
  assert (HL1 : 1 <= Lc).
  { assert (Hqs : exists s, In s (concat stiles) /\ s = mt).
    { destruct (mrun_attained fst ktiles m0) as [Em | [p [Hp Ep]]].
      - exists m0; split; [rewrite Escat; apply in_map_iff; exists k0; split; [reflexivity | exact Hk0] |].
        unfold mt, acc_m_run; rewrite Em; reflexivity.
      - exists (fst p); split; [| exact Ep].
        unfold stiles; rewrite <- concat_map; apply in_map, Hp. }
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
  destruct (out_bL_apriori M K m0 B N Tt (length tiles) mt X P1 CG CR HK ltac:(lia) Hm0t HmK HX HP HG HC)
    as [bL0 bL1]; fold bL in bL1.
  destruct (H_l_bounds M K B X P1 HK HX HP) as [Hl1 _].
  assert (HRy : 0 <= Ry_l M B).
  { unfold Ry_l; pose proof (mp_eta_e_nonneg M); apply Rmult_le_pos; [apply pow_le; lra |].
    apply Rmult_le_pos; [apply pos_INR | lra]. }
  pose proof (Rk_nonneg M K (H_l M K B) (Ry_l M B) (INR N) Tt Hl1 HRy (pos_INR N) (length tiles)) as HRk.
  assert (Hrel : Rabs (l - Lc) <= bL * Lc).
  { unfold inv in Cl; unfold out_bL in bL0, bL1.
    set (G := Gk M (H_l M K B) m0 (length tiles) mt) in *.
    set (Rr := Rk M K (H_l M K B) (Ry_l M B) (INR N) Tt (length tiles)) in *.
    assert (Rr <= Rr * Lc) by nra.
    assert ((G - 1 + Rr) * Lc <= bL * Lc) by (apply Rmult_le_compat_r; lra).
    nra. }
  destruct (afe_ln_ratio l Lc bL ltac:(lra) ltac:(lra) Hrel) as [Hl0 Hln].
  assert (Hdom : lmin <= l <= lmax).
  { assert (HNe : INR N <= exp LN) by (rewrite <- (exp_ln (INR N)) by lra; apply ose_exp_le, HLN).
    assert (HbL0 : 0 <= bL) by (pose proof (Rabs_pos (l - Lc)); nra).
    pose proof (sp_Rabs_le_inv _ _ Hrel).
    assert ((1 + bL) * Lc <= (1 + bL) * exp LN) by (apply Rmult_le_compat_l; lra).
    split; nra. }
  (* ln L = ln (sum_j 2^s_j) - mt ln 2 *)
  set (Sg := rsum (map (fun kv => exp (score2_with A_ dotf c q (fst kv) * ln 2)) (concat tiles))).
  assert (ELc : Lc = exp (- (mt * ln 2)) * Sg).
  { unfold Lc, exact_l, Sg; rewrite Escat, map_map, <- rsum_map_scal_l; apply rsum_map_ext; intros kv _.
    unfold Rpower; rewrite <- exp_plus; f_equal; ring. }
  assert (HSg : 0 < Sg) by (unfold Sg, tiles; cbn [concat app]; apply bw_rsum_exp_pos).
  assert (ElnL : ln Lc = ln Sg - mt * ln 2)
    by (rewrite ELc, ln_mult, ln_exp by (apply exp_pos || exact HSg); ring).
  set (LSE := ln (rsum (map (fun kv => exp (scale * dot_R q (fst kv))) (concat tiles)))).
  assert (Hp : Rabs (ln Sg - LSE) <= Dsc).
  { eapply Rle_trans; [| exact HDsc].
    apply (lse_perturbation_pp (concat tiles) (fun kv => scale * dot_R q (fst kv))
             (fun kv => score2_with A_ dotf c q (fst kv) * ln 2) d); [unfold tiles; cbn [concat app]; discriminate |].
    exact Hd. }
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
      pose proof (Rabs_pos (ln l)); nra. }
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
    rewrite (Rabs_right (ln 2)) by lra; nra. }
  assert (T1 : Rabs (rnd (x2 * cl) - x2 * cl) <= u * A2 * (1 + ucl) + ea).
  { eapply Rle_trans; [exact R2 |]; rewrite Rabs_mult.
    assert (Rabs x2 * Rabs cl <= A2 * (1 + ucl)) by (apply Rmult_le_compat; try apply Rabs_pos; lra).
    assert (u * (Rabs x2 * Rabs cl) <= u * (A2 * (1 + ucl))) by (apply Rmult_le_compat_l; lra).
    lra. }
  assert (T2 : Rabs (x2 * (cl - ln 2)) <= A2 * ucl).
  { rewrite Rabs_mult; apply Rmult_le_compat; try apply Rabs_pos; [lra |].
    eapply Rle_trans; [exact Hcl | nra]. }
  assert (T3 : Rabs ((x2 - (mt + lg l)) * ln 2) <= u * Am + ea).
  { rewrite Rabs_mult, (Rabs_right (ln 2)) by lra.
    assert (u * Rabs (mt + lg l) <= u * Am) by (apply Rmult_le_compat_l; lra).
    assert (Rabs (x2 - (mt + lg l)) <= u * Am + ea) by lra.
    assert (0 <= Rabs (x2 - (mt + lg l))) by apply Rabs_pos. nra. }
  assert (T4 : Rabs ((lg l - ln l / ln 2) * ln 2) <= el).
  { rewrite Rabs_mult, (Rabs_right (ln 2)) by lra; pose proof (lg_err l Hdom).
    pose proof (Rabs_pos (lg l - ln l / ln 2)); nra. }
  replace (rnd (x2 * cl) - LSE)
    with ((rnd (x2 * cl) - x2 * cl) + x2 * (cl - ln 2) + (x2 - (mt + lg l)) * ln 2
          + (lg l - ln l / ln 2) * ln 2 + (ln l - ln Lc) + (ln Sg - LSE))
    by (rewrite ElnL; field; lra).
  unfold lse_bound; fold Am; fold A2.
  eapply Rle_trans; [apply afe_Rabs_sum6 |].
  lra.
Qed.

Theorem attention_lse_error_masked_dot_pp : forall (dotf : list R -> list R -> R) (g_rel g_abs : R) (q : list R) (c scale uc P X P1 CG CR cl ucl LN NL : R) (d : list R * R -> R) (Dsc : R) (E B N Tt : nat)
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
  (forall kv, In kv (filter vis (concat tiles)) ->
     Rabs (score2_with A_ dotf c q (fst kv) * ln 2 - scale * dot_R q (fst kv)) <= d kv) ->
  pp_shift (filter vis (concat tiles)) (fun kv => scale * dot_R q (fst kv)) d <= Dsc ->
  Rabs (rnd (rnd (m_use (ks_m st) + lg (ks_l st)) * cl)
        - ln (rsum (map (fun kv => exp (scale * dot_R q (fst kv))) (filter vis (concat tiles)))))
  <= lse_bound u ea el ucl (score_max_de A_ scale uc P (g_rel * P + g_abs)) Dsc LN NL.
Proof.
  intros dotf g_rel g_abs q c scale uc P X P1 CG CR cl ucl LN NL d Dsc E B N Tt vis tiles sck st bL
    Hexp0 Hvis Hdm Hq Hkeys Hs Huc Hc HB HBt HN HT HX HP HG HC HbL Hucl Hcl HLN HNL Hlmin Hlmax Hd HDsc.
  destruct (kernel_run_visible_tiles_with M dotf c q vis B tiles Hexp0 Hvis HBt) as [k0 [r [rest [Ecat [HBf [Hlen Est]]]]]].
  unfold st, sck; rewrite Est; cbn [ks_m ks_l m_use]; rewrite <- Ecat.
  apply (attention_lse_error_dot_pp dotf g_rel g_abs q c scale uc P X P1 CG CR cl ucl LN NL d Dsc E B N Tt k0 r rest); auto.
  - intros kv Hkv; rewrite Ecat in Hkv; apply filter_In in Hkv; destruct Hkv; auto.
  - rewrite Ecat; exact HN.
  - lia.
  - rewrite Ecat; exact Hd.
  - rewrite Ecat; exact HDsc.
Qed.

Theorem attention_lse_error_masked_tf32x3_pp : forall (out : R -> R) (ur : R) (F : Z) (k qb : nat)
    (q : list R) (c scale uc P X P1 CG CR cl ucl LN NL : R) (d : list R * R -> R) (Dsc : R) (E B N Tt : nat)
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
  (forall kv, In kv (filter vis (concat tiles)) ->
     Rabs (score2_with A_ dotf c q (fst kv) * ln 2 - scale * dot_R q (fst kv)) <= d kv) ->
  pp_shift (filter vis (concat tiles)) (fun kv => scale * dot_R q (fst kv)) d <= Dsc ->
  Rabs (rnd (rnd (m_use (ks_m st) + lg (ks_l st)) * cl)
        - ln (rsum (map (fun kv => exp (scale * dot_R q (fst kv))) (filter vis (concat tiles)))))
  <= lse_bound u ea el ucl (score_max_de A_ scale uc P de) Dsc LN NL.
Proof.
  intros out ur F k qb q c scale uc P X P1 CG CR cl ucl LN NL d Dsc E B N Tt vis tiles dotf de sck st bL
    Hur Hout Hk Hq HE Hn Hexp0 Hvis.
  exact (attention_lse_error_masked_dot_pp dotf _ 0 q c scale uc P X P1 CG CR cl ucl LN NL d Dsc E B N Tt vis tiles
           Hexp0 Hvis (tf32x3_tc_dot_model out ur F k qb E Hur Hout Hk Hq HE Hn)).
Qed.

Theorem attention_lse_error_masked_tf32x3_op_pp : forall (out : R -> R) (ur : R) (F : Z) (k qb : nat)
    (q : list R) (c scale uc P X P1 CG CR cl ucl LN NL : R) (d : list R * R -> R) (Dsc : R) (E B N Tt : nat)
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
  (forall kv, In kv (filter vis (concat tiles)) ->
     Rabs (score2_with A_ dotf c q (fst kv) * ln 2 - scale * dot_R q (fst kv)) <= d kv) ->
  pp_shift (filter vis (concat tiles)) (fun kv => scale * dot_R q (fst kv)) d <= Dsc ->
  Rabs (rnd (rnd (m_use (ks_m st) + lg (ks_l st)) * cl)
        - ln (rsum (map (fun kv => exp (scale * dot_R q (fst kv))) (filter vis (concat tiles)))))
  <= lse_bound u ea el ucl (score_max_de A_ scale uc P de) Dsc LN NL.
Proof.
  intros out ur F k qb q c scale uc P X P1 CG CR cl ucl LN NL d Dsc E B N Tt vis tiles dotf de sck st bL
    Hur Hout Hk Hq HE Hn Hexp0 Hvis.
  exact (attention_lse_error_masked_dot_pp dotf _ 0 q c scale uc P X P1 CG CR cl ucl LN NL d Dsc E B N Tt vis tiles
           Hexp0 Hvis (tf32x3_tc_op_dot_model out ur F k qb E Hur Hout Hk Hq HE Hn)).
Qed.

End LsePP.
