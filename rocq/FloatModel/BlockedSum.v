(** * Blocked summation as the kernels run it, and the fp32-accumulated dot product.

    In one [FloatFormat] [F] (MixedPrecision.v; for the kernels, fp32) with
    rounding [rnd] and unit roundoff [u]:

    - [tile_sum xs]: one tile summed left to right from 0,
      [acc := rnd (acc + x)];
    - [blocked_sum_with ts tiles]: the running combination across tiles,
      [acc := rnd (acc + ts tile)] from 0, for any tile-local summation [ts];
      [blocked_sum := blocked_sum_with tile_sum].

    Main results (all terms numbers of the format: no underflow premise is
    needed, because a sum of two numbers of the format has a purely
    relative error, Flocq's [FLT_plus_error_N_ex]; overflow: see
    MixedPrecision.v):

    - [blocked_sum_error_bound]: [t] tiles of at most [b >= 1] terms,
        |blocked_sum tiles - sum x| <= gamma u ((b - 1) + (t - 1)) * sum |x|
      under [((b - 1) + (t - 1)) u < 1], [gamma u k = k u / (1 - k u)]
      (FloatModel/DotError.v).  This is [gamma (b + t - 2)] for [t >= 1]: the first
      term of a tile and the first tile sum are added to an exact 0, which
      is exact.  Left-to-right summation of the [n = b t] terms would give
      [gamma (n - 1)].
    - [blocked_sum_with_error_bound]: the same for any tile-local
      summation [ts] whose results are numbers of the format within
      [((1 + u)^D - 1) sum |x|] of the exact tile sums (e.g. a reduction
      tree of depth [D], as [tl.sum] is): [gamma (D + (t - 1))].
    - [blocked_tree_sum_error_bound]: tile-local sums by reduction trees
      of depth at most [D] (a pairwise reduction of [2^k] terms has depth
      [k]): [gamma (D + (t - 1))].
    - [chunked_sum_error_bound]: the terms cut by [chunk b] (the kernels'
      key tiles; OnlineSoftmax.v) into [t = length (chunk b xs)] tiles;
      [chunked_sum_error_bound_t]: the same with any [t >= 1], [n <= t b].
    - [blocked_sum_skip_zero_tiles]: dropping any tiles whose terms are all
      exactly 0 (fully masked key tiles: [exp2 (-inf) = 0]) leaves the
      computed sum unchanged, bit for bit: the kernel's tile skipping is exact.
    - [blocked_dot_error_bound]: [sum_i a_i b_i] with each product rounded
      to the accumulation format (exact when the product is a number of it)
      and summed blocked:
        |dot_computed - dot| <= gamma u ((b - 1) + (t - 1)) * sum |a_i b_i|;
      [bf16_blocked_dot_error_bound] / [fp16_blocked_dot_error_bound]: bf16
      or fp16 operands, fp32 accumulation ([u = 2^-24]), the products exact
      by [bf16_mul_fp32] (premise: each product 0 or at least [2^-134] in
      magnitude) and [fp16_mul_fp32] (no premise).
      [blocked_dot_error_bound_rounded]: no premise on the products, each
      rounded to the format (absolute term [eta] for underflow):
      [gamma (k + 1) sum |a_i b_i| + (1 + gamma k) n eta].

    Not modelled here: the order of additions inside a tensor-core MMA (the
    dot is taken as tile-local sums, then the running combination), the
    rescaling [acc * alpha] of the online softmax between tiles. *)

From Coq Require Import Reals List Lra Lia Arith.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.NoUnderflow FloatModel.DotError Attention.OnlineSoftmax.
From Ojas Require Import Attention.StreamCorrect FloatModel.MixedPrecision.
Import ListNotations.
Open Scope R_scope.

Section BlockedSum.

Variable F : FloatFormat.

Local Notation fmt := (ff_fmt F).
Local Notation rnd := (ff_rnd F).
Local Notation u := (ff_u F).

Definition tile_sum (xs : list R) : R := fold_left (fun acc x => rnd (acc + x)) xs 0.

Definition blocked_sum_with (ts : list R -> R) (tiles : list (list R)) : R :=
  fold_left (fun acc tl => rnd (acc + ts tl)) tiles 0.

Definition blocked_sum (tiles : list (list R)) : R := blocked_sum_with tile_sum tiles.

Definition abs_sum (xs : list R) : R := rsum (map Rabs xs).

(** ** Closeness with a factor: [|x - X| <= (G - 1) Sa] *)

Definition close (G x X Sa : R) : Prop := Rabs (x - X) <= (G - 1) * Sa.

Lemma abs_sum_nonneg : forall xs, 0 <= abs_sum xs.
Proof.
  intros xs; apply rsum_nonneg; intros z Hz; apply in_map_iff in Hz.
  destruct Hz as [w [<- _]]; apply Rabs_pos.
Qed.

Lemma rsum_abs_le : forall xs, Rabs (rsum xs) <= abs_sum xs.
Proof.
  induction xs as [|x xs IH]; unfold abs_sum in *; cbn [map].
  - unfold rsum; simpl; rewrite Rabs_R0; lra.
  - rewrite !rsum_cons; eapply Rle_trans; [apply Rabs_triang | lra].
Qed.

Lemma abs_sum_cons : forall x xs, abs_sum (x :: xs) = Rabs x + abs_sum xs.
Proof. intros; unfold abs_sum; cbn [map]; apply rsum_cons. Qed.

Lemma abs_sum_app : forall xs ys, abs_sum (xs ++ ys) = abs_sum xs + abs_sum ys.
Proof. intros; unfold abs_sum; rewrite map_app; apply rsum_app. Qed.

Lemma close_mono : forall G G' x X Sa, 0 <= Sa -> G <= G' -> close G x X Sa -> close G' x X Sa.
Proof. intros G G' x X Sa HS HG H; unfold close in *; nra. Qed.

Lemma one_le_pow_u : forall k, 1 <= (1 + u) ^ k.
Proof. intros k; apply pow_R1_Rle; pose proof (ff_u_nonneg F); lra. Qed.

Lemma pow_u_mono : forall k k', (k <= k')%nat -> (1 + u) ^ k <= (1 + u) ^ k'.
Proof. intros k k' H; apply Rle_pow; [pose proof (ff_u_nonneg F); lra | exact H]. Qed.

(** One rounded addition of two numbers of the format. *)
Lemma close_step : forall G H a A Sa y Y Ta,
  1 <= G -> 1 <= H -> fmt a -> fmt y -> Rabs A <= Sa -> Rabs Y <= Ta ->
  close G a A Sa -> close H y Y Ta ->
  close (Rmax G H * (1 + u)) (rnd (a + y)) (A + Y) (Sa + Ta).
Proof.
  intros G H a A Sa y Y Ta HG HH Fa Fy HA HY Ca Cy.
  pose proof (ff_u_nonneg F) as Hu.
  destruct (rel_err_ex (a + y) (rnd (a + y)) u Hu (ff_add F a y Fa Fy)) as [d [Hd E]].
  rewrite E; unfold close in *.
  assert (HS : 0 <= Sa) by (eapply Rle_trans; [apply Rabs_pos | exact HA]).
  assert (HT : 0 <= Ta) by (eapply Rle_trans; [apply Rabs_pos | exact HY]).
  set (M := Rmax G H).
  assert (HGM : G <= M) by apply Rmax_l.
  assert (HHM : H <= M) by apply Rmax_r.
  replace ((a + y) * (1 + d) - (A + Y))
    with ((a - A) * (1 + d) + (y - Y) * (1 + d) + (A + Y) * d) by ring.
  assert (H1d : Rabs (1 + d) <= 1 + u).
  { eapply Rle_trans; [apply Rabs_triang |]; rewrite Rabs_R1; lra. }
  assert (E1 : Rabs ((a - A) * (1 + d)) <= (G - 1) * Sa * (1 + u))
    by (rewrite Rabs_mult; apply Rmult_le_compat; auto using Rabs_pos).
  assert (E2 : Rabs ((y - Y) * (1 + d)) <= (H - 1) * Ta * (1 + u))
    by (rewrite Rabs_mult; apply Rmult_le_compat; auto using Rabs_pos).
  assert (HAY : Rabs (A + Y) <= Sa + Ta)
    by (eapply Rle_trans; [apply Rabs_triang | lra]).
  assert (E3 : Rabs ((A + Y) * d) <= (Sa + Ta) * u)
    by (rewrite Rabs_mult; apply Rmult_le_compat; auto using Rabs_pos).
  pose proof (Rabs_triang ((a - A) * (1 + d) + (y - Y) * (1 + d)) ((A + Y) * d)).
  pose proof (Rabs_triang ((a - A) * (1 + d)) ((y - Y) * (1 + d))).
  assert ((G - 1) * Sa * (1 + u) + (H - 1) * Ta * (1 + u) + (Sa + Ta) * u
          <= (M * (1 + u) - 1) * (Sa + Ta)).
  { assert (G * Sa <= M * Sa) by (apply Rmult_le_compat_r; lra).
    assert (H * Ta <= M * Ta) by (apply Rmult_le_compat_r; lra).
    nra. }
  lra.
Qed.

(** ** The fold invariants *)

Lemma fmt_tile_fold : forall xs a, fmt a -> fmt (fold_left (fun acc x => rnd (acc + x)) xs a).
Proof.
  induction xs as [|x xs IH]; intros a Ha; [exact Ha |].
  cbn [fold_left]; apply IH, ff_rnd_fmt.
Qed.

Lemma fmt_tile_sum : forall xs, fmt (tile_sum xs).
Proof. intros xs; apply fmt_tile_fold, ff_fmt_0. Qed.

Lemma tile_fold_close : forall xs a A Sa k,
  fmt a -> Rabs A <= Sa -> close ((1 + u) ^ k) a A Sa -> Forall fmt xs ->
  close ((1 + u) ^ (k + length xs)) (fold_left (fun acc x => rnd (acc + x)) xs a)
        (A + rsum xs) (Sa + abs_sum xs).
Proof.
  induction xs as [|x xs IH]; intros a A Sa k Fa HA Ca Fx.
  - cbn [fold_left length]; rewrite Nat.add_0_r; unfold abs_sum, rsum; simpl.
    rewrite !Rplus_0_r; exact Ca.
  - inversion Fx as [|x' xs' Fx1 Fxs]; subst.
    cbn [fold_left length]; rewrite rsum_cons, abs_sum_cons.
    replace (k + S (length xs))%nat with (S k + length xs)%nat by lia.
    rewrite <- !Rplus_assoc.
    apply IH; [apply ff_rnd_fmt | | | exact Fxs].
    + eapply Rle_trans; [apply Rabs_triang | lra].
    + replace ((1 + u) ^ S k) with (Rmax ((1 + u) ^ k) 1 * (1 + u)).
      * apply close_step; auto using one_le_pow_u; try lra; try apply Rle_refl.
        unfold close; rewrite Rminus_diag_eq, Rabs_R0 by reflexivity; lra.
      * rewrite Rmax_left by apply one_le_pow_u; simpl; ring.
Qed.

Lemma close_refl : forall G x Sa, 1 <= G -> 0 <= Sa -> close G x x Sa.
Proof. intros; unfold close; rewrite Rminus_diag_eq, Rabs_R0 by reflexivity; nra. Qed.

(** A tile of [m] terms, summed left to right: factor [(1 + u)^(m - 1)]. *)
Lemma tile_sum_close : forall xs, Forall fmt xs ->
  close ((1 + u) ^ (length xs - 1)) (tile_sum xs) (rsum xs) (abs_sum xs).
Proof.
  intros [|x xs] Fx.
  - unfold tile_sum; simpl; apply close_refl; [lra | unfold abs_sum, rsum; simpl; lra].
  - inversion Fx as [|x' xs' Fx1 Fxs]; subst.
    unfold tile_sum; cbn [fold_left length].
    rewrite Rplus_0_l, (ff_rnd_id F x Fx1), rsum_cons, abs_sum_cons.
    replace (S (length xs) - 1)%nat with (0 + length xs)%nat by lia.
    apply tile_fold_close; auto.
    + apply Rle_refl.
    + apply close_refl; [simpl; lra | apply Rabs_pos].
Qed.

Section WithTileSum.

Variable ts : list R -> R.
Variable D : nat.

Definition tile_ok (tl : list R) : Prop :=
  fmt (ts tl) /\ close ((1 + u) ^ D) (ts tl) (rsum tl) (abs_sum tl).

Lemma fmt_blocked_fold : forall tiles a, fmt a ->
  fmt (fold_left (fun acc tl => rnd (acc + ts tl)) tiles a).
Proof.
  induction tiles as [|tl tiles IH]; intros a Ha; [exact Ha |].
  cbn [fold_left]; apply IH, ff_rnd_fmt.
Qed.

Lemma blocked_fold_close : forall tiles a A Sa k,
  fmt a -> Rabs A <= Sa -> close ((1 + u) ^ (D + k)) a A Sa -> Forall tile_ok tiles ->
  close ((1 + u) ^ (D + k + length tiles)) (fold_left (fun acc tl => rnd (acc + ts tl)) tiles a)
        (A + rsum (concat tiles)) (Sa + abs_sum (concat tiles)).
Proof.
  induction tiles as [|tl tiles IH]; intros a A Sa k Fa HA Ca Ht.
  - cbn [fold_left length concat]; rewrite Nat.add_0_r; unfold abs_sum, rsum; simpl.
    rewrite !Rplus_0_r; exact Ca.
  - inversion Ht as [|tl' tiles' [Ft Ct] Hts]; subst.
    cbn [fold_left length concat]; rewrite rsum_app, abs_sum_app, <- !Rplus_assoc.
    replace (D + k + S (length tiles))%nat with (D + S k + length tiles)%nat by lia.
    apply IH; [apply ff_rnd_fmt | | | exact Hts].
    + eapply Rle_trans; [apply Rabs_triang |].
      pose proof (rsum_abs_le tl); lra.
    + replace ((1 + u) ^ (D + S k)) with (Rmax ((1 + u) ^ (D + k)) ((1 + u) ^ D) * (1 + u)).
      * apply close_step; auto using one_le_pow_u, rsum_abs_le.
      * rewrite Rmax_left by (apply pow_u_mono; lia).
        replace (D + S k)%nat with (S (D + k)) by lia; simpl; ring.
Qed.

Lemma blocked_sum_with_close : forall tiles, Forall tile_ok tiles ->
  close ((1 + u) ^ (D + (length tiles - 1))) (blocked_sum_with ts tiles)
        (rsum (concat tiles)) (abs_sum (concat tiles)).
Proof.
  intros [|tl tiles] Ht.
  - unfold blocked_sum_with; simpl; apply close_refl;
      [apply one_le_pow_u | unfold abs_sum, rsum; simpl; lra].
  - inversion Ht as [|tl' tiles' [Ft Ct] Hts]; subst.
    unfold blocked_sum_with; cbn [fold_left length concat].
    rewrite Rplus_0_l, (ff_rnd_id F _ Ft), rsum_app, abs_sum_app.
    replace (S (length tiles) - 1)%nat with (length tiles) by lia.
    rewrite <- (Nat.add_0_r D) at 1.
    apply blocked_fold_close; auto using rsum_abs_le.
    rewrite Nat.add_0_r; exact Ct.
Qed.

(** Blocked summation with any tile-local summation whose results are
    numbers of the format within [((1+u)^D - 1) sum |x|] of the exact tile
    sums: [gamma (D + (t - 1))] for [t] tiles. *)
Theorem blocked_sum_with_error_bound : forall tiles,
  Forall tile_ok tiles -> INR (D + (length tiles - 1)) * u < 1 ->
  Rabs (blocked_sum_with ts tiles - rsum (concat tiles))
  <= gamma u (D + (length tiles - 1)) * abs_sum (concat tiles).
Proof.
  intros tiles Ht Hn.
  eapply Rle_trans; [apply blocked_sum_with_close, Ht |].
  apply Rmult_le_compat_r; [apply abs_sum_nonneg |].
  apply pow_le_gamma; [apply ff_u_nonneg | exact Hn].
Qed.

End WithTileSum.

(** Tiles of at most [b] terms summed left to right are [tile_ok] with [D = b - 1]. *)
Lemma tile_sum_ok : forall b tl, (length tl <= b)%nat -> Forall fmt tl ->
  tile_ok tile_sum (b - 1) tl.
Proof.
  intros b tl Hl Ft; split; [apply fmt_tile_sum |].
  eapply close_mono; [apply abs_sum_nonneg | | apply tile_sum_close, Ft].
  apply pow_u_mono; lia.
Qed.

(** The blocked sum the kernels run: [t] tiles of at most [b] terms, each
    summed left to right in the format, then combined left to right. *)
Theorem blocked_sum_error_bound : forall b tiles,
  Forall (fun tl => (length tl <= b)%nat) tiles -> Forall (Forall fmt) tiles ->
  INR ((b - 1) + (length tiles - 1)) * u < 1 ->
  Rabs (blocked_sum tiles - rsum (concat tiles))
  <= gamma u ((b - 1) + (length tiles - 1)) * rsum (map Rabs (concat tiles)).
Proof.
  intros b tiles Hl Hf Hn.
  apply (blocked_sum_with_error_bound tile_sum (b - 1)); [| exact Hn].
  apply Forall_forall; intros tl Hin.
  apply tile_sum_ok; [apply (proj1 (Forall_forall _ _) Hl tl Hin) |
                      apply (proj1 (Forall_forall _ _) Hf tl Hin)].
Qed.

(** ** The kernels' tiles: [chunk b] *)

Lemma chunk_fuel_tile_length : forall fuel b (xs : list R) tl,
  In tl (chunk_fuel fuel b xs) -> (length tl <= b)%nat.
Proof.
  induction fuel as [|fuel IH]; intros b xs tl Hin; cbn [chunk_fuel] in Hin; [destruct Hin |].
  destruct xs as [|x xs']; [destruct Hin |].
  destruct Hin as [<- | Hin]; [rewrite firstn_length; lia | eapply IH, Hin].
Qed.

Lemma chunk_tile_length : forall b (xs : list R) tl,
  In tl (chunk b xs) -> (length tl <= Nat.max 1 b)%nat.
Proof. intros b xs tl; unfold chunk; apply chunk_fuel_tile_length. Qed.

(** The terms [xs] cut into the kernels' tiles of [b >= 1] terms
    ([t = length (chunk b xs)] tiles, the last one possibly shorter). *)
Theorem chunked_sum_error_bound : forall b xs,
  (1 <= b)%nat -> Forall fmt xs ->
  INR ((b - 1) + (length (chunk b xs) - 1)) * u < 1 ->
  Rabs (blocked_sum (chunk b xs) - rsum xs)
  <= gamma u ((b - 1) + (length (chunk b xs) - 1)) * rsum (map Rabs xs).
Proof.
  intros b xs Hb Hf Hn.
  assert (H : Rabs (blocked_sum (chunk b xs) - rsum (concat (chunk b xs)))
              <= gamma u ((b - 1) + (length (chunk b xs) - 1)) * rsum (map Rabs (concat (chunk b xs)))).
  2: { rewrite concat_chunk in H; exact H. }
  apply blocked_sum_error_bound; [| | exact Hn].
  - apply Forall_forall; intros tl Hin; pose proof (chunk_tile_length b xs tl Hin); lia.
  - apply Forall_forall; intros tl Hin; apply Forall_forall; intros x Hx.
    apply (proj1 (Forall_forall _ _) Hf).
    rewrite <- (concat_chunk b xs); apply in_concat; exists tl; auto.
Qed.

(** The number of tiles is [ceil (n / b)]: [(t - 1) b < n <= t b]. *)
Lemma chunk_fuel_count : forall fuel b (xs : list R),
  (1 <= b)%nat -> (length xs <= fuel)%nat ->
  (length xs <= length (chunk_fuel fuel b xs) * b)%nat
  /\ ((length (chunk_fuel fuel b xs) - 1) * b < Nat.max 1 (length xs))%nat.
Proof.
  induction fuel as [|fuel IH]; intros b xs Hb Hl; cbn [chunk_fuel].
  - destruct xs; cbn [length] in *; lia.
  - destruct xs as [|x xs']; [cbn; lia |].
    cbn [length].
    destruct (IH b (skipn b (x :: xs')) Hb) as [H1 H2];
      [rewrite skipn_length; cbn [length] in *; lia |].
    rewrite skipn_length in H1, H2; cbn [length] in H1, H2 |- *.
    destruct (Nat.le_gt_cases (S (length xs')) b) as [Hs | Hs].
    + assert (E : (S (length xs') - b = 0)%nat) by lia.
      rewrite E in H1, H2.
      assert (Hz : length (chunk_fuel fuel b (skipn b (x :: xs'))) = 0%nat).
      { rewrite skipn_all2 by (cbn [length]; lia).
        destruct fuel; reflexivity. }
      rewrite Hz; lia.
    + nia.
Qed.

Lemma chunk_count : forall b (xs : list R), (1 <= b)%nat ->
  (length xs <= length (chunk b xs) * b)%nat
  /\ ((length (chunk b xs) - 1) * b < Nat.max 1 (length xs))%nat.
Proof.
  intros b xs Hb; unfold chunk; rewrite Nat.max_r by exact Hb.
  apply chunk_fuel_count; lia.
Qed.

(** The same with any tile count [t >= 1] such that [n <= t b] (e.g.
    [t = ceil (n / b)]): [gamma ((b - 1) + (t - 1))]. *)
Theorem chunked_sum_error_bound_t : forall b t xs,
  (1 <= b)%nat -> (1 <= t)%nat -> (length xs <= t * b)%nat -> Forall fmt xs ->
  INR ((b - 1) + (t - 1)) * u < 1 ->
  Rabs (blocked_sum (chunk b xs) - rsum xs)
  <= gamma u ((b - 1) + (t - 1)) * rsum (map Rabs xs).
Proof.
  intros b t xs Hb Ht Hl Hf Hn.
  assert (Htiles : Forall (tile_ok tile_sum (b - 1)) (chunk b xs)).
  { apply Forall_forall; intros tl Hin; apply tile_sum_ok.
    - pose proof (chunk_tile_length b xs tl Hin); lia.
    - apply Forall_forall; intros x Hx; apply (proj1 (Forall_forall _ _) Hf).
      rewrite <- (concat_chunk b xs); apply in_concat; exists tl; auto. }
  pose proof (blocked_sum_with_close tile_sum (b - 1) (chunk b xs) Htiles) as C.
  rewrite concat_chunk in C; fold (blocked_sum (chunk b xs)) in C.
  assert (Hc : (length (chunk b xs) - 1 <= t - 1)%nat).
  { destruct (chunk_count b xs Hb) as [_ H2].
    destruct (Nat.le_gt_cases (length (chunk b xs)) t); [lia |].
    exfalso; assert (t * b <= (length (chunk b xs) - 1) * b)%nat by (apply Nat.mul_le_mono_r; lia).
    lia. }
  eapply close_mono in C; [| apply abs_sum_nonneg | apply (pow_u_mono _ ((b - 1) + (t - 1))); lia].
  eapply Rle_trans; [exact C |].
  apply Rmult_le_compat_r; [apply abs_sum_nonneg |].
  apply pow_le_gamma; [apply ff_u_nonneg | exact Hn].
Qed.

(** ** Skipping tiles whose terms are all zero is exact *)

Definition is_zero (x : R) : bool := if Req_EM_T x 0 then true else false.

Definition all_zero (tl : list R) : bool := forallb is_zero tl.

Lemma tile_fold_zero : forall xs a, fmt a -> Forall (fun x => x = 0) xs ->
  fold_left (fun acc x => rnd (acc + x)) xs a = a.
Proof.
  induction xs as [|x xs IH]; intros a Fa Hz; [reflexivity |].
  inversion Hz as [|x' xs' Hx Hxs]; subst.
  cbn [fold_left]; rewrite Rplus_0_r, (ff_rnd_id F a Fa); apply IH; assumption.
Qed.

Lemma all_zero_spec : forall tl, all_zero tl = true -> Forall (fun x => x = 0) tl.
Proof.
  intros tl H; apply Forall_forall; intros x Hx.
  unfold all_zero in H; rewrite forallb_forall in H.
  specialize (H x Hx); unfold is_zero in H; destruct (Req_EM_T x 0); [assumption | discriminate].
Qed.

(** A tile of zeros sums to 0. *)
Lemma tile_sum_zero : forall tl, all_zero tl = true -> tile_sum tl = 0.
Proof.
  intros tl H; unfold tile_sum; apply tile_fold_zero; [apply ff_fmt_0 | apply all_zero_spec, H].
Qed.

Lemma tile_sum_zero_Forall : forall tl, Forall (fun x => x = 0) tl -> tile_sum tl = 0.
Proof. intros tl H; unfold tile_sum; apply tile_fold_zero; [apply ff_fmt_0 | exact H]. Qed.

Lemma blocked_fold_skip : forall ts, (forall tl, all_zero tl = true -> ts tl = 0) ->
  forall tiles a, fmt a ->
  fold_left (fun acc tl => rnd (acc + ts tl)) (filter (fun tl => negb (all_zero tl)) tiles) a
  = fold_left (fun acc tl => rnd (acc + ts tl)) tiles a.
Proof.
  intros ts Hts; induction tiles as [|tl tiles IH]; intros a Fa; [reflexivity |].
  cbn [filter fold_left].
  destruct (all_zero tl) eqn:Ez; cbn [negb fold_left].
  - rewrite (Hts tl Ez), Rplus_0_r, (ff_rnd_id F a Fa); apply IH, Fa.
  - apply IH, ff_rnd_fmt.
Qed.

(** The kernel may skip any set of tiles whose terms are all exactly zero
    (fully masked tiles): the computed blocked sum is the same real number. *)
Theorem blocked_sum_skip_zero_tiles : forall tiles,
  blocked_sum (filter (fun tl => negb (all_zero tl)) tiles) = blocked_sum tiles.
Proof.
  intros tiles; unfold blocked_sum, blocked_sum_with.
  apply blocked_fold_skip; [apply tile_sum_zero | apply ff_fmt_0].
Qed.

(** The same for one tile anywhere in the sequence. *)
Corollary blocked_sum_skip_zero_tile : forall tiles1 z tiles2,
  Forall (fun x => x = 0) z ->
  blocked_sum (tiles1 ++ z :: tiles2) = blocked_sum (tiles1 ++ tiles2).
Proof.
  intros tiles1 z tiles2 Hz; unfold blocked_sum, blocked_sum_with.
  rewrite !fold_left_app; cbn [fold_left].
  assert (Fa : fmt (fold_left (fun acc tl => rnd (acc + tile_sum tl)) tiles1 0))
    by (apply fmt_blocked_fold, ff_fmt_0).
  rewrite (tile_sum_zero_Forall z Hz), Rplus_0_r, (ff_rnd_id F _ Fa); reflexivity.
Qed.

(** ** Tile-local sums by a reduction tree (as [tl.sum] reduces a tile)

    A binary tree whose leaves are the terms of a tile; each inner node is
    one rounded addition.  A tree of depth [D] has factor [(1 + u)^D]:
    blocked summation with such tile sums is within [gamma (D + (t - 1))].
    Left-to-right summation is the comb of depth [b - 1]; a pairwise
    (butterfly) reduction of [2^k] terms has depth [k]. *)

Inductive stree : Type :=
| Leaf (x : R)
| Node (l r : stree).

Fixpoint leaves (T : stree) : list R :=
  match T with Leaf x => [x] | Node l r => leaves l ++ leaves r end.

Fixpoint depth (T : stree) : nat :=
  match T with Leaf _ => 0 | Node l r => S (Nat.max (depth l) (depth r)) end.

Fixpoint tree_sum (T : stree) : R :=
  match T with Leaf x => x | Node l r => rnd (tree_sum l + tree_sum r) end.

Lemma Rmax_pow_u : forall k k', Rmax ((1 + u) ^ k) ((1 + u) ^ k') = (1 + u) ^ (Nat.max k k').
Proof.
  intros k k'; destruct (Nat.le_ge_cases k k') as [H | H].
  - rewrite Nat.max_r by exact H; apply Rmax_right, pow_u_mono, H.
  - rewrite Nat.max_l by exact H; apply Rmax_left, pow_u_mono, H.
Qed.

Lemma tree_sum_ok : forall T, Forall fmt (leaves T) ->
  fmt (tree_sum T) /\ close ((1 + u) ^ depth T) (tree_sum T) (rsum (leaves T)) (abs_sum (leaves T)).
Proof.
  induction T as [x | l IHl r IHr]; intros Hf.
  - inversion Hf; subst; split; [assumption |].
    unfold close; cbn [leaves tree_sum depth pow]; unfold rsum; simpl.
    rewrite Rplus_0_r, Rminus_diag_eq, Rabs_R0 by reflexivity; lra.
  - cbn [leaves] in Hf; apply Forall_app in Hf; destruct Hf as [Hl Hr].
    destruct (IHl Hl) as [Fl Cl]; destruct (IHr Hr) as [Fr Cr].
    split; [apply ff_rnd_fmt |].
    cbn [leaves tree_sum depth]; rewrite rsum_app, abs_sum_app.
    replace ((1 + u) ^ S (Nat.max (depth l) (depth r)))
      with (Rmax ((1 + u) ^ depth l) ((1 + u) ^ depth r) * (1 + u))
      by (rewrite Rmax_pow_u; simpl; ring).
    apply close_step; auto using one_le_pow_u, rsum_abs_le.
Qed.

(** Blocked summation whose tile-local sums are reduction trees [shape tl]
    over the tile's terms, of depth at most [D]. *)
Theorem blocked_tree_sum_error_bound : forall (shape : list R -> stree) D tiles,
  (forall tl, In tl tiles -> leaves (shape tl) = tl /\ (depth (shape tl) <= D)%nat) ->
  Forall (Forall fmt) tiles ->
  INR (D + (length tiles - 1)) * u < 1 ->
  Rabs (blocked_sum_with (fun tl => tree_sum (shape tl)) tiles - rsum (concat tiles))
  <= gamma u (D + (length tiles - 1)) * rsum (map Rabs (concat tiles)).
Proof.
  intros shape D tiles Hs Hf Hn.
  apply (blocked_sum_with_error_bound (fun tl => tree_sum (shape tl)) D); [| exact Hn].
  apply Forall_forall; intros tl Hin.
  destruct (Hs tl Hin) as [Hl Hd].
  assert (Ft : Forall fmt (leaves (shape tl)))
    by (rewrite Hl; apply (proj1 (Forall_forall _ _) Hf tl Hin)).
  destruct (tree_sum_ok (shape tl) Ft) as [F1 C1]; rewrite Hl in C1.
  split; [exact F1 |].
  eapply close_mono; [apply abs_sum_nonneg | apply pow_u_mono, Hd | exact C1].
Qed.

End BlockedSum.

(** ** The dot product with exact products and blocked accumulation *)

Section BlockedDot.

(** The accumulation format (fp32 for the kernels). *)
Variable A : FloatFormat.

(** Each product rounded to the accumulation format, as the terms of the sum. *)
Definition dot_terms (a b : list R) : list R :=
  map (fun xy => ff_rnd A (fst xy * snd xy)) (combine a b).

(** The kernels' dot product: tiles of [blk] products, each tile summed in
    the accumulation format, tiles combined in order. *)
Definition blocked_dot (blk : nat) (a b : list R) : R :=
  blocked_sum A (chunk blk (dot_terms a b)).

Lemma dot_terms_exact : forall a b,
  (forall xy, In xy (combine a b) -> ff_fmt A (fst xy * snd xy)) ->
  dot_terms a b = map (fun xy => fst xy * snd xy) (combine a b).
Proof.
  intros a b H; unfold dot_terms; apply map_ext_in; intros xy Hin.
  apply ff_rnd_id, H, Hin.
Qed.

(** Products that are numbers of the accumulation format, summed blocked
    in tiles of [blk], [t] tiles with [n <= t blk]. *)
Theorem blocked_dot_error_bound : forall blk t a b,
  (1 <= blk)%nat -> (1 <= t)%nat -> (length (combine a b) <= t * blk)%nat ->
  (forall xy, In xy (combine a b) -> ff_fmt A (fst xy * snd xy)) ->
  INR ((blk - 1) + (t - 1)) * ff_u A < 1 ->
  Rabs (blocked_dot blk a b - rsum (map (fun xy => fst xy * snd xy) (combine a b)))
  <= gamma (ff_u A) ((blk - 1) + (t - 1))
     * rsum (map (fun xy => Rabs (fst xy * snd xy)) (combine a b)).
Proof.
  intros blk t a b Hb Ht Hl Hf Hn.
  unfold blocked_dot; rewrite (dot_terms_exact a b Hf).
  replace (rsum (map (fun xy => Rabs (fst xy * snd xy)) (combine a b)))
    with (rsum (map Rabs (map (fun xy => fst xy * snd xy) (combine a b))))
    by (rewrite map_map; reflexivity).
  apply chunked_sum_error_bound_t; auto.
  - rewrite map_length; exact Hl.
  - apply Forall_forall; intros p Hp; apply in_map_iff in Hp.
    destruct Hp as [xy [<- Hin]]; apply Hf, Hin.
Qed.


(** Without the premise that the products are numbers of the format: each
    product rounded to it ([|rnd (x y) - x y| <= u |x y| + eta], underflow
    included), then summed blocked; [n] products:
      |computed - dot| <= gamma (k + 1) sum |a_i b_i| + (1 + gamma k) n eta,
    [k = (blk - 1) + (t - 1)]. *)
Theorem blocked_dot_error_bound_rounded : forall blk t a b,
  (1 <= blk)%nat -> (1 <= t)%nat -> (length (combine a b) <= t * blk)%nat ->
  INR (S ((blk - 1) + (t - 1))) * ff_u A < 1 ->
  Rabs (blocked_dot blk a b - rsum (map (fun xy => fst xy * snd xy) (combine a b)))
  <= gamma (ff_u A) (S ((blk - 1) + (t - 1)))
     * rsum (map (fun xy => Rabs (fst xy * snd xy)) (combine a b))
     + (1 + gamma (ff_u A) ((blk - 1) + (t - 1))) * INR (length (combine a b)) * ff_eta A.
Proof.
  intros blk t a b Hb Ht Hl Hn.
  set (k := ((blk - 1) + (t - 1))%nat) in *.
  set (u := ff_u A) in *; set (eta := ff_eta A).
  pose proof (ff_u_nonneg A) as Hu; fold u in Hu.
  pose proof (ff_eta_nonneg A) as He; fold eta in He.
  assert (Hk : INR k * u < 1) by (rewrite S_INR in Hn; pose proof (pos_INR k); nra).
  set (xs := combine a b) in *.
  set (ts := dot_terms a b).
  assert (Hts : Forall (ff_fmt A) ts).
  { apply Forall_forall; intros p Hp; unfold ts, dot_terms in Hp; apply in_map_iff in Hp.
    destruct Hp as [xy [<- _]]; apply ff_rnd_fmt. }
  assert (Hlt : (length ts <= t * blk)%nat) by (unfold ts, dot_terms; rewrite map_length; exact Hl).
  pose proof (chunked_sum_error_bound_t A blk t ts Hb Ht Hlt Hts Hk) as Hs.
  fold k u in Hs.
  set (P := rsum (map (fun xy => Rabs (fst xy * snd xy)) xs)).
  (* the rounded products against the exact ones *)
  assert (Hd : Rabs (rsum ts - rsum (map (fun xy => fst xy * snd xy) xs))
               <= u * P + INR (length xs) * eta
           /\ rsum (map Rabs ts) <= (1 + u) * P + INR (length xs) * eta).
  { unfold ts, dot_terms, P; fold xs; clear Hs Hlt Hts Hl.
    induction xs as [|xy xs IH].
    - unfold rsum; simpl; rewrite Rminus_0_r, Rabs_R0; lra.
    - cbn [map length]; rewrite !rsum_cons, S_INR.
      destruct IH as [IH1 IH2].
      pose proof (ff_abs A (fst xy * snd xy)) as Hr; fold u eta in Hr.
      set (q := ff_rnd A (fst xy * snd xy)) in *.
      set (r := fst xy * snd xy) in *.
      split.
      + replace (q + rsum (map (fun xy0 => ff_rnd A (fst xy0 * snd xy0)) xs)
                 - (r + rsum (map (fun xy0 => fst xy0 * snd xy0) xs)))
          with ((q - r) + (rsum (map (fun xy0 => ff_rnd A (fst xy0 * snd xy0)) xs)
                           - rsum (map (fun xy0 => fst xy0 * snd xy0) xs))) by ring.
        eapply Rle_trans; [apply Rabs_triang | lra].
      + assert (Rabs q <= (1 + u) * Rabs r + eta).
        { replace q with ((q - r) + r) by ring.
          eapply Rle_trans; [apply Rabs_triang | lra]. }
        lra. }
  destruct Hd as [Hd1 Hd2].
  unfold blocked_dot; fold ts.
  assert (Hg : 0 <= gamma u k).
  { unfold gamma, Rdiv; apply Rmult_le_pos; [apply Rmult_le_pos; [apply pos_INR | exact Hu] |].
    left; apply Rinv_0_lt_compat; lra. }
  assert (HP : 0 <= P).
  { unfold P; apply rsum_nonneg; intros z Hz; apply in_map_iff in Hz.
    destruct Hz as [w [<- _]]; apply Rabs_pos. }
  (* gamma k (1 + u) + u <= gamma (k + 1) *)
  assert (Hgs : gamma u k * (1 + u) + u <= gamma u (S k)).
  { unfold gamma; rewrite S_INR.
    assert (H1 : 0 < 1 - INR k * u) by lra.
    assert (H2 : 0 < 1 - (INR k + 1) * u) by (rewrite S_INR in Hn; lra).
    apply (Rmult_le_reg_r ((1 - INR k * u) * (1 - (INR k + 1) * u))); [nra |].
    replace ((INR k * u / (1 - INR k * u) * (1 + u) + u) * ((1 - INR k * u) * (1 - (INR k + 1) * u)))
      with ((INR k * u * (1 + u) + u * (1 - INR k * u)) * (1 - (INR k + 1) * u)) by (field; lra).
    replace ((INR k + 1) * u / (1 - (INR k + 1) * u) * ((1 - INR k * u) * (1 - (INR k + 1) * u)))
      with ((INR k + 1) * u * (1 - INR k * u)) by (field; lra).
    pose proof (pos_INR k); nra. }
  replace (blocked_sum A (chunk blk ts) - rsum (map (fun xy => fst xy * snd xy) xs))
    with ((blocked_sum A (chunk blk ts) - rsum ts) + (rsum ts - rsum (map (fun xy => fst xy * snd xy) xs)))
    by ring.
  eapply Rle_trans; [apply Rabs_triang |].
  assert (gamma u k * rsum (map Rabs ts) <= gamma u k * ((1 + u) * P + INR (length xs) * eta))
    by (apply Rmult_le_compat_l; assumption).
  assert (gamma u k * (1 + u) * P + u * P <= gamma u (S k) * P) by nra.
  nra.
Qed.

End BlockedDot.

Lemma combine_in_l : forall (a b : list R) xy, In xy (combine a b) -> In (fst xy) a.
Proof. intros a b [x y] H; apply in_combine_l in H; exact H. Qed.

Lemma combine_in_r : forall (a b : list R) xy, In xy (combine a b) -> In (snd xy) b.
Proof. intros a b [x y] H; apply in_combine_r in H; exact H. Qed.

(** bf16 operands, fp32 accumulation (the tensor-core dot of the kernels):
    each product is exact in fp32 when it is 0 or at least [2^-134] in
    magnitude ([bf16_mul_fp32]), and the blocked fp32 sum of [n <= t blk]
    products is within [gamma_(2^-24) ((blk - 1) + (t - 1)) sum |a_i b_i|]. *)
Theorem bf16_blocked_dot_error_bound : forall blk t a b,
  (1 <= blk)%nat -> (1 <= t)%nat -> (length a <= t * blk)%nat ->
  Forall (ff_fmt bf16) a -> Forall (ff_fmt bf16) b ->
  (forall xy, In xy (combine a b) ->
     fst xy * snd xy = 0 \/ bpow radix2 (-134) <= Rabs (fst xy * snd xy)) ->
  INR ((blk - 1) + (t - 1)) * / 16777216 < 1 ->
  Rabs (blocked_dot fp32 blk a b - rsum (map (fun xy => fst xy * snd xy) (combine a b)))
  <= gamma (/ 16777216) ((blk - 1) + (t - 1))
     * rsum (map (fun xy => Rabs (fst xy * snd xy)) (combine a b)).
Proof.
  intros blk t a b Hb Ht Hl Fa Fb Hr Hn.
  rewrite <- fp32_u in *.
  apply blocked_dot_error_bound; auto.
  - rewrite combine_length; lia.
  - intros xy Hin; apply bf16_mul_fp32; [| | apply Hr, Hin].
    + apply (proj1 (Forall_forall _ _) Fa), (combine_in_l a b), Hin.
    + apply (proj1 (Forall_forall _ _) Fb), (combine_in_r a b), Hin.
Qed.

(** fp16 operands, fp32 accumulation: every product is exact in fp32
    ([fp16_mul_fp32]), no range premise. *)
Theorem fp16_blocked_dot_error_bound : forall blk t a b,
  (1 <= blk)%nat -> (1 <= t)%nat -> (length a <= t * blk)%nat ->
  Forall (ff_fmt fp16) a -> Forall (ff_fmt fp16) b ->
  INR ((blk - 1) + (t - 1)) * / 16777216 < 1 ->
  Rabs (blocked_dot fp32 blk a b - rsum (map (fun xy => fst xy * snd xy) (combine a b)))
  <= gamma (/ 16777216) ((blk - 1) + (t - 1))
     * rsum (map (fun xy => Rabs (fst xy * snd xy)) (combine a b)).
Proof.
  intros blk t a b Hb Ht Hl Fa Fb Hn.
  rewrite <- fp32_u in *.
  apply blocked_dot_error_bound; auto.
  - rewrite combine_length; lia.
  - intros xy Hin; apply fp16_mul_fp32.
    + apply (proj1 (Forall_forall _ _) Fa), (combine_in_l a b), Hin.
    + apply (proj1 (Forall_forall _ _) Fb), (combine_in_r a b), Hin.
Qed.
