(** * Witnesses of LinearCrossEntropy/Float/SoftcapGradChainError.v (ojas_ref/verification/proof_audit.py):
    [bf16_fp32], [tl.exp] and [tl.log] the rounded [exp] and [ln] (Witnesses/Instances.v),
    [tl.sum] left to right ([tile_sum]); the cap [c = 1], the kernel's [tanh] and [z / c] the exact
    ones rounded to float32, the chain factor [rnd (1 - rnd (d * d))]
    (Witnesses/LinearCrossEntropy/Float/{SoftcapError,SoftcapGradError}.v); every item's token row
    one tile of the one raw logit [(0, 0)] (Witnesses/LinearCrossEntropy/Float/GradChainError.v's
    row), the items those of Witnesses/LinearCrossEntropy/Float/GradError.v (one kept target item
    per term, operand 1, its raw logit the row's), the products' accumulation float32 additions
    left to right, the FMA epilogue, [alpha = a0 = 1]. *)

From Coq Require Import Reals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision FloatModel.BlockedSum Attention.Float.OnlineSoftmaxError.
From Ojas Require Import LinearCrossEntropy.Float.LseLossError LinearCrossEntropy.Float.GradError.
From Ojas Require Import LinearCrossEntropy.Float.SoftcapError LinearCrossEntropy.Float.SoftcapGradError.
From Ojas Require Import LinearCrossEntropy.Float.GradChainError LinearCrossEntropy.Float.SoftcapGradChainError.
From Ojas Require Import Witnesses.Instances Witnesses.LinearCrossEntropy.Float.LseLossError.
From Ojas Require Import Witnesses.LinearCrossEntropy.Float.GradError Witnesses.LinearCrossEntropy.Float.SoftcapError.
From Ojas Require Import Witnesses.LinearCrossEntropy.Float.SoftcapGradError.
From Ojas Require Import Witnesses.LinearCrossEntropy.Float.GradChainError.
Import ListNotations.
Open Scope R_scope.

Local Notation u := (ff_u (mp_a wM)).
Local Notation eta := (ff_eta (mp_a wM)).

(** Every item's raw row: one tile of the one raw logit [(0, 0)]. *)
Lemma ws_rows : forall (xs : list unit) x, In x xs -> w_t x = true ->
  sc_row_ok wM 1 1 1 0 0 (wr_row x) /\ In (w_z x, w_z x) (concat (snd (wr_row x))).
Proof.
  intros xs x _ _; unfold wr_row, sc_row_ok; cbn [fst snd].
  split; [| left; reflexivity].
  split; [left; reflexivity |]; split; [repeat constructor; cbn; lia |].
  split; [cbn; lia |]; split; [cbn; lia | exact w_row_ok].
Qed.

(** A capped term is a float32 number, whatever the cap and the lse it uses. *)
Lemma ws_term_fmt : forall c il x, ff_fmt (mp_a wM) (sc_term wM w_ex c w_th w_cf unit w_z il w_h w_t w_t x).
Proof. intros c il x; unfold sc_term, sc_g, sc_gent, w_h, w_t; rewrite Rmult_1_r; apply (mp_s_in_a wM), ff_rnd_fmt. Qed.

Definition ws_il (x : unit) : R := row_lse wM w_ex w_lg (tile_sum (mp_a wM)) (sc_row wM 1 w_th (wr_row x)).

Lemma ws_dsum_ok : forall xs, (length xs <= 2)%nat ->
  ce_gen_dsum_ok unit (sc_term wM w_ex 1 w_th w_cf unit w_z ws_il w_h w_t w_t) w_dsum w_gd xs.
Proof. intros xs Hl; apply w_tile_dsum; [apply ws_term_fmt | exact Hl]. Qed.

(** The capped logits of raw logits [|r| <= 0]: [exp (2 u Zc) <= 1 + 1/1000] ([Zc <= sc_zmax]). *)
Lemma ws_XK : exp (u * (2 * sc_zc u eta 1 u eta 0)) <= 1 + / 1000.
Proof.
  eapply Rle_trans; [| exact w_sc_XK]; apply ose_exp_le.
  pose proof (ff_u_nonneg (mp_a wM)); pose proof (Rmin_l (sc_zmax u eta 1 u eta) (sc_zraw u eta 1 u eta 0)).
  unfold sc_zc; nra.
Qed.

Definition ws_NL : R := - ln (1 - w_bLs).
Definition ws_Dl : R := ce_lse_bound u w_el (sc_zc u eta 1 u eta 0) 0 ws_NL (sc_delta u eta 1 u eta 0).
Definition ws_X : R :=
  exp (sc_delta u eta 1 u eta 0 + ws_Dl + u * chain_Am (sc_zc u eta 1 u eta 0) (sc_delta u eta 1 u eta 0) 0 ws_Dl + eta).

Ltac ws_close :=
  first [ apply sum_ok_tile_sum | apply Rle_refl | apply ws_XK | apply (ws_rows _) | apply (epi_fma_ok wM 1)
        | apply w_alpha | apply w_gd_nonneg | apply ws_dsum_ok; cbn; lia
        | intros ch Hc; apply ws_dsum_ok; destruct Hc as [<- | [<- | []]]; cbn; lia
        | simpl INR; rewrite ln_1; lra
        | pose proof w_bLs_small; unfold w_bLs in *; rewrite ?exp_0; lra
        | lra ].

Definition sc_dw_error_from_lse_witness :=
  ltac:(refine (sc_dw_error_from_lse wM w_ex u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_ex_err
                  w_lg w_el (/ 2) 4 w_lg_fmt w_lg_err 1 Rlt_0_1 w_th u eta (ff_u_nonneg _) w_th_err
                  w_dv u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_dv_err w_cf w_cf_ok
                  (tile_sum (mp_a wM)) 0 1 1 1 (1 + / 1000) 0 ws_NL 0 0
                  unit wr_row w_z w_z w_h w_t w_t w_dsum (fun a c => ff_rnd (mp_a wM) (1 * a + c)) 1 1 0 w_gd ws_X
                  [[tt; tt]; [tt]] _ _ _ _ _ _ _ _ _ _ _ _ _ _); ws_close).

Definition sc_dh_error_from_lse_witness :=
  ltac:(refine (sc_dh_error_from_lse wM w_ex u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_ex_err
                  w_lg w_el (/ 2) 4 w_lg_fmt w_lg_err 1 Rlt_0_1 w_th u eta (ff_u_nonneg _) w_th_err
                  w_dv u eta (ff_u_nonneg _) (ff_eta_nonneg _) w_dv_err w_cf w_cf_ok
                  (tile_sum (mp_a wM)) 0 1 1 1 (1 + / 1000) 0 ws_NL 0 0
                  unit wr_row w_z w_z w_h w_t w_t w_dsum 1 1 0 w_gd ws_X
                  [tt; tt] _ _ _ _ _ _ _ _ _ _ _ _ _); ws_close).
