(** * Witnesses of Bounds/Attention.v (ojas_ref/verification/proof_audit.py): the oracle's values
    computed in Coq ([vm_compute]) for [bf16_fp32] (fp32 [u = ue = 2^-24], [ea = ee = 2^-150],
    bf16 [us = 2^-8], [es = 2^-134]), [scale = 1], the fp32 constants [c = rnd (1 / ln 2)]
    ([uc = u]) and [cl = rnd (ln 2)] ([ucl = u]), [tl.log2] the exact [log2] rounded to fp32
    (within [u + eta] on [[1/2, 2]]), one query [[1]] and one key [[1]] of value [1]; every
    premise proved together.  The constants and lemmas here serve the witnesses of
    Attention/Float/{ForwardError,ForwardPosteriori,SavedLseError}.v too. *)

From Coq Require Import Reals QArith Qreals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision Attention.Float.OnlineSoftmaxTile.
From Ojas Require Import Attention.Float.ForwardError Attention.Float.SavedLseError Attention.Float.ForwardPosteriori.
From Ojas Require Import Bounds.Rational Bounds.Attention Witnesses.Instances.
Import ListNotations.
Open Scope R_scope.

(** ** The model's constants as rationals *)

Definition wa_u : Q := 1 # 16777216.
Definition wa_eta : Q := 1 # 1427247692705959881058285969449495136382746624.
Definition wa_us : Q := 1 # 256.
Definition wa_es : Q := 1 # 21778071482940061661655974875633165533184.
Definition wa_el : Q := wa_u + wa_eta.

Lemma wa_u_R : Q2R wa_u = ff_u (mp_a wM).
Proof. rewrite w_u; unfold Q2R, wa_u; simpl; field. Qed.

Lemma wa_ue_R : Q2R wa_u = mp_ue wM.
Proof. exact wa_u_R. Qed.

Lemma wa_ea_R : Q2R wa_eta = ff_eta (mp_a wM).
Proof. rewrite w_eta; unfold Q2R, wa_eta; simpl; field. Qed.

Lemma wa_ee_R : Q2R wa_eta = mp_eta_e wM.
Proof. exact wa_ea_R. Qed.

Lemma wa_us_R : Q2R wa_us = ff_u (mp_s wM).
Proof. change (ff_u (mp_s wM)) with (ff_u bf16); rewrite bf16_u; unfold Q2R, wa_us; simpl; field. Qed.

Lemma wa_es_R : Q2R wa_es = ff_eta (mp_s wM).
Proof.
  change (ff_eta (mp_s wM)) with (/ IZR 21778071482940061661655974875633165533184).
  unfold Q2R, wa_es; simpl; field.
Qed.

Lemma wa_el_R : Q2R wa_el = ff_u (mp_a wM) + ff_eta (mp_a wM).
Proof. unfold wa_el; rewrite Q2R_plus, wa_u_R, wa_ea_R; reflexivity. Qed.

(** ** The fp32 constants [c = rnd (1 / ln 2)] and [cl = rnd (ln 2)] *)

Lemma wa_xmin_le : forall x, / 2 <= x -> ff_xmin (mp_a wM) <= Rabs x.
Proof.
  intros x Hx; rewrite Rabs_right by lra.
  change (ff_xmin (mp_a wM)) with (bpow radix2 (-126)).
  apply Rle_trans with (bpow radix2 (-1)); [apply bpow_le; lia |].
  change (bpow radix2 (-1)) with (/ IZR 2); exact Hx.
Qed.

Definition wa_c : R := ff_rnd (mp_a wM) (/ ln 2).
Definition wa_cl : R := ff_rnd (mp_a wM) (ln 2).

Lemma wa_c_err : Rabs (wa_c * ln 2 - 1) <= ff_u (mp_a wM) * 1.
Proof.
  pose proof afe_ln2_bounds as [L1 L2].
  assert (Hi : / 2 <= / ln 2) by (apply Rinv_le_contravar; lra).
  pose proof (ff_rel_normal (mp_a wM) (/ ln 2) (wa_xmin_le _ Hi)) as H.
  replace (wa_c * ln 2 - 1) with ((wa_c - / ln 2) * ln 2) by (field; lra).
  rewrite Rabs_mult, (Rabs_right (ln 2)) by lra; unfold wa_c.
  rewrite (Rabs_right (/ ln 2)) in H by lra.
  apply Rle_trans with (ff_u (mp_a wM) * / ln 2 * ln 2); [apply Rmult_le_compat_r; lra |].
  right; field; lra.
Qed.

Lemma wa_cl_err : Rabs (wa_cl - ln 2) <= ff_u (mp_a wM) * ln 2.
Proof.
  pose proof afe_ln2_bounds as [L1 L2].
  pose proof (ff_rel_normal (mp_a wM) (ln 2) (wa_xmin_le _ (Rlt_le _ _ L1))) as H.
  rewrite (Rabs_right (ln 2)) in H by lra; exact H.
Qed.

(** ** [tl.log2]: [log2] rounded to fp32, within [u + eta] on [[1/2, 2]] (where [|log2 x| <= 1]) *)

Definition wa_lg (x : R) : R := ff_rnd (mp_a wM) (ln x / ln 2).

Lemma wa_lg_err : forall x, / 2 <= x <= 2 ->
  Rabs (wa_lg x - ln x / ln 2) <= ff_u (mp_a wM) + ff_eta (mp_a wM).
Proof.
  intros x [H1 H2]; unfold wa_lg.
  pose proof afe_ln2_bounds as [L1 L2].
  pose proof (ff_abs (mp_a wM) (ln x / ln 2)) as H.
  pose proof (ff_u_nonneg (mp_a wM)) as Hu.
  assert (Hl : Rabs (ln x / ln 2) <= 1).
  { assert (A1 : ln (/ 2) <= ln x) by (apply w_ln_le; lra).
    assert (A2 : ln x <= ln 2) by (apply w_ln_le; lra).
    rewrite ln_Rinv in A1 by lra.
    unfold Rdiv; rewrite Rabs_mult, (Rabs_right (/ ln 2)) by (left; apply Rinv_0_lt_compat; lra).
    apply Rmult_le_reg_r with (ln 2); [lra |].
    rewrite Rmult_assoc, Rinv_l, Rmult_1_r, Rmult_1_l by lra.
    apply Rabs_le; lra. }
  assert (ff_u (mp_a wM) * Rabs (ln x / ln 2) <= ff_u (mp_a wM) * 1) by (apply Rmult_le_compat_l; lra).
  lra.
Qed.

(** [tl.log2]'s premise on [[1 / (1 + b), (1 + b) e^0]] for [0 <= b <= 1]: inside [[1/2, 2]]. *)
Lemma wa_lg_range : forall b, 0 <= Q2R b <= 1 -> forall x,
  / (1 + Q2R b) <= x <= (1 + Q2R b) * exp (Q2R 0) -> Rabs (wa_lg x - ln x / ln 2) <= Q2R wa_el.
Proof.
  intros b Hb x [H1 H2]; rewrite wa_el_R; apply wa_lg_err.
  rewrite Q2R_0, exp_0 in H2; split; [| lra].
  eapply Rle_trans; [| exact H1]; apply Rinv_le_contravar; lra.
Qed.

Lemma wa_small : forall b, Qle_bool 0 b = true -> Qle_bool b 1 = true -> 0 <= Q2R b <= 1.
Proof.
  intros b H0 H1; apply Qle_bool_R in H0; apply Qle_bool_R in H1.
  rewrite Q2R_0 in H0; rewrite Q2R_1 in H1; lra.
Qed.

Lemma wa_c_R : Rabs (wa_c * ln 2 - Q2R 1) <= Q2R wa_u * Q2R 1.
Proof. rewrite Q2R_1, wa_u_R; exact wa_c_err. Qed.

Lemma wa_cl_R : Rabs (wa_cl - ln 2) <= Q2R wa_u * ln 2.
Proof. rewrite wa_u_R; exact wa_cl_err. Qed.

(** ** One query [[1]], one key [[1]] of value [1] *)

Definition wa_key : list R * R := ([1], 1).

Lemma wa_dot_abs : dot_abs [1] [1] = 1.
Proof. unfold dot_abs, rsum; simpl; rewrite Rmult_1_l, Rabs_R1; ring. Qed.

Lemma wa_keys : forall kv, In kv (concat [[wa_key]]) ->
  length (fst kv) = N.to_nat 1 /\ dot_abs [1] (fst kv) <= Q2R 1 /\ Rabs (snd kv) <= Q2R 1.
Proof.
  intros kv [<- | []]; cbn [fst snd wa_key]; rewrite wa_dot_abs, Q2R_1, Rabs_R1.
  split; [reflexivity | lra].
Qed.

Lemma wa_keys_vis : forall kv, In kv (concat [[wa_key]]) -> (fun _ : list R * R => true) kv = true ->
  length (fst kv) = N.to_nat 1 /\ dot_abs [1] (fst kv) <= Q2R 1 /\ Rabs (snd kv) <= Q2R 1.
Proof. intros kv Hk _; exact (wa_keys kv Hk). Qed.

Lemma wa_keys2 : forall kv, In kv (concat [[wa_key]]) ->
  length (fst kv) = N.to_nat 1 /\ dot_abs [1] (fst kv) <= Q2R 1.
Proof. intros kv Hk; destruct (wa_keys kv Hk) as [A [B _]]; split; assumption. Qed.

Lemma wa_keys2_vis : forall kv, In kv (concat [[wa_key]]) -> (fun _ : list R * R => true) kv = true ->
  length (fst kv) = N.to_nat 1 /\ dot_abs [1] (fst kv) <= Q2R 1.
Proof. intros kv Hk _; exact (wa_keys2 kv Hk). Qed.

Lemma wa_vis : exists kv, In kv (concat [[wa_key]]) /\ (fun _ : list R * R => true) kv = true.
Proof. exists wa_key; split; [left; reflexivity | reflexivity]. Qed.

Lemma wa_exp2_0 : mp_exp2 wM 0 = 1.
Proof. exact (mixed_fp32_exp2_0 bf16 bf16_in_fp32). Qed.

Lemma wa_tiles_B : Forall (fun tl : list (list R * R) => (length tl <= N.to_nat 1)%nat) [[wa_key]].
Proof. repeat constructor. Qed.

(** ** The oracle's values *)

(** The values below are [vm_compute]'s, written out (checked by the [_eq] lemmas). *)
Definition wa_fwd_b : Q := 12581810132053999937696558594263632197290277223702442288648 # 1606938044258990275541962092341162602522202993782792835301376.

Lemma wa_fwd_b_eq : attn_fwd_q wa_u wa_u wa_eta wa_eta wa_us wa_es wa_u 1 1 1 1 1 1 1 = Some wa_fwd_b.
Proof. lazymatch goal with |- _ = ?r => vm_cast_no_check (eq_refl r) end. Qed.

Definition wa_post_r : Q := 12581812386587682080746309695013235561379057433283578838346 # 1606938044258990275541962092341162602522202993782792835301376.
Definition wa_post_a : Q := 147867922765812724130 # 1606938044258990275541962092341162602522202993782792835301376.

Lemma wa_post_eq :
  attn_fwd_post_q wa_u wa_u wa_eta wa_eta wa_us wa_es wa_u 1 1 1 1 1 1 1 = Some (wa_post_r, wa_post_a).
Proof. lazymatch goal with |- _ = ?r => vm_cast_no_check (eq_refl r) end. Qed.

Definition wa_lse_b : Q := 2107183315458532675043376859036767420524743858776375340 # 1606938044258990275541962092341162602522202993782792835301376.

(** [round_up d q = n # d] from [n d - 1 < q d <= n d]: two products, no division. *)
Lemma round_up_of_check : forall d q n,
  (let '(Qmake a b) := q in
   Z.leb 0 (a * Zpos d + (Zpos b - 1) - Zpos b * n) && Z.ltb (a * Zpos d + (Zpos b - 1) - Zpos b * n) (Zpos b))%Z
  = true -> round_up d q = n # d.
Proof.
  intros d [a b] n H; apply andb_true_iff in H as [H1 H2]; apply Z.leb_le in H1; apply Z.ltb_lt in H2.
  unfold round_up; cbn [Qnum Qden]; f_equal; symmetry.
  apply (Z.div_unique _ _ _ (a * Zpos d + (Zpos b - 1) - Zpos b * n)%Z); [left; exact (conj H1 H2) | ring].
Qed.

Lemma wa_lse_b_eq : attn_lse_q wa_u wa_u wa_eta wa_eta wa_el wa_u wa_u 1 1 0 1 1 1 1 = Some wa_lse_b.
Proof.
  (* The vm computes all but the last [round_up] and its argument (abstracted as [g], [h]: bound
     variables, which the kernel's vm does not unfold); [round_up_of_check] then replaces the
     division of that argument's long numerator by its denominator (3 s in the vm). *)
  unfold attn_lse_q; pattern round_up, lse_bound_q.
  lazymatch goal with |- ?F _ _ => assert (HF : forall g h, g = round_up -> h = lse_bound_q -> F g h) end.
  { intros g h Eg Eh; vm_compute; subst g h; apply (f_equal Some).
    apply round_up_of_check; vm_cast_no_check (eq_refl true). }
  exact (HF _ _ eq_refl eq_refl).
Qed.

Lemma wa_lse_b_small : 0 <= Q2R wa_lse_b <= 1.
Proof. apply wa_small; vm_compute; reflexivity. Qed.

(** ** The witnesses *)

Definition attn_fwd_q_sound_witness :=
  attn_fwd_q_sound wM wa_u wa_u wa_eta wa_eta wa_us wa_es wa_u 1 1 1 1 1 1 1
    wa_u_R wa_ue_R wa_ee_R wa_ea_R wa_us_R wa_es_R wa_fwd_b wa_fwd_b_eq
    [1] wa_c wa_key [] [] eq_refl wa_keys wa_c_R wa_tiles_B (le_n 1) (le_n 1).

Definition attn_fwd_q_sound_masked_witness :=
  attn_fwd_q_sound_masked wM wa_u wa_u wa_eta wa_eta wa_us wa_es wa_u 1 1 1 1 1 1 1
    wa_u_R wa_ue_R wa_ee_R wa_ea_R wa_us_R wa_es_R wa_fwd_b wa_fwd_b_eq
    [1] wa_c (fun _ => true) [[wa_key]] wa_exp2_0 wa_vis eq_refl wa_keys_vis wa_c_R wa_tiles_B (le_n 1) (le_n 1).

Definition attn_fwd_post_q_sound_witness :=
  attn_fwd_post_q_sound wM wa_u wa_u wa_eta wa_eta wa_us wa_es wa_u 1 1 1 1 1 1 1
    wa_u_R wa_ue_R wa_ee_R wa_ea_R wa_us_R wa_es_R wa_post_r wa_post_a wa_post_eq
    [1] wa_c wa_key [] [] eq_refl wa_keys wa_c_R wa_tiles_B (le_n 1) (le_n 1).

Definition attn_fwd_post_q_sound_masked_witness :=
  attn_fwd_post_q_sound_masked wM wa_u wa_u wa_eta wa_eta wa_us wa_es wa_u 1 1 1 1 1 1 1
    wa_u_R wa_ue_R wa_ee_R wa_ea_R wa_us_R wa_es_R wa_post_r wa_post_a wa_post_eq
    [1] wa_c (fun _ => true) [[wa_key]] wa_exp2_0 wa_vis eq_refl wa_keys_vis wa_c_R wa_tiles_B (le_n 1) (le_n 1).

Definition attn_lse_q_sound_witness :=
  attn_lse_q_sound wM wa_u wa_u wa_eta wa_eta wa_u 1 1 1 1 1 1
    wa_u_R wa_ue_R wa_ee_R wa_ea_R wa_el wa_u 0 wa_lse_b wa_lse_b_eq
    wa_lg wa_cl (wa_lg_range wa_lse_b wa_lse_b_small) wa_cl_R
    [1] wa_c wa_key [] [] eq_refl wa_keys2 wa_c_R wa_tiles_B (le_n 1) (le_n 1).

Definition attn_lse_q_sound_masked_witness :=
  attn_lse_q_sound_masked wM wa_u wa_u wa_eta wa_eta wa_u 1 1 1 1 1 1
    wa_u_R wa_ue_R wa_ee_R wa_ea_R wa_el wa_u 0 wa_lse_b wa_lse_b_eq
    wa_lg wa_cl (wa_lg_range wa_lse_b wa_lse_b_small) wa_cl_R
    [1] wa_c (fun _ => true) [[wa_key]] wa_exp2_0 wa_vis eq_refl wa_keys2_vis wa_c_R wa_tiles_B (le_n 1) (le_n 1).
