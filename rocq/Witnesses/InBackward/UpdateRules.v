(** * Witnesses of InBackward/UpdateRules.v (ojas_ref/verification/proof_audit.py): one SGD
    step (lr 0.1, momentum 0.9, dampening 0, weight decay 0.01, Nesterov) and one AdamW step
    (torch's defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 1e-2) from the
    initial state, on the parameter 1 with the gradient 1/2. *)

From Coq Require Import Reals Lra.
From Ojas Require Import InBackward.UpdateRules.
Open Scope R_scope.

Definition w_sgd : sgd_config R := mk_sgd_config (1 / 10) (Some (9 / 10)) 0 (1 / 100) true.

Definition sgd_update_R_witness := sgd_update_R w_sgd 1 None (1 / 2).

Definition w_adamw : adamw_config R := mk_adamw_config (1 / 1000) (9 / 10) (999 / 1000) (1 / 10 ^ 8) (1 / 100).

Definition adamw_update_R_witness :=
  adamw_update_R w_adamw 1 (adam_init R_opt_ops) (1 / 2) ltac:(cbn; lra).
