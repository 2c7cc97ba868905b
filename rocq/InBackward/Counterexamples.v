(** * Counterexamples: where updating in the hook is not the standard loop.

    Concrete runs over [R] with [torch.optim.SGD] ([sgd_update]), scalar
    parameters ([V = G = R], squared norm [g * g], scaling [c * g]):

    (a) global gradient-norm clipping: the coefficient depends on all
        gradients.  Updating at [p]'s hook with the unclipped gradient, or
        with the coefficient of the norm of the gradients hooked so far,
        differs from backward, clip, step, although the event order is a
        backprop order (it satisfies the hypotheses of
        [fused_eq_standard], [backward_events_hypotheses]);
    (b) gradient accumulation: updating at every hook of every
        micro-batch differs from accumulating then stepping (the second
        micro-batch reads the parameter after its hook);
    (c) a hook per use of a tied weight (after each use's contribution,
        rather than after the last) differs, even when no contribution
        reads the parameter (SGD with momentum sees two gradients instead
        of their sum). *)

From Coq Require Import Reals List Lra.
From Ojas Require Import ScalarOps InBackward.Events InBackward.Equivalence
  InBackward.UpdateRules InBackward.Variants.
Import ListNotations.
Open Scope R_scope.

(** SGD over [R] with learning rate [lr] and optional momentum. *)
Definition sgd_R (lr : R) (mu : option R) : nat -> R -> option R -> R -> R * option R :=
  fun _ => sgd_update R_opt_ops (mk_sgd_config lr mu 0 0 false).

(** All parameters at [v], no momentum buffer, no gradient. *)
Definition init_store (v : R) : Events.store R (option R) R :=
  mk_store (fun _ => v) (fun _ => None) (fun _ => None).

Definition sq (g : R) : R := g * g.

(** An operation reading the parameters [rs], with constant gradients. *)
Definition const_entry (rs : list nat) (g : R) : tape_entry R R :=
  mk_entry rs (fun _ _ => g).

(** ** (a) Clipping *)

(** Two parameters with gradients 3 and 4 (global norm 5). *)
Definition clip_tape : list (tape_entry R R) := [const_entry [0%nat] 3; const_entry [1%nat] 4].

Lemma clip_coef_ge_1 : forall t, 1 <= t -> clip_coef 1 t = / (t + / 1000000).
Proof.
  intros t Ht; unfold clip_coef; rewrite Rmin_right; [unfold Rdiv; ring|].
  unfold Rdiv; rewrite Rmult_1_l, <- Rinv_1.
  assert (0 < / 1000000) by (apply Rinv_0_lt_compat; lra).
  apply Rinv_le_contravar; lra.
Qed.

Lemma Rinv_neq : forall a b, 0 < a -> 0 < b -> a <> b -> / a <> / b.
Proof. intros a b Ha Hb H E; apply H; rewrite <- (Rinv_inv a), E, Rinv_inv; reflexivity. Qed.

Lemma eps_pos : 0 < / 1000000.
Proof. apply Rinv_0_lt_compat; lra. Qed.

(** Updating each parameter at its hook with the clip coefficient of the
    norm of the gradients hooked so far differs from backward,
    [clip_grad_norm_], step (gradients 3 and 4, max_norm 1, lr 1). *)
Theorem clip_running_neq_standard :
  s_param (running_clip_run Rplus (sgd_R 1 None) sq Rmult 1
             (backward_events clip_tape) (init_store 0)) 1%nat <>
  s_param (standard_clip_run Rplus (sgd_R 1 None) sq Rmult [0%nat; 1%nat] 1
             (backward_events clip_tape) (init_store 0)) 1%nat.
Proof.
  cbn -[Rmin sqrt clip_coef]; unfold grad_norm, onorm2, add_grad, fupd, sq;
    cbn -[Rmin sqrt clip_coef].
  replace (0 + 4 * 4) with (4 * 4) by ring.
  replace (3 * 3 + (4 * 4 + 0)) with (5 * 5) by ring.
  rewrite !sqrt_square, !clip_coef_ge_1 by lra.
  pose proof eps_pos as He; intros H.
  apply (Rinv_neq (4 + / 1000000) (5 + / 1000000)); lra.
Qed.

(** Updating each parameter at its hook with the unclipped gradient
    differs from backward, [clip_grad_norm_], step. *)
Theorem clip_unclipped_neq_standard :
  s_param (fused_run Rplus (sgd_R 1 None) (backward_events clip_tape) (init_store 0)) 1%nat <>
  s_param (standard_clip_run Rplus (sgd_R 1 None) sq Rmult [0%nat; 1%nat] 1
             (backward_events clip_tape) (init_store 0)) 1%nat.
Proof.
  cbn -[Rmin sqrt clip_coef]; unfold grad_norm, onorm2, add_grad, fupd, sq;
    cbn -[Rmin sqrt clip_coef].
  replace (3 * 3 + (4 * 4 + 0)) with (5 * 5) by ring.
  rewrite sqrt_square, clip_coef_ge_1 by lra.
  pose proof eps_pos as He.
  assert (Hi : / (5 + / 1000000) < 1).
  { rewrite <- Rinv_1; apply Rinv_lt_contravar; lra. }
  lra.
Qed.

(** ** (b) Gradient accumulation *)

(** One micro-batch with loss [p^2 / 2]: the gradient [p] reads [p]. *)
Definition square_tape : list (tape_entry R R) :=
  [mk_entry [0%nat] (fun _ vs => hd 0 vs)].

(** Two micro-batches, SGD (lr 1/2) at every hook, differ from
    accumulate-then-step (from p = 1: 1/4 against 0). *)
Theorem accum_fused_neq_standard :
  s_param (fused_accum_run Rplus (sgd_R (1/2) None)
             [backward_events square_tape; backward_events square_tape] (init_store 1)) 0%nat <>
  s_param (standard_run Rplus (sgd_R (1/2) None)
             (concat [backward_events square_tape; backward_events square_tape])
             (init_store 1)) 0%nat.
Proof. cbn; lra. Qed.

(** ** (c) Tied weights *)

(** The backward with a hook after every use's contributions (instead
    of after the last contribution, [backward_events]). *)
Fixpoint per_use_events {V G} (tape : list (tape_entry V G)) : list (event V G) :=
  match tape with
  | [] => []
  | e :: rest => per_use_events rest ++ entry_contribs e ++ entry_hooks [] e
  end.

(** A weight used twice (constant gradient 1 per use). *)
Definition tied_tape : list (tape_entry R R) := [const_entry [0%nat] 1; const_entry [0%nat] 1].

(** A hook per use of a tied weight, SGD with momentum 1/2 and lr 1,
    differs from backward then step (-5/2 against -2). *)
Theorem tied_per_use_neq_standard :
  s_param (fused_run Rplus (sgd_R 1 (Some (1/2))) (per_use_events tied_tape) (init_store 0)) 0%nat <>
  s_param (standard_run Rplus (sgd_R 1 (Some (1/2))) (backward_events tied_tape)
             (init_store 0)) 0%nat.
Proof. cbn; lra. Qed.
