(** * Witnesses of Bounds/Softmax.v (ojas_ref/verification/proof_audit.py). *)
