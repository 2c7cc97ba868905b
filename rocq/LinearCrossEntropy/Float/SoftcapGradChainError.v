(** * The capped linear cross-entropy's gradients dH and dW with the capped streamed lse composed in.

    LinearCrossEntropy/Float/SoftcapGradError.v bounds the capped 3-product schedule's dH and dW
    ([sc_dh_error], [sc_dw_error]) for any lse the kernel uses within [Dl] of the exact
    [L = ln sum_v e^(c tanh (y_v / c))] and within [Am] of the capped logit ([sc_ok]);
    LinearCrossEntropy/Float/SoftcapError.v bounds the lse the kernel streams over the capped
    logits ([ce_lse_error_softcap]).  Here the lse of each item is the one [_rows_kernel]
    (STREAM, HAS_CAP) computes from its token's row of raw fp32 logits, each capped
    ([sc_row]: [sc_pair] on every logit of the row, then GradChainError.v's [row_lse]), so the
    lse's error is no premise:

    - [sc_z_le_raw]: a capped logit of a raw one [|r| <= Zr] is at most
      [sc_zraw Zr = (1 + u) (Zr (1 + ut) + c et) + ea] ([|c tanh (r / c)| <= |r|]:
      [softcap_lipschitz]); with [sc_zmax] (the cap's), [sc_zc Zr = min sc_zmax (sc_zraw Zr)]
      bounds it;
    - [sc_row_capped]: a raw row ([sc_row_ok]: its raw logits numbers of the format with
      [|r| <= Zr], within [dr] of the exact ones, the tiles' shape) capped is a row of
      GradChainError.v's [row_ok] at [Zmax = sc_zc Zr] and [delta = sc_delta dr]
      ([sc_logit_error]);
    - [sc_rows_ok]: an item whose raw logit [(r, y)] is in its token's raw row meets [sc_ok] at
      [dr], [Dl] and [Am = chain_Am (sc_zc Zr) (sc_delta dr) LN Dl] whenever the capped row's
      lse is within [Dl] ([row_item_ok] on the capped row);
    - [sc_dw_error_from_lse]: dW's token-chunk loop ([ce_gen_run] over [sc_term]) against
      [a0 sum (P_c - [v = t]) (1 - tanh (y / c)^2) h], every item's lse streamed from its capped
      row ([rows_lse_close], i.e. [ce_lse_error], discharges [|lse - L| <= Dl] at
      [Dl = ce_lse_bound u el (sc_zc Zr) LN NL (sc_delta dr)]): the bound of [sc_dw_error] at that
      [Dl] and any [X >= exp (sc_delta dr + Dl + u Am + ea)];
    - [sc_dh_error_from_lse]: dH's entry ([ce_gen_dh], one product over the vocabulary), the
      same with [C = 1].
    Premises: those of [ce_lse_error_softcap] (on [tl.exp], here on all reals as [sc_dw_error]
    takes it, [tl.log] on [[lmin, lmax]], the tile sum, the rows' shape and raw logits, the
    computed tanh, the constants) and of
    [sc_dw_error] / [sc_dh_error] (the division, the chain factor, the products' accumulation
    [ce_gen_dsum_ok], the epilogue, [alpha]); none on the lse's error.
    Bounds/LinearCrossEntropySoftcapChain.v computes the bound ([sc_grad_chain_q]). *)

From Coq Require Import Reals List Lra Lia Arith.
From Ojas Require Import VectorFacts FloatModel.MixedPrecision FloatModel.Notations.
From Ojas Require LinearCrossEntropy.Float.LseLossError LinearCrossEntropy.Float.GradError.
From Ojas Require Import LinearCrossEntropy.Float.SoftcapError LinearCrossEntropy.Float.SoftcapGradError.
From Ojas Require Import LinearCrossEntropy.Float.GradChainError.
Import ListNotations.
Open Scope R_scope.

Section ScGradChain.

Variable M : MixedModel.

Import ModelNotations.

(** The kernel's [tl.exp] and [tl.log] (as GradChainError.v). *)
Variable ex : R -> R.
Variables ue ee : R.
Hypothesis ue_nonneg : 0 <= ue.
Hypothesis ee_nonneg : 0 <= ee.
Hypothesis ex_err : forall x, Rabs (ex x - exp x) <= ue * exp x + ee.

Variable lg : R -> R.
Variables el lmin lmax : R.
Hypothesis lg_fmt : forall x, fmt (lg x).
Hypothesis lg_err : forall x, fmt x -> lmin <= x <= lmax -> Rabs (lg x - ln x) <= el.

(** The cap, the computed tanh, the division and the chain factor (as SoftcapGradError.v). *)
Variable c : R.
Hypothesis c_pos : 0 < c.
Variable th : R -> R.
Variables ut et : R.
Hypothesis ut_nonneg : 0 <= ut.
Hypothesis th_err : forall r, fmt r -> Rabs (th r - tanh (r / c)) <= ut * Rabs (tanh (r / c)) + et.
Variable dv : R -> R.
Variables ud ed : R.
Hypothesis ud_nonneg : 0 <= ud.
Hypothesis ed_nonneg : 0 <= ed.
Hypothesis dv_err : forall z, fmt z -> Rabs (dv z - z / c) <= ud * Rabs (z / c) + ed.
Variable cf : R -> R.
Hypothesis cf_ok : forall z, sc_chain_ok M dv z (cf z).

(** A bound of the capped logits from one of the raw ones, [|r| <= Zr], and the smaller of it
    and the cap's [sc_zmax]. *)
Definition sc_zraw (u ea c ut et Zr : R) : R := (1 + u) * (Zr * (1 + ut) + c * et) + ea.
Definition sc_zc (u ea c ut et Zr : R) : R := Rmin (sc_zmax u ea c ut et) (sc_zraw u ea c ut et Zr).

Lemma sc_z_le_raw : forall r Zr, fmt r -> Rabs r <= Zr -> Rabs (sc_z M c th r) <= sc_zraw u ea c ut et Zr.
Proof.
  intros r Zr Fr Hr; unfold sc_z, sc_zraw.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (ff_eta_nonneg A_) as Hea.
  pose proof (th_err r Fr) as Ht.
  set (T := tanh (r / c)) in *.
  assert (HcT : Rabs (c * T) <= Rabs r).
  { pose proof (softcap_lipschitz c r 0 c_pos) as H; fold T in H.
    replace (0 / c) with 0 in H by (unfold Rdiv; ring).
    replace (tanh 0) with 0 in H by (unfold tanh, sinh; rewrite Ropp_0, exp_0; unfold Rdiv; ring).
    rewrite Rmult_0_r, !Rminus_0_r in H; exact H. }
  rewrite Rabs_mult, (Rabs_right c) in HcT by lra.
  assert (Hth : Rabs (th r) <= Rabs T * (1 + ut) + et).
  { replace (th r) with ((th r - T) + T) by ring; pose proof (Rabs_triang (th r - T) T); lra. }
  assert (Hc : Rabs (c * th r) <= Zr * (1 + ut) + c * et).
  { rewrite Rabs_mult, (Rabs_right c) by lra.
    assert (c * Rabs (th r) <= c * (Rabs T * (1 + ut) + et)) by (apply Rmult_le_compat_l; lra).
    assert (c * Rabs T * (1 + ut) <= Zr * (1 + ut)) by (apply Rmult_le_compat_r; lra).
    nra. }
  pose proof (ff_abs A_ (c * th r)) as Hrnd.
  replace (rnd (c * th r)) with ((rnd (c * th r) - c * th r) + c * th r) by ring.
  pose proof (Rabs_triang (rnd (c * th r) - c * th r) (c * th r)).
  assert (u * Rabs (c * th r) <= u * (Zr * (1 + ut) + c * et)) by (apply Rmult_le_compat_l; lra).
  lra.
Qed.

(** A token's row of raw (computed, exact) logits, capped: the row [_rows_kernel] streams. *)
Definition sc_row (r : (R * R) * list (list (R * R))) : (R * R) * list (list (R * R)) :=
  (sc_pair M c th (fst r), map (map (sc_pair M c th)) (snd r)).

(** [ce_lse_error_softcap]'s premises on one raw row. *)
Definition sc_row_ok (Bt Tt Nn : nat) (Zr dr : R) (r : (R * R) * list (list (R * R))) : Prop :=
  In (fst r) (concat (snd r)) /\ Forall (fun tl => (length tl <= Bt)%nat) (snd r) /\ (length (snd r) <= Tt)%nat
  /\ (length (concat (snd r)) <= Nn)%nat
  /\ (forall ry, In ry (concat (snd r)) -> fmt (fst ry) /\ Rabs (fst ry) <= Zr /\ Rabs (fst ry - snd ry) <= dr).

Lemma sc_row_concat : forall r, concat (snd (sc_row r)) = map (sc_pair M c th) (concat (snd r)).
Proof. intros r; unfold sc_row; cbn [snd]; symmetry; apply concat_map. Qed.

Lemma sc_row_capped : forall (Bt Tt Nn : nat) Zr dr r, sc_row_ok Bt Tt Nn Zr dr r ->
  row_ok M Bt Tt Nn (sc_zc u ea c ut et Zr) (sc_delta u ea c ut et dr) (sc_row r).
Proof.
  intros Bt Tt Nn Zr dr r [H0 [HB [HT [HN Hr]]]]; unfold row_ok; rewrite sc_row_concat.
  split; [change (fst (sc_row r)) with (sc_pair M c th (fst r)); apply in_map, H0 |].
  split; [apply sc_tiles_len, HB |].
  split; [unfold sc_row; cbn [snd]; rewrite map_length; exact HT |].
  split; [rewrite map_length; exact HN |].
  intros zy Hi.
  assert (Hr' : forall ry, In ry (concat (snd r)) -> fmt (fst ry) /\ Rabs (fst ry - snd ry) <= dr)
    by (intros ry Hy; destruct (Hr ry Hy) as [F [_ D]]; split; assumption).
  destruct (sc_pairs_ok M c c_pos th ut et ut_nonneg th_err _ dr Hr' zy Hi) as [F [Z D]].
  split; [exact F | split; [| exact D]].
  apply in_map_iff in Hi; destruct Hi as [ry [<- Hy]]; destruct (Hr ry Hy) as [Fy [Zy _]].
  unfold sc_zc; apply Rmin_glb; [exact Z | exact (sc_z_le_raw (fst ry) Zr Fy Zy)].
Qed.

(** Every kept item of [xs] meets [sc_ok] when its capped row's lse is within [Dl]. *)
Lemma sc_rows_ok : forall ts (Bt Tt Nn : nat) Zr dr LN Dl (T : Type) (row : T -> (R * R) * list (list (R * R)))
    (ir iy : T -> R) (ik : T -> bool) (xs : list T),
  ln (INR Nn) <= LN ->
  (forall x, In x xs -> ik x = true -> sc_row_ok Bt Tt Nn Zr dr (row x) /\ In (ir x, iy x) (concat (snd (row x)))) ->
  (forall x, In x xs -> ik x = true ->
     Rabs (row_lse M ex lg ts (sc_row (row x)) - row_LSE (sc_row (row x))) <= Dl) ->
  forall x, In x xs ->
  sc_ok M c th T ir (fun x => row_lse M ex lg ts (sc_row (row x))) iy (fun x => row_LSE (sc_row (row x))) ik
    dr Dl (chain_Am (sc_zc u ea c ut et Zr) (sc_delta u ea c ut et dr) LN Dl) x.
Proof.
  intros ts Bt Tt Nn Zr dr LN Dl T row ir iy ik xs HLN Hrow Hl x Hx Ek.
  destruct (Hrow x Hx Ek) as [Hr Hi].
  pose proof Hr as [_ [_ [_ [_ Hz]]]].
  destruct (Hz _ Hi) as [Fr [_ Dr]]; cbn [fst snd] in Fr, Dr.
  assert (Hc : In (sc_z M c th (ir x), c * tanh (iy x / c)) (concat (snd (sc_row (row x)))))
    by (rewrite sc_row_concat; exact (in_map (sc_pair M c th) _ _ Hi)).
  destruct (row_item_ok M ex lg ts Bt Tt Nn _ _ LN Dl (sc_row (row x)) _ _ (sc_row_capped Bt Tt Nn Zr dr _ Hr) Hc HLN
              (Hl x Hx Ek)) as [_ [Hl' Ha]].
  split; [exact Fr | split; [exact Dr | split; [exact Hl' | exact Ha]]].
Qed.

(** [ce_lse_error] on every kept item's capped row. *)
Lemma sc_rows_lse_close : forall ts (Dt Bt Tt Nn : nat) XK LN NL Zr dr (T : Type)
    (row : T -> (R * R) * list (list (R * R))) (ir iy : T -> R) (ik : T -> bool) (xs : list T),
  let bL := LseLossError.ce_bL u ue ee ea XK Dt Bt Tt Nn in
  LseLossError.sum_ok M ts Dt Bt -> exp (u * (2 * sc_zc u ea c ut et Zr)) <= XK -> bL < 1 -> ln (INR Nn) <= LN ->
  - ln (1 - bL) <= NL -> lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  (forall x, In x xs -> ik x = true -> sc_row_ok Bt Tt Nn Zr dr (row x) /\ In (ir x, iy x) (concat (snd (row x)))) ->
  forall x, In x xs -> ik x = true ->
  Rabs (row_lse M ex lg ts (sc_row (row x)) - row_LSE (sc_row (row x)))
  <= LseLossError.ce_lse_bound u el (sc_zc u ea c ut et Zr) LN NL (sc_delta u ea c ut et dr).
Proof.
  intros ts Dt Bt Tt Nn XK LN NL Zr dr T row ir iy ik xs bL Hts HXK HbL HLN HNL Hlmin Hlmax Hrow.
  apply (rows_lse_close M ex ue ee ue_nonneg ee_nonneg ex_err lg el lmin lmax lg_fmt lg_err ts Dt Bt Tt Nn
           _ XK _ LN NL T (fun x => sc_row (row x)) (fun x => sc_z M c th (ir x)) (fun x => c * tanh (iy x / c))
           ik xs Hts HXK HbL HLN HNL Hlmin Hlmax).
  intros x Hx Ek; destruct (Hrow x Hx Ek) as [Hr Hi].
  split; [exact (sc_row_capped Bt Tt Nn Zr dr _ Hr) |].
  rewrite sc_row_concat; exact (in_map (sc_pair M c th) _ _ Hi).
Qed.

(* [u], [ea] spelled out: a notation through the shared ones (Notations.v) would not print. *)
Local Notation dz dr := (sc_delta (ff_u (mp_a M)) (ff_eta (mp_a M)) c ut et dr).
Local Notation Zc Zr := (sc_zc (ff_u (mp_a M)) (ff_eta (mp_a M)) c ut et Zr).

(** dW's token-chunk loop with each item's lse streamed from its token's capped row. *)
Theorem sc_dw_error_from_lse : forall ts (Dt Bt Tt Nn : nat) XK LN NL Zr dr
    (T : Type) (row : T -> (R * R) * list (list (R * R))) (ir iy ih : T -> R) (it ik : T -> bool)
    (dsum : list R -> R) (epi : R -> R -> R) (alpha a0 ua gd X : R) (cs : list (list T)),
  let il := fun x => row_lse M ex lg ts (sc_row (row x)) in
  let iL := fun x => row_LSE (sc_row (row x)) in
  let bL := LseLossError.ce_bL u ue ee ea XK Dt Bt Tt Nn in
  let Dl := LseLossError.ce_lse_bound u el (Zc Zr) LN NL (dz dr) in
  LseLossError.sum_ok M ts Dt Bt -> exp (u * (2 * Zc Zr)) <= XK -> bL < 1 -> ln (INR Nn) <= LN ->
  - ln (1 - bL) <= NL -> lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  (forall x, In x (concat cs) -> ik x = true ->
     sc_row_ok Bt Tt Nn Zr dr (row x) /\ In (ir x, iy x) (concat (snd (row x)))) ->
  GradError.epi_ok M alpha epi -> 0 <= ua -> Rabs (alpha - a0) <= ua * Rabs a0 -> 0 <= gd ->
  (forall ch, In ch cs -> GradError.ce_gen_dsum_ok T (sc_term M ex c th cf T ir il ih it ik) dsum gd ch) ->
  exp (dz dr + Dl + u * chain_Am (Zc Zr) (dz dr) LN Dl + ea) <= X ->
  let xs := concat cs in
  Rabs (GradError.ce_gen_run M T (sc_term M ex c th cf T ir il ih it ik) dsum epi cs
        - a0 * rsum (map (sc_exact c T iy iL ih it ik) xs))
  <= GradError.ce_gen_bound M gd a0 ua (length cs)
       (sc_E1 M ee ((1 + ue) * X) (sc_chain_bound u ea c ud ed (dz dr))
          (sc_Sk c T iy iL ih ik xs) (sc_Tc c T iy iL ih it ik xs) (GradError.ce_S T (sc_yc c T iy) iL ih ik xs)
          (GradError.ce_T T (sc_yc c T iy) iL ih it ik xs) (GradError.ce_Ha T ih ik xs))
       (sc_Tc c T iy iL ih it ik xs).
Proof.
  intros ts Dt Bt Tt Nn XK LN NL Zr dr T row ir iy ih it ik dsum epi alpha a0 ua gd X cs il iL bL Dl
    Hts HXK HbL HLN HNL Hlmin Hlmax Hrow Hepi Hua Hal Hgd Hds HX xs.
  apply (sc_dw_error M ex ue ee ue_nonneg ee_nonneg ex_err c c_pos th ut et ut_nonneg th_err dv ud ed ud_nonneg
           ed_nonneg dv_err cf cf_ok T ir il iy iL ih it ik dsum epi alpha a0 ua gd dr Dl _ X cs
           Hepi Hua Hal Hgd HX Hds).
  apply (sc_rows_ok ts Bt Tt Nn Zr dr LN Dl T row ir iy ik (concat cs) HLN Hrow).
  exact (sc_rows_lse_close ts Dt Bt Tt Nn XK LN NL Zr dr T row ir iy ik (concat cs) Hts HXK HbL HLN HNL
           Hlmin Hlmax Hrow).
Qed.

(** dH's entry: one product over the vocabulary, each item's lse its token's streamed capped one. *)
Theorem sc_dh_error_from_lse : forall ts (Dt Bt Tt Nn : nat) XK LN NL Zr dr
    (T : Type) (row : T -> (R * R) * list (list (R * R))) (ir iy ih : T -> R) (it ik : T -> bool)
    (dsum : list R -> R) (alpha a0 ua gd X : R) (xs : list T),
  let il := fun x => row_lse M ex lg ts (sc_row (row x)) in
  let iL := fun x => row_LSE (sc_row (row x)) in
  let bL := LseLossError.ce_bL u ue ee ea XK Dt Bt Tt Nn in
  let Dl := LseLossError.ce_lse_bound u el (Zc Zr) LN NL (dz dr) in
  LseLossError.sum_ok M ts Dt Bt -> exp (u * (2 * Zc Zr)) <= XK -> bL < 1 -> ln (INR Nn) <= LN ->
  - ln (1 - bL) <= NL -> lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  (forall x, In x xs -> ik x = true -> sc_row_ok Bt Tt Nn Zr dr (row x) /\ In (ir x, iy x) (concat (snd (row x)))) ->
  0 <= ua -> Rabs (alpha - a0) <= ua * Rabs a0 -> 0 <= gd ->
  GradError.ce_gen_dsum_ok T (sc_term M ex c th cf T ir il ih it ik) dsum gd xs ->
  exp (dz dr + Dl + u * chain_Am (Zc Zr) (dz dr) LN Dl + ea) <= X ->
  Rabs (GradError.ce_gen_dh M T (sc_term M ex c th cf T ir il ih it ik) dsum alpha xs
        - a0 * rsum (map (sc_exact c T iy iL ih it ik) xs))
  <= GradError.ce_gen_bound M gd a0 ua 1
       (sc_E1 M ee ((1 + ue) * X) (sc_chain_bound u ea c ud ed (dz dr))
          (sc_Sk c T iy iL ih ik xs) (sc_Tc c T iy iL ih it ik xs) (GradError.ce_S T (sc_yc c T iy) iL ih ik xs)
          (GradError.ce_T T (sc_yc c T iy) iL ih it ik xs) (GradError.ce_Ha T ih ik xs))
       (sc_Tc c T iy iL ih it ik xs).
Proof.
  intros ts Dt Bt Tt Nn XK LN NL Zr dr T row ir iy ih it ik dsum alpha a0 ua gd X xs il iL bL Dl
    Hts HXK HbL HLN HNL Hlmin Hlmax Hrow Hua Hal Hgd Hds HX.
  apply (sc_dh_error M ex ue ee ue_nonneg ee_nonneg ex_err c c_pos th ut et ut_nonneg th_err dv ud ed ud_nonneg
           ed_nonneg dv_err cf cf_ok T ir il iy iL ih it ik dsum alpha a0 ua gd dr Dl _ X xs
           Hua Hal Hgd HX Hds).
  apply (sc_rows_ok ts Bt Tt Nn Zr dr LN Dl T row ir iy ik xs HLN Hrow).
  exact (sc_rows_lse_close ts Dt Bt Tt Nn XK LN NL Zr dr T row ir iy ik xs Hts HXK HbL HLN HNL
           Hlmin Hlmax Hrow).
Qed.

End ScGradChain.
