(** * Chunked linear cross-entropy: the algorithm the code runs.

    Tokens have hidden rows [h_i] (length d) and targets [t_i]; the
    vocabulary has weight rows [w_v] (length d) and an optional bias [b].
    The logits [z_iv = cap (h_i . w_v + b_v)] are never stored as an
    [N x V] matrix: the tokens are cut into chunks of [bt] rows, the
    vocabulary into chunks of [bv] rows, and for each (token chunk,
    vocabulary chunk) pair the code computes the [bt x bv] block of
    logits and folds it into per-token running states.

    Forward, per token, streaming over vocabulary chunks:
      - the log-sum-exp state is the online-softmax state of
        [Attention/OnlineSoftmax.v] with keys [(Some z_v, [])] (no value
        rows): running max [m] and rescaled sum [l = sum_v exp (z_v - m)],
        updated by [block_step]; [lse = m + ln l] by [finalize];
      - the target logit [z_t] (a sum over the chunk of the entries whose
        index is the target, i.e. a gather);
      - the plain sum [sum_v z_v] (for label smoothing).
    Per-token loss (as in [F.cross_entropy] with [label_smoothing = eps],
    plus the PaLM z-loss with weight [lam]):

      loss = (1 - eps) (lse - z_t) + eps (lse - (1/V) sum_v z_v) + lam lse^2

    The second term is [-(1/V) sum_v ln softmax_v] and the first
    [-(1-eps) ln softmax_t] ([LinearCrossEntropy/Loss.v]).

    Ignored tokens ([t = ignore_index]) get loss 0 and weight 0 in the
    backward.  Reductions: ["none"] (the per-token losses, 0 at ignored
    tokens), ["sum"] (sum over the kept tokens), ["mean"] (that sum
    divided by the number of kept tokens).  When every token is ignored
    the kept count is 0 and ["mean"] is defined as [0]: the division is
    guarded ([if 0 < count then total / count else 0]), so the real
    instance and the float instance (the oracle) both give 0, where an
    unguarded float [0 / 0] would be NaN; [F.cross_entropy] returns NaN
    there ([LinearCrossEntropy/Reduction.v]).

    Backward: with [w_i] the reduction weight of token [i] (0 if
    ignored; the upstream gradient for "none" / "sum"; the upstream
    gradient divided by the kept count for "mean"), [p_iv = exp (z_iv - lse_i)]:

      g_iv = w_i * ((1 + 2 lam lse_i) p_iv - eps / V - (1 - eps) [v = t_i])
               * cap' (h_i . w_v + b_v)

    and [grad_input = G W], [grad_weight = G^T H], [grad_bias = sum_i G_i],
    computed block by block: for each token chunk (outer loop) and each
    vocabulary chunk (inner loop) the code adds [G_blk W_blk] to the token
    chunk's rows of [grad_input] and [G_blk^T H_blk] to the vocabulary
    chunk's rows of [grad_weight] ([LinearCrossEntropy/Gradient.v]).

    Definitions only, over an abstract [ScalarOps] (extractable).  *)

From Coq Require Import Reals List Arith ZArith.
From Ojas Require Import ScalarOps Vector Attention.OnlineSoftmax Attention.Backward.
Import ListNotations.

Inductive reduction : Type := Red_none | Red_sum | Red_mean.

(** The options of the loss. *)
Record ce_config (T : Type) : Type := mk_ce_config {
  ce_ignore_index : Z;        (** targets equal to it are ignored *)
  ce_smoothing : T;           (** label smoothing eps *)
  ce_z_loss : T;              (** z-loss weight lam (loss += lam * lse^2) *)
  ce_softcap : option T;      (** logit softcap c: z -> c * tanh (z / c) *)
  ce_reduction : reduction
}.
Arguments mk_ce_config {T}. Arguments ce_ignore_index {T}. Arguments ce_smoothing {T}.
Arguments ce_z_loss {T}. Arguments ce_softcap {T}. Arguments ce_reduction {T}.

(** The per-token state of the vocabulary loop. *)
Record tok_state (T : Type) : Type := mk_tok_state {
  ts_lse : option (state T);  (** online-softmax (max, sum) state of the logits *)
  ts_zt : T;                  (** target logit z_t (0 until its chunk is seen) *)
  ts_zsum : T                 (** sum of the logits seen so far *)
}.
Arguments mk_tok_state {T}. Arguments ts_lse {T}. Arguments ts_zt {T}. Arguments ts_zsum {T}.

(** The accumulators of the forward token loop. *)
Record fwd_acc (T : Type) : Type := mk_fwd_acc {
  fa_losses : list T;         (** per-token losses, 0 at ignored tokens *)
  fa_lses : list T;           (** per-token lse, saved for the backward *)
  fa_total : T;               (** sum of the losses of the kept tokens *)
  fa_count : T                (** number of kept tokens *)
}.
Arguments mk_fwd_acc {T}. Arguments fa_losses {T}. Arguments fa_lses {T}.
Arguments fa_total {T}. Arguments fa_count {T}.

Section CrossEntropy.
Context {T : Type} (o : ScalarOps T).

Local Notation zero := (sc_zero o).
Local Notation one := (sc_one o).
Local Notation "x + y" := (sc_add o x y).
Local Notation "x - y" := (sc_sub o x y).
Local Notation "x * y" := (sc_mul o x y).
Local Notation "x / y" := (sc_div o x y).

Definition sc_two : T := one + one.

(** A natural number as a scalar: [1 + 1 + ... + 1]. *)
Fixpoint sc_of_nat (n : nat) : T :=
  match n with O => zero | S n => sc_of_nat n + one end.

(** ** Softcap *)

(** [tanh x = 1 - 2 / (exp (2x) + 1)] (no [inf / inf] in floats). *)
Definition sc_tanh (x : T) : T := one - sc_two / (sc_exp o (sc_two * x) + one).

(** [z -> c * tanh (z / c)], or the identity. *)
Definition softcap (cap : option T) (z : T) : T :=
  match cap with None => z | Some c => c * sc_tanh (z / c) end.

(** Its derivative at [z]: [1 - tanh (z / c)^2], or 1. *)
Definition softcap_grad (cap : option T) (z : T) : T :=
  match cap with None => one | Some c => let th := sc_tanh (z / c) in one - th * th end.

(** ** Logits of one token row against one vocabulary chunk *)

(** The vocabulary entries [(v, w_v)]. *)
Definition vocab (W : list (list T)) : list (nat * list T) := combine (seq 0 (length W)) W.

(** [h . w_v + b_v] before the softcap. *)
Definition raw_logit (bias : option (list T)) (h : list T) (e : nat * list T) : T :=
  match bias with
  | None => dot o h (snd e)
  | Some b => dot o h (snd e) + nth (fst e) b zero
  end.

(** The logits [(v, z_v)] of row [h] for the vocabulary chunk [blk]. *)
Definition chunk_logits (cap : option T) (bias : option (list T)) (h : list T)
    (blk : list (nat * list T)) : list (nat * T) :=
  map (fun e => (fst e, softcap cap (raw_logit bias h e))) blk.

(** The whole logit row [z_v = cap (h . w_v + b_v)], [v = 0 .. V-1] (the
    unchunked specification; the code never stores it). *)
Definition logits_row (cap : option T) (bias : option (list T)) (W : list (list T))
    (h : list T) : list T :=
  map (fun e => softcap cap (raw_logit bias h e)) (vocab W).

(** ** The vocabulary loop of one token *)

(** The logits as online-softmax keys with empty value rows. *)
Definition lse_keys (zs : list (nat * T)) : list key :=
  map (fun z => (Some (snd z), [])) zs.

(** Is [v] the target [t]? *)
Definition is_target (t : Z) (v : nat) : bool := Z.eqb (Z.of_nat v) t.

(** The target logit within a chunk (0 if the target is elsewhere). *)
Definition target_logit (t : Z) (zs : list (nat * T)) : T :=
  sc_sum o (map (fun z => if is_target t (fst z) then snd z else zero) zs).

(** One vocabulary chunk of the forward pass of one token. *)
Definition vocab_step (t : Z) (ts : tok_state T) (zs : list (nat * T)) : tok_state T :=
  mk_tok_state (block_step o (ts_lse ts) (lse_keys zs))
               (ts_zt ts + target_logit t zs)
               (ts_zsum ts + sc_sum o (map snd zs)).

Definition tok_init : tok_state T := mk_tok_state None zero zero.

(** The vocabulary loop over the logit chunks of one token. *)
Definition vocab_loop (t : Z) (zchunks : list (list (nat * T))) : tok_state T :=
  fold_left (vocab_step t) zchunks tok_init.

(** The chunked log-sum-exp alone: stream the chunks' keys, finalise
    ([None] = -inf for an empty vocabulary). *)
Definition chunked_lse (zchunks : list (list (nat * T))) : option T :=
  snd (finalize o 0 (stream o (map lse_keys zchunks))).

(** (loss, lse) of a token from its final state, [V] the vocabulary size.
    An empty vocabulary gives (0, 0). *)
Definition token_loss (V : nat) (eps lam : T) (ts : tok_state T) : T * T :=
  match snd (finalize o 0 (ts_lse ts)) with
  | None => (zero, zero)
  | Some L =>
      ((one - eps) * (L - ts_zt ts) + eps * (L - ts_zsum ts / sc_of_nat V) + lam * (L * L), L)
  end.

(** (loss, lse) of a token with row [h] and target [t]: the vocabulary
    chunks of [bv] rows, streamed. *)
Definition token_forward (cfg : ce_config T) (bv : nat) (W : list (list T))
    (bias : option (list T)) (h : list T) (t : Z) : T * T :=
  token_loss (length W) (ce_smoothing cfg) (ce_z_loss cfg)
    (vocab_loop t (map (chunk_logits (ce_softcap cfg) bias h) (chunk bv (vocab W)))).

(** The same loop fed with a token's logits [zs] directly (the loss as a
    function of the logits, differentiated in [LinearCrossEntropy/Gradient.v]). *)
Definition logits_loss (eps lam : T) (bv : nat) (t : Z) (zs : list T) : T :=
  fst (token_loss (length zs) eps lam (vocab_loop t (chunk bv (combine (seq 0 (length zs)) zs)))).

(** ** The token loop of the forward pass *)

Definition kept (cfg : ce_config T) (t : Z) : bool := negb (Z.eqb t (ce_ignore_index cfg)).

(** One token chunk: losses (0 at ignored tokens), lses, chunk sum and
    kept count added to the accumulators. *)
Definition token_chunk_step (cfg : ce_config T) (bv : nat) (W : list (list T))
    (bias : option (list T)) (acc : fwd_acc T) (tc : list (list T * Z)) : fwd_acc T :=
  let outs := map (fun ht => token_forward cfg bv W bias (fst ht) (snd ht)) tc in
  let losses := map (fun '(ht, out) => if kept cfg (snd ht) then fst out else zero)
                    (combine tc outs) in
  let cnt := sc_sum o (map (fun ht => if kept cfg (snd ht) then one else zero) tc) in
  mk_fwd_acc (fa_losses acc ++ losses) (fa_lses acc ++ map snd outs)
             (fa_total acc + sc_sum o losses) (fa_count acc + cnt).

(** The forward pass: token chunks of [bt] rows, vocabulary chunks of [bv]. *)
Definition ce_forward (cfg : ce_config T) (bt bv : nat) (H W : list (list T))
    (bias : option (list T)) (targets : list Z) : fwd_acc T :=
  fold_left (token_chunk_step cfg bv W bias) (chunk bt (combine H targets))
            (mk_fwd_acc [] [] zero zero).

(** The reduced loss: "none" the per-token losses, "sum" / "mean" a single
    value; "mean" with no kept token (count 0) is 0, not [0 / 0]. *)
Definition ce_output (cfg : ce_config T) (fa : fwd_acc T) : list T :=
  match ce_reduction cfg with
  | Red_none => fa_losses fa
  | Red_sum => [fa_total fa]
  | Red_mean => [if sc_ltb o zero (fa_count fa) then fa_total fa / fa_count fa else zero]
  end.

Definition ce_loss (cfg : ce_config T) (bt bv : nat) (H W : list (list T))
    (bias : option (list T)) (targets : list Z) : list T :=
  ce_output cfg (ce_forward cfg bt bv H W bias targets).

(** ** Backward *)

(** The reduction weight of token [i] with target [t], [dout] the upstream
    gradient (one entry per token for "none", one entry for "sum"/"mean"). *)
Definition token_weight (cfg : ce_config T) (dout : list T) (count : T) (i : nat) (t : Z) : T :=
  if kept cfg t then
    match ce_reduction cfg with
    | Red_none => nth i dout zero
    | Red_sum => nth 0 dout zero
    | Red_mean => nth 0 dout zero / count
    end
  else zero.

(** d loss / d z_v for a token with lse [L], target [t], logit [z] = z_v:
    [(1 + 2 lam L) exp (z - L) - eps / V - (1 - eps) [v = t]]. *)
Definition dlogit (V : nat) (eps lam L : T) (t : Z) (v : nat) (z : T) : T :=
  let g := (one + sc_two * lam * L) * sc_exp o (z - L) - eps / sc_of_nat V in
  if is_target t v then g - (one - eps) else g.

(** A token: its index, hidden row and target. *)
Definition tok : Type := (nat * (list T * Z))%type.

Definition tok_row (x : tok) : list T := fst (snd x).

(** The entry [g_iv] of G (gradient with respect to the raw logit
    [h . w_v + b_v]) for token [x] and vocabulary entry [e]. *)
Definition grad_entry (cfg : ce_config T) (V : nat) (bias : option (list T))
    (lses dout : list T) (count : T) (x : tok) (e : nat * list T) : T :=
  let '(i, (h, t)) := x in
  let r := raw_logit bias h e in
  let cap := ce_softcap cfg in
  token_weight cfg dout count i t
  * (dlogit V (ce_smoothing cfg) (ce_z_loss cfg) (nth i lses zero) t (fst e) (softcap cap r)
     * softcap_grad cap r).

(** The block of G for a token chunk and a vocabulary chunk. *)
Definition grad_block (cfg : ce_config T) (V : nat) (bias : option (list T))
    (lses dout : list T) (count : T) (tc : list tok) (vc : list (nat * list T))
    : list (list T) :=
  map (fun x => map (grad_entry cfg V bias lses dout count x) vc) tc.

(** [acc[v] += r] (rows). *)
Definition add_row_at (acc : list (list T)) (v : nat) (r : list T) : list (list T) :=
  firstn v acc ++ vadd o (nth v acc []) r :: skipn (S v) acc.

(** [acc[v] += x] (scalars). *)
Definition add_at (acc : list T) (v : nat) (x : T) : list T :=
  firstn v acc ++ (nth v acc zero + x) :: skipn (S v) acc.

(** The backward state: the current token chunk's rows of grad_input,
    grad_weight (V rows), grad_bias (V entries). *)
Definition bwd_state : Type := (list (list T) * list (list T) * list T)%type.

(** One vocabulary chunk [vc] for the token chunk [tc]:
    [grad_input[tc] += G_blk W_blk], [grad_weight[vc] += G_blk^T H_blk],
    [grad_bias[vc] += column sums of G_blk]. *)
Definition vocab_bwd_step (cfg : ce_config T) (V : nat) (bias : option (list T))
    (lses dout : list T) (count : T) (tc : list tok) (st : bwd_state)
    (vc : list (nat * list T)) : bwd_state :=
  let '(gin, gW, gb) := st in
  let G := grad_block cfg V bias lses dout count tc vc in
  let gin' := map (fun rg => vadd o (fst rg) (weighted_sum o (snd rg) (map snd vc)))
                  (combine gin G) in
  let cols := combine (seq 0 (length vc)) vc in
  let gW' := fold_left (fun acc je => add_row_at acc (fst (snd je))
                          (weighted_sum o (column o G (fst je)) (map tok_row tc))) cols gW in
  let gb' := fold_left (fun acc je => add_at acc (fst (snd je))
                          (sc_sum o (column o G (fst je)))) cols gb in
  (gin', gW', gb').

(** One token chunk: its grad_input rows start at zero and are complete
    after the vocabulary loop. *)
Definition token_bwd_step (cfg : ce_config T) (V : nat) (bias : option (list T))
    (lses dout : list T) (count : T) (vchunks : list (list (nat * list T)))
    (st : bwd_state) (tc : list tok) : bwd_state :=
  let '(gin, gW, gb) := st in
  let init := map (fun x => vzero o (length (tok_row x))) tc in
  let '(gin_c, gW', gb') :=
      fold_left (vocab_bwd_step cfg V bias lses dout count tc) vchunks (init, gW, gb) in
  (gin ++ gin_c, gW', gb').

(** The tokens [(i, (h_i, t_i))]. *)
Definition tokens (H : list (list T)) (targets : list Z) : list tok :=
  combine (seq 0 (length H)) (combine H targets).

(** The backward pass: (grad_input, grad_weight, grad_bias), from the
    forward's saved lses and kept count and the upstream gradient [dout]. *)
Definition ce_backward (cfg : ce_config T) (bt bv : nat) (H W : list (list T))
    (bias : option (list T)) (targets : list Z) (fa : fwd_acc T) (dout : list T)
    : bwd_state :=
  fold_left (token_bwd_step cfg (length W) bias (fa_lses fa) dout (fa_count fa)
               (chunk bv (vocab W)))
            (chunk bt (tokens H targets))
            ([], map (fun w => vzero o (length w)) W, vzero o (length W)).

(** ** The unchunked products (the specification of the backward) *)

(** G, all tokens by all vocabulary entries. *)
Definition grad_matrix (cfg : ce_config T) (bias : option (list T)) (H W : list (list T))
    (targets : list Z) (fa : fwd_acc T) (dout : list T) : list (list T) :=
  grad_block cfg (length W) bias (fa_lses fa) dout (fa_count fa) (tokens H targets) (vocab W).

(** grad_input = G W *)
Definition grad_input_spec (G W : list (list T)) : list (list T) :=
  map (fun g => weighted_sum o g W) G.

(** grad_weight = G^T H *)
Definition grad_weight_spec (G H W : list (list T)) : list (list T) :=
  map (fun v => weighted_sum o (column o G v) H) (seq 0 (length W)).

(** grad_bias = column sums of G *)
Definition grad_bias_spec (G W : list (list T)) : list T :=
  map (fun v => sc_sum o (column o G v)) (seq 0 (length W)).

End CrossEntropy.
