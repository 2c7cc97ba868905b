(** * Vectors as lists, with the operations the attention code uses.

    [vadd] pads the shorter argument (it behaves as if missing entries
    were zero), so coordinate-wise lemmas over [R] need no length
    hypotheses: [nth c (vadd a b) 0 = nth c a 0 + nth c b 0].  *)

From Coq Require Import Reals List.
From Ojas Require Import ScalarOps.
Import ListNotations.

Section Vector.
Context {T : Type} (o : ScalarOps T).

Fixpoint vadd (a b : list T) : list T :=
  match a, b with
  | x :: a', y :: b' => sc_add o x y :: vadd a' b'
  | [], _ => b
  | _, [] => a
  end.

(** [k * a], entry by entry. *)
Definition vscale (k : T) (a : list T) : list T := map (sc_mul o k) a.

(** [a / k], entry by entry (the final normalisation [acc / l]). *)
Definition vdiv (a : list T) (k : T) : list T := map (fun x => sc_div o x k) a.

(** Dot product as a right fold: x0*y0 + (x1*y1 + (... + 0)). *)
Fixpoint dot (a b : list T) : T :=
  match a, b with
  | x :: a', y :: b' => sc_add o (sc_mul o x y) (dot a' b')
  | _, _ => sc_zero o
  end.

(** The zero vector of length [d]. *)
Definition vzero (d : nat) : list T := repeat (sc_zero o) d.

(** Sum of weighted vectors [sum_j w_j * v_j], left to right. *)
Definition weighted_sum (ws : list T) (vs : list (list T)) : list T :=
  fold_left (fun acc wv => vadd acc (vscale (fst wv) (snd wv))) (combine ws vs) [].

End Vector.
