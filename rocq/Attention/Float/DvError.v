(** * The attention backward's dV in mixed precision: an a-posteriori bound.

    The dK/dV kernel of kernels/ojas_kernels/attention_backward.py ([_bwd_dkdv_kernel], [_dkdv_tile])
    computes, for one key [k] (head dim [E]) and one value coordinate, over the
    query tiles of every query head of the key's group,
      s2  = rnd (dot (k, q_i) * qk_scale)            -- [score2], as the forward
      p_i = exp2 (rnd (s2 - lse2_i))   (0 where masked)
      dV  = sum_i rnd (rnd_s (p_i) * dO_i)           -- P rounded to dO's dtype,
                                                        products in fp32, the
                                                        query tiles summed blocked
      stored as rnd_s (dV)
    with [lse2_i] the fp32 base-2 lse the backward reads ([lse * log2 e]).

    [dv_error]: if every visible query's scores are within [delta] of
    [scale q_i.k] (natural units; [score2_error] gives it), its [lse2_i ln 2]
    within [Dl] of the exact [LSE_i] of its row (a hypothesis: the forward's
    [attention_lse_error_masked] and the rounding of [lse * log2 e] give it),
    [|s2 - lse2_i| <= Am], [|dO_i| <= D], query tiles of at most [b], then
      |rnd_s (dV) - sum_i vis_i P_i dO_i|
        <= (1 + us) (((1 + g) F - 1) S + (1 + g) n c) + us S + es,
      P_i = exp (scale q_i.k - LSE_i),  S = sum_i vis_i P_i |dO_i|,
      F = (1 + u) (1 + us) (1 + ue) X,  X >= 2^((delta + Dl) / ln 2 + u Am + ea),
      c = (1 + u) ((1 + us) ee + es) D + ea,  g = gamma u ((b - 1) + (t - 1)),
    [n] the number of query terms, [t] of query tiles.  [S] is computed from
    the exact probabilities by the caller (a-posteriori; [S <= n D] a priori).
    [lse2_close]: [Dl] and the magnitude of [lse2] from a forward lse within
    [Lb] of the exact one ([attention_lse_error_masked]) and the fp32
    constant [c2] of [log2 e].  Partly masked query tiles are covered (a
    masked term is an exact [0]); fully masked ones are skipped exactly
    ([blocked_sum_skip_zero_tiles]); GQA: the query tiles of every query
    head of the group are the tiles of one blocked sum, as in the kernel.

    [dv_error_dot]: the same with the scores' dot [dotf] of any dot model
    (ForwardError.v, PART B'; the 3xTF32 scores of the fp32 path on CUDA:
    PART E's [tf32x3_tc_dot_model] with [score2_with_error] gives [delta]).

    [dv_error_acc]: the query tiles accumulated into [dv] by any accumulating
    dot model ([tl.dot (p^T, dO, dv)], NumeratorError.v's [acc_dot_model]);
    on the H100 [dv_error_tf32x3_op] (float32: 3xTF32) and [dv_error_tc_op]
    (16-bit: the tensor cores' chain).

    Not covered: in [dv_error] / [dv_error_dot] the MMA accumulating into
    [dv] (modelled as [rnd (dv + tile sum)], BlockedSum.v; [dv_error_acc]
    takes the kernel's), FMA contraction in
    [s2 - lse2], and dK and dQ (the terms [P (dP - D)] need the error of
    [D = rowsum (dO * O)] and of [dP], not done here). *)

From Coq Require Import Reals ZArith List Lra Lia Arith.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.NoUnderflow FloatModel.DotError Attention.BackwardCorrect Attention.ScorePerturbation.
From Ojas Require Import FloatModel.MixedPrecision FloatModel.BlockedSum.
From Ojas Require Import FloatModel.Notations.
From Ojas Require Import Attention.Float.OnlineSoftmaxError Attention.Float.OnlineSoftmaxTile Attention.Float.ForwardError.
From Ojas Require Import Attention.Float.NumeratorError FloatModel.TensorCoreSum FloatModel.Tf32Product.
Import ListNotations.
Open Scope R_scope.

Section DV.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

(** A query term: [((q_i, (dO_i, lse2_i)))]. *)
Definition dv_p (c : R) (k : list R) (x : list R * (R * R)) : R :=
  exp2 (rnd (score2 A_ c (fst x) k - snd (snd x))).

Definition dv_term (vis : list R * (R * R) -> bool) (c : R) (k : list R) (x : list R * (R * R)) : R :=
  if vis x then rnd (ff_rnd S_ (dv_p c k x) * fst (snd x)) else 0.

(** The kernel's dV coordinate before its store: the query tiles summed blocked. *)
Definition dv_kernel vis c k (tiles : list (list (list R * (R * R)))) : R :=
  blocked_sum A_ (map (map (dv_term vis c k)) tiles).

(** The same with the scores' dot [dotf] (ForwardError.v, PART B'): [dv_p] is
    [dv_p_with (bdot A_)], and so on. *)
Definition dv_p_with (dotf : list R -> list R -> R) (c : R) (k : list R) (x : list R * (R * R)) : R :=
  exp2 (rnd (score2_with A_ dotf c (fst x) k - snd (snd x))).

Definition dv_term_with dotf (vis : list R * (R * R) -> bool) (c : R) (k : list R) (x : list R * (R * R)) : R :=
  if vis x then rnd (ff_rnd S_ (dv_p_with dotf c k x) * fst (snd x)) else 0.

Definition dv_kernel_with dotf vis c k (tiles : list (list (list R * (R * R)))) : R :=
  blocked_sum A_ (map (map (dv_term_with dotf vis c k)) tiles).

Definition dv_F (X : R) : R := (1 + u) * (1 + us) * ((1 + ue) * X).
Definition dv_c (D : R) : R := (1 + u) * ((1 + us) * ee + es) * D + ea.

(** The exponential's factor [X >= 2^((delta + Dl) / ln 2 + u Am + ea)] is at least 1. *)
Lemma dv_X_ge_1 : forall delta Dl Am X, 0 <= delta -> 0 <= Dl -> 0 <= Am ->
  Rpower 2 ((delta + Dl) / ln 2 + u * Am + ea) <= X -> 1 <= X.
Proof.
  intros delta Dl Am X Hd Hl Ha HX.
  pose proof (ff_u_nonneg A_); pose proof (ff_eta_nonneg A_); pose proof afe_ln2_bounds as [L1 L2].
  eapply Rle_trans; [| exact HX]; apply ose_rpow_ge_1.
  assert (0 <= u * Am) by (apply Rmult_le_pos; lra).
  assert (0 <= (delta + Dl) / ln 2)
    by (unfold Rdiv; apply Rmult_le_pos; [lra | left; apply Rinv_0_lt_compat; lra]).
  lra.
Qed.

(** The former premise [2^(2 (delta + Dl) + b + e) <= X] is this one at [2 ln 2 delta],
    [2 ln 2 Dl] (BackwardChainError.v's theorems keep it), and a bound [delta >= |x|] is one
    of [2 ln 2 delta >= delta]. *)
Lemma dv_exp2_premise_scaled : forall delta Dl b e X,
  Rpower 2 (2 * (delta + Dl) + b + e) <= X ->
  Rpower 2 ((2 * ln 2 * delta + 2 * ln 2 * Dl) / ln 2 + b + e) <= X.
Proof.
  intros delta Dl b e X HX; pose proof afe_ln2_bounds as [L1 L2].
  replace ((2 * ln 2 * delta + 2 * ln 2 * Dl) / ln 2) with (2 * (delta + Dl)) by (field; lra); exact HX.
Qed.

Lemma le_2ln2 : forall x delta, Rabs x <= delta -> Rabs x <= 2 * ln 2 * delta.
Proof.
  intros x delta H; pose proof afe_ln2_bounds as [L1 L2]; pose proof (Rabs_pos x).
  assert (delta <= 2 * ln 2 * delta) by nra. lra.
Qed.

Lemma dv_weight_close_with : forall (dotf : list R -> list R -> R) c k (x : list R * (R * R)) scale (Lx : R) delta Dl Am X,
  Rabs (score2_with A_ dotf c (fst x) k * ln 2 - scale * dot_R (fst x) k) <= delta ->
  Rabs (snd (snd x) * ln 2 - Lx) <= Dl ->
  Rabs (score2_with A_ dotf c (fst x) k - snd (snd x)) <= Am ->
  Rpower 2 ((delta + Dl) / ln 2 + u * Am + ea) <= X ->
  Rabs (dv_p_with dotf c k x - exp (scale * dot_R (fst x) k - Lx))
  <= ((1 + ue) * X - 1) * exp (scale * dot_R (fst x) k - Lx) + ee.
Proof.
  intros dotf c k x scale Lx delta Dl Am X Hs Hl Ha HX.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (ff_eta_nonneg A_) as Hea.
  pose proof (mp_ue_nonneg M) as Hue; pose proof afe_ln2_bounds as [L1 L2].
  set (s := score2_with A_ dotf c (fst x) k) in *; set (l2 := snd (snd x)) in *.
  set (P := exp (scale * dot_R (fst x) k - Lx)).
  set (t := (scale * dot_R (fst x) k - Lx) / ln 2).
  assert (EP : P = Rpower 2 t) by (unfold P, t, Rpower; f_equal; field; lra).
  assert (Hat : Rabs ((s - l2) - t) <= (delta + Dl) / ln 2).
  { replace ((s - l2) - t) with (((s * ln 2 - scale * dot_R (fst x) k) - (l2 * ln 2 - Lx)) / ln 2)
      by (unfold t; field; lra).
    unfold Rdiv; rewrite Rabs_mult, (Rabs_right (/ ln 2)) by (left; apply Rinv_0_lt_compat; lra).
    assert (Rabs (s * ln 2 - scale * dot_R (fst x) k - (l2 * ln 2 - Lx)) <= delta + Dl).
    { replace (s * ln 2 - scale * dot_R (fst x) k - (l2 * ln 2 - Lx))
        with ((s * ln 2 - scale * dot_R (fst x) k) + - (l2 * ln 2 - Lx)) by ring.
      eapply Rle_trans; [apply Rabs_triang | rewrite Rabs_Ropp; lra]. }
    apply Rmult_le_compat_r; [left; apply Rinv_0_lt_compat; lra | assumption]. }
  pose proof (ff_abs A_ (s - l2)) as Hr.
  set (ra := rnd (s - l2)) in *.
  assert (Hrt : Rabs (ra - t) <= (delta + Dl) / ln 2 + u * Am + ea).
  { replace (ra - t) with ((ra - (s - l2)) + ((s - l2) - t)) by ring.
    eapply Rle_trans; [apply Rabs_triang |].
    assert (u * Rabs (s - l2) <= u * Am) by (apply Rmult_le_compat_l; lra). lra. }
  set (Dt := (delta + Dl) / ln 2 + u * Am + ea) in *.
  assert (HW : Rpower 2 ra = P * Rpower 2 (ra - t)) by (rewrite EP, <- Rpower_plus; f_equal; ring).
  pose proof (sp_Rabs_le_inv _ _ Hrt) as [R1 R2].
  assert (Hup : Rpower 2 (ra - t) <= X) by (eapply Rle_trans; [apply ost_rpow_le, R2 | exact HX]).
  assert (Hlo : / X <= Rpower 2 (ra - t)).
  { assert (Rpower 2 (- Dt) <= Rpower 2 (ra - t)) by (apply ost_rpow_le; lra).
    assert (Rpower 2 Dt <= X) by exact HX.
    rewrite Rpower_Ropp in H.
    pose proof (Rpower_pos Dt).
    eapply Rle_trans; [| exact H]; apply Rinv_le_contravar; lra. }
  pose proof (dv_X_ge_1 delta Dl Am X (Rle_trans _ _ _ (Rabs_pos _) Hs) (Rle_trans _ _ _ (Rabs_pos _) Hl)
                (Rle_trans _ _ _ (Rabs_pos _) Ha) HX) as HX1.
  assert (HPpos : 0 < P) by apply exp_pos.
  assert (HWP : Rabs (Rpower 2 ra - P) <= (X - 1) * P).
  { rewrite HW; replace (P * Rpower 2 (ra - t) - P) with (P * (Rpower 2 (ra - t) - 1)) by ring.
    rewrite Rabs_mult, (Rabs_right P) by lra.
    assert (1 - / X <= X - 1).
    { assert (0 < X) by lra. assert (X * (/ X) = 1) by (field; lra).
      assert (/ X + X >= 2) by (assert (0 <= (X - 1) * (X - 1)) by nra; apply Rle_ge;
                                 apply (Rmult_le_reg_l X); [lra |]; nra). lra. }
    assert (Rabs (Rpower 2 (ra - t) - 1) <= X - 1) by (apply Rabs_le; lra).
    rewrite Rmult_comm; apply Rmult_le_compat_r; lra. }
  pose proof (mp_exp2_err M ra) as He.
  unfold dv_p_with; fold s l2; fold ra.
  replace (exp2 ra - P) with ((exp2 ra - Rpower 2 ra) + (Rpower 2 ra - P)) by ring.
  eapply Rle_trans; [apply Rabs_triang |].
  assert (Rpower 2 ra <= X * P) by (rewrite HW; rewrite Rmult_comm; apply Rmult_le_compat_r; lra).
  assert (ue * Rpower 2 ra <= ue * (X * P)) by (apply Rmult_le_compat_l; lra).
  nra.
Qed.

Lemma dv_weight_close : forall c k (x : list R * (R * R)) scale (Lx : R) delta Dl Am X,
  Rabs (score2 A_ c (fst x) k * ln 2 - scale * dot_R (fst x) k) <= delta ->
  Rabs (snd (snd x) * ln 2 - Lx) <= Dl ->
  Rabs (score2 A_ c (fst x) k - snd (snd x)) <= Am ->
  Rpower 2 ((delta + Dl) / ln 2 + u * Am + ea) <= X ->
  Rabs (dv_p c k x - exp (scale * dot_R (fst x) k - Lx))
  <= ((1 + ue) * X - 1) * exp (scale * dot_R (fst x) k - Lx) + ee.
Proof. exact (dv_weight_close_with (bdot A_)). Qed.

Lemma sum_terms_close : forall {T} (xs : list T) (f g h : T -> R) c,
  (forall x, In x xs -> Rabs (f x - g x) <= h x + c) ->
  Rabs (rsum (map f xs) - rsum (map g xs)) <= rsum (map h xs) + INR (length xs) * c
  /\ rsum (map Rabs (map f xs)) <= rsum (map (fun x => Rabs (g x)) xs) + rsum (map h xs) + INR (length xs) * c.
Proof.
  intros T xs f g h c; induction xs as [| x xs IH]; intros H.
  - unfold rsum; simpl; rewrite Rminus_0_r, Rabs_R0; lra.
  - cbn [map length]; rewrite !rsum_cons, S_INR.
    destruct IH as [IH1 IH2]; [intros y Hy; apply H; right; exact Hy |].
    pose proof (H x (or_introl eq_refl)) as Hx.
    split.
    + replace (f x + rsum (map f xs) - (g x + rsum (map g xs)))
        with ((f x - g x) + (rsum (map f xs) - rsum (map g xs))) by ring.
      eapply Rle_trans; [apply Rabs_triang | lra].
    + assert (Rabs (f x) <= Rabs (g x) + (h x + c)).
      { replace (f x) with ((f x - g x) + g x) by ring; eapply Rle_trans; [apply Rabs_triang | lra]. }
      lra.
Qed.

(** With the scores' dot [dotf] (the score premise is per pair, so any dot: its
    [dot_model] and [score2_with_error] give [delta]). *)
Theorem dv_error_dot : forall (dotf : list R -> list R -> R) vis c scale k (tiles : list (list (list R * (R * R)))) (Lx : list R * (R * R) -> R)
    delta Dl Am X D b,
  0 <= delta -> 0 <= Dl -> 0 <= Am -> 0 <= D ->
  Forall (fun tl => (length tl <= b)%nat) tiles ->
  INR ((b - 1) + (length tiles - 1)) * u < 1 ->
  (forall x, In x (concat tiles) -> vis x = true ->
     Rabs (score2_with A_ dotf c (fst x) k * ln 2 - scale * dot_R (fst x) k) <= delta
     /\ Rabs (snd (snd x) * ln 2 - Lx x) <= Dl
     /\ Rabs (score2_with A_ dotf c (fst x) k - snd (snd x)) <= Am
     /\ Rabs (fst (snd x)) <= D) ->
  Rpower 2 ((delta + Dl) / ln 2 + u * Am + ea) <= X ->
  let g := gamma u ((b - 1) + (length tiles - 1)) in
  let Pd := fun x => if vis x then exp (scale * dot_R (fst x) k - Lx x) * fst (snd x) else 0 in
  let S := rsum (map (fun x => if vis x then exp (scale * dot_R (fst x) k - Lx x) * Rabs (fst (snd x)) else 0)
                     (concat tiles)) in
  Rabs (ff_rnd S_ (dv_kernel_with dotf vis c k tiles) - rsum (map Pd (concat tiles)))
  <= (1 + us) * (((1 + g) * dv_F X - 1) * S + (1 + g) * INR (length (concat tiles)) * dv_c D) + us * S + es.
Proof.
  intros dotf vis c scale k tiles Lx delta Dl Am X D b Hd0 Hl0 Ha0 HD0 HBt Hg Hx HX g Pd S.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (ff_eta_nonneg A_) as Hea.
  pose proof (ff_u_nonneg S_) as Hus; pose proof (ff_eta_nonneg S_) as Hes.
  pose proof (mp_ue_nonneg M) as Hue; pose proof (mp_eta_e_nonneg M) as Hee.
  set (xs := concat tiles).
  set (ys := concat (map (map (dv_term_with dotf vis c k)) tiles)).
  assert (Eys : ys = map (dv_term_with dotf vis c k) xs) by (unfold ys, xs; rewrite <- concat_map; reflexivity).
  assert (Hg0 : 0 <= g) by (apply gamma_nonneg with (A := A_); exact Hg).
  (* the blocked sum *)
  assert (HB : Rabs (dv_kernel_with dotf vis c k tiles - rsum ys) <= g * rsum (map Rabs ys)).
  { unfold dv_kernel_with, ys, g.
    replace (length tiles) with (length (map (map (dv_term_with dotf vis c k)) tiles)) by apply map_length.
    apply blocked_sum_error_bound.
    - apply Forall_forall; intros tl Htl; apply in_map_iff in Htl; destruct Htl as [tl' [<- Htl']].
      rewrite map_length; exact (proj1 (Forall_forall _ _) HBt tl' Htl').
    - apply Forall_forall; intros tl Htl; apply in_map_iff in Htl; destruct Htl as [tl' [<- _]].
      apply Forall_forall; intros y Hy; apply in_map_iff in Hy; destruct Hy as [x [<- _]].
      unfold dv_term_with; destruct (vis x); [apply ff_rnd_fmt | apply ff_fmt_0].
    - rewrite map_length; exact Hg. }
  (* each term *)
  set (Ff := dv_F X).
  set (cc := dv_c D).
  pose proof (dv_X_ge_1 delta Dl Am X Hd0 Hl0 Ha0 HX) as HX1.
  assert (Hcc : 0 <= cc).
  { unfold cc, dv_c; apply Rplus_le_le_0_compat; [| lra].
    apply Rmult_le_pos; [apply Rmult_le_pos; [lra | apply Rplus_le_le_0_compat; [apply Rmult_le_pos |]] |]; lra. }
  set (Sx := fun x : list R * (R * R) =>
               if vis x then exp (scale * dot_R (fst x) k - Lx x) * Rabs (fst (snd x)) else 0).
  assert (HF1 : 1 <= Ff).
  { unfold Ff, dv_F. assert (1 <= (1 + u) * (1 + us)) by nra. assert (1 <= (1 + ue) * X) by nra. nra. }
  assert (Hterm : forall x, In x xs -> Rabs (dv_term_with dotf vis c k x - Pd x) <= (Ff - 1) * Sx x + cc).
  { intros x Hxs; unfold dv_term_with, Pd, Sx; destruct (vis x) eqn:Ev.
    - destruct (Hx x Hxs Ev) as [H1 [H2 [H3 H4]]].
      pose proof (dv_weight_close_with dotf c k x scale (Lx x) delta Dl Am X H1 H2 H3 HX) as Hw.
      pose proof (stored_product_close M (dv_p_with dotf c k x) (exp (scale * dot_R (fst x) k - Lx x)) (fst (snd x))
                    ((1 + ue) * X) (exp_pos _) ltac:(nra) Hw) as Hp.
      eapply Rle_trans; [exact Hp |].
      unfold Ff, dv_F, cc, dv_c.
      assert ((1 + u) * ((1 + us) * ee + es) * Rabs (fst (snd x)) <= (1 + u) * ((1 + us) * ee + es) * D)
        by (apply Rmult_le_compat_l; [apply Rmult_le_pos; [lra | apply Rplus_le_le_0_compat; [apply Rmult_le_pos |]]; lra | lra]).
      lra.
    - rewrite Rminus_0_r, Rabs_R0, Rmult_0_r; lra. }
  destruct (sum_terms_close xs (dv_term_with dotf vis c k) Pd (fun x => (Ff - 1) * Sx x) cc Hterm) as [Hs1 Hs2].
  rewrite rsum_map_scal_l in Hs1, Hs2.
  assert (ES : rsum (map Sx xs) = S) by reflexivity.
  assert (EPd : rsum (map (fun x => Rabs (Pd x)) xs) = S).
  { unfold S; fold xs; apply rsum_map_ext; intros x _; unfold Pd; destruct (vis x).
    - rewrite Rabs_mult, (Rabs_right (exp _)) by (left; apply exp_pos); reflexivity.
    - apply Rabs_R0. }
  rewrite ES in Hs1, Hs2; rewrite EPd in Hs2.
  rewrite Eys in HB.
  assert (HS0 : 0 <= S).
  { unfold S; apply rsum_nonneg; intros y Hy; apply in_map_iff in Hy; destruct Hy as [x [<- _]].
    destruct (vis x); [apply Rmult_le_pos; [left; apply exp_pos | apply Rabs_pos] | lra]. }
  set (n := INR (length xs)) in *.
  assert (Hn : 0 <= n) by apply pos_INR.
  assert (Hdv : Rabs (dv_kernel_with dotf vis c k tiles - rsum (map Pd xs)) <= ((1 + g) * Ff - 1) * S + (1 + g) * n * cc).
  { replace (dv_kernel_with dotf vis c k tiles - rsum (map Pd xs))
      with ((dv_kernel_with dotf vis c k tiles - rsum (map (dv_term_with dotf vis c k) xs))
            + (rsum (map (dv_term_with dotf vis c k) xs) - rsum (map Pd xs))) by ring.
    eapply Rle_trans; [apply Rabs_triang |].
    assert (g * rsum (map Rabs (map (dv_term_with dotf vis c k) xs)) <= g * (S + (Ff - 1) * S + n * cc))
      by (apply Rmult_le_compat_l; lra).
    nra. }
  assert (HPs : Rabs (rsum (map Pd xs)) <= S) by (rewrite <- EPd; apply bw_rsum_abs).
  pose proof (ff_abs S_ (dv_kernel_with dotf vis c k tiles)) as Hst.
  set (dv := dv_kernel_with dotf vis c k tiles) in *.
  set (er := ((1 + g) * Ff - 1) * S + (1 + g) * n * cc) in *.
  assert (Hdva : Rabs dv <= S + er)
    by (replace dv with ((dv - rsum (map Pd xs)) + rsum (map Pd xs)) by ring;
        eapply Rle_trans; [apply Rabs_triang | lra]).
  replace (ff_rnd S_ dv - rsum (map Pd xs)) with ((ff_rnd S_ dv - dv) + (dv - rsum (map Pd xs))) by ring.
  eapply Rle_trans; [apply Rabs_triang |].
  assert (us * Rabs dv <= us * (S + er)) by (apply Rmult_le_compat_l; lra).
  fold xs; lra.
Qed.

(** The blocked fp32 dot ([score2]). *)
Theorem dv_error : forall vis c scale k (tiles : list (list (list R * (R * R)))) (Lx : list R * (R * R) -> R)
    delta Dl Am X D b,
  0 <= delta -> 0 <= Dl -> 0 <= Am -> 0 <= D ->
  Forall (fun tl => (length tl <= b)%nat) tiles ->
  INR ((b - 1) + (length tiles - 1)) * u < 1 ->
  (forall x, In x (concat tiles) -> vis x = true ->
     Rabs (score2 A_ c (fst x) k * ln 2 - scale * dot_R (fst x) k) <= delta
     /\ Rabs (snd (snd x) * ln 2 - Lx x) <= Dl
     /\ Rabs (score2 A_ c (fst x) k - snd (snd x)) <= Am
     /\ Rabs (fst (snd x)) <= D) ->
  Rpower 2 ((delta + Dl) / ln 2 + u * Am + ea) <= X ->
  let g := gamma u ((b - 1) + (length tiles - 1)) in
  let Pd := fun x => if vis x then exp (scale * dot_R (fst x) k - Lx x) * fst (snd x) else 0 in
  let S := rsum (map (fun x => if vis x then exp (scale * dot_R (fst x) k - Lx x) * Rabs (fst (snd x)) else 0)
                     (concat tiles)) in
  Rabs (ff_rnd S_ (dv_kernel vis c k tiles) - rsum (map Pd (concat tiles)))
  <= (1 + us) * (((1 + g) * dv_F X - 1) * S + (1 + g) * INR (length (concat tiles)) * dv_c D) + us * S + es.
Proof. exact (dv_error_dot (bdot A_)). Qed.

(** ** [dV] accumulated by [tl.dot (p^T, dO, dv)] over the query tiles

    The kernel's [dv = tl.dot (tl.trans (p.to(dO.dtype)), dO, dv)], one query
    tile after the other from [dv = 0], with any accumulating dot model
    ([acc_dot_model accf n g_rel g_abs], NumeratorError.v; instances in
    ForwardError.v PART F: the fp32 per-product model, the H100's tensor
    cores, Triton's 3xTF32), each query tile of [n] rows (a masked row's
    weight is an exact 0).  With [G = (1 + g_rel)^t] ([t] query tiles),
    [H = (1 + us) (1 + ue) X], [cw = (1 + us) ee + es], [N] query rows:
      |rnd_s (dV) - sum_i vis_i P_i dO_i|
        <= (1 + us) ((G H - 1) S + G cw N D + t G g_abs) + us S + es. *)
Definition dv_w_with dotf (vis : list R * (R * R) -> bool) (c : R) (k : list R) (x : list R * (R * R)) : R :=
  if vis x then ff_rnd S_ (dv_p_with dotf c k x) else 0.

Definition dv_kernel_acc (accf : R -> list R -> list R -> R) dotf vis c k
    (tiles : list (list (list R * (R * R)))) : R :=
  fold_left (fun acc ab => accf acc (fst ab) (snd ab))
    (map (fun tl => (map (dv_w_with dotf vis c k) tl, map (fun x => fst (snd x)) tl)) tiles) 0.

Lemma rsum_concat_map : forall {T} (h : T -> R) (tiles : list (list T)),
  rsum (map (fun tl => rsum (map h tl)) tiles) = rsum (map h (concat tiles)).
Proof.
  intros T h; induction tiles as [|tl rest IH]; [reflexivity |].
  cbn [map concat]; rewrite rsum_cons, map_app, rsum_app, IH; reflexivity.
Qed.

Lemma rsum_le_const : forall {T} (f : T -> R) (xs : list T) D,
  (forall x, In x xs -> f x <= D) -> rsum (map f xs) <= INR (length xs) * D.
Proof.
  intros T f xs D H; induction xs as [|x xs IH]; [unfold rsum; simpl; lra |].
  cbn [map length]; rewrite rsum_cons, S_INR.
  pose proof (H x (or_introl eq_refl)); pose proof (IH (fun y Hy => H y (or_intror Hy))); lra.
Qed.

(** [acc_chain_error] from 0 over tiles of [n] items, the pairs [(wt x, w x)]
    of each tile's items: in terms of the items. *)
Lemma acc_chain_items : forall {T} accf n g_rel g_abs (wt w : T -> R) (tiles : list (list T)),
  acc_dot_model accf n g_rel g_abs -> Forall (fun tl => length tl = n) tiles ->
  Rabs (fold_left (fun acc ab => accf acc (fst ab) (snd ab)) (map (fun tl => (map wt tl, map w tl)) tiles) 0
        - rsum (map (fun x => wt x * w x) (concat tiles)))
  <= ((1 + g_rel) ^ length tiles - 1) * rsum (map (fun x => Rabs (wt x * w x)) (concat tiles))
     + INR (length tiles) * (1 + g_rel) ^ length tiles * g_abs.
Proof.
  intros T accf n g ga wt w tiles Hm Hn.
  set (tiles' := map (fun tl => (map wt tl, map w tl)) tiles).
  assert (Hl' : Forall (fun ab => length (fst ab) = n /\ length (snd ab) = n) tiles').
  { apply Forall_forall; intros ab Hab; apply in_map_iff in Hab; destruct Hab as [tl [<- Htl]].
    pose proof (proj1 (Forall_forall _ _) Hn tl Htl); cbn [fst snd]; rewrite !map_length; split; assumption. }
  pose proof (acc_chain_error accf n g ga tiles' 0 Hm Hl') as Hc.
  assert (ED : rsum (map (fun ab => dot_R (fst ab) (snd ab)) tiles') = rsum (map (fun x => wt x * w x) (concat tiles))).
  { unfold tiles'; rewrite map_map, <- rsum_concat_map; apply rsum_map_ext; intros tl _; cbn [fst snd].
    unfold dot_R; rewrite combine_map_both, map_map; reflexivity. }
  assert (EA : rsum (map (fun ab => dot_abs (fst ab) (snd ab)) tiles')
               = rsum (map (fun x => Rabs (wt x * w x)) (concat tiles))).
  { unfold tiles'; rewrite map_map, <- rsum_concat_map; apply rsum_map_ext; intros tl _; cbn [fst snd].
    unfold dot_abs; rewrite combine_map_both, map_map; reflexivity. }
  rewrite ED, EA, Rabs_R0, Rplus_0_l, Rplus_0_l in Hc.
  unfold tiles' in Hc; rewrite map_length in Hc; exact Hc.
Qed.

Theorem dv_error_acc : forall (accf : R -> list R -> list R -> R) n g_rel g_abs (dotf : list R -> list R -> R)
    vis c scale k (tiles : list (list (list R * (R * R)))) (Lx : list R * (R * R) -> R) delta Dl Am X D,
  acc_dot_model accf n g_rel g_abs ->
  Forall (fun tl => length tl = n) tiles ->
  0 <= delta -> 0 <= Dl -> 0 <= Am -> 0 <= D ->
  (forall x, In x (concat tiles) -> vis x = true ->
     Rabs (score2_with A_ dotf c (fst x) k * ln 2 - scale * dot_R (fst x) k) <= delta
     /\ Rabs (snd (snd x) * ln 2 - Lx x) <= Dl
     /\ Rabs (score2_with A_ dotf c (fst x) k - snd (snd x)) <= Am
     /\ Rabs (fst (snd x)) <= D) ->
  Rpower 2 ((delta + Dl) / ln 2 + u * Am + ea) <= X ->
  let G := (1 + g_rel) ^ length tiles in
  let H := (1 + us) * ((1 + ue) * X) in
  let cw := (1 + us) * ee + es in
  let Pd := fun x => if vis x then exp (scale * dot_R (fst x) k - Lx x) * fst (snd x) else 0 in
  let S := rsum (map (fun x => if vis x then exp (scale * dot_R (fst x) k - Lx x) * Rabs (fst (snd x)) else 0)
                     (concat tiles)) in
  Rabs (ff_rnd S_ (dv_kernel_acc accf dotf vis c k tiles) - rsum (map Pd (concat tiles)))
  <= (1 + us) * ((G * H - 1) * S + G * cw * (INR (length (concat tiles)) * D) + INR (length tiles) * G * g_abs)
     + us * S + es.
Proof.
  intros accf n g ga dotf vis c scale k tiles Lx delta Dl Am X D Hm Hn Hd0 Hl0 Ha0 HD0 Hx HX G H cw Pd S.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (ff_eta_nonneg A_) as Hea.
  pose proof (ff_u_nonneg S_) as Hus; pose proof (ff_eta_nonneg S_) as Hes.
  pose proof (mp_ue_nonneg M) as Hue; pose proof (mp_eta_e_nonneg M) as Hee.
  pose proof (adm_rel_nonneg _ _ _ _ Hm) as Hg; pose proof (adm_abs_nonneg _ _ _ _ Hm) as Hga.
  set (xs := concat tiles).
  set (wt := dv_w_with dotf vis c k).
  set (W := fun x : list R * (R * R) => if vis x then exp (scale * dot_R (fst x) k - Lx x) else 0).
  set (v := fun x : list R * (R * R) => if vis x then fst (snd x) else 0).
  pose proof (dv_X_ge_1 delta Dl Am X Hd0 Hl0 Ha0 HX) as HX1.
  assert (Hcw : 0 <= cw) by (unfold cw; assert (0 <= (1 + us) * ee) by (apply Rmult_le_pos; lra); lra).
  assert (HH : 1 <= H) by (unfold H; assert (1 <= (1 + ue) * X) by nra; nra).
  (* the weights *)
  destruct (weighted_close wt W v H cw xs) as [Hw1 Hw2].
  { intros x _; unfold W; destruct (vis x); [left; apply exp_pos | lra]. }
  { intros x Hin; unfold wt, W, dv_w_with; destruct (vis x) eqn:Ev.
    - destruct (Hx x Hin Ev) as [H1 [H2 [H3 H4]]].
      apply (stored_weight_close M); [apply exp_pos | nra |].
      exact (dv_weight_close_with dotf c k x scale (Lx x) delta Dl Am X H1 H2 H3 HX).
    - rewrite Rminus_0_r, Rabs_R0; lra. }
  assert (Ewv : forall x, wt x * v x = wt x * fst (snd x)).
  { intros x; unfold wt, v, dv_w_with; destruct (vis x); ring. }
  assert (EPd : rsum (map (fun x => W x * v x) xs) = rsum (map Pd xs)).
  { apply rsum_map_ext; intros x _; unfold W, v, Pd; destruct (vis x); ring. }
  assert (ES : rsum (map (fun x => W x * Rabs (v x)) xs) = S).
  { unfold S; fold xs; apply rsum_map_ext; intros x _; unfold W, v; destruct (vis x); [reflexivity |].
    rewrite Rabs_R0; ring. }
  assert (HDs : rsum (map (fun x => Rabs (v x)) xs) <= INR (length xs) * D).
  { apply rsum_le_const; intros x Hin; unfold v; destruct (vis x) eqn:Ev.
    - exact (proj2 (proj2 (proj2 (Hx x Hin Ev)))).
    - rewrite Rabs_R0; exact HD0. }
  rewrite EPd, ES in Hw1; rewrite ES in Hw2.
  (* the chain over the query tiles *)
  pose proof (acc_chain_items accf n g ga wt (fun x => fst (snd x)) tiles Hm Hn) as Hc; fold xs G in Hc.
  rewrite (rsum_map_ext (fun x => wt x * fst (snd x)) (fun x => wt x * v x)) in Hc
    by (intros x _; symmetry; apply Ewv).
  rewrite (rsum_map_ext (fun x => Rabs (wt x * fst (snd x))) (fun x => Rabs (wt x * v x))) in Hc
    by (intros x _; rewrite Ewv; reflexivity).
  change (fold_left (fun acc ab => accf acc (fst ab) (snd ab))
            (map (fun tl => (map wt tl, map (fun x => fst (snd x)) tl)) tiles) 0)
    with (dv_kernel_acc accf dotf vis c k tiles) in Hc.
  set (dv := dv_kernel_acc accf dotf vis c k tiles) in *.
  set (Dv := rsum (map (fun x => wt x * v x) xs)) in *.
  set (Av := rsum (map (fun x => Rabs (wt x * v x)) xs)) in *.
  set (Ds := rsum (map (fun x => Rabs (v x)) xs)) in *.
  set (t := INR (length tiles)) in *.
  assert (HG : 1 <= G) by (unfold G; apply pow_R1_Rle; lra).
  assert (HS0 : 0 <= S).
  { rewrite <- ES; apply rsum_nonneg; intros y Hy; apply in_map_iff in Hy; destruct Hy as [x [<- _]].
    unfold W; destruct (vis x); [apply Rmult_le_pos; [left; apply exp_pos | apply Rabs_pos] | lra]. }
  assert (Ht : 0 <= t) by apply pos_INR.
  assert (HDs0 : 0 <= Ds).
  { apply rsum_nonneg; intros y Hy; apply in_map_iff in Hy; destruct Hy as [x [<- _]]; apply Rabs_pos. }
  set (er := (G * H - 1) * S + G * cw * (INR (length xs) * D) + t * G * ga).
  assert (Hdv : Rabs (dv - rsum (map Pd xs)) <= er).
  { replace (dv - rsum (map Pd xs)) with ((dv - Dv) + (Dv - rsum (map Pd xs))) by ring.
    eapply Rle_trans; [apply Rabs_triang |].
    assert (E1 : (G - 1) * Av <= (G - 1) * (H * S + cw * Ds)) by (apply Rmult_le_compat_l; lra).
    assert (E2 : G * cw * Ds <= G * cw * (INR (length xs) * D)) by (apply Rmult_le_compat_l; nra).
    unfold er; nra. }
  assert (EPa : rsum (map (fun x => Rabs (Pd x)) xs) = S).
  { unfold S; fold xs; apply rsum_map_ext; intros x _; unfold Pd; destruct (vis x).
    - rewrite Rabs_mult, (Rabs_right (exp _)) by (left; apply exp_pos); reflexivity.
    - apply Rabs_R0. }
  assert (HPs : Rabs (rsum (map Pd xs)) <= S) by (rewrite <- EPa; apply bw_rsum_abs).
  pose proof (ff_abs S_ dv) as Hst.
  assert (Hdva : Rabs dv <= S + er)
    by (replace dv with ((dv - rsum (map Pd xs)) + rsum (map Pd xs)) by ring;
        eapply Rle_trans; [apply Rabs_triang | lra]).
  replace (ff_rnd S_ dv - rsum (map Pd xs)) with ((ff_rnd S_ dv - dv) + (dv - rsum (map Pd xs))) by ring.
  eapply Rle_trans; [apply Rabs_triang |].
  assert (us * Rabs dv <= us * (S + er)) by (apply Rmult_le_compat_l; lra).
  unfold er in *; lra.
Qed.

(** The H100's float32 kernel (3xTF32 on its tensor cores: the scores'
    [tf32x3_dot_tc_op] and dV's [tl.dot] with [tf32x3_tc_op_acc_dot_model],
    the accumulator added in fp32 after the three TF32 dots): [dv_error_acc]
    with [g_rel = u + (1 + u) tf32x3_tc_rel], [g_abs = (1 + u) 0 + ea]
    (query tiles of [n <= qb kb] rows, blocks of [kb], [F] kept bits). *)
Theorem dv_error_tf32x3_op : forall (out : R -> R) (ur : R) (F : Z) (kb qb n : nat)
    vis c scale k (tiles : list (list (list R * (R * R)))) (Lx : list R * (R * R) -> R) delta Dl Am X D,
  let dotf := tf32x3_dot_tc_op tf32_rna tf32_rz (tc_align_op F) out kb in
  let accf := tf32x3_acc_fn F out rnd kb in
  0 <= ur -> (forall x, Rabs (out x - x) <= ur * Rabs x) ->
  (1 <= kb)%nat -> (1 <= qb)%nat -> (n <= qb * kb)%nat ->
  INR (3 * qb) * tc_delta (bpow radix2 (1 - F)) ur kb < 1 ->
  Forall (fun tl => length tl = n) tiles ->
  0 <= delta -> 0 <= Dl -> 0 <= Am -> 0 <= D ->
  (forall x, In x (concat tiles) -> vis x = true ->
     Rabs (score2_with A_ dotf c (fst x) k * ln 2 - scale * dot_R (fst x) k) <= delta
     /\ Rabs (snd (snd x) * ln 2 - Lx x) <= Dl
     /\ Rabs (score2_with A_ dotf c (fst x) k - snd (snd x)) <= Am
     /\ Rabs (fst (snd x)) <= D) ->
  Rpower 2 ((delta + Dl) / ln 2 + u * Am + ea) <= X ->
  let G := (1 + (u + (1 + u) * tf32x3_tc_rel (bpow radix2 (1 - F)) ur kb qb)) ^ length tiles in
  let H := (1 + us) * ((1 + ue) * X) in
  let cw := (1 + us) * ee + es in
  let Pd := fun x => if vis x then exp (scale * dot_R (fst x) k - Lx x) * fst (snd x) else 0 in
  let S := rsum (map (fun x => if vis x then exp (scale * dot_R (fst x) k - Lx x) * Rabs (fst (snd x)) else 0)
                     (concat tiles)) in
  Rabs (ff_rnd S_ (dv_kernel_acc accf dotf vis c k tiles) - rsum (map Pd (concat tiles)))
  <= (1 + us) * ((G * H - 1) * S + G * cw * (INR (length (concat tiles)) * D)
                 + INR (length tiles) * G * ((1 + u) * 0 + ea)) + us * S + es.
Proof.
  intros out ur F kb qb n vis c scale k tiles Lx delta Dl Am X D dotf accf Hur Hout Hk Hq Hn Hd Ht
    Hd0 Hl0 Ha0 HD0 Hx HX.
  exact (dv_error_acc accf n _ _ dotf vis c scale k tiles Lx delta Dl Am X D
           (tf32x3_tc_op_acc_dot_model out rnd ur u ea F kb qb n Hur Hout (ff_u_nonneg _) (ff_abs _) Hk Hq Hn Hd)
           Ht Hd0 Hl0 Ha0 HD0 Hx HX).
Qed.

(** The H100's 16-bit kernels (the scores' [tc_dot_op] and dV's [tl.dot]
    chained on the tensor cores from [dv], [tc_acc_op_dot_model]):
    [dv_error_acc] with [g_rel = gamma (tc_delta kb) qb], [g_abs = 0]. *)
Theorem dv_error_tc_op : forall (out : R -> R) (ur : R) (F : Z) (kb qb n : nat)
    vis c scale k (tiles : list (list (list R * (R * R)))) (Lx : list R * (R * R) -> R) delta Dl Am X D,
  let dotf := tc_dot_op (tc_align_op F) out kb in
  let accf := tc_acc_fn F out kb in
  0 <= ur -> (forall x, Rabs (out x - x) <= ur * Rabs x) ->
  (1 <= kb)%nat -> (1 <= qb)%nat -> (n <= qb * kb)%nat ->
  INR qb * tc_delta (bpow radix2 (1 - F)) ur kb < 1 ->
  Forall (fun tl => length tl = n) tiles ->
  0 <= delta -> 0 <= Dl -> 0 <= Am -> 0 <= D ->
  (forall x, In x (concat tiles) -> vis x = true ->
     Rabs (score2_with A_ dotf c (fst x) k * ln 2 - scale * dot_R (fst x) k) <= delta
     /\ Rabs (snd (snd x) * ln 2 - Lx x) <= Dl
     /\ Rabs (score2_with A_ dotf c (fst x) k - snd (snd x)) <= Am
     /\ Rabs (fst (snd x)) <= D) ->
  Rpower 2 ((delta + Dl) / ln 2 + u * Am + ea) <= X ->
  let G := (1 + gamma (tc_delta (bpow radix2 (1 - F)) ur kb) qb) ^ length tiles in
  let H := (1 + us) * ((1 + ue) * X) in
  let cw := (1 + us) * ee + es in
  let Pd := fun x => if vis x then exp (scale * dot_R (fst x) k - Lx x) * fst (snd x) else 0 in
  let S := rsum (map (fun x => if vis x then exp (scale * dot_R (fst x) k - Lx x) * Rabs (fst (snd x)) else 0)
                     (concat tiles)) in
  Rabs (ff_rnd S_ (dv_kernel_acc accf dotf vis c k tiles) - rsum (map Pd (concat tiles)))
  <= (1 + us) * ((G * H - 1) * S + G * cw * (INR (length (concat tiles)) * D) + INR (length tiles) * G * 0)
     + us * S + es.
Proof.
  intros out ur F kb qb n vis c scale k tiles Lx delta Dl Am X D dotf accf Hur Hout Hk Hq Hn Hd Ht
    Hd0 Hl0 Ha0 HD0 Hx HX.
  exact (dv_error_acc accf n _ _ dotf vis c scale k tiles Lx delta Dl Am X D
           (tc_acc_op_dot_model out ur F kb qb n Hur Hout Hk Hq Hn Hd) Ht Hd0 Hl0 Ha0 HD0 Hx HX).
Qed.

(** The backward's [lse2 = rnd (lse * c2)] ([c2] the fp32 [log2 e]) from the
    forward's saved [lse] within [Lb] of the exact [LSE]: the [Dl] and the
    magnitude that [dv_error] needs. *)
Theorem lse2_close : forall lse LSE Lb c2 uc2, 0 <= uc2 ->
  Rabs (lse - LSE) <= Lb -> Rabs (c2 * ln 2 - 1) <= uc2 ->
  Rabs (rnd (lse * c2) * ln 2 - LSE) <= Lb + (Rabs LSE + Lb) * (u * (1 + uc2) + uc2) + ea
  /\ Rabs (rnd (lse * c2)) <= 2 * ((1 + uc2) * (Rabs LSE + Lb)) * (1 + u) + ea.
Proof.
  intros lse LSE Lb c2 uc2 Huc H Hc.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (ff_eta_nonneg A_) as Hea.
  pose proof afe_ln2_bounds as [L1 L2].
  assert (Hl : Rabs lse <= Rabs LSE + Lb)
    by (replace lse with ((lse - LSE) + LSE) by ring; eapply Rle_trans; [apply Rabs_triang | lra]).
  assert (Hc2 : Rabs c2 * ln 2 <= 1 + uc2).
  { replace (Rabs c2 * ln 2) with (Rabs (c2 * ln 2)) by (rewrite Rabs_mult, (Rabs_right (ln 2)) by lra; reflexivity).
    replace (c2 * ln 2) with ((c2 * ln 2 - 1) + 1) by ring; eapply Rle_trans; [apply Rabs_triang |].
    rewrite Rabs_R1; lra. }
  assert (Hc2' : Rabs c2 <= 2 * (1 + uc2)).
  { assert (Rabs c2 * / 2 <= Rabs c2 * ln 2) by (apply Rmult_le_compat_l; [apply Rabs_pos | lra]). lra. }
  pose proof (ff_abs A_ (lse * c2)) as Hr; rewrite Rabs_mult in Hr.
  set (r := rnd (lse * c2)) in *.
  pose proof (Rabs_pos lse); pose proof (Rabs_pos c2).
  split.
  - replace (r * ln 2 - LSE) with ((r - lse * c2) * ln 2 + lse * (c2 * ln 2 - 1) + (lse - LSE)) by ring.
    eapply Rle_trans; [apply Rabs_triang |].
    eapply Rle_trans; [apply Rplus_le_compat_r, Rabs_triang |].
    rewrite !Rabs_mult, (Rabs_right (ln 2)) by lra.
    assert (E1 : Rabs (r - lse * c2) * ln 2 <= u * Rabs lse * (1 + uc2) + ea).
    { assert (Rabs (r - lse * c2) * ln 2 <= (u * (Rabs lse * Rabs c2) + ea) * ln 2)
        by (apply Rmult_le_compat_r; lra).
      assert (u * Rabs lse * (Rabs c2 * ln 2) <= u * Rabs lse * (1 + uc2))
        by (apply Rmult_le_compat_l; [apply Rmult_le_pos |]; lra).
      nra. }
    assert (E2 : Rabs lse * Rabs (c2 * ln 2 - 1) <= Rabs lse * uc2) by (apply Rmult_le_compat_l; lra).
    assert (u * Rabs lse * (1 + uc2) <= u * (Rabs LSE + Lb) * (1 + uc2))
      by (apply Rmult_le_compat_r; [lra | apply Rmult_le_compat_l; lra]).
    assert (Rabs lse * uc2 <= (Rabs LSE + Lb) * uc2) by (apply Rmult_le_compat_r; lra).
    nra.
  - replace r with ((r - lse * c2) + lse * c2) by ring.
    eapply Rle_trans; [apply Rabs_triang |]; rewrite Rabs_mult.
    assert (Rabs lse * Rabs c2 <= (Rabs LSE + Lb) * (2 * (1 + uc2))) by (apply Rmult_le_compat; lra).
    assert (u * (Rabs lse * Rabs c2) <= u * ((Rabs LSE + Lb) * (2 * (1 + uc2)))) by (apply Rmult_le_compat_l; lra).
    nra.
Qed.

End DV.
