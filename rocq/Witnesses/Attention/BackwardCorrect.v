(** * Witnesses of Attention/BackwardCorrect.v (ojas_ref/verification/proof_audit.py): one
    query row of scores [0; 1] over value rows [[1; 2]; [3; 4]] (the second key
    visible only: [vis j = 1 <= j], or both), upstream gradient [1; -1]; a head of two
    query rows and two keys of two coordinates under the causal mask, scale [1/2];
    query tiles of one row each, key tiles of one key. *)

From Coq Require Import Reals List Lia.
From Ojas Require Import ScalarOps Vector VectorFacts Attention.OnlineSoftmax Attention.Backward
  Attention.BackwardCorrect.
Import ListNotations.
Open Scope R_scope.

Definition w_ss : list R := [0; 1].
Definition w_vs : list (list R) := [[1; 2]; [3; 4]].
Definition w_dO : list R := [1; -1].
Definition w_vis (j : nat) : bool := Nat.leb 1 j.
Definition w_all (j : nat) : bool := true.

Definition w_q : list R := [1; 2].
Definition w_qs : list (list R) := [[1; 0]; [0; 1]].
Definition w_ks : list (list R) := [[1; 1]; [0; 2]].
Definition w_dOs : list (list R) := [[1; 0]; [0; 1]].

Ltac w_lt := cbn; lia.

Definition backward_D_identity_witness := backward_D_identity 2 w_vis w_ss w_vs w_dO eq_refl.

Definition row_dscores_is_derive_witness :=
  row_dscores_is_derive 2 w_all w_ss w_vs w_dO 1 eq_refl ltac:(w_lt).

Definition dV_row_is_derive_witness :=
  dV_row_is_derive 2 w_all w_ss w_vs w_dO 0 1 eq_refl ltac:(w_lt) ltac:(w_lt).

Definition dQ_row_is_derive_witness :=
  dQ_row_is_derive 2 w_vis (/ 2) w_q w_ks w_vs w_dO 1 eq_refl ltac:(w_lt).

Definition dK_row_is_derive_witness :=
  dK_row_is_derive 2 w_all (/ 2) w_q w_ks w_vs w_dO 1 0 eq_refl ltac:(w_lt) ltac:(w_lt).

Definition weighted_sum_app_witness := weighted_sum_app [1; 2] [3] [[1]; [2]] [[4]] 0 eq_refl.

Definition w_ws_tiles : list (list R * list (list R)) := [([1; 2], [[1]; [2]]); ([3], [[4]])].

Definition weighted_sum_tiles_witness :=
  weighted_sum_tiles w_ws_tiles 0 ltac:(unfold w_ws_tiles; repeat constructor).

Definition weighted_sum_chunk_witness := weighted_sum_chunk 2 [1; 2; 3] [[1]; [2]; [4]] 0 eq_refl.

(** The second query row sees the keys of global row [1 + i]. *)
Definition w_vis2 (i j : nat) : bool := causal (1 + i) j.

Definition attention_backward_split_queries_witness :=
  attention_backward_split_queries (/ 2) causal w_vis2 [[1; 0]] [[0; 1]] w_ks w_vs
    [[1; 2]] [[2; 3]] [Some 0] [Some 1] [[1; 0]] [[0; 1]]
    eq_refl eq_refl eq_refl (fun i j => eq_refl).

Definition w_tiles : list (list (list R) * list (list R) * list (option R) * list (list R)) :=
  [([[1; 0]], [[1; 2]], [Some 0], [[1; 0]]); ([[0; 1]], [[2; 3]], [None], [[0; 1]])].

Definition attention_backward_query_tiles_witness :=
  attention_backward_query_tiles (/ 2) causal w_tiles w_ks w_vs
    ltac:(unfold w_tiles; repeat constructor).

Definition attention_backward_dV_is_derive_witness :=
  attention_backward_dV_is_derive 2 (/ 2) causal w_qs w_ks w_vs w_dOs eq_refl eq_refl
    1 0 ltac:(w_lt) ltac:(w_lt).

Definition attention_backward_dK_is_derive_witness :=
  attention_backward_dK_is_derive 2 (/ 2) causal w_qs w_ks w_vs w_dOs eq_refl eq_refl
    0 1 ltac:(w_lt) ltac:(w_lt).

Definition attention_backward_dQ_is_derive_witness :=
  attention_backward_dQ_is_derive 2 (/ 2) causal w_qs w_ks w_vs w_dOs eq_refl eq_refl
    1 1 ltac:(w_lt) ltac:(w_lt).

Definition attention_backward_dQ_key_tiles_witness :=
  attention_backward_dQ_key_tiles 2 (/ 2) causal w_qs w_ks w_vs w_dOs eq_refl eq_refl
    1 1 0 ltac:(w_lt).

Definition row_dscores_is_derive_stream_witness :=
  row_dscores_is_derive_stream 1 2 w_vis w_ss w_vs w_dO 1 eq_refl ltac:(w_lt).
