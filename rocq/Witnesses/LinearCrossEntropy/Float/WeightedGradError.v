(** * Witnesses of LinearCrossEntropy/Float/WeightedGradError.v (ojas_ref/verification/proof_audit.py). *)
