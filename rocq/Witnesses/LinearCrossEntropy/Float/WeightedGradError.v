(** * Witnesses of LinearCrossEntropy/Float/WeightedGradError.v (ojas_ref/verification/proof_audit.py):
    [bf16_fp32], [tl.exp] and [tl.log] the rounded [exp] and [ln] (Witnesses/Instances.v); one item
    (one kept token, its target, logit 0, other operand 1, token weight 1), the accumulation of a
    product's terms (at most two) float32 additions left to right, grad_output 1 exact; for the two-level forward the row of
    one logit [0] in one group of one tile, its lse the one the forward computes
    (Witnesses/LinearCrossEntropy/Float/LseLossError.v's [w_bL2]). *)

From Coq Require Import Reals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision FloatModel.BlockedSum LinearCrossEntropy.Float.LseLossError.
From Ojas Require Import LinearCrossEntropy.Float.GradError LinearCrossEntropy.Float.WeightedGradError.
From Ojas Require Import Witnesses.Instances Witnesses.LinearCrossEntropy.Float.LseLossError.
From Ojas Require Import Witnesses.LinearCrossEntropy.Float.GradError.
Import ListNotations.
Open Scope R_scope.

Local Notation u := (ff_u (mp_a wM)).
Local Notation eta := (ff_eta (mp_a wM)).

Lemma w_abs00 : Rabs (0 - 0) <= 0.
Proof. rewrite Rminus_0_r, Rabs_R0; apply Rle_refl. Qed.

Lemma w_w11 : Rabs (1 - 1) <= 0 * Rabs 1.
Proof. exact w_alpha. Qed.

Definition ce_wg_close_witness :=
  ce_wg_close wM w_ex u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_ex_err 0 0 0 0 1 1 0 0 0 0 w_X true
    (Rle_refl 0) w_w11 w_abs00 w_abs00 w_abs00 (Rle_refl w_X).

(** The item of dW's product: token weight 1, exact. *)
Definition w_one (_ : unit) : R := 1.

Lemma w_cw_ok : forall xs x, In x xs -> cw_ok unit w_z w_z w_z w_z w_one w_one 0 0 0 0 x.
Proof. intros xs x _; unfold w_z, w_one; repeat split; first [apply w_abs00 | apply w_w11]. Qed.

Lemma w_cw_term_fmt : forall iz il x, ff_fmt (mp_a wM) (cw_term wM w_ex unit iz il w_h w_one w_t x).
Proof. intros iz il x; unfold cw_term, ce_wgent, w_h; rewrite Rmult_1_r; apply (mp_s_in_a wM), ff_rnd_fmt. Qed.

Lemma w_cw_dsum_ok : forall iz il xs, (length xs <= 2)%nat ->
  ce_gen_dsum_ok unit (cw_term wM w_ex unit iz il w_h w_one w_t) w_dsum w_gd xs.
Proof. intros iz il xs Hl; apply w_tile_dsum; [apply w_cw_term_fmt | exact Hl]. Qed.

Definition ce_dw4_error_witness :=
  ce_dw4_error wM w_ex u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_ex_err unit w_z w_z w_z w_z w_h w_one w_one w_t
    w_dsum w_gd 0 0 0 0 w_X [tt; tt] w_gd_nonneg (Rle_refl 0) (Rle_refl w_X)
    (w_cw_dsum_ok _ _ [tt; tt] ltac:(cbn; lia)) (w_cw_ok _).

Definition ce_dh4_error_witness :=
  ce_dh4_error wM w_ex u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_ex_err unit w_z w_z w_z w_z w_h w_t w_t
    w_dsum 1 1 0 w_gd 0 0 0 w_X 1 [tt; tt]
    (Rle_refl 0) w_alpha w_gd_nonneg (Rle_refl 0) (Rle_refl 0) (Rle_refl 0) (Rle_refl w_X)
    (w_dsum_ok _ _ [tt; tt] ltac:(cbn; lia)) (w_ok_all _).

(** ** The two-level forward: the row of one logit [0], one group of one tile *)

Definition w_tiles2 : list (list (list (list (R * R)))) := [[ [[(0, 0)]] ]].
Definition w_ts : list R -> R := tile_sum (mp_a wM).
Definition w_lse2 : R := ce_row2_lse wM w_ex w_lg w_ts w_ts w_tiles2.
Definition w_NL2 : R := - ln (1 - w_bL2).
Definition w_Dl2 : R := ce_lse_bound u w_el 0 0 w_NL2 0.
(** The logit's distance to the computed lse, and the exponent's bound. *)
Definition w_Am2 : R := Rabs (0 - w_lse2).
Definition w_X2 : R := exp (0 + w_Dl2 + u * w_Am2 + eta).

Lemma w_bL2_eq : ce_bL2 wM u eta 1 0 1 1 1 0 1 1 1 = w_bL2.
Proof. reflexivity. Qed.

Lemma w_row2_ok : ce_row2_ok wM 1 1 1 1 1 1 0 0 0 w_tiles2.
Proof.
  unfold ce_row2_ok, w_tiles2, ce_row2_logits.
  split; [discriminate |]. split.
  { intros g Hg; cbn in Hg; destruct Hg as [<- | []]; cbn; repeat split; [discriminate | repeat constructor; cbn; lia | lia | lia]. }
  split; [repeat constructor; cbn; lia |]. split; [cbn; lia |]. split; [cbn; lia |]. split.
  { intros zy Hi; cbn in Hi; destruct Hi as [<- | []]; cbn [fst snd]; rewrite !Rminus_0_r, Rabs_R0.
    split; [apply ff_fmt_0 | lra]. }
  cbn [concat map app length]; simpl INR; rewrite ln_1; lra.
Qed.

Ltac w_two :=
  first [ apply w_row2_ok | apply sum_ok_tile_sum | apply Rle_refl | apply w_gd_nonneg
        | apply w_cw_dsum_ok; cbn; lia | apply w_dsum_ok; cbn; lia
        | rewrite w_bL2_eq; pose proof w_bL2_small as Hb; unfold w_bL2 in Hb |- *; cbv zeta in Hb |- *; rewrite ?exp_0; lra
        | rewrite w_bL2_eq; apply Rle_refl
        | w_close ].

Lemma w_two_items : forall x, In x [tt; tt] ->
  Rabs (w_z x - w_z x) <= 0 /\ Rabs (w_z x - w_lse2) <= w_Am2 /\ Rabs (w_one x - w_one x) <= 0 * Rabs (w_one x)
  /\ ce_row2_ok wM 1 1 1 1 1 1 0 0 0 w_tiles2 /\ w_lse2 = ce_row2_lse wM w_ex w_lg w_ts w_ts w_tiles2
  /\ ce_row2_L w_tiles2 = ce_row2_L w_tiles2.
Proof.
  intros x _; unfold w_z, w_one; split; [apply w_abs00 |]; split; [apply Rle_refl |]; split; [apply w_w11 |].
  split; [apply w_row2_ok | split; reflexivity].
Qed.

Definition ce_dw4_error_two_level_witness :=
  ltac:(refine (ce_dw4_error_two_level wM w_ex u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_ex_err
                  w_lg w_el (/ 2) 4 w_lg_fmt w_lg_err unit w_z (fun _ => w_lse2) w_z (fun _ => ce_row2_L w_tiles2)
                  w_h w_one w_one w_t (fun _ => w_tiles2) w_ts w_ts 0 1 1 1 0 1 1 1 w_dsum w_gd 0 0 w_Am2 0 1 0 w_NL2 w_X2 [tt; tt]
                  _ _ _ _ _ _ _ _ _ _ _ _);
        first [ apply w_two_items | w_two ]).

Lemma w_two_items_dh : forall x, In x [tt; tt] -> w_t x = true ->
  Rabs (w_z x - w_z x) <= 0 /\ Rabs (w_z x - w_lse2) <= w_Am2
  /\ w_lse2 = ce_row2_lse wM w_ex w_lg w_ts w_ts w_tiles2 /\ ce_row2_L w_tiles2 = ce_row2_L w_tiles2.
Proof.
  intros x _ _; unfold w_z; split; [apply w_abs00 |]; split; [apply Rle_refl | split; reflexivity].
Qed.

Definition ce_dh4_error_two_level_witness :=
  ltac:(refine (ce_dh4_error_two_level wM w_ex u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_ex_err
                  w_lg w_el (/ 2) 4 w_lg_fmt w_lg_err unit w_z (fun _ => w_lse2) w_z (fun _ => ce_row2_L w_tiles2)
                  w_h w_t w_t w_tiles2 w_ts w_ts 0 1 1 1 0 1 1 1 w_dsum 1 1 0 w_gd 0 w_Am2 0 1 0 w_NL2 w_X2 1 [tt; tt]
                  _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _);
        (* the dsum premise first: [w_two]'s earlier alternatives fail on it only after minutes of conversion *)
        first [ apply w_two_items_dh | apply w_alpha | apply Rabs_pos | apply w_dsum_ok; cbn; lia | w_two ]).
