(** * Witnesses of InBackward/Repairs.v (ojas_ref/verification/proof_audit.py): the tape,
    parameters and SGD step of Witnesses/InBackward/Equivalence.v (a product and a square,
    the weight [w1] used twice), gradients in [R] with the squared norm [g * g] and the
    scaling [c * g]; clipping to the norm 1 over both parameters, and gradient accumulation
    over one earlier micro-batch of the same tape. *)

From Coq Require Import Reals List Lra.
From Ojas Require Import InBackward.Events InBackward.Equivalence InBackward.Repairs.
From Ojas Require Import Witnesses.InBackward.Equivalence.
Import ListNotations.
Open Scope R_scope.

Definition w_gnorm2 (g : R) : R := g * g.
Definition w_gscale (c g : R) : R := c * g.

Definition two_pass_clip_eq_standard_witness :=
  two_pass_clip_eq_standard Rplus w_update w_gnorm2 w_gscale [0%nat; 1%nat] 1 w_evs w_st (fun _ => eq_refl)
    (proj1 (backward_events_hypotheses w_tape)) (proj1 (proj2 (backward_events_hypotheses w_tape)))
    (proj2 (proj2 (backward_events_hypotheses w_tape))) 1.

Lemma w_last_hooked : forall q, existsb (contributes_to q) (concat [w_evs] ++ w_evs) = true ->
  existsb (is_hook q) w_evs = true.
Proof. intros [|[|q]] H; [reflexivity | reflexivity | vm_compute in H; discriminate]. Qed.

Definition deferred_accum_eq_standard_witness :=
  deferred_accum_eq_standard Rplus w_update [w_evs] w_evs w_st (fun _ => eq_refl) w_last_hooked
    (proj1 (proj2 (backward_events_hypotheses w_tape))) (proj2 (proj2 (backward_events_hypotheses w_tape))) 1.

Definition two_pass_clip_backprop_eq_standard_witness :=
  two_pass_clip_backprop_eq_standard Rplus w_update w_gnorm2 w_gscale [0%nat; 1%nat] 1 w_tape w_st
    (fun _ => eq_refl) 1.

Lemma w_last_contributes : forall q, existsb (contributes_to q) (concat (map backward_events [w_tape])) = true ->
  existsb (contributes_to q) (backward_events w_tape) = true.
Proof. intros q H; cbn [map concat] in H; rewrite app_nil_r in H; exact H. Qed.

Definition deferred_accum_backprop_eq_standard_witness :=
  deferred_accum_backprop_eq_standard Rplus w_update [w_tape] w_tape w_st (fun _ => eq_refl) w_last_contributes 1.
