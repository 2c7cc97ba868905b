(** * Witnesses of Bounds/Sums.v (ojas_ref/verification/proof_audit.py). *)
