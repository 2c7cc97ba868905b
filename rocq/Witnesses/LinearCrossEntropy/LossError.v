(** * Witnesses of LinearCrossEntropy/LossError.v (ojas_ref/verification/proof_audit.py): the
    instances of Witnesses/LinearCrossEntropy/LseError.v (Flocq FLX precision 24 for [rnd] and
    [exp], [ln] rounded to float32 and accurate on [[1/2, 4]]), two logits [0], [1] (perturbed to [0], [1 + 1/1000]), one
    token [[1]] of target 0 against two vocabulary rows [[1]; [1]], all premises proved together. *)

From Coq Require Import Reals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import FloatModel.NoUnderflow Attention.StreamError LinearCrossEntropy.Definitions.
From Ojas Require Import LinearCrossEntropy.LossError Witnesses.LinearCrossEntropy.LseError.
Import ListNotations.
Open Scope R_scope.

Lemma w_close_0 : forall x, Rabs (x - x) <= 0.
Proof. intros x; rewrite Rminus_diag_eq, Rabs_R0 by reflexivity; apply Rle_refl. Qed.

Lemma w_close_1 : Rabs (1 - (1 + / 1000)) <= / 1000.
Proof. rewrite Rabs_left1 by lra; lra. Qed.

Lemma w_close_1' : Rabs ((1 + / 1000) - 1) <= / 1000.
Proof. rewrite Rabs_right by lra; lra. Qed.

Lemma w_close_0' : Rabs (0 - 0) <= / 1000.
Proof. rewrite Rminus_0_r, Rabs_R0; lra. Qed.

Definition w_zs : list (nat * R) := [(0%nat, 0); (1%nat, 1)].
Definition w_zs' : list (nat * R) := [(0%nat, 0); (1%nat, 1 + / 1000)].

Lemma w_zs_close : Forall2 (fun a b => Rabs (snd a - snd b) <= / 1000) w_zs w_zs'.
Proof. apply Forall2_cons; [apply w_close_0' | apply Forall2_cons; [apply w_close_1 | apply Forall2_nil]]. Qed.

Lemma w_zs_close' : Forall2 (fun a b => Rabs (snd a - snd b) <= / 1000) w_zs' w_zs.
Proof. apply Forall2_cons; [apply w_close_0' | apply Forall2_cons; [apply w_close_1' | apply Forall2_nil]]. Qed.

Definition lse_R_lipschitz_witness := lse_R_lipschitz w_zs w_zs' (/ 1000) ltac:(discriminate) w_zs_close.

Definition chunked_lse_lipschitz_witness :=
  chunked_lse_lipschitz 1 w_zs w_zs' (/ 1000) ltac:(discriminate) w_zs_close.

Definition chunked_sum_error_bound_witness :=
  chunked_sum_error_bound w_rnd w_rexp w_rln wu wu_nonneg w_rnd_rel [[0; 1]; [1 + / 1000]].

Lemma w_nu : INR 1 * wu < 1.
Proof. rewrite wu_val; simpl INR; lra. Qed.

Definition raw_logit_error_bound_witness :=
  raw_logit_error_bound w_rnd w_rexp w_rln wu wu_nonneg w_rnd_rel w_rnd_idem None [1] (0%nat, [1]) eq_refl w_nu.

Definition chunk_lse_perturbed_error_bound_witness :=
  chunk_lse_perturbed_error_bound w_rnd w_rexp w_rln wu wu w_ul w_Lmax wu_nonneg wu_nonneg w_rnd_rel w_rexp_rel w_rln_err
    1 w_zs w_zs' (/ 1000) ltac:(discriminate) w_zs_close' wu_lt_1 (w_beta_half 2 ltac:(lia)) (w_range 2 ltac:(lia)).

(** [nat_err] of two logits is a few [u]. *)
Lemma w_nat_err : nat_err wu 2 < INR 2.
Proof. unfold nat_err; rewrite wu_val; simpl pow; simpl INR; lra. Qed.

Lemma w_zs_close2 : Forall2 (fun a b => Rabs (a - b) <= / 1000) [0; 1 + / 1000] [0; 1].
Proof. apply Forall2_cons; [apply w_close_0' | apply Forall2_cons; [apply w_close_1' | apply Forall2_nil]]. Qed.

Definition token_loss_error_bound_witness :=
  token_loss_error_bound w_rnd w_rexp w_rln wu wu w_ul w_Lmax wu_nonneg wu_nonneg w_rnd_rel w_rexp_rel w_rln_err
    (/ 10) (/ 10000) 1 0%Z [0; 1] [0; 1 + / 1000] (/ 1000) ltac:(discriminate) w_zs_close2 ltac:(cbn; lia)
    wu_lt_1 (w_beta_half 2 ltac:(lia)) (w_range 2 ltac:(lia)) w_nat_err.

Definition w_cfg : ce_config R := mk_ce_config (-100)%Z (/ 10) (/ 10000) None Red_mean.

Lemma w_logits_close : forall e, In e (vocab [[1]; [1]]) ->
  Rabs (raw_logit (fl_ops w_rnd w_rexp w_rln) None [1] e - raw_logit ScalarOps.R_ops None [1] e)
  <= logit_err wu None [1] (0%nat, [1]).
Proof.
  intros e He; cbn in He; destruct He as [<- | [<- | []]];
    (eapply Rle_trans; [apply raw_logit_error_bound; [apply wu_nonneg | apply w_rnd_rel | apply w_rnd_idem
                                                      | reflexivity | apply w_nu] | right; reflexivity]).
Qed.

Definition token_forward_error_bound_witness :=
  token_forward_error_bound w_rnd w_rexp w_rln wu wu w_ul w_Lmax wu_nonneg wu_nonneg w_rnd_rel w_rexp_rel w_rln_err
    w_cfg 1 [[1]; [1]] None [1] 0%Z (logit_err wu None [1] (0%nat, [1])) eq_refl ltac:(discriminate)
    ltac:(cbn; lia) w_logits_close wu_lt_1 (w_beta_half 2 ltac:(lia)) (w_range 2 ltac:(lia)) w_nat_err.
