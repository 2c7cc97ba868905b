(** * The backward of rotary position embedding (RoPE) is its vector-Jacobian product.

    Hugging Face's "rotate_half" form on one head row [x] of even length
    [2h]: [rotate_half x = cat (- x2, x1)] and
    [y = x * cos + rotate_half x * sin].  Per pair index [i < h], with
    [c1 = cos_i], [c2 = cos_(i+h)], [s1 = sin_i], [s2 = sin_(i+h)] (the
    two halves may carry different values):
    [y_i = x_i c1 - x_(i+h) s1], [y_(i+h) = x_(i+h) c2 + x_i s2]
    ([rope_pair_forward], [rope_forward]).  The kernel's backward from
    the incoming gradient [g] ([rope_pair_backward], [rope_backward]) is
    [dx_i = g_i c1 + g_(i+h) s2], [dx_(i+h) = g_(i+h) c2 - g_i s1].

    - [rope_pair_is_derive]: Coquelicot's four partial derivatives of
      the pair map;
    - [rope_pair_backward_is_linear_transpose]: the pair map is the
      matrix [[c1, - s1]; [s2, c2]] and the backward is its transpose
      applied to [(g_i, g_(i+h))];
    - [rope_pair_backward_eq_vjp]: [dx_i = g_i d y_i / d x_i +
      g_(i+h) d y_(i+h) / d x_i], the same for [dx_(i+h)], every
      derivative existing;
    - [rope_pair_adjoint]: [g_i y_i + g_(i+h) y_(i+h) =
      dx_i x_i + dx_(i+h) x_(i+h)];
    - [rope_forward_nth_lo], [rope_forward_nth_hi],
      [rope_backward_nth_lo], [rope_backward_nth_hi]: the vector maps
      compute the per-pair formulas at entries [i] and [i + h];
    - [rope_backward_eq_vjp]: for rows [x], [g] of length [2h] and any
      cos/sin vectors, [dot g (rope_forward x) = dot (rope_backward g) x];
    - [rope_backward_is_linear_transpose]: the forward is linear in [x]
      and the backward is its adjoint (so its transpose);
    - [rope_backward_eq_gradient]: entry [j] of [rope_backward g] is
      Coquelicot's derivative of [dot g (rope_forward x)] with respect
      to [x_j] (all other entries fixed): the vector-Jacobian product.

    Vectors are lists of reals read with [nth _ _ 0], as in the rest of
    the project; [dot] is [Vector.dot R_ops]; [set_nth j t x]
    ([LinearCrossEntropy.Gradient]) is [x] with entry [j] replaced by [t].
    Over the reals only: no theorem covers rounding (the kernel rounds
    as torch's op-by-op autograd does). *)

From Coq Require Import Reals List Lra Arith Lia.
Set Warnings "-ambiguous-paths".
From Coquelicot Require Import Coquelicot.
From Ojas Require Import ScalarOps Vector VectorFacts LinearCrossEntropy.Gradient.
Import ListNotations.
Open Scope R_scope.

(** ** The kernel, one pair *)

(** [(y_i, y_(i+h))] from [(x_i, x_(i+h))]. *)
Definition rope_pair_forward (c1 c2 s1 s2 x1 x2 : R) : R * R :=
  (x1 * c1 - x2 * s1, x2 * c2 + x1 * s2).

(** [(dx_i, dx_(i+h))] from [(g_i, g_(i+h))]. *)
Definition rope_pair_backward (c1 c2 s1 s2 g1 g2 : R) : R * R :=
  (g1 * c1 + g2 * s2, g2 * c2 - g1 * s1).

(** ** The kernel, one head row of length [2h] *)

Definition rope_forward (h : nat) (c s x : list R) : list R :=
  map (fun i => nth i x 0 * nth i c 0 - nth (i + h) x 0 * nth i s 0) (seq 0 h) ++
  map (fun i => nth (i + h) x 0 * nth (i + h) c 0 + nth i x 0 * nth (i + h) s 0) (seq 0 h).

Definition rope_backward (h : nat) (c s g : list R) : list R :=
  map (fun i => nth i g 0 * nth i c 0 + nth (i + h) g 0 * nth (i + h) s 0) (seq 0 h) ++
  map (fun i => nth (i + h) g 0 * nth (i + h) c 0 - nth i g 0 * nth i s 0) (seq 0 h).

(** ** The pair map *)

Theorem rope_pair_is_derive : forall c1 c2 s1 s2 x1 x2,
  is_derive (fun t => fst (rope_pair_forward c1 c2 s1 s2 t x2)) x1 c1 /\
  is_derive (fun t => fst (rope_pair_forward c1 c2 s1 s2 x1 t)) x2 (- s1) /\
  is_derive (fun t => snd (rope_pair_forward c1 c2 s1 s2 t x2)) x1 s2 /\
  is_derive (fun t => snd (rope_pair_forward c1 c2 s1 s2 x1 t)) x2 c2.
Proof.
  intros c1 c2 s1 s2 x1 x2; unfold rope_pair_forward; cbn [fst snd].
  split; [|split; [|split]]; auto_derive; try exact I; ring.
Qed.

(** With [J = [[c1, - s1]; [s2, c2]]]: forward [= J x], backward [= J^T g]. *)
Theorem rope_pair_backward_is_linear_transpose : forall c1 c2 s1 s2 x1 x2 g1 g2,
  let J11 := c1 in let J12 := - s1 in let J21 := s2 in let J22 := c2 in
  rope_pair_forward c1 c2 s1 s2 x1 x2 = (J11 * x1 + J12 * x2, J21 * x1 + J22 * x2) /\
  rope_pair_backward c1 c2 s1 s2 g1 g2 = (J11 * g1 + J21 * g2, J12 * g1 + J22 * g2).
Proof.
  intros; unfold rope_pair_forward, rope_pair_backward, J11, J12, J21, J22.
  split; f_equal; ring.
Qed.

(** The pair backward is the vector-Jacobian product of the pair map. *)
Theorem rope_pair_backward_eq_vjp : forall c1 c2 s1 s2 x1 x2 g1 g2,
  ex_derive (fun t => fst (rope_pair_forward c1 c2 s1 s2 t x2)) x1 /\
  ex_derive (fun t => fst (rope_pair_forward c1 c2 s1 s2 x1 t)) x2 /\
  ex_derive (fun t => snd (rope_pair_forward c1 c2 s1 s2 t x2)) x1 /\
  ex_derive (fun t => snd (rope_pair_forward c1 c2 s1 s2 x1 t)) x2 /\
  fst (rope_pair_backward c1 c2 s1 s2 g1 g2)
    = g1 * Derive (fun t => fst (rope_pair_forward c1 c2 s1 s2 t x2)) x1
      + g2 * Derive (fun t => snd (rope_pair_forward c1 c2 s1 s2 t x2)) x1 /\
  snd (rope_pair_backward c1 c2 s1 s2 g1 g2)
    = g1 * Derive (fun t => fst (rope_pair_forward c1 c2 s1 s2 x1 t)) x2
      + g2 * Derive (fun t => snd (rope_pair_forward c1 c2 s1 s2 x1 t)) x2.
Proof.
  intros c1 c2 s1 s2 x1 x2 g1 g2.
  destruct (rope_pair_is_derive c1 c2 s1 s2 x1 x2) as [H11 [H12 [H21 H22]]].
  split; [eexists; exact H11|].
  split; [eexists; exact H12|].
  split; [eexists; exact H21|].
  split; [eexists; exact H22|].
  replace (Derive (fun t => fst (rope_pair_forward c1 c2 s1 s2 t x2)) x1) with c1
    by (symmetry; apply is_derive_unique, H11).
  replace (Derive (fun t => fst (rope_pair_forward c1 c2 s1 s2 x1 t)) x2) with (- s1)
    by (symmetry; apply is_derive_unique, H12).
  replace (Derive (fun t => snd (rope_pair_forward c1 c2 s1 s2 t x2)) x1) with s2
    by (symmetry; apply is_derive_unique, H21).
  replace (Derive (fun t => snd (rope_pair_forward c1 c2 s1 s2 x1 t)) x2) with c2
    by (symmetry; apply is_derive_unique, H22).
  unfold rope_pair_backward; cbn [fst snd]; split; ring.
Qed.

(** The adjoint identity for one pair. *)
Theorem rope_pair_adjoint : forall c1 c2 s1 s2 x1 x2 g1 g2,
  g1 * fst (rope_pair_forward c1 c2 s1 s2 x1 x2)
  + g2 * snd (rope_pair_forward c1 c2 s1 s2 x1 x2)
  = fst (rope_pair_backward c1 c2 s1 s2 g1 g2) * x1
    + snd (rope_pair_backward c1 c2 s1 s2 g1 g2) * x2.
Proof. intros; unfold rope_pair_forward, rope_pair_backward; cbn [fst snd]; ring. Qed.

(** ** List lemmas *)

Lemma rope_nth_halves_lo : forall (f g : nat -> R) h i,
  (i < h)%nat -> nth i (map f (seq 0 h) ++ map g (seq 0 h)) 0 = f i.
Proof.
  intros f g h i Hi.
  rewrite app_nth1 by (rewrite map_length, seq_length; exact Hi).
  apply nth_map_seq0; exact Hi.
Qed.

Lemma rope_nth_halves_hi : forall (f g : nat -> R) h i,
  (i < h)%nat -> nth (i + h) (map f (seq 0 h) ++ map g (seq 0 h)) 0 = g i.
Proof.
  intros f g h i Hi.
  rewrite app_nth2 by (rewrite map_length, seq_length; lia).
  rewrite map_length, seq_length.
  replace (i + h - h)%nat with i by lia.
  apply nth_map_seq0; exact Hi.
Qed.

Lemma rope_halves_length : forall (f g : nat -> R) h,
  length (map f (seq 0 h) ++ map g (seq 0 h)) = (2 * h)%nat.
Proof. intros; rewrite app_length, !map_length, seq_length; lia. Qed.

(** The dot product of two lists of length [n], as a sum over [seq 0 n]. *)
Lemma rope_dot_seq : forall (a b : list R) n,
  length a = n -> length b = n ->
  dot R_ops a b = rsum (map (fun k => nth k a 0 * nth k b 0) (seq 0 n)).
Proof.
  induction a as [|x a IH]; intros b n Ha Hb.
  - simpl in Ha; subst n; destruct b; [reflexivity|discriminate].
  - destruct b as [|y b]; [simpl in *; lia|].
    destruct n as [|n]; [discriminate|].
    simpl in Ha, Hb; injection Ha as Ha; injection Hb as Hb.
    cbn [dot seq map]; rewrite rsum_cons, (IH b n Ha Hb).
    rewrite <- seq_shift, map_map; cbn [nth]; reflexivity.
Qed.

Lemma rope_rsum_seq_shift : forall m (f : nat -> R) s,
  rsum (map f (seq s m)) = rsum (map (fun i => f (i + s)%nat) (seq 0 m)).
Proof.
  intros m; induction m as [|m IH]; intros f s; [reflexivity|].
  cbn [seq map]; rewrite !rsum_cons, (IH f (S s)).
  rewrite (IH (fun i => f (i + s)%nat) 1%nat).
  f_equal; apply rsum_map_ext; intros i _; f_equal; lia.
Qed.

(** The dot product of two rows of length [2h], pair by pair. *)
Lemma rope_dot_halves : forall (a b : list R) h,
  length a = (2 * h)%nat -> length b = (2 * h)%nat ->
  dot R_ops a b
  = rsum (map (fun i => nth i a 0 * nth i b 0 + nth (i + h) a 0 * nth (i + h) b 0) (seq 0 h)).
Proof.
  intros a b h Ha Hb.
  rewrite (rope_dot_seq a b (h + h)) by lia.
  rewrite seq_app, map_app, rsum_app, rsum_map_plus, Nat.add_0_l.
  f_equal; apply rope_rsum_seq_shift.
Qed.

Lemma rope_dot_set_nth : forall (b x : list R) n j t,
  length b = n -> length x = n -> (j < n)%nat ->
  dot R_ops b (set_nth j t x) = dot R_ops b x - nth j b 0 * nth j x 0 + nth j b 0 * t.
Proof.
  intros b x n j t Hb Hx Hj.
  rewrite (rope_dot_seq b (set_nth j t x) n) by (try rewrite set_nth_length; lia).
  rewrite (rope_dot_seq b x n) by assumption.
  rewrite (rsum_map_ext _
             (fun k => nth k b 0 * nth k x 0
                       + (if Nat.eqb k j then nth k b 0 * (t - nth k x 0) else 0))).
  2: { intros k _; unfold set_nth; rewrite nth_replace by lia.
       destruct (Nat.eqb_spec k j); ring. }
  rewrite rsum_map_plus.
  rewrite (rsum_pick_seq (fun k => nth k b 0 * (t - nth k x 0))) by lia.
  ring.
Qed.

(** ** The vector maps compute the per-pair formulas *)

Theorem rope_forward_nth_lo : forall h c s x i, (i < h)%nat ->
  nth i (rope_forward h c s x) 0
  = fst (rope_pair_forward (nth i c 0) (nth (i + h) c 0) (nth i s 0) (nth (i + h) s 0)
                           (nth i x 0) (nth (i + h) x 0)).
Proof. intros; unfold rope_forward; rewrite rope_nth_halves_lo by assumption; reflexivity. Qed.

Theorem rope_forward_nth_hi : forall h c s x i, (i < h)%nat ->
  nth (i + h) (rope_forward h c s x) 0
  = snd (rope_pair_forward (nth i c 0) (nth (i + h) c 0) (nth i s 0) (nth (i + h) s 0)
                           (nth i x 0) (nth (i + h) x 0)).
Proof. intros; unfold rope_forward; rewrite rope_nth_halves_hi by assumption; reflexivity. Qed.

Theorem rope_backward_nth_lo : forall h c s g i, (i < h)%nat ->
  nth i (rope_backward h c s g) 0
  = fst (rope_pair_backward (nth i c 0) (nth (i + h) c 0) (nth i s 0) (nth (i + h) s 0)
                            (nth i g 0) (nth (i + h) g 0)).
Proof. intros; unfold rope_backward; rewrite rope_nth_halves_lo by assumption; reflexivity. Qed.

Theorem rope_backward_nth_hi : forall h c s g i, (i < h)%nat ->
  nth (i + h) (rope_backward h c s g) 0
  = snd (rope_pair_backward (nth i c 0) (nth (i + h) c 0) (nth i s 0) (nth (i + h) s 0)
                            (nth i g 0) (nth (i + h) g 0)).
Proof. intros; unfold rope_backward; rewrite rope_nth_halves_hi by assumption; reflexivity. Qed.

Lemma rope_forward_length : forall h c s x, length (rope_forward h c s x) = (2 * h)%nat.
Proof. intros; apply rope_halves_length. Qed.

Lemma rope_backward_length : forall h c s g, length (rope_backward h c s g) = (2 * h)%nat.
Proof. intros; apply rope_halves_length. Qed.

(** ** The vector-Jacobian product *)

(** The adjoint identity: [<g, rope_forward x> = <rope_backward g, x>]. *)
Theorem rope_backward_eq_vjp : forall (h : nat) (c s x g : list R),
  length x = (2 * h)%nat -> length g = (2 * h)%nat ->
  dot R_ops g (rope_forward h c s x) = dot R_ops (rope_backward h c s g) x.
Proof.
  intros h c s x g Hx Hg.
  rewrite (rope_dot_halves g (rope_forward h c s x) h Hg (rope_forward_length h c s x)).
  rewrite (rope_dot_halves (rope_backward h c s g) x h (rope_backward_length h c s g) Hx).
  apply rsum_map_ext; intros i Hi; apply in_seq in Hi.
  rewrite rope_forward_nth_lo, rope_forward_nth_hi,
          rope_backward_nth_lo, rope_backward_nth_hi by lia.
  apply rope_pair_adjoint.
Qed.

(** The matrix of the forward: entry [(k, j)] is [d y_k / d x_j]. *)
Definition rope_matrix (h : nat) (c s : list R) (k j : nat) : R :=
  if Nat.ltb k h then
    (if Nat.eqb j k then nth k c 0 else if Nat.eqb j (k + h) then - nth k s 0 else 0)
  else
    (if Nat.eqb j k then nth k c 0 else if Nat.eqb (j + h) k then nth k s 0 else 0).

(** The forward is the linear map [y = M x] and the backward is
    [dx = M^T g], with [M = rope_matrix h c s]. *)
Theorem rope_backward_is_linear_transpose : forall (h : nat) (c s x g : list R),
  length x = (2 * h)%nat -> length g = (2 * h)%nat ->
  (forall k, (k < 2 * h)%nat ->
     nth k (rope_forward h c s x) 0
     = rsum (map (fun j => rope_matrix h c s k j * nth j x 0) (seq 0 (2 * h)))) /\
  (forall j, (j < 2 * h)%nat ->
     nth j (rope_backward h c s g) 0
     = rsum (map (fun k => rope_matrix h c s k j * nth k g 0) (seq 0 (2 * h)))).
Proof.
  intros h c s x g Hx Hg; unfold rope_matrix; split.
  - intros k Hk; destruct (Nat.ltb_spec k h) as [Hkh|Hkh].
    + rewrite rope_forward_nth_lo by exact Hkh; unfold rope_pair_forward; cbn [fst].
      rewrite (rsum_map_ext _ (fun j => (if Nat.eqb j k then nth j x 0 * nth k c 0 else 0)
                                      + (if Nat.eqb j (k + h) then - (nth j x 0 * nth k s 0) else 0))).
      2: { intros j Hj'; apply in_seq in Hj'; destruct (Nat.eqb_spec j k), (Nat.eqb_spec j (k + h)); try lia; ring. }
      rewrite rsum_map_plus, (rsum_pick_seq (fun j => nth j x 0 * nth k c 0)) by lia.
      rewrite (rsum_pick_seq (fun j => - (nth j x 0 * nth k s 0))) by lia.
      ring.
    + replace k with ((k - h) + h)%nat by lia.
      rewrite rope_forward_nth_hi by lia; unfold rope_pair_forward; cbn [snd].
      set (i := (k - h)%nat).
      rewrite (rsum_map_ext _ (fun j => (if Nat.eqb j (i + h) then nth j x 0 * nth (i + h) c 0 else 0)
                                      + (if Nat.eqb j i then nth j x 0 * nth (i + h) s 0 else 0))).
      2: { intros j Hj'; apply in_seq in Hj'; destruct (Nat.ltb_spec (i + h) h); [lia|].
           destruct (Nat.eqb_spec j (i + h)), (Nat.eqb_spec (j + h) (i + h)),
                    (Nat.eqb_spec j i); try lia; ring. }
      rewrite rsum_map_plus, (rsum_pick_seq (fun j => nth j x 0 * nth (i + h) c 0)) by lia.
      rewrite (rsum_pick_seq (fun j => nth j x 0 * nth (i + h) s 0)) by lia.
      ring.
  - intros j Hj; destruct (Nat.ltb_spec j h) as [Hjh|Hjh].
    + rewrite rope_backward_nth_lo by exact Hjh; unfold rope_pair_backward; cbn [fst].
      rewrite (rsum_map_ext _ (fun k => (if Nat.eqb k j then nth k c 0 * nth k g 0 else 0)
                                      + (if Nat.eqb k (j + h) then nth k s 0 * nth k g 0 else 0))).
      2: { intros k Hk'; apply in_seq in Hk'; destruct (Nat.ltb_spec k h), (Nat.eqb_spec j k), (Nat.eqb_spec j (k + h)),
                    (Nat.eqb_spec (j + h) k), (Nat.eqb_spec k j), (Nat.eqb_spec k (j + h));
           subst; try lia; ring. }
      rewrite rsum_map_plus, (rsum_pick_seq (fun k => nth k c 0 * nth k g 0)) by lia.
      rewrite (rsum_pick_seq (fun k => nth k s 0 * nth k g 0)) by lia.
      ring.
    + replace j with ((j - h) + h)%nat by lia.
      rewrite rope_backward_nth_hi by lia; unfold rope_pair_backward; cbn [snd].
      set (i := (j - h)%nat).
      rewrite (rsum_map_ext _ (fun k => (if Nat.eqb k (i + h) then nth k c 0 * nth k g 0 else 0)
                                      + (if Nat.eqb k i then - (nth k s 0 * nth k g 0) else 0))).
      2: { intros k Hk'; apply in_seq in Hk'; destruct (Nat.ltb_spec k h), (Nat.eqb_spec (i + h) k),
                    (Nat.eqb_spec (i + h) (k + h)), (Nat.eqb_spec (i + h + h) k),
                    (Nat.eqb_spec k (i + h)), (Nat.eqb_spec k i);
           subst; try lia; ring. }
      rewrite rsum_map_plus, (rsum_pick_seq (fun k => nth k c 0 * nth k g 0)) by lia.
      rewrite (rsum_pick_seq (fun k => - (nth k s 0 * nth k g 0))) by lia.
      ring.
Qed.

(** The backward is the gradient of [<g, rope_forward x>] with respect
    to [x], entry by entry: the vector-Jacobian product. *)
Theorem rope_backward_eq_gradient : forall (h : nat) (c s x g : list R) (j : nat),
  length x = (2 * h)%nat -> length g = (2 * h)%nat -> (j < 2 * h)%nat ->
  is_derive (fun t => dot R_ops g (rope_forward h c s (set_nth j t x))) (nth j x 0)
            (nth j (rope_backward h c s g) 0).
Proof.
  intros h c s x g j Hx Hg Hj.
  set (b := rope_backward h c s g).
  apply (is_derive_ext (fun t => dot R_ops b x - nth j b 0 * nth j x 0 + nth j b 0 * t)).
  - intros t; rewrite rope_backward_eq_vjp by (try rewrite set_nth_length; lia).
    symmetry; apply (rope_dot_set_nth b x (2 * h)); try assumption.
    apply rope_backward_length.
  - auto_derive; [exact I|ring].
Qed.
