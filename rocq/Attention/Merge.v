(** * Merging two partial streaming states (split-K / tiling).

    Two states computed over disjoint sets of keys of the same query row
    are combined by rescaling both to the larger max:

      m   = max m1 m2
      l   = exp (m1 - m) l1 + exp (m2 - m) l2
      acc = exp (m1 - m) acc1 + exp (m2 - m) acc2

    [None] (no unmasked key yet) is the identity.  [merge] is written over
    an abstract [ScalarOps] so that it is extracted with the rest; the
    theorems are over [R].  States are compared with [st_eq]: same max,
    same sum, same accumulator coordinate by coordinate.  *)

From Coq Require Import Reals List Lra Permutation.
From Ojas Require Import ScalarOps Vector VectorFacts Attention.OnlineSoftmax
  Attention.StreamCorrect.
Import ListNotations.
Open Scope R_scope.

Section Merge.
Context {T : Type} (o : ScalarOps T).

(** Combine the states of two disjoint sets of keys of one query row. *)
Definition merge (a b : option (state T)) : option (state T) :=
  match a, b with
  | None, _ => b
  | _, None => a
  | Some s1, Some s2 =>
      let m := sc_max o (st_max s1) (st_max s2) in
      let a1 := sc_exp o (sc_sub o (st_max s1) m) in
      let a2 := sc_exp o (sc_sub o (st_max s2) m) in
      Some (mk_state m
              (sc_add o (sc_mul o a1 (st_sum s1)) (sc_mul o a2 (st_sum s2)))
              (vadd o (vscale o a1 (st_acc s1)) (vscale o a2 (st_acc s2))))
  end.

End Merge.

(** ** Equality of states *)

(** Two streaming states are the same: both empty, or the same max, the
    same sum and the same accumulator (coordinate-wise). *)
Definition st_eq (a b : option (state R)) : Prop :=
  match a, b with
  | None, None => True
  | Some x, Some y =>
      st_max x = st_max y /\ st_sum x = st_sum y /\ veq (st_acc x) (st_acc y)
  | _, _ => False
  end.

Lemma st_eq_refl : forall a, st_eq a a.
Proof. intros [a|]; simpl; auto using veq_refl. Qed.

Lemma st_eq_sym : forall a b, st_eq a b -> st_eq b a.
Proof.
  intros [a|] [b|]; simpl; auto.
  intros (H1 & H2 & H3); auto using veq_sym.
Qed.

Lemma st_eq_trans : forall a b c, st_eq a b -> st_eq b c -> st_eq a c.
Proof.
  intros [a|] [b|] [c|]; simpl; try tauto.
  intros (H1 & H2 & H3) (H4 & H5 & H6); split; [congruence|split; [congruence|]].
  eapply veq_trans; eassumption.
Qed.

(** Equal states finalise to the same output and lse. *)
Theorem finalize_st_eq : forall d a b,
  st_eq a b -> row_eq (finalize R_ops d a) (finalize R_ops d b).
Proof.
  intros d [a|] [b|] H; simpl in H; try contradiction.
  - destruct H as (H1 & H2 & H3); split; cbn [finalize fst snd].
    + intros c; rewrite !nth_vdiv, H2, H3; reflexivity.
    + rewrite H1, H2; reflexivity.
  - apply row_eq_refl.
Qed.

(** Two states that represent the same keys are equal. *)
Lemma represents_st_eq : forall a b keys,
  represents a keys -> represents b keys -> st_eq a b.
Proof.
  intros [a|] [b|] keys Ha Hb; simpl in *;
    [|destruct Ha as (Ha1 & _); congruence|destruct Hb as (Hb1 & _); congruence|exact I].
  destruct Ha as (Ha1 & Ha2 & Ha3), Hb as (Hb1 & Hb2 & Hb3).
  assert (E : st_max a = st_max b) by congruence.
  split; [exact E|split].
  - rewrite Ha2, Hb2, E; reflexivity.
  - intros c; rewrite Ha3, Hb3, E; reflexivity.
Qed.

(** ** Algebra of [merge] *)

Lemma merge_Some : forall s1 s2,
  merge R_ops (Some s1) (Some s2) =
  let m := Rmax (st_max s1) (st_max s2) in
  Some (mk_state m
          (exp (st_max s1 - m) * st_sum s1 + exp (st_max s2 - m) * st_sum s2)
          (vadd R_ops (vscale R_ops (exp (st_max s1 - m)) (st_acc s1))
                      (vscale R_ops (exp (st_max s2 - m)) (st_acc s2)))).
Proof. intros s1 s2; unfold merge; rewrite R_max_eq; reflexivity. Qed.

(** [None] is a left identity of [merge]. *)
Theorem merge_None_l : forall a, merge R_ops None a = a.
Proof. intros [a|]; reflexivity. Qed.

(** [None] is a right identity of [merge]. *)
Theorem merge_None_r : forall a, merge R_ops a None = a.
Proof. intros [a|]; reflexivity. Qed.

(** [merge] is commutative. *)
Theorem merge_comm : forall a b, st_eq (merge R_ops a b) (merge R_ops b a).
Proof.
  intros [a|] [b|]; try apply st_eq_refl.
  rewrite !merge_Some; cbn zeta; simpl; rewrite (Rmax_comm (st_max b)).
  split; [reflexivity|split; [ring|]].
  intros c; rewrite !nth_vadd, !nth_vscale; ring.
Qed.

Lemma exp_minus : forall x y, exp (x - y) = exp x / exp y.
Proof.
  intros x y; unfold Rminus, Rdiv; rewrite exp_plus, exp_Ropp; reflexivity.
Qed.

(** [merge] is associative. *)
Theorem merge_assoc : forall a b c,
  st_eq (merge R_ops a (merge R_ops b c)) (merge R_ops (merge R_ops a b) c).
Proof.
  intros [a|] [b|] [c|]; rewrite ?merge_None_l, ?merge_None_r; try apply st_eq_refl.
  rewrite !merge_Some; cbn zeta; simpl.
  rewrite Rmax_assoc.
  set (M := Rmax (Rmax (st_max a) (st_max b)) (st_max c)).
  pose proof (exp_pos (st_max a)); pose proof (exp_pos (st_max b));
  pose proof (exp_pos (st_max c)); pose proof (exp_pos M);
  pose proof (exp_pos (Rmax (st_max b) (st_max c)));
  pose proof (exp_pos (Rmax (st_max a) (st_max b))).
  split; [reflexivity|split].
  - rewrite !exp_minus; field; lra.
  - intros k; rewrite !nth_vadd, !nth_vscale, !nth_vadd, !nth_vscale, !exp_minus.
    field; lra.
Qed.

(** [merge] respects equality of states. *)
Lemma merge_st_eq : forall a a' b b',
  st_eq a a' -> st_eq b b' -> st_eq (merge R_ops a b) (merge R_ops a' b').
Proof.
  intros [a|] [a'|] [b|] [b'|] Ha Hb; simpl in Ha, Hb; try contradiction;
    rewrite ?merge_None_l, ?merge_None_r; simpl; auto.
  destruct Ha as (Ha1 & Ha2 & Ha3), Hb as (Hb1 & Hb2 & Hb3).
  rewrite Ha1, Ha2, Hb1, Hb2; split; [reflexivity|split; [reflexivity|]].
  intros c; rewrite !nth_vadd, !nth_vscale, Ha3, Hb3; reflexivity.
Qed.

(** ** [merge] and the streaming recurrence *)

(** Merging the states of two sets of keys gives the state of their union. *)
Theorem merge_represents : forall a b k1 k2,
  represents a k1 -> represents b k2 -> represents (merge R_ops a b) (k1 ++ k2).
Proof.
  intros [a|] [b|] k1 k2 Ha Hb.
  - rewrite merge_Some; cbn zeta; simpl in *.
    destruct Ha as (Ha1 & Ha2 & Ha3), Hb as (Hb1 & Hb2 & Hb3).
    rewrite block_max_app, Ha1, Hb1, omax_Some; split; [reflexivity|split].
    + rewrite kw_sum_app, Ha2, Hb2, <- !kw_sum_shift; reflexivity.
    + intros c; rewrite nth_vadd, !nth_vscale, Ha3, Hb3, kw_acc_app, <- !kw_acc_shift;
        reflexivity.
  - rewrite merge_None_r; apply represents_app_masked; assumption.
  - rewrite merge_None_l; apply (represents_perm _ (k2 ++ k1));
      [apply Permutation_app_comm|apply represents_app_masked; assumption].
  - simpl in *; rewrite block_max_app, Ha, Hb; reflexivity.
Qed.

(** One tile of the streaming recurrence is a merge with the state of the tile. *)
Theorem block_step_merge : forall st blk,
  st_eq (block_step R_ops st blk) (merge R_ops st (stream R_ops [blk])).
Proof.
  intros [s|] blk; [|rewrite merge_None_l; apply st_eq_refl].
  unfold stream; cbn [fold_left]; unfold block_step; cbn [option_map].
  rewrite omax_None_l.
  change (sc_exp R_ops) with exp; change (sc_sub R_ops) with Rminus;
  change (sc_mul R_ops) with Rmult; change (sc_add R_ops) with Rplus.
  destruct (block_max R_ops blk) as [b|] eqn:Eb.
  - rewrite omax_Some, merge_Some; cbn zeta; simpl.
    split; [reflexivity|split].
    + rewrite !sc_sum_R; fold (kw_sum (Rmax (st_max s) b) blk) (kw_sum b blk).
      rewrite (kw_sum_shift b (Rmax (st_max s) b)); reflexivity.
    + intros c; rewrite !nth_vadd, !nth_vscale, !nth_weighted_sum_map.
      fold (kw_acc (Rmax (st_max s) b) blk c) (kw_acc b blk c).
      rewrite (kw_acc_shift b (Rmax (st_max s) b)); reflexivity.
  - rewrite merge_None_r; simpl.
    rewrite Rminus_diag_eq, exp_0 by reflexivity.
    split; [reflexivity|split].
    + rewrite sc_sum_R; fold (kw_sum (st_max s) blk); rewrite kw_sum_None by exact Eb.
      ring.
    + intros c; rewrite nth_vadd, nth_vscale, nth_weighted_sum_map.
      fold (kw_acc (st_max s) blk c); rewrite kw_acc_None by exact Eb; ring.
Qed.

(** Streaming [b1 ++ b2] is merging the streams of [b1] and of [b2]
    (split-K over two halves). *)
Theorem stream_app_merge : forall b1 b2,
  st_eq (stream R_ops (b1 ++ b2)) (merge R_ops (stream R_ops b1) (stream R_ops b2)).
Proof.
  intros b1 b2; apply (represents_st_eq _ _ (concat (b1 ++ b2))).
  - apply stream_represents.
  - rewrite concat_app; apply merge_represents; apply stream_represents.
Qed.

Lemma Permutation_concat_lists : forall {A} (l l' : list (list A)),
  Permutation l l' -> Permutation (concat l) (concat l').
Proof.
  intros A l l' H; induction H; simpl.
  - constructor.
  - apply Permutation_app_head; exact IHPermutation.
  - rewrite !app_assoc; apply Permutation_app_tail, Permutation_app_comm.
  - eapply Permutation_trans; eassumption.
Qed.

Lemma fold_merge_represents : forall blocks st keys,
  represents st keys ->
  represents (fold_left (merge R_ops) (map (fun b => stream R_ops [b]) blocks) st)
             (keys ++ concat blocks).
Proof.
  induction blocks as [|blk blocks IH]; intros st keys H; simpl.
  - rewrite app_nil_r; exact H.
  - rewrite app_assoc; apply IH, merge_represents; [exact H|].
    pose proof (stream_represents [blk]) as Hs; simpl in Hs; rewrite app_nil_r in Hs.
    exact Hs.
Qed.

(** Split-K: computing one state per key tile and merging them, in any
    order of the tiles, gives the two-pass softmax of all the keys. *)
Theorem merge_blocks_correct : forall d blocks blocks',
  Permutation blocks blocks' ->
  row_eq (finalize R_ops d (fold_left (merge R_ops) (map (fun b => stream R_ops [b]) blocks') None))
         (two_pass R_ops d (concat blocks)).
Proof.
  intros d blocks blocks' Hp; apply finalize_represents.
  apply (represents_perm _ (concat blocks')).
  - apply Permutation_concat_lists, Permutation_sym, Hp.
  - apply (fold_merge_represents blocks' None []), represents_nil.
Qed.
