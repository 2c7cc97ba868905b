(** * Tensor-core accumulation: per-block alignment, truncation, one final rounding.

    What an NVIDIA tensor core does for one matrix-multiply block (Fasi,
    Higham, Mikaitis and Pranesh, "Numerical behavior of NVIDIA tensor
    cores", PeerJ Comput. Sci. 7:e330, 2021; Khattak and Mikaitis 2025 for
    later generations): it computes [d = c + sum_(i < k) a_i b_i] with the
    [k] products exact, aligns the significands of the [k + 1] terms
    (the accumulator [c] and the products) to the largest exponent among
    them, drops the bits below a fixed position (truncation), adds the
    aligned terms exactly, and normalizes and rounds (or truncates) the
    sum to the output format (fp32).  A dot of [n = q k] products runs
    [q] such blocks, each taking the previous result as its accumulator.

    The model (Section [TensorCoreBlock]), as Section variables with error
    hypotheses:
    - [align M x]: the term [x] aligned to a block whose largest magnitude
      is [M]; [align_err]: [|align M x - x| <= ua M] when [|x| <= M];
    - [out]: the final normalization and rounding; [out_err]:
      [|out x - x| <= ur |x|] (no underflow);
    - [tc_block c ps = out (sum_(x in c :: ps) align M x)], [M] the
      largest magnitude of [c :: ps] ([max_abs]);
    - [tc_acc a0 blocks]: the blocks in order from the accumulator [a0];
      [tc_dot k ps = tc_acc 0 (chunk k ps)]: the terms cut into blocks of
      [k] (the last one possibly shorter).

    Results:
    - [tc_block_error]: one block of at most [k] products,
        |tc_block c ps - (c + sum ps)| <= tc_delta k (|c| + sum |ps|),
        tc_delta k = (1 + ur) (k + 1) ua + ur.
    - [tc_acc_error] (a Lemma, used by Tf32Product.v): [m] blocks of at
      most [k] terms from any accumulator [a0]: factor
      [(1 + tc_delta k)^m - 1] on [|a0| + sum |terms|].
    - [tc_sum_error_bound]: [n <= q k] terms, [q tc_delta k < 1]:
        |tc_dot k ps - sum ps| <= gamma (tc_delta k) q * sum |ps|,
      [gamma d q = q d / (1 - q d)] (FloatModel/DotError.v); with the products
      [ps = a_i b_i] this is the dot product's bound
      [tc_dot_error_bound].
    - Instances (Flocq): [tc_align F M x] is [x] truncated
      ([Ztrunc]) to a multiple of [2^(mag M - F)] (the [F] leading bits of
      the block's largest term kept: [F = 24] is no extra bit, [F = 27]
      three extra bits), so [ua = 2^(1 - F)] ([tc_align_err]); [out] is
      round-to-nearest-even in precision [p] ([ur = 2^-p]) or truncation
      ([Ztrunc], [ur = 2^(1 - p)], twice as large): [tc_dot_error_nearest]
      and [tc_dot_error_trunc]; for fp32 ([p = 24]) [tc_dot_error_fp32_nearest],
      [tc_dot_error_fp32_trunc] with [F] and [k] free.

    So a tensor-core dot of [n = q k] products is within
    [gamma (tc_delta k) q sum |a_i b_i|]: with [k = 8], [F = 27]
    (3 extra bits) and truncation, [tc_delta 8 = (1 + 2^-23) 9 2^-26 + 2^-23
    ~ 2.13 2^-23], i.e. about [q 2.5e-7] relative to [sum |a_i b_i|],
    where a left-to-right fp32 sum of [n = 8 q] products is within
    [gamma_(2^-24) (n - 1) ~ q 4.8e-7].  The block's own sum is charged
    once per block ([q] roundings, not [n]).

    The H100 (Section [TensorCoreOperands]).  Its tensor cores do not align
    to the largest term's leading bit but to a reference exponent computed
    from the operands: [E = max (e(c), e(a_i) + e(b_i))] over the nonzero
    terms, [e(x) = floor(log2 |x|)] ([xexp]; the exponent sum is taken
    before the product's significand, in [1, 4), is normalized, so the
    largest product's leading bit may be [E + 1]); every term is truncated
    to a multiple of [2^(E - F + 1)] ([tc_align_op F]: [ua = 2^(1 - F)],
    [|tc_align_op F E x - x| <= ua 2^E] and [2^E <= max |term|]); the
    aligned sum is exact and rounded by [out].  [tc_block_op c ab] is one
    block of operand pairs [ab], [tc_acc_op] the chain, [tc_dot_op k a b]
    the dot in blocks of [k] pairs from 0.  [tc_block_op_error],
    [tc_acc_op_error] (from any accumulator) and
    [tc_dot_op_error_bound] give the same [tc_delta k] and
    [gamma (tc_delta k) q] as [tc_block_error] and [tc_dot_error_bound];
    [tc_dot_op_error_fp32_trunc] / [_nearest] are the fp32 instances.
    Identified bit for bit on an H100 (ojas_ref/verification/device_premises.py,
    [Accumulation]; Khattak and Mikaitis's H100 model): [F = 26] (two bits
    below float32's 24), output truncation, [k = 16] for bf16 operands and
    [k = 8] for TF32, the accumulator aligned with the block's products; a
    [tl.dot] of length [K] is [tc_acc_op c] over its blocks of [k] in order
    (from the accumulator [c]; [tc_dot_op] starts from 0).  With [k = 16]:
    [tc_delta 16 = (1 + 2^-23) 17 2^-25 + 2^-23 ~ 5.25 2^-23 ~ 6.3e-7] per
    block.

    Not modelled, or assumed: the block size [k], the number [F] of kept
    bits and the final rounding mode are parameters (identified on the
    device by ojas verify-device, not here); the
    products are exact reals (true for bf16, fp16 and TF32 operands in
    the hardware's wide multipliers); no underflow ([out_err] is relative:
    the instances use Flocq's FLX formats, unbounded exponent range; the
    hardware's treatment of subnormal operands is not modelled) and
    no overflow; the order in which the blocks of a matrix product are
    visited is the order of the list (per output element, the MMA chain
    along K); within a block the aligned sum is exact (the hardware adder
    is wide enough for [k + 1] aligned [F]-bit terms and their carries: an
    assumption of the model, which Fasi et al. observe and the H100's
    identification is consistent with). *)

From Coq Require Import Reals List Lra Lia Arith.
From Flocq Require Import Core Relative.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision FloatModel.NoUnderflow FloatModel.DotError.
From Ojas Require Import Attention.OnlineSoftmax Attention.StreamCorrect FloatModel.BlockedSum.
Import ListNotations.
Open Scope R_scope.

(** ** Largest magnitude of a list *)

Definition max_abs (xs : list R) : R := fold_right (fun x m => Rmax (Rabs x) m) 0 xs.

Lemma max_abs_nonneg : forall xs, 0 <= max_abs xs.
Proof.
  induction xs as [|x xs IH]; cbn [max_abs fold_right]; [lra |].
  eapply Rle_trans; [exact IH | apply Rmax_r].
Qed.

Lemma max_abs_ge : forall xs x, In x xs -> Rabs x <= max_abs xs.
Proof.
  induction xs as [|y xs IH]; intros x Hx; [destruct Hx |].
  cbn [max_abs fold_right]; destruct Hx as [<- | Hx]; [apply Rmax_l |].
  eapply Rle_trans; [apply IH, Hx | apply Rmax_r].
Qed.

Lemma max_abs_le_sum : forall xs, max_abs xs <= rsum (map Rabs xs).
Proof.
  induction xs as [|x xs IH]; cbn [max_abs fold_right map]; [unfold rsum; simpl; lra |].
  rewrite rsum_cons.
  assert (0 <= rsum (map Rabs xs)) by (eapply Rle_trans; [apply max_abs_nonneg | exact IH]).
  pose proof (Rabs_pos x).
  apply Rmax_lub; [lra |].
  fold (max_abs xs); lra.
Qed.

Lemma rsum_abs_le_abs : forall xs, Rabs (rsum xs) <= rsum (map Rabs xs).
Proof.
  induction xs as [|x xs IH]; cbn [map]; [unfold rsum; simpl; rewrite Rabs_R0; lra |].
  rewrite !rsum_cons; eapply Rle_trans; [apply Rabs_triang | lra].
Qed.

Lemma rsum_abs_nonneg : forall xs, 0 <= rsum (map Rabs xs).
Proof.
  intros xs; apply rsum_nonneg; intros z Hz; apply in_map_iff in Hz.
  destruct Hz as [w [<- _]]; apply Rabs_pos.
Qed.

(** Moving every term by at most [e] moves the sum by at most [n e]. *)
Lemma rsum_map_close : forall (f : R -> R) e xs,
  (forall x, In x xs -> Rabs (f x - x) <= e) ->
  Rabs (rsum (map f xs) - rsum xs) <= INR (length xs) * e.
Proof.
  intros f e; induction xs as [|x xs IH]; intros H.
  - cbn; unfold rsum; simpl; rewrite Rminus_0_r, Rabs_R0; lra.
  - cbn [map length]; rewrite !rsum_cons, S_INR.
    replace (f x + rsum (map f xs) - (x + rsum xs))
      with ((f x - x) + (rsum (map f xs) - rsum xs)) by ring.
    eapply Rle_trans; [apply Rabs_triang |].
    pose proof (H x (or_introl eq_refl)).
    pose proof (IH (fun y Hy => H y (or_intror Hy))); lra.
Qed.

(** [n <= q k] terms make at most [q] blocks of [k]. *)
Lemma chunk_length_le : forall k q (ps : list R),
  (1 <= k)%nat -> (1 <= q)%nat -> (length ps <= q * k)%nat -> (length (chunk k ps) <= q)%nat.
Proof.
  intros k q ps Hk Hq Hl.
  destruct (chunk_count k ps Hk) as [_ H2].
  destruct (Nat.le_gt_cases (length (chunk k ps)) q) as [Hle | Hgt]; [exact Hle |].
  exfalso; assert (q * k <= (length (chunk k ps) - 1) * k)%nat by (apply Nat.mul_le_mono_r; lia).
  lia.
Qed.

(** ** A chain of blocks, each within [d] of its exact sum *)

Section Chain.
Context {X : Type}.
(** A block is a list of [X]; [g x] is the term [x] stands for (a product). *)
Variable g : X -> R.
Variable blk : R -> list X -> R.
Variable P : list X -> Prop.
Variable d : R.
Hypothesis d_nonneg : 0 <= d.
Hypothesis blk_err : forall a b, P b ->
  Rabs (blk a b - (a + rsum (map g b))) <= d * (Rabs a + rsum (map Rabs (map g b))).

(** [m] blocks from any accumulator [a0]: factor [(1 + d)^m - 1]. *)
Lemma chain_error : forall blocks a0, Forall P blocks ->
  Rabs (fold_left blk blocks a0 - (a0 + rsum (map g (concat blocks))))
  <= ((1 + d) ^ length blocks - 1) * (Rabs a0 + rsum (map Rabs (map g (concat blocks)))).
Proof.
  induction blocks as [|b bs IH]; intros a0 Hb.
  - cbn; unfold rsum; simpl; rewrite Rplus_0_r, Rminus_diag_eq, Rabs_R0 by reflexivity; lra.
  - inversion Hb as [|b' bs' Hb1 Hbs]; subst.
    cbn [fold_left concat length]; rewrite !map_app, !rsum_app.
    set (a1 := blk a0 b).
    set (G := 1 + d).
    assert (HG : 1 <= G ^ length bs) by (apply pow_R1_Rle; unfold G; lra).
    pose proof (IH a1 Hbs) as H1; fold G in H1.
    pose proof (blk_err a0 b Hb1) as H0; fold a1 in H0.
    set (Tb := Rabs a0 + rsum (map Rabs (map g b))) in *.
    set (R1 := rsum (map Rabs (map g (concat bs)))) in *.
    assert (HR1 : 0 <= R1) by apply rsum_abs_nonneg.
    assert (HTb : 0 <= Tb)
      by (unfold Tb; pose proof (Rabs_pos a0); pose proof (rsum_abs_nonneg (map g b)); lra).
    assert (Ha1 : Rabs a1 <= (1 + d) * Tb).
    { replace a1 with ((a1 - (a0 + rsum (map g b))) + (a0 + rsum (map g b))) by ring.
      eapply Rle_trans; [apply Rabs_triang |].
      assert (Rabs (a0 + rsum (map g b)) <= Tb).
      { unfold Tb; eapply Rle_trans; [apply Rabs_triang |].
        pose proof (rsum_abs_le_abs (map g b)); lra. }
      lra. }
    replace (fold_left blk bs a1 - (a0 + (rsum (map g b) + rsum (map g (concat bs)))))
      with ((fold_left blk bs a1 - (a1 + rsum (map g (concat bs)))) + (a1 - (a0 + rsum (map g b))))
      by ring.
    replace (Rabs a0 + (rsum (map Rabs (map g b)) + R1)) with (Tb + R1) by (unfold Tb; ring).
    eapply Rle_trans; [apply Rabs_triang |].
    set (Q := G ^ length bs) in *.
    replace (G ^ S (length bs)) with (Q * G) by (unfold Q; simpl; ring).
    assert (E1 : (Q - 1) * (Rabs a1 + R1) <= (Q - 1) * (G * Tb + R1))
      by (apply Rmult_le_compat_l; unfold G in *; lra).
    assert (E2 : (Q - 1) * R1 <= (Q * G - 1) * R1).
    { apply Rmult_le_compat_r; [exact HR1 |]; unfold G in *; nra. }
    assert (E3 : (Q - 1) * (G * Tb) + d * Tb = (Q * G - 1) * Tb) by (unfold G; ring).
    nra.
Qed.

End Chain.

(** ** One block and a chain of blocks *)

Section TensorCoreBlock.

(** [align M x]: the term [x] aligned (and truncated) in a block whose
    largest magnitude is [M]. *)
Variable align : R -> R -> R.
(** The final normalization and rounding of the block's sum. *)
Variable out : R -> R.
Variables ua ur : R.
Hypothesis ua_nonneg : 0 <= ua.
Hypothesis ur_nonneg : 0 <= ur.
Hypothesis align_err : forall M x, Rabs x <= M -> Rabs (align M x - x) <= ua * M.
Hypothesis out_err : forall x, Rabs (out x - x) <= ur * Rabs x.

(** [c + sum ps] as one tensor-core block computes it. *)
Definition tc_block (c : R) (ps : list R) : R :=
  out (rsum (map (align (max_abs (c :: ps))) (c :: ps))).

(** The relative error of one block of at most [k] products. *)
Definition tc_delta (k : nat) : R := (1 + ur) * (INR (S k) * ua) + ur.

Lemma tc_delta_nonneg : forall k, 0 <= tc_delta k.
Proof.
  intros k; unfold tc_delta; pose proof (pos_INR (S k)).
  assert (0 <= INR (S k) * ua) by (apply Rmult_le_pos; lra).
  assert (0 <= (1 + ur) * (INR (S k) * ua)) by (apply Rmult_le_pos; lra).
  lra.
Qed.

(** At most [k + 1] terms, each moved by at most [ua] times their largest
    magnitude, summed exactly and rounded by [out]: within [tc_delta k] of
    the sum of their magnitudes. *)
Lemma tc_aligned_sum_error : forall (f : R -> R) k xs, (length xs <= S k)%nat ->
  (forall x, In x xs -> Rabs (f x - x) <= ua * max_abs xs) ->
  Rabs (out (rsum (map f xs)) - rsum xs) <= tc_delta k * rsum (map Rabs xs).
Proof.
  intros f k xs Hk Hf.
  set (M := max_abs xs).
  set (T := rsum (map Rabs xs)).
  assert (HMT : M <= T) by apply max_abs_le_sum.
  assert (HM0 : 0 <= M) by apply max_abs_nonneg.
  set (s' := rsum (map f xs)).
  assert (Ha : Rabs (s' - rsum xs) <= INR (length xs) * (ua * M)) by (apply rsum_map_close, Hf).
  assert (Hlen : INR (length xs) <= INR (S k)) by (apply le_INR, Hk).
  assert (Ha' : Rabs (s' - rsum xs) <= INR (S k) * ua * T).
  { eapply Rle_trans; [exact Ha |].
    rewrite <- Rmult_assoc; apply Rmult_le_compat; try lra.
    - apply Rmult_le_pos; [apply pos_INR | lra].
    - apply Rmult_le_compat_r; lra. }
  assert (Hsabs : Rabs (rsum xs) <= T) by apply rsum_abs_le_abs.
  assert (Hs'abs : Rabs s' <= T + INR (S k) * ua * T).
  { replace s' with ((s' - rsum xs) + rsum xs) by ring.
    eapply Rle_trans; [apply Rabs_triang | lra]. }
  pose proof (out_err s') as Ho.
  replace (out s' - rsum xs) with ((out s' - s') + (s' - rsum xs)) by ring.
  eapply Rle_trans; [apply Rabs_triang |].
  assert (ur * Rabs s' <= ur * (T + INR (S k) * ua * T)) by (apply Rmult_le_compat_l; lra).
  unfold tc_delta; lra.
Qed.

(** One block: [|tc_block c ps - (c + sum ps)| <= tc_delta k (|c| + sum |ps|)]. *)
Theorem tc_block_error : forall k c ps, (length ps <= k)%nat ->
  Rabs (tc_block c ps - (c + rsum ps)) <= tc_delta k * (Rabs c + rsum (map Rabs ps)).
Proof.
  intros k c ps Hk; unfold tc_block.
  replace (c + rsum ps) with (rsum (c :: ps)) by apply rsum_cons.
  replace (Rabs c + rsum (map Rabs ps)) with (rsum (map Rabs (c :: ps))) by (cbn [map]; apply rsum_cons).
  apply tc_aligned_sum_error; [cbn [length]; lia |].
  intros x Hx; apply align_err, max_abs_ge, Hx.
Qed.

(** The blocks in order, from the accumulator [a0]. *)
Definition tc_acc (a0 : R) (blocks : list (list R)) : R := fold_left tc_block blocks a0.

(** The terms cut into blocks of [k], from 0. *)
Definition tc_dot (k : nat) (ps : list R) : R := tc_acc 0 (chunk k ps).

(** [m] blocks of at most [k] terms from any accumulator [a0]. *)
Lemma tc_acc_error : forall k blocks a0,
  Forall (fun b => (length b <= k)%nat) blocks ->
  Rabs (tc_acc a0 blocks - (a0 + rsum (concat blocks)))
  <= ((1 + tc_delta k) ^ length blocks - 1) * (Rabs a0 + rsum (map Rabs (concat blocks))).
Proof.
  intros k blocks a0 Hb.
  pose proof (chain_error (fun x => x) tc_block (fun b => (length b <= k)%nat) (tc_delta k)
                (tc_delta_nonneg k) (fun a b Hb => ltac:(rewrite map_id; exact (tc_block_error k a b Hb)))
                blocks a0 Hb) as H.
  rewrite map_id in H; exact H.
Qed.

(** [n <= q k] terms in blocks of [k]: [gamma (tc_delta k) q]. *)
Theorem tc_sum_error_bound : forall k q ps,
  (1 <= k)%nat -> (1 <= q)%nat -> (length ps <= q * k)%nat -> INR q * tc_delta k < 1 ->
  Rabs (tc_dot k ps - rsum ps) <= gamma (tc_delta k) q * rsum (map Rabs ps).
Proof.
  intros k q ps Hk Hq Hl Hn.
  assert (Hb : Forall (fun b => (length b <= k)%nat) (chunk k ps)).
  { apply Forall_forall; intros tl Hin; pose proof (chunk_tile_length k ps tl Hin); lia. }
  pose proof (tc_acc_error k (chunk k ps) 0 Hb) as H.
  rewrite concat_chunk, Rplus_0_l, Rabs_R0, Rplus_0_l in H.
  unfold tc_dot; eapply Rle_trans; [exact H |].
  apply Rmult_le_compat_r; [apply rsum_abs_nonneg |].
  pose proof (tc_delta_nonneg k) as Hd.
  pose proof (chunk_length_le k q ps Hk Hq Hl) as Hc.
  eapply Rle_trans; [| apply pow_le_gamma; assumption].
  apply Rplus_le_compat_r, Rle_pow; [lra | exact Hc].
Qed.

(** The dot product: the products [a_i b_i] (exact) in blocks of [k]. *)
Theorem tc_dot_error_bound : forall k q a b,
  (1 <= k)%nat -> (1 <= q)%nat -> (length a <= q * k)%nat -> INR q * tc_delta k < 1 ->
  Rabs (tc_dot k (map (fun xy => fst xy * snd xy) (combine a b))
        - rsum (map (fun xy => fst xy * snd xy) (combine a b)))
  <= gamma (tc_delta k) q * rsum (map (fun xy => Rabs (fst xy * snd xy)) (combine a b)).
Proof.
  intros k q a b Hk Hq Hl Hn.
  rewrite <- (map_map (fun xy => fst xy * snd xy) Rabs).
  apply tc_sum_error_bound; auto.
  rewrite map_length, combine_length; lia.
Qed.

End TensorCoreBlock.

(** ** Flocq instances: truncating alignment, nearest or truncating output *)

(** [x] truncated to a multiple of [2^(mag M - F)]: the [F] leading bits of
    the block's largest magnitude [M] are kept. *)
Definition tc_align (F : Z) (M x : R) : R := round radix2 (FIX_exp (mag radix2 M - F)) Ztrunc x.

Lemma tc_align_err : forall F M x, Rabs x <= M -> Rabs (tc_align F M x - x) <= bpow radix2 (1 - F) * M.
Proof.
  intros F M x Hx; unfold tc_align.
  destruct (Req_dec M 0) as [HM | HM].
  - subst M; assert (x = 0) by (apply Rabs_le_0_eq, Hx); subst x.
    rewrite round_0 by auto with typeclass_instances.
    rewrite Rminus_0_r, Rabs_R0; lra.
  - eapply Rle_trans; [apply error_le_ulp; auto with typeclass_instances |].
    rewrite ulp_FIX.
    assert (HM' : 0 < M) by (pose proof (Rabs_pos x); lra).
    pose proof (bpow_mag_le radix2 M HM) as Hb.
    rewrite Rabs_right in Hb by lra.
    replace (mag radix2 M - F)%Z with ((1 - F) + (mag radix2 M - 1))%Z by ring.
    rewrite bpow_plus; apply Rmult_le_compat_l; [apply bpow_ge_0 | exact Hb].
Qed.

Lemma tc_align_ua_nonneg : forall F, 0 <= bpow radix2 (1 - F).
Proof. intros; apply bpow_ge_0. Qed.

(** Round-to-nearest-even and truncation in precision [p] (FLX: no underflow). *)
Definition rn_flx (p : Z) (x : R) : R := round radix2 (FLX_exp p) ZnearestE x.
Definition rz_flx (p : Z) (x : R) : R := round radix2 (FLX_exp p) Ztrunc x.

Lemma rn_flx_err : forall p, (0 < p)%Z -> forall x, Rabs (rn_flx p x - x) <= bpow radix2 (- p) * Rabs x.
Proof.
  intros p Hp x; unfold rn_flx.
  assert (Prec_gt_0 p) by exact Hp.
  rewrite <- flt_u_eq; apply relative_error_N_FLX; auto.
Qed.

Lemma rz_flx_err : forall p, (0 < p)%Z -> forall x, Rabs (rz_flx p x - x) <= bpow radix2 (1 - p) * Rabs x.
Proof.
  intros p Hp x; unfold rz_flx.
  assert (Prec_gt_0 p) by exact Hp.
  destruct (Req_dec x 0) as [-> | Hx].
  - rewrite round_0 by auto with typeclass_instances; rewrite Rminus_0_r, !Rabs_R0; lra.
  - left; replace (1 - p)%Z with (- p + 1)%Z by ring.
    apply relative_error_FLX; auto with typeclass_instances.
Qed.

(** Round-to-nearest output: [ur = 2^-p]. *)
Theorem tc_dot_error_nearest : forall p F k q a b,
  (0 < p)%Z -> (1 <= k)%nat -> (1 <= q)%nat -> (length a <= q * k)%nat ->
  INR q * tc_delta (bpow radix2 (1 - F)) (bpow radix2 (- p)) k < 1 ->
  Rabs (tc_dot (tc_align F) (rn_flx p) k (map (fun xy => fst xy * snd xy) (combine a b))
        - rsum (map (fun xy => fst xy * snd xy) (combine a b)))
  <= gamma (tc_delta (bpow radix2 (1 - F)) (bpow radix2 (- p)) k) q
     * rsum (map (fun xy => Rabs (fst xy * snd xy)) (combine a b)).
Proof.
  intros p F k q a b Hp Hk Hq Hl Hn.
  apply tc_dot_error_bound; auto using tc_align_ua_nonneg, bpow_ge_0, tc_align_err, rn_flx_err.
Qed.

(** Truncating output: [ur = 2^(1 - p)], twice the nearest one. *)
Theorem tc_dot_error_trunc : forall p F k q a b,
  (0 < p)%Z -> (1 <= k)%nat -> (1 <= q)%nat -> (length a <= q * k)%nat ->
  INR q * tc_delta (bpow radix2 (1 - F)) (bpow radix2 (1 - p)) k < 1 ->
  Rabs (tc_dot (tc_align F) (rz_flx p) k (map (fun xy => fst xy * snd xy) (combine a b))
        - rsum (map (fun xy => fst xy * snd xy) (combine a b)))
  <= gamma (tc_delta (bpow radix2 (1 - F)) (bpow radix2 (1 - p)) k) q
     * rsum (map (fun xy => Rabs (fst xy * snd xy)) (combine a b)).
Proof.
  intros p F k q a b Hp Hk Hq Hl Hn.
  apply tc_dot_error_bound; auto using tc_align_ua_nonneg, bpow_ge_0, tc_align_err, rz_flx_err.
Qed.

(** fp32 output ([p = 24]), round to nearest: [ur = u = 2^-24],
    [tc_delta k = (1 + 2^-24) (k + 1) 2^(1 - F) + 2^-24]. *)
Theorem tc_dot_error_fp32_nearest : forall F k q a b,
  (1 <= k)%nat -> (1 <= q)%nat -> (length a <= q * k)%nat ->
  INR q * ((1 + / 16777216) * (INR (S k) * bpow radix2 (1 - F)) + / 16777216) < 1 ->
  Rabs (tc_dot (tc_align F) (rn_flx 24) k (map (fun xy => fst xy * snd xy) (combine a b))
        - rsum (map (fun xy => fst xy * snd xy) (combine a b)))
  <= gamma ((1 + / 16777216) * (INR (S k) * bpow radix2 (1 - F)) + / 16777216) q
     * rsum (map (fun xy => Rabs (fst xy * snd xy)) (combine a b)).
Proof.
  intros F k q a b Hk Hq Hl Hn.
  assert (E : bpow radix2 (- (24)) = / 16777216) by (simpl; unfold Z.pow_pos; simpl; field).
  pose proof (tc_dot_error_nearest 24 F k q a b eq_refl Hk Hq Hl) as H.
  unfold tc_delta in H; rewrite E in H; apply H, Hn.
Qed.

(** fp32 output, truncation: [ur = 2 u = 2^-23]. *)
Theorem tc_dot_error_fp32_trunc : forall F k q a b,
  (1 <= k)%nat -> (1 <= q)%nat -> (length a <= q * k)%nat ->
  INR q * ((1 + / 8388608) * (INR (S k) * bpow radix2 (1 - F)) + / 8388608) < 1 ->
  Rabs (tc_dot (tc_align F) (rz_flx 24) k (map (fun xy => fst xy * snd xy) (combine a b))
        - rsum (map (fun xy => fst xy * snd xy) (combine a b)))
  <= gamma ((1 + / 8388608) * (INR (S k) * bpow radix2 (1 - F)) + / 8388608) q
     * rsum (map (fun xy => Rabs (fst xy * snd xy)) (combine a b)).
Proof.
  intros F k q a b Hk Hq Hl Hn.
  assert (E : bpow radix2 (1 - 24) = / 8388608) by (simpl; unfold Z.pow_pos; simpl; field).
  pose proof (tc_dot_error_trunc 24 F k q a b eq_refl Hk Hq Hl) as H.
  unfold tc_delta in H; rewrite E in H; apply H, Hn.
Qed.

(** ** The block aligned to its operands' exponents (the H100's tensor cores) *)

(** [e(x) = floor(log2 |x|)] for [x <> 0]. *)
Definition xexp (x : R) : Z := (mag radix2 x - 1)%Z.

(** The products of the operand pairs. *)
Definition prods (ab : list (R * R)) : list R := map (fun xy => fst xy * snd xy) ab.

(** A block's terms with the exponents the hardware aligns them by: the
    accumulator [c] with [e(c)], each product [a_i b_i] with
    [e(a_i) + e(b_i)] (the sum of its operands' exponents, before the
    product's significand, in [1, 4), is normalized). *)
Definition tc_terms (c : R) (ab : list (R * R)) : list (R * Z) :=
  (c, xexp c) :: map (fun xy => (fst xy * snd xy, (xexp (fst xy) + xexp (snd xy))%Z)) ab.

(** The largest exponent of a nonzero term ([None]: every term is 0). *)
Fixpoint ref_opt (ts : list (R * Z)) : option Z :=
  match ts with
  | [] => None
  | t :: ts' =>
      if Req_EM_T (fst t) 0 then ref_opt ts'
      else Some (match ref_opt ts' with None => snd t | Some e => Z.max (snd t) e end)
  end.

Lemma ref_opt_some : forall ts e, ref_opt ts = Some e -> exists t, In t ts /\ fst t <> 0 /\ snd t = e.
Proof.
  induction ts as [|t ts IH]; intros e H; cbn [ref_opt] in H; [discriminate |].
  destruct (Req_EM_T (fst t) 0) as [H0 | H0].
  - destruct (IH e H) as [t' [Hi Ht']]; exists t'; split; [right; exact Hi | exact Ht'].
  - injection H as H; destruct (ref_opt ts) as [e' |] eqn:E.
    + destruct (Z.max_spec (snd t) e') as [[_ Hm] | [_ Hm]]; rewrite Hm in H; subst e.
      * destruct (IH e' eq_refl) as [t' [Hi Ht']]; exists t'; split; [right; exact Hi | exact Ht'].
      * exists t; split; [left; reflexivity | split; [exact H0 | reflexivity]].
    + exists t; split; [left; reflexivity | split; [exact H0 | exact H]].
Qed.

Lemma ref_opt_none : forall ts, ref_opt ts = None -> forall t, In t ts -> fst t = 0.
Proof.
  induction ts as [|t0 ts IH]; intros H t Hin; [destruct Hin |].
  cbn [ref_opt] in H; destruct (Req_EM_T (fst t0) 0) as [H0 | H0]; [| discriminate].
  destruct Hin as [<- | Hin]; [exact H0 | apply IH; assumption].
Qed.

(** A nonzero term is at least [2^e] for its exponent [e]. *)
Lemma tc_terms_exp : forall c ab t, In t (tc_terms c ab) -> fst t <> 0 -> bpow radix2 (snd t) <= Rabs (fst t).
Proof.
  intros c ab t Hin Hnz; unfold tc_terms in Hin; destruct Hin as [<- | Hin].
  - cbn [fst snd] in *; unfold xexp; apply bpow_mag_le, Hnz.
  - apply in_map_iff in Hin; destruct Hin as [[x y] [<- _]]; cbn [fst snd] in *.
    assert (Hx : x <> 0) by (intro; subst; apply Hnz; ring).
    assert (Hy : y <> 0) by (intro; subst; apply Hnz; ring).
    rewrite bpow_plus, Rabs_mult; unfold xexp.
    apply Rmult_le_compat; [apply bpow_ge_0 | apply bpow_ge_0 | apply bpow_mag_le, Hx | apply bpow_mag_le, Hy].
Qed.

Lemma map_fst_tc_terms : forall c ab, map fst (tc_terms c ab) = c :: prods ab.
Proof. intros; unfold tc_terms, prods; cbn [map]; rewrite map_map; reflexivity. Qed.

(** Tiles of a mapped list are the mapped tiles. *)
Lemma chunk_map : forall {A B} (f : A -> B) b xs, chunk b (map f xs) = map (map f) (chunk b xs).
Proof.
  intros A B f b xs; unfold chunk; rewrite map_length.
  generalize (Nat.max 1 b) as b'; generalize (length xs) as fuel; intros fuel b'.
  revert xs; induction fuel as [|fuel IH]; intros xs; [reflexivity |].
  destruct xs as [|x xs]; [reflexivity |].
  cbn [chunk_fuel]; change (f x :: map f xs) with (map f (x :: xs)).
  rewrite firstn_map, skipn_map, IH; reflexivity.
Qed.

Section TensorCoreOperands.

(** [align e x]: the term [x] aligned (and truncated) in a block whose
    reference exponent is [e]. *)
Variable align : Z -> R -> R.
Variable out : R -> R.
Variables ua ur : R.
Hypothesis ua_nonneg : 0 <= ua.
Hypothesis ur_nonneg : 0 <= ur.
Hypothesis align_err : forall e x, Rabs (align e x - x) <= ua * bpow radix2 e.
Hypothesis align_0 : forall e, align e 0 = 0.
Hypothesis out_err : forall x, Rabs (out x - x) <= ur * Rabs x.

(** The block's reference exponent: the largest of [e(c)] and the
    [e(a_i) + e(b_i)] over the nonzero terms. *)
Definition tc_ref (c : R) (ab : list (R * R)) : Z :=
  match ref_opt (tc_terms c ab) with Some e => e | None => 0%Z end.

(** [c + sum a_i b_i] as one such block computes it. *)
Definition tc_block_op (c : R) (ab : list (R * R)) : R :=
  out (rsum (map (align (tc_ref c ab)) (c :: prods ab))).

(** One block of at most [k] products: the bound of [tc_block_error]. *)
Theorem tc_block_op_error : forall k c ab, (length ab <= k)%nat ->
  Rabs (tc_block_op c ab - (c + rsum (prods ab)))
  <= tc_delta ua ur k * (Rabs c + rsum (map Rabs (prods ab))).
Proof.
  intros k c ab Hk; unfold tc_block_op.
  replace (c + rsum (prods ab)) with (rsum (c :: prods ab)) by apply rsum_cons.
  replace (Rabs c + rsum (map Rabs (prods ab))) with (rsum (map Rabs (c :: prods ab)))
    by (cbn [map]; apply rsum_cons).
  apply (tc_aligned_sum_error out ua ur ua_nonneg ur_nonneg out_err).
  { unfold prods; cbn [length]; rewrite map_length; lia. }
  intros x Hx; rewrite <- map_fst_tc_terms in Hx.
  apply in_map_iff in Hx; destruct Hx as [t [<- Ht]].
  unfold tc_ref; destruct (ref_opt (tc_terms c ab)) as [e |] eqn:E.
  - destruct (ref_opt_some _ _ E) as [t' [Ht' [Hnz <-]]].
    eapply Rle_trans; [apply align_err |].
    apply Rmult_le_compat_l; [exact ua_nonneg |].
    eapply Rle_trans; [apply (tc_terms_exp c ab t' Ht' Hnz) |].
    rewrite <- map_fst_tc_terms; apply max_abs_ge, in_map, Ht'.
  - rewrite (ref_opt_none _ E t Ht), align_0, Rminus_0_r, Rabs_R0.
    apply Rmult_le_pos; [exact ua_nonneg | apply max_abs_nonneg].
Qed.

(** The blocks in order from [a0]; the dot [a . b] in blocks of [k] pairs from 0. *)
Definition tc_acc_op (a0 : R) (blocks : list (list (R * R))) : R := fold_left tc_block_op blocks a0.
Definition tc_dot_op (k : nat) (a b : list R) : R := tc_acc_op 0 (chunk k (combine a b)).

(** [m] blocks of at most [k] pairs from any accumulator [a0] (as [tc_acc_error]). *)
Lemma tc_acc_op_error : forall k blocks a0,
  Forall (fun t => (length t <= k)%nat) blocks ->
  Rabs (tc_acc_op a0 blocks - (a0 + rsum (prods (concat blocks))))
  <= ((1 + tc_delta ua ur k) ^ length blocks - 1) * (Rabs a0 + rsum (map Rabs (prods (concat blocks)))).
Proof.
  intros k blocks a0 Hb.
  exact (chain_error (fun xy => fst xy * snd xy) tc_block_op (fun t => (length t <= k)%nat) (tc_delta ua ur k)
           (tc_delta_nonneg ua ur ua_nonneg ur_nonneg k) (fun c t Ht => tc_block_op_error k c t Ht) blocks a0 Hb).
Qed.

(** [tl.dot (a, b, c)]: [n <= q k] products in blocks of [k] added to the
    accumulator [c] on the tensor cores: [gamma (tc_delta k) q] of
    [|c| + sum |a_i b_i|]. *)
Theorem tc_acc_dot_op_error_bound : forall k q c a b,
  (1 <= k)%nat -> (1 <= q)%nat -> (length a <= q * k)%nat -> INR q * tc_delta ua ur k < 1 ->
  Rabs (tc_acc_op c (chunk k (combine a b)) - (c + rsum (prods (combine a b))))
  <= gamma (tc_delta ua ur k) q * (Rabs c + rsum (map Rabs (prods (combine a b)))).
Proof.
  intros k q c a b Hk Hq Hl Hn.
  set (g := fun xy : R * R => fst xy * snd xy).
  set (ab := combine a b).
  assert (Hch : chunk k (map g ab) = map (map g) (chunk k ab)) by apply chunk_map.
  assert (Hab : (length (map g ab) <= q * k)%nat).
  { unfold ab; rewrite map_length, combine_length; lia. }
  assert (Hb : Forall (fun t => (length t <= k)%nat) (chunk k ab)).
  { apply Forall_forall; intros t Hin.
    assert (Hin' : In (map g t) (chunk k (map g ab))) by (rewrite Hch; apply in_map, Hin).
    pose proof (chunk_tile_length k (map g ab) (map g t) Hin') as Ht.
    rewrite map_length in Ht; lia. }
  assert (Hc : (length (chunk k ab) <= q)%nat).
  { pose proof (chunk_length_le k q (map g ab) Hk Hq Hab) as H.
    rewrite Hch, map_length in H; exact H. }
  pose proof (tc_acc_op_error k (chunk k ab) c Hb) as H.
  rewrite concat_chunk in H.
  eapply Rle_trans; [exact H |].
  apply Rmult_le_compat_r; [pose proof (Rabs_pos c); pose proof (rsum_abs_nonneg (prods ab)); lra |].
  pose proof (tc_delta_nonneg ua ur ua_nonneg ur_nonneg k) as Hd.
  eapply Rle_trans; [| apply pow_le_gamma; assumption].
  apply Rplus_le_compat_r, Rle_pow; [lra | exact Hc].
Qed.

(** [n <= q k] products in blocks of [k]: [gamma (tc_delta k) q], as [tc_dot_error_bound]
    ([tc_acc_dot_op_error_bound] from 0). *)
Theorem tc_dot_op_error_bound : forall k q a b,
  (1 <= k)%nat -> (1 <= q)%nat -> (length a <= q * k)%nat -> INR q * tc_delta ua ur k < 1 ->
  Rabs (tc_dot_op k a b - rsum (prods (combine a b)))
  <= gamma (tc_delta ua ur k) q * rsum (map Rabs (prods (combine a b))).
Proof.
  intros k q a b Hk Hq Hl Hn.
  pose proof (tc_acc_dot_op_error_bound k q 0 a b Hk Hq Hl Hn) as H.
  rewrite Rplus_0_l, Rabs_R0, Rplus_0_l in H; exact H.
Qed.

End TensorCoreOperands.

(** Flocq instance: [x] truncated ([Ztrunc]) to a multiple of [2^(e - F + 1)],
    the [F] bits from the reference exponent [e] down kept ([F = 26]: the
    H100's two bits below float32's 24), so [ua = 2^(1 - F)]. *)
Definition tc_align_op (F e : Z) (x : R) : R := round radix2 (FIX_exp (e - F + 1)) Ztrunc x.

Lemma tc_align_op_err : forall F e x,
  Rabs (tc_align_op F e x - x) <= bpow radix2 (1 - F) * bpow radix2 e.
Proof.
  intros F e x; unfold tc_align_op.
  eapply Rle_trans; [apply error_le_ulp; auto with typeclass_instances |].
  rewrite ulp_FIX, <- bpow_plus; apply bpow_le; lia.
Qed.

Lemma tc_align_op_0 : forall F e, tc_align_op F e 0 = 0.
Proof. intros; unfold tc_align_op; apply round_0; auto with typeclass_instances. Qed.

(** fp32 output truncated ([ur = 2^-23]): the H100's model with [F = 26],
    [k = 16] (bf16 operands) or [k = 8] (TF32). *)
Theorem tc_dot_op_error_fp32_trunc : forall F k q a b,
  (1 <= k)%nat -> (1 <= q)%nat -> (length a <= q * k)%nat ->
  INR q * ((1 + / 8388608) * (INR (S k) * bpow radix2 (1 - F)) + / 8388608) < 1 ->
  Rabs (tc_dot_op (tc_align_op F) (rz_flx 24) k a b - rsum (prods (combine a b)))
  <= gamma ((1 + / 8388608) * (INR (S k) * bpow radix2 (1 - F)) + / 8388608) q
     * rsum (map Rabs (prods (combine a b))).
Proof.
  intros F k q a b Hk Hq Hl Hn.
  assert (E : bpow radix2 (1 - 24) = / 8388608) by (simpl; unfold Z.pow_pos; simpl; field).
  pose proof (tc_dot_op_error_bound (tc_align_op F) (rz_flx 24) (bpow radix2 (1 - F)) (bpow radix2 (1 - 24))
                (bpow_ge_0 _ _) (bpow_ge_0 _ _) (tc_align_op_err F) (tc_align_op_0 F) (rz_flx_err 24 eq_refl)
                k q a b Hk Hq Hl) as H.
  unfold tc_delta in H; rewrite E in H; apply H, Hn.
Qed.

(** fp32 output rounded to nearest even ([ur = 2^-24]). *)
Theorem tc_dot_op_error_fp32_nearest : forall F k q a b,
  (1 <= k)%nat -> (1 <= q)%nat -> (length a <= q * k)%nat ->
  INR q * ((1 + / 16777216) * (INR (S k) * bpow radix2 (1 - F)) + / 16777216) < 1 ->
  Rabs (tc_dot_op (tc_align_op F) (rn_flx 24) k a b - rsum (prods (combine a b)))
  <= gamma ((1 + / 16777216) * (INR (S k) * bpow radix2 (1 - F)) + / 16777216) q
     * rsum (map Rabs (prods (combine a b))).
Proof.
  intros F k q a b Hk Hq Hl Hn.
  assert (E : bpow radix2 (- (24)) = / 16777216) by (simpl; unfold Z.pow_pos; simpl; field).
  pose proof (tc_dot_op_error_bound (tc_align_op F) (rn_flx 24) (bpow radix2 (1 - F)) (bpow radix2 (- (24)))
                (bpow_ge_0 _ _) (bpow_ge_0 _ _) (tc_align_op_err F) (tc_align_op_0 F) (rn_flx_err 24 eq_refl)
                k q a b Hk Hq Hl) as H.
  unfold tc_delta in H; rewrite E in H; apply H, Hn.
Qed.
