prelude
import Proofs.Field
/-!
# List functions and sums used by the specifications (ordinary definitions, not trusted)
-/

namespace Ojas

def List.map {β γ : Type} (f : β → γ) : List β → List γ
  | [] => []
  | .cons x xs => .cons (f x) (List.map f xs)

def List.foldl {β γ : Type} (f : γ → β → γ) : γ → List β → γ
  | acc, [] => acc
  | acc, .cons x xs => List.foldl f (f acc x) xs

/-- Concatenation of a list of lists (Coq: `concat`). -/
def List.flatten {β : Type} : List (List β) → List β
  | [] => []
  | .cons xs xss => xs ++ List.flatten xss

def List.filter {β : Type} (p : β → Bool) : List β → List β
  | [] => []
  | .cons x xs => cond (p x) (.cons x (List.filter p xs)) (List.filter p xs)

def Option.map {β γ : Type} (f : β → γ) : Option β → Option γ
  | none => none
  | some x => some (f x)

/-- `some a ≠ none`. -/
theorem some_ne_none {β : Type} {a : β} (h : some a = none) : False :=
  Eq.ndrec (motive := fun (o : Option β) => match o with | none => False | some _ => True)
    (a := some a) True.intro h

theorem List.nil_append {β : Type} (xs : List β) : [] ++ xs = xs := rfl
theorem List.cons_append {β : Type} (x : β) (xs ys : List β) : (List.cons x xs) ++ ys = List.cons x (xs ++ ys) := rfl
theorem List.append_nil {β : Type} (xs : List β) : xs ++ [] = xs := by
  induction xs with
  | nil => rfl
  | cons x xs ih => rw [List.cons_append, ih]
theorem List.append_assoc {β : Type} (xs ys zs : List β) : xs ++ ys ++ zs = xs ++ (ys ++ zs) := by
  induction xs with
  | nil => rfl
  | cons x xs ih => rw [List.cons_append, List.cons_append, List.cons_append, ih]
theorem List.map_append {β γ : Type} (f : β → γ) (xs ys : List β) :
    List.map f (xs ++ ys) = List.map f xs ++ List.map f ys := by
  induction xs with
  | nil => rfl
  | cons x xs ih => rw [List.cons_append]; change List.cons (f x) (List.map f (xs ++ ys)) = _; rw [ih]; rfl
theorem List.foldl_append {β γ : Type} (f : γ → β → γ) (a : γ) (xs ys : List β) :
    List.foldl f a (xs ++ ys) = List.foldl f (List.foldl f a xs) ys := by
  induction xs generalizing a with
  | nil => rfl
  | cons x xs ih => exact ih (f a x)
theorem List.flatten_cons {β : Type} (xs : List β) (xss : List (List β)) :
    List.flatten (List.cons xs xss) = xs ++ List.flatten xss := rfl

variable {α : Type} [ExpField α]
open ExpField

/-- Sum of a list (Coq: `sc_sum`, `rsum`), `x₀ + (x₁ + (… + 0))`. -/
def sum : List α → α
  | [] => 0
  | .cons x xs => x + sum xs

theorem sum_nil : sum ([] : List α) = 0 := rfl
theorem sum_cons (x : α) (xs : List α) : sum (List.cons x xs) = x + sum xs := rfl

theorem sum_append (xs ys : List α) : sum (xs ++ ys) = sum xs + sum ys := by
  induction xs with
  | nil => rw [List.nil_append, sum_nil, zero_add]
  | cons x xs ih => rw [List.cons_append, sum_cons, sum_cons, ih, add_assoc]

/-- `c * Σ f k = Σ c * f k`. -/
theorem mul_sum_map {β : Type} (c : α) (f : β → α) (xs : List β) :
    c * sum (List.map f xs) = sum (List.map (fun k => c * f k) xs) := by
  induction xs with
  | nil => exact mul_zero c
  | cons x xs ih =>
    change c * (f x + sum (List.map f xs)) = c * f x + sum (List.map (fun k => c * f k) xs)
    rw [mul_add, ih]

/-- Sums of pointwise-equal maps are equal. -/
theorem sum_map_congr {β : Type} (f g : β → α) (xs : List β) (h : ∀ k, f k = g k) :
    sum (List.map f xs) = sum (List.map g xs) := by
  induction xs with
  | nil => rfl
  | cons x xs ih =>
    change f x + sum (List.map f xs) = g x + sum (List.map g xs)
    rw [h x, ih]

/-- `Σ (f k + g k) = Σ f k + Σ g k`. -/
theorem sum_map_add {β : Type} (f g : β → α) (xs : List β) :
    sum (List.map (fun k => f k + g k) xs) = sum (List.map f xs) + sum (List.map g xs) := by
  induction xs with
  | nil => rw [List.map, List.map, List.map, sum_nil, zero_add]
  | cons x xs ih =>
    change f x + g x + sum (List.map (fun k => f k + g k) xs)
      = f x + sum (List.map f xs) + (g x + sum (List.map g xs))
    rw [ih, add_assoc, add_assoc, add_left_comm (g x)]

/-- Dropping the entries that fail `p` from a sum is summing `f` where `p` holds, 0 elsewhere
(Coq: `rsum_filter` in `rocq/LinearCrossEntropy/Reduction.v`). -/
theorem sum_map_filter {β : Type} (p : β → Bool) (f : β → α) (xs : List β) :
    sum (List.map (fun x => cond (p x) (f x) 0) xs) = sum (List.map f (List.filter p xs)) := by
  induction xs with
  | nil => rfl
  | cons x xs ih =>
    change cond (p x) (f x) 0 + sum (List.map (fun x => cond (p x) (f x) 0) xs)
      = sum (List.map f (cond (p x) (List.cons x (List.filter p xs)) (List.filter p xs)))
    cases hp : p x with
    | true =>
      change f x + _ = f x + sum (List.map f (List.filter p xs))
      rw [ih]
    | false =>
      change 0 + _ = sum (List.map f (List.filter p xs))
      rw [zero_add, ih]

end Ojas
