(** * Computable bounds of the linear cross-entropy's gradients (plain, a-posteriori, capped).

    - [ce_grad_q]: the coefficients of [ce_dw_bound] of
      [LinearCrossEntropy.Float.GradError] (the gradients' a-posteriori bound is
      linear in the sums [S], [T], [Ha]: [ce_grad_q_spec]) at [gd = gamma u n]
      and [X = 1 + perturbation_q (x / 2)], each rounded up;
      [ce_grad_q_sound_dw] (dW's token-chunk loop, [ce_dw_error]) and
      [ce_grad_q_sound_dh] (dH, [ce_dh_error]);
    - [ce_gp_q]: the coefficients of [ce_gen_bound gd a0 ua C (Sp + (Kg - 1) T + cg Ha) T],
      the gradients' a-posteriori bound with each entry's own exponent's error
      ([LinearCrossEntropy.Float.GradPosteriori]: linear in [Sp], [T], [Ha]: [ce_gp_q_spec]),
      at [gd = gamma u n], each rounded up; [ce_gp_q_sound_dw] (dW's token-chunk loop,
      [ce_gp_dw_error]) and [ce_gp_q_sound_dh] (dH, [ce_gp_dh_error]);
    - [sc_grad_q]: the coefficients of [ce_gen_bound gd a0 ua C (sc_E1 ee Fe Ec Sk Tc S T0 Ha) Tc],
      the capped gradients' bound ([LinearCrossEntropy.Float.SoftcapGradError]: linear in
      [S], [T0], [Ha], [Sk], [Tc]: [sc_grad_q_spec], for any chain factor's error [<= Ec],
      [ce_gen_bound_mono]), at [gd = gamma u n] and [Fe = (1 + ue) X],
      [X = 1 + perturbation_q (x / 2)], [Ec] an input, each rounded up; [sc_grad_q_sound_dw]
      (dW's token-chunk loop, [sc_dw_error]) and [sc_grad_q_sound_dh] (dH, [sc_dh_error]),
      with [sc_delta dr + Dl + u Am + ea <= x] and [sc_chain_bound (sc_delta dr) <= Ec]. *)

From Coq Require Import Reals QArith Qreals Lra Lia ZArith List.
From Ojas Require Import FloatModel.DotError FloatModel.MixedPrecision Attention.Float.OnlineSoftmaxTile.
From Ojas Require LinearCrossEntropy.Float.GradError LinearCrossEntropy.Float.GradPosteriori.
From Ojas Require LinearCrossEntropy.Float.SoftcapError LinearCrossEntropy.Float.SoftcapGradError.
From Ojas Require Import Bounds.Rational Bounds.Sums Bounds.Softmax.

Local Open Scope Q_scope.
Local Open Scope R_scope.

(** ** The linear cross-entropy's gradients: the coefficients of [ce_dw_bound] *)

Local Open Scope Q_scope.

Fixpoint qpow (x : Q) (n : nat) : Q := match n with O => 1 | S k => x * qpow x k end.

(** [ce_dw_bound gd ((1 + ue) X) a0 ua C S T H] of LinearCrossEntropy/Float/GradError.v is
    [cS S + cT T + cH H + c0] with these coefficients ([a0 >= 0]). *)
Definition ce_grad_coefs_q (u ea us es ue ee a0 ua gd X : Q) (C : nat) : Q * Q * Q * Q :=
  let kg := (1 + us) * (1 + u) in
  let w := ua + u * (1 + ua) in
  let kc := qpow kg C in
  (kc * a0 * (1 + w) * (1 + gd) * (kg * ((1 + ue) * X) - 1),
   kc * a0 * (w + (1 + w) * ((1 + gd) * (kg - 1) + gd)) + (kc - 1) * a0,
   kc * a0 * (1 + w) * (1 + gd) * ((1 + us) * ((1 + u) * ee + ea) + es),
   Q_of_N (N.of_nat C) * kc * (ea + es)).

(** [Some (cS, cT, cH, c0)], each rounded up, at [gd = gamma u n] and
    [X = 1 + perturbation_q (x / 2) >= e^x], or [None] when a check fails
    ([n u < 1], the constants [>= 0]). *)
Definition ce_grad_q (u ea us es ue ee a0 ua x : Q) (n C : N) : option (Q * Q * Q * Q) :=
  if Qle_bool 0 u && Qle_bool 0 ea && Qle_bool 0 us && Qle_bool 0 es && Qle_bool 0 ue && Qle_bool 0 ee
     && Qle_bool 0 a0 && Qle_bool 0 ua && negb (Qle_bool 1 (Q_of_N n * u)) then
    match perturbation_q (x / 2) with
    | Some e =>
      let '(cS, cT, cH, c0) := ce_grad_coefs_q u ea us es ue ee a0 ua (gamma_q u n) (1 + e) (N.to_nat C) in
      Some (round_up prec cS, round_up prec cT, round_up prec cH, round_up prec c0)
    | None => None
    end
  else None.

Local Open Scope R_scope.

Lemma Q2R_qpow : forall x n, Q2R (qpow x n) = Q2R x ^ n.
Proof. intros x n; induction n as [| n IH]; simpl; [apply Q2R_1 | rewrite Q2R_mult, IH; reflexivity]. Qed.

Section CeGradQ.

Variable M : MixedModel.
Variables u ea us es ue ee a0 ua x : Q.
Variables n C : N.
Hypothesis Hu : Q2R u = ff_u (mp_a M).
Hypothesis Hea : Q2R ea = ff_eta (mp_a M).
Hypothesis Hus : Q2R us = ff_u (mp_s M).
Hypothesis Hes : Q2R es = ff_eta (mp_s M).

(** What the coefficients bound: [gd] the accumulation's [gamma u n], [X >= e^x]. *)
Lemma ce_grad_q_spec : forall cS cT cH c0, ce_grad_q u ea us es ue ee a0 ua x n C = Some (cS, cT, cH, c0) ->
  0 <= Q2R ue /\ 0 <= Q2R ee /\ 0 <= Q2R a0 /\ 0 <= Q2R ua /\ INR (N.to_nat n) * ff_u (mp_a M) < 1 /\
  exists X, exp (Q2R x) <= X /\
  forall Sx Tx Hx, 0 <= Sx -> 0 <= Tx -> 0 <= Hx ->
    GradError.ce_dw_bound M (Q2R ee) (gamma (ff_u (mp_a M)) (N.to_nat n)) ((1 + Q2R ue) * X) (Q2R a0)
      (Q2R ua) (N.to_nat C) Sx Tx Hx
    <= Q2R cS * Sx + Q2R cT * Tx + Q2R cH * Hx + Q2R c0.
Proof.
  intros cS cT cH c0 Hb; unfold ce_grad_q in Hb.
  destruct (Qle_bool 0 u && Qle_bool 0 ea && Qle_bool 0 us && Qle_bool 0 es && Qle_bool 0 ue && Qle_bool 0 ee
            && Qle_bool 0 a0 && Qle_bool 0 ua && negb (Qle_bool 1 (Q_of_N n * u))) eqn:Eok; [| discriminate].
  repeat rewrite andb_true_iff in Eok.
  destruct Eok as [[[[[[[[Hu0 Hea0] Hus0] Hes0] Hue0] Hee0] Ha0] Hua0] Hn].
  apply Qle_bool_R in Hu0, Hea0, Hus0, Hes0, Hue0, Hee0, Ha0, Hua0; rewrite Q2R_0 in *.
  apply negb_Qle_bool_R in Hn; rewrite Q2R_mult, Q2R_of_N, Q2R_1 in Hn.
  assert (Hn' : (Q_of_N n * u < 1)%Q) by (apply Rlt_Qlt; rewrite Q2R_mult, Q2R_of_N, Q2R_1; exact Hn).
  destruct (perturbation_q (x / 2)) as [e |] eqn:Ee; [| discriminate].
  injection Hb as <- <- <- <-.
  pose proof (perturbation_q_ge _ _ Ee) as HX.
  replace (2 * Q2R (x / 2)%Q) with (Q2R x) in HX
    by (rewrite Q2R_div, Q2R_2 by (apply Q2R_nonzero; rewrite Q2R_2; lra); field).
  rewrite Hu in Hn.
  split; [exact Hue0 | split; [exact Hee0 | split; [exact Ha0 | split; [exact Hua0 | split; [exact Hn |]]]]].
  exists (Q2R (1 + e)); split; [rewrite Q2R_plus, Q2R_1; lra |].
  intros Sx Tx Hx HS HT HH.
  match goal with |- _ <= Q2R (round_up prec ?a) * _ + Q2R (round_up prec ?b) * _ + Q2R (round_up prec ?c) * _
                         + Q2R (round_up prec ?d) =>
    set (qa := a); set (qb := b); set (qc := c); set (qd := d) end.
  pose proof (Qle_R _ _ (round_up_ge prec qa)); pose proof (Qle_R _ _ (round_up_ge prec qb)).
  pose proof (Qle_R _ _ (round_up_ge prec qc)); pose proof (Qle_R _ _ (round_up_ge prec qd)).
  apply Rle_trans with (Q2R qa * Sx + Q2R qb * Tx + Q2R qc * Hx + Q2R qd).
  - right; unfold qa, qb, qc, qd, GradError.ce_dw_bound, GradError.ce_Q,
      GradError.ce_E2, GradError.ce_E1, GradError.ce_w,
      GradError.ce_Kg, GradError.ce_cg.
    repeat rewrite ?Q2R_plus, ?Q2R_minus, ?Q2R_mult, ?Q2R_1, ?Q2R_qpow, ?Q2R_of_N.
    rewrite gamma_q_correct, Nnat.Nat2N.id, Rabs_pos_eq by (exact Hn' || exact Ha0).
    rewrite Hu, Hea, Hus, Hes; ring.
  - assert (Q2R qa * Sx <= Q2R (round_up prec qa) * Sx) by (apply Rmult_le_compat_r; lra).
    assert (Q2R qb * Tx <= Q2R (round_up prec qb) * Tx) by (apply Rmult_le_compat_r; lra).
    assert (Q2R qc * Hx <= Q2R (round_up prec qc) * Hx) by (apply Rmult_le_compat_r; lra).
    lra.
Qed.

Lemma ce_grad_gamma_nonneg : INR (N.to_nat n) * ff_u (mp_a M) < 1 -> 0 <= gamma (ff_u (mp_a M)) (N.to_nat n).
Proof.
  intros H; unfold gamma, Rdiv; pose proof (ff_u_nonneg (mp_a M)).
  apply Rmult_le_pos; [apply Rmult_le_pos; [apply pos_INR | lra] | left; apply Rinv_0_lt_compat; lra].
Qed.

Lemma ce_grad_exp_le : forall a X, a <= Q2R x -> exp (Q2R x) <= X -> exp a <= X.
Proof.
  intros a X Ha HX; eapply Rle_trans; [| exact HX].
  destruct Ha as [Ha | ->]; [left; apply exp_increasing, Ha | lra].
Qed.

(** The oracle's coefficients bound dW's entry after the token-chunk loop
    ([ce_dw_error]: [C] chunks, each an fp32 accumulation within [gamma u n]) ... *)
Theorem ce_grad_q_sound_dw : forall cS cT cH c0, ce_grad_q u ea us es ue ee a0 ua x n C = Some (cS, cT, cH, c0) ->
  forall ex, (forall y, Rabs (ex y - exp y) <= Q2R ue * exp y + Q2R ee) ->
  forall (T : Type) (iz il iy iL ih : T -> R) (it ik : T -> bool) (dsum : list R -> R) (epi : R -> R -> R)
    (alpha delta Dl Am : R) (cs : list (list T)),
  GradError.epi_ok M alpha epi -> Rabs (alpha - Q2R a0) <= Q2R ua * Rabs (Q2R a0) ->
  0 <= delta -> 0 <= Dl -> 0 <= Am -> delta + Dl + ff_u (mp_a M) * Am + ff_eta (mp_a M) <= Q2R x ->
  (forall c, In c cs -> GradError.dsum_ok M ex T iz il ih it ik dsum (gamma (ff_u (mp_a M)) (N.to_nat n)) c) ->
  (forall y, In y (concat cs) -> GradError.ce_ok T iz il iy iL ik delta Dl Am y) ->
  length cs = N.to_nat C ->
  let xs := concat cs in
  Rabs (GradError.ce_run M ex T iz il ih it ik dsum epi cs
        - Q2R a0 * VectorFacts.rsum (map (GradError.ce_exact T iy iL ih it ik) xs))
  <= Q2R cS * GradError.ce_S T iy iL ih ik xs + Q2R cT * GradError.ce_T T iy iL ih it ik xs
     + Q2R cH * GradError.ce_Ha T ih ik xs + Q2R c0.
Proof.
  intros cS cT cH c0 Hb ex Hex T iz il iy iL ih it ik dsum epi alpha delta Dl Am cs Hepi Hal Hd Hl Ham Hx Hds Hok HC xs.
  destruct (ce_grad_q_spec cS cT cH c0 Hb) as [Hue0 [Hee0 [Ha0 [Hua0 [Hn [X [HX Hle]]]]]]].
  destruct (GradError.ce_sums_nonneg T iy iL ih it ik xs) as [HS [HT HH]].
  eapply Rle_trans; [| apply Hle; assumption].
  rewrite <- HC.
  apply (GradError.ce_dw_error M ex (Q2R ue) (Q2R ee) Hue0 Hee0 Hex T iz il iy iL ih it ik dsum epi alpha
           (Q2R a0) (Q2R ua) _ delta Dl Am X cs Hepi Hua0 Hal (ce_grad_gamma_nonneg Hn) Hd Hl Ham
           (ce_grad_exp_le _ X Hx HX) Hds Hok).
Qed.

(** ... and dH's entry, one product rounded once ([ce_dh_error], [C = 1]). *)
Theorem ce_grad_q_sound_dh : forall cS cT cH c0, ce_grad_q u ea us es ue ee a0 ua x n C = Some (cS, cT, cH, c0) ->
  forall ex, (forall y, Rabs (ex y - exp y) <= Q2R ue * exp y + Q2R ee) ->
  forall (T : Type) (iz il iy iL ih : T -> R) (it ik : T -> bool) (dsum : list R -> R)
    (alpha delta Dl Am : R) (xs : list T),
  Rabs (alpha - Q2R a0) <= Q2R ua * Rabs (Q2R a0) ->
  0 <= delta -> 0 <= Dl -> 0 <= Am -> delta + Dl + ff_u (mp_a M) * Am + ff_eta (mp_a M) <= Q2R x ->
  GradError.dsum_ok M ex T iz il ih it ik dsum (gamma (ff_u (mp_a M)) (N.to_nat n)) xs ->
  (forall y, In y xs -> GradError.ce_ok T iz il iy iL ik delta Dl Am y) ->
  N.to_nat C = 1%nat ->
  Rabs (GradError.ce_dh M ex T iz il ih it ik dsum alpha xs
        - Q2R a0 * VectorFacts.rsum (map (GradError.ce_exact T iy iL ih it ik) xs))
  <= Q2R cS * GradError.ce_S T iy iL ih ik xs + Q2R cT * GradError.ce_T T iy iL ih it ik xs
     + Q2R cH * GradError.ce_Ha T ih ik xs + Q2R c0.
Proof.
  intros cS cT cH c0 Hb ex Hex T iz il iy iL ih it ik dsum alpha delta Dl Am xs Hal Hd Hl Ham Hx Hds Hok HC.
  destruct (ce_grad_q_spec cS cT cH c0 Hb) as [Hue0 [Hee0 [Ha0 [Hua0 [Hn [X [HX Hle]]]]]]].
  destruct (GradError.ce_sums_nonneg T iy iL ih it ik xs) as [HS [HT HH]].
  eapply Rle_trans; [| apply Hle; assumption].
  rewrite HC.
  apply (GradError.ce_dh_error M ex (Q2R ue) (Q2R ee) Hue0 Hee0 Hex T iz il iy iL ih it ik dsum alpha
           (Q2R a0) (Q2R ua) _ delta Dl Am X xs Hua0 Hal (ce_grad_gamma_nonneg Hn) Hd Hl Ham
           (ce_grad_exp_le _ X Hx HX) Hds Hok).
Qed.

End CeGradQ.



(** ** The gradients' a-posteriori bound: the coefficients of [ce_gen_bound] at [Sp + (Kg - 1) T + cg Ha] *)

Local Open Scope Q_scope.

(** [ce_gen_bound gd a0 ua C (Sp + (Kg - 1) T + cg Ha) T] of LinearCrossEntropy/Float/GradError.v (the bound of
    [ce_gp_dw_error] / [ce_gp_dh_error], LinearCrossEntropy/Float/GradPosteriori.v) is
    [cS Sp + cT T + cH Ha + c0] with these coefficients ([a0 >= 0]). *)
Definition ce_gp_coefs_q (u ea us es ee a0 ua gd : Q) (C : nat) : Q * Q * Q * Q :=
  let kg := (1 + us) * (1 + u) in
  let w := ua + u * (1 + ua) in
  let kc := qpow kg C in
  let cB := kc * a0 * (1 + w) * (1 + gd) in
  (cB,
   cB * (kg - 1) + (kc * a0 * ((1 + w) * gd + w) + (kc - 1) * a0),
   cB * ((1 + us) * ((1 + u) * ee + ea) + es),
   Q_of_N (N.of_nat C) * kc * (ea + es)).

(** [Some (cS, cT, cH, c0)], each rounded up, at [gd = gamma u n], or [None] when a check
    fails ([n u < 1], the constants [>= 0]). *)
Definition ce_gp_q (u ea us es ee a0 ua : Q) (n C : N) : option (Q * Q * Q * Q) :=
  if Qle_bool 0 u && Qle_bool 0 ea && Qle_bool 0 us && Qle_bool 0 es && Qle_bool 0 ee
     && Qle_bool 0 a0 && Qle_bool 0 ua && negb (Qle_bool 1 (Q_of_N n * u)) then
    let '(cS, cT, cH, c0) := ce_gp_coefs_q u ea us es ee a0 ua (gamma_q u n) (N.to_nat C) in
    Some (round_up prec cS, round_up prec cT, round_up prec cH, round_up prec c0)
  else None.

Local Open Scope R_scope.

Section CeGpQ.

Variable M : MixedModel.
Variables u ea us es ee a0 ua : Q.
Variables n C : N.
Hypothesis Hu : Q2R u = ff_u (mp_a M).
Hypothesis Hea : Q2R ea = ff_eta (mp_a M).
Hypothesis Hus : Q2R us = ff_u (mp_s M).
Hypothesis Hes : Q2R es = ff_eta (mp_s M).

(** What the coefficients bound: [gd] the accumulation's [gamma u n]. *)
Lemma ce_gp_q_spec : forall cS cT cH c0, ce_gp_q u ea us es ee a0 ua n C = Some (cS, cT, cH, c0) ->
  0 <= Q2R ee /\ 0 <= Q2R a0 /\ 0 <= Q2R ua /\ INR (N.to_nat n) * ff_u (mp_a M) < 1 /\
  forall Sx Tx Hx, 0 <= Sx -> 0 <= Tx -> 0 <= Hx ->
    GradError.ce_gen_bound M (gamma (ff_u (mp_a M)) (N.to_nat n)) (Q2R a0) (Q2R ua) (N.to_nat C)
      (Sx + (GradError.ce_Kg M - 1) * Tx + GradError.ce_cg M (Q2R ee) * Hx) Tx
    <= Q2R cS * Sx + Q2R cT * Tx + Q2R cH * Hx + Q2R c0.
Proof.
  intros cS cT cH c0 Hb; unfold ce_gp_q in Hb.
  destruct (Qle_bool 0 u && Qle_bool 0 ea && Qle_bool 0 us && Qle_bool 0 es && Qle_bool 0 ee
            && Qle_bool 0 a0 && Qle_bool 0 ua && negb (Qle_bool 1 (Q_of_N n * u))) eqn:Eok; [| discriminate].
  repeat rewrite andb_true_iff in Eok.
  destruct Eok as [[[[[[[Hu0 Hea0] Hus0] Hes0] Hee0] Ha0] Hua0] Hn].
  apply Qle_bool_R in Hu0, Hea0, Hus0, Hes0, Hee0, Ha0, Hua0; rewrite Q2R_0 in *.
  apply negb_Qle_bool_R in Hn; rewrite Q2R_mult, Q2R_of_N, Q2R_1 in Hn.
  assert (Hn' : (Q_of_N n * u < 1)%Q) by (apply Rlt_Qlt; rewrite Q2R_mult, Q2R_of_N, Q2R_1; exact Hn).
  injection Hb as <- <- <- <-.
  rewrite Hu in Hn.
  split; [exact Hee0 | split; [exact Ha0 | split; [exact Hua0 | split; [exact Hn |]]]].
  intros Sx Tx Hx HS HT HH.
  match goal with |- _ <= Q2R (round_up prec ?a) * _ + Q2R (round_up prec ?b) * _ + Q2R (round_up prec ?c) * _
                         + Q2R (round_up prec ?d) =>
    set (qd := d); set (qc := c); set (qb := b); set (qa := a) end.
  pose proof (Qle_R _ _ (round_up_ge prec qa)); pose proof (Qle_R _ _ (round_up_ge prec qb)).
  pose proof (Qle_R _ _ (round_up_ge prec qc)); pose proof (Qle_R _ _ (round_up_ge prec qd)).
  apply Rle_trans with (Q2R qa * Sx + Q2R qb * Tx + Q2R qc * Hx + Q2R qd).
  - right; unfold qa, qb, qc, qd, GradError.ce_gen_bound, GradError.ce_Q,
      GradError.ce_w, GradError.ce_Kg, GradError.ce_cg.
    repeat rewrite ?Q2R_plus, ?Q2R_minus, ?Q2R_mult, ?Q2R_1, ?Q2R_qpow, ?Q2R_of_N.
    rewrite gamma_q_correct, Nnat.Nat2N.id, Rabs_pos_eq by (exact Hn' || exact Ha0).
    rewrite Hu, Hea, Hus, Hes; ring.
  - assert (Q2R qa * Sx <= Q2R (round_up prec qa) * Sx) by (apply Rmult_le_compat_r; lra).
    assert (Q2R qb * Tx <= Q2R (round_up prec qb) * Tx) by (apply Rmult_le_compat_r; lra).
    assert (Q2R qc * Hx <= Q2R (round_up prec qc) * Hx) by (apply Rmult_le_compat_r; lra).
    lra.
Qed.

(** [Sp = ce_gp_S X xs >= 0] under [ce_gp_ok]: each kept item's [X >= e^(A + u Am + ea) >= 1]. *)
Lemma ce_gp_q_S_nonneg : forall (ue : R) (T : Type) (iz il iy iL ih : T -> R) (ik : T -> bool) (A Am X : T -> R)
    (xs : list T), 0 <= ue ->
  (forall y, In y xs -> GradPosteriori.ce_gp_ok M T iz il iy iL ik A Am X y) ->
  0 <= GradPosteriori.ce_gp_S M ue T iy iL ih ik X xs.
Proof.
  intros ue T iz il iy iL ih ik A Am X xs Hue Hok.
  pose proof (ff_u_nonneg (mp_a M)); pose proof (ff_eta_nonneg (mp_a M)); pose proof (ff_u_nonneg (mp_s M)).
  unfold GradPosteriori.ce_gp_S; apply VectorFacts.rsum_nonneg; intros r Hr.
  apply in_map_iff in Hr; destruct Hr as [y [<- Hy]].
  unfold GradPosteriori.ce_gp_k, GradError.ce_P.
  destruct (ik y) eqn:Ek; [| rewrite Rmult_0_l, Rmult_0_r; lra].
  destruct (Hok y Hy Ek) as [HA1 [HA2 HA3]].
  assert (HA : 0 <= A y) by (eapply Rle_trans; [apply Rabs_pos | exact HA1]).
  assert (HAm : 0 <= Am y) by (eapply Rle_trans; [apply Rabs_pos | exact HA2]).
  assert (HX1 : 1 <= X y).
  { eapply Rle_trans; [| exact HA3]; rewrite <- exp_0.
    assert (0 <= ff_u (mp_a M) * Am y) by (apply Rmult_le_pos; lra).
    destruct (Rle_lt_or_eq_dec 0 (A y + ff_u (mp_a M) * Am y + ff_eta (mp_a M))) as [Hlt | Heq]; [lra | |].
    - left; apply exp_increasing, Hlt.
    - rewrite <- Heq; lra. }
  apply Rmult_le_pos; [| apply Rmult_le_pos; [left; apply exp_pos | apply Rabs_pos]].
  apply Rmult_le_pos; [lra |].
  assert (1 <= (1 + ue) * X y) by nra.
  nra.
Qed.

(** The oracle's coefficients bound dW's entry after the token-chunk loop
    ([ce_gp_dw_error]: [C] chunks, each an fp32 accumulation within [gamma u n], each kept item
    with its own exponent's error [A] and [X >= e^(A + u Am + ea)]) ... *)
Theorem ce_gp_q_sound_dw : forall cS cT cH c0, ce_gp_q u ea us es ee a0 ua n C = Some (cS, cT, cH, c0) ->
  forall ex (ue : R), 0 <= ue -> (forall y, Rabs (ex y - exp y) <= ue * exp y + Q2R ee) ->
  forall (T : Type) (iz il iy iL ih : T -> R) (it ik : T -> bool) (dsum : list R -> R) (epi : R -> R -> R)
    (alpha : R) (A Am X : T -> R) (cs : list (list T)),
  GradError.epi_ok M alpha epi -> Rabs (alpha - Q2R a0) <= Q2R ua * Rabs (Q2R a0) ->
  (forall c, In c cs -> GradError.dsum_ok M ex T iz il ih it ik dsum (gamma (ff_u (mp_a M)) (N.to_nat n)) c) ->
  (forall y, In y (concat cs) -> GradPosteriori.ce_gp_ok M T iz il iy iL ik A Am X y) ->
  length cs = N.to_nat C ->
  let xs := concat cs in
  Rabs (GradError.ce_run M ex T iz il ih it ik dsum epi cs
        - Q2R a0 * VectorFacts.rsum (map (GradError.ce_exact T iy iL ih it ik) xs))
  <= Q2R cS * GradPosteriori.ce_gp_S M ue T iy iL ih ik X xs
     + Q2R cT * GradError.ce_T T iy iL ih it ik xs
     + Q2R cH * GradError.ce_Ha T ih ik xs + Q2R c0.
Proof.
  intros cS cT cH c0 Hb ex ue Hue Hex T iz il iy iL ih it ik dsum epi alpha A Am X cs Hepi Hal Hds Hok HC xs.
  destruct (ce_gp_q_spec cS cT cH c0 Hb) as [Hee0 [Ha0 [Hua0 [Hn Hle]]]].
  destruct (GradError.ce_sums_nonneg T iy iL ih it ik xs) as [_ [HT HH]].
  pose proof (ce_gp_q_S_nonneg ue T iz il iy iL ih ik A Am X xs Hue Hok) as HS.
  eapply Rle_trans; [| apply Hle; assumption].
  rewrite <- HC.
  apply (GradPosteriori.ce_gp_dw_error M ex ue (Q2R ee) Hue Hee0 Hex T iz il iy iL ih it ik dsum epi
           alpha (Q2R a0) (Q2R ua) _ A Am X cs Hepi Hua0 Hal (ce_grad_gamma_nonneg M n Hn) Hds Hok).
Qed.

(** ... and dH's entry, one product rounded once ([ce_gp_dh_error], [C = 1]). *)
Theorem ce_gp_q_sound_dh : forall cS cT cH c0, ce_gp_q u ea us es ee a0 ua n C = Some (cS, cT, cH, c0) ->
  forall ex (ue : R), 0 <= ue -> (forall y, Rabs (ex y - exp y) <= ue * exp y + Q2R ee) ->
  forall (T : Type) (iz il iy iL ih : T -> R) (it ik : T -> bool) (dsum : list R -> R)
    (alpha : R) (A Am X : T -> R) (xs : list T),
  Rabs (alpha - Q2R a0) <= Q2R ua * Rabs (Q2R a0) ->
  GradError.dsum_ok M ex T iz il ih it ik dsum (gamma (ff_u (mp_a M)) (N.to_nat n)) xs ->
  (forall y, In y xs -> GradPosteriori.ce_gp_ok M T iz il iy iL ik A Am X y) ->
  N.to_nat C = 1%nat ->
  Rabs (GradError.ce_dh M ex T iz il ih it ik dsum alpha xs
        - Q2R a0 * VectorFacts.rsum (map (GradError.ce_exact T iy iL ih it ik) xs))
  <= Q2R cS * GradPosteriori.ce_gp_S M ue T iy iL ih ik X xs
     + Q2R cT * GradError.ce_T T iy iL ih it ik xs
     + Q2R cH * GradError.ce_Ha T ih ik xs + Q2R c0.
Proof.
  intros cS cT cH c0 Hb ex ue Hue Hex T iz il iy iL ih it ik dsum alpha A Am X xs Hal Hds Hok HC.
  destruct (ce_gp_q_spec cS cT cH c0 Hb) as [Hee0 [Ha0 [Hua0 [Hn Hle]]]].
  destruct (GradError.ce_sums_nonneg T iy iL ih it ik xs) as [_ [HT HH]].
  pose proof (ce_gp_q_S_nonneg ue T iz il iy iL ih ik A Am X xs Hue Hok) as HS.
  eapply Rle_trans; [| apply Hle; assumption].
  rewrite HC.
  apply (GradPosteriori.ce_gp_dh_error M ex ue (Q2R ee) Hue Hee0 Hex T iz il iy iL ih it ik dsum
           alpha (Q2R a0) (Q2R ua) _ A Am X xs Hua0 Hal (ce_grad_gamma_nonneg M n Hn) Hds Hok).
Qed.

End CeGpQ.


(** ** The capped gradients: the coefficients of [ce_gen_bound] at [sc_E1] *)

Local Open Scope Q_scope.

(** [ce_gen_bound gd a0 ua C (sc_E1 ee ((1 + ue) X) Ec Sk Tc S T0 Ha) Tc] of
    LinearCrossEntropy/Float/GradError.v / LinearCrossEntropy/Float/SoftcapGradError.v (the bound of [sc_dw_error] /
    [sc_dh_error]) is [cS S + cT T0 + cH Ha + cK Sk + cC Tc + c0] with these coefficients
    ([a0 >= 0]). *)
Definition sc_grad_coefs_q (u ea us es ue ee a0 ua gd X Ec : Q) (C : nat) : Q * Q * Q * Q * Q * Q :=
  let kg := (1 + us) * (1 + u) in
  let kcap := (1 + us) * ((1 + u) * (1 + u)) in
  let fe := (1 + ue) * X in
  let c1 := (1 + u) * ee + ea in
  let w := ua + u * (1 + ua) in
  let kc := qpow kg C in
  let m := kc * a0 * (1 + w) * (1 + gd) in
  (m * (kg * Ec * ((1 + u) * fe - 1)),
   m * (kg * Ec * (1 + u)),
   m * (kg * Ec * c1 + (kg * c1 + (1 + us) * ea + es)),
   m * (kcap * fe - 1),
   m * (kcap - 1) + (kc * a0 * ((1 + w) * gd + w) + (kc - 1) * a0),
   Q_of_N (N.of_nat C) * kc * (ea + es)).

(** [Some (cS, cT, cH, cK, cC, c0)] (of [S], [T0], [Ha], [Sk], [Tc], the constant), each
    rounded up, at [gd = gamma u n], [X = 1 + perturbation_q (x / 2) >= e^x] and the chain
    factor's error bound [Ec], or [None] when a check fails ([n u < 1], the constants,
    [x] and [Ec] [>= 0]). *)
Definition sc_grad_q (u ea us es ue ee a0 ua x Ec : Q) (n C : N) : option (Q * Q * Q * Q * Q * Q) :=
  if Qle_bool 0 u && Qle_bool 0 ea && Qle_bool 0 us && Qle_bool 0 es && Qle_bool 0 ue && Qle_bool 0 ee
     && Qle_bool 0 a0 && Qle_bool 0 ua && Qle_bool 0 x && Qle_bool 0 Ec
     && negb (Qle_bool 1 (Q_of_N n * u)) then
    match perturbation_q (x / 2) with
    | Some e =>
      let '(cS, cT, cH, cK, cC, c0) :=
        sc_grad_coefs_q u ea us es ue ee a0 ua (gamma_q u n) (1 + e) Ec (N.to_nat C) in
      Some (round_up prec cS, round_up prec cT, round_up prec cH, round_up prec cK, round_up prec cC,
            round_up prec c0)
    | None => None
    end
  else None.

Local Open Scope R_scope.

(** [ce_gen_bound] grows with its first sum ([gd, ua >= 0]). *)
Lemma ce_gen_bound_mono : forall M gd a0 ua C B1 B2 Tx, 0 <= gd -> 0 <= ua -> B1 <= B2 ->
  GradError.ce_gen_bound M gd a0 ua C B1 Tx <= GradError.ce_gen_bound M gd a0 ua C B2 Tx.
Proof.
  intros M gd a0 ua C B1 B2 Tx Hgd Hua HB.
  pose proof (GradError.ce_Kg_ge_1 M) as HK.
  destruct (GradError.ce_nonneg M) as [Hu _].
  assert (Hw : 0 <= GradError.ce_w M ua)
    by (unfold GradError.ce_w; assert (0 <= ff_u (mp_a M) * (1 + ua)) by (apply Rmult_le_pos; lra); lra).
  assert (Hp : 0 <= GradError.ce_Kg M ^ C * Rabs a0 * (1 + GradError.ce_w M ua) * (1 + gd))
    by (repeat apply Rmult_le_pos; try apply pow_le; try apply Rabs_pos; lra).
  assert (Hd : 0 <= GradError.ce_Kg M ^ C * Rabs a0 * (1 + GradError.ce_w M ua) * (1 + gd)
                    * (B2 - B1)) by (apply Rmult_le_pos; lra).
  unfold GradError.ce_gen_bound, GradError.ce_Q.
  match goal with |- ?l <= ?r => assert (E : r - l = GradError.ce_Kg M ^ C * Rabs a0
                                              * (1 + GradError.ce_w M ua) * (1 + gd) * (B2 - B1))
                                   by ring end.
  lra.
Qed.

Section ScGradQ.

Variable M : MixedModel.
Variables u ea us es ue ee a0 ua x Ec : Q.
Variables n C : N.
Hypothesis Hu : Q2R u = ff_u (mp_a M).
Hypothesis Hea : Q2R ea = ff_eta (mp_a M).
Hypothesis Hus : Q2R us = ff_u (mp_s M).
Hypothesis Hes : Q2R es = ff_eta (mp_s M).

(** What the coefficients bound: [gd] the accumulation's [gamma u n], [X >= e^x], any chain
    factor's error [Ecr <= Ec]. *)
Lemma sc_grad_q_spec : forall cS cT cH cK cC c0,
  sc_grad_q u ea us es ue ee a0 ua x Ec n C = Some (cS, cT, cH, cK, cC, c0) ->
  0 <= Q2R ue /\ 0 <= Q2R ee /\ 0 <= Q2R a0 /\ 0 <= Q2R ua /\ INR (N.to_nat n) * ff_u (mp_a M) < 1 /\
  exists X, exp (Q2R x) <= X /\
  forall Ecr, Ecr <= Q2R Ec ->
  forall Sx T0x Hx Skx Tcx, 0 <= Sx -> 0 <= T0x -> 0 <= Hx -> 0 <= Skx -> 0 <= Tcx ->
    GradError.ce_gen_bound M (gamma (ff_u (mp_a M)) (N.to_nat n)) (Q2R a0) (Q2R ua) (N.to_nat C)
      (SoftcapGradError.sc_E1 M (Q2R ee) ((1 + Q2R ue) * X) Ecr Skx Tcx Sx T0x Hx) Tcx
    <= Q2R cS * Sx + Q2R cT * T0x + Q2R cH * Hx + Q2R cK * Skx + Q2R cC * Tcx + Q2R c0.
Proof.
  intros cS cT cH cK cC c0 Hb; unfold sc_grad_q in Hb.
  destruct (Qle_bool 0 u && Qle_bool 0 ea && Qle_bool 0 us && Qle_bool 0 es && Qle_bool 0 ue && Qle_bool 0 ee
            && Qle_bool 0 a0 && Qle_bool 0 ua && Qle_bool 0 x && Qle_bool 0 Ec
            && negb (Qle_bool 1 (Q_of_N n * u))) eqn:Eok; [| discriminate].
  repeat rewrite andb_true_iff in Eok.
  destruct Eok as [[[[[[[[[[Hu0 Hea0] Hus0] Hes0] Hue0] Hee0] Ha0] Hua0] Hx0] HEc0] Hn].
  apply Qle_bool_R in Hu0, Hea0, Hus0, Hes0, Hue0, Hee0, Ha0, Hua0, Hx0, HEc0; rewrite Q2R_0 in *.
  apply negb_Qle_bool_R in Hn; rewrite Q2R_mult, Q2R_of_N, Q2R_1 in Hn.
  assert (Hn' : (Q_of_N n * u < 1)%Q) by (apply Rlt_Qlt; rewrite Q2R_mult, Q2R_of_N, Q2R_1; exact Hn).
  destruct (perturbation_q (x / 2)) as [e |] eqn:Ee; [| discriminate].
  injection Hb as <- <- <- <- <- <-.
  pose proof (perturbation_q_ge _ _ Ee) as HX.
  replace (2 * Q2R (x / 2)%Q) with (Q2R x) in HX
    by (rewrite Q2R_div, Q2R_2 by (apply Q2R_nonzero; rewrite Q2R_2; lra); field).
  assert (HX1 : 1 <= 1 + Q2R e).
  { assert (1 <= exp (Q2R x)) by (rewrite <- exp_0; apply (ce_grad_exp_le x); lra). lra. }
  rewrite Hu in Hn.
  split; [exact Hue0 | split; [exact Hee0 | split; [exact Ha0 | split; [exact Hua0 | split; [exact Hn |]]]]].
  exists (Q2R (1 + e)); split; [rewrite Q2R_plus, Q2R_1; lra |].
  intros Ecr HEcr Sx T0x Hx Skx Tcx HS HT HH HK HC.
  pose proof (ce_grad_gamma_nonneg M n Hn) as Hgd.
  pose proof (GradError.ce_Kg_ge_1 M) as HKg.
  destruct (GradError.ce_nonneg M) as [Hu1 [Hea1 _]].
  rewrite Q2R_plus, Q2R_1.
  eapply Rle_trans; [apply ce_gen_bound_mono; [exact Hgd | exact Hua0 |] |].
  { instantiate (1 := SoftcapGradError.sc_E1 M (Q2R ee) ((1 + Q2R ue) * (1 + Q2R e)) (Q2R Ec)
                        Skx Tcx Sx T0x Hx).
    assert (Hf1 : 1 <= (1 + Q2R ue) * (1 + Q2R e))
      by (rewrite <- (Rmult_1_l 1) at 1; apply Rmult_le_compat; lra).
    assert (Hf : 0 <= (1 + ff_u (mp_a M)) * ((1 + Q2R ue) * (1 + Q2R e)) - 1).
    { assert (1 <= (1 + ff_u (mp_a M)) * ((1 + Q2R ue) * (1 + Q2R e)))
        by (rewrite <- (Rmult_1_l 1) at 1; apply Rmult_le_compat; lra). lra. }
    assert (Hc1 : 0 <= SoftcapGradError.sc_c1 M (Q2R ee))
      by (unfold SoftcapGradError.sc_c1; nra).
    assert (Hs : 0 <= ((1 + ff_u (mp_a M)) * ((1 + Q2R ue) * (1 + Q2R e)) - 1) * Sx
                      + (1 + ff_u (mp_a M)) * T0x + SoftcapGradError.sc_c1 M (Q2R ee) * Hx).
    { assert (0 <= ((1 + ff_u (mp_a M)) * ((1 + Q2R ue) * (1 + Q2R e)) - 1) * Sx) by (apply Rmult_le_pos; lra).
      assert (0 <= (1 + ff_u (mp_a M)) * T0x) by (apply Rmult_le_pos; lra).
      assert (0 <= SoftcapGradError.sc_c1 M (Q2R ee) * Hx) by (apply Rmult_le_pos; lra).
      lra. }
    assert (0 <= GradError.ce_Kg M * (Q2R Ec - Ecr)
                 * (((1 + ff_u (mp_a M)) * ((1 + Q2R ue) * (1 + Q2R e)) - 1) * Sx
                    + (1 + ff_u (mp_a M)) * T0x + SoftcapGradError.sc_c1 M (Q2R ee) * Hx))
      by (apply Rmult_le_pos; [apply Rmult_le_pos |]; lra).
    unfold SoftcapGradError.sc_E1; nra. }
  match goal with |- _ <= Q2R (round_up prec ?a) * _ + Q2R (round_up prec ?b) * _ + Q2R (round_up prec ?c) * _
                         + Q2R (round_up prec ?d) * _ + Q2R (round_up prec ?f) * _ + Q2R (round_up prec ?g) =>
    set (qa := a); set (qb := b); set (qc := c); set (qd := d); set (qf := f); set (qg := g) end.
  pose proof (Qle_R _ _ (round_up_ge prec qa)); pose proof (Qle_R _ _ (round_up_ge prec qb)).
  pose proof (Qle_R _ _ (round_up_ge prec qc)); pose proof (Qle_R _ _ (round_up_ge prec qd)).
  pose proof (Qle_R _ _ (round_up_ge prec qf)); pose proof (Qle_R _ _ (round_up_ge prec qg)).
  apply Rle_trans with (Q2R qa * Sx + Q2R qb * T0x + Q2R qc * Hx + Q2R qd * Skx + Q2R qf * Tcx + Q2R qg).
  - right; unfold qa, qb, qc, qd, qf, qg, GradError.ce_gen_bound, GradError.ce_Q,
      GradError.ce_w, GradError.ce_Kg, SoftcapGradError.sc_E1,
      SoftcapGradError.sc_Kc, SoftcapGradError.sc_c1, SoftcapGradError.sc_cc,
      GradError.ce_Kg, SoftcapGradError.sc_c1.
    repeat rewrite ?Q2R_plus, ?Q2R_minus, ?Q2R_mult, ?Q2R_1, ?Q2R_qpow, ?Q2R_of_N.
    rewrite gamma_q_correct, Nnat.Nat2N.id, Rabs_pos_eq by (exact Hn' || exact Ha0).
    rewrite Hu, Hea, Hus, Hes; ring.
  - assert (Q2R qa * Sx <= Q2R (round_up prec qa) * Sx) by (apply Rmult_le_compat_r; lra).
    assert (Q2R qb * T0x <= Q2R (round_up prec qb) * T0x) by (apply Rmult_le_compat_r; lra).
    assert (Q2R qc * Hx <= Q2R (round_up prec qc) * Hx) by (apply Rmult_le_compat_r; lra).
    assert (Q2R qd * Skx <= Q2R (round_up prec qd) * Skx) by (apply Rmult_le_compat_r; lra).
    assert (Q2R qf * Tcx <= Q2R (round_up prec qf) * Tcx) by (apply Rmult_le_compat_r; lra).
    lra.
Qed.

(** The capped sums are [>= 0]: [Sk = sum P_c k |h|] ([0 <= k <= 1]), [Tc = sum |G0 k h|]. *)
Lemma sc_grad_q_sums_nonneg : forall (c : R) (T : Type) (iy iL ih : T -> R) (it ik : T -> bool) (xs : list T),
  0 <= SoftcapGradError.sc_Sk c T iy iL ih ik xs
  /\ 0 <= SoftcapGradError.sc_Tc c T iy iL ih it ik xs.
Proof.
  intros c T iy iL ih it ik xs; split.
  - unfold SoftcapGradError.sc_Sk; apply VectorFacts.rsum_nonneg; intros r Hr.
    apply in_map_iff in Hr; destruct Hr as [y [<- _]].
    assert (HP : 0 <= GradError.ce_P T (SoftcapGradError.sc_yc c T iy) iL ik y)
      by (unfold GradError.ce_P; destruct (ik y); [left; apply exp_pos | lra]).
    pose proof (SoftcapGradError.sc_k_bounds c (iy y)) as Hk.
    unfold SoftcapGradError.sc_k.
    apply Rmult_le_pos; [apply Rmult_le_pos; lra | apply Rabs_pos].
  - unfold SoftcapGradError.sc_Tc, GradError.ce_gen_T; apply VectorFacts.rsum_nonneg.
    intros r Hr; apply in_map_iff in Hr; destruct Hr as [y [<- _]]; apply Rabs_pos.
Qed.

(** The oracle's coefficients bound the capped dW's entry after the token-chunk loop
    ([sc_dw_error]: [C] chunks, each an fp32 accumulation within [gamma u n]; the exponent's
    error [sc_delta dr + Dl + u Am + ea <= x], the chain factor's [sc_chain_bound (sc_delta dr)
    <= Ec]) ... *)
Theorem sc_grad_q_sound_dw : forall cS cT cH cK cC c0,
  sc_grad_q u ea us es ue ee a0 ua x Ec n C = Some (cS, cT, cH, cK, cC, c0) ->
  forall ex, (forall y, Rabs (ex y - exp y) <= Q2R ue * exp y + Q2R ee) ->
  forall c, 0 < c -> forall (th : R -> R) (ut et : R), 0 <= ut ->
  (forall r, ff_fmt (mp_a M) r -> Rabs (th r - tanh (r / c)) <= ut * Rabs (tanh (r / c)) + et) ->
  forall (dv : R -> R) (ud ed : R), 0 <= ud -> 0 <= ed ->
  (forall z, ff_fmt (mp_a M) z -> Rabs (dv z - z / c) <= ud * Rabs (z / c) + ed) ->
  forall cf : R -> R, (forall z, SoftcapError.sc_chain_ok M dv z (cf z)) ->
  forall (T : Type) (ir il iy iL ih : T -> R) (it ik : T -> bool) (dsum : list R -> R) (epi : R -> R -> R)
    (alpha dr Dl Am : R) (cs : list (list T)),
  GradError.epi_ok M alpha epi -> Rabs (alpha - Q2R a0) <= Q2R ua * Rabs (Q2R a0) ->
  SoftcapError.sc_delta (ff_u (mp_a M)) (ff_eta (mp_a M)) c ut et dr + Dl + ff_u (mp_a M) * Am
    + ff_eta (mp_a M) <= Q2R x ->
  SoftcapError.sc_chain_bound (ff_u (mp_a M)) (ff_eta (mp_a M)) c ud ed
    (SoftcapError.sc_delta (ff_u (mp_a M)) (ff_eta (mp_a M)) c ut et dr) <= Q2R Ec ->
  (forall ch, In ch cs -> GradError.ce_gen_dsum_ok T
     (SoftcapGradError.sc_term M ex c th cf T ir il ih it ik) dsum (gamma (ff_u (mp_a M)) (N.to_nat n)) ch) ->
  (forall y, In y (concat cs) -> SoftcapGradError.sc_ok M c th T ir il iy iL ik dr Dl Am y) ->
  length cs = N.to_nat C ->
  let xs := concat cs in
  Rabs (GradError.ce_gen_run M T (SoftcapGradError.sc_term M ex c th cf T ir il ih it ik)
          dsum epi cs
        - Q2R a0 * VectorFacts.rsum (map (SoftcapGradError.sc_exact c T iy iL ih it ik) xs))
  <= Q2R cS * GradError.ce_S T (SoftcapGradError.sc_yc c T iy) iL ih ik xs
     + Q2R cT * GradError.ce_T T (SoftcapGradError.sc_yc c T iy) iL ih it ik xs
     + Q2R cH * GradError.ce_Ha T ih ik xs
     + Q2R cK * SoftcapGradError.sc_Sk c T iy iL ih ik xs
     + Q2R cC * SoftcapGradError.sc_Tc c T iy iL ih it ik xs + Q2R c0.
Proof.
  intros cS cT cH cK cC c0 Hb ex Hex c Hc th ut et Hut Hth dv ud ed Hud Hed Hdv cf Hcf
    T ir il iy iL ih it ik dsum epi alpha dr Dl Am cs Hepi Hal Hx HEc Hds Hok HC xs.
  destruct (sc_grad_q_spec cS cT cH cK cC c0 Hb) as [Hue0 [Hee0 [Ha0 [Hua0 [Hn [X [HX Hle]]]]]]].
  destruct (GradError.ce_sums_nonneg T (SoftcapGradError.sc_yc c T iy) iL ih it ik xs)
    as [HS [HT HH]].
  destruct (sc_grad_q_sums_nonneg c T iy iL ih it ik xs) as [HK HTc].
  eapply Rle_trans; [| apply (Hle _ HEc); assumption].
  rewrite <- HC.
  apply (SoftcapGradError.sc_dw_error M ex (Q2R ue) (Q2R ee) Hue0 Hee0 Hex c Hc th ut et Hut Hth
           dv ud ed Hud Hed Hdv cf Hcf T ir il iy iL ih it ik dsum epi alpha (Q2R a0) (Q2R ua) _ dr Dl Am X cs
           Hepi Hua0 Hal (ce_grad_gamma_nonneg M n Hn) (ce_grad_exp_le x _ X Hx HX) Hds Hok).
Qed.

(** ... and the capped dH's entry, one product rounded once ([sc_dh_error], [C = 1]). *)
Theorem sc_grad_q_sound_dh : forall cS cT cH cK cC c0,
  sc_grad_q u ea us es ue ee a0 ua x Ec n C = Some (cS, cT, cH, cK, cC, c0) ->
  forall ex, (forall y, Rabs (ex y - exp y) <= Q2R ue * exp y + Q2R ee) ->
  forall c, 0 < c -> forall (th : R -> R) (ut et : R), 0 <= ut ->
  (forall r, ff_fmt (mp_a M) r -> Rabs (th r - tanh (r / c)) <= ut * Rabs (tanh (r / c)) + et) ->
  forall (dv : R -> R) (ud ed : R), 0 <= ud -> 0 <= ed ->
  (forall z, ff_fmt (mp_a M) z -> Rabs (dv z - z / c) <= ud * Rabs (z / c) + ed) ->
  forall cf : R -> R, (forall z, SoftcapError.sc_chain_ok M dv z (cf z)) ->
  forall (T : Type) (ir il iy iL ih : T -> R) (it ik : T -> bool) (dsum : list R -> R)
    (alpha dr Dl Am : R) (xs : list T),
  Rabs (alpha - Q2R a0) <= Q2R ua * Rabs (Q2R a0) ->
  SoftcapError.sc_delta (ff_u (mp_a M)) (ff_eta (mp_a M)) c ut et dr + Dl + ff_u (mp_a M) * Am
    + ff_eta (mp_a M) <= Q2R x ->
  SoftcapError.sc_chain_bound (ff_u (mp_a M)) (ff_eta (mp_a M)) c ud ed
    (SoftcapError.sc_delta (ff_u (mp_a M)) (ff_eta (mp_a M)) c ut et dr) <= Q2R Ec ->
  GradError.ce_gen_dsum_ok T (SoftcapGradError.sc_term M ex c th cf T ir il ih it ik) dsum
    (gamma (ff_u (mp_a M)) (N.to_nat n)) xs ->
  (forall y, In y xs -> SoftcapGradError.sc_ok M c th T ir il iy iL ik dr Dl Am y) ->
  N.to_nat C = 1%nat ->
  Rabs (GradError.ce_gen_dh M T (SoftcapGradError.sc_term M ex c th cf T ir il ih it ik)
          dsum alpha xs
        - Q2R a0 * VectorFacts.rsum (map (SoftcapGradError.sc_exact c T iy iL ih it ik) xs))
  <= Q2R cS * GradError.ce_S T (SoftcapGradError.sc_yc c T iy) iL ih ik xs
     + Q2R cT * GradError.ce_T T (SoftcapGradError.sc_yc c T iy) iL ih it ik xs
     + Q2R cH * GradError.ce_Ha T ih ik xs
     + Q2R cK * SoftcapGradError.sc_Sk c T iy iL ih ik xs
     + Q2R cC * SoftcapGradError.sc_Tc c T iy iL ih it ik xs + Q2R c0.
Proof.
  intros cS cT cH cK cC c0 Hb ex Hex c Hc th ut et Hut Hth dv ud ed Hud Hed Hdv cf Hcf
    T ir il iy iL ih it ik dsum alpha dr Dl Am xs Hal Hx HEc Hds Hok HC.
  destruct (sc_grad_q_spec cS cT cH cK cC c0 Hb) as [Hue0 [Hee0 [Ha0 [Hua0 [Hn [X [HX Hle]]]]]]].
  destruct (GradError.ce_sums_nonneg T (SoftcapGradError.sc_yc c T iy) iL ih it ik xs)
    as [HS [HT HH]].
  destruct (sc_grad_q_sums_nonneg c T iy iL ih it ik xs) as [HK HTc].
  eapply Rle_trans; [| apply (Hle _ HEc); assumption].
  rewrite HC.
  apply (SoftcapGradError.sc_dh_error M ex (Q2R ue) (Q2R ee) Hue0 Hee0 Hex c Hc th ut et Hut Hth
           dv ud ed Hud Hed Hdv cf Hcf T ir il iy iL ih it ik dsum alpha (Q2R a0) (Q2R ua) _ dr Dl Am X xs
           Hua0 Hal (ce_grad_gamma_nonneg M n Hn) (ce_grad_exp_le x _ X Hx HX) Hds Hok).
Qed.

End ScGradQ.
