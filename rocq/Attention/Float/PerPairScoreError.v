(** * Per-pair score errors: the saved lse and the forward output with one score error per key.

    SavedLseError.v's [attention_lse_error_masked_dot] and ForwardAccRunning.v's
    [attention_forward_acc_running] take ONE score error [delta = score_delta_de ..], the
    a-priori worst case over all (query, key) pairs.  Here the score error is per key of the
    row: a function [d] with
      |score2_with dotf c q k_j * ln 2 - scale * q.k_j| <= d_j   (nats, every visible key j),
    [score2_with] the kernel's base-2 score; the caller computes [d_j] (e.g. from the
    executable model's own score and an exact [q.k]).  All sums below are over the row's
    visible keys ([filter vis (concat tiles)]) and [P_j = e^(scale q.k_j) / sum_i e^(scale q.k_i)]
    is the EXACT softmax there.

    Part 1 (any list, any scores [S], [S'] with [|S'_j - S_j| <= d_j]):
    - [pp_shift xs S d = ln ((sum_j e^(S_j + d_j)) / sum_j e^(S_j)) = ln (sum_j P_j e^(d_j))]
      ([pp_shift_softmax]); [0 <= pp_shift] when [d >= 0], [pp_shift <= delta] when every
      [d_j <= delta] ([pp_shift_le_uniform]): never worse than the uniform bound.
    - [lse_perturbation_pp]: [|ln sum e^S' - ln sum e^S| <= pp_shift xs S d] (upper side
      [sum e^S' <= sum e^(S + d)]; lower side Jensen ([pp_exp_jensen]) twice).
    - [softmax_perturbation_pp]: with [pp_shift xs S d <= D],
        |avg_S' v - avg_S v| <= sum_j P_j |v_j| (e^(d_j + D) - 1),
        avg_S' |v|           <= sum_j P_j |v_j| e^(d_j + D)
      (each computed weight is [P_j e^t_j], [|t_j| <= d_j + D]: [pp_weight]; parts of the
      list: [pp_part]).  At [d_j = D = delta] this is [softmax_perturbation_post].

    Part 2, the saved lse ([attention_lse_error_dot_pp], [attention_lse_error_masked_dot_pp],
    the CUDA fp32 instances [attention_lse_error_masked_tf32x3_pp] and (H100)
    [attention_lse_error_masked_tf32x3_op_pp]): all premises of the uniform theorem, plus
    the per-key [d] above and [pp_shift keys (scale q.k) d <= Dsc]; the bound is
      lse_bound u ea el ucl smax Dsc LN NL
        = u A2 (1 + ucl) + ea + A2 ucl + (u A + ea) + el + NL + Dsc,
      A = smax + 2 (LN + NL) + el,  A2 = (1 + u) A + ea,
    i.e. the uniform bound with [delta] replaced by [Dsc] (the only place the proof used
    [delta] is the perturbation of log-sum-exp); [smax = score_max_de ..] (the bound of
    [|m|]) and [X >= 2^(u 2 smax)] stay a priori.  The caller computes per ROW:
    [Dsc >= ln (sum_j P_j e^(d_j))], in nats (an upper bound: its own rounding included).

    Part 3, the forward output's running bound ([attention_forward_acc_running_pp] and the
    H100 instances [attention_forward_acc_running_tf32x3_op_pp], [_tc_op_pp] (bf16/fp16)):
    all premises of ForwardAccRunning.v's theorem (its [Y] only inside the premise bundle
    [afe_premises_de]; it is not in the bound), plus [d], [pp_shift .. <= Dsc] and per
    (row, output coordinate)
      Yw >= sum_j P_j |v_j| (e^(d_j + Dsc) - 1)   ([sm_avg] over the exact scores);
    the bound is
      |out - sum_j P_j v_j| <= afr_rel(Y := 0) W + afr_C(Y := 0) run_err afr_gb 0 bs
                               + afr_ypp Yw + afr_abs,
      afr_ypp = ((1 + u) (afr_gA + bL + X (CB - 1)) / (1 - bL) + u + 1) (1 + us),
    [W = sum_j P_j |v_j|], the caller's per-tile [bs] exactly as in ForwardAccRunning.v
    (exact scores), the other constants as there.  The per-tile premise becomes
    [b_t + Yw] in the computed scores' units ([fwd_tile_premise_pp]; the uniform one
    was [(1 + Y) b_t + Y W]), so at [d_j = Dsc = delta] ([Yw = Y W]) this bound is at most
    the uniform one ([afr_C] loses its factor [1 + Y]).

    Not covered: the computation of [d], [Dsc], [Yw] (the caller's: upper bounds of the
    exact quantities, with the exact softmax [P], not the computed one); everything that
    SavedLseError.v and ForwardAccRunning.v do not cover (their headers).  The backward
    (RunningAccError.v) already takes per-item score errors; its per-item premise [Dl x] on the
    lse of item [x]'s row is what Part 2 bounds, row by row.

    The proofs: Part 2's theorems are instances of SavedLseError.v's [attention_lse_error_dot_gen]
    and of [attention_lse_error_masked_dot_pp_gen] (any relative bound [bL] of [l], the premise
    [l_fold_rel]), Part 3's of [attention_forward_acc_running_pp_gen]; here [bL] is
    [afe_bL .. CG ..] ([l_fold_rel_uniform]), in ForwardAccRunningCounted.v it is [bL] at
    [CG := CGc] ([l_fold_rel_counted]). *)

From Coq Require Import Reals ZArith List Lra Lia Arith.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.NoUnderflow FloatModel.DotError Attention.BackwardCorrect Attention.ScorePerturbation.
From Ojas Require Import FloatModel.MixedPrecision FloatModel.BlockedSum FloatModel.TensorCoreSum FloatModel.Tf32Product.
From Ojas Require Import FloatModel.Notations.
From Ojas Require Import Attention.Float.OnlineSoftmaxError Attention.Float.OnlineSoftmaxTile Attention.Float.ForwardError.
From Ojas Require Import Attention.Float.NumeratorError Attention.Float.ForwardPosteriori Attention.Float.ForwardAccError.
From Ojas Require Import Attention.Float.RunningAccError Attention.Float.ForwardAccRunning Attention.Float.SavedLseError.
Import ListNotations.
Open Scope R_scope.

(** ** Part 1: log-sum-exp and softmax averages under per-item score errors *)

(** [pp_shift xs S d = ln (sum_j P_j e^(d_j))], [P = softmax S] the exact weights
    ([pp_shift_softmax]); in nats. *)
Definition pp_shift {T} (xs : list T) (S d : T -> R) : R :=
  ln (rsum (map (fun x => exp (S x + d x)) xs) / rsum (map (fun x => exp (S x)) xs)).

Lemma pp_shift_softmax : forall {T} (xs : list T) (S d : T -> R),
  pp_shift xs S d
  = ln (rsum (map (fun x => exp (S x) / rsum (map (fun y => exp (S y)) xs) * exp (d x)) xs)).
Proof.
  intros T xs S d; unfold pp_shift; f_equal; rewrite <- rsum_map_div.
  apply rsum_map_ext; intros x _; rewrite exp_plus; unfold Rdiv; ring.
Qed.

Lemma pp_ln_div : forall x y, 0 < x -> 0 < y -> ln (x / y) = ln x - ln y.
Proof.
  intros x y Hx Hy; unfold Rdiv; rewrite ln_mult, ln_Rinv by (try apply Rinv_0_lt_compat; assumption); ring.
Qed.

Lemma pp_rsum_affine : forall {T} (xs : list T) (f g : T -> R) a b,
  rsum (map (fun x => a * f x + b * g x) xs) = a * rsum (map f xs) + b * rsum (map g xs).
Proof. intros; rewrite rsum_map_plus, !rsum_map_scal_l; reflexivity. Qed.

(** Jensen for [exp] over weights summing to one. *)
Lemma pp_exp_jensen : forall {T} (xs : list T) (w f : T -> R),
  (forall x, In x xs -> 0 <= w x) -> rsum (map w xs) = 1 ->
  exp (rsum (map (fun x => w x * f x) xs)) <= rsum (map (fun x => w x * exp (f x)) xs).
Proof.
  intros T xs w f Hw H1.
  set (a := rsum (map (fun x => w x * f x) xs)).
  assert (E : rsum (map (fun x => exp a * (1 - a) * w x + exp a * (w x * f x)) xs) = exp a)
    by (rewrite pp_rsum_affine, H1; fold a; ring).
  rewrite <- E; apply bw_rsum_le; intros x Hx.
  assert (exp a * (1 + (f x - a)) <= exp (f x)).
  { replace (exp (f x)) with (exp a * exp (f x - a)) by (rewrite <- exp_plus; f_equal; ring).
    apply Rmult_le_compat_l; [left; apply exp_pos | apply exp_ineq1_le]. }
  pose proof (Hw x Hx); nra.
Qed.

(** log-sum-exp moves by at most [ln (sum_j P_j e^(d_j))] when score [j] moves by at most [d_j]
    ([P] the exact softmax): up, [sum e^S' <= sum e^(S + d)]; down, Jensen twice. *)
Theorem lse_perturbation_pp : forall {T} (xs : list T) (S S' d : T -> R), xs <> [] ->
  (forall x, In x xs -> Rabs (S' x - S x) <= d x) ->
  Rabs (ln (rsum (map (fun x => exp (S' x)) xs)) - ln (rsum (map (fun x => exp (S x)) xs))) <= pp_shift xs S d.
Proof.
  intros T xs S S' d Hne HS.
  destruct xs as [| x0 xs']; [congruence |].
  set (xs := x0 :: xs') in *.
  set (Z := rsum (map (fun x => exp (S x)) xs)).
  set (Z' := rsum (map (fun x => exp (S' x)) xs)).
  set (Zd := rsum (map (fun x => exp (S x + d x)) xs)).
  assert (HZ : 0 < Z) by apply bw_rsum_exp_pos.
  assert (HZ' : 0 < Z') by apply bw_rsum_exp_pos.
  assert (HZd : 0 < Zd) by (apply (bw_rsum_exp_pos (fun x => S x + d x))).
  unfold pp_shift; fold Z Zd; rewrite pp_ln_div by assumption.
  (* up *)
  assert (Up : Z' <= Zd).
  { apply bw_rsum_le; intros x Hx; apply sp_exp_le; pose proof (sp_Rabs_le_inv _ _ (HS x Hx)); lra. }
  pose proof (afe_ln_le _ _ HZ' Up) as L1.
  (* down: the weights [w = e^S / Z] *)
  set (w := fun x => exp (S x) / Z).
  assert (Hw : forall x, In x xs -> 0 <= w x)
    by (intros x _; unfold w; apply Rmult_le_pos; [left; apply exp_pos | left; apply Rinv_0_lt_compat, HZ]).
  assert (Hw1 : rsum (map w xs) = 1) by (unfold w; rewrite rsum_map_div; fold Z; field; lra).
  assert (Ew : forall g : T -> R, rsum (map (fun x => w x * exp (g x)) xs)
                                   = rsum (map (fun x => exp (S x + g x)) xs) / Z).
  { intros g; unfold w; rewrite <- rsum_map_div; apply rsum_map_ext; intros x _.
    rewrite exp_plus; unfold Rdiv; ring. }
  pose proof (pp_exp_jensen xs w d Hw Hw1) as J1.
  pose proof (pp_exp_jensen xs w (fun x => S' x - S x) Hw Hw1) as J2.
  rewrite Ew in J1, J2; fold Zd in J1.
  assert (EZ' : rsum (map (fun x => exp (S x + (S' x - S x))) xs) = Z')
    by (apply rsum_map_ext; intros x _; f_equal; ring).
  rewrite EZ' in J2.
  assert (Hab : - rsum (map (fun x => w x * d x) xs) <= rsum (map (fun x => w x * (S' x - S x)) xs)).
  { rewrite <- (Rmult_1_l (rsum (map (fun x => w x * d x) xs))), Ropp_mult_distr_l, <- rsum_map_scal_l.
    apply bw_rsum_le; intros x Hx; pose proof (sp_Rabs_le_inv _ _ (HS x Hx)); pose proof (Hw x Hx); nra. }
  assert (Hq1 : 0 < Zd / Z) by (apply Rdiv_lt_0_compat; lra).
  assert (Hq2 : 0 < Z' / Z) by (apply Rdiv_lt_0_compat; lra).
  apply afe_ln_le in J1; [| apply exp_pos]; apply afe_ln_le in J2; [| apply exp_pos].
  rewrite ln_exp, pp_ln_div in J1, J2 by lra.
  apply Rabs_le; lra.
Qed.

Lemma pp_shift_nonneg : forall {T} (xs : list T) (S d : T -> R), xs <> [] ->
  (forall x, In x xs -> 0 <= d x) -> 0 <= pp_shift xs S d.
Proof.
  intros T xs S d Hne Hd; eapply Rle_trans; [apply Rabs_pos |].
  apply (lse_perturbation_pp xs S S d Hne); intros x Hx; rewrite Rminus_diag_eq, Rabs_R0 by reflexivity; apply Hd, Hx.
Qed.

(** Never above the uniform bound: [d_j <= delta] for all [j] gives [pp_shift <= delta]. *)
Lemma pp_shift_le_uniform : forall {T} (xs : list T) (S d : T -> R) delta, xs <> [] ->
  (forall x, In x xs -> d x <= delta) -> pp_shift xs S d <= delta.
Proof.
  intros T xs S d delta Hne Hd; destruct xs as [| x0 xs']; [congruence |].
  unfold pp_shift.
  assert (HZ : 0 < rsum (map (fun x => exp (S x)) (x0 :: xs'))) by apply bw_rsum_exp_pos.
  assert (HZd : 0 < rsum (map (fun x => exp (S x + d x)) (x0 :: xs'))) by apply (bw_rsum_exp_pos (fun x => S x + d x)).
  rewrite <- (ln_exp delta); apply afe_ln_le; [apply Rdiv_lt_0_compat; lra |].
  apply (Rmult_le_reg_r (rsum (map (fun x => exp (S x)) (x0 :: xs')))); [exact HZ |].
  unfold Rdiv; rewrite Rmult_assoc, Rinv_l, Rmult_1_r by lra.
  rewrite <- rsum_map_scal_l; apply bw_rsum_le; intros x Hx.
  rewrite exp_plus, Rmult_comm; apply Rmult_le_compat_r; [left; apply exp_pos | apply sp_exp_le, Hd, Hx].
Qed.

(** The softmax average under per-item score errors: with [|S'_j - S_j| <= d_j] and
    [pp_shift xs S d <= D], each computed weight [P'_j] is within [e^(+-(d_j + D))] of
    [P_j], so
      |avg_S' v - avg_S v| <= sum_j P_j |v_j| (e^(d_j + D) - 1),
      avg_S' |v|           <= sum_j P_j |v_j| e^(d_j + D)
    (both sums [sm_avg xs S _]: over the exact weights).  At [d_j = delta = D] this is
    [softmax_perturbation_post]'s [(e^(2 delta) - 1) avg_S |v|]. *)
Theorem softmax_perturbation_pp : forall {T} (xs : list T) (S S' v d : T -> R) D, xs <> [] ->
  (forall x, In x xs -> Rabs (S' x - S x) <= d x) -> pp_shift xs S d <= D ->
  Rabs (sm_avg xs S' v - sm_avg xs S v) <= sm_avg xs S (fun x => Rabs (v x) * (exp (d x + D) - 1))
  /\ sm_avg xs S' (fun x => Rabs (v x)) <= sm_avg xs S (fun x => Rabs (v x) * exp (d x + D)).
Proof.
  intros T xs S S' v d D Hne HS HD.
  pose proof (lse_perturbation_pp xs S S' d Hne HS) as HL.
  destruct xs as [| x0 xs']; [congruence |].
  set (xs := x0 :: xs') in *.
  set (Z := rsum (map (fun x => exp (S x)) xs)) in *.
  set (Z' := rsum (map (fun x => exp (S' x)) xs)) in *.
  assert (HZ : 0 < Z) by apply bw_rsum_exp_pos.
  assert (HZ' : 0 < Z') by apply bw_rsum_exp_pos.
  (* the weights: [P'_x = P_x e^t], [|t| <= d_x + D] *)
  assert (Hw : forall x, In x xs ->
            exp (S' x) / Z' = exp (S x) / Z * exp ((S' x - S x) - (ln Z' - ln Z))
            /\ Rabs ((S' x - S x) - (ln Z' - ln Z)) <= d x + D).
  { intros x Hx; split.
    - replace (S' x - S x - (ln Z' - ln Z)) with (S' x + - S x + - ln Z' + ln Z) by ring.
      rewrite !exp_plus, !exp_Ropp, !exp_ln by assumption; field.
      pose proof (exp_pos (S x)); repeat split; lra.
    - pose proof (Rabs_triang (S' x - S x) (- (ln Z' - ln Z))) as Ht; rewrite Rabs_Ropp in Ht.
      replace (S' x - S x + - (ln Z' - ln Z)) with (S' x - S x - (ln Z' - ln Z)) in Ht by ring.
      pose proof (HS x Hx); lra. }
  assert (Hexp : forall t b, Rabs t <= b -> Rabs (exp t - 1) <= exp b - 1 /\ exp t <= exp b).
  { intros t b Ht; pose proof (sp_Rabs_le_inv _ _ Ht) as [H1 H2].
    assert (E1 : exp t <= exp b) by (apply sp_exp_le; lra).
    split; [| exact E1].
    assert (Hb : 0 <= b) by (pose proof (Rabs_pos t); lra).
    assert (Hm : exp (- b) <= exp t) by (apply sp_exp_le; lra).
    assert (E0 : exp b * exp (- b) = 1) by (rewrite <- exp_plus, Rplus_opp_r; apply exp_0).
    assert (1 <= exp b) by (rewrite <- exp_0; apply sp_exp_le; lra).
    assert (1 - exp (- b) <= exp b - 1).
    { assert (0 < exp (- b)) by apply exp_pos. nra. }
    apply Rabs_le; split; lra. }
  assert (HP : forall x, 0 <= exp (S x) / Z)
    by (intros x; apply Rmult_le_pos; [left; apply exp_pos | left; apply Rinv_0_lt_compat, HZ]).
  rewrite !sm_avg_terms; fold Z Z'.
  split.
  - rewrite <- bw_rsum_map_minus.
    eapply Rle_trans; [apply bw_rsum_abs |]; apply bw_rsum_le; intros x Hx.
    destruct (Hw x Hx) as [Ew Ht]; destruct (Hexp _ _ Ht) as [H1 _].
    rewrite Ew.
    replace (exp (S x) / Z * exp (S' x - S x - (ln Z' - ln Z)) * v x - exp (S x) / Z * v x)
      with (exp (S x) / Z * (v x * (exp (S' x - S x - (ln Z' - ln Z)) - 1))) by ring.
    rewrite Rabs_mult, (Rabs_right (exp (S x) / Z)) by (apply Rle_ge, HP).
    apply Rmult_le_compat_l; [apply HP |]; rewrite Rabs_mult.
    apply Rmult_le_compat_l; [apply Rabs_pos | exact H1].
  - apply bw_rsum_le; intros x Hx.
    destruct (Hw x Hx) as [Ew Ht]; destruct (Hexp _ _ Ht) as [_ H2].
    rewrite Ew, Rmult_assoc; apply Rmult_le_compat_l; [apply HP |].
    rewrite Rmult_comm; apply Rmult_le_compat_l; [apply Rabs_pos | exact H2].
Qed.

(** ** Part 2: the saved lse with per-pair score errors *)

Section LsePP.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

(** The kernel's [tl.log2], within [el] of [log2] on [[lmin, lmax]]: the assumption of
    SavedLseError.v's Section [Lse]. *)
Variable lg : R -> R.
Variables el lmin lmax : R.
Hypothesis lg_err : forall x, lmin <= x <= lmax -> Rabs (lg x - ln x / ln 2) <= el.

(** The move of log-sum-exp from the exact scores to the kernel's, at most [Dsc >= pp_shift]. *)
Lemma lse_move_pp : forall (dotf : list R -> list R -> R) (c scale : R) (q : list R) (d : list R * R -> R) (Dsc : R)
    (xs : list (list R * R)),
  xs <> [] ->
  (forall kv, In kv xs -> Rabs (score2_with A_ dotf c q (fst kv) * ln 2 - scale * dot_R q (fst kv)) <= d kv) ->
  pp_shift xs (fun kv => scale * dot_R q (fst kv)) d <= Dsc ->
  Rabs (ln (rsum (map (fun kv => exp (score2_with A_ dotf c q (fst kv) * ln 2)) xs))
        - ln (rsum (map (fun kv => exp (scale * dot_R q (fst kv))) xs))) <= Dsc.
Proof.
  intros dotf c scale q d Dsc xs Hne Hd HDsc; eapply Rle_trans; [| exact HDsc].
  exact (lse_perturbation_pp xs (fun kv => scale * dot_R q (fst kv)) (fun kv => score2_with A_ dotf c q (fst kv) * ln 2) d
           Hne Hd).
Qed.

(** SavedLseError.v's [attention_lse_error_dot] (fully visible tiles) with the per-key
    score error [d] and [Dsc >= pp_shift]: [lse_bound .. smax Dsc ..]. *)
Theorem attention_lse_error_dot_pp : forall (dotf : list R -> list R -> R) (g_rel g_abs : R) (q : list R) (c scale uc P X P1 CG CR cl ucl LN NL : R) (d : list R * R -> R) (Dsc : R) (E B N Tt : nat)
    (k0 : list R * R) (tl0 : list (list R * R)) (rest : list (list (list R * R))),
  let tiles := (k0 :: tl0) :: rest in
  let ktiles := map (map (kv_pair_with M dotf c q)) tiles in
  let m0 := score2_with A_ dotf c q (fst k0) in
  let mt := acc_m_run m0 ktiles in
  let l := l_run M m0 0 (map (map fst) ktiles) in
  let bL := afe_bL u ue ee ea B N Tt X P1 CG CR in
  dot_model dotf E g_rel g_abs -> length q = E ->
  (forall kv, In kv (concat tiles) -> length (fst kv) = E /\ dot_abs q (fst kv) <= P) ->
  0 < scale -> 0 <= uc -> Rabs (c * ln 2 - scale) <= uc * scale ->
  (1 <= B)%nat -> Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (concat tiles) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rpower 2 (u * (2 * score_max_de A_ scale uc P (g_rel * P + g_abs))) <= X ->
  (1 + u) ^ (B - 1) <= P1 -> cg M ^ Tt <= CG -> cr M ^ Tt <= CR -> bL < 1 ->
  0 <= ucl -> Rabs (cl - ln 2) <= ucl * ln 2 -> ln (INR N) <= LN -> - ln (1 - bL) <= NL ->
  lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  (forall kv, In kv (concat tiles) ->
     Rabs (score2_with A_ dotf c q (fst kv) * ln 2 - scale * dot_R q (fst kv)) <= d kv) ->
  pp_shift (concat tiles) (fun kv => scale * dot_R q (fst kv)) d <= Dsc ->
  Rabs (rnd (rnd (mt + lg l) * cl) - ln (rsum (map (fun kv => exp (scale * dot_R q (fst kv))) (concat tiles))))
  <= lse_bound u ea el ucl (score_max_de A_ scale uc P (g_rel * P + g_abs)) Dsc LN NL.
Proof.
  intros dotf g_rel g_abs q c scale uc P X P1 CG CR cl ucl LN NL d Dsc E B N Tt k0 tl0 rest tiles ktiles m0 mt l bL
    Hdm Hq Hkeys Hs Huc Hc HB HBt HN HT HX HP HG HC HbL Hucl Hcl HLN HNL Hlmin Hlmax Hd HDsc.
  apply (attention_lse_error_dot_gen M lg el lmin lmax lg_err dotf g_rel g_abs q c scale uc P X bL cl ucl LN NL Dsc
           E B N Tt k0 tl0 rest (l_fold_rel_uniform M X P1 CG CR B N Tt _ _ HP HG HC)); try assumption.
  apply (lse_move_pp dotf c scale q d); [unfold tiles; cbn [concat app]; discriminate | exact Hd | exact HDsc].
Qed.

(** The kernel's loop from its start under any mask, for any relative bound [bL] of [l]
    ([l_fold_rel] on the tiles of visible keys): [attention_lse_error_masked_dot_pp] and
    ForwardAccRunningCounted.v's [attention_lse_error_masked_dot_counted_pp] are its instances. *)
Lemma attention_lse_error_masked_dot_pp_gen : forall (dotf : list R -> list R -> R) (g_rel g_abs : R) (q : list R) (c scale uc P X bL cl ucl LN NL : R) (d : list R * R -> R) (Dsc : R) (E B N Tt : nat)
    (vis : list R * R -> bool) (tiles : list (list (list R * R))),
  let sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv) in
  let st := kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) tiles in
  mp_exp2 M 0 = 1 -> (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  (forall k0 r rest, concat ((k0 :: r) :: rest) = filter vis (concat tiles) ->
     l_fold_rel M X B N Tt bL (sck k0) (map (map fst) (map (map (kv_pair_with M dotf c q)) ((k0 :: r) :: rest)))) ->
  dot_model dotf E g_rel g_abs -> length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true -> length (fst kv) = E /\ dot_abs q (fst kv) <= P) ->
  0 < scale -> 0 <= uc -> Rabs (c * ln 2 - scale) <= uc * scale ->
  (1 <= B)%nat -> Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rpower 2 (u * (2 * score_max_de A_ scale uc P (g_rel * P + g_abs))) <= X ->
  bL < 1 ->
  0 <= ucl -> Rabs (cl - ln 2) <= ucl * ln 2 -> ln (INR N) <= LN -> - ln (1 - bL) <= NL ->
  lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  (forall kv, In kv (filter vis (concat tiles)) ->
     Rabs (score2_with A_ dotf c q (fst kv) * ln 2 - scale * dot_R q (fst kv)) <= d kv) ->
  pp_shift (filter vis (concat tiles)) (fun kv => scale * dot_R q (fst kv)) d <= Dsc ->
  Rabs (rnd (rnd (m_use (ks_m st) + lg (ks_l st)) * cl)
        - ln (rsum (map (fun kv => exp (scale * dot_R q (fst kv))) (filter vis (concat tiles)))))
  <= lse_bound u ea el ucl (score_max_de A_ scale uc P (g_rel * P + g_abs)) Dsc LN NL.
Proof.
  intros dotf g_rel g_abs q c scale uc P X bL cl ucl LN NL d Dsc E B N Tt vis tiles sck st
    Hexp0 Hvis Hl Hdm Hq Hkeys Hs Huc Hc HB HBt HN HT HX HbL Hucl Hcl HLN HNL Hlmin Hlmax Hd HDsc.
  destruct (kernel_run_visible_tiles_with M dotf c q vis B tiles Hexp0 Hvis HBt) as [k0 [r [rest [Ecat [HBf [Hlen Est]]]]]].
  unfold st, sck; rewrite Est; cbn [ks_m ks_l m_use]; rewrite <- Ecat.
  apply (attention_lse_error_dot_gen M lg el lmin lmax lg_err dotf g_rel g_abs q c scale uc P X bL cl ucl LN NL Dsc
           E B N Tt k0 r rest (Hl k0 r rest Ecat)); auto.
  - intros kv Hkv; rewrite Ecat in Hkv; apply filter_In in Hkv; destruct Hkv; auto.
  - rewrite Ecat; exact HN.
  - lia.
  - apply (lse_move_pp dotf c scale q d); [cbn [concat app]; discriminate | rewrite Ecat; exact Hd | rewrite Ecat; exact HDsc].
Qed.

(** The kernel's loop from its start under any mask: the lse it saves against the
    log-sum-exp over the visible keys, [d] and [Dsc] over those keys. *)
Theorem attention_lse_error_masked_dot_pp : forall (dotf : list R -> list R -> R) (g_rel g_abs : R) (q : list R) (c scale uc P X P1 CG CR cl ucl LN NL : R) (d : list R * R -> R) (Dsc : R) (E B N Tt : nat)
    (vis : list R * R -> bool) (tiles : list (list (list R * R))),
  let sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv) in
  let st := kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) tiles in
  let bL := afe_bL u ue ee ea B N Tt X P1 CG CR in
  mp_exp2 M 0 = 1 -> (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  dot_model dotf E g_rel g_abs -> length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true -> length (fst kv) = E /\ dot_abs q (fst kv) <= P) ->
  0 < scale -> 0 <= uc -> Rabs (c * ln 2 - scale) <= uc * scale ->
  (1 <= B)%nat -> Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rpower 2 (u * (2 * score_max_de A_ scale uc P (g_rel * P + g_abs))) <= X ->
  (1 + u) ^ (B - 1) <= P1 -> cg M ^ Tt <= CG -> cr M ^ Tt <= CR -> bL < 1 ->
  0 <= ucl -> Rabs (cl - ln 2) <= ucl * ln 2 -> ln (INR N) <= LN -> - ln (1 - bL) <= NL ->
  lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  (forall kv, In kv (filter vis (concat tiles)) ->
     Rabs (score2_with A_ dotf c q (fst kv) * ln 2 - scale * dot_R q (fst kv)) <= d kv) ->
  pp_shift (filter vis (concat tiles)) (fun kv => scale * dot_R q (fst kv)) d <= Dsc ->
  Rabs (rnd (rnd (m_use (ks_m st) + lg (ks_l st)) * cl)
        - ln (rsum (map (fun kv => exp (scale * dot_R q (fst kv))) (filter vis (concat tiles)))))
  <= lse_bound u ea el ucl (score_max_de A_ scale uc P (g_rel * P + g_abs)) Dsc LN NL.
Proof.
  intros dotf g_rel g_abs q c scale uc P X P1 CG CR cl ucl LN NL d Dsc E B N Tt vis tiles sck st bL
    Hexp0 Hvis Hdm Hq Hkeys Hs Huc Hc HB HBt HN HT HX HP HG HC.
  exact (attention_lse_error_masked_dot_pp_gen dotf g_rel g_abs q c scale uc P X bL cl ucl LN NL d Dsc E B N Tt vis tiles
           Hexp0 Hvis (fun _ _ _ _ => l_fold_rel_uniform M X P1 CG CR B N Tt _ _ HP HG HC) Hdm Hq Hkeys Hs Huc Hc HB HBt HN HT HX).
Qed.

(** The float32 lse on CUDA with 3xTF32 scores on tensor cores ([tf32x3_tc_dot_model]). *)
Theorem attention_lse_error_masked_tf32x3_pp : forall (out : R -> R) (ur : R) (F : Z) (k qb : nat)
    (q : list R) (c scale uc P X P1 CG CR cl ucl LN NL : R) (d : list R * R -> R) (Dsc : R) (E B N Tt : nat)
    (vis : list R * R -> bool) (tiles : list (list (list R * R))),
  let dotf := tf32x3_dot_tc tf32_rna tf32_rz (tc_align F) out k in
  let de := tf32x3_tc_rel (bpow radix2 (1 - F)) ur k qb * P + 0 in
  let sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv) in
  let st := kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) tiles in
  let bL := afe_bL u ue ee ea B N Tt X P1 CG CR in
  0 <= ur -> (forall x, Rabs (out x - x) <= ur * Rabs x) ->
  (1 <= k)%nat -> (1 <= qb)%nat -> (E <= qb * k)%nat ->
  INR (3 * qb) * tc_delta (bpow radix2 (1 - F)) ur k < 1 ->
  mp_exp2 M 0 = 1 -> (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true -> length (fst kv) = E /\ dot_abs q (fst kv) <= P) ->
  0 < scale -> 0 <= uc -> Rabs (c * ln 2 - scale) <= uc * scale ->
  (1 <= B)%nat -> Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rpower 2 (u * (2 * score_max_de A_ scale uc P de)) <= X ->
  (1 + u) ^ (B - 1) <= P1 -> cg M ^ Tt <= CG -> cr M ^ Tt <= CR -> bL < 1 ->
  0 <= ucl -> Rabs (cl - ln 2) <= ucl * ln 2 -> ln (INR N) <= LN -> - ln (1 - bL) <= NL ->
  lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  (forall kv, In kv (filter vis (concat tiles)) ->
     Rabs (score2_with A_ dotf c q (fst kv) * ln 2 - scale * dot_R q (fst kv)) <= d kv) ->
  pp_shift (filter vis (concat tiles)) (fun kv => scale * dot_R q (fst kv)) d <= Dsc ->
  Rabs (rnd (rnd (m_use (ks_m st) + lg (ks_l st)) * cl)
        - ln (rsum (map (fun kv => exp (scale * dot_R q (fst kv))) (filter vis (concat tiles)))))
  <= lse_bound u ea el ucl (score_max_de A_ scale uc P de) Dsc LN NL.
Proof.
  intros out ur F k qb q c scale uc P X P1 CG CR cl ucl LN NL d Dsc E B N Tt vis tiles dotf de sck st bL
    Hur Hout Hk Hq HE Hn Hexp0 Hvis.
  exact (attention_lse_error_masked_dot_pp dotf _ 0 q c scale uc P X P1 CG CR cl ucl LN NL d Dsc E B N Tt vis tiles
           Hexp0 Hvis (tf32x3_tc_dot_model out ur F k qb E Hur Hout Hk Hq HE Hn)).
Qed.

(** The same on the H100's tensor cores ([tf32x3_tc_op_dot_model]). *)
Theorem attention_lse_error_masked_tf32x3_op_pp : forall (out : R -> R) (ur : R) (F : Z) (k qb : nat)
    (q : list R) (c scale uc P X P1 CG CR cl ucl LN NL : R) (d : list R * R -> R) (Dsc : R) (E B N Tt : nat)
    (vis : list R * R -> bool) (tiles : list (list (list R * R))),
  let dotf := tf32x3_dot_tc_op tf32_rna tf32_rz (tc_align_op F) out k in
  let de := tf32x3_tc_rel (bpow radix2 (1 - F)) ur k qb * P + 0 in
  let sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv) in
  let st := kernel_run M (list R * R) sck vis (fun kv _ => snd kv) (kernel_start 1) tiles in
  let bL := afe_bL u ue ee ea B N Tt X P1 CG CR in
  0 <= ur -> (forall x, Rabs (out x - x) <= ur * Rabs x) ->
  (1 <= k)%nat -> (1 <= qb)%nat -> (E <= qb * k)%nat ->
  INR (3 * qb) * tc_delta (bpow radix2 (1 - F)) ur k < 1 ->
  mp_exp2 M 0 = 1 -> (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true -> length (fst kv) = E /\ dot_abs q (fst kv) <= P) ->
  0 < scale -> 0 <= uc -> Rabs (c * ln 2 - scale) <= uc * scale ->
  (1 <= B)%nat -> Forall (fun tl => (length tl <= B)%nat) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  Rpower 2 (u * (2 * score_max_de A_ scale uc P de)) <= X ->
  (1 + u) ^ (B - 1) <= P1 -> cg M ^ Tt <= CG -> cr M ^ Tt <= CR -> bL < 1 ->
  0 <= ucl -> Rabs (cl - ln 2) <= ucl * ln 2 -> ln (INR N) <= LN -> - ln (1 - bL) <= NL ->
  lmin <= 1 - bL -> (1 + bL) * exp LN <= lmax ->
  (forall kv, In kv (filter vis (concat tiles)) ->
     Rabs (score2_with A_ dotf c q (fst kv) * ln 2 - scale * dot_R q (fst kv)) <= d kv) ->
  pp_shift (filter vis (concat tiles)) (fun kv => scale * dot_R q (fst kv)) d <= Dsc ->
  Rabs (rnd (rnd (m_use (ks_m st) + lg (ks_l st)) * cl)
        - ln (rsum (map (fun kv => exp (scale * dot_R q (fst kv))) (filter vis (concat tiles)))))
  <= lse_bound u ea el ucl (score_max_de A_ scale uc P de) Dsc LN NL.
Proof.
  intros out ur F k qb q c scale uc P X P1 CG CR cl ucl LN NL d Dsc E B N Tt vis tiles dotf de sck st bL
    Hur Hout Hk Hq HE Hn Hexp0 Hvis.
  exact (attention_lse_error_masked_dot_pp dotf _ 0 q c scale uc P X P1 CG CR cl ucl LN NL d Dsc E B N Tt vis tiles
           Hexp0 Hvis (tf32x3_tc_op_dot_model out ur F k qb E Hur Hout Hk Hq HE Hn)).
Qed.

End LsePP.

(** ** Part 3: the forward output's running bound with per-pair score errors *)

(** Each computed weight [P'_x = e^(S' x) / Z'] against the exact [P_x = e^(S x) / Z]. *)
Lemma pp_weight : forall {T} (xs : list T) (S S' d : T -> R) D, xs <> [] ->
  (forall x, In x xs -> Rabs (S' x - S x) <= d x) -> pp_shift xs S d <= D ->
  forall x, In x xs ->
  Rabs (exp (S' x) / rsum (map (fun y => exp (S' y)) xs) - exp (S x) / rsum (map (fun y => exp (S y)) xs))
  <= exp (S x) / rsum (map (fun y => exp (S y)) xs) * (exp (d x + D) - 1).
Proof.
  intros T xs S S' d D Hne HS HD.
  pose proof (lse_perturbation_pp xs S S' d Hne HS) as HL.
  destruct xs as [| x0 xs']; [congruence |].
  set (xs := x0 :: xs') in *.
  set (Z := rsum (map (fun x => exp (S x)) xs)) in *.
  set (Z' := rsum (map (fun x => exp (S' x)) xs)) in *.
  assert (HZ : 0 < Z) by apply bw_rsum_exp_pos.
  assert (HZ' : 0 < Z') by apply bw_rsum_exp_pos.
  intros x Hx.
  assert (Ew : exp (S' x) / Z' = exp (S x) / Z * exp ((S' x - S x) - (ln Z' - ln Z))).
  { replace (S' x - S x - (ln Z' - ln Z)) with (S' x + - S x + - ln Z' + ln Z) by ring.
    rewrite !exp_plus, !exp_Ropp, !exp_ln by assumption; field.
    pose proof (exp_pos (S x)); repeat split; lra. }
  assert (Ht : Rabs ((S' x - S x) - (ln Z' - ln Z)) <= d x + D).
  { pose proof (Rabs_triang (S' x - S x) (- (ln Z' - ln Z))) as Ht; rewrite Rabs_Ropp in Ht.
    replace (S' x - S x + - (ln Z' - ln Z)) with (S' x - S x - (ln Z' - ln Z)) in Ht by ring.
    pose proof (HS x Hx); lra. }
  set (t := (S' x - S x) - (ln Z' - ln Z)) in *; set (b := d x + D) in *.
  assert (HP : 0 <= exp (S x) / Z)
    by (apply Rmult_le_pos; [left; apply exp_pos | left; apply Rinv_0_lt_compat, HZ]).
  pose proof (sp_Rabs_le_inv _ _ Ht) as [H1 H2].
  assert (Hb : 0 <= b) by (pose proof (Rabs_pos t); lra).
  assert (Hm : exp (- b) <= exp t) by (apply sp_exp_le; lra).
  assert (HM : exp t <= exp b) by (apply sp_exp_le; lra).
  assert (E0 : exp b * exp (- b) = 1) by (rewrite <- exp_plus, Rplus_opp_r; apply exp_0).
  assert (1 <= exp b) by (rewrite <- exp_0; apply sp_exp_le; lra).
  assert (1 - exp (- b) <= exp b - 1) by (assert (0 < exp (- b)) by apply exp_pos; nra).
  assert (Rabs (exp t - 1) <= exp b - 1) by (apply Rabs_le; split; lra).
  rewrite Ew; replace (exp (S x) / Z * exp t - exp (S x) / Z) with (exp (S x) / Z * (exp t - 1)) by ring.
  rewrite Rabs_mult, (Rabs_right (exp (S x) / Z)) by (apply Rle_ge, HP).
  apply Rmult_le_compat_l; assumption.
Qed.

(** A part [b] of the list, each sum over the whole list's normaliser. *)
Lemma pp_part : forall {T} (xs b : list T) (S S' v d : T -> R) D, xs <> [] -> incl b xs ->
  (forall x, In x xs -> Rabs (S' x - S x) <= d x) -> pp_shift xs S d <= D ->
  Rabs (rsum (map (fun x => exp (S' x) * v x) b) / rsum (map (fun y => exp (S' y)) xs)
        - rsum (map (fun x => exp (S x) * v x) b) / rsum (map (fun y => exp (S y)) xs))
  <= rsum (map (fun x => exp (S x) * (Rabs (v x) * (exp (d x + D) - 1))) b) / rsum (map (fun y => exp (S y)) xs).
Proof.
  intros T xs b S S' v d D Hne Hb HS HD.
  set (Z := rsum (map (fun y => exp (S y)) xs)); set (Z' := rsum (map (fun y => exp (S' y)) xs)).
  rewrite <- !rsum_map_div, <- bw_rsum_map_minus.
  eapply Rle_trans; [apply bw_rsum_abs |]; apply bw_rsum_le; intros x Hx.
  pose proof (pp_weight xs S S' d D Hne HS HD x (Hb x Hx)) as H; fold Z Z' in H.
  replace (exp (S' x) * v x / Z' - exp (S x) * v x / Z) with ((exp (S' x) / Z' - exp (S x) / Z) * v x)
    by (unfold Rdiv; ring).
  replace (exp (S x) * (Rabs (v x) * (exp (d x + D) - 1)) / Z) with (exp (S x) / Z * (exp (d x + D) - 1) * Rabs (v x))
    by (unfold Rdiv; ring).
  rewrite Rabs_mult; apply Rmult_le_compat_r; [apply Rabs_pos | exact H].
Qed.

Lemma pp_shift_shift : forall {T} (xs : list T) (S d : T -> R) a,
  pp_shift xs (fun x => S x - a) d = pp_shift xs S d.
Proof.
  intros T xs S d a; unfold pp_shift; f_equal.
  rewrite (rsum_map_ext (fun x => exp (S x - a + d x)) (fun x => exp (- a) * exp (S x + d x)))
    by (intros; rewrite <- exp_plus; f_equal; ring).
  rewrite (rsum_map_ext (fun x => exp (S x - a)) (fun x => exp (- a) * exp (S x)))
    by (intros; rewrite <- exp_plus; f_equal; ring).
  rewrite !rsum_map_scal_l.
  pose proof (exp_pos (- a)).
  destruct (Req_dec (rsum (map (fun x => exp (S x)) xs)) 0) as [Z | Z].
  - rewrite Z, Rmult_0_r; unfold Rdiv; rewrite !Rinv_0; ring.
  - field; split; [exact Z | lra].
Qed.

Lemma pp_sm_avg_split : forall {T} (xs : list T) (S v d : T -> R) D,
  sm_avg xs S (fun x => Rabs (v x) * exp (d x + D))
  = sm_avg xs S (fun x => Rabs (v x)) + sm_avg xs S (fun x => Rabs (v x) * (exp (d x + D) - 1)).
Proof.
  intros T xs S v d D; unfold sm_avg, Rdiv; rewrite <- Rmult_plus_distr_r, <- rsum_map_plus.
  f_equal; apply rsum_map_ext; intros; ring.
Qed.

Lemma pp_rsum_nonneg_in : forall {T} (f : T -> R) (l : list T), (forall x, In x l -> 0 <= f x) -> 0 <= rsum (map f l).
Proof. intros T f l H; apply rsum_nonneg; intros y Hy; apply in_map_iff in Hy; destruct Hy as [x [<- Hx]]; auto. Qed.

(** [fwd_tile_premise] with per-pair errors: the caller's bound [b_t] (exact scores) gives
    the running fold's premise at the computed scores as [b_t + Yw] in units of [L]
    ([Yw >= sum_j P_j |v_j| (e^(d_j + D) - 1)]: the prefix's and the tile's shares of it are
    disjoint). *)
Lemma fwd_tile_premise_pp : forall (sck : list R * R -> R) (vis : list R * R -> bool) (tiles : list (list (list R * R)))
    (scale : R) (q : list R) (mt L : R) (d : list R * R -> R) (D Yw b : R) (t : nat),
  filter vis (concat tiles) <> [] ->
  (forall kv, In kv (filter vis (concat tiles)) ->
     Rabs ((sck kv - mt) * ln 2 - (scale * dot_R q (fst kv) - mt * ln 2)) <= d kv) ->
  pp_shift (filter vis (concat tiles)) (fun kv => scale * dot_R q (fst kv) - mt * ln 2) d <= D ->
  L = rsum (map (fun kv => exp ((sck kv - mt) * ln 2)) (filter vis (concat tiles))) ->
  rsum (map (fun kv => exp (scale * dot_R q (fst kv)) * (Rabs (snd kv) * (exp (d kv + D) - 1))) (filter vis (concat tiles)))
    / fwd_Z scale q vis tiles <= Yw ->
  (t < length tiles)%nat ->
  Rabs (fwd_prefix scale q vis tiles t) + fwd_tile_abs scale q vis tiles t <= b ->
  Rabs (rsum (map (fun kv => exp ((sck kv - mt) * ln 2) * snd kv) (filter vis (concat (firstn t tiles)))))
  + rsum (map (fun kv => exp ((sck kv - mt) * ln 2) * Rabs (snd kv)) (filter vis (nth t tiles [])))
  <= L * (b + Yw).
Proof.
  intros sck vis tiles scale q mt L d D Yw b t Hne Hd HD EL HYw Ht Hb.
  assert (Hd0 : forall kv, In kv (filter vis (concat tiles)) -> 0 <= d kv)
    by (intros kv Hkv; eapply Rle_trans; [apply Rabs_pos | exact (Hd kv Hkv)]).
  assert (HD0 : 0 <= D) by (eapply Rle_trans; [| exact HD]; apply (pp_shift_nonneg _ _ d Hne Hd0)).
  assert (HZ : 0 < fwd_Z scale q vis tiles).
  { destruct (filter vis (concat tiles)) as [| kv0 l0] eqn:Ef; [congruence |].
    unfold fwd_Z; rewrite Ef; apply (bw_rsum_exp_pos (fun kv => scale * dot_R q (fst kv))). }
  assert (HL : 0 < L).
  { destruct (filter vis (concat tiles)) as [| kv0 l0] eqn:Ef; [congruence |].
    rewrite EL; apply (bw_rsum_exp_pos (fun kv => (sck kv - mt) * ln 2)). }
  pose proof (far_split vis tiles t Ht) as Hs.
  unfold fwd_prefix, fwd_tile_abs in Hb; unfold fwd_Z in Hb, HZ, HYw.
  rewrite Hs in Hb, HZ, HYw, EL, Hd, HD, Hd0, Hne.
  set (pa := filter vis (concat (firstn t tiles))) in *.
  set (pb := filter vis (nth t tiles [])) in *.
  set (pc := filter vis (concat (skipn (S t) tiles))) in *.
  assert (Ia : incl pa (pa ++ pb ++ pc)) by (intros x Hx; apply in_or_app; left; exact Hx).
  assert (Ib : incl pb (pa ++ pb ++ pc)) by (intros x Hx; apply in_or_app; right; apply in_or_app; left; exact Hx).
  pose proof (pp_part (pa ++ pb ++ pc) pa (fun kv => scale * dot_R q (fst kv) - mt * ln 2)
                (fun kv => (sck kv - mt) * ln 2) snd d D Hne Ia Hd HD) as P1.
  pose proof (pp_part (pa ++ pb ++ pc) pb (fun kv => scale * dot_R q (fst kv) - mt * ln 2)
                (fun kv => (sck kv - mt) * ln 2) (fun kv => Rabs (snd kv)) d D Hne Ib Hd HD) as P2.
  cbv beta in P1, P2; rewrite <- EL in P1, P2.
  set (Sx := fun kv : list R * R => scale * dot_R q (fst kv)).
  set (E := fun kv : list R * R => Rabs (snd kv) * (exp (d kv + D) - 1)).
  pose proof (part_shift pa (pa ++ pb ++ pc) Sx snd (mt * ln 2)) as Sh1.
  pose proof (part_shift pa (pa ++ pb ++ pc) Sx E (mt * ln 2)) as Sh2.
  pose proof (part_shift pb (pa ++ pb ++ pc) Sx (fun kv => Rabs (snd kv)) (mt * ln 2)) as Sh3.
  pose proof (part_shift pb (pa ++ pb ++ pc) Sx E (mt * ln 2)) as Sh4.
  unfold Sx, E in Sh1, Sh2, Sh3, Sh4; cbv beta in Sh1, Sh2, Sh3, Sh4.
  rewrite (rsum_map_ext (fun x => exp (scale * dot_R q (fst x) - mt * ln 2) * (Rabs (Rabs (snd x)) * (exp (d x + D) - 1)))
             (fun x => exp (scale * dot_R q (fst x) - mt * ln 2) * (Rabs (snd x) * (exp (d x + D) - 1))))
    in P2 by (intros; rewrite Rabs_Rabsolu; reflexivity).
  rewrite Sh1, Sh2 in P1; rewrite Sh3, Sh4 in P2.
  set (Z := rsum (map (fun x => exp (scale * dot_R q (fst x))) (pa ++ pb ++ pc))) in *.
  set (N1 := rsum (map (fun kv => exp ((sck kv - mt) * ln 2) * snd kv) pa)) in *.
  set (T1 := rsum (map (fun kv => exp ((sck kv - mt) * ln 2) * Rabs (snd kv)) pb)) in *.
  set (Ef := fun x : list R * R => exp (scale * dot_R q (fst x)) * (Rabs (snd x) * (exp (d x + D) - 1))).
  assert (HE : forall x, In x (pa ++ pb ++ pc) -> 0 <= Ef x).
  { intros x Hx; unfold Ef; apply Rmult_le_pos; [left; apply exp_pos | apply Rmult_le_pos; [apply Rabs_pos |]].
    pose proof (Hd0 x Hx); assert (1 <= exp (d x + D)) by (rewrite <- exp_0; apply sp_exp_le; lra); lra. }
  assert (HEab : rsum (map Ef pa) / Z + rsum (map Ef pb) / Z <= Yw).
  { eapply Rle_trans; [| exact HYw]; fold Ef Z.
    rewrite !map_app, !rsum_app; unfold Rdiv.
    assert (0 <= rsum (map Ef pc)) by (apply pp_rsum_nonneg_in; intros x Hx; apply HE; apply in_or_app; right; apply in_or_app; right; exact Hx).
    assert (0 <= rsum (map Ef pc) * / Z) by (apply Rmult_le_pos; [lra | left; apply Rinv_0_lt_compat; exact HZ]).
    nra. }
  fold Ef in P1, P2.
  set (Pa := rsum (map (fun x => exp (scale * dot_R q (fst x)) * snd x) pa) / Z) in *.
  set (Tb := rsum (map (fun x => exp (scale * dot_R q (fst x)) * Rabs (snd x)) pb) / Z) in *.
  assert (H1 : Rabs (N1 / L) <= Rabs Pa + rsum (map Ef pa) / Z).
  { replace (N1 / L) with ((N1 / L - Pa) + Pa) by ring; eapply Rle_trans; [apply Rabs_triang | lra]. }
  assert (H2 : T1 / L <= Tb + rsum (map Ef pb) / Z) by (pose proof (Rle_abs (T1 / L - Tb)); lra).
  assert (EN : Rabs N1 = L * Rabs (N1 / L)).
  { unfold Rdiv; rewrite Rabs_mult, (Rabs_right (/ L)) by (left; apply Rinv_0_lt_compat; lra); field; lra. }
  assert (ET : T1 = L * (T1 / L)) by (field; lra).
  rewrite EN, ET, <- Rmult_plus_distr_l; apply Rmult_le_compat_l; lra.
Qed.

(** The coefficient of [Yw] in [attention_forward_acc_running_pp]. *)
Definition afr_ypp (u ue ee ea us : R) (n N Tt : nat) (X P1 CG CR CB : R) : R :=
  let bL := afe_bL u ue ee ea n N Tt X P1 CG CR in
  ((1 + u) * (afr_gA ue us X CB + bL + X * (CB - 1)) / (1 - bL) + u + 1) * (1 + us).


Section ForwardPP.

Variable M : MixedModel.

Import ModelNotations.
Import ExpNotations.

(** The forward output for any relative bound of [l] ([l_fold_rel] at [afe_bL .. CGl ..] on the
    tiles of visible keys): [attention_forward_acc_running_pp] ([CGl = CG >= cg^Tt]) and
    ForwardAccRunningCounted.v's [attention_forward_acc_running_counted_pp] ([CGl = CGc]) are its
    instances. *)
Lemma attention_forward_acc_running_pp_gen : forall (dotf : list R -> list R -> R) (d_rel d_abs : R)
    (accf : R -> list R -> list R -> R) (n : nat) (g_rel g_abs : R)
    (q : list R) (c scale uc P V X Y P1 CG CR CGA CRA CB : R) (E N Tt : nat)
    (vis : list R * R -> bool) (tiles : list (list (list R * R))) (bs : list R) (d : list R * R -> R) (Dsc Yw : R)
    (CGl : R),
  let sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv) in
  let st := kernel_run_acc M (list R * R) sck vis (fun kv _ => snd kv) accf (kernel_start 1) tiles in
  mp_exp2 M 0 = 1 ->
  (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  dot_model dotf E d_rel d_abs ->
  acc_dot_model accf n g_rel g_abs ->
  afe_premises_de M c scale uc P (d_rel * P + d_abs) V X Y P1 CG CR n N Tt ->
  cgA M g_rel ^ Tt <= CGA -> crA M g_rel ^ Tt <= CRA ->
  (1 + afr_gb u ue us X g_rel) ^ Tt <= CB ->
  length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true ->
     length (fst kv) = E /\ dot_abs q (fst kv) <= P /\ Rabs (snd kv) <= V) ->
  Forall (fun tl => length tl = n) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  fwd_running_premise scale q vis tiles bs ->
  (forall kv, In kv (filter vis (concat tiles)) ->
     Rabs (score2_with A_ dotf c q (fst kv) * ln 2 - scale * dot_R q (fst kv)) <= d kv) ->
  pp_shift (filter vis (concat tiles)) (fun kv => scale * dot_R q (fst kv)) d <= Dsc ->
  sm_avg (filter vis (concat tiles)) (fun kv => scale * dot_R q (fst kv))
    (fun kv => Rabs (snd kv) * (exp (d kv + Dsc) - 1)) <= Yw ->
  afe_bL u ue ee ea n N Tt X P1 CGl CR < 1 ->
  (forall k0 r rest, concat ((k0 :: r) :: rest) = filter vis (concat tiles) ->
     l_fold_rel M X n N Tt (afe_bL u ue ee ea n N Tt X P1 CGl CR) (sck k0)
       (map (map fst) (map (map (kv_pair_with M dotf c q)) ((k0 :: r) :: rest)))) ->
  Rabs (ff_rnd S_ (rnd (nth 0 (ks_acc st) 0 / ks_l st)) - exact_softmax scale q (filter vis (concat tiles)))
  <= afr_rel u ue ee ea us n N Tt X 0 P1 CGl CR CB
       * exact_softmax scale q (map abs_value (filter vis (concat tiles)))
     + afr_C u ue ee ea us n N Tt X 0 P1 CGl CR * run_err (afr_gb u ue us X g_rel) 0 bs
     + afr_ypp u ue ee ea us n N Tt X P1 CGl CR CB * Yw
     + afr_abs u ue ee ea us es V n N Tt X P1 CGl CR CGA CRA CB g_rel g_abs.
Proof.
  intros dotf d_rel d_abs accf n g_rel g_abs q c scale uc P V X Y P1 CG CR CGA CRA CB E N Tt vis tiles bs d Dsc Yw CGl sck st
    Hexp0 Hvis Hdm Hadm Hpre HCGA HCRA HCB Hq Hkeys Hn HN HT [Hbl Hbs] Hdpp HDsc HYw HbLl Hl.
  pose proof Hpre as [HV Hs Huc Hc HB HX _ _ _ _ _].
  pose proof (ff_u_nonneg A_) as Hu0; pose proof (ff_eta_nonneg A_) as Hea.
  pose proof (ff_u_nonneg S_) as Hus; pose proof (ff_eta_nonneg S_) as Hes.
  pose proof (mp_eta_e_nonneg M) as Hee; pose proof (mp_ue_nonneg M) as Hue.
  pose proof (adm_rel_nonneg _ _ _ _ Hadm) as Hg; pose proof (adm_abs_nonneg _ _ _ _ Hadm) as Hga.
  assert (HBt : Forall (fun tl => (length tl <= n)%nat) tiles)
    by (apply Forall_forall; intros tl Htl; rewrite (proj1 (Forall_forall _ _) Hn tl Htl); lia).
  destruct (kernel_run_visible_tiles_with M dotf c q vis n tiles Hexp0 Hvis HBt) as [k0 [r [rest [Ecat [HBf [Hlen Est]]]]]].
  set (ft := (k0 :: r) :: rest) in *.
  set (kt := map (map (kv_pair_with M dotf c q)) ft) in *.
  set (m0 := score2_with A_ dotf c q (fst k0)) in *.
  destruct (kernel_run_acc_m_l M (list R * R) sck vis (fun kv _ => snd kv) accf tiles (kernel_start 1) (kernel_start 1)
              eq_refl eq_refl) as [Em El].
  fold st in Em, El; unfold sck in Em, El; rewrite Est in Em, El; cbn [ks_m ks_l] in Em, El.
  assert (Hkeys' : forall kv, In kv (concat ft) -> length (fst kv) = E /\ dot_abs q (fst kv) <= P /\ Rabs (snd kv) <= V)
    by (intros kv Hkv; rewrite Ecat in Hkv; apply filter_In in Hkv; destruct Hkv; auto).
  assert (HN' : (length (concat ft) <= N)%nat) by (rewrite Ecat; exact HN).
  assert (HT' : (length ft <= Tt)%nat) by lia.
  destruct (kernel_tiles_ok_with M dotf d_rel d_abs q c scale uc P V E n N Tt k0 r rest Hdm Hq Hkeys' Hs Huc Hc HBf HN' HT')
    as [Hdelta [HK [Hm0t [HmK [Ecat' [Hsc [Hex [Hks [HBk [HNk HTk]]]]]]]]]].
  destruct (kernel_scores_ok M dotf d_rel d_abs q c scale uc P E k0 r rest Hdm Hq
              (fun kv Hkv => conj (proj1 (Hkeys' kv Hkv)) (proj1 (proj2 (Hkeys' kv Hkv)))) Hs Huc Hc)
    as [Hsc2 [_ [Hsmax [_ [_ [_ [_ [Hmt _]]]]]]]].
  fold ft kt m0 in Hdelta, HK, Hm0t, HmK, Ecat', Hsc, Hex, Hks, HBk, HNk, HTk, Hsc2, Hmt.
  set (delta := score_delta_de A_ scale uc P (d_rel * P + d_abs)) in *.
  set (smax := score_max_de A_ scale uc P (d_rel * P + d_abs)) in *.
  set (K := 2 * smax) in *.
  set (mt := acc_m_run m0 kt) in *.
  (* the accumulator *)
  assert (Hok : forall kv, In kv (concat tiles) -> vis kv = true ->
                  fmt (sck kv) /\ - smax <= sck kv <= - smax + K /\ Rabs ((fun kv _ => snd kv) kv 0%nat) <= V).
  { intros kv Hkv Ev.
    assert (Hf : In kv (concat ft)) by (rewrite Ecat; apply filter_In; auto).
    destruct (Hsc2 kv Hf) as [_ Hb]; apply Rabs_le_inv in Hb.
    split; [apply ff_rnd_fmt | split; [unfold K, sck; lra | apply (Hkeys' kv Hf)]]. }
  destruct (acc_kernel_inv M (list R * R) sck vis (fun kv _ => snd kv) accf n g_rel g_abs K V (- smax) N Tt 0 tiles
              (kernel_start 1) Hadm HK (Rlt_le _ _ HV) Hn HT HN Hok eq_refl ltac:(cbn; lia) mt Em) as [_ [Hmb _]].
  assert (Ekp : map (fun k : list R * R => (sck k, snd k)) (filter vis (concat tiles)) = concat kt)
    by (rewrite Ecat', <- Ecat; reflexivity).
  (* the denominator *)
  assert (Fm0 : fmt m0) by apply ff_rnd_fmt.
  assert (HBt' : Forall (fun tl => (length tl <= n)%nat) (map (map fst) kt)).
  { apply Forall_forall; intros tl Htl; apply in_map_iff in Htl; destruct Htl as [tl' [<- Htl']].
    rewrite map_length; exact (proj1 (Forall_forall _ _) HBk tl' Htl'). }
  assert (Hmr : m_run m0 (map (map fst) kt) = mt) by (unfold m_run, mt, acc_m_run; apply mrun_map).
  assert (Hks' : forall s, In s (concat (map (map fst) kt)) -> fmt s /\ m_run m0 (map (map fst) kt) - s <= K).
  { intros s0 Hs0; rewrite <- concat_map in Hs0; apply in_map_iff in Hs0; destruct Hs0 as [p [<- Hp]].
    rewrite Hmr; destruct (Hks p Hp) as [_ [F1 F2]]; split; assumption. }
  assert (HN'' : (length (concat (map (map fst) kt)) <= N)%nat) by (rewrite <- concat_map, map_length; exact HNk).
  assert (HT'' : (length (map (map fst) kt) <= Tt)%nat) by (rewrite map_length; exact HTk).
  set (L := exact_l mt (map fst (concat kt))) in *.
  assert (HL1 : 1 <= L).
  { apply exact_l_ge_1; destruct (mrun_attained fst kt m0) as [E0 | Hq0]; [| exact Hq0].
    destruct Hex as [p [Hp Ep]]; exists p; split; [exact Hp | unfold mt, acc_m_run; rewrite E0; exact Ep]. }
  set (bL := afe_bL u ue ee ea n N Tt X P1 CGl CR) in *.
  assert (Hlb : Rabs (l_run M m0 0 (map (map fst) kt) - L) <= bL * L).
  { pose proof (Hl k0 r rest Ecat : l_fold_rel M X n N Tt bL m0 (map (map fst) kt)) as Hl0.
    pose proof (Hl0 K HK HX Fm0 HB Hks' HBt' HN'' HT'' ltac:(rewrite Hmr; exact Hm0t) ltac:(rewrite Hmr; exact HmK)
                  ltac:(rewrite Hmr, <- concat_map; exact HL1)) as Hr.
    rewrite Hmr, <- concat_map in Hr; exact Hr. }
  assert (HbL0 : 0 <= bL) by (pose proof (Rabs_pos (l_run M m0 0 (map (map fst) kt) - L)); nra).
  (* the caller's bounds, in the kernel's units *)
  assert (HX1 : 1 <= X) by (assert (1 <= Rpower 2 (u * K)) by (apply ose_rpow_ge_1, Rmult_le_pos; lra); lra).
  set (gb := afr_gb u ue us X g_rel) in *.
  assert (Hgb : gR M g_rel + g_rel * (H_pv M K - 1) <= gb).
  { unfold gb, afr_gb, gR, H_pv, tile_E.
    assert ((1 + us) * ((1 + ue) * Rpower 2 (u * K)) <= (1 + us) * (1 + ue) * X)
      by (rewrite <- Rmult_assoc; apply Rmult_le_compat_l; [apply Rmult_le_pos; lra | exact HX]).
    assert (g_rel * ((1 + us) * ((1 + ue) * Rpower 2 (u * K)) - 1) <= g_rel * ((1 + us) * (1 + ue) * X - 1))
      by (apply Rmult_le_compat_l; lra).
    lra. }
  assert (Hgb0 : 0 <= gb) by (pose proof (gR_nonneg M g_rel Hg); pose proof (H_pv_ge_1 M K HK);
                               assert (0 <= g_rel * (H_pv M K - 1)) by (apply Rmult_le_pos; lra); lra).
  set (Z0 := fwd_Z scale q vis tiles).
  assert (HZ0 : 0 < Z0).
  { destruct Hvis as [kv0 [Hkv0 Ev0]].
    apply (Rlt_le_trans _ (exp (scale * dot_R q (fst kv0)))); [apply exp_pos |].
    unfold Z0, fwd_Z; apply ost_rsum_ge_in.
    - intros y Hy; apply in_map_iff in Hy; destruct Hy as [x [<- _]]; left; apply exp_pos.
    - apply in_map_iff; exists kv0; split; [reflexivity | apply filter_In; auto]. }
  set (Wx := exact_softmax scale q (map abs_value (filter vis (concat tiles)))).
  assert (EWx : Wx = rsum (map (fun kv => exp (scale * dot_R q (fst kv)) * Rabs (snd kv)) (filter vis (concat tiles)))
                     / fwd_Z scale q vis tiles)
    by (unfold Wx, exact_softmax, fwd_Z; rewrite !map_map; reflexivity).
  assert (EL : L = rsum (map (fun kv => exp ((sck kv - mt) * ln 2)) (filter vis (concat tiles))))
    by (unfold L, exact_l; rewrite <- Ekp, !map_map; reflexivity).
  assert (HL0 : 0 < L) by lra.
  assert (Hd01 : forall kv, In kv (filter vis (concat tiles)) ->
                   Rabs ((sck kv - mt) * ln 2 - (scale * dot_R q (fst kv) - mt * ln 2)) <= d kv).
  { intros kv Hkv; unfold sck.
    replace ((score2_with A_ dotf c q (fst kv) - mt) * ln 2 - (scale * dot_R q (fst kv) - mt * ln 2))
      with (score2_with A_ dotf c q (fst kv) * ln 2 - scale * dot_R q (fst kv)) by ring.
    exact (Hdpp kv Hkv). }
  assert (HD01 : pp_shift (filter vis (concat tiles)) (fun kv => scale * dot_R q (fst kv) - mt * ln 2) d <= Dsc).
  { pose proof (pp_shift_shift (filter vis (concat tiles)) (fun kv => scale * dot_R q (fst kv)) d (mt * ln 2)) as Esh.
    cbv beta in Esh; rewrite Esh; exact HDsc. }
  assert (Hne : filter vis (concat tiles) <> []).
  { intro Hc0; rewrite <- Ecat in Hc0; unfold ft in Hc0; cbn [concat app] in Hc0; discriminate. }
  set (bs' := map (fun b => 1 * b + Yw) bs).
  assert (Hpt : forall t, (t < length tiles)%nat ->
     Rabs (exact_pv mt (kpairs (list R * R) sck vis (fun kv _ => snd kv) 0 (concat (firstn t tiles))))
     + exact_pv_abs mt (kpairs (list R * R) sck vis (fun kv _ => snd kv) 0 (nth t tiles [])) <= L * nth t bs' 0).
  { intros t Ht.
    unfold bs'; rewrite far_nth_map by lia; rewrite Rmult_1_l.
    unfold exact_pv, exact_pv_abs, kpairs; rewrite !map_map; cbn [fst snd].
    exact (fwd_tile_premise_pp sck vis tiles scale q mt L d Dsc Yw (nth t bs 0) t Hne Hd01 HD01 EL HYw Ht (Hbs t Ht)). }
  pose proof (acc_kernel_running M (list R * R) sck vis (fun kv _ => snd kv) accf n g_rel g_abs K V (- smax) N Tt 0
                mt L gb tiles bs' (kernel_start 1) Hadm HK (Rlt_le _ _ HV) HL0 Hgb Hn HT HN Hok
                ltac:(unfold bs'; rewrite map_length; exact Hbl) Hpt eq_refl ltac:(cbn; lia) mt Em) as Ca.
  fold st in Ca; unfold kpairs in Ca; cbv beta in Ca; rewrite Ekp in Ca.
  (* the constants *)
  assert (Hb0 : Forall (fun b => 0 <= b) bs).
  { apply Forall_forall; intros b Hb.
    destruct (In_nth bs b 0 Hb) as [t [Ht <-]].
    rewrite Hbl in Ht; pose proof (Hbs t Ht) as H.
    assert (0 <= fwd_tile_abs scale q vis tiles t).
    { unfold fwd_tile_abs; fold Z0; unfold Rdiv; apply Rmult_le_pos; [| left; apply Rinv_0_lt_compat; exact HZ0].
      apply far_rsum_nonneg; intros; apply Rmult_le_pos; [left; apply exp_pos | apply Rabs_pos]. }
    pose proof (Rabs_pos (fwd_prefix scale q vis tiles t)); lra. }
  set (R0 := run_err gb 0 bs).
  assert (HR0 : 0 <= R0) by (apply run_err_nonneg; [exact Hgb0 | lra | exact Hb0]).
  assert (HW0 : 0 <= Wx).
  { rewrite EWx; unfold Rdiv; apply Rmult_le_pos; [| left; apply Rinv_0_lt_compat; exact HZ0].
    apply far_rsum_nonneg; intros; apply Rmult_le_pos; [left; apply exp_pos | apply Rabs_pos]. }
  assert (HD0 : 0 <= Dsc).
  { eapply Rle_trans; [| exact HDsc]; apply (pp_shift_nonneg _ _ d Hne).
    intros kv Hkv; eapply Rle_trans; [apply Rabs_pos | exact (Hdpp kv Hkv)]. }
  assert (HYw0 : 0 <= Yw).
  { eapply Rle_trans; [| exact HYw]; unfold sm_avg, Rdiv; apply Rmult_le_pos; [| left; apply Rinv_0_lt_compat; exact HZ0].
    apply rsum_nonneg; intros y Hy; apply in_map_iff in Hy; destruct Hy as [kv [<- Hkv]].
    apply Rmult_le_pos; [left; apply exp_pos | apply Rmult_le_pos; [apply Rabs_pos |]].
    assert (0 <= d kv) by (eapply Rle_trans; [apply Rabs_pos | exact (Hdpp kv Hkv)]).
    assert (1 <= exp (d kv + Dsc)) by (rewrite <- exp_0; apply sp_exp_le; lra). lra. }
  assert (HCB1 : (1 + gb) ^ length bs <= CB).
  { eapply Rle_trans; [| exact HCB]; apply Rle_pow; [lra | lia]. }
  assert (HCB_1 : 1 <= CB) by (assert (1 <= (1 + gb) ^ length bs) by (apply pow_R1_Rle; lra); lra).
  assert (HgCB : (1 + gR M g_rel) ^ length tiles <= CB).
  { eapply Rle_trans; [| exact HCB].
    assert (gR M g_rel <= gb) by (pose proof (H_pv_ge_1 M K HK); assert (0 <= g_rel * (H_pv M K - 1)) by (apply Rmult_le_pos; lra); lra).
    eapply Rle_trans; [apply pow_incr; split; [pose proof (gR_nonneg M g_rel Hg); lra | apply Rplus_le_compat_l; exact H] |].
    apply Rle_pow; [lra | lia]. }
  assert (Hrho : run_err gb 0 bs' <= R0 + Yw * (CB - 1)).
  { unfold bs'; rewrite run_err_affine; fold R0.
    assert (Yw * ((1 + gb) ^ length bs - 1) <= Yw * (CB - 1)) by (apply Rmult_le_compat_l; lra).
    lra. }
  assert (Hrho0 : 0 <= run_err gb 0 bs').
  { unfold bs'; rewrite run_err_affine; fold R0.
    assert (1 <= (1 + gb) ^ length bs) by (apply pow_R1_Rle; lra).
    assert (0 <= Yw * ((1 + gb) ^ length bs - 1)) by (apply Rmult_le_pos; lra).
    lra. }
  assert (HmtK : mt - - smax <= K) by (apply Rabs_le_inv in Hmt; unfold K; lra).
  assert (HpX : Rpower 2 (u * (mt - - smax)) <= X)
    by (assert (Rpower 2 (u * (mt - - smax)) <= Rpower 2 (u * K)) by (apply ost_rpow_le, Rmult_le_compat_l; lra); lra).
  set (Qf := X * (R0 + Yw * (CB - 1))).
  assert (HQf : 0 <= Qf) by (unfold Qf; apply Rmult_le_pos; lra).
  assert (HQ : L * Rpower 2 (mt - mt) * Rpower 2 (u * (mt - - smax)) * run_err gb 0 bs' <= L * Qf).
  { rewrite Rminus_diag_eq, Rpower_O, Rmult_1_r by (reflexivity || lra).
    rewrite Rmult_assoc; apply Rmult_le_compat_l; [lra |]; unfold Qf.
    apply Rmult_le_compat; [left; apply Rpower_pos | exact Hrho0 | exact HpX | exact Hrho]. }
  destruct (afr_acc_constants M K g_rel g_abs (- smax) V n N Tt (length tiles) mt X CGA CRA CB HK Hg Hga HV ltac:(lia) HX
              ltac:(pose proof (Rabs_le_inv _ _ Hmt); lra) HpX HCGA HCRA HgCB) as [HGA [HgA0 [HRA HrA0]]].
  set (gA := afr_gA ue us X CB) in *.
  set (rA := afr_rR u ue ee ea us es V n N Tt X CGA CRA CB g_rel g_abs) in *.
  pose proof (exact_pv_abs_ge mt (concat kt)) as HNA.
  assert (HA0 : 0 <= exact_pv_abs mt (concat kt)) by (eapply Rle_trans; [apply Rabs_pos | exact HNA]).
  assert (Hab : Rabs (nth 0 (ks_acc st) 0 - exact_pv mt (concat kt)) <= gA * exact_pv_abs mt (concat kt) + (L * Qf + rA)).
  { unfold inv in Ca; eapply Rle_trans; [exact Ca |].
    assert ((GR M K g_rel (- smax) (length tiles) mt - 1) * exact_pv_abs mt (concat kt)
            <= gA * exact_pv_abs mt (concat kt)) by (apply Rmult_le_compat_r; lra).
    lra. }
  assert (Hon := final_division_run M (l_run M m0 0 (map (map fst) kt)) L (nth 0 (ks_acc st) 0)
                   (exact_pv mt (concat kt)) (exact_pv_abs mt (concat kt)) bL gA Qf rA HL1 HNA
                   ltac:(lra) HgA0 HQf HrA0 Hlb Hab).
  rewrite El.
  (* the perturbation of the scores, a-posteriori *)
  set (S0 := fun kv : list R * R => scale * dot_R q (fst kv) - mt * ln 2).
  set (S1 := fun kv : list R * R => (score2_with A_ dotf c q (fst kv) - mt) * ln 2).
  assert (EN : exact_pv mt (concat kt) / L = sm_avg (concat ft) S1 snd)
    by (unfold L, exact_pv, exact_l, sm_avg; rewrite Ecat', !map_map; reflexivity).
  assert (EA : exact_pv_abs mt (concat kt) / L = sm_avg (concat ft) S1 (fun kv => Rabs (snd kv)))
    by (unfold L, exact_pv_abs, exact_l, sm_avg; rewrite Ecat', !map_map; reflexivity).
  assert (EW : Wx = sm_avg (concat ft) S0 (fun kv => Rabs (snd kv))).
  { unfold Wx; rewrite <- Ecat; unfold exact_softmax, sm_avg, S0; rewrite !map_map; cbn [abs_value fst snd]; symmetry.
    apply (softmax_average_shift (concat ft) (fun kv => scale * dot_R q (fst kv)) (fun kv => Rabs (snd kv)) (mt * ln 2)). }
  rewrite <- Ecat.
  assert (EZ : exact_softmax scale q (concat ft) = sm_avg (concat ft) S0 snd)
    by (unfold exact_softmax, sm_avg, S0; symmetry;
        apply (softmax_average_shift (concat ft) (fun kv => scale * dot_R q (fst kv)) snd (mt * ln 2))).
  rewrite EN, EA in Hon; rewrite EZ.
  assert (HD1 : pp_shift (concat ft) S0 d <= Dsc) by (rewrite Ecat; exact HD01).
  destruct (softmax_perturbation_pp (concat ft) S0 S1 snd d Dsc ltac:(rewrite Ecat; exact Hne)) as [Hp1 Hp2].
  { intros kv Hkv; unfold S0, S1.
    replace ((score2_with A_ dotf c q (fst kv) - mt) * ln 2 - (scale * dot_R q (fst kv) - mt * ln 2))
      with (score2_with A_ dotf c q (fst kv) * ln 2 - scale * dot_R q (fst kv)) by ring.
    rewrite Ecat in Hkv; exact (Hdpp kv Hkv). }
  { exact HD1. }
  assert (EYs : sm_avg (concat ft) S0 (fun x => Rabs (snd x) * (exp (d x + Dsc) - 1)) <= Yw).
  { unfold S0; rewrite Ecat; unfold sm_avg; cbv beta.
    pose proof (softmax_average_shift (filter vis (concat tiles)) (fun kv => scale * dot_R q (fst kv))
                  (fun x => Rabs (snd x) * (exp (d x + Dsc) - 1)) (mt * ln 2)) as Esh.
    cbv beta in Esh; rewrite Esh; exact HYw. }
  rewrite (pp_sm_avg_split (concat ft) S0 snd d Dsc) in Hp2.
  destruct (sm_avg_abs (concat ft) S0 snd) as [HZW _].
  destruct (sm_avg_abs (concat ft) S1 snd) as [_ HW1].
  rewrite <- EW in Hp2, HZW.
  set (W1 := sm_avg (concat ft) S1 (fun kv => Rabs (snd kv))) in *.
  set (Z := sm_avg (concat ft) S0 snd) in *.
  set (Z1 := sm_avg (concat ft) S1 snd) in *.
  set (o := rnd (nth 0 (ks_acc st) 0 / l_run M m0 0 (map (map fst) kt))) in *.
  (* the closed form *)
  assert (HW1W : W1 <= Wx + Yw) by lra.
  assert (HZ1Z : Rabs (Z1 - Z) <= Yw) by lra.
  set (c1 := (1 + u) * (gA + bL) / (1 - bL)).
  assert (Hc1 : 0 <= c1) by (unfold c1; apply afr_c1_nonneg; [lra | lra | split; lra]).
  set (err := ((1 + u) * (gA + bL) / (1 - bL) + u) * Wx + (1 + u) * X / (1 - bL) * R0
              + ((1 + u) * (gA + bL + X * (CB - 1)) / (1 - bL) + u + 1) * Yw + (1 + u) * rA / (1 - bL) + ea).
  assert (Herr : Rabs (o - Z) <= err).
  { replace (o - Z) with ((o - Z1) + (Z1 - Z)) by ring.
    eapply Rle_trans; [apply Rabs_triang |].
    replace ((1 + u) * ((gA + bL) * W1 + Qf + rA) / (1 - bL) + u * W1 + ea)
      with (c1 * W1 + (1 + u) * Qf / (1 - bL) + (1 + u) * rA / (1 - bL) + u * W1 + ea) in Hon by (unfold c1; field; lra).
    assert (c1 * W1 <= c1 * (Wx + Yw)) by (apply Rmult_le_compat_l; lra).
    assert (u * W1 <= u * (Wx + Yw)) by (apply Rmult_le_compat_l; lra).
    replace err with (c1 * (Wx + Yw) + (1 + u) * Qf / (1 - bL) + (1 + u) * rA / (1 - bL) + u * (Wx + Yw) + ea + Yw)
      by (unfold err, c1, Qf; field; lra).
    lra. }
  assert (Ho : Rabs o <= Wx + err)
    by (replace o with ((o - Z) + Z) by ring; eapply Rle_trans; [apply Rabs_triang | lra]).
  pose proof (ff_abs S_ o) as Hso.
  fold Wx.
  replace (afr_rel u ue ee ea us n N Tt X 0 P1 CGl CR CB * Wx + afr_C u ue ee ea us n N Tt X 0 P1 CGl CR * R0
           + afr_ypp u ue ee ea us n N Tt X P1 CGl CR CB * Yw
           + afr_abs u ue ee ea us es V n N Tt X P1 CGl CR CGA CRA CB g_rel g_abs)
    with (err * (1 + us) + us * Wx + es)
    by (unfold err, afr_rel, afr_C, afr_abs, afr_ypp; cbv zeta; fold bL gA rA; field; lra).
  replace (ff_rnd S_ o - Z) with ((ff_rnd S_ o - o) + (o - Z)) by ring.
  eapply Rle_trans; [apply Rabs_triang |].
  assert (us * Rabs o <= us * (Wx + err)) by (apply Rmult_le_compat_l; lra).
  lra.
Qed.
(** ForwardAccRunning.v's [attention_forward_acc_running] with the per-key score error
    [d], [Dsc >= pp_shift] and [Yw >= sum_j P_j |v_j| (e^(d_j + Dsc) - 1)]:
      |out - sum_j P_j v_j| <= afr_rel(Y := 0) W + afr_C(Y := 0) run_err afr_gb 0 bs
                               + afr_ypp Yw + afr_abs. *)
Theorem attention_forward_acc_running_pp : forall (dotf : list R -> list R -> R) (d_rel d_abs : R)
    (accf : R -> list R -> list R -> R) (n : nat) (g_rel g_abs : R)
    (q : list R) (c scale uc P V X Y P1 CG CR CGA CRA CB : R) (E N Tt : nat)
    (vis : list R * R -> bool) (tiles : list (list (list R * R))) (bs : list R) (d : list R * R -> R) (Dsc Yw : R),
  let sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv) in
  let st := kernel_run_acc M (list R * R) sck vis (fun kv _ => snd kv) accf (kernel_start 1) tiles in
  mp_exp2 M 0 = 1 ->
  (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  dot_model dotf E d_rel d_abs ->
  acc_dot_model accf n g_rel g_abs ->
  afe_premises_de M c scale uc P (d_rel * P + d_abs) V X Y P1 CG CR n N Tt ->
  cgA M g_rel ^ Tt <= CGA -> crA M g_rel ^ Tt <= CRA ->
  (1 + afr_gb u ue us X g_rel) ^ Tt <= CB ->
  length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true ->
     length (fst kv) = E /\ dot_abs q (fst kv) <= P /\ Rabs (snd kv) <= V) ->
  Forall (fun tl => length tl = n) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  fwd_running_premise scale q vis tiles bs ->
  (forall kv, In kv (filter vis (concat tiles)) ->
     Rabs (score2_with A_ dotf c q (fst kv) * ln 2 - scale * dot_R q (fst kv)) <= d kv) ->
  pp_shift (filter vis (concat tiles)) (fun kv => scale * dot_R q (fst kv)) d <= Dsc ->
  sm_avg (filter vis (concat tiles)) (fun kv => scale * dot_R q (fst kv))
    (fun kv => Rabs (snd kv) * (exp (d kv + Dsc) - 1)) <= Yw ->
  Rabs (ff_rnd S_ (rnd (nth 0 (ks_acc st) 0 / ks_l st)) - exact_softmax scale q (filter vis (concat tiles)))
  <= afr_rel u ue ee ea us n N Tt X 0 P1 CG CR CB
       * exact_softmax scale q (map abs_value (filter vis (concat tiles)))
     + afr_C u ue ee ea us n N Tt X 0 P1 CG CR * run_err (afr_gb u ue us X g_rel) 0 bs
     + afr_ypp u ue ee ea us n N Tt X P1 CG CR CB * Yw
     + afr_abs u ue ee ea us es V n N Tt X P1 CG CR CGA CRA CB g_rel g_abs.
Proof.
  intros dotf d_rel d_abs accf n g_rel g_abs q c scale uc P V X Y P1 CG CR CGA CRA CB E N Tt vis tiles bs d Dsc Yw sck st
    Hexp0 Hvis Hdm Hadm Hpre HCGA HCRA HCB Hq Hkeys Hn HN HT Hfwd Hdpp HDsc HYw.
  pose proof Hpre as [_ _ _ _ _ _ _ HP HG HC HbL].
  exact (attention_forward_acc_running_pp_gen dotf d_rel d_abs accf n g_rel g_abs q c scale uc P V X Y P1 CG CR CGA CRA CB
           E N Tt vis tiles bs d Dsc Yw CG Hexp0 Hvis Hdm Hadm Hpre HCGA HCRA HCB Hq Hkeys Hn HN HT Hfwd Hdpp HDsc HYw HbL
           (fun _ _ _ _ => l_fold_rel_uniform M X P1 CG CR n N Tt _ _ HP HG HC)).
Qed.



(** The float32 forward on the H100 (3xTF32 scores and P.V on its tensor cores), as
    [attention_forward_acc_running_tf32x3_op], with per-key score errors. *)
Theorem attention_forward_acc_running_tf32x3_op_pp : forall (out : R -> R) (ur : R) (F : Z) (k qb qv : nat)
    (q : list R) (c scale uc P V X Y P1 CG CR CGA CRA CB : R) (E n N Tt : nat)
    (vis : list R * R -> bool) (tiles : list (list (list R * R))) (bs : list R) (d : list R * R -> R) (Dsc Yw : R),
  let dotf := tf32x3_dot_tc_op tf32_rna tf32_rz (tc_align_op F) out k in
  let accf := tf32x3_acc_fn F out rnd k in
  let g_rel := u + (1 + u) * tf32x3_tc_rel (bpow radix2 (1 - F)) ur k qv in
  let g_abs := (1 + u) * 0 + ea in
  let sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv) in
  let st := kernel_run_acc M (list R * R) sck vis (fun kv _ => snd kv) accf (kernel_start 1) tiles in
  0 <= ur -> (forall x, Rabs (out x - x) <= ur * Rabs x) ->
  (1 <= k)%nat -> (1 <= qb)%nat -> (E <= qb * k)%nat ->
  INR (3 * qb) * tc_delta (bpow radix2 (1 - F)) ur k < 1 ->
  (1 <= qv)%nat -> (n <= qv * k)%nat ->
  INR (3 * qv) * tc_delta (bpow radix2 (1 - F)) ur k < 1 ->
  mp_exp2 M 0 = 1 ->
  (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  afe_premises_de M c scale uc P (tf32x3_tc_rel (bpow radix2 (1 - F)) ur k qb * P + 0) V X Y P1 CG CR n N Tt ->
  cgA M g_rel ^ Tt <= CGA -> crA M g_rel ^ Tt <= CRA -> (1 + afr_gb u ue us X g_rel) ^ Tt <= CB ->
  length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true ->
     length (fst kv) = E /\ dot_abs q (fst kv) <= P /\ Rabs (snd kv) <= V) ->
  Forall (fun tl => length tl = n) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  fwd_running_premise scale q vis tiles bs ->
  (forall kv, In kv (filter vis (concat tiles)) ->
     Rabs (score2_with A_ dotf c q (fst kv) * ln 2 - scale * dot_R q (fst kv)) <= d kv) ->
  pp_shift (filter vis (concat tiles)) (fun kv => scale * dot_R q (fst kv)) d <= Dsc ->
  sm_avg (filter vis (concat tiles)) (fun kv => scale * dot_R q (fst kv))
    (fun kv => Rabs (snd kv) * (exp (d kv + Dsc) - 1)) <= Yw ->
  Rabs (ff_rnd S_ (rnd (nth 0 (ks_acc st) 0 / ks_l st)) - exact_softmax scale q (filter vis (concat tiles)))
  <= afr_rel u ue ee ea us n N Tt X 0 P1 CG CR CB
       * exact_softmax scale q (map abs_value (filter vis (concat tiles)))
     + afr_C u ue ee ea us n N Tt X 0 P1 CG CR * run_err (afr_gb u ue us X g_rel) 0 bs
     + afr_ypp u ue ee ea us n N Tt X P1 CG CR CB * Yw
     + afr_abs u ue ee ea us es V n N Tt X P1 CG CR CGA CRA CB g_rel g_abs.
Proof.
  intros out ur F k qb qv q c scale uc P V X Y P1 CG CR CGA CRA CB E n N Tt vis tiles bs d Dsc Yw dotf accf g_rel g_abs sck st
    Hur Hout Hk Hq HE Hd Hqv Hn Hdv Hexp0 Hvis Hpre.
  exact (attention_forward_acc_running_pp dotf _ 0 accf n g_rel g_abs q c scale uc P V X Y P1 CG CR CGA CRA CB E N Tt
           vis tiles bs d Dsc Yw Hexp0 Hvis (tf32x3_tc_op_dot_model out ur F k qb E Hur Hout Hk Hq HE Hd)
           (tf32x3_tc_op_acc_dot_model out rnd ur u ea F k qv n Hur Hout (ff_u_nonneg _) (ff_abs _) Hk Hqv Hn Hdv)
           Hpre).
Qed.

(** The bf16 (or fp16) forward on the H100, as [attention_forward_acc_running_tc_op], with
    per-key score errors. *)
Theorem attention_forward_acc_running_tc_op_pp : forall (out : R -> R) (ur : R) (F : Z) (k qb qv : nat)
    (q : list R) (c scale uc P V X Y P1 CG CR CGA CRA CB : R) (E n N Tt : nat)
    (vis : list R * R -> bool) (tiles : list (list (list R * R))) (bs : list R) (d : list R * R -> R) (Dsc Yw : R),
  let dotf := tc_dot_op (tc_align_op F) out k in
  let accf := tc_acc_fn F out k in
  let g_rel := gamma (tc_delta (bpow radix2 (1 - F)) ur k) qv in
  let sck := fun kv : list R * R => score2_with A_ dotf c q (fst kv) in
  let st := kernel_run_acc M (list R * R) sck vis (fun kv _ => snd kv) accf (kernel_start 1) tiles in
  0 <= ur -> (forall x, Rabs (out x - x) <= ur * Rabs x) ->
  (1 <= k)%nat -> (1 <= qb)%nat -> (E <= qb * k)%nat ->
  INR qb * tc_delta (bpow radix2 (1 - F)) ur k < 1 ->
  (1 <= qv)%nat -> (n <= qv * k)%nat ->
  INR qv * tc_delta (bpow radix2 (1 - F)) ur k < 1 ->
  mp_exp2 M 0 = 1 ->
  (exists kv, In kv (concat tiles) /\ vis kv = true) ->
  afe_premises_de M c scale uc P (gamma (tc_delta (bpow radix2 (1 - F)) ur k) qb * P + 0) V X Y P1 CG CR n N Tt ->
  cgA M g_rel ^ Tt <= CGA -> crA M g_rel ^ Tt <= CRA -> (1 + afr_gb u ue us X g_rel) ^ Tt <= CB ->
  length q = E ->
  (forall kv, In kv (concat tiles) -> vis kv = true ->
     length (fst kv) = E /\ dot_abs q (fst kv) <= P /\ Rabs (snd kv) <= V) ->
  Forall (fun tl => length tl = n) tiles ->
  (length (filter vis (concat tiles)) <= N)%nat -> (length tiles <= Tt)%nat ->
  fwd_running_premise scale q vis tiles bs ->
  (forall kv, In kv (filter vis (concat tiles)) ->
     Rabs (score2_with A_ dotf c q (fst kv) * ln 2 - scale * dot_R q (fst kv)) <= d kv) ->
  pp_shift (filter vis (concat tiles)) (fun kv => scale * dot_R q (fst kv)) d <= Dsc ->
  sm_avg (filter vis (concat tiles)) (fun kv => scale * dot_R q (fst kv))
    (fun kv => Rabs (snd kv) * (exp (d kv + Dsc) - 1)) <= Yw ->
  Rabs (ff_rnd S_ (rnd (nth 0 (ks_acc st) 0 / ks_l st)) - exact_softmax scale q (filter vis (concat tiles)))
  <= afr_rel u ue ee ea us n N Tt X 0 P1 CG CR CB
       * exact_softmax scale q (map abs_value (filter vis (concat tiles)))
     + afr_C u ue ee ea us n N Tt X 0 P1 CG CR * run_err (afr_gb u ue us X g_rel) 0 bs
     + afr_ypp u ue ee ea us n N Tt X P1 CG CR CB * Yw
     + afr_abs u ue ee ea us es V n N Tt X P1 CG CR CGA CRA CB g_rel 0.
Proof.
  intros out ur F k qb qv q c scale uc P V X Y P1 CG CR CGA CRA CB E n N Tt vis tiles bs d Dsc Yw dotf accf g_rel sck st
    Hur Hout Hk Hq HE Hd Hqv Hn Hdv Hexp0 Hvis Hpre.
  exact (attention_forward_acc_running_pp dotf _ 0 accf n g_rel 0 q c scale uc P V X Y P1 CG CR CGA CRA CB E N Tt
           vis tiles bs d Dsc Yw Hexp0 Hvis (tc_op_dot_model out ur F k qb E Hur Hout Hk Hq HE Hd)
           (tc_acc_op_dot_model out ur F k qv n Hur Hout Hk Hqv Hn Hdv) Hpre).
Qed.

End ForwardPP.
