(** * The 4-product schedule's gradients dH and dW of the chunked linear cross-entropy in mixed precision.

    kernels/ojas_kernels/linear_cross_entropy_four_products.py, the 4-product schedule (reduction "none",
    and [products=4] for "mean" / "sum"), label smoothing and z-loss 0, no
    softcap, no bias, bfloat16 or float32 (float16's scaled G is not covered).
    Only the kept tokens enter the products (ignored ones are removed before
    them: [ce_drop_ignored]); the logits of both passes are the Triton dots'
    (or cuBLAS's) float32 sums, never rounded to the input dtype (their error
    against [h . w_v] is the premise [delta]).

    - dW ([_backward_weight]): per vocabulary slab, [_logits_kernel] GRAD
      recomputes the float32 logits [z], reads the forward's lse and the
      float32 token weight [w_n] (RW: grad_output_n for "none"; for
      "mean" / "sum" grad_output / K or grad_output, rounded once in
      float32), and [_grad_tile] computes in float32, at [eps = lam = 0]
      (where [(1 + 0) * e - 0] is exact),
        g = tl.exp (rnd (z - lse))  [- 1, rounded, for the target];
        G_nv = rnd_s (rnd (g * w_n))      (stored in the input dtype)
      ([ce_wgent]); then [grad_weight[slab] = G_slab^T H] is one product over
      all kept tokens, accumulated in float32 ([dsum]) and rounded once to
      the weight's dtype ([_mm_into]) ([ce_dw4]).
    - dH ([_forward] then the backward): the forward's [_rows_kernel] writes
      G with token weight 1 ([g * 1] exact: the 3-product entry [ce_g] from
      the merged lse), [rows = rnd (alpha * (G_chunk W))] in float32
      ([_mm_f32]; alpha = fl32 (1 / K) for "mean", else 1, when the code skips
      the multiplication: [rnd (1 * acc) = acc] for a float32 [acc]), stored
      in the input dtype: the 3-product schedule's [ce_dh]; the backward
      multiplies the stored row by its token weight [g_n] (grad_output) in
      float32 and stores the product ([grad_input.mul_(g_rows)]: a bfloat16
      tensor times a float32 one is computed in float32 and rounded once)
      ([ce_dh4]).

    Results:
    - [ce_wg_close]: one weighted entry of G against [w0 (P - [v = t])],
      [P = e^(y - L)], for kernel weights [|w - w0| <= ua |w0|]:
        |w0| ((Kw Fe - 1) P + (Kw - 1) |P - [v = t]| + cw1 ua) + cw0,
      [Kw = (1 + us)(1 + u)^2 (1 + ua)], [Fe = (1 + ue) X],
      [X >= e^(delta + Dl + u Am + ea)], [cw1 = (1 + us)(1 + u)(1 + ua)((1 + u) ee + ea)],
      [cw0 = (1 + us) ea + es] (the products' underflow: also for [w0 = 0]).
    - [ce_dw4_error]: dW's entry [(v, d)], the items the kept tokens:
        |ce_dw4 - sum_n w0_n (P_nv - [v = t_n]) h_nd|
          <= (1 + us) ((1 + gd) E1 + gd T) + us T + es,
        E1 = (Kw Fe - 1) S + (Kw - 1) T + cw1 Hw + cw0 Ha,
      with the a-posteriori sums [S = sum |w0| P |h|],
      [T = sum |w0 (P - [v = t]) h|], [Hw = sum |w0| |h|], [Ha = sum |h|].
    - [ce_dh4_error]: dH's entry [(n, d)], the items the vocabulary rows:
        |ce_dh4 - g a0 sum_v (P_v - [v = t]) W_vd|
          <= Kg |g| B1 + (Kg - 1) |g| |a0| T + cw0,
      [B1] the 3-product dH bound ([ce_dw_bound] at [C = 1], from
      [ce_dh_error]), [Kg = (1 + us)(1 + u)].
    - [ce_dw4_error_two_level], [ce_dh4_error_two_level]: the same bounds
      at [Dl = ce_lse_bound u el Zmax LN NL delta], the lse premise
      composed with [ce_lse_error_two_level]
      (rocq/LinearCrossEntropy/Float/LseLossError.v) instead of assumed: each
      item's lse is its token's merged lse [ce_row2_lse ts1 ts2 tiles2]
      (the groups' states from their first logits, merged from the first
      group's, then [rnd (m + tl.log l)]; [tl.exp] this file's [ex], [tl.log]
      a Section hypothesis [lg] within [el]) and its exact [L] the row's
      [ce_row2_L tiles2]; the row ([row x], the token of dW's item [x]; one
      [tiles2] for dH's entry) meets that theorem's premises
      ([ce_row2_ok]: group and tile sizes, [|z| <= Zmax], [|z - y| <= delta]
      for the forward's logits, the same [delta] as the recomputed logits',
      [ln V <= LN]), with [sum_ok] tile sums [ts1] / [ts2],
      [exp (2 u Zmax) <= XK], [bL = ce_bL2 XK ... < 1], [- ln (1 - bL) <= NL]
      ([ce_row2_lse_error]: [ce_lse_error_two_level] for one row).

    Premises (as LinearCrossEntropy/Float/GradError.v's): [tl.exp] within [ue e^x + ee]
    (a Section hypothesis); each product's float32 accumulation within
    [gd * sum |terms|] of the exact sum ([ce_dsum_tree] proves it for any
    tree of rounded additions of exact products); per item the logit
    [|z - y| <= delta], the lse [|lse - L| <= Dl] (for the 4-product forward
    the merged lse of [ce_lse_error_two_level], rocq/LinearCrossEntropy/Float/LseLossError.v:
    the [_two_level] corollaries derive it from that theorem's premises),
    [|z - lse| <= Am].

    Not covered: softcap, bias, label smoothing and z-loss, float16 (G scaled
    by a power of two), grad_bias, the order of the sums inside cuBLAS / the
    CPU BLAS and the Triton dots (only through the premise on [dsum] and
    [delta]), TF32 products, overflow, the token weight's own rounding for
    "mean" (the premise [ua]: [fl32 (grad_output / K)] is within
    [2^-24 |grad_output / K|] above float32's normal range). *)

From Coq Require Import Reals List Lra Lia Arith.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts Attention.BackwardCorrect Attention.ScorePerturbation.
From Ojas Require Import FloatModel.MixedPrecision Attention.Float.OnlineSoftmaxError.
From Ojas Require Import FloatModel.Notations.
From Ojas Require Import LinearCrossEntropy.Float.GradError.
From Ojas Require LinearCrossEntropy.Float.LseLossError.
Import ListNotations.
Open Scope R_scope.

(** One rounding of a value within [E] of [X]. *)
Lemma ff_close : forall (F : FloatFormat) a X E, Rabs (a - X) <= E ->
  Rabs (ff_rnd F a - X) <= (1 + ff_u F) * E + ff_u F * Rabs X + ff_eta F.
Proof.
  intros F a X E H.
  pose proof (ff_abs F a) as Ha; pose proof (ff_u_nonneg F) as Hu.
  assert (Hb : Rabs a <= Rabs X + E)
    by (replace a with (X + (a - X)) by ring; eapply Rle_trans; [apply Rabs_triang | lra]).
  replace (ff_rnd F a - X) with ((ff_rnd F a - a) + (a - X)) by ring.
  eapply Rle_trans; [apply Rabs_triang |].
  assert (ff_u F * Rabs a <= ff_u F * (Rabs X + E)) by (apply Rmult_le_compat_l; lra).
  lra.
Qed.

Section CeWeighted.

Variable M : MixedModel.

Import ModelNotations.

(** The kernel's [tl.exp]: an assumption (as in LinearCrossEntropy/Float/GradError.v). *)
Variable ex : R -> R.
Variables ue ee : R.
Hypothesis ue_nonneg : 0 <= ue.
Hypothesis ee_nonneg : 0 <= ee.
Hypothesis ex_err : forall x, Rabs (ex x - exp x) <= ue * exp x + ee.

Local Notation gent := (ce_gent M ex).

Lemma cw_nonneg : 0 <= u /\ 0 <= ea /\ 0 <= us /\ 0 <= es.
Proof. pose proof (ff_u_nonneg A_); pose proof (ff_eta_nonneg A_); pose proof (ff_u_nonneg S_);
  pose proof (ff_eta_nonneg S_); lra. Qed.

Lemma cw_X_ge_1 : forall z lse y L delta Dl Am X,
  Rabs (z - y) <= delta -> Rabs (lse - L) <= Dl -> Rabs (z - lse) <= Am ->
  exp (delta + Dl + u * Am + ea) <= X -> 1 <= (1 + ue) * X.
Proof.
  intros z lse y L delta Dl Am X H1 H2 H3 HX; destruct cw_nonneg as [Hu [Hea _]].
  pose proof (Rabs_pos (z - y)); pose proof (Rabs_pos (lse - L)); pose proof (Rabs_pos (z - lse)).
  assert (1 <= X).
  { eapply Rle_trans; [| exact HX]; rewrite <- exp_0; apply ose_exp_le.
    assert (0 <= u * Am) by (apply Rmult_le_pos; lra). lra. }
  nra.
Qed.

(** [_grad_tile]'s entry before the weight: [ce_gent] against [P - [v = t]]. *)
Lemma cw_gent_close : forall z lse y L delta Dl Am X (t : bool),
  Rabs (z - y) <= delta -> Rabs (lse - L) <= Dl -> Rabs (z - lse) <= Am ->
  exp (delta + Dl + u * Am + ea) <= X ->
  let P := exp (y - L) in
  Rabs (gent lse z t - (P - (if t then 1 else 0)))
  <= ((1 + u) * ((1 + ue) * X) - 1) * P + u * Rabs (P - (if t then 1 else 0)) + ((1 + u) * ee + ea).
Proof.
  intros z lse y L delta Dl Am X t H1 H2 H3 HX P.
  pose proof (ce_exp_close M ex ue ee ue_nonneg ex_err z lse y L delta Dl Am X H1 H2 H3 HX) as He.
  fold P in He.
  pose proof (cw_X_ge_1 z lse y L delta Dl Am X H1 H2 H3 HX) as HF.
  destruct cw_nonneg as [Hu [Hea _]].
  assert (HP : 0 < P) by apply exp_pos.
  set (Fe := (1 + ue) * X) in *.
  set (e := ex (rnd (z - lse))) in *.
  assert (0 <= u * P) by (apply Rmult_le_pos; lra).
  assert (0 <= u * ee) by (apply Rmult_le_pos; lra).
  unfold ce_gent; fold e; destruct t.
  - assert (Hd : Rabs (e - 1 - (P - 1)) <= (Fe - 1) * P + ee)
      by (replace (e - 1 - (P - 1)) with (e - P) by ring; exact He).
    pose proof (ff_close A_ (e - 1) (P - 1) _ Hd) as Hc.
    assert ((1 + u) * ((Fe - 1) * P + ee) <= ((1 + u) * Fe - 1) * P + (1 + u) * ee) by nra.
    lra.
  - rewrite Rminus_0_r.
    assert (0 <= u * Fe * P) by (apply Rmult_le_pos; [apply Rmult_le_pos |]; lra).
    pose proof (Rabs_pos P).
    assert (0 <= u * Rabs P) by (apply Rmult_le_pos; lra).
    nra.
Qed.

(** [_grad_tile]'s weighted entry: [g * w] in float32, stored in the input dtype. *)
Definition ce_wgent (lse z w : R) (t : bool) : R := rs (rnd (gent lse z t * w)).

Definition ce_Kw (ua : R) : R := ce_Kg M * (1 + u) * (1 + ua).
Definition ce_cw1 (ua : R) : R := (1 + us) * (1 + u) * (1 + ua) * ((1 + u) * ee + ea).
Definition ce_cw0 : R := (1 + us) * ea + es.

Lemma cw_consts_nonneg : forall ua, 0 <= ua -> 1 <= ce_Kw ua /\ 0 <= ce_cw1 ua /\ 0 <= ce_cw0.
Proof.
  intros ua Hua; destruct cw_nonneg as [Hu [Hea [Hus Hes]]]; pose proof (ce_Kg_ge_1 M) as HK.
  unfold ce_Kw, ce_cw1, ce_cw0; repeat split.
  - assert (1 <= (1 + u) * (1 + ua)) by nra. nra.
  - assert (0 <= (1 + u) * ee) by (apply Rmult_le_pos; lra).
    repeat apply Rmult_le_pos; lra.
  - assert (0 <= (1 + us) * ea) by (apply Rmult_le_pos; lra). lra.
Qed.

Theorem ce_wg_close : forall z lse y L w w0 ua delta Dl Am X (t : bool),
  0 <= ua -> Rabs (w - w0) <= ua * Rabs w0 ->
  Rabs (z - y) <= delta -> Rabs (lse - L) <= Dl -> Rabs (z - lse) <= Am ->
  exp (delta + Dl + u * Am + ea) <= X ->
  let P := exp (y - L) in
  let G := P - (if t then 1 else 0) in
  Rabs (ce_wgent lse z w t - w0 * G)
  <= Rabs w0 * ((ce_Kw ua * ((1 + ue) * X) - 1) * P + (ce_Kw ua - 1) * Rabs G + ce_cw1 ua) + ce_cw0.
Proof.
  intros z lse y L w w0 ua delta Dl Am X t Hua Hw H1 H2 H3 HX P G.
  pose proof (cw_gent_close z lse y L delta Dl Am X t H1 H2 H3 HX) as Hg; fold P G in Hg.
  pose proof (cw_X_ge_1 z lse y L delta Dl Am X H1 H2 H3 HX) as HF.
  destruct cw_nonneg as [Hu [Hea [Hus Hes]]].
  assert (HP : 0 < P) by apply exp_pos.
  set (Fe := (1 + ue) * X) in *.
  set (e := gent lse z t) in *.
  set (E := ((1 + u) * Fe - 1) * P + u * Rabs G + ((1 + u) * ee + ea)) in *.
  pose proof (Rabs_pos w0) as Ha; pose proof (Rabs_pos G) as HG.
  assert (HE : 0 <= E) by (eapply Rle_trans; [apply Rabs_pos | exact Hg]).
  assert (Hwa : Rabs w <= (1 + ua) * Rabs w0)
    by (replace w with ((w - w0) + w0) by ring; eapply Rle_trans; [apply Rabs_triang | lra]).
  (* the product [e * w] in exact arithmetic *)
  assert (Hm : Rabs (e * w - w0 * G) <= (1 + ua) * Rabs w0 * E + ua * Rabs w0 * Rabs G).
  { replace (e * w - w0 * G) with (w * (e - G) + (w - w0) * G) by ring.
    eapply Rle_trans; [apply Rabs_triang |]; rewrite !Rabs_mult.
    assert (Rabs w * Rabs (e - G) <= (1 + ua) * Rabs w0 * E)
      by (apply Rmult_le_compat; [apply Rabs_pos | apply Rabs_pos | exact Hwa | exact Hg]).
    assert (Rabs (w - w0) * Rabs G <= ua * Rabs w0 * Rabs G) by (apply Rmult_le_compat_r; lra).
    lra. }
  pose proof (ff_close A_ _ _ _ Hm) as Hr.
  pose proof (ff_close S_ _ _ _ Hr) as Hs.
  unfold ce_wgent; fold e.
  eapply Rle_trans; [exact Hs |].
  rewrite Rabs_mult.
  assert (Eq : (1 + us) * ((1 + u) * ((1 + ua) * Rabs w0 * E + ua * Rabs w0 * Rabs G) + u * (Rabs w0 * Rabs G) + ea)
               + us * (Rabs w0 * Rabs G) + es
               = Rabs w0 * ((ce_Kw ua * Fe - 1) * P + (ce_Kw ua - 1) * Rabs G + ce_cw1 ua) + ce_cw0
                 - Rabs w0 * P * ((1 + us) * (1 + u) * (1 + ua) - 1))
    by (unfold E, ce_Kw, ce_Kg, ce_cw1, ce_cw0; ring).
  rewrite Eq.
  assert (0 <= Rabs w0 * P * ((1 + us) * (1 + u) * (1 + ua) - 1)).
  { apply Rmult_le_pos; [apply Rmult_le_pos; lra |].
    assert (1 <= (1 + us) * (1 + u)) by nra.
    assert (1 <= (1 + us) * (1 + u) * (1 + ua)) by nra. lra. }
  lra.
Qed.

(** ** dW: one product over all kept tokens *)

Section Tokens.

(** An item: one kept token [n] of dW's entry [(v, d)]; its computed logit
    [iz], the lse [il], the exact logit [iy] and lse [iL], the operand
    [ih = H_nd], the kernel's weight [iw] and the exact one [iw0], whether
    [v] is its target [it]. *)
Variable T : Type.
Variables iz il iy iL ih iw iw0 : T -> R.
Variable it : T -> bool.

Definition cw_P (x : T) : R := exp (iy x - iL x).
Definition cw_G (x : T) : R := cw_P x - (if it x then 1 else 0).
Definition cw_term (x : T) : R := ce_wgent (il x) (iz x) (iw x) (it x) * ih x.
Definition cw_exact (x : T) : R := iw0 x * cw_G x * ih x.

Definition cw_ok (ua delta Dl Am : R) (x : T) : Prop :=
  Rabs (iz x - iy x) <= delta /\ Rabs (il x - iL x) <= Dl /\ Rabs (iz x - il x) <= Am
  /\ Rabs (iw x - iw0 x) <= ua * Rabs (iw0 x).

(** The a-posteriori sums. *)
Definition cw_S (xs : list T) : R := rsum (map (fun x => Rabs (iw0 x) * cw_P x * Rabs (ih x)) xs).
Definition cw_T (xs : list T) : R := rsum (map (fun x => Rabs (cw_exact x)) xs).
Definition cw_Hw (xs : list T) : R := rsum (map (fun x => Rabs (iw0 x) * Rabs (ih x)) xs).
Definition cw_Ha (xs : list T) : R := rsum (map (fun x => Rabs (ih x)) xs).

Definition cw_E1 (ua Fe Sx Tx Hw Ha : R) : R :=
  (ce_Kw ua * Fe - 1) * Sx + (ce_Kw ua - 1) * Tx + ce_cw1 ua * Hw + ce_cw0 * Ha.

(** One term's bound, and its sum over the items: the generic part of
    LinearCrossEntropy/Float/GradError.v ([ce_gen_chunk_close]) with these terms. *)
Definition cw_bd (ua Fe : R) (x : T) : R :=
  (ce_Kw ua * Fe - 1) * (Rabs (iw0 x) * cw_P x * Rabs (ih x)) + (ce_Kw ua - 1) * Rabs (cw_exact x)
  + ce_cw1 ua * (Rabs (iw0 x) * Rabs (ih x)) + ce_cw0 * Rabs (ih x).

Lemma cw_term_close : forall ua delta Dl Am X x,
  0 <= ua -> exp (delta + Dl + u * Am + ea) <= X -> cw_ok ua delta Dl Am x ->
  Rabs (cw_term x - cw_exact x) <= cw_bd ua ((1 + ue) * X) x.
Proof.
  intros ua delta Dl Am X x Hua HX [H1 [H2 [H3 H4]]].
  pose proof (ce_wg_close (iz x) (il x) (iy x) (iL x) (iw x) (iw0 x) ua delta Dl Am X (it x)
                Hua H4 H1 H2 H3 HX) as Hg.
  cbv zeta in Hg; fold (cw_P x) (cw_G x) in Hg.
  unfold cw_bd, cw_term, cw_exact.
  replace (ce_wgent (il x) (iz x) (iw x) (it x) * ih x - iw0 x * cw_G x * ih x)
    with ((ce_wgent (il x) (iz x) (iw x) (it x) - iw0 x * cw_G x) * ih x) by ring.
  rewrite !Rabs_mult.
  assert (Hm : Rabs (ce_wgent (il x) (iz x) (iw x) (it x) - iw0 x * cw_G x) * Rabs (ih x)
          <= (Rabs (iw0 x) * ((ce_Kw ua * ((1 + ue) * X) - 1) * cw_P x + (ce_Kw ua - 1) * Rabs (cw_G x)
              + ce_cw1 ua) + ce_cw0) * Rabs (ih x))
    by (apply Rmult_le_compat_r; [apply Rabs_pos | exact Hg]).
  lra.
Qed.

Lemma cw_bd_sum : forall ua Fe xs,
  ce_gen_B T (cw_bd ua Fe) xs = cw_E1 ua Fe (cw_S xs) (cw_T xs) (cw_Hw xs) (cw_Ha xs).
Proof.
  intros ua Fe xs; unfold ce_gen_B, cw_bd, cw_E1, cw_S, cw_T, cw_Hw, cw_Ha.
  rewrite !rsum_map_plus, !rsum_map_scal_l; reflexivity.
Qed.

(** [_mm_into (grad_weight[slab], G_slab^T, H)]: accumulated in float32, rounded once. *)
Definition ce_dw4 (dsum : list R -> R) (xs : list T) : R := rs (dsum (map cw_term xs)).

Definition cw_dw_bound (gd ua Fe Sx Tx Hw Ha : R) : R :=
  (1 + us) * ((1 + gd) * cw_E1 ua Fe Sx Tx Hw Ha + gd * Tx) + us * Tx + es.

Theorem ce_dw4_error : forall dsum gd ua delta Dl Am X xs,
  0 <= gd -> 0 <= ua -> exp (delta + Dl + u * Am + ea) <= X ->
  ce_gen_dsum_ok T cw_term dsum gd xs -> (forall x, In x xs -> cw_ok ua delta Dl Am x) ->
  Rabs (ce_dw4 dsum xs - rsum (map cw_exact xs))
  <= cw_dw_bound gd ua ((1 + ue) * X) (cw_S xs) (cw_T xs) (cw_Hw xs) (cw_Ha xs).
Proof.
  intros dsum gd ua delta Dl Am X xs Hgd Hua HX Hds Hok.
  assert (Hg : ce_gen_ok T cw_term cw_exact (cw_bd ua ((1 + ue) * X)) xs)
    by (intros x Hx; apply (cw_term_close ua delta Dl Am X x Hua HX), Hok, Hx).
  destruct (ce_gen_chunk_close T cw_term cw_exact _ dsum gd xs Hgd Hg Hds) as [Hd _].
  rewrite cw_bd_sum in Hd; change (ce_gen_T T cw_exact xs) with (cw_T xs) in Hd.
  set (E1 := cw_E1 ua ((1 + ue) * X) (cw_S xs) (cw_T xs) (cw_Hw xs) (cw_Ha xs)) in *.
  pose proof (ff_close S_ _ _ _ Hd) as Hs.
  assert (HT : Rabs (rsum (map cw_exact xs)) <= cw_T xs) by apply bw_rsum_abs.
  destruct cw_nonneg as [_ [_ [Hus _]]].
  assert (us * Rabs (rsum (map cw_exact xs)) <= us * cw_T xs) by (apply Rmult_le_compat_l; lra).
  unfold ce_dw4, cw_dw_bound; fold E1; lra.
Qed.

End Tokens.

(** ** dH: the forward's row [ce_dh], times the token weight in the backward *)

Section Rows.

Variable T : Type.
Variables iz il iy iL ih : T -> R.
Variables it ik : T -> bool.

Local Notation exact := (ce_exact T iy iL ih it ik).

(** [grad_input.mul_(g_rows)]: the stored row times its float32 token weight [g], rounded once. *)
Definition ce_dh4 (dsum : list R -> R) (alpha g : R) (xs : list T) : R :=
  rs (rnd (g * ce_dh M ex T iz il ih it ik dsum alpha xs)).

Theorem ce_dh4_error : forall dsum alpha a0 ua gd delta Dl Am X g xs,
  0 <= ua -> Rabs (alpha - a0) <= ua * Rabs a0 -> 0 <= gd ->
  0 <= delta -> 0 <= Dl -> 0 <= Am -> exp (delta + Dl + u * Am + ea) <= X ->
  dsum_ok M ex T iz il ih it ik dsum gd xs ->
  (forall x, In x xs -> ce_ok T iz il iy iL ik delta Dl Am x) ->
  let B1 := ce_dw_bound M ee gd ((1 + ue) * X) a0 ua 1 (ce_S T iy iL ih ik xs) (ce_T T iy iL ih it ik xs)
              (ce_Ha T ih ik xs) in
  Rabs (ce_dh4 dsum alpha g xs - g * (a0 * rsum (map exact xs)))
  <= ce_Kg M * (Rabs g * B1) + (ce_Kg M - 1) * (Rabs g * (Rabs a0 * ce_T T iy iL ih it ik xs)) + ce_cw0.
Proof.
  intros dsum alpha a0 ua gd delta Dl Am X g xs Hua Hal Hgd Hd Hl Ham HX Hds Hok B1.
  pose proof (ce_dh_error M ex ue ee ue_nonneg ee_nonneg ex_err T iz il iy iL ih it ik dsum alpha a0 ua gd
                delta Dl Am X xs Hua Hal Hgd Hd Hl Ham HX Hds Hok) as H1; fold B1 in H1.
  set (h := ce_dh M ex T iz il ih it ik dsum alpha xs) in *.
  set (Y := a0 * rsum (map exact xs)) in *.
  destruct cw_nonneg as [Hu [Hea [Hus Hes]]].
  assert (HY : Rabs Y <= Rabs a0 * ce_T T iy iL ih it ik xs)
    by (unfold Y; rewrite Rabs_mult; apply Rmult_le_compat_l; [apply Rabs_pos | apply bw_rsum_abs]).
  assert (Hm : Rabs (g * h - g * Y) <= Rabs g * B1)
    by (replace (g * h - g * Y) with (g * (h - Y)) by ring; rewrite Rabs_mult;
        apply Rmult_le_compat_l; [apply Rabs_pos | exact H1]).
  pose proof (ff_close A_ _ _ _ Hm) as Hr.
  pose proof (ff_close S_ _ _ _ Hr) as Hs.
  unfold ce_dh4; fold h.
  eapply Rle_trans; [exact Hs |].
  rewrite Rabs_mult.
  pose proof (Rabs_pos g) as Hg.
  assert (Hgy : Rabs g * Rabs Y <= Rabs g * (Rabs a0 * ce_T T iy iL ih it ik xs)) by (apply Rmult_le_compat_l; lra).
  assert (Eq : (1 + us) * ((1 + u) * (Rabs g * B1) + u * (Rabs g * Rabs Y) + ea) + us * (Rabs g * Rabs Y) + es
               = ce_Kg M * (Rabs g * B1) + (ce_Kg M - 1) * (Rabs g * Rabs Y) + ce_cw0)
    by (unfold ce_Kg, ce_cw0; ring).
  rewrite Eq.
  assert (0 <= ce_Kg M - 1) by (pose proof (ce_Kg_ge_1 M); lra).
  assert ((ce_Kg M - 1) * (Rabs g * Rabs Y) <= (ce_Kg M - 1) * (Rabs g * (Rabs a0 * ce_T T iy iL ih it ik xs)))
    by (apply Rmult_le_compat_l; lra).
  lra.
Qed.

End Rows.

(** ** The lse premise from the 4-product forward: [ce_lse_error_two_level] *)

Section TwoLevel.

(** The kernel's [tl.log]: an assumption (as in LinearCrossEntropy/Float/LseLossError.v).  Its [tl.exp] is
    this file's [ex]: [ex_err] holds for all [x], in particular for [x <= 0]. *)
Variable lg : R -> R.
Variables el lmin lmax : R.
Hypothesis lg_fmt : forall x, ff_fmt A_ (lg x).
Hypothesis lg_err : forall x, ff_fmt A_ x -> lmin <= x <= lmax -> Rabs (lg x - ln x) <= el.

(** A token's row as the 4-product forward streams it: [tiles2], the [_rows_kernel] merge's
    tiles of groups, a group the vocabulary tiles one [_logits_kernel] STATS program streams,
    a logit the pair [(z, y)] of its float32 value and its exact [h . w_v]. *)
Definition ce_row2_logits (tiles2 : list (list (list (list (R * R))))) : list (R * R) :=
  concat (map (@concat _) (concat tiles2)).

(** The exact [L = ln sum_v e^(y_v)] of the row. *)
Definition ce_row2_L (tiles2 : list (list (list (list (R * R))))) : R :=
  ln (rsum (map (fun zy => exp (snd zy)) (ce_row2_logits tiles2))).

(** The merged lse the forward stores: each group's state from its first logit ([grp_state],
    tile sum [ts1]), merged from the first group's [(m_g, 0)] (tile sum [ts2]), then
    [rnd (m + tl.log l)]. *)
Definition ce_row2_lse (ts1 ts2 : list R -> R) (tiles2 : list (list (list (list (R * R))))) : R :=
  let st := LseLossError.ce_run M ex (list (list (R * R))) (LseLossError.grp_m M ex ts1)
              (LseLossError.grp_l M ex ts1) ts2
              (LseLossError.grp_m M ex ts1 (hd [] (concat tiles2)), 0) tiles2 in
  rnd (fst st + lg (snd st)).

(** [ce_lse_error_two_level]'s [bL = C2 - 1 + R2]. *)
Definition ce_bL2 (XK : R) (Dt1 Bt1 T1 N1 Dt2 Bt2 T2 Nn : nat) : R :=
  let C1 := LseLossError.ce_H u ue XK 1 Dt1 * LseLossError.ce_Q u ue ^ T1 * XK in
  let R1 := INR T1 * LseLossError.ce_a u ue ee XK ^ T1
            * LseLossError.ce_b u ue ee ea XK 1 0 1 Dt1 Bt1 T1 N1 in
  let C2 := LseLossError.ce_H u ue XK C1 Dt2 * LseLossError.ce_Q u ue ^ T2 * XK in
  let R2 := INR T2 * LseLossError.ce_a u ue ee XK ^ T2
            * LseLossError.ce_b u ue ee ea XK C1 R1 (INR N1) Dt2 Bt2 T2 Nn in
  C2 - 1 + R2.

(** [ce_lse_error_two_level]'s premises on one row (its first group the merge's start). *)
Definition ce_row2_ok (Bt1 T1 N1 Bt2 T2 Nn : nat) (Zmax delta LN : R)
    (tiles2 : list (list (list (list (R * R))))) : Prop :=
  concat tiles2 <> []
  /\ (forall g, In g (concat tiles2) -> concat g <> [] /\ Forall (fun tl => (length tl <= Bt1)%nat) g
                                     /\ (length g <= T1)%nat /\ (length (concat g) <= N1)%nat)
  /\ Forall (fun tl => (length tl <= Bt2)%nat) tiles2 /\ (length tiles2 <= T2)%nat
  /\ (length (concat tiles2) <= Nn)%nat
  /\ (forall zy, In zy (ce_row2_logits tiles2) ->
        ff_fmt A_ (fst zy) /\ Rabs (fst zy) <= Zmax /\ Rabs (fst zy - snd zy) <= delta)
  /\ ln (INR (length (ce_row2_logits tiles2))) <= LN.

(** [ce_lse_error_two_level] for one row. *)
Lemma ce_row2_lse_error : forall ts1 ts2 (Dt1 Bt1 T1 N1 Dt2 Bt2 T2 Nn : nat) Zmax XK delta LN NL tiles2,
  LseLossError.sum_ok M ts1 Dt1 Bt1 -> LseLossError.sum_ok M ts2 Dt2 Bt2 ->
  exp (u * (2 * Zmax)) <= XK -> ce_bL2 XK Dt1 Bt1 T1 N1 Dt2 Bt2 T2 Nn < 1 ->
  - ln (1 - ce_bL2 XK Dt1 Bt1 T1 N1 Dt2 Bt2 T2 Nn) <= NL ->
  lmin <= 1 - ce_bL2 XK Dt1 Bt1 T1 N1 Dt2 Bt2 T2 Nn -> (1 + ce_bL2 XK Dt1 Bt1 T1 N1 Dt2 Bt2 T2 Nn) * exp LN <= lmax ->
  ce_row2_ok Bt1 T1 N1 Bt2 T2 Nn Zmax delta LN tiles2 ->
  Rabs (ce_row2_lse ts1 ts2 tiles2 - ce_row2_L tiles2) <= LseLossError.ce_lse_bound u el Zmax LN NL delta.
Proof.
  intros ts1 ts2 Dt1 Bt1 T1 N1 Dt2 Bt2 T2 Nn Zmax XK delta LN NL tiles2 Hts1 Hts2 HXK HbL HNL Hlmin Hlmax
    [Hne [Hg [HB2 [HT2 [HN2 [Hz HLN]]]]]].
  apply (LseLossError.ce_lse_error_two_level M ex ue ee ue_nonneg ee_nonneg (fun x _ => ex_err x)
           lg el lmin lmax lg_fmt lg_err ts1 (hd [] (concat tiles2)) tiles2 ts2 Dt1 Bt1 T1 N1 Dt2 Bt2 T2 Nn
           Zmax XK delta LN NL); auto.
  destruct (concat tiles2); [congruence | left; reflexivity].
Qed.

(** dW: each kept token's lse its row's merged lse, [row x] the row of item [x]'s token. *)
Theorem ce_dw4_error_two_level : forall (T : Type) (iz il iy iL ih iw iw0 : T -> R) (it : T -> bool)
    (row : T -> list (list (list (list (R * R))))) ts1 ts2 (Dt1 Bt1 T1 N1 Dt2 Bt2 T2 Nn : nat)
    dsum gd ua delta Am Zmax XK LN NL X xs,
  let Dl := LseLossError.ce_lse_bound u el Zmax LN NL delta in
  0 <= gd -> 0 <= ua -> exp (delta + Dl + u * Am + ea) <= X ->
  ce_gen_dsum_ok T (cw_term T iz il ih iw it) dsum gd xs ->
  LseLossError.sum_ok M ts1 Dt1 Bt1 -> LseLossError.sum_ok M ts2 Dt2 Bt2 ->
  exp (u * (2 * Zmax)) <= XK -> ce_bL2 XK Dt1 Bt1 T1 N1 Dt2 Bt2 T2 Nn < 1 ->
  - ln (1 - ce_bL2 XK Dt1 Bt1 T1 N1 Dt2 Bt2 T2 Nn) <= NL ->
  lmin <= 1 - ce_bL2 XK Dt1 Bt1 T1 N1 Dt2 Bt2 T2 Nn -> (1 + ce_bL2 XK Dt1 Bt1 T1 N1 Dt2 Bt2 T2 Nn) * exp LN <= lmax ->
  (forall x, In x xs ->
     Rabs (iz x - iy x) <= delta /\ Rabs (iz x - il x) <= Am /\ Rabs (iw x - iw0 x) <= ua * Rabs (iw0 x)
     /\ ce_row2_ok Bt1 T1 N1 Bt2 T2 Nn Zmax delta LN (row x)
     /\ il x = ce_row2_lse ts1 ts2 (row x) /\ iL x = ce_row2_L (row x)) ->
  Rabs (ce_dw4 T iz il ih iw it dsum xs - rsum (map (cw_exact T iy iL ih iw0 it) xs))
  <= cw_dw_bound gd ua ((1 + ue) * X) (cw_S T iy iL ih iw0 xs) (cw_T T iy iL ih iw0 it xs)
       (cw_Hw T ih iw0 xs) (cw_Ha T ih xs).
Proof.
  intros T iz il iy iL ih iw iw0 it row ts1 ts2 Dt1 Bt1 T1 N1 Dt2 Bt2 T2 Nn dsum gd ua delta Am Zmax XK LN NL X xs
    Dl Hgd Hua HX Hds Hts1 Hts2 HXK HbL HNL Hlmin Hlmax Hok.
  apply (ce_dw4_error T iz il iy iL ih iw iw0 it dsum gd ua delta Dl Am X xs Hgd Hua HX Hds).
  intros x Hx; destruct (Hok x Hx) as [H1 [H3 [H4 [Hr [El EL]]]]].
  split; [exact H1 | split; [| split; [exact H3 | exact H4]]].
  rewrite El, EL; exact (ce_row2_lse_error ts1 ts2 Dt1 Bt1 T1 N1 Dt2 Bt2 T2 Nn Zmax XK delta LN NL (row x)
                           Hts1 Hts2 HXK HbL HNL Hlmin Hlmax Hr).
Qed.

(** dH: the entry [(n, d)]; every item's lse the merged lse of token [n]'s row [tiles2]. *)
Theorem ce_dh4_error_two_level : forall (T : Type) (iz il iy iL ih : T -> R) (it ik : T -> bool)
    tiles2 ts1 ts2 (Dt1 Bt1 T1 N1 Dt2 Bt2 T2 Nn : nat) dsum alpha a0 ua gd delta Am Zmax XK LN NL X g xs,
  let Dl := LseLossError.ce_lse_bound u el Zmax LN NL delta in
  0 <= ua -> Rabs (alpha - a0) <= ua * Rabs a0 -> 0 <= gd ->
  0 <= delta -> 0 <= Am -> exp (delta + Dl + u * Am + ea) <= X ->
  dsum_ok M ex T iz il ih it ik dsum gd xs ->
  LseLossError.sum_ok M ts1 Dt1 Bt1 -> LseLossError.sum_ok M ts2 Dt2 Bt2 ->
  exp (u * (2 * Zmax)) <= XK -> ce_bL2 XK Dt1 Bt1 T1 N1 Dt2 Bt2 T2 Nn < 1 ->
  - ln (1 - ce_bL2 XK Dt1 Bt1 T1 N1 Dt2 Bt2 T2 Nn) <= NL ->
  lmin <= 1 - ce_bL2 XK Dt1 Bt1 T1 N1 Dt2 Bt2 T2 Nn -> (1 + ce_bL2 XK Dt1 Bt1 T1 N1 Dt2 Bt2 T2 Nn) * exp LN <= lmax ->
  ce_row2_ok Bt1 T1 N1 Bt2 T2 Nn Zmax delta LN tiles2 ->
  (forall x, In x xs -> ik x = true ->
     Rabs (iz x - iy x) <= delta /\ Rabs (iz x - il x) <= Am
     /\ il x = ce_row2_lse ts1 ts2 tiles2 /\ iL x = ce_row2_L tiles2) ->
  let B1 := ce_dw_bound M ee gd ((1 + ue) * X) a0 ua 1 (ce_S T iy iL ih ik xs) (ce_T T iy iL ih it ik xs)
              (ce_Ha T ih ik xs) in
  Rabs (ce_dh4 T iz il ih it ik dsum alpha g xs - g * (a0 * rsum (map (ce_exact T iy iL ih it ik) xs)))
  <= ce_Kg M * (Rabs g * B1) + (ce_Kg M - 1) * (Rabs g * (Rabs a0 * ce_T T iy iL ih it ik xs)) + ce_cw0.
Proof.
  intros T iz il iy iL ih it ik tiles2 ts1 ts2 Dt1 Bt1 T1 N1 Dt2 Bt2 T2 Nn dsum alpha a0 ua gd delta Am Zmax XK
    LN NL X g xs Dl Hua Hal Hgd Hd Ham HX Hds Hts1 Hts2 HXK HbL HNL Hlmin Hlmax Hr Hok B1.
  pose proof (ce_row2_lse_error ts1 ts2 Dt1 Bt1 T1 N1 Dt2 Bt2 T2 Nn Zmax XK delta LN NL tiles2
                Hts1 Hts2 HXK HbL HNL Hlmin Hlmax Hr) as HL; fold Dl in HL.
  apply (ce_dh4_error T iz il iy iL ih it ik dsum alpha a0 ua gd delta Dl Am X g xs Hua Hal Hgd Hd
           ltac:(eapply Rle_trans; [apply Rabs_pos | exact HL]) Ham HX Hds).
  intros x Hx Hk; destruct (Hok x Hx Hk) as [H1 [H3 [El EL]]].
  split; [exact H1 | split; [rewrite El, EL; exact HL | exact H3]].
Qed.

End TwoLevel.

End CeWeighted.
