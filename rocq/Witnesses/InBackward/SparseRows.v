(** * Witnesses of InBackward/SparseRows.v (ojas_ref/verification/proof_audit.py): plain SGD
    (lr 0.1, no momentum, no weight decay) on a table of ones whose gradient is 1 in row 0 and
    zero elsewhere, the touched rows [[0]], at the element (0, 0). *)

From Coq Require Import Reals List Arith Lra.
From Ojas Require Import InBackward.UpdateRules InBackward.SparseRows.
Import ListNotations.
Open Scope R_scope.

Definition w_sgd : sgd_config R := mk_sgd_config (1 / 10) None 0 0 false.

Definition w_G (r _ : nat) : R := if Nat.eqb r 0 then 1 else 0.

Lemma w_G_zero : forall r j, ~ In r [0%nat] -> w_G r j = 0.
Proof.
  intros r j H; unfold w_G; destruct (Nat.eqb_spec r 0) as [-> | _]; [exfalso; apply H; left |]; reflexivity.
Qed.

Lemma w_sgd_fixed : forall x s, sgd_update R_opt_ops w_sgd x s 0 = (x, s).
Proof. intros x s; apply sgd_zero_grad_fixed_R; reflexivity. Qed.

Definition rows_update_eq_dense_witness :=
  rows_update_eq_dense 0 (sgd_update R_opt_ops w_sgd) w_sgd_fixed [0%nat] (fun _ _ => 1) (fun _ _ => None)
    w_G w_G_zero 0 0.

Definition sgd_sparse_rows_eq_witness :=
  sgd_sparse_rows_eq w_sgd eq_refl eq_refl [0%nat] (fun _ _ => 1) (fun _ _ => None) w_G w_G_zero 0 0.
