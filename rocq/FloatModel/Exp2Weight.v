(** * The kernel's base-2 weight [p = exp2 (s2 - m2)] in the mixed-precision model.

    The attention kernel keeps scores in base 2 ([s2 = s log2 e], scaled
    and rounded to fp32) and computes each weight as [tl.exp2 (s2 - m2)]
    with [m2 >= s2] the running max (a max of fp32 numbers, hence an fp32
    number).  In a [MixedModel] [M] with accumulation format [A]
    (MixedPrecision.v): the subtraction of two numbers of [A] is rounded
    with a purely relative error (no underflow term), and the computed
    [exp2] has relative error [ue] plus an absolute term [eta_e].  Then
    ([exp2_weight_error_bound]), with [x = s2 - m2 <= 0]:

      |mp_exp2 (rnd_a (s2 - m2)) - 2^x|
        <= ue 2^x + (1 + ue) u_a / ((1 - u_a) e) + eta_e.

    The middle term is [exp_shift_err u_a] of Attention/StreamError.v: the
    rounding of the exponent moves [2^x] by at most [u_a / ((1 - u_a) e)]
    absolutely, whatever [x <= 0] is.  For fp32 ([bf16_fp32] or
    [fp16_fp32]) [fp32_exp2_weight_error_bound]: [ue = u_a = 2^-24],
    [eta_e = 2^-150]; the middle term is 2.19e-8 (Python float:
    2^-24 / (1 - 2^-24) / e = 2.1927e-8).  And [Rpower 2 (x / ln 2) =
    exp x] ([exp2_base_change]): the base-2 weight is the base-e softmax
    weight of the unscaled scores.

    Not covered: the rounding of [s * qk_scale] (the scores [s2] are taken
    as given fp32 numbers), and the case where the compiler fuses
    [s * qk_scale - m2] into one FMA (one rounding of an exact real: then
    Flocq's absolute term [eta] enters the exponent). *)

From Coq Require Import Reals Lra.
From Flocq Require Import Core.
From Ojas Require Import Attention.StreamError FloatModel.MixedPrecision.
From Ojas Require Import FloatModel.Notations.
Open Scope R_scope.

(** Base change: [2^(x / ln 2) = e^x]. *)
Theorem exp2_base_change : forall x, Rpower 2 (x / ln 2) = exp x.
Proof.
  intros x; unfold Rpower; f_equal.
  assert (0 < ln 2) by (rewrite <- ln_1; apply ln_increasing; lra).
  field; lra.
Qed.

Section Exp2Weight.

Variable M : MixedModel.

Import ModelNotations.

Theorem exp2_weight_error_bound : forall s2 m2,
  ff_fmt A_ s2 -> ff_fmt A_ m2 -> s2 <= m2 ->
  Rabs (mp_exp2 M (ff_rnd A_ (s2 - m2)) - Rpower 2 (s2 - m2))
  <= mp_ue M * Rpower 2 (s2 - m2) + (1 + mp_ue M) * exp_shift_err (ff_u A_) + mp_eta_e M.
Proof.
  intros s2 m2 Fs Fm Hle.
  set (u := ff_u A_).
  pose proof (ff_u_nonneg A_) as Hu; pose proof (ff_u_lt_1 A_) as Hu1; fold u in Hu, Hu1.
  set (x := s2 - m2).
  assert (Hx : x <= 0) by (unfold x; lra).
  set (y := ff_rnd A_ x).
  (* the rounded exponent: a sum of two numbers of the format *)
  assert (Hy : Rabs (y - x) <= u * (- x)).
  { pose proof (ff_add A_ s2 (- m2) Fs (ff_fmt_opp A_ m2 Fm)) as H.
    replace (s2 + - m2) with x in H by (unfold x; ring).
    rewrite (Rabs_left1 x Hx) in H; exact H. }
  assert (Hl2 : 0 < ln 2) by (rewrite <- ln_1; apply ln_increasing; lra).
  (* in base e: exponents [x ln 2], [y ln 2] *)
  assert (Hs : Rabs (exp (y * ln 2) - exp (x * ln 2)) <= exp_shift_err u).
  { apply exp_shift_err_bound; [exact Hu | exact Hu1 | nra |].
    replace (y * ln 2 - x * ln 2) with ((y - x) * ln 2) by ring.
    rewrite Rabs_mult, (Rabs_right (ln 2)) by lra.
    replace (u * - (x * ln 2)) with (u * - x * ln 2) by ring.
    apply Rmult_le_compat_r; lra. }
  change (exp (y * ln 2)) with (Rpower 2 y) in Hs.
  change (exp (x * ln 2)) with (Rpower 2 x) in Hs.
  pose proof (mp_exp2_err M y) as He.
  pose proof (mp_ue_nonneg M) as Hue.
  assert (H2y : Rpower 2 y <= Rpower 2 x + exp_shift_err u)
    by (apply Rabs_le_inv' in Hs; lra).
  replace (mp_exp2 M y - Rpower 2 x) with ((mp_exp2 M y - Rpower 2 y) + (Rpower 2 y - Rpower 2 x))
    by ring.
  eapply Rle_trans; [apply Rabs_triang |].
  assert (mp_ue M * Rpower 2 y <= mp_ue M * (Rpower 2 x + exp_shift_err u))
    by (apply Rmult_le_compat_l; assumption).
  lra.
Qed.

End Exp2Weight.

(** fp32 exponent and exp2 (both mixed models of MixedPrecision.v). *)
Corollary fp32_exp2_weight_error_bound : forall s2 m2,
  ff_fmt fp32 s2 -> ff_fmt fp32 m2 -> s2 <= m2 ->
  Rabs (mp_exp2 bf16_fp32 (ff_rnd fp32 (s2 - m2)) - Rpower 2 (s2 - m2))
  <= / 16777216 * Rpower 2 (s2 - m2) + (1 + / 16777216) * exp_shift_err (/ 16777216)
     + bpow radix2 (-150).
Proof.
  intros s2 m2 Fs Fm Hle.
  rewrite <- fp32_u.
  exact (exp2_weight_error_bound bf16_fp32 s2 m2 Fs Fm Hle).
Qed.
