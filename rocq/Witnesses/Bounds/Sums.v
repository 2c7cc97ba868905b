(** * Witnesses of Bounds/Sums.v (ojas_ref/verification/proof_audit.py): the unit roundoff
    [u = 2^-24] of float32 and [n = 4] terms. *)

From Coq Require Import QArith.
From Ojas Require Import Bounds.Sums.

Definition wq_u : Q := 1 # 16777216.

Definition gamma_q_correct_witness := gamma_q_correct wq_u 4 ltac:(vm_compute; reflexivity).

Definition dot_bound_q_correct_witness :=
  dot_bound_q_correct wq_u 4 (gamma_q wq_u 4) ltac:(vm_compute; reflexivity).

Definition chunked_sum_factor_q_ge_witness := chunked_sum_factor_q_ge wq_u 4 ltac:(vm_compute; discriminate).

Definition sum_factor_q_ge_witness := sum_factor_q_ge wq_u 4 ltac:(vm_compute; discriminate).

Definition nat_err_q_ge_witness := nat_err_q_ge wq_u 4 ltac:(vm_compute; discriminate).
