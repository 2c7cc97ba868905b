(** * Witnesses of InBackward/Equivalence.v (ojas_ref/verification/proof_audit.py). *)
