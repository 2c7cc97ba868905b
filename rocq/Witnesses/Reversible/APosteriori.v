(** * Witnesses of Reversible/APosteriori.v (ojas_ref/verification/proof_audit.py). *)
