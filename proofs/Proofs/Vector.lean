import Proofs.ScalarOps

/-!
# Vectors as lists

Mirror of `rocq/Vector.v`.  `vadd` pads the shorter argument (missing
entries behave as zero).
-/

namespace Ojas

/-- Entry-by-entry sum, padding the shorter list
(Coq: `vadd` in `rocq/Vector.v`). -/
def vadd {α : Type} (o : ScalarOps α) (a b : List α) : List α :=
  match a, b with
  | x :: a', y :: b' => o.add x y :: vadd o a' b'
  | [], _ => b
  | _, [] => a

/-- `k * a`, entry by entry (Coq: `vscale` in `rocq/Vector.v`). -/
def vscale {α : Type} (o : ScalarOps α) (k : α) (a : List α) : List α :=
  List.map (o.mul k) a

/-- `a / k`, entry by entry (Coq: `vdiv` in `rocq/Vector.v`). -/
def vdiv {α : Type} (o : ScalarOps α) (a : List α) (k : α) : List α :=
  List.map (fun x => o.div x k) a

/-- Dot product, `x₀*y₀ + (x₁*y₁ + (… + 0))`, stopping at the shorter list
(Coq: `dot` in `rocq/Vector.v`). -/
def dot {α : Type} (o : ScalarOps α) (a b : List α) : α :=
  match a, b with
  | x :: a', y :: b' => o.add (o.mul x y) (dot o a' b')
  | _, _ => o.zero

/-- The zero vector of length `d` (Coq: `vzero` in `rocq/Vector.v`). -/
def vzero {α : Type} (o : ScalarOps α) (d : Nat) : List α :=
  List.replicate d o.zero

/-- `Σ_j w_j * v_j`, left to right, starting from the empty list
(Coq: `weighted_sum` in `rocq/Vector.v`). -/
def weightedSum {α : Type} (o : ScalarOps α) (ws : List α) (vs : List (List α)) : List α :=
  List.foldl (fun (acc : List α) (wv : α × List α) => vadd o acc (vscale o wv.1 wv.2))
    [] (List.zip ws vs)

end Ojas
