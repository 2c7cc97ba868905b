(** * Witnesses of Attention/AdditiveMask.v (ojas_ref/verification/proof_audit.py). *)
