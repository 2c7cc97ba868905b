(** * Witnesses of Attention/Lse.v (ojas_ref/verification/proof_audit.py). *)
