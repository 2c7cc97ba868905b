(** * Rounding-error bound of the online-softmax recurrence.

    The computed row is [finalize fl_ops d (stream fl_ops blocks)]: the very
    [block_step] / [stream] / [finalize] the oracle and the code run, over
    the rounding model [fl_ops] of [FloatModel/NoUnderflow.v] (unit roundoff [u] for
    [+ - * /], relative error [ue] of [exp], no underflow).  The exact row
    is [two_pass R_ops d keys].  For every output coordinate [c] with
    [|v_jc| <= V] for all keys, and [n] keys in tiles of any sizes,

      |out_hat_c - out_c| <= stream_err n * V

    where, with [K n = (1+u)^(2n) (1+ue)^n] and [alpha = u / ((1-u) e)],

      beta n       = (K n - 1) + n * alpha * K n
      stream_err n = (2 beta n + u (1 + beta n)) / (1 - beta n),

    under [u < 1] and [beta n < 1].  The bound is of order [(2u + ue) n]:
    it does not depend on the magnitude or the spread of the scores.

    Proof sketch.  The running max is exact.  Every unmasked key [j]
    contributes [exp y_j * g_j * v_j] to the computed sums, where
    - [y_j] is the sum of the rounded exponents [rnd (s_j - m)] and
      [rnd (m - m')] of its weight and of the later rescalings; the exact
      exponents telescope to [s_j - M] and all have the same sign, so
      [|y_j - (s_j - M)| <= u (M - s_j)], hence
      [|exp y_j - exp (s_j - M)| <= alpha] ([exp_shift_err_bound]);
    - [g_j] is the product of the [(1+delta)], [(1+eta)] factors of the
      multiplications, additions and exponentials the key went through:
      at most two roundings and one exponential per tile ([K n]).
    The exact sum [Z] is at least 1 (the max key has weight 1), so the
    computed sum and accumulator are within [beta Z] and [beta Z V] of the
    exact ones, and the final rounded division costs [u (1+beta)/(1-beta)].

    Exported theorems: [stream_error_bound] (any tiling),
    [stream_keywise_error_bound] (tiles of one key), [stream_row_error_bound]
    (the [stream_row] the code runs), and [attention_row_error_bound] (one
    attention row including the rounding of its scores, via [FloatModel/DotError.v]
    and [ScorePerturbation.v]).  Not covered: underflow (the model is
    relative only), the log-sum-exp output, other summation orders. *)

From Coq Require Import Reals List Lra Lia Arith.
From Ojas Require Import ScalarOps Vector VectorFacts FloatModel.NoUnderflow.
From Ojas Require Import Attention.OnlineSoftmax Attention.StreamCorrect.
From Ojas Require Import FloatModel.DotError Attention.ScorePerturbation.
Import ListNotations.
Open Scope R_scope.

Local Notation rkey := (@key R).

(** ** Real-number facts *)

(** Products of factors near 1: [|a b - 1| <= A B - 1]. *)
Lemma factor_mul :
  forall a b A B, Rabs (a - 1) <= A - 1 -> Rabs (b - 1) <= B - 1 ->
  Rabs (a * b - 1) <= A * B - 1.
Proof.
  intros a b A B Ha Hb.
  replace (a * b - 1) with ((a - 1) * (b - 1) + (a - 1) + (b - 1)) by ring.
  assert (0 <= A - 1) by (eapply Rle_trans; [apply Rabs_pos | exact Ha]).
  assert (0 <= B - 1) by (eapply Rle_trans; [apply Rabs_pos | exact Hb]).
  assert (Rabs ((a - 1) * (b - 1)) <= (A - 1) * (B - 1))
    by (rewrite Rabs_mult; apply Rmult_le_compat; auto using Rabs_pos).
  pose proof (Rabs_triang ((a - 1) * (b - 1) + (a - 1)) (b - 1)).
  pose proof (Rabs_triang ((a - 1) * (b - 1)) (a - 1)).
  nra.
Qed.

Lemma factor_one : forall d r, Rabs d <= r -> Rabs ((1 + d) - 1) <= (1 + r) - 1.
Proof. intros d r H; replace ((1 + d) - 1) with d by ring; lra. Qed.

Lemma Rabs_le_inv' : forall x y, Rabs x <= y -> - y <= x <= y.
Proof. intros x y; unfold Rabs; destruct (Rcase_abs x); lra. Qed.

Lemma exp_le_mono : forall x y, x <= y -> exp x <= exp y.
Proof.
  intros x y [H | ->]; [left; apply exp_increasing; exact H | right; reflexivity].
Qed.

(** [z e^-z <= 1/e]. *)
Lemma mul_exp_neg_le : forall z, z * exp (- z) <= exp (-1).
Proof.
  intros z; pose proof (exp_ineq1_le (z - 1)) as H.
  replace (exp (z - 1)) with (exp z * exp (-1)) in H
    by (rewrite <- exp_plus; f_equal; ring).
  apply (Rmult_le_reg_l (exp z)); [apply exp_pos |].
  rewrite <- Rmult_assoc, (Rmult_comm (exp z) z), Rmult_assoc, <- exp_plus.
  replace (z + - z) with 0 by ring; rewrite exp_0; lra.
Qed.

(** [1 - e^-z <= z]. *)
Lemma one_minus_exp_neg_le : forall z, 1 - exp (- z) <= z.
Proof. intros z; pose proof (exp_ineq1_le (- z)); lra. Qed.

Section StreamError.

Variables rnd rexp rln : R -> R.
Variables u ue : R.
Hypothesis u_nonneg : 0 <= u.
Hypothesis ue_nonneg : 0 <= ue.
Hypothesis rnd_rel : forall x, Rabs (rnd x - x) <= u * Rabs x.
Hypothesis rexp_rel : forall x, Rabs (rexp x - exp x) <= ue * exp x.

Local Notation fl := (fl_ops rnd rexp rln).

(** ** The bound *)

(** Largest product of rounding factors a key collects in [n] tiles. *)
Definition stream_factor (n : nat) : R := (1 + u) ^ (2 * n) * (1 + ue) ^ n.

(** Factors a key collects inside one tile of [b] keys. *)
Definition block_factor (b : nat) : R := (1 + ue) * (1 + u) ^ b.

(** Absolute error of a weight [exp (s - M)] from the rounded exponents. *)
Definition exp_shift_err : R := u / (1 - u) * exp (-1).

(** Relative error of the computed sum and accumulator. *)
Definition stream_beta (n : nat) : R :=
  (stream_factor n - 1) + INR n * exp_shift_err * stream_factor n.

(** The error bound [E(n, u, ue)] of an output coordinate, relative to [V]. *)
Definition stream_err (n : nat) : R :=
  (2 * stream_beta n + u * (1 + stream_beta n)) / (1 - stream_beta n).

(** Tile count: the keys, with an empty tile counted as one (it still
    rescales the state). *)
Definition tile_count (blocks : list (list rkey)) : nat :=
  fold_right (fun blk n => (Nat.max 1 (length blk) + n)%nat) 0%nat blocks.

Lemma one_le_pow_u : forall k, 1 <= (1 + u) ^ k.
Proof. intros k; apply pow_R1_Rle; lra. Qed.

Lemma one_le_pow_ue : forall k, 1 <= (1 + ue) ^ k.
Proof. intros k; apply pow_R1_Rle; lra. Qed.

Lemma stream_factor_ge_1 : forall n, 1 <= stream_factor n.
Proof.
  intros n; unfold stream_factor.
  pose proof (one_le_pow_u (2 * n)); pose proof (one_le_pow_ue n); nra.
Qed.

Lemma stream_factor_mono : forall n n', (n <= n')%nat -> stream_factor n <= stream_factor n'.
Proof.
  intros n n' H; unfold stream_factor.
  apply Rmult_le_compat; try (apply pow_le; lra); apply Rle_pow; lra || lia.
Qed.

Lemma stream_factor_S : forall n, stream_factor n * ((1 + ue) * ((1 + u) * (1 + u))) = stream_factor (S n).
Proof.
  intros n; unfold stream_factor.
  replace (2 * S n)%nat with (S (S (2 * n))) by lia; simpl; ring.
Qed.

Lemma block_factor_S : forall b, block_factor b * (1 + u) = block_factor (S b).
Proof. intros b; unfold block_factor; simpl; ring. Qed.

Lemma block_factor_mono : forall b b', (b <= b')%nat -> block_factor b <= block_factor b'.
Proof.
  intros b b' H; unfold block_factor; apply Rmult_le_compat_l; [lra |].
  apply Rle_pow; lra || lia.
Qed.

Lemma block_factor_le_stream : forall b n,
  (b <= 2 * n)%nat -> (1 <= n)%nat -> block_factor b <= stream_factor n.
Proof.
  intros b n Hb Hn; unfold block_factor, stream_factor.
  rewrite Rmult_comm; apply Rmult_le_compat; try (apply pow_le; lra); try lra.
  - apply Rle_pow; lra || lia.
  - rewrite <- (pow_1 (1 + ue)) at 1; apply Rle_pow; lra || lia.
Qed.

Lemma exp_shift_err_nonneg : u < 1 -> 0 <= exp_shift_err.
Proof.
  intros Hu; unfold exp_shift_err, Rdiv.
  apply Rmult_le_pos; [apply Rmult_le_pos; [lra | left; apply Rinv_0_lt_compat; lra] |].
  left; apply exp_pos.
Qed.

Lemma stream_beta_nonneg : u < 1 -> forall n, 0 <= stream_beta n.
Proof.
  intros Hu n; unfold stream_beta.
  pose proof (stream_factor_ge_1 n); pose proof (exp_shift_err_nonneg Hu); pose proof (pos_INR n).
  assert (0 <= INR n * exp_shift_err) by (apply Rmult_le_pos; lra).
  nra.
Qed.

Lemma stream_err_nonneg : forall n, u < 1 -> stream_beta n < 1 -> 0 <= stream_err n.
Proof.
  intros n Hu Hb; unfold stream_err, Rdiv; pose proof (stream_beta_nonneg Hu n).
  apply Rmult_le_pos; [nra | left; apply Rinv_0_lt_compat; lra].
Qed.

(** A weight computed from an exponent [y] that is within [u |x|] of the
    exact exponent [x <= 0] is within [u / ((1-u) e)] of [exp x]. *)
Lemma exp_shift_err_bound : forall x y,
  u < 1 -> x <= 0 -> Rabs (y - x) <= u * (- x) -> Rabs (exp y - exp x) <= exp_shift_err.
Proof.
  intros x y Hu Hx Hy.
  set (D := - x).
  assert (HD : 0 <= D) by (unfold D; lra).
  (* exp (-(1-u) D) u D <= alpha *)
  assert (Hkey : exp (- ((1 - u) * D)) * (u * D) <= exp_shift_err).
  { unfold exp_shift_err.
    replace (exp (- ((1 - u) * D)) * (u * D))
      with (u / (1 - u) * (((1 - u) * D) * exp (- ((1 - u) * D)))) by (field; lra).
    apply Rmult_le_compat_l; [apply Rmult_le_pos; [lra | left; apply Rinv_0_lt_compat; lra] |].
    apply mul_exp_neg_le. }
  assert (Hup : y <= - ((1 - u) * D)) by (apply Rabs_le_inv' in Hy; unfold D in *; lra).
  assert (Hlo : - ((1 + u) * D) <= y) by (apply Rabs_le_inv' in Hy; unfold D in *; lra).
  assert (E1 : exp (- D) = exp (- ((1 - u) * D)) * exp (- (u * D)))
    by (rewrite <- exp_plus; f_equal; ring).
  assert (E2 : exp (- ((1 + u) * D)) = exp (- D) * exp (- (u * D)))
    by (rewrite <- exp_plus; f_equal; ring).
  pose proof (one_minus_exp_neg_le (u * D)) as Hz.
  assert (exp (- D) <= exp (- ((1 - u) * D))) by (apply exp_le_mono; nra).
  assert (exp y <= exp (- ((1 - u) * D))) by (apply exp_le_mono; exact Hup).
  assert (exp (- ((1 + u) * D)) <= exp y) by (apply exp_le_mono; exact Hlo).
  pose proof (exp_pos (- D)); pose proof (exp_pos (- ((1 - u) * D))).
  replace (exp x) with (exp (- D)) by (unfold D; f_equal; ring).
  apply Rabs_le; split; nra.
Qed.

(** The final normalisation: with [|l_hat - Z| <= beta Z],
    [|a_hat - N| <= beta Z V], [|N| <= Z V], the rounded quotient
    [a_hat / l_hat (1 + d)] is within [(2 beta + u (1 + beta)) / (1 - beta) V]
    of [N / Z]. *)
Lemma div_err : forall lh ah Z N V b d,
  0 < Z -> Rabs (lh - Z) <= b * Z -> Rabs (ah - N) <= V * (b * Z) -> Rabs N <= V * Z ->
  0 <= b < 1 -> 0 <= V -> Rabs d <= u ->
  Rabs (ah / lh * (1 + d) - N / Z) <= (2 * b + u * (1 + b)) / (1 - b) * V.
Proof.
  intros lh ah Z N V b d HZ Hl Ha HN Hb HV Hd.
  apply Rabs_le_inv' in Hl.
  assert (Hlh : (1 - b) * Z <= lh) by lra.
  assert (Hlp : 0 < lh) by nra.
  (* the exact quotient *)
  assert (Hq : Rabs (ah / lh - N / Z) <= 2 * b / (1 - b) * V).
  { apply (Rmult_le_reg_r (lh * Z)); [nra |].
    replace (Rabs (ah / lh - N / Z) * (lh * Z)) with (Rabs ((ah - N) * Z - N * (lh - Z))).
    2: { rewrite <- (Rabs_right (lh * Z)) by nra; rewrite <- Rabs_mult; f_equal; field; lra. }
    eapply Rle_trans; [apply Rabs_triang |]; rewrite Rabs_Ropp, !Rabs_mult.
    rewrite (Rabs_right Z) by lra.
    assert (Rabs (lh - Z) <= b * Z) by (apply Rabs_le; lra).
    assert (Rabs N * Rabs (lh - Z) <= V * Z * (b * Z))
      by (apply Rmult_le_compat; auto using Rabs_pos).
    assert (Rabs (ah - N) * Z <= V * (b * Z) * Z) by (apply Rmult_le_compat_r; lra).
    replace (2 * b / (1 - b) * V * (lh * Z)) with (2 * b * V * Z * (lh / (1 - b))) by (field; lra).
    assert (Z <= lh / (1 - b)) by (apply (Rmult_le_reg_l (1 - b)); [lra |]; field_simplify; lra).
    assert (0 <= 2 * b * V * Z) by (apply Rmult_le_pos; [|lra]; apply Rmult_le_pos; lra).
    nra. }
  (* the size of the computed quotient *)
  assert (Hs : Rabs (ah / lh) <= (1 + b) / (1 - b) * V).
  { unfold Rdiv at 1; rewrite Rabs_mult, Rabs_inv, (Rabs_right lh) by lra.
    apply (Rmult_le_reg_r lh); [lra |].
    rewrite Rmult_assoc, Rinv_l, Rmult_1_r by lra.
    assert (Rabs ah <= V * (1 + b) * Z).
    { replace ah with ((ah - N) + N) by ring.
      eapply Rle_trans; [apply Rabs_triang | nra]. }
    replace ((1 + b) / (1 - b) * V * lh) with (V * (1 + b) * (lh / (1 - b))) by (field; lra).
    assert (Z <= lh / (1 - b)) by (apply (Rmult_le_reg_l (1 - b)); [lra |]; field_simplify; lra).
    assert (0 <= V * (1 + b)) by nra.
    nra. }
  replace (ah / lh * (1 + d) - N / Z) with ((ah / lh - N / Z) + ah / lh * d) by ring.
  eapply Rle_trans; [apply Rabs_triang |]; rewrite Rabs_mult.
  assert (Rabs (ah / lh) * Rabs d <= (1 + b) / (1 - b) * V * u)
    by (apply Rmult_le_compat; auto using Rabs_pos).
  replace ((2 * b + u * (1 + b)) / (1 - b) * V)
    with (2 * b / (1 - b) * V + (1 + b) / (1 - b) * V * u) by (field; lra).
  lra.
Qed.

(** ** The model, one operation at a time *)

Lemma rnd_err : forall x, exists d, Rabs d <= u /\ rnd x = x * (1 + d).
Proof. exact (rnd_ex rnd u u_nonneg rnd_rel). Qed.

Lemma rexp_err : forall x, exists e, Rabs e <= ue /\ rexp x = exp x * (1 + e).
Proof. exact (rexp_ex rexp ue ue_nonneg rexp_rel). Qed.

Lemma nth_vscale_fl : forall k a c, exists d, Rabs d <= u /\
  nth c (vscale fl k a) 0 = k * nth c a 0 * (1 + d).
Proof.
  intros k a; induction a as [|x a IH]; intros c.
  - exists 0; split; [rewrite Rabs_R0; lra | destruct c; simpl; ring].
  - destruct c as [|c]; [|apply IH].
    destruct (rnd_err (k * x)) as [d [Hd E]].
    exists d; split; [exact Hd | simpl; exact E].
Qed.

Lemma nth_vadd_fl : forall a b c, exists d, Rabs d <= u /\
  nth c (vadd fl a b) 0 = (nth c a 0 + nth c b 0) * (1 + d).
Proof.
  induction a as [|x a IH]; intros b c.
  - exists 0; split; [rewrite Rabs_R0; lra | destruct c; simpl; ring].
  - destruct b as [|y b].
    + exists 0; split; [rewrite Rabs_R0; lra | destruct c; simpl; ring].
    + destruct c as [|c]; [|destruct (IH b c) as [d [Hd E]]; exists d; split; [exact Hd | simpl; exact E]].
      destruct (rnd_err (x + y)) as [d [Hd E]].
      exists d; split; [exact Hd | simpl; exact E].
Qed.

Lemma nth_vdiv_fl : forall a k c, exists d, Rabs d <= u /\
  nth c (vdiv fl a k) 0 = nth c a 0 / k * (1 + d).
Proof.
  intros a k; induction a as [|x a IH]; intros c.
  - exists 0; split; [rewrite Rabs_R0; lra | destruct c; simpl; unfold Rdiv; ring].
  - destruct c as [|c]; [|apply IH].
    destruct (rnd_err (x / k)) as [d [Hd E]].
    exists d; split; [exact Hd | simpl; exact E].
Qed.

Lemma vadd_nil_l : forall (b : list R), vadd fl [] b = b.
Proof. reflexivity. Qed.

Lemma key_weight_fl_Some : forall m s v, key_weight fl m (Some s, v) = rexp (rnd (s - m)).
Proof. reflexivity. Qed.

Lemma key_weight_fl_None : forall m (v : list R), key_weight fl m (None, v) = 0.
Proof. reflexivity. Qed.

Lemma fl_add_eq : forall x y, sc_add fl x y = rnd (x + y).
Proof. reflexivity. Qed.

(** ** Sums of perturbed weights

    A witness [mk_wit y g v] stands for the term [exp y * g * v] of a
    computed sum; [good val m F k w] says that it is the term of the key
    [k = (s, v_k)] against the max [m]: [v = val v_k] (the value
    coordinate, or 1 for the sum [l]), [|y - (s - m)| <= u (m - s)] and
    [|g - 1| <= F - 1].  [approx val m F keys x] says that [x] is such a
    sum over the unmasked keys [keys]. *)

Record wit := mk_wit { w_y : R; w_g : R; w_v : R }.

Definition wterm (w : wit) : R := exp (w_y w) * w_g w * w_v w.

Definition wsum (ws : list wit) : R := rsum (map wterm ws).

Definition good (val : list R -> R) (m F : R) (k : R * list R) (w : wit) : Prop :=
  fst k <= m /\ Rabs (w_y w - (fst k - m)) <= u * (m - fst k)
  /\ Rabs (w_g w - 1) <= F - 1 /\ w_v w = val (snd k).

Definition approx (val : list R -> R) (m F : R) (uks : list (R * list R)) (x : R) : Prop :=
  exists ws, Forall2 (good val m F) uks ws /\ x = wsum ws.

Definition one_val : list R -> R := fun _ => 1.

Definition coord_val (c : nat) : list R -> R := fun v => nth c v 0.

Lemma approx_nil : forall val m F, approx val m F [] 0.
Proof. intros val m F; exists []; split; [constructor | reflexivity]. Qed.

Lemma approx_app : forall val m F l1 l2 x1 x2,
  approx val m F l1 x1 -> approx val m F l2 x2 -> approx val m F (l1 ++ l2) (x1 + x2).
Proof.
  intros val m F l1 l2 x1 x2 [ws1 [H1 ->]] [ws2 [H2 ->]].
  exists (ws1 ++ ws2); split; [apply Forall2_app; assumption |].
  unfold wsum; rewrite map_app, rsum_app; reflexivity.
Qed.

Lemma approx_weaken : forall val m F F' l x,
  F <= F' -> approx val m F l x -> approx val m F' l x.
Proof.
  intros val m F F' l x HF [ws [Hws ->]]; exists ws; split; [|reflexivity].
  induction Hws as [|k w l ws Hkw Hws IH]; constructor; [|exact IH].
  destruct Hkw as (H1 & H2 & H3 & H4); repeat split; auto; lra.
Qed.

(** Rescaling a sum by [exp ya * g]: the max moves from [m] to [m'] with
    [ya] within [u (m' - m)] of [m - m'], and the factors multiply. *)
Lemma approx_shift : forall val m m' F G F' l x ya g,
  approx val m F l x -> m <= m' -> Rabs (ya - (m - m')) <= u * (m' - m) ->
  Rabs (g - 1) <= G - 1 -> F * G <= F' ->
  approx val m' F' l (exp ya * g * x).
Proof.
  intros val m m' F G F' l x ya g [ws [Hws ->]] Hm Hya Hg HF.
  exists (map (fun w => mk_wit (w_y w + ya) (w_g w * g) (w_v w)) ws); split.
  - induction Hws as [|k w l ws Hkw Hws IH]; simpl; constructor; [|exact IH].
    destruct Hkw as (H1 & H2 & H3 & H4); unfold good; cbn [w_y w_g w_v]; repeat split.
    + lra.
    + replace (w_y w + ya - (fst k - m'))
        with ((w_y w - (fst k - m)) + (ya - (m - m'))) by ring.
      replace (u * (m' - fst k)) with (u * (m - fst k) + u * (m' - m)) by ring.
      eapply Rle_trans; [apply Rabs_triang | lra].
    + eapply Rle_trans; [apply factor_mul; eassumption | lra].
    + exact H4.
  - unfold wsum; rewrite map_map, <- rsum_map_scal_l; apply rsum_map_ext.
    intros w _; unfold wterm; simpl; rewrite exp_plus; ring.
Qed.

Lemma approx_scale : forall val m F G F' l x g,
  approx val m F l x -> Rabs (g - 1) <= G - 1 -> F * G <= F' ->
  approx val m F' l (g * x).
Proof.
  intros val m F G F' l x g Hx Hg HF.
  replace (g * x) with (exp 0 * g * x) by (rewrite exp_0; ring).
  apply (approx_shift val m m F G); auto; [lra |].
  replace (0 - (m - m)) with 0 by ring; rewrite Rabs_R0; lra.
Qed.

(** The term of one unmasked key: [rexp (rnd (s - m)) * g * val v]. *)
Lemma approx_key : forall val m F s v g G,
  s <= m -> Rabs (g - 1) <= G - 1 -> (1 + ue) * G <= F ->
  approx val m F [(s, v)] (rexp (rnd (s - m)) * g * val v).
Proof.
  intros val m F s v g G Hs Hg HF.
  destruct (rnd_err (s - m)) as [d [Hd Ed]].
  destruct (rexp_err (rnd (s - m))) as [e [He Ee]].
  exists [mk_wit (rnd (s - m)) ((1 + e) * g) (val v)]; split.
  - constructor; [|constructor]; unfold good; cbn [w_y w_g w_v fst snd]; repeat split.
    + exact Hs.
    + rewrite Ed; replace ((s - m) * (1 + d) - (s - m)) with ((s - m) * d) by ring.
      rewrite Rabs_mult, Rabs_left1 by lra.
      replace (u * (m - s)) with (- (s - m) * u) by ring.
      apply Rmult_le_compat_l; lra.
    + eapply Rle_trans; [apply factor_mul; [apply factor_one; exact He | exact Hg] | lra].
  - unfold wsum, wterm, rsum; simpl; rewrite Ee; ring.
Qed.

(** ** One tile *)

Lemma block_factor_1 : (1 + ue) * (1 + u) <= block_factor 1.
Proof. unfold block_factor; simpl; lra. Qed.

Lemma block_factor_2 : (1 + ue) * ((1 + u) * (1 + u)) <= block_factor 2.
Proof. unfold block_factor; simpl; lra. Qed.

Lemma sum_fold_approx : forall m blk pre acc i,
  (forall k, In k (unmasked blk) -> fst k <= m) ->
  approx one_val m (block_factor i) pre acc ->
  approx one_val m (block_factor (i + length blk)) (pre ++ unmasked blk)
    (fold_left (sc_add fl) (map (key_weight fl m) blk) acc).
Proof.
  intros m blk; induction blk as [|[[s|] v] blk IH]; intros pre acc i Hb Hacc.
  - simpl; rewrite app_nil_r, Nat.add_0_r; exact Hacc.
  - rewrite unmasked_cons_Some in *; cbn [map fold_left length].
    replace (i + S (length blk))%nat with (S i + length blk)%nat by lia.
    replace (pre ++ (s, v) :: unmasked blk) with ((pre ++ [(s, v)]) ++ unmasked blk)
      by (rewrite <- app_assoc; reflexivity).
    apply IH; [intros k Hk; apply Hb; right; exact Hk |].
    rewrite fl_add_eq, key_weight_fl_Some.
    destruct (rnd_err (acc + rexp (rnd (s - m)))) as [d [Hd ->]].
    replace ((acc + rexp (rnd (s - m))) * (1 + d))
      with ((1 + d) * acc + rexp (rnd (s - m)) * (1 + d) * one_val v) by (unfold one_val; ring).
    apply approx_app.
    + apply (approx_scale _ _ (block_factor i) (1 + u)); [exact Hacc | apply factor_one, Hd |].
      rewrite block_factor_S; lra.
    + apply (approx_key _ _ _ _ _ _ (1 + u)); [apply (Hb (s, v)); left; reflexivity | apply factor_one, Hd |].
      eapply Rle_trans; [apply block_factor_1 | apply block_factor_mono; lia].
  - rewrite unmasked_cons_None in *; cbn [map fold_left length].
    replace (i + S (length blk))%nat with (S i + length blk)%nat by lia.
    apply IH; [exact Hb |].
    rewrite fl_add_eq, key_weight_fl_None.
    destruct (rnd_err (acc + 0)) as [d [Hd ->]].
    replace ((acc + 0) * (1 + d)) with ((1 + d) * acc) by ring.
    apply (approx_scale _ _ (block_factor i) (1 + u)); [exact Hacc | apply factor_one, Hd |].
    rewrite block_factor_S; lra.
Qed.

(** The sum [l] of a tile against the max [m]. *)
Lemma sum_block_approx : forall m blk,
  (forall k, In k (unmasked blk) -> fst k <= m) ->
  approx one_val m (block_factor (length blk)) (unmasked blk)
    (sc_sum fl (map (key_weight fl m) blk)).
Proof.
  intros m blk Hb; unfold sc_sum.
  apply (sum_fold_approx m blk [] 0 0 Hb), approx_nil.
Qed.

Lemma acc_fold_approx : forall c m blk pre acc i,
  (1 <= i)%nat ->
  (forall k, In k (unmasked blk) -> fst k <= m) ->
  approx (coord_val c) m (block_factor i) pre (nth c acc 0) ->
  approx (coord_val c) m (block_factor (i + length blk)) (pre ++ unmasked blk)
    (nth c (fold_left (fun acc wv => vadd fl acc (vscale fl (fst wv) (snd wv)))
              (map (fun k => (key_weight fl m k, snd k)) blk) acc) 0).
Proof.
  intros c m blk; induction blk as [|[[s|] v] blk IH]; intros pre acc i Hi Hb Hacc.
  - simpl; rewrite app_nil_r, Nat.add_0_r; exact Hacc.
  - rewrite unmasked_cons_Some in *; cbn [map fold_left length fst snd].
    replace (i + S (length blk))%nat with (S i + length blk)%nat by lia.
    replace (pre ++ (s, v) :: unmasked blk) with ((pre ++ [(s, v)]) ++ unmasked blk)
      by (rewrite <- app_assoc; reflexivity).
    apply IH; [lia | intros k Hk; apply Hb; right; exact Hk |].
    rewrite key_weight_fl_Some.
    destruct (nth_vadd_fl acc (vscale fl (rexp (rnd (s - m))) v) c) as [d [Hd ->]].
    destruct (nth_vscale_fl (rexp (rnd (s - m))) v c) as [d' [Hd' ->]].
    replace ((nth c acc 0 + rexp (rnd (s - m)) * nth c v 0 * (1 + d')) * (1 + d))
      with ((1 + d) * nth c acc 0 + rexp (rnd (s - m)) * ((1 + d') * (1 + d)) * coord_val c v)
      by (unfold coord_val; ring).
    apply approx_app.
    + apply (approx_scale _ _ (block_factor i) (1 + u)); [exact Hacc | apply factor_one, Hd |].
      rewrite block_factor_S; lra.
    + apply (approx_key _ _ _ _ _ _ ((1 + u) * (1 + u))).
      * apply (Hb (s, v)); left; reflexivity.
      * apply factor_mul; apply factor_one; assumption.
      * eapply Rle_trans; [apply block_factor_2 | apply block_factor_mono; lia].
  - rewrite unmasked_cons_None in *; cbn [map fold_left length fst snd].
    replace (i + S (length blk))%nat with (S i + length blk)%nat by lia.
    apply IH; [lia | exact Hb |].
    rewrite key_weight_fl_None.
    destruct (nth_vadd_fl acc (vscale fl 0 v) c) as [d [Hd ->]].
    destruct (nth_vscale_fl 0 v c) as [d' [_ ->]].
    replace ((nth c acc 0 + 0 * nth c v 0 * (1 + d')) * (1 + d)) with ((1 + d) * nth c acc 0) by ring.
    apply (approx_scale _ _ (block_factor i) (1 + u)); [exact Hacc | apply factor_one, Hd |].
    rewrite block_factor_S; lra.
Qed.

(** Coordinate [c] of the accumulator [acc] of a tile against the max [m]. *)
Lemma acc_block_approx : forall c m blk,
  (forall k, In k (unmasked blk) -> fst k <= m) ->
  approx (coord_val c) m (block_factor (length blk)) (unmasked blk)
    (nth c (weighted_sum fl (map (key_weight fl m) blk) (map snd blk)) 0).
Proof.
  intros c m blk Hb; unfold weighted_sum; rewrite combine_map_map.
  destruct blk as [|[[s|] v] blk].
  - destruct c; apply approx_nil.
  - rewrite unmasked_cons_Some in *; cbn [map fold_left fst snd length].
    rewrite vadd_nil_l.
    apply (acc_fold_approx c m blk [(s, v)] _ 1); [lia | intros k Hk; apply Hb; right; exact Hk |].
    rewrite key_weight_fl_Some.
    destruct (nth_vscale_fl (rexp (rnd (s - m))) v c) as [d [Hd ->]].
    replace (rexp (rnd (s - m)) * nth c v 0 * (1 + d))
      with (rexp (rnd (s - m)) * (1 + d) * coord_val c v) by (unfold coord_val; ring).
    apply (approx_key _ _ _ _ _ _ (1 + u)); [apply (Hb (s, v)); left; reflexivity | apply factor_one, Hd |].
    apply block_factor_1.
  - rewrite unmasked_cons_None in *; cbn [map fold_left fst snd length].
    rewrite vadd_nil_l.
    apply (acc_fold_approx c m blk [] _ 1); [lia | exact Hb |].
    rewrite key_weight_fl_None.
    destruct (nth_vscale_fl 0 v c) as [d [_ ->]].
    replace (0 * nth c v 0 * (1 + d)) with 0 by ring; apply approx_nil.
Qed.

(** ** The streaming state *)

Lemma omax_fl : forall a b, omax fl a b = omax R_ops a b.
Proof. reflexivity. Qed.

Lemma block_max_fl : forall blk, block_max fl blk = block_max R_ops blk.
Proof. reflexivity. Qed.

Lemma unmasked_app : forall (xs ys : list rkey), unmasked (xs ++ ys) = unmasked xs ++ unmasked ys.
Proof. intros xs ys; unfold unmasked; apply flat_map_app. Qed.

Lemma block_max_None_unmasked : forall (ks : list rkey),
  block_max R_ops ks = None -> unmasked ks = [].
Proof.
  intros ks H; rewrite block_max_unmasked in H.
  destruct (unmasked ks) as [|[s v] rest]; [reflexivity | discriminate].
Qed.

(** Every unmasked score is at most the block max. *)
Lemma block_max_ge : forall (blk : list rkey) M,
  block_max R_ops blk = Some M -> forall k, In k (unmasked blk) -> fst k <= M.
Proof.
  induction blk as [|[[s|] v] blk IH]; intros M H k Hk; [destruct Hk |..].
  - rewrite block_max_cons in H; cbn [fst] in H; rewrite unmasked_cons_Some in Hk.
    destruct (block_max R_ops blk) as [b|] eqn:Eb.
    + rewrite omax_Some in H; injection H as <-.
      destruct Hk as [<- | Hk]; [apply Rmax_l |].
      apply Rle_trans with b; [apply (IH b eq_refl k Hk) | apply Rmax_r].
    + rewrite omax_None_r in H; injection H as <-.
      rewrite (block_max_None_unmasked blk Eb) in Hk.
      destruct Hk as [<- | []]; apply Rle_refl.
  - rewrite block_max_cons in H; cbn [fst] in H; rewrite omax_None_l in H.
    rewrite unmasked_cons_None in Hk; exact (IH M H k Hk).
Qed.

(** The invariant of the computed state after the keys [ks] and [t] tiles'
    worth of operations: the max is the exact max; the sum [l] and
    coordinate [c] of [acc] are sums of perturbed weights of the unmasked
    keys with factors at most [stream_factor t]. *)
Definition err_inv (c t : nat) (ks : list rkey) (st : option (state R)) : Prop :=
  match st with
  | None => block_max R_ops ks = None
  | Some s =>
      block_max R_ops ks = Some (st_max s)
      /\ approx one_val (st_max s) (stream_factor t) (unmasked ks) (st_sum s)
      /\ approx (coord_val c) (st_max s) (stream_factor t) (unmasked ks) (nth c (st_acc s) 0)
  end.

(** Rescaling the old sum by [rexp (rnd (m - m'))] and adding the tile's. *)
Lemma approx_rescale : forall val m m' F Gb F' l1 l2 X Y d1 d2,
  approx val m F l1 X -> approx val m' Gb l2 Y -> m <= m' ->
  Rabs d1 <= u -> Rabs d2 <= u ->
  F * ((1 + ue) * ((1 + u) * (1 + u))) <= F' -> Gb * (1 + u) <= F' ->
  approx val m' F' (l1 ++ l2) ((rexp (rnd (m - m')) * X * (1 + d1) + Y) * (1 + d2)).
Proof.
  intros val m m' F Gb F' l1 l2 X Y d1 d2 HX HY Hm Hd1 Hd2 HF HG.
  destruct (rnd_err (m - m')) as [d0 [Hd0 E0]].
  destruct (rexp_err (rnd (m - m'))) as [e [He Ee]].
  rewrite Ee, E0.
  replace ((exp ((m - m') * (1 + d0)) * (1 + e) * X * (1 + d1) + Y) * (1 + d2))
    with (exp ((m - m') * (1 + d0)) * ((1 + e) * ((1 + d1) * (1 + d2))) * X + (1 + d2) * Y)
    by ring.
  apply approx_app.
  - apply (approx_shift _ m _ F ((1 + ue) * ((1 + u) * (1 + u)))); auto.
    + replace ((m - m') * (1 + d0) - (m - m')) with (- (m' - m) * d0) by ring.
      rewrite Rabs_mult, Rabs_Ropp, (Rabs_right (m' - m)) by lra.
      rewrite Rmult_comm; apply Rmult_le_compat_r; lra.
    + repeat apply factor_mul; apply factor_one; assumption.
  - apply (approx_scale _ _ Gb (1 + u)); auto; apply factor_one; assumption.
Qed.

Lemma stream_factor_step : forall t b,
  stream_factor t * ((1 + ue) * ((1 + u) * (1 + u))) <= stream_factor (t + Nat.max 1 b).
Proof.
  intros t b; rewrite stream_factor_S; apply stream_factor_mono; lia.
Qed.

Lemma block_factor_step : forall t b,
  block_factor b * (1 + u) <= stream_factor (t + Nat.max 1 b).
Proof.
  intros t b; rewrite block_factor_S; apply block_factor_le_stream; lia.
Qed.

Lemma block_factor_first : forall t b,
  block_factor b <= stream_factor (t + Nat.max 1 b).
Proof.
  intros t b; apply Rle_trans with (block_factor b * (1 + u)); [| apply block_factor_step].
  assert (0 <= block_factor b) by (unfold block_factor; apply Rmult_le_pos; [lra | apply pow_le; lra]).
  nra.
Qed.

(** One tile of the computed recurrence keeps the invariant. *)
Lemma block_step_err_inv : forall c t ks st blk,
  err_inv c t ks st -> err_inv c (t + Nat.max 1 (length blk)) (ks ++ blk) (block_step fl st blk).
Proof.
  intros c t ks st blk H; unfold block_step; rewrite omax_fl, block_max_fl.
  destruct st as [s|]; cbn [option_map].
  - destruct H as (Hm & HL & HA).
    (* the new max [m'], at least the old one and every score of the tile *)
    assert (Hnew : exists m', omax R_ops (Some (st_max s)) (block_max R_ops blk) = Some m'
              /\ block_max R_ops (ks ++ blk) = Some m' /\ st_max s <= m'
              /\ forall k, In k (unmasked blk) -> fst k <= m').
    { destruct (block_max R_ops blk) as [b|] eqn:Eb.
      - exists (Rmax (st_max s) b); rewrite omax_Some; split; [reflexivity |].
        rewrite block_max_app, Hm, Eb, omax_Some; split; [reflexivity | split; [apply Rmax_l |]].
        intros k Hk; apply Rle_trans with b; [exact (block_max_ge blk b Eb k Hk) | apply Rmax_r].
      - exists (st_max s); rewrite omax_None_r; split; [reflexivity |].
        rewrite block_max_app, Hm, Eb, omax_None_r; split; [reflexivity | split; [apply Rle_refl |]].
        rewrite (block_max_None_unmasked blk Eb); intros k [].
    }
    destruct Hnew as (m' & Eo & Hm' & Hle & Hb); rewrite Eo.
    cbn [err_inv st_max st_sum st_acc]; split; [exact Hm' |].
    rewrite unmasked_app; split.
    + change (sc_add fl (sc_mul fl (sc_exp fl (sc_sub fl (st_max s) m')) (st_sum s))
               (sc_sum fl (map (key_weight fl m') blk)))
        with (rnd (rnd (rexp (rnd (st_max s - m')) * st_sum s)
                   + sc_sum fl (map (key_weight fl m') blk))).
      destruct (rnd_err (rexp (rnd (st_max s - m')) * st_sum s)) as [d1 [Hd1 ->]].
      destruct (rnd_err (rexp (rnd (st_max s - m')) * st_sum s * (1 + d1)
                         + sc_sum fl (map (key_weight fl m') blk))) as [d2 [Hd2 ->]].
      apply (approx_rescale _ _ _ (stream_factor t) (block_factor (length blk))); auto.
      * apply sum_block_approx, Hb.
      * apply stream_factor_step.
      * apply block_factor_step.
    + change (sc_exp fl (sc_sub fl (st_max s) m')) with (rexp (rnd (st_max s - m'))).
      destruct (nth_vadd_fl (vscale fl (rexp (rnd (st_max s - m'))) (st_acc s))
                  (weighted_sum fl (map (key_weight fl m') blk) (map snd blk)) c) as [d2 [Hd2 ->]].
      destruct (nth_vscale_fl (rexp (rnd (st_max s - m'))) (st_acc s) c) as [d1 [Hd1 ->]].
      apply (approx_rescale _ _ _ (stream_factor t) (block_factor (length blk))); auto.
      * apply acc_block_approx, Hb.
      * apply stream_factor_step.
      * apply block_factor_step.
  - rewrite omax_None_l.
    cbn [err_inv] in H.
    destruct (block_max R_ops blk) as [b|] eqn:Eb; cbn [err_inv st_max st_sum st_acc].
    + pose proof (block_max_ge blk b Eb) as Hb.
      rewrite block_max_app, H, Eb, omax_None_l, unmasked_app, (block_max_None_unmasked ks H).
      split; [reflexivity | split; apply (approx_weaken _ _ (block_factor (length blk)));
        try apply block_factor_first].
      * apply sum_block_approx, Hb.
      * apply acc_block_approx, Hb.
    + rewrite block_max_app, H, Eb; reflexivity.
Qed.

Lemma fold_block_step_err_inv : forall c blocks t ks st,
  err_inv c t ks st ->
  err_inv c (t + tile_count blocks) (ks ++ concat blocks) (fold_left (block_step fl) blocks st).
Proof.
  intros c; induction blocks as [|blk blocks IH]; intros t ks st H; cbn [fold_left concat tile_count fold_right].
  - rewrite Nat.add_0_r, app_nil_r; exact H.
  - rewrite app_assoc, Nat.add_assoc; apply IH, block_step_err_inv, H.
Qed.

(** ** From the invariant to the output *)

Lemma rsum_ge_in : forall xs x, (forall y, In y xs -> 0 <= y) -> In x xs -> x <= rsum xs.
Proof.
  induction xs as [|y xs IH]; intros x H Hx; [destruct Hx |].
  rewrite rsum_cons; destruct Hx as [<- | Hx].
  - assert (0 <= rsum xs) by (apply rsum_nonneg; intros z Hz; apply H; right; exact Hz); lra.
  - assert (0 <= y) by (apply H; left; reflexivity).
    assert (x <= rsum xs) by (apply IH; auto; intros z Hz; apply H; right; exact Hz); lra.
Qed.

(** The exact sum [Z] is at least 1: the max key has weight [exp 0]. *)
Lemma kw_sum_ge_1 : forall keys M, block_max R_ops keys = Some M -> 1 <= kw_sum M keys.
Proof.
  intros keys M H; destruct (block_max_Some_in keys M H) as [v Hv].
  unfold kw_sum; replace 1 with (key_weight R_ops M (Some M, v))
    by (rewrite key_weight_R; cbn [fst]; rewrite Rminus_diag_eq, exp_0; reflexivity).
  apply rsum_ge_in; [| apply in_map, Hv].
  intros y Hy; apply in_map_iff in Hy; destruct Hy as [k [<- _]]; apply key_weight_nonneg.
Qed.

(** The exact output coordinate [N / Z]. *)
Lemma two_pass_coord : forall d c keys M, block_max R_ops keys = Some M ->
  nth c (fst (two_pass R_ops d keys)) 0 = kw_acc M keys c / kw_sum M keys.
Proof.
  intros d c keys M H.
  destruct (stream_correct d [keys]) as [Hc _]; cbn [concat] in Hc; rewrite app_nil_r in Hc.
  rewrite <- (Hc c).
  pose proof (stream_represents [keys]) as Hr; cbn [concat] in Hr; rewrite app_nil_r in Hr.
  destruct (stream R_ops [keys]) as [s|]; cbn [represents] in Hr.
  - destruct Hr as (Hm & Hl & Ha); rewrite Hm in H; injection H as <-.
    cbn [finalize fst]; rewrite nth_vdiv, Ha, Hl; reflexivity.
  - rewrite Hr in H; discriminate.
Qed.

Lemma two_pass_coord_None : forall d c keys, block_max R_ops keys = None ->
  nth c (fst (two_pass R_ops d keys)) 0 = 0.
Proof.
  intros d c keys H; unfold two_pass; rewrite (block_max_None_unmasked keys H).
  apply nth_vzero.
Qed.

Lemma abs_weighted_le : forall val M V (uks : list (R * list R)),
  (forall k, In k uks -> Rabs (val (snd k)) <= V) ->
  Rabs (rsum (map (fun k => exp (fst k - M) * val (snd k)) uks))
  <= V * rsum (map (fun k => exp (fst k - M)) uks).
Proof.
  intros val M V; induction uks as [|k uks IH]; intros H.
  - unfold rsum; simpl; rewrite Rabs_R0; lra.
  - cbn [map]; rewrite !rsum_cons.
    eapply Rle_trans; [apply Rabs_triang |].
    rewrite Rabs_mult, (Rabs_right (exp _)) by (left; apply exp_pos).
    assert (Rabs (val (snd k)) <= V) by (apply H; left; reflexivity).
    assert (exp (fst k - M) * Rabs (val (snd k)) <= exp (fst k - M) * V)
      by (apply Rmult_le_compat_l; [left; apply exp_pos | assumption]).
    assert (Rabs (rsum (map (fun k => exp (fst k - M) * val (snd k)) uks))
            <= V * rsum (map (fun k => exp (fst k - M)) uks))
      by (apply IH; intros k' Hk; apply H; right; exact Hk).
    lra.
Qed.

(** A computed sum against the exact one: relative error [F - 1], plus
    [alpha F] per key from the rounded exponents. *)
Lemma approx_final : forall val M F uks x V,
  u < 1 -> approx val M F uks x ->
  (forall k, In k uks -> Rabs (val (snd k)) <= V) ->
  Rabs (x - rsum (map (fun k => exp (fst k - M) * val (snd k)) uks))
  <= V * ((F - 1) * rsum (map (fun k => exp (fst k - M)) uks)
          + INR (length uks) * exp_shift_err * F).
Proof.
  intros val M F uks x V Hu [ws [Hws ->]].
  induction Hws as [|k w uks ws Hkw Hws IH]; intros HV.
  - unfold wsum, rsum; simpl; rewrite Rminus_0_r, Rabs_R0; lra.
  - destruct Hkw as (H1 & H2 & H3 & H4).
    assert (Hk : Rabs (val (snd k)) <= V) by (apply HV; left; reflexivity).
    assert (IH' := IH (fun k' Hk' => HV k' (or_intror Hk'))).
    unfold wsum in *; cbn [map length]; rewrite !rsum_cons, S_INR.
    unfold wterm at 1; rewrite H4.
    set (e := exp (fst k - M)) in *; set (g := w_g w) in *.
    assert (He : Rabs (exp (w_y w) - e) <= exp_shift_err)
      by (apply exp_shift_err_bound; [exact Hu | lra | replace (- (fst k - M)) with (M - fst k) by ring; exact H2]).
    assert (Hg : Rabs g <= F).
    { replace g with ((g - 1) + 1) at 1 by ring.
      eapply Rle_trans; [apply Rabs_triang |]; rewrite Rabs_R1; lra. }
    assert (He0 : 0 < e) by apply exp_pos.
    assert (HV0 : 0 <= V) by (eapply Rle_trans; [apply Rabs_pos | exact Hk]).
    assert (Hterm : Rabs (exp (w_y w) * g * val (snd k) - e * val (snd k))
                    <= V * ((F - 1) * e + exp_shift_err * F)).
    { replace (exp (w_y w) * g * val (snd k) - e * val (snd k))
        with (val (snd k) * ((exp (w_y w) - e) * g + e * (g - 1))) by ring.
      rewrite Rabs_mult; apply Rmult_le_compat; auto using Rabs_pos.
      eapply Rle_trans; [apply Rabs_triang |]; rewrite !Rabs_mult, (Rabs_right e) by lra.
      assert (Rabs (exp (w_y w) - e) * Rabs g <= exp_shift_err * F)
        by (apply Rmult_le_compat; auto using Rabs_pos).
      assert (e * Rabs (g - 1) <= e * (F - 1)) by (apply Rmult_le_compat_l; lra).
      lra. }
    replace (exp (w_y w) * g * val (snd k) + rsum (map wterm ws)
             - (e * val (snd k) + rsum (map (fun k => exp (fst k - M) * val (snd k)) uks)))
      with ((exp (w_y w) * g * val (snd k) - e * val (snd k))
            + (rsum (map wterm ws) - rsum (map (fun k => exp (fst k - M) * val (snd k)) uks)))
      by ring.
    eapply Rle_trans; [apply Rabs_triang |].
    lra.
Qed.

Lemma length_unmasked : forall (ks : list rkey), (length (unmasked ks) <= length ks)%nat.
Proof.
  induction ks as [|[[s|] v] ks IH];
    [reflexivity | rewrite unmasked_cons_Some | rewrite unmasked_cons_None]; cbn [length]; lia.
Qed.

Lemma length_concat_le : forall blocks, (length (concat blocks) <= tile_count blocks)%nat.
Proof.
  induction blocks as [|blk blocks IH]; cbn [concat tile_count fold_right]; [reflexivity |].
  rewrite app_length; fold (tile_count blocks); lia.
Qed.

(** ** The error bound *)

(** For any tiling [blocks] of a row of keys, every output coordinate [c]
    of the computed streaming softmax is within [stream_err n * V] of the
    exact two-pass softmax, where [n = tile_count blocks] (the number of
    keys when no tile is empty) and [|v_jc| <= V] for every key. *)
Theorem stream_error_bound : forall d c V blocks,
  u < 1 -> stream_beta (tile_count blocks) < 1 -> 0 <= V ->
  (forall k, In k (concat blocks) -> Rabs (nth c (snd k) 0) <= V) ->
  Rabs (nth c (fst (finalize fl d (stream fl blocks))) 0
        - nth c (fst (two_pass R_ops d (concat blocks))) 0)
  <= stream_err (tile_count blocks) * V.
Proof.
  intros d c V blocks Hu Hbeta HV Hv.
  set (n := tile_count blocks) in *.
  pose proof (stream_err_nonneg n Hu Hbeta) as Herr.
  pose proof (stream_beta_nonneg Hu n) as Hb0.
  pose proof (fold_block_step_err_inv c blocks 0 [] None eq_refl) as Hinv.
  cbn [Nat.add app] in Hinv; fold n in Hinv; fold (stream fl blocks) in Hinv.
  destruct (stream fl blocks) as [s|].
  - destruct Hinv as (Hm & HL & HA).
    set (M := st_max s) in *; set (keys := concat blocks) in *.
    rewrite (two_pass_coord d c keys M Hm), kw_acc_unmasked, kw_sum_unmasked.
    cbn [finalize fst].
    destruct (nth_vdiv_fl (st_acc s) (st_sum s) c) as [dd [Hdd ->]].
    set (U := unmasked keys) in *.
    set (Z := rsum (map (fun k => exp (fst k - M)) U)).
    set (N := rsum (map (fun k => exp (fst k - M) * nth c (snd k) 0) U)).
    assert (HZ : 1 <= Z) by (unfold Z, U; rewrite <- kw_sum_unmasked; apply kw_sum_ge_1, Hm).
    assert (HU : INR (length U) <= INR n)
      by (apply le_INR; unfold U; eapply Nat.le_trans; [apply length_unmasked | apply length_concat_le]).
    assert (HvU : forall k, In k U -> Rabs (coord_val c (snd k)) <= V).
    { intros [s' v'] Hk; apply (Hv (Some s', v')).
      unfold U, unmasked in Hk; apply in_flat_map in Hk; destruct Hk as [[[x|] w] [Hin Hk]];
        cbn in Hk; [destruct Hk as [Hk | []]; injection Hk as -> ->; exact Hin | destruct Hk]. }
    pose proof (stream_factor_ge_1 n) as HK.
    pose proof (exp_shift_err_nonneg Hu) as Ha.
    assert (Hslack : INR (length U) * exp_shift_err * stream_factor n <= INR n * exp_shift_err * stream_factor n * Z).
    { assert (0 <= exp_shift_err * stream_factor n) by nra.
      assert (INR (length U) * (exp_shift_err * stream_factor n) <= INR n * (exp_shift_err * stream_factor n))
        by (apply Rmult_le_compat_r; assumption).
      assert (0 <= INR n * exp_shift_err * stream_factor n) by (pose proof (pos_INR n); nra).
      nra. }
    unfold stream_err; apply div_err.
    + lra.
    + pose proof (approx_final one_val M _ U _ 1 Hu HL) as H.
      replace (rsum (map (fun k => exp (fst k - M) * one_val (snd k)) U)) with Z in H
        by (unfold Z, one_val; apply rsum_map_ext; intros k _; ring).
      eapply Rle_trans; [apply H; intros k _; unfold one_val; rewrite Rabs_R1; lra |].
      fold Z; unfold stream_beta; nra.
    + pose proof (approx_final (coord_val c) M _ U _ V Hu HA HvU) as H.
      eapply Rle_trans; [exact H |]; fold Z.
      apply Rmult_le_compat_l; [exact HV | unfold stream_beta; nra].
    + apply (abs_weighted_le (coord_val c)), HvU.
    + lra.
    + exact HV.
    + exact Hdd.
  - cbn [err_inv] in Hinv; rewrite (two_pass_coord_None d c _ Hinv).
    cbn [finalize fst]; change (vzero fl d) with (vzero R_ops d); rewrite nth_vzero.
    rewrite Rminus_0_r, Rabs_R0; apply Rmult_le_pos; assumption.
Qed.

Lemma tile_count_singletons : forall (keys : list rkey),
  tile_count (map (fun k => [k]) keys) = length keys.
Proof. induction keys as [|k keys IH]; cbn; [reflexivity | now rewrite <- IH]. Qed.

Lemma concat_singletons : forall (keys : list rkey), concat (map (fun k => [k]) keys) = keys.
Proof. induction keys as [|k keys IH]; cbn; [reflexivity | now rewrite IH]. Qed.

(** The key-by-key recurrence (tiles of one key) on [n] keys: every output
    coordinate is within [stream_err n * V] of the exact softmax. *)
Theorem stream_keywise_error_bound : forall d c V (keys : list rkey),
  u < 1 -> stream_beta (length keys) < 1 -> 0 <= V ->
  (forall k, In k keys -> Rabs (nth c (snd k) 0) <= V) ->
  Rabs (nth c (fst (finalize fl d (stream fl (map (fun k => [k]) keys)))) 0
        - nth c (fst (two_pass R_ops d keys)) 0)
  <= stream_err (length keys) * V.
Proof.
  intros d c V keys Hu Hb HV Hv.
  rewrite <- (tile_count_singletons keys) in *.
  rewrite <- (concat_singletons keys) at 2.
  apply stream_error_bound; auto; rewrite concat_singletons; exact Hv.
Qed.

Lemma tile_count_chunk_fuel : forall fuel b (xs : list rkey),
  (1 <= b)%nat -> (length xs <= fuel)%nat -> tile_count (chunk_fuel fuel b xs) = length xs.
Proof.
  induction fuel as [|fuel IH]; intros b xs Hb Hl; cbn [chunk_fuel].
  - destruct xs; [reflexivity | cbn [length] in Hl; lia].
  - destruct xs as [|x xs']; [reflexivity |].
    cbn [tile_count fold_right]; fold (tile_count (chunk_fuel fuel b (skipn b (x :: xs')))).
    rewrite IH; [| exact Hb | rewrite skipn_length; cbn [length] in *; lia].
    rewrite skipn_length, firstn_length; cbn [length]; lia.
Qed.

Lemma tile_count_chunk : forall b (keys : list rkey), tile_count (chunk b keys) = length keys.
Proof. intros b keys; unfold chunk; apply tile_count_chunk_fuel; lia. Qed.

(** The streamed row the code runs ([stream_row], tiles of [b] keys) on [n]
    keys: every output coordinate is within [stream_err n * V] of the
    exact two-pass softmax. *)
Theorem stream_row_error_bound : forall b d c V (keys : list rkey),
  u < 1 -> stream_beta (length keys) < 1 -> 0 <= V ->
  (forall k, In k keys -> Rabs (nth c (snd k) 0) <= V) ->
  Rabs (nth c (fst (stream_row fl b d keys)) 0 - nth c (fst (two_pass R_ops d keys)) 0)
  <= stream_err (length keys) * V.
Proof.
  intros b d c V keys Hu Hb HV Hv; unfold stream_row.
  rewrite <- (tile_count_chunk b keys) in *.
  rewrite <- (concat_chunk b keys) at 2.
  apply stream_error_bound; auto; rewrite concat_chunk; exact Hv.
Qed.

End StreamError.

(** ** One attention row, scores included

    The scores the code computes are [scores fl_ops scale q ks]
    ([rnd (scale * dot q k_j)], each dot product rounded as in [FloatModel/DotError.v]);
    the exact row is [two_pass R_ops] on the exact scores.  The error of
    the computed scores moves the exact softmax by at most
    [exp (2 delta) - 1] ([softmax_output_perturbation]), and streaming the
    computed scores adds [stream_err n]. *)
Section AttentionRow.

Variables rnd rexp rln : R -> R.
Variables u ue : R.
Hypothesis u_nonneg : 0 <= u.
Hypothesis ue_nonneg : 0 <= ue.
Hypothesis rnd_rel : forall x, Rabs (rnd x - x) <= u * Rabs x.
Hypothesis rexp_rel : forall x, Rabs (rexp x - exp x) <= ue * exp x.
Hypothesis rnd_idem : forall x, rnd (rnd x) = rnd x.

Local Notation fl := (fl_ops rnd rexp rln).

(** Error of one computed score [rnd (scale * dot q k)], [A >= sum_c |q_c k_c|]. *)
Lemma score_error_bound : forall scale (q k : list R) A,
  length q = length k -> INR (length q) * u < 1 ->
  rsum (map (fun xy => Rabs (fst xy * snd xy)) (combine q k)) <= A ->
  Rabs (sc_mul fl scale (dot fl q k) - sc_mul R_ops scale (dot R_ops q k))
  <= Rabs scale * (gamma u (length q) + u * (1 + gamma u (length q))) * A.
Proof.
  intros scale q k A Hl Hn HA.
  change (sc_mul fl scale (dot fl q k)) with (rnd (scale * dot fl q k)).
  change (sc_mul R_ops scale (dot R_ops q k)) with (scale * dot R_ops q k).
  pose proof (dot_error_bound rnd rexp rln u u_nonneg rnd_rel rnd_idem q k Hl Hn) as Hd.
  set (g := gamma u (length q)) in *.
  set (Sa := rsum (map (fun xy => Rabs (fst xy * snd xy)) (combine q k))) in *.
  assert (Hg : 0 <= g).
  { unfold g, gamma, Rdiv; apply Rmult_le_pos; [apply Rmult_le_pos; [apply pos_INR | exact u_nonneg] |].
    left; apply Rinv_0_lt_compat; lra. }
  assert (HS : 0 <= Sa)
    by (apply rsum_nonneg; intros z Hz; apply in_map_iff in Hz; destruct Hz as [w [<- _]]; apply Rabs_pos).
  assert (HD : Rabs (dot R_ops q k) <= Sa).
  { unfold Sa; rewrite dot_R; clear.
    induction (combine q k) as [|[x y] l IHl]; [unfold rsum; simpl; rewrite Rabs_R0; lra |].
    cbn [map]; rewrite !rsum_cons; eapply Rle_trans; [apply Rabs_triang | cbn [fst snd]; lra]. }
  destruct (rnd_err rnd u u_nonneg rnd_rel (scale * dot fl q k)) as [d [Hdd ->]].
  replace (scale * dot fl q k * (1 + d) - scale * dot R_ops q k)
    with (scale * ((dot fl q k - dot R_ops q k) + dot fl q k * d)) by ring.
  rewrite Rabs_mult, Rmult_assoc; apply Rmult_le_compat_l; [apply Rabs_pos |].
  eapply Rle_trans; [apply Rabs_triang |]; rewrite Rabs_mult.
  assert (Hf : Rabs (dot fl q k) <= (1 + g) * Sa).
  { replace (dot fl q k) with ((dot fl q k - dot R_ops q k) + dot R_ops q k) by ring.
    eapply Rle_trans; [apply Rabs_triang | lra]. }
  assert (Rabs (dot fl q k) * Rabs d <= (1 + g) * Sa * u)
    by (apply Rmult_le_compat; auto using Rabs_pos).
  assert (g * Sa <= g * A) by (apply Rmult_le_compat_l; lra).
  assert ((1 + g) * Sa * u <= (1 + g) * A * u)
    by (apply Rmult_le_compat_r; [lra | apply Rmult_le_compat_l; lra]).
  nra.
Qed.

Lemma nth_map_lt : forall {A B} (f : A -> B) l d d' j,
  (j < length l)%nat -> nth j (map f l) d' = f (nth j l d).
Proof.
  intros A B f l d d' j H; rewrite (nth_indep _ d' (f d)) by (rewrite map_length; exact H).
  apply map_nth.
Qed.

Lemma in_masked_keys_value : forall vis (ss : list R) vs k,
  In k (masked_keys vis ss vs) -> In (snd k) vs.
Proof.
  intros vis ss vs k H; unfold masked_keys in H.
  apply in_map_iff in H; destruct H as [[j [s v]] [<- Hin]].
  apply in_combine_r, in_combine_r in Hin; exact Hin.
Qed.

Lemma masked_keys_length : forall vis (ss : list R) vs,
  length ss = length vs -> length (masked_keys vis ss vs) = length vs.
Proof.
  intros vis ss vs H; unfold masked_keys.
  rewrite map_length, !combine_length, seq_length, H; lia.
Qed.

(** One row of the attention the code runs: the computed row (computed
    scores [rnd (scale * dot q k_j)], streamed in tiles of [b] keys) is
    within [(stream_err n + exp (2 delta) - 1) * V] of the exact attention
    row, with [delta = |scale| (gamma_E + u (1 + gamma_E)) A],
    [A >= sum_c |q_c k_jc|] for every key, [E = length q], [n] keys. *)
Theorem attention_row_error_bound : forall b d c V A scale vis (q : list R) ks vs,
  length ks = length vs -> (1 <= length vs)%nat ->
  (forall k, In k ks -> length k = length q) -> INR (length q) * u < 1 ->
  u < 1 -> stream_beta u ue (length vs) < 1 ->
  (forall j, (j < length vs)%nat -> Rabs (nth c (nth j vs []) 0) <= V) ->
  (forall k, In k ks -> rsum (map (fun xy => Rabs (fst xy * snd xy)) (combine q k)) <= A) ->
  Rabs (nth c (fst (stream_row fl b d (masked_keys vis (scores fl scale q ks) vs))) 0
        - nth c (fst (two_pass R_ops d (masked_keys vis (scores R_ops scale q ks) vs))) 0)
  <= (stream_err u ue (length vs)
      + (exp (2 * (Rabs scale * (gamma u (length q) + u * (1 + gamma u (length q))) * A)) - 1)) * V.
Proof.
  intros b d c V A scale vis q ks vs Hl Hn Hk Hq Hu Hb HV HA.
  set (ss' := scores fl scale q ks); set (ss := scores R_ops scale q ks).
  assert (Hl' : length ss' = length vs) by (unfold ss', scores; rewrite map_length; exact Hl).
  assert (Hl0 : length ss = length vs) by (unfold ss, scores; rewrite map_length; exact Hl).
  assert (HV0 : 0 <= V) by (eapply Rle_trans; [apply Rabs_pos | apply (HV 0%nat); lia]).
  replace (nth c (fst (stream_row fl b d (masked_keys vis ss' vs))) 0
           - nth c (fst (two_pass R_ops d (masked_keys vis ss vs))) 0)
    with ((nth c (fst (stream_row fl b d (masked_keys vis ss' vs))) 0
           - nth c (fst (two_pass R_ops d (masked_keys vis ss' vs))) 0)
          + (nth c (fst (two_pass R_ops d (masked_keys vis ss' vs))) 0
             - nth c (fst (two_pass R_ops d (masked_keys vis ss vs))) 0)) by ring.
  eapply Rle_trans; [apply Rabs_triang |]; rewrite Rmult_plus_distr_r.
  apply Rplus_le_compat.
  - rewrite <- (masked_keys_length vis ss' vs Hl').
    apply (stream_row_error_bound rnd rexp rln u ue u_nonneg ue_nonneg rnd_rel rexp_rel); auto.
    + rewrite masked_keys_length; assumption.
    + intros k Hin; apply in_masked_keys_value in Hin.
      destruct (In_nth vs (snd k) [] Hin) as [j [Hj <-]]; apply HV, Hj.
  - apply softmax_output_perturbation; auto.
    intros j Hj; unfold ss', ss, scores.
    assert (Hj' : (j < length ks)%nat) by lia.
    rewrite !(nth_map_lt _ ks [] 0 j Hj').
    assert (Hin : In (nth j ks []) ks) by (apply nth_In; exact Hj').
    apply score_error_bound; auto.
    symmetry; apply Hk, Hin.
Qed.

End AttentionRow.
