(** * Witnesses of Attention/ScorePerturbation.v (ojas_ref/verification/proof_audit.py): the
    scores [0; 1] moved to [1/2; 1] ([delta = 1/2]), value rows [[1; 2]; [3; 4]],
    coordinate [c = 1] bounded by [V = 4]; masked: only key 1 visible. *)

From Coq Require Import Reals List Lra Lia.
From Ojas Require Import ScalarOps Vector VectorFacts Attention.OnlineSoftmax
  Attention.ScorePerturbation.
Import ListNotations.
Open Scope R_scope.

Definition w_ss : list R := [0; 1].
Definition w_ss' : list R := [/ 2; 1].
Definition w_vs : list (list R) := [[1; 2]; [3; 4]].
Definition w_vis (j : nat) : bool := Nat.leb 1 j.

Lemma w_delta : forall j, (j < length w_vs)%nat -> Rabs (nth j w_ss' 0 - nth j w_ss 0) <= / 2.
Proof. intros j Hj; cbn in Hj; destruct j as [|[|j]]; cbn; try lia; apply Rabs_le; lra. Qed.

Lemma w_V : forall j, (j < length w_vs)%nat -> Rabs (nth 1 (nth j w_vs nil) 0) <= 4.
Proof. intros j Hj; cbn in Hj; destruct j as [|[|j]]; cbn; try lia; apply Rabs_le; lra. Qed.

Definition softmax_output_perturbation_witness :=
  softmax_output_perturbation 2 w_vis w_ss w_ss' w_vs (/ 2) 4 1 eq_refl eq_refl ltac:(cbn; lia) w_delta w_V.

Definition softmax_output_perturbation_unmasked_witness :=
  softmax_output_perturbation_unmasked 2 w_ss w_ss' w_vs (/ 2) 4 1 eq_refl eq_refl ltac:(cbn; lia) w_delta w_V.
