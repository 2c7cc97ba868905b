(** * A running (a-posteriori) error analysis of the backward's tile loop.

    The backward kernels of kernels/ojas_kernels/attention_backward.py accumulate one
    tile after the other with [acc = tl.dot (a, b, acc)]: dV and dK over the query
    tiles, dQ over the key tiles.  [acc_chain_error] (ForwardError.v) bounds such a
    chain of [t] accumulating dots by [((1 + g_rel)^t - 1) sum |a_i b_i| + ...]: it
    grows linearly in [t] and charges every step [g_rel |acc|] with [|acc|] bounded
    by the ABSOLUTE sum of all the terms so far, while the real accumulator is a
    SIGNED partial sum, often far smaller (the terms of dV, dK, dQ cancel).

    This file bounds the chain step by step instead.  The caller (Python) computes
    from the exact data, for each tile [t], two numbers: [bp_t] at least
      |Z_t| + rho_t,
    [Z_t] the exact signed sum of the exact terms [z] of the tiles before [t], [rho_t]
    the sum of their per-term errors [r] ([|wt x * w x - z x| <= r x], [wt x * w x]
    the term the kernel multiplies), and [bt_t] at least
      sum_(x in tile t) (|z x| + r x),
    and the bound is
      run_err_split g_acc g_dot g_abs [bp_0; ...] [bt_0; ...] + sum_x r x,
    [run_err_split] the recurrence
      e_(t+1) = (1 + g_acc) e_t + g_acc bp_t + g_dot bt_t + g_abs
    from 0 ([running_split_premise], [acc_chain_running_error]), for an accumulating dot
    [acc_dot_split_model accf n g_acc g_dot g_abs] (NumeratorError.v): the accumulator
    charged [g_acc] (one fp32 rounding [u] for a dot from 0 then added to [acc]: the fp32
    and 3xTF32 instances of ForwardError.v, [blocked_acc_dot_split_model],
    [tf32x3_tc_op_acc_dot_split_model]), the tile's products [g_dot].  The one-constant
    form ([acc_dot_model], [run_err g_rel g_abs bs], [running_premise]: [b_t] bounds
    [|Z_t| + rho_t + sum_tile (|z| + r)]) is the case [g_acc = g_dot = g_rel],
    [bp_t + bt_t = b_t] ([acc_dot_split_of_model], [run_err_split_same],
    [running_split_of_premise]).  Then the same for the kernels:
    [dv_error_acc_running] (dV, as [dv_error_acc] of DvError.v), and
    [grad_error_acc_running_with], [dk_error_acc_running], [dq_error_acc_running]
    (dK and dQ, as [grad_error_acc_with], [dk_error_acc], [dq_error_acc] of
    DkDqError.v), with the score premises per item ([delta x], [X x], the lse's
    error [Dl x] and the magnitude [Am x] of [s2 - lse2]) instead of uniform ones. *)

From Coq Require Import Reals ZArith List Lra Lia Arith.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.DotError Attention.BackwardCorrect.
From Ojas Require Import FloatModel.MixedPrecision FloatModel.BlockedSum.
From Ojas Require Import FloatModel.Notations.
From Ojas Require Import Attention.Float.OnlineSoftmaxError Attention.Float.OnlineSoftmaxTile Attention.Float.ForwardError.
From Ojas Require Import Attention.Float.NumeratorError Attention.Float.DvError Attention.Float.DkDqError.
Import ListNotations.
Open Scope R_scope.

(** ** The running error *)

(** [e_0 = 0], [e_(t+1) = (1 + g) e_t + g b_t + ga]: the error after the tiles whose
    bounds are [bs] (each [b_t] a bound on [|acc| + sum |terms|] of tile [t]'s step). *)
Definition run_err (g ga : R) (bs : list R) : R := fold_left (fun e b => (1 + g) * e + g * b + ga) bs 0.

Lemma run_err_snoc : forall g ga bs b, run_err g ga (bs ++ [b]) = (1 + g) * run_err g ga bs + g * b + ga.
Proof. intros; unfold run_err; rewrite fold_left_app; reflexivity. Qed.

Lemma run_err_from_mono : forall g ga (bs bs' : list R) e e', 0 <= g ->
  Forall2 Rle bs bs' -> e <= e' ->
  fold_left (fun e b => (1 + g) * e + g * b + ga) bs e <= fold_left (fun e b => (1 + g) * e + g * b + ga) bs' e'.
Proof.
  intros g ga bs bs' e e' Hg H; revert e e'; induction H as [|b b' bs bs' Hb _ IH]; intros e e' He;
    cbn [fold_left]; [exact He |].
  apply IH; nra.
Qed.

(** Monotone: pointwise larger bounds, larger error ([g >= 0]; any [ga]). *)
Lemma run_err_mono : forall g ga (bs bs' : list R), 0 <= g -> Forall2 Rle bs bs' ->
  run_err g ga bs <= run_err g ga bs'.
Proof. intros g ga bs bs' Hg H; apply run_err_from_mono; [exact Hg | exact H | lra]. Qed.

(** Nonnegative for [g, ga >= 0] and nonnegative bounds. *)
Lemma run_err_nonneg : forall g ga (bs : list R), 0 <= g -> 0 <= ga -> Forall (fun b => 0 <= b) bs ->
  0 <= run_err g ga bs.
Proof.
  intros g ga bs Hg Hga Hb; unfold run_err.
  assert (E : forall e, 0 <= e -> 0 <= fold_left (fun e b => (1 + g) * e + g * b + ga) bs e).
  { induction Hb as [|b bs Hb0 _ IH]; intros e He; cbn [fold_left]; [exact He |].
    apply IH; nra. }
  apply E; lra.
Qed.

(** ** The one-constant premise *)

(** [bs] bounds, tile by tile, the exact signed prefix sum [|Z_t|], the prefix's
    term errors [rho_t] and the tile's [sum (|z| + r)]. *)
Definition running_premise {T} (z r : T -> R) (tiles : list (list T)) (bs : list R) : Prop :=
  length bs = length tiles /\
  forall t, (t < length tiles)%nat ->
    Rabs (rsum (map z (concat (firstn t tiles)))) + rsum (map r (concat (firstn t tiles)))
    + rsum (map (fun x => Rabs (z x) + r x) (nth t tiles [])) <= nth t bs 0.

(** The bounds that meet [running_premise] with equality. *)
Definition running_bs {T} (z r : T -> R) (tiles : list (list T)) : list R :=
  map (fun t => Rabs (rsum (map z (concat (firstn t tiles)))) + rsum (map r (concat (firstn t tiles)))
                + rsum (map (fun x => Rabs (z x) + r x) (nth t tiles [])))
      (seq 0 (length tiles)).

Lemma running_bs_premise : forall {T} (z r : T -> R) (tiles : list (list T)),
  running_premise z r tiles (running_bs z r tiles).
Proof.
  intros T z r tiles; unfold running_premise, running_bs; split.
  - rewrite map_length, seq_length; reflexivity.
  - intros t Ht; rewrite nth_map_seq0 by exact Ht; apply Rle_refl.
Qed.

(** ** The running error with the accumulator and the products charged apart *)

(** [e_0 = 0], [e_(t+1) = (1 + g_acc) e_t + g_acc bp_t + g_dot bt_t + ga]: the error
    after the tiles whose bounds are [bp] (each [bp_t] a bound on the accumulator
    [|acc|] before tile [t], less the error so far) and [bt] (each [bt_t] a bound on
    tile [t]'s [sum |terms|]), for an [acc_dot_split_model accf n g_acc g_dot ga]. *)
Definition run_err_split (g_acc g_dot ga : R) (bp bt : list R) : R :=
  fold_left (fun e ab => (1 + g_acc) * e + g_acc * fst ab + g_dot * snd ab + ga) (combine bp bt) 0.

Lemma run_err_split_snoc : forall g_acc g_dot ga bp bt a b, length bp = length bt ->
  run_err_split g_acc g_dot ga (bp ++ [a]) (bt ++ [b])
  = (1 + g_acc) * run_err_split g_acc g_dot ga bp bt + g_acc * a + g_dot * b + ga.
Proof. intros; unfold run_err_split; rewrite bw_combine_app, fold_left_app by assumption; reflexivity. Qed.

(** The one-constant recurrence is the case [g_acc = g_dot = g], [b_t = bp_t + bt_t]. *)
Lemma run_err_split_same : forall g ga bp bt,
  run_err_split g g ga bp bt = run_err g ga (map (fun ab => fst ab + snd ab) (combine bp bt)).
Proof.
  intros g ga bp bt; unfold run_err_split, run_err.
  generalize 0; induction (combine bp bt) as [|[a b] l IH]; intros e; cbn [fold_left map fst snd];
    [reflexivity |].
  rewrite IH; f_equal; ring.
Qed.

(** Nonnegative for nonnegative constants and bounds. *)
Lemma run_err_split_nonneg : forall g_acc g_dot ga (bp bt : list R), 0 <= g_acc -> 0 <= g_dot -> 0 <= ga ->
  Forall (fun b => 0 <= b) bp -> Forall (fun b => 0 <= b) bt -> 0 <= run_err_split g_acc g_dot ga bp bt.
Proof.
  intros gc gd ga bp bt Hc Hd Ha Hp Ht; unfold run_err_split.
  assert (E : forall e, 0 <= e ->
            0 <= fold_left (fun e ab => (1 + gc) * e + gc * fst ab + gd * snd ab + ga) (combine bp bt) e).
  { revert bt Ht; induction Hp as [|a bp Ha0 _ IH]; intros bt Ht e He; [exact He |].
    destruct Ht as [|b bt Hb0 Ht]; [exact He |].
    cbn [combine fold_left fst snd]; apply IH; [exact Ht | nra]. }
  apply E; lra.
Qed.

(** ** The generic theorem *)

(** Tile by tile, [bp] bounds the exact signed prefix sum [|Z_t|] plus the prefix's
    term errors [rho_t], [bt] the tile's [sum (|z| + r)]. *)
Definition running_split_premise {T} (z r : T -> R) (tiles : list (list T)) (bp bt : list R) : Prop :=
  length bp = length tiles /\ length bt = length tiles /\
  forall t, (t < length tiles)%nat ->
    Rabs (rsum (map z (concat (firstn t tiles)))) + rsum (map r (concat (firstn t tiles))) <= nth t bp 0
    /\ rsum (map (fun x => Rabs (z x) + r x) (nth t tiles [])) <= nth t bt 0.

(** The bounds that meet [running_split_premise] with equality. *)
Definition running_split_bp {T} (z r : T -> R) (tiles : list (list T)) : list R :=
  map (fun t => Rabs (rsum (map z (concat (firstn t tiles)))) + rsum (map r (concat (firstn t tiles))))
      (seq 0 (length tiles)).

Definition running_split_bt {T} (z r : T -> R) (tiles : list (list T)) : list R :=
  map (fun t => rsum (map (fun x => Rabs (z x) + r x) (nth t tiles []))) (seq 0 (length tiles)).

Lemma running_split_bs_premise : forall {T} (z r : T -> R) (tiles : list (list T)),
  running_split_premise z r tiles (running_split_bp z r tiles) (running_split_bt z r tiles).
Proof.
  intros T z r tiles; unfold running_split_premise, running_split_bp, running_split_bt.
  rewrite !map_length, seq_length; split; [reflexivity | split; [reflexivity |]].
  intros t Ht; rewrite !nth_map_seq0 by exact Ht; split; apply Rle_refl.
Qed.

(** [running_premise]'s bounds [bs] split: [bp] the prefixes' exact part, [bt = bs - bp]
    (the one-constant form is the case [g_acc = g_dot], [bp_t + bt_t = b_t]). *)
Lemma running_split_of_premise : forall {T} (z r : T -> R) (tiles : list (list T)) bs,
  running_premise z r tiles bs ->
  let bp := running_split_bp z r tiles in
  let bt := map (fun ab => fst ab - snd ab) (combine bs bp) in
  running_split_premise z r tiles bp bt /\ map (fun ab => fst ab + snd ab) (combine bp bt) = bs.
Proof.
  intros T z r tiles bs [Hl Hp] bp bt.
  assert (Hbp : length bp = length tiles) by (unfold bp, running_split_bp; rewrite map_length, seq_length; reflexivity).
  assert (Hnth : forall t, (t < length tiles)%nat ->
            nth t bt 0 = nth t bs 0 - nth t bp 0).
  { intros t Ht; unfold bt.
    rewrite (nth_indep _ _ (fst (0, 0) - snd (0, 0))) by (rewrite map_length, combine_length; lia).
    rewrite (map_nth (fun ab => fst ab - snd ab) (combine bs bp) (0, 0) t), combine_nth by lia; reflexivity. }
  assert (Hbt : length bt = length tiles) by (unfold bt; rewrite map_length, combine_length; lia).
  split.
  - split; [exact Hbp | split; [exact Hbt |]]; intros t Ht.
    rewrite Hnth by exact Ht; pose proof (Hp t Ht) as H.
    unfold bp, running_split_bp; rewrite nth_map_seq0 by exact Ht.
    split; [apply Rle_refl | lra].
  - apply (nth_ext _ _ 0 0); [rewrite map_length, combine_length; lia |].
    intros t Ht; rewrite map_length, combine_length in Ht.
    rewrite (nth_indep _ _ (fst (0, 0) + snd (0, 0))) by (rewrite map_length, combine_length; lia).
    rewrite (map_nth (fun ab => fst ab + snd ab) (combine bp bt) (0, 0) t), combine_nth by lia; cbn [fst snd].
    rewrite Hnth by lia; ring.
Qed.

(** The computed terms against the exact ones, summed. *)
Lemma running_items_close : forall {T} (wt w z r : T -> R) (xs : list T),
  (forall x, In x xs -> Rabs (wt x * w x - z x) <= r x) ->
  Rabs (rsum (map (fun x => wt x * w x) xs) - rsum (map z xs)) <= rsum (map r xs)
  /\ rsum (map (fun x => Rabs (wt x * w x)) xs) <= rsum (map (fun x => Rabs (z x) + r x) xs).
Proof.
  intros T wt w z r xs H; induction xs as [|x xs IH].
  - unfold rsum; simpl; rewrite Rminus_0_r, Rabs_R0; lra.
  - cbn [map]; rewrite !rsum_cons.
    destruct IH as [IH1 IH2]; [intros y Hy; apply H; right; exact Hy |].
    pose proof (H x (or_introl eq_refl)) as Hx.
    split.
    + replace (wt x * w x + rsum (map (fun y => wt y * w y) xs) - (z x + rsum (map z xs)))
        with ((wt x * w x - z x) + (rsum (map (fun y => wt y * w y) xs) - rsum (map z xs))) by ring.
      eapply Rle_trans; [apply Rabs_triang | lra].
    + assert (Rabs (wt x * w x) <= Rabs (z x) + r x).
      { replace (wt x * w x) with ((wt x * w x - z x) + z x) by ring.
        eapply Rle_trans; [apply Rabs_triang | lra]. }
      lra.
Qed.

Lemma nth_snoc_at : forall {A} (l : list A) (x d : A) k, k = length l -> nth k (l ++ [x]) d = x.
Proof. intros A l x d k ->; apply nth_middle. Qed.

(** The chain against the exact sum of the COMPUTED terms [wt x * w x]. *)
Lemma acc_chain_running_core : forall {T} accf n g_acc g_dot g_abs (wt w z r : T -> R) (tiles : list (list T)) bp bt,
  acc_dot_split_model accf n g_acc g_dot g_abs -> Forall (fun tl => length tl = n) tiles ->
  (forall x, In x (concat tiles) -> Rabs (wt x * w x - z x) <= r x) ->
  running_split_premise z r tiles bp bt ->
  Rabs (fold_left (fun acc ab => accf acc (fst ab) (snd ab)) (map (fun tl => (map wt tl, map w tl)) tiles) 0
        - rsum (map (fun x => wt x * w x) (concat tiles)))
  <= run_err_split g_acc g_dot g_abs bp bt.
Proof.
  intros T accf n gc gd ga wt w z r tiles; induction tiles as [|tl tiles0 IH] using rev_ind;
    intros bp bt Hm Hn Hx [Hlp [Hlt Hp]].
  - destruct bp as [|b bp]; [| discriminate].
    unfold run_err_split; cbn [map fold_left concat combine]; unfold rsum; cbn [fold_right].
    rewrite Rminus_0_r, Rabs_R0; lra.
  - pose proof (adsm_acc_nonneg _ _ _ _ _ Hm) as Hgc.
    pose proof (adsm_dot_nonneg _ _ _ _ _ Hm) as Hgd.
    rewrite app_length in Hlp, Hlt; cbn [length] in Hlp, Hlt.
    destruct (exists_last (l := bp)) as [bp0 [a Ea]];
      [intros E; subst bp; cbn [length] in Hlp; lia |].
    destruct (exists_last (l := bt)) as [bt0 [b Eb]];
      [intros E; subst bt; cbn [length] in Hlt; lia |].
    subst bp bt; rewrite app_length in Hlp, Hlt; cbn [length] in Hlp, Hlt.
    assert (Hlp0 : length bp0 = length tiles0) by lia.
    assert (Hlt0 : length bt0 = length tiles0) by lia.
    apply Forall_app in Hn; destruct Hn as [Hn0 Hn1].
    assert (Htl : length tl = n) by (inversion Hn1; assumption).
    rewrite concat_app in Hx |- *; cbn [concat] in Hx |- *; rewrite app_nil_r in Hx |- *.
    assert (Hx0 : forall x, In x (concat tiles0) -> Rabs (wt x * w x - z x) <= r x)
      by (intros x Hin; apply Hx, in_or_app; left; exact Hin).
    assert (Hx1 : forall x, In x tl -> Rabs (wt x * w x - z x) <= r x)
      by (intros x Hin; apply Hx, in_or_app; right; exact Hin).
    (* the prefix *)
    assert (Hp0 : running_split_premise z r tiles0 bp0 bt0).
    { split; [exact Hlp0 | split; [exact Hlt0 |]]; intros t Ht.
      assert (Ht' : (t < length (tiles0 ++ [tl]))%nat) by (rewrite app_length; cbn [length]; lia).
      pose proof (Hp t Ht') as H.
      rewrite firstn_app, (proj2 (Nat.sub_0_le t (length tiles0))) in H by lia.
      cbn [firstn] in H; rewrite app_nil_r in H.
      rewrite !app_nth1 in H by lia; exact H. }
    pose proof (IH bp0 bt0 Hm Hn0 Hx0 Hp0) as HI.
    (* the last tile's premise *)
    assert (Hb : Rabs (rsum (map z (concat tiles0))) + rsum (map r (concat tiles0)) <= a
                 /\ rsum (map (fun x => Rabs (z x) + r x) tl) <= b).
    { assert (Ht' : (length tiles0 < length (tiles0 ++ [tl]))%nat) by (rewrite app_length; cbn [length]; lia).
      pose proof (Hp _ Ht') as H.
      rewrite firstn_app, Nat.sub_diag, firstn_all in H; cbn [firstn] in H; rewrite app_nil_r in H.
      rewrite (nth_snoc_at tiles0 tl [] _ eq_refl), (nth_snoc_at bp0 a 0 _ (eq_sym Hlp0)),
        (nth_snoc_at bt0 b 0 _ (eq_sym Hlt0)) in H; exact H. }
    destruct Hb as [Hba Hbb].
    rewrite map_app, fold_left_app, run_err_split_snoc by lia; cbn [map fold_left fst snd].
    set (c := fold_left (fun acc ab => accf acc (fst ab) (snd ab)) (map (fun tl0 => (map wt tl0, map w tl0)) tiles0) 0)
      in *.
    pose proof (adsm_err _ _ _ _ _ Hm c (map wt tl) (map w tl)
                  ltac:(rewrite map_length; exact Htl) ltac:(rewrite map_length; exact Htl)) as He.
    rewrite combine_map_both, map_map in He; cbn [fst snd] in He.
    rewrite map_map in He; cbn [fst snd] in He.
    rewrite map_app, rsum_app.
    destruct (running_items_close wt w z r (concat tiles0) Hx0) as [HY0 _].
    destruct (running_items_close wt w z r tl Hx1) as [_ HA].
    set (Y0 := rsum (map (fun x => wt x * w x) (concat tiles0))) in *.
    set (Z0 := rsum (map z (concat tiles0))) in *.
    set (rho0 := rsum (map r (concat tiles0))) in *.
    set (D := rsum (map (fun x => wt x * w x) tl)) in *.
    set (A := rsum (map (fun x => Rabs (wt x * w x)) tl)) in *.
    set (B := rsum (map (fun x => Rabs (z x) + r x) tl)) in *.
    set (R0 := run_err_split gc gd ga bp0 bt0) in *.
    set (c' := accf c (map wt tl) (map w tl)) in *.
    assert (Hc : Rabs c <= Rabs Z0 + rho0 + R0).
    { replace c with ((c - Y0) + (Y0 - Z0) + Z0) by ring.
      pose proof (Rabs_triang (c - Y0 + (Y0 - Z0)) Z0); pose proof (Rabs_triang (c - Y0) (Y0 - Z0)); lra. }
    assert (E1 : gc * Rabs c <= gc * (R0 + a)) by (apply Rmult_le_compat_l; lra).
    assert (E2 : gd * A <= gd * b) by (apply Rmult_le_compat_l; lra).
    replace (c' - (Y0 + D)) with ((c' - (c + D)) + (c - Y0)) by ring.
    eapply Rle_trans; [apply Rabs_triang | lra].
Qed.

(** The tiles accumulated by [accf] from 0, tile [t]'s terms the products [wt x * w x]
    of its items (each within [r x] of the exact [z x]), against the exact sum of the
    [z]: within [run_err_split g_acc g_dot g_abs bp bt + sum r], [bp], [bt] bounding
    the exact prefix sums and the tiles' sums as [running_split_premise] says.  Covers
    any [acc_dot_split_model] (any [acc_dot_model] through [acc_dot_split_of_model])
    and any tiles of [n] items; does not cover how [bp], [bt] are computed (the
    caller's exact arithmetic) nor the store of the result. *)
Theorem acc_chain_running_error : forall {T} accf n g_acc g_dot g_abs (wt w z r : T -> R) (tiles : list (list T))
    bp bt,
  acc_dot_split_model accf n g_acc g_dot g_abs -> Forall (fun tl => length tl = n) tiles ->
  (forall x, In x (concat tiles) -> Rabs (wt x * w x - z x) <= r x) ->
  running_split_premise z r tiles bp bt ->
  Rabs (fold_left (fun acc ab => accf acc (fst ab) (snd ab)) (map (fun tl => (map wt tl, map w tl)) tiles) 0
        - rsum (map z (concat tiles)))
  <= run_err_split g_acc g_dot g_abs bp bt + rsum (map r (concat tiles)).
Proof.
  intros T accf n gc gd ga wt w z r tiles bp bt Hm Hn Hx Hp.
  pose proof (acc_chain_running_core accf n gc gd ga wt w z r tiles bp bt Hm Hn Hx Hp) as H1.
  destruct (running_items_close wt w z r (concat tiles) Hx) as [H2 _].
  match goal with |- Rabs (?c - ?Z) <= _ =>
    replace (c - Z) with ((c - rsum (map (fun x => wt x * w x) (concat tiles)))
                          + (rsum (map (fun x => wt x * w x) (concat tiles)) - Z)) by ring end.
  eapply Rle_trans; [apply Rabs_triang | lra].
Qed.

(** ** dV *)

Section DV.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

(** [dv_error_acc] with the running bound: the kernel's
    [dv = tl.dot (tl.trans (p.to(dO.dtype)), dO, dv)] over query tiles of [n] rows from
    0 ([dv_kernel_acc], any [acc_dot_split_model]), stored [rnd_s (dv)].  The score premises
    are per query row: [delta x] its score error (natural units), [Dl x] its lse's
    error, [Am x] the magnitude of its [s2 - lse2], [X x] its exponential's factor.  With [P x = exp (scale q_x.k - Lx x)], [H x = (1 + us) (1 + ue) X x],
    [cw = (1 + us) ee + es], the terms [Pd x = vis_x P x dO_x] and their errors
    [rr x = vis_x ((H x - 1) P x + cw) |dO_x|]:
      |rnd_s (dV) - sum_x Pd x| <= (1 + us) (run_err_split g_acc g_dot g_abs bp bt + sum_x rr x) + us S + es,
    [S = sum_x vis_x P x |dO_x|], for any [bp], [bt] meeting
    [running_split_premise Pd rr tiles bp bt] (the caller computes them from the exact
    [Pd] and [rr]).  Not covered: the computation of [bp], [bt], [S], [delta], [X] (the caller's exact arithmetic), FMA
    contraction in [s2 - lse2] (as [dv_error_acc]); no bound on the lse itself ([Dl] is
    a premise). *)
Theorem dv_error_acc_running : forall (accf : R -> list R -> list R -> R) n g_acc g_dot g_abs (dotf : list R -> list R -> R)
    vis c scale k (tiles : list (list (list R * (R * R)))) (Lx delta X Dl Am : list R * (R * R) -> R) bp bt,
  acc_dot_split_model accf n g_acc g_dot g_abs ->
  Forall (fun tl => length tl = n) tiles ->
  (forall x, In x (concat tiles) -> vis x = true ->
     Rabs (score2_with A_ dotf c (fst x) k * ln 2 - scale * dot_R (fst x) k) <= delta x
     /\ Rabs (snd (snd x) * ln 2 - Lx x) <= Dl x
     /\ Rabs (score2_with A_ dotf c (fst x) k - snd (snd x)) <= Am x
     /\ Rpower 2 ((delta x + Dl x) / ln 2 + u * Am x + ea) <= X x) ->
  let P := fun x => exp (scale * dot_R (fst x) k - Lx x) in
  let H := fun x => (1 + us) * ((1 + ue) * X x) in
  let cw := (1 + us) * ee + es in
  let Pd := fun x => if vis x then P x * fst (snd x) else 0 in
  let rr := fun x => if vis x then ((H x - 1) * P x + cw) * Rabs (fst (snd x)) else 0 in
  let S := rsum (map (fun x => if vis x then P x * Rabs (fst (snd x)) else 0) (concat tiles)) in
  running_split_premise Pd rr tiles bp bt ->
  Rabs (ff_rnd S_ (dv_kernel_acc M accf dotf vis c k tiles) - rsum (map Pd (concat tiles)))
  <= (1 + us) * (run_err_split g_acc g_dot g_abs bp bt + rsum (map rr (concat tiles))) + us * S + es.
Proof.
  intros accf n gc gd ga dotf vis c scale k tiles Lx delta X Dl Am bp bt Hm Hn Hx P H cw Pd rr S Hp.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (ff_eta_nonneg A_) as Hea.
  pose proof (ff_u_nonneg S_) as Hus; pose proof (ff_eta_nonneg S_) as Hes.
  pose proof (mp_ue_nonneg M) as Hue; pose proof (mp_eta_e_nonneg M) as Hee.
  set (xs := concat tiles) in *.
  set (wt := dv_w_with M dotf vis c k).
  (* each term *)
  assert (Hterm : forall x, In x xs -> Rabs (wt x * fst (snd x) - Pd x) <= rr x).
  { intros x Hin; unfold wt, dv_w_with, Pd, rr; destruct (vis x) eqn:Ev.
    - destruct (Hx x Hin Ev) as [H1 [H2 [H3 H4]]].
      pose proof (dv_X_ge_1 M (delta x) (Dl x) (Am x) (X x) (Rle_trans _ _ _ (Rabs_pos _) H1)
                    (Rle_trans _ _ _ (Rabs_pos _) H2) (Rle_trans _ _ _ (Rabs_pos _) H3) H4) as HX1.
      pose proof (dv_weight_close_with M dotf c k x scale (Lx x) (delta x) (Dl x) (Am x) (X x) H1 H2 H3 H4) as Hw.
      pose proof (stored_weight_close M _ _ ((1 + ue) * X x) (exp_pos _) ltac:(nra) Hw) as Hs.
      fold (P x) in Hs.
      replace (ff_rnd S_ (dv_p_with M dotf c k x) * fst (snd x) - P x * fst (snd x))
        with ((ff_rnd S_ (dv_p_with M dotf c k x) - P x) * fst (snd x)) by ring.
      rewrite Rabs_mult; apply Rmult_le_compat_r; [apply Rabs_pos |].
      unfold H, cw; exact Hs.
    - rewrite Rmult_0_l, Rminus_0_r, Rabs_R0; lra. }
  pose proof (acc_chain_running_error accf n gc gd ga wt (fun x => fst (snd x)) Pd rr tiles bp bt Hm Hn Hterm Hp) as Hc.
  change (fold_left (fun acc ab => accf acc (fst ab) (snd ab))
            (map (fun tl => (map wt tl, map (fun x => fst (snd x)) tl)) tiles) 0)
    with (dv_kernel_acc M accf dotf vis c k tiles) in Hc.
  fold xs in Hc.
  set (dv := dv_kernel_acc M accf dotf vis c k tiles) in *.
  set (er := run_err_split gc gd ga bp bt + rsum (map rr xs)) in *.
  assert (EPa : rsum (map (fun x => Rabs (Pd x)) xs) = S).
  { unfold S; fold xs; apply rsum_map_ext; intros x _; unfold Pd; destruct (vis x).
    - rewrite Rabs_mult, (Rabs_right (P x)) by (left; apply exp_pos); reflexivity.
    - apply Rabs_R0. }
  assert (HPs : Rabs (rsum (map Pd xs)) <= S) by (rewrite <- EPa; apply bw_rsum_abs).
  pose proof (ff_abs S_ dv) as Hst.
  assert (Hdva : Rabs dv <= S + er)
    by (replace dv with ((dv - rsum (map Pd xs)) + rsum (map Pd xs)) by ring;
        eapply Rle_trans; [apply Rabs_triang | lra]).
  replace (ff_rnd S_ dv - rsum (map Pd xs)) with ((ff_rnd S_ dv - dv) + (dv - rsum (map Pd xs))) by ring.
  eapply Rle_trans; [apply Rabs_triang |].
  assert (us * Rabs dv <= us * (S + er)) by (apply Rmult_le_compat_l; lra).
  lra.
Qed.

End DV.

(** ** dK and dQ *)

Section Grad.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

Section GenericRun.

Variable T : Type.
(** As in DkDqError.v's [GenericWith]: the scores' dot, the two vectors of the
    item's score, its [lse2], the computed [dp], the [delta] of its row and the
    multiplier [w] ([q_ie] or [k_je]). *)
Variable sdot : list R -> list R -> R.
Variables (qv kv : T -> list R) (l2 dp dl w : T -> R).

(** One visible item: the stored [ds] times [w] (an exact product inside the MMA)
    against [P (dP - D) w], with this item's own [X] ([E = (1 + ue) X]). *)
Lemma grad_acc_item_close : forall vis c scale (x : T) (Lx dPx Dx eDx : R) delta Dl Am X eP eDm Ym W,
  vis x = true ->
  Rabs (score2_with A_ sdot c (qv x) (kv x) * ln 2 - scale * dot_R (qv x) (kv x)) <= delta ->
  Rabs (l2 x * ln 2 - Lx) <= Dl ->
  Rabs (score2_with A_ sdot c (qv x) (kv x) - l2 x) <= Am ->
  Rpower 2 ((delta + Dl) / ln 2 + u * Am + ea) <= X ->
  Rabs (dp x - dPx) <= eP -> Rabs (dl x - Dx) <= eDx -> eDx <= eDm ->
  Rabs (dPx - Dx) <= Ym -> Rabs (w x) <= W ->
  let P := exp (scale * dot_R (qv x) (kv x) - Lx) in
  let E := (1 + ue) * X in
  Rabs (grad_w_with M T sdot qv kv l2 dp dl vis c x * w x - P * (dPx - Dx) * w x)
  <= gacc_A M E * (P * Rabs (dPx - Dx) * Rabs (w x)) + gacc_B M E * (P * ((1 + u) * (eP + eDx) + ea) * Rabs (w x))
     + gacc_c M E Ym ((1 + u) * (eP + eDm) + ea) W.
Proof.
  intros vis c scale x Lx dPx Dx eDx delta Dl Am X eP eDm Ym W Ev H1 H2 H3 HX H4 H5 H6 H7 H8 P E.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (ff_eta_nonneg A_) as Hea.
  pose proof (ff_u_nonneg S_) as Hus; pose proof (ff_eta_nonneg S_) as Hes.
  pose proof (mp_ue_nonneg M) as Hue; pose proof (mp_eta_e_nonneg M) as Hee.
  assert (HeP : 0 <= eP) by (eapply Rle_trans; [apply Rabs_pos | exact H4]).
  assert (HeD : 0 <= eDx) by (eapply Rle_trans; [apply Rabs_pos | exact H5]).
  assert (HYm : 0 <= Ym) by (eapply Rle_trans; [apply Rabs_pos | exact H7]).
  assert (HW0 : 0 <= W) by (eapply Rle_trans; [apply Rabs_pos | exact H8]).
  assert (HeDm : 0 <= eDm) by lra.
  pose proof (grad_ds_close_with M T sdot qv kv l2 dp dl c scale x Lx dPx Dx eDx delta Dl Am X eP eDm Ym
                H1 H2 H3 HX H4 H5 H6 H7) as Hds.
  cbv zeta in Hds; fold P E in Hds.
  set (Y := dPx - Dx) in *.
  set (cR := (1 + u) * (eP + eDx) + ea) in *.
  set (K0 := (1 + u) * ee * ((1 + u) * Ym + ((1 + u) * (eP + eDm) + ea)) + ea) in *.
  set (ds := grad_ds_with M T sdot qv kv l2 dp dl c x) in *.
  set (eds := ((1 + u) * (1 + u) * E - 1) * (P * Rabs Y) + (1 + u) * E * (P * cR) + K0) in *.
  assert (HP : 0 < P) by apply exp_pos.
  pose proof (dv_X_ge_1 M delta Dl Am X (Rle_trans _ _ _ (Rabs_pos _) H1) (Rle_trans _ _ _ (Rabs_pos _) H2)
                (Rle_trans _ _ _ (Rabs_pos _) H3) HX) as HX1.
  pose proof (ff_abs S_ ds) as Hst.
  assert (Hsd : Rabs (ff_rnd S_ ds - P * Y) <= (1 + us) * eds + us * (P * Rabs Y) + es).
  { replace (ff_rnd S_ ds - P * Y) with ((ff_rnd S_ ds - ds) + (ds - P * Y)) by ring.
    eapply Rle_trans; [apply Rabs_triang |].
    assert (Rabs ds <= P * Rabs Y + eds).
    { replace ds with ((ds - P * Y) + P * Y) by ring; eapply Rle_trans; [apply Rabs_triang |].
      rewrite Rabs_mult, (Rabs_right P) by lra; lra. }
    assert (us * Rabs ds <= us * (P * Rabs Y + eds)) by (apply Rmult_le_compat_l; lra).
    lra. }
  unfold grad_w_with; rewrite Ev; fold ds.
  replace (ff_rnd S_ ds * w x - P * Y * w x) with ((ff_rnd S_ ds - P * Y) * w x) by ring.
  rewrite Rabs_mult.
  pose proof (Rabs_pos (w x)) as Hw0; pose proof (Rabs_pos Y) as HY0.
  set (aw := Rabs (w x)) in *.
  assert (E1 : Rabs (ff_rnd S_ ds - P * Y) * aw <= ((1 + us) * eds + us * (P * Rabs Y) + es) * aw)
    by (apply Rmult_le_compat_r; lra).
  eapply Rle_trans; [exact E1 |].
  unfold gacc_c, gacc_A, gacc_B, eds; fold K0.
  assert (E2 : ((1 + us) * K0 + es) * aw <= ((1 + us) * K0 + es) * W).
  { apply Rmult_le_compat_l; [| lra].
    assert (0 <= (1 + u) * ee * ((1 + u) * Ym + ((1 + u) * (eP + eDm) + ea))) by (apply Rmult_le_pos; nra).
    unfold K0; nra. }
  nra.
Qed.

(** The running dK / dQ bound with the [dp] dot's error [eP x] per item (the proof of
    [grad_error_acc_running_with], its instance at a constant [eP], and of RunningAccErrorPP.v's
    [grad_error_acc_running_pp]). *)
Lemma grad_error_acc_running_items : forall accf n g_acc g_dot g_abs vis c cs scale ucs (tiles : list (list T))
    (Lx dPx Dx eD delta X eP Dl Am : T -> R) eDm Ym W bp bt,
  acc_dot_split_model accf n g_acc g_dot g_abs -> Forall (fun tl => length tl = n) tiles ->
  0 <= scale -> 0 <= ucs -> Rabs (cs - scale) <= ucs * scale ->
  (forall x, In x (concat tiles) -> vis x = true ->
     Rabs (score2_with A_ sdot c (qv x) (kv x) * ln 2 - scale * dot_R (qv x) (kv x)) <= delta x
     /\ Rabs (l2 x * ln 2 - Lx x) <= Dl x
     /\ Rabs (score2_with A_ sdot c (qv x) (kv x) - l2 x) <= Am x
     /\ Rpower 2 ((delta x + Dl x) / ln 2 + u * Am x + ea) <= X x
     /\ Rabs (dp x - dPx x) <= eP x
     /\ Rabs (dl x - Dx x) <= eD x /\ eD x <= eDm
     /\ Rabs (dPx x - Dx x) <= Ym /\ Rabs (w x) <= W) ->
  let E := fun x => (1 + ue) * X x in
  let Pr := fun x => exp (scale * dot_R (qv x) (kv x) - Lx x) in
  let Pd := fun x => if vis x then Pr x * (dPx x - Dx x) * w x else 0 in
  let h1 := fun x => Pr x * Rabs (dPx x - Dx x) * Rabs (w x) in
  let h2 := fun x => Pr x * ((1 + u) * (eP x + eD x) + ea) * Rabs (w x) in
  let rr := fun x => if vis x then gacc_A M (E x) * h1 x + gacc_B M (E x) * h2 x
                                   + gacc_c M (E x) Ym ((1 + u) * (eP x + eDm) + ea) W else 0 in
  let S1 := rsum (map (fun x => if vis x then Pr x * Rabs (dPx x - Dx x) * Rabs (w x) else 0) (concat tiles)) in
  running_split_premise Pd rr tiles bp bt ->
  Rabs (grad_kernel_acc_with M T sdot qv kv l2 dp dl w accf vis c cs tiles - scale * rsum (map Pd (concat tiles)))
  <= grad_bound M scale ucs (run_err_split g_acc g_dot g_abs bp bt + rsum (map rr (concat tiles))) S1.
Proof.
  intros accf n gc gd ga vis c cs scale ucs tiles Lx dPx Dx eD delta X eP Dl Am eDm Ym W bp bt
    Hm Hn Hs Hucs Hc Hx E Pr Pd h1 h2 rr S1 Hp.
  set (xs := concat tiles) in *.
  set (wt := grad_w_with M T sdot qv kv l2 dp dl vis c).
  assert (Hterm : forall x, In x xs -> Rabs (wt x * w x - Pd x) <= rr x).
  { intros x Hin; unfold wt, Pd, rr; destruct (vis x) eqn:Ev.
    - destruct (Hx x Hin Ev) as [H1 [H2 [H3 [H4 [H5 [H6 [H7 [H8 H9]]]]]]]].
      exact (grad_acc_item_close vis c scale x (Lx x) (dPx x) (Dx x) (eD x) (delta x)
               (Dl x) (Am x) (X x) (eP x) eDm Ym W Ev H1 H2 H3 H4 H5 H6 H7 H8 H9).
    - unfold grad_w_with; rewrite Ev, Rmult_0_l, Rminus_0_r, Rabs_R0; lra. }
  pose proof (acc_chain_running_error accf n gc gd ga wt w Pd rr tiles bp bt Hm Hn Hterm Hp) as Hc'.
  fold xs in Hc'.
  assert (EPd : rsum (map (fun x => Rabs (Pd x)) xs) = S1).
  { unfold S1; apply rsum_map_ext; intros x _; unfold Pd; destruct (vis x).
    - rewrite !Rabs_mult, (Rabs_right (Pr x)) by (left; apply exp_pos); reflexivity.
    - apply Rabs_R0. }
  assert (HPs : Rabs (rsum (map Pd xs)) <= S1) by (rewrite <- EPd; apply bw_rsum_abs).
  exact (scale_store_close M _ _ S1 _ cs scale ucs Hs Hucs Hc HPs Hc').
Qed.
(** [grad_error_acc_with] with the running bound: the kernel's
    [acc = tl.dot (ds^T, w, acc)] over tiles of [n] items from 0 (any
    [acc_dot_split_model]), then [rnd (acc * cs)] stored ([grad_kernel_acc_with]).  The
    score premises are per item: [delta x] its score error, [Dl x] its lse's error,
    [Am x] the magnitude of its [s2 - lse2], [X x] its exponential's factor
    ([E x = (1 + ue) X x]); [eP], [eDm], [Ym], [W] stay uniform.
    With [Pr x = exp (scale qv_x.kv_x - Lx x)], the exact terms
    [Pd x = vis_x Pr x (dPx x - Dx x) w x], their errors
    [rr x = vis_x (gacc_A (E x) h1 x + gacc_B (E x) h2 x + gacc_c (E x) Ym cRm W)]
    ([h1], [h2] the per-item terms of [S1], [SR] of [grad_error_acc_with],
    [cRm = (1 + u) (eP + eDm) + ea]):
      |kernel - scale sum_x Pd x| <= grad_bound scale ucs (run_err_split g_acc g_dot g_abs bp bt + sum_x rr x) S1
    for any [bp], [bt] meeting [running_split_premise Pd rr tiles bp bt].  Not covered:
    the computation of [bp], [bt], [S1], [delta], [X] (the caller's exact arithmetic), FMA
    contraction in [s2 - lse2]; the errors of the saved lse and of [delta] are
    premises ([Dl], [eD]), as in [grad_error_acc_with]. *)
Theorem grad_error_acc_running_with : forall accf n g_acc g_dot g_abs vis c cs scale ucs (tiles : list (list T))
    (Lx dPx Dx eD delta X Dl Am : T -> R) eP eDm Ym W bp bt,
  acc_dot_split_model accf n g_acc g_dot g_abs -> Forall (fun tl => length tl = n) tiles ->
  0 <= scale -> 0 <= ucs -> Rabs (cs - scale) <= ucs * scale ->
  (forall x, In x (concat tiles) -> vis x = true ->
     Rabs (score2_with A_ sdot c (qv x) (kv x) * ln 2 - scale * dot_R (qv x) (kv x)) <= delta x
     /\ Rabs (l2 x * ln 2 - Lx x) <= Dl x
     /\ Rabs (score2_with A_ sdot c (qv x) (kv x) - l2 x) <= Am x
     /\ Rpower 2 ((delta x + Dl x) / ln 2 + u * Am x + ea) <= X x
     /\ Rabs (dp x - dPx x) <= eP
     /\ Rabs (dl x - Dx x) <= eD x /\ eD x <= eDm
     /\ Rabs (dPx x - Dx x) <= Ym /\ Rabs (w x) <= W) ->
  let E := fun x => (1 + ue) * X x in
  let Pr := fun x => exp (scale * dot_R (qv x) (kv x) - Lx x) in
  let Pd := fun x => if vis x then Pr x * (dPx x - Dx x) * w x else 0 in
  let h1 := fun x => Pr x * Rabs (dPx x - Dx x) * Rabs (w x) in
  let h2 := fun x => Pr x * ((1 + u) * (eP + eD x) + ea) * Rabs (w x) in
  let rr := fun x => if vis x then gacc_A M (E x) * h1 x + gacc_B M (E x) * h2 x
                                   + gacc_c M (E x) Ym ((1 + u) * (eP + eDm) + ea) W else 0 in
  let S1 := rsum (map (fun x => if vis x then Pr x * Rabs (dPx x - Dx x) * Rabs (w x) else 0) (concat tiles)) in
  running_split_premise Pd rr tiles bp bt ->
  Rabs (grad_kernel_acc_with M T sdot qv kv l2 dp dl w accf vis c cs tiles - scale * rsum (map Pd (concat tiles)))
  <= grad_bound M scale ucs (run_err_split g_acc g_dot g_abs bp bt + rsum (map rr (concat tiles))) S1.
Proof.
  intros accf n gc gd ga vis c cs scale ucs tiles Lx dPx Dx eD delta X Dl Am eP.
  exact (grad_error_acc_running_items accf n gc gd ga vis c cs scale ucs tiles Lx dPx Dx eD delta X (fun _ => eP) Dl Am).
Qed.


End GenericRun.

(** dK ([dk_kernel_acc]: the query tiles of the key's group, [dk = tl.dot (ds^T, q, dk)]):
    [grad_error_acc_running_with] as [dk_error_acc] specializes [grad_error_acc_with],
    [dp]'s [pdot] of a [dot_model] ([eP = gp_rel Pd + gp_abs], [Pd] a bound on
    [dot_abs v dO_i]), per query row [delta x], [Dl x], [Am x] and [X x].  The exact terms
    [Gt x = vis_x Pr x (dP_x - D_x) q_xe].  Not covered: as [grad_error_acc_running_with]. *)
Theorem dk_error_acc_running : forall (accf : R -> list R -> list R -> R) n g_acc g_dot g_abs
    (sdot pdot : list R -> list R -> R) (gp_rel gp_abs : R) vis c cs scale ucs k v e tiles
    (Lx Dx eD delta X Dl Am : (list R * list R) * (R * R) -> R) Ev Pd eDm Ym W bp bt,
  acc_dot_split_model accf n g_acc g_dot g_abs -> Forall (fun tl => length tl = n) tiles ->
  0 <= scale -> 0 <= ucs -> Rabs (cs - scale) <= ucs * scale ->
  length v = Ev -> dot_model pdot Ev gp_rel gp_abs ->
  (forall x, In x (concat tiles) -> vis x = true ->
     Rabs (score2_with A_ sdot c k (fst (fst x)) * ln 2 - scale * dot_R k (fst (fst x))) <= delta x
     /\ Rabs (fst (snd x) * ln 2 - Lx x) <= Dl x
     /\ Rabs (score2_with A_ sdot c k (fst (fst x)) - fst (snd x)) <= Am x
     /\ Rpower 2 ((delta x + Dl x) / ln 2 + u * Am x + ea) <= X x
     /\ length (snd (fst x)) = Ev /\ dot_abs v (snd (fst x)) <= Pd
     /\ Rabs (snd (snd x) - Dx x) <= eD x /\ eD x <= eDm
     /\ Rabs (dot_R v (snd (fst x)) - Dx x) <= Ym /\ Rabs (nth e (fst (fst x)) 0) <= W) ->
  let eP := gp_rel * Pd + gp_abs in
  let E := fun x => (1 + ue) * X x in
  let Pr := fun x => exp (scale * dot_R k (fst (fst x)) - Lx x) in
  let Y := fun x => dot_R v (snd (fst x)) - Dx x in
  let Gt := fun x => if vis x then Pr x * Y x * nth e (fst (fst x)) 0 else 0 in
  let rr := fun x => if vis x then gacc_A M (E x) * (Pr x * Rabs (Y x) * Rabs (nth e (fst (fst x)) 0))
                                   + gacc_B M (E x) * (Pr x * ((1 + u) * (eP + eD x) + ea) * Rabs (nth e (fst (fst x)) 0))
                                   + gacc_c M (E x) Ym ((1 + u) * (eP + eDm) + ea) W else 0 in
  let S1 := rsum (map (fun x => if vis x then Pr x * Rabs (Y x) * Rabs (nth e (fst (fst x)) 0) else 0)
                      (concat tiles)) in
  running_split_premise Gt rr tiles bp bt ->
  Rabs (dk_kernel_acc M accf sdot pdot vis c cs k v e tiles - scale * rsum (map Gt (concat tiles)))
  <= grad_bound M scale ucs (run_err_split g_acc g_dot g_abs bp bt + rsum (map rr (concat tiles))) S1.
Proof.
  intros accf n g_acc g_dot g_abs sdot pdot gp_rel gp_abs vis c cs scale ucs k v e tiles Lx Dx eD delta X Dl Am Ev Pd
    eDm Ym W bp bt Hm Hn Hs Hucs Hc Hv Hdm Hx eP E Pr Y Gt rr S1 Hp.
  apply (grad_error_acc_running_with _ sdot (fun _ => k) (fun x => fst (fst x)) (fun x => fst (snd x))
           (fun x => pdot v (snd (fst x))) (fun x => snd (snd x))
           (fun x => nth e (fst (fst x)) 0) accf n g_acc g_dot g_abs vis c cs scale ucs tiles Lx
           (fun x => dot_R v (snd (fst x))) Dx eD delta X Dl Am eP eDm Ym W bp bt); auto.
  intros x Hin Hvis; destruct (Hx x Hin Hvis) as [H1 [H2 [H3 [H4 [H5 [H6 [H7 [H8 [H9 H10]]]]]]]]].
  repeat split; auto.
  apply (dm_eP_bound pdot Ev gp_rel gp_abs Pd _ _ Hdm); auto.
Qed.

(** dQ ([dq_kernel_acc]: the key tiles, [dq = tl.dot (ds, k, dq)]) of one query row
    ([lse2], [delta] of the row, [Lx], [D], [eD] uniform): [grad_error_acc_running_with]
    as [dq_error_acc] specializes [grad_error_acc_with], per key row [delta y], [Am y]
    and [X y] (the row's [Dl] is one number).  The exact terms [Gt y = vis_y Pr y (dP_y - D) k_ye].  Not covered: as
    [grad_error_acc_running_with]. *)
Theorem dq_error_acc_running : forall (accf : R -> list R -> list R -> R) n g_acc g_dot g_abs
    (sdot pdot : list R -> list R -> R) (gp_rel gp_abs : R) vis c cs scale ucs q dO l2 dl e tiles (Lx D eD : R)
    (delta X Am : list R * list R -> R) Dl Ev Pd Ym W bp bt,
  acc_dot_split_model accf n g_acc g_dot g_abs -> Forall (fun tl => length tl = n) tiles ->
  0 <= scale -> 0 <= ucs -> Rabs (cs - scale) <= ucs * scale ->
  length dO = Ev -> dot_model pdot Ev gp_rel gp_abs ->
  Rabs (l2 * ln 2 - Lx) <= Dl -> Rabs (dl - D) <= eD ->
  (forall y, In y (concat tiles) -> vis y = true ->
     Rabs (score2_with A_ sdot c q (fst y) * ln 2 - scale * dot_R q (fst y)) <= delta y
     /\ Rabs (score2_with A_ sdot c q (fst y) - l2) <= Am y
     /\ Rpower 2 ((delta y + Dl) / ln 2 + u * Am y + ea) <= X y
     /\ length (snd y) = Ev /\ dot_abs dO (snd y) <= Pd
     /\ Rabs (dot_R dO (snd y) - D) <= Ym /\ Rabs (nth e (fst y) 0) <= W) ->
  let eP := gp_rel * Pd + gp_abs in
  let E := fun y => (1 + ue) * X y in
  let Pr := fun y => exp (scale * dot_R q (fst y) - Lx) in
  let Y := fun y => dot_R dO (snd y) - D in
  let Gt := fun y => if vis y then Pr y * Y y * nth e (fst y) 0 else 0 in
  let rr := fun y => if vis y then gacc_A M (E y) * (Pr y * Rabs (Y y) * Rabs (nth e (fst y) 0))
                                   + gacc_B M (E y) * (Pr y * ((1 + u) * (eP + eD) + ea) * Rabs (nth e (fst y) 0))
                                   + gacc_c M (E y) Ym ((1 + u) * (eP + eD) + ea) W else 0 in
  let S1 := rsum (map (fun y => if vis y then Pr y * Rabs (Y y) * Rabs (nth e (fst y) 0) else 0) (concat tiles)) in
  running_split_premise Gt rr tiles bp bt ->
  Rabs (dq_kernel_acc M accf sdot pdot vis c cs q dO l2 dl e tiles - scale * rsum (map Gt (concat tiles)))
  <= grad_bound M scale ucs (run_err_split g_acc g_dot g_abs bp bt + rsum (map rr (concat tiles))) S1.
Proof.
  intros accf n g_acc g_dot g_abs sdot pdot gp_rel gp_abs vis c cs scale ucs q dO l2 dl e tiles Lx D eD delta X Am Dl
    Ev Pd Ym W bp bt Hm Hn Hs Hucs Hc Hd Hdm Hl HdD Hx eP E Pr Y Gt rr S1 Hp.
  apply (grad_error_acc_running_with _ sdot (fun _ => q) fst (fun _ => l2) (fun y => pdot dO (snd y)) (fun _ => dl)
           (fun y => nth e (fst y) 0) accf n g_acc g_dot g_abs vis c cs scale ucs tiles (fun _ => Lx)
           (fun y => dot_R dO (snd y)) (fun _ => D) (fun _ => eD) delta X (fun _ => Dl) Am eP eD Ym W bp bt); auto.
  intros y Hin Hvis; destruct (Hx y Hin Hvis) as [H1 [H2 [H3 [H4 [H5 [H6 H7]]]]]].
  repeat split; auto; try lra.
  apply (dm_eP_bound pdot Ev gp_rel gp_abs Pd _ _ Hdm); auto.
Qed.

End Grad.
