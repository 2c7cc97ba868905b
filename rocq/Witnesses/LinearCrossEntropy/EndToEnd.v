(** * Witnesses of LinearCrossEntropy/EndToEnd.v (ojas_ref/verification/proof_audit.py): one token
    [[1]] of target 0 (or ignored, [-100]) against a vocabulary of two rows [[1]; [0]], the
    softcap [c = 1], no smoothing, no z-loss, mean reduction; the backward's result named by
    its three projections. *)

From Coq Require Import Reals List ZArith Lia.
From Ojas Require Import ScalarOps LinearCrossEntropy.Definitions LinearCrossEntropy.EndToEnd.
Import ListNotations.
Open Scope R_scope.

Definition w_cfg : ce_config R := mk_ce_config (-100)%Z 0 0 (Some 1) Red_mean.
Definition w_W : list (list R) := [[1]; [0]].

Lemma w_triple {A B C : Type} (x : A * B * C) : x = (fst (fst x), snd (fst x), snd x).
Proof. destruct x as [[a b] c]; reflexivity. Qed.

Lemma w_cap : forall c : R, ce_softcap w_cfg = Some c -> c <> 0.
Proof. intros c H; injection H as <-; exact R1_neq_R0. Qed.

Lemma w_W_nil : w_W <> [].
Proof. discriminate. Qed.

Lemma w_tgt : forall t, In t [0%Z] -> kept w_cfg t = true -> (0 <= t < Z.of_nat (length w_W))%Z.
Proof. intros t [<- | []] _; cbn; lia. Qed.

Definition w_bw (bias : option (list R)) (ts : list Z) (dout : list R) :=
  ce_backward R_ops w_cfg 1 1 [[1]] w_W bias ts (ce_forward R_ops w_cfg 1 1 [[1]] w_W bias ts) dout.

Definition w_bw1 := w_bw None [0%Z] [1].
Definition w_bw2 := w_bw (Some [0; 0]) [0%Z] [1].
Definition w_bw3 := w_bw (Some [0; 0]) [(-100)%Z] [1].

Definition ce_grad_input_is_derive_witness :=
  ce_grad_input_is_derive w_cfg 1 1 [[1]] w_W None [0%Z] [1] (fst (fst w_bw1)) (snd (fst w_bw1)) (snd w_bw1) 0 0
    w_W_nil w_tgt w_cap eq_refl ltac:(cbn; lia) ltac:(cbn; lia) (w_triple w_bw1).

Definition ce_grad_weight_is_derive_witness :=
  ce_grad_weight_is_derive w_cfg 1 1 [[1]] w_W None [0%Z] [1] (fst (fst w_bw1)) (snd (fst w_bw1)) (snd w_bw1) 1 0
    w_W_nil w_tgt w_cap eq_refl ltac:(cbn; lia) ltac:(cbn; lia) (w_triple w_bw1).

Definition ce_grad_bias_is_derive_witness :=
  ce_grad_bias_is_derive w_cfg 1 1 [[1]] w_W [0; 0] [0%Z] [1] (fst (fst w_bw2)) (snd (fst w_bw2)) (snd w_bw2) 1
    w_W_nil w_tgt w_cap eq_refl eq_refl ltac:(cbn; lia) (w_triple w_bw2).

Definition ce_backward_is_gradient_witness :=
  ce_backward_is_gradient w_cfg 1 1 [[1]] w_W (Some [0; 0]) [0%Z] (fst (fst w_bw2)) (snd (fst w_bw2)) (snd w_bw2)
    ltac:(discriminate) w_W_nil w_tgt w_cap eq_refl (w_triple w_bw2).

Lemma w_ignored : forall t, In t [(-100)%Z] -> kept w_cfg t = false.
Proof. intros t [<- | []]; reflexivity. Qed.

Definition ce_all_ignored_grads_zero_witness :=
  ce_all_ignored_grads_zero w_cfg 1 1 [[1]] w_W (Some [0; 0]) [(-100)%Z] [1] (fst (fst w_bw3)) (snd (fst w_bw3)) (snd w_bw3)
    w_W_nil w_cap eq_refl w_ignored (w_triple w_bw3).
