(** * Witnesses of Bounds/AttentionChain.v (ojas_ref/verification/proof_audit.py): [bf16_fp32], the
    constants of Witnesses/Bounds/Attention.v ([u = ue = uc = ucl = uc2 = 2^-24], [scale = P = V = 1],
    [LN = 0], [el = u + eta], [ucs = 0], [Lm = Pd = Ym = W = 1], one key, head and value dim 1, one
    backward tile of one item), [attn_grad_chain_q]'s answer computed by [vm_compute]; the data of
    Witnesses/Attention/Float/BackwardChainError.v (one query [[1]], one key [[1]] of value [[1]],
    [dO = [1]], [tl.log2] the exact [log2] rounded to fp32); every premise proved together. *)

From Coq Require Import Reals ZArith QArith Qreals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision FloatModel.BlockedSum FloatModel.DotError.
From Ojas Require Import Attention.Float.ForwardError Attention.Float.ForwardPosteriori.
From Ojas Require Import Attention.Float.DkDqError Attention.Float.BackwardChainError.
From Ojas Require Import Bounds.Rational Bounds.Attention Bounds.AttentionChain.
From Ojas Require Import Witnesses.Instances Witnesses.Bounds.Attention Witnesses.Attention.Float.ForwardError.
From Ojas Require Import Witnesses.Attention.Float.DvError Witnesses.Attention.Float.BackwardChainError.
Import ListNotations.
Open Scope R_scope.

Local Notation u := (ff_u (mp_a wM)).

Definition wq_c1 : Q := 12584804851093190408838234489473325902984431615230452687204 # 1606938044258990275541962092341162602522202993782792835301376.
Definition wq_c2 : Q := 96531089880536398082208538594196708360908662206272107 # 1606938044258990275541962092341162602522202993782792835301376.
Definition wq_c3 : Q := 1619522849110083465950800326830635928425187425398023287988580 # 1606938044258990275541962092341162602522202993782792835301376.
Definition wq_c0 : Q := 147866721819088134193 # 1606938044258990275541962092341162602522202993782792835301376.
Definition wq_cD : Q := 1134713450270745 # 1606938044258990275541962092341162602522202993782792835301376.
Definition wq_d0 : Q := 1125899906842624 # 1606938044258990275541962092341162602522202993782792835301376.
Definition wq_d1 : Q := 95780971304118053647396689196894323976171195136475136 # 1606938044258990275541962092341162602522202993782792835301376.
Definition wq_r : Q := 12581812386587682080746309695013235561379057433283578838346 # 1606938044258990275541962092341162602522202993782792835301376.
Definition wq_a : Q := 147867922765812724130 # 1606938044258990275541962092341162602522202993782792835301376.

(** [attn_grad_chain_q]'s answer at these constants (the values written out, checked by [vm_compute]). *)
Lemma wq_eq : attn_grad_chain_q wa_u wa_u wa_eta wa_eta wa_us wa_es wa_u 1 1 1 wa_el wa_u 0 wa_u 0 1 1 1 1 1 1 1 1 1 0 1
              = Some (wq_c1, wq_c2, wq_c3, wq_c0, wq_cD, wq_d0, wq_d1, wq_r, wq_a).
Proof.
  (* the lse's and the forward's bounds from Witnesses/Bounds/Attention.v, not computed again *)
  unfold attn_grad_chain_q; rewrite wa_lse_b_eq, wa_post_eq.
  lazymatch goal with |- _ = ?r => vm_cast_no_check (eq_refl r) end.
Qed.

(** ** The data's premises *)

Lemma wq_lg : forall x, / 2 <= x <= 2 * exp (Q2R 0) -> Rabs (wa_lg x - ln x / ln 2) <= Q2R wa_el.
Proof. intros x Hx; rewrite Q2R_0, exp_0, Rmult_1_r in Hx; rewrite wa_el_R; apply wa_lg_err; exact Hx. Qed.

Lemma wq_c2r : Rabs (wa_c * ln 2 - 1) <= Q2R wa_u.
Proof. rewrite wa_u_R; exact wv_c2. Qed.

Lemma wq_cs : Rabs (1 - Q2R 1) <= Q2R 0 * Q2R 1.
Proof. rewrite Q2R_1, Q2R_0, Rminus_diag_eq, Rabs_R0 by reflexivity; lra. Qed.

Lemma wq_row : fwd_row_ok [1] 1 1 1 1 (Q2R 1) (Q2R 1) wc_fvis wc_fts 1.
Proof. rewrite Q2R_1; exact wc_row. Qed.

Lemma wq_LSE : fwd_LSE (Q2R 1) [1] (wc_fvis 0%nat) (wc_fts 0%nat) = 1.
Proof.
  rewrite Q2R_1; unfold fwd_LSE, wc_fvis, wc_fts, wa_key; cbn [concat app filter map fst].
  rewrite ws_dot, rsum_cons; unfold rsum; simpl; rewrite Rplus_0_r, Rmult_1_l, ln_exp; reflexivity.
Qed.

Lemma wq_LSE_le : Rabs (fwd_LSE (Q2R 1) [1] (wc_fvis 0%nat) (wc_fts 0%nat)) <= Q2R 1.
Proof. rewrite wq_LSE, Q2R_1, Rabs_R1; lra. Qed.

Lemma wq_D : dot_R (fwd_O (Q2R 1) [1] wc_fvis wc_fts 1) [1] = 1.
Proof.
  rewrite Q2R_1; unfold fwd_O, wc_fvis, wc_fts, wa_key, exact_softmax; cbn [seq map concat app filter fst snd].
  rewrite ws_dot; unfold dot_R, rsum; simpl.
  pose proof (exp_pos (1 * 1)); field; lra.
Qed.

Lemma wq_keys : forall y, In y (concat [[([1], [1])]]) -> (fun _ : list R * list R => true) y = true ->
  length (fst y) = 1%nat /\ dot_abs [1] (fst y) <= Q2R 1
  /\ length (snd y) = 1%nat /\ dot_abs [1] (snd y) <= Q2R 1
  /\ Rabs (dot_R [1] (snd y) - dot_R (fwd_O (Q2R 1) [1] wc_fvis wc_fts 1) [1]) <= Q2R 1
  /\ Rabs (nth 0 (fst y) 0) <= Q2R 1.
Proof.
  intros y [<- | []] _; cbn [fst snd nth]; rewrite wq_D, ws_dot, wa_dot_abs, Q2R_1, Rabs_R1.
  rewrite Rminus_diag_eq, Rabs_R0 by reflexivity.
  repeat split; lra.
Qed.

Definition attn_dq_chain_q_sound_witness :=
  attn_dq_chain_q_sound wM wa_u wa_u wa_eta wa_eta wa_us wa_es wa_u 1 1 1 wa_el wa_u 0 wa_u 0 1 1 1 1 1 1 1 1 1 0 1
    wa_u_R wa_ue_R wa_ee_R wa_ea_R wa_us_R wa_es_R wq_c1 wq_c2 wq_c3 wq_c0 wq_cD wq_d0 wq_d1 wq_r wq_a wq_eq
    wa_lg wa_c wa_cl wa_c 1 [1] [1] wc_fvis wc_fts wc_shape (fun _ => true) 0 [[([1], [1])]] 1
    wq_lg wa_cl_R wa_c_R wq_c2r wq_cs wa_exp2_0 wq_row wq_LSE_le eq_refl (le_n 0) eq_refl
    ltac:(repeat constructor) eq_refl eq_refl wq_keys.

(** dK: one row of the unit type. *)
Definition wq_eD : R :=
  Q2R wq_d0 + Q2R wq_d1 * dot_abs (fwd_o wM wa_c [1] wc_fvis wc_fts 1) [1]
  + dot_R (map (fun w => Q2R wq_r * w + Q2R wq_a) (fwd_W (Q2R 1) [1] wc_fvis wc_fts 1)) (map Rabs [1]).

Lemma wq_rows : forall x, In x (concat [[tt]]) -> (fun _ : unit => true) x = true ->
  fwd_row_ok [1] 1 1 1 1 (Q2R 1) (Q2R 1) wc_fvis wc_fts 1 /\ dot_abs [1] [1] <= Q2R 1
  /\ Rabs (fwd_LSE (Q2R 1) [1] (wc_fvis 0%nat) (wc_fts 0%nat)) <= Q2R 1
  /\ leaves wc_shape = dot_terms (mp_a wM) (fwd_o wM wa_c [1] wc_fvis wc_fts 1) [1]
  /\ (depth wc_shape <= 1 - 1)%nat /\ wq_eD <= Rmax 0 wq_eD
  /\ length [1] = 1%nat /\ dot_abs [1] [1] <= Q2R 1
  /\ Rabs (dot_R [1] [1] - dot_R (fwd_O (Q2R 1) [1] wc_fvis wc_fts 1) [1]) <= Q2R 1
  /\ Rabs (nth 0 [1] 0) <= Q2R 1.
Proof.
  intros _ _ _; split; [exact wq_row |]; split; [rewrite wa_dot_abs, Q2R_1; lra |].
  split; [exact wq_LSE_le | split; [reflexivity | split; [simpl; lia | split; [apply Rmax_r |]]]].
  rewrite wq_D, ws_dot, wa_dot_abs, Q2R_1, Rminus_diag_eq, Rabs_R0 by reflexivity; cbn [nth]; rewrite Rabs_R1.
  repeat split; lra.
Qed.

Definition attn_dk_chain_q_sound_witness :=
  attn_dk_chain_q_sound wM wa_u wa_u wa_eta wa_eta wa_us wa_es wa_u 1 1 1 wa_el wa_u 0 wa_u 0 1 1 1 1 1 1 1 1 1 0 1
    wa_u_R wa_ue_R wa_ee_R wa_ea_R wa_us_R wa_es_R wq_c1 wq_c2 wq_c3 wq_c0 wq_cD wq_d0 wq_d1 wq_r wq_a wq_eq
    (fun _ : unit => [1]) (fun _ => [1]) (fun _ => wc_fvis) (fun _ => wc_fts) (fun _ => wc_shape) (fun _ => true)
    wa_lg wa_c wa_cl wa_c 1 [1] [1] 0 [[tt]] 1 (Rmax 0 wq_eD)
    wq_lg wa_cl_R wa_c_R wq_c2r wq_cs wa_exp2_0 eq_refl eq_refl ltac:(repeat constructor) eq_refl eq_refl
    (Rmax_l _ _) wq_rows.
