prelude
import Proofs.Meta
/-!
# An abstract ordered field with `exp` and `log`

The specifications are stated over any type `α` with the operations and laws below, so they hold
in particular for the real numbers (every law is a standard fact about ℝ, `exp` and `log`); no
real number is constructed.  This mirrors the Coq proofs, which work in `R` through the record
`ScalarOps` (`rocq/ScalarOps.v`) instantiated at `R_ops`.

`max` is an operation with three laws (an upper bound of both arguments, equal to one of them);
its commutativity and associativity are proved below from these and antisymmetry.
-/

namespace Ojas

class Zero (α : Type) where
  zero : α
class One (α : Type) where
  one : α
class Inv (α : Type) where
  inv : α → α
class Max (α : Type) where
  max : α → α → α
class ExpLog (α : Type) where
  exp : α → α
  log : α → α

instance {α : Type} [Zero α] : OfNat α 0 := ⟨Zero.zero⟩
instance {α : Type} [One α] : OfNat α 1 := ⟨One.one⟩

export Max (max)
export ExpLog (exp log)

/-- An ordered field with `max`, `exp` and `log` (laws true in ℝ). -/
class ExpField (α : Type) extends Zero α, One α, Add α, Mul α, Neg α, Sub α, Div α, Inv α,
    LE α, LT α, Max α, ExpLog α where
  add_assoc : ∀ a b c : α, a + b + c = a + (b + c)
  add_comm : ∀ a b : α, a + b = b + a
  zero_add : ∀ a : α, 0 + a = a
  neg_add_cancel : ∀ a : α, -a + a = 0
  sub_eq_add_neg : ∀ a b : α, a - b = a + -b
  mul_assoc : ∀ a b c : α, a * b * c = a * (b * c)
  mul_comm : ∀ a b : α, a * b = b * a
  one_mul : ∀ a : α, 1 * a = a
  mul_add : ∀ a b c : α, a * (b + c) = a * b + a * c
  div_eq_mul_inv : ∀ a b : α, a / b = a * Inv.inv b
  mul_inv_cancel : ∀ a : α, a ≠ 0 → a * Inv.inv a = 1
  le_refl : ∀ a : α, a ≤ a
  le_trans : ∀ a b c : α, a ≤ b → b ≤ c → a ≤ c
  le_antisymm : ∀ a b : α, a ≤ b → b ≤ a → a = b
  lt_iff_le_ne : ∀ a b : α, a < b ↔ a ≤ b ∧ a ≠ b
  add_le_add_left : ∀ a b c : α, a ≤ b → c + a ≤ c + b
  le_max_left : ∀ a b : α, a ≤ max a b
  le_max_right : ∀ a b : α, b ≤ max a b
  max_choice : ∀ a b : α, max a b = a ∨ max a b = b
  exp_add : ∀ a b : α, exp (a + b) = exp a * exp b
  exp_pos : ∀ a : α, 0 < exp a
  log_exp : ∀ a : α, log (exp a) = a
  exp_log : ∀ a : α, 0 < a → exp (log a) = a

namespace ExpField
variable {α : Type} [F : ExpField α]

theorem add_zero (a : α) : a + 0 = a := by rw [add_comm, zero_add]
theorem add_neg_cancel (a : α) : a + -a = 0 := by rw [add_comm, neg_add_cancel]
theorem sub_self (a : α) : a - a = 0 := by rw [sub_eq_add_neg, add_neg_cancel]
theorem mul_one (a : α) : a * 1 = a := by rw [mul_comm, one_mul]
theorem add_mul (a b c : α) : (a + b) * c = a * c + b * c := by
  rw [mul_comm, mul_add, mul_comm c a, mul_comm c b]
theorem mul_zero (a : α) : a * 0 = 0 := by
  have h : a * 0 + a * 0 = a * 0 + 0 := by rw [← mul_add, zero_add, add_zero]
  have h2 := congrArg (fun x => -(a * 0) + x) h
  change -(a * 0) + (a * 0 + a * 0) = -(a * 0) + (a * 0 + 0) at h2
  rw [← add_assoc, ← add_assoc, neg_add_cancel, zero_add, zero_add] at h2
  exact h2
theorem zero_mul (a : α) : 0 * a = 0 := by rw [mul_comm, mul_zero]
theorem add_left_comm (a b c : α) : a + (b + c) = b + (a + c) := by
  rw [← add_assoc, add_comm a b, add_assoc]
theorem mul_left_comm (a b c : α) : a * (b * c) = b * (a * c) := by
  rw [← mul_assoc, mul_comm a b, mul_assoc]

/-- `(a - b) + (b - c) = a - c`. -/
theorem sub_add_sub (a b c : α) : (a - b) + (b - c) = a - c := by
  rw [sub_eq_add_neg, sub_eq_add_neg, sub_eq_add_neg, add_assoc, ← add_assoc (-b),
    neg_add_cancel, zero_add]

/-- `exp (a - c) = exp (a - b) * exp (b - c)`: rescaling from one reference point to another. -/
theorem exp_sub_split (a b c : α) : exp (a - c) = exp (b - c) * exp (a - b) := by
  rw [← exp_add, add_comm, sub_add_sub]

theorem exp_zero : exp (0 : α) = 1 := by
  have h : exp (0 : α) * exp 0 = exp 0 * 1 := by rw [← exp_add, zero_add, mul_one]
  have hne : exp (0 : α) ≠ 0 := fun h0 => ((lt_iff_le_ne 0 (exp 0)).mp (exp_pos 0)).2 (Eq.symm h0)
  have h2 := congrArg (fun x => Inv.inv (exp (0 : α)) * x) h
  change Inv.inv (exp (0 : α)) * (exp 0 * exp 0) = Inv.inv (exp 0) * (exp 0 * 1) at h2
  rw [← mul_assoc, ← mul_assoc, mul_comm (Inv.inv (exp 0)), mul_inv_cancel _ hne, one_mul,
    one_mul] at h2
  exact h2

theorem max_comm (a b : α) : max a b = max b a := by
  apply le_antisymm
  · cases max_choice a b with
    | inl h => rw [h]; exact le_max_right b a
    | inr h => rw [h]; exact le_max_left b a
  · cases max_choice b a with
    | inl h => rw [h]; exact le_max_right a b
    | inr h => rw [h]; exact le_max_left a b

theorem max_le {a b c : α} (ha : a ≤ c) (hb : b ≤ c) : max a b ≤ c := by
  cases max_choice a b with
  | inl h => rw [h]; exact ha
  | inr h => rw [h]; exact hb

theorem max_assoc (a b c : α) : max (max a b) c = max a (max b c) := by
  apply le_antisymm
  · apply max_le
    · apply max_le
      · exact le_max_left a (max b c)
      · exact le_trans _ _ _ (le_max_left b c) (le_max_right a (max b c))
    · exact le_trans _ _ _ (le_max_right b c) (le_max_right a (max b c))
  · apply max_le
    · exact le_trans _ _ _ (le_max_left a b) (le_max_left (max a b) c)
    · apply max_le
      · exact le_trans _ _ _ (le_max_right a b) (le_max_left (max a b) c)
      · exact le_max_right (max a b) c

theorem le_of_lt {a b : α} (h : a < b) : a ≤ b := ((lt_iff_le_ne a b).mp h).1
theorem ne_of_lt {a b : α} (h : a < b) : a ≠ b := ((lt_iff_le_ne a b).mp h).2

theorem add_nonneg {a b : α} (ha : 0 ≤ a) (hb : 0 ≤ b) : 0 ≤ a + b := by
  have h := add_le_add_left 0 b a hb
  rw [add_zero] at h
  exact le_trans _ _ _ ha h

theorem add_pos_of_pos_of_nonneg {a b : α} (ha : 0 < a) (hb : 0 ≤ b) : 0 < a + b := by
  have h := add_le_add_left 0 b a hb
  rw [add_zero] at h
  apply (lt_iff_le_ne 0 (a + b)).mpr
  refine ⟨le_trans _ _ _ (le_of_lt ha) h, ?_⟩
  intro h0
  rw [← h0] at h
  exact ne_of_lt ha (le_antisymm _ _ (le_of_lt ha) h)

/-- `log (exp M * S) = M + log S` for `S > 0`. -/
theorem log_exp_mul {M S : α} (hS : 0 < S) : log (exp M * S) = M + log S := by
  rw [← exp_log S hS, ← exp_add, log_exp, log_exp]

theorem zero_ne_one : (0 : α) ≠ 1 := by
  have h := ne_of_lt (exp_pos (0 : α))
  rw [exp_zero] at h
  exact h

theorem sub_add_cancel (a b : α) : a - b + b = a := by
  rw [sub_eq_add_neg, add_assoc, neg_add_cancel, add_zero]

/-- `a - b = a - c → b = c`. -/
theorem sub_left_cancel {a b c : α} (h : a - b = a - c) : b = c := by
  rw [sub_eq_add_neg, sub_eq_add_neg] at h
  have h2 := congrArg (fun x => -a + x) h
  change -a + (a + -b) = -a + (a + -c) at h2
  rw [← add_assoc, ← add_assoc, neg_add_cancel, zero_add, zero_add] at h2
  calc b = b + (-c + c) := by rw [neg_add_cancel, add_zero]
    _ = b + (-b + c) := by rw [h2]
    _ = c := by rw [← add_assoc, add_neg_cancel, zero_add]

/-- `c * b = d * b → b ≠ 0 → c = d`. -/
theorem mul_right_cancel {b c d : α} (hb : b ≠ 0) (h : c * b = d * b) : c = d := by
  have h2 := congrArg (fun x => x * Inv.inv b) h
  change c * b * Inv.inv b = d * b * Inv.inv b at h2
  rw [mul_assoc, mul_assoc, mul_inv_cancel b hb, mul_one, mul_one] at h2
  exact h2

end ExpField
end Ojas
