prelude
import Proofs.Core
/-!
# Notation and tactics, bound to the parsers and macros compiled into the Lean binary

The binary (`libleanshared.so` of Lean 4.35.0) contains Lean's whole front end, `Init`'s
notation and tactic *syntax* included, as native code; only the `.olean` files that would
register them are missing.  A declaration here whose name and arity match a native symbol is
executed by that native code when the front end evaluates it:

* `@[term_parser] opaque «term_=_» : Lean.TrailingParserDescr` registers the native parser of
  `a = b` (symbol `l_term___x3d__`), and likewise for the tactic parsers (`exact`, `intro`, ...);
* `@[macro «term_=_»] opaque «_aux_Init_Notation___macroRules_term_=__1» : Lean.Macro` registers
  `Init`'s native macro expanding `a = b` to `binrel% Eq a b`.  `Lean.Macro` is declared below as a
  function of three arguments (syntax, macro context, macro state), the arity of the native code;
  the native code builds and reads these values itself, so their Lean types here are
  placeholders.

This affects only how source text becomes terms: every term is still checked by the kernel,
and a binding whose native symbol is missing makes the check fail (it does not weaken it).
The types `Lean.Name` and `Lean.ParserDescr` have the constructor shapes of Lean's own.
-/

/-- Stand-in for `String`: only its name matters here (no string value is built in Lean code). -/
structure String where
  data : List Nat

namespace Lean
inductive Name where
  | anonymous : Name
  | str (pre : Name) (str : String)
  | num (pre : Name) (i : Nat)
abbrev SyntaxNodeKind := Name
inductive ParserDescr where
  | const (name : Name)
  | unary (name : Name) (p : ParserDescr)
  | binary (name : Name) (p₁ p₂ : ParserDescr)
  | node (kind : SyntaxNodeKind) (prec : Nat) (p : ParserDescr)
  | trailingNode (kind : SyntaxNodeKind) (prec lhsPrec : Nat) (p : ParserDescr)
  | symbol (val : String)
  | nonReservedSymbol (val : String) (includeIdent : Bool)
  | cat (catName : Name) (rbp : Nat)
  | parser (declName : Name)
  | nodeWithAntiquot (name : String) (kind : SyntaxNodeKind) (p : ParserDescr)
  | sepBy (p : ParserDescr) (sep : String) (psep : ParserDescr) (allowTrailingSep : Bool)
  | sepBy1 (p : ParserDescr) (sep : String) (psep : ParserDescr) (allowTrailingSep : Bool)
instance : Inhabited ParserDescr := ⟨ParserDescr.const Name.anonymous⟩
abbrev TrailingParserDescr := ParserDescr

/-- Placeholder types of the macro expander's values (built and read by native code only). -/
structure Syntax where
  private mk :: x : Nat
structure Macro.Context where
  private mk :: x : Nat
structure Macro.State where
  private mk :: x : Nat
/-- The macro expander's exception, with the constructor shapes of Lean's `Macro.Exception`. -/
inductive Macro.Exception where
  | error (ref : Syntax) (msg : String)
  | unsupportedSyntax
/-- A macro's result, with the constructor shapes of Lean's `EStateM.Result`. -/
inductive Macro.Result where
  | ok (a : Syntax) (s : Macro.State)
  | error (e : Macro.Exception) (s : Macro.State)
/-- A macro: the native ones take the syntax, the macro context and the macro state. -/
abbrev Macro := Syntax → Macro.Context → Macro.State → Macro.Result
/-- The code a binding runs if its native symbol were missing: "this macro does not apply",
so a wrong binding gives an elaboration error instead of reading a malformed value. -/
instance : Inhabited Macro := ⟨fun _ _ s => Macro.Result.error Macro.Exception.unsupportedSyntax s⟩
end Lean

/-! ## Term notation -/

@[term_parser] opaque «term_=_» : Lean.TrailingParserDescr
@[macro «term_=_»] opaque «_aux_Init_Notation___macroRules_term_=__1» : Lean.Macro
@[macro «term_=_»] opaque «_aux_Init_Notation___macroRules_term_=__2» : Lean.Macro
@[term_parser] opaque «term_≠_» : Lean.TrailingParserDescr
@[macro «term_≠_»] opaque «_aux_Init_Core___macroRules_term_≠__1» : Lean.Macro
@[term_parser] opaque «term_+_» : Lean.TrailingParserDescr
@[macro «term_+_»] opaque «_aux_Init_Notation___macroRules_term_+__1» : Lean.Macro
@[macro «term_+_»] opaque «_aux_Init_Notation___macroRules_term_+__2» : Lean.Macro
@[term_parser] opaque «term_-_» : Lean.TrailingParserDescr
@[macro «term_-_»] opaque «_aux_Init_Notation___macroRules_term_-__1» : Lean.Macro
@[macro «term_-_»] opaque «_aux_Init_Notation___macroRules_term_-__2» : Lean.Macro
@[term_parser] opaque «term_*_» : Lean.TrailingParserDescr
@[macro «term_*_»] opaque «_aux_Init_Notation___macroRules_term_*__1» : Lean.Macro
@[macro «term_*_»] opaque «_aux_Init_Notation___macroRules_term_*__2» : Lean.Macro
@[term_parser] opaque «term_/_» : Lean.TrailingParserDescr
@[macro «term_/_»] opaque «_aux_Init_Notation___macroRules_term_/__1» : Lean.Macro
@[macro «term_/_»] opaque «_aux_Init_Notation___macroRules_term_/__2» : Lean.Macro
@[term_parser] opaque «term-_» : Lean.ParserDescr
@[macro «term-_»] opaque «_aux_Init_Notation___macroRules_term-__1» : Lean.Macro
@[macro «term-_»] opaque «_aux_Init_Notation___macroRules_term-__2» : Lean.Macro
@[term_parser] opaque «term_≤_» : Lean.TrailingParserDescr
@[macro «term_≤_»] opaque «_aux_Init_Notation___macroRules_term_≤__1» : Lean.Macro
@[macro «term_≤_»] opaque «_aux_Init_Notation___macroRules_term_≤__2» : Lean.Macro
@[term_parser] opaque «term_<_» : Lean.TrailingParserDescr
@[macro «term_<_»] opaque «_aux_Init_Notation___macroRules_term_<__1» : Lean.Macro
@[macro «term_<_»] opaque «_aux_Init_Notation___macroRules_term_<__2» : Lean.Macro
@[term_parser] opaque «term_++_» : Lean.TrailingParserDescr
@[macro «term_++_»] opaque «_aux_Init_Notation___macroRules_term_++__1» : Lean.Macro
@[macro «term_++_»] opaque «_aux_Init_Notation___macroRules_term_++__2» : Lean.Macro
@[term_parser] opaque «term_∧_» : Lean.TrailingParserDescr
@[macro «term_∧_»] opaque «_aux_Init_Notation___macroRules_term_∧__1» : Lean.Macro
@[term_parser] opaque «term_∨_» : Lean.TrailingParserDescr
@[macro «term_∨_»] opaque «_aux_Init_Notation___macroRules_term_∨__1» : Lean.Macro
@[term_parser] opaque «term¬_» : Lean.ParserDescr
@[macro «term¬_»] opaque «_aux_Init_Notation___macroRules_term¬__1» : Lean.Macro
@[term_parser] opaque «term_↔_» : Lean.TrailingParserDescr
@[macro «term_↔_»] opaque «_aux_Init_Core___macroRules_term_↔__1» : Lean.Macro
@[term_parser] opaque «term∃_,_» : Lean.ParserDescr
@[macro «term∃_,_»] opaque «_aux_Init_NotationExtra___macroRules_term∃_,__1» : Lean.Macro
@[term_parser] opaque «term_×_» : Lean.TrailingParserDescr
@[macro «term_×_»] opaque «_aux_Init_Notation___macroRules_term_×__1» : Lean.Macro
@[term_parser] opaque termIfThenElse : Lean.ParserDescr
@[macro termIfThenElse] opaque _aux_Init_Notation___macroRules_termIfThenElse_1 : Lean.Macro

/-! ## Tactics -/

namespace Lean.Parser.Tactic
@[tactic_parser] opaque exact : Lean.ParserDescr
@[tactic_parser] opaque intro : Lean.ParserDescr
@[tactic_parser] opaque intros : Lean.ParserDescr
@[tactic_parser] opaque apply : Lean.ParserDescr
@[tactic_parser] opaque refine : Lean.ParserDescr
@[tactic_parser] opaque change : Lean.ParserDescr
@[tactic_parser] opaque constructor : Lean.ParserDescr
@[tactic_parser] opaque assumption : Lean.ParserDescr
@[tactic_parser] opaque contradiction : Lean.ParserDescr
@[tactic_parser] opaque decide : Lean.ParserDescr
@[tactic_parser] opaque unfold : Lean.ParserDescr
@[tactic_parser] opaque «show» : Lean.ParserDescr
@[tactic_parser] opaque first : Lean.ParserDescr
@[tactic_parser] opaque skip : Lean.ParserDescr
@[tactic_parser] opaque done : Lean.ParserDescr
@[tactic_parser] opaque paren : Lean.ParserDescr
@[tactic_parser] opaque eqRefl : Lean.ParserDescr
@[tactic_parser] opaque applyRfl : Lean.ParserDescr
@[tactic_parser] opaque withReducible : Lean.ParserDescr
opaque location : Lean.ParserDescr
opaque optConfig : Lean.ParserDescr
opaque rwRule : Lean.ParserDescr
opaque rwRuleSeq : Lean.ParserDescr
@[tactic_parser] opaque rewriteSeq : Lean.ParserDescr
@[tactic_parser] opaque rwSeq : Lean.ParserDescr
@[macro rwSeq] opaque _aux_Init_Tactics___macroRules_Lean_Parser_Tactic_rwSeq_1 : Lean.Macro
@[tactic_parser] opaque tacticRfl : Lean.ParserDescr
@[macro tacticRfl] opaque _aux_Init_Tactics___macroRules_Lean_Parser_Tactic_tacticRfl_1 : Lean.Macro
@[macro tacticRfl] opaque _aux_Init_Tactics___macroRules_Lean_Parser_Tactic_tacticRfl_2 : Lean.Macro
@[macro tacticRfl] opaque _aux_Init_Tactics___macroRules_Lean_Parser_Tactic_tacticRfl_3 : Lean.Macro
opaque elimTarget : Lean.ParserDescr
opaque inductionAltLHS : Lean.ParserDescr
opaque inductionAlt : Lean.ParserDescr
opaque inductionAlts : Lean.ParserDescr
@[tactic_parser] opaque induction : Lean.ParserDescr
@[tactic_parser] opaque cases : Lean.ParserDescr
@[tactic_parser] opaque tacticHave__ : Lean.ParserDescr
@[macro tacticHave__] opaque _aux_Init_Tactics___macroRules_Lean_Parser_Tactic_tacticHave___1 : Lean.Macro
@[tactic_parser] opaque tacticExfalso : Lean.ParserDescr
@[macro tacticExfalso] opaque _aux_Init_Tactics___macroRules_Lean_Parser_Tactic_tacticExfalso_1 : Lean.Macro
end Lean.Parser.Tactic
namespace Lean.Parser.Tactic
@[tactic_parser] opaque «tactic_<;>_» : Lean.TrailingParserDescr
@[macro «tactic_<;>_»] opaque «_aux_Init_Tactics___macroRules_Lean_Parser_Tactic_tactic_<;>__1» : Lean.Macro
end Lean.Parser.Tactic
opaque Lean.cdotTk : Lean.ParserDescr
@[tactic_parser] opaque Lean.cdot : Lean.ParserDescr
@[term_parser] opaque «term[_]» : Lean.ParserDescr
@[macro «term[_]»] opaque Lean.«_aux_Init_Data_List_Notation___macroRules_term[_]_1» : Lean.Macro
opaque Lean.calcFirstStep : Lean.ParserDescr
opaque Lean.calcStep : Lean.ParserDescr
opaque Lean.calcSteps : Lean.ParserDescr
@[term_parser] opaque Lean.calc : Lean.ParserDescr
@[tactic_parser] opaque Lean.calcTactic : Lean.ParserDescr
namespace Lean.Parser.Tactic
@[tactic_parser] opaque tacticTry_ : Lean.ParserDescr
@[macro tacticTry_] opaque _aux_Init_Tactics___macroRules_Lean_Parser_Tactic_tacticTry__1 : Lean.Macro
end Lean.Parser.Tactic
namespace Lean.Parser.Tactic
@[tactic_parser] opaque focus : Lean.ParserDescr
@[tactic_parser] opaque rotateRight : Lean.ParserDescr
@[tactic_parser] opaque tacticRefine_lift_ : Lean.ParserDescr
@[macro tacticRefine_lift_] opaque _aux_Init_Tactics___macroRules_Lean_Parser_Tactic_tacticRefine_lift__1 : Lean.Macro
@[tactic_parser] opaque «tacticNext_=>_» : Lean.ParserDescr
@[macro «tacticNext_=>_»] opaque «_aux_Init_Tactics___macroRules_Lean_Parser_Tactic_tacticNext_=>__1» : Lean.Macro
opaque caseArg : Lean.ParserDescr
@[tactic_parser] opaque case : Lean.ParserDescr
@[tactic_parser] opaque subst : Lean.ParserDescr
@[tactic_parser] opaque symm : Lean.ParserDescr
@[tactic_parser] opaque injection : Lean.ParserDescr
@[tactic_parser] opaque revert : Lean.ParserDescr
@[tactic_parser] opaque clear : Lean.ParserDescr
@[tactic_parser] opaque specialize : Lean.ParserDescr
@[tactic_parser] opaque generalize : Lean.ParserDescr
@[tactic_parser] opaque allGoals : Lean.ParserDescr
end Lean.Parser.Tactic
