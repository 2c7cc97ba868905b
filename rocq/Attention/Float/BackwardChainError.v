(** * The attention backward's dQ from the inputs: the forward's saved lse and output composed in.

    [dq_error] (DkDqError.v) bounds the dQ kernel's coordinate given the
    errors of what it reads from the forward as premises: [|lse2 ln 2 - LSE| <= Dl]
    for [lse2 = rnd (lse * c2)], and [|delta - D| <= eD] for the kernel's
    [delta = tl.sum (o * dO)].  Here both are discharged:
    - [lse] is the forward kernel's saved log-sum-exp of the row
      ([fwd_lse]: its loop from its start under the mask, [rnd (rnd (m + lg l) * cl)]),
      within [lse_bound] of the exact [LSE] by [attention_lse_error_masked]
      (SavedLseError.v); [lse2_close] (DvError.v) turns that into [Dl] and the
      magnitude [Am];
    - [o] is the forward kernel's stored output row ([fwd_out], one run per
      value coordinate), each coordinate within [afp_rel W_c + afp_abs] of the
      exact [O_c] by [attention_forward_posteriori_masked] (ForwardPosteriori.v),
      [W_c = sum_j P_j |v_jc|]; [delta] is [tl.sum] of the rounded products
      [o_c dO_c] by any tree of depth at most [Dd] ([delta_close]); the two
      compose by [dot_R_perturb_each]: [eD] below, against [D = dO . O] of the
      EXACT output.
    [dq_error_from_forward] is then [dq_error] at these [Dl], [Am], [eD]: its
    premises are about the inputs (lengths, [sum |q k| <= P], [|v| <= V],
    [|LSE| <= Lm], [sum |dO v| <= Pd], [|dP - D| <= Ym], [|k| <= W]), the
    rounding model and its constants ([afe_premises], [X]), the kernels'
    tilings, the [tl.log2] range ([lg] within [el] on [[lmin, lmax]], a Section
    hypothesis as in SavedLseError.v) and the [delta] tree; none about the
    error of [lse] or [delta].

    The forward is stated per value coordinate [j < Ev]: its tiles [fts j] of
    (key, [v_j]) pairs and mask [fvis j] (for the kernel, the same key tiles
    and mask for every [j]); the lse is coordinate [0]'s run (the running max
    and sum do not read the values).  The exact dQ is the gradient when the
    backward's visible keys ([btiles], [bvis]) are the forward's
    ([attention_backward_dQ_is_derive], BackwardCorrect.v).  The scores' and
    [dp]'s dots are the blocked fp32 dot ([score2], [blocked_dot]) as in
    [dq_error], [attention_lse_error_masked] and [attention_forward_posteriori_masked].

    Not covered: as in those theorems (the order inside the MMAs and their
    accumulation, FMA contraction, [tl.sum]'s padding zeros, additive masks,
    overflow, [exp2]'s error a field of the model); the [_acc] / tensor-core /
    3xTF32 variants and dK are not composed here. *)

From Coq Require Import Reals ZArith List Lra Lia Arith.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.DotError.
From Ojas Require Import FloatModel.MixedPrecision FloatModel.BlockedSum.
From Ojas Require Import FloatModel.Notations.
From Ojas Require Import Attention.Float.OnlineSoftmaxTile Attention.Float.ForwardError.
From Ojas Require Import Attention.Float.ForwardPosteriori Attention.Float.SavedLseError.
From Ojas Require Import Attention.Float.DvError Attention.Float.DkDqError.
Import ListNotations.
Open Scope R_scope.

(** [|dO . o - dO . O| <= sum_c e_c |dO_c|] when every coordinate of [o] is
    within its own [e_c] of [O]'s ([dot_R_perturb] with one [e] for all). *)
Theorem dot_R_perturb_each : forall o O es d, length o = length O -> length es = length o ->
  (forall i, (i < length o)%nat -> Rabs (nth i o 0 - nth i O 0) <= nth i es 0) ->
  Rabs (dot_R o d - dot_R O d) <= dot_R es (map Rabs d).
Proof.
  induction o as [|x o IH]; intros [|y O] [|z es] d Hl He H; try discriminate.
  - unfold dot_R; cbn [combine map]; unfold rsum; simpl; rewrite Rminus_0_r, Rabs_R0; lra.
  - destruct d as [|w d].
    + unfold dot_R; cbn [combine map]; unfold rsum; simpl; rewrite Rminus_0_r, Rabs_R0; lra.
    + assert (Hx : Rabs (x - y) <= z) by exact (H 0%nat ltac:(simpl; lia)).
      assert (IHo : Rabs (dot_R o d - dot_R O d) <= dot_R es (map Rabs d)).
      { apply IH; [simpl in Hl; lia | simpl in He; lia |].
        intros i Hi; exact (H (S i) ltac:(simpl; lia)). }
      unfold dot_R in *; cbn [combine map]; rewrite !rsum_cons; cbn [fst snd].
      set (a := rsum (map (fun xy => fst xy * snd xy) (combine o d))) in *.
      set (b := rsum (map (fun xy => fst xy * snd xy) (combine O d))) in *.
      replace (x * w + a - (y * w + b)) with ((x - y) * w + (a - b)) by ring.
      eapply Rle_trans; [apply Rabs_triang |]; rewrite Rabs_mult.
      assert (Rabs (x - y) * Rabs w <= z * Rabs w) by (apply Rmult_le_compat_r; [apply Rabs_pos | exact Hx]).
      lra.
Qed.

Lemma nth_map_seq : forall (f : nat -> R) n i, (i < n)%nat -> nth i (map f (seq 0 n)) 0 = f i.
Proof.
  intros f n i Hi.
  rewrite (nth_indep _ 0 (f 0%nat)) by (rewrite map_length, seq_length; lia).
  rewrite map_nth, seq_nth by lia; reflexivity.
Qed.

Section Chain.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

(** The kernel's [tl.log2], within [el] of [log2] on [[lmin, lmax]] (SavedLseError.v). *)
Variable lg : R -> R.
Variables el lmin lmax : R.
Hypothesis lg_err : forall x, lmin <= x <= lmax -> Rabs (lg x - ln x / ln 2) <= el.

(** The forward kernel's loop for the query [q] over [tiles] of (key, value
    coordinate) pairs under [vis], its saved lse and its stored output coordinate. *)
Definition fwd_state (c : R) (q : list R) (vis : list R * R -> bool) (tiles : list (list (list R * R))) :=
  kernel_run M (list R * R) (fun kv : list R * R => score2 A_ c q (fst kv)) vis (fun kv _ => snd kv)
    (kernel_start 1) tiles.

Definition fwd_lse (c cl : R) (q : list R) (vis : list R * R -> bool) (tiles : list (list (list R * R))) : R :=
  rnd (rnd (m_use (ks_m (fwd_state c q vis tiles)) + lg (ks_l (fwd_state c q vis tiles))) * cl).

Definition fwd_out (c : R) (q : list R) (vis : list R * R -> bool) (tiles : list (list (list R * R))) : R :=
  ff_rnd S_ (rnd (nth 0 (ks_acc (fwd_state c q vis tiles)) 0 / ks_l (fwd_state c q vis tiles))).

(** The closed forms: [lse2]'s error [Dl] and the magnitude [Am] of [s2 - lse2] from the lse's
    bound [Lb] and [|LSE| <= Lm] ([lse2_close]); [delta]'s error against [dO . O]. *)
Definition chain_Dl (uc2 Lb Lm : R) : R := Lb + (Lm + Lb) * (u * (1 + uc2) + uc2) + ea.
Definition chain_Am (uc2 smax Lb Lm : R) : R := smax + (2 * ((1 + uc2) * (Lm + Lb)) * (1 + u) + ea).
Definition chain_eD (Dd Ev : nat) (OdO : R) (errs dO : list R) : R :=
  gamma u Dd * ((1 + u) * OdO + INR Ev * ea) + u * OdO + INR Ev * ea + dot_R errs (map Rabs dO).

Theorem dq_error_from_forward : forall (q dO : list R) (c scale uc P V X0 Y P1 CG CR cl ucl LN NL c2 uc2 Lm : R)
    (E B N Tt Ev Dd : nat) (fvis : nat -> list R * R -> bool) (fts : nat -> list (list (list R * R)))
    (shape : stree) (bvis : list R * list R -> bool) (cs ucs : R) (e : nat)
    (btiles : list (list (list R * list R))) (X Pd Ym W : R) (b : nat),
  let o := map (fun j => fwd_out c q (fvis j) (fts j)) (seq 0 Ev) in
  let lse := fwd_lse c cl q (fvis 0%nat) (fts 0%nat) in
  let LSE := ln (rsum (map (fun kv => exp (scale * dot_R q (fst kv))) (filter (fvis 0%nat) (concat (fts 0%nat))))) in
  let O := map (fun j => exact_softmax scale q (filter (fvis j) (concat (fts j)))) (seq 0 Ev) in
  let D := dot_R O dO in
  let bL := afe_bL u ue ee ea B N Tt X0 P1 CG CR in
  (* the forward, every value coordinate *)
  mp_exp2 M 0 = 1 ->
  afe_premises M c scale uc P V X0 Y P1 CG CR E B N Tt ->
  length q = E ->
  (forall j, (j < Ev)%nat ->
     (exists kv, In kv (concat (fts j)) /\ fvis j kv = true)
     /\ (forall kv, In kv (concat (fts j)) -> fvis j kv = true ->
           length (fst kv) = E /\ dot_abs q (fst kv) <= P /\ Rabs (snd kv) <= V)
     /\ Forall (fun tl => (length tl <= B)%nat) (fts j)
     /\ (length (filter (fvis j) (concat (fts j))) <= N)%nat /\ (length (fts j) <= Tt)%nat) ->
  (* its lse *)
  0 <= ucl -> Rabs (cl - ln 2) <= ucl * ln 2 -> ln (INR N) <= LN -> - ln (1 - bL) <= NL ->
  lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax -> Rabs LSE <= Lm ->
  (* delta's tree *)
  leaves shape = dot_terms A_ o dO -> (depth shape <= Dd)%nat -> INR Dd * u < 1 ->
  (* the dQ kernel *)
  0 <= uc2 -> Rabs (c2 * ln 2 - 1) <= uc2 ->
  0 <= ucs -> Rabs (cs - scale) <= ucs * scale ->
  0 <= Pd -> 0 <= Ym -> 0 <= W ->
  length dO = Ev -> (1 <= Ev)%nat -> INR Ev * u < 1 ->
  Forall (fun tl => (length tl <= b)%nat) btiles ->
  INR ((b - 1) + (length btiles - 1)) * u < 1 ->
  (forall y, In y (concat btiles) -> bvis y = true ->
     length (fst y) = E /\ dot_abs q (fst y) <= P
     /\ length (snd y) = Ev /\ dot_abs dO (snd y) <= Pd
     /\ Rabs (dot_R dO (snd y) - D) <= Ym /\ Rabs (nth e (fst y) 0) <= W) ->
  let Lb := lse_bound u ea el ucl (score_max A_ scale uc E P) (score_delta A_ scale uc E P) LN NL in
  let Dl := chain_Dl uc2 Lb Lm in
  let Am := chain_Am uc2 (score_max A_ scale uc E P) Lb Lm in
  Rpower 2 (2 * (score_delta A_ scale uc E P + Dl) + u * Am + ea) <= X ->
  let errs := map (fun j => afp_rel u ue ee ea us B N Tt X0 Y P1 CG CR
                             * exact_softmax scale q (map abs_value (filter (fvis j) (concat (fts j))))
                             + afp_abs u ue ee ea us es V B N Tt X0 P1 CG CR) (seq 0 Ev) in
  let eD := chain_eD Dd Ev (dot_abs o dO) errs dO in
  let eP := dot_err A_ Ev Pd in
  let EX := (1 + ue) * X in
  let g := gamma u ((b - 1) + (length btiles - 1)) in
  let Pr := fun y => exp (scale * dot_R q (fst y) - LSE) in
  let Yf := fun y => dot_R dO (snd y) - D in
  let S1 := rsum (map (fun y => if bvis y then Pr y * Rabs (Yf y) * Rabs (nth e (fst y) 0) else 0)
                      (concat btiles)) in
  let SR := rsum (map (fun y => if bvis y then Pr y * ((1 + u) * (eP + eD) + ea) * Rabs (nth e (fst y) 0) else 0)
                      (concat btiles)) in
  let eA := grad_eA M g EX S1 SR (INR (length (concat btiles))) (grad_c M EX Ym ((1 + u) * (eP + eD) + ea) W) in
  Rabs (dq_kernel M bvis c cs q dO (rnd (lse * c2)) (tree_sum A_ shape) e btiles
        - scale * rsum (map (fun y => if bvis y then Pr y * Yf y * nth e (fst y) 0 else 0) (concat btiles)))
  <= grad_bound M scale ucs eA S1.
Proof.
  intros q dO c scale uc P V X0 Y P1 CG CR cl ucl LN NL c2 uc2 Lm E B N Tt Ev Dd fvis fts shape bvis cs ucs e
    btiles X Pd Ym W b o lse LSE O D bL Hexp0 Hpre Hq Hfwd Hucl Hcl HLN HNL Hlmin Hlmax HLm Hshape Hdepth HDd
    Huc2 Hc2 Hucs Hcs HPd HYm HW HdO HEv HEvu HBt Hbu Hkeys Lb Dl Am HX errs eD.
  pose proof Hpre as [HE1 HEu HV Hs Huc Hc HB HX0 HY HP HG HC HbL].
  pose proof (ff_u_nonneg A_) as Hu0; pose proof (ff_eta_nonneg A_) as Hea.
  (* the saved lse *)
  destruct (Hfwd 0%nat ltac:(lia)) as [Hvis0 [Hk0 [HBt0 [HN0 HT0]]]].
  assert (Hk0' : forall kv, In kv (concat (fts 0%nat)) -> fvis 0%nat kv = true ->
                   length (fst kv) = E /\ dot_abs q (fst kv) <= P)
    by (intros kv Hin Hv; destruct (Hk0 kv Hin Hv) as [H1 [H2 _]]; split; assumption).
  assert (Hlse : Rabs (lse - LSE) <= Lb)
    by exact (attention_lse_error_masked M lg el lmin lmax lg_err q c scale uc P X0 P1 CG CR cl ucl LN NL E B N Tt
                (fvis 0%nat) (fts 0%nat) Hexp0 Hvis0 HE1 HEu Hq Hk0' Hs Huc Hc HB HBt0 HN0 HT0 HX0 HP HG HC HbL
                Hucl Hcl HLN HNL Hlmin Hlmax).
  assert (HLb : 0 <= Lb) by (eapply Rle_trans; [apply Rabs_pos | exact Hlse]).
  destruct (lse2_close M lse LSE Lb c2 uc2 Huc2 Hlse Hc2) as [HDl0 HAl0].
  assert (HDl : Rabs (rnd (lse * c2) * ln 2 - LSE) <= Dl).
  { unfold Dl, chain_Dl; eapply Rle_trans; [exact HDl0 |].
    assert ((Rabs LSE + Lb) * (u * (1 + uc2) + uc2) <= (Lm + Lb) * (u * (1 + uc2) + uc2))
      by (apply Rmult_le_compat_r; [nra | lra]).
    lra. }
  assert (HAl : Rabs (rnd (lse * c2)) <= 2 * ((1 + uc2) * (Lm + Lb)) * (1 + u) + ea).
  { eapply Rle_trans; [exact HAl0 |].
    assert ((1 + uc2) * (Rabs LSE + Lb) <= (1 + uc2) * (Lm + Lb)) by (apply Rmult_le_compat_l; lra).
    nra. }
  (* the stored output and delta *)
  assert (Hlo : length o = Ev) by (unfold o; rewrite map_length, seq_length; reflexivity).
  assert (HlO : length O = Ev) by (unfold O; rewrite map_length, seq_length; reflexivity).
  assert (Hle : length errs = Ev) by (unfold errs; rewrite map_length, seq_length; reflexivity).
  assert (Hpert : Rabs (dot_R o dO - dot_R O dO) <= dot_R errs (map Rabs dO)).
  { apply dot_R_perturb_each; [lia | lia |].
    intros i Hi; rewrite Hlo in Hi.
    unfold o, O, errs; rewrite !nth_map_seq by exact Hi.
    destruct (Hfwd i Hi) as [Hvi [Hki [HBti [HNi HTi]]]].
    exact (attention_forward_posteriori_masked M q c scale uc P V X0 Y P1 CG CR E B N Tt (fvis i) (fts i)
             Hexp0 Hvi Hpre Hq Hki HBti HNi HTi). }
  pose proof (delta_close M shape o dO Dd Hshape Hdepth HDd) as Hd; cbv zeta in Hd.
  rewrite combine_length, Hlo, HdO, Nat.min_id in Hd.
  assert (HeD : Rabs (tree_sum A_ shape - D) <= eD).
  { unfold eD, chain_eD, D.
    replace (tree_sum A_ shape - dot_R O dO)
      with ((tree_sum A_ shape - dot_R o dO) + (dot_R o dO - dot_R O dO)) by ring.
    eapply Rle_trans; [apply Rabs_triang | lra]. }
  (* the dQ kernel *)
  assert (Hitems : forall y, In y (concat btiles) -> bvis y = true ->
     Rabs (score2 A_ c q (fst y) * ln 2 - scale * dot_R q (fst y)) <= score_delta A_ scale uc E P
     /\ Rabs (score2 A_ c q (fst y) - rnd (lse * c2)) <= Am
     /\ length (snd y) = Ev /\ dot_abs dO (snd y) <= Pd
     /\ Rabs (dot_R dO (snd y) - D) <= Ym /\ Rabs (nth e (fst y) 0) <= W).
  { intros y Hin Hv; destruct (Hkeys y Hin Hv) as [Hly [HPy Hrest]].
    destruct (score2_error A_ c scale uc q (fst y) E P Hq Hly HE1 HEu Hs Huc Hc HPy) as [Hd1 Hm1].
    split; [exact Hd1 | split; [| exact Hrest]].
    unfold Am, chain_Am.
    unfold Rminus; eapply Rle_trans; [apply Rabs_triang |]; rewrite Rabs_Ropp; lra. }
  exact (dq_error M bvis c cs scale ucs q dO (rnd (lse * c2)) (tree_sum A_ shape) e btiles LSE D eD
           (score_delta A_ scale uc E P) Dl Am X Ev Pd Ym W b
           ltac:(lra) Hucs Hcs HPd HYm HW HdO HEv HEvu HBt Hbu HX HDl HeD Hitems).
Qed.

End Chain.
