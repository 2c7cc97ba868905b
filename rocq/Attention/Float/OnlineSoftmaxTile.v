(** * One key tile of the online-softmax forward in mixed precision, and the fold of [l] over tiles.

    Companion of OnlineSoftmaxError.v (whose [inv], [exp2_diff_error],
    [rescale_step], [factor_iter_bound] this file uses).  For one key tile
    of [kernels/ojas_kernels/attention_forward.py] ([_fwd_tile]) with running max [m'] (fp32,
    at least every score of the tile and at most [K] above each of them),
    the kernel computes, per key [j] with fp32 score [s_j],
      p_j = exp2 (rnd_a (s_j - m')),
      tl.sum (p)                          -- modelled left to right from 0,
      P.V coordinate = sum_j rnd_a (rnd_s (p_j) * v_j)
                                          -- p rounded to the value dtype,
                                             each product rounded to fp32,
                                             the tile summed left to right.
    Results (u = u_a, E = (1 + ue) 2^(u K), n = the tile's length):

    - [tile_terms_close]: a left-to-right tile sum of terms each within
      [(F - 1) S_j + c_j] of [X_j] ([|X_j| <= S_j]) is within
      [((1 + u)^(n-1) F - 1) sum S_j + (1 + u)^(n-1) sum c_j] of [sum X_j].
    - [tile_l_inv]: [inv ((1+u)^(n-1) E) ((1+u)^(n-1) n ee)] between the
      computed [tl.sum p] and [sum_j 2^(s_j - m')] (with [S = T =] that sum).
    - [tile_acc_inv]: [inv ((1+u)^(n-1) (1+u) (1+u_s) E) R_acc] between the
      computed P.V coordinate and [sum_j 2^(s_j - m') v_j], against
      [sum_j 2^(s_j - m') |v_j|], with
      R_acc = (1+u)^(n-1) ((1+u) ((1+u_s) ee + e_s) sum_j |v_j| + n ea).
    - [run_inv] (generic: any key type, any tile value satisfying the
      tile lemma's [inv H Ry] at every running max): the kernel's state
      [run m x tiles] (running max [tmax m tl = max (m, max_j s_j)],
      [x := rnd (rnd (x * exp2 (rnd (m - m'))) + yf m' tl)]) keeps
        inv (Gk k m) (Rk k) x (Yf m seen) (Tf m seen),
        Gk k m = H cg^k 2^(u (m - m0)),  cg = (1 + ue) (1 + u)^2,
        Rk k = k cr^k dR,  cr = (1 + ue + ee) (1 + u)^2,
        dR = ((Gb Sb ee (1 + u) + ea) + Ry) (1 + u),  Gb = H cg^Tt 2^(u K),
      with [Sb] a bound of [Tf m seen] and [Tt] of the number of tiles,
      under the spread premise [m_t - s_j <= K] for every key and
      [m_t - m0 <= K] ([m_t] the last running max).  Each step is
      [rescale_step]; the factor's step is [factor_iter_bound] on one tile.
    - [l_fold_inv]: the instance for [l] ([tile_l], [exact_l],
      [H_l = (1+u)^(B-1) E], [Ry_l = (1+u)^(B-1) B ee], [Sb = N]): after
      the tiles, from [l = 0] at [m0],
        inv (H_l cg^t 2^(u (m_t - m0))) (t cr^t dR) l_t L_t L_t,
      [L_t = sum over all keys of 2^(s_j - m_t)], [t] the number of tiles.
    - [acc_fold_inv]: the instance for one coordinate of [acc]
      ([tile_pv], [exact_pv], [exact_pv_abs], [H_acc = tile_acc_H K B],
      [Ry_acc = (1+u)^(B-1) ((1+u) ((1+u_s) ee + e_s) B V + B ea)],
      [Sb = N V], [|v_j| <= V]): after the tiles, from [acc = 0] at [m0],
        inv (H_acc cg^t 2^(u (m_t - m0))) (t cr^t dR) acc_t N_t A_t,
      [N_t = sum_j 2^(s_j - m_t) v_j], [A_t = sum_j 2^(s_j - m_t) |v_j|].
    - [online_softmax_output_error] (items 1 and 2 of
      OnlineSoftmaxError.v composed with [final_division]): the kernel's
      tiles as (score, value) lists, [l] over their scores and [acc] over
      the pairs with the same running maxima, from [(m0, 0)] with [m0] a
      score of the row ([run_first]: the first tile then gives the
      kernel's [-inf] start exactly, when [m0] is in the first tile);
      with [0 < V], [|v_j| <= V], [m_t - s_j <= K], tiles of at most [B]
      keys, at most [N] keys and [Tt] tiles, and [bL < 1]:
        |rnd (acc_t / l_t) - N_t / L_t|
          <= ((bN + bL) + u (1 + bN)) / (1 - bL) V + ea,
        bL = H_l cg^t 2^(u (m_t - m0)) - 1 + t cr^t dR_l,
        bN = H_acc cg^t 2^(u (m_t - m0)) - 1 + t cr^t dR_acc / V
      ([out_bL], [out_bN]); [N_t / L_t] is the exact softmax-weighted
      average of the coordinate (the common [2^(-m_t)] cancels).  [L_t >= 1]
      is proved (the last running max is a score).
    Not covered (as in OnlineSoftmaxError.v): the rounding of the scores
    themselves (taken as given fp32 numbers), the error of a partly masked
    tile (fully masked tiles leave the kernel's whole state (m, l, acc)
    exactly unchanged: [masked_tile_step_id], [kernel_run_skip_masked_tiles]
    at the end of this file; the partly masked step is defined there,
    [kernel_step], but its error bound is not proved), [tl.sum] as a tree and the order inside one MMA (modelled
    left to right), the acc update as [rnd (rnd (acc * alpha) + P.V)]
    rather than the MMA accumulating into [acc * alpha], an FMA in
    [l * alpha + sum], and the final store of [out] to the output dtype. *)

From Coq Require Import Reals List Lra Lia Arith.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.NoUnderflow FloatModel.MixedPrecision FloatModel.BlockedSum.
From Ojas Require Import FloatModel.Notations.
From Ojas Require Import Attention.Float.OnlineSoftmaxError.
Import ListNotations.
Open Scope R_scope.

Lemma ost_rpow_le : forall x y, x <= y -> Rpower 2 x <= Rpower 2 y.
Proof.
  intros x y H; unfold Rpower; apply ose_exp_le.
  pose proof ose_ln2_pos; nra.
Qed.

Lemma ost_rsum_const : forall {T} (c : R) (l : list T),
  rsum (map (fun _ => c) l) = INR (length l) * c.
Proof.
  intros T c; induction l as [|x l IH]; [unfold rsum; simpl; ring |].
  cbn [map length]; rewrite rsum_cons, IH, S_INR; ring.
Qed.

Section OnlineSoftmaxTile.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

(** ** A tile of terms, each close to its exact counterpart *)

Lemma tile_terms_close : forall {T} (f g h c : T -> R) F (ks : list T),
  1 <= F ->
  (forall k, In k ks -> fmt (f k)) ->
  (forall k, In k ks -> Rabs (g k) <= h k) ->
  (forall k, In k ks -> Rabs (f k - g k) <= (F - 1) * h k + c k) ->
  Rabs (tile_sum A_ (map f ks) - rsum (map g ks))
  <= ((1 + u) ^ (length ks - 1) * F - 1) * rsum (map h ks)
     + (1 + u) ^ (length ks - 1) * rsum (map c ks).
Proof.
  intros T f g h c F ks HF Hf Hg Hfg.
  pose proof (ff_u_nonneg A_) as Hu.
  assert (Hs : Rabs (rsum (map f ks) - rsum (map g ks)) <= (F - 1) * rsum (map h ks) + rsum (map c ks)
               /\ rsum (map Rabs (map f ks)) <= F * rsum (map h ks) + rsum (map c ks)).
  { clear Hf; induction ks as [|k ks IH].
    - unfold rsum; simpl; rewrite Rminus_0_r, Rabs_R0; lra.
    - cbn [map]; rewrite !rsum_cons.
      destruct IH as [IH1 IH2].
      + intros k' Hk'; apply Hg; right; exact Hk'.
      + intros k' Hk'; apply Hfg; right; exact Hk'.
      + assert (H1 := Hg k (or_introl eq_refl)).
        assert (H2 := Hfg k (or_introl eq_refl)).
        split.
        * replace (f k + rsum (map f ks) - (g k + rsum (map g ks)))
            with ((f k - g k) + (rsum (map f ks) - rsum (map g ks))) by ring.
          eapply Rle_trans; [apply Rabs_triang | lra].
        * assert (Rabs (f k) <= F * h k + c k).
          { replace (f k) with ((f k - g k) + g k) by ring.
            eapply Rle_trans; [apply Rabs_triang | lra]. }
          lra. }
  destruct Hs as [Hs1 Hs2].
  assert (Hfm : Forall fmt (map f ks)).
  { apply Forall_forall; intros x Hx; apply in_map_iff in Hx.
    destruct Hx as [k [<- Hk]]; apply Hf, Hk. }
  pose proof (tile_sum_close A_ (map f ks) Hfm) as Ht.
  unfold close, abs_sum in Ht; rewrite map_length in Ht.
  set (P := (1 + u) ^ (length ks - 1)) in *.
  assert (HP : 1 <= P) by (apply pow_R1_Rle; lra).
  replace (tile_sum A_ (map f ks) - rsum (map g ks))
    with ((tile_sum A_ (map f ks) - rsum (map f ks)) + (rsum (map f ks) - rsum (map g ks))) by ring.
  eapply Rle_trans; [apply Rabs_triang |].
  assert ((P - 1) * rsum (map Rabs (map f ks)) <= (P - 1) * (F * rsum (map h ks) + rsum (map c ks)))
    by (apply Rmult_le_compat_l; lra).
  nra.
Qed.

(** ** One weight [p = exp2 (rnd (s - m'))], spread at most [K] *)

Definition tile_E (K : R) : R := (1 + ue) * Rpower 2 (u * K).

Lemma tile_E_ge_1 : forall K, 0 <= K -> 1 <= tile_E K.
Proof.
  intros K HK; unfold tile_E.
  pose proof (mp_ue_nonneg M); pose proof (ff_u_nonneg A_).
  assert (1 <= Rpower 2 (u * K)) by (apply ose_rpow_ge_1; nra).
  nra.
Qed.

Lemma weight_close : forall s m' K, fmt s -> fmt m' -> s <= m' -> m' - s <= K ->
  Rabs (exp2 (rnd (s - m')) - Rpower 2 (s - m')) <= (tile_E K - 1) * Rpower 2 (s - m') + ee.
Proof.
  intros s m' K Fs Fm Hs HK.
  pose proof (exp2_diff_error M s m' Fs Fm Hs) as He.
  assert (exp2_factor M s m' <= tile_E K).
  { unfold exp2_factor, tile_E; pose proof (mp_ue_nonneg M); pose proof (ff_u_nonneg A_).
    apply Rmult_le_compat_l; [lra |]; apply ost_rpow_le; nra. }
  pose proof (Rpower_pos (s - m')).
  nra.
Qed.

(** ** The tile's [tl.sum p] *)

Definition tile_l (m' : R) (ss : list R) : R :=
  tile_sum A_ (map (fun s => exp2 (rnd (s - m'))) ss).

Definition exact_l (m' : R) (ss : list R) : R := rsum (map (fun s => Rpower 2 (s - m')) ss).

Lemma exact_l_nonneg : forall m' ss, 0 <= exact_l m' ss.
Proof.
  intros; unfold exact_l; apply rsum_nonneg; intros x Hx; apply in_map_iff in Hx.
  destruct Hx as [s [<- _]]; left; apply Rpower_pos.
Qed.

Theorem tile_l_inv : forall m' K ss, 0 <= K -> fmt m' ->
  (forall s, In s ss -> fmt s /\ s <= m' /\ m' - s <= K) ->
  inv ((1 + u) ^ (length ss - 1) * tile_E K)
        ((1 + u) ^ (length ss - 1) * (INR (length ss) * ee))
        (tile_l m' ss) (exact_l m' ss) (exact_l m' ss).
Proof.
  intros m' K ss HK Fm Hss; unfold inv, tile_l, exact_l.
  rewrite <- (ost_rsum_const ee ss).
  apply tile_terms_close.
  - apply tile_E_ge_1, HK.
  - intros; apply mp_exp2_fmt.
  - intros s _; rewrite Rabs_right by (left; apply Rpower_pos); lra.
  - intros s Hs; destruct (Hss s Hs) as [Fs [H1 H2]]; apply weight_close; auto.
Qed.

(** ** The tile's [P.V] coordinate: [p] rounded to storage, products
    rounded to the accumulation format, the tile summed left to right *)

Definition tile_pv (m' : R) (svs : list (R * R)) : R :=
  tile_sum A_ (map (fun sv => rnd (ff_rnd S_ (exp2 (rnd (fst sv - m'))) * snd sv)) svs).

Definition exact_pv (m' : R) (svs : list (R * R)) : R :=
  rsum (map (fun sv => Rpower 2 (fst sv - m') * snd sv) svs).

Definition exact_pv_abs (m' : R) (svs : list (R * R)) : R :=
  rsum (map (fun sv => Rpower 2 (fst sv - m') * Rabs (snd sv)) svs).

Definition tile_acc_H (K : R) (n : nat) : R :=
  (1 + u) ^ (n - 1) * ((1 + u) * (1 + us) * tile_E K).

Definition tile_acc_R (svs : list (R * R)) : R :=
  (1 + u) ^ (length svs - 1)
  * ((1 + u) * ((1 + us) * ee + es) * rsum (map (fun sv => Rabs (snd sv)) svs)
     + INR (length svs) * ea).

(** A weight within [(E - 1) W + ee] of [W > 0], rounded to the storage format. *)
Lemma stored_weight_close : forall w W E, 0 < W -> 1 <= E -> Rabs (w - W) <= (E - 1) * W + ee ->
  Rabs (ff_rnd S_ w - W) <= ((1 + us) * E - 1) * W + ((1 + us) * ee + es).
Proof.
  intros w W E HW HE Hw.
  pose proof (ff_u_nonneg S_) as Hus; pose proof (ff_eta_nonneg S_) as Hes.
  pose proof (mp_eta_e_nonneg M) as Hee.
  pose proof (ff_abs S_ w) as Hq.
  assert (Hwa : Rabs w <= E * W + ee).
  { replace w with ((w - W) + W) by ring; eapply Rle_trans; [apply Rabs_triang |].
    rewrite (Rabs_right W) by lra; lra. }
  replace (ff_rnd S_ w - W) with ((ff_rnd S_ w - w) + (w - W)) by ring; eapply Rle_trans; [apply Rabs_triang |].
  assert (us * Rabs w <= us * (E * W + ee)) by (apply Rmult_le_compat_l; lra).
  lra.
Qed.

(** A weight within [(E - 1) W + ee] of [W > 0], rounded to the storage
    format, times [v], rounded to the accumulation format. *)
Lemma stored_product_close : forall w W v E, 0 < W -> 1 <= E -> Rabs (w - W) <= (E - 1) * W + ee ->
  Rabs (rnd (ff_rnd S_ w * v) - W * v)
  <= ((1 + u) * (1 + us) * E - 1) * (W * Rabs v) + ((1 + u) * ((1 + us) * ee + es) * Rabs v + ea).
Proof.
  intros w W v E HW HE Hw.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (ff_u_nonneg S_) as Hus.
  pose proof (ff_eta_nonneg S_) as Hes; pose proof (mp_eta_e_nonneg M) as Hee.
  pose proof (ff_eta_nonneg A_) as Hea.
  pose proof (stored_weight_close w W E HW HE Hw) as Hqw.
  set (q := ff_rnd S_ w) in *.
  pose proof (ff_abs A_ (q * v)) as Hr.
  assert (Hqa : Rabs q <= (1 + us) * E * W + ((1 + us) * ee + es)).
  { replace q with ((q - W) + W) by ring; eapply Rle_trans; [apply Rabs_triang |].
    rewrite (Rabs_right W) by lra; lra. }
  replace (rnd (q * v) - W * v) with ((rnd (q * v) - q * v) + (q - W) * v) by ring.
  eapply Rle_trans; [apply Rabs_triang |].
  rewrite Rabs_mult in *.
  assert (E1 : u * (Rabs q * Rabs v) <= u * (((1 + us) * E * W + ((1 + us) * ee + es)) * Rabs v)).
  { apply Rmult_le_compat_l; [lra |]; apply Rmult_le_compat_r; [apply Rabs_pos | exact Hqa]. }
  assert (E2 : Rabs (q - W) * Rabs v <= (((1 + us) * E - 1) * W + ((1 + us) * ee + es)) * Rabs v)
    by (apply Rmult_le_compat_r; [apply Rabs_pos | exact Hqw]).
  pose proof (Rabs_pos v).
  nra.
Qed.

Theorem tile_acc_inv : forall m' K svs, 0 <= K -> fmt m' ->
  (forall sv, In sv svs -> fmt (fst sv) /\ fst sv <= m' /\ m' - fst sv <= K) ->
  inv (tile_acc_H K (length svs)) (tile_acc_R svs)
        (tile_pv m' svs) (exact_pv m' svs) (exact_pv_abs m' svs).
Proof.
  intros m' K svs HK Fm Hsv; unfold inv, tile_pv, exact_pv, exact_pv_abs, tile_acc_H, tile_acc_R.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (ff_u_nonneg S_) as Hus.
  pose proof (ff_eta_nonneg S_) as Hes; pose proof (mp_eta_e_nonneg M) as Hee.
  pose proof (tile_E_ge_1 K HK) as HE.
  set (c := (1 + u) * ((1 + us) * ee + es)).
  replace ((1 + u) ^ (length svs - 1)
           * (c * rsum (map (fun sv => Rabs (snd sv)) svs) + INR (length svs) * ea))
    with ((1 + u) ^ (length svs - 1) * rsum (map (fun sv => c * Rabs (snd sv) + ea) svs)).
  2: { f_equal; rewrite rsum_map_plus, ost_rsum_const; f_equal.
       apply rsum_map_scal_l. }
  apply tile_terms_close.
  - assert (1 <= (1 + u) * (1 + us)) by nra. nra.
  - intros; apply ff_rnd_fmt.
  - intros [s v] _; cbn [fst snd]; rewrite Rabs_mult, (Rabs_right (Rpower 2 _)) by (left; apply Rpower_pos); lra.
  - intros [s v] Hin; destruct (Hsv _ Hin) as [Fs [H1 H2]]; cbn [fst snd] in *.
    pose proof (weight_close s m' K Fs Fm H1 H2) as Hw.
    set (W := Rpower 2 (s - m')) in *.
    assert (HW : 0 < W) by apply Rpower_pos.
    set (w := exp2 (rnd (s - m'))) in *.
    set (E := tile_E K) in *.
    unfold c; apply stored_product_close; assumption.
Qed.

(** ** Folding the kernel's tile step over the tiles

    Generic over the key type ([R] for [l], [R * R] for a coordinate of
    [acc]) and over the tile value: [yf m' tl] (computed), [Yf m' tl]
    (exact, scaled to [m']), [Tf m' tl] (its bound).  The running max is
    the kernel's: [tmax m tl = max (m, max_j s_j)]. *)

Lemma inv_mono : forall G G' R R' x X S,
  0 <= S -> G <= G' -> R <= R' -> inv G R x X S -> inv G' R' x X S.
Proof. intros G G' R R' x X S HS HG HR C; unfold inv in *; nra. Qed.

Lemma alpha_factor_le : forall m m', m <= m' ->
  Rpower 2 (m - m') * exp2_factor M m m' <= 1 + ue.
Proof.
  intros m m' Hm; unfold exp2_factor.
  pose proof (mp_ue_nonneg M); pose proof (ff_u_nonneg A_); pose proof (ff_u_lt_1 A_).
  replace (Rpower 2 (m - m') * ((1 + ue) * Rpower 2 (u * (m' - m))))
    with ((1 + ue) * (Rpower 2 (m - m') * Rpower 2 (u * (m' - m)))) by ring.
  rewrite <- Rpower_plus.
  assert (Rpower 2 (m - m' + u * (m' - m)) <= 1).
  { rewrite <- (Rpower_O 2) by lra; apply ost_rpow_le; nra. }
  nra.
Qed.

Section Fold.

Variable Key : Type.
Variable sc : Key -> R.
Variable P : Key -> Prop.
Variables yf Yf Tf : R -> list Key -> R.
Variables K H Ry Sb m0 : R.
Variables B N Tt : nat.

Hypothesis HH : 1 <= H.
Hypothesis HRy : 0 <= Ry.
Hypothesis HSb : 0 <= Sb.
Hypothesis yf_fmt : forall m tl, fmt (yf m tl).
Hypothesis tile_ok : forall m tl, fmt m -> (length tl <= B)%nat ->
  (forall k, In k tl -> P k /\ fmt (sc k) /\ sc k <= m /\ m - sc k <= K) ->
  inv H Ry (yf m tl) (Yf m tl) (Tf m tl).
Hypothesis Y_abs : forall m tl, Rabs (Yf m tl) <= Tf m tl.
Hypothesis Y_resc : forall m m' tl, Yf m tl * Rpower 2 (m - m') = Yf m' tl.
Hypothesis T_resc : forall m m' tl, Tf m tl * Rpower 2 (m - m') = Tf m' tl.
Hypothesis Y_app : forall m a b, Yf m (a ++ b) = Yf m a + Yf m b.
Hypothesis T_app : forall m a b, Tf m (a ++ b) = Tf m a + Tf m b.
Hypothesis T_bound : forall m seen, (forall k, In k seen -> P k /\ sc k <= m) ->
  (length seen <= N)%nat -> Tf m seen <= Sb.

(** The kernel's running max after one tile. *)
Definition tmax (m : R) (tl : list Key) : R := fold_left (fun a k => Rmax a (sc k)) tl m.

(** The kernel's state after the tiles: [x := rnd (rnd (x * alpha) + yf m' tl)]. *)
Fixpoint run (m x : R) (tiles : list (list Key)) : R :=
  match tiles with
  | nil => x
  | tl :: rest => run (tmax m tl) (rnd (rnd (x * exp2 (rnd (m - tmax m tl))) + yf (tmax m tl) tl)) rest
  end.

Fixpoint mrun (m : R) (tiles : list (list Key)) : R :=
  match tiles with nil => m | tl :: rest => mrun (tmax m tl) rest end.

(** The first tile from [x = 0]: [rnd (rnd (0 * alpha) + y) = y], whatever
    [alpha] is -- the value the kernel's start [m = -inf, l = acc = 0]
    ([alpha = exp2 (-inf) = 0]) gives. *)
Lemma run_first : forall m tl rest,
  run m 0 (tl :: rest) = run (tmax m tl) (yf (tmax m tl) tl) rest.
Proof.
  intros m tl rest; cbn [run].
  rewrite Rmult_0_l, (ff_rnd_id A_ 0 (ff_fmt_0 A_)), Rplus_0_l, (ff_rnd_id A_ _ (yf_fmt _ _)).
  reflexivity.
Qed.

Lemma tmax_props : forall tl m, fmt m -> (forall k, In k tl -> fmt (sc k)) ->
  fmt (tmax m tl) /\ m <= tmax m tl /\ (forall k, In k tl -> sc k <= tmax m tl).
Proof.
  unfold tmax; induction tl as [|k tl IH]; intros m Fm Ftl.
  - simpl; split; [exact Fm | split; [lra | intros k []]].
  - cbn [fold_left].
    assert (Fk : fmt (sc k)) by (apply Ftl; left; reflexivity).
    assert (Fmax : fmt (Rmax m (sc k))) by (unfold Rmax; destruct (Rle_dec m (sc k)); assumption).
    destruct (IH (Rmax m (sc k)) Fmax) as [F1 [H1 H2]]; [intros k' Hk'; apply Ftl; right; exact Hk' |].
    split; [exact F1 | split].
    + eapply Rle_trans; [apply Rmax_l | exact H1].
    + intros k' [<- | Hk'].
      * eapply Rle_trans; [apply Rmax_r | exact H1].
      * apply H2, Hk'.
Qed.

Lemma mrun_ge : forall tiles m, fmt m -> (forall k, In k (concat tiles) -> fmt (sc k)) ->
  m <= mrun m tiles.
Proof.
  induction tiles as [|tl rest IH]; intros m Fm Fk; [simpl; lra |].
  cbn [mrun].
  assert (Ftl : forall k, In k tl -> fmt (sc k)) by (intros k Hk; apply Fk; simpl; apply in_or_app; left; exact Hk).
  destruct (tmax_props tl m Fm Ftl) as [F1 [H1 _]].
  eapply Rle_trans; [exact H1 |]; apply IH; [exact F1 |].
  intros k Hk; apply Fk; simpl; apply in_or_app; right; exact Hk.
Qed.

Definition cg : R := (1 + ue) * (1 + u) ^ 2.
Definition cr : R := (1 + ue + ee) * (1 + u) ^ 2.
Definition Gk (k : nat) (m : R) : R := H * cg ^ k * Rpower 2 (u * (m - m0)).
Definition Gb : R := H * cg ^ Tt * Rpower 2 (u * K).
Definition dR : R := ((Gb * Sb * ee) * (1 + u) + ea + Ry) * (1 + u).
Definition Rk (k : nat) : R := INR k * cr ^ k * dR.

Lemma cg_ge_1 : 1 <= cg.
Proof.
  unfold cg; pose proof (mp_ue_nonneg M); pose proof (ff_u_nonneg A_).
  assert (1 <= (1 + u) ^ 2) by (apply pow_R1_Rle; lra). nra.
Qed.

Lemma cr_ge_1 : 1 <= cr.
Proof.
  unfold cr; pose proof (mp_ue_nonneg M); pose proof (ff_u_nonneg A_); pose proof (mp_eta_e_nonneg M).
  assert (1 <= (1 + u) ^ 2) by (apply pow_R1_Rle; lra). nra.
Qed.

Lemma Gk_ge_1 : forall k m, m0 <= m -> 1 <= Gk k m.
Proof.
  intros k m Hm; unfold Gk; pose proof cg_ge_1; pose proof (ff_u_nonneg A_).
  assert (1 <= cg ^ k) by (apply pow_R1_Rle; lra).
  assert (1 <= Rpower 2 (u * (m - m0))) by (apply ose_rpow_ge_1; nra).
  assert (1 <= H * cg ^ k) by nra. nra.
Qed.

Lemma dR_nonneg : 0 <= dR.
Proof.
  unfold dR, Gb; pose proof (ff_u_nonneg A_); pose proof (mp_eta_e_nonneg M); pose proof (ff_eta_nonneg A_).
  pose proof cg_ge_1.
  assert (1 <= cg ^ Tt) by (apply pow_R1_Rle; lra).
  pose proof (Rpower_pos (u * K)).
  assert (0 <= H * cg ^ Tt * Rpower 2 (u * K)) by (apply Rmult_le_pos; [nra | lra]).
  assert (0 <= H * cg ^ Tt * Rpower 2 (u * K) * Sb * ee) by (apply Rmult_le_pos; [nra | lra]).
  nra.
Qed.

Lemma Rk_nonneg : forall k, 0 <= Rk k.
Proof.
  intros k; unfold Rk; pose proof dR_nonneg; pose proof cr_ge_1; pose proof (pos_INR k).
  assert (1 <= cr ^ k) by (apply pow_R1_Rle; lra).
  apply Rmult_le_pos; [nra | lra].
Qed.

Lemma concat_cons_in : forall (tl : list Key) rest k, In k (concat (tl :: rest)) <-> In k tl \/ In k (concat rest).
Proof. intros; simpl; split; [apply in_app_or | apply in_or_app]. Qed.

Theorem run_inv : forall tiles k m x seen,
  fmt m -> fmt x -> m0 <= m ->
  (forall q, In q seen -> P q /\ sc q <= m) ->
  (forall q, In q (concat tiles) -> P q /\ fmt (sc q) /\ mrun m tiles - sc q <= K) ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length seen + length (concat tiles) <= N)%nat ->
  (k + length tiles <= Tt)%nat ->
  mrun m tiles - m0 <= K ->
  inv (Gk k m) (Rk k) x (Yf m seen) (Tf m seen) ->
  inv (Gk (k + length tiles) (mrun m tiles)) (Rk (k + length tiles))
      (run m x tiles) (Yf (mrun m tiles) (seen ++ concat tiles)) (Tf (mrun m tiles) (seen ++ concat tiles)).
Proof.
  induction tiles as [|tl rest IH]; intros k m x seen Fm Fx Hm0 Hseen Hks HB HN HT HK C.
  - cbn [run mrun length concat]; rewrite Nat.add_0_r, app_nil_r; exact C.
  - cbn [run mrun length] in *.
    pose proof (ff_u_nonneg A_) as Hu; pose proof (mp_ue_nonneg M) as Hue.
    pose proof (mp_eta_e_nonneg M) as Hee; pose proof (ff_eta_nonneg A_) as Hea.
    set (m' := tmax m tl) in *.
    assert (Ftl : forall q, In q tl -> fmt (sc q))
      by (intros q Hq; apply Hks; apply concat_cons_in; left; exact Hq).
    destruct (tmax_props tl m Fm Ftl) as [Fm' [Hmm' Htl]]; fold m' in Fm', Hmm', Htl.
    assert (Frest : forall q, In q (concat rest) -> fmt (sc q))
      by (intros q Hq; apply Hks; apply concat_cons_in; right; exact Hq).
    pose proof (mrun_ge rest m' Fm' Frest) as Hmr.
    inversion HB as [|tl' rest' HBtl HBrest]; subst.
    assert (Ct : inv H Ry (yf m' tl) (Yf m' tl) (Tf m' tl)).
    { apply tile_ok; [exact Fm' | exact HBtl |].
      intros q Hq; destruct (Hks q (proj2 (concat_cons_in _ _ _) (or_introl Hq))) as [Pq [Fq Kq]].
      split; [exact Pq | split; [exact Fq | split; [apply Htl, Hq | pose proof (Htl q Hq); lra]]]. }
    assert (HS : Rabs (Yf m seen) <= Tf m seen) by apply Y_abs.
    assert (HG1 : 1 <= Gk k m) by (apply Gk_ge_1, Hm0).
    pose proof (rescale_step M (Gk k m) (Rk k) x (Yf m seen) (Tf m seen) H Ry (yf m' tl) (Yf m' tl) (Tf m' tl) m m'
                  HG1 (Rk_nonneg k) HH HRy Fx (yf_fmt m' tl) Fm Fm' Hmm' HS (Y_abs m' tl) C Ct) as Cs.
    rewrite Y_resc, T_resc, <- Y_app, <- T_app in Cs.
    replace (k + S (length rest))%nat with (S k + length rest)%nat by lia.
    cbn [concat]; rewrite app_assoc.
    apply IH; auto.
    + apply ff_rnd_fmt.
    + lra.
    + intros q Hq; apply in_app_or in Hq; destruct Hq as [Hq | Hq].
      * destruct (Hseen q Hq); split; [assumption | lra].
      * split; [apply (Hks q (proj2 (concat_cons_in _ _ _) (or_introl Hq))) | apply Htl, Hq].
      (* P *)
    + intros q Hq; apply (Hks q (proj2 (concat_cons_in _ _ _) (or_intror Hq))).
    + rewrite app_length; simpl in HN; rewrite app_length in HN; lia.
    + lia.
    + eapply inv_mono; [| | | exact Cs].
      * eapply Rle_trans; [apply Rabs_pos | apply Y_abs].
      * (* the factor *)
        pose proof (factor_iter_bound M H m0 [m'] (Gk k m) m k HH Hm0 (conj Hmm' I) (Rle_refl _)) as Hf.
        cbn [gfold length last_max] in Hf.
        rewrite Nat.add_1_r in Hf; unfold Gk at 2; exact Hf.
      * (* the absolute term *)
        set (S0 := Tf m seen) in *.
        assert (HS0 : S0 <= Sb).
        { apply T_bound; [exact Hseen |].
          simpl in HN; rewrite app_length in HN; lia. }
        assert (HS0p : 0 <= S0) by (eapply Rle_trans; [apply Rabs_pos | exact HS]).
        assert (HGb : Gk k m <= Gb).
        { unfold Gk, Gb; pose proof cg_ge_1.
          assert (cg ^ k <= cg ^ Tt) by (apply Rle_pow; [lra | lia]).
          assert (Rpower 2 (u * (m - m0)) <= Rpower 2 (u * K)) by (apply ost_rpow_le; nra).
          assert (1 <= cg ^ k) by (apply pow_R1_Rle; lra).
          assert (H * cg ^ k <= H * cg ^ Tt) by (apply Rmult_le_compat_l; lra).
          apply Rmult_le_compat; try lra; [nra | left; apply Rpower_pos]. }
        pose proof (alpha_factor_le m m' Hmm') as Ha.
        pose proof (Rpower_pos (m - m')) as Hap.
        pose proof (exp2_factor_ge_1 M m m' Hmm') as HE.
        pose proof (Rk_nonneg k) as HR.
        pose proof dR_nonneg as Hd.
        pose proof cr_ge_1 as Hcr.
        assert (Hcrk : 1 <= cr ^ k) by (apply pow_R1_Rle; lra).
        set (R0 := Rk k) in *.
        set (a := Rpower 2 (m - m')) in *.
        set (E := exp2_factor M m m') in *.
        set (G0 := Gk k m) in *.
        assert (E1 : R0 * (a * E + ee) <= R0 * (1 + ue + ee)) by (apply Rmult_le_compat_l; lra).
        assert (E2 : G0 * S0 * ee <= Gb * Sb * ee)
          by (apply Rmult_le_compat_r; [lra | apply Rmult_le_compat; lra]).
        assert (E3 : ((R0 * (a * E + ee) + G0 * S0 * ee) * (1 + u) + ea + Ry) * (1 + u)
                     <= cr * R0 + dR).
        { unfold cr, dR; simpl.
          assert ((R0 * (a * E + ee) + G0 * S0 * ee) * (1 + u)
                  <= (R0 * (1 + ue + ee) + Gb * Sb * ee) * (1 + u)) by (apply Rmult_le_compat_r; lra).
          nra. }
        eapply Rle_trans; [exact E3 |].
        unfold R0, Rk; rewrite S_INR; cbn [pow].
        assert (dR <= cr * cr ^ k * dR) by (assert (1 <= cr * cr ^ k) by nra; nra).
        nra.
Qed.

End Fold.

(** ** The denominator [l] over the kernel's tiles *)

Section LFold.

Variables K m0 : R.
Variables B N Tt : nat.

Definition H_l : R := (1 + u) ^ (B - 1) * tile_E K.
Definition Ry_l : R := (1 + u) ^ (B - 1) * (INR B * ee).

Lemma exact_l_resc : forall m m' ss, exact_l m ss * Rpower 2 (m - m') = exact_l m' ss.
Proof.
  intros m m'; induction ss as [|s ss IH]; unfold exact_l in *; cbn [map].
  - unfold rsum; simpl; ring.
  - rewrite !rsum_cons, <- IH, Rmult_plus_distr_r, <- Rpower_plus.
    f_equal; f_equal; ring.
Qed.

Lemma exact_l_app : forall m a b, exact_l m (a ++ b) = exact_l m a + exact_l m b.
Proof. intros; unfold exact_l; rewrite map_app; apply rsum_app. Qed.

Lemma exact_l_bound : forall m seen, (forall q, In q seen -> True /\ q <= m) ->
  (length seen <= N)%nat -> exact_l m seen <= INR N.
Proof.
  intros m seen Hs HN; apply Rle_trans with (INR (length seen)); [| apply le_INR, HN].
  clear HN; induction seen as [|s seen IH]; unfold exact_l in *; cbn [map length].
  - unfold rsum; simpl; lra.
  - rewrite rsum_cons, S_INR.
    assert (Rpower 2 (s - m) <= 1).
    { rewrite <- (Rpower_O 2) by lra; apply ost_rpow_le.
      destruct (Hs s (or_introl eq_refl)); lra. }
    assert (rsum (map (fun s0 => Rpower 2 (s0 - m)) seen) <= INR (length seen))
      by (apply IH; intros q Hq; apply Hs; right; exact Hq).
    lra.
Qed.

(** The computed [l] after the tiles, from [l = 0] at [m0]. *)
Definition l_run (m l : R) (tiles : list (list R)) : R := run R (fun s => s) tile_l m l tiles.
Definition m_run (m : R) (tiles : list (list R)) : R := mrun R (fun s => s) m tiles.

Theorem l_fold_inv : forall tiles,
  0 <= K -> fmt m0 -> (1 <= B)%nat ->
  (forall s, In s (concat tiles) -> fmt s /\ m_run m0 tiles - s <= K) ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (concat tiles) <= N)%nat -> (length tiles <= Tt)%nat ->
  m_run m0 tiles - m0 <= K ->
  inv (Gk H_l m0 (length tiles) (m_run m0 tiles))
      (Rk K H_l Ry_l (INR N) Tt (length tiles))
      (l_run m0 0 tiles) (exact_l (m_run m0 tiles) (concat tiles)) (exact_l (m_run m0 tiles) (concat tiles)).
Proof.
  intros tiles HK Fm0 HB Hks HBt HN HT HK0.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (mp_eta_e_nonneg M) as Hee.
  assert (HE := tile_E_ge_1 K HK).
  assert (HP : 1 <= (1 + u) ^ (B - 1)) by (apply pow_R1_Rle; lra).
  pose proof (run_inv R (fun s => s) (fun _ => True) tile_l exact_l exact_l K H_l Ry_l (INR N) m0 B N Tt)
    as Hr.
  unfold l_run, m_run.
  replace (concat tiles) with ([] ++ concat tiles) by reflexivity.
  replace (length tiles) with (0 + length tiles)%nat by reflexivity.
  assert (HHl : 1 <= H_l) by (unfold H_l; nra).
  assert (HRl : 0 <= Ry_l)
    by (unfold Ry_l; apply Rmult_le_pos; [lra | apply Rmult_le_pos; [apply pos_INR | exact Hee]]).
  assert (HNp : 0 <= INR N) by apply pos_INR.
  apply Hr; clear Hr; auto.
  - intros m tl; unfold tile_l; apply fmt_tile_sum.
  - intros m tl Fm Hl Htl.
    eapply inv_mono; [apply exact_l_nonneg | | | apply (tile_l_inv m K tl HK Fm (fun q Hq => proj2 (Htl q Hq)))].
    + unfold H_l; apply Rmult_le_compat_r; [lra |]; apply Rle_pow; [lra | lia].
    + unfold Ry_l; apply Rmult_le_compat.
      * apply pow_le; lra.
      * apply Rmult_le_pos; [apply pos_INR | exact Hee].
      * apply Rle_pow; [lra | lia].
      * apply Rmult_le_compat_r; [exact Hee | apply le_INR, Hl].
  - intros m tl; rewrite Rabs_right by (apply Rle_ge, exact_l_nonneg); lra.
  - apply exact_l_resc.
  - apply exact_l_resc.
  - apply exact_l_app.
  - apply exact_l_app.
  - apply exact_l_bound.
  - apply ff_fmt_0.
  - lra.
  - intros q [].
  - unfold inv, exact_l; cbn [map]; unfold rsum; cbn [fold_right].
    rewrite Rminus_0_r, Rabs_R0, Rmult_0_r, Rplus_0_l; apply Rk_nonneg; assumption.
Qed.

End LFold.

(** ** A coordinate of [acc] over the kernel's tiles *)

Section AccFold.

Variables K m0 V : R.
Variables B N Tt : nat.

Definition H_acc : R := tile_acc_H K B.
Definition Ry_acc : R := (1 + u) ^ (B - 1) * ((1 + u) * ((1 + us) * ee + es) * (INR B * V) + INR B * ea).

(** Rescaling a sum of key weights [2^(s - m) w] to a new max [m']: the step shared by
    [exact_pv] and [exact_pv_abs]. *)
Lemma weighted_resc : forall (T : Type) (key w : T -> R) m m' xs,
  rsum (map (fun x => Rpower 2 (key x - m) * w x) xs) * Rpower 2 (m - m')
  = rsum (map (fun x => Rpower 2 (key x - m') * w x) xs).
Proof.
  intros T key w m m'; induction xs as [|x xs IH]; cbn [map].
  - unfold rsum; simpl; ring.
  - rewrite !rsum_cons, <- IH.
    replace (Rpower 2 (key x - m')) with (Rpower 2 (key x - m) * Rpower 2 (m - m'))
      by (rewrite <- Rpower_plus; f_equal; ring).
    ring.
Qed.

Lemma exact_pv_resc : forall m m' svs, exact_pv m svs * Rpower 2 (m - m') = exact_pv m' svs.
Proof. intros; unfold exact_pv; apply (weighted_resc _ fst snd). Qed.

Lemma exact_pv_abs_resc : forall m m' svs, exact_pv_abs m svs * Rpower 2 (m - m') = exact_pv_abs m' svs.
Proof. intros; unfold exact_pv_abs; apply (weighted_resc _ fst (fun sv => Rabs (snd sv))). Qed.

Lemma exact_pv_abs_ge : forall m svs, Rabs (exact_pv m svs) <= exact_pv_abs m svs.
Proof.
  intros m; induction svs as [|sv svs IH]; unfold exact_pv, exact_pv_abs in *; cbn [map].
  - unfold rsum; simpl; rewrite Rabs_R0; lra.
  - rewrite !rsum_cons; eapply Rle_trans; [apply Rabs_triang |].
    rewrite Rabs_mult, (Rabs_right (Rpower 2 _)) by (left; apply Rpower_pos); lra.
Qed.

Lemma exact_pv_abs_bound : forall m svs, 0 <= V ->
  (forall q, In q svs -> Rabs (snd q) <= V /\ fst q <= m) ->
  (length svs <= N)%nat -> exact_pv_abs m svs <= INR N * V.
Proof.
  intros m svs HV Hs HN; apply Rle_trans with (INR (length svs) * V);
    [| apply Rmult_le_compat_r; [exact HV | apply le_INR, HN]].
  clear HN; induction svs as [|sv svs IH]; unfold exact_pv_abs in *; cbn [map length].
  - unfold rsum; simpl; lra.
  - rewrite rsum_cons, S_INR.
    destruct (Hs sv (or_introl eq_refl)) as [Hv Hsm].
    assert (Rpower 2 (fst sv - m) <= 1)
      by (rewrite <- (Rpower_O 2) by lra; apply ost_rpow_le; lra).
    pose proof (Rpower_pos (fst sv - m)); pose proof (Rabs_pos (snd sv)).
    assert (rsum (map (fun sv0 => Rpower 2 (fst sv0 - m) * Rabs (snd sv0)) svs) <= INR (length svs) * V)
      by (apply IH; intros q Hq; apply Hs; right; exact Hq).
    assert (Rpower 2 (fst sv - m) * Rabs (snd sv) <= 1 * V) by (apply Rmult_le_compat; lra).
    lra.
Qed.

Definition acc_run (m x : R) (tiles : list (list (R * R))) : R := run (R * R) fst tile_pv m x tiles.
Definition acc_m_run (m : R) (tiles : list (list (R * R))) : R := mrun (R * R) fst m tiles.

Theorem acc_fold_inv : forall tiles,
  0 <= K -> 0 <= V -> fmt m0 -> (1 <= B)%nat ->
  (forall q, In q (concat tiles) -> Rabs (snd q) <= V /\ fmt (fst q) /\ acc_m_run m0 tiles - fst q <= K) ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (concat tiles) <= N)%nat -> (length tiles <= Tt)%nat ->
  acc_m_run m0 tiles - m0 <= K ->
  inv (Gk H_acc m0 (length tiles) (acc_m_run m0 tiles))
      (Rk K H_acc Ry_acc (INR N * V) Tt (length tiles))
      (acc_run m0 0 tiles) (exact_pv (acc_m_run m0 tiles) (concat tiles))
      (exact_pv_abs (acc_m_run m0 tiles) (concat tiles)).
Proof.
  intros tiles HK HV Fm0 HB Hks HBt HN HT HK0.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (mp_eta_e_nonneg M) as Hee.
  pose proof (ff_u_nonneg S_) as Hus; pose proof (ff_eta_nonneg S_) as Hes.
  pose proof (ff_eta_nonneg A_) as Hea.
  assert (HE := tile_E_ge_1 K HK).
  assert (HP : 1 <= (1 + u) ^ (B - 1)) by (apply pow_R1_Rle; lra).
  pose proof (run_inv (R * R) fst (fun q => Rabs (snd q) <= V) tile_pv exact_pv exact_pv_abs
                K H_acc Ry_acc (INR N * V) m0 B N Tt) as Hr.
  assert (Hc : 0 <= (1 + u) * ((1 + us) * ee + es))
    by (apply Rmult_le_pos; [lra | apply Rplus_le_le_0_compat; [apply Rmult_le_pos; lra | lra]]).
  assert (HHa : 1 <= H_acc).
  { unfold H_acc, tile_acc_H.
    assert (1 <= (1 + u) * (1 + us)) by nra.
    assert (1 <= (1 + u) * (1 + us) * tile_E K) by nra. nra. }
  assert (HRa : 0 <= Ry_acc).
  { unfold Ry_acc; pose proof (pos_INR B).
    apply Rmult_le_pos; [lra |]; apply Rplus_le_le_0_compat; apply Rmult_le_pos; nra. }
  assert (HNp : 0 <= INR N * V) by (apply Rmult_le_pos; [apply pos_INR | exact HV]).
  unfold acc_run, acc_m_run.
  replace (concat tiles) with ([] ++ concat tiles) by reflexivity.
  replace (length tiles) with (0 + length tiles)%nat by reflexivity.
  apply Hr; clear Hr; auto.
  - intros m tl; unfold tile_pv; apply fmt_tile_sum.
  - intros m tl Fm Hl Htl.
    eapply inv_mono;
      [| | | apply (tile_acc_inv m K tl HK Fm (fun q Hq => proj2 (Htl q Hq)))].
    + eapply Rle_trans; [apply Rabs_pos | apply exact_pv_abs_ge].
    + unfold H_acc, tile_acc_H; apply Rmult_le_compat_r.
      * assert (1 <= (1 + u) * (1 + us)) by nra. nra.
      * apply Rle_pow; [lra | lia].
    + unfold tile_acc_R, Ry_acc.
      assert (Hv : rsum (map (fun sv => Rabs (snd sv)) tl) <= INR B * V).
      { apply Rle_trans with (INR (length tl) * V);
          [| apply Rmult_le_compat_r; [exact HV | apply le_INR, Hl]].
        rewrite <- ost_rsum_const; clear Hl.
        induction tl as [|q tl IH]; cbn [map]; [unfold rsum; simpl; lra |].
        rewrite !rsum_cons.
        assert (Rabs (snd q) <= V) by (apply (Htl q (or_introl eq_refl))).
        assert (rsum (map (fun sv => Rabs (snd sv)) tl) <= rsum (map (fun _ => V) tl))
          by (apply IH; intros q' Hq'; apply Htl; right; exact Hq').
        lra. }
      assert (Hv0 : 0 <= rsum (map (fun sv => Rabs (snd sv)) tl)).
      { apply rsum_nonneg; intros z Hz; apply in_map_iff in Hz; destruct Hz as [w [<- _]]; apply Rabs_pos. }
      assert (HlB : INR (length tl) * ea <= INR B * ea)
        by (apply Rmult_le_compat_r; [exact Hea | apply le_INR, Hl]).
      pose proof (pos_INR (length tl)).
      apply Rmult_le_compat.
      * apply pow_le; lra.
      * apply Rplus_le_le_0_compat; apply Rmult_le_pos; nra.
      * apply Rle_pow; [lra | lia].
      * assert ((1 + u) * ((1 + us) * ee + es) * rsum (map (fun sv => Rabs (snd sv)) tl)
                <= (1 + u) * ((1 + us) * ee + es) * (INR B * V)) by (apply Rmult_le_compat_l; lra).
        lra.
  - intros; apply exact_pv_abs_ge.
  - apply exact_pv_resc.
  - apply exact_pv_abs_resc.
  - intros; unfold exact_pv; rewrite map_app; apply rsum_app.
  - intros; unfold exact_pv_abs; rewrite map_app; apply rsum_app.
  - intros m seen Hs Hl; apply exact_pv_abs_bound; auto.
  - apply ff_fmt_0.
  - lra.
  - intros q [].
  - unfold inv, exact_pv, exact_pv_abs; cbn [map]; unfold rsum; cbn [fold_right].
    rewrite Rminus_0_r, Rabs_R0, Rmult_0_r, Rplus_0_l; apply Rk_nonneg; assumption.
Qed.

End AccFold.

(** ** End to end: [out = rnd (acc / l)] for one output coordinate

    The kernel's tiles as lists of (score, value) pairs; [l] runs over
    their scores, [acc] over the pairs, both with the same running max.
    [m0] is a score of the row (for the kernel: one of the first tile,
    where [run_first] shows that the fold from [(m0, 0)] gives the
    kernel's [-inf] start: the first tile's [l = tl.sum p], [acc = P.V]). *)

Lemma tmax_map : forall tl m,
  tmax R (fun s => s) m (map fst tl) = tmax (R * R) fst m tl.
Proof.
  unfold tmax; induction tl as [|q tl IH]; intros m; [reflexivity |].
  cbn [map fold_left]; apply IH.
Qed.

Lemma mrun_map : forall tiles m,
  mrun R (fun s => s) m (map (map fst) tiles) = mrun (R * R) fst m tiles.
Proof.
  induction tiles as [|tl rest IH]; intros m; [reflexivity |].
  cbn [map mrun]; rewrite tmax_map; apply IH.
Qed.

Lemma tmax_attained : forall {T} (sc : T -> R) tl m,
  tmax T sc m tl = m \/ exists q, In q tl /\ sc q = tmax T sc m tl.
Proof.
  intros T sc; unfold tmax; induction tl as [|q tl IH]; intros m; [left; reflexivity |].
  cbn [fold_left]; destruct (IH (Rmax m (sc q))) as [E | [q' [Hq' E]]].
  - rewrite E; unfold Rmax; destruct (Rle_dec m (sc q)).
    + right; exists q; split; [left; reflexivity | reflexivity].
    + left; reflexivity.
  - right; exists q'; split; [right; exact Hq' | exact E].
Qed.

Lemma mrun_attained : forall {T} (sc : T -> R) tiles m,
  mrun T sc m tiles = m \/ exists q, In q (concat tiles) /\ sc q = mrun T sc m tiles.
Proof.
  intros T sc; induction tiles as [|tl rest IH]; intros m; [left; reflexivity |].
  cbn [mrun]; destruct (IH (tmax T sc m tl)) as [E | [q [Hq E]]].
  - rewrite E; destruct (tmax_attained sc tl m) as [E2 | [q [Hq E2]]].
    + left; exact E2.
    + right; exists q; split; [apply concat_cons_in; left; exact Hq | exact E2].
  - right; exists q; split; [apply concat_cons_in; right; exact Hq | exact E].
Qed.

Lemma ost_rsum_ge_in : forall xs x, (forall y, In y xs -> 0 <= y) -> In x xs -> x <= rsum xs.
Proof.
  induction xs as [|y xs IH]; intros x Hp Hx; [destruct Hx |].
  destruct Hx as [<- | Hx]; rewrite rsum_cons.
  - assert (0 <= rsum xs) by (apply rsum_nonneg; intros z Hz; apply Hp; right; exact Hz). lra.
  - assert (0 <= y) by (apply Hp; left; reflexivity).
    assert (x <= rsum xs) by (apply IH; [intros z Hz; apply Hp; right; exact Hz | exact Hx]). lra.
Qed.

Section EndToEnd.

Variables K m0 V : R.
Variables B N Tt : nat.

Definition out_bL (t : nat) (mt : R) : R :=
  Gk (H_l K B) m0 t mt - 1 + Rk K (H_l K B) (Ry_l B) (INR N) Tt t.
Definition out_bN (t : nat) (mt : R) : R :=
  Gk (H_acc K B) m0 t mt - 1 + Rk K (H_acc K B) (Ry_acc V B) (INR N * V) Tt t / V.

Theorem online_softmax_output_error : forall tiles,
  0 <= K -> 0 < V -> (1 <= B)%nat ->
  (exists q, In q (concat tiles) /\ fst q = m0) ->
  (forall q, In q (concat tiles) -> Rabs (snd q) <= V /\ fmt (fst q) /\ acc_m_run m0 tiles - fst q <= K) ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (concat tiles) <= N)%nat -> (length tiles <= Tt)%nat ->
  out_bL (length tiles) (acc_m_run m0 tiles) < 1 ->
  Rabs (rnd (acc_run m0 0 tiles / l_run m0 0 (map (map fst) tiles))
        - exact_pv (acc_m_run m0 tiles) (concat tiles)
          / exact_l (acc_m_run m0 tiles) (map fst (concat tiles)))
  <= ((out_bN (length tiles) (acc_m_run m0 tiles) + out_bL (length tiles) (acc_m_run m0 tiles))
      + u * (1 + out_bN (length tiles) (acc_m_run m0 tiles)))
     / (1 - out_bL (length tiles) (acc_m_run m0 tiles)) * V + ea.
Proof.
  intros tiles HK HV HB [q0 [Hq0 Eq0]] Hks HBt HN HT HbL.
  set (t := length tiles) in *.
  set (mt := acc_m_run m0 tiles) in *.
  assert (Fm0 : fmt m0) by (rewrite <- Eq0; apply (Hks q0 Hq0)).
  assert (HK0 : mt - m0 <= K) by (rewrite <- Eq0; apply (Hks q0 Hq0)).
  (* the acc fold *)
  pose proof (acc_fold_inv K m0 V B N Tt tiles HK (Rlt_le _ _ HV) Fm0 HB Hks HBt HN HT HK0) as Ca.
  fold t mt in Ca.
  (* the l fold, on the scores *)
  assert (HBt' : Forall (fun tl => (length tl <= B)%nat) (map (map fst) tiles)).
  { apply Forall_forall; intros tl Htl; apply in_map_iff in Htl; destruct Htl as [tl' [<- Htl']].
    rewrite map_length; exact (proj1 (Forall_forall _ _) HBt tl' Htl'). }
  assert (Hmr : m_run m0 (map (map fst) tiles) = mt) by (unfold m_run, mt, acc_m_run; apply mrun_map).
  assert (Hks' : forall s, In s (concat (map (map fst) tiles)) -> fmt s /\ m_run m0 (map (map fst) tiles) - s <= K).
  { intros s Hs; rewrite <- concat_map in Hs; apply in_map_iff in Hs; destruct Hs as [q [<- Hq]].
    rewrite Hmr; destruct (Hks q Hq) as [_ [F1 F2]]; split; assumption. }
  assert (HN' : (length (concat (map (map fst) tiles)) <= N)%nat)
    by (rewrite <- concat_map, map_length; exact HN).
  assert (HT' : (length (map (map fst) tiles) <= Tt)%nat) by (rewrite map_length; exact HT).
  pose proof (l_fold_inv K m0 B N Tt (map (map fst) tiles) HK Fm0 HB Hks' HBt' HN' HT' ltac:(rewrite Hmr; exact HK0)) as Cl.
  rewrite Hmr, map_length, <- concat_map in Cl; fold t in Cl.
  set (L := exact_l mt (map fst (concat tiles))) in *.
  set (Nn := exact_pv mt (concat tiles)) in *.
  set (Aa := exact_pv_abs mt (concat tiles)) in *.
  (* L >= 1: the last running max is a score *)
  assert (HL1 : 1 <= L).
  { assert (Hq : exists q, In q (concat tiles) /\ fst q = mt).
    { destruct (mrun_attained fst tiles m0) as [E | Hq]; [| exact Hq].
      exists q0; split; [exact Hq0 | unfold mt, acc_m_run; rewrite E; exact Eq0]. }
    destruct Hq as [q [Hq E]].
    unfold L, exact_l; rewrite map_map.
    replace 1 with (Rpower 2 (fst q - mt)) by (rewrite E, Rminus_diag_eq, Rpower_O by (reflexivity || lra); reflexivity).
    apply ost_rsum_ge_in.
    - intros y Hy; apply in_map_iff in Hy; destruct Hy as [z [<- _]]; left; apply Rpower_pos.
    - apply in_map_iff; exists q; split; [reflexivity | exact Hq]. }
  (* |N| <= A <= V L *)
  assert (HAL : Aa <= V * L).
  { unfold Aa, L, exact_pv_abs, exact_l; rewrite map_map.
    assert (Hv : forall q, In q (concat tiles) -> Rabs (snd q) <= V) by (intros q Hq; apply (Hks q Hq)).
    clear -Hv; induction (concat tiles) as [|q xs IH]; cbn [map]; [unfold rsum; simpl; lra |].
    rewrite !rsum_cons, Rmult_plus_distr_l.
    assert (Rpower 2 (fst q - mt) * Rabs (snd q) <= V * Rpower 2 (fst q - mt)).
    { rewrite Rmult_comm; apply Rmult_le_compat_r; [left; apply Rpower_pos | apply Hv; left; reflexivity]. }
    assert (rsum (map (fun sv => Rpower 2 (fst sv - mt) * Rabs (snd sv)) xs)
            <= V * rsum (map (fun x => Rpower 2 (fst x - mt)) xs))
      by (apply IH; intros q' Hq'; apply Hv; right; exact Hq').
    lra. }
  assert (HNA : Rabs Nn <= Aa) by apply exact_pv_abs_ge.
  (* the bounds of the two folds *)
  pose proof (ff_u_nonneg A_) as Hu; pose proof (mp_eta_e_nonneg M) as Hee.
  pose proof (ff_u_nonneg S_) as Hus; pose proof (ff_eta_nonneg S_) as Hes.
  pose proof (ff_eta_nonneg A_) as Hea.
  assert (HE := tile_E_ge_1 K HK).
  assert (HP : 1 <= (1 + u) ^ (B - 1)) by (apply pow_R1_Rle; lra).
  assert (Hm0t : m0 <= mt)
    by (unfold mt, acc_m_run; apply (mrun_ge (R * R) fst tiles m0 Fm0); intros q Hq; apply (Hks q Hq)).
  assert (HHl : 1 <= (H_l K B)) by (unfold H_l; nra).
  assert (HRl : 0 <= (Ry_l B))
    by (unfold Ry_l; apply Rmult_le_pos; [lra | apply Rmult_le_pos; [apply pos_INR | exact Hee]]).
  assert (HNp : 0 <= INR N) by apply pos_INR.
  assert (Hc : 0 <= (1 + u) * ((1 + us) * ee + es))
    by (apply Rmult_le_pos; [lra | apply Rplus_le_le_0_compat; [apply Rmult_le_pos; lra | lra]]).
  assert (HHa : 1 <= (H_acc K B)).
  { unfold H_acc, tile_acc_H.
    assert (1 <= (1 + u) * (1 + us)) by nra.
    assert (1 <= (1 + u) * (1 + us) * tile_E K) by nra. nra. }
  assert (HRa : 0 <= (Ry_acc V B)).
  { unfold Ry_acc; pose proof (pos_INR B).
    apply Rmult_le_pos; [lra |]; apply Rplus_le_le_0_compat; apply Rmult_le_pos; nra. }
  assert (HNV : 0 <= INR N * V) by (apply Rmult_le_pos; lra).
  pose proof (Gk_ge_1 (H_l K B) m0 HHl t mt Hm0t) as HGl.
  pose proof (Gk_ge_1 (H_acc K B) m0 HHa t mt Hm0t) as HGa.
  pose proof (Rk_nonneg K (H_l K B) (Ry_l B) (INR N) Tt HHl HRl HNp t) as HRkl.
  pose proof (Rk_nonneg K (H_acc K B) (Ry_acc V B) (INR N * V) Tt HHa HRa HNV t) as HRka.
  unfold inv in Cl, Ca.
  apply final_division.
  - lra.
  - lra.
  - lra.
  - unfold out_bL; fold t mt in HbL |- *; unfold out_bL in HbL; split; [lra | lra].
  - unfold out_bN; apply Rplus_le_le_0_compat; [lra |].
    apply Rmult_le_pos; [lra | left; apply Rinv_0_lt_compat, HV].
  - unfold out_bL; fold t mt.
    eapply Rle_trans; [exact Cl |].
    assert (Rk K (H_l K B) (Ry_l B) (INR N) Tt t <= Rk K (H_l K B) (Ry_l B) (INR N) Tt t * L) by nra.
    nra.
  - unfold out_bN; fold t mt.
    eapply Rle_trans; [exact Ca |].
    set (Ra := Rk K (H_acc K B) (Ry_acc V B) (INR N * V) Tt t) in *.
    set (Ga := Gk (H_acc K B) m0 t mt) in *.
    assert ((Ga - 1) * Aa <= (Ga - 1) * (V * L)) by (apply Rmult_le_compat_l; lra).
    assert (Ra <= Ra / V * V * L).
    { replace (Ra / V * V) with Ra by (field; lra). nra. }
    nra.
Qed.

End EndToEnd.

(** ** Fully masked key tiles leave the kernel's state exactly unchanged

    The kernel's per-tile step ([_fwd_tile] with [MASKED], kernels/ojas_kernels/attention_forward.py)
    on the whole state of one query row: running max [m] (the kernel's
    [-inf], "no visible key yet", is [None]), running sum [l], accumulator
    [acc] (one fp32 number per value coordinate).  Per key [k] of the tile,
    [vis k] is the kernel's [vis] (bounds, causal, window, user mask); the
    kernel then computes
      s     = tl.where(vis, s, -inf)
      m_new = max (m, max_j s_j)            -- [vmax]: max with [-inf] is the identity
      m_use = (m_new == -inf) ? 0 : m_new   -- [m_use]
      p_j   = exp2 (s_j - m_use)            -- [kweight]: [exp2 (-inf) = 0] for a masked key
      alpha = exp2 (m - m_use)              -- [kalpha]: [exp2 (-inf) = 0] when [m = -inf]
      l     = l * alpha + tl.sum (p)
      acc   = acc * alpha + P.V
    modelled as in the rest of this file: [rnd] the fp32 rounding, [p]
    rounded to the value dtype ([ff_rnd S_]) before the products, the tile
    sums left to right ([tile_sum]), [l] and [acc] updated as
    [rnd (rnd (x * alpha) + y)].  The model's premises used here:
    - [ff_rnd_id] (a field of [FloatFormat]: rounding fixes every number of
      the format, Flocq's [round_generic]) with [ff_fmt_0]: [rnd 0 = 0],
      [rnd (x + 0) = x] and [rnd (x * 1) = x] for [x] in the format;
    - [exp2_0 : exp2 0 = 1], a hypothesis of this section (not a field of
      [MixedModel]: it is proved for the instances, [mixed_fp32_exp2_0]
      in MixedPrecision.v: [2^0 = 1] is an fp32 number, so its correctly
      rounded value is itself; [ex2.approx.f32] also returns exactly 1 at 0);
    - [exp2 (-inf) = +0] exactly (IEEE 754 and PTX [ex2]): built into the
      definitions [kweight] and [kalpha], as the real model has no [-inf].
    Results:
    - [masked_tile_step_id]: a tile with [vis k = false] for every key
      leaves [(m, l, acc)] EQUAL (not close), for every state satisfying
      [kstate_ok] ([l], [acc] in fp32, and [l = 0], [acc = 0] while
      [m = -inf]: the kernel's start and every state reached from it,
      [kernel_step_ok]);
    - [kernel_run_skip_masked_tiles]: running over the tiles equals running
      over the tiles with the fully masked ones removed (any positions: the
      tiles above the causal diagonal or outside the window that the loop
      bounds skip), [kernel_run_skip_masked_tile] for one tile anywhere;
    - [kernel_step_visible]: on a tile with every key visible, from a
      finite [m], the step is the one of [run] above ([tmax], [tile_l],
      [tile_pv] on the pairs (score, value coordinate)). *)

Lemma map_seq_nth_ext : forall (f : nat -> R) (xs : list R),
  (forall c, (c < length xs)%nat -> f c = nth c xs 0) ->
  map f (seq 0 (length xs)) = xs.
Proof.
  intros f xs Hf.
  apply nth_ext with (d := 0) (d' := 0); [rewrite map_length, seq_length; reflexivity |].
  intros c Hc; rewrite map_length, seq_length in Hc.
  rewrite nth_indep with (d' := f 0%nat) by (rewrite map_length, seq_length; exact Hc).
  rewrite map_nth, seq_nth by exact Hc; cbn [plus]; apply Hf, Hc.
Qed.

Section Masked.

Variable Key : Type.
Variable sc : Key -> R.          (** the key's fp32 score (scaled) *)
Variable vis : Key -> bool.      (** the kernel's [vis] *)
Variable val : Key -> nat -> R.  (** coordinate [c] of the key's value row *)

Hypothesis exp2_0 : exp2 0 = 1.

Definition omax (a : option R) (x : R) : option R :=
  match a with None => Some x | Some b => Some (Rmax b x) end.

Definition vmax (m : option R) (tl : list Key) : option R :=
  fold_left (fun a k => if vis k then omax a (sc k) else a) tl m.

Definition m_use (m : option R) : R := match m with None => 0 | Some x => x end.

Definition kweight (m' : R) (k : Key) : R := if vis k then exp2 (rnd (sc k - m')) else 0.

Definition kalpha (m : option R) (m' : R) : R :=
  match m with None => 0 | Some x => exp2 (rnd (x - m')) end.

Definition ktile_l (m' : R) (tl : list Key) : R := tile_sum A_ (map (kweight m') tl).

Definition ktile_pv (m' : R) (tl : list Key) (c : nat) : R :=
  tile_sum A_ (map (fun k => rnd (ff_rnd S_ (kweight m' k) * val k c)) tl).

Record kstate := KState { ks_m : option R; ks_l : R; ks_acc : list R }.

Definition kernel_step (st : kstate) (tl : list Key) : kstate :=
  let m' := vmax (ks_m st) tl in
  let a := kalpha (ks_m st) (m_use m') in
  {| ks_m := m';
     ks_l := rnd (rnd (ks_l st * a) + ktile_l (m_use m') tl);
     ks_acc := map (fun c => rnd (rnd (nth c (ks_acc st) 0 * a) + ktile_pv (m_use m') tl c))
                   (seq 0 (length (ks_acc st))) |}.

Definition kernel_run (st : kstate) (tiles : list (list Key)) : kstate :=
  fold_left kernel_step tiles st.

(** The kernel's start for a value row of [d] coordinates: [m = -inf, l = 0, acc = 0]. *)
Definition kernel_start (d : nat) : kstate := {| ks_m := None; ks_l := 0; ks_acc := repeat 0 d |}.

Definition fully_masked (tl : list Key) : bool := forallb (fun k => negb (vis k)) tl.

Definition kstate_ok (st : kstate) : Prop :=
  fmt (ks_l st) /\ Forall fmt (ks_acc st) /\
  (ks_m st = None -> ks_l st = 0 /\ Forall (fun x => x = 0) (ks_acc st)).

Lemma fully_masked_spec : forall tl, fully_masked tl = true -> forall k, In k tl -> vis k = false.
Proof.
  intros tl H k Hk; unfold fully_masked in H; rewrite forallb_forall in H.
  specialize (H k Hk); destruct (vis k); [discriminate | reflexivity].
Qed.

Lemma vmax_masked : forall tl m, fully_masked tl = true -> vmax m tl = m.
Proof.
  unfold vmax; induction tl as [|k tl IH]; intros m H; [reflexivity |].
  cbn [fold_left]; rewrite (fully_masked_spec (k :: tl) H k (or_introl eq_refl)).
  apply IH; unfold fully_masked in *; cbn [forallb] in H; apply andb_prop in H; apply H.
Qed.

Lemma vmax_some : forall tl x, vmax (Some x) tl <> None.
Proof.
  unfold vmax; induction tl as [|k tl IH]; intros x; cbn [fold_left]; [discriminate |].
  destruct (vis k); [apply IH | apply IH].
Qed.

Lemma vmax_none : forall tl m, vmax m tl = None -> m = None /\ fully_masked tl = true.
Proof.
  unfold vmax; induction tl as [|k tl IH]; intros m H; [split; [exact H | reflexivity] |].
  cbn [fold_left] in H; unfold fully_masked; cbn [forallb].
  destruct (vis k) eqn:Ev.
  - exfalso; destruct m; apply (vmax_some tl _ H).
  - destruct (IH m H) as [Hm Ht]; split; [exact Hm | exact Ht].
Qed.

Lemma ktile_l_masked : forall m' tl, fully_masked tl = true -> ktile_l m' tl = 0.
Proof.
  intros m' tl H; unfold ktile_l; apply tile_sum_zero_Forall, Forall_forall.
  intros x Hx; apply in_map_iff in Hx; destruct Hx as [k [<- Hk]].
  unfold kweight; rewrite (fully_masked_spec tl H k Hk); reflexivity.
Qed.

Lemma ktile_pv_masked : forall m' tl c, fully_masked tl = true -> ktile_pv m' tl c = 0.
Proof.
  intros m' tl c H; unfold ktile_pv; apply tile_sum_zero_Forall, Forall_forall.
  intros x Hx; apply in_map_iff in Hx; destruct Hx as [k [<- Hk]].
  unfold kweight; rewrite (fully_masked_spec tl H k Hk).
  rewrite (ff_rnd_id S_ 0 (ff_fmt_0 S_)), Rmult_0_l; apply (ff_rnd_id A_ 0 (ff_fmt_0 A_)).
Qed.

(** A fully masked tile leaves the state exactly unchanged. *)
Theorem masked_tile_step_id : forall st tl,
  kstate_ok st -> fully_masked tl = true -> kernel_step st tl = st.
Proof.
  intros [m l acc] tl [Fl [Facc Hnone]] Hm; cbn [ks_m ks_l ks_acc] in *.
  unfold kernel_step; cbn [ks_m ks_l ks_acc].
  rewrite (vmax_masked tl m Hm), (ktile_l_masked _ tl Hm).
  assert (Hpv : forall c, ktile_pv (m_use m) tl c = 0) by (intros c; apply ktile_pv_masked, Hm).
  assert (Ha : kalpha m (m_use m) = 0 /\ m = None \/ kalpha m (m_use m) = 1).
  { destruct m as [x |]; [right | left; split; reflexivity].
    cbn [kalpha m_use]; rewrite Rminus_diag_eq, (ff_rnd_id A_ 0 (ff_fmt_0 A_)) by reflexivity.
    exact exp2_0. }
  f_equal.
  - destruct Ha as [[Ha Em] | Ha]; rewrite Ha.
    + destruct (Hnone Em) as [El _]; rewrite El, Rmult_0_l, (ff_rnd_id A_ 0 (ff_fmt_0 A_)), Rplus_0_r.
      apply (ff_rnd_id A_ 0 (ff_fmt_0 A_)).
    + rewrite Rmult_1_r, (ff_rnd_id A_ l Fl), Rplus_0_r; apply (ff_rnd_id A_ l Fl).
  - apply map_seq_nth_ext; intros c Hc; rewrite Hpv, Rplus_0_r.
    assert (Fc : fmt (nth c acc 0)) by (apply (proj1 (Forall_forall _ _) Facc), nth_In, Hc).
    destruct Ha as [[Ha Em] | Ha]; rewrite Ha.
    + destruct (Hnone Em) as [_ Hz].
      rewrite (proj1 (Forall_forall _ _) Hz (nth c acc 0) (nth_In _ _ Hc)).
      rewrite Rmult_0_l, (ff_rnd_id A_ 0 (ff_fmt_0 A_)); apply (ff_rnd_id A_ 0 (ff_fmt_0 A_)).
    + rewrite Rmult_1_r, (ff_rnd_id A_ _ Fc); apply (ff_rnd_id A_ _ Fc).
Qed.

(** Every step keeps [kstate_ok]. *)
Lemma kernel_step_ok : forall st tl, kstate_ok st -> kstate_ok (kernel_step st tl).
Proof.
  intros st tl Hst.
  destruct (vmax (ks_m st) tl) eqn:Ev.
  - unfold kstate_ok, kernel_step; cbn [ks_m ks_l ks_acc]; rewrite Ev.
    split; [apply ff_rnd_fmt | split; [| discriminate]].
    apply Forall_forall; intros x Hx; apply in_map_iff in Hx; destruct Hx as [c [<- _]]; apply ff_rnd_fmt.
  - destruct (vmax_none tl (ks_m st) Ev) as [_ Hm].
    rewrite (masked_tile_step_id st tl Hst Hm); exact Hst.
Qed.

Lemma kernel_run_ok : forall tiles st, kstate_ok st -> kstate_ok (kernel_run st tiles).
Proof.
  unfold kernel_run; induction tiles as [|tl tiles IH]; intros st Hst; [exact Hst |].
  cbn [fold_left]; apply IH, kernel_step_ok, Hst.
Qed.

Lemma kernel_start_ok : forall d, kstate_ok (kernel_start d).
Proof.
  intros d; unfold kstate_ok, kernel_start; cbn [ks_m ks_l ks_acc].
  split; [apply ff_fmt_0 | split].
  - apply Forall_forall; intros x Hx; apply repeat_spec in Hx; subst; apply ff_fmt_0.
  - intros _; split; [reflexivity |].
    apply Forall_forall; intros x Hx; apply repeat_spec in Hx; exact Hx.
Qed.

(** Skipping the fully masked tiles, wherever they are, changes nothing. *)
Theorem kernel_run_skip_masked_tiles : forall tiles st, kstate_ok st ->
  kernel_run st (filter (fun tl => negb (fully_masked tl)) tiles) = kernel_run st tiles.
Proof.
  unfold kernel_run; induction tiles as [|tl tiles IH]; intros st Hst; [reflexivity |].
  cbn [filter fold_left].
  destruct (fully_masked tl) eqn:Em; cbn [negb fold_left].
  - rewrite (masked_tile_step_id st tl Hst Em); apply IH, Hst.
  - apply IH, kernel_step_ok, Hst.
Qed.

(** From the kernel's start. *)
Corollary kernel_start_skip_masked_tiles : forall d tiles,
  kernel_run (kernel_start d) (filter (fun tl => negb (fully_masked tl)) tiles)
  = kernel_run (kernel_start d) tiles.
Proof. intros; apply kernel_run_skip_masked_tiles, kernel_start_ok. Qed.

(** One fully masked tile anywhere in the sequence. *)
Corollary kernel_run_skip_masked_tile : forall st tiles1 z tiles2,
  kstate_ok st -> fully_masked z = true ->
  kernel_run st (tiles1 ++ z :: tiles2) = kernel_run st (tiles1 ++ tiles2).
Proof.
  intros st tiles1 z tiles2 Hst Hz.
  pose proof (kernel_run_ok tiles1 st Hst) as Hok; unfold kernel_run in *.
  rewrite !fold_left_app; cbn [fold_left].
  rewrite (masked_tile_step_id _ z Hok Hz); reflexivity.
Qed.

(** With every key visible and a finite [m], the step is [run]'s. *)
Lemma vmax_visible : forall tl m, forallb vis tl = true -> vmax (Some m) tl = Some (tmax Key sc m tl).
Proof.
  unfold vmax, tmax; induction tl as [|k tl IH]; intros m H; [reflexivity |].
  cbn [forallb] in H; apply andb_prop in H; destruct H as [Hk Htl].
  cbn [fold_left]; rewrite Hk; cbn [omax]; apply IH, Htl.
Qed.

Theorem kernel_step_visible : forall m l acc tl, forallb vis tl = true ->
  let m' := tmax Key sc m tl in
  kernel_step {| ks_m := Some m; ks_l := l; ks_acc := acc |} tl
  = {| ks_m := Some m';
       ks_l := rnd (rnd (l * exp2 (rnd (m - m'))) + tile_l m' (map sc tl));
       ks_acc := map (fun c => rnd (rnd (nth c acc 0 * exp2 (rnd (m - m')))
                                    + tile_pv m' (map (fun k => (sc k, val k c)) tl)))
                     (seq 0 (length acc)) |}.
Proof.
  intros m l acc tl Hv m'; unfold kernel_step; cbn [ks_m ks_l ks_acc].
  rewrite (vmax_visible tl m Hv); fold m'; cbn [m_use kalpha].
  assert (Hw : forall k, In k tl -> kweight m' k = exp2 (rnd (sc k - m'))).
  { intros k Hk; unfold kweight; rewrite (proj1 (forallb_forall _ _) Hv k Hk); reflexivity. }
  assert (El : ktile_l m' tl = tile_l m' (map sc tl)).
  { unfold ktile_l, tile_l; rewrite map_map; apply f_equal, map_ext_in; exact Hw. }
  assert (Ep : forall c, ktile_pv m' tl c = tile_pv m' (map (fun k => (sc k, val k c)) tl)).
  { intros c; unfold ktile_pv, tile_pv; rewrite map_map; apply f_equal, map_ext_in.
    intros k Hk; cbn [fst snd]; rewrite (Hw k Hk); reflexivity. }
  rewrite El; f_equal; apply map_ext; intros c; rewrite Ep; reflexivity.
Qed.

End Masked.

End OnlineSoftmaxTile.

(** The instances: bf16 or fp16 storage, fp32 accumulation, [exp2] the
    correctly rounded fp32 [2^x] ([exp2 0 = 1]: [mixed_fp32_exp2_0]). *)
Corollary bf16_fp32_kernel_run_skip_masked_tiles :
  forall (Key : Type) (sc : Key -> R) (vis : Key -> bool) (val : Key -> nat -> R) tiles st,
  kstate_ok bf16_fp32 st ->
  kernel_run bf16_fp32 Key sc vis val st (filter (fun tl => negb (fully_masked Key vis tl)) tiles)
  = kernel_run bf16_fp32 Key sc vis val st tiles.
Proof. intros; apply kernel_run_skip_masked_tiles; [apply bf16_fp32_exp2_0 | assumption]. Qed.

Corollary fp16_fp32_kernel_run_skip_masked_tiles :
  forall (Key : Type) (sc : Key -> R) (vis : Key -> bool) (val : Key -> nat -> R) tiles st,
  kstate_ok fp16_fp32 st ->
  kernel_run fp16_fp32 Key sc vis val st (filter (fun tl => negb (fully_masked Key vis tl)) tiles)
  = kernel_run fp16_fp32 Key sc vis val st tiles.
Proof. intros; apply kernel_run_skip_masked_tiles; [apply fp16_fp32_exp2_0 | assumption]. Qed.
