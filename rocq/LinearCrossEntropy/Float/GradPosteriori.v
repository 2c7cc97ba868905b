(** * The chunked linear cross-entropy's gradients: a-posteriori bounds tight for confident tokens.

    The schedule is LinearCrossEntropy/Float/GradError.v's (kernels/ojas_kernels/linear_cross_entropy_three_products.py,
    [_three_products]: G = [rnd_s (tl.exp (rnd (z - lse)))], the target's minus 1
    in fp32 first; dH one product over the vocabulary, dW the token-chunk loop).
    [ce_dh_error] / [ce_dw_error] charge every entry of G with one exponent's
    error [delta + Dl + u Am + ea], where [Dl], the lse's error, itself contains
    the logits' error [delta].  For a confident token ([P_t -> 1]) the target's
    entry [P_t - 1] is tiny, but its bound stays about [(2 delta + B) P_t]: the
    target logit's own error, which cancels in [z_t - lse], is charged twice
    (the loss's case is LinearCrossEntropy/Float/LossPosteriori.v).  Here each entry has its
    own exponent's error [A]:

    - [ce_arg_posteriori]: for a row streamed by [_rows_kernel] (STREAM, then
      [lse = rnd (m + tl.log l)]) and any of its logits [(z_j, y_j)],
        |(z_j - lse) - (y_j - ln sum e^y)| <= B + NP_j,
        |z_j - lse| <= |y_j - ln sum e^y| + B + NP_j,
      [B] the stream's own error ([ce_lse_bound u el Zmax LN NL 0], as in
      [ce_loss_posteriori]), [NP_j >= - ln (1 - Eb_j)] where
      [sum_v e^(y_v) (e^|d_v| - 1) <= Eb_j sum_v e^(y_v)],
      [d_v = (z_v - z_j) - (y_v - y_j)] ([d_j = 0]; with [|z_v - y_v| <= delta]
      for all [v], [Eb_j = (1 - P_j) (e^(2 delta) - 1)] will do).  For the
      target of a confident token [Eb_j -> 0]: the entry's error goes to the
      stream's rounding [B], whatever [delta].
    - [ce_gp_term_close]: one term [g h] of dH's or dW's sum within
      [ce_gp_bd X] = [k P |h| + (Kg - 1) |G h| + cg |h|],
      [k = (1 + us) ((1 + u) (1 + ue) X - 1)], given [|(z - lse) - (y - L)| <= A],
      [|z - lse| <= Am], [e^(A + u Am + ea) <= X] for that item.  ([ce_bd]'s
      P coefficient is [Kg (1 + ue) X - 1 = k + us]: the store's rounding
      charged to [P]; here it is charged to [|G|] only, which matters for a
      confident target in bfloat16, [us = 2^-8] against [P_t - 1 -> 0].)
    - [ce_gp_dw_error] (dW's token-chunk loop) and [ce_gp_dh_error] (dH's
      product): within [ce_gen_bound gd a0 ua C Bp T] (LinearCrossEntropy/Float/GradError.v),
      [Bp = Sp + (Kg - 1) T + cg Ha] ([ce_gp_B_sum]), [Sp = sum k P |h|] with
      each item's [X], [T] and [Ha] as in [ce_dw_error].

    Covered: as [ce_dw_error] / [ce_dh_error] (the same premises on [tl.exp]
    and on the products' fp32 accumulation), and the lse the G entries read
    from the stream ([ce_arg_posteriori]). Not covered: how [Eb_j] and the
    exact probabilities are obtained (the caller's float64 evaluation in
    ojas_ref/verification/error_bounds.py, not proved); softcap, bias, label
    smoothing, z-loss, the 4-product schedule; overflow. *)

From Coq Require Import Reals List Lra.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision Attention.Float.OnlineSoftmaxError.
From Ojas Require Import FloatModel.Notations.
From Ojas Require Import LinearCrossEntropy.Float.LseLossError LinearCrossEntropy.Float.LossPosteriori.
From Ojas Require Import LinearCrossEntropy.Float.GradError.
Import ListNotations.
Open Scope R_scope.

Section GradPost.

Variable M : MixedModel.

Import ModelNotations.

(** The kernel's [tl.exp]: an assumption, as in LinearCrossEntropy/Float/GradError.v. *)
Variable ex : R -> R.
Variables ue ee : R.
Hypothesis ue_nonneg : 0 <= ue.
Hypothesis ee_nonneg : 0 <= ee.
Hypothesis ex_err : forall x, Rabs (ex x - exp x) <= ue * exp x + ee.

(** ** The exponent's error of one entry, from the stream *)

Variable lg : R -> R.
Variables el lmin lmax : R.
Hypothesis lg_fmt : forall x, fmt (lg x).
Hypothesis lg_err : forall x, fmt x -> lmin <= x <= lmax -> Rabs (lg x - ln x) <= el.

Local Notation run := (LseLossError.ce_run M ex (R * R) fst (fun _ => 1)).

Theorem ce_arg_posteriori : forall (zy0 : R * R) (tiles : list (list (R * R))) ts (Dt Bt Tt Nn : nat)
    Zmax XK LN NL P1 QT AT zj yj Eb NP,
  let st := run ts (fst zy0, 0) tiles in
  let bL := ce_bL_p u ue ee ea XK P1 QT AT Bt Tt Nn in
  let zs := concat tiles in
  let LSE := ln (ce_sum_exp snd zs) in
  let lse := rnd (fst st + lg (snd st)) in
  let B := ce_lse_bound u el Zmax LN NL 0 in
  In zy0 zs -> In (zj, yj) zs -> sum_ok M ts Dt Bt ->
  Forall (fun tl => (length tl <= Bt)%nat) tiles -> (length tiles <= Tt)%nat -> (length zs <= Nn)%nat ->
  (forall zy, In zy zs -> fmt (fst zy) /\ Rabs (fst zy) <= Zmax) ->
  exp (u * (2 * Zmax)) <= XK -> (1 + u) ^ Dt <= P1 -> LseLossError.ce_Q u ue ^ Tt <= QT -> ce_a u ue ee XK ^ Tt <= AT ->
  bL < 1 -> ln (INR Nn) <= LN -> - ln (1 - bL) <= NL -> lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  0 <= Eb < 1 -> rsum (map (ce_wterm zj yj) zs) <= Eb * ce_sum_exp snd zs -> - ln (1 - Eb) <= NP ->
  Rabs ((zj - lse) - (yj - LSE)) <= B + NP /\ Rabs (zj - lse) <= Rabs (yj - LSE) + (B + NP).
Proof.
  intros zy0 tiles ts Dt Bt Tt Nn Zmax XK LN NL P1 QT AT zj yj Eb NP st bL zs LSE lse B
         H0 Hj Hts HB HT HN Hz HXK HP HQ HA HbL HLN HNL Hlmin Hlmax HE HW HNP.
  pose proof (ce_stream_lse_close M ex ue ee ue_nonneg ee_nonneg (fun x _ => ex_err x) lg el lmin lmax lg_fmt lg_err
                zy0 tiles ts Dt Bt Tt Nn Zmax XK LN NL P1 QT AT H0 Hts HB HT HN Hz HXK HP HQ HA HbL HLN HNL Hlmin Hlmax)
    as Hl; fold st zs lse B in Hl.
  assert (Hne : zs <> []) by (intros E; rewrite E in H0; destruct H0).
  pose proof (ce_shift_lse_close zs zj yj Eb NP Hne HE HW HNP) as Hs; fold LSE in Hs.
  assert (H1 : Rabs ((zj - lse) - (yj - LSE)) <= B + NP).
  { replace ((zj - lse) - (yj - LSE))
      with (- (lse - ln (ce_sum_exp fst zs)) - ((ln (ce_sum_exp fst zs) - zj) - (LSE - yj))) by ring.
    eapply Rle_trans; [apply Rabs_triang |]; rewrite !Rabs_Ropp; lra. }
  split; [exact H1 |].
  replace (zj - lse) with (((zj - lse) - (yj - LSE)) + (yj - LSE)) by ring.
  eapply Rle_trans; [apply Rabs_triang | lra].
Qed.

(** ** The entries and the products, each entry with its own exponent's error *)

Section Items.

Variable T : Type.
Variables iz il iy iL ih : T -> R.
Variables it ik : T -> bool.

Local Notation term := (ce_term M ex T iz il ih it ik).
Local Notation exact := (ce_exact T iy iL ih it ik).
Local Notation Tg := (ce_T T iy iL ih it ik).
Local Notation Hk := (ce_Ha T ih ik).

(** A kept item's premises: its exponent's error [A], the bound [Am] of its
    argument, and [X >= e^(A + u Am + ea)]. *)
Definition ce_gp_ok (A Am X : T -> R) (x : T) : Prop :=
  ik x = true ->
  Rabs ((iz x - il x) - (iy x - iL x)) <= A x /\ Rabs (iz x - il x) <= Am x /\ exp (A x + u * Am x + ea) <= X x.

(** One term's bound: the entry's exponent error through [ce_gent_close], then
    the store [rs], whose relative error multiplies the entry itself ([us |G|]),
    not [P]: for a confident token's target ([P_t -> 1], [G_t -> 0]) the P term
    is [(1 + us) ((1 + u) Fe - 1)], without the [us] that [ce_bd]'s
    [Kg Fe - 1] carries. *)
Definition ce_gp_k (X : T -> R) (x : T) : R := (1 + us) * ((1 + u) * ((1 + ue) * X x) - 1).

Definition ce_gp_bd (X : T -> R) (x : T) : R :=
  ce_gp_k X x * (ce_P T iy iL ik x * Rabs (ih x)) + (ce_Kg M - 1) * Rabs (exact x)
  + ce_cg M ee * (if ik x then Rabs (ih x) else 0).

Definition ce_gp_S (X : T -> R) (xs : list T) : R :=
  rsum (map (fun x => ce_gp_k X x * (ce_P T iy iL ik x * Rabs (ih x))) xs).

(** [ce_gent_close] for the item moved to [y' = y - L + lse], [L' = lse]: the
    same [P = e^(y - L)], logit error [A], lse error 0. *)
Lemma ce_gp_term_close : forall A Am X x, ce_gp_ok A Am X x -> Rabs (term x - exact x) <= ce_gp_bd X x.
Proof.
  intros A Am X x Hok.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (ff_eta_nonneg A_) as Hea.
  pose proof (ff_u_nonneg S_) as Hus; pose proof (ff_eta_nonneg S_) as Hes.
  unfold ce_gp_bd, ce_gp_k, term, exact, ce_term, ce_exact, ce_g, ce_G, ce_P.
  destruct (ik x) eqn:Ek.
  2: { rewrite !Rmult_0_l, Rminus_0_r, !Rabs_R0, !Rmult_0_r; lra. }
  destruct (Hok Ek) as [H1 [H2 H3]].
  assert (HA : 0 <= A x) by (eapply Rle_trans; [apply Rabs_pos | exact H1]).
  assert (HAm : 0 <= Am x) by (eapply Rle_trans; [apply Rabs_pos | exact H2]).
  pose proof (ce_gent_close M ex ue ee ue_nonneg ee_nonneg ex_err (iz x) (il x) (iy x - iL x + il x) (il x)
                (A x) 0 (Am x) (X x) (it x)
                ltac:(replace (iz x - (iy x - iL x + il x)) with ((iz x - il x) - (iy x - iL x)) by ring; exact H1)
                ltac:(rewrite Rminus_diag_eq, Rabs_R0 by reflexivity; lra) H2
                ltac:(rewrite Rplus_0_r; exact H3)) as Hg.
  replace (iy x - iL x + il x - il x) with (iy x - iL x) in Hg by ring.
  set (g := ce_gent M ex (il x) (iz x) (it x)) in *.
  set (P := exp (iy x - iL x)) in *.
  set (G := P - (if it x then 1 else 0)) in *.
  assert (HP : 0 < P) by apply exp_pos.
  assert (HX1 : 1 <= X x).
  { eapply Rle_trans; [| exact H3]; rewrite <- exp_0; apply ose_exp_le.
    assert (0 <= u * Am x) by (apply Rmult_le_pos; lra); lra. }
  pose proof (ff_abs S_ g) as Hq.
  assert (Hga : Rabs g <= Rabs G + Rabs (g - G))
    by (replace g with (G + (g - G)) at 1 by ring; apply Rabs_triang).
  assert (Hs : Rabs (rs g - G)
               <= (1 + us) * ((1 + u) * ((1 + ue) * X x) - 1) * P + (ce_Kg M - 1) * Rabs G + ce_cg M ee).
  { replace (rs g - G) with ((rs g - g) + (g - G)) by ring.
    eapply Rle_trans; [apply Rabs_triang |].
    assert (us * Rabs g <= us * (Rabs G + Rabs (g - G))) by (apply Rmult_le_compat_l; lra).
    assert ((1 + us) * Rabs (g - G)
            <= (1 + us) * (((1 + u) * ((1 + ue) * X x) - 1) * P + u * Rabs G + ((1 + u) * ee + ea)))
      by (apply Rmult_le_compat_l; lra).
    unfold ce_Kg, ce_cg; nra. }
  replace (rs g * ih x - G * ih x) with ((rs g - G) * ih x) by ring.
  rewrite Rabs_mult, (Rabs_mult G).
  assert (Rabs (rs g - G) * Rabs (ih x)
          <= ((1 + us) * ((1 + u) * ((1 + ue) * X x) - 1) * P + (ce_Kg M - 1) * Rabs G + ce_cg M ee) * Rabs (ih x))
    by (apply Rmult_le_compat_r; [apply Rabs_pos | exact Hs]).
  nra.
Qed.

Lemma ce_gp_B_sum : forall X xs, ce_gen_B T (ce_gp_bd X) xs = ce_gp_S X xs + (ce_Kg M - 1) * Tg xs + ce_cg M ee * Hk xs.
Proof.
  intros; unfold ce_gen_B, ce_gp_bd, ce_gp_S, ce_T, ce_Ha; rewrite !rsum_map_plus, !rsum_map_scal_l; reflexivity.
Qed.

(** dW's token-chunk loop ([ce_run] of LinearCrossEntropy/Float/GradError.v). *)
Theorem ce_gp_dw_error : forall dsum epi alpha a0 ua gd A Am X cs,
  epi_ok M alpha epi -> 0 <= ua -> Rabs (alpha - a0) <= ua * Rabs a0 -> 0 <= gd ->
  (forall c, In c cs -> dsum_ok M ex T iz il ih it ik dsum gd c) ->
  (forall x, In x (concat cs) -> ce_gp_ok A Am X x) ->
  let xs := concat cs in
  Rabs (GradError.ce_run M ex T iz il ih it ik dsum epi cs - a0 * rsum (map exact xs))
  <= ce_gen_bound M gd a0 ua (length cs) (ce_gp_S X xs + (ce_Kg M - 1) * Tg xs + ce_cg M ee * Hk xs) (Tg xs).
Proof.
  intros dsum epi alpha a0 ua gd A Am X cs Hepi Hua Hal Hgd Hds Hok xs.
  rewrite <- ce_gp_B_sum.
  exact (ce_gen_dw_error M T term exact (ce_gp_bd X) dsum epi alpha a0 ua gd cs Hepi Hua Hal Hgd Hds
           (fun x Hx => ce_gp_term_close A Am X x (Hok x Hx))).
Qed.

(** dH's entry: one product over the token's vocabulary rows, rounded once. *)
Theorem ce_gp_dh_error : forall dsum alpha a0 ua gd A Am X xs,
  0 <= ua -> Rabs (alpha - a0) <= ua * Rabs a0 -> 0 <= gd ->
  dsum_ok M ex T iz il ih it ik dsum gd xs ->
  (forall x, In x xs -> ce_gp_ok A Am X x) ->
  Rabs (ce_dh M ex T iz il ih it ik dsum alpha xs - a0 * rsum (map exact xs))
  <= ce_gen_bound M gd a0 ua 1 (ce_gp_S X xs + (ce_Kg M - 1) * Tg xs + ce_cg M ee * Hk xs) (Tg xs).
Proof.
  intros dsum alpha a0 ua gd A Am X xs Hua Hal Hgd Hds Hok.
  rewrite <- ce_gp_B_sum.
  exact (ce_gen_dh_error M T term exact (ce_gp_bd X) dsum alpha a0 ua gd xs Hua Hal Hgd Hds
           (fun x Hx => ce_gp_term_close A Am X x (Hok x Hx))).
Qed.

End Items.

End GradPost.
