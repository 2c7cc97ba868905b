prelude
import Proofs.Meta
/-!
# The kernel-accelerated `Nat` functions of `Core.lean` are the standard ones

The kernel evaluates `Nat.add`, `Nat.sub`, `Nat.mul`, `Nat.beq` and `Nat.ble` on literals with GMP,
trusting that the constants with these names are the usual functions.  The theorems below are
their defining equations, on variables, so the kernel checks them by unfolding the definitions of
`Core.lean` (GMP is not involved); together they determine each function uniquely.  The last
block spot-checks GMP against them on literals.
-/

namespace CoreAudit

theorem add_zero (n : Nat) : Nat.add n Nat.zero = n := rfl
theorem add_succ (n m : Nat) : Nat.add n (Nat.succ m) = Nat.succ (Nat.add n m) := rfl
theorem mul_zero (n : Nat) : Nat.mul n Nat.zero = Nat.zero := rfl
theorem mul_succ (n m : Nat) : Nat.mul n (Nat.succ m) = Nat.add (Nat.mul n m) n := rfl
theorem pred_zero : Nat.pred Nat.zero = Nat.zero := rfl
theorem pred_succ (n : Nat) : Nat.pred (Nat.succ n) = n := rfl
theorem sub_zero (n : Nat) : Nat.sub n Nat.zero = n := rfl
theorem sub_succ (n m : Nat) : Nat.sub n (Nat.succ m) = Nat.pred (Nat.sub n m) := rfl
theorem beq_zero_zero : Nat.beq Nat.zero Nat.zero = true := rfl
theorem beq_zero_succ (m : Nat) : Nat.beq Nat.zero (Nat.succ m) = false := rfl
theorem beq_succ_zero (n : Nat) : Nat.beq (Nat.succ n) Nat.zero = false := rfl
theorem beq_succ_succ (n m : Nat) : Nat.beq (Nat.succ n) (Nat.succ m) = Nat.beq n m := rfl
theorem ble_zero (m : Nat) : Nat.ble Nat.zero m = true := rfl
theorem ble_succ_zero (n : Nat) : Nat.ble (Nat.succ n) Nat.zero = false := rfl
theorem ble_succ_succ (n m : Nat) : Nat.ble (Nat.succ n) (Nat.succ m) = Nat.ble n m := rfl

/-- GMP on literals agrees with the unary definitions on small cases. -/
theorem gmp_small : Nat.add 2 3 = Nat.succ (Nat.succ (Nat.succ (Nat.succ (Nat.succ Nat.zero))))
    ∧ Nat.mul 2 3 = 6 ∧ Nat.sub 2 3 = 0 ∧ Nat.sub 3 2 = 1 ∧ Nat.beq 3 3 = true ∧ Nat.beq 2 3 = false
    ∧ Nat.ble 3 2 = false ∧ Nat.ble 2 3 = true :=
  ⟨rfl, rfl, rfl, rfl, rfl, rfl, rfl, rfl⟩

/-- Big literals go through GMP: 10¹¹ · 10¹¹ = 10²². -/
theorem gmp_big : Nat.mul 100000000000 100000000000 = 10000000000000000000000 := rfl

end CoreAudit
