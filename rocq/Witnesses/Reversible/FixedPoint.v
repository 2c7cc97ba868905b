(** * Witnesses of Reversible/FixedPoint.v (ojas_ref/verification/proof_audit.py): integer
    vectors of length 1, identity residual functions, one identity layer. *)

From Coq Require Import List ZArith.
From Ojas Require Import Reversible.Coupling Reversible.Stack Reversible.FixedPoint.
Import ListNotations.
Open Scope Z_scope.

(** The identity keeps every length. *)
Lemma w_id_keeps : forall n, keeps_length (T := Z) n (fun v => v).
Proof. intros n v H; exact H. Qed.

Definition fixed_point_inverse_exact_list_witness :=
  fixed_point_inverse_exact_list 1 (fun v => v) (fun v => v) [1] [2]
    (w_id_keeps 1) (w_id_keeps 1) eq_refl eq_refl.

Definition w_layer : coupling_layer (list Z) := mk_layer (fun v => v) (fun v => v).

Lemma w_keep : forall n, layers_keep_length n [w_layer].
Proof. intros n l [<- | []]; split; intros v H; exact H. Qed.

Definition fixed_point_stack_inverse_exact_list_witness :=
  fixed_point_stack_inverse_exact_list 1 [w_layer] [1] [2] (w_keep 1) eq_refl eq_refl.
