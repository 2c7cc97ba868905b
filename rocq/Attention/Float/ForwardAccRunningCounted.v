(** * The forward's running bound with the tiles that leave the running max unchanged charged less.

    The kernel ([kernels/ojas_kernels/attention_forward.py]) rescales [l] and [acc] at every
    key tile by [alpha = exp2 (rnd (m - m'))].  OnlineSoftmaxTile.v's [run_inv] charges every
    tile [l]'s factor [cg = (1 + ue) (1 + u)^2] (alpha's relative error, the rounding of
    [l * alpha], the sum), so ForwardError.v's [afe_bL] carries [cg^Tt - 1 ~ Tt (ue + 2 u)]:
    on the H100's float32 forward ([ue = 8 u], 256 tiles at S = 16384) that is most of the
    bound's factor of [W].  Where the running max does not change, [m' = m], the kernel's
    [alpha = exp2 (rnd 0) = exp2 0 = 1] exactly ([mp_exp2 M 0 = 1], a premise the device
    record checks) and [rnd (l * 1) = l] ([l] a float): only the sum's rounding is left.

    Results:
    - [same_max_step]: such a tile multiplies the factor by [(1 + u)] only;
      [run_inv_counted]: [run_inv] with [j] max-changing tiles ([nchg]) and [i] others
      ([nsame]), the factor [Gc j i m = H cg^j (1 + u)^i 2^(u (m - m0))], for any
      [CGc >= cg^C (1 + u)^Tt] with [j <= C] (the absolute term [Rc] as [Rk] at [CGc]);
      [l_fold_inv_counted] its instance for [l]; [counted_bL_apriori]: its closed form is
      [afe_bL] at [CG := CGc].
    - [nchg_le_nrec], [nchg_first]: with [lo x <= sc x ln 2 <= hi x] for every key (the
      computed scores [sc] against the exact [scale q.k] and per-key errors [d]:
      [lo = scale q.k - d], [hi = scale q.k + d]), the max-changing tiles number at most
      [nrec]: the keys after the row's first visible key whose [hi] exceeds every [lo]
      before them (in the kernel's key order).
    - [l_fold_rel_counted]: [l]'s relative bound [l_fold_rel] (SavedLseError.v) at [CG := CGc]
      when [nchg <= C]; [nchg_kv_le]: that count from the exact scores and [d].
    - [attention_forward_acc_running_counted_pp] (PerPairScoreError.v's
      [attention_forward_acc_running_pp_gen] at [l_fold_rel_counted], as
      [attention_forward_acc_running_pp] is at [l_fold_rel_uniform]) and its H100 instances
      [attention_forward_acc_running_counted_tf32x3_op_pp], [_counted_tc_op_pp]: all premises
      of those, plus [cg^C (1 + u)^Tt <= CGc], [afe_bL .. CGc .. < 1] and
        nrec lo hi (lo k0) rest <= C   ([k0 :: rest] the row's visible keys in order);
      the bound is theirs with [CG := CGc] in [afr_rel], [afr_C], [afr_ypp], [afr_abs]
      (only through [afe_bL]).  [acc]'s fold is unchanged (ForwardAccRunning.v's
      [acc_kernel_running]: its rate [afr_gb] is mostly the P.V dot's [g_rel]).
    - The saved lse: [attention_lse_error_dot_counted_pp], [attention_lse_error_masked_dot_counted_pp]
      (SavedLseError.v's [attention_lse_error_dot_gen] and PerPairScoreError.v's
      [attention_lse_error_masked_dot_pp_gen] at [l_fold_rel_counted], as
      [attention_lse_error_dot_pp], [_masked_dot_pp] are at [l_fold_rel_uniform]) and the H100 instances [attention_lse_error_masked_counted_tf32x3_op_pp], [_tc_op_pp]:
      their premises with [cg^Tt <= CG] replaced by [cg^C (1 + u)^Tt <= CGc], [bL] (in
      [bL < 1], [NL >= - ln (1 - bL)] and the log2's domain) at [CGc], plus [mp_exp2 M 0 = 1]
      and the count [nrec .. <= C]; the bound [lse_bound] is theirs (smaller through [NL]).

    Not covered: as PerPairScoreError.v; the caller's count ([nrec]) must use upper bounds of
    [hi] and lower bounds of [lo]. *)

From Coq Require Import Reals ZArith List Lra Lia Arith.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.DotError.
From Ojas Require Import FloatModel.MixedPrecision FloatModel.BlockedSum FloatModel.TensorCoreSum FloatModel.Tf32Product.
From Ojas Require Import FloatModel.Notations.
From Ojas Require Import Attention.Float.OnlineSoftmaxError Attention.Float.OnlineSoftmaxTile Attention.Float.ForwardError.
From Ojas Require Import Attention.Float.NumeratorError Attention.Float.ForwardPosteriori Attention.Float.ForwardAccError.
From Ojas Require Import Attention.Float.RunningAccError Attention.Float.ForwardAccRunning Attention.Float.SavedLseError.
From Ojas Require Import Attention.Float.PerPairScoreError.
Import ListNotations.
Open Scope R_scope.

Section Counted.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

Hypothesis Hexp0 : exp2 0 = 1.

Lemma cf_one_le_mult : forall a b, 1 <= a -> 1 <= b -> 1 <= a * b.
Proof. intros; nra. Qed.

(** A tile that leaves the running max [m] unchanged: [rnd (rnd (x * exp2 (rnd (m - m))) + y) = rnd (x + y)]. *)
Lemma same_max_step : forall G R x X S H Ry y Y T m,
  1 <= G -> 0 <= R -> 1 <= H -> 0 <= Ry -> fmt x -> fmt y ->
  Rabs X <= S -> Rabs Y <= T -> inv G R x X S -> inv H Ry y Y T ->
  inv (Rmax G H * (1 + u)) ((R + Ry) * (1 + u)) (rnd (rnd (x * exp2 (rnd (m - m))) + y))
      (X * Rpower 2 (m - m) + Y) (S * Rpower 2 (m - m) + T).
Proof.
  intros G R x X S H Ry y Y T m HG HR HH HRy Fx Fy HX HY Cx Cy.
  rewrite Rminus_diag_eq by reflexivity.
  rewrite (ff_rnd_id A_ 0 (ff_fmt_0 A_)), Hexp0, Rpower_O by lra.
  rewrite !Rmult_1_r, (ff_rnd_id A_ x Fx).
  apply inv_add; assumption.
Qed.

Section Fold.

Variable Key : Type.
Variable sc : Key -> R.
Variable P : Key -> Prop.
Variables yf Yf Tf : R -> list Key -> R.
Variables K H Ry Sb m0 : R.
Variables B N Tt : nat.

Hypothesis HH : 1 <= H.
Hypothesis HRy : 0 <= Ry.
Hypothesis HSb : 0 <= Sb.
Hypothesis yf_fmt : forall m tl, fmt (yf m tl).
Hypothesis tile_ok : forall m tl, fmt m -> (length tl <= B)%nat ->
  (forall k, In k tl -> P k /\ fmt (sc k) /\ sc k <= m /\ m - sc k <= K) ->
  inv H Ry (yf m tl) (Yf m tl) (Tf m tl).
Hypothesis Y_abs : forall m tl, Rabs (Yf m tl) <= Tf m tl.
Hypothesis Y_resc : forall m m' tl, Yf m tl * Rpower 2 (m - m') = Yf m' tl.
Hypothesis T_resc : forall m m' tl, Tf m tl * Rpower 2 (m - m') = Tf m' tl.
Hypothesis Y_app : forall m a b, Yf m (a ++ b) = Yf m a + Yf m b.
Hypothesis T_app : forall m a b, Tf m (a ++ b) = Tf m a + Tf m b.
Hypothesis T_bound : forall m seen, (forall k, In k seen -> P k /\ sc k <= m) ->
  (length seen <= N)%nat -> Tf m seen <= Sb.

(** At most [C] max-changing tiles: [CGc] bounds the factor's growth. *)
Variable C : nat.
Variable CGc : R.
Hypothesis HCGc : cg M ^ C * (1 + u) ^ Tt <= CGc.

(** The number of tiles at which the running max changes, and of those at which it does not. *)
Fixpoint nchg (m : R) (tiles : list (list Key)) : nat :=
  match tiles with
  | nil => 0
  | tl :: rest => ((if Req_EM_T (tmax Key sc m tl) m then 0 else 1) + nchg (tmax Key sc m tl) rest)%nat
  end.

Fixpoint nsame (m : R) (tiles : list (list Key)) : nat :=
  match tiles with
  | nil => 0
  | tl :: rest => ((if Req_EM_T (tmax Key sc m tl) m then 1 else 0) + nsame (tmax Key sc m tl) rest)%nat
  end.

Lemma nchg_nsame : forall tiles m, (nchg m tiles + nsame m tiles)%nat = length tiles.
Proof.
  induction tiles as [|tl rest IH]; intros m; [reflexivity |].
  cbn [nchg nsame length]; specialize (IH (tmax Key sc m tl)).
  destruct (Req_EM_T (tmax Key sc m tl) m); lia.
Qed.

(** The factor after [j] max-changing and [i] other tiles. *)
Definition Gc (j i : nat) (m : R) : R := H * cg M ^ j * (1 + u) ^ i * Rpower 2 (u * (m - m0)).

Lemma one_le_u : 1 <= 1 + u.
Proof. pose proof (ff_u_nonneg A_); lra. Qed.

Lemma u_le_cg : 1 + u <= cg M.
Proof.
  unfold cg; pose proof (ff_u_nonneg A_); pose proof (mp_ue_nonneg M).
  assert (1 + u <= (1 + u) ^ 2) by (cbn; nra). nra.
Qed.

Lemma Gc_ge_1 : forall j i m, m0 <= m -> 1 <= Gc j i m.
Proof.
  intros j i m Hm; unfold Gc; pose proof (cg_ge_1 M); pose proof one_le_u; pose proof (ff_u_nonneg A_).
  assert (1 <= cg M ^ j) by (apply pow_R1_Rle; lra).
  assert (1 <= (1 + u) ^ i) by (apply pow_R1_Rle; lra).
  assert (1 <= Rpower 2 (u * (m - m0))) by (apply ose_rpow_ge_1; nra).
  assert (1 <= H * cg M ^ j) by nra.
  assert (1 <= H * cg M ^ j * (1 + u) ^ i) by nra.
  nra.
Qed.

(** The a-priori factor ([Gb] of OnlineSoftmaxTile.v at [CGc]) and the absolute term. *)
Definition Gbc : R := H * CGc * Rpower 2 (u * K).
Definition dRc : R := ((Gbc * Sb * ee) * (1 + u) + ea + Ry) * (1 + u).
Definition Rc (k : nat) : R := INR k * cr M ^ k * dRc.

Lemma count_le_CGc : forall j i, (j <= C)%nat -> (j + i <= Tt)%nat -> cg M ^ j * (1 + u) ^ i <= CGc.
Proof.
  intros j i Hj Hji.
  pose proof (cg_ge_1 M); pose proof one_le_u.
  assert (cg M ^ j <= cg M ^ C) by (apply Rle_pow; [lra | lia]).
  assert ((1 + u) ^ i <= (1 + u) ^ Tt) by (apply Rle_pow; [lra | lia]).
  assert (0 <= cg M ^ j) by (apply pow_le; lra).
  assert (0 <= (1 + u) ^ i) by (apply pow_le; lra).
  eapply Rle_trans; [| exact HCGc]; apply Rmult_le_compat; lra.
Qed.

Lemma CGc_ge_1 : 1 <= CGc.
Proof.
  pose proof (count_le_CGc 0 0 (Nat.le_0_l _) (Nat.le_0_l _)); cbn [pow] in H0; lra.
Qed.

Lemma dRc_nonneg : 0 <= dRc.
Proof.
  unfold dRc, Gbc; pose proof (ff_u_nonneg A_); pose proof (mp_eta_e_nonneg M); pose proof (ff_eta_nonneg A_).
  pose proof CGc_ge_1; pose proof (Rpower_pos (u * K)).
  assert (0 <= H * CGc * Rpower 2 (u * K)) by (apply Rmult_le_pos; [nra | lra]).
  assert (0 <= H * CGc * Rpower 2 (u * K) * Sb * ee) by (apply Rmult_le_pos; [nra | lra]).
  nra.
Qed.

Lemma Rc_nonneg : forall k, 0 <= Rc k.
Proof.
  intros k; unfold Rc; pose proof dRc_nonneg; pose proof (cr_ge_1 M); pose proof (pos_INR k).
  assert (1 <= cr M ^ k) by (apply pow_R1_Rle; lra).
  apply Rmult_le_pos; [nra | lra].
Qed.

Lemma Gc_le_Gbc : forall j i m, (j <= C)%nat -> (j + i <= Tt)%nat -> m0 <= m -> m - m0 <= K -> Gc j i m <= Gbc.
Proof.
  intros j i m Hj Hji Hm HmK; unfold Gc, Gbc.
  pose proof (cg_ge_1 M); pose proof one_le_u; pose proof (ff_u_nonneg A_).
  assert (E3 : cg M ^ j * (1 + u) ^ i <= CGc) by (apply count_le_CGc; assumption).
  assert (1 <= cg M ^ j) by (apply pow_R1_Rle; lra).
  assert (1 <= (1 + u) ^ i) by (apply pow_R1_Rle; lra).
  assert (Rpower 2 (u * (m - m0)) <= Rpower 2 (u * K)) by (apply ost_rpow_le; nra).
  pose proof (Rpower_pos (u * (m - m0))).
  replace (H * cg M ^ j * (1 + u) ^ i) with (H * (cg M ^ j * (1 + u) ^ i)) by ring.
  assert (0 <= cg M ^ j * (1 + u) ^ i) by nra.
  apply Rmult_le_compat; [apply Rmult_le_pos; lra | lra | apply Rmult_le_compat_l; lra | lra].
Qed.

Lemma Rc_step_same : forall k R0, R0 <= Rc k -> (R0 + Ry) * (1 + u) <= Rc (S k).
Proof.
  intros k R0 HR.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (mp_eta_e_nonneg M); pose proof (ff_eta_nonneg A_).
  pose proof (cr_ge_1 M) as Hcr; pose proof dRc_nonneg as Hd.
  pose proof (Rc_nonneg k) as Hk.
  assert (Hcu : 1 + u <= cr M)
    by (unfold cr; pose proof (mp_ue_nonneg M); assert (1 + u <= (1 + u) ^ 2) by (cbn; nra); nra).
  assert (HRyd : Ry * (1 + u) <= dRc).
  { unfold dRc, Gbc; pose proof CGc_ge_1; pose proof (Rpower_pos (u * K)).
    assert (0 <= H * CGc * Rpower 2 (u * K) * Sb * ee * (1 + u)).
    { apply Rmult_le_pos; [apply Rmult_le_pos; [apply Rmult_le_pos; [apply Rmult_le_pos; [nra | lra] | lra] | lra] | lra]. }
    nra. }
  assert (HR0 : (R0 + Ry) * (1 + u) <= cr M * Rc k + dRc).
  { assert (R0 * (1 + u) <= Rc k * cr M).
    { destruct (Rle_dec 0 R0) as [Hp | Hp].
      - apply Rmult_le_compat; lra.
      - assert (R0 * (1 + u) <= 0) by nra. nra. }
    nra. }
  eapply Rle_trans; [exact HR0 |].
  unfold Rc; rewrite S_INR; cbn [pow]; pose proof (pos_INR k).
  assert (1 <= cr M ^ k) by (apply pow_R1_Rle; lra).
  assert (dRc <= cr M * cr M ^ k * dRc) by (assert (1 <= cr M * cr M ^ k) by nra; nra).
  unfold Rc in *; nra.
Qed.

Lemma H_le_Gc : forall j i m, m0 <= m -> H <= Gc j i m.
Proof.
  intros j i m Hm; unfold Gc; pose proof (cg_ge_1 M); pose proof one_le_u; pose proof (ff_u_nonneg A_).
  assert (1 <= cg M ^ j) by (apply pow_R1_Rle; lra).
  assert (1 <= (1 + u) ^ i) by (apply pow_R1_Rle; lra).
  assert (1 <= Rpower 2 (u * (m - m0))) by (apply ose_rpow_ge_1; nra).
  assert (1 <= cg M ^ j * (1 + u) ^ i * Rpower 2 (u * (m - m0))) by (apply cf_one_le_mult; [apply cf_one_le_mult |]; lra).
  replace (H * cg M ^ j * (1 + u) ^ i * Rpower 2 (u * (m - m0)))
    with (H * (cg M ^ j * (1 + u) ^ i * Rpower 2 (u * (m - m0)))) by ring.
  nra.
Qed.

Lemma Rmax_mul_le : forall a b c d, 0 <= c -> a * c <= d -> b * c <= d -> Rmax a b * c <= d.
Proof. intros a b c d Hc Ha Hb; unfold Rmax; destruct (Rle_dec a b); assumption. Qed.

(** [run_inv] with the tiles counted: [j] max-changing and [i] others so far. *)
Lemma run_inv_counted : forall tiles j i m x seen,
  fmt m -> fmt x -> m0 <= m ->
  (forall q, In q seen -> P q /\ sc q <= m) ->
  (forall q, In q (concat tiles) -> P q /\ fmt (sc q) /\ mrun Key sc m tiles - sc q <= K) ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length seen + length (concat tiles) <= N)%nat ->
  (j + i + length tiles <= Tt)%nat -> (j + nchg m tiles <= C)%nat ->
  mrun Key sc m tiles - m0 <= K ->
  inv (Gc j i m) (Rc (j + i)) x (Yf m seen) (Tf m seen) ->
  inv (Gc (j + nchg m tiles) (i + nsame m tiles) (mrun Key sc m tiles)) (Rc (j + i + length tiles))
      (run M Key sc yf m x tiles) (Yf (mrun Key sc m tiles) (seen ++ concat tiles))
      (Tf (mrun Key sc m tiles) (seen ++ concat tiles)).
Proof.
  induction tiles as [|tl rest IH]; intros j i m x seen Fm Fx Hm0 Hseen Hks HB HN HT HC HK Ci.
  - cbn [run mrun length concat nchg nsame]; rewrite !Nat.add_0_r, app_nil_r; exact Ci.
  - cbn [run mrun length nchg nsame] in *.
    pose proof (ff_u_nonneg A_) as Hu; pose proof (mp_ue_nonneg M) as Hue.
    pose proof (mp_eta_e_nonneg M) as Hee; pose proof (ff_eta_nonneg A_) as Hea.
    set (m' := tmax Key sc m tl) in *.
    assert (Ftl : forall q, In q tl -> fmt (sc q))
      by (intros q Hq; apply Hks; apply (concat_cons_in Key); left; exact Hq).
    destruct (tmax_props M Key sc tl m Fm Ftl) as [Fm' [Hmm' Htl]]; fold m' in Fm', Hmm', Htl.
    assert (Frest : forall q, In q (concat rest) -> fmt (sc q))
      by (intros q Hq; apply Hks; apply (concat_cons_in Key); right; exact Hq).
    pose proof (mrun_ge M Key sc rest m' Fm' Frest) as Hmr.
    inversion HB as [|tl' rest' HBtl HBrest]; subst.
    assert (Ct : inv H Ry (yf m' tl) (Yf m' tl) (Tf m' tl)).
    { apply tile_ok; [exact Fm' | exact HBtl |].
      intros q Hq; destruct (Hks q (proj2 (concat_cons_in Key _ _ _) (or_introl Hq))) as [Pq [Fq Kq]].
      split; [exact Pq | split; [exact Fq | split; [apply Htl, Hq | pose proof (Htl q Hq); lra]]]. }
    assert (HS : Rabs (Yf m seen) <= Tf m seen) by apply Y_abs.
    assert (HG1 : 1 <= Gc j i m) by (apply Gc_ge_1, Hm0).
    pose proof (Rc_nonneg (j + i)) as HRk.
    assert (HS0p : 0 <= Tf m seen) by (eapply Rle_trans; [apply Rabs_pos | exact HS]).
    assert (Hseen' : forall q, In q (seen ++ tl) -> P q /\ sc q <= m').
    { intros q Hq; apply in_app_or in Hq; destruct Hq as [Hq | Hq].
      - destruct (Hseen q Hq); split; [assumption | lra].
      - split; [apply (Hks q (proj2 (concat_cons_in Key _ _ _) (or_introl Hq))) | apply Htl, Hq]. }
    assert (Hks' : forall q, In q (concat rest) -> P q /\ fmt (sc q) /\ mrun Key sc m' rest - sc q <= K)
      by (intros q Hq; apply (Hks q (proj2 (concat_cons_in Key _ _ _) (or_intror Hq)))).
    assert (HN' : (length (seen ++ tl) + length (concat rest) <= N)%nat)
      by (rewrite app_length; simpl in HN; rewrite app_length in HN; lia).
    cbn [concat]; rewrite app_assoc.
    destruct (Req_EM_T m' m) as [Em | Ne].
    + (* the running max is unchanged: alpha = 1 exactly *)
      clearbody m'; subst m'.
      pose proof (same_max_step (Gc j i m) (Rc (j + i)) x (Yf m seen) (Tf m seen) H Ry
                    (yf m tl) (Yf m tl) (Tf m tl) m HG1 HRk HH HRy Fx (yf_fmt m tl) HS (Y_abs m tl) Ci Ct) as Cs.
      rewrite Y_resc, T_resc, <- Y_app, <- T_app in Cs.
      replace (i + (1 + nsame m rest))%nat with (S i + nsame m rest)%nat by lia.
      replace (j + (0 + nchg m rest))%nat with (j + nchg m rest)%nat by lia.
      replace (j + i + S (length rest))%nat with (j + S i + length rest)%nat by lia.
      apply IH; auto; try lia; [apply ff_rnd_fmt |].
      eapply inv_mono; [eapply Rle_trans; [apply Rabs_pos | apply Y_abs] | | | exact Cs].
      * pose proof (H_le_Gc j i m Hm0).
        assert (EG : Gc j i m * (1 + u) = Gc j (S i) m) by (unfold Gc; cbn [pow]; ring).
        apply Rmax_mul_le; [lra | lra |].
        rewrite <- EG; apply Rmult_le_compat_r; lra.
      * replace (j + S i)%nat with (S (j + i)) by lia; apply Rc_step_same; lra.
    + (* the running max changes: [rescale_step] *)
      pose proof (rescale_step M (Gc j i m) (Rc (j + i)) x (Yf m seen) (Tf m seen) H Ry
                    (yf m' tl) (Yf m' tl) (Tf m' tl) m m'
                    HG1 HRk HH HRy Fx (yf_fmt m' tl) Fm Fm' Hmm' HS (Y_abs m' tl) Ci Ct) as Cs.
      rewrite Y_resc, T_resc, <- Y_app, <- T_app in Cs.
      replace (i + (0 + nsame m' rest))%nat with (i + nsame m' rest)%nat by lia.
      replace (j + (1 + nchg m' rest))%nat with (S j + nchg m' rest)%nat by lia.
      replace (j + i + S (length rest))%nat with (S j + i + length rest)%nat by lia.
      apply IH; auto; try lia; [apply ff_rnd_fmt | lra |].
      eapply inv_mono; [eapply Rle_trans; [apply Rabs_pos | apply Y_abs] | | | exact Cs].
      * (* the factor *)
        assert (EG : Gc j i m * exp2_factor M m m' * (1 + u) * (1 + u) = Gc (S j) i m').
        { unfold Gc, exp2_factor, cg; cbn [pow].
          replace (u * (m' - m0)) with (u * (m - m0) + u * (m' - m)) by ring.
          rewrite Rpower_plus; ring. }
        apply Rmax_mul_le; [lra | rewrite EG; lra |].
        pose proof (H_le_Gc (S j) i m' ltac:(lra)) as HGc.
        assert (H * (1 + u) <= H * cg M) by (apply Rmult_le_compat_l; [lra | apply u_le_cg]).
        assert (H * cg M <= Gc (S j) i m').
        { unfold Gc; cbn [pow].
          pose proof (cg_ge_1 M); pose proof one_le_u.
          assert (1 <= cg M ^ j) by (apply pow_R1_Rle; lra).
          assert (1 <= (1 + u) ^ i) by (apply pow_R1_Rle; lra).
          assert (1 <= Rpower 2 (u * (m' - m0))) by (apply ose_rpow_ge_1; nra).
          assert (1 <= cg M ^ j * (1 + u) ^ i * Rpower 2 (u * (m' - m0)))
            by (apply cf_one_le_mult; [apply cf_one_le_mult |]; lra).
          replace (H * (cg M * cg M ^ j) * (1 + u) ^ i * Rpower 2 (u * (m' - m0)))
            with (H * cg M * (cg M ^ j * (1 + u) ^ i * Rpower 2 (u * (m' - m0)))) by ring.
          assert (0 <= H * cg M) by nra.
          nra. }
        lra.
      * (* the absolute term, as [run_inv] *)
        set (S0 := Tf m seen) in *.
        assert (HS0 : S0 <= Sb).
        { apply T_bound; [exact Hseen |].
          simpl in HN; rewrite app_length in HN; lia. }
        assert (HGb : Gc j i m <= Gbc) by (apply Gc_le_Gbc; [lia | lia | lra | lra]).
        pose proof (alpha_factor_le M m m' Hmm') as Ha.
        pose proof (Rpower_pos (m - m')) as Hap.
        pose proof (exp2_factor_ge_1 M m m' Hmm') as HE.
        pose proof dRc_nonneg as Hd.
        pose proof (cr_ge_1 M) as Hcr.
        assert (Hcrk : 1 <= cr M ^ (j + i)) by (apply pow_R1_Rle; lra).
        set (R0 := Rc (j + i)) in *.
        set (a := Rpower 2 (m - m')) in *.
        set (E := exp2_factor M m m') in *.
        set (G0 := Gc j i m) in *.
        assert (E1 : R0 * (a * E + mp_eta_e M) <= R0 * (1 + ue + mp_eta_e M)) by (apply Rmult_le_compat_l; lra).
        assert (E2 : G0 * S0 * mp_eta_e M <= Gbc * Sb * mp_eta_e M)
          by (apply Rmult_le_compat_r; [lra | apply Rmult_le_compat; lra]).
        assert (E3 : ((R0 * (a * E + mp_eta_e M) + G0 * S0 * mp_eta_e M) * (1 + u) + ff_eta A_ + Ry) * (1 + u)
                     <= cr M * R0 + dRc).
        { unfold cr, dRc; simpl.
          assert ((R0 * (a * E + mp_eta_e M) + G0 * S0 * mp_eta_e M) * (1 + u)
                  <= (R0 * (1 + ue + mp_eta_e M) + Gbc * Sb * mp_eta_e M) * (1 + u))
            by (apply Rmult_le_compat_r; lra).
          nra. }
        eapply Rle_trans; [exact E3 |].
        replace (S j + i)%nat with (S (j + i)) by lia.
        unfold R0, Rc; rewrite S_INR; cbn [pow].
        pose proof (pos_INR (j + i)).
        assert (dRc <= cr M * cr M ^ (j + i) * dRc)
          by (assert (1 <= cr M * cr M ^ (j + i)) by nra; nra).
        unfold R0, Rc in *; nra.
Qed.

End Fold.

(** The instance for [l] ([l_fold_inv] with the tiles counted): after the tiles, from [l = 0] at [m0],
    [inv (H_l cg^j (1 + u)^i 2^(u (m_t - m0))) (Rc t) l_t L_t L_t], [j] the tiles at which the
    running max changes ([nchg], at most [C]), [i] the others ([nsame]). *)
Lemma l_fold_inv_counted : forall (K m0 : R) (B N Tt C : nat) (CGc : R) tiles,
  0 <= K -> fmt m0 -> (1 <= B)%nat -> cg M ^ C * (1 + u) ^ Tt <= CGc ->
  (forall s, In s (concat tiles) -> fmt s /\ m_run m0 tiles - s <= K) ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (concat tiles) <= N)%nat -> (length tiles <= Tt)%nat -> (nchg R (fun s => s) m0 tiles <= C)%nat ->
  m_run m0 tiles - m0 <= K ->
  inv (Gc (H_l M K B) m0 (nchg R (fun s => s) m0 tiles) (nsame R (fun s => s) m0 tiles) (m_run m0 tiles))
      (Rc K (H_l M K B) (Ry_l M B) (INR N) CGc (length tiles))
      (l_run M m0 0 tiles) (exact_l (m_run m0 tiles) (concat tiles)) (exact_l (m_run m0 tiles) (concat tiles)).
Proof.
  intros K m0 B N Tt C CGc tiles HK Fm0 HB HCGc Hks HBt HN HT HC HK0.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (mp_eta_e_nonneg M) as Hee.
  assert (HE := tile_E_ge_1 M K HK).
  assert (HP : 1 <= (1 + u) ^ (B - 1)) by (apply pow_R1_Rle; lra).
  assert (HHl : 1 <= H_l M K B) by (unfold H_l; nra).
  assert (HRl : 0 <= Ry_l M B)
    by (unfold Ry_l; apply Rmult_le_pos; [lra | apply Rmult_le_pos; [apply pos_INR | exact Hee]]).
  assert (HNp : 0 <= INR N) by apply pos_INR.
  pose proof (run_inv_counted R (fun s => s) (fun _ => True) (tile_l M) exact_l exact_l K (H_l M K B)
                (Ry_l M B) (INR N) m0 B N Tt HHl HRl HNp) as Hr.
  specialize (Hr ltac:(intros m tl; unfold tile_l; apply fmt_tile_sum)).
  specialize (Hr ltac:(intros m tl Fm Hl Htl;
    eapply inv_mono; [apply exact_l_nonneg | | | apply (tile_l_inv M m K tl HK Fm (fun q Hq => proj2 (Htl q Hq)))];
    [unfold H_l; apply Rmult_le_compat_r; [lra |]; apply Rle_pow; [lra | lia]
    | unfold Ry_l; apply Rmult_le_compat;
      [apply pow_le; lra | apply Rmult_le_pos; [apply pos_INR | exact Hee] | apply Rle_pow; [lra | lia]
      | apply Rmult_le_compat_r; [exact Hee | apply le_INR, Hl]]])).
  specialize (Hr ltac:(intros m tl; rewrite Rabs_right by (apply Rle_ge, exact_l_nonneg); lra)).
  specialize (Hr exact_l_resc exact_l_resc exact_l_app exact_l_app (exact_l_bound N) C CGc HCGc).
  unfold l_run, m_run.
  replace (concat tiles) with ([] ++ concat tiles) by reflexivity.
  replace (length tiles) with (0 + 0 + length tiles)%nat by lia.
  replace (nchg R (fun s => s) m0 tiles) with (0 + nchg R (fun s => s) m0 tiles)%nat by lia.
  replace (nsame R (fun s => s) m0 tiles) with (0 + nsame R (fun s => s) m0 tiles)%nat by lia.
  apply Hr; clear Hr; auto.
  - apply ff_fmt_0.
  - lra.
  - intros q [].
  - unfold inv, exact_l; cbn [map]; unfold rsum; cbn [fold_right].
    rewrite Rminus_0_r, Rabs_R0, Rmult_0_r, Rplus_0_l.
    apply (Rc_nonneg K (H_l M K B) (Ry_l M B) (INR N) Tt HHl HRl HNp C CGc HCGc).
Qed.

(** The closed form of [l]'s bound for any tile factor [1 <= H <= H'] ([afe_bL]'s form at [P1 (1 + ue) X := H']
    and [CG := CGc]); [counted_bL_apriori] ([H = H_l], ForwardError.v's [afe_bL]) and PerPairExpArg.v's
    counted bound ([H = H_arg], [afe_bL_arg]) are its instances. *)
Lemma counted_bL_apriori_H : forall K m0 B N Tt C CGc j i (t : nat) mt X P1 CR H H',
  0 <= K -> (j <= C)%nat -> (j + i <= Tt)%nat -> (t <= Tt)%nat -> m0 <= mt -> mt - m0 <= K ->
  Rpower 2 (u * K) <= X -> (1 + u) ^ (B - 1) <= P1 -> cg M ^ C * (1 + u) ^ Tt <= CGc -> cr M ^ Tt <= CR ->
  1 <= H <= H' ->
  0 <= Rc K H (Ry_l M B) (INR N) CGc t
  /\ 0 <= Gc H m0 j i mt - 1 + Rc K H (Ry_l M B) (INR N) CGc t
  /\ Gc H m0 j i mt - 1 + Rc K H (Ry_l M B) (INR N) CGc t
     <= H' * CGc * X - 1 + INR Tt * CR * (((H' * CGc * X) * INR N * ee) * (1 + u) + ea + P1 * (INR B * ee)) * (1 + u).
Proof.
  intros K m0 B N Tt C CGc j i t mt X P1 CR H H' HK Hj Hji Ht Hm HmK HX HP HCGc HC [H1 H2].
  pose proof (mp_eta_e_nonneg M) as Hee; pose proof (ff_u_nonneg A_) as Hu; pose proof (ff_eta_nonneg A_) as Hea.
  assert (HRy : 0 <= Ry_l M B)
    by (unfold Ry_l; apply Rmult_le_pos; [apply pow_le; lra | apply Rmult_le_pos; [apply pos_INR | lra]]).
  assert (HRy' : Ry_l M B <= P1 * (INR B * ee))
    by (unfold Ry_l; apply Rmult_le_compat_r; [apply Rmult_le_pos; [apply pos_INR | lra] | exact HP]).
  pose proof (Gc_ge_1 H m0 H1 j i mt Hm) as HG1.
  pose proof (Rc_nonneg K H (Ry_l M B) (INR N) Tt H1 HRy (pos_INR N) C CGc HCGc t) as HR0.
  pose proof (CGc_ge_1 Tt C CGc HCGc) as HCG1.
  pose proof (Rpower_pos (u * K)).
  assert (HX1 : 1 <= X) by (assert (1 <= Rpower 2 (u * K)) by (apply ose_rpow_ge_1, Rmult_le_pos; lra); lra).
  assert (HG : Gc H m0 j i mt <= H' * CGc * X).
  { unfold Gc.
    pose proof (count_le_CGc Tt C CGc HCGc j i Hj Hji) as Hc.
    assert (Rpower 2 (u * (mt - m0)) <= X)
      by (eapply Rle_trans; [apply ost_rpow_le; apply Rmult_le_compat_l; [exact Hu | exact HmK] | exact HX]).
    pose proof (Rpower_pos (u * (mt - m0))).
    pose proof (cg_ge_1 M).
    assert (0 <= cg M ^ j * (1 + u) ^ i) by (apply Rmult_le_pos; apply pow_le; lra).
    replace (H * cg M ^ j * (1 + u) ^ i * Rpower 2 (u * (mt - m0)))
      with (H * (cg M ^ j * (1 + u) ^ i) * Rpower 2 (u * (mt - m0))) by ring.
    apply Rmult_le_compat; [apply Rmult_le_pos; lra | lra | apply Rmult_le_compat; lra | lra]. }
  assert (HRc : Rc K H (Ry_l M B) (INR N) CGc t
                <= INR Tt * CR * ((((H' * CGc * X) * INR N * ee) * (1 + u) + ea + P1 * (INR B * ee)) * (1 + u))).
  { unfold Rc, dRc, Gbc.
    apply (Rk_form_apriori M); [lra | lra | lra | apply pos_INR | exact Ht | exact HX | exact HC]. }
  split; [exact HR0 | split; lra].
Qed.

(** The closed form of [l]'s bound: [afe_bL] (ForwardError.v) at [CG := CGc]. *)
Lemma counted_bL_apriori : forall K m0 B N Tt C CGc j i (t : nat) mt X P1 CR,
  0 <= K -> (j <= C)%nat -> (j + i <= Tt)%nat -> (t <= Tt)%nat -> m0 <= mt -> mt - m0 <= K ->
  Rpower 2 (u * K) <= X -> (1 + u) ^ (B - 1) <= P1 -> cg M ^ C * (1 + u) ^ Tt <= CGc -> cr M ^ Tt <= CR ->
  0 <= Rc K (H_l M K B) (Ry_l M B) (INR N) CGc t
  /\ 0 <= Gc (H_l M K B) m0 j i mt - 1 + Rc K (H_l M K B) (Ry_l M B) (INR N) CGc t
  /\ Gc (H_l M K B) m0 j i mt - 1 + Rc K (H_l M K B) (Ry_l M B) (INR N) CGc t
     <= afe_bL u ue ee ea B N Tt X P1 CGc CR.
Proof.
  intros K m0 B N Tt C CGc j i t mt X P1 CR HK Hj Hji Ht Hm HmK HX HP HCGc HC.
  exact (counted_bL_apriori_H K m0 B N Tt C CGc j i t mt X P1 CR _ _ HK Hj Hji Ht Hm HmK HX HP HCGc HC
           (H_l_bounds M K B X P1 HK HX HP)).
Qed.

End Counted.

(** ** A count of the max-changing tiles from bounds of the scores

    With [lo x <= sc x * f <= hi x] ([f > 0]; in the kernel [f = ln 2], [sc] the computed
    scores, [lo], [hi] the exact ones minus and plus their error bounds), a tile changes the
    running max only if one of its keys has [hi x] above the largest [lo] of the keys before
    it: [nrec] counts those keys, in the keys' order. *)
Section Records.

Variable T : Type.
Variables (sc lo hi : T -> R) (f : R).

Fixpoint nrec (mx : R) (l : list T) : nat :=
  match l with
  | nil => 0
  | x :: l' => ((if Rle_dec (hi x) mx then 0 else 1) + nrec (Rmax mx (lo x)) l')%nat
  end.

Definition mxf (mx : R) (l : list T) : R := fold_left (fun a x => Rmax a (lo x)) l mx.

Lemma nrec_app : forall a b mx, nrec mx (a ++ b) = (nrec mx a + nrec (mxf mx a) b)%nat.
Proof.
  induction a as [|x a IH]; intros b mx; [reflexivity |].
  cbn [app nrec]; rewrite IH; unfold mxf; cbn [fold_left]; lia.
Qed.

Hypothesis Hf : 0 < f.

Lemma tmax_quiet : forall tl m mx, mx <= m * f -> (forall x, In x tl -> lo x <= sc x * f <= hi x) ->
  nrec mx tl = 0%nat -> tmax T sc m tl = m.
Proof.
  induction tl as [|x tl IH]; intros m mx Hmx Hb H0; [reflexivity |].
  cbn [nrec] in H0; destruct (Rle_dec (hi x) mx) as [Hq | Hq]; [| lia].
  destruct (Hb x (or_introl eq_refl)) as [H1 H2].
  assert (Hx : sc x <= m) by (apply (Rmult_le_reg_r f); lra).
  unfold tmax; cbn [fold_left]; rewrite Rmax_left by lra; fold (tmax T sc m tl).
  apply (IH m (Rmax mx (lo x))); [apply Rmax_lub; lra | intros y Hy; apply Hb; right; exact Hy | lia].
Qed.

Lemma mxf_le : forall tl m mx, mx <= m * f -> (forall x, In x tl -> lo x <= sc x * f) -> mxf mx tl <= tmax T sc m tl * f.
Proof.
  induction tl as [|x tl IH]; intros m mx Hmx Hb; [exact Hmx |].
  unfold mxf, tmax; cbn [fold_left]; fold (mxf (Rmax mx (lo x)) tl) (tmax T sc (Rmax m (sc x)) tl).
  apply IH; [| intros y Hy; apply Hb; right; exact Hy].
  pose proof (Hb x (or_introl eq_refl)).
  assert (m * f <= Rmax m (sc x) * f) by (apply Rmult_le_compat_r; [lra | apply Rmax_l]).
  assert (sc x * f <= Rmax m (sc x) * f) by (apply Rmult_le_compat_r; [lra | apply Rmax_r]).
  apply Rmax_lub; lra.
Qed.

Lemma nchg_le_nrec : forall tiles m mx, mx <= m * f ->
  (forall x, In x (concat tiles) -> lo x <= sc x * f <= hi x) ->
  (nchg T sc m tiles <= nrec mx (concat tiles))%nat.
Proof.
  induction tiles as [|tl rest IH]; intros m mx Hmx Hb; [cbn; lia |].
  cbn [nchg concat]; rewrite nrec_app.
  assert (Htl : forall x, In x tl -> lo x <= sc x * f <= hi x) by (intros x Hx; apply Hb, in_or_app; left; exact Hx).
  assert (IH' : (nchg T sc (tmax T sc m tl) rest <= nrec (mxf mx tl) (concat rest))%nat).
  { apply IH; [apply mxf_le; [exact Hmx | intros x Hx; apply Htl, Hx] |].
    intros x Hx; apply Hb, in_or_app; right; exact Hx. }
  destruct (Req_EM_T (tmax T sc m tl) m) as [E | E]; [lia |].
  destruct (nrec mx tl) eqn:En; [| lia].
  exfalso; apply E, (tmax_quiet tl m mx Hmx Htl En).
Qed.

(** The kernel's first tile starts at its first key's score [m0 = sc k0]: [k0] itself is not counted. *)
Lemma nchg_first : forall k0 r rest,
  (forall x, In x (concat ((k0 :: r) :: rest)) -> lo x <= sc x * f <= hi x) ->
  (nchg T sc (sc k0) ((k0 :: r) :: rest) <= nrec (lo k0) (r ++ concat rest))%nat.
Proof.
  intros k0 r rest Hb.
  assert (E : tmax T sc (sc k0) (k0 :: r) = tmax T sc (sc k0) r)
    by (unfold tmax; cbn [fold_left]; rewrite Rmax_left by lra; reflexivity).
  change (nchg T sc (sc k0) ((k0 :: r) :: rest))
    with (((if Req_EM_T (tmax T sc (sc k0) (k0 :: r)) (sc k0) then 0 else 1)
           + nchg T sc (tmax T sc (sc k0) (k0 :: r)) rest)%nat).
  rewrite E.
  change (((if Req_EM_T (tmax T sc (sc k0) r) (sc k0) then 0 else 1) + nchg T sc (tmax T sc (sc k0) r) rest)%nat)
    with (nchg T sc (sc k0) (r :: rest)).
  apply nchg_le_nrec; [apply Hb; left; reflexivity |].
  intros x Hx; apply Hb; right; exact Hx.
Qed.

End Records.

Lemma nchg_map_comm : forall {K1 K2} (g : K1 -> K2) (sc2 : K2 -> R) tiles m,
  nchg K1 (fun k => sc2 (g k)) m tiles = nchg K2 sc2 m (map (map g) tiles).
Proof.
  intros K1 K2 g sc2; induction tiles as [|tl tiles IH]; intros m; [reflexivity |].
  cbn [nchg map]; rewrite tmax_map_comm, IH; reflexivity.
Qed.

(** ** The forward output *)

Section ForwardCounted.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

(** The count of a row's max-changing tiles from the exact scores and the per-key errors [d]. *)
Lemma nchg_kv_le : forall (dotf : list R -> list R -> R) (c scale : R) (q : list R) (d : list R * R -> R) (C : nat)
    (k0 : list R * R) (r : list (list R * R)) (rest : list (list (list R * R))),
  (forall kv, In kv (concat ((k0 :: r) :: rest)) ->
     Rabs (score2_with A_ dotf c q (fst kv) * ln 2 - scale * dot_R q (fst kv)) <= d kv) ->
  le (nrec (list R * R) (fun kv => scale * dot_R q (fst kv) - d kv) (fun kv => scale * dot_R q (fst kv) + d kv)
        (scale * dot_R q (fst k0) - d k0) (r ++ concat rest)) C ->
  (nchg R (fun s => s) (score2_with A_ dotf c q (fst k0))
     (map (map fst) (map (map (kv_pair_with M dotf c q)) ((k0 :: r) :: rest))) <= C)%nat.
Proof.
  intros dotf c scale q d C k0 r rest Hd Hrec.
  set (sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv)).
  assert (E1 : map (map fst) (map (map (kv_pair_with M dotf c q)) ((k0 :: r) :: rest)) = map (map sck) ((k0 :: r) :: rest))
    by (rewrite map_map; apply map_ext; intros tl; rewrite map_map; reflexivity).
  rewrite E1, <- (nchg_map_comm sck (fun s => s)).
  assert (Hb : forall x, In x (concat ((k0 :: r) :: rest)) ->
                 scale * dot_R q (fst x) - d x <= sck x * ln 2 <= scale * dot_R q (fst x) + d x).
  { intros x Hx; pose proof (Hd x Hx) as Hx'; apply Rabs_le_inv in Hx'; unfold sck; lra. }
  eapply Nat.le_trans; [exact (nchg_first _ sck _ _ (ln 2) ose_ln2_pos k0 r rest Hb) | exact Hrec].
Qed.

(** [l]'s relative bound ([l_fold_rel], SavedLseError.v) at [CG := CGc], with at most [C] tiles
    changing the running max ([l_fold_inv_counted], [counted_bL_apriori]). *)
Lemma l_fold_rel_counted : forall (X P1 CGc CR : R) (B N Tt C : nat) (m0 : R) (stiles : list (list R)),
  mp_exp2 M 0 = 1 -> (1 + u) ^ (B - 1) <= P1 -> cg M ^ C * (1 + u) ^ Tt <= CGc -> cr M ^ Tt <= CR ->
  (nchg R (fun s => s) m0 stiles <= C)%nat ->
  l_fold_rel M X B N Tt (afe_bL u ue ee ea B N Tt X P1 CGc CR) m0 stiles.
Proof.
  intros X P1 CGc CR B N Tt C m0 stiles Hexp0 HP HCGc HC Hcnt K HK HX Fm0 HB Hks HBt HN HT Hm0 HmK HL1.
  pose proof (nchg_nsame R (fun s => s) stiles m0) as Hns.
  pose proof (l_fold_inv_counted M Hexp0 K m0 B N Tt C CGc stiles HK Fm0 HB HCGc Hks HBt HN HT Hcnt HmK) as Cl.
  destruct (counted_bL_apriori M K m0 B N Tt C CGc (nchg R (fun s => s) m0 stiles) (nsame R (fun s => s) m0 stiles)
              (length stiles) (m_run m0 stiles) X P1 CR HK Hcnt ltac:(lia) HT Hm0 HmK HX HP HCGc HC) as [HRl [_ bL1]].
  exact (l_rel_of_inv _ _ _ _ _ HL1 HRl bL1 Cl).
Qed.

(** PerPairScoreError.v's [attention_forward_acc_running_pp] with [l]'s bound at [CG := CGc]:
    at most [C] tiles change the running max, by the exact scores and their errors [d]. *)
Lemma attention_forward_acc_running_counted_pp : forall (dotf : list R -> list R -> R) (d_rel d_abs : R)
    (accf : R -> list R -> list R -> R) (n : nat) (g_rel g_abs : R)
    (q : list R) (c scale uc P V X Y P1 CG CR CGA CRA CB : R) (E N Tt : nat)
    (vis : list R * R -> bool) (tiles : list (list (list R * R))) (bs : list R) (d : list R * R -> R) (Dsc Yw : R)
    (C : nat) (CGc : R),
  let sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv) in
  let st := kernel_run_acc M (list R * R) sck vis (fun kv _ => snd kv) accf (kernel_start 1) tiles in
  mp_exp2 M 0 = 1 ->
  (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  dot_model dotf E d_rel d_abs ->
  acc_dot_model accf n g_rel g_abs ->
  afe_premises_de M c scale uc P (d_rel * P + d_abs) V X Y P1 CG CR n N Tt ->
  cgA M g_rel ^ Tt <= CGA -> crA M g_rel ^ Tt <= CRA ->
  (1 + afr_gb u ue us X g_rel) ^ Tt <= CB ->
  length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true ->
     length (fst kv) = E /\ dot_abs q (fst kv) <= P /\ Rabs (snd kv) <= V) ->
  Forall (fun tl => length tl = n) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  fwd_running_premise scale q vis tiles bs ->
  (forall kv, In kv (filter vis (concat tiles)) ->
     Rabs (score2_with A_ dotf c q (fst kv) * ln 2 - scale * dot_R q (fst kv)) <= d kv) ->
  pp_shift (filter vis (concat tiles)) (fun kv => scale * dot_R q (fst kv)) d <= Dsc ->
  sm_avg (filter vis (concat tiles)) (fun kv => scale * dot_R q (fst kv))
    (fun kv => Rabs (snd kv) * (exp (d kv + Dsc) - 1)) <= Yw ->
  cg M ^ C * (1 + u) ^ Tt <= CGc -> afe_bL u ue ee ea n N Tt X P1 CGc CR < 1 ->
  (forall k0 rs, filter vis (concat tiles) = k0 :: rs ->
     le (nrec (list R * R) (fun kv => scale * dot_R q (fst kv) - d kv) (fun kv => scale * dot_R q (fst kv) + d kv)
           (scale * dot_R q (fst k0) - d k0) rs) C) ->
  Rabs (ff_rnd S_ (rnd (nth 0 (ks_acc st) 0 / ks_l st)) - exact_softmax scale q (filter vis (concat tiles)))
  <= afr_rel u ue ee ea us n N Tt X 0 P1 CGc CR CB
       * exact_softmax scale q (map abs_value (filter vis (concat tiles)))
     + afr_C u ue ee ea us n N Tt X 0 P1 CGc CR * run_err (afr_gb u ue us X g_rel) 0 bs
     + afr_ypp u ue ee ea us n N Tt X P1 CGc CR CB * Yw
     + afr_abs u ue ee ea us es V n N Tt X P1 CGc CR CGA CRA CB g_rel g_abs.
Proof.
  intros dotf d_rel d_abs accf n g_rel g_abs q c scale uc P V X Y P1 CG CR CGA CRA CB E N Tt vis tiles bs d Dsc Yw C CGc sck st
    Hexp0 Hvis Hdm Hadm Hpre HCGA HCRA HCB Hq Hkeys Hn HN HT Hfwd Hdpp HDsc HYw HCGc HbLc Hrec.
  pose proof Hpre as [_ _ _ _ _ _ _ HP _ HC _].
  apply (attention_forward_acc_running_pp_gen M dotf d_rel d_abs accf n g_rel g_abs q c scale uc P V X Y P1 CG CR CGA CRA CB
           E N Tt vis tiles bs d Dsc Yw CGc Hexp0 Hvis Hdm Hadm Hpre HCGA HCRA HCB Hq Hkeys Hn HN HT Hfwd Hdpp HDsc HYw HbLc).
  intros k0 r rest Ecat; apply (l_fold_rel_counted X P1 CGc CR n N Tt C _ _ Hexp0 HP HCGc HC).
  apply (nchg_kv_le dotf c scale q d); [rewrite Ecat; exact Hdpp | apply Hrec; rewrite <- Ecat; reflexivity].
Qed.



(** The float32 forward on the H100 (3xTF32 scores and P.V on its tensor cores), as
    [attention_forward_acc_running_tf32x3_op_pp], with the max-changing tiles counted. *)
Theorem attention_forward_acc_running_counted_tf32x3_op_pp : forall (out : R -> R) (ur : R) (F : Z) (k qb qv : nat)
    (q : list R) (c scale uc P V X Y P1 CG CR CGA CRA CB : R) (E n N Tt : nat)
    (vis : list R * R -> bool) (tiles : list (list (list R * R))) (bs : list R) (d : list R * R -> R) (Dsc Yw : R)
    (C : nat) (CGc : R),
  let dotf := tf32x3_dot_tc_op tf32_rna tf32_rz (tc_align_op F) out k in
  let accf := tf32x3_acc_fn F out rnd k in
  let g_rel := u + (1 + u) * tf32x3_tc_rel (bpow radix2 (1 - F)) ur k qv in
  let g_abs := (1 + u) * 0 + ea in
  let sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv) in
  let st := kernel_run_acc M (list R * R) sck vis (fun kv _ => snd kv) accf (kernel_start 1) tiles in
  0 <= ur -> (forall x, Rabs (out x - x) <= ur * Rabs x) ->
  (1 <= k)%nat -> (1 <= qb)%nat -> (E <= qb * k)%nat ->
  INR (3 * qb) * tc_delta (bpow radix2 (1 - F)) ur k < 1 ->
  (1 <= qv)%nat -> (n <= qv * k)%nat ->
  INR (3 * qv) * tc_delta (bpow radix2 (1 - F)) ur k < 1 ->
  mp_exp2 M 0 = 1 ->
  (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  afe_premises_de M c scale uc P (tf32x3_tc_rel (bpow radix2 (1 - F)) ur k qb * P + 0) V X Y P1 CG CR n N Tt ->
  cgA M g_rel ^ Tt <= CGA -> crA M g_rel ^ Tt <= CRA -> (1 + afr_gb u ue us X g_rel) ^ Tt <= CB ->
  length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true ->
     length (fst kv) = E /\ dot_abs q (fst kv) <= P /\ Rabs (snd kv) <= V) ->
  Forall (fun tl => length tl = n) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  fwd_running_premise scale q vis tiles bs ->
  (forall kv, In kv (filter vis (concat tiles)) ->
     Rabs (score2_with A_ dotf c q (fst kv) * ln 2 - scale * dot_R q (fst kv)) <= d kv) ->
  pp_shift (filter vis (concat tiles)) (fun kv => scale * dot_R q (fst kv)) d <= Dsc ->
  sm_avg (filter vis (concat tiles)) (fun kv => scale * dot_R q (fst kv))
    (fun kv => Rabs (snd kv) * (exp (d kv + Dsc) - 1)) <= Yw ->
  cg M ^ C * (1 + u) ^ Tt <= CGc -> afe_bL u ue ee ea n N Tt X P1 CGc CR < 1 ->
  (forall k0 rs, filter vis (concat tiles) = k0 :: rs ->
     le (nrec (list R * R) (fun kv => scale * dot_R q (fst kv) - d kv) (fun kv => scale * dot_R q (fst kv) + d kv)
           (scale * dot_R q (fst k0) - d k0) rs) C) ->
  Rabs (ff_rnd S_ (rnd (nth 0 (ks_acc st) 0 / ks_l st)) - exact_softmax scale q (filter vis (concat tiles)))
  <= afr_rel u ue ee ea us n N Tt X 0 P1 CGc CR CB
       * exact_softmax scale q (map abs_value (filter vis (concat tiles)))
     + afr_C u ue ee ea us n N Tt X 0 P1 CGc CR * run_err (afr_gb u ue us X g_rel) 0 bs
     + afr_ypp u ue ee ea us n N Tt X P1 CGc CR CB * Yw
     + afr_abs u ue ee ea us es V n N Tt X P1 CGc CR CGA CRA CB g_rel g_abs.
Proof.
  intros out ur F k qb qv q c scale uc P V X Y P1 CG CR CGA CRA CB E n N Tt vis tiles bs d Dsc Yw C CGc dotf accf g_rel g_abs sck st
    Hur Hout Hk Hq HE Hd Hqv Hn Hdv Hexp0 Hvis Hpre.
  exact (attention_forward_acc_running_counted_pp dotf _ 0 accf n g_rel g_abs q c scale uc P V X Y P1 CG CR CGA CRA CB E N Tt
           vis tiles bs d Dsc Yw C CGc Hexp0 Hvis (tf32x3_tc_op_dot_model out ur F k qb E Hur Hout Hk Hq HE Hd)
           (tf32x3_tc_op_acc_dot_model out rnd ur u ea F k qv n Hur Hout (ff_u_nonneg _) (ff_abs _) Hk Hqv Hn Hdv)
           Hpre).
Qed.

(** The bf16 (or fp16) forward on the H100, as [attention_forward_acc_running_tc_op_pp], with
    the max-changing tiles counted. *)
Theorem attention_forward_acc_running_counted_tc_op_pp : forall (out : R -> R) (ur : R) (F : Z) (k qb qv : nat)
    (q : list R) (c scale uc P V X Y P1 CG CR CGA CRA CB : R) (E n N Tt : nat)
    (vis : list R * R -> bool) (tiles : list (list (list R * R))) (bs : list R) (d : list R * R -> R) (Dsc Yw : R)
    (C : nat) (CGc : R),
  let dotf := tc_dot_op (tc_align_op F) out k in
  let accf := tc_acc_fn F out k in
  let g_rel := gamma (tc_delta (bpow radix2 (1 - F)) ur k) qv in
  let sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv) in
  let st := kernel_run_acc M (list R * R) sck vis (fun kv _ => snd kv) accf (kernel_start 1) tiles in
  0 <= ur -> (forall x, Rabs (out x - x) <= ur * Rabs x) ->
  (1 <= k)%nat -> (1 <= qb)%nat -> (E <= qb * k)%nat ->
  INR qb * tc_delta (bpow radix2 (1 - F)) ur k < 1 ->
  (1 <= qv)%nat -> (n <= qv * k)%nat ->
  INR qv * tc_delta (bpow radix2 (1 - F)) ur k < 1 ->
  mp_exp2 M 0 = 1 ->
  (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  afe_premises_de M c scale uc P (gamma (tc_delta (bpow radix2 (1 - F)) ur k) qb * P + 0) V X Y P1 CG CR n N Tt ->
  cgA M g_rel ^ Tt <= CGA -> crA M g_rel ^ Tt <= CRA -> (1 + afr_gb u ue us X g_rel) ^ Tt <= CB ->
  length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true ->
     length (fst kv) = E /\ dot_abs q (fst kv) <= P /\ Rabs (snd kv) <= V) ->
  Forall (fun tl => length tl = n) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  fwd_running_premise scale q vis tiles bs ->
  (forall kv, In kv (filter vis (concat tiles)) ->
     Rabs (score2_with A_ dotf c q (fst kv) * ln 2 - scale * dot_R q (fst kv)) <= d kv) ->
  pp_shift (filter vis (concat tiles)) (fun kv => scale * dot_R q (fst kv)) d <= Dsc ->
  sm_avg (filter vis (concat tiles)) (fun kv => scale * dot_R q (fst kv))
    (fun kv => Rabs (snd kv) * (exp (d kv + Dsc) - 1)) <= Yw ->
  cg M ^ C * (1 + u) ^ Tt <= CGc -> afe_bL u ue ee ea n N Tt X P1 CGc CR < 1 ->
  (forall k0 rs, filter vis (concat tiles) = k0 :: rs ->
     le (nrec (list R * R) (fun kv => scale * dot_R q (fst kv) - d kv) (fun kv => scale * dot_R q (fst kv) + d kv)
           (scale * dot_R q (fst k0) - d k0) rs) C) ->
  Rabs (ff_rnd S_ (rnd (nth 0 (ks_acc st) 0 / ks_l st)) - exact_softmax scale q (filter vis (concat tiles)))
  <= afr_rel u ue ee ea us n N Tt X 0 P1 CGc CR CB
       * exact_softmax scale q (map abs_value (filter vis (concat tiles)))
     + afr_C u ue ee ea us n N Tt X 0 P1 CGc CR * run_err (afr_gb u ue us X g_rel) 0 bs
     + afr_ypp u ue ee ea us n N Tt X P1 CGc CR CB * Yw
     + afr_abs u ue ee ea us es V n N Tt X P1 CGc CR CGA CRA CB g_rel 0.
Proof.
  intros out ur F k qb qv q c scale uc P V X Y P1 CG CR CGA CRA CB E n N Tt vis tiles bs d Dsc Yw C CGc dotf accf g_rel sck st
    Hur Hout Hk Hq HE Hd Hqv Hn Hdv Hexp0 Hvis Hpre.
  exact (attention_forward_acc_running_counted_pp dotf _ 0 accf n g_rel 0 q c scale uc P V X Y P1 CG CR CGA CRA CB E N Tt
           vis tiles bs d Dsc Yw C CGc Hexp0 Hvis (tc_op_dot_model out ur F k qb E Hur Hout Hk Hq HE Hd)
           (tc_acc_op_dot_model out ur F k qv n Hur Hout Hk Hqv Hn Hdv) Hpre).
Qed.

End ForwardCounted.

(** ** The saved lse

    The lse proof ([attention_lse_error_dot_gen]) uses [l]'s bound only through [l_fold_rel]
    ([|l - L| <= bL L]; then [NL >= - ln (1 - bL)] and the log2's domain); here that bound is
    [l_fold_rel_counted], i.e. [bL] at [CG := CGc >= cg^C (1 + u)^Tt].  The bound [lse_bound] itself is unchanged: it is smaller
    through the caller's [NL]. *)

Section LseCounted.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

Variable lg : R -> R.
Variables el lmin lmax : R.
Hypothesis lg_err : forall x, lmin <= x <= lmax -> Rabs (lg x - ln x / ln 2) <= el.

(** [attention_lse_error_dot_pp] (fully visible tiles) with [l]'s bound counted. *)
Theorem attention_lse_error_dot_counted_pp : forall (dotf : list R -> list R -> R) (g_rel g_abs : R) (q : list R) (c scale uc P X P1 CR cl ucl LN NL : R) (d : list R * R -> R) (Dsc : R) (E B N Tt : nat)
    (C : nat) (CGc : R) (k0 : list R * R) (tl0 : list (list R * R)) (rest : list (list (list R * R))),
  let tiles := (k0 :: tl0) :: rest in
  let ktiles := map (map (kv_pair_with M dotf c q)) tiles in
  let m0 := score2_with A_ dotf c q (fst k0) in
  let mt := acc_m_run m0 ktiles in
  let l := l_run M m0 0 (map (map fst) ktiles) in
  let bL := afe_bL u ue ee ea B N Tt X P1 CGc CR in
  mp_exp2 M 0 = 1 ->
  dot_model dotf E g_rel g_abs -> length q = E ->
  (forall kv, In kv (concat tiles) -> length (fst kv) = E /\ dot_abs q (fst kv) <= P) ->
  0 < scale -> 0 <= uc -> Rabs (c * ln 2 - scale) <= uc * scale ->
  (1 <= B)%nat -> Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (concat tiles) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rpower 2 (u * (2 * score_max_de A_ scale uc P (g_rel * P + g_abs))) <= X ->
  (1 + u) ^ (B - 1) <= P1 -> cg M ^ C * (1 + u) ^ Tt <= CGc -> cr M ^ Tt <= CR -> bL < 1 ->
  0 <= ucl -> Rabs (cl - ln 2) <= ucl * ln 2 -> ln (INR N) <= LN -> - ln (1 - bL) <= NL ->
  lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  (forall kv, In kv (concat tiles) ->
     Rabs (score2_with A_ dotf c q (fst kv) * ln 2 - scale * dot_R q (fst kv)) <= d kv) ->
  pp_shift (concat tiles) (fun kv => scale * dot_R q (fst kv)) d <= Dsc ->
  le (nrec (list R * R) (fun kv => scale * dot_R q (fst kv) - d kv) (fun kv => scale * dot_R q (fst kv) + d kv)
        (scale * dot_R q (fst k0) - d k0) (tl0 ++ concat rest)) C ->
  Rabs (rnd (rnd (mt + lg l) * cl) - ln (rsum (map (fun kv => exp (scale * dot_R q (fst kv))) (concat tiles))))
  <= lse_bound u ea el ucl (score_max_de A_ scale uc P (g_rel * P + g_abs)) Dsc LN NL.
Proof.
  intros dotf g_rel g_abs q c scale uc P X P1 CR cl ucl LN NL d Dsc E B N Tt C CGc k0 tl0 rest tiles ktiles m0 mt l bL
    Hexp0 Hdm Hq Hkeys Hs Huc Hc HB HBt HN HT HX HP HCGc HC HbL Hucl Hcl HLN HNL Hlmin Hlmax Hd HDsc Hrec.
  apply (attention_lse_error_dot_gen M lg el lmin lmax lg_err dotf g_rel g_abs q c scale uc P X bL cl ucl LN NL Dsc
           E B N Tt k0 tl0 rest (l_fold_rel_counted M X P1 CGc CR B N Tt C _ _ Hexp0 HP HCGc HC
                                   (nchg_kv_le M dotf c scale q d C k0 tl0 rest Hd Hrec))); try assumption.
  apply (lse_move_pp M dotf c scale q d); [unfold tiles; cbn [concat app]; discriminate | exact Hd | exact HDsc].
Qed.

(** The kernel's loop from its start under any mask ([attention_lse_error_masked_dot_pp]) with
    [l]'s bound counted: at most [C] of the visible keys after the first may raise the running max. *)
Theorem attention_lse_error_masked_dot_counted_pp : forall (dotf : list R -> list R -> R) (g_rel g_abs : R) (q : list R) (c scale uc P X P1 CR cl ucl LN NL : R) (d : list R * R -> R) (Dsc : R) (E B N Tt : nat)
    (C : nat) (CGc : R) (vis : list R * R -> bool) (tiles : list (list (list R * R))),
  let sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv) in
  let st := kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) tiles in
  let bL := afe_bL u ue ee ea B N Tt X P1 CGc CR in
  mp_exp2 M 0 = 1 -> (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  dot_model dotf E g_rel g_abs -> length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true -> length (fst kv) = E /\ dot_abs q (fst kv) <= P) ->
  0 < scale -> 0 <= uc -> Rabs (c * ln 2 - scale) <= uc * scale ->
  (1 <= B)%nat -> Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rpower 2 (u * (2 * score_max_de A_ scale uc P (g_rel * P + g_abs))) <= X ->
  (1 + u) ^ (B - 1) <= P1 -> cg M ^ C * (1 + u) ^ Tt <= CGc -> cr M ^ Tt <= CR -> bL < 1 ->
  0 <= ucl -> Rabs (cl - ln 2) <= ucl * ln 2 -> ln (INR N) <= LN -> - ln (1 - bL) <= NL ->
  lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  (forall kv, In kv (filter vis (concat tiles)) ->
     Rabs (score2_with A_ dotf c q (fst kv) * ln 2 - scale * dot_R q (fst kv)) <= d kv) ->
  pp_shift (filter vis (concat tiles)) (fun kv => scale * dot_R q (fst kv)) d <= Dsc ->
  (forall k0 rs, filter vis (concat tiles) = k0 :: rs ->
     le (nrec (list R * R) (fun kv => scale * dot_R q (fst kv) - d kv) (fun kv => scale * dot_R q (fst kv) + d kv)
           (scale * dot_R q (fst k0) - d k0) rs) C) ->
  Rabs (rnd (rnd (m_use (ks_m st) + lg (ks_l st)) * cl)
        - ln (rsum (map (fun kv => exp (scale * dot_R q (fst kv))) (filter vis (concat tiles)))))
  <= lse_bound u ea el ucl (score_max_de A_ scale uc P (g_rel * P + g_abs)) Dsc LN NL.
Proof.
  intros dotf g_rel g_abs q c scale uc P X P1 CR cl ucl LN NL d Dsc E B N Tt C CGc vis tiles sck st bL
    Hexp0 Hvis Hdm Hq Hkeys Hs Huc Hc HB HBt HN HT HX HP HCGc HC HbL Hucl Hcl HLN HNL Hlmin Hlmax Hd HDsc Hrec.
  apply (attention_lse_error_masked_dot_pp_gen M lg el lmin lmax lg_err dotf g_rel g_abs q c scale uc P X bL cl ucl LN NL d Dsc
           E B N Tt vis tiles Hexp0 Hvis); try assumption.
  intros k0 r rest Ecat; apply (l_fold_rel_counted M X P1 CGc CR B N Tt C _ _ Hexp0 HP HCGc HC).
  apply (nchg_kv_le M dotf c scale q d); [rewrite Ecat; exact Hd | apply Hrec; rewrite <- Ecat; reflexivity].
Qed.

(** The float32 lse on the H100 (3xTF32 scores on its tensor cores), as
    [attention_lse_error_masked_tf32x3_op_pp], with the max-changing tiles counted. *)
Theorem attention_lse_error_masked_counted_tf32x3_op_pp : forall (out : R -> R) (ur : R) (F : Z) (k qb : nat)
    (q : list R) (c scale uc P X P1 CR cl ucl LN NL : R) (d : list R * R -> R) (Dsc : R) (E B N Tt : nat)
    (C : nat) (CGc : R) (vis : list R * R -> bool) (tiles : list (list (list R * R))),
  let dotf := tf32x3_dot_tc_op tf32_rna tf32_rz (tc_align_op F) out k in
  let de := tf32x3_tc_rel (bpow radix2 (1 - F)) ur k qb * P + 0 in
  let sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv) in
  let st := kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) tiles in
  let bL := afe_bL u ue ee ea B N Tt X P1 CGc CR in
  0 <= ur -> (forall x, Rabs (out x - x) <= ur * Rabs x) ->
  (1 <= k)%nat -> (1 <= qb)%nat -> (E <= qb * k)%nat ->
  INR (3 * qb) * tc_delta (bpow radix2 (1 - F)) ur k < 1 ->
  mp_exp2 M 0 = 1 -> (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true -> length (fst kv) = E /\ dot_abs q (fst kv) <= P) ->
  0 < scale -> 0 <= uc -> Rabs (c * ln 2 - scale) <= uc * scale ->
  (1 <= B)%nat -> Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rpower 2 (u * (2 * score_max_de A_ scale uc P de)) <= X ->
  (1 + u) ^ (B - 1) <= P1 -> cg M ^ C * (1 + u) ^ Tt <= CGc -> cr M ^ Tt <= CR -> bL < 1 ->
  0 <= ucl -> Rabs (cl - ln 2) <= ucl * ln 2 -> ln (INR N) <= LN -> - ln (1 - bL) <= NL ->
  lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  (forall kv, In kv (filter vis (concat tiles)) ->
     Rabs (score2_with A_ dotf c q (fst kv) * ln 2 - scale * dot_R q (fst kv)) <= d kv) ->
  pp_shift (filter vis (concat tiles)) (fun kv => scale * dot_R q (fst kv)) d <= Dsc ->
  (forall k0 rs, filter vis (concat tiles) = k0 :: rs ->
     le (nrec (list R * R) (fun kv => scale * dot_R q (fst kv) - d kv) (fun kv => scale * dot_R q (fst kv) + d kv)
           (scale * dot_R q (fst k0) - d k0) rs) C) ->
  Rabs (rnd (rnd (m_use (ks_m st) + lg (ks_l st)) * cl)
        - ln (rsum (map (fun kv => exp (scale * dot_R q (fst kv))) (filter vis (concat tiles)))))
  <= lse_bound u ea el ucl (score_max_de A_ scale uc P de) Dsc LN NL.
Proof.
  intros out ur F k qb q c scale uc P X P1 CR cl ucl LN NL d Dsc E B N Tt C CGc vis tiles dotf de sck st bL
    Hur Hout Hk Hq HE Hn Hexp0 Hvis.
  exact (attention_lse_error_masked_dot_counted_pp dotf _ 0 q c scale uc P X P1 CR cl ucl LN NL d Dsc E B N Tt C CGc
           vis tiles Hexp0 Hvis (tf32x3_tc_op_dot_model out ur F k qb E Hur Hout Hk Hq HE Hn)).
Qed.

(** The bf16 (or fp16) lse on the H100 ([tc_op_dot_model]), with the max-changing tiles counted. *)
Theorem attention_lse_error_masked_counted_tc_op_pp : forall (out : R -> R) (ur : R) (F : Z) (k qb : nat)
    (q : list R) (c scale uc P X P1 CR cl ucl LN NL : R) (d : list R * R -> R) (Dsc : R) (E B N Tt : nat)
    (C : nat) (CGc : R) (vis : list R * R -> bool) (tiles : list (list (list R * R))),
  let dotf := tc_dot_op (tc_align_op F) out k in
  let de := gamma (tc_delta (bpow radix2 (1 - F)) ur k) qb * P + 0 in
  let sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv) in
  let st := kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) tiles in
  let bL := afe_bL u ue ee ea B N Tt X P1 CGc CR in
  0 <= ur -> (forall x, Rabs (out x - x) <= ur * Rabs x) ->
  (1 <= k)%nat -> (1 <= qb)%nat -> (E <= qb * k)%nat ->
  INR qb * tc_delta (bpow radix2 (1 - F)) ur k < 1 ->
  mp_exp2 M 0 = 1 -> (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true -> length (fst kv) = E /\ dot_abs q (fst kv) <= P) ->
  0 < scale -> 0 <= uc -> Rabs (c * ln 2 - scale) <= uc * scale ->
  (1 <= B)%nat -> Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rpower 2 (u * (2 * score_max_de A_ scale uc P de)) <= X ->
  (1 + u) ^ (B - 1) <= P1 -> cg M ^ C * (1 + u) ^ Tt <= CGc -> cr M ^ Tt <= CR -> bL < 1 ->
  0 <= ucl -> Rabs (cl - ln 2) <= ucl * ln 2 -> ln (INR N) <= LN -> - ln (1 - bL) <= NL ->
  lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  (forall kv, In kv (filter vis (concat tiles)) ->
     Rabs (score2_with A_ dotf c q (fst kv) * ln 2 - scale * dot_R q (fst kv)) <= d kv) ->
  pp_shift (filter vis (concat tiles)) (fun kv => scale * dot_R q (fst kv)) d <= Dsc ->
  (forall k0 rs, filter vis (concat tiles) = k0 :: rs ->
     le (nrec (list R * R) (fun kv => scale * dot_R q (fst kv) - d kv) (fun kv => scale * dot_R q (fst kv) + d kv)
           (scale * dot_R q (fst k0) - d k0) rs) C) ->
  Rabs (rnd (rnd (m_use (ks_m st) + lg (ks_l st)) * cl)
        - ln (rsum (map (fun kv => exp (scale * dot_R q (fst kv))) (filter vis (concat tiles)))))
  <= lse_bound u ea el ucl (score_max_de A_ scale uc P de) Dsc LN NL.
Proof.
  intros out ur F k qb q c scale uc P X P1 CR cl ucl LN NL d Dsc E B N Tt C CGc vis tiles dotf de sck st bL
    Hur Hout Hk Hq HE Hn Hexp0 Hvis.
  exact (attention_lse_error_masked_dot_counted_pp dotf _ 0 q c scale uc P X P1 CR cl ucl LN NL d Dsc E B N Tt C CGc
           vis tiles Hexp0 Hvis (tc_op_dot_model out ur F k qb E Hur Hout Hk Hq HE Hn)).
Qed.

End LseCounted.
