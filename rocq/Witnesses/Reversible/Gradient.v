(** * Witnesses of Reversible/Gradient.v (ojas_ref/verification/proof_audit.py): layers
    [x |-> x + 1] over [R] (inverted by [y |-> y - 1]) with the identity as local backward,
    coupling stacks over [R_group] of one layer of identity residual functions, and
    [f = g = id] (derivative 1) for the coupling's vector-Jacobian product. *)

From Coq Require Import Reals List Lra.
From Coquelicot Require Import Coquelicot.
From Ojas Require Import Reversible.Coupling Reversible.Stack Reversible.Gradient.
Import ListNotations.
Open Scope R_scope.

Definition w_apply (_ : unit) (x : R) : R := x + 1.
Definition w_invert (_ : unit) (y : R) : R := y - 1.
Definition w_vjp (_ : unit) (_ : R) (d : R) : R * unit := (d, tt).

Lemma w_invert_apply : forall l x, w_invert l (w_apply l x) = x.
Proof. intros; unfold w_invert, w_apply; ring. Qed.

Definition backprop_reversible_correct_witness :=
  backprop_reversible_correct w_apply w_invert w_vjp w_invert_apply [tt; tt] 0 1.

Definition backprop_reversible_layerwise_witness :=
  backprop_reversible_layerwise w_apply w_invert w_vjp w_invert_apply [tt] [tt] 0 1.

Definition w_layer : coupling_layer R := mk_layer (fun x => x) (fun x => x).
Definition w_cvjp (_ : coupling_layer R) (_ : R * R) (d : R * R) : (R * R) * unit := (d, tt).

Definition backprop_coupling_witness :=
  backprop_coupling R_group R_group_laws w_cvjp [w_layer] (1, 2) (1, 1).

Definition backprop_coupling_R_witness := backprop_coupling_R w_cvjp [w_layer] (1, 2) (1, 1).

Definition w_v (_ : coupling_layer R) (_ : R) (d : R) : R * unit := (d, tt).

Definition coupling_stack_backward_correct_witness :=
  coupling_stack_backward_correct R_group R_group_laws w_v w_v [w_layer] (1, 2) (1, 1).

Definition coupling_vjp_derive_witness :=
  coupling_vjp_derive (fun t => t) (fun t => t) (fun _ => 1) (fun _ => 1) 1 2 1 1
    (fun t => is_derive_id t) (fun t => is_derive_id t).
