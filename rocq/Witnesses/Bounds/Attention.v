(** * Witnesses of Bounds/Attention.v (ojas_ref/verification/proof_audit.py). *)
