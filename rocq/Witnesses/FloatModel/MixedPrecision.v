(** * Witnesses of FloatModel/MixedPrecision.v (ojas_ref/verification/proof_audit.py). *)

From Coq Require Import Reals Lra.
From Flocq Require Import Core IEEE754.BinarySingleNaN.
From Ojas Require Import FloatModel.MixedPrecision.
Open Scope R_scope.

Definition fp16_mul_fp32_witness := fp16_mul_fp32 0 0 (ff_fmt_0 _) (ff_fmt_0 _).

Definition bf16_mul_fp32_witness := bf16_mul_fp32 0 0 (ff_fmt_0 _) (ff_fmt_0 _) (or_introl (Rmult_0_l 0)).

Definition mixed_fp32_exp2_0_witness := mixed_fp32_exp2_0 bf16 bf16_in_fp32.

Definition w_zero : binary_float 24 128 := B754_zero false.

Lemma w_add_zero_ok : Rabs (ff_rnd fp32 (B2R w_zero + B2R w_zero)) < bpow radix2 128.
Proof.
  change (B2R w_zero) with 0; rewrite Rplus_0_r, (ff_rnd_id fp32 0 (ff_fmt_0 _)), Rabs_R0; apply bpow_gt_0.
Qed.

Definition fp32_add_ieee_witness :=
  fp32_add_ieee w_zero w_zero eq_refl eq_refl w_add_zero_ok.
