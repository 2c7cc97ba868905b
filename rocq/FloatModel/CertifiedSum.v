(** * Certified upper bounds of exact sums from computed ones, in any order.

    The verification helpers evaluate the a-posteriori sums of the error bounds
    (attention's [P |v|], the cross-entropy's [P |W|], ...) in float64 with torch,
    whose reductions and matmuls add in an order of their own (vectorised partial
    sums, cascades, blocked BLAS kernels with or without FMA).  This file bounds the
    exact real sum from the computed one for ANY such order, in any [FloatFormat]
    [F] (MixedPrecision.v), and instantiates the format at binary64 ([fp64]):

    - [tree_sum_nonneg_bracket]: a tree of rounded additions ([stree] and
      [tree_sum] of BlockedSum.v, any shape) over nonnegative numbers of the
      format, [k] of them nonzero:
        (1 - u)^(nnz l + nnz r - 2) S <= computed <= (1 + u)^(nnz l + nnz r - 2) S,   S the exact sum.
      Exact zeros (zero-initialised accumulators, padding) cost nothing: adding
      0 to a number of the format is exact.  No underflow premise: a sum of two
      numbers of the format has a purely relative error ([ff_add]).
      [tree_sum_nonneg_upper]: [S <= computed / (1 - (n - 1) u)] for at most [n]
      nonzero terms; [tree_sum_nonneg_lower]: [(1 - (n - 1) u) computed <= S].
    - [ftree_error_bound]: a tree whose leaves are any reals (the exact products
      of a dot product), whose nodes are rounded additions and rounded leaves
      (an FMA's [rnd (a b + acc)] is an addition node over the exact leaf [a b];
      an unfused product is a rounded leaf): at most [D] roundings on any path
      from a leaf to the root and [m] roundings in all, [D u < 1]:
        |computed - sum x| <= gamma u D * sum |x| + (1 + gamma u D) m eta
      (underflow included: [eta] per rounding, [ff_abs]).
      [ftree_nonneg_upper]: nonnegative leaves,
        (1 - gamma u D) S <= computed + (1 + gamma u D) m eta.
    - [fp64_tree_sum_nonneg_upper], [fp64_ftree_error_bound]: the two at
      binary64 ([u = 2^-53], [eta = 2^-1075], round to nearest even). *)

From Coq Require Import Reals List Lra Lia Arith.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision FloatModel.DotError FloatModel.BlockedSum.
Import ListNotations.
Open Scope R_scope.

(** binary64 with round-to-nearest-even: Flocq's [FLT_exp (-1074) 53]. *)
Definition fp64 : FloatFormat := flt_format 53 (-1074) eq_refl.

Lemma fp64_u : ff_u fp64 = / 9007199254740992.
Proof. simpl; unfold Z.pow_pos; simpl; field. Qed.

Lemma fp64_eta : ff_eta fp64 = bpow radix2 (-1075).
Proof. reflexivity. Qed.

(** Bernoulli: [1 - k u <= (1 - u)^k] for [0 <= u <= 1]. *)
Lemma bernoulli_down : forall u k, 0 <= u <= 1 -> 1 - INR k * u <= (1 - u) ^ k.
Proof.
  intros u k Hu; induction k as [|k IH]; [simpl; lra |].
  rewrite S_INR; simpl pow.
  assert (0 <= (1 - u) ^ k) by (apply pow_le; lra).
  pose proof (pos_INR k).
  assert ((1 - u) * (1 - INR k * u) <= (1 - u) * (1 - u) ^ k) by (apply Rmult_le_compat_l; lra).
  assert (0 <= INR k * u * u) by (apply Rmult_le_pos; [apply Rmult_le_pos |]; lra).
  nra.
Qed.

(** [(1 + u)^k (1 - k u) <= 1] for [0 <= u]. *)
Lemma pow_up_times_down : forall u k, 0 <= u -> (1 + u) ^ k * (1 - INR k * u) <= 1.
Proof.
  intros u k Hu.
  assert (H1 : (1 + u) ^ k <= exp (INR k * u)).
  { rewrite exp_INR_mul; apply pow_incr; split; [lra |]; pose proof (exp_ineq1_le u); lra. }
  assert (H0 : 0 < (1 + u) ^ k) by (apply pow_lt; lra).
  destruct (Rle_lt_dec 0 (1 - INR k * u)) as [Hp | Hn]; [| nra].
  pose proof (exp_ineq1_le (- (INR k * u))) as H2.
  assert (E : exp (INR k * u) * exp (- (INR k * u)) = 1)
    by (rewrite <- exp_plus; replace (INR k * u + - (INR k * u)) with 0 by ring; apply exp_0).
  pose proof (exp_pos (INR k * u)).
  apply Rle_trans with (exp (INR k * u) * (1 - INR k * u)); [apply Rmult_le_compat_r; lra |].
  nra.
Qed.

Section CertifiedSum.

Variable F : FloatFormat.
Local Notation u := (ff_u F).
Local Notation eta := (ff_eta F).
Local Notation rnd := (ff_rnd F).
Local Notation fmt := (ff_fmt F).

(** ** Sums of nonnegative numbers of the format, any tree *)

(** The number of nonzero leaves. *)
Fixpoint nnz (T : stree) : nat :=
  match T with
  | Leaf x => if Req_EM_T x 0 then 0%nat else 1%nat
  | Node l r => (nnz l + nnz r)%nat
  end.

Lemma nnz_le_length : forall T, (nnz T <= length (leaves T))%nat.
Proof.
  induction T as [x | l IHl r IHr]; cbn [nnz leaves].
  - destruct (Req_EM_T x 0); simpl; lia.
  - rewrite app_length; lia.
Qed.

Lemma pow_down_mono : forall k k', (k <= k')%nat -> (1 - u) ^ k' <= (1 - u) ^ k.
Proof.
  intros k k' H; pose proof (ff_u_nonneg F); pose proof (ff_u_lt_1 F).
  replace k' with (k + (k' - k))%nat by lia; rewrite pow_add.
  assert (0 <= (1 - u) ^ k) by (apply pow_le; lra).
  assert ((1 - u) ^ (k' - k) <= 1) 
    by (apply Rle_trans with (1 ^ (k' - k)); [apply pow_incr; lra | rewrite pow1; lra]).
  assert (0 <= (1 - u) ^ (k' - k)) by (apply pow_le; lra).
  nra.
Qed.

Lemma pow_up_mono : forall k k', (k <= k')%nat -> (1 + u) ^ k <= (1 + u) ^ k'.
Proof. intros k k' H; apply Rle_pow; [pose proof (ff_u_nonneg F); lra | exact H]. Qed.

Definition bracket (T : stree) : Prop :=
  fmt (tree_sum F T) /\ 0 <= tree_sum F T /\
  (nnz T = 0%nat -> tree_sum F T = 0 /\ rsum (leaves T) = 0) /\
  (1 - u) ^ (nnz T - 1) * rsum (leaves T) <= tree_sum F T /\
  tree_sum F T <= (1 + u) ^ (nnz T - 1) * rsum (leaves T).

Lemma rsum_leaves_nonneg : forall T, Forall (fun x => 0 <= x) (leaves T) -> 0 <= rsum (leaves T).
Proof.
  intros T H; apply rsum_nonneg; intros x Hx; apply (proj1 (Forall_forall _ _) H x Hx).
Qed.

Lemma tree_bracket : forall T, Forall fmt (leaves T) -> Forall (fun x => 0 <= x) (leaves T) -> bracket T.
Proof.
  pose proof (ff_u_nonneg F) as Hu; pose proof (ff_u_lt_1 F) as Hu1.
  induction T as [x | l IHl r IHr]; intros Hf Hp.
  - inversion Hf as [|? ? Fx _]; inversion Hp as [|? ? Px _]; subst.
    unfold bracket; cbn [tree_sum leaves nnz]; unfold rsum; cbn [fold_right]; rewrite Rplus_0_r.
    destruct (Req_EM_T x 0) as [E | E]; cbn [Nat.sub pow]; (split; [exact Fx |]); (split; [exact Px |]);
      (split; [intros H; (lia || (split; lra)) |]); split; lra.
  - cbn [leaves] in Hf, Hp; apply Forall_app in Hf; apply Forall_app in Hp.
    destruct Hf as [Hfl Hfr]; destruct Hp as [Hpl Hpr].
    destruct (IHl Hfl Hpl) as [Fl [Nl [Zl [Ll Ul]]]].
    destruct (IHr Hfr Hpr) as [Fr [Nr [Zr [Lr Ur]]]].
    pose proof (rsum_leaves_nonneg l Hpl) as Sl; pose proof (rsum_leaves_nonneg r Hpr) as Sr.
    unfold bracket; cbn [tree_sum leaves nnz]; rewrite rsum_app.
    set (a := tree_sum F l) in *; set (b := tree_sum F r) in *.
    set (A := rsum (leaves l)) in *; set (B := rsum (leaves r)) in *.
    destruct (Nat.eq_dec (nnz l) 0) as [El | El].
    { destruct (Zl El) as [Ea EA]; rewrite El, Nat.add_0_l, Ea, EA, !Rplus_0_l, (ff_rnd_id F b Fr).
      exact (conj Fr (conj Nr (conj Zr (conj Lr Ur)))). }
    destruct (Nat.eq_dec (nnz r) 0) as [Er | Er].
    { destruct (Zr Er) as [Eb EB]; rewrite Er, Nat.add_0_r, Eb, EB, !Rplus_0_r, (ff_rnd_id F a Fl).
      exact (conj Fl (conj Nl (conj Zl (conj Ll Ul)))). }
    pose proof (ff_add F a b Fl Fr) as Hr.
    rewrite (Rabs_pos_eq (a + b)) in Hr by lra.
    assert (Hz : Rabs (rnd (a + b) - (a + b)) <= u * (a + b)) by exact Hr.
    apply Rabs_le_inv in Hz.
    assert (Ek : (nnz l + nnz r - 1)%nat = S (nnz l + nnz r - 2)) by lia.
    assert (Dl : (1 - u) ^ (nnz l + nnz r - 2) * A <= (1 - u) ^ (nnz l - 1) * A)
      by (apply Rmult_le_compat_r; [lra | apply pow_down_mono; lia]).
    assert (Dr : (1 - u) ^ (nnz l + nnz r - 2) * B <= (1 - u) ^ (nnz r - 1) * B)
      by (apply Rmult_le_compat_r; [lra | apply pow_down_mono; lia]).
    assert (Ul' : (1 + u) ^ (nnz l - 1) * A <= (1 + u) ^ (nnz l + nnz r - 2) * A)
      by (apply Rmult_le_compat_r; [lra | apply pow_up_mono; lia]).
    assert (Ur' : (1 + u) ^ (nnz r - 1) * B <= (1 + u) ^ (nnz l + nnz r - 2) * B)
      by (apply Rmult_le_compat_r; [lra | apply pow_up_mono; lia]).
    assert (P1 : 0 <= (1 - u) ^ (nnz l + nnz r - 2)) by (apply pow_le; lra).
    assert (P2 : 0 <= (1 + u) ^ (nnz l + nnz r - 2)) by (apply pow_le; lra).
    rewrite Ek; simpl pow.
    split; [apply ff_rnd_fmt |].
    split; [nra |].
    split; [intros H; lia |].
    split; nra.
Qed.

(** The bracket: [k] nonzero terms, [(1 - u)^(nnz l + nnz r - 2) S <= computed <= (1 + u)^(nnz l + nnz r - 2) S]. *)
Theorem tree_sum_nonneg_bracket : forall T,
  Forall fmt (leaves T) -> Forall (fun x => 0 <= x) (leaves T) ->
  (1 - u) ^ (nnz T - 1) * rsum (leaves T) <= tree_sum F T
  <= (1 + u) ^ (nnz T - 1) * rsum (leaves T).
Proof.
  intros T Hf Hp; destruct (tree_bracket T Hf Hp) as [_ [_ [_ [L U]]]]; split; assumption.
Qed.

(** The certified upper bound of the exact sum: at most [n] nonzero terms,
    [(n - 1) u < 1]: [S <= computed / (1 - (n - 1) u)]. *)
Theorem tree_sum_nonneg_upper : forall n T,
  Forall fmt (leaves T) -> Forall (fun x => 0 <= x) (leaves T) -> (nnz T <= n)%nat ->
  INR (n - 1) * u < 1 ->
  rsum (leaves T) <= tree_sum F T / (1 - INR (n - 1) * u).
Proof.
  intros n T Hf Hp Hn Hu.
  pose proof (ff_u_nonneg F); pose proof (ff_u_lt_1 F).
  destruct (tree_bracket T Hf Hp) as [_ [_ [_ [L _]]]].
  pose proof (rsum_leaves_nonneg T Hp) as HS.
  pose proof (bernoulli_down u (nnz T - 1) ltac:(lra)) as B.
  assert (Hk : INR (nnz T - 1) <= INR (n - 1)) by (apply le_INR; lia).
  apply (Rmult_le_reg_r (1 - INR (n - 1) * u)); [lra |].
  unfold Rdiv; rewrite Rmult_assoc, Rinv_l, Rmult_1_r by lra.
  assert (rsum (leaves T) * (1 - INR (n - 1) * u) <= rsum (leaves T) * (1 - INR (nnz T - 1) * u))
    by (apply Rmult_le_compat_l; [exact HS | apply Rplus_le_compat_l, Ropp_le_contravar;
                                   apply Rmult_le_compat_r; lra]).
  assert (rsum (leaves T) * (1 - INR (nnz T - 1) * u) <= rsum (leaves T) * (1 - u) ^ (nnz T - 1))
    by (apply Rmult_le_compat_l; lra).
  lra.
Qed.

(** The lower bound: [(1 - (n - 1) u) computed <= S]. *)
Theorem tree_sum_nonneg_lower : forall n T,
  Forall fmt (leaves T) -> Forall (fun x => 0 <= x) (leaves T) -> (nnz T <= n)%nat ->
  (1 - INR (n - 1) * u) * tree_sum F T <= rsum (leaves T).
Proof.
  intros n T Hf Hp Hn.
  pose proof (ff_u_nonneg F) as Hu.
  destruct (tree_bracket T Hf Hp) as [_ [N0 [_ [_ U]]]].
  pose proof (rsum_leaves_nonneg T Hp) as HS.
  pose proof (pow_up_times_down u (nnz T - 1) Hu) as P.
  assert (Hk : INR (nnz T - 1) <= INR (n - 1)) by (apply le_INR; lia).
  assert (0 < (1 + u) ^ (nnz T - 1)) by (apply pow_lt; lra).
  apply Rle_trans with ((1 - INR (nnz T - 1) * u) * tree_sum F T).
  { apply Rmult_le_compat_r; [exact N0 |].
    apply Rplus_le_compat_l, Ropp_le_contravar, Rmult_le_compat_r; lra. }
  set (c := 1 - INR (nnz T - 1) * u) in *.
  destruct (Rle_lt_dec 0 c) as [Hc | Hc]; [| nra].
  assert (c * tree_sum F T <= c * ((1 + u) ^ (nnz T - 1) * rsum (leaves T)))
    by (apply Rmult_le_compat_l; lra).
  assert ((1 + u) ^ (nnz T - 1) * c * rsum (leaves T) <= 1 * rsum (leaves T))
    by (apply Rmult_le_compat_r; lra).
  lra.
Qed.

(** ** Trees of rounded operations over real leaves (dot products, FMA or not) *)

Inductive ftree : Type :=
| FLeaf (x : R)
| FRnd (t : ftree)
| FAdd (l r : ftree).

(** The computed value: [FRnd] rounds its child, [FAdd] rounds the sum. *)
Fixpoint fval (T : ftree) : R :=
  match T with
  | FLeaf x => x
  | FRnd t => rnd (fval t)
  | FAdd l r => rnd (fval l + fval r)
  end.

Fixpoint fleaves (T : ftree) : list R :=
  match T with FLeaf x => [x] | FRnd t => fleaves t | FAdd l r => fleaves l ++ fleaves r end.

(** The exact sum of the leaves, and of their absolute values. *)
Fixpoint fsum (T : ftree) : R :=
  match T with FLeaf x => x | FRnd t => fsum t | FAdd l r => fsum l + fsum r end.

Fixpoint fabs (T : ftree) : R :=
  match T with FLeaf x => Rabs x | FRnd t => fabs t | FAdd l r => fabs l + fabs r end.

(** The most roundings on a path from a leaf to the root, and all roundings. *)
Fixpoint rdepth (T : ftree) : nat :=
  match T with
  | FLeaf _ => 0%nat
  | FRnd t => S (rdepth t)
  | FAdd l r => S (Nat.max (rdepth l) (rdepth r))
  end.

Fixpoint rcount (T : ftree) : nat :=
  match T with
  | FLeaf _ => 0%nat
  | FRnd t => S (rcount t)
  | FAdd l r => S (rcount l + rcount r)
  end.

Lemma fsum_abs : forall T, Rabs (fsum T) <= fabs T.
Proof.
  induction T as [x | t IH | l IHl r IHr]; cbn [fsum fabs]; [lra | exact IH |].
  eapply Rle_trans; [apply Rabs_triang | lra].
Qed.

Lemma fabs_nonneg : forall T, 0 <= fabs T.
Proof. intros T; eapply Rle_trans; [apply Rabs_pos | apply fsum_abs]. Qed.

(** One rounding of a value within [(G - 1) A + G c eta] of [S]. *)
Lemma rnd_step : forall v S A G c,
  1 <= G -> Rabs S <= A -> 0 <= c ->
  Rabs (v - S) <= (G - 1) * A + G * c * eta ->
  Rabs (rnd v - S) <= (G * (1 + u) - 1) * A + G * (1 + u) * (c + 1) * eta.
Proof.
  intros v S A G c HG HS Hc Hv.
  pose proof (ff_u_nonneg F) as Hu; pose proof (ff_eta_nonneg F) as He.
  pose proof (ff_abs F v) as Hr.
  assert (HA : 0 <= A) by (eapply Rle_trans; [apply Rabs_pos | exact HS]).
  assert (Habs : Rabs v <= G * A + G * c * eta).
  { replace v with ((v - S) + S) by ring; eapply Rle_trans; [apply Rabs_triang | lra]. }
  replace (rnd v - S) with ((rnd v - v) + (v - S)) by ring.
  eapply Rle_trans; [apply Rabs_triang |].
  assert (u * Rabs v <= u * (G * A + G * c * eta)) by (apply Rmult_le_compat_l; lra).
  assert (eta <= G * (1 + u) * eta) by (assert (1 <= G * (1 + u)) by nra; nra).
  nra.
Qed.

Lemma ftree_close : forall T,
  Rabs (fval T - fsum T)
  <= ((1 + u) ^ rdepth T - 1) * fabs T + (1 + u) ^ rdepth T * INR (rcount T) * eta.
Proof.
  pose proof (ff_u_nonneg F) as Hu; pose proof (ff_eta_nonneg F) as He.
  induction T as [x | t IH | l IHl r IHr]; cbn [fval fsum fabs rdepth rcount].
  - rewrite Rminus_diag_eq, Rabs_R0 by reflexivity; simpl; pose proof (Rabs_pos x); lra.
  - rewrite S_INR; simpl pow.
    replace ((1 + u) * (1 + u) ^ rdepth t) with ((1 + u) ^ rdepth t * (1 + u)) by ring.
    apply rnd_step; [apply one_le_pow_u | apply fsum_abs | apply pos_INR | exact IH].
  - set (G := (1 + u) ^ Nat.max (rdepth l) (rdepth r)).
    assert (Gl : (1 + u) ^ rdepth l <= G) by (apply pow_up_mono; lia).
    assert (Gr : (1 + u) ^ rdepth r <= G) by (apply pow_up_mono; lia).
    assert (G1 : 1 <= (1 + u) ^ rdepth l) by (apply one_le_pow_u).
    assert (G2 : 1 <= (1 + u) ^ rdepth r) by (apply one_le_pow_u).
    pose proof (fabs_nonneg l); pose proof (fabs_nonneg r).
    pose proof (pos_INR (rcount l)); pose proof (pos_INR (rcount r)).
    rewrite S_INR, plus_INR; simpl pow; fold G.
    replace ((1 + u) * G) with (G * (1 + u)) by ring.
    apply rnd_step; [lra | | nra |].
    + cbn; eapply Rle_trans; [apply Rabs_triang | pose proof (fsum_abs l); pose proof (fsum_abs r); lra].
    + replace (fval l + fval r - (fsum l + fsum r)) with ((fval l - fsum l) + (fval r - fsum r)) by ring.
      eapply Rle_trans; [apply Rabs_triang |].
      assert (((1 + u) ^ rdepth l - 1) * fabs l <= (G - 1) * fabs l) by (apply Rmult_le_compat_r; lra).
      assert (((1 + u) ^ rdepth r - 1) * fabs r <= (G - 1) * fabs r) by (apply Rmult_le_compat_r; lra).
      assert ((1 + u) ^ rdepth l * INR (rcount l) * eta <= G * INR (rcount l) * eta)
        by (apply Rmult_le_compat_r; [lra | apply Rmult_le_compat_r; lra]).
      assert ((1 + u) ^ rdepth r * INR (rcount r) * eta <= G * INR (rcount r) * eta)
        by (apply Rmult_le_compat_r; [lra | apply Rmult_le_compat_r; lra]).
      lra.
Qed.

(** Any tree of at most [D] roundings on a path and [m] in all, [D u < 1]. *)
Theorem ftree_error_bound : forall D m T,
  (rdepth T <= D)%nat -> (rcount T <= m)%nat -> INR D * u < 1 ->
  Rabs (fval T - fsum T) <= gamma u D * fabs T + (1 + gamma u D) * INR m * eta.
Proof.
  intros D m T Hd Hm Hn.
  pose proof (ff_u_nonneg F) as Hu; pose proof (ff_eta_nonneg F) as He.
  pose proof (pow_le_gamma u D Hu Hn) as Hg.
  pose proof (pow_up_mono _ _ Hd) as Hp.
  pose proof (one_le_pow_u F (rdepth T)) as H1.
  assert (Hc : INR (rcount T) <= INR m) by (apply le_INR, Hm).
  pose proof (pos_INR (rcount T)).
  pose proof (fabs_nonneg T).
  eapply Rle_trans; [apply ftree_close |].
  assert (((1 + u) ^ rdepth T - 1) * fabs T <= gamma u D * fabs T) by (apply Rmult_le_compat_r; lra).
  assert ((1 + u) ^ rdepth T * INR (rcount T) <= (1 + gamma u D) * INR m)
    by (apply Rmult_le_compat; lra).
  assert ((1 + u) ^ rdepth T * INR (rcount T) * eta <= (1 + gamma u D) * INR m * eta)
    by (apply Rmult_le_compat_r; lra).
  lra.
Qed.

(** Nonnegative leaves: [(1 - gamma u D) S <= computed + (1 + gamma u D) m eta]. *)
Theorem ftree_nonneg_upper : forall D m T,
  (rdepth T <= D)%nat -> (rcount T <= m)%nat -> INR D * u < 1 ->
  (forall x, In x (fleaves T) -> 0 <= x) ->
  (1 - gamma u D) * fsum T <= fval T + (1 + gamma u D) * INR m * eta.
Proof.
  intros D m T Hd Hm Hn Hp.
  pose proof (ftree_error_bound D m T Hd Hm Hn) as H.
  assert (E : fabs T = fsum T).
  { clear -Hp; induction T as [x | t IH | l IHl r IHr]; cbn [fabs fsum fleaves] in *.
    - apply Rabs_pos_eq, Hp; left; reflexivity.
    - apply IH, Hp.
    - rewrite IHl, IHr; [reflexivity | |]; intros x Hx; apply Hp, in_or_app; auto. }
  rewrite E in H; apply Rabs_le_inv in H; lra.
Qed.

End CertifiedSum.

(** ** At binary64 *)

(** Torch's float64 sum of at most [n] nonzero nonnegative float64 terms, in any
    order: [S <= computed / (1 - (n - 1) 2^-53)]. *)
Corollary fp64_tree_sum_nonneg_upper : forall n T,
  Forall (ff_fmt fp64) (leaves T) -> Forall (fun x => 0 <= x) (leaves T) -> (nnz T <= n)%nat ->
  INR (n - 1) * / 9007199254740992 < 1 ->
  rsum (leaves T) <= tree_sum fp64 T / (1 - INR (n - 1) * / 9007199254740992).
Proof. intros n T Hf Hp Hn Hu; rewrite <- fp64_u in *; apply tree_sum_nonneg_upper; assumption. Qed.

(** A float64 dot product (matmul entry) in any tree, FMA or not: at most [D]
    roundings on a path, [m] in all. *)
Corollary fp64_ftree_error_bound : forall D m T,
  (rdepth T <= D)%nat -> (rcount T <= m)%nat -> INR D * / 9007199254740992 < 1 ->
  Rabs (fval fp64 T - fsum T)
  <= gamma (/ 9007199254740992) D * fabs T + (1 + gamma (/ 9007199254740992) D) * INR m * bpow radix2 (-1075).
Proof. intros D m T Hd Hm Hn; rewrite <- fp64_u, <- fp64_eta in *; apply ftree_error_bound; assumption. Qed.
