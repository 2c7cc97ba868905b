prelude
/-!
# The trusted core (read this file like a list of axioms)

Lean's elaborator and kernel refer to a few declarations by name (`Eq`, `HEq`, `PUnit`, `PProd`,
`Nat`, `Decidable`, `ite`, `OfNat`, ...).  Lean's own library (`Init`) is not available as
`.olean` files in the binary that checks these proofs (see `proofs/README.md`), so every file starts
with `prelude` and this module defines those names itself, in the standard way (the definitions
follow `Init/Prelude.lean` of Lean 4).

What a reviewer checks here:
* **Nothing postulated: every constant here is defined.** The code generator refers to `lcErased`, `lcAny` and `lcVoid` by
  name when a `structure` is compiled: they are `unsafe` definitions (so no theorem can use them),
  and the audit in `Audit.lean` shows every exported theorem depends on nothing assumed.
* **The `@[extern]` functions the kernel accelerates** with GMP arithmetic on literals:
  `Nat.add`, `Nat.sub`, `Nat.mul`, `Nat.pred` (compiler only), `Nat.beq`, `Nat.ble`.  The kernel
  trusts that a constant with one of these names computes the usual function, so each must be the
  standard structural definition; `Proofs/CoreAudit.lean` restates their defining equations and the
  kernel checks them by unfolding, on variables (no GMP involved).
* **`Nat` and `Bool`** must have the constructor shapes the kernel assumes for literals
  (`Nat.zero`/`Nat.succ`, `Bool.false`/`Bool.true`, in this order).
Everything else is an ordinary definition or theorem checked by the kernel like any other.
-/
set_option bootstrap.inductiveCheckResultingUniverse false in
inductive PUnit : Sort u where
  | unit : PUnit

/-- Types the code generator refers to by name; `unsafe`, never used in proofs. -/
unsafe def lcErased : Type := PUnit
unsafe def lcAny : Type := PUnit
unsafe def lcVoid : Type := PUnit

abbrev Unit : Type := PUnit
@[match_pattern] abbrev Unit.unit : Unit := PUnit.unit

inductive True : Prop where
  | intro : True
inductive False : Prop
inductive Empty : Type

def Not (a : Prop) : Prop := a → False
def False.elim {C : Sort u} (h : False) : C := h.rec
def absurd {a : Prop} {b : Sort v} (h₁ : a) (h₂ : Not a) : b := (h₂ h₁).rec

inductive Eq {α : Sort u} : α → α → Prop where
  | refl (a : α) : Eq a a
inductive HEq : {α : Sort u} → α → {β : Sort u} → β → Prop where
  | refl {α : Sort u} (a : α) : HEq a a

@[reducible] def id {α : Sort u} (a : α) : α := a
def Function.comp {α : Sort u} {β : Sort v} {δ : Sort w} (f : β → δ) (g : α → β) : α → δ :=
  fun x => f (g x)
@[reducible] def Function.const {α : Sort u} (β : Sort v) (a : α) : β → α := fun _ => a

abbrev Eq.ndrec.{u1, u2} {α : Sort u2} {a : α} {motive : α → Sort u1} (m : motive a) {b : α} (h : Eq a b) : motive b :=
  h.rec m
theorem rfl {α : Sort u} {a : α} : Eq a a := Eq.refl a
theorem Eq.subst {α : Sort u} {motive : α → Prop} {a b : α} (h₁ : Eq a b) (h₂ : motive a) : motive b :=
  Eq.ndrec h₂ h₁
theorem Eq.symm {α : Sort u} {a b : α} (h : Eq a b) : Eq b a := h.rec rfl
theorem Eq.trans {α : Sort u} {a b c : α} (h₁ : Eq a b) (h₂ : Eq b c) : Eq a c := h₂.rec h₁
@[macro_inline] def cast {α β : Sort u} (h : Eq α β) (a : α) : β := h.rec a
theorem congrArg {α : Sort u} {β : Sort v} {a₁ a₂ : α} (f : α → β) (h : Eq a₁ a₂) : Eq (f a₁) (f a₂) :=
  h.rec rfl
theorem congr {α : Sort u} {β : Sort v} {f₁ f₂ : α → β} {a₁ a₂ : α} (h₁ : Eq f₁ f₂) (h₂ : Eq a₁ a₂) : Eq (f₁ a₁) (f₂ a₂) :=
  h₁.rec (congrArg f₁ h₂)
theorem congrFun {α : Sort u} {β : α → Sort v} {f g : (x : α) → β x} (h : Eq f g) (a : α) : Eq (f a) (g a) :=
  h.rec rfl
@[macro_inline] def Eq.mp {α β : Sort u} (h : Eq α β) (a : α) : β := h.rec a
@[macro_inline] def Eq.mpr {α β : Sort u} (h : Eq α β) (b : β) : α := h.symm.rec b
theorem eq_of_heq {α : Sort u} {a a' : α} (h : HEq a a') : Eq a a' :=
  have : (α β : Sort u) → (a : α) → (b : β) → HEq a b → (e : Eq α β) → Eq (cast e a) b :=
    fun _ _ _ _ h₁ => h₁.rec (fun (_ : Eq _ _) => rfl)
  this α α a a' h rfl
theorem heq_of_eq {α : Sort u} {a a' : α} (h : Eq a a') : HEq a a' := h.rec (HEq.refl a)

structure PProd (α : Sort u) (β : Sort v) where
  fst : α
  snd : β

structure PSigma {α : Sort u} (β : α → Sort v) where
  fst : α
  snd : β fst
structure Prod (α : Type u) (β : Type v) where
  fst : α
  snd : β
structure And (a b : Prop) : Prop where
  intro ::
  left : a
  right : b
inductive Or (a b : Prop) : Prop where
  | inl (h : a) : Or a b
  | inr (h : b) : Or a b
structure Iff (a b : Prop) : Prop where
  intro ::
  mp : a → b
  mpr : b → a
inductive Exists {α : Sort u} (p : α → Prop) : Prop where
  | intro (w : α) (h : p w) : Exists p
structure PULift.{r, s} (α : Sort s) : Sort (max s r 1) where
  up :: down : α
inductive Bool : Type where
  | false : Bool
  | true : Bool
export Bool (false true)
class inductive Decidable (p : Prop) where
  | isFalse (h : Not p) : Decidable p
  | isTrue (h : p) : Decidable p
@[inline_if_reduce, nospecialize] def Decidable.decide (p : Prop) [h : Decidable p] : Bool :=
  h.casesOn (fun _ => false) (fun _ => true)
export Decidable (isTrue isFalse decide)
abbrev DecidableEq (α : Sort u) := (a b : α) → Decidable (Eq a b)
@[macro_inline] def dite {α : Sort u} (c : Prop) [h : Decidable c] (t : c → α) (e : Not c → α) : α :=
  h.casesOn e t
@[macro_inline] def ite {α : Sort u} (c : Prop) [h : Decidable c] (t e : α) : α :=
  h.casesOn (fun _ => e) (fun _ => t)
@[inline] def cond {α : Sort u} (c : Bool) (x y : α) : α :=
  match c with
  | true => x
  | false => y

set_option genCtorIdx false in
inductive Nat where
  | zero : Nat
  | succ (n : Nat) : Nat

class OfNat (α : Type u) (_ : Nat) where
  ofNat : α
@[default_instance 100]
instance instOfNatNat (n : Nat) : OfNat Nat n where
  ofNat := n

set_option bootstrap.genMatcherCode false in
@[extern "lean_nat_add"]
protected def Nat.add : (@& Nat) → (@& Nat) → Nat
  | n, .zero => n
  | n, .succ m => .succ (Nat.add n m)

set_option bootstrap.genMatcherCode false in
@[extern "lean_nat_mul"]
protected def Nat.mul : (@& Nat) → (@& Nat) → Nat
  | _, .zero => .zero
  | n, .succ m => Nat.add (Nat.mul n m) n

set_option bootstrap.genMatcherCode false in
@[extern "lean_nat_pred"]
def Nat.pred : (@& Nat) → Nat
  | .zero => .zero
  | .succ a => a

set_option bootstrap.genMatcherCode false in
@[extern "lean_nat_sub"]
protected def Nat.sub : (@& Nat) → (@& Nat) → Nat
  | n, .zero => n
  | n, .succ m => Nat.pred (Nat.sub n m)

set_option bootstrap.genMatcherCode false in
@[extern "lean_nat_dec_eq"]
def Nat.beq : (@& Nat) → (@& Nat) → Bool
  | .zero, .zero => true
  | .zero, .succ _ => false
  | .succ _, .zero => false
  | .succ n, .succ m => Nat.beq n m

set_option bootstrap.genMatcherCode false in
@[extern "lean_nat_dec_le"]
def Nat.ble : @& Nat → @& Nat → Bool
  | .zero, _ => true
  | .succ _, .zero => false
  | .succ n, .succ m => Nat.ble n m

theorem Nat.eq_of_beq_eq_true : {n m : Nat} → Eq (Nat.beq n m) true → Eq n m
  | .zero, .zero, _ => rfl
  | .zero, .succ _, h => Bool.noConfusion h
  | .succ _, .zero, h => Bool.noConfusion h
  | .succ n, .succ m, h =>
    have : Eq (Nat.beq n m) true := h
    have : Eq n m := Nat.eq_of_beq_eq_true this
    this.rec rfl

theorem Nat.ne_of_beq_eq_false : {n m : Nat} → Eq (Nat.beq n m) false → Not (Eq n m)
  | .zero, .zero, h₁, _ => Bool.noConfusion h₁
  | .zero, .succ _, _, h₂ => Nat.noConfusion h₂
  | .succ _, .zero, _, h₂ => Nat.noConfusion h₂
  | .succ n, .succ m, h₁, h₂ =>
    have : Eq (Nat.beq n m) false := h₁
    Nat.noConfusion h₂ (fun h₂ => absurd h₂ (Nat.ne_of_beq_eq_false this))

@[reducible, extern "lean_nat_dec_eq"]
protected def Nat.decEq (n m : @& Nat) : Decidable (Eq n m) :=
  match h : Nat.beq n m with
  | true  => isTrue (Nat.eq_of_beq_eq_true h)
  | false => isFalse (Nat.ne_of_beq_eq_false h)

@[inline] instance : DecidableEq Nat := Nat.decEq

inductive List (α : Type u) where
  | nil : List α
  | cons (head : α) (tail : List α) : List α
inductive Option (α : Type u) where
  | none : Option α
  | some (val : α) : Option α
export Option (none some)
class Inhabited (α : Sort u) where
  default : α
@[reducible] def optParam (α : Sort u) (_default : α) : Sort u := α
@[reducible] def outParam (α : Sort u) : Sort u := α
@[reducible] def semiOutParam (α : Sort u) : Sort u := α

/-! ## Decision procedures (`decide`) -/

theorem decide_eq_true {p : Prop} [inst : Decidable p] (h : p) : Eq (decide p) true :=
  inst.casesOn (motive := fun i => Eq (@decide p i) true) (fun h' => absurd h h') (fun _ => rfl)

theorem decide_eq_false {p : Prop} [inst : Decidable p] (h : Not p) : Eq (decide p) false :=
  inst.casesOn (motive := fun i => Eq (@decide p i) false) (fun _ => rfl) (fun h' => absurd h' h)

theorem of_decide_eq_true {p : Prop} [inst : Decidable p] : Eq (decide p) true → p :=
  inst.casesOn (motive := fun i => Eq (@decide p i) true → p)
    (fun _ h => Bool.noConfusion h) (fun h' _ => h')

instance instDecidableNot {p : Prop} [h : Decidable p] : Decidable (Not p) :=
  h.casesOn (motive := fun _ => Decidable (Not p)) (fun hn => isTrue hn) (fun hp => isFalse (fun hn => hn hp))

instance instDecidableEqBool : DecidableEq Bool := fun a b =>
  a.casesOn (motive := fun a => Decidable (Eq a b))
    (b.casesOn (motive := fun b => Decidable (Eq false b)) (isTrue rfl) (isFalse (fun h => Bool.noConfusion h)))
    (b.casesOn (motive := fun b => Decidable (Eq true b)) (isFalse (fun h => Bool.noConfusion h)) (isTrue rfl))

/-! ## The classes behind `+ - * / ≤ < ++` and numerals -/

class HAdd (α : Type u) (β : Type v) (γ : outParam (Type w)) where
  hAdd : α → β → γ
class HSub (α : Type u) (β : Type v) (γ : outParam (Type w)) where
  hSub : α → β → γ
class HMul (α : Type u) (β : Type v) (γ : outParam (Type w)) where
  hMul : α → β → γ
class HDiv (α : Type u) (β : Type v) (γ : outParam (Type w)) where
  hDiv : α → β → γ
class HAppend (α : Type u) (β : Type v) (γ : outParam (Type w)) where
  hAppend : α → β → γ
class Add (α : Type u) where
  add : α → α → α
class Sub (α : Type u) where
  sub : α → α → α
class Mul (α : Type u) where
  mul : α → α → α
class Div (α : Type u) where
  div : α → α → α
class Neg (α : Type u) where
  neg : α → α
class Append (α : Type u) where
  append : α → α → α
class LE (α : Type u) where
  le : α → α → Prop
class LT (α : Type u) where
  lt : α → α → Prop

@[default_instance] instance instHAdd {α : Type u} [Add α] : HAdd α α α := ⟨fun a b => Add.add a b⟩
@[default_instance] instance instHSub {α : Type u} [Sub α] : HSub α α α := ⟨fun a b => Sub.sub a b⟩
@[default_instance] instance instHMul {α : Type u} [Mul α] : HMul α α α := ⟨fun a b => Mul.mul a b⟩
@[default_instance] instance instHDiv {α : Type u} [Div α] : HDiv α α α := ⟨fun a b => Div.div a b⟩
@[default_instance] instance instHAppendOfAppend {α : Type u} [Append α] : HAppend α α α := ⟨fun a b => Append.append a b⟩

@[reducible] def GE.ge {α : Type u} [LE α] (a b : α) : Prop := LE.le b a
@[reducible] def GT.gt {α : Type u} [LT α] (a b : α) : Prop := LT.lt b a
@[reducible] def Ne {α : Sort u} (a b : α) : Prop := Not (Eq a b)

instance : Add Nat := ⟨Nat.add⟩
instance : Sub Nat := ⟨Nat.sub⟩
instance : Mul Nat := ⟨Nat.mul⟩

/-- `Nat.le n m`: `m` is reached from `n` by successors (as in `Init/Prelude.lean`). -/
inductive Nat.le (n : Nat) : Nat → Prop where
  | refl : Nat.le n n
  | step {m : Nat} : Nat.le n m → Nat.le n (Nat.succ m)
instance : LE Nat := ⟨Nat.le⟩
instance : LT Nat := ⟨fun n m => Nat.le (Nat.succ n) m⟩

/-! ## Lists -/

/-- Concatenation (`xs ++ ys`). -/
def List.append {α : Type u} : List α → List α → List α
  | .nil, bs => bs
  | .cons a as, bs => .cons a (List.append as bs)
instance {α : Type u} : Append (List α) := ⟨List.append⟩

/-! ## Reflexivity lemmas the `rfl` tactic tries by name -/

theorem HEq.rfl {α : Sort u} {a : α} : HEq a a := HEq.refl a
theorem Iff.refl (a : Prop) : Iff a a := Iff.intro (fun h => h) (fun h => h)
theorem Iff.rfl {a : Prop} : Iff a a := Iff.refl a

/-! ## `calc` chains -/

/-- Composition of relations, used by `calc` (as in `Init/Prelude.lean`; `calc` builds
`Trans.{u, v, w, u_1, u_2, u_3}` itself, so the universe parameters keep this order). -/
class Trans (r : α → β → Sort u) (s : β → γ → Sort v) (t : outParam (α → γ → Sort w)) where
  trans : {a : α} → {b : β} → {c : γ} → r a b → s b c → t a c

instance {α : Sort u₁} {γ : Sort u₃} (r : α → γ → Sort u) : Trans Eq r r :=
  ⟨fun heq h' => Eq.ndrec (motive := fun x => r x _) h' (Eq.symm heq)⟩
instance {α : Sort u₁} {β : Sort u₂} (r : α → β → Sort u) : Trans r Eq r :=
  ⟨fun h' heq => Eq.ndrec h' heq⟩

/-- Used by `unfold`/`rw` under an implication (as in `Init/Core.lean`). -/
theorem implies_congr {p₁ p₂ : Sort u} {q₁ q₂ : Sort v} (h₁ : Eq p₁ p₂) (h₂ : Eq q₁ q₂) :
    Eq (p₁ → q₁) (p₂ → q₂) :=
  congr (congrArg (fun (a : Sort u) (b : Sort v) => a → b) h₁) h₂
