/-!
# Scalar operations the algorithms are written over

Mirror of `rocq/ScalarOps.v`.  Every algorithm in `Proofs/` is a function
of a `ScalarOps` record; `floatOps` instantiates it with IEEE doubles so the
definitions can be run.
-/

namespace Ojas

/-- The scalar operations (Coq: `Record ScalarOps` in `rocq/ScalarOps.v`,
fields `sc_zero` … `sc_ltb`). -/
structure ScalarOps (α : Type) where
  zero : α
  one : α
  add : α → α → α
  sub : α → α → α
  mul : α → α → α
  div : α → α → α
  exp : α → α
  ln : α → α
  ltb : α → α → Bool

/-- The larger of two scalars, as the code computes it
(Coq: `sc_max` in `rocq/ScalarOps.v`). -/
protected def ScalarOps.max {α : Type} (o : ScalarOps α) (a b : α) : α :=
  if o.ltb a b then b else a

/-- Sum of a list, left to right (Coq: `sc_sum` in `rocq/ScalarOps.v`). -/
def ScalarOps.sum {α : Type} (o : ScalarOps α) (xs : List α) : α :=
  List.foldl o.add o.zero xs

/-- IEEE double instance, for running the definitions.  Not part of the
Coq development (there the executable instance is OCaml's float, see
`extraction/`); no law is claimed about it. -/
def floatOps : ScalarOps Float :=
  { zero := 0.0,
    one := 1.0,
    add := fun x y => x + y,
    sub := fun x y => x - y,
    mul := fun x y => x * y,
    div := fun x y => x / y,
    exp := Float.exp,
    ln := Float.log,
    ltb := fun x y => decide (x < y) }

end Ojas
