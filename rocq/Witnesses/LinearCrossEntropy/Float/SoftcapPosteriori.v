(** * Witnesses of LinearCrossEntropy/Float/SoftcapPosteriori.v (ojas_ref/verification/proof_audit.py):
    the instances of Witnesses/LinearCrossEntropy/Float/SoftcapError.v (the cap [c = 1], the
    kernel's [tanh] the exact one rounded to float32, [tl.exp] and [tl.log] the rounded [exp] and
    [ln], [tl.sum] left to right) on one tile of two raw logits [0], the target the first: each raw
    error bound [dr = 0], each capped bound [dz = sc_delta u eta 1 u eta 0] (about [2^-23]), so that
    the other logit's weighted term [e^(2 dz) - 1] is charged: [Eb = 1/1000], not 0. *)

From Coq Require Import Reals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision FloatModel.BlockedSum LinearCrossEntropy.Float.LseLossError.
From Ojas Require Import LinearCrossEntropy.Float.SoftcapError LinearCrossEntropy.Float.SoftcapPosteriori Bounds.Rational.
From Ojas Require Import Witnesses.Instances Witnesses.LinearCrossEntropy.Float.LseLossError.
From Ojas Require Import Witnesses.LinearCrossEntropy.Float.SoftcapError.
Import ListNotations.
Open Scope R_scope.

Local Notation u := (ff_u (mp_a wM)).
Local Notation eta := (ff_eta (mp_a wM)).

Definition w_row2 : list (list (R * R)) := [[(0, 0); (0, 0)]].
Definition w_dr (_ : R * R) : R := 0.
Definition w_dz (_ : R * R) : R := sc_delta u eta 1 u eta 0.

Lemma w_dz_small : 0 <= sc_delta u eta 1 u eta 0 <= / 4000.
Proof. unfold sc_delta; rewrite w_u, w_eta; split; lra. Qed.

Lemma w_sc_dr2 : forall ry, In ry (concat w_row2) -> ff_fmt (mp_a wM) (fst ry) /\ Rabs (fst ry - snd ry) <= w_dr ry.
Proof.
  intros ry Hi; cbn in Hi; unfold w_dr.
  destruct Hi as [<- | [<- | []]]; cbn [fst snd]; rewrite Rminus_0_r, Rabs_R0; split; (apply ff_fmt_0 || lra).
Qed.

Lemma w_sc_dz2 : forall ry, In ry (concat w_row2) -> sc_delta u eta 1 u eta (w_dr ry) <= w_dz ry.
Proof. intros ry _; apply Rle_refl. Qed.

(** Two logits, the target the first: the other one's term [e^(2 dz) - 1], at most [2 / 1000]. *)
Lemma w_sc_wsum2 : rsum (map (sc_wbound 1 (w_dz (0, 0)) w_dz) (concat w_row2)) - sc_wbound 1 (w_dz (0, 0)) w_dz (0, 0)
                   <= / 1000 * rsum (map (fun ry => exp (1 * tanh (snd ry / 1))) (concat w_row2)).
Proof.
  unfold sc_wbound, w_dz, w_row2; cbn [concat app map fst snd]; rewrite !rsum_cons, rsum_nil.
  replace (0 / 1) with 0 by (unfold Rdiv; ring); rewrite w_tanh_0, Rmult_0_r, exp_0.
  pose proof w_dz_small as [H0 H1].
  set (d := sc_delta u eta 1 u eta 0) in *.
  assert (He : exp (d + d) <= / (1 - (d + d))) by (apply exp_le_inv_one_minus; lra).
  assert (Hi : / (1 - (d + d)) <= 1 + / 1000).
  { apply Rle_trans with (/ (1 - / 2000)); [apply Rinv_le_contravar; lra | lra]. }
  lra.
Qed.

Definition w_bL2s : R := ce_bL u u eta eta (1 + / 1000) 1 2 1 2.

Lemma w_bL2s_small : 0 <= w_bL2s <= / 4.
Proof.
  unfold w_bL2s; cbv [ce_bL ce_H ce_Ci ce_Q ce_a ce_b ce_Cm ce_Ri]; rewrite w_u, w_eta; simpl pow; simpl INR.
  split; lra.
Qed.

Lemma w_bL2s_p : ce_bL_p u u eta eta (1 + / 1000) ((1 + u) ^ 1) (ce_Q u u ^ 1) (ce_a u u eta (1 + / 1000) ^ 1) 2 1 2
                 = w_bL2s.
Proof. reflexivity. Qed.

Lemma w_ln2 : (1 + w_bL2s) * exp (ln (INR 2)) <= 4.
Proof. rewrite exp_ln by (simpl INR; lra); pose proof w_bL2s_small; simpl INR; nra. Qed.

Definition ce_loss_posteriori_softcap_witness :=
  ltac:(refine (ce_loss_posteriori_softcap wM 1 Rlt_0_1 w_th u eta (ff_u_nonneg _) w_th_err
                  w_ex u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_ex_err_neg
                  w_lg w_el (/ 2) 4 w_lg_fmt w_lg_err (0, 0) w_row2 (tile_sum (mp_a wM)) 1 2 1 2
                  (1 + / 1000) (ln (INR 2)) (- ln (1 - w_bL2s)) ((1 + u) ^ 1) (ce_Q u u ^ 1)
                  (ce_a u u eta (1 + / 1000) ^ 1) 0 0 w_dr w_dz (/ 1000) (- ln (1 - / 1000))
                  _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _);
        rewrite ?w_bL2s_p;
        first [ apply w_sc_dr2 | apply w_sc_dz2 | apply w_sc_wsum2 | apply w_sc_XK | apply w_ln2
              | apply Rle_refl | left; reflexivity | apply sum_ok_tile_sum
              | repeat constructor; cbn; lia | cbn; lia
              | pose proof w_bL2s_small; lra ]).
