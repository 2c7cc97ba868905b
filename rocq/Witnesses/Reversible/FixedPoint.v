(** * Witnesses of Reversible/FixedPoint.v (ojas_ref/verification/proof_audit.py). *)
