(** * The linear cross-entropy's gradients dH and dW with the streamed lse composed in.

    LinearCrossEntropy/Float/GradError.v bounds the 3-product schedule's dH and dW
    ([ce_dh_error], [ce_dw_error]) for any lse the kernel uses within [Dl] of the exact
    [L = ln sum_v e^(y_v)] ([ce_ok]); LinearCrossEntropy/Float/LseLossError.v bounds the lse
    the kernel streams ([ce_lse_error]).  Here the lse of each item is the one the kernel
    computes from its token's row of logits ([row_lse]: [_rows_kernel]'s STREAM over the
    vocabulary tiles, [rnd (m + tl.log l)]), so the lse's error is no premise:

    - [row_item_ok]: an item whose logit [(z, y)] is in its token's row (computed [z], exact
      [y]; every logit of the row a number of the format with [|z| <= Zmax],
      [|z - y| <= delta], at most [Nn] of them, [ln Nn <= LN]) meets [ce_ok] at [delta],
      [Dl] and [Am = chain_Am = 2 Zmax + 3 delta + LN + Dl] whenever the row's lse is
      within [Dl] (the exact [|y - L| <= 2 (Zmax + delta) + LN]);
    - [ce_dw_error_from_lse]: dW's token-chunk loop ([ce_run]) against
      [a0 sum_(n kept) (P_nv - [v = t_n]) h_nd], every item's lse streamed from its row
      ([ce_lse_error] discharges [|lse - L| <= Dl] at [Dl = ce_lse_bound u el Zmax LN NL
      delta]): the bound [ce_dw_bound] of [ce_dw_error] at that [Dl] and any
      [X >= exp (delta + Dl + u Am + ea)];
    - [ce_dh_error_from_lse]: dH's entry ([ce_dh], one product over the vocabulary), the same
      with [C = 1].
    Premises: those of [ce_lse_error] (on [tl.exp], [tl.log] on [[lmin, lmax]], the tile sum,
    the rows' shape and logits, the constants) and of [ce_dw_error] / [ce_dh_error] (the
    products' accumulation [dsum_ok], the epilogue, [alpha]); none on the lse's error.
    Bounds/LinearCrossEntropyChain.v computes the bound ([ce_grad_chain_q]). *)

From Coq Require Import Reals List Lra Lia Arith.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts Attention.ScorePerturbation.
From Ojas Require Import FloatModel.MixedPrecision Attention.Float.OnlineSoftmaxError Attention.Float.SavedLseError.
From Ojas Require Import FloatModel.Notations.
From Ojas Require LinearCrossEntropy.Float.LseLossError LinearCrossEntropy.Float.GradError.
Import ListNotations.
Open Scope R_scope.

(** The exact sum of a row's exponentials: at least each of its terms, at most their count
    times the largest. *)
Lemma row_exp_sum_ge : forall (zs : list (R * R)) zy, In zy zs ->
  exp (snd zy) <= rsum (map (fun zy => exp (snd zy)) zs).
Proof.
  induction zs as [| a zs IH]; intros zy Hi; [destruct Hi |].
  cbn [map]; rewrite rsum_cons.
  assert (0 <= rsum (map (fun zy => exp (snd zy)) zs))
    by (apply rsum_nonneg; intros x Hx; apply in_map_iff in Hx; destruct Hx as [w [<- _]]; left; apply exp_pos).
  destruct Hi as [<- | Hi]; [lra |].
  pose proof (IH zy Hi); pose proof (exp_pos (snd a)); lra.
Qed.

Lemma row_exp_sum_le : forall (zs : list (R * R)) Y, (forall zy, In zy zs -> snd zy <= Y) ->
  rsum (map (fun zy => exp (snd zy)) zs) <= INR (length zs) * exp Y.
Proof.
  induction zs as [| a zs IH]; intros Y H; cbn [map length].
  - rewrite rsum_nil; simpl; lra.
  - rewrite rsum_cons, S_INR.
    assert (exp (snd a) <= exp Y) by (apply ose_exp_le, H; left; reflexivity).
    pose proof (IH Y (fun zy Hi => H zy (or_intror Hi))); lra.
Qed.

(** [Am]: a bound of [|z - lse|] from the row's bounds and the lse's error. *)
Definition chain_Am (Zmax delta LN Dl : R) : R := 2 * Zmax + 3 * delta + LN + Dl.

Section CeGradChain.

Variable M : MixedModel.

Import ModelNotations.

(** The kernel's [tl.exp] and [tl.log]: assumptions (those of GradError.v and LseLossError.v). *)
Variable ex : R -> R.
Variables ue ee : R.
Hypothesis ue_nonneg : 0 <= ue.
Hypothesis ee_nonneg : 0 <= ee.
Hypothesis ex_err : forall x, Rabs (ex x - exp x) <= ue * exp x + ee.

Variable lg : R -> R.
Variables el lmin lmax : R.
Hypothesis lg_fmt : forall x, fmt (lg x).
Hypothesis lg_err : forall x, fmt x -> lmin <= x <= lmax -> Rabs (lg x - ln x) <= el.

(** A token's row: its first logit and its vocabulary tiles of (computed, exact) logits. *)
Definition row_state (ts : list R -> R) (r : (R * R) * list (list (R * R))) : R * R :=
  LseLossError.ce_run M ex (R * R) fst (fun _ => 1) ts (fst (fst r), 0) (snd r).

(** The lse the kernel streams over the row ([_rows_kernel], STREAM) and the exact one. *)
Definition row_lse (ts : list R -> R) (r : (R * R) * list (list (R * R))) : R :=
  rnd (fst (row_state ts r) + lg (snd (row_state ts r))).

Definition row_LSE (r : (R * R) * list (list (R * R))) : R := ln (rsum (map (fun zy => exp (snd zy)) (concat (snd r)))).

(** [ce_lse_error]'s premises on one row. *)
Definition row_ok (Bt Tt Nn : nat) (Zmax delta : R) (r : (R * R) * list (list (R * R))) : Prop :=
  In (fst r) (concat (snd r)) /\ Forall (fun tl => (length tl <= Bt)%nat) (snd r) /\ (length (snd r) <= Tt)%nat
  /\ (length (concat (snd r)) <= Nn)%nat
  /\ (forall zy, In zy (concat (snd r)) -> fmt (fst zy) /\ Rabs (fst zy) <= Zmax /\ Rabs (fst zy - snd zy) <= delta).

Lemma row_item_ok : forall ts (Bt Tt Nn : nat) Zmax delta LN Dl r z y,
  row_ok Bt Tt Nn Zmax delta r -> In (z, y) (concat (snd r)) -> ln (INR Nn) <= LN ->
  Rabs (row_lse ts r - row_LSE r) <= Dl ->
  Rabs (z - y) <= delta /\ Rabs (row_lse ts r - row_LSE r) <= Dl /\ Rabs (z - row_lse ts r) <= chain_Am Zmax delta LN Dl.
Proof.
  intros ts Bt Tt Nn Zmax delta LN Dl r z y [H0 [_ [_ [HN Hz]]]] Hi HLN Hl.
  destruct (Hz (z, y) Hi) as [_ [Hzm Hzd]]; cbn [fst snd] in Hzm, Hzd.
  split; [exact Hzd | split; [exact Hl |]].
  set (zs := concat (snd r)) in *.
  set (s := rsum (map (fun zy => exp (snd zy)) zs)).
  assert (Hge : exp y <= s) by exact (row_exp_sum_ge zs (z, y) Hi).
  assert (Hle : s <= INR (length zs) * exp (Zmax + delta)).
  { apply row_exp_sum_le; intros zy Hzy; destruct (Hz zy Hzy) as [_ [A B]].
    pose proof (sp_Rabs_le_inv _ _ A); pose proof (sp_Rabs_le_inv _ _ B); lra. }
  assert (Hlen : (1 <= length zs)%nat) by (destruct zs; [destruct H0 | cbn; lia]).
  assert (HNp : 0 < INR Nn) by (apply lt_0_INR; lia).
  assert (Hs : s <= INR Nn * exp (Zmax + delta)).
  { eapply Rle_trans; [exact Hle |]; apply Rmult_le_compat_r; [left; apply exp_pos | apply le_INR, HN]. }
  assert (HL1 : y <= ln s) by (rewrite <- (ln_exp y); apply afe_ln_le; [apply exp_pos | exact Hge]).
  assert (HL2 : ln s <= LN + (Zmax + delta)).
  { eapply Rle_trans; [apply afe_ln_le; [eapply Rlt_le_trans; [apply exp_pos | exact Hge] | exact Hs] |].
    rewrite ln_mult, ln_exp by (apply exp_pos || exact HNp); lra. }
  pose proof (sp_Rabs_le_inv _ _ Hzm); pose proof (sp_Rabs_le_inv _ _ Hzd); pose proof (sp_Rabs_le_inv _ _ Hl).
  unfold row_LSE in Hl |- *; fold zs s in Hl |- *.
  pose proof (sp_Rabs_le_inv _ _ Hl).
  unfold chain_Am; apply Rabs_le; split; lra.
Qed.

(** Every kept item of [xs] meets [ce_ok] when its row's lse is within [Dl]. *)
Lemma rows_ce_ok : forall ts (Bt Tt Nn : nat) Zmax delta LN Dl (T : Type) (row : T -> (R * R) * list (list (R * R)))
    (iz iy : T -> R) (ik : T -> bool) (xs : list T),
  ln (INR Nn) <= LN ->
  (forall x, In x xs -> ik x = true -> row_ok Bt Tt Nn Zmax delta (row x) /\ In (iz x, iy x) (concat (snd (row x)))) ->
  (forall x, In x xs -> ik x = true -> Rabs (row_lse ts (row x) - row_LSE (row x)) <= Dl) ->
  forall x, In x xs ->
  GradError.ce_ok T iz (fun x => row_lse ts (row x)) iy (fun x => row_LSE (row x)) ik delta Dl (chain_Am Zmax delta LN Dl) x.
Proof.
  intros ts Bt Tt Nn Zmax delta LN Dl T row iz iy ik xs HLN Hrow Hl x Hx Ek.
  destruct (Hrow x Hx Ek) as [Hr Hi].
  exact (row_item_ok ts Bt Tt Nn Zmax delta LN Dl (row x) (iz x) (iy x) Hr Hi HLN (Hl x Hx Ek)).
Qed.

(** [ce_lse_error] on every kept item's row. *)
Lemma rows_lse_close : forall ts (Dt Bt Tt Nn : nat) Zmax XK delta LN NL (T : Type)
    (row : T -> (R * R) * list (list (R * R))) (iz iy : T -> R) (ik : T -> bool) (xs : list T),
  let bL := LseLossError.ce_bL u ue ee ea XK Dt Bt Tt Nn in
  LseLossError.sum_ok M ts Dt Bt -> exp (u * (2 * Zmax)) <= XK -> bL < 1 -> ln (INR Nn) <= LN ->
  - ln (1 - bL) <= NL -> lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  (forall x, In x xs -> ik x = true -> row_ok Bt Tt Nn Zmax delta (row x) /\ In (iz x, iy x) (concat (snd (row x)))) ->
  forall x, In x xs -> ik x = true ->
  Rabs (row_lse ts (row x) - row_LSE (row x)) <= LseLossError.ce_lse_bound u el Zmax LN NL delta.
Proof.
  intros ts Dt Bt Tt Nn Zmax XK delta LN NL T row iz iy ik xs bL Hts HXK HbL HLN HNL Hlmin Hlmax Hrow x Hx Ek.
  destruct (Hrow x Hx Ek) as [[H0 [HB [HT [HN Hz]]]] _].
  unfold row_lse, row_LSE, row_state.
  exact (LseLossError.ce_lse_error M ex ue ee ue_nonneg ee_nonneg (fun y _ => ex_err y) lg el lmin lmax lg_fmt lg_err
           (fst (row x)) (snd (row x)) ts Dt Bt Tt Nn Zmax XK delta LN NL H0 Hts HB HT HN Hz HXK HbL HLN HNL
           Hlmin Hlmax).
Qed.

Lemma chain_consts_nonneg : forall Zmax delta LN NL,
  0 <= el -> 0 <= Zmax -> 0 <= delta -> 0 <= LN -> 0 <= NL ->
  let Dl := LseLossError.ce_lse_bound u el Zmax LN NL delta in
  0 <= Dl /\ 0 <= chain_Am Zmax delta LN Dl.
Proof.
  intros Zmax delta LN NL Hel HZ Hd HLN HNL Dl.
  pose proof (ff_u_nonneg A_).
  assert (0 <= Dl) by (unfold Dl, LseLossError.ce_lse_bound;
                       assert (0 <= u * (Zmax + LN + NL + el)) by (apply Rmult_le_pos; lra); lra).
  split; [lra | unfold chain_Am; lra].
Qed.

(** dW's token-chunk loop with each item's lse streamed from its token's row. *)
Theorem ce_dw_error_from_lse : forall ts (Dt Bt Tt Nn : nat) Zmax XK delta LN NL
    (T : Type) (row : T -> (R * R) * list (list (R * R))) (iz iy ih : T -> R) (it ik : T -> bool)
    (dsum : list R -> R) (epi : R -> R -> R) (alpha a0 ua gd X : R) (cs : list (list T)),
  let il := fun x => row_lse ts (row x) in
  let iL := fun x => row_LSE (row x) in
  let bL := LseLossError.ce_bL u ue ee ea XK Dt Bt Tt Nn in
  let Dl := LseLossError.ce_lse_bound u el Zmax LN NL delta in
  LseLossError.sum_ok M ts Dt Bt -> exp (u * (2 * Zmax)) <= XK -> bL < 1 -> ln (INR Nn) <= LN ->
  - ln (1 - bL) <= NL -> lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  0 <= el -> 0 <= Zmax -> 0 <= delta -> 0 <= LN -> 0 <= NL ->
  (forall x, In x (concat cs) -> ik x = true ->
     row_ok Bt Tt Nn Zmax delta (row x) /\ In (iz x, iy x) (concat (snd (row x)))) ->
  GradError.epi_ok M alpha epi -> 0 <= ua -> Rabs (alpha - a0) <= ua * Rabs a0 -> 0 <= gd ->
  (forall c, In c cs -> GradError.dsum_ok M ex T iz il ih it ik dsum gd c) ->
  exp (delta + Dl + u * chain_Am Zmax delta LN Dl + ea) <= X ->
  let xs := concat cs in
  Rabs (GradError.ce_run M ex T iz il ih it ik dsum epi cs - a0 * rsum (map (GradError.ce_exact T iy iL ih it ik) xs))
  <= GradError.ce_dw_bound M ee gd ((1 + ue) * X) a0 ua (length cs)
       (GradError.ce_S T iy iL ih ik xs) (GradError.ce_T T iy iL ih it ik xs) (GradError.ce_Ha T ih ik xs).
Proof.
  intros ts Dt Bt Tt Nn Zmax XK delta LN NL T row iz iy ih it ik dsum epi alpha a0 ua gd X cs il iL bL Dl
    Hts HXK HbL HLN HNL Hlmin Hlmax Hel HZ Hd HLN0 HNL0 Hrow Hepi Hua Hal Hgd Hds HX xs.
  destruct (chain_consts_nonneg Zmax delta LN NL Hel HZ Hd HLN0 HNL0) as [HDl HAm].
  apply (GradError.ce_dw_error M ex ue ee ue_nonneg ee_nonneg ex_err T iz il iy iL ih it ik dsum epi alpha a0 ua gd
           delta Dl (chain_Am Zmax delta LN Dl) X cs Hepi Hua Hal Hgd Hd HDl HAm HX Hds).
  apply (rows_ce_ok ts Bt Tt Nn Zmax delta LN Dl T row iz iy ik (concat cs) HLN Hrow).
  exact (rows_lse_close ts Dt Bt Tt Nn Zmax XK delta LN NL T row iz iy ik (concat cs) Hts HXK HbL HLN HNL
           Hlmin Hlmax Hrow).
Qed.

(** dH's entry: one product over the vocabulary, each item's lse its token's streamed one. *)
Theorem ce_dh_error_from_lse : forall ts (Dt Bt Tt Nn : nat) Zmax XK delta LN NL
    (T : Type) (row : T -> (R * R) * list (list (R * R))) (iz iy ih : T -> R) (it ik : T -> bool)
    (dsum : list R -> R) (alpha a0 ua gd X : R) (xs : list T),
  let il := fun x => row_lse ts (row x) in
  let iL := fun x => row_LSE (row x) in
  let bL := LseLossError.ce_bL u ue ee ea XK Dt Bt Tt Nn in
  let Dl := LseLossError.ce_lse_bound u el Zmax LN NL delta in
  LseLossError.sum_ok M ts Dt Bt -> exp (u * (2 * Zmax)) <= XK -> bL < 1 -> ln (INR Nn) <= LN ->
  - ln (1 - bL) <= NL -> lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  0 <= el -> 0 <= Zmax -> 0 <= delta -> 0 <= LN -> 0 <= NL ->
  (forall x, In x xs -> ik x = true -> row_ok Bt Tt Nn Zmax delta (row x) /\ In (iz x, iy x) (concat (snd (row x)))) ->
  0 <= ua -> Rabs (alpha - a0) <= ua * Rabs a0 -> 0 <= gd ->
  GradError.dsum_ok M ex T iz il ih it ik dsum gd xs ->
  exp (delta + Dl + u * chain_Am Zmax delta LN Dl + ea) <= X ->
  Rabs (GradError.ce_dh M ex T iz il ih it ik dsum alpha xs - a0 * rsum (map (GradError.ce_exact T iy iL ih it ik) xs))
  <= GradError.ce_dw_bound M ee gd ((1 + ue) * X) a0 ua 1
       (GradError.ce_S T iy iL ih ik xs) (GradError.ce_T T iy iL ih it ik xs) (GradError.ce_Ha T ih ik xs).
Proof.
  intros ts Dt Bt Tt Nn Zmax XK delta LN NL T row iz iy ih it ik dsum alpha a0 ua gd X xs il iL bL Dl
    Hts HXK HbL HLN HNL Hlmin Hlmax Hel HZ Hd HLN0 HNL0 Hrow Hua Hal Hgd Hds HX.
  destruct (chain_consts_nonneg Zmax delta LN NL Hel HZ Hd HLN0 HNL0) as [HDl HAm].
  apply (GradError.ce_dh_error M ex ue ee ue_nonneg ee_nonneg ex_err T iz il iy iL ih it ik dsum alpha a0 ua gd
           delta Dl (chain_Am Zmax delta LN Dl) X xs Hua Hal Hgd Hd HDl HAm HX Hds).
  apply (rows_ce_ok ts Bt Tt Nn Zmax delta LN Dl T row iz iy ik xs HLN Hrow).
  exact (rows_lse_close ts Dt Bt Tt Nn Zmax XK delta LN NL T row iz iy ik xs Hts HXK HbL HLN HNL
           Hlmin Hlmax Hrow).
Qed.

End CeGradChain.
