(** * The forward kernel's shared weights: [l] and [acc] over the kernel's own weights.

    The backward's [delta] premise in ratio form ([attention_delta_ratio_error],
    DeltaReweight.v) needs the forward kernel's numerator and normaliser written with the
    SAME perturbed weights.  The kernel of ForwardAccError.v ([kernel_step_acc]: per key
    tile, [m' = vmax m tile], [alpha = exp2 (rnd (m - m'))], [l := rnd (rnd (l alpha) +
    tl.sum p)], [acc := accf (rnd (acc alpha)) (rs p) v], [p = exp2 (rnd (s - m'))])
    gives every key [k] seen a weight [p_k pi_k]: its [p] at its tile's running max times
    the product [pi_k] of the computed [alpha]s of the later tiles, as reals
    ([shared_run]; [l] sums [p pi], [acc] the stored [rs p pi v]).  The [alpha]s and [p]s
    are the kernel's own, so every error of [exp2] and of its argument's rounding is in
    these weights, shared by [l] and [acc]; what is left to [l] is the rounding of its
    fold.

    Results:
    - [rel_abs_split]: [|r - X| <= c |X| + e] as [r = X (1 + mu) + nu], [|mu| <= c],
      [|nu| <= e]; [two_weights_common]: two nonnegative weights with relative factors
      within [c] have one common factor within [c].
    - [l_step_common_factor]: one step of [l]'s fold, [l = S (1 + lam) + eta] to
      [rnd (rnd (l alpha) + ts) = (S alpha + T) (1 + lam') + eta'] ([ts] the tile's sum
      within [(G - 1) T] of its weights' sum [T]).
    - [l_kernel_common_factor]: from [kernel_start], after [Tt] tiles of at most [B] keys
      (the scores numbers of the accumulation format, [exp2] nonnegative),
        l = (sum_k p_k pi_k) (1 + lam) + eta,
        |lam| <= (1 + u)^(B - 1 + 2 Tt) - 1,   |eta| <= Tt ((1 + u)^2 (1 + ue + ee))^Tt ea.
      [lam] is [attention_delta_ratio_error]'s [lam] once [eta] is moved into it
      ([common_factor_absorb] at [Smin = Lc (1 - tb)], the weights' sum being
      [Lc sum_k P_k (1 + b_k) >= Lc (1 - tb)]).
    - [acc_step_shared]: one tile into a coordinate of [acc] ([acc_dot_split_model accf n
      g_acc g_dot ga]): [acc = Nw + E] to [a Nw + sum P V] within
      [rho a |E| + (rho - 1) a |Nw| + g_dot sum |P V| + (1 + g_acc) ea + ga],
      [rho = (1 + g_acc) (1 + u)] (the rescale's rounding and the accumulator's; an
      [acc_dot_model] is the case [g_acc = g_dot], [acc_dot_split_of_model]).
    - [acc_kernel_shared_final]: from [kernel_start], tiles of [n] keys, coordinate [c]:
        acc_c = sum_k rs(p_k) pi_k v_kc + E_c      ([sw_num c L], [L] the final shared list),
        |E_c| <= rho^Tt sum_t ((rho - 1) |sum_(k before tile t) rs(p_k) pi_k v_kc|
                               + g_dot sum_(k in tile t) |rs(p_k) pi_k v_kc|)  ([acc_err_terms])
                 + rho^Tt Tt (1 + ue + ee)^Tt ((1 + g_acc) ea + ga):
      the roundings of [acc alpha] and of the accumulating dot charged on the signed
      prefixes of the SHARED numerator (as ForwardAccRunning.v charges them on the exact
      one), none of the weights' errors.

    - [weight_kernel_close]: from [kernel_start], the visible scores numbers of the
      accumulation format in [[m0, m0 + K]]: every visible key's [p_k pi_k] within
        ((1 + ue)^Tt 2^(u (m_T - s_k)) - 1) 2^(s_k - m_T) + Tt ((1 + ue + ee) (1 + ue))^Tt 2^(u K) ee
      of [2^(s_k - m_T)] ([m_T] the final running max): [weight_rescale_close] per tile,
      the argument roundings' [2^(u (m' - m))] telescoping.  A masked key's [p] is 0.
    - [mixed_fp32_exp2_nonneg]: the H100 models' [exp2] is nonnegative ([exp2_nonneg]).

    - [store_close]: the output's store [rs (rnd x)] within [store_ur |out| + store_er] of
      [x]; [shared_run_keys]: the final shared list has the kernel's keys in order;
      [common_factor_absorb]: [S (1 + lam) + eta] as [S (1 + lam')], [S >= Smin > 0];
      [shared_pi_bounds]: every [pi] in [[0, (1 + ue + ee)^Tt]]; [weight_rel_exact]: a
      weight within [(G - 1) W + R] of [W = Wx 2^d] is [Wx (1 + b)], [|b| <= G 2^|d| - 1 + R / Wx]
      ([Wx = Lc P_k], [d] the score's error); [weight_rel_stored]: then [rs p pi = Wx (1 + a)],
      [|a - b| <= us (1 + |b|) + es pi / Wx].

    The composition with [attention_delta_ratio_error] over the final shared list (its
    [b_k], [t_k] from [weight_kernel_close] and [weight_rel_exact], [a_k], [s_k] from
    [weight_rel_stored] and [shared_pi_bounds], [E_c] from [acc_kernel_shared_final], [lam]
    from [l_kernel_common_factor] and [common_factor_absorb], [ur], [er] from [store_close]),
    the computed scores against the exact ones per key ([2^(s_k - m_T) = Lc P_k 2^(d_k)]) and
    [E_c]'s terms bounded by the exact softmax's signed prefixes: DeltaKernelError.v. *)

From Coq Require Import Reals List Lra Lia Arith.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.NoUnderflow FloatModel.MixedPrecision FloatModel.BlockedSum FloatModel.Notations.
From Ojas Require Import Attention.Float.OnlineSoftmaxError Attention.Float.OnlineSoftmaxTile Attention.Float.ForwardError.
From Ojas Require Import Attention.Float.NumeratorError Attention.Float.ForwardAccError.
Import ListNotations.
Open Scope R_scope.

(** A bound [c |X| + e] on [|r - X|] split into a relative factor and an absolute term. *)
Lemma rel_abs_split : forall r X c e, 0 <= c -> 0 <= e -> Rabs (r - X) <= c * Rabs X + e ->
  exists mu nu, r = X * (1 + mu) + nu /\ Rabs mu <= c /\ Rabs nu <= e.
Proof.
  intros r X c e Hc He H.
  destruct (Req_dec X 0) as [E0 | N0].
  - exists 0, r; subst X; rewrite Rabs_R0, Rmult_0_r, Rplus_0_l, Rminus_0_r in H.
    rewrite Rabs_R0; repeat split; [ring | exact Hc | exact H].
  - set (t := (r - X) / X).
    assert (Et : r - X = X * t) by (unfold t; field; exact N0).
    rewrite Et, Rabs_mult in H.
    assert (HX : 0 < Rabs X) by (apply Rabs_pos_lt, N0).
    destruct (Rle_dec (Rabs t) c) as [Hin | Hout].
    + exists t, 0; rewrite Rabs_R0; repeat split; [lra | exact Hin | exact He].
    + apply Rnot_le_lt in Hout.
      assert (Hsg : exists mu, Rabs mu = c /\ Rabs (t - mu) = Rabs t - c).
      { destruct (Rle_dec 0 t).
        - exists c; rewrite Rabs_right in Hout by lra; rewrite !Rabs_right by lra; split; lra.
        - exists (- c); rewrite Rabs_left in Hout by lra; rewrite Rabs_Ropp, Rabs_right, Rabs_left, Rabs_left by lra.
          split; lra. }
      destruct Hsg as [mu [Hmu Htm]].
      exists mu, (X * (t - mu)); repeat split; [lra | lra |].
      rewrite Rabs_mult, Htm; nra.
Qed.

(** Two nonnegative weights, each with its own relative factor within [c]: one common factor. *)
Lemma two_weights_common : forall p q f1 f2 c, 0 <= p -> 0 <= q -> 0 <= c -> Rabs f1 <= c -> Rabs f2 <= c ->
  exists f, p * (1 + f1) + q * (1 + f2) = (p + q) * (1 + f) /\ Rabs f <= c.
Proof.
  intros p q f1 f2 c Hp Hq Hc H1 H2.
  destruct (Req_dec (p + q) 0) as [E0 | N0].
  - exists 0; assert (p = 0) by lra; assert (q = 0) by lra; subst; rewrite Rabs_R0; split; [ring | exact Hc].
  - exists ((p * f1 + q * f2) / (p + q)); split; [field; exact N0 |].
    apply Rabs_le; apply Rabs_le_inv in H1; apply Rabs_le_inv in H2.
    assert (0 < p + q) by lra.
    split; [apply (Rmult_le_reg_r (p + q)); [lra |] | apply (Rmult_le_reg_r (p + q)); [lra |]];
      unfold Rdiv; rewrite Rmult_assoc, Rinv_l by lra; nra.
Qed.

Section LStep.

Variable F : FloatFormat.
Local Notation rnd := (ff_rnd F).
Local Notation u := (ff_u F).

(** One step of the kernel's [l] fold, [l' = rnd (rnd (l alpha) + ts)] ([ts] the tile's
    sum of its weights [T], within [(G - 1) T]): if [l = S (1 + lam) + eta] then
    [l' = (S alpha + T) (1 + lam') + eta'] with one relative factor [lam'] for the old
    weights and the tile's alike. *)
Lemma l_step_common_factor : forall l a ts S T lam eta Lb G c,
  0 <= S -> 0 <= a -> 0 <= T -> 1 <= G -> Rabs lam <= Lb ->
  l = S * (1 + lam) + eta -> ff_fmt F ts -> Rabs (ts - T) <= (G - 1) * T ->
  (1 + Lb) * (1 + u) - 1 <= c -> G - 1 <= c ->
  exists lam' eta', rnd (rnd (l * a) + ts) = (S * a + T) * (1 + lam') + eta' /\
    Rabs lam' <= (1 + c) * (1 + u) - 1 /\ Rabs eta' <= (1 + u) * ((1 + u) * a * Rabs eta + ff_eta F).
Proof.
  intros l a ts S T lam eta Lb G c HS Ha HT HG Hlam El Fts Hts Hc1 Hc2.
  pose proof (ff_u_nonneg F) as Hu; pose proof (ff_eta_nonneg F) as He.
  assert (HLb : 0 <= Lb) by (pose proof (Rabs_pos lam); lra).
  set (X1 := S * a * (1 + lam)).
  assert (Hz : Rabs (rnd (l * a) - X1) <= u * Rabs X1 + ((1 + u) * a * Rabs eta + ff_eta F)).
  { pose proof (ff_abs F (l * a)) as H.
    replace (rnd (l * a) - X1) with ((rnd (l * a) - l * a) + eta * a) by (unfold X1; rewrite El; ring).
    assert (Ela : l * a = X1 + eta * a) by (unfold X1; rewrite El; ring).
    rewrite Ela in H |- *.
    pose proof (Rabs_triang X1 (eta * a)); rewrite Rabs_mult, (Rabs_right a) in * by lra.
    pose proof (Rabs_triang (rnd (X1 + eta * a) - (X1 + eta * a)) (eta * a)).
    rewrite Rabs_mult, (Rabs_right a) in H1 by lra.
    assert (u * Rabs (X1 + eta * a) <= u * (Rabs X1 + Rabs eta * a)) by (apply Rmult_le_compat_l; lra).
    lra. }
  assert (Hn0 : 0 <= (1 + u) * a * Rabs eta + ff_eta F)
    by (pose proof (Rabs_pos eta); assert (0 <= (1 + u) * a) by nra; nra).
  destruct (rel_abs_split _ _ _ _ Hu Hn0 Hz) as [d1 [n1 [Ez [Hd1 Hn1]]]].
  destruct (rel_err_ex T ts (G - 1) ltac:(lra) ltac:(rewrite (Rabs_right T) by lra; exact Hts)) as [dt [Hdt Et]].
  assert (Hf1 : Rabs ((1 + lam) * (1 + d1) - 1) <= c).
  { replace ((1 + lam) * (1 + d1) - 1) with (lam + d1 + lam * d1) by ring.
    eapply Rle_trans; [apply Rabs_triang |]; rewrite Rabs_mult.
    eapply Rle_trans; [apply Rplus_le_compat_l, Rmult_le_compat; [apply Rabs_pos | apply Rabs_pos | exact Hlam | exact Hd1] |].
    pose proof (Rabs_triang lam d1); nra. }
  assert (Hc0 : 0 <= c) by (assert (0 <= Lb * u) by (apply Rmult_le_pos; lra); nra).
  destruct (two_weights_common (S * a) T ((1 + lam) * (1 + d1) - 1) dt c ltac:(apply Rmult_le_pos; lra) HT
              Hc0 Hf1 ltac:(lra)) as [f [Ef Hf]].
  assert (Ey : rnd (l * a) + ts = (S * a + T) * (1 + f) + n1).
  { rewrite Ez, Et, <- Ef; unfold X1; ring. }
  destruct (rel_err_ex (rnd (l * a) + ts) (rnd (rnd (l * a) + ts)) u Hu
              (ff_add F _ _ (ff_rnd_fmt F _) Fts)) as [d3 [Hd3 E3]].
  exists ((1 + f) * (1 + d3) - 1), (n1 * (1 + d3)); split; [rewrite E3, Ey; ring | split].
  - replace ((1 + f) * (1 + d3) - 1) with (f + d3 + f * d3) by ring.
    eapply Rle_trans; [apply Rabs_triang |]; rewrite Rabs_mult.
    pose proof (Rabs_triang f d3); pose proof (Rabs_pos f); pose proof (Rabs_pos d3).
    assert (Rabs f * Rabs d3 <= c * u) by (apply Rmult_le_compat; lra). nra.
  - rewrite Rabs_mult, (Rmult_comm (1 + u)); apply Rmult_le_compat; [apply Rabs_pos | apply Rabs_pos | exact Hn1 |].
    eapply Rle_trans; [apply Rabs_triang |]; rewrite Rabs_R1; lra.
Qed.

End LStep.

Section LFold.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

Variables (Key : Type) (sc : Key -> R) (vis : Key -> bool) (val : Key -> nat -> R) (accf : R -> list R -> list R -> R).
Variable B : nat.

Hypothesis exp2_nonneg : forall x, 0 <= exp2 x.

Local Notation step := (kernel_step_acc M Key sc vis val accf).
Local Notation newmax st tl := (m_use (vmax Key sc vis (ks_m st) tl)).

(** The kernel's weights of the keys seen so far, shared by [l] and [acc]: for each key
    [(k, p, pi)], its [p = exp2 (rnd (s_k - m_t))] ([m_t] the running max at its tile) and
    [pi] the product, as reals, of the computed [alpha]s of the later tiles.  [l] sums
    [p pi], [acc] the stored [rs p pi v_k]. *)
Definition sw_key (x : Key * R * R) : Key := fst (fst x).
Definition sw_p (x : Key * R * R) : R := snd (fst x).
Definition sw_pi (x : Key * R * R) : R := snd x.
Definition sw_w (x : Key * R * R) : R := sw_p x * sw_pi x.

Definition shared_next (st : kstate) (ws : list (Key * R * R)) (tl : list Key) : list (Key * R * R) :=
  map (fun x => (fst x, sw_pi x * kalpha M (ks_m st) (newmax st tl))) ws
  ++ map (fun k => (k, kweight M Key sc vis (newmax st tl) k, 1)) tl.

Fixpoint shared_run (st : kstate) (ws : list (Key * R * R)) (tiles : list (list Key)) : list (Key * R * R) :=
  match tiles with
  | [] => ws
  | tl :: rest => shared_run (step st tl) (shared_next st ws tl) rest
  end.

Definition mfmt (m : option R) : Prop := match m with None => True | Some x => fmt x end.

Lemma vmax_mfmt : forall tl m, mfmt m -> (forall k, In k tl -> vis k = true -> fmt (sc k)) ->
  mfmt (vmax Key sc vis m tl).
Proof.
  unfold vmax; induction tl as [|k tl IH]; intros m Hm Hk; [exact Hm |].
  cbn [fold_left]; apply IH; [| intros q Hq; apply Hk; right; exact Hq].
  destruct (vis k) eqn:Ev; [| exact Hm].
  pose proof (Hk k (or_introl eq_refl) Ev) as Fk.
  destruct m as [x|]; cbn [omax mfmt] in *; [| exact Fk].
  unfold Rmax; destruct (Rle_dec x (sc k)); assumption.
Qed.

Lemma kweight_nonneg : forall m k, 0 <= kweight M Key sc vis m k.
Proof. intros m k; unfold kweight; destruct (vis k); [apply exp2_nonneg | lra]. Qed.

Lemma kweight_fmt : forall m k, fmt (kweight M Key sc vis m k).
Proof. intros m k; unfold kweight; destruct (vis k); [apply mp_exp2_fmt | apply ff_fmt_0]. Qed.

(** The computed [alpha] is in [[0, 1 + ue + ee]]. *)
Lemma kalpha_le : forall st tl, mfmt (ks_m st) -> (forall k, In k tl -> vis k = true -> fmt (sc k)) ->
  0 <= kalpha M (ks_m st) (newmax st tl) <= 1 + ue + ee.
Proof.
  intros st tl Hm Hk; unfold kalpha.
  pose proof (mp_ue_nonneg M); pose proof (mp_eta_e_nonneg M).
  destruct (ks_m st) as [m|] eqn:Em; [| lra].
  split; [apply exp2_nonneg |].
  rewrite vmax_some_filter; cbn [m_use].
  cbn [mfmt] in Hm; destruct (tmax_props M Key sc (filter vis tl) m Hm) as [Fm' [Hmm' _]].
  { intros k Hin; apply filter_In in Hin; apply Hk; apply Hin. }
  pose proof (exp2_diff_error M m _ Hm Fm' Hmm') as He.
  pose proof (alpha_factor_le M m _ Hmm') as Ha.
  apply Rabs_le_inv in He; nra.
Qed.

Definition l_growth : R := (1 + u) ^ 2 * (1 + ue + ee).

(** [l] after the tiles: the sum of the shared weights times one relative factor, plus an
    absolute (underflow) term; [t] counts the tiles before. *)
Lemma l_run_common_factor : forall tiles st ws lam eta t,
  (forall tl, In tl tiles -> (length tl <= B)%nat) ->
  (forall k, In k (concat tiles) -> vis k = true -> fmt (sc k)) ->
  mfmt (ks_m st) -> (forall x, In x ws -> 0 <= sw_w x) ->
  ks_l st = rsum (map sw_w ws) * (1 + lam) + eta ->
  Rabs lam <= (1 + u) ^ (B - 1 + 2 * t) - 1 -> Rabs eta <= INR t * l_growth ^ t * ea ->
  exists lam' eta', ks_l (kernel_run_acc M Key sc vis val accf st tiles) = rsum (map sw_w (shared_run st ws tiles)) * (1 + lam') + eta'
    /\ Rabs lam' <= (1 + u) ^ (B - 1 + 2 * (t + length tiles)) - 1
    /\ Rabs eta' <= INR (t + length tiles) * l_growth ^ (t + length tiles) * ea.
Proof.
  induction tiles as [|tl rest IH]; intros st ws lam eta t HB Hsc Hm Hws El Hlam Heta.
  - exists lam, eta; cbn [kernel_run_acc fold_left shared_run length]; rewrite Nat.add_0_r; auto.
  - pose proof (ff_u_nonneg A_) as Hu; pose proof (ff_eta_nonneg A_) as Hea.
    pose proof (mp_ue_nonneg M) as Hue; pose proof (mp_eta_e_nonneg M) as Hee.
    assert (Hsc1 : forall k, In k tl -> vis k = true -> fmt (sc k))
      by (intros k Hk; apply Hsc; cbn [concat]; apply in_or_app; left; exact Hk).
    destruct (kalpha_le st tl Hm Hsc1) as [Ha0 Ha1].
    set (a := kalpha M (ks_m st) (newmax st tl)) in *.
    set (ts := ktile_l M Key sc vis (newmax st tl) tl).
    set (T := rsum (map (kweight M Key sc vis (newmax st tl)) tl)).
    assert (HT : 0 <= T) by (apply rsum_nonneg; intros x Hx; apply in_map_iff in Hx;
                               destruct Hx as [k [<- _]]; apply kweight_nonneg).
    assert (HG : 1 <= (1 + u) ^ (B - 1)) by apply one_le_pow_u.
    assert (Hts : Rabs (ts - T) <= ((1 + u) ^ (B - 1) - 1) * T).
    { pose proof (tile_sum_close A_ (map (kweight M Key sc vis (newmax st tl)) tl)) as Hc.
      assert (Habs : abs_sum (map (kweight M Key sc vis (newmax st tl)) tl) = T).
      { unfold abs_sum, T; rewrite map_map; apply rsum_map_ext; intros k _.
        apply Rabs_right, Rle_ge, kweight_nonneg. }
      unfold close in Hc; rewrite Habs in Hc.
      assert (Hl : (length (map (kweight M Key sc vis (newmax st tl)) tl) - 1 <= B - 1)%nat)
        by (rewrite map_length; pose proof (HB tl (or_introl eq_refl)); lia).
      pose proof (pow_u_mono A_ _ _ Hl).
      eapply Rle_trans; [apply Hc |].
      - apply Forall_forall; intros x Hx; apply in_map_iff in Hx; destruct Hx as [k [<- _]]; apply kweight_fmt.
      - apply Rmult_le_compat_r; lra. }
    assert (Hc1 : (1 + ((1 + u) ^ (B - 1 + 2 * t) - 1)) * (1 + u) - 1 <= (1 + u) ^ (B - 1 + 2 * t + 1) - 1)
      by (replace ((1 + ((1 + u) ^ (B - 1 + 2 * t) - 1)) * (1 + u)) with ((1 + u) ^ (B - 1 + 2 * t + 1))
            by (rewrite pow_add; ring); lra).
    assert (Hc2 : (1 + u) ^ (B - 1) - 1 <= (1 + u) ^ (B - 1 + 2 * t + 1) - 1)
      by (pose proof (pow_u_mono A_ (B - 1) (B - 1 + 2 * t + 1) ltac:(lia)); lra).
    destruct (l_step_common_factor A_ (ks_l st) a ts (rsum (map sw_w ws)) T lam eta _ _ _
                ltac:(apply rsum_nonneg; intros y Hy; apply in_map_iff in Hy; destruct Hy as [x [<- Hx]]; apply Hws, Hx) Ha0 HT HG Hlam El (fmt_tile_sum A_ _) Hts Hc1 Hc2)
      as [lam1 [eta1 [E1 [Hl1 He1]]]].
    assert (Ews : rsum (map sw_w ws) * a + T = rsum (map sw_w (shared_next st ws tl))).
    { unfold shared_next; rewrite map_app, rsum_app, !map_map; fold a; f_equal.
      - rewrite Rmult_comm, <- rsum_map_scal_l; apply rsum_map_ext; intros; unfold sw_w, sw_p, sw_pi; cbn; ring.
      - unfold T; apply rsum_map_ext; intros; unfold sw_w, sw_p, sw_pi; cbn; ring. }
    assert (Hm' : mfmt (ks_m (step st tl))) by (apply vmax_mfmt; assumption).
    assert (Hws' : forall x, In x (shared_next st ws tl) -> 0 <= sw_w x).
    { unfold shared_next; intros w Hw; apply in_app_or in Hw; destruct Hw as [Hw | Hw];
        apply in_map_iff in Hw; destruct Hw as [x [<- Hx]]; unfold sw_w, sw_p, sw_pi in *; cbn [fst snd]; fold a.
      - replace (snd (fst x) * (snd x * a)) with ((snd (fst x) * snd x) * a) by ring.
        exact (Rmult_le_pos _ _ (Hws x Hx) Ha0).
      - rewrite Rmult_1_r; apply kweight_nonneg. }
    assert (El' : ks_l (step st tl) = rsum (map sw_w (shared_next st ws tl)) * (1 + lam1) + eta1)
      by (rewrite <- Ews, <- E1; reflexivity).
    assert (Hl1' : Rabs lam1 <= (1 + u) ^ (B - 1 + 2 * S t) - 1).
    { eapply Rle_trans; [exact Hl1 |].
      replace (B - 1 + 2 * S t)%nat with (S (B - 1 + 2 * t + 1)) by lia.
      rewrite <- tech_pow_Rmult; lra. }
    assert (He1' : Rabs eta1 <= INR (S t) * l_growth ^ (S t) * ea).
    { eapply Rle_trans; [exact He1 |].
      assert (HLg : 1 <= l_growth) by (unfold l_growth; assert (1 <= (1 + u) ^ 2) by apply one_le_pow_u; nra).
      assert (Hpt : 1 <= l_growth ^ t) by (apply pow_R1_Rle; lra).
      assert (a * Rabs eta <= (1 + ue + ee) * (INR t * l_growth ^ t * ea))
        by (apply Rmult_le_compat; [lra | apply Rabs_pos | lra | exact Heta]).
      set (P := l_growth ^ t) in *.
      assert (HaE : (1 + u) * ((1 + u) * a * Rabs eta) <= INR t * P * ea * l_growth).
      { unfold l_growth; replace (INR t * P * ea * ((1 + u) ^ 2 * (1 + ue + ee)))
          with ((1 + u) * (1 + u) * ((1 + ue + ee) * (INR t * P * ea))) by ring.
        replace ((1 + u) * ((1 + u) * a * Rabs eta)) with ((1 + u) * (1 + u) * (a * Rabs eta)) by ring.
        apply Rmult_le_compat_l; [nra | exact H]. }
      assert (Hu1 : (1 + u) * ea <= l_growth * P * ea).
      { apply Rmult_le_compat_r; [exact Hea |].
        assert (1 + u <= l_growth) by (unfold l_growth; assert (1 + u <= (1 + u) ^ 2) by (simpl; nra); nra).
        nra. }
      rewrite S_INR; cbn [pow]; fold P.
      replace ((INR t + 1) * (l_growth * P) * ea) with (INR t * P * ea * l_growth + l_growth * P * ea) by ring.
      lra. }
    destruct (IH (step st tl) (shared_next st ws tl) lam1 eta1 (S t)
                ltac:(intros; apply HB; right; assumption)
                ltac:(intros k Hk; apply Hsc; cbn [concat]; apply in_or_app; right; exact Hk)
                Hm' Hws' El' Hl1' He1') as [lam' [eta' [E' [Hl' He']]]].
    exists lam', eta'; cbn [length]; replace (t + S (length rest))%nat with (S t + length rest)%nat by lia.
    split; [exact E' | split; assumption].
Qed.

(** From the kernel's start: [l = (sum_j p_j pi_j) (1 + lam) + eta]. *)
Lemma l_kernel_common_factor : forall d tiles,
  (forall tl, In tl tiles -> (length tl <= B)%nat) ->
  (forall k, In k (concat tiles) -> vis k = true -> fmt (sc k)) ->
  exists lam eta, ks_l (kernel_run_acc M Key sc vis val accf (kernel_start d) tiles)
                  = rsum (map sw_w (shared_run (kernel_start d) [] tiles)) * (1 + lam) + eta
    /\ Rabs lam <= (1 + u) ^ (B - 1 + 2 * length tiles) - 1
    /\ Rabs eta <= INR (length tiles) * l_growth ^ length tiles * ea.
Proof.
  intros d tiles HB Hsc.
  pose proof (ff_eta_nonneg A_) as Hea.
  destruct (l_run_common_factor tiles (kernel_start d) [] 0 0 0 HB Hsc I ltac:(intros x [])
              ltac:(cbn [map ks_l kernel_start]; unfold rsum; cbn [fold_right]; ring)
              ltac:(rewrite Rabs_R0; pose proof (one_le_pow_u A_ (B - 1 + 2 * 0)); lra)
              ltac:(rewrite Rabs_R0; cbn [INR]; lra)) as [lam [eta [E [Hl He]]]].
  exists lam, eta; split; [exact E | split; assumption].
Qed.

End LFold.

Section AccStep.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

(** The split model's absolute term is nonnegative (its bound at [c = 0] and zero vectors). *)
Lemma adsm_abs_nonneg : forall accf n g_acc g_dot ga, acc_dot_split_model accf n g_acc g_dot ga -> 0 <= ga.
Proof.
  intros accf n g_acc g_dot ga Hm.
  assert (Z : forall (f : R * R -> R) m, (forall x y, f (x, y) = x * y \/ f (x, y) = Rabs (x * y)) ->
            rsum (map f (combine (repeat 0 m) (repeat 0 m))) = 0).
  { intros f m Hf; induction m as [|m IH]; [reflexivity |].
    cbn [repeat combine map]; rewrite rsum_cons, IH.
    destruct (Hf 0 0) as [E | E]; rewrite E, Rmult_0_l; [ring | rewrite Rabs_R0; ring]. }
  pose proof (adsm_err _ _ _ _ _ Hm 0 (repeat 0 n) (repeat 0 n) (repeat_length 0 n) (repeat_length 0 n)) as H.
  rewrite (Z (fun xy => fst xy * snd xy)) in H by (intros; left; reflexivity).
  rewrite (Z (fun xy => Rabs (fst xy * snd xy))) in H by (intros; right; reflexivity).
  rewrite Rabs_R0, !Rmult_0_r in H; pose proof (Rabs_pos (accf 0 (repeat 0 n) (repeat 0 n) - (0 + 0))); lra.
Qed.

(** One tile into one coordinate of the accumulator, [acc' = accf (rnd (acc alpha)) P V]
    ([acc_dot_split_model accf n g_acc g_dot ga]): if [acc = Nw + E] then [acc'] is within
      rho a |E| + (rho - 1) a |Nw| + g_dot sum |P V| + (1 + g_acc) ea + ga,
      rho = (1 + g_acc) (1 + u),
    of [a Nw + sum P V]: the error so far grows by [rho a] (the rescale's rounding [u], the
    accumulator's [g_acc]), and the roundings are charged on the shared numerator [Nw] (not
    on the weights' errors), the tile's products on [g_dot]. *)
Lemma acc_step_shared : forall accf n g_acc g_dot ga x a Nw E (P V : list R),
  acc_dot_split_model accf n g_acc g_dot ga -> length P = n -> length V = n -> 0 <= a -> x = Nw + E ->
  Rabs (accf (rnd (x * a)) P V - (a * Nw + dot_R P V))
  <= (1 + g_acc) * (1 + u) * a * Rabs E + ((1 + g_acc) * (1 + u) - 1) * a * Rabs Nw + g_dot * dot_abs P V
     + (1 + g_acc) * ea + ga.
Proof.
  intros accf n g gd ga x a Nw E P V Hm HP HV Ha Ex.
  pose proof (adsm_acc_nonneg _ _ _ _ _ Hm) as Hg; pose proof (ff_u_nonneg A_) as Hu; pose proof (ff_eta_nonneg A_) as Hea.
  set (y := rnd (x * a)).
  pose proof (adsm_err _ _ _ _ _ Hm y P V HP HV) as Hd.
  change (rsum (map (fun xy => fst xy * snd xy) (combine P V))) with (dot_R P V) in Hd.
  change (rsum (map (fun xy => Rabs (fst xy * snd xy)) (combine P V))) with (dot_abs P V) in Hd.
  pose proof (ff_abs A_ (x * a)) as Hy; fold y in Hy.
  assert (Hxa : Rabs (x * a) <= a * (Rabs Nw + Rabs E)).
  { rewrite Rabs_mult, (Rabs_right a) by lra; rewrite Ex, Rmult_comm.
    apply Rmult_le_compat_l; [exact Ha | apply Rabs_triang]. }
  assert (Hy' : Rabs y <= (1 + u) * Rabs (x * a) + ea).
  { replace y with ((y - x * a) + x * a) by ring; pose proof (Rabs_triang (y - x * a) (x * a)); lra. }
  replace (accf y P V - (a * Nw + dot_R P V)) with ((accf y P V - (y + dot_R P V)) + (y - x * a) + a * E)
    by (rewrite Ex; ring).
  eapply Rle_trans; [apply Rabs_triang |].
  eapply Rle_trans; [apply Rplus_le_compat_r, Rabs_triang |].
  rewrite Rabs_mult, (Rabs_right a) by lra.
  assert (Hy2 : Rabs y <= (1 + u) * (a * (Rabs Nw + Rabs E)) + ea).
  { assert ((1 + u) * Rabs (x * a) <= (1 + u) * (a * (Rabs Nw + Rabs E))) by (apply Rmult_le_compat_l; lra); lra. }
  assert (g * Rabs y <= g * ((1 + u) * (a * (Rabs Nw + Rabs E)) + ea)) by (apply Rmult_le_compat_l; lra).
  assert (u * Rabs (x * a) <= u * (a * (Rabs Nw + Rabs E))) by (apply Rmult_le_compat_l; lra).
  nra.
Qed.

End AccStep.

Section AccFold.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

Variables (Key : Type) (sc : Key -> R) (vis : Key -> bool) (val : Key -> nat -> R) (accf : R -> list R -> list R -> R).
Variables (n : nat) (g_acc g_dot ga : R).

Hypothesis Hm : acc_dot_split_model accf n g_acc g_dot ga.
Hypothesis exp2_nonneg : forall x, 0 <= exp2 x.

Local Notation step := (kernel_step_acc M Key sc vis val accf).
Local Notation newmax st tl := (m_use (vmax Key sc vis (ks_m st) tl)).
Local Notation alpha st tl := (kalpha M (ks_m st) (newmax st tl)).
Local Notation snext := (shared_next M Key sc vis).
Local Notation srun := (shared_run M Key sc vis val accf).

(** The stored weight [rs p pi] of a shared entry, and the shared numerator of coordinate [c]. *)
Definition sw_ws (x : Key * R * R) : R := ff_rnd S_ (sw_p Key x) * sw_pi Key x.
Definition sw_num (c : nat) (ws : list (Key * R * R)) : R :=
  rsum (map (fun x => sw_ws x * val (sw_key Key x) c) ws).

(** The tile's [sum |rs p v|] and the running bound of the accumulator's own errors. *)
Definition tile_pv_abs (st : kstate) (tl : list Key) (c : nat) : R :=
  dot_abs (map (fun k => ff_rnd S_ (kweight M Key sc vis (newmax st tl) k)) tl) (map (fun k => val k c) tl).

Definition rho_acc : R := (1 + g_acc) * (1 + u).

Fixpoint acc_err_run (c : nat) (st : kstate) (ws : list (Key * R * R)) (EB : R) (tiles : list (list Key)) : R :=
  match tiles with
  | [] => EB
  | tl :: rest =>
      acc_err_run c (step st tl) (snext st ws tl)
        (rho_acc * alpha st tl * EB + (rho_acc - 1) * alpha st tl * Rabs (sw_num c ws)
         + g_dot * tile_pv_abs st tl c + (1 + g_acc) * ea + ga) rest
  end.

Lemma sw_num_next : forall st ws tl c,
  sw_num c (snext st ws tl)
  = alpha st tl * sw_num c ws
    + dot_R (map (fun k => ff_rnd S_ (kweight M Key sc vis (newmax st tl) k)) tl) (map (fun k => val k c) tl).
Proof.
  intros st ws tl c; unfold sw_num, shared_next; rewrite map_app, rsum_app, !map_map; f_equal.
  - rewrite <- rsum_map_scal_l; apply rsum_map_ext; intros x _; unfold sw_ws, sw_p, sw_pi, sw_key; cbn [fst snd]; ring.
  - unfold dot_R; rewrite combine_map_both, map_map; apply rsum_map_ext; intros k _.
    unfold sw_ws, sw_p, sw_pi, sw_key; cbn [fst snd]; ring.
Qed.

Lemma kalpha_nonneg : forall m m', 0 <= kalpha M m m'.
Proof. intros [x|] m'; cbn [kalpha]; [apply exp2_nonneg | lra]. Qed.

Lemma rho_acc_nonneg : 0 <= rho_acc.
Proof.
  unfold rho_acc; pose proof (adsm_acc_nonneg _ _ _ _ _ Hm); pose proof (ff_u_nonneg A_).
  apply Rmult_le_pos; lra.
Qed.

Lemma acc_err_run_mono : forall tiles c st ws EB1 EB2, EB1 <= EB2 ->
  acc_err_run c st ws EB1 tiles <= acc_err_run c st ws EB2 tiles.
Proof.
  induction tiles as [|tl rest IH]; intros c st ws EB1 EB2 H; cbn [acc_err_run]; [exact H |].
  apply IH; apply Rplus_le_compat_r, Rplus_le_compat_r, Rplus_le_compat_r, Rplus_le_compat_r.
  apply Rmult_le_compat_l; [apply Rmult_le_pos; [apply rho_acc_nonneg | apply kalpha_nonneg] | exact H].
Qed.

(** Coordinate [c] of [acc]: the shared numerator plus an error within [acc_err_run]. *)
Lemma acc_run_shared : forall tiles st ws E EB c,
  (forall tl, In tl tiles -> length tl = n) ->
  (forall k, In k (concat tiles) -> vis k = true -> fmt (sc k)) ->
  mfmt M (ks_m st) -> (c < length (ks_acc st))%nat ->
  nth c (ks_acc st) 0 = sw_num c ws + E -> Rabs E <= EB ->
  exists E', nth c (ks_acc (kernel_run_acc M Key sc vis val accf st tiles)) 0 = sw_num c (srun st ws tiles) + E'
    /\ Rabs E' <= acc_err_run c st ws EB tiles.
Proof.
  induction tiles as [|tl rest IH]; intros st ws E EB c Hn Hsc Hmf Hc Ex HE.
  - exists E; split; [exact Ex | exact HE].
  - assert (Hsc1 : forall k, In k tl -> vis k = true -> fmt (sc k))
      by (intros k Hk; apply Hsc; cbn [concat]; apply in_or_app; left; exact Hk).
    destruct (kalpha_le M Key sc vis exp2_nonneg st tl Hmf Hsc1) as [Ha0 _].
    pose proof (Hn tl (or_introl eq_refl)) as Hl.
    set (P := map (fun k => ff_rnd S_ (kweight M Key sc vis (newmax st tl) k)) tl).
    set (V := map (fun k => val k c) tl).
    pose proof (acc_step_shared M accf n g_acc g_dot ga (nth c (ks_acc st) 0) (alpha st tl) (sw_num c ws) E P V Hm
                  ltac:(unfold P; rewrite map_length; exact Hl) ltac:(unfold V; rewrite map_length; exact Hl) Ha0 Ex) as Hs.
    unfold P, V in Hs; rewrite <- (kernel_step_acc_nth M Key sc vis val accf st tl c Hc), <- sw_num_next in Hs.
    destruct (IH (step st tl) (snext st ws tl) _ _ c
                ltac:(intros; apply Hn; right; assumption)
                ltac:(intros k Hk; apply Hsc; cbn [concat]; apply in_or_app; right; exact Hk)
                ltac:(apply (vmax_mfmt M Key sc vis); assumption)
                ltac:(rewrite kernel_step_acc_length; exact Hc)
                ltac:(symmetry; apply Rplus_minus) (Rle_refl _)) as [E' [E1 HE1]].
    exists E'; split; [exact E1 |].
    eapply Rle_trans; [exact HE1 |]; cbn [acc_err_run]; apply acc_err_run_mono.
    eapply Rle_trans; [exact Hs |]; unfold rho_acc, tile_pv_abs.
    apply Rplus_le_compat_r, Rplus_le_compat_r, Rplus_le_compat_r, Rplus_le_compat_r.
    apply Rmult_le_compat_l; [| exact HE].
    pose proof (rho_acc_nonneg) as Hr; unfold rho_acc in Hr; apply Rmult_le_pos; [exact Hr | exact Ha0].
Qed.

(** From the kernel's start ([acc = 0]), tiles of [n] keys. *)
Lemma acc_kernel_shared : forall d tiles c,
  (forall tl, In tl tiles -> length tl = n) ->
  (forall k, In k (concat tiles) -> vis k = true -> fmt (sc k)) -> (c < d)%nat ->
  exists E, nth c (ks_acc (kernel_run_acc M Key sc vis val accf (kernel_start d) tiles)) 0
            = sw_num c (srun (kernel_start d) [] tiles) + E
    /\ Rabs E <= acc_err_run c (kernel_start d) [] 0 tiles.
Proof.
  intros d tiles c Hn Hsc Hc.
  apply (acc_run_shared tiles (kernel_start d) [] 0 0 c); [exact Hn | exact Hsc | exact I | cbn [ks_acc kernel_start]; rewrite repeat_length; exact Hc | |].
  - cbn [ks_acc kernel_start]; rewrite nth_repeat; unfold sw_num; cbn [map]; unfold rsum; cbn [fold_right]; ring.
  - rewrite Rabs_R0; apply Rle_refl.
Qed.

(** ** The accumulator's error bound in the final frame

    [alpha_prod st tiles]: the product of the computed [alpha]s of the tiles, so that the
    entries [ws] present before the tiles end in [srun] with [pi] times it. *)
Fixpoint alpha_prod (st : kstate) (tiles : list (list Key)) : R :=
  match tiles with
  | [] => 1
  | tl :: rest => alpha st tl * alpha_prod (step st tl) rest
  end.

Definition sw_scale (f : R) (x : Key * R * R) : Key * R * R := (fst x, sw_pi Key x * f).

Lemma shared_next_length : forall st ws tl, length (snext st ws tl) = (length ws + length tl)%nat.
Proof. intros; unfold shared_next; rewrite app_length, !map_length; reflexivity. Qed.

Lemma shared_run_prefix : forall tiles st ws,
  firstn (length ws) (srun st ws tiles) = map (sw_scale (alpha_prod st tiles)) ws.
Proof.
  induction tiles as [|tl rest IH]; intros st ws; cbn [shared_run alpha_prod].
  - rewrite firstn_all; unfold sw_scale, sw_pi; symmetry; rewrite <- (map_id ws) at 2; apply map_ext.
    intros [[k p] pi]; cbn; f_equal; ring.
  - rewrite <- (Nat.min_l (length ws) (length (snext st ws tl))) by (rewrite shared_next_length; lia).
    rewrite <- firstn_firstn, IH, firstn_map.
    unfold shared_next; rewrite firstn_app, map_length, Nat.sub_diag, firstn_O, app_nil_r.
    rewrite <- (map_length (fun x => (fst x, sw_pi Key x * alpha st tl)) ws), firstn_all, map_map.
    apply map_ext; intros [[k p] pi]; unfold sw_scale, sw_pi; cbn; f_equal; ring.
Qed.


Lemma alpha_prod_bounds : forall tiles st, (forall k, In k (concat tiles) -> vis k = true -> fmt (sc k)) ->
  mfmt M (ks_m st) -> 0 <= alpha_prod st tiles <= (1 + ue + ee) ^ length tiles.
Proof.
  induction tiles as [|tl rest IH]; intros st Hsc Hmf; cbn [alpha_prod length pow]; [lra |].
  assert (Hsc1 : forall k, In k tl -> vis k = true -> fmt (sc k))
    by (intros k Hk; apply Hsc; cbn [concat]; apply in_or_app; left; exact Hk).
  destruct (kalpha_le M Key sc vis exp2_nonneg st tl Hmf Hsc1) as [Ha0 Ha1].
  destruct (IH (step st tl)) as [H0 H1].
  { intros k Hk; apply Hsc; cbn [concat]; apply in_or_app; right; exact Hk. }
  { apply (vmax_mfmt M Key sc vis); assumption. }
  split; [apply Rmult_le_pos; assumption | apply Rmult_le_compat; assumption].
Qed.

Definition sw_abs (c : nat) (ws : list (Key * R * R)) : R :=
  rsum (map (fun x => Rabs (sw_ws x * val (sw_key Key x) c)) ws).

(** The terms of tile [t] ([w0] entries before the first tile, tiles of [n] keys): the
    signed prefix before it and its own absolute sum, in the final list [L]. *)
Definition acc_err_terms (c : nat) (L : list (Key * R * R)) (w0 Tt : nat) : R :=
  rsum (map (fun t => (rho_acc - 1) * Rabs (sw_num c (firstn (w0 + t * n) L))
                      + g_dot * sw_abs c (firstn n (skipn (w0 + t * n) L))) (seq 0 Tt)).

Lemma sw_num_scale : forall f c ws, sw_num c (map (sw_scale f) ws) = f * sw_num c ws.
Proof.
  intros f c ws; unfold sw_num; rewrite map_map, <- rsum_map_scal_l; apply rsum_map_ext.
  intros [[k p] pi] _; unfold sw_ws, sw_scale, sw_p, sw_pi, sw_key; cbn; ring.
Qed.

Lemma sw_abs_scale : forall f c ws, 0 <= f -> sw_abs c (map (sw_scale f) ws) = f * sw_abs c ws.
Proof.
  intros f c ws Hf; unfold sw_abs; rewrite map_map, <- rsum_map_scal_l; apply rsum_map_ext.
  intros [[k p] pi] _; unfold sw_ws, sw_scale, sw_p, sw_pi, sw_key; cbn.
  rewrite <- (Rabs_right f) at 2 by lra; rewrite <- Rabs_mult; f_equal; ring.
Qed.

Lemma acc_err_run_final : forall tiles st ws EB c,
  (forall tl, In tl tiles -> length tl = n) ->
  (forall k, In k (concat tiles) -> vis k = true -> fmt (sc k)) -> mfmt M (ks_m st) ->
  acc_err_run c st ws EB tiles
  <= rho_acc ^ length tiles * (alpha_prod st tiles * EB
       + acc_err_terms c (srun st ws tiles) (length ws) (length tiles))
     + rho_acc ^ length tiles * INR (length tiles) * (1 + ue + ee) ^ length tiles * ((1 + g_acc) * ea + ga).
Proof.
  induction tiles as [|tl rest IH]; intros st ws EB c Hn Hsc Hmf.
  - cbn [acc_err_run alpha_prod length pow INR]; unfold acc_err_terms; cbn [seq map]; unfold rsum; cbn [fold_right]; lra.
  - pose proof (adsm_acc_nonneg _ _ _ _ _ Hm) as Hg; pose proof (adsm_dot_nonneg _ _ _ _ _ Hm) as Hgd.
    pose proof (adsm_abs_nonneg _ _ _ _ _ Hm) as Hga.
    pose proof (ff_u_nonneg A_) as Hu; pose proof (ff_eta_nonneg A_) as Hea.
    pose proof (mp_ue_nonneg M) as Hue; pose proof (mp_eta_e_nonneg M) as Hee.
    assert (Hr1 : 1 <= rho_acc) by (unfold rho_acc; nra).
    assert (Hsc1 : forall k, In k tl -> vis k = true -> fmt (sc k))
      by (intros k Hk; apply Hsc; cbn [concat]; apply in_or_app; left; exact Hk).
    assert (Hsc2 : forall k, In k (concat rest) -> vis k = true -> fmt (sc k))
      by (intros k Hk; apply Hsc; cbn [concat]; apply in_or_app; right; exact Hk).
    assert (Hmf' : mfmt M (ks_m (step st tl))) by (apply (vmax_mfmt M Key sc vis); assumption).
    destruct (kalpha_le M Key sc vis exp2_nonneg st tl Hmf Hsc1) as [Ha0 Ha1].
    destruct (alpha_prod_bounds rest (step st tl) Hsc2 Hmf') as [HL0 HL1].
    pose proof (Hn tl (or_introl eq_refl)) as Hl.
    set (a := alpha st tl) in *.
    set (L' := alpha_prod (step st tl) rest) in *.
    set (L := srun (step st tl) (snext st ws tl) rest).
    set (T := length rest).
    set (Ab := (1 + g_acc) * ea + ga).
    assert (HAb : 0 <= Ab) by (unfold Ab; nra).
    cbn [acc_err_run alpha_prod length shared_run]; fold a L' L T.
    eapply Rle_trans; [apply IH; [intros; apply Hn; right; assumption | exact Hsc2 | exact Hmf'] |]; fold L L' T.
    (* the first tile's terms in the final list *)
    assert (Hpre : firstn (length (snext st ws tl)) L = map (sw_scale L') (snext st ws tl))
      by apply shared_run_prefix.
    assert (E0 : L' * (a * Rabs (sw_num c ws)) = Rabs (sw_num c (firstn (length ws + 0 * n) L))).
    { rewrite Nat.mul_0_l, Nat.add_0_r.
      rewrite <- (Nat.min_l (length ws) (length (snext st ws tl))) by (rewrite shared_next_length; lia).
      rewrite <- firstn_firstn, Hpre, firstn_map.
      unfold shared_next; rewrite firstn_app, map_length, Nat.sub_diag, firstn_O, app_nil_r.
      rewrite <- (map_length (fun x => (fst x, sw_pi Key x * a)) ws), firstn_all, map_map.
      rewrite (map_ext _ (sw_scale (a * L'))) by (intros [[k p] pi]; unfold sw_scale, sw_pi; cbn [fst snd]; rewrite Rmult_assoc; reflexivity).
      rewrite sw_num_scale, Rabs_mult, (Rabs_right (a * L')) by (apply Rle_ge, Rmult_le_pos; assumption); ring. }
    assert (E1 : L' * tile_pv_abs st tl c = sw_abs c (firstn n (skipn (length ws + 0 * n) L))).
    { rewrite Nat.mul_0_l, Nat.add_0_r.
      rewrite firstn_skipn_comm.
      replace (length ws + n)%nat with (length (snext st ws tl)) by (rewrite shared_next_length; lia).
      rewrite Hpre; unfold shared_next; rewrite !map_app, skipn_app, !map_length.
      rewrite skipn_all2 by (rewrite !map_length; lia); rewrite Nat.sub_diag, skipn_O, app_nil_l, map_map.
      rewrite <- (map_map (fun k => (k, kweight M Key sc vis (newmax st tl) k, 1)) (sw_scale L')).
      rewrite sw_abs_scale by exact HL0; f_equal.
      unfold tile_pv_abs, dot_abs, sw_abs; rewrite combine_map_both, !map_map; apply rsum_map_ext; intros k _.
      unfold sw_ws, sw_p, sw_pi, sw_key; cbn [fst snd]; rewrite Rmult_1_r; reflexivity. }
    assert (Esplit : acc_err_terms c L (length ws) (S T)
                     = Rabs (sw_num c (firstn (length ws + 0 * n) L)) * (rho_acc - 1)
                       + g_dot * sw_abs c (firstn n (skipn (length ws + 0 * n) L))
                       + acc_err_terms c L (length (snext st ws tl)) T).
    { unfold acc_err_terms; cbn [seq map]; rewrite <- seq_shift, rsum_cons, map_map.
      f_equal; [ring | f_equal]; apply map_ext; intros t.
      rewrite shared_next_length, Hl; replace (length ws + S t * n)%nat with (length ws + n + t * n)%nat by lia.
      reflexivity. }
    assert (Hterms : 0 <= acc_err_terms c L (length (snext st ws tl)) T).
    { unfold acc_err_terms; apply rsum_nonneg; intros y Hy; apply in_map_iff in Hy; destruct Hy as [t [<- _]].
      apply Rplus_le_le_0_compat; apply Rmult_le_pos; try lra; try apply Rabs_pos.
      unfold sw_abs; apply rsum_nonneg; intros z Hz; apply in_map_iff in Hz; destruct Hz as [x [<- _]]; apply Rabs_pos. }
    rewrite Esplit, <- E0, <- E1; rewrite Nat.mul_0_l, Nat.add_0_r in *.
    set (Tm := acc_err_terms c L (length (snext st ws tl)) T) in *.
    set (P := rho_acc ^ T) in *; set (Q := (1 + ue + ee) ^ T) in *; fold T in HL1; fold Q in HL1.
    assert (HP : 1 <= P) by (apply pow_R1_Rle; lra).
    assert (HQ : 1 <= Q) by (apply pow_R1_Rle; lra).
    assert (HX : 0 <= (rho_acc - 1) * (L' * (a * Rabs (sw_num c ws))) + g_dot * (L' * tile_pv_abs st tl c) + Tm).
    { assert (0 <= tile_pv_abs st tl c).
      { unfold tile_pv_abs, dot_abs; apply rsum_nonneg; intros z Hz; apply in_map_iff in Hz; destruct Hz as [x [<- _]]; apply Rabs_pos. }
      pose proof (Rabs_pos (sw_num c ws)).
      assert (0 <= L' * (a * Rabs (sw_num c ws))) by (apply Rmult_le_pos; [lra | apply Rmult_le_pos; lra]).
      assert (0 <= L' * tile_pv_abs st tl c) by (apply Rmult_le_pos; lra).
      assert (0 <= (rho_acc - 1) * (L' * (a * Rabs (sw_num c ws)))) by (apply Rmult_le_pos; lra).
      assert (0 <= g_dot * (L' * tile_pv_abs st tl c)) by (apply Rmult_le_pos; lra).
      lra. }
    set (X := (rho_acc - 1) * (L' * (a * Rabs (sw_num c ws))) + g_dot * (L' * tile_pv_abs st tl c) + Tm) in HX.
    assert (H1 : P * X <= rho_acc * P * X) by (assert (0 <= P * X) by (apply Rmult_le_pos; lra); nra).
    assert (H2 : L' * Ab <= Q * Ab) by (apply Rmult_le_compat_r; lra).
    assert (H3 : P * (Q * Ab) <= rho_acc * P * ((1 + ue + ee) * Q) * Ab).
    { replace (rho_acc * P * ((1 + ue + ee) * Q) * Ab) with ((rho_acc * (1 + ue + ee)) * (P * (Q * Ab))) by ring.
      assert (0 <= P * (Q * Ab)) by (apply Rmult_le_pos; [lra | apply Rmult_le_pos; lra]).
      assert (1 <= rho_acc * (1 + ue + ee)) by nra. nra. }
    assert (H4 : P * INR T * Q * Ab <= rho_acc * P * INR T * ((1 + ue + ee) * Q) * Ab).
    { replace (rho_acc * P * INR T * ((1 + ue + ee) * Q) * Ab) with ((rho_acc * (1 + ue + ee)) * (P * INR T * Q * Ab)) by ring.
      assert (0 <= P * INR T * Q * Ab) by (pose proof (pos_INR T); apply Rmult_le_pos; [apply Rmult_le_pos; [apply Rmult_le_pos |] |]; lra).
      assert (1 <= rho_acc * (1 + ue + ee)) by nra. nra. }
    assert (H5 : P * (L' * Ab) <= P * (Q * Ab)) by (apply Rmult_le_compat_l; lra).
    cbn [pow]; fold P Q; rewrite S_INR; unfold Ab in *.
    unfold X in H1; lra.
Qed.

(** From the kernel's start: coordinate [c] of [acc] is the shared numerator of the final
    list [L] plus [E], [|E|] at most [rho^Tt] times the signed prefixes' and the tiles'
    terms in [L], plus the absolute (underflow) terms. *)
Lemma acc_kernel_shared_final : forall d tiles c,
  (forall tl, In tl tiles -> length tl = n) ->
  (forall k, In k (concat tiles) -> vis k = true -> fmt (sc k)) -> (c < d)%nat ->
  exists E, nth c (ks_acc (kernel_run_acc M Key sc vis val accf (kernel_start d) tiles)) 0
            = sw_num c (srun (kernel_start d) [] tiles) + E
    /\ Rabs E <= rho_acc ^ length tiles * acc_err_terms c (srun (kernel_start d) [] tiles) 0 (length tiles)
               + rho_acc ^ length tiles * INR (length tiles) * (1 + ue + ee) ^ length tiles * ((1 + g_acc) * ea + ga).
Proof.
  intros d tiles c Hn Hsc Hc.
  destruct (acc_kernel_shared d tiles c Hn Hsc Hc) as [E [Ex HE]].
  exists E; split; [exact Ex |].
  eapply Rle_trans; [exact HE |].
  pose proof (acc_err_run_final tiles (kernel_start d) [] 0 c Hn Hsc I) as Hf.
  rewrite Rmult_0_r, Rplus_0_l in Hf; exact Hf.
Qed.

End AccFold.

(** ** The shared weights against [2^(s - m_T)] *)

Section WeightStep.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

(** A key's shared weight [w] within [(G - 1) 2^(s - m) + R] of [2^(s - m)], rescaled by the
    computed [alpha = exp2 (rnd (m - m'))]: within [(G ef - 1) 2^(s - m') + R (1 + ue + ee)
    + G ee] of [2^(s - m')], [ef = exp2_factor m m' = (1 + ue) 2^(u (m' - m))]: the relative
    factors multiply ([ef]'s [2^(u (m' - m))] telescoping over the tiles to [2^(u (m_T - s))]). *)
Lemma weight_rescale_close : forall w s m m' G R,
  fmt m -> fmt m' -> m <= m' -> s <= m -> 1 <= G -> 0 <= R ->
  Rabs (w - Rpower 2 (s - m)) <= (G - 1) * Rpower 2 (s - m) + R ->
  Rabs (w * exp2 (rnd (m - m')) - Rpower 2 (s - m'))
  <= (G * exp2_factor M m m' - 1) * Rpower 2 (s - m') + (R * (1 + ue + ee) + G * ee).
Proof.
  intros w s m m' G R Fm Fm' Hmm Hsm HG HR Hw.
  pose proof (mp_ue_nonneg M) as Hue; pose proof (mp_eta_e_nonneg M) as Hee.
  pose proof (exp2_diff_error M m m' Fm Fm' Hmm) as Ha.
  pose proof (alpha_factor_le M m m' Hmm) as Haf.
  pose proof (exp2_factor_ge_1 M m m' Hmm) as Hef.
  set (a := exp2 (rnd (m - m'))) in *.
  set (As := Rpower 2 (m - m')) in *.
  set (W := Rpower 2 (s - m)) in *.
  set (ef := exp2_factor M m m') in *.
  assert (EW : Rpower 2 (s - m') = W * As) by (unfold W, As; rewrite <- Rpower_plus; f_equal; ring).
  assert (HW0 : 0 < W) by apply Rpower_pos.
  assert (HA0 : 0 < As) by apply Rpower_pos.
  assert (HW1 : W <= 1) by (unfold W; rewrite <- (Rpower_O 2) by lra; apply ost_rpow_le; lra).
  assert (Habs : Rabs a <= As * ef + ee).
  { replace a with (As + (a - As)) by ring; eapply Rle_trans; [apply Rabs_triang |].
    rewrite Rabs_right by lra; nra. }
  rewrite EW.
  replace (w * a - W * As) with ((w - W) * a + W * (a - As)) by ring.
  eapply Rle_trans; [apply Rabs_triang |]; rewrite !Rabs_mult, (Rabs_right W) by lra.
  assert (H1 : Rabs (w - W) * Rabs a <= ((G - 1) * W + R) * (As * ef + ee))
    by (apply Rmult_le_compat; [apply Rabs_pos | apply Rabs_pos | exact Hw | exact Habs]).
  assert (H2 : W * Rabs (a - As) <= W * (As * (ef - 1) + ee)) by (apply Rmult_le_compat_l; lra).
  assert (H3 : R * (As * ef + ee) <= R * (1 + ue + ee)) by (apply Rmult_le_compat_l; lra).
  assert (H4 : (G - 1) * W * ee + W * ee <= G * ee).
  { replace ((G - 1) * W * ee + W * ee) with (G * (W * ee)) by ring.
    apply Rmult_le_compat_l; [lra |]; rewrite <- (Rmult_1_l ee) at 2; apply Rmult_le_compat_r; lra. }
  nra.
Qed.

End WeightStep.

Section WeightFold.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

Variables (Key : Type) (sc : Key -> R) (vis : Key -> bool) (val : Key -> nat -> R) (accf : R -> list R -> list R -> R).
Variables (m0 K : R).

Hypothesis HK : 0 <= K.

Local Notation step := (kernel_step_acc M Key sc vis val accf).
Local Notation snext := (shared_next M Key sc vis).
Local Notation srun := (shared_run M Key sc vis val accf).

(** The factors after [k] tiles: [Gw k m s = (1 + ue)^k 2^(u (m - s))] (the [exp2]s' relative
    errors and the argument roundings, telescoped), [Rw k] the absolute ([ee]) terms. *)
Definition Gw (k : nat) (m s : R) : R := (1 + ue) ^ k * Rpower 2 (u * (m - s)).
Definition Rw (k : nat) : R := INR k * ((1 + ue + ee) * (1 + ue)) ^ k * Rpower 2 (u * K) * ee.

(** Every entry of a visible key: its score at most the running max [m], and its weight
    within [Gw k m s] and [Rw k] of [2^(s - m)]; an entry of a masked key has [p = 0]. *)
Definition weight_inv (k : nat) (st : kstate) (ws : list (Key * R * R)) : Prop :=
  (forall m, ks_m st = Some m -> fmt m /\ m <= m0 + K) /\
  forall x, In x ws ->
    if vis (sw_key Key x) then
      exists m, ks_m st = Some m /\ m0 <= sc (sw_key Key x) <= m /\
        Rabs (sw_w Key x - Rpower 2 (sc (sw_key Key x) - m))
        <= (Gw k m (sc (sw_key Key x)) - 1) * Rpower 2 (sc (sw_key Key x) - m) + Rw k
    else sw_p Key x = 0.


(** The running max bounds every visible score of the tile and the old max. *)
Lemma vmax_ge : forall tl mo m', vmax Key sc vis mo tl = Some m' ->
  (forall m, mo = Some m -> m <= m') /\ (forall q, In q tl -> vis q = true -> sc q <= m').
Proof.
  unfold vmax; induction tl as [|k tl IH]; intros mo m' E; cbn [fold_left] in E.
  - split; [intros m Em; rewrite Em in E; injection E as ->; lra | intros q []].
  - destruct (IH _ _ E) as [H1 H2].
    split; [| intros q [<- | Hq] Hv; [| apply H2; assumption]].
    + intros m Em; subst mo; destruct (vis k); [| apply H1; reflexivity].
      cbn [omax] in H1; pose proof (H1 _ eq_refl); pose proof (Rmax_l m (sc k)); lra.
    + rewrite Hv in H1; destruct mo as [m|]; cbn [omax] in H1; pose proof (H1 _ eq_refl);
        [pose proof (Rmax_r m (sc k)) |]; lra.
Qed.

Lemma vmax_le : forall tl mo b m', (forall m, mo = Some m -> m <= b) ->
  (forall q, In q tl -> vis q = true -> sc q <= b) -> vmax Key sc vis mo tl = Some m' -> m' <= b.
Proof.
  unfold vmax; induction tl as [|k tl IH]; intros mo b m' Hm Hq E; cbn [fold_left] in E.
  - apply Hm, E.
  - apply (IH (if vis k then omax mo (sc k) else mo) b m'); [| intros q Hin Hv; apply Hq; [right |]; assumption | exact E].
    intros m Em; destruct (vis k) eqn:Ev; [| apply Hm, Em].
    destruct mo as [x|]; cbn [omax] in Em; injection Em as <-;
      [apply Rmax_lub; [apply Hm; reflexivity |] |]; apply Hq; [left | | left |]; auto.
Qed.

Lemma Gw_ge_1 : forall k m s, s <= m -> 1 <= Gw k m s.
Proof.
  intros k m s H; unfold Gw; pose proof (mp_ue_nonneg M); pose proof (ff_u_nonneg A_).
  assert (1 <= (1 + ue) ^ k) by (apply pow_R1_Rle; lra).
  assert (1 <= Rpower 2 (u * (m - s))) by (apply ose_rpow_ge_1; nra).
  nra.
Qed.

Lemma Rw_nonneg : forall k, 0 <= Rw k.
Proof.
  intros k; unfold Rw; pose proof (mp_ue_nonneg M); pose proof (mp_eta_e_nonneg M); pose proof (pos_INR k).
  assert (0 <= ((1 + ue + ee) * (1 + ue)) ^ k) by (apply pow_le; nra).
  pose proof (Rpower_pos (u * K)).
  apply Rmult_le_pos; [| lra]; apply Rmult_le_pos; [apply Rmult_le_pos |]; lra.
Qed.

(** The growth of [Rw] over one tile, and a new key's [ee] within it. *)
Lemma Rw_step : forall k G, G <= (1 + ue) ^ k * Rpower 2 (u * K) -> Rw k * (1 + ue + ee) + G * ee <= Rw (S k).
Proof.
  intros k G HG; unfold Rw; rewrite S_INR; cbn [pow].
  pose proof (mp_ue_nonneg M); pose proof (mp_eta_e_nonneg M); pose proof (pos_INR k).
  set (C := (1 + ue + ee) * (1 + ue)).
  assert (HC : 1 <= C) by (unfold C; nra).
  assert (HCk : 0 <= C ^ k) by (apply pow_le; lra).
  assert (Hu1 : (1 + ue) ^ k <= C ^ k) by (apply pow_incr; split; [lra | unfold C; nra]).
  pose proof (Rpower_pos (u * K)) as HP.
  assert (G * ee <= C ^ k * Rpower 2 (u * K) * ee).
  { apply Rmult_le_compat_r; [lra |]; eapply Rle_trans; [exact HG |]; apply Rmult_le_compat_r; lra. }
  assert (E1 : INR k * C ^ k * Rpower 2 (u * K) * ee * (1 + ue + ee) <= INR k * (C * C ^ k) * Rpower 2 (u * K) * ee).
  { replace (INR k * (C * C ^ k) * Rpower 2 (u * K) * ee) with (INR k * C ^ k * Rpower 2 (u * K) * ee * C) by ring.
    apply Rmult_le_compat_l; [repeat apply Rmult_le_pos; lra | unfold C; nra]. }
  assert (E2 : C ^ k * Rpower 2 (u * K) * ee <= C * C ^ k * Rpower 2 (u * K) * ee).
  { replace (C * C ^ k * Rpower 2 (u * K) * ee) with (C ^ k * Rpower 2 (u * K) * ee * C) by ring.
    assert (0 <= C ^ k * Rpower 2 (u * K) * ee) by (repeat apply Rmult_le_pos; lra). nra. }
  nra.
Qed.


Lemma step_m : forall st tl, ks_m (step st tl) = vmax Key sc vis (ks_m st) tl.
Proof. reflexivity. Qed.

Lemma weight_step : forall k st ws tl,
  (forall q, In q tl -> vis q = true -> fmt (sc q) /\ m0 <= sc q <= m0 + K) ->
  weight_inv k st ws -> weight_inv (S k) (step st tl) (snext st ws tl).
Proof.
  intros k st ws tl Hq [Hm Hws].
  pose proof (mp_ue_nonneg M) as Hue; pose proof (mp_eta_e_nonneg M) as Hee; pose proof (ff_u_nonneg A_) as Hu.
  assert (Hmf : mfmt M (ks_m st)) by (destruct (ks_m st) as [m|] eqn:E; [apply (Hm m eq_refl) | exact I]).
  assert (Hmf' : mfmt M (ks_m (step st tl)))
    by (rewrite step_m; apply (vmax_mfmt M Key sc vis); [exact Hmf | intros q Hin Hv; apply (Hq q Hin Hv)]).
  split.
  - intros m' Em'; split; [rewrite Em' in Hmf'; exact Hmf' |].
    rewrite step_m in Em'; apply (vmax_le tl (ks_m st) (m0 + K) m'); [| | exact Em'].
    + intros m Em; apply (Hm m Em).
    + intros q Hin Hv; apply (Hq q Hin Hv).
  - intros x Hx; unfold shared_next in Hx; apply in_app_or in Hx; destruct Hx as [Hx | Hx];
      apply in_map_iff in Hx; destruct Hx as [x0 [<- Hx0]].
    + (* an entry already there, rescaled by alpha *)
      pose proof (Hws x0 Hx0) as Hinv; unfold sw_w, sw_key, sw_p, sw_pi in *; cbn [fst snd] in *.
      destruct (vis (fst (fst x0))) eqn:Ev; [| exact Hinv].
      destruct Hinv as [m [Em [[Hs0 Hsm] Hw]]].
      set (s := sc (fst (fst x0))) in *.
      destruct (Hm m Em) as [Fm HmK].
      rewrite Em, vmax_some_filter; cbn [m_use kalpha].
      set (m' := tmax Key sc m (filter vis tl)).
      destruct (tmax_props M Key sc (filter vis tl) m Fm) as [Fm' [Hmm' _]].
      { intros q Hin; apply filter_In in Hin; apply (Hq q); apply Hin. }
      exists m'; split; [rewrite step_m, Em, vmax_some_filter; reflexivity | split; [split; [exact Hs0 | eapply Rle_trans; [exact Hsm | exact Hmm']] |]].
      pose proof (weight_rescale_close M _ s m m' (Gw k m s) (Rw k) Fm Fm' Hmm' Hsm (Gw_ge_1 k m s Hsm) (Rw_nonneg k) Hw) as H.
      replace (snd (fst x0) * (snd x0 * exp2 (rnd (m - m')))) with (snd (fst x0) * snd x0 * exp2 (rnd (m - m'))) by ring.
      eapply Rle_trans; [exact H |].
      assert (EG : Gw k m s * exp2_factor M m m' = Gw (S k) m' s).
      { unfold Gw, exp2_factor; cbn [pow].
        replace (Rpower 2 (u * (m' - s))) with (Rpower 2 (u * (m - s)) * Rpower 2 (u * (m' - m)))
          by (rewrite <- Rpower_plus; f_equal; ring).
        ring. }
      rewrite EG; apply Rplus_le_compat_l, Rw_step.
      unfold Gw; apply Rmult_le_compat_l; [apply pow_le; lra | apply ost_rpow_le; nra].
    + (* a key of the tile: its own [p], [pi = 1] *)
      unfold sw_w, sw_key, sw_p, sw_pi; cbn [fst snd].
      destruct (vis x0) eqn:Ev; [| unfold kweight; rewrite Ev; reflexivity].
      destruct (vmax Key sc vis (ks_m st) tl) as [m'|] eqn:Em'.
      2:{ destruct (vmax_none Key sc vis tl (ks_m st) Em') as [_ Hfm].
          rewrite (fully_masked_spec Key vis tl Hfm x0 Hx0) in Ev; discriminate. }
      destruct (Hq x0 Hx0 Ev) as [Fs [Hs0 HsK]].
      destruct (vmax_ge tl (ks_m st) m' Em') as [_ Hge].
      pose proof (Hge x0 Hx0 Ev) as Hsm'.
      assert (Fm' : fmt m') by (rewrite step_m, Em' in Hmf'; exact Hmf').
      exists m'; split; [rewrite step_m; exact Em' | split; [split; lra |]].
      cbn [m_use]; unfold kweight; rewrite Ev, Rmult_1_r.
      pose proof (exp2_diff_error M (sc x0) m' Fs Fm' Hsm') as H.
      eapply Rle_trans; [exact H |].
      assert (Hef : exp2_factor M (sc x0) m' <= Gw (S k) m' (sc x0)).
      { unfold exp2_factor, Gw; cbn [pow]; apply Rmult_le_compat_r; [left; apply Rpower_pos |].
        assert (1 <= (1 + ue) ^ k) by (apply pow_R1_Rle; lra). nra. }
      assert (Hee' : ee <= Rw (S k)).
      { pose proof (Rw_step k 0 ltac:(pose proof (Rpower_pos (u * K)); assert (0 <= (1 + ue) ^ k) by (apply pow_le; lra); nra)) as Hs.
        pose proof (Rw_nonneg k).
        assert (Hk1 : 1 <= INR (S k) * ((1 + ue + ee) * (1 + ue)) ^ S k * Rpower 2 (u * K)).
        { rewrite S_INR; pose proof (pos_INR k).
          assert (1 <= ((1 + ue + ee) * (1 + ue)) ^ S k) by (apply pow_R1_Rle; nra).
          assert (1 <= Rpower 2 (u * K)) by (apply ose_rpow_ge_1; nra).
          apply fa_one_le_mult; [apply fa_one_le_mult |]; lra. }
        unfold Rw; nra. }
      pose proof (Rpower_pos (sc x0 - m')); nra.
Qed.


Lemma weight_run : forall tiles k st ws,
  (forall q, In q (concat tiles) -> vis q = true -> fmt (sc q) /\ m0 <= sc q <= m0 + K) ->
  weight_inv k st ws ->
  weight_inv (k + length tiles) (kernel_run_acc M Key sc vis val accf st tiles) (srun st ws tiles).
Proof.
  induction tiles as [|tl rest IH]; intros k st ws Hq Hinv.
  - rewrite Nat.add_0_r; exact Hinv.
  - cbn [length shared_run]; replace (k + S (length rest))%nat with (S k + length rest)%nat by lia.
    apply IH; [intros q Hin Hv; apply Hq; [cbn [concat]; apply in_or_app; right |]; assumption |].
    apply weight_step; [intros q Hin Hv; apply Hq; [cbn [concat]; apply in_or_app; left |]; assumption | exact Hinv].
Qed.

(** From the kernel's start, every visible key's shared weight [p_k pi_k] in the final list
    against [2^(s_k - m_T)] ([m_T] the final running max): within
      ((1 + ue)^Tt 2^(u (m_T - s_k)) - 1) 2^(s_k - m_T) + Tt ((1 + ue + ee) (1 + ue))^Tt 2^(u K) ee,
    for the visible scores numbers of the accumulation format in [[m0, m0 + K]]. *)
Lemma weight_kernel_close : forall d tiles,
  (forall q, In q (concat tiles) -> vis q = true -> fmt (sc q) /\ m0 <= sc q <= m0 + K) ->
  forall x, In x (srun (kernel_start d) [] tiles) -> vis (sw_key Key x) = true ->
  exists m, ks_m (kernel_run_acc M Key sc vis val accf (kernel_start d) tiles) = Some m
    /\ m0 <= sc (sw_key Key x) <= m
    /\ Rabs (sw_w Key x - Rpower 2 (sc (sw_key Key x) - m))
       <= (Gw (length tiles) m (sc (sw_key Key x)) - 1) * Rpower 2 (sc (sw_key Key x) - m) + Rw (length tiles).
Proof.
  intros d tiles Hq x Hx Hv.
  destruct (weight_run tiles 0 (kernel_start d) [] Hq) as [_ Hws].
  { split; [intros m Em; discriminate | intros y []]. }
  pose proof (Hws x Hx) as H; rewrite Hv in H; exact H.
Qed.

End WeightFold.

(** The H100 models' [exp2] (the correctly rounded fp32 [2^x]) is nonnegative: the premise
    [exp2_nonneg] of the sections above. *)
Lemma fp32_rnd_nonneg : forall x, 0 <= x -> 0 <= ff_rnd fp32 x.
Proof.
  intros x Hx; cbn [fp32 flt_format ff_rnd].
  assert (Prec_gt_0 24) by (unfold Prec_gt_0; lia).
  apply round_ge_generic; [auto with typeclass_instances | auto with typeclass_instances | apply generic_format_0 | exact Hx].
Qed.

Lemma mixed_fp32_exp2_nonneg : forall s Hs x, 0 <= mp_exp2 (mixed_fp32 s Hs) x.
Proof. intros s Hs x; cbn [mp_exp2 mixed_fp32]; apply fp32_rnd_nonneg; left; apply Rpower_pos. Qed.

(** ** Pieces of the composition *)

Section Store.

Variables (F S : FloatFormat).

(** The output's store [out = rs (rnd x)] (rounded in [F], then to the storage format [S]),
    in the form [attention_delta_ratio_error] takes: [|out - x| <= ur |out| + er]. *)
Definition store_ur : R := (ff_u S / (1 - ff_u S) + ff_u F) / (1 - ff_u F).
Definition store_er : R := (ff_eta S / (1 - ff_u S) + ff_eta F) / (1 - ff_u F).

Lemma store_close : forall x, Rabs (ff_rnd S (ff_rnd F x) - x)
  <= store_ur * Rabs (ff_rnd S (ff_rnd F x)) + store_er.
Proof.
  intros x; unfold store_ur, store_er.
  pose proof (ff_u_nonneg S) as Hus; pose proof (ff_u_lt_1 S) as Hus1; pose proof (ff_eta_nonneg S) as Hes.
  pose proof (ff_u_nonneg F) as Hu; pose proof (ff_u_lt_1 F) as Hu1; pose proof (ff_eta_nonneg F) as Hea.
  set (y := ff_rnd F x); set (o := ff_rnd S y).
  pose proof (ff_abs F x) as Hy; fold y in Hy.
  pose proof (ff_abs S y) as Ho; fold o in Ho.
  assert (Hyo : Rabs y <= (Rabs o + ff_eta S) / (1 - ff_u S)).
  { apply Rmult_le_reg_r with (1 - ff_u S); [lra |]; unfold Rdiv; rewrite Rmult_assoc, Rinv_l by lra.
    pose proof (Rabs_triang (y - o) o); replace (y - o + o) with y in H by ring.
    rewrite Rabs_minus_sym in H; lra. }
  assert (Hxo : Rabs x <= Rabs o + Rabs (o - x))
    by (pose proof (Rabs_triang (x - o) o); replace (x - o + o) with x in H by ring; rewrite Rabs_minus_sym in H; lra).
  assert (Hd : Rabs (o - x) <= ff_u S * Rabs y + ff_eta S + (ff_u F * Rabs x + ff_eta F)).
  { replace (o - x) with ((o - y) + (y - x)) by ring; pose proof (Rabs_triang (o - y) (y - x)); lra. }
  apply Rmult_le_reg_r with (1 - ff_u F); [lra |].
  replace (((ff_u S / (1 - ff_u S) + ff_u F) / (1 - ff_u F) * Rabs o
            + (ff_eta S / (1 - ff_u S) + ff_eta F) / (1 - ff_u F)) * (1 - ff_u F))
    with (ff_u S * ((Rabs o + ff_eta S) / (1 - ff_u S)) + ff_eta S + ff_u F * Rabs o + ff_eta F)
    by (field; lra).
  assert (ff_u S * Rabs y <= ff_u S * ((Rabs o + ff_eta S) / (1 - ff_u S))) by (apply Rmult_le_compat_l; lra).
  assert (ff_u F * Rabs x <= ff_u F * (Rabs o + Rabs (o - x))) by (apply Rmult_le_compat_l; lra).
  nra.
Qed.

End Store.

Section Keys.

Variable M : MixedModel.
Variables (Key : Type) (sc : Key -> R) (vis : Key -> bool) (val : Key -> nat -> R) (accf : R -> list R -> list R -> R).

(** The final shared list has the kernel's keys in order: one entry a key. *)
Lemma shared_run_keys : forall tiles st ws,
  map (sw_key Key) (shared_run M Key sc vis val accf st ws tiles) = map (sw_key Key) ws ++ concat tiles.
Proof.
  induction tiles as [|tl rest IH]; intros st ws; cbn [shared_run concat]; [rewrite app_nil_r; reflexivity |].
  rewrite IH; unfold shared_next; rewrite map_app, !map_map, <- app_assoc; f_equal; f_equal.
  transitivity (map (fun x : Key => x) tl); [apply map_ext; intros; reflexivity | apply map_id].
Qed.

End Keys.

(** [l = S (1 + lam) + eta] with [S >= Smin > 0]: one relative factor, [eta] moved into it. *)
Lemma common_factor_absorb : forall l S lam eta Smin, 0 < Smin -> Smin <= S -> l = S * (1 + lam) + eta ->
  exists lam', l = S * (1 + lam') /\ Rabs lam' <= Rabs lam + Rabs eta / Smin.
Proof.
  intros l S lam eta Smin H0 HS El.
  exists (lam + eta / S); split; [rewrite El; field; lra |].
  eapply Rle_trans; [apply Rabs_triang |]; apply Rplus_le_compat_l.
  unfold Rdiv; rewrite Rabs_mult, Rabs_inv, (Rabs_right S) by lra.
  apply Rmult_le_compat_l; [apply Rabs_pos | apply Rinv_le_contravar; lra].
Qed.

Section Pi.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

Variables (Key : Type) (sc : Key -> R) (vis : Key -> bool) (val : Key -> nat -> R) (accf : R -> list R -> list R -> R).

Hypothesis exp2_nonneg : forall x, 0 <= exp2 x.

(** Every entry's [pi] (a product of at most [Tt] computed [alpha]s) is in [[0, (1 + ue + ee)^Tt]]. *)
Lemma shared_pi_bounds : forall tiles st ws k,
  (forall q, In q (concat tiles) -> vis q = true -> fmt (sc q)) -> mfmt M (ks_m st) ->
  (forall x, In x ws -> 0 <= sw_pi Key x <= (1 + ue + ee) ^ k) ->
  forall x, In x (shared_run M Key sc vis val accf st ws tiles) -> 0 <= sw_pi Key x <= (1 + ue + ee) ^ (k + length tiles).
Proof.
  pose proof (mp_ue_nonneg M) as Hue; pose proof (mp_eta_e_nonneg M) as Hee.
  induction tiles as [|tl rest IH]; intros st ws k Hsc Hmf Hws x Hx.
  - rewrite Nat.add_0_r; apply Hws, Hx.
  - cbn [length shared_run] in *; replace (k + S (length rest))%nat with (S k + length rest)%nat by lia.
    assert (Hsc1 : forall q, In q tl -> vis q = true -> fmt (sc q))
      by (intros q Hq; apply Hsc; cbn [concat]; apply in_or_app; left; exact Hq).
    destruct (kalpha_le M Key sc vis exp2_nonneg st tl Hmf Hsc1) as [Ha0 Ha1].
    apply (IH (kernel_step_acc M Key sc vis val accf st tl) (shared_next M Key sc vis st ws tl) (S k)); [| | | exact Hx].
    + intros q Hq; apply Hsc; cbn [concat]; apply in_or_app; right; exact Hq.
    + apply (vmax_mfmt M Key sc vis); assumption.
    + intros y Hy; unfold shared_next in Hy; apply in_app_or in Hy; destruct Hy as [Hy | Hy];
        apply in_map_iff in Hy; destruct Hy as [y0 [<- Hy0]]; unfold sw_pi; cbn [snd pow].
      * destruct (Hws y0 Hy0) as [H0 H1]; unfold sw_pi in H0, H1.
        split; [apply Rmult_le_pos; assumption |].
        rewrite Rmult_comm; apply Rmult_le_compat; assumption.
      * assert (1 <= (1 + ue + ee) ^ k) by (apply pow_R1_Rle; lra). nra.
Qed.

End Pi.

(** A weight [w] within [(G - 1) W + R] of [W = Wx 2^d] ([Wx = Lc P], the exact softmax's
    weight, [d] the score's error): [w = Wx (1 + b)], [|b| <= G 2^|d| - 1 + R / Wx]. *)
Lemma weight_rel_exact : forall w W Wx G R d, 0 < Wx -> W = Wx * Rpower 2 d -> 1 <= G ->
  Rabs (w - W) <= (G - 1) * W + R ->
  exists b, w = Wx * (1 + b) /\ Rabs b <= G * Rpower 2 (Rabs d) - 1 + R / Wx.
Proof.
  intros w W Wx G R d HWx EW HG Hw.
  exists (w / Wx - 1); split; [field; lra |].
  assert (Hd1 : Rpower 2 d <= Rpower 2 (Rabs d)) by (apply ost_rpow_le, Rle_abs).
  assert (Hd2 : Rabs (Rpower 2 d - 1) <= Rpower 2 (Rabs d) - 1).
  { destruct (Rle_dec 0 d) as [Hd | Hd].
    - rewrite Rabs_right by (apply Rle_ge; pose proof (ose_rpow_ge_1 d Hd); lra); lra.
    - assert (Rpower 2 d <= 1) by (rewrite <- (Rpower_O 2) by lra; apply ost_rpow_le; lra).
      rewrite Rabs_left1 by lra; rewrite Rabs_left by lra.
      assert (Rpower 2 d * Rpower 2 (- d) = 1) by (rewrite <- Rpower_plus, Rplus_opp_r; apply Rpower_O; lra).
      pose proof (Rpower_pos d); pose proof (Rpower_pos (- d)).
      assert (1 <= Rpower 2 (- d)) by (apply ose_rpow_ge_1; lra). nra. }
  assert (HW0 : 0 <= W) by (rewrite EW; apply Rmult_le_pos; [lra | left; apply Rpower_pos]).
  assert (Hc : Rabs (w - Wx) <= Wx * (G * Rpower 2 (Rabs d) - 1) + R).
  { replace (w - Wx) with ((w - W) + Wx * (Rpower 2 d - 1)) by (rewrite EW; ring).
    eapply Rle_trans; [apply Rabs_triang |]; rewrite Rabs_mult, (Rabs_right Wx) by lra.
    assert (Wx * Rabs (Rpower 2 d - 1) <= Wx * (Rpower 2 (Rabs d) - 1)) by (apply Rmult_le_compat_l; lra).
    assert ((G - 1) * W <= (G - 1) * (Wx * Rpower 2 (Rabs d))) by (apply Rmult_le_compat_l; [lra | rewrite EW; apply Rmult_le_compat_l; lra]).
    nra. }
  replace (w / Wx - 1) with ((w - Wx) / Wx) by (field; lra).
  unfold Rdiv; rewrite Rabs_mult, Rabs_inv, (Rabs_right Wx) by lra.
  apply Rmult_le_reg_r with Wx; [lra |]; rewrite Rmult_assoc, Rinv_l by lra.
  replace ((G * Rpower 2 (Rabs d) - 1 + R * / Wx) * Wx) with (Wx * (G * Rpower 2 (Rabs d) - 1) + R) by (field; lra).
  lra.
Qed.

(** The stored weight [rs p pi] in the same form: [a - b] the storage rounding of [p]. *)
Lemma weight_rel_stored : forall (S : FloatFormat) p pi Wx b, 0 < Wx -> 0 <= pi -> p * pi = Wx * (1 + b) ->
  exists a, ff_rnd S p * pi = Wx * (1 + a) /\ Rabs (a - b) <= ff_u S * (1 + Rabs b) + ff_eta S * pi / Wx.
Proof.
  intros S p pi Wx b HWx Hpi E.
  exists (ff_rnd S p * pi / Wx - 1); split; [field; lra |].
  replace (ff_rnd S p * pi / Wx - 1 - b) with ((ff_rnd S p - p) * pi / Wx)
    by (replace b with (p * pi / Wx - 1) by (rewrite E; field; lra); field; lra).
  pose proof (ff_abs S p) as Hp.
  assert (Hp' : Rabs p * pi = Wx * Rabs (1 + b)).
  { rewrite <- (Rabs_right pi) by lra; rewrite <- Rabs_mult, E, Rabs_mult, Rabs_right by lra; reflexivity. }
  unfold Rdiv; rewrite !Rabs_mult, Rabs_inv, (Rabs_right pi), (Rabs_right Wx) by lra.
  apply Rmult_le_reg_r with Wx; [lra |].
  replace ((ff_u S * (1 + Rabs b) + ff_eta S * pi * / Wx) * Wx) with (ff_u S * (1 + Rabs b) * Wx + ff_eta S * pi) by (field; lra).
  replace (Rabs (ff_rnd S p - p) * pi * / Wx * Wx) with (Rabs (ff_rnd S p - p) * pi) by (field; lra).
  pose proof (ff_u_nonneg S); pose proof (Rabs_triang 1 b); rewrite Rabs_R1 in H0.
  assert (Rabs (ff_rnd S p - p) * pi <= (ff_u S * Rabs p + ff_eta S) * pi) by (apply Rmult_le_compat_r; lra).
  assert (ff_u S * (Wx * Rabs (1 + b)) <= ff_u S * ((1 + Rabs b) * Wx)) by (apply Rmult_le_compat_l; nra).
  nra.
Qed.
