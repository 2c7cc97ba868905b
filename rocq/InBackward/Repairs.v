(** * Repairs: clipping and gradient accumulation fused into backward.

    [two_pass_clip_eq_standard]: two backward passes, the first only
    recording each parameter's squared gradient norm at its hook, the
    second updating at each hook with the clip coefficient of the first
    pass's total norm, give the parameters and optimizer states of
    backward, [clip_grad_norm_], step.  (The second pass needs the same
    events as the first: in practice the forward is recomputed, or the
    graph retained, and the backward must be deterministic.)

    [deferred_accum_eq_standard]: with gradient accumulation, hooks that
    only accumulate during the earlier micro-batches and update during
    the last one give the parameters and states of accumulate-then-step. *)

From Coq Require Import Reals List Lra.
From Ojas Require Import InBackward.Events InBackward.Equivalence
  InBackward.Variants.
Import ListNotations.
Open Scope R_scope.

Section Repairs.
Context {V S G : Type}.
Variable gadd : G -> G -> G.
Variable update : nat -> V -> S -> G -> V * S.
Variable gnorm2 : G -> R.
Variable gscale : R -> G -> G.

Local Notation event := (Events.event V G).
Local Notation store := (Events.store V S G).

(** The first pass records, for every parameter, the squared norm of its
    standard gradient (0 without gradient). *)
Lemma norm_pass_opt : forall (evs : list event) (st : store),
  (forall q, s_grad st q = None) ->
  contributed_hooked evs -> no_contribution_after_hook evs -> no_read_after_hook evs ->
  forall q, s_opt (norm_pass gadd gnorm2 evs st) q =
            onorm2 gnorm2 (backward gadd (s_param st) evs (s_grad st) q).
Proof.
  intros evs st H0 Hh Hc Hr q; unfold norm_pass.
  destruct (fused_eq_standard gadd (norm_record gnorm2) evs
              (mk_store (s_param st) (fun _ => 0) (s_grad st)) H0 Hh Hc Hr q)
    as (_ & E & _).
  rewrite E; unfold standard_run, optimizer_step, step_param; simpl.
  destruct (backward gadd (s_param st) evs (s_grad st) q); reflexivity.
Qed.

(** Clipping by two backward passes (squared norms at the hooks of the
    first, clipped updates at the hooks of the second) equals backward,
    [clip_grad_norm_], step; the second pass frees every gradient. *)
Theorem two_pass_clip_eq_standard :
  forall (ps : list nat) (max_norm : R) (evs : list event) (st : store),
  (forall q, s_grad st q = None) ->
  contributed_hooked evs -> no_contribution_after_hook evs -> no_read_after_hook evs ->
  forall q,
    s_param (two_pass_clip_run gadd update gnorm2 gscale ps max_norm evs st) q =
      s_param (standard_clip_run gadd update gnorm2 gscale ps max_norm evs st) q /\
    s_opt (two_pass_clip_run gadd update gnorm2 gscale ps max_norm evs st) q =
      s_opt (standard_clip_run gadd update gnorm2 gscale ps max_norm evs st) q /\
    s_grad (two_pass_clip_run gadd update gnorm2 gscale ps max_norm evs st) q = None.
Proof.
  intros ps max_norm evs st H0 Hh Hc Hr q.
  set (gr := backward gadd (s_param st) evs (s_grad st)).
  assert (Ht : sqrt (fold_right Rplus 0 (map (s_opt (norm_pass gadd gnorm2 evs st)) ps)) =
               grad_norm gnorm2 ps gr).
  { unfold grad_norm; f_equal; f_equal; apply map_ext; intros x.
    apply norm_pass_opt; assumption. }
  unfold two_pass_clip_run; rewrite Ht.
  exact (fused_eq_standard gadd (scaled_update update gscale (clip_coef max_norm (grad_norm gnorm2 ps gr)))
           evs st H0 Hh Hc Hr q).
Qed.

(** Accumulating over the micro-batches one after the other is the
    backward of their concatenation. *)
Lemma fold_backward_concat : forall P (mbs : list (list event)) gr,
  fold_left (fun gr evs => backward gadd P evs gr) mbs gr = backward gadd P (concat mbs) gr.
Proof.
  intros P mbs; induction mbs as [|evs mbs IH]; intros gr; [reflexivity|].
  simpl; rewrite IH; unfold backward; rewrite fold_left_app; reflexivity.
Qed.

(** Gradient accumulation fused into backward, with the updates deferred
    to the hooks of the last micro-batch, equals accumulating over all
    micro-batches then one step, when the last micro-batch hooks every
    parameter that any micro-batch contributes to, after its
    contributions, and nothing reads a parameter after its hook. *)
Theorem deferred_accum_eq_standard :
  forall (mbs : list (list event)) (last : list event) (st : store),
  (forall q, s_grad st q = None) ->
  (forall q, existsb (contributes_to q) (concat mbs ++ last) = true ->
     existsb (is_hook q) last = true) ->
  no_contribution_after_hook last -> no_read_after_hook last ->
  forall q,
    s_param (deferred_accum_run gadd update mbs last st) q =
      s_param (standard_run gadd update (concat mbs ++ last) st) q /\
    s_opt (deferred_accum_run gadd update mbs last st) q =
      s_opt (standard_run gadd update (concat mbs ++ last) st) q /\
    s_grad (deferred_accum_run gadd update mbs last st) q = None.
Proof.
  intros mbs last st H0 Hh Hc Hr q.
  set (st' := mk_store (s_param st) (s_opt st)
                (fold_left (fun gr evs => backward gadd (s_param st) evs gr) mbs (s_grad st))).
  assert (Hh' : forall x, s_grad st' x <> None \/ existsb (contributes_to x) last = true ->
                  existsb (is_hook x) last = true).
  { intros x Hx; apply Hh; rewrite existsb_app; apply Bool.orb_true_iff.
    destruct Hx as [Hx|Hx]; [left|right; exact Hx].
    unfold st' in Hx; simpl in Hx; rewrite fold_backward_concat in Hx.
    destruct (existsb (contributes_to x) (concat mbs)) eqn:E; [reflexivity|].
    rewrite backward_other, H0 in Hx by exact E; congruence. }
  destruct (fused_eq_standard_from gadd update last st' Hh' Hc Hr q) as (E1 & E2 & E3).
  unfold deferred_accum_run; fold st'.
  assert (Es : standard_run gadd update last st' = standard_run gadd update (concat mbs ++ last) st).
  { unfold standard_run, st'; simpl; rewrite fold_backward_concat.
    unfold backward; rewrite fold_left_app; reflexivity. }
  rewrite <- Es; auto.
Qed.

(** ** For reverse-mode backprop orders *)

(** Clipping by two backprop passes with hooks equals backward,
    [clip_grad_norm_], step. *)
Theorem two_pass_clip_backprop_eq_standard :
  forall (ps : list nat) (max_norm : R) (tape : list (tape_entry V G)) (st : store),
  (forall q, s_grad st q = None) ->
  forall q,
    s_param (two_pass_clip_run gadd update gnorm2 gscale ps max_norm (backward_events tape) st) q =
      s_param (standard_clip_run gadd update gnorm2 gscale ps max_norm (backward_events tape) st) q /\
    s_opt (two_pass_clip_run gadd update gnorm2 gscale ps max_norm (backward_events tape) st) q =
      s_opt (standard_clip_run gadd update gnorm2 gscale ps max_norm (backward_events tape) st) q /\
    s_grad (two_pass_clip_run gadd update gnorm2 gscale ps max_norm (backward_events tape) st) q = None.
Proof.
  intros ps max_norm tape st H0; destruct (backward_events_hypotheses tape) as (H1 & H2 & H3).
  apply two_pass_clip_eq_standard; assumption.
Qed.

(** Gradient accumulation over backprop micro-batches, updates deferred
    to the hooks of the last micro-batch, equals accumulate-then-step
    when the last micro-batch contributes to every parameter that an
    earlier one contributes to. *)
Theorem deferred_accum_backprop_eq_standard :
  forall (tapes : list (list (tape_entry V G))) (last : list (tape_entry V G)) (st : store),
  (forall q, s_grad st q = None) ->
  (forall q, existsb (contributes_to q) (concat (map backward_events tapes)) = true ->
     existsb (contributes_to q) (backward_events last) = true) ->
  forall q,
    s_param (deferred_accum_run gadd update (map backward_events tapes) (backward_events last) st) q =
      s_param (standard_run gadd update
                 (concat (map backward_events tapes) ++ backward_events last) st) q /\
    s_opt (deferred_accum_run gadd update (map backward_events tapes) (backward_events last) st) q =
      s_opt (standard_run gadd update
               (concat (map backward_events tapes) ++ backward_events last) st) q /\
    s_grad (deferred_accum_run gadd update (map backward_events tapes) (backward_events last) st) q
      = None.
Proof.
  intros tapes last st H0 Hl; destruct (backward_events_hypotheses last) as (H1 & H2 & H3).
  apply deferred_accum_eq_standard; [exact H0| |exact H2|exact H3].
  intros q Hq; apply H1; rewrite existsb_app in Hq; apply Bool.orb_true_iff in Hq.
  destruct Hq as [Hq|Hq]; [apply Hl, Hq|exact Hq].
Qed.

End Repairs.
