(** * Witnesses of Attention/GroupedQuery.v (ojas_ref/verification/proof_audit.py). *)
