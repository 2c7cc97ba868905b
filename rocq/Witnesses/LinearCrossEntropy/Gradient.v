(** * Witnesses of LinearCrossEntropy/Gradient.v (ojas_ref/verification/proof_audit.py). *)
