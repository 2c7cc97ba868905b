(** * Rounding-error bound of the dot product [dot fl_ops].

    [dot] (Vector.v) accumulates from the right: [dot (x :: a) (y :: b) =
    fl (fl (x * y) + dot a b)], [dot [] _ = 0].  In the rounding model of
    [FloatModel/NoUnderflow.v], with the extra hypothesis that rounding a rounded
    value changes nothing ([rnd (rnd x) = rnd x], true of every rounding to
    a floating-point format: [flx_rnd_idem] below), we prove Higham's bound

      |dot_hat - dot| <= gamma_n * sum_i |a_i b_i|,   gamma_n = n u / (1 - n u),

    for vectors of length [n] with [n u < 1] ([dot_error_bound]).  The
    idempotence is what makes the first addition [fl (p + 0)] exact; without
    it the bound holds with [gamma_(n+1)].  No underflow, as in the model. *)

From Coq Require Import Reals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import ScalarOps Vector VectorFacts FloatModel.NoUnderflow.
Import ListNotations.
Open Scope R_scope.

(** Higham's [gamma_n = n u / (1 - n u)]. *)
Definition gamma (u : R) (n : nat) : R := INR n * u / (1 - INR n * u).

Lemma exp_INR_mul : forall n x, exp (INR n * x) = exp x ^ n.
Proof.
  induction n as [|n IH]; intros x; [simpl; rewrite Rmult_0_l; apply exp_0 |].
  rewrite S_INR, Rmult_plus_distr_r, Rmult_1_l, exp_plus, IH; simpl; ring.
Qed.

(** [(1 + u)^n - 1 <= gamma_n] when [n u < 1]. *)
Lemma pow_le_gamma : forall u n, 0 <= u -> INR n * u < 1 -> (1 + u) ^ n - 1 <= gamma u n.
Proof.
  intros u n Hu Hn; unfold gamma.
  assert (H1 : (1 + u) ^ n <= exp (INR n * u)).
  { rewrite exp_INR_mul; apply pow_incr; split; [lra |].
    pose proof (exp_ineq1_le u); lra. }
  assert (H2 : exp (INR n * u) * (1 - INR n * u) <= 1).
  { pose proof (exp_ineq1_le (- (INR n * u))) as H.
    assert (E : exp (INR n * u) * exp (- (INR n * u)) = 1)
      by (rewrite <- exp_plus; replace (INR n * u + - (INR n * u)) with 0 by ring; apply exp_0).
    pose proof (exp_pos (INR n * u)); nra. }
  apply (Rmult_le_reg_r (1 - INR n * u)); [lra |].
  replace (INR n * u / (1 - INR n * u) * (1 - INR n * u)) with (INR n * u) by (field; lra).
  nra.
Qed.

Section DotError.

Variables rnd rexp rln : R -> R.
Variable u : R.
Hypothesis u_nonneg : 0 <= u.
Hypothesis rnd_rel : forall x, Rabs (rnd x - x) <= u * Rabs x.
(** Rounding is idempotent (Flocq: [round_generic] of [generic_format_round]). *)
Hypothesis rnd_idem : forall x, rnd (rnd x) = rnd x.

Local Notation fl := (fl_ops rnd rexp rln).

Lemma dot_nil_l : forall (b : list R), dot fl [] b = 0.
Proof. reflexivity. Qed.

Lemma dot_nil_r : forall (a : list R), dot fl a [] = 0.
Proof. intros [|x a]; reflexivity. Qed.

(** The bound with [(1 + u)^m - 1], [m] the number of products. *)
Lemma dot_error_pow : forall a b,
  Rabs (dot fl a b - dot R_ops a b)
  <= ((1 + u) ^ length (combine a b) - 1)
     * rsum (map (fun xy => Rabs (fst xy * snd xy)) (combine a b)).
Proof.
  induction a as [|x a IH]; intros [|y b].
  - simpl; unfold rsum; simpl; rewrite Rminus_0_r, Rabs_R0; lra.
  - simpl; unfold rsum; simpl; rewrite Rminus_0_r, Rabs_R0; lra.
  - simpl; unfold rsum; simpl; rewrite Rminus_0_r, Rabs_R0; lra.
  - cbn [combine length map]; rewrite rsum_cons; cbn [fst snd].
    change (dot fl (x :: a) (y :: b)) with (rnd (rnd (x * y) + dot fl a b)).
    change (dot R_ops (x :: a) (y :: b)) with (x * y + dot R_ops a b).
    set (m := length (combine a b)).
    set (Sa := rsum (map (fun xy => Rabs (fst xy * snd xy)) (combine a b))).
    assert (HS : 0 <= Sa)
      by (apply rsum_nonneg; intros z Hz; apply in_map_iff in Hz; destruct Hz as [w [<- _]]; apply Rabs_pos).
    assert (Hm1 : 1 <= (1 + u) ^ m) by (apply pow_R1_Rle; lra).
    destruct (Nat.eq_dec m 0) as [Hm | Hm].
    + (* a single product: [fl (fl (x y) + 0)] is [fl (x y)] *)
      assert (Ha : dot fl a b = 0 /\ dot R_ops a b = 0).
      { unfold m in Hm; destruct a, b; try discriminate; split; try reflexivity;
          apply dot_nil_r. }
      destruct Ha as [-> ->]; rewrite !Rplus_0_r, rnd_idem, Hm.
      simpl pow; eapply Rle_trans; [apply rnd_rel |].
      assert (Sa = 0) by (unfold Sa; destruct a, b; try discriminate; reflexivity).
      rewrite H; lra.
    + destruct (rnd_ex rnd u u_nonneg rnd_rel (x * y)) as [d1 [Hd1 ->]].
      destruct (rnd_ex rnd u u_nonneg rnd_rel (x * y * (1 + d1) + dot fl a b)) as [d2 [Hd2 ->]].
      replace ((x * y * (1 + d1) + dot fl a b) * (1 + d2) - (x * y + dot R_ops a b))
        with (x * y * ((1 + d1) * (1 + d2) - 1)
              + ((dot fl a b - dot R_ops a b) * (1 + d2) + dot R_ops a b * d2)) by ring.
      pose proof (IH b) as IHb; fold m Sa in IHb.
      assert (HD : Rabs (dot R_ops a b) <= Sa).
      { unfold Sa; rewrite dot_R; clear.
        induction (combine a b) as [|[p q] l IHl]; [unfold rsum; simpl; rewrite Rabs_R0; lra |].
        cbn [map]; rewrite !rsum_cons; eapply Rle_trans; [apply Rabs_triang | cbn [fst snd]; lra]. }
      assert (Hf : Rabs ((1 + d1) * (1 + d2) - 1) <= (1 + u) * (1 + u) - 1)
        by (apply rel_err_mul; assumption).
      assert (Hp : (1 + u) * (1 + u) <= (1 + u) ^ S m).
      { replace ((1 + u) * (1 + u)) with ((1 + u) ^ 2) by ring; apply Rle_pow; lra || lia. }
      eapply Rle_trans; [apply Rabs_triang |].
      eapply Rle_trans; [apply Rplus_le_compat; [| apply Rabs_triang] |]; [apply Req_le, eq_refl |].
      rewrite !Rabs_mult.
      assert (Rabs x * Rabs y * Rabs ((1 + d1) * (1 + d2) - 1) <= Rabs x * Rabs y * ((1 + u) ^ S m - 1))
        by (apply Rmult_le_compat_l; [apply Rmult_le_pos; apply Rabs_pos | lra]).
      assert (Rabs (dot fl a b - dot R_ops a b) * Rabs (1 + d2) <= ((1 + u) ^ m - 1) * Sa * (1 + u)).
      { apply Rmult_le_compat; auto using Rabs_pos.
        replace (1 + d2) with (1 + d2) by ring; eapply Rle_trans; [apply Rabs_triang |].
        rewrite Rabs_R1; lra. }
      assert (Rabs (dot R_ops a b) * Rabs d2 <= Sa * u) by (apply Rmult_le_compat; auto using Rabs_pos).
      assert (Hpow : (1 + u) ^ S m = (1 + u) ^ m * (1 + u)) by (simpl; ring).
      rewrite Hpow in *.
      lra.
Qed.

(** Higham's dot-product bound: for vectors of length [n] with [n u < 1],
    the computed [dot] is within [gamma_n * sum_i |a_i b_i|] of the exact one. *)
Theorem dot_error_bound : forall a b,
  length a = length b -> INR (length a) * u < 1 ->
  Rabs (dot fl a b - dot R_ops a b)
  <= gamma u (length a) * rsum (map (fun xy => Rabs (fst xy * snd xy)) (combine a b)).
Proof.
  intros a b Hl Hn.
  eapply Rle_trans; [apply dot_error_pow |].
  rewrite combine_length, Hl, Nat.min_id, <- Hl.
  apply Rmult_le_compat_r; [| apply pow_le_gamma; assumption].
  apply rsum_nonneg; intros z Hz; apply in_map_iff in Hz; destruct Hz as [w [<- _]]; apply Rabs_pos.
Qed.

End DotError.

(** The model's idempotence hypothesis holds for Flocq's rounding. *)
Lemma flx_rnd_idem : forall p (Hp : (0 < p)%Z) x, flx_rnd p (flx_rnd p x) = flx_rnd p x.
Proof.
  intros p Hp x; unfold flx_rnd.
  assert (Prec_gt_0 p) by exact Hp.
  apply round_generic; [now apply valid_rnd_N |].
  apply generic_format_round; auto with typeclass_instances.
Qed.
