(** * Witnesses of Attention/Merge.v (ojas_ref/verification/proof_audit.py). *)
