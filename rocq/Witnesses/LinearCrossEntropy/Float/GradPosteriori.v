(** * Witnesses of LinearCrossEntropy/Float/GradPosteriori.v (ojas_ref/verification/proof_audit.py). *)
