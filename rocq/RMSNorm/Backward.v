(** * The backward of RMSNorm from the saved input and inverse rms only.

    For a row [x] of length [n >= 1] and [eps > 0] the kernel computes
    [r = 1 / sqrt (sum_i x_i^2 / n + eps)] ([rms_inv]) and
    [y_i = w_i * x_i * r] ([rms_norm_forward]).  It saves [x] and [r]
    only (no normalised copy of [x]); its backward ([rms_norm_backward],
    a function of [x], [r], [w], [dy]) is
    [dx_j = r * (w_j * dy_j) - (r^3 / n) * x_j * sum_i (w_i * dy_i * x_i)]
    and [dw_i = dy_i * x_i * r] (one row's contribution; the kernel sums
    [dw] over rows).

    - [rms_norm_is_derive_x]: Coquelicot's derivative of [y_i] with
      respect to [x_j] (all other entries of [x] fixed, [r] recomputed
      from the perturbed row) is
      [w_i * ([i = j] r - r^3 x_i x_j / n)];
    - [rms_norm_backward_eq_vjp]: with [r] the one the forward computed
      from [x], [dx_j = sum_i dy_i * d y_i / d x_j] and
      [dw_i = sum_k dy_k * d y_k / d w_i = dy_i * d y_i / d w_i] (the
      other outputs do not depend on [w_i]), every derivative existing;
    - [rms_norm_offset_backward_eq_vjp]: the same for the weight
      [(1 + w_i)] (Gemma): [dx] uses [(1 + w_j)], [dw_i = dy_i x_i r].

    Vectors are lists of reals read with [nth _ _ 0], as in the rest of
    the project; [set_nth j t x] ([LinearCrossEntropy.Gradient]) is [x] with
    entry [j] replaced by [t]. *)

From Coq Require Import Reals List Lra Arith Lia.
Set Warnings "-ambiguous-paths".
From Coquelicot Require Import Coquelicot.
From Ojas Require Import VectorFacts LinearCrossEntropy.Gradient.
Import ListNotations.
Open Scope R_scope.

(** ** The kernel *)

(** [1 / sqrt (mean_i x_i^2 + eps)]. *)
Definition rms_inv (eps : R) (x : list R) : R :=
  1 / sqrt (rsum (map (fun t => t * t) x) / INR (length x) + eps).

(** The forward with an effective weight [u i] for entry [i]. *)
Definition rms_scale_forward (u : nat -> R) (eps : R) (x : list R) : list R :=
  let r := rms_inv eps x in
  map (fun i => u i * nth i x 0 * r) (seq 0 (length x)).

(** [y_i = w_i * x_i * r]. *)
Definition rms_norm_forward (eps : R) (w x : list R) : list R :=
  let r := rms_inv eps x in
  map (fun i => nth i w 0 * nth i x 0 * r) (seq 0 (length x)).

(** [y_i = (1 + w_i) * x_i * r] (Gemma). *)
Definition rms_norm_offset_forward (eps : R) (w x : list R) : list R :=
  let r := rms_inv eps x in
  map (fun i => (1 + nth i w 0) * nth i x 0 * r) (seq 0 (length x)).

(** The input gradient from the saved [x], [r] and the effective weights [u]. *)
Definition rms_scale_backward_dx (u : nat -> R) (x : list R) (r : R) (dy : list R) : list R :=
  let n := length x in
  let c := rsum (map (fun i => u i * nth i dy 0 * nth i x 0) (seq 0 n)) in
  map (fun j => r * (u j * nth j dy 0) - (r ^ 3 / INR n) * nth j x 0 * c) (seq 0 n).

(** The backward of the kernel from [(x, r, w, dy)]: [(dx, dw)]. *)
Definition rms_norm_backward (x : list R) (r : R) (w dy : list R) : list R * list R :=
  let n := length x in
  let c := rsum (map (fun i => nth i w 0 * nth i dy 0 * nth i x 0) (seq 0 n)) in
  (map (fun j => r * (nth j w 0 * nth j dy 0) - (r ^ 3 / INR n) * nth j x 0 * c) (seq 0 n),
   map (fun i => nth i dy 0 * nth i x 0 * r) (seq 0 n)).

(** The same with the weight [(1 + w_i)]. *)
Definition rms_norm_offset_backward (x : list R) (r : R) (w dy : list R) : list R * list R :=
  let n := length x in
  let c := rsum (map (fun i => (1 + nth i w 0) * nth i dy 0 * nth i x 0) (seq 0 n)) in
  (map (fun j => r * ((1 + nth j w 0) * nth j dy 0) - (r ^ 3 / INR n) * nth j x 0 * c) (seq 0 n),
   map (fun i => nth i dy 0 * nth i x 0 * r) (seq 0 n)).

(** The Jacobian entry [d y_i / d x_j] for effective weights [u]. *)
Definition rms_scale_jacobian (u : nat -> R) (eps : R) (x : list R) (i j : nat) : R :=
  let r := rms_inv eps x in
  u i * ((if Nat.eqb i j then r else 0) - r ^ 3 * nth i x 0 * nth j x 0 / INR (length x)).

(** ** List lemmas *)

Lemma rsum_sq_nonneg : forall x, 0 <= rsum (map (fun t => t * t) x).
Proof.
  intros x; apply rsum_nonneg; intros y Hy; apply in_map_iff in Hy as [t [<- _]].
  apply Rle_0_sqr.
Qed.

Lemma rms_arg_pos : forall eps x,
  0 < eps -> (0 < length x)%nat ->
  0 < rsum (map (fun t => t * t) x) / INR (length x) + eps.
Proof.
  intros eps x He Hn.
  pose proof (rsum_sq_nonneg x); pose proof (lt_0_INR _ Hn).
  assert (0 <= rsum (map (fun t => t * t) x) / INR (length x))
    by (apply Rdiv_le_0_compat; lra).
  lra.
Qed.

Lemma nth_set_nth : forall i j t (x : list R),
  (j < length x)%nat -> nth i (set_nth j t x) 0 = if Nat.eqb i j then t else nth i x 0.
Proof. intros; unfold set_nth; apply nth_replace; assumption. Qed.

(** ** The derivative with respect to [x_j] *)

Lemma rms_scale_is_derive_x : forall (u : nat -> R) eps x i j,
  0 < eps -> (j < length x)%nat ->
  is_derive (fun t => nth i (rms_scale_forward u eps (set_nth j t x)) 0) (nth j x 0)
            (rms_scale_jacobian u eps x i j).
Proof.
  intros u eps x i j He Hj.
  set (S := rsum (map (fun t => t * t) x)).
  set (z := nth j x 0).
  set (n := INR (length x)).
  assert (Hn : 0 < n) by (apply lt_0_INR; lia).
  assert (Hq : 0 < S / n + eps) by (apply rms_arg_pos; [exact He|lia]).
  destruct (Nat.lt_ge_cases i (length x)) as [Hi|Hi].
  2:{ (* outside the row: the output entry is the default 0 *)
    apply (is_derive_ext (fun _ => 0)).
    { intros t; unfold rms_scale_forward; cbv zeta; rewrite nth_overflow; [reflexivity|].
      rewrite map_length, seq_length, set_nth_length; lia. }
    unfold rms_scale_jacobian; cbv zeta.
    rewrite (nth_overflow x) by lia.
    destruct (Nat.eqb_spec i j) as [->|_]; [lia|].
    replace (u i * (0 - rms_inv eps x ^ 3 * 0 * nth j x 0 / INR (length x))) with 0 by (unfold Rdiv; ring).
    auto_derive; [exact I|reflexivity]. }
  set (xi := if Nat.eqb i j then z else nth i x 0).
  apply (is_derive_ext (fun t => u i * (if Nat.eqb i j then t else nth i x 0)
                                 * (1 / sqrt ((S - z * z + t * t) / n + eps)))).
  { intros t; unfold rms_scale_forward; cbv zeta.
    rewrite nth_map_seq0 by (rewrite set_nth_length; lia).
    rewrite nth_set_nth by exact Hj.
    unfold rms_inv; rewrite set_nth_length by exact Hj.
    rewrite (rsum_map_set_nth (fun t => t * t)) by exact Hj; reflexivity. }
  unfold rms_scale_jacobian, rms_inv; fold S n; fold z.
  assert (Hzz : S - z * z + z * z = S) by ring.
  assert (Hs : 0 < sqrt (S / n + eps)) by (apply sqrt_lt_R0, Hq).
  destruct (Nat.eqb_spec i j) as [->|Hne].
  - auto_derive; rewrite Hzz; unfold Rdiv in *.
    + repeat split; lra.
    + fold z. clearbody S z n. set (q := sqrt (S * / n + eps)) in *. clearbody q. field. lra.
  - auto_derive; rewrite Hzz; unfold Rdiv in *.
    + repeat split; lra.
    + clearbody S z n. set (q := sqrt (S * / n + eps)) in *. clearbody q. field. lra.
Qed.

(** The backward's input gradient is the vector-Jacobian product. *)
Lemma rms_scale_dx_vjp : forall (u : nat -> R) eps x dy j,
  (j < length x)%nat ->
  nth j (rms_scale_backward_dx u x (rms_inv eps x) dy) 0
  = rsum (map (fun i => nth i dy 0 * rms_scale_jacobian u eps x i j) (seq 0 (length x))).
Proof.
  intros u eps x dy j Hj.
  unfold rms_scale_backward_dx, rms_scale_jacobian; cbv zeta.
  rewrite nth_map_seq0 by exact Hj.
  set (r := rms_inv eps x); set (n := INR (length x)).
  rewrite (rsum_map_ext (fun i => nth i dy 0 * (u i * ((if Nat.eqb i j then r else 0)
                                   - r ^ 3 * nth i x 0 * nth j x 0 / n))) (fun i => (if Nat.eqb i j then u i * nth i dy 0 * r else 0)
                                    + (- (r ^ 3 * nth j x 0 / n)) * (u i * nth i dy 0 * nth i x 0))).
  2:{ intros i _; destruct (Nat.eqb i j); unfold Rdiv; ring. }
  rewrite rsum_map_plus, rsum_map_scal_l, (rsum_pick_seq (fun i => u i * nth i dy 0 * r)) by lia.
  unfold Rdiv; ring.
Qed.

(** ** The weight gradient, for a weight map [g] of derivative 1 *)

Section WeightMap.
(** The effective weight of entry [i] is [g w_i]: [g t = t] or [g t = 1 + t]. *)
Variable g : R -> R.
Hypothesis g_derive : forall t, is_derive g t 1.

Definition rms_g_forward (eps : R) (w x : list R) : list R :=
  rms_scale_forward (fun i => g (nth i w 0)) eps x.

Lemma rms_g_forward_w_is_derive : forall eps w x i k,
  (i < length w)%nat -> (k < length x)%nat ->
  is_derive (fun t => nth k (rms_g_forward eps (set_nth i t w) x) 0) (nth i w 0)
            (if Nat.eqb k i then nth i x 0 * rms_inv eps x else 0).
Proof.
  intros eps w x i k Hi Hk.
  destruct (Nat.eqb_spec k i) as [->|Hne].
  - set (c := nth i x 0 * rms_inv eps x).
    apply (is_derive_ext (fun t => c * g t)).
    { intros t; unfold rms_g_forward, rms_scale_forward; cbv zeta.
      rewrite nth_map_seq0 by exact Hk; rewrite nth_set_nth, Nat.eqb_refl by exact Hi.
      unfold c; change (@eq R (nth i x 0 * rms_inv eps x * g t) (g t * nth i x 0 * rms_inv eps x)); ring. }
    pose proof (is_derive_scal g (nth i w 0) c 1 (g_derive _)) as H.
    rewrite Rmult_1_r in H; exact H.
  - apply (is_derive_ext (fun _ => g (nth k w 0) * nth k x 0 * rms_inv eps x)).
    { intros t; unfold rms_g_forward, rms_scale_forward; cbv zeta.
      rewrite nth_map_seq0 by exact Hk; rewrite nth_set_nth by exact Hi.
      destruct (Nat.eqb_spec k i); [contradiction|reflexivity]. }
    auto_derive; [exact I|reflexivity].
Qed.

(** The other outputs do not depend on [w_i] at all. *)
Lemma rms_g_forward_w_indep : forall eps w x i k t,
  (i < length w)%nat -> k <> i ->
  nth k (rms_g_forward eps (set_nth i t w) x) 0 = nth k (rms_g_forward eps w x) 0.
Proof.
  intros eps w x i k t Hi Hne; unfold rms_g_forward, rms_scale_forward; cbv zeta.
  destruct (Nat.lt_ge_cases k (length x)) as [Hk|Hk].
  - rewrite !nth_map_seq0 by exact Hk; rewrite nth_set_nth by exact Hi.
    destruct (Nat.eqb_spec k i); [contradiction|reflexivity].
  - rewrite !nth_overflow by (rewrite map_length, seq_length; exact Hk); reflexivity.
Qed.

(** The generic statement: [dx] and [dw] of the backward with effective
    weights [g w_i] are the vector-Jacobian products of the forward. *)
Lemma rms_g_backward_eq_vjp : forall eps (w x dy : list R),
  0 < eps -> length w = length x ->
  let n := length x in
  let r := rms_inv eps x in
  (forall j, (j < n)%nat ->
     (forall i, (i < n)%nat ->
        ex_derive (fun t => nth i (rms_g_forward eps w (set_nth j t x)) 0) (nth j x 0)) /\
     nth j (rms_scale_backward_dx (fun i => g (nth i w 0)) x r dy) 0
     = rsum (map (fun i => nth i dy 0
                           * Derive (fun t => nth i (rms_g_forward eps w (set_nth j t x)) 0) (nth j x 0))
                 (seq 0 n))) /\
  (forall i, (i < n)%nat ->
     (forall k, (k < n)%nat ->
        ex_derive (fun t => nth k (rms_g_forward eps (set_nth i t w) x) 0) (nth i w 0)) /\
     (forall k t, k <> i ->
        nth k (rms_g_forward eps (set_nth i t w) x) 0 = nth k (rms_g_forward eps w x) 0) /\
     nth i dy 0 * nth i x 0 * r
     = nth i dy 0 * Derive (fun t => nth i (rms_g_forward eps (set_nth i t w) x) 0) (nth i w 0) /\
     nth i dy 0 * nth i x 0 * r
     = rsum (map (fun k => nth k dy 0
                           * Derive (fun t => nth k (rms_g_forward eps (set_nth i t w) x) 0) (nth i w 0))
                 (seq 0 n))).
Proof.
  intros eps w x dy He Hw n r; split.
  - intros j Hj; split.
    + intros i _; eexists; apply rms_scale_is_derive_x; assumption.
    + unfold r, n; rewrite rms_scale_dx_vjp by exact Hj.
      apply rsum_map_ext; intros i _; f_equal; symmetry; apply is_derive_unique.
      apply rms_scale_is_derive_x; assumption.
  - intros i Hi; assert (Hiw : (i < length w)%nat) by lia.
    split; [|split; [|split]].
    + intros k Hk; eexists; apply rms_g_forward_w_is_derive; assumption.
    + intros k t Hne; apply rms_g_forward_w_indep; assumption.
    + replace (Derive (fun t => nth i (rms_g_forward eps (set_nth i t w) x) 0) (nth i w 0))
        with (nth i x 0 * r); [ring|].
      symmetry; apply is_derive_unique.
      pose proof (rms_g_forward_w_is_derive eps w x i i Hiw Hi) as HD.
      rewrite Nat.eqb_refl in HD; exact HD.
    + rewrite (rsum_map_ext _ (fun k => if Nat.eqb k i then nth k dy 0 * (nth i x 0 * r) else 0)).
      * rewrite (rsum_pick_seq (fun k => nth k dy 0 * (nth i x 0 * r))) by lia; ring.
      * intros k Hk; apply in_seq in Hk.
        replace (Derive (fun t => nth k (rms_g_forward eps (set_nth i t w) x) 0) (nth i w 0))
          with (if Nat.eqb k i then nth i x 0 * r else 0)
          by (symmetry; apply is_derive_unique, rms_g_forward_w_is_derive; [exact Hiw|lia]).
        destruct (Nat.eqb k i); ring.
Qed.

End WeightMap.

Lemma is_derive_id_R : forall t, is_derive (fun s : R => s) t 1.
Proof. intros t; auto_derive; [exact I|reflexivity]. Qed.

Lemma is_derive_offset_R : forall t, is_derive (fun s : R => 1 + s) t 1.
Proof. intros t; auto_derive; [exact I|ring]. Qed.

(** ** The kernel's backward: [y_i = w_i x_i r] *)

(** [d y_i / d x_j = w_i ([i = j] r - r^3 x_i x_j / n)], [r] recomputed
    from the perturbed row. *)
Theorem rms_norm_is_derive_x : forall eps (w x : list R) i j,
  0 < eps -> (j < length x)%nat ->
  let r := rms_inv eps x in
  is_derive (fun t => nth i (rms_norm_forward eps w (set_nth j t x)) 0) (nth j x 0)
            (nth i w 0 * ((if Nat.eqb i j then r else 0)
                          - r ^ 3 * nth i x 0 * nth j x 0 / INR (length x))).
Proof.
  intros eps w x i j He Hj r.
  exact (rms_scale_is_derive_x (fun k => nth k w 0) eps x i j He Hj).
Qed.

(** With [r] the inverse rms the forward computed from [x], the backward
    from [(x, r, w, dy)] gives [dx_j = sum_i dy_i * d y_i / d x_j] and
    [dw_i = sum_k dy_k * d y_k / d w_i = dy_i * d y_i / d w_i] (the
    other outputs do not depend on [w_i]); every derivative exists. *)
Theorem rms_norm_backward_eq_vjp : forall eps (w x dy : list R),
  0 < eps -> length w = length x ->
  let n := length x in
  let r := rms_inv eps x in
  let dx := fst (rms_norm_backward x r w dy) in
  let dw := snd (rms_norm_backward x r w dy) in
  (forall j, (j < n)%nat ->
     (forall i, (i < n)%nat ->
        ex_derive (fun t => nth i (rms_norm_forward eps w (set_nth j t x)) 0) (nth j x 0)) /\
     nth j dx 0
     = rsum (map (fun i => nth i dy 0
                           * Derive (fun t => nth i (rms_norm_forward eps w (set_nth j t x)) 0) (nth j x 0))
                 (seq 0 n))) /\
  (forall i, (i < n)%nat ->
     (forall k, (k < n)%nat ->
        ex_derive (fun t => nth k (rms_norm_forward eps (set_nth i t w) x) 0) (nth i w 0)) /\
     (forall k t, k <> i ->
        nth k (rms_norm_forward eps (set_nth i t w) x) 0 = nth k (rms_norm_forward eps w x) 0) /\
     nth i dw 0
     = nth i dy 0 * Derive (fun t => nth i (rms_norm_forward eps (set_nth i t w) x) 0) (nth i w 0) /\
     nth i dw 0
     = rsum (map (fun k => nth k dy 0
                           * Derive (fun t => nth k (rms_norm_forward eps (set_nth i t w) x) 0) (nth i w 0))
                 (seq 0 n))).
Proof.
  intros eps w x dy He Hw n r dx dw.
  pose proof (rms_g_backward_eq_vjp (fun s => s) is_derive_id_R eps w x dy He Hw) as H.
  cbv zeta in H; destruct H as [Hx Hwt]; split.
  - exact Hx.
  - intros i Hi; destruct (Hwt i Hi) as (H1 & H2 & H3 & H4).
    unfold dw, rms_norm_backward; cbn [snd]; rewrite nth_map_seq0 by exact Hi.
    exact (conj H1 (conj H2 (conj H3 H4))).
Qed.

(** ** Gemma's offset weight: [y_i = (1 + w_i) x_i r] *)

Theorem rms_norm_offset_is_derive_x : forall eps (w x : list R) i j,
  0 < eps -> (j < length x)%nat ->
  let r := rms_inv eps x in
  is_derive (fun t => nth i (rms_norm_offset_forward eps w (set_nth j t x)) 0) (nth j x 0)
            ((1 + nth i w 0) * ((if Nat.eqb i j then r else 0)
                                - r ^ 3 * nth i x 0 * nth j x 0 / INR (length x))).
Proof.
  intros eps w x i j He Hj r.
  exact (rms_scale_is_derive_x (fun k => 1 + nth k w 0) eps x i j He Hj).
Qed.

(** The same for the offset weight: [dx] uses [(1 + w_j)], and
    [dw_i = dy_i x_i r] is again the vector-Jacobian product in [w]. *)
Theorem rms_norm_offset_backward_eq_vjp : forall eps (w x dy : list R),
  0 < eps -> length w = length x ->
  let n := length x in
  let r := rms_inv eps x in
  let dx := fst (rms_norm_offset_backward x r w dy) in
  let dw := snd (rms_norm_offset_backward x r w dy) in
  (forall j, (j < n)%nat ->
     (forall i, (i < n)%nat ->
        ex_derive (fun t => nth i (rms_norm_offset_forward eps w (set_nth j t x)) 0) (nth j x 0)) /\
     nth j dx 0
     = rsum (map (fun i => nth i dy 0
                           * Derive (fun t => nth i (rms_norm_offset_forward eps w (set_nth j t x)) 0)
                                    (nth j x 0))
                 (seq 0 n))) /\
  (forall i, (i < n)%nat ->
     (forall k, (k < n)%nat ->
        ex_derive (fun t => nth k (rms_norm_offset_forward eps (set_nth i t w) x) 0) (nth i w 0)) /\
     (forall k t, k <> i ->
        nth k (rms_norm_offset_forward eps (set_nth i t w) x) 0
        = nth k (rms_norm_offset_forward eps w x) 0) /\
     nth i dw 0
     = nth i dy 0 * Derive (fun t => nth i (rms_norm_offset_forward eps (set_nth i t w) x) 0)
                           (nth i w 0) /\
     nth i dw 0
     = rsum (map (fun k => nth k dy 0
                           * Derive (fun t => nth k (rms_norm_offset_forward eps (set_nth i t w) x) 0)
                                    (nth i w 0))
                 (seq 0 n))).
Proof.
  intros eps w x dy He Hw n r dx dw.
  pose proof (rms_g_backward_eq_vjp (fun s => 1 + s) is_derive_offset_R eps w x dy He Hw) as H.
  cbv zeta in H; destruct H as [Hx Hwt]; split.
  - exact Hx.
  - intros i Hi; destruct (Hwt i Hi) as (H1 & H2 & H3 & H4).
    unfold dw, rms_norm_offset_backward; cbn [snd]; rewrite nth_map_seq0 by exact Hi.
    exact (conj H1 (conj H2 (conj H3 H4))).
Qed.
