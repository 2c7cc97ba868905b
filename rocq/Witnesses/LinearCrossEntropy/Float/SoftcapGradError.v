(** * Witnesses of LinearCrossEntropy/Float/SoftcapGradError.v (ojas_ref/verification/proof_audit.py). *)
