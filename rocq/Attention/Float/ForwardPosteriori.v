(** * Forward attention, a-posteriori: the error of each output entry in terms of [sum_j P_j |v_j|].

    The same kernel, schedule and model as Attention/Float/ForwardError.v
    ([attention_forward_error], [attention_forward_error_masked]): fp32
    scores [score2], key tiles of at most [B] keys, [p = exp2 (rnd (s - m))]
    rounded to the storage format before the fp32 products of P.V, tile sums
    left to right, the running rescale, [rnd (acc / l)] and the store to the
    storage format.  The a-priori theorem bounds the error by [afe_rel * V]
    with [V >= max_j |v_j|]; here the leading term is
      [afp_rel * W],  W = sum_j P_j |v_j|   (P the exact softmax of [scale q.k]:
                                             [exact_softmax] of the pairs (k_j, |v_j|)),
    plus an absolute term [afp_abs] made only of the underflow constants
    ([ee], [ea], [es], times [N V] at most): [attention_forward_posteriori]
    (fully visible tiles), [attention_forward_posteriori_masked] (the
    kernel's loop from its start, any mask: the softmax over the visible
    keys).  [W <= V]: at [W = V] this is [afe_rel * V] up to the factor
    [1 + Y] paid on the fold's terms (the computed scores' weights
    [sum_j P'_j |v_j| <= (1 + Y) W]), and below it wherever [W] is smaller
    than [V] by more than that; the caller evaluates [W] per row and
    coordinate from the exact probabilities (as [dv_error]'s [S]).

    Steps: [acc_fold_inv] / [l_fold_inv] (OnlineSoftmaxTile.v) already bound
    the computed [acc] by [(G - 1) A_t + R] with [A_t = sum_j 2^(s_j - m_t) |v_j|];
    [final_division_post] divides keeping [A_t / L_t]; [softmax_perturbation_post]
    moves every score by at most [delta] (the rounding of the scores,
    [score2_error]): [|avg S' v - avg S v| <= (exp (2 delta) - 1) avg S |v|] and
    [avg S' |v| <= exp (2 delta) avg S |v|]; the store adds [us W + es].

    Covered and not covered: exactly as for [attention_forward_error] and
    [attention_forward_error_masked] (Attention/Float/ForwardError.v's header): the
    dot [q.k] and [tl.sum] modelled left to right, the order inside one MMA
    and the MMA accumulating into [acc * alpha] not modelled, no FMA
    contraction, no additive float masks, no overflow; the relative error
    [mp_ue] of [exp2] and [exp2 0 = 1] (masked version) are premises.  The
    [_dot] theorems take the scores' dot as a parameter with its
    [dot_model] (ForwardError.v, PART B'); [attention_forward_posteriori_masked_tf32x3]
    is the fp32 path on CUDA with 3xTF32 scores on tensor cores (its P.V
    products, 3xTF32 in the kernel, are modelled as fp32 products). *)

From Coq Require Import Reals ZArith List Lra Lia Arith.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.NoUnderflow FloatModel.DotError Attention.BackwardCorrect Attention.ScorePerturbation.
From Ojas Require Import FloatModel.MixedPrecision FloatModel.BlockedSum FloatModel.TensorCoreSum FloatModel.Tf32Product.
From Ojas Require Import FloatModel.Notations.
From Ojas Require Import Attention.Float.OnlineSoftmaxError Attention.Float.OnlineSoftmaxTile Attention.Float.ForwardError.
Import ListNotations.
Open Scope R_scope.

(** ** Softmax averages under a perturbation of the scores, a-posteriori *)

Definition sm_avg {T} (xs : list T) (S v : T -> R) : R :=
  rsum (map (fun x => exp (S x) * v x) xs) / rsum (map (fun x => exp (S x)) xs).

Lemma sm_avg_terms : forall {T} (xs : list T) (S v : T -> R),
  sm_avg xs S v = rsum (map (fun x => exp (S x) / rsum (map (fun y => exp (S y)) xs) * v x) xs).
Proof.
  intros T xs S v; unfold sm_avg; rewrite <- rsum_map_div.
  apply rsum_map_ext; intros; unfold Rdiv; ring.
Qed.

Lemma sm_sum_scale : forall {T} (xs : list T) (S S' : T -> R) a b,
  (forall x, In x xs -> a * exp (S x) <= exp (S' x) <= b * exp (S x)) ->
  a * rsum (map (fun x => exp (S x)) xs) <= rsum (map (fun x => exp (S' x)) xs)
  <= b * rsum (map (fun x => exp (S x)) xs).
Proof.
  intros T xs S S' a b H; rewrite <- !rsum_map_scal_l; split; apply bw_rsum_le; intros x Hx; apply (H x Hx).
Qed.

Theorem softmax_perturbation_post : forall {T} (xs : list T) (S S' v : T -> R) delta,
  0 <= delta -> (forall x, In x xs -> Rabs (S' x - S x) <= delta) ->
  Rabs (sm_avg xs S' v - sm_avg xs S v) <= (exp (2 * delta) - 1) * sm_avg xs S (fun x => Rabs (v x))
  /\ sm_avg xs S' (fun x => Rabs (v x)) <= exp (2 * delta) * sm_avg xs S (fun x => Rabs (v x)).
Proof.
  intros T xs S S' v delta Hd HS.
  set (Za := rsum (map (fun x => exp (S x)) xs)); set (Zb := rsum (map (fun x => exp (S' x)) xs)).
  assert (Hb : forall x, In x xs -> exp (- delta) * exp (S x) <= exp (S' x) <= exp delta * exp (S x)).
  { intros x Hx; pose proof (HS x Hx) as H; apply Rabs_le_inv in H; rewrite <- !exp_plus.
    split; apply sp_exp_le; lra. }
  destruct (sm_sum_scale xs S S' _ _ Hb) as [Z1 Z2]; fold Za Zb in Z1, Z2.
  assert (Hed : 0 < exp (- delta)) by apply exp_pos.
  assert (E2 : exp delta * exp delta = exp (2 * delta)) by (rewrite <- exp_plus; f_equal; ring).
  assert (E0 : exp delta * exp (- delta) = 1) by (rewrite <- exp_plus, Rplus_opp_r; apply exp_0).
  assert (Hge : 1 <= exp delta) by (rewrite <- exp_0; apply sp_exp_le; lra).
  assert (HZa : 0 <= Za) by (apply rsum_nonneg; intros y Hy; apply in_map_iff in Hy;
                             destruct Hy as [x [<- _]]; left; apply exp_pos).
  destruct (Req_dec Za 0) as [Z0 | Z0].
  - assert (Zb = 0) by nra.
    unfold sm_avg; fold Za Zb; rewrite Z0, H; unfold Rdiv; rewrite Rinv_0, !Rmult_0_r, Rminus_0_r, Rabs_R0.
    lra.
  - assert (HZa' : 0 < Za) by lra.
    assert (HZb : 0 < Zb) by nra.
    (* each weight moves by at most [(exp (2 delta) - 1)] of its exact value *)
    assert (Hw : forall x, In x xs ->
              Rabs (exp (S' x) / Zb - exp (S x) / Za) <= (exp (2 * delta) - 1) * (exp (S x) / Za)
              /\ exp (S' x) / Zb <= exp (2 * delta) * (exp (S x) / Za)).
    { intros x Hx; destruct (Hb x Hx) as [B1 B2]; pose proof (exp_pos (S x)) as Hx0.
      assert (Up : exp (S' x) / Zb <= exp (2 * delta) * (exp (S x) / Za)).
      { apply (Rmult_le_reg_r (Zb * Za)); [nra |].
        replace (exp (S' x) / Zb * (Zb * Za)) with (exp (S' x) * Za) by (field; lra).
        replace (exp (2 * delta) * (exp (S x) / Za) * (Zb * Za)) with (exp (2 * delta) * exp (S x) * Zb)
          by (field; lra).
        rewrite <- E2.
        assert (exp (S' x) * Za <= exp delta * exp (S x) * Za) by (apply Rmult_le_compat_r; lra).
        assert (Za <= exp delta * Zb).
        { apply (Rmult_le_reg_l (exp (- delta))); [exact Hed |].
          replace (exp (- delta) * (exp delta * Zb)) with (exp delta * exp (- delta) * Zb) by ring.
          rewrite E0; lra. }
        assert (exp delta * exp (S x) * Za <= exp delta * exp (S x) * (exp delta * Zb))
          by (apply Rmult_le_compat_l; [nra | lra]).
        nra. }
      assert (Lo : exp (- delta) * exp (- delta) * (exp (S x) / Za) <= exp (S' x) / Zb).
      { apply (Rmult_le_reg_r (Zb * Za)); [nra |].
        replace (exp (S' x) / Zb * (Zb * Za)) with (exp (S' x) * Za) by (field; lra).
        replace (exp (- delta) * exp (- delta) * (exp (S x) / Za) * (Zb * Za))
          with (exp (- delta) * exp (S x) * (exp (- delta) * Zb)) by (field; lra).
        assert (exp (- delta) * Zb <= Za).
        { apply (Rmult_le_reg_l (exp delta)); [lra |].
          replace (exp delta * (exp (- delta) * Zb)) with (exp delta * exp (- delta) * Zb) by ring.
          rewrite E0; lra. }
        assert (exp (- delta) * exp (S x) * (exp (- delta) * Zb) <= exp (- delta) * exp (S x) * Za)
          by (apply Rmult_le_compat_l; [nra | lra]).
        assert (exp (- delta) * exp (S x) * Za <= exp (S' x) * Za) by (apply Rmult_le_compat_r; lra).
        lra. }
      (* 1 - exp (-2 delta) <= exp (2 delta) - 1 *)
      assert (Hm : 1 - exp (- delta) * exp (- delta) <= exp (2 * delta) - 1).
      { rewrite <- E2.
        assert (exp (- delta) <= 1) by (rewrite <- exp_0; apply sp_exp_le; lra).
        assert (H1 : exp delta * exp (- delta) * (exp delta * exp (- delta)) = 1) by (rewrite E0; ring).
        set (a := exp delta) in *; set (b := exp (- delta)) in *.
        assert (a * a + b * b - 2 = (a - b) * (a - b)) by nra.
        nra. }
      pose proof (Rmult_le_pos _ _ (Rlt_le _ _ Hx0) (Rlt_le _ _ (Rinv_0_lt_compat _ HZa'))) as Hp.
      fold (Rdiv (exp (S x)) Za) in Hp.
      split; [| exact Up].
      apply Rabs_le; split; nra. }
    rewrite !sm_avg_terms; fold Za Zb.
    split.
    + rewrite <- bw_rsum_map_minus, <- rsum_map_scal_l.
      eapply Rle_trans; [apply bw_rsum_abs |]; apply bw_rsum_le; intros x Hx.
      replace (exp (S' x) / Zb * v x - exp (S x) / Za * v x) with ((exp (S' x) / Zb - exp (S x) / Za) * v x)
        by ring.
      rewrite Rabs_mult, <- Rmult_assoc; apply Rmult_le_compat_r; [apply Rabs_pos | apply (Hw x Hx)].
    + rewrite <- rsum_map_scal_l; apply bw_rsum_le; intros x Hx.
      rewrite <- Rmult_assoc; apply Rmult_le_compat_r; [apply Rabs_pos | apply (Hw x Hx)].
Qed.

(** ** The closed forms

    [afp_gA]: the acc fold's relative factor minus one (the leading part of
    [afe_bN]); [afp_rA]: its absolute term ([afe_bN]'s second part times [V]);
    [afe_bL] (Attention/Float/ForwardError.v) the denominator's.  The same upper
    bounds [X], [Y], [P1], [CG], [CR] as [afe_rel]. *)
Definition afp_gA (u ue us : R) (X P1 CG : R) : R :=
  P1 * ((1 + u) * (1 + us) * ((1 + ue) * X)) * CG * X - 1.

Definition afp_rA (u ue ee ea us es V : R) (B N Tt : nat) (X P1 CG CR : R) : R :=
  let H := P1 * ((1 + u) * (1 + us) * ((1 + ue) * X)) in
  INR Tt * CR * ((((H * CG * X) * (INR N * V) * ee) * (1 + u) + ea
                  + P1 * ((1 + u) * ((1 + us) * ee + es) * (INR B * V) + INR B * ea)) * (1 + u)).

Definition afp_rel (u ue ee ea us : R) (B N Tt : nat) (X Y P1 CG CR : R) : R :=
  let bL := afe_bL u ue ee ea B N Tt X P1 CG CR in
  ((1 + u) * (afp_gA u ue us X P1 CG + bL) * (1 + Y) / (1 - bL) + u * (1 + Y) + Y) * (1 + us) + us.

Definition afp_abs (u ue ee ea us es V : R) (B N Tt : nat) (X P1 CG CR : R) : R :=
  let bL := afe_bL u ue ee ea B N Tt X P1 CG CR in
  ((1 + u) * afp_rA u ue ee ea us es V B N Tt X P1 CG CR / (1 - bL) + ea) * (1 + us) + es.

(** The exact a-posteriori scale of one output coordinate: [sum_j P_j |v_j|]. *)
Definition abs_value (kv : list R * R) : list R * R := (fst kv, Rabs (snd kv)).

Section Post.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

(** The final division, keeping the a-posteriori scale [Aa / L]. *)
Lemma final_division_post : forall l L acc Nn Aa bL bA R,
  1 <= L -> Rabs Nn <= Aa -> 0 <= bL < 1 -> 0 <= bA -> 0 <= R ->
  Rabs (l - L) <= bL * L -> Rabs (acc - Nn) <= bA * Aa + R ->
  Rabs (rnd (acc / l) - Nn / L) <= (1 + u) * ((bA + bL) * (Aa / L) + R) / (1 - bL) + u * (Aa / L) + ea.
Proof.
  intros l L acc Nn Aa bL bA R HL HN HbL HbA HR Hl Hacc.
  pose proof (ff_u_nonneg A_) as Hu.
  pose proof (ff_abs A_ (acc / l)) as Hr.
  assert (HA : 0 <= Aa) by (eapply Rle_trans; [apply Rabs_pos | exact HN]).
  apply Rabs_le_inv in Hl.
  assert (Hlp : 0 < l) by nra.
  assert (Hl0 : (1 - bL) * L <= l) by lra.
  set (W := Aa / L).
  assert (HW : 0 <= W) by (unfold W, Rdiv; apply Rmult_le_pos; [lra | left; apply Rinv_0_lt_compat; lra]).
  set (D := ((bA + bL) * W + R) / (1 - bL)).
  assert (Hq : Rabs (acc / l - Nn / L) <= D).
  { replace (acc / l - Nn / L) with (((acc - Nn) * L - Nn * (l - L)) / (l * L)) by (field; lra).
    unfold Rdiv at 1; rewrite Rabs_mult, (Rabs_right (/ (l * L)))
      by (apply Rle_ge, Rlt_le, Rinv_0_lt_compat; nra).
    assert (Hn : Rabs ((acc - Nn) * L - Nn * (l - L)) <= ((bA + bL) * Aa + R) * L).
    { eapply Rle_trans; [apply Rabs_triang |]; rewrite Rabs_mult, Rabs_Ropp, Rabs_mult.
      rewrite (Rabs_right L) by lra.
      assert (Rabs (acc - Nn) * L <= (bA * Aa + R) * L) by (apply Rmult_le_compat_r; lra).
      assert (Rabs (l - L) <= bL * L) by (apply Rabs_le; lra).
      assert (Rabs Nn * Rabs (l - L) <= Aa * (bL * L))
        by (apply Rmult_le_compat; auto using Rabs_pos).
      nra. }
    assert (Hd : ((bA + bL) * Aa + R) * L * / (l * L) <= D).
    { replace (((bA + bL) * Aa + R) * L * / (l * L)) with (((bA + bL) * Aa + R) / l) by (field; lra).
      unfold D; apply (Rmult_le_reg_r (l * (1 - bL))); [nra |].
      replace (((bA + bL) * Aa + R) / l * (l * (1 - bL))) with (((bA + bL) * Aa + R) * (1 - bL)) by (field; lra).
      replace (((bA + bL) * W + R) / (1 - bL) * (l * (1 - bL))) with (((bA + bL) * W + R) * l) by (field; lra).
      assert (E : (bA + bL) * Aa = (bA + bL) * W * L) by (unfold W; field; lra).
      rewrite E.
      assert (0 <= (bA + bL) * W) by (apply Rmult_le_pos; lra).
      assert ((bA + bL) * W * L * (1 - bL) <= (bA + bL) * W * l) by (rewrite Rmult_assoc; apply Rmult_le_compat_l; lra).
      assert (R * (1 - bL) <= R * l) by (apply Rmult_le_compat_l; nra).
      lra. }
    eapply Rle_trans; [| exact Hd]; apply Rmult_le_compat_r; [left; apply Rinv_0_lt_compat; nra | exact Hn]. }
  assert (HNL : Rabs (Nn / L) <= W).
  { unfold W, Rdiv; rewrite Rabs_mult, (Rabs_right (/ L)) by (left; apply Rinv_0_lt_compat; lra).
    apply Rmult_le_compat_r; [left; apply Rinv_0_lt_compat; lra | exact HN]. }
  assert (Hx : Rabs (acc / l) <= W + D)
    by (replace (acc / l) with ((acc / l - Nn / L) + Nn / L) by ring; eapply Rle_trans; [apply Rabs_triang | lra]).
  replace (rnd (acc / l) - Nn / L) with ((rnd (acc / l) - acc / l) + (acc / l - Nn / L)) by ring.
  eapply Rle_trans; [apply Rabs_triang |].
  assert (u * Rabs (acc / l) <= u * (W + D)) by (apply Rmult_le_compat_l; lra).
  fold W; replace ((1 + u) * ((bA + bL) * W + R) / (1 - bL)) with ((1 + u) * D) by (unfold D; field; lra).
  nra.
Qed.

Lemma exact_l_ge_1 : forall mt (svs : list (R * R)), (exists q, In q svs /\ fst q = mt) ->
  1 <= exact_l mt (map fst svs).
Proof.
  intros mt svs [q [Hq E]]; unfold exact_l; rewrite map_map.
  replace 1 with (Rpower 2 (fst q - mt)) by (rewrite E, Rminus_diag_eq, Rpower_O by (reflexivity || lra); reflexivity).
  apply ost_rsum_ge_in.
  - intros y Hy; apply in_map_iff in Hy; destruct Hy as [z [<- _]]; left; apply Rpower_pos.
  - apply in_map_iff; exists q; split; [reflexivity | exact Hq].
Qed.

(** The online softmax over the kernel's tiles (given fp32 scores), a-posteriori:
    [acc_fold_inv] and [l_fold_inv] composed with [final_division_post], for any
    upper bounds [bA], [bL], [R] of the folds' factors. *)
Theorem online_softmax_posteriori : forall K m0 V B N Tt tiles bA bL Rb,
  0 <= K -> 0 <= V -> (1 <= B)%nat ->
  (exists q, In q (concat tiles) /\ fst q = m0) ->
  (forall q, In q (concat tiles) -> Rabs (snd q) <= V /\ fmt (fst q) /\ acc_m_run m0 tiles - fst q <= K) ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (concat tiles) <= N)%nat -> (length tiles <= Tt)%nat ->
  out_bL M K m0 B N Tt (length tiles) (acc_m_run m0 tiles) <= bL -> bL < 1 ->
  Gk M (H_acc M K B) m0 (length tiles) (acc_m_run m0 tiles) - 1 <= bA ->
  Rk M K (H_acc M K B) (Ry_acc M V B) (INR N * V) Tt (length tiles) <= Rb ->
  let mt := acc_m_run m0 tiles in
  let L := exact_l mt (map fst (concat tiles)) in
  Rabs (rnd (acc_run M m0 0 tiles / l_run M m0 0 (map (map fst) tiles)) - exact_pv mt (concat tiles) / L)
  <= (1 + u) * ((bA + bL) * (exact_pv_abs mt (concat tiles) / L) + Rb) / (1 - bL)
     + u * (exact_pv_abs mt (concat tiles) / L) + ea.
Proof.
  intros K m0 V B N Tt tiles bA bL Rb HK HV HB [q0 [Hq0 Eq0]] Hks HBt HN HT HbL HbL1 HbA HR mt L.
  set (t := length tiles) in *.
  assert (Fm0 : fmt m0) by (rewrite <- Eq0; apply (Hks q0 Hq0)).
  assert (HK0 : mt - m0 <= K) by (rewrite <- Eq0; apply (Hks q0 Hq0)).
  pose proof (acc_fold_inv M K m0 V B N Tt tiles HK HV Fm0 HB Hks HBt HN HT HK0) as Ca.
  assert (HBt' : Forall (fun tl => (length tl <= B)%nat) (map (map fst) tiles)).
  { apply Forall_forall; intros tl Htl; apply in_map_iff in Htl; destruct Htl as [tl' [<- Htl']].
    rewrite map_length; exact (proj1 (Forall_forall _ _) HBt tl' Htl'). }
  assert (Hmr : m_run m0 (map (map fst) tiles) = mt) by (unfold m_run, mt, acc_m_run; apply mrun_map).
  assert (Hks' : forall s, In s (concat (map (map fst) tiles)) -> fmt s /\ m_run m0 (map (map fst) tiles) - s <= K).
  { intros s Hs; rewrite <- concat_map in Hs; apply in_map_iff in Hs; destruct Hs as [q [<- Hq]].
    rewrite Hmr; destruct (Hks q Hq) as [_ [F1 F2]]; split; assumption. }
  assert (HN' : (length (concat (map (map fst) tiles)) <= N)%nat) by (rewrite <- concat_map, map_length; exact HN).
  assert (HT' : (length (map (map fst) tiles) <= Tt)%nat) by (rewrite map_length; exact HT).
  pose proof (l_fold_inv M K m0 B N Tt (map (map fst) tiles) HK Fm0 HB Hks' HBt' HN' HT' ltac:(rewrite Hmr; exact HK0)) as Cl.
  rewrite Hmr, map_length, <- concat_map in Cl; fold t L in Cl; fold t in Ca.
  assert (HL1 : 1 <= L).
  { apply exact_l_ge_1; destruct (mrun_attained fst tiles m0) as [E | Hq]; [| exact Hq].
    exists q0; split; [exact Hq0 | unfold mt, acc_m_run; rewrite E; exact Eq0]. }
  pose proof (exact_pv_abs_ge mt (concat tiles)) as HNA.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (mp_eta_e_nonneg M) as Hee.
  pose proof (ff_u_nonneg S_) as Hus; pose proof (ff_eta_nonneg S_) as Hes; pose proof (ff_eta_nonneg A_) as Hea.
  assert (Hm0t : m0 <= mt)
    by (unfold mt, acc_m_run; apply (mrun_ge M (R * R) fst tiles m0 Fm0); intros q Hq; apply (Hks q Hq)).
  destruct (H_l_bounds M K B _ _ HK (Rle_refl _) (Rle_refl _)) as [HHl _].
  destruct (H_acc_bounds M K B _ _ HK (Rle_refl _) (Rle_refl _)) as [HHa _].
  assert (HRl : 0 <= Ry_l M B)
    by (unfold Ry_l; apply Rmult_le_pos; [apply pow_le; lra | apply Rmult_le_pos; [apply pos_INR | exact Hee]]).
  assert (HRa : 0 <= Ry_acc M V B).
  { unfold Ry_acc; pose proof (pos_INR B).
    assert (0 <= (1 + u) * ((1 + us) * ee + es)) by (apply Rmult_le_pos; nra).
    apply Rmult_le_pos; [apply pow_le; lra |]; apply Rplus_le_le_0_compat; apply Rmult_le_pos; nra. }
  assert (HNV : 0 <= INR N * V) by (apply Rmult_le_pos; [apply pos_INR | lra]).
  pose proof (Gk_ge_1 M (H_l M K B) m0 HHl t mt Hm0t) as HGl.
  pose proof (Gk_ge_1 M (H_acc M K B) m0 HHa t mt Hm0t) as HGa.
  pose proof (Rk_nonneg M K (H_l M K B) (Ry_l M B) (INR N) Tt HHl HRl (pos_INR N) t) as HRkl.
  pose proof (Rk_nonneg M K (H_acc M K B) (Ry_acc M V B) (INR N * V) Tt HHa HRa HNV t) as HRka.
  unfold inv in Cl, Ca; unfold out_bL in HbL; fold t mt in HbL, HbA, HR, Ca.
  assert (HA0 : 0 <= exact_pv_abs mt (concat tiles)) by (eapply Rle_trans; [apply Rabs_pos | exact HNA]).
  apply final_division_post; try lra.
  - eapply Rle_trans; [exact Cl |].
    assert (Rk M K (H_l M K B) (Ry_l M B) (INR N) Tt t <= Rk M K (H_l M K B) (Ry_l M B) (INR N) Tt t * L) by nra.
    assert ((Gk M (H_l M K B) m0 t mt - 1 + Rk M K (H_l M K B) (Ry_l M B) (INR N) Tt t) * L <= bL * L)
      by (apply Rmult_le_compat_r; lra).
    nra.
  - eapply Rle_trans; [exact Ca |].
    assert ((Gk M (H_acc M K B) m0 t mt - 1) * exact_pv_abs mt (concat tiles)
            <= bA * exact_pv_abs mt (concat tiles)) by (apply Rmult_le_compat_r; lra).
    lra.
Qed.

Lemma sm_avg_abs : forall {T} (xs : list T) (S v : T -> R),
  Rabs (sm_avg xs S v) <= sm_avg xs S (fun x => Rabs (v x)) /\ 0 <= sm_avg xs S (fun x => Rabs (v x)).
Proof.
  intros T xs S v; rewrite !sm_avg_terms.
  set (Z := rsum (map (fun y => exp (S y)) xs)).
  assert (HZ : 0 <= / Z).
  { assert (0 <= Z) by (apply rsum_nonneg; intros y Hy; apply in_map_iff in Hy;
                        destruct Hy as [x [<- _]]; left; apply exp_pos).
    destruct (Req_dec Z 0) as [E | E]; [rewrite E, Rinv_0; lra | left; apply Rinv_0_lt_compat; lra]. }
  assert (Hw : forall x, 0 <= exp (S x) / Z) by (intros x; apply Rmult_le_pos; [left; apply exp_pos | exact HZ]).
  split.
  - eapply Rle_trans; [apply bw_rsum_abs |]; apply bw_rsum_le; intros x _.
    rewrite Rabs_mult, (Rabs_right (exp (S x) / Z)) by (apply Rle_ge, Hw); lra.
  - apply rsum_nonneg; intros y Hy; apply in_map_iff in Hy; destruct Hy as [x [<- _]].
    apply Rmult_le_pos; [apply Hw | apply Rabs_pos].
Qed.

(** The kernel's forward on fully visible tiles, one output coordinate of one
    query row (the hypotheses of [attention_forward_error]): the error is at
    most [afp_rel * W + afp_abs], [W = sum_j P_j |v_j|] with [P] the exact
    softmax of [scale q.k] over the row's keys. *)
(** With the scores' dot [dotf] of any [dot_model] (ForwardError.v, PART B'). *)
Theorem attention_forward_posteriori_dot : forall (dotf : list R -> list R -> R) (g_rel g_abs : R) (q : list R) (c scale uc P V X Y P1 CG CR : R) (E B N Tt : nat)
    (k0 : list R * R) (tl0 : list (list R * R)) (rest : list (list (list R * R))),
  let tiles := (k0 :: tl0) :: rest in
  let ktiles := map (map (kv_pair_with M dotf c q)) tiles in
  let m0 := score2_with A_ dotf c q (fst k0) in
  dot_model dotf E g_rel g_abs ->
  afe_premises_de M c scale uc P (g_rel * P + g_abs) V X Y P1 CG CR B N Tt ->
  length q = E ->
  (forall kv, In kv (concat tiles) -> length (fst kv) = E /\ dot_abs q (fst kv) <= P /\ Rabs (snd kv) <= V) ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (concat tiles) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rabs (ff_rnd S_ (rnd (acc_run M m0 0 ktiles / l_run M m0 0 (map (map fst) ktiles)))
        - exact_softmax scale q (concat tiles))
  <= afp_rel u ue ee ea us B N Tt X Y P1 CG CR * exact_softmax scale q (map abs_value (concat tiles))
     + afp_abs u ue ee ea us es V B N Tt X P1 CG CR.
Proof.
  intros dotf g_rel g_abs q c scale uc P V X Y P1 CG CR E B N Tt k0 tl0 rest tiles ktiles m0
    Hdm Hpre Hq Hkeys HBt HN HT.
  pose proof Hpre as [HV Hs Huc Hc HB HX HY HP HG HC HbL].
  pose proof (ff_u_nonneg A_) as Hu0; pose proof (ff_eta_nonneg A_) as Hea.
  pose proof (ff_u_nonneg S_) as Hus; pose proof (ff_eta_nonneg S_) as Hes.
  destruct (kernel_tiles_ok_with M dotf g_rel g_abs q c scale uc P V E B N Tt k0 tl0 rest Hdm Hq Hkeys Hs Huc Hc HBt HN HT)
    as [Hdelta [HK [Hm0t [HmK [Ecat [Hsc [Hex [Hks [HBk [HNk HTk]]]]]]]]]].
  fold tiles in Hdelta, HK, Hm0t, HmK, Ecat, Hsc, Hex, Hks, HBk, HNk, HTk.
  fold ktiles m0 in Hdelta, HK, Hm0t, HmK, Ecat, Hsc, Hex, Hks, HBk, HNk, HTk.
  set (delta := score_delta_de A_ scale uc P (g_rel * P + g_abs)) in *.
  set (K := 2 * score_max_de A_ scale uc P (g_rel * P + g_abs)) in *.
  set (mt := acc_m_run m0 ktiles) in *.
  (* the two folds, at the a-priori constants *)
  destruct (out_bL_apriori M K m0 B N Tt (length ktiles) mt X P1 CG CR HK ltac:(lia) Hm0t HmK HX HP HG HC) as [bL0 bL1].
  destruct (H_acc_bounds M K B X P1 HK HX HP) as [HHa HHa'].
  set (H' := P1 * ((1 + u) * (1 + us) * ((1 + ue) * X))) in *.
  pose proof (Gk_apriori M (H_acc M K B) H' m0 Tt (length ktiles) mt K X CG ltac:(lra) ltac:(lia) Hm0t HmK HX HG) as HgA.
  pose proof (mp_eta_e_nonneg M) as Hee; pose proof (pos_INR B) as HBp.
  set (Ra0 := (1 + u) * ((1 + us) * ee + es) * (INR B * V) + INR B * ea).
  assert (HRa0 : 0 <= Ra0).
  { unfold Ra0; assert (0 <= (1 + u) * ((1 + us) * ee + es)) by (apply Rmult_le_pos; nra).
    apply Rplus_le_le_0_compat; [apply Rmult_le_pos; [lra | apply Rmult_le_pos; lra] | apply Rmult_le_pos; lra]. }
  assert (HP1 : 1 <= P1) by (assert (1 <= (1 + u) ^ (B - 1)) by (apply pow_R1_Rle; lra); lra).
  assert (HRy : 0 <= Ry_acc M V B <= P1 * Ra0).
  { unfold Ry_acc; fold Ra0; split; [apply Rmult_le_pos; [apply pow_le; lra | lra] | apply Rmult_le_compat_r; lra]. }
  assert (HNV : 0 <= INR N * V) by (apply Rmult_le_pos; [apply pos_INR | lra]).
  pose proof (Rk_apriori M K (H_acc M K B) H' (Ry_acc M V B) (P1 * Ra0) (INR N * V) Tt (length ktiles) X CG CR
                ltac:(lra) HRy HNV ltac:(lia) HX HG HC) as HrA.
  pose proof (Rk_nonneg M K (H_acc M K B) (Ry_acc M V B) (INR N * V) Tt HHa (proj1 HRy) HNV (length ktiles)) as HRk.
  pose proof (Gk_ge_1 M (H_acc M K B) m0 HHa (length ktiles) mt Hm0t) as HGa.
  set (gA := afp_gA u ue us X P1 CG).
  set (rA := afp_rA u ue ee ea us es V B N Tt X P1 CG CR).
  set (bL := afe_bL u ue ee ea B N Tt X P1 CG CR) in *.
  assert (EgA : gA = H' * CG * X - 1) by reflexivity.
  assert (ErA : rA = INR Tt * CR * ((((H' * CG * X) * (INR N * V) * ee) * (1 + u) + ea + P1 * Ra0) * (1 + u)))
    by reflexivity.
  assert (Hon := online_softmax_posteriori K m0 V B N Tt ktiles gA bL rA HK (Rlt_le _ _ HV) HB Hex Hks HBk HNk HTk
                  ltac:(fold mt; lra) HbL ltac:(fold mt; lra) ltac:(fold mt; lra)).
  cbv zeta in Hon; fold mt in Hon.
  (* the perturbation of the scores, a-posteriori *)
  set (S0 := fun kv : list R * R => scale * dot_R q (fst kv) - mt * ln 2).
  set (S1 := fun kv : list R * R => (score2_with A_ dotf c q (fst kv) - mt) * ln 2).
  assert (EN : exact_pv mt (concat ktiles) / exact_l mt (map fst (concat ktiles)) = sm_avg (concat tiles) S1 snd)
    by (unfold exact_pv, exact_l, sm_avg; rewrite Ecat, !map_map; reflexivity).
  assert (EA : exact_pv_abs mt (concat ktiles) / exact_l mt (map fst (concat ktiles))
               = sm_avg (concat tiles) S1 (fun kv => Rabs (snd kv)))
    by (unfold exact_pv_abs, exact_l, sm_avg; rewrite Ecat, !map_map; reflexivity).
  assert (EZ : exact_softmax scale q (concat tiles) = sm_avg (concat tiles) S0 snd)
    by (unfold exact_softmax, sm_avg, S0; symmetry;
        apply (softmax_average_shift (concat tiles) (fun kv => scale * dot_R q (fst kv)) snd (mt * ln 2))).
  assert (EW : exact_softmax scale q (map abs_value (concat tiles)) = sm_avg (concat tiles) S0 (fun kv => Rabs (snd kv))).
  { unfold exact_softmax, sm_avg, S0; rewrite !map_map; cbn [abs_value fst snd]; symmetry.
    apply (softmax_average_shift (concat tiles) (fun kv => scale * dot_R q (fst kv)) (fun kv => Rabs (snd kv)) (mt * ln 2)). }
  rewrite EN, EA in Hon; rewrite EZ, EW.
  destruct (softmax_perturbation_post (concat tiles) S0 S1 snd delta Hdelta) as [Hp1 Hp2].
  { intros kv Hkv; unfold S0, S1.
    replace ((score2_with A_ dotf c q (fst kv) - mt) * ln 2 - (scale * dot_R q (fst kv) - mt * ln 2))
      with (score2_with A_ dotf c q (fst kv) * ln 2 - scale * dot_R q (fst kv)) by ring.
    exact (Hsc kv Hkv). }
  destruct (sm_avg_abs (concat tiles) S0 snd) as [HZW HW0].
  destruct (sm_avg_abs (concat tiles) S1 snd) as [_ HW1].
  set (W := sm_avg (concat tiles) S0 (fun kv => Rabs (snd kv))) in *.
  set (W1 := sm_avg (concat tiles) S1 (fun kv => Rabs (snd kv))) in *.
  set (Z := sm_avg (concat tiles) S0 snd) in *.
  set (Z1 := sm_avg (concat tiles) S1 snd) in *.
  set (o := rnd (acc_run M m0 0 ktiles / l_run M m0 0 (map (map fst) ktiles))) in *.
  (* the closed form *)
  assert (HgA0 : 0 <= gA) by (rewrite EgA; lra).
  assert (HrA0 : 0 <= rA) by (rewrite ErA; lra).
  assert (HbL0 : 0 <= bL) by lra.
  assert (HY0 : 0 <= Y) by (assert (1 <= exp (2 * delta)) by (rewrite <- exp_0; apply sp_exp_le; lra); lra).
  assert (HW1W : W1 <= (1 + Y) * W) by (assert (exp (2 * delta) * W <= (1 + Y) * W) by (apply Rmult_le_compat_r; lra); lra).
  set (c1 := (1 + u) * (gA + bL) / (1 - bL)).
  assert (Hc1 : 0 <= c1) by (unfold c1, Rdiv; apply Rmult_le_pos; [nra | left; apply Rinv_0_lt_compat; lra]).
  set (err := ((1 + u) * (gA + bL) * (1 + Y) / (1 - bL) + u * (1 + Y) + Y) * W + (1 + u) * rA / (1 - bL) + ea).
  assert (Herr : Rabs (o - Z) <= err).
  { replace (o - Z) with ((o - Z1) + (Z1 - Z)) by ring.
    eapply Rle_trans; [apply Rabs_triang |].
    replace ((1 + u) * ((gA + bL) * W1 + rA) / (1 - bL) + u * W1 + ea)
      with (c1 * W1 + (1 + u) * rA / (1 - bL) + u * W1 + ea) in Hon by (unfold c1; field; lra).
    assert (c1 * W1 <= c1 * ((1 + Y) * W)) by (apply Rmult_le_compat_l; lra).
    assert (u * W1 <= u * ((1 + Y) * W)) by (apply Rmult_le_compat_l; lra).
    assert ((exp (2 * delta) - 1) * W <= Y * W) by (apply Rmult_le_compat_r; lra).
    replace err with (c1 * ((1 + Y) * W) + (1 + u) * rA / (1 - bL) + u * ((1 + Y) * W) + ea + Y * W)
      by (unfold err, c1; field; lra).
    lra. }
  assert (Ho : Rabs o <= W + err)
    by (replace o with ((o - Z) + Z) by ring; eapply Rle_trans; [apply Rabs_triang | lra]).
  pose proof (ff_abs S_ o) as Hso.
  replace (afp_rel u ue ee ea us B N Tt X Y P1 CG CR * W + afp_abs u ue ee ea us es V B N Tt X P1 CG CR)
    with (err * (1 + us) + us * W + es)
    by (unfold err, afp_rel, afp_abs; cbv zeta; fold bL gA rA; field; lra).
  replace (ff_rnd S_ o - Z) with ((ff_rnd S_ o - o) + (o - Z)) by ring.
  eapply Rle_trans; [apply Rabs_triang |].
  assert (us * Rabs o <= us * (W + err)) by (apply Rmult_le_compat_l; lra).
  nra.
Qed.

(** The blocked fp32 dot ([score2]): the [_dot] theorem at [blocked_dot_model]. *)
Theorem attention_forward_posteriori : forall (q : list R) (c scale uc P V X Y P1 CG CR : R) (E B N Tt : nat)
    (k0 : list R * R) (tl0 : list (list R * R)) (rest : list (list (list R * R))),
  let tiles := (k0 :: tl0) :: rest in
  let ktiles := map (map (kv_pair M c q)) tiles in
  let m0 := score2 A_ c q (fst k0) in
  afe_premises M c scale uc P V X Y P1 CG CR E B N Tt ->
  length q = E ->
  (forall kv, In kv (concat tiles) -> length (fst kv) = E /\ dot_abs q (fst kv) <= P /\ Rabs (snd kv) <= V) ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (concat tiles) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rabs (ff_rnd S_ (rnd (acc_run M m0 0 ktiles / l_run M m0 0 (map (map fst) ktiles)))
        - exact_softmax scale q (concat tiles))
  <= afp_rel u ue ee ea us B N Tt X Y P1 CG CR * exact_softmax scale q (map abs_value (concat tiles))
     + afp_abs u ue ee ea us es V B N Tt X P1 CG CR.
Proof.
  intros q c scale uc P V X Y P1 CG CR E B N Tt k0 tl0 rest tiles ktiles m0 Hpre.
  exact (attention_forward_posteriori_dot (bdot A_) _ _ q c scale uc P V X Y P1 CG CR E B N Tt k0 tl0 rest
           (blocked_dot_model A_ E (afe_E_pos _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ Hpre) (afe_E_u _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ Hpre))
           (afe_premises_blocked _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ Hpre)).
Qed.

(** The kernel's loop as it runs ([kernel_run] from [kernel_start], any tiles,
    any mask [vis]), one output coordinate of one query row, against the
    softmax over the visible keys; [W] over the visible keys too. *)
(** With the scores' dot [dotf] of any [dot_model] (ForwardError.v, PART B'). *)
Theorem attention_forward_posteriori_masked_dot : forall (dotf : list R -> list R -> R) (g_rel g_abs : R) (q : list R) (c scale uc P V X Y P1 CG CR : R)
    (E B N Tt : nat) (vis : list R * R -> bool) (tiles : list (list (list R * R))),
  let sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv) in
  let st := kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) tiles in
  mp_exp2 M 0 = 1 ->
  (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  dot_model dotf E g_rel g_abs ->
  afe_premises_de M c scale uc P (g_rel * P + g_abs) V X Y P1 CG CR B N Tt ->
  length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true ->
     length (fst kv) = E /\ dot_abs q (fst kv) <= P /\ Rabs (snd kv) <= V) ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rabs (ff_rnd S_ (rnd (nth 0 (ks_acc st) 0 / ks_l st)) - exact_softmax scale q (filter vis (concat tiles)))
  <= afp_rel u ue ee ea us B N Tt X Y P1 CG CR * exact_softmax scale q (map abs_value (filter vis (concat tiles)))
     + afp_abs u ue ee ea us es V B N Tt X P1 CG CR.
Proof.
  intros dotf g_rel g_abs q c scale uc P V X Y P1 CG CR E B N Tt vis tiles sck st
    Hexp0 Hvis Hdm Hpre Hq Hkeys HBt HN HT.
  pose proof Hpre as [HV Hs Huc Hc HB HX HY HP HG HC HbL].
  destruct (kernel_run_visible_tiles_with M dotf c q vis B tiles Hexp0 Hvis HBt) as [k0 [r [rest [Ecat [HBf [Hlen Est]]]]]].
  unfold st, sck; rewrite Est; cbn [ks_l ks_acc nth]; rewrite <- Ecat.
  apply (attention_forward_posteriori_dot dotf g_rel g_abs q c scale uc P V X Y P1 CG CR E B N Tt k0 r rest); auto.
  - intros kv Hkv; rewrite Ecat in Hkv; apply filter_In in Hkv; destruct Hkv; auto.
  - rewrite Ecat; exact HN.
  - lia.
Qed.

(** The blocked fp32 dot ([score2]): the [_dot] theorem at [blocked_dot_model]. *)
Theorem attention_forward_posteriori_masked : forall (q : list R) (c scale uc P V X Y P1 CG CR : R)
    (E B N Tt : nat) (vis : list R * R -> bool) (tiles : list (list (list R * R))),
  let sck := fun kv : list R * R => score2 A_ c q (fst kv) in
  let st := kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) tiles in
  mp_exp2 M 0 = 1 ->
  (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  afe_premises M c scale uc P V X Y P1 CG CR E B N Tt ->
  length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true ->
     length (fst kv) = E /\ dot_abs q (fst kv) <= P /\ Rabs (snd kv) <= V) ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rabs (ff_rnd S_ (rnd (nth 0 (ks_acc st) 0 / ks_l st)) - exact_softmax scale q (filter vis (concat tiles)))
  <= afp_rel u ue ee ea us B N Tt X Y P1 CG CR * exact_softmax scale q (map abs_value (filter vis (concat tiles)))
     + afp_abs u ue ee ea us es V B N Tt X P1 CG CR.
Proof.
  intros q c scale uc P V X Y P1 CG CR E B N Tt vis tiles sck st Hexp0 Hvis Hpre.
  exact (attention_forward_posteriori_masked_dot (bdot A_) _ _ q c scale uc P V X Y P1 CG CR E B N Tt vis tiles Hexp0 Hvis
           (blocked_dot_model A_ E (afe_E_pos _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ Hpre) (afe_E_u _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ Hpre))
           (afe_premises_blocked _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ Hpre)).
Qed.

(** The float32 forward on CUDA with 3xTF32 scores on tensor cores
    ([tf32x3_tc_dot_model], ForwardError.v PART E), a posteriori: the
    kernel's loop under any mask. *)
Theorem attention_forward_posteriori_masked_tf32x3 : forall (out : R -> R) (ur : R) (F : Z) (k qb : nat)
    (q : list R) (c scale uc P V X Y P1 CG CR : R)
    (E B N Tt : nat) (vis : list R * R -> bool) (tiles : list (list (list R * R))),
  let dotf := tf32x3_dot_tc tf32_rna tf32_rz (tc_align F) out k in
  let sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv) in
  let st := kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) tiles in
  0 <= ur -> (forall x, Rabs (out x - x) <= ur * Rabs x) ->
  (1 <= k)%nat -> (1 <= qb)%nat -> (E <= qb * k)%nat ->
  INR (3 * qb) * tc_delta (bpow radix2 (1 - F)) ur k < 1 ->
  mp_exp2 M 0 = 1 ->
  (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  afe_premises_de M c scale uc P (tf32x3_tc_rel (bpow radix2 (1 - F)) ur k qb * P + 0) V X Y P1 CG CR B N Tt ->
  length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true ->
     length (fst kv) = E /\ dot_abs q (fst kv) <= P /\ Rabs (snd kv) <= V) ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rabs (ff_rnd S_ (rnd (nth 0 (ks_acc st) 0 / ks_l st)) - exact_softmax scale q (filter vis (concat tiles)))
  <= afp_rel u ue ee ea us B N Tt X Y P1 CG CR * exact_softmax scale q (map abs_value (filter vis (concat tiles)))
     + afp_abs u ue ee ea us es V B N Tt X P1 CG CR.
Proof.
  intros out ur F k qb q c scale uc P V X Y P1 CG CR E B N Tt vis tiles dotf sck st Hur Hout Hk Hq HE Hn
    Hexp0 Hvis Hpre.
  exact (attention_forward_posteriori_masked_dot dotf _ 0 q c scale uc P V X Y P1 CG CR E B N Tt vis tiles Hexp0 Hvis
           (tf32x3_tc_dot_model out ur F k qb E Hur Hout Hk Hq HE Hn) Hpre).
Qed.

(** The same on the H100's tensor cores (operand-exponent alignment, [tf32x3_tc_op_dot_model]). *)
Theorem attention_forward_posteriori_masked_tf32x3_op : forall (out : R -> R) (ur : R) (F : Z) (k qb : nat)
    (q : list R) (c scale uc P V X Y P1 CG CR : R)
    (E B N Tt : nat) (vis : list R * R -> bool) (tiles : list (list (list R * R))),
  let dotf := tf32x3_dot_tc_op tf32_rna tf32_rz (tc_align_op F) out k in
  let sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv) in
  let st := kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) tiles in
  0 <= ur -> (forall x, Rabs (out x - x) <= ur * Rabs x) ->
  (1 <= k)%nat -> (1 <= qb)%nat -> (E <= qb * k)%nat ->
  INR (3 * qb) * tc_delta (bpow radix2 (1 - F)) ur k < 1 ->
  mp_exp2 M 0 = 1 ->
  (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  afe_premises_de M c scale uc P (tf32x3_tc_rel (bpow radix2 (1 - F)) ur k qb * P + 0) V X Y P1 CG CR B N Tt ->
  length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true ->
     length (fst kv) = E /\ dot_abs q (fst kv) <= P /\ Rabs (snd kv) <= V) ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rabs (ff_rnd S_ (rnd (nth 0 (ks_acc st) 0 / ks_l st)) - exact_softmax scale q (filter vis (concat tiles)))
  <= afp_rel u ue ee ea us B N Tt X Y P1 CG CR * exact_softmax scale q (map abs_value (filter vis (concat tiles)))
     + afp_abs u ue ee ea us es V B N Tt X P1 CG CR.
Proof.
  intros out ur F k qb q c scale uc P V X Y P1 CG CR E B N Tt vis tiles dotf sck st Hur Hout Hk Hq HE Hn
    Hexp0 Hvis Hpre.
  exact (attention_forward_posteriori_masked_dot dotf _ 0 q c scale uc P V X Y P1 CG CR E B N Tt vis tiles Hexp0 Hvis
           (tf32x3_tc_op_dot_model out ur F k qb E Hur Hout Hk Hq HE Hn) Hpre).
Qed.

End Post.
