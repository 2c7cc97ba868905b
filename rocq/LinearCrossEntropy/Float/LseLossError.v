(** * The chunked linear cross-entropy's log-sum-exp and loss in fp32, as the kernel streams them.

    kernels/ojas_kernels/linear_cross_entropy_kernels.py, [_rows_kernel] with STREAM (the default
    3-product schedule for reductions "mean" / "sum", and [fwd_logits =
    "cublas"]): per token, over vocabulary tiles of at most [Bt] logits
    (fp32 numbers [z_v], read from the logits buffer),
      m' = max (m, max_v z_v),
      l  := rnd (rnd (l * tl.exp (rnd (m - m'))) + tl.sum (tl.exp (rnd (z_v - m')))),
    from [m = -inf, l = 0]; then [lse = rnd (m + tl.log l)] and, without
    label smoothing and z-loss, [loss = rnd (lse - z_t)].

    The model ([ce_step], [ce_run]) is generic in the items a tile holds:
    an item has a max [im], a computed sum [il] and an exact sum [iX] at
    its max; the item's term is [rnd (il * ex (rnd (im - m')))].  A raw
    logit is the item [(z, 1)] with [iX = 1] ([rnd (1 * x) = x]: the
    kernel's [tl.exp (rnd (z - m'))]).  The kernel's first tile from
    [(-inf, 0)] is the model's from [(m0, 0)] with [m0] the row's first
    logit: [rnd (rnd (0 * a) + y) = y] and [max (m0, max tile) = max tile]
    ([tl.exp (-inf) = 0], a premise like the attention kernel's [exp2 (0) = 1]).
    The last tile's masked columns are [-inf] logits, i.e. exact zero terms
    of [tl.sum]: the model's tile holds only the real logits and [ts] is
    [tl.sum] of the tile padded with zeros ([x + 0] is exact, so a reduction
    tree of depth [Dt] over the padded tile still meets [sum_ok]).

    Premises (Section hypotheses, to be measured on the device as the
    attention ones): the computed [tl.exp] [ex] has
    [|ex x - e^x| <= ue e^x + ee] for [x <= 0] (and is a number of the
    format, used only by [ce_item_term_logit]); the computed
    [tl.log] [lg] is a number of the format with [|lg x - ln x| <= el] for
    the numbers [x] of the format in [[lmin, lmax]] (a bounded range: no
    function of float values is within a fixed [el] of [ln] on all [x > 0],
    as [ln] is unbounded and the gaps between floats grow; each theorem
    asks [lmin <= 1 - bL] and [(1 + bL) e^LN <= lmax], which put the
    computed row sum [l] in the range; Bounds/LinearCrossEntropy.v takes
    [[1 / (1 + b), (1 + b) e^LN]], inside [[1/2, 2 e^LN]] when [b <= 1]); the
    tile sum [ts] ([tl.sum], a reduction tree) of at most [Bt] numbers of
    the format is one, within [((1 + u)^Dt - 1) sum |x|] of the exact sum
    ([sum_ok]; proved for trees of depth [Dt] by BlockedSum.v's
    [tree_sum_ok], for left to right with [Dt = Bt - 1]).

    Results:
    - [ce_term_close]: one item's term against [iX e^(im - m')].
    - [ce_tile_close]: the tile sum of the terms.
    - [ce_run_gen]: the state after [k] tiles against
      [sum_seen iX e^(im - m)]: factor [H Q^k e^(u (m - m0))] (the
      exponent errors of the rescalings telescope), absolute term
      [k a^k b] (underflow).
    - [ce_lse_error]: with [|z_v - y_v| <= delta] (the logits' error
      against the exact [y_v = h . w_v], a premise: BlockedSum.v bounds it
      for the Triton dots; for cuBLAS's the order of the sum is not
      modelled), [|z| <= Zmax],
        |rnd (m + lg l) - ln sum_v e^(y_v)| <= ce_lse_bound
          = u (Zmax + LN + NL + el) + el + NL + delta,
      [NL >= - ln (1 - bL)], [bL = H Q^T XK - 1 + T a^T b].
    - [ce_lse_error_up]: the same with upper bounds of the powers
      [(1 + u)^Dt], [ce_Q^T], [ce_a^T] (what Bounds/LinearCrossEntropy.v's [ce_lse_q]
      computes; [ce_lse_q_sound] there).  Values (exact logits, [Zmax = 30],
      [V = 128256], tiles of 4096, [ue = 2^-17], [el = 2^-18]): 5.1e-4 nats,
      where LseError.v allowed 0.086 nats in fp32 and nothing in bf16.
    - [ce_loss_error]: [|rnd (lse - z_t) - (ln sum e^y - y_t)|
        <= (1 + u) (ce_lse_bound + delta) + u |ln sum e^y - y_t|].

    - [ce_lse_error_two_level]: the two-level schedule (4 products,
      [linear_cross_entropy_forward]): each [_logits_kernel] STATS program
      streams its group of vocabulary tiles from [(z_first, 0)] ([grp_state],
      tile sum [ts1]); [_rows_kernel] merges the groups' states [(m_g, l_g)]
      in tiles of [BLOCK_P] ([ce_run] over the group items, term
      [rnd (l_g * tl.exp (rnd (m_g - m')))], tile sum [ts2]); the groups
      are items with factor [C1 = H1 Q^T1 XK] and absolute term
      [R1 = T1 a^T1 b1] (their own [ce_run_gen]), so
      [bL = H2 Q^T2 XK - 1 + T2 a^T2 b2] with [ci = C1], [ri = R1],
      [Nx = N1] (the logits per group).  No oracle value for it yet.

    Not covered: FMA contraction of [l * alpha + sum]; softcap (tanh),
    label smoothing, z-loss, the bias addition (they change the logits:
    fold them into [delta] by hand, not proved); overflow. *)

From Coq Require Import Reals List Lra Lia Arith.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.NoUnderflow Attention.BackwardCorrect Attention.ScorePerturbation.
From Ojas Require Import FloatModel.MixedPrecision FloatModel.BlockedSum Attention.Float.OnlineSoftmaxError Attention.Float.SavedLseError.
From Ojas Require Import FloatModel.Notations.
Import ListNotations.
Open Scope R_scope.

Section CeLse.

Variable M : MixedModel.

Import ModelNotations.

(** The kernel's [tl.exp] and [tl.log]: assumptions. *)
Variable ex : R -> R.
Variables ue ee : R.
Hypothesis ue_nonneg : 0 <= ue.
Hypothesis ee_nonneg : 0 <= ee.
Hypothesis ex_fmt : forall x, fmt (ex x).
Hypothesis ex_err : forall x, x <= 0 -> Rabs (ex x - exp x) <= ue * exp x + ee.

Variable lg : R -> R.
Variables el lmin lmax : R.
Hypothesis lg_fmt : forall x, fmt (lg x).
Hypothesis lg_err : forall x, fmt x -> lmin <= x <= lmax -> Rabs (lg x - ln x) <= el.

Definition sum_ok (ts : list R -> R) (Dt Bt : nat) : Prop :=
  forall xs, (length xs <= Bt)%nat -> Forall fmt xs ->
    fmt (ts xs) /\ Rabs (ts xs - rsum xs) <= ((1 + u) ^ Dt - 1) * rsum (map Rabs xs).

Section Items.

Variable T : Type.
Variables im il iX : T -> R.

Definition tile_max (m : R) (tl : list T) : R := fold_left Rmax (map im tl) m.

Definition item_term (m' : R) (it : T) : R := rnd (il it * ex (rnd (im it - m'))).

Definition ce_step (ts : list R -> R) (st : R * R) (tl : list T) : R * R :=
  let m' := tile_max (fst st) tl in
  (m', rnd (rnd (snd st * ex (rnd (fst st - m'))) + ts (map (item_term m') tl))).

Definition ce_run (ts : list R -> R) (st : R * R) (tiles : list (list T)) : R * R :=
  fold_left (ce_step ts) tiles st.

Definition ex_val (m : R) (its : list T) : R := rsum (map (fun it => iX it * exp (im it - m)) its).


Lemma ce_rnd_sub : forall a b, fmt a -> fmt b -> a <= b ->
  Rabs (rnd (a - b) - (a - b)) <= u * (b - a) /\ rnd (a - b) <= 0.
Proof.
  intros a b Fa Fb H.
  pose proof (ff_add A_ a (- b) Fa (ff_fmt_opp A_ b Fb)) as R.
  replace (a + - b) with (a - b) in R by ring.
  rewrite (Rabs_left1 (a - b)) in R by lra.
  pose proof (ff_u_lt_1 A_); pose proof (ff_u_nonneg A_).
  pose proof (sp_Rabs_le_inv _ _ R) as [R1 R2].
  split; [lra |].
  assert (u * - (a - b) <= - (a - b)) by (apply Rmult_le_reg_r with 1; nra). lra.
Qed.

(** The computed [alpha = ex (rnd (a - b))] against [e^(a - b)]. *)
Lemma ce_alpha : forall a b Y, fmt a -> fmt b -> a <= b -> exp (u * (b - a)) <= Y ->
  Rabs (ex (rnd (a - b)) - exp (a - b)) <= ((1 + ue) * Y - 1) * exp (a - b) + ee.
Proof.
  intros a b Y Fa Fb H HY.
  destruct (ce_rnd_sub a b Fa Fb H) as [Hd Hd0].
  set (d := rnd (a - b)) in *.
  set (A := exp (a - b)).
  assert (HA : 0 < A) by apply exp_pos.
  assert (Ed : exp d = A * exp (d - (a - b))) by (unfold A; rewrite <- exp_plus; f_equal; ring).
  assert (He : Rabs (exp (d - (a - b)) - 1) <= Y - 1).
  { eapply Rle_trans; [apply ose_exp_sub1 |]; apply Rplus_le_compat_r.
    eapply Rle_trans; [apply ose_exp_le, Hd | exact HY]. }
  assert (HY1 : 1 <= Y) by (eapply Rle_trans; [| exact HY]; rewrite <- exp_0; apply ose_exp_le;
                             pose proof (ff_u_nonneg A_); nra).
  assert (H1 : Rabs (exp d - A) <= A * (Y - 1)).
  { rewrite Ed; replace (A * exp (d - (a - b)) - A) with (A * (exp (d - (a - b)) - 1)) by ring.
    rewrite Rabs_mult, (Rabs_right A) by lra; apply Rmult_le_compat_l; lra. }
  assert (H2 : exp d <= A * Y) by (pose proof (sp_Rabs_le_inv _ _ H1); nra).
  pose proof (ex_err d Hd0) as H3.
  replace (ex d - A) with ((ex d - exp d) + (exp d - A)) by ring.
  eapply Rle_trans; [apply Rabs_triang |].
  assert (ue * exp d <= ue * (A * Y)) by (apply Rmult_le_compat_l; lra).
  nra.
Qed.

Lemma ce_inv_mono : forall G G' R R' x X S, 0 <= S -> G <= G' -> R <= R' -> inv G R x X S -> inv G' R' x X S.
Proof.
  intros G G' R R' x X S HS HG HR H; unfold inv in *.
  assert ((G - 1) * S <= (G' - 1) * S) by (apply Rmult_le_compat_r; lra). lra.
Qed.

(** One item's term: [rnd (l * ex (rnd (mj - m')))] against [X e^(mj - m')]. *)
Theorem ce_term_close : forall mj m' l X c r Y Nx,
  fmt mj -> fmt m' -> mj <= m' -> exp (u * (m' - mj)) <= Y ->
  1 <= c -> 0 <= r -> 0 <= X <= Nx -> inv c r l X X ->
  inv (c * ((1 + ue) * Y) * (1 + u)) ((c * Nx * ee + r * ((1 + ue) * Y + ee)) * (1 + u) + ea)
      (rnd (l * ex (rnd (mj - m')))) (X * exp (mj - m')) (X * exp (mj - m')).
Proof.
  intros mj m' l X c r Y Nx Fm Fm' H HY Hc Hr [HX HXN] Hl.
  pose proof (ce_alpha mj m' Y Fm Fm' H HY) as Ha.
  set (a := ex (rnd (mj - m'))) in *.
  set (A := exp (mj - m')) in *.
  assert (HA : 0 < A) by apply exp_pos.
  assert (HA1 : A <= 1) by (unfold A; rewrite <- exp_0; apply ose_exp_le; lra).
  assert (HY1 : 1 <= Y) by (eapply Rle_trans; [| exact HY]; rewrite <- exp_0; apply ose_exp_le;
                             pose proof (ff_u_nonneg A_); nra).
  set (F := (1 + ue) * Y) in *.
  assert (HF : 1 <= F) by (unfold F; nra).
  assert (Habs : Rabs a <= F * A + ee).
  { replace a with ((a - A) + A) by ring; eapply Rle_trans; [apply Rabs_triang |].
    rewrite (Rabs_right A) by lra; lra. }
  unfold inv in Hl.
  assert (Hp : Rabs (l * a - X * A) <= (c * F - 1) * (X * A) + (c * Nx * ee + r * (F + ee))).
  { replace (l * a - X * A) with ((l - X) * a + X * (a - A)) by ring.
    eapply Rle_trans; [apply Rabs_triang |]; rewrite !Rabs_mult, (Rabs_right X) by lra.
    assert (E1 : Rabs (l - X) * Rabs a <= ((c - 1) * X + r) * (F * A + ee))
      by (apply Rmult_le_compat; auto using Rabs_pos).
    assert (E2 : X * Rabs (a - A) <= X * ((F - 1) * A + ee)) by (apply Rmult_le_compat_l; lra).
    assert (r * (F * A + ee) <= r * (F + ee)) by (apply Rmult_le_compat_l; nra).
    assert (c * X * ee <= c * Nx * ee) by (apply Rmult_le_compat_r; [lra |]; apply Rmult_le_compat_l; lra).
    assert (Eq : ((c - 1) * X + r) * (F * A + ee) + X * ((F - 1) * A + ee)
                 = (c * F - 1) * (X * A) + c * X * ee + r * (F * A + ee)) by ring.
    lra. }
  assert (HcF : 1 <= c * F) by (assert (0 <= (c - 1) * (F - 1)) by (apply Rmult_le_pos; lra); nra).
  assert (HXA : 0 <= X * A) by (apply Rmult_le_pos; lra).
  assert (HR0 : 0 <= c * Nx * ee + r * (F + ee)).
  { assert (0 <= c * Nx * ee) by (apply Rmult_le_pos; [apply Rmult_le_pos |]; lra).
    assert (0 <= r * (F + ee)) by (apply Rmult_le_pos; lra). lra. }
  apply (inv_round M); [exact HcF | exact HR0 | rewrite Rabs_right by lra; lra |].
  unfold inv; exact Hp.
Qed.

(** ** The running max *)

Lemma tile_max_P : forall (P : R -> Prop) tl m, P m -> (forall it, In it tl -> P (im it)) -> P (tile_max m tl).
Proof.
  intros P tl; unfold tile_max; induction tl as [|it tl IH]; intros m Hm Hi; [exact Hm |].
  cbn [map fold_left]; apply IH.
  - apply Rmax_case; [exact Hm | apply Hi; left; reflexivity].
  - intros it' H; apply Hi; right; exact H.
Qed.

Lemma tile_max_ge : forall tl m, m <= tile_max m tl /\ forall it, In it tl -> im it <= tile_max m tl.
Proof.
  unfold tile_max; induction tl as [|it tl IH]; intros m; cbn [map fold_left]; [split; [lra | intros _ []] |].
  destruct (IH (Rmax m (im it))) as [H1 H2]; split.
  - eapply Rle_trans; [apply Rmax_l | exact H1].
  - intros it' [<- | Hin]; [eapply Rle_trans; [apply Rmax_r | exact H1] | apply H2, Hin].
Qed.

(** ** The exact sums *)

Lemma ex_val_app : forall m a b, ex_val m (a ++ b) = ex_val m a + ex_val m b.
Proof. intros; unfold ex_val; rewrite map_app, rsum_app; reflexivity. Qed.

Lemma ex_val_shift : forall m m' its, ex_val m its * exp (m - m') = ex_val m' its.
Proof.
  intros; unfold ex_val; rewrite <- bw_rsum_map_scal_r; apply rsum_map_ext; intros it _.
  rewrite Rmult_assoc, <- exp_plus; do 2 f_equal; ring.
Qed.

Lemma ex_val_bounds : forall m its Nx, (forall it, In it its -> 0 <= iX it <= Nx /\ im it <= m) ->
  0 <= ex_val m its <= INR (length its) * Nx.
Proof.
  intros m its Nx; unfold ex_val; induction its as [|it its IH]; intros H; cbn [map length]; rewrite ?rsum_cons.
  - unfold rsum; simpl; lra.
  - rewrite S_INR; destruct (H it (or_introl eq_refl)) as [[H0 H1] H2].
    destruct IH as [IH0 IH1]; [intros; apply H; right; assumption |].
    assert (HE : 0 < exp (im it - m) <= 1) by (split; [apply exp_pos | rewrite <- exp_0; apply ose_exp_le; lra]).
    assert (0 <= iX it * exp (im it - m)) by (apply Rmult_le_pos; lra).
    assert (iX it * exp (im it - m) <= Nx) by nra.
    lra.
Qed.

(** ** A tile *)

Theorem ce_tile_close : forall ts Dt Bt m' (tl : list T) ci ri Y Nx,
  sum_ok ts Dt Bt -> (length tl <= Bt)%nat -> fmt m' -> 1 <= ci -> 0 <= ri ->
  (forall it, In it tl -> fmt (im it) /\ im it <= m' /\ exp (u * (m' - im it)) <= Y /\
                          0 <= iX it <= Nx /\ inv ci ri (il it) (iX it) (iX it)) ->
  let Ci := ci * ((1 + ue) * Y) * (1 + u) in
  let Ri := (ci * Nx * ee + ri * ((1 + ue) * Y + ee)) * (1 + u) + ea in
  fmt (ts (map (item_term m') tl)) /\
  inv ((1 + u) ^ Dt * Ci) ((1 + u) ^ Dt * (INR (length tl) * Ri))
      (ts (map (item_term m') tl)) (ex_val m' tl) (ex_val m' tl).
Proof.
  intros ts Dt Bt m' tl ci ri Y Nx Hts Hl Fm Hc Hr Hit Ci Ri.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (ff_eta_nonneg A_) as Hea.
  assert (HCi : forall it, In it tl -> 1 <= Ci /\ 0 <= Ri).
  { intros it Hin; destruct (Hit it Hin) as [_ [Hle [HY _]]].
    assert (1 <= Y) by (eapply Rle_trans; [| exact HY]; rewrite <- exp_0; apply ose_exp_le; nra).
    unfold Ci, Ri; split.
    - assert (1 <= (1 + ue) * Y) by nra.
      assert (1 <= ci * ((1 + ue) * Y)) by (assert (0 <= (ci - 1) * ((1 + ue) * Y - 1)) by (apply Rmult_le_pos; lra); nra).
      nra.
    - assert (0 <= ci * Nx * ee) by (destruct (Hit it Hin) as [_ [_ [_ [HX _]]]]; apply Rmult_le_pos; [apply Rmult_le_pos |]; lra).
      assert (0 <= ri * ((1 + ue) * Y + ee)) by (apply Rmult_le_pos; nra).
      assert (0 <= (ci * Nx * ee + ri * ((1 + ue) * Y + ee)) * (1 + u)) by (apply Rmult_le_pos; lra).
      lra. }
  (* each term *)
  assert (Ht : forall it, In it tl -> inv Ci Ri (item_term m' it) (iX it * exp (im it - m')) (iX it * exp (im it - m'))).
  { intros it Hin; destruct (Hit it Hin) as [F [Hle [HY [HX Hi]]]].
    apply ce_term_close; auto; lra. }
  assert (Hsum : Rabs (rsum (map (item_term m') tl) - ex_val m' tl) <= (Ci - 1) * ex_val m' tl + INR (length tl) * Ri
                 /\ rsum (map Rabs (map (item_term m') tl)) <= Ci * ex_val m' tl + INR (length tl) * Ri
                 /\ 0 <= ex_val m' tl).
  { clear Hl; unfold ex_val; induction tl as [|it tl IH]; cbn [map length]; rewrite ?rsum_cons.
    - unfold rsum; simpl; rewrite Rminus_0_r, Rabs_R0; lra.
    - rewrite S_INR.
      specialize (IH ltac:(intros; apply Hit; right; assumption) ltac:(intros it' H'; apply (HCi it'); right; exact H')
                      ltac:(intros; apply Ht; right; assumption)).
      destruct IH as [I1 [I2 I3]].
      { pose proof (Ht it (or_introl eq_refl)) as H1; unfold inv in H1.
        destruct (HCi it (or_introl eq_refl)) as [HC1 HR1].
        destruct (Hit it (or_introl eq_refl)) as [_ [_ [_ [HX _]]]].
        assert (0 <= iX it * exp (im it - m')) by (apply Rmult_le_pos; [lra | left; apply exp_pos]).
        set (t0 := item_term m' it) in *; set (T0 := iX it * exp (im it - m')) in *.
        set (s := rsum (map (item_term m') tl)) in *.
        set (S := rsum (map (fun it0 => iX it0 * exp (im it0 - m')) tl)) in *.
        split; [| split].
        * replace (t0 + s - (T0 + S)) with ((t0 - T0) + (s - S)) by ring.
          eapply Rle_trans; [apply Rabs_triang | lra].
        * assert (Rabs t0 <= Ci * T0 + Ri).
          { replace t0 with ((t0 - T0) + T0) by ring; eapply Rle_trans; [apply Rabs_triang |].
            rewrite (Rabs_right T0) by lra; lra. }
          lra.
        * lra. } }
  destruct Hsum as [S1 [S2 S3]].
  assert (Ff : Forall fmt (map (item_term m') tl)).
  { apply Forall_forall; intros x Hx; apply in_map_iff in Hx; destruct Hx as [it [<- _]]; apply ff_rnd_fmt. }
  destruct (Hts _ ltac:(rewrite map_length; exact Hl) Ff) as [F1 F2].
  split; [exact F1 |].
  unfold inv.
  set (y := ts (map (item_term m') tl)) in *.
  set (s := rsum (map (item_term m') tl)) in *.
  set (X := ex_val m' tl) in *.
  set (P := (1 + u) ^ Dt) in *.
  assert (HP : 1 <= P) by (unfold P; apply pow_R1_Rle; lra).
  set (nR := INR (length tl) * Ri) in *.
  replace (y - X) with ((y - s) + (s - X)) by ring.
  eapply Rle_trans; [apply Rabs_triang |].
  assert ((P - 1) * rsum (map Rabs (map (item_term m') tl)) <= (P - 1) * (Ci * X + nR))
    by (apply Rmult_le_compat_l; lra).
  assert (E : (P - 1) * (Ci * X + nR) + ((Ci - 1) * X + nR) = (P * Ci - 1) * X + P * nR) by ring.
  lra.
Qed.

(** ** The tile loop *)

(** Factors at least one (small lemmas: [nra] over the loop's contexts took seconds). *)
Lemma ce_one_le_mult : forall x y, 1 <= x -> 1 <= y -> 1 <= x * y.
Proof. intros x y Hx Hy; nra. Qed.

Lemma ce_le_mult_ge1 : forall x y, 0 <= x -> 1 <= y -> x <= y * x.
Proof. intros x y Hx Hy; nra. Qed.

Definition ce_Ci (u ue XK ci : R) : R := ci * ((1 + ue) * XK) * (1 + u).
Definition ce_Ri (u ue ee ea XK ci ri Nx : R) : R := (ci * Nx * ee + ri * ((1 + ue) * XK + ee)) * (1 + u) + ea.
Definition ce_H (u ue XK ci : R) (Dt : nat) : R := (1 + u) ^ Dt * ce_Ci u ue XK ci.
Definition ce_Q (u ue : R) : R := (1 + ue) * (1 + u) ^ 2.
Definition ce_Cm (u ue XK ci : R) (Dt Tt : nat) : R := ce_H u ue XK ci Dt * ce_Q u ue ^ Tt * XK.
Definition ce_a (u ue ee XK : R) : R := (1 + u) ^ 2 * ((1 + ue) * XK + ee).
Definition ce_b (u ue ee ea XK ci ri Nx : R) (Dt Bt Tt Nn : nat) : R :=
  ((ce_Cm u ue XK ci Dt Tt * (INR Nn * Nx) * ee) * (1 + u) + ea
   + (1 + u) ^ Dt * (INR Bt * ce_Ri u ue ee ea XK ci ri Nx)) * (1 + u).

Section Run.

Variables (ts : list R -> R) (Dt Bt Tt Nn : nat) (ci ri Nx lo Kk XK m0 : R).
Hypothesis Hts : sum_ok ts Dt Bt.
Hypothesis Hci : 1 <= ci.
Hypothesis Hri : 0 <= ri.
Hypothesis HNx : 0 <= Nx.
Hypothesis HK : 0 <= Kk.
Hypothesis HXK : exp (u * Kk) <= XK.
Hypothesis Fm0 : fmt m0.
Hypothesis Hm0r : lo <= m0 <= lo + Kk.

(* [u], [ea] spelled out: a notation through the shared ones (Notations.v) would not print. *)
Local Notation Hf := (ce_H (ff_u (mp_a M)) ue XK ci Dt).
Local Notation Q := (ce_Q (ff_u (mp_a M)) ue).
Local Notation a := (ce_a (ff_u (mp_a M)) ue ee XK).
Local Notation b := (ce_b (ff_u (mp_a M)) ue ee (ff_eta (mp_a M)) XK ci ri Nx Dt Bt Tt Nn).

Lemma ce_exp_u_ge1 : forall x, 0 <= x -> 1 <= exp (u * x).
Proof. intros x Hx; rewrite <- exp_0; apply ose_exp_le; pose proof (ff_u_nonneg A_); nra. Qed.

Lemma ce_consts : 1 <= XK /\ 1 <= Hf /\ 1 <= Q /\ 1 <= a /\ 0 <= b /\ 0 <= ce_Ri u ue ee ea XK ci ri Nx.
Proof.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (ff_eta_nonneg A_) as Hea.
  assert (HX1 : 1 <= XK) by (eapply Rle_trans; [apply ce_exp_u_ge1, HK | exact HXK]).
  assert (P1 : forall n, 1 <= (1 + u) ^ n) by (intros; apply pow_R1_Rle; lra).
  assert (HQ : 1 <= Q) by (unfold ce_Q; pose proof (P1 2%nat); nra).
  assert (HC : 1 <= ce_Ci u ue XK ci) by (unfold ce_Ci; assert (1 <= (1 + ue) * XK) by nra;
    assert (1 <= ci * ((1 + ue) * XK)) by (assert (0 <= (ci - 1) * ((1 + ue) * XK - 1)) by (apply Rmult_le_pos; lra); nra); nra).
  assert (HH : 1 <= Hf) by (unfold ce_H; pose proof (P1 Dt); nra).
  assert (Ha : 1 <= a) by (unfold ce_a; pose proof (P1 2%nat); assert (1 <= (1 + ue) * XK + ee) by nra; nra).
  assert (HR : 0 <= ce_Ri u ue ee ea XK ci ri Nx).
  { unfold ce_Ri; assert (0 <= ci * Nx * ee) by (apply Rmult_le_pos; [apply Rmult_le_pos |]; lra).
    assert (0 <= ri * ((1 + ue) * XK + ee))
      by (apply Rmult_le_pos; [lra | apply Rplus_le_le_0_compat; [apply Rmult_le_pos |]; lra]).
    assert (0 <= (ci * Nx * ee + ri * ((1 + ue) * XK + ee)) * (1 + u)) by (apply Rmult_le_pos; lra). lra. }
  assert (Hb : 0 <= b).
  { unfold ce_b; apply Rmult_le_pos; [| lra].
    assert (1 <= ce_Cm u ue XK ci Dt Tt)
      by (unfold ce_Cm; apply ce_one_le_mult; [apply ce_one_le_mult; [exact HH | apply pow_R1_Rle, HQ] | exact HX1]).
    assert (0 <= INR Nn * Nx) by (apply Rmult_le_pos; [apply pos_INR | lra]).
    assert (0 <= ce_Cm u ue XK ci Dt Tt * (INR Nn * Nx) * ee) by (apply Rmult_le_pos; [apply Rmult_le_pos |]; lra).
    assert (0 <= INR Bt * ce_Ri u ue ee ea XK ci ri Nx) by (apply Rmult_le_pos; [apply pos_INR | lra]).
    pose proof (P1 Dt).
    apply Rplus_le_le_0_compat; [apply Rplus_le_le_0_compat; [apply Rmult_le_pos |] | apply Rmult_le_pos]; lra. }
  tauto.
Qed.

Definition items_ok (its : list T) : Prop :=
  forall it, In it its -> fmt (im it) /\ lo <= im it <= lo + Kk /\ 0 <= iX it <= Nx /\ inv ci ri (il it) (iX it) (iX it).

Definition seen_ok (m : R) (its : list T) : Prop := forall it, In it its -> 0 <= iX it <= Nx /\ im it <= m.

Lemma ce_step_inv : forall k seen m l tl,
  fmt m -> m0 <= m -> lo <= m <= lo + Kk -> seen_ok m seen -> (S k <= Tt)%nat -> (length seen <= Nn)%nat ->
  (length tl <= Bt)%nat -> items_ok tl ->
  inv (Hf * Q ^ k * exp (u * (m - m0))) (INR k * a ^ k * b) l (ex_val m seen) (ex_val m seen) ->
  let st := ce_step ts (m, l) tl in
  fmt (fst st) /\ m <= fst st /\ lo <= fst st <= lo + Kk /\ seen_ok (fst st) (seen ++ tl) /\
  inv (Hf * Q ^ S k * exp (u * (fst st - m0))) (INR (S k) * a ^ S k * b) (snd st)
      (ex_val (fst st) (seen ++ tl)) (ex_val (fst st) (seen ++ tl)).
Proof.
  intros k seen m l tl Fm Hm0 Hm Hseen Hk Hn Hl Hit Hinv st.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (ff_eta_nonneg A_) as Hea.
  destruct ce_consts as [HX1 [HH [HQ [Ha [Hb HR]]]]].
  unfold st, ce_step; cbn [fst snd].
  set (m' := tile_max m tl).
  assert (Fm' : fmt m') by (apply tile_max_P; [exact Fm | intros it Hi; apply Hit, Hi]).
  assert (Hm' : lo <= m' <= lo + Kk)
    by (apply (tile_max_P (fun x => lo <= x <= lo + Kk)); [exact Hm | intros it Hi; apply Hit, Hi]).
  destruct (tile_max_ge tl m) as [Hmm' Hitm']; fold m' in Hmm', Hitm'.
  assert (Hseen' : seen_ok m' (seen ++ tl)).
  { intros it Hi; apply in_app_or in Hi; destruct Hi as [Hi | Hi].
    - destruct (Hseen it Hi); split; [assumption | lra].
    - destruct (Hit it Hi) as [_ [_ [HX _]]]; split; [exact HX | apply Hitm', Hi]. }
  split; [exact Fm' |]; split; [exact Hmm' |]; split; [exact Hm' |]; split; [exact Hseen' |].
  (* the state's term *)
  set (c := Hf * Q ^ k * exp (u * (m - m0))).
  set (r := INR k * a ^ k * b).
  set (Y := exp (u * (m' - m))).
  assert (HE0 : 1 <= exp (u * (m - m0))) by (apply ce_exp_u_ge1; lra).
  assert (HQk : 1 <= Q ^ k) by (apply pow_R1_Rle; lra).
  assert (Hc : 1 <= c) by (unfold c; apply ce_one_le_mult; [apply ce_one_le_mult |]; assumption).
  assert (Hr : 0 <= r) by (unfold r; apply Rmult_le_pos; [apply Rmult_le_pos; [apply pos_INR | apply pow_le; lra] | lra]).
  set (X := ex_val m seen) in *.
  destruct (ex_val_bounds m seen Nx Hseen) as [HX0 HXn].
  assert (HXN : X <= INR Nn * Nx) by (eapply Rle_trans; [exact HXn |]; apply Rmult_le_compat_r; [lra | apply le_INR, Hn]).
  pose proof (ce_term_close m m' l X c r Y (INR Nn * Nx) Fm Fm' Hmm' (Rle_refl _) Hc Hr (conj HX0 HXN) Hinv) as T0.
  replace (X * exp (m - m')) with (ex_val m' seen) in T0 by (unfold X; symmetry; apply ex_val_shift).
  (* the tile *)
  assert (Hit' : forall it, In it tl -> fmt (im it) /\ im it <= m' /\ exp (u * (m' - im it)) <= XK /\
                          0 <= iX it <= Nx /\ inv ci ri (il it) (iX it) (iX it)).
  { intros it Hi; destruct (Hit it Hi) as [F [Hr' [HX HI]]]; repeat split; try tauto; [apply Hitm', Hi |].
    eapply Rle_trans; [| exact HXK]; apply ose_exp_le, Rmult_le_compat_l; [exact Hu | lra]. }
  destruct (ce_tile_close ts Dt Bt m' tl ci ri XK Nx Hts Hl Fm' Hci Hri Hit') as [Fy Ty].
  fold (ce_Ci u ue XK ci) in Ty; fold (ce_Ri u ue ee ea XK ci ri Nx) in Ty.
  change ((1 + u) ^ Dt * ce_Ci u ue XK ci) with Hf in Ty.
  assert (HXa : 0 <= ex_val m' seen) by (rewrite <- (ex_val_shift m m'); apply Rmult_le_pos; [lra | left; apply exp_pos]).
  assert (HXb : 0 <= ex_val m' tl) by (destruct (ex_val_bounds m' tl Nx) as [? _];
    [intros it Hi; destruct (Hit' it Hi) as [_ [? [_ [? _]]]]; split; assumption | assumption]).
  set (G1 := c * ((1 + ue) * Y) * (1 + u)) in T0.
  set (R1 := (c * (INR Nn * Nx) * ee + r * ((1 + ue) * Y + ee)) * (1 + u) + ea) in T0.
  set (R2 := (1 + u) ^ Dt * (INR (length tl) * ce_Ri u ue ee ea XK ci ri Nx)) in Ty.
  assert (HY1 : 1 <= Y) by (apply ce_exp_u_ge1; lra).
  assert (HYK : Y <= XK) by (eapply Rle_trans; [| exact HXK]; apply ose_exp_le, Rmult_le_compat_l; lra).
  assert (HG1 : 1 <= G1) by (unfold G1; apply ce_one_le_mult;
    [apply ce_one_le_mult; [exact Hc | apply ce_one_le_mult; [lra | exact HY1]] | lra]).
  assert (HP1 : forall n, 1 <= (1 + u) ^ n) by (intros; apply pow_R1_Rle; lra).
  assert (HR1 : 0 <= R1).
  { unfold R1; assert (0 <= c * (INR Nn * Nx) * ee)
      by (apply Rmult_le_pos; [apply Rmult_le_pos; [lra | apply Rmult_le_pos; [apply pos_INR | lra]] | lra]).
    assert (0 <= r * ((1 + ue) * Y + ee))
      by (apply Rmult_le_pos; [exact Hr | apply Rplus_le_le_0_compat; [apply Rmult_le_pos |]; lra]).
    assert (0 <= (c * (INR Nn * Nx) * ee + r * ((1 + ue) * Y + ee)) * (1 + u)) by (apply Rmult_le_pos; lra). lra. }
  assert (HR2 : 0 <= R2) by (unfold R2; pose proof (HP1 Dt);
    apply Rmult_le_pos; [lra | apply Rmult_le_pos; [apply pos_INR | lra]]).
  pose proof (inv_add M G1 R1 _ (ex_val m' seen) (ex_val m' seen) Hf R2 _ (ex_val m' tl) (ex_val m' tl) HG1 HH HR1 HR2 (ff_rnd_fmt A_ _) Fy
                ltac:(rewrite Rabs_right by lra; lra) ltac:(rewrite Rabs_right by lra; lra) T0 Ty) as Hsum.
  rewrite ex_val_app.
  refine (ce_inv_mono _ _ _ _ _ _ _ _ _ _ Hsum); [lra | |].
  - (* the factor telescopes *)
    assert (EG1 : G1 = Hf * Q ^ k * ((1 + ue) * (1 + u)) * exp (u * (m' - m0))).
    { unfold G1, c, Y; replace (u * (m' - m0)) with (u * (m - m0) + u * (m' - m)) by ring.
      rewrite exp_plus; ring. }
    assert (HE' : 1 <= exp (u * (m' - m0))) by (apply ce_exp_u_ge1; lra).
    assert (HW : Hf <= Hf * Q ^ k * ((1 + ue) * (1 + u)) * exp (u * (m' - m0))).
    { assert (1 <= (1 + ue) * (1 + u)) by (apply ce_one_le_mult; lra).
      assert (1 <= Q ^ k * ((1 + ue) * (1 + u))) by (apply ce_one_le_mult; assumption).
      assert (1 <= Q ^ k * ((1 + ue) * (1 + u)) * exp (u * (m' - m0))) by (apply ce_one_le_mult; assumption).
      replace (Hf * Q ^ k * ((1 + ue) * (1 + u)) * exp (u * (m' - m0)))
        with (Q ^ k * ((1 + ue) * (1 + u)) * exp (u * (m' - m0)) * Hf) by ring.
      apply ce_le_mult_ge1; lra. }
    assert (Rmax G1 Hf <= Hf * Q ^ k * ((1 + ue) * (1 + u)) * exp (u * (m' - m0)))
      by (apply Rmax_lub; lra).
    replace (Hf * Q ^ S k * exp (u * (m' - m0)))
      with (Hf * Q ^ k * ((1 + ue) * (1 + u)) * exp (u * (m' - m0)) * (1 + u))
      by (unfold ce_Q; simpl; ring).
    apply Rmult_le_compat_r; lra.
  - (* the absolute term *)
    set (Cm := ce_Cm u ue XK ci Dt Tt).
    assert (HcC : c <= Cm).
    { unfold c, Cm, ce_Cm; apply Rmult_le_compat; [apply Rmult_le_pos; lra | lra | | ].
      - apply Rmult_le_compat_l; [lra |]; apply Rle_pow; [lra | lia].
      - eapply Rle_trans; [| exact HXK]; apply ose_exp_le, Rmult_le_compat_l; lra. }
    assert (HB1 : R1 <= (Cm * (INR Nn * Nx) * ee + r * ((1 + ue) * XK + ee)) * (1 + u) + ea).
    { unfold R1; apply Rplus_le_compat_r, Rmult_le_compat_r; [lra |]; apply Rplus_le_compat.
      - apply Rmult_le_compat_r; [lra |]; apply Rmult_le_compat_r; [apply Rmult_le_pos; [apply pos_INR | lra] | exact HcC].
      - apply Rmult_le_compat_l; [exact Hr |]; apply Rplus_le_compat_r, Rmult_le_compat_l; lra. }
    assert (HB2 : R2 <= (1 + u) ^ Dt * (INR Bt * ce_Ri u ue ee ea XK ci ri Nx)).
    { unfold R2; apply Rmult_le_compat_l; [pose proof (HP1 Dt); lra |].
      apply Rmult_le_compat_r; [lra | apply le_INR, Hl]. }
    assert (Hab : (R1 + R2) * (1 + u) <= a * r + b).
    { unfold ce_a, ce_b; fold Cm.
      assert (Hx : (R1 + R2) * (1 + u) <= ((Cm * (INR Nn * Nx) * ee + r * ((1 + ue) * XK + ee)) * (1 + u) + ea
                                     + (1 + u) ^ Dt * (INR Bt * ce_Ri u ue ee ea XK ci ri Nx)) * (1 + u))
        by (apply Rmult_le_compat_r; lra).
      replace ((1 + u) ^ 2 * ((1 + ue) * XK + ee) * r
               + ((Cm * (INR Nn * Nx) * ee) * (1 + u) + ea
                  + (1 + u) ^ Dt * (INR Bt * ce_Ri u ue ee ea XK ci ri Nx)) * (1 + u))
        with (((Cm * (INR Nn * Nx) * ee + r * ((1 + ue) * XK + ee)) * (1 + u) + ea
               + (1 + u) ^ Dt * (INR Bt * ce_Ri u ue ee ea XK ci ri Nx)) * (1 + u)) by ring.
      exact Hx. }
    unfold r in Hab.
    assert (Hak : 1 <= a ^ S k) by (apply pow_R1_Rle; lra).
    replace (INR (S k) * a ^ S k * b) with (INR k * a ^ k * b * a + a ^ S k * b)
      by (rewrite S_INR; simpl; ring).
    assert (b <= a ^ S k * b) by (apply ce_le_mult_ge1; assumption).
    lra.
Qed.

Lemma ce_run_gen : forall tiles k seen m l,
  fmt m -> m0 <= m -> lo <= m <= lo + Kk -> seen_ok m seen ->
  (k + length tiles <= Tt)%nat -> (length seen + length (concat tiles) <= Nn)%nat ->
  Forall (fun tl => (length tl <= Bt)%nat) tiles -> items_ok (concat tiles) ->
  inv (Hf * Q ^ k * exp (u * (m - m0))) (INR k * a ^ k * b) l (ex_val m seen) (ex_val m seen) ->
  let st := ce_run ts (m, l) tiles in
  fmt (fst st) /\ m <= fst st /\ lo <= fst st <= lo + Kk /\ seen_ok (fst st) (seen ++ concat tiles) /\
  inv (Hf * Q ^ (k + length tiles) * exp (u * (fst st - m0))) (INR (k + length tiles) * a ^ (k + length tiles) * b)
      (snd st) (ex_val (fst st) (seen ++ concat tiles)) (ex_val (fst st) (seen ++ concat tiles)).
Proof.
  induction tiles as [|tl rest IH]; intros k seen m l Fm Hm0 Hm Hs Hk Hn HB Hit Hinv st.
  - unfold st; cbn [ce_run fold_left fst snd concat length]; rewrite app_nil_r, Nat.add_0_r.
    exact (conj Fm (conj (Rle_refl _) (conj Hm (conj Hs Hinv)))).
  - unfold st, ce_run; cbn [fold_left]; fold (ce_run ts (ce_step ts (m, l) tl) rest).
    cbn [concat length] in *; rewrite app_length in Hn.
    inversion HB as [| ? ? Htl HB']; subst.
    assert (Hit1 : items_ok tl) by (intros it Hi; apply Hit, in_or_app; left; exact Hi).
    assert (Hit2 : items_ok (concat rest)) by (intros it Hi; apply Hit, in_or_app; right; exact Hi).
    destruct (ce_step_inv k seen m l tl Fm Hm0 Hm Hs ltac:(lia) ltac:(lia) Htl Hit1 Hinv)
      as [F1 [H1 [H2 [H3 H4]]]].
    destruct (ce_step ts (m, l) tl) as [m1 l1]; cbn [fst snd] in *.
    destruct (IH (S k) (seen ++ tl) m1 l1 F1 ltac:(lra) H2 H3 ltac:(lia)
                ltac:(rewrite app_length; lia) HB' Hit2 H4) as [G1 [G2 [G3 [G4 G5]]]].
    rewrite <- app_assoc in G4, G5; replace (S k + length rest)%nat with (k + S (length rest))%nat in G5 by lia.
    unfold ce_run in *.
    refine (conj G1 (conj _ (conj G3 (conj G4 G5)))); eapply Rle_trans; [exact H1 | exact G2].
Qed.

End Run.

Lemma ce_run_P : forall (P : R -> Prop) ts tiles m l, P m -> (forall it, In it (concat tiles) -> P (im it)) ->
  P (fst (ce_run ts (m, l) tiles)).
Proof.
  intros P ts; induction tiles as [|tl rest IH]; intros m l Hm Hi; [exact Hm |].
  unfold ce_run; cbn [fold_left]; fold (ce_run ts (ce_step ts (m, l) tl) rest).
  destruct (ce_step ts (m, l) tl) as [m1 l1] eqn:E.
  assert (Em1 : m1 = tile_max m tl) by (unfold ce_step in E; injection E; auto).
  apply IH.
  - rewrite Em1; apply tile_max_P; [exact Hm | intros it H; apply Hi, in_or_app; left; exact H].
  - intros it H; apply Hi, in_or_app; right; exact H.
Qed.

(** The running sum is a number of the format: each step rounds it. *)
Lemma ce_run_l_fmt : forall ts tiles m l, fmt l -> fmt (snd (ce_run ts (m, l) tiles)).
Proof.
  intros ts; induction tiles as [|tl rest IH]; intros m l Fl; [exact Fl |].
  unfold ce_run; cbn [fold_left]; fold (ce_run ts (ce_step ts (m, l) tl) rest).
  destruct (ce_step ts (m, l) tl) as [m1 l1] eqn:E.
  apply IH; unfold ce_step in E; injection E as _ <-; apply ff_rnd_fmt.
Qed.

End Items.

(** ** The log-sum-exp of one token's logits *)

Definition ce_lse_bound (u el Zmax LN NL delta : R) : R := u * (Zmax + LN + NL + el) + el + NL + delta.

Definition ce_bL (u ue ee ea XK : R) (Dt Bt Tt Nn : nat) : R :=
  ce_H u ue XK 1 Dt * ce_Q u ue ^ Tt * XK - 1
  + INR Tt * ce_a u ue ee XK ^ Tt * ce_b u ue ee ea XK 1 0 1 Dt Bt Tt Nn.

(** A raw logit as an item: [rnd (1 * ex x) = ex x], the kernel's [tl.exp (rnd (z - m'))]. *)
Lemma ce_item_term_logit : forall (m' : R) (zy : R * R),
  item_term (R * R) fst (fun _ => 1) m' zy = ex (rnd (fst zy - m')).
Proof. intros; unfold item_term; rewrite Rmult_1_l; apply ff_rnd_id, ex_fmt. Qed.

Definition logit_val (m : R) (zs : list (R * R)) : R := ex_val (R * R) fst (fun _ => 1) m zs.

(** The end of [ce_lse_error] for any state [(m, l)] close to the logits' exact sum at [m]. *)
Lemma ce_lse_finish : forall (zs : list (R * R)) m l C Rr Zmax delta LN NL (Nn : nat),
  let bL := C - 1 + Rr in
  fmt m -> (exists zy, In zy zs /\ fst zy = m) -> (forall zy, In zy zs -> fst zy <= m) -> (length zs <= Nn)%nat ->
  (forall zy, In zy zs -> Rabs (fst zy) <= Zmax /\ Rabs (fst zy - snd zy) <= delta) ->
  1 <= C -> 0 <= Rr -> fmt l -> Rabs (l - logit_val m zs) <= (C - 1) * logit_val m zs + Rr ->
  bL < 1 -> ln (INR Nn) <= LN -> - ln (1 - bL) <= NL -> lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  Rabs (rnd (m + lg l) - ln (rsum (map (fun zy => exp (snd zy)) zs))) <= ce_lse_bound u el Zmax LN NL delta.
Proof.
  intros zs m l C Rr Zmax delta LN NL Nn bL Fm Hatt Hle HN Hz HC HR Fl Hinv HbL HLN HNL Hlmin Hlmax.
  pose proof (ff_u_nonneg A_) as Hu.
  set (L := logit_val m zs) in *.
  assert (HL0 : 0 <= L /\ L <= INR (length zs) * 1)
    by (apply ex_val_bounds; intros zy Hi; split; [lra | apply Hle, Hi]).
  assert (HL1 : 1 <= L).
  { destruct Hatt as [zy [Hi Ez]]; unfold L, logit_val, ex_val.
    apply Rle_trans with (1 * exp (fst zy - m)); [rewrite Ez, Rminus_diag_eq, exp_0 by reflexivity; lra |].
    clear - Hi.
    induction zs as [| z zs IHz]; [destruct Hi |].
    cbn [map]; rewrite rsum_cons; destruct Hi as [<- | Hi].
    - assert (0 <= rsum (map (fun it => 1 * exp (fst it - m)) zs))
        by (apply rsum_nonneg; intros x Hx; apply in_map_iff in Hx; destruct Hx as [w [<- _]];
            rewrite Rmult_1_l; left; apply exp_pos).
      lra.
    - pose proof (IHz Hi); assert (0 < 1 * exp (fst z - m)) by (rewrite Rmult_1_l; apply exp_pos); lra. }
  assert (HLN' : L <= INR Nn) by (eapply Rle_trans; [apply HL0 |]; rewrite Rmult_1_r; apply le_INR, HN).
  assert (Hrel : Rabs (l - L) <= bL * L) by (unfold bL; assert (Rr <= Rr * L) by nra; nra).
  assert (HbL0 : 0 <= bL) by (unfold bL; lra).
  destruct (afe_ln_ratio l L bL ltac:(lra) ltac:(lra) Hrel) as [Hl0 Hln].
  set (Sz := rsum (map (fun zy => exp (fst zy)) zs)).
  assert (ESz : Sz = exp m * L).
  { unfold Sz, L, logit_val, ex_val; rewrite <- rsum_map_scal_l; apply rsum_map_ext; intros zy _.
    rewrite Rmult_1_l, <- exp_plus; f_equal; ring. }
  assert (ElnS : ln Sz = m + ln L) by (rewrite ESz, ln_mult, ln_exp by (apply exp_pos || lra); reflexivity).
  set (LSE := ln (rsum (map (fun zy => exp (snd zy)) zs))).
  assert (Hp : Rabs (ln Sz - LSE) <= delta).
  { unfold Sz, LSE; apply (lse_perturbation zs snd fst delta).
    - intros E; rewrite E in Hatt; destruct Hatt as [? [[] _]].
    - intros zy Hi; destruct (Hz zy Hi) as [_ Hd]; exact Hd. }
  assert (HlnL : 0 <= ln L <= LN).
  { split; [rewrite <- ln_1; apply afe_ln_le; lra |].
    apply Rle_trans with (ln (INR Nn)); [apply afe_ln_le; lra | exact HLN]. }
  assert (Hlnl : Rabs (ln l) <= LN + NL) by (pose proof (sp_Rabs_le_inv _ _ Hln); apply Rabs_le; lra).
  assert (HNe : INR Nn <= exp LN).
  { rewrite <- (exp_ln (INR Nn)) by lra; apply ose_exp_le, HLN. }
  assert (Hlo : lmin <= l).
  { pose proof (sp_Rabs_le_inv _ _ Hrel).
    assert ((1 - bL) * 1 <= (1 - bL) * L) by (apply Rmult_le_compat_l; lra). lra. }
  assert (Hhi : l <= lmax).
  { pose proof (sp_Rabs_le_inv _ _ Hrel).
    assert ((1 + bL) * L <= (1 + bL) * exp LN) by (apply Rmult_le_compat_l; lra). lra. }
  pose proof (lg_err l Fl (conj Hlo Hhi)) as Hlg.
  assert (Hlga : Rabs (lg l) <= LN + NL + el).
  { replace (lg l) with ((lg l - ln l) + ln l) by ring; eapply Rle_trans; [apply Rabs_triang | lra]. }
  assert (Hmz : Rabs m <= Zmax) by (destruct Hatt as [zy [Hi <-]]; apply (Hz zy Hi)).
  pose proof (ff_add A_ m (lg l) Fm (lg_fmt l)) as Hr.
  assert (Hx : Rabs (m + lg l) <= Zmax + LN + NL + el) by (eapply Rle_trans; [apply Rabs_triang | lra]).
  replace (rnd (m + lg l) - LSE)
    with ((rnd (m + lg l) - (m + lg l)) + (lg l - ln l) + (ln l - ln L) + (ln Sz - LSE)) by (rewrite ElnS; ring).
  unfold ce_lse_bound.
  assert (u * Rabs (m + lg l) <= u * (Zmax + LN + NL + el)) by (apply Rmult_le_compat_l; lra).
  pose proof (Rabs_triang ((rnd (m + lg l) - (m + lg l)) + (lg l - ln l) + (ln l - ln L)) (ln Sz - LSE)).
  pose proof (Rabs_triang ((rnd (m + lg l) - (m + lg l)) + (lg l - ln l)) (ln l - ln L)).
  pose proof (Rabs_triang (rnd (m + lg l) - (m + lg l)) (lg l - ln l)).
  lra.
Qed.

(** The logits [z = fst] (fp32 numbers, as computed) paired with their exact
    values [y = snd]; the state from [(z_first, 0)]. *)
Theorem ce_lse_error : forall (zy0 : R * R) (tiles : list (list (R * R))) ts (Dt Bt Tt Nn : nat) Zmax XK delta LN NL,
  let st := ce_run (R * R) fst (fun _ => 1) ts (fst zy0, 0) tiles in
  let bL := ce_bL u ue ee ea XK Dt Bt Tt Nn in
  In zy0 (concat tiles) -> sum_ok ts Dt Bt ->
  Forall (fun tl => (length tl <= Bt)%nat) tiles -> (length tiles <= Tt)%nat -> (length (concat tiles) <= Nn)%nat ->
  (forall zy, In zy (concat tiles) -> fmt (fst zy) /\ Rabs (fst zy) <= Zmax /\ Rabs (fst zy - snd zy) <= delta) ->
  exp (u * (2 * Zmax)) <= XK -> bL < 1 -> ln (INR Nn) <= LN -> - ln (1 - bL) <= NL ->
  lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  Rabs (rnd (fst st + lg (snd st)) - ln (rsum (map (fun zy => exp (snd zy)) (concat tiles))))
  <= ce_lse_bound u el Zmax LN NL delta.
Proof.
  intros zy0 tiles ts Dt Bt Tt Nn Zmax XK delta LN NL st bL H0 Hts HB HT HN Hz HXK HbL HLN HNL Hlmin Hlmax.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (ff_eta_nonneg A_) as Hea.
  destruct (Hz zy0 H0) as [F0 [Z0 _]].
  assert (HZ : 0 <= Zmax) by (pose proof (Rabs_pos (fst zy0)); lra).
  pose proof (sp_Rabs_le_inv _ _ Z0) as Z0'.
  assert (Hok : items_ok (R * R) fst (fun _ => 1) (fun _ => 1) 1 0 1 (- Zmax) (2 * Zmax) (concat tiles)).
  { intros zy Hi; destruct (Hz zy Hi) as [F [Hb _]]; pose proof (sp_Rabs_le_inv _ _ Hb).
    repeat split; try lra; [exact F |]; unfold inv; rewrite Rminus_diag_eq, Rabs_R0 by reflexivity; lra. }
  destruct (ce_run_gen (R * R) fst (fun _ => 1) (fun _ => 1) ts Dt Bt Tt Nn 1 0 1 (- Zmax) (2 * Zmax) XK (fst zy0)
              Hts ltac:(lra) ltac:(lra) ltac:(lra) ltac:(lra) HXK ltac:(lra) tiles 0 [] (fst zy0) 0 F0 ltac:(lra) ltac:(lra)
              ltac:(intros ? []) ltac:(cbn [length]; lia) ltac:(cbn [length]; lia) HB Hok
              ltac:(unfold inv, ex_val; cbn [rsum map fold_right INR]; rewrite Rminus_0_r, Rabs_R0; nra))
    as [Fm [Hm0 [Hm [Hseen Hinv]]]].
  fold st in Fm, Hm0, Hm, Hseen, Hinv; cbn [app length] in Hseen, Hinv; rewrite Nat.add_0_l in Hinv.
  set (m := fst st) in *; set (l := snd st) in *.
  set (k := length tiles) in *.
  set (L := ex_val (R * R) fst (fun _ => 1) m (concat tiles)) in *.
  destruct (ce_consts Dt Bt Tt Nn 1 0 1 (- Zmax) (2 * Zmax) XK (fst zy0) ltac:(lra) ltac:(lra) ltac:(lra) ltac:(lra) HXK ltac:(lra))
    as [HX1 [HH [HQ [Ha [Hb HR]]]]].
  assert (Hatt : exists zy, In zy (concat tiles) /\ fst zy = m).
  { unfold m, st; apply (ce_run_P (R * R) fst (fun _ => 1) (fun x => exists zy, In zy (concat tiles) /\ fst zy = x)).
    - exists zy0; split; [exact H0 | reflexivity].
    - intros zy Hi; exists zy; split; [exact Hi | reflexivity]. }
  assert (HL0 : 0 <= L) by (apply ex_val_bounds with (Nx := 1); intros zy Hi; split; [lra | apply Hseen, Hi]).
  set (C := ce_H u ue XK 1 Dt * ce_Q u ue ^ Tt * XK).
  set (Rt := INR Tt * ce_a u ue ee XK ^ Tt * ce_b u ue ee ea XK 1 0 1 Dt Bt Tt Nn).
  assert (HC : 1 <= C) by (unfold C; apply ce_one_le_mult; [apply ce_one_le_mult; [exact HH | apply pow_R1_Rle, HQ] | exact HX1]).
  assert (HRt : 0 <= Rt) by (unfold Rt; apply Rmult_le_pos; [apply Rmult_le_pos; [apply pos_INR | apply pow_le; lra] | lra]).
  assert (Fl : fmt l) by (unfold l, st; apply ce_run_l_fmt, ff_fmt_0).
  apply (ce_lse_finish (concat tiles) m l C Rt Zmax delta LN NL Nn); auto.
  - intros zy Hi; apply Hseen, Hi.
  - intros zy Hi; destruct (Hz zy Hi) as [_ H]; exact H.
  - unfold inv in Hinv.
    set (G := ce_H u ue XK 1 Dt * ce_Q u ue ^ k * exp (u * (m - fst zy0))) in Hinv.
    assert (HG : G <= C).
    { unfold G, C; apply Rmult_le_compat; [apply Rmult_le_pos; [lra | apply pow_le; lra] | left; apply exp_pos | apply Rmult_le_compat_l; [lra | apply Rle_pow; [lra | exact HT]] |].
      eapply Rle_trans; [| exact HXK]; apply ose_exp_le, Rmult_le_compat_l; lra. }
    assert (HRk : INR k * ce_a u ue ee XK ^ k * ce_b u ue ee ea XK 1 0 1 Dt Bt Tt Nn <= Rt).
    { unfold Rt; apply Rmult_le_compat_r; [lra |]; apply Rmult_le_compat; [apply pos_INR | apply pow_le; lra | apply le_INR, HT |].
      apply Rle_pow; [lra | exact HT]. }
    assert ((G - 1) * L <= (C - 1) * L) by (apply Rmult_le_compat_r; lra).
    unfold logit_val; fold L; lra.
Qed.

(** The per-token loss without label smoothing and z-loss: [rnd (lse - z_t)]
    (the kernel's [(1 - eps) (lse - zt) + eps (...) + lam lse^2] at [eps = lam = 0]:
    the other terms are exact zeros), against [ln sum_v e^(y_v) - y_t]. *)
Theorem ce_loss_error : forall lse zt yt LSE B delta,
  fmt lse -> fmt zt -> Rabs (lse - LSE) <= B -> Rabs (zt - yt) <= delta ->
  Rabs (rnd (lse - zt) - (LSE - yt)) <= (1 + u) * (B + delta) + u * Rabs (LSE - yt).
Proof.
  intros lse zt yt LSE B delta Fl Fz HB Hd.
  pose proof (ff_u_nonneg A_) as Hu.
  pose proof (ff_add A_ lse (- zt) Fl (ff_fmt_opp A_ zt Fz)) as Hr.
  replace (lse + - zt) with (lse - zt) in Hr by ring.
  pose proof (sp_Rabs_le_inv _ _ HB) as [B1 B2]; pose proof (sp_Rabs_le_inv _ _ Hd) as [D1 D2].
  pose proof (Rle_abs (LSE - yt)) as A1; pose proof (Rle_abs (- (LSE - yt))) as A2; rewrite Rabs_Ropp in A2.
  assert (Hx : Rabs (lse - zt) <= Rabs (LSE - yt) + B + delta) by (apply Rabs_le; lra).
  assert (u * Rabs (lse - zt) <= u * (Rabs (LSE - yt) + B + delta)) by (apply Rmult_le_compat_l; lra).
  pose proof (sp_Rabs_le_inv _ _ Hr) as [R1 R2].
  assert (0 <= u * (B + delta)) by (apply Rmult_le_pos; [lra | pose proof (Rabs_pos (lse - LSE)); pose proof (Rabs_pos (zt - yt)); lra]).
  apply Rabs_le; split; nra.
Qed.


(** ** The bound with upper bounds of its powers (what Bounds/LinearCrossEntropy.v computes) *)

Definition ce_bL_p (u ue ee ea XK P1 QT AT : R) (Bt Tt Nn : nat) : R :=
  let Hh := P1 * (1 * ((1 + ue) * XK) * (1 + u)) in
  let Ri := (1 * 1 * ee + 0 * ((1 + ue) * XK + ee)) * (1 + u) + ea in
  Hh * QT * XK - 1 + INR Tt * AT * (((Hh * QT * XK * (INR Nn * 1) * ee) * (1 + u) + ea + P1 * (INR Bt * Ri)) * (1 + u)).

Lemma ce_bL_eq : forall u ue ee ea XK Dt Bt Tt Nn,
  ce_bL u ue ee ea XK Dt Bt Tt Nn = ce_bL_p u ue ee ea XK ((1 + u) ^ Dt) (ce_Q u ue ^ Tt) (ce_a u ue ee XK ^ Tt) Bt Tt Nn.
Proof. intros; reflexivity. Qed.

Lemma ce_bL_p_mono : forall u0 ue0 ee0 ea0 XK P1 QT AT P1' QT' AT' Bt Tt Nn,
  0 <= u0 -> 0 <= ue0 -> 0 <= ee0 -> 0 <= ea0 -> 0 <= XK ->
  0 <= P1 <= P1' -> 0 <= QT <= QT' -> 0 <= AT <= AT' ->
  ce_bL_p u0 ue0 ee0 ea0 XK P1 QT AT Bt Tt Nn <= ce_bL_p u0 ue0 ee0 ea0 XK P1' QT' AT' Bt Tt Nn.
Proof.
  intros u0 ue0 ee0 ea0 XK P1 QT AT P1' QT' AT' Bt Tt Nn Hu Hue Hee Hea HX [HP HP'] [HQ HQ'] [HA HA'].
  unfold ce_bL_p; cbv zeta.
  set (C := 1 * ((1 + ue0) * XK) * (1 + u0)).
  assert (HC : 0 <= C) by (unfold C; apply Rmult_le_pos; [| lra]; rewrite Rmult_1_l; apply Rmult_le_pos; lra).
  set (Ri := (1 * 1 * ee0 + 0 * ((1 + ue0) * XK + ee0)) * (1 + u0) + ea0).
  assert (HR : 0 <= Ri) by (unfold Ri; ring_simplify; nra).
  assert (G1 : P1 * C * QT * XK <= P1' * C * QT' * XK).
  { apply Rmult_le_compat_r; [exact HX |]; apply Rmult_le_compat; [apply Rmult_le_pos; lra | lra | | lra].
    apply Rmult_le_compat_r; lra. }
  assert (G0 : 0 <= P1 * C * QT * XK) by (apply Rmult_le_pos; [apply Rmult_le_pos; [apply Rmult_le_pos|] |]; lra).
  assert (HN : 0 <= INR Nn * 1) by (rewrite Rmult_1_r; apply pos_INR).
  assert (HB : 0 <= INR Bt * Ri) by (apply Rmult_le_pos; [apply pos_INR | lra]).
  assert (B1 : ((P1 * C * QT * XK * (INR Nn * 1) * ee0) * (1 + u0) + ea0 + P1 * (INR Bt * Ri)) * (1 + u0)
               <= ((P1' * C * QT' * XK * (INR Nn * 1) * ee0) * (1 + u0) + ea0 + P1' * (INR Bt * Ri)) * (1 + u0)).
  { apply Rmult_le_compat_r; [lra |].
    assert (P1 * C * QT * XK * (INR Nn * 1) * ee0 <= P1' * C * QT' * XK * (INR Nn * 1) * ee0)
      by (apply Rmult_le_compat_r; [lra |]; apply Rmult_le_compat_r; lra).
    assert (P1 * (INR Bt * Ri) <= P1' * (INR Bt * Ri)) by (apply Rmult_le_compat_r; lra).
    nra. }
  assert (B0 : 0 <= ((P1 * C * QT * XK * (INR Nn * 1) * ee0) * (1 + u0) + ea0 + P1 * (INR Bt * Ri)) * (1 + u0)).
  { apply Rmult_le_pos; [| lra].
    assert (0 <= P1 * C * QT * XK * (INR Nn * 1) * ee0) by (apply Rmult_le_pos; [apply Rmult_le_pos|]; lra).
    assert (0 <= P1 * (INR Bt * Ri)) by (apply Rmult_le_pos; lra). nra. }
  assert (T1 : INR Tt * AT * (((P1 * C * QT * XK * (INR Nn * 1) * ee0) * (1 + u0) + ea0 + P1 * (INR Bt * Ri)) * (1 + u0))
               <= INR Tt * AT' * (((P1' * C * QT' * XK * (INR Nn * 1) * ee0) * (1 + u0) + ea0 + P1' * (INR Bt * Ri)) * (1 + u0))).
  { apply Rmult_le_compat; [apply Rmult_le_pos; [apply pos_INR | lra] | exact B0 | | exact B1].
    apply Rmult_le_compat_l; [apply pos_INR | lra]. }
  lra.
Qed.

(** [ce_lse_error] with upper bounds [P1 >= (1 + u)^Dt], [QT >= ce_Q^Tt], [AT >= ce_a^Tt]. *)
Theorem ce_lse_error_up : forall (zy0 : R * R) (tiles : list (list (R * R))) ts (Dt Bt Tt Nn : nat)
    Zmax XK delta LN NL P1 QT AT,
  let st := ce_run (R * R) fst (fun _ => 1) ts (fst zy0, 0) tiles in
  let bL := ce_bL_p u ue ee ea XK P1 QT AT Bt Tt Nn in
  In zy0 (concat tiles) -> sum_ok ts Dt Bt ->
  Forall (fun tl => (length tl <= Bt)%nat) tiles -> (length tiles <= Tt)%nat -> (length (concat tiles) <= Nn)%nat ->
  (forall zy, In zy (concat tiles) -> fmt (fst zy) /\ Rabs (fst zy) <= Zmax /\ Rabs (fst zy - snd zy) <= delta) ->
  exp (u * (2 * Zmax)) <= XK -> (1 + u) ^ Dt <= P1 -> ce_Q u ue ^ Tt <= QT -> ce_a u ue ee XK ^ Tt <= AT ->
  bL < 1 -> ln (INR Nn) <= LN -> - ln (1 - bL) <= NL -> lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  Rabs (rnd (fst st + lg (snd st)) - ln (rsum (map (fun zy => exp (snd zy)) (concat tiles))))
  <= ce_lse_bound u el Zmax LN NL delta.
Proof.
  intros zy0 tiles ts Dt Bt Tt Nn Zmax XK delta LN NL P1 QT AT st bL H0 Hts HB HT HN Hz HXK HP HQ HA HbL HLN HNL
    Hlmin Hlmax.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (ff_eta_nonneg A_) as Hea.
  assert (HX0 : 0 <= XK) by (eapply Rle_trans; [left; apply exp_pos | exact HXK]).
  assert (Hle : ce_bL u ue ee ea XK Dt Bt Tt Nn <= bL).
  { rewrite ce_bL_eq; apply ce_bL_p_mono; try lra.
    - split; [apply pow_le; lra | exact HP].
    - split; [apply pow_le; unfold ce_Q; apply Rmult_le_pos; [lra | apply pow_le; lra] | exact HQ].
    - split; [apply pow_le; unfold ce_a; apply Rmult_le_pos; [apply pow_le; lra | assert (0 <= (1 + ue) * XK) by (apply Rmult_le_pos; lra); lra] | exact HA]. }
  apply (ce_lse_error zy0 tiles ts Dt Bt Tt Nn Zmax XK delta LN NL); auto;
    [lra | | lra | apply Rle_trans with ((1 + bL) * exp LN);
                   [apply Rmult_le_compat_r; [left; apply exp_pos | lra] | exact Hlmax]].
  eapply Rle_trans; [| exact HNL].
  apply Ropp_le_contravar.
  set (b0 := ce_bL u ue ee ea XK Dt Bt Tt Nn) in *.
  assert (Hb0 : 0 <= b0).
  { unfold b0; destruct (ce_consts Dt Bt Tt Nn 1 0 1 0 (2 * Zmax) XK 0) as [HX1 [HH [HQ1 [Ha [Hb _]]]]];
      try lra.
    - destruct (Hz zy0 H0) as [_ [Z0 _]]; pose proof (Rabs_pos (fst zy0)); lra.
    - destruct (Hz zy0 H0) as [_ [Z0 _]]; pose proof (Rabs_pos (fst zy0)); lra.
    - unfold ce_bL; pose proof (pow_R1_Rle (ce_Q u ue) Tt HQ1).
      assert (1 <= ce_H u ue XK 1 Dt * ce_Q u ue ^ Tt * XK)
        by (apply ce_one_le_mult; [apply ce_one_le_mult; [exact HH | apply pow_R1_Rle, HQ1] | exact HX1]).
      assert (0 <= INR Tt * ce_a u ue ee XK ^ Tt * ce_b u ue ee ea XK 1 0 1 Dt Bt Tt Nn)
        by (apply Rmult_le_pos; [apply Rmult_le_pos; [apply pos_INR | apply pow_le; lra] | lra]).
      lra. }
  apply afe_ln_le; lra.
Qed.

(** ** The two-level schedule: per-group states merged ([_logits_kernel] STATS, then [_rows_kernel]) *)

Section TwoLevel.

(** A group: the vocabulary tiles one [_logits_kernel] program streams; its state from
    [(z_first, 0)] with the tile sum [ts1]. *)
Variable ts1 : list R -> R.

Definition grp_state (g : list (list (R * R))) : R * R :=
  ce_run (R * R) fst (fun _ => 1) ts1 (fst (hd (0, 0) (concat g)), 0) g.
Definition grp_m (g : list (list (R * R))) : R := fst (grp_state g).
Definition grp_l (g : list (list (R * R))) : R := snd (grp_state g).
Definition grp_X (g : list (list (R * R))) : R := logit_val (grp_m g) (concat g).

Lemma grp_val : forall m gs,
  ex_val (list (list (R * R))) grp_m grp_X m gs = logit_val m (concat (map (@concat _) gs)).
Proof.
  intros m; induction gs as [| g gs IH]; [reflexivity |].
  cbn [map concat]; unfold logit_val in *; rewrite ex_val_app, <- IH.
  unfold ex_val at 1; cbn [map]; rewrite rsum_cons; fold (ex_val (list (list (R * R))) grp_m grp_X m gs).
  f_equal; unfold grp_X, logit_val; apply ex_val_shift.
Qed.

(** The merge ([_rows_kernel] without STREAM): tiles of group states, each item's term
    [rnd (l_g * tl.exp (rnd (m_g - m')))], the tile sum [ts2]; from [(m_g0, 0)]. *)
Theorem ce_lse_error_two_level : forall (g0 : list (list (R * R))) (tiles2 : list (list (list (list (R * R)))))
    ts2 (Dt1 Bt1 T1 N1 Dt2 Bt2 T2 Nn : nat) Zmax XK delta LN NL,
  let C1 := ce_H u ue XK 1 Dt1 * ce_Q u ue ^ T1 * XK in
  let R1 := INR T1 * ce_a u ue ee XK ^ T1 * ce_b u ue ee ea XK 1 0 1 Dt1 Bt1 T1 N1 in
  let C2 := ce_H u ue XK C1 Dt2 * ce_Q u ue ^ T2 * XK in
  let R2 := INR T2 * ce_a u ue ee XK ^ T2 * ce_b u ue ee ea XK C1 R1 (INR N1) Dt2 Bt2 T2 Nn in
  let bL := C2 - 1 + R2 in
  let st := ce_run (list (list (R * R))) grp_m grp_l ts2 (grp_m g0, 0) tiles2 in
  let zs := concat (map (@concat _) (concat tiles2)) in
  In g0 (concat tiles2) -> sum_ok ts1 Dt1 Bt1 -> sum_ok ts2 Dt2 Bt2 ->
  (forall g, In g (concat tiles2) -> concat g <> [] /\ Forall (fun tl => (length tl <= Bt1)%nat) g
                                    /\ (length g <= T1)%nat /\ (length (concat g) <= N1)%nat) ->
  Forall (fun tl => (length tl <= Bt2)%nat) tiles2 -> (length tiles2 <= T2)%nat -> (length (concat tiles2) <= Nn)%nat ->
  (forall zy, In zy zs -> fmt (fst zy) /\ Rabs (fst zy) <= Zmax /\ Rabs (fst zy - snd zy) <= delta) ->
  exp (u * (2 * Zmax)) <= XK -> bL < 1 -> ln (INR (length zs)) <= LN -> - ln (1 - bL) <= NL ->
  lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  Rabs (rnd (fst st + lg (snd st)) - ln (rsum (map (fun zy => exp (snd zy)) zs))) <= ce_lse_bound u el Zmax LN NL delta.
Proof.
  intros g0 tiles2 ts2 Dt1 Bt1 T1 N1 Dt2 Bt2 T2 Nn Zmax XK delta LN NL C1 R1 C2 R2 bL st zs
    H0 Hts1 Hts2 Hg HB2 HT2 HN2 Hz HXK HbL HLN HNL Hlmin Hlmax.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (ff_eta_nonneg A_) as Hea.
  assert (Hzs : forall g zy, In g (concat tiles2) -> In zy (concat g) -> In zy zs).
  { intros g zy Hg' Hzy; unfold zs; apply in_concat; exists (concat g); split; [apply in_map, Hg' | exact Hzy]. }
  assert (HZ : 0 <= Zmax).
  { destruct (Hg g0 H0) as [Hne _]; destruct (concat g0) as [| zy r] eqn:E; [congruence |].
    destruct (Hz zy (Hzs g0 zy H0 ltac:(rewrite E; left; reflexivity))) as [_ [Hb _]].
    pose proof (Rabs_pos (fst zy)); lra. }
  destruct (ce_consts Dt1 Bt1 T1 N1 1 0 1 (- Zmax) (2 * Zmax) XK (- Zmax) ltac:(lra) ltac:(lra) ltac:(lra)
              ltac:(lra) HXK ltac:(lra)) as [HX1 [HH1 [HQ [Ha [Hb1 _]]]]].
  assert (HC1 : 1 <= C1) by (unfold C1; apply ce_one_le_mult; [apply ce_one_le_mult; [exact HH1 | apply pow_R1_Rle, HQ] | exact HX1]).
  assert (HR1 : 0 <= R1) by (unfold R1; apply Rmult_le_pos; [apply Rmult_le_pos; [apply pos_INR | apply pow_le; lra] | lra]).
  (* each group's state *)
  assert (Hgrp : forall g, In g (concat tiles2) ->
            fmt (grp_m g) /\ - Zmax <= grp_m g <= - Zmax + 2 * Zmax
            /\ (exists zy, In zy (concat g) /\ fst zy = grp_m g)
            /\ (forall zy, In zy (concat g) -> fst zy <= grp_m g)
            /\ 0 <= grp_X g <= INR N1 /\ inv C1 R1 (grp_l g) (grp_X g) (grp_X g)).
  { intros g Hgi; destruct (Hg g Hgi) as [Hne [HBg [HTg HNg]]].
    set (z0 := hd (0, 0) (concat g)).
    assert (Hz0 : In z0 (concat g)) by (unfold z0; destruct (concat g); [congruence | left; reflexivity]).
    destruct (Hz z0 (Hzs g z0 Hgi Hz0)) as [F0 [Z0 _]]; pose proof (sp_Rabs_le_inv _ _ Z0).
    assert (Hok : items_ok (R * R) fst (fun _ => 1) (fun _ => 1) 1 0 1 (- Zmax) (2 * Zmax) (concat g)).
    { intros zy Hi; destruct (Hz zy (Hzs g zy Hgi Hi)) as [F [Hb _]]; pose proof (sp_Rabs_le_inv _ _ Hb).
      repeat split; try lra; [exact F |]; unfold inv; rewrite Rminus_diag_eq, Rabs_R0 by reflexivity; lra. }
    destruct (ce_run_gen (R * R) fst (fun _ => 1) (fun _ => 1) ts1 Dt1 Bt1 T1 N1 1 0 1 (- Zmax) (2 * Zmax) XK (fst z0)
                Hts1 ltac:(lra) ltac:(lra) ltac:(lra) ltac:(lra) HXK ltac:(lra) g 0 [] (fst z0) 0 F0 ltac:(lra) ltac:(lra)
                ltac:(intros ? []) ltac:(cbn [length]; lia) ltac:(cbn [length]; lia) HBg Hok
                ltac:(unfold inv, ex_val; cbn [rsum map fold_right INR]; rewrite Rminus_0_r, Rabs_R0; nra))
      as [Fm [Hm0 [Hm [Hseen Hinv]]]].
    fold z0 in Fm, Hm0, Hm, Hseen, Hinv.
    change (ce_run (R * R) fst (fun _ => 1) ts1 (fst z0, 0) g) with (grp_state g) in *.
    cbn [app length] in Hseen, Hinv; rewrite Nat.add_0_l in Hinv.
    fold (grp_m g) in *; fold (grp_l g) in *.
    change (ex_val (R * R) fst (fun _ => 1) (grp_m g) (concat g)) with (grp_X g) in Hinv.
    assert (HX : 0 <= grp_X g <= INR N1).
    { destruct (ex_val_bounds (R * R) fst (fun _ => 1) (grp_m g) (concat g) 1) as [A1 A2];
        [intros zy Hi; split; [lra | apply Hseen, Hi] |].
      split; [exact A1 | eapply Rle_trans; [exact A2 |]; rewrite Rmult_1_r; apply le_INR, HNg]. }
    split; [exact Fm | split; [exact Hm | split; [| split; [intros zy Hi; apply Hseen, Hi | split; [exact HX |]]]]].
    - unfold grp_m, grp_state; apply (ce_run_P (R * R) fst (fun _ => 1) (fun x => exists zy, In zy (concat g) /\ fst zy = x)).
      + exists z0; split; [exact Hz0 | reflexivity].
      + intros zy Hi; exists zy; split; [exact Hi | reflexivity].
    - refine (ce_inv_mono _ _ _ _ _ _ _ _ _ _ Hinv); [lra | |].
      + unfold C1; apply Rmult_le_compat; [apply Rmult_le_pos; [lra | apply pow_le; lra] | left; apply exp_pos | |].
        * apply Rmult_le_compat_l; [lra | apply Rle_pow; [lra | exact HTg]].
        * eapply Rle_trans; [| exact HXK]; apply ose_exp_le, Rmult_le_compat_l; lra.
      + unfold R1; apply Rmult_le_compat_r; [lra |]; apply Rmult_le_compat; [apply pos_INR | apply pow_le; lra | apply le_INR, HTg |].
        apply Rle_pow; [lra | exact HTg]. }
  (* the merge *)
  destruct (Hgrp g0 H0) as [Fg0 [Hg0r _]].
  assert (Hok2 : items_ok (list (list (R * R))) grp_m grp_l grp_X C1 R1 (INR N1) (- Zmax) (2 * Zmax) (concat tiles2)).
  { intros g Hgi; destruct (Hgrp g Hgi) as [F [Hr [_ [_ [HX Hi]]]]]; repeat split; tauto. }
  destruct (ce_run_gen (list (list (R * R))) grp_m grp_l grp_X ts2 Dt2 Bt2 T2 Nn C1 R1 (INR N1) (- Zmax) (2 * Zmax) XK
              (grp_m g0) Hts2 HC1 HR1 (pos_INR N1) ltac:(lra) HXK Hg0r tiles2 0 [] (grp_m g0) 0 Fg0 ltac:(lra) Hg0r
              ltac:(intros ? []) ltac:(cbn [length]; lia) ltac:(cbn [length]; lia) HB2 Hok2
              ltac:(unfold inv, ex_val; cbn [rsum map fold_right INR]; rewrite Rminus_0_r, Rabs_R0, Rmult_0_r, !Rmult_0_l;
                    lra))
    as [Fm [Hm0 [Hm [Hseen Hinv]]]].
  fold st in Fm, Hm0, Hm, Hseen, Hinv; cbn [app length] in Hseen, Hinv; rewrite Nat.add_0_l in Hinv.
  rewrite grp_val in Hinv; fold zs in Hinv.
  destruct (ce_consts Dt2 Bt2 T2 Nn C1 R1 (INR N1) (- Zmax) (2 * Zmax) XK (grp_m g0) HC1 HR1 (pos_INR N1)
              ltac:(lra) HXK Hg0r) as [_ [HH2 [_ [Ha2 [Hb2 _]]]]].
  assert (Fl : fmt (snd st)) by (unfold st; apply ce_run_l_fmt, ff_fmt_0).
  apply (ce_lse_finish zs (fst st) (snd st) C2 R2 Zmax delta LN NL (length zs)); auto.
  - destruct (ce_run_P (list (list (R * R))) grp_m grp_l (fun x => exists g, In g (concat tiles2) /\ grp_m g = x)
                ts2 tiles2 (grp_m g0) 0 ltac:(exists g0; split; [exact H0 | reflexivity])
                ltac:(intros g Hgi; exists g; split; [exact Hgi | reflexivity])) as [g [Hgi Eg]].
    destruct (Hgrp g Hgi) as [_ [_ [[zy [Hzy Ezy]] _]]].
    exists zy; split; [apply (Hzs g zy Hgi Hzy) | unfold st; rewrite <- Eg; exact Ezy].
  - intros zy Hi; unfold zs in Hi; apply in_concat in Hi; destruct Hi as [cg [Hcg Hzy]].
    apply in_map_iff in Hcg; destruct Hcg as [g [<- Hgi]].
    destruct (Hgrp g Hgi) as [_ [_ [_ [Hle _]]]].
    eapply Rle_trans; [apply Hle, Hzy | apply Hseen, Hgi].
  - intros zy Hi; destruct (Hz zy Hi) as [_ H]; exact H.
  - unfold C2; apply ce_one_le_mult; [apply ce_one_le_mult; [exact HH2 | apply pow_R1_Rle, HQ] | exact HX1].
  - unfold R2; apply Rmult_le_pos; [apply Rmult_le_pos; [apply pos_INR | apply pow_le; lra] | lra].
  - unfold inv in Hinv.
    set (G := ce_H u ue XK C1 Dt2 * ce_Q u ue ^ length tiles2 * exp (u * (fst st - grp_m g0))) in Hinv.
    assert (HG : G <= C2).
    { unfold G, C2; apply Rmult_le_compat; [apply Rmult_le_pos; [lra | apply pow_le; lra] | left; apply exp_pos | |].
      - apply Rmult_le_compat_l; [lra | apply Rle_pow; [lra | exact HT2]].
      - eapply Rle_trans; [| exact HXK]; apply ose_exp_le, Rmult_le_compat_l; lra. }
    assert (HRk : INR (length tiles2) * ce_a u ue ee XK ^ length tiles2 * ce_b u ue ee ea XK C1 R1 (INR N1) Dt2 Bt2 T2 Nn <= R2).
    { unfold R2; apply Rmult_le_compat_r; [lra |]; apply Rmult_le_compat; [apply pos_INR | apply pow_le; lra | apply le_INR, HT2 |].
      apply Rle_pow; [lra | exact HT2]. }
    assert (0 <= logit_val (fst st) zs).
    { unfold logit_val; destruct (ex_val_bounds (R * R) fst (fun _ => 1) (fst st) zs 1) as [A1 _]; [| exact A1].
      intros zy Hi; split; [lra |].
      unfold zs in Hi; apply in_concat in Hi; destruct Hi as [cg [Hcg Hzy]].
      apply in_map_iff in Hcg; destruct Hcg as [g [<- Hgi]].
      destruct (Hgrp g Hgi) as [_ [_ [_ [Hle _]]]].
      eapply Rle_trans; [apply Hle, Hzy | apply Hseen, Hgi]. }
    assert ((G - 1) * logit_val (fst st) zs <= (C2 - 1) * logit_val (fst st) zs) by (apply Rmult_le_compat_r; lra).
    unfold logit_val in *; lra.
Qed.

End TwoLevel.
(** [sum_ok] is met by the tile sums BlockedSum.v models: a reduction tree of depth at
    most [Dt] over the tile ([tl.sum]), and left to right ([Dt = Bt - 1]).  A tree has
    at least one leaf, so the empty tile's tree is the leaf [0] (an exact zero sum);
    the premise [leaves (shape xs) = xs] for every [xs] of length at most [Bt], the
    empty one included, would be unsatisfiable. *)
Theorem sum_ok_tree : forall (shape : list R -> stree) Dt Bt,
  (forall xs, xs <> [] -> (length xs <= Bt)%nat -> leaves (shape xs) = xs /\ (depth (shape xs) <= Dt)%nat) ->
  shape [] = Leaf 0 ->
  sum_ok (fun xs => tree_sum A_ (shape xs)) Dt Bt.
Proof.
  intros shape Dt Bt Hs H0 xs Hl Hf.
  destruct xs as [| x xs'].
  - rewrite H0; cbn [tree_sum]; split; [apply ff_fmt_0 |].
    unfold rsum; simpl; rewrite Rminus_0_r, Rabs_R0; lra.
  - set (xs := x :: xs') in *.
    destruct (Hs xs ltac:(discriminate) Hl) as [Hlv Hd].
    assert (Ft : Forall fmt (leaves (shape xs))) by (rewrite Hlv; exact Hf).
    destruct (tree_sum_ok A_ (shape xs) Ft) as [F1 C1]; rewrite Hlv in C1.
    split; [exact F1 |].
    pose proof (close_mono _ _ _ _ _ (abs_sum_nonneg xs) (pow_u_mono A_ _ _ Hd) C1) as C.
    exact C.
Qed.

Theorem sum_ok_tile_sum : forall Bt, sum_ok (tile_sum A_) (Bt - 1) Bt.
Proof.
  intros Bt xs Hl Hf; split; [apply fmt_tile_sum |].
  pose proof (close_mono _ _ _ _ _ (abs_sum_nonneg xs) (pow_u_mono A_ (length xs - 1) (Bt - 1) ltac:(lia))
                (tile_sum_close A_ xs Hf)) as C.
  exact C.
Qed.

End CeLse.
