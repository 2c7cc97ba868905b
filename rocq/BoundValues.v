(** * Computable values of the proved error bounds.
    The bounds of [DotError.v], [Attention/StreamError.v],
    [Attention/ScorePerturbation.v] and [CrossEntropy/LossError.v] are real
    expressions of the unit roundoff [u], the exp error [ue] and a length
    [n].  This file computes them over exact rationals [Q], so that the
    oracle (extraction/) can hand Python the theorem's own number instead of
    a hand copy of the formula ([ojas_ref/verification/error_bounds.py]):
    - [gamma_q]: [gamma] of [DotError.v], exactly ([gamma_q_correct];
      [dot_bound_q] checks the side condition [n u < 1] too);
    - [pow_up]: an upper bound of [x ^ n] by binary powering, each product
      rounded up to a multiple of [1/d] ([round_up]): [(1+u)^(2n)] is an
      integer of [48 n] bits over its denominator for [u = 2^-24], too big
      to carry exactly, so the powers are certified upper bounds
      ([pow_up_ge]) within a relative [2^-190] or so of the real value for
      [d = 2^200] ([prec]);
    - [exp_up]: an upper bound of [exp x] for a rational [x], from
      [exp y <= 1 / (1 - y)] ([exp_le_inv_one_minus]) at [y = x / P] and
      [exp x = exp (x / P) ^ P] ([exp_up_ge]);
    - [chunked_sum_factor_q], [sum_factor_q], [nat_err_q]: upper bounds of
      the factors [(1+u)^(2n) - 1] of [chunked_sum_error_bound],
      [sum_factor] and [nat_err] of [LossError.v];
    - [stream_beta_q], [stream_err_q]: upper bounds of [stream_beta] and
      [stream_err] of [StreamError.v] ([exp (-1)] enters through
      [exp_shift_err]; [stream_err] grows with [beta], [stream_err_mono]);
    - [perturbation_q]: an upper bound of [exp (2 delta) - 1] of
      [softmax_output_perturbation] ([exp_up], or [x / (1 - x)] for tiny
      [x = 2 delta]);
    - [neg_ln_check]: checks a candidate [t >= - ln (1 - b)] (the [ln] term
      of [lse_err]) by a certified lower bound of [exp t] ([exp_dn], [pow_dn],
      [round_down]): [neg_ln_check_correct].
    Only [Q], [positive], [N] and [Z] are used, so the extraction can carry
    every value exactly (extraction/ExtractBounds.v extracts them with Coq's
    own binary integers, not OCaml's [int]). *)

From Coq Require Import Reals QArith Qreals Lra Lia ZArith.
From Ojas Require Import DotError Attention.StreamError CrossEntropy.LossError.

Local Open Scope Q_scope.

(** ** Integers as rationals *)

Definition Q_of_N (n : N) : Q := Z.of_N n # 1.

Lemma Q2R_of_N : forall n, Q2R (Q_of_N n) = INR (N.to_nat n).
Proof.
  intros n; unfold Q_of_N, Q2R; simpl.
  rewrite Rinv_1, Rmult_1_r, INR_IZR_INZ, N_nat_Z; reflexivity.
Qed.

Lemma Q_of_N_nonneg : forall n, 0 <= Q_of_N n.
Proof. intros n; unfold Q_of_N, Qle; simpl; lia. Qed.

Lemma Q2R_0 : Q2R 0 = 0%R.
Proof. unfold Q2R; simpl; ring. Qed.

Lemma Q2R_1 : Q2R 1 = 1%R.
Proof. unfold Q2R; simpl; field. Qed.

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

(** ** Rounding up and down to a multiple of [1/d] *)

Definition round_up (d : positive) (q : Q) : Q :=
  ((Qnum q * Zpos d + (Zpos (Qden q) - 1)) / Zpos (Qden q))%Z # d.

Definition round_down (d : positive) (q : Q) : Q :=
  ((Qnum q * Zpos d) / Zpos (Qden q))%Z # d.

Lemma round_up_ge : forall d q, q <= round_up d q.
Proof.
  intros d [a b]; unfold round_up, Qle; cbn [Qnum Qden].
  set (x := (a * Zpos d + (Zpos b - 1))%Z).
  pose proof (Z.div_mod x (Zpos b) ltac:(lia)) as E.
  pose proof (Z.mod_pos_bound x (Zpos b) ltac:(lia)) as B.
  generalize dependent (x / Zpos b)%Z; generalize dependent (x mod Zpos b)%Z.
  unfold x; intros; nia.
Qed.

Lemma round_down_le : forall d q, round_down d q <= q.
Proof.
  intros d [a b]; unfold round_down, Qle; cbn [Qnum Qden].
  pose proof (Z.div_mod (a * Zpos d) (Zpos b) ltac:(lia)) as E.
  pose proof (Z.mod_pos_bound (a * Zpos d) (Zpos b) ltac:(lia)) as B.
  generalize dependent (a * Zpos d / Zpos b)%Z; generalize dependent (a * Zpos d mod Zpos b)%Z.
  intros; nia.
Qed.

Lemma Qle_R : forall x y, x <= y -> (Q2R x <= Q2R y)%R.
Proof. exact Qle_Rle. Qed.

Local Open Scope R_scope.

(** ** Powers bounded above and below *)

Fixpoint pow_up (d : positive) (x : Q) (p : positive) : Q :=
  match p with
  | xH => x
  | xO p => let y := pow_up d x p in round_up d (y * y)
  | xI p => let y := pow_up d x p in round_up d (x * round_up d (y * y))
  end.

Lemma pow_xO : forall x p, x ^ Pos.to_nat (xO p) = x ^ Pos.to_nat p * x ^ Pos.to_nat p.
Proof. intros x p; rewrite Pos2Nat.inj_xO, <- pow_add; f_equal; lia. Qed.

Lemma pow_xI : forall x p,
  x ^ Pos.to_nat (xI p) = x * (x ^ Pos.to_nat p * x ^ Pos.to_nat p).
Proof. intros x p; rewrite Pos2Nat.inj_xI, <- pow_add; simpl; f_equal; f_equal; lia. Qed.

Lemma pow_up_ge : forall d x p, (0 <= x)%Q ->
  Q2R x ^ Pos.to_nat p <= Q2R (pow_up d x p).
Proof.
  intros d x p Hx; apply Qle_R in Hx; rewrite Q2R_0 in Hx.
  induction p as [p IH | p IH |]; simpl pow_up.
  - rewrite pow_xI; eapply Rle_trans; [| apply Qle_R, round_up_ge].
    rewrite Q2R_mult; apply Rmult_le_compat_l; [exact Hx |].
    eapply Rle_trans; [| apply Qle_R, round_up_ge]; rewrite Q2R_mult.
    pose proof (pow_le _ (Pos.to_nat p) Hx); apply Rmult_le_compat; lra.
  - rewrite pow_xO; eapply Rle_trans; [| apply Qle_R, round_up_ge]; rewrite Q2R_mult.
    pose proof (pow_le _ (Pos.to_nat p) Hx); apply Rmult_le_compat; lra.
  - simpl; lra.
Qed.

(** Rounding down may go below 0; [clamp0] keeps the lower bounds nonnegative. *)
Definition clamp0 (q : Q) : Q := if Qle_bool 0 q then q else 0.

Lemma clamp0_nonneg : forall q, (0 <= clamp0 q)%Q.
Proof.
  intros q; unfold clamp0; destruct (Qle_bool 0 q) eqn:E; [apply Qle_bool_iff; exact E |].
  apply Qle_refl.
Qed.

Lemma clamp0_le : forall q x, 0 <= x -> Q2R q <= x -> Q2R (clamp0 q) <= x.
Proof.
  intros q x Hx Hq; unfold clamp0; destruct (Qle_bool 0 q); [exact Hq |]; rewrite Q2R_0; exact Hx.
Qed.

Fixpoint pow_dn (d : positive) (x : Q) (p : positive) : Q :=
  match p with
  | xH => x
  | xO p => let y := pow_dn d x p in clamp0 (round_down d (y * y))
  | xI p => let y := pow_dn d x p in clamp0 (round_down d (x * clamp0 (round_down d (y * y))))
  end.

Lemma pow_dn_le : forall d x p, (0 <= x)%Q ->
  0 <= Q2R (pow_dn d x p) <= Q2R x ^ Pos.to_nat p.
Proof.
  intros d x p Hx; apply Qle_R in Hx; rewrite Q2R_0 in Hx.
  induction p as [p IH | p IH |]; simpl pow_dn.
  - rewrite pow_xI; pose proof (pow_le _ (Pos.to_nat p) Hx).
    set (y := pow_dn d x p) in *.
    assert (A : 0 <= Q2R (clamp0 (round_down d (y * y))) <= Q2R x ^ Pos.to_nat p * Q2R x ^ Pos.to_nat p).
    { split; [pose proof (Qle_R _ _ (clamp0_nonneg (round_down d (y * y)))); rewrite Q2R_0 in H0; exact H0 |].
      apply clamp0_le; [apply Rmult_le_pos; lra |].
      eapply Rle_trans; [apply Qle_R, round_down_le |]; rewrite Q2R_mult.
      apply Rmult_le_compat; lra. }
    split; [pose proof (Qle_R _ _ (clamp0_nonneg (round_down d (x * clamp0 (round_down d (y * y))))));
            rewrite Q2R_0 in H0; exact H0 |].
    apply clamp0_le; [apply Rmult_le_pos; [lra | apply Rmult_le_pos; lra] |].
    eapply Rle_trans; [apply Qle_R, round_down_le |]; rewrite Q2R_mult.
    apply Rmult_le_compat_l; lra.
  - rewrite pow_xO; pose proof (pow_le _ (Pos.to_nat p) Hx).
    set (y := pow_dn d x p) in *.
    split; [pose proof (Qle_R _ _ (clamp0_nonneg (round_down d (y * y)))); rewrite Q2R_0 in H0; exact H0 |].
    apply clamp0_le; [apply Rmult_le_pos; lra |].
    eapply Rle_trans; [apply Qle_R, round_down_le |]; rewrite Q2R_mult.
    apply Rmult_le_compat; lra.
  - simpl; lra.
Qed.

(** Powers with an [N] exponent. *)
Definition pow_up_N (d : positive) (x : Q) (n : N) : Q :=
  match n with N0 => 1 | Npos p => pow_up d x p end.

Lemma pow_up_N_ge : forall d x n, (0 <= x)%Q -> Q2R x ^ N.to_nat n <= Q2R (pow_up_N d x n).
Proof.
  intros d x [| p] Hx; simpl; [rewrite Q2R_1; lra | apply pow_up_ge; exact Hx].
Qed.

(** The working precision: multiples of [2^-200]. *)
Definition prec : positive := Pos.pow 2 200.

(** ** [exp] bounded above and below *)

Lemma exp_le_inv_one_minus : forall y, y < 1 -> exp y <= / (1 - y).
Proof.
  intros y Hy; pose proof (exp_ineq1_le (- y)) as H.
  replace (exp y) with (/ exp (- y)) by (rewrite exp_Ropp, Rinv_inv; reflexivity).
  apply Rinv_le_contravar; lra.
Qed.

(** [exp x <= exp_up d P x] when the latter is [Some], i.e. when [x / P < 1]. *)
Definition exp_up (d P : positive) (x : Q) : option Q :=
  let y := (x / (Zpos P # 1))%Q in
  if Qlt_le_dec y 1 then Some (pow_up d (round_up d (/ (1 - y))) P) else None.

Lemma Q2R_pos : forall p, Q2R (Zpos p # 1) = INR (Pos.to_nat p).
Proof.
  intros p; unfold Q2R; simpl; rewrite Rinv_1, Rmult_1_r, INR_IZR_INZ, positive_nat_Z; reflexivity.
Qed.

Lemma Q2R_div_pos : forall x p, Q2R (x / (Zpos p # 1)) = Q2R x / INR (Pos.to_nat p).
Proof.
  intros x p; rewrite Q2R_div, Q2R_pos; [reflexivity |]; unfold Qeq; simpl; lia.
Qed.

Lemma exp_INR_div : forall p x, exp x = exp (x / INR (Pos.to_nat p)) ^ Pos.to_nat p.
Proof.
  intros p x; rewrite <- exp_INR_mul; f_equal.
  assert (0 < INR (Pos.to_nat p)) by (apply lt_0_INR; lia); field; lra.
Qed.

Lemma exp_up_ge : forall d P x e, exp_up d P x = Some e -> exp (Q2R x) <= Q2R e.
Proof.
  intros d P x e; unfold exp_up.
  destruct (Qlt_le_dec (x / (Zpos P # 1)) 1) as [H | H]; [| discriminate].
  intros E; injection E as <-.
  set (y := (x / (Zpos P # 1))%Q) in *.
  assert (Hy : Q2R y < 1) by (apply Qlt_Rlt in H; rewrite Q2R_1 in H; exact H).
  assert (H1 : ~ (1 - y == 0)%Q).
  { intros E; apply Qeq_eqR in E; rewrite Q2R_minus, Q2R_1, Q2R_0 in E; lra. }
  assert (Hb : exp (Q2R y) <= Q2R (round_up d (/ (1 - y)))).
  { eapply Rle_trans; [apply exp_le_inv_one_minus, Hy |].
    eapply Rle_trans; [| apply Qle_R, round_up_ge].
    rewrite Q2R_inv, Q2R_minus, Q2R_1 by exact H1; lra. }
  assert (H0 : (0 <= round_up d (/ (1 - y)))%Q).
  { apply Rle_Qle; rewrite Q2R_0; pose proof (exp_pos (Q2R y)); lra. }
  rewrite (exp_INR_div P (Q2R x)), <- Q2R_div_pos; fold y.
  eapply Rle_trans; [| apply pow_up_ge, H0].
  apply pow_incr; split; [left; apply exp_pos | exact Hb].
Qed.

(** [exp t >= exp_dn d P t]: [exp y >= 1 + y] at [y = t / P]. *)
Definition exp_dn (d P : positive) (t : Q) : Q :=
  pow_dn d (clamp0 (round_down d (1 + t / (Zpos P # 1)))) P.

Lemma exp_dn_le : forall d P t, Q2R (exp_dn d P t) <= exp (Q2R t).
Proof.
  intros d P t; unfold exp_dn.
  set (b := clamp0 (round_down d (1 + t / (Zpos P # 1)))).
  assert (Hb : Q2R b <= exp (Q2R t / INR (Pos.to_nat P))).
  { apply clamp0_le; [left; apply exp_pos |].
    eapply Rle_trans; [apply Qle_R, round_down_le |].
    rewrite Q2R_plus, Q2R_1, Q2R_div_pos; pose proof (exp_ineq1_le (Q2R t / INR (Pos.to_nat P))); lra. }
  pose proof (pow_dn_le d b P (clamp0_nonneg _)) as [_ H].
  eapply Rle_trans; [exact H |]; rewrite (exp_INR_div P (Q2R t)).
  apply pow_incr; split; [| exact Hb].
  pose proof (Qle_R _ _ (clamp0_nonneg (round_down d (1 + t / (Zpos P # 1))))); rewrite Q2R_0 in H0; exact H0.
Qed.

(** [P = 2^64]: [exp y] against [1 / (1 - y)] and [1 + y] costs a relative [y^2 / 2]. *)
Definition exp_steps : positive := Pos.pow 2 64.

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

Lemma Q2R_nonneg : forall q, (0 <= q)%Q -> 0 <= Q2R q.
Proof. intros q H; apply Qle_R in H; rewrite Q2R_0 in H; exact H. Qed.

Lemma Q2R_u_div : forall u, (u < 1)%Q -> Q2R (u / (1 - u)) = Q2R u / (1 - Q2R u).
Proof.
  intros u H; apply Qlt_Rlt in H; rewrite Q2R_1 in H.
  rewrite Q2R_div, Q2R_minus, Q2R_1; [reflexivity |].
  intros E; apply Qeq_eqR in E; rewrite Q2R_minus, Q2R_1, Q2R_0 in E; lra.
Qed.

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
