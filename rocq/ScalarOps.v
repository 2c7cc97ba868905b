(** * Scalar operations the executable algorithms are written over.

    Every algorithm that is extracted to the oracle is a function of a
    [ScalarOps] record.  Theorems are proved for [R_ops] (exact real
    arithmetic, this file) or for a rounding model (a record built from
    [R_ops] and a rounding function, see [Attention/StreamError.v]); the
    oracle instantiates the record with OCaml floats ([extraction/]).  *)

From Coq Require Import Reals List Lra.
Import ListNotations.
Open Scope R_scope.

Record ScalarOps (T : Type) : Type := {
  sc_zero : T;
  sc_one : T;
  sc_add : T -> T -> T;
  sc_sub : T -> T -> T;
  sc_mul : T -> T -> T;
  sc_div : T -> T -> T;
  sc_exp : T -> T;
  sc_ln : T -> T;
  sc_ltb : T -> T -> bool
}.

Arguments sc_zero {T}. Arguments sc_one {T}.
Arguments sc_add {T}. Arguments sc_sub {T}. Arguments sc_mul {T}.
Arguments sc_div {T}. Arguments sc_exp {T}. Arguments sc_ln {T}.
Arguments sc_ltb {T}.

(** The larger of two scalars, as the code computes it ([torch.maximum]
    on non-NaN values). *)
Definition sc_max {T} (o : ScalarOps T) (a b : T) : T :=
  if sc_ltb o a b then b else a.

(** Sum of a list, left to right. *)
Definition sc_sum {T} (o : ScalarOps T) (xs : list T) : T :=
  fold_left (sc_add o) xs (sc_zero o).

Definition Rltb (x y : R) : bool := if Rlt_dec x y then true else false.

(** Exact real arithmetic: the instance every correctness theorem is about. *)
Definition R_ops : ScalarOps R := {|
  sc_zero := 0; sc_one := 1;
  sc_add := Rplus; sc_sub := Rminus; sc_mul := Rmult; sc_div := Rdiv;
  sc_exp := exp; sc_ln := ln; sc_ltb := Rltb
|}.

Lemma Rltb_true : forall x y, Rltb x y = true <-> x < y.
Proof.
  intros x y; unfold Rltb; destruct (Rlt_dec x y); split; intro H;
    [ exact r | reflexivity | discriminate | contradiction ].
Qed.

Lemma R_max_eq : forall a b, sc_max R_ops a b = Rmax a b.
Proof.
  intros a b; unfold sc_max, Rmax; simpl; unfold Rltb.
  destruct (Rlt_dec a b), (Rle_dec a b); lra.
Qed.
