(** * Witnesses of InBackward/Equivalence.v (ojas_ref/verification/proof_audit.py): a tape of
    two operations over [R], the product [w0 * w1] and the square [w1 ^ 2 / 2] (the weight
    [w1] used twice, as with tied weights; upstream gradients 1), whose backward
    ([backward_events]) contributes to both weights and hooks each once; SGD (lr 0.1,
    momentum 0.9) or AdamW (torch's defaults) on the parameters [w0 = 2], [w1 = 3], gradients
    freed at the start ([fused_eq_standard_from]: a gradient 1 of [w0] left from an earlier
    micro-batch, accumulated into). *)

From Coq Require Import Reals List Lra.
From Ojas Require Import ScalarOps InBackward.Events InBackward.UpdateRules InBackward.Equivalence.
Import ListNotations.
Open Scope R_scope.

(** [te_vjp p vs] of the product: the contribution to parameter [p] from the values [vs]
    of the parameters the operation read. *)
Definition w_mul_vjp (p : nat) (vs : list R) : R :=
  match vs with [a; b] => if Nat.eqb p 0 then b else a | _ => 0 end.

Definition w_tape : list (tape_entry R R) :=
  [mk_entry [0%nat; 1%nat] w_mul_vjp; mk_entry [1%nat] (fun _ vs => match vs with [b] => b | _ => 0 end)].

Definition w_evs : list (event R R) := backward_events w_tape.

Definition w_sgd : sgd_config R := mk_sgd_config (1 / 10) (Some (9 / 10)) 0 0 false.
Definition w_adamw : adamw_config R := mk_adamw_config (1 / 1000) (9 / 10) (999 / 1000) (1 / 10 ^ 8) (1 / 100).

Definition w_update (q : nat) : R -> option R -> R -> R * option R := sgd_update R_opt_ops w_sgd.

Definition w_param (q : nat) : R := match q with 0%nat => 2 | _ => 3 end.

Definition w_st : store R (option R) R := mk_store w_param (fun _ => None) (fun _ => None).

(** A gradient of [w0] left by an earlier backward (gradient accumulation). *)
Definition w_st_acc : store R (option R) R :=
  mk_store w_param (fun _ => None) (fun q => match q with 0%nat => Some 1 | _ => None end).

Lemma w_hooked : forall q, s_grad w_st_acc q <> None \/ existsb (contributes_to q) w_evs = true ->
  existsb (is_hook q) w_evs = true.
Proof.
  intros [|[|q]] H; [reflexivity | reflexivity | exfalso].
  destruct H as [H | H]; [apply H; reflexivity | vm_compute in H; discriminate].
Qed.

Definition fused_eq_standard_from_witness :=
  fused_eq_standard_from Rplus w_update w_evs w_st_acc w_hooked
    (proj1 (proj2 (backward_events_hypotheses w_tape))) (proj2 (proj2 (backward_events_hypotheses w_tape))) 1.

Definition fused_eq_standard_witness :=
  fused_eq_standard Rplus w_update w_evs w_st (fun _ => eq_refl)
    (proj1 (backward_events_hypotheses w_tape)) (proj1 (proj2 (backward_events_hypotheses w_tape)))
    (proj2 (proj2 (backward_events_hypotheses w_tape))) 1.

Definition backprop_fused_eq_standard_witness :=
  backprop_fused_eq_standard Rplus w_update w_tape w_st (fun _ => eq_refl) 1.

Definition sgd_fused_eq_standard_witness :=
  sgd_fused_eq_standard R_opt_ops (fun _ => w_sgd) w_tape w_st (fun _ => eq_refl) 1.

Definition adamw_fused_eq_standard_witness :=
  adamw_fused_eq_standard R_opt_ops (fun _ => w_adamw) w_tape
    (mk_store w_param (fun _ => adam_init R_opt_ops) (fun _ => None)) (fun _ => eq_refl) 1.
