(** * The 3xTF32 product: float32 dots on TF32 tensor cores.

    The attention kernels' float32 dots under torch's "highest" precision run
    [tl.dot(a, b, acc, input_precision="tf32x3")] on CUDA
    (kernels/ojas_kernels/attention_args.py, [_HIGHEST]).  Triton's F32DotTC pass
    rewrites it as
      aBig = cvt.rna.tf32.f32(a),  aSmall = a - aBig   (float32 subtraction),
      bBig = cvt.rna.tf32.f32(b),  bSmall = b - bBig,
      dot1 = dot_tf32(aSmall, bBig, acc); dot2 = dot_tf32(aBig, bSmall, dot1);
      result = dot_tf32(aBig, bBig, dot2),
    so per pair [(x, y)] the three products [lo x * hi y], [hi x * lo y],
    [hi x * hi y] are accumulated in float32 ([lo x * lo y] is dropped), the
    low products first.  TF32 has float32's exponent range and 10 stored
    significand bits: precision 11.  A TF32 tensor-core product reads only
    the TF32 bits of its float32 operands, so [lo x] is [aSmall] rounded
    (truncated) to TF32.

    Results.
    - [tf32_split_exact]: for every float32 [x] (Flocq's
      [FLT_exp (-149) 24], subnormals included) and ANY rounding [rnd] to
      TF32 ([FLT_exp (-136) 11]), [x - hi] is a float32 number; so the
      kernel's float32 subtraction rounds nothing
      ([tf32_split_sub_exact]: [ff_rnd fp32 (x - hi) = x - hi]).  General
      form: [split_exact_FLT] (any precisions [0 < t], [et < ep + p]).
    - The error model (Section [Tf32Split], no underflow): [th] (the high
      part) and [tl] (the low part's conversion) are roundings with
      relative errors [uh] and [ul]; [hi x = th x], [lo x = tl (x - th x)].
      [tf32x3_product_error]: for all reals [x], [y],
        |lo x hi y + hi x lo y + hi x hi y - x y| <= c |x y|,
        c = tf32x3_c uh ul = uh^2 + 2 uh ul (1 + uh)
      (the dropped [lo x lo y] is the [uh^2], the low parts' own rounding
      the rest).
    - [tf32x3_dot_chain_error]: a dot of [n] pairs, for ANY accumulation of
      the [2n] low products into [s1] within [g1 sum |low products|] and of
      the [n] high products onto [s1] into [s2] within
      [g2 (|s1| + sum |high products|)]:
        |s2 - sum x_i y_i| <= (c + g1 kl + g2 ((1 + g1) kl + kh)) sum |x_i y_i|,
        kl = 2 uh (1 + ul) (1 + uh) (the low products' weight, about 2 uh),
        kh = (1 + uh)^2.
    - [tf32x3_dot_seq_error]: the accumulation left to right in a
      [FloatFormat] [A] (BlockedSum.v's [tile_sum]; products numbers of [A]):
        |computed - sum x_i y_i| <= (c + gamma u (3n - 1) kl + gamma u n kh) sum |x_i y_i|
      ([3 n u < 1]); [tf32x3_dot_seq_error_fp32]: [hi] round to nearest,
      ties away (Triton's [cvt.rna]: [uh = 2^-11]), [lo] truncation
      ([ul = 2^-10]), float32 accumulation (FLX precision 24, [u = 2^-24]);
      every product is then exact ([flx_mul_exact]: two precision-11
      numbers multiply into precision 22), and
        c = 5 2^-22 + 2^-31 ~ 1.19e-6 ([tf32x3_c_fp32]),
        kl = 2^-10 (1 + 2^-10)(1 + 2^-11),  kh = (1 + 2^-11)^2.
      With round-to-nearest low parts ([ul = 2^-11]), [c = 3 2^-22 + 2^-32].
    - [tf32x3_dot_tc_error]: the accumulation on tensor cores
      (TensorCoreSum.v: blocks of [k] products aligned and truncated, one
      rounding per block, relative error [tc_delta k]); the three dots run
      their [chunk k] blocks in turn ([n <= q k], [3 q tc_delta k < 1]):
        |computed - sum x_i y_i| <= (c + gamma d (3q) kl + gamma d q kh) sum |x_i y_i|,
        d = tc_delta k;
      [tf32x3_dot_tc_fp32_trunc] / [tf32x3_dot_tc_fp32_nearest]: the
      Flocq instances (truncated alignment to [F] bits, float32 output by
      truncation or round to nearest).
    - [tf32x3_dot_tc_op_error]: the same bound with each block's terms
      aligned to the largest of the accumulator's exponent and the
      operands' exponent sums (TensorCoreSum.v's [tc_acc_op]: the H100's
      tensor cores, identified by ojas verify-device as blocks of 8, 26
      bits, truncation), the three dots chained from 0 as Triton 3.6's
      F32DotTC does (it adds the accumulator [c] last: exact for the
      scores' and [dp]'s [c = 0]).

    So a 3xTF32 dot with left-to-right float32 accumulation is within
    [gamma n kh + gamma (3n - 1) kl + c], about [gamma n + 2^-10 gamma (3n)
    + 1.2e-6], of [sum |x_i y_i|]: for [n = 128], [7.64e-6 + 2.2e-8 + 1.19e-6
    = 8.85e-6], against [gamma_(2^-24) 128 = 7.63e-6] for the float32 dot.  (A single-pass TF32 dot rounds its operands to
    11 bits: a relative error up to about [2 2^-11] per product, 8,192
    times float32's [u] and about 800 times [c]; not proved here.)

    Where it enters the float32 theorems.  The attention theorems take the
    scores' dot as a parameter [dotf] with the premise [dot_model dotf E
    g_rel g_abs] ([|dotf q k - q.k| <= g_rel sum_i |q_i k_i| + g_abs] on
    vectors of length [E]; Attention/Float/ForwardError.v, PART B'; the
    [_dot] theorems there and in SavedLseError.v, ForwardPosteriori.v,
    DvError.v, DkDqError.v, the last also for [dp = dot (dO_i, v_j)]).
    [tf32x3_dot_tc_op_error], [tf32x3_dot_tc_error] and
    [tf32x3_dot_seq_error_fp32] give that premise with [g_abs = 0]
    (ForwardError.v, PART E: [tf32x3_tc_op_dot_model],
    [tf32x3_tc_dot_model], [tf32x3_seq_dot_model]), hence the float32
    forward on CUDA with 3xTF32 scores:
    [attention_forward_error_masked_tf32x3_op] (the H100's),
    [attention_forward_error_masked_tf32x3],
    [attention_lse_error_masked_tf32x3],
    [attention_forward_posteriori_masked_tf32x3].  Bounds/Attention.v (the
    oracle's rationals) still computes the blocked constants only; the
    Python bounds evaluate the 3xTF32 ones
    (ojas_ref/verification/bounds/attention.py).  The cross-entropy theorems
    take the logits' error as a premise [|z_v - y_v| <= delta]
    (LinearCrossEntropy/Float/LseLossError.v); their float32 products run
    IEEE under "highest" (kernels/ojas_kernels/linear_cross_entropy_products.py), so
    3xTF32 does not apply there; a 3xTF32 logit would discharge it with
    [delta = C3 max_v sum_i |h_i w_vi|].

    Not modelled, or assumed: underflow in the error bounds (the
    relative-error hypotheses of [th], [tl] and the accumulation fail for
    subnormal results; [tf32_split_exact] itself covers subnormals);
    overflow; which rounding the tensor core applies when it reads the
    unrounded [aSmall] (truncation, [ul = 2^-10], is the instance; round to
    nearest gives [2^-11]; both are premises to check on the device); the
    NaN masking between the dots of later Triton versions (finite inputs);
    a nonzero initial accumulator [acc] (the statements start the low dot
    from 0, as the score dots [s = _dot(q, kt, None)] and [dp = _dot(do, vt,
    None)] of kernels/ojas_kernels/attention_forward.py and attention_backward.py do;
    the dots that accumulate into [acc], [P V] and the gradients' [dS q],
    [dS k], [P^T dO], are not covered). *)

From Coq Require Import Reals ZArith List Lra Lia Arith.
From Flocq Require Import Core Relative Plus_error.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision FloatModel.NoUnderflow FloatModel.DotError.
From Ojas Require Import Attention.OnlineSoftmax Attention.StreamCorrect FloatModel.BlockedSum.
From Ojas Require Import FloatModel.TensorCoreSum.
Import ListNotations.
Open Scope R_scope.

(** ** The split [x = hi + (x - hi)] is exact in float32 *)

(** In a format of precision [p] and exponent floor [ep], [x - round x] to
    any coarser format of precision [0 < t] and floor [et < ep + p] is a
    number of the format: [x] and [round x] are multiples of [x]'s
    quantum [2^e] (Flocq's [round_repr_same_exp]) and [|x - round x|] is at
    most one ulp of the coarse format, below [2^(e + p)]. *)
Lemma split_exact_FLT : forall ep p et t (rnd : R -> Z), Valid_rnd rnd ->
  (0 < p)%Z -> (0 < t)%Z -> (et < ep + p)%Z ->
  forall x, generic_format radix2 (FLT_exp ep p) x ->
  generic_format radix2 (FLT_exp ep p) (x - round radix2 (FLT_exp et t) rnd x).
Proof.
  intros ep p et t rnd Hr Hp Ht He x Hx.
  assert (Prec_gt_0 p) by exact Hp.
  assert (Prec_gt_0 t) by exact Ht.
  destruct (Req_dec x 0) as [-> | Hx0].
  { rewrite round_0 by auto with typeclass_instances; rewrite Rminus_0_r; apply generic_format_0. }
  set (e := cexp radix2 (FLT_exp ep p) x).
  set (m := Ztrunc (scaled_mantissa radix2 (FLT_exp ep p) x)).
  assert (Ex : x = F2R (Float radix2 m e)) by exact Hx.
  destruct (round_repr_same_exp radix2 (FLT_exp et t) rnd m e) as [m' Em'].
  rewrite <- Ex in Em'.
  set (hi := round radix2 (FLT_exp et t) rnd x) in *.
  assert (Ed : x - hi = F2R (Float radix2 (m - m') e)).
  { rewrite Em'; rewrite Ex at 1; unfold F2R; cbn [Fnum Fexp]; rewrite minus_IZR; ring. }
  rewrite Ed; apply generic_format_FLT.
  apply FLT_spec with (Float radix2 (m - m') e); [reflexivity | | cbn [Fexp]].
  2: { unfold e, cexp, FLT_exp; lia. }
  cbn [Fnum].
  (* |x - hi| <= ulp_t x = 2^(cexp_t x) < 2^(e + p) *)
  pose proof (error_le_ulp radix2 (FLT_exp et t) rnd x) as Hu; fold hi in Hu.
  rewrite ulp_neq_0 in Hu by exact Hx0.
  rewrite Rabs_minus_sym, Ed in Hu; unfold F2R in Hu; cbn [Fnum Fexp] in Hu.
  rewrite Rabs_mult, (Rabs_right (bpow _ e)) in Hu by (apply Rle_ge, bpow_ge_0).
  assert (Hlt : (cexp radix2 (FLT_exp et t) x < e + p)%Z).
  { unfold e, cexp, FLT_exp; lia. }
  assert (Hm : IZR (Z.abs (m - m')) < bpow radix2 p).
  { rewrite abs_IZR.
    apply Rmult_lt_reg_r with (bpow radix2 e); [apply bpow_gt_0 |].
    rewrite <- bpow_plus.
    eapply Rle_lt_trans; [exact Hu |].
    apply bpow_lt; lia. }
  rewrite <- IZR_Zpower in Hm by lia.
  apply lt_IZR in Hm; exact Hm.
Qed.

(** TF32 ([FLT_exp (-136) 11]: float32's exponent range, 10 stored bits)
    from float32 ([FLT_exp (-149) 24]): [x - hi] is a float32 number, for
    every rounding [rnd] of the conversion. *)
Theorem tf32_split_exact : forall (rnd : R -> Z), Valid_rnd rnd ->
  forall x, generic_format radix2 (FLT_exp (-149) 24) x ->
  generic_format radix2 (FLT_exp (-149) 24) (x - round radix2 (FLT_exp (-136) 11) rnd x).
Proof. intros rnd Hr x Hx; apply split_exact_FLT; auto; lia. Qed.

(** The kernel's float32 subtraction [aSmall = a - aBig] is exact. *)
Theorem tf32_split_sub_exact : forall (rnd : R -> Z), Valid_rnd rnd ->
  forall x, ff_fmt fp32 x ->
  ff_rnd fp32 (x - round radix2 (FLT_exp (-136) 11) rnd x) = x - round radix2 (FLT_exp (-136) 11) rnd x.
Proof. intros rnd Hr x Hx; apply (ff_rnd_id fp32), tf32_split_exact; assumption. Qed.

(** ** Sums over the pairs *)

Lemma rsum_map_le_pt : forall {T} (f g : T -> R) (l : list T),
  (forall x, In x l -> f x <= g x) -> rsum (map f l) <= rsum (map g l).
Proof.
  intros T f g l H; induction l as [|x l IH]; cbn [map]; [lra |].
  rewrite !rsum_cons.
  assert (f x <= g x) by (apply H; left; reflexivity).
  assert (rsum (map f l) <= rsum (map g l)) by (apply IH; intros; apply H; right; auto).
  lra.
Qed.

Lemma rsum_map_diff_le : forall {T} (f g w : T -> R) (l : list T),
  (forall x, In x l -> Rabs (f x - g x) <= w x) ->
  Rabs (rsum (map f l) - rsum (map g l)) <= rsum (map w l).
Proof.
  intros T f g w l H; induction l as [|x l IH]; cbn [map].
  - unfold rsum; simpl; rewrite Rminus_0_r, Rabs_R0; lra.
  - rewrite !rsum_cons.
    replace (f x + rsum (map f l) - (g x + rsum (map g l)))
      with ((f x - g x) + (rsum (map f l) - rsum (map g l))) by ring.
    eapply Rle_trans; [apply Rabs_triang |].
    assert (Rabs (f x - g x) <= w x) by (apply H; left; reflexivity).
    assert (Rabs (rsum (map f l) - rsum (map g l)) <= rsum (map w l))
      by (apply IH; intros; apply H; right; auto).
    lra.
Qed.

Lemma rsum_map_Rabs : forall {T} (f : T -> R) (l : list T),
  rsum (map Rabs (map f l)) = rsum (map (fun x => Rabs (f x)) l).
Proof. intros; rewrite map_map; reflexivity. Qed.

(** ** The error model of the split *)

Section Tf32Split.

(** [th]: the conversion of the high part; [tl]: the low part's. *)
Variables th tl : R -> R.
Variables uh ul : R.
Hypothesis uh_nonneg : 0 <= uh.
Hypothesis ul_nonneg : 0 <= ul.
Hypothesis th_err : forall x, Rabs (th x - x) <= uh * Rabs x.
Hypothesis tl_err : forall x, Rabs (tl x - x) <= ul * Rabs x.

Definition tf32_lo (x : R) : R := tl (x - th x).

(** The constants: the product's relative error [c], the weights of the
    low and high products. *)
Definition tf32x3_c : R := uh * uh + 2 * (uh * ul * (1 + uh)).
Definition tf32x3_kl : R := 2 * (uh * (1 + ul) * (1 + uh)).
Definition tf32x3_kh : R := (1 + uh) * (1 + uh).

Lemma tf32_hi_abs : forall x, Rabs (th x) <= (1 + uh) * Rabs x.
Proof.
  intros x; replace (th x) with ((th x - x) + x) by ring.
  eapply Rle_trans; [apply Rabs_triang |]; pose proof (th_err x); lra.
Qed.

Lemma tf32_rest_abs : forall x, Rabs (x - th x) <= uh * Rabs x.
Proof. intros x; rewrite Rabs_minus_sym; apply th_err. Qed.

Lemma tf32_lo_abs : forall x, Rabs (tf32_lo x) <= uh * (1 + ul) * Rabs x.
Proof.
  intros x; unfold tf32_lo.
  replace (tl (x - th x)) with ((tl (x - th x) - (x - th x)) + (x - th x)) by ring.
  eapply Rle_trans; [apply Rabs_triang |].
  pose proof (tl_err (x - th x)); pose proof (tf32_rest_abs x).
  assert (ul * Rabs (x - th x) <= ul * (uh * Rabs x)) by (apply Rmult_le_compat_l; lra).
  lra.
Qed.

Lemma tf32_lo_close : forall x, Rabs (tf32_lo x - (x - th x)) <= ul * uh * Rabs x.
Proof.
  intros x; unfold tf32_lo; eapply Rle_trans; [apply tl_err |].
  rewrite Rmult_assoc; apply Rmult_le_compat_l; [lra | apply tf32_rest_abs].
Qed.

(** The three products against the exact one: [c |x y|]. *)
Theorem tf32x3_product_error : forall x y,
  Rabs (tf32_lo x * th y + th x * tf32_lo y + th x * th y - x * y) <= tf32x3_c * Rabs (x * y).
Proof.
  intros x y; unfold tf32x3_c.
  set (ex := tf32_lo x - (x - th x)); set (ey := tf32_lo y - (y - th y)).
  replace (tf32_lo x * th y + th x * tf32_lo y + th x * th y - x * y)
    with (ex * th y + th x * ey - (x - th x) * (y - th y)) by (unfold ex, ey; ring).
  pose proof (tf32_lo_close x) as Hx; pose proof (tf32_lo_close y) as Hy; fold ex ey in Hx, Hy.
  pose proof (tf32_hi_abs x); pose proof (tf32_hi_abs y).
  pose proof (tf32_rest_abs x); pose proof (tf32_rest_abs y).
  pose proof (Rabs_pos x); pose proof (Rabs_pos y).
  rewrite Rabs_mult.
  unfold Rminus at 1; eapply Rle_trans; [apply Rabs_triang |].
  rewrite Rabs_Ropp; eapply Rle_trans; [apply Rplus_le_compat_r, Rabs_triang |].
  rewrite !Rabs_mult.
  assert (E1 : Rabs ex * Rabs (th y) <= (ul * uh * Rabs x) * ((1 + uh) * Rabs y))
    by (apply Rmult_le_compat; auto using Rabs_pos).
  assert (E2 : Rabs (th x) * Rabs ey <= ((1 + uh) * Rabs x) * (ul * uh * Rabs y))
    by (apply Rmult_le_compat; auto using Rabs_pos).
  assert (E3 : Rabs (x - th x) * Rabs (y - th y) <= (uh * Rabs x) * (uh * Rabs y))
    by (apply Rmult_le_compat; auto using Rabs_pos).
  nra.
Qed.

(** The products of a dot, in the order the kernel accumulates them:
    [lo x * hi y] (dot1), [hi x * lo y] (dot2), [hi x * hi y] (dot3). *)
Definition tf32x3_lo1 (a b : list R) : list R :=
  map (fun xy => tf32_lo (fst xy) * th (snd xy)) (combine a b).
Definition tf32x3_lo2 (a b : list R) : list R :=
  map (fun xy => th (fst xy) * tf32_lo (snd xy)) (combine a b).
Definition tf32x3_hi (a b : list R) : list R :=
  map (fun xy => th (fst xy) * th (snd xy)) (combine a b).
Definition tf32x3_terms (a b : list R) : list R := tf32x3_lo1 a b ++ tf32x3_lo2 a b ++ tf32x3_hi a b.

Local Notation dotR a b := (rsum (map (fun xy => fst xy * snd xy) (combine a b))).
Local Notation dotA a b := (rsum (map (fun xy => Rabs (fst xy * snd xy)) (combine a b))).

Lemma dotA_nonneg : forall a b, 0 <= dotA a b.
Proof.
  intros a b; apply rsum_nonneg; intros z Hz; apply in_map_iff in Hz.
  destruct Hz as [w [<- _]]; apply Rabs_pos.
Qed.

Lemma tf32x3_terms_sum : forall a b,
  Rabs (rsum (tf32x3_lo1 a b ++ tf32x3_lo2 a b) + rsum (tf32x3_hi a b) - dotR a b)
  <= tf32x3_c * dotA a b.
Proof.
  intros a b; unfold tf32x3_lo1, tf32x3_lo2, tf32x3_hi.
  rewrite rsum_app, <- !rsum_map_plus, <- rsum_map_scal_l.
  apply rsum_map_diff_le; intros xy _; apply tf32x3_product_error.
Qed.

Lemma tf32x3_lo_abs_sum : forall a b,
  rsum (map Rabs (tf32x3_lo1 a b ++ tf32x3_lo2 a b)) <= tf32x3_kl * dotA a b.
Proof.
  intros a b; unfold tf32x3_lo1, tf32x3_lo2.
  rewrite map_app, rsum_app, !rsum_map_Rabs, <- rsum_map_plus, <- rsum_map_scal_l.
  apply rsum_map_le_pt; intros [x y] _; cbn [fst snd].
  unfold tf32x3_kl; rewrite !Rabs_mult.
  pose proof (tf32_lo_abs x); pose proof (tf32_lo_abs y).
  pose proof (tf32_hi_abs x); pose proof (tf32_hi_abs y).
  pose proof (Rabs_pos x); pose proof (Rabs_pos y).
  assert (0 <= uh * (1 + ul)) by (apply Rmult_le_pos; lra).
  assert (E1 : Rabs (tf32_lo x) * Rabs (th y) <= (uh * (1 + ul) * Rabs x) * ((1 + uh) * Rabs y))
    by (apply Rmult_le_compat; auto using Rabs_pos).
  assert (E2 : Rabs (th x) * Rabs (tf32_lo y) <= ((1 + uh) * Rabs x) * (uh * (1 + ul) * Rabs y))
    by (apply Rmult_le_compat; auto using Rabs_pos).
  nra.
Qed.

Lemma tf32x3_hi_abs_sum : forall a b, rsum (map Rabs (tf32x3_hi a b)) <= tf32x3_kh * dotA a b.
Proof.
  intros a b; unfold tf32x3_hi; rewrite rsum_map_Rabs, <- rsum_map_scal_l.
  apply rsum_map_le_pt; intros [x y] _; cbn [fst snd].
  unfold tf32x3_kh; rewrite !Rabs_mult.
  pose proof (tf32_hi_abs x); pose proof (tf32_hi_abs y).
  assert (Rabs (th x) * Rabs (th y) <= ((1 + uh) * Rabs x) * ((1 + uh) * Rabs y))
    by (apply Rmult_le_compat; auto using Rabs_pos).
  nra.
Qed.

Lemma tf32x3_kl_nonneg : 0 <= tf32x3_kl.
Proof.
  unfold tf32x3_kl; assert (0 <= uh * (1 + ul)) by (apply Rmult_le_pos; lra).
  assert (0 <= uh * (1 + ul) * (1 + uh)) by (apply Rmult_le_pos; lra); lra.
Qed.

Lemma tf32x3_kh_nonneg : 0 <= tf32x3_kh.
Proof. unfold tf32x3_kh; nra. Qed.

(** Any accumulation: the low products into [s1] within [g1], the high
    products onto [s1] within [g2]. *)
Theorem tf32x3_dot_chain_error : forall a b s1 s2 g1 g2, 0 <= g1 -> 0 <= g2 ->
  Rabs (s1 - rsum (tf32x3_lo1 a b ++ tf32x3_lo2 a b))
    <= g1 * rsum (map Rabs (tf32x3_lo1 a b ++ tf32x3_lo2 a b)) ->
  Rabs (s2 - (s1 + rsum (tf32x3_hi a b)))
    <= g2 * (Rabs s1 + rsum (map Rabs (tf32x3_hi a b))) ->
  Rabs (s2 - dotR a b)
  <= (tf32x3_c + g1 * tf32x3_kl + g2 * ((1 + g1) * tf32x3_kl + tf32x3_kh)) * dotA a b.
Proof.
  intros a b s1 s2 g1 g2 Hg1 Hg2 H1 H2.
  set (L := rsum (tf32x3_lo1 a b ++ tf32x3_lo2 a b)) in *.
  set (La := rsum (map Rabs (tf32x3_lo1 a b ++ tf32x3_lo2 a b))) in *.
  set (Hs := rsum (tf32x3_hi a b)) in *.
  set (Ha := rsum (map Rabs (tf32x3_hi a b))) in *.
  set (S := dotA a b).
  pose proof (tf32x3_terms_sum a b) as Hc; fold L Hs S in Hc.
  pose proof (tf32x3_lo_abs_sum a b) as HL; fold La S in HL.
  pose proof (tf32x3_hi_abs_sum a b) as HH; fold Ha S in HH.
  pose proof (dotA_nonneg a b) as HS; fold S in HS.
  pose proof tf32x3_kl_nonneg; pose proof tf32x3_kh_nonneg.
  assert (HLL : Rabs L <= La) by (unfold L, La; apply rsum_abs_le_abs).
  assert (Hs1 : Rabs s1 <= (1 + g1) * La).
  { replace s1 with ((s1 - L) + L) by ring; eapply Rle_trans; [apply Rabs_triang | lra]. }
  replace (s2 - dotR a b) with ((s2 - (s1 + Hs)) + (s1 - L) + (L + Hs - dotR a b)) by ring.
  eapply Rle_trans; [apply Rabs_triang |].
  eapply Rle_trans; [apply Rplus_le_compat_r, Rabs_triang |].
  assert (E1 : g2 * (Rabs s1 + Ha) <= g2 * ((1 + g1) * (tf32x3_kl * S) + tf32x3_kh * S)).
  { apply Rmult_le_compat_l; [lra |].
    assert ((1 + g1) * La <= (1 + g1) * (tf32x3_kl * S)) by (apply Rmult_le_compat_l; lra).
    lra. }
  assert (E2 : g1 * La <= g1 * (tf32x3_kl * S)) by (apply Rmult_le_compat_l; lra).
  nra.
Qed.

(** ** Left-to-right accumulation in a format [A] *)

Section Sequential.

Variable A : FloatFormat.
Local Notation u := (ff_u A).

(** The three dots accumulated left to right in [A] from 0: dot1, dot2,
    dot3 chained ([tile_sum] of the concatenation). *)
Definition tf32x3_dot_seq (a b : list R) : R := tile_sum A (tf32x3_terms a b).

Lemma tf32x3_dot_seq_error_pow : forall a b,
  Forall (ff_fmt A) (tf32x3_terms a b) ->
  Rabs (tf32x3_dot_seq a b - dotR a b)
  <= (tf32x3_c + ((1 + u) ^ (3 * length (combine a b) - 1) - 1) * tf32x3_kl
      + ((1 + u) ^ length (combine a b) - 1) * tf32x3_kh) * dotA a b.
Proof.
  intros a b Hf.
  pose proof (ff_u_nonneg A) as Hu.
  unfold tf32x3_terms in Hf; rewrite app_assoc in Hf; apply Forall_app in Hf; destruct Hf as [HfL HfH].
  unfold tf32x3_dot_seq, tf32x3_terms, tile_sum; rewrite app_assoc, fold_left_app.
  set (lo := tf32x3_lo1 a b ++ tf32x3_lo2 a b) in *.
  set (n := length (combine a b)).
  assert (Hlo : length lo = (2 * n)%nat)
    by (unfold lo, tf32x3_lo1, tf32x3_lo2, n; rewrite app_length, !map_length; lia).
  assert (Hhi : length (tf32x3_hi a b) = n) by (unfold tf32x3_hi, n; rewrite map_length; lia).
  set (s1 := fold_left (fun acc x => ff_rnd A (acc + x)) lo 0).
  pose proof (tile_sum_close A lo HfL) as C1; unfold close in C1; fold s1 in C1.
  unfold tile_sum in C1; fold s1 in C1; rewrite Hlo in C1.
  assert (Fs1 : ff_fmt A s1) by (apply fmt_tile_fold, ff_fmt_0).
  pose proof (tile_fold_close A (tf32x3_hi a b) s1 s1 (Rabs s1) 0 Fs1 (Rle_refl _)
                (close_refl 1 s1 (Rabs s1) ltac:(simpl; lra) (Rabs_pos s1)) HfH) as C2.
  unfold close in C2; rewrite Nat.add_0_l, Hhi in C2.
  assert (Hp1 : 1 <= (1 + u) ^ (2 * n - 1)) by (apply pow_R1_Rle; lra).
  assert (Hp2 : 1 <= (1 + u) ^ n) by (apply pow_R1_Rle; lra).
  pose proof (tf32x3_dot_chain_error a b s1 _ ((1 + u) ^ (2 * n - 1) - 1) ((1 + u) ^ n - 1)
                ltac:(lra) ltac:(lra) C1 C2) as H.
  eapply Rle_trans; [exact H |].
  apply Rmult_le_compat_r; [apply dotA_nonneg |].
  replace ((3 * n - 1)%nat) with ((2 * n - 1) + n)%nat by lia.
  rewrite pow_add.
  right; ring.
Qed.

(** [3 n u < 1]: [(c + gamma u (3n - 1) kl + gamma u n kh) sum |x_i y_i|]. *)
Theorem tf32x3_dot_seq_error : forall a b,
  length a = length b -> Forall (ff_fmt A) (tf32x3_terms a b) ->
  INR (3 * length a) * u < 1 ->
  Rabs (tf32x3_dot_seq a b - dotR a b)
  <= (tf32x3_c + gamma u (3 * length a - 1) * tf32x3_kl + gamma u (length a) * tf32x3_kh) * dotA a b.
Proof.
  intros a b Hl Hf Hn.
  pose proof (ff_u_nonneg A) as Hu.
  eapply Rle_trans; [apply tf32x3_dot_seq_error_pow, Hf |].
  rewrite combine_length, <- Hl, Nat.min_id.
  apply Rmult_le_compat_r; [apply dotA_nonneg |].
  pose proof tf32x3_kl_nonneg; pose proof tf32x3_kh_nonneg.
  assert (H1 : (1 + u) ^ (3 * length a - 1) - 1 <= gamma u (3 * length a - 1)).
  { apply pow_le_gamma; [exact Hu |].
    assert (INR (3 * length a - 1) <= INR (3 * length a)) by (apply le_INR; lia); nra. }
  assert (H2 : (1 + u) ^ length a - 1 <= gamma u (length a)).
  { apply pow_le_gamma; [exact Hu |].
    assert (INR (length a) <= INR (3 * length a)) by (apply le_INR; lia); nra. }
  apply Rplus_le_compat; [apply Rplus_le_compat_l |]; apply Rmult_le_compat_r; assumption.
Qed.

End Sequential.

(** The two tensor-core chains ([tc_acc], [tc_acc_op]) end alike: the low
    products in [n1 <= 2 q] blocks from 0 into [s1], then the high products
    in [n3 <= q] blocks onto [s1], each chain within [(1 + d)^blocks - 1]. *)
Lemma tf32x3_dot_blocks_error : forall d q n1 n3 a b s1 s2,
  0 <= d -> INR (3 * q) * d < 1 -> (n1 <= 2 * q)%nat -> (n3 <= q)%nat ->
  Rabs (s1 - rsum (tf32x3_lo1 a b ++ tf32x3_lo2 a b))
    <= ((1 + d) ^ n1 - 1) * rsum (map Rabs (tf32x3_lo1 a b ++ tf32x3_lo2 a b)) ->
  Rabs (s2 - (s1 + rsum (tf32x3_hi a b)))
    <= ((1 + d) ^ n3 - 1) * (Rabs s1 + rsum (map Rabs (tf32x3_hi a b))) ->
  Rabs (s2 - dotR a b)
  <= (tf32x3_c + gamma d (3 * q) * tf32x3_kl + gamma d q * tf32x3_kh) * dotA a b.
Proof.
  intros d q n1 n3 a b s1 s2 Hd Hn L12 L3 C1 C2.
  assert (P1 : (1 + d) ^ n1 <= (1 + d) ^ (2 * q)) by (apply Rle_pow; [lra | lia]).
  assert (P3 : (1 + d) ^ n3 <= (1 + d) ^ q) by (apply Rle_pow; [lra | lia]).
  assert (C1' : Rabs (s1 - rsum (tf32x3_lo1 a b ++ tf32x3_lo2 a b))
                <= ((1 + d) ^ (2 * q) - 1) * rsum (map Rabs (tf32x3_lo1 a b ++ tf32x3_lo2 a b))).
  { eapply Rle_trans; [exact C1 |]; apply Rmult_le_compat_r; [apply rsum_abs_nonneg | lra]. }
  assert (C2' : Rabs (s2 - (s1 + rsum (tf32x3_hi a b)))
                <= ((1 + d) ^ q - 1) * (Rabs s1 + rsum (map Rabs (tf32x3_hi a b)))).
  { eapply Rle_trans; [exact C2 |]; apply Rmult_le_compat_r; [| lra].
    pose proof (Rabs_pos s1); pose proof (rsum_abs_nonneg (tf32x3_hi a b)); lra. }
  assert (Hp1 : 1 <= (1 + d) ^ (2 * q)) by (apply pow_R1_Rle; lra).
  assert (Hp2 : 1 <= (1 + d) ^ q) by (apply pow_R1_Rle; lra).
  pose proof (tf32x3_dot_chain_error a b s1 _ ((1 + d) ^ (2 * q) - 1) ((1 + d) ^ q - 1)
                ltac:(lra) ltac:(lra) C1' C2') as H.
  eapply Rle_trans; [exact H |].
  apply Rmult_le_compat_r; [apply dotA_nonneg |].
  pose proof tf32x3_kl_nonneg; pose proof tf32x3_kh_nonneg.
  assert (E : (1 + d) ^ (2 * q) - 1 + ((1 + d) ^ q - 1) * (1 + ((1 + d) ^ (2 * q) - 1))
              = (1 + d) ^ (3 * q) - 1).
  { replace (3 * q)%nat with (2 * q + q)%nat by lia; rewrite pow_add; ring. }
  assert (G1 : (1 + d) ^ (3 * q) - 1 <= gamma d (3 * q)) by (apply pow_le_gamma; assumption).
  assert (G2 : (1 + d) ^ q - 1 <= gamma d q).
  { apply pow_le_gamma; [exact Hd |].
    assert (INR q <= INR (3 * q)) by (apply le_INR; lia); nra. }
  assert (X1 : ((1 + d) ^ (3 * q) - 1) * tf32x3_kl <= gamma d (3 * q) * tf32x3_kl)
    by (apply Rmult_le_compat_r; assumption).
  assert (X2 : ((1 + d) ^ q - 1) * tf32x3_kh <= gamma d q * tf32x3_kh)
    by (apply Rmult_le_compat_r; assumption).
  nra.
Qed.

(** ** Tensor-core accumulation (TensorCoreSum.v) *)

Section TensorCore.

Variable align : R -> R -> R.
Variable out : R -> R.
Variables ua ur : R.
Hypothesis ua_nonneg : 0 <= ua.
Hypothesis ur_nonneg : 0 <= ur.
Hypothesis align_err : forall M x, Rabs x <= M -> Rabs (align M x - x) <= ua * M.
Hypothesis out_err : forall x, Rabs (out x - x) <= ur * Rabs x.

(** dot1, dot2, dot3 on tensor cores: each cut into blocks of [k] along
    the reduction dimension, the blocks run in turn from 0. *)
Definition tf32x3_dot_tc (k : nat) (a b : list R) : R :=
  tc_acc align out 0 (chunk k (tf32x3_lo1 a b) ++ chunk k (tf32x3_lo2 a b) ++ chunk k (tf32x3_hi a b)).

Theorem tf32x3_dot_tc_error : forall k q a b,
  (1 <= k)%nat -> (1 <= q)%nat -> length a = length b -> (length a <= q * k)%nat ->
  INR (3 * q) * tc_delta ua ur k < 1 ->
  Rabs (tf32x3_dot_tc k a b - dotR a b)
  <= (tf32x3_c + gamma (tc_delta ua ur k) (3 * q) * tf32x3_kl
      + gamma (tc_delta ua ur k) q * tf32x3_kh) * dotA a b.
Proof.
  intros k q a b Hk Hq Hl Hlq Hn.
  set (d := tc_delta ua ur k) in *.
  assert (Hd : 0 <= d) by (apply tc_delta_nonneg; assumption).
  set (B1 := chunk k (tf32x3_lo1 a b)); set (B2 := chunk k (tf32x3_lo2 a b)).
  set (B3 := chunk k (tf32x3_hi a b)).
  assert (Hn' : (length (combine a b) <= q * k)%nat) by (rewrite combine_length; lia).
  assert (L1 : (length B1 <= q)%nat)
    by (apply chunk_length_le; auto; unfold tf32x3_lo1; rewrite map_length; exact Hn').
  assert (L2 : (length B2 <= q)%nat)
    by (apply chunk_length_le; auto; unfold tf32x3_lo2; rewrite map_length; exact Hn').
  assert (L3 : (length B3 <= q)%nat)
    by (apply chunk_length_le; auto; unfold tf32x3_hi; rewrite map_length; exact Hn').
  assert (Hb : forall xs : list R, Forall (fun bl : list R => (length bl <= k)%nat) (chunk k xs)).
  { intros xs; apply Forall_forall; intros tl0 Hin; pose proof (chunk_tile_length k xs tl0 Hin); lia. }
  unfold tf32x3_dot_tc, tc_acc; fold B1 B2 B3.
  rewrite app_assoc, fold_left_app; fold (tc_acc align out 0 (B1 ++ B2)).
  set (s1 := tc_acc align out 0 (B1 ++ B2)).
  fold (tc_acc align out s1 B3).
  pose proof (tc_acc_error align out ua ur ua_nonneg ur_nonneg align_err out_err k (B1 ++ B2) 0
                (proj2 (Forall_app _ _ _) (conj (Hb _) (Hb _)))) as C1.
  fold s1 in C1.
  assert (EB1 : concat B1 = tf32x3_lo1 a b) by apply concat_chunk.
  assert (EB2 : concat B2 = tf32x3_lo2 a b) by apply concat_chunk.
  assert (EB3 : concat B3 = tf32x3_hi a b) by apply concat_chunk.
  rewrite concat_app, EB1, EB2 in C1.
  rewrite Rplus_0_l, Rabs_R0, Rplus_0_l, app_length in C1.
  pose proof (tc_acc_error align out ua ur ua_nonneg ur_nonneg align_err out_err k B3 s1 (Hb _)) as C2.
  rewrite EB3 in C2.
  fold d in C1, C2.
  exact (tf32x3_dot_blocks_error d q (length B1 + length B2) (length B3) a b s1 _ Hd Hn ltac:(lia) L3 C1 C2).
Qed.

End TensorCore.

(** ** Tensor cores aligning to the operands' exponents (the H100's, TensorCoreSum.v) *)

(** Tiles of pairs are at most [k] long (BlockedSum.v's [chunk_tile_length] through a map to [R]). *)
Lemma chunk_pairs_length : forall k (xs : list (R * R)), (1 <= k)%nat ->
  Forall (fun t => (length t <= k)%nat) (chunk k xs).
Proof.
  intros k xs Hk; apply Forall_forall; intros t Hin.
  set (g := fun xy : R * R => fst xy).
  assert (Hin' : In (map g t) (chunk k (map g xs))) by (rewrite chunk_map; apply in_map, Hin).
  pose proof (chunk_tile_length k (map g xs) (map g t) Hin') as H; rewrite map_length in H; lia.
Qed.

Lemma combine_map2 : forall (f g : R -> R) (a b : list R),
  combine (map f a) (map g b) = map (fun xy => (f (fst xy), g (snd xy))) (combine a b).
Proof. intros f g; induction a as [|x a IH]; intros [|y b]; cbn; f_equal; auto. Qed.

Section TensorCoreOp.

Variable align : Z -> R -> R.
Variable out : R -> R.
Variables ua ur : R.
Hypothesis ua_nonneg : 0 <= ua.
Hypothesis ur_nonneg : 0 <= ur.
Hypothesis align_err : forall e x, Rabs (align e x - x) <= ua * bpow radix2 e.
Hypothesis align_0 : forall e, align e 0 = 0.
Hypothesis out_err : forall x, Rabs (out x - x) <= ur * Rabs x.

(** The operand pairs of dot1 ([lo x, hi y]), dot2 ([hi x, lo y]), dot3 ([hi x, hi y]). *)
Definition tf32x3_pairs_lo1 (a b : list R) : list (R * R) := combine (map tf32_lo a) (map th b).
Definition tf32x3_pairs_lo2 (a b : list R) : list (R * R) := combine (map th a) (map tf32_lo b).
Definition tf32x3_pairs_hi (a b : list R) : list (R * R) := combine (map th a) (map th b).

Lemma prods_pairs : forall a b,
  prods (tf32x3_pairs_lo1 a b) = tf32x3_lo1 a b /\ prods (tf32x3_pairs_lo2 a b) = tf32x3_lo2 a b
  /\ prods (tf32x3_pairs_hi a b) = tf32x3_hi a b.
Proof.
  intros a b; unfold tf32x3_pairs_lo1, tf32x3_pairs_lo2, tf32x3_pairs_hi, tf32x3_lo1, tf32x3_lo2, tf32x3_hi, prods.
  rewrite !combine_map2, !map_map; repeat split; reflexivity.
Qed.

Lemma pairs_length : forall a b, length (tf32x3_pairs_lo1 a b) = length (combine a b)
  /\ length (tf32x3_pairs_lo2 a b) = length (combine a b) /\ length (tf32x3_pairs_hi a b) = length (combine a b).
Proof.
  intros a b; unfold tf32x3_pairs_lo1, tf32x3_pairs_lo2, tf32x3_pairs_hi.
  rewrite !combine_map2, !map_length; repeat split; reflexivity.
Qed.

(** dot1, dot2, dot3 on such tensor cores, chained from 0, blocks of [k]
    pairs ([tc_acc_op]).  Triton 3.6 adds the accumulator [c] after the
    three dots; for the scores' and [dp]'s dots [c = 0] and that float32
    addition is exact. *)
Definition tf32x3_dot_tc_op (k : nat) (a b : list R) : R :=
  tc_acc_op align out 0
    (chunk k (tf32x3_pairs_lo1 a b) ++ chunk k (tf32x3_pairs_lo2 a b) ++ chunk k (tf32x3_pairs_hi a b)).

Theorem tf32x3_dot_tc_op_error : forall k q a b,
  (1 <= k)%nat -> (1 <= q)%nat -> length a = length b -> (length a <= q * k)%nat ->
  INR (3 * q) * tc_delta ua ur k < 1 ->
  Rabs (tf32x3_dot_tc_op k a b - dotR a b)
  <= (tf32x3_c + gamma (tc_delta ua ur k) (3 * q) * tf32x3_kl
      + gamma (tc_delta ua ur k) q * tf32x3_kh) * dotA a b.
Proof.
  intros k q a b Hk Hq Hl Hlq Hn.
  set (d := tc_delta ua ur k) in *.
  assert (Hd : 0 <= d) by (apply tc_delta_nonneg; assumption).
  destruct (prods_pairs a b) as [EP1 [EP2 EP3]].
  destruct (pairs_length a b) as [L1' [L2' L3']].
  set (B1 := chunk k (tf32x3_pairs_lo1 a b)); set (B2 := chunk k (tf32x3_pairs_lo2 a b)).
  set (B3 := chunk k (tf32x3_pairs_hi a b)).
  assert (Hn' : (length (combine a b) <= q * k)%nat) by (rewrite combine_length; lia).
  assert (Hlen : forall xs : list (R * R), (length xs <= q * k)%nat -> (length (chunk k xs) <= q)%nat).
  { intros xs Hxs; set (g := fun xy : R * R => fst xy).
    pose proof (chunk_length_le k q (map g xs) Hk Hq ltac:(rewrite map_length; exact Hxs)) as H.
    rewrite chunk_map, map_length in H; exact H. }
  assert (L1 : (length B1 <= q)%nat) by (apply Hlen; lia).
  assert (L2 : (length B2 <= q)%nat) by (apply Hlen; lia).
  assert (L3 : (length B3 <= q)%nat) by (apply Hlen; lia).
  unfold tf32x3_dot_tc_op, tc_acc_op; fold B1 B2 B3.
  rewrite app_assoc, fold_left_app; fold (tc_acc_op align out 0 (B1 ++ B2)).
  set (s1 := tc_acc_op align out 0 (B1 ++ B2)).
  fold (tc_acc_op align out s1 B3).
  pose proof (tc_acc_op_error align out ua ur ua_nonneg ur_nonneg align_err align_0 out_err k (B1 ++ B2) 0
                (proj2 (Forall_app _ _ _) (conj (chunk_pairs_length k _ Hk) (chunk_pairs_length k _ Hk)))) as C1.
  fold s1 in C1.
  assert (EB1 : concat B1 = tf32x3_pairs_lo1 a b) by apply concat_chunk.
  assert (EB2 : concat B2 = tf32x3_pairs_lo2 a b) by apply concat_chunk.
  assert (EB3 : concat B3 = tf32x3_pairs_hi a b) by apply concat_chunk.
  rewrite concat_app, EB1, EB2 in C1.
  unfold prods in C1; rewrite map_app in C1; fold (prods (tf32x3_pairs_lo1 a b)) (prods (tf32x3_pairs_lo2 a b)) in C1.
  rewrite EP1, EP2 in C1.
  rewrite Rplus_0_l, Rabs_R0, Rplus_0_l, app_length in C1.
  pose proof (tc_acc_op_error align out ua ur ua_nonneg ur_nonneg align_err align_0 out_err k B3 s1
                (chunk_pairs_length k _ Hk)) as C2.
  rewrite EB3, EP3 in C2.
  fold d in C1, C2.
  exact (tf32x3_dot_blocks_error d q (length B1 + length B2) (length B3) a b s1 _ Hd Hn ltac:(lia) L3 C1 C2).
Qed.

End TensorCoreOp.

End Tf32Split.

(** ** Flocq instances: Triton's conversions, float32 accumulation *)

(** [cvt.rna.tf32.f32]: round to nearest, ties away, precision 11;
    the tensor core's reading of [aSmall]: truncation to precision 11. *)
Definition tf32_rna (x : R) : R := round radix2 (FLX_exp 11) ZnearestA x.
Definition tf32_rz (x : R) : R := rz_flx 11 x.

Lemma tf32_rna_err : forall x, Rabs (tf32_rna x - x) <= bpow radix2 (-11) * Rabs x.
Proof.
  intros x; unfold tf32_rna.
  replace (bpow radix2 (-11)) with (/ 2 * bpow radix2 (- (11) + 1)) by (simpl; unfold Z.pow_pos; simpl; field).
  apply relative_error_N_FLX; lia.
Qed.

Lemma tf32_rz_err : forall x, Rabs (tf32_rz x - x) <= bpow radix2 (-10) * Rabs x.
Proof. intros x; exact (rz_flx_err 11 eq_refl x). Qed.

(** Two numbers of precision [p] multiply into a number of precision [q >= 2 p]. *)
Lemma flx_mul_exact : forall p q x y, (0 < p)%Z -> (2 * p <= q)%Z ->
  generic_format radix2 (FLX_exp p) x -> generic_format radix2 (FLX_exp p) y ->
  generic_format radix2 (FLX_exp q) (x * y).
Proof.
  intros p q x y Hp Hq Hx Hy.
  assert (Prec_gt_0 p) by exact Hp.
  assert (Prec_gt_0 q) by (unfold Prec_gt_0; lia).
  apply FLX_format_generic in Hx; [| assumption].
  apply FLX_format_generic in Hy; [| assumption].
  destruct Hx as [[m1 e1] Ex Hm1]; destruct Hy as [[m2 e2] Ey Hm2].
  cbn [Fnum Fexp] in Hm1, Hm2.
  apply generic_format_FLX.
  apply FLX_spec with (Float radix2 (m1 * m2) (e1 + e2)).
  - rewrite Ex, Ey; unfold F2R; simpl; rewrite mult_IZR, bpow_plus; ring.
  - cbn [Fnum]; rewrite Z.abs_mul.
    apply Z.lt_le_trans with (Zpower radix2 (p + p)).
    + rewrite Zpower_plus by lia; apply Z.mul_lt_mono_nonneg; lia.
    + apply Zpower_le; lia.
Qed.

(** float32 accumulation without underflow: Flocq's FLX format of precision 24. *)
Definition fp32_flx : FloatFormat := flx_format 24 eq_refl.

Lemma fp32_flx_u : ff_u fp32_flx = / 16777216.
Proof. simpl; unfold Z.pow_pos; simpl; field. Qed.

#[local] Instance tf32_prec_gt_0 : Prec_gt_0 11 := eq_refl.

Lemma tf32_rna_fmt : forall x, generic_format radix2 (FLX_exp 11) (tf32_rna x).
Proof. intros x; apply generic_format_round; auto with typeclass_instances. Qed.

Lemma tf32_rz_fmt : forall x, generic_format radix2 (FLX_exp 11) (tf32_rz x).
Proof. intros x; apply generic_format_round; auto with typeclass_instances. Qed.

(** Every product of the split is a float32 number: no product rounds. *)
Lemma tf32x3_terms_fp32 : forall a b,
  Forall (ff_fmt fp32_flx) (tf32x3_terms tf32_rna tf32_rz a b).
Proof.
  intros a b; unfold tf32x3_terms, tf32x3_lo1, tf32x3_lo2, tf32x3_hi, tf32_lo.
  assert (M : forall x y, generic_format radix2 (FLX_exp 11) x -> generic_format radix2 (FLX_exp 11) y ->
                          ff_fmt fp32_flx (x * y))
    by (intros x y Hx Hy; apply (flx_mul_exact 11); auto; lia).
  repeat rewrite Forall_app; repeat split; apply Forall_forall; intros z Hz;
    apply in_map_iff in Hz; destruct Hz as [xy [<- _]]; apply M;
    auto using tf32_rna_fmt, tf32_rz_fmt.
Qed.

(** The constant of the fp32 instance: [c = 5 2^-22 + 2^-31]. *)
Lemma tf32x3_c_fp32 : tf32x3_c (/ 2048) (/ 1024) = 5 / 4194304 + / 2147483648.
Proof. unfold tf32x3_c; field. Qed.

Lemma bpow_m11 : bpow radix2 (-11) = / 2048.
Proof. simpl; unfold Z.pow_pos; simpl; field. Qed.

Lemma bpow_m10 : bpow radix2 (-10) = / 1024.
Proof. simpl; unfold Z.pow_pos; simpl; field. Qed.

(** The 3xTF32 dot of Triton, accumulated left to right in float32
    (no underflow): [uh = 2^-11], [ul = 2^-10], [u = 2^-24]. *)
Theorem tf32x3_dot_seq_error_fp32 : forall a b,
  length a = length b -> INR (3 * length a) * / 16777216 < 1 ->
  Rabs (tf32x3_dot_seq tf32_rna tf32_rz fp32_flx a b
        - rsum (map (fun xy => fst xy * snd xy) (combine a b)))
  <= (tf32x3_c (/ 2048) (/ 1024)
      + gamma (/ 16777216) (3 * length a - 1) * tf32x3_kl (/ 2048) (/ 1024)
      + gamma (/ 16777216) (length a) * tf32x3_kh (/ 2048))
     * rsum (map (fun xy => Rabs (fst xy * snd xy)) (combine a b)).
Proof.
  intros a b Hl Hn.
  rewrite <- bpow_m11, <- bpow_m10, <- fp32_flx_u.
  apply tf32x3_dot_seq_error; auto using bpow_ge_0, tf32_rna_err, tf32_rz_err, tf32x3_terms_fp32.
Qed.

(** On tensor cores: the alignment truncated to [F] bits, the float32
    output truncated ([ur = 2^-23]). *)
Theorem tf32x3_dot_tc_fp32_trunc : forall F k q a b,
  (1 <= k)%nat -> (1 <= q)%nat -> length a = length b -> (length a <= q * k)%nat ->
  INR (3 * q) * tc_delta (bpow radix2 (1 - F)) (bpow radix2 (1 - 24)) k < 1 ->
  Rabs (tf32x3_dot_tc tf32_rna tf32_rz (tc_align F) (rz_flx 24) k a b
        - rsum (map (fun xy => fst xy * snd xy) (combine a b)))
  <= (tf32x3_c (/ 2048) (/ 1024)
      + gamma (tc_delta (bpow radix2 (1 - F)) (bpow radix2 (1 - 24)) k) (3 * q) * tf32x3_kl (/ 2048) (/ 1024)
      + gamma (tc_delta (bpow radix2 (1 - F)) (bpow radix2 (1 - 24)) k) q * tf32x3_kh (/ 2048))
     * rsum (map (fun xy => Rabs (fst xy * snd xy)) (combine a b)).
Proof.
  intros F k q a b Hk Hq Hl Hlq Hn.
  rewrite <- bpow_m11, <- bpow_m10.
  apply tf32x3_dot_tc_error; auto using bpow_ge_0, tf32_rna_err, tf32_rz_err, tc_align_err, rz_flx_err.
  exact (rz_flx_err 24 eq_refl).
Qed.

(** The same with the float32 output rounded to nearest ([ur = 2^-24]). *)
Theorem tf32x3_dot_tc_fp32_nearest : forall F k q a b,
  (1 <= k)%nat -> (1 <= q)%nat -> length a = length b -> (length a <= q * k)%nat ->
  INR (3 * q) * tc_delta (bpow radix2 (1 - F)) (bpow radix2 (- (24))) k < 1 ->
  Rabs (tf32x3_dot_tc tf32_rna tf32_rz (tc_align F) (rn_flx 24) k a b
        - rsum (map (fun xy => fst xy * snd xy) (combine a b)))
  <= (tf32x3_c (/ 2048) (/ 1024)
      + gamma (tc_delta (bpow radix2 (1 - F)) (bpow radix2 (- (24))) k) (3 * q) * tf32x3_kl (/ 2048) (/ 1024)
      + gamma (tc_delta (bpow radix2 (1 - F)) (bpow radix2 (- (24))) k) q * tf32x3_kh (/ 2048))
     * rsum (map (fun xy => Rabs (fst xy * snd xy)) (combine a b)).
Proof.
  intros F k q a b Hk Hq Hl Hlq Hn.
  rewrite <- bpow_m11, <- bpow_m10.
  apply tf32x3_dot_tc_error; auto using bpow_ge_0, tf32_rna_err, tf32_rz_err, tc_align_err.
  exact (rn_flx_err 24 eq_refl).
Qed.
