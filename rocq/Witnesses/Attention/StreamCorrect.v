(** * Witnesses of Attention/StreamCorrect.v (ojas_ref/verification/proof_audit.py): value
    rows of [d = 2] coordinates, the keys [(Some 0, [1; 2])], [(None, [3; 4])] and
    [(Some 1, [5; 6])], tiles of two keys. *)

From Coq Require Import Reals List.
From Ojas Require Import ScalarOps Vector VectorFacts Attention.OnlineSoftmax Attention.StreamCorrect.
Import ListNotations.
Open Scope R_scope.

Definition w_keys : list (option R * list R) := [(Some 0, [1; 2]); (None, [3; 4]); (Some 1, [5; 6])].

Lemma w_rows : forall k, In k w_keys -> length (snd k) = 2%nat.
Proof. intros k [<- | [<- | [<- | []]]]; reflexivity. Qed.

Definition stream_row_correct_len_witness := stream_row_correct_len 2 2 w_keys w_rows.

Definition stream_row_eq_two_pass_witness := stream_row_eq_two_pass 2 2 w_keys w_rows.
