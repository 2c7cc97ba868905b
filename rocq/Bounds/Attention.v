(** * Computable bounds of attention in mixed precision (forward output, a-posteriori, lse).

    - [attn_fwd_q]: the bound [afe_rel] of
      [Attention.Float.ForwardError.attention_forward_error] (forward
      attention in mixed precision, the rounding of the scores included),
      its upper bounds [X >= 2^(u K)] ([exp_up]), [Y >= exp (2 delta) - 1]
      ([perturbation_q]) and the powers ([pow_up_N]) computed here, the rest
      exactly, the result rounded up; [attn_fwd_q_sound]: whenever it is
      [Some b], [b * V] bounds the error of the kernel's output coordinate
      on fully visible tiles, [attn_fwd_q_sound_masked]: of the kernel's
      whole loop under any mask ([attention_forward_error_masked]); the
      checks and the upper bounds are [afe_consts] ([afe_consts_spec]);
    - [attn_fwd_post_q]: the pair [afp_rel], [afp_abs] of
      [Attention.Float.ForwardPosteriori.attention_forward_posteriori] at
      the same [afe_consts], each rounded up; [attn_fwd_post_q_sound]: whenever
      it is [Some (r, a)], [r W + a] ([W = sum_j P_j |v_j|]) bounds the error of
      the kernel's output coordinate on fully visible tiles,
      [attn_fwd_post_q_sound_masked]: of the kernel's whole loop under any mask
      ([attention_forward_posteriori_masked]);
    - [attn_lse_q]: the bound [lse_bound] of
      [Attention.Float.SavedLseError.attention_lse_error] on the saved lse,
      [ln N <= LN] checked by [exp_dn], [- ln (1 - bL) <= bL / (1 - bL)]
      ([afe_neg_ln_le]); [attn_lse_q_sound], [attn_lse_q_sound_masked]. *)

From Coq Require Import Reals QArith Qreals Lra Lia ZArith List.
From Ojas Require Import FloatModel.DotError FloatModel.MixedPrecision Attention.Float.OnlineSoftmaxTile.
From Ojas Require Import Attention.Float.ForwardError Attention.Float.SavedLseError.
From Ojas Require Import Attention.Float.ForwardPosteriori.
From Ojas Require Import Bounds.Rational Bounds.Sums Bounds.Softmax.

Local Open Scope Q_scope.
Local Open Scope R_scope.

(** ** Forward attention: the value of [afe_rel] *)

Local Open Scope Q_scope.

Definition afe_bL_q (u ue ee ea : Q) (B Nk Tt : N) (X P1 CG CR : Q) : Q :=
  let H := P1 * ((1 + ue) * X) in
  H * CG * X - 1 + Q_of_N Tt * CR * (((H * CG * X) * Q_of_N Nk * ee) * (1 + u) + ea + P1 * (Q_of_N B * ee)) * (1 + u).

(** [afp_gA], [afp_rA] of Attention/Float/ForwardPosteriori.v: the acc fold's factor minus one
    and its absolute term; [afe_bN = afp_gA + afp_rA / V]. *)
Definition afp_gA_q (u ue us X P1 CG : Q) : Q := P1 * ((1 + u) * (1 + us) * ((1 + ue) * X)) * CG * X - 1.

Definition afp_rA_q (u ue ee ea us es V : Q) (B Nk Tt : N) (X P1 CG CR : Q) : Q :=
  let H := P1 * ((1 + u) * (1 + us) * ((1 + ue) * X)) in
  Q_of_N Tt * CR * ((((H * CG * X) * (Q_of_N Nk * V) * ee) * (1 + u) + ea
                     + P1 * ((1 + u) * ((1 + us) * ee + es) * (Q_of_N B * V) + Q_of_N B * ea)) * (1 + u)).

Definition afe_bN_q (u ue ee ea us es V : Q) (B Nk Tt : N) (X P1 CG CR : Q) : Q :=
  afp_gA_q u ue us X P1 CG + afp_rA_q u ue ee ea us es V B Nk Tt X P1 CG CR / V.

Definition afe_rel_q (u ue ee ea us es V : Q) (B Nk Tt : N) (X Y P1 CG CR : Q) : Q :=
  let bL := afe_bL_q u ue ee ea B Nk Tt X P1 CG CR in
  let bN := afe_bN_q u ue ee ea us es V B Nk Tt X P1 CG CR in
  ((((bN + bL) + u * (1 + bN)) / (1 - bL) + ea / V + Y) * (1 + us) + us + es / V).

Definition dot_err_q (u ea : Q) (E : N) (P : Q) : Q :=
  gamma_q u E * P + (1 + gamma_q u (E - 1)) * Q_of_N E * ea.

Definition score_max_q (u ea scale uc : Q) (E : N) (P : Q) : Q :=
  2 * (scale * (1 + uc) * (P + dot_err_q u ea E P)) * (1 + u) + ea.

Definition score_delta_q (u ea scale uc : Q) (E : N) (P : Q) : Q :=
  scale * ((P + dot_err_q u ea E P) * (u * (1 + uc) + uc) + dot_err_q u ea E P) + ea.

Definition afe_ok (u ue ee ea us es uc scale P V : Q) (E B : N) : bool :=
  Qle_bool 0 u && Qle_bool 0 ue && Qle_bool 0 ee && Qle_bool 0 ea && Qle_bool 0 us
  && Qle_bool 0 es && Qle_bool 0 uc && Qle_bool 0 P && negb (Qle_bool scale 0)
  && negb (Qle_bool V 0) && negb (Qle_bool 1 (Q_of_N E * u)) && N.leb 1 E && N.leb 1 B.

(** The upper bounds [(X, Y, P1, CG, CR)] of [2^(u K)], [exp (2 delta) - 1] and the
    powers at which [afe_rel] and [afp_rel] / [afp_abs] are evaluated, or [None] when a
    check or the side condition [afe_bL < 1] fails. *)
Definition afe_consts (u ue ee ea us es uc scale P V : Q) (E B Nk Tt : N) : option (Q * Q * Q * Q * Q) :=
  if afe_ok u ue ee ea us es uc scale P V E B then
    match exp_up prec exp_steps (u * (2 * score_max_q u ea scale uc E P)),
          perturbation_q (score_delta_q u ea scale uc E P) with
    | Some X, Some Y =>
      let P1 := pow_up_N prec (1 + u) (B - 1) in
      let CG := pow_up_N prec ((1 + ue) * ((1 + u) * (1 + u))) Tt in
      let CR := pow_up_N prec ((1 + ue + ee) * ((1 + u) * (1 + u))) Tt in
      if Qlt_le_dec (afe_bL_q u ue ee ea B Nk Tt X P1 CG CR) 1 then Some (X, Y, P1, CG, CR) else None
    | _, _ => None
    end
  else None.

(** [Some b] with [b >= afe_rel] at the model's constants, or [None]. *)
Definition attn_fwd_q (u ue ee ea us es uc scale P V : Q) (E B Nk Tt : N) : option Q :=
  match afe_consts u ue ee ea us es uc scale P V E B Nk Tt with
  | Some (X, Y, P1, CG, CR) => Some (round_up prec (afe_rel_q u ue ee ea us es V B Nk Tt X Y P1 CG CR))
  | None => None
  end.

(** [afp_rel], [afp_abs] of Attention/Float/ForwardPosteriori.v. *)
Definition afp_rel_q (u ue ee ea us : Q) (B Nk Tt : N) (X Y P1 CG CR : Q) : Q :=
  let bL := afe_bL_q u ue ee ea B Nk Tt X P1 CG CR in
  ((1 + u) * (afp_gA_q u ue us X P1 CG + bL) * (1 + Y) / (1 - bL) + u * (1 + Y) + Y) * (1 + us) + us.

Definition afp_abs_q (u ue ee ea us es V : Q) (B Nk Tt : N) (X P1 CG CR : Q) : Q :=
  let bL := afe_bL_q u ue ee ea B Nk Tt X P1 CG CR in
  ((1 + u) * afp_rA_q u ue ee ea us es V B Nk Tt X P1 CG CR / (1 - bL) + ea) * (1 + us) + es.

(** [Some (r, a)] with [r >= afp_rel] and [a >= afp_abs] at the same constants as
    [attn_fwd_q], or [None]. *)
Definition attn_fwd_post_q (u ue ee ea us es uc scale P V : Q) (E B Nk Tt : N) : option (Q * Q) :=
  match afe_consts u ue ee ea us es uc scale P V E B Nk Tt with
  | Some (X, Y, P1, CG, CR) =>
    Some (round_up prec (afp_rel_q u ue ee ea us B Nk Tt X Y P1 CG CR),
          round_up prec (afp_abs_q u ue ee ea us es V B Nk Tt X P1 CG CR))
  | None => None
  end.

Definition lse_bound_q (u ea el ucl smax delta LN NL : Q) : Q :=
  let A := smax + 2 * (LN + NL) + el in
  let A2 := (1 + u) * A + ea in
  u * A2 * (1 + ucl) + ea + A2 * ucl + (u * A + ea) + el + NL + delta.

(** [Some b] with [b >= lse_bound] of [attention_lse_error] at the model's
    constants, [LN] checked ([ln N <= LN]: [N <= exp_dn LN]), [NL = bL / (1 - bL)]
    ([>= - ln (1 - bL)]), or [None]. *)
Definition attn_lse_q (u ue ee ea el ucl uc scale P LN : Q) (E B Nk Tt : N) : option Q :=
  if afe_ok u ue ee ea 0 0 uc scale P 1 E B && Qle_bool 0 el && Qle_bool 0 ucl && N.leb 1 Nk
     && Qle_bool (Q_of_N Nk) (exp_dn prec exp_steps LN) then
    match exp_up prec exp_steps (u * (2 * score_max_q u ea scale uc E P)) with
    | Some X =>
      let P1 := pow_up_N prec (1 + u) (B - 1) in
      let CG := pow_up_N prec ((1 + ue) * ((1 + u) * (1 + u))) Tt in
      let CR := pow_up_N prec ((1 + ue + ee) * ((1 + u) * (1 + u))) Tt in
      let bL := afe_bL_q u ue ee ea B Nk Tt X P1 CG CR in
      if Qlt_le_dec bL 1 then
        Some (round_up prec (lse_bound_q u ea el ucl (score_max_q u ea scale uc E P)
                               (score_delta_q u ea scale uc E P) LN (bL / (1 - bL))))
      else None
    | None => None
    end
  else None.

Local Open Scope R_scope.

(** A range for [tl.log]'s accuracy premise: [[1 / (1 + B), (1 + B) e^LN]] holds
    [[1 - bL, (1 + bL) e^LN]] whenever [bL / (1 - bL) <= B]: [1 - bL = 1 / (1 + NL)] and
    [bL <= NL <= B] at [NL = bL / (1 - bL)]. *)
Lemma log_range_of_NL : forall bL Bd LN, 0 <= bL < 1 -> bL / (1 - bL) <= Bd ->
  / (1 + Bd) <= 1 - bL /\ (1 + bL) * exp LN <= (1 + Bd) * exp LN.
Proof.
  intros bL Bd LN [Hb0 Hb1] HB.
  set (NL := bL / (1 - bL)) in *.
  assert (ENL : NL * (1 - bL) = bL) by (unfold NL; field; lra).
  assert (HNL0 : 0 <= NL) by (unfold NL; apply Rmult_le_pos; [lra | left; apply Rinv_0_lt_compat; lra]).
  assert (HbN : bL <= NL) by nra.
  split.
  - apply Rmult_le_reg_r with (1 + Bd); [lra |]; rewrite Rinv_l by lra; nra.
  - apply Rmult_le_compat_r; [left; apply exp_pos | lra].
Qed.

(** [lse_bound] at [NL = bL / (1 - bL)] is at least [NL]: the range of [log_range_of_NL]. *)
Lemma attn_lse_log_range : forall (A : FloatFormat) scale uc E P el ucl LN bL Bd,
  0 <= scale -> 0 <= uc -> 0 <= P -> INR E * ff_u A < 1 -> 0 <= el -> 0 <= ucl -> 0 <= LN -> 0 <= bL < 1 ->
  lse_bound (ff_u A) (ff_eta A) el ucl (score_max A scale uc E P) (score_delta A scale uc E P) LN (bL / (1 - bL)) <= Bd ->
  / (1 + Bd) <= 1 - bL /\ (1 + bL) * exp LN <= (1 + Bd) * exp LN.
Proof.
  intros A scale uc E P el ucl LN bL Bd Hs Huc HP HE Hel Hucl HLN Hb HB.
  apply log_range_of_NL; [exact Hb |].
  assert (HNL0 : 0 <= bL / (1 - bL)) by (apply Rmult_le_pos; [lra | left; apply Rinv_0_lt_compat; lra]).
  pose proof (ff_u_nonneg A) as Hu; pose proof (ff_eta_nonneg A) as Hea.
  pose proof (score_max_nonneg A scale uc E P Hs Huc HP HE) as Hm.
  pose proof (dot_err_nonneg A E P HE HP) as Hd.
  assert (Hdl : 0 <= score_delta A scale uc E P).
  { unfold score_delta.
    assert (0 <= (P + dot_err A E P) * (ff_u A * (1 + uc) + uc)) by (apply Rmult_le_pos; [lra | nra]).
    assert (0 <= scale * ((P + dot_err A E P) * (ff_u A * (1 + uc) + uc) + dot_err A E P)) by (apply Rmult_le_pos; lra).
    lra. }
  unfold lse_bound in HB; cbv zeta in HB.
  set (Aa := score_max A scale uc E P + 2 * (LN + bL / (1 - bL)) + el) in HB.
  assert (HA : 0 <= Aa) by (unfold Aa; lra).
  assert (HA2 : 0 <= (1 + ff_u A) * Aa + ff_eta A) by nra.
  assert (0 <= ff_u A * ((1 + ff_u A) * Aa + ff_eta A) * (1 + ucl)) by (apply Rmult_le_pos; [apply Rmult_le_pos |]; lra).
  assert (0 <= ((1 + ff_u A) * Aa + ff_eta A) * ucl) by (apply Rmult_le_pos; lra).
  assert (0 <= ff_u A * Aa) by (apply Rmult_le_pos; lra).
  lra.
Qed.

Section AttnFwdQ.

Local Open Scope list_scope.
Local Open Scope R_scope.

Variable M : MixedModel.
Variables u ue ee ea us es uc scale P V : Q.
Variables E B Nk Tt : N.
Hypothesis Hu : Q2R u = ff_u (mp_a M).
Hypothesis Hue : Q2R ue = mp_ue M.
Hypothesis Hee : Q2R ee = mp_eta_e M.
Hypothesis Hea : Q2R ea = ff_eta (mp_a M).
Hypothesis Hus : Q2R us = ff_u (mp_s M).
Hypothesis Hes : Q2R es = ff_eta (mp_s M).

Lemma afe_ok_spec : afe_ok u ue ee ea us es uc scale P V E B = true ->
  0 <= Q2R uc /\ 0 <= Q2R P /\ 0 < Q2R scale /\ 0 < Q2R V /\ (Q_of_N E * u < 1)%Q
  /\ (1 <= N.to_nat E)%nat /\ (1 <= N.to_nat B)%nat.
Proof.
  intros H; unfold afe_ok in H.
  repeat rewrite andb_true_iff in H.
  destruct H as [[[[[[[[[[[[_ _] _] _] _] _] H7] H8] H9] H10] H11] H12] H13].
  apply Qle_bool_R in H7, H8; apply negb_Qle_bool_R in H9, H10.
  rewrite Q2R_0 in *.
  apply negb_true_iff in H11.
  apply N.leb_le in H12, H13.
  split; [exact H7 | split; [exact H8 | split; [exact H9 | split; [exact H10 | split]]]].
  - apply Qnot_le_lt; intros C; apply Qle_bool_iff in C; congruence.
  - split; lia.
Qed.

Lemma Q2R_dot_err : (Q_of_N E * u < 1)%Q ->
  Q2R (dot_err_q u ea E P) = dot_err (mp_a M) (N.to_nat E) (Q2R P).
Proof.
  intros HE; unfold dot_err_q, dot_err.
  assert (HE1 : (Q_of_N (E - 1) * u < 1)%Q).
  { apply Rlt_Qlt; rewrite Q2R_mult, !Q2R_of_N, Q2R_1.
    apply Qlt_Rlt in HE; rewrite Q2R_mult, Q2R_of_N, Q2R_1 in HE.
    assert (0 <= Q2R u) by (rewrite Hu; apply ff_u_nonneg).
    assert (INR (N.to_nat (E - 1)) <= INR (N.to_nat E)) by (apply le_INR; lia).
    nra. }
  rewrite Q2R_plus, !Q2R_mult, Q2R_plus, Q2R_1, Q2R_of_N.
  rewrite (gamma_q_correct u E HE), (gamma_q_correct u (E - 1) HE1), Nnat.N2Nat.inj_sub, Hu, Hea.
  reflexivity.
Qed.

Lemma Q2R_score_max : (Q_of_N E * u < 1)%Q ->
  Q2R (score_max_q u ea scale uc E P) = score_max (mp_a M) (Q2R scale) (Q2R uc) (N.to_nat E) (Q2R P).
Proof.
  intros HE; unfold score_max_q, score_max.
  pose proof (Q2R_dot_err HE) as Hd; remember (dot_err_q u ea E P) as d eqn:Ed; clear Ed.
  repeat rewrite ?Q2R_plus, ?Q2R_minus, ?Q2R_mult, ?Q2R_1, ?Q2R_2.
  rewrite Hd, Hu, Hea; reflexivity.
Qed.

Lemma Q2R_score_delta : (Q_of_N E * u < 1)%Q ->
  Q2R (score_delta_q u ea scale uc E P) = score_delta (mp_a M) (Q2R scale) (Q2R uc) (N.to_nat E) (Q2R P).
Proof.
  intros HE; unfold score_delta_q, score_delta.
  pose proof (Q2R_dot_err HE) as Hd; remember (dot_err_q u ea E P) as d eqn:Ed; clear Ed.
  repeat rewrite ?Q2R_plus, ?Q2R_minus, ?Q2R_mult, ?Q2R_1, ?Q2R_2.
  rewrite Hd, Hu, Hea; reflexivity.
Qed.

Lemma Q2R_afe_bL : forall X P1 CG CR,
  Q2R (afe_bL_q u ue ee ea B Nk Tt X P1 CG CR)
  = afe_bL (ff_u (mp_a M)) (mp_ue M) (mp_eta_e M) (ff_eta (mp_a M)) (N.to_nat B) (N.to_nat Nk) (N.to_nat Tt)
           (Q2R X) (Q2R P1) (Q2R CG) (Q2R CR).
Proof.
  intros; unfold afe_bL_q, afe_bL; cbv zeta.
  repeat rewrite ?Q2R_plus, ?Q2R_minus, ?Q2R_mult, ?Q2R_of_N, ?Q2R_1.
  rewrite Hu, Hue, Hee, Hea; reflexivity.
Qed.

Lemma Q2R_afp_gA : forall X P1 CG,
  Q2R (afp_gA_q u ue us X P1 CG) = afp_gA (ff_u (mp_a M)) (mp_ue M) (ff_u (mp_s M)) (Q2R X) (Q2R P1) (Q2R CG).
Proof.
  intros; unfold afp_gA_q, afp_gA.
  repeat rewrite ?Q2R_plus, ?Q2R_minus, ?Q2R_mult, ?Q2R_1.
  rewrite Hu, Hue, Hus; reflexivity.
Qed.

Lemma Q2R_afp_rA : forall X P1 CG CR,
  Q2R (afp_rA_q u ue ee ea us es V B Nk Tt X P1 CG CR)
  = afp_rA (ff_u (mp_a M)) (mp_ue M) (mp_eta_e M) (ff_eta (mp_a M)) (ff_u (mp_s M)) (ff_eta (mp_s M)) (Q2R V)
           (N.to_nat B) (N.to_nat Nk) (N.to_nat Tt) (Q2R X) (Q2R P1) (Q2R CG) (Q2R CR).
Proof.
  intros; unfold afp_rA_q, afp_rA; cbv zeta.
  repeat rewrite ?Q2R_plus, ?Q2R_minus, ?Q2R_mult, ?Q2R_of_N, ?Q2R_1.
  rewrite Hu, Hue, Hee, Hea, Hus, Hes; reflexivity.
Qed.

Lemma Q2R_afe_bN : forall X P1 CG CR, 0 < Q2R V ->
  Q2R (afe_bN_q u ue ee ea us es V B Nk Tt X P1 CG CR)
  = afe_bN (ff_u (mp_a M)) (mp_ue M) (mp_eta_e M) (ff_eta (mp_a M)) (ff_u (mp_s M)) (ff_eta (mp_s M)) (Q2R V)
           (N.to_nat B) (N.to_nat Nk) (N.to_nat Tt) (Q2R X) (Q2R P1) (Q2R CG) (Q2R CR).
Proof.
  intros X P1 CG CR HV; unfold afe_bN_q.
  rewrite Q2R_plus, Q2R_div, Q2R_afp_gA, Q2R_afp_rA by (apply Q2R_nonzero, HV).
  unfold afp_gA, afp_rA, afe_bN; cbv zeta; field; lra.
Qed.

Lemma Q2R_afe_rel : forall X Y P1 CG CR, 0 < Q2R V ->
  Q2R (afe_bL_q u ue ee ea B Nk Tt X P1 CG CR) < 1 ->
  Q2R (afe_rel_q u ue ee ea us es V B Nk Tt X Y P1 CG CR)
  = afe_rel (ff_u (mp_a M)) (mp_ue M) (mp_eta_e M) (ff_eta (mp_a M)) (ff_u (mp_s M)) (ff_eta (mp_s M)) (Q2R V)
            (N.to_nat B) (N.to_nat Nk) (N.to_nat Tt) (Q2R X) (Q2R Y) (Q2R P1) (Q2R CG) (Q2R CR).
Proof.
  intros X Y P1 CG CR HV HL; unfold afe_rel_q, afe_rel; cbv zeta.
  assert (H1 : 0 < Q2R (1 - afe_bL_q u ue ee ea B Nk Tt X P1 CG CR)) by (rewrite Q2R_minus, Q2R_1; lra).
  rewrite !Q2R_plus, !Q2R_mult, !Q2R_plus.
  rewrite (Q2R_div es V), (Q2R_div ea V) by (apply Q2R_nonzero, HV).
  rewrite Q2R_div by (apply Q2R_nonzero, H1).
  rewrite !Q2R_plus, Q2R_minus, Q2R_mult, Q2R_plus, Q2R_1, Q2R_afe_bL, Q2R_afe_bN by exact HV.
  rewrite Hu, Hus, Hes, Hea; reflexivity.
Qed.

Lemma Q2R_cg : Q2R ((1 + ue) * ((1 + u) * (1 + u))) = cg M.
Proof. unfold cg; rewrite !Q2R_mult, !Q2R_plus, Q2R_1, Hu, Hue; ring. Qed.

Lemma Q2R_cr : Q2R ((1 + ue + ee) * ((1 + u) * (1 + u))) = cr M.
Proof. unfold cr; rewrite !Q2R_mult, !Q2R_plus, Q2R_1, Hu, Hue, Hee; ring. Qed.

Lemma afe_X_ge : forall X, (Q_of_N E * u < 1)%Q -> 0 <= Q2R scale -> 0 <= Q2R uc -> 0 <= Q2R P ->
  exp_up prec exp_steps (u * (2 * score_max_q u ea scale uc E P)) = Some X ->
  Rpower 2 (ff_u (mp_a M) * (2 * score_max (mp_a M) (Q2R scale) (Q2R uc) (N.to_nat E) (Q2R P))) <= Q2R X.
Proof.
  intros X HE Hs Huc HP EX.
  pose proof (ff_u_nonneg (mp_a M)) as Hu0.
  assert (HEu : INR (N.to_nat E) * ff_u (mp_a M) < 1).
  { apply Qlt_Rlt in HE; rewrite Q2R_mult, Q2R_of_N, Q2R_1, Hu in HE; exact HE. }
  pose proof (exp_up_ge _ _ _ _ EX) as G.
  rewrite Q2R_mult, Q2R_mult, Q2R_2, Q2R_score_max, Hu in G by exact HE.
  set (z := ff_u (mp_a M) * (2 * score_max (mp_a M) (Q2R scale) (Q2R uc) (N.to_nat E) (Q2R P))) in *.
  assert (Hz : 0 <= z).
  { unfold z; apply Rmult_le_pos; [exact Hu0 |].
    pose proof (score_max_nonneg (mp_a M) (Q2R scale) (Q2R uc) (N.to_nat E) (Q2R P) Hs Huc HP HEu).
    lra. }
  unfold Rpower; eapply Rle_trans; [| exact G]; destruct (Req_dec z 0) as [Z0 | Z0]; [rewrite Z0, Rmult_0_l; lra |].
  left; apply exp_increasing.
  pose proof afe_ln2_bounds; nra.
Qed.

Lemma afe_pows_ge :
  (1 + ff_u (mp_a M)) ^ (N.to_nat B - 1) <= Q2R (pow_up_N prec (1 + u) (B - 1))
  /\ cg M ^ N.to_nat Tt <= Q2R (pow_up_N prec ((1 + ue) * ((1 + u) * (1 + u))) Tt)
  /\ cr M ^ N.to_nat Tt <= Q2R (pow_up_N prec ((1 + ue + ee) * ((1 + u) * (1 + u))) Tt).
Proof.
  pose proof (ff_u_nonneg (mp_a M)) as Hu0.
  split; [| split].
  - pose proof (pow_one_plus_le u (B - 1) ltac:(apply Rle_Qle; rewrite Q2R_0, Hu; exact Hu0)) as G.
    rewrite Nnat.N2Nat.inj_sub, Hu in G; exact G.
  - rewrite <- Q2R_cg; apply pow_up_N_ge, Rle_Qle; rewrite Q2R_0, Q2R_cg; pose proof (cg_ge_1 M); lra.
  - rewrite <- Q2R_cr; apply pow_up_N_ge, Rle_Qle; rewrite Q2R_0, Q2R_cr; pose proof (cr_ge_1 M); lra.
Qed.

(** What [afe_consts] returns: the checks passed, the upper bounds of [attn_fwd_q_spec]. *)
Lemma afe_consts_spec : forall X Y P1 CG CR,
  afe_consts u ue ee ea us es uc scale P V E B Nk Tt = Some (X, Y, P1, CG, CR) ->
  (1 <= N.to_nat E)%nat /\ INR (N.to_nat E) * ff_u (mp_a M) < 1 /\ 0 < Q2R V /\ 0 < Q2R scale
  /\ 0 <= Q2R uc /\ (1 <= N.to_nat B)%nat
  /\ Rpower 2 (ff_u (mp_a M) * (2 * score_max (mp_a M) (Q2R scale) (Q2R uc) (N.to_nat E) (Q2R P))) <= Q2R X
  /\ exp (2 * score_delta (mp_a M) (Q2R scale) (Q2R uc) (N.to_nat E) (Q2R P)) - 1 <= Q2R Y
  /\ (1 + ff_u (mp_a M)) ^ (N.to_nat B - 1) <= Q2R P1 /\ cg M ^ N.to_nat Tt <= Q2R CG
  /\ cr M ^ N.to_nat Tt <= Q2R CR /\ Q2R (afe_bL_q u ue ee ea B Nk Tt X P1 CG CR) < 1.
Proof.
  intros X Y P1 CG CR Hb.
  unfold afe_consts in Hb.
  destruct (afe_ok u ue ee ea us es uc scale P V E B) eqn:Eok; [| discriminate].
  destruct (afe_ok_spec Eok) as [Huc [HP [Hs [HV [HE [HE1 HB1]]]]]].
  destruct (exp_up prec exp_steps (u * (2 * score_max_q u ea scale uc E P))%Q) as [X' |] eqn:EX; [| discriminate].
  destruct (perturbation_q (score_delta_q u ea scale uc E P)) as [Y' |] eqn:EY; [| discriminate].
  revert Hb; cbv zeta; destruct (Qlt_le_dec _ _) as [HL | HL]; intros Hb; [| discriminate].
  injection Hb as <- <- <- <- <-.
  pose proof (ff_u_nonneg (mp_a M)) as Hu0.
  assert (HEu : INR (N.to_nat E) * ff_u (mp_a M) < 1).
  { apply Qlt_Rlt in HE; rewrite Q2R_mult, Q2R_of_N, Q2R_1, Hu in HE; exact HE. }
  apply Qlt_Rlt in HL; rewrite Q2R_1 in HL.
  destruct afe_pows_ge as [HP1 [HCG HCR]].
  split; [exact HE1 | split; [exact HEu | split; [exact HV | split; [exact Hs | split; [exact Huc | split; [exact HB1 |]]]]]].
  split; [apply afe_X_ge; auto; lra |].
  split; [pose proof (perturbation_q_ge _ _ EY) as G; rewrite Q2R_score_delta in G by exact HE; exact G |].
  split; [exact HP1 | split; [exact HCG | split; [exact HCR | exact HL]]].
Qed.

Lemma attn_fwd_q_spec : forall b, attn_fwd_q u ue ee ea us es uc scale P V E B Nk Tt = Some b ->
  (1 <= N.to_nat E)%nat /\ INR (N.to_nat E) * ff_u (mp_a M) < 1 /\ 0 < Q2R V /\ 0 < Q2R scale
  /\ 0 <= Q2R uc /\ (1 <= N.to_nat B)%nat /\
  exists X Y P1 CG CR,
    Rpower 2 (ff_u (mp_a M) * (2 * score_max (mp_a M) (Q2R scale) (Q2R uc) (N.to_nat E) (Q2R P))) <= X
    /\ exp (2 * score_delta (mp_a M) (Q2R scale) (Q2R uc) (N.to_nat E) (Q2R P)) - 1 <= Y
    /\ (1 + ff_u (mp_a M)) ^ (N.to_nat B - 1) <= P1 /\ cg M ^ N.to_nat Tt <= CG /\ cr M ^ N.to_nat Tt <= CR
    /\ afe_bL (ff_u (mp_a M)) (mp_ue M) (mp_eta_e M) (ff_eta (mp_a M)) (N.to_nat B) (N.to_nat Nk) (N.to_nat Tt)
              X P1 CG CR < 1
    /\ afe_rel (ff_u (mp_a M)) (mp_ue M) (mp_eta_e M) (ff_eta (mp_a M)) (ff_u (mp_s M)) (ff_eta (mp_s M)) (Q2R V)
               (N.to_nat B) (N.to_nat Nk) (N.to_nat Tt) X Y P1 CG CR <= Q2R b.
Proof.
  intros b Hb; unfold attn_fwd_q in Hb.
  destruct (afe_consts u ue ee ea us es uc scale P V E B Nk Tt) as [[[[[X Y] P1] CG] CR] |] eqn:Ec;
    [| discriminate].
  injection Hb as <-.
  destruct (afe_consts_spec X Y P1 CG CR Ec) as [HE1 [HEu [HV [Hs [Huc [HB1 [HX [HY [HP1 [HG [HC HL]]]]]]]]]]].
  split; [exact HE1 | split; [exact HEu | split; [exact HV | split; [exact Hs | split; [exact Huc | split; [exact HB1 |]]]]]].
  exists (Q2R X), (Q2R Y), (Q2R P1), (Q2R CG), (Q2R CR).
  split; [exact HX | split; [exact HY | split; [exact HP1 | split; [exact HG | split; [exact HC |]]]]].
  split; [rewrite <- Q2R_afe_bL; exact HL |].
  rewrite <- Q2R_afe_rel by (exact HV || exact HL); apply Qle_R, round_up_ge.
Qed.

(** The oracle's [b]: [b * V] bounds the kernel's output coordinate on fully
    visible tiles ([attention_forward_error]) ... *)
Theorem attn_fwd_q_sound : forall b, attn_fwd_q u ue ee ea us es uc scale P V E B Nk Tt = Some b ->
  forall (q : list R) (c : R) (k0 : list R * R) (tl0 : list (list R * R)) (rest : list (list (list R * R))),
  let tiles := (k0 :: tl0) :: rest in
  let ktiles := map (map (kv_pair M c q)) tiles in
  let m0 := score2 (mp_a M) c q (fst k0) in
  length q = N.to_nat E ->
  (forall kv, In kv (concat tiles) ->
     length (fst kv) = N.to_nat E /\ dot_abs q (fst kv) <= Q2R P /\ Rabs (snd kv) <= Q2R V) ->
  Rabs (c * ln 2 - Q2R scale) <= Q2R uc * Q2R scale ->
  Forall (fun tl => (length tl <= N.to_nat B)%nat) tiles ->
  (length (concat tiles) <= N.to_nat Nk)%nat -> (length tiles <= N.to_nat Tt)%nat ->
  Rabs (ff_rnd (mp_s M) (ff_rnd (mp_a M) (acc_run M m0 0 ktiles / l_run M m0 0 (map (map fst) ktiles)))
        - exact_softmax (Q2R scale) q (concat tiles))
  <= Q2R b * Q2R V.
Proof.
  intros b Hb q c k0 tl0 rest tiles ktiles m0 Hq Hkeys Hc HBt HN HT.
  destruct (attn_fwd_q_spec b Hb) as [HE1 [HEu [HV [Hs [Huc [HB1 [X [Y [P1 [CG [CR [HX [HY [HP1 [HG [HC [HL Hr]]]]]]]]]]]]]]]]].
  eapply Rle_trans; [apply (attention_forward_error M q c (Q2R scale) (Q2R uc) (Q2R P) (Q2R V) X Y P1 CG CR
                              (N.to_nat E) (N.to_nat B) (N.to_nat Nk) (N.to_nat Tt) k0 tl0 rest); try (constructor; auto; fail); auto |].
  apply Rmult_le_compat_r; lra.
Qed.

(** ... and on the kernel's whole loop from its start, any mask
    ([attention_forward_error_masked]: causal, window, sequence bounds). *)
Theorem attn_fwd_q_sound_masked : forall b, attn_fwd_q u ue ee ea us es uc scale P V E B Nk Tt = Some b ->
  forall (q : list R) (c : R) (vis : list R * R -> bool) (tiles : list (list (list R * R))),
  let sck := fun kv : list R * R => score2 (mp_a M) c q (fst kv) in
  let st := kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) tiles in
  mp_exp2 M 0 = 1 ->
  (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  length q = N.to_nat E ->
  (forall kv, In kv (concat tiles) -> vis kv = true ->
     length (fst kv) = N.to_nat E /\ dot_abs q (fst kv) <= Q2R P /\ Rabs (snd kv) <= Q2R V) ->
  Rabs (c * ln 2 - Q2R scale) <= Q2R uc * Q2R scale ->
  Forall (fun tl => (length tl <= N.to_nat B)%nat) tiles ->
  (length (filter vis (concat tiles)) <= N.to_nat Nk)%nat -> (length tiles <= N.to_nat Tt)%nat ->
  Rabs (ff_rnd (mp_s M) (ff_rnd (mp_a M) (nth 0 (ks_acc st) 0 / ks_l st))
        - exact_softmax (Q2R scale) q (filter vis (concat tiles)))
  <= Q2R b * Q2R V.
Proof.
  intros b Hb q c vis tiles sck st H0 Hvis Hq Hkeys Hc HBt HN HT.
  destruct (attn_fwd_q_spec b Hb) as [HE1 [HEu [HV [Hs [Huc [HB1 [X [Y [P1 [CG [CR [HX [HY [HP1 [HG [HC [HL Hr]]]]]]]]]]]]]]]]].
  eapply Rle_trans; [apply (attention_forward_error_masked M q c (Q2R scale) (Q2R uc) (Q2R P) (Q2R V) X Y P1 CG CR
                              (N.to_nat E) (N.to_nat B) (N.to_nat Nk) (N.to_nat Tt) vis tiles); try (constructor; auto; fail); auto |].
  apply Rmult_le_compat_r; lra.
Qed.

(** ** Forward attention, a-posteriori: the values of [afp_rel] and [afp_abs] *)

Lemma Q2R_afp_rel : forall X Y P1 CG CR, Q2R (afe_bL_q u ue ee ea B Nk Tt X P1 CG CR) < 1 ->
  Q2R (afp_rel_q u ue ee ea us B Nk Tt X Y P1 CG CR)
  = afp_rel (ff_u (mp_a M)) (mp_ue M) (mp_eta_e M) (ff_eta (mp_a M)) (ff_u (mp_s M))
            (N.to_nat B) (N.to_nat Nk) (N.to_nat Tt) (Q2R X) (Q2R Y) (Q2R P1) (Q2R CG) (Q2R CR).
Proof.
  intros X Y P1 CG CR HL; unfold afp_rel_q, afp_rel; cbv zeta.
  assert (H1 : 0 < Q2R (1 - afe_bL_q u ue ee ea B Nk Tt X P1 CG CR)) by (rewrite Q2R_minus, Q2R_1; lra).
  rewrite !Q2R_plus, !Q2R_mult, !Q2R_plus, Q2R_div by (apply Q2R_nonzero, H1).
  repeat rewrite ?Q2R_plus, ?Q2R_minus, ?Q2R_mult, ?Q2R_1.
  rewrite Q2R_afe_bL, Q2R_afp_gA, Hu, Hus; reflexivity.
Qed.

Lemma Q2R_afp_abs : forall X P1 CG CR, Q2R (afe_bL_q u ue ee ea B Nk Tt X P1 CG CR) < 1 ->
  Q2R (afp_abs_q u ue ee ea us es V B Nk Tt X P1 CG CR)
  = afp_abs (ff_u (mp_a M)) (mp_ue M) (mp_eta_e M) (ff_eta (mp_a M)) (ff_u (mp_s M)) (ff_eta (mp_s M)) (Q2R V)
            (N.to_nat B) (N.to_nat Nk) (N.to_nat Tt) (Q2R X) (Q2R P1) (Q2R CG) (Q2R CR).
Proof.
  intros X P1 CG CR HL; unfold afp_abs_q, afp_abs; cbv zeta.
  assert (H1 : 0 < Q2R (1 - afe_bL_q u ue ee ea B Nk Tt X P1 CG CR)) by (rewrite Q2R_minus, Q2R_1; lra).
  rewrite !Q2R_plus, !Q2R_mult, !Q2R_plus, Q2R_div by (apply Q2R_nonzero, H1).
  repeat rewrite ?Q2R_plus, ?Q2R_minus, ?Q2R_mult, ?Q2R_1.
  rewrite Q2R_afe_bL, Q2R_afp_rA, Hu, Hus, Hes, Hea; reflexivity.
Qed.

Lemma attn_fwd_post_q_spec : forall r a, attn_fwd_post_q u ue ee ea us es uc scale P V E B Nk Tt = Some (r, a) ->
  (1 <= N.to_nat E)%nat /\ INR (N.to_nat E) * ff_u (mp_a M) < 1 /\ 0 < Q2R V /\ 0 < Q2R scale
  /\ 0 <= Q2R uc /\ (1 <= N.to_nat B)%nat /\
  exists X Y P1 CG CR,
    Rpower 2 (ff_u (mp_a M) * (2 * score_max (mp_a M) (Q2R scale) (Q2R uc) (N.to_nat E) (Q2R P))) <= X
    /\ exp (2 * score_delta (mp_a M) (Q2R scale) (Q2R uc) (N.to_nat E) (Q2R P)) - 1 <= Y
    /\ (1 + ff_u (mp_a M)) ^ (N.to_nat B - 1) <= P1 /\ cg M ^ N.to_nat Tt <= CG /\ cr M ^ N.to_nat Tt <= CR
    /\ afe_bL (ff_u (mp_a M)) (mp_ue M) (mp_eta_e M) (ff_eta (mp_a M)) (N.to_nat B) (N.to_nat Nk) (N.to_nat Tt)
              X P1 CG CR < 1
    /\ afp_rel (ff_u (mp_a M)) (mp_ue M) (mp_eta_e M) (ff_eta (mp_a M)) (ff_u (mp_s M))
               (N.to_nat B) (N.to_nat Nk) (N.to_nat Tt) X Y P1 CG CR <= Q2R r
    /\ afp_abs (ff_u (mp_a M)) (mp_ue M) (mp_eta_e M) (ff_eta (mp_a M)) (ff_u (mp_s M)) (ff_eta (mp_s M)) (Q2R V)
               (N.to_nat B) (N.to_nat Nk) (N.to_nat Tt) X P1 CG CR <= Q2R a.
Proof.
  intros r a Hb; unfold attn_fwd_post_q in Hb.
  destruct (afe_consts u ue ee ea us es uc scale P V E B Nk Tt) as [[[[[X Y] P1] CG] CR] |] eqn:Ec;
    [| discriminate].
  injection Hb as <- <-.
  destruct (afe_consts_spec X Y P1 CG CR Ec) as [HE1 [HEu [HV [Hs [Huc [HB1 [HX [HY [HP1 [HG [HC HL]]]]]]]]]]].
  split; [exact HE1 | split; [exact HEu | split; [exact HV | split; [exact Hs | split; [exact Huc | split; [exact HB1 |]]]]]].
  exists (Q2R X), (Q2R Y), (Q2R P1), (Q2R CG), (Q2R CR).
  split; [exact HX | split; [exact HY | split; [exact HP1 | split; [exact HG | split; [exact HC |]]]]].
  split; [rewrite <- Q2R_afe_bL; exact HL |].
  split; [rewrite <- Q2R_afp_rel by exact HL | rewrite <- Q2R_afp_abs by exact HL]; apply Qle_R, round_up_ge.
Qed.

(** [W = sum_j P_j |v_j| >= 0]. *)
Lemma exact_softmax_abs_nonneg : forall s q keys, 0 <= exact_softmax s q (map abs_value keys).
Proof.
  intros s q keys; unfold exact_softmax; rewrite !map_map.
  exact (proj2 (sm_avg_abs keys (fun kv => s * dot_R q (fst kv)) snd)).
Qed.

(** The oracle's [(r, a)]: [r W + a] bounds the kernel's output coordinate on fully
    visible tiles, [W = sum_j P_j |v_j|] ([attention_forward_posteriori]) ... *)
Theorem attn_fwd_post_q_sound : forall r a, attn_fwd_post_q u ue ee ea us es uc scale P V E B Nk Tt = Some (r, a) ->
  forall (q : list R) (c : R) (k0 : list R * R) (tl0 : list (list R * R)) (rest : list (list (list R * R))),
  let tiles := (k0 :: tl0) :: rest in
  let ktiles := map (map (kv_pair M c q)) tiles in
  let m0 := score2 (mp_a M) c q (fst k0) in
  length q = N.to_nat E ->
  (forall kv, In kv (concat tiles) ->
     length (fst kv) = N.to_nat E /\ dot_abs q (fst kv) <= Q2R P /\ Rabs (snd kv) <= Q2R V) ->
  Rabs (c * ln 2 - Q2R scale) <= Q2R uc * Q2R scale ->
  Forall (fun tl => (length tl <= N.to_nat B)%nat) tiles ->
  (length (concat tiles) <= N.to_nat Nk)%nat -> (length tiles <= N.to_nat Tt)%nat ->
  Rabs (ff_rnd (mp_s M) (ff_rnd (mp_a M) (acc_run M m0 0 ktiles / l_run M m0 0 (map (map fst) ktiles)))
        - exact_softmax (Q2R scale) q (concat tiles))
  <= Q2R r * exact_softmax (Q2R scale) q (map abs_value (concat tiles)) + Q2R a.
Proof.
  intros r a Hb q c k0 tl0 rest tiles ktiles m0 Hq Hkeys Hc HBt HN HT.
  destruct (attn_fwd_post_q_spec r a Hb)
    as [HE1 [HEu [HV [Hs [Huc [HB1 [X [Y [P1 [CG [CR [HX [HY [HP1 [HG [HC [HL [Hr Ha]]]]]]]]]]]]]]]]]].
  pose proof (exact_softmax_abs_nonneg (Q2R scale) q (concat tiles)).
  eapply Rle_trans; [apply (attention_forward_posteriori M q c (Q2R scale) (Q2R uc) (Q2R P) (Q2R V) X Y P1 CG CR
                              (N.to_nat E) (N.to_nat B) (N.to_nat Nk) (N.to_nat Tt) k0 tl0 rest); try (constructor; auto; fail); auto |].
  apply Rplus_le_compat; [apply Rmult_le_compat_r |]; assumption.
Qed.

(** ... and on the kernel's whole loop from its start, any mask
    ([attention_forward_posteriori_masked]; [W] over the visible keys). *)
Theorem attn_fwd_post_q_sound_masked : forall r a,
  attn_fwd_post_q u ue ee ea us es uc scale P V E B Nk Tt = Some (r, a) ->
  forall (q : list R) (c : R) (vis : list R * R -> bool) (tiles : list (list (list R * R))),
  let sck := fun kv : list R * R => score2 (mp_a M) c q (fst kv) in
  let st := kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) tiles in
  mp_exp2 M 0 = 1 ->
  (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  length q = N.to_nat E ->
  (forall kv, In kv (concat tiles) -> vis kv = true ->
     length (fst kv) = N.to_nat E /\ dot_abs q (fst kv) <= Q2R P /\ Rabs (snd kv) <= Q2R V) ->
  Rabs (c * ln 2 - Q2R scale) <= Q2R uc * Q2R scale ->
  Forall (fun tl => (length tl <= N.to_nat B)%nat) tiles ->
  (length (filter vis (concat tiles)) <= N.to_nat Nk)%nat -> (length tiles <= N.to_nat Tt)%nat ->
  Rabs (ff_rnd (mp_s M) (ff_rnd (mp_a M) (nth 0 (ks_acc st) 0 / ks_l st))
        - exact_softmax (Q2R scale) q (filter vis (concat tiles)))
  <= Q2R r * exact_softmax (Q2R scale) q (map abs_value (filter vis (concat tiles))) + Q2R a.
Proof.
  intros r a Hb q c vis tiles sck st H0 Hvis Hq Hkeys Hc HBt HN HT.
  destruct (attn_fwd_post_q_spec r a Hb)
    as [HE1 [HEu [HV [Hs [Huc [HB1 [X [Y [P1 [CG [CR [HX [HY [HP1 [HG [HC [HL [Hr Ha]]]]]]]]]]]]]]]]]].
  pose proof (exact_softmax_abs_nonneg (Q2R scale) q (filter vis (concat tiles))).
  eapply Rle_trans; [apply (attention_forward_posteriori_masked M q c (Q2R scale) (Q2R uc) (Q2R P) (Q2R V)
                              X Y P1 CG CR (N.to_nat E) (N.to_nat B) (N.to_nat Nk) (N.to_nat Tt) vis tiles); try (constructor; auto; fail); auto |].
  apply Rplus_le_compat; [apply Rmult_le_compat_r |]; assumption.
Qed.

Lemma afe_neg_ln_le : forall b, 0 <= b < 1 -> - ln (1 - b) <= b / (1 - b).
Proof.
  intros b Hb.
  assert (H : ln (/ (1 - b)) <= / (1 - b) - 1).
  { pose proof (exp_ineq1_le (/ (1 - b) - 1)) as Hx.
    rewrite <- (ln_exp (/ (1 - b) - 1)); apply afe_ln_le; [apply Rinv_0_lt_compat; lra | lra]. }
  rewrite ln_Rinv in H by lra.
  replace (b / (1 - b)) with (/ (1 - b) - 1) by (field; lra); exact H.
Qed.

Lemma Q2R_lse_bound : forall el ucl smax delta LN NL,
  Q2R (lse_bound_q u ea el ucl smax delta LN NL)
  = lse_bound (ff_u (mp_a M)) (ff_eta (mp_a M)) (Q2R el) (Q2R ucl) (Q2R smax) (Q2R delta) (Q2R LN) (Q2R NL).
Proof.
  intros; unfold lse_bound_q, lse_bound; cbv zeta.
  repeat rewrite ?Q2R_plus, ?Q2R_minus, ?Q2R_mult, ?Q2R_1, ?Q2R_2.
  rewrite Hu, Hea; reflexivity.
Qed.

Lemma attn_lse_q_spec : forall el ucl LN b, attn_lse_q u ue ee ea el ucl uc scale P LN E B Nk Tt = Some b ->
  (1 <= N.to_nat E)%nat /\ INR (N.to_nat E) * ff_u (mp_a M) < 1 /\ 0 < Q2R scale /\ 0 <= Q2R uc
  /\ (1 <= N.to_nat B)%nat /\ 0 <= Q2R ucl /\ ln (INR (N.to_nat Nk)) <= Q2R LN /\
  exists X P1 CG CR NL,
    Rpower 2 (ff_u (mp_a M) * (2 * score_max (mp_a M) (Q2R scale) (Q2R uc) (N.to_nat E) (Q2R P))) <= X
    /\ (1 + ff_u (mp_a M)) ^ (N.to_nat B - 1) <= P1 /\ cg M ^ N.to_nat Tt <= CG /\ cr M ^ N.to_nat Tt <= CR
    /\ afe_bL (ff_u (mp_a M)) (mp_ue M) (mp_eta_e M) (ff_eta (mp_a M)) (N.to_nat B) (N.to_nat Nk) (N.to_nat Tt)
              X P1 CG CR < 1
    /\ - ln (1 - afe_bL (ff_u (mp_a M)) (mp_ue M) (mp_eta_e M) (ff_eta (mp_a M)) (N.to_nat B) (N.to_nat Nk)
                        (N.to_nat Tt) X P1 CG CR) <= NL
    /\ lse_bound (ff_u (mp_a M)) (ff_eta (mp_a M)) (Q2R el) (Q2R ucl)
                 (score_max (mp_a M) (Q2R scale) (Q2R uc) (N.to_nat E) (Q2R P))
                 (score_delta (mp_a M) (Q2R scale) (Q2R uc) (N.to_nat E) (Q2R P)) (Q2R LN) NL <= Q2R b
    /\ / (1 + Q2R b) <= 1 - afe_bL (ff_u (mp_a M)) (mp_ue M) (mp_eta_e M) (ff_eta (mp_a M)) (N.to_nat B)
                                   (N.to_nat Nk) (N.to_nat Tt) X P1 CG CR
    /\ (1 + afe_bL (ff_u (mp_a M)) (mp_ue M) (mp_eta_e M) (ff_eta (mp_a M)) (N.to_nat B) (N.to_nat Nk)
               (N.to_nat Tt) X P1 CG CR) * exp (Q2R LN) <= (1 + Q2R b) * exp (Q2R LN).
Proof.
  intros el ucl LN b Hb.
  unfold attn_lse_q in Hb.
  destruct (afe_ok u ue ee ea 0 0 uc scale P 1 E B && Qle_bool 0 el && Qle_bool 0 ucl && N.leb 1 Nk
            && Qle_bool (Q_of_N Nk) (exp_dn prec exp_steps LN)) eqn:Eok; [| discriminate].
  repeat rewrite andb_true_iff in Eok; destruct Eok as [[[[Eok Hel] Hucl] HNk] HLNq].
  assert (Hok : 0 <= Q2R uc /\ 0 <= Q2R P /\ 0 < Q2R scale /\ (Q_of_N E * u < 1)%Q
                /\ (1 <= N.to_nat E)%nat /\ (1 <= N.to_nat B)%nat).
  { unfold afe_ok in Eok; repeat rewrite andb_true_iff in Eok.
    destruct Eok as [[[[[[[[[[[[_ _] _] _] _] _] H7] H8] H9] _] H11] H12] H13].
    apply Qle_bool_R in H7, H8; apply negb_Qle_bool_R in H9; rewrite Q2R_0 in *.
    apply negb_true_iff in H11; apply N.leb_le in H12, H13.
    repeat split; try lra; try lia.
    apply Qnot_le_lt; intros C; apply Qle_bool_iff in C; congruence. }
  destruct Hok as [Huc [HP [Hs [HE [HE1 HB1]]]]].
  apply Qle_bool_R in Hel, Hucl; rewrite Q2R_0 in Hel, Hucl.
  apply N.leb_le in HNk.
  destruct (exp_up prec exp_steps (u * (2 * score_max_q u ea scale uc E P))%Q) as [X |] eqn:EX; [| discriminate].
  set (P1 := pow_up_N prec (1 + u) (B - 1)) in Hb.
  set (CG := pow_up_N prec ((1 + ue) * ((1 + u) * (1 + u))) Tt) in Hb.
  set (CR := pow_up_N prec ((1 + ue + ee) * ((1 + u) * (1 + u))) Tt) in Hb.
  destruct (Qlt_le_dec (afe_bL_q u ue ee ea B Nk Tt X P1 CG CR) 1) as [HL | HL]; [| discriminate].
  injection Hb as Eb.
  assert (HEu : INR (N.to_nat E) * ff_u (mp_a M) < 1).
  { apply Qlt_Rlt in HE; rewrite Q2R_mult, Q2R_of_N, Q2R_1, Hu in HE; exact HE. }
  pose proof (Qlt_Rlt _ _ HL) as HLr; rewrite Q2R_1, Q2R_afe_bL in HLr.
  set (bL := afe_bL (ff_u (mp_a M)) (mp_ue M) (mp_eta_e M) (ff_eta (mp_a M)) (N.to_nat B) (N.to_nat Nk)
                    (N.to_nat Tt) (Q2R X) (Q2R P1) (Q2R CG) (Q2R CR)) in *.
  destruct afe_pows_ge as [HP1 [HCG HCR]].
  pose proof (afe_X_ge X HE ltac:(lra) Huc HP EX) as HX.
  assert (HbL0 : 0 <= bL).
  { set (K := 2 * score_max (mp_a M) (Q2R scale) (Q2R uc) (N.to_nat E) (Q2R P)) in HX.
    assert (HK : 0 <= K) by (unfold K; pose proof (score_max_nonneg (mp_a M) (Q2R scale) (Q2R uc) (N.to_nat E) (Q2R P) ltac:(lra) Huc HP HEu); lra).
    destruct (out_bL_apriori M K 0 (N.to_nat B) (N.to_nat Nk) (N.to_nat Tt) 0 0 (Q2R X) (Q2R P1) (Q2R CG) (Q2R CR)
                HK ltac:(lia) (Rle_refl 0) ltac:(lra) HX HP1 HCG HCR) as [A1 A2]; unfold bL; lra. }
  assert (H1L : ~ (1 - afe_bL_q u ue ee ea B Nk Tt X P1 CG CR == 0)%Q)
    by (apply Q2R_nonzero; rewrite Q2R_minus, Q2R_1, Q2R_afe_bL; fold bL; lra).
  split; [exact HE1 | split; [exact HEu | split; [exact Hs | split; [exact Huc | split; [exact HB1 |]]]]].
  assert (HLNk : ln (INR (N.to_nat Nk)) <= Q2R LN).
  { apply Qle_bool_R in HLNq; rewrite Q2R_of_N in HLNq.
    pose proof (exp_dn_le prec exp_steps LN) as G.
    assert (0 < INR (N.to_nat Nk)) by (apply lt_0_INR; lia).
    rewrite <- (ln_exp (Q2R LN)); apply afe_ln_le; lra. }
  assert (Hbd : lse_bound (ff_u (mp_a M)) (ff_eta (mp_a M)) (Q2R el) (Q2R ucl)
                  (score_max (mp_a M) (Q2R scale) (Q2R uc) (N.to_nat E) (Q2R P))
                  (score_delta (mp_a M) (Q2R scale) (Q2R uc) (N.to_nat E) (Q2R P)) (Q2R LN) (bL / (1 - bL)) <= Q2R b).
  { rewrite <- Eb; eapply Rle_trans; [| apply Qle_R, round_up_ge].
    rewrite Q2R_lse_bound, Q2R_score_max, Q2R_score_delta, Q2R_div by (exact HE || exact H1L).
    rewrite Q2R_minus, Q2R_1, Q2R_afe_bL; fold bL; lra. }
  assert (HLN0 : 0 <= Q2R LN)
    by (eapply Rle_trans; [| exact HLNk]; rewrite <- ln_1; apply afe_ln_le; [lra | apply (le_INR 1); lia]).
  destruct (attn_lse_log_range (mp_a M) (Q2R scale) (Q2R uc) (N.to_nat E) (Q2R P) (Q2R el) (Q2R ucl) (Q2R LN) bL (Q2R b)
              ltac:(lra) Huc HP HEu Hel Hucl HLN0 (conj HbL0 HLr) Hbd) as [Hd1 Hd2].
  split; [exact Hucl | split; [exact HLNk |]].
  exists (Q2R X), (Q2R P1), (Q2R CG), (Q2R CR), (bL / (1 - bL)).
  repeat split; auto.
  fold bL; apply afe_neg_ln_le; lra.
Qed.

(** The oracle's lse bound [b]: for any [tl.log2] within [el] of [log2] on
    [[1 / (1 + b), (1 + b) e^LN]] (inside [[1/2, 2 e^LN]] when [b <= 1]) and
    any fp32 constant [cl] within [ucl ln 2] of [ln 2], [b] bounds the error of
    the kernel's saved lse on fully visible tiles ([attention_lse_error]) ... *)
Theorem attn_lse_q_sound : forall el ucl LN b, attn_lse_q u ue ee ea el ucl uc scale P LN E B Nk Tt = Some b ->
  forall (lg : R -> R) (cl : R),
  (forall x, / (1 + Q2R b) <= x <= (1 + Q2R b) * exp (Q2R LN) -> Rabs (lg x - ln x / ln 2) <= Q2R el) ->
  Rabs (cl - ln 2) <= Q2R ucl * ln 2 ->
  forall (q : list R) (c : R) (k0 : list R * R) (tl0 : list (list R * R)) (rest : list (list (list R * R))),
  let tiles := (k0 :: tl0) :: rest in
  let ktiles := map (map (kv_pair M c q)) tiles in
  let m0 := score2 (mp_a M) c q (fst k0) in
  length q = N.to_nat E ->
  (forall kv, In kv (concat tiles) -> length (fst kv) = N.to_nat E /\ dot_abs q (fst kv) <= Q2R P) ->
  Rabs (c * ln 2 - Q2R scale) <= Q2R uc * Q2R scale ->
  Forall (fun tl => (length tl <= N.to_nat B)%nat) tiles ->
  (length (concat tiles) <= N.to_nat Nk)%nat -> (length tiles <= N.to_nat Tt)%nat ->
  Rabs (ff_rnd (mp_a M) (ff_rnd (mp_a M) (acc_m_run m0 ktiles + lg (l_run M m0 0 (map (map fst) ktiles))) * cl)
        - ln (VectorFacts.rsum (map (fun kv => exp (Q2R scale * dot_R q (fst kv))) (concat tiles))))
  <= Q2R b.
Proof.
  intros el ucl LN b Hb lg cl Hlg Hcl q c k0 tl0 rest tiles ktiles m0 Hq Hkeys Hc HBt HN HT.
  destruct (attn_lse_q_spec el ucl LN b Hb)
    as [HE1 [HEu [Hs [Huc [HB1 [Hucl [HLN [X [P1 [CG [CR [NL [HX [HP1 [HCG [HCR [HL [HNL [Hr [Hd1 Hd2]]]]]]]]]]]]]]]]]]]].
  eapply Rle_trans; [| exact Hr].
  apply (attention_lse_error M lg (Q2R el) (/ (1 + Q2R b)) ((1 + Q2R b) * exp (Q2R LN)) Hlg q c (Q2R scale) (Q2R uc) (Q2R P) X P1 CG CR cl (Q2R ucl) (Q2R LN) NL
           (N.to_nat E) (N.to_nat B) (N.to_nat Nk) (N.to_nat Tt) k0 tl0 rest); auto.
Qed.

(** ... and of the kernel's whole loop under any mask ([attention_lse_error_masked]). *)
Theorem attn_lse_q_sound_masked : forall el ucl LN b, attn_lse_q u ue ee ea el ucl uc scale P LN E B Nk Tt = Some b ->
  forall (lg : R -> R) (cl : R),
  (forall x, / (1 + Q2R b) <= x <= (1 + Q2R b) * exp (Q2R LN) -> Rabs (lg x - ln x / ln 2) <= Q2R el) ->
  Rabs (cl - ln 2) <= Q2R ucl * ln 2 ->
  forall (q : list R) (c : R) (vis : list R * R -> bool) (tiles : list (list (list R * R))),
  let sck := fun kv : list R * R => score2 (mp_a M) c q (fst kv) in
  let st := kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) tiles in
  mp_exp2 M 0 = 1 -> (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  length q = N.to_nat E ->
  (forall kv, In kv (concat tiles) -> vis kv = true -> length (fst kv) = N.to_nat E /\ dot_abs q (fst kv) <= Q2R P) ->
  Rabs (c * ln 2 - Q2R scale) <= Q2R uc * Q2R scale ->
  Forall (fun tl => (length tl <= N.to_nat B)%nat) tiles ->
  (length (filter vis (concat tiles)) <= N.to_nat Nk)%nat -> (length tiles <= N.to_nat Tt)%nat ->
  Rabs (ff_rnd (mp_a M) (ff_rnd (mp_a M) (m_use (ks_m st) + lg (ks_l st)) * cl)
        - ln (VectorFacts.rsum (map (fun kv => exp (Q2R scale * dot_R q (fst kv))) (filter vis (concat tiles)))))
  <= Q2R b.
Proof.
  intros el ucl LN b Hb lg cl Hlg Hcl q c vis tiles sck st H0 Hvis Hq Hkeys Hc HBt HN HT.
  destruct (attn_lse_q_spec el ucl LN b Hb)
    as [HE1 [HEu [Hs [Huc [HB1 [Hucl [HLN [X [P1 [CG [CR [NL [HX [HP1 [HCG [HCR [HL [HNL [Hr [Hd1 Hd2]]]]]]]]]]]]]]]]]]]].
  eapply Rle_trans; [| exact Hr].
  apply (attention_lse_error_masked M lg (Q2R el) (/ (1 + Q2R b)) ((1 + Q2R b) * exp (Q2R LN)) Hlg q c (Q2R scale) (Q2R uc) (Q2R P) X P1 CG CR cl (Q2R ucl)
           (Q2R LN) NL (N.to_nat E) (N.to_nat B) (N.to_nat Nk) (N.to_nat Tt) vis tiles); auto.
Qed.

End AttnFwdQ.
