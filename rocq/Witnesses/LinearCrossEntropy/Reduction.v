(** * Witnesses of LinearCrossEntropy/Reduction.v (ojas_ref/verification/proof_audit.py): a vocabulary
    of one row, no token (every premise on the tokens holds vacuously of the empty batch). *)

From Coq Require Import Reals List ZArith.
From Ojas Require Import LinearCrossEntropy.Definitions LinearCrossEntropy.Reduction.
Import ListNotations.
Open Scope R_scope.

Definition w_cfg (r : reduction) : ce_config R := mk_ce_config (-100)%Z 0 0 None r.

Definition ce_forward_fold_witness := ce_forward_fold (w_cfg Red_mean) 1 [[0]] None 1 [] [].

Definition ce_loss_correct_witness :=
  ce_loss_correct (w_cfg Red_mean) 1 1 [] [[0]] None [] ltac:(discriminate)
    (fun t (H : In t []) _ => match H with end).

Definition ce_mean_all_ignored_witness :=
  ce_mean_all_ignored (w_cfg Red_mean) 1 1 [] [[0]] None [] eq_refl (fun t (H : In t []) => match H with end).

Definition ce_sum_all_ignored_witness :=
  ce_sum_all_ignored (w_cfg Red_sum) 1 1 [] [[0]] None [] eq_refl (fun t (H : In t []) => match H with end).
