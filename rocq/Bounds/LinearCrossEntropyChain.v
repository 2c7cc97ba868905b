(** * One computable bound for the linear cross-entropy's gradients with the streamed lse composed in.

    - [ce_grad_chain_q]: the streamed lse's bound [Dl] ([ce_lse_q] of
      Bounds/LinearCrossEntropy.v, checked [0 <= Dl <= 1]), then the coefficients
      [(cS, cT, cH, c0)] of [ce_grad_q] (Bounds/LinearCrossEntropyGrad.v) at the exponent's
      error [x = delta + Dl + u Am + ea], [Am = chain_Am = 2 Zmax + 3 delta + LN + Dl]
      (LinearCrossEntropy/Float/GradChainError.v): one function of the constants, the
      tiles' shape and the products' length.
    - [ce_grad_chain_q_sound_dw] (dW's token-chunk loop) and [ce_grad_chain_q_sound_dh]
      (dH's entry): whenever it answers [(cS, cT, cH, c0)], [cS S + cT T + cH Ha + c0] bounds
      the kernel's entry against the exact gradient, every item's lse the one streamed from
      its token's row ([row_lse]); premises on [tl.exp] (all reals), [tl.log] (numbers of the
      format in [[1/2, 2 e^LN]]), the tile sum ([sum_ok]), each kept item's row
      ([row_ok]: its logits numbers of the format, [|z| <= Zmax], [|z - y| <= delta], the
      tiles' shape) holding the item's own logit, the products' accumulation within
      [gamma u n] ([dsum_ok]), the epilogue and [alpha]; none on the lse's error
      ([ce_lse_q_sound] and [rows_ce_ok] discharge it). *)

From Coq Require Import Reals QArith Qreals Lra Lia ZArith List.
From Ojas Require Import FloatModel.DotError FloatModel.MixedPrecision.
From Ojas Require LinearCrossEntropy.Float.LseLossError LinearCrossEntropy.Float.GradError.
From Ojas Require Import LinearCrossEntropy.Float.GradChainError.
From Ojas Require Import Bounds.Rational Bounds.LinearCrossEntropy Bounds.LinearCrossEntropyGrad.

Local Open Scope Q_scope.

Definition chain_Am_q (Zmax delta LN Dl : Q) : Q := 2 * Zmax + 3 * delta + LN + Dl.

(** [Some (cS, cT, cH, c0)]: [ce_grad_q] at [x = delta + Dl + u Am + ea] with [Dl] the
    value of [ce_lse_q]; [None] when [ce_lse_q] or [ce_grad_q] answers [None] or [Dl] is
    outside [[0, 1]]. *)
Definition ce_grad_chain_q (u ea us es ue ee el Zmax delta LN a0 ua : Q) (Dt Bt Tt Nn n C : N)
  : option (Q * Q * Q * Q) :=
  match ce_lse_q u ue ee ea el Zmax delta LN Dt Bt Tt Nn with
  | Some Dl =>
    if Qle_bool 0 Dl && Qle_bool Dl 1 then
      ce_grad_q u ea us es ue ee a0 ua (delta + Dl + u * chain_Am_q Zmax delta LN Dl + ea) n C
    else None
  | None => None
  end.

Local Open Scope R_scope.

Section CeGradChainQ.

Variable M : MixedModel.
Variables u ea us es ue ee el Zmax delta LN a0 ua : Q.
Variables Dt Bt Tt Nn n C : N.
Hypothesis Hu : Q2R u = ff_u (mp_a M).
Hypothesis Hea : Q2R ea = ff_eta (mp_a M).
Hypothesis Hus : Q2R us = ff_u (mp_s M).
Hypothesis Hes : Q2R es = ff_eta (mp_s M).

(** What an answer gives: the lse's bound [Dl] in [[0, 1]], the coefficients of [ce_grad_q] at
    its [x], every kept item of a row within [Dl] of its exact lse and [ce_ok] at [delta],
    [Dl], [Am]. *)
Lemma ce_grad_chain_q_parts : forall cS cT cH c0,
  ce_grad_chain_q u ea us es ue ee el Zmax delta LN a0 ua Dt Bt Tt Nn n C = Some (cS, cT, cH, c0) ->
  forall (ex lg : R -> R),
  (forall y, Rabs (ex y - exp y) <= Q2R ue * exp y + Q2R ee) ->
  (forall x, ff_fmt (mp_a M) (lg x)) ->
  (forall x, ff_fmt (mp_a M) x -> / 2 <= x <= 2 * exp (Q2R LN) -> Rabs (lg x - ln x) <= Q2R el) ->
  forall ts (T : Type) (row : T -> (R * R) * list (list (R * R))) (iz iy : T -> R) (ik : T -> bool) (xs : list T),
  LseLossError.sum_ok M ts (N.to_nat Dt) (N.to_nat Bt) ->
  (forall x, In x xs -> ik x = true ->
     row_ok M (N.to_nat Bt) (N.to_nat Tt) (N.to_nat Nn) (Q2R Zmax) (Q2R delta) (row x)
     /\ In (iz x, iy x) (concat (snd (row x)))) ->
  exists Dl, ce_grad_q u ea us es ue ee a0 ua (delta + Dl + u * chain_Am_q Zmax delta LN Dl + ea) n C
             = Some (cS, cT, cH, c0)
  /\ 0 <= Q2R delta /\ 0 <= Q2R Dl /\ 0 <= chain_Am (Q2R Zmax) (Q2R delta) (Q2R LN) (Q2R Dl)
  /\ Q2R delta + Q2R Dl + ff_u (mp_a M) * chain_Am (Q2R Zmax) (Q2R delta) (Q2R LN) (Q2R Dl) + ff_eta (mp_a M)
     <= Q2R (delta + Dl + u * chain_Am_q Zmax delta LN Dl + ea)%Q
  /\ forall x, In x xs ->
     GradError.ce_ok T iz (fun x => row_lse M ex lg ts (row x)) iy (fun x => row_LSE (row x)) ik
       (Q2R delta) (Q2R Dl) (chain_Am (Q2R Zmax) (Q2R delta) (Q2R LN) (Q2R Dl)) x.
Proof.
  intros cS cT cH c0 Hb ex lg Hex Hlgf Hlg ts T row iz iy ik xs Hts Hrow.
  unfold ce_grad_chain_q in Hb.
  destruct (ce_lse_q u ue ee ea el Zmax delta LN Dt Bt Tt Nn) as [Dl |] eqn:EDl; [| discriminate].
  destruct (Qle_bool 0 Dl && Qle_bool Dl 1) eqn:E01; [| discriminate].
  apply andb_true_iff in E01; destruct E01 as [HD0 HD1].
  apply Qle_bool_R in HD0, HD1; rewrite Q2R_0 in HD0.
  assert (Eok : Bounds.LinearCrossEntropy.ce_ok u ue ee ea el Zmax delta LN Nn = true)
    by (unfold ce_lse_q in EDl; destruct (Bounds.LinearCrossEntropy.ce_ok u ue ee ea el Zmax delta LN Nn);
        [reflexivity | discriminate]).
  destruct (ce_ok_spec _ _ _ _ _ _ _ _ _ Eok) as [Hu0 [Hue0 [Hee0 [Hea0 [Hel0 [HZ0 [Hd0 [HNn HLN]]]]]]]].
  assert (HLN0 : 0 <= Q2R LN)
    by (eapply Rle_trans; [| exact HLN]; rewrite <- ln_1; apply Attention.Float.SavedLseError.afe_ln_le;
        [lra | apply (le_INR 1); exact HNn]).
  set (Am := chain_Am (Q2R Zmax) (Q2R delta) (Q2R LN) (Q2R Dl)).
  assert (HAm : 0 <= Am) by (unfold Am, chain_Am; lra).
  exists Dl; split; [exact Hb |].
  split; [exact Hd0 | split; [exact HD0 | split; [exact HAm | split]]].
  - right; unfold Am, chain_Am, chain_Am_q.
    repeat rewrite ?Q2R_plus, ?Q2R_mult; rewrite Hu, Hea.
    replace (Q2R 2) with 2 by (unfold Q2R; simpl; field); replace (Q2R 3) with 3 by (unfold Q2R; simpl; field).
    ring.
  - apply (rows_ce_ok M ex lg ts (N.to_nat Bt) (N.to_nat Tt) (N.to_nat Nn) (Q2R Zmax) (Q2R delta) (Q2R LN) (Q2R Dl)
             T row iz iy ik xs HLN Hrow).
    intros x Hx Ek.
    destruct (Hrow x Hx Ek) as [[H0 [HB [HT [HN Hz]]]] _].
    unfold row_lse, row_LSE, row_state.
    refine (ce_lse_q_sound M u ue ee ea el Zmax delta LN Dt Bt Tt Nn Hu Hea Dl EDl ex lg
              (fun y _ => Hex y) Hlgf _ (fst (row x)) (snd (row x)) ts H0 Hts HB HT HN Hz).
    intros y Fy [Hy1 Hy2]; apply Hlg; [exact Fy | split].
    + eapply Rle_trans; [| exact Hy1]; apply Rinv_le_contravar; lra.
    + eapply Rle_trans; [exact Hy2 |]; apply Rmult_le_compat_r; [left; apply exp_pos | lra].
Qed.

(** The answer bounds dW's entry after the token-chunk loop ([ce_dw_error]: [C] chunks, each an
    fp32 accumulation within [gamma u n]), every item's lse streamed from its token's row. *)
Theorem ce_grad_chain_q_sound_dw : forall cS cT cH c0,
  ce_grad_chain_q u ea us es ue ee el Zmax delta LN a0 ua Dt Bt Tt Nn n C = Some (cS, cT, cH, c0) ->
  forall (ex lg : R -> R),
  (forall y, Rabs (ex y - exp y) <= Q2R ue * exp y + Q2R ee) ->
  (forall x, ff_fmt (mp_a M) (lg x)) ->
  (forall x, ff_fmt (mp_a M) x -> / 2 <= x <= 2 * exp (Q2R LN) -> Rabs (lg x - ln x) <= Q2R el) ->
  forall ts (T : Type) (row : T -> (R * R) * list (list (R * R))) (iz iy ih : T -> R) (it ik : T -> bool)
    (dsum : list R -> R) (epi : R -> R -> R) (alpha : R) (cs : list (list T)),
  let il := fun x => row_lse M ex lg ts (row x) in
  let iL := fun x => row_LSE (row x) in
  LseLossError.sum_ok M ts (N.to_nat Dt) (N.to_nat Bt) ->
  (forall x, In x (concat cs) -> ik x = true ->
     row_ok M (N.to_nat Bt) (N.to_nat Tt) (N.to_nat Nn) (Q2R Zmax) (Q2R delta) (row x)
     /\ In (iz x, iy x) (concat (snd (row x)))) ->
  GradError.epi_ok M alpha epi -> Rabs (alpha - Q2R a0) <= Q2R ua * Rabs (Q2R a0) ->
  (forall c, In c cs -> GradError.dsum_ok M ex T iz il ih it ik dsum (gamma (ff_u (mp_a M)) (N.to_nat n)) c) ->
  length cs = N.to_nat C ->
  let xs := concat cs in
  Rabs (GradError.ce_run M ex T iz il ih it ik dsum epi cs
        - Q2R a0 * VectorFacts.rsum (map (GradError.ce_exact T iy iL ih it ik) xs))
  <= Q2R cS * GradError.ce_S T iy iL ih ik xs + Q2R cT * GradError.ce_T T iy iL ih it ik xs
     + Q2R cH * GradError.ce_Ha T ih ik xs + Q2R c0.
Proof.
  intros cS cT cH c0 Hb ex lg Hex Hlgf Hlg ts T row iz iy ih it ik dsum epi alpha cs il iL Hts Hrow Hepi Hal Hds HC xs.
  destruct (ce_grad_chain_q_parts cS cT cH c0 Hb ex lg Hex Hlgf Hlg ts T row iz iy ik (concat cs) Hts Hrow)
    as [Dl [Hq [Hd0 [HD0 [HAm [Hx Hok]]]]]].
  exact (ce_grad_q_sound_dw M u ea us es ue ee a0 ua _ n C Hu Hea Hus Hes cS cT cH c0 Hq ex Hex T iz il iy iL ih it ik
           dsum epi alpha _ _ _ cs Hepi Hal Hd0 HD0 HAm Hx Hds Hok HC).
Qed.

(** ... and dH's entry, one product over the vocabulary rounded once ([ce_dh_error], [C = 1]). *)
Theorem ce_grad_chain_q_sound_dh : forall cS cT cH c0,
  ce_grad_chain_q u ea us es ue ee el Zmax delta LN a0 ua Dt Bt Tt Nn n C = Some (cS, cT, cH, c0) ->
  forall (ex lg : R -> R),
  (forall y, Rabs (ex y - exp y) <= Q2R ue * exp y + Q2R ee) ->
  (forall x, ff_fmt (mp_a M) (lg x)) ->
  (forall x, ff_fmt (mp_a M) x -> / 2 <= x <= 2 * exp (Q2R LN) -> Rabs (lg x - ln x) <= Q2R el) ->
  forall ts (T : Type) (row : T -> (R * R) * list (list (R * R))) (iz iy ih : T -> R) (it ik : T -> bool)
    (dsum : list R -> R) (alpha : R) (xs : list T),
  let il := fun x => row_lse M ex lg ts (row x) in
  let iL := fun x => row_LSE (row x) in
  LseLossError.sum_ok M ts (N.to_nat Dt) (N.to_nat Bt) ->
  (forall x, In x xs -> ik x = true ->
     row_ok M (N.to_nat Bt) (N.to_nat Tt) (N.to_nat Nn) (Q2R Zmax) (Q2R delta) (row x)
     /\ In (iz x, iy x) (concat (snd (row x)))) ->
  Rabs (alpha - Q2R a0) <= Q2R ua * Rabs (Q2R a0) ->
  GradError.dsum_ok M ex T iz il ih it ik dsum (gamma (ff_u (mp_a M)) (N.to_nat n)) xs ->
  N.to_nat C = 1%nat ->
  Rabs (GradError.ce_dh M ex T iz il ih it ik dsum alpha xs
        - Q2R a0 * VectorFacts.rsum (map (GradError.ce_exact T iy iL ih it ik) xs))
  <= Q2R cS * GradError.ce_S T iy iL ih ik xs + Q2R cT * GradError.ce_T T iy iL ih it ik xs
     + Q2R cH * GradError.ce_Ha T ih ik xs + Q2R c0.
Proof.
  intros cS cT cH c0 Hb ex lg Hex Hlgf Hlg ts T row iz iy ih it ik dsum alpha xs il iL Hts Hrow Hal Hds HC.
  destruct (ce_grad_chain_q_parts cS cT cH c0 Hb ex lg Hex Hlgf Hlg ts T row iz iy ik xs Hts Hrow)
    as [Dl [Hq [Hd0 [HD0 [HAm [Hx Hok]]]]]].
  exact (ce_grad_q_sound_dh M u ea us es ue ee a0 ua _ n C Hu Hea Hus Hes cS cT cH c0 Hq ex Hex T iz il iy iL ih it ik
           dsum alpha _ _ _ xs Hal Hd0 HD0 HAm Hx Hds Hok HC).
Qed.

End CeGradChainQ.
