(** * Witnesses of LinearCrossEntropy/Loss.v (ojas_ref/verification/proof_audit.py): a vocabulary of
    one logit [0], the target 0, no smoothing, no z-loss, no softcap, no bias. *)

From Coq Require Import Reals List ZArith Lia.
From Ojas Require Import LinearCrossEntropy.Definitions LinearCrossEntropy.Loss.
Import ListNotations.
Open Scope R_scope.

Definition w_cfg : ce_config R := mk_ce_config (-100)%Z 0 0 None Red_mean.

Definition token_loss_chunked_witness :=
  token_loss_chunked 0 0 1 0%Z [0] ltac:(discriminate) ltac:(cbn; lia).

Definition logits_loss_correct_witness :=
  logits_loss_correct 0 0 1 0%Z [0] ltac:(discriminate) ltac:(cbn; lia).

Definition token_forward_correct_witness :=
  token_forward_correct w_cfg 1 [[0]] None [0] 0%Z ltac:(discriminate) ltac:(cbn; lia).

Definition token_forward_lse_witness := token_forward_lse w_cfg 1 [[0]] None [0] 0%Z ltac:(discriminate).

Definition ce_token_loss_softmax_witness := ce_token_loss_softmax 0 0 0%Z [0] ltac:(discriminate).

Definition ce_token_loss_nll_witness := ce_token_loss_nll 0%Z [0] ltac:(discriminate).

Definition ce_token_loss_terms_witness := ce_token_loss_terms 0 0 0%Z [0] ltac:(discriminate).
