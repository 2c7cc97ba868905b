(** * Forward error of one row of the attention numerator [sum_j p_j v_j], as the kernel computes it.

    In [kernels/ojas_kernels/attention_forward.py] ([_fwd_tile]) the weights [p = exp2 (s - m)]
    are fp32; the kernel rounds them to the value dtype ([p.to(v.dtype)])
    and takes [tl.dot (p, v, acc)] on the tensor cores with fp32
    accumulation, one key tile of [BLOCK_N] keys at a time.  For a
    [MixedModel] [M] (storage rounding [rnd_s], accumulation format [A])
    we model one output coordinate of that product as
    [blocked_dot A blk (map rnd_s ps) vs] (BlockedSum.v): each product
    rounded to [A] (exact whenever it is a number of [A]), tile sums left to
    right, tiles combined in order.  With [n] keys, [t] tiles, [n <= t blk],
    [k = (blk - 1) + (t - 1)], [p_j >= 0],
    [W = sum_j p_j |v_j|] and [Av = sum_j |v_j|]:

      |computed - sum_j p_j v_j|
        <= (u_s + gamma_a (k + 1) (1 + u_s)) W
           + (1 + gamma_a (k + 1)) eta_s Av + (1 + gamma_a k) n eta_a

    ([mixed_numerator_error_bound]; bf16 with fp32 accumulation:
    [bf16_numerator_error_bound]).  The leading term does not grow with
    [n] except through [gamma_a (k + 1)], and [k] is about [blk + n / blk]:
    the bf16 rounding of [p] ([u_s = 2^-8]) dominates.

    Numbers (computed with Python's fractions/floats, n = 4096 keys,
    BLOCK_N = 64 as [default_config] picks for bf16 at head dim 128, so
    t = 64, k = 126), dividing by [Z = sum_j p_j >= 1] (the max key has
    weight 1) and using [W <= V Z], [Av <= n V], [V = max_j |v_j|]:
      - this bound, bf16 storage / fp32 accumulation:
          (2^-8 + gamma_(2^-24)(127) (1 + 2^-8)) V + (1 + gamma(127)) 2^-134 n V
            + (1 + gamma(126)) n 2^-150
          = 3.9138e-3 V + 1.9e-37 V + 2.9e-42
        (gamma_(2^-24)(127) = 7.5698e-6, gamma_(2^-24)(126) = 7.5102e-6);
      - the old bound of Attention/StreamError.v ([stream_err n], one
        precision [u] for every operation, [ue = u]) at n = 4096:
          u = 2^-8 (bf16): [stream_beta 4096] = 4.4e21 > 1, the premise
          [stream_beta n < 1] fails: vacuous (fp16, u = 2^-11: 698, vacuous);
          u = 2^-24 (fp32 throughout): [stream_err 4096] = 1.65e-3 V.
        The fp32-only analogue of this bound (u_s = 0, fp32 weights and
        values) is gamma_(2^-24)(127) V = 7.57e-6 V, 218 times smaller than
        [stream_err 4096] in fp32; the two bound different quantities (the
        old one the whole normalised output, this one the numerator over Z).
    Caveats: this is the numerator only, for given fp32 weights [p_j]: the
    error of [p_j] itself (scores, exp2), the rescaling [acc * alpha]
    between tiles, the denominator [l] and the division are not in it, so
    it is not yet a bound on the attention output; and the order of the
    additions inside one tensor-core MMA is modelled as left to right.

    [acc_dot_model] (the accumulating [tl.dot (a, b, acc)] as a parameter;
    instances in ForwardError.v, PART F) and [acc_numerator_error_bound]:
    [tl.dot (p.to(v.dtype), v, c)] with any such model,
      |accf c (rnd_s p) v - (c + sum_j p_j v_j)|
        <= g_rel |c| + (u_s + g_rel (1 + u_s)) W + (1 + g_rel) eta_s Av + g_abs. *)

From Coq Require Import Reals List Lra Lia Arith.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.DotError FloatModel.MixedPrecision FloatModel.BlockedSum.
From Ojas Require Import FloatModel.Notations.
Import ListNotations.
Open Scope R_scope.

Lemma combine_map_l : forall (f : R -> R) (a b : list R),
  combine (map f a) b = map (fun xy => (f (fst xy), snd xy)) (combine a b).
Proof.
  intros f; induction a as [|x a IH]; intros [|y b]; try reflexivity.
  cbn [map combine]; rewrite IH; reflexivity.
Qed.

(** ** The accumulating dot as a parameter

    [tl.dot (a, b, acc)] adds the products of [a] and [b] to a running
    fp32 accumulator [c]: [acc_dot_model accf n g_rel g_abs] says that on
    vectors of length [n] the computed [accf c a b] is within
    [g_rel (|c| + sum_i |a_i b_i|) + g_abs] of [c + sum_i a_i b_i].
    Instances (ForwardError.v, PART F): a dot from 0 then one rounded
    addition to [c] ([acc_of_dot_model]: the fp32 per-product model,
    [blocked_acc_dot_model], and Triton's 3xTF32, [tf32x3_tc_op_acc_dot_model]),
    and the tensor cores' chain from [c] ([tc_acc_op_dot_model]). *)
Record acc_dot_model (accf : R -> list R -> list R -> R) (n : nat) (g_rel g_abs : R) : Prop := {
  adm_rel_nonneg : 0 <= g_rel;
  adm_err : forall c a b, length a = n -> length b = n ->
    Rabs (accf c a b - (c + rsum (map (fun xy => fst xy * snd xy) (combine a b))))
    <= g_rel * (Rabs c + rsum (map (fun xy => Rabs (fst xy * snd xy)) (combine a b))) + g_abs
}.

(** The accumulating dot with one constant for the accumulator and one for the
    products: [acc_dot_split_model accf n g_acc g_dot g_abs] says that on vectors
    of length [n] the computed [accf c a b] is within
    [g_acc |c| + g_dot sum_i |a_i b_i| + g_abs] of [c + sum_i a_i b_i].  A dot
    from 0 then one rounded addition to [c] charges [c] with that one rounding
    only (ForwardError.v's [acc_of_dot_split_model], [blocked_acc_dot_split_model],
    [tf32x3_tc_op_acc_dot_split_model]); any [acc_dot_model] is one with
    [g_acc = g_dot = g_rel] ([acc_dot_split_of_model]: the tensor cores'
    chain from [c], [tc_acc_op_dot_model]). *)
Record acc_dot_split_model (accf : R -> list R -> list R -> R) (n : nat) (g_acc g_dot g_abs : R) : Prop := {
  adsm_acc_nonneg : 0 <= g_acc;
  adsm_dot_nonneg : 0 <= g_dot;
  adsm_err : forall c a b, length a = n -> length b = n ->
    Rabs (accf c a b - (c + rsum (map (fun xy => fst xy * snd xy) (combine a b))))
    <= g_acc * Rabs c + g_dot * rsum (map (fun xy => Rabs (fst xy * snd xy)) (combine a b)) + g_abs
}.

(** A split model with [g_acc <= g_dot] is a one-constant model at [g_dot]. *)
Lemma acc_dot_model_of_split : forall accf n g_acc g_dot g_abs,
  acc_dot_split_model accf n g_acc g_dot g_abs -> g_acc <= g_dot -> acc_dot_model accf n g_dot g_abs.
Proof.
  intros accf n ga gd gb Hm Hle; pose proof (adsm_dot_nonneg _ _ _ _ _ Hm) as Hd.
  split; [exact Hd |].
  intros c a b Ha Hb; eapply Rle_trans; [exact (adsm_err _ _ _ _ _ Hm c a b Ha Hb) |].
  pose proof (Rabs_pos c); nra.
Qed.

(** The one-constant model is the split one with [g_acc = g_dot]. *)
Lemma acc_dot_split_of_model : forall accf n g_rel g_abs,
  acc_dot_model accf n g_rel g_abs -> acc_dot_split_model accf n g_rel g_rel g_abs.
Proof.
  intros accf n g ga Hm; pose proof (adm_rel_nonneg _ _ _ _ Hm) as Hg.
  split; [exact Hg | exact Hg |].
  intros c a b Ha Hb; pose proof (adm_err _ _ _ _ Hm c a b Ha Hb) as H; lra.
Qed.

(** Weights [f x] within [(H - 1) W x + c] of [W x >= 0], times [v x]: the
    weighted sums are within [(H - 1) sum W |v| + c sum |v|], and the
    computed weights' [sum |f v|] is at most [H sum W |v| + c sum |v|]. *)
Lemma weighted_close : forall {T} (f W v : T -> R) (H c : R) (xs : list T),
  (forall x, In x xs -> 0 <= W x) ->
  (forall x, In x xs -> Rabs (f x - W x) <= (H - 1) * W x + c) ->
  Rabs (rsum (map (fun x => f x * v x) xs) - rsum (map (fun x => W x * v x) xs))
    <= (H - 1) * rsum (map (fun x => W x * Rabs (v x)) xs) + c * rsum (map (fun x => Rabs (v x)) xs)
  /\ rsum (map (fun x => Rabs (f x * v x)) xs)
    <= H * rsum (map (fun x => W x * Rabs (v x)) xs) + c * rsum (map (fun x => Rabs (v x)) xs).
Proof.
  intros T f W v H c xs HW Hf; induction xs as [|x xs IH].
  - unfold rsum; simpl; rewrite Rminus_0_r, Rabs_R0; lra.
  - cbn [map]; rewrite !rsum_cons.
    destruct IH as [IH1 IH2];
      [intros y Hy; apply HW; right; exact Hy | intros y Hy; apply Hf; right; exact Hy |].
    assert (H0 : 0 <= W x) by (apply HW; left; reflexivity).
    pose proof (Hf x (or_introl eq_refl)) as Hx.
    pose proof (Rabs_pos (v x)) as Hv.
    assert (E1 : Rabs (f x * v x - W x * v x) <= ((H - 1) * W x + c) * Rabs (v x)).
    { replace (f x * v x - W x * v x) with ((f x - W x) * v x) by ring; rewrite Rabs_mult.
      apply Rmult_le_compat_r; [exact Hv | exact Hx]. }
    assert (E2 : Rabs (f x * v x) <= (H * W x + c) * Rabs (v x)).
    { replace (f x * v x) with ((f x * v x - W x * v x) + W x * v x) by ring.
      eapply Rle_trans; [apply Rabs_triang |].
      rewrite Rabs_mult, (Rabs_right (W x)) by lra; nra. }
    split.
    + replace (f x * v x + rsum (map (fun y => f y * v y) xs) - (W x * v x + rsum (map (fun y => W y * v y) xs)))
        with ((f x * v x - W x * v x) + (rsum (map (fun y => f y * v y) xs) - rsum (map (fun y => W y * v y) xs)))
        by ring.
      eapply Rle_trans; [apply Rabs_triang |]; nra.
    + nra.
Qed.

Section Numerator.

Variable M : MixedModel.

Import ModelNotations.

(** The weights rounded to the storage format: [weighted_close] with [H = 1 + u_s], [c = eta_s]. *)
Lemma stored_weights_close : forall (xs : list (R * R)),
  (forall pv, In pv xs -> 0 <= fst pv) ->
  Rabs (rsum (map (fun pv => ff_rnd S_ (fst pv) * snd pv) xs) - rsum (map (fun pv => fst pv * snd pv) xs))
    <= ff_u S_ * rsum (map (fun pv => fst pv * Rabs (snd pv)) xs)
       + ff_eta S_ * rsum (map (fun pv => Rabs (snd pv)) xs)
  /\ rsum (map (fun pv => Rabs (ff_rnd S_ (fst pv) * snd pv)) xs)
    <= (1 + ff_u S_) * rsum (map (fun pv => fst pv * Rabs (snd pv)) xs)
       + ff_eta S_ * rsum (map (fun pv => Rabs (snd pv)) xs).
Proof.
  intros xs Hxs.
  destruct (weighted_close (fun pv => ff_rnd S_ (fst pv)) fst snd (1 + ff_u S_) (ff_eta S_) xs Hxs) as [H1 H2].
  - intros pv Hin; pose proof (ff_abs S_ (fst pv)) as Hr.
    rewrite (Rabs_right (fst pv)) in Hr by (apply Rle_ge, Hxs, Hin); lra.
  - split; [| exact H2].
    replace (1 + ff_u S_ - 1) with (ff_u S_) in H1 by ring; exact H1.
Qed.

(** [tl.dot (p.to(v.dtype), v, c)] with any accumulating dot model: the
    weights [p_j >= 0] rounded to the storage format, the products of the
    rounded weights and the values added to the accumulator [c] by [accf].
    With [W = sum_j p_j |v_j|], [Av = sum_j |v_j|]:
      |accf c (rnd_s p) v - (c + sum_j p_j v_j)|
        <= g_rel |c| + (u_s + g_rel (1 + u_s)) W + (1 + g_rel) eta_s Av + g_abs. *)
Theorem acc_numerator_error_bound : forall accf n g_rel g_abs c (ps vs : list R),
  acc_dot_model accf n g_rel g_abs -> length ps = n -> length vs = n ->
  Forall (fun p => 0 <= p) ps ->
  Rabs (accf c (map (ff_rnd S_) ps) vs - (c + rsum (map (fun pv => fst pv * snd pv) (combine ps vs))))
  <= g_rel * Rabs c
     + (ff_u S_ + g_rel * (1 + ff_u S_)) * rsum (map (fun pv => fst pv * Rabs (snd pv)) (combine ps vs))
     + (1 + g_rel) * ff_eta S_ * rsum (map (fun pv => Rabs (snd pv)) (combine ps vs))
     + g_abs.
Proof.
  intros accf n g_rel g_abs c ps vs Hm Hp Hv Hps.
  assert (Hxs : forall pv, In pv (combine ps vs) -> 0 <= fst pv).
  { intros [p v] Hin; apply in_combine_l in Hin; exact (proj1 (Forall_forall _ _) Hps p Hin). }
  destruct (stored_weights_close (combine ps vs) Hxs) as [Hw1 Hw2].
  pose proof (adm_err _ _ _ _ Hm c (map (ff_rnd S_) ps) vs ltac:(rewrite map_length; exact Hp) Hv) as Hd.
  rewrite combine_map_l, !map_map in Hd; cbn [fst snd] in Hd.
  pose proof (adm_rel_nonneg _ _ _ _ Hm) as Hg.
  set (D := accf c (map (ff_rnd S_) ps) vs) in *.
  set (S1 := rsum (map (fun pv => ff_rnd S_ (fst pv) * snd pv) (combine ps vs))) in *.
  set (S0 := rsum (map (fun pv => fst pv * snd pv) (combine ps vs))) in *.
  set (P1 := rsum (map (fun pv => Rabs (ff_rnd S_ (fst pv) * snd pv)) (combine ps vs))) in *.
  set (W := rsum (map (fun pv => fst pv * Rabs (snd pv)) (combine ps vs))) in *.
  set (Av := rsum (map (fun pv => Rabs (snd pv)) (combine ps vs))) in *.
  replace (D - (c + S0)) with ((D - (c + S1)) + (S1 - S0)) by ring.
  eapply Rle_trans; [apply Rabs_triang |].
  assert (g_rel * (Rabs c + P1) <= g_rel * (Rabs c + ((1 + ff_u S_) * W + ff_eta S_ * Av)))
    by (apply Rmult_le_compat_l; lra).
  lra.
Qed.

Theorem mixed_numerator_error_bound : forall blk t (ps vs : list R),
  (1 <= blk)%nat -> (1 <= t)%nat -> (length (combine ps vs) <= t * blk)%nat ->
  Forall (fun p => 0 <= p) ps ->
  INR (S ((blk - 1) + (t - 1))) * ff_u A_ < 1 ->
  Rabs (blocked_dot A_ blk (map (ff_rnd S_) ps) vs
        - rsum (map (fun pv => fst pv * snd pv) (combine ps vs)))
  <= (ff_u S_ + gamma (ff_u A_) (S ((blk - 1) + (t - 1))) * (1 + ff_u S_))
       * rsum (map (fun pv => fst pv * Rabs (snd pv)) (combine ps vs))
     + (1 + gamma (ff_u A_) (S ((blk - 1) + (t - 1)))) * ff_eta S_
       * rsum (map (fun pv => Rabs (snd pv)) (combine ps vs))
     + (1 + gamma (ff_u A_) ((blk - 1) + (t - 1))) * INR (length (combine ps vs)) * ff_eta A_.
Proof.
  intros blk t ps vs Hb Ht Hl Hp Hn.
  set (k := ((blk - 1) + (t - 1))%nat) in *.
  set (us := ff_u S_); set (es := ff_eta S_).
  pose proof (ff_u_nonneg S_) as Hus; pose proof (ff_eta_nonneg S_) as Hes; fold us es in Hus, Hes.
  pose proof (ff_u_nonneg A_) as Hua.
  assert (Hl' : (length (combine (map (ff_rnd S_) ps) vs) <= t * blk)%nat)
    by (rewrite combine_map_l, map_length; exact Hl).
  pose proof (blocked_dot_error_bound_rounded A_ blk t (map (ff_rnd S_) ps) vs Hb Ht Hl' Hn) as Hd.
  fold k in Hd.
  rewrite combine_map_l, map_length, !map_map in Hd; cbn [fst snd] in Hd.
  set (xs := combine ps vs) in *.
  assert (Hxs : forall pv, In pv xs -> 0 <= fst pv).
  { intros [p v] Hin; apply in_combine_l in Hin; exact (proj1 (Forall_forall _ _) Hp p Hin). }
  set (W := rsum (map (fun pv => fst pv * Rabs (snd pv)) xs)).
  set (Av := rsum (map (fun pv => Rabs (snd pv)) xs)).
  (* the bf16 rounding of the weights *)
  destruct (stored_weights_close xs Hxs) as [Hw1 Hw2]; fold us es W Av in Hw1, Hw2.
  set (g1 := gamma (ff_u A_) (S k)) in *; set (g0 := gamma (ff_u A_) k) in *.
  assert (Hg1 : 0 <= g1).
  { unfold g1, gamma, Rdiv; apply Rmult_le_pos; [apply Rmult_le_pos; [apply pos_INR | exact Hua] |].
    left; apply Rinv_0_lt_compat; lra. }
  set (D := blocked_dot A_ blk (map (ff_rnd S_) ps) vs) in *.
  set (S1 := rsum (map (fun pv => ff_rnd S_ (fst pv) * snd pv) xs)) in *.
  set (S0 := rsum (map (fun pv => fst pv * snd pv) xs)) in *.
  set (P1 := rsum (map (fun pv => Rabs (ff_rnd S_ (fst pv) * snd pv)) xs)) in *.
  replace (D - S0) with ((D - S1) + (S1 - S0)) by ring.
  eapply Rle_trans; [apply Rabs_triang |].
  assert (g1 * P1 <= g1 * ((1 + us) * W + es * Av)) by (apply Rmult_le_compat_l; assumption).
  lra.
Qed.

End Numerator.

(** bf16 weights and values, fp32 accumulation: the kernel's bf16 P.V. *)
Corollary bf16_numerator_error_bound : forall blk t (ps vs : list R),
  (1 <= blk)%nat -> (1 <= t)%nat -> (length (combine ps vs) <= t * blk)%nat ->
  Forall (fun p => 0 <= p) ps ->
  INR (S ((blk - 1) + (t - 1))) * / 16777216 < 1 ->
  Rabs (blocked_dot fp32 blk (map (ff_rnd bf16) ps) vs
        - rsum (map (fun pv => fst pv * snd pv) (combine ps vs)))
  <= (/ 256 + gamma (/ 16777216) (S ((blk - 1) + (t - 1))) * (1 + / 256))
       * rsum (map (fun pv => fst pv * Rabs (snd pv)) (combine ps vs))
     + (1 + gamma (/ 16777216) (S ((blk - 1) + (t - 1)))) * bpow radix2 (-134)
       * rsum (map (fun pv => Rabs (snd pv)) (combine ps vs))
     + (1 + gamma (/ 16777216) ((blk - 1) + (t - 1))) * INR (length (combine ps vs))
       * bpow radix2 (-150).
Proof.
  intros blk t ps vs Hb Ht Hl Hp Hn.
  rewrite <- bf16_u, <- fp32_u in *.
  exact (mixed_numerator_error_bound bf16_fp32 blk t ps vs Hb Ht Hl Hp Hn).
Qed.
