(** * Rounding-error bound of the chunked log-sum-exp.

    The chunked lse is run with the rounding model of [FloatModel/NoUnderflow.v]
    ([fl_ops]: every [+ - * /] rounded with relative error [u], the
    exponential with relative error [ue], the logarithm with absolute
    error [ul] on [[1/2, Lmax]], the max exact), i.e. literally
    [chunked_lse fl_ops], the definition the oracle runs.  The invariant
    of [Attention/StreamError.v] (a vocabulary chunk is a key tile with
    empty value rows) bounds the computed sum [l] against the exact
    [Z = sum_v exp (z_v - M)]: [|l - Z| <= beta Z] with
    [beta = stream_beta u ue n], [n] the tile count (the vocabulary size
    when no chunk is empty).  Then, with [L = ln (sum_v exp z_v)],

      |fl (M + ln l) - L| <= u |L| + (1 + u) (ul - ln (1 - beta)).

    The logarithm is only assumed accurate on [[1/2, Lmax]]: no
    float32-valued log is within a fixed absolute error of [ln x] for every
    [x > 0] (the float32 gaps grow with [|ln x|]).  The theorems carry the
    range of the computed sum: [1 <= Z <= n] (the max key has weight 1,
    every weight is at most 1), so [beta <= 1/2] and [(1 + beta) n <= Lmax]
    put [l] in [[1/2, Lmax]].

    As in [FloatModel/NoUnderflow.v], underflow and overflow are not covered. *)

From Coq Require Import Reals List Lra Lia Arith.
From Ojas Require Import ScalarOps Vector VectorFacts FloatModel.NoUnderflow Attention.OnlineSoftmax
  Attention.StreamCorrect Attention.StreamError LinearCrossEntropy.Definitions
  LinearCrossEntropy.ChunkedLse LinearCrossEntropy.Loss.
Import ListNotations.
Open Scope R_scope.

Lemma ln_le_mono : forall x y, 0 < x -> x <= y -> ln x <= ln y.
Proof.
  intros x y Hx [H|H]; [left; apply ln_increasing; assumption|rewrite H; lra].
Qed.

(** A relative error [b] on a positive number is an absolute error
    [- ln (1 - b)] on its logarithm. *)
Lemma ln_rel_err : forall a Z b,
  0 < Z -> 0 <= b < 1 -> Rabs (a - Z) <= b * Z ->
  0 < a /\ Rabs (ln a - ln Z) <= - ln (1 - b).
Proof.
  intros a Z b HZ Hb Ha.
  assert (Hlo : (1 - b) * Z <= a) by (unfold Rabs in Ha; destruct (Rcase_abs (a - Z)); nra).
  assert (Hhi : a <= (1 + b) * Z) by (unfold Rabs in Ha; destruct (Rcase_abs (a - Z)); nra).
  assert (Ha0 : 0 < a) by nra.
  split; [exact Ha0|].
  assert (H1 : ln ((1 - b) * Z) <= ln a) by (apply ln_le_mono; [nra|exact Hlo]).
  assert (H2 : ln a <= ln ((1 + b) * Z)) by (apply ln_le_mono; [exact Ha0|exact Hhi]).
  rewrite ln_mult in H1, H2 by lra.
  assert (H3 : ln (1 + b) + ln (1 - b) <= 0).
  { rewrite <- ln_mult by lra; rewrite <- ln_1; apply ln_le_mono; nra. }
  apply Rabs_le; lra.
Qed.

(** The exact sum [Z = sum_k exp (s_k - M)] over scores at most [M] is at
    most the number of terms. *)
Lemma rsum_exp_le_length : forall M (uks : list (R * list R)),
  (forall k, In k uks -> fst k <= M) -> rsum (map (fun k => exp (fst k - M)) uks) <= INR (length uks).
Proof.
  intros M; induction uks as [|k uks IH]; intros H.
  - unfold rsum; simpl; lra.
  - cbn [map length]; rewrite rsum_cons, S_INR.
    assert (Hk : exp (fst k - M) <= 1).
    { assert (Hle : fst k - M <= 0) by (pose proof (H k (or_introl eq_refl)); lra).
      rewrite <- exp_0; destruct Hle as [Hl|Hl]; [left; apply exp_increasing, Hl | rewrite Hl; lra]. }
    assert (rsum (map (fun k => exp (fst k - M)) uks) <= INR (length uks))
      by (apply IH; intros k' Hk'; apply H; right; exact Hk').
    lra.
Qed.

Section LseError.

Variables rnd rexp rln : R -> R.
Variables u ue ul Lmax : R.
Hypothesis u_nonneg : 0 <= u.
Hypothesis ue_nonneg : 0 <= ue.
Hypothesis rnd_rel : forall x, Rabs (rnd x - x) <= u * Rabs x.
Hypothesis rexp_rel : forall x, Rabs (rexp x - exp x) <= ue * exp x.
(** Absolute error of the computed logarithm on the range [[1/2, Lmax]]
    of the computed row sum. *)
Hypothesis rln_abs : forall x, / 2 <= x <= Lmax -> Rabs (rln x - ln x) <= ul.

Local Notation fl := (fl_ops rnd rexp rln).

(** The chunked lse computed in the rounding model, for any cut of the
    vocabulary into chunks, is within [u |L| + (1 + u) (ul - ln (1 - beta))]
    of the exact [L = ln (sum_v exp z_v)], [beta = stream_beta u ue n] and
    [n] the tile count of the chunks, when [beta <= 1/2] and
    [(1 + beta) n <= Lmax] (the computed sum then lies in [[1/2, Lmax]]). *)
Theorem chunked_lse_error_bound : forall zchunks : list (list (nat * R)),
  concat zchunks <> [] -> u < 1 ->
  stream_beta u ue (tile_count (map lse_keys zchunks)) <= / 2 ->
  (1 + stream_beta u ue (tile_count (map lse_keys zchunks))) * INR (tile_count (map lse_keys zchunks)) <= Lmax ->
  exists L', chunked_lse fl zchunks = Some L'
    /\ Rabs (L' - lse_R (concat zchunks))
       <= u * Rabs (lse_R (concat zchunks))
          + (1 + u) * (ul - ln (1 - stream_beta u ue (tile_count (map lse_keys zchunks)))).
Proof.
  intros zchunks Hne Hu.
  set (n := tile_count (map lse_keys zchunks)); set (b := stream_beta u ue n); intros Hb HLmax.
  pose proof (fold_block_step_err_inv rnd rexp rln u ue u_nonneg ue_nonneg rnd_rel rexp_rel
                0 (map lse_keys zchunks) 0 [] None eq_refl) as Hinv.
  cbn [Nat.add app] in Hinv; fold n in Hinv; fold (stream fl (map lse_keys zchunks)) in Hinv.
  rewrite concat_lse_keys in Hinv.
  set (zs := concat zchunks) in *; set (keys := lse_keys zs) in *.
  unfold chunked_lse.
  destruct (stream fl (map lse_keys zchunks)) as [s|] eqn:E.
  2: { cbn [err_inv] in Hinv; destruct (block_max_lse_keys_Some zs Hne) as [M HM].
       unfold keys in Hinv; congruence. }
  destruct Hinv as (Hm & HL & _).
  set (M := st_max s) in *; set (U := unmasked keys).
  set (Z := rsum (map (fun k => exp (fst k - M)) U)).
  assert (HZ : 1 <= Z) by (unfold Z, U; rewrite <- kw_sum_unmasked; apply kw_sum_ge_1, Hm).
  assert (HU : INR (length U) <= INR n)
    by (apply le_INR; unfold U, keys, zs; eapply Nat.le_trans; [apply length_unmasked|];
        rewrite <- concat_lse_keys; apply length_concat_le).
  pose proof (stream_factor_ge_1 u ue u_nonneg ue_nonneg n) as HK.
  pose proof (exp_shift_err_nonneg u u_nonneg Hu) as Ha.
  pose proof (stream_beta_nonneg u ue u_nonneg ue_nonneg Hu n) as Hb0; fold b in Hb0.
  (* the computed sum [l] against [Z] *)
  assert (Hl : Rabs (st_sum s - Z) <= b * Z).
  { pose proof (approx_final u u_nonneg one_val M _ U _ 1 Hu HL) as H.
    replace (rsum (map (fun k => exp (fst k - M) * one_val (snd k)) U)) with Z in H
      by (unfold Z, one_val; apply rsum_map_ext; intros k _; ring).
    eapply Rle_trans; [apply H; intros k _; unfold one_val; rewrite Rabs_R1; lra|].
    assert (Hslack : INR (length U) * exp_shift_err u * stream_factor u ue n
                     <= INR n * exp_shift_err u * stream_factor u ue n * Z).
    { assert (0 <= exp_shift_err u * stream_factor u ue n) by nra.
      assert (INR (length U) * (exp_shift_err u * stream_factor u ue n)
              <= INR n * (exp_shift_err u * stream_factor u ue n))
        by (apply Rmult_le_compat_r; assumption).
      assert (0 <= INR n * exp_shift_err u * stream_factor u ue n) by (pose proof (pos_INR n); nra).
      nra. }
    fold Z; unfold b, stream_beta; nra. }
  destruct (ln_rel_err (st_sum s) Z b) as [Hl0 Hln]; [lra|lra|exact Hl|].
  (* the computed sum lies in [[1/2, Lmax]] *)
  assert (HZn : Z <= INR n).
  { eapply Rle_trans; [apply rsum_exp_le_length|exact HU].
    intros k Hk; apply (block_max_ge keys M Hm k Hk). }
  assert (Hrange : / 2 <= st_sum s <= Lmax).
  { assert (Hup : st_sum s - Z <= b * Z /\ Z - st_sum s <= b * Z)
      by (unfold Rabs in Hl; destruct (Rcase_abs (st_sum s - Z)); split; lra).
    split; nra. }
  (* the exact lse *)
  assert (HL' : M + ln Z = lse_R zs).
  { unfold Z, U; rewrite <- kw_sum_unmasked; unfold keys; rewrite kw_sum_lse_keys.
    apply lse_R_shift, Hne. }
  exists (rnd (M + rln (st_sum s))); split; [reflexivity|].
  rewrite <- HL'.
  pose proof (rln_abs (st_sum s) Hrange) as Hr.
  set (y := M + rln (st_sum s)); set (L := M + ln Z).
  assert (Hy : Rabs (y - L) <= ul - ln (1 - b)).
  { unfold y, L; replace (M + rln (st_sum s) - (M + ln Z))
      with ((rln (st_sum s) - ln (st_sum s)) + (ln (st_sum s) - ln Z)) by ring.
    eapply Rle_trans; [apply Rabs_triang|lra]. }
  assert (Hyy : Rabs y <= Rabs L + Rabs (y - L))
    by (replace y with (L + (y - L)) at 1 by ring; apply Rabs_triang).
  pose proof (rnd_rel y) as Hry.
  replace (rnd y - L) with ((rnd y - y) + (y - L)) by ring.
  eapply Rle_trans; [apply Rabs_triang|].
  assert (u * Rabs y <= u * (Rabs L + (ul - ln (1 - b)))) by (apply Rmult_le_compat_l; lra).
  nra.
Qed.

(** The vocabulary cut into chunks of [bv] entries (as the code does):
    [n] is the vocabulary size. *)
Theorem chunk_lse_error_bound : forall bv (zs : list (nat * R)),
  zs <> [] -> u < 1 -> stream_beta u ue (length zs) <= / 2 ->
  (1 + stream_beta u ue (length zs)) * INR (length zs) <= Lmax ->
  exists L', chunked_lse fl (chunk bv zs) = Some L'
    /\ Rabs (L' - lse_R zs) <= u * Rabs (lse_R zs) + (1 + u) * (ul - ln (1 - stream_beta u ue (length zs))).
Proof.
  intros bv zs Hne Hu Hb HLmax.
  assert (Hn : tile_count (map lse_keys (chunk bv zs)) = length zs).
  { unfold lse_keys; rewrite <- chunk_map, tile_count_chunk, map_length; reflexivity. }
  pose proof (chunked_lse_error_bound (chunk bv zs)) as H.
  rewrite concat_chunk, Hn in H; apply H; assumption.
Qed.

End LseError.
