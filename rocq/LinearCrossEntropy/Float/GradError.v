(** * The chunked linear cross-entropy's gradients dH and dW in mixed precision: a-posteriori bounds.

    kernels/ojas_kernels/linear_cross_entropy_three_products.py, the 3-product schedule ([_three_products],
    the default for reductions "mean" / "sum"), label smoothing and z-loss 0,
    no softcap, token weight [g_scale = 1] (bfloat16, float32):
    - [_rows_kernel] GRAD writes, for each kept token [n] and vocabulary row
      [v], over its vocabulary tiles, [_grad_tile]'s entry stored in the
      input dtype ([rnd_s]):
        G_nv = rnd_s (tl.exp (rnd (z_nv - lse_n)))            (v <> t_n)
        G_nt = rnd_s (rnd (tl.exp (rnd (z_nt - lse_n)) - 1))  (the target)
      from the fp32 logits [z] it reads and the lse it streamed; an ignored
      token's row is an exact [0] (MASKED) ([ce_gent], [ce_g]);
    - dH: [grad_input] rows [= rnd_s (alpha * (G W))], the product over the
      whole vocabulary accumulated in fp32 ([dsum]), the epilogue
      [rnd (alpha * acc)] ([_addmm_into], beta 0; alpha = fl32 (1 / K) for
      "mean", 1 for "sum") ([ce_dh]);
    - dW: [grad_weight] summed over the token chunks in the input dtype:
      [gw := rnd_s (epi (acc_c) gw)] from [0], [acc_c] the chunk's product
      [G_c^T H_c] accumulated in fp32, [epi a c] the epilogue
      [alpha * a + c] rounded ([epi_ok]: [rnd (rnd (alpha a) + c)], the CPU
      emulation's and a multiply-then-add epilogue, [epi_cpu_ok];
      [rnd (alpha a + c)], a fused one, [epi_fma_ok]; [alpha a + c] unrounded,
      an epilogue rounding once to the storage format, [epi_exact_ok]) ([ce_run]).

    Premises: [tl.exp] within [ue e^x + ee] of [e^x] (a Section hypothesis,
    measured on the device as in LinearCrossEntropy/Float/LseLossError.v); each product's
    fp32 accumulation within [gd * sum |terms|] of the exact sum of the
    exact products (a hypothesis of the theorems: [ce_dsum_tree] proves it,
    with [gd = (1 + u)^k - 1], for any tree of rounded additions of depth
    [k] over numbers of the format, e.g. products of bf16 numbers, exact in
    fp32; [k = n - 1] covers every order of [n] terms); per kept item the
    logit [|z - y| <= delta] against the exact [y = h . w_v], the lse
    [|lse - L| <= Dl] against the exact [L = ln sum_v e^(y_v)] (from
    [ce_lse_error]), [|z - lse| <= Am]; [|alpha - a0| <= ua |a0|].

    Results (per entry of dH or dW; the items are the terms of its sum):
    - [ce_g_close]: one entry of G against [P - [v = t]], [P = e^(y - L)]:
        (Kg Fe - 1) P + (Kg - 1) |P - [v = t]| + cg,
      [Kg = (1 + us)(1 + u)], [Fe = (1 + ue) X], [X >= e^(delta + Dl + u Am + ea)].
    - [ce_dw_error]: after the [C] token chunks [cs],
        |ce_run cs - a0 sum_(n kept) (P_nv - [v = t_n]) h_nd|
          <= Kg^C (Q + C ea) + (Kg^C - 1) |a0| T + C Kg^C es,
        Q  = |a0| (w (T + E2) + E2),  w = ua + u (1 + ua),
        E2 = (1 + gd) E1 + gd T,  E1 = (Kg Fe - 1) S + (Kg - 1) T + cg Ha,
      with the a-posteriori sums over the kept tokens, computed by the
      caller from the exact probabilities: [S = sum P |h|],
      [T = sum |P - [v = t]| |h|], [Ha = sum |h|].
    - [ce_dh_error]: dH's entry, the same with [C = 1] (one product over the
      vocabulary: [h] is [W_vd], the sums over the vocabulary).
    - The generic part, for any entries of G within their own bounds
      ([ce_gen_ok]: each term [|tm - te| <= bd]): [ce_gen_dw_error] and
      [ce_gen_dh_error] (the bound [ce_gen_bound] in [B = sum bd] and
      [T = sum |te|]); the theorems above are its instance with [ce_g_close]
      ([ce_term_close], [ce_bd_sum]); LinearCrossEntropy/Float/SoftcapGradError.v's with
      the capped entries.

    Not covered: softcap (LinearCrossEntropy/Float/SoftcapGradError.v), bias, label smoothing and z-loss (other entries of
    G), the float16 schedule ([g_scale = 256]) and the 4-product schedule's
    dW (token weights inside G); the order of the sums inside cuBLAS / the CPU
    BLAS (only through the hypothesis on [dsum]: the any-order [gd] is the
    classical worst case, not a model of the MMA order, and it assumes
    round-to-nearest fp32 additions, which the tensor cores' internal
    accumulation need not be), float32 products
    under TF32 or 3xTF32 (IEEE fp32 products are rounded: [gd] must then
    include their rounding, [(1 + u)^n - 1]), bf16 products below [2^-134]
    (not exact in fp32: [bf16_mul_fp32]), the scaling by grad_output after
    the fact, overflow.  ([_grad_tile]'s other operations at [eps = lam = 0]
    and weight 1 are exact: [1 * e - 0], [g * 1]; an FMA contraction of them
    changes nothing.) *)

From Coq Require Import Reals List Lra Lia Arith.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts Attention.BackwardCorrect Attention.ScorePerturbation.
From Ojas Require Import FloatModel.MixedPrecision FloatModel.BlockedSum Attention.Float.OnlineSoftmaxError.
From Ojas Require Import FloatModel.Notations.
Import ListNotations.
Open Scope R_scope.

Section CeGrad.

Variable M : MixedModel.

Import ModelNotations.

(** The kernel's [tl.exp]: an assumption. *)
Variable ex : R -> R.
Variables ue ee : R.
Hypothesis ue_nonneg : 0 <= ue.
Hypothesis ee_nonneg : 0 <= ee.
Hypothesis ex_err : forall x, Rabs (ex x - exp x) <= ue * exp x + ee.

(** [_grad_tile] at [eps = lam = 0], token weight 1, before the store. *)
Definition ce_gent (lse z : R) (t : bool) : R :=
  if t then rnd (ex (rnd (z - lse)) - 1) else ex (rnd (z - lse)).

Definition ce_Kg : R := (1 + us) * (1 + u).
Definition ce_cg : R := (1 + us) * ((1 + u) * ee + ea) + es.

Lemma ce_nonneg : 0 <= u /\ 0 <= ea /\ 0 <= us /\ 0 <= es.
Proof. pose proof (ff_u_nonneg A_); pose proof (ff_eta_nonneg A_); pose proof (ff_u_nonneg S_);
  pose proof (ff_eta_nonneg S_); lra. Qed.

Lemma ce_Kg_ge_1 : 1 <= ce_Kg.
Proof. destruct ce_nonneg as [? [? [? ?]]]; unfold ce_Kg; nra. Qed.

Lemma ce_cg_nonneg : 0 <= ce_cg.
Proof. destruct ce_nonneg as [? [? [? ?]]]; unfold ce_cg.
  assert (0 <= (1 + u) * ee) by (apply Rmult_le_pos; lra).
  assert (0 <= (1 + us) * ((1 + u) * ee + ea)) by (apply Rmult_le_pos; lra). lra. Qed.

(** The exponential's argument: [tl.exp (rnd (z - lse))] against [e^(y - L)]. *)
Lemma ce_exp_close : forall z lse y L delta Dl Am X,
  Rabs (z - y) <= delta -> Rabs (lse - L) <= Dl -> Rabs (z - lse) <= Am ->
  exp (delta + Dl + u * Am + ea) <= X ->
  Rabs (ex (rnd (z - lse)) - exp (y - L)) <= ((1 + ue) * X - 1) * exp (y - L) + ee.
Proof.
  intros z lse y L delta Dl Am X Hz Hl Ha HX.
  destruct ce_nonneg as [Hu [Hea _]].
  pose proof (ff_abs A_ (z - lse)) as Hr.
  set (r := rnd (z - lse)) in *.
  set (P := exp (y - L)).
  assert (HP : 0 < P) by apply exp_pos.
  assert (Hd : Rabs (r - (y - L)) <= delta + Dl + u * Am + ea).
  { replace (r - (y - L)) with ((r - (z - lse)) + ((z - y) - (lse - L))) by ring.
    eapply Rle_trans; [apply Rabs_triang |].
    assert (Rabs ((z - y) - (lse - L)) <= delta + Dl).
    { unfold Rminus at 1; eapply Rle_trans; [apply Rabs_triang |]; rewrite Rabs_Ropp; lra. }
    assert (u * Rabs (z - lse) <= u * Am) by (apply Rmult_le_compat_l; lra). lra. }
  assert (Er : exp r = P * exp (r - (y - L))) by (unfold P; rewrite <- exp_plus; f_equal; ring).
  assert (H1 : Rabs (exp (r - (y - L)) - 1) <= X - 1).
  { eapply Rle_trans; [apply ose_exp_sub1 |]; apply Rplus_le_compat_r.
    eapply Rle_trans; [apply ose_exp_le, Hd | exact HX]. }
  assert (H2 : Rabs (exp r - P) <= (X - 1) * P).
  { rewrite Er; replace (P * exp (r - (y - L)) - P) with (P * (exp (r - (y - L)) - 1)) by ring.
    rewrite Rabs_mult, (Rabs_right P) by lra; rewrite Rmult_comm; apply Rmult_le_compat_r; lra. }
  assert (H3 : exp r <= X * P) by (pose proof (sp_Rabs_le_inv _ _ H2); lra).
  pose proof (ex_err r) as He.
  replace (ex r - P) with ((ex r - exp r) + (exp r - P)) by ring.
  eapply Rle_trans; [apply Rabs_triang |].
  assert (ue * exp r <= ue * (X * P)) by (apply Rmult_le_compat_l; lra).
  lra.
Qed.

(** [_grad_tile]'s entry before the store, against [P - [v = t]], [P = e^(y - L)]. *)
Lemma ce_gent_close : forall z lse y L delta Dl Am X (t : bool),
  Rabs (z - y) <= delta -> Rabs (lse - L) <= Dl -> Rabs (z - lse) <= Am ->
  exp (delta + Dl + u * Am + ea) <= X ->
  Rabs (ce_gent lse z t - (exp (y - L) - (if t then 1 else 0)))
  <= ((1 + u) * ((1 + ue) * X) - 1) * exp (y - L) + u * Rabs (exp (y - L) - (if t then 1 else 0))
     + ((1 + u) * ee + ea).
Proof.
  intros z lse y L delta Dl Am X t Hz Hl Ha HX.
  destruct ce_nonneg as [Hu [Hea _]].
  pose proof (ce_exp_close _ _ _ _ _ _ _ _ Hz Hl Ha HX) as He.
  assert (HF : 0 <= (1 + ue) * X)
    by (apply Rmult_le_pos; [lra | left; eapply Rlt_le_trans; [apply exp_pos | exact HX]]).
  unfold ce_gent.
  set (e := ex (rnd (z - lse))) in *.
  set (P := exp (y - L)) in *.
  set (Fe := (1 + ue) * X) in *.
  assert (HP : 0 < P) by apply exp_pos.
  assert (0 <= u * Fe * P) by (apply Rmult_le_pos; [apply Rmult_le_pos |]; lra).
  assert (0 <= u * P) by (apply Rmult_le_pos; lra).
  assert (0 <= u * ee) by (apply Rmult_le_pos; lra).
  destruct t.
  - pose proof (ff_abs A_ (e - 1)) as Hs.
    assert (Rabs (e - 1) <= Rabs (e - P) + Rabs (P - 1))
      by (replace (e - 1) with ((e - P) + (P - 1)) by ring; apply Rabs_triang).
    assert (u * Rabs (e - 1) <= u * (Rabs (e - P) + Rabs (P - 1))) by (apply Rmult_le_compat_l; lra).
    assert (u * Rabs (e - P) <= u * ((Fe - 1) * P + ee)) by (apply Rmult_le_compat_l; lra).
    replace (rnd (e - 1) - (P - 1)) with ((rnd (e - 1) - (e - 1)) + (e - P)) by ring.
    eapply Rle_trans; [apply Rabs_triang |].
    lra.
  - rewrite !Rminus_0_r.
    assert (0 <= u * Rabs P) by (apply Rmult_le_pos; [lra | apply Rabs_pos]).
    lra.
Qed.

(** ** Sums of computed terms [tm] against exact ones [te], each within its own bound [bd]

    The generic part of the results below: LinearCrossEntropy/Float/SoftcapGradError.v instantiates
    it with the capped entries of G. *)

Section Gen.

Variable T : Type.
Variables tm te bd : T -> R.

Definition ce_gen_ok (xs : list T) : Prop := forall x, In x xs -> Rabs (tm x - te x) <= bd x.

(** The hypothesis on the fp32 accumulation of a product's terms. *)
Definition ce_gen_dsum_ok (dsum : list R -> R) (gd : R) (xs : list T) : Prop :=
  Rabs (dsum (map tm xs) - rsum (map tm xs)) <= gd * rsum (map Rabs (map tm xs)).

Definition ce_gen_B (xs : list T) : R := rsum (map bd xs).
Definition ce_gen_T (xs : list T) : R := rsum (map (fun x => Rabs (te x)) xs).

Lemma ce_gen_nonneg : forall xs, ce_gen_ok xs -> 0 <= ce_gen_B xs /\ 0 <= ce_gen_T xs.
Proof.
  intros xs Hok; split; apply rsum_nonneg; intros y Hy; apply in_map_iff in Hy; destruct Hy as [x [<- Hx]].
  - eapply Rle_trans; [apply Rabs_pos | exact (Hok x Hx)].
  - apply Rabs_pos.
Qed.

Lemma ce_gen_app : forall xs ys,
  ce_gen_B (xs ++ ys) = ce_gen_B xs + ce_gen_B ys /\ ce_gen_T (xs ++ ys) = ce_gen_T xs + ce_gen_T ys.
Proof. intros; unfold ce_gen_B, ce_gen_T; rewrite !map_app, !rsum_app; split; reflexivity. Qed.

Lemma ce_gen_terms_close : forall xs, ce_gen_ok xs ->
  Rabs (rsum (map tm xs) - rsum (map te xs)) <= ce_gen_B xs
  /\ rsum (map Rabs (map tm xs)) <= ce_gen_T xs + ce_gen_B xs.
Proof.
  induction xs as [| x xs IH]; intros Hok.
  - unfold ce_gen_B, ce_gen_T; cbn [map]; rewrite !rsum_nil, Rminus_0_r, Rabs_R0; lra.
  - destruct IH as [IH1 IH2]; [intros y Hy; apply Hok; right; exact Hy |].
    pose proof (Hok x (or_introl eq_refl)) as Hx.
    unfold ce_gen_B, ce_gen_T in *; cbn [map] in *; rewrite !rsum_cons in *.
    split.
    + replace (tm x + rsum (map tm xs) - (te x + rsum (map te xs)))
        with ((tm x - te x) + (rsum (map tm xs) - rsum (map te xs))) by ring.
      eapply Rle_trans; [apply Rabs_triang |]; lra.
    + assert (Rabs (tm x) <= Rabs (te x) + Rabs (tm x - te x))
        by (replace (tm x) with ((tm x - te x) + te x) at 1 by ring;
            eapply Rle_trans; [apply Rabs_triang | lra]).
      lra.
Qed.

(** One product: the terms' error, then the accumulation's. *)
Lemma ce_gen_chunk_close : forall dsum gd xs, 0 <= gd -> ce_gen_ok xs -> ce_gen_dsum_ok dsum gd xs ->
  Rabs (dsum (map tm xs) - rsum (map te xs)) <= (1 + gd) * ce_gen_B xs + gd * ce_gen_T xs
  /\ Rabs (dsum (map tm xs)) <= ce_gen_T xs + ((1 + gd) * ce_gen_B xs + gd * ce_gen_T xs).
Proof.
  intros dsum gd xs Hg Hok Hs.
  destruct (ce_gen_terms_close xs Hok) as [H1 H2].
  unfold ce_gen_dsum_ok in Hs.
  assert (Hc : gd * rsum (map Rabs (map tm xs)) <= gd * (ce_gen_T xs + ce_gen_B xs))
    by (apply Rmult_le_compat_l; lra).
  assert (Hd2 : Rabs (dsum (map tm xs) - rsum (map te xs)) <= (1 + gd) * ce_gen_B xs + gd * ce_gen_T xs).
  { replace (dsum (map tm xs) - rsum (map te xs))
      with ((dsum (map tm xs) - rsum (map tm xs)) + (rsum (map tm xs) - rsum (map te xs))) by ring.
    eapply Rle_trans; [apply Rabs_triang |]; lra. }
  split; [exact Hd2 |].
  assert (Rabs (rsum (map te xs)) <= ce_gen_T xs) by apply bw_rsum_abs.
  replace (dsum (map tm xs)) with ((dsum (map tm xs) - rsum (map te xs)) + rsum (map te xs)) by ring.
  eapply Rle_trans; [apply Rabs_triang | lra].
Qed.

End Gen.

Section Items.

(** An item: one term of dH's or dW's sum; its computed logit [iz], the lse
    the kernel uses [il], the exact logit [iy] and lse [iL], the other
    operand [ih] (a coordinate of [W_v] for dH, of [h_n] for dW), whether
    it is the token's target [it] and whether the token is kept [ik]. *)
Variable T : Type.
Variables iz il iy iL ih : T -> R.
Variables it ik : T -> bool.

Definition ce_g (x : T) : R := if ik x then rs (ce_gent (il x) (iz x) (it x)) else 0.
Definition ce_P (x : T) : R := if ik x then exp (iy x - iL x) else 0.
Definition ce_G (x : T) : R := if ik x then exp (iy x - iL x) - (if it x then 1 else 0) else 0.
Definition ce_term (x : T) : R := ce_g x * ih x.
Definition ce_exact (x : T) : R := ce_G x * ih x.

Definition ce_ok (delta Dl Am : R) (x : T) : Prop :=
  ik x = true -> Rabs (iz x - iy x) <= delta /\ Rabs (il x - iL x) <= Dl /\ Rabs (iz x - il x) <= Am.

Lemma ce_P_nonneg : forall x, 0 <= ce_P x.
Proof. intros x; unfold ce_P; destruct (ik x); [left; apply exp_pos | lra]. Qed.

Theorem ce_g_close : forall delta Dl Am X x,
  0 <= delta -> 0 <= Dl -> 0 <= Am -> exp (delta + Dl + u * Am + ea) <= X -> ce_ok delta Dl Am x ->
  Rabs (ce_g x - ce_G x)
  <= (ce_Kg * ((1 + ue) * X) - 1) * ce_P x + (ce_Kg - 1) * Rabs (ce_G x) + (if ik x then ce_cg else 0).
Proof.
  intros delta Dl Am X x Hd0 Hl0 Ha0 HX Hok.
  destruct ce_nonneg as [Hu [Hea [Hus Hes]]].
  pose proof ce_Kg_ge_1 as HK; pose proof ce_cg_nonneg as Hc.
  unfold ce_g, ce_G, ce_P; destruct (ik x) eqn:Ek.
  2: { rewrite Rminus_0_r, Rabs_R0; lra. }
  destruct (Hok Ek) as [H1 [H2 H3]].
  pose proof (ce_gent_close _ _ _ _ _ _ _ _ (it x) H1 H2 H3 HX) as Hg.
  set (g := ce_gent (il x) (iz x) (it x)) in *.
  set (P := exp (iy x - iL x)) in *.
  set (G := P - (if it x then 1 else 0)) in *.
  assert (HP : 0 < P) by apply exp_pos.
  pose proof (ff_abs S_ g) as Hq.
  assert (Hga : Rabs g <= Rabs G + Rabs (g - G))
    by (replace g with (G + (g - G)) at 1 by ring; apply Rabs_triang).
  replace (rs g - G) with ((rs g - g) + (g - G)) by ring.
  eapply Rle_trans; [apply Rabs_triang |].
  assert (us * Rabs g <= us * (Rabs G + Rabs (g - G))) by (apply Rmult_le_compat_l; lra).
  assert ((1 + us) * Rabs (g - G)
          <= (1 + us) * (((1 + u) * ((1 + ue) * X) - 1) * P + u * Rabs G + ((1 + u) * ee + ea)))
    by (apply Rmult_le_compat_l; lra).
  assert (0 <= us * P) by (apply Rmult_le_pos; lra).
  unfold ce_Kg, ce_cg; lra.
Qed.

(** The a-posteriori sums of a list of items. *)
Definition ce_S (xs : list T) : R := rsum (map (fun x => ce_P x * Rabs (ih x)) xs).
Definition ce_T (xs : list T) : R := rsum (map (fun x => Rabs (ce_exact x)) xs).
Definition ce_Ha (xs : list T) : R := rsum (map (fun x => if ik x then Rabs (ih x) else 0) xs).

Definition ce_E1 (Fe S Tg Ha : R) : R := (ce_Kg * Fe - 1) * S + (ce_Kg - 1) * Tg + ce_cg * Ha.
Definition ce_E2 (gd Fe S Tg Ha : R) : R := (1 + gd) * ce_E1 Fe S Tg Ha + gd * Tg.

Lemma ce_sums_nonneg : forall xs, 0 <= ce_S xs /\ 0 <= ce_T xs /\ 0 <= ce_Ha xs.
Proof.
  intros xs; unfold ce_S, ce_T, ce_Ha; repeat split; apply rsum_nonneg; intros y Hy;
    apply in_map_iff in Hy; destruct Hy as [x [<- _]].
  - apply Rmult_le_pos; [apply ce_P_nonneg | apply Rabs_pos].
  - apply Rabs_pos.
  - destruct (ik x); [apply Rabs_pos | lra].
Qed.

Lemma ce_sums_app : forall xs ys,
  ce_S (xs ++ ys) = ce_S xs + ce_S ys /\ ce_T (xs ++ ys) = ce_T xs + ce_T ys
  /\ ce_Ha (xs ++ ys) = ce_Ha xs + ce_Ha ys.
Proof. intros; unfold ce_S, ce_T, ce_Ha; rewrite !map_app, !rsum_app; repeat split. Qed.

(** One term's bound: [ce_g_close] times [|ih|]. *)
Definition ce_bd (Fe : R) (x : T) : R :=
  (ce_Kg * Fe - 1) * (ce_P x * Rabs (ih x)) + (ce_Kg - 1) * Rabs (ce_exact x)
  + ce_cg * (if ik x then Rabs (ih x) else 0).

Lemma ce_bd_sum : forall Fe xs, ce_gen_B T (ce_bd Fe) xs = ce_E1 Fe (ce_S xs) (ce_T xs) (ce_Ha xs).
Proof. intros; unfold ce_gen_B, ce_bd, ce_E1, ce_S, ce_T, ce_Ha; rewrite !rsum_map_plus, !rsum_map_scal_l; reflexivity. Qed.

Lemma ce_term_close : forall delta Dl Am X x,
  0 <= delta -> 0 <= Dl -> 0 <= Am -> exp (delta + Dl + u * Am + ea) <= X -> ce_ok delta Dl Am x ->
  Rabs (ce_term x - ce_exact x) <= ce_bd ((1 + ue) * X) x.
Proof.
  intros delta Dl Am X x Hd Hl Ha HX Hok.
  pose proof (ce_g_close delta Dl Am X x Hd Hl Ha HX Hok) as Hg.
  unfold ce_bd, ce_term, ce_exact; replace (ce_g x * ih x - ce_G x * ih x) with ((ce_g x - ce_G x) * ih x) by ring.
  rewrite !Rabs_mult.
  assert (Rabs (ce_g x - ce_G x) * Rabs (ih x)
          <= ((ce_Kg * ((1 + ue) * X) - 1) * ce_P x + (ce_Kg - 1) * Rabs (ce_G x)
              + (if ik x then ce_cg else 0)) * Rabs (ih x)) by (apply Rmult_le_compat_r; [apply Rabs_pos | exact Hg]).
  destruct (ik x); nra.
Qed.

Lemma ce_terms_close : forall delta Dl Am X xs,
  0 <= delta -> 0 <= Dl -> 0 <= Am -> exp (delta + Dl + u * Am + ea) <= X ->
  (forall x, In x xs -> ce_ok delta Dl Am x) ->
  Rabs (rsum (map ce_term xs) - rsum (map ce_exact xs)) <= ce_E1 ((1 + ue) * X) (ce_S xs) (ce_T xs) (ce_Ha xs)
  /\ rsum (map Rabs (map ce_term xs)) <= ce_T xs + ce_E1 ((1 + ue) * X) (ce_S xs) (ce_T xs) (ce_Ha xs).
Proof.
  intros delta Dl Am X xs Hd Hl Ha HX Hok.
  rewrite <- ce_bd_sum.
  apply (ce_gen_terms_close T ce_term ce_exact (ce_bd ((1 + ue) * X)) xs).
  intros x Hx; apply (ce_term_close delta Dl Am X x Hd Hl Ha HX (Hok x Hx)).
Qed.

(** The hypothesis on the fp32 accumulation of a product's terms. *)
Definition dsum_ok (dsum : list R -> R) (gd : R) (xs : list T) : Prop :=
  Rabs (dsum (map ce_term xs) - rsum (map ce_term xs)) <= gd * rsum (map Rabs (map ce_term xs)).

Lemma ce_chunk_close : forall dsum gd delta Dl Am X xs,
  0 <= gd -> 0 <= delta -> 0 <= Dl -> 0 <= Am -> exp (delta + Dl + u * Am + ea) <= X ->
  (forall x, In x xs -> ce_ok delta Dl Am x) -> dsum_ok dsum gd xs ->
  let E2 := ce_E2 gd ((1 + ue) * X) (ce_S xs) (ce_T xs) (ce_Ha xs) in
  Rabs (dsum (map ce_term xs) - rsum (map ce_exact xs)) <= E2 /\ Rabs (dsum (map ce_term xs)) <= ce_T xs + E2.
Proof.
  intros dsum gd delta Dl Am X xs Hg Hd Hl Ha HX Hok Hs E2.
  unfold E2, ce_E2; rewrite <- ce_bd_sum.
  apply (ce_gen_chunk_close T ce_term ce_exact (ce_bd ((1 + ue) * X)) dsum gd xs Hg); [| exact Hs].
  intros x Hx; apply (ce_term_close delta Dl Am X x Hd Hl Ha HX (Hok x Hx)).
Qed.

End Items.

(** ** The epilogue [alpha * acc + c], rounded *)

Definition epi_ok (alpha : R) (epi : R -> R -> R) : Prop :=
  forall a c, fmt c -> Rabs (epi a c - (alpha * a + c)) <= (1 + u) * (u * Rabs (alpha * a) + ea) + u * Rabs (alpha * a + c).

Theorem epi_cpu_ok : forall alpha, epi_ok alpha (fun a c => rnd (rnd (alpha * a) + c)).
Proof.
  intros alpha a c Fc; destruct ce_nonneg as [Hu [Hea _]].
  pose proof (ff_abs A_ (alpha * a)) as H1.
  set (r := rnd (alpha * a)) in *.
  pose proof (ff_add A_ r c (ff_rnd_fmt A_ _) Fc) as H2.
  replace (rnd (r + c) - (alpha * a + c)) with ((rnd (r + c) - (r + c)) + (r - alpha * a)) by ring.
  eapply Rle_trans; [apply Rabs_triang |].
  assert (Rabs (r + c) <= Rabs (alpha * a + c) + Rabs (r - alpha * a))
    by (replace (r + c) with ((alpha * a + c) + (r - alpha * a)) by ring; apply Rabs_triang).
  assert (u * Rabs (r + c) <= u * (Rabs (alpha * a + c) + (u * Rabs (alpha * a) + ea)))
    by (apply Rmult_le_compat_l; lra).
  nra.
Qed.

Theorem epi_fma_ok : forall alpha, epi_ok alpha (fun a c => rnd (alpha * a + c)).
Proof.
  intros alpha a c _; destruct ce_nonneg as [Hu [Hea _]].
  pose proof (ff_abs A_ (alpha * a + c)).
  assert (0 <= u * Rabs (alpha * a)) by (apply Rmult_le_pos; [lra | apply Rabs_pos]).
  assert (0 <= u * (u * Rabs (alpha * a) + ea)) by (apply Rmult_le_pos; lra).
  nra.
Qed.

Theorem epi_exact_ok : forall alpha, epi_ok alpha (fun a c => alpha * a + c).
Proof.
  intros alpha a c _; destruct ce_nonneg as [Hu [Hea _]].
  rewrite Rminus_diag_eq, Rabs_R0 by reflexivity.
  assert (0 <= u * Rabs (alpha * a)) by (apply Rmult_le_pos; [lra | apply Rabs_pos]).
  assert (0 <= u * Rabs (alpha * a + c)) by (apply Rmult_le_pos; [lra | apply Rabs_pos]).
  assert (0 <= (1 + u) * (u * Rabs (alpha * a) + ea)) by (apply Rmult_le_pos; lra).
  lra.
Qed.

Definition ce_w (ua : R) : R := ua + u * (1 + ua).
Definition ce_Q (a0 ua E2 Tg : R) : R := Rabs a0 * (ce_w ua * (Tg + E2) + E2).

(** One chunk's update [gw := rnd_s (epi acc gw)]. *)
Lemma ce_step_close : forall epi alpha a0 ua gw X E a Xc E2 Tc Tt,
  epi_ok alpha epi -> 0 <= ua -> Rabs (alpha - a0) <= ua * Rabs a0 -> fmt gw ->
  Rabs (gw - X) <= E -> Rabs (a - Xc) <= E2 -> Rabs a <= Tc + E2 -> Rabs (X + a0 * Xc) <= Rabs a0 * Tt ->
  Rabs (rs (epi a gw) - (X + a0 * Xc)) <= ce_Kg * (E + ce_Q a0 ua E2 Tc + ea) + (ce_Kg - 1) * Rabs a0 * Tt + es.
Proof.
  intros epi alpha a0 ua gw X E a Xc E2 Tc Tt Hepi Hua Hal Fg HE Ha Haa HX.
  destruct ce_nonneg as [Hu [Hea [Hus Hes]]].
  pose proof (Rabs_pos a0) as Ha0.
  assert (Hal' : Rabs alpha <= (1 + ua) * Rabs a0)
    by (replace alpha with ((alpha - a0) + a0) by ring; eapply Rle_trans; [apply Rabs_triang | lra]).
  assert (HE2 : 0 <= E2) by (eapply Rle_trans; [apply Rabs_pos | exact Ha]).
  assert (HD : Rabs (alpha * a - a0 * Xc) <= Rabs a0 * (ua * (Tc + E2) + E2)).
  { replace (alpha * a - a0 * Xc) with ((alpha - a0) * a + a0 * (a - Xc)) by ring.
    eapply Rle_trans; [apply Rabs_triang |]; rewrite !Rabs_mult.
    assert (Rabs (alpha - a0) * Rabs a <= ua * Rabs a0 * (Tc + E2))
      by (apply Rmult_le_compat; [apply Rabs_pos | apply Rabs_pos | lra | lra]).
    assert (Rabs a0 * Rabs (a - Xc) <= Rabs a0 * E2) by (apply Rmult_le_compat_l; lra).
    nra. }
  assert (HA : Rabs (alpha * a) <= (1 + ua) * Rabs a0 * (Tc + E2))
    by (rewrite Rabs_mult; apply Rmult_le_compat; [apply Rabs_pos | apply Rabs_pos | lra | lra]).
  set (Dc := Rabs a0 * (ua * (Tc + E2) + E2)) in *.
  set (Xn := X + a0 * Xc) in *.
  assert (H1 : Rabs (alpha * a + gw - Xn) <= Dc + E).
  { unfold Xn; replace (alpha * a + gw - (X + a0 * Xc)) with ((alpha * a - a0 * Xc) + (gw - X)) by ring.
    eapply Rle_trans; [apply Rabs_triang | lra]. }
  assert (H2 : Rabs (alpha * a + gw) <= Rabs a0 * Tt + Dc + E)
    by (replace (alpha * a + gw) with (Xn + (alpha * a + gw - Xn)) by ring; eapply Rle_trans; [apply Rabs_triang | lra]).
  pose proof (Hepi a gw Fg) as H3.
  set (q := epi a gw) in *.
  assert (H4 : Rabs (q - Xn) <= (1 + u) * (u * ((1 + ua) * Rabs a0 * (Tc + E2)) + ea) + u * (Rabs a0 * Tt + Dc + E)
                               + (Dc + E)).
  { replace (q - Xn) with ((q - (alpha * a + gw)) + (alpha * a + gw - Xn)) by ring.
    eapply Rle_trans; [apply Rabs_triang |].
    assert (u * Rabs (alpha * a) <= u * ((1 + ua) * Rabs a0 * (Tc + E2))) by (apply Rmult_le_compat_l; lra).
    assert (u * Rabs (alpha * a + gw) <= u * (Rabs a0 * Tt + Dc + E)) by (apply Rmult_le_compat_l; lra).
    nra. }
  pose proof (ff_abs S_ q) as H5.
  assert (H6 : Rabs q <= Rabs a0 * Tt + Rabs (q - Xn))
    by (replace q with (Xn + (q - Xn)) at 1 by ring; eapply Rle_trans; [apply Rabs_triang | lra]).
  replace (rs q - Xn) with ((rs q - q) + (q - Xn)) by ring.
  eapply Rle_trans; [apply Rabs_triang |].
  assert (us * Rabs q <= us * (Rabs a0 * Tt + Rabs (q - Xn))) by (apply Rmult_le_compat_l; lra).
  assert (Eq : (1 + us) * ((1 + u) * (u * ((1 + ua) * Rabs a0 * (Tc + E2)) + ea) + u * (Rabs a0 * Tt + Dc + E)
                           + (Dc + E)) + us * (Rabs a0 * Tt) + es
               = ce_Kg * (E + ce_Q a0 ua E2 Tc + ea) + (ce_Kg - 1) * Rabs a0 * Tt + es)
    by (unfold ce_Kg, ce_Q, ce_w, Dc; ring).
  rewrite <- Eq.
  assert ((1 + us) * Rabs (q - Xn) <= (1 + us) * ((1 + u) * (u * ((1 + ua) * Rabs a0 * (Tc + E2)) + ea)
                                       + u * (Rabs a0 * Tt + Dc + E) + (Dc + E))) by (apply Rmult_le_compat_l; lra).
  lra.
Qed.

Lemma ce_Q_nonneg : forall a0 ua E2 Tx, 0 <= ua -> 0 <= E2 -> 0 <= Tx -> 0 <= ce_Q a0 ua E2 Tx.
Proof.
  intros; destruct ce_nonneg as [Hu _]; unfold ce_Q, ce_w; apply Rmult_le_pos; [apply Rabs_pos |].
  assert (0 <= u * (1 + ua)) by (apply Rmult_le_pos; lra).
  assert (0 <= (ua + u * (1 + ua)) * (Tx + E2)) by (apply Rmult_le_pos; lra). lra.
Qed.

Lemma ce_Q_app : forall a0 ua E1 T1 E2 T2, ce_Q a0 ua (E1 + E2) (T1 + T2) = ce_Q a0 ua E1 T1 + ce_Q a0 ua E2 T2.
Proof. intros; unfold ce_Q; ring. Qed.

(** ** The products over any terms within their own bounds *)

Section GenRun.

Variable T : Type.
Variables tm te bd : T -> R.

(** dW's token-chunk loop: [gw := rnd_s (epi (dsum chunk terms) gw)] from 0. *)
Definition ce_gen_run (dsum : list R -> R) (epi : R -> R -> R) (cs : list (list T)) : R :=
  fold_left (fun gw c => rs (epi (dsum (map tm c)) gw)) cs 0.

(** dH's entry: one product, rounded once, stored. *)
Definition ce_gen_dh (dsum : list R -> R) (alpha : R) (xs : list T) : R := rs (rnd (alpha * dsum (map tm xs))).

(** [Bx]: the sum of the terms' bounds, [Tx] of the exact terms' magnitudes. *)
Definition ce_gen_bound (gd a0 ua : R) (C : nat) (Bx Tx : R) : R :=
  ce_Kg ^ C * (ce_Q a0 ua ((1 + gd) * Bx + gd * Tx) Tx + INR C * ea) + (ce_Kg ^ C - 1) * Rabs a0 * Tx
  + INR C * ce_Kg ^ C * es.

Lemma ce_gen_run_fmt : forall dsum epi cs, fmt (ce_gen_run dsum epi cs).
Proof.
  intros dsum epi cs; induction cs as [| c cs IH] using rev_ind.
  - apply ff_fmt_0.
  - unfold ce_gen_run in *; rewrite fold_left_app; cbn [fold_left]; apply (mp_s_in_a M), ff_rnd_fmt.
Qed.

Lemma ce_gen_run_inv : forall dsum epi alpha a0 ua gd cs Tt,
  epi_ok alpha epi -> 0 <= ua -> Rabs (alpha - a0) <= ua * Rabs a0 -> 0 <= gd ->
  (forall c, In c cs -> ce_gen_dsum_ok T tm dsum gd c) -> ce_gen_ok T tm te bd (concat cs) ->
  ce_gen_T T te (concat cs) <= Tt ->
  Rabs (ce_gen_run dsum epi cs - a0 * rsum (map te (concat cs)))
  <= ce_Kg ^ length cs * (ce_Q a0 ua ((1 + gd) * ce_gen_B T bd (concat cs) + gd * ce_gen_T T te (concat cs))
                                    (ce_gen_T T te (concat cs)) + INR (length cs) * ea)
     + (ce_Kg ^ length cs - 1) * Rabs a0 * Tt + INR (length cs) * ce_Kg ^ length cs * es.
Proof.
  intros dsum epi alpha a0 ua gd cs Tt Hepi Hua Hal Hgd.
  pose proof ce_Kg_ge_1 as HK; destruct ce_nonneg as [Hu [Hea [Hus Hes]]].
  induction cs as [| c cs IH] using rev_ind; intros Hds Hok HT.
  - unfold ce_gen_run, ce_Q, ce_gen_B, ce_gen_T; cbn [concat map fold_left length pow INR]; rewrite !rsum_nil.
    rewrite Rmult_0_r, Rminus_0_r, Rabs_R0; lra.
  - assert (Ecat : concat (cs ++ [c]) = concat cs ++ c)
      by (rewrite concat_app; cbn [concat]; rewrite app_nil_r; reflexivity).
    rewrite Ecat in *.
    assert (Hok0 : ce_gen_ok T tm te bd (concat cs)) by (intros x Hx; apply Hok, in_or_app; left; exact Hx).
    assert (Hok1 : ce_gen_ok T tm te bd c) by (intros x Hx; apply Hok, in_or_app; right; exact Hx).
    destruct (ce_gen_app T te bd (concat cs) c) as [EB ET].
    destruct (ce_gen_nonneg T tm te bd (concat cs) Hok0) as [B0 T0].
    destruct (ce_gen_nonneg T tm te bd c Hok1) as [B1 T1].
    assert (IH' := IH (fun c' Hc' => Hds c' (in_or_app _ _ _ (or_introl Hc'))) Hok0 ltac:(lra)).
    destruct (ce_gen_chunk_close T tm te bd dsum gd c Hgd Hok1 (Hds c (in_or_app _ _ _ (or_intror (in_eq c [])))))
      as [Hc1 Hc2].
    set (gw := ce_gen_run dsum epi cs) in *.
    set (X0 := rsum (map te (concat cs))) in *.
    set (Xc := rsum (map te c)) in *.
    assert (HX0 : Rabs X0 <= ce_gen_T T te (concat cs)) by apply bw_rsum_abs.
    assert (HXc : Rabs Xc <= ce_gen_T T te c) by apply bw_rsum_abs.
    assert (HXn : Rabs (a0 * X0 + a0 * Xc) <= Rabs a0 * Tt).
    { rewrite <- Rmult_plus_distr_l, Rabs_mult; apply Rmult_le_compat_l; [apply Rabs_pos |].
      eapply Rle_trans; [apply Rabs_triang | lra]. }
    pose proof (ce_step_close epi alpha a0 ua gw (a0 * X0) _ (dsum (map tm c)) Xc _ (ce_gen_T T te c) Tt
                  Hepi Hua Hal (ce_gen_run_fmt dsum epi cs) IH' Hc1 Hc2 HXn) as Hs.
    unfold ce_gen_run at 1; rewrite fold_left_app; cbn [fold_left]; fold (ce_gen_run dsum epi cs); fold gw.
    rewrite map_app, rsum_app; fold X0 Xc.
    replace (a0 * (X0 + Xc)) with (a0 * X0 + a0 * Xc) by ring.
    eapply Rle_trans; [exact Hs |].
    rewrite app_length; cbn [length]; rewrite Nat.add_1_r, S_INR; cbn [pow].
    rewrite EB, ET.
    set (E0 := (1 + gd) * ce_gen_B T bd (concat cs) + gd * ce_gen_T T te (concat cs)) in *.
    set (E1 := (1 + gd) * ce_gen_B T bd c + gd * ce_gen_T T te c) in *.
    replace ((1 + gd) * (ce_gen_B T bd (concat cs) + ce_gen_B T bd c) + gd * (ce_gen_T T te (concat cs) + ce_gen_T T te c))
      with (E0 + E1) by (unfold E0, E1; ring).
    rewrite ce_Q_app.
    set (k := length cs) in *.
    set (Q0 := ce_Q a0 ua E0 (ce_gen_T T te (concat cs))) in *.
    set (Q1 := ce_Q a0 ua E1 (ce_gen_T T te c)) in *.
    assert (HE1 : 0 <= E1).
    { unfold E1; assert (0 <= gd * ce_gen_T T te c) by (apply Rmult_le_pos; lra).
      assert (0 <= (1 + gd) * ce_gen_B T bd c) by (apply Rmult_le_pos; lra). lra. }
    assert (HQ1 : 0 <= Q1) by (apply ce_Q_nonneg; lra).
    assert (Hp : 1 <= ce_Kg ^ k) by (apply pow_R1_Rle; lra).
    pose proof (pos_INR k) as Hk.
    pose proof (Rabs_pos a0) as Ha0.
    assert (HTt : 0 <= Tt) by lra.
    assert (F1 : 0 <= ce_Kg * (Q1 + ea) * (ce_Kg ^ k - 1)) by (repeat apply Rmult_le_pos; lra).
    assert (F2 : ce_Kg * (INR k * ce_Kg ^ k * es) + es <= (INR k + 1) * (ce_Kg * ce_Kg ^ k) * es).
    { assert (1 <= ce_Kg * ce_Kg ^ k) by nra.
      assert (es <= ce_Kg * ce_Kg ^ k * es) by nra. nra. }
    assert (F3 : 0 <= Rabs a0 * Tt) by (apply Rmult_le_pos; lra).
    nra.
Qed.

Theorem ce_gen_dw_error : forall dsum epi alpha a0 ua gd cs,
  epi_ok alpha epi -> 0 <= ua -> Rabs (alpha - a0) <= ua * Rabs a0 -> 0 <= gd ->
  (forall c, In c cs -> ce_gen_dsum_ok T tm dsum gd c) -> ce_gen_ok T tm te bd (concat cs) ->
  Rabs (ce_gen_run dsum epi cs - a0 * rsum (map te (concat cs)))
  <= ce_gen_bound gd a0 ua (length cs) (ce_gen_B T bd (concat cs)) (ce_gen_T T te (concat cs)).
Proof.
  intros dsum epi alpha a0 ua gd cs Hepi Hua Hal Hgd Hds Hok; unfold ce_gen_bound.
  exact (ce_gen_run_inv dsum epi alpha a0 ua gd cs _ Hepi Hua Hal Hgd Hds Hok (Rle_refl _)).
Qed.

Theorem ce_gen_dh_error : forall dsum alpha a0 ua gd xs,
  0 <= ua -> Rabs (alpha - a0) <= ua * Rabs a0 -> 0 <= gd ->
  ce_gen_dsum_ok T tm dsum gd xs -> ce_gen_ok T tm te bd xs ->
  Rabs (ce_gen_dh dsum alpha xs - a0 * rsum (map te xs))
  <= ce_gen_bound gd a0 ua 1 (ce_gen_B T bd xs) (ce_gen_T T te xs).
Proof.
  intros dsum alpha a0 ua gd xs Hua Hal Hgd Hds Hok.
  pose proof (ce_gen_dw_error dsum _ alpha a0 ua gd [xs] (epi_fma_ok alpha) Hua Hal Hgd) as H.
  cbn [concat length] in H; rewrite app_nil_r in H.
  assert (E : ce_gen_dh dsum alpha xs = ce_gen_run dsum (fun a c => rnd (alpha * a + c)) [xs])
    by (unfold ce_gen_dh, ce_gen_run; cbn [fold_left]; rewrite Rplus_0_r; reflexivity).
  rewrite E; apply H; [intros c [<- | []]; exact Hds | exact Hok].
Qed.

End GenRun.

Section Run.

Variable T : Type.
Variables iz il iy iL ih : T -> R.
Variables it ik : T -> bool.

Local Notation term := (ce_term T iz il ih it ik).
Local Notation exact := (ce_exact T iy iL ih it ik).
Local Notation S := (ce_S T iy iL ih ik).
Local Notation Tg := (ce_T T iy iL ih it ik).
Local Notation Hk := (ce_Ha T ih ik).

(** dW's token-chunk loop: [gw := rnd_s (epi (dsum chunk terms) gw)] from 0. *)
Definition ce_run (dsum : list R -> R) (epi : R -> R -> R) (cs : list (list T)) : R :=
  fold_left (fun gw c => rs (epi (dsum (map term c)) gw)) cs 0.

Definition ce_dw_bound (gd Fe a0 ua : R) (C : nat) (Sx Tx Hx : R) : R :=
  ce_Kg ^ C * (ce_Q a0 ua (ce_E2 gd Fe Sx Tx Hx) Tx + INR C * ea) + (ce_Kg ^ C - 1) * Rabs a0 * Tx
  + INR C * ce_Kg ^ C * es.

Lemma ce_run_fmt : forall dsum epi cs, fmt (ce_run dsum epi cs).
Proof. intros dsum epi cs; exact (ce_gen_run_fmt T term dsum epi cs). Qed.

Lemma ce_E2_nonneg : forall gd Fe Sx Tx Hx, 0 <= gd -> 1 <= Fe -> 0 <= Sx -> 0 <= Tx -> 0 <= Hx ->
  0 <= ce_E2 gd Fe Sx Tx Hx.
Proof.
  intros gd Fe Sx Tx Hx Hg HF HS HT HH; pose proof ce_Kg_ge_1; pose proof ce_cg_nonneg.
  unfold ce_E2, ce_E1.
  assert (0 <= (ce_Kg * Fe - 1) * Sx) by (apply Rmult_le_pos; nra).
  assert (0 <= (ce_Kg - 1) * Tx) by (apply Rmult_le_pos; lra).
  assert (0 <= ce_cg * Hx) by (apply Rmult_le_pos; lra).
  assert (0 <= gd * Tx) by (apply Rmult_le_pos; lra).
  assert (0 <= (1 + gd) * ((ce_Kg * Fe - 1) * Sx + (ce_Kg - 1) * Tx + ce_cg * Hx)) by (apply Rmult_le_pos; lra).
  lra.
Qed.

Lemma ce_E2_app : forall gd Fe S1 T1 H1 S2 T2 H2,
  ce_E2 gd Fe (S1 + S2) (T1 + T2) (H1 + H2) = ce_E2 gd Fe S1 T1 H1 + ce_E2 gd Fe S2 T2 H2.
Proof. intros; unfold ce_E2, ce_E1; ring. Qed.

Lemma ce_run_inv : forall dsum epi alpha a0 ua gd delta Dl Am X cs Tt,
  epi_ok alpha epi -> 0 <= ua -> Rabs (alpha - a0) <= ua * Rabs a0 -> 0 <= gd ->
  0 <= delta -> 0 <= Dl -> 0 <= Am -> exp (delta + Dl + u * Am + ea) <= X ->
  (forall c, In c cs -> dsum_ok T iz il ih it ik dsum gd c) ->
  (forall x, In x (concat cs) -> ce_ok T iz il iy iL ik delta Dl Am x) ->
  Tg (concat cs) <= Tt ->
  let Fe := (1 + ue) * X in
  let C := length cs in
  Rabs (ce_run dsum epi cs - a0 * rsum (map exact (concat cs)))
  <= ce_Kg ^ C * (ce_Q a0 ua (ce_E2 gd ((1 + ue) * X) (S (concat cs)) (Tg (concat cs)) (Hk (concat cs))) (Tg (concat cs))
                  + INR C * ea)
     + (ce_Kg ^ C - 1) * Rabs a0 * Tt + INR C * ce_Kg ^ C * es.
Proof.
  intros dsum epi alpha a0 ua gd delta Dl Am X cs Tt Hepi Hua Hal Hgd Hd Hl Ham HX Hds Hok HT; cbv zeta.
  unfold ce_E2; rewrite <- ce_bd_sum.
  apply (ce_gen_run_inv T term exact (ce_bd T iy iL ih it ik ((1 + ue) * X)) dsum epi alpha a0 ua gd cs Tt
           Hepi Hua Hal Hgd Hds); [| exact HT].
  intros x Hx; apply (ce_term_close T iz il iy iL ih it ik delta Dl Am X x Hd Hl Ham HX (Hok x Hx)).
Qed.

Theorem ce_dw_error : forall dsum epi alpha a0 ua gd delta Dl Am X cs,
  epi_ok alpha epi -> 0 <= ua -> Rabs (alpha - a0) <= ua * Rabs a0 -> 0 <= gd ->
  0 <= delta -> 0 <= Dl -> 0 <= Am -> exp (delta + Dl + u * Am + ea) <= X ->
  (forall c, In c cs -> dsum_ok T iz il ih it ik dsum gd c) ->
  (forall x, In x (concat cs) -> ce_ok T iz il iy iL ik delta Dl Am x) ->
  let xs := concat cs in
  Rabs (ce_run dsum epi cs - a0 * rsum (map exact xs))
  <= ce_dw_bound gd ((1 + ue) * X) a0 ua (length cs) (S xs) (Tg xs) (Hk xs).
Proof.
  intros dsum epi alpha a0 ua gd delta Dl Am X cs Hepi Hua Hal Hgd Hd Hl Ham HX Hds Hok xs.
  exact (ce_run_inv dsum epi alpha a0 ua gd delta Dl Am X cs (Tg xs) Hepi Hua Hal Hgd Hd Hl Ham HX Hds Hok
           (Rle_refl _)).
Qed.

(** dH's entry [(n, d)]: the items are the vocabulary rows of token [n]
    ([ih] the coordinate [W_vd]), one product rounded once. *)
Definition ce_dh (dsum : list R -> R) (alpha : R) (xs : list T) : R := rs (rnd (alpha * dsum (map term xs))).

Theorem ce_dh_error : forall dsum alpha a0 ua gd delta Dl Am X xs,
  0 <= ua -> Rabs (alpha - a0) <= ua * Rabs a0 -> 0 <= gd ->
  0 <= delta -> 0 <= Dl -> 0 <= Am -> exp (delta + Dl + u * Am + ea) <= X ->
  dsum_ok T iz il ih it ik dsum gd xs ->
  (forall x, In x xs -> ce_ok T iz il iy iL ik delta Dl Am x) ->
  Rabs (ce_dh dsum alpha xs - a0 * rsum (map exact xs))
  <= ce_dw_bound gd ((1 + ue) * X) a0 ua 1 (S xs) (Tg xs) (Hk xs).
Proof.
  intros dsum alpha a0 ua gd delta Dl Am X xs Hua Hal Hgd Hd Hl Ham HX Hds Hok.
  assert (E : ce_dh dsum alpha xs = ce_run dsum (fun a c => rnd (alpha * a + c)) [xs])
    by (unfold ce_dh, ce_run; cbn [fold_left]; rewrite Rplus_0_r; reflexivity).
  assert (Ex : xs = concat [xs]) by (cbn [concat]; rewrite app_nil_r; reflexivity).
  rewrite E; rewrite Ex at 2 3 4 5.
  apply (ce_dw_error dsum _ alpha a0 ua gd delta Dl Am X [xs] (epi_fma_ok alpha) Hua Hal Hgd Hd Hl Ham HX).
  - intros c [<- | []]; exact Hds.
  - rewrite <- Ex; exact Hok.
Qed.

End Run.

(** The accumulation premise for any tree of rounded fp32 additions of depth
    [k] over numbers of the format (products of bf16 numbers are: [bf16_mul_fp32]). *)
Theorem ce_dsum_tree : forall (shape : list R -> stree) k xs,
  leaves (shape xs) = xs -> (depth (shape xs) <= k)%nat -> Forall fmt xs ->
  Rabs (tree_sum A_ (shape xs) - rsum xs) <= ((1 + u) ^ k - 1) * rsum (map Rabs xs).
Proof.
  intros shape k xs Hl Hd Hf.
  rewrite <- Hl in Hf.
  destruct (tree_sum_ok A_ (shape xs) Hf) as [_ Hc]; rewrite Hl in Hc.
  apply (close_mono _ _ _ _ _ (abs_sum_nonneg xs) (pow_u_mono A_ _ _ Hd) Hc).
Qed.

End CeGrad.
