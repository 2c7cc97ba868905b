(** * Witnesses of LinearCrossEntropy/Float/SoftcapGradError.v (ojas_ref/verification/proof_audit.py):
    [bf16_fp32], [tl.exp] the rounded [exp] (Witnesses/Instances.v), the cap [c = 1], the kernel's
    [tanh] and [z / c] the exact ones rounded to float32
    (Witnesses/LinearCrossEntropy/Float/SoftcapError.v), the chain factor [rnd (1 - rnd (d * d))];
    one item (one kept token, its target, raw logit and lse 0, other operand 1), the accumulation of
    a product's terms (at most two) float32 additions left to right, grad_output 1 exact, the FMA
    epilogue. *)

From Coq Require Import Reals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision LinearCrossEntropy.Float.SoftcapError.
From Ojas Require Import LinearCrossEntropy.Float.GradError LinearCrossEntropy.Float.SoftcapGradError.
From Ojas Require Import Witnesses.Instances Witnesses.LinearCrossEntropy.Float.SoftcapError.
From Ojas Require Import Witnesses.LinearCrossEntropy.Float.GradError.
Import ListNotations.
Open Scope R_scope.

Local Notation u := (ff_u (mp_a wM)).
Local Notation eta := (ff_eta (mp_a wM)).

(** The chain factor [1 - tanh^2] as the kernel computes it. *)
Definition w_cf (z : R) : R := ff_rnd (mp_a wM) (1 - ff_rnd (mp_a wM) (w_dv z * w_dv z)).

Lemma w_cf_ok : forall z, sc_chain_ok wM w_dv z (w_cf z).
Proof. intros z; left; reflexivity. Qed.

(** The capped logit of the raw logit 0 is 0. *)
Lemma w_sc_z_0 : sc_z wM 1 w_th 0 = 0.
Proof.
  unfold sc_z, w_th; replace (0 / 1) with 0 by (unfold Rdiv; ring); rewrite w_tanh_0.
  rewrite (ff_rnd_id _ 0 (ff_fmt_0 _)), Rmult_0_r; apply ff_rnd_id, ff_fmt_0.
Qed.

Lemma w_sc_ok : forall xs x, In x xs -> sc_ok wM 1 w_th unit w_z w_z w_z w_z w_t 0 0 0 x.
Proof.
  intros xs x _ _; unfold w_z; rewrite w_sc_z_0, !Rminus_0_r, Rabs_R0.
  split; [apply ff_fmt_0 | lra].
Qed.

Lemma w_sc_term_fmt : forall x, ff_fmt (mp_a wM) (sc_term wM w_ex 1 w_th w_cf unit w_z w_z w_h w_t w_t x).
Proof. intros x; unfold sc_term, sc_g, sc_gent, w_h, w_t; rewrite Rmult_1_r; apply (mp_s_in_a wM), ff_rnd_fmt. Qed.

Lemma w_sc_dsum_ok : forall xs, (length xs <= 2)%nat ->
  ce_gen_dsum_ok unit (sc_term wM w_ex 1 w_th w_cf unit w_z w_z w_h w_t w_t) w_dsum w_gd xs.
Proof. intros xs Hl; apply w_tile_dsum; [apply w_sc_term_fmt | exact Hl]. Qed.

Definition w_Xs : R := exp (sc_delta u eta 1 u eta 0 + 0 + u * 0 + eta).

Definition sc_g_close_witness :=
  sc_g_close wM w_ex u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_ex_err 1 Rlt_0_1 w_th u eta (ff_u_nonneg _) w_th_err
    w_dv u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_dv_err w_cf w_cf_ok unit w_z w_z w_z w_z w_t w_t 0 0 0 w_Xs tt
    (Rle_refl w_Xs) (w_sc_ok [tt] tt (or_introl eq_refl)).

Definition sc_dw_error_witness :=
  sc_dw_error wM w_ex u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_ex_err 1 Rlt_0_1 w_th u eta (ff_u_nonneg _) w_th_err
    w_dv u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_dv_err w_cf w_cf_ok unit w_z w_z w_z w_z w_h w_t w_t
    w_dsum (fun a c => ff_rnd (mp_a wM) (1 * a + c)) 1 1 0 w_gd 0 0 0 w_Xs [[tt; tt]; [tt]]
    (epi_fma_ok wM 1) (Rle_refl 0) w_alpha w_gd_nonneg (Rle_refl w_Xs)
    (fun ch Hc => w_sc_dsum_ok ch ltac:(destruct Hc as [<- | [<- | []]]; cbn; lia)) (w_sc_ok _).

Definition sc_dh_error_witness :=
  sc_dh_error wM w_ex u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_ex_err 1 Rlt_0_1 w_th u eta (ff_u_nonneg _) w_th_err
    w_dv u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_dv_err w_cf w_cf_ok unit w_z w_z w_z w_z w_h w_t w_t
    w_dsum 1 1 0 w_gd 0 0 0 w_Xs [tt; tt]
    (Rle_refl 0) w_alpha w_gd_nonneg (Rle_refl w_Xs) (w_sc_dsum_ok [tt; tt] ltac:(cbn; lia)) (w_sc_ok _).
