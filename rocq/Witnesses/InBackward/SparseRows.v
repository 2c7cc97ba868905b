(** * Witnesses of InBackward/SparseRows.v (ojas_ref/verification/proof_audit.py). *)
