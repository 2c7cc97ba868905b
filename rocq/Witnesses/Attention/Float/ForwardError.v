(** * Witnesses of Attention/Float/ForwardError.v (ojas_ref/verification/proof_audit.py). *)
