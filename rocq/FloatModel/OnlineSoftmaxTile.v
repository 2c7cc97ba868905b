(** * One key tile of the online-softmax forward in mixed precision, and the fold of [l] over tiles.

    Companion of OnlineSoftmaxError.v (whose [inv], [exp2_diff_error],
    [rescale_step], [factor_iter_bound] this file uses).  For one key tile
    of [kernels/attention.py] ([_fwd_tile]) with running max [m'] (fp32,
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
    Left open here: the fold of [rescale_step] over the kernel's tiles
    with these tile values (item 2 of OnlineSoftmaxError.v). *)

From Coq Require Import Reals List Lra Lia Arith.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts RoundingModel FloatModel.MixedPrecision FloatModel.BlockedSum.
From Ojas Require Import FloatModel.OnlineSoftmaxError.
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

Local Notation A_ := (mp_a M).
Local Notation S_ := (mp_s M).
Local Notation fmt := (ff_fmt A_).
Local Notation rnd := (ff_rnd A_).
Local Notation u := (ff_u A_).
Local Notation ea := (ff_eta A_).
Local Notation us := (ff_u S_).
Local Notation es := (ff_eta S_).
Local Notation ue := (mp_ue M).
Local Notation ee := (mp_eta_e M).
Local Notation exp2 := (mp_exp2 M).

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
    pose proof (ff_abs S_ w) as Hq.
    set (q := ff_rnd S_ w) in *.
    pose proof (ff_abs A_ (q * v)) as Hr.
    assert (Hwa : Rabs w <= E * W + ee).
    { replace w with ((w - W) + W) by ring; eapply Rle_trans; [apply Rabs_triang |].
      rewrite (Rabs_right W) by lra; lra. }
    assert (Hqw : Rabs (q - W) <= ((1 + us) * E - 1) * W + ((1 + us) * ee + es)).
    { replace (q - W) with ((q - w) + (w - W)) by ring; eapply Rle_trans; [apply Rabs_triang |].
      assert (us * Rabs w <= us * (E * W + ee)) by (apply Rmult_le_compat_l; lra).
      lra. }
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
    unfold c; nra.
Qed.

End OnlineSoftmaxTile.
