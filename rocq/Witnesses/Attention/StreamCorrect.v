(** * Witnesses of Attention/StreamCorrect.v (ojas_ref/verification/proof_audit.py). *)
