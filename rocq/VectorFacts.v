(** * Coordinate-wise facts about list vectors over [R].

    Vectors are compared coordinate by coordinate ([nth c _ 0]), since
    [vadd] pads the shorter argument and list lengths carry no meaning
    beyond that.  [rsum] is the right-fold sum used to state the lemmas. *)

From Coq Require Import Reals List Lra Lia Arith Permutation.
From Ojas Require Import ScalarOps Vector.
Import ListNotations.
Open Scope R_scope.

(** Sum of a list of reals (right fold). *)
Definition rsum (xs : list R) : R := fold_right Rplus 0 xs.

(** Two vectors are equal coordinate by coordinate. *)
Definition veq (x y : list R) : Prop := forall c, nth c x 0 = nth c y 0.

(** Two attention rows (output vector, lse) agree: output coordinate-wise,
    lse exactly. *)
Definition row_eq (x y : list R * option R) : Prop :=
  veq (fst x) (fst y) /\ snd x = snd y.

(** ** Sums *)

Lemma rsum_nil : rsum [] = 0.
Proof. reflexivity. Qed.

Lemma rsum_cons : forall x xs, rsum (x :: xs) = x + rsum xs.
Proof. reflexivity. Qed.

Lemma rsum_app : forall xs ys, rsum (xs ++ ys) = rsum xs + rsum ys.
Proof.
  induction xs as [|x xs IH]; intros ys; simpl.
  - lra.
  - unfold rsum in *; simpl; rewrite IH; lra.
Qed.

Lemma fold_left_Rplus : forall xs a, fold_left Rplus xs a = a + rsum xs.
Proof.
  induction xs as [|x xs IH]; intros a; simpl.
  - lra.
  - rewrite IH; unfold rsum; simpl; lra.
Qed.

(** The left-to-right sum the code computes is the sum. *)
Lemma sc_sum_R : forall xs, sc_sum R_ops xs = rsum xs.
Proof. intros xs; unfold sc_sum; simpl; rewrite fold_left_Rplus; lra. Qed.

Lemma rsum_map_scal_l : forall {A} (k : R) (f : A -> R) (l : list A),
  rsum (map (fun x => k * f x) l) = k * rsum (map f l).
Proof.
  intros A k f l; induction l as [|x l IH]; simpl.
  - unfold rsum; simpl; lra.
  - unfold rsum in *; simpl; rewrite IH; lra.
Qed.

Lemma rsum_map_div : forall {A} (k : R) (f : A -> R) (l : list A),
  rsum (map (fun x => f x / k) l) = rsum (map f l) / k.
Proof.
  intros A k f l; induction l as [|x l IH]; simpl.
  - unfold rsum; simpl; unfold Rdiv; lra.
  - unfold rsum in *; simpl; rewrite IH; unfold Rdiv; lra.
Qed.

Lemma rsum_map_plus : forall {A} (f g : A -> R) (l : list A),
  rsum (map (fun x => f x + g x) l) = rsum (map f l) + rsum (map g l).
Proof.
  intros A f g l; induction l as [|x l IH]; simpl.
  - unfold rsum; simpl; lra.
  - unfold rsum in *; simpl; rewrite IH; lra.
Qed.

Lemma rsum_map_ext : forall {A} (f g : A -> R) (l : list A),
  (forall x, In x l -> f x = g x) -> rsum (map f l) = rsum (map g l).
Proof.
  intros A f g l H; rewrite (map_ext_in f g l H); reflexivity.
Qed.

Lemma rsum_map_zero : forall {A} (f : A -> R) (l : list A),
  (forall x, In x l -> f x = 0) -> rsum (map f l) = 0.
Proof.
  intros A f l H; induction l as [|x l IH]; simpl.
  - reflexivity.
  - unfold rsum in *; simpl; rewrite H by (left; reflexivity).
    rewrite IH by (intros y Hy; apply H; right; exact Hy); lra.
Qed.

(** The sum over [seq s n] of [f i] at [i = j] and 0 elsewhere is [f j]. *)
Lemma rsum_pick_seq : forall (f : nat -> R) n s j,
  (s <= j < s + n)%nat ->
  rsum (map (fun i => if Nat.eqb i j then f i else 0) (seq s n)) = f j.
Proof.
  intros f n; induction n as [|n IH]; intros s j Hj; [lia|].
  cbn [seq map]; rewrite rsum_cons.
  destruct (Nat.eqb_spec s j) as [->|Hne].
  - rewrite (rsum_map_zero _ _); [ring|].
    intros i Hi; apply in_seq in Hi; destruct (Nat.eqb_spec i j); [lia|reflexivity].
  - rewrite IH by lia; ring.
Qed.

(** Entry [j] of [map f (seq 0 n)] is [f j]. *)
Lemma nth_map_seq0 : forall (f : nat -> R) n j,
  (j < n)%nat -> nth j (map f (seq 0 n)) 0 = f j.
Proof.
  intros f n j Hj.
  rewrite (nth_indep _ 0 (f 0%nat)) by (rewrite map_length, seq_length; exact Hj).
  rewrite map_nth, seq_nth by exact Hj; reflexivity.
Qed.

Lemma rsum_nonneg : forall xs, (forall x, In x xs -> 0 <= x) -> 0 <= rsum xs.
Proof.
  induction xs as [|x xs IH]; intros H; unfold rsum in *; simpl.
  - lra.
  - assert (0 <= x) by (apply H; left; reflexivity).
    assert (0 <= fold_right Rplus 0 xs) by (apply IH; intros y Hy; apply H; right; exact Hy).
    lra.
Qed.

(** A sum of nonnegative terms one of which is positive is positive. *)
Lemma rsum_pos : forall xs x,
  (forall y, In y xs -> 0 <= y) -> In x xs -> 0 < x -> 0 < rsum xs.
Proof.
  induction xs as [|y xs IH]; intros x H Hin Hx; [destruct Hin|].
  rewrite rsum_cons; destruct Hin as [<-|Hin].
  - assert (0 <= rsum xs) by (apply rsum_nonneg; intros z Hz; apply H; right; exact Hz).
    lra.
  - assert (0 <= y) by (apply H; left; reflexivity).
    assert (0 < rsum xs) by (apply (IH x); auto; intros z Hz; apply H; right; exact Hz).
    lra.
Qed.

(** The sum does not depend on the order of the terms. *)
Lemma rsum_perm : forall xs ys, Permutation xs ys -> rsum xs = rsum ys.
Proof.
  intros xs ys H; induction H; unfold rsum in *; simpl; lra.
Qed.

(** ** Lists *)

Lemma combine_map_map : forall {A B C} (f : A -> B) (g : A -> C) (l : list A),
  combine (map f l) (map g l) = map (fun x => (f x, g x)) l.
Proof.
  intros A B C f g l; induction l as [|x l IH]; simpl; [reflexivity|].
  rewrite IH; reflexivity.
Qed.

Lemma combine_map_l : forall {A B C} (f : A -> C) (l : list A) (l' : list B),
  combine (map f l) l' = map (fun p => (f (fst p), snd p)) (combine l l').
Proof.
  intros A B C f l; induction l as [|x l IH]; intros [|y l']; simpl; try reflexivity.
  rewrite IH; reflexivity.
Qed.

(** ** Coordinates of the vector operations *)

Lemma nth_vadd : forall a b c,
  nth c (vadd R_ops a b) 0 = nth c a 0 + nth c b 0.
Proof.
  induction a as [|x a IH]; intros b c; simpl.
  - destruct c; lra.
  - destruct b as [|y b].
    + destruct c; simpl; lra.
    + destruct c; simpl; [reflexivity|]. apply IH.
Qed.

Lemma nth_vscale : forall k a c, nth c (vscale R_ops k a) 0 = k * nth c a 0.
Proof.
  intros k a; unfold vscale; induction a as [|x a IH]; intros c; simpl.
  - destruct c; lra.
  - destruct c; [reflexivity|]. apply IH.
Qed.

Lemma nth_vdiv : forall a k c, nth c (vdiv R_ops a k) 0 = nth c a 0 / k.
Proof.
  intros a k; unfold vdiv; induction a as [|x a IH]; intros c; simpl.
  - destruct c; unfold Rdiv; lra.
  - destruct c; [reflexivity|]. apply IH.
Qed.

Lemma nth_vzero : forall d c, nth c (vzero R_ops d) 0 = 0.
Proof.
  intros d c; unfold vzero; simpl; revert c; induction d as [|d IH]; intros c; simpl.
  - destruct c; reflexivity.
  - destruct c; [reflexivity|]. apply IH.
Qed.

Lemma nth_weighted_sum_acc : forall wvs acc c,
  nth c (fold_left (fun acc wv => vadd R_ops acc (vscale R_ops (fst wv) (snd wv))) wvs acc) 0
  = nth c acc 0 + rsum (map (fun wv => fst wv * nth c (snd wv) 0) wvs).
Proof.
  induction wvs as [|wv wvs IH]; intros acc c; simpl.
  - unfold rsum; simpl; lra.
  - rewrite IH, nth_vadd, nth_vscale; unfold rsum; simpl; lra.
Qed.

(** Coordinate [c] of [sum_j w_j * v_j] is [sum_j w_j * v_j[c]]. *)
Lemma nth_weighted_sum : forall ws vs c,
  nth c (weighted_sum R_ops ws vs) 0
  = rsum (map (fun wv => fst wv * nth c (snd wv) 0) (combine ws vs)).
Proof.
  intros ws vs c; unfold weighted_sum; rewrite nth_weighted_sum_acc.
  destruct c; simpl; lra.
Qed.

(** The weighted sum of a list of weighted items, coordinate-wise. *)
Lemma nth_weighted_sum_map : forall {A} (w : A -> R) (v : A -> list R) (l : list A) c,
  nth c (weighted_sum R_ops (map w l) (map v l)) 0
  = rsum (map (fun x => w x * nth c (v x) 0) l).
Proof.
  intros A w v l c; rewrite nth_weighted_sum, combine_map_map, map_map; reflexivity.
Qed.

(** The dot product is the sum of the coordinate products. *)
Lemma dot_R : forall a b,
  dot R_ops a b = rsum (map (fun xy => fst xy * snd xy) (combine a b)).
Proof.
  induction a as [|x a IH]; intros [|y b]; simpl; try reflexivity.
  rewrite IH; reflexivity.
Qed.

(** ** [veq] and [row_eq] are equivalences *)

Lemma veq_refl : forall x, veq x x.
Proof. intros x c; reflexivity. Qed.

Lemma veq_sym : forall x y, veq x y -> veq y x.
Proof. intros x y H c; symmetry; apply H. Qed.

Lemma veq_trans : forall x y z, veq x y -> veq y z -> veq x z.
Proof. intros x y z H1 H2 c; rewrite H1; apply H2. Qed.

Lemma row_eq_refl : forall x, row_eq x x.
Proof. intros x; split; [apply veq_refl | reflexivity]. Qed.

Lemma row_eq_sym : forall x y, row_eq x y -> row_eq y x.
Proof. intros x y [H1 H2]; split; [apply veq_sym; exact H1 | symmetry; exact H2]. Qed.

Lemma row_eq_trans : forall x y z, row_eq x y -> row_eq y z -> row_eq x z.
Proof.
  intros x y z [H1 H2] [H3 H4]; split; [eapply veq_trans; eassumption | congruence].
Qed.

(** ** Length-aware comparison: [veq_len], [row_eq_len]

    [veq] compares [nth c _ 0] only, so it ignores lengths: [veq [] [0; 0]]
    holds ([veq_ignores_length]).  [veq_len] adds [length x = length y]; it
    is then plain list equality ([veq_len_iff_eq]), and [row_eq_len] is
    plain pair equality ([row_eq_len_iff_eq]).  A [row_eq] theorem becomes
    a [row_eq_len] one (an equality) once the lengths agree
    ([row_eq_len_of_row_eq]). *)

Definition veq_len (x y : list R) : Prop := length x = length y /\ veq x y.

Definition row_eq_len (x y : list R * option R) : Prop :=
  length (fst x) = length (fst y) /\ row_eq x y.

Lemma veq_ignores_length : veq [] [0; 0] /\ length (@nil R) <> length [0; 0].
Proof.
  split; [intros [|[|[|c]]]; reflexivity | discriminate].
Qed.

Lemma veq_len_iff_eq : forall x y, veq_len x y <-> x = y.
Proof.
  intros x y; split.
  - intros [Hl Hv]; apply nth_ext with (d := 0) (d' := 0); [exact Hl |].
    intros c _; apply Hv.
  - intros <-; split; [reflexivity | apply veq_refl].
Qed.

Lemma row_eq_len_iff_eq : forall x y, row_eq_len x y <-> x = y.
Proof.
  intros [x1 x2] [y1 y2]; unfold row_eq_len, row_eq; cbn [fst snd]; split.
  - intros [Hl [Hv Hs]]; pose proof (proj1 (veq_len_iff_eq x1 y1) (conj Hl Hv)) as E.
    congruence.
  - intros E; injection E as <- <-; split; [reflexivity | split; [apply veq_refl | reflexivity]].
Qed.

Lemma veq_len_veq : forall x y, veq_len x y -> veq x y.
Proof. intros x y [_ H]; exact H. Qed.

Lemma row_eq_len_row_eq : forall x y, row_eq_len x y -> row_eq x y.
Proof. intros x y [_ H]; exact H. Qed.

Lemma veq_len_of_veq : forall x y, veq x y -> length x = length y -> veq_len x y.
Proof. intros x y H1 H2; split; assumption. Qed.

Lemma row_eq_len_of_row_eq : forall x y,
  row_eq x y -> length (fst x) = length (fst y) -> row_eq_len x y.
Proof. intros x y H1 H2; split; assumption. Qed.

Lemma veq_len_refl : forall x, veq_len x x.
Proof. intros x; apply veq_len_iff_eq; reflexivity. Qed.

Lemma veq_len_sym : forall x y, veq_len x y -> veq_len y x.
Proof. intros x y H; apply veq_len_iff_eq; symmetry; apply veq_len_iff_eq, H. Qed.

Lemma veq_len_trans : forall x y z, veq_len x y -> veq_len y z -> veq_len x z.
Proof.
  intros x y z H1 H2; apply veq_len_iff_eq.
  rewrite (proj1 (veq_len_iff_eq _ _) H1); apply veq_len_iff_eq, H2.
Qed.

Lemma row_eq_len_refl : forall x, row_eq_len x x.
Proof. intros x; apply row_eq_len_iff_eq; reflexivity. Qed.

Lemma row_eq_len_sym : forall x y, row_eq_len x y -> row_eq_len y x.
Proof. intros x y H; apply row_eq_len_iff_eq; symmetry; apply row_eq_len_iff_eq, H. Qed.

Lemma row_eq_len_trans : forall x y z, row_eq_len x y -> row_eq_len y z -> row_eq_len x z.
Proof.
  intros x y z H1 H2; apply row_eq_len_iff_eq.
  rewrite (proj1 (row_eq_len_iff_eq _ _) H1); apply row_eq_len_iff_eq, H2.
Qed.
