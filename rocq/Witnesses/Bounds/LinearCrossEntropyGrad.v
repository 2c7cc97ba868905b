(** * Witnesses of Bounds/LinearCrossEntropyGrad.v (ojas_ref/verification/proof_audit.py): the
    oracle's coefficients computed in Coq ([vm_compute]) for [bf16_fp32] (fp32 [u = ue = 2^-24],
    [ea = ee = 2^-150], bf16 [us = 2^-8], [es = 2^-134]), [tl.exp] the rounded [exp]
    (Witnesses/Instances.v), [a0 = 1] exact, [n = 1], [x = Ec = 1/1000]; the items of
    Witnesses/LinearCrossEntropy/Float/{GradError,GradPosteriori,SoftcapGradError}.v (one kept
    target item per product, two token chunks for dW), the accumulation of a product's terms (at
    most two) float32 additions left to right (within [(1 + u) - 1 <= gamma u 1]). *)

From Coq Require Import Reals QArith Qreals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.DotError FloatModel.MixedPrecision.
From Ojas Require Import LinearCrossEntropy.Float.GradError LinearCrossEntropy.Float.GradPosteriori.
From Ojas Require Import LinearCrossEntropy.Float.SoftcapError LinearCrossEntropy.Float.SoftcapGradError.
From Ojas Require Import Bounds.Rational Bounds.LinearCrossEntropyGrad Witnesses.Instances.
From Ojas Require Import Witnesses.LinearCrossEntropy.Float.SoftcapError.
From Ojas Require Import Witnesses.LinearCrossEntropy.Float.GradError Witnesses.LinearCrossEntropy.Float.GradPosteriori.
From Ojas Require Import Witnesses.LinearCrossEntropy.Float.SoftcapGradError.
Import ListNotations.
Open Scope R_scope.

Local Notation u := (ff_u (mp_a wM)).
Local Notation eta := (ff_eta (mp_a wM)).

(** ** The model's constants as rationals *)

Definition wg_u : Q := 1 # 16777216.
Definition wg_eta : Q := 1 # 1427247692705959881058285969449495136382746624.
Definition wg_us : Q := 1 # 256.
Definition wg_es : Q := 1 # 21778071482940061661655974875633165533184.
Definition wg_x : Q := 1 # 1000.

Lemma wg_u_R : Q2R wg_u = ff_u (mp_a wM).
Proof. rewrite w_u; unfold Q2R, wg_u; simpl; field. Qed.

Lemma wg_eta_R : Q2R wg_eta = ff_eta (mp_a wM).
Proof. rewrite w_eta; unfold Q2R, wg_eta; simpl; field. Qed.

Lemma wg_us_R : Q2R wg_us = ff_u (mp_s wM).
Proof. change (ff_u (mp_s wM)) with (ff_u bf16); rewrite bf16_u; unfold Q2R, wg_us; simpl; field. Qed.

Lemma wg_es_R : Q2R wg_es = ff_eta (mp_s wM).
Proof.
  change (ff_eta (mp_s wM)) with (/ IZR 21778071482940061661655974875633165533184).
  unfold Q2R, wg_es; simpl; field.
Qed.

Lemma wg_x_R : Q2R wg_x = / 1000.
Proof. unfold Q2R, wg_x; simpl; field. Qed.

Lemma wg_ex : forall y, Rabs (w_ex y - exp y) <= Q2R wg_u * exp y + Q2R wg_eta.
Proof. rewrite wg_u_R, wg_eta_R; exact w_ex_err. Qed.

Lemma wg_ex' : forall y, Rabs (w_ex y - exp y) <= u * exp y + Q2R wg_eta.
Proof. rewrite wg_eta_R; exact w_ex_err. Qed.

Lemma wg_a0 : Rabs (1 - Q2R 1) <= Q2R 0 * Rabs (Q2R 1).
Proof. rewrite Q2R_1, Q2R_0; exact w_alpha. Qed.

(** The fp32 accumulation of at most two terms left to right: within [(1 + u) - 1 <= gamma u 1]. *)
Lemma wg_gd_le : w_gd <= gamma u (N.to_nat 1).
Proof.
  unfold w_gd, gamma; rewrite w_u; simpl pow; simpl INR.
  replace (1 * / 16777216 / (1 - 1 * / 16777216)) with (/ 16777215) by field; lra.
Qed.

Lemma wg_tile_dsum : forall {T : Type} (f : T -> R) xs, (forall x, ff_fmt (mp_a wM) (f x)) -> (length xs <= 2)%nat ->
  Rabs (w_dsum (map f xs) - rsum (map f xs)) <= gamma u (N.to_nat 1) * rsum (map Rabs (map f xs)).
Proof.
  intros T f xs Hf Hl; eapply Rle_trans; [exact (w_tile_dsum f xs Hf Hl) |].
  apply Rmult_le_compat_r; [apply FloatModel.BlockedSum.abs_sum_nonneg | exact wg_gd_le].
Qed.

Lemma wg_dsum_ok_cs : forall c, In c [[tt; tt]; [tt]] ->
  dsum_ok wM w_ex unit w_z w_z w_h w_t w_t w_dsum (gamma u (N.to_nat 1)) c.
Proof. intros c Hc; apply wg_tile_dsum; [apply w_term_fmt | destruct Hc as [<- | [<- | []]]; cbn; lia]. Qed.

Lemma wg_dsum_ok_2 : dsum_ok wM w_ex unit w_z w_z w_h w_t w_t w_dsum (gamma u (N.to_nat 1)) [tt; tt].
Proof. apply wg_tile_dsum; [apply w_term_fmt | cbn; lia]. Qed.

(** ** [ce_grad_q] *)

Definition wg_grad (C : N) : Q * Q * Q * Q :=
  match ce_grad_q wg_u wg_eta wg_us wg_es wg_u wg_eta 1 0 wg_x 1 C with Some b => b | None => (0, 0, 0, 0)%Q end.

Definition wg_grad2 := Eval vm_compute in wg_grad 2.
Definition wg_grad1 := Eval vm_compute in wg_grad 1.

Lemma wg_grad2_eq : ce_grad_q wg_u wg_eta wg_us wg_es wg_u wg_eta 1 0 wg_x 1 2
  = Some (fst (fst (fst wg_grad2)), snd (fst (fst wg_grad2)), snd (fst wg_grad2), snd wg_grad2).
Proof. vm_compute; reflexivity. Qed.

Lemma wg_grad1_eq : ce_grad_q wg_u wg_eta wg_us wg_es wg_u wg_eta 1 0 wg_x 1 1
  = Some (fst (fst (fst wg_grad1)), snd (fst (fst wg_grad1)), snd (fst wg_grad1), snd wg_grad1).
Proof. vm_compute; reflexivity. Qed.

Lemma wg_x_ge : 0 + 0 + u * 0 + eta <= Q2R wg_x.
Proof. rewrite wg_x_R, w_eta; lra. Qed.

Definition ce_grad_q_sound_dw_witness :=
  ce_grad_q_sound_dw wM wg_u wg_eta wg_us wg_es wg_u wg_eta 1 0 wg_x 1 2 wg_u_R wg_eta_R wg_us_R wg_es_R
    _ _ _ _ wg_grad2_eq w_ex wg_ex unit w_z w_z w_z w_z w_h w_t w_t w_dsum (fun a c => ff_rnd (mp_a wM) (1 * a + c))
    1 0 0 0 [[tt; tt]; [tt]] (epi_fma_ok wM 1) wg_a0 (Rle_refl 0) (Rle_refl 0) (Rle_refl 0) wg_x_ge
    wg_dsum_ok_cs (w_ok_all _) eq_refl.

Definition ce_grad_q_sound_dh_witness :=
  ce_grad_q_sound_dh wM wg_u wg_eta wg_us wg_es wg_u wg_eta 1 0 wg_x 1 1 wg_u_R wg_eta_R wg_us_R wg_es_R
    _ _ _ _ wg_grad1_eq w_ex wg_ex unit w_z w_z w_z w_z w_h w_t w_t w_dsum
    1 0 0 0 [tt; tt] wg_a0 (Rle_refl 0) (Rle_refl 0) (Rle_refl 0) wg_x_ge
    wg_dsum_ok_2 (w_ok_all _) eq_refl.

(** ** [ce_gp_q] *)

Definition wg_gp (C : N) : Q * Q * Q * Q :=
  match ce_gp_q wg_u wg_eta wg_us wg_es wg_eta 1 0 1 C with Some b => b | None => (0, 0, 0, 0)%Q end.

Definition wg_gp2 := Eval vm_compute in wg_gp 2.
Definition wg_gp1 := Eval vm_compute in wg_gp 1.

Lemma wg_gp2_eq : ce_gp_q wg_u wg_eta wg_us wg_es wg_eta 1 0 1 2
  = Some (fst (fst (fst wg_gp2)), snd (fst (fst wg_gp2)), snd (fst wg_gp2), snd wg_gp2).
Proof. vm_compute; reflexivity. Qed.

Lemma wg_gp1_eq : ce_gp_q wg_u wg_eta wg_us wg_es wg_eta 1 0 1 1
  = Some (fst (fst (fst wg_gp1)), snd (fst (fst wg_gp1)), snd (fst wg_gp1), snd wg_gp1).
Proof. vm_compute; reflexivity. Qed.

Definition ce_gp_q_sound_dw_witness :=
  ce_gp_q_sound_dw wM wg_u wg_eta wg_us wg_es wg_eta 1 0 1 2 wg_u_R wg_eta_R wg_us_R wg_es_R
    _ _ _ _ wg_gp2_eq w_ex u (ff_u_nonneg _) wg_ex' unit w_z w_z w_z w_z w_h w_t w_t
    w_dsum (fun a c => ff_rnd (mp_a wM) (1 * a + c)) 1 (fun _ => 0) (fun _ => 0) w_X0 [[tt; tt]; [tt]]
    (epi_fma_ok wM 1) wg_a0 wg_dsum_ok_cs (w_gp_ok _) eq_refl.

Definition ce_gp_q_sound_dh_witness :=
  ce_gp_q_sound_dh wM wg_u wg_eta wg_us wg_es wg_eta 1 0 1 1 wg_u_R wg_eta_R wg_us_R wg_es_R
    _ _ _ _ wg_gp1_eq w_ex u (ff_u_nonneg _) wg_ex' unit w_z w_z w_z w_z w_h w_t w_t
    w_dsum 1 (fun _ => 0) (fun _ => 0) w_X0 [tt; tt]
    wg_a0 wg_dsum_ok_2 (w_gp_ok _) eq_refl.

(** ** [sc_grad_q]: the cap [c = 1], the kernel's [tanh] and [z / c] rounded, its chain factor *)

Definition wg_sc (C : N) : Q * Q * Q * Q * Q * Q :=
  match sc_grad_q wg_u wg_eta wg_us wg_es wg_u wg_eta 1 0 wg_x wg_x 1 C with
  | Some b => b | None => (0, 0, 0, 0, 0, 0)%Q end.

Definition wg_sc2 := Eval vm_compute in wg_sc 2.
Definition wg_sc1 := Eval vm_compute in wg_sc 1.

Lemma wg_sc2_eq : sc_grad_q wg_u wg_eta wg_us wg_es wg_u wg_eta 1 0 wg_x wg_x 1 2
  = Some (fst (fst (fst (fst (fst wg_sc2)))), snd (fst (fst (fst (fst wg_sc2)))), snd (fst (fst (fst wg_sc2))),
          snd (fst (fst wg_sc2)), snd (fst wg_sc2), snd wg_sc2).
Proof. vm_compute; reflexivity. Qed.

Lemma wg_sc1_eq : sc_grad_q wg_u wg_eta wg_us wg_es wg_u wg_eta 1 0 wg_x wg_x 1 1
  = Some (fst (fst (fst (fst (fst wg_sc1)))), snd (fst (fst (fst (fst wg_sc1)))), snd (fst (fst (fst wg_sc1))),
          snd (fst (fst wg_sc1)), snd (fst wg_sc1), snd wg_sc1).
Proof. vm_compute; reflexivity. Qed.

(** The capped logit's error [sc_delta] and the chain factor's [sc_chain_bound]: a few [u]. *)
Lemma wg_sc_x : sc_delta u eta 1 u eta 0 + 0 + u * 0 + eta <= Q2R wg_x.
Proof. rewrite wg_x_R; unfold sc_delta; rewrite w_u, w_eta; lra. Qed.

Lemma wg_sc_Ec : sc_chain_bound u eta 1 u eta (sc_delta u eta 1 u eta 0) <= Q2R wg_x.
Proof. rewrite wg_x_R; unfold sc_chain_bound, sc_delta; cbv zeta; rewrite w_u, w_eta; simpl pow; lra. Qed.

Lemma wg_sc_dsum_ok : forall xs, (length xs <= 2)%nat ->
  ce_gen_dsum_ok unit (sc_term wM w_ex 1 w_th w_cf unit w_z w_z w_h w_t w_t) w_dsum (gamma u (N.to_nat 1)) xs.
Proof. intros xs Hl; apply wg_tile_dsum; [apply w_sc_term_fmt | exact Hl]. Qed.

Definition sc_grad_q_sound_dw_witness :=
  sc_grad_q_sound_dw wM wg_u wg_eta wg_us wg_es wg_u wg_eta 1 0 wg_x wg_x 1 2 wg_u_R wg_eta_R wg_us_R wg_es_R
    _ _ _ _ _ _ wg_sc2_eq w_ex wg_ex 1 Rlt_0_1 w_th u eta (ff_u_nonneg _) w_th_err
    w_dv u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_dv_err w_cf w_cf_ok
    unit w_z w_z w_z w_z w_h w_t w_t w_dsum (fun a c => ff_rnd (mp_a wM) (1 * a + c)) 1 0 0 0 [[tt; tt]; [tt]]
    (epi_fma_ok wM 1) wg_a0 wg_sc_x wg_sc_Ec
    (fun ch Hc => wg_sc_dsum_ok ch ltac:(destruct Hc as [<- | [<- | []]]; cbn; lia)) (w_sc_ok _) eq_refl.

Definition sc_grad_q_sound_dh_witness :=
  sc_grad_q_sound_dh wM wg_u wg_eta wg_us wg_es wg_u wg_eta 1 0 wg_x wg_x 1 1 wg_u_R wg_eta_R wg_us_R wg_es_R
    _ _ _ _ _ _ wg_sc1_eq w_ex wg_ex 1 Rlt_0_1 w_th u eta (ff_u_nonneg _) w_th_err
    w_dv u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_dv_err w_cf w_cf_ok
    unit w_z w_z w_z w_z w_h w_t w_t w_dsum 1 0 0 0 [tt; tt]
    wg_a0 wg_sc_x wg_sc_Ec (wg_sc_dsum_ok [tt; tt] ltac:(cbn; lia)) (w_sc_ok _) eq_refl.
