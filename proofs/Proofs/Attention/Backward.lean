import Proofs.ScalarOps
import Proofs.Vector
import Proofs.Attention.OnlineSoftmax

/-!
# Backward pass of attention, recomputing P from the saved lse

Mirror of `rocq/Attention/Backward.v`.  For one head with scores
s_ij = scale * (q_i · k_j), saved lse_i, output rows o_i and upstream
gradient dO:

    P_ij  = exp (s_ij - lse_i)          (0 when key j is masked for row i)
    dV_j  = Σ_i P_ij dO_i
    dP_ij = dO_i · v_j
    D_i   = dO_i · o_i
    dS_ij = P_ij (dP_ij - D_i)
    dQ_i  = scale * Σ_j dS_ij k_j
    dK_j  = scale * Σ_i dS_ij q_i

Definitions only.
-/

namespace Ojas

/-- Row i of P recomputed from lse_i
(Coq: `row_probs` in `rocq/Attention/Backward.v`). -/
def rowProbs {α : Type} (o : ScalarOps α) (keys : List (Key α)) (lse : Option α) : List α :=
  List.map
    (fun (k : Key α) =>
      match k.1, lse with
      | some s, some lv => o.exp (o.sub s lv)
      | _, _ => o.zero)
    keys

/-- Row i of dS from row i of P, the value rows, dO_i and o_i
(Coq: `row_dscores` in `rocq/Attention/Backward.v`). -/
def rowDScores {α : Type} (o : ScalarOps α) (p : List α) (vs : List (List α))
    (dO outRow : List α) : List α :=
  let D := dot o dO outRow
  List.map
    (fun (x : α × List α) =>
      match x with
      | (pij, v) => o.mul pij (o.sub (dot o dO v) D))
    (List.zip p vs)

/-- Column j of a matrix given by its rows, missing entries read as zero
(Coq: `column` in `rocq/Attention/Backward.v`). -/
def column {α : Type} (o : ScalarOps α) (rows : List (List α)) (j : Nat) : List α :=
  List.map (fun (r : List α) => List.getD r j o.zero) rows

/-- Gradients (dQ, dK, dV) of one head
(Coq: `attention_backward` in `rocq/Attention/Backward.v`; the Coq result is
the left-nested triple `((dQ, dK), dV)`, here Lean's `(dQ, dK, dV)`). -/
def attentionBackward {α : Type} (o : ScalarOps α) (scale : α) (visible : Nat → Nat → Bool)
    (qs ks vs : List (List α)) (outs : List (List α)) (lses : List (Option α))
    (dOs : List (List α)) : List (List α) × List (List α) × List (List α) :=
  let rows := List.zip (List.range (List.length qs)) qs
  let P := List.map
    (fun (r : Nat × List α) =>
      match r with
      | (i, q) =>
        rowProbs o (maskedKeys (visible i) (scores o scale q ks) vs) (List.getD lses i none))
    rows
  let dS := List.map
    (fun (r : Nat × List α) =>
      match r with
      | (i, p) => rowDScores o p vs (List.getD dOs i []) (List.getD outs i []))
    (List.zip (List.range (List.length P)) P)
  let js := List.range (List.length ks)
  let dQ := List.map (fun (ds : List α) => vscale o scale (weightedSum o ds ks)) dS
  let dK := List.map (fun (j : Nat) => vscale o scale (weightedSum o (column o dS j) qs)) js
  let dV := List.map (fun (j : Nat) => weightedSum o (column o P j) dOs) js
  (dQ, dK, dV)

end Ojas
