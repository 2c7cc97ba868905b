(** * Witnesses of Attention/Float/SavedLseError.v (ojas_ref/verification/proof_audit.py). *)
