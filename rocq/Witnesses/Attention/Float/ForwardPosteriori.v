(** * Witnesses of Attention/Float/ForwardPosteriori.v (ojas_ref/verification/proof_audit.py). *)
