(** * The rounding model, mixed-precision, instantiated by Flocq's binary formats.

    This is THE rounding model of the project: every error analysis is
    stated in it or in its special case without underflow,
    [FloatModel/NoUnderflow.v] (the absolute terms [ff_eta] and [mp_eta_e]
    at 0; that file derives its two hypotheses from the fields below).

    The kernels store operands and results in a 16-bit format (bf16 or
    fp16), accumulate in fp32, and use base-2 exponentials.  This file gives

    - [FloatFormat]: one binary format as a record: the set of its numbers
      [ff_fmt], its round-to-nearest [ff_rnd], its unit roundoff [ff_u], the
      smallest positive normal [ff_xmin] and the absolute error [ff_eta] of a
      rounding below it.  Its fields are the properties the proofs use:
      * [ff_rel_normal]: |rnd x - x| <= u |x| when [xmin <= |x|] (the normal
        range: a CHECKED premise, nothing is assumed about underflow);
      * [ff_abs]: |rnd x - x| <= u |x| + eta for every x (underflow handled
        by an absolute term, Flocq's [error_N_FLT]);
      * [ff_add]: the sum of two numbers of the format is rounded with a
        purely relative error, underflow or not (Flocq's
        [FLT_plus_error_N_ex]: a sum that underflows is exact);
      * rounding returns a number of the format and fixes every number of
        the format.
    - [MixedModel]: a storage format, an accumulation format that contains
      it, and a computed [exp2] (values in the accumulation format) with
      relative error [mp_ue] plus an absolute term [mp_eta_e] (underflow of
      the result) against [Rpower 2 x = 2^x].
    - The instances [bf16] (precision 8, emin -133), [fp16] (precision 11,
      emin -24) and [fp32] (precision 24, emin -149), all
      [round radix2 (FLT_exp emin prec) ZnearestE], with [u = 2^-prec] and
      [eta = 2^(emin-1)]; [bf16_fp32] and [fp16_fp32] are [MixedModel]s
      whose [exp2] is the correctly rounded fp32 [2^x] ([ue = 2^-24]).
    - Products: the product of two fp16 numbers is always an fp32 number
      ([fp16_mul_fp32]); the product of two bf16 numbers is an fp32 number
      when it is 0 or at least [2^-134] in magnitude ([bf16_mul_fp32]; below
      that the 16-bit significand product can fall under fp32's subnormal
      grid).  So the tensor-core products are exact in fp32.
    - Overflow: [FLT_exp] has no largest exponent, so [ff_rnd] never
      overflows.  It is the IEEE operation only while the rounded result is
      below [2^emax]: [fp32_add_ieee] (Flocq's [Bplus_correct] on
      [binary_float 24 128]) states this for fp32 addition, with the
      no-overflow condition as a checked premise.

    No axiom, no global parameter: the records are inhabited by Definitions. *)

From Coq Require Import Reals ZArith Lra Lia.
From Flocq Require Import Core Operations Relative Plus_error.
From Flocq Require Import IEEE754.BinarySingleNaN.
Open Scope R_scope.

(** ** One binary format *)

Record FloatFormat := {
  ff_fmt : R -> Prop;
  ff_rnd : R -> R;
  ff_u : R;
  ff_eta : R;
  ff_xmin : R;
  ff_u_nonneg : 0 <= ff_u;
  ff_u_lt_1 : ff_u < 1;
  ff_eta_nonneg : 0 <= ff_eta;
  ff_xmin_pos : 0 < ff_xmin;
  ff_fmt_0 : ff_fmt 0;
  ff_fmt_opp : forall x, ff_fmt x -> ff_fmt (- x);
  ff_rnd_fmt : forall x, ff_fmt (ff_rnd x);
  ff_rnd_id : forall x, ff_fmt x -> ff_rnd x = x;
  ff_rel_normal : forall x, ff_xmin <= Rabs x -> Rabs (ff_rnd x - x) <= ff_u * Rabs x;
  ff_abs : forall x, Rabs (ff_rnd x - x) <= ff_u * Rabs x + ff_eta;
  ff_add : forall x y, ff_fmt x -> ff_fmt y ->
    Rabs (ff_rnd (x + y) - (x + y)) <= ff_u * Rabs (x + y)
}.

(** ** The mixed-precision model *)

Record MixedModel := {
  mp_s : FloatFormat;   (** storage: operands and results (bf16, fp16) *)
  mp_a : FloatFormat;   (** accumulation (fp32) *)
  mp_s_in_a : forall x, ff_fmt mp_s x -> ff_fmt mp_a x;
  mp_exp2 : R -> R;     (** the computed [2^x] *)
  mp_ue : R;
  mp_eta_e : R;
  mp_ue_nonneg : 0 <= mp_ue;
  mp_eta_e_nonneg : 0 <= mp_eta_e;
  mp_exp2_fmt : forall x, ff_fmt mp_a (mp_exp2 x);
  mp_exp2_err : forall x, Rabs (mp_exp2 x - Rpower 2 x) <= mp_ue * Rpower 2 x + mp_eta_e
}.

(** ** Flocq's FLT formats satisfy the fields *)

Section FLT_instance.

Variables prec emin : Z.
Hypothesis prec_pos : (0 < prec)%Z.

Local Instance flt_prec_gt_0 : Prec_gt_0 prec := prec_pos.

Local Notation fexp := (FLT_exp emin prec).
Local Notation flt_rnd := (round radix2 fexp ZnearestE).

Lemma flt_u_eq : / 2 * bpow radix2 (- prec + 1) = bpow radix2 (- prec).
Proof.
  rewrite bpow_plus; simpl bpow; unfold Z.pow_pos; simpl; field.
Qed.

Lemma flt_u_lt_1 : bpow radix2 (- prec) < 1.
Proof.
  change 1 with (bpow radix2 0); apply bpow_lt; lia.
Qed.

Lemma flt_eta_nonneg : 0 <= bpow radix2 (emin - 1).
Proof. apply bpow_ge_0. Qed.

Lemma flt_xmin_pos : 0 < bpow radix2 (emin + prec - 1).
Proof. apply bpow_gt_0. Qed.

Lemma flt_fmt_0 : generic_format radix2 fexp 0.
Proof. apply generic_format_0. Qed.

Lemma flt_fmt_opp : forall x, generic_format radix2 fexp x -> generic_format radix2 fexp (- x).
Proof. intros x Hx; apply generic_format_opp, Hx. Qed.

Lemma flt_rnd_fmt : forall x, generic_format radix2 fexp (flt_rnd x).
Proof. intros x; apply generic_format_round; auto with typeclass_instances. Qed.

Lemma flt_rnd_id : forall x, generic_format radix2 fexp x -> flt_rnd x = x.
Proof. intros x Hx; apply round_generic; auto with typeclass_instances. Qed.

Lemma flt_rel_normal : forall x,
  bpow radix2 (emin + prec - 1) <= Rabs x ->
  Rabs (flt_rnd x - x) <= bpow radix2 (- prec) * Rabs x.
Proof.
  intros x Hx; rewrite <- flt_u_eq.
  apply relative_error_N_FLT; assumption.
Qed.

Lemma flt_abs : forall x,
  Rabs (flt_rnd x - x) <= bpow radix2 (- prec) * Rabs x + bpow radix2 (emin - 1).
Proof.
  intros x.
  destruct (error_N_FLT radix2 emin prec prec_pos (fun z => negb (Z.even z)) x)
    as [eps [eta [Heps [Heta [_ E]]]]].
  rewrite E.
  replace (x * (1 + eps) + eta - x) with (x * eps + eta) by ring.
  eapply Rle_trans; [apply Rabs_triang |].
  rewrite Rabs_mult.
  rewrite flt_u_eq in Heps.
  assert (Rabs x * Rabs eps <= Rabs x * bpow radix2 (- prec))
    by (apply Rmult_le_compat_l; [apply Rabs_pos | exact Heps]).
  replace (/ 2 * bpow radix2 emin) with (bpow radix2 (emin - 1)) in Heta.
  - lra.
  - unfold Zminus; rewrite bpow_plus; simpl bpow; unfold Z.pow_pos; simpl; field.
Qed.

Lemma flt_add : forall x y,
  generic_format radix2 fexp x -> generic_format radix2 fexp y ->
  Rabs (flt_rnd (x + y) - (x + y)) <= bpow radix2 (- prec) * Rabs (x + y).
Proof.
  intros x y Hx Hy.
  destruct (FLT_plus_error_N_ex radix2 emin prec (fun z => negb (Z.even z)) x y Hx Hy)
    as [eps [Heps E]].
  rewrite E.
  replace ((x + y) * (1 + eps) - (x + y)) with ((x + y) * eps) by ring.
  rewrite Rabs_mult, Rmult_comm; apply Rmult_le_compat_r; [apply Rabs_pos |].
  eapply Rle_trans; [exact Heps |].
  eapply Rle_trans; [apply u_rod1pu_ro_le_u_ro |].
  unfold u_ro; rewrite flt_u_eq; lra.
Qed.

(** The format [FLT_exp emin prec] with round-to-nearest-even. *)
Definition flt_format : FloatFormat := {|
  ff_fmt := generic_format radix2 fexp;
  ff_rnd := flt_rnd;
  ff_u := bpow radix2 (- prec);
  ff_eta := bpow radix2 (emin - 1);
  ff_xmin := bpow radix2 (emin + prec - 1);
  ff_u_nonneg := bpow_ge_0 radix2 (- prec);
  ff_u_lt_1 := flt_u_lt_1;
  ff_eta_nonneg := flt_eta_nonneg;
  ff_xmin_pos := flt_xmin_pos;
  ff_fmt_0 := flt_fmt_0;
  ff_fmt_opp := flt_fmt_opp;
  ff_rnd_fmt := flt_rnd_fmt;
  ff_rnd_id := flt_rnd_id;
  ff_rel_normal := flt_rel_normal;
  ff_abs := flt_abs;
  ff_add := flt_add
|}.

End FLT_instance.

(** The three formats of the kernels. *)
Definition bf16 : FloatFormat := flt_format 8 (-133) eq_refl.
Definition fp16 : FloatFormat := flt_format 11 (-24) eq_refl.
Definition fp32 : FloatFormat := flt_format 24 (-149) eq_refl.

(** Their unit roundoffs, as the proofs use them. *)
Lemma bf16_u : ff_u bf16 = / 256.
Proof. simpl; unfold Z.pow_pos; simpl; field. Qed.

Lemma fp16_u : ff_u fp16 = / 2048.
Proof. simpl; unfold Z.pow_pos; simpl; field. Qed.

Lemma fp32_u : ff_u fp32 = / 16777216.
Proof. simpl; unfold Z.pow_pos; simpl; field. Qed.

(** The fields of the three instances, with their numbers: [rnd] is
    Flocq's round-to-nearest-even in [FLT_exp emin prec]; relative error
    [2^-prec] from the smallest normal [2^(emin+prec-1)] up; absolute term
    [2^(emin-1)] below it; sums of two numbers of the format purely
    relative. *)
Theorem bf16_rounding :
  ff_rnd bf16 = round radix2 (FLT_exp (-133) 8) ZnearestE
  /\ (forall x, bpow radix2 (-126) <= Rabs x -> Rabs (ff_rnd bf16 x - x) <= / 256 * Rabs x)
  /\ (forall x, Rabs (ff_rnd bf16 x - x) <= / 256 * Rabs x + bpow radix2 (-134))
  /\ (forall x y, ff_fmt bf16 x -> ff_fmt bf16 y ->
        Rabs (ff_rnd bf16 (x + y) - (x + y)) <= / 256 * Rabs (x + y)).
Proof.
  rewrite <- bf16_u; split; [reflexivity |].
  split; [exact (ff_rel_normal bf16) | split; [exact (ff_abs bf16) | exact (ff_add bf16)]].
Qed.

Theorem fp16_rounding :
  ff_rnd fp16 = round radix2 (FLT_exp (-24) 11) ZnearestE
  /\ (forall x, bpow radix2 (-14) <= Rabs x -> Rabs (ff_rnd fp16 x - x) <= / 2048 * Rabs x)
  /\ (forall x, Rabs (ff_rnd fp16 x - x) <= / 2048 * Rabs x + bpow radix2 (-25))
  /\ (forall x y, ff_fmt fp16 x -> ff_fmt fp16 y ->
        Rabs (ff_rnd fp16 (x + y) - (x + y)) <= / 2048 * Rabs (x + y)).
Proof.
  rewrite <- fp16_u; split; [reflexivity |].
  split; [exact (ff_rel_normal fp16) | split; [exact (ff_abs fp16) | exact (ff_add fp16)]].
Qed.

Theorem fp32_rounding :
  ff_rnd fp32 = round radix2 (FLT_exp (-149) 24) ZnearestE
  /\ (forall x, bpow radix2 (-126) <= Rabs x -> Rabs (ff_rnd fp32 x - x) <= / 16777216 * Rabs x)
  /\ (forall x, Rabs (ff_rnd fp32 x - x) <= / 16777216 * Rabs x + bpow radix2 (-150))
  /\ (forall x y, ff_fmt fp32 x -> ff_fmt fp32 y ->
        Rabs (ff_rnd fp32 (x + y) - (x + y)) <= / 16777216 * Rabs (x + y)).
Proof.
  rewrite <- fp32_u; split; [reflexivity |].
  split; [exact (ff_rel_normal fp32) | split; [exact (ff_abs fp32) | exact (ff_add fp32)]].
Qed.

(** ** Inclusion of formats and exact products *)

Section FLT_ops.

Lemma flt_inclusion : forall ps es pa ea,
  (0 < ps)%Z -> (ps <= pa)%Z -> (ea <= es)%Z ->
  forall x, generic_format radix2 (FLT_exp es ps) x -> generic_format radix2 (FLT_exp ea pa) x.
Proof.
  intros ps es pa ea Hps Hp He x Hx.
  assert (Prec_gt_0 ps) by exact Hps.
  assert (Prec_gt_0 pa) by (unfold Prec_gt_0; lia).
  apply FLT_format_generic in Hx; [| assumption].
  destruct Hx as [f Ef Hm He'].
  apply generic_format_FLT; exists f; [exact Ef | | lia].
  eapply Z.lt_le_trans; [exact Hm |]; apply Zpower_le; exact Hp.
Qed.

(** The product of two numbers of precision [ps] (exponent floor [es]) is a
    number of precision [pa >= 2 ps] (floor [ea]) unless it lies below
    [2^(ea + 2 ps - 1)] with [2 es < ea]. *)
Lemma flt_mul_exact : forall ps es pa ea,
  (0 < ps)%Z -> (2 * ps <= pa)%Z ->
  forall x y,
  generic_format radix2 (FLT_exp es ps) x -> generic_format radix2 (FLT_exp es ps) y ->
  ((ea <= 2 * es)%Z \/ bpow radix2 (ea + 2 * ps - 1) <= Rabs (x * y)) ->
  generic_format radix2 (FLT_exp ea pa) (x * y).
Proof.
  intros ps es pa ea Hps Hp x y Hx Hy Hr.
  assert (Prec_gt_0 ps) by exact Hps.
  assert (Prec_gt_0 pa) by (unfold Prec_gt_0; lia).
  apply FLT_format_generic in Hx; [| assumption].
  apply FLT_format_generic in Hy; [| assumption].
  destruct Hx as [[m1 e1] Ex Hm1 He1]; destruct Hy as [[m2 e2] Ey Hm2 He2].
  cbn [Fnum Fexp] in Hm1, Hm2, He1, He2.
  assert (Em : x * y = F2R (Float radix2 (m1 * m2) (e1 + e2))).
  { rewrite Ex, Ey; unfold F2R; simpl; rewrite mult_IZR, bpow_plus; ring. }
  assert (Hm : (Z.abs (m1 * m2) < Zpower radix2 (2 * ps))%Z).
  { rewrite Z.abs_mul.
    replace (2 * ps)%Z with (ps + ps)%Z by ring; rewrite Zpower_plus by lia.
    apply Z.mul_lt_mono_nonneg; lia. }
  apply generic_format_FLT.
  destruct (Z_le_gt_dec ea (e1 + e2)) as [He | He].
  - exists (Float radix2 (m1 * m2) (e1 + e2)); [exact Em | | exact He].
    simpl; eapply Z.lt_le_trans; [exact Hm |]; apply Zpower_le; exact Hp.
  - exfalso; destruct Hr as [Hr | Hr]; [lia |].
    rewrite Em in Hr; unfold F2R in Hr; cbn [Fnum Fexp] in Hr.
    rewrite Rabs_mult, (Rabs_right (bpow _ _)) in Hr by (apply Rle_ge, bpow_ge_0).
    rewrite <- abs_IZR in Hr.
    assert (Hm' : IZR (Z.abs (m1 * m2)) < bpow radix2 (2 * ps)).
    { rewrite <- IZR_Zpower by lia; apply IZR_lt; exact Hm. }
    assert (Hb : bpow radix2 (e1 + e2) <= bpow radix2 (ea - 1)) by (apply bpow_le; lia).
    assert (Hprod : IZR (Z.abs (m1 * m2)) * bpow radix2 (e1 + e2)
                    < bpow radix2 (2 * ps) * bpow radix2 (ea - 1)).
    { apply Rlt_le_trans with (bpow radix2 (2 * ps) * bpow radix2 (e1 + e2)).
      - apply Rmult_lt_compat_r; [apply bpow_gt_0 | exact Hm'].
      - apply Rmult_le_compat_l; [apply bpow_ge_0 | exact Hb]. }
    rewrite <- bpow_plus in Hprod.
    replace (2 * ps + (ea - 1))%Z with (ea + 2 * ps - 1)%Z in Hprod by ring.
    lra.
Qed.

End FLT_ops.

(** bf16 and fp16 numbers are fp32 numbers. *)
Lemma bf16_in_fp32 : forall x, ff_fmt bf16 x -> ff_fmt fp32 x.
Proof. apply flt_inclusion; lia. Qed.

Lemma fp16_in_fp32 : forall x, ff_fmt fp16 x -> ff_fmt fp32 x.
Proof. apply flt_inclusion; lia. Qed.

(** The product of two fp16 numbers is an fp32 number: rounding it to fp32
    is exact. *)
Theorem fp16_mul_fp32 : forall x y, ff_fmt fp16 x -> ff_fmt fp16 y -> ff_fmt fp32 (x * y).
Proof.
  intros x y Hx Hy; simpl.
  apply (flt_mul_exact 11 (-24)); auto; lia.
Qed.

(** The product of two bf16 numbers is an fp32 number when it is zero or
    at least [2^-134] in magnitude. *)
Theorem bf16_mul_fp32 : forall x y, ff_fmt bf16 x -> ff_fmt bf16 y ->
  (x * y = 0 \/ bpow radix2 (-134) <= Rabs (x * y)) -> ff_fmt fp32 (x * y).
Proof.
  intros x y Hx Hy [H0 | Hr].
  - rewrite H0; apply ff_fmt_0.
  - simpl; apply (flt_mul_exact 8 (-133)); auto; try lia.
Qed.

(** ** Mixed models: 16-bit storage, fp32 accumulation, exp2 rounded to fp32 *)

Lemma Rpower_pos : forall x, 0 < Rpower 2 x.
Proof. intros x; unfold Rpower; apply exp_pos. Qed.

Lemma fp32_exp2_err : forall x,
  Rabs (ff_rnd fp32 (Rpower 2 x) - Rpower 2 x) <= ff_u fp32 * Rpower 2 x + ff_eta fp32.
Proof.
  intros x; pose proof (ff_abs fp32 (Rpower 2 x)) as H.
  rewrite (Rabs_right (Rpower 2 x)) in H by (left; apply Rpower_pos); exact H.
Qed.

Definition mixed_fp32 (s : FloatFormat) (Hs : forall x, ff_fmt s x -> ff_fmt fp32 x) : MixedModel := {|
  mp_s := s;
  mp_a := fp32;
  mp_s_in_a := Hs;
  mp_exp2 := fun x => ff_rnd fp32 (Rpower 2 x);
  mp_ue := ff_u fp32;
  mp_eta_e := ff_eta fp32;
  mp_ue_nonneg := ff_u_nonneg fp32;
  mp_eta_e_nonneg := ff_eta_nonneg fp32;
  mp_exp2_fmt := fun x => ff_rnd_fmt fp32 (Rpower 2 x);
  mp_exp2_err := fp32_exp2_err
|}.

Definition bf16_fp32 : MixedModel := mixed_fp32 bf16 bf16_in_fp32.
Definition fp16_fp32 : MixedModel := mixed_fp32 fp16 fp16_in_fp32.

(** The exp2 of both mixed models: [2^x] rounded to fp32. *)
Theorem mixed_fp32_exp2 : forall x,
  Rabs (mp_exp2 bf16_fp32 x - Rpower 2 x) <= / 16777216 * Rpower 2 x + bpow radix2 (-150)
  /\ mp_exp2 fp16_fp32 x = mp_exp2 bf16_fp32 x.
Proof.
  intros x; split; [| reflexivity].
  rewrite <- fp32_u; apply fp32_exp2_err.
Qed.

(** The computed [exp2] of both mixed models is exactly 1 at 0: [2^0 = 1 = bpow 0]
    is an fp32 number ([generic_format_bpow]: [FLT_exp (-149) 24 1 = -23 <= 0]),
    and rounding fixes the numbers of the format ([ff_rnd_id], Flocq's
    [round_generic]).  The premise [exp2 0 = 1] of the masked-tile lemmas
    (Attention/Float/OnlineSoftmaxTile.v, [masked_tile_step_id]). *)
Lemma fp32_fmt_1 : ff_fmt fp32 1.
Proof.
  change 1 with (bpow radix2 0).
  apply generic_format_bpow; unfold FLT_exp; simpl; lia.
Qed.

Theorem mixed_fp32_exp2_0 : forall s Hs, mp_exp2 (mixed_fp32 s Hs) 0 = 1.
Proof.
  intros s Hs; cbn [mp_exp2 mixed_fp32].
  rewrite Rpower_O by lra; apply (ff_rnd_id fp32 1 fp32_fmt_1).
Qed.

Corollary bf16_fp32_exp2_0 : mp_exp2 bf16_fp32 0 = 1.
Proof. apply mixed_fp32_exp2_0. Qed.

Corollary fp16_fp32_exp2_0 : mp_exp2 fp16_fp32 0 = 1.
Proof. apply mixed_fp32_exp2_0. Qed.

(** ** The model's fp32 addition is IEEE binary32 addition while it does not overflow *)

#[local] Instance binary32_prec_gt_0 : Prec_gt_0 24 := eq_refl.
#[local] Instance binary32_prec_lt_emax : Prec_lt_emax 24 128 := eq_refl.

Theorem fp32_add_ieee : forall x y : binary_float 24 128,
  is_finite x = true -> is_finite y = true ->
  Rabs (ff_rnd fp32 (B2R x + B2R y)) < bpow radix2 128 ->
  B2R (Bplus mode_NE x y) = ff_rnd fp32 (B2R x + B2R y).
Proof.
  intros x y Fx Fy Hov.
  pose proof (Bplus_correct 24 128 _ _ mode_NE x y Fx Fy) as H.
  simpl in Hov |- *.
  change (3 - 128 - 24)%Z with (-149)%Z in H.
  rewrite Rlt_bool_true in H by exact Hov.
  destruct H as [H _]; exact H.
Qed.
