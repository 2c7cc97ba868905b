(** * Computable bound of attention's backward chain: dQ and dK from the inputs.

    [attn_grad_chain_q]: one function for the composed chain dO -> Delta -> dS -> dQ / dK of
    Attention/Float/BackwardChainError.v ([dq_error_from_forward], [dk_error_from_forward]):
    it computes the forward's constants itself ([attn_lse_q]: the saved lse's bound [Lb];
    [attn_fwd_post_q]: the stored output's [(r, a)]), then [Dl], [Am], [X = 1 + perturbation_q (x / 2)]
    ([x] the exponent of the backward's weights, [2^x <= e^x <= X]), [eP = dot_err], [g = gamma u gk],
    and answers the coefficients of the bound, which is linear in the data's sums
    ([grad_bound_linear]):
      |kernel - exact| <= c1 S1 + c2 S2 + c3 S3 + c0 + cD eDm,
      eD_i <= d0 + d1 T1_i + sum_c (r W_ic + a) |dO_ic|      (delta's error against dO . O),
    [S1 = sum P |dP - D| |w|], [S2 = sum P |w|], [S3 = sum P eD |w|] over the visible items
    ([w] = [k_je] for dQ, [q_ie] for dK), [eDm >= eD] of every row ([eD] itself for dQ, where
    [S3 = eD S2]), [T1_i = sum_c |o_ic dO_ic|] of the stored output, [W_ic = sum_j P_ij |v_jc|];
    every coefficient rounded up, [None] when a check or a side condition fails.
    [attn_dq_chain_q_sound] and [attn_dk_chain_q_sound]: whenever it answers, the kernel's dQ
    (one query row) / dK (one key, rows of any type) coordinate is within that polynomial of
    the exact one, the premises about the inputs, the rounding model and the device only
    ([tl.log2] within [el] on [[1/2, 2 e^LN]]; the lse's bound is checked [<= 1] for that). *)

From Coq Require Import Reals QArith Qreals Lra Lia ZArith List.
From Ojas Require Import VectorFacts FloatModel.DotError FloatModel.MixedPrecision FloatModel.BlockedSum.
From Ojas Require Import FloatModel.Tf32Product.
From Ojas Require Import Attention.Float.OnlineSoftmaxTile Attention.Float.ForwardError Attention.Float.SavedLseError.
From Ojas Require Import Attention.Float.ForwardPosteriori Attention.Float.DvError Attention.Float.DkDqError.
From Ojas Require Import Attention.Float.BackwardChainError.
From Ojas Require Import Bounds.Rational Bounds.Sums Bounds.Softmax Bounds.Attention.

Local Open Scope R_scope.

(** ** The bound is linear in the sums *)

Section Linear.

Variable M : MixedModel.
Local Notation u := (ff_u (mp_a M)).
Local Notation ea := (ff_eta (mp_a M)).
Local Notation us := (ff_u (mp_s M)).
Local Notation es := (ff_eta (mp_s M)).
Local Notation ee := (mp_eta_e M).

Definition chain_k (scale ucs : R) : R := (1 + us) * scale * ((1 + u) * (1 + ucs)).
Definition chain_c1 (scale ucs g EX : R) : R :=
  chain_k scale ucs * ((1 + g) * grad_A M EX + g) + ((1 + us) * scale * (u * (1 + ucs) + ucs) + us * scale).
Definition chain_c2 (scale ucs g EX eP : R) : R := chain_k scale ucs * (1 + g) * grad_B M EX * ((1 + u) * eP + ea).
Definition chain_c3 (scale ucs g EX : R) : R := chain_k scale ucs * (1 + g) * grad_B M EX * (1 + u).
Definition chain_c0 (scale ucs g eP Ym W n : R) : R :=
  chain_k scale ucs * (1 + g) * n
    * (((1 + u) * (1 + us) * ((1 + u) * ee * ((1 + u) * Ym + ((1 + u) * eP + ea)) + ea) + (1 + u) * es) * W + ea)
  + (1 + us) * ea + es.
Definition chain_cD (scale ucs g W n : R) : R :=
  chain_k scale ucs * (1 + g) * n * ((1 + u) * (1 + us) * ((1 + u) * ee * (1 + u)) * W).

Lemma grad_bound_linear : forall scale ucs g EX eP Ym W n S1 S2 S3 SR eDm,
  SR = ((1 + u) * eP + ea) * S2 + (1 + u) * S3 ->
  grad_bound M scale ucs (grad_eA M g EX S1 SR n (grad_c M EX Ym ((1 + u) * (eP + eDm) + ea) W)) S1
  = chain_c1 scale ucs g EX * S1 + chain_c2 scale ucs g EX eP * S2 + chain_c3 scale ucs g EX * S3
    + chain_c0 scale ucs g eP Ym W n + chain_cD scale ucs g W n * eDm.
Proof.
  intros; subst SR.
  unfold chain_c1, chain_c2, chain_c3, chain_c0, chain_cD, chain_k, grad_bound, grad_eA, grad_c, grad_A, grad_B.
  ring.
Qed.

End Linear.

(** The sums of the items: [SR] of the theorems split into [S2] and [S3]. *)
Lemma rsum_if_affine : forall {T} (vis : T -> bool) (f h g : T -> R) (eP ea' u' : R) (l : list T),
  rsum (map (fun x => if vis x then f x * ((1 + u') * (eP + g x) + ea') * h x else 0) l)
  = ((1 + u') * eP + ea') * rsum (map (fun x => if vis x then f x * h x else 0) l)
    + (1 + u') * rsum (map (fun x => if vis x then f x * g x * h x else 0) l).
Proof.
  intros T vis f h g eP ea' u' l; induction l as [|x l IH]; cbn [map].
  - unfold rsum; simpl; ring.
  - rewrite !rsum_cons, IH; destruct (vis x); ring.
Qed.

Lemma rsum_if_const : forall {T} (vis : T -> bool) (f h : T -> R) (K : R) (l : list T),
  rsum (map (fun x => if vis x then f x * K * h x else 0) l) = K * rsum (map (fun x => if vis x then f x * h x else 0) l).
Proof.
  intros T vis f h K l; induction l as [|x l IH]; cbn [map].
  - unfold rsum; simpl; ring.
  - rewrite !rsum_cons, IH; destruct (vis x); ring.
Qed.

Lemma rsum_if_nonneg : forall {T} (vis : T -> bool) (f : T -> R) (l : list T),
  (forall x, In x l -> vis x = true -> 0 <= f x) -> 0 <= rsum (map (fun x => if vis x then f x else 0) l).
Proof.
  intros T vis f l H; apply rsum_nonneg; intros z Hz; apply in_map_iff in Hz.
  destruct Hz as [x [<- Hx]]; destruct (vis x) eqn:Ev; [apply H; assumption | lra].
Qed.

Lemma dot_abs_nonneg : forall a b, 0 <= dot_abs a b.
Proof.
  intros a b; unfold dot_abs; apply rsum_nonneg; intros z Hz; apply in_map_iff in Hz.
  destruct Hz as [xy [<- _]]; apply Rabs_pos.
Qed.

(** ** The coefficients over exact rationals *)

Local Open Scope Q_scope.

Definition grad_A_q (u us E : Q) : Q := (1 + u) * (1 + us) * ((1 + u) * (1 + u) * E - 1) + (1 + u) * us + u.
Definition grad_B_q (u us E : Q) : Q := (1 + u) * (1 + us) * ((1 + u) * E).
Definition chain_k_q (u us scale ucs : Q) : Q := (1 + us) * scale * ((1 + u) * (1 + ucs)).
Definition chain_c1_q (u us scale ucs g EX : Q) : Q :=
  chain_k_q u us scale ucs * ((1 + g) * grad_A_q u us EX + g) + ((1 + us) * scale * (u * (1 + ucs) + ucs) + us * scale).
Definition chain_c2_q (u ea us scale ucs g EX eP : Q) : Q :=
  chain_k_q u us scale ucs * (1 + g) * grad_B_q u us EX * ((1 + u) * eP + ea).
Definition chain_c3_q (u us scale ucs g EX : Q) : Q := chain_k_q u us scale ucs * (1 + g) * grad_B_q u us EX * (1 + u).
Definition chain_c0_q (u ea us es ee scale ucs g eP Ym W n : Q) : Q :=
  chain_k_q u us scale ucs * (1 + g) * n
    * (((1 + u) * (1 + us) * ((1 + u) * ee * ((1 + u) * Ym + ((1 + u) * eP + ea)) + ea) + (1 + u) * es) * W + ea)
  + (1 + us) * ea + es.
Definition chain_cD_q (u us ee scale ucs g W n : Q) : Q :=
  chain_k_q u us scale ucs * (1 + g) * n * ((1 + u) * (1 + us) * ((1 + u) * ee * (1 + u)) * W).

(** [Some (c1, c2, c3, c0, cD, d0, d1, r, a)], or [None].  [E, B, Nk, Tt]: the forward's head
    dim, key tile, keys and key tiles; [Ev] the value dim ([delta]'s tree of depth [Ev - 1]);
    [gk = (block - 1) + (tiles - 1)] of the backward's tiles; [n] their number of items;
    [Lm >= |LSE|], [Pd >= sum |dO v|], [Ym >= |dP - D|], [W >= |w|]. *)
Definition attn_grad_chain_q (u ue ee ea us es uc scale P V el ucl LN uc2 ucs Lm Pd Ym W : Q)
    (E B Nk Tt Ev gk n : N) : option (Q * Q * Q * Q * Q * Q * Q * Q * Q) :=
  if Qle_bool 0 uc2 && Qle_bool 0 ucs && Qle_bool 0 Lm && Qle_bool 0 Pd && Qle_bool 0 Ym && Qle_bool 0 W
     && N.leb 1 Ev && negb (Qle_bool 1 (Q_of_N Ev * u)) && negb (Qle_bool 1 (Q_of_N gk * u)) then
    match attn_lse_q u ue ee ea el ucl uc scale P LN E B Nk Tt, attn_fwd_post_q u ue ee ea us es uc scale P V E B Nk Tt with
    | Some Lb, Some (r, a) =>
      if Qle_bool 0 Lb && Qle_bool Lb 1 then
        let Dl := Lb + (Lm + Lb) * (u * (1 + uc2) + uc2) + ea in
        let Am := score_max_q u ea scale uc E P + (2 * ((1 + uc2) * (Lm + Lb)) * (1 + u) + ea) in
        let x := 2 * (score_delta_q u ea scale uc E P + Dl) + u * Am + ea in
        match perturbation_q (x / 2) with
        | Some e =>
          if negb (Qle_bool 0 x) then None else
          let EX := (1 + ue) * (1 + e) in
          let g := gamma_q u gk in
          let eP := dot_err_q u ea Ev Pd in
          let gd := gamma_q u (Ev - 1) in
          let c3 := round_up prec (chain_c3_q u us scale ucs g EX) in
          if Qle_bool 0 c3 then
            Some (round_up prec (chain_c1_q u us scale ucs g EX), round_up prec (chain_c2_q u ea us scale ucs g EX eP), c3,
                  round_up prec (chain_c0_q u ea us es ee scale ucs g eP Ym W (Q_of_N n)),
                  round_up prec (chain_cD_q u us ee scale ucs g W (Q_of_N n)),
                  round_up prec ((gd + 1) * Q_of_N Ev * ea), round_up prec (gd * (1 + u) + u), r, a)
          else None
        | None => None
        end
      else None
    | _, _ => None
    end
  else None.

Local Open Scope R_scope.

(** [2^y <= e^y] for [y >= 0]. *)
Lemma rpower2_le_exp : forall y, 0 <= y -> Rpower 2 y <= exp y.
Proof.
  intros y Hy; unfold Rpower; pose proof afe_ln2_bounds as [_ L].
  destruct (Rle_lt_or_eq_dec _ _ Hy) as [H | <-].
  - left; apply exp_increasing; nra.
  - rewrite Rmult_0_l; lra.
Qed.

Section ChainQ.

Variable M : MixedModel.
Variables u ue ee ea us es uc scale P V el ucl LN uc2 ucs Lm Pd Ym W : Q.
Variables E B Nk Tt Ev gk n : N.
Hypothesis Hu : Q2R u = ff_u (mp_a M).
Hypothesis Hue : Q2R ue = mp_ue M.
Hypothesis Hee : Q2R ee = mp_eta_e M.
Hypothesis Hea : Q2R ea = ff_eta (mp_a M).
Hypothesis Hus : Q2R us = ff_u (mp_s M).
Hypothesis Hes : Q2R es = ff_eta (mp_s M).

Lemma Q2R_chain_coefs : forall g EX eP nq,
  Q2R (chain_c1_q u us scale ucs g EX) = chain_c1 M (Q2R scale) (Q2R ucs) (Q2R g) (Q2R EX)
  /\ Q2R (chain_c2_q u ea us scale ucs g EX eP) = chain_c2 M (Q2R scale) (Q2R ucs) (Q2R g) (Q2R EX) (Q2R eP)
  /\ Q2R (chain_c3_q u us scale ucs g EX) = chain_c3 M (Q2R scale) (Q2R ucs) (Q2R g) (Q2R EX)
  /\ Q2R (chain_c0_q u ea us es ee scale ucs g eP Ym W nq)
     = chain_c0 M (Q2R scale) (Q2R ucs) (Q2R g) (Q2R eP) (Q2R Ym) (Q2R W) (Q2R nq)
  /\ Q2R (chain_cD_q u us ee scale ucs g W nq) = chain_cD M (Q2R scale) (Q2R ucs) (Q2R g) (Q2R W) (Q2R nq).
Proof.
  intros; unfold chain_c1_q, chain_c2_q, chain_c3_q, chain_c0_q, chain_cD_q, chain_k_q, grad_A_q, grad_B_q,
    chain_c1, chain_c2, chain_c3, chain_c0, chain_cD, chain_k, grad_A, grad_B.
  repeat rewrite ?Q2R_plus, ?Q2R_minus, ?Q2R_mult, ?Q2R_1.
  rewrite Hu, Hea, Hus, Hes, Hee; repeat split; reflexivity.
Qed.

Lemma Q_lt_1_R : forall (k : N), negb (Qle_bool 1 (Q_of_N k * u)) = true -> INR (N.to_nat k) * ff_u (mp_a M) < 1.
Proof.
  intros k H; apply negb_Qle_bool_R in H; rewrite Q2R_mult, Q2R_of_N, Q2R_1, Hu in H; exact H.
Qed.

Lemma Q_lt_1_Q : forall (k : N), negb (Qle_bool 1 (Q_of_N k * u)) = true -> (Q_of_N k * u < 1)%Q.
Proof.
  intros k H; apply Rlt_Qlt; apply negb_Qle_bool_R in H; exact H.
Qed.

(** What an answer of [attn_grad_chain_q] gives: the checks, the forward's constants
    ([fwd_consts], for [tl.log2] on [[1/2, 2 e^LN]]), [X], and the coefficients above the real ones. *)
Lemma attn_grad_chain_q_spec : forall c1 c2 c3 c0 cD d0 d1 r a,
  attn_grad_chain_q u ue ee ea us es uc scale P V el ucl LN uc2 ucs Lm Pd Ym W E B Nk Tt Ev gk n
  = Some (c1, c2, c3, c0, cD, d0, d1, r, a) ->
  (1 <= N.to_nat Ev)%nat /\ INR (N.to_nat Ev) * ff_u (mp_a M) < 1 /\ INR (N.to_nat Ev - 1) * ff_u (mp_a M) < 1
  /\ INR (N.to_nat gk) * ff_u (mp_a M) < 1
  /\ 0 <= Q2R uc2 /\ 0 <= Q2R ucs /\ 0 <= Q2R Pd /\ 0 <= Q2R Ym /\ 0 <= Q2R W /\ 0 <= Q2R c3
  /\ exists Lb X,
    (forall c cl, Rabs (cl - ln 2) <= Q2R ucl * ln 2 -> Rabs (c * ln 2 - Q2R scale) <= Q2R uc * Q2R scale ->
       fwd_consts M (Q2R el) (/ 2) (2 * exp (Q2R LN)) c (Q2R scale) (Q2R uc) (Q2R P) (Q2R V) cl (Q2R ucl) (Q2R LN)
         Lb (Q2R r) (Q2R a) (N.to_nat E) (N.to_nat B) (N.to_nat Nk) (N.to_nat Tt))
    /\ Rpower 2 (2 * (score_delta (mp_a M) (Q2R scale) (Q2R uc) (N.to_nat E) (Q2R P) + chain_Dl M (Q2R uc2) Lb (Q2R Lm))
                 + ff_u (mp_a M) * chain_Am M (Q2R uc2) (score_max (mp_a M) (Q2R scale) (Q2R uc) (N.to_nat E) (Q2R P)) Lb (Q2R Lm)
                 + ff_eta (mp_a M)) <= X
    /\ (forall S1 S2 S3 eDm, 0 <= S1 -> 0 <= S2 -> 0 <= S3 -> 0 <= eDm ->
         let g := gamma (ff_u (mp_a M)) (N.to_nat gk) in
         let EX := (1 + mp_ue M) * X in
         let eP := dot_err (mp_a M) (N.to_nat Ev) (Q2R Pd) in
         chain_c1 M (Q2R scale) (Q2R ucs) g EX * S1 + chain_c2 M (Q2R scale) (Q2R ucs) g EX eP * S2
         + chain_c3 M (Q2R scale) (Q2R ucs) g EX * S3
         + chain_c0 M (Q2R scale) (Q2R ucs) g eP (Q2R Ym) (Q2R W) (INR (N.to_nat n))
         + chain_cD M (Q2R scale) (Q2R ucs) g (Q2R W) (INR (N.to_nat n)) * eDm
         <= Q2R c1 * S1 + Q2R c2 * S2 + Q2R c3 * S3 + Q2R c0 + Q2R cD * eDm)
    /\ (forall T1, 0 <= T1 ->
         gamma (ff_u (mp_a M)) (N.to_nat Ev - 1) * ((1 + ff_u (mp_a M)) * T1 + INR (N.to_nat Ev) * ff_eta (mp_a M))
         + ff_u (mp_a M) * T1 + INR (N.to_nat Ev) * ff_eta (mp_a M) <= Q2R d0 + Q2R d1 * T1).
Proof.
  intros c1 c2 c3 c0 cD d0 d1 r a H.
  unfold attn_grad_chain_q in H.
  destruct (Qle_bool 0 uc2 && Qle_bool 0 ucs && Qle_bool 0 Lm && Qle_bool 0 Pd && Qle_bool 0 Ym && Qle_bool 0 W
            && N.leb 1 Ev && negb (Qle_bool 1 (Q_of_N Ev * u)) && negb (Qle_bool 1 (Q_of_N gk * u))) eqn:Eok;
    [| discriminate].
  repeat rewrite andb_true_iff in Eok.
  destruct Eok as [[[[[[[[Huc2 Hucs] HLm] HPd] HYm] HW] HEv1] HEvu] Hgk].
  apply Qle_bool_R in Huc2, Hucs, HLm, HPd, HYm, HW; rewrite Q2R_0 in Huc2, Hucs, HLm, HPd, HYm, HW.
  apply N.leb_le in HEv1.
  pose proof (Q_lt_1_R Ev HEvu) as HEvR; pose proof (Q_lt_1_Q Ev HEvu) as HEvQ.
  pose proof (Q_lt_1_R gk Hgk) as HgkR; pose proof (Q_lt_1_Q gk Hgk) as HgkQ.
  pose proof (ff_u_nonneg (mp_a M)) as Hu0; pose proof (ff_eta_nonneg (mp_a M)) as Hea0.
  assert (HEv1R : INR (N.to_nat Ev - 1) * ff_u (mp_a M) < 1).
  { assert (INR (N.to_nat Ev - 1) <= INR (N.to_nat Ev)) by (apply le_INR; lia). nra. }
  assert (HEv1Q : (Q_of_N (Ev - 1) * u < 1)%Q).
  { apply Rlt_Qlt; rewrite Q2R_mult, Q2R_of_N, Q2R_1, Hu, Nnat.N2Nat.inj_sub; exact HEv1R. }
  destruct (attn_lse_q u ue ee ea el ucl uc scale P LN E B Nk Tt) as [Lb |] eqn:ELb; [| discriminate].
  destruct (attn_fwd_post_q u ue ee ea us es uc scale P V E B Nk Tt) as [[r' a'] |] eqn:Era; [| discriminate].
  destruct (Qle_bool 0 Lb && Qle_bool Lb 1) eqn:ELb01; [| discriminate].
  apply andb_true_iff in ELb01; destruct ELb01 as [HLb0 HLb1].
  apply Qle_bool_R in HLb0, HLb1; rewrite Q2R_0 in HLb0; rewrite Q2R_1 in HLb1.
  set (x := (2 * (score_delta_q u ea scale uc E P + (Lb + (Lm + Lb) * (u * (1 + uc2) + uc2) + ea))
             + u * (score_max_q u ea scale uc E P + (2 * ((1 + uc2) * (Lm + Lb)) * (1 + u) + ea)) + ea)%Q) in H.
  destruct (perturbation_q (x / 2)) as [e |] eqn:Ee; [| discriminate].
  destruct (negb (Qle_bool 0 x)) eqn:Ex0; [discriminate |].
  apply negb_false_iff, Qle_bool_R in Ex0; rewrite Q2R_0 in Ex0.
  destruct (Qle_bool 0 (round_up prec (chain_c3_q u us scale ucs (gamma_q u gk) ((1 + ue) * (1 + e))))) eqn:Ec3;
    [| discriminate].
  injection H as <- <- <- <- <- <- <- <- <-.
  apply Qle_bool_R in Ec3; rewrite Q2R_0 in Ec3.
  destruct (attn_lse_q_spec M u ue ee ea uc scale P E B Nk Tt Hu Hue Hee Hea el ucl LN Lb ELb)
    as [HE1 [HEu [Hs [Huc [HB1 [Hucl [HLN [XL [P1L [CGL [CRL [NL [HXL [HP1L [HGL [HCL [HbL [HNL [HLbnd [Hlmin Hlmax]]]]]]]]]]]]]]]]]]]].
  destruct (attn_fwd_post_q_spec M u ue ee ea us es uc scale P V E B Nk Tt Hu Hue Hee Hea Hus Hes r' a' Era)
    as [_ [_ [HV [_ [_ [_ [X0 [Y [P1 [CG [CR [HX0 [HY [HP1 [HG [HC [HbL0 [Hr Ha]]]]]]]]]]]]]]]]]].
  assert (HEQ : (Q_of_N E * u < 1)%Q).
  { apply Rlt_Qlt; rewrite Q2R_mult, Q2R_of_N, Q2R_1, Hu; exact HEu. }
  split; [lia | split; [exact HEvR | split; [exact HEv1R | split; [exact HgkR |]]]].
  split; [exact Huc2 | split; [exact Hucs | split; [exact HPd | split; [exact HYm | split; [exact HW | split; [exact Ec3 |]]]]]].
  (* [x] in the reals, and [X = 1 + e >= e^x >= 2^x] *)
  assert (HxR : Q2R x = 2 * (score_delta (mp_a M) (Q2R scale) (Q2R uc) (N.to_nat E) (Q2R P)
                             + chain_Dl M (Q2R uc2) (Q2R Lb) (Q2R Lm))
                        + ff_u (mp_a M) * chain_Am M (Q2R uc2) (score_max (mp_a M) (Q2R scale) (Q2R uc) (N.to_nat E) (Q2R P))
                                             (Q2R Lb) (Q2R Lm) + ff_eta (mp_a M)).
  { unfold x, chain_Dl, chain_Am.
    repeat rewrite ?Q2R_plus, ?Q2R_mult, ?Q2R_1, ?Q2R_2.
    rewrite (Q2R_score_delta M u ea uc scale P E Hu Hea HEQ), (Q2R_score_max M u ea uc scale P E Hu Hea HEQ), Hu, Hea.
    reflexivity. }
  assert (HX : exp (Q2R x) <= Q2R (1 + e)).
  { pose proof (perturbation_q_ge _ _ Ee) as He.
    replace (2 * Q2R (x / 2)) with (Q2R x) in He
      by (rewrite Q2R_div by (intro Hq; discriminate Hq); rewrite Q2R_2; field).
    rewrite Q2R_plus, Q2R_1; lra. }
  exists (Q2R Lb), (Q2R (1 + e)).
  split; [| split; [| split]].
  - intros c cl Hcl Hc; split.
    + exists X0, Y, P1, CG, CR; split; [| split; assumption].
      constructor; auto.
    + exists XL, P1L, CGL, CRL, NL.
      assert (/ 2 <= / (1 + Q2R Lb)) by (apply Rinv_le_contravar; lra).
      assert ((1 + Q2R Lb) * exp (Q2R LN) <= 2 * exp (Q2R LN))
        by (apply Rmult_le_compat_r; [left; apply exp_pos | lra]).
      repeat split; try assumption; lra.
    + exact Hucl.
    + exact Hcl.
    + exact HLN.
  - rewrite <- HxR; eapply Rle_trans; [apply rpower2_le_exp, Ex0 | exact HX].
  - intros S1 S2 S3 eDm HS1 HS2 HS3 HeDm g EX eP.
    destruct (Q2R_chain_coefs (gamma_q u gk) ((1 + ue) * (1 + e)) (dot_err_q u ea Ev Pd) (Q_of_N n))
      as [E1 [E2 [E3 [E0 ED]]]].
    rewrite (gamma_q_correct u gk HgkQ), Hu in E1, E2, E3, E0, ED.
    rewrite (Q2R_dot_err M u ea Pd Ev Hu Hea HEvQ) in E2, E0.
    rewrite Q2R_of_N in E0, ED.
    rewrite Q2R_mult, (Q2R_plus 1 ue), Q2R_1, Hue in E1, E2, E3.
    fold g EX eP in E1, E2, E3, E0, ED.
    pose proof (Qle_R _ _ (round_up_ge prec (chain_c1_q u us scale ucs (gamma_q u gk) ((1 + ue) * (1 + e))))) as R1.
    pose proof (Qle_R _ _ (round_up_ge prec (chain_c2_q u ea us scale ucs (gamma_q u gk) ((1 + ue) * (1 + e))
                                              (dot_err_q u ea Ev Pd)))) as R2.
    pose proof (Qle_R _ _ (round_up_ge prec (chain_c3_q u us scale ucs (gamma_q u gk) ((1 + ue) * (1 + e))))) as R3.
    pose proof (Qle_R _ _ (round_up_ge prec (chain_c0_q u ea us es ee scale ucs (gamma_q u gk) (dot_err_q u ea Ev Pd)
                                              Ym W (Q_of_N n)))) as R0.
    pose proof (Qle_R _ _ (round_up_ge prec (chain_cD_q u us ee scale ucs (gamma_q u gk) W (Q_of_N n)))) as RD.
    rewrite E1 in R1; rewrite E2 in R2; rewrite E3 in R3; rewrite E0 in R0; rewrite ED in RD.
    apply Rmult_le_compat_r with (r := S1) in R1; [| exact HS1].
    apply Rmult_le_compat_r with (r := S2) in R2; [| exact HS2].
    apply Rmult_le_compat_r with (r := S3) in R3; [| exact HS3].
    apply Rmult_le_compat_r with (r := eDm) in RD; [| exact HeDm].
    lra.
  - intros T1 HT1.
    pose proof (Qle_R _ _ (round_up_ge prec ((gamma_q u (Ev - 1) + 1) * Q_of_N Ev * ea))) as R0.
    pose proof (Qle_R _ _ (round_up_ge prec (gamma_q u (Ev - 1) * (1 + u) + u))) as R1.
    rewrite Q2R_mult, Q2R_mult, Q2R_plus, Q2R_1, Q2R_of_N, (gamma_q_correct u (Ev - 1) HEv1Q), Hu, Hea,
      Nnat.N2Nat.inj_sub in R0.
    rewrite Q2R_plus, Q2R_mult, Q2R_plus, Q2R_1, (gamma_q_correct u (Ev - 1) HEv1Q), Hu, Nnat.N2Nat.inj_sub in R1.
    change (N.to_nat 1) with 1%nat in R0, R1.
    apply Rmult_le_compat_r with (r := T1) in R1; [| exact HT1].
    lra.
Qed.

(** dQ, one query row: the kernel's coordinate within
    [c1 S1 + c2 S2 + c3 eD S2 + c0 + cD eD] of the exact one ([dq_error_from_forward]). *)
Theorem attn_dq_chain_q_sound : forall c1 c2 c3 c0 cD d0 d1 r a,
  attn_grad_chain_q u ue ee ea us es uc scale P V el ucl LN uc2 ucs Lm Pd Ym W E B Nk Tt Ev gk n
  = Some (c1, c2, c3, c0, cD, d0, d1, r, a) ->
  forall (lg : R -> R) (c cl c2' cs : R) (q dO : list R) (fvis : nat -> list R * R -> bool)
    (fts : nat -> list (list (list R * R))) (shape : stree) (bvis : list R * list R -> bool) (e : nat)
    (btiles : list (list (list R * list R))) (bk : nat),
  (forall x, / 2 <= x <= 2 * exp (Q2R LN) -> Rabs (lg x - ln x / ln 2) <= Q2R el) ->
  Rabs (cl - ln 2) <= Q2R ucl * ln 2 -> Rabs (c * ln 2 - Q2R scale) <= Q2R uc * Q2R scale ->
  Rabs (c2' * ln 2 - 1) <= Q2R uc2 -> Rabs (cs - Q2R scale) <= Q2R ucs * Q2R scale ->
  mp_exp2 M 0 = 1 ->
  fwd_row_ok q (N.to_nat E) (N.to_nat B) (N.to_nat Nk) (N.to_nat Tt) (Q2R P) (Q2R V) fvis fts (N.to_nat Ev) ->
  Rabs (fwd_LSE (Q2R scale) q (fvis 0%nat) (fts 0%nat)) <= Q2R Lm ->
  leaves shape = dot_terms (mp_a M) (fwd_o M c q fvis fts (N.to_nat Ev)) dO ->
  (depth shape <= N.to_nat Ev - 1)%nat -> length dO = N.to_nat Ev ->
  Forall (fun tl => (length tl <= bk)%nat) btiles -> ((bk - 1) + (length btiles - 1))%nat = N.to_nat gk ->
  length (concat btiles) = N.to_nat n ->
  (forall y, In y (concat btiles) -> bvis y = true ->
     length (fst y) = N.to_nat E /\ dot_abs q (fst y) <= Q2R P
     /\ length (snd y) = N.to_nat Ev /\ dot_abs dO (snd y) <= Q2R Pd
     /\ Rabs (dot_R dO (snd y) - dot_R (fwd_O (Q2R scale) q fvis fts (N.to_nat Ev)) dO) <= Q2R Ym
     /\ Rabs (nth e (fst y) 0) <= Q2R W) ->
  let LSE := fwd_LSE (Q2R scale) q (fvis 0%nat) (fts 0%nat) in
  let D := dot_R (fwd_O (Q2R scale) q fvis fts (N.to_nat Ev)) dO in
  let eD := Q2R d0 + Q2R d1 * dot_abs (fwd_o M c q fvis fts (N.to_nat Ev)) dO
            + dot_R (map (fun w => Q2R r * w + Q2R a) (fwd_W (Q2R scale) q fvis fts (N.to_nat Ev))) (map Rabs dO) in
  let Pr := fun y => exp (Q2R scale * dot_R q (fst y) - LSE) in
  let S1 := rsum (map (fun y => if bvis y then Pr y * Rabs (dot_R dO (snd y) - D) * Rabs (nth e (fst y) 0) else 0)
                      (concat btiles)) in
  let S2 := rsum (map (fun y => if bvis y then Pr y * Rabs (nth e (fst y) 0) else 0) (concat btiles)) in
  Rabs (dq_kernel M bvis c cs q dO (ff_rnd (mp_a M) (fwd_lse M lg c cl q (fvis 0%nat) (fts 0%nat) * c2'))
          (tree_sum (mp_a M) shape) e btiles
        - Q2R scale * rsum (map (fun y => if bvis y then Pr y * (dot_R dO (snd y) - D) * nth e (fst y) 0 else 0)
                              (concat btiles)))
  <= Q2R c1 * S1 + Q2R c2 * S2 + Q2R c3 * (eD * S2) + Q2R c0 + Q2R cD * eD.
Proof.
  intros c1 c2 c3 c0 cD d0 d1 r a H lg c cl c2' cs q dO fvis fts shape bvis e btiles bk
    Hlg Hcl Hc Hc2 Hcs Hexp0 Hrow HLm Hshape Hdepth HdO HBt Hgk Hn Hkeys LSE D eD Pr S1 S2.
  destruct (attn_grad_chain_q_spec c1 c2 c3 c0 cD d0 d1 r a H)
    as [HEv1 [HEvu [HEv1u [Hgku [Huc2 [Hucs [HPd [HYm [HW [Hc3 [Lb [X [Hfc [HX [Hco Hd]]]]]]]]]]]]]]].
  pose proof (Hfc c cl Hcl Hc) as Hcs'.
  pose proof (Hd _ (dot_abs_nonneg (fwd_o M c q fvis fts (N.to_nat Ev)) dO)) as Hd'.
  assert (HeD : chain_eD M (N.to_nat Ev - 1) (N.to_nat Ev) (dot_abs (fwd_o M c q fvis fts (N.to_nat Ev)) dO)
                  (Q2R r) (Q2R a) (fwd_W (Q2R scale) q fvis fts (N.to_nat Ev)) dO <= eD)
    by (unfold chain_eD, eD; lra).
  destruct (forward_row_close M lg (Q2R el) (/ 2) (2 * exp (Q2R LN)) Hlg q dO c (Q2R scale) (Q2R uc) (Q2R P) (Q2R V)
              cl (Q2R ucl) (Q2R LN) Lb (Q2R r) (Q2R a) c2' (Q2R uc2) (Q2R Lm)
              (N.to_nat E) (N.to_nat B) (N.to_nat Nk) (N.to_nat Tt) (N.to_nat Ev) (N.to_nat Ev - 1) fvis fts shape
              Hcs' Hexp0 Hrow HLm Hshape Hdepth HEv1u HdO HEv1 Huc2 Hc2) as [_ [_ Hdl]].
  assert (HeD0 : 0 <= eD) by (pose proof (Rabs_pos (tree_sum (mp_a M) shape - D)); unfold D in *; lra).
  pose proof (dq_error_from_forward M lg (Q2R el) (/ 2) (2 * exp (Q2R LN)) Hlg q dO c (Q2R scale) (Q2R uc) (Q2R P)
                (Q2R V) cl (Q2R ucl) (Q2R LN) Lb (Q2R r) (Q2R a) c2' (Q2R uc2) (Q2R Lm)
                (N.to_nat E) (N.to_nat B) (N.to_nat Nk) (N.to_nat Tt) (N.to_nat Ev) (N.to_nat Ev - 1)
                fvis fts shape bvis cs (Q2R ucs) e btiles X (Q2R Pd) eD (Q2R Ym) (Q2R W) bk
                Hcs' Hexp0 Hrow HLm Hshape Hdepth HEv1u HeD Huc2 Hc2 Hucs Hcs HPd HYm HW HdO HEv1 HEvu HBt
                ltac:(rewrite Hgk; exact Hgku) Hkeys HX) as Hth.
  cbv zeta in Hth; eapply Rle_trans; [exact Hth |].
  rewrite Hgk, Hn.
  rewrite (grad_bound_linear M _ _ _ _ _ _ _ _ _ S2 (eD * S2)).
  2: { rewrite rsum_if_const; unfold S2, Pr, LSE; ring. }
  assert (HS1 : 0 <= S1).
  { apply rsum_if_nonneg; intros y _ _; apply Rmult_le_pos; [apply Rmult_le_pos; [left; apply exp_pos |] |];
      apply Rabs_pos. }
  assert (HS2 : 0 <= S2).
  { apply rsum_if_nonneg; intros y _ _; apply Rmult_le_pos; [left; apply exp_pos | apply Rabs_pos]. }
  exact (Hco S1 S2 (eD * S2) eD HS1 HS2 (Rmult_le_pos _ _ HeD0 HS2) HeD0).
Qed.

(** dK, one key ([dk_kernel_rows]: its rows, of any type, each with its own forward): the
    kernel's coordinate within [c1 S1 + c2 S2 + c3 S3 + c0 + cD eDm] of the exact one, [S3] over
    each row's [eD] and [eDm] at least every visible row's ([dk_error_from_forward]). *)
Theorem attn_dk_chain_q_sound : forall c1 c2 c3 c0 cD d0 d1 r a,
  attn_grad_chain_q u ue ee ea us es uc scale P V el ucl LN uc2 ucs Lm Pd Ym W E B Nk Tt Ev gk n
  = Some (c1, c2, c3, c0, cD, d0, d1, r, a) ->
  forall {T : Type} (rq rdO : T -> list R) (rfvis : T -> nat -> list R * R -> bool)
    (rfts : T -> nat -> list (list (list R * R))) (rshape : T -> stree) (rvis : T -> bool)
    (lg : R -> R) (c cl c2' cs : R) (k v : list R) (e : nat) (rtiles : list (list T)) (bk : nat) (eDm : R),
  (forall x, / 2 <= x <= 2 * exp (Q2R LN) -> Rabs (lg x - ln x / ln 2) <= Q2R el) ->
  Rabs (cl - ln 2) <= Q2R ucl * ln 2 -> Rabs (c * ln 2 - Q2R scale) <= Q2R uc * Q2R scale ->
  Rabs (c2' * ln 2 - 1) <= Q2R uc2 -> Rabs (cs - Q2R scale) <= Q2R ucs * Q2R scale ->
  mp_exp2 M 0 = 1 -> length k = N.to_nat E -> length v = N.to_nat Ev ->
  Forall (fun tl => (length tl <= bk)%nat) rtiles -> ((bk - 1) + (length rtiles - 1))%nat = N.to_nat gk ->
  length (concat rtiles) = N.to_nat n -> 0 <= eDm ->
  let Lx := fun x => fwd_LSE (Q2R scale) (rq x) (rfvis x 0%nat) (rfts x 0%nat) in
  let Dx := fun x => dot_R (fwd_O (Q2R scale) (rq x) (rfvis x) (rfts x) (N.to_nat Ev)) (rdO x) in
  let eD := fun x => Q2R d0 + Q2R d1 * dot_abs (fwd_o M c (rq x) (rfvis x) (rfts x) (N.to_nat Ev)) (rdO x)
            + dot_R (map (fun w => Q2R r * w + Q2R a) (fwd_W (Q2R scale) (rq x) (rfvis x) (rfts x) (N.to_nat Ev)))
                    (map Rabs (rdO x)) in
  (forall x, In x (concat rtiles) -> rvis x = true ->
     fwd_row_ok (rq x) (N.to_nat E) (N.to_nat B) (N.to_nat Nk) (N.to_nat Tt) (Q2R P) (Q2R V) (rfvis x) (rfts x)
       (N.to_nat Ev)
     /\ dot_abs k (rq x) <= Q2R P /\ Rabs (Lx x) <= Q2R Lm
     /\ leaves (rshape x) = dot_terms (mp_a M) (fwd_o M c (rq x) (rfvis x) (rfts x) (N.to_nat Ev)) (rdO x)
     /\ (depth (rshape x) <= N.to_nat Ev - 1)%nat /\ eD x <= eDm
     /\ length (rdO x) = N.to_nat Ev /\ dot_abs v (rdO x) <= Q2R Pd
     /\ Rabs (dot_R v (rdO x) - Dx x) <= Q2R Ym /\ Rabs (nth e (rq x) 0) <= Q2R W) ->
  let Pr := fun x => exp (Q2R scale * dot_R k (rq x) - Lx x) in
  let S1 := rsum (map (fun x => if rvis x then Pr x * Rabs (dot_R v (rdO x) - Dx x) * Rabs (nth e (rq x) 0) else 0)
                      (concat rtiles)) in
  let S2 := rsum (map (fun x => if rvis x then Pr x * Rabs (nth e (rq x) 0) else 0) (concat rtiles)) in
  let S3 := rsum (map (fun x => if rvis x then Pr x * eD x * Rabs (nth e (rq x) 0) else 0) (concat rtiles)) in
  Rabs (dk_kernel_rows M lg rq rdO rfvis rfts rshape rvis c cl c2' cs k v e rtiles
        - Q2R scale * rsum (map (fun x => if rvis x then Pr x * (dot_R v (rdO x) - Dx x) * nth e (rq x) 0 else 0)
                              (concat rtiles)))
  <= Q2R c1 * S1 + Q2R c2 * S2 + Q2R c3 * S3 + Q2R c0 + Q2R cD * eDm.
Proof.
  intros c1 c2 c3 c0 cD d0 d1 r a H T rq rdO rfvis rfts rshape rvis lg c cl c2' cs k v e rtiles bk eDm
    Hlg Hcl Hc Hc2 Hcs Hexp0 Hk Hv HBt Hgk Hn HeDm Lx Dx eD Hrows Pr S1 S2 S3.
  destruct (attn_grad_chain_q_spec c1 c2 c3 c0 cD d0 d1 r a H)
    as [HEv1 [HEvu [HEv1u [Hgku [Huc2 [Hucs [HPd [HYm [HW [Hc3 [Lb [X [Hfc [HX [Hco Hd]]]]]]]]]]]]]]].
  pose proof (Hfc c cl Hcl Hc) as Hcs'.
  set (eDr := fun x => chain_eD M (N.to_nat Ev - 1) (N.to_nat Ev)
                         (dot_abs (fwd_o M c (rq x) (rfvis x) (rfts x) (N.to_nat Ev)) (rdO x)) (Q2R r) (Q2R a)
                         (fwd_W (Q2R scale) (rq x) (rfvis x) (rfts x) (N.to_nat Ev)) (rdO x)).
  assert (HeDr : forall x, eDr x <= eD x).
  { intros x; pose proof (Hd _ (dot_abs_nonneg (fwd_o M c (rq x) (rfvis x) (rfts x) (N.to_nat Ev)) (rdO x))).
    unfold eDr, eD, chain_eD; lra. }
  assert (HeDr0 : forall x, In x (concat rtiles) -> rvis x = true -> 0 <= eDr x).
  { intros x Hin Hvis.
    destruct (Hrows x Hin Hvis) as [Hrow [_ [HLx [Hsh [Hdep [_ [HdOx _]]]]]]].
    destruct (forward_row_close M lg (Q2R el) (/ 2) (2 * exp (Q2R LN)) Hlg (rq x) (rdO x) c (Q2R scale) (Q2R uc)
                (Q2R P) (Q2R V) cl (Q2R ucl) (Q2R LN) Lb (Q2R r) (Q2R a) c2' (Q2R uc2) (Q2R Lm)
                (N.to_nat E) (N.to_nat B) (N.to_nat Nk) (N.to_nat Tt) (N.to_nat Ev) (N.to_nat Ev - 1)
                (rfvis x) (rfts x) (rshape x) Hcs' Hexp0 Hrow HLx Hsh Hdep HEv1u HdOx HEv1 Huc2 Hc2) as [_ [_ Hdl]].
    pose proof (Rabs_pos (tree_sum (mp_a M) (rshape x) - dot_R (fwd_O (Q2R scale) (rq x) (rfvis x) (rfts x) (N.to_nat Ev)) (rdO x))).
    unfold eDr; lra. }
  assert (Hrows' : forall x, In x (concat rtiles) -> rvis x = true ->
     fwd_row_ok (rq x) (N.to_nat E) (N.to_nat B) (N.to_nat Nk) (N.to_nat Tt) (Q2R P) (Q2R V) (rfvis x) (rfts x)
       (N.to_nat Ev)
     /\ dot_abs k (rq x) <= Q2R P /\ Rabs (Lx x) <= Q2R Lm
     /\ leaves (rshape x) = dot_terms (mp_a M) (fwd_o M c (rq x) (rfvis x) (rfts x) (N.to_nat Ev)) (rdO x)
     /\ (depth (rshape x) <= N.to_nat Ev - 1)%nat /\ eDr x <= eDm
     /\ length (rdO x) = N.to_nat Ev /\ dot_abs v (rdO x) <= Q2R Pd
     /\ Rabs (dot_R v (rdO x) - Dx x) <= Q2R Ym /\ Rabs (nth e (rq x) 0) <= Q2R W).
  { intros x Hin Hvis; destruct (Hrows x Hin Hvis) as [A1 [A2 [A3 [A4 [A5 [A6 A7]]]]]].
    split; [exact A1 | split; [exact A2 | split; [exact A3 | split; [exact A4 | split; [exact A5 |]]]]].
    split; [eapply Rle_trans; [apply HeDr | exact A6] | exact A7]. }
  pose proof (dk_error_from_forward M lg (Q2R el) (/ 2) (2 * exp (Q2R LN)) Hlg rq rdO rfvis rfts rshape rvis
                c (Q2R scale) (Q2R uc) (Q2R P) (Q2R V) cl (Q2R ucl) (Q2R LN) Lb (Q2R r) (Q2R a) c2' (Q2R uc2) (Q2R Lm)
                cs (Q2R ucs) k v e rtiles
                (N.to_nat E) (N.to_nat B) (N.to_nat Nk) (N.to_nat Tt) (N.to_nat Ev) (N.to_nat Ev - 1)
                X (Q2R Pd) eDm (Q2R Ym) (Q2R W) bk
                Hcs' Hexp0 Huc2 Hc2 Hucs Hcs HPd HeDm HYm HW Hk Hv HEv1 HEvu HEv1u HBt
                ltac:(rewrite Hgk; exact Hgku) Hrows' HX) as Hth.
  cbv zeta in Hth; eapply Rle_trans; [exact Hth |].
  rewrite Hgk, Hn.
  set (S3r := rsum (map (fun x => if rvis x then Pr x * eDr x * Rabs (nth e (rq x) 0) else 0) (concat rtiles))).
  rewrite (grad_bound_linear M _ _ _ _ _ _ _ _ _ S2 S3r).
  2: { rewrite rsum_if_affine; unfold S2, S3r, Pr, Lx, eDr; reflexivity. }
  assert (HS1 : 0 <= S1).
  { apply rsum_if_nonneg; intros y _ _; apply Rmult_le_pos; [apply Rmult_le_pos; [left; apply exp_pos |] |];
      apply Rabs_pos. }
  assert (HS2 : 0 <= S2).
  { apply rsum_if_nonneg; intros y _ _; apply Rmult_le_pos; [left; apply exp_pos | apply Rabs_pos]. }
  assert (HS3r : 0 <= S3r).
  { apply rsum_if_nonneg; intros y Hin Hvis; apply Rmult_le_pos; [apply Rmult_le_pos; [left; apply exp_pos |] |].
    - exact (HeDr0 y Hin Hvis).
    - apply Rabs_pos. }
  assert (HS3 : S3r <= S3).
  { apply rsum_map_le_pt; intros x _; destruct (rvis x); [| lra].
    apply Rmult_le_compat_r; [apply Rabs_pos |]; apply Rmult_le_compat_l; [left; apply exp_pos | apply HeDr]. }
  pose proof (Hco S1 S2 S3r eDm HS1 HS2 HS3r HeDm) as Hcf.
  assert (Q2R c3 * S3r <= Q2R c3 * S3) by (apply Rmult_le_compat_l; assumption).
  cbv zeta in Hcf; eapply Rle_trans; [exact Hcf | lra].
Qed.

End ChainQ.
