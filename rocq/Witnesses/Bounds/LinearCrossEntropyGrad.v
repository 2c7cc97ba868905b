(** * Witnesses of Bounds/LinearCrossEntropyGrad.v (ojas_ref/verification/proof_audit.py). *)
