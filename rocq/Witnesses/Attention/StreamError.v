(** * Witnesses of Attention/StreamError.v (ojas_ref/verification/proof_audit.py). *)
