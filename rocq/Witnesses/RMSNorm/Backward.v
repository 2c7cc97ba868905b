(** * Witnesses of RMSNorm/Backward.v (ojas_ref/verification/proof_audit.py): [eps = 1], one
    coordinate. *)

From Coq Require Import Reals List Lra Lia.
From Ojas Require Import RMSNorm.Backward.
Import ListNotations.
Open Scope R_scope.

Definition rms_norm_is_derive_x_witness := rms_norm_is_derive_x 1 [1] [0] 0 0 Rlt_0_1 ltac:(cbn; lia).

Definition rms_norm_backward_eq_vjp_witness := rms_norm_backward_eq_vjp 1 [1] [0] [0] Rlt_0_1 eq_refl.

Definition rms_norm_offset_is_derive_x_witness :=
  rms_norm_offset_is_derive_x 1 [1] [0] 0 0 Rlt_0_1 ltac:(cbn; lia).

Definition rms_norm_offset_backward_eq_vjp_witness :=
  rms_norm_offset_backward_eq_vjp 1 [1] [0] [0] Rlt_0_1 eq_refl.
