(** * Witnesses of LinearCrossEntropy/EndToEnd.v (ojas_ref/verification/proof_audit.py). *)
