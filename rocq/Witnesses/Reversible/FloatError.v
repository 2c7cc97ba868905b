(** * Witnesses of Reversible/FloatError.v (ojas_ref/verification/proof_audit.py). *)
