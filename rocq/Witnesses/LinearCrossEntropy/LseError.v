(** * Witnesses of LinearCrossEntropy/LseError.v (ojas_ref/verification/proof_audit.py): the model
    without underflow of FloatModel/NoUnderflow.v at float32's precision, [rnd] Flocq's
    round-to-nearest-even in FLX precision 24 ([u = 2^-24]), [rexp] the exact [exp] rounded to it
    ([ue = 2^-24]), [rln] the exact [ln] rounded to float32 (Witnesses/Instances.v's [w_lg]: Flocq's
    round-to-nearest-even FLT format of float32, so every value is a float32 number), within
    [ul = 2 u + eta] of [ln] on [[1/2, Lmax]], [Lmax = 4], two logits [0], [1] in two tiles
    ([beta <= 1/2], [(1 + beta) 2 <= 4]), all premises proved together.
    Witnesses/LinearCrossEntropy/LossError.v imports these instances. *)

From Coq Require Import Reals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import FloatModel.NoUnderflow Attention.StreamError LinearCrossEntropy.Definitions.
From Ojas Require Import LinearCrossEntropy.LseError.
From Ojas Require FloatModel.MixedPrecision Witnesses.Instances.
Import ListNotations.
Open Scope R_scope.

(** The unit roundoff of float32, [2^-24]. *)
Definition wu : R := bpow radix2 (-24).
Lemma wu_val : wu = / 16777216.
Proof. unfold wu; change (-24)%Z with (- (24))%Z; rewrite bpow_opp; reflexivity. Qed.
(** [+ - * /]: round-to-nearest-even in precision 24, no underflow. *)
Definition w_rnd : R -> R := flx_rnd 24.
Lemma w_rnd_rel : forall x, Rabs (w_rnd x - x) <= wu * Rabs x.
Proof. exact (flx_rnd_rel 24 eq_refl). Qed.
(** [exp] rounded. *)
Definition w_rexp (x : R) : R := flx_rnd 24 (exp x).
Lemma w_rexp_rel : forall x, Rabs (w_rexp x - exp x) <= wu * exp x.
Proof. exact (flx_exp_rel 24 eq_refl). Qed.
(** [ln] rounded to float32 ([tl.log]), within [ul = 2 u + eta] of [ln] on [[1/2, 4]]. *)
Definition w_rln (x : R) : R := Instances.w_lg x.
Definition w_ul : R := Instances.w_el.
Definition w_Lmax : R := 4.
Lemma w_rln_fmt : forall x, MixedPrecision.ff_fmt (MixedPrecision.mp_a Instances.wM) (w_rln x).
Proof. intros x; apply Instances.w_lg_fmt. Qed.
Lemma w_rln_err : forall x, / 2 <= x <= w_Lmax -> Rabs (w_rln x - ln x) <= w_ul.
Proof.
  intros x Hx; unfold w_rln, w_ul, w_Lmax, Instances.w_lg, Instances.w_el in *.
  pose proof (MixedPrecision.ff_abs (MixedPrecision.mp_a Instances.wM) (ln x)) as H.
  pose proof (Instances.w_ln_small x Hx); pose proof (MixedPrecision.ff_u_nonneg (MixedPrecision.mp_a Instances.wM)).
  assert (MixedPrecision.ff_u (MixedPrecision.mp_a Instances.wM) * Rabs (ln x)
          <= MixedPrecision.ff_u (MixedPrecision.mp_a Instances.wM) * 2) by (apply Rmult_le_compat_l; lra).
  lra.
Qed.
Lemma w_rnd_idem : forall x, w_rnd (w_rnd x) = w_rnd x.
Proof. intros x; unfold w_rnd, flx_rnd. apply round_generic; [apply valid_rnd_N | apply generic_format_round; [apply FLX_exp_valid; reflexivity| apply valid_rnd_N]]. Qed.
(** [stream_beta] of one or two tiles is a few [u]. *)
Lemma w_beta : forall n, (n <= 2)%nat -> stream_beta wu wu n < 1.
Proof.
  intros n Hn; unfold stream_beta, stream_factor, exp_shift_err; rewrite wu_val.
  assert (He : 0 < exp (-1) <= 1) by (split; [apply exp_pos | rewrite <- exp_0; left; apply exp_increasing; lra]).
  destruct n as [| [| [| n]]]; [| | | lia]; simpl pow; simpl INR; nra.
Qed.

(** ... and at most [1/2], with [(1 + beta) n <= 4]: the computed sum lies in [[1/2, 4]]. *)
Lemma w_beta_half : forall n, (n <= 2)%nat -> stream_beta wu wu n <= / 2.
Proof.
  intros n Hn; unfold stream_beta, stream_factor, exp_shift_err; rewrite wu_val.
  assert (He : 0 < exp (-1) <= 1) by (split; [apply exp_pos | rewrite <- exp_0; left; apply exp_increasing; lra]).
  destruct n as [| [| [| n]]]; [| | | lia]; simpl pow; simpl INR; nra.
Qed.

Lemma w_range : forall n, (n <= 2)%nat -> (1 + stream_beta wu wu n) * INR n <= w_Lmax.
Proof.
  intros n Hn; pose proof (w_beta_half n Hn); unfold w_Lmax.
  assert (0 <= INR n <= 2) by (split; [apply pos_INR | change 2 with (INR 2); apply le_INR, Hn]).
  nra.
Qed.

Lemma wu_nonneg : 0 <= wu.
Proof. apply bpow_ge_0. Qed.

Lemma wu_lt_1 : wu < 1.
Proof. rewrite wu_val; lra. Qed.

Definition chunked_lse_error_bound_witness :=
  chunked_lse_error_bound w_rnd w_rexp w_rln wu wu w_ul w_Lmax wu_nonneg wu_nonneg w_rnd_rel w_rexp_rel w_rln_err
    [[(0%nat, 0)]; [(1%nat, 1)]] ltac:(discriminate) wu_lt_1 (w_beta_half 2 ltac:(lia)) (w_range 2 ltac:(lia)).

Definition chunk_lse_error_bound_witness :=
  chunk_lse_error_bound w_rnd w_rexp w_rln wu wu w_ul w_Lmax wu_nonneg wu_nonneg w_rnd_rel w_rexp_rel w_rln_err
    1 [(0%nat, 0); (1%nat, 1)] ltac:(discriminate) wu_lt_1 (w_beta_half 2 ltac:(lia)) (w_range 2 ltac:(lia)).
