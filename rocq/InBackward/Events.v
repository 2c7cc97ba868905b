(** * Optimizer in backward: the event model of one backward pass.

    Parameters are indexed by [nat].  A store holds, for every
    parameter, its value ([V]), its optimizer state ([S]) and its
    gradient ([option G]: [None] is a freed gradient, [p.grad is None]).

    A backward pass is a list of events:
      - [Contribute p rs f]: the backward of some operation adds the
        contribution [f (values of rs)] to the gradient of [p]; [rs] is
        the list of parameters whose current values the contribution
        reads, and [f] sees nothing else of the store (what it needs of
        the forward pass, activations and upstream gradients, is captured
        in the closure [f]);
      - [Hook p]: the post-accumulate-grad hook of [p].

    Accumulation is as in autograd: the first contribution is stored, a
    later one is added to the stored gradient ([gadd]).

    Two semantics of the same events, both parametric in a per-parameter
    update rule [update p value state grad = (value', state')]:
      - [standard_run]: the usual loop.  Contributions are accumulated
        with the parameters frozen (hooks do nothing), then
        [optimizer_step] updates every parameter that has a gradient,
        once (like [torch.optim], which skips parameters whose [grad] is
        [None]);
      - [fused_run]: the optimizer fused into backward.  Contributions
        read the current store; at [Hook p] the update is applied to [p]
        with its accumulated gradient and the gradient is freed.

    Definitions only; the equivalence is [InBackward/Equivalence.v]. *)

From Coq Require Import List Arith Bool.
Import ListNotations.

Inductive event (V G : Type) : Type :=
| Contribute (p : nat) (reads : list nat) (f : list V -> G)
| Hook (p : nat).
Arguments Contribute {V G}. Arguments Hook {V G}.

(** Values, optimizer states and gradients of all parameters. *)
Record store (V S G : Type) : Type := mk_store {
  s_param : nat -> V;
  s_opt : nat -> S;
  s_grad : nat -> option G
}.
Arguments mk_store {V S G}. Arguments s_param {V S G}.
Arguments s_opt {V S G}. Arguments s_grad {V S G}.

(** Point update of a function of the parameter index. *)
Definition fupd {A : Type} (f : nat -> A) (p : nat) (x : A) : nat -> A :=
  fun q => if Nat.eqb q p then x else f q.

(** ** Syntactic facts about events *)

(** [e] adds a contribution to the gradient of [p]. *)
Definition contributes_to {V G} (p : nat) (e : event V G) : bool :=
  match e with Contribute q _ _ => Nat.eqb p q | Hook _ => false end.

(** [e] reads the value of [p]. *)
Definition reads_param {V G} (p : nat) (e : event V G) : bool :=
  match e with Contribute _ rs _ => existsb (Nat.eqb p) rs | Hook _ => false end.

(** [e] is the hook of [p]. *)
Definition is_hook {V G} (p : nat) (e : event V G) : bool :=
  match e with Hook q => Nat.eqb p q | Contribute _ _ _ => false end.

Section Semantics.
Context {V S G : Type}.

(** Gradient accumulation ([.grad += c]; the first contribution is stored). *)
Variable gadd : G -> G -> G.

(** The per-parameter update rule of the optimizer. *)
Variable update : nat -> V -> S -> G -> V * S.

(** Add the contribution [c] to the gradient of [p]. *)
Definition add_grad (gr : nat -> option G) (p : nat) (c : G) : nat -> option G :=
  fupd gr p (Some (match gr p with None => c | Some g => gadd g c end)).

(** ** Standard semantics: all gradients first, then [optimizer.step()] *)

(** One event of a backward pass with frozen parameters [P]. *)
Definition backward_step (P : nat -> V) (gr : nat -> option G)
    (e : event V G) : nat -> option G :=
  match e with
  | Contribute p rs f => add_grad gr p (f (map P rs))
  | Hook _ => gr
  end.

(** The gradients after the events, starting from the gradients [gr]. *)
Definition backward (P : nat -> V) (evs : list (event V G))
    (gr : nat -> option G) : nat -> option G :=
  fold_left (backward_step P) evs gr.

(** New value and state of [q]; unchanged when [q] has no gradient. *)
Definition step_param (st : store V S G) (q : nat) : V * S :=
  match s_grad st q with
  | Some g => update q (s_param st q) (s_opt st q) g
  | None => (s_param st q, s_opt st q)
  end.

(** [optimizer.step()]: every parameter updated once; gradients kept. *)
Definition optimizer_step (st : store V S G) : store V S G :=
  mk_store (fun q => fst (step_param st q)) (fun q => snd (step_param st q))
           (s_grad st).

(** The standard loop: backward, then step. *)
Definition standard_run (evs : list (event V G)) (st : store V S G) : store V S G :=
  optimizer_step
    (mk_store (s_param st) (s_opt st) (backward (s_param st) evs (s_grad st))).

(** ** Fused semantics: update in the post-accumulate-grad hook *)

(** At [Hook p]: update [p] with its gradient, then free the gradient. *)
Definition hook_update (st : store V S G) (p : nat) : store V S G :=
  match s_grad st p with
  | None => st
  | Some g =>
      let vs := update p (s_param st p) (s_opt st p) g in
      mk_store (fupd (s_param st) p (fst vs)) (fupd (s_opt st) p (snd vs))
               (fupd (s_grad st) p None)
  end.

(** One event; contributions read the current (possibly updated) values. *)
Definition fused_step (st : store V S G) (e : event V G) : store V S G :=
  match e with
  | Contribute p rs f =>
      mk_store (s_param st) (s_opt st)
               (add_grad (s_grad st) p (f (map (s_param st) rs)))
  | Hook p => hook_update st p
  end.

Definition fused_run (evs : list (event V G)) (st : store V S G) : store V S G :=
  fold_left fused_step evs st.

End Semantics.

(** ** The hypotheses of the equivalence *)

(** Every parameter that receives a contribution has a hook. *)
Definition contributed_hooked {V G} (evs : list (event V G)) : Prop :=
  forall p, existsb (contributes_to p) evs = true -> existsb (is_hook p) evs = true.

(** No contribution to [p] after a hook of [p]. *)
Definition no_contribution_after_hook {V G} (evs : list (event V G)) : Prop :=
  forall pre p post, evs = pre ++ Hook p :: post ->
    existsb (contributes_to p) post = false.

(** No event after a hook of [p] reads [p]. *)
Definition no_read_after_hook {V G} (evs : list (event V G)) : Prop :=
  forall pre p post, evs = pre ++ Hook p :: post ->
    existsb (reads_param p) post = false.
