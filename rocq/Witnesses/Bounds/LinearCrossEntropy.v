(** * Witnesses of Bounds/LinearCrossEntropy.v (ojas_ref/verification/proof_audit.py): the oracle's
    values computed in Coq ([vm_compute]) for float32 ([bf16_fp32], [u = 2^-24],
    [eta = 2^-150]), [tl.exp] and [tl.log] the rounded [exp] and [ln]
    (Witnesses/Instances.v), one row of one logit, every premise proved together. *)

From Coq Require Import Reals QArith Qreals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision FloatModel.BlockedSum LinearCrossEntropy.Float.LseLossError.
From Ojas Require Import Bounds.Rational Bounds.LinearCrossEntropy Witnesses.Instances Witnesses.LinearCrossEntropy.Float.LseLossError.
Import ListNotations.
Open Scope R_scope.

Definition wq_u : Q := 1 # 16777216.
Definition wq_eta : Q := 1 # 1427247692705959881058285969449495136382746624.
Definition wq_el : Q := 2 * wq_u + wq_eta.

Lemma wq_u_R : Q2R wq_u = ff_u (mp_a wM).
Proof. rewrite w_u; unfold Q2R, wq_u; simpl; field. Qed.

Lemma wq_eta_R : Q2R wq_eta = ff_eta (mp_a wM).
Proof. rewrite w_eta; unfold Q2R, wq_eta; simpl; field. Qed.

Lemma wq_el_R : Q2R wq_el = w_el.
Proof.
  unfold wq_el, w_el; rewrite Q2R_plus, Q2R_mult, wq_u_R, wq_eta_R.
  replace (Q2R 2) with 2 by (unfold Q2R; simpl; field); reflexivity.
Qed.

Lemma wq_ex_err : forall x, x <= 0 -> Rabs (w_ex x - exp x) <= Q2R wq_u * exp x + Q2R wq_eta.
Proof. rewrite wq_u_R, wq_eta_R; exact w_ex_err_neg. Qed.

(** [tl.log]'s premise on [[1 / (1 + b), (1 + b) e]] for [0 <= b <= 1/4]: inside [[1/2, 4]]. *)
Lemma wq_lg_err : forall b, 0 <= Q2R b <= / 4 -> forall x, ff_fmt (mp_a wM) x ->
  / (1 + Q2R b) <= x <= (1 + Q2R b) * exp (Q2R 1) -> Rabs (w_lg x - ln x) <= Q2R wq_el.
Proof.
  intros b Hb x Hf [H1 H2]; rewrite wq_el_R; apply w_lg_err; [exact Hf |].
  rewrite Q2R_1 in H2; pose proof exp_le_3; pose proof (exp_pos 1).
  split.
  - eapply Rle_trans; [| exact H1]; apply Rinv_le_contravar; lra.
  - eapply Rle_trans; [exact H2 |].
    apply Rle_trans with (5 / 4 * 3); [apply Rmult_le_compat; lra | lra].
Qed.

(** The values below are [vm_compute]'s, written out (checked by the [_eq] lemmas). *)
Definition wq_lse_b : Q := 766248010210648680056314772939114821431851671554993165 # 1606938044258990275541962092341162602522202993782792835301376.

Lemma wq_lse_b_eq : ce_lse_q wq_u wq_u wq_eta wq_eta wq_el 0 0 1 0 1 1 1 = Some wq_lse_b.
Proof. vm_cast_no_check (eq_refl (Some wq_lse_b)). Qed.

Lemma wq_small : forall b, Qle_bool 0 b = true -> Qle_bool b (1 # 4) = true -> 0 <= Q2R b <= / 4.
Proof.
  intros b H0 H1; apply Qle_bool_imp_le, Qle_Rle in H0; apply Qle_bool_imp_le, Qle_Rle in H1.
  rewrite Q2R_0 in H0; unfold Q2R in H1 at 2; simpl in H1; lra.
Qed.

Lemma wq_row_ok : forall zy, In zy (concat [[(0, 0)]]) ->
  ff_fmt (mp_a wM) (fst zy) /\ Rabs (fst zy) <= Q2R 0 /\ Rabs (fst zy - snd zy) <= Q2R 0.
Proof. rewrite Q2R_0; exact w_row_ok. Qed.

Definition ce_lse_q_sound_witness :=
  ce_lse_q_sound wM wq_u wq_u wq_eta wq_eta wq_el 0 0 1 0 1 1 1 wq_u_R wq_eta_R wq_lse_b wq_lse_b_eq
    w_ex w_lg wq_ex_err w_lg_fmt (wq_lg_err wq_lse_b (wq_small wq_lse_b eq_refl eq_refl))
    (0, 0) [[(0, 0)]] (tile_sum (mp_a wM)) (or_introl eq_refl) (sum_ok_tile_sum wM 1)
    ltac:(repeat constructor) ltac:(cbn; lia) ltac:(cbn; lia) wq_row_ok.

Definition wq_merge_b : Q := 1245153523265822428694962665449618231305164008894808026 # 1606938044258990275541962092341162602522202993782792835301376.

Lemma wq_merge_b_eq : ce_merge_lse_q wq_u wq_u wq_eta wq_eta wq_el 0 0 1 0 1 1 1 0 1 1 1 1 = Some wq_merge_b.
Proof. vm_cast_no_check (eq_refl (Some wq_merge_b)). Qed.

Definition ce_merge_lse_q_sound_witness :=
  ltac:(refine (ce_merge_lse_q_sound wM wq_u wq_u wq_eta wq_eta wq_el 0 0 1 wq_u_R wq_eta_R 0 1 1 1 0 1 1 1 1
                  wq_merge_b wq_merge_b_eq w_ex w_lg wq_ex_err w_lg_fmt (wq_lg_err wq_merge_b (wq_small wq_merge_b eq_refl eq_refl))
                  (tile_sum (mp_a wM)) (tile_sum (mp_a wM)) [[(0, 0)]] [[ [[(0, 0)]] ]]
                  (or_introl eq_refl) (sum_ok_tile_sum wM 1) (sum_ok_tile_sum wM 1) _ _ _ _ _ _);
        first [ intros g Hg; destruct Hg as [Hg | []]; subst g; cbn; repeat split; [discriminate | repeat constructor; cbn; lia | lia | lia]
              | intros zy Hi; apply wq_row_ok; exact Hi
              | lazymatch goal with |- Forall _ _ => repeat constructor end | cbn; lia ]).
