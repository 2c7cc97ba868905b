"""The PyTorch reference of :func:`ojas_ref.attention`: the online-softmax recurrence of
``rocq/Attention/OnlineSoftmax.v`` run tile by tile (forward) and ``attention_backward`` of
``rocq/Attention/Backward.v`` (backward, the probabilities recomputed from the saved lse), the
Philox-4x32-10 keep mask of attention dropout, and the autograd Function
:class:`_OnlineSoftmaxAttention`.

The public functions, their argument checks and the dispatch to the Triton kernel are in
``ojas_ref/functional/attention.py``, whose docstring states the theorems in full. The theorems
each piece below implements (cited beside the code too):

* the tile loop of ``_reference_forward`` (``_online_softmax_block_step``, ``_finalize``,
  ``_key_tiles``): ``Ojas.Attention.StreamCorrect`` (``stream_row_correct``,
  ``attention_forward_correct``: any key tiling gives the two-pass softmax, so ``_BLOCK_Q`` and
  ``_BLOCK_K`` do not change the result in exact arithmetic);
* the masks (``_tile_visibility``, ``_tile_scores``): ``Ojas.Attention.Mask``
  (``visibility_true_iff``, ``stream_row_masked_keys``, ``stream_row_fully_masked``) and, for a
  float mask, ``Ojas.Attention.AdditiveMask`` (``attention_forward_float_mask_correct``);
* the backward pass (``_reference_backward``): ``Ojas.Attention.Lse`` (``stream_lse``,
  ``row_probs_stream_row``), ``Ojas.Attention.BackwardCorrect`` (``backward_D_identity``,
  ``row_dscores_is_derive``, ``dQ_row_is_derive``, ``dK_row_is_derive``, ``dV_row_is_derive``)
  and the mask gradient ``Ojas.Attention.AdditiveMask.attention_dbias_is_derive``;
* grouped-query attention (``_grouped``, the sums in ``_reference_backward``):
  ``Ojas.Attention.GroupedQuery`` (``gqa_forward_repeat_kv``, ``gqa_dQ_is_derive``,
  ``gqa_dK_is_derive``, ``gqa_dV_is_derive``);
* dropout: per query row over the reals, the streamed row on the values c Z_ij v_j
  (``stream_row_correct``, ``row_dscores_is_derive``, ``dQ_row_is_derive``,
  ``dK_row_is_derive``).

No theorem covers: floating point (the forward's rounding is bounded by
``Ojas.Attention.StreamError.stream_row_error_bound``, the tests' tolerance against the
oracle; the backward's is not bounded); the sum of dS over a broadcast mask's dimensions
(``_accumulate_mask_grad``); the dropout mask (``_philox4x32`` and ``_dropout_keep``: its
generator and its distribution are tested, not proved), dV with dropout and the dropout path as
a whole (the sums over the rows of a head).
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import torch
from torch import Tensor

from ojas_ref.functional.autocast import autocast_off
from ojas_ref.functional.dispatch import refuse_double_backward

# Query rows and keys per tile. The result does not depend on them
# (Ojas.Attention.StreamCorrect); they bound the memory of one score block.
_BLOCK_Q = 32
_BLOCK_K = 16


# --------------------------------------------------------------------------
# Attention dropout: a counter-based mask (Philox-4x32-10)
# --------------------------------------------------------------------------

# Philox-4x32 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011) with
# 10 rounds, as Random123 and Triton's ``tl.philox_impl`` compute it.
_PHILOX_ROUND_A, _PHILOX_ROUND_B = 0xD2511F53, 0xCD9E8D57
_PHILOX_KEY_A, _PHILOX_KEY_B = 0x9E3779B9, 0xBB67AE85
_PHILOX_ROUNDS = 10
_U32 = 0xFFFFFFFF
_DROPOUT_BITS = 31  # the mask compares the top 31 bits of a Philox word with a threshold


class _Dropout(NamedTuple):
    """One call's attention dropout: the Philox key ``seed`` (int64 [2], two values in
    [0, 2^32), on the inputs' device), ``threshold`` (an element is dropped iff the top 31
    bits of its Philox word are below it) and ``scale`` (1 / (1 - p), 0 for p = 1)."""

    seed: Tensor
    threshold: int
    scale: float


def _mulhilo32(a: int, x: Tensor) -> tuple[Tensor, Tensor]:
    """(high, low) 32-bit halves of ``a * x`` for a 32-bit constant a and int64 x in
    [0, 2^32): x is split in 16-bit halves so that no int64 product overflows."""
    upper = a * (x >> 16)  # < 2^48
    t = a * (x & 0xFFFF) + ((upper & 0xFFFF) << 16)  # < 2^49
    return (upper >> 16) + (t >> 32), t & _U32


def _philox4x32(
    c0: Tensor, c1: Tensor, c2: Tensor, c3: Tensor, k0: Tensor, k1: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Philox-4x32-10 of the counter (c0, c1, c2, c3) under the key (k0, k1), all int64
    tensors holding 32-bit unsigned values (broadcast together): the rounds of Triton's
    ``tl.philox_impl`` (Random123's ``philox4x32_R``), bit for bit."""
    for _ in range(_PHILOX_ROUNDS):
        hi_b, lo_b = _mulhilo32(_PHILOX_ROUND_B, c2)
        hi_a, lo_a = _mulhilo32(_PHILOX_ROUND_A, c0)
        c0, c1, c2, c3 = hi_b ^ c1 ^ k0, lo_b, hi_a ^ c3 ^ k1, lo_a
        k0, k1 = (k0 + _PHILOX_KEY_A) & _U32, (k1 + _PHILOX_KEY_B) & _U32
    return c0, c1, c2, c3


def _dropout_args(dropout_p: float, device: torch.device) -> Optional[_Dropout]:
    """None for dropout_p = 0; else the key drawn once for this call from torch's default
    generator of ``device`` (``torch.manual_seed`` reproduces it; two values of
    ``torch.randint``), the threshold round(p * 2^31) (at most 2^31 - 1) and 1 / (1 - p)."""
    if dropout_p == 0:
        return None
    seed = torch.randint(0, 2**32, (2,), dtype=torch.int64, device=device)
    threshold = min(round(dropout_p * 2**_DROPOUT_BITS), 2**_DROPOUT_BITS - 1)
    return _Dropout(seed, threshold, 0.0 if dropout_p == 1 else 1.0 / (1.0 - dropout_p))


def _dropout_keep(dropout: _Dropout, bh: Tensor, i: Tensor, j: Tensor) -> Tensor:
    """Whether the probability of query row i, key j in head row bh = b * Hq + h is kept
    (bool, broadcast over bh, i, j: int64 tensors). Element (bh, i, j) takes word j % 4 of
    Philox-4x32-10 at the counter (j // 4, i, bh, 0) under the key ``dropout.seed``, and is
    dropped iff that word's top 31 bits are below ``dropout.threshold`` (probability
    threshold / 2^31, dropout_p rounded to a multiple of 2^-31). The kernels compute the
    same function (``_dropout_words`` and ``_kept`` of kernels/ojas_kernels/attention_tiles.py),
    so the mask does not depend on the tiling and is recomputed in the backward pass, never
    stored."""
    c0, c1, c2 = torch.broadcast_tensors(j >> 2, i, bh)
    words = torch.stack(_philox4x32(c0, c1, c2, torch.zeros_like(c0), dropout.seed[0], dropout.seed[1]), dim=-1)
    word = words.gather(-1, torch.broadcast_to(j & 3, c0.shape).unsqueeze(-1)).squeeze(-1)
    return (word >> (32 - _DROPOUT_BITS)) >= dropout.threshold


def _dropout_keep_mask(dropout: _Dropout, batch: int, heads: int, seq_q: int, seq_k: int) -> Tensor:
    """The whole [batch, heads, seq_q, seq_k] keep mask of :func:`_dropout_keep` (for tests)."""
    device = dropout.seed.device
    bh = torch.arange(batch * heads, device=device).view(batch, heads, 1, 1)
    return _dropout_keep(
        dropout, bh, torch.arange(seq_q, device=device).unsqueeze(1), torch.arange(seq_k, device=device)
    )


def _tile_keep(
    dropout: Optional[_Dropout], shape: tuple[int, int, int], q0: int, q1: int, k0: int, k1: int
) -> Optional[Tensor]:
    """The keep mask of one tile, [B, Hkv, G, q1 - q0, k1 - k0] for (B, Hkv, G) = shape
    (query head h = hkv * G + g); None without dropout."""
    if dropout is None:
        return None
    device = dropout.seed.device
    bh = torch.arange(math.prod(shape), device=device).view(*shape, 1, 1)  # b * Hq + hkv * G + g
    return _dropout_keep(
        dropout, bh, torch.arange(q0, q1, device=device).unsqueeze(1), torch.arange(k0, k1, device=device)
    )


# --------------------------------------------------------------------------
# One tile: scores, masks, the block step, finalize
# --------------------------------------------------------------------------


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _tile_visibility(
    q0: int, q1: int, k0: int, k1: int, is_causal: bool, window: Optional[int], device: torch.device
) -> Optional[Tensor]:
    """[q1 - q0, k1 - k0] bool: key j visible to query i by ``causal`` (j <= i) and
    ``in_window`` (|i - j| < window) of rocq/Attention/OnlineSoftmax.v; None if neither is set."""
    if not is_causal and window is None:
        return None
    i = torch.arange(q0, q1, device=device).unsqueeze(1)
    j = torch.arange(k0, k1, device=device).unsqueeze(0)
    visible = torch.ones(q1 - q0, k1 - k0, dtype=torch.bool, device=device)
    if is_causal:
        visible = visible & (j <= i)
    if window is not None:
        visible = visible & ((i - j).abs() < window)
    return visible


def _key_tiles(q0: int, q1: int, n_keys: int, block_k: int, is_causal: bool, window: Optional[int]) -> range:
    """Starts of the key tiles (multiples of block_k) that may hold a visible key for
    query rows q0..q1-1. The others hold only masked keys, on which ``block_step``
    leaves the state unchanged (max unchanged, rescale exp(0) = 1, zero weights; masked
    keys are dropped keys, Ojas.Attention.Mask), so skipping them is the same ``stream``."""
    lo, hi = 0, n_keys
    if is_causal:
        hi = min(hi, q1)
    if window is not None:
        lo = max(lo, q0 - window + 1)
        hi = min(hi, q1 - 1 + window)
    return range(lo // block_k * block_k, hi, block_k)


def _tile_scores(
    q_t: Tensor, k_t: Tensor, scale: float, mask_t: Optional[Tensor], visible_t: Optional[Tensor]
) -> Tensor:
    """Scores of one tile: ``scores`` (s_ij = scale * (q_i . k_j)) and ``masked_keys``
    (masked keys get -inf, the Coq ``None``) of rocq/Attention/OnlineSoftmax.v; a float
    mask is added to the scores as in SDPA (``add_bias`` of rocq/Attention/AdditiveMask.v,
    its -inf entries masked keys: ``float_mask``).

    q_t: [B, Hkv, G, tq, E] (G query heads per key/value head), k_t: [B, Hkv, tk, E],
    mask_t: None or [B, Hkv, G, tq, tk]; returns [B, Hkv, G, tq, tk].
    """
    B, Hkv, G, tq, E = q_t.shape
    s = (q_t.reshape(B, Hkv, G * tq, E) @ k_t.transpose(-1, -2)).mul_(scale).view(B, Hkv, G, tq, k_t.shape[2])
    if mask_t is not None:
        if mask_t.dtype == torch.bool:
            visible_t = mask_t if visible_t is None else mask_t & visible_t
        else:
            s = s + mask_t.to(s.dtype)
    if visible_t is not None:
        s = s.masked_fill(~visible_t, -math.inf)
    return s


def _online_softmax_block_step(
    m: Tensor, l: Tensor, acc: Tensor, scores: Tensor, value: Tensor, keep: Optional[Tensor] = None
) -> tuple[Tensor, Tensor, Tensor]:
    """One key tile of the forward pass: ``block_step`` of rocq/Attention/OnlineSoftmax.v.

        m'  = max(m, max_j s_j)
        p_j = exp(s_j - m')                 (0 for a masked key, s_j = -inf)
        l'  = exp(m - m') * l + sum_j p_j
        acc'= exp(m - m') * acc + sum_j p_j v_j

    The Coq state ``None`` (no unmasked key yet) is m = -inf, l = 0, acc = 0. While
    m' = -inf the state stays None: the reference point is 0 instead of -inf there, so
    that exp(-inf - 0) = 0 replaces exp(-inf + inf) = NaN. From None to a first
    unmasked key, exp(m - m') = 0 gives l' = sum_j p_j, acc' = sum_j p_j v_j, the
    Coq ``None`` branch.

    m, l: [B, Hkv, G, tq]; acc: [B, Hkv, G, tq, Ev]; scores: [B, Hkv, G, tq, tk];
    value: [B, Hkv, tk, Ev] (shared by the G query heads of a group).

    With dropout, ``keep`` ([B, Hkv, G, tq, tk] bool): l sums every p_j as above, acc only
    the kept ones (acc' = exp(m - m') * acc + sum_j keep_j p_j v_j); the caller multiplies
    the finalized output by 1 / (1 - dropout_p). Per row that is ``block_step`` on the
    values keep_ij v_j (module docstring: what the theorems then cover).
    """
    m_new = torch.maximum(m, scores.amax(dim=-1))
    m_ref = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
    p = torch.exp(scores - m_ref.unsqueeze(-1))
    alpha = torch.exp(m - m_ref)
    l_new = alpha * l + p.sum(dim=-1)
    if keep is not None:
        p = p * keep
    acc_new = alpha.unsqueeze(-1) * acc + (p.flatten(2, 3) @ value).view(acc.shape)
    return m_new, l_new, acc_new


def _finalize(m: Tensor, l: Tensor, acc: Tensor) -> tuple[Tensor, Tensor]:
    """``finalize`` of rocq/Attention/OnlineSoftmax.v: out = acc / l, lse = m + ln l;
    zeros and lse = -inf for a fully masked row (state None, m = -inf)."""
    none = torch.isneginf(m)
    l_safe = torch.where(none, torch.ones_like(l), l)
    out = torch.where(none.unsqueeze(-1), torch.zeros_like(acc), acc / l_safe.unsqueeze(-1))
    lse = torch.where(none, m, m + torch.log(l))
    return out, lse


# --------------------------------------------------------------------------
# Whole-head passes
# --------------------------------------------------------------------------


def _grouped(query: Tensor, key: Tensor, value: Tensor, attn_mask: Optional[Tensor], dtype: torch.dtype):
    """Views for grouped-query attention without repeating key/value: query
    [B, Hkv, G, Sq, E], key/value [B, Hkv, Sk, *], mask [B, Hkv, G, Sq, Sk] (an expanded
    view); query head h = hkv * G + g is served by key/value head hkv = h // G
    (``kv_head`` of rocq/Attention/GroupedQuery.v; the same as repeating each key/value
    head G times, Ojas.Attention.GroupedQuery.gqa_forward_repeat_kv)."""
    B, Hq, Sq, E = query.shape
    Hkv, Sk = key.shape[1], key.shape[2]
    G = Hq // Hkv if Hkv else 1  # no heads at all: one (empty) group of none
    q = query.to(dtype).view(B, Hkv, G, Sq, E)
    mask = None
    if attn_mask is not None:
        mask = attn_mask.expand(B, Hq, Sq, Sk).view(B, Hkv, G, Sq, Sk)
    return q, key.to(dtype), value.to(dtype), mask


def _reference_forward(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Optional[Tensor],
    is_causal: bool,
    scale: float,
    window: Optional[int],
    dropout: Optional[_Dropout] = None,
    block_q: int = _BLOCK_Q,
    block_k: int = _BLOCK_K,
) -> tuple[Tensor, Tensor]:
    """``attention_forward`` of rocq/Attention/OnlineSoftmax.v for all heads: ``stream``
    over key tiles of block_k keys, then ``finalize``, for each tile of block_q query rows.
    Returns out [B, Hq, Sq, Ev] and lse [B, Hq, Sq], both in the compute dtype (float32,
    float64 for float64 inputs). With ``dropout`` the output is that of the kept
    probabilities times 1 / (1 - p) (:func:`_online_softmax_block_step`); lse is that of
    all of them, as without dropout."""
    dtype = _compute_dtype(query.dtype)
    q, k, v, mask = _grouped(query, key, value, attn_mask, dtype)
    B, Hkv, G, Sq, _ = q.shape
    Sk, Ev = k.shape[2], v.shape[3]
    out = q.new_empty(B, Hkv, G, Sq, Ev)
    lse = q.new_empty(B, Hkv, G, Sq)
    for q0 in range(0, Sq, block_q):
        q1 = min(q0 + block_q, Sq)
        q_t = q[:, :, :, q0:q1]
        m = q.new_full((B, Hkv, G, q1 - q0), -math.inf)
        l = q.new_zeros(B, Hkv, G, q1 - q0)
        acc = q.new_zeros(B, Hkv, G, q1 - q0, Ev)
        for k0 in _key_tiles(q0, q1, Sk, block_k, is_causal, window):
            k1 = min(k0 + block_k, Sk)
            visible = _tile_visibility(q0, q1, k0, k1, is_causal, window, q.device)
            mask_t = None if mask is None else mask[..., q0:q1, k0:k1]
            s = _tile_scores(q_t, k[:, :, k0:k1], scale, mask_t, visible)
            keep = _tile_keep(dropout, (B, Hkv, G), q0, q1, k0, k1)
            if keep is None:
                m, l, acc = _online_softmax_block_step(m, l, acc, s, v[:, :, k0:k1])
            else:
                m, l, acc = _online_softmax_block_step(m, l, acc, s, v[:, :, k0:k1], keep)
        out[..., q0:q1, :], lse[..., q0:q1] = _finalize(m, l, acc)
        if dropout is not None:
            out[..., q0:q1, :] *= dropout.scale
    Hq = Hkv * G
    return out.view(B, Hq, Sq, Ev), lse.view(B, Hq, Sq)


def _reference_backward(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Optional[Tensor],
    out: Tensor,
    lse: Tensor,
    grad_out: Tensor,
    is_causal: bool,
    scale: float,
    window: Optional[int],
    mask_grad: bool,
    dropout: Optional[_Dropout] = None,
    block_q: int = _BLOCK_Q,
    block_k: int = _BLOCK_K,
) -> tuple[Tensor, Tensor, Tensor, Optional[Tensor]]:
    """``attention_backward`` of rocq/Attention/Backward.v, tile by tile:
    P = exp(S - lse) (0 for masked keys and fully masked rows; Ojas.Attention.Lse),
    D = rowsum(dO * O), dP = dO V^T, dS = P * (dP - D) (Ojas.Attention.BackwardCorrect),
    dQ = scale * dS K, dK = scale * dS^T Q, dV = P^T dO; for GQA dK and dV sum over the
    query heads of a group (Ojas.Attention.GroupedQuery.gqa_dK_is_derive,
    Ojas.Attention.GroupedQuery.gqa_dV_is_derive). With mask_grad, also d(attn_mask) = dS
    (Ojas.Attention.AdditiveMask.attention_dbias_is_derive) summed over the mask's
    broadcast dimensions (that sum is covered by no theorem). out and lse are in the compute dtype (as the forward returns
    them); the gradients come back in the input dtypes.

    With ``dropout`` the keep mask Z of the forward pass is recomputed (never stored) and,
    c = 1 / (1 - p): dV = (P * Z)^T dO * c, dP = (dO V^T) * Z * c, dS = P * (dP - D) with
    D = rowsum(dO * O) of the dropped output O (FlashAttention-2's dropout backward)."""
    dtype = _compute_dtype(query.dtype)
    q, k, v, mask = _grouped(query, key, value, attn_mask, dtype)
    B, Hkv, G, Sq, E = q.shape
    Sk, Ev = k.shape[2], v.shape[3]
    do = grad_out.to(dtype).view(B, Hkv, G, Sq, Ev)
    o = out.view(B, Hkv, G, Sq, Ev)
    lse = lse.view(B, Hkv, G, Sq)
    lse_ref = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    D = (do * o).sum(dim=-1)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    dmask4 = None
    if mask_grad:
        dmask4 = q.new_zeros((1,) * (4 - attn_mask.dim()) + tuple(attn_mask.shape))
    for q0 in range(0, Sq, block_q):
        q1 = min(q0 + block_q, Sq)
        tq = q1 - q0
        q_t, do_t = q[:, :, :, q0:q1], do[:, :, :, q0:q1]
        for k0 in _key_tiles(q0, q1, Sk, block_k, is_causal, window):
            k1 = min(k0 + block_k, Sk)
            visible = _tile_visibility(q0, q1, k0, k1, is_causal, window, q.device)
            mask_t = None if mask is None else mask[..., q0:q1, k0:k1]
            s = _tile_scores(q_t, k[:, :, k0:k1], scale, mask_t, visible)
            p = torch.exp(s - lse_ref[..., q0:q1].unsqueeze(-1)).flatten(2, 3)
            do_f = do_t.flatten(2, 3)
            dp = do_f @ v[:, :, k0:k1].transpose(-1, -2)
            keep = _tile_keep(dropout, (B, Hkv, G), q0, q1, k0, k1)
            if keep is None:
                dv[:, :, k0:k1] += p.transpose(-1, -2) @ do_f
            else:
                keep = keep.flatten(2, 3)
                dv[:, :, k0:k1] += (p * keep).transpose(-1, -2) @ do_f
                dp = dp * keep * dropout.scale
            ds = p * (dp - D[..., q0:q1].flatten(2, 3).unsqueeze(-1))
            dq[:, :, :, q0:q1] += (scale * (ds @ k[:, :, k0:k1])).view(B, Hkv, G, tq, E)
            dk[:, :, k0:k1] += scale * (ds.transpose(-1, -2) @ q_t.flatten(2, 3))
            if dmask4 is not None:
                _accumulate_mask_grad(dmask4, ds.view(B, Hkv * G, tq, k1 - k0), q0, q1, k0, k1)
    if dropout is not None:
        dv *= dropout.scale
    dmask = None if dmask4 is None else dmask4.view(attn_mask.shape).to(attn_mask.dtype)
    return (dq.view(query.shape).to(query.dtype), dk.to(key.dtype), dv.to(value.dtype), dmask)


def _accumulate_mask_grad(dmask4: Tensor, ds: Tensor, q0: int, q1: int, k0: int, k1: int) -> None:
    """Add a [B, Hq, tq, tk] tile of dS (the additive mask's gradient) into dmask4,
    summing over the dimensions in which the mask is broadcast."""
    dims = [d for d in range(4) if dmask4.shape[d] == 1]
    if dims:
        ds = ds.sum(dim=dims, keepdim=True)
    rows = slice(None) if dmask4.shape[2] == 1 else slice(q0, q1)
    cols = slice(None) if dmask4.shape[3] == 1 else slice(k0, k1)
    dmask4[:, :, rows, cols] += ds


class _OnlineSoftmaxAttention(torch.autograd.Function):
    """Forward: the streamed recurrence; saves q, k, v, out and lse (not P).
    Backward: P recomputed from lse (Ojas.Attention.Lse, Ojas.Attention.BackwardCorrect).

    out is saved in the compute dtype: D = rowsum(dO * O) from a float16/bfloat16 out
    would err by u_io * |dO| |O|, and dQ = scale * sum_j P_ij (dP_ij - D_i) k_j does not
    cancel that error against a component shared by all keys (large when the scores are)."""

    @staticmethod
    def forward(ctx, query, key, value, attn_mask, is_causal, scale, window, dropout):
        out, lse = _reference_forward(query, key, value, attn_mask, is_causal, scale, window, dropout)
        ctx.save_for_backward(query, key, value, attn_mask, out, lse)
        ctx.is_causal, ctx.scale, ctx.window, ctx.dropout = is_causal, scale, window, dropout
        return out.to(query.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        refuse_double_backward("attention", "torch.nn.functional.scaled_dot_product_attention")
        query, key, value, attn_mask, out, lse = ctx.saved_tensors
        mask_grad = attn_mask is not None and attn_mask.is_floating_point() and ctx.needs_input_grad[3]
        with autocast_off(grad_out.device.type):  # backward may run under the caller's autocast
            dq, dk, dv, dmask = _reference_backward(
                query,
                key,
                value,
                attn_mask,
                out,
                lse,
                grad_out,
                ctx.is_causal,
                ctx.scale,
                ctx.window,
                mask_grad,
                ctx.dropout,
            )
        return dq, dk, dv, dmask, None, None, None, None
