(** * Witnesses of LinearCrossEntropy/LseError.v (ojas_ref/verification/proof_audit.py). *)
