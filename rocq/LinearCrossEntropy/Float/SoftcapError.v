(** * The chunked linear cross-entropy with a final-logit softcap, in fp32, as the kernel computes it.

    kernels/ojas_kernels/linear_cross_entropy_kernels.py, [_softcap] (through [_logits_of], HAS_CAP): each raw
    fp32 logit [r] (the logits buffer upcast, or the Triton dots' accumulator) becomes
      z = rnd (c * th r),   th r = 1.0 - 2.0 / (tl.exp (tl.minimum (2.0 * r / c, 80.0)) + 1.0)
    (Gemma 2/3's [final_logit_softcapping]: [c tanh (r / c)], Definitions.v's [softcap]
    with [sc_tanh]).  The model keeps the last product's rounding ([rnd (c * th r)]) and
    takes the computed tanh [th] (the argument's scaling, the clamp at 80, [tl.exp], the
    addition, the division and [1 - .], all in fp32) as a premise, like the exp/log
    premises of LinearCrossEntropy/Float/LseLossError.v, to be measured on the device:
      [|th r - tanh (r / c)| <= ut |tanh (r / c)| + et] for every fp32 [r].

    Results:
    - [sc_tanh_lt_1]: [|tanh x| < 1].
    - [softcap_lipschitz]: the softcap is 1-Lipschitz,
      [|c tanh (a / c) - c tanh (b / c)| <= |a - b|] for [c > 0] (mean value theorem on
      Gradient.v's [softcap_is_derive]; [0 <= 1 - tanh^2 <= 1]).
    - [sc_logit_error]: with [|r - y| <= dr] (the raw logit's error against the exact
      [y = h . w_v], the [delta] of LinearCrossEntropy/Float/LseLossError.v for the raw logits),
        |rnd (c * th r) - c tanh (y / c)| <= sc_delta = dr + c (ut + et) + u c (1 + ut + et) + ea,
        |rnd (c * th r)| <= sc_zmax = (1 + u) c (1 + ut + et) + ea:
      the [delta] and [Zmax] that [ce_lse_error] consumes.
    - [ce_lse_error_softcap]: [_rows_kernel] with STREAM and HAS_CAP (the 3-product
      schedule; [fwd_logits = "cublas"]): every raw logit of every tile capped as above,
      then [ce_run]; the lse against [ln sum_v e^(c tanh (y_v / c))] within
      [ce_lse_bound u el sc_zmax LN NL sc_delta].
    - [ce_loss_error_softcap]: the loss [rnd (lse - z_t)] with the capped target logit
      [z_t = rnd (c * th r_t)] (the kernel sums the capped tile entries at the target, the
      others exact zeros) against [ln sum e^(c tanh (y / c)) - c tanh (y_t / c)].
    - [ce_lse_error_two_level_softcap]: the two-level schedule (4 products), where
      [_logits_kernel] caps its accumulator's logits before streaming them.

    - [sc_chain_error]: the gradient's chain factor [1.0 - zc * zc], [zc = z / c] computed
      by [_grad_tile] (the division [dv] within [ud |z / c| + ed], a premise; the product
      rounded or contracted into an FMA, [sc_chain_ok]), for a capped logit [z] within [dz]
      of [c tanh (y / c)], against the exact [1 - tanh (y / c)^2] (Gradient.v's
      [softcap_grad]): within [sc_chain_bound] (absolute: [1 - tanh^2] may be tiny).

    The capped gradients dH and dW, with [sc_chain_error] and the capped streamed lse composed
    in, are LinearCrossEntropy/Float/SoftcapGradChainError.v's [sc_dw_error_from_lse] /
    [sc_dh_error_from_lse] (computed by Bounds/LinearCrossEntropySoftcapChain.v's [sc_grad_chain_q]).

    Not covered: the bias (added before
    the cap), label smoothing, z-loss; FMA contraction of [c * th]; overflow; the computed
    tanh itself (a premise, measured by [measured_tanh_error] of
    ojas_ref/verification/linear_cross_entropy_error.py, not proved from the exp and division errors). *)

From Coq Require Import Reals List Lra.
From Coquelicot Require Import Coquelicot.
From Ojas Require Import ScalarOps VectorFacts LinearCrossEntropy.Definitions LinearCrossEntropy.Gradient.
From Ojas Require Import FloatModel.MixedPrecision LinearCrossEntropy.Float.LseLossError.
From Ojas Require Import FloatModel.Notations.
Import ListNotations.
Open Scope R_scope.

(** ** Over the reals: the softcap is 1-Lipschitz *)

Lemma sc_tanh_lt_1 : forall x, Rabs (tanh x) < 1.
Proof.
  intros x; unfold tanh, sinh, cosh.
  pose proof (exp_pos x) as HA; pose proof (exp_pos (- x)) as HB.
  set (A := exp x) in *; set (B := exp (- x)) in *.
  replace ((A - B) / 2 / ((A + B) / 2)) with ((A - B) * / (A + B)) by (field; lra).
  assert (HI : (A + B) * / (A + B) = 1) by (apply Rinv_r; lra).
  pose proof (Rinv_0_lt_compat (A + B) ltac:(lra)) as Hi.
  apply Rabs_def1; nra.
Qed.

Lemma sc_softcap_derive : forall c x, 0 < c ->
  derivable_pt_lim (fun r => c * tanh (r / c)) x (1 - tanh (x / c) ^ 2).
Proof.
  intros c x Hc; apply is_derive_Reals.
  pose proof (softcap_is_derive (Some c) x ltac:(intros c' E; injection E; lra)) as H.
  eapply is_derive_ext in H; [| intros r; apply softcap_tanh].
  replace (1 - tanh (x / c) ^ 2) with (softcap_grad R_ops (Some c) x); [exact H |].
  unfold softcap_grad; rewrite sc_tanh_R; cbn -[tanh]; ring.
Qed.

Theorem softcap_lipschitz : forall c a b, 0 < c ->
  Rabs (c * tanh (a / c) - c * tanh (b / c)) <= Rabs (a - b).
Proof.
  intros c a b Hc.
  assert (Hk : forall x, 0 <= 1 - tanh (x / c) ^ 2 <= 1).
  { intros x; pose proof (sc_tanh_lt_1 (x / c)) as Ht.
    assert (tanh (x / c) ^ 2 = Rabs (tanh (x / c)) * Rabs (tanh (x / c))) by (rewrite <- Rabs_mult, Rabs_right; [ring | nra]).
    pose proof (Rabs_pos (tanh (x / c))); nra. }
  assert (Hm : forall a b, a < b -> Rabs (c * tanh (a / c) - c * tanh (b / c)) <= Rabs (a - b)).
  { intros a0 b0 Hab.
    destruct (MVT_cor2 _ _ a0 b0 Hab (fun x _ => sc_softcap_derive c x Hc)) as [x [E _]].
    rewrite <- Rabs_Ropp, Ropp_minus_distr, E, Rabs_mult, <- (Rabs_Ropp (a0 - b0)), Ropp_minus_distr.
    destruct (Hk x) as [K0 K1]; rewrite (Rabs_right (1 - _)) by lra.
    pose proof (Rabs_pos (b0 - a0)); nra. }
  destruct (Rtotal_order a b) as [Hab | [<- | Hab]].
  - apply Hm, Hab.
  - rewrite !Rminus_diag_eq by reflexivity; lra.
  - rewrite <- Rabs_Ropp, Ropp_minus_distr, <- (Rabs_Ropp (a - b)), Ropp_minus_distr; apply Hm, Hab.
Qed.

(** ** The computed capped logit *)

Definition sc_delta (u ea c ut et dr : R) : R := dr + c * (ut + et) + u * (c * (1 + ut + et)) + ea.
Definition sc_zmax (u ea c ut et : R) : R := (1 + u) * (c * (1 + ut + et)) + ea.

(** The chain factor's error for a capped logit within [dz]: [e] bounds [|z / c - tanh|]
    after the division, [e2] the square's. *)
Definition sc_chain_bound (u ea c ud ed dz : R) : R :=
  let e := dz / c + ud * (1 + dz / c) + ed in
  let e2 := e * (2 + e) + u * (1 + e) ^ 2 + ea in
  (1 + u) * e2 + u + ea.

Section Softcap.

Variable M : MixedModel.

Import ModelNotations.

(** The cap [c] and the kernel's computed [tanh (r / c)]: assumptions. *)
Variable c : R.
Hypothesis c_pos : 0 < c.
Variable th : R -> R.
Variables ut et : R.
Hypothesis ut_nonneg : 0 <= ut.
Hypothesis et_nonneg : 0 <= et.
Hypothesis th_err : forall r, fmt r -> Rabs (th r - tanh (r / c)) <= ut * Rabs (tanh (r / c)) + et.

(** [_softcap]: the capped logit of the raw fp32 logit [r]. *)
Definition sc_z (r : R) : R := rnd (c * th r).

Theorem sc_logit_error : forall r y dr, fmt r -> Rabs (r - y) <= dr ->
  Rabs (sc_z r - c * tanh (y / c)) <= sc_delta u ea c ut et dr /\ Rabs (sc_z r) <= sc_zmax u ea c ut et.
Proof.
  intros r y dr Fr Hr; unfold sc_z, sc_delta, sc_zmax.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (ff_eta_nonneg A_) as Hea.
  pose proof (th_err r Fr) as Ht.
  pose proof (sc_tanh_lt_1 (r / c)) as H1.
  set (T := tanh (r / c)) in *.
  assert (HT : Rabs (th r - T) <= ut + et) by (assert (ut * Rabs T <= ut * 1) by (apply Rmult_le_compat_l; lra); lra).
  assert (Hth : Rabs (th r) <= 1 + ut + et).
  { replace (th r) with ((th r - T) + T) by ring; pose proof (Rabs_triang (th r - T) T); lra. }
  assert (Hc : Rabs (c * th r) <= c * (1 + ut + et))
    by (rewrite Rabs_mult, (Rabs_right c) by lra; apply Rmult_le_compat_l; lra).
  pose proof (ff_abs A_ (c * th r)) as Hrnd.
  assert (Hu1 : u * Rabs (c * th r) <= u * (c * (1 + ut + et))) by (apply Rmult_le_compat_l; lra).
  split.
  - assert (E1 : Rabs (c * th r - c * T) <= c * (ut + et))
      by (rewrite <- Rmult_minus_distr_l, Rabs_mult, (Rabs_right c) by lra; apply Rmult_le_compat_l; lra).
    pose proof (softcap_lipschitz c r y c_pos) as E2; fold T in E2.
    replace (rnd (c * th r) - c * tanh (y / c))
      with ((rnd (c * th r) - c * th r) + (c * th r - c * T) + (c * T - c * tanh (y / c))) by ring.
    pose proof (Rabs_triang ((rnd (c * th r) - c * th r) + (c * th r - c * T)) (c * T - c * tanh (y / c))).
    pose proof (Rabs_triang (rnd (c * th r) - c * th r) (c * th r - c * T)).
    lra.
  - replace (rnd (c * th r)) with ((rnd (c * th r) - c * th r) + c * th r) by ring.
    pose proof (Rabs_triang (rnd (c * th r) - c * th r) (c * th r)); nra.
Qed.

(** The raw logit [r = fst] (fp32, as read or accumulated) and its exact value [y = snd],
    capped: the pair the lse theorems consume. *)
Definition sc_pair (ry : R * R) : R * R := (sc_z (fst ry), c * tanh (snd ry / c)).

Lemma sc_pairs_ok : forall (rys : list (R * R)) dr,
  (forall ry, In ry rys -> fmt (fst ry) /\ Rabs (fst ry - snd ry) <= dr) ->
  forall zy, In zy (map sc_pair rys) ->
    fmt (fst zy) /\ Rabs (fst zy) <= sc_zmax u ea c ut et /\ Rabs (fst zy - snd zy) <= sc_delta u ea c ut et dr.
Proof.
  intros rys dr H zy Hi; apply in_map_iff in Hi; destruct Hi as [ry [<- Hi]].
  destruct (H ry Hi) as [F D]; destruct (sc_logit_error (fst ry) (snd ry) dr F D) as [E Z].
  split; [apply ff_rnd_fmt | split; [exact Z | exact E]].
Qed.

Lemma sc_tiles_len : forall (A B : Type) (f : A -> B) (Bt : nat) (tiles : list (list A)),
  List.Forall (fun tl => (length tl <= Bt)%nat) tiles -> List.Forall (fun tl => (length tl <= Bt)%nat) (map (map f) tiles).
Proof.
  intros A B f Bt tiles HB; rewrite List.Forall_forall in HB |- *; intros tl Hi.
  apply in_map_iff in Hi; destruct Hi as [tl' [<- Hi]]; rewrite map_length; apply HB, Hi.
Qed.

(** The kernel's [tl.exp] and [tl.log], as in LinearCrossEntropy/Float/LseLossError.v. *)
Variable ex : R -> R.
Variables ue ee : R.
Hypothesis ue_nonneg : 0 <= ue.
Hypothesis ee_nonneg : 0 <= ee.
Hypothesis ex_err : forall x, x <= 0 -> Rabs (ex x - exp x) <= ue * exp x + ee.
Variable lg : R -> R.
Variables el lmin lmax : R.
Hypothesis lg_fmt : forall x, fmt (lg x).
Hypothesis lg_err : forall x, fmt x -> lmin <= x <= lmax -> Rabs (lg x - ln x) <= el.

(** [_rows_kernel] with STREAM and HAS_CAP: the tiles of raw logits, each capped, then
    the online max and rescaled sum from the first capped logit. *)
Theorem ce_lse_error_softcap : forall (ry0 : R * R) (tiles : list (list (R * R))) ts (Dt Bt Tt Nn : nat)
    dr XK LN NL,
  let Zmax := sc_zmax u ea c ut et in
  let st := ce_run M ex (R * R) fst (fun _ => 1) ts (sc_z (fst ry0), 0) (map (map sc_pair) tiles) in
  let bL := ce_bL u ue ee ea XK Dt Bt Tt Nn in
  In ry0 (concat tiles) -> sum_ok M ts Dt Bt ->
  List.Forall (fun tl => (length tl <= Bt)%nat) tiles -> (length tiles <= Tt)%nat -> (length (concat tiles) <= Nn)%nat ->
  (forall ry, In ry (concat tiles) -> fmt (fst ry) /\ Rabs (fst ry - snd ry) <= dr) ->
  exp (u * (2 * Zmax)) <= XK -> bL < 1 -> ln (INR Nn) <= LN -> - ln (1 - bL) <= NL ->
  lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  Rabs (rnd (fst st + lg (snd st)) - ln (rsum (map (fun ry => exp (c * tanh (snd ry / c))) (concat tiles))))
  <= ce_lse_bound u el Zmax LN NL (sc_delta u ea c ut et dr).
Proof.
  intros ry0 tiles ts Dt Bt Tt Nn dr XK LN NL Zmax st bL H0 Hts HB HT HN Hr HXK HbL HLN HNL Hlmin Hlmax.
  assert (Ec : concat (map (map sc_pair) tiles) = map sc_pair (concat tiles)) by (symmetry; apply concat_map).
  assert (Es : rsum (map (fun ry => exp (c * tanh (snd ry / c))) (concat tiles))
               = rsum (map (fun zy => exp (snd zy)) (concat (map (map sc_pair) tiles))))
    by (rewrite Ec, map_map; reflexivity).
  rewrite Es.
  apply (ce_lse_error M ex ue ee ue_nonneg ee_nonneg ex_err lg el lmin lmax lg_fmt lg_err (sc_pair ry0)
           (map (map sc_pair) tiles) ts Dt Bt Tt Nn Zmax XK (sc_delta u ea c ut et dr) LN NL).
  - rewrite Ec; apply in_map, H0.
  - exact Hts.
  - apply sc_tiles_len, HB.
  - rewrite map_length; exact HT.
  - rewrite Ec, map_length; exact HN.
  - rewrite Ec; apply sc_pairs_ok, Hr.
  - exact HXK.
  - exact HbL.
  - exact HLN.
  - exact HNL.
  - exact Hlmin.
  - exact Hlmax.
Qed.

(** The loss [rnd (lse - z_t)] at [eps = lam = 0] with the capped target logit. *)
Theorem ce_loss_error_softcap : forall lse rt yt LSE B dr,
  fmt lse -> fmt rt -> Rabs (lse - LSE) <= B -> Rabs (rt - yt) <= dr ->
  Rabs (rnd (lse - sc_z rt) - (LSE - c * tanh (yt / c)))
  <= (1 + u) * (B + sc_delta u ea c ut et dr) + u * Rabs (LSE - c * tanh (yt / c)).
Proof.
  intros lse rt yt LSE B dr Fl Fr HB Hd.
  destruct (sc_logit_error rt yt dr Fr Hd) as [E _].
  apply (ce_loss_error M lse (sc_z rt) (c * tanh (yt / c)) LSE B); [exact Fl | apply ff_rnd_fmt | exact HB | exact E].
Qed.

(** A group of raw tiles, capped ([_logits_kernel] applies [_logits_of] to its accumulator). *)
Definition sc_group (g : list (list (R * R))) : list (list (R * R)) := map (map sc_pair) g.

Lemma sc_concat_group : forall g, concat (sc_group g) = map sc_pair (concat g).
Proof. intros g; unfold sc_group; symmetry; apply concat_map. Qed.

Lemma sc_concat_groups : forall (gs : list (list (list (R * R)))),
  concat (map (@concat _) (map sc_group gs)) = map sc_pair (concat (map (@concat _) gs)).
Proof.
  induction gs as [| g gs IH]; [reflexivity |].
  cbn [map concat]; rewrite map_app, sc_concat_group, IH; reflexivity.
Qed.

(** The two-level schedule (4 products): each [_logits_kernel] STATS program caps its
    group's raw logits and streams them ([grp_state] with [ts1]), [_rows_kernel] merges
    the groups' states ([ts2]). *)
Theorem ce_lse_error_two_level_softcap : forall ts1 (g0 : list (list (R * R)))
    (tiles2 : list (list (list (list (R * R))))) ts2 (Dt1 Bt1 T1 N1 Dt2 Bt2 T2 Nn : nat) dr XK LN NL,
  let Zmax := sc_zmax u ea c ut et in
  let C1 := ce_H u ue XK 1 Dt1 * ce_Q u ue ^ T1 * XK in
  let R1 := INR T1 * ce_a u ue ee XK ^ T1 * ce_b u ue ee ea XK 1 0 1 Dt1 Bt1 T1 N1 in
  let C2 := ce_H u ue XK C1 Dt2 * ce_Q u ue ^ T2 * XK in
  let R2 := INR T2 * ce_a u ue ee XK ^ T2 * ce_b u ue ee ea XK C1 R1 (INR N1) Dt2 Bt2 T2 Nn in
  let bL := C2 - 1 + R2 in
  let st := ce_run M ex (list (list (R * R))) (grp_m M ex ts1) (grp_l M ex ts1) ts2
                   (grp_m M ex ts1 (sc_group g0), 0) (map (map sc_group) tiles2) in
  let rs := concat (map (@concat _) (concat tiles2)) in
  In g0 (concat tiles2) -> sum_ok M ts1 Dt1 Bt1 -> sum_ok M ts2 Dt2 Bt2 ->
  (forall g, In g (concat tiles2) -> concat g <> [] /\ List.Forall (fun tl => (length tl <= Bt1)%nat) g
                                    /\ (length g <= T1)%nat /\ (length (concat g) <= N1)%nat) ->
  List.Forall (fun tl => (length tl <= Bt2)%nat) tiles2 -> (length tiles2 <= T2)%nat ->
  (length (concat tiles2) <= Nn)%nat ->
  (forall ry, In ry rs -> fmt (fst ry) /\ Rabs (fst ry - snd ry) <= dr) ->
  exp (u * (2 * Zmax)) <= XK -> bL < 1 -> ln (INR (length rs)) <= LN -> - ln (1 - bL) <= NL ->
  lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  Rabs (rnd (fst st + lg (snd st)) - ln (rsum (map (fun ry => exp (c * tanh (snd ry / c))) rs)))
  <= ce_lse_bound u el Zmax LN NL (sc_delta u ea c ut et dr).
Proof.
  intros ts1 g0 tiles2 ts2 Dt1 Bt1 T1 N1 Dt2 Bt2 T2 Nn dr XK LN NL Zmax C1 R1 C2 R2 bL st rs
    H0 Hts1 Hts2 Hg HB2 HT2 HN2 Hr HXK HbL HLN HNL Hlmin Hlmax.
  assert (Ec2 : concat (map (map sc_group) tiles2) = map sc_group (concat tiles2)) by (symmetry; apply concat_map).
  assert (Ezs : concat (map (@concat _) (concat (map (map sc_group) tiles2))) = map sc_pair rs)
    by (rewrite Ec2; apply sc_concat_groups).
  assert (Es : rsum (map (fun ry => exp (c * tanh (snd ry / c))) rs)
               = rsum (map (fun zy => exp (snd zy)) (concat (map (@concat _) (concat (map (map sc_group) tiles2))))))
    by (rewrite Ezs, map_map; reflexivity).
  rewrite Es.
  apply (ce_lse_error_two_level M ex ue ee ue_nonneg ee_nonneg ex_err lg el lmin lmax lg_fmt lg_err ts1 (sc_group g0)
           (map (map sc_group) tiles2) ts2 Dt1 Bt1 T1 N1 Dt2 Bt2 T2 Nn Zmax XK (sc_delta u ea c ut et dr) LN NL).
  - rewrite Ec2; apply in_map, H0.
  - exact Hts1.
  - exact Hts2.
  - rewrite Ec2; intros g Hi; apply in_map_iff in Hi; destruct Hi as [g' [<- Hi]].
    destruct (Hg g' Hi) as [Hne [HB [HT HN]]]; rewrite sc_concat_group.
    split; [destruct (concat g'); [congruence | discriminate] |].
    split; [apply sc_tiles_len, HB | unfold sc_group; rewrite map_length, map_length; split; [exact HT | exact HN]].
  - apply sc_tiles_len, HB2.
  - rewrite map_length; exact HT2.
  - rewrite Ec2, map_length; exact HN2.
  - rewrite Ezs; apply sc_pairs_ok, Hr.
  - exact HXK.
  - exact HbL.
  - rewrite Ezs, map_length; exact HLN.
  - exact HNL.
  - exact Hlmin.
  - exact Hlmax.
Qed.

(** ** The gradient's chain factor [1 - (z / c)^2] ([_grad_tile], HAS_CAP) *)

(** The kernel's [z / c] in float32 (Triton's division; on NVIDIA GPUs [div.full.f32],
    within 2 ulp): an assumption. *)
Variable dv : R -> R.
Variables ud ed : R.
Hypothesis ud_nonneg : 0 <= ud.
Hypothesis ed_nonneg : 0 <= ed.
Hypothesis dv_err : forall z, fmt z -> Rabs (dv z - z / c) <= ud * Rabs (z / c) + ed.

(** [1.0 - zc * zc] with [zc = dv z]: the product rounded, or contracted into an FMA. *)
Definition sc_chain_ok (z cf : R) : Prop :=
  cf = rnd (1 - rnd (dv z * dv z)) \/ cf = rnd (1 - dv z * dv z).

Theorem sc_chain_error : forall z y dz cf, fmt z -> Rabs (z - c * tanh (y / c)) <= dz -> sc_chain_ok z cf ->
  Rabs (cf - (1 - tanh (y / c) ^ 2)) <= sc_chain_bound u ea c ud ed dz.
Proof.
  intros z y dz cf Fz Hz Hcf; unfold sc_chain_bound; cbv zeta.
  pose proof (ff_u_nonneg A_) as Hu; pose proof (ff_eta_nonneg A_) as Hea.
  pose proof (sc_tanh_lt_1 (y / c)) as Ht1.
  set (t := tanh (y / c)) in *.
  assert (Hdz : 0 <= dz) by (pose proof (Rabs_pos (z - c * t)); lra).
  assert (Hdc : 0 <= dz / c) by (apply Rmult_le_pos; [lra | left; apply Rinv_0_lt_compat; lra]).
  assert (H1 : Rabs (z / c - t) <= dz / c).
  { replace (z / c - t) with ((z - c * t) / c) by (field; lra).
    unfold Rdiv; rewrite Rabs_mult, (Rabs_right (/ c)) by (left; apply Rinv_0_lt_compat; lra).
    apply Rmult_le_compat_r; [left; apply Rinv_0_lt_compat; lra | exact Hz]. }
  assert (H2 : Rabs (z / c) <= 1 + dz / c).
  { replace (z / c) with ((z / c - t) + t) by ring; pose proof (Rabs_triang (z / c - t) t); lra. }
  pose proof (dv_err z Fz) as H3.
  set (q := dv z) in *.
  set (e := dz / c + ud * (1 + dz / c) + ed).
  assert (He0 : 0 <= e) by (unfold e; assert (0 <= ud * (1 + dz / c)) by (apply Rmult_le_pos; lra); lra).
  assert (Hqt : Rabs (q - t) <= e).
  { assert (ud * Rabs (z / c) <= ud * (1 + dz / c)) by (apply Rmult_le_compat_l; lra).
    replace (q - t) with ((q - z / c) + (z / c - t)) by ring; pose proof (Rabs_triang (q - z / c) (z / c - t)).
    unfold e; lra. }
  assert (Hq : Rabs q <= 1 + e) by (replace q with ((q - t) + t) by ring; pose proof (Rabs_triang (q - t) t); lra).
  assert (Hq2 : Rabs (q * q - t ^ 2) <= e * (2 + e)).
  { replace (q * q - t ^ 2) with ((q - t) * (q + t)) by ring; rewrite Rabs_mult.
    assert (Rabs (q + t) <= 2 + e) by (replace (q + t) with ((q - t) + 2 * t) by ring;
      pose proof (Rabs_triang (q - t) (2 * t)); rewrite Rabs_mult, (Rabs_right 2) in * by lra; lra).
    apply Rmult_le_compat; auto using Rabs_pos. }
  assert (Hqq : q * q <= (1 + e) ^ 2).
  { assert (q * q = Rabs q * Rabs q) by (rewrite <- Rabs_mult; symmetry; apply Rabs_right; nra).
    pose proof (Rabs_pos q); nra. }
  assert (Ht2 : 0 <= 1 - t ^ 2 <= 1).
  { assert (t ^ 2 = Rabs t * Rabs t) by (rewrite <- Rabs_mult, Rabs_right; [ring | nra]).
    pose proof (Rabs_pos t); nra. }
  set (e2 := e * (2 + e) + u * (1 + e) ^ 2 + ea).
  assert (Hee : e * (2 + e) <= e2) by (unfold e2; assert (0 <= u * (1 + e) ^ 2) by (apply Rmult_le_pos; [lra | apply pow_le; lra]); lra).
  destruct Hcf as [-> | ->]; fold q.
  - pose proof (ff_abs A_ (q * q)) as Hp.
    rewrite (Rabs_right (q * q)) in Hp by nra.
    set (p := rnd (q * q)) in *.
    assert (Hpt : Rabs (p - t ^ 2) <= e2).
    { assert (u * (q * q) <= u * (1 + e) ^ 2) by (apply Rmult_le_compat_l; lra).
      replace (p - t ^ 2) with ((p - q * q) + (q * q - t ^ 2)) by ring;
        pose proof (Rabs_triang (p - q * q) (q * q - t ^ 2)); unfold e2; lra. }
    pose proof (ff_abs A_ (1 - p)) as Hs.
    assert (H1p : Rabs (1 - p) <= 1 + e2).
    { replace (1 - p) with ((1 - t ^ 2) + - (p - t ^ 2)) by ring; pose proof (Rabs_triang (1 - t ^ 2) (- (p - t ^ 2))).
      rewrite Rabs_Ropp in *; rewrite (Rabs_right (1 - t ^ 2)) in * by lra; lra. }
    assert (u * Rabs (1 - p) <= u * (1 + e2)) by (apply Rmult_le_compat_l; lra).
    replace (rnd (1 - p) - (1 - t ^ 2)) with ((rnd (1 - p) - (1 - p)) + - (p - t ^ 2)) by ring.
    pose proof (Rabs_triang (rnd (1 - p) - (1 - p)) (- (p - t ^ 2))); rewrite Rabs_Ropp in *; nra.
  - pose proof (ff_abs A_ (1 - q * q)) as Hs.
    assert (H1p : Rabs (1 - q * q) <= 1 + e * (2 + e)).
    { replace (1 - q * q) with ((1 - t ^ 2) + - (q * q - t ^ 2)) by ring;
        pose proof (Rabs_triang (1 - t ^ 2) (- (q * q - t ^ 2))).
      rewrite Rabs_Ropp in *; rewrite (Rabs_right (1 - t ^ 2)) in * by lra; lra. }
    assert (u * Rabs (1 - q * q) <= u * (1 + e2)) by (apply Rmult_le_compat_l; lra).
    replace (rnd (1 - q * q) - (1 - t ^ 2)) with ((rnd (1 - q * q) - (1 - q * q)) + - (q * q - t ^ 2)) by ring.
    pose proof (Rabs_triang (rnd (1 - q * q) - (1 - q * q)) (- (q * q - t ^ 2))); rewrite Rabs_Ropp in *; nra.
Qed.

End Softcap.
