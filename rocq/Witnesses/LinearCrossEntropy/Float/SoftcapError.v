(** * Witnesses of LinearCrossEntropy/Float/SoftcapError.v (ojas_ref/verification/proof_audit.py):
    the instances of Witnesses/LinearCrossEntropy/Float/LseLossError.v, the cap [c = 1], the
    kernel's [tanh] and [z / c] the exact ones rounded to float32. *)

From Coq Require Import Reals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision FloatModel.BlockedSum LinearCrossEntropy.Float.LseLossError.
From Ojas Require Import LinearCrossEntropy.Float.SoftcapError Bounds.Rational Bounds.Softmax Bounds.LinearCrossEntropy Bounds.LinearCrossEntropyGrad Witnesses.Instances Witnesses.LinearCrossEntropy.Float.LseLossError.
Import ListNotations.
Open Scope R_scope.

Local Notation u := (ff_u (mp_a wM)).
Local Notation eta := (ff_eta (mp_a wM)).

Definition w_th (r : R) : R := ff_rnd (mp_a wM) (tanh (r / 1)).

Lemma w_th_err : forall r, ff_fmt (mp_a wM) r -> Rabs (w_th r - tanh (r / 1)) <= u * Rabs (tanh (r / 1)) + eta.
Proof. intros r _; apply ff_abs. Qed.

Definition w_dv (z : R) : R := ff_rnd (mp_a wM) (z / 1).

Lemma w_dv_err : forall z, ff_fmt (mp_a wM) z -> Rabs (w_dv z - z / 1) <= u * Rabs (z / 1) + eta.
Proof. intros z _; apply ff_abs. Qed.

Lemma w_abs00 : Rabs (0 - 0) <= 0.
Proof. rewrite Rminus_0_r, Rabs_R0; lra. Qed.

Definition softcap_lipschitz_witness := softcap_lipschitz 1 0 0 Rlt_0_1.

Definition sc_logit_error_witness :=
  sc_logit_error wM 1 Rlt_0_1 w_th u eta (ff_u_nonneg _) w_th_err 0 0 0 (ff_fmt_0 _) w_abs00.

Definition ce_loss_error_softcap_witness :=
  ce_loss_error_softcap wM 1 Rlt_0_1 w_th u eta (ff_u_nonneg _) w_th_err 0 0 0 0 0 0
    (ff_fmt_0 _) (ff_fmt_0 _) w_abs00 w_abs00.

Lemma w_tanh_0 : tanh 0 = 0.
Proof. unfold tanh, sinh; rewrite Ropp_0, exp_0; unfold Rdiv; ring. Qed.

Lemma w_sc_tanh : Rabs (0 - 1 * tanh (0 / 1)) <= 0.
Proof. replace (0 / 1) with 0 by (unfold Rdiv; ring); rewrite w_tanh_0, Rmult_0_r; exact w_abs00. Qed.

Definition sc_chain_error_witness :=
  sc_chain_error wM 1 Rlt_0_1 w_dv u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_dv_err 0 0 0
    (ff_rnd (mp_a wM) (1 - ff_rnd (mp_a wM) (w_dv 0 * w_dv 0))) (ff_fmt_0 _) w_sc_tanh (or_introl eq_refl).

(** The capped logits lie in [[-Zmax, Zmax]], [Zmax] about 1: [exp (2 u Zmax) <= 1 + 1/1000]. *)
Lemma w_sc_XK : exp (u * (2 * sc_zmax u eta 1 u eta)) <= 1 + / 1000.
Proof.
  assert (Hx : u * (2 * sc_zmax u eta 1 u eta) <= / 2000) by (unfold sc_zmax; rewrite w_u, w_eta; lra).
  eapply Rle_trans; [apply exp_le_inv_one_minus; lra |].
  apply Rle_trans with (/ (1 - / 2000)); [apply Rinv_le_contravar; lra | lra].
Qed.

Definition w_bLs : R := ce_bL u u eta eta (1 + / 1000) 0 1 1 1.

Lemma w_bLs_small : 0 <= w_bLs <= / 4.
Proof.
  unfold w_bLs; cbv [ce_bL ce_H ce_Ci ce_Q ce_a ce_b ce_Cm ce_Ri]; rewrite w_u, w_eta; simpl pow; simpl INR.
  split; lra.
Qed.

Lemma w_sc_row : forall ry, In ry (concat [[(0, 0)]]) -> ff_fmt (mp_a wM) (fst ry) /\ Rabs (fst ry - snd ry) <= 0.
Proof. intros ry Hi; destruct (w_row_ok ry Hi) as [F [_ D]]; split; assumption. Qed.

Ltac w_sc := first [ apply w_sc_XK | apply w_sc_row
                   | pose proof w_bLs_small; unfold w_bLs in *; rewrite ?exp_0; lra | w_close ].

Definition ce_lse_error_softcap_witness :=
  ltac:(refine (ce_lse_error_softcap wM 1 Rlt_0_1 w_th u eta (ff_u_nonneg _) w_th_err
                  w_ex u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_ex_err_neg
                  w_lg w_el (/ 2) 4 w_lg_fmt w_lg_err (0, 0) [[(0, 0)]] (tile_sum (mp_a wM)) 0 1 1 1
                  0 (1 + / 1000) 0 (- ln (1 - w_bLs)) _ _ _ _ _ _ _ _ _ _ _ _); w_sc).

Definition w_bL2s : R :=
  let C1 := ce_H u u (1 + / 1000) 1 0 * ce_Q u u ^ 1 * (1 + / 1000) in
  let R1 := INR 1 * ce_a u u eta (1 + / 1000) ^ 1 * ce_b u u eta eta (1 + / 1000) 1 0 1 0 1 1 1 in
  let C2 := ce_H u u (1 + / 1000) C1 0 * ce_Q u u ^ 1 * (1 + / 1000) in
  let R2 := INR 1 * ce_a u u eta (1 + / 1000) ^ 1 * ce_b u u eta eta (1 + / 1000) C1 R1 (INR 1) 0 1 1 1 in
  C2 - 1 + R2.

Lemma w_bL2s_small : 0 <= w_bL2s <= / 4.
Proof.
  unfold w_bL2s; cbv [ce_bL ce_H ce_Ci ce_Q ce_a ce_b ce_Cm ce_Ri]; rewrite w_u, w_eta; simpl pow; simpl INR.
  split; lra.
Qed.

Definition ce_lse_error_two_level_softcap_witness :=
  ltac:(refine (ce_lse_error_two_level_softcap wM 1 Rlt_0_1 w_th u eta (ff_u_nonneg _) w_th_err
                  w_ex u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_ex_err_neg
                  w_lg w_el (/ 2) 4 w_lg_fmt w_lg_err (tile_sum (mp_a wM)) [[(0, 0)]] [[ [[(0, 0)]] ]]
                  (tile_sum (mp_a wM)) 0 1 1 1 0 1 1 1 0 (1 + / 1000) 0 (- ln (1 - w_bL2s))
                  _ _ _ _ _ _ _ _ _ _ _ _ _ _);
        first [ apply w_sc_XK | intros ry Hi; apply w_sc_row; exact Hi
              | pose proof w_bL2s_small as Hb; unfold w_bL2s in Hb; cbv zeta in Hb |- *; rewrite ?exp_0; lra
              | w_close2 ]).
