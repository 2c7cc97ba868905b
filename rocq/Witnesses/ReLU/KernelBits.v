(** * Witnesses of ReLU/KernelBits.v (ojas_ref/verification/proof_audit.py): float32
    ([mw = 23], [ew = 8]), the bit patterns of [1.0] (0x3F800000) as input and of [2.0]
    (0x40000000) as gradient. *)

From Coq Require Import ZArith List Lia.
From Ojas Require Import ReLU.KernelBits.
Import ListNotations.
Open Scope Z_scope.

Lemma w_mw : 0 < 23. Proof. reflexivity. Qed.
Lemma w_ew : 0 < 8. Proof. reflexivity. Qed.
Lemma w_max : 23 + 1 < 2 ^ (8 - 1). Proof. reflexivity. Qed.

(** [1.0] in float32 is a pattern of the format. *)
Lemma w_one_range : 0 <= 1065353216 < 2 * sign_bit 23 8.
Proof. unfold sign_bit, two_mw, two_ew; cbn; lia. Qed.

Definition kernel_mask_eq_witness := kernel_mask_eq 23 8 w_mw w_ew w_max 1065353216 w_one_range.

Definition kernel_relu_eq_witness := kernel_relu_eq 23 8 w_mw w_ew w_max 1065353216 w_one_range.

Definition kernel_backward_eq_witness := kernel_backward_eq 23 8 w_mw w_ew w_max true 1073741824.

Definition kernel_packed_backward_bitwise_witness :=
  kernel_packed_backward_bitwise 23 8 w_mw w_ew w_max [1065353216] [1073741824] 0
    (Forall_cons _ w_one_range (Forall_nil _)) ltac:(cbn; lia).
