(** * Computable bounds of the chunked linear cross-entropy's streamed lse.

    - [ce_lse_q]: the bound [ce_lse_bound] of
      [LinearCrossEntropy.Float.LseLossError.ce_lse_error_up] on the chunked linear
      cross-entropy's streamed lse ([exp (2 u Zmax) <= XK] by [exp_up], the
      powers by [pow_up_N], [ln V <= LN] by [exp_dn], [NL = bL / (1 - bL)]);
      [ce_lse_q_sound]; its checks are [ce_ok] ([ce_ok_spec]);
    - [ce_merge_lse_q]: the same bound for the two-level schedule
      ([ce_lse_error_two_level]: the groups' streamed states merged), its
      levels [ce_level_q] ([ce_lvl_C_q], [ce_lvl_R_q] at certified powers, each
      rounded up; they grow with the level's inputs, [ce_lvl_mono], so the
      first level's rounded-up values may enter the second: [ce_level_q_ge]);
      [ce_merge_lse_q_sound]. *)

From Coq Require Import Reals QArith Qreals Lra Lia ZArith List.
From Ojas Require Import FloatModel.MixedPrecision Attention.Float.OnlineSoftmaxTile LinearCrossEntropy.Float.LseLossError.
From Ojas Require Import Attention.Float.ForwardError Attention.Float.SavedLseError.
From Ojas Require Import Bounds.Rational Bounds.Sums Bounds.Softmax Bounds.Attention.

Local Open Scope Q_scope.
Local Open Scope R_scope.

(** ** The chunked linear cross-entropy's streamed lse: the value of [ce_lse_bound] *)

Local Open Scope Q_scope.

(** One level of the tile loop ([ce_run_gen] after at most [Tt] tiles of [Bt] items, tile
    sums of depth [Dt], [Nn] items of factor [ci], term [ri], exact values at most [Nx]):
    its factor [ce_H Q^Tt XK] and its term [Tt a^Tt ce_b] (LinearCrossEntropy/Float/LseLossError.v), at
    upper bounds [P1], [QT], [AT] of [(1 + u)^Dt], [ce_Q^Tt], [ce_a^Tt]. *)
Definition ce_lvl_C_q (u ue XK ci P1 QT : Q) : Q := P1 * (ci * ((1 + ue) * XK) * (1 + u)) * QT * XK.

Definition ce_lvl_R_q (u ue ee ea XK ci ri Nx P1 QT AT : Q) (Bt Tt Nn : N) : Q :=
  Q_of_N Tt * AT * (((ce_lvl_C_q u ue XK ci P1 QT * (Q_of_N Nn * Nx) * ee) * (1 + u) + ea
                     + P1 * (Q_of_N Bt * ((ci * Nx * ee + ri * ((1 + ue) * XK + ee)) * (1 + u) + ea))) * (1 + u)).

(** [ce_bL_p]: one level over the logits ([ci = 1], [ri = 0], [Nx = 1]). *)
Definition ce_bL_q (u ue ee ea XK P1 QT AT : Q) (Bt Tt Nn : N) : Q :=
  ce_lvl_C_q u ue XK 1 P1 QT - 1 + ce_lvl_R_q u ue ee ea XK 1 0 1 P1 QT AT Bt Tt Nn.

Definition ce_lse_bound_q (u el Zmax LN NL delta : Q) : Q := u * (Zmax + LN + NL + el) + el + NL + delta.

(** [Some b] with [b >= ce_lse_bound] at upper bounds of its exponential and powers, [LN]
    checked ([V <= exp_dn LN]), [NL = bL / (1 - bL)], or [None] when a check or the side
    condition [0 <= bL < 1] fails. *)
(** The checks of [ce_lse_q] and [ce_merge_lse_q]: the constants [>= 0], [1 <= V <= exp_dn LN]. *)
Definition ce_ok (u ue ee ea el Zmax delta LN : Q) (V : N) : bool :=
  Qle_bool 0 u && Qle_bool 0 ue && Qle_bool 0 ee && Qle_bool 0 ea && Qle_bool 0 el && Qle_bool 0 Zmax
  && Qle_bool 0 delta && N.leb 1 V && Qle_bool (Q_of_N V) (exp_dn prec exp_steps LN).

Definition ce_lse_q (u ue ee ea el Zmax delta LN : Q) (Dt Bt Tt Nn : N) : option Q :=
  if ce_ok u ue ee ea el Zmax delta LN Nn then
    match exp_up prec exp_steps (u * (2 * Zmax)) with
    | Some XK =>
      let P1 := pow_up_N prec (1 + u) Dt in
      let QT := pow_up_N prec ((1 + ue) * ((1 + u) * (1 + u))) Tt in
      let AT := pow_up_N prec ((1 + u) * (1 + u) * ((1 + ue) * XK + ee)) Tt in
      let bL := ce_bL_q u ue ee ea XK P1 QT AT Bt Tt Nn in
      if Qlt_le_dec bL 1 then
        if Qle_bool 0 bL then Some (round_up prec (ce_lse_bound_q u el Zmax LN (bL / (1 - bL)) delta)) else None
      else None
    | None => None
    end
  else None.

(** One level at the certified powers, each value rounded up. *)
Definition ce_level_q (u ue ee ea XK ci ri Nx : Q) (Dt Bt Tt Nn : N) : Q * Q :=
  let P1 := pow_up_N prec (1 + u) Dt in
  let QT := pow_up_N prec ((1 + ue) * ((1 + u) * (1 + u))) Tt in
  let AT := pow_up_N prec ((1 + u) * (1 + u) * ((1 + ue) * XK + ee)) Tt in
  (round_up prec (ce_lvl_C_q u ue XK ci P1 QT), round_up prec (ce_lvl_R_q u ue ee ea XK ci ri Nx P1 QT AT Bt Tt Nn)).

(** The two-level schedule ([ce_lse_error_two_level]): groups of at most [T1] tiles of [Bt1]
    logits ([N1] logits, tile sums of depth [Dt1]), their states merged in at most [T2] tiles
    of [Bt2] ([Nn] groups, depth [Dt2]); [V] logits in all ([ln V <= LN] checked).  [Some b]
    with [b >= ce_lse_bound] at [bL = C2 - 1 + R2] of the two levels, [NL = bL / (1 - bL)],
    or [None] when a check or [0 <= bL < 1] fails. *)
Definition ce_merge_lse_q (u ue ee ea el Zmax delta LN : Q) (Dt1 Bt1 T1 N1 Dt2 Bt2 T2 Nn V : N) : option Q :=
  if ce_ok u ue ee ea el Zmax delta LN V then
    match exp_up prec exp_steps (u * (2 * Zmax)) with
    | Some XK =>
      let L1 := ce_level_q u ue ee ea XK 1 0 1 Dt1 Bt1 T1 N1 in
      let L2 := ce_level_q u ue ee ea XK (fst L1) (snd L1) (Q_of_N N1) Dt2 Bt2 T2 Nn in
      let bL := fst L2 - 1 + snd L2 in
      if Qlt_le_dec bL 1 then
        if Qle_bool 0 bL then Some (round_up prec (ce_lse_bound_q u el Zmax LN (bL / (1 - bL)) delta)) else None
      else None
    | None => None
    end
  else None.

Local Open Scope R_scope.

Lemma ce_ok_spec : forall u ue ee ea el Zmax delta LN V, ce_ok u ue ee ea el Zmax delta LN V = true ->
  0 <= Q2R u /\ 0 <= Q2R ue /\ 0 <= Q2R ee /\ 0 <= Q2R ea /\ 0 <= Q2R el /\ 0 <= Q2R Zmax /\ 0 <= Q2R delta
  /\ (1 <= N.to_nat V)%nat /\ ln (INR (N.to_nat V)) <= Q2R LN.
Proof.
  intros u ue ee ea el Zmax delta LN V Eok; unfold ce_ok in Eok.
  repeat rewrite andb_true_iff in Eok.
  destruct Eok as [[[[[[[[Hu0 Hue0] Hee0] Hea0] Hel0] HZ0] Hd0] HV] HLNq].
  apply Qle_bool_R in Hu0, Hue0, Hee0, Hea0, Hel0, HZ0, Hd0; rewrite Q2R_0 in *.
  apply N.leb_le in HV.
  do 7 (split; [assumption |]); split; [lia |].
  apply Qle_bool_R in HLNq; rewrite Q2R_of_N in HLNq.
  pose proof (exp_dn_le prec exp_steps LN) as G.
  assert (0 < INR (N.to_nat V)) by (apply lt_0_INR; lia).
  rewrite <- (ln_exp (Q2R LN)); apply afe_ln_le; lra.
Qed.

(** [ce_lvl_C_q], [ce_lvl_R_q] over the reals. *)
Definition ce_lvl_C (u ue XK ci P1 QT : R) : R := P1 * (ci * ((1 + ue) * XK) * (1 + u)) * QT * XK.

Definition ce_lvl_R (u ue ee ea XK ci ri Nx P1 QT AT : R) (Bt Tt Nn : nat) : R :=
  INR Tt * AT * (((ce_lvl_C u ue XK ci P1 QT * (INR Nn * Nx) * ee) * (1 + u) + ea
                  + P1 * (INR Bt * ((ci * Nx * ee + ri * ((1 + ue) * XK + ee)) * (1 + u) + ea))) * (1 + u)).

Lemma Q2R_ce_lvl_C : forall u ue XK ci P1 QT,
  Q2R (ce_lvl_C_q u ue XK ci P1 QT) = ce_lvl_C (Q2R u) (Q2R ue) (Q2R XK) (Q2R ci) (Q2R P1) (Q2R QT).
Proof. intros; unfold ce_lvl_C_q, ce_lvl_C; repeat rewrite ?Q2R_plus, ?Q2R_mult, ?Q2R_1; reflexivity. Qed.

Lemma Q2R_ce_lvl_R : forall u ue ee ea XK ci ri Nx P1 QT AT Bt Tt Nn,
  Q2R (ce_lvl_R_q u ue ee ea XK ci ri Nx P1 QT AT Bt Tt Nn)
  = ce_lvl_R (Q2R u) (Q2R ue) (Q2R ee) (Q2R ea) (Q2R XK) (Q2R ci) (Q2R ri) (Q2R Nx) (Q2R P1) (Q2R QT) (Q2R AT)
             (N.to_nat Bt) (N.to_nat Tt) (N.to_nat Nn).
Proof.
  intros; unfold ce_lvl_R_q, ce_lvl_R.
  repeat rewrite ?Q2R_plus, ?Q2R_mult, ?Q2R_of_N, ?Q2R_1; rewrite Q2R_ce_lvl_C; reflexivity.
Qed.

(** Both values grow with [ci], [ri] and the powers' bounds. *)
Lemma ce_lvl_mono : forall u ue ee ea XK Nx ci ri P1 QT AT ci' ri' P1' QT' AT' Bt Tt Nn,
  0 <= u -> 0 <= ue -> 0 <= ee -> 0 <= ea -> 0 <= XK -> 0 <= Nx ->
  0 <= ci <= ci' -> 0 <= ri <= ri' -> 0 <= P1 <= P1' -> 0 <= QT <= QT' -> 0 <= AT <= AT' ->
  0 <= ce_lvl_C u ue XK ci P1 QT <= ce_lvl_C u ue XK ci' P1' QT'
  /\ 0 <= ce_lvl_R u ue ee ea XK ci ri Nx P1 QT AT Bt Tt Nn <= ce_lvl_R u ue ee ea XK ci' ri' Nx P1' QT' AT' Bt Tt Nn.
Proof.
  intros u ue ee ea XK Nx ci ri P1 QT AT ci' ri' P1' QT' AT' Bt Tt Nn Hu Hue Hee Hea HX HNx
    [Hc Hc'] [Hr Hr'] [HP HP'] [HQ HQ'] [HA HA'].
  assert (HK : 0 <= ci * ((1 + ue) * XK) * (1 + u) <= ci' * ((1 + ue) * XK) * (1 + u)).
  { split; [repeat apply Rmult_le_pos; lra |].
    apply Rmult_le_compat_r; [lra |]; apply Rmult_le_compat_r; [apply Rmult_le_pos |]; lra. }
  assert (HC : 0 <= ce_lvl_C u ue XK ci P1 QT <= ce_lvl_C u ue XK ci' P1' QT').
  { unfold ce_lvl_C; split; [repeat apply Rmult_le_pos; lra |].
    apply Rmult_le_compat_r; [lra |]; apply Rmult_le_compat; [apply Rmult_le_pos; lra | lra | | lra].
    apply Rmult_le_compat; lra. }
  split; [exact HC |]; unfold ce_lvl_R.
  set (C := ce_lvl_C u ue XK ci P1 QT) in *; set (C' := ce_lvl_C u ue XK ci' P1' QT') in *.
  set (Ri := (ci * Nx * ee + ri * ((1 + ue) * XK + ee)) * (1 + u) + ea).
  set (Ri' := (ci' * Nx * ee + ri' * ((1 + ue) * XK + ee)) * (1 + u) + ea).
  assert (HRi : 0 <= Ri <= Ri').
  { assert (0 <= ci * Nx * ee <= ci' * Nx * ee)
      by (split; [repeat apply Rmult_le_pos; lra | apply Rmult_le_compat_r; [lra | apply Rmult_le_compat_r; lra]]).
    assert (0 <= (1 + ue) * XK) by (apply Rmult_le_pos; lra).
    assert (0 <= ri * ((1 + ue) * XK + ee) <= ri' * ((1 + ue) * XK + ee))
      by (split; [apply Rmult_le_pos | apply Rmult_le_compat_r]; lra).
    unfold Ri, Ri'; split; [assert (0 <= (ci * Nx * ee + ri * ((1 + ue) * XK + ee)) * (1 + u)) by (apply Rmult_le_pos; lra); lra |].
    apply Rplus_le_compat_r, Rmult_le_compat_r; lra. }
  pose proof (pos_INR Bt); pose proof (pos_INR Tt); pose proof (pos_INR Nn).
  assert (HN : 0 <= INR Nn * Nx) by (apply Rmult_le_pos; [apply pos_INR | lra]).
  assert (HJ1 : 0 <= C * (INR Nn * Nx) * ee * (1 + u) <= C' * (INR Nn * Nx) * ee * (1 + u)).
  { split; [repeat apply Rmult_le_pos; lra |].
    apply Rmult_le_compat_r; [lra |]; apply Rmult_le_compat_r; [lra |]; apply Rmult_le_compat_r; lra. }
  assert (HJ2 : 0 <= P1 * (INR Bt * Ri) <= P1' * (INR Bt * Ri')).
  { split; [apply Rmult_le_pos; [lra | apply Rmult_le_pos; lra] |].
    apply Rmult_le_compat; [lra | apply Rmult_le_pos; lra | lra | apply Rmult_le_compat_l; lra]. }
  set (J := C * (INR Nn * Nx) * ee * (1 + u) + ea + P1 * (INR Bt * Ri)).
  set (J' := C' * (INR Nn * Nx) * ee * (1 + u) + ea + P1' * (INR Bt * Ri')).
  assert (HJ3 : 0 <= J * (1 + u) <= J' * (1 + u))
    by (unfold J, J'; split; [apply Rmult_le_pos | apply Rmult_le_compat_r]; lra).
  split; [apply Rmult_le_pos; [apply Rmult_le_pos |]; lra |].
  apply Rmult_le_compat; [apply Rmult_le_pos; lra | lra | apply Rmult_le_compat_l; lra | lra].
Qed.

(** [ce_level_q] bounds the level at the exact powers, for any [0 <= ci <= ci_q], [0 <= ri <= ri_q]. *)
Lemma ce_level_q_ge : forall u ue ee ea XK ci ri Nx Dt Bt Tt Nn ci_r ri_r,
  0 <= Q2R u -> 0 <= Q2R ue -> 0 <= Q2R ee -> 0 <= Q2R ea -> 0 <= Q2R XK -> 0 <= Q2R Nx ->
  0 <= ci_r <= Q2R ci -> 0 <= ri_r <= Q2R ri ->
  let P1 := (1 + Q2R u) ^ N.to_nat Dt in
  let QT := ce_Q (Q2R u) (Q2R ue) ^ N.to_nat Tt in
  let AT := ce_a (Q2R u) (Q2R ue) (Q2R ee) (Q2R XK) ^ N.to_nat Tt in
  let L := ce_level_q u ue ee ea XK ci ri Nx Dt Bt Tt Nn in
  0 <= ce_lvl_C (Q2R u) (Q2R ue) (Q2R XK) ci_r P1 QT <= Q2R (fst L)
  /\ 0 <= ce_lvl_R (Q2R u) (Q2R ue) (Q2R ee) (Q2R ea) (Q2R XK) ci_r ri_r (Q2R Nx) P1 QT AT
                  (N.to_nat Bt) (N.to_nat Tt) (N.to_nat Nn) <= Q2R (snd L).
Proof.
  intros u ue ee ea XK ci ri Nx Dt Bt Tt Nn ci_r ri_r Hu Hue Hee Hea HX HNx Hc Hr P1 QT AT L.
  unfold L, ce_level_q; cbv zeta; cbn [fst snd].
  assert (HQ : 0 <= ce_Q (Q2R u) (Q2R ue)) by (unfold ce_Q; apply Rmult_le_pos; [| apply pow_le]; lra).
  assert (Ha : 0 <= ce_a (Q2R u) (Q2R ue) (Q2R ee) (Q2R XK)).
  { unfold ce_a; apply Rmult_le_pos; [apply pow_le; lra |].
    assert (0 <= (1 + Q2R ue) * Q2R XK) by (apply Rmult_le_pos; lra); lra. }
  assert (HP1 : 0 <= P1 <= Q2R (pow_up_N prec (1 + u) Dt)).
  { split; [apply pow_le; lra |].
    pose proof (pow_up_N_ge prec (1 + u) Dt) as G; rewrite Q2R_plus, Q2R_1 in G; apply G, Rle_Qle.
    rewrite Q2R_plus, Q2R_1, Q2R_0; lra. }
  assert (HQT : 0 <= QT <= Q2R (pow_up_N prec ((1 + ue) * ((1 + u) * (1 + u))) Tt)).
  { split; [apply pow_le; exact HQ |]; unfold QT.
    replace (ce_Q (Q2R u) (Q2R ue)) with (Q2R ((1 + ue) * ((1 + u) * (1 + u))))
      by (unfold ce_Q; repeat rewrite ?Q2R_mult, ?Q2R_plus, ?Q2R_1; ring).
    apply pow_up_N_ge, Rle_Qle; rewrite Q2R_0; repeat rewrite ?Q2R_mult, ?Q2R_plus, ?Q2R_1.
    apply Rmult_le_pos; [lra | apply Rmult_le_pos; lra]. }
  assert (HAT : 0 <= AT <= Q2R (pow_up_N prec ((1 + u) * (1 + u) * ((1 + ue) * XK + ee)) Tt)).
  { split; [apply pow_le; exact Ha |]; unfold AT.
    replace (ce_a (Q2R u) (Q2R ue) (Q2R ee) (Q2R XK)) with (Q2R ((1 + u) * (1 + u) * ((1 + ue) * XK + ee)))
      by (unfold ce_a; repeat rewrite ?Q2R_mult, ?Q2R_plus, ?Q2R_1; ring).
    apply pow_up_N_ge, Rle_Qle; rewrite Q2R_0.
    replace (Q2R ((1 + u) * (1 + u) * ((1 + ue) * XK + ee))) with (ce_a (Q2R u) (Q2R ue) (Q2R ee) (Q2R XK))
      by (unfold ce_a; repeat rewrite ?Q2R_mult, ?Q2R_plus, ?Q2R_1; ring); exact Ha. }
  destruct (ce_lvl_mono (Q2R u) (Q2R ue) (Q2R ee) (Q2R ea) (Q2R XK) (Q2R Nx) ci_r ri_r P1 QT AT (Q2R ci) (Q2R ri)
              _ _ _ (N.to_nat Bt) (N.to_nat Tt) (N.to_nat Nn) Hu Hue Hee Hea HX HNx Hc Hr HP1 HQT HAT)
    as [[HC0 HC] [HR0 HR]].
  split; (split; [assumption | eapply Rle_trans; [| apply Qle_R, round_up_ge]]).
  - rewrite Q2R_ce_lvl_C; exact HC.
  - rewrite Q2R_ce_lvl_R; exact HR.
Qed.

(** The range [[1 / (1 + B), (1 + B) e^LN]] on which [ce_lse_q_sound] asks [tl.log]'s
    accuracy holds the range [[1 - bL, (1 + bL) e^LN]] of [ce_lse_error_up] whenever [B]
    bounds [ce_lse_bound] at [NL = bL / (1 - bL)]: [1 - bL = 1 / (1 + NL)], [bL <= NL <= B]. *)
Lemma ce_lse_log_range : forall u el Zmax LN bL delta B,
  0 <= u -> 0 <= el -> 0 <= Zmax -> 0 <= LN -> 0 <= delta -> 0 <= bL < 1 ->
  ce_lse_bound u el Zmax LN (bL / (1 - bL)) delta <= B ->
  / (1 + B) <= 1 - bL /\ (1 + bL) * exp LN <= (1 + B) * exp LN.
Proof.
  intros u el Zmax LN bL delta B Hu Hel HZ HLN Hd [Hb0 Hb1] HB.
  set (NL := bL / (1 - bL)) in *.
  assert (ENL : NL * (1 - bL) = bL) by (unfold NL; field; lra).
  assert (HNL0 : 0 <= NL) by (unfold NL; apply Rmult_le_pos; [lra | left; apply Rinv_0_lt_compat; lra]).
  assert (HNLB : NL <= B).
  { unfold ce_lse_bound in HB.
    assert (0 <= u * (Zmax + LN + NL + el)) by (apply Rmult_le_pos; lra). lra. }
  assert (HbN : bL <= NL) by nra.
  split.
  - apply Rmult_le_reg_r with (1 + B); [lra |]; rewrite Rinv_l by lra; nra.
  - apply Rmult_le_compat_r; [left; apply exp_pos | lra].
Qed.

Section CeLseQ.

Variable M : MixedModel.
Variables u ue ee ea el Zmax delta LN : Q.
Variables Dt Bt Tt Nn : N.
Hypothesis Hu : Q2R u = ff_u (mp_a M).
Hypothesis Hea : Q2R ea = ff_eta (mp_a M).

Lemma Q2R_ce_bL : forall XK P1 QT AT,
  Q2R (ce_bL_q u ue ee ea XK P1 QT AT Bt Tt Nn)
  = ce_bL_p (ff_u (mp_a M)) (Q2R ue) (Q2R ee) (ff_eta (mp_a M)) (Q2R XK) (Q2R P1) (Q2R QT) (Q2R AT)
            (N.to_nat Bt) (N.to_nat Tt) (N.to_nat Nn).
Proof.
  intros; unfold ce_bL_q, ce_lvl_R_q, ce_lvl_C_q, ce_bL_p; cbv zeta.
  repeat rewrite ?Q2R_plus, ?Q2R_minus, ?Q2R_mult, ?Q2R_of_N, ?Q2R_1, ?Q2R_0.
  rewrite Hu, Hea; reflexivity.
Qed.

(** The oracle's value [b] bounds the streamed lse's error ([ce_lse_error_up]) for any
    [tl.exp] within [ue], [ee] on [x <= 0], any [tl.log] within [el] on the numbers of the
    format in [[1 / (1 + b), (1 + b) e^LN]] (inside [[1/2, 2 e^LN]] when [b <= 1]), any tile
    sum meeting [sum_ok]. *)
Theorem ce_lse_q_sound : forall b, ce_lse_q u ue ee ea el Zmax delta LN Dt Bt Tt Nn = Some b ->
  forall (ex lg : R -> R),
  (forall x, x <= 0 -> Rabs (ex x - exp x) <= Q2R ue * exp x + Q2R ee) ->
  (forall x, ff_fmt (mp_a M) (lg x)) ->
  (forall x, ff_fmt (mp_a M) x -> / (1 + Q2R b) <= x <= (1 + Q2R b) * exp (Q2R LN) ->
     Rabs (lg x - ln x) <= Q2R el) ->
  forall (zy0 : R * R) (tiles : list (list (R * R))) ts,
  let st := ce_run M ex (R * R) fst (fun _ => 1) ts (fst zy0, 0) tiles in
  In zy0 (concat tiles) -> sum_ok M ts (N.to_nat Dt) (N.to_nat Bt) ->
  Forall (fun tl => (length tl <= N.to_nat Bt)%nat) tiles -> (length tiles <= N.to_nat Tt)%nat ->
  (length (concat tiles) <= N.to_nat Nn)%nat ->
  (forall zy, In zy (concat tiles) ->
     ff_fmt (mp_a M) (fst zy) /\ Rabs (fst zy) <= Q2R Zmax /\ Rabs (fst zy - snd zy) <= Q2R delta) ->
  Rabs (ff_rnd (mp_a M) (fst st + lg (snd st)) - ln (VectorFacts.rsum (map (fun zy => exp (snd zy)) (concat tiles))))
  <= Q2R b.
Proof.
  intros b Hb ex lg Hex Hlgf Hlg zy0 tiles ts st H0 Hts HB HT HN Hz.
  unfold ce_lse_q in Hb.
  destruct (ce_ok u ue ee ea el Zmax delta LN Nn) eqn:Eok; [| discriminate].
  destruct (ce_ok_spec _ _ _ _ _ _ _ _ _ Eok) as [Hu0 [Hue0 [Hee0 [Hea0 [Hel0 [HZ0 [Hd0 [HNn HLN]]]]]]]].
  destruct (exp_up prec exp_steps (u * (2 * Zmax))%Q) as [XK |] eqn:EX; [| discriminate].
  set (P1 := pow_up_N prec (1 + u) Dt) in Hb.
  set (QT := pow_up_N prec ((1 + ue) * ((1 + u) * (1 + u))) Tt) in Hb.
  set (AT := pow_up_N prec ((1 + u) * (1 + u) * ((1 + ue) * XK + ee)) Tt) in Hb.
  destruct (Qlt_le_dec (ce_bL_q u ue ee ea XK P1 QT AT Bt Tt Nn) 1) as [HL | HL]; [| discriminate].
  destruct (Qle_bool 0 (ce_bL_q u ue ee ea XK P1 QT AT Bt Tt Nn)) eqn:HL0; [| discriminate].
  injection Hb as Eb.
  pose proof (exp_up_ge _ _ _ _ EX) as HX.
  rewrite Q2R_mult, Q2R_mult, Q2R_2, Hu in HX.
  assert (HX0 : 0 <= Q2R XK) by (eapply Rle_trans; [left; apply exp_pos | exact HX]).
  pose proof (Qlt_Rlt _ _ HL) as HLr; rewrite Q2R_1, Q2R_ce_bL in HLr.
  apply Qle_bool_R in HL0; rewrite Q2R_0, Q2R_ce_bL in HL0.
  set (bL := ce_bL_p (ff_u (mp_a M)) (Q2R ue) (Q2R ee) (ff_eta (mp_a M)) (Q2R XK) (Q2R P1) (Q2R QT) (Q2R AT)
                     (N.to_nat Bt) (N.to_nat Tt) (N.to_nat Nn)) in *.
  assert (H1L : ~ (1 - ce_bL_q u ue ee ea XK P1 QT AT Bt Tt Nn == 0)%Q)
    by (apply Q2R_nonzero; rewrite Q2R_minus, Q2R_1, Q2R_ce_bL; fold bL; lra).
  assert (HP1 : (1 + ff_u (mp_a M)) ^ N.to_nat Dt <= Q2R P1)
    by (rewrite <- Hu; apply pow_one_plus_le, Rle_Qle; rewrite Q2R_0; lra).
  assert (HQT : ce_Q (ff_u (mp_a M)) (Q2R ue) ^ N.to_nat Tt <= Q2R QT).
  { replace (ce_Q (ff_u (mp_a M)) (Q2R ue)) with (Q2R ((1 + ue) * ((1 + u) * (1 + u))))
      by (unfold ce_Q; repeat rewrite ?Q2R_mult, ?Q2R_plus, ?Q2R_1; rewrite Hu; ring).
    apply pow_up_N_ge, Rle_Qle; rewrite Q2R_0; repeat rewrite ?Q2R_mult, ?Q2R_plus, ?Q2R_1.
    apply Rmult_le_pos; [lra | apply Rmult_le_pos; lra]. }
  assert (HAT : ce_a (ff_u (mp_a M)) (Q2R ue) (Q2R ee) (Q2R XK) ^ N.to_nat Tt <= Q2R AT).
  { replace (ce_a (ff_u (mp_a M)) (Q2R ue) (Q2R ee) (Q2R XK)) with (Q2R ((1 + u) * (1 + u) * ((1 + ue) * XK + ee)))
      by (unfold ce_a; repeat rewrite ?Q2R_mult, ?Q2R_plus, ?Q2R_1; rewrite Hu; ring).
    apply pow_up_N_ge, Rle_Qle; rewrite Q2R_0; repeat rewrite ?Q2R_mult, ?Q2R_plus, ?Q2R_1.
    apply Rmult_le_pos; [apply Rmult_le_pos; lra |].
    assert (0 <= (1 + Q2R ue) * Q2R XK) by (apply Rmult_le_pos; lra); lra. }
  assert (Hbd : ce_lse_bound (ff_u (mp_a M)) (Q2R el) (Q2R Zmax) (Q2R LN) (bL / (1 - bL)) (Q2R delta) <= Q2R b).
  { rewrite <- Eb; eapply Rle_trans; [| apply Qle_R, round_up_ge].
    unfold ce_lse_bound, ce_lse_bound_q.
    rewrite !Q2R_plus, Q2R_mult, !Q2R_plus, Q2R_div by exact H1L.
    rewrite Q2R_minus, Q2R_1, Q2R_ce_bL, Hu; fold bL; lra. }
  assert (HLN0 : 0 <= Q2R LN)
    by (eapply Rle_trans; [| exact HLN]; rewrite <- ln_1; apply afe_ln_le; [lra | apply (le_INR 1); exact HNn]).
  destruct (ce_lse_log_range (ff_u (mp_a M)) _ _ _ bL _ _ (ff_u_nonneg (mp_a M)) Hel0 HZ0 HLN0 Hd0 (conj HL0 HLr) Hbd)
    as [Hd1 Hd2].
  unfold st.
  eapply Rle_trans; [| exact Hbd].
  refine (ce_lse_error_up M ex (Q2R ue) (Q2R ee) Hue0 Hee0 Hex lg (Q2R el) (/ (1 + Q2R b))
            ((1 + Q2R b) * exp (Q2R LN)) Hlgf Hlg zy0 tiles ts
            (N.to_nat Dt) (N.to_nat Bt) (N.to_nat Tt) (N.to_nat Nn) (Q2R Zmax) (Q2R XK) (Q2R delta) (Q2R LN)
            (bL / (1 - bL)) (Q2R P1) (Q2R QT) (Q2R AT) H0 Hts HB HT HN Hz _ HP1 HQT HAT _ HLN _ _ _).
  - exact HX.
  - exact HLr.
  - fold bL; apply afe_neg_ln_le; lra.
  - exact Hd1.
  - exact Hd2.
Qed.

(** The oracle's value [b] for the two-level schedule bounds the merged lse's error
    ([ce_lse_error_two_level]): groups streamed from their first logit with the tile sum
    [ts1], their states merged from the first group's with [ts2]. *)
Theorem ce_merge_lse_q_sound : forall (Dt1 Bt1 T1 N1 Dt2 Bt2 T2 Ng V : N) b,
  ce_merge_lse_q u ue ee ea el Zmax delta LN Dt1 Bt1 T1 N1 Dt2 Bt2 T2 Ng V = Some b ->
  forall (ex lg : R -> R),
  (forall x, x <= 0 -> Rabs (ex x - exp x) <= Q2R ue * exp x + Q2R ee) ->
  (forall x, ff_fmt (mp_a M) (lg x)) ->
  (forall x, ff_fmt (mp_a M) x -> / (1 + Q2R b) <= x <= (1 + Q2R b) * exp (Q2R LN) ->
     Rabs (lg x - ln x) <= Q2R el) ->
  forall (ts1 ts2 : list R -> R) (g0 : list (list (R * R))) (tiles2 : list (list (list (list (R * R))))),
  let st := ce_run M ex (list (list (R * R))) (grp_m M ex ts1) (grp_l M ex ts1) ts2 (grp_m M ex ts1 g0, 0) tiles2 in
  let zs := concat (map (@concat _) (concat tiles2)) in
  In g0 (concat tiles2) -> sum_ok M ts1 (N.to_nat Dt1) (N.to_nat Bt1) -> sum_ok M ts2 (N.to_nat Dt2) (N.to_nat Bt2) ->
  (forall g, In g (concat tiles2) -> concat g <> nil /\ Forall (fun tl => (length tl <= N.to_nat Bt1)%nat) g
                                    /\ (length g <= N.to_nat T1)%nat /\ (length (concat g) <= N.to_nat N1)%nat) ->
  Forall (fun tl => (length tl <= N.to_nat Bt2)%nat) tiles2 -> (length tiles2 <= N.to_nat T2)%nat ->
  (length (concat tiles2) <= N.to_nat Ng)%nat -> (length zs <= N.to_nat V)%nat ->
  (forall zy, In zy zs -> ff_fmt (mp_a M) (fst zy) /\ Rabs (fst zy) <= Q2R Zmax /\ Rabs (fst zy - snd zy) <= Q2R delta) ->
  Rabs (ff_rnd (mp_a M) (fst st + lg (snd st)) - ln (VectorFacts.rsum (map (fun zy => exp (snd zy)) zs))) <= Q2R b.
Proof.
  intros Dt1 Bt1 T1 N1 Dt2 Bt2 T2 Ng V b Hb ex lg Hex Hlgf Hlg ts1 ts2 g0 tiles2 st zs
    H0 Hts1 Hts2 Hg HB2 HT2 HN2 HV Hz.
  unfold ce_merge_lse_q in Hb.
  destruct (ce_ok u ue ee ea el Zmax delta LN V) eqn:Eok; [| discriminate].
  destruct (ce_ok_spec _ _ _ _ _ _ _ _ _ Eok) as [Hu0 [Hue0 [Hee0 [Hea0 [Hel0 [HZ0 [Hd0 [HV1 HLNV]]]]]]]].
  destruct (exp_up prec exp_steps (u * (2 * Zmax))%Q) as [XK |] eqn:EX; [| discriminate].
  revert Hb; cbv zeta.
  set (L1 := ce_level_q u ue ee ea XK 1 0 1 Dt1 Bt1 T1 N1).
  set (L2 := ce_level_q u ue ee ea XK (fst L1) (snd L1) (Q_of_N N1) Dt2 Bt2 T2 Ng).
  destruct (Qlt_le_dec (fst L2 - 1 + snd L2) 1) as [HL | HL]; [| discriminate].
  destruct (Qle_bool 0 (fst L2 - 1 + snd L2)) eqn:HL0; [| discriminate].
  intros Hb; injection Hb as Eb.
  pose proof (exp_up_ge _ _ _ _ EX) as HX; rewrite Q2R_mult, Q2R_mult, Q2R_2, Hu in HX.
  assert (HX0 : 0 <= Q2R XK) by (eapply Rle_trans; [left; apply exp_pos | exact HX]).
  assert (HN1 : 0 <= Q2R (Q_of_N N1)) by (rewrite Q2R_of_N; apply pos_INR).
  destruct (ce_level_q_ge u ue ee ea XK 1 0 1 Dt1 Bt1 T1 N1 1 0 Hu0 Hue0 Hee0 Hea0 HX0
              ltac:(rewrite Q2R_1; lra) ltac:(rewrite Q2R_1; lra) ltac:(rewrite Q2R_0; lra)) as [HC1 HR1].
  fold L1 in HC1, HR1; rewrite Q2R_1 in HR1.
  destruct (ce_level_q_ge u ue ee ea XK (fst L1) (snd L1) (Q_of_N N1) Dt2 Bt2 T2 Ng _ _ Hu0 Hue0 Hee0 Hea0 HX0 HN1
              HC1 HR1) as [HC2 HR2].
  fold L2 in HC2, HR2; rewrite Q2R_of_N in HR2.
  rewrite Hu in HC1, HC2; rewrite Hu, Hea in HR1, HR2.
  apply Qlt_Rlt in HL; apply Qle_bool_R in HL0; rewrite Q2R_plus, Q2R_minus, Q2R_1 in HL; rewrite Q2R_0 in HL0.
  rewrite Q2R_plus, Q2R_minus, Q2R_1 in HL0.
  set (bL := Q2R (fst L2) - 1 + Q2R (snd L2)) in *.
  assert (H1L : ~ (1 - (fst L2 - 1 + snd L2) == 0)%Q)
    by (apply Q2R_nonzero; rewrite Q2R_minus, Q2R_1, Q2R_plus, Q2R_minus, Q2R_1; fold bL; lra).
  assert (Hzs : (0 < length zs)%nat).
  { destruct (Hg g0 H0) as [Hne _]; destruct (concat g0) as [| zy r] eqn:E; [congruence |].
    assert (Hin : In zy zs)
      by (unfold zs; apply in_concat; exists (concat g0); split; [apply in_map, H0 | rewrite E; left; reflexivity]).
    destruct zs; [contradiction | cbn; lia]. }
  assert (Hbd : ce_lse_bound (ff_u (mp_a M)) (Q2R el) (Q2R Zmax) (Q2R LN) (bL / (1 - bL)) (Q2R delta) <= Q2R b).
  { rewrite <- Eb; eapply Rle_trans; [| apply Qle_R, round_up_ge].
    match goal with |- ?l <= _ =>
      change (l <= Q2R (ce_lse_bound_q u el Zmax LN ((fst L2 - 1 + snd L2) / (1 - (fst L2 - 1 + snd L2))) delta))
    end.
    unfold ce_lse_bound, ce_lse_bound_q.
    rewrite !Q2R_plus, Q2R_mult, !Q2R_plus, Q2R_div by exact H1L.
    rewrite Q2R_minus, Q2R_1, Q2R_plus, Q2R_minus, Q2R_1, Hu; fold bL; lra. }
  assert (HLN0 : 0 <= Q2R LN)
    by (eapply Rle_trans; [| exact HLNV]; rewrite <- ln_1; apply afe_ln_le; [lra | apply (le_INR 1); exact HV1]).
  destruct (ce_lse_log_range (ff_u (mp_a M)) _ _ _ bL _ _ (ff_u_nonneg (mp_a M)) Hel0 HZ0 HLN0 Hd0 (conj HL0 HL) Hbd)
    as [Hd1 Hd2].
  assert (Hb2 : forall b0, b0 <= bL -> / (1 + Q2R b) <= 1 - b0 /\ (1 + b0) * exp (Q2R LN) <= (1 + Q2R b) * exp (Q2R LN)).
  { intros b0 Hb0; split; [lra |]; eapply Rle_trans; [| exact Hd2].
    apply Rmult_le_compat_r; [left; apply exp_pos | lra]. }
  eapply Rle_trans; [| exact Hbd].
  refine (ce_lse_error_two_level M ex (Q2R ue) (Q2R ee) Hue0 Hee0 Hex lg (Q2R el) (/ (1 + Q2R b))
            ((1 + Q2R b) * exp (Q2R LN)) Hlgf Hlg ts1 g0 tiles2 ts2
            (N.to_nat Dt1) (N.to_nat Bt1) (N.to_nat T1) (N.to_nat N1) (N.to_nat Dt2) (N.to_nat Bt2) (N.to_nat T2)
            (N.to_nat Ng) (Q2R Zmax) (Q2R XK) (Q2R delta) (Q2R LN) (bL / (1 - bL))
            H0 Hts1 Hts2 Hg HB2 HT2 HN2 Hz HX _ _ _ _ _).
  - cbv zeta; eapply Rle_lt_trans; [| exact HL]; unfold bL.
    apply Rplus_le_compat; [apply Rplus_le_compat_r; exact (proj2 HC2) | exact (proj2 HR2)].
  - eapply Rle_trans; [| exact HLNV].
    apply afe_ln_le; [apply lt_0_INR, Hzs | apply le_INR, HV].
  - cbv zeta; match goal with |- - ln (1 - ?b0) <= _ =>
      assert (Hb0 : b0 <= bL) by (unfold bL; apply Rplus_le_compat; [apply Rplus_le_compat_r; exact (proj2 HC2) | exact (proj2 HR2)]);
      apply Rle_trans with (- ln (1 - bL)); [apply Ropp_le_contravar, afe_ln_le; lra | apply afe_neg_ln_le; lra]
    end.
  - cbv zeta; match goal with |- _ <= 1 - ?b0 =>
      assert (Hb0 : b0 <= bL) by (unfold bL; apply Rplus_le_compat; [apply Rplus_le_compat_r; exact (proj2 HC2) | exact (proj2 HR2)]); exact (proj1 (Hb2 _ Hb0))
    end.
  - cbv zeta; match goal with |- (1 + ?b0) * _ <= _ =>
      assert (Hb0 : b0 <= bL) by (unfold bL; apply Rplus_le_compat; [apply Rplus_le_compat_r; exact (proj2 HC2) | exact (proj2 HR2)]); exact (proj2 (Hb2 _ Hb0))
    end.
Qed.

End CeLseQ.
