(** * Witnesses of LinearCrossEntropy/LseError.v (ojas_ref/verification/proof_audit.py): the model
    without underflow of FloatModel/NoUnderflow.v at float32's precision, [rnd] Flocq's
    round-to-nearest-even in FLX precision 24 ([u = 2^-24]), [rexp] the exact [exp] rounded to it
    ([ue = 2^-24]), [rln] the exact [ln] rounded to the fixed-point grid [2^-24 Z] (absolute error
    at most [ul = 2^-24] everywhere), two logits [0], [1] in two tiles, all premises proved
    together.  Witnesses/LinearCrossEntropy/LossError.v imports these instances. *)

From Coq Require Import Reals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import FloatModel.NoUnderflow Attention.StreamError LinearCrossEntropy.Definitions.
From Ojas Require Import LinearCrossEntropy.LseError.
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
(** [ln] rounded to the nearest multiple of [2^-24]. *)
Definition w_rln (x : R) : R := round radix2 (FIX_exp (-24)) (Znearest (fun z => negb (Z.even z))) (ln x).
Lemma w_rln_err : forall x, 0 < x -> Rabs (w_rln x - ln x) <= wu.
Proof.
  intros x _; unfold w_rln, wu.
  pose proof (error_le_half_ulp radix2 (FIX_exp (-24)) (fun z => negb (Z.even z)) (ln x)) as H.
  rewrite ulp_FIX in H; pose proof (bpow_ge_0 radix2 (-24)); lra.
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

Lemma wu_nonneg : 0 <= wu.
Proof. apply bpow_ge_0. Qed.

Lemma wu_lt_1 : wu < 1.
Proof. rewrite wu_val; lra. Qed.

Definition chunked_lse_error_bound_witness :=
  chunked_lse_error_bound w_rnd w_rexp w_rln wu wu wu wu_nonneg wu_nonneg w_rnd_rel w_rexp_rel w_rln_err
    [[(0%nat, 0)]; [(1%nat, 1)]] ltac:(discriminate) wu_lt_1 (w_beta 2 ltac:(lia)).

Definition chunk_lse_error_bound_witness :=
  chunk_lse_error_bound w_rnd w_rexp w_rln wu wu wu wu_nonneg wu_nonneg w_rnd_rel w_rexp_rel w_rln_err
    1 [(0%nat, 0); (1%nat, 1)] ltac:(discriminate) wu_lt_1 (w_beta 2 ltac:(lia)).
