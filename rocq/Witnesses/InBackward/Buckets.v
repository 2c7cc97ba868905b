(** * Witnesses of InBackward/Buckets.v (ojas_ref/verification/proof_audit.py). *)
