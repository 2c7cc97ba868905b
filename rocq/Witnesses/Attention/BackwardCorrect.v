(** * Witnesses of Attention/BackwardCorrect.v (ojas_ref/verification/proof_audit.py). *)
