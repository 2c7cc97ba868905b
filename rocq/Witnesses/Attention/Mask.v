(** * Witnesses of Attention/Mask.v (ojas_ref/verification/proof_audit.py): two keys of
    scores [0; 1] and value rows [[1]; [2]], tiles of one key, the causal row [i = 0];
    fully masked: the visibility [2 <= j], which hides both keys. *)

From Coq Require Import Reals List Lia.
From Ojas Require Import ScalarOps Vector VectorFacts Attention.OnlineSoftmax Attention.Mask.
Import ListNotations.
Open Scope R_scope.

Definition w_ss : list R := [0; 1].
Definition w_vs : list (list R) := [[1]; [2]].
Definition w_vis (j : nat) : bool := Nat.leb 1 j.
Definition w_hidden (j : nat) : bool := Nat.leb 2 j.

Lemma w_len : length w_vs = length w_ss.
Proof. reflexivity. Qed.

Lemma w_all_hidden : forall j, (j < length w_ss)%nat -> w_hidden j = false.
Proof. intros j Hj; cbn in Hj; destruct j as [|[|j]]; [reflexivity | reflexivity | lia]. Qed.

Definition two_pass_masked_keys_witness := two_pass_masked_keys 1 w_vis w_ss w_vs w_len.

Definition stream_row_masked_keys_witness := stream_row_masked_keys 1 1 w_vis w_ss w_vs w_len.

Definition two_pass_fully_masked_witness := two_pass_fully_masked 1 w_hidden w_ss w_vs w_all_hidden.

Definition stream_fully_masked_witness := stream_fully_masked 1 w_hidden w_ss w_vs w_all_hidden.

Definition stream_row_fully_masked_witness := stream_row_fully_masked 1 1 w_hidden w_ss w_vs w_all_hidden.

Definition stream_row_causal_witness := stream_row_causal 1 1 0 w_ss w_vs w_len.
