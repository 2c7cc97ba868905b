(** * Computable values of the proved error bounds.
    The bounds of [FloatModel/DotError.v], [Attention/StreamError.v],
    [Attention/ScorePerturbation.v] and [CrossEntropy/LossError.v] are real
    expressions of the unit roundoff [u], the exp error [ue] and a length
    [n].  This file computes them over exact rationals [Q], so that the
    oracle (extraction/) can hand Python the theorem's own number instead of
    a hand copy of the formula ([ojas_ref/verification/error_bounds.py]):
    - [gamma_q]: [gamma] of [FloatModel/DotError.v], exactly ([gamma_q_correct];
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
      [round_down]): [neg_ln_check_correct];
    - [attn_fwd_q]: the bound [afe_rel] of
      [FloatModel.AttentionForwardError.attention_forward_error] (forward
      attention in mixed precision, the rounding of the scores included),
      its upper bounds [X >= 2^(u K)] ([exp_up]), [Y >= exp (2 delta) - 1]
      ([perturbation_q]) and the powers ([pow_up_N]) computed here, the rest
      exactly, the result rounded up; [attn_fwd_q_sound]: whenever it is
      [Some b], [b * V] bounds the error of the kernel's output coordinate
      on fully visible tiles, [attn_fwd_q_sound_masked]: of the kernel's
      whole loop under any mask ([attention_forward_error_masked]); the
      checks and the upper bounds are [afe_consts] ([afe_consts_spec]);
    - [attn_fwd_post_q]: the pair [afp_rel], [afp_abs] of
      [FloatModel.AttentionForwardPosteriori.attention_forward_posteriori] at
      the same [afe_consts], each rounded up; [attn_fwd_post_q_sound]: whenever
      it is [Some (r, a)], [r W + a] ([W = sum_j P_j |v_j|]) bounds the error of
      the kernel's output coordinate on fully visible tiles,
      [attn_fwd_post_q_sound_masked]: of the kernel's whole loop under any mask
      ([attention_forward_posteriori_masked]);
    - [attn_lse_q]: the bound [lse_bound] of
      [FloatModel.AttentionLseError.attention_lse_error] on the saved lse,
      [ln N <= LN] checked by [exp_dn], [- ln (1 - bL) <= bL / (1 - bL)]
      ([afe_neg_ln_le]); [attn_lse_q_sound], [attn_lse_q_sound_masked];
    - [ce_lse_q]: the bound [ce_lse_bound] of
      [FloatModel.CrossEntropyLseError.ce_lse_error_up] on the chunked linear
      cross-entropy's streamed lse ([exp (2 u Zmax) <= XK] by [exp_up], the
      powers by [pow_up_N], [ln V <= LN] by [exp_dn], [NL = bL / (1 - bL)]);
      [ce_lse_q_sound]; its checks are [ce_ok] ([ce_ok_spec]);
    - [ce_merge_lse_q]: the same bound for the two-level schedule
      ([ce_lse_error_two_level]: the groups' streamed states merged), its
      levels [ce_level_q] ([ce_lvl_C_q], [ce_lvl_R_q] at certified powers, each
      rounded up; they grow with the level's inputs, [ce_lvl_mono], so the
      first level's rounded-up values may enter the second: [ce_level_q_ge]);
      [ce_merge_lse_q_sound];
    - [ce_grad_q]: the coefficients of [ce_dw_bound] of
      [FloatModel.CrossEntropyGradError] (the gradients' a-posteriori bound is
      linear in the sums [S], [T], [Ha]: [ce_grad_q_spec]) at [gd = gamma u n]
      and [X = 1 + perturbation_q (x / 2)], each rounded up;
      [ce_grad_q_sound_dw] (dW's token-chunk loop, [ce_dw_error]) and
      [ce_grad_q_sound_dh] (dH, [ce_dh_error]);
    - [ce_gp_q]: the coefficients of [ce_gen_bound gd a0 ua C (Sp + (Kg - 1) T + cg Ha) T],
      the gradients' a-posteriori bound with each entry's own exponent's error
      ([FloatModel.CrossEntropyGradPosteriori]: linear in [Sp], [T], [Ha]: [ce_gp_q_spec]),
      at [gd = gamma u n], each rounded up; [ce_gp_q_sound_dw] (dW's token-chunk loop,
      [ce_gp_dw_error]) and [ce_gp_q_sound_dh] (dH, [ce_gp_dh_error]);
    - [sc_grad_q]: the coefficients of [ce_gen_bound gd a0 ua C (sc_E1 ee Fe Ec Sk Tc S T0 Ha) Tc],
      the capped gradients' bound ([FloatModel.CrossEntropySoftcapGradError]: linear in
      [S], [T0], [Ha], [Sk], [Tc]: [sc_grad_q_spec], for any chain factor's error [<= Ec],
      [ce_gen_bound_mono]), at [gd = gamma u n] and [Fe = (1 + ue) X],
      [X = 1 + perturbation_q (x / 2)], [Ec] an input, each rounded up; [sc_grad_q_sound_dw]
      (dW's token-chunk loop, [sc_dw_error]) and [sc_grad_q_sound_dh] (dH, [sc_dh_error]),
      with [sc_delta dr + Dl + u Am + ea <= x] and [sc_chain_bound (sc_delta dr) <= Ec].
    Only [Q], [positive], [N] and [Z] are used, so the extraction can carry
    every value exactly (extraction/ExtractBounds.v extracts them with Coq's
    own binary integers, not OCaml's [int]). *)

From Coq Require Import Reals QArith Qreals Lra Lia ZArith List.
From Ojas Require Import FloatModel.DotError Attention.StreamError CrossEntropy.LossError.
From Ojas Require Import FloatModel.MixedPrecision FloatModel.OnlineSoftmaxTile FloatModel.AttentionForwardError.
From Ojas Require Import FloatModel.AttentionLseError FloatModel.CrossEntropyLseError.
From Ojas Require Import FloatModel.AttentionForwardPosteriori.
From Ojas Require FloatModel.CrossEntropyGradError FloatModel.CrossEntropyGradPosteriori.
From Ojas Require FloatModel.CrossEntropySoftcapError FloatModel.CrossEntropySoftcapGradError.

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


(** ** Forward attention: the value of [afe_rel] *)

Local Open Scope Q_scope.

Definition afe_bL_q (u ue ee ea : Q) (B Nk Tt : N) (X P1 CG CR : Q) : Q :=
  let H := P1 * ((1 + ue) * X) in
  H * CG * X - 1 + Q_of_N Tt * CR * (((H * CG * X) * Q_of_N Nk * ee) * (1 + u) + ea + P1 * (Q_of_N B * ee)) * (1 + u).

(** [afp_gA], [afp_rA] of AttentionForwardPosteriori.v: the acc fold's factor minus one
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

(** [afp_rel], [afp_abs] of AttentionForwardPosteriori.v. *)
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
                              (N.to_nat E) (N.to_nat B) (N.to_nat Nk) (N.to_nat Tt) k0 tl0 rest); auto |].
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
                              (N.to_nat E) (N.to_nat B) (N.to_nat Nk) (N.to_nat Tt) vis tiles); auto |].
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
                              (N.to_nat E) (N.to_nat B) (N.to_nat Nk) (N.to_nat Tt) k0 tl0 rest); auto |].
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
                              X Y P1 CG CR (N.to_nat E) (N.to_nat B) (N.to_nat Nk) (N.to_nat Tt) vis tiles); auto |].
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


(** ** The chunked linear cross-entropy's streamed lse: the value of [ce_lse_bound] *)

Local Open Scope Q_scope.

(** One level of the tile loop ([ce_run_gen] after at most [Tt] tiles of [Bt] items, tile
    sums of depth [Dt], [Nn] items of factor [ci], term [ri], exact values at most [Nx]):
    its factor [ce_H Q^Tt XK] and its term [Tt a^Tt ce_b] (CrossEntropyLseError.v), at
    upper bounds [P1], [QT], [AT] of [(1 + u)^Dt], [ce_Q^Tt], [ce_a^Tt]. *)
Definition ce_lvl_C_q (u ue XK ci P1 QT : Q) : Q := P1 * (ci * ((1 + ue) * XK) * (1 + u)) * QT * XK.

Definition ce_lvl_R_q (u ue ee ea XK ci ri Nx P1 QT AT : Q) (Bt Tt Nn : N) : Q :=
  Q_of_N Tt * AT * (((ce_lvl_C_q u ue XK ci P1 QT * (Q_of_N Nn * Nx) * ee) * (1 + u) + ea
                     + P1 * (Q_of_N Bt * ((ci * Nx * ee + ri * ((1 + ue) * XK + ee)) * (1 + u) + ea))) * (1 + u)).

(** [ce_bL_p]: one level over the logits ([ci = 1], [ri = 0], [Nx = 1]). *)
Definition ce_bL_q (u ue ee ea XK P1 QT AT : Q) (Bt Tt Nn : N) : Q :=
  ce_lvl_C_q u ue XK 1 P1 QT - 1 + ce_lvl_R_q u ue ee ea XK 1 0 1 P1 QT AT Bt Tt Nn.

Definition ce_lse_bound_q (u el Zmax LN NL delta : Q) : Q := u * (Zmax + LN + NL + el) + el + NL + delta.

(** [Some b] with [b >= ce_lse_bound] at upper bounds of its exponential and powers, [LN]
    checked ([V <= exp_dn LN]), [NL = bL / (1 - bL)], or [None] when a check or the side
    condition [0 <= bL < 1] fails. *)
(** The checks of [ce_lse_q] and [ce_merge_lse_q]: the constants [>= 0], [1 <= V <= exp_dn LN]. *)
Definition ce_ok (u ue ee ea el Zmax delta LN : Q) (V : N) : bool :=
  Qle_bool 0 u && Qle_bool 0 ue && Qle_bool 0 ee && Qle_bool 0 ea && Qle_bool 0 el && Qle_bool 0 Zmax
  && Qle_bool 0 delta && N.leb 1 V && Qle_bool (Q_of_N V) (exp_dn prec exp_steps LN).

Definition ce_lse_q (u ue ee ea el Zmax delta LN : Q) (Dt Bt Tt Nn : N) : option Q :=
  if ce_ok u ue ee ea el Zmax delta LN Nn then
    match exp_up prec exp_steps (u * (2 * Zmax)) with
    | Some XK =>
      let P1 := pow_up_N prec (1 + u) Dt in
      let QT := pow_up_N prec ((1 + ue) * ((1 + u) * (1 + u))) Tt in
      let AT := pow_up_N prec ((1 + u) * (1 + u) * ((1 + ue) * XK + ee)) Tt in
      let bL := ce_bL_q u ue ee ea XK P1 QT AT Bt Tt Nn in
      if Qlt_le_dec bL 1 then
        if Qle_bool 0 bL then Some (round_up prec (ce_lse_bound_q u el Zmax LN (bL / (1 - bL)) delta)) else None
      else None
    | None => None
    end
  else None.

(** One level at the certified powers, each value rounded up. *)
Definition ce_level_q (u ue ee ea XK ci ri Nx : Q) (Dt Bt Tt Nn : N) : Q * Q :=
  let P1 := pow_up_N prec (1 + u) Dt in
  let QT := pow_up_N prec ((1 + ue) * ((1 + u) * (1 + u))) Tt in
  let AT := pow_up_N prec ((1 + u) * (1 + u) * ((1 + ue) * XK + ee)) Tt in
  (round_up prec (ce_lvl_C_q u ue XK ci P1 QT), round_up prec (ce_lvl_R_q u ue ee ea XK ci ri Nx P1 QT AT Bt Tt Nn)).

(** The two-level schedule ([ce_lse_error_two_level]): groups of at most [T1] tiles of [Bt1]
    logits ([N1] logits, tile sums of depth [Dt1]), their states merged in at most [T2] tiles
    of [Bt2] ([Nn] groups, depth [Dt2]); [V] logits in all ([ln V <= LN] checked).  [Some b]
    with [b >= ce_lse_bound] at [bL = C2 - 1 + R2] of the two levels, [NL = bL / (1 - bL)],
    or [None] when a check or [0 <= bL < 1] fails. *)
Definition ce_merge_lse_q (u ue ee ea el Zmax delta LN : Q) (Dt1 Bt1 T1 N1 Dt2 Bt2 T2 Nn V : N) : option Q :=
  if ce_ok u ue ee ea el Zmax delta LN V then
    match exp_up prec exp_steps (u * (2 * Zmax)) with
    | Some XK =>
      let L1 := ce_level_q u ue ee ea XK 1 0 1 Dt1 Bt1 T1 N1 in
      let L2 := ce_level_q u ue ee ea XK (fst L1) (snd L1) (Q_of_N N1) Dt2 Bt2 T2 Nn in
      let bL := fst L2 - 1 + snd L2 in
      if Qlt_le_dec bL 1 then
        if Qle_bool 0 bL then Some (round_up prec (ce_lse_bound_q u el Zmax LN (bL / (1 - bL)) delta)) else None
      else None
    | None => None
    end
  else None.

Local Open Scope R_scope.

Lemma ce_ok_spec : forall u ue ee ea el Zmax delta LN V, ce_ok u ue ee ea el Zmax delta LN V = true ->
  0 <= Q2R u /\ 0 <= Q2R ue /\ 0 <= Q2R ee /\ 0 <= Q2R ea /\ 0 <= Q2R el /\ 0 <= Q2R Zmax /\ 0 <= Q2R delta
  /\ (1 <= N.to_nat V)%nat /\ ln (INR (N.to_nat V)) <= Q2R LN.
Proof.
  intros u ue ee ea el Zmax delta LN V Eok; unfold ce_ok in Eok.
  repeat rewrite andb_true_iff in Eok.
  destruct Eok as [[[[[[[[Hu0 Hue0] Hee0] Hea0] Hel0] HZ0] Hd0] HV] HLNq].
  apply Qle_bool_R in Hu0, Hue0, Hee0, Hea0, Hel0, HZ0, Hd0; rewrite Q2R_0 in *.
  apply N.leb_le in HV.
  do 7 (split; [assumption |]); split; [lia |].
  apply Qle_bool_R in HLNq; rewrite Q2R_of_N in HLNq.
  pose proof (exp_dn_le prec exp_steps LN) as G.
  assert (0 < INR (N.to_nat V)) by (apply lt_0_INR; lia).
  rewrite <- (ln_exp (Q2R LN)); apply afe_ln_le; lra.
Qed.

(** [ce_lvl_C_q], [ce_lvl_R_q] over the reals. *)
Definition ce_lvl_C (u ue XK ci P1 QT : R) : R := P1 * (ci * ((1 + ue) * XK) * (1 + u)) * QT * XK.

Definition ce_lvl_R (u ue ee ea XK ci ri Nx P1 QT AT : R) (Bt Tt Nn : nat) : R :=
  INR Tt * AT * (((ce_lvl_C u ue XK ci P1 QT * (INR Nn * Nx) * ee) * (1 + u) + ea
                  + P1 * (INR Bt * ((ci * Nx * ee + ri * ((1 + ue) * XK + ee)) * (1 + u) + ea))) * (1 + u)).

Lemma Q2R_ce_lvl_C : forall u ue XK ci P1 QT,
  Q2R (ce_lvl_C_q u ue XK ci P1 QT) = ce_lvl_C (Q2R u) (Q2R ue) (Q2R XK) (Q2R ci) (Q2R P1) (Q2R QT).
Proof. intros; unfold ce_lvl_C_q, ce_lvl_C; repeat rewrite ?Q2R_plus, ?Q2R_mult, ?Q2R_1; reflexivity. Qed.

Lemma Q2R_ce_lvl_R : forall u ue ee ea XK ci ri Nx P1 QT AT Bt Tt Nn,
  Q2R (ce_lvl_R_q u ue ee ea XK ci ri Nx P1 QT AT Bt Tt Nn)
  = ce_lvl_R (Q2R u) (Q2R ue) (Q2R ee) (Q2R ea) (Q2R XK) (Q2R ci) (Q2R ri) (Q2R Nx) (Q2R P1) (Q2R QT) (Q2R AT)
             (N.to_nat Bt) (N.to_nat Tt) (N.to_nat Nn).
Proof.
  intros; unfold ce_lvl_R_q, ce_lvl_R.
  repeat rewrite ?Q2R_plus, ?Q2R_mult, ?Q2R_of_N, ?Q2R_1; rewrite Q2R_ce_lvl_C; reflexivity.
Qed.

(** Both values grow with [ci], [ri] and the powers' bounds. *)
Lemma ce_lvl_mono : forall u ue ee ea XK Nx ci ri P1 QT AT ci' ri' P1' QT' AT' Bt Tt Nn,
  0 <= u -> 0 <= ue -> 0 <= ee -> 0 <= ea -> 0 <= XK -> 0 <= Nx ->
  0 <= ci <= ci' -> 0 <= ri <= ri' -> 0 <= P1 <= P1' -> 0 <= QT <= QT' -> 0 <= AT <= AT' ->
  0 <= ce_lvl_C u ue XK ci P1 QT <= ce_lvl_C u ue XK ci' P1' QT'
  /\ 0 <= ce_lvl_R u ue ee ea XK ci ri Nx P1 QT AT Bt Tt Nn <= ce_lvl_R u ue ee ea XK ci' ri' Nx P1' QT' AT' Bt Tt Nn.
Proof.
  intros u ue ee ea XK Nx ci ri P1 QT AT ci' ri' P1' QT' AT' Bt Tt Nn Hu Hue Hee Hea HX HNx
    [Hc Hc'] [Hr Hr'] [HP HP'] [HQ HQ'] [HA HA'].
  assert (HK : 0 <= ci * ((1 + ue) * XK) * (1 + u) <= ci' * ((1 + ue) * XK) * (1 + u)).
  { split; [repeat apply Rmult_le_pos; lra |].
    apply Rmult_le_compat_r; [lra |]; apply Rmult_le_compat_r; [apply Rmult_le_pos |]; lra. }
  assert (HC : 0 <= ce_lvl_C u ue XK ci P1 QT <= ce_lvl_C u ue XK ci' P1' QT').
  { unfold ce_lvl_C; split; [repeat apply Rmult_le_pos; lra |].
    apply Rmult_le_compat_r; [lra |]; apply Rmult_le_compat; [apply Rmult_le_pos; lra | lra | | lra].
    apply Rmult_le_compat; lra. }
  split; [exact HC |]; unfold ce_lvl_R.
  set (C := ce_lvl_C u ue XK ci P1 QT) in *; set (C' := ce_lvl_C u ue XK ci' P1' QT') in *.
  set (Ri := (ci * Nx * ee + ri * ((1 + ue) * XK + ee)) * (1 + u) + ea).
  set (Ri' := (ci' * Nx * ee + ri' * ((1 + ue) * XK + ee)) * (1 + u) + ea).
  assert (HRi : 0 <= Ri <= Ri').
  { assert (0 <= ci * Nx * ee <= ci' * Nx * ee)
      by (split; [repeat apply Rmult_le_pos; lra | apply Rmult_le_compat_r; [lra | apply Rmult_le_compat_r; lra]]).
    assert (0 <= (1 + ue) * XK) by (apply Rmult_le_pos; lra).
    assert (0 <= ri * ((1 + ue) * XK + ee) <= ri' * ((1 + ue) * XK + ee))
      by (split; [apply Rmult_le_pos | apply Rmult_le_compat_r]; lra).
    unfold Ri, Ri'; split; [assert (0 <= (ci * Nx * ee + ri * ((1 + ue) * XK + ee)) * (1 + u)) by (apply Rmult_le_pos; lra); lra |].
    apply Rplus_le_compat_r, Rmult_le_compat_r; lra. }
  pose proof (pos_INR Bt); pose proof (pos_INR Tt); pose proof (pos_INR Nn).
  assert (HN : 0 <= INR Nn * Nx) by (apply Rmult_le_pos; [apply pos_INR | lra]).
  assert (HJ1 : 0 <= C * (INR Nn * Nx) * ee * (1 + u) <= C' * (INR Nn * Nx) * ee * (1 + u)).
  { split; [repeat apply Rmult_le_pos; lra |].
    apply Rmult_le_compat_r; [lra |]; apply Rmult_le_compat_r; [lra |]; apply Rmult_le_compat_r; lra. }
  assert (HJ2 : 0 <= P1 * (INR Bt * Ri) <= P1' * (INR Bt * Ri')).
  { split; [apply Rmult_le_pos; [lra | apply Rmult_le_pos; lra] |].
    apply Rmult_le_compat; [lra | apply Rmult_le_pos; lra | lra | apply Rmult_le_compat_l; lra]. }
  set (J := C * (INR Nn * Nx) * ee * (1 + u) + ea + P1 * (INR Bt * Ri)).
  set (J' := C' * (INR Nn * Nx) * ee * (1 + u) + ea + P1' * (INR Bt * Ri')).
  assert (HJ3 : 0 <= J * (1 + u) <= J' * (1 + u))
    by (unfold J, J'; split; [apply Rmult_le_pos | apply Rmult_le_compat_r]; lra).
  split; [apply Rmult_le_pos; [apply Rmult_le_pos |]; lra |].
  apply Rmult_le_compat; [apply Rmult_le_pos; lra | lra | apply Rmult_le_compat_l; lra | lra].
Qed.

(** [ce_level_q] bounds the level at the exact powers, for any [0 <= ci <= ci_q], [0 <= ri <= ri_q]. *)
Lemma ce_level_q_ge : forall u ue ee ea XK ci ri Nx Dt Bt Tt Nn ci_r ri_r,
  0 <= Q2R u -> 0 <= Q2R ue -> 0 <= Q2R ee -> 0 <= Q2R ea -> 0 <= Q2R XK -> 0 <= Q2R Nx ->
  0 <= ci_r <= Q2R ci -> 0 <= ri_r <= Q2R ri ->
  let P1 := (1 + Q2R u) ^ N.to_nat Dt in
  let QT := ce_Q (Q2R u) (Q2R ue) ^ N.to_nat Tt in
  let AT := ce_a (Q2R u) (Q2R ue) (Q2R ee) (Q2R XK) ^ N.to_nat Tt in
  let L := ce_level_q u ue ee ea XK ci ri Nx Dt Bt Tt Nn in
  0 <= ce_lvl_C (Q2R u) (Q2R ue) (Q2R XK) ci_r P1 QT <= Q2R (fst L)
  /\ 0 <= ce_lvl_R (Q2R u) (Q2R ue) (Q2R ee) (Q2R ea) (Q2R XK) ci_r ri_r (Q2R Nx) P1 QT AT
                  (N.to_nat Bt) (N.to_nat Tt) (N.to_nat Nn) <= Q2R (snd L).
Proof.
  intros u ue ee ea XK ci ri Nx Dt Bt Tt Nn ci_r ri_r Hu Hue Hee Hea HX HNx Hc Hr P1 QT AT L.
  unfold L, ce_level_q; cbv zeta; cbn [fst snd].
  assert (HQ : 0 <= ce_Q (Q2R u) (Q2R ue)) by (unfold ce_Q; apply Rmult_le_pos; [| apply pow_le]; lra).
  assert (Ha : 0 <= ce_a (Q2R u) (Q2R ue) (Q2R ee) (Q2R XK)).
  { unfold ce_a; apply Rmult_le_pos; [apply pow_le; lra |].
    assert (0 <= (1 + Q2R ue) * Q2R XK) by (apply Rmult_le_pos; lra); lra. }
  assert (HP1 : 0 <= P1 <= Q2R (pow_up_N prec (1 + u) Dt)).
  { split; [apply pow_le; lra |].
    pose proof (pow_up_N_ge prec (1 + u) Dt) as G; rewrite Q2R_plus, Q2R_1 in G; apply G, Rle_Qle.
    rewrite Q2R_plus, Q2R_1, Q2R_0; lra. }
  assert (HQT : 0 <= QT <= Q2R (pow_up_N prec ((1 + ue) * ((1 + u) * (1 + u))) Tt)).
  { split; [apply pow_le; exact HQ |]; unfold QT.
    replace (ce_Q (Q2R u) (Q2R ue)) with (Q2R ((1 + ue) * ((1 + u) * (1 + u))))
      by (unfold ce_Q; repeat rewrite ?Q2R_mult, ?Q2R_plus, ?Q2R_1; ring).
    apply pow_up_N_ge, Rle_Qle; rewrite Q2R_0; repeat rewrite ?Q2R_mult, ?Q2R_plus, ?Q2R_1.
    apply Rmult_le_pos; [lra | apply Rmult_le_pos; lra]. }
  assert (HAT : 0 <= AT <= Q2R (pow_up_N prec ((1 + u) * (1 + u) * ((1 + ue) * XK + ee)) Tt)).
  { split; [apply pow_le; exact Ha |]; unfold AT.
    replace (ce_a (Q2R u) (Q2R ue) (Q2R ee) (Q2R XK)) with (Q2R ((1 + u) * (1 + u) * ((1 + ue) * XK + ee)))
      by (unfold ce_a; repeat rewrite ?Q2R_mult, ?Q2R_plus, ?Q2R_1; ring).
    apply pow_up_N_ge, Rle_Qle; rewrite Q2R_0.
    replace (Q2R ((1 + u) * (1 + u) * ((1 + ue) * XK + ee))) with (ce_a (Q2R u) (Q2R ue) (Q2R ee) (Q2R XK))
      by (unfold ce_a; repeat rewrite ?Q2R_mult, ?Q2R_plus, ?Q2R_1; ring); exact Ha. }
  destruct (ce_lvl_mono (Q2R u) (Q2R ue) (Q2R ee) (Q2R ea) (Q2R XK) (Q2R Nx) ci_r ri_r P1 QT AT (Q2R ci) (Q2R ri)
              _ _ _ (N.to_nat Bt) (N.to_nat Tt) (N.to_nat Nn) Hu Hue Hee Hea HX HNx Hc Hr HP1 HQT HAT)
    as [[HC0 HC] [HR0 HR]].
  split; (split; [assumption | eapply Rle_trans; [| apply Qle_R, round_up_ge]]).
  - rewrite Q2R_ce_lvl_C; exact HC.
  - rewrite Q2R_ce_lvl_R; exact HR.
Qed.

(** The range [[1 / (1 + B), (1 + B) e^LN]] on which [ce_lse_q_sound] asks [tl.log]'s
    accuracy holds the range [[1 - bL, (1 + bL) e^LN]] of [ce_lse_error_up] whenever [B]
    bounds [ce_lse_bound] at [NL = bL / (1 - bL)]: [1 - bL = 1 / (1 + NL)], [bL <= NL <= B]. *)
Lemma ce_lse_log_range : forall u el Zmax LN bL delta B,
  0 <= u -> 0 <= el -> 0 <= Zmax -> 0 <= LN -> 0 <= delta -> 0 <= bL < 1 ->
  ce_lse_bound u el Zmax LN (bL / (1 - bL)) delta <= B ->
  / (1 + B) <= 1 - bL /\ (1 + bL) * exp LN <= (1 + B) * exp LN.
Proof.
  intros u el Zmax LN bL delta B Hu Hel HZ HLN Hd [Hb0 Hb1] HB.
  set (NL := bL / (1 - bL)) in *.
  assert (ENL : NL * (1 - bL) = bL) by (unfold NL; field; lra).
  assert (HNL0 : 0 <= NL) by (unfold NL; apply Rmult_le_pos; [lra | left; apply Rinv_0_lt_compat; lra]).
  assert (HNLB : NL <= B).
  { unfold ce_lse_bound in HB.
    assert (0 <= u * (Zmax + LN + NL + el)) by (apply Rmult_le_pos; lra). lra. }
  assert (HbN : bL <= NL) by nra.
  split.
  - apply Rmult_le_reg_r with (1 + B); [lra |]; rewrite Rinv_l by lra; nra.
  - apply Rmult_le_compat_r; [left; apply exp_pos | lra].
Qed.

Section CeLseQ.

Variable M : MixedModel.
Variables u ue ee ea el Zmax delta LN : Q.
Variables Dt Bt Tt Nn : N.
Hypothesis Hu : Q2R u = ff_u (mp_a M).
Hypothesis Hea : Q2R ea = ff_eta (mp_a M).

Lemma Q2R_ce_bL : forall XK P1 QT AT,
  Q2R (ce_bL_q u ue ee ea XK P1 QT AT Bt Tt Nn)
  = ce_bL_p (ff_u (mp_a M)) (Q2R ue) (Q2R ee) (ff_eta (mp_a M)) (Q2R XK) (Q2R P1) (Q2R QT) (Q2R AT)
            (N.to_nat Bt) (N.to_nat Tt) (N.to_nat Nn).
Proof.
  intros; unfold ce_bL_q, ce_lvl_R_q, ce_lvl_C_q, ce_bL_p; cbv zeta.
  repeat rewrite ?Q2R_plus, ?Q2R_minus, ?Q2R_mult, ?Q2R_of_N, ?Q2R_1, ?Q2R_0.
  rewrite Hu, Hea; reflexivity.
Qed.

(** The oracle's value [b] bounds the streamed lse's error ([ce_lse_error_up]) for any
    [tl.exp] within [ue], [ee] on [x <= 0], any [tl.log] within [el] on the numbers of the
    format in [[1 / (1 + b), (1 + b) e^LN]] (inside [[1/2, 2 e^LN]] when [b <= 1]), any tile
    sum meeting [sum_ok]. *)
Theorem ce_lse_q_sound : forall b, ce_lse_q u ue ee ea el Zmax delta LN Dt Bt Tt Nn = Some b ->
  forall (ex lg : R -> R),
  (forall x, x <= 0 -> Rabs (ex x - exp x) <= Q2R ue * exp x + Q2R ee) ->
  (forall x, ff_fmt (mp_a M) (lg x)) ->
  (forall x, ff_fmt (mp_a M) x -> / (1 + Q2R b) <= x <= (1 + Q2R b) * exp (Q2R LN) ->
     Rabs (lg x - ln x) <= Q2R el) ->
  forall (zy0 : R * R) (tiles : list (list (R * R))) ts,
  let st := ce_run M ex (R * R) fst (fun _ => 1) ts (fst zy0, 0) tiles in
  In zy0 (concat tiles) -> sum_ok M ts (N.to_nat Dt) (N.to_nat Bt) ->
  Forall (fun tl => (length tl <= N.to_nat Bt)%nat) tiles -> (length tiles <= N.to_nat Tt)%nat ->
  (length (concat tiles) <= N.to_nat Nn)%nat ->
  (forall zy, In zy (concat tiles) ->
     ff_fmt (mp_a M) (fst zy) /\ Rabs (fst zy) <= Q2R Zmax /\ Rabs (fst zy - snd zy) <= Q2R delta) ->
  Rabs (ff_rnd (mp_a M) (fst st + lg (snd st)) - ln (VectorFacts.rsum (map (fun zy => exp (snd zy)) (concat tiles))))
  <= Q2R b.
Proof.
  intros b Hb ex lg Hex Hlgf Hlg zy0 tiles ts st H0 Hts HB HT HN Hz.
  unfold ce_lse_q in Hb.
  destruct (ce_ok u ue ee ea el Zmax delta LN Nn) eqn:Eok; [| discriminate].
  destruct (ce_ok_spec _ _ _ _ _ _ _ _ _ Eok) as [Hu0 [Hue0 [Hee0 [Hea0 [Hel0 [HZ0 [Hd0 [HNn HLN]]]]]]]].
  destruct (exp_up prec exp_steps (u * (2 * Zmax))%Q) as [XK |] eqn:EX; [| discriminate].
  set (P1 := pow_up_N prec (1 + u) Dt) in Hb.
  set (QT := pow_up_N prec ((1 + ue) * ((1 + u) * (1 + u))) Tt) in Hb.
  set (AT := pow_up_N prec ((1 + u) * (1 + u) * ((1 + ue) * XK + ee)) Tt) in Hb.
  destruct (Qlt_le_dec (ce_bL_q u ue ee ea XK P1 QT AT Bt Tt Nn) 1) as [HL | HL]; [| discriminate].
  destruct (Qle_bool 0 (ce_bL_q u ue ee ea XK P1 QT AT Bt Tt Nn)) eqn:HL0; [| discriminate].
  injection Hb as Eb.
  pose proof (exp_up_ge _ _ _ _ EX) as HX.
  rewrite Q2R_mult, Q2R_mult, Q2R_2, Hu in HX.
  assert (HX0 : 0 <= Q2R XK) by (eapply Rle_trans; [left; apply exp_pos | exact HX]).
  pose proof (Qlt_Rlt _ _ HL) as HLr; rewrite Q2R_1, Q2R_ce_bL in HLr.
  apply Qle_bool_R in HL0; rewrite Q2R_0, Q2R_ce_bL in HL0.
  set (bL := ce_bL_p (ff_u (mp_a M)) (Q2R ue) (Q2R ee) (ff_eta (mp_a M)) (Q2R XK) (Q2R P1) (Q2R QT) (Q2R AT)
                     (N.to_nat Bt) (N.to_nat Tt) (N.to_nat Nn)) in *.
  assert (H1L : ~ (1 - ce_bL_q u ue ee ea XK P1 QT AT Bt Tt Nn == 0)%Q)
    by (apply Q2R_nonzero; rewrite Q2R_minus, Q2R_1, Q2R_ce_bL; fold bL; lra).
  assert (HP1 : (1 + ff_u (mp_a M)) ^ N.to_nat Dt <= Q2R P1)
    by (rewrite <- Hu; apply pow_one_plus_le, Rle_Qle; rewrite Q2R_0; lra).
  assert (HQT : ce_Q (ff_u (mp_a M)) (Q2R ue) ^ N.to_nat Tt <= Q2R QT).
  { replace (ce_Q (ff_u (mp_a M)) (Q2R ue)) with (Q2R ((1 + ue) * ((1 + u) * (1 + u))))
      by (unfold ce_Q; repeat rewrite ?Q2R_mult, ?Q2R_plus, ?Q2R_1; rewrite Hu; ring).
    apply pow_up_N_ge, Rle_Qle; rewrite Q2R_0; repeat rewrite ?Q2R_mult, ?Q2R_plus, ?Q2R_1.
    apply Rmult_le_pos; [lra | apply Rmult_le_pos; lra]. }
  assert (HAT : ce_a (ff_u (mp_a M)) (Q2R ue) (Q2R ee) (Q2R XK) ^ N.to_nat Tt <= Q2R AT).
  { replace (ce_a (ff_u (mp_a M)) (Q2R ue) (Q2R ee) (Q2R XK)) with (Q2R ((1 + u) * (1 + u) * ((1 + ue) * XK + ee)))
      by (unfold ce_a; repeat rewrite ?Q2R_mult, ?Q2R_plus, ?Q2R_1; rewrite Hu; ring).
    apply pow_up_N_ge, Rle_Qle; rewrite Q2R_0; repeat rewrite ?Q2R_mult, ?Q2R_plus, ?Q2R_1.
    apply Rmult_le_pos; [apply Rmult_le_pos; lra |].
    assert (0 <= (1 + Q2R ue) * Q2R XK) by (apply Rmult_le_pos; lra); lra. }
  assert (Hbd : ce_lse_bound (ff_u (mp_a M)) (Q2R el) (Q2R Zmax) (Q2R LN) (bL / (1 - bL)) (Q2R delta) <= Q2R b).
  { rewrite <- Eb; eapply Rle_trans; [| apply Qle_R, round_up_ge].
    unfold ce_lse_bound, ce_lse_bound_q.
    rewrite !Q2R_plus, Q2R_mult, !Q2R_plus, Q2R_div by exact H1L.
    rewrite Q2R_minus, Q2R_1, Q2R_ce_bL, Hu; fold bL; lra. }
  assert (HLN0 : 0 <= Q2R LN)
    by (eapply Rle_trans; [| exact HLN]; rewrite <- ln_1; apply afe_ln_le; [lra | apply (le_INR 1); exact HNn]).
  destruct (ce_lse_log_range (ff_u (mp_a M)) _ _ _ bL _ _ (ff_u_nonneg (mp_a M)) Hel0 HZ0 HLN0 Hd0 (conj HL0 HLr) Hbd)
    as [Hd1 Hd2].
  unfold st.
  eapply Rle_trans; [| exact Hbd].
  refine (ce_lse_error_up M ex (Q2R ue) (Q2R ee) Hue0 Hee0 Hex lg (Q2R el) (/ (1 + Q2R b))
            ((1 + Q2R b) * exp (Q2R LN)) Hlgf Hlg zy0 tiles ts
            (N.to_nat Dt) (N.to_nat Bt) (N.to_nat Tt) (N.to_nat Nn) (Q2R Zmax) (Q2R XK) (Q2R delta) (Q2R LN)
            (bL / (1 - bL)) (Q2R P1) (Q2R QT) (Q2R AT) H0 Hts HB HT HN Hz _ HP1 HQT HAT _ HLN _ _ _).
  - exact HX.
  - exact HLr.
  - fold bL; apply afe_neg_ln_le; lra.
  - exact Hd1.
  - exact Hd2.
Qed.

(** The oracle's value [b] for the two-level schedule bounds the merged lse's error
    ([ce_lse_error_two_level]): groups streamed from their first logit with the tile sum
    [ts1], their states merged from the first group's with [ts2]. *)
Theorem ce_merge_lse_q_sound : forall (Dt1 Bt1 T1 N1 Dt2 Bt2 T2 Ng V : N) b,
  ce_merge_lse_q u ue ee ea el Zmax delta LN Dt1 Bt1 T1 N1 Dt2 Bt2 T2 Ng V = Some b ->
  forall (ex lg : R -> R),
  (forall x, x <= 0 -> Rabs (ex x - exp x) <= Q2R ue * exp x + Q2R ee) ->
  (forall x, ff_fmt (mp_a M) (lg x)) ->
  (forall x, ff_fmt (mp_a M) x -> / (1 + Q2R b) <= x <= (1 + Q2R b) * exp (Q2R LN) ->
     Rabs (lg x - ln x) <= Q2R el) ->
  forall (ts1 ts2 : list R -> R) (g0 : list (list (R * R))) (tiles2 : list (list (list (list (R * R))))),
  let st := ce_run M ex (list (list (R * R))) (grp_m M ex ts1) (grp_l M ex ts1) ts2 (grp_m M ex ts1 g0, 0) tiles2 in
  let zs := concat (map (@concat _) (concat tiles2)) in
  In g0 (concat tiles2) -> sum_ok M ts1 (N.to_nat Dt1) (N.to_nat Bt1) -> sum_ok M ts2 (N.to_nat Dt2) (N.to_nat Bt2) ->
  (forall g, In g (concat tiles2) -> concat g <> nil /\ Forall (fun tl => (length tl <= N.to_nat Bt1)%nat) g
                                    /\ (length g <= N.to_nat T1)%nat /\ (length (concat g) <= N.to_nat N1)%nat) ->
  Forall (fun tl => (length tl <= N.to_nat Bt2)%nat) tiles2 -> (length tiles2 <= N.to_nat T2)%nat ->
  (length (concat tiles2) <= N.to_nat Ng)%nat -> (length zs <= N.to_nat V)%nat ->
  (forall zy, In zy zs -> ff_fmt (mp_a M) (fst zy) /\ Rabs (fst zy) <= Q2R Zmax /\ Rabs (fst zy - snd zy) <= Q2R delta) ->
  Rabs (ff_rnd (mp_a M) (fst st + lg (snd st)) - ln (VectorFacts.rsum (map (fun zy => exp (snd zy)) zs))) <= Q2R b.
Proof.
  intros Dt1 Bt1 T1 N1 Dt2 Bt2 T2 Ng V b Hb ex lg Hex Hlgf Hlg ts1 ts2 g0 tiles2 st zs
    H0 Hts1 Hts2 Hg HB2 HT2 HN2 HV Hz.
  unfold ce_merge_lse_q in Hb.
  destruct (ce_ok u ue ee ea el Zmax delta LN V) eqn:Eok; [| discriminate].
  destruct (ce_ok_spec _ _ _ _ _ _ _ _ _ Eok) as [Hu0 [Hue0 [Hee0 [Hea0 [Hel0 [HZ0 [Hd0 [HV1 HLNV]]]]]]]].
  destruct (exp_up prec exp_steps (u * (2 * Zmax))%Q) as [XK |] eqn:EX; [| discriminate].
  revert Hb; cbv zeta.
  set (L1 := ce_level_q u ue ee ea XK 1 0 1 Dt1 Bt1 T1 N1).
  set (L2 := ce_level_q u ue ee ea XK (fst L1) (snd L1) (Q_of_N N1) Dt2 Bt2 T2 Ng).
  destruct (Qlt_le_dec (fst L2 - 1 + snd L2) 1) as [HL | HL]; [| discriminate].
  destruct (Qle_bool 0 (fst L2 - 1 + snd L2)) eqn:HL0; [| discriminate].
  intros Hb; injection Hb as Eb.
  pose proof (exp_up_ge _ _ _ _ EX) as HX; rewrite Q2R_mult, Q2R_mult, Q2R_2, Hu in HX.
  assert (HX0 : 0 <= Q2R XK) by (eapply Rle_trans; [left; apply exp_pos | exact HX]).
  assert (HN1 : 0 <= Q2R (Q_of_N N1)) by (rewrite Q2R_of_N; apply pos_INR).
  destruct (ce_level_q_ge u ue ee ea XK 1 0 1 Dt1 Bt1 T1 N1 1 0 Hu0 Hue0 Hee0 Hea0 HX0
              ltac:(rewrite Q2R_1; lra) ltac:(rewrite Q2R_1; lra) ltac:(rewrite Q2R_0; lra)) as [HC1 HR1].
  fold L1 in HC1, HR1; rewrite Q2R_1 in HR1.
  destruct (ce_level_q_ge u ue ee ea XK (fst L1) (snd L1) (Q_of_N N1) Dt2 Bt2 T2 Ng _ _ Hu0 Hue0 Hee0 Hea0 HX0 HN1
              HC1 HR1) as [HC2 HR2].
  fold L2 in HC2, HR2; rewrite Q2R_of_N in HR2.
  rewrite Hu in HC1, HC2; rewrite Hu, Hea in HR1, HR2.
  apply Qlt_Rlt in HL; apply Qle_bool_R in HL0; rewrite Q2R_plus, Q2R_minus, Q2R_1 in HL; rewrite Q2R_0 in HL0.
  rewrite Q2R_plus, Q2R_minus, Q2R_1 in HL0.
  set (bL := Q2R (fst L2) - 1 + Q2R (snd L2)) in *.
  assert (H1L : ~ (1 - (fst L2 - 1 + snd L2) == 0)%Q)
    by (apply Q2R_nonzero; rewrite Q2R_minus, Q2R_1, Q2R_plus, Q2R_minus, Q2R_1; fold bL; lra).
  assert (Hzs : (0 < length zs)%nat).
  { destruct (Hg g0 H0) as [Hne _]; destruct (concat g0) as [| zy r] eqn:E; [congruence |].
    assert (Hin : In zy zs)
      by (unfold zs; apply in_concat; exists (concat g0); split; [apply in_map, H0 | rewrite E; left; reflexivity]).
    destruct zs; [contradiction | cbn; lia]. }
  assert (Hbd : ce_lse_bound (ff_u (mp_a M)) (Q2R el) (Q2R Zmax) (Q2R LN) (bL / (1 - bL)) (Q2R delta) <= Q2R b).
  { rewrite <- Eb; eapply Rle_trans; [| apply Qle_R, round_up_ge].
    match goal with |- ?l <= _ =>
      change (l <= Q2R (ce_lse_bound_q u el Zmax LN ((fst L2 - 1 + snd L2) / (1 - (fst L2 - 1 + snd L2))) delta))
    end.
    unfold ce_lse_bound, ce_lse_bound_q.
    rewrite !Q2R_plus, Q2R_mult, !Q2R_plus, Q2R_div by exact H1L.
    rewrite Q2R_minus, Q2R_1, Q2R_plus, Q2R_minus, Q2R_1, Hu; fold bL; lra. }
  assert (HLN0 : 0 <= Q2R LN)
    by (eapply Rle_trans; [| exact HLNV]; rewrite <- ln_1; apply afe_ln_le; [lra | apply (le_INR 1); exact HV1]).
  destruct (ce_lse_log_range (ff_u (mp_a M)) _ _ _ bL _ _ (ff_u_nonneg (mp_a M)) Hel0 HZ0 HLN0 Hd0 (conj HL0 HL) Hbd)
    as [Hd1 Hd2].
  assert (Hb2 : forall b0, b0 <= bL -> / (1 + Q2R b) <= 1 - b0 /\ (1 + b0) * exp (Q2R LN) <= (1 + Q2R b) * exp (Q2R LN)).
  { intros b0 Hb0; split; [lra |]; eapply Rle_trans; [| exact Hd2].
    apply Rmult_le_compat_r; [left; apply exp_pos | lra]. }
  eapply Rle_trans; [| exact Hbd].
  refine (ce_lse_error_two_level M ex (Q2R ue) (Q2R ee) Hue0 Hee0 Hex lg (Q2R el) (/ (1 + Q2R b))
            ((1 + Q2R b) * exp (Q2R LN)) Hlgf Hlg ts1 g0 tiles2 ts2
            (N.to_nat Dt1) (N.to_nat Bt1) (N.to_nat T1) (N.to_nat N1) (N.to_nat Dt2) (N.to_nat Bt2) (N.to_nat T2)
            (N.to_nat Ng) (Q2R Zmax) (Q2R XK) (Q2R delta) (Q2R LN) (bL / (1 - bL))
            H0 Hts1 Hts2 Hg HB2 HT2 HN2 Hz HX _ _ _ _ _).
  - cbv zeta; eapply Rle_lt_trans; [| exact HL]; unfold bL.
    apply Rplus_le_compat; [apply Rplus_le_compat_r; exact (proj2 HC2) | exact (proj2 HR2)].
  - eapply Rle_trans; [| exact HLNV].
    apply afe_ln_le; [apply lt_0_INR, Hzs | apply le_INR, HV].
  - cbv zeta; match goal with |- - ln (1 - ?b0) <= _ =>
      assert (Hb0 : b0 <= bL) by (unfold bL; apply Rplus_le_compat; [apply Rplus_le_compat_r; exact (proj2 HC2) | exact (proj2 HR2)]);
      apply Rle_trans with (- ln (1 - bL)); [apply Ropp_le_contravar, afe_ln_le; lra | apply afe_neg_ln_le; lra]
    end.
  - cbv zeta; match goal with |- _ <= 1 - ?b0 =>
      assert (Hb0 : b0 <= bL) by (unfold bL; apply Rplus_le_compat; [apply Rplus_le_compat_r; exact (proj2 HC2) | exact (proj2 HR2)]); exact (proj1 (Hb2 _ Hb0))
    end.
  - cbv zeta; match goal with |- (1 + ?b0) * _ <= _ =>
      assert (Hb0 : b0 <= bL) by (unfold bL; apply Rplus_le_compat; [apply Rplus_le_compat_r; exact (proj2 HC2) | exact (proj2 HR2)]); exact (proj2 (Hb2 _ Hb0))
    end.
Qed.

End CeLseQ.


(** ** The linear cross-entropy's gradients: the coefficients of [ce_dw_bound] *)

Local Open Scope Q_scope.

Fixpoint qpow (x : Q) (n : nat) : Q := match n with O => 1 | S k => x * qpow x k end.

(** [ce_dw_bound gd ((1 + ue) X) a0 ua C S T H] of CrossEntropyGradError.v is
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
    CrossEntropyGradError.ce_dw_bound M (Q2R ee) (gamma (ff_u (mp_a M)) (N.to_nat n)) ((1 + Q2R ue) * X) (Q2R a0)
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
  - right; unfold qa, qb, qc, qd, CrossEntropyGradError.ce_dw_bound, CrossEntropyGradError.ce_Q,
      CrossEntropyGradError.ce_E2, CrossEntropyGradError.ce_E1, CrossEntropyGradError.ce_w,
      CrossEntropyGradError.ce_Kg, CrossEntropyGradError.ce_cg.
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
  CrossEntropyGradError.epi_ok M alpha epi -> Rabs (alpha - Q2R a0) <= Q2R ua * Rabs (Q2R a0) ->
  0 <= delta -> 0 <= Dl -> 0 <= Am -> delta + Dl + ff_u (mp_a M) * Am + ff_eta (mp_a M) <= Q2R x ->
  (forall c, In c cs -> CrossEntropyGradError.dsum_ok M ex T iz il ih it ik dsum (gamma (ff_u (mp_a M)) (N.to_nat n)) c) ->
  (forall y, In y (concat cs) -> CrossEntropyGradError.ce_ok T iz il iy iL ik delta Dl Am y) ->
  length cs = N.to_nat C ->
  let xs := concat cs in
  Rabs (CrossEntropyGradError.ce_run M ex T iz il ih it ik dsum epi cs
        - Q2R a0 * VectorFacts.rsum (map (CrossEntropyGradError.ce_exact T iy iL ih it ik) xs))
  <= Q2R cS * CrossEntropyGradError.ce_S T iy iL ih ik xs + Q2R cT * CrossEntropyGradError.ce_T T iy iL ih it ik xs
     + Q2R cH * CrossEntropyGradError.ce_Ha T ih ik xs + Q2R c0.
Proof.
  intros cS cT cH c0 Hb ex Hex T iz il iy iL ih it ik dsum epi alpha delta Dl Am cs Hepi Hal Hd Hl Ham Hx Hds Hok HC xs.
  destruct (ce_grad_q_spec cS cT cH c0 Hb) as [Hue0 [Hee0 [Ha0 [Hua0 [Hn [X [HX Hle]]]]]]].
  destruct (CrossEntropyGradError.ce_sums_nonneg T iy iL ih it ik xs) as [HS [HT HH]].
  eapply Rle_trans; [| apply Hle; assumption].
  rewrite <- HC.
  apply (CrossEntropyGradError.ce_dw_error M ex (Q2R ue) (Q2R ee) Hue0 Hee0 Hex T iz il iy iL ih it ik dsum epi alpha
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
  CrossEntropyGradError.dsum_ok M ex T iz il ih it ik dsum (gamma (ff_u (mp_a M)) (N.to_nat n)) xs ->
  (forall y, In y xs -> CrossEntropyGradError.ce_ok T iz il iy iL ik delta Dl Am y) ->
  N.to_nat C = 1%nat ->
  Rabs (CrossEntropyGradError.ce_dh M ex T iz il ih it ik dsum alpha xs
        - Q2R a0 * VectorFacts.rsum (map (CrossEntropyGradError.ce_exact T iy iL ih it ik) xs))
  <= Q2R cS * CrossEntropyGradError.ce_S T iy iL ih ik xs + Q2R cT * CrossEntropyGradError.ce_T T iy iL ih it ik xs
     + Q2R cH * CrossEntropyGradError.ce_Ha T ih ik xs + Q2R c0.
Proof.
  intros cS cT cH c0 Hb ex Hex T iz il iy iL ih it ik dsum alpha delta Dl Am xs Hal Hd Hl Ham Hx Hds Hok HC.
  destruct (ce_grad_q_spec cS cT cH c0 Hb) as [Hue0 [Hee0 [Ha0 [Hua0 [Hn [X [HX Hle]]]]]]].
  destruct (CrossEntropyGradError.ce_sums_nonneg T iy iL ih it ik xs) as [HS [HT HH]].
  eapply Rle_trans; [| apply Hle; assumption].
  rewrite HC.
  apply (CrossEntropyGradError.ce_dh_error M ex (Q2R ue) (Q2R ee) Hue0 Hee0 Hex T iz il iy iL ih it ik dsum alpha
           (Q2R a0) (Q2R ua) _ delta Dl Am X xs Hua0 Hal (ce_grad_gamma_nonneg Hn) Hd Hl Ham
           (ce_grad_exp_le _ X Hx HX) Hds Hok).
Qed.

End CeGradQ.



(** ** The gradients' a-posteriori bound: the coefficients of [ce_gen_bound] at [Sp + (Kg - 1) T + cg Ha] *)

Local Open Scope Q_scope.

(** [ce_gen_bound gd a0 ua C (Sp + (Kg - 1) T + cg Ha) T] of CrossEntropyGradError.v (the bound of
    [ce_gp_dw_error] / [ce_gp_dh_error], CrossEntropyGradPosteriori.v) is
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
    CrossEntropyGradError.ce_gen_bound M (gamma (ff_u (mp_a M)) (N.to_nat n)) (Q2R a0) (Q2R ua) (N.to_nat C)
      (Sx + (CrossEntropyGradError.ce_Kg M - 1) * Tx + CrossEntropyGradError.ce_cg M (Q2R ee) * Hx) Tx
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
  - right; unfold qa, qb, qc, qd, CrossEntropyGradError.ce_gen_bound, CrossEntropyGradError.ce_Q,
      CrossEntropyGradError.ce_w, CrossEntropyGradError.ce_Kg, CrossEntropyGradError.ce_cg.
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
  (forall y, In y xs -> CrossEntropyGradPosteriori.ce_gp_ok M T iz il iy iL ik A Am X y) ->
  0 <= CrossEntropyGradPosteriori.ce_gp_S M ue T iy iL ih ik X xs.
Proof.
  intros ue T iz il iy iL ih ik A Am X xs Hue Hok.
  pose proof (ff_u_nonneg (mp_a M)); pose proof (ff_eta_nonneg (mp_a M)); pose proof (ff_u_nonneg (mp_s M)).
  unfold CrossEntropyGradPosteriori.ce_gp_S; apply VectorFacts.rsum_nonneg; intros r Hr.
  apply in_map_iff in Hr; destruct Hr as [y [<- Hy]].
  unfold CrossEntropyGradPosteriori.ce_gp_k, CrossEntropyGradError.ce_P.
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
  CrossEntropyGradError.epi_ok M alpha epi -> Rabs (alpha - Q2R a0) <= Q2R ua * Rabs (Q2R a0) ->
  (forall c, In c cs -> CrossEntropyGradError.dsum_ok M ex T iz il ih it ik dsum (gamma (ff_u (mp_a M)) (N.to_nat n)) c) ->
  (forall y, In y (concat cs) -> CrossEntropyGradPosteriori.ce_gp_ok M T iz il iy iL ik A Am X y) ->
  length cs = N.to_nat C ->
  let xs := concat cs in
  Rabs (CrossEntropyGradError.ce_run M ex T iz il ih it ik dsum epi cs
        - Q2R a0 * VectorFacts.rsum (map (CrossEntropyGradError.ce_exact T iy iL ih it ik) xs))
  <= Q2R cS * CrossEntropyGradPosteriori.ce_gp_S M ue T iy iL ih ik X xs
     + Q2R cT * CrossEntropyGradError.ce_T T iy iL ih it ik xs
     + Q2R cH * CrossEntropyGradError.ce_Ha T ih ik xs + Q2R c0.
Proof.
  intros cS cT cH c0 Hb ex ue Hue Hex T iz il iy iL ih it ik dsum epi alpha A Am X cs Hepi Hal Hds Hok HC xs.
  destruct (ce_gp_q_spec cS cT cH c0 Hb) as [Hee0 [Ha0 [Hua0 [Hn Hle]]]].
  destruct (CrossEntropyGradError.ce_sums_nonneg T iy iL ih it ik xs) as [_ [HT HH]].
  pose proof (ce_gp_q_S_nonneg ue T iz il iy iL ih ik A Am X xs Hue Hok) as HS.
  eapply Rle_trans; [| apply Hle; assumption].
  rewrite <- HC.
  apply (CrossEntropyGradPosteriori.ce_gp_dw_error M ex ue (Q2R ee) Hue Hee0 Hex T iz il iy iL ih it ik dsum epi
           alpha (Q2R a0) (Q2R ua) _ A Am X cs Hepi Hua0 Hal (ce_grad_gamma_nonneg M n Hn) Hds Hok).
Qed.

(** ... and dH's entry, one product rounded once ([ce_gp_dh_error], [C = 1]). *)
Theorem ce_gp_q_sound_dh : forall cS cT cH c0, ce_gp_q u ea us es ee a0 ua n C = Some (cS, cT, cH, c0) ->
  forall ex (ue : R), 0 <= ue -> (forall y, Rabs (ex y - exp y) <= ue * exp y + Q2R ee) ->
  forall (T : Type) (iz il iy iL ih : T -> R) (it ik : T -> bool) (dsum : list R -> R)
    (alpha : R) (A Am X : T -> R) (xs : list T),
  Rabs (alpha - Q2R a0) <= Q2R ua * Rabs (Q2R a0) ->
  CrossEntropyGradError.dsum_ok M ex T iz il ih it ik dsum (gamma (ff_u (mp_a M)) (N.to_nat n)) xs ->
  (forall y, In y xs -> CrossEntropyGradPosteriori.ce_gp_ok M T iz il iy iL ik A Am X y) ->
  N.to_nat C = 1%nat ->
  Rabs (CrossEntropyGradError.ce_dh M ex T iz il ih it ik dsum alpha xs
        - Q2R a0 * VectorFacts.rsum (map (CrossEntropyGradError.ce_exact T iy iL ih it ik) xs))
  <= Q2R cS * CrossEntropyGradPosteriori.ce_gp_S M ue T iy iL ih ik X xs
     + Q2R cT * CrossEntropyGradError.ce_T T iy iL ih it ik xs
     + Q2R cH * CrossEntropyGradError.ce_Ha T ih ik xs + Q2R c0.
Proof.
  intros cS cT cH c0 Hb ex ue Hue Hex T iz il iy iL ih it ik dsum alpha A Am X xs Hal Hds Hok HC.
  destruct (ce_gp_q_spec cS cT cH c0 Hb) as [Hee0 [Ha0 [Hua0 [Hn Hle]]]].
  destruct (CrossEntropyGradError.ce_sums_nonneg T iy iL ih it ik xs) as [_ [HT HH]].
  pose proof (ce_gp_q_S_nonneg ue T iz il iy iL ih ik A Am X xs Hue Hok) as HS.
  eapply Rle_trans; [| apply Hle; assumption].
  rewrite HC.
  apply (CrossEntropyGradPosteriori.ce_gp_dh_error M ex ue (Q2R ee) Hue Hee0 Hex T iz il iy iL ih it ik dsum
           alpha (Q2R a0) (Q2R ua) _ A Am X xs Hua0 Hal (ce_grad_gamma_nonneg M n Hn) Hds Hok).
Qed.

End CeGpQ.


(** ** The capped gradients: the coefficients of [ce_gen_bound] at [sc_E1] *)

Local Open Scope Q_scope.

(** [ce_gen_bound gd a0 ua C (sc_E1 ee ((1 + ue) X) Ec Sk Tc S T0 Ha) Tc] of
    CrossEntropyGradError.v / CrossEntropySoftcapGradError.v (the bound of [sc_dw_error] /
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
  CrossEntropyGradError.ce_gen_bound M gd a0 ua C B1 Tx <= CrossEntropyGradError.ce_gen_bound M gd a0 ua C B2 Tx.
Proof.
  intros M gd a0 ua C B1 B2 Tx Hgd Hua HB.
  pose proof (CrossEntropyGradError.ce_Kg_ge_1 M) as HK.
  destruct (CrossEntropyGradError.ce_nonneg M) as [Hu _].
  assert (Hw : 0 <= CrossEntropyGradError.ce_w M ua)
    by (unfold CrossEntropyGradError.ce_w; assert (0 <= ff_u (mp_a M) * (1 + ua)) by (apply Rmult_le_pos; lra); lra).
  assert (Hp : 0 <= CrossEntropyGradError.ce_Kg M ^ C * Rabs a0 * (1 + CrossEntropyGradError.ce_w M ua) * (1 + gd))
    by (repeat apply Rmult_le_pos; try apply pow_le; try apply Rabs_pos; lra).
  assert (Hd : 0 <= CrossEntropyGradError.ce_Kg M ^ C * Rabs a0 * (1 + CrossEntropyGradError.ce_w M ua) * (1 + gd)
                    * (B2 - B1)) by (apply Rmult_le_pos; lra).
  unfold CrossEntropyGradError.ce_gen_bound, CrossEntropyGradError.ce_Q.
  match goal with |- ?l <= ?r => assert (E : r - l = CrossEntropyGradError.ce_Kg M ^ C * Rabs a0
                                              * (1 + CrossEntropyGradError.ce_w M ua) * (1 + gd) * (B2 - B1))
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
    CrossEntropyGradError.ce_gen_bound M (gamma (ff_u (mp_a M)) (N.to_nat n)) (Q2R a0) (Q2R ua) (N.to_nat C)
      (CrossEntropySoftcapGradError.sc_E1 M (Q2R ee) ((1 + Q2R ue) * X) Ecr Skx Tcx Sx T0x Hx) Tcx
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
  pose proof (CrossEntropyGradError.ce_Kg_ge_1 M) as HKg.
  destruct (CrossEntropyGradError.ce_nonneg M) as [Hu1 [Hea1 _]].
  rewrite Q2R_plus, Q2R_1.
  eapply Rle_trans; [apply ce_gen_bound_mono; [exact Hgd | exact Hua0 |] |].
  { instantiate (1 := CrossEntropySoftcapGradError.sc_E1 M (Q2R ee) ((1 + Q2R ue) * (1 + Q2R e)) (Q2R Ec)
                        Skx Tcx Sx T0x Hx).
    assert (Hf1 : 1 <= (1 + Q2R ue) * (1 + Q2R e))
      by (rewrite <- (Rmult_1_l 1) at 1; apply Rmult_le_compat; lra).
    assert (Hf : 0 <= (1 + ff_u (mp_a M)) * ((1 + Q2R ue) * (1 + Q2R e)) - 1).
    { assert (1 <= (1 + ff_u (mp_a M)) * ((1 + Q2R ue) * (1 + Q2R e)))
        by (rewrite <- (Rmult_1_l 1) at 1; apply Rmult_le_compat; lra). lra. }
    assert (Hc1 : 0 <= CrossEntropySoftcapGradError.sc_c1 M (Q2R ee))
      by (unfold CrossEntropySoftcapGradError.sc_c1; nra).
    assert (Hs : 0 <= ((1 + ff_u (mp_a M)) * ((1 + Q2R ue) * (1 + Q2R e)) - 1) * Sx
                      + (1 + ff_u (mp_a M)) * T0x + CrossEntropySoftcapGradError.sc_c1 M (Q2R ee) * Hx).
    { assert (0 <= ((1 + ff_u (mp_a M)) * ((1 + Q2R ue) * (1 + Q2R e)) - 1) * Sx) by (apply Rmult_le_pos; lra).
      assert (0 <= (1 + ff_u (mp_a M)) * T0x) by (apply Rmult_le_pos; lra).
      assert (0 <= CrossEntropySoftcapGradError.sc_c1 M (Q2R ee) * Hx) by (apply Rmult_le_pos; lra).
      lra. }
    assert (0 <= CrossEntropyGradError.ce_Kg M * (Q2R Ec - Ecr)
                 * (((1 + ff_u (mp_a M)) * ((1 + Q2R ue) * (1 + Q2R e)) - 1) * Sx
                    + (1 + ff_u (mp_a M)) * T0x + CrossEntropySoftcapGradError.sc_c1 M (Q2R ee) * Hx))
      by (apply Rmult_le_pos; [apply Rmult_le_pos |]; lra).
    unfold CrossEntropySoftcapGradError.sc_E1; nra. }
  match goal with |- _ <= Q2R (round_up prec ?a) * _ + Q2R (round_up prec ?b) * _ + Q2R (round_up prec ?c) * _
                         + Q2R (round_up prec ?d) * _ + Q2R (round_up prec ?f) * _ + Q2R (round_up prec ?g) =>
    set (qa := a); set (qb := b); set (qc := c); set (qd := d); set (qf := f); set (qg := g) end.
  pose proof (Qle_R _ _ (round_up_ge prec qa)); pose proof (Qle_R _ _ (round_up_ge prec qb)).
  pose proof (Qle_R _ _ (round_up_ge prec qc)); pose proof (Qle_R _ _ (round_up_ge prec qd)).
  pose proof (Qle_R _ _ (round_up_ge prec qf)); pose proof (Qle_R _ _ (round_up_ge prec qg)).
  apply Rle_trans with (Q2R qa * Sx + Q2R qb * T0x + Q2R qc * Hx + Q2R qd * Skx + Q2R qf * Tcx + Q2R qg).
  - right; unfold qa, qb, qc, qd, qf, qg, CrossEntropyGradError.ce_gen_bound, CrossEntropyGradError.ce_Q,
      CrossEntropyGradError.ce_w, CrossEntropyGradError.ce_Kg, CrossEntropySoftcapGradError.sc_E1,
      CrossEntropySoftcapGradError.sc_Kc, CrossEntropySoftcapGradError.sc_c1, CrossEntropySoftcapGradError.sc_cc,
      CrossEntropyGradError.ce_Kg, CrossEntropySoftcapGradError.sc_c1.
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
  0 <= CrossEntropySoftcapGradError.sc_Sk c T iy iL ih ik xs
  /\ 0 <= CrossEntropySoftcapGradError.sc_Tc c T iy iL ih it ik xs.
Proof.
  intros c T iy iL ih it ik xs; split.
  - unfold CrossEntropySoftcapGradError.sc_Sk; apply VectorFacts.rsum_nonneg; intros r Hr.
    apply in_map_iff in Hr; destruct Hr as [y [<- _]].
    assert (HP : 0 <= CrossEntropyGradError.ce_P T (CrossEntropySoftcapGradError.sc_yc c T iy) iL ik y)
      by (unfold CrossEntropyGradError.ce_P; destruct (ik y); [left; apply exp_pos | lra]).
    pose proof (CrossEntropySoftcapGradError.sc_k_bounds c (iy y)) as Hk.
    unfold CrossEntropySoftcapGradError.sc_k.
    apply Rmult_le_pos; [apply Rmult_le_pos; lra | apply Rabs_pos].
  - unfold CrossEntropySoftcapGradError.sc_Tc, CrossEntropyGradError.ce_gen_T; apply VectorFacts.rsum_nonneg.
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
  forall cf : R -> R, (forall z, CrossEntropySoftcapError.sc_chain_ok M dv z (cf z)) ->
  forall (T : Type) (ir il iy iL ih : T -> R) (it ik : T -> bool) (dsum : list R -> R) (epi : R -> R -> R)
    (alpha dr Dl Am : R) (cs : list (list T)),
  CrossEntropyGradError.epi_ok M alpha epi -> Rabs (alpha - Q2R a0) <= Q2R ua * Rabs (Q2R a0) ->
  CrossEntropySoftcapError.sc_delta (ff_u (mp_a M)) (ff_eta (mp_a M)) c ut et dr + Dl + ff_u (mp_a M) * Am
    + ff_eta (mp_a M) <= Q2R x ->
  CrossEntropySoftcapError.sc_chain_bound (ff_u (mp_a M)) (ff_eta (mp_a M)) c ud ed
    (CrossEntropySoftcapError.sc_delta (ff_u (mp_a M)) (ff_eta (mp_a M)) c ut et dr) <= Q2R Ec ->
  (forall ch, In ch cs -> CrossEntropyGradError.ce_gen_dsum_ok T
     (CrossEntropySoftcapGradError.sc_term M ex c th cf T ir il ih it ik) dsum (gamma (ff_u (mp_a M)) (N.to_nat n)) ch) ->
  (forall y, In y (concat cs) -> CrossEntropySoftcapGradError.sc_ok M c th T ir il iy iL ik dr Dl Am y) ->
  length cs = N.to_nat C ->
  let xs := concat cs in
  Rabs (CrossEntropyGradError.ce_gen_run M T (CrossEntropySoftcapGradError.sc_term M ex c th cf T ir il ih it ik)
          dsum epi cs
        - Q2R a0 * VectorFacts.rsum (map (CrossEntropySoftcapGradError.sc_exact c T iy iL ih it ik) xs))
  <= Q2R cS * CrossEntropyGradError.ce_S T (CrossEntropySoftcapGradError.sc_yc c T iy) iL ih ik xs
     + Q2R cT * CrossEntropyGradError.ce_T T (CrossEntropySoftcapGradError.sc_yc c T iy) iL ih it ik xs
     + Q2R cH * CrossEntropyGradError.ce_Ha T ih ik xs
     + Q2R cK * CrossEntropySoftcapGradError.sc_Sk c T iy iL ih ik xs
     + Q2R cC * CrossEntropySoftcapGradError.sc_Tc c T iy iL ih it ik xs + Q2R c0.
Proof.
  intros cS cT cH cK cC c0 Hb ex Hex c Hc th ut et Hut Hth dv ud ed Hud Hed Hdv cf Hcf
    T ir il iy iL ih it ik dsum epi alpha dr Dl Am cs Hepi Hal Hx HEc Hds Hok HC xs.
  destruct (sc_grad_q_spec cS cT cH cK cC c0 Hb) as [Hue0 [Hee0 [Ha0 [Hua0 [Hn [X [HX Hle]]]]]]].
  destruct (CrossEntropyGradError.ce_sums_nonneg T (CrossEntropySoftcapGradError.sc_yc c T iy) iL ih it ik xs)
    as [HS [HT HH]].
  destruct (sc_grad_q_sums_nonneg c T iy iL ih it ik xs) as [HK HTc].
  eapply Rle_trans; [| apply (Hle _ HEc); assumption].
  rewrite <- HC.
  apply (CrossEntropySoftcapGradError.sc_dw_error M ex (Q2R ue) (Q2R ee) Hue0 Hee0 Hex c Hc th ut et Hut Hth
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
  forall cf : R -> R, (forall z, CrossEntropySoftcapError.sc_chain_ok M dv z (cf z)) ->
  forall (T : Type) (ir il iy iL ih : T -> R) (it ik : T -> bool) (dsum : list R -> R)
    (alpha dr Dl Am : R) (xs : list T),
  Rabs (alpha - Q2R a0) <= Q2R ua * Rabs (Q2R a0) ->
  CrossEntropySoftcapError.sc_delta (ff_u (mp_a M)) (ff_eta (mp_a M)) c ut et dr + Dl + ff_u (mp_a M) * Am
    + ff_eta (mp_a M) <= Q2R x ->
  CrossEntropySoftcapError.sc_chain_bound (ff_u (mp_a M)) (ff_eta (mp_a M)) c ud ed
    (CrossEntropySoftcapError.sc_delta (ff_u (mp_a M)) (ff_eta (mp_a M)) c ut et dr) <= Q2R Ec ->
  CrossEntropyGradError.ce_gen_dsum_ok T (CrossEntropySoftcapGradError.sc_term M ex c th cf T ir il ih it ik) dsum
    (gamma (ff_u (mp_a M)) (N.to_nat n)) xs ->
  (forall y, In y xs -> CrossEntropySoftcapGradError.sc_ok M c th T ir il iy iL ik dr Dl Am y) ->
  N.to_nat C = 1%nat ->
  Rabs (CrossEntropyGradError.ce_gen_dh M T (CrossEntropySoftcapGradError.sc_term M ex c th cf T ir il ih it ik)
          dsum alpha xs
        - Q2R a0 * VectorFacts.rsum (map (CrossEntropySoftcapGradError.sc_exact c T iy iL ih it ik) xs))
  <= Q2R cS * CrossEntropyGradError.ce_S T (CrossEntropySoftcapGradError.sc_yc c T iy) iL ih ik xs
     + Q2R cT * CrossEntropyGradError.ce_T T (CrossEntropySoftcapGradError.sc_yc c T iy) iL ih it ik xs
     + Q2R cH * CrossEntropyGradError.ce_Ha T ih ik xs
     + Q2R cK * CrossEntropySoftcapGradError.sc_Sk c T iy iL ih ik xs
     + Q2R cC * CrossEntropySoftcapGradError.sc_Tc c T iy iL ih it ik xs + Q2R c0.
Proof.
  intros cS cT cH cK cC c0 Hb ex Hex c Hc th ut et Hut Hth dv ud ed Hud Hed Hdv cf Hcf
    T ir il iy iL ih it ik dsum alpha dr Dl Am xs Hal Hx HEc Hds Hok HC.
  destruct (sc_grad_q_spec cS cT cH cK cC c0 Hb) as [Hue0 [Hee0 [Ha0 [Hua0 [Hn [X [HX Hle]]]]]]].
  destruct (CrossEntropyGradError.ce_sums_nonneg T (CrossEntropySoftcapGradError.sc_yc c T iy) iL ih it ik xs)
    as [HS [HT HH]].
  destruct (sc_grad_q_sums_nonneg c T iy iL ih it ik xs) as [HK HTc].
  eapply Rle_trans; [| apply (Hle _ HEc); assumption].
  rewrite HC.
  apply (CrossEntropySoftcapGradError.sc_dh_error M ex (Q2R ue) (Q2R ee) Hue0 Hee0 Hex c Hc th ut et Hut Hth
           dv ud ed Hud Hed Hdv cf Hcf T ir il iy iL ih it ik dsum alpha (Q2R a0) (Q2R ua) _ dr Dl Am X xs
           Hua0 Hal (ce_grad_gamma_nonneg M n Hn) (ce_grad_exp_le x _ X Hx HX) Hds Hok).
Qed.

End ScGradQ.
