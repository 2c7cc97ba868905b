(** * Witnesses of ReLU/Backward.v (ojas_ref/verification/proof_audit.py). *)
