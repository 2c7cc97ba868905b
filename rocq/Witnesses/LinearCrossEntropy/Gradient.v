(** * Witnesses of LinearCrossEntropy/Gradient.v (ojas_ref/verification/proof_audit.py): one token
    [[1]] of target 0 against a vocabulary of two rows [[1]; [0]], the softcap [c = 1], no
    smoothing, no z-loss, no bias; the backward's result named by its three projections. *)

From Coq Require Import Reals List ZArith Lia.
From Ojas Require Import ScalarOps LinearCrossEntropy.Definitions LinearCrossEntropy.Loss LinearCrossEntropy.Gradient.
Import ListNotations.
Open Scope R_scope.

Definition w_cfg : ce_config R := mk_ce_config (-100)%Z 0 0 (Some 1) Red_mean.

Lemma w_triple {A B C : Type} (x : A * B * C) : x = (fst (fst x), snd (fst x), snd x).
Proof. destruct x as [[a b] c]; reflexivity. Qed.

Lemma w_cap : forall c : R, Some 1 = Some c -> c <> 0.
Proof. intros c H; injection H as <-; exact R1_neq_R0. Qed.

Definition w_fa : fwd_acc R := ce_forward R_ops w_cfg 1 1 [[1]] [[1]; [0]] None [0%Z].
Definition w_bw : list (list R) * list (list R) * list R :=
  ce_backward R_ops w_cfg 1 1 [[1]] [[1]; [0]] None [0%Z] w_fa [1].

Definition ce_backward_correct_witness :=
  ce_backward_correct w_cfg 1 1 [[1]] [[1]; [0]] None [0%Z] w_fa [1]
    (fst (fst w_bw)) (snd (fst w_bw)) (snd w_bw) eq_refl (w_triple w_bw).

Definition logits_loss_is_derive_witness :=
  logits_loss_is_derive 0 0 1 0%Z [1; 0] 1 ltac:(cbn; lia) ltac:(cbn; lia).

Definition raw_logits_loss_is_derive_witness :=
  raw_logits_loss_is_derive 0 0 (Some 1) 1 0%Z [1; 0] 1 w_cap ltac:(cbn; lia) ltac:(cbn; lia).

Definition grad_entry_is_derive_witness :=
  grad_entry_is_derive w_cfg 1 [[1]; [0]] None [lse_row (logits_row R_ops (Some 1) None [[1]; [0]] [1])] [1] 1
    0 [1] 0%Z 1 w_cap ltac:(cbn; lia) ltac:(cbn; lia) eq_refl.
