(** * Witnesses of Reversible/Stack.v (ojas_ref/verification/proof_audit.py). *)
