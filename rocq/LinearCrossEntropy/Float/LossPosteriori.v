(** * An a-posteriori bound for the streamed cross-entropy loss, tight for confident tokens.

    The kernel (kernels/ojas_kernels/linear_cross_entropy_kernels.py, [_rows_kernel] with STREAM, as in
    LinearCrossEntropy/Float/LseLossError.v) streams the computed logits [z_v] into [(m, l)]
    ([ce_run] from [(z_first, 0)]), then [lse = rnd (m + tl.log l)] and
    [loss = rnd (lse - z_t)].  [ce_loss_error] charges the logits' error
    [delta] twice (once in [lse], once in [z_t]), although the target logit's
    own error cancels in [lse - z_t].  Here the logits' errors enter only
    through the softmax of the exact logits [y]:

      E = sum_v p_v (e^|d_v| - 1),  d_v = (z_v - z_t) - (y_v - y_t),
      p_v = e^(y_v) / sum_w e^(y_w)   (d_t = 0: the target's term vanishes).

    Results:
    - [ce_shift_sum_close]: [|e^(y_t - z_t) sum_v e^(z_v) - sum_v e^(y_v)|
      <= sum_v e^(y_v) (e^|d_v| - 1)].
    - [ce_shift_lse_close]: with that weighted sum at most [Eb sum_v e^(y_v)],
      [Eb < 1]: [|(ln sum e^z - z_t) - (ln sum e^y - y_t)| <= - ln (1 - Eb) <= NP].
    - [ce_run_dup]: the stream reads only the computed logits ([ce_run] of the
      pairs [(z, z)] is [ce_run] of the pairs [(z, y)]).
    - [ce_loss_posteriori]: the kernel's loss against [ln sum e^y - y_t]:
        <= (1 + u) (B + NP) + u |ln sum e^y - y_t|,
      [B = ce_lse_bound u el Zmax LN NL 0], the stream's own error
      ([ce_lse_error_up] applied to the computed logits as exact ones).
      For a peaked row ([p_t -> 1], [y_t - ln sum e^y -> 0]) [Eb -> 0] and the
      bound goes to [(1 + u) B], the stream's rounding, whatever [delta].
    - [ce_lse_posteriori]: the kernel's lse against [ln sum e^y]:
        <= B + NP,  NP >= - ln (1 - Eb),  Eb >= sum_v p_v (e^|z_v - y_v| - 1)
      (the two results above at [zt = yt = 0]; no target: the logits' own
      errors, softmax-weighted, so a peaked row keeps its target's error).

    Covered: the 3-product STREAM schedule's tile loop ([ce_run], any tiling,
    fp32 rounding with underflow as in [ce_lse_error_up]), the final log and
    the rounded subtraction; any logit errors (no premise [|z - y| <= delta]).
    Not covered: how [Eb] is obtained (the caller's exact probabilities and
    per-logit error bounds [|d_v| <= delta_v + delta_t], for the lse
    [|z_v - y_v| <= delta_v], evaluated in float64
    by ojas_ref/verification/linear_cross_entropy_error.py, not proved); the two-level
    schedule; softcap, label smoothing, z-loss, bias; FMA contraction;
    overflow. *)

From Coq Require Import Reals List Lra.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision Attention.Float.OnlineSoftmaxError.
From Ojas Require Import FloatModel.Notations.
From Ojas Require Import Attention.Float.SavedLseError LinearCrossEntropy.Float.LseLossError.
Import ListNotations.
Open Scope R_scope.

(** ** The real part: the softmax-weighted effect of the logits' errors *)

Definition ce_wterm (zt yt : R) (zy : R * R) : R :=
  exp (snd zy) * (exp (Rabs ((fst zy - zt) - (snd zy - yt))) - 1).

Definition ce_sum_exp (f : R * R -> R) (zs : list (R * R)) : R := rsum (map (fun zy => exp (f zy)) zs).

Lemma ce_shift_sum_close : forall zs zt yt,
  Rabs (ce_sum_exp fst zs * exp (yt - zt) - ce_sum_exp snd zs) <= rsum (map (ce_wterm zt yt) zs).
Proof.
  intros zs zt yt; unfold ce_sum_exp; induction zs as [| zy zs IH]; cbn [map]; rewrite ?rsum_cons.
  - rewrite rsum_nil, Rmult_0_l, Rminus_0_r, Rabs_R0; lra.
  - set (d := (fst zy - zt) - (snd zy - yt)).
    assert (E : exp (fst zy) * exp (yt - zt) = exp (snd zy) * exp d)
      by (rewrite <- !exp_plus; f_equal; unfold d; ring).
    assert (Ht : Rabs (exp (fst zy) * exp (yt - zt) - exp (snd zy)) <= ce_wterm zt yt zy).
    { rewrite E; unfold ce_wterm; fold d.
      replace (exp (snd zy) * exp d - exp (snd zy)) with (exp (snd zy) * (exp d - 1)) by ring.
      rewrite Rabs_mult, (Rabs_right (exp (snd zy))) by (left; apply exp_pos).
      apply Rmult_le_compat_l; [left; apply exp_pos | apply ose_exp_sub1]. }
    replace ((exp (fst zy) + rsum (map (fun zy0 => exp (fst zy0)) zs)) * exp (yt - zt)
             - (exp (snd zy) + rsum (map (fun zy0 => exp (snd zy0)) zs)))
      with ((exp (fst zy) * exp (yt - zt) - exp (snd zy))
            + (rsum (map (fun zy0 => exp (fst zy0)) zs) * exp (yt - zt)
               - rsum (map (fun zy0 => exp (snd zy0)) zs))) by ring.
    eapply Rle_trans; [apply Rabs_triang | lra].
Qed.

Lemma ce_sum_exp_pos : forall f zs, zs <> [] -> 0 < ce_sum_exp f zs.
Proof.
  intros f zs; unfold ce_sum_exp; induction zs as [| zy zs IH]; intros Hne; [congruence |].
  cbn [map]; rewrite rsum_cons; pose proof (exp_pos (f zy)).
  destruct zs as [| zy' zs']; [cbn [map]; rewrite rsum_nil; lra |].
  pose proof (IH ltac:(discriminate)); lra.
Qed.

Theorem ce_shift_lse_close : forall zs zt yt Eb NP, zs <> [] -> 0 <= Eb < 1 ->
  rsum (map (ce_wterm zt yt) zs) <= Eb * ce_sum_exp snd zs -> - ln (1 - Eb) <= NP ->
  Rabs ((ln (ce_sum_exp fst zs) - zt) - (ln (ce_sum_exp snd zs) - yt)) <= NP.
Proof.
  intros zs zt yt Eb NP Hne HE HW HNP.
  pose proof (ce_sum_exp_pos fst zs Hne) as Pz; pose proof (ce_sum_exp_pos snd zs Hne) as Py.
  pose proof (ce_shift_sum_close zs zt yt) as H.
  destruct (afe_ln_ratio (ce_sum_exp fst zs * exp (yt - zt)) (ce_sum_exp snd zs) Eb Py HE
              ltac:(eapply Rle_trans; [exact H | exact HW])) as [_ Hl].
  rewrite ln_mult, ln_exp in Hl by (exact Pz || apply exp_pos).
  replace ((ln (ce_sum_exp fst zs) - zt) - (ln (ce_sum_exp snd zs) - yt))
    with (ln (ce_sum_exp fst zs) + (yt - zt) - ln (ce_sum_exp snd zs)) by ring.
  lra.
Qed.

(** ** The kernel's loss *)

Definition ce_loss_post_bound (u B NP Lt : R) : R := (1 + u) * (B + NP) + u * Lt.

Definition ce_dup (zy : R * R) : R * R := (fst zy, fst zy).

Section LossPost.

Variable M : MixedModel.

Import ModelNotations.

Variable ex : R -> R.
Variables ue ee : R.
Hypothesis ue_nonneg : 0 <= ue.
Hypothesis ee_nonneg : 0 <= ee.
Hypothesis ex_err : forall x, x <= 0 -> Rabs (ex x - exp x) <= ue * exp x + ee.
Variable lg : R -> R.
Variables el lmin lmax : R.
Hypothesis lg_fmt : forall x, fmt (lg x).
Hypothesis lg_err : forall x, fmt x -> lmin <= x <= lmax -> Rabs (lg x - ln x) <= el.

Local Notation run := (ce_run M ex (R * R) fst (fun _ => 1)).

Lemma ce_run_dup : forall ts tiles st, run ts st (map (map ce_dup) tiles) = run ts st tiles.
Proof.
  intros ts tiles; unfold ce_run; induction tiles as [| tl tiles IH]; intros st; [reflexivity |].
  cbn [map fold_left]; rewrite <- IH; f_equal.
  unfold ce_step, tile_max, item_term; rewrite !map_map; reflexivity.
Qed.

(** The stream's own error: the kernel's lse [rnd (m + lg l)] against the
    lse of the computed logits ([ce_lse_error_up] with the computed logits as
    exact ones). *)
Lemma ce_stream_lse_close : forall (zy0 : R * R) (tiles : list (list (R * R))) ts (Dt Bt Tt Nn : nat)
    Zmax XK LN NL P1 QT AT,
  let st := run ts (fst zy0, 0) tiles in
  let bL := ce_bL_p u ue ee ea XK P1 QT AT Bt Tt Nn in
  let zs := concat tiles in
  In zy0 zs -> sum_ok M ts Dt Bt ->
  Forall (fun tl => (length tl <= Bt)%nat) tiles -> (length tiles <= Tt)%nat -> (length zs <= Nn)%nat ->
  (forall zy, In zy zs -> fmt (fst zy) /\ Rabs (fst zy) <= Zmax) ->
  exp (u * (2 * Zmax)) <= XK -> (1 + u) ^ Dt <= P1 -> ce_Q u ue ^ Tt <= QT -> ce_a u ue ee XK ^ Tt <= AT ->
  bL < 1 -> ln (INR Nn) <= LN -> - ln (1 - bL) <= NL -> lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  Rabs (rnd (fst st + lg (snd st)) - ln (ce_sum_exp fst zs)) <= ce_lse_bound u el Zmax LN NL 0.
Proof.
  intros zy0 tiles ts Dt Bt Tt Nn Zmax XK LN NL P1 QT AT st bL zs H0 Hts HB HT HN Hz HXK HP HQ HA HbL HLN HNL
    Hlmin Hlmax.
  set (tiles' := map (map ce_dup) tiles).
  assert (Ec : concat tiles' = map ce_dup zs) by (unfold tiles', zs; rewrite concat_map; reflexivity).
  assert (Hlse := ce_lse_error_up M ex ue ee ue_nonneg ee_nonneg ex_err lg el lmin lmax lg_fmt lg_err
                    (ce_dup zy0) tiles' ts Dt Bt Tt Nn Zmax XK 0 LN NL P1 QT AT).
  cbv zeta in Hlse.
  rewrite Ec in Hlse; unfold tiles' in Hlse; rewrite ce_run_dup, map_map in Hlse; fold st in Hlse; cbn [ce_dup fst snd] in Hlse.
  specialize (Hlse ltac:(apply in_map, H0) Hts
                   ltac:(unfold tiles'; apply Forall_forall; intros tl Hi; apply in_map_iff in Hi;
                         destruct Hi as [tl0 [<- Hi]]; rewrite map_length;
                         exact (proj1 (Forall_forall _ _) HB tl0 Hi))
                   ltac:(unfold tiles'; rewrite map_length; exact HT)
                   ltac:(rewrite map_length; exact HN)
                   ltac:(intros zy Hi; apply in_map_iff in Hi; destruct Hi as [x [<- Hi]];
                         destruct (Hz x Hi) as [F Z]; cbn [ce_dup fst snd];
                         rewrite Rminus_diag_eq, Rabs_R0 by reflexivity; refine (conj F (conj Z _)); lra)
                   HXK HP HQ HA HbL HLN HNL Hlmin Hlmax).
  exact Hlse.
Qed.

(** The kernel's per-token loss [rnd (rnd (m + lg l) - z_t)], from the stream
    state [(m, l)] of the computed logits [z = fst] (exact logits [y = snd]),
    the target's pair [(zt, yt)] among them. *)
Theorem ce_loss_posteriori : forall (zy0 : R * R) (tiles : list (list (R * R))) ts (Dt Bt Tt Nn : nat)
    Zmax XK LN NL P1 QT AT zt yt Eb NP,
  let st := run ts (fst zy0, 0) tiles in
  let bL := ce_bL_p u ue ee ea XK P1 QT AT Bt Tt Nn in
  let zs := concat tiles in
  let LSE := ln (ce_sum_exp snd zs) in
  In zy0 zs -> In (zt, yt) zs -> sum_ok M ts Dt Bt ->
  Forall (fun tl => (length tl <= Bt)%nat) tiles -> (length tiles <= Tt)%nat -> (length zs <= Nn)%nat ->
  (forall zy, In zy zs -> fmt (fst zy) /\ Rabs (fst zy) <= Zmax) ->
  exp (u * (2 * Zmax)) <= XK -> (1 + u) ^ Dt <= P1 -> ce_Q u ue ^ Tt <= QT -> ce_a u ue ee XK ^ Tt <= AT ->
  bL < 1 -> ln (INR Nn) <= LN -> - ln (1 - bL) <= NL -> lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  0 <= Eb < 1 -> rsum (map (ce_wterm zt yt) zs) <= Eb * ce_sum_exp snd zs -> - ln (1 - Eb) <= NP ->
  Rabs (rnd (rnd (fst st + lg (snd st)) - zt) - (LSE - yt))
  <= ce_loss_post_bound u (ce_lse_bound u el Zmax LN NL 0) NP (Rabs (LSE - yt)).
Proof.
  intros zy0 tiles ts Dt Bt Tt Nn Zmax XK LN NL P1 QT AT zt yt Eb NP st bL zs LSE
         H0 Ht Hts HB HT HN Hz HXK HP HQ HA HbL HLN HNL Hlmin Hlmax HE HW HNP.
  pose proof (ff_u_nonneg A_) as Hu.
  pose proof (ce_stream_lse_close zy0 tiles ts Dt Bt Tt Nn Zmax XK LN NL P1 QT AT H0 Hts HB HT HN Hz
                HXK HP HQ HA HbL HLN HNL Hlmin Hlmax) as Hlse; fold st zs in Hlse.
  assert (Hne : zs <> []) by (intros E; rewrite E in H0; destruct H0).
  set (B := ce_lse_bound u el Zmax LN NL 0) in *.
  set (lse := rnd (fst st + lg (snd st))) in *.
  destruct (Hz (zt, yt) Ht) as [Fzt _]; cbn [fst] in Fzt.
  pose proof (ce_loss_error M lse zt zt (ln (ce_sum_exp fst zs)) B 0 (ff_rnd_fmt A_ _) Fzt Hlse
                ltac:(rewrite Rminus_diag_eq, Rabs_R0 by reflexivity; lra)) as Hl.
  pose proof (ce_shift_lse_close zs zt yt Eb NP Hne HE HW HNP) as Hs; fold LSE in Hs.
  assert (Hm : Rabs (ln (ce_sum_exp fst zs) - zt) <= Rabs (LSE - yt) + NP).
  { replace (ln (ce_sum_exp fst zs) - zt) with (((ln (ce_sum_exp fst zs) - zt) - (LSE - yt)) + (LSE - yt)) by ring.
    eapply Rle_trans; [apply Rabs_triang | lra]. }
  assert (u * Rabs (ln (ce_sum_exp fst zs) - zt) <= u * (Rabs (LSE - yt) + NP)) by (apply Rmult_le_compat_l; lra).
  replace (rnd (lse - zt) - (LSE - yt))
    with ((rnd (lse - zt) - (ln (ce_sum_exp fst zs) - zt)) + ((ln (ce_sum_exp fst zs) - zt) - (LSE - yt))) by ring.
  eapply Rle_trans; [apply Rabs_triang |].
  unfold ce_loss_post_bound; lra.
Qed.

(** The kernel's lse [rnd (m + lg l)], from the stream state [(m, l)] of the
    computed logits [z = fst], against the lse of the exact logits [y = snd]:
    the stream's own error [B] plus [NP >= - ln (1 - Eb)], [Eb] bounding
    [sum_v p_v (e^|z_v - y_v| - 1)] ([ce_wterm 0 0]: [ce_shift_lse_close] at
    [zt = yt = 0]).  Unlike the loss the target's own error does not cancel:
    for a peaked row [Eb] tends to [e^|z_t - y_t| - 1], not to 0. *)
Theorem ce_lse_posteriori : forall (zy0 : R * R) (tiles : list (list (R * R))) ts (Dt Bt Tt Nn : nat)
    Zmax XK LN NL P1 QT AT Eb NP,
  let st := run ts (fst zy0, 0) tiles in
  let bL := ce_bL_p u ue ee ea XK P1 QT AT Bt Tt Nn in
  let zs := concat tiles in
  In zy0 zs -> sum_ok M ts Dt Bt ->
  Forall (fun tl => (length tl <= Bt)%nat) tiles -> (length tiles <= Tt)%nat -> (length zs <= Nn)%nat ->
  (forall zy, In zy zs -> fmt (fst zy) /\ Rabs (fst zy) <= Zmax) ->
  exp (u * (2 * Zmax)) <= XK -> (1 + u) ^ Dt <= P1 -> ce_Q u ue ^ Tt <= QT -> ce_a u ue ee XK ^ Tt <= AT ->
  bL < 1 -> ln (INR Nn) <= LN -> - ln (1 - bL) <= NL -> lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  0 <= Eb < 1 -> rsum (map (ce_wterm 0 0) zs) <= Eb * ce_sum_exp snd zs -> - ln (1 - Eb) <= NP ->
  Rabs (rnd (fst st + lg (snd st)) - ln (ce_sum_exp snd zs)) <= ce_lse_bound u el Zmax LN NL 0 + NP.
Proof.
  intros zy0 tiles ts Dt Bt Tt Nn Zmax XK LN NL P1 QT AT Eb NP st bL zs
         H0 Hts HB HT HN Hz HXK HP HQ HA HbL HLN HNL Hlmin Hlmax HE HW HNP.
  pose proof (ce_stream_lse_close zy0 tiles ts Dt Bt Tt Nn Zmax XK LN NL P1 QT AT H0 Hts HB HT HN Hz
                HXK HP HQ HA HbL HLN HNL Hlmin Hlmax) as Hlse; fold st zs in Hlse.
  assert (Hne : zs <> []) by (intros E; rewrite E in H0; destruct H0).
  pose proof (ce_shift_lse_close zs 0 0 Eb NP Hne HE HW HNP) as Hs; rewrite !Rminus_0_r in Hs.
  replace (rnd (fst st + lg (snd st)) - ln (ce_sum_exp snd zs))
    with ((rnd (fst st + lg (snd st)) - ln (ce_sum_exp fst zs)) + (ln (ce_sum_exp fst zs) - ln (ce_sum_exp snd zs)))
    by ring.
  eapply Rle_trans; [apply Rabs_triang | lra].
Qed.

End LossPost.
