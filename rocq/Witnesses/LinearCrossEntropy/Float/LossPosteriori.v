(** * Witnesses of LinearCrossEntropy/Float/LossPosteriori.v (ojas_ref/verification/proof_audit.py):
    the instances of Witnesses/LinearCrossEntropy/Float/LseLossError.v, the target the row's one logit. *)

From Coq Require Import Reals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision FloatModel.BlockedSum LinearCrossEntropy.Float.LseLossError.
From Ojas Require Import LinearCrossEntropy.Float.LossPosteriori Witnesses.Instances Witnesses.LinearCrossEntropy.Float.LseLossError.
Import ListNotations.
Open Scope R_scope.

Local Notation u := (ff_u (mp_a wM)).
Local Notation eta := (ff_eta (mp_a wM)).

Lemma w_wterm_0 : rsum (map (ce_wterm 0 0) [(0, 0)]) <= 0 * ce_sum_exp snd [(0, 0)].
Proof.
  unfold ce_wterm; cbn [map fst snd]; rewrite !Rminus_0_r, Rabs_R0, exp_0, Rminus_diag_eq, Rmult_0_r by reflexivity.
  unfold rsum; simpl; lra.
Qed.

Lemma w_neg_ln_1 : - ln (1 - 0) <= 0.
Proof. rewrite Rminus_0_r, ln_1; lra. Qed.

Lemma w_row_ok2 : forall zy, In zy (concat [[(0, 0)]]) -> ff_fmt (mp_a wM) (fst zy) /\ Rabs (fst zy) <= 0.
Proof. intros zy Hi; destruct (w_row_ok zy Hi) as [F [Z _]]; split; assumption. Qed.

Definition ce_shift_lse_close_witness :=
  ce_shift_lse_close [(0, 0)] 0 0 0 0 ltac:(discriminate) ltac:(lra) w_wterm_0 w_neg_ln_1.

Definition ce_loss_posteriori_witness :=
  ltac:(refine (ce_loss_posteriori wM w_ex u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_ex_err_neg
                  w_lg w_el (/ 2) 4 w_lg_fmt w_lg_err (0, 0) [[(0, 0)]] (tile_sum (mp_a wM)) 0 1 1 1
                  0 1 0 (- ln (1 - w_bL)) ((1 + u) ^ 0) (ce_Q u u ^ 1) (ce_a u u eta 1 ^ 1) 0 0 0 0
                  _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _);
        first [ apply w_row_ok2 | apply w_wterm_0 | apply w_neg_ln_1 | lra | w_close ]).

Definition ce_lse_posteriori_witness :=
  ltac:(refine (ce_lse_posteriori wM w_ex u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_ex_err_neg
                  w_lg w_el (/ 2) 4 w_lg_fmt w_lg_err (0, 0) [[(0, 0)]] (tile_sum (mp_a wM)) 0 1 1 1
                  0 1 0 (- ln (1 - w_bL)) ((1 + u) ^ 0) (ce_Q u u ^ 1) (ce_a u u eta 1 ^ 1) 0 0
                  _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _);
        first [ apply w_row_ok2 | apply w_wterm_0 | apply w_neg_ln_1 | lra | w_close ]).
