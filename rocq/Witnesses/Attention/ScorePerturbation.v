(** * Witnesses of Attention/ScorePerturbation.v (ojas_ref/verification/proof_audit.py). *)
