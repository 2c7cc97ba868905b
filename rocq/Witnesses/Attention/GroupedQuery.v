(** * Witnesses of Attention/GroupedQuery.v (ojas_ref/verification/proof_audit.py): two
    query heads per group ([G = 2]) over one key/value head of two keys of two
    coordinates; each query head has one query row; causal visibility; scale [1/2]. *)

From Coq Require Import Reals List Lia.
From Ojas Require Import ScalarOps Vector VectorFacts Attention.OnlineSoftmax Attention.Backward
  Attention.BackwardCorrect Attention.GroupedQuery.
Import ListNotations.
Open Scope R_scope.

Definition w_G : nat := 2.
Definition w_qh : list (list (list R)) := [[[1; 2]]; [[0; 1]]].
Definition w_kh : list (list (list R)) := [[[1; 0]; [2; 1]]].
Definition w_vh : list (list (list R)) := [[[3; 4]; [5; 6]]].
Definition w_dOh : list (list (list R)) := [[[1; 1]]; [[2; 0]]].
Definition w_vis (h i j : nat) : bool := Nat.leb j (i + h).

Lemma w_G_pos : (0 < w_G)%nat.
Proof. unfold w_G; lia. Qed.

Lemma w_heads : length w_qh = (length w_kh * w_G)%nat.
Proof. reflexivity. Qed.

Lemma w_dO : forall h, (h < length w_qh)%nat -> length (nth h w_dOh []) = length (nth h w_qh []).
Proof. intros h Hh; cbn in Hh; destruct h as [|[|h]]; [reflexivity | reflexivity | lia]. Qed.

Lemma w_kv : length w_vh = length w_kh.
Proof. reflexivity. Qed.

Lemma w_vs : forall hk, (hk < length w_kh)%nat -> length (nth hk w_vh []) = length (nth hk w_kh []).
Proof. intros hk Hh; cbn in Hh; destruct hk as [|hk]; [reflexivity | lia]. Qed.

Ltac w_lt := cbn; lia.

Definition nth_repeat_kv_witness := @nth_repeat_kv (list (list R)) w_G w_kh 1 [] w_G_pos.

Definition gqa_forward_repeat_kv_witness :=
  gqa_forward_repeat_kv R_ops 1 2 w_G (/ 2) w_vis w_qh w_kh w_vh w_G_pos.

Definition gqa_forward_correct_witness := gqa_forward_correct 1 2 w_G (/ 2) w_vis w_qh w_kh w_vh w_G_pos.

Definition gqa_loss_repeat_kv_witness := gqa_loss_repeat_kv 2 w_G (/ 2) w_vis w_qh w_kh w_vh w_dOh w_G_pos.

Definition gqa_dK_is_derive_witness :=
  gqa_dK_is_derive 1 2 w_G (/ 2) w_vis w_qh w_kh w_vh w_dOh w_G_pos w_heads w_dO w_kv w_vs
    0 1 1 ltac:(w_lt) ltac:(w_lt) ltac:(w_lt).

Definition gqa_dV_is_derive_witness :=
  gqa_dV_is_derive 1 2 w_G (/ 2) w_vis w_qh w_kh w_vh w_dOh w_G_pos w_heads w_dO w_kv w_vs
    0 1 0 ltac:(w_lt) ltac:(w_lt) ltac:(w_lt).

Definition gqa_dQ_is_derive_witness :=
  gqa_dQ_is_derive 1 2 w_G (/ 2) w_vis w_qh w_kh w_vh w_dOh w_G_pos w_heads w_dO w_kv w_vs
    1 0 1 ltac:(w_lt) ltac:(w_lt) ltac:(w_lt).

Definition gqa_backward_dK_witness :=
  gqa_backward_dK 1 2 w_G (/ 2) w_vis w_qh w_kh w_vh w_dOh w_G_pos w_heads w_kv
    0 1 1 ltac:(w_lt) ltac:(w_lt) ltac:(w_lt).

Definition gqa_backward_dV_witness :=
  gqa_backward_dV 1 2 w_G (/ 2) w_vis w_qh w_kh w_vh w_dOh w_G_pos w_heads w_kv
    0 1 0 ltac:(w_lt) ltac:(w_lt) ltac:(w_lt).

Definition gqa_backward_dQ_witness :=
  gqa_backward_dQ 1 2 w_G (/ 2) w_vis w_qh w_kh w_vh w_dOh 1 ltac:(w_lt).
