(** * One computable bound for the capped linear cross-entropy's gradients with the capped streamed lse composed in.

    - [sc_grad_chain_q]: the capped logits' error [dz = sc_delta dr] and bound
      [Zc = min sc_zmax (sc_zraw zr)] (LinearCrossEntropy/Float/SoftcapError.v's [sc_logit_error],
      the raw logits' bound [zr]: LinearCrossEntropy/Float/SoftcapGradChainError.v's [sc_zc]), the streamed
      lse's bound [Dl] over the capped logits ([ce_lse_q] of Bounds/LinearCrossEntropy.v at
      [Zc], [dz], checked [0 <= Dl <= 1]), the chain factor's error [Ec = sc_chain_bound dz],
      then the coefficients [(cS, cT, cH, cK, cC, c0)] of [sc_grad_q]
      (Bounds/LinearCrossEntropyGrad.v) at [x = dz + Dl + u Am + ea],
      [Am = chain_Am Zc dz LN Dl] (LinearCrossEntropy/Float/GradChainError.v) and [Ec]: one
      function of the constants, the cap, the tanh and division premises' constants, the raw
      logits' bound [zr] and error [dr], the tiles' shape and the products' length.
    - [sc_grad_chain_q_sound_dw] (dW's token-chunk loop) and [sc_grad_chain_q_sound_dh] (dH's
      entry): whenever it answers, [cS S + cT T0 + cH Ha + cK Sk + cC Tc + c0] bounds the
      kernel's capped entry against the exact capped gradient, every item's lse the one
      streamed from its token's capped row ([row_lse] of [sc_row]); premises on [tl.exp] (all
      reals), [tl.log] (numbers of the format in [[1/2, 2 e^LN]]), the computed tanh ([ut],
      [et]), the division [z / c] ([ud], [ed]), the chain factor ([sc_chain_ok]), the tile sum
      ([sum_ok]), each kept item's raw row ([sc_row_ok]: its raw logits numbers of the format
      with [|r| <= zr] within [dr] of the exact ones, the tiles' shape) holding the item's own
      raw logit, the
      products' accumulation within [gamma u n] ([ce_gen_dsum_ok]), the epilogue and [alpha];
      none on the lse's error ([ce_lse_q_sound] and [sc_rows_ok] discharge it). *)

From Coq Require Import Reals QArith Qreals Lra Lia ZArith List.
From Ojas Require Import FloatModel.DotError FloatModel.MixedPrecision.
From Ojas Require LinearCrossEntropy.Float.LseLossError LinearCrossEntropy.Float.GradError.
From Ojas Require Import LinearCrossEntropy.Float.SoftcapError LinearCrossEntropy.Float.SoftcapGradError.
From Ojas Require Import LinearCrossEntropy.Float.GradChainError LinearCrossEntropy.Float.SoftcapGradChainError.
From Ojas Require Import Bounds.Rational Bounds.LinearCrossEntropy Bounds.LinearCrossEntropyGrad.
From Ojas Require Import Bounds.LinearCrossEntropyChain.

Local Open Scope Q_scope.

(** [sc_delta], [sc_zmax] and [sc_chain_bound] of SoftcapError.v over the rationals. *)
Definition sc_delta_q (u ea c ut et dr : Q) : Q := dr + c * (ut + et) + u * (c * (1 + ut + et)) + ea.
Definition sc_zmax_q (u ea c ut et : Q) : Q := (1 + u) * (c * (1 + ut + et)) + ea.
Definition sc_zraw_q (u ea c ut et zr : Q) : Q := (1 + u) * (zr * (1 + ut) + c * et) + ea.
Definition sc_zc_q (u ea c ut et zr : Q) : Q :=
  let a := sc_zmax_q u ea c ut et in let b := sc_zraw_q u ea c ut et zr in if Qle_bool a b then a else b.
Definition sc_chain_bound_q (u ea c ud ed dz : Q) : Q :=
  let e := dz / c + ud * (1 + dz / c) + ed in
  let e2 := e * (2 + e) + u * ((1 + e) * (1 + e)) + ea in
  (1 + u) * e2 + u + ea.

(** [Some (cS, cT, cH, cK, cC, c0)]: [sc_grad_q] at [x = dz + Dl + u Am + ea] and
    [Ec = sc_chain_bound dz], [Dl] the value of [ce_lse_q] at the capped logits' [Zc], [dz];
    [None] when [c <= 0], [ut], [et], [ud], [ed], [zr] or [dr] is negative, [ce_lse_q] or [sc_grad_q]
    answers [None] or [Dl] is outside [[0, 1]]. *)
Definition sc_grad_chain_q (u ea us es ue ee el c ut et ud ed zr dr LN a0 ua : Q) (Dt Bt Tt Nn n C : N)
  : option (Q * Q * Q * Q * Q * Q) :=
  if negb (Qle_bool c 0) && Qle_bool 0 ut && Qle_bool 0 et && Qle_bool 0 ud && Qle_bool 0 ed && Qle_bool 0 zr
     && Qle_bool 0 dr then
    let dz := sc_delta_q u ea c ut et dr in
    let Zc := sc_zc_q u ea c ut et zr in
    match ce_lse_q u ue ee ea el Zc dz LN Dt Bt Tt Nn with
    | Some Dl =>
      if Qle_bool 0 Dl && Qle_bool Dl 1 then
        sc_grad_q u ea us es ue ee a0 ua (dz + Dl + u * chain_Am_q Zc dz LN Dl + ea)
          (sc_chain_bound_q u ea c ud ed dz) n C
      else None
    | None => None
    end
  else None.

Local Open Scope R_scope.

Lemma sc_delta_q_R : forall u ea c ut et dr,
  Q2R (sc_delta_q u ea c ut et dr) = sc_delta (Q2R u) (Q2R ea) (Q2R c) (Q2R ut) (Q2R et) (Q2R dr).
Proof.
  intros; unfold sc_delta_q, sc_delta; repeat rewrite ?Q2R_plus, ?Q2R_mult, ?Q2R_1; reflexivity.
Qed.

Lemma sc_zc_q_R : forall u ea c ut et zr,
  Q2R (sc_zc_q u ea c ut et zr) = sc_zc (Q2R u) (Q2R ea) (Q2R c) (Q2R ut) (Q2R et) (Q2R zr).
Proof.
  intros; unfold sc_zc_q, sc_zc; cbv zeta.
  assert (Ea : Q2R (sc_zmax_q u ea c ut et) = sc_zmax (Q2R u) (Q2R ea) (Q2R c) (Q2R ut) (Q2R et))
    by (unfold sc_zmax_q, sc_zmax; repeat rewrite ?Q2R_plus, ?Q2R_mult, ?Q2R_1; reflexivity).
  assert (Eb : Q2R (sc_zraw_q u ea c ut et zr) = sc_zraw (Q2R u) (Q2R ea) (Q2R c) (Q2R ut) (Q2R et) (Q2R zr))
    by (unfold sc_zraw_q, sc_zraw; repeat rewrite ?Q2R_plus, ?Q2R_mult, ?Q2R_1; reflexivity).
  destruct (Qle_bool (sc_zmax_q u ea c ut et) (sc_zraw_q u ea c ut et zr)) eqn:E.
  - apply Qle_bool_R in E; rewrite Ea, Eb in *; symmetry; apply Rmin_left, E.
  - assert (H : negb (Qle_bool (sc_zmax_q u ea c ut et) (sc_zraw_q u ea c ut et zr)) = true)
      by (rewrite E; reflexivity).
    apply negb_Qle_bool_R in H; rewrite Ea, Eb in *; symmetry; apply Rmin_right; lra.
Qed.

Lemma sc_chain_bound_q_R : forall u ea c ud ed dz, 0 < Q2R c ->
  Q2R (sc_chain_bound_q u ea c ud ed dz) = sc_chain_bound (Q2R u) (Q2R ea) (Q2R c) (Q2R ud) (Q2R ed) (Q2R dz).
Proof.
  intros u ea c ud ed dz Hc; unfold sc_chain_bound_q, sc_chain_bound; cbv zeta.
  assert (Hc0 : ~ (c == 0)%Q) by (apply Q2R_nonzero, Hc).
  repeat rewrite ?Q2R_plus, ?Q2R_mult, ?Q2R_1, ?(Q2R_div _ _ Hc0), ?Q2R_2; ring.
Qed.

Section ScGradChainQ.

Variable M : MixedModel.
Variables u ea us es ue ee el c ut et ud ed zr dr LN a0 ua : Q.
Variables Dt Bt Tt Nn n C : N.
Hypothesis Hu : Q2R u = ff_u (mp_a M).
Hypothesis Hea : Q2R ea = ff_eta (mp_a M).
Hypothesis Hus : Q2R us = ff_u (mp_s M).
Hypothesis Hes : Q2R es = ff_eta (mp_s M).

Local Notation dz := (sc_delta (ff_u (mp_a M)) (ff_eta (mp_a M)) (Q2R c) (Q2R ut) (Q2R et) (Q2R dr)).
Local Notation Zc := (sc_zc (ff_u (mp_a M)) (ff_eta (mp_a M)) (Q2R c) (Q2R ut) (Q2R et) (Q2R zr)).

(** What an answer gives: the cap and the premises' constants checked, the coefficients of
    [sc_grad_q] at its [x] and [Ec], every kept item of a row with its capped row's lse within
    [Dl] of its exact one and [sc_ok] at [dr], [Dl], [Am]. *)
Lemma sc_grad_chain_q_parts : forall cS cT cH cK cC c0,
  sc_grad_chain_q u ea us es ue ee el c ut et ud ed zr dr LN a0 ua Dt Bt Tt Nn n C = Some (cS, cT, cH, cK, cC, c0) ->
  forall (ex lg : R -> R),
  (forall y, Rabs (ex y - exp y) <= Q2R ue * exp y + Q2R ee) ->
  (forall x, ff_fmt (mp_a M) (lg x)) ->
  (forall x, ff_fmt (mp_a M) x -> / 2 <= x <= 2 * exp (Q2R LN) -> Rabs (lg x - ln x) <= Q2R el) ->
  forall (th : R -> R),
  (forall r, ff_fmt (mp_a M) r -> Rabs (th r - tanh (r / Q2R c)) <= Q2R ut * Rabs (tanh (r / Q2R c)) + Q2R et) ->
  forall ts (T : Type) (row : T -> (R * R) * list (list (R * R))) (ir iy : T -> R) (ik : T -> bool) (xs : list T),
  LseLossError.sum_ok M ts (N.to_nat Dt) (N.to_nat Bt) ->
  (forall x, In x xs -> ik x = true ->
     sc_row_ok M (N.to_nat Bt) (N.to_nat Tt) (N.to_nat Nn) (Q2R zr) (Q2R dr) (row x) /\ In (ir x, iy x) (concat (snd (row x)))) ->
  exists x Ec Dl, sc_grad_q u ea us es ue ee a0 ua x Ec n C = Some (cS, cT, cH, cK, cC, c0)
  /\ 0 < Q2R c /\ 0 <= Q2R ut /\ 0 <= Q2R ud /\ 0 <= Q2R ed
  /\ dz + Q2R Dl + ff_u (mp_a M) * chain_Am Zc dz (Q2R LN) (Q2R Dl) + ff_eta (mp_a M) <= Q2R x
  /\ sc_chain_bound (ff_u (mp_a M)) (ff_eta (mp_a M)) (Q2R c) (Q2R ud) (Q2R ed) dz <= Q2R Ec
  /\ forall x, In x xs ->
     sc_ok M (Q2R c) th T ir (fun x => row_lse M ex lg ts (sc_row M (Q2R c) th (row x))) iy
       (fun x => row_LSE (sc_row M (Q2R c) th (row x))) ik (Q2R dr) (Q2R Dl) (chain_Am Zc dz (Q2R LN) (Q2R Dl)) x.
Proof.
  intros cS cT cH cK cC c0 Hb ex lg Hex Hlgf Hlg th Hth ts T row ir iy ik xs Hts Hrow.
  unfold sc_grad_chain_q in Hb.
  destruct (negb (Qle_bool c 0) && Qle_bool 0 ut && Qle_bool 0 et && Qle_bool 0 ud && Qle_bool 0 ed
            && Qle_bool 0 zr && Qle_bool 0 dr) eqn:Eok; [| discriminate].
  repeat rewrite andb_true_iff in Eok.
  destruct Eok as [[[[[[Hc0 Hut0] Het0] Hud0] Hed0] Hzr0] Hdr0].
  apply negb_Qle_bool_R in Hc0; apply Qle_bool_R in Hut0, Het0, Hud0, Hed0, Hzr0, Hdr0; rewrite Q2R_0 in *.
  destruct (ce_lse_q u ue ee ea el (sc_zc_q u ea c ut et zr) (sc_delta_q u ea c ut et dr) LN Dt Bt Tt Nn)
    as [Dl |] eqn:EDl; [| discriminate].
  destruct (Qle_bool 0 Dl && Qle_bool Dl 1) eqn:E01; [| discriminate].
  apply andb_true_iff in E01; destruct E01 as [HD0 HD1].
  apply Qle_bool_R in HD0, HD1; rewrite Q2R_0, Q2R_1 in *.
  assert (Hdz : Q2R (sc_delta_q u ea c ut et dr) = dz) by (rewrite sc_delta_q_R, Hu, Hea; reflexivity).
  assert (HZc : Q2R (sc_zc_q u ea c ut et zr) = Zc) by (rewrite sc_zc_q_R, Hu, Hea; reflexivity).
  exists (sc_delta_q u ea c ut et dr + Dl + u * chain_Am_q (sc_zc_q u ea c ut et zr) (sc_delta_q u ea c ut et dr) LN Dl
          + ea)%Q.
  exists (sc_chain_bound_q u ea c ud ed (sc_delta_q u ea c ut et dr)), Dl.
  split; [exact Hb |].
  split; [exact Hc0 | split; [exact Hut0 | split; [exact Hud0 | split; [exact Hed0 | split; [| split]]]]].
  - right; unfold chain_Am, chain_Am_q.
    repeat rewrite ?Q2R_plus, ?Q2R_mult; rewrite Hdz, HZc, Hu, Hea.
    replace (Q2R 2) with 2 by (unfold Q2R; simpl; field); replace (Q2R 3) with 3 by (unfold Q2R; simpl; field).
    ring.
  - right; rewrite sc_chain_bound_q_R, Hdz, Hu, Hea by exact Hc0; reflexivity.
  - assert (HLN : ln (INR (N.to_nat Nn)) <= Q2R LN).
    { assert (Eok : Bounds.LinearCrossEntropy.ce_ok u ue ee ea el (sc_zc_q u ea c ut et zr)
                      (sc_delta_q u ea c ut et dr) LN Nn = true)
        by (unfold ce_lse_q in EDl;
            destruct (Bounds.LinearCrossEntropy.ce_ok u ue ee ea el (sc_zc_q u ea c ut et zr)
                        (sc_delta_q u ea c ut et dr) LN Nn); [reflexivity | discriminate]).
      destruct (ce_ok_spec _ _ _ _ _ _ _ _ _ Eok) as [_ [_ [_ [_ [_ [_ [_ [_ H]]]]]]]]; exact H. }
    apply (sc_rows_ok M ex lg (Q2R c) Hc0 th (Q2R ut) (Q2R et) Hut0 Hth ts (N.to_nat Bt) (N.to_nat Tt) (N.to_nat Nn)
             (Q2R zr) (Q2R dr)
             (Q2R LN) (Q2R Dl) T row ir iy ik xs HLN Hrow).
    intros x Hx Ek.
    destruct (Hrow x Hx Ek) as [Hr _].
    destruct (sc_row_capped M (Q2R c) Hc0 th (Q2R ut) (Q2R et) Hut0 Hth _ _ _ _ _ _ Hr) as [H0 [HB [HT [HN Hz]]]].
    unfold row_lse, row_LSE, row_state.
    refine (ce_lse_q_sound M u ue ee ea el _ _ LN Dt Bt Tt Nn Hu Hea Dl EDl ex lg
              (fun y _ => Hex y) Hlgf _ (fst (sc_row M (Q2R c) th (row x))) (snd (sc_row M (Q2R c) th (row x)))
              ts H0 Hts HB HT HN _).
    + intros y Fy [Hy1 Hy2]; apply Hlg; [exact Fy | split].
      * eapply Rle_trans; [| exact Hy1]; apply Rinv_le_contravar; lra.
      * eapply Rle_trans; [exact Hy2 |]; apply Rmult_le_compat_r; [left; apply exp_pos | lra].
    + rewrite Hdz, HZc; exact Hz.
Qed.

(** The answer bounds the capped dW's entry after the token-chunk loop ([sc_dw_error]: [C]
    chunks, each an fp32 accumulation within [gamma u n]), every item's lse streamed from its
    token's capped row. *)
Theorem sc_grad_chain_q_sound_dw : forall cS cT cH cK cC c0,
  sc_grad_chain_q u ea us es ue ee el c ut et ud ed zr dr LN a0 ua Dt Bt Tt Nn n C = Some (cS, cT, cH, cK, cC, c0) ->
  forall (ex lg : R -> R),
  (forall y, Rabs (ex y - exp y) <= Q2R ue * exp y + Q2R ee) ->
  (forall x, ff_fmt (mp_a M) (lg x)) ->
  (forall x, ff_fmt (mp_a M) x -> / 2 <= x <= 2 * exp (Q2R LN) -> Rabs (lg x - ln x) <= Q2R el) ->
  forall (th : R -> R),
  (forall r, ff_fmt (mp_a M) r -> Rabs (th r - tanh (r / Q2R c)) <= Q2R ut * Rabs (tanh (r / Q2R c)) + Q2R et) ->
  forall (dv : R -> R),
  (forall z, ff_fmt (mp_a M) z -> Rabs (dv z - z / Q2R c) <= Q2R ud * Rabs (z / Q2R c) + Q2R ed) ->
  forall cf : R -> R, (forall z, sc_chain_ok M dv z (cf z)) ->
  forall ts (T : Type) (row : T -> (R * R) * list (list (R * R))) (ir iy ih : T -> R) (it ik : T -> bool)
    (dsum : list R -> R) (epi : R -> R -> R) (alpha : R) (cs : list (list T)),
  let il := fun x => row_lse M ex lg ts (sc_row M (Q2R c) th (row x)) in
  let iL := fun x => row_LSE (sc_row M (Q2R c) th (row x)) in
  LseLossError.sum_ok M ts (N.to_nat Dt) (N.to_nat Bt) ->
  (forall x, In x (concat cs) -> ik x = true ->
     sc_row_ok M (N.to_nat Bt) (N.to_nat Tt) (N.to_nat Nn) (Q2R zr) (Q2R dr) (row x) /\ In (ir x, iy x) (concat (snd (row x)))) ->
  GradError.epi_ok M alpha epi -> Rabs (alpha - Q2R a0) <= Q2R ua * Rabs (Q2R a0) ->
  (forall ch, In ch cs -> GradError.ce_gen_dsum_ok T (sc_term M ex (Q2R c) th cf T ir il ih it ik) dsum
     (gamma (ff_u (mp_a M)) (N.to_nat n)) ch) ->
  length cs = N.to_nat C ->
  let xs := concat cs in
  Rabs (GradError.ce_gen_run M T (sc_term M ex (Q2R c) th cf T ir il ih it ik) dsum epi cs
        - Q2R a0 * VectorFacts.rsum (map (sc_exact (Q2R c) T iy iL ih it ik) xs))
  <= Q2R cS * GradError.ce_S T (sc_yc (Q2R c) T iy) iL ih ik xs
     + Q2R cT * GradError.ce_T T (sc_yc (Q2R c) T iy) iL ih it ik xs
     + Q2R cH * GradError.ce_Ha T ih ik xs
     + Q2R cK * sc_Sk (Q2R c) T iy iL ih ik xs
     + Q2R cC * sc_Tc (Q2R c) T iy iL ih it ik xs + Q2R c0.
Proof.
  intros cS cT cH cK cC c0 Hb ex lg Hex Hlgf Hlg th Hth dv Hdv cf Hcf ts T row ir iy ih it ik dsum epi alpha cs
    il iL Hts Hrow Hepi Hal Hds HC xs.
  destruct (sc_grad_chain_q_parts cS cT cH cK cC c0 Hb ex lg Hex Hlgf Hlg th Hth ts T row ir iy ik (concat cs)
              Hts Hrow) as [x [Ec [Dl [Hq [Hc [Hut [Hud [Hed [Hx [HEc Hok]]]]]]]]]].
  exact (sc_grad_q_sound_dw M u ea us es ue ee a0 ua x Ec n C Hu Hea Hus Hes cS cT cH cK cC c0 Hq ex Hex
           (Q2R c) Hc th (Q2R ut) (Q2R et) Hut Hth dv (Q2R ud) (Q2R ed) Hud Hed Hdv cf Hcf
           T ir il iy iL ih it ik dsum epi alpha (Q2R dr) (Q2R Dl) _ cs Hepi Hal Hx HEc Hds Hok HC).
Qed.

(** ... and the capped dH's entry, one product over the vocabulary rounded once ([sc_dh_error],
    [C = 1]). *)
Theorem sc_grad_chain_q_sound_dh : forall cS cT cH cK cC c0,
  sc_grad_chain_q u ea us es ue ee el c ut et ud ed zr dr LN a0 ua Dt Bt Tt Nn n C = Some (cS, cT, cH, cK, cC, c0) ->
  forall (ex lg : R -> R),
  (forall y, Rabs (ex y - exp y) <= Q2R ue * exp y + Q2R ee) ->
  (forall x, ff_fmt (mp_a M) (lg x)) ->
  (forall x, ff_fmt (mp_a M) x -> / 2 <= x <= 2 * exp (Q2R LN) -> Rabs (lg x - ln x) <= Q2R el) ->
  forall (th : R -> R),
  (forall r, ff_fmt (mp_a M) r -> Rabs (th r - tanh (r / Q2R c)) <= Q2R ut * Rabs (tanh (r / Q2R c)) + Q2R et) ->
  forall (dv : R -> R),
  (forall z, ff_fmt (mp_a M) z -> Rabs (dv z - z / Q2R c) <= Q2R ud * Rabs (z / Q2R c) + Q2R ed) ->
  forall cf : R -> R, (forall z, sc_chain_ok M dv z (cf z)) ->
  forall ts (T : Type) (row : T -> (R * R) * list (list (R * R))) (ir iy ih : T -> R) (it ik : T -> bool)
    (dsum : list R -> R) (alpha : R) (xs : list T),
  let il := fun x => row_lse M ex lg ts (sc_row M (Q2R c) th (row x)) in
  let iL := fun x => row_LSE (sc_row M (Q2R c) th (row x)) in
  LseLossError.sum_ok M ts (N.to_nat Dt) (N.to_nat Bt) ->
  (forall x, In x xs -> ik x = true ->
     sc_row_ok M (N.to_nat Bt) (N.to_nat Tt) (N.to_nat Nn) (Q2R zr) (Q2R dr) (row x) /\ In (ir x, iy x) (concat (snd (row x)))) ->
  Rabs (alpha - Q2R a0) <= Q2R ua * Rabs (Q2R a0) ->
  GradError.ce_gen_dsum_ok T (sc_term M ex (Q2R c) th cf T ir il ih it ik) dsum
    (gamma (ff_u (mp_a M)) (N.to_nat n)) xs ->
  N.to_nat C = 1%nat ->
  Rabs (GradError.ce_gen_dh M T (sc_term M ex (Q2R c) th cf T ir il ih it ik) dsum alpha xs
        - Q2R a0 * VectorFacts.rsum (map (sc_exact (Q2R c) T iy iL ih it ik) xs))
  <= Q2R cS * GradError.ce_S T (sc_yc (Q2R c) T iy) iL ih ik xs
     + Q2R cT * GradError.ce_T T (sc_yc (Q2R c) T iy) iL ih it ik xs
     + Q2R cH * GradError.ce_Ha T ih ik xs
     + Q2R cK * sc_Sk (Q2R c) T iy iL ih ik xs
     + Q2R cC * sc_Tc (Q2R c) T iy iL ih it ik xs + Q2R c0.
Proof.
  intros cS cT cH cK cC c0 Hb ex lg Hex Hlgf Hlg th Hth dv Hdv cf Hcf ts T row ir iy ih it ik dsum alpha xs
    il iL Hts Hrow Hal Hds HC.
  destruct (sc_grad_chain_q_parts cS cT cH cK cC c0 Hb ex lg Hex Hlgf Hlg th Hth ts T row ir iy ik xs Hts Hrow)
    as [x [Ec [Dl [Hq [Hc [Hut [Hud [Hed [Hx [HEc Hok]]]]]]]]]].
  exact (sc_grad_q_sound_dh M u ea us es ue ee a0 ua x Ec n C Hu Hea Hus Hes cS cT cH cK cC c0 Hq ex Hex
           (Q2R c) Hc th (Q2R ut) (Q2R et) Hut Hth dv (Q2R ud) (Q2R ed) Hud Hed Hdv cf Hcf
           T ir il iy iL ih it ik dsum alpha (Q2R dr) (Q2R Dl) _ xs Hal Hx HEc Hds Hok HC).
Qed.

End ScGradChainQ.
