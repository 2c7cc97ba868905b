(** * Computable bounds of the online softmax in the model without underflow, and of score perturbations.

    - [stream_beta_q], [stream_err_q]: upper bounds of [stream_beta] and
      [stream_err] of [Attention/StreamError.v] ([exp (-1)] enters through
      [exp_shift_err]; [stream_err] grows with [beta], [stream_err_mono]);
    - [perturbation_q]: an upper bound of [exp (2 delta) - 1] of
      [softmax_output_perturbation] ([exp_up], or [x / (1 - x)] for tiny
      [x = 2 delta]);
    - [neg_ln_check]: checks a candidate [t >= - ln (1 - b)] (the [ln] term
      of [lse_err]) by a certified lower bound of [exp t] ([exp_dn], [pow_dn],
      [round_down]): [neg_ln_check_correct]. *)

From Coq Require Import Reals QArith Qreals Lra Lia ZArith List.
From Ojas Require Import Attention.StreamError Bounds.Rational Bounds.Sums.

Local Open Scope Q_scope.
Local Open Scope R_scope.

(** [exp (-1)], bounded above. *)
Definition exp_neg1_q : option Q := exp_up prec exp_steps (-1).

(** [stream_factor u ue n = (1+u)^(2n) (1+ue)^n], bounded above. *)
Definition stream_factor_q (u ue : Q) (n : N) : Q :=
  round_up prec (pow_up_N prec (1 + u) (2 * n) * pow_up_N prec (1 + ue) n).

(** [stream_beta u ue n = (K - 1) + n (u / (1 - u) e^-1) K], [K = stream_factor u ue n]. *)
Definition stream_beta_q (u ue : Q) (n : N) : option Q :=
  match exp_neg1_q with
  | None => None
  | Some c =>
    let K := stream_factor_q u ue n in
    Some ((K - 1) + Q_of_N n * (u / (1 - u) * c) * K)%Q
  end.


Lemma exp_neg1_q_ge : forall c, exp_neg1_q = Some c -> exp (-1) <= Q2R c.
Proof.
  intros c H; pose proof (exp_up_ge _ _ _ _ H) as G.
  replace (Q2R (-1)) with (-1) in G by (unfold Q2R; simpl; field); exact G.
Qed.

Theorem stream_beta_q_ge : forall u ue n b, (0 <= u)%Q -> (u < 1)%Q -> (0 <= ue)%Q ->
  stream_beta_q u ue n = Some b -> stream_beta (Q2R u) (Q2R ue) (N.to_nat n) <= Q2R b.
Proof.
  intros u ue n b Hu Hu1 Hue; unfold stream_beta_q.
  destruct exp_neg1_q as [c |] eqn:Ec; [| discriminate]; intros E; injection E as <-.
  pose proof (exp_neg1_q_ge c Ec) as Hc.
  set (K := stream_factor_q u ue n).
  pose proof (Q2R_nonneg _ Hu) as Hu0; pose proof (Q2R_nonneg _ Hue) as Hue0.
  pose proof (Qlt_Rlt _ _ Hu1) as Hu1'; rewrite Q2R_1 in Hu1'.
  assert (HF : stream_factor (Q2R u) (Q2R ue) (N.to_nat n) <= Q2R K).
  { unfold stream_factor, K, stream_factor_q; eapply Rle_trans; [| apply Qle_R, round_up_ge]; rewrite Q2R_mult.
    pose proof (pow_one_plus_le u (2 * n) Hu) as A; rewrite N2Nat_double in A.
    pose proof (pow_one_plus_le ue n Hue) as B.
    apply Rmult_le_compat; auto using pow_le with real; apply pow_le; lra. }
  clearbody K.
  assert (HF0 : 0 <= stream_factor (Q2R u) (Q2R ue) (N.to_nat n))
    by (unfold stream_factor; apply Rmult_le_pos; apply pow_le; lra).
  unfold stream_beta, exp_shift_err.
  rewrite Q2R_plus, Q2R_minus, Q2R_1, !Q2R_mult, Q2R_u_div, Q2R_of_N by exact Hu1.
  assert (0 <= Q2R u / (1 - Q2R u))
    by (unfold Rdiv; apply Rmult_le_pos; [lra | left; apply Rinv_0_lt_compat; lra]).
  pose proof (exp_pos (-1)); pose proof (pos_INR (N.to_nat n)).
  assert (INR (N.to_nat n) * (Q2R u / (1 - Q2R u) * exp (-1)) <=
          INR (N.to_nat n) * (Q2R u / (1 - Q2R u) * Q2R c)).
  { apply Rmult_le_compat_l; [lra |]; apply Rmult_le_compat_l; lra. }
  assert (0 <= INR (N.to_nat n) * (Q2R u / (1 - Q2R u) * exp (-1)))
    by (apply Rmult_le_pos; [lra | apply Rmult_le_pos; lra]).
  rewrite <- Rmult_assoc in *.
  rewrite <- Rmult_assoc in *.
  pose proof (Rmult_le_compat _ _ _ _ H3 HF0 H2 HF); lra.
Qed.

(** [stream_err] from a bound [b] of [stream_beta]: it grows with [beta]. *)
Definition stream_err_of (u b : Q) : Q := ((2 * b + u * (1 + b)) / (1 - b))%Q.

Lemma stream_err_mono : forall u b b', 0 <= u -> b <= b' -> b' < 1 ->
  (2 * b + u * (1 + b)) / (1 - b) <= (2 * b' + u * (1 + b')) / (1 - b').
Proof.
  intros u b b' Hu Hb Hb'.
  replace ((2 * b + u * (1 + b)) / (1 - b)) with (- (2 + u) + (2 + 2 * u) * / (1 - b))
    by (field; lra).
  replace ((2 * b' + u * (1 + b')) / (1 - b')) with (- (2 + u) + (2 + 2 * u) * / (1 - b'))
    by (field; lra).
  apply Rplus_le_compat_l, Rmult_le_compat_l; [lra |]; apply Rinv_le_contravar; lra.
Qed.

Definition stream_err_q (u ue : Q) (n : N) : option Q :=
  match stream_beta_q u ue n with
  | Some b => if Qlt_le_dec b 1 then Some (stream_err_of u b) else None
  | None => None
  end.

Theorem stream_err_q_ge : forall u ue n e, (0 <= u)%Q -> (u < 1)%Q -> (0 <= ue)%Q ->
  stream_err_q u ue n = Some e ->
  stream_beta (Q2R u) (Q2R ue) (N.to_nat n) < 1 /\
  stream_err (Q2R u) (Q2R ue) (N.to_nat n) <= Q2R e.
Proof.
  intros u ue n e Hu Hu1 Hue; unfold stream_err_q.
  destruct (stream_beta_q u ue n) as [b |] eqn:Eb; [| discriminate].
  destruct (Qlt_le_dec b 1) as [Hb | Hb]; [| discriminate]; intros E; injection E as <-.
  pose proof (stream_beta_q_ge u ue n b Hu Hu1 Hue Eb) as H.
  apply Qlt_Rlt in Hb; rewrite Q2R_1 in Hb.
  split; [lra |].
  unfold stream_err, stream_err_of.
  rewrite Q2R_div, Q2R_plus, !Q2R_mult, Q2R_minus, Q2R_plus, Q2R_1.
  - replace (Q2R 2) with 2 by (unfold Q2R; simpl; field).
    apply stream_err_mono; [apply Q2R_nonneg, Hu | exact H | exact Hb].
  - intros E; apply Qeq_eqR in E; rewrite Q2R_minus, Q2R_1, Q2R_0 in E; lra.
Qed.

(** [exp (2 delta) - 1] of [softmax_output_perturbation].  For [x = 2 delta >= 2^-64]:
    [exp_up] with [2^64 2^s >= 2^64 |x|] steps (the fixed precision [prec] loses
    relative accuracy as [x] shrinks); below, [x / (1 - x)], whose excess over
    [exp x - 1] is a relative [x / 2] or so ([expm1_le_small]). *)
Definition perturbation_steps (x : Q) : positive :=
  Pos.shiftl exp_steps (Z.to_N (Z.log2 (Z.abs (Qnum x)) - Z.log2 (Zpos (Qden x)) + 1)).

Definition perturbation_q (delta : Q) : option Q :=
  let x := (2 * delta)%Q in
  if Qlt_le_dec x (1 # exp_steps) then
    (if Qlt_le_dec x 1 then Some (x / (1 - x))%Q else None)
  else
    match exp_up prec (perturbation_steps x) x with
    | Some e => Some (e - 1)%Q
    | None => None
    end.

Lemma expm1_le_small : forall x, x < 1 -> exp x - 1 <= x / (1 - x).
Proof.
  intros x H; pose proof (exp_le_inv_one_minus x H).
  replace (x / (1 - x)) with (/ (1 - x) - 1) by (field; lra); lra.
Qed.

Theorem perturbation_q_ge : forall delta e, perturbation_q delta = Some e ->
  exp (2 * Q2R delta) - 1 <= Q2R e.
Proof.
  intros delta e; unfold perturbation_q.
  replace (2 * Q2R delta) with (Q2R (2 * delta)%Q)
    by (rewrite Q2R_mult; f_equal; unfold Q2R; simpl; field).
  destruct (Qlt_le_dec (2 * delta) (1 # exp_steps)) as [_ | _].
  - destruct (Qlt_le_dec (2 * delta) 1) as [H | H]; [| discriminate].
    intros E; injection E as <-.
    apply Qlt_Rlt in H; rewrite Q2R_1 in H.
    rewrite Q2R_div, Q2R_minus, Q2R_1; [apply expm1_le_small, H |].
    intros E; apply Qeq_eqR in E; rewrite Q2R_minus, Q2R_1, Q2R_0 in E; lra.
  - destruct exp_up as [e' |] eqn:E; [| discriminate]; intros H; injection H as <-.
    pose proof (exp_up_ge _ _ _ _ E) as G.
    rewrite Q2R_minus, Q2R_1; lra.
Qed.

(** [- ln (1 - b) <= t], checked by [exp t >= exp_dn t >= 1 / (1 - b)]: the
    [ln] term of [lse_err]. *)
Definition neg_ln_check (b t : Q) : bool :=
  Qle_bool 0 b && Qle_bool 1 ((1 - b) * exp_dn prec exp_steps t) && negb (Qle_bool 1 b).

Theorem neg_ln_check_correct : forall b t, neg_ln_check b t = true ->
  0 <= Q2R b < 1 /\ - ln (1 - Q2R b) <= Q2R t.
Proof.
  intros b t H; unfold neg_ln_check in H.
  apply andb_true_iff in H as [H H3]; apply andb_true_iff in H as [H1 H2].
  apply Qle_bool_iff, Qle_R in H1; apply Qle_bool_iff, Qle_R in H2.
  apply negb_true_iff in H3.
  assert (Hb : Q2R b < 1).
  { destruct (Rlt_le_dec (Q2R b) 1) as [h | h]; [exact h |].
    rewrite <- Q2R_1 in h; apply Rle_Qle, Qle_bool_iff in h; congruence. }
  rewrite Q2R_0 in H1; rewrite Q2R_1, Q2R_mult, Q2R_minus, Q2R_1 in H2.
  split; [lra |].
  pose proof (exp_dn_le prec exp_steps t) as D.
  assert (L : 1 <= (1 - Q2R b) * exp (Q2R t))
    by (eapply Rle_trans; [exact H2 |]; apply Rmult_le_compat_l; lra).
  rewrite <- (ln_exp (Q2R t)), <- ln_Rinv by lra.
  assert (Hle : / (1 - Q2R b) <= exp (Q2R t)).
  { apply (Rmult_le_reg_l (1 - Q2R b)); [lra |]; rewrite Rinv_r by lra; exact L. }
  destruct Hle as [Hlt | Heq]; [left; apply ln_increasing; [apply Rinv_0_lt_compat; lra | exact Hlt] |].
  rewrite Heq; right; reflexivity.
Qed.

