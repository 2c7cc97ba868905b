(** * Witnesses of LinearCrossEntropy/Float/LseLossError.v: every exported theorem applied to
    [bf16_fp32], [tl.exp] and [tl.log] the rounded [exp] and [ln] (Witnesses/Instances.v),
    [tl.sum] left to right ([tile_sum]) and one row of one logit, all its premises proved
    together (ojas_ref/verification/proof_audit.py). *)

From Coq Require Import Reals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision FloatModel.BlockedSum Attention.Float.OnlineSoftmaxError.
From Ojas Require Import LinearCrossEntropy.Float.LseLossError Witnesses.Instances.
Import ListNotations.
Open Scope R_scope.

Local Notation u := (ff_u (mp_a wM)).
Local Notation eta := (ff_eta (mp_a wM)).

(** One row of one logit [0], one tile: its [bL] is a few [u]. *)
Definition w_bL : R := ce_bL u u eta eta 1 0 1 1 1.

Lemma w_bL_small : 0 <= w_bL <= / 4.
Proof.
  unfold w_bL; cbv [ce_bL ce_H ce_Ci ce_Q ce_a ce_b ce_Cm ce_Ri]; rewrite w_u, w_eta; simpl pow; simpl INR.
  split; lra.
Qed.

Lemma w_bL_p : ce_bL_p u u eta eta 1 ((1 + u) ^ 0) (ce_Q u u ^ 1) (ce_a u u eta 1 ^ 1) 1 1 1 = w_bL.
Proof. reflexivity. Qed.

Lemma w_inv_1 : inv 1 0 1 1 1.
Proof. unfold inv; rewrite Rminus_diag_eq, Rabs_R0 by reflexivity; lra. Qed.

Lemma w_exp_0_le_1 : forall x, x = 0 -> exp x <= 1.
Proof. intros x ->; rewrite exp_0; lra. Qed.

Lemma w_row_ok : forall zy, In zy (concat [[(0, 0)]]) ->
  ff_fmt (mp_a wM) (fst zy) /\ Rabs (fst zy) <= 0 /\ Rabs (fst zy - snd zy) <= 0.
Proof.
  intros zy [<- | []]; cbn [fst snd]; rewrite Rminus_0_r, Rabs_R0.
  split; [apply ff_fmt_0 | lra].
Qed.

Ltac w_close :=
  first [ apply ff_fmt_0 | apply w_inv_1 | apply sum_ok_tile_sum | left; reflexivity | apply w_row_ok
        | repeat constructor; cbn; lia | cbn; lia | apply Rle_refl
        | apply w_exp_0_le_1; ring
        | rewrite ?w_bL_p; pose proof w_bL_small; unfold w_bL in *; rewrite ?exp_0; lra
        | simpl INR; rewrite ln_1; lra
        | pose proof (ff_u_nonneg (mp_a wM)); lra ].

Definition ce_term_close_witness :=
  ltac:(refine (ce_term_close wM w_ex u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_ex_err_neg
                  0 0 1 1 1 0 1 1 _ _ _ _ _ _ _ _); w_close).

Lemma w_item_ok : forall it, In it [(0, 0)] ->
  ff_fmt (mp_a wM) (fst it) /\ fst it <= 0 /\ exp (u * (0 - fst it)) <= 1 /\ 0 <= 1 <= 1 /\ inv 1 0 1 1 1.
Proof.
  intros it [<- | []]; cbn [fst]; repeat split; try lra; [apply ff_fmt_0 | | apply w_inv_1].
  apply w_exp_0_le_1; ring.
Qed.

Definition ce_tile_close_witness :=
  ltac:(refine (ce_tile_close wM w_ex u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_ex_err_neg
                  (R * R) fst (fun _ => 1) (fun _ => 1) (tile_sum (mp_a wM)) 0 1 0 [(0, 0)] 1 0 1 1
                  _ _ _ _ _ _); first [apply w_item_ok | w_close]).

Definition ce_lse_error_witness :=
  ltac:(refine (ce_lse_error wM w_ex u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_ex_err_neg
                  w_lg w_el (/ 2) 4 w_lg_fmt w_lg_err (0, 0) [[(0, 0)]] (tile_sum (mp_a wM)) 0 1 1 1
                  0 1 0 0 (- ln (1 - w_bL)) _ _ _ _ _ _ _ _ _ _ _ _); w_close).

Definition ce_loss_error_witness :=
  ltac:(refine (ce_loss_error wM 0 0 0 0 0 0 _ _ _ _); try apply ff_fmt_0;
        rewrite Rminus_0_r, Rabs_R0; lra).

Definition ce_lse_error_up_witness :=
  ltac:(refine (ce_lse_error_up wM w_ex u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_ex_err_neg
                  w_lg w_el (/ 2) 4 w_lg_fmt w_lg_err (0, 0) [[(0, 0)]] (tile_sum (mp_a wM)) 0 1 1 1
                  0 1 0 0 (- ln (1 - w_bL)) ((1 + u) ^ 0) (ce_Q u u ^ 1) (ce_a u u eta 1 ^ 1)
                  _ _ _ _ _ _ _ _ _ _ _ _ _ _ _); w_close).

Definition sum_ok_tile_sum_witness := sum_ok_tile_sum wM 1.

Lemma w_shape_ok : forall xs, xs <> [] -> (length xs <= 1)%nat ->
  leaves (w_shape xs) = xs /\ (depth (w_shape xs) <= 0)%nat.
Proof.
  intros [| x [| y r]] Hne Hl; [congruence | cbn; split; [reflexivity | lia] | cbn in Hl; lia].
Qed.

Definition sum_ok_tree_witness := sum_ok_tree wM w_shape 0 1 w_shape_ok eq_refl.

(** The two-level schedule: one group of one tile of one logit. *)
Definition w_bL2 : R :=
  let C1 := ce_H u u 1 1 0 * ce_Q u u ^ 1 * 1 in
  let R1 := INR 1 * ce_a u u eta 1 ^ 1 * ce_b u u eta eta 1 1 0 1 0 1 1 1 in
  let C2 := ce_H u u 1 C1 0 * ce_Q u u ^ 1 * 1 in
  let R2 := INR 1 * ce_a u u eta 1 ^ 1 * ce_b u u eta eta 1 C1 R1 (INR 1) 0 1 1 1 in
  C2 - 1 + R2.

Lemma w_bL2_small : 0 <= w_bL2 <= / 4.
Proof.
  unfold w_bL2; cbv [ce_bL ce_H ce_Ci ce_Q ce_a ce_b ce_Cm ce_Ri]; rewrite w_u, w_eta; simpl pow; simpl INR.
  split; lra.
Qed.

Ltac w_close2 :=
  first [ pose proof w_bL2_small as Hb; unfold w_bL2 in Hb; cbv zeta in Hb |- *; rewrite ?exp_0; lra
        | intros g Hg; destruct Hg as [Hg | []]; subst g; cbn; repeat split; [discriminate | repeat constructor; cbn; lia | lia | lia]
        | intros zy Hi; cbn in Hi; destruct Hi as [<- | []]; cbn [fst snd]; rewrite Rminus_0_r, Rabs_R0;
          split; [apply ff_fmt_0 | lra]
        | cbn; simpl INR; rewrite ln_1; lra
        | w_close ].

Definition ce_lse_error_two_level_witness :=
  ltac:(refine (ce_lse_error_two_level wM w_ex u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_ex_err_neg
                  w_lg w_el (/ 2) 4 w_lg_fmt w_lg_err (tile_sum (mp_a wM)) [[(0, 0)]] [[ [[(0, 0)]] ]]
                  (tile_sum (mp_a wM)) 0 1 1 1 0 1 1 1 0 1 0 0 (- ln (1 - w_bL2))
                  _ _ _ _ _ _ _ _ _ _ _ _ _ _); w_close2).
