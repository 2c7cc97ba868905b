(** * Forward attention with the accumulating P.V, a running (a-posteriori) bound.

    The kernel of ForwardAccError.v ([kernel_step_acc], [kernel_run_acc]: per key tile
    [acc = accf (rnd (acc * alpha)) (map stored_p tile) (map v tile)] with any
    [acc_dot_model accf n g_rel g_abs]).  There, [acc_kernel_inv] charges every tile
    [g_rel (|acc| + sum |p v|)] with [|acc|] bounded by the ABSOLUTE weighted sum
    [A = sum_j 2^(s_j - m) |v_j|], so the factor of [W = sum_j P_j |v_j|] carries
    [cgA^Tt = ((1 + ue)(1 + u)(1 + g_rel))^Tt - 1 ~ Tt (ue + u + g_rel)].  Here, as
    RunningAccError.v does for the backward, each tile is charged on the exact SIGNED
    prefix instead, in units of the final normaliser: the caller (Python) computes
    from the exact scores the exact softmax [P_j = exp (scale q.k_j) / sum_(visible i)
    exp (scale q.k_i)] over the row's visible keys (normalised by the FINAL sum), and
    for every key tile [t] of the kernel (its order, fully masked tiles included, in
    which case the tile's sum is 0) an upper bound
      b_t >= |sum_(visible j in tiles < t) P_j v_j| + sum_(visible j in tile t) P_j |v_j|
    ([fwd_prefix], [fwd_tile_abs], [fwd_running_premise]; [length bs = length tiles]).

    Why the units work: the kernel's [acc] after [t] tiles is scaled by [2^(-m_t)]
    ([m_t] the computed running max); its running error term is kept as
    [Lf 2^(mf - m_t) rho_t] ([acc_run_inv]), which [rnd (acc * alpha)] rescales exactly
    like [acc] ([alpha ~ 2^(m_t - m_(t+1))]), so at the end ([mf = m_T], [Lf = L_T] the
    exact normaliser of the computed scores) it is [L_T rho_T] and the division by the
    computed [l ~ L_T] leaves [rho_T]; the computed scores' perturbation ([Y]) turns the
    caller's exact-score bounds into the kernel's ([fwd_tile_premise]:
    [(1 + Y) b_t + Y W]).

    Results:
    - [acc_kernel_running]: from any state with no visible key yet, for any [mf],
      [Lf > 0], [gb >= gR g_rel + g_rel (H_pv - 1)] and bounds [bs] with
      [Lf b_t >= |sum_(j in tiles < t) 2^(s_j - mf) v_j| + sum_(j in tile t) 2^(s_j - mf) |v_j|]:
      coordinate [c] of [acc] is within
        (GR - 1) A + Lf 2^(mf - m) 2^(u (m - m0)) run_err gb 0 bs + RR
      of [X = sum_j 2^(s_j - m) v_j], [A = sum_j 2^(s_j - m) |v_j|] ([m] the running max,
      [t] the number of tiles), with
        gR = (1 + g_rel) (1 + u) (1 + ue) - 1,
        GR = 1 + (1 + gR)^t (H_pv 2^(u (m - m0)) - 1),   H_pv = (1 + us) (1 + ue) 2^(u K),
        RR = t (1 + gR)^t dRR,  dRR = (1 + g_rel) ((1 + u) ee Ep + ea + ((1 + us) ee + es) n V) + g_abs,
        Ep = H_pv cgA^Tt 2^(u K) N V + RkA(Tt)   (the a-priori bound of [|acc|],
                                                  [acc_kernel_inv]'s invariant).
      The step ([run_step]): [rnd (acc * alpha)] and [accf] multiply the error so far by
      [(1 + g_rel)(1 + u)(1 + ue) 2^(u (m' - m))] (the last factor telescopes), the
      relative errors of alpha ([ue]), of the rounding ([u]) and of the dot ([g_rel])
      are charged on [|X 2^(m - m')|] (the exact signed prefix) and [g_rel H_pv] on the
      tile's [sum 2^(s - m') |v|]: both at most [gb] times [b_t] in units.
    - [attention_forward_acc_running] (scores' dot of any [dot_model], P.V of any
      [acc_dot_model]) and the H100 instances [attention_forward_acc_running_tf32x3_op]
      (fp32: [g_rel = u + (1 + u) tf32x3_tc_rel (2^(1-F)) ur k qv], [g_abs = (1 + u) 0 + ea])
      and [attention_forward_acc_running_tc_op] (bf16/fp16: [g_rel = gamma (tc_delta
      (2^(1-F)) ur k) qv], [g_abs = 0]), the kernel's loop from [kernel_start 1] under any
      mask, one output coordinate of one query row, [out = ff_rnd S_ (rnd (acc / l))]:
        |out - sum_j P_j v_j| <= afr_rel W + afr_C run_err gb 0 bs + afr_abs,
        W = sum_j P_j |v_j| (the exact softmax over the visible keys), with
        gb      = (1 + g_rel) (1 + u) (1 + ue) - 1 + g_rel ((1 + us) (1 + ue) X - 1)   ([afr_gb]),
        bL      = afe_bL u ue ee ea n N Tt X P1 CG CR      (ForwardError.v, unchanged),
        gA      = CB ((1 + us) (1 + ue) X X - 1)                                    ([afr_gA]),
        Ep'     = afa_HA ue us X CGA (N V) + afa_rA u ue ee ea us es V n N Tt X CGA CRA g_rel g_abs
                                                                                   ([afr_Ep]),
        rR      = Tt CB ((1 + g_rel) ((1 + u) ee Ep' + ea + ((1 + us) ee + es) (n V)) + g_abs)
                                                                                   ([afr_rR]),
        afr_rel = ((1 + u) ((gA + bL) (1 + Y) + X Y (CB - 1)) / (1 - bL) + u (1 + Y) + Y) (1 + us) + us,
        afr_C   = (1 + us) (1 + u) X (1 + Y) / (1 - bL),
        afr_abs = ((1 + u) rR / (1 - bL) + ea) (1 + us) + es,
      for the upper bounds [X], [Y], [P1], [CG], [CR] of [afe_premises_de] (with [B = n]),
      [CGA >= cgA^Tt], [CRA >= crA^Tt] (ForwardAccError.v; here only inside the underflow
      term [rR]) and [CB >= (1 + gb)^Tt].  The factor of [W] has no [(1 + g_rel)^Tt - 1]
      of its own: [gA = CB (H - 1)]-like ([CB ~ 1]), [bL] (the [l] fold, unchanged), and
      [X Y (CB - 1)] (second order: the scores' perturbation [Y] times [(1 + gb)^Tt - 1]);
      the accumulation's growth is all in [afr_C run_err gb 0 bs].

    Covered: as ForwardAccError.v (the order and rounding inside the P.V MMA and its
    accumulation into [acc * alpha] through the [acc_dot_model], any mask with partly and
    fully masked tiles run through the step, the store of [out]); the computed scores'
    perturbation of the caller's exact weights.  Not covered: the computation of [bs]
    and [W] (the caller's exact arithmetic: [bs] must be upper bounds of the exact
    quantities), and, as ForwardAccError.v, [tl.sum p] modelled left to right, the
    non-MASKED fast path, dropout, FMA contraction in [l * alpha + sum], additive float
    masks, overflow; [mp_exp2 M 0 = 1] and [ue] are premises of the model; the H100
    instances take the tensor cores' alignment model of TensorCoreSum.v. *)

From Coq Require Import Reals ZArith List Lra Lia Arith.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.NoUnderflow FloatModel.DotError Attention.BackwardCorrect Attention.ScorePerturbation.
From Ojas Require Import FloatModel.MixedPrecision FloatModel.BlockedSum FloatModel.TensorCoreSum FloatModel.Tf32Product.
From Ojas Require Import FloatModel.Notations.
From Ojas Require Import Attention.Float.OnlineSoftmaxError Attention.Float.OnlineSoftmaxTile Attention.Float.ForwardError.
From Ojas Require Import Attention.Float.NumeratorError Attention.Float.ForwardPosteriori Attention.Float.ForwardAccError.
From Ojas Require Import Attention.Float.RunningAccError.
Import ListNotations.
Open Scope R_scope.

Section KernelRunning.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

(** ** The constants of the running fold

    [gR g = (1 + g) (1 + u) (1 + ue) - 1]: the growth per tile of the errors already in
    [acc] ([rnd (acc * alpha)] then the accumulating dot); [GR k m = 1 + (1 + gR)^k
    (H_pv 2^(u (m - m0)) - 1)]: the factor of [A] (the stored weights' error, and the
    [2^(u (m' - m))] of each rescale, telescoping); [RR k = k (1 + gR)^k dRR] the
    absolute (underflow) term, with [Ep] the a-priori bound of [|acc|] (from
    [acc_kernel_inv]'s invariant). *)
Definition gR (g : R) : R := (1 + g) * (1 + u) * (1 + ue) - 1.
Definition GR (K g m0 : R) (k : nat) (m : R) : R :=
  1 + (1 + gR g) ^ k * (H_pv M K * Rpower 2 (u * (m - m0)) - 1).
Definition Ep (K g ga V : R) (n N Tt : nat) : R :=
  H_pv M K * cgA M g ^ Tt * Rpower 2 (u * K) * (INR N * V) + RkA M K g ga V n N Tt Tt.
Definition dRR (K g ga V : R) (n N Tt : nat) : R :=
  (1 + g) * ((1 + u) * ee * Ep K g ga V n N Tt + ea + ((1 + us) * ee + es) * (INR n * V)) + ga.
Definition RR (K g ga V : R) (n N Tt k : nat) : R := INR k * (1 + gR g) ^ k * dRR K g ga V n N Tt.

Lemma gR_nonneg : forall g, 0 <= g -> 0 <= gR g.
Proof.
  intros g Hg; unfold gR; pose proof (ff_u_nonneg A_); pose proof (mp_ue_nonneg M).
  assert (1 <= (1 + g) * (1 + u)) by nra. nra.
Qed.

Lemma Ep_nonneg : forall K g ga V n N Tt, 0 <= K -> 0 <= g -> 0 <= ga -> 0 <= V -> 0 <= Ep K g ga V n N Tt.
Proof.
  intros K g ga V n N Tt HK Hg Hga HV; unfold Ep.
  pose proof (H_pv_ge_1 M K HK); pose proof (cgA_ge_1 M g Hg); pose proof (Rpower_pos (u * K)).
  pose proof (RkA_nonneg M K g ga V n N Tt Tt HK Hg Hga HV).
  assert (1 <= cgA M g ^ Tt) by (apply pow_R1_Rle; lra).
  assert (0 <= INR N * V) by (apply Rmult_le_pos; [apply pos_INR | lra]).
  assert (0 <= H_pv M K * cgA M g ^ Tt * Rpower 2 (u * K)) by (apply Rmult_le_pos; [nra | lra]).
  apply Rplus_le_le_0_compat; [apply Rmult_le_pos |]; lra.
Qed.

Lemma dRR_nonneg : forall K g ga V n N Tt, 0 <= K -> 0 <= g -> 0 <= ga -> 0 <= V -> 0 <= dRR K g ga V n N Tt.
Proof.
  intros K g ga V n N Tt HK Hg Hga HV; unfold dRR.
  pose proof (Ep_nonneg K g ga V n N Tt HK Hg Hga HV).
  pose proof (ff_u_nonneg A_); pose proof (ff_u_nonneg S_); pose proof (ff_eta_nonneg S_);
  pose proof (ff_eta_nonneg A_); pose proof (mp_eta_e_nonneg M).
  assert (0 <= INR n * V) by (apply Rmult_le_pos; [apply pos_INR | lra]).
  assert (0 <= (1 + u) * ee * Ep K g ga V n N Tt) by (apply Rmult_le_pos; [nra | lra]).
  assert (0 <= ((1 + us) * ee + es) * (INR n * V)) by (apply Rmult_le_pos; nra).
  nra.
Qed.

Lemma RR_nonneg : forall K g ga V n N Tt k, 0 <= K -> 0 <= g -> 0 <= ga -> 0 <= V -> 0 <= RR K g ga V n N Tt k.
Proof.
  intros; unfold RR; pose proof (dRR_nonneg K g ga V n N Tt); pose proof (gR_nonneg g); pose proof (pos_INR k).
  assert (0 <= (1 + gR g) ^ k) by (apply pow_le; lra).
  apply Rmult_le_pos; [nra | lra].
Qed.

Lemma GR_ge_1 : forall K g m0 k m, 0 <= K -> 0 <= g -> m0 <= m -> 1 <= GR K g m0 k m.
Proof.
  intros K g m0 k m HK Hg Hm; unfold GR.
  pose proof (H_pv_ge_1 M K HK); pose proof (gR_nonneg g Hg); pose proof (ff_u_nonneg A_).
  assert (1 <= (1 + gR g) ^ k) by (apply pow_R1_Rle; lra).
  assert (1 <= Rpower 2 (u * (m - m0))) by (apply ose_rpow_ge_1; nra).
  assert (0 <= H_pv M K * Rpower 2 (u * (m - m0)) - 1) by nra.
  nra.
Qed.

(** ** One tile into the accumulator, keeping [|x - X|] and [|X|] apart *)

Section Tile.

Variable Key : Type.
Variable sc : Key -> R.
Variable vis : Key -> bool.
Variable val : Key -> nat -> R.
Variable accf : R -> list R -> list R -> R.
Variables (n : nat) (g ga K V : R) (c : nat).

Hypothesis Hm : acc_dot_model accf n g ga.
Hypothesis HK : 0 <= K.
Hypothesis HV : 0 <= V.

(** [tile_acc_masked] with the accumulating dot's [g_rel] charged on [|X|] (the exact
    signed prefix) and on the tile's weights, not on [x]'s error bound. *)
Lemma tile_acc_run : forall x X m' tl,
  length tl = n -> fmt m' ->
  (forall k, In k tl -> vis k = true -> fmt (sc k) /\ sc k <= m' /\ m' - sc k <= K /\ Rabs (val k c) <= V) ->
  Rabs (accf x (map (fun k => ff_rnd S_ (kweight M Key sc vis m' k)) tl) (map (fun k => val k c) tl)
        - (X + exact_pv m' (kpairs Key sc vis val c tl)))
  <= (1 + g) * Rabs (x - X) + g * Rabs X + (H_pv M K - 1) * exact_pv_abs m' (kpairs Key sc vis val c tl)
     + g * H_pv M K * exact_pv_abs m' (kpairs Key sc vis val c tl)
     + ((1 + g) * (((1 + us) * ee + es) * (INR n * V)) + ga).
Proof.
  intros x X m' tl Hn Fm' Hk.
  pose proof (ff_u_nonneg S_) as Hus; pose proof (ff_eta_nonneg S_) as Hes; pose proof (mp_eta_e_nonneg M) as Hee.
  pose proof (adm_rel_nonneg _ _ _ _ Hm) as Hg.
  set (c0 := (1 + us) * ee + es).
  assert (Hc0 : 0 <= c0) by (unfold c0; nra).
  set (f := fun k => ff_rnd S_ (kweight M Key sc vis m' k)).
  set (W := fun k => if vis k then Rpower 2 (sc k - m') else 0).
  set (vm := fun k => if vis k then val k c else 0).
  assert (Hf0 : forall k, vis k = false -> f k = 0).
  { intros k Ek; unfold f, kweight; rewrite Ek; apply (ff_rnd_id S_ 0 (ff_fmt_0 S_)). }
  destruct (weighted_close f W vm (H_pv M K) c0 tl) as [Hw1 Hw2].
  { intros k _; unfold W; destruct (vis k); [left; apply Rpower_pos | lra]. }
  { intros k Hin; unfold W; destruct (vis k) eqn:Ev.
    - destruct (Hk k Hin Ev) as [Fs [H1 [H2 _]]].
      unfold f, kweight; rewrite Ev; unfold H_pv, c0.
      apply stored_weight_close; [apply Rpower_pos | apply tile_E_ge_1, HK |].
      apply weight_close; assumption.
    - rewrite (Hf0 k Ev), Rminus_0_r, Rabs_R0, Rmult_0_r, Rplus_0_l; exact Hc0. }
  assert (ED : dot_R (map f tl) (map (fun k => val k c) tl) = rsum (map (fun k => f k * vm k) tl)).
  { unfold dot_R; rewrite combine_map_both, map_map; cbn [fst snd]; f_equal; apply map_ext; intros k.
    unfold vm; destruct (vis k) eqn:Ev; [reflexivity | rewrite (Hf0 k Ev); ring]. }
  assert (EA : dot_abs (map f tl) (map (fun k => val k c) tl) = rsum (map (fun k => Rabs (f k * vm k)) tl)).
  { unfold dot_abs; rewrite combine_map_both, map_map; cbn [fst snd]; f_equal; apply map_ext; intros k.
    unfold vm; destruct (vis k) eqn:Ev; [reflexivity | rewrite (Hf0 k Ev), !Rmult_0_l; reflexivity]. }
  assert (EY : rsum (map (fun k => W k * vm k) tl) = exact_pv m' (kpairs Key sc vis val c tl)).
  { unfold exact_pv, kpairs; rewrite map_map; cbn [fst snd]; rewrite <- rsum_vis; f_equal; apply map_ext; intros k.
    unfold W, vm; destruct (vis k); ring. }
  assert (ET : rsum (map (fun k => W k * Rabs (vm k)) tl) = exact_pv_abs m' (kpairs Key sc vis val c tl)).
  { unfold exact_pv_abs, kpairs; rewrite map_map; cbn [fst snd]; rewrite <- rsum_vis; f_equal; apply map_ext; intros k.
    unfold W, vm; destruct (vis k); [reflexivity | rewrite Rabs_R0; ring]. }
  assert (Hv : rsum (map (fun k => Rabs (vm k)) tl) <= INR n * V).
  { rewrite <- Hn, <- ost_rsum_const; apply bw_rsum_le; intros k Hin.
    unfold vm; destruct (vis k) eqn:Ev; [apply (Hk k Hin Ev) | rewrite Rabs_R0; exact HV]. }
  assert (HT : 0 <= exact_pv_abs m' (kpairs Key sc vis val c tl))
    by (eapply Rle_trans; [apply Rabs_pos | apply exact_pv_abs_ge]).
  assert (E1 : c0 * rsum (map (fun k => Rabs (vm k)) tl) <= c0 * (INR n * V)) by (apply Rmult_le_compat_l; lra).
  pose proof (adm_err _ _ _ _ Hm x (map f tl) (map (fun k => val k c) tl)
                ltac:(rewrite map_length; exact Hn) ltac:(rewrite map_length; exact Hn)) as He.
  change (rsum (map (fun xy => fst xy * snd xy) (combine (map f tl) (map (fun k => val k c) tl))))
    with (dot_R (map f tl) (map (fun k => val k c) tl)) in He.
  change (rsum (map (fun xy => Rabs (fst xy * snd xy)) (combine (map f tl) (map (fun k => val k c) tl))))
    with (dot_abs (map f tl) (map (fun k => val k c) tl)) in He.
  rewrite ED, EA in He; rewrite EY, ET in Hw1; rewrite ET in Hw2.
  set (y := accf x (map f tl) (map (fun k => val k c) tl)) in *.
  set (D := rsum (map (fun k => f k * vm k) tl)) in *.
  set (Aa := rsum (map (fun k => Rabs (f k * vm k)) tl)) in *.
  set (Yt := exact_pv m' (kpairs Key sc vis val c tl)) in *.
  set (Tt := exact_pv_abs m' (kpairs Key sc vis val c tl)) in *.
  set (Sv := rsum (map (fun k => Rabs (vm k)) tl)) in *.
  assert (Hx : Rabs x <= Rabs X + Rabs (x - X))
    by (replace x with ((x - X) + X) at 1 by ring; eapply Rle_trans; [apply Rabs_triang | lra]).
  replace (y - (X + Yt)) with ((y - (x + D)) + (x - X) + (D - Yt)) by ring.
  eapply Rle_trans; [apply Rabs_triang |].
  eapply Rle_trans; [apply Rplus_le_compat_r, Rabs_triang |].
  assert (E2 : g * (Rabs x + Aa) <= g * (Rabs X + Rabs (x - X) + (H_pv M K * Tt + c0 * (INR n * V))))
    by (apply Rmult_le_compat_l; lra).
  nra.
Qed.

End Tile.

(** ** The running invariant over the kernel's tiles *)

Section Run.

Variable Key : Type.
Variable sc : Key -> R.
Variable vis : Key -> bool.
Variable val : Key -> nat -> R.
Variable accf : R -> list R -> list R -> R.
Variables (n : nat) (g ga : R).
Variables (K V m0 : R) (N Tt : nat) (c : nat).
Variables (mf Lf gb : R).

Hypothesis Hm : acc_dot_model accf n g ga.
Hypothesis HK : 0 <= K.
Hypothesis HV : 0 <= V.
Hypothesis HLf : 0 < Lf.
Hypothesis Hgb : gR g + g * (H_pv M K - 1) <= gb.

(** After [k] tiles whose keys are [seen], with running error [rho] (in units of
    [Lf 2^(-mf)]): [acc_kernel_inv]'s invariant, and coordinate [c] of [acc] within
      (GR k m - 1) A + Lf 2^(mf - m) 2^(u (m - m0)) rho + RR k
    of [X = sum_j 2^(s_j - m) v_j] ([A] its absolute sum). *)
Definition acc_run_inv (k : nat) (seen : list Key) (st : kstate) (rho : R) : Prop :=
  state_inv M Key sc vis val n g ga K V m0 N Tt c k seen st /\
  forall m, ks_m st = Some m ->
    inv (GR K g m0 k m) (Lf * Rpower 2 (mf - m) * Rpower 2 (u * (m - m0)) * rho + RR K g ga V n N Tt k)
        (nth c (ks_acc st) 0) (exact_pv m (kpairs Key sc vis val c seen)) (exact_pv_abs m (kpairs Key sc vis val c seen)).

Lemma rpow_mul : forall x y, Rpower 2 x * Rpower 2 y = Rpower 2 (x + y).
Proof. intros; rewrite Rpower_plus; reflexivity. Qed.

Lemma run_step : forall k seen st tl rho b,
  length tl = n -> (S k <= Tt)%nat -> (length (filter vis (seen ++ tl)) <= N)%nat ->
  keys_ok M Key sc vis val K V m0 c (seen ++ tl) -> (c < length (ks_acc st))%nat ->
  0 <= rho -> Rabs (exact_pv mf (kpairs Key sc vis val c seen)) + exact_pv_abs mf (kpairs Key sc vis val c tl) <= Lf * b ->
  acc_run_inv k seen st rho ->
  acc_run_inv (S k) (seen ++ tl) (kernel_step_acc M Key sc vis val accf st tl) ((1 + gb) * rho + gb * b).
Proof.
  intros k seen st tl rho b Hn Hk HN Hok Hc Hrho Hb [Hold Hrun].
  split; [apply (state_step M Key sc vis val accf n g ga K V m0 N Tt c Hm HK HV); assumption |].
  intros m'' Em''.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (mp_ue_nonneg M) as Hue; pose proof (mp_eta_e_nonneg M) as Hee.
  pose proof (ff_eta_nonneg A_) as Hea; pose proof (ff_u_nonneg S_) as Hus; pose proof (ff_eta_nonneg S_) as Hes.
  pose proof (adm_rel_nonneg _ _ _ _ Hm) as Hg; pose proof (adm_abs_nonneg _ _ _ _ Hm) as Hga.
  pose proof (H_pv_ge_1 M K HK) as HH; pose proof (gR_nonneg g Hg) as Hg'.
  assert (Hgb0 : 0 <= gb) by (assert (0 <= g * (H_pv M K - 1)) by nra; lra).
  pose proof (dRR_nonneg K g ga V n N Tt HK Hg Hga HV) as HdR.
  pose proof (Ep_nonneg K g ga V n N Tt HK Hg Hga HV) as HEp.
  pose proof (RR_nonneg K g ga V n N Tt k HK Hg Hga HV) as HR.
  set (H := H_pv M K) in *.
  set (g' := gR g) in *.
  set (c0n := ((1 + us) * ee + es) * (INR n * V)).
  assert (Hc0n : 0 <= c0n) by (unfold c0n; apply Rmult_le_pos; [nra | apply Rmult_le_pos; [apply pos_INR | lra]]).
  assert (EcG : (1 + g) * (1 + u) * (1 + ue) = 1 + g') by (unfold g', gR; ring).
  assert (HcG : 1 <= 1 + g') by lra.
  assert (Hg'gb : g' <= gb) by (assert (0 <= g * (H - 1)) by nra; lra).
  assert (Hgg' : g <= g') by (unfold g', gR; assert (1 <= (1 + u) * (1 + ue)) by nra; nra).
  assert (HgH : g * H <= gb) by (replace (g * H) with (g + g * (H - 1)) by ring; lra).
  assert (HRR : (1 + g') * RR K g ga V n N Tt k + dRR K g ga V n N Tt <= RR K g ga V n N Tt (S k)).
  { unfold RR; fold g'; rewrite S_INR; cbn [pow]; pose proof (pos_INR k).
    assert (1 <= (1 + g') ^ k) by (apply pow_R1_Rle; lra).
    assert (1 <= (1 + g') * (1 + g') ^ k) by nra.
    assert (dRR K g ga V n N Tt <= (1 + g') * (1 + g') ^ k * dRR K g ga V n N Tt) by nra.
    nra. }
  assert (HdRe : (1 + g) * (1 + u) * (Ep K g ga V n N Tt * ee) + (1 + g) * ea + ((1 + g) * c0n + ga)
                 = dRR K g ga V n N Tt) by (unfold dRR, c0n; ring).
  (* the tile's keys *)
  assert (Htl : forall q, In q tl -> vis q = true -> fmt (sc q) /\ m0 <= sc q <= m0 + K /\ Rabs (val q c) <= V)
    by (intros q Hq Ev; apply Hok; [apply in_or_app; right; exact Hq | exact Ev]).
  assert (Ftl : forall q, In q (filter vis tl) -> fmt (sc q)).
  { intros q Hq; apply filter_In in Hq; destruct Hq as [Hq Ev]; apply (Htl q Hq Ev). }
  assert (Ubl : forall q, In q (filter vis tl) -> sc q <= m0 + K).
  { intros q Hq; apply filter_In in Hq; destruct Hq as [Hq Ev]; apply (Htl q Hq Ev). }
  assert (HTmf : 0 <= exact_pv_abs mf (kpairs Key sc vis val c tl)) by (eapply Rle_trans; [apply Rabs_pos | apply exact_pv_abs_ge]).
  assert (Hb0 : 0 <= b) by (pose proof (Rabs_pos (exact_pv mf (kpairs Key sc vis val c seen))); nra).
  unfold state_inv in Hold.
  change (ks_m (kernel_step_acc M Key sc vis val accf st tl)) with (vmax Key sc vis (ks_m st) tl) in Em''.
  rewrite (kernel_step_acc_nth M Key sc vis val accf st tl c Hc); cbv zeta.
  rewrite kpairs_app, exact_pv_app, exact_pv_abs_app.
  destruct (ks_m st) as [m |] eqn:Em.
  - (* a running max: rescale, then accumulate *)
    destruct Hold as [Fm [[Hm0 HmK] [Hseen C]]].
    specialize (Hrun m eq_refl).
    rewrite vmax_some_filter in Em'' |- *; injection Em'' as Em''; subst m''; cbn [m_use kalpha].
    set (m' := tmax Key sc m (filter vis tl)).
    destruct (tmax_props M Key sc (filter vis tl) m Fm Ftl) as [Fm' [Hmm' Htm]]; fold m' in Fm', Hmm', Htm.
    assert (Hk' : forall q, In q tl -> vis q = true -> fmt (sc q) /\ sc q <= m' /\ m' - sc q <= K /\ Rabs (val q c) <= V).
    { intros q Hq Ev; destruct (Htl q Hq Ev) as [Fq [[H1 H2] Hv]].
      assert (sc q <= m') by (apply Htm, filter_In; auto).
      assert (HmK' : m' <= m0 + K) by (apply tmax_le; [exact HmK | exact Ubl]).
      repeat split; auto; lra. }
    set (x := nth c (ks_acc st) 0) in *.
    set (X := exact_pv m (kpairs Key sc vis val c seen)) in *; set (A := exact_pv_abs m (kpairs Key sc vis val c seen)) in *.
    assert (HX : Rabs X <= A) by apply exact_pv_abs_ge.
    assert (HA0 : 0 <= A) by (eapply Rle_trans; [apply Rabs_pos | exact HX]).
    assert (HS0 : A <= INR N * V).
    { apply exact_pv_abs_bound; [exact HV | |].
      - intros p Hp; unfold kpairs in Hp; apply in_map_iff in Hp; destruct Hp as [q [<- Hq]].
        apply filter_In in Hq; destruct Hq as [Hq Ev]; cbn [fst snd].
        split; [apply (Hok q (in_or_app _ _ _ (or_introl Hq)) Ev) | apply (Hseen q Hq Ev)].
      - unfold kpairs; rewrite map_length; rewrite filter_app, app_length in HN; lia. }
    (* the a-priori bound of [|x|] *)
    assert (Hxp : Rabs x <= Ep K g ga V n N Tt).
    { unfold inv in C; fold x X A in C.
      pose proof (cgA_ge_1 M g Hg) as Hcg; pose proof (crA_ge_1 M g Hg) as Hcr.
      assert (HGb : GkA M K g m0 k m <= H * cgA M g ^ Tt * Rpower 2 (u * K)).
      { unfold GkA; fold H.
        assert (cgA M g ^ k <= cgA M g ^ Tt) by (apply Rle_pow; [lra | lia]).
        assert (Rpower 2 (u * (m - m0)) <= Rpower 2 (u * K)) by (apply ost_rpow_le, Rmult_le_compat_l; lra).
        assert (1 <= cgA M g ^ k) by (apply pow_R1_Rle; lra).
        assert (H * cgA M g ^ k <= H * cgA M g ^ Tt) by (apply Rmult_le_compat_l; lra).
        apply Rmult_le_compat; try lra; [apply Rmult_le_pos; lra | left; apply Rpower_pos]. }
      assert (HRk : RkA M K g ga V n N Tt k <= RkA M K g ga V n N Tt Tt).
      { unfold RkA; pose proof (dRA_nonneg M K g ga V n N Tt HK Hg Hga HV).
        assert (crA M g ^ k <= crA M g ^ Tt) by (apply Rle_pow; [lra | lia]).
        assert (INR k <= INR Tt) by (apply le_INR; lia).
        assert (0 <= crA M g ^ k) by (apply pow_le; lra).
        apply Rmult_le_compat_r; [lra |]; apply Rmult_le_compat; [apply pos_INR | lra | lra | lra]. }
      pose proof (GkA_ge_1 M K g m0 k m HK Hg Hm0).
      assert (GkA M K g m0 k m * A <= H * cgA M g ^ Tt * Rpower 2 (u * K) * (INR N * V))
        by (apply Rmult_le_compat; lra).
      replace x with ((x - X) + X) by ring; eapply Rle_trans; [apply Rabs_triang |].
      unfold Ep; fold H; lra. }
    (* the rescale *)
    set (al := exp2 (rnd (m - m'))).
    set (a := Rpower 2 (m - m')).
    set (P2 := Rpower 2 (u * (m' - m))).
    assert (Ha0 : 0 < a) by apply Rpower_pos.
    assert (HP2 : 1 <= P2) by (apply ose_rpow_ge_1, Rmult_le_pos; lra).
    pose proof (exp2_diff_error M m m' Fm Fm' Hmm') as Hal; fold al a in Hal.
    assert (EE : exp2_factor M m m' = (1 + ue) * P2) by reflexivity.
    rewrite EE in Hal.
    assert (HaP : a * P2 <= 1).
    { pose proof (alpha_factor_le M m m' Hmm') as Hf; fold a in Hf; rewrite EE in Hf.
      assert ((1 + ue) * (a * P2) <= (1 + ue) * 1) by lra.
      apply Rmult_le_reg_l in H0; lra. }
    set (e := Rabs (x - X)).
    set (G := GR K g m0 k m) in *.
    set (Q := Lf * Rpower 2 (mf - m) * Rpower 2 (u * (m - m0)) * rho) in *.
    set (Qn := Lf * Rpower 2 (mf - m') * Rpower 2 (u * (m' - m0)) * rho).
    set (RRk := RR K g ga V n N Tt k) in *.
    assert (He : e <= (G - 1) * A + Q + RRk) by (unfold inv in Hrun; fold x X A in Hrun; unfold e; lra).
    assert (HG1 : 1 <= G) by (apply GR_ge_1; assumption).
    assert (HQ0 : 0 <= Q).
    { unfold Q; pose proof (Rpower_pos (mf - m)); pose proof (Rpower_pos (u * (m - m0))).
      apply Rmult_le_pos; [| exact Hrho]; apply Rmult_le_pos; [| lra]; apply Rmult_le_pos; lra. }
    assert (EQ : a * P2 * Q = Qn).
    { unfold Q, Qn.
      replace (a * P2 * (Lf * Rpower 2 (mf - m) * Rpower 2 (u * (m - m0)) * rho))
        with (Lf * (a * Rpower 2 (mf - m)) * (P2 * Rpower 2 (u * (m - m0))) * rho) by ring.
      unfold a, P2; rewrite !rpow_mul.
      replace (m - m' + (mf - m)) with (mf - m') by ring.
      replace (u * (m' - m) + u * (m - m0)) with (u * (m' - m0)) by ring; reflexivity. }
    (* |x al - X a| *)
    set (T1 := (1 + ue) * (G * P2 - 1) * (a * A) + (1 + ue) * Qn + (1 + ue) * RRk + ue * Rabs (X * a)
               + Ep K g ga V n N Tt * ee).
    assert (HB1 : Rabs (x * al - X * a) <= T1).
    { replace (x * al - X * a) with ((x - X) * a + x * (al - a)) by ring.
      eapply Rle_trans; [apply Rabs_triang |]; rewrite !Rabs_mult, (Rabs_right a) by lra; fold e.
      assert (Hx1 : Rabs x <= Rabs X + e)
        by (replace x with ((x - X) + X) at 1 by ring; unfold e; eapply Rle_trans; [apply Rabs_triang | lra]).
      assert (HE0 : 0 <= a * ((1 + ue) * P2 - 1))
        by (apply Rmult_le_pos; [lra | pose proof (fa_one_le_mult (1 + ue) P2 ltac:(lra) HP2); lra]).
      assert (E1 : Rabs x * Rabs (al - a) <= Rabs x * (a * ((1 + ue) * P2 - 1) + ee))
        by (apply Rmult_le_compat_l; [apply Rabs_pos | exact Hal]).
      assert (E2 : Rabs x * (a * ((1 + ue) * P2 - 1)) <= (Rabs X + e) * (a * ((1 + ue) * P2 - 1)))
        by (apply Rmult_le_compat_r; lra).
      assert (E3 : Rabs x * ee <= Ep K g ga V n N Tt * ee) by (apply Rmult_le_compat_r; lra).
      assert (E4 : e * ((1 + ue) * (a * P2)) <= ((G - 1) * A + Q + RRk) * ((1 + ue) * (a * P2)))
        by (apply Rmult_le_compat_r; [apply Rmult_le_pos; [lra | apply Rmult_le_pos; lra] | exact He]).
      assert (E5 : RRk * ((1 + ue) * (a * P2)) <= RRk * (1 + ue))
        by (apply Rmult_le_compat_l; [lra | apply fa_mult_le_l; lra]).
      assert (E6 : Rabs X * (a * ((1 + ue) * P2 - 1)) <= ue * (Rabs X * a) + (1 + ue) * (P2 - 1) * (a * A)).
      { replace (Rabs X * (a * ((1 + ue) * P2 - 1))) with (ue * (Rabs X * a) + (1 + ue) * (P2 - 1) * (a * Rabs X))
          by ring.
        assert ((1 + ue) * (P2 - 1) * (a * Rabs X) <= (1 + ue) * (P2 - 1) * (a * A))
          by (apply Rmult_le_compat_l; [apply Rmult_le_pos; lra | apply Rmult_le_compat_l; lra]).
        lra. }
      assert (E7 : (G - 1) * A * ((1 + ue) * (a * P2)) + (1 + ue) * (P2 - 1) * (a * A)
                   = (1 + ue) * (G * P2 - 1) * (a * A)) by ring.
      assert (E8 : Q * ((1 + ue) * (a * P2)) = (1 + ue) * Qn) by (rewrite <- EQ; ring).
      unfold T1; rewrite Rabs_mult, (Rabs_right a) by lra; lra. }
    (* |rnd (x al) - X a| *)
    set (y2 := rnd (x * al)).
    assert (HB2 : Rabs (y2 - X * a) <= (1 + u) * T1 + u * Rabs (X * a) + ea).
    { pose proof (ff_abs A_ (x * al)) as Hr; fold y2 in Hr.
      assert (Rabs (x * al) <= Rabs (X * a) + T1)
        by (replace (x * al) with ((x * al - X * a) + X * a) by ring; eapply Rle_trans; [apply Rabs_triang | lra]).
      replace (y2 - X * a) with ((y2 - x * al) + (x * al - X * a)) by ring.
      eapply Rle_trans; [apply Rabs_triang |].
      assert (u * Rabs (x * al) <= u * (Rabs (X * a) + T1)) by (apply Rmult_le_compat_l; lra).
      lra. }
    (* the tile *)
    pose proof (tile_acc_run Key sc vis val accf n g ga K V c Hm HK HV y2 (X * a) m' tl Hn Fm' Hk') as Ht.
    fold y2 H in Ht.
    set (Tm := exact_pv_abs m' (kpairs Key sc vis val c tl)) in *.
    assert (HT0 : 0 <= Tm) by (eapply Rle_trans; [apply Rabs_pos | apply exact_pv_abs_ge]).
    unfold X, A; rewrite <- (exact_pv_resc m m'), <- (exact_pv_abs_resc m m'); fold X A a.
    replace (A * a) with (a * A) by ring.
    (* the premise, at [m'] *)
    assert (Hbm : Rabs (X * a) + Tm <= Lf * Rpower 2 (mf - m') * b).
    { assert (E : Rabs (exact_pv mf (kpairs Key sc vis val c seen)) * Rpower 2 (mf - m') + exact_pv_abs mf (kpairs Key sc vis val c tl) * Rpower 2 (mf - m')
                  <= Lf * b * Rpower 2 (mf - m'))
        by (rewrite <- Rmult_plus_distr_r; apply Rmult_le_compat_r; [left; apply Rpower_pos | exact Hb]).
      rewrite exact_pv_abs_resc in E.
      rewrite <- (Rabs_right (Rpower 2 (mf - m'))) in E at 1 by (left; apply Rpower_pos).
      rewrite <- Rabs_mult, exact_pv_resc in E.
      unfold X; rewrite (exact_pv_resc m m').
      fold Tm in E.
      replace (Lf * Rpower 2 (mf - m') * b) with (Lf * b * Rpower 2 (mf - m')) by ring; exact E. }
    set (Lb := Lf * Rpower 2 (mf - m') * b) in *.
    assert (HLb : Lb <= Lf * Rpower 2 (mf - m') * Rpower 2 (u * (m' - m0)) * b).
    { unfold Lb; assert (1 <= Rpower 2 (u * (m' - m0))) by (apply ose_rpow_ge_1, Rmult_le_pos; lra).
      assert (0 <= Lf * Rpower 2 (mf - m') * b) by (apply Rmult_le_pos; [apply Rmult_le_pos; [lra | left; apply Rpower_pos] | lra]).
      replace (Lf * Rpower 2 (mf - m') * Rpower 2 (u * (m' - m0)) * b)
        with (Lf * Rpower 2 (mf - m') * b * Rpower 2 (u * (m' - m0))) by ring.
      apply fa_le_mult_r; assumption. }
    (* the factor *)
    assert (HG' : (1 + g') * (G * P2 - 1) <= GR K g m0 (S k) m' - 1).
    { unfold G, GR; fold g' H; cbn [pow].
      set (Z := H * Rpower 2 (u * (m - m0))).
      assert (EZ : Z * P2 = H * Rpower 2 (u * (m' - m0))).
      { unfold Z, P2; rewrite Rmult_assoc, rpow_mul; replace (u * (m - m0) + u * (m' - m)) with (u * (m' - m0)) by ring.
        reflexivity. }
      assert (1 <= (1 + g') ^ k) by (apply pow_R1_Rle; lra).
      assert (1 <= Z) by (unfold Z; apply fa_one_le_mult; [exact HH | apply ose_rpow_ge_1, Rmult_le_pos; lra]).
      replace ((1 + (1 + g') ^ k * (Z - 1)) * P2 - 1) with ((P2 - 1) + (1 + g') ^ k * (Z * P2 - P2)) by ring.
      rewrite EZ in *.
      assert (P2 - 1 <= (1 + g') ^ k * (P2 - 1)) by (apply fa_le_mult_l; lra).
      assert ((P2 - 1) + (1 + g') ^ k * (H * Rpower 2 (u * (m' - m0)) - P2)
              <= (1 + g') ^ k * (H * Rpower 2 (u * (m' - m0)) - 1)) by nra.
      apply Rmult_le_compat_l with (r := 1 + g') in H2; [| lra].
      replace ((1 + g') * ((1 + g') ^ k * (H * Rpower 2 (u * (m' - m0)) - 1)))
        with ((1 + g') * (1 + g') ^ k * (H * Rpower 2 (u * (m' - m0)) - 1)) in H2 by ring.
      lra. }
    assert (HH' : H - 1 <= GR K g m0 (S k) m' - 1).
    { unfold GR; fold g' H.
      assert (1 <= (1 + g') ^ S k) by (apply pow_R1_Rle; lra).
      assert (1 <= Rpower 2 (u * (m' - m0))) by (apply ose_rpow_ge_1, Rmult_le_pos; lra).
      assert (H <= H * Rpower 2 (u * (m' - m0))) by (apply fa_le_mult_r; lra).
      assert (H * Rpower 2 (u * (m' - m0)) - 1 <= (1 + g') ^ S k * (H * Rpower 2 (u * (m' - m0)) - 1))
        by (apply fa_le_mult_l; lra).
      lra. }
    assert (HGP : 0 <= G * P2 - 1) by (pose proof (fa_one_le_mult G P2 HG1 HP2); lra).
    (* assembling *)
    set (G' := GR K g m0 (S k) m') in *.
    assert (Eall : (1 + g) * ((1 + u) * T1 + u * Rabs (X * a) + ea) + g * Rabs (X * a) + (H - 1) * Tm
                   + g * H * Tm + ((1 + g) * c0n + ga)
                   = (1 + g') * (G * P2 - 1) * (a * A) + (1 + g') * Qn + (1 + g') * RRk
                     + (g' * Rabs (X * a) + g * H * Tm) + (H - 1) * Tm
                     + ((1 + g) * (1 + u) * (Ep K g ga V n N Tt * ee) + (1 + g) * ea + ((1 + g) * c0n + ga))).
    { unfold T1, g', gR; ring. }
    rewrite HdRe in Eall.
    assert (B1 : (1 + g') * (G * P2 - 1) * (a * A) <= (G' - 1) * (a * A))
      by (apply Rmult_le_compat_r; [apply Rmult_le_pos; lra | exact HG']).
    assert (B2 : (H - 1) * Tm <= (G' - 1) * Tm) by (apply Rmult_le_compat_r; lra).
    assert (HQn : 0 <= Qn) by (rewrite <- EQ; apply Rmult_le_pos; [apply Rmult_le_pos; lra | lra]).
    assert (B3 : (1 + g') * Qn <= (1 + gb) * Qn) by (apply Rmult_le_compat_r; lra).
    assert (B4 : g' * Rabs (X * a) + g * H * Tm <= gb * (Rabs (X * a) + Tm)).
    { assert (g' * Rabs (X * a) <= gb * Rabs (X * a)) by (apply Rmult_le_compat_r; [apply Rabs_pos | lra]).
      assert (g * H * Tm <= gb * Tm) by (apply Rmult_le_compat_r; [lra | nra]).
      lra. }
    assert (B5 : gb * (Rabs (X * a) + Tm) <= gb * (Lf * Rpower 2 (mf - m') * Rpower 2 (u * (m' - m0)) * b))
      by (apply Rmult_le_compat_l; lra).
    unfold inv.
    replace (accf y2 (map (fun k0 => ff_rnd S_ (kweight M Key sc vis m' k0)) tl) (map (fun k0 => val k0 c) tl)
             - (X * a + exact_pv m' (kpairs Key sc vis val c tl)))
      with (accf y2 (map (fun k0 => ff_rnd S_ (kweight M Key sc vis m' k0)) tl) (map (fun k0 => val k0 c) tl)
             - (X * a + exact_pv m' (kpairs Key sc vis val c tl))) by reflexivity.
    eapply Rle_trans; [exact Ht |].
    assert (Ht2 : (1 + g) * Rabs (y2 - X * a) <= (1 + g) * ((1 + u) * T1 + u * Rabs (X * a) + ea))
      by (apply Rmult_le_compat_l; lra).
    replace (Lf * Rpower 2 (mf - m') * Rpower 2 (u * (m' - m0)) * ((1 + gb) * rho + gb * b))
      with ((1 + gb) * Qn + gb * (Lf * Rpower 2 (mf - m') * Rpower 2 (u * (m' - m0)) * b)) by (unfold Qn; ring).
    fold c0n; lra.
  - (* no visible key yet: [alpha = 0] and the tile starts the accumulator *)
    destruct (filter vis tl) as [| k0 r] eqn:Ef.
    + rewrite (vmax_masked Key sc vis tl None (filter_nil_fully_masked vis tl Ef)) in Em''; discriminate.
    + rewrite (vmax_none_filter Key sc vis tl k0 r Ef) in Em'' |- *; injection Em'' as Em''; subst m''; cbn [m_use kalpha].
      set (m' := tmax Key sc (sc k0) r).
      assert (Fk0 : fmt (sc k0)) by (apply Ftl; left; reflexivity).
      assert (Ftl' : forall q, In q r -> fmt (sc q)) by (intros q Hq; apply Ftl; right; exact Hq).
      destruct (tmax_props M Key sc r (sc k0) Fk0 Ftl') as [Fm' [Hkm' Htm]]; fold m' in Fm', Hkm', Htm.
      assert (Hin' : forall q, In q (filter vis tl) -> sc q <= m').
      { rewrite Ef; intros q [<- | Hq]; [exact Hkm' | apply Htm, Hq]. }
      assert (HmK' : m' <= m0 + K)
        by (apply tmax_le; [apply Ubl; left; reflexivity | intros q Hq; apply Ubl; right; exact Hq]).
      assert (Hm0' : m0 <= m').
      { assert (Hk0 : In k0 (filter vis tl)) by (rewrite Ef; left; reflexivity).
        pose proof (Hin' k0 Hk0).
        apply filter_In in Hk0; destruct Hk0 as [Hk0 Ev]; destruct (Htl k0 Hk0 Ev) as [_ [[H1 _] _]]; lra. }
      rewrite Rmult_0_r, (ff_rnd_id A_ 0 (ff_fmt_0 A_)).
      assert (Hs : kpairs Key sc vis val c seen = []) by (unfold kpairs; rewrite Hold; reflexivity).
      rewrite Hs in Hb |- *.
      assert (Hk' : forall q, In q tl -> vis q = true -> fmt (sc q) /\ sc q <= m' /\ m' - sc q <= K /\ Rabs (val q c) <= V).
      { intros q Hq Ev; destruct (Htl q Hq Ev) as [Fq [[H1 H2] Hv]].
        assert (sc q <= m') by (apply Hin', filter_In; auto).
        repeat split; auto; lra. }
      pose proof (tile_acc_run Key sc vis val accf n g ga K V c Hm HK HV 0 0 m' tl Hn Fm' Hk') as Ht.
      fold H in Ht.
      rewrite Rminus_0_r, Rabs_R0, Rmult_0_r, Rplus_0_l, Rmult_0_r, Rplus_0_l in Ht.
      assert (E0 : forall mm, exact_pv mm [] = 0 /\ exact_pv_abs mm [] = 0)
        by (intros; unfold exact_pv, exact_pv_abs, rsum; cbn; split; reflexivity).
      rewrite (proj1 (E0 mf)), Rabs_R0, Rplus_0_l in Hb.
      rewrite (proj1 (E0 m')), (proj2 (E0 m')), !Rplus_0_l.
      set (Tm := exact_pv_abs m' (kpairs Key sc vis val c tl)) in *.
      assert (HT0 : 0 <= Tm) by (eapply Rle_trans; [apply Rabs_pos | apply exact_pv_abs_ge]).
      assert (Hbm : Tm <= Lf * Rpower 2 (mf - m') * b).
      { unfold Tm; rewrite <- (exact_pv_abs_resc mf m').
        replace (Lf * Rpower 2 (mf - m') * b) with (Lf * b * Rpower 2 (mf - m')) by ring.
        apply Rmult_le_compat_r; [left; apply Rpower_pos | exact Hb]. }
      assert (HLb : Lf * Rpower 2 (mf - m') * b <= Lf * Rpower 2 (mf - m') * Rpower 2 (u * (m' - m0)) * b).
      { assert (1 <= Rpower 2 (u * (m' - m0))) by (apply ose_rpow_ge_1, Rmult_le_pos; lra).
        assert (0 <= Lf * Rpower 2 (mf - m') * b) by (apply Rmult_le_pos; [apply Rmult_le_pos; [lra | left; apply Rpower_pos] | lra]).
        replace (Lf * Rpower 2 (mf - m') * Rpower 2 (u * (m' - m0)) * b)
          with (Lf * Rpower 2 (mf - m') * b * Rpower 2 (u * (m' - m0))) by ring.
        apply fa_le_mult_r; assumption. }
      assert (HH' : H - 1 <= GR K g m0 (S k) m' - 1).
      { unfold GR; fold g' H.
        assert (1 <= (1 + g') ^ S k) by (apply pow_R1_Rle; lra).
        assert (1 <= Rpower 2 (u * (m' - m0))) by (apply ose_rpow_ge_1, Rmult_le_pos; lra).
        assert (H <= H * Rpower 2 (u * (m' - m0))) by (apply fa_le_mult_r; lra).
        assert (H * Rpower 2 (u * (m' - m0)) - 1 <= (1 + g') ^ S k * (H * Rpower 2 (u * (m' - m0)) - 1))
          by (apply fa_le_mult_l; lra).
        lra. }
      assert (B2 : (H - 1) * Tm <= (GR K g m0 (S k) m' - 1) * Tm) by (apply Rmult_le_compat_r; lra).
      assert (B4 : g * H * Tm <= gb * Tm) by (apply Rmult_le_compat_r; [lra | nra]).
      assert (B5 : gb * Tm <= gb * (Lf * Rpower 2 (mf - m') * Rpower 2 (u * (m' - m0)) * b))
        by (apply Rmult_le_compat_l; lra).
      assert (HQn : 0 <= Lf * Rpower 2 (mf - m') * Rpower 2 (u * (m' - m0)) * rho).
      { pose proof (Rpower_pos (mf - m')); pose proof (Rpower_pos (u * (m' - m0))).
        apply Rmult_le_pos; [| exact Hrho]; apply Rmult_le_pos; [| lra]; apply Rmult_le_pos; lra. }
      assert (B7 : (1 + g) * c0n + ga <= RR K g ga V n N Tt (S k)).
      { assert ((1 + g) * c0n + ga <= dRR K g ga V n N Tt).
        { rewrite <- HdRe.
          assert (0 <= (1 + g) * (1 + u) * (Ep K g ga V n N Tt * ee))
            by (apply Rmult_le_pos; [apply Rmult_le_pos | apply Rmult_le_pos]; lra).
          assert (0 <= (1 + g) * ea) by (apply Rmult_le_pos; lra).
          lra. }
        assert (0 <= (1 + g') * RR K g ga V n N Tt k) by (apply Rmult_le_pos; lra).
        lra. }
      unfold inv; eapply Rle_trans; [exact Ht |].
      replace (Lf * Rpower 2 (mf - m') * Rpower 2 (u * (m' - m0)) * ((1 + gb) * rho + gb * b))
        with ((1 + gb) * (Lf * Rpower 2 (mf - m') * Rpower 2 (u * (m' - m0)) * rho)
              + gb * (Lf * Rpower 2 (mf - m') * Rpower 2 (u * (m' - m0)) * b)) by ring.
      assert (0 <= (1 + gb) * (Lf * Rpower 2 (mf - m') * Rpower 2 (u * (m' - m0)) * rho)) by (apply Rmult_le_pos; lra).
      fold c0n; lra.
Qed.

Lemma run_run : forall tiles bs k seen st rho,
  Forall (fun tl => length tl = n) tiles -> (k + length tiles <= Tt)%nat ->
  (length (filter vis (seen ++ concat tiles)) <= N)%nat ->
  keys_ok M Key sc vis val K V m0 c (seen ++ concat tiles) -> (c < length (ks_acc st))%nat ->
  length bs = length tiles -> 0 <= rho ->
  (forall t, (t < length tiles)%nat ->
     Rabs (exact_pv mf (kpairs Key sc vis val c (seen ++ concat (firstn t tiles))))
     + exact_pv_abs mf (kpairs Key sc vis val c (nth t tiles [])) <= Lf * nth t bs 0) ->
  acc_run_inv k seen st rho ->
  acc_run_inv (k + length tiles) (seen ++ concat tiles) (kernel_run_acc M Key sc vis val accf st tiles)
          (fold_left (fun e b => (1 + gb) * e + gb * b + 0) bs rho).
Proof.
  pose proof (adm_rel_nonneg _ _ _ _ Hm) as Hg.
  assert (Hgb0 : 0 <= gb).
  { pose proof (gR_nonneg g Hg); pose proof (H_pv_ge_1 M K HK).
    assert (0 <= g * (H_pv M K - 1)) by nra; lra. }
  induction tiles as [|tl tiles IH]; intros bs k seen st rho Hn HT HN Hok Hc Hl Hrho Hp Hinv.
  - destruct bs; [| discriminate].
    cbn [length concat fold_left]; rewrite Nat.add_0_r, app_nil_r; exact Hinv.
  - destruct bs as [| b bs]; [discriminate |].
    inversion Hn as [|tl' tiles' Htl Hrest]; subst.
    cbn [length concat fold_left] in *; unfold kernel_run_acc; cbn [fold_left]; fold (kernel_run_acc M Key sc vis val accf).
    replace (k + S (length tiles))%nat with (S k + length tiles)%nat by lia.
    pose proof (Hp 0%nat ltac:(lia)) as Hp0; cbn [firstn concat nth] in Hp0; rewrite app_nil_r in Hp0.
    assert (Hb0 : 0 <= b).
    { assert (0 <= exact_pv_abs mf (kpairs Key sc vis val c tl))
        by (eapply Rle_trans; [apply Rabs_pos | apply exact_pv_abs_ge]).
      pose proof (Rabs_pos (exact_pv mf (kpairs Key sc vis val c seen))); nra. }
    replace ((1 + gb) * rho + gb * b + 0) with ((1 + gb) * rho + gb * b) by ring.
    rewrite app_assoc in *.
    apply IH; auto.
    + lia.
    + rewrite kernel_step_acc_length; exact Hc.
    + nra.
    + intros t Ht; pose proof (Hp (S t) ltac:(lia)) as H; cbn [firstn concat nth] in H.
      rewrite app_assoc in H; exact H.
    + apply run_step; auto.
      * lia.
      * rewrite filter_app, app_length in HN; lia.
      * intros q Hq Ev; apply Hok; [apply in_or_app; left; exact Hq | exact Ev].
Qed.

End Run.

(** The running fold: from any state with no visible key yet ([ks_m = None]: the
    kernel's start), over tiles of [n] keys with at most [N] visible keys and [Tt]
    tiles, every visible score a format number in [[m0, m0 + K]] and [|v| <= V], and
    per-tile bounds [bs] in units of [Lf 2^(-mf)] (any [mf], [Lf > 0]):
      Lf b_t >= |sum_(j in tiles < t) 2^(s_j - mf) v_j| + sum_(j in tile t) 2^(s_j - mf) |v_j|
    (visible keys): once a key is visible, coordinate [c] of [acc] is within
      (GR - 1) A + Lf 2^(mf - m) 2^(u (m - m0)) run_err gb 0 bs + RR
    of [X = sum_j 2^(s_j - m) v_j], [A = sum_j 2^(s_j - m) |v_j|] ([m] the running max,
    [GR], [RR] at the number of tiles), for any [gb >= gR g_rel + g_rel (H_pv - 1)]. *)
Theorem acc_kernel_running : forall (Key : Type) (sc : Key -> R) (vis : Key -> bool) (val : Key -> nat -> R)
    (accf : R -> list R -> list R -> R) (n : nat) (g ga K V m0 : R) (N Tt c : nat) (mf Lf gb : R)
    (tiles : list (list Key)) (bs : list R) (st : kstate),
  acc_dot_model accf n g ga -> 0 <= K -> 0 <= V -> 0 < Lf -> gR g + g * (H_pv M K - 1) <= gb ->
  Forall (fun tl => length tl = n) tiles -> (length tiles <= Tt)%nat ->
  (length (filter vis (concat tiles)) <= N)%nat ->
  (forall k, In k (concat tiles) -> vis k = true -> fmt (sc k) /\ m0 <= sc k <= m0 + K /\ Rabs (val k c) <= V) ->
  length bs = length tiles ->
  (forall t, (t < length tiles)%nat ->
     Rabs (exact_pv mf (kpairs Key sc vis val c (concat (firstn t tiles))))
     + exact_pv_abs mf (kpairs Key sc vis val c (nth t tiles [])) <= Lf * nth t bs 0) ->
  ks_m st = None -> (c < length (ks_acc st))%nat ->
  forall m, ks_m (kernel_run_acc M Key sc vis val accf st tiles) = Some m ->
  inv (GR K g m0 (length tiles) m)
      (Lf * Rpower 2 (mf - m) * Rpower 2 (u * (m - m0)) * run_err gb 0 bs + RR K g ga V n N Tt (length tiles))
      (nth c (ks_acc (kernel_run_acc M Key sc vis val accf st tiles)) 0)
      (exact_pv m (kpairs Key sc vis val c (concat tiles)))
      (exact_pv_abs m (kpairs Key sc vis val c (concat tiles))).
Proof.
  intros Key sc vis val accf n g ga K V m0 N Tt c mf Lf gb tiles bs st Hm HK HV HLf Hgb Hn HT HN Hok Hl Hp Hst Hc m Em.
  pose proof (run_run Key sc vis val accf n g ga K V m0 N Tt c mf Lf gb Hm HK HV HLf Hgb tiles bs 0 [] st 0
                Hn HT HN Hok Hc Hl (Rle_refl 0) Hp) as H.
  destruct H as [_ H].
  - split; [unfold state_inv; rewrite Hst; reflexivity | intros m' Em'; rewrite Hst in Em'; discriminate].
  - exact (H m Em).
Qed.

End KernelRunning.

(** ** Helpers: partial softmax sums, the affine [run_err], the tile split *)

Lemma far_rsum_zero : forall {T} (f : T -> R) (l : list T), (forall x, f x = 0) -> rsum (map f l) = 0.
Proof.
  intros T f l H; induction l as [|x l IH]; [reflexivity |].
  cbn [map]; rewrite rsum_cons, IH, H; ring.
Qed.

Lemma far_rsum_nonneg : forall {T} (f : T -> R) (l : list T), (forall x, 0 <= f x) -> 0 <= rsum (map f l).
Proof.
  intros T f l H; apply rsum_nonneg; intros y Hy; apply in_map_iff in Hy; destruct Hy as [x [<- _]]; apply H.
Qed.

(** A partial sum over the normaliser of the whole list is unchanged by a common shift of the scores. *)
Lemma part_shift : forall {T} (xs ys : list T) (S v : T -> R) a,
  rsum (map (fun x => exp (S x - a) * v x) xs) / rsum (map (fun x => exp (S x - a)) ys)
  = rsum (map (fun x => exp (S x) * v x) xs) / rsum (map (fun x => exp (S x)) ys).
Proof.
  intros T xs ys S v a.
  rewrite (rsum_map_ext (fun x => exp (S x - a) * v x) (fun x => exp (- a) * (exp (S x) * v x)))
    by (intros; unfold Rminus; rewrite exp_plus; ring).
  rewrite (rsum_map_ext (fun x => exp (S x - a)) (fun x => exp (- a) * exp (S x)))
    by (intros; unfold Rminus; rewrite exp_plus; ring).
  rewrite !rsum_map_scal_l.
  pose proof (exp_pos (- a)).
  destruct (Req_dec (rsum (map (fun x => exp (S x)) ys)) 0) as [Z | Z].
  - rewrite Z, Rmult_0_r; unfold Rdiv; rewrite !Rinv_0; ring.
  - field; split; [exact Z | lra].
Qed.

(** [softmax_perturbation_post] for the part [b] of a list [a ++ b ++ c]: the partial
    sums [sum_(x in b) exp (S x) v x], each over the normaliser of the whole list. *)
Lemma softmax_part_post : forall {T} (a b c : list T) (S S' v : T -> R) delta,
  0 <= delta -> (forall x, In x (a ++ b ++ c) -> Rabs (S' x - S x) <= delta) ->
  Rabs (rsum (map (fun x => exp (S' x) * v x) b) / rsum (map (fun x => exp (S' x)) (a ++ b ++ c))
        - rsum (map (fun x => exp (S x) * v x) b) / rsum (map (fun x => exp (S x)) (a ++ b ++ c)))
  <= (exp (2 * delta) - 1)
     * (rsum (map (fun x => exp (S x) * Rabs (v x)) b) / rsum (map (fun x => exp (S x)) (a ++ b ++ c)))
  /\ rsum (map (fun x => exp (S' x) * Rabs (v x)) b) / rsum (map (fun x => exp (S' x)) (a ++ b ++ c))
     <= exp (2 * delta)
        * (rsum (map (fun x => exp (S x) * Rabs (v x)) b) / rsum (map (fun x => exp (S x)) (a ++ b ++ c))).
Proof.
  intros T a b c S S' v delta Hd HS.
  set (xs := map (pair false) a ++ map (pair true) b ++ map (pair false) c).
  assert (Etag : forall F : bool * T -> R, rsum (map F xs)
            = rsum (map (fun x => F (false, x)) a) + rsum (map (fun x => F (true, x)) b)
              + rsum (map (fun x => F (false, x)) c)).
  { intros F; unfold xs; rewrite !map_app, !rsum_app, !map_map; ring. }
  assert (Eall : forall f : T -> R, rsum (map f (a ++ b ++ c)) = rsum (map f a) + rsum (map f b) + rsum (map f c))
    by (intros f; rewrite !map_app, !rsum_app; ring).
  destruct (softmax_perturbation_post xs (fun p => S (snd p)) (fun p => S' (snd p))
              (fun p => if fst p then v (snd p) else 0) delta Hd) as [H1 H2].
  { intros [t x] Hx; cbn [snd]; apply HS.
    unfold xs in Hx; rewrite !in_app_iff, !in_map_iff in Hx; rewrite !in_app_iff.
    destruct Hx as [[y [Ey Hy]] | [[y [Ey Hy]] | [y [Ey Hy]]]]; injection Ey as _ <-; auto. }
  unfold sm_avg in H1, H2; rewrite !Etag in H1, H2; cbn [fst snd] in H1, H2.
  rewrite !(far_rsum_zero (fun x => exp (S' x) * 0)) in H1 by (intros; ring).
  rewrite !(far_rsum_zero (fun x => exp (S x) * 0)) in H1 by (intros; ring).
  rewrite ?Etag in H1; rewrite ?Etag in H2; cbn [fst snd] in H1, H2.
  rewrite !(far_rsum_zero (fun x => exp (S x) * Rabs 0)) in H1, H2 by (intros; rewrite Rabs_R0; ring).
  rewrite !(far_rsum_zero (fun x => exp (S' x) * Rabs 0)) in H2 by (intros; rewrite Rabs_R0; ring).
  rewrite !Eall; rewrite !Rplus_0_l, !Rplus_0_r in H1; rewrite !Rplus_0_l, !Rplus_0_r in H2.
  split; [exact H1 | exact H2].
Qed.

Lemma run_err_affine_from : forall g (bs : list R) al be e c0,
  fold_left (fun e b => (1 + g) * e + g * b + 0) (map (fun b => al * b + be) bs) (al * e + be * c0)
  = al * fold_left (fun e b => (1 + g) * e + g * b + 0) bs e + be * ((1 + g) ^ length bs * (c0 + 1) - 1).
Proof.
  intros g bs al be; induction bs as [|b bs IH]; intros e c0; cbn [map fold_left length pow]; [ring |].
  replace ((1 + g) * (al * e + be * c0) + g * (al * b + be) + 0)
    with (al * ((1 + g) * e + g * b + 0) + be * ((1 + g) * c0 + g)) by ring.
  rewrite IH; ring.
Qed.

(** [run_err] of the bounds [al b_t + be]. *)
Lemma run_err_affine : forall g (bs : list R) al be,
  run_err g 0 (map (fun b => al * b + be) bs) = al * run_err g 0 bs + be * ((1 + g) ^ length bs - 1).
Proof.
  intros g bs al be; unfold run_err.
  pose proof (run_err_affine_from g bs al be 0 0) as H.
  replace (al * 0 + be * 0) with 0 in H by ring.
  rewrite H; ring.
Qed.

Lemma far_skipn_nth : forall {A} (l : list A) t d, (t < length l)%nat -> skipn t l = nth t l d :: skipn (S t) l.
Proof.
  intros A l; induction l as [|x l IH]; intros t d Ht; [cbn in Ht; lia |].
  destruct t as [|t]; [reflexivity |]; cbn [skipn nth]; apply IH; cbn in Ht; lia.
Qed.

(** The visible keys of the tiles: those before tile [t], tile [t]'s, those after. *)
Lemma far_split : forall {A} (vis : A -> bool) (tiles : list (list A)) t, (t < length tiles)%nat ->
  filter vis (concat tiles)
  = filter vis (concat (firstn t tiles)) ++ filter vis (nth t tiles []) ++ filter vis (concat (skipn (S t) tiles)).
Proof.
  intros A vis tiles t Ht.
  rewrite <- (firstn_skipn t tiles) at 1; rewrite (far_skipn_nth tiles t [] Ht).
  rewrite concat_app, filter_app; cbn [concat]; rewrite filter_app; reflexivity.
Qed.

(** ** The caller's per-tile bounds and the closed forms *)

(** The exact softmax of [scale q.k] over the row's visible keys, normalised by the sum
    over ALL of them: [fwd_prefix t = |sum_(j in tiles < t) P_j v_j|]'s argument and
    [fwd_tile_abs t = sum_(j in tile t) P_j |v_j|] (the kernel's tile order, masked keys
    and fully masked tiles included, contributing nothing). *)
Definition fwd_Z (scale : R) (q : list R) (vis : list R * R -> bool) (tiles : list (list (list R * R))) : R :=
  rsum (map (fun kv => exp (scale * dot_R q (fst kv))) (filter vis (concat tiles))).

Definition fwd_prefix (scale : R) (q : list R) (vis : list R * R -> bool) (tiles : list (list (list R * R))) (t : nat) : R :=
  rsum (map (fun kv => exp (scale * dot_R q (fst kv)) * snd kv) (filter vis (concat (firstn t tiles))))
  / fwd_Z scale q vis tiles.

Definition fwd_tile_abs (scale : R) (q : list R) (vis : list R * R -> bool) (tiles : list (list (list R * R))) (t : nat) : R :=
  rsum (map (fun kv => exp (scale * dot_R q (fst kv)) * Rabs (snd kv)) (filter vis (nth t tiles [])))
  / fwd_Z scale q vis tiles.

(** The caller's bounds: one per tile, [b_t >= |fwd_prefix t| + fwd_tile_abs t]. *)
Definition fwd_running_premise (scale : R) (q : list R) (vis : list R * R -> bool)
    (tiles : list (list (list R * R))) (bs : list R) : Prop :=
  length bs = length tiles /\
  forall t, (t < length tiles)%nat -> Rabs (fwd_prefix scale q vis tiles t) + fwd_tile_abs scale q vis tiles t <= nth t bs 0.

(** [afr_gb]: the running error's rate per tile ([gR] and the stored weights' factor on
    the tile's share of [g_rel]); [afr_gA]: the factor of [A] ([GR - 1]) a priori;
    [afr_Ep]: [|acc| <= afr_Ep] a priori; [afr_rR]: the absolute term [RR] a priori;
    [afr_rel], [afr_C], [afr_abs]: the end-to-end bound's coefficients of [W], of
    [run_err afr_gb 0 bs] and the absolute term. *)
Definition afr_gb (u ue us X g_rel : R) : R :=
  (1 + g_rel) * (1 + u) * (1 + ue) - 1 + g_rel * ((1 + us) * (1 + ue) * X - 1).

Definition afr_gA (ue us X CB : R) : R := CB * ((1 + us) * (1 + ue) * X * X - 1).

Definition afr_Ep (u ue ee ea us es V : R) (n N Tt : nat) (X CGA CRA g_rel g_abs : R) : R :=
  afa_HA ue us X CGA * (INR N * V) + afa_rA u ue ee ea us es V n N Tt X CGA CRA g_rel g_abs.

Definition afr_rR (u ue ee ea us es V : R) (n N Tt : nat) (X CGA CRA CB g_rel g_abs : R) : R :=
  INR Tt * CB * ((1 + g_rel) * ((1 + u) * ee * afr_Ep u ue ee ea us es V n N Tt X CGA CRA g_rel g_abs + ea
                                + ((1 + us) * ee + es) * (INR n * V)) + g_abs).

Definition afr_rel (u ue ee ea us : R) (n N Tt : nat) (X Y P1 CG CR CB : R) : R :=
  let bL := afe_bL u ue ee ea n N Tt X P1 CG CR in
  ((1 + u) * ((afr_gA ue us X CB + bL) * (1 + Y) + X * Y * (CB - 1)) / (1 - bL) + u * (1 + Y) + Y) * (1 + us) + us.

Definition afr_C (u ue ee ea us : R) (n N Tt : nat) (X Y P1 CG CR : R) : R :=
  let bL := afe_bL u ue ee ea n N Tt X P1 CG CR in
  (1 + us) * (1 + u) * X * (1 + Y) / (1 - bL).

Definition afr_abs (u ue ee ea us es V : R) (n N Tt : nat) (X P1 CG CR CGA CRA CB g_rel g_abs : R) : R :=
  let bL := afe_bL u ue ee ea n N Tt X P1 CG CR in
  ((1 + u) * afr_rR u ue ee ea us es V n N Tt X CGA CRA CB g_rel g_abs / (1 - bL) + ea) * (1 + us) + es.

(** [afr_gA] is nonnegative ([HgA0] of the proofs below and of PerPairScoreError.v). *)
Lemma afr_gA_nonneg : forall ue us X CB, 0 <= ue -> 0 <= us -> 1 <= X -> 1 <= CB -> 0 <= afr_gA ue us X CB.
Proof.
  intros ue us X CB Hue Hus HX HCB; unfold afr_gA.
  assert (1 <= (1 + us) * (1 + ue) * X * X)
    by (apply fa_one_le_mult; [apply fa_one_le_mult; [apply fa_one_le_mult |] |]; lra).
  apply Rmult_le_pos; lra.
Qed.

(** The factor [c1 = (1 + u) (gA + bL) / (1 - bL)] of [W1] is nonnegative ([Hc1]). *)
Lemma afr_c1_nonneg : forall u gA bL, 0 <= u -> 0 <= gA -> 0 <= bL < 1 -> 0 <= (1 + u) * (gA + bL) / (1 - bL).
Proof.
  intros u gA bL Hu HgA HbL; unfold Rdiv.
  apply Rmult_le_pos; [apply Rmult_le_pos; lra | left; apply Rinv_0_lt_compat; lra].
Qed.

Section Posteriori.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

(** [final_division_post] with a term [L Qf] in the accumulator's error: divided by
    [l ~ L], it is [Qf] (in units of the exact normaliser). *)
Lemma final_division_run : forall l L acc Nn Aa bL bA Qf Rb,
  1 <= L -> Rabs Nn <= Aa -> 0 <= bL < 1 -> 0 <= bA -> 0 <= Qf -> 0 <= Rb ->
  Rabs (l - L) <= bL * L -> Rabs (acc - Nn) <= bA * Aa + (L * Qf + Rb) ->
  Rabs (rnd (acc / l) - Nn / L) <= (1 + u) * ((bA + bL) * (Aa / L) + Qf + Rb) / (1 - bL) + u * (Aa / L) + ea.
Proof.
  intros l L acc Nn Aa bL bA Qf Rb HL HN HbL HbA HQ HR Hl Hacc.
  pose proof (ff_u_nonneg A_) as Hu.
  pose proof (ff_abs A_ (acc / l)) as Hr.
  assert (HA : 0 <= Aa) by (eapply Rle_trans; [apply Rabs_pos | exact HN]).
  apply Rabs_le_inv in Hl.
  assert (Hlp : 0 < l) by nra.
  assert (Hl0 : (1 - bL) * L <= l) by lra.
  set (W := Aa / L).
  assert (HW : 0 <= W) by (unfold W, Rdiv; apply Rmult_le_pos; [lra | left; apply Rinv_0_lt_compat; lra]).
  set (D := ((bA + bL) * W + Qf + Rb) / (1 - bL)).
  assert (Hq : Rabs (acc / l - Nn / L) <= D).
  { replace (acc / l - Nn / L) with (((acc - Nn) * L - Nn * (l - L)) / (l * L)) by (field; lra).
    unfold Rdiv at 1; rewrite Rabs_mult, (Rabs_right (/ (l * L)))
      by (apply Rle_ge, Rlt_le, Rinv_0_lt_compat; nra).
    assert (Hn : Rabs ((acc - Nn) * L - Nn * (l - L)) <= ((bA + bL) * Aa + (L * Qf + Rb)) * L).
    { eapply Rle_trans; [apply Rabs_triang |]; rewrite Rabs_mult, Rabs_Ropp, Rabs_mult.
      rewrite (Rabs_right L) by lra.
      assert (Rabs (acc - Nn) * L <= (bA * Aa + (L * Qf + Rb)) * L) by (apply Rmult_le_compat_r; lra).
      assert (Rabs (l - L) <= bL * L) by (apply Rabs_le; lra).
      assert (Rabs Nn * Rabs (l - L) <= Aa * (bL * L))
        by (apply Rmult_le_compat; auto using Rabs_pos).
      nra. }
    assert (Hd : ((bA + bL) * Aa + (L * Qf + Rb)) * L * / (l * L) <= D).
    { replace (((bA + bL) * Aa + (L * Qf + Rb)) * L * / (l * L)) with (((bA + bL) * Aa + (L * Qf + Rb)) / l)
        by (field; lra).
      unfold D; apply (Rmult_le_reg_r (l * (1 - bL))); [nra |].
      replace (((bA + bL) * Aa + (L * Qf + Rb)) / l * (l * (1 - bL)))
        with (((bA + bL) * Aa + (L * Qf + Rb)) * (1 - bL)) by (field; lra).
      replace (((bA + bL) * W + Qf + Rb) / (1 - bL) * (l * (1 - bL))) with (((bA + bL) * W + Qf + Rb) * l)
        by (field; lra).
      assert (E : (bA + bL) * Aa = (bA + bL) * W * L) by (unfold W; field; lra).
      rewrite E.
      assert (0 <= (bA + bL) * W) by (apply Rmult_le_pos; lra).
      assert ((bA + bL) * W * L * (1 - bL) <= (bA + bL) * W * l) by (rewrite Rmult_assoc; apply Rmult_le_compat_l; lra).
      assert (L * Qf * (1 - bL) <= Qf * l) by (replace (L * Qf * (1 - bL)) with (Qf * ((1 - bL) * L)) by ring;
                                                  apply Rmult_le_compat_l; lra).
      assert (Rb * (1 - bL) <= Rb * l) by (apply Rmult_le_compat_l; nra).
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
  fold W; replace ((1 + u) * ((bA + bL) * W + Qf + Rb) / (1 - bL)) with ((1 + u) * D) by (unfold D; field; lra).
  nra.
Qed.

End Posteriori.

(** The caller's bound [b_t] (exact scores, normaliser [fwd_Z]) gives the running fold's
    premise at the computed scores [sck] (shifted by the final running max [mt],
    normaliser [L]): [(1 + Y) b_t + Y W] in units of [L]. *)
Lemma fwd_tile_premise : forall (sck : list R * R -> R) (vis : list R * R -> bool) (tiles : list (list (list R * R)))
    (scale : R) (q : list R) (mt L delta Y Wx b : R) (t : nat),
  (forall kv, In kv (filter vis (concat tiles)) ->
     Rabs ((sck kv - mt) * ln 2 - (scale * dot_R q (fst kv) - mt * ln 2)) <= delta) ->
  0 <= delta -> exp (2 * delta) - 1 <= Y ->
  L = rsum (map (fun kv => exp ((sck kv - mt) * ln 2)) (filter vis (concat tiles))) -> 0 < L ->
  Wx = rsum (map (fun kv => exp (scale * dot_R q (fst kv)) * Rabs (snd kv)) (filter vis (concat tiles)))
       / fwd_Z scale q vis tiles ->
  0 < fwd_Z scale q vis tiles -> (t < length tiles)%nat ->
  Rabs (fwd_prefix scale q vis tiles t) + fwd_tile_abs scale q vis tiles t <= b ->
  Rabs (rsum (map (fun kv => exp ((sck kv - mt) * ln 2) * snd kv) (filter vis (concat (firstn t tiles)))))
  + rsum (map (fun kv => exp ((sck kv - mt) * ln 2) * Rabs (snd kv)) (filter vis (nth t tiles [])))
  <= L * ((1 + Y) * b + Y * Wx).
Proof.
  intros sck vis tiles scale q mt L delta Y Wx b t Hd Hdelta HY EL HL EW HZ Ht Hb.
  pose proof (far_split vis tiles t Ht) as Hs.
  unfold fwd_prefix, fwd_tile_abs in Hb; unfold fwd_Z in Hb, HZ, EW.
  rewrite Hs in Hb, HZ, EW, EL, Hd.
  set (pa := filter vis (concat (firstn t tiles))) in *.
  set (pb := filter vis (nth t tiles [])) in *.
  set (pc := filter vis (concat (skipn (S t) tiles))) in *.
  set (S0 := fun kv : list R * R => scale * dot_R q (fst kv) - mt * ln 2).
  set (S1 := fun kv : list R * R => (sck kv - mt) * ln 2).
  assert (Hd' : forall kv, In kv (pa ++ pb ++ pc) -> Rabs (S1 kv - S0 kv) <= delta) by exact Hd.
  destruct (softmax_part_post [] pa (pb ++ pc) S0 S1 snd delta Hdelta Hd') as [P1 _].
  destruct (softmax_part_post pa pb pc S0 S1 snd delta Hdelta Hd') as [_ P2].
  cbn [app] in P1.
  pose proof (part_shift pa (pa ++ pb ++ pc) (fun kv => scale * dot_R q (fst kv)) snd (mt * ln 2)) as Sh1.
  pose proof (part_shift pa (pa ++ pb ++ pc) (fun kv => scale * dot_R q (fst kv)) (fun kv => Rabs (snd kv)) (mt * ln 2))
    as Sh2.
  pose proof (part_shift pb (pa ++ pb ++ pc) (fun kv => scale * dot_R q (fst kv)) (fun kv => Rabs (snd kv)) (mt * ln 2))
    as Sh3.
  pose proof (part_shift (pa ++ pb ++ pc) (pa ++ pb ++ pc) (fun kv => scale * dot_R q (fst kv))
                (fun kv => Rabs (snd kv)) (mt * ln 2)) as Sh4.
  cbv beta in Sh1, Sh2, Sh3, Sh4.
  change (fun x : list R * R => exp (scale * dot_R q (fst x) - mt * ln 2) * snd x)
    with (fun x => exp (S0 x) * snd x) in Sh1.
  change (fun x : list R * R => exp (scale * dot_R q (fst x) - mt * ln 2) * Rabs (snd x))
    with (fun x => exp (S0 x) * Rabs (snd x)) in Sh2, Sh3, Sh4.
  change (fun x : list R * R => exp (scale * dot_R q (fst x) - mt * ln 2)) with (fun x => exp (S0 x)) in Sh1, Sh2, Sh3, Sh4.
  change (fun kv : list R * R => exp ((sck kv - mt) * ln 2)) with (fun kv => exp (S1 kv)) in EL.
  change (fun kv : list R * R => exp ((sck kv - mt) * ln 2) * snd kv) with (fun kv => exp (S1 kv) * snd kv).
  change (fun kv : list R * R => exp ((sck kv - mt) * ln 2) * Rabs (snd kv)) with (fun kv => exp (S1 kv) * Rabs (snd kv)).
  rewrite <- EL in P1, P2.
  rewrite Sh1, Sh2 in P1; rewrite Sh3 in P2.
  set (Z := rsum (map (fun x => exp (scale * dot_R q (fst x))) (pa ++ pb ++ pc))) in *.
  set (N1 := rsum (map (fun kv => exp (S1 kv) * snd kv) pa)) in *.
  set (T1 := rsum (map (fun kv => exp (S1 kv) * Rabs (snd kv)) pb)) in *.
  (* the prefix's absolute sum is at most [W] *)
  assert (Hpa : rsum (map (fun x => exp (scale * dot_R q (fst x)) * Rabs (snd x)) pa) / Z <= Wx).
  { rewrite EW; unfold Rdiv; apply Rmult_le_compat_r; [left; apply Rinv_0_lt_compat; exact HZ |].
    rewrite !map_app, !rsum_app.
    assert (0 <= rsum (map (fun x => exp (scale * dot_R q (fst x)) * Rabs (snd x)) pb))
      by (apply far_rsum_nonneg; intros; apply Rmult_le_pos; [left; apply exp_pos | apply Rabs_pos]).
    assert (0 <= rsum (map (fun x => exp (scale * dot_R q (fst x)) * Rabs (snd x)) pc))
      by (apply far_rsum_nonneg; intros; apply Rmult_le_pos; [left; apply exp_pos | apply Rabs_pos]).
    lra. }
  assert (He1 : 1 <= exp (2 * delta)) by (rewrite <- exp_0; apply sp_exp_le; lra).
  assert (HY0 : 0 <= Y) by lra.
  assert (HA0 : 0 <= rsum (map (fun x => exp (scale * dot_R q (fst x)) * Rabs (snd x)) pa) / Z).
  { unfold Rdiv; apply Rmult_le_pos; [| left; apply Rinv_0_lt_compat; exact HZ].
    apply far_rsum_nonneg; intros; apply Rmult_le_pos; [left; apply exp_pos | apply Rabs_pos]. }
  assert (HB0 : 0 <= rsum (map (fun x => exp (scale * dot_R q (fst x)) * Rabs (snd x)) pb) / Z).
  { unfold Rdiv; apply Rmult_le_pos; [| left; apply Rinv_0_lt_compat; exact HZ].
    apply far_rsum_nonneg; intros; apply Rmult_le_pos; [left; apply exp_pos | apply Rabs_pos]. }
  set (Pa := rsum (map (fun x => exp (scale * dot_R q (fst x)) * snd x) pa) / Z) in *.
  set (Aa := rsum (map (fun x => exp (scale * dot_R q (fst x)) * Rabs (snd x)) pa) / Z) in *.
  set (Tb := rsum (map (fun x => exp (scale * dot_R q (fst x)) * Rabs (snd x)) pb) / Z) in *.
  assert (H1 : Rabs (N1 / L) <= Rabs Pa + Y * Wx).
  { replace (N1 / L) with ((N1 / L - Pa) + Pa) by ring; eapply Rle_trans; [apply Rabs_triang |].
    assert ((exp (2 * delta) - 1) * Aa <= Y * Wx) by (apply Rmult_le_compat; lra).
    lra. }
  assert (H2 : T1 / L <= (1 + Y) * Tb) by (assert (exp (2 * delta) * Tb <= (1 + Y) * Tb) by (apply Rmult_le_compat_r; lra); lra).
  assert (EN : Rabs N1 = L * Rabs (N1 / L)).
  { unfold Rdiv; rewrite Rabs_mult, (Rabs_right (/ L)) by (left; apply Rinv_0_lt_compat; lra); field; lra. }
  assert (ET : T1 = L * (T1 / L)) by (field; lra).
  rewrite EN, ET.
  assert (Rabs (N1 / L) + T1 / L <= (1 + Y) * b + Y * Wx).
  { assert (0 <= Y * Rabs Pa) by (apply Rmult_le_pos; auto using Rabs_pos).
    assert ((1 + Y) * (Rabs Pa + Tb) <= (1 + Y) * b) by (apply Rmult_le_compat_l; lra).
    lra. }
  rewrite <- Rmult_plus_distr_l; apply Rmult_le_compat_l; lra.
Qed.

Lemma far_nth_map : forall (f : R -> R) (l : list R) t, (t < length l)%nat -> nth t (map f l) 0 = f (nth t l 0).
Proof. intros f l t Ht; rewrite (nth_indep _ 0 (f 0)) by (rewrite map_length; lia); apply map_nth. Qed.

Section Main.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

(** The accumulator's constants of the running bound ([acc_kernel_running]'s [GR], [RR]) in
    closed form: [GR - 1 <= afr_gA], [RR <= afr_rR] ([attention_forward_acc_running] and
    PerPairScoreError.v's forward output proof). *)
Lemma afr_acc_constants : forall K g_rel g_abs s V n N Tt t mt X CGA CRA CB,
  0 <= K -> 0 <= g_rel -> 0 <= g_abs -> 0 < V -> (t <= Tt)%nat ->
  Rpower 2 (u * K) <= X -> 0 <= mt - s -> Rpower 2 (u * (mt - s)) <= X ->
  cgA M g_rel ^ Tt <= CGA -> crA M g_rel ^ Tt <= CRA -> (1 + gR M g_rel) ^ t <= CB ->
  GR M K g_rel s t mt - 1 <= afr_gA ue us X CB /\ 0 <= afr_gA ue us X CB
  /\ RR M K g_rel g_abs V n N Tt t <= afr_rR u ue ee ea us es V n N Tt X CGA CRA CB g_rel g_abs
  /\ 0 <= afr_rR u ue ee ea us es V n N Tt X CGA CRA CB g_rel g_abs.
Proof.
  intros K g_rel g_abs s V n N Tt t mt X CGA CRA CB HK Hg Hga HV Ht HX Hs HpX HCGA HCRA HgCB.
  pose proof (ff_u_nonneg A_) as Hu0; pose proof (ff_eta_nonneg A_) as Hea.
  pose proof (ff_u_nonneg S_) as Hus; pose proof (ff_eta_nonneg S_) as Hes.
  pose proof (mp_eta_e_nonneg M) as Hee; pose proof (mp_ue_nonneg M) as Hue.
  assert (HX1 : 1 <= X) by (assert (1 <= Rpower 2 (u * K)) by (apply ose_rpow_ge_1, Rmult_le_pos; lra); lra).
  assert (HGA : GR M K g_rel s t mt - 1 <= afr_gA ue us X CB).
  { unfold GR, afr_gA, H_pv, tile_E.
    set (Zm := (1 + us) * ((1 + ue) * Rpower 2 (u * K)) * Rpower 2 (u * (mt - s))).
    assert (HZ1 : 1 <= Zm).
    { unfold Zm; pose proof (tile_E_ge_1 M K HK); unfold tile_E in H.
      assert (1 <= Rpower 2 (u * (mt - s))) by (apply ose_rpow_ge_1, Rmult_le_pos; lra).
      apply fa_one_le_mult; [apply fa_one_le_mult |]; lra. }
    assert (HZb : Zm <= (1 + us) * (1 + ue) * X * X).
    { unfold Zm; pose proof (Rpower_pos (u * K)); pose proof (Rpower_pos (u * (mt - s))).
      assert ((1 + us) * ((1 + ue) * Rpower 2 (u * K)) <= (1 + us) * (1 + ue) * X)
        by (rewrite <- Rmult_assoc; apply Rmult_le_compat_l; [apply Rmult_le_pos; lra | exact HX]).
      apply Rmult_le_compat; [apply Rmult_le_pos; [lra | apply Rmult_le_pos; lra] | lra | lra | lra]. }
    assert (0 <= (1 + gR M g_rel) ^ t) by (apply pow_le; pose proof (gR_nonneg M g_rel Hg); lra).
    replace (1 + (1 + gR M g_rel) ^ t * (Zm - 1) - 1) with ((1 + gR M g_rel) ^ t * (Zm - 1))
      by ring.
    apply Rmult_le_compat; lra. }
  assert (HRA : RR M K g_rel g_abs V n N Tt t <= afr_rR u ue ee ea us es V n N Tt X CGA CRA CB g_rel g_abs).
  { unfold RR, afr_rR.
    assert (HEp : Ep M K g_rel g_abs V n N Tt <= afr_Ep u ue ee ea us es V n N Tt X CGA CRA g_rel g_abs).
    { unfold Ep, afr_Ep.
      pose proof (GkA_apriori M K g_rel 0 Tt K Tt X CGA HK Hg (le_n Tt) HK ltac:(lra) HX HCGA) as H1.
      unfold GkA in H1; rewrite Rminus_0_r in H1.
      pose proof (RkA_apriori M K g_rel g_abs V n N Tt Tt X CGA CRA HK Hg Hga (Rlt_le _ _ HV) (le_n Tt) HX HCGA HCRA).
      assert (0 <= INR N * V) by (apply Rmult_le_pos; [apply pos_INR | lra]).
      assert (H_pv M K * cgA M g_rel ^ Tt * Rpower 2 (u * K) * (INR N * V) <= afa_HA ue us X CGA * (INR N * V))
        by (apply Rmult_le_compat_r; lra).
      lra. }
    assert (HdRR : dRR M K g_rel g_abs V n N Tt
                   <= (1 + g_rel) * ((1 + u) * ee * afr_Ep u ue ee ea us es V n N Tt X CGA CRA g_rel g_abs + ea
                                     + ((1 + us) * ee + es) * (INR n * V)) + g_abs).
    { unfold dRR.
      assert ((1 + u) * ee * Ep M K g_rel g_abs V n N Tt
              <= (1 + u) * ee * afr_Ep u ue ee ea us es V n N Tt X CGA CRA g_rel g_abs)
        by (apply Rmult_le_compat_l; [apply Rmult_le_pos; lra | exact HEp]).
      assert (forall a b, a <= b -> (1 + g_rel) * a <= (1 + g_rel) * b) by (intros; apply Rmult_le_compat_l; lra).
      pose proof (H0 ((1 + u) * ee * Ep M K g_rel g_abs V n N Tt + ea + ((1 + us) * ee + es) * (INR n * V))
                    ((1 + u) * ee * afr_Ep u ue ee ea us es V n N Tt X CGA CRA g_rel g_abs + ea
                     + ((1 + us) * ee + es) * (INR n * V)) ltac:(lra)).
      lra. }
    pose proof (dRR_nonneg M K g_rel g_abs V n N Tt HK Hg Hga (Rlt_le _ _ HV)) as HdR0.
    assert (INR t <= INR Tt) by (apply le_INR; exact Ht).
    assert (0 <= (1 + gR M g_rel) ^ t) by (apply pow_le; pose proof (gR_nonneg M g_rel Hg); lra).
    apply Rmult_le_compat; [apply Rmult_le_pos; [apply pos_INR | lra] | exact HdR0 | | exact HdRR].
    apply Rmult_le_compat; [apply pos_INR | lra | lra | lra]. }
  assert (HCB1 : 1 <= CB)
    by (eapply Rle_trans; [| exact HgCB]; apply pow_R1_Rle; pose proof (gR_nonneg M g_rel Hg); lra).
  split; [exact HGA | split; [apply afr_gA_nonneg; lra |]].
  split; [exact HRA |].
  pose proof (RR_nonneg M K g_rel g_abs V n N Tt t HK Hg Hga (Rlt_le _ _ HV)); lra.
Qed.

(** The kernel's loop with the accumulating P.V ([kernel_run_acc] from [kernel_start],
    any tiles of [n] keys, any mask [vis]), one output coordinate of one query row,
    against the softmax over the visible keys, with the RUNNING bound: the scores' dot
    [dotf] of any [dot_model] (error [d_rel * P + d_abs]), the P.V dot [accf] of any
    [acc_dot_model] on [n] keys ([g_rel], [g_abs]), and the caller's per-tile bounds
    [bs] ([fwd_running_premise]):
      |out - sum_j P_j v_j| <= afr_rel W + afr_C run_err afr_gb 0 bs + afr_abs. *)
Theorem attention_forward_acc_running : forall (dotf : list R -> list R -> R) (d_rel d_abs : R)
    (accf : R -> list R -> list R -> R) (n : nat) (g_rel g_abs : R)
    (q : list R) (c scale uc P V X Y P1 CG CR CGA CRA CB : R) (E N Tt : nat)
    (vis : list R * R -> bool) (tiles : list (list (list R * R))) (bs : list R),
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
  Rabs (ff_rnd S_ (rnd (nth 0 (ks_acc st) 0 / ks_l st)) - exact_softmax scale q (filter vis (concat tiles)))
  <= afr_rel u ue ee ea us n N Tt X Y P1 CG CR CB
       * exact_softmax scale q (map abs_value (filter vis (concat tiles)))
     + afr_C u ue ee ea us n N Tt X Y P1 CG CR * run_err (afr_gb u ue us X g_rel) 0 bs
     + afr_abs u ue ee ea us es V n N Tt X P1 CG CR CGA CRA CB g_rel g_abs.
Proof.
  intros dotf d_rel d_abs accf n g_rel g_abs q c scale uc P V X Y P1 CG CR CGA CRA CB E N Tt vis tiles bs sck st
    Hexp0 Hvis Hdm Hadm Hpre HCGA HCRA HCB Hq Hkeys Hn HN HT [Hbl Hbs].
  pose proof Hpre as [HV Hs Huc Hc HB HX HY HP HG HC HbL].
  pose proof (ff_u_nonneg A_) as Hu0; pose proof (ff_eta_nonneg A_) as Hea.
  pose proof (ff_u_nonneg S_) as Hus; pose proof (ff_eta_nonneg S_) as Hes.
  pose proof (mp_eta_e_nonneg M) as Hee; pose proof (mp_ue_nonneg M) as Hue.
  pose proof (adm_rel_nonneg _ _ _ _ Hadm) as Hg; pose proof (adm_abs_nonneg _ _ _ _ Hadm) as Hga.
  assert (HBt : Forall (fun tl => (length tl <= n)%nat) tiles)
    by (apply Forall_forall; intros tl Htl; rewrite (proj1 (Forall_forall _ _) Hn tl Htl); lia).
  destruct (kernel_run_visible_tiles_with M dotf c q vis n tiles Hexp0 Hvis HBt) as [k0 [r [rest [Ecat [HBf [Hlen Est]]]]]].
  set (ft := (k0 :: r) :: rest) in *.
  set (kt := map (map (kv_pair_with M dotf c q)) ft) in *.
  set (m0 := score2_with A_ dotf c q (fst k0)) in *.
  destruct (kernel_run_acc_m_l M (list R * R) sck vis (fun kv _ => snd kv) accf tiles (kernel_start 1) (kernel_start 1)
              eq_refl eq_refl) as [Em El].
  fold st in Em, El; unfold sck in Em, El; rewrite Est in Em, El; cbn [ks_m ks_l] in Em, El.
  assert (Hkeys' : forall kv, In kv (concat ft) -> length (fst kv) = E /\ dot_abs q (fst kv) <= P /\ Rabs (snd kv) <= V)
    by (intros kv Hkv; rewrite Ecat in Hkv; apply filter_In in Hkv; destruct Hkv; auto).
  assert (HN' : (length (concat ft) <= N)%nat) by (rewrite Ecat; exact HN).
  assert (HT' : (length ft <= Tt)%nat) by lia.
  destruct (kernel_tiles_ok_with M dotf d_rel d_abs q c scale uc P V E n N Tt k0 r rest Hdm Hq Hkeys' Hs Huc Hc HBf HN' HT')
    as [Hdelta [HK [Hm0t [HmK [Ecat' [Hsc [Hex [Hks [HBk [HNk HTk]]]]]]]]]].
  destruct (kernel_scores_ok M dotf d_rel d_abs q c scale uc P E k0 r rest Hdm Hq
              (fun kv Hkv => conj (proj1 (Hkeys' kv Hkv)) (proj1 (proj2 (Hkeys' kv Hkv)))) Hs Huc Hc)
    as [Hsc2 [_ [Hsmax [_ [_ [_ [_ [Hmt _]]]]]]]].
  fold ft kt m0 in Hdelta, HK, Hm0t, HmK, Ecat', Hsc, Hex, Hks, HBk, HNk, HTk, Hsc2, Hmt.
  set (delta := score_delta_de A_ scale uc P (d_rel * P + d_abs)) in *.
  set (smax := score_max_de A_ scale uc P (d_rel * P + d_abs)) in *.
  set (K := 2 * smax) in *.
  set (mt := acc_m_run m0 kt) in *.
  (* the accumulator *)
  assert (Hok : forall kv, In kv (concat tiles) -> vis kv = true ->
                  fmt (sck kv) /\ - smax <= sck kv <= - smax + K /\ Rabs ((fun kv _ => snd kv) kv 0%nat) <= V).
  { intros kv Hkv Ev.
    assert (Hf : In kv (concat ft)) by (rewrite Ecat; apply filter_In; auto).
    destruct (Hsc2 kv Hf) as [_ Hb]; apply Rabs_le_inv in Hb.
    split; [apply ff_rnd_fmt | split; [unfold K, sck; lra | apply (Hkeys' kv Hf)]]. }
  destruct (acc_kernel_inv M (list R * R) sck vis (fun kv _ => snd kv) accf n g_rel g_abs K V (- smax) N Tt 0 tiles
              (kernel_start 1) Hadm HK (Rlt_le _ _ HV) Hn HT HN Hok eq_refl ltac:(cbn; lia) mt Em) as [_ [Hmb _]].
  assert (Ekp : map (fun k : list R * R => (sck k, snd k)) (filter vis (concat tiles)) = concat kt)
    by (rewrite Ecat', <- Ecat; reflexivity).
  (* the denominator *)
  assert (Fm0 : fmt m0) by apply ff_rnd_fmt.
  assert (HBt' : Forall (fun tl => (length tl <= n)%nat) (map (map fst) kt)).
  { apply Forall_forall; intros tl Htl; apply in_map_iff in Htl; destruct Htl as [tl' [<- Htl']].
    rewrite map_length; exact (proj1 (Forall_forall _ _) HBk tl' Htl'). }
  assert (Hmr : m_run m0 (map (map fst) kt) = mt) by (unfold m_run, mt, acc_m_run; apply mrun_map).
  assert (Hks' : forall s, In s (concat (map (map fst) kt)) -> fmt s /\ m_run m0 (map (map fst) kt) - s <= K).
  { intros s0 Hs0; rewrite <- concat_map in Hs0; apply in_map_iff in Hs0; destruct Hs0 as [p [<- Hp]].
    rewrite Hmr; destruct (Hks p Hp) as [_ [F1 F2]]; split; assumption. }
  assert (HN'' : (length (concat (map (map fst) kt)) <= N)%nat) by (rewrite <- concat_map, map_length; exact HNk).
  assert (HT'' : (length (map (map fst) kt) <= Tt)%nat) by (rewrite map_length; exact HTk).
  pose proof (l_fold_inv M K m0 n N Tt (map (map fst) kt) HK Fm0 HB Hks' HBt' HN'' HT'' ltac:(rewrite Hmr; exact HmK)) as Cl.
  rewrite Hmr, map_length, <- concat_map in Cl.
  set (L := exact_l mt (map fst (concat kt))) in *.
  assert (HL1 : 1 <= L).
  { apply exact_l_ge_1; destruct (mrun_attained fst kt m0) as [E0 | Hq0]; [| exact Hq0].
    destruct Hex as [p [Hp Ep]]; exists p; split; [exact Hp | unfold mt, acc_m_run; rewrite E0; exact Ep]. }
  destruct (out_bL_apriori M K m0 n N Tt (length kt) mt X P1 CG CR HK ltac:(lia) Hm0t HmK HX HP HG HC) as [bL0 bL1].
  set (bL := afe_bL u ue ee ea n N Tt X P1 CG CR) in *.
  assert (Hlb : Rabs (l_run M m0 0 (map (map fst) kt) - L) <= bL * L).
  { unfold inv, out_bL in *; eapply Rle_trans; [exact Cl |].
    set (Gl := Gk M (H_l M K n) m0 (length kt) mt) in *.
    set (Rl := Rk M K (H_l M K n) (Ry_l M n) (INR N) Tt (length kt)) in *.
    assert (HRl : 0 <= Rl) by (unfold Rl; apply Rk_nonneg;
      [destruct (H_l_bounds M K n X P1 HK HX HP); lra
      | unfold Ry_l; apply Rmult_le_pos; [apply pow_le; lra | apply Rmult_le_pos; [apply pos_INR | exact Hee]]
      | apply pos_INR]).
    assert (Rl <= Rl * L) by (apply fa_le_mult_r; lra).
    assert ((Gl - 1 + Rl) * L <= bL * L) by (apply Rmult_le_compat_r; lra).
    lra. }
  (* the caller's bounds, in the kernel's units *)
  assert (HX1 : 1 <= X) by (assert (1 <= Rpower 2 (u * K)) by (apply ose_rpow_ge_1, Rmult_le_pos; lra); lra).
  set (gb := afr_gb u ue us X g_rel) in *.
  assert (Hgb : gR M g_rel + g_rel * (H_pv M K - 1) <= gb).
  { unfold gb, afr_gb, gR, H_pv, tile_E.
    assert ((1 + us) * ((1 + ue) * Rpower 2 (u * K)) <= (1 + us) * (1 + ue) * X)
      by (rewrite <- Rmult_assoc; apply Rmult_le_compat_l; [apply Rmult_le_pos; lra | exact HX]).
    assert (g_rel * ((1 + us) * ((1 + ue) * Rpower 2 (u * K)) - 1) <= g_rel * ((1 + us) * (1 + ue) * X - 1))
      by (apply Rmult_le_compat_l; lra).
    lra. }
  assert (Hgb0 : 0 <= gb) by (pose proof (gR_nonneg M g_rel Hg); pose proof (H_pv_ge_1 M K HK);
                               assert (0 <= g_rel * (H_pv M K - 1)) by (apply Rmult_le_pos; lra); lra).
  set (Z0 := fwd_Z scale q vis tiles).
  assert (HZ0 : 0 < Z0).
  { destruct Hvis as [kv0 [Hkv0 Ev0]].
    apply (Rlt_le_trans _ (exp (scale * dot_R q (fst kv0)))); [apply exp_pos |].
    unfold Z0, fwd_Z; apply ost_rsum_ge_in.
    - intros y Hy; apply in_map_iff in Hy; destruct Hy as [x [<- _]]; left; apply exp_pos.
    - apply in_map_iff; exists kv0; split; [reflexivity | apply filter_In; auto]. }
  set (Wx := exact_softmax scale q (map abs_value (filter vis (concat tiles)))).
  assert (EWx : Wx = rsum (map (fun kv => exp (scale * dot_R q (fst kv)) * Rabs (snd kv)) (filter vis (concat tiles)))
                     / fwd_Z scale q vis tiles)
    by (unfold Wx, exact_softmax, fwd_Z; rewrite !map_map; reflexivity).
  assert (EL : L = rsum (map (fun kv => exp ((sck kv - mt) * ln 2)) (filter vis (concat tiles))))
    by (unfold L, exact_l; rewrite <- Ekp, !map_map; reflexivity).
  assert (HL0 : 0 < L) by lra.
  assert (Hd01 : forall kv, In kv (filter vis (concat tiles)) ->
                   Rabs ((sck kv - mt) * ln 2 - (scale * dot_R q (fst kv) - mt * ln 2)) <= delta).
  { intros kv Hkv; rewrite <- Ecat in Hkv; unfold sck.
    replace ((score2_with A_ dotf c q (fst kv) - mt) * ln 2 - (scale * dot_R q (fst kv) - mt * ln 2))
      with (score2_with A_ dotf c q (fst kv) * ln 2 - scale * dot_R q (fst kv)) by ring.
    exact (Hsc kv Hkv). }
  set (bs' := map (fun b => (1 + Y) * b + Y * Wx) bs).
  assert (Hpt : forall t, (t < length tiles)%nat ->
     Rabs (exact_pv mt (kpairs (list R * R) sck vis (fun kv _ => snd kv) 0 (concat (firstn t tiles))))
     + exact_pv_abs mt (kpairs (list R * R) sck vis (fun kv _ => snd kv) 0 (nth t tiles [])) <= L * nth t bs' 0).
  { intros t Ht.
    unfold bs'; rewrite far_nth_map by lia.
    unfold exact_pv, exact_pv_abs, kpairs; rewrite !map_map; cbn [fst snd].
    exact (fwd_tile_premise sck vis tiles scale q mt L delta Y Wx (nth t bs 0) t Hd01 Hdelta HY EL HL0 EWx HZ0 Ht
             (Hbs t Ht)). }
  pose proof (acc_kernel_running M (list R * R) sck vis (fun kv _ => snd kv) accf n g_rel g_abs K V (- smax) N Tt 0
                mt L gb tiles bs' (kernel_start 1) Hadm HK (Rlt_le _ _ HV) HL0 Hgb Hn HT HN Hok
                ltac:(unfold bs'; rewrite map_length; exact Hbl) Hpt eq_refl ltac:(cbn; lia) mt Em) as Ca.
  fold st in Ca; unfold kpairs in Ca; cbv beta in Ca; rewrite Ekp in Ca.
  (* the constants *)
  assert (Hb0 : Forall (fun b => 0 <= b) bs).
  { apply Forall_forall; intros b Hb.
    destruct (In_nth bs b 0 Hb) as [t [Ht <-]].
    rewrite Hbl in Ht; pose proof (Hbs t Ht) as H.
    assert (0 <= fwd_tile_abs scale q vis tiles t).
    { unfold fwd_tile_abs; fold Z0; unfold Rdiv; apply Rmult_le_pos; [| left; apply Rinv_0_lt_compat; exact HZ0].
      apply far_rsum_nonneg; intros; apply Rmult_le_pos; [left; apply exp_pos | apply Rabs_pos]. }
    pose proof (Rabs_pos (fwd_prefix scale q vis tiles t)); lra. }
  set (R0 := run_err gb 0 bs).
  assert (HR0 : 0 <= R0) by (apply run_err_nonneg; [exact Hgb0 | lra | exact Hb0]).
  assert (HW0 : 0 <= Wx).
  { rewrite EWx; unfold Rdiv; apply Rmult_le_pos; [| left; apply Rinv_0_lt_compat; exact HZ0].
    apply far_rsum_nonneg; intros; apply Rmult_le_pos; [left; apply exp_pos | apply Rabs_pos]. }
  assert (HY0 : 0 <= Y) by (assert (1 <= exp (2 * delta)) by (rewrite <- exp_0; apply sp_exp_le; lra); lra).
  assert (HCB1 : (1 + gb) ^ length bs <= CB).
  { eapply Rle_trans; [| exact HCB]; apply Rle_pow; [lra | lia]. }
  assert (HgCB : (1 + gR M g_rel) ^ length tiles <= CB).
  { eapply Rle_trans; [| exact HCB].
    assert (gR M g_rel <= gb) by (pose proof (H_pv_ge_1 M K HK); assert (0 <= g_rel * (H_pv M K - 1)) by (apply Rmult_le_pos; lra); lra).
    eapply Rle_trans; [apply pow_incr; split; [pose proof (gR_nonneg M g_rel Hg); lra | apply Rplus_le_compat_l; exact H] |].
    apply Rle_pow; [lra | lia]. }
  assert (Hrho : run_err gb 0 bs' <= (1 + Y) * R0 + Y * Wx * (CB - 1)).
  { unfold bs'; rewrite run_err_affine; fold R0.
    assert (Y * Wx * ((1 + gb) ^ length bs - 1) <= Y * Wx * (CB - 1)) by (apply Rmult_le_compat_l; [apply Rmult_le_pos | ]; lra).
    lra. }
  assert (Hrho0 : 0 <= run_err gb 0 bs').
  { unfold bs'; rewrite run_err_affine; fold R0.
    assert (1 <= (1 + gb) ^ length bs) by (apply pow_R1_Rle; lra).
    assert (0 <= Y * Wx * ((1 + gb) ^ length bs - 1)) by (apply Rmult_le_pos; [apply Rmult_le_pos |]; lra).
    assert (0 <= (1 + Y) * R0) by (apply Rmult_le_pos; lra).
    lra. }
  assert (HmtK : mt - - smax <= K) by (apply Rabs_le_inv in Hmt; unfold K; lra).
  assert (HpX : Rpower 2 (u * (mt - - smax)) <= X)
    by (assert (Rpower 2 (u * (mt - - smax)) <= Rpower 2 (u * K)) by (apply ost_rpow_le, Rmult_le_compat_l; lra); lra).
  set (Qf := X * ((1 + Y) * R0 + Y * Wx * (CB - 1))).
  assert (HQf : 0 <= Qf) by (unfold Qf; apply Rmult_le_pos; lra).
  assert (HQ : L * Rpower 2 (mt - mt) * Rpower 2 (u * (mt - - smax)) * run_err gb 0 bs' <= L * Qf).
  { rewrite Rminus_diag_eq, Rpower_O, Rmult_1_r by (reflexivity || lra).
    rewrite Rmult_assoc; apply Rmult_le_compat_l; [lra |]; unfold Qf.
    apply Rmult_le_compat; [left; apply Rpower_pos | exact Hrho0 | exact HpX | exact Hrho]. }
  destruct (afr_acc_constants K g_rel g_abs (- smax) V n N Tt (length tiles) mt X CGA CRA CB HK Hg Hga HV ltac:(lia) HX
              ltac:(pose proof (Rabs_le_inv _ _ Hmt); lra) HpX HCGA HCRA HgCB) as [HGA [HgA0 [HRA HrA0]]].
  set (gA := afr_gA ue us X CB) in *.
  set (rA := afr_rR u ue ee ea us es V n N Tt X CGA CRA CB g_rel g_abs) in *.
  pose proof (exact_pv_abs_ge mt (concat kt)) as HNA.
  assert (HA0 : 0 <= exact_pv_abs mt (concat kt)) by (eapply Rle_trans; [apply Rabs_pos | exact HNA]).
  assert (Hab : Rabs (nth 0 (ks_acc st) 0 - exact_pv mt (concat kt)) <= gA * exact_pv_abs mt (concat kt) + (L * Qf + rA)).
  { unfold inv in Ca; eapply Rle_trans; [exact Ca |].
    assert ((GR M K g_rel (- smax) (length tiles) mt - 1) * exact_pv_abs mt (concat kt)
            <= gA * exact_pv_abs mt (concat kt)) by (apply Rmult_le_compat_r; lra).
    lra. }
  assert (Hon := final_division_run M (l_run M m0 0 (map (map fst) kt)) L (nth 0 (ks_acc st) 0)
                   (exact_pv mt (concat kt)) (exact_pv_abs mt (concat kt)) bL gA Qf rA HL1 HNA
                   ltac:(lra) HgA0 HQf HrA0 Hlb Hab).
  rewrite El.
  (* the perturbation of the scores, a-posteriori *)
  set (S0 := fun kv : list R * R => scale * dot_R q (fst kv) - mt * ln 2).
  set (S1 := fun kv : list R * R => (score2_with A_ dotf c q (fst kv) - mt) * ln 2).
  assert (EN : exact_pv mt (concat kt) / L = sm_avg (concat ft) S1 snd)
    by (unfold L, exact_pv, exact_l, sm_avg; rewrite Ecat', !map_map; reflexivity).
  assert (EA : exact_pv_abs mt (concat kt) / L = sm_avg (concat ft) S1 (fun kv => Rabs (snd kv)))
    by (unfold L, exact_pv_abs, exact_l, sm_avg; rewrite Ecat', !map_map; reflexivity).
  assert (EW : Wx = sm_avg (concat ft) S0 (fun kv => Rabs (snd kv))).
  { unfold Wx; rewrite <- Ecat; unfold exact_softmax, sm_avg, S0; rewrite !map_map; cbn [abs_value fst snd]; symmetry.
    apply (softmax_average_shift (concat ft) (fun kv => scale * dot_R q (fst kv)) (fun kv => Rabs (snd kv)) (mt * ln 2)). }
  rewrite <- Ecat.
  assert (EZ : exact_softmax scale q (concat ft) = sm_avg (concat ft) S0 snd)
    by (unfold exact_softmax, sm_avg, S0; symmetry;
        apply (softmax_average_shift (concat ft) (fun kv => scale * dot_R q (fst kv)) snd (mt * ln 2))).
  rewrite EN, EA in Hon; rewrite EZ.
  destruct (softmax_perturbation_post (concat ft) S0 S1 snd delta Hdelta) as [Hp1 Hp2].
  { intros kv Hkv; unfold S0, S1.
    replace ((score2_with A_ dotf c q (fst kv) - mt) * ln 2 - (scale * dot_R q (fst kv) - mt * ln 2))
      with (score2_with A_ dotf c q (fst kv) * ln 2 - scale * dot_R q (fst kv)) by ring.
    exact (Hsc kv Hkv). }
  destruct (sm_avg_abs (concat ft) S0 snd) as [HZW _].
  destruct (sm_avg_abs (concat ft) S1 snd) as [_ HW1].
  rewrite <- EW in Hp1, Hp2, HZW.
  set (W1 := sm_avg (concat ft) S1 (fun kv => Rabs (snd kv))) in *.
  set (Z := sm_avg (concat ft) S0 snd) in *.
  set (Z1 := sm_avg (concat ft) S1 snd) in *.
  set (o := rnd (nth 0 (ks_acc st) 0 / l_run M m0 0 (map (map fst) kt))) in *.
  (* the closed form *)
  assert (HW1W : W1 <= (1 + Y) * Wx) by (assert (exp (2 * delta) * Wx <= (1 + Y) * Wx) by (apply Rmult_le_compat_r; lra); lra).
  set (c1 := (1 + u) * (gA + bL) / (1 - bL)).
  assert (Hc1 : 0 <= c1) by (unfold c1; apply afr_c1_nonneg; [lra | lra | split; lra]).
  set (err := ((1 + u) * ((gA + bL) * (1 + Y) + X * Y * (CB - 1)) / (1 - bL) + u * (1 + Y) + Y) * Wx
              + (1 + u) * X * (1 + Y) / (1 - bL) * R0 + (1 + u) * rA / (1 - bL) + ea).
  assert (Herr : Rabs (o - Z) <= err).
  { replace (o - Z) with ((o - Z1) + (Z1 - Z)) by ring.
    eapply Rle_trans; [apply Rabs_triang |].
    replace ((1 + u) * ((gA + bL) * W1 + Qf + rA) / (1 - bL) + u * W1 + ea)
      with (c1 * W1 + (1 + u) * Qf / (1 - bL) + (1 + u) * rA / (1 - bL) + u * W1 + ea) in Hon by (unfold c1; field; lra).
    assert (c1 * W1 <= c1 * ((1 + Y) * Wx)) by (apply Rmult_le_compat_l; lra).
    assert (u * W1 <= u * ((1 + Y) * Wx)) by (apply Rmult_le_compat_l; lra).
    assert ((exp (2 * delta) - 1) * Wx <= Y * Wx) by (apply Rmult_le_compat_r; lra).
    replace err with (c1 * ((1 + Y) * Wx) + (1 + u) * Qf / (1 - bL) + (1 + u) * rA / (1 - bL) + u * ((1 + Y) * Wx)
                      + ea + Y * Wx)
      by (unfold err, c1, Qf; field; lra).
    lra. }
  assert (Ho : Rabs o <= Wx + err)
    by (replace o with ((o - Z) + Z) by ring; eapply Rle_trans; [apply Rabs_triang | lra]).
  pose proof (ff_abs S_ o) as Hso.
  fold Wx.
  replace (afr_rel u ue ee ea us n N Tt X Y P1 CG CR CB * Wx + afr_C u ue ee ea us n N Tt X Y P1 CG CR * R0
           + afr_abs u ue ee ea us es V n N Tt X P1 CG CR CGA CRA CB g_rel g_abs)
    with (err * (1 + us) + us * Wx + es)
    by (unfold err, afr_rel, afr_C, afr_abs; cbv zeta; fold bL gA rA; field; lra).
  replace (ff_rnd S_ o - Z) with ((ff_rnd S_ o - o) + (o - Z)) by ring.
  eapply Rle_trans; [apply Rabs_triang |].
  assert (us * Rabs o <= us * (Wx + err)) by (apply Rmult_le_compat_l; lra).
  lra.
Qed.


(** ** The H100 instances *)

(** The float32 forward on the H100 (Triton's 3xTF32 on its tensor cores), as
    [attention_forward_acc_posteriori_tf32x3_op]: the scores' dot [tf32x3_dot_tc_op]
    (head dim [E <= qb k]) and the P.V [tf32x3_acc_fn F out rnd k] (tiles of
    [n <= qv k] keys), [g_rel = u + (1 + u) tf32x3_tc_rel (2^(1-F)) ur k qv],
    [g_abs = (1 + u) 0 + ea], with the running bound. *)
Theorem attention_forward_acc_running_tf32x3_op : forall (out : R -> R) (ur : R) (F : Z) (k qb qv : nat)
    (q : list R) (c scale uc P V X Y P1 CG CR CGA CRA CB : R) (E n N Tt : nat)
    (vis : list R * R -> bool) (tiles : list (list (list R * R))) (bs : list R),
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
  Rabs (ff_rnd S_ (rnd (nth 0 (ks_acc st) 0 / ks_l st)) - exact_softmax scale q (filter vis (concat tiles)))
  <= afr_rel u ue ee ea us n N Tt X Y P1 CG CR CB
       * exact_softmax scale q (map abs_value (filter vis (concat tiles)))
     + afr_C u ue ee ea us n N Tt X Y P1 CG CR * run_err (afr_gb u ue us X g_rel) 0 bs
     + afr_abs u ue ee ea us es V n N Tt X P1 CG CR CGA CRA CB g_rel g_abs.
Proof.
  intros out ur F k qb qv q c scale uc P V X Y P1 CG CR CGA CRA CB E n N Tt vis tiles bs dotf accf g_rel g_abs sck st
    Hur Hout Hk Hq HE Hd Hqv Hn Hdv Hexp0 Hvis Hpre.
  exact (attention_forward_acc_running dotf _ 0 accf n g_rel g_abs q c scale uc P V X Y P1 CG CR CGA CRA CB E N Tt
           vis tiles bs Hexp0 Hvis (tf32x3_tc_op_dot_model out ur F k qb E Hur Hout Hk Hq HE Hd)
           (tf32x3_tc_op_acc_dot_model out rnd ur u ea F k qv n Hur Hout (ff_u_nonneg _) (ff_abs _) Hk Hqv Hn Hdv)
           Hpre).
Qed.

(** The bf16 (or fp16) forward on the H100, as [attention_forward_acc_posteriori_tc_op]:
    the scores' dot [tc_dot_op] (head dim [E <= qb k]) and the P.V [tc_acc_fn F out k]
    (tiles of [n <= qv k] keys), [g_rel = gamma (tc_delta (2^(1-F)) ur k) qv],
    [g_abs = 0], with the running bound. *)
Theorem attention_forward_acc_running_tc_op : forall (out : R -> R) (ur : R) (F : Z) (k qb qv : nat)
    (q : list R) (c scale uc P V X Y P1 CG CR CGA CRA CB : R) (E n N Tt : nat)
    (vis : list R * R -> bool) (tiles : list (list (list R * R))) (bs : list R),
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
  Rabs (ff_rnd S_ (rnd (nth 0 (ks_acc st) 0 / ks_l st)) - exact_softmax scale q (filter vis (concat tiles)))
  <= afr_rel u ue ee ea us n N Tt X Y P1 CG CR CB
       * exact_softmax scale q (map abs_value (filter vis (concat tiles)))
     + afr_C u ue ee ea us n N Tt X Y P1 CG CR * run_err (afr_gb u ue us X g_rel) 0 bs
     + afr_abs u ue ee ea us es V n N Tt X P1 CG CR CGA CRA CB g_rel 0.
Proof.
  intros out ur F k qb qv q c scale uc P V X Y P1 CG CR CGA CRA CB E n N Tt vis tiles bs dotf accf g_rel sck st
    Hur Hout Hk Hq HE Hd Hqv Hn Hdv Hexp0 Hvis Hpre.
  exact (attention_forward_acc_running dotf _ 0 accf n g_rel 0 q c scale uc P V X Y P1 CG CR CGA CRA CB E N Tt
           vis tiles bs Hexp0 Hvis (tc_op_dot_model out ur F k qb E Hur Hout Hk Hq HE Hd)
           (tc_acc_op_dot_model out ur F k qv n Hur Hout Hk Hqv Hn Hdv) Hpre).
Qed.

End Main.
