(** * Witnesses of LinearCrossEntropy/Float/GradError.v (ojas_ref/verification/proof_audit.py). *)
