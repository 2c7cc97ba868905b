prelude
import Proofs.Lists
/-!
# (d) Optimizer in backward: updating each parameter in its hook equals backward-then-step

Mirror of `rocq/InBackward/Events.v` (the event model), `Equivalence.v` (the theorem)
and `Counterexamples.v` (global clipping, per-micro-batch updates).

Parameters are indexed by `Nat`.  A store holds, for every parameter, its value (`V`), its
optimizer state (`S`) and its gradient (`Option G`, `none` a freed gradient).  A backward pass is
a list of events: `contribute p rs f` adds `f (values of rs)` to the gradient of `p` (autograd
accumulation: the first contribution is stored, a later one is added with `gadd`); `hook p` is the
post-accumulate-grad hook of `p`.  The standard run accumulates with frozen parameters, then
`optimizer.step()` updates every parameter that has a gradient; the fused run reads the current
store and, at `hook p`, updates `p` with its gradient and frees it.
-/

namespace Ojas
namespace OptimizerInBackward

/-- `a || b`. -/
def bor (a b : Bool) : Bool := cond a true b

theorem Nat.beq_refl : ∀ n : Nat, Nat.beq n n = true
  | .zero => rfl
  | .succ n => Nat.beq_refl n

theorem Nat.beq_symm : ∀ n m : Nat, Nat.beq n m = Nat.beq m n
  | .zero, .zero => rfl
  | .zero, .succ _ => rfl
  | .succ _, .zero => rfl
  | .succ n, .succ m => Nat.beq_symm n m

theorem Bool.false_ne_true (h : false = true) : False := Bool.noConfusion h

/-- An event of a backward pass (Coq: `event`). -/
inductive Event (V G : Type) where
  | contribute (p : Nat) (reads : List Nat) (f : List V → G)
  | hook (p : Nat)

/-- Values, optimizer states and gradients of all parameters (Coq: `store`). -/
structure Store (V S G : Type) where
  param : Nat → V
  opt : Nat → S
  grad : Nat → Option G

/-- Point update of a function of the parameter index (Coq: `fupd`). -/
def fupd {A : Type} (f : Nat → A) (p : Nat) (x : A) : Nat → A :=
  fun q => cond (Nat.beq q p) x (f q)

theorem fupd_eq {A : Type} (f : Nat → A) (p : Nat) (x : A) : fupd f p x p = x := by
  unfold fupd; rw [Nat.beq_refl]; rfl

theorem fupd_neq {A : Type} (f : Nat → A) (p q : Nat) (x : A) (h : Nat.beq q p = false) :
    fupd f p x q = f q := by
  unfold fupd; rw [h]; rfl

/-- `e` adds a contribution to the gradient of `q` (Coq: `contributes_to`, `existsb`). -/
def contributes {V G : Type} (q : Nat) : List (Event V G) → Bool
  | [] => false
  | .cons (.contribute p _ _) es => bor (Nat.beq q p) (contributes q es)
  | .cons (.hook _) es => contributes q es

/-- Some event is the hook of `q` (Coq: `existsb (is_hook q)`). -/
def hooked {V G : Type} (q : Nat) : List (Event V G) → Bool
  | [] => false
  | .cons (.hook p) es => bor (Nat.beq q p) (hooked q es)
  | .cons (.contribute _ _ _) es => hooked q es

/-- `p` occurs in `rs`. -/
def memb (p : Nat) : List Nat → Bool
  | [] => false
  | .cons r rs => bor (Nat.beq r p) (memb p rs)

/-- No event of `es` contributes to `p` or reads `p`. -/
def Untouched {V G : Type} (p : Nat) : List (Event V G) → Prop
  | [] => True
  | .cons (.contribute r rs _) es => Nat.beq p r = false ∧ memb p rs = false ∧ Untouched p es
  | .cons (.hook _) es => Untouched p es

/-- No contribution to `p` and no read of `p` after a hook of `p` (Coq:
`no_contribution_after_hook` and `no_read_after_hook`, stated there with `pre ++ Hook p :: post`). -/
def HookLast {V G : Type} : List (Event V G) → Prop
  | [] => True
  | .cons (.contribute _ _ _) es => HookLast es
  | .cons (.hook p) es => Untouched p es ∧ HookLast es

section Semantics
variable {V S G : Type} (gadd : G → G → G) (update : Nat → V → S → G → V × S)

/-- `.grad += c`; the first contribution is stored. -/
def accum : Option G → G → G
  | none, c => c
  | some g, c => gadd g c

/-- Add the contribution `c` to the gradient of `p` (Coq: `add_grad`). -/
def addGrad (gr : Nat → Option G) (p : Nat) (c : G) : Nat → Option G :=
  fupd gr p (some (accum gadd (gr p) c))

/-- One event of a backward pass with frozen parameters `P` (Coq: `backward_step`). -/
def backwardStep (P : Nat → V) (gr : Nat → Option G) : Event V G → Nat → Option G
  | .contribute p rs f => addGrad gadd gr p (f (List.map P rs))
  | .hook _ => gr

/-- The gradients after the events (Coq: `backward`). -/
def backward (P : Nat → V) (evs : List (Event V G)) (gr : Nat → Option G) : Nat → Option G :=
  List.foldl (backwardStep gadd P) gr evs

/-- The update of one parameter with an optional gradient, `none`: unchanged (Coq: `update_opt`,
`step_param`). -/
def updateOpt (q : Nat) (v : V) (s : S) : Option G → V × S
  | some g => update q v s g
  | none => (v, s)

/-- `optimizer.step()`: every parameter updated once; gradients kept (Coq: `optimizer_step`). -/
def optimizerStep (st : Store V S G) : Store V S G :=
  ⟨fun q => (updateOpt update q (st.param q) (st.opt q) (st.grad q)).1,
   fun q => (updateOpt update q (st.param q) (st.opt q) (st.grad q)).2, st.grad⟩

/-- The standard loop: backward, then step (Coq: `standard_run`). -/
def standardRun (evs : List (Event V G)) (st : Store V S G) : Store V S G :=
  optimizerStep update ⟨st.param, st.opt, backward gadd st.param evs st.grad⟩

/-- At `hook p`: update `p` with its gradient, then free the gradient (Coq: `hook_update`). -/
def hookUpdate (st : Store V S G) (p : Nat) : Store V S G :=
  match st.grad p with
  | none => st
  | some g => ⟨fupd st.param p (update p (st.param p) (st.opt p) g).1,
      fupd st.opt p (update p (st.param p) (st.opt p) g).2, fupd st.grad p none⟩

/-- One event; contributions read the current (possibly updated) values (Coq: `fused_step`). -/
def fusedStep (st : Store V S G) : Event V G → Store V S G
  | .contribute p rs f => ⟨st.param, st.opt, addGrad gadd st.grad p (f (List.map st.param rs))⟩
  | .hook p => hookUpdate update st p

/-- The optimizer fused into backward (Coq: `fused_run`). -/
def fusedRun (evs : List (Event V G)) (st : Store V S G) : Store V S G :=
  List.foldl (fusedStep gadd update) st evs

/-- The backward's gradient of `q` depends only on the starting gradient of `q`. -/
theorem backward_local (P : Nat → V) (evs : List (Event V G)) :
    ∀ (gr gr' : Nat → Option G) (q : Nat), gr q = gr' q →
      backward gadd P evs gr q = backward gadd P evs gr' q := by
  induction evs with
  | nil => intro gr gr' q h; exact h
  | cons e es ih =>
    intro gr gr' q h
    cases e with
    | hook p => exact ih gr gr' q h
    | contribute p rs f =>
      apply ih
      change fupd gr p (some (accum gadd (gr p) (f (List.map P rs)))) q
        = fupd gr' p (some (accum gadd (gr' p) (f (List.map P rs)))) q
      unfold fupd
      cases hq : Nat.beq q p with
      | true =>
        have e := Nat.eq_of_beq_eq_true hq
        rw [← e, h]
      | false => exact h

/-- Without contributions to `q`, the backward leaves `q`'s gradient (Coq: `backward_other`). -/
theorem backward_other (P : Nat → V) (evs : List (Event V G)) :
    ∀ (gr : Nat → Option G) (q : Nat), contributes q evs = false →
      backward gadd P evs gr q = gr q := by
  induction evs with
  | nil => intro gr q _; rfl
  | cons e es ih =>
    intro gr q h
    cases e with
    | hook p => exact ih gr q h
    | contribute p rs f =>
      change bor (Nat.beq q p) (contributes q es) = false at h
      cases hq : Nat.beq q p with
      | true => rw [hq] at h; exact (Bool.false_ne_true (Eq.symm h)).elim
      | false =>
        rw [hq] at h
        change backward gadd P es (addGrad gadd gr p (f (List.map P rs))) q = gr q
        rw [ih _ q h]
        exact fupd_neq gr p q _ hq

theorem contributes_untouched (p : Nat) (es : List (Event V G)) (h : Untouched p es) :
    contributes p es = false := by
  induction es with
  | nil => rfl
  | cons e es ih =>
    cases e with
    | hook r => exact ih h
    | contribute r rs f =>
      have ⟨h1, _, h3⟩ := h
      change bor (Nat.beq p r) (contributes p es) = false
      rw [h1, ih h3]
      rfl

theorem map_congr_not_memb (P P' : Nat → V) (p : Nat) (hP : ∀ r, Nat.beq r p = false → P r = P' r) :
    ∀ rs : List Nat, memb p rs = false → List.map P rs = List.map P' rs := by
  intro rs
  induction rs with
  | nil => intro _; rfl
  | cons r rs ih =>
    intro h
    change bor (Nat.beq r p) (memb p rs) = false at h
    cases hr : Nat.beq r p with
    | true => rw [hr] at h; exact (Bool.false_ne_true (Eq.symm h)).elim
    | false =>
      rw [hr] at h
      change List.cons (P r) (List.map P rs) = List.cons (P' r) (List.map P' rs)
      rw [hP r hr, ih h]

/-- A backward that never reads `p` does not see a change of `p`'s value. -/
theorem backward_params (P P' : Nat → V) (p : Nat) (hP : ∀ r, Nat.beq r p = false → P r = P' r)
    (evs : List (Event V G)) :
    Untouched p evs → ∀ (gr : Nat → Option G) (q : Nat),
      backward gadd P evs gr q = backward gadd P' evs gr q := by
  induction evs with
  | nil => intro _ gr q; rfl
  | cons e es ih =>
    intro h gr q
    cases e with
    | hook r => exact ih h gr q
    | contribute r rs f =>
      have ⟨_, h2, h3⟩ := h
      change backward gadd P es (addGrad gadd gr r (f (List.map P rs))) q
        = backward gadd P' es (addGrad gadd gr r (f (List.map P' rs))) q
      rw [map_congr_not_memb P P' p hP rs h2]
      exact ih h3 _ q

theorem hookUpdate_other (st : Store V S G) (p q : Nat) (h : Nat.beq q p = false) :
    (hookUpdate update st p).param q = st.param q ∧ (hookUpdate update st p).opt q = st.opt q
      ∧ (hookUpdate update st p).grad q = st.grad q := by
  unfold hookUpdate
  cases st.grad p with
  | none => exact ⟨rfl, rfl, rfl⟩
  | some g => exact ⟨fupd_neq _ p q _ h, fupd_neq _ p q _ h, fupd_neq _ p q _ h⟩

theorem hookUpdate_self (st : Store V S G) (p : Nat) :
    (hookUpdate update st p).param p = (updateOpt update p (st.param p) (st.opt p) (st.grad p)).1
    ∧ (hookUpdate update st p).opt p = (updateOpt update p (st.param p) (st.opt p) (st.grad p)).2
    ∧ (hookUpdate update st p).grad p = none := by
  unfold hookUpdate
  cases hg : st.grad p with
  | none => exact ⟨rfl, rfl, hg⟩
  | some g => exact ⟨fupd_eq _ p _, fupd_eq _ p _, fupd_eq _ p _⟩

/-- The fused run against the standard one, parameter by parameter: a hooked parameter has been
updated once with its standard gradient and has no gradient; any other is untouched and holds its
standard gradient (Coq: `fused_inv` and `fused_inv_prefix`). -/
theorem fused_inv (evs : List (Event V G)) (hgood : HookLast evs) :
    ∀ (st : Store V S G) (q : Nat),
      (hooked q evs = true →
        (fusedRun gadd update evs st).param q
          = (updateOpt update q (st.param q) (st.opt q) (backward gadd st.param evs st.grad q)).1
        ∧ (fusedRun gadd update evs st).opt q
          = (updateOpt update q (st.param q) (st.opt q) (backward gadd st.param evs st.grad q)).2
        ∧ (fusedRun gadd update evs st).grad q = none)
      ∧ (hooked q evs = false →
        (fusedRun gadd update evs st).param q = st.param q
        ∧ (fusedRun gadd update evs st).opt q = st.opt q
        ∧ (fusedRun gadd update evs st).grad q = backward gadd st.param evs st.grad q) := by
  induction evs with
  | nil =>
    intro st q
    exact ⟨fun h => (Bool.false_ne_true h).elim, fun _ => ⟨rfl, rfl, rfl⟩⟩
  | cons e es ih =>
    intro st q
    cases e with
    | contribute p rs f => exact ih hgood _ q
    | hook p =>
      have ⟨hu, hg⟩ := hgood
      have ihs := ih hg (hookUpdate update st p) q
      -- the standard gradient: a hook adds nothing
      have hb : backward gadd st.param (List.cons (Event.hook p) es) st.grad q
          = backward gadd st.param es st.grad q := rfl
      rw [hb]
      change (bor (Nat.beq q p) (hooked q es) = true → _) ∧ (bor (Nat.beq q p) (hooked q es) = false → _)
      cases hq : Nat.beq q p with
      | true =>
        have e := Nat.eq_of_beq_eq_true hq
        rw [e]
        rw [e] at ihs
        have ⟨s1, s2, s3⟩ := hookUpdate_self update st p
        have hc := contributes_untouched p es hu
        -- whether or not `p` is hooked again later, nothing more happens to it
        have after : (fusedRun gadd update es (hookUpdate update st p)).param p
              = (hookUpdate update st p).param p
            ∧ (fusedRun gadd update es (hookUpdate update st p)).opt p
              = (hookUpdate update st p).opt p
            ∧ (fusedRun gadd update es (hookUpdate update st p)).grad p = none := by
          have hnone : backward gadd (hookUpdate update st p).param es
              (hookUpdate update st p).grad p = none := by
            rw [backward_other gadd _ es _ p hc, s3]
          cases hh : hooked p es with
          | true =>
            have ⟨a1, a2, a3⟩ := ihs.1 hh
            rw [hnone] at a1; rw [hnone] at a2
            exact ⟨a1, a2, a3⟩
          | false =>
            have ⟨a1, a2, a3⟩ := ihs.2 hh
            rw [hnone] at a3
            exact ⟨a1, a2, a3⟩
        have ⟨a1, a2, a3⟩ := after
        refine ⟨fun _ => ?_, fun h => (Bool.false_ne_true (Eq.symm h)).elim⟩
        rw [backward_other gadd _ es _ p hc]
        exact ⟨Eq.trans a1 s1, Eq.trans a2 s2, a3⟩
      | false =>
        have ⟨o1, o2, o3⟩ := hookUpdate_other update st p q hq
        have hparams : ∀ r, Nat.beq r p = false → (hookUpdate update st p).param r = st.param r :=
          fun r hr => (hookUpdate_other update st p r hr).1
        have hback : backward gadd (hookUpdate update st p).param es (hookUpdate update st p).grad q
            = backward gadd st.param es st.grad q := by
          rw [backward_params gadd _ st.param p hparams es hu]
          exact backward_local gadd st.param es _ _ q o3
        rw [hback, o1, o2] at ihs
        exact ihs

/-- **Optimizer in backward equals backward then `optimizer.step()`**, from any starting gradients
(gradient accumulation), if every parameter that has a gradient at the start or receives a
contribution is hooked, and no contribution to `p` and no read of `p` comes after a hook of `p`;
the fused run frees every gradient (Coq: `fused_eq_standard_from` in
`rocq/InBackward/Equivalence.v`). -/
theorem fused_eq_standard (evs : List (Event V G)) (st : Store V S G)
    (hcover : ∀ q, (st.grad q = none → False) ∨ contributes q evs = true → hooked q evs = true)
    (hgood : HookLast evs) (q : Nat) :
    (fusedRun gadd update evs st).param q = (standardRun gadd update evs st).param q
    ∧ (fusedRun gadd update evs st).opt q = (standardRun gadd update evs st).opt q
    ∧ (fusedRun gadd update evs st).grad q = none := by
  have inv := fused_inv gadd update evs hgood st q
  cases hh : hooked q evs with
  | true => exact inv.1 hh
  | false =>
    have ⟨a1, a2, a3⟩ := inv.2 hh
    have hc : contributes q evs = false := by
      cases hc : contributes q evs with
      | false => rfl
      | true => rw [hcover q (Or.inr hc)] at hh; exact (Bool.false_ne_true (Eq.symm hh)).elim
    have hg : st.grad q = none := by
      cases hg : st.grad q with
      | none => rfl
      | some g =>
        have h := hcover q (Or.inl (fun h' => some_ne_none (Eq.trans (Eq.symm hg) h')))
        rw [h] at hh; exact (Bool.false_ne_true (Eq.symm hh)).elim
    have hb : backward gadd st.param evs st.grad q = none := by
      rw [backward_other gadd st.param evs st.grad q hc, hg]
    change _ = (updateOpt update q (st.param q) (st.opt q) (backward gadd st.param evs st.grad q)).1
      ∧ _ = (updateOpt update q (st.param q) (st.opt q) (backward gadd st.param evs st.grad q)).2
      ∧ _
    rw [hb]
    rw [hb] at a3
    exact ⟨a1, a2, a3⟩

end Semantics

/-! ## Counterexamples: what the theorem does not cover -/

section Counterexamples
variable {α : Type} [ExpField α]
open ExpField

/-- SGD without momentum, learning rate `lr`: `p ← p - lr * g` (Coq: `sgd_R lr None`, from
`sgd_update` of `rocq/InBackward/UpdateRules.v`). -/
def sgd (lr : α) : Nat → α → Unit → α → α × Unit := fun _ v s g => (v - lr * g, s)

/-- Every parameter at `v`, no optimizer state, no gradient (Coq: `init_store`). -/
def initStore (v : α) : Store α Unit α := ⟨fun _ => v, fun _ => Unit.unit, fun _ => none⟩

/-- The first value read, `0` if none. -/
def headOr0 : List α → α
  | [] => 0
  | .cons x _ => x

/-- One micro-batch with loss `p² / 2` for the parameter `0`: the gradient `p` reads `p`, then
the hook (Coq: `backward_events square_tape`). -/
def squareEvents : List (Event α α) := [.contribute 0 [0] headOr0, .hook 0]

/-- Naive fusion with gradient accumulation: every micro-batch's backward is fused
(Coq: `fused_accum_run` in `rocq/InBackward/Variants.v`). -/
def fusedAccumRun {V S G : Type} (gadd : G → G → G) (update : Nat → V → S → G → V × S)
    (mbs : List (List (Event V G))) (st : Store V S G) : Store V S G :=
  List.foldl (fun st evs => fusedRun gadd update evs st) st mbs

/-- **Per-micro-batch updates are not backward-then-step**: two micro-batches of `p² / 2`, SGD
with learning rate 1 at every hook, from `p = 1`, give 0; accumulating both gradients then
stepping gives `-1` (Coq: `accum_fused_neq_standard` in
`rocq/InBackward/Counterexamples.v`, learning rate 1/2 there: 1/4 against 0). -/
theorem accum_fused_neq_standard :
    (fusedAccumRun (fun a b => a + b) (sgd 1) [squareEvents, squareEvents] (initStore (1 : α))).param 0
      ≠ (standardRun (fun a b => a + b) (sgd 1) (squareEvents ++ squareEvents) (initStore (1 : α))).param 0 := by
  intro h
  have hf : (fusedAccumRun (fun a b => a + b) (sgd 1) [squareEvents, squareEvents]
      (initStore (1 : α))).param 0 = (1 - 1 * 1) - 1 * (1 - 1 * 1) := rfl
  have hs : (standardRun (fun a b => a + b) (sgd 1) (squareEvents ++ squareEvents)
      (initStore (1 : α))).param 0 = 1 - 1 * (1 + 1) := rfl
  rw [hf, hs] at h
  have z : (1 : α) - 1 * 1 = 0 := by rw [one_mul, sub_self]
  rw [z, mul_zero, sub_self, one_mul] at h
  -- h : 0 = 1 - (1 + 1), so 1 + 1 = 1, so 1 = 0
  have h2 := congrArg (fun x => x + (1 + 1)) h
  change 0 + (1 + 1) = 1 - (1 + 1) + (1 + 1) at h2
  rw [zero_add, sub_add_cancel] at h2
  have h3 := congrArg (fun x => x + -1) h2
  change 1 + 1 + -1 = 1 + -1 at h3
  rw [add_assoc, add_neg_cancel, add_zero] at h3
  exact zero_ne_one (Eq.symm h3)

/-- Squared norm of an optional gradient, `none`: 0 (Coq: `onorm2`). -/
def onorm2 : Option α → α
  | none => 0
  | some g => g * g

/-- Backward, then global clipping (every gradient scaled by `coef` of the squared global norm of
the gradients of `ps`), then step (Coq: `standard_clip_run`, where the coefficient is
`clip_coef max_norm (sqrt total)`). -/
def standardClipRun {V S : Type} (gadd : α → α → α) (update : Nat → V → S → α → V × S)
    (coef : α → α) (ps : List Nat) (evs : List (Event V α)) (st : Store V S α) : Store V S α :=
  optimizerStep (fun q v s g => update q v s
      (coef (sum (List.map (fun q => onorm2 (backward gadd st.param evs st.grad q)) ps)) * g))
    ⟨st.param, st.opt, backward gadd st.param evs st.grad⟩

/-- Two parameters with constant gradients `a` and `b`, in the order of `loss.backward()` (the
later operation first) (Coq: `backward_events clip_tape`, with `a = 3`, `b = 4`). -/
def clipEvents (a b : α) : List (Event α α) :=
  [.contribute 1 [1] (fun _ => b), .hook 1, .contribute 0 [0] (fun _ => a), .hook 0]

/-- **Global clipping cannot be done at the hooks**: updating each parameter at its hook with its
unclipped gradient differs from backward, clip, step, whenever the clip is active (its coefficient
at the global norm is not 1) and the gradient is not zero (Coq: `clip_unclipped_neq_standard` in
`rocq/InBackward/Counterexamples.v`, gradients 3 and 4, `max_norm` 1). -/
theorem clip_unclipped_neq_standard (coef : α → α) (a b : α) (hb : b ≠ 0)
    (hclip : coef (a * a + (b * b + 0)) ≠ 1) :
    (fusedRun (fun x y => x + y) (sgd 1) (clipEvents a b) (initStore 0)).param 1
      ≠ (standardClipRun (fun x y => x + y) (sgd 1) coef [0, 1] (clipEvents a b) (initStore 0)).param 1 := by
  intro h
  have hf : (fusedRun (fun x y => x + y) (sgd 1) (clipEvents a b) (initStore 0)).param 1
      = 0 - 1 * b := rfl
  have hs : (standardClipRun (fun x y => x + y) (sgd 1) coef [0, 1] (clipEvents a b)
      (initStore 0)).param 1 = 0 - 1 * (coef (a * a + (b * b + 0)) * b) := rfl
  rw [hf, hs, one_mul, one_mul] at h
  have h2 := Eq.trans (one_mul b) (sub_left_cancel h)
  exact hclip (Eq.symm (mul_right_cancel hb h2))

end Counterexamples

end OptimizerInBackward
end Ojas
