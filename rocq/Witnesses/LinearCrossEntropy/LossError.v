(** * Witnesses of LinearCrossEntropy/LossError.v (ojas_ref/verification/proof_audit.py). *)
