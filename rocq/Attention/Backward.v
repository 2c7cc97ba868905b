(** * Backward pass of attention, recomputing P from the saved lse.

    For one head with scores s_ij = scale * (q_i . k_j), saved
    lse_i = m_i + ln l_i, output rows o_i and upstream gradient dO:

      P_ij  = exp (s_ij - lse_i)          (0 when key j is masked for row i)
      dV_j  = sum_i P_ij dO_i
      dP_ij = dO_i . v_j
      D_i   = dO_i . o_i
      dS_ij = P_ij (dP_ij - D_i)
      dQ_i  = scale * sum_j dS_ij k_j
      dK_j  = scale * sum_i dS_ij q_i

    Definitions only, over [ScalarOps]; theorems are in
    [Attention/BackwardCorrect.v].  *)

From Coq Require Import Reals List Arith.
From Ojas Require Import ScalarOps Vector Attention.OnlineSoftmax.
Import ListNotations.

Section Backward.
Context {T : Type} (o : ScalarOps T).

(** Row i of P recomputed from lse_i. *)
Definition row_probs (keys : list key) (lse : option T) : list T :=
  map (fun k => match fst k, lse with
                | Some s, Some L => sc_exp o (sc_sub o s L)
                | _, _ => sc_zero o
                end) keys.

(** Row i of dS from row i of P, the value rows, dO_i and o_i. *)
Definition row_dscores (p : list T) (vs : list (list T)) (dO out : list T) : list T :=
  let D := dot o dO out in
  map (fun '(pij, v) => sc_mul o pij (sc_sub o (dot o dO v) D)) (combine p vs).

(** Column j of a matrix given by its rows. *)
Definition column (rows : list (list T)) (j : nat) : list T :=
  map (fun r => nth j r (sc_zero o)) rows.

(** Gradients (dQ, dK, dV) of one head. *)
Definition attention_backward (scale : T) (visible : nat -> nat -> bool)
    (qs ks vs : list (list T)) (outs : list (list T)) (lses : list (option T))
    (dOs : list (list T)) : list (list T) * list (list T) * list (list T) :=
  let rows := combine (seq 0 (length qs)) qs in
  let P := map (fun '(i, q) =>
                  row_probs (masked_keys (visible i) (scores o scale q ks) vs)
                            (nth i lses None)) rows in
  let dS := map (fun '(i, p) => row_dscores p vs (nth i dOs []) (nth i outs []))
                (combine (seq 0 (length P)) P) in
  let js := seq 0 (length ks) in
  let dQ := map (fun ds => vscale o scale (weighted_sum o ds ks)) dS in
  let dK := map (fun j => vscale o scale (weighted_sum o (column dS j) qs)) js in
  let dV := map (fun j => weighted_sum o (column P j) dOs) js in
  (dQ, dK, dV).

End Backward.
