(** * Witnesses of Attention/Float/DeltaReweight.v (ojas_ref/verification/proof_audit.py): one key
    ([unit]) of weight [P = 1], one coordinate, exact weights ([a = b = 0]), [Lc = 1], the values,
    [dO], [E] and the output [0].  Every premise proved together. *)

From Coq Require Import Reals List Lra.
From Ojas Require Import VectorFacts Attention.Float.DeltaReweight.
Import ListNotations.
Open Scope R_scope.

Lemma wdr_sum_one : rsum (map (fun _ : unit => 1) [tt]) = 1.
Proof. cbn [map]; rewrite rsum_cons, rsum_nil; ring. Qed.

Lemma wdr_abs0 : Rabs 0 <= 0.
Proof. rewrite Rabs_R0; apply Rle_refl. Qed.

Lemma wdr_zero_le : forall (j : unit), In j [tt] -> Rabs 0 <= 0.
Proof. intros; apply wdr_abs0. Qed.

Lemma wdr_tb : rsum (map (fun _ : unit => 1 * 0) [tt]) <= 0.
Proof. cbn [map]; rewrite rsum_cons, rsum_nil; lra. Qed.

Lemma wdr_D : 0 = rsum (map (fun _ : unit => 1 * 0) [tt]).
Proof. cbn [map]; rewrite rsum_cons, rsum_nil; ring. Qed.

Definition reweighted_mean_error_witness :=
  reweighted_mean_error [tt] (fun _ => 1) (fun _ => 0) (fun _ => 0) (fun _ => 0) 1 0 0
    (fun _ _ => Rle_0_1) wdr_sum_one wdr_zero_le wdr_tb Rlt_0_1 wdr_D Rlt_0_1.

Lemma wdr_diff_le : forall (j : unit), In j [tt] -> Rabs (0 - 0) <= 0.
Proof. intros; rewrite Rminus_0_r, Rabs_R0; apply Rle_refl. Qed.

Lemma wdr_Lk : 1 = rsum (map (fun _ : unit => 1 * 1 * (1 + 0)) [tt]) * (1 + 0).
Proof. cbn [map]; rewrite rsum_cons, rsum_nil; ring. Qed.

Lemma wdr_out : forall c, In c [0%nat] ->
  Rabs (0 - (rsum (map (fun _ : unit => 1 * 1 * (1 + 0) * 0) [tt]) + 0) / 1) <= 0 * Rabs 0 + 0.
Proof.
  intros; cbn [map]; rewrite rsum_cons, rsum_nil.
  replace (0 - (1 * 1 * (1 + 0) * 0 + 0 + 0) / 1) with 0 by field; rewrite Rabs_R0; lra.
Qed.

Definition attention_delta_ratio_error_witness :=
  attention_delta_ratio_error [tt] [0%nat] (fun _ => 1) (fun _ => 0) (fun _ => 0) (fun _ => 0) (fun _ => 0)
    (fun _ _ => 0) (fun _ => 0) (fun _ => 0) (fun _ => 0) 1 1 0 0 0 0 0
    (fun _ _ => Rle_0_1) wdr_sum_one wdr_zero_le wdr_diff_le wdr_tb Rlt_0_1 Rlt_0_1 wdr_Lk
    wdr_abs0 Rlt_0_1 wdr_out.
