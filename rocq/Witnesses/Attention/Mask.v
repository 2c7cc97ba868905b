(** * Witnesses of Attention/Mask.v (ojas_ref/verification/proof_audit.py). *)
