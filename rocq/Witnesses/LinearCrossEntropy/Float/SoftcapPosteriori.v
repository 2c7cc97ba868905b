(** * Witnesses of LinearCrossEntropy/Float/SoftcapPosteriori.v (ojas_ref/verification/proof_audit.py):
    the instances of Witnesses/LinearCrossEntropy/Float/SoftcapError.v (the cap [c = 1], the
    kernel's [tanh] the exact one rounded to float32) and of
    Witnesses/LinearCrossEntropy/Float/LossPosteriori.v, the target the row's one raw logit [0],
    its raw error bound [dr = 0] and its capped error bound [dz = sc_delta u eta 1 u eta 0]. *)

From Coq Require Import Reals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision FloatModel.BlockedSum LinearCrossEntropy.Float.LseLossError.
From Ojas Require Import LinearCrossEntropy.Float.SoftcapError LinearCrossEntropy.Float.SoftcapPosteriori.
From Ojas Require Import Witnesses.Instances Witnesses.LinearCrossEntropy.Float.LseLossError.
From Ojas Require Import Witnesses.LinearCrossEntropy.Float.SoftcapError Witnesses.LinearCrossEntropy.Float.LossPosteriori.
Import ListNotations.
Open Scope R_scope.

Local Notation u := (ff_u (mp_a wM)).
Local Notation eta := (ff_eta (mp_a wM)).

Definition w_dr (_ : R * R) : R := 0.
Definition w_dz (_ : R * R) : R := sc_delta u eta 1 u eta 0.

Lemma w_sc_dr : forall ry, In ry (concat [[(0, 0)]]) -> ff_fmt (mp_a wM) (fst ry) /\ Rabs (fst ry - snd ry) <= w_dr ry.
Proof. exact w_sc_row. Qed.

Lemma w_sc_dz : forall ry, In ry (concat [[(0, 0)]]) -> sc_delta u eta 1 u eta (w_dr ry) <= w_dz ry.
Proof. intros ry _; apply Rle_refl. Qed.

(** One logit, the target: the weighted sum less the target's term is 0. *)
Lemma w_sc_wsum : rsum (map (sc_wbound 1 (w_dz (0, 0)) w_dz) (concat [[(0, 0)]])) - sc_wbound 1 (w_dz (0, 0)) w_dz (0, 0)
                  <= 0 * rsum (map (fun ry => exp (1 * tanh (snd ry / 1))) (concat [[(0, 0)]])).
Proof. cbn [concat app map]; rewrite rsum_cons, rsum_nil; lra. Qed.

Lemma w_bLs_p : ce_bL_p u u eta eta (1 + / 1000) ((1 + u) ^ 0) (ce_Q u u ^ 1) (ce_a u u eta (1 + / 1000) ^ 1) 1 1 1
                = w_bLs.
Proof. reflexivity. Qed.

Definition ce_loss_posteriori_softcap_witness :=
  ltac:(refine (ce_loss_posteriori_softcap wM 1 Rlt_0_1 w_th u eta (ff_u_nonneg _) w_th_err
                  w_ex u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_ex_err_neg
                  w_lg w_el (/ 2) 4 w_lg_fmt w_lg_err (0, 0) [[(0, 0)]] (tile_sum (mp_a wM)) 0 1 1 1
                  (1 + / 1000) 0 (- ln (1 - w_bLs)) ((1 + u) ^ 0) (ce_Q u u ^ 1) (ce_a u u eta (1 + / 1000) ^ 1)
                  0 0 w_dr w_dz 0 0 _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _);
        first [ apply w_sc_dr | apply w_sc_dz | apply w_sc_wsum | apply w_neg_ln_1 | apply w_sc_XK
              | rewrite w_bLs_p; pose proof w_bLs_small; unfold w_bLs in *; rewrite ?exp_0; lra
              | lra | w_close ]).
