(** * Witnesses of LinearCrossEntropy/Float/GradChainError.v (ojas_ref/verification/proof_audit.py):
    [bf16_fp32], [tl.exp] and [tl.log] the rounded [exp] and [ln] (Witnesses/Instances.v),
    [tl.sum] left to right ([tile_sum]); every item's token row one tile of one logit [(0, 0)]
    (Witnesses/LinearCrossEntropy/Float/LseLossError.v's row), the items those of
    Witnesses/LinearCrossEntropy/Float/GradError.v (one kept target item per term, operand 1,
    its logit the row's), the products' accumulation float32 additions left to right, the FMA
    epilogue, [alpha = a0 = 1]. *)

From Coq Require Import Reals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision FloatModel.BlockedSum.
From Ojas Require Import LinearCrossEntropy.Float.LseLossError LinearCrossEntropy.Float.GradError.
From Ojas Require Import LinearCrossEntropy.Float.GradChainError Witnesses.Instances.
From Ojas Require Import Witnesses.LinearCrossEntropy.Float.LseLossError Witnesses.LinearCrossEntropy.Float.GradError.
Import ListNotations.
Open Scope R_scope.

Local Notation u := (ff_u (mp_a wM)).
Local Notation eta := (ff_eta (mp_a wM)).

(** Every item's row: one tile of the one logit [(0, 0)]. *)
Definition wr_row (_ : unit) : (R * R) * list (list (R * R)) := ((0, 0), [[(0, 0)]]).

Lemma wr_rows : forall (xs : list unit) x, In x xs -> w_t x = true ->
  row_ok wM 1 1 1 0 0 (wr_row x) /\ In (w_z x, w_z x) (concat (snd (wr_row x))).
Proof.
  intros xs x _ _; unfold wr_row, row_ok; cbn [fst snd].
  split; [| left; reflexivity].
  split; [left; reflexivity |]; split; [repeat constructor; cbn; lia |].
  split; [cbn; lia |]; split; [cbn; lia | exact w_row_ok].
Qed.

Definition wr_NL : R := - ln (1 - w_bL).

Lemma wr_NL_nonneg : 0 <= wr_NL.
Proof.
  pose proof w_bL_small; unfold wr_NL.
  assert (ln (1 - w_bL) <= ln 1) by (apply w_ln_le; lra). rewrite ln_1 in *; lra.
Qed.

Definition wr_Dl : R := ce_lse_bound u w_el 0 0 wr_NL 0.
Definition wr_X : R := exp (0 + wr_Dl + u * chain_Am 0 0 0 wr_Dl + eta).

Lemma wr_el : 0 <= w_el.
Proof. unfold w_el; pose proof (ff_u_nonneg (mp_a wM)); pose proof (ff_eta_nonneg (mp_a wM)); lra. Qed.

Lemma wr_dsum_ok_cs : forall c, In c [[tt; tt]; [tt]] ->
  dsum_ok wM w_ex unit w_z (fun x => row_lse wM w_ex w_lg (tile_sum (mp_a wM)) (wr_row x)) w_h w_t w_t w_dsum w_gd c.
Proof. intros c Hc; apply w_dsum_ok; destruct Hc as [<- | [<- | []]]; cbn; lia. Qed.

Ltac wr_close :=
  first [ apply sum_ok_tile_sum | apply Rle_refl | apply wr_NL_nonneg | apply wr_el | apply w_dsum_ok; cbn; lia | exact wr_dsum_ok_cs
        | apply (wr_rows _) | apply (epi_fma_ok wM 1) | apply w_alpha | apply w_gd_nonneg
        | apply w_exp_0_le_1; ring
        | simpl INR; rewrite ln_1; lra
        | pose proof w_bL_small; unfold w_bL in *; rewrite ?exp_0; lra
        | lra ].

Definition ce_dw_error_from_lse_witness :=
  ltac:(refine (ce_dw_error_from_lse wM w_ex u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_ex_err
                  w_lg w_el (/ 2) 4 w_lg_fmt w_lg_err (tile_sum (mp_a wM)) 0 1 1 1 0 1 0 0 wr_NL
                  unit wr_row w_z w_z w_h w_t w_t w_dsum (fun a c => ff_rnd (mp_a wM) (1 * a + c)) 1 1 0 w_gd wr_X
                  [[tt; tt]; [tt]] _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _); wr_close).

Definition ce_dh_error_from_lse_witness :=
  ltac:(refine (ce_dh_error_from_lse wM w_ex u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_ex_err
                  w_lg w_el (/ 2) 4 w_lg_fmt w_lg_err (tile_sum (mp_a wM)) 0 1 1 1 0 1 0 0 wr_NL
                  unit wr_row w_z w_z w_h w_t w_t w_dsum 1 1 0 w_gd wr_X
                  [tt; tt] _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _); wr_close).
