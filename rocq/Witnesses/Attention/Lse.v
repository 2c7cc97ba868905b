(** * Witnesses of Attention/Lse.v (ojas_ref/verification/proof_audit.py): the keys
    [(Some 0, [1])], a masked [(None, [5])] and [(Some 1, [2])] (max score [M = 1],
    lse [1 + ln (exp (-1) + 1)]); streamed in the tiles [[(Some 1, [2]); (None, [3])]]
    and [[(Some 0, [1])]], whose state is the one [stream] computes. *)

From Coq Require Import Reals List Lra.
From Ojas Require Import ScalarOps Vector VectorFacts Attention.OnlineSoftmax
  Attention.Backward Attention.StreamCorrect Attention.Lse.
Import ListNotations.
Open Scope R_scope.

Definition w_keys : list key := [(Some 0, [1]); (None, [5]); (Some 1, [2])].

Lemma w_max : block_max R_ops w_keys = Some 1.
Proof.
  unfold block_max; cbn; rewrite R_max_eq, Rmax_right by lra; reflexivity.
Qed.

Definition w_lse : R := 1 + ln (kw_sum 1 w_keys).

Lemma w_lse_eq : snd (two_pass R_ops 1 w_keys) = Some w_lse.
Proof. rewrite (two_pass_Some 1 w_keys 1 w_max); reflexivity. Qed.

Lemma w_max_some : block_max R_ops w_keys <> None.
Proof. rewrite w_max; discriminate. Qed.

Definition w_blocks : list (list key) := [[(Some 1, [2]); (None, [3])]; [(Some 0, [1])]].

(** The state [stream] computes on [w_blocks] (it is [Some _] by computation). *)
Definition w_state : state R :=
  match stream R_ops w_blocks with Some s => s | None => mk_state 0 0 [] end.

Definition two_pass_Z_pos_witness := two_pass_Z_pos w_keys 1 w_max.

Definition two_pass_lse_log_sum_exp_witness := two_pass_lse_log_sum_exp 1 w_keys w_lse w_lse_eq.

Definition exp_sub_lse_witness := exp_sub_lse 1 w_keys w_lse 1 2 w_lse_eq w_max.

Definition two_pass_probs_sum_witness := two_pass_probs_sum w_keys w_max_some.

Definition row_probs_sum_witness := row_probs_sum 1 w_keys w_max_some.

Definition stream_lse_witness := stream_lse 1 w_blocks w_state eq_refl.
