(** * Witnesses of Reversible/Gradient.v (ojas_ref/verification/proof_audit.py). *)
