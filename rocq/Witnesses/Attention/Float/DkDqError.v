(** * Witnesses of Attention/Float/DkDqError.v (ojas_ref/verification/proof_audit.py). *)
