(** * Witnesses of InBackward/Buckets.v (ojas_ref/verification/proof_audit.py): the tape,
    parameters, stores and SGD step of Witnesses/InBackward/Equivalence.v (a product and a
    square, the weight [w1] used twice), with [InBackwardOptimizer]'s rule [cap_flush]: one
    group, gradients of 4 bytes, a cap of 8 bytes (the first hooked parameter waits for the
    second, then both are flushed). *)

From Coq Require Import Reals List.
From Ojas Require Import InBackward.Events InBackward.Equivalence InBackward.Buckets.
From Ojas Require Import Witnesses.InBackward.Equivalence.
Import ListNotations.
Open Scope R_scope.

Definition w_choose : list nat -> list nat := cap_flush (fun _ => 0%nat) (fun _ => 4%nat) 8.

Definition fused_is_flush_every_hook_witness := fused_is_flush_every_hook Rplus w_update w_evs w_st.

Definition bucketed_eq_standard_from_witness :=
  bucketed_eq_standard_from Rplus w_update w_choose w_evs w_st_acc w_hooked
    (proj1 (proj2 (backward_events_hypotheses w_tape))) (proj2 (proj2 (backward_events_hypotheses w_tape))) 1.

Definition bucketed_eq_standard_witness :=
  bucketed_eq_standard Rplus w_update w_choose w_evs w_st (fun _ => eq_refl)
    (proj1 (backward_events_hypotheses w_tape)) (proj1 (proj2 (backward_events_hypotheses w_tape)))
    (proj2 (proj2 (backward_events_hypotheses w_tape))) 1.

Definition backprop_bucketed_eq_standard_witness :=
  backprop_bucketed_eq_standard Rplus w_update w_choose w_tape w_st (fun _ => eq_refl) 1.

Definition backprop_cap_bucketed_eq_standard_witness :=
  backprop_cap_bucketed_eq_standard Rplus w_update (fun _ => 0%nat) (fun _ => 4%nat) 8 w_tape w_st
    (fun _ => eq_refl) 1.
