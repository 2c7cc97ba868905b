(** * Witnesses of Reversible/Stack.v (ojas_ref/verification/proof_audit.py): exact real
    arithmetic ([R_group]), one layer of identity residual functions (one leapfrog step
    with identity kick and drift), scalars [(1, 2)] and vectors of length 1. *)

From Coq Require Import Reals List.
From Ojas Require Import Reversible.Coupling Reversible.Stack.
Import ListNotations.
Open Scope R_scope.

Definition w_layer : coupling_layer R := mk_layer (fun x => x) (fun x => x).
Definition w_vlayer : coupling_layer (list R) := mk_layer (fun v => v) (fun v => v).

Definition stack_inverse_forward_witness :=
  stack_inverse_forward R_group R_group_laws [w_layer] (1, 2).

Definition stack_forward_inverse_witness :=
  stack_forward_inverse R_group R_group_laws [w_layer] (1, 2).

Definition leapfrog_inverse_steps_witness :=
  leapfrog_inverse_steps R_group R_group_laws 1 (fun x => x) (fun x => x) (1, 2).

(** The identity layer keeps every length. *)
Lemma w_keep : forall n, layers_keep_length n [w_vlayer].
Proof. intros n l [<- | []]; split; intros v H; exact H. Qed.

Definition stack_inverse_forward_list_witness :=
  stack_inverse_forward_list R_group R_group_laws 1 [w_vlayer] [1] [2] (w_keep 1) eq_refl eq_refl.

Definition stack_forward_inverse_list_witness :=
  stack_forward_inverse_list R_group R_group_laws 1 [w_vlayer] [1] [2] (w_keep 1) eq_refl eq_refl.
