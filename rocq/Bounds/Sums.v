(** * Computable bounds of dot products and sums ([FloatModel/DotError.v], [LinearCrossEntropy/LossError.v]).

    - [gamma_q]: [gamma] of [FloatModel/DotError.v], exactly ([gamma_q_correct];
      [dot_bound_q] checks the side condition [n u < 1] too);
    - [chunked_sum_factor_q], [sum_factor_q], [nat_err_q]: upper bounds of
      the factors [(1+u)^(2n) - 1] of [chunked_sum_error_bound],
      [sum_factor] and [nat_err] of [LinearCrossEntropy/LossError.v]. *)

From Coq Require Import Reals QArith Qreals Lra Lia ZArith List.
From Ojas Require Import FloatModel.DotError LinearCrossEntropy.LossError Bounds.Rational.

Local Open Scope Q_scope.

(** ** [gamma], exactly *)

Definition gamma_q (u : Q) (n : N) : Q := Q_of_N n * u / (1 - Q_of_N n * u).

Theorem gamma_q_correct : forall u n, Q_of_N n * u < 1 ->
  Q2R (gamma_q u n) = gamma (Q2R u) (N.to_nat n).
Proof.
  intros u n H; unfold gamma_q, gamma.
  assert (Hz : ~ 1 - Q_of_N n * u == 0).
  { intros E; apply Qlt_not_le in H; apply H; rewrite <- (Qplus_0_l (Q_of_N n * u)).
    rewrite <- E; ring_simplify; apply Qle_refl. }
  rewrite Q2R_div by exact Hz; rewrite Q2R_minus, Q2R_mult, Q2R_of_N.
  unfold Q2R at 2; simpl; rewrite Rinv_1, Rmult_1_r; reflexivity.
Qed.

(** [gamma u n] with the side condition [n u < 1] of [dot_error_bound]. *)
Definition dot_bound_q (u : Q) (n : N) : option Q :=
  if Qlt_le_dec (Q_of_N n * u) 1 then Some (gamma_q u n) else None.

Theorem dot_bound_q_correct : forall u n g, dot_bound_q u n = Some g ->
  (INR (N.to_nat n) * Q2R u < 1)%R /\ Q2R g = gamma (Q2R u) (N.to_nat n).
Proof.
  intros u n g; unfold dot_bound_q.
  destruct (Qlt_le_dec (Q_of_N n * u) 1) as [H | H]; [| discriminate].
  intros E; injection E as <-; split; [| apply gamma_q_correct, H].
  apply Qlt_Rlt in H; rewrite Q2R_mult, Q2R_of_N in H.
  replace (Q2R 1) with 1%R in H by (unfold Q2R; simpl; field); exact H.
Qed.

Local Open Scope R_scope.

(** ** The bounds *)

(** [(1 + u)^(2n) - 1] of [chunked_sum_error_bound] (terms plus chunks at most [2 n]),
    which is also [sum_factor u n] of [LossError.v]. *)
Definition chunked_sum_factor_q (u : Q) (n : N) : Q := pow_up_N prec (1 + u) (2 * n) - 1.

Lemma one_plus_nonneg : forall u, (0 <= u)%Q -> (0 <= 1 + u)%Q.
Proof.
  intros u H; apply Rle_Qle; rewrite Q2R_plus, Q2R_0, Q2R_1; apply Qle_R in H; rewrite Q2R_0 in H; lra.
Qed.

Lemma N2Nat_double : forall n, N.to_nat (2 * n) = (2 * N.to_nat n)%nat.
Proof. intros n; rewrite Nnat.N2Nat.inj_mul; reflexivity. Qed.

Lemma pow_one_plus_le : forall u n, (0 <= u)%Q ->
  (1 + Q2R u) ^ N.to_nat n <= Q2R (pow_up_N prec (1 + u) n).
Proof.
  intros u n H; pose proof (pow_up_N_ge prec (1 + u) n (one_plus_nonneg u H)) as P.
  rewrite Q2R_plus, Q2R_1 in P; exact P.
Qed.

Theorem chunked_sum_factor_q_ge : forall u n, (0 <= u)%Q ->
  (1 + Q2R u) ^ (2 * N.to_nat n) - 1 <= Q2R (chunked_sum_factor_q u n).
Proof.
  intros u n H; unfold chunked_sum_factor_q; rewrite Q2R_minus, Q2R_1, <- N2Nat_double.
  pose proof (pow_one_plus_le u (2 * n) H); lra.
Qed.

Corollary sum_factor_q_ge : forall u n, (0 <= u)%Q ->
  sum_factor (Q2R u) (N.to_nat n) <= Q2R (chunked_sum_factor_q u n).
Proof. intros u n H; unfold sum_factor; apply chunked_sum_factor_q_ge, H. Qed.

(** [nat_err u n = ((1 + u)^n - 1) n] of [LossError.v]. *)
Definition nat_err_q (u : Q) (n : N) : Q := (pow_up_N prec (1 + u) n - 1) * Q_of_N n.

Theorem nat_err_q_ge : forall u n, (0 <= u)%Q ->
  nat_err (Q2R u) (N.to_nat n) <= Q2R (nat_err_q u n).
Proof.
  intros u n H; unfold nat_err_q, nat_err; rewrite Q2R_mult, Q2R_minus, Q2R_1, Q2R_of_N.
  apply Rmult_le_compat_r; [apply pos_INR |]; pose proof (pow_one_plus_le u n H); lra.
Qed.

