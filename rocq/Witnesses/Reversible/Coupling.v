(** * Witnesses of Reversible/Coupling.v (ojas_ref/verification/proof_audit.py). *)
