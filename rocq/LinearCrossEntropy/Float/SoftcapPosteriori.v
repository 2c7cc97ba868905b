(** * An a-posteriori bound for the streamed cross-entropy loss with a final-logit softcap.

    The kernel (kernels/ojas_kernels/linear_cross_entropy_kernels.py, [_rows_kernel] with STREAM
    and HAS_CAP, as in LinearCrossEntropy/Float/SoftcapError.v) caps each raw fp32 logit [r_v]
    into [z_v = rnd (c * th r_v)] ([sc_z]), streams the capped logits ([ce_run] of
    [map (map sc_pair) tiles]), then [lse = rnd (m + tl.log l)] and
    [loss = rnd (lse - z_t)].  [ce_loss_error_softcap] charges the capped logits'
    a-priori error [sc_delta] twice (in the lse and in [z_t]).  Here, as in
    LinearCrossEntropy/Float/LossPosteriori.v's [ce_loss_posteriori], the capped
    logits' errors enter only through the softmax of the exact capped logits
    [y'_v = c tanh (y_v / c)], each with its own bound:

      |r_v - y_v| <= dr_v                                   (the raw logit, a premise)
      |z_v - y'_v| <= sc_delta u ea c ut et dr_v <= dz_v     ([sc_logit_error])
      sum_(v <> t) e^(y'_v) (e^(dz_v + dz_t) - 1) <= Eb sum_v e^(y'_v),

    the last sum taken as the full sum less the target's own term
    ([sc_wbound]; the target's term of [ce_wterm] is 0, its [d_t] being 0).

    Results:
    - [sc_wterm_le]: each capped pair's [ce_wterm] is at most its [sc_wbound].
    - [sc_wsum_le]: the weighted sum of [ce_loss_posteriori] over the capped pairs is at
      most the [sc_wbound] sum less the target's term.
    - [ce_loss_posteriori_softcap]: the kernel's soft-capped loss against
      [ln sum_v e^(c tanh (y_v / c)) - c tanh (y_t / c)]:
        <= (1 + u) (B + NP) + u |ln sum_v e^(y'_v) - y'_t|,
      [B = ce_lse_bound u el (sc_zmax u ea c ut et) LN NL 0] (the stream's own rounding on
      the capped logits, as in [ce_loss_posteriori]), [NP >= - ln (1 - Eb)].

    Covered: the capping of every raw logit ([_softcap]: the computed tanh a premise
    [th_err], the product [rnd (c * th r)]), the 3-product STREAM schedule's tile loop
    (any tiling, fp32 rounding with underflow), the final log and the rounded subtraction;
    any raw-logit errors [dr_v] (each logit its own, no common [delta]).
    Not covered: how [dr_v], [dz_v] and [Eb] are obtained (measured raw-logit errors and the
    float64 softmax of the exact capped logits, evaluated by
    ojas_ref/verification/linear_cross_entropy_error.py, not proved); the computed tanh itself
    (the premise [th_err], measured on the device); the two-level schedule; the gradients
    (no softcap a-posteriori theorem for dH / dW); bias, label smoothing, z-loss; FMA
    contraction of [c * th r]; overflow. *)

From Coq Require Import Reals List Lra.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision Attention.Float.OnlineSoftmaxError.
From Ojas Require Import FloatModel.Notations.
From Ojas Require Import LinearCrossEntropy.Float.LseLossError LinearCrossEntropy.Float.SoftcapError.
From Ojas Require Import LinearCrossEntropy.Float.LossPosteriori.
Import ListNotations.
Open Scope R_scope.

(** The bound of one pair's weighted term: the exact capped logit's weight [e^(c tanh (y / c))]
    times [e^(dz + dzt) - 1], [dz] the pair's capped-error bound, [dzt] the target's. *)
Definition sc_wbound (c dzt : R) (dz : R * R -> R) (ry : R * R) : R :=
  exp (c * tanh (snd ry / c)) * (exp (dz ry + dzt) - 1).

Lemma sc_rsum_map_le : forall {A} (f g : A -> R) (l : list A),
  (forall x, In x l -> f x <= g x) -> rsum (map f l) <= rsum (map g l).
Proof.
  intros A f g l; induction l as [| x l IH]; intros H; cbn [map]; rewrite ?rsum_nil, ?rsum_cons; [lra |].
  pose proof (H x (or_introl eq_refl)); pose proof (IH (fun y Hy => H y (or_intror Hy))); lra.
Qed.

Section SoftcapPost.

Variable M : MixedModel.

Import ModelNotations.

(** The cap and the kernel's computed tanh, as in LinearCrossEntropy/Float/SoftcapError.v. *)
Variable c : R.
Hypothesis c_pos : 0 < c.
Variable th : R -> R.
Variables ut et : R.
Hypothesis ut_nonneg : 0 <= ut.
Hypothesis et_nonneg : 0 <= et.
Hypothesis th_err : forall r, fmt r -> Rabs (th r - tanh (r / c)) <= ut * Rabs (tanh (r / c)) + et.

(** The kernel's [tl.exp] and [tl.log], as in LinearCrossEntropy/Float/LossPosteriori.v. *)
Variable ex : R -> R.
Variables ue ee : R.
Hypothesis ue_nonneg : 0 <= ue.
Hypothesis ee_nonneg : 0 <= ee.
Hypothesis ex_err : forall x, x <= 0 -> Rabs (ex x - exp x) <= ue * exp x + ee.
Variable lg : R -> R.
Variables el lmin lmax : R.
Hypothesis lg_fmt : forall x, fmt (lg x).
Hypothesis lg_err : forall x, fmt x -> lmin <= x <= lmax -> Rabs (lg x - ln x) <= el.

Local Notation scz := (sc_z M c th).
Local Notation scp := (sc_pair M c th).

(** One capped pair's weighted term: [|d_v| <= dz_v + dz_t] by [sc_logit_error] twice. *)
Lemma sc_wterm_le : forall (rt yt : R) (dr dz : R * R -> R) (ry : R * R),
  fmt (fst ry) -> Rabs (fst ry - snd ry) <= dr ry -> sc_delta u ea c ut et (dr ry) <= dz ry ->
  fmt rt -> Rabs (rt - yt) <= dr (rt, yt) -> sc_delta u ea c ut et (dr (rt, yt)) <= dz (rt, yt) ->
  ce_wterm (scz rt) (c * tanh (yt / c)) (scp ry) <= sc_wbound c (dz (rt, yt)) dz ry.
Proof.
  intros rt yt dr dz ry Fr Hr Hz Ft Ht Hzt.
  destruct (sc_logit_error M c c_pos th ut et ut_nonneg th_err (fst ry) (snd ry) (dr ry) Fr Hr) as [Ev _].
  destruct (sc_logit_error M c c_pos th ut et ut_nonneg th_err rt yt (dr (rt, yt)) Ft Ht) as [Et _].
  unfold ce_wterm, sc_wbound, sc_pair; cbn [fst snd].
  apply Rmult_le_compat_l; [left; apply exp_pos |].
  apply Rplus_le_compat_r, ose_exp_le.
  replace ((scz (fst ry) - scz rt) - (c * tanh (snd ry / c) - c * tanh (yt / c)))
    with ((scz (fst ry) - c * tanh (snd ry / c)) + - (scz rt - c * tanh (yt / c))) by ring.
  pose proof (Rabs_triang (scz (fst ry) - c * tanh (snd ry / c)) (- (scz rt - c * tanh (yt / c)))) as T.
  rewrite Rabs_Ropp in T; lra.
Qed.

(** The weighted sum of [ce_loss_posteriori] over the capped pairs: at most the [sc_wbound]
    sum less the target's own term (the target's [ce_wterm] is 0). *)
Lemma sc_wsum_le : forall (rys : list (R * R)) (rt yt : R) (dr dz : R * R -> R),
  In (rt, yt) rys ->
  (forall ry, In ry rys -> fmt (fst ry) /\ Rabs (fst ry - snd ry) <= dr ry) ->
  (forall ry, In ry rys -> sc_delta u ea c ut et (dr ry) <= dz ry) ->
  rsum (map (ce_wterm (scz rt) (c * tanh (yt / c))) (map scp rys))
  <= rsum (map (sc_wbound c (dz (rt, yt)) dz) rys) - sc_wbound c (dz (rt, yt)) dz (rt, yt).
Proof.
  intros rys rt yt dr dz Ht Hr Hz.
  destruct (Hr (rt, yt) Ht) as [Ft Et]; pose proof (Hz (rt, yt) Ht) as Zt; cbn [fst snd] in Ft, Et.
  assert (Hle : forall ry, In ry rys ->
            ce_wterm (scz rt) (c * tanh (yt / c)) (scp ry) <= sc_wbound c (dz (rt, yt)) dz ry).
  { intros ry Hi; destruct (Hr ry Hi) as [F E]; exact (sc_wterm_le rt yt dr dz ry F E (Hz ry Hi) Ft Et Zt). }
  assert (H0 : ce_wterm (scz rt) (c * tanh (yt / c)) (scp (rt, yt)) = 0).
  { unfold ce_wterm, sc_pair; cbn [fst snd].
    replace (scz rt - scz rt - (c * tanh (yt / c) - c * tanh (yt / c))) with 0 by ring.
    rewrite Rabs_R0, exp_0; ring. }
  destruct (in_split _ _ Ht) as [l1 [l2 E]].
  assert (H1 : forall ry, In ry l1 -> In ry rys) by (intros ry Hi; rewrite E; apply in_or_app; left; exact Hi).
  assert (H2 : forall ry, In ry l2 -> In ry rys) by (intros ry Hi; rewrite E; apply in_or_app; right; right; exact Hi).
  pose proof (sc_rsum_map_le _ _ l1 (fun ry Hi => Hle ry (H1 ry Hi))) as S1.
  pose proof (sc_rsum_map_le _ _ l2 (fun ry Hi => Hle ry (H2 ry Hi))) as S2.
  rewrite E, !map_app, !rsum_app; cbn [map]; rewrite !rsum_cons, H0.
  rewrite !map_map; lra.
Qed.

(** The kernel's soft-capped per-token loss [rnd (rnd (m + lg l) - z_t)], [(m, l)] the stream of
    the capped raw logits ([sc_pair]: [(sc_z r, c tanh (y / c))]), [z_t = sc_z r_t], against
    [ln sum_v e^(c tanh (y_v / c)) - c tanh (y_t / c)]: each raw logit [r] within [dr (r, y)] of
    its exact [y], each capped error bound [dz >= sc_delta (dr)], the weighted sum (less the
    target's term) at most [Eb sum_v e^(c tanh (y_v / c))]. *)
Theorem ce_loss_posteriori_softcap : forall (ry0 : R * R) (tiles : list (list (R * R))) ts (Dt Bt Tt Nn : nat)
    XK LN NL P1 QT AT rt yt (dr dz : R * R -> R) Eb NP,
  let Zmax := sc_zmax u ea c ut et in
  let st := ce_run M ex (R * R) fst (fun _ => 1) ts (scz (fst ry0), 0) (map (map scp) tiles) in
  let bL := ce_bL_p u ue ee ea XK P1 QT AT Bt Tt Nn in
  let rys := concat tiles in
  let S := rsum (map (fun ry => exp (c * tanh (snd ry / c))) rys) in
  let LSE := ln S in
  let YT := c * tanh (yt / c) in
  In ry0 rys -> In (rt, yt) rys -> sum_ok M ts Dt Bt ->
  Forall (fun tl => (length tl <= Bt)%nat) tiles -> (length tiles <= Tt)%nat -> (length rys <= Nn)%nat ->
  (forall ry, In ry rys -> fmt (fst ry) /\ Rabs (fst ry - snd ry) <= dr ry) ->
  (forall ry, In ry rys -> sc_delta u ea c ut et (dr ry) <= dz ry) ->
  exp (u * (2 * Zmax)) <= XK -> (1 + u) ^ Dt <= P1 -> ce_Q u ue ^ Tt <= QT -> ce_a u ue ee XK ^ Tt <= AT ->
  bL < 1 -> ln (INR Nn) <= LN -> - ln (1 - bL) <= NL -> lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  0 <= Eb < 1 ->
  rsum (map (sc_wbound c (dz (rt, yt)) dz) rys) - sc_wbound c (dz (rt, yt)) dz (rt, yt) <= Eb * S ->
  - ln (1 - Eb) <= NP ->
  Rabs (rnd (rnd (fst st + lg (snd st)) - scz rt) - (LSE - YT))
  <= ce_loss_post_bound u (ce_lse_bound u el Zmax LN NL 0) NP (Rabs (LSE - YT)).
Proof.
  intros ry0 tiles ts Dt Bt Tt Nn XK LN NL P1 QT AT rt yt dr dz Eb NP Zmax st bL rys S LSE YT
         H0 Ht Hts HB HT HN Hr Hz HXK HP HQ HA HbL HLN HNL Hlmin Hlmax HE HW HNP.
  assert (Ec : concat (map (map scp) tiles) = map scp rys) by (symmetry; apply concat_map).
  assert (ES : ce_sum_exp snd (concat (map (map scp) tiles)) = S)
    by (unfold ce_sum_exp, S; rewrite Ec, map_map; reflexivity).
  pose proof (ce_loss_posteriori M ex ue ee ue_nonneg ee_nonneg ex_err lg el lmin lmax lg_fmt lg_err
                (scp ry0) (map (map scp) tiles) ts Dt Bt Tt Nn Zmax XK LN NL P1 QT AT (scz rt) YT Eb NP) as H.
  cbv zeta in H; rewrite ES in H; fold LSE in H.
  apply H; clear H.
  - rewrite Ec; apply in_map, H0.
  - rewrite Ec; exact (in_map scp rys (rt, yt) Ht).
  - exact Hts.
  - apply sc_tiles_len, HB.
  - rewrite map_length; exact HT.
  - rewrite Ec, map_length; exact HN.
  - rewrite Ec; intros zy Hi; apply in_map_iff in Hi; destruct Hi as [ry [<- Hi]].
    destruct (Hr ry Hi) as [F E].
    destruct (sc_logit_error M c c_pos th ut et ut_nonneg th_err (fst ry) (snd ry) (dr ry) F E) as [_ Z].
    split; [apply ff_rnd_fmt | exact Z].
  - exact HXK.
  - exact HP.
  - exact HQ.
  - exact HA.
  - exact HbL.
  - exact HLN.
  - exact HNL.
  - exact Hlmin.
  - exact Hlmax.
  - exact HE.
  - rewrite Ec; eapply Rle_trans; [apply (sc_wsum_le rys rt yt dr dz Ht Hr Hz) | exact HW].
  - exact HNP.
Qed.

End SoftcapPost.
