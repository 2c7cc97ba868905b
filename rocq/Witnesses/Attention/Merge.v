(** * Witnesses of Attention/Merge.v (ojas_ref/verification/proof_audit.py): the keys
    [(Some 1, [2])] and [(Some 0, [3])], each with the state that represents it
    (max = its score, sum [exp 0 = 1], accumulator its value row). *)

From Coq Require Import Reals List Lra Permutation.
From Ojas Require Import ScalarOps Vector VectorFacts Attention.OnlineSoftmax
  Attention.StreamCorrect Attention.Merge.
Import ListNotations.
Open Scope R_scope.

Definition w_k1 : key := (Some 1, [2]).
Definition w_k2 : key := (Some 0, [3]).
Definition w_s1 : state R := mk_state 1 1 [2].
Definition w_s2 : state R := mk_state 0 1 [3].

Lemma w_represents_1 : represents (Some w_s1) [w_k1].
Proof.
  split; [reflexivity | split].
  - unfold kw_sum, rsum; cbn; rewrite Rminus_diag_eq, exp_0 by reflexivity; ring.
  - intros c; unfold kw_acc, rsum; cbn; rewrite Rminus_diag_eq, exp_0 by reflexivity.
    destruct c as [|[|c]]; cbn; ring.
Qed.

Lemma w_represents_2 : represents (Some w_s2) [w_k2].
Proof.
  split; [reflexivity | split].
  - unfold kw_sum, rsum; cbn; rewrite Rminus_diag_eq, exp_0 by reflexivity; ring.
  - intros c; unfold kw_acc, rsum; cbn; rewrite Rminus_diag_eq, exp_0 by reflexivity.
    destruct c as [|[|c]]; cbn; ring.
Qed.

Definition finalize_st_eq_witness := finalize_st_eq 1 (Some w_s1) (Some w_s1) (st_eq_refl _).

Definition merge_represents_witness :=
  merge_represents (Some w_s1) (Some w_s2) [w_k1] [w_k2] w_represents_1 w_represents_2.

Definition merge_blocks_correct_witness :=
  merge_blocks_correct 1 [[w_k1]; [w_k2]] [[w_k2]; [w_k1]] (perm_swap _ _ _).
