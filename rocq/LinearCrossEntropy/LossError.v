(** * Forward rounding-error bound of the per-token cross-entropy loss.

    The computed per-token forward is [token_forward fl_ops] (the very
    definition the oracle runs) in the rounding model of [FloatModel/NoUnderflow.v]
    (every [+ - * /] rounded with relative error [u], rounding idempotent,
    [exp] with relative error [ue], [ln] with absolute error [ul] on
    [[1/2, Lmax]], the range of the computed row sum when
    [stream_beta u ue V <= 1/2] and [(1 + stream_beta u ue V) V <= Lmax]
    ([LseError.v]), no underflow or overflow), without softcap.  The
    exact one is [token_forward R_ops], i.e. ([ce_token_loss_R], [lse_row])
    of the exact logit row [z_v = h . w_v + b_v] ([Loss.v]).  The proof
    composes:
    - the logits: [dot_error_bound] plus the rounding of the bias add
      ([raw_logit_error_bound]): every computed logit is within [dz];
    - the log-sum-exp is 1-Lipschitz in the sup norm of the logits
      ([lse_R_lipschitz], [chunked_lse_lipschitz]), so with
      [chunk_lse_error_bound] on the computed logits the computed lse is
      within [lse_err L dz V] ([chunk_lse_perturbed_error_bound]);
    - the target logit and the logit sum are nested left-to-right sums
      over the vocabulary chunks ([chunked_sum_error_bound]);
    - the loss formula [(1 - eps) (L - z_t) + eps (L - S / V) + lam L^2]
      is evaluated operation by operation, each rounded operation
      propagating absolute errors as [add_err], [mul_err], [div_err].
    The result is [token_forward_error_bound]: a bound [token_loss_err]
    that is an explicit real expression of [u], [ue], [ul], [V], [eps],
    [lam], the exact [L], [z_t], [sum_v z_v], [sum_v |z_v|] and [dz]. *)

From Coq Require Import Reals List Lra Lia Arith ZArith.
From Ojas Require Import ScalarOps Vector VectorFacts FloatModel.NoUnderflow FloatModel.DotError
  Attention.OnlineSoftmax Attention.StreamCorrect Attention.StreamError
  LinearCrossEntropy.Definitions LinearCrossEntropy.ChunkedLse LinearCrossEntropy.Loss LinearCrossEntropy.LseError.
Import ListNotations.
Open Scope R_scope.

(** ** The log-sum-exp is 1-Lipschitz in the sup norm *)

Lemma rsum_exp_shift_le : forall (zs zs' : list (nat * R)) d,
  Forall2 (fun a b => Rabs (snd a - snd b) <= d) zs zs' ->
  rsum (map (fun z => exp (snd z)) zs) <= exp d * rsum (map (fun z => exp (snd z)) zs')
  /\ rsum (map (fun z => exp (snd z)) zs') <= exp d * rsum (map (fun z => exp (snd z)) zs).
Proof.
  intros zs zs' d H; induction H as [|a b l l' Hab Hl [IH1 IH2]]; [cbn [map]; rewrite !rsum_nil; lra|].
  cbn [map]; rewrite !rsum_cons.
  apply Rabs_le_inv' in Hab.
  assert (exp (snd a) <= exp d * exp (snd b)) by (rewrite <- exp_plus; apply exp_le_mono; lra).
  assert (exp (snd b) <= exp d * exp (snd a)) by (rewrite <- exp_plus; apply exp_le_mono; lra).
  split; lra.
Qed.

Lemma rsum_exp_snd_pos : forall (zs : list (nat * R)), zs <> [] -> 0 < rsum (map (fun z => exp (snd z)) zs).
Proof.
  intros zs H; rewrite <- (map_map snd exp); apply rsum_exp_pos.
  destruct zs; [contradiction|discriminate].
Qed.

(** The exact log-sum-exp moves by at most [d] when every logit moves by
    at most [d]. *)
Theorem lse_R_lipschitz : forall (zs zs' : list (nat * R)) d,
  zs <> [] -> Forall2 (fun a b => Rabs (snd a - snd b) <= d) zs zs' ->
  Rabs (lse_R zs - lse_R zs') <= d.
Proof.
  intros zs zs' d Hne H.
  assert (Hne' : zs' <> []) by (intros ->; inversion H; subst; contradiction).
  destruct (rsum_exp_shift_le zs zs' d H) as [H1 H2].
  pose proof (rsum_exp_snd_pos zs Hne) as P; pose proof (rsum_exp_snd_pos zs' Hne') as P'.
  unfold lse_R.
  apply ln_le_mono in H1; [|exact P]; apply ln_le_mono in H2; [|exact P'].
  rewrite ln_mult, ln_exp in H1, H2 by (apply exp_pos || assumption).
  apply Rabs_le; lra.
Qed.

(** The same for the chunked lse the code computes (over [R]), chunks of
    any size [bv]. *)
Theorem chunked_lse_lipschitz : forall bv (zs zs' : list (nat * R)) d,
  zs <> [] -> Forall2 (fun a b => Rabs (snd a - snd b) <= d) zs zs' ->
  exists L L', chunked_lse R_ops (chunk bv zs) = Some L
    /\ chunked_lse R_ops (chunk bv zs') = Some L' /\ Rabs (L - L') <= d.
Proof.
  intros bv zs zs' d Hne H.
  assert (Hne' : zs' <> []) by (intros ->; inversion H; subst; contradiction).
  exists (lse_R zs), (lse_R zs'); rewrite !chunked_lse_chunk by assumption.
  split; [reflexivity|split; [reflexivity|apply lse_R_lipschitz; assumption]].
Qed.

(** ** List plumbing *)

(** Sum of absolute values. *)
Definition asum (xs : list R) : R := rsum (map Rabs xs).

Lemma asum_nonneg : forall xs, 0 <= asum xs.
Proof.
  intros xs; unfold asum; apply rsum_nonneg; intros x Hx; apply in_map_iff in Hx.
  destruct Hx as [y [<- _]]; apply Rabs_pos.
Qed.

Lemma asum_cons : forall x xs, asum (x :: xs) = Rabs x + asum xs.
Proof. intros; unfold asum; cbn [map]; apply rsum_cons. Qed.

Lemma asum_app : forall xs ys, asum (xs ++ ys) = asum xs + asum ys.
Proof. intros; unfold asum; rewrite map_app; apply rsum_app. Qed.

Lemma rsum_abs_le : forall xs, Rabs (rsum xs) <= asum xs.
Proof.
  induction xs as [|x xs IH]; [unfold asum; cbn [map]; rewrite ?rsum_nil, Rabs_R0; lra|].
  rewrite rsum_cons, asum_cons; eapply Rle_trans; [apply Rabs_triang|lra].
Qed.

Lemma Forall2_rsum_err : forall (xs ys : list R) d,
  Forall2 (fun a b => Rabs (a - b) <= d) xs ys ->
  Rabs (rsum xs - rsum ys) <= INR (length xs) * d /\ asum xs <= asum ys + INR (length xs) * d.
Proof.
  intros xs ys d H; induction H as [|a b l l' Hab Hl [IH1 IH2]].
  - cbn [length map]; unfold asum; cbn [map]; rewrite ?rsum_nil, Rminus_0_r, Rabs_R0; change (INR 0) with 0; lra.
  - rewrite !rsum_cons, !asum_cons; cbn [length]; rewrite S_INR.
    replace (a + rsum l - (b + rsum l')) with ((a - b) + (rsum l - rsum l')) by ring.
    pose proof (Rabs_triang (a - b) (rsum l - rsum l')).
    assert (Rabs a <= Rabs b + Rabs (a - b))
      by (replace a with (b + (a - b)) at 1 by ring; apply Rabs_triang).
    split; lra.
Qed.

Lemma Forall2_length_eq : forall {A B} (P : A -> B -> Prop) l l', Forall2 P l l' -> length l = length l'.
Proof. intros A B P l l' H; induction H; simpl; lia. Qed.

Lemma Forall2_nth_le : forall (xs ys : list R) d j,
  Forall2 (fun a b => Rabs (a - b) <= d) xs ys -> (j < length xs)%nat ->
  Rabs (nth j xs 0 - nth j ys 0) <= d.
Proof.
  intros xs ys d j H; revert j; induction H as [|a b l l' Hab Hl IH]; intros j Hj;
    [simpl in Hj; lia|].
  destruct j as [|j]; [exact Hab|apply IH; simpl in Hj; lia].
Qed.

Lemma Forall2_combine_snd : forall (xs ys : list R) d (l : list nat),
  Forall2 (fun a b => Rabs (a - b) <= d) xs ys -> length l = length xs ->
  Forall2 (fun a b => Rabs (snd a - snd b) <= d) (combine l xs) (combine l ys).
Proof.
  intros xs ys d l H; revert l; induction H as [|a b xs ys Hab Hl IH]; intros [|k l] Hk;
    try discriminate; simpl; constructor; [exact Hab|apply IH; simpl in Hk; lia].
Qed.

Lemma combine_map_snd : forall {A} (f : R -> R) (l : list A) (xs : list R),
  combine l (map f xs) = map (fun p => (fst p, f (snd p))) (combine l xs).
Proof.
  intros A f l; induction l as [|a l IH]; intros [|x xs]; simpl; try reflexivity.
  rewrite IH; reflexivity.
Qed.

Lemma length_chunk_fuel_le : forall {A} fuel b (xs : list A), (length (chunk_fuel fuel b xs) <= fuel)%nat.
Proof.
  intros A fuel; induction fuel as [|fuel IH]; intros b xs; [simpl; lia|].
  destruct xs as [|x xs]; simpl; [lia|specialize (IH b (skipn b (x :: xs))); lia].
Qed.

Lemma length_chunk_le : forall {A} b (xs : list A), (length (chunk b xs) <= length xs)%nat.
Proof. intros; unfold chunk; apply length_chunk_fuel_le. Qed.

Section LossError.

Variables rnd rexp rln : R -> R.
Variables u ue ul Lmax : R.
Hypothesis u_nonneg : 0 <= u.
Hypothesis ue_nonneg : 0 <= ue.
Hypothesis rnd_rel : forall x, Rabs (rnd x - x) <= u * Rabs x.
Hypothesis rexp_rel : forall x, Rabs (rexp x - exp x) <= ue * exp x.
(** The computed logarithm on the range [[1/2, Lmax]] of the computed row sum
    ([LseError.v]). *)
Hypothesis rln_abs : forall x, / 2 <= x <= Lmax -> Rabs (rln x - ln x) <= ul.
(** Rounding is idempotent (Flocq: [flx_rnd_idem] in [FloatModel/DotError.v]). *)
Hypothesis rnd_idem : forall x, rnd (rnd x) = rnd x.

Local Notation fl := (fl_ops rnd rexp rln).

(** ** Propagation of absolute errors through one rounded operation *)

Lemma rnd_err_prop : forall x x' e,
  Rabs (x' - x) <= e -> Rabs (rnd x' - x) <= e + u * (Rabs x + e).
Proof.
  intros x x' e H.
  replace (rnd x' - x) with ((rnd x' - x') + (x' - x)) by ring.
  eapply Rle_trans; [apply Rabs_triang|].
  pose proof (rnd_rel x').
  assert (Rabs x' <= Rabs x + e)
    by (replace x' with (x + (x' - x)) at 1 by ring; eapply Rle_trans; [apply Rabs_triang|lra]).
  assert (u * Rabs x' <= u * (Rabs x + e)) by (apply Rmult_le_compat_l; lra).
  lra.
Qed.

(** [fl (a' + b')] against [a + b], and [fl (a' - b')] against [a - b]. *)
Definition add_err (a ea b eb : R) : R := ea + eb + u * (Rabs a + Rabs b + ea + eb).

(** [fl (a' * b')] against [a b]. *)
Definition mul_err (a ea b eb : R) : R :=
  Rabs a * eb + Rabs b * ea + ea * eb + u * ((Rabs a + ea) * (Rabs b + eb)).

(** [fl (a' / b')] against [a / b], when [eb < |b|]. *)
Definition div_err (a ea b eb : R) : R :=
  (ea * Rabs b + Rabs a * eb) / (Rabs b * (Rabs b - eb)) + u * ((Rabs a + ea) / (Rabs b - eb)).

Lemma rnd_add_err : forall a a' ea b b' eb,
  Rabs (a' - a) <= ea -> Rabs (b' - b) <= eb ->
  Rabs (rnd (a' + b') - (a + b)) <= add_err a ea b eb.
Proof.
  intros a a' ea b b' eb Ha Hb.
  assert (H : Rabs (a' + b' - (a + b)) <= ea + eb).
  { replace (a' + b' - (a + b)) with ((a' - a) + (b' - b)) by ring.
    eapply Rle_trans; [apply Rabs_triang|lra]. }
  eapply Rle_trans; [apply (rnd_err_prop _ _ _ H)|unfold add_err].
  pose proof (Rabs_triang a b).
  assert (u * Rabs (a + b) <= u * (Rabs a + Rabs b)) by (apply Rmult_le_compat_l; lra).
  lra.
Qed.

Lemma rnd_sub_err : forall a a' ea b b' eb,
  Rabs (a' - a) <= ea -> Rabs (b' - b) <= eb ->
  Rabs (rnd (a' - b') - (a - b)) <= add_err a ea b eb.
Proof.
  intros a a' ea b b' eb Ha Hb.
  replace (a' - b') with (a' + - b') by ring; replace (a - b) with (a + - b) by ring.
  replace (add_err a ea b eb) with (add_err a ea (- b) eb) by (unfold add_err; rewrite Rabs_Ropp; ring).
  apply rnd_add_err; [exact Ha|].
  replace (- b' - - b) with (- (b' - b)) by ring; rewrite Rabs_Ropp; exact Hb.
Qed.

Lemma rnd_mul_err : forall a a' ea b b' eb,
  Rabs (a' - a) <= ea -> Rabs (b' - b) <= eb ->
  Rabs (rnd (a' * b') - a * b) <= mul_err a ea b eb.
Proof.
  intros a a' ea b b' eb Ha Hb.
  assert (Hea : 0 <= ea) by (eapply Rle_trans; [apply Rabs_pos|exact Ha]).
  assert (Heb : 0 <= eb) by (eapply Rle_trans; [apply Rabs_pos|exact Hb]).
  assert (H : Rabs (a' * b' - a * b) <= Rabs a * eb + Rabs b * ea + ea * eb).
  { replace (a' * b' - a * b) with (a * (b' - b) + b * (a' - a) + (a' - a) * (b' - b)) by ring.
    eapply Rle_trans; [apply Rabs_triang|].
    eapply Rle_trans; [apply Rplus_le_compat_r, Rabs_triang|].
    rewrite !Rabs_mult.
    assert (Rabs a * Rabs (b' - b) <= Rabs a * eb) by (apply Rmult_le_compat_l; [apply Rabs_pos|exact Hb]).
    assert (Rabs b * Rabs (a' - a) <= Rabs b * ea) by (apply Rmult_le_compat_l; [apply Rabs_pos|exact Ha]).
    assert (Rabs (a' - a) * Rabs (b' - b) <= ea * eb) by (apply Rmult_le_compat; auto using Rabs_pos).
    lra. }
  eapply Rle_trans; [apply (rnd_err_prop _ _ _ H)|unfold mul_err].
  rewrite Rabs_mult; right; ring.
Qed.

Lemma rnd_div_err : forall a a' ea b b' eb,
  Rabs (a' - a) <= ea -> Rabs (b' - b) <= eb -> eb < Rabs b ->
  Rabs (rnd (a' / b') - a / b) <= div_err a ea b eb.
Proof.
  intros a a' ea b b' eb Ha Hb Hlt.
  assert (Hea : 0 <= ea) by (eapply Rle_trans; [apply Rabs_pos|exact Ha]).
  assert (Heb : 0 <= eb) by (eapply Rle_trans; [apply Rabs_pos|exact Hb]).
  assert (Hb' : Rabs b - eb <= Rabs b').
  { pose proof (Rabs_triang_inv b b'); rewrite Rabs_minus_sym in H; lra. }
  assert (HB : 0 < Rabs b) by lra.
  assert (Hb0 : b <> 0) by (intros ->; rewrite Rabs_R0 in HB; lra).
  assert (Hb0' : b' <> 0) by (intros ->; rewrite Rabs_R0 in Hb'; lra).
  assert (H : Rabs (a' / b' - a / b) <= (ea * Rabs b + Rabs a * eb) / (Rabs b * (Rabs b - eb))).
  { replace (a' / b' - a / b) with (((a' - a) * b - a * (b' - b)) / (b * b')) by (field; auto).
    unfold Rdiv; rewrite Rabs_mult, Rabs_inv, Rabs_mult.
    apply Rmult_le_compat; [apply Rabs_pos|left; apply Rinv_0_lt_compat, Rmult_lt_0_compat; lra| |].
    - unfold Rminus at 1; eapply Rle_trans; [apply Rabs_triang|]; rewrite Rabs_Ropp, !Rabs_mult.
      assert (Rabs (a' - a) * Rabs b <= ea * Rabs b) by (apply Rmult_le_compat_r; [apply Rabs_pos|exact Ha]).
      assert (Rabs a * Rabs (b' - b) <= Rabs a * eb) by (apply Rmult_le_compat_l; [apply Rabs_pos|exact Hb]).
      lra.
    - apply Rinv_le_contravar; [apply Rmult_lt_0_compat; lra|].
      apply Rmult_le_compat_l; lra. }
  eapply Rle_trans; [apply (rnd_err_prop _ _ _ H)|unfold div_err].
  right; f_equal; f_equal.
  unfold Rdiv; rewrite Rabs_mult, Rabs_inv; field; lra.
Qed.

(** ** Sums *)

Lemma pow_u_ge_1 : forall k, 1 <= (1 + u) ^ k.
Proof. intros k; apply pow_R1_Rle; lra. Qed.

Lemma pow_u_mono : forall k k', (k <= k')%nat -> (1 + u) ^ k <= (1 + u) ^ k'.
Proof. intros k k' H; apply Rle_pow; lra || lia. Qed.

(** One rounded addition of two values with relative-looking errors. *)
Lemma rnd_acc_step : forall a a' c c' g P Q,
  1 <= g -> Rabs (a' - a) <= (g - 1) * P -> Rabs a <= P ->
  Rabs (c' - c) <= (g - 1) * Q -> Rabs c <= Q ->
  Rabs (rnd (a' + c') - (a + c)) <= (g * (1 + u) - 1) * (P + Q).
Proof.
  intros a a' c c' g P Q Hg Ha HP Hc HQ.
  assert (H : Rabs (a' + c' - (a + c)) <= (g - 1) * (P + Q)).
  { replace (a' + c' - (a + c)) with ((a' - a) + (c' - c)) by ring.
    eapply Rle_trans; [apply Rabs_triang|lra]. }
  eapply Rle_trans; [apply (rnd_err_prop _ _ _ H)|].
  pose proof (Rabs_triang a c).
  assert (0 <= P + Q) by (pose proof (Rabs_pos a); pose proof (Rabs_pos c); lra).
  assert (u * (Rabs (a + c) + (g - 1) * (P + Q)) <= u * ((P + Q) + (g - 1) * (P + Q)))
    by (apply Rmult_le_compat_l; lra).
  nra.
Qed.

Lemma fold_rnd_add_err : forall xs a a' k P,
  Rabs (a' - a) <= ((1 + u) ^ k - 1) * P -> Rabs a <= P ->
  Rabs (fold_left (fun s x => rnd (s + x)) xs a' - (a + rsum xs))
  <= ((1 + u) ^ (k + length xs) - 1) * (P + asum xs).
Proof.
  induction xs as [|x xs IH]; intros a a' k P Ha HP.
  - cbn [fold_left length]; rewrite rsum_nil, Nat.add_0_r; unfold asum; cbn [map]; rewrite ?rsum_nil.
    replace (a + 0) with a by ring; replace (P + 0) with P by ring; exact Ha.
  - cbn [fold_left length]; rewrite rsum_cons, asum_cons.
    replace (a + (x + rsum xs)) with ((a + x) + rsum xs) by ring.
    replace (k + S (length xs))%nat with (S k + length xs)%nat by lia.
    replace (P + (Rabs x + asum xs)) with ((P + Rabs x) + asum xs) by ring.
    apply IH.
    + replace ((1 + u) ^ S k) with ((1 + u) ^ k * (1 + u)) by (simpl; ring).
      apply rnd_acc_step; [apply pow_u_ge_1|exact Ha|exact HP| |lra].
      rewrite Rminus_diag_eq, Rabs_R0 by reflexivity.
      pose proof (pow_u_ge_1 k); pose proof (Rabs_pos x); nra.
    + eapply Rle_trans; [apply Rabs_triang|lra].
Qed.

Lemma sc_sum_fl_err : forall xs,
  Rabs (sc_sum fl xs - rsum xs) <= ((1 + u) ^ length xs - 1) * asum xs.
Proof.
  intros xs; pose proof (fold_rnd_add_err xs 0 0 0%nat 0) as H.
  rewrite Rminus_0_r, Rabs_R0, Rplus_0_l, Rplus_0_l, Nat.add_0_l in H.
  apply H; lra.
Qed.

(** A nested left-to-right sum, as the vocabulary loop computes the
    target logit and the logit sum: each chunk summed with [sc_sum], then
    added to the running total, is within [((1+u)^(n + c) - 1) sum |x|]
    of the exact sum, [n] the number of terms, [c] the number of chunks. *)
Theorem chunked_sum_error_bound : forall xss : list (list R),
  Rabs (fold_left (fun s xs => rnd (s + sc_sum fl xs)) xss 0 - rsum (concat xss))
  <= ((1 + u) ^ (length (concat xss) + length xss) - 1) * asum (concat xss).
Proof.
  assert (G : forall xss a a' k P,
    Rabs (a' - a) <= ((1 + u) ^ k - 1) * P -> Rabs a <= P ->
    Rabs (fold_left (fun s xs => rnd (s + sc_sum fl xs)) xss a' - (a + rsum (concat xss)))
    <= ((1 + u) ^ (k + length (concat xss) + length xss) - 1) * (P + asum (concat xss))).
  { induction xss as [|xs xss IH]; intros a a' k P Ha HP.
    - cbn [fold_left concat length]; rewrite rsum_nil, !Nat.add_0_r.
      unfold asum; cbn [map]; rewrite ?rsum_nil; replace (a + 0) with a by ring;
        replace (P + 0) with P by ring; exact Ha.
    - cbn [fold_left concat length]; rewrite rsum_app, asum_app, app_length.
      replace (a + (rsum xs + rsum (concat xss))) with ((a + rsum xs) + rsum (concat xss)) by ring.
      replace (k + (length xs + length (concat xss)) + S (length xss))%nat
        with (S (k + length xs) + length (concat xss) + length xss)%nat by lia.
      replace (P + (asum xs + asum (concat xss))) with ((P + asum xs) + asum (concat xss)) by ring.
      apply IH.
      + replace ((1 + u) ^ S (k + length xs)) with ((1 + u) ^ (k + length xs) * (1 + u)) by (simpl; ring).
        pose proof (asum_nonneg xs).
        assert (0 <= P) by (eapply Rle_trans; [apply Rabs_pos|exact HP]).
        apply rnd_acc_step; [apply pow_u_ge_1| |exact HP| |apply rsum_abs_le].
        * eapply Rle_trans; [exact Ha|apply Rmult_le_compat_r; [lra|]].
          pose proof (pow_u_mono k (k + length xs) ltac:(lia)); lra.
        * eapply Rle_trans; [apply sc_sum_fl_err|apply Rmult_le_compat_r; [lra|]].
          pose proof (pow_u_mono (length xs) (k + length xs) ltac:(lia)); lra.
      + eapply Rle_trans; [apply Rabs_triang|pose proof (rsum_abs_le xs); lra]. }
  intros xss; pose proof (G xss 0 0 0%nat 0) as H.
  rewrite Rminus_0_r, Rabs_R0, Rplus_0_l, Rplus_0_l, Nat.add_0_l in H.
  apply H; lra.
Qed.

(** [sc_of_nat fl n] (the vocabulary size as [1 + 1 + ... + 1]). *)
Lemma sc_of_nat_fl_err : forall n, Rabs (sc_of_nat fl n - INR n) <= ((1 + u) ^ n - 1) * INR n.
Proof.
  induction n as [|n IH]; [simpl; rewrite Rminus_0_r, Rabs_R0; lra|].
  change (sc_of_nat fl (S n)) with (rnd (sc_of_nat fl n + 1)).
  rewrite S_INR.
  replace (((1 + u) ^ S n - 1) * (INR n + 1)) with (((1 + u) ^ n * (1 + u) - 1) * (INR n + 1))
    by (simpl; ring).
  apply rnd_acc_step; [apply pow_u_ge_1|exact IH|rewrite Rabs_right; [lra|apply Rle_ge, pos_INR]| |].
  - rewrite Rminus_diag_eq, Rabs_R0 by reflexivity; pose proof (pow_u_ge_1 n); lra.
  - rewrite Rabs_R1; lra.
Qed.

(** ** The logits *)

(** Error bound of a computed logit [h . w_v (+ b_v)]: [gamma_D sum_i |h_i w_vi|]
    for the dot product, plus the rounding of the bias add. *)
Definition logit_err (bias : option (list R)) (h : list R) (e : nat * list R) : R :=
  let g := gamma u (length h) * rsum (map (fun xy => Rabs (fst xy * snd xy)) (combine h (snd e))) in
  match bias with
  | None => g
  | Some b => g + u * (Rabs (dot R_ops h (snd e) + nth (fst e) b 0) + g)
  end.

(** A logit computed in the model ([dot] left to right, then [+ b_v]) is
    within [logit_err] of the exact one, for [D u < 1]. *)
Theorem raw_logit_error_bound : forall bias h (e : nat * list R),
  length h = length (snd e) -> INR (length h) * u < 1 ->
  Rabs (raw_logit fl bias h e - raw_logit R_ops bias h e) <= logit_err bias h e.
Proof.
  intros bias h e Hl Hn.
  pose proof (dot_error_bound rnd rexp rln u u_nonneg rnd_rel rnd_idem h (snd e) Hl Hn) as H.
  destruct bias as [b|]; unfold raw_logit, logit_err; [|exact H].
  change (sc_add fl (dot fl h (snd e)) (nth (fst e) b (sc_zero fl)))
    with (rnd (dot fl h (snd e) + nth (fst e) b 0)).
  change (sc_add R_ops (dot R_ops h (snd e)) (nth (fst e) b (sc_zero R_ops)))
    with (dot R_ops h (snd e) + nth (fst e) b 0).
  apply rnd_err_prop.
  replace (dot fl h (snd e) + nth (fst e) b 0 - (dot R_ops h (snd e) + nth (fst e) b 0))
    with (dot fl h (snd e) - dot R_ops h (snd e)) by ring.
  exact H.
Qed.

(** ** The log-sum-exp of computed logits *)

(** Error of the computed lse of logits within [dz] of exact ones whose
    lse is [L], [n] entries. *)
Definition lse_err (L dz : R) (n : nat) : R :=
  dz + u * (Rabs L + dz) + (1 + u) * (ul - ln (1 - stream_beta u ue n)).

(** The chunked lse computed in the model from logits [zs'] that are
    within [dz] of exact logits [zs] is within [lse_err (lse_R zs) dz n]
    of the exact [lse_R zs]: the rounding bound [chunk_lse_error_bound]
    on [zs'] plus the Lipschitz bound [lse_R_lipschitz]. *)
Theorem chunk_lse_perturbed_error_bound : forall bv (zs zs' : list (nat * R)) dz,
  zs <> [] -> Forall2 (fun a b => Rabs (snd a - snd b) <= dz) zs' zs ->
  u < 1 -> stream_beta u ue (length zs) <= / 2 ->
  (1 + stream_beta u ue (length zs)) * INR (length zs) <= Lmax ->
  exists L', chunked_lse fl (chunk bv zs') = Some L'
    /\ Rabs (L' - lse_R zs) <= lse_err (lse_R zs) dz (length zs).
Proof.
  intros bv zs zs' dz Hne H Hu Hb HLmax.
  assert (Hlen : length zs' = length zs) by (eapply Forall2_length_eq; exact H).
  assert (Hne' : zs' <> []) by (intros ->; destruct zs; [contradiction|discriminate]).
  rewrite <- Hlen in Hb, HLmax.
  destruct (chunk_lse_error_bound rnd rexp rln u ue ul Lmax u_nonneg ue_nonneg rnd_rel rexp_rel rln_abs
              bv zs' Hne' Hu Hb HLmax) as [L' [HL' Herr]].
  exists L'; split; [exact HL'|].
  rewrite Hlen in Herr.
  pose proof (lse_R_lipschitz zs' zs dz Hne' H) as Hlip.
  assert (Hdz : 0 <= dz) by (eapply Rle_trans; [apply Rabs_pos|exact Hlip]).
  assert (Habs : Rabs (lse_R zs') <= Rabs (lse_R zs) + dz).
  { replace (lse_R zs') with (lse_R zs + (lse_R zs' - lse_R zs)) at 1 by ring.
    eapply Rle_trans; [apply Rabs_triang|lra]. }
  assert (u * Rabs (lse_R zs') <= u * (Rabs (lse_R zs) + dz)) by (apply Rmult_le_compat_l; lra).
  replace (L' - lse_R zs) with ((L' - lse_R zs') + (lse_R zs' - lse_R zs)) by ring.
  eapply Rle_trans; [apply Rabs_triang|unfold lse_err; lra].
Qed.

(** ** The vocabulary loop in the model *)

Lemma fold_vocab_step_fl : forall t zchunks ts,
  ts_lse (fold_left (vocab_step fl t) zchunks ts)
    = fold_left (block_step fl) (map lse_keys zchunks) (ts_lse ts)
  /\ ts_zt (fold_left (vocab_step fl t) zchunks ts)
    = fold_left (fun s xs => rnd (s + sc_sum fl xs))
        (map (map (fun z => if is_target t (fst z) then snd z else 0)) zchunks) (ts_zt ts)
  /\ ts_zsum (fold_left (vocab_step fl t) zchunks ts)
    = fold_left (fun s xs => rnd (s + sc_sum fl xs)) (map (map snd) zchunks) (ts_zsum ts).
Proof.
  intros t zchunks; induction zchunks as [|zc zcs IH]; intros ts; [simpl; auto|].
  cbn [fold_left map]; exact (IH (vocab_step fl t ts zc)).
Qed.

(** ** The loss formula *)

(** Error bound of [sc_of_nat fl n]. *)
Definition nat_err (n : nat) : R := ((1 + u) ^ n - 1) * INR n.

(** Error bound of the computed [(1 - eps) (L - z_t) + eps (L - S / V) + lam L^2]
    from inputs [L], [z_t], [S] known within [eL], [et], [eS], one term per
    rounded operation, in the order [token_loss] evaluates them. *)
Definition token_loss_err (V : nat) (eps lam L eL zt et S eS : R) : R :=
  let e1 := add_err 1 0 eps 0 in
  let e2 := add_err L eL zt et in
  let e3 := mul_err (1 - eps) e1 (L - zt) e2 in
  let q := S / INR V in
  let e4 := div_err S eS (INR V) (nat_err V) in
  let e5 := add_err L eL q e4 in
  let e6 := mul_err eps 0 (L - q) e5 in
  let e7 := add_err ((1 - eps) * (L - zt)) e3 (eps * (L - q)) e6 in
  let e8 := mul_err L eL L eL in
  let e9 := mul_err lam 0 (L * L) e8 in
  add_err ((1 - eps) * (L - zt) + eps * (L - q)) e7 (lam * (L * L)) e9.

Lemma Rabs_sub_triang : forall a b c, Rabs (a - c) <= Rabs (a - b) + Rabs (b - c).
Proof.
  intros a b c; replace (a - c) with ((a - b) + (b - c)) by ring; apply Rabs_triang.
Qed.

Lemma Rabs_diag_le : forall x, Rabs (x - x) <= 0.
Proof. intros x; rewrite Rminus_diag_eq, Rabs_R0 by reflexivity; lra. Qed.

Lemma token_loss_fl_err : forall V eps lam ts L' L eL zt et S eS,
  snd (finalize fl 0 (ts_lse ts)) = Some L' -> Rabs (L' - L) <= eL ->
  Rabs (ts_zt ts - zt) <= et -> Rabs (ts_zsum ts - S) <= eS -> nat_err V < INR V ->
  Rabs (fst (token_loss fl V eps lam ts)
        - ((1 - eps) * (L - zt) + eps * (L - S / INR V) + lam * (L * L)))
  <= token_loss_err V eps lam L eL zt et S eS.
Proof.
  intros V eps lam ts L' L eL zt et S eS HL' HL Hzt HS HV.
  unfold token_loss; rewrite HL'.
  set (vn := sc_of_nat fl V).
  assert (Hvn : Rabs (vn - INR V) <= nat_err V) by apply sc_of_nat_fl_err.
  assert (HV' : nat_err V < Rabs (INR V)) by (rewrite Rabs_right; [lra|apply Rle_ge, pos_INR]).
  cbn [fst fl_ops sc_add sc_sub sc_mul sc_div sc_one].
  unfold token_loss_err; cbv zeta.
  apply rnd_add_err; [apply rnd_add_err|apply rnd_mul_err].
  - apply rnd_mul_err; [apply rnd_sub_err; apply Rabs_diag_le|apply rnd_sub_err; assumption].
  - apply rnd_mul_err; [apply Rabs_diag_le|].
    apply rnd_sub_err; [assumption|apply rnd_div_err; assumption].
  - apply Rabs_diag_le.
  - apply rnd_mul_err; assumption.
Qed.

(** ** The per-token forward *)

(** Relative rounding factor of the target logit and logit sums over [V]
    logits in at most [V] chunks. *)
Definition sum_factor (V : nat) : R := (1 + u) ^ (2 * V) - 1.

Lemma chunked_sum_le : forall (l : list (nat * R)) (f : nat * R -> R) bv,
  let xss := map (map f) (chunk bv l) in
  Rabs (fold_left (fun s xs => rnd (s + sc_sum fl xs)) xss 0 - rsum (map f l))
  <= sum_factor (length l) * asum (map f l).
Proof.
  intros l f bv xss.
  assert (Hc : concat xss = map f l) by (unfold xss; rewrite <- concat_map, concat_chunk; reflexivity).
  pose proof (chunked_sum_error_bound xss) as H; rewrite Hc in H.
  eapply Rle_trans; [exact H|apply Rmult_le_compat_r; [apply asum_nonneg|]].
  unfold sum_factor; apply Rplus_le_compat_r, pow_u_mono.
  unfold xss; rewrite !map_length; pose proof (length_chunk_le bv l); lia.
Qed.

(** The loop over the computed logits [zs'] (within [dz] of the exact
    [zs], chunks of [bv]) gives a loss and an lse within [token_loss_err]
    and [lse_err] of the specification [ce_token_loss_R], [lse_row]. *)
Theorem token_loss_error_bound : forall eps lam bv t (zs zs' : list R) dz,
  zs <> [] -> Forall2 (fun a b => Rabs (a - b) <= dz) zs' zs ->
  (0 <= t < Z.of_nat (length zs))%Z -> u < 1 -> stream_beta u ue (length zs) <= / 2 ->
  (1 + stream_beta u ue (length zs)) * INR (length zs) <= Lmax ->
  nat_err (length zs) < INR (length zs) ->
  let V := length zs in
  let L := lse_row zs in
  let zt := nth (Z.to_nat t) zs 0 in
  let g := sum_factor V in
  exists loss' L',
    token_loss fl V eps lam (vocab_loop fl t (chunk bv (combine (seq 0 V) zs'))) = (loss', L')
    /\ Rabs (L' - L) <= lse_err L dz V
    /\ Rabs (loss' - ce_token_loss_R eps lam t zs)
       <= token_loss_err V eps lam L (lse_err L dz V) zt (dz + g * (Rabs zt + dz))
            (rsum zs) (INR V * dz + g * (asum zs + INR V * dz)).
Proof.
  intros eps lam bv t zs zs' dz Hne H Ht Hu Hb HLmax HV V L zt g.
  assert (Hlen : length zs' = length zs) by (eapply Forall2_length_eq; exact H).
  assert (Hdz : 0 <= dz).
  { destruct H as [|a b l l' Hab _]; [contradiction|].
    eapply Rle_trans; [apply Rabs_pos|exact Hab]. }
  set (l' := combine (seq 0 V) zs'); set (l := combine (seq 0 V) zs).
  assert (Hl'len : length l' = V)
    by (unfold l'; rewrite combine_length, seq_length, Hlen; apply Nat.min_id).
  assert (Hsnd : map snd l' = zs') by (unfold l', V; rewrite <- Hlen; apply map_snd_combine_seq).
  (* the three sums and the lse state *)
  unfold vocab_loop.
  destruct (fold_vocab_step_fl t (chunk bv l') (tok_init fl)) as (E1 & E2 & E3).
  set (ts := fold_left (vocab_step fl t) (chunk bv l') (tok_init fl)) in *.
  (* lse *)
  assert (HF : Forall2 (fun a b => Rabs (snd a - snd b) <= dz) l' l).
  { unfold l', l; apply Forall2_combine_snd; [exact H|rewrite seq_length, Hlen; reflexivity]. }
  assert (Hlne : l <> []) by (unfold l; destruct zs; [contradiction|discriminate]).
  assert (Hllen : length l = V)
    by (unfold l; rewrite combine_length, seq_length; apply Nat.min_id).
  assert (HlseL : lse_R l = L).
  { unfold l, L, lse_R, lse_row, V; rewrite <- (map_map snd exp), map_snd_combine_seq; reflexivity. }
  assert (Hb' : stream_beta u ue (length l) <= / 2) by (rewrite Hllen; exact Hb).
  assert (HLmax' : (1 + stream_beta u ue (length l)) * INR (length l) <= Lmax) by (rewrite Hllen; exact HLmax).
  destruct (chunk_lse_perturbed_error_bound bv l l' dz Hlne HF Hu Hb' HLmax') as [L' [HL' HLerr]].
  rewrite HlseL, Hllen in HLerr.
  assert (Hfin : snd (finalize fl 0 (ts_lse ts)) = Some L')
    by (rewrite E1; exact HL').
  exists (fst (token_loss fl V eps lam ts)), L'; split.
  { unfold token_loss; rewrite Hfin; reflexivity. }
  split; [exact HLerr|].
  (* the target logit *)
  set (tg := fun z : nat * R => if is_target t (fst z) then snd z else 0).
  assert (Hj : (Z.to_nat t < length zs)%nat) by lia.
  assert (Htg : rsum (map tg l') = nth (Z.to_nat t) zs' 0).
  { change (rsum (map tg l')) with (target_sum t l').
    unfold l', V; rewrite <- Hlen.
    rewrite <- (target_sum_seq zs' 0 (Z.to_nat t)) by lia; f_equal; lia. }
  assert (Htga : asum (map tg l') = Rabs (nth (Z.to_nat t) zs' 0)).
  { unfold asum; rewrite map_map.
    replace (map (fun x => Rabs (tg x)) l') with (map tg (combine (seq 0 V) (map Rabs zs'))).
    2: { rewrite combine_map_snd, map_map; apply map_ext; intros [v x]; unfold tg; cbn [fst snd].
         destruct (is_target t v); [reflexivity|rewrite Rabs_R0; reflexivity]. }
    change (rsum (map tg (combine (seq 0 V) (map Rabs zs'))))
      with (target_sum t (combine (seq 0 V) (map Rabs zs'))).
    unfold V; rewrite <- Hlen, <- (map_length Rabs zs').
    replace t with (Z.of_nat (0 + Z.to_nat t)) at 1 by lia.
    rewrite (target_sum_seq (map Rabs zs') 0 (Z.to_nat t)) by (rewrite map_length; lia).
    rewrite <- Rabs_R0 at 1; apply map_nth. }
  assert (Hg : 0 <= g) by (unfold g, sum_factor; pose proof (pow_u_ge_1 (2 * V)); lra).
  assert (Hzt : Rabs (ts_zt ts - zt) <= dz + g * (Rabs zt + dz)).
  { rewrite E2; cbn [ts_zt tok_init].
    pose proof (chunked_sum_le l' tg bv) as Hs; cbv zeta in Hs.
    change (sc_zero fl) with 0; rewrite Hl'len, Htg, Htga in Hs; fold g in Hs.
    pose proof (Forall2_nth_le zs' zs dz (Z.to_nat t) H ltac:(lia)) as Hd; fold zt in Hd.

    assert (Rabs (nth (Z.to_nat t) zs' 0) <= Rabs zt + dz)
      by (replace (nth (Z.to_nat t) zs' 0) with (zt + (nth (Z.to_nat t) zs' 0 - zt)) by ring;
          eapply Rle_trans; [apply Rabs_triang|lra]).
    assert (g * Rabs (nth (Z.to_nat t) zs' 0) <= g * (Rabs zt + dz)) by (apply Rmult_le_compat_l; lra).
    eapply Rle_trans; [fold tg; apply (Rabs_sub_triang _ (nth (Z.to_nat t) zs' 0))|lra]. }
  (* the logit sum *)
  assert (HS : Rabs (ts_zsum ts - rsum zs) <= INR V * dz + g * (asum zs + INR V * dz)).
  { rewrite E3; cbn [ts_zsum tok_init].
    pose proof (chunked_sum_le l' snd bv) as Hs; cbv zeta in Hs.
    change (sc_zero fl) with 0; rewrite Hl'len, Hsnd in Hs; fold g in Hs.
    destruct (Forall2_rsum_err zs' zs dz H) as [Hr Ha]; rewrite Hlen in Hr, Ha; fold V in Hr, Ha.
    assert (g * asum zs' <= g * (asum zs + INR V * dz)) by (apply Rmult_le_compat_l; lra).
    eapply Rle_trans; [apply (Rabs_sub_triang _ (rsum zs'))|lra]. }
  unfold ce_token_loss_R; fold L; fold zt; fold V.
  apply (token_loss_fl_err V eps lam ts L' L); assumption.
Qed.

Lemma token_forward_logits_fl : forall cfg bv W bias h t,
  let zs := logits_row fl (ce_softcap cfg) bias W h in
  token_forward fl cfg bv W bias h t
  = token_loss fl (length W) (ce_smoothing cfg) (ce_z_loss cfg)
      (vocab_loop fl t (chunk bv (combine (seq 0 (length W)) zs))).
Proof.
  intros cfg bv W bias h t zs.
  unfold token_forward; f_equal; f_equal.
  unfold chunk_logits; rewrite <- chunk_map; f_equal.
  rewrite (map_pair_fst (fun e => softcap fl (ce_softcap cfg) (raw_logit fl bias h e))).
  unfold vocab at 1; rewrite map_fst_combine_seq.
  reflexivity.
Qed.

Lemma Forall2_map_err : forall {A} (f g : A -> R) (l : list A) d,
  (forall x, In x l -> Rabs (f x - g x) <= d) -> Forall2 (fun a b => Rabs (a - b) <= d) (map f l) (map g l).
Proof.
  intros A f g l d H; induction l as [|x l IH]; simpl; constructor.
  - apply H; left; reflexivity.
  - apply IH; intros y Hy; apply H; right; exact Hy.
Qed.

(** The per-token forward [token_forward] (no softcap) computed in the
    model, from a hidden row [h] and weights [W] (and bias), against the
    exact one: if every computed logit is within [dz] of the exact one
    ([raw_logit_error_bound] gives such a [dz]), the computed lse is
    within [lse_err] and the computed loss within [token_loss_err] of the
    exact lse and loss, whose inputs are the exact lse [L], target logit
    [z_t], logit sum and sum of [|z_v|]. *)
Theorem token_forward_error_bound : forall cfg bv W bias h t dz,
  ce_softcap cfg = None -> W <> [] -> (0 <= t < Z.of_nat (length W))%Z ->
  (forall e, In e (vocab W) -> Rabs (raw_logit fl bias h e - raw_logit R_ops bias h e) <= dz) ->
  u < 1 -> stream_beta u ue (length W) <= / 2 -> (1 + stream_beta u ue (length W)) * INR (length W) <= Lmax ->
  nat_err (length W) < INR (length W) ->
  let zs := logits_row R_ops None bias W h in
  let V := length W in
  let L := lse_row zs in
  let zt := nth (Z.to_nat t) zs 0 in
  let g := sum_factor V in
  exists loss' L',
    token_forward fl cfg bv W bias h t = (loss', L')
    /\ token_forward R_ops cfg bv W bias h t = (ce_token_loss_R (ce_smoothing cfg) (ce_z_loss cfg) t zs, L)
    /\ Rabs (L' - L) <= lse_err L dz V
    /\ Rabs (loss' - ce_token_loss_R (ce_smoothing cfg) (ce_z_loss cfg) t zs)
       <= token_loss_err V (ce_smoothing cfg) (ce_z_loss cfg) L (lse_err L dz V) zt
            (dz + g * (Rabs zt + dz)) (rsum zs) (INR V * dz + g * (asum zs + INR V * dz)).
Proof.
  intros cfg bv W bias h t dz Hcap HW Ht Hdz Hu Hb HLmax HV zs V L zt g.
  assert (Hexact : token_forward R_ops cfg bv W bias h t
                   = (ce_token_loss_R (ce_smoothing cfg) (ce_z_loss cfg) t zs, L)).
  { unfold L, zs; rewrite <- Hcap; apply token_forward_correct; assumption. }
  set (zs' := logits_row fl None bias W h).
  assert (HF : Forall2 (fun a b => Rabs (a - b) <= dz) zs' zs)
    by (unfold zs', zs, logits_row; apply Forall2_map_err; exact Hdz).
  assert (Hlen : length zs = length W) by apply logits_row_length.
  assert (Hne : zs <> []) by (apply logits_row_nil, HW).
  rewrite <- Hlen in Ht, Hb, HLmax, HV.
  destruct (token_loss_error_bound (ce_smoothing cfg) (ce_z_loss cfg) bv t zs zs' dz Hne HF Ht Hu Hb HLmax HV)
    as (loss' & L' & E & HL & Hloss).
  exists loss', L'.
  rewrite token_forward_logits_fl, Hcap; fold zs'.
  rewrite Hlen in E, HL, Hloss.
  split; [exact E|split; [exact Hexact|split; assumption]].
Qed.

End LossError.
