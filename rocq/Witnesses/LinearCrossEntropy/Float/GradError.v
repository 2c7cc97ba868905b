(** * Witnesses of LinearCrossEntropy/Float/GradError.v (ojas_ref/verification/proof_audit.py):
    [bf16_fp32] with [tl.exp] the exact [exp] rounded to float32 ([ue = u], [ee = eta],
    Witnesses/Instances.v); one item (one kept token, its target, logit and lse 0, other operand
    1), the accumulation of a product's terms (at most two) float32 additions left to right
    ([tile_sum], [gd = (1 + u) - 1]; exact, [gd = 0], for the generic products), grad_output 1
    exact, the FMA epilogue; [ce_dsum_tree] on [tl.sum]'s tree of one number. *)

From Coq Require Import Reals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision FloatModel.BlockedSum.
From Ojas Require Import LinearCrossEntropy.Float.GradError Witnesses.Instances.
Import ListNotations.
Open Scope R_scope.

Local Notation u := (ff_u (mp_a wM)).
Local Notation eta := (ff_eta (mp_a wM)).

(** The item: logit, lse, exact logit and lse 0, other operand 1, the target, kept. *)
Definition w_z (_ : unit) : R := 0.
Definition w_h (_ : unit) : R := 1.
Definition w_t (_ : unit) : bool := true.

Definition w_X : R := exp (0 + 0 + u * 0 + eta).

Lemma w_ok : forall x : unit, ce_ok unit w_z w_z w_z w_z w_t 0 0 0 x.
Proof. intros x _; unfold w_z; rewrite Rminus_0_r, Rabs_R0; lra. Qed.

Lemma w_ok_all : forall xs x, In x xs -> ce_ok unit w_z w_z w_z w_z w_t 0 0 0 x.
Proof. intros xs x _; apply w_ok. Qed.

Lemma w_exact_sum : forall l, Rabs (rsum l - rsum l) <= 0 * rsum (map Rabs l).
Proof. intros l; rewrite Rminus_diag_eq, Rabs_R0, Rmult_0_l by reflexivity; apply Rle_refl. Qed.

Lemma w_alpha : Rabs (1 - 1) <= 0 * Rabs 1.
Proof. rewrite Rminus_diag_eq, Rabs_R0, Rmult_0_l by reflexivity; apply Rle_refl. Qed.

(** The fp32 accumulation of at most two terms of the format, left to right, within [(1 + u) - 1]. *)
Definition w_dsum : list R -> R := tile_sum (mp_a wM).
Definition w_gd : R := (1 + u) ^ 1 - 1.

Lemma w_gd_nonneg : 0 <= w_gd.
Proof. unfold w_gd; pose proof (ff_u_nonneg (mp_a wM)); simpl; lra. Qed.

Lemma w_tile_dsum : forall {T : Type} (f : T -> R) xs, (forall x, ff_fmt (mp_a wM) (f x)) -> (length xs <= 2)%nat ->
  Rabs (w_dsum (map f xs) - rsum (map f xs)) <= w_gd * rsum (map Rabs (map f xs)).
Proof.
  intros T f xs Hf Hl.
  assert (HF : Forall (ff_fmt (mp_a wM)) (map f xs))
    by (apply Forall_forall; intros y Hy; apply in_map_iff in Hy; destruct Hy as [x [<- _]]; apply Hf).
  pose proof (tile_sum_close (mp_a wM) (map f xs) HF) as H.
  apply (close_mono _ ((1 + u) ^ 1)) in H;
    [exact H | apply abs_sum_nonneg | apply pow_u_mono; rewrite map_length; lia].
Qed.

(** A stored entry times the operand 1 is a number of the storage format, hence of float32. *)
Lemma w_term_fmt : forall iz il x, ff_fmt (mp_a wM) (ce_term wM w_ex unit iz il w_h w_t w_t x).
Proof. intros iz il x; unfold ce_term, ce_g, w_h, w_t; rewrite Rmult_1_r; apply (mp_s_in_a wM), ff_rnd_fmt. Qed.

Lemma w_dsum_ok : forall iz il xs, (length xs <= 2)%nat -> dsum_ok wM w_ex unit iz il w_h w_t w_t w_dsum w_gd xs.
Proof. intros iz il xs Hl; apply w_tile_dsum; [apply w_term_fmt | exact Hl]. Qed.

Lemma w_dsum_ok_cs : forall c, In c [[tt; tt]; [tt]] -> dsum_ok wM w_ex unit w_z w_z w_h w_t w_t w_dsum w_gd c.
Proof. intros c Hc; apply w_dsum_ok; destruct Hc as [<- | [<- | []]]; cbn; lia. Qed.

Definition ce_g_close_witness :=
  ce_g_close wM w_ex u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_ex_err unit w_z w_z w_z w_z w_t w_t 0 0 0 w_X tt
    (Rle_refl 0) (Rle_refl 0) (Rle_refl 0) (Rle_refl w_X) (w_ok tt).

Definition epi_cpu_ok_witness := epi_cpu_ok wM 1.
Definition epi_fma_ok_witness := epi_fma_ok wM 1.
Definition epi_exact_ok_witness := epi_exact_ok wM 1.

(** The generic products: terms [x] equal to their exact values, within bound 0. *)
Lemma w_gen_ok : forall xs, ce_gen_ok R (fun x => x) (fun x => x) (fun _ => 0) xs.
Proof. intros xs x _; rewrite Rminus_diag_eq, Rabs_R0 by reflexivity; apply Rle_refl. Qed.

Definition ce_gen_dw_error_witness :=
  ce_gen_dw_error wM R (fun x => x) (fun x => x) (fun _ => 0) rsum (fun a c => ff_rnd (mp_a wM) (1 * a + c))
    1 1 0 0 [[1; 2]; [3]] (epi_fma_ok wM 1) (Rle_refl 0) w_alpha (Rle_refl 0)
    (fun c _ => w_exact_sum (map (fun x => x) c)) (w_gen_ok _).

Definition ce_gen_dh_error_witness :=
  ce_gen_dh_error wM R (fun x => x) (fun x => x) (fun _ => 0) rsum 1 1 0 0 [1; 2]
    (Rle_refl 0) w_alpha (Rle_refl 0) (w_exact_sum _) (w_gen_ok _).

Definition ce_dw_error_witness :=
  ce_dw_error wM w_ex u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_ex_err unit w_z w_z w_z w_z w_h w_t w_t
    w_dsum (fun a c => ff_rnd (mp_a wM) (1 * a + c)) 1 1 0 w_gd 0 0 0 w_X [[tt; tt]; [tt]]
    (epi_fma_ok wM 1) (Rle_refl 0) w_alpha w_gd_nonneg (Rle_refl 0) (Rle_refl 0) (Rle_refl 0) (Rle_refl w_X)
    w_dsum_ok_cs (w_ok_all _).

Definition ce_dh_error_witness :=
  ce_dh_error wM w_ex u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_ex_err unit w_z w_z w_z w_z w_h w_t w_t
    w_dsum 1 1 0 w_gd 0 0 0 w_X [tt; tt]
    (Rle_refl 0) w_alpha w_gd_nonneg (Rle_refl 0) (Rle_refl 0) (Rle_refl 0) (Rle_refl w_X)
    (w_dsum_ok _ _ [tt; tt] ltac:(cbn; lia)) (w_ok_all _).

Definition ce_dsum_tree_witness :=
  ce_dsum_tree wM w_shape 0 [0] eq_refl (le_n 0) (Forall_cons _ (ff_fmt_0 _) (Forall_nil _)).
