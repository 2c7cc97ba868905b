(** * Witnesses of InBackward/ChunkedHead.v (ojas_ref/verification/proof_audit.py). *)
