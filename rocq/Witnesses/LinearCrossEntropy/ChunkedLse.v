(** * Witnesses of LinearCrossEntropy/ChunkedLse.v (ojas_ref/verification/proof_audit.py): one chunk
    of one logit [0]. *)

From Coq Require Import Reals List Permutation.
From Ojas Require Import LinearCrossEntropy.ChunkedLse.
Import ListNotations.
Open Scope R_scope.

Definition chunked_lse_max_sum_witness := chunked_lse_max_sum [[(0%nat, 0)]] ltac:(discriminate).

Definition chunked_lse_chunk_witness := chunked_lse_chunk 1 [(0%nat, 0)] ltac:(discriminate).

Definition chunked_lse_any_chunking_witness := chunked_lse_any_chunking [] [] (perm_nil _).

Definition merge_chunks_lse_witness :=
  merge_chunks_lse [[(0%nat, 0)]] [[(0%nat, 0)]] (Permutation_refl _) ltac:(discriminate).
