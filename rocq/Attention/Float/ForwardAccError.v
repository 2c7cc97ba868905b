(** * Forward attention with the P.V product accumulated INTO [acc * alpha] by any accumulating dot.

    The kernel of kernels/ojas_kernels/attention_forward.py ([_fwd_tile], MASKED path)
    as it runs on tensor cores: per key tile of [n] keys (BLOCK_N; the masked keys,
    the padding past [seq_k] included, have [p = exp2 (-inf) = 0])
      m'  = max (m, max_j s_j),  alpha = exp2 (rnd (m - m'))   ([0] while [m = -inf]),
      l   = rnd (rnd (l * alpha) + tl.sum p)                  (as [kernel_step]),
      acc = accf (rnd (acc * alpha)) (map stored_p tile) (map v tile)
    ([kernel_step_acc], [kernel_run_acc]): [acc = tl.dot (p.to(v.dtype), v, acc * alpha)]
    with [accf] ANY accumulating dot of NumeratorError.v's
    [acc_dot_model accf n g_rel g_abs] ([|accf c a b - (c + a.b)| <= g_rel (|c| + sum |a_i b_i|) + g_abs]
    on vectors of length [n]), instead of OnlineSoftmaxTile.v's fp32 products summed
    left to right and then added to [rnd (acc * alpha)].  The H100 instances
    (ForwardError.v PART F) plug in: [tf32x3_tc_op_acc_dot_model] (float32 inputs,
    Triton's 3xTF32: the three TF32 dots chained from 0 on the tensor cores, then
    [acc * alpha] added in fp32) and [tc_acc_op_dot_model] (16-bit inputs: the MMA's
    chain from [acc * alpha], aligned and truncated with each block of products).

    Results:
    - [acc_kernel_inv]: from any state with no visible key yet (the kernel's start;
      [acc] may hold anything, [alpha = 0] clears it), over tiles of [n] keys, every
      visible score a format number in [[m0, m0 + K]], [|v_j| <= V], at most [N]
      visible keys and [Tt] tiles: coordinate [c] of [acc] is within
        (GkA - 1) A_t + RkA,   A_t = sum_j 2^(s_j - m_t) |v_j|   (visible keys)
      of [sum_j 2^(s_j - m_t) v_j], with [t] the number of tiles and
        GkA = H_pv cgA^t 2^(u (m_t - m0)),  H_pv = (1 + us) (1 + ue) 2^(u K),
        cgA = (1 + ue) (1 + u) (1 + g_rel),   crA = (1 + ue + ee) (1 + u) (1 + g_rel),
        RkA = t crA^t dRA,
        dRA = ((H_pv cgA^Tt 2^(u K)) (N V) ee (1 + u) + ea + ((1 + us) ee + es) (n V)) (1 + g_rel) + g_abs.
      Step: [state_step] ([inv_mul_alpha], [inv_round], then [tile_acc_masked]: the
      tile's stored weights within [(H_pv - 1) W + (1 + us) ee + es] of [2^(s - m')],
      ForwardError.v's [inv_acc]).
    - [attention_forward_acc_posteriori] (scores' dot [dotf] of any [dot_model] with
      error [d_rel P + d_abs], P.V of any [acc_dot_model]), and the H100 instances
      [attention_forward_acc_posteriori_tf32x3_op] (fp32),
      [attention_forward_acc_posteriori_tc_op] (bf16/fp16): the kernel's loop from
      [kernel_start 1] under any mask, one output coordinate of one query row,
      [out = ff_rnd S_ (rnd (acc / l))] against the exact softmax over the visible keys:
        |out - sum_j P_j v_j| <= afa_rel * W + afa_abs,   W = sum_j P_j |v_j|
      (P the exact softmax of [scale q.k] over the visible keys), with
        bL      = afe_bL u ue ee ea n N Tt X P1 CG CR     (ForwardError.v, unchanged:
                  H = P1 (1 + ue) X,
                  bL = H CG X - 1 + Tt CR ((H CG X N ee) (1 + u) + ea + P1 n ee) (1 + u)),
        HA      = (1 + us) (1 + ue) X CGA X                             ([afa_HA]),
        rA      = Tt CRA ((HA (N V) ee (1 + u) + ea + ((1 + us) ee + es) (n V)) (1 + g_rel) + g_abs)
                                                                        ([afa_rA]),
        afa_rel = ((1 + u) (HA - 1 + bL) (1 + Y) / (1 - bL) + u (1 + Y) + Y) (1 + us) + us
                  -- the factor of W,
        afa_abs = ((1 + u) rA / (1 - bL) + ea) (1 + us) + es
                  -- absolute: only underflow constants ([ee], [ea], [es]) times
                     [N V] or [n V], and [g_abs] ([(1 + u) 0 + ea] for 3xTF32, [0]
                     for the bf16 tensor cores),
      for any upper bounds [X >= 2^(u K)] ([K = 2 score_max_de scale uc P (d_rel P + d_abs)]),
      [Y >= exp (2 score_delta_de ...) - 1], [P1 >= (1 + u)^(n - 1)], [CG >= cg^Tt],
      [CR >= cr^Tt] ([cg = (1 + ue)(1 + u)^2], [cr = (1 + ue + ee)(1 + u)^2]; these five
      and [afe_bL < 1] are [afe_premises_de] with [B = n]) and [CGA >= cgA^Tt],
      [CRA >= crA^Tt].  The fp32 instance: [g_rel = u + (1 + u) tf32x3_tc_rel (2^(1-F)) ur k qv],
      [g_abs = (1 + u) 0 + ea]; bf16: [g_rel = gamma (tc_delta (2^(1-F)) ur k) qv], [g_abs = 0]
      (tiles of [n <= qv k] keys in blocks of [k]; the scores' dot on [E <= qb k]).
      Compared with [attention_forward_posteriori_masked] (ForwardPosteriori.v): its
      [H' = P1 (1 + u)(1 + us)(1 + ue) X] and [cg] become [(1 + us)(1 + ue) X] and
      [cgA]: the tile's own left-to-right sum ([P1], one [(1 + u)]) is now inside the
      accumulating dot's [(1 + g_rel)] per tile, and its products' underflow [n ea]
      inside [g_abs].

    Covered: the order and rounding inside the P.V MMA and its accumulation into
    [acc * alpha] (through the [acc_dot_model] of each instance), any mask (causal,
    window, sequence bounds, boolean mask; partly and fully masked tiles run through
    the step, no skipping assumed for [acc]), the store of [out].  Not covered (as in
    ForwardPosteriori.v / ForwardError.v's headers): [tl.sum p] modelled left to right,
    the non-MASKED fast path's fused [s * qk_scale - m_new], dropout, FMA contraction
    in [l * alpha + sum], additive float masks, overflow; [mp_exp2 M 0 = 1] (used for
    [l], whose fold is [kernel_run]'s) and the relative error [ue] of [exp2] are
    premises of the model.  The H100 instances take the tensor cores' alignment model
    (TensorCoreSum.v's [tc_align_op], [tc_acc_op]) and the rounding [out] of their
    output as stated there. *)

From Coq Require Import Reals ZArith List Lra Lia Arith.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.NoUnderflow FloatModel.DotError Attention.BackwardCorrect Attention.ScorePerturbation.
From Ojas Require Import FloatModel.MixedPrecision FloatModel.BlockedSum FloatModel.TensorCoreSum FloatModel.Tf32Product.
From Ojas Require Import FloatModel.Notations.
From Ojas Require Import Attention.Float.OnlineSoftmaxError Attention.Float.OnlineSoftmaxTile Attention.Float.ForwardError.
From Ojas Require Import Attention.Float.NumeratorError Attention.Float.ForwardPosteriori.
Import ListNotations.
Open Scope R_scope.

(** Small product facts, proved once so that the proofs here and in ForwardAccRunning.v and
    PerPairScoreError.v need not run [nra] over their large contexts. *)
Lemma fa_one_le_mult : forall a b, 1 <= a -> 1 <= b -> 1 <= a * b.
Proof. intros a b Ha Hb; replace 1 with (1 * 1) by ring; apply Rmult_le_compat; lra. Qed.

Lemma fa_le_mult_l : forall a b, 1 <= a -> 0 <= b -> b <= a * b.
Proof. intros a b Ha Hb; rewrite <- (Rmult_1_l b) at 1; apply Rmult_le_compat_r; lra. Qed.

Lemma fa_le_mult_r : forall a b, 1 <= a -> 0 <= b -> b <= b * a.
Proof. intros a b Ha Hb; rewrite Rmult_comm; apply fa_le_mult_l; assumption. Qed.

Lemma fa_mult_le_l : forall c x, 0 <= c -> x <= 1 -> c * x <= c.
Proof. intros c x Hc Hx; rewrite <- (Rmult_1_r c) at 2; apply Rmult_le_compat_l; assumption. Qed.

Section KernelAcc.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

(** ** The kernel's step with the accumulating dot *)

Lemma fa_nth_map_seq : forall (f : nat -> R) len c, (c < len)%nat -> nth c (map f (seq 0 len)) 0 = f c.
Proof.
  intros f len c Hc; rewrite nth_indep with (d' := f 0%nat) by (rewrite map_length, seq_length; exact Hc).
  rewrite map_nth, seq_nth by exact Hc; reflexivity.
Qed.

Section Step.

Variable Key : Type.
Variable sc : Key -> R.          (** the key's fp32 score (scaled) *)
Variable vis : Key -> bool.      (** the kernel's [vis] *)
Variable val : Key -> nat -> R.  (** coordinate [c] of the key's value row *)
Variable accf : R -> list R -> list R -> R.  (** [tl.dot (a, b, acc)] *)

(** [kernel_step] (OnlineSoftmaxTile.v) with [acc = tl.dot (p.to(v.dtype), v, acc * alpha)]:
    [accf (rnd (acc * alpha)) (map stored_p tile) (map v tile)] per coordinate, the masked
    keys' [p = 0] included (the whole tile goes to the MMA). *)
Definition kernel_step_acc (st : kstate) (tl : list Key) : kstate :=
  let m' := vmax Key sc vis (ks_m st) tl in
  let a := kalpha M (ks_m st) (m_use m') in
  {| ks_m := m';
     ks_l := rnd (rnd (ks_l st * a) + ktile_l M Key sc vis (m_use m') tl);
     ks_acc := map (fun c => accf (rnd (nth c (ks_acc st) 0 * a))
                                  (map (fun k => ff_rnd S_ (kweight M Key sc vis (m_use m') k)) tl)
                                  (map (fun k => val k c) tl))
                   (seq 0 (length (ks_acc st))) |}.

Definition kernel_run_acc (st : kstate) (tiles : list (list Key)) : kstate :=
  fold_left kernel_step_acc tiles st.

(** [m] and [l] are [kernel_run]'s: the accumulator feeds neither. *)
Lemma kernel_run_acc_m_l : forall tiles st st',
  ks_m st = ks_m st' -> ks_l st = ks_l st' ->
  ks_m (kernel_run_acc st tiles) = ks_m (kernel_run M Key sc vis val st' tiles)
  /\ ks_l (kernel_run_acc st tiles) = ks_l (kernel_run M Key sc vis val st' tiles).
Proof.
  unfold kernel_run_acc, kernel_run; induction tiles as [|tl tiles IH]; intros st st' Em El; [auto |].
  cbn [fold_left]; apply IH; unfold kernel_step_acc, kernel_step; cbn [ks_m ks_l]; rewrite ?Em, ?El; reflexivity.
Qed.

Lemma kernel_step_acc_length : forall st tl, length (ks_acc (kernel_step_acc st tl)) = length (ks_acc st).
Proof. intros; unfold kernel_step_acc; cbn [ks_acc]; rewrite map_length, seq_length; reflexivity. Qed.

Lemma kernel_run_acc_length : forall tiles st, length (ks_acc (kernel_run_acc st tiles)) = length (ks_acc st).
Proof.
  unfold kernel_run_acc; induction tiles as [|tl tiles IH]; intros st; [reflexivity |].
  cbn [fold_left]; rewrite IH; apply kernel_step_acc_length.
Qed.

Lemma kernel_step_acc_nth : forall st tl c, (c < length (ks_acc st))%nat ->
  let m' := vmax Key sc vis (ks_m st) tl in
  let a := kalpha M (ks_m st) (m_use m') in
  nth c (ks_acc (kernel_step_acc st tl)) 0
  = accf (rnd (nth c (ks_acc st) 0 * a))
         (map (fun k => ff_rnd S_ (kweight M Key sc vis (m_use m') k)) tl) (map (fun k => val k c) tl).
Proof.
  intros st tl c Hc m' a; unfold kernel_step_acc; cbn [ks_acc]; cbv zeta; fold m' a.
  apply fa_nth_map_seq, Hc.
Qed.

End Step.


(** ** The constants of the accumulator's fold

    [H_pv K = (1 + us) tile_E K]: a stored weight's relative factor;
    [cgA g = (1 + ue) (1 + u) (1 + g)] and [crA g = (1 + ue + ee) (1 + u) (1 + g)]
    the per-tile growth of the factor and of the absolute term ([g] the
    accumulating dot's [g_rel]); [GkA k m = H_pv K cgA^k 2^(u (m - m0))] and
    [RkA k = k crA^k dRA] the bounds after [k] tiles at running max [m], with
      dRA = ((Gb (N V) ee) (1 + u) + ea + ((1 + us) ee + es) (n V)) (1 + g) + g_abs,
      Gb = H_pv K cgA^Tt 2^(u K). *)
Definition H_pv (K : R) : R := (1 + us) * tile_E M K.
Definition cgA (g : R) : R := (1 + ue) * (1 + u) * (1 + g).
Definition crA (g : R) : R := (1 + ue + ee) * (1 + u) * (1 + g).
Definition GkA (K g m0 : R) (k : nat) (m : R) : R := H_pv K * cgA g ^ k * Rpower 2 (u * (m - m0)).
Definition dRA (K g ga V : R) (n N Tt : nat) : R :=
  ((H_pv K * cgA g ^ Tt * Rpower 2 (u * K)) * (INR N * V) * ee * (1 + u) + ea
   + ((1 + us) * ee + es) * (INR n * V)) * (1 + g) + ga.
Definition RkA (K g ga V : R) (n N Tt k : nat) : R := INR k * crA g ^ k * dRA K g ga V n N Tt.

Lemma H_pv_ge_1 : forall K, 0 <= K -> 1 <= H_pv K.
Proof.
  intros K HK; unfold H_pv; pose proof (tile_E_ge_1 M K HK); pose proof (ff_u_nonneg S_); nra.
Qed.

Lemma cgA_ge_1 : forall g, 0 <= g -> 1 <= cgA g.
Proof.
  intros g Hg; unfold cgA; pose proof (mp_ue_nonneg M); pose proof (ff_u_nonneg A_).
  assert (1 <= (1 + ue) * (1 + u)) by nra. nra.
Qed.

(** [1 + g] below the growth [cgA g ^ (k + 1) 2^(u x)] of one more tile (state_step's two cases). *)
Lemma cgA_growth_ge : forall g k x, 0 <= g -> 0 <= x -> 1 + g <= cgA g * cgA g ^ k * Rpower 2 (u * x).
Proof.
  intros g k x Hg Hx; pose proof (ff_u_nonneg A_) as Hu; pose proof (mp_ue_nonneg M) as Hue.
  assert (1 <= cgA g ^ k) by (apply pow_R1_Rle, cgA_ge_1, Hg).
  assert (1 <= Rpower 2 (u * x)) by (apply ose_rpow_ge_1, Rmult_le_pos; lra).
  assert (1 + g <= cgA g) by (unfold cgA; apply fa_le_mult_l; [apply fa_one_le_mult |]; lra).
  pose proof (fa_le_mult_r (cgA g ^ k) (cgA g) ltac:(lra) ltac:(lra)).
  pose proof (fa_le_mult_r (Rpower 2 (u * x)) (cgA g * cgA g ^ k) ltac:(lra) ltac:(lra)).
  lra.
Qed.

Lemma crA_ge_1 : forall g, 0 <= g -> 1 <= crA g.
Proof.
  intros g Hg; unfold crA; pose proof (mp_ue_nonneg M); pose proof (ff_u_nonneg A_); pose proof (mp_eta_e_nonneg M).
  assert (1 <= (1 + ue + ee) * (1 + u)) by nra. nra.
Qed.

Lemma GkA_ge_1 : forall K g m0 k m, 0 <= K -> 0 <= g -> m0 <= m -> 1 <= GkA K g m0 k m.
Proof.
  intros K g m0 k m HK Hg Hm; unfold GkA; pose proof (H_pv_ge_1 K HK); pose proof (cgA_ge_1 g Hg).
  pose proof (ff_u_nonneg A_).
  assert (1 <= cgA g ^ k) by (apply pow_R1_Rle; lra).
  assert (1 <= Rpower 2 (u * (m - m0))) by (apply ose_rpow_ge_1; nra).
  assert (1 <= H_pv K * cgA g ^ k) by nra. nra.
Qed.

Lemma dRA_nonneg : forall K g ga V n N Tt, 0 <= K -> 0 <= g -> 0 <= ga -> 0 <= V -> 0 <= dRA K g ga V n N Tt.
Proof.
  intros K g ga V n N Tt HK Hg Hga HV; unfold dRA.
  pose proof (H_pv_ge_1 K HK); pose proof (cgA_ge_1 g Hg); pose proof (ff_u_nonneg A_).
  pose proof (ff_u_nonneg S_); pose proof (ff_eta_nonneg S_); pose proof (ff_eta_nonneg A_); pose proof (mp_eta_e_nonneg M).
  assert (1 <= cgA g ^ Tt) by (apply pow_R1_Rle; lra).
  pose proof (Rpower_pos (u * K)).
  assert (0 <= H_pv K * cgA g ^ Tt * Rpower 2 (u * K)) by (apply Rmult_le_pos; [nra | lra]).
  assert (0 <= INR N * V) by (apply Rmult_le_pos; [apply pos_INR | lra]).
  assert (0 <= INR n * V) by (apply Rmult_le_pos; [apply pos_INR | lra]).
  assert (0 <= H_pv K * cgA g ^ Tt * Rpower 2 (u * K) * (INR N * V) * ee) by (apply Rmult_le_pos; [nra | lra]).
  assert (0 <= ((1 + us) * ee + es) * (INR n * V)) by (apply Rmult_le_pos; nra).
  assert (0 <= H_pv K * cgA g ^ Tt * Rpower 2 (u * K) * (INR N * V) * ee * (1 + u)) by (apply Rmult_le_pos; lra).
  apply Rplus_le_le_0_compat; [apply Rmult_le_pos; lra | exact Hga].
Qed.

Lemma RkA_nonneg : forall K g ga V n N Tt k, 0 <= K -> 0 <= g -> 0 <= ga -> 0 <= V -> 0 <= RkA K g ga V n N Tt k.
Proof.
  intros; unfold RkA; pose proof (dRA_nonneg K g ga V n N Tt); pose proof (crA_ge_1 g); pose proof (pos_INR k).
  assert (1 <= crA g ^ k) by (apply pow_R1_Rle; lra).
  apply Rmult_le_pos; [nra | lra].
Qed.

Lemma tmax_le : forall {Key} (sc : Key -> R) tl m b, m <= b -> (forall k, In k tl -> sc k <= b) -> tmax Key sc m tl <= b.
Proof.
  intros Key sc; unfold tmax; induction tl as [|k tl IH]; intros m b Hm Hk; [exact Hm |].
  cbn [fold_left]; apply IH; [apply Rmax_lub; [exact Hm | apply Hk; left; reflexivity] |].
  intros k' Hk'; apply Hk; right; exact Hk'.
Qed.

Lemma Rmax_mult_le : forall a b t z, 0 <= t -> a * t <= z -> b * t <= z -> Rmax a b * t <= z.
Proof. intros a b t z Ht Ha Hb; unfold Rmax; destruct (Rle_dec a b); assumption. Qed.

(** ** One coordinate of the accumulator over the kernel's tiles *)

Section Inv.

Variable Key : Type.
Variable sc : Key -> R.
Variable vis : Key -> bool.
Variable val : Key -> nat -> R.
Variable accf : R -> list R -> list R -> R.
Variables (n : nat) (g ga : R).
Variables (K V m0 : R) (N Tt : nat) (c : nat).

Hypothesis Hm : acc_dot_model accf n g ga.
Hypothesis HK : 0 <= K.
Hypothesis HV : 0 <= V.

(** The visible keys of a list as (score, value coordinate) pairs. *)
Definition kpairs (l : list Key) : list (R * R) := map (fun k => (sc k, val k c)) (filter vis l).

Definition keys_ok (l : list Key) : Prop :=
  forall k, In k l -> vis k = true -> fmt (sc k) /\ m0 <= sc k <= m0 + K /\ Rabs (val k c) <= V.

(** The invariant after [k] tiles whose keys are [seen]. *)
Definition state_inv (k : nat) (seen : list Key) (st : kstate) : Prop :=
  match ks_m st with
  | None => filter vis seen = []
  | Some m => fmt m /\ m0 <= m <= m0 + K /\ (forall q, In q seen -> vis q = true -> sc q <= m)
      /\ inv (GkA K g m0 k m) (RkA K g ga V n N Tt k) (nth c (ks_acc st) 0)
             (exact_pv m (kpairs seen)) (exact_pv_abs m (kpairs seen))
  end.

Lemma rsum_vis : forall (h : Key -> R) l,
  rsum (map (fun k => if vis k then h k else 0) l) = rsum (map h (filter vis l)).
Proof.
  intros h; induction l as [|k l IH]; [reflexivity |].
  cbn [map filter]; destruct (vis k); cbn [map]; rewrite !rsum_cons, IH; ring.
Qed.

Lemma kpairs_app : forall a b, kpairs (a ++ b) = kpairs a ++ kpairs b.
Proof. intros; unfold kpairs; rewrite filter_app, map_app; reflexivity. Qed.

Lemma exact_pv_app : forall m a b, exact_pv m (a ++ b) = exact_pv m a + exact_pv m b.
Proof. intros; unfold exact_pv; rewrite map_app; apply rsum_app. Qed.

Lemma exact_pv_abs_app : forall m a b, exact_pv_abs m (a ++ b) = exact_pv_abs m a + exact_pv_abs m b.
Proof. intros; unfold exact_pv_abs; rewrite map_app; apply rsum_app. Qed.

(** One tile into the accumulator [x], at the tile's running max [m']. *)
Lemma tile_acc_masked : forall G R0 x X S m' tl,
  length tl = n -> 1 <= G -> 0 <= R0 -> Rabs X <= S -> fmt m' ->
  (forall k, In k tl -> vis k = true -> fmt (sc k) /\ sc k <= m' /\ m' - sc k <= K /\ Rabs (val k c) <= V) ->
  inv G R0 x X S ->
  inv (Rmax G (H_pv K) * (1 + g)) ((R0 + ((1 + us) * ee + es) * (INR n * V)) * (1 + g) + ga)
      (accf x (map (fun k => ff_rnd S_ (kweight M Key sc vis m' k)) tl) (map (fun k => val k c) tl))
      (X + exact_pv m' (kpairs tl)) (S + exact_pv_abs m' (kpairs tl)).
Proof.
  intros G R0 x X S m' tl Hn HG HR HX Fm' Hk Cx.
  pose proof (ff_u_nonneg S_) as Hus; pose proof (ff_eta_nonneg S_) as Hes; pose proof (mp_eta_e_nonneg M) as Hee.
  set (c0 := (1 + us) * ee + es).
  assert (Hc0 : 0 <= c0) by (unfold c0; nra).
  set (f := fun k => ff_rnd S_ (kweight M Key sc vis m' k)).
  set (W := fun k => if vis k then Rpower 2 (sc k - m') else 0).
  set (vm := fun k => if vis k then val k c else 0).
  assert (Hf0 : forall k, vis k = false -> f k = 0).
  { intros k Ek; unfold f, kweight; rewrite Ek; apply (ff_rnd_id S_ 0 (ff_fmt_0 S_)). }
  destruct (weighted_close f W vm (H_pv K) c0 tl) as [Hw1 Hw2].
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
  assert (EY : rsum (map (fun k => W k * vm k) tl) = exact_pv m' (kpairs tl)).
  { unfold exact_pv, kpairs; rewrite map_map; cbn [fst snd]; rewrite <- rsum_vis; f_equal; apply map_ext; intros k.
    unfold W, vm; destruct (vis k); ring. }
  assert (ET : rsum (map (fun k => W k * Rabs (vm k)) tl) = exact_pv_abs m' (kpairs tl)).
  { unfold exact_pv_abs, kpairs; rewrite map_map; cbn [fst snd]; rewrite <- rsum_vis; f_equal; apply map_ext; intros k.
    unfold W, vm; destruct (vis k); [reflexivity | rewrite Rabs_R0; ring]. }
  assert (Hv : rsum (map (fun k => Rabs (vm k)) tl) <= INR n * V).
  { rewrite <- Hn, <- ost_rsum_const; apply bw_rsum_le; intros k Hin.
    unfold vm; destruct (vis k) eqn:Ev; [apply (Hk k Hin Ev) | rewrite Rabs_R0; exact HV]. }
  assert (HT : 0 <= exact_pv_abs m' (kpairs tl)) by (eapply Rle_trans; [apply Rabs_pos | apply exact_pv_abs_ge]).
  assert (E1 : c0 * rsum (map (fun k => Rabs (vm k)) tl) <= c0 * (INR n * V)) by (apply Rmult_le_compat_l; lra).
  apply (inv_acc accf n g ga G R0 x X S (H_pv K) (c0 * (INR n * V)) _ _ (map f tl) (map (fun k => val k c) tl) Hm);
    [rewrite map_length; exact Hn | rewrite map_length; exact Hn | exact HX | exact HT | exact Cx | |].
  - rewrite ED, <- EY, <- ET; lra.
  - rewrite EA, <- ET; lra.
Qed.

Lemma state_step : forall k seen st tl,
  length tl = n -> (S k <= Tt)%nat -> (length (filter vis (seen ++ tl)) <= N)%nat ->
  keys_ok (seen ++ tl) -> (c < length (ks_acc st))%nat ->
  state_inv k seen st -> state_inv (S k) (seen ++ tl) (kernel_step_acc Key sc vis val accf st tl).
Proof.
  intros k seen st tl Hn Hk HN Hok Hc Hinv.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (mp_ue_nonneg M) as Hue; pose proof (mp_eta_e_nonneg M) as Hee.
  pose proof (ff_eta_nonneg A_) as Hea; pose proof (ff_u_nonneg S_) as Hus; pose proof (ff_eta_nonneg S_) as Hes.
  pose proof (adm_rel_nonneg _ _ _ _ Hm) as Hg; pose proof (adm_abs_nonneg _ _ _ _ Hm) as Hga.
  pose proof (H_pv_ge_1 K HK) as HH; pose proof (cgA_ge_1 g Hg) as Hcg; pose proof (crA_ge_1 g Hg) as Hcr.
  pose proof (dRA_nonneg K g ga V n N Tt HK Hg Hga HV) as HdR.
  set (c0 := (1 + us) * ee + es).
  assert (Hc0 : 0 <= c0) by (unfold c0; nra).
  assert (HnV : 0 <= INR n * V) by (apply Rmult_le_pos; [apply pos_INR | exact HV]).
  assert (HdR' : c0 * (INR n * V) * (1 + g) + ga <= dRA K g ga V n N Tt).
  { unfold dRA; fold c0.
    pose proof (Rpower_pos (u * K)).
    assert (1 <= cgA g ^ Tt) by (apply pow_R1_Rle; lra).
    assert (0 <= H_pv K * cgA g ^ Tt * Rpower 2 (u * K)) by (apply Rmult_le_pos; [nra | lra]).
    assert (0 <= INR N * V) by (apply Rmult_le_pos; [apply pos_INR | lra]).
    assert (0 <= H_pv K * cgA g ^ Tt * Rpower 2 (u * K) * (INR N * V) * ee * (1 + u))
      by (apply Rmult_le_pos; [apply Rmult_le_pos; [apply Rmult_le_pos |] |]; nra).
    assert (0 <= c0 * (INR n * V)) by (apply Rmult_le_pos; lra).
    nra. }
  assert (HRk1 : dRA K g ga V n N Tt <= RkA K g ga V n N Tt (S k)).
  { unfold RkA; rewrite S_INR; pose proof (pos_INR k).
    assert (1 <= crA g ^ S k) by (apply pow_R1_Rle; lra).
    assert (1 <= (INR k + 1) * crA g ^ S k) by nra. nra. }
  (* the tile's keys *)
  assert (Htl : forall q, In q tl -> vis q = true -> fmt (sc q) /\ m0 <= sc q <= m0 + K /\ Rabs (val q c) <= V)
    by (intros q Hq Ev; apply Hok; [apply in_or_app; right; exact Hq | exact Ev]).
  assert (Ftl : forall q, In q (filter vis tl) -> fmt (sc q)).
  { intros q Hq; apply filter_In in Hq; destruct Hq as [Hq Ev]; apply (Htl q Hq Ev). }
  assert (Ubl : forall q, In q (filter vis tl) -> sc q <= m0 + K).
  { intros q Hq; apply filter_In in Hq; destruct Hq as [Hq Ev]; apply (Htl q Hq Ev). }
  unfold state_inv in Hinv |- *.
  change (ks_m (kernel_step_acc Key sc vis val accf st tl)) with (vmax Key sc vis (ks_m st) tl).
  rewrite (kernel_step_acc_nth Key sc vis val accf st tl c Hc); cbv zeta.
  rewrite kpairs_app.
  destruct (ks_m st) as [m |] eqn:Em.
  - (* a running max: rescale, then accumulate *)
    destruct Hinv as [Fm [[Hm0 HmK] [Hseen C]]].
    rewrite vmax_some_filter; cbn [m_use kalpha].
    set (m' := tmax Key sc m (filter vis tl)).
    destruct (tmax_props M Key sc (filter vis tl) m Fm Ftl) as [Fm' [Hmm' Htm]]; fold m' in Fm', Hmm', Htm.
    assert (HmK' : m' <= m0 + K) by (apply tmax_le; [exact HmK | exact Ubl]).
    set (x := nth c (ks_acc st) 0).
    set (X := exact_pv m (kpairs seen)) in *; set (S0 := exact_pv_abs m (kpairs seen)) in *.
    assert (HX : Rabs X <= S0) by apply exact_pv_abs_ge.
    assert (HS0 : S0 <= INR N * V).
    { apply exact_pv_abs_bound; [exact HV | |].
      - intros p Hp; unfold kpairs in Hp; apply in_map_iff in Hp; destruct Hp as [q [<- Hq]].
        apply filter_In in Hq; destruct Hq as [Hq Ev]; cbn [fst snd].
        split; [apply (Hok q (in_or_app _ _ _ (or_introl Hq)) Ev) | apply (Hseen q Hq Ev)].
      - unfold kpairs; rewrite map_length; rewrite filter_app, app_length in HN; lia. }
    assert (HS00 : 0 <= S0) by (eapply Rle_trans; [apply Rabs_pos | exact HX]).
    pose proof (GkA_ge_1 K g m0 k m HK Hg Hm0) as HG.
    pose proof (RkA_nonneg K g ga V n N Tt k HK Hg Hga HV) as HR.
    pose proof (inv_mul_alpha M _ _ x X S0 m m' HG HR Fm Fm' Hmm' HX C) as C1.
    pose proof (exp2_factor_ge_1 M m m' Hmm') as HE.
    pose proof (Rpower_pos (m - m')) as Ha0.
    assert (HXa : Rabs (X * Rpower 2 (m - m')) <= S0 * Rpower 2 (m - m')).
    { rewrite Rabs_mult, (Rabs_right (Rpower 2 (m - m'))) by lra; apply Rmult_le_compat_r; lra. }
    assert (HG1 : 1 <= GkA K g m0 k m * exp2_factor M m m') by (apply fa_one_le_mult; assumption).
    assert (HR1 : 0 <= RkA K g ga V n N Tt k * (Rpower 2 (m - m') * exp2_factor M m m' + ee)
                       + GkA K g m0 k m * S0 * ee).
    { apply Rplus_le_le_0_compat; [apply Rmult_le_pos; [lra | apply Rplus_le_le_0_compat; [apply Rmult_le_pos |]; lra] |].
      apply Rmult_le_pos; [apply Rmult_le_pos; lra | exact Hee]. }
    pose proof (inv_round M _ _ _ _ _ HG1 HR1 HXa C1) as C2.
    assert (HG2 : 1 <= GkA K g m0 k m * exp2_factor M m m' * (1 + u)) by (apply fa_one_le_mult; lra).
    assert (HR2 : 0 <= (RkA K g ga V n N Tt k * (Rpower 2 (m - m') * exp2_factor M m m' + ee)
                       + GkA K g m0 k m * S0 * ee) * (1 + u) + ea)
      by (apply Rplus_le_le_0_compat; [apply Rmult_le_pos |]; lra).
    assert (Hk' : forall q, In q tl -> vis q = true -> fmt (sc q) /\ sc q <= m' /\ m' - sc q <= K /\ Rabs (val q c) <= V).
    { intros q Hq Ev; destruct (Htl q Hq Ev) as [Fq [[H1 H2] Hv]].
      assert (sc q <= m') by (apply Htm, filter_In; auto).
      repeat split; auto; lra. }
    pose proof (tile_acc_masked _ _ _ _ _ m' tl Hn HG2 HR2 HXa Fm' Hk' C2) as C3.
    rewrite exact_pv_app, exact_pv_abs_app.
    unfold X, S0 in C3; rewrite exact_pv_resc, exact_pv_abs_resc in C3.
    split; [exact Fm' | split; [lra | split]].
    { intros q Hq Ev; apply in_app_or in Hq; destruct Hq as [Hq | Hq]; [pose proof (Hseen q Hq Ev); lra |].
      apply Htm, filter_In; auto. }
    eapply inv_mono; [| | | exact C3].
    + apply Rplus_le_le_0_compat; eapply Rle_trans; try apply Rabs_pos; apply exact_pv_abs_ge.
    + (* the factor *)
      apply Rmax_mult_le; [lra | |].
      * unfold GkA, exp2_factor; cbn [pow].
        replace (H_pv K * cgA g ^ k * Rpower 2 (u * (m - m0)) * ((1 + ue) * Rpower 2 (u * (m' - m))) * (1 + u) * (1 + g))
          with (H_pv K * (cgA g * cgA g ^ k) * (Rpower 2 (u * (m - m0)) * Rpower 2 (u * (m' - m))))
          by (unfold cgA; ring).
        rewrite <- Rpower_plus; replace (u * (m - m0) + u * (m' - m)) with (u * (m' - m0)) by ring; lra.
      * unfold GkA; cbn [pow].
        pose proof (cgA_growth_ge g k (m' - m0) Hg ltac:(lra)).
        assert (H_pv K * (1 + g) <= H_pv K * (cgA g * cgA g ^ k * Rpower 2 (u * (m' - m0))))
          by (apply Rmult_le_compat_l; lra).
        lra.
    + (* the absolute term *)
      fold c0.
      pose proof (alpha_factor_le M m m' Hmm') as Hae.
      set (a := Rpower 2 (m - m')) in *; set (E := exp2_factor M m m') in *.
      set (R0 := RkA K g ga V n N Tt k) in *; set (G0 := GkA K g m0 k m) in *.
      set (Gb := H_pv K * cgA g ^ Tt * Rpower 2 (u * K)).
      assert (HGb : G0 <= Gb).
      { unfold G0, Gb, GkA.
        assert (cgA g ^ k <= cgA g ^ Tt) by (apply Rle_pow; [lra | lia]).
        assert (Rpower 2 (u * (m - m0)) <= Rpower 2 (u * K)) by (apply ost_rpow_le, Rmult_le_compat_l; lra).
        assert (1 <= cgA g ^ k) by (apply pow_R1_Rle; lra).
        assert (H_pv K * cgA g ^ k <= H_pv K * cgA g ^ Tt) by (apply Rmult_le_compat_l; lra).
        apply Rmult_le_compat; try lra; [apply Rmult_le_pos; lra | left; apply Rpower_pos]. }
      assert (E1 : R0 * (a * E + ee) <= R0 * (1 + ue + ee)) by (apply Rmult_le_compat_l; lra).
      assert (E2 : G0 * S0 * ee <= Gb * (INR N * V) * ee)
        by (apply Rmult_le_compat_r; [lra | apply Rmult_le_compat; lra]).
      assert (E3 : ((R0 * (a * E + ee) + G0 * S0 * ee) * (1 + u) + ea + c0 * (INR n * V)) * (1 + g) + ga
                   <= crA g * R0 + dRA K g ga V n N Tt).
      { unfold crA, dRA; fold Gb c0.
        assert ((R0 * (a * E + ee) + G0 * S0 * ee) * (1 + u) <= (R0 * (1 + ue + ee) + Gb * (INR N * V) * ee) * (1 + u))
          by (apply Rmult_le_compat_r; lra).
        assert (((R0 * (a * E + ee) + G0 * S0 * ee) * (1 + u) + ea + c0 * (INR n * V)) * (1 + g)
                <= ((R0 * (1 + ue + ee) + Gb * (INR N * V) * ee) * (1 + u) + ea + c0 * (INR n * V)) * (1 + g))
          by (apply Rmult_le_compat_r; lra).
        nra. }
      eapply Rle_trans; [exact E3 |].
      unfold R0, RkA; rewrite S_INR; cbn [pow].
      assert (1 <= crA g ^ k) by (apply pow_R1_Rle; lra).
      assert (dRA K g ga V n N Tt <= crA g * crA g ^ k * dRA K g ga V n N Tt)
        by (apply fa_le_mult_l; [apply fa_one_le_mult |]; lra).
      lra.
  - (* no visible key yet: [alpha = 0] and the tile starts the accumulator *)
    destruct (filter vis tl) as [| k0 r] eqn:Ef.
    + rewrite (vmax_masked Key sc vis tl None (filter_nil_fully_masked vis tl Ef)).
      rewrite filter_app, Hinv, Ef; reflexivity.
    + rewrite (vmax_none_filter Key sc vis tl k0 r Ef); cbn [m_use kalpha].
      set (m' := tmax Key sc (sc k0) r).
      assert (Fk0 : fmt (sc k0)) by (apply Ftl; left; reflexivity).
      assert (Ftl' : forall q, In q r -> fmt (sc q)) by (intros q Hq; apply Ftl; right; exact Hq).
      destruct (tmax_props M Key sc r (sc k0) Fk0 Ftl') as [Fm' [Hkm' Htm]]; fold m' in Fm', Hkm', Htm.
      assert (Hin' : forall q, In q (filter vis tl) -> sc q <= m').
      { rewrite Ef; intros q [<- | Hq]; [exact Hkm' | apply Htm, Hq]. }
      assert (HmK' : m' <= m0 + K) by (apply tmax_le; [apply Ubl; left; reflexivity | intros q Hq; apply Ubl; right; exact Hq]).
      assert (Hm0' : m0 <= m').
      { assert (Hk0 : In k0 (filter vis tl)) by (rewrite Ef; left; reflexivity).
        apply filter_In in Hk0; destruct Hk0 as [Hk0 Ev]; destruct (Htl k0 Hk0 Ev) as [_ [[H1 _] _]]; lra. }
      rewrite Rmult_0_r, (ff_rnd_id A_ 0 (ff_fmt_0 A_)).
      assert (Hs : kpairs seen = []) by (unfold kpairs; rewrite Hinv; reflexivity).
      rewrite Hs, app_nil_l.
      assert (Hk' : forall q, In q tl -> vis q = true -> fmt (sc q) /\ sc q <= m' /\ m' - sc q <= K /\ Rabs (val q c) <= V).
      { intros q Hq Ev; destruct (Htl q Hq Ev) as [Fq [[H1 H2] Hv]].
        assert (sc q <= m') by (apply Hin', filter_In; auto).
        repeat split; auto; lra. }
      assert (C0 : inv 1 0 0 0 0) by (unfold inv; rewrite Rminus_0_r, Rabs_R0; lra).
      pose proof (tile_acc_masked 1 0 0 0 0 m' tl Hn (Rle_refl 1) (Rle_refl 0)
                    ltac:(rewrite Rabs_R0; lra) Fm' Hk' C0) as C3.
      rewrite !Rplus_0_l in C3.
      split; [exact Fm' | split; [lra | split]].
      { intros q Hq Ev; apply in_app_or in Hq; destruct Hq as [Hq | Hq].
        - exfalso; assert (In q (filter vis seen)) by (apply filter_In; auto); rewrite Hinv in H; exact H.
        - apply Hin', filter_In; auto. }
      eapply inv_mono; [| | | exact C3].
      * eapply Rle_trans; [apply Rabs_pos | apply exact_pv_abs_ge].
      * unfold GkA; cbn [pow].
        pose proof (cgA_growth_ge g k (m' - m0) Hg ltac:(lra)).
        assert (Hb : H_pv K * (1 + g) <= H_pv K * (cgA g * cgA g ^ k * Rpower 2 (u * (m' - m0))))
          by (apply Rmult_le_compat_l; lra).
        apply Rmax_mult_le; [lra | |]; [assert (1 * (1 + g) <= H_pv K * (1 + g)) by nra |]; lra.
      * fold c0; lra.
Qed.

Lemma state_run : forall tiles k seen st,
  Forall (fun tl => length tl = n) tiles -> (k + length tiles <= Tt)%nat ->
  (length (filter vis (seen ++ concat tiles)) <= N)%nat ->
  keys_ok (seen ++ concat tiles) -> (c < length (ks_acc st))%nat ->
  state_inv k seen st ->
  state_inv (k + length tiles) (seen ++ concat tiles) (kernel_run_acc Key sc vis val accf st tiles).
Proof.
  induction tiles as [|tl tiles IH]; intros k seen st Hn HT HN Hok Hc Hinv.
  - cbn [length concat]; rewrite Nat.add_0_r, app_nil_r; exact Hinv.
  - inversion Hn as [|tl' tiles' Htl Hrest]; subst.
    cbn [length concat] in *; unfold kernel_run_acc; cbn [fold_left]; fold (kernel_run_acc Key sc vis val accf).
    replace (k + S (length tiles))%nat with (S k + length tiles)%nat by lia.
    rewrite app_assoc in *.
    apply IH; auto.
    + lia.
    + rewrite kernel_step_acc_length; exact Hc.
    + apply state_step; auto.
      * lia.
      * rewrite filter_app, app_length in HN; lia.
      * intros q Hq Ev; apply Hok; [apply in_or_app; left; exact Hq | exact Ev].
Qed.

End Inv.

(** The accumulator's fold: from any state with no visible key yet ([ks_m = None]: the
    kernel's start, whatever [acc] holds, as [alpha = 0] there), over tiles of [n] keys
    (masked keys included) with at most [N] visible keys and [Tt] tiles, every visible
    score a format number in [[m0, m0 + K]] and [|v| <= V]: once a key is visible, the
    running max [m] is in [[m0, m0 + K]] and coordinate [c] of [acc] is within
    [(GkA - 1) A + RkA] of [sum_j 2^(s_j - m) v_j], [A = sum_j 2^(s_j - m) |v_j|]
    (the sums over the visible keys). *)
Theorem acc_kernel_inv : forall (Key : Type) (sc : Key -> R) (vis : Key -> bool) (val : Key -> nat -> R)
    (accf : R -> list R -> list R -> R) (n : nat) (g ga K V m0 : R) (N Tt c : nat)
    (tiles : list (list Key)) (st : kstate),
  acc_dot_model accf n g ga -> 0 <= K -> 0 <= V ->
  Forall (fun tl => length tl = n) tiles -> (length tiles <= Tt)%nat ->
  (length (filter vis (concat tiles)) <= N)%nat ->
  (forall k, In k (concat tiles) -> vis k = true -> fmt (sc k) /\ m0 <= sc k <= m0 + K /\ Rabs (val k c) <= V) ->
  ks_m st = None -> (c < length (ks_acc st))%nat ->
  forall m, ks_m (kernel_run_acc Key sc vis val accf st tiles) = Some m ->
  fmt m /\ m0 <= m <= m0 + K /\
  inv (GkA K g m0 (length tiles) m) (RkA K g ga V n N Tt (length tiles))
      (nth c (ks_acc (kernel_run_acc Key sc vis val accf st tiles)) 0)
      (exact_pv m (map (fun k => (sc k, val k c)) (filter vis (concat tiles))))
      (exact_pv_abs m (map (fun k => (sc k, val k c)) (filter vis (concat tiles)))).
Proof.
  intros Key sc vis val accf n g ga K V m0 N Tt c tiles st Hm HK HV Hn HT HN Hok Hst Hc m Em.
  pose proof (state_run Key sc vis val accf n g ga K V m0 N Tt c Hm HK HV tiles 0 [] st Hn HT HN Hok Hc
                ltac:(unfold state_inv; rewrite Hst; reflexivity)) as H.
  unfold state_inv in H; rewrite Em in H; cbn [app plus] in H.
  destruct H as [F [Hb [_ C]]]; exact (conj F (conj Hb C)).
Qed.

End KernelAcc.

(** ** The closed forms of the end-to-end bound

    [afa_HA]: the a-priori bound of the accumulator's factor [GkA];
    [afa_rA]: of its absolute term [RkA]; [afe_bL] (ForwardError.v) the
    denominator's, unchanged (the [l] fold is the same).  [X >= 2^(u K)],
    [Y >= exp (2 delta) - 1], [P1 >= (1 + u)^(n - 1)], [CG >= cg^Tt], [CR >= cr^Tt]
    as in [afe_premises_de]; [CGA >= cgA g_rel ^ Tt], [CRA >= crA g_rel ^ Tt]. *)
Definition afa_HA (ue us X CGA : R) : R := (1 + us) * ((1 + ue) * X) * CGA * X.

Definition afa_rA (u ue ee ea us es V : R) (n N Tt : nat) (X CGA CRA g_rel g_abs : R) : R :=
  INR Tt * CRA * (((afa_HA ue us X CGA * (INR N * V) * ee * (1 + u) + ea
                    + ((1 + us) * ee + es) * (INR n * V)) * (1 + g_rel)) + g_abs).

Definition afa_rel (u ue ee ea us : R) (n N Tt : nat) (X Y P1 CG CR CGA : R) : R :=
  let bL := afe_bL u ue ee ea n N Tt X P1 CG CR in
  ((1 + u) * (afa_HA ue us X CGA - 1 + bL) * (1 + Y) / (1 - bL) + u * (1 + Y) + Y) * (1 + us) + us.

Definition afa_abs (u ue ee ea us es V : R) (n N Tt : nat) (X P1 CG CR CGA CRA g_rel g_abs : R) : R :=
  let bL := afe_bL u ue ee ea n N Tt X P1 CG CR in
  ((1 + u) * afa_rA u ue ee ea us es V n N Tt X CGA CRA g_rel g_abs / (1 - bL) + ea) * (1 + us) + es.

Section Posteriori.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

Lemma GkA_apriori : forall K g m0 t mt Tt X CGA, 0 <= K -> 0 <= g -> (t <= Tt)%nat -> m0 <= mt -> mt - m0 <= K ->
  Rpower 2 (u * K) <= X -> cgA M g ^ Tt <= CGA -> GkA M K g m0 t mt <= afa_HA ue us X CGA.
Proof.
  intros K g m0 t mt Tt X CGA HK Hg Ht Hm HmK HX HC; unfold GkA, afa_HA, H_pv, tile_E.
  pose proof (cgA_ge_1 M g Hg); pose proof (ff_u_nonneg A_); pose proof (ff_u_nonneg S_); pose proof (mp_ue_nonneg M).
  assert (cgA M g ^ t <= cgA M g ^ Tt) by (apply Rle_pow; [lra | exact Ht]).
  assert (1 <= cgA M g ^ t) by (apply pow_R1_Rle; lra).
  assert (Rpower 2 (u * (mt - m0)) <= Rpower 2 (u * K)) by (apply ost_rpow_le; nra).
  pose proof (Rpower_pos (u * (mt - m0))); pose proof (Rpower_pos (u * K)).
  assert ((1 + us) * ((1 + ue) * Rpower 2 (u * K)) <= (1 + us) * ((1 + ue) * X))
    by (apply Rmult_le_compat_l; [lra | apply Rmult_le_compat_l; lra]).
  assert (0 <= (1 + us) * ((1 + ue) * Rpower 2 (u * K))) by (apply Rmult_le_pos; [lra | apply Rmult_le_pos; lra]).
  apply Rmult_le_compat; [apply Rmult_le_pos; lra | lra | apply Rmult_le_compat; lra | lra].
Qed.

Lemma RkA_apriori : forall K g ga V n N Tt t X CGA CRA, 0 <= K -> 0 <= g -> 0 <= ga -> 0 <= V -> (t <= Tt)%nat ->
  Rpower 2 (u * K) <= X -> cgA M g ^ Tt <= CGA -> crA M g ^ Tt <= CRA ->
  RkA M K g ga V n N Tt t <= afa_rA u ue ee ea us es V n N Tt X CGA CRA g ga.
Proof.
  intros K g ga V n N Tt t X CGA CRA HK Hg Hga HV Ht HX HCG HCR; unfold RkA, afa_rA.
  pose proof (crA_ge_1 M g Hg); pose proof (ff_u_nonneg A_); pose proof (mp_eta_e_nonneg M).
  pose proof (dRA_nonneg M K g ga V n N Tt HK Hg Hga HV) as Hd.
  assert (HGb : H_pv M K * cgA M g ^ Tt * Rpower 2 (u * K) <= afa_HA ue us X CGA)
    by (pose proof (GkA_apriori K g 0 Tt K Tt X CGA HK Hg (le_n Tt) HK ltac:(lra) HX HCG) as H';
        unfold GkA in H'; rewrite Rminus_0_r in H'; exact H').
  assert (Hd' : dRA M K g ga V n N Tt
                <= (afa_HA ue us X CGA * (INR N * V) * ee * (1 + u) + ea + ((1 + us) * ee + es) * (INR n * V)) * (1 + g) + ga).
  { unfold dRA.
    assert (0 <= INR N * V) by (apply Rmult_le_pos; [apply pos_INR | lra]).
    assert (H_pv M K * cgA M g ^ Tt * Rpower 2 (u * K) * (INR N * V) * ee * (1 + u)
            <= afa_HA ue us X CGA * (INR N * V) * ee * (1 + u))
      by (apply Rmult_le_compat_r; [lra | apply Rmult_le_compat_r; [lra | apply Rmult_le_compat_r; lra]]).
    assert (((H_pv M K * cgA M g ^ Tt * Rpower 2 (u * K)) * (INR N * V) * ee * (1 + u) + ea
             + ((1 + us) * ee + es) * (INR n * V)) * (1 + g)
            <= (afa_HA ue us X CGA * (INR N * V) * ee * (1 + u) + ea + ((1 + us) * ee + es) * (INR n * V)) * (1 + g))
      by (apply Rmult_le_compat_r; lra).
    lra. }
  assert (Hc : crA M g ^ t <= CRA) by (eapply Rle_trans; [apply Rle_pow; [lra | exact Ht] | exact HCR]).
  assert (0 <= crA M g ^ t) by (apply pow_le; lra).
  assert (INR t <= INR Tt) by (apply le_INR, Ht).
  pose proof (pos_INR t).
  apply Rmult_le_compat; [apply Rmult_le_pos; lra | exact Hd | apply Rmult_le_compat; lra | exact Hd'].
Qed.

(** The kernel's loop with the accumulating P.V ([kernel_run_acc] from [kernel_start],
    any tiles of [n] keys, any mask [vis]), one output coordinate of one query row,
    against the softmax over the visible keys: the scores' dot [dotf] of any
    [dot_model] (error [d_rel * P + d_abs]), the P.V dot [accf] of any [acc_dot_model]
    on [n] keys ([g_rel], [g_abs]). *)
Theorem attention_forward_acc_posteriori : forall (dotf : list R -> list R -> R) (d_rel d_abs : R)
    (accf : R -> list R -> list R -> R) (n : nat) (g_rel g_abs : R)
    (q : list R) (c scale uc P V X Y P1 CG CR CGA CRA : R) (E N Tt : nat)
    (vis : list R * R -> bool) (tiles : list (list (list R * R))),
  let sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv) in
  let st := kernel_run_acc M (list R * R) sck vis (fun kv _ => snd kv) accf (kernel_start 1) tiles in
  mp_exp2 M 0 = 1 ->
  (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  dot_model dotf E d_rel d_abs ->
  acc_dot_model accf n g_rel g_abs ->
  afe_premises_de M c scale uc P (d_rel * P + d_abs) V X Y P1 CG CR n N Tt ->
  cgA M g_rel ^ Tt <= CGA -> crA M g_rel ^ Tt <= CRA ->
  length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true ->
     length (fst kv) = E /\ dot_abs q (fst kv) <= P /\ Rabs (snd kv) <= V) ->
  Forall (fun tl => length tl = n) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rabs (ff_rnd S_ (rnd (nth 0 (ks_acc st) 0 / ks_l st)) - exact_softmax scale q (filter vis (concat tiles)))
  <= afa_rel u ue ee ea us n N Tt X Y P1 CG CR CGA
       * exact_softmax scale q (map abs_value (filter vis (concat tiles)))
     + afa_abs u ue ee ea us es V n N Tt X P1 CG CR CGA CRA g_rel g_abs.
Proof.
  intros dotf d_rel d_abs accf n g_rel g_abs q c scale uc P V X Y P1 CG CR CGA CRA E N Tt vis tiles sck st
    Hexp0 Hvis Hdm Hadm Hpre HCGA HCRA Hq Hkeys Hn HN HT.
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
              (kernel_start 1) Hadm HK (Rlt_le _ _ HV) Hn HT HN Hok eq_refl ltac:(cbn; lia) mt Em) as [_ [Hmb Ca]].
  fold st in Ca; cbv beta in Ca.
  assert (Ekp : map (fun k : list R * R => (sck k, snd k)) (filter vis (concat tiles)) = concat kt)
    by (rewrite Ecat', <- Ecat; reflexivity).
  rewrite Ekp in Ca.
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
  (* the accumulator's bounds, a priori *)
  assert (HmtK : mt - - smax <= K) by (apply Rabs_le_inv in Hmt; unfold K; lra).
  pose proof (GkA_apriori K g_rel (- smax) (length tiles) mt Tt X CGA HK Hg HT (proj1 Hmb) HmtK HX HCGA) as HgA.
  pose proof (RkA_apriori K g_rel g_abs V n N Tt (length tiles) X CGA CRA HK Hg Hga (Rlt_le _ _ HV) HT HX HCGA HCRA) as HrA.
  pose proof (GkA_ge_1 M K g_rel (- smax) (length tiles) mt HK Hg (proj1 Hmb)) as HGa.
  pose proof (RkA_nonneg M K g_rel g_abs V n N Tt (length tiles) HK Hg Hga (Rlt_le _ _ HV)) as HRa.
  set (gA := afa_HA ue us X CGA - 1).
  set (rA := afa_rA u ue ee ea us es V n N Tt X CGA CRA g_rel g_abs) in *.
  pose proof (exact_pv_abs_ge mt (concat kt)) as HNA.
  assert (HA0 : 0 <= exact_pv_abs mt (concat kt)) by (eapply Rle_trans; [apply Rabs_pos | exact HNA]).
  assert (Hab : Rabs (nth 0 (ks_acc st) 0 - exact_pv mt (concat kt)) <= gA * exact_pv_abs mt (concat kt) + rA).
  { unfold inv in Ca; eapply Rle_trans; [exact Ca |].
    assert ((GkA M K g_rel (- smax) (length tiles) mt - 1) * exact_pv_abs mt (concat kt)
            <= gA * exact_pv_abs mt (concat kt)) by (apply Rmult_le_compat_r; unfold gA; lra).
    lra. }
  assert (Hon := final_division_post M (l_run M m0 0 (map (map fst) kt)) L (nth 0 (ks_acc st) 0)
                   (exact_pv mt (concat kt)) (exact_pv_abs mt (concat kt)) bL gA rA HL1 HNA
                   ltac:(lra) ltac:(unfold gA; lra) ltac:(lra) Hlb Hab).
  rewrite El.
  (* the perturbation of the scores, a-posteriori *)
  set (S0 := fun kv : list R * R => scale * dot_R q (fst kv) - mt * ln 2).
  set (S1 := fun kv : list R * R => (score2_with A_ dotf c q (fst kv) - mt) * ln 2).
  assert (EN : exact_pv mt (concat kt) / L = sm_avg (concat ft) S1 snd)
    by (unfold L, exact_pv, exact_l, sm_avg; rewrite Ecat', !map_map; reflexivity).
  assert (EA : exact_pv_abs mt (concat kt) / L = sm_avg (concat ft) S1 (fun kv => Rabs (snd kv)))
    by (unfold L, exact_pv_abs, exact_l, sm_avg; rewrite Ecat', !map_map; reflexivity).
  rewrite <- Ecat.
  assert (EZ : exact_softmax scale q (concat ft) = sm_avg (concat ft) S0 snd)
    by (unfold exact_softmax, sm_avg, S0; symmetry;
        apply (softmax_average_shift (concat ft) (fun kv => scale * dot_R q (fst kv)) snd (mt * ln 2))).
  assert (EW : exact_softmax scale q (map abs_value (concat ft)) = sm_avg (concat ft) S0 (fun kv => Rabs (snd kv))).
  { unfold exact_softmax, sm_avg, S0; rewrite !map_map; cbn [abs_value fst snd]; symmetry.
    apply (softmax_average_shift (concat ft) (fun kv => scale * dot_R q (fst kv)) (fun kv => Rabs (snd kv)) (mt * ln 2)). }
  rewrite EN, EA in Hon; rewrite EZ, EW.
  destruct (softmax_perturbation_post (concat ft) S0 S1 snd delta Hdelta) as [Hp1 Hp2].
  { intros kv Hkv; unfold S0, S1.
    replace ((score2_with A_ dotf c q (fst kv) - mt) * ln 2 - (scale * dot_R q (fst kv) - mt * ln 2))
      with (score2_with A_ dotf c q (fst kv) * ln 2 - scale * dot_R q (fst kv)) by ring.
    exact (Hsc kv Hkv). }
  destruct (sm_avg_abs (concat ft) S0 snd) as [HZW HW0].
  destruct (sm_avg_abs (concat ft) S1 snd) as [_ HW1].
  set (W := sm_avg (concat ft) S0 (fun kv => Rabs (snd kv))) in *.
  set (W1 := sm_avg (concat ft) S1 (fun kv => Rabs (snd kv))) in *.
  set (Z := sm_avg (concat ft) S0 snd) in *.
  set (Z1 := sm_avg (concat ft) S1 snd) in *.
  set (o := rnd (nth 0 (ks_acc st) 0 / l_run M m0 0 (map (map fst) kt))) in *.
  (* the closed form *)
  assert (HgA0 : 0 <= gA) by (unfold gA; lra).
  assert (HrA0 : 0 <= rA) by lra.
  assert (HY0 : 0 <= Y) by (assert (1 <= exp (2 * delta)) by (rewrite <- exp_0; apply sp_exp_le; lra); lra).
  assert (HW1W : W1 <= (1 + Y) * W) by (assert (exp (2 * delta) * W <= (1 + Y) * W) by (apply Rmult_le_compat_r; lra); lra).
  set (c1 := (1 + u) * (gA + bL) / (1 - bL)).
  assert (Hc1 : 0 <= c1) by (unfold c1, Rdiv; apply Rmult_le_pos; [apply Rmult_le_pos; lra | left; apply Rinv_0_lt_compat; lra]).
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
  replace (afa_rel u ue ee ea us n N Tt X Y P1 CG CR CGA * W + afa_abs u ue ee ea us es V n N Tt X P1 CG CR CGA CRA g_rel g_abs)
    with (err * (1 + us) + us * W + es)
    by (unfold err, afa_rel, afa_abs; cbv zeta; fold bL gA rA; field; lra).
  replace (ff_rnd S_ o - Z) with ((ff_rnd S_ o - o) + (o - Z)) by ring.
  eapply Rle_trans; [apply Rabs_triang |].
  assert (us * Rabs o <= us * (W + err)) by (apply Rmult_le_compat_l; lra).
  lra.
Qed.

(** ** The H100 instances *)

(** The float32 forward on the H100 (Triton's 3xTF32 on its tensor cores): the scores'
    dot [tf32x3_dot_tc_op] ([tf32x3_tc_op_dot_model], head dim [E <= qb k]) and the
    P.V [tl.dot (p, v, acc * alpha)] as Triton runs it in fp32: the three TF32 dots
    chained from 0 on the tensor cores, then [acc * alpha] added with one fp32 rounding
    ([tf32x3_acc_fn F out rnd k], [tf32x3_tc_op_acc_dot_model], tiles of [n <= qv k]
    keys): [g_rel = u + (1 + u) tf32x3_tc_rel (2^(1-F)) ur k qv], [g_abs = (1 + u) 0 + ea]. *)
Theorem attention_forward_acc_posteriori_tf32x3_op : forall (out : R -> R) (ur : R) (F : Z) (k qb qv : nat)
    (q : list R) (c scale uc P V X Y P1 CG CR CGA CRA : R) (E n N Tt : nat)
    (vis : list R * R -> bool) (tiles : list (list (list R * R))),
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
  cgA M g_rel ^ Tt <= CGA -> crA M g_rel ^ Tt <= CRA ->
  length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true ->
     length (fst kv) = E /\ dot_abs q (fst kv) <= P /\ Rabs (snd kv) <= V) ->
  Forall (fun tl => length tl = n) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rabs (ff_rnd S_ (rnd (nth 0 (ks_acc st) 0 / ks_l st)) - exact_softmax scale q (filter vis (concat tiles)))
  <= afa_rel u ue ee ea us n N Tt X Y P1 CG CR CGA
       * exact_softmax scale q (map abs_value (filter vis (concat tiles)))
     + afa_abs u ue ee ea us es V n N Tt X P1 CG CR CGA CRA g_rel g_abs.
Proof.
  intros out ur F k qb qv q c scale uc P V X Y P1 CG CR CGA CRA E n N Tt vis tiles dotf accf g_rel g_abs sck st
    Hur Hout Hk Hq HE Hd Hqv Hn Hdv Hexp0 Hvis Hpre.
  exact (attention_forward_acc_posteriori dotf _ 0 accf n g_rel g_abs q c scale uc P V X Y P1 CG CR CGA CRA E N Tt
           vis tiles Hexp0 Hvis (tf32x3_tc_op_dot_model out ur F k qb E Hur Hout Hk Hq HE Hd)
           (tf32x3_tc_op_acc_dot_model out rnd ur u ea F k qv n Hur Hout (ff_u_nonneg _) (ff_abs _) Hk Hqv Hn Hdv)
           Hpre).
Qed.

(** The bf16 (or fp16) forward on the H100: the scores' dot and the P.V accumulate on
    the tensor cores ([tc_dot_op], [tc_op_dot_model], head dim [E <= qb k]; P.V
    [tc_acc_fn F out k]: the chain from [acc * alpha] aligned and truncated with each
    block of [k] products, [tc_acc_op_dot_model], tiles of [n <= qv k] keys):
    [g_rel = gamma (tc_delta (2^(1-F)) ur k) qv], [g_abs = 0]. *)
Theorem attention_forward_acc_posteriori_tc_op : forall (out : R -> R) (ur : R) (F : Z) (k qb qv : nat)
    (q : list R) (c scale uc P V X Y P1 CG CR CGA CRA : R) (E n N Tt : nat)
    (vis : list R * R -> bool) (tiles : list (list (list R * R))),
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
  cgA M g_rel ^ Tt <= CGA -> crA M g_rel ^ Tt <= CRA ->
  length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true ->
     length (fst kv) = E /\ dot_abs q (fst kv) <= P /\ Rabs (snd kv) <= V) ->
  Forall (fun tl => length tl = n) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rabs (ff_rnd S_ (rnd (nth 0 (ks_acc st) 0 / ks_l st)) - exact_softmax scale q (filter vis (concat tiles)))
  <= afa_rel u ue ee ea us n N Tt X Y P1 CG CR CGA
       * exact_softmax scale q (map abs_value (filter vis (concat tiles)))
     + afa_abs u ue ee ea us es V n N Tt X P1 CG CR CGA CRA g_rel 0.
Proof.
  intros out ur F k qb qv q c scale uc P V X Y P1 CG CR CGA CRA E n N Tt vis tiles dotf accf g_rel sck st
    Hur Hout Hk Hq HE Hd Hqv Hn Hdv Hexp0 Hvis Hpre.
  exact (attention_forward_acc_posteriori dotf _ 0 accf n g_rel 0 q c scale uc P V X Y P1 CG CR CGA CRA E N Tt
           vis tiles Hexp0 Hvis (tc_op_dot_model out ur F k qb E Hur Hout Hk Hq HE Hd)
           (tc_acc_op_dot_model out ur F k qv n Hur Hout Hk Hqv Hn Hdv) Hpre).
Qed.

End Posteriori.
