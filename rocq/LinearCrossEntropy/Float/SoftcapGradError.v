(** * The capped chunked linear cross-entropy's gradients dH and dW in mixed precision.

    kernels/ojas_kernels/linear_cross_entropy_three_products.py, the 3-product schedule ([_three_products]) with a
    final-logit softcap [c] (HAS_CAP, [_rows_kernel] with STREAM: the fp32 raw logits
    [r] read back from the logits buffer), no bias, label smoothing and z-loss 0, token
    weight 1 (bfloat16, float32).  [_rows_kernel] GRAD recomputes, per kept token and
    vocabulary row, the capped logit [z = rnd (c * th r)] ([_softcap]: [sc_z] of
    LinearCrossEntropy/Float/SoftcapError.v) and [_grad_tile] computes, in this order,
      g  = tl.exp (rnd (z - lse))             [- 1, rounded, for the target] ([ce_gent]),
      cf = 1.0 - (z / c)^2                    ([_cap_chain]: [sc_chain_ok]),
      G  = rnd_s (rnd (g * cf))               ([* 1.0], the token weight, is exact),
    stored in the input dtype; an ignored token's row is an exact [0] ([sc_g]).  The
    exact entry is [(P_c - [v = t]) (1 - tanh (y / c)^2)] with [P_c = e^(c tanh (y / c) - L)],
    [y = h . w_v] and [L] the exact lse of the capped logits ([sc_G]): the partial
    derivative of the capped loss in the raw logit (Gradient.v's [softcap_grad]).  dH and
    dW are the products of LinearCrossEntropy/Float/GradError.v, run by its generic [ce_gen_run] /
    [ce_gen_dh] over these entries.

    Premises: those of LinearCrossEntropy/Float/GradError.v ([tl.exp] within [ue e^x + ee]; the fp32
    accumulation of each product within [gd * sum |terms|]: [ce_gen_dsum_ok], proved by
    [ce_dsum_tree] for any reduction tree) and of LinearCrossEntropy/Float/SoftcapError.v (the computed
    tanh [th] within [ut |tanh| + et], the division [dv] within [ud |z / c| + ed]); per
    kept item the raw logit [|r - y| <= dr] (fp32, a number of the format), the lse
    [|lse - L| <= Dl] (the caller takes [ce_lse_error_softcap]'s bound), [|z - lse| <= Am].

    Results, with [dz = sc_delta dr] (the capped logit's error, [sc_logit_error]),
    [Ec = sc_chain_bound dz] (the chain factor's, [sc_chain_error]),
    [X >= e^(dz + Dl + u Am + ea)], [Fe = (1 + ue) X], [Kg = (1 + us)(1 + u)],
    [Kc = (1 + us)(1 + u)^2], [c1 = (1 + u) ee + ea], [cc = Kg c1 + (1 + us) ea + es]:
    - [sc_g_close]: one capped entry, with [k = 1 - tanh (y / c)^2], [G0 = P_c - [v = t]],
        |G - G0 k| <= (Kc Fe - 1) P_c k + (Kc - 1) |G0 k|
                      + Kg Ec (((1 + u) Fe - 1) P_c + (1 + u) |G0| + c1) + cc;
    - [sc_dw_error], [sc_dh_error]: dW over the [C] token chunks, dH's entry ([C = 1]):
        ce_gen_bound gd a0 ua C E1 Tc,
        E1 = (Kc Fe - 1) Sk + (Kc - 1) Tc + Kg Ec (((1 + u) Fe - 1) S + (1 + u) T0 + c1 Ha) + cc Ha,
      with the a-posteriori sums over the items, from the exact capped probabilities:
      [Sk = sum P_c k |h|], [Tc = sum |G0 k h|], [S = sum P_c |h|], [T0 = sum |G0 h|],
      [Ha = sum_(kept) |h|] ([ce_gen_bound]: [Kg^C (Q + C ea) + (Kg^C - 1) |a0| Tc
      + C Kg^C es], [Q = |a0| (w (Tc + E2) + E2)], [E2 = (1 + gd) E1 + gd Tc]).

    Not covered: the two-level (4-product) schedule and the logits of [fwd_logits] other
    than the streamed buffer (their [dr] is the caller's); bias (added before the cap),
    label smoothing, z-loss, float16's scaled G; the computed tanh and division
    themselves (premises, measured); FMA contraction of [c * th] and of [g * cf];
    overflow; the order of the sums inside cuBLAS / the CPU BLAS (only through [gd]);
    the scaling by grad_output after the fact. *)

From Coq Require Import Reals List Lra.
From Ojas Require Import VectorFacts.
From Ojas Require Import FloatModel.MixedPrecision LinearCrossEntropy.Float.GradError LinearCrossEntropy.Float.SoftcapError.
From Ojas Require Import FloatModel.Notations.
Import ListNotations.
Open Scope R_scope.

Section ScGrad.

Variable M : MixedModel.

Import ModelNotations.
Local Notation Kg := (ce_Kg M).

(** The kernel's [tl.exp], tanh, division and chain factor: assumptions. *)
Variable ex : R -> R.
Variables ue ee : R.
Hypothesis ue_nonneg : 0 <= ue.
Hypothesis ee_nonneg : 0 <= ee.
Hypothesis ex_err : forall x, Rabs (ex x - exp x) <= ue * exp x + ee.
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

Definition sc_Kc : R := (1 + us) * (1 + u) ^ 2.
Definition sc_c1 : R := (1 + u) * ee + ea.
Definition sc_cc : R := Kg * sc_c1 + (1 + us) * ea + es.

(** [_grad_tile] with HAS_CAP at [eps = lam = 0], weight 1, stored. *)
Definition sc_gent (lse z : R) (t : bool) : R := rs (rnd (ce_gent M ex lse z t * cf z)).

Lemma sc_k_bounds : forall y, 0 <= 1 - tanh (y / c) ^ 2 <= 1.
Proof.
  intros y; pose proof (sc_tanh_lt_1 (y / c)) as Ht.
  assert (tanh (y / c) ^ 2 = Rabs (tanh (y / c)) * Rabs (tanh (y / c)))
    by (rewrite <- Rabs_mult, Rabs_right; [ring | nra]).
  pose proof (Rabs_pos (tanh (y / c))); nra.
Qed.

(** One entry, [G0 = P_c - [t]] its uncapped factor, [k] the exact chain factor. *)
Lemma sc_gent_close : forall r lse y L dr Dl Am X (t : bool),
  fmt r -> Rabs (r - y) <= dr -> Rabs (lse - L) <= Dl -> Rabs (sc_z M c th r - lse) <= Am ->
  exp (sc_delta u ea c ut et dr + Dl + u * Am + ea) <= X ->
  let P := exp (c * tanh (y / c) - L) in
  let G0 := P - (if t then 1 else 0) in
  let k := 1 - tanh (y / c) ^ 2 in
  let Fe := (1 + ue) * X in
  let Ec := sc_chain_bound u ea c ud ed (sc_delta u ea c ut et dr) in
  Rabs (sc_gent lse (sc_z M c th r) t - G0 * k)
  <= (sc_Kc * Fe - 1) * (P * k) + (sc_Kc - 1) * Rabs (G0 * k)
     + Kg * Ec * (((1 + u) * Fe - 1) * P + (1 + u) * Rabs G0 + sc_c1) + sc_cc.
Proof.
  intros r lse y L dr Dl Am X t Fr Hr Hl Ha HX P G0 k Fe Ec.
  destruct (ce_nonneg M) as [Hu [Hea [Hus Hes]]].
  pose proof (ce_Kg_ge_1 M) as HK.
  destruct (sc_logit_error M c c_pos th ut et ut_nonneg th_err r y dr Fr Hr) as [Hz _].
  set (z := sc_z M c th r) in *.
  pose proof (ce_gent_close M ex ue ee ue_nonneg ee_nonneg ex_err z lse _ L _ Dl Am X t Hz Hl Ha HX) as Hg.
  pose proof (sc_chain_error M c c_pos dv ud ed ud_nonneg ed_nonneg dv_err z y _ (cf z)
                (ff_rnd_fmt A_ _) Hz (cf_ok z)) as Hc.
  fold P G0 k Fe Ec in Hg, Hc.
  pose proof (sc_k_bounds y) as Hk; fold k in Hk.
  assert (HP : 0 < P) by apply exp_pos.
  unfold sc_gent.
  set (g := ce_gent M ex lse z t) in *.
  set (q := cf z) in *.
  set (A := ((1 + u) * Fe - 1) * P + u * Rabs G0 + ((1 + u) * ee + ea)) in *.
  assert (HA : 0 <= A) by (eapply Rle_trans; [apply Rabs_pos | exact Hg]).
  assert (HEc : 0 <= Ec) by (eapply Rle_trans; [apply Rabs_pos | exact Hc]).
  assert (Hq : Rabs q <= k + Ec).
  { replace q with (k + (q - k)) by ring; eapply Rle_trans; [apply Rabs_triang |].
    rewrite (Rabs_right k) by lra; lra. }
  (* the product g * cf, exact *)
  set (E1 := A * k + Ec * (A + Rabs G0)).
  assert (S1 : Rabs (g * q - G0 * k) <= E1).
  { replace (g * q - G0 * k) with ((g - G0) * q + G0 * (q - k)) by ring.
    eapply Rle_trans; [apply Rabs_triang |]; rewrite !Rabs_mult.
    assert (Rabs (g - G0) * Rabs q <= A * (k + Ec)) by (apply Rmult_le_compat; auto using Rabs_pos).
    assert (Rabs G0 * Rabs (q - k) <= Rabs G0 * Ec) by (apply Rmult_le_compat_l; auto using Rabs_pos).
    unfold E1; nra. }
  (* rounded in fp32 *)
  pose proof (ff_abs A_ (g * q)) as Hr1.
  assert (Hgq : Rabs (g * q) <= Rabs (G0 * k) + E1)
    by (replace (g * q) with (G0 * k + (g * q - G0 * k)) at 1 by ring; eapply Rle_trans; [apply Rabs_triang | lra]).
  assert (S2 : Rabs (rnd (g * q) - G0 * k) <= (1 + u) * E1 + u * Rabs (G0 * k) + ea).
  { replace (rnd (g * q) - G0 * k) with ((rnd (g * q) - g * q) + (g * q - G0 * k)) by ring.
    eapply Rle_trans; [apply Rabs_triang |].
    assert (u * Rabs (g * q) <= u * (Rabs (G0 * k) + E1)) by (apply Rmult_le_compat_l; lra). lra. }
  (* stored *)
  set (p := rnd (g * q)) in *.
  pose proof (ff_abs S_ p) as Hr2.
  assert (Hp : Rabs p <= Rabs (G0 * k) + ((1 + u) * E1 + u * Rabs (G0 * k) + ea))
    by (replace p with (G0 * k + (p - G0 * k)) at 1 by ring; eapply Rle_trans; [apply Rabs_triang | lra]).
  assert (S3 : Rabs (rs p - G0 * k)
               <= (1 + us) * ((1 + u) * E1 + u * Rabs (G0 * k) + ea) + us * Rabs (G0 * k) + es).
  { replace (rs p - G0 * k) with ((rs p - p) + (p - G0 * k)) by ring.
    eapply Rle_trans; [apply Rabs_triang |].
    assert (us * Rabs p <= us * (Rabs (G0 * k) + ((1 + u) * E1 + u * Rabs (G0 * k) + ea)))
      by (apply Rmult_le_compat_l; lra).
    assert ((1 + us) * Rabs (p - G0 * k) <= (1 + us) * ((1 + u) * E1 + u * Rabs (G0 * k) + ea))
      by (apply Rmult_le_compat_l; lra).
    lra. }
  eapply Rle_trans; [exact S3 |].
  assert (Ek : Rabs (G0 * k) = Rabs G0 * k) by (rewrite Rabs_mult, (Rabs_right k) by lra; reflexivity).
  assert (F1 : 0 <= (Kg - 1) * (P * k)) by (apply Rmult_le_pos; [lra | apply Rmult_le_pos; lra]).
  assert (F2 : 0 <= Kg * sc_c1 * (1 - k)).
  { apply Rmult_le_pos; [apply Rmult_le_pos; [lra |] | lra].
    unfold sc_c1; assert (0 <= (1 + u) * ee) by (apply Rmult_le_pos; lra); lra. }
  assert (Eq : (sc_Kc * Fe - 1) * (P * k) + (sc_Kc - 1) * Rabs (G0 * k)
               + Kg * Ec * (((1 + u) * Fe - 1) * P + (1 + u) * Rabs G0 + sc_c1) + sc_cc
               = (1 + us) * ((1 + u) * E1 + u * Rabs (G0 * k) + ea) + us * Rabs (G0 * k) + es
                 + (Kg - 1) * (P * k) + Kg * sc_c1 * (1 - k)).
  { unfold E1, A, sc_Kc, sc_cc, sc_c1, ce_Kg; rewrite Ek; ring. }
  rewrite Eq; lra.
Qed.

Section Items.

(** An item: one term of dH's or dW's sum; its raw fp32 logit [ir] (capped by the
    kernel), the lse the kernel uses [il], the exact raw logit [iy], the exact lse of the
    capped logits [iL], the other operand [ih], whether it is the target [it] and
    whether the token is kept [ik]. *)
Variable T : Type.
Variables ir il iy iL ih : T -> R.
Variables it ik : T -> bool.

(** The exact capped logit, the exact chain factor. *)
Definition sc_yc (x : T) : R := c * tanh (iy x / c).
Definition sc_k (x : T) : R := 1 - tanh (iy x / c) ^ 2.

Local Notation P := (ce_P T sc_yc iL ik).
Local Notation G0 := (ce_G T sc_yc iL it ik).
Local Notation e0 := (ce_exact T sc_yc iL ih it ik).

Definition sc_g (x : T) : R := if ik x then sc_gent (il x) (sc_z M c th (ir x)) (it x) else 0.
Definition sc_G (x : T) : R := G0 x * sc_k x.
Definition sc_term (x : T) : R := sc_g x * ih x.
Definition sc_exact (x : T) : R := sc_G x * ih x.

Definition sc_ok (dr Dl Am : R) (x : T) : Prop :=
  ik x = true -> fmt (ir x) /\ Rabs (ir x - iy x) <= dr /\ Rabs (il x - iL x) <= Dl
                 /\ Rabs (sc_z M c th (ir x) - il x) <= Am.

(** One term's bound. *)
Definition sc_bd (Fe Ec : R) (x : T) : R :=
  (sc_Kc * Fe - 1) * (P x * sc_k x * Rabs (ih x)) + (sc_Kc - 1) * Rabs (sc_exact x)
  + Kg * Ec * (((1 + u) * Fe - 1) * (P x * Rabs (ih x)) + (1 + u) * Rabs (e0 x)
               + sc_c1 * (if ik x then Rabs (ih x) else 0))
  + sc_cc * (if ik x then Rabs (ih x) else 0).

Theorem sc_g_close : forall dr Dl Am X x,
  exp (sc_delta u ea c ut et dr + Dl + u * Am + ea) <= X -> sc_ok dr Dl Am x ->
  let Fe := (1 + ue) * X in
  let Ec := sc_chain_bound u ea c ud ed (sc_delta u ea c ut et dr) in
  Rabs (sc_g x - sc_G x)
  <= (sc_Kc * Fe - 1) * (P x * sc_k x) + (sc_Kc - 1) * Rabs (sc_G x)
     + (if ik x then Kg * Ec * (((1 + u) * Fe - 1) * P x + (1 + u) * Rabs (G0 x) + sc_c1) + sc_cc else 0).
Proof.
  intros dr Dl Am X x HX Hok; cbv zeta.
  unfold sc_g, sc_G, ce_P, ce_G; destruct (ik x) eqn:Ek.
  - destruct (Hok Ek) as [Fr [Hr [Hl Ha]]].
    pose proof (sc_gent_close (ir x) (il x) (iy x) (iL x) dr Dl Am X (it x) Fr Hr Hl Ha HX) as H.
    cbv zeta in H; unfold sc_k, sc_yc; lra.
  - rewrite !Rmult_0_l, Rminus_0_r, Rabs_R0; lra.
Qed.

Lemma sc_term_close : forall dr Dl Am X x,
  exp (sc_delta u ea c ut et dr + Dl + u * Am + ea) <= X -> sc_ok dr Dl Am x ->
  Rabs (sc_term x - sc_exact x)
  <= sc_bd ((1 + ue) * X) (sc_chain_bound u ea c ud ed (sc_delta u ea c ut et dr)) x.
Proof.
  intros dr Dl Am X x HX Hok.
  pose proof (sc_g_close dr Dl Am X x HX Hok) as Hg; cbv zeta in Hg.
  unfold sc_bd, sc_term, sc_exact, ce_exact;
    replace (sc_g x * ih x - sc_G x * ih x) with ((sc_g x - sc_G x) * ih x) by ring.
  rewrite !Rabs_mult.
  set (Ec := sc_chain_bound u ea c ud ed (sc_delta u ea c ut et dr)) in *.
  match type of Hg with Rabs _ <= ?b =>
    assert (Rabs (sc_g x - sc_G x) * Rabs (ih x) <= b * Rabs (ih x))
      by (apply Rmult_le_compat_r; [apply Rabs_pos | exact Hg]) end.
  destruct (ik x) eqn:Ek; [nra |].
  unfold sc_g, sc_G, ce_P, ce_G; rewrite Ek; cbv iota.
  rewrite ?Rmult_0_l, ?Rminus_0_r, ?Rabs_R0, ?Rmult_0_l, ?Rmult_0_r, ?Rabs_R0, ?Rmult_0_l, ?Rmult_0_r; lra.
Qed.

(** The a-posteriori sums; with LinearCrossEntropy/Float/GradError.v's [ce_S], [ce_T] and [ce_Ha] of
    the capped logits. *)
Definition sc_Sk (xs : list T) : R := rsum (map (fun x => P x * sc_k x * Rabs (ih x)) xs).
Definition sc_Tc (xs : list T) : R := ce_gen_T T sc_exact xs.

Definition sc_E1 (Fe Ec Sk Tc S T0 Ha : R) : R :=
  (sc_Kc * Fe - 1) * Sk + (sc_Kc - 1) * Tc + Kg * Ec * (((1 + u) * Fe - 1) * S + (1 + u) * T0 + sc_c1 * Ha)
  + sc_cc * Ha.

Lemma sc_bd_sum : forall Fe Ec xs,
  ce_gen_B T (sc_bd Fe Ec) xs
  = sc_E1 Fe Ec (sc_Sk xs) (sc_Tc xs) (ce_S T sc_yc iL ih ik xs) (ce_T T sc_yc iL ih it ik xs) (ce_Ha T ih ik xs).
Proof.
  intros; unfold ce_gen_B, sc_bd, sc_E1, sc_Sk, sc_Tc, ce_gen_T, ce_S, ce_T, ce_Ha.
  repeat first [rewrite rsum_map_plus | rewrite rsum_map_scal_l]; reflexivity.
Qed.

(* [u], [ea] spelled out: a notation through the shared ones (Notations.v) would not print. *)
Local Notation bound dr X xs :=
  (sc_E1 ((1 + ue) * X) (sc_chain_bound (ff_u (mp_a M)) (ff_eta (mp_a M)) c ud ed
                           (sc_delta (ff_u (mp_a M)) (ff_eta (mp_a M)) c ut et dr))
         (sc_Sk xs) (sc_Tc xs) (ce_S T sc_yc iL ih ik xs) (ce_T T sc_yc iL ih it ik xs) (ce_Ha T ih ik xs)).

(** dW's entry [(v, d)] after the token chunks [cs] ([_three_products]' grad_weight). *)
Theorem sc_dw_error : forall dsum epi alpha a0 ua gd dr Dl Am X cs,
  epi_ok M alpha epi -> 0 <= ua -> Rabs (alpha - a0) <= ua * Rabs a0 -> 0 <= gd ->
  exp (sc_delta u ea c ut et dr + Dl + u * Am + ea) <= X ->
  (forall ch, In ch cs -> ce_gen_dsum_ok T sc_term dsum gd ch) ->
  (forall x, In x (concat cs) -> sc_ok dr Dl Am x) ->
  Rabs (ce_gen_run M T sc_term dsum epi cs - a0 * rsum (map sc_exact (concat cs)))
  <= ce_gen_bound M gd a0 ua (length cs) (bound dr X (concat cs)) (sc_Tc (concat cs)).
Proof.
  intros dsum epi alpha a0 ua gd dr Dl Am X cs Hepi Hua Hal Hgd HX Hds Hok.
  rewrite <- sc_bd_sum.
  apply (ce_gen_dw_error M T sc_term sc_exact _ dsum epi alpha a0 ua gd cs Hepi Hua Hal Hgd Hds).
  intros x Hx; exact (sc_term_close dr Dl Am X x HX (Hok x Hx)).
Qed.

(** dH's entry [(n, d)]: the items the vocabulary rows of token [n], [ih] the weight's
    coordinate [W_vd]; one product, [rnd (alpha * acc)], stored. *)
Theorem sc_dh_error : forall dsum alpha a0 ua gd dr Dl Am X xs,
  0 <= ua -> Rabs (alpha - a0) <= ua * Rabs a0 -> 0 <= gd ->
  exp (sc_delta u ea c ut et dr + Dl + u * Am + ea) <= X ->
  ce_gen_dsum_ok T sc_term dsum gd xs ->
  (forall x, In x xs -> sc_ok dr Dl Am x) ->
  Rabs (ce_gen_dh M T sc_term dsum alpha xs - a0 * rsum (map sc_exact xs))
  <= ce_gen_bound M gd a0 ua 1 (bound dr X xs) (sc_Tc xs).
Proof.
  intros dsum alpha a0 ua gd dr Dl Am X xs Hua Hal Hgd HX Hds Hok.
  rewrite <- sc_bd_sum.
  apply (ce_gen_dh_error M T sc_term sc_exact _ dsum alpha a0 ua gd xs Hua Hal Hgd Hds).
  intros x Hx; exact (sc_term_close dr Dl Am X x HX (Hok x Hx)).
Qed.

End Items.

End ScGrad.
