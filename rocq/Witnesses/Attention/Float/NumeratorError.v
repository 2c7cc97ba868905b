(** * Witnesses of Attention/Float/NumeratorError.v (ojas_ref/verification/proof_audit.py):
    one probability [0] times one value [0]; [acc_numerator_error_bound] from
    [acc = 1] at the fp32 per-product model ([blocked_acc_dot_model] at [E = 1]). *)

From Coq Require Import Reals List Lra Lia.
From Ojas Require Import FloatModel.MixedPrecision Attention.Float.NumeratorError Witnesses.Instances.
From Ojas Require Import Witnesses.Attention.Float.ForwardError.
Import ListNotations.
Open Scope R_scope.

Lemma w_u_1 : INR (S (1 - 1 + (1 - 1))) * / 16777216 < 1.
Proof. simpl; lra. Qed.

Definition mixed_numerator_error_bound_witness :=
  ltac:(refine (mixed_numerator_error_bound wM 1 1 [0] [0] (le_n 1) (le_n 1) ltac:(cbn; lia)
                  (Forall_cons _ (Rle_refl 0) (Forall_nil _)) _); rewrite w_u; exact w_u_1).

Definition bf16_numerator_error_bound_witness :=
  bf16_numerator_error_bound 1 1 [0] [0] (le_n 1) (le_n 1) ltac:(cbn; lia)
    (Forall_cons _ (Rle_refl 0) (Forall_nil _)) w_u_1.

Definition acc_numerator_error_bound_witness :=
  acc_numerator_error_bound wM _ 1 _ _ 1 [0] [0] blocked_acc_dot_model_witness eq_refl eq_refl
    (Forall_cons _ (Rle_refl 0) (Forall_nil _)).
