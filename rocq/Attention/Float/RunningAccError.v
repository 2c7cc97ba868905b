(** * A running (a-posteriori) error analysis of the backward's tile loop.

    The backward kernels of kernels/ojas_kernels/attention_backward.py accumulate one
    tile after the other with [acc = tl.dot (a, b, acc)]: dV and dK over the query
    tiles, dQ over the key tiles.  [acc_chain_error] (ForwardError.v) bounds such a
    chain of [t] accumulating dots by [((1 + g_rel)^t - 1) sum |a_i b_i| + ...]: it
    grows linearly in [t] and charges every step [g_rel |acc|] with [|acc|] bounded
    by the ABSOLUTE sum of all the terms so far, while the real accumulator is a
    SIGNED partial sum, often far smaller (the terms of dV, dK, dQ cancel).

    This file bounds the chain step by step instead.  The caller (Python) computes
    from the exact data, for each tile [t], a number [b_t] at least
      |Z_t| + rho_t + sum_(x in tile t) (|z x| + r x),
    [Z_t] the exact signed sum of the exact terms [z] of the tiles before [t], [rho_t]
    the sum of their per-term errors [r] ([|wt x * w x - z x| <= r x], [wt x * w x]
    the term the kernel multiplies), and the bound is
      run_err g_rel g_abs [b_0; ...; b_(T-1)] + sum_x r x,
    [run_err] the recurrence [e_(t+1) = (1 + g_rel) e_t + g_rel b_t + g_abs] from 0
    ([running_premise], [acc_chain_running_error]).  Then the same for the kernels:
    [dv_error_acc_running] (dV, as [dv_error_acc] of DvError.v), and
    [grad_error_acc_running_with], [dk_error_acc_running], [dq_error_acc_running]
    (dK and dQ, as [grad_error_acc_with], [dk_error_acc], [dq_error_acc] of
    DkDqError.v), with the score premises per item ([delta x], [X x]) instead of
    uniform ones. *)

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

(** ** The generic theorem *)

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

(** The chain against the exact sum of the COMPUTED terms [wt x * w x]. *)
Lemma acc_chain_running_core : forall {T} accf n g_rel g_abs (wt w z r : T -> R) (tiles : list (list T)) bs,
  acc_dot_model accf n g_rel g_abs -> Forall (fun tl => length tl = n) tiles ->
  (forall x, In x (concat tiles) -> Rabs (wt x * w x - z x) <= r x) ->
  running_premise z r tiles bs ->
  Rabs (fold_left (fun acc ab => accf acc (fst ab) (snd ab)) (map (fun tl => (map wt tl, map w tl)) tiles) 0
        - rsum (map (fun x => wt x * w x) (concat tiles)))
  <= run_err g_rel g_abs bs.
Proof.
  intros T accf n g ga wt w z r tiles; induction tiles as [|tl tiles0 IH] using rev_ind;
    intros bs Hm Hn Hx [Hl Hp].
  - destruct bs as [|b bs]; [| discriminate].
    unfold run_err; cbn [map fold_left concat]; unfold rsum; cbn [fold_right].
    rewrite Rminus_0_r, Rabs_R0; lra.
  - pose proof (adm_rel_nonneg _ _ _ _ Hm) as Hg.
    rewrite app_length in Hl; cbn [length] in Hl.
    destruct (exists_last (l := bs)) as [bs0 [b Eb]];
      [intros E; subst bs; cbn [length] in Hl; lia |].
    subst bs; rewrite app_length in Hl; cbn [length] in Hl.
    assert (Hl0 : length bs0 = length tiles0) by lia.
    apply Forall_app in Hn; destruct Hn as [Hn0 Hn1].
    assert (Htl : length tl = n) by (inversion Hn1; assumption).
    rewrite concat_app in Hx |- *; cbn [concat] in Hx |- *; rewrite app_nil_r in Hx |- *.
    assert (Hx0 : forall x, In x (concat tiles0) -> Rabs (wt x * w x - z x) <= r x)
      by (intros x Hin; apply Hx, in_or_app; left; exact Hin).
    assert (Hx1 : forall x, In x tl -> Rabs (wt x * w x - z x) <= r x)
      by (intros x Hin; apply Hx, in_or_app; right; exact Hin).
    (* the prefix *)
    assert (Hp0 : running_premise z r tiles0 bs0).
    { split; [exact Hl0 |]; intros t Ht.
      assert (Ht' : (t < length (tiles0 ++ [tl]))%nat) by (rewrite app_length; cbn [length]; lia).
      pose proof (Hp t Ht') as H.
      rewrite firstn_app, (proj2 (Nat.sub_0_le t (length tiles0))) in H by lia.
      cbn [firstn] in H; rewrite app_nil_r in H.
      rewrite app_nth1 in H by exact Ht; rewrite app_nth1 in H by lia; exact H. }
    pose proof (IH bs0 Hm Hn0 Hx0 Hp0) as HI.
    (* the last tile's premise *)
    assert (Hb : Rabs (rsum (map z (concat tiles0))) + rsum (map r (concat tiles0))
                 + rsum (map (fun x => Rabs (z x) + r x) tl) <= b).
    { assert (Ht' : (length tiles0 < length (tiles0 ++ [tl]))%nat) by (rewrite app_length; cbn [length]; lia).
      pose proof (Hp _ Ht') as H.
      rewrite firstn_app, Nat.sub_diag, firstn_all in H; cbn [firstn] in H; rewrite app_nil_r in H.
      rewrite nth_middle in H; rewrite <- Hl0, nth_middle in H; exact H. }
    rewrite map_app, fold_left_app, run_err_snoc; cbn [map fold_left fst snd].
    set (c := fold_left (fun acc ab => accf acc (fst ab) (snd ab)) (map (fun tl0 => (map wt tl0, map w tl0)) tiles0) 0)
      in *.
    pose proof (adm_err _ _ _ _ Hm c (map wt tl) (map w tl)
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
    set (R0 := run_err g ga bs0) in *.
    set (c' := accf c (map wt tl) (map w tl)) in *.
    assert (Hc : Rabs c <= Rabs Z0 + rho0 + R0).
    { replace c with ((c - Y0) + (Y0 - Z0) + Z0) by ring.
      pose proof (Rabs_triang (c - Y0 + (Y0 - Z0)) Z0); pose proof (Rabs_triang (c - Y0) (Y0 - Z0)); lra. }
    assert (E1 : g * (Rabs c + A) <= g * (R0 + b)) by (apply Rmult_le_compat_l; lra).
    replace (c' - (Y0 + D)) with ((c' - (c + D)) + (c - Y0)) by ring.
    eapply Rle_trans; [apply Rabs_triang | lra].
Qed.

(** The tiles accumulated by [accf] from 0, tile [t]'s terms the products [wt x * w x]
    of its items (each within [r x] of the exact [z x]), against the exact sum of the
    [z]: within [run_err g_rel g_abs bs + sum r], [bs] bounding the exact prefix sums
    as [running_premise] says.  Covers any [acc_dot_model] and any tiles of [n] items;
    does not cover how [bs] are computed (the caller's exact arithmetic) nor the
    store of the result. *)
Theorem acc_chain_running_error : forall {T} accf n g_rel g_abs (wt w z r : T -> R) (tiles : list (list T)) bs,
  acc_dot_model accf n g_rel g_abs -> Forall (fun tl => length tl = n) tiles ->
  (forall x, In x (concat tiles) -> Rabs (wt x * w x - z x) <= r x) ->
  running_premise z r tiles bs ->
  Rabs (fold_left (fun acc ab => accf acc (fst ab) (snd ab)) (map (fun tl => (map wt tl, map w tl)) tiles) 0
        - rsum (map z (concat tiles)))
  <= run_err g_rel g_abs bs + rsum (map r (concat tiles)).
Proof.
  intros T accf n g ga wt w z r tiles bs Hm Hn Hx Hp.
  pose proof (acc_chain_running_core accf n g ga wt w z r tiles bs Hm Hn Hx Hp) as H1.
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
    0 ([dv_kernel_acc], any [acc_dot_model]), stored [rnd_s (dv)].  The score premises
    are per query row: [delta x] its score error (natural units), [X x] its
    exponential's factor; [Dl] (the lse error) and [Am] (the magnitude of [s2 - lse2])
    stay uniform.  With [P x = exp (scale q_x.k - Lx x)], [H x = (1 + us) (1 + ue) X x],
    [cw = (1 + us) ee + es], the terms [Pd x = vis_x P x dO_x] and their errors
    [rr x = vis_x ((H x - 1) P x + cw) |dO_x|]:
      |rnd_s (dV) - sum_x Pd x| <= (1 + us) (run_err g_rel g_abs bs + sum_x rr x) + us S + es,
    [S = sum_x vis_x P x |dO_x|], for any [bs] meeting [running_premise Pd rr tiles bs]
    (the caller computes them from the exact [Pd] and [rr]).  Not covered: the
    computation of [bs], [S], [delta], [X] (the caller's exact arithmetic), FMA
    contraction in [s2 - lse2] (as [dv_error_acc]); no bound on the lse itself ([Dl] is
    a premise). *)
Theorem dv_error_acc_running : forall (accf : R -> list R -> list R -> R) n g_rel g_abs (dotf : list R -> list R -> R)
    vis c scale k (tiles : list (list (list R * (R * R)))) (Lx delta X : list R * (R * R) -> R) Dl Am bs,
  acc_dot_model accf n g_rel g_abs ->
  Forall (fun tl => length tl = n) tiles ->
  (forall x, In x (concat tiles) -> vis x = true ->
     Rabs (score2_with A_ dotf c (fst x) k * ln 2 - scale * dot_R (fst x) k) <= delta x
     /\ Rabs (snd (snd x) * ln 2 - Lx x) <= Dl
     /\ Rabs (score2_with A_ dotf c (fst x) k - snd (snd x)) <= Am
     /\ Rpower 2 (2 * (delta x + Dl) + u * Am + ea) <= X x) ->
  let P := fun x => exp (scale * dot_R (fst x) k - Lx x) in
  let H := fun x => (1 + us) * ((1 + ue) * X x) in
  let cw := (1 + us) * ee + es in
  let Pd := fun x => if vis x then P x * fst (snd x) else 0 in
  let rr := fun x => if vis x then ((H x - 1) * P x + cw) * Rabs (fst (snd x)) else 0 in
  let S := rsum (map (fun x => if vis x then P x * Rabs (fst (snd x)) else 0) (concat tiles)) in
  running_premise Pd rr tiles bs ->
  Rabs (ff_rnd S_ (dv_kernel_acc M accf dotf vis c k tiles) - rsum (map Pd (concat tiles)))
  <= (1 + us) * (run_err g_rel g_abs bs + rsum (map rr (concat tiles))) + us * S + es.
Proof.
  intros accf n g ga dotf vis c scale k tiles Lx delta X Dl Am bs Hm Hn Hx P H cw Pd rr S Hp.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (ff_eta_nonneg A_) as Hea.
  pose proof (ff_u_nonneg S_) as Hus; pose proof (ff_eta_nonneg S_) as Hes.
  pose proof (mp_ue_nonneg M) as Hue; pose proof (mp_eta_e_nonneg M) as Hee.
  set (xs := concat tiles) in *.
  set (wt := dv_w_with M dotf vis c k).
  (* each term *)
  assert (Hterm : forall x, In x xs -> Rabs (wt x * fst (snd x) - Pd x) <= rr x).
  { intros x Hin; unfold wt, dv_w_with, Pd, rr; destruct (vis x) eqn:Ev.
    - destruct (Hx x Hin Ev) as [H1 [H2 [H3 H4]]].
      pose proof (dv_X_ge_1 M (delta x) Dl Am (X x) (Rle_trans _ _ _ (Rabs_pos _) H1)
                    (Rle_trans _ _ _ (Rabs_pos _) H2) (Rle_trans _ _ _ (Rabs_pos _) H3) H4) as HX1.
      pose proof (dv_weight_close_with M dotf c k x scale (Lx x) (delta x) Dl Am (X x) H1 H2 H3 H4) as Hw.
      pose proof (stored_weight_close M _ _ ((1 + ue) * X x) (exp_pos _) ltac:(nra) Hw) as Hs.
      fold (P x) in Hs.
      replace (ff_rnd S_ (dv_p_with M dotf c k x) * fst (snd x) - P x * fst (snd x))
        with ((ff_rnd S_ (dv_p_with M dotf c k x) - P x) * fst (snd x)) by ring.
      rewrite Rabs_mult; apply Rmult_le_compat_r; [apply Rabs_pos |].
      unfold H, cw; exact Hs.
    - rewrite Rmult_0_l, Rminus_0_r, Rabs_R0; lra. }
  pose proof (acc_chain_running_error accf n g ga wt (fun x => fst (snd x)) Pd rr tiles bs Hm Hn Hterm Hp) as Hc.
  change (fold_left (fun acc ab => accf acc (fst ab) (snd ab))
            (map (fun tl => (map wt tl, map (fun x => fst (snd x)) tl)) tiles) 0)
    with (dv_kernel_acc M accf dotf vis c k tiles) in Hc.
  fold xs in Hc.
  set (dv := dv_kernel_acc M accf dotf vis c k tiles) in *.
  set (er := run_err g ga bs + rsum (map rr xs)) in *.
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
