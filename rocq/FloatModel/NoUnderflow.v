(** * The rounding model without underflow: a special case of [MixedPrecision.v].

    THE rounding model of this project is [FloatModel/MixedPrecision.v]
    ([FloatFormat], [MixedModel]: a relative error in the normal range, an
    absolute term below it, exact sums of two numbers of the format, and a
    computed [exp2]).  This file is its special case whose absolute terms are
    0, i.e. no result underflows; the first error analyses
    ([FloatModel/DotError.v], [Attention/StreamError.v],
    [LinearCrossEntropy/LseError.v], [LinearCrossEntropy/LossError.v],
    [Reversible/FloatError.v]) are stated in it.  Nothing here is assumed
    beside the mixed-precision model: section [From_mixed] derives both
    hypotheses below from it, and its FLX instance ([flx_format], [flx_mixed])
    is what makes this model inhabited.

    The model is a pair of functions given as Section variables:
    - [rnd : R -> R], the rounding applied after every [+ - * /], with
      [|rnd x - x| <= u |x|] (unit roundoff [u]): the field [ff_abs] of a
      [FloatFormat] whose [ff_eta] is 0 ([format_rnd_rel]);
    - [rexp : R -> R], the computed exponential, with
      [|rexp x - exp x| <= ue * exp x]: the field [mp_exp2_err] of a
      [MixedModel] whose [mp_eta_e] is 0, read at [x / ln 2]
      ([mixed_rexp_rel]).
    Both hypotheses are relative: they hold for IEEE arithmetic as long as
    no result underflows (or overflows).  Underflow is NOT covered by this
    model; [MixedPrecision.v] covers it with the absolute terms.

    From the two functions we build [fl_ops : ScalarOps R].  The computed
    algorithms are then literally [stream fl_ops], [finalize fl_ops],
    [dot fl_ops], ...: the same definitions the oracle and the code run.
    The maximum is exact ([sc_ltb := Rltb]), as it is in floating point. *)

From Coq Require Import Reals List Lra Lia.
From Flocq Require Import Core Relative.
From Ojas Require Import ScalarOps FloatModel.MixedPrecision.
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

(** ** The model as the special case of [MixedPrecision.v] without absolute terms *)
Section From_mixed.

(** A format whose absolute term is 0 rounds with the relative error of
    [rnd_rel] everywhere. *)
Lemma format_rnd_rel : forall F : FloatFormat, ff_eta F = 0 ->
  forall x, Rabs (ff_rnd F x - x) <= ff_u F * Rabs x.
Proof. intros F H0 x; pose proof (ff_abs F x) as H; rewrite H0, Rplus_0_r in H; exact H. Qed.

(** The exponential of a mixed model: [exp x = 2^(x / ln 2)]. *)
Definition mixed_rexp (M : MixedModel) (x : R) : R := mp_exp2 M (x / ln 2).

Lemma ln_2_pos : 0 < ln 2.
Proof. rewrite <- ln_1; apply ln_increasing; lra. Qed.

Lemma Rpower_2_div_ln2 : forall x, Rpower 2 (x / ln 2) = exp x.
Proof.
  intros x; unfold Rpower; f_equal; field.
  apply Rgt_not_eq, ln_2_pos.
Qed.

(** A mixed model whose exponential has no absolute term computes [exp]
    with the relative error of [rexp_rel], with [ue = mp_ue]. *)
Lemma mixed_rexp_rel : forall M : MixedModel, mp_eta_e M = 0 ->
  forall x, Rabs (mixed_rexp M x - exp x) <= mp_ue M * exp x.
Proof.
  intros M H0 x; unfold mixed_rexp.
  pose proof (mp_exp2_err M (x / ln 2)) as H.
  rewrite H0, Rplus_0_r, Rpower_2_div_ln2 in H; exact H.
Qed.

End From_mixed.

(** ** The model is inhabited: Flocq's round-to-nearest in precision [p],
    as a [FloatFormat] and a [MixedModel] of [MixedPrecision.v] *)
Section Flocq_instance.

Variable p : Z.
Hypothesis p_pos : (0 < p)%Z.

Local Instance flx_prec_gt_0 : Prec_gt_0 p := p_pos.

(** Round-to-nearest-even in the FLX format of precision [p] (binary,
    unbounded exponent range, i.e. no underflow or overflow). *)
Definition flx_rnd (x : R) : R := round radix2 (FLX_exp p) (Znearest (fun z => negb (Z.even z))) x.

Lemma flx_rel : forall x, Rabs (flx_rnd x - x) <= bpow radix2 (- p) * Rabs x.
Proof.
  intros x; unfold flx_rnd; rewrite <- flt_u_eq.
  apply relative_error_N_FLX; exact p_pos.
Qed.

Lemma flx_u_lt_1 : bpow radix2 (- p) < 1.
Proof. change 1 with (bpow radix2 0); apply bpow_lt; lia. Qed.

(** The FLX format as a [FloatFormat]: its absolute term is 0 (nothing
    underflows), and every [x] is in its "normal range" (any positive
    [ff_xmin] does; 1 is taken). *)
Definition flx_format : FloatFormat := {|
  ff_fmt := generic_format radix2 (FLX_exp p);
  ff_rnd := flx_rnd;
  ff_u := bpow radix2 (- p);
  ff_eta := 0;
  ff_xmin := 1;
  ff_u_nonneg := bpow_ge_0 radix2 (- p);
  ff_u_lt_1 := flx_u_lt_1;
  ff_eta_nonneg := Rle_refl 0;
  ff_xmin_pos := Rlt_0_1;
  ff_fmt_0 := generic_format_0 radix2 (FLX_exp p);
  ff_fmt_opp := fun x Hx => generic_format_opp radix2 (FLX_exp p) x Hx;
  ff_rnd_fmt := fun x => generic_format_round radix2 (FLX_exp p) _ x;
  ff_rnd_id := fun x Hx => round_generic radix2 (FLX_exp p) _ x Hx;
  ff_rel_normal := fun x _ => flx_rel x;
  ff_abs := fun x => Rle_trans _ _ _ (flx_rel x) (Req_le _ _ (eq_sym (Rplus_0_r _)));
  ff_add := fun x y _ _ => flx_rel (x + y)
|}.

Lemma flx_exp2_err : forall x,
  Rabs (flx_rnd (Rpower 2 x) - Rpower 2 x) <= bpow radix2 (- p) * Rpower 2 x + 0.
Proof.
  intros x; rewrite Rplus_0_r; pose proof (flx_rel (Rpower 2 x)) as H.
  rewrite (Rabs_right (Rpower 2 x)) in H by (left; apply Rpower_pos); exact H.
Qed.

(** Storage and accumulation both in the FLX format, [2^x] correctly
    rounded to it. *)
Definition flx_mixed : MixedModel := {|
  mp_s := flx_format;
  mp_a := flx_format;
  mp_s_in_a := fun x Hx => Hx;
  mp_exp2 := fun x => flx_rnd (Rpower 2 x);
  mp_ue := bpow radix2 (- p);
  mp_eta_e := 0;
  mp_ue_nonneg := bpow_ge_0 radix2 (- p);
  mp_eta_e_nonneg := Rle_refl 0;
  mp_exp2_fmt := fun x => generic_format_round radix2 (FLX_exp p) _ (Rpower 2 x);
  mp_exp2_err := flx_exp2_err
|}.

(** [flx_rnd] satisfies the [rnd] hypothesis of the model with [u = 2^-p]:
    [format_rnd_rel] of [flx_format] (Flocq's [relative_error_N_FLX]). *)
Lemma flx_rnd_rel : forall x, Rabs (flx_rnd x - x) <= bpow radix2 (- p) * Rabs x.
Proof. exact (format_rnd_rel flx_format eq_refl). Qed.

(** The correctly rounded exponential satisfies the [rexp] hypothesis
    with [ue = 2^-p]: [mixed_rexp_rel] of [flx_mixed]. *)
Lemma flx_exp_rel :
  forall x, Rabs (flx_rnd (exp x) - exp x) <= bpow radix2 (- p) * exp x.
Proof.
  intros x; pose proof (mixed_rexp_rel flx_mixed eq_refl x) as H.
  unfold mixed_rexp in H; simpl in H; rewrite Rpower_2_div_ln2 in H; exact H.
Qed.

End Flocq_instance.
