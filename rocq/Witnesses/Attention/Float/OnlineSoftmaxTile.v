(** * Witnesses of Attention/Float/OnlineSoftmaxTile.v (ojas_ref/verification/proof_audit.py). *)
