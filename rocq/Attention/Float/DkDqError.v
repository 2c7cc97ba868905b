(** * The attention backward's dK and dQ in mixed precision: a-posteriori bounds.

    Both backward kernels of kernels/ojas_kernels/attention_backward.py compute, for every visible
    (query i, key j) pair they visit,
      s2   = rnd (dot (q_i, k_j) * qk_scale)     -- [score2], as the forward
      p    = exp2 (rnd (s2 - lse2_i))            -- 0 where masked
      dp   = dot (dO_i, v_j)                     -- fp32 dot over the value dim
      ds   = rnd (p * rnd (dp - delta_i))        -- fp32
    with [lse2_i = rnd (lse_i * log2 e)] and [delta_i] the fp32 [rowsum (dO * O)]
    of the dQ kernel (from the STORED forward output O), then
      dK_je = rnd_s (rnd (scale' * sum_i rnd (rnd_s (ds_ij) * q_ie)))
                 ([_dkdv_tile], [_bwd_dkdv_kernel]: the query tiles of every
                  query head of the key's group, summed blocked in fp32)
      dQ_ie = rnd_s (rnd (scale' * sum_j rnd (rnd_s (ds_ij) * k_je)))
                 ([_dq_tile], [_bwd_dq_kernel]: the key tiles, blocked)
    [ds] rounded to the operand dtype ([rnd_s]) before the product, each
    product rounded to fp32 (exact for 16-bit operands), [scale'] the fp32
    [scale], the result stored in the operand dtype.

    [grad_kernel] is that schedule for any item type (an item is one (i, j)
    pair seen from the output's side: for dK a query row, for dQ a key
    row), [dk_kernel] and [dq_kernel] are its two instances, with the
    kernels' operand orders ([score2 c k q_i] for the dK kernel's
    [dot (k, q^T)], [score2 c q k_j] for the dQ kernel's, [dp = dot (v_j, dO_i)]
    and [dot (dO_i, v_j)]: [blocked_dot] over the head / value dim, one tile,
    left to right).  The exact value is
      dK_je = scale * sum_i P_ij (dP_ij - D_i) q_ie,
      dQ_ie = scale * sum_j P_ij (dP_ij - D_i) k_je,
    [P_ij = exp (scale q_i.k_j - LSE_i)], [dP_ij = dO_i . v_j] (real dots)
    and [D_i] the real number the hypothesis [|delta_i - D_i| <= eD_i]
    names: the exact gradient has [D_i = dO_i . O_i] with the EXACT output
    [O_i]; [delta_close] bounds the kernel's [delta] against [dO_i . o_i] of
    the stored [o_i] (rounding only), [dot_R_perturb] adds
    [e sum_c |dO_ic|] when [|o_ic - O_ic| <= e] (the forward theorem,
    [attention_forward_error_masked], gives [e]); the caller composes them.
    With that [D_i] and the exact [LSE_i] the exact value is the gradient
    of the attention ([attention_backward_dK_is_derive],
    [attention_backward_dQ_is_derive], BackwardCorrect.v; GQA:
    [gqa_dK_is_derive], [gqa_dQ_is_derive], GroupedQuery.v).

    [grad_error] (and [dk_error], [dq_error]): with the score, lse and
    magnitude hypotheses of [dv_error], [|dp - dP| <= eP],
    [|delta - D| <= eD_x <= eDm], [|dP - D| <= Ym], [|w| <= W] ([w] = [q_ie]
    or [k_je]) and [|scale' - scale| <= ucs scale],
      |kernel - exact| <= (1 + us) (scale ((1 + u) (1 + ucs) eA
                                    + (u (1 + ucs) + ucs) S1) + ea) + us scale S1 + es,
      eA = (1 + g) (gA S1 + gB SR + n gc) + g S1,
      S1 = sum_x P_x |Y_x| |w_x|,  SR = sum_x P_x cR_x |w_x|,
      cR_x = (1 + u) (eP + eD_x) + ea,  Y_x = dP_x - D_x,
    [gA], [gB], [gc] the closed forms [grad_A], [grad_B], [grad_c] of
    [E = (1 + ue) X] ([X >= 2^((delta + Dl) / ln 2 + u Am + ea)] as in
    [dv_error]), [g = gamma u ((b - 1) + (t - 1))], [n] the number of
    items, [t] of tiles.  [S1] and [SR] are computed by the caller from the
    exact probabilities (a-posteriori).  Masked items are exact zeros;
    fully masked tiles are skipped exactly ([blocked_sum_skip_zero_tiles]).

    [grad_error_acc_with] (and [dk_error_acc], [dq_error_acc]): the tiles of
    [n] items accumulated by any accumulating dot model ([tl.dot (ds^T, q, dk)],
    NumeratorError.v's [acc_dot_model]): [eA = G (gA' S1 + gB' SR + n gc')
    + (G - 1) S1 + t G g_abs], [G = (1 + g_rel)^t], with [gacc_A], [gacc_B],
    [gacc_c] (the product inside the MMA is exact); on the H100
    [dk_error_tf32x3_op], [dq_error_tf32x3_op] (float32: 3xTF32 scores, [dp]
    and accumulation) and [dk_error_tc_op], [dq_error_tc_op] (16-bit).

    Not covered: in [grad_error] / the [_dot] theorems the order inside the
    MMAs and the MMA accumulating into [dk]/[dq] (modelled as
    [rnd (acc + tile sum)]; the [_acc] theorems take the kernel's), FMA
    contraction (in [s2 - lse2]), [tl.sum]'s padding zeros
    when [BLOCK_EV > Ev] in [delta_close] (its tree is over the [Ev]
    products), the error of [exp2] (a field of the model: an assumption
    for [ex2.approx]), overflow, and additive float masks.  No theorem
    here bounds the forward's saved [out] and [lse]: their errors are
    premises ([Dl], [eD]), met by the forward theorems or checked on the
    saved tensors by the caller; the one-line compositions (triangle
    inequalities) are done in Python (error_bounds.py, attention_error.py). *)

From Coq Require Import Reals ZArith List Lra Lia Arith.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.NoUnderflow FloatModel.DotError Attention.BackwardCorrect Attention.ScorePerturbation.
From Ojas Require Import FloatModel.MixedPrecision FloatModel.BlockedSum.
From Ojas Require Import FloatModel.Notations.
From Ojas Require Import Attention.Float.OnlineSoftmaxError Attention.Float.OnlineSoftmaxTile Attention.Float.ForwardError.
From Ojas Require Import Attention.Float.DvError Attention.Float.NumeratorError.
From Ojas Require Import FloatModel.TensorCoreSum FloatModel.Tf32Product.
Import ListNotations.
Open Scope R_scope.

Section Grad.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

Lemma ag_diff_le : forall a b c d ea' eb, Rabs (a - b) <= ea' -> Rabs (c - d) <= eb ->
  Rabs ((a - c) - (b - d)) <= ea' + eb.
Proof.
  intros a b c d ea' eb H1 H2.
  replace ((a - c) - (b - d)) with ((a - b) + - (c - d)) by ring.
  eapply Rle_trans; [apply Rabs_triang | rewrite Rabs_Ropp; lra].
Qed.

Lemma ag_abs_le : forall a b e, Rabs (a - b) <= e -> Rabs a <= Rabs b + e.
Proof.
  intros a b e H; replace a with ((a - b) + b) by ring.
  eapply Rle_trans; [apply Rabs_triang | lra].
Qed.

(** ** One term *)

(** [rnd (dp - delta)] against [dP - D]. *)
Lemma dsub_close : forall dp dP dl D eP eD,
  Rabs (dp - dP) <= eP -> Rabs (dl - D) <= eD ->
  Rabs (rnd (dp - dl) - (dP - D)) <= (1 + u) * (eP + eD) + u * Rabs (dP - D) + ea.
Proof.
  intros dp dP dl D eP eD H1 H2.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (ff_abs A_ (dp - dl)) as Hr.
  pose proof (ag_diff_le dp dP dl D eP eD H1 H2) as Hd.
  pose proof (ag_abs_le _ _ _ Hd) as Ha.
  replace (rnd (dp - dl) - (dP - D)) with ((rnd (dp - dl) - (dp - dl)) + ((dp - dl) - (dP - D))) by ring.
  eapply Rle_trans; [apply Rabs_triang |].
  assert (u * Rabs (dp - dl) <= u * (Rabs (dP - D) + (eP + eD))) by (apply Rmult_le_compat_l; lra).
  lra.
Qed.

(** [ds = rnd (p * r)] from a weight [p] within [(E - 1) P + ee] of [P > 0]
    and [r] within [eR] of [Y]. *)
Lemma ds_close : forall p P r Y E eR, 0 < P -> 1 <= E ->
  Rabs (p - P) <= (E - 1) * P + ee -> Rabs (r - Y) <= eR ->
  Rabs (rnd (p * r) - P * Y)
  <= ((1 + u) * E - 1) * (P * Rabs Y) + (1 + u) * E * (P * eR) + (1 + u) * ee * (Rabs Y + eR) + ea.
Proof.
  intros p P r Y E eR HP HE Hp Hr.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (mp_eta_e_nonneg M) as Hee.
  pose proof (ff_abs A_ (p * r)) as Hq; rewrite Rabs_mult in Hq.
  assert (HeR : 0 <= eR) by (eapply Rle_trans; [apply Rabs_pos | exact Hr]).
  assert (Hpa : Rabs p <= E * P + ee).
  { pose proof (ag_abs_le _ _ _ Hp); rewrite (Rabs_right P) in H by lra; lra. }
  pose proof (ag_abs_le _ _ _ Hr) as Hra.
  pose proof (Rabs_pos r); pose proof (Rabs_pos p); pose proof (Rabs_pos Y).
  replace (rnd (p * r) - P * Y) with ((rnd (p * r) - p * r) + ((p - P) * r + P * (r - Y))) by ring.
  eapply Rle_trans; [apply Rabs_triang |].
  eapply Rle_trans; [apply Rplus_le_compat_l, Rabs_triang |].
  rewrite !Rabs_mult, (Rabs_right P) by lra.
  assert (E1 : Rabs p * Rabs r <= (E * P + ee) * (Rabs Y + eR)) by (apply Rmult_le_compat; lra).
  assert (E2 : Rabs (p - P) * Rabs r <= ((E - 1) * P + ee) * (Rabs Y + eR))
    by (apply Rmult_le_compat; try lra; apply Rabs_pos).
  assert (E3 : P * Rabs (r - Y) <= P * eR) by (apply Rmult_le_compat_l; lra).
  assert (E4 : u * (Rabs p * Rabs r) <= u * ((E * P + ee) * (Rabs Y + eR))) by (apply Rmult_le_compat_l; lra).
  nra.
Qed.

(** A value within [e] of [A], rounded to the storage format, times [w],
    rounded to the accumulation format. *)
Lemma store_mul_close : forall a A w e, Rabs (a - A) <= e ->
  Rabs (rnd (ff_rnd S_ a * w) - A * w) <= ((1 + u) * ((1 + us) * e + us * Rabs A + es) + u * Rabs A) * Rabs w + ea.
Proof.
  intros a A w e H.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (ff_u_nonneg S_) as Hus.
  pose proof (ff_eta_nonneg S_) as Hes.
  pose proof (ff_abs S_ a) as Hs.
  pose proof (ag_abs_le _ _ _ H) as Ha.
  set (qa := ff_rnd S_ a) in *.
  assert (Hq : Rabs (qa - A) <= (1 + us) * e + us * Rabs A + es).
  { replace (qa - A) with ((qa - a) + (a - A)) by ring; eapply Rle_trans; [apply Rabs_triang |].
    assert (us * Rabs a <= us * (Rabs A + e)) by (apply Rmult_le_compat_l; lra). lra. }
  pose proof (ag_abs_le _ _ _ Hq) as Hqa.
  pose proof (ff_abs A_ (qa * w)) as Hr; rewrite Rabs_mult in Hr.
  replace (rnd (qa * w) - A * w) with ((rnd (qa * w) - qa * w) + (qa - A) * w) by ring.
  eapply Rle_trans; [apply Rabs_triang |]; rewrite Rabs_mult.
  pose proof (Rabs_pos w); pose proof (Rabs_pos qa); pose proof (Rabs_pos (qa - A)).
  assert (u * (Rabs qa * Rabs w) <= u * ((Rabs A + ((1 + us) * e + us * Rabs A + es)) * Rabs w))
    by (apply Rmult_le_compat_l; [lra | apply Rmult_le_compat_r; lra]).
  assert (Rabs (qa - A) * Rabs w <= ((1 + us) * e + us * Rabs A + es) * Rabs w) by (apply Rmult_le_compat_r; lra).
  nra.
Qed.

(** ** The closed forms *)

Definition grad_A (E : R) : R := (1 + u) * (1 + us) * ((1 + u) * (1 + u) * E - 1) + (1 + u) * us + u.
Definition grad_B (E : R) : R := (1 + u) * (1 + us) * ((1 + u) * E).
Definition grad_c (E Ym cRm W : R) : R :=
  ((1 + u) * (1 + us) * ((1 + u) * ee * ((1 + u) * Ym + cRm) + ea) + (1 + u) * es) * W + ea.

Definition grad_eA (g E S1 SR n gc : R) : R := (1 + g) * (grad_A E * S1 + grad_B E * SR + n * gc) + g * S1.
Definition grad_bound (scale ucs eA S1 : R) : R :=
  (1 + us) * (scale * ((1 + u) * (1 + ucs) * eA + (u * (1 + ucs) + ucs) * S1) + ea) + us * scale * S1 + es.

(** The closed forms with an accumulating dot ([grad_error_acc_with]): the
    stored [ds] times [w] is an exact product inside the model's [tl.dot],
    so [grad_A], [grad_B], [grad_c] lose the product's rounding;
    [G = (1 + g_rel)^t] over [t] tiles, [ga] the model's [g_abs]. *)
Definition gacc_A (E : R) : R := (1 + us) * ((1 + u) * (1 + u) * E - 1) + us.
Definition gacc_B (E : R) : R := (1 + us) * ((1 + u) * E).
Definition gacc_c (E Ym cRm W : R) : R := ((1 + us) * ((1 + u) * ee * ((1 + u) * Ym + cRm) + ea) + es) * W.
Definition gacc_eA (G E S1 SR n gc t ga : R) : R :=
  G * (gacc_A E * S1 + gacc_B E * SR + n * gc) + (G - 1) * S1 + t * G * ga.

(** The last two steps: [rnd (acc * cs)] with [acc] within [eA] of [T]
    ([|T| <= S1]) and [cs] within [ucs scale] of [scale], stored. *)
Lemma scale_store_close : forall acc T S1 eA cs scale ucs,
  0 <= scale -> 0 <= ucs -> Rabs (cs - scale) <= ucs * scale ->
  Rabs T <= S1 -> Rabs (acc - T) <= eA ->
  Rabs (ff_rnd S_ (rnd (acc * cs)) - scale * T) <= grad_bound scale ucs eA S1.
Proof.
  intros acc T S1 eA cs scale ucs Hs Hucs Hc HT HA; unfold grad_bound.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (ff_u_nonneg S_) as Hus.
  pose proof (ff_abs A_ (acc * cs)) as Hr; rewrite Rabs_mult in Hr.
  assert (Hcs : Rabs cs <= (1 + ucs) * scale).
  { pose proof (ag_abs_le _ _ _ Hc); rewrite (Rabs_right scale) in H by lra; lra. }
  pose proof (ag_abs_le _ _ _ HA) as Hacc.
  assert (HeA : 0 <= eA) by (eapply Rle_trans; [apply Rabs_pos | exact HA]).
  pose proof (Rabs_pos acc); pose proof (Rabs_pos cs); pose proof (Rabs_pos T).
  set (z := rnd (acc * cs)) in *.
  assert (Hz : Rabs (z - scale * T) <= scale * ((1 + u) * (1 + ucs) * eA + (u * (1 + ucs) + ucs) * S1) + ea).
  { replace (z - scale * T) with ((z - acc * cs) + (cs * (acc - T) + T * (cs - scale))) by ring.
    eapply Rle_trans; [apply Rabs_triang |].
    eapply Rle_trans; [apply Rplus_le_compat_l, Rabs_triang |].
    rewrite !Rabs_mult.
    assert (Rabs acc * Rabs cs <= (Rabs T + eA) * ((1 + ucs) * scale)) by (apply Rmult_le_compat; lra).
    assert (u * (Rabs acc * Rabs cs) <= u * ((S1 + eA) * ((1 + ucs) * scale))).
    { apply Rmult_le_compat_l; [lra |]. eapply Rle_trans; [eassumption |].
      apply Rmult_le_compat_r; [nra | lra]. }
    assert (Rabs cs * Rabs (acc - T) <= (1 + ucs) * scale * eA)
      by (apply Rmult_le_compat; try apply Rabs_pos; lra).
    assert (Rabs T * Rabs (cs - scale) <= S1 * (ucs * scale)) by (apply Rmult_le_compat; try apply Rabs_pos; lra).
    lra. }
  pose proof (ff_abs S_ z) as Hst.
  pose proof (ag_abs_le _ _ _ Hz) as Hza.
  rewrite Rabs_mult, (Rabs_right scale) in Hza by lra.
  replace (ff_rnd S_ z - scale * T) with ((ff_rnd S_ z - z) + (z - scale * T)) by ring.
  eapply Rle_trans; [apply Rabs_triang |].
  assert (scale * Rabs T <= scale * S1) by (apply Rmult_le_compat_l; lra).
  assert (us * Rabs z <= us * (scale * S1 + (scale * ((1 + u) * (1 + ucs) * eA + (u * (1 + ucs) + ucs) * S1) + ea)))
    by (apply Rmult_le_compat_l; lra).
  nra.
Qed.

(** ** The schedule, for any item type *)

Section GenericWith.

Variable T : Type.
(** The scores' dot (ForwardError.v, PART B'). *)
Variable sdot : list R -> list R -> R.
(** The two vectors of the item's score, its [lse2], the computed [dp],
    the [delta] of its row and the multiplier [w] ([q_ie] or [k_je]). *)
Variables (qv kv : T -> list R) (l2 dp dl w : T -> R).

Definition grad_p_with (c : R) (x : T) : R := exp2 (rnd (score2_with A_ sdot c (qv x) (kv x) - l2 x)).
Definition grad_ds_with (c : R) (x : T) : R := rnd (grad_p_with c x * rnd (dp x - dl x)).
Definition grad_term_with (vis : T -> bool) (c : R) (x : T) : R :=
  if vis x then rnd (ff_rnd S_ (grad_ds_with c x) * w x) else 0.

(** The kernel's output coordinate: the tiles summed blocked, times the
    fp32 [cs], stored. *)
Definition grad_kernel_with (vis : T -> bool) (c cs : R) (tiles : list (list T)) : R :=
  ff_rnd S_ (rnd (blocked_sum A_ (map (map (grad_term_with vis c)) tiles) * cs)).

(** The computed [ds = rnd (p * rnd (dp - delta))] against [P (dP - D)]. *)
Lemma grad_ds_close_with : forall c scale (x : T) (Lx dPx Dx eDx : R) delta Dl Am X eP eDm Ym,
  Rabs (score2_with A_ sdot c (qv x) (kv x) * ln 2 - scale * dot_R (qv x) (kv x)) <= delta ->
  Rabs (l2 x * ln 2 - Lx) <= Dl ->
  Rabs (score2_with A_ sdot c (qv x) (kv x) - l2 x) <= Am ->
  Rpower 2 ((delta + Dl) / ln 2 + u * Am + ea) <= X ->
  Rabs (dp x - dPx) <= eP -> Rabs (dl x - Dx) <= eDx -> eDx <= eDm ->
  Rabs (dPx - Dx) <= Ym ->
  let P := exp (scale * dot_R (qv x) (kv x) - Lx) in
  let E := (1 + ue) * X in
  Rabs (grad_ds_with c x - P * (dPx - Dx))
  <= ((1 + u) * (1 + u) * E - 1) * (P * Rabs (dPx - Dx)) + (1 + u) * E * (P * ((1 + u) * (eP + eDx) + ea))
     + ((1 + u) * ee * ((1 + u) * Ym + ((1 + u) * (eP + eDm) + ea)) + ea).
Proof.
  intros c scale x Lx dPx Dx eDx delta Dl Am X eP eDm Ym Hs Hl Ha HX Hp Hd HdD HY P E.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (ff_u_nonneg S_) as Hus.
  pose proof (ff_eta_nonneg A_) as Hea; pose proof (ff_eta_nonneg S_) as Hes.
  pose proof (mp_ue_nonneg M) as Hue; pose proof (mp_eta_e_nonneg M) as Hee.
  pose proof (dv_X_ge_1 M delta Dl Am X (Rle_trans _ _ _ (Rabs_pos _) Hs) (Rle_trans _ _ _ (Rabs_pos _) Hl)
                (Rle_trans _ _ _ (Rabs_pos _) Ha) HX) as HX1.
  assert (HE : 1 <= E) by (unfold E; nra).
  assert (HP : 0 < P) by apply exp_pos.
  pose proof (dv_weight_close_with M sdot c (kv x) (qv x, (0, l2 x)) scale Lx delta Dl Am X Hs Hl Ha HX) as Hw.
  fold P in Hw; fold E in Hw; unfold dv_p_with in Hw; cbn [fst snd] in Hw.
  pose proof (dsub_close (dp x) dPx (dl x) Dx eP eDx Hp Hd) as Hr.
  set (Y := dPx - Dx) in *.
  set (cR := (1 + u) * (eP + eDx) + ea).
  set (cRm := (1 + u) * (eP + eDm) + ea).
  assert (HeP : 0 <= eP) by (eapply Rle_trans; [apply Rabs_pos | exact Hp]).
  assert (HeD : 0 <= eDx) by (eapply Rle_trans; [apply Rabs_pos | exact Hd]).
  assert (HcR : 0 <= cR) by (unfold cR; nra).
  assert (HcRm : cR <= cRm) by (unfold cR, cRm; nra).
  pose proof (ds_close _ _ _ _ E _ HP HE Hw Hr) as Hds.
  pose proof (Rabs_pos Y) as HY0.
  unfold grad_ds_with, grad_p_with; eapply Rle_trans; [exact Hds |].
  assert (Rabs Y + ((1 + u) * (eP + eDx) + u * Rabs Y + ea) <= (1 + u) * Ym + cRm)
    by (fold cR; unfold cRm in *; nra).
  assert ((1 + u) * ee * (Rabs Y + ((1 + u) * (eP + eDx) + u * Rabs Y + ea)) <= (1 + u) * ee * ((1 + u) * Ym + cRm))
    by (apply Rmult_le_compat_l; [nra | lra]).
  assert ((1 + u) * E * (P * ((1 + u) * (eP + eDx) + u * Rabs Y + ea))
          = (1 + u) * E * (P * cR) + (1 + u) * E * u * (P * Rabs Y)) by (unfold cR; ring).
  fold cR; nra.
Qed.

Lemma grad_term_close_with : forall vis c scale (x : T) (Lx dPx Dx eDx : R) delta Dl Am X eP eDm Ym W,
  vis x = true ->
  Rabs (score2_with A_ sdot c (qv x) (kv x) * ln 2 - scale * dot_R (qv x) (kv x)) <= delta ->
  Rabs (l2 x * ln 2 - Lx) <= Dl ->
  Rabs (score2_with A_ sdot c (qv x) (kv x) - l2 x) <= Am ->
  Rpower 2 ((delta + Dl) / ln 2 + u * Am + ea) <= X ->
  Rabs (dp x - dPx) <= eP -> Rabs (dl x - Dx) <= eDx -> eDx <= eDm ->
  Rabs (dPx - Dx) <= Ym -> Rabs (w x) <= W ->
  let P := exp (scale * dot_R (qv x) (kv x) - Lx) in
  let E := (1 + ue) * X in
  Rabs (grad_term_with vis c x - P * (dPx - Dx) * w x)
  <= grad_A E * (P * Rabs (dPx - Dx) * Rabs (w x)) + grad_B E * (P * ((1 + u) * (eP + eDx) + ea) * Rabs (w x))
     + grad_c E Ym ((1 + u) * (eP + eDm) + ea) W.
Proof.
  intros vis c scale x Lx dPx Dx eDx delta Dl Am X eP eDm Ym W Hv Hs Hl Ha HX Hp Hd HdD HY HW P E.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (ff_u_nonneg S_) as Hus.
  pose proof (ff_eta_nonneg A_) as Hea; pose proof (ff_eta_nonneg S_) as Hes.
  pose proof (mp_ue_nonneg M) as Hue; pose proof (mp_eta_e_nonneg M) as Hee.
  pose proof (dv_X_ge_1 M delta Dl Am X (Rle_trans _ _ _ (Rabs_pos _) Hs) (Rle_trans _ _ _ (Rabs_pos _) Hl)
                (Rle_trans _ _ _ (Rabs_pos _) Ha) HX) as HX1.
  assert (HE : 1 <= E) by (unfold E; nra).
  assert (HP : 0 < P) by apply exp_pos.
  pose proof (grad_ds_close_with c scale x Lx dPx Dx eDx delta Dl Am X eP eDm Ym Hs Hl Ha HX Hp Hd HdD HY) as Hds'.
  fold P E in Hds'.
  set (Y := dPx - Dx) in *.
  set (cR := (1 + u) * (eP + eDx) + ea) in *.
  set (cRm := (1 + u) * (eP + eDm) + ea) in *.
  assert (HeP : 0 <= eP) by (eapply Rle_trans; [apply Rabs_pos | exact Hp]).
  assert (HeD : 0 <= eDx) by (eapply Rle_trans; [apply Rabs_pos | exact Hd]).
  assert (HcR : 0 <= cR) by (unfold cR; nra).
  assert (HcRm : cR <= cRm) by (unfold cR, cRm; nra).
  set (eds := ((1 + u) * (1 + u) * E - 1) * (P * Rabs Y) + (1 + u) * E * (P * cR)
              + ((1 + u) * ee * ((1 + u) * Ym + cRm) + ea)) in *.
  pose proof (Rabs_pos Y) as HY0.
  pose proof (store_mul_close _ _ (w x) eds Hds') as Ht.
  unfold grad_term_with; rewrite Hv; unfold grad_ds_with.
  eapply Rle_trans; [exact Ht |].
  rewrite Rabs_mult, (Rabs_right P) by lra.
  pose proof (Rabs_pos (w x)) as Hw0.
  unfold eds, grad_A, grad_B, grad_c; fold cR.
  set (aw := Rabs (w x)) in *.
  assert (HPY : 0 <= P * Rabs Y) by nra.
  assert (Hc0 : 0 <= (1 + u) * (1 + us) * ((1 + u) * ee * ((1 + u) * Ym + cRm) + ea) + (1 + u) * es).
  { assert (0 <= (1 + u) * Ym + cRm) by (pose proof (Rabs_pos Y); unfold cRm in *; nra).
    assert (0 <= (1 + u) * ee * ((1 + u) * Ym + cRm)) by (apply Rmult_le_pos; nra).
    apply Rplus_le_le_0_compat; apply Rmult_le_pos; nra. }
  assert (((1 + u) * (1 + us) * ((1 + u) * ee * ((1 + u) * Ym + cRm) + ea) + (1 + u) * es) * aw
          <= ((1 + u) * (1 + us) * ((1 + u) * ee * ((1 + u) * Ym + cRm) + ea) + (1 + u) * es) * W)
    by (apply Rmult_le_compat_l; lra).
  nra.
Qed.

(** The schedule with the scores' dot [sdot]: [grad_error] is its blocked instance. *)
Theorem grad_error_with : forall vis c cs scale ucs (tiles : list (list T)) (Lx dPx Dx eD : T -> R)
    delta Dl Am X eP eDm Ym W b,
  0 <= scale -> 0 <= ucs -> Rabs (cs - scale) <= ucs * scale ->
  0 <= eP -> 0 <= eDm -> 0 <= Ym -> 0 <= W ->
  Forall (fun tl => (length tl <= b)%nat) tiles ->
  INR ((b - 1) + (length tiles - 1)) * u < 1 ->
  Rpower 2 ((delta + Dl) / ln 2 + u * Am + ea) <= X ->
  (forall x, In x (concat tiles) -> vis x = true ->
     Rabs (score2_with A_ sdot c (qv x) (kv x) * ln 2 - scale * dot_R (qv x) (kv x)) <= delta
     /\ Rabs (l2 x * ln 2 - Lx x) <= Dl
     /\ Rabs (score2_with A_ sdot c (qv x) (kv x) - l2 x) <= Am
     /\ Rabs (dp x - dPx x) <= eP
     /\ Rabs (dl x - Dx x) <= eD x /\ eD x <= eDm
     /\ Rabs (dPx x - Dx x) <= Ym /\ Rabs (w x) <= W) ->
  let E := (1 + ue) * X in
  let g := gamma u ((b - 1) + (length tiles - 1)) in
  let Pr := fun x => exp (scale * dot_R (qv x) (kv x) - Lx x) in
  let S1 := rsum (map (fun x => if vis x then Pr x * Rabs (dPx x - Dx x) * Rabs (w x) else 0) (concat tiles)) in
  let SR := rsum (map (fun x => if vis x then Pr x * ((1 + u) * (eP + eD x) + ea) * Rabs (w x) else 0)
                      (concat tiles)) in
  let n := INR (length (concat tiles)) in
  let eA := grad_eA g E S1 SR n (grad_c E Ym ((1 + u) * (eP + eDm) + ea) W) in
  Rabs (grad_kernel_with vis c cs tiles
        - scale * rsum (map (fun x => if vis x then Pr x * (dPx x - Dx x) * w x else 0) (concat tiles)))
  <= grad_bound scale ucs eA S1.
Proof.
  intros vis c cs scale ucs tiles Lx dPx Dx eD delta Dl Am X eP eDm Ym W b
    Hs Hucs Hc HeP HeDm HYm HW0 HBt Hg HX Hx E g Pr S1 SR n eA.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (ff_eta_nonneg A_) as Hea.
  pose proof (ff_u_nonneg S_) as Hus; pose proof (ff_eta_nonneg S_) as Hes.
  pose proof (mp_ue_nonneg M) as Hue; pose proof (mp_eta_e_nonneg M) as Hee.
  set (xs := concat tiles) in *.
  set (ys := concat (map (map (grad_term_with vis c)) tiles)).
  assert (Eys : ys = map (grad_term_with vis c) xs) by (unfold ys, xs; rewrite <- concat_map; reflexivity).
  assert (Hg0 : 0 <= g) by (apply gamma_nonneg with (A := A_); exact Hg).
  assert (HB : Rabs (blocked_sum A_ (map (map (grad_term_with vis c)) tiles) - rsum ys) <= g * rsum (map Rabs ys)).
  { unfold ys, g.
    replace (length tiles) with (length (map (map (grad_term_with vis c)) tiles)) by apply map_length.
    apply blocked_sum_error_bound.
    - apply Forall_forall; intros tl Htl; apply in_map_iff in Htl; destruct Htl as [tl' [<- Htl']].
      rewrite map_length; exact (proj1 (Forall_forall _ _) HBt tl' Htl').
    - apply Forall_forall; intros tl Htl; apply in_map_iff in Htl; destruct Htl as [tl' [<- _]].
      apply Forall_forall; intros y Hy; apply in_map_iff in Hy; destruct Hy as [x [<- _]].
      unfold grad_term_with; destruct (vis x); [apply ff_rnd_fmt | apply ff_fmt_0].
    - rewrite map_length; exact Hg. }
  rewrite Eys in HB.
  set (gc := grad_c E Ym ((1 + u) * (eP + eDm) + ea) W) in *.
  set (h1 := fun x => if vis x then Pr x * Rabs (dPx x - Dx x) * Rabs (w x) else 0).
  set (h2 := fun x => if vis x then Pr x * ((1 + u) * (eP + eD x) + ea) * Rabs (w x) else 0).
  set (Pd := fun x => if vis x then Pr x * (dPx x - Dx x) * w x else 0).
  set (gA := grad_A E) in *; set (gB := grad_B E) in *.
  assert (Hgc : 0 <= gc).
  { unfold gc, grad_c.
    assert (0 <= (1 + u) * ee * ((1 + u) * Ym + ((1 + u) * (eP + eDm) + ea))) by (apply Rmult_le_pos; nra).
    assert (0 <= (1 + u) * (1 + us) * ((1 + u) * ee * ((1 + u) * Ym + ((1 + u) * (eP + eDm) + ea)) + ea))
      by (apply Rmult_le_pos; nra).
    assert (0 <= (1 + u) * es) by nra.
    assert (0 <= ((1 + u) * (1 + us) * ((1 + u) * ee * ((1 + u) * Ym + ((1 + u) * (eP + eDm) + ea)) + ea)
                  + (1 + u) * es) * W) by (apply Rmult_le_pos; lra).
    lra. }
  assert (Hterm : forall x, In x xs ->
            Rabs (grad_term_with vis c x - Pd x) <= (gA * h1 x + gB * h2 x) + gc).
  { intros x Hxs; unfold Pd, h1, h2; destruct (vis x) eqn:Ev.
    - destruct (Hx x Hxs Ev) as [H1 [H2 [H3 [H4 [H5 [H6 [H7 H8]]]]]]].
      exact (grad_term_close_with vis c scale x (Lx x) (dPx x) (Dx x) (eD x) delta Dl Am X eP eDm Ym W
               Ev H1 H2 H3 HX H4 H5 H6 H7 H8).
    - unfold grad_term_with; rewrite Ev, Rminus_0_r, Rabs_R0, !Rmult_0_r; lra. }
  destruct (sum_terms_close xs (grad_term_with vis c) Pd (fun x => gA * h1 x + gB * h2 x) gc Hterm) as [Hs1 Hs2].
  assert (EH : rsum (map (fun x => gA * h1 x + gB * h2 x) xs) = gA * S1 + gB * SR).
  { rewrite rsum_map_plus, !rsum_map_scal_l; reflexivity. }
  assert (EPd : rsum (map (fun x => Rabs (Pd x)) xs) = S1).
  { unfold S1; apply rsum_map_ext; intros x _; unfold Pd; destruct (vis x).
    - rewrite !Rabs_mult, (Rabs_right (Pr x)) by (left; apply exp_pos); reflexivity.
    - apply Rabs_R0. }
  rewrite EH in Hs1, Hs2; rewrite EPd in Hs2; fold n in Hs1, Hs2.
  assert (HPs : Rabs (rsum (map Pd xs)) <= S1) by (rewrite <- EPd; apply bw_rsum_abs).
  assert (HA : Rabs (blocked_sum A_ (map (map (grad_term_with vis c)) tiles) - rsum (map Pd xs)) <= eA).
  { replace (blocked_sum A_ (map (map (grad_term_with vis c)) tiles) - rsum (map Pd xs))
      with ((blocked_sum A_ (map (map (grad_term_with vis c)) tiles) - rsum (map (grad_term_with vis c) xs))
            + (rsum (map (grad_term_with vis c) xs) - rsum (map Pd xs))) by ring.
    eapply Rle_trans; [apply Rabs_triang |].
    assert (g * rsum (map Rabs (map (grad_term_with vis c) xs)) <= g * (S1 + (gA * S1 + gB * SR) + n * gc))
      by (apply Rmult_le_compat_l; lra).
    unfold eA, grad_eA; fold gA gB gc; lra. }
  exact (scale_store_close _ _ S1 eA cs scale ucs Hs Hucs Hc HPs HA).
Qed.

(** The output coordinate with the tiles accumulated by [tl.dot (ds^T, w, acc)]
    of any accumulating dot model (NumeratorError.v's [acc_dot_model]), tiles
    of [n] items, then [rnd (acc * cs)] stored. *)
Definition grad_w_with (vis : T -> bool) (c : R) (x : T) : R :=
  if vis x then ff_rnd S_ (grad_ds_with c x) else 0.

Definition grad_kernel_acc_with (accf : R -> list R -> list R -> R) (vis : T -> bool) (c cs : R)
    (tiles : list (list T)) : R :=
  ff_rnd S_ (rnd (fold_left (fun acc ab => accf acc (fst ab) (snd ab))
                    (map (fun tl => (map (grad_w_with vis c) tl, map w tl)) tiles) 0 * cs)).

Theorem grad_error_acc_with : forall accf n g_rel g_abs vis c cs scale ucs (tiles : list (list T)) (Lx dPx Dx eD : T -> R)
    delta Dl Am X eP eDm Ym W,
  acc_dot_model accf n g_rel g_abs -> Forall (fun tl => length tl = n) tiles ->
  0 <= scale -> 0 <= ucs -> Rabs (cs - scale) <= ucs * scale ->
  0 <= eP -> 0 <= eDm -> 0 <= Ym -> 0 <= W ->
  Rpower 2 ((delta + Dl) / ln 2 + u * Am + ea) <= X ->
  (forall x, In x (concat tiles) -> vis x = true ->
     Rabs (score2_with A_ sdot c (qv x) (kv x) * ln 2 - scale * dot_R (qv x) (kv x)) <= delta
     /\ Rabs (l2 x * ln 2 - Lx x) <= Dl
     /\ Rabs (score2_with A_ sdot c (qv x) (kv x) - l2 x) <= Am
     /\ Rabs (dp x - dPx x) <= eP
     /\ Rabs (dl x - Dx x) <= eD x /\ eD x <= eDm
     /\ Rabs (dPx x - Dx x) <= Ym /\ Rabs (w x) <= W) ->
  let E := (1 + ue) * X in
  let G := (1 + g_rel) ^ length tiles in
  let Pr := fun x => exp (scale * dot_R (qv x) (kv x) - Lx x) in
  let S1 := rsum (map (fun x => if vis x then Pr x * Rabs (dPx x - Dx x) * Rabs (w x) else 0) (concat tiles)) in
  let SR := rsum (map (fun x => if vis x then Pr x * ((1 + u) * (eP + eD x) + ea) * Rabs (w x) else 0)
                      (concat tiles)) in
  let eA := gacc_eA G E S1 SR (INR (length (concat tiles))) (gacc_c E Ym ((1 + u) * (eP + eDm) + ea) W)
                    (INR (length tiles)) g_abs in
  Rabs (grad_kernel_acc_with accf vis c cs tiles
        - scale * rsum (map (fun x => if vis x then Pr x * (dPx x - Dx x) * w x else 0) (concat tiles)))
  <= grad_bound scale ucs eA S1.
Proof.
  intros accf n g ga vis c cs scale ucs tiles Lx dPx Dx eD delta Dl Am X eP eDm Ym W
    Hm Hn Hs Hucs Hc HeP HeDm HYm HW0 HX Hx E G Pr S1 SR eA.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (ff_eta_nonneg A_) as Hea.
  pose proof (ff_u_nonneg S_) as Hus; pose proof (ff_eta_nonneg S_) as Hes.
  pose proof (mp_ue_nonneg M) as Hue; pose proof (mp_eta_e_nonneg M) as Hee.
  pose proof (adm_rel_nonneg _ _ _ _ Hm) as Hg; pose proof (adm_abs_nonneg _ _ _ _ Hm) as Hga.
  set (xs := concat tiles) in *.
  set (wt := grad_w_with vis c).
  set (gc := gacc_c E Ym ((1 + u) * (eP + eDm) + ea) W) in *.
  set (h1 := fun x => if vis x then Pr x * Rabs (dPx x - Dx x) * Rabs (w x) else 0).
  set (h2 := fun x => if vis x then Pr x * ((1 + u) * (eP + eD x) + ea) * Rabs (w x) else 0).
  set (Pd := fun x => if vis x then Pr x * (dPx x - Dx x) * w x else 0).
  set (gA := gacc_A E) in *; set (gB := gacc_B E) in *.
  assert (HK0 : 0 <= (1 + u) * ee * ((1 + u) * Ym + ((1 + u) * (eP + eDm) + ea))) by (apply Rmult_le_pos; nra).
  assert (Hgc : 0 <= gc).
  { unfold gc, gacc_c; apply Rmult_le_pos; [| lra].
    assert (0 <= (1 + us) * ((1 + u) * ee * ((1 + u) * Ym + ((1 + u) * (eP + eDm) + ea)) + ea)) by nra. lra. }
  assert (Hterm : forall x, In x xs -> Rabs (wt x * w x - Pd x) <= (gA * h1 x + gB * h2 x) + gc).
  { intros x Hxs; unfold wt, grad_w_with, Pd, h1, h2; destruct (vis x) eqn:Ev.
    - destruct (Hx x Hxs Ev) as [H1 [H2 [H3 [H4 [H5 [H6 [H7 H8]]]]]]].
      pose proof (grad_ds_close_with c scale x (Lx x) (dPx x) (Dx x) (eD x) delta Dl Am X eP eDm Ym
                    H1 H2 H3 HX H4 H5 H6 H7) as Hds.
      cbv zeta in Hds; fold E in Hds.
      set (P := exp (scale * dot_R (qv x) (kv x) - Lx x)) in *.
      set (Y := dPx x - Dx x) in *.
      set (cR := (1 + u) * (eP + eD x) + ea) in *.
      set (K0 := (1 + u) * ee * ((1 + u) * Ym + ((1 + u) * (eP + eDm) + ea)) + ea) in *.
      set (ds := grad_ds_with c x) in *.
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
      change (Pr x) with P.
      replace (ff_rnd S_ ds * w x - P * Y * w x) with ((ff_rnd S_ ds - P * Y) * w x) by ring.
      rewrite Rabs_mult.
      pose proof (Rabs_pos (w x)) as Hw0; pose proof (Rabs_pos Y) as HY0.
      set (aw := Rabs (w x)) in *.
      assert (E1 : Rabs (ff_rnd S_ ds - P * Y) * aw <= ((1 + us) * eds + us * (P * Rabs Y) + es) * aw)
        by (apply Rmult_le_compat_r; lra).
      eapply Rle_trans; [exact E1 |].
      unfold gc, gacc_c, gA, gB, gacc_A, gacc_B, eds; fold K0.
      assert (E2 : ((1 + us) * K0 + es) * aw <= ((1 + us) * K0 + es) * W).
      { apply Rmult_le_compat_l; [unfold K0; nra | lra]. }
      nra.
    - rewrite Rmult_0_l, Rminus_0_r, Rabs_R0, !Rmult_0_r; lra. }
  destruct (sum_terms_close xs (fun x => wt x * w x) Pd (fun x => gA * h1 x + gB * h2 x) gc Hterm) as [Hs1 Hs2].
  assert (EH : rsum (map (fun x => gA * h1 x + gB * h2 x) xs) = gA * S1 + gB * SR).
  { rewrite rsum_map_plus, !rsum_map_scal_l; reflexivity. }
  assert (EPd : rsum (map (fun x => Rabs (Pd x)) xs) = S1).
  { unfold S1; apply rsum_map_ext; intros x _; unfold Pd; destruct (vis x).
    - rewrite !Rabs_mult, (Rabs_right (Pr x)) by (left; apply exp_pos); reflexivity.
    - apply Rabs_R0. }
  rewrite EH in Hs1, Hs2; rewrite EPd, map_map in Hs2.
  assert (HPs : Rabs (rsum (map Pd xs)) <= S1) by (rewrite <- EPd; apply bw_rsum_abs).
  pose proof (acc_chain_items accf n g ga wt w tiles Hm Hn) as Hch; fold xs G in Hch.
  set (acc := fold_left (fun acc ab => accf acc (fst ab) (snd ab)) (map (fun tl => (map wt tl, map w tl)) tiles) 0) in *.
  set (nn := INR (length xs)) in *.
  set (t := INR (length tiles)) in *.
  assert (HG : 1 <= G) by (unfold G; apply pow_R1_Rle; lra).
  assert (HS1 : 0 <= S1) by (eapply Rle_trans; [apply Rabs_pos | exact HPs]).
  assert (HA : Rabs (acc - rsum (map Pd xs)) <= eA).
  { replace (acc - rsum (map Pd xs)) with ((acc - rsum (map (fun x => wt x * w x) xs))
                                           + (rsum (map (fun x => wt x * w x) xs) - rsum (map Pd xs))) by ring.
    eapply Rle_trans; [apply Rabs_triang |].
    assert ((G - 1) * rsum (map (fun x => Rabs (wt x * w x)) xs) <= (G - 1) * (S1 + (gA * S1 + gB * SR) + nn * gc))
      by (apply Rmult_le_compat_l; lra).
    unfold eA, gacc_eA; fold gA gB gc; nra. }
  exact (scale_store_close _ _ S1 eA cs scale ucs Hs Hucs Hc HPs HA).
Qed.

End GenericWith.

Section Generic.

Variable T : Type.
(** The two vectors of the item's score, its [lse2], the computed [dp],
    the [delta] of its row and the multiplier [w] ([q_ie] or [k_je]). *)
Variables (qv kv : T -> list R) (l2 dp dl w : T -> R).

Definition grad_p (c : R) (x : T) : R := exp2 (rnd (score2 A_ c (qv x) (kv x) - l2 x)).
Definition grad_ds (c : R) (x : T) : R := rnd (grad_p c x * rnd (dp x - dl x)).
Definition grad_term (vis : T -> bool) (c : R) (x : T) : R :=
  if vis x then rnd (ff_rnd S_ (grad_ds c x) * w x) else 0.

(** The kernel's output coordinate: the tiles summed blocked, times the
    fp32 [cs], stored. *)
Definition grad_kernel (vis : T -> bool) (c cs : R) (tiles : list (list T)) : R :=
  ff_rnd S_ (rnd (blocked_sum A_ (map (map (grad_term vis c)) tiles) * cs)).

Lemma grad_term_close : forall vis c scale (x : T) (Lx dPx Dx eDx : R) delta Dl Am X eP eDm Ym W,
  vis x = true ->
  Rabs (score2 A_ c (qv x) (kv x) * ln 2 - scale * dot_R (qv x) (kv x)) <= delta ->
  Rabs (l2 x * ln 2 - Lx) <= Dl ->
  Rabs (score2 A_ c (qv x) (kv x) - l2 x) <= Am ->
  Rpower 2 ((delta + Dl) / ln 2 + u * Am + ea) <= X ->
  Rabs (dp x - dPx) <= eP -> Rabs (dl x - Dx) <= eDx -> eDx <= eDm ->
  Rabs (dPx - Dx) <= Ym -> Rabs (w x) <= W ->
  let P := exp (scale * dot_R (qv x) (kv x) - Lx) in
  let E := (1 + ue) * X in
  Rabs (grad_term vis c x - P * (dPx - Dx) * w x)
  <= grad_A E * (P * Rabs (dPx - Dx) * Rabs (w x)) + grad_B E * (P * ((1 + u) * (eP + eDx) + ea) * Rabs (w x))
     + grad_c E Ym ((1 + u) * (eP + eDm) + ea) W.
Proof. exact (grad_term_close_with T (bdot A_) qv kv l2 dp dl w). Qed.

Theorem grad_error : forall vis c cs scale ucs (tiles : list (list T)) (Lx dPx Dx eD : T -> R)
    delta Dl Am X eP eDm Ym W b,
  0 <= scale -> 0 <= ucs -> Rabs (cs - scale) <= ucs * scale ->
  0 <= eP -> 0 <= eDm -> 0 <= Ym -> 0 <= W ->
  Forall (fun tl => (length tl <= b)%nat) tiles ->
  INR ((b - 1) + (length tiles - 1)) * u < 1 ->
  Rpower 2 ((delta + Dl) / ln 2 + u * Am + ea) <= X ->
  (forall x, In x (concat tiles) -> vis x = true ->
     Rabs (score2 A_ c (qv x) (kv x) * ln 2 - scale * dot_R (qv x) (kv x)) <= delta
     /\ Rabs (l2 x * ln 2 - Lx x) <= Dl
     /\ Rabs (score2 A_ c (qv x) (kv x) - l2 x) <= Am
     /\ Rabs (dp x - dPx x) <= eP
     /\ Rabs (dl x - Dx x) <= eD x /\ eD x <= eDm
     /\ Rabs (dPx x - Dx x) <= Ym /\ Rabs (w x) <= W) ->
  let E := (1 + ue) * X in
  let g := gamma u ((b - 1) + (length tiles - 1)) in
  let Pr := fun x => exp (scale * dot_R (qv x) (kv x) - Lx x) in
  let S1 := rsum (map (fun x => if vis x then Pr x * Rabs (dPx x - Dx x) * Rabs (w x) else 0) (concat tiles)) in
  let SR := rsum (map (fun x => if vis x then Pr x * ((1 + u) * (eP + eD x) + ea) * Rabs (w x) else 0)
                      (concat tiles)) in
  let n := INR (length (concat tiles)) in
  let eA := grad_eA g E S1 SR n (grad_c E Ym ((1 + u) * (eP + eDm) + ea) W) in
  Rabs (grad_kernel vis c cs tiles
        - scale * rsum (map (fun x => if vis x then Pr x * (dPx x - Dx x) * w x else 0) (concat tiles)))
  <= grad_bound scale ucs eA S1.
Proof. exact (grad_error_with T (bdot A_) qv kv l2 dp dl w). Qed.

End Generic.

(** ** The two kernels *)

(** dK, coordinate [e] of key row [k] (value row [v]): items
    [((q_i, dO_i), (lse2_i, delta_i))], the query rows of every query head
    of the key's group in the kernel's query tiles; the score
    [score2 c k q_i] (the kernel's [dot (k, q^T)]) and [dp = dot (v, dO_i)]. *)
Definition dk_kernel (vis : (list R * list R) * (R * R) -> bool) (c cs : R) (k v : list R) (e : nat)
    (tiles : list (list ((list R * list R) * (R * R)))) : R :=
  grad_kernel _ (fun _ => k) (fun x => fst (fst x)) (fun x => fst (snd x))
    (fun x => blocked_dot A_ (length v) v (snd (fst x))) (fun x => snd (snd x)) (fun x => nth e (fst (fst x)) 0)
    vis c cs tiles.

(** dQ, coordinate [e] of query row [q] (its [dO], [lse2], [delta]): items
    [(k_j, v_j)], the key rows of the query head's key head in the kernel's
    key tiles; [dp = dot (dO, v_j)]. *)
Definition dq_kernel (vis : list R * list R -> bool) (c cs : R) (q dO : list R) (l2 dl : R) (e : nat)
    (tiles : list (list (list R * list R))) : R :=
  grad_kernel _ (fun _ => q) fst (fun _ => l2) (fun y => blocked_dot A_ (length dO) dO (snd y)) (fun _ => dl)
    (fun y => nth e (fst y) 0) vis c cs tiles.

(** The dots as parameters (ForwardError.v, PART B'): the scores' [sdot] and
    [dp]'s [pdot], with [pdot]'s [dot_model] in place of [dot_err_bound]
    ([eP = gp_rel Pd + gp_abs]); [dk_kernel] is [dk_kernel_with (bdot A_) (bdot A_)]. *)
Definition dk_kernel_with (sdot pdot : list R -> list R -> R) (vis : (list R * list R) * (R * R) -> bool)
    (c cs : R) (k v : list R) (e : nat) (tiles : list (list ((list R * list R) * (R * R)))) : R :=
  grad_kernel_with _ sdot (fun _ => k) (fun x => fst (fst x)) (fun x => fst (snd x))
    (fun x => pdot v (snd (fst x))) (fun x => snd (snd x)) (fun x => nth e (fst (fst x)) 0)
    vis c cs tiles.

Definition dq_kernel_with (sdot pdot : list R -> list R -> R) (vis : list R * list R -> bool) (c cs : R)
    (q dO : list R) (l2 dl : R) (e : nat) (tiles : list (list (list R * list R))) : R :=
  grad_kernel_with _ sdot (fun _ => q) fst (fun _ => l2) (fun y => pdot dO (snd y)) (fun _ => dl)
    (fun y => nth e (fst y) 0) vis c cs tiles.

Lemma dot_repeat_0 : forall n, dot_R (repeat 0 n) (repeat 0 n) = 0 /\ dot_abs (repeat 0 n) (repeat 0 n) = 0.
Proof.
  unfold dot_R, dot_abs; induction n as [|n [IH1 IH2]]; [split; reflexivity |].
  cbn [repeat combine map]; rewrite !rsum_cons; cbn [fst snd].
  rewrite IH1, IH2, Rmult_0_l, Rabs_R0; split; ring.
Qed.

Lemma dm_abs_nonneg : forall dotf E g_rel g_abs, dot_model dotf E g_rel g_abs -> 0 <= g_abs.
Proof.
  intros dotf E g_rel g_abs [_ Hm].
  pose proof (Hm (repeat 0 E) (repeat 0 E) (repeat_length 0 E) (repeat_length 0 E)) as H.
  destruct (dot_repeat_0 E) as [E1 E2]; rewrite E1, E2, Rmult_0_r, Rplus_0_l in H.
  eapply Rle_trans; [apply Rabs_pos | exact H].
Qed.

Lemma dm_eP_nonneg : forall dotf E g_rel g_abs P, dot_model dotf E g_rel g_abs -> 0 <= P ->
  0 <= g_rel * P + g_abs.
Proof.
  intros dotf E g_rel g_abs P Hdm HP.
  pose proof (dm_abs_nonneg _ _ _ _ Hdm); pose proof (dm_rel_nonneg _ _ _ _ Hdm).
  assert (0 <= g_rel * P) by (apply Rmult_le_pos; assumption). lra.
Qed.

Lemma dm_eP_bound : forall dotf E g_rel g_abs P a b, dot_model dotf E g_rel g_abs ->
  length a = E -> length b = E -> dot_abs a b <= P ->
  Rabs (dotf a b - dot_R a b) <= g_rel * P + g_abs.
Proof.
  intros dotf E g_rel g_abs P a b Hdm Ha Hb HP.
  eapply Rle_trans; [apply (dm_err _ _ _ _ Hdm); assumption |].
  apply Rplus_le_compat_r, Rmult_le_compat_l; [apply (dm_rel_nonneg _ _ _ _ Hdm) | exact HP].
Qed.

Theorem dk_error_dot : forall (sdot pdot : list R -> list R -> R) (gp_rel gp_abs : R) vis c cs scale ucs k v e tiles (Lx Dx eD : (list R * list R) * (R * R) -> R)
    delta Dl Am X Ev Pd eDm Ym W b,
  0 <= scale -> 0 <= ucs -> Rabs (cs - scale) <= ucs * scale ->
  0 <= Pd -> 0 <= eDm -> 0 <= Ym -> 0 <= W ->
  length v = Ev -> dot_model pdot Ev gp_rel gp_abs ->
  Forall (fun tl => (length tl <= b)%nat) tiles ->
  INR ((b - 1) + (length tiles - 1)) * u < 1 ->
  Rpower 2 ((delta + Dl) / ln 2 + u * Am + ea) <= X ->
  (forall x, In x (concat tiles) -> vis x = true ->
     Rabs (score2_with A_ sdot c k (fst (fst x)) * ln 2 - scale * dot_R k (fst (fst x))) <= delta
     /\ Rabs (fst (snd x) * ln 2 - Lx x) <= Dl
     /\ Rabs (score2_with A_ sdot c k (fst (fst x)) - fst (snd x)) <= Am
     /\ length (snd (fst x)) = Ev /\ dot_abs v (snd (fst x)) <= Pd
     /\ Rabs (snd (snd x) - Dx x) <= eD x /\ eD x <= eDm
     /\ Rabs (dot_R v (snd (fst x)) - Dx x) <= Ym /\ Rabs (nth e (fst (fst x)) 0) <= W) ->
  let eP := gp_rel * Pd + gp_abs in
  let E := (1 + ue) * X in
  let g := gamma u ((b - 1) + (length tiles - 1)) in
  let Pr := fun x => exp (scale * dot_R k (fst (fst x)) - Lx x) in
  let Y := fun x => dot_R v (snd (fst x)) - Dx x in
  let S1 := rsum (map (fun x => if vis x then Pr x * Rabs (Y x) * Rabs (nth e (fst (fst x)) 0) else 0)
                      (concat tiles)) in
  let SR := rsum (map (fun x => if vis x then Pr x * ((1 + u) * (eP + eD x) + ea) * Rabs (nth e (fst (fst x)) 0)
                                 else 0) (concat tiles)) in
  let eA := grad_eA g E S1 SR (INR (length (concat tiles))) (grad_c E Ym ((1 + u) * (eP + eDm) + ea) W) in
  Rabs (dk_kernel_with sdot pdot vis c cs k v e tiles
        - scale * rsum (map (fun x => if vis x then Pr x * Y x * nth e (fst (fst x)) 0 else 0) (concat tiles)))
  <= grad_bound scale ucs eA S1.
Proof.
  intros sdot pdot gp_rel gp_abs vis c cs scale ucs k v e tiles Lx Dx eD delta Dl Am X Ev Pd eDm Ym W b
    Hs Hucs Hc HPd HeDm HYm HW Hv Hdm HBt Hg HX Hx eP E g Pr Y S1 SR eA.
  apply (grad_error_with _ sdot (fun _ => k) (fun x => fst (fst x)) (fun x => fst (snd x))
           (fun x => pdot v (snd (fst x))) (fun x => snd (snd x))
           (fun x => nth e (fst (fst x)) 0) vis c cs scale ucs tiles Lx (fun x => dot_R v (snd (fst x))) Dx eD
           delta Dl Am X eP eDm Ym W b); auto.
  - apply (dm_eP_nonneg pdot Ev gp_rel gp_abs Pd Hdm HPd).
  - intros x Hin Hvis; destruct (Hx x Hin Hvis) as [H1 [H2 [H3 [H4 [H5 [H6 [H7 [H8 H9]]]]]]]].
    repeat split; auto.
    apply (dm_eP_bound pdot Ev gp_rel gp_abs Pd _ _ Hdm); auto.
Qed.

Theorem dq_error_dot : forall (sdot pdot : list R -> list R -> R) (gp_rel gp_abs : R) vis c cs scale ucs q dO l2 dl e tiles (Lx D eD : R)
    delta Dl Am X Ev Pd Ym W b,
  0 <= scale -> 0 <= ucs -> Rabs (cs - scale) <= ucs * scale ->
  0 <= Pd -> 0 <= Ym -> 0 <= W ->
  length dO = Ev -> dot_model pdot Ev gp_rel gp_abs ->
  Forall (fun tl => (length tl <= b)%nat) tiles ->
  INR ((b - 1) + (length tiles - 1)) * u < 1 ->
  Rpower 2 ((delta + Dl) / ln 2 + u * Am + ea) <= X ->
  Rabs (l2 * ln 2 - Lx) <= Dl -> Rabs (dl - D) <= eD ->
  (forall y, In y (concat tiles) -> vis y = true ->
     Rabs (score2_with A_ sdot c q (fst y) * ln 2 - scale * dot_R q (fst y)) <= delta
     /\ Rabs (score2_with A_ sdot c q (fst y) - l2) <= Am
     /\ length (snd y) = Ev /\ dot_abs dO (snd y) <= Pd
     /\ Rabs (dot_R dO (snd y) - D) <= Ym /\ Rabs (nth e (fst y) 0) <= W) ->
  let eP := gp_rel * Pd + gp_abs in
  let E := (1 + ue) * X in
  let g := gamma u ((b - 1) + (length tiles - 1)) in
  let Pr := fun y => exp (scale * dot_R q (fst y) - Lx) in
  let Y := fun y => dot_R dO (snd y) - D in
  let S1 := rsum (map (fun y => if vis y then Pr y * Rabs (Y y) * Rabs (nth e (fst y) 0) else 0) (concat tiles)) in
  let SR := rsum (map (fun y => if vis y then Pr y * ((1 + u) * (eP + eD) + ea) * Rabs (nth e (fst y) 0) else 0)
                      (concat tiles)) in
  let eA := grad_eA g E S1 SR (INR (length (concat tiles))) (grad_c E Ym ((1 + u) * (eP + eD) + ea) W) in
  Rabs (dq_kernel_with sdot pdot vis c cs q dO l2 dl e tiles
        - scale * rsum (map (fun y => if vis y then Pr y * Y y * nth e (fst y) 0 else 0) (concat tiles)))
  <= grad_bound scale ucs eA S1.
Proof.
  intros sdot pdot gp_rel gp_abs vis c cs scale ucs q dO l2 dl e tiles Lx D eD delta Dl Am X Ev Pd Ym W b
    Hs Hucs Hc HPd HYm HW Hd Hdm HBt Hg HX Hl HdD Hx eP E g Pr Y S1 SR eA.
  assert (HeD : 0 <= eD) by (eapply Rle_trans; [apply Rabs_pos | exact HdD]).
  apply (grad_error_with _ sdot (fun _ => q) fst (fun _ => l2) (fun y => pdot dO (snd y)) (fun _ => dl)
           (fun y => nth e (fst y) 0) vis c cs scale ucs tiles (fun _ => Lx) (fun y => dot_R dO (snd y))
           (fun _ => D) (fun _ => eD) delta Dl Am X eP eD Ym W b); auto.
  - apply (dm_eP_nonneg pdot Ev gp_rel gp_abs Pd Hdm HPd).
  - intros y Hin Hvis; destruct (Hx y Hin Hvis) as [H1 [H2 [H3 [H4 [H5 H6]]]]].
    repeat split; auto; try lra.
    apply (dm_eP_bound pdot Ev gp_rel gp_abs Pd _ _ Hdm); auto.
Qed.

(** dK and dQ with the tiles accumulated by any accumulating dot model
    ([grad_error_acc_with]): the kernels' [dk = tl.dot (ds^T, q, dk)] over
    the query tiles and [dq = tl.dot (ds, k, dq)] over the key tiles, tiles of
    [n] items, the scores' dot [sdot] and dp's [pdot] as in [dk_error_dot],
    [dq_error_dot]. *)
Definition dk_kernel_acc (accf : R -> list R -> list R -> R) (sdot pdot : list R -> list R -> R)
    (vis : (list R * list R) * (R * R) -> bool)
    (c cs : R) (k v : list R) (e : nat) (tiles : list (list ((list R * list R) * (R * R)))) : R :=
  grad_kernel_acc_with _ sdot (fun _ => k) (fun x => fst (fst x)) (fun x => fst (snd x))
    (fun x => pdot v (snd (fst x))) (fun x => snd (snd x)) (fun x => nth e (fst (fst x)) 0)
    accf vis c cs tiles.

Definition dq_kernel_acc (accf : R -> list R -> list R -> R) (sdot pdot : list R -> list R -> R)
    (vis : list R * list R -> bool) (c cs : R)
    (q dO : list R) (l2 dl : R) (e : nat) (tiles : list (list (list R * list R))) : R :=
  grad_kernel_acc_with _ sdot (fun _ => q) fst (fun _ => l2) (fun y => pdot dO (snd y)) (fun _ => dl)
    (fun y => nth e (fst y) 0) accf vis c cs tiles.

Theorem dk_error_acc : forall (accf : R -> list R -> list R -> R) n g_rel g_abs
    (sdot pdot : list R -> list R -> R) (gp_rel gp_abs : R) vis c cs scale ucs k v e tiles
    (Lx Dx eD : (list R * list R) * (R * R) -> R) delta Dl Am X Ev Pd eDm Ym W,
  acc_dot_model accf n g_rel g_abs -> Forall (fun tl => length tl = n) tiles ->
  0 <= scale -> 0 <= ucs -> Rabs (cs - scale) <= ucs * scale ->
  0 <= Pd -> 0 <= eDm -> 0 <= Ym -> 0 <= W ->
  length v = Ev -> dot_model pdot Ev gp_rel gp_abs ->
  Rpower 2 ((delta + Dl) / ln 2 + u * Am + ea) <= X ->
  (forall x, In x (concat tiles) -> vis x = true ->
     Rabs (score2_with A_ sdot c k (fst (fst x)) * ln 2 - scale * dot_R k (fst (fst x))) <= delta
     /\ Rabs (fst (snd x) * ln 2 - Lx x) <= Dl
     /\ Rabs (score2_with A_ sdot c k (fst (fst x)) - fst (snd x)) <= Am
     /\ length (snd (fst x)) = Ev /\ dot_abs v (snd (fst x)) <= Pd
     /\ Rabs (snd (snd x) - Dx x) <= eD x /\ eD x <= eDm
     /\ Rabs (dot_R v (snd (fst x)) - Dx x) <= Ym /\ Rabs (nth e (fst (fst x)) 0) <= W) ->
  let eP := gp_rel * Pd + gp_abs in
  let E := (1 + ue) * X in
  let G := (1 + g_rel) ^ length tiles in
  let Pr := fun x => exp (scale * dot_R k (fst (fst x)) - Lx x) in
  let Y := fun x => dot_R v (snd (fst x)) - Dx x in
  let S1 := rsum (map (fun x => if vis x then Pr x * Rabs (Y x) * Rabs (nth e (fst (fst x)) 0) else 0)
                      (concat tiles)) in
  let SR := rsum (map (fun x => if vis x then Pr x * ((1 + u) * (eP + eD x) + ea) * Rabs (nth e (fst (fst x)) 0)
                                 else 0) (concat tiles)) in
  let eA := gacc_eA G E S1 SR (INR (length (concat tiles))) (gacc_c E Ym ((1 + u) * (eP + eDm) + ea) W)
                    (INR (length tiles)) g_abs in
  Rabs (dk_kernel_acc accf sdot pdot vis c cs k v e tiles
        - scale * rsum (map (fun x => if vis x then Pr x * Y x * nth e (fst (fst x)) 0 else 0) (concat tiles)))
  <= grad_bound scale ucs eA S1.
Proof.
  intros accf n g_rel g_abs sdot pdot gp_rel gp_abs vis c cs scale ucs k v e tiles Lx Dx eD delta Dl Am X Ev Pd
    eDm Ym W Hm Hn Hs Hucs Hc HPd HeDm HYm HW Hv Hdm HX Hx eP E G Pr Y S1 SR eA.
  apply (grad_error_acc_with _ sdot (fun _ => k) (fun x => fst (fst x)) (fun x => fst (snd x))
           (fun x => pdot v (snd (fst x))) (fun x => snd (snd x))
           (fun x => nth e (fst (fst x)) 0) accf n g_rel g_abs vis c cs scale ucs tiles Lx
           (fun x => dot_R v (snd (fst x))) Dx eD delta Dl Am X eP eDm Ym W); auto.
  - apply (dm_eP_nonneg pdot Ev gp_rel gp_abs Pd Hdm HPd).
  - intros x Hin Hvis; destruct (Hx x Hin Hvis) as [H1 [H2 [H3 [H4 [H5 [H6 [H7 [H8 H9]]]]]]]].
    repeat split; auto.
    apply (dm_eP_bound pdot Ev gp_rel gp_abs Pd _ _ Hdm); auto.
Qed.

Theorem dq_error_acc : forall (accf : R -> list R -> list R -> R) n g_rel g_abs
    (sdot pdot : list R -> list R -> R) (gp_rel gp_abs : R) vis c cs scale ucs q dO l2 dl e tiles (Lx D eD : R)
    delta Dl Am X Ev Pd Ym W,
  acc_dot_model accf n g_rel g_abs -> Forall (fun tl => length tl = n) tiles ->
  0 <= scale -> 0 <= ucs -> Rabs (cs - scale) <= ucs * scale ->
  0 <= Pd -> 0 <= Ym -> 0 <= W ->
  length dO = Ev -> dot_model pdot Ev gp_rel gp_abs ->
  Rpower 2 ((delta + Dl) / ln 2 + u * Am + ea) <= X ->
  Rabs (l2 * ln 2 - Lx) <= Dl -> Rabs (dl - D) <= eD ->
  (forall y, In y (concat tiles) -> vis y = true ->
     Rabs (score2_with A_ sdot c q (fst y) * ln 2 - scale * dot_R q (fst y)) <= delta
     /\ Rabs (score2_with A_ sdot c q (fst y) - l2) <= Am
     /\ length (snd y) = Ev /\ dot_abs dO (snd y) <= Pd
     /\ Rabs (dot_R dO (snd y) - D) <= Ym /\ Rabs (nth e (fst y) 0) <= W) ->
  let eP := gp_rel * Pd + gp_abs in
  let E := (1 + ue) * X in
  let G := (1 + g_rel) ^ length tiles in
  let Pr := fun y => exp (scale * dot_R q (fst y) - Lx) in
  let Y := fun y => dot_R dO (snd y) - D in
  let S1 := rsum (map (fun y => if vis y then Pr y * Rabs (Y y) * Rabs (nth e (fst y) 0) else 0) (concat tiles)) in
  let SR := rsum (map (fun y => if vis y then Pr y * ((1 + u) * (eP + eD) + ea) * Rabs (nth e (fst y) 0) else 0)
                      (concat tiles)) in
  let eA := gacc_eA G E S1 SR (INR (length (concat tiles))) (gacc_c E Ym ((1 + u) * (eP + eD) + ea) W)
                    (INR (length tiles)) g_abs in
  Rabs (dq_kernel_acc accf sdot pdot vis c cs q dO l2 dl e tiles
        - scale * rsum (map (fun y => if vis y then Pr y * Y y * nth e (fst y) 0 else 0) (concat tiles)))
  <= grad_bound scale ucs eA S1.
Proof.
  intros accf n g_rel g_abs sdot pdot gp_rel gp_abs vis c cs scale ucs q dO l2 dl e tiles Lx D eD delta Dl Am X
    Ev Pd Ym W Hm Hn Hs Hucs Hc HPd HYm HW Hd Hdm HX Hl HdD Hx eP E G Pr Y S1 SR eA.
  assert (HeD : 0 <= eD) by (eapply Rle_trans; [apply Rabs_pos | exact HdD]).
  apply (grad_error_acc_with _ sdot (fun _ => q) fst (fun _ => l2) (fun y => pdot dO (snd y)) (fun _ => dl)
           (fun y => nth e (fst y) 0) accf n g_rel g_abs vis c cs scale ucs tiles (fun _ => Lx)
           (fun y => dot_R dO (snd y)) (fun _ => D) (fun _ => eD) delta Dl Am X eP eD Ym W); auto.
  - apply (dm_eP_nonneg pdot Ev gp_rel gp_abs Pd Hdm HPd).
  - intros y Hin Hvis; destruct (Hx y Hin Hvis) as [H1 [H2 [H3 [H4 [H5 H6]]]]].
    repeat split; auto; try lra.
    apply (dm_eP_bound pdot Ev gp_rel gp_abs Pd _ _ Hdm); auto.
Qed.

(** The H100 instances of [dk_error_acc], [dq_error_acc]: the float32
    kernel's 3xTF32 ([_tf32x3_op]: scores, [dp] and the accumulating
    [tl.dot] on the tensor cores, the accumulator added in fp32) and the
    16-bit kernels' tensor cores ([_tc_op]); blocks of [kb], [F] kept bits,
    tiles of [n <= qb kb] items, head dim [Ev <= qe kb]. *)
Theorem dk_error_tf32x3_op : forall (out : R -> R) (ur : R) (F : Z) (kb qb qe n : nat)
    vis c cs scale ucs k v e tiles (Lx Dx eD : (list R * list R) * (R * R) -> R) delta Dl Am X Ev Pd eDm Ym W,
  let dotf := tf32x3_dot_tc_op tf32_rna tf32_rz (tc_align_op F) out kb in
  let accf := tf32x3_acc_fn F out rnd kb in
  0 <= ur -> (forall x, Rabs (out x - x) <= ur * Rabs x) ->
  (1 <= kb)%nat -> (1 <= qb)%nat -> (n <= qb * kb)%nat -> INR (3 * qb) * tc_delta (bpow radix2 (1 - F)) ur kb < 1 ->
  (1 <= qe)%nat -> (Ev <= qe * kb)%nat -> INR (3 * qe) * tc_delta (bpow radix2 (1 - F)) ur kb < 1 ->
  Forall (fun tl => length tl = n) tiles ->
  0 <= scale -> 0 <= ucs -> Rabs (cs - scale) <= ucs * scale ->
  0 <= Pd -> 0 <= eDm -> 0 <= Ym -> 0 <= W ->
  length v = Ev ->
  Rpower 2 ((delta + Dl) / ln 2 + u * Am + ea) <= X ->
  (forall x, In x (concat tiles) -> vis x = true ->
     Rabs (score2_with A_ dotf c k (fst (fst x)) * ln 2 - scale * dot_R k (fst (fst x))) <= delta
     /\ Rabs (fst (snd x) * ln 2 - Lx x) <= Dl
     /\ Rabs (score2_with A_ dotf c k (fst (fst x)) - fst (snd x)) <= Am
     /\ length (snd (fst x)) = Ev /\ dot_abs v (snd (fst x)) <= Pd
     /\ Rabs (snd (snd x) - Dx x) <= eD x /\ eD x <= eDm
     /\ Rabs (dot_R v (snd (fst x)) - Dx x) <= Ym /\ Rabs (nth e (fst (fst x)) 0) <= W) ->
  let eP := tf32x3_tc_rel (bpow radix2 (1 - F)) ur kb qe * Pd + 0 in
  let E := (1 + ue) * X in
  let G := (1 + (u + (1 + u) * tf32x3_tc_rel (bpow radix2 (1 - F)) ur kb qb)) ^ length tiles in
  let Pr := fun x => exp (scale * dot_R k (fst (fst x)) - Lx x) in
  let Y := fun x => dot_R v (snd (fst x)) - Dx x in
  let S1 := rsum (map (fun x => if vis x then Pr x * Rabs (Y x) * Rabs (nth e (fst (fst x)) 0) else 0)
                      (concat tiles)) in
  let SR := rsum (map (fun x => if vis x then Pr x * ((1 + u) * (eP + eD x) + ea) * Rabs (nth e (fst (fst x)) 0)
                                 else 0) (concat tiles)) in
  let eA := gacc_eA G E S1 SR (INR (length (concat tiles))) (gacc_c E Ym ((1 + u) * (eP + eDm) + ea) W)
                    (INR (length tiles)) ((1 + u) * 0 + ea) in
  Rabs (dk_kernel_acc accf dotf dotf vis c cs k v e tiles
        - scale * rsum (map (fun x => if vis x then Pr x * Y x * nth e (fst (fst x)) 0 else 0) (concat tiles)))
  <= grad_bound scale ucs eA S1.
Proof.
  intros out ur F kb qb qe n vis c cs scale ucs k v e tiles Lx Dx eD delta Dl Am X Ev Pd eDm Ym W dotf accf
    Hur Hout Hk Hq Hn Hd Hqe HEv Hde Ht Hs Hucs Hc HPd HeDm HYm HW Hv HX Hx.
  exact (dk_error_acc accf n _ _ dotf dotf _ _ vis c cs scale ucs k v e tiles Lx Dx eD delta Dl Am X Ev Pd eDm Ym W
           (tf32x3_tc_op_acc_dot_model out rnd ur u ea F kb qb n Hur Hout (ff_u_nonneg _) (ff_abs _) Hk Hq Hn Hd) Ht Hs Hucs Hc HPd HeDm HYm HW Hv (tf32x3_tc_op_dot_model out ur F kb qe Ev Hur Hout Hk Hqe HEv Hde) HX Hx).
Qed.

Theorem dq_error_tf32x3_op : forall (out : R -> R) (ur : R) (F : Z) (kb qb qe n : nat)
    vis c cs scale ucs q dO l2 dl e tiles (Lx D eD : R) delta Dl Am X Ev Pd Ym W,
  let dotf := tf32x3_dot_tc_op tf32_rna tf32_rz (tc_align_op F) out kb in
  let accf := tf32x3_acc_fn F out rnd kb in
  0 <= ur -> (forall x, Rabs (out x - x) <= ur * Rabs x) ->
  (1 <= kb)%nat -> (1 <= qb)%nat -> (n <= qb * kb)%nat -> INR (3 * qb) * tc_delta (bpow radix2 (1 - F)) ur kb < 1 ->
  (1 <= qe)%nat -> (Ev <= qe * kb)%nat -> INR (3 * qe) * tc_delta (bpow radix2 (1 - F)) ur kb < 1 ->
  Forall (fun tl => length tl = n) tiles ->
  0 <= scale -> 0 <= ucs -> Rabs (cs - scale) <= ucs * scale ->
  0 <= Pd -> 0 <= Ym -> 0 <= W ->
  length dO = Ev ->
  Rpower 2 ((delta + Dl) / ln 2 + u * Am + ea) <= X ->
  Rabs (l2 * ln 2 - Lx) <= Dl -> Rabs (dl - D) <= eD ->
  (forall y, In y (concat tiles) -> vis y = true ->
     Rabs (score2_with A_ dotf c q (fst y) * ln 2 - scale * dot_R q (fst y)) <= delta
     /\ Rabs (score2_with A_ dotf c q (fst y) - l2) <= Am
     /\ length (snd y) = Ev /\ dot_abs dO (snd y) <= Pd
     /\ Rabs (dot_R dO (snd y) - D) <= Ym /\ Rabs (nth e (fst y) 0) <= W) ->
  let eP := tf32x3_tc_rel (bpow radix2 (1 - F)) ur kb qe * Pd + 0 in
  let E := (1 + ue) * X in
  let G := (1 + (u + (1 + u) * tf32x3_tc_rel (bpow radix2 (1 - F)) ur kb qb)) ^ length tiles in
  let Pr := fun y => exp (scale * dot_R q (fst y) - Lx) in
  let Y := fun y => dot_R dO (snd y) - D in
  let S1 := rsum (map (fun y => if vis y then Pr y * Rabs (Y y) * Rabs (nth e (fst y) 0) else 0) (concat tiles)) in
  let SR := rsum (map (fun y => if vis y then Pr y * ((1 + u) * (eP + eD) + ea) * Rabs (nth e (fst y) 0) else 0)
                      (concat tiles)) in
  let eA := gacc_eA G E S1 SR (INR (length (concat tiles))) (gacc_c E Ym ((1 + u) * (eP + eD) + ea) W)
                    (INR (length tiles)) ((1 + u) * 0 + ea) in
  Rabs (dq_kernel_acc accf dotf dotf vis c cs q dO l2 dl e tiles
        - scale * rsum (map (fun y => if vis y then Pr y * Y y * nth e (fst y) 0 else 0) (concat tiles)))
  <= grad_bound scale ucs eA S1.
Proof.
  intros out ur F kb qb qe n vis c cs scale ucs q dO l2 dl e tiles Lx D eD delta Dl Am X Ev Pd Ym W dotf accf
    Hur Hout Hk Hq Hn Hd Hqe HEv Hde Ht Hs Hucs Hc HPd HYm HW Hv HX Hl HdD Hx.
  exact (dq_error_acc accf n _ _ dotf dotf _ _ vis c cs scale ucs q dO l2 dl e tiles Lx D eD delta Dl Am X Ev Pd Ym W
           (tf32x3_tc_op_acc_dot_model out rnd ur u ea F kb qb n Hur Hout (ff_u_nonneg _) (ff_abs _) Hk Hq Hn Hd) Ht Hs Hucs Hc HPd HYm HW Hv (tf32x3_tc_op_dot_model out ur F kb qe Ev Hur Hout Hk Hqe HEv Hde) HX Hl HdD Hx).
Qed.

Theorem dk_error_tc_op : forall (out : R -> R) (ur : R) (F : Z) (kb qb qe n : nat)
    vis c cs scale ucs k v e tiles (Lx Dx eD : (list R * list R) * (R * R) -> R) delta Dl Am X Ev Pd eDm Ym W,
  let dotf := tc_dot_op (tc_align_op F) out kb in
  let accf := tc_acc_fn F out kb in
  0 <= ur -> (forall x, Rabs (out x - x) <= ur * Rabs x) ->
  (1 <= kb)%nat -> (1 <= qb)%nat -> (n <= qb * kb)%nat -> INR qb * tc_delta (bpow radix2 (1 - F)) ur kb < 1 ->
  (1 <= qe)%nat -> (Ev <= qe * kb)%nat -> INR qe * tc_delta (bpow radix2 (1 - F)) ur kb < 1 ->
  Forall (fun tl => length tl = n) tiles ->
  0 <= scale -> 0 <= ucs -> Rabs (cs - scale) <= ucs * scale ->
  0 <= Pd -> 0 <= eDm -> 0 <= Ym -> 0 <= W ->
  length v = Ev ->
  Rpower 2 ((delta + Dl) / ln 2 + u * Am + ea) <= X ->
  (forall x, In x (concat tiles) -> vis x = true ->
     Rabs (score2_with A_ dotf c k (fst (fst x)) * ln 2 - scale * dot_R k (fst (fst x))) <= delta
     /\ Rabs (fst (snd x) * ln 2 - Lx x) <= Dl
     /\ Rabs (score2_with A_ dotf c k (fst (fst x)) - fst (snd x)) <= Am
     /\ length (snd (fst x)) = Ev /\ dot_abs v (snd (fst x)) <= Pd
     /\ Rabs (snd (snd x) - Dx x) <= eD x /\ eD x <= eDm
     /\ Rabs (dot_R v (snd (fst x)) - Dx x) <= Ym /\ Rabs (nth e (fst (fst x)) 0) <= W) ->
  let eP := gamma (tc_delta (bpow radix2 (1 - F)) ur kb) qe * Pd + 0 in
  let E := (1 + ue) * X in
  let G := (1 + gamma (tc_delta (bpow radix2 (1 - F)) ur kb) qb) ^ length tiles in
  let Pr := fun x => exp (scale * dot_R k (fst (fst x)) - Lx x) in
  let Y := fun x => dot_R v (snd (fst x)) - Dx x in
  let S1 := rsum (map (fun x => if vis x then Pr x * Rabs (Y x) * Rabs (nth e (fst (fst x)) 0) else 0)
                      (concat tiles)) in
  let SR := rsum (map (fun x => if vis x then Pr x * ((1 + u) * (eP + eD x) + ea) * Rabs (nth e (fst (fst x)) 0)
                                 else 0) (concat tiles)) in
  let eA := gacc_eA G E S1 SR (INR (length (concat tiles))) (gacc_c E Ym ((1 + u) * (eP + eDm) + ea) W)
                    (INR (length tiles)) 0 in
  Rabs (dk_kernel_acc accf dotf dotf vis c cs k v e tiles
        - scale * rsum (map (fun x => if vis x then Pr x * Y x * nth e (fst (fst x)) 0 else 0) (concat tiles)))
  <= grad_bound scale ucs eA S1.
Proof.
  intros out ur F kb qb qe n vis c cs scale ucs k v e tiles Lx Dx eD delta Dl Am X Ev Pd eDm Ym W dotf accf
    Hur Hout Hk Hq Hn Hd Hqe HEv Hde Ht Hs Hucs Hc HPd HeDm HYm HW Hv HX Hx.
  exact (dk_error_acc accf n _ _ dotf dotf _ _ vis c cs scale ucs k v e tiles Lx Dx eD delta Dl Am X Ev Pd eDm Ym W
           (tc_acc_op_dot_model out ur F kb qb n Hur Hout Hk Hq Hn Hd) Ht Hs Hucs Hc HPd HeDm HYm HW Hv (tc_op_dot_model out ur F kb qe Ev Hur Hout Hk Hqe HEv Hde) HX Hx).
Qed.

Theorem dq_error_tc_op : forall (out : R -> R) (ur : R) (F : Z) (kb qb qe n : nat)
    vis c cs scale ucs q dO l2 dl e tiles (Lx D eD : R) delta Dl Am X Ev Pd Ym W,
  let dotf := tc_dot_op (tc_align_op F) out kb in
  let accf := tc_acc_fn F out kb in
  0 <= ur -> (forall x, Rabs (out x - x) <= ur * Rabs x) ->
  (1 <= kb)%nat -> (1 <= qb)%nat -> (n <= qb * kb)%nat -> INR qb * tc_delta (bpow radix2 (1 - F)) ur kb < 1 ->
  (1 <= qe)%nat -> (Ev <= qe * kb)%nat -> INR qe * tc_delta (bpow radix2 (1 - F)) ur kb < 1 ->
  Forall (fun tl => length tl = n) tiles ->
  0 <= scale -> 0 <= ucs -> Rabs (cs - scale) <= ucs * scale ->
  0 <= Pd -> 0 <= Ym -> 0 <= W ->
  length dO = Ev ->
  Rpower 2 ((delta + Dl) / ln 2 + u * Am + ea) <= X ->
  Rabs (l2 * ln 2 - Lx) <= Dl -> Rabs (dl - D) <= eD ->
  (forall y, In y (concat tiles) -> vis y = true ->
     Rabs (score2_with A_ dotf c q (fst y) * ln 2 - scale * dot_R q (fst y)) <= delta
     /\ Rabs (score2_with A_ dotf c q (fst y) - l2) <= Am
     /\ length (snd y) = Ev /\ dot_abs dO (snd y) <= Pd
     /\ Rabs (dot_R dO (snd y) - D) <= Ym /\ Rabs (nth e (fst y) 0) <= W) ->
  let eP := gamma (tc_delta (bpow radix2 (1 - F)) ur kb) qe * Pd + 0 in
  let E := (1 + ue) * X in
  let G := (1 + gamma (tc_delta (bpow radix2 (1 - F)) ur kb) qb) ^ length tiles in
  let Pr := fun y => exp (scale * dot_R q (fst y) - Lx) in
  let Y := fun y => dot_R dO (snd y) - D in
  let S1 := rsum (map (fun y => if vis y then Pr y * Rabs (Y y) * Rabs (nth e (fst y) 0) else 0) (concat tiles)) in
  let SR := rsum (map (fun y => if vis y then Pr y * ((1 + u) * (eP + eD) + ea) * Rabs (nth e (fst y) 0) else 0)
                      (concat tiles)) in
  let eA := gacc_eA G E S1 SR (INR (length (concat tiles))) (gacc_c E Ym ((1 + u) * (eP + eD) + ea) W)
                    (INR (length tiles)) 0 in
  Rabs (dq_kernel_acc accf dotf dotf vis c cs q dO l2 dl e tiles
        - scale * rsum (map (fun y => if vis y then Pr y * Y y * nth e (fst y) 0 else 0) (concat tiles)))
  <= grad_bound scale ucs eA S1.
Proof.
  intros out ur F kb qb qe n vis c cs scale ucs q dO l2 dl e tiles Lx D eD delta Dl Am X Ev Pd Ym W dotf accf
    Hur Hout Hk Hq Hn Hd Hqe HEv Hde Ht Hs Hucs Hc HPd HYm HW Hv HX Hl HdD Hx.
  exact (dq_error_acc accf n _ _ dotf dotf _ _ vis c cs scale ucs q dO l2 dl e tiles Lx D eD delta Dl Am X Ev Pd Ym W
           (tc_acc_op_dot_model out ur F kb qb n Hur Hout Hk Hq Hn Hd) Ht Hs Hucs Hc HPd HYm HW Hv (tc_op_dot_model out ur F kb qe Ev Hur Hout Hk Hqe HEv Hde) HX Hl HdD Hx).
Qed.

(** The blocked fp32 dots: the [_dot] theorems at [blocked_dot_model]. *)
Theorem dk_error : forall vis c cs scale ucs k v e tiles (Lx Dx eD : (list R * list R) * (R * R) -> R)
    delta Dl Am X Ev Pd eDm Ym W b,
  0 <= scale -> 0 <= ucs -> Rabs (cs - scale) <= ucs * scale ->
  0 <= Pd -> 0 <= eDm -> 0 <= Ym -> 0 <= W ->
  length v = Ev -> (1 <= Ev)%nat -> INR Ev * u < 1 ->
  Forall (fun tl => (length tl <= b)%nat) tiles ->
  INR ((b - 1) + (length tiles - 1)) * u < 1 ->
  Rpower 2 ((delta + Dl) / ln 2 + u * Am + ea) <= X ->
  (forall x, In x (concat tiles) -> vis x = true ->
     Rabs (score2 A_ c k (fst (fst x)) * ln 2 - scale * dot_R k (fst (fst x))) <= delta
     /\ Rabs (fst (snd x) * ln 2 - Lx x) <= Dl
     /\ Rabs (score2 A_ c k (fst (fst x)) - fst (snd x)) <= Am
     /\ length (snd (fst x)) = Ev /\ dot_abs v (snd (fst x)) <= Pd
     /\ Rabs (snd (snd x) - Dx x) <= eD x /\ eD x <= eDm
     /\ Rabs (dot_R v (snd (fst x)) - Dx x) <= Ym /\ Rabs (nth e (fst (fst x)) 0) <= W) ->
  let eP := dot_err A_ Ev Pd in
  let E := (1 + ue) * X in
  let g := gamma u ((b - 1) + (length tiles - 1)) in
  let Pr := fun x => exp (scale * dot_R k (fst (fst x)) - Lx x) in
  let Y := fun x => dot_R v (snd (fst x)) - Dx x in
  let S1 := rsum (map (fun x => if vis x then Pr x * Rabs (Y x) * Rabs (nth e (fst (fst x)) 0) else 0)
                      (concat tiles)) in
  let SR := rsum (map (fun x => if vis x then Pr x * ((1 + u) * (eP + eD x) + ea) * Rabs (nth e (fst (fst x)) 0)
                                 else 0) (concat tiles)) in
  let eA := grad_eA g E S1 SR (INR (length (concat tiles))) (grad_c E Ym ((1 + u) * (eP + eDm) + ea) W) in
  Rabs (dk_kernel vis c cs k v e tiles
        - scale * rsum (map (fun x => if vis x then Pr x * Y x * nth e (fst (fst x)) 0 else 0) (concat tiles)))
  <= grad_bound scale ucs eA S1.
Proof.
  intros vis c cs scale ucs k v e tiles Lx Dx eD delta Dl Am X Ev Pd eDm Ym W b
    Hs Hucs Hc HPd HeDm HYm HW Hv HE1 HEu.
  exact (dk_error_dot (bdot A_) (bdot A_) _ _ vis c cs scale ucs k v e tiles Lx Dx eD delta Dl Am X Ev Pd eDm Ym W b
           Hs Hucs Hc HPd HeDm HYm HW Hv (blocked_dot_model A_ Ev HE1 HEu)).
Qed.

Theorem dq_error : forall vis c cs scale ucs q dO l2 dl e tiles (Lx D eD : R)
    delta Dl Am X Ev Pd Ym W b,
  0 <= scale -> 0 <= ucs -> Rabs (cs - scale) <= ucs * scale ->
  0 <= Pd -> 0 <= Ym -> 0 <= W ->
  length dO = Ev -> (1 <= Ev)%nat -> INR Ev * u < 1 ->
  Forall (fun tl => (length tl <= b)%nat) tiles ->
  INR ((b - 1) + (length tiles - 1)) * u < 1 ->
  Rpower 2 ((delta + Dl) / ln 2 + u * Am + ea) <= X ->
  Rabs (l2 * ln 2 - Lx) <= Dl -> Rabs (dl - D) <= eD ->
  (forall y, In y (concat tiles) -> vis y = true ->
     Rabs (score2 A_ c q (fst y) * ln 2 - scale * dot_R q (fst y)) <= delta
     /\ Rabs (score2 A_ c q (fst y) - l2) <= Am
     /\ length (snd y) = Ev /\ dot_abs dO (snd y) <= Pd
     /\ Rabs (dot_R dO (snd y) - D) <= Ym /\ Rabs (nth e (fst y) 0) <= W) ->
  let eP := dot_err A_ Ev Pd in
  let E := (1 + ue) * X in
  let g := gamma u ((b - 1) + (length tiles - 1)) in
  let Pr := fun y => exp (scale * dot_R q (fst y) - Lx) in
  let Y := fun y => dot_R dO (snd y) - D in
  let S1 := rsum (map (fun y => if vis y then Pr y * Rabs (Y y) * Rabs (nth e (fst y) 0) else 0) (concat tiles)) in
  let SR := rsum (map (fun y => if vis y then Pr y * ((1 + u) * (eP + eD) + ea) * Rabs (nth e (fst y) 0) else 0)
                      (concat tiles)) in
  let eA := grad_eA g E S1 SR (INR (length (concat tiles))) (grad_c E Ym ((1 + u) * (eP + eD) + ea) W) in
  Rabs (dq_kernel vis c cs q dO l2 dl e tiles
        - scale * rsum (map (fun y => if vis y then Pr y * Y y * nth e (fst y) 0 else 0) (concat tiles)))
  <= grad_bound scale ucs eA S1.
Proof.
  intros vis c cs scale ucs q dO l2 dl e tiles Lx D eD delta Dl Am X Ev Pd Ym W b
    Hs Hucs Hc HPd HYm HW Hd HE1 HEu.
  exact (dq_error_dot (bdot A_) (bdot A_) _ _ vis c cs scale ucs q dO l2 dl e tiles Lx D eD delta Dl Am X Ev Pd Ym W b
           Hs Hucs Hc HPd HYm HW Hd (blocked_dot_model A_ Ev HE1 HEu)).
Qed.

(** ** Delta *)

Lemma dot_terms_close : forall (l : list (R * R)),
  Rabs (rsum (map (fun xy => rnd (fst xy * snd xy)) l) - rsum (map (fun xy => fst xy * snd xy) l))
  <= u * rsum (map (fun xy => Rabs (fst xy * snd xy)) l) + INR (length l) * ea
  /\ rsum (map Rabs (map (fun xy => rnd (fst xy * snd xy)) l))
     <= (1 + u) * rsum (map (fun xy => Rabs (fst xy * snd xy)) l) + INR (length l) * ea.
Proof.
  induction l as [|xy l [IH1 IH2]].
  - unfold rsum; simpl; rewrite Rminus_0_r, Rabs_R0; lra.
  - cbn [map length]; rewrite !rsum_cons, S_INR.
    pose proof (ff_abs A_ (fst xy * snd xy)) as Hr.
    pose proof (ag_abs_le _ _ _ Hr).
    split; [| lra].
    match goal with |- Rabs (?a + ?b - (?c + ?d)) <= _ =>
      replace (a + b - (c + d)) with ((a - c) + (b - d)) by ring end.
    eapply Rle_trans; [apply Rabs_triang | lra].
Qed.

(** The dQ kernel's [delta = tl.sum (o * dO)]: the [Ev] products rounded
    to fp32 (exact for 16-bit operands), reduced by any tree of depth at
    most [D] (any reduction order of [Ev] terms has depth at most
    [Ev - 1]), against the real [dO . o] of the stored [o]. *)
Theorem delta_close : forall (shape : stree) (o d : list R) D,
  leaves shape = dot_terms A_ o d -> (depth shape <= D)%nat -> INR D * u < 1 ->
  let n := INR (length (combine o d)) in
  Rabs (tree_sum A_ shape - dot_R o d)
  <= gamma u D * ((1 + u) * dot_abs o d + n * ea) + u * dot_abs o d + n * ea.
Proof.
  intros shape o d D Hl HD Hu n.
  pose proof (ff_u_nonneg A_) as Hu0.
  assert (Hf : Forall (ff_fmt A_) (leaves shape)).
  { rewrite Hl; apply Forall_forall; intros z Hz; unfold dot_terms in Hz; apply in_map_iff in Hz.
    destruct Hz as [xy [<- _]]; apply ff_rnd_fmt. }
  destruct (tree_sum_ok A_ shape Hf) as [_ Ht].
  unfold close in Ht; rewrite Hl in Ht.
  destruct (dot_terms_close (combine o d)) as [H1 H2].
  unfold dot_terms, abs_sum in Ht; fold n in H1, H2.
  assert (Hp : (1 + u) ^ depth shape - 1 <= gamma u D).
  { eapply Rle_trans; [| apply pow_le_gamma; assumption].
    assert ((1 + u) ^ depth shape <= (1 + u) ^ D) by (apply Rle_pow; [lra | exact HD]). lra. }
  assert (Hp0 : 0 <= (1 + u) ^ depth shape - 1) by (pose proof (pow_R1_Rle (1 + u) (depth shape)); lra).
  set (ts := map (fun xy => rnd (fst xy * snd xy)) (combine o d)) in *.
  assert (Ha : 0 <= rsum (map Rabs ts))
    by (apply rsum_nonneg; intros z Hz; apply in_map_iff in Hz; destruct Hz as [w' [<- _]]; apply Rabs_pos).
  replace (tree_sum A_ shape - dot_R o d) with ((tree_sum A_ shape - rsum ts) + (rsum ts - dot_R o d)) by ring.
  eapply Rle_trans; [apply Rabs_triang |].
  unfold dot_R, dot_abs in *.
  assert (((1 + u) ^ depth shape - 1) * rsum (map Rabs ts) <= gamma u D * rsum (map Rabs ts))
    by (apply Rmult_le_compat_r; lra).
  assert (0 <= gamma u D) by lra.
  assert (gamma u D * rsum (map Rabs ts)
          <= gamma u D * ((1 + u) * rsum (map (fun xy => Rabs (fst xy * snd xy)) (combine o d)) + n * ea))
    by (apply Rmult_le_compat_l; lra).
  lra.
Qed.

(** The stored output [o] against the exact [O]: [|dO . o - dO . O| <= e sum_c |dO_c|]
    when every coordinate is within [e]. *)
Theorem dot_R_perturb : forall o O d e, 0 <= e -> length o = length O ->
  (forall i, (i < length o)%nat -> Rabs (nth i o 0 - nth i O 0) <= e) ->
  Rabs (dot_R o d - dot_R O d) <= e * rsum (map Rabs d).
Proof.
  induction o as [|x o IH]; intros [|y O] d e He Hl H; try discriminate.
  - unfold dot_R; cbn [combine map]; unfold rsum; simpl; rewrite Rminus_0_r, Rabs_R0.
    apply Rmult_le_pos; [exact He |].
    apply rsum_nonneg; intros z Hz; apply in_map_iff in Hz; destruct Hz as [w' [<- _]]; apply Rabs_pos.
  - destruct d as [|z d].
    + unfold dot_R; cbn [combine map]; unfold rsum; simpl; rewrite Rminus_0_r, Rabs_R0; lra.
    + unfold dot_R in *; cbn [combine map]; rewrite !rsum_cons; cbn [fst snd].
      assert (Hx : Rabs (x - y) <= e) by exact (H 0%nat ltac:(simpl; lia)).
      assert (IHo : Rabs (rsum (map (fun xy => fst xy * snd xy) (combine o d))
                          - rsum (map (fun xy => fst xy * snd xy) (combine O d))) <= e * rsum (map Rabs d)).
      { apply IH; [exact He | simpl in Hl; lia |].
        intros i Hi; exact (H (S i) ltac:(simpl; lia)). }
      replace (x * z + rsum (map (fun xy => fst xy * snd xy) (combine o d))
               - (y * z + rsum (map (fun xy => fst xy * snd xy) (combine O d))))
        with ((x - y) * z + (rsum (map (fun xy => fst xy * snd xy) (combine o d))
                             - rsum (map (fun xy => fst xy * snd xy) (combine O d)))) by ring.
      eapply Rle_trans; [apply Rabs_triang |]; rewrite Rabs_mult.
      assert (Rabs (x - y) * Rabs z <= e * Rabs z) by (apply Rmult_le_compat_r; [apply Rabs_pos | exact Hx]).
      lra.
Qed.

End Grad.
