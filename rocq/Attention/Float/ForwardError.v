(** * Forward attention in mixed precision, the rounding of the scores included.

    PART A (generic): softmax-weighted averages over any list of keys move by
    at most [(exp (2 delta) - 1) V] when every score moves by at most
    [delta] ([softmax_average_perturbation], from
    [ScorePerturbation.sp_softmax_average_bound]), and do not change when
    every score is shifted by one constant ([softmax_average_shift]).

    PART B (the kernel's scores): [score2 c q k = rnd (blocked_dot (E) q k * c)],
    the fp32 dot over the head dim [E] (each product rounded to fp32, the
    [E] products summed left to right: [blocked_dot] with one tile of [E])
    times the fp32 constant [c = qk_scale] of kernels/ojas_kernels/attention_args.py, a base-2
    score.  With [|c ln 2 - scale| <= uc scale] and [sum_i |q_i k_i| <= P]:
    [score2_error]: |score2 ln 2 - scale (q . k)| <= [score_delta] and
    |score2| <= [score_max] (closed forms below).

    PART C (fully visible tiles): [attention_forward_error] composes [score2_error],
    [online_softmax_output_error] (OnlineSoftmaxTile.v) on the kernel's
    tiles of (score2, value coordinate) pairs, [softmax_average_perturbation]
    and the final store of the output to the storage format:
      |rnd_s (rnd (acc / l)) - softmax(scale q.k) . v| <= attn_fwd_rel * V,
    with [attn_fwd_rel] a closed form of the model's constants and of
    upper bounds [X >= 2^(u K)], [Y >= exp (2 score_delta) - 1],
    [P1 >= (1+u)^(B-1)], [CG >= cg^Tt], [CR >= cr^Tt] (so that its value can
    be computed over the rationals: Bounds/Attention.v, [attn_fwd_q],
    [attn_fwd_q_sound]).  The tiles are the kernel's key tiles of one query
    row ([(k0 :: tl0) :: rest], at most [B] keys each, at most [N] keys and
    [Tt] tiles); [acc_run]/[l_run] start from [(m0, 0)] with [m0] the score
    of the first key of the first tile, which is the kernel's start
    [m = -inf, l = acc = 0] ([run_first], OnlineSoftmaxTile.v); the exact
    value is the softmax of [scale * q.k] over the same keys
    ([exact_softmax]).  Grouped-query attention changes only which key and
    value head a row reads, so the statement (one row, any keys) covers it.

    PART B' (the dot as a parameter): [dot_model dotf E g_rel g_abs], the
    premise [|dotf q k - q.k| <= g_rel sum_i |q_i k_i| + g_abs] on vectors of
    length [E]; [score2_with dotf], [score2_with_error],
    [attention_forward_error_dot], [attention_forward_error_masked_dot] (and
    the [_dot] forms in SavedLseError.v, ForwardPosteriori.v, DvError.v,
    DkDqError.v) take any such dot; the blocked fp32 sum above is the
    instance [blocked_dot_model] ([g_rel P + g_abs = dot_err E P]) and the
    theorems without [_dot] are their corollaries at it.

    PART E (float32 on CUDA): the 3xTF32 dot of FloatModel/Tf32Product.v is
    a dot model on tensor cores ([tf32x3_tc_dot_model]) and accumulated left
    to right in fp32 ([tf32x3_seq_dot_model]):
    [attention_forward_error_masked_tf32x3] (and [_seq]); the 16-bit
    kernels' tensor-core dot of FloatModel/TensorCoreSum.v is one too
    ([tc_dot_model], [attention_forward_error_masked_tc]); with the block's
    terms aligned to the operands' exponents, as the H100's tensor cores do
    ([tc_align_op]): [tf32x3_tc_op_dot_model], [tc_op_dot_model],
    [attention_forward_error_masked_tf32x3_op], [attention_forward_error_masked_tc_op].

    PART F (the accumulating dots [tl.dot (a, b, acc)]): NumeratorError.v's
    [acc_dot_model accf n g_rel g_abs] ([|accf c a b - (c + a.b)| <=
    g_rel (|c| + sum |a_i b_i|) + g_abs]); instances [acc_of_dot_model] (any
    dot model from 0, then one rounded addition: the fp32 per-product model
    [blocked_acc_dot_model], Triton's 3xTF32 [tf32x3_tc_op_acc_dot_model])
    and the H100's tensor-core chain from [c] ([tc_acc_op_dot_model]);
    [acc_chain_error] (t such dots in a row: the backward's dV, dK, dQ,
    DvError.v and DkDqError.v); [tile_acc_dot_step] (one forward key tile
    [acc = tl.dot (p, v, acc * alpha)] in [rescale_step]'s [inv] form).

    PART D (the kernel's loop, any mask): [attention_forward_error_masked]:
    the same bound for [kernel_run] (OnlineSoftmaxTile.v: the kernel's step
    with its mask [vis], from its start [m = -inf, l = acc = 0]) over any key
    tiles, against the softmax over the visible keys: the causal diagonal,
    windows, boolean masks and a last tile cut by the sequence end.  A masked
    key has weight exactly [0] and adding an exact [0] changes nothing
    ([kernel_step_some], [kernel_run_start]); fully masked tiles are skipped
    exactly ([kernel_start_skip_masked_tiles], premise [exp2 0 = 1]).

    Not covered (beyond what OnlineSoftmaxTile.v lists: [tl.sum] as a tree,
    the order inside one MMA, the acc update fused into the MMA, an FMA in
    [l * alpha + sum]): the dot [q.k] of the theorems without [_dot] is
    modelled as a left-to-right fp32 sum of the [E] rounded products, not
    the tensor core's order (nor an FMA chain: the [_dot] theorems take any
    dot model, PART E the 3xTF32 ones, whose tensor-core parameters are
    premises checked on the device); [s * qk_scale - m] is modelled as two
    roundings (a compiler may contract it to one FMA); additive float masks
    (they change the scores); the P.V MMA accumulating into [acc] in the
    end-to-end theorems (modelled as [rnd (rnd (acc alpha) + P.V)]; PART F's
    [tile_acc_dot_step] is the one-tile step with any accumulating model,
    not yet folded over the tiles); overflow (Flocq's [FLT_exp] has no
    largest exponent).  The relative error [mp_ue] of the computed [exp2]
    is a field of the model: for the kernel's [ex2.approx] it is an
    assumption, not a theorem (as is [ex2.approx (0) = 1], PART D).  *)

From Coq Require Import Reals ZArith List Lra Lia Arith.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.NoUnderflow FloatModel.DotError Attention.BackwardCorrect Attention.ScorePerturbation.
From Ojas Require Import FloatModel.MixedPrecision FloatModel.BlockedSum FloatModel.TensorCoreSum FloatModel.Tf32Product.
From Ojas Require Import FloatModel.Notations.
From Ojas Require Import Attention.Float.OnlineSoftmaxError Attention.Float.OnlineSoftmaxTile.
From Ojas Require Import Attention.Float.NumeratorError.
Import ListNotations.
Open Scope R_scope.

(** ** PART A: softmax averages over any list of keys *)

Lemma afe_map_seq_nth : forall {T} (xs : list T) (d : T),
  map (fun k => nth k xs d) (seq 0 (length xs)) = xs.
Proof.
  intros T xs d.
  apply nth_ext with (d := nth 0%nat xs d) (d' := d); [rewrite map_length, seq_length; reflexivity |].
  intros n Hn; rewrite map_length, seq_length in Hn.
  change (nth 0%nat xs d) with ((fun k => nth k xs d) 0%nat).
  rewrite map_nth, seq_nth by exact Hn; reflexivity.
Qed.

Lemma afe_rsum_index : forall {T} (f : T -> R) (xs : list T) d,
  rsum (map (fun k => f (nth k xs d)) (seq 0 (length xs))) = rsum (map f xs).
Proof.
  intros T f xs d; rewrite <- (map_map (fun k => nth k xs d) f), afe_map_seq_nth; reflexivity.
Qed.

Theorem softmax_average_perturbation : forall {T} (xs : list T) (S S' v : T -> R) delta V,
  0 <= delta -> 0 <= V ->
  (forall x, In x xs -> Rabs (S' x - S x) <= delta) ->
  (forall x, In x xs -> Rabs (v x) <= V) ->
  Rabs (rsum (map (fun x => exp (S' x) * v x) xs) / rsum (map (fun x => exp (S' x)) xs)
        - rsum (map (fun x => exp (S x) * v x) xs) / rsum (map (fun x => exp (S x)) xs))
  <= (exp (2 * delta) - 1) * V.
Proof.
  intros T xs S S' v delta V Hd HV HS Hv.
  destruct xs as [|d xs'] eqn:E.
  - cbn [map]; unfold rsum; simpl; unfold Rdiv; rewrite Rmult_0_l, Rminus_0_r, Rabs_R0.
    assert (1 <= exp (2 * delta)) by (rewrite <- exp_0; apply sp_exp_le; lra).
    apply Rmult_le_pos; lra.
  - rewrite <- E in *.
    rewrite <- (afe_rsum_index (fun x => exp (S' x) * v x) xs d).
    rewrite <- (afe_rsum_index (fun x => exp (S' x)) xs d).
    rewrite <- (afe_rsum_index (fun x => exp (S x) * v x) xs d).
    rewrite <- (afe_rsum_index (fun x => exp (S x)) xs d).
    apply (sp_softmax_average_bound (seq 0 (length xs)) (fun k => S (nth k xs d))
             (fun k => S' (nth k xs d)) (fun k => v (nth k xs d))); auto.
    + intros k Hk; apply in_seq in Hk; apply HS, nth_In; lia.
    + intros k Hk; apply in_seq in Hk; apply Hv, nth_In; lia.
Qed.

Lemma softmax_average_shift : forall {T} (xs : list T) (S v : T -> R) a,
  rsum (map (fun x => exp (S x - a) * v x) xs) / rsum (map (fun x => exp (S x - a)) xs)
  = rsum (map (fun x => exp (S x) * v x) xs) / rsum (map (fun x => exp (S x)) xs).
Proof.
  intros T xs S v a.
  rewrite (rsum_map_ext (fun x => exp (S x - a) * v x) (fun x => exp (- a) * (exp (S x) * v x)))
    by (intros; unfold Rminus; rewrite exp_plus; ring).
  rewrite (rsum_map_ext (fun x => exp (S x - a)) (fun x => exp (- a) * exp (S x)))
    by (intros; unfold Rminus; rewrite exp_plus; ring).
  rewrite !rsum_map_scal_l.
  pose proof (exp_pos (- a)).
  destruct (Req_dec (rsum (map (fun x => exp (S x)) xs)) 0) as [Z | Z].
  - rewrite Z, Rmult_0_r; unfold Rdiv; rewrite Rinv_0; ring.
  - field; split; [exact Z | lra].
Qed.

(** [ln 2] between [1/2] and [1]. *)
Lemma afe_ln2_bounds : / 2 < ln 2 < 1.
Proof.
  split; [exact ln_lt_2 |].
  rewrite <- ln_exp with 1; apply ln_increasing; [lra |].
  pose proof (exp_ineq1 1 ltac:(lra)); lra.
Qed.

(** [Rpower 2 x = exp (x ln 2)], the base-2 weights as natural exponentials. *)
Lemma afe_rpower2 : forall x, Rpower 2 x = exp (x * ln 2).
Proof. reflexivity. Qed.

(** ** PART B: the kernel's scores *)

Definition dot_R (a b : list R) : R := rsum (map (fun xy => fst xy * snd xy) (combine a b)).
Definition dot_abs (a b : list R) : R := rsum (map (fun xy => Rabs (fst xy * snd xy)) (combine a b)).

Lemma dot_R_abs : forall a b, Rabs (dot_R a b) <= dot_abs a b.
Proof. intros; unfold dot_R, dot_abs; apply bw_rsum_abs. Qed.

(** The dot as a function with its error premise, on vectors of length [E]:
    [|dotf q k - q.k| <= g_rel sum_i |q_i k_i| + g_abs].  A conjunction of
    premises, nothing more. *)
Record dot_model (dotf : list R -> list R -> R) (E : nat) (g_rel g_abs : R) : Prop := {
  dm_rel_nonneg : 0 <= g_rel;
  dm_err : forall q k, length q = E -> length k = E ->
    Rabs (dotf q k - dot_R q k) <= g_rel * dot_abs q k + g_abs
}.

Section Scores.

Variable A : FloatFormat.
Local Notation rnd := (ff_rnd A).
Local Notation u := (ff_u A).
Local Notation ea := (ff_eta A).

(** The kernel's base-2 score: [s = tl.dot(q, k^T)] (fp32 accumulation over the
    head dim), then [s * qk_scale] rounded to fp32. *)
Definition score2 (c : R) (q k : list R) : R := rnd (blocked_dot A (length q) q k * c).

(** The error of the dot ([blocked_dot_error_bound_rounded] with one tile of [E]). *)
Definition dot_err (E : nat) (P : R) : R := gamma u E * P + (1 + gamma u (E - 1)) * INR E * ea.

Definition score_delta (scale uc : R) (E : nat) (P : R) : R :=
  scale * ((P + dot_err E P) * (u * (1 + uc) + uc) + dot_err E P) + ea.

Definition score_max (scale uc : R) (E : nat) (P : R) : R :=
  2 * (scale * (1 + uc) * (P + dot_err E P)) * (1 + u) + ea.

Lemma gamma_nonneg : forall n, INR n * u < 1 -> 0 <= gamma u n.
Proof.
  intros n H; unfold gamma, Rdiv; pose proof (ff_u_nonneg A); pose proof (pos_INR n).
  apply Rmult_le_pos; [nra | left; apply Rinv_0_lt_compat; lra].
Qed.

Lemma dot_err_nonneg : forall E P, INR E * u < 1 -> 0 <= P -> 0 <= dot_err E P.
Proof.
  intros E P HE HP; unfold dot_err; pose proof (ff_u_nonneg A); pose proof (ff_eta_nonneg A).
  assert (H1 : INR (E - 1) * u < 1) by (assert (INR (E - 1) <= INR E) by (apply le_INR; lia); nra).
  pose proof (gamma_nonneg E HE); pose proof (gamma_nonneg (E - 1) H1); pose proof (pos_INR E).
  apply Rplus_le_le_0_compat; [apply Rmult_le_pos; lra | apply Rmult_le_pos; [apply Rmult_le_pos |]; lra].
Qed.

Lemma score_max_nonneg : forall scale uc E P, 0 <= scale -> 0 <= uc -> 0 <= P -> INR E * u < 1 ->
  0 <= score_max scale uc E P.
Proof.
  intros scale uc E P Hs Hc HP HE; unfold score_max.
  pose proof (dot_err_nonneg E P HE HP); pose proof (ff_u_nonneg A); pose proof (ff_eta_nonneg A).
  assert (0 <= scale * (1 + uc) * (P + dot_err E P)) by (apply Rmult_le_pos; [apply Rmult_le_pos |]; lra).
  nra.
Qed.

Lemma dot_err_bound : forall q k E P,
  length q = E -> length k = E -> (1 <= E)%nat -> INR E * u < 1 -> dot_abs q k <= P ->
  Rabs (blocked_dot A E q k - dot_R q k) <= dot_err E P.
Proof.
  intros q k E P Hq Hk HE Hu HP.
  assert (Hc : length (combine q k) = E) by (rewrite combine_length; lia).
  assert (HS : S ((E - 1) + (1 - 1)) = E) by lia.
  pose proof (blocked_dot_error_bound_rounded A E 1 q k HE (le_n 1) ltac:(lia) ltac:(rewrite HS; exact Hu)) as H.
  rewrite HS, Hc in H; replace ((E - 1) + (1 - 1))%nat with (E - 1)%nat in H by lia.
  unfold dot_err, dot_R; eapply Rle_trans; [exact H |].
  apply Rplus_le_compat_r, Rmult_le_compat_l; [apply gamma_nonneg, Hu | exact HP].
Qed.

(** ** PART B': the dot as a parameter

    The scores' dot [q.k] as any function [dotf] with an error premise of
    the shape [dot_err_bound] gives: [dot_model dotf E g_rel g_abs] says
    that on vectors of length [E] the computed dot is within
    [g_rel sum_i |q_i k_i| + g_abs] of the exact one.  The blocked fp32 sum
    is one instance ([blocked_dot_model]: [g_rel = gamma u E],
    [g_abs = (1 + gamma u (E - 1)) E ea], so that [g_rel P + g_abs] is
    [dot_err E P]); the 3xTF32 dot of FloatModel/Tf32Product.v, accumulated
    left to right in fp32 or on tensor cores, are others
    (Attention/Float/Tf32x3Scores.v).  The theorems below with [_with] /
    [_dot] take [dotf] and its [dot_model]; the original ones are their
    blocked instance, with the same statements. *)

Definition bdot (q k : list R) : R := blocked_dot A (length q) q k.

(** The kernel's base-2 score with the dot [dotf]: [rnd (dotf q k * c)]
    ([score2] is [score2_with bdot]). *)
Definition score2_with (dotf : list R -> list R -> R) (c : R) (q k : list R) : R := rnd (dotf q k * c).

(** [score_delta] and [score_max] with the dot's error [de] in place of [dot_err E P]. *)
Definition score_delta_de (scale uc P de : R) : R :=
  scale * ((P + de) * (u * (1 + uc) + uc) + de) + ea.

Definition score_max_de (scale uc P de : R) : R :=
  2 * (scale * (1 + uc) * (P + de)) * (1 + u) + ea.

Lemma score_delta_de_eq : forall scale uc E P, score_delta scale uc E P = score_delta_de scale uc P (dot_err E P).
Proof. reflexivity. Qed.

Lemma score_max_de_eq : forall scale uc E P, score_max scale uc E P = score_max_de scale uc P (dot_err E P).
Proof. reflexivity. Qed.

(** The blocked fp32 dot is a dot model: [g_rel P + g_abs = dot_err E P]. *)
Lemma blocked_dot_model : forall E, (1 <= E)%nat -> INR E * u < 1 ->
  dot_model bdot E (gamma u E) ((1 + gamma u (E - 1)) * INR E * ea).
Proof.
  intros E HE Hu; split; [apply gamma_nonneg, Hu |].
  intros q k Hq Hk; unfold bdot; rewrite Hq.
  exact (dot_err_bound q k E (dot_abs q k) Hq Hk HE Hu (Rle_refl _)).
Qed.

(** One score from a computed dot [D] within [de] of [q.k]. *)
Lemma score_of_dot_error : forall D c scale uc q k P de,
  Rabs (D - dot_R q k) <= de ->
  0 < scale -> 0 <= uc -> Rabs (c * ln 2 - scale) <= uc * scale ->
  dot_abs q k <= P ->
  Rabs (rnd (D * c) * ln 2 - scale * dot_R q k) <= score_delta_de scale uc P de
  /\ Rabs (rnd (D * c)) <= score_max_de scale uc P de.
Proof.
  intros D c scale uc q k P de Hd Hs Huc Hc HP.
  pose proof (ff_u_nonneg A) as Hu0; pose proof (ff_eta_nonneg A) as Hea.
  pose proof afe_ln2_bounds as [L1 L2].
  set (d := dot_R q k) in *.
  pose proof (dot_R_abs q k) as Hdd; fold d in Hdd.
  assert (HD : Rabs D <= P + de).
  { replace D with ((D - d) + d) by ring; eapply Rle_trans; [apply Rabs_triang | lra]. }
  assert (Hca : Rabs c * ln 2 <= (1 + uc) * scale).
  { replace c with ((c * ln 2 - scale) / ln 2 + scale / ln 2) by (field; lra).
    assert (Rabs ((c * ln 2 - scale) / ln 2 + scale / ln 2) <= uc * scale / ln 2 + scale / ln 2).
    { eapply Rle_trans; [apply Rabs_triang |]; unfold Rdiv; rewrite !Rabs_mult.
      rewrite (Rabs_right (/ ln 2)) by (left; apply Rinv_0_lt_compat; lra).
      rewrite (Rabs_right scale) by lra.
      apply Rplus_le_compat_r, Rmult_le_compat_r; [left; apply Rinv_0_lt_compat; lra | exact Hc]. }
    apply Rmult_le_compat_r with (r := ln 2) in H; [| lra].
    replace ((uc * scale / ln 2 + scale / ln 2) * ln 2) with ((1 + uc) * scale) in H by (field; lra).
    exact H. }
  pose proof (ff_abs A (D * c)) as Hr.
  set (r := rnd (D * c)) in *.
  rewrite Rabs_mult in Hr.
  assert (HDc : Rabs D * Rabs c * ln 2 <= (P + de) * ((1 + uc) * scale)).
  { rewrite Rmult_assoc; pose proof (Rabs_pos c); pose proof (Rabs_pos D).
    apply Rmult_le_compat; [lra | nra | lra | lra]. }
  assert (HDc' : Rabs D * Rabs c <= 2 * ((P + de) * ((1 + uc) * scale))).
  { assert (0 <= Rabs D * Rabs c) by (apply Rmult_le_pos; apply Rabs_pos). nra. }
  split.
  - (* r ln 2 - scale d = (r - D c) ln 2 + D (c ln 2 - scale) + scale (D - d) *)
    replace (r * ln 2 - scale * d)
      with ((r - D * c) * ln 2 + D * (c * ln 2 - scale) + scale * (D - d)) by ring.
    eapply Rle_trans; [apply Rabs_triang |].
    eapply Rle_trans; [apply Rplus_le_compat_r, Rabs_triang |].
    rewrite !Rabs_mult, (Rabs_right (ln 2)), (Rabs_right scale) by lra.
    assert (E1 : Rabs (r - D * c) * ln 2 <= u * ((P + de) * ((1 + uc) * scale)) + ea).
    { assert (Rabs (r - D * c) * ln 2 <= (u * (Rabs D * Rabs c) + ea) * ln 2)
        by (apply Rmult_le_compat_r; lra).
      assert (u * (Rabs D * Rabs c * ln 2) <= u * ((P + de) * ((1 + uc) * scale)))
        by (apply Rmult_le_compat_l; lra).
      nra. }
    assert (E2 : Rabs D * Rabs (c * ln 2 - scale) <= (P + de) * (uc * scale))
      by (apply Rmult_le_compat; try apply Rabs_pos; lra).
    assert (E3 : scale * Rabs (D - d) <= scale * de) by (apply Rmult_le_compat_l; lra).
    unfold score_delta_de.
    nra.
  - replace r with ((r - D * c) + D * c) by ring.
    eapply Rle_trans; [apply Rabs_triang |]; rewrite Rabs_mult.
    unfold score_max_de.
    assert (u * (Rabs D * Rabs c) <= u * (2 * ((P + de) * ((1 + uc) * scale))))
      by (apply Rmult_le_compat_l; lra).
    nra.
Qed.

(** The score with any dot model: [score_delta_de] / [score_max_de] at the
    dot's error [g_rel P + g_abs]. *)
Theorem score2_with_error : forall dotf E g_rel g_abs c scale uc q k P,
  dot_model dotf E g_rel g_abs ->
  length q = E -> length k = E ->
  0 < scale -> 0 <= uc -> Rabs (c * ln 2 - scale) <= uc * scale ->
  dot_abs q k <= P ->
  Rabs (score2_with dotf c q k * ln 2 - scale * dot_R q k) <= score_delta_de scale uc P (g_rel * P + g_abs)
  /\ Rabs (score2_with dotf c q k) <= score_max_de scale uc P (g_rel * P + g_abs).
Proof.
  intros dotf E g_rel g_abs c scale uc q k P [Hg Hm] Hq Hk Hs Huc Hc HP.
  apply score_of_dot_error; auto.
  eapply Rle_trans; [apply Hm; assumption |].
  apply Rplus_le_compat_r, Rmult_le_compat_l; assumption.
Qed.

(** The blocked fp32 dot: [score2_with_error] at [blocked_dot_model]. *)
Theorem score2_error : forall c scale uc q k E P,
  length q = E -> length k = E -> (1 <= E)%nat -> INR E * u < 1 ->
  0 < scale -> 0 <= uc -> Rabs (c * ln 2 - scale) <= uc * scale ->
  dot_abs q k <= P ->
  Rabs (score2 c q k * ln 2 - scale * dot_R q k) <= score_delta scale uc E P
  /\ Rabs (score2 c q k) <= score_max scale uc E P.
Proof.
  intros c scale uc q k E P Hq Hk HE Hu Hs Huc Hc HP.
  exact (score2_with_error bdot E _ _ c scale uc q k P (blocked_dot_model E HE Hu) Hq Hk Hs Huc Hc HP).
Qed.

End Scores.

(** ** PART C: end to end *)

(** The closed forms.  [X >= 2^(u K)], [P1 >= (1+u)^(B-1)], [CG >= cg^Tt],
    [CR >= cr^Tt], [Y >= exp (2 score_delta) - 1]. *)
Definition afe_bL (u ue ee ea : R) (B N Tt : nat) (X P1 CG CR : R) : R :=
  let H := P1 * ((1 + ue) * X) in
  H * CG * X - 1 + INR Tt * CR * (((H * CG * X) * INR N * ee) * (1 + u) + ea + P1 * (INR B * ee)) * (1 + u).

Definition afe_bN (u ue ee ea us es V : R) (B N Tt : nat) (X P1 CG CR : R) : R :=
  let H := P1 * ((1 + u) * (1 + us) * ((1 + ue) * X)) in
  H * CG * X - 1
  + INR Tt * CR * (((H * CG * X) * (INR N * V) * ee) * (1 + u) + ea
                   + P1 * ((1 + u) * ((1 + us) * ee + es) * (INR B * V) + INR B * ea)) * (1 + u) / V.

Definition afe_rel (u ue ee ea us es V : R) (B N Tt : nat) (X Y P1 CG CR : R) : R :=
  let bL := afe_bL u ue ee ea B N Tt X P1 CG CR in
  let bN := afe_bN u ue ee ea us es V B N Tt X P1 CG CR in
  ((((bN + bL) + u * (1 + bN)) / (1 - bL) + ea / V + Y) * (1 + us) + us + es / V).

Lemma afe_f_mono : forall u bN bL bN' bL', 0 <= u -> 0 <= bN -> 0 <= bL -> bN <= bN' -> bL <= bL' ->
  bL' < 1 -> ((bN + bL) + u * (1 + bN)) / (1 - bL) <= ((bN' + bL') + u * (1 + bN')) / (1 - bL').
Proof.
  intros u bN bL bN' bL' Hu H1 H2 H3 H4 H5; unfold Rdiv.
  assert (/ (1 - bL) <= / (1 - bL')) by (apply Rinv_le_contravar; lra).
  assert (0 < / (1 - bL)) by (apply Rinv_0_lt_compat; lra).
  apply Rmult_le_compat; [nra | lra | nra | lra].
Qed.

Lemma softmax_average_abs_le : forall {T} (xs : list T) (S v : T -> R) V, 0 <= V ->
  (forall x, In x xs -> Rabs (v x) <= V) ->
  Rabs (rsum (map (fun x => exp (S x) * v x) xs) / rsum (map (fun x => exp (S x)) xs)) <= V.
Proof.
  intros T xs S v V HV Hv.
  set (Z := rsum (map (fun x => exp (S x)) xs)).
  assert (HZ : 0 <= Z).
  { apply rsum_nonneg; intros y Hy; apply in_map_iff in Hy; destruct Hy as [x [<- _]]; left; apply exp_pos. }
  assert (Hn : Rabs (rsum (map (fun x => exp (S x) * v x) xs)) <= V * Z).
  { eapply Rle_trans; [apply bw_rsum_abs |]; unfold Z; rewrite <- rsum_map_scal_l; apply bw_rsum_le.
    intros x Hx; rewrite Rabs_mult, (Rabs_right (exp (S x))) by (left; apply exp_pos).
    rewrite Rmult_comm; apply Rmult_le_compat_r; [left; apply exp_pos | apply Hv, Hx]. }
  destruct (Req_dec Z 0) as [E0 | E0].
  - rewrite E0; unfold Rdiv; rewrite Rinv_0, Rmult_0_r, Rabs_R0; exact HV.
  - unfold Rdiv; rewrite Rabs_mult, (Rabs_right (/ Z)) by (left; apply Rinv_0_lt_compat; lra).
    apply (Rmult_le_reg_r Z); [lra |]; rewrite Rmult_assoc, Rinv_l by exact E0; lra.
Qed.

Section Forward.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

Lemma Gk_apriori : forall H H' m0 Tt t mt K X CG,
  0 <= H <= H' -> (t <= Tt)%nat -> m0 <= mt -> mt - m0 <= K ->
  Rpower 2 (u * K) <= X -> cg M ^ Tt <= CG -> Gk M H m0 t mt <= H' * CG * X.
Proof.
  intros H H' m0 Tt t mt K X CG HH Ht Hm HK HX HC; unfold Gk.
  pose proof (cg_ge_1 M); pose proof (ff_u_nonneg A_).
  assert (cg M ^ t <= cg M ^ Tt) by (apply Rle_pow; [lra | exact Ht]).
  assert (0 <= cg M ^ t) by (apply pow_le; lra).
  assert (Rpower 2 (u * (mt - m0)) <= Rpower 2 (u * K)) by (apply ost_rpow_le; nra).
  pose proof (Rpower_pos (u * (mt - m0))).
  apply Rmult_le_compat; [nra | lra | apply Rmult_le_compat; lra | lra].
Qed.

(** [Rk]'s closed form with any constant [G <= CG] in place of [cg^Tt] (ForwardAccRunningCounted.v
    takes [G = CGc]). *)
Lemma Rk_form_apriori : forall K H H' G CG Ry Ry' Sb Tt t X CR,
  0 <= H <= H' -> 0 <= G <= CG -> 0 <= Ry <= Ry' -> 0 <= Sb -> (t <= Tt)%nat ->
  Rpower 2 (u * K) <= X -> cr M ^ Tt <= CR ->
  INR t * cr M ^ t * (((H * G * Rpower 2 (u * K) * Sb * ee) * (1 + u) + ea + Ry) * (1 + u))
  <= INR Tt * CR * ((((H' * CG * X) * Sb * ee) * (1 + u) + ea + Ry') * (1 + u)).
Proof.
  intros K H H' G CG Ry Ry' Sb Tt t X CR HH HG HR HS Ht HX HC.
  pose proof (cr_ge_1 M); pose proof (ff_u_nonneg A_).
  pose proof (mp_eta_e_nonneg M); pose proof (ff_eta_nonneg A_).
  pose proof (Rpower_pos (u * K)).
  assert (HGb : H * G * Rpower 2 (u * K) <= H' * CG * X)
    by (apply Rmult_le_compat; [nra | lra | apply Rmult_le_compat; lra | lra]).
  assert (0 <= H * G * Rpower 2 (u * K)) by (apply Rmult_le_pos; [nra | lra]).
  assert (Hd : 0 <= ((H * G * Rpower 2 (u * K) * Sb * ee) * (1 + u) + ea + Ry) * (1 + u)).
  { apply Rmult_le_pos; [| lra]. assert (0 <= H * G * Rpower 2 (u * K) * Sb * ee) by
      (apply Rmult_le_pos; [apply Rmult_le_pos |]; lra). nra. }
  assert (Hd' : ((H * G * Rpower 2 (u * K) * Sb * ee) * (1 + u) + ea + Ry) * (1 + u)
                <= ((H' * CG * X * Sb * ee) * (1 + u) + ea + Ry') * (1 + u)).
  { apply Rmult_le_compat_r; [lra |].
    assert (H * G * Rpower 2 (u * K) * Sb * ee <= H' * CG * X * Sb * ee)
      by (apply Rmult_le_compat_r; [lra | apply Rmult_le_compat_r; lra]).
    nra. }
  assert (Hc : cr M ^ t <= CR) by (eapply Rle_trans; [apply Rle_pow; [lra | exact Ht] | exact HC]).
  assert (0 <= cr M ^ t) by (apply pow_le; lra).
  assert (INR t <= INR Tt) by (apply le_INR, Ht).
  pose proof (pos_INR t).
  apply Rmult_le_compat; [apply Rmult_le_pos; lra | exact Hd | | exact Hd'].
  apply Rmult_le_compat; lra.
Qed.

Lemma Rk_apriori : forall K H H' Ry Ry' Sb Tt t X CG CR,
  0 <= H <= H' -> 0 <= Ry <= Ry' -> 0 <= Sb -> (t <= Tt)%nat ->
  Rpower 2 (u * K) <= X -> cg M ^ Tt <= CG -> cr M ^ Tt <= CR ->
  Rk M K H Ry Sb Tt t <= INR Tt * CR * ((((H' * CG * X) * Sb * ee) * (1 + u) + ea + Ry') * (1 + u)).
Proof.
  intros K H H' Ry Ry' Sb Tt t X CG CR HH HR HS Ht HX HG HC; unfold Rk, dR, Gb.
  assert (0 <= cg M ^ Tt) by (apply pow_le; pose proof (cg_ge_1 M); lra).
  apply Rk_form_apriori; [exact HH | lra | exact HR | exact HS | exact Ht | exact HX | exact HC].
Qed.


Lemma H_l_bounds : forall K B X P1, 0 <= K -> Rpower 2 (u * K) <= X -> (1 + u) ^ (B - 1) <= P1 ->
  1 <= H_l M K B <= P1 * ((1 + ue) * X).
Proof.
  intros K B X P1 HK HX HP; unfold H_l, tile_E.
  pose proof (ff_u_nonneg A_); pose proof (mp_ue_nonneg M).
  assert (1 <= (1 + u) ^ (B - 1)) by (apply pow_R1_Rle; lra).
  assert (1 <= Rpower 2 (u * K)) by (apply ose_rpow_ge_1; nra).
  assert (1 <= (1 + ue) * Rpower 2 (u * K)) by nra.
  split; [nra |]. apply Rmult_le_compat; [lra | lra | lra | nra].
Qed.

Lemma H_acc_bounds : forall K B X P1, 0 <= K -> Rpower 2 (u * K) <= X -> (1 + u) ^ (B - 1) <= P1 ->
  1 <= H_acc M K B <= P1 * ((1 + u) * (1 + us) * ((1 + ue) * X)).
Proof.
  intros K B X P1 HK HX HP; unfold H_acc, tile_acc_H, tile_E.
  pose proof (ff_u_nonneg A_); pose proof (mp_ue_nonneg M); pose proof (ff_u_nonneg S_).
  assert (1 <= (1 + u) ^ (B - 1)) by (apply pow_R1_Rle; lra).
  assert (1 <= Rpower 2 (u * K)) by (apply ose_rpow_ge_1; nra).
  assert (1 <= (1 + u) * (1 + us)) by nra.
  assert (1 <= (1 + ue) * Rpower 2 (u * K)) by nra.
  assert (1 <= (1 + u) * (1 + us) * ((1 + ue) * Rpower 2 (u * K))) by nra.
  split; [nra |]. apply Rmult_le_compat; [lra | lra | lra |].
  apply Rmult_le_compat_l; [nra | nra].
Qed.

Lemma out_bL_apriori : forall K m0 B N Tt t mt X P1 CG CR,
  0 <= K -> (t <= Tt)%nat -> m0 <= mt -> mt - m0 <= K ->
  Rpower 2 (u * K) <= X -> (1 + u) ^ (B - 1) <= P1 -> cg M ^ Tt <= CG -> cr M ^ Tt <= CR ->
  0 <= out_bL M K m0 B N Tt t mt <= afe_bL u ue ee ea B N Tt X P1 CG CR.
Proof.
  intros K m0 B N Tt t mt X P1 CG CR HK Ht Hm HmK HX HP HG HC.
  destruct (H_l_bounds K B X P1 HK HX HP) as [H1 H2].
  pose proof (mp_eta_e_nonneg M); pose proof (ff_u_nonneg A_).
  assert (HRy : 0 <= Ry_l M B) by (unfold Ry_l; apply Rmult_le_pos; [apply pow_le; lra | apply Rmult_le_pos; [apply pos_INR | lra]]).
  assert (HRy' : Ry_l M B <= P1 * (INR B * ee))
    by (unfold Ry_l; apply Rmult_le_compat_r; [apply Rmult_le_pos; [apply pos_INR | lra] | exact HP]).
  pose proof (Gk_ge_1 M (H_l M K B) m0 H1 t mt Hm).
  pose proof (Rk_nonneg M K (H_l M K B) (Ry_l M B) (INR N) Tt H1 HRy (pos_INR N) t).
  pose proof (Gk_apriori (H_l M K B) (P1 * ((1 + ue) * X)) m0 Tt t mt K X CG ltac:(lra) Ht Hm HmK HX HG).
  pose proof (Rk_apriori K (H_l M K B) (P1 * ((1 + ue) * X)) (Ry_l M B) (P1 * (INR B * ee)) (INR N) Tt t X CG CR
                ltac:(lra) ltac:(lra) (pos_INR N) Ht HX HG HC).
  unfold out_bL, afe_bL; cbv zeta; lra.
Qed.

Lemma out_bN_apriori : forall K m0 V B N Tt t mt X P1 CG CR,
  0 <= K -> 0 < V -> (t <= Tt)%nat -> m0 <= mt -> mt - m0 <= K ->
  Rpower 2 (u * K) <= X -> (1 + u) ^ (B - 1) <= P1 -> cg M ^ Tt <= CG -> cr M ^ Tt <= CR ->
  0 <= out_bN M K m0 V B N Tt t mt <= afe_bN u ue ee ea us es V B N Tt X P1 CG CR.
Proof.
  intros K m0 V B N Tt t mt X P1 CG CR HK HV Ht Hm HmK HX HP HG HC.
  destruct (H_acc_bounds K B X P1 HK HX HP) as [H1 H2].
  pose proof (mp_eta_e_nonneg M); pose proof (ff_u_nonneg A_); pose proof (ff_u_nonneg S_).
  pose proof (ff_eta_nonneg S_); pose proof (ff_eta_nonneg A_); pose proof (pos_INR B).
  set (Ra := (1 + u) * ((1 + us) * ee + es) * (INR B * V) + INR B * ea).
  assert (HRa : 0 <= Ra).
  { unfold Ra; apply Rplus_le_le_0_compat; apply Rmult_le_pos; try nra.
    apply Rmult_le_pos; nra. }
  assert (HRy : 0 <= Ry_acc M V B) by (unfold Ry_acc; fold Ra; apply Rmult_le_pos; [apply pow_le; lra | lra]).
  assert (HRy' : Ry_acc M V B <= P1 * Ra) by (unfold Ry_acc; fold Ra; apply Rmult_le_compat_r; lra).
  assert (HNV : 0 <= INR N * V) by (apply Rmult_le_pos; [apply pos_INR | lra]).
  pose proof (Gk_ge_1 M (H_acc M K B) m0 H1 t mt Hm).
  pose proof (Rk_nonneg M K (H_acc M K B) (Ry_acc M V B) (INR N * V) Tt H1 HRy HNV t).
  pose proof (Gk_apriori (H_acc M K B) (P1 * ((1 + u) * (1 + us) * ((1 + ue) * X))) m0 Tt t mt K X CG
                ltac:(lra) Ht Hm HmK HX HG).
  pose proof (Rk_apriori K (H_acc M K B) (P1 * ((1 + u) * (1 + us) * ((1 + ue) * X))) (Ry_acc M V B) (P1 * Ra)
                (INR N * V) Tt t X CG CR ltac:(lra) ltac:(lra) HNV Ht HX HG HC).
  unfold out_bN, afe_bN; cbv zeta; fold Ra.
  assert (0 < / V) by (apply Rinv_0_lt_compat, HV).
  unfold Rdiv; split; [apply Rplus_le_le_0_compat; [lra | apply Rmult_le_pos; lra] |].
  apply Rplus_le_compat; [lra | apply Rmult_le_compat_r; lra].
Qed.

(** The kernel's (score, value) pair of a key [(k, v_c)]. *)
Definition kv_pair (c : R) (q : list R) (kv : list R * R) : R * R := (score2 A_ c q (fst kv), snd kv).

(** The same with the dot [dotf] ([kv_pair] is [kv_pair_with (bdot A_)]). *)
Definition kv_pair_with (dotf : list R -> list R -> R) (c : R) (q : list R) (kv : list R * R) : R * R :=
  (score2_with A_ dotf c q (fst kv), snd kv).

Definition exact_softmax (scale : R) (q : list R) (keys : list (list R * R)) : R :=
  rsum (map (fun kv => exp (scale * dot_R q (fst kv)) * snd kv) keys)
  / rsum (map (fun kv => exp (scale * dot_R q (fst kv))) keys).

(** The kernel's tiles of (score2, value) pairs of one query row: the premises of
    [online_softmax_output_error] and the scores' error, shared by the a-priori bound and
    the a-posteriori one (Attention/Float/ForwardPosteriori.v). *)
(** The kernel's scores under any dot model: each within [delta] of
    [scale q.k] and at most [smax] in magnitude, the running max [mt] over the
    tiles between [m0] and [m0 + 2 smax] ([kernel_tiles_ok_with] and
    SavedLseError.v's [attention_lse_error_dot] start from it). *)
Lemma kernel_scores_ok : forall (dotf : list R -> list R -> R) (g_rel g_abs : R) (q : list R) (c scale uc P : R) (E : nat)
    (k0 : list R * R) (tl0 : list (list R * R)) (rest : list (list (list R * R))),
  let tiles := (k0 :: tl0) :: rest in
  let ktiles := map (map (kv_pair_with dotf c q)) tiles in
  let m0 := score2_with A_ dotf c q (fst k0) in
  let mt := acc_m_run m0 ktiles in
  let delta := score_delta_de A_ scale uc P (g_rel * P + g_abs) in
  let smax := score_max_de A_ scale uc P (g_rel * P + g_abs) in
  dot_model dotf E g_rel g_abs -> length q = E ->
  (forall kv, In kv (concat tiles) -> length (fst kv) = E /\ dot_abs q (fst kv) <= P) ->
  0 < scale -> 0 <= uc -> Rabs (c * ln 2 - scale) <= uc * scale ->
  (forall kv, In kv (concat tiles) ->
     Rabs (score2_with A_ dotf c q (fst kv) * ln 2 - scale * dot_R q (fst kv)) <= delta
     /\ Rabs (score2_with A_ dotf c q (fst kv)) <= smax)
  /\ 0 <= delta /\ 0 <= smax
  /\ concat ktiles = map (kv_pair_with dotf c q) (concat tiles)
  /\ (forall p, In p (concat ktiles) -> exists kv, In kv (concat tiles) /\ p = kv_pair_with dotf c q kv)
  /\ (forall p, In p (concat ktiles) -> fmt (fst p))
  /\ m0 <= mt /\ Rabs mt <= smax /\ mt - m0 <= 2 * smax.
Proof.
  intros dotf g_rel g_abs q c scale uc P E k0 tl0 rest tiles ktiles m0 mt0 delta0 smax0 Hdm Hq Hkeys Hs Huc Hc.
  unfold mt0, delta0, smax0; clear mt0 delta0 smax0.
  set (smax := score_max_de A_ scale uc P (g_rel * P + g_abs)) in *.
  set (delta := score_delta_de A_ scale uc P (g_rel * P + g_abs)) in *.
  assert (Hsc : forall kv, In kv (concat tiles) ->
            Rabs (score2_with A_ dotf c q (fst kv) * ln 2 - scale * dot_R q (fst kv)) <= delta
            /\ Rabs (score2_with A_ dotf c q (fst kv)) <= smax)
    by (intros kv Hkv; destruct (Hkeys kv Hkv) as [Hl HPk]; apply (score2_with_error A_ dotf E g_rel g_abs); auto).
  assert (Hk0 : In k0 (concat tiles)) by (left; reflexivity).
  assert (Hsmax : 0 <= smax) by (pose proof (Hsc k0 Hk0) as [_ H]; pose proof (Rabs_pos (score2_with A_ dotf c q (fst k0))); lra).
  assert (Hdelta : 0 <= delta) by (pose proof (Hsc k0 Hk0) as [H _]; eapply Rle_trans; [apply Rabs_pos | exact H]).
  assert (Ecat : concat ktiles = map (kv_pair_with dotf c q) (concat tiles)) by (unfold ktiles; rewrite concat_map; reflexivity).
  assert (Hin : forall p, In p (concat ktiles) -> exists kv, In kv (concat tiles) /\ p = kv_pair_with dotf c q kv).
  { intros p Hp; rewrite Ecat in Hp; apply in_map_iff in Hp; destruct Hp as [kv [<- Hkv]]; exists kv; auto. }
  set (mt := acc_m_run m0 ktiles).
  assert (Fm0 : fmt m0) by apply ff_rnd_fmt.
  assert (Fk : forall p, In p (concat ktiles) -> fmt (fst p)).
  { intros p Hp; destruct (Hin p Hp) as [kv [_ ->]]; apply ff_rnd_fmt. }
  assert (Hmt : Rabs mt <= smax).
  { destruct (mrun_attained fst ktiles m0) as [Em | [p [Hp Ep]]]; unfold mt, acc_m_run.
    - rewrite Em; exact (proj2 (Hsc k0 Hk0)).
    - rewrite <- Ep; destruct (Hin p Hp) as [kv [Hkv ->]]; exact (proj2 (Hsc kv Hkv)). }
  assert (Hm0t : m0 <= mt) by (apply (mrun_ge M (R * R) fst ktiles m0 Fm0 Fk)).
  assert (Hm0 : Rabs m0 <= smax) by exact (proj2 (Hsc k0 Hk0)).
  assert (HmK : mt - m0 <= 2 * smax)
    by (pose proof (Rle_abs mt); pose proof (Rle_abs (- m0)); rewrite Rabs_Ropp in *; lra).
  exact (conj Hsc (conj Hdelta (conj Hsmax (conj Ecat (conj Hin (conj Fk (conj Hm0t (conj Hmt HmK)))))))).
Qed.

Lemma kernel_tiles_ok_with : forall (dotf : list R -> list R -> R) (g_rel g_abs : R) (q : list R) (c scale uc P V : R) (E B N Tt : nat)
    (k0 : list R * R) (tl0 : list (list R * R)) (rest : list (list (list R * R))),
  let tiles := (k0 :: tl0) :: rest in
  let ktiles := map (map (kv_pair_with dotf c q)) tiles in
  let m0 := score2_with A_ dotf c q (fst k0) in
  let mt := acc_m_run m0 ktiles in
  let delta := score_delta_de A_ scale uc P (g_rel * P + g_abs) in
  let K := 2 * score_max_de A_ scale uc P (g_rel * P + g_abs) in
  dot_model dotf E g_rel g_abs -> length q = E ->
  (forall kv, In kv (concat tiles) -> length (fst kv) = E /\ dot_abs q (fst kv) <= P /\ Rabs (snd kv) <= V) ->
  0 < scale -> 0 <= uc -> Rabs (c * ln 2 - scale) <= uc * scale ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (concat tiles) <= N)%nat -> (length tiles <= Tt)%nat ->
  0 <= delta /\ 0 <= K /\ m0 <= mt /\ mt - m0 <= K
  /\ concat ktiles = map (kv_pair_with dotf c q) (concat tiles)
  /\ (forall kv, In kv (concat tiles) -> Rabs (score2_with A_ dotf c q (fst kv) * ln 2 - scale * dot_R q (fst kv)) <= delta)
  /\ (exists p, In p (concat ktiles) /\ fst p = m0)
  /\ (forall p, In p (concat ktiles) -> Rabs (snd p) <= V /\ fmt (fst p) /\ mt - fst p <= K)
  /\ Forall (fun tl => (length tl <= B)%nat) ktiles
  /\ (length (concat ktiles) <= N)%nat /\ (length ktiles <= Tt)%nat.
Proof.
  intros dotf g_rel g_abs q c scale uc P V E B N Tt k0 tl0 rest tiles ktiles m0 mt0 delta0 K0 Hdm Hq Hkeys Hs Huc Hc HBt HN HT.
  unfold mt0, delta0, K0; clear mt0 delta0 K0.
  destruct (kernel_scores_ok dotf g_rel g_abs q c scale uc P E k0 tl0 rest Hdm Hq
              (fun kv Hkv => conj (proj1 (Hkeys kv Hkv)) (proj1 (proj2 (Hkeys kv Hkv)))) Hs Huc Hc)
    as [Hsc [Hdelta [Hsmax [Ecat [Hin [_ [Hm0t [Hmt HmK]]]]]]]].
  fold tiles in Hsc, Ecat, Hin, Hm0t, Hmt, HmK; fold ktiles m0 in Ecat, Hin, Hm0t, Hmt, HmK.
  set (smax := score_max_de A_ scale uc P (g_rel * P + g_abs)) in *.
  set (delta := score_delta_de A_ scale uc P (g_rel * P + g_abs)) in *.
  set (K := 2 * smax) in *.
  set (mt := acc_m_run m0 ktiles) in *.
  assert (HK : 0 <= K) by (unfold K; lra).
  assert (Hk0 : In k0 (concat tiles)) by (left; reflexivity).
  assert (Hlt : length ktiles = length tiles) by (unfold ktiles; apply map_length).
  split; [exact Hdelta | split; [exact HK | split; [exact Hm0t | split; [exact HmK | split; [exact Ecat |]]]]].
  split; [intros kv Hkv; exact (proj1 (Hsc kv Hkv)) |].
  split; [exists (kv_pair_with dotf c q k0); split; [rewrite Ecat; apply in_map, Hk0 | reflexivity] |].
  split.
  { intros p Hp; destruct (Hin p Hp) as [kv [Hkv ->]]; cbn [fst snd kv_pair_with].
    destruct (Hkeys kv Hkv) as [_ [_ Hv]]; destruct (Hsc kv Hkv) as [_ Hs2].
    split; [exact Hv | split; [apply ff_rnd_fmt |]].
    fold mt; pose proof (Rle_abs mt); pose proof (Rle_abs (- score2_with A_ dotf c q (fst kv))).
    rewrite Rabs_Ropp in *; unfold K; lra. }
  split.
  { unfold ktiles; apply Forall_forall; intros tl Htl; apply in_map_iff in Htl.
    destruct Htl as [tl' [<- Htl']]; rewrite map_length; exact (proj1 (Forall_forall _ _) HBt tl' Htl'). }
  split; [rewrite Ecat, map_length; exact HN | lia].
Qed.

(** The blocked fp32 dot. *)
Lemma kernel_tiles_ok : forall (q : list R) (c scale uc P V : R) (E B N Tt : nat)
    (k0 : list R * R) (tl0 : list (list R * R)) (rest : list (list (list R * R))),
  let tiles := (k0 :: tl0) :: rest in
  let ktiles := map (map (kv_pair c q)) tiles in
  let m0 := score2 A_ c q (fst k0) in
  let mt := acc_m_run m0 ktiles in
  let delta := score_delta A_ scale uc E P in
  let K := 2 * score_max A_ scale uc E P in
  (1 <= E)%nat -> INR E * u < 1 -> length q = E ->
  (forall kv, In kv (concat tiles) -> length (fst kv) = E /\ dot_abs q (fst kv) <= P /\ Rabs (snd kv) <= V) ->
  0 < scale -> 0 <= uc -> Rabs (c * ln 2 - scale) <= uc * scale ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (concat tiles) <= N)%nat -> (length tiles <= Tt)%nat ->
  0 <= delta /\ 0 <= K /\ m0 <= mt /\ mt - m0 <= K
  /\ concat ktiles = map (kv_pair c q) (concat tiles)
  /\ (forall kv, In kv (concat tiles) -> Rabs (score2 A_ c q (fst kv) * ln 2 - scale * dot_R q (fst kv)) <= delta)
  /\ (exists p, In p (concat ktiles) /\ fst p = m0)
  /\ (forall p, In p (concat ktiles) -> Rabs (snd p) <= V /\ fmt (fst p) /\ mt - fst p <= K)
  /\ Forall (fun tl => (length tl <= B)%nat) ktiles
  /\ (length (concat ktiles) <= N)%nat /\ (length ktiles <= Tt)%nat.
Proof.
  intros q c scale uc P V E B N Tt k0 tl0 rest tiles ktiles m0 mt delta K HE HEu Hq.
  exact (kernel_tiles_ok_with (bdot A_) _ _ q c scale uc P V E B N Tt k0 tl0 rest (blocked_dot_model A_ E HE HEu) Hq).
Qed.

(** The premises on the constants that the four forward theorems share
    ([attention_forward_error], [attention_forward_error_masked] and their
    a-posteriori forms in Attention/Float/ForwardPosteriori.v), bundled: the
    dimensions, the scale and its computed base-2 form [c] within [uc], and
    the upper bounds [X], [Y], [P1], [CG], [CR] of the exponentials and
    powers of the bound, with [afe_bL < 1].  A conjunction, nothing more:
    [Build_afe_premises] takes each of them. *)
Record afe_premises (c scale uc P V X Y P1 CG CR : R) (E B N Tt : nat) : Prop := {
  afe_E_pos : (1 <= E)%nat;
  afe_E_u : INR E * u < 1;
  afe_V_pos : 0 < V;
  afe_scale_pos : 0 < scale;
  afe_uc_nonneg : 0 <= uc;
  afe_c_err : Rabs (c * ln 2 - scale) <= uc * scale;
  afe_B_pos : (1 <= B)%nat;
  afe_X_ge : Rpower 2 (u * (2 * score_max A_ scale uc E P)) <= X;
  afe_Y_ge : exp (2 * score_delta A_ scale uc E P) - 1 <= Y;
  afe_P1_ge : (1 + u) ^ (B - 1) <= P1;
  afe_CG_ge : cg M ^ Tt <= CG;
  afe_CR_ge : cr M ^ Tt <= CR;
  afe_bL_lt_1 : afe_bL u ue ee ea B N Tt X P1 CG CR < 1
}.

(** The same premises with the dot's error [de] in place of [dot_err E P]
    (the dimension's premises are then the dot model's). *)
Record afe_premises_de (c scale uc P de V X Y P1 CG CR : R) (B N Tt : nat) : Prop := {
  afd_V_pos : 0 < V;
  afd_scale_pos : 0 < scale;
  afd_uc_nonneg : 0 <= uc;
  afd_c_err : Rabs (c * ln 2 - scale) <= uc * scale;
  afd_B_pos : (1 <= B)%nat;
  afd_X_ge : Rpower 2 (u * (2 * score_max_de A_ scale uc P de)) <= X;
  afd_Y_ge : exp (2 * score_delta_de A_ scale uc P de) - 1 <= Y;
  afd_P1_ge : (1 + u) ^ (B - 1) <= P1;
  afd_CG_ge : cg M ^ Tt <= CG;
  afd_CR_ge : cr M ^ Tt <= CR;
  afd_bL_lt_1 : afe_bL u ue ee ea B N Tt X P1 CG CR < 1
}.

Lemma afe_premises_blocked : forall c scale uc P V X Y P1 CG CR E B N Tt,
  afe_premises c scale uc P V X Y P1 CG CR E B N Tt ->
  afe_premises_de c scale uc P (gamma u E * P + (1 + gamma u (E - 1)) * INR E * ea) V X Y P1 CG CR B N Tt.
Proof. intros until Tt; intros [HE HEu HV Hs Huc Hc HB HX HY HP HG HC HbL]; split; assumption. Qed.


(** Forward attention with the scores' dot [dotf] of any [dot_model]
    (fully visible tiles); [attention_forward_error] is its blocked fp32
    instance. *)
Theorem attention_forward_error_dot : forall (dotf : list R -> list R -> R) (g_rel g_abs : R) (q : list R) (c scale uc P V X Y P1 CG CR : R) (E B N Tt : nat)
    (k0 : list R * R) (tl0 : list (list R * R)) (rest : list (list (list R * R))),
  let tiles := (k0 :: tl0) :: rest in
  let ktiles := map (map (kv_pair_with dotf c q)) tiles in
  let m0 := score2_with A_ dotf c q (fst k0) in
  dot_model dotf E g_rel g_abs ->
  afe_premises_de c scale uc P (g_rel * P + g_abs) V X Y P1 CG CR B N Tt ->
  length q = E ->
  (forall kv, In kv (concat tiles) -> length (fst kv) = E /\ dot_abs q (fst kv) <= P /\ Rabs (snd kv) <= V) ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (concat tiles) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rabs (ff_rnd S_ (rnd (acc_run M m0 0 ktiles / l_run M m0 0 (map (map fst) ktiles)))
        - exact_softmax scale q (concat tiles))
  <= afe_rel u ue ee ea us es V B N Tt X Y P1 CG CR * V.
Proof.
  intros dotf g_rel g_abs q c scale uc P V X Y P1 CG CR E B N Tt k0 tl0 rest tiles ktiles m0
    Hdm Hpre Hq Hkeys HBt HN HT.
  pose proof Hpre as [HV Hs Huc Hc HB HX HY HP HG HC HbL].
  pose proof (ff_u_nonneg A_) as Hu0; pose proof (ff_eta_nonneg A_) as Hea.
  pose proof (ff_u_nonneg S_) as Hus; pose proof (ff_eta_nonneg S_) as Hes.
  destruct (kernel_tiles_ok_with dotf g_rel g_abs q c scale uc P V E B N Tt k0 tl0 rest Hdm Hq Hkeys Hs Huc Hc HBt HN HT)
    as [Hdelta [HK [Hm0t [HmK [Ecat [Hsc [Hex [Hks [HBk [HNk HTk]]]]]]]]]].
  fold tiles in Hdelta, HK, Hm0t, HmK, Ecat, Hsc, Hex, Hks, HBk, HNk, HTk.
  fold ktiles m0 in Hdelta, HK, Hm0t, HmK, Ecat, Hsc, Hex, Hks, HBk, HNk, HTk.
  set (delta := score_delta_de A_ scale uc P (g_rel * P + g_abs)) in *.
  set (K := 2 * score_max_de A_ scale uc P (g_rel * P + g_abs)) in *.
  set (mt := acc_m_run m0 ktiles) in *.
  (* the online softmax *)
  destruct (out_bL_apriori K m0 B N Tt (length ktiles) mt X P1 CG CR HK HTk Hm0t HmK HX HP HG HC) as [bL0 bL1].
  destruct (out_bN_apriori K m0 V B N Tt (length ktiles) mt X P1 CG CR HK HV HTk Hm0t HmK HX HP HG HC) as [bN0 bN1].
  assert (Hon := online_softmax_output_error M K m0 V B N Tt ktiles HK HV HB Hex Hks HBk HNk HTk ltac:(fold mt; lra)).
  fold mt in Hon.
  (* the perturbation of the scores *)
  set (o := rnd (acc_run M m0 0 ktiles / l_run M m0 0 (map (map fst) ktiles))) in *.
  set (Nt := exact_pv mt (concat ktiles)) in *.
  set (Lt := exact_l mt (map fst (concat ktiles))) in *.
  assert (Hpert : Rabs (Nt / Lt - exact_softmax scale q (concat tiles)) <= (exp (2 * delta) - 1) * V).
  { unfold Nt, Lt, exact_pv, exact_l, exact_softmax; rewrite Ecat, !map_map; cbn [fst snd kv_pair].
    unfold Rpower.
    rewrite <- (softmax_average_shift (concat tiles) (fun kv => scale * dot_R q (fst kv)) snd (mt * ln 2)).
    apply (softmax_average_perturbation (concat tiles) (fun kv => scale * dot_R q (fst kv) - mt * ln 2)
             (fun kv => (score2_with A_ dotf c q (fst kv) - mt) * ln 2) snd delta V Hdelta ltac:(lra)).
    - intros kv Hkv; replace ((score2_with A_ dotf c q (fst kv) - mt) * ln 2 - (scale * dot_R q (fst kv) - mt * ln 2))
        with (score2_with A_ dotf c q (fst kv) * ln 2 - scale * dot_R q (fst kv)) by ring.
      exact (Hsc kv Hkv).
    - intros kv Hkv; exact (proj2 (proj2 (Hkeys kv Hkv))). }
  (* the monotone closed form *)
  pose proof (afe_f_mono u _ _ _ _ Hu0 bN0 bL0 bN1 bL1 HbL) as Hf.
  set (bL := afe_bL u ue ee ea B N Tt X P1 CG CR) in *.
  set (bN := afe_bN u ue ee ea us es V B N Tt X P1 CG CR) in *.
  set (F := ((bN + bL) + u * (1 + bN)) / (1 - bL)) in *.
  set (Z := exact_softmax scale q (concat tiles)) in *.
  assert (HZ : Rabs Z <= V)
    by (apply softmax_average_abs_le; [lra | intros kv Hkv; exact (proj2 (proj2 (Hkeys kv Hkv)))]).
  set (Fo := (out_bN M K m0 V B N Tt (length ktiles) mt + out_bL M K m0 B N Tt (length ktiles) mt
              + u * (1 + out_bN M K m0 V B N Tt (length ktiles) mt))
             / (1 - out_bL M K m0 B N Tt (length ktiles) mt)) in *.
  set (err := (F + ea / V + Y) * V).
  assert (Herr : Rabs (o - Z) <= err).
  { replace (o - Z) with ((o - Nt / Lt) + (Nt / Lt - Z)) by ring.
    eapply Rle_trans; [apply Rabs_triang |].
    assert (Fo * V <= F * V) by (apply Rmult_le_compat_r; lra).
    assert ((exp (2 * delta) - 1) * V <= Y * V) by (apply Rmult_le_compat_r; lra).
    unfold err; replace ((F + ea / V + Y) * V) with (F * V + ea + Y * V) by (field; lra).
    lra. }
  assert (Ho : Rabs o <= V + err)
    by (replace o with ((o - Z) + Z) by ring; eapply Rle_trans; [apply Rabs_triang | lra]).
  pose proof (ff_abs S_ o) as Hso.
  replace (afe_rel u ue ee ea us es V B N Tt X Y P1 CG CR * V) with (err * (1 + us) + us * V + es)
    by (unfold err, afe_rel; cbv zeta; fold bL bN; fold F; field; lra).
  replace (ff_rnd S_ o - Z) with ((ff_rnd S_ o - o) + (o - Z)) by ring.
  eapply Rle_trans; [apply Rabs_triang |].
  assert (us * Rabs o <= us * (V + err)) by (apply Rmult_le_compat_l; lra).
  nra.
Qed.

(** The blocked fp32 dot ([score2]): [attention_forward_error_dot] at [blocked_dot_model]. *)
Theorem attention_forward_error : forall (q : list R) (c scale uc P V X Y P1 CG CR : R) (E B N Tt : nat)
    (k0 : list R * R) (tl0 : list (list R * R)) (rest : list (list (list R * R))),
  let tiles := (k0 :: tl0) :: rest in
  let ktiles := map (map (kv_pair c q)) tiles in
  let m0 := score2 A_ c q (fst k0) in
  afe_premises c scale uc P V X Y P1 CG CR E B N Tt ->
  length q = E ->
  (forall kv, In kv (concat tiles) -> length (fst kv) = E /\ dot_abs q (fst kv) <= P /\ Rabs (snd kv) <= V) ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (concat tiles) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rabs (ff_rnd S_ (rnd (acc_run M m0 0 ktiles / l_run M m0 0 (map (map fst) ktiles)))
        - exact_softmax scale q (concat tiles))
  <= afe_rel u ue ee ea us es V B N Tt X Y P1 CG CR * V.
Proof.
  intros q c scale uc P V X Y P1 CG CR E B N Tt k0 tl0 rest tiles ktiles m0 Hpre.
  exact (attention_forward_error_dot (bdot A_) _ _ q c scale uc P V X Y P1 CG CR E B N Tt k0 tl0 rest
           (blocked_dot_model A_ E (afe_E_pos _ _ _ _ _ _ _ _ _ _ _ _ _ _ Hpre) (afe_E_u _ _ _ _ _ _ _ _ _ _ _ _ _ _ Hpre))
           (afe_premises_blocked _ _ _ _ _ _ _ _ _ _ _ _ _ _ Hpre)).
Qed.

(** ** PART D: partly masked tiles, the kernel's whole loop

    The kernel's step ([kernel_step], OnlineSoftmaxTile.v, with [vis] the
    causal/window/bounds/boolean mask) on a tile is the visible step of [run]
    on the tile's visible keys: a masked key has weight [0], and adding an
    exact [0] to a number of the format changes nothing.  So the kernel's
    loop from its start over any tiles is [run] over the visible keys of the
    tiles that have any ([kernel_run_visible]), and the bound holds for the
    kernel's tiles whatever the mask ([attention_forward_error_masked]). *)

Section Masked.

Variable Key : Type.
Variable sc : Key -> R.
Variable vis : Key -> bool.

Lemma fold_rnd_skip_zero : forall (w : Key -> R) tl a, fmt a ->
  fold_left (fun acc x => rnd (acc + x)) (map (fun k => if vis k then w k else 0) tl) a
  = fold_left (fun acc x => rnd (acc + x)) (map w (filter vis tl)) a.
Proof.
  intros w; induction tl as [|k tl IH]; intros a Fa; [reflexivity |].
  cbn [map filter]; destruct (vis k); cbn [map fold_left].
  - apply IH, ff_rnd_fmt.
  - rewrite Rplus_0_r, (ff_rnd_id A_ a Fa); apply IH, Fa.
Qed.

Lemma tile_sum_skip_zero : forall (w : Key -> R) tl,
  tile_sum A_ (map (fun k => if vis k then w k else 0) tl) = tile_sum A_ (map w (filter vis tl)).
Proof. intros; apply fold_rnd_skip_zero, ff_fmt_0. Qed.

Lemma vmax_some_filter : forall tl x, vmax Key sc vis (Some x) tl = Some (tmax Key sc x (filter vis tl)).
Proof.
  unfold vmax, tmax; induction tl as [|k tl IH]; intros x; [reflexivity |].
  cbn [fold_left filter]; destruct (vis k); cbn [fold_left omax]; apply IH.
Qed.

Lemma vmax_none_filter : forall tl k0 r, filter vis tl = k0 :: r ->
  vmax Key sc vis None tl = Some (tmax Key sc (sc k0) r).
Proof.
  induction tl as [|k tl IH]; intros k0 r E; [discriminate |].
  cbn [filter] in E; unfold vmax in *; cbn [fold_left]; destruct (vis k).
  - injection E as <- <-; cbn [omax]; apply vmax_some_filter.
  - apply IH, E.
Qed.

Variable val : Key -> nat -> R.

Lemma ktile_l_filter : forall m' tl, ktile_l M Key sc vis m' tl = tile_l M m' (map sc (filter vis tl)).
Proof.
  intros; unfold ktile_l, tile_l, kweight; rewrite map_map.
  apply (tile_sum_skip_zero (fun k => exp2 (rnd (sc k - m')))).
Qed.

Lemma ktile_pv_filter : forall m' tl c,
  ktile_pv M Key sc vis val m' tl c = tile_pv M m' (map (fun k => (sc k, val k c)) (filter vis tl)).
Proof.
  intros; unfold ktile_pv, tile_pv, kweight; rewrite map_map; cbn [fst snd].
  rewrite <- (tile_sum_skip_zero (fun k => rnd (ff_rnd S_ (exp2 (rnd (sc k - m'))) * val k c))).
  f_equal; apply map_ext; intros k; destruct (vis k); [reflexivity |].
  rewrite (ff_rnd_id S_ 0 (ff_fmt_0 S_)), Rmult_0_l; apply (ff_rnd_id A_ 0 (ff_fmt_0 A_)).
Qed.

(** One coordinate: the kernel's state with [acc = [a]]. *)
Definition yl (m' : R) (tl : list Key) : R := tile_l M m' (map sc tl).
Definition ya (m' : R) (tl : list Key) : R := tile_pv M m' (map (fun k => (sc k, val k 0%nat)) tl).

Lemma kernel_step_some : forall m l a tl,
  let ft := filter vis tl in
  let m' := tmax Key sc m ft in
  kernel_step M Key sc vis val (KState (Some m) l [a]) tl
  = KState (Some m') (rnd (rnd (l * exp2 (rnd (m - m'))) + yl m' ft))
           [rnd (rnd (a * exp2 (rnd (m - m'))) + ya m' ft)].
Proof.
  intros m l a tl ft m'; unfold kernel_step; cbn [ks_m ks_l ks_acc].
  rewrite vmax_some_filter; cbn [m_use kalpha length seq map nth].
  rewrite ktile_l_filter, ktile_pv_filter; reflexivity.
Qed.

Lemma kernel_run_some : forall tiles m l a, fmt l -> fmt a ->
  kernel_run M Key sc vis val (KState (Some m) l [a]) tiles
  = KState (Some (mrun Key sc m (map (filter vis) tiles)))
           (run M Key sc yl m l (map (filter vis) tiles)) [run M Key sc ya m a (map (filter vis) tiles)].
Proof.
  unfold kernel_run; induction tiles as [|tl tiles IH]; intros m l a Fl Fa; [reflexivity |].
  cbn [fold_left map mrun run]; rewrite kernel_step_some; apply IH; apply ff_rnd_fmt.
Qed.

Lemma tmax_cons_self : forall k r, tmax Key sc (sc k) (k :: r) = tmax Key sc (sc k) r.
Proof. intros; unfold tmax; cbn [fold_left]; rewrite Rmax_left by lra; reflexivity. Qed.

(** From the kernel's start, tiles that each have a visible key: [run] from the
    first visible score and [0] over the visible keys. *)
Lemma kernel_run_start : forall tiles k0 r rest,
  map (filter vis) tiles = (k0 :: r) :: rest ->
  kernel_run M Key sc vis val (kernel_start 1) tiles
  = KState (Some (mrun Key sc (sc k0) ((k0 :: r) :: rest)))
           (run M Key sc yl (sc k0) 0 ((k0 :: r) :: rest)) [run M Key sc ya (sc k0) 0 ((k0 :: r) :: rest)].
Proof.
  intros [|tl tiles] k0 r rest E; [discriminate |].
  cbn [map] in E; injection E as Etl Erest.
  change (kernel_run M Key sc vis val (kernel_start 1) (tl :: tiles))
    with (kernel_run M Key sc vis val (kernel_step M Key sc vis val (kernel_start 1) tl) tiles).
  assert (Hs : kernel_step M Key sc vis val (kernel_start 1) tl
               = KState (Some (tmax Key sc (sc k0) r)) (yl (tmax Key sc (sc k0) r) (k0 :: r))
                        [ya (tmax Key sc (sc k0) r) (k0 :: r)]).
  { unfold kernel_step, kernel_start; cbn [ks_m ks_l ks_acc repeat length seq map nth].
    rewrite (vmax_none_filter tl k0 r Etl); cbn [m_use kalpha].
    rewrite ktile_l_filter, ktile_pv_filter, Etl, Rmult_0_l, (ff_rnd_id A_ 0 (ff_fmt_0 A_)), !Rplus_0_l.
    rewrite !ff_rnd_id by apply fmt_tile_sum; reflexivity. }
  rewrite Hs, kernel_run_some by apply fmt_tile_sum.
  rewrite Erest; cbn [mrun]; rewrite tmax_cons_self, (run_first M Key sc yl), (run_first M Key sc ya).
  - rewrite tmax_cons_self; reflexivity.
  - intros; apply fmt_tile_sum.
  - intros; apply fmt_tile_sum.
Qed.

End Masked.

Lemma tmax_map_comm : forall {K1 K2} (g : K1 -> K2) (sc2 : K2 -> R) tl m,
  tmax K1 (fun k => sc2 (g k)) m tl = tmax K2 sc2 m (map g tl).
Proof. intros K1 K2 g sc2; unfold tmax; induction tl as [|k tl IH]; intros m; [reflexivity | apply IH]. Qed.

Lemma run_map_comm : forall {K1 K2} (g : K1 -> K2) (sc2 : K2 -> R) (f : R -> list K2 -> R) tiles m x,
  run M K1 (fun k => sc2 (g k)) (fun m' tl => f m' (map g tl)) m x tiles = run M K2 sc2 f m x (map (map g) tiles).
Proof.
  intros K1 K2 g sc2 f; induction tiles as [|tl tiles IH]; intros m x; [reflexivity |].
  cbn [run map]; rewrite tmax_map_comm; apply IH.
Qed.

Lemma mrun_map_comm : forall {K1 K2} (g : K1 -> K2) (sc2 : K2 -> R) tiles m,
  mrun K1 (fun k => sc2 (g k)) m tiles = mrun K2 sc2 m (map (map g) tiles).
Proof.
  intros K1 K2 g sc2; induction tiles as [|tl tiles IH]; intros m; [reflexivity |].
  cbn [mrun map]; rewrite tmax_map_comm; apply IH.
Qed.

Lemma concat_filter_masked : forall {K} (vis : K -> bool) tiles,
  concat (map (filter vis) (filter (fun tl => negb (fully_masked K vis tl)) tiles)) = filter vis (concat tiles).
Proof.
  intros K vis; induction tiles as [|tl tiles IH]; [reflexivity |].
  cbn [filter concat map]; rewrite filter_app.
  destruct (fully_masked K vis tl) eqn:Em; cbn [negb concat map].
  - assert (Hn : filter vis tl = []).
    { pose proof (fully_masked_spec K vis tl Em) as H; clear - H.
      induction tl as [|k tl IHt]; [reflexivity |]; cbn [filter].
      rewrite (H k (or_introl eq_refl)); apply IHt; intros k' Hk'; apply H; right; exact Hk'. }
    rewrite Hn, IH; reflexivity.
  - rewrite IH; reflexivity.
Qed.

Lemma filter_nil_fully_masked : forall {K} (vis : K -> bool) tl, filter vis tl = [] -> fully_masked K vis tl = true.
Proof.
  intros K vis; induction tl as [|k tl IH]; intros H; [reflexivity |].
  cbn [filter] in H; unfold fully_masked; cbn [forallb].
  destruct (vis k); [discriminate | apply IH, H].
Qed.

Lemma afe_filter_length : forall {K} (f : K -> bool) l, (length (filter f l) <= length l)%nat.
Proof. intros K f; induction l as [|x l IH]; cbn [filter length]; [lia | destruct (f x); cbn [length]; lia]. Qed.

(** The kernel's loop from its start, under a mask with at least one visible
    key: its state is [run]'s over the visible keys of the tiles that have any
    ([(k0 :: r) :: rest]), from the first visible score. *)
Lemma kernel_run_visible_tiles_with : forall (dotf : list R -> list R -> R) (c : R) (q : list R) (vis : list R * R -> bool) (B : nat) tiles,
  let sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv) in
  exp2 0 = 1 -> (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  exists k0 r rest,
    let ft := (k0 :: r) :: rest in
    let kt := map (map (kv_pair_with dotf c q)) ft in
    let m0 := score2_with A_ dotf c q (fst k0) in
    concat ft = filter vis (concat tiles) /\ Forall (fun tl => (length tl <= B)%nat) ft
    /\ (length ft <= length tiles)%nat
    /\ kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) tiles
       = KState (Some (acc_m_run m0 kt)) (l_run M m0 0 (map (map fst) kt)) [acc_run M m0 0 kt].
Proof.
  intros dotf c q vis B tiles sck Hexp0 [kv0 [Hkv0 Hvis0]] HBt.
  set (nf := filter (fun tl => negb (fully_masked _ vis tl)) tiles).
  assert (Est : kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) tiles
                = kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) nf)
    by (unfold nf; symmetry; apply kernel_start_skip_masked_tiles, Hexp0).
  assert (Ecat : concat (map (filter vis) nf) = filter vis (concat tiles)) by apply concat_filter_masked.
  assert (Hne : forall t, In t (map (filter vis) nf) -> t <> []).
  { intros t Ht Et; apply in_map_iff in Ht; destruct Ht as [tl [<- Htl]].
    apply filter_In in Htl; destruct Htl as [_ Hm].
    rewrite (filter_nil_fully_masked vis tl Et) in Hm; discriminate. }
  assert (HBf : Forall (fun tl => (length tl <= B)%nat) (map (filter vis) nf)).
  { apply Forall_forall; intros t Ht; apply in_map_iff in Ht; destruct Ht as [tl [<- Htl]].
    apply filter_In in Htl; destruct Htl as [Htl _].
    pose proof (afe_filter_length vis tl); pose proof (proj1 (Forall_forall _ _) HBt tl Htl); cbv beta in *; lia. }
  assert (Hlen : (length (map (filter vis) nf) <= length tiles)%nat).
  { rewrite map_length; pose proof (afe_filter_length (fun tl => negb (fully_masked _ vis tl)) tiles); unfold nf; lia. }
  destruct (map (filter vis) nf) as [| t0 rest] eqn:Eft.
  - exfalso; assert (In kv0 (filter vis (concat tiles))) by (apply filter_In; auto).
    rewrite <- Ecat in H; destruct H.
  - destruct t0 as [| k0 r]; [exfalso; apply (Hne [] (or_introl eq_refl)); reflexivity |].
    exists k0, r, rest; cbv zeta.
    split; [exact Ecat | split; [exact HBf | split; [exact Hlen |]]].
    rewrite Est, (kernel_run_start (list R * R) sck vis (fun kv _ => snd kv) nf k0 r rest Eft).
    f_equal; [f_equal | | f_equal].
    + exact (mrun_map_comm (kv_pair_with dotf c q) fst ((k0 :: r) :: rest) (sck k0)).
    + rewrite map_map; rewrite (map_ext (fun x => map fst (map (kv_pair_with dotf c q) x)) (map sck))
        by (intros; rewrite map_map; reflexivity).
      exact (run_map_comm sck (fun s => s) (tile_l M) ((k0 :: r) :: rest) (sck k0) 0).
    + exact (run_map_comm (kv_pair_with dotf c q) fst (tile_pv M) ((k0 :: r) :: rest) (sck k0) 0).
Qed.

Lemma kernel_run_visible_tiles : forall (c : R) (q : list R) (vis : list R * R -> bool) (B : nat) tiles,
  let sck := fun kv : list R * R => score2 A_ c q (fst kv) in
  exp2 0 = 1 -> (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  exists k0 r rest,
    let ft := (k0 :: r) :: rest in
    let kt := map (map (kv_pair c q)) ft in
    let m0 := score2 A_ c q (fst k0) in
    concat ft = filter vis (concat tiles) /\ Forall (fun tl => (length tl <= B)%nat) ft
    /\ (length ft <= length tiles)%nat
    /\ kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) tiles
       = KState (Some (acc_m_run m0 kt)) (l_run M m0 0 (map (map fst) kt)) [acc_run M m0 0 kt].
Proof. intros c q; exact (kernel_run_visible_tiles_with (bdot A_) c q). Qed.

(** The kernel's loop as it runs, for one output coordinate of one query row:
    any tiles, any mask [vis] (causal, window, sequence bounds, boolean mask),
    from the kernel's start; the exact value is the softmax over the visible
    keys.  [exp2 0 = 1] is proved for the fp32 instances
    ([mixed_fp32_exp2_0]); for [ex2.approx] it is an assumption. *)
(** The kernel's loop under any mask with the scores' dot [dotf] of any
    [dot_model]; [attention_forward_error_masked] is its blocked fp32
    instance. *)
Theorem attention_forward_error_masked_dot : forall (dotf : list R -> list R -> R) (g_rel g_abs : R) (q : list R) (c scale uc P V X Y P1 CG CR : R) (E B N Tt : nat)
    (vis : list R * R -> bool) (tiles : list (list (list R * R))),
  let sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv) in
  let st := kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) tiles in
  exp2 0 = 1 ->
  (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  dot_model dotf E g_rel g_abs ->
  afe_premises_de c scale uc P (g_rel * P + g_abs) V X Y P1 CG CR B N Tt ->
  length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true ->
     length (fst kv) = E /\ dot_abs q (fst kv) <= P /\ Rabs (snd kv) <= V) ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rabs (ff_rnd S_ (rnd (nth 0 (ks_acc st) 0 / ks_l st)) - exact_softmax scale q (filter vis (concat tiles)))
  <= afe_rel u ue ee ea us es V B N Tt X Y P1 CG CR * V.
Proof.
  intros dotf g_rel g_abs q c scale uc P V X Y P1 CG CR E B N Tt vis tiles sck st
    Hexp0 Hvis Hdm Hpre Hq Hkeys HBt HN HT.
  destruct (kernel_run_visible_tiles_with dotf c q vis B tiles Hexp0 Hvis HBt) as [k0 [r [rest [Ecat [HBf [Hlen Est]]]]]].
  unfold st, sck; rewrite Est; cbn [ks_l ks_acc nth]; rewrite <- Ecat.
  apply (attention_forward_error_dot dotf g_rel g_abs q c scale uc P V X Y P1 CG CR E B N Tt k0 r rest); auto.
  - intros kv Hkv; rewrite Ecat in Hkv; apply filter_In in Hkv; destruct Hkv; auto.
  - rewrite Ecat; exact HN.
  - lia.
Qed.

(** The blocked fp32 dot ([score2]). *)
Theorem attention_forward_error_masked : forall (q : list R) (c scale uc P V X Y P1 CG CR : R) (E B N Tt : nat)
    (vis : list R * R -> bool) (tiles : list (list (list R * R))),
  let sck := fun kv : list R * R => score2 A_ c q (fst kv) in
  let st := kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) tiles in
  exp2 0 = 1 ->
  (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  afe_premises c scale uc P V X Y P1 CG CR E B N Tt ->
  length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true ->
     length (fst kv) = E /\ dot_abs q (fst kv) <= P /\ Rabs (snd kv) <= V) ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rabs (ff_rnd S_ (rnd (nth 0 (ks_acc st) 0 / ks_l st)) - exact_softmax scale q (filter vis (concat tiles)))
  <= afe_rel u ue ee ea us es V B N Tt X Y P1 CG CR * V.
Proof.
  intros q c scale uc P V X Y P1 CG CR E B N Tt vis tiles sck st Hexp0 Hvis Hpre.
  exact (attention_forward_error_masked_dot (bdot A_) _ _ q c scale uc P V X Y P1 CG CR E B N Tt vis tiles Hexp0 Hvis
           (blocked_dot_model A_ E (afe_E_pos _ _ _ _ _ _ _ _ _ _ _ _ _ _ Hpre) (afe_E_u _ _ _ _ _ _ _ _ _ _ _ _ _ _ Hpre))
           (afe_premises_blocked _ _ _ _ _ _ _ _ _ _ _ _ _ _ Hpre)).
Qed.

End Forward.


(** ** PART E: the 3xTF32 scores (float32 attention on CUDA)

    The float32 kernels on CUDA compute [s = tl.dot(q, k^T)] with Triton's
    3xTF32 (kernels/ojas_kernels/attention_args.py, [_HIGHEST = "tf32x3"]):
    FloatModel/Tf32Product.v's [tf32x3_dot_tc] (the high parts [cvt.rna] to
    TF32, the low parts read by truncation, the three TF32 dots on tensor
    cores in blocks of [k] with the alignment truncated to [F] bits and the
    block's sum rounded by [out], relative error [ur]) and, for a float32
    accumulation left to right, [tf32x3_dot_seq].  Both are dot models with
    [g_abs = 0] (no underflow: their accumulation is Flocq's FLX) and
      [g_rel = c + gamma d (3 q) kl + gamma d q kh]   ([tf32x3_tc_rel], [d = tc_delta k]),
      [g_rel = c + gamma u (3 E - 1) kl + gamma u E kh]   ([tf32x3_seq_rel]),
    so [attention_forward_error_masked_dot] gives the float32 forward with
    3xTF32 scores: [attention_forward_error_masked_tf32x3] (tensor cores,
    any output rounding [out] within [ur]) and
    [attention_forward_error_masked_tf32x3_seq].  Only the scores' dot is
    3xTF32 here: the kernel's [acc = tl.dot(p, v, acc)] is modelled as in
    PART C (fp32 products summed per tile), which the 3xTF32 P.V dot is not
    (not covered, as the MMA accumulating into [acc] is not for bf16). *)

Definition tf32x3_tc_rel (ua ur : R) (k q : nat) : R :=
  tf32x3_c (/ 2048) (/ 1024) + gamma (tc_delta ua ur k) (3 * q) * tf32x3_kl (/ 2048) (/ 1024)
  + gamma (tc_delta ua ur k) q * tf32x3_kh (/ 2048).

Definition tf32x3_seq_rel (E : nat) : R :=
  tf32x3_c (/ 2048) (/ 1024) + gamma (/ 16777216) (3 * E - 1) * tf32x3_kl (/ 2048) (/ 1024)
  + gamma (/ 16777216) E * tf32x3_kh (/ 2048).

Lemma gamma_nonneg_d : forall d n, 0 <= d -> INR n * d < 1 -> 0 <= gamma d n.
Proof.
  intros d n Hd H; unfold gamma, Rdiv; pose proof (pos_INR n).
  apply Rmult_le_pos; [nra | left; apply Rinv_0_lt_compat; lra].
Qed.

Lemma tf32x3_consts_nonneg :
  0 <= tf32x3_c (/ 2048) (/ 1024) /\ 0 <= tf32x3_kl (/ 2048) (/ 1024) /\ 0 <= tf32x3_kh (/ 2048).
Proof. unfold tf32x3_c, tf32x3_kl, tf32x3_kh; repeat split; lra. Qed.

(** 3xTF32 on tensor cores is a dot model for [E <= q k]. *)
Theorem tf32x3_tc_dot_model : forall (out : R -> R) (ur : R) (F : Z) (k q E : nat),
  0 <= ur -> (forall x, Rabs (out x - x) <= ur * Rabs x) ->
  (1 <= k)%nat -> (1 <= q)%nat -> (E <= q * k)%nat ->
  INR (3 * q) * tc_delta (bpow radix2 (1 - F)) ur k < 1 ->
  dot_model (tf32x3_dot_tc tf32_rna tf32_rz (tc_align F) out k) E (tf32x3_tc_rel (bpow radix2 (1 - F)) ur k q) 0.
Proof.
  intros out ur F k q E Hur Hout Hk Hq HE Hn.
  pose proof (tc_delta_nonneg (bpow radix2 (1 - F)) ur (bpow_ge_0 _ _) Hur k) as Hd.
  destruct tf32x3_consts_nonneg as [Hc [Hl Hh]].
  split.
  - unfold tf32x3_tc_rel.
    assert (INR q * tc_delta (bpow radix2 (1 - F)) ur k < 1).
    { assert (INR q <= INR (3 * q)) by (apply le_INR; lia); nra. }
    pose proof (gamma_nonneg_d _ (3 * q) Hd Hn); pose proof (gamma_nonneg_d _ q Hd H).
    assert (0 <= gamma (tc_delta (bpow radix2 (1 - F)) ur k) (3 * q) * tf32x3_kl (/ 2048) (/ 1024))
      by (apply Rmult_le_pos; lra).
    assert (0 <= gamma (tc_delta (bpow radix2 (1 - F)) ur k) q * tf32x3_kh (/ 2048))
      by (apply Rmult_le_pos; lra).
    lra.
  - intros a b Ha Hb; rewrite Rplus_0_r.
    unfold tf32x3_tc_rel; rewrite <- bpow_m11, <- bpow_m10.
    apply tf32x3_dot_tc_error; auto using bpow_ge_0, tf32_rna_err, tf32_rz_err, tc_align_err; lia.
Qed.

(** 3xTF32 accumulated left to right in float32 is a dot model for [3 E u < 1]. *)
Theorem tf32x3_seq_dot_model : forall E, INR (3 * E) * / 16777216 < 1 ->
  dot_model (tf32x3_dot_seq tf32_rna tf32_rz fp32_flx) E (tf32x3_seq_rel E) 0.
Proof.
  intros E Hn.
  destruct tf32x3_consts_nonneg as [Hc [Hl Hh]].
  assert (Hu : 0 <= / 16777216) by lra.
  split.
  - unfold tf32x3_seq_rel.
    assert (H1 : INR (3 * E - 1) * / 16777216 < 1).
    { assert (INR (3 * E - 1) <= INR (3 * E)) by (apply le_INR; lia); nra. }
    assert (H2 : INR E * / 16777216 < 1).
    { assert (INR E <= INR (3 * E)) by (apply le_INR; lia); nra. }
    pose proof (gamma_nonneg_d _ _ Hu H1); pose proof (gamma_nonneg_d _ _ Hu H2).
    assert (0 <= gamma (/ 16777216) (3 * E - 1) * tf32x3_kl (/ 2048) (/ 1024)) by (apply Rmult_le_pos; lra).
    assert (0 <= gamma (/ 16777216) E * tf32x3_kh (/ 2048)) by (apply Rmult_le_pos; lra).
    lra.
  - intros a b Ha Hb; rewrite Rplus_0_r; unfold tf32x3_seq_rel.
    rewrite <- Ha; apply tf32x3_dot_seq_error_fp32; [lia | rewrite Ha; exact Hn].
Qed.

(** The 16-bit kernels' dots on tensor cores (TensorCoreSum.v: the products of
    bf16 / fp16 operands exact, blocks of [k] aligned to [F] bits by
    truncation, each block's sum rounded by [out] within [ur]): a dot model
    with [g_rel = gamma (tc_delta k) q], [g_abs = 0] for [E <= q k]. *)
Definition tc_dot_fn (F : Z) (out : R -> R) (k : nat) (a b : list R) : R :=
  tc_dot (tc_align F) out k (map (fun xy => fst xy * snd xy) (combine a b)).

Theorem tc_dot_model : forall (out : R -> R) (ur : R) (F : Z) (k q E : nat),
  0 <= ur -> (forall x, Rabs (out x - x) <= ur * Rabs x) ->
  (1 <= k)%nat -> (1 <= q)%nat -> (E <= q * k)%nat ->
  INR q * tc_delta (bpow radix2 (1 - F)) ur k < 1 ->
  dot_model (tc_dot_fn F out k) E (gamma (tc_delta (bpow radix2 (1 - F)) ur k) q) 0.
Proof.
  intros out ur F k q E Hur Hout Hk Hq HE Hn.
  pose proof (tc_delta_nonneg (bpow radix2 (1 - F)) ur (bpow_ge_0 _ _) Hur k) as Hd.
  split; [exact (gamma_nonneg_d _ q Hd Hn) |].
  intros a b Ha Hb; rewrite Rplus_0_r; unfold tc_dot_fn.
  apply tc_dot_error_bound; auto using bpow_ge_0, tc_align_err; lia.
Qed.

(** The H100's tensor cores align a block's terms to the largest of the
    accumulator's exponent and the operands' exponent sums
    (TensorCoreSum.v's [tc_align_op], [tc_acc_op]; identified by ojas
    verify-device): the same constants. *)
Theorem tf32x3_tc_op_dot_model : forall (out : R -> R) (ur : R) (F : Z) (k q E : nat),
  0 <= ur -> (forall x, Rabs (out x - x) <= ur * Rabs x) ->
  (1 <= k)%nat -> (1 <= q)%nat -> (E <= q * k)%nat ->
  INR (3 * q) * tc_delta (bpow radix2 (1 - F)) ur k < 1 ->
  dot_model (tf32x3_dot_tc_op tf32_rna tf32_rz (tc_align_op F) out k) E
    (tf32x3_tc_rel (bpow radix2 (1 - F)) ur k q) 0.
Proof.
  intros out ur F k q E Hur Hout Hk Hq HE Hn.
  destruct (tf32x3_tc_dot_model out ur F k q E Hur Hout Hk Hq HE Hn) as [Hg _].
  split; [exact Hg |].
  intros a b Ha Hb; rewrite Rplus_0_r.
  unfold tf32x3_tc_rel; rewrite <- bpow_m11, <- bpow_m10.
  apply tf32x3_dot_tc_op_error;
    auto using bpow_ge_0, tf32_rna_err, tf32_rz_err, tc_align_op_err, tc_align_op_0; lia.
Qed.

Theorem tc_op_dot_model : forall (out : R -> R) (ur : R) (F : Z) (k q E : nat),
  0 <= ur -> (forall x, Rabs (out x - x) <= ur * Rabs x) ->
  (1 <= k)%nat -> (1 <= q)%nat -> (E <= q * k)%nat ->
  INR q * tc_delta (bpow radix2 (1 - F)) ur k < 1 ->
  dot_model (tc_dot_op (tc_align_op F) out k) E (gamma (tc_delta (bpow radix2 (1 - F)) ur k) q) 0.
Proof.
  intros out ur F k q E Hur Hout Hk Hq HE Hn.
  pose proof (tc_delta_nonneg (bpow radix2 (1 - F)) ur (bpow_ge_0 _ _) Hur k) as Hd.
  split; [exact (gamma_nonneg_d _ q Hd Hn) |].
  intros a b Ha Hb; rewrite Rplus_0_r.
  assert (E1 : dot_abs a b = rsum (map Rabs (prods (combine a b))))
    by (unfold dot_abs, prods; rewrite map_map; reflexivity).
  rewrite E1; change (dot_R a b) with (rsum (prods (combine a b))).
  apply tc_dot_op_error_bound; auto using bpow_ge_0, tc_align_op_err, tc_align_op_0; lia.
Qed.

Section Tf32x3.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

(** The float32 forward on CUDA with 3xTF32 scores on tensor cores: the kernel's
    loop under any mask, [attention_forward_error_masked_dot] at
    [tf32x3_tc_dot_model] (the head dim [E] in [q] blocks of [k]). *)
Theorem attention_forward_error_masked_tf32x3 : forall (out : R -> R) (ur : R) (F : Z) (k qb : nat)
    (q : list R) (c scale uc P V X Y P1 CG CR : R) (E B N Tt : nat)
    (vis : list R * R -> bool) (tiles : list (list (list R * R))),
  let dotf := tf32x3_dot_tc tf32_rna tf32_rz (tc_align F) out k in
  let sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv) in
  let st := kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) tiles in
  0 <= ur -> (forall x, Rabs (out x - x) <= ur * Rabs x) ->
  (1 <= k)%nat -> (1 <= qb)%nat -> (E <= qb * k)%nat ->
  INR (3 * qb) * tc_delta (bpow radix2 (1 - F)) ur k < 1 ->
  exp2 0 = 1 ->
  (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  afe_premises_de M c scale uc P (tf32x3_tc_rel (bpow radix2 (1 - F)) ur k qb * P + 0) V X Y P1 CG CR B N Tt ->
  length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true ->
     length (fst kv) = E /\ dot_abs q (fst kv) <= P /\ Rabs (snd kv) <= V) ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rabs (ff_rnd S_ (rnd (nth 0 (ks_acc st) 0 / ks_l st)) - exact_softmax scale q (filter vis (concat tiles)))
  <= afe_rel u ue ee ea us es V B N Tt X Y P1 CG CR * V.
Proof.
  intros out ur F k qb q c scale uc P V X Y P1 CG CR E B N Tt vis tiles dotf sck st Hur Hout Hk Hq HE Hn
    Hexp0 Hvis Hpre.
  exact (attention_forward_error_masked_dot M dotf _ 0 q c scale uc P V X Y P1 CG CR E B N Tt vis tiles Hexp0 Hvis
           (tf32x3_tc_dot_model out ur F k qb E Hur Hout Hk Hq HE Hn) Hpre).
Qed.

(** The same with the three TF32 dots accumulated left to right in float32
    ([tf32x3_seq_dot_model]). *)
Theorem attention_forward_error_masked_tf32x3_seq : forall (q : list R) (c scale uc P V X Y P1 CG CR : R)
    (E B N Tt : nat) (vis : list R * R -> bool) (tiles : list (list (list R * R))),
  let dotf := tf32x3_dot_seq tf32_rna tf32_rz fp32_flx in
  let sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv) in
  let st := kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) tiles in
  INR (3 * E) * / 16777216 < 1 ->
  exp2 0 = 1 ->
  (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  afe_premises_de M c scale uc P (tf32x3_seq_rel E * P + 0) V X Y P1 CG CR B N Tt ->
  length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true ->
     length (fst kv) = E /\ dot_abs q (fst kv) <= P /\ Rabs (snd kv) <= V) ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rabs (ff_rnd S_ (rnd (nth 0 (ks_acc st) 0 / ks_l st)) - exact_softmax scale q (filter vis (concat tiles)))
  <= afe_rel u ue ee ea us es V B N Tt X Y P1 CG CR * V.
Proof.
  intros q c scale uc P V X Y P1 CG CR E B N Tt vis tiles dotf sck st Hn Hexp0 Hvis Hpre.
  exact (attention_forward_error_masked_dot M dotf _ 0 q c scale uc P V X Y P1 CG CR E B N Tt vis tiles Hexp0 Hvis
           (tf32x3_seq_dot_model E Hn) Hpre).
Qed.

(** The 16-bit forward with its scores' dot on tensor cores ([tc_dot_model]):
    the kernel's loop under any mask, [attention_forward_error_masked_dot]
    at the block size [k], kept bits [F] and output rounding [out] that
    ojas verify-device identifies. *)
Theorem attention_forward_error_masked_tc : forall (out : R -> R) (ur : R) (F : Z) (k qb : nat)
    (q : list R) (c scale uc P V X Y P1 CG CR : R) (E B N Tt : nat)
    (vis : list R * R -> bool) (tiles : list (list (list R * R))),
  let dotf := tc_dot_fn F out k in
  let sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv) in
  let st := kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) tiles in
  0 <= ur -> (forall x, Rabs (out x - x) <= ur * Rabs x) ->
  (1 <= k)%nat -> (1 <= qb)%nat -> (E <= qb * k)%nat ->
  INR qb * tc_delta (bpow radix2 (1 - F)) ur k < 1 ->
  exp2 0 = 1 ->
  (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  afe_premises_de M c scale uc P (gamma (tc_delta (bpow radix2 (1 - F)) ur k) qb * P + 0) V X Y P1 CG CR B N Tt ->
  length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true ->
     length (fst kv) = E /\ dot_abs q (fst kv) <= P /\ Rabs (snd kv) <= V) ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rabs (ff_rnd S_ (rnd (nth 0 (ks_acc st) 0 / ks_l st)) - exact_softmax scale q (filter vis (concat tiles)))
  <= afe_rel u ue ee ea us es V B N Tt X Y P1 CG CR * V.
Proof.
  intros out ur F k qb q c scale uc P V X Y P1 CG CR E B N Tt vis tiles dotf sck st Hur Hout Hk Hq HE Hn
    Hexp0 Hvis Hpre.
  exact (attention_forward_error_masked_dot M dotf _ 0 q c scale uc P V X Y P1 CG CR E B N Tt vis tiles Hexp0 Hvis
           (tc_dot_model out ur F k qb E Hur Hout Hk Hq HE Hn) Hpre).
Qed.

(** The same on the H100's tensor cores (operand-exponent alignment, [tf32x3_tc_op_dot_model]). *)
Theorem attention_forward_error_masked_tf32x3_op : forall (out : R -> R) (ur : R) (F : Z) (k qb : nat)
    (q : list R) (c scale uc P V X Y P1 CG CR : R) (E B N Tt : nat)
    (vis : list R * R -> bool) (tiles : list (list (list R * R))),
  let dotf := tf32x3_dot_tc_op tf32_rna tf32_rz (tc_align_op F) out k in
  let sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv) in
  let st := kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) tiles in
  0 <= ur -> (forall x, Rabs (out x - x) <= ur * Rabs x) ->
  (1 <= k)%nat -> (1 <= qb)%nat -> (E <= qb * k)%nat ->
  INR (3 * qb) * tc_delta (bpow radix2 (1 - F)) ur k < 1 ->
  exp2 0 = 1 ->
  (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  afe_premises_de M c scale uc P (tf32x3_tc_rel (bpow radix2 (1 - F)) ur k qb * P + 0) V X Y P1 CG CR B N Tt ->
  length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true ->
     length (fst kv) = E /\ dot_abs q (fst kv) <= P /\ Rabs (snd kv) <= V) ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rabs (ff_rnd S_ (rnd (nth 0 (ks_acc st) 0 / ks_l st)) - exact_softmax scale q (filter vis (concat tiles)))
  <= afe_rel u ue ee ea us es V B N Tt X Y P1 CG CR * V.
Proof.
  intros out ur F k qb q c scale uc P V X Y P1 CG CR E B N Tt vis tiles dotf sck st Hur Hout Hk Hq HE Hn
    Hexp0 Hvis Hpre.
  exact (attention_forward_error_masked_dot M dotf _ 0 q c scale uc P V X Y P1 CG CR E B N Tt vis tiles Hexp0 Hvis
           (tf32x3_tc_op_dot_model out ur F k qb E Hur Hout Hk Hq HE Hn) Hpre).
Qed.

(** The same on the H100's tensor cores (operand-exponent alignment, [tc_op_dot_model]). *)
Theorem attention_forward_error_masked_tc_op : forall (out : R -> R) (ur : R) (F : Z) (k qb : nat)
    (q : list R) (c scale uc P V X Y P1 CG CR : R) (E B N Tt : nat)
    (vis : list R * R -> bool) (tiles : list (list (list R * R))),
  let dotf := tc_dot_op (tc_align_op F) out k in
  let sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv) in
  let st := kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) tiles in
  0 <= ur -> (forall x, Rabs (out x - x) <= ur * Rabs x) ->
  (1 <= k)%nat -> (1 <= qb)%nat -> (E <= qb * k)%nat ->
  INR qb * tc_delta (bpow radix2 (1 - F)) ur k < 1 ->
  exp2 0 = 1 ->
  (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  afe_premises_de M c scale uc P (gamma (tc_delta (bpow radix2 (1 - F)) ur k) qb * P + 0) V X Y P1 CG CR B N Tt ->
  length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true ->
     length (fst kv) = E /\ dot_abs q (fst kv) <= P /\ Rabs (snd kv) <= V) ->
  Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rabs (ff_rnd S_ (rnd (nth 0 (ks_acc st) 0 / ks_l st)) - exact_softmax scale q (filter vis (concat tiles)))
  <= afe_rel u ue ee ea us es V B N Tt X Y P1 CG CR * V.
Proof.
  intros out ur F k qb q c scale uc P V X Y P1 CG CR E B N Tt vis tiles dotf sck st Hur Hout Hk Hq HE Hn
    Hexp0 Hvis Hpre.
  exact (attention_forward_error_masked_dot M dotf _ 0 q c scale uc P V X Y P1 CG CR E B N Tt vis tiles Hexp0 Hvis
           (tc_op_dot_model out ur F k qb E Hur Hout Hk Hq HE Hn) Hpre).
Qed.

End Tf32x3.

(** ** PART F: the accumulating dots [tl.dot (a, b, acc)]

    NumeratorError.v's [acc_dot_model accf n g_rel g_abs]: on vectors of
    length [n], [|accf c a b - (c + a.b)| <= g_rel (|c| + sum |a_i b_i|) + g_abs].
    Instances: any dot model from 0 followed by one rounded addition to [c]
    ([acc_of_dot_model]; the fp32 per-product model [blocked_acc_dot_model],
    Triton's 3xTF32 [tf32x3_tc_op_acc_dot_model], which adds [c] after the
    three TF32 dots chained from 0), and the H100's tensor-core chain from
    [c] ([tc_acc_op_dot_model]: the accumulator aligned and truncated with
    each block of products).  The first three as NumeratorError.v's
    [acc_dot_split_model] too, [c] charged with the one addition's rounding
    only ([acc_of_dot_split_model], [blocked_acc_dot_split_model],
    [tf32x3_tc_op_acc_dot_split_model]: RunningAccError.v's backward bounds).
    [tile_acc_dot_step]: one key tile of the forward's
    [acc = tl.dot (p.to(v.dtype), v, acc * alpha)] with any of them, in the
    [inv] form of [rescale_step]. *)

(** A dot from 0 within [g_rel sum |a_i b_i| + g_abs], then [out (c + dot)]
    with [|out x - x| <= ur |x| + er], is within
    [ur |c| + (ur + (1 + ur) g_rel) sum |a_i b_i| + (1 + ur) g_abs + er] of
    [c + a.b]: [c] suffers the one rounding [ur] only. *)
Theorem acc_of_dot_split_model : forall (dotf : list R -> list R -> R) (out : R -> R) (n : nat) (g_rel g_abs ur er : R),
  dot_model dotf n g_rel g_abs -> 0 <= ur ->
  (forall x, Rabs (out x - x) <= ur * Rabs x + er) ->
  acc_dot_split_model (fun c a b => out (c + dotf a b)) n ur (ur + (1 + ur) * g_rel) ((1 + ur) * g_abs + er).
Proof.
  intros dotf out n g ga ur er Hd Hur Hout.
  pose proof (dm_rel_nonneg _ _ _ _ Hd) as Hg.
  split; [exact Hur | nra |].
  intros c a b Ha Hb.
  pose proof (dm_err _ _ _ _ Hd a b Ha Hb) as He.
  change (rsum (map (fun xy => fst xy * snd xy) (combine a b))) with (dot_R a b).
  change (rsum (map (fun xy => Rabs (fst xy * snd xy)) (combine a b))) with (dot_abs a b).
  pose proof (dot_R_abs a b) as HA.
  pose proof (Hout (c + dotf a b)) as Ho.
  set (d := dotf a b) in *; set (D := dot_R a b) in *; set (A := dot_abs a b) in *.
  replace (out (c + d) - (c + D)) with ((out (c + d) - (c + d)) + (d - D)) by ring.
  eapply Rle_trans; [apply Rabs_triang |].
  assert (Hcd : Rabs (c + d) <= Rabs c + A + (g * A + ga)).
  { replace (c + d) with (c + D + (d - D)) by ring.
    eapply Rle_trans; [apply Rabs_triang |].
    pose proof (Rabs_triang c D); lra. }
  assert (E1 : ur * Rabs (c + d) <= ur * (Rabs c + A + (g * A + ga))) by (apply Rmult_le_compat_l; lra).
  nra.
Qed.

(** The same as one constant (NumeratorError.v's [acc_dot_model]). *)
Theorem acc_of_dot_model : forall (dotf : list R -> list R -> R) (out : R -> R) (n : nat) (g_rel g_abs ur er : R),
  dot_model dotf n g_rel g_abs -> 0 <= ur ->
  (forall x, Rabs (out x - x) <= ur * Rabs x + er) ->
  acc_dot_model (fun c a b => out (c + dotf a b)) n (ur + (1 + ur) * g_rel) ((1 + ur) * g_abs + er).
Proof.
  intros dotf out n g ga ur er Hd Hur Hout.
  pose proof (dm_rel_nonneg _ _ _ _ Hd) as Hg.
  apply (acc_dot_model_of_split _ _ ur); [exact (acc_of_dot_split_model dotf out n g ga ur er Hd Hur Hout) | nra].
Qed.


(** The fp32 per-product model of the forward and backward theorems: the
    products rounded to [A] and summed ([bdot]) from 0, the sum added to
    [c] with one rounding. *)
Theorem blocked_acc_dot_model : forall (A : FloatFormat) E, (1 <= E)%nat -> INR E * ff_u A < 1 ->
  acc_dot_model (fun c a b => ff_rnd A (c + bdot A a b)) E
    (ff_u A + (1 + ff_u A) * gamma (ff_u A) E)
    ((1 + ff_u A) * ((1 + gamma (ff_u A) (E - 1)) * INR E * ff_eta A) + ff_eta A).
Proof.
  intros A E HE Hu.
  exact (acc_of_dot_model (bdot A) (ff_rnd A) E _ _ _ _ (blocked_dot_model A E HE Hu) (ff_u_nonneg A) (ff_abs A)).
Qed.

(** [tl.dot (a, b, c)] on the H100's tensor cores (TensorCoreSum.v's
    [tc_acc_op]: blocks of [k] products, each aligned and truncated
    together with the accumulator to [F] bits, rounded by [out]). *)
Definition tc_acc_fn (F : Z) (out : R -> R) (k : nat) (c : R) (a b : list R) : R :=
  tc_acc_op (tc_align_op F) out c (Attention.OnlineSoftmax.chunk k (combine a b)).

Theorem tc_acc_op_dot_model : forall (out : R -> R) (ur : R) (F : Z) (k q E : nat),
  0 <= ur -> (forall x, Rabs (out x - x) <= ur * Rabs x) ->
  (1 <= k)%nat -> (1 <= q)%nat -> (E <= q * k)%nat ->
  INR q * tc_delta (bpow radix2 (1 - F)) ur k < 1 ->
  acc_dot_model (tc_acc_fn F out k) E (gamma (tc_delta (bpow radix2 (1 - F)) ur k) q) 0.
Proof.
  intros out ur F k q E Hur Hout Hk Hq HE Hn.
  pose proof (tc_delta_nonneg (bpow radix2 (1 - F)) ur (bpow_ge_0 _ _) Hur k) as Hd.
  split; [exact (gamma_nonneg_d _ q Hd Hn) |].
  intros c a b Ha Hb; rewrite Rplus_0_r; unfold tc_acc_fn.
  assert (E1 : rsum (map (fun xy => Rabs (fst xy * snd xy)) (combine a b)) = rsum (map Rabs (prods (combine a b))))
    by (unfold prods; rewrite map_map; reflexivity).
  rewrite E1; change (rsum (map (fun xy => fst xy * snd xy) (combine a b))) with (rsum (prods (combine a b))).
  apply tc_acc_dot_op_error_bound; auto using bpow_ge_0, tc_align_op_err, tc_align_op_0; lia.
Qed.

(** Triton's fp32 [tl.dot (a, b, c)] in 3xTF32 on the H100: the three TF32
    dots chained from 0 on the tensor cores ([tf32x3_dot_tc_op]), then [c]
    added in fp32 ([out32], within [u32 |x| + e32]). *)
Definition tf32x3_acc_fn (F : Z) (out out32 : R -> R) (k : nat) (c : R) (a b : list R) : R :=
  out32 (c + tf32x3_dot_tc_op tf32_rna tf32_rz (tc_align_op F) out k a b).

Theorem tf32x3_tc_op_acc_dot_model : forall (out out32 : R -> R) (ur u32 e32 : R) (F : Z) (k q E : nat),
  0 <= ur -> (forall x, Rabs (out x - x) <= ur * Rabs x) ->
  0 <= u32 -> (forall x, Rabs (out32 x - x) <= u32 * Rabs x + e32) ->
  (1 <= k)%nat -> (1 <= q)%nat -> (E <= q * k)%nat ->
  INR (3 * q) * tc_delta (bpow radix2 (1 - F)) ur k < 1 ->
  acc_dot_model (tf32x3_acc_fn F out out32 k) E
    (u32 + (1 + u32) * tf32x3_tc_rel (bpow radix2 (1 - F)) ur k q) ((1 + u32) * 0 + e32).
Proof.
  intros out out32 ur u32 e32 F k q E Hur Hout Hu32 Hout32 Hk Hq HE Hn.
  exact (acc_of_dot_model _ out32 E _ _ u32 e32 (tf32x3_tc_op_dot_model out ur F k q E Hur Hout Hk Hq HE Hn)
           Hu32 Hout32).
Qed.

(** The fp32 per-product model ([blocked_acc_dot_model]) split: [g_acc = u],
    [g_dot = u + (1 + u) gamma_E], [g_abs = (1 + u) (1 + gamma_(E-1)) E eta + eta]. *)
Theorem blocked_acc_dot_split_model : forall (A : FloatFormat) E, (1 <= E)%nat -> INR E * ff_u A < 1 ->
  acc_dot_split_model (fun c a b => ff_rnd A (c + bdot A a b)) E
    (ff_u A)
    (ff_u A + (1 + ff_u A) * gamma (ff_u A) E)
    ((1 + ff_u A) * ((1 + gamma (ff_u A) (E - 1)) * INR E * ff_eta A) + ff_eta A).
Proof.
  intros A E HE Hu.
  exact (acc_of_dot_split_model (bdot A) (ff_rnd A) E _ _ _ _ (blocked_dot_model A E HE Hu) (ff_u_nonneg A)
           (ff_abs A)).
Qed.

(** Triton's 3xTF32 [tl.dot (a, b, c)] ([tf32x3_tc_op_acc_dot_model]) split:
    [g_acc = u32], [g_dot = u32 + (1 + u32) tf32x3_tc_rel], [g_abs = (1 + u32) 0 + e32]. *)
Theorem tf32x3_tc_op_acc_dot_split_model : forall (out out32 : R -> R) (ur u32 e32 : R) (F : Z) (k q E : nat),
  0 <= ur -> (forall x, Rabs (out x - x) <= ur * Rabs x) ->
  0 <= u32 -> (forall x, Rabs (out32 x - x) <= u32 * Rabs x + e32) ->
  (1 <= k)%nat -> (1 <= q)%nat -> (E <= q * k)%nat ->
  INR (3 * q) * tc_delta (bpow radix2 (1 - F)) ur k < 1 ->
  acc_dot_split_model (tf32x3_acc_fn F out out32 k) E
    u32 (u32 + (1 + u32) * tf32x3_tc_rel (bpow radix2 (1 - F)) ur k q) ((1 + u32) * 0 + e32).
Proof.
  intros out out32 ur u32 e32 F k q E Hur Hout Hu32 Hout32 Hk Hq HE Hn.
  exact (acc_of_dot_split_model _ out32 E _ _ u32 e32 (tf32x3_tc_op_dot_model out ur F k q E Hur Hout Hk Hq HE Hn)
           Hu32 Hout32).
Qed.

Lemma combine_map_both : forall {T} (f g : T -> R) (l : list T),
  combine (map f l) (map g l) = map (fun x => (f x, g x)) l.
Proof. intros T f g; induction l as [|x l IH]; [reflexivity | cbn [map combine]; rewrite IH; reflexivity]. Qed.

(** The accumulator after one accumulating dot: [x] within [(G - 1) S + R0]
    of [X], the exact products [ps . vs] within [(H - 1) T + Ry] of [Y],
    [sum |ps_i vs_i| <= H T + Ry]: [accf x ps vs] is within
    [(max (G, H) (1 + g_rel) - 1) (S + T) + (R0 + Ry) (1 + g_rel) + g_abs]
    of [X + Y] (the shape of [inv_add], with [g_rel] for [u] and [g_abs]). *)
Lemma inv_acc : forall accf n g_rel g_abs G R0 x X S H Ry Y T (ps vs : list R),
  acc_dot_model accf n g_rel g_abs -> length ps = n -> length vs = n ->
  Rabs X <= S -> 0 <= T -> inv G R0 x X S ->
  Rabs (dot_R ps vs - Y) <= (H - 1) * T + Ry -> dot_abs ps vs <= H * T + Ry ->
  inv (Rmax G H * (1 + g_rel)) ((R0 + Ry) * (1 + g_rel) + g_abs) (accf x ps vs) (X + Y) (S + T).
Proof.
  intros accf n g ga G R0 x X S H Ry Y T ps vs Hm Hp Hv HX HT Cx Cy Ha.
  pose proof (adm_rel_nonneg _ _ _ _ Hm) as Hg.
  pose proof (adm_err _ _ _ _ Hm x ps vs Hp Hv) as He.
  change (rsum (map (fun xy => fst xy * snd xy) (combine ps vs))) with (dot_R ps vs) in He.
  change (rsum (map (fun xy => Rabs (fst xy * snd xy)) (combine ps vs))) with (dot_abs ps vs) in He.
  unfold inv in *.
  assert (HS : 0 <= S) by (eapply Rle_trans; [apply Rabs_pos | exact HX]).
  set (Gm := Rmax G H).
  assert (HGm : G <= Gm) by apply Rmax_l. assert (HHm : H <= Gm) by apply Rmax_r.
  assert (Hx : Rabs x <= G * S + R0).
  { replace x with ((x - X) + X) by ring; eapply Rle_trans; [apply Rabs_triang | lra]. }
  set (y := accf x ps vs) in *; set (D := dot_R ps vs) in *; set (A := dot_abs ps vs) in *.
  replace (y - (X + Y)) with ((y - (x + D)) + (x - X) + (D - Y)) by ring.
  eapply Rle_trans; [apply Rabs_triang |].
  eapply Rle_trans; [apply Rplus_le_compat_r, Rabs_triang |].
  assert (E1 : g * (Rabs x + A) <= g * (G * S + R0 + (H * T + Ry))) by (apply Rmult_le_compat_l; lra).
  assert (E2 : (G - 1) * S <= (Gm - 1) * S) by (apply Rmult_le_compat_r; lra).
  assert (E3 : (H - 1) * T <= (Gm - 1) * T) by (apply Rmult_le_compat_r; lra).
  assert (E4 : g * (G * S) <= g * (Gm * S)) by (apply Rmult_le_compat_l; [lra | apply Rmult_le_compat_r; lra]).
  assert (E5 : g * (H * T) <= g * (Gm * T)) by (apply Rmult_le_compat_l; [lra | apply Rmult_le_compat_r; lra]).
  nra.
Qed.

(** [g_abs >= 0]: the model at [c = 0] on zero vectors. *)
Lemma adm_abs_nonneg : forall accf n g_rel g_abs, acc_dot_model accf n g_rel g_abs -> 0 <= g_abs.
Proof.
  intros accf n g ga Hm.
  pose proof (adm_err _ _ _ _ Hm 0 (repeat 0 n) (repeat 0 n) (repeat_length _ _) (repeat_length _ _)) as H.
  assert (E : forall m, rsum (map (fun xy => Rabs (fst xy * snd xy)) (combine (repeat 0 m) (repeat 0 m))) = 0).
  { intros m; induction m as [|m IH]; [reflexivity |].
    cbn [repeat combine map]; rewrite rsum_cons; cbn [fst snd]; rewrite Rmult_0_l, Rabs_R0, IH; ring. }
  rewrite E, Rabs_R0, Rplus_0_r, Rmult_0_r in H.
  match type of H with Rabs ?x <= _ => pose proof (Rabs_pos x) end; lra.
Qed.

(** A chain of [t] accumulating dots from [c] (the backward's [dv], [dk],
    [dq] over the tiles): within
    [((1 + g_rel)^t - 1) (|c| + sum_tiles sum |a_i b_i|) + t (1 + g_rel)^t g_abs]
    of [c + sum_tiles a.b]. *)
Theorem acc_chain_error : forall accf n g_rel g_abs (tiles : list (list R * list R)) c,
  acc_dot_model accf n g_rel g_abs ->
  Forall (fun ab => length (fst ab) = n /\ length (snd ab) = n) tiles ->
  Rabs (fold_left (fun acc ab => accf acc (fst ab) (snd ab)) tiles c
        - (c + rsum (map (fun ab => dot_R (fst ab) (snd ab)) tiles)))
  <= ((1 + g_rel) ^ length tiles - 1) * (Rabs c + rsum (map (fun ab => dot_abs (fst ab) (snd ab)) tiles))
     + INR (length tiles) * (1 + g_rel) ^ length tiles * g_abs.
Proof.
  intros accf n g ga tiles c Hm Hl.
  pose proof (adm_rel_nonneg _ _ _ _ Hm) as Hg; pose proof (adm_abs_nonneg _ _ _ _ Hm) as Hga.
  revert c Hl; induction tiles as [|ab rest IH]; intros c Hl.
  - cbn [fold_left map length]; unfold rsum; cbn [fold_right INR pow].
    replace (c - (c + 0)) with 0 by ring; rewrite Rabs_R0.
    pose proof (Rabs_pos c); lra.
  - inversion Hl as [|ab' rest' Hab Hrest]; subst; destruct Hab as [Ha Hb].
    cbn [fold_left map length]; rewrite !rsum_cons.
    set (c' := accf c (fst ab) (snd ab)).
    pose proof (IH c' Hrest) as Hi.
    pose proof (adm_err _ _ _ _ Hm c (fst ab) (snd ab) Ha Hb) as He.
    change (rsum (map (fun xy => fst xy * snd xy) (combine (fst ab) (snd ab)))) with (dot_R (fst ab) (snd ab)) in He.
    change (rsum (map (fun xy => Rabs (fst xy * snd xy)) (combine (fst ab) (snd ab)))) with (dot_abs (fst ab) (snd ab)) in He.
    fold c' in He.
    pose proof (dot_R_abs (fst ab) (snd ab)) as HDA.
    set (D := dot_R (fst ab) (snd ab)) in *; set (A := dot_abs (fst ab) (snd ab)) in *.
    set (DR := rsum (map (fun ab0 => dot_R (fst ab0) (snd ab0)) rest)) in *.
    set (AR := rsum (map (fun ab0 => dot_abs (fst ab0) (snd ab0)) rest)) in *.
    set (F := fold_left (fun acc ab0 => accf acc (fst ab0) (snd ab0)) rest c') in *.
    set (t := length rest) in *.
    assert (HA : 0 <= A) by (unfold A, dot_abs; apply rsum_nonneg; intros y Hy; apply in_map_iff in Hy;
                             destruct Hy as [xy [<- _]]; apply Rabs_pos).
    assert (HAR : 0 <= AR).
    { unfold AR; apply rsum_nonneg; intros y Hy; apply in_map_iff in Hy; destruct Hy as [ab0 [<- _]].
      unfold dot_abs; apply rsum_nonneg; intros z Hz; apply in_map_iff in Hz; destruct Hz as [xy [<- _]]; apply Rabs_pos. }
    assert (HP : 1 <= (1 + g) ^ t) by (apply pow_R1_Rle; lra).
    set (P := (1 + g) ^ t) in *.
    rewrite S_INR; cbn [pow]; fold P.
    assert (Hc' : Rabs c' <= (1 + g) * (Rabs c + A) + ga).
    { replace c' with ((c' - (c + D)) + c + D) by ring.
      pose proof (Rabs_triang (c' - (c + D) + c) D); pose proof (Rabs_triang (c' - (c + D)) c).
      lra. }
    replace (F - (c + (D + DR))) with ((F - (c' + DR)) + (c' - (c + D))) by ring.
    eapply Rle_trans; [apply Rabs_triang |].
    pose proof (Rabs_pos c) as Hc0; pose proof (pos_INR t) as Ht.
    assert (E1 : (P - 1) * (Rabs c' + AR) <= (P - 1) * ((1 + g) * (Rabs c + A) + ga + AR))
      by (apply Rmult_le_compat_l; lra).
    assert (E2 : 0 <= g * P * AR) by (apply Rmult_le_pos; [nra | lra]).
    assert (E3 : 0 <= g * P * ga * (INR t + 1)) by (apply Rmult_le_pos; [apply Rmult_le_pos; nra | lra]).
    nra.
Qed.

Section AccTile.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

(** One key tile of the forward with the accumulating MMA, the kernel's
    [acc = tl.dot (p.to(v.dtype), v, acc * alpha)] for one coordinate:
    [x] the accumulator at the old max [m] (within [(G - 1) S + R0] of [X]),
    the tile's scores [s_j] at most [K] below the new max [m'],
    [p_j = exp2 (rnd (s_j - m'))] rounded to the storage format, [accf]
    any accumulating dot model.  The result is within the [inv] bound of
    [X 2^(m - m') + sum_j 2^(s_j - m') v_j] against
    [S 2^(m - m') + sum_j 2^(s_j - m') |v_j|]; compared with
    [rescale_step] (the tile's P.V from 0, then [rnd (rnd (x alpha) + y)])
    the last [(1 + u)] and the tile's own rounding become the model's
    [(1 + g_rel)] and [g_abs]. *)
Theorem tile_acc_dot_step : forall accf n g_rel g_abs G R0 x X S K m m' (svs : list (R * R)),
  acc_dot_model accf n g_rel g_abs -> length svs = n ->
  1 <= G -> 0 <= R0 -> 0 <= K -> fmt m -> fmt m' -> m <= m' -> Rabs X <= S ->
  (forall sv, In sv svs -> fmt (fst sv) /\ fst sv <= m' /\ m' - fst sv <= K) ->
  inv G R0 x X S ->
  inv (Rmax (G * exp2_factor M m m' * (1 + u)) ((1 + us) * tile_E M K) * (1 + g_rel))
      ((((R0 * (Rpower 2 (m - m') * exp2_factor M m m' + ee) + G * S * ee) * (1 + u) + ea)
        + ((1 + us) * ee + es) * rsum (map (fun sv => Rabs (snd sv)) svs)) * (1 + g_rel) + g_abs)
      (accf (rnd (x * exp2 (rnd (m - m')))) (map (fun sv => ff_rnd S_ (exp2 (rnd (fst sv - m')))) svs)
            (map snd svs))
      (X * Rpower 2 (m - m') + exact_pv m' svs) (S * Rpower 2 (m - m') + exact_pv_abs m' svs).
Proof.
  intros accf n g ga G R0 x X S K m m' svs Hm Hn HG HR HK Fm Fm' Hmm HX Hsv Cx.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (mp_eta_e_nonneg M) as Hee.
  pose proof (exp2_factor_ge_1 M m m' Hmm) as HE.
  assert (Ha0 : 0 < Rpower 2 (m - m')) by apply Rpower_pos.
  assert (HS : 0 <= S) by (eapply Rle_trans; [apply Rabs_pos | exact HX]).
  pose proof (inv_mul_alpha M G R0 x X S m m' HG HR Fm Fm' Hmm HX Cx) as C1.
  assert (HXa : Rabs (X * Rpower 2 (m - m')) <= S * Rpower 2 (m - m')).
  { rewrite Rabs_mult, (Rabs_right (Rpower 2 (m - m'))) by lra.
    apply Rmult_le_compat_r; lra. }
  assert (HG1 : 1 <= G * exp2_factor M m m') by nra.
  assert (HR1 : 0 <= R0 * (Rpower 2 (m - m') * exp2_factor M m m' + ee) + G * S * ee).
  { apply Rplus_le_le_0_compat; [apply Rmult_le_pos; [lra | nra] |].
    apply Rmult_le_pos; [apply Rmult_le_pos; lra | exact Hee]. }
  pose proof (inv_round M _ _ _ _ _ HG1 HR1 HXa C1) as C2.
  pose proof (tile_E_ge_1 M K HK) as HEK.
  set (f := fun sv : R * R => ff_rnd S_ (exp2 (rnd (fst sv - m')))).
  set (W := fun sv : R * R => Rpower 2 (fst sv - m')).
  destruct (weighted_close f W snd ((1 + us) * tile_E M K) ((1 + us) * ee + es) svs) as [Hw1 Hw2].
  { intros sv _; left; apply Rpower_pos. }
  { intros sv Hin; destruct (Hsv sv Hin) as [Fs [H1 H2]].
    apply stored_weight_close; [apply Rpower_pos | exact HEK |].
    apply weight_close; assumption. }
  assert (ED : dot_R (map f svs) (map snd svs) = rsum (map (fun sv => f sv * snd sv) svs)).
  { unfold dot_R; rewrite combine_map_both, map_map; reflexivity. }
  assert (EA : dot_abs (map f svs) (map snd svs) = rsum (map (fun sv => Rabs (f sv * snd sv)) svs)).
  { unfold dot_abs; rewrite combine_map_both, map_map; reflexivity. }
  assert (HT : 0 <= exact_pv_abs m' svs) by (eapply Rle_trans; [apply Rabs_pos | apply exact_pv_abs_ge]).
  apply (inv_acc accf n g ga _ _ _ _ _ _ _ _ _ _ _ Hm); [rewrite map_length; exact Hn | rewrite map_length; exact Hn
    | exact HXa | exact HT | exact C2 | rewrite ED; exact Hw1 | rewrite EA; exact Hw2].
Qed.

End AccTile.
