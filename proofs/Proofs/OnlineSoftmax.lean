prelude
import Proofs.Lists
/-!
# (a) Online softmax: the streamed attention forward equals the two-pass softmax

Mirror of `rocq/Attention/OnlineSoftmax.v` (definitions) and `rocq/Attention/StreamCorrect.v`
(theorems).  One query row sees a list of keys; a key is a score (`none` when masked, the code's
`-inf`) and a value row, here a function of the coordinate `i : ι` (Coq: `list R`, compared
coordinate-wise by `row_eq`).  The keys arrive in tiles ("blocks"), any tiling; for each tile the
code computes

    m'   = max (m, max_j s_j)
    p_j  = exp (s_j - m')            (0 for a masked key)
    l'   = exp (m - m') * l + Σ_j p_j
    acc' = exp (m - m') * acc + Σ_j p_j * v_j

and finally `out = acc / l`, `lse = m + log l`.  The state before any unmasked key is `none`.

First, `Softmax.run`: the key-by-key recurrence on bare scores, the simplest form of the
invariant.
-/

namespace Ojas
open ExpField

namespace Softmax
variable {α : Type} [ExpField α]

/-- One step of the key-by-key recurrence on a score `s`: `(m, l) ↦ (m', exp (m - m') l + exp (s - m'))`
with `m' = max m s` (Coq: `block_step` on a tile of one key, `rocq/Attention/OnlineSoftmax.v`). -/
def step (st : α × α) (s : α) : α × α :=
  (max st.1 s, exp (st.1 - max st.1 s) * st.2 + exp (s - max st.1 s))

/-- The recurrence over a list of scores, from the state `(m, l)`. -/
def run (st : α × α) (xs : List α) : α × α := List.foldl step st xs

/-- The running max: `max (… (max m s₀) …) sₙ`. -/
def runMax (m : α) (xs : List α) : α := List.foldl max m xs

/-- `Σ_j exp (s_j - M)`. -/
def sumExp (M : α) (xs : List α) : α := sum (List.map (fun s => exp (s - M)) xs)

theorem run_fst (st : α × α) (xs : List α) : (run st xs).1 = runMax st.1 xs := by
  induction xs generalizing st with
  | nil => rfl
  | cons s xs ih => exact ih (step st s)

/-- The online-softmax invariant: the streamed normaliser is `exp (m₀ - M) l₀ + Σ_j exp (s_j - M)`
where `M` is the running max (Coq: `fold_block_step_represents` in
`rocq/Attention/StreamCorrect.v`, tiles of one key). -/
theorem run_snd (m l : α) (xs : List α) :
    (run (m, l) xs).2 = exp (m - runMax m xs) * l + sumExp (runMax m xs) xs := by
  induction xs generalizing m l with
  | nil =>
    change l = exp (m - m) * l + 0
    rw [sub_self, exp_zero, one_mul, add_zero]
  | cons s xs ih =>
    change (run (max m s, exp (m - max m s) * l + exp (s - max m s)) xs).2
      = exp (m - runMax (max m s) xs) * l
        + (exp (s - runMax (max m s) xs) + sumExp (runMax (max m s) xs) xs)
    rw [ih]
    rw [mul_add, ← mul_assoc, ← exp_sub_split, ← exp_sub_split, add_assoc]

/-- From the empty normaliser, the streamed `(max, normaliser)` is the one-pass
`(max, Σ exp (s_j - max))` (Coq: `stream_keywise_correct`). -/
theorem online_softmax_correct (m : α) (xs : List α) :
    run (m, 0) xs = (runMax m xs, sumExp (runMax m xs) xs) := by
  have h1 : (run (m, 0) xs).1 = runMax m xs := run_fst (m, 0) xs
  have h2 := run_snd m (0 : α) xs
  rw [mul_zero, zero_add] at h2
  calc run (m, 0) xs = ((run (m, 0) xs).1, (run (m, 0) xs).2) := rfl
    _ = (runMax m xs, sumExp (runMax m xs) xs) := by rw [h1, h2]

end Softmax

/-! ## Tiles, masks and value rows -/

namespace Attention
variable {α : Type} [ExpField α] {ι : Type}

/-- A key: its score (`none` if masked) and its value row (Coq: `key` in
`rocq/Attention/OnlineSoftmax.v`, `(option T * list T)`). -/
structure Key (α ι : Type) where
  score : Option α
  value : ι → α

/-- The streaming state: running max, rescaled sum, rescaled accumulator
(Coq: `Record state` in `rocq/Attention/OnlineSoftmax.v`). -/
structure State (α ι : Type) where
  m : α
  l : α
  acc : ι → α

/-- Max of two extended scores, `none` being `-inf` (Coq: `omax`). -/
def omax : Option α → Option α → Option α
  | none, b => b
  | some a, none => some a
  | some a, some b => some (max a b)

/-- Max score of a tile, `none` if every key is masked (Coq: `block_max`). -/
def blockMax : List (Key α ι) → Option α
  | [] => none
  | .cons k ks => omax k.score (blockMax ks)

/-- Weight of a key against the running max `m`: `exp (s - m)`, or 0 if masked
(Coq: `key_weight`). -/
def keyWeight (m : α) (k : Key α ι) : α :=
  match k.score with
  | none => 0
  | some s => exp (s - m)

/-- `Σ_k keyWeight m k` (Coq: `kw_sum` in `rocq/Attention/StreamCorrect.v`). -/
def kwSum (m : α) (ks : List (Key α ι)) : α := sum (List.map (keyWeight m) ks)

/-- `Σ_k keyWeight m k * v_k i` (Coq: `kw_acc`). -/
def kwAcc (m : α) (ks : List (Key α ι)) (i : ι) : α :=
  sum (List.map (fun k => keyWeight m k * k.value i) ks)

/-- One tile of the forward pass (Coq: `block_step`). -/
def blockStep (st : Option (State α ι)) (blk : List (Key α ι)) : Option (State α ι) :=
  match omax (Option.map State.m st) (blockMax blk), st with
  | none, _ => st
  | some m', none => some ⟨m', kwSum m' blk, kwAcc m' blk⟩
  | some m', some s =>
    some ⟨m', exp (s.m - m') * s.l + kwSum m' blk, fun i => exp (s.m - m') * s.acc i + kwAcc m' blk i⟩

/-- The forward pass over a list of tiles (Coq: `stream`). -/
def stream (blocks : List (List (Key α ι))) : Option (State α ι) := List.foldl blockStep none blocks

/-- `st` is the streaming state of `keys`: `none` iff every key is masked, otherwise `m` is their
max and `l`, `acc` are the exact sums against `m` (Coq: `represents`). -/
def Represents (st : Option (State α ι)) (keys : List (Key α ι)) : Prop :=
  match st with
  | none => blockMax keys = none
  | some s => blockMax keys = some s.m ∧ s.l = kwSum s.m keys ∧ ∀ i, s.acc i = kwAcc s.m keys i

theorem omax_assoc (a b c : Option α) : omax (omax a b) c = omax a (omax b c) := by
  cases a with
  | none => rfl
  | some a =>
    cases b with
    | none => cases c with
      | none => rfl
      | some c => rfl
    | some b => cases c with
      | none => rfl
      | some c => exact congrArg some (max_assoc a b c)

theorem omax_none_right (a : Option α) : omax a none = a := by
  cases a with
  | none => rfl
  | some a => rfl

theorem blockMax_append (xs ys : List (Key α ι)) :
    blockMax (xs ++ ys) = omax (blockMax xs) (blockMax ys) := by
  induction xs with
  | nil => rfl
  | cons k ks ih =>
    change omax k.score (blockMax (ks ++ ys)) = omax (omax k.score (blockMax ks)) (blockMax ys)
    rw [ih, omax_assoc]

theorem kwSum_append (m : α) (xs ys : List (Key α ι)) :
    kwSum m (xs ++ ys) = kwSum m xs + kwSum m ys := by
  unfold kwSum; rw [List.map_append, sum_append]

theorem kwAcc_append (m : α) (xs ys : List (Key α ι)) (i : ι) :
    kwAcc m (xs ++ ys) i = kwAcc m xs i + kwAcc m ys i := by
  unfold kwAcc; rw [List.map_append, sum_append]

/-- Rescaling one weight: `keyWeight m' k = exp (m - m') * keyWeight m k`. -/
theorem keyWeight_shift (m m' : α) (k : Key α ι) :
    keyWeight m' k = exp (m - m') * keyWeight m k := by
  unfold keyWeight
  cases k.score with
  | none => exact Eq.symm (mul_zero _)
  | some s => exact exp_sub_split s m m'

/-- Rescaling the sum from one reference max to another (Coq: `kw_sum_shift`). -/
theorem kwSum_shift (m m' : α) (ks : List (Key α ι)) :
    kwSum m' ks = exp (m - m') * kwSum m ks := by
  unfold kwSum; rw [mul_sum_map]
  exact sum_map_congr _ _ ks (keyWeight_shift m m')

/-- Rescaling the accumulator (Coq: `kw_acc_shift`). -/
theorem kwAcc_shift (m m' : α) (ks : List (Key α ι)) (i : ι) :
    kwAcc m' ks i = exp (m - m') * kwAcc m ks i := by
  unfold kwAcc; rw [mul_sum_map]
  apply sum_map_congr
  intro k
  rw [keyWeight_shift m m' k, mul_assoc]

/-- Masked keys weigh nothing (Coq: `kw_sum_None`). -/
theorem kwSum_masked (m : α) (ks : List (Key α ι)) (h : blockMax ks = none) : kwSum m ks = 0 := by
  induction ks with
  | nil => rfl
  | cons k ks ih =>
    change omax k.score (blockMax ks) = none at h
    cases hk : k.score with
    | some s =>
      rw [hk] at h
      cases hb : blockMax ks with
      | none => rw [hb] at h; exact (some_ne_none h).elim
      | some b => rw [hb] at h; exact (some_ne_none h).elim
    | none =>
      rw [hk] at h
      change keyWeight m k + kwSum m ks = 0
      unfold keyWeight; rw [hk, ih h, zero_add]

/-- (Coq: `kw_acc_None`.) -/
theorem kwAcc_masked (m : α) (ks : List (Key α ι)) (i : ι) (h : blockMax ks = none) :
    kwAcc m ks i = 0 := by
  induction ks with
  | nil => rfl
  | cons k ks ih =>
    change omax k.score (blockMax ks) = none at h
    cases hk : k.score with
    | some s =>
      rw [hk] at h
      cases hb : blockMax ks with
      | none => rw [hb] at h; exact (some_ne_none h).elim
      | some b => rw [hb] at h; exact (some_ne_none h).elim
    | none =>
      rw [hk] at h
      change keyWeight m k * k.value i + kwAcc m ks i = 0
      unfold keyWeight; rw [hk, ih h, zero_mul, zero_add]

/-- One tile keeps the invariant (Coq: `block_step_represents`). -/
theorem blockStep_represents (st : Option (State α ι)) (keys blk : List (Key α ι))
    (h : Represents st keys) : Represents (blockStep st blk) (keys ++ blk) := by
  cases st with
  | none =>
    change blockMax keys = none at h
    unfold blockStep
    change Represents (match omax none (blockMax blk), (none : Option (State α ι)) with
      | none, _ => none
      | some m', none => some ⟨m', kwSum m' blk, kwAcc m' blk⟩
      | some m', some s => some ⟨m', exp (s.m - m') * s.l + kwSum m' blk,
          fun i => exp (s.m - m') * s.acc i + kwAcc m' blk i⟩) (keys ++ blk)
    cases hb : blockMax blk with
    | none =>
      change blockMax (keys ++ blk) = none
      rw [blockMax_append, h, hb]; rfl
    | some M =>
      refine ⟨?_, ?_, ?_⟩
      · change blockMax (keys ++ blk) = some M
        rw [blockMax_append, h, hb]; rfl
      · change kwSum M blk = kwSum M (keys ++ blk)
        rw [kwSum_append, kwSum_masked M keys h, zero_add]
      · intro i
        change kwAcc M blk i = kwAcc M (keys ++ blk) i
        rw [kwAcc_append, kwAcc_masked M keys i h, zero_add]
  | some s =>
    have ⟨hm, hl, hacc⟩ := h
    unfold blockStep
    change Represents (match omax (some s.m) (blockMax blk), some s with
      | none, _ => some s
      | some m', none => some ⟨m', kwSum m' blk, kwAcc m' blk⟩
      | some m', some s => some ⟨m', exp (s.m - m') * s.l + kwSum m' blk,
          fun i => exp (s.m - m') * s.acc i + kwAcc m' blk i⟩) (keys ++ blk)
    have hM : blockMax (keys ++ blk) = omax (some s.m) (blockMax blk) := by
      rw [blockMax_append, hm]
    cases hb : omax (some s.m) (blockMax blk) with
    | none =>
      cases hb' : blockMax blk with
      | none => rw [hb'] at hb; exact (some_ne_none hb).elim
      | some b => rw [hb'] at hb; exact (some_ne_none hb).elim
    | some M =>
      refine ⟨?_, ?_, ?_⟩
      · change blockMax (keys ++ blk) = some M
        rw [hM, hb]
      · change exp (s.m - M) * s.l + kwSum M blk = kwSum M (keys ++ blk)
        rw [kwSum_append, hl, ← kwSum_shift]
      · intro i
        change exp (s.m - M) * s.acc i + kwAcc M blk i = kwAcc M (keys ++ blk) i
        rw [kwAcc_append, hacc i, ← kwAcc_shift]

theorem foldl_blockStep_represents (blocks : List (List (Key α ι))) :
    ∀ (st : Option (State α ι)) (keys : List (Key α ι)), Represents st keys →
      Represents (List.foldl blockStep st blocks) (keys ++ List.flatten blocks) := by
  induction blocks with
  | nil => intro st keys h; change Represents st (keys ++ []); rw [List.append_nil]; exact h
  | cons blk blocks ih =>
    intro st keys h
    have h2 := ih (blockStep st blk) (keys ++ blk) (blockStep_represents st keys blk h)
    rw [List.append_assoc] at h2
    exact h2

/-- **Any tiling**: streaming the tiles gives the state of all their keys: `none` iff all are
masked, else the one-pass max `M`, normaliser `Σ exp (s_j - M)` and weighted value sum
`Σ exp (s_j - M) v_j` (Coq: `stream_represents` in `rocq/Attention/StreamCorrect.v`). -/
theorem stream_represents (blocks : List (List (Key α ι))) :
    Represents (stream blocks) (List.flatten blocks) :=
  foldl_blockStep_represents blocks none [] rfl

/-- Output row (`acc / l`, zeros for a fully masked row) and log-sum-exp (`m + log l`, `none` =
`-inf` for a fully masked row) (Coq: `finalize`). -/
def finalize (st : Option (State α ι)) : (ι → α) × Option α :=
  match st with
  | none => (fun _ => 0, none)
  | some s => (fun i => s.acc i / s.l, some (s.m + log s.l))

/-- The specification, two passes over the keys: `M = max_j s_j`, `Z = Σ_j exp (s_j - M)`,
`out = Σ_j (exp (s_j - M) / Z) v_j`, `lse = M + log Z`; masked keys have weight 0; zeros and
`none` when every key is masked (Coq: `two_pass`, which drops the masked keys first). -/
def twoPass (keys : List (Key α ι)) : (ι → α) × Option α :=
  match blockMax keys with
  | none => (fun _ => 0, none)
  | some M =>
    (fun i => sum (List.map (fun k => keyWeight M k / kwSum M keys * k.value i) keys),
     some (M + log (kwSum M keys)))

/-- Two rows agree: the same lse and, coordinate by coordinate, the same output
(Coq: `row_eq`). -/
def RowEq (a b : (ι → α) × Option α) : Prop := (∀ i, a.1 i = b.1 i) ∧ a.2 = b.2

/-- Finalising a state that represents `keys` gives the two-pass result
(Coq: `finalize_represents`). -/
theorem finalize_represents (st : Option (State α ι)) (keys : List (Key α ι))
    (h : Represents st keys) : RowEq (finalize st) (twoPass keys) := by
  cases st with
  | none =>
    change blockMax keys = none at h
    unfold twoPass; rw [h]
    exact ⟨fun _ => rfl, rfl⟩
  | some s =>
    have ⟨hm, hl, hacc⟩ := h
    unfold twoPass; rw [hm]
    refine ⟨?_, ?_⟩
    · intro i
      change s.acc i / s.l = sum (List.map (fun k => keyWeight s.m k / kwSum s.m keys * k.value i) keys)
      rw [hacc i, ← hl, div_eq_mul_inv, mul_comm, kwAcc, mul_sum_map]
      apply sum_map_congr
      intro k
      rw [div_eq_mul_inv, mul_comm (keyWeight s.m k), mul_assoc,
        mul_comm (k.value i) (keyWeight s.m k), mul_left_comm]
    · change some (s.m + log s.l) = some (s.m + log (kwSum s.m keys))
      rw [hl]

/-- **The streamed row is the two-pass softmax, for any tiling, with masks**: streaming any list
of key tiles and finalising gives the two-pass softmax of all their keys (output coordinate-wise,
lse exactly) (Coq: `stream_correct` in `rocq/Attention/StreamCorrect.v`). -/
theorem stream_correct (blocks : List (List (Key α ι))) :
    RowEq (finalize (stream blocks)) (twoPass (List.flatten blocks)) :=
  finalize_represents _ _ (stream_represents blocks)

/-- Two tilings of the same keys give the same row (Coq: `stream_row_correct`, which takes the
tiles of `chunk b keys` for every tile size `b`; here every tiling whose concatenation is `keys`). -/
theorem stream_row_correct (blocks : List (List (Key α ι))) (keys : List (Key α ι))
    (h : List.flatten blocks = keys) : RowEq (finalize (stream blocks)) (twoPass keys) := by
  rw [← h]; exact stream_correct blocks

/-! ## One attention head: scores, visibility masks, every query row -/

/-- `q · k` over the coordinates `cs` (Coq: `dot`). -/
def dot (cs : List ι) (q k : ι → α) : α := sum (List.map (fun c => q c * k c) cs)

/-- `s_j = scale * (q · k_j)` (Coq: `scores`). -/
def scores (cs : List ι) (scale : α) (q : ι → α) (ks : List (ι → α)) : List α :=
  List.map (fun k => scale * dot cs q k) ks

/-- Keys of a query row: key `j` (counted from `j`) is masked unless `visible j`
(Coq: `masked_keys`). -/
def maskedKeys (visible : Nat → Bool) : Nat → List α → List (ι → α) → List (Key α ι)
  | j, .cons s ss, .cons v vs => .cons ⟨cond (visible j) (some s) none, v⟩ (maskedKeys visible (Nat.succ j) ss vs)
  | _, _, _ => []

/-- `f i q` for every query row `q`, `i` its index (Coq: the `map` over `combine (seq 0 _) qs`). -/
def rows {β : Type} (f : Nat → (ι → α) → β) : Nat → List (ι → α) → List β
  | _, [] => []
  | i, .cons q qs => .cons (f i q) (rows f (Nat.succ i) qs)

/-- The streamed forward pass of one head; row `i`'s keys are cut into tiles by `tile i`, any
tiling (Coq: `attention_forward`, tiles of `b` keys). -/
def attentionForward (tile : Nat → List (Key α ι) → List (List (Key α ι))) (cs : List ι)
    (scale : α) (visible : Nat → Nat → Bool) (qs ks vs : List (ι → α)) :
    List ((ι → α) × Option α) :=
  rows (fun i q => finalize (stream (tile i (maskedKeys (visible i) 0 (scores cs scale q ks) vs)))) 0 qs

/-- The same head by the two-pass specification (Coq: `attention_two_pass`). -/
def attentionTwoPass (cs : List ι) (scale : α) (visible : Nat → Nat → Bool)
    (qs ks vs : List (ι → α)) : List ((ι → α) × Option α) :=
  rows (fun i q => twoPass (maskedKeys (visible i) 0 (scores cs scale q ks) vs)) 0 qs

/-- Two lists related entry by entry (Coq: `Forall2`). -/
def Forall2 {β γ : Type} (R : β → γ → Prop) : List β → List γ → Prop
  | [], [] => True
  | .cons x xs, .cons y ys => R x y ∧ Forall2 R xs ys
  | _, _ => False

theorem rows_forall2 {β γ : Type} (R : β → γ → Prop) (f : Nat → (ι → α) → β)
    (g : Nat → (ι → α) → γ) (h : ∀ i q, R (f i q) (g i q)) (qs : List (ι → α)) :
    ∀ i, Forall2 R (rows f i qs) (rows g i qs) := by
  induction qs with
  | nil => intro _; exact True.intro
  | cons q qs ih => intro i; exact ⟨h i q, ih (Nat.succ i)⟩

/-- **The streamed forward pass of one head is the two-pass softmax, row by row, for any
visibility mask and any tiling of every row's keys** (Coq: `attention_forward_correct` in
`rocq/Attention/StreamCorrect.v`). -/
theorem attention_forward_correct (tile : Nat → List (Key α ι) → List (List (Key α ι)))
    (htile : ∀ i keys, List.flatten (tile i keys) = keys) (cs : List ι) (scale : α)
    (visible : Nat → Nat → Bool) (qs ks vs : List (ι → α)) :
    Forall2 RowEq (attentionForward tile cs scale visible qs ks vs)
      (attentionTwoPass cs scale visible qs ks vs) := by
  apply rows_forall2
  intro i q
  exact stream_row_correct _ _ (htile i _)

end Attention
end Ojas
