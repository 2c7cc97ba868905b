(** * Per-pair score errors: the saved lse with one error bound per (query, key) pair.

    PLACEHOLDER-HEADER *)

From Coq Require Import Reals ZArith List Lra Lia Arith.
From Flocq Require Import Core.
From Ojas Require Import VectorFacts FloatModel.NoUnderflow FloatModel.DotError Attention.BackwardCorrect Attention.ScorePerturbation.
From Ojas Require Import FloatModel.MixedPrecision FloatModel.BlockedSum FloatModel.TensorCoreSum FloatModel.Tf32Product.
From Ojas Require Import FloatModel.Notations.
From Ojas Require Import Attention.Float.OnlineSoftmaxError Attention.Float.OnlineSoftmaxTile Attention.Float.ForwardError.
From Ojas Require Import Attention.Float.ForwardPosteriori Attention.Float.SavedLseError.
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
