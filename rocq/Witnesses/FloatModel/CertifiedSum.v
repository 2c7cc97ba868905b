(** * Witnesses of FloatModel/CertifiedSum.v (ojas_ref/verification/proof_audit.py): binary64,
    the one-leaf tree of the number [0] ([Leaf 0], [FLeaf 0]). *)

From Coq Require Import Reals List Lra Lia.
From Flocq Require Import Core.
From Ojas Require Import FloatModel.MixedPrecision FloatModel.BlockedSum FloatModel.CertifiedSum.
Import ListNotations.
Open Scope R_scope.

Lemma w_fmt0 : forall F, Forall (ff_fmt F) (leaves (Leaf 0)).
Proof. intros F; repeat constructor; apply ff_fmt_0. Qed.

Lemma w_nonneg0 : Forall (fun x => 0 <= x) (leaves (Leaf 0)).
Proof. repeat constructor; lra. Qed.

Lemma w_nnz0 : (nnz (Leaf 0) <= 1)%nat.
Proof. pose proof (nnz_le_length (Leaf 0)); cbn [leaves length] in *; lia. Qed.

Lemma w_small : forall F, INR (1 - 1) * ff_u F < 1.
Proof. intros F; simpl; lra. Qed.

Lemma w_small0 : forall F, INR 0 * ff_u F < 1.
Proof. intros F; simpl; lra. Qed.

Lemma w_small64 : INR (1 - 1) * / 9007199254740992 < 1.
Proof. simpl; lra. Qed.

Lemma w_small64_0 : INR 0 * / 9007199254740992 < 1.
Proof. simpl; lra. Qed.

Lemma w_fleaves0 : forall x, In x (fleaves (FLeaf 0)) -> 0 <= x.
Proof. intros x [<- | []]; lra. Qed.

Definition tree_sum_nonneg_bracket_witness :=
  tree_sum_nonneg_bracket fp64 (Leaf 0) (w_fmt0 fp64) w_nonneg0.

Definition tree_sum_nonneg_upper_witness :=
  tree_sum_nonneg_upper fp64 1 (Leaf 0) (w_fmt0 fp64) w_nonneg0 w_nnz0 (w_small fp64).

Definition tree_sum_nonneg_lower_witness :=
  tree_sum_nonneg_lower fp64 1 (Leaf 0) (w_fmt0 fp64) w_nonneg0 w_nnz0.

Definition ftree_error_bound_witness :=
  ftree_error_bound fp64 0 0 (FLeaf 0) (le_n 0) (le_n 0) (w_small0 fp64).

Definition ftree_nonneg_upper_witness :=
  ftree_nonneg_upper fp64 0 0 (FLeaf 0) (le_n 0) (le_n 0) (w_small0 fp64) w_fleaves0.

Definition fp64_tree_sum_nonneg_upper_witness :=
  fp64_tree_sum_nonneg_upper 1 (Leaf 0) (w_fmt0 fp64) w_nonneg0 w_nnz0 w_small64.

Definition fp64_ftree_error_bound_witness :=
  fp64_ftree_error_bound 0 0 (FLeaf 0) (le_n 0) (le_n 0) w_small64_0.
