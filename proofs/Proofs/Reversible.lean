prelude
import Proofs.Lists
/-!
# (c) Reversible coupling layers: exact inversion, and backprop through reconstructed inputs

Mirror of `rocq/Reversible/Coupling.v`, `rocq/Reversible/Stack.v` and
`rocq/Reversible/Gradient.v`.  The layer works over any commutative group (Coq: `group_ops` with
`comm_group_laws`, written with subtraction): vectors, reals, or any ordered field.
-/

namespace Ojas
namespace Reversible

/-- A commutative group written with subtraction (Coq: `comm_group_laws`): `+` associative and
commutative with neutral `0`, and `a - b` the solution of `? + b = a`. -/
class CommGroup (T : Type) extends Zero T, Add T, Sub T where
  add_assoc : ∀ a b c : T, a + b + c = a + (b + c)
  add_comm : ∀ a b : T, a + b = b + a
  add_zero : ∀ a : T, a + 0 = a
  sub_add : ∀ a b : T, a - b + b = a

/-- Every ordered field of `Field.lean` is such a group (Coq: `R_group_laws`). -/
instance {α : Type} [ExpField α] : CommGroup α where
  add_assoc := ExpField.add_assoc
  add_comm := ExpField.add_comm
  add_zero := ExpField.add_zero
  sub_add := fun a b => by
    rw [ExpField.sub_eq_add_neg, ExpField.add_assoc, ExpField.neg_add_cancel, ExpField.add_zero]

namespace CommGroup
variable {T : Type} [CommGroup T]

/-- `(a + b) - b = a` (Coq: `g_add_sub`). -/
theorem add_sub (a b : T) : a + b - b = a := by
  have k : ∀ x : T, x + b + (0 - b) = x := by
    intro x
    rw [add_assoc, add_comm b, sub_add, add_zero]
  have h := k (a + b - b)
  rw [sub_add, k a] at h
  exact Eq.symm h
end CommGroup

open CommGroup
variable {T : Type} [CommGroup T]

/-- Forward: `y₁ = x₁ + f x₂`, `y₂ = x₂ + g y₁` (Coq: `coupling_forward`). -/
def couplingForward (f g : T → T) (x : T × T) : T × T :=
  (x.1 + f x.2, x.2 + g (x.1 + f x.2))

/-- Inverse: `x₂ = y₂ - g y₁`, `x₁ = y₁ - f x₂` (Coq: `coupling_inverse`). -/
def couplingInverse (f g : T → T) (y : T × T) : T × T :=
  (y.1 - f (y.2 - g y.1), y.2 - g y.1)

/-- **The inverse undoes the forward pass exactly**, for arbitrary `f`, `g`
(Coq: `coupling_inverse_forward` in `rocq/Reversible/Coupling.v`). -/
theorem coupling_inverse_forward (f g : T → T) (x : T × T) :
    couplingInverse f g (couplingForward f g x) = x := by
  change ((x.1 + f x.2) - f ((x.2 + g (x.1 + f x.2)) - g (x.1 + f x.2)),
    (x.2 + g (x.1 + f x.2)) - g (x.1 + f x.2)) = x
  rw [add_sub, add_sub]

/-- The forward pass undoes the inverse exactly (Coq: `coupling_forward_inverse`). -/
theorem coupling_forward_inverse (f g : T → T) (y : T × T) :
    couplingForward f g (couplingInverse f g y) = y := by
  change ((y.1 - f (y.2 - g y.1)) + f (y.2 - g y.1),
    (y.2 - g y.1) + g ((y.1 - f (y.2 - g y.1)) + f (y.2 - g y.1))) = y
  rw [sub_add, sub_add]

/-- A coupling layer: its two residual functions (Coq: `coupling_layer`). -/
structure Layer (T : Type) where
  f : T → T
  g : T → T

def layerForward (l : Layer T) (x : T × T) : T × T := couplingForward l.f l.g x
def layerInverse (l : Layer T) (y : T × T) : T × T := couplingInverse l.f l.g y

/-- Forward through the stack, first layer first (Coq: `stack_forward`). -/
def stackForward : List (Layer T) → T × T → T × T
  | [], x => x
  | .cons l ls, x => stackForward ls (layerForward l x)

/-- Inverse of the stack: the layer inverses, last layer first (Coq: `stack_inverse`, a fold over
the reversed list; `run_inverse_cons` there is the second equation here). -/
def stackInverse : List (Layer T) → T × T → T × T
  | [], y => y
  | .cons l ls, y => layerInverse l (stackInverse ls y)

/-- **A stack of coupling layers is inverted exactly** by the reversed layer inverses
(Coq: `stack_inverse_forward` in `rocq/Reversible/Stack.v`). -/
theorem stack_inverse_forward (ls : List (Layer T)) (x : T × T) :
    stackInverse ls (stackForward ls x) = x := by
  induction ls generalizing x with
  | nil => rfl
  | cons l ls ih =>
    change layerInverse l (stackInverse ls (stackForward ls (layerForward l x))) = x
    rw [ih]
    exact coupling_inverse_forward l.f l.g x

/-- The stack undoes its inverse exactly (Coq: `stack_forward_inverse`). -/
theorem stack_forward_inverse (ls : List (Layer T)) (y : T × T) :
    stackForward ls (stackInverse ls y) = y := by
  induction ls generalizing y with
  | nil => rfl
  | cons l ls ih =>
    change stackForward ls (layerForward l (layerInverse l (stackInverse ls y))) = y
    rw [layerForward, layerInverse, coupling_forward_inverse, ih]

/-! ## Backprop from reconstructed inputs equals backprop from stored activations -/

section Backprop
variable {S D P L : Type} (apply invert : L → S → S) (vjp : L → S → D → D × P)

/-- The forward pass storing the input of every layer, and the output (Coq: `forward_acts`). -/
def forwardActs : List L → S → List S × S
  | [], x => ([], x)
  | .cons l ls, x => (List.cons x (forwardActs ls (apply l x)).1, (forwardActs ls (apply l x)).2)

/-- Ordinary backprop from the stored inputs, last layer first: the input gradient and the
parameter gradients in layer order (Coq: `backprop_stored`, a fold of `stored_step` over the
reversed layer/activation pairs). -/
def backpropStored : List L → List S → D → D × List P
  | .cons l ls, .cons a acts, dy =>
    ((vjp l a (backpropStored ls acts dy).1).1,
     List.cons (vjp l a (backpropStored ls acts dy).1).2 (backpropStored ls acts dy).2)
  | _, _, dy => (dy, [])

/-- Reversible backprop from the output and its cotangent, last layer first: each layer's input is
reconstructed from its output by `invert`, then its `vjp` is taken there (Coq:
`backprop_reversible`, a fold of `reversible_step` over the reversed layers). -/
def backpropReversible : List L → S → D → S × D × List P
  | [], y, dy => (y, dy, [])
  | .cons l ls, y, dy =>
    (invert l (backpropReversible ls y dy).1,
     (vjp l (invert l (backpropReversible ls y dy).1) (backpropReversible ls y dy).2.1).1,
     List.cons (vjp l (invert l (backpropReversible ls y dy).1) (backpropReversible ls y dy).2.1).2
       (backpropReversible ls y dy).2.2)

/-- **Backprop through reconstructed inputs equals stored-activation backprop**: if every layer is
inverted exactly, the reversible backward pass reconstructs the network input and returns exactly
the input and parameter gradients of ordinary backprop (Coq: `backprop_reversible_correct` in
`rocq/Reversible/Gradient.v`). -/
theorem backprop_reversible_correct (invert_apply : ∀ l x, invert l (apply l x) = x)
    (ls : List L) (x : S) (dy : D) :
    backpropReversible invert vjp ls (forwardActs apply ls x).2 dy
      = (x, (backpropStored vjp ls (forwardActs apply ls x).1 dy).1,
            (backpropStored vjp ls (forwardActs apply ls x).1 dy).2) := by
  induction ls generalizing x with
  | nil => rfl
  | cons l ls ih =>
    have h := ih (apply l x)
    change (invert l (backpropReversible invert vjp ls (forwardActs apply ls (apply l x)).2 dy).1,
      (vjp l (invert l (backpropReversible invert vjp ls (forwardActs apply ls (apply l x)).2 dy).1)
        (backpropReversible invert vjp ls (forwardActs apply ls (apply l x)).2 dy).2.1).1,
      List.cons (vjp l (invert l (backpropReversible invert vjp ls (forwardActs apply ls (apply l x)).2 dy).1)
        (backpropReversible invert vjp ls (forwardActs apply ls (apply l x)).2 dy).2.1).2
        (backpropReversible invert vjp ls (forwardActs apply ls (apply l x)).2 dy).2.2)
      = (x, (vjp l x (backpropStored vjp ls (forwardActs apply ls (apply l x)).1 dy).1).1,
          List.cons (vjp l x (backpropStored vjp ls (forwardActs apply ls (apply l x)).1 dy).1).2
            (backpropStored vjp ls (forwardActs apply ls (apply l x)).1 dy).2)
    rw [h]
    change (invert l (apply l x), (vjp l (invert l (apply l x)) _).1,
      List.cons (vjp l (invert l (apply l x)) _).2 _) = _
    rw [invert_apply]

end Backprop

/-- **Through a stack of coupling layers, reversible backprop equals ordinary backprop**, for any
local `vjp` (Coq: `backprop_coupling` in `rocq/Reversible/Gradient.v`). -/
theorem backprop_coupling {D P : Type} (vjp : Layer T → T × T → D → D × P)
    (ls : List (Layer T)) (x : T × T) (dy : D) :
    backpropReversible layerInverse vjp ls (forwardActs layerForward ls x).2 dy
      = (x, (backpropStored vjp ls (forwardActs layerForward ls x).1 dy).1,
            (backpropStored vjp ls (forwardActs layerForward ls x).1 dy).2) :=
  backprop_reversible_correct layerForward layerInverse vjp
    (fun l x => coupling_inverse_forward l.f l.g x) ls x dy

end Reversible
end Ojas
