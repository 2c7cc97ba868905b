import Proofs.ScalarOps
import Proofs.Vector

/-!
# Online softmax: the streaming recurrence the attention code runs

Mirror of `rocq/Attention/OnlineSoftmax.v`.  One query row sees a list of
keys; a key is a pair (score, value row), its score `none` when masked.
For each tile of keys:

    m'   = max (m, max_j s_j)
    p_j  = exp (s_j - m')              (0 for a masked key)
    l'   = exp (m - m') * l + Σ_j p_j
    acc' = exp (m - m') * acc + Σ_j p_j * v_j

and finally `out = acc / l`, `lse = m + ln l`.  The state before any
unmasked key is `none` (the code's m = -inf, l = 0, acc = 0).
Definitions only.
-/

namespace Ojas

/-- The streaming state (Coq: `Record state` with `mk_state`, `st_max`,
`st_sum`, `st_acc` in `rocq/Attention/OnlineSoftmax.v`). -/
structure State (α : Type) where
  mkState ::
  /-- running max m -/
  stMax : α
  /-- rescaled sum l = Σ_j exp (s_j - m) -/
  stSum : α
  /-- rescaled accumulator acc = Σ_j exp (s_j - m) v_j -/
  stAcc : List α
  deriving Repr

/-- A key: its score (`none` if masked) and its value row
(Coq: `key` in `rocq/Attention/OnlineSoftmax.v`). -/
abbrev Key (α : Type) : Type := Option α × List α

/-- Max of two extended scores; `none` is -inf
(Coq: `omax` in `rocq/Attention/OnlineSoftmax.v`). -/
def omax {α : Type} (o : ScalarOps α) (a b : Option α) : Option α :=
  match a, b with
  | none, _ => b
  | _, none => a
  | some x, some y => some (o.max x y)

/-- Max score of a tile, `none` if every key is masked
(Coq: `block_max` in `rocq/Attention/OnlineSoftmax.v`). -/
def blockMax {α : Type} (o : ScalarOps α) (blk : List (Key α)) : Option α :=
  List.foldl (fun (m : Option α) (k : Key α) => omax o m k.1) none blk

/-- Weight of a key against the running max `m`: exp (s - m), or 0 if masked
(Coq: `key_weight` in `rocq/Attention/OnlineSoftmax.v`). -/
def keyWeight {α : Type} (o : ScalarOps α) (m : α) (k : Key α) : α :=
  match k.1 with
  | none => o.zero
  | some s => o.exp (o.sub s m)

/-- One tile of the forward pass
(Coq: `block_step` in `rocq/Attention/OnlineSoftmax.v`). -/
def blockStep {α : Type} (o : ScalarOps α) (st : Option (State α)) (blk : List (Key α)) :
    Option (State α) :=
  match omax o (Option.map State.stMax st) (blockMax o blk) with
  | none => st
  | some m' =>
    let ps := List.map (keyWeight o m') blk
    let lBlk := o.sum ps
    let accBlk := weightedSum o ps (List.map (fun (k : Key α) => k.2) blk)
    match st with
    | none => some (State.mkState m' lBlk accBlk)
    | some s =>
      let alpha := o.exp (o.sub s.stMax m')
      some (State.mkState m'
              (o.add (o.mul alpha s.stSum) lBlk)
              (vadd o (vscale o alpha s.stAcc) accBlk))

/-- The forward pass over a list of tiles
(Coq: `stream` in `rocq/Attention/OnlineSoftmax.v`). -/
def stream {α : Type} (o : ScalarOps α) (blocks : List (List (Key α))) : Option (State α) :=
  List.foldl (blockStep o) none blocks

/-- Output row (`acc / l`, or zeros for a fully masked row) and log-sum-exp
(`m + ln l`, or `none` = -inf for a fully masked row)
(Coq: `finalize` in `rocq/Attention/OnlineSoftmax.v`). -/
def finalize {α : Type} (o : ScalarOps α) (d : Nat) (st : Option (State α)) :
    List α × Option α :=
  match st with
  | none => (vzero o d, none)
  | some s => (vdiv o s.stAcc s.stSum, some (o.add s.stMax (o.ln s.stSum)))

/-- Cut a list into tiles of `b` elements, at most `fuel` tiles
(Coq: `chunk_fuel` in `rocq/Attention/OnlineSoftmax.v`). -/
def chunkFuel {β : Type} (fuel b : Nat) (xs : List β) : List (List β) :=
  match fuel with
  | 0 => []
  | fuel' + 1 =>
    match xs with
    | [] => []
    | _ => List.take b xs :: chunkFuel fuel' b (List.drop b xs)

/-- Cut a list into tiles of `b` elements (the last one may be shorter);
`b = 0` is read as `b = 1` (Coq: `chunk` in `rocq/Attention/OnlineSoftmax.v`). -/
def chunk {β : Type} (b : Nat) (xs : List β) : List (List β) :=
  chunkFuel (List.length xs) (Nat.max 1 b) xs

/-- The streamed row with key tiles of size `b`
(Coq: `stream_row` in `rocq/Attention/OnlineSoftmax.v`). -/
def streamRow {α : Type} (o : ScalarOps α) (b d : Nat) (keys : List (Key α)) :
    List α × Option α :=
  finalize o d (stream o (chunk b keys))

/-! ## The specification: two-pass softmax over the unmasked keys -/

/-- The unmasked keys, as (score, value row) pairs
(Coq: `unmasked` in `rocq/Attention/OnlineSoftmax.v`). -/
def unmasked {α : Type} (keys : List (Key α)) : List (α × List α) :=
  keys.flatMap (fun (k : Key α) =>
    match k.1 with
    | none => []
    | some s => [(s, k.2)])

/-- `max (x, xs…)`, left to right
(Coq: `list_max` in `rocq/Attention/OnlineSoftmax.v`). -/
def listMax {α : Type} (o : ScalarOps α) (x : α) (xs : List α) : α :=
  List.foldl (fun (a b : α) => o.max a b) x xs

/-- out = Σ_j exp (s_j - M) / Z * v_j with M = max_j s_j and
Z = Σ_j exp (s_j - M); lse = M + ln Z.  Zeros and `none` when every key is
masked (Coq: `two_pass` in `rocq/Attention/OnlineSoftmax.v`). -/
def twoPass {α : Type} (o : ScalarOps α) (d : Nat) (keys : List (Key α)) :
    List α × Option α :=
  match unmasked keys with
  | [] => (vzero o d, none)
  | ks@((s0, _) :: _) =>
    let M := listMax o s0 (List.map (fun (k : α × List α) => k.1) ks)
    let ws := List.map (fun (k : α × List α) => o.exp (o.sub k.1 M)) ks
    let Z := o.sum ws
    (weightedSum o (List.map (fun (w : α) => o.div w Z) ws)
        (List.map (fun (k : α × List α) => k.2) ks),
     some (o.add M (o.ln Z)))

/-! ## Scores and masks of one attention head -/

/-- s_j = scale * (q · k_j)
(Coq: `scores` in `rocq/Attention/OnlineSoftmax.v`). -/
def scores {α : Type} (o : ScalarOps α) (scale : α) (q : List α) (ks : List (List α)) :
    List α :=
  List.map (fun (k : List α) => o.mul scale (dot o q k)) ks

/-- Keys of one query row: key `j` is kept when `visible j`
(Coq: `masked_keys` in `rocq/Attention/OnlineSoftmax.v`). -/
def maskedKeys {α : Type} (visible : Nat → Bool) (ss : List α) (vs : List (List α)) :
    List (Key α) :=
  List.map
    (fun (p : Nat × (α × List α)) =>
      match p with
      | (j, (s, v)) => (((if visible j then some s else none), v) : Key α))
    (List.zip (List.range (List.length ss)) (List.zip ss vs))

/-- Forward pass of one head: for every query row, output and lse
(Coq: `attention_forward` in `rocq/Attention/OnlineSoftmax.v`). -/
def attentionForward {α : Type} (o : ScalarOps α) (b d : Nat) (scale : α)
    (visible : Nat → Nat → Bool) (qs ks vs : List (List α)) :
    List (List α × Option α) :=
  List.map
    (fun (p : Nat × List α) =>
      match p with
      | (i, q) => streamRow o b d (maskedKeys (visible i) (scores o scale q ks) vs))
    (List.zip (List.range (List.length qs)) qs)

/-- The same head computed by the two-pass specification
(Coq: `attention_two_pass` in `rocq/Attention/OnlineSoftmax.v`). -/
def attentionTwoPass {α : Type} (o : ScalarOps α) (d : Nat) (scale : α)
    (visible : Nat → Nat → Bool) (qs ks vs : List (List α)) :
    List (List α × Option α) :=
  List.map
    (fun (p : Nat × List α) =>
      match p with
      | (i, q) => twoPass o d (maskedKeys (visible i) (scores o scale q ks) vs))
    (List.zip (List.range (List.length qs)) qs)

/-! ## Visibility predicates: query row `i`, key column `j` -/

/-- `is_causal`: key `j` is visible to query `i` iff `j ≤ i`
(Coq: `causal` in `rocq/Attention/OnlineSoftmax.v`). -/
def causal (i j : Nat) : Bool := Nat.ble j i

/-- Sliding window of `w` keys: |i - j| < w (truncated subtraction, as in Coq)
(Coq: `in_window` in `rocq/Attention/OnlineSoftmax.v`). -/
def inWindow (w i j : Nat) : Bool := Nat.blt (i - j) w && Nat.blt (j - i) w

/-- An explicit boolean mask, row by row (`true` = takes part); missing
entries are `false` (Coq: `explicit_mask` in `rocq/Attention/OnlineSoftmax.v`). -/
def explicitMask (m : List (List Bool)) (i j : Nat) : Bool :=
  List.getD (List.getD m i []) j false

/-- The conjunction of the requested masks
(Coq: `visibility` in `rocq/Attention/OnlineSoftmax.v`). -/
def visibility (isCausal : Bool) (window : Option Nat) (mask : Option (List (List Bool)))
    (i j : Nat) : Bool :=
  (if isCausal then causal i j else true) &&
    (match window with
     | none => true
     | some w => inWindow w i j) &&
    (match mask with
     | none => true
     | some m => explicitMask m i j)

end Ojas
