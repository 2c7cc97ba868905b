(** * Witnesses of DotError.v (ojas_ref/verification/proof_audit.py): exact arithmetic
    (the rounding the identity, [u = 0]) and the empty dot product. *)

From Coq Require Import Reals List Lra.
From Ojas Require Import FloatModel.DotError.
Import ListNotations.
Open Scope R_scope.

Lemma w_id_rel : forall x : R, Rabs (x - x) <= 0 * Rabs x.
Proof. intros x; rewrite Rminus_diag_eq, Rabs_R0 by reflexivity; lra. Qed.

Definition dot_error_bound_witness :=
  dot_error_bound (fun x => x) (fun x => x) (fun x => x) 0 (Rle_refl 0) w_id_rel (fun x => eq_refl) [] [] eq_refl
    ltac:(simpl; lra).
