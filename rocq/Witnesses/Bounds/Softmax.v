(** * Witnesses of Bounds/Softmax.v (ojas_ref/verification/proof_audit.py): float32's
    [u = 2^-24] for the sums and for [exp], [n = 4] blocks, the score perturbation
    [delta = 2^-10], the [ln] check of [b = 2^-10] against [t = 2^-9]; the optional
    bounds computed in Coq ([vm_compute]). *)

From Coq Require Import QArith.
From Ojas Require Import Bounds.Softmax.

Definition wq_u : Q := 1 # 16777216.

(* [ltac:(eval vm_compute ...)]: [Eval vm_compute] under the [: Q] constraint took 11 s for [wq_err]. *)
Definition wq_beta : Q := ltac:(let v := eval vm_compute in (match stream_beta_q wq_u wq_u 4 with Some b => b | None => 0%Q end) in exact v).

Lemma wq_beta_eq : stream_beta_q wq_u wq_u 4 = Some wq_beta.
Proof. vm_compute; reflexivity. Qed.

Definition stream_beta_q_ge_witness :=
  stream_beta_q_ge wq_u wq_u 4 wq_beta ltac:(vm_compute; discriminate) ltac:(vm_compute; reflexivity)
    ltac:(vm_compute; discriminate) wq_beta_eq.

Definition wq_err : Q := ltac:(let v := eval vm_compute in (match stream_err_q wq_u wq_u 4 with Some e => e | None => 0%Q end) in exact v).

Lemma wq_err_eq : stream_err_q wq_u wq_u 4 = Some wq_err.
Proof. vm_compute; reflexivity. Qed.

Definition stream_err_q_ge_witness :=
  stream_err_q_ge wq_u wq_u 4 wq_err ltac:(vm_compute; discriminate) ltac:(vm_compute; reflexivity)
    ltac:(vm_compute; discriminate) wq_err_eq.

Definition wq_pert : Q := ltac:(let v := eval vm_compute in (match perturbation_q (1 # 1024) with Some e => e | None => 0%Q end) in exact v).

Lemma wq_pert_eq : perturbation_q (1 # 1024) = Some wq_pert.
Proof. vm_compute; reflexivity. Qed.

Definition perturbation_q_ge_witness := perturbation_q_ge (1 # 1024) wq_pert wq_pert_eq.

Definition neg_ln_check_correct_witness :=
  neg_ln_check_correct (1 # 1024) (1 # 512) ltac:(vm_compute; reflexivity).
