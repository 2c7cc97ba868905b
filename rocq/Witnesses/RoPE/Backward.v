(** * Witnesses of RoPE/Backward.v (ojas_ref/verification/proof_audit.py): one rotated pair
    ([h = 1]). *)

From Coq Require Import Reals List Lia.
From Ojas Require Import RoPE.Backward.
Import ListNotations.
Open Scope R_scope.

Definition rope_forward_nth_lo_witness := rope_forward_nth_lo 1 [1] [0] [0; 0] 0 ltac:(lia).
Definition rope_forward_nth_hi_witness := rope_forward_nth_hi 1 [1] [0] [0; 0] 0 ltac:(lia).
Definition rope_backward_nth_lo_witness := rope_backward_nth_lo 1 [1] [0] [0; 0] 0 ltac:(lia).
Definition rope_backward_nth_hi_witness := rope_backward_nth_hi 1 [1] [0] [0; 0] 0 ltac:(lia).
Definition rope_backward_eq_vjp_witness := rope_backward_eq_vjp 1 [1] [0] [0; 0] [0; 0] eq_refl eq_refl.
Definition rope_backward_is_linear_transpose_witness :=
  rope_backward_is_linear_transpose 1 [1] [0] [0; 0] [0; 0] eq_refl eq_refl.
Definition rope_backward_eq_gradient_witness :=
  rope_backward_eq_gradient 1 [1] [0] [0; 0] [0; 0] 0 eq_refl eq_refl ltac:(lia).
