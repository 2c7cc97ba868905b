(** * Witnesses of Attention/Float/OnlineSoftmaxTile.v (ojas_ref/verification/proof_audit.py):
    [bf16_fp32] ([fp16_fp32] for its own corollary); one tile of one score [0] (of value [1]) at
    the max [0] ([K = 0], [B = N = Tt = 1]); [run_inv] at the denominator's instance of
    [l_fold_inv] ([yf = tile_l], [Yf = Tf = exact_l]); the masked-tile lemmas on the kernel's
    start and one key of the unit type, masked or visible.  Every premise proved together. *)

From Coq Require Import Reals List Lra Lia.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision FloatModel.BlockedSum.
From Ojas Require Import Attention.Float.OnlineSoftmaxError Attention.Float.OnlineSoftmaxTile.
From Ojas Require Import Witnesses.Instances Witnesses.Bounds.Attention Witnesses.Attention.Float.ForwardPosteriori.
Import ListNotations.
Open Scope R_scope.

Local Notation u := (ff_u (mp_a wM)).
Local Notation ee := (mp_eta_e wM).

(** ** One tile *)

Lemma wt_ss : forall s, In s [0] -> ff_fmt (mp_a wM) s /\ s <= 0 /\ 0 - s <= 0.
Proof. intros s [<- | []]; split; [apply ff_fmt_0 | lra]. Qed.

Definition tile_l_inv_witness := tile_l_inv wM 0 0 [0] (Rle_refl 0) (ff_fmt_0 _) wt_ss.

Lemma wt_svs : forall sv, In sv [(0, 1)] -> ff_fmt (mp_a wM) (fst sv) /\ fst sv <= 0 /\ 0 - fst sv <= 0.
Proof. intros sv [<- | []]; cbn [fst]; split; [apply ff_fmt_0 | lra]. Qed.

Definition tile_acc_inv_witness := tile_acc_inv wM 0 0 [(0, 1)] (Rle_refl 0) (ff_fmt_0 _) wt_svs.

(** ** The fold, at the denominator's instance *)

Lemma wt_H : 1 <= H_l wM 0 1.
Proof.
  unfold H_l; pose proof (tile_E_ge_1 wM 0 (Rle_refl 0)); simpl pow; lra.
Qed.

Lemma wt_Ry : 0 <= Ry_l wM 1.
Proof. unfold Ry_l; simpl pow; simpl INR; pose proof (mp_eta_e_nonneg wM); lra. Qed.

Lemma wt_yf : forall m tl, ff_fmt (mp_a wM) (tile_l wM m tl).
Proof. intros; unfold tile_l; apply fmt_tile_sum. Qed.

Lemma wt_tile_ok : forall m tl, ff_fmt (mp_a wM) m -> (length tl <= 1)%nat ->
  (forall k, In k tl -> True /\ ff_fmt (mp_a wM) k /\ k <= m /\ m - k <= 0) ->
  inv (H_l wM 0 1) (Ry_l wM 1) (tile_l wM m tl) (exact_l m tl) (exact_l m tl).
Proof.
  intros m tl Fm Hl Htl.
  pose proof (ff_u_nonneg (mp_a wM)) as Hu; pose proof (mp_eta_e_nonneg wM) as Hee.
  pose proof (tile_E_ge_1 wM 0 (Rle_refl 0)) as HE.
  eapply inv_mono; [apply exact_l_nonneg | | | apply (tile_l_inv wM m 0 tl (Rle_refl 0) Fm (fun q Hq => proj2 (Htl q Hq)))].
  - unfold H_l; apply Rmult_le_compat_r; [lra |]; apply Rle_pow; [lra | lia].
  - unfold Ry_l; apply Rmult_le_compat.
    + apply pow_le; lra.
    + apply Rmult_le_pos; [apply pos_INR | exact Hee].
    + apply Rle_pow; [lra | lia].
    + apply Rmult_le_compat_r; [exact Hee | apply le_INR, Hl].
Qed.

Lemma wt_Y_abs : forall m tl, Rabs (exact_l m tl) <= exact_l m tl.
Proof. intros; rewrite Rabs_right by (apply Rle_ge, exact_l_nonneg); lra. Qed.

Lemma wt_mrun : mrun R (fun s => s) 0 [[0]] = 0.
Proof. cbn [mrun]; unfold tmax; simpl; apply Rmax_left; lra. Qed.

Lemma wt_scores : forall q, In q (concat [[0]]) ->
  True /\ ff_fmt (mp_a wM) q /\ mrun R (fun s => s) 0 [[0]] - q <= 0.
Proof. intros q [<- | []]; rewrite wt_mrun; split; [exact I | split; [apply ff_fmt_0 | lra]]. Qed.

Lemma wt_mrun_K : mrun R (fun s => s) 0 [[0]] - 0 <= 0.
Proof. rewrite wt_mrun; lra. Qed.

Lemma wt_inv0 : inv (Gk wM (H_l wM 0 1) 0 0 0) (Rk wM 0 (H_l wM 0 1) (Ry_l wM 1) (INR 1) 1 0) 0 (exact_l 0 []) (exact_l 0 []).
Proof.
  unfold inv, exact_l; cbn [map]; unfold rsum; cbn [fold_right].
  rewrite Rminus_0_r, Rabs_R0, Rmult_0_r, Rplus_0_l; apply Rk_nonneg; [exact wt_H | exact wt_Ry | apply pos_INR].
Qed.

Definition run_inv_witness :=
  run_inv wM R (fun s => s) (fun _ => True) (tile_l wM) exact_l exact_l 0 (H_l wM 0 1) (Ry_l wM 1) (INR 1) 0 1 1 1
    wt_H wt_Ry (pos_INR 1) wt_yf wt_tile_ok wt_Y_abs exact_l_resc exact_l_resc exact_l_app exact_l_app
    (exact_l_bound 1)
    [[0]] 0 0 0 [] (ff_fmt_0 _) (ff_fmt_0 _) (Rle_refl 0) (fun q (H : In q []) => False_ind _ H)
    wt_scores ltac:(repeat constructor) (le_n 1) (le_n 1) wt_mrun_K wt_inv0.

Lemma wt_l_scores : forall s, In s (concat [[0]]) -> ff_fmt (mp_a wM) s /\ m_run 0 [[0]] - s <= 0.
Proof. intros s Hs; destruct (wt_scores s Hs) as [_ H]; exact H. Qed.

Definition l_fold_inv_witness :=
  l_fold_inv wM 0 0 1 1 1 [[0]] (Rle_refl 0) (ff_fmt_0 _) (le_n 1) wt_l_scores ltac:(repeat constructor)
    (le_n 1) (le_n 1) wt_mrun_K.

Lemma wt_acc_K : acc_m_run 0 wp_tiles - 0 <= 0.
Proof. rewrite wp_mrun; lra. Qed.

Definition acc_fold_inv_witness :=
  acc_fold_inv wM 0 0 1 1 1 1 wp_tiles (Rle_refl 0) Rle_0_1 (ff_fmt_0 _) (le_n 1) wp_items
    ltac:(repeat constructor) (le_n 1) (le_n 1) wt_acc_K.

Definition online_softmax_output_error_witness :=
  online_softmax_output_error wM 0 0 1 1 1 1 wp_tiles (Rle_refl 0) Rlt_0_1 (le_n 1) wp_m0 wp_items
    ltac:(repeat constructor) (le_n 1) (le_n 1) wp_bL_lt_1.

(** ** The masked tiles: one key of the unit type, masked ([vis = false]) or visible *)

Lemma wt_start_ok : forall (M : MixedModel) d, kstate_ok M (kernel_start d).
Proof.
  intros M d; unfold kstate_ok, kernel_start; cbn [ks_l ks_acc ks_m].
  split; [apply ff_fmt_0 | split].
  - induction d as [| d IH]; simpl; constructor; [apply ff_fmt_0 | exact IH].
  - intros _; split; [reflexivity |]; induction d as [| d IH]; simpl; constructor; [reflexivity | exact IH].
Qed.

Definition masked_tile_step_id_witness :=
  masked_tile_step_id wM unit (fun _ => 0) (fun _ => false) (fun _ _ => 0) wa_exp2_0 (kernel_start 1) [tt]
    (wt_start_ok wM 1) eq_refl.

Definition kernel_run_skip_masked_tiles_witness :=
  kernel_run_skip_masked_tiles wM unit (fun _ => 0) (fun _ => false) (fun _ _ => 0) wa_exp2_0 [[tt]]
    (kernel_start 1) (wt_start_ok wM 1).

Definition kernel_start_skip_masked_tiles_witness :=
  kernel_start_skip_masked_tiles wM unit (fun _ => 0) (fun _ => false) (fun _ _ => 0) wa_exp2_0 1 [[tt]].

Definition kernel_run_skip_masked_tile_witness :=
  kernel_run_skip_masked_tile wM unit (fun _ => 0) (fun _ => false) (fun _ _ => 0) wa_exp2_0 (kernel_start 1)
    [] [tt] [] (wt_start_ok wM 1) eq_refl.

Definition kernel_step_visible_witness :=
  kernel_step_visible wM unit (fun _ => 0) (fun _ => true) (fun _ _ => 0) 0 0 [0] [tt] eq_refl.

Definition bf16_fp32_kernel_run_skip_masked_tiles_witness :=
  bf16_fp32_kernel_run_skip_masked_tiles unit (fun _ => 0) (fun _ => false) (fun _ _ => 0) [[tt]]
    (kernel_start 1) (wt_start_ok bf16_fp32 1).

Definition fp16_fp32_kernel_run_skip_masked_tiles_witness :=
  fp16_fp32_kernel_run_skip_masked_tiles unit (fun _ => 0) (fun _ => false) (fun _ _ => 0) [[tt]]
    (kernel_start 1) (wt_start_ok fp16_fp32 1).
