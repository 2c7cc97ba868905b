(** * Witnesses of LinearCrossEntropy/Reduction.v (ojas_ref/verification/proof_audit.py): a vocabulary
    of one row [[0]]; no token (every premise on the tokens holds vacuously of the empty batch),
    one ignored token, or one kept and one ignored. *)

From Coq Require Import Reals List ZArith Lia.
From Ojas Require Import ScalarOps LinearCrossEntropy.Definitions LinearCrossEntropy.Reduction.
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

(** [ce_backward]'s result, named by its three projections. *)
Lemma w_triple {A B C : Type} (x : A * B * C) : x = (fst (fst x), snd (fst x), snd x).
Proof. destruct x as [[a b] c]; reflexivity. Qed.

(** One token, ignored ([-100]), of one row [[0]], against one vocabulary row [[0]]. *)
Definition w_fa : fwd_acc R := ce_forward R_ops (w_cfg Red_mean) 1 1 [[0]] [[0]] None [(-100)%Z].
Definition w_bw : list (list R) * list (list R) * list R :=
  ce_backward R_ops (w_cfg Red_mean) 1 1 [[0]] [[0]] None [(-100)%Z] w_fa [1].

Definition ignored_grad_zero_witness :=
  ignored_grad_zero (w_cfg Red_mean) 1 1 [[0]] [[0]] None [(-100)%Z] w_fa [1]
    (fst (fst w_bw)) (snd (fst w_bw)) (snd w_bw) 0 eq_refl ltac:(cbn; lia) eq_refl (w_triple w_bw).

(** Two tokens, the first kept (target 0), the second ignored. *)
Definition w_split := split (kept_tokens (w_cfg Red_mean) [[0]; [1]] [0%Z; (-100)%Z]).

Definition ce_drop_ignored_witness :=
  ce_drop_ignored (w_cfg Red_mean) 1 1 1 [[0]; [1]] [[0]] None [0%Z; (-100)%Z] [1]
    (fst w_split) (snd w_split) ltac:(discriminate) eq_refl (surjective_pairing w_split).
