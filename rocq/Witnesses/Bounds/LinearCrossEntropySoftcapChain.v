(** * Witnesses of Bounds/LinearCrossEntropySoftcapChain.v (ojas_ref/verification/proof_audit.py): the
    oracle's coefficients computed in Coq ([vm_compute]) for [bf16_fp32] (fp32 [u = ue = 2^-24],
    [ea = ee = 2^-150], bf16 [us = 2^-8], [es = 2^-134], [el = 2 u + ea]), [tl.exp] and [tl.log]
    the rounded [exp] and [ln] (Witnesses/Instances.v), [tl.sum] left to right, the cap [c = 1],
    the kernel's [tanh] and [z / c] the exact ones rounded to float32 ([ut = ud = u],
    [et = ed = ea]), the chain factor [rnd (1 - rnd (d * d))], every item's raw row one tile of
    the one raw logit [(0, 0)] ([zr = dr = LN = 0], [V = 1]), the items of
    Witnesses/LinearCrossEntropy/Float/SoftcapGradChainError.v, [a0 = 1] exact, [n = 1]; two
    token chunks for dW, one product for dH. *)

From Coq Require Import Reals QArith Qreals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.DotError FloatModel.MixedPrecision FloatModel.BlockedSum.
From Ojas Require Import LinearCrossEntropy.Float.LseLossError LinearCrossEntropy.Float.GradError.
From Ojas Require Import LinearCrossEntropy.Float.SoftcapError LinearCrossEntropy.Float.SoftcapGradError.
From Ojas Require Import LinearCrossEntropy.Float.GradChainError LinearCrossEntropy.Float.SoftcapGradChainError.
From Ojas Require Import Bounds.Rational Bounds.LinearCrossEntropySoftcapChain Witnesses.Instances.
From Ojas Require Import Witnesses.LinearCrossEntropy.Float.GradError Witnesses.LinearCrossEntropy.Float.SoftcapError.
From Ojas Require Import Witnesses.LinearCrossEntropy.Float.SoftcapGradError.
From Ojas Require Import Witnesses.LinearCrossEntropy.Float.GradChainError.
From Ojas Require Import Witnesses.LinearCrossEntropy.Float.SoftcapGradChainError.
From Ojas Require Import Witnesses.Bounds.LinearCrossEntropy Witnesses.Bounds.LinearCrossEntropyGrad.
From Ojas Require Import Witnesses.Bounds.LinearCrossEntropyChain.
Import ListNotations.
Open Scope R_scope.

Definition wsc_chain (C : N) : option (Q * Q * Q * Q * Q * Q) :=
  sc_grad_chain_q wg_u wg_eta wg_us wg_es wg_u wg_eta wq_el 1 wg_u wg_eta wg_u wg_eta 0 0 0 1 0 0 1 1 1 1 C.

(** [wsc_chain 2] and [wsc_chain 1]: [vm_compute]'s values, written out (checked by the [_eq] lemmas). *)
Definition wsc_chain2 :=
  Some ((600720783924859945408215624173955803267244401279 # 1606938044258990275541962092341162602522202993782792835301376),
        (775262797191804744068401221139717459944312378382780021 # 1606938044258990275541962092341162602522202993782792835301376),
        (74367998116007882601 # 1606938044258990275541962092341162602522202993782792835301376),
        (6327595592306890721622585048937161040164921074765297584407 # 1606938044258990275541962092341162602522202993782792835301376),
        (18905542219953980504354324334932420278087449568668559622241 # 1606938044258990275541962092341162602522202993782792835301376),
        (148731413050620911633 # 1606938044258990275541962092341162602522202993782792835301376)).
Definition wsc_chain1 :=
  Some ((598383313301529046722809736779984991264269485691 # 1606938044258990275541962092341162602522202993782792835301376),
        (772246164402845249904316224567686218057080837931670617 # 1606938044258990275541962092341162602522202993782792835301376),
        (74078624058103071325 # 1606938044258990275541962092341162602522202993782792835301376),
        (6302974222097756279510161989405933277446663833950632433813 # 1606938044258990275541962092341162602522202993782792835301376),
        (12579206053098726571692300287785038213166747091557912940577 # 1606938044258990275541962092341162602522202993782792835301376),
        (74076341384237023232 # 1606938044258990275541962092341162602522202993782792835301376)).

(** The lse bound inside [wsc_chain] (the same for both), written out and checked once; the
    chain lemmas rewrite with it. *)
Definition wsc_lse : Q := 862028987223757504527550986369153096995301875864415272 # 1606938044258990275541962092341162602522202993782792835301376.

Lemma wsc_lse_eq : Ojas.Bounds.LinearCrossEntropy.ce_lse_q wg_u wg_u wg_eta wg_eta wq_el (sc_zc_q wg_u wg_eta 1 wg_u wg_eta 0)
  (sc_delta_q wg_u wg_eta 1 wg_u wg_eta 0) 0 0 1 1 1 = Some wsc_lse.
Proof. vm_cast_no_check (eq_refl (Some wsc_lse)). Qed.

Lemma wsc_chain2_eq :
  sc_grad_chain_q wg_u wg_eta wg_us wg_es wg_u wg_eta wq_el 1 wg_u wg_eta wg_u wg_eta 0 0 0 1 0 0 1 1 1 1 2 = wsc_chain2.
Proof. unfold sc_grad_chain_q; cbv zeta; rewrite wsc_lse_eq; vm_cast_no_check (eq_refl wsc_chain2). Qed.

Lemma wsc_chain1_eq :
  sc_grad_chain_q wg_u wg_eta wg_us wg_es wg_u wg_eta wq_el 1 wg_u wg_eta wg_u wg_eta 0 0 0 1 0 0 1 1 1 1 1 = wsc_chain1.
Proof. unfold sc_grad_chain_q; cbv zeta; rewrite wsc_lse_eq; vm_cast_no_check (eq_refl wsc_chain1). Qed.

(** The kernel's tanh and division at the cap [Q2R 1]. *)
Lemma wsc_th_err : forall r, ff_fmt (mp_a wM) r ->
  Rabs (w_th r - tanh (r / Q2R 1)) <= Q2R wg_u * Rabs (tanh (r / Q2R 1)) + Q2R wg_eta.
Proof. intros r Hr; rewrite Q2R_1, wg_u_R, wg_eta_R; exact (w_th_err r Hr). Qed.

Lemma wsc_dv_err : forall z, ff_fmt (mp_a wM) z ->
  Rabs (w_dv z - z / Q2R 1) <= Q2R wg_u * Rabs (z / Q2R 1) + Q2R wg_eta.
Proof. intros z Hz; rewrite Q2R_1, wg_u_R, wg_eta_R; exact (w_dv_err z Hz). Qed.

Lemma wsc_rows : forall (xs : list unit) x, In x xs -> w_t x = true ->
  sc_row_ok wM 1 1 1 (Q2R 0) (Q2R 0) (wr_row x) /\ In (w_z x, w_z x) (concat (snd (wr_row x))).
Proof. rewrite Q2R_0; exact ws_rows. Qed.

Definition wsc_il (x : unit) : R :=
  row_lse wM w_ex w_lg (tile_sum (mp_a wM)) (sc_row wM (Q2R 1) w_th (wr_row x)).

Lemma wsc_dsum_ok : forall xs, (length xs <= 2)%nat ->
  ce_gen_dsum_ok unit (sc_term wM w_ex (Q2R 1) w_th w_cf unit w_z wsc_il w_h w_t w_t) w_dsum
    (gamma (ff_u (mp_a wM)) (N.to_nat 1)) xs.
Proof. intros xs Hl; apply wg_tile_dsum; [apply ws_term_fmt | exact Hl]. Qed.

Lemma wsc_dsum_ok_cs : forall ch, In ch [[tt; tt]; [tt]] ->
  ce_gen_dsum_ok unit (sc_term wM w_ex (Q2R 1) w_th w_cf unit w_z wsc_il w_h w_t w_t) w_dsum
    (gamma (ff_u (mp_a wM)) (N.to_nat 1)) ch.
Proof. intros ch Hc; apply wsc_dsum_ok; destruct Hc as [<- | [<- | []]]; cbn; lia. Qed.

Definition sc_grad_chain_q_sound_dw_witness :=
  sc_grad_chain_q_sound_dw wM wg_u wg_eta wg_us wg_es wg_u wg_eta wq_el 1 wg_u wg_eta wg_u wg_eta 0 0 0 1 0
    0 1 1 1 1 2 wg_u_R wg_eta_R wg_us_R wg_es_R _ _ _ _ _ _ wsc_chain2_eq w_ex w_lg wg_ex w_lg_fmt wc_lg_err
    w_th wsc_th_err w_dv wsc_dv_err w_cf w_cf_ok
    (tile_sum (mp_a wM)) unit wr_row w_z w_z w_h w_t w_t w_dsum (fun a c => ff_rnd (mp_a wM) (1 * a + c)) 1
    [[tt; tt]; [tt]] (sum_ok_tile_sum wM 1) (wsc_rows _) (epi_fma_ok wM 1) wg_a0 wsc_dsum_ok_cs eq_refl.

Definition sc_grad_chain_q_sound_dh_witness :=
  sc_grad_chain_q_sound_dh wM wg_u wg_eta wg_us wg_es wg_u wg_eta wq_el 1 wg_u wg_eta wg_u wg_eta 0 0 0 1 0
    0 1 1 1 1 1 wg_u_R wg_eta_R wg_us_R wg_es_R _ _ _ _ _ _ wsc_chain1_eq w_ex w_lg wg_ex w_lg_fmt wc_lg_err
    w_th wsc_th_err w_dv wsc_dv_err w_cf w_cf_ok
    (tile_sum (mp_a wM)) unit wr_row w_z w_z w_h w_t w_t w_dsum 1
    [tt; tt] (sum_ok_tile_sum wM 1) (wsc_rows _) wg_a0 (wsc_dsum_ok [tt; tt] ltac:(cbn; lia)) eq_refl.
