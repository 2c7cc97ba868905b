(** * Concrete instances for the witnesses (see ojas_ref/verification/proof_audit.py).

    The float model of the kernels: [bf16_fp32] (bfloat16 storage, float32
    accumulation, Flocq's round-to-nearest-even FLT formats, [exp2] rounded to
    float32), the kernel's [tl.exp] and [tl.log] the exact [exp] and [ln] rounded to
    float32, so that [exp] is within [u e^x + eta] everywhere and [ln] within
    [2 u + eta] on [[1/2, 4]] (where [|ln x| <= 2]).  No [interval] here: its
    primitive floats bring axioms the audit does not allow.  The witness files apply each
    exported theorem to these and to small concrete arguments. *)

From Coq Require Import Reals Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import FloatModel.MixedPrecision FloatModel.BlockedSum.
Open Scope R_scope.

Definition wM : MixedModel := bf16_fp32.

Lemma w_a : mp_a wM = fp32.
Proof. reflexivity. Qed.

Lemma w_u : ff_u (mp_a wM) = / 16777216.
Proof. exact fp32_u. Qed.

Lemma w_eta : ff_eta (mp_a wM) = / IZR 1427247692705959881058285969449495136382746624.
Proof. reflexivity. Qed.

Lemma w_eta_small : 0 <= ff_eta (mp_a wM) <= / 16777216.
Proof.
  cbn [ff_eta mp_a wM bf16_fp32 mixed_fp32 fp32 flt_format]; split; [apply bpow_ge_0 |].
  apply Rle_trans with (bpow radix2 (-24)); [apply bpow_le; lia |].
  change (-24)%Z with (- (24))%Z; rewrite bpow_opp; right; reflexivity.
Qed.

(** [tl.exp]: [exp] rounded to float32. *)
Definition w_ex (x : R) : R := ff_rnd (mp_a wM) (exp x).

Lemma w_ex_fmt : forall x, ff_fmt (mp_a wM) (w_ex x).
Proof. intros; apply ff_rnd_fmt. Qed.

Lemma w_ex_err : forall x, Rabs (w_ex x - exp x) <= ff_u (mp_a wM) * exp x + ff_eta (mp_a wM).
Proof.
  intros x; pose proof (ff_abs (mp_a wM) (exp x)) as H.
  rewrite (Rabs_right (exp x)) in H by (left; apply exp_pos); exact H.
Qed.

Lemma w_ex_err_neg : forall x, x <= 0 -> Rabs (w_ex x - exp x) <= ff_u (mp_a wM) * exp x + ff_eta (mp_a wM).
Proof. intros x _; apply w_ex_err. Qed.

(** [tl.log]: [ln] rounded to float32, within [2 u + eta] on [[1/2, 4]]. *)
Definition w_lg (x : R) : R := ff_rnd (mp_a wM) (ln x).
Definition w_el : R := 2 * ff_u (mp_a wM) + ff_eta (mp_a wM).

Lemma w_lg_fmt : forall x, ff_fmt (mp_a wM) (w_lg x).
Proof. intros; apply ff_rnd_fmt. Qed.

Lemma w_ln_le : forall x y, 0 < x -> x <= y -> ln x <= ln y.
Proof. intros x y Hx H; destruct (Rle_lt_or_eq_dec x y H) as [Hl | ->]; [left; apply ln_increasing; lra | lra]. Qed.

Lemma w_ln_2 : ln 2 <= 1.
Proof.
  rewrite <- ln_exp with 1; left; apply ln_increasing; [lra |].
  pose proof (exp_ineq1 1 ltac:(lra)); lra.
Qed.

Lemma w_ln_small : forall x, / 2 <= x <= 4 -> Rabs (ln x) <= 2.
Proof.
  intros x [H1 H2]; pose proof w_ln_2; apply Rabs_le; split.
  - apply Rle_trans with (ln (/ 2)); [rewrite ln_Rinv by lra; lra | apply w_ln_le; lra].
  - apply Rle_trans with (ln (2 * 2)); [apply w_ln_le; lra | rewrite ln_mult by lra; lra].
Qed.

Lemma w_lg_err : forall x, ff_fmt (mp_a wM) x -> / 2 <= x <= 4 -> Rabs (w_lg x - ln x) <= w_el.
Proof.
  intros x _ Hx; unfold w_lg, w_el.
  pose proof (ff_abs (mp_a wM) (ln x)) as H; pose proof (w_ln_small x Hx).
  pose proof (ff_u_nonneg (mp_a wM)).
  assert (ff_u (mp_a wM) * Rabs (ln x) <= ff_u (mp_a wM) * 2) by (apply Rmult_le_compat_l; lra).
  lra.
Qed.

(** [tl.sum]'s tree of a tile of at most one number: the leaf. *)
Definition w_shape (xs : list R) : stree := match xs with cons x nil => Leaf x | _ => Leaf 0 end.
