(** * Gradient clipping and gradient accumulation, standard and fused.

    Global gradient-norm clipping ([torch.nn.utils.clip_grad_norm_]):
      total = sqrt (sum over the parameters [ps] of |g_q|^2),
      coef  = min 1 (max_norm / (total + 1e-6)),
    every gradient is multiplied by [coef], then the optimizer steps.
    Gradients are abstract: [gnorm2 g] is the squared norm of a gradient
    and [gscale c g] the gradient multiplied by [c].

    - [standard_clip_run]: backward, clip, step.
    - [running_clip_run]: the naive fusion: at [p]'s hook, clip with the
      norm of the gradients hooked so far (the only ones known then).
    - [two_pass_clip_run]: the repair: a first backward whose hooks only
      record [|g_q|^2] (one scalar per parameter; nothing is updated, the
      gradient is freed), then a second backward (same events: the
      parameters did not change) that updates at each hook with the
      coefficient of the first pass's total norm.

    Gradient accumulation over micro-batches (a list of backward passes
    of the same parameters, [mbs], then the last one [last]):
    - standard: [standard_run (concat mbs ++ last)] (all micro-batch
      backwards with frozen parameters, one step);
    - [fused_accum_run]: the naive fusion, an update at every hook of
      every micro-batch;
    - [deferred_accum_run]: the repair: the hooks of the earlier
      micro-batches only accumulate, the last micro-batch's backward is
      fused.  *)

From Coq Require Import Reals List Lra.
From Ojas Require Import InBackward.Events.
Import ListNotations.
Open Scope R_scope.

(** [torch.clamp(max_norm / (total + 1e-6), max=1.0)]. *)
Definition clip_coef (max_norm total : R) : R :=
  Rmin 1 (max_norm / (total + / 1000000)).

Section Variants.
Context {V S G : Type}.
Variable gadd : G -> G -> G.
Variable update : nat -> V -> S -> G -> V * S.
Variable gnorm2 : G -> R.
Variable gscale : R -> G -> G.

Local Notation event := (Events.event V G).
Local Notation store := (Events.store V S G).

(** Squared norm of an optional gradient ([None]: 0). *)
Definition onorm2 (og : option G) : R :=
  match og with Some g => gnorm2 g | None => 0 end.

(** Global norm of the gradients of the parameters [ps]. *)
Definition grad_norm (ps : list nat) (gr : nat -> option G) : R :=
  sqrt (fold_right Rplus 0 (map (fun q => onorm2 (gr q)) ps)).

(** The update rule applied to the clipped gradient [c g]. *)
Definition scaled_update (c : R) : nat -> V -> S -> G -> V * S :=
  fun q v s g => update q v s (gscale c g).

(** Backward, [clip_grad_norm_(ps, max_norm)], step. *)
Definition standard_clip_run (ps : list nat) (max_norm : R) (evs : list event)
    (st : store) : store :=
  let gr := backward gadd (s_param st) evs (s_grad st) in
  optimizer_step (scaled_update (clip_coef max_norm (grad_norm ps gr)))
    (mk_store (s_param st) (s_opt st) gr).

(** Naive fusion: clip at each hook with the running norm. *)
Definition running_clip_step (max_norm : R) (sa : store * R) (e : event) : store * R :=
  let (st, acc) := sa in
  match e with
  | Contribute _ _ _ => (fused_step gadd update st e, acc)
  | Hook p =>
      match s_grad st p with
      | None => (st, acc)
      | Some g =>
          let acc' := acc + gnorm2 g in
          (hook_update (scaled_update (clip_coef max_norm (sqrt acc'))) st p, acc')
      end
  end.

Definition running_clip_run (max_norm : R) (evs : list event) (st : store) : store :=
  fst (fold_left (running_clip_step max_norm) evs (st, 0)).

(** The first pass's update rule: keep the value, record [|g|^2]. *)
Definition norm_record : nat -> V -> R -> G -> V * R := fun _ v _ g => (v, gnorm2 g).

(** The first pass: per-parameter squared norms, nothing updated. *)
Definition norm_pass (evs : list event) (st : store) : Events.store V R G :=
  fused_run gadd norm_record evs (mk_store (s_param st) (fun _ => 0) (s_grad st)).

(** Two backward passes: norms first, then fused clipped updates. *)
Definition two_pass_clip_run (ps : list nat) (max_norm : R) (evs : list event)
    (st : store) : store :=
  let total := sqrt (fold_right Rplus 0 (map (s_opt (norm_pass evs st)) ps)) in
  fused_run gadd (scaled_update (clip_coef max_norm total)) evs st.

(** ** Gradient accumulation *)

(** Naive fusion: every micro-batch's backward is fused. *)
Definition fused_accum_run (mbs : list (list event)) (st : store) : store :=
  fold_left (fun st evs => fused_run gadd update evs st) mbs st.

(** Repair: the earlier micro-batches only accumulate (frozen
    parameters); the last one is fused. *)
Definition deferred_accum_run (mbs : list (list event)) (last : list event)
    (st : store) : store :=
  fused_run gadd update last
    (mk_store (s_param st) (s_opt st)
       (fold_left (fun gr evs => backward gadd (s_param st) evs gr) mbs (s_grad st))).

End Variants.
