(** * Witnesses of InBackward/UpdateRules.v (ojas_ref/verification/proof_audit.py). *)
