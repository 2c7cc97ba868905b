(** * Exact rationals for the bounds: integers, rounding to a grid, certified powers and exponentials.

    The toolkit of the [Bounds/] files, which compute the proved error
    bounds over exact rationals [Q] so that the oracle (extraction/) can hand
    Python the theorem's own number instead of a hand copy of the formula:
    - [pow_up]: an upper bound of [x ^ n] by binary powering, each product
      rounded up to a multiple of [1/d] ([round_up]): [(1+u)^(2n)] is an
      integer of [48 n] bits over its denominator for [u = 2^-24], too big
      to carry exactly, so the powers are certified upper bounds
      ([pow_up_ge]) within a relative [2^-190] or so of the real value for
      [d = 2^200] ([prec]); [pow_dn], [round_down]: lower bounds;
    - [exp_up]: an upper bound of [exp x] for a rational [x], from
      [exp y <= 1 / (1 - y)] ([exp_le_inv_one_minus]) at [y = x / P] and
      [exp x = exp (x / P) ^ P] ([exp_up_ge]); [exp_dn]: a lower bound.
    Only [Q], [positive], [N] and [Z] are used, so the extraction can carry
    every value exactly (extraction/ExtractBounds.v extracts them with Coq's
    own binary integers, not OCaml's [int]). *)

From Coq Require Import Reals QArith Qreals Lra Lia ZArith List.
From Ojas Require Import FloatModel.DotError.

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


Lemma Q2R_nonneg : forall q, (0 <= q)%Q -> 0 <= Q2R q.
Proof. intros q H; apply Qle_R in H; rewrite Q2R_0 in H; exact H. Qed.

Lemma Q2R_u_div : forall u, (u < 1)%Q -> Q2R (u / (1 - u)) = Q2R u / (1 - Q2R u).
Proof.
  intros u H; apply Qlt_Rlt in H; rewrite Q2R_1 in H.
  rewrite Q2R_div, Q2R_minus, Q2R_1; [reflexivity |].
  intros E; apply Qeq_eqR in E; rewrite Q2R_minus, Q2R_1, Q2R_0 in E; lra.
Qed.

Lemma Qle_bool_R : forall x y, Qle_bool x y = true -> Q2R x <= Q2R y.
Proof. intros x y H; apply Qle_Rle, Qle_bool_iff, H. Qed.

Lemma negb_Qle_bool_R : forall x y, negb (Qle_bool x y) = true -> Q2R y < Q2R x.
Proof.
  intros x y H; apply negb_true_iff in H; apply Qlt_Rlt, Qnot_le_lt.
  intros C; apply Qle_bool_iff in C; congruence.
Qed.

Lemma Q2R_2 : Q2R 2 = 2.
Proof. unfold Q2R; simpl; field. Qed.

Lemma Q2R_nonzero : forall x, 0 < Q2R x -> ~ (x == 0)%Q.
Proof. intros x H E; apply Qeq_eqR in E; rewrite Q2R_0 in E; lra. Qed.

