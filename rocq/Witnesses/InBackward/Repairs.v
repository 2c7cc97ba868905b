(** * Witnesses of InBackward/Repairs.v (ojas_ref/verification/proof_audit.py). *)
