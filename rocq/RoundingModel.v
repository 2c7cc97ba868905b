(** * A rounding model of floating-point arithmetic, as a [ScalarOps].

    The model is a pair of functions given as Section variables:
    - [rnd : R -> R], the rounding applied after every [+ - * /], with
      [|rnd x - x| <= u |x|] (unit roundoff [u]);
    - [rexp : R -> R], the computed exponential, with
      [|rexp x - exp x| <= ue * exp x].
    Both hypotheses are relative: they hold for IEEE arithmetic as long as
    no result underflows (or overflows).  Underflow is NOT covered by this
    model: a result below the smallest normal number has an absolute, not
    relative, error.  (Flocq's [error_N_FLT] would add an absolute term.)

    Flocq's [relative_error_N_FLX] is exactly the [rnd] hypothesis for the
    round-to-nearest FLX format of precision [p] with [u = 2^-p]; the
    section [Flocq_instance] at the end of this file proves it, and that
    the correctly rounded exponential satisfies the [rexp] hypothesis
    with [ue = u], so the model is inhabited.

    From the two functions we build [fl_ops : ScalarOps R].  The computed
    algorithms are then literally [stream fl_ops], [finalize fl_ops],
    [dot fl_ops], ...: the same definitions the oracle and the code run.
    The maximum is exact ([sc_ltb := Rltb]), as it is in floating point. *)

From Coq Require Import Reals List Lra.
From Flocq Require Import Core Relative.
From Ojas Require Import ScalarOps.
Import ListNotations.
Open Scope R_scope.

(** ** Relative-error algebra (no model needed). *)

(** Composition of relative errors: [(1+a)(1+b) = 1 + c] with
    [|c| <= (1+A)(1+B) - 1]. *)
Lemma rel_err_mul :
  forall a b A B, Rabs a <= A -> Rabs b <= B ->
  Rabs ((1 + a) * (1 + b) - 1) <= (1 + A) * (1 + B) - 1.
Proof.
  intros a b A B Ha Hb.
  replace ((1 + a) * (1 + b) - 1) with (a + b + a * b) by ring.
  assert (HA : 0 <= A) by (eapply Rle_trans; [apply Rabs_pos | exact Ha]).
  assert (HB : 0 <= B) by (eapply Rle_trans; [apply Rabs_pos | exact Hb]).
  eapply Rle_trans; [apply Rabs_triang |].
  eapply Rle_trans; [apply Rplus_le_compat; [apply Rabs_triang | apply Req_le, Rabs_mult] |].
  assert (Rabs a * Rabs b <= A * B)
    by (apply Rmult_le_compat; auto using Rabs_pos).
  lra.
Qed.

Lemma Rabs_le_0_eq : forall x, Rabs x <= 0 -> x = 0.
Proof. intros x; unfold Rabs; destruct (Rcase_abs x); lra. Qed.

(** A relative error [x' = x (1 + d)] from an error bound [|x' - x| <= r |x|]. *)
Lemma rel_err_ex :
  forall x x' r, 0 <= r -> Rabs (x' - x) <= r * Rabs x ->
  exists d, Rabs d <= r /\ x' = x * (1 + d).
Proof.
  intros x x' r Hr H.
  destruct (Req_dec x 0) as [Hx | Hx].
  - subst x. rewrite Rabs_R0, Rmult_0_r in H.
    rewrite Rminus_0_r in H; apply Rabs_le_0_eq in H.
    exists 0; split; [rewrite Rabs_R0; lra | subst; ring].
  - exists ((x' - x) / x); split.
    + unfold Rdiv; rewrite Rabs_mult, Rabs_inv.
      apply (Rmult_le_reg_r (Rabs x)); [apply Rabs_pos_lt; exact Hx |].
      rewrite Rmult_assoc, Rinv_l; [lra | apply Rabs_no_R0; exact Hx].
    + field; exact Hx.
Qed.

Section RoundingModel.

(** The rounding of [+ - * /]. *)
Variable rnd : R -> R.
(** The computed exponential. *)
Variable rexp : R -> R.
(** The computed logarithm (only used for the log-sum-exp output; no
    hypothesis is needed about it for the output bound). *)
Variable rln : R -> R.
(** Unit roundoff and error of the computed exponential. *)
Variables u ue : R.
Hypothesis u_nonneg : 0 <= u.
Hypothesis ue_nonneg : 0 <= ue.
(** Relative rounding error, no underflow (Flocq: [relative_error_N_FLX]). *)
Hypothesis rnd_rel : forall x, Rabs (rnd x - x) <= u * Rabs x.
(** Relative error of the computed exponential, no underflow. *)
Hypothesis rexp_rel : forall x, Rabs (rexp x - exp x) <= ue * exp x.

(** The floating-point operations of the rounding model. *)
Definition fl_ops : ScalarOps R := {|
  sc_zero := 0; sc_one := 1;
  sc_add := fun x y => rnd (x + y);
  sc_sub := fun x y => rnd (x - y);
  sc_mul := fun x y => rnd (x * y);
  sc_div := fun x y => rnd (x / y);
  sc_exp := fun x => rexp x;
  sc_ln := fun x => rln x;
  sc_ltb := Rltb
|}.

(** Every rounded result is [x (1 + d)] with [|d| <= u]. *)
Lemma rnd_ex : forall x, exists d, Rabs d <= u /\ rnd x = x * (1 + d).
Proof. intros x; apply rel_err_ex; [exact u_nonneg | apply rnd_rel]. Qed.

(** Every computed exponential is [exp x (1 + e)] with [|e| <= ue]. *)
Lemma rexp_ex : forall x, exists e, Rabs e <= ue /\ rexp x = exp x * (1 + e).
Proof.
  intros x; apply rel_err_ex; [exact ue_nonneg |].
  rewrite (Rabs_right (exp x)); [apply rexp_rel | left; apply exp_pos].
Qed.

(** Zero is rounded to zero. *)
Lemma rnd_0 : rnd 0 = 0.
Proof.
  pose proof (rnd_rel 0) as H; rewrite Rabs_R0, Rmult_0_r, Rminus_0_r in H.
  apply Rabs_le_0_eq; exact H.
Qed.

(** The maximum of the model is the exact maximum. *)
Lemma fl_max_eq : forall a b, sc_max fl_ops a b = Rmax a b.
Proof.
  intros a b; unfold sc_max, Rmax; simpl; unfold Rltb.
  destruct (Rlt_dec a b), (Rle_dec a b); lra.
Qed.

End RoundingModel.

(** ** The model is inhabited: Flocq's round-to-nearest in precision [p]. *)
Section Flocq_instance.

Variable p : Z.
Hypothesis p_pos : (0 < p)%Z.

(** Round-to-nearest-even in the FLX format of precision [p] (binary,
    unbounded exponent range, i.e. no underflow or overflow). *)
Definition flx_rnd (x : R) : R := round radix2 (FLX_exp p) (Znearest (fun z => negb (Z.even z))) x.

(** [flx_rnd] satisfies the [rnd] hypothesis of the model with [u = 2^-p]
    (this is Flocq's [relative_error_N_FLX]). *)
Lemma flx_rnd_rel : forall x, Rabs (flx_rnd x - x) <= bpow radix2 (- p) * Rabs x.
Proof.
  intros x; unfold flx_rnd.
  replace (bpow radix2 (- p)) with (/ 2 * bpow radix2 (- p + 1)).
  - apply relative_error_N_FLX; exact p_pos.
  - rewrite bpow_plus; simpl bpow; unfold Z.pow_pos; simpl; field.
Qed.

(** The correctly rounded exponential satisfies the [rexp] hypothesis
    with [ue = 2^-p]. *)
Lemma flx_exp_rel :
  forall x, Rabs (flx_rnd (exp x) - exp x) <= bpow radix2 (- p) * exp x.
Proof.
  intros x; pose proof (flx_rnd_rel (exp x)) as H.
  rewrite (Rabs_right (exp x)) in H; [exact H | left; apply exp_pos].
Qed.

End Flocq_instance.
