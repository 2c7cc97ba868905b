(** * Witnesses of Reversible/Coupling.v (ojas_ref/verification/proof_audit.py): exact real
    arithmetic ([R_group]), identity residual functions, scalars [(1, 2)] and vectors of
    length 1. *)

From Coq Require Import Reals List.
From Ojas Require Import Reversible.Coupling.
Import ListNotations.
Open Scope R_scope.

Definition coupling_inverse_forward_witness :=
  coupling_inverse_forward R_group R_group_laws (fun x => x) (fun x => x) (1, 2).

Definition coupling_forward_inverse_witness :=
  coupling_forward_inverse R_group R_group_laws (fun x => x) (fun x => x) (1, 2).

(** The identity keeps every length. *)
Lemma w_id_keeps : forall n, keeps_length (T := R) n (fun v => v).
Proof. intros n v H; exact H. Qed.

Definition coupling_inverse_forward_list_witness :=
  coupling_inverse_forward_list R_group R_group_laws 1 (fun v => v) (fun v => v) [1] [2]
    (w_id_keeps 1) (w_id_keeps 1) eq_refl eq_refl.

Definition coupling_forward_inverse_list_witness :=
  coupling_forward_inverse_list R_group R_group_laws 1 (fun v => v) (fun v => v) [1] [2]
    (w_id_keeps 1) (w_id_keeps 1) eq_refl eq_refl.
