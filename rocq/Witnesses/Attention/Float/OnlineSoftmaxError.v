(** * Witnesses of Attention/Float/OnlineSoftmaxError.v (ojas_ref/verification/proof_audit.py):
    [bf16_fp32] (Witnesses/Instances.v), the running values [0] and [1]. *)

From Coq Require Import Reals List Lra Lia.
From Ojas Require Import FloatModel.MixedPrecision Attention.Float.OnlineSoftmaxError Witnesses.Instances.
Import ListNotations.
Open Scope R_scope.

Lemma w_inv_0 : inv 1 0 0 0 0.
Proof. unfold inv; rewrite Rminus_0_r, Rabs_R0; lra. Qed.

Definition exp2_diff_error_witness := exp2_diff_error wM 0 0 (ff_fmt_0 _) (ff_fmt_0 _) (Rle_refl 0).

Definition rescale_step_witness :=
  ltac:(refine (rescale_step wM 1 0 0 0 0 1 0 0 0 0 0 0 _ _ _ _ _ _ _ _ _ _ _ _ _);
        first [ apply ff_fmt_0 | apply w_inv_0 | rewrite Rabs_R0; lra | lra ]).

Definition final_division_witness :=
  ltac:(refine (final_division wM 1 1 0 0 0 0 0 _ _ _ _ _ _ _);
        first [ lra | rewrite Rabs_R0; lra | rewrite Rminus_diag_eq, Rabs_R0 by reflexivity; lra
              | rewrite Rminus_0_r, Rabs_R0; lra ]).

Definition factor_iter_bound_witness :=
  ltac:(refine (factor_iter_bound wM 1 0 [] 1 0 0 (Rle_refl 1) (Rle_refl 0) I _);
        rewrite Rminus_0_r, Rmult_0_r, Rpower_O by lra; simpl; lra).
