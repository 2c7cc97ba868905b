(** * Witnesses of Attention/Float/DvError.v (ojas_ref/verification/proof_audit.py). *)
