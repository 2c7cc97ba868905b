(** * Witnesses of Bounds/LinearCrossEntropyChain.v (ojas_ref/verification/proof_audit.py): the
    oracle's coefficients computed in Coq ([vm_compute]) for [bf16_fp32] (fp32 [u = ue = 2^-24],
    [ea = ee = 2^-150], bf16 [us = 2^-8], [es = 2^-134], [el = 2 u + ea]), [tl.exp] and [tl.log]
    the rounded [exp] and [ln] (Witnesses/Instances.v), [tl.sum] left to right, every item's row
    one tile of the one logit [(0, 0)] ([Zmax = delta = LN = 0], [V = 1]), the items of
    Witnesses/LinearCrossEntropy/Float/GradChainError.v, [a0 = 1] exact, [n = 1]; two token
    chunks for dW, one product for dH. *)

From Coq Require Import Reals QArith Qreals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.DotError FloatModel.MixedPrecision FloatModel.BlockedSum.
From Ojas Require Import LinearCrossEntropy.Float.LseLossError LinearCrossEntropy.Float.GradError.
From Ojas Require Import LinearCrossEntropy.Float.GradChainError.
From Ojas Require Import Bounds.Rational Bounds.LinearCrossEntropyChain Witnesses.Instances.
From Ojas Require Import Witnesses.LinearCrossEntropy.Float.GradError Witnesses.LinearCrossEntropy.Float.GradChainError.
From Ojas Require Import Witnesses.Bounds.LinearCrossEntropy Witnesses.Bounds.LinearCrossEntropyGrad.
Import ListNotations.
Open Scope R_scope.

Definition wc_chain (C : N) : option (Q * Q * Q * Q) :=
  ce_grad_chain_q wg_u wg_eta wg_us wg_es wg_u wg_eta wq_el 0 0 0 1 0 0 1 1 1 1 C.

(** [wc_chain 2] and [wc_chain 1]: [vm_compute]'s values, written out (checked by the [_eq] lemmas). *)
Definition wc_chain2 :=
  Some ((6327111052830487459547979587872842665329460644897918705653 # 1606938044258990275541962092341162602522202993782792835301376),
        (18905445312130324236198762758991864934789285141848345550897 # 1606938044258990275541962092341162602522202993782792835301376),
        (74366858968861025417 # 1606938044258990275541962092341162602522202993782792835301376),
        (148731413050620911633 # 1606938044258990275541962092341162602522202993782792835301376)).
Definition wc_chain1 :=
  Some ((6302491568017733906479448035433893618331541491841867901445 # 1606938044258990275541962092341162602522202993782792835301376),
        (12579109522354067782990806252487489820746196330979393013777 # 1606938044258990275541962092341162602522202993782792835301376),
        (74077489343503019053 # 1606938044258990275541962092341162602522202993782792835301376),
        (74076341384237023232 # 1606938044258990275541962092341162602522202993782792835301376)).

(** The lse bound inside [wc_chain] (the same for both), written out and checked once; the
    chain lemmas rewrite with it. *)
Definition wc_lse : Q := 670467038906530626408918083742220497455680476418518029 # 1606938044258990275541962092341162602522202993782792835301376.

Lemma wc_lse_eq : Ojas.Bounds.LinearCrossEntropy.ce_lse_q wg_u wg_u wg_eta wg_eta wq_el 0 0 0 0 1 1 1 = Some wc_lse.
Proof. vm_cast_no_check (eq_refl (Some wc_lse)). Qed.

Lemma wc_chain2_eq : ce_grad_chain_q wg_u wg_eta wg_us wg_es wg_u wg_eta wq_el 0 0 0 1 0 0 1 1 1 1 2 = wc_chain2.
Proof. unfold ce_grad_chain_q; rewrite wc_lse_eq; vm_cast_no_check (eq_refl wc_chain2). Qed.

Lemma wc_chain1_eq : ce_grad_chain_q wg_u wg_eta wg_us wg_es wg_u wg_eta wq_el 0 0 0 1 0 0 1 1 1 1 1 = wc_chain1.
Proof. unfold ce_grad_chain_q; rewrite wc_lse_eq; vm_cast_no_check (eq_refl wc_chain1). Qed.

(** [tl.log] on [[1/2, 2 e^0]]: inside [[1/2, 4]]. *)
Lemma wc_lg_err : forall x, ff_fmt (mp_a wM) x -> / 2 <= x <= 2 * exp (Q2R 0) -> Rabs (w_lg x - ln x) <= Q2R wq_el.
Proof. intros x Hf Hx; rewrite Q2R_0, exp_0 in Hx; rewrite wq_el_R; apply w_lg_err; [exact Hf | lra]. Qed.

Lemma wc_rows : forall (xs : list unit) x, In x xs -> w_t x = true ->
  row_ok wM 1 1 1 (Q2R 0) (Q2R 0) (wr_row x) /\ In (w_z x, w_z x) (concat (snd (wr_row x))).
Proof. rewrite Q2R_0; exact wr_rows. Qed.

Lemma wc_dsum_ok_cs : forall c, In c [[tt; tt]; [tt]] ->
  dsum_ok wM w_ex unit w_z (fun x => row_lse wM w_ex w_lg (tile_sum (mp_a wM)) (wr_row x)) w_h w_t w_t w_dsum
    (gamma (ff_u (mp_a wM)) (N.to_nat 1)) c.
Proof. intros c Hc; apply wg_tile_dsum; [apply w_term_fmt | destruct Hc as [<- | [<- | []]]; cbn; lia]. Qed.

Lemma wc_dsum_ok_2 :
  dsum_ok wM w_ex unit w_z (fun x => row_lse wM w_ex w_lg (tile_sum (mp_a wM)) (wr_row x)) w_h w_t w_t w_dsum
    (gamma (ff_u (mp_a wM)) (N.to_nat 1)) [tt; tt].
Proof. apply wg_tile_dsum; [apply w_term_fmt | cbn; lia]. Qed.

Definition ce_grad_chain_q_sound_dw_witness :=
  ce_grad_chain_q_sound_dw wM wg_u wg_eta wg_us wg_es wg_u wg_eta wq_el 0 0 0 1 0 0 1 1 1 1 2
    wg_u_R wg_eta_R wg_us_R wg_es_R _ _ _ _ wc_chain2_eq w_ex w_lg wg_ex w_lg_fmt wc_lg_err
    (tile_sum (mp_a wM)) unit wr_row w_z w_z w_h w_t w_t w_dsum (fun a c => ff_rnd (mp_a wM) (1 * a + c)) 1
    [[tt; tt]; [tt]] (sum_ok_tile_sum wM 1) (wc_rows _) (epi_fma_ok wM 1) wg_a0 wc_dsum_ok_cs eq_refl.

Definition ce_grad_chain_q_sound_dh_witness :=
  ce_grad_chain_q_sound_dh wM wg_u wg_eta wg_us wg_es wg_u wg_eta wq_el 0 0 0 1 0 0 1 1 1 1 1
    wg_u_R wg_eta_R wg_us_R wg_es_R _ _ _ _ wc_chain1_eq w_ex w_lg wg_ex w_lg_fmt wc_lg_err
    (tile_sum (mp_a wM)) unit wr_row w_z w_z w_h w_t w_t w_dsum 1
    [tt; tt] (sum_ok_tile_sum wM 1) (wc_rows _) wg_a0 wc_dsum_ok_2 eq_refl.
