prelude
import Proofs.OnlineSoftmax
/-!
# (b) Chunked log-sum-exp and the chunked cross-entropy loss

Mirror of `rocq/LinearCrossEntropy/Definitions.v` (definitions), `rocq/LinearCrossEntropy/ChunkedLse.v`,
`rocq/LinearCrossEntropy/Loss.v` and `rocq/LinearCrossEntropy/Reduction.v` (theorems).  A token's logits are
pairs `(v, z_v)` (vocabulary index, logit), cut into chunks in any way; the vocabulary loop streams
the chunks through the online softmax of `OnlineSoftmax.lean` (keys with empty value rows) and
sums the target logit and the logits on the way.  The token loop sums the per-token losses over
any cut of the tokens into chunks, ignored tokens contributing nothing.
-/

namespace Ojas
namespace CrossEntropy
open ExpField Attention
variable {α : Type} [ExpField α]

/-- The logits as online-softmax keys with empty value rows (Coq: `lse_keys`). -/
def lseKeys (zs : List (Nat × α)) : List (Key α Unit) :=
  List.map (fun z => ⟨some z.2, fun _ => 0⟩) zs

/-- The chunked log-sum-exp: stream the chunks' keys, finalise; `none` = `-inf` for an empty
vocabulary (Coq: `chunked_lse`). -/
def chunkedLse (zchunks : List (List (Nat × α))) : Option α :=
  (finalize (stream (List.map lseKeys zchunks))).2

/-- `log Σ_v exp z_v` (Coq: `lse_R`). -/
def lse (zs : List (Nat × α)) : α := log (sum (List.map (fun z => exp z.2) zs))

theorem flatten_map_lseKeys (zchunks : List (List (Nat × α))) :
    List.flatten (List.map lseKeys zchunks) = lseKeys (List.flatten zchunks) := by
  induction zchunks with
  | nil => rfl
  | cons zs zss ih =>
    change lseKeys zs ++ List.flatten (List.map lseKeys zss) = lseKeys (zs ++ List.flatten zss)
    rw [ih]; unfold lseKeys; rw [List.map_append]

theorem sum_exp_pos (M : α) (z : Nat × α) (zs : List (Nat × α)) :
    0 < kwSum M (lseKeys (List.cons z zs)) := by
  change 0 < exp (z.2 - M) + kwSum M (lseKeys zs)
  apply add_pos_of_pos_of_nonneg (exp_pos _)
  induction zs with
  | nil => exact le_refl 0
  | cons z' zs ih =>
    change 0 ≤ exp (z'.2 - M) + kwSum M (lseKeys zs)
    exact add_nonneg (le_of_lt (exp_pos _)) ih

/-- `Σ exp z_v = exp M * Σ exp (z_v - M)`. -/
theorem sum_exp_shift (M : α) (zs : List (Nat × α)) :
    sum (List.map (fun z => exp z.2) zs) = exp M * kwSum M (lseKeys zs) := by
  induction zs with
  | nil => exact Eq.symm (mul_zero _)
  | cons z zs ih =>
    change exp z.2 + sum (List.map (fun z => exp z.2) zs)
      = exp M * (exp (z.2 - M) + kwSum M (lseKeys zs))
    rw [ih, mul_add, ← exp_add, add_comm M, sub_eq_add_neg, add_assoc, neg_add_cancel, add_zero]

/-- A state representing the keys of a nonempty logit list finalises to its log-sum-exp. -/
theorem lse_of_represents (st : Option (State α Unit)) (z : Nat × α) (zs : List (Nat × α))
    (h : Represents st (lseKeys (List.cons z zs))) :
    (finalize st).2 = some (lse (List.cons z zs)) := by
  cases st with
  | none =>
    change omax (some z.2) (blockMax (lseKeys zs)) = none at h
    cases hb : blockMax (lseKeys zs) with
    | none => rw [hb] at h; exact (some_ne_none h).elim
    | some b => rw [hb] at h; exact (some_ne_none h).elim
  | some s =>
    have ⟨_, hl, _⟩ := h
    change some (s.m + log s.l) = some (log (sum (List.map (fun z => exp z.2) (List.cons z zs))))
    rw [sum_exp_shift s.m, ← hl, log_exp_mul]
    rw [hl]; exact sum_exp_pos s.m z zs

/-- **Chunked log-sum-exp**: for any cut of a nonempty vocabulary into chunks, the chunked lse is
`log Σ_v exp z_v` (Coq: `chunked_lse_correct` in `rocq/LinearCrossEntropy/ChunkedLse.v`). -/
theorem chunked_lse_correct (zchunks : List (List (Nat × α))) (z : Nat × α) (zs : List (Nat × α))
    (h : List.flatten zchunks = List.cons z zs) :
    chunkedLse zchunks = some (lse (List.cons z zs)) := by
  apply lse_of_represents
  rw [← h, ← flatten_map_lseKeys]
  exact stream_represents _

/-! ## The vocabulary loop of one token -/

/-- The target logit within a chunk (0 if the target is elsewhere) (Coq: `target_logit`). -/
def targetLogit (t : Nat) (zs : List (Nat × α)) : α :=
  sum (List.map (fun z => cond (Nat.beq z.1 t) z.2 0) zs)

/-- The state of the vocabulary loop: lse state, target logit, sum of logits (Coq: `tok_state`). -/
structure TokState (α : Type) where
  lse : Option (State α Unit)
  zt : α
  zsum : α

/-- One vocabulary chunk (Coq: `vocab_step`). -/
def vocabStep (t : Nat) (ts : TokState α) (zs : List (Nat × α)) : TokState α :=
  ⟨blockStep ts.lse (lseKeys zs), ts.zt + targetLogit t zs, ts.zsum + sum (List.map Prod.snd zs)⟩

/-- The vocabulary loop over the logit chunks of one token (Coq: `vocab_loop`). -/
def vocabLoop (t : Nat) (zchunks : List (List (Nat × α))) : TokState α :=
  List.foldl (vocabStep t) ⟨none, 0, 0⟩ zchunks

theorem vocabLoop_fold (t : Nat) (zchunks : List (List (Nat × α))) :
    ∀ (ts : TokState α) (zs : List (Nat × α)), Represents ts.lse (lseKeys zs) →
      Represents (List.foldl (vocabStep t) ts zchunks).lse (lseKeys (zs ++ List.flatten zchunks))
      ∧ (List.foldl (vocabStep t) ts zchunks).zt = ts.zt + targetLogit t (List.flatten zchunks)
      ∧ (List.foldl (vocabStep t) ts zchunks).zsum
          = ts.zsum + sum (List.map Prod.snd (List.flatten zchunks)) := by
  induction zchunks with
  | nil =>
    intro ts zs h
    change Represents ts.lse (lseKeys (zs ++ [])) ∧ ts.zt = ts.zt + 0 ∧ ts.zsum = ts.zsum + 0
    rw [List.append_nil, add_zero, add_zero]
    exact ⟨h, rfl, rfl⟩
  | cons c cs ih =>
    intro ts zs h
    have h1 : Represents (vocabStep t ts c).lse (lseKeys (zs ++ c)) := by
      unfold lseKeys; rw [List.map_append]; exact blockStep_represents ts.lse _ _ h
    have ⟨r, e1, e2⟩ := ih (vocabStep t ts c) (zs ++ c) h1
    rw [List.append_assoc] at r
    refine ⟨r, ?_, ?_⟩
    · change (List.foldl (vocabStep t) (vocabStep t ts c) cs).zt = _
      rw [e1]
      change ts.zt + targetLogit t c + targetLogit t (List.flatten cs) = ts.zt + targetLogit t (c ++ (List.flatten cs))
      unfold targetLogit; rw [List.map_append, sum_append, add_assoc]
    · change (List.foldl (vocabStep t) (vocabStep t ts c) cs).zsum = _
      rw [e2]
      change ts.zsum + sum (List.map Prod.snd c) + sum (List.map Prod.snd (List.flatten cs))
        = ts.zsum + sum (List.map Prod.snd (c ++ (List.flatten cs)))
      rw [List.map_append, sum_append, add_assoc]

/-- **The vocabulary loop, any chunking**: it ends with the lse state of all the logits, the
target logit and the sum of the logits (Coq: `vocab_loop_correct` in `rocq/LinearCrossEntropy/Loss.v`). -/
theorem vocab_loop_correct (t : Nat) (zchunks : List (List (Nat × α))) :
    Represents (vocabLoop t zchunks).lse (lseKeys (List.flatten zchunks))
    ∧ (vocabLoop t zchunks).zt = targetLogit t (List.flatten zchunks)
    ∧ (vocabLoop t zchunks).zsum = sum (List.map Prod.snd (List.flatten zchunks)) := by
  have ⟨r, e1, e2⟩ := vocabLoop_fold t zchunks ⟨none, 0, 0⟩ [] rfl
  rw [zero_add] at e1
  rw [zero_add] at e2
  exact ⟨r, e1, e2⟩

/-- (loss, lse) of a token from its final state, `V` the vocabulary size, `eps` the label
smoothing, `lam` the z-loss weight; an empty vocabulary gives (0, 0) (Coq: `token_loss`). -/
def tokenLoss (V eps lam : α) (ts : TokState α) : α × α :=
  match (finalize ts.lse).2 with
  | none => (0, 0)
  | some L => ((1 - eps) * (L - ts.zt) + eps * (L - ts.zsum / V) + lam * (L * L), L)

/-- The specification of the per-token loss from the whole logit row:
`(1 - eps)(lse - z_t) + eps (lse - Σ_v z_v / V) + lam lse²` (Coq: `ce_token_loss_R`). -/
def tokenLossSpec (V eps lam : α) (t : Nat) (zs : List (Nat × α)) : α :=
  (1 - eps) * (lse zs - targetLogit t zs) + eps * (lse zs - sum (List.map Prod.snd zs) / V)
    + lam * (lse zs * lse zs)

/-- **The chunked per-token loss is the specification, for any chunking** of a nonempty logit row
(Coq: `token_loss_chunked` in `rocq/LinearCrossEntropy/Loss.v`, chunks of any size `bv`). -/
theorem token_loss_chunked (V eps lam : α) (t : Nat) (zchunks : List (List (Nat × α)))
    (z : Nat × α) (zs : List (Nat × α)) (h : List.flatten zchunks = List.cons z zs) :
    tokenLoss V eps lam (vocabLoop t zchunks)
      = (tokenLossSpec V eps lam t (List.cons z zs), lse (List.cons z zs)) := by
  have ⟨r, e1, e2⟩ := vocab_loop_correct t zchunks
  rw [h] at r; rw [h] at e1; rw [h] at e2
  unfold tokenLoss
  rw [lse_of_represents _ z zs r]
  change ((1 - eps) * (lse (List.cons z zs) - (vocabLoop t zchunks).zt)
      + eps * (lse (List.cons z zs) - (vocabLoop t zchunks).zsum / V)
      + lam * (lse (List.cons z zs) * lse (List.cons z zs)), lse (List.cons z zs)) = _
  rw [e1, e2]
  rfl

/-! ## The token loop: any token chunking, ignored tokens dropped -/

/-- A token: its logit row, already cut into vocabulary chunks, and its target. -/
structure Tok (α : Type) where
  zchunks : List (List (Nat × α))
  target : Nat

/-- The configuration: vocabulary size, smoothing, z-loss weight, ignored target
(Coq: `ce_config`; the ignore index is a natural number here). -/
structure Config (α : Type) where
  V : α
  eps : α
  lam : α
  ignoreIndex : Nat

/-- Is the token counted? (Coq: `kept`.) -/
def kept (cfg : Config α) (x : Tok α) : Bool := cond (Nat.beq x.target cfg.ignoreIndex) false true

/-- The loss the forward pass computes for a token (Coq: `fst (token_forward …)`). -/
def fwdLoss (cfg : Config α) (x : Tok α) : α := (tokenLoss cfg.V cfg.eps cfg.lam (vocabLoop x.target x.zchunks)).1

/-- The accumulators of the token loop: sum of the losses and number of kept tokens
(Coq: `fa_total`, `fa_count` of `fwd_acc`). -/
structure FwdAcc (α : Type) where
  total : α
  count : α

/-- One token chunk: losses (0 at ignored tokens) and kept count added (Coq: `token_chunk_step`). -/
def tokenChunkStep (cfg : Config α) (acc : FwdAcc α) (tc : List (Tok α)) : FwdAcc α :=
  ⟨acc.total + sum (List.map (fun x => cond (kept cfg x) (fwdLoss cfg x) 0) tc),
   acc.count + sum (List.map (fun x => cond (kept cfg x) 1 0) tc)⟩

/-- The forward pass over token chunks (Coq: `ce_forward`). -/
def ceForward (cfg : Config α) (tcs : List (List (Tok α))) : FwdAcc α :=
  List.foldl (tokenChunkStep cfg) ⟨0, 0⟩ tcs

theorem ceForward_fold (cfg : Config α) (tcs : List (List (Tok α))) :
    ∀ acc : FwdAcc α,
      (List.foldl (tokenChunkStep cfg) acc tcs).total
        = acc.total + sum (List.map (fun x => cond (kept cfg x) (fwdLoss cfg x) 0) (List.flatten tcs))
      ∧ (List.foldl (tokenChunkStep cfg) acc tcs).count
        = acc.count + sum (List.map (fun x => cond (kept cfg x) 1 0) (List.flatten tcs)) := by
  induction tcs with
  | nil => intro acc; exact ⟨Eq.symm (add_zero _), Eq.symm (add_zero _)⟩
  | cons tc tcs ih =>
    intro acc
    have ⟨e1, e2⟩ := ih (tokenChunkStep cfg acc tc)
    refine ⟨?_, ?_⟩
    · change (List.foldl (tokenChunkStep cfg) (tokenChunkStep cfg acc tc) tcs).total = _
      rw [e1]
      change acc.total + _ + _ = _
      rw [List.flatten_cons, List.map_append, sum_append, add_assoc]
    · change (List.foldl (tokenChunkStep cfg) (tokenChunkStep cfg acc tc) tcs).count = _
      rw [e2]
      change acc.count + _ + _ = _
      rw [List.flatten_cons, List.map_append, sum_append, add_assoc]

/-- **The chunked loss, any token chunking, ignored tokens dropped**: the forward pass sums the
specification loss over the kept tokens and counts them, whatever the token chunks and each
token's vocabulary chunks, provided each kept token's logit row is nonempty
(Coq: `ce_forward_fold` and `ce_loss_correct` in `rocq/LinearCrossEntropy/Reduction.v`). -/
theorem ce_forward_correct (cfg : Config α) (tcs : List (List (Tok α)))
    (spec : Tok α → α)
    (hspec : ∀ x : Tok α, ∀ z zs, List.flatten x.zchunks = List.cons z zs →
      spec x = tokenLossSpec cfg.V cfg.eps cfg.lam x.target (List.cons z zs))
    (hne : ∀ x : Tok α, ∃ z zs, List.flatten x.zchunks = List.cons z zs) :
    (ceForward cfg tcs).total = sum (List.map spec (List.filter (kept cfg) (List.flatten tcs)))
    ∧ (ceForward cfg tcs).count
        = sum (List.map (fun _ => (1 : α)) (List.filter (kept cfg) (List.flatten tcs))) := by
  have ⟨e1, e2⟩ := ceForward_fold cfg tcs ⟨0, 0⟩
  refine ⟨?_, ?_⟩
  · change (List.foldl (tokenChunkStep cfg) ⟨0, 0⟩ tcs).total = _
    rw [e1]
    change 0 + _ = _
    rw [zero_add, ← sum_map_filter]
    apply sum_map_congr
    intro x
    have ⟨z, zs, h⟩ := hne x
    unfold fwdLoss
    rw [token_loss_chunked cfg.V cfg.eps cfg.lam x.target x.zchunks z zs h, hspec x z zs h]
  · change (List.foldl (tokenChunkStep cfg) ⟨0, 0⟩ tcs).count = _
    rw [e2]
    change 0 + _ = _
    rw [zero_add, ← sum_map_filter]

/-- The "mean" reduction: sum of the kept losses over the number of kept tokens
(Coq: `ce_output` with `Red_mean`; its guard for a zero count is not modelled here). -/
def ceMean (cfg : Config α) (tcs : List (List (Tok α))) : α :=
  (ceForward cfg tcs).total / (ceForward cfg tcs).count

/-- The chunked "mean" loss is the specification's mean over the kept tokens
(Coq: `ce_loss_correct`, case `Red_mean`). -/
theorem ce_mean_correct (cfg : Config α) (tcs : List (List (Tok α))) (spec : Tok α → α)
    (hspec : ∀ x : Tok α, ∀ z zs, List.flatten x.zchunks = List.cons z zs →
      spec x = tokenLossSpec cfg.V cfg.eps cfg.lam x.target (List.cons z zs))
    (hne : ∀ x : Tok α, ∃ z zs, List.flatten x.zchunks = List.cons z zs) :
    ceMean cfg tcs = sum (List.map spec (List.filter (kept cfg) (List.flatten tcs)))
      / sum (List.map (fun _ => (1 : α)) (List.filter (kept cfg) (List.flatten tcs))) := by
  have ⟨e1, e2⟩ := ce_forward_correct cfg tcs spec hspec hne
  unfold ceMean; rw [e1, e2]

end CrossEntropy
end Ojas
