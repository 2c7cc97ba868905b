(** * Witnesses of ReLU/KernelBits.v (ojas_ref/verification/proof_audit.py). *)
