(** * Witnesses of FloatModel/Exp2Weight.v (ojas_ref/verification/proof_audit.py). *)

From Coq Require Import Reals.
From Ojas Require Import FloatModel.MixedPrecision FloatModel.Exp2Weight Witnesses.Instances.
Open Scope R_scope.

Definition exp2_weight_error_bound_witness :=
  exp2_weight_error_bound wM 0 0 (ff_fmt_0 _) (ff_fmt_0 _) (Rle_refl 0).

Definition fp32_exp2_weight_error_bound_witness :=
  fp32_exp2_weight_error_bound 0 0 (ff_fmt_0 _) (ff_fmt_0 _) (Rle_refl 0).
