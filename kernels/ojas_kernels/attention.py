"""Online-softmax (flash) attention in Triton: forward and backward.

The forward kernel runs, for every query row, the streaming recurrence of
``rocq/Attention/OnlineSoftmax.v`` (``block_step`` folded over the key tiles
by ``stream``, then ``finalize``) and saves ``lse = m + ln l``.  The backward
kernels run ``rocq/Attention/Backward.v`` (``attention_backward``): they
recompute ``P = exp(s - lse)`` from the saved lse, take ``D = rowsum(dO * O)``
and ``dS = P * (dP - D)``.

Theorems implemented (over the reals; files under ``rocq/Attention/``):

* ``Ojas.Attention.StreamCorrect`` (StreamCorrect.v): ``stream_row_correct``,
  ``attention_forward_correct``: streaming the key tiles, of any size, gives
  the two-pass softmax; the kernels pick the tile sizes per device.
* ``Ojas.Attention.Mask`` (Mask.v): ``stream_row_masked_keys`` (a masked key
  is a dropped key, so key tiles masked for every row of a query tile are
  skipped, and query tiles masked for every key of a key tile in the
  backward pass), ``stream_row_fully_masked`` (zeros, lse ``None`` = -inf).
* ``Ojas.Attention.Lse`` (Lse.v): ``stream_lse`` (``l > 0`` and
  ``lse = m + ln l``), ``row_probs_stream_row`` (P recomputed from the saved
  lse is the softmax).
* ``Ojas.Attention.BackwardCorrect`` (BackwardCorrect.v):
  ``attention_backward_{dQ,dK,dV}_is_derive`` (the gradients),
  ``backward_D_identity`` (``D = dO . o``), ``attention_backward_dQ_key_tiles``
  (dQ accumulated over key tiles), ``attention_backward_query_tiles`` (dK, dV
  summed over query tiles), ``attention_backward_forward_eq`` (fed with the
  streamed forward's out and lse).
* ``Ojas.Attention.GroupedQuery`` (GroupedQuery.v): ``gqa_forward_repeat_kv``
  (query head ``h`` reading key head ``h // group`` is attention on key/value
  heads repeated ``group`` times), ``gqa_dK_is_derive``, ``gqa_dV_is_derive``
  (dK, dV of a key head: the sum over ``g = 0 .. group-1`` of query head
  ``hk * group + g``'s terms, the order of ``_bwd_dkdv_kernel``'s loop),
  ``gqa_dQ_is_derive``.
* ``Ojas.Attention.AdditiveMask`` (AdditiveMask.v):
  ``attention_forward_float_mask_correct`` (an additive mask, its -inf entries
  masked keys, streamed over the biased scores is their two-pass softmax).

In floating point (rocq/FloatModel/): ``Ojas.FloatModel.AttentionForwardError``
(AttentionForwardError.v): ``attention_forward_error_masked`` bounds every output
coordinate of the forward's tile loop as it runs here (fp32 scores
``rnd(dot(q, k) * qk_scale)``, ``exp2``, P rounded to the input dtype before P.V, fp32
accumulation, out stored in the input dtype; any boolean visibility: causal, window,
bounds) against the exact softmax over the visible keys;
``ojas_ref.verification.bounds.attention.attention_forward_error_bound`` is its value
(``tests/verification/test_attention_error_bound.py``).  The backward kernels: ``Ojas.FloatModel.AttentionBackwardError``
(``dv_error``) and ``Ojas.FloatModel.AttentionGradError`` (``dk_error``, ``dq_error``, ``delta_close``)
bound dV, dK and dQ a posteriori as the kernels compute them (P recomputed from the saved lse,
``dS = rnd(P * rnd(dP - Delta))`` rounded to the input dtype, fp32 accumulation over the tiles,
the stored results), given the errors of the saved out and lse (``attention_dv_error_bound``,
``attention_dk_error_bound``, ``attention_dq_error_bound``).  Not covered: the tensor cores' order
of additions (and their accumulating into the running sums), FMA contraction, additive masks,
the 3xTF32 float32 path.

Attention dropout (``HAS_DROPOUT``, a constexpr: without it the kernels compile to the
instructions they had before it existed, up to register numbering and three unused
parameters; checked on the PTX for sm_90): the keep mask of element ``(b, h, i, j)`` is
word ``j % 4`` of Philox-4x32-10 (``tl.philox_impl``) at the counter
``(j // 4, i, b * Hq + h, 0)`` under a 64-bit key read from ``SEED``, kept iff its top 31
bits reach ``drop_threshold``; recomputed in the backward kernels, never stored, the same
function as ``ojas_ref.functional.attention._dropout_keep``.  The forward sums every
probability into ``l`` and only the kept ones into ``acc``, and scales the output by
``1 / (1 - p)``; the backward is FlashAttention-2's (``dP = dO V^T * Z / (1 - p)``,
``dS = P * (dP - D)``, ``D = rowsum(dO * O)`` of the dropped output).  Over the reals, one
row is the streamed row on the values ``Z_ij v_j / (1 - p)`` (StreamCorrect.v's
``stream_row_correct`` and BackwardCorrect.v's row theorems hold for any values); no
theorem covers the dropout path as a whole (``ojas_ref.attention`` says which parts), and
the floating-point theorems above do not cover it.

torch.compile and torch.export see the kernels as two custom operators,
``ojas::flash_attention_forward`` and ``ojas::flash_attention_backward``
(``torch.library.custom_op``, opaque to Dynamo and Inductor, with fake implementations; the
backward registered by ``register_autograd``): no graph break, and Inductor neither traces
into the kernels nor lowers their launch code.  They launch the same kernels with the same
arguments as the eager path (which calls them without the dispatcher), so every theorem
above applies unchanged.

Scores are kept in base 2 inside the kernels: ``s2 = s * log2(e)``, so
``exp(s - m) = exp2(s2 - m2)``; the lse handed out is in base e.

Layout: query ``[B, Hq, Sq, E]``, key ``[B, Hkv, Sk, E]``, value
``[B, Hkv, Sk, Ev]`` with ``Hkv`` dividing ``Hq`` (query head ``h`` reads key
head ``h // (Hq // Hkv)``).  Visibility of key ``j`` for query ``i``: causal
``j <= i`` (top-left, as ``scaled_dot_product_attention``), window ``w``
``|i - j| < w``, a boolean ``attn_mask`` broadcast to ``[B, Hq, Sq, Sk]``: the
conjunction of those given (``visibility``, Mask.v ``visibility_true_iff``).  An
additive ``attn_mask`` is added to the scores (over the reals: AdditiveMask.v; see
``flash_attention``).  Key tiles are skipped by causal/window only, and with a
mask every remaining tile runs the masked loop, the mask read on visible entries.

float32 dots follow torch's float32 matmul precision: TF32 unless it is
"highest", and then 3xTF32 (``tf32x3``: each operand split into a TF32 high part and
a TF32 remainder, three tensor-core products, the remainders' product dropped; about
float32's accuracy: relative errors 4e-7 to 8e-7 at S=2048, E=128 on an H200, against
5e-7 to 9e-7 for torch's float32 SDPA kernel and 5e-7 to 1e-6 for IEEE dots, which ran
7x slower).  The rounding model of the proofs (one rounding of relative error u per
operation) is not that of 3xTF32 products: no theorem bounds their error.
"""

from __future__ import annotations

import math
import numbers
import os
from dataclasses import dataclass
from functools import lru_cache

import torch
import triton
import triton.language as tl

from .host import cdiv, next_power_of_2
from .launch import fast

__all__ = ["KernelConfig", "AttentionConfig", "default_config", "flash_attention", "flash_attention_forward"]

_LOG2E = 1.4426950408889634
_HIGHEST = "tf32x3"  # float32 dots under torch's "highest" precision (module docstring)
_MAX_HEAD_DIM = 256
# Triton's CPU interpreter multiplies bfloat16 tiles as their raw uint16 bits;
# there the operands of every dot go through float32 (exact for 16-bit inputs).
_UPCAST_DOTS = tl.constexpr(os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes"))


@dataclass(frozen=True)
class KernelConfig:
    """Tile shape and launch parameters of one kernel."""

    block_m: int
    block_n: int
    num_warps: int = 4
    num_stages: int = 2
    split: bool = True  # run the tiles that need no mask through a loop without masking (not with attn_mask)


@dataclass(frozen=True)
class AttentionConfig:
    """Launch parameters of the forward, dK/dV and dQ kernels."""

    fwd: KernelConfig
    bwd_kv: KernelConfig
    bwd_q: KernelConfig


@lru_cache(maxsize=None)
def default_config(head_dim: int, dtype: torch.dtype, device: torch.device, is_causal: bool = False) -> AttentionConfig:
    """Launch parameters per head-dim block, dtype and mask, picked with ptxas's
    register report and timings on an H200 (benchmarks/attention_tuning.md), except
    float32 under TF32 (untuned); small tiles for the CPU interpreter.  With an
    ``attn_mask`` the same tiles run, every one through the masked loop (untuned).
    Cached (the configurations are frozen): the launch code asks at every call."""
    K = KernelConfig
    if device.type != "cuda":
        return AttentionConfig(K(16, 16), K(16, 16), K(16, 16))
    block_e = _block_dim(head_dim)
    if dtype == torch.float32:
        # TF32 and 3xTF32 dots (see _dot_precision) run on the tensor cores. Up to head
        # dim 128: tiles timed for 3xTF32 on an H200 (E=128, S=2048, causal; forward 0.49
        # ms, backward 1.84 ms; benchmarks/attention_tuning.md), used for TF32 too
        # (untuned there). dQ tiles of 64 x 16 with 8 warps and dK/dV tiles of 16 x 64 with
        # 8 warps made illegal memory accesses under 3xTF32 in that sweep: not used.
        if block_e <= 128:
            return AttentionConfig(K(32, 64, 4, 2), K(64, 32, 8, 1), K(32, 32, 4, 2))
        return AttentionConfig(K(32, 32, 8, 1), K(16, 32, 8, 1), K(32, 16, 8, 1))
    # Under a causal mask the dK/dV kernel runs one masked loop (split=False):
    # measured faster than splitting off its few diagonal tiles.
    if block_e <= 64:
        if is_causal:
            return AttentionConfig(K(128, 64, 8, 3), K(32, 64, 4, 3, False), K(64, 64, 4, 3))
        return AttentionConfig(K(128, 64, 8, 3), K(64, 64, 4, 3), K(64, 64, 4, 3))
    if block_e <= 128:
        if is_causal:
            return AttentionConfig(K(64, 64, 4, 3), K(32, 64, 4, 3, False), K(128, 64, 8, 3))
        return AttentionConfig(K(64, 64, 4, 3), K(32, 64, 4, 3), K(128, 64, 8, 3))
    return AttentionConfig(K(64, 64, 4, 2), K(32, 32, 8, 2), K(64, 32, 4, 2))


def _block_dim(d: int) -> int:
    return max(16, next_power_of_2(d))


# ---------------------------------------------------------------------------
# Shared helpers
# ---------------------------------------------------------------------------


@triton.jit
def _dot(a, b, acc, DOT_PREC: tl.constexpr):
    """``acc + a @ b`` with float32 accumulation."""
    if _UPCAST_DOTS:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    else:
        return tl.dot(a, b, acc, input_precision=DOT_PREC)


@triton.jit
def _load_2d(ptrs, rows_ok, cols_ok, CHECK_ROWS: tl.constexpr, CHECK_COLS: tl.constexpr):
    """Load a tile, bounds-checking rows and/or columns (zeros outside)."""
    if CHECK_ROWS:
        if CHECK_COLS:
            return tl.load(ptrs, mask=rows_ok & cols_ok, other=0.0)
        else:
            return tl.load(ptrs, mask=rows_ok, other=0.0)
    else:
        if CHECK_COLS:
            return tl.load(ptrs, mask=cols_ok, other=0.0)
        else:
            return tl.load(ptrs)


@triton.jit
def _visible(i, j, seq_q, seq_k, window, IS_CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr):
    """``visibility is_causal window None i j`` of OnlineSoftmax.v, restricted
    to in-range rows and columns (out-of-range ones read as masked)."""
    vis = (i < seq_q) & (j < seq_k)
    if IS_CAUSAL:
        vis = vis & (j <= i)
    if HAS_WINDOW:
        vis = vis & (i - j < window) & (j - i < window)
    return vis


@triton.jit
def _apply_mask(s2, vis, i, j, mask_base, stride_mm, stride_mn, MASK_BOOL: tl.constexpr):
    """``attn_mask`` on a tile of base-2 scores ``s2`` whose entry ``(i, j)`` is
    visible where ``vis``: a boolean mask is one more conjunct of ``vis``
    (``visibility`` of OnlineSoftmax.v); an additive mask is added (times
    log2(e)) and the entries it takes to -inf leave ``vis`` (masked keys, so a
    row of them is fully masked: no ``-inf - (-inf)`` in the backward pass).
    Only visible entries are read, so keys hidden by causal/window cost no mask
    traffic.  Returns ``(s2, vis)``."""
    m = tl.load(mask_base + i.to(tl.int64) * stride_mm + j.to(tl.int64) * stride_mn, mask=vis, other=0)
    if MASK_BOOL:
        vis = vis & (m != 0)
    else:
        s2 = s2 + m.to(tl.float32) * 1.4426950408889634
        vis = vis & (s2 != float("-inf"))
    return s2, vis


@triton.jit
def _key_tiles(
    start_m,
    seq_q,
    seq_k,
    window,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    SPLIT: tl.constexpr,
):
    """Key tiles of the query tile ``[start_m, start_m + BLOCK_M)``.

    Returns ``lo <= a <= b <= hi``: tiles starting in ``[lo, a)`` and
    ``[b, hi)`` need the mask, tiles in ``[a, b)`` are visible for every row
    and in bounds.  Keys outside ``[lo, hi)`` are masked for every row of
    the tile and are dropped (Mask.v, ``stream_row_masked_keys``).  With
    ``SPLIT`` off (always with ``attn_mask``) every tile goes through the masked
    loop (``a = b = hi``)."""
    last_m = tl.minimum(start_m + BLOCK_M, seq_q) - 1
    lo = start_m * 0
    hi = seq_k + start_m * 0
    full_lo = start_m * 0
    full_end = seq_k + start_m * 0
    if IS_CAUSAL:
        hi = tl.minimum(hi, last_m + 1)
        full_end = tl.minimum(full_end, start_m + 1)
    if HAS_WINDOW:
        lo = tl.maximum(start_m - window + 1, 0)
        hi = tl.minimum(hi, last_m + window)
        full_lo = tl.maximum(last_m - window + 1, 0)
        full_end = tl.minimum(full_end, start_m + window)
    lo = (lo // BLOCK_N) * BLOCK_N
    a = tl.minimum(tl.maximum(tl.cdiv(full_lo, BLOCK_N) * BLOCK_N, lo), tl.maximum(hi, lo))
    b = tl.maximum((full_end // BLOCK_N) * BLOCK_N, a)
    if not SPLIT:
        a = tl.maximum(hi, lo)
        b = a
    return lo, a, b, hi


@triton.jit
def _query_tiles(
    start_n,
    seq_q,
    seq_k,
    window,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    SPLIT: tl.constexpr,
):
    """Query tiles of the key tile ``[start_n, start_n + BLOCK_N)``, split as in
    ``_key_tiles``: ``[a, b)`` needs no mask, rows outside ``[lo, hi)`` see
    none of the tile's keys and are dropped (Mask.v, ``stream_row_masked_keys``)."""
    last_n = tl.minimum(start_n + BLOCK_N, seq_k) - 1
    lo = start_n * 0
    hi = seq_q + start_n * 0
    full_lo = start_n * 0
    full_end = seq_q + start_n * 0
    if IS_CAUSAL:
        lo = start_n + 0
        full_lo = start_n + BLOCK_N - 1
    if HAS_WINDOW:
        lo = tl.maximum(lo, start_n - window + 1)
        hi = tl.minimum(hi, last_n + window)
        full_lo = tl.maximum(full_lo, start_n + BLOCK_N - window)
        full_end = tl.minimum(full_end, start_n + window)
    if start_n + BLOCK_N > seq_k:
        full_end = full_end * 0
    lo = (lo // BLOCK_M) * BLOCK_M
    a = tl.minimum(tl.maximum(tl.cdiv(full_lo, BLOCK_M) * BLOCK_M, lo), tl.maximum(hi, lo))
    b = tl.maximum((full_end // BLOCK_M) * BLOCK_M, a)
    if not SPLIT:
        a = tl.maximum(hi, lo)
        b = a
    return lo, a, b, hi


@triton.jit
def _dropout_key(SEED, HAS_DROPOUT: tl.constexpr):
    """The Philox key (two uint32) of this call's attention dropout, read from ``SEED``."""
    if HAS_DROPOUT:
        return tl.load(SEED).to(tl.uint32), tl.load(SEED + 1).to(tl.uint32)
    else:
        return 0, 0


@triton.jit
def _dropout_words(k0, k1, bh, offs_m, start_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """[BLOCK_M, BLOCK_N] uint32: entry (i, j) of head row ``bh`` (= b * Hq + h) is word
    ``j % 4`` of Philox-4x32-10 (``tl.philox_impl``) at the counter ``(j // 4, i, bh, 0)``
    under the key ``(k0, k1)``; ``start_n`` a multiple of 4.  The reference
    (``ojas_ref.functional.attention._dropout_keep``) computes the same words."""
    c0 = tl.broadcast_to((start_n // 4 + tl.arange(0, BLOCK_N // 4)).to(tl.uint32)[None, :], [BLOCK_M, BLOCK_N // 4])
    c1 = tl.broadcast_to(offs_m.to(tl.uint32)[:, None], [BLOCK_M, BLOCK_N // 4])
    c3 = c1 * 0
    c2 = c3 + bh.to(tl.uint32)
    r0, r1, r2, r3 = tl.philox_impl(c0, c1, c2, c3, k0, k1)
    # column 4 n + w holds word w of counter n
    return tl.reshape(tl.join(tl.join(r0, r2), tl.join(r1, r3)), [BLOCK_M, BLOCK_N])


@triton.jit
def _kept(words, drop_threshold):
    """Kept (not dropped) iff the top 31 bits of the Philox word reach the threshold."""
    return (words >> 1).to(tl.int32) >= drop_threshold


# ---------------------------------------------------------------------------
# Forward
# ---------------------------------------------------------------------------


@triton.jit
def _fwd_tile(
    acc,
    l_i,
    m_i,
    q,
    k_base,
    v_base,
    mask_base,
    stride_kn,
    stride_vn,
    stride_mm,
    stride_mn,
    start_n,
    offs_m,
    seq_q,
    seq_k,
    window,
    qk_scale,
    HEAD_E: tl.constexpr,
    HEAD_EV: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_EV: tl.constexpr,
    BLOCK_N: tl.constexpr,
    MASKED: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    HAS_MASK: tl.constexpr,
    MASK_BOOL: tl.constexpr,
    POS_SCALE: tl.constexpr,
    DOT_PREC: tl.constexpr,
    k0,
    k1,
    bh,
    drop_threshold,
    BLOCK_M: tl.constexpr,
    HAS_DROPOUT: tl.constexpr,
):
    """``block_step`` of OnlineSoftmax.v on one key tile, for BLOCK_M rows.  With dropout,
    l sums every probability and acc only the kept ones (``block_step`` on the values
    ``keep_ij * v_j``; the 1 / (1 - p) comes at ``finalize``)."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_e = tl.arange(0, BLOCK_E)
    offs_ev = tl.arange(0, BLOCK_EV)
    kt = _load_2d(
        k_base + offs_n[None, :] * stride_kn + offs_e[:, None],
        offs_n[None, :] < seq_k,
        offs_e[:, None] < HEAD_E,
        MASKED,
        BLOCK_E != HEAD_E,
    )
    s = _dot(q, kt, None, DOT_PREC)
    if MASKED:
        vis = _visible(offs_m[:, None], offs_n[None, :], seq_q, seq_k, window, IS_CAUSAL, HAS_WINDOW)
        s = s * qk_scale
        if HAS_MASK:
            s, vis = _apply_mask(s, vis, offs_m[:, None], offs_n[None, :], mask_base, stride_mm, stride_mn, MASK_BOOL)
        s = tl.where(vis, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        # No visible key yet: the state stays "None" (m = -inf, l = 0, acc = 0).
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s - m_use[:, None])
        alpha = tl.exp2(m_i - m_use)
    else:
        if POS_SCALE:
            m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
        else:
            m_new = tl.maximum(m_i, tl.min(s, 1) * qk_scale)
        p = tl.exp2(s * qk_scale - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    if HAS_DROPOUT:
        p = tl.where(_kept(_dropout_words(k0, k1, bh, offs_m, start_n, BLOCK_M, BLOCK_N), drop_threshold), p, 0.0)
    v = _load_2d(
        v_base + offs_n[:, None] * stride_vn + offs_ev[None, :],
        offs_n[:, None] < seq_k,
        offs_ev[None, :] < HEAD_EV,
        MASKED,
        BLOCK_EV != HEAD_EV,
    )
    acc = acc * alpha[:, None]
    acc = _dot(p.to(v.dtype), v, acc, DOT_PREC)
    return acc, l_i, m_new


@triton.jit
def _fwd_kernel(
    Q,
    K,
    V,
    M,
    O,
    LSE,
    SEED,
    stride_qb,
    stride_qh,
    stride_qm,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_mb,
    stride_mh,
    stride_mm,
    stride_mn,
    stride_ob,
    stride_oh,
    stride_om,
    num_heads,
    group,
    seq_q,
    seq_k,
    window,
    qk_scale,
    drop_threshold,
    drop_scale,
    HEAD_E: tl.constexpr,
    HEAD_EV: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_EV: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    HAS_MASK: tl.constexpr,
    MASK_BOOL: tl.constexpr,
    POS_SCALE: tl.constexpr,
    DOT_PREC: tl.constexpr,
    SPLIT: tl.constexpr,
    HAS_DROPOUT: tl.constexpr,
):
    """``attention_forward`` of OnlineSoftmax.v for one query tile of one head:
    ``stream`` over the key tiles, then ``finalize`` (out = acc / l, lse = m + ln l;
    with dropout out = acc / l * drop_scale, lse that of all the probabilities)."""
    # Last query tiles first: under a causal mask they have the most keys.
    start_m = (tl.num_programs(0) - 1 - tl.program_id(0)) * BLOCK_M
    pid_bh = tl.program_id(1)
    b = (pid_bh // num_heads).to(tl.int64)
    h = pid_bh % num_heads
    hk = (h // group).to(tl.int64)
    h = h.to(tl.int64)
    k_base = K + b * stride_kb + hk * stride_kh
    v_base = V + b * stride_vb + hk * stride_vh
    mask_base = M + b * stride_mb + h * stride_mh
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_e = tl.arange(0, BLOCK_E)
    offs_ev = tl.arange(0, BLOCK_EV)
    q = tl.load(
        Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_e[None, :],
        mask=(offs_m[:, None] < seq_q) & (offs_e[None, :] < HEAD_E),
        other=0.0,
    )
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_EV], tl.float32)
    k0, k1 = _dropout_key(SEED, HAS_DROPOUT)
    lo, a, b_end, hi = _key_tiles(start_m, seq_q, seq_k, window, BLOCK_M, BLOCK_N, IS_CAUSAL, HAS_WINDOW, SPLIT)
    for start_n in range(lo, a, BLOCK_N):
        acc, l_i, m_i = _fwd_tile(
            acc,
            l_i,
            m_i,
            q,
            k_base,
            v_base,
            mask_base,
            stride_kn,
            stride_vn,
            stride_mm,
            stride_mn,
            start_n,
            offs_m,
            seq_q,
            seq_k,
            window,
            qk_scale,
            HEAD_E,
            HEAD_EV,
            BLOCK_E,
            BLOCK_EV,
            BLOCK_N,
            True,
            IS_CAUSAL,
            HAS_WINDOW,
            HAS_MASK,
            MASK_BOOL,
            POS_SCALE,
            DOT_PREC,
            k0,
            k1,
            pid_bh,
            drop_threshold,
            BLOCK_M,
            HAS_DROPOUT,
        )
    for start_n in range(a, b_end, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        acc, l_i, m_i = _fwd_tile(
            acc,
            l_i,
            m_i,
            q,
            k_base,
            v_base,
            mask_base,
            stride_kn,
            stride_vn,
            stride_mm,
            stride_mn,
            start_n,
            offs_m,
            seq_q,
            seq_k,
            window,
            qk_scale,
            HEAD_E,
            HEAD_EV,
            BLOCK_E,
            BLOCK_EV,
            BLOCK_N,
            False,
            IS_CAUSAL,
            HAS_WINDOW,
            HAS_MASK,
            MASK_BOOL,
            POS_SCALE,
            DOT_PREC,
            k0,
            k1,
            pid_bh,
            drop_threshold,
            BLOCK_M,
            HAS_DROPOUT,
        )
    for start_n in range(b_end, hi, BLOCK_N):
        acc, l_i, m_i = _fwd_tile(
            acc,
            l_i,
            m_i,
            q,
            k_base,
            v_base,
            mask_base,
            stride_kn,
            stride_vn,
            stride_mm,
            stride_mn,
            start_n,
            offs_m,
            seq_q,
            seq_k,
            window,
            qk_scale,
            HEAD_E,
            HEAD_EV,
            BLOCK_E,
            BLOCK_EV,
            BLOCK_N,
            True,
            IS_CAUSAL,
            HAS_WINDOW,
            HAS_MASK,
            MASK_BOOL,
            POS_SCALE,
            DOT_PREC,
            k0,
            k1,
            pid_bh,
            drop_threshold,
            BLOCK_M,
            HAS_DROPOUT,
        )
    # finalize: a fully masked row (l = 0) gives zeros and lse = -inf.
    seen = l_i > 0.0
    out = acc / tl.where(seen, l_i, 1.0)[:, None]
    if HAS_DROPOUT:
        out = out * drop_scale
    lse = tl.where(seen, (m_i + tl.log2(tl.where(seen, l_i, 1.0))) * 0.6931471805599453, float("-inf"))
    row_ok = offs_m < seq_q
    tl.store(
        O + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om + offs_ev[None, :],
        out.to(O.dtype.element_ty),
        mask=row_ok[:, None] & (offs_ev[None, :] < HEAD_EV),
    )
    tl.store(LSE + pid_bh.to(tl.int64) * seq_q + offs_m, lse, mask=row_ok)


# ---------------------------------------------------------------------------
# Backward
# ---------------------------------------------------------------------------


@triton.jit
def _dkdv_tile(
    dk,
    dv,
    k,
    v,
    q_base,
    do_base,
    lse_base,
    delta_base,
    mask_base,
    stride_qm,
    stride_dom,
    stride_mm,
    stride_mn,
    start_m,
    offs_n,
    seq_q,
    seq_k,
    window,
    qk_scale,
    HEAD_E: tl.constexpr,
    HEAD_EV: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_EV: tl.constexpr,
    BLOCK_M: tl.constexpr,
    MASKED: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    HAS_MASK: tl.constexpr,
    MASK_BOOL: tl.constexpr,
    DOT_PREC: tl.constexpr,
    k0,
    k1,
    bh,
    start_n,
    drop_threshold,
    drop_scale,
    BLOCK_N: tl.constexpr,
    HAS_DROPOUT: tl.constexpr,
):
    """One query tile's share of dK_j and dV_j (Backward.v), transposed: rows are keys.
    With dropout (keep mask Z recomputed): dV_j += (P Z)^T dO (times 1 / (1 - p) at the
    end), dP = (dO V^T) Z / (1 - p), dS = P (dP - D)."""
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_e = tl.arange(0, BLOCK_E)
    offs_ev = tl.arange(0, BLOCK_EV)
    qt = _load_2d(
        q_base + offs_m[None, :] * stride_qm + offs_e[:, None],
        offs_m[None, :] < seq_q,
        offs_e[:, None] < HEAD_E,
        MASKED,
        BLOCK_E != HEAD_E,
    )
    do = _load_2d(
        do_base + offs_m[:, None] * stride_dom + offs_ev[None, :],
        offs_m[:, None] < seq_q,
        offs_ev[None, :] < HEAD_EV,
        MASKED,
        BLOCK_EV != HEAD_EV,
    )
    if MASKED:
        lse2 = tl.load(lse_base + offs_m, mask=offs_m < seq_q, other=0.0) * 1.4426950408889634
        delta = tl.load(delta_base + offs_m, mask=offs_m < seq_q, other=0.0)
    else:
        lse2 = tl.load(lse_base + offs_m) * 1.4426950408889634
        delta = tl.load(delta_base + offs_m)
    # P^T = exp(s - lse), recomputed (row_probs).
    st = _dot(k, qt, None, DOT_PREC) * qk_scale
    if MASKED:
        vis = _visible(offs_m[None, :], offs_n[:, None], seq_q, seq_k, window, IS_CAUSAL, HAS_WINDOW)
        if HAS_MASK:
            st, vis = _apply_mask(st, vis, offs_m[None, :], offs_n[:, None], mask_base, stride_mm, stride_mn, MASK_BOOL)
        pt = tl.where(vis, tl.exp2(st - lse2[None, :]), 0.0)
    else:
        pt = tl.exp2(st - lse2[None, :])
    if HAS_DROPOUT:
        keep = _kept(tl.trans(_dropout_words(k0, k1, bh, offs_m, start_n, BLOCK_M, BLOCK_N)), drop_threshold)
        dv = _dot(tl.where(keep, pt, 0.0).to(do.dtype), do, dv, DOT_PREC)
    else:
        dv = _dot(pt.to(do.dtype), do, dv, DOT_PREC)
    # dS^T = P^T * (dP^T - D) (row_dscores).
    dpt = _dot(v, tl.trans(do), None, DOT_PREC)
    if HAS_DROPOUT:
        dpt = tl.where(keep, dpt * drop_scale, 0.0)
    dst = pt * (dpt - delta[None, :])
    dk = _dot(dst.to(qt.dtype), tl.trans(qt), dk, DOT_PREC)
    return dk, dv


@triton.jit
def _bwd_dkdv_kernel(
    Q,
    K,
    V,
    M,
    DO,
    LSE,
    DELTA,
    DK,
    DV,
    SEED,
    stride_qb,
    stride_qh,
    stride_qm,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_mb,
    stride_mh,
    stride_mm,
    stride_mn,
    stride_dob,
    stride_doh,
    stride_dom,
    stride_dkb,
    stride_dkh,
    stride_dkn,
    stride_dvb,
    stride_dvh,
    stride_dvn,
    num_kv_heads,
    group,
    seq_q,
    seq_k,
    window,
    qk_scale,
    scale,
    drop_threshold,
    drop_scale,
    HEAD_E: tl.constexpr,
    HEAD_EV: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_EV: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    HAS_MASK: tl.constexpr,
    MASK_BOOL: tl.constexpr,
    DOT_PREC: tl.constexpr,
    SPLIT: tl.constexpr,
    HAS_DROPOUT: tl.constexpr,
):
    """``dK`` and ``dV`` of ``attention_backward`` (Backward.v) for one key tile of
    one key head, summed over the query heads of its group (GroupedQuery.v,
    ``gqa_dK_is_derive``, ``gqa_dV_is_derive``: loop ``g = 0 .. group-1``) and over the
    query tiles that see the key tile (BackwardCorrect.v, ``attention_backward_query_tiles``).

    Rounding: ``Ojas.FloatModel.AttentionBackwardError.dv_error`` (dV) and
    ``Ojas.FloatModel.AttentionGradError.dk_error`` (dK: ``dk_kernel``, this loop's schedule) bound
    every stored entry against the exact gradient; not covered: the MMA order and its
    accumulation into dk/dv, FMA contraction, 3xTF32 dots, ``tl.exp2``'s error (assumed)."""
    start_n = tl.program_id(0) * BLOCK_N
    pid_bh = tl.program_id(1)
    b = (pid_bh // num_kv_heads).to(tl.int64)
    hk = pid_bh % num_kv_heads
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_e = tl.arange(0, BLOCK_E)
    offs_ev = tl.arange(0, BLOCK_EV)
    n_ok = offs_n[:, None] < seq_k
    k = tl.load(
        K + b * stride_kb + hk.to(tl.int64) * stride_kh + offs_n[:, None] * stride_kn + offs_e[None, :],
        mask=n_ok & (offs_e[None, :] < HEAD_E),
        other=0.0,
    )
    v = tl.load(
        V + b * stride_vb + hk.to(tl.int64) * stride_vh + offs_n[:, None] * stride_vn + offs_ev[None, :],
        mask=n_ok & (offs_ev[None, :] < HEAD_EV),
        other=0.0,
    )
    dk = tl.zeros([BLOCK_N, BLOCK_E], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_EV], tl.float32)
    k0, k1 = _dropout_key(SEED, HAS_DROPOUT)
    lo, a, b_end, hi = _query_tiles(start_n, seq_q, seq_k, window, BLOCK_M, BLOCK_N, IS_CAUSAL, HAS_WINDOW, SPLIT)
    for g in range(group):
        h = (hk * group + g).to(tl.int64)
        q_base = Q + b * stride_qb + h * stride_qh
        do_base = DO + b * stride_dob + h * stride_doh
        mask_base = M + b * stride_mb + h * stride_mh
        bh = b * num_kv_heads * group + h
        row_base = bh * seq_q
        for start_m in range(lo, a, BLOCK_M):
            dk, dv = _dkdv_tile(
                dk,
                dv,
                k,
                v,
                q_base,
                do_base,
                LSE + row_base,
                DELTA + row_base,
                mask_base,
                stride_qm,
                stride_dom,
                stride_mm,
                stride_mn,
                start_m,
                offs_n,
                seq_q,
                seq_k,
                window,
                qk_scale,
                HEAD_E,
                HEAD_EV,
                BLOCK_E,
                BLOCK_EV,
                BLOCK_M,
                True,
                IS_CAUSAL,
                HAS_WINDOW,
                HAS_MASK,
                MASK_BOOL,
                DOT_PREC,
                k0,
                k1,
                bh,
                start_n,
                drop_threshold,
                drop_scale,
                BLOCK_N,
                HAS_DROPOUT,
            )
        for start_m in range(a, b_end, BLOCK_M):
            start_m = tl.multiple_of(start_m, BLOCK_M)
            dk, dv = _dkdv_tile(
                dk,
                dv,
                k,
                v,
                q_base,
                do_base,
                LSE + row_base,
                DELTA + row_base,
                mask_base,
                stride_qm,
                stride_dom,
                stride_mm,
                stride_mn,
                start_m,
                offs_n,
                seq_q,
                seq_k,
                window,
                qk_scale,
                HEAD_E,
                HEAD_EV,
                BLOCK_E,
                BLOCK_EV,
                BLOCK_M,
                False,
                IS_CAUSAL,
                HAS_WINDOW,
                HAS_MASK,
                MASK_BOOL,
                DOT_PREC,
                k0,
                k1,
                bh,
                start_n,
                drop_threshold,
                drop_scale,
                BLOCK_N,
                HAS_DROPOUT,
            )
        for start_m in range(b_end, hi, BLOCK_M):
            dk, dv = _dkdv_tile(
                dk,
                dv,
                k,
                v,
                q_base,
                do_base,
                LSE + row_base,
                DELTA + row_base,
                mask_base,
                stride_qm,
                stride_dom,
                stride_mm,
                stride_mn,
                start_m,
                offs_n,
                seq_q,
                seq_k,
                window,
                qk_scale,
                HEAD_E,
                HEAD_EV,
                BLOCK_E,
                BLOCK_EV,
                BLOCK_M,
                True,
                IS_CAUSAL,
                HAS_WINDOW,
                HAS_MASK,
                MASK_BOOL,
                DOT_PREC,
                k0,
                k1,
                bh,
                start_n,
                drop_threshold,
                drop_scale,
                BLOCK_N,
                HAS_DROPOUT,
            )
    dk = dk * scale
    if HAS_DROPOUT:
        dv = dv * drop_scale
    tl.store(
        DK + b * stride_dkb + hk.to(tl.int64) * stride_dkh + offs_n[:, None] * stride_dkn + offs_e[None, :],
        dk.to(DK.dtype.element_ty),
        mask=n_ok & (offs_e[None, :] < HEAD_E),
    )
    tl.store(
        DV + b * stride_dvb + hk.to(tl.int64) * stride_dvh + offs_n[:, None] * stride_dvn + offs_ev[None, :],
        dv.to(DV.dtype.element_ty),
        mask=n_ok & (offs_ev[None, :] < HEAD_EV),
    )


@triton.jit
def _dq_tile(
    dq,
    q,
    do,
    lse2,
    delta,
    k_base,
    v_base,
    mask_base,
    stride_kn,
    stride_vn,
    stride_mm,
    stride_mn,
    start_n,
    offs_m,
    seq_q,
    seq_k,
    window,
    qk_scale,
    HEAD_E: tl.constexpr,
    HEAD_EV: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_EV: tl.constexpr,
    BLOCK_N: tl.constexpr,
    MASKED: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    HAS_MASK: tl.constexpr,
    MASK_BOOL: tl.constexpr,
    DOT_PREC: tl.constexpr,
    k0,
    k1,
    bh,
    drop_threshold,
    drop_scale,
    BLOCK_M: tl.constexpr,
    HAS_DROPOUT: tl.constexpr,
):
    """One key tile's share of dQ_i (Backward.v); with dropout dP = (dO V^T) Z / (1 - p)."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_e = tl.arange(0, BLOCK_E)
    offs_ev = tl.arange(0, BLOCK_EV)
    kt = _load_2d(
        k_base + offs_n[None, :] * stride_kn + offs_e[:, None],
        offs_n[None, :] < seq_k,
        offs_e[:, None] < HEAD_E,
        MASKED,
        BLOCK_E != HEAD_E,
    )
    vt = _load_2d(
        v_base + offs_n[None, :] * stride_vn + offs_ev[:, None],
        offs_n[None, :] < seq_k,
        offs_ev[:, None] < HEAD_EV,
        MASKED,
        BLOCK_EV != HEAD_EV,
    )
    s = _dot(q, kt, None, DOT_PREC) * qk_scale
    if MASKED:
        vis = _visible(offs_m[:, None], offs_n[None, :], seq_q, seq_k, window, IS_CAUSAL, HAS_WINDOW)
        if HAS_MASK:
            s, vis = _apply_mask(s, vis, offs_m[:, None], offs_n[None, :], mask_base, stride_mm, stride_mn, MASK_BOOL)
        p = tl.where(vis, tl.exp2(s - lse2[:, None]), 0.0)
    else:
        p = tl.exp2(s - lse2[:, None])
    dp = _dot(do, vt, None, DOT_PREC)
    if HAS_DROPOUT:
        keep = _kept(_dropout_words(k0, k1, bh, offs_m, start_n, BLOCK_M, BLOCK_N), drop_threshold)
        dp = tl.where(keep, dp * drop_scale, 0.0)
    ds = p * (dp - delta[:, None])
    dq = _dot(ds.to(kt.dtype), tl.trans(kt), dq, DOT_PREC)
    return dq


@triton.jit
def _bwd_dq_kernel(
    Q,
    K,
    V,
    M,
    DO,
    LSE,
    O,
    DELTA,
    DQ,
    SEED,
    stride_qb,
    stride_qh,
    stride_qm,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_mb,
    stride_mh,
    stride_mm,
    stride_mn,
    stride_dob,
    stride_doh,
    stride_dom,
    stride_ob,
    stride_oh,
    stride_om,
    stride_dqb,
    stride_dqh,
    stride_dqm,
    num_heads,
    group,
    seq_q,
    seq_k,
    window,
    qk_scale,
    scale,
    drop_threshold,
    drop_scale,
    HEAD_E: tl.constexpr,
    HEAD_EV: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_EV: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    HAS_MASK: tl.constexpr,
    MASK_BOOL: tl.constexpr,
    DOT_PREC: tl.constexpr,
    SPLIT: tl.constexpr,
    HAS_DROPOUT: tl.constexpr,
):
    """``dQ`` of ``attention_backward`` (Backward.v) for one query tile of one head,
    accumulated over key tiles (BackwardCorrect.v, ``attention_backward_dQ_key_tiles``).
    It first computes ``D_i = dO_i . o_i`` (``row_dscores``; ``backward_D_identity``)
    in float32 and saves it for the dK/dV kernel, launched after this one.

    Rounding: ``Ojas.FloatModel.AttentionGradError.dq_error`` (dQ: ``dq_kernel``, this loop's
    schedule) bounds every stored entry against the exact gradient, ``delta_close`` the error of
    ``D`` (any reduction order of ``tl.sum``) against ``dO . o`` of the stored output; not covered:
    the MMA order and its accumulation into dq, FMA contraction, 3xTF32 dots, ``tl.sum``'s padding
    zeros when ``BLOCK_EV > HEAD_EV``, ``tl.exp2``'s error (assumed)."""
    start_m = (tl.num_programs(0) - 1 - tl.program_id(0)) * BLOCK_M
    pid_bh = tl.program_id(1)
    b = (pid_bh // num_heads).to(tl.int64)
    h = pid_bh % num_heads
    hk = (h // group).to(tl.int64)
    h = h.to(tl.int64)
    k_base = K + b * stride_kb + hk * stride_kh
    v_base = V + b * stride_vb + hk * stride_vh
    mask_base = M + b * stride_mb + h * stride_mh
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_e = tl.arange(0, BLOCK_E)
    offs_ev = tl.arange(0, BLOCK_EV)
    m_ok = offs_m < seq_q
    q = tl.load(
        Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_e[None, :],
        mask=m_ok[:, None] & (offs_e[None, :] < HEAD_E),
        other=0.0,
    )
    do = tl.load(
        DO + b * stride_dob + h * stride_doh + offs_m[:, None] * stride_dom + offs_ev[None, :],
        mask=m_ok[:, None] & (offs_ev[None, :] < HEAD_EV),
        other=0.0,
    )
    o = tl.load(
        O + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om + offs_ev[None, :],
        mask=m_ok[:, None] & (offs_ev[None, :] < HEAD_EV),
        other=0.0,
    )
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    row = pid_bh.to(tl.int64) * seq_q + offs_m
    tl.store(DELTA + row, delta, mask=m_ok)
    lse2 = tl.load(LSE + row, mask=m_ok, other=0.0) * 1.4426950408889634
    dq = tl.zeros([BLOCK_M, BLOCK_E], tl.float32)
    k0, k1 = _dropout_key(SEED, HAS_DROPOUT)
    lo, a, b_end, hi = _key_tiles(start_m, seq_q, seq_k, window, BLOCK_M, BLOCK_N, IS_CAUSAL, HAS_WINDOW, SPLIT)
    for start_n in range(lo, a, BLOCK_N):
        dq = _dq_tile(
            dq,
            q,
            do,
            lse2,
            delta,
            k_base,
            v_base,
            mask_base,
            stride_kn,
            stride_vn,
            stride_mm,
            stride_mn,
            start_n,
            offs_m,
            seq_q,
            seq_k,
            window,
            qk_scale,
            HEAD_E,
            HEAD_EV,
            BLOCK_E,
            BLOCK_EV,
            BLOCK_N,
            True,
            IS_CAUSAL,
            HAS_WINDOW,
            HAS_MASK,
            MASK_BOOL,
            DOT_PREC,
            k0,
            k1,
            pid_bh,
            drop_threshold,
            drop_scale,
            BLOCK_M,
            HAS_DROPOUT,
        )
    for start_n in range(a, b_end, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        dq = _dq_tile(
            dq,
            q,
            do,
            lse2,
            delta,
            k_base,
            v_base,
            mask_base,
            stride_kn,
            stride_vn,
            stride_mm,
            stride_mn,
            start_n,
            offs_m,
            seq_q,
            seq_k,
            window,
            qk_scale,
            HEAD_E,
            HEAD_EV,
            BLOCK_E,
            BLOCK_EV,
            BLOCK_N,
            False,
            IS_CAUSAL,
            HAS_WINDOW,
            HAS_MASK,
            MASK_BOOL,
            DOT_PREC,
            k0,
            k1,
            pid_bh,
            drop_threshold,
            drop_scale,
            BLOCK_M,
            HAS_DROPOUT,
        )
    for start_n in range(b_end, hi, BLOCK_N):
        dq = _dq_tile(
            dq,
            q,
            do,
            lse2,
            delta,
            k_base,
            v_base,
            mask_base,
            stride_kn,
            stride_vn,
            stride_mm,
            stride_mn,
            start_n,
            offs_m,
            seq_q,
            seq_k,
            window,
            qk_scale,
            HEAD_E,
            HEAD_EV,
            BLOCK_E,
            BLOCK_EV,
            BLOCK_N,
            True,
            IS_CAUSAL,
            HAS_WINDOW,
            HAS_MASK,
            MASK_BOOL,
            DOT_PREC,
            k0,
            k1,
            pid_bh,
            drop_threshold,
            drop_scale,
            BLOCK_M,
            HAS_DROPOUT,
        )
    dq = dq * scale
    tl.store(
        DQ + b * stride_dqb + h * stride_dqh + offs_m[:, None] * stride_dqm + offs_e[None, :],
        dq.to(DQ.dtype.element_ty),
        mask=m_ok[:, None] & (offs_e[None, :] < HEAD_E),
    )


# ---------------------------------------------------------------------------
# Host side
# ---------------------------------------------------------------------------


def _last_dim_contiguous(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def _check(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, window: int | None, attn_mask: torch.Tensor | None
) -> None:
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        raise ValueError("flash_attention expects [B, H, S, E] query, key and value")
    dtypes = (torch.float16, torch.bfloat16, torch.float32)
    if not (query.dtype == key.dtype == value.dtype) or query.dtype not in dtypes:
        raise ValueError(
            f"flash_attention supports float16, bfloat16 and float32 inputs of one dtype, "
            f"got {query.dtype}, {key.dtype}, {value.dtype}"
        )
    if not (query.device == key.device == value.device):
        raise ValueError("query, key and value must be on one device")
    bq, hq, _, e = query.shape
    bk, hk, sk, ek = key.shape
    if bk != bq or value.shape[0] != bq or value.shape[1] != hk or value.shape[2] != sk or ek != e:
        raise ValueError(
            f"incompatible shapes: query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}"
        )
    if hk == 0 or hq % hk != 0:
        raise ValueError(f"key heads ({hk}) must divide query heads ({hq})")
    if max(e, value.shape[3]) > _MAX_HEAD_DIM:
        raise ValueError(f"head dim {max(e, value.shape[3])} is above the kernel's limit of {_MAX_HEAD_DIM}")
    if window is not None and window < 1:
        raise ValueError(f"window must be >= 1 (keys with |i - j| < window take part), got {window}")
    if attn_mask is not None:
        _check_mask(attn_mask, query, key)


def _full_mask_shape(query: torch.Tensor, key: torch.Tensor) -> tuple[int, int, int, int]:
    return (query.shape[0], query.shape[1], query.shape[2], key.shape[2])


def _check_mask(attn_mask: torch.Tensor, query: torch.Tensor, key: torch.Tensor) -> None:
    if not isinstance(attn_mask, torch.Tensor):
        raise TypeError(f"attn_mask must be a torch.Tensor or None, got {type(attn_mask).__name__}")
    if attn_mask.dtype != torch.bool and attn_mask.dtype != query.dtype:
        raise ValueError(
            f"attn_mask must have dtype torch.bool or the query's dtype {query.dtype}, got {attn_mask.dtype}"
        )
    if attn_mask.device != query.device:
        raise ValueError(f"attn_mask is on {attn_mask.device} but query is on {query.device}")
    full = _full_mask_shape(query, key)
    shape = tuple(attn_mask.shape)
    padded = (1,) * (4 - len(shape)) + shape
    if len(shape) > 4 or any(m != 1 and m != f for m, f in zip(padded, full)):
        raise ValueError(f"attn_mask must be broadcastable to [B, Hq, Sq, Sk] = {list(full)}, got shape {list(shape)}")


def _mask_args(
    attn_mask: torch.Tensor | None, query: torch.Tensor, key: torch.Tensor
) -> tuple[torch.Tensor, tuple[int, ...], dict[str, bool]]:
    """The kernels' mask pointer, its ``[B, Hq, Sq, Sk]`` strides (0 along broadcast
    dimensions: the mask is never expanded in memory) and flags.  Without a mask the
    query stands in for the pointer, which the kernels then never read."""
    if attn_mask is None:
        return query, (0, 0, 0, 0), dict(HAS_MASK=False, MASK_BOOL=False)
    mask = attn_mask.reshape((1,) * (4 - attn_mask.dim()) + tuple(attn_mask.shape))
    mask = mask.expand(_full_mask_shape(query, key))
    is_bool = mask.dtype == torch.bool
    if is_bool:
        mask = mask.view(torch.uint8)
    return mask, mask.stride(), dict(HAS_MASK=True, MASK_BOOL=is_bool)


@dataclass(frozen=True)
class _Dropout:
    """One call's attention dropout: the Philox key ``seed`` (int64 ``[2]`` on the inputs'
    device, values in [0, 2^32)), ``threshold`` = min(round(p * 2^31), 2^31 - 1) (an element
    is dropped iff the top 31 bits of its Philox word are below it) and ``scale`` = 1 / (1 - p)
    (0 for p = 1: every output and gradient zero, as SDPA)."""

    seed: torch.Tensor
    threshold: int
    scale: float


def _dropout_args(dropout_p: float, dropout_seed: torch.Tensor | None, query: torch.Tensor) -> _Dropout | None:
    """Check ``dropout_p`` and ``dropout_seed``; None when dropout_p is 0.  Without a seed one
    is drawn from torch's generator of the query's device, as ``ojas_ref.attention`` draws it
    (``torch.randint(0, 2**32, (2,), dtype=torch.int64)``)."""
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, numbers.Real):
        raise TypeError(f"dropout_p must be a float, got {type(dropout_p).__name__}")
    if not 0 <= dropout_p <= 1:
        raise ValueError(f"dropout_p must be in [0, 1], got {dropout_p!r}")
    if dropout_p == 0:
        return None
    if dropout_seed is None:
        dropout_seed = torch.randint(0, 2**32, (2,), dtype=torch.int64, device=query.device)
    elif (
        not isinstance(dropout_seed, torch.Tensor)
        or dropout_seed.dtype != torch.int64
        or tuple(dropout_seed.shape) != (2,)
        or dropout_seed.device != query.device
    ):
        got = (
            f"{dropout_seed.dtype} of shape {list(dropout_seed.shape)} on {dropout_seed.device}"
            if isinstance(dropout_seed, torch.Tensor)
            else type(dropout_seed).__name__
        )
        raise ValueError(
            f"dropout_seed must be an int64 tensor of shape [2] on the query's device {query.device} "
            f"(the Philox key), got {got}"
        )
    return _dropout_of(dropout_p, dropout_seed.contiguous())


def _dropout_of(dropout_p: float, dropout_seed: torch.Tensor | None) -> _Dropout | None:
    """The checked ``dropout_p`` and contiguous ``dropout_seed`` as the kernels take them
    (None when dropout_p is 0)."""
    if dropout_p == 0:
        return None
    threshold = min(round(dropout_p * 2**31), 2**31 - 1)
    return _Dropout(dropout_seed, threshold, 0.0 if dropout_p == 1 else 1.0 / (1.0 - dropout_p))


def _dropout_launch_args(dropout: _Dropout | None, query: torch.Tensor) -> tuple[torch.Tensor, int, float, bool]:
    """The kernels' SEED pointer, threshold, scale and HAS_DROPOUT; without dropout the
    query stands in for the pointer, which the kernels then never read."""
    if dropout is None:
        return query, 0, 1.0, False
    return dropout.seed, dropout.threshold, dropout.scale, True


def _dot_precision(dtype: torch.dtype, highest: str = "ieee") -> str:
    """float32 dots as torch's float32 matmuls: "tf32" when TF32 is allowed
    (``torch.set_float32_matmul_precision`` other than "highest", or
    ``torch.backends.cuda.matmul.allow_tf32``, or the newer
    ``torch.backends[.cuda.matmul].fp32_precision = "tf32"``: all read back through
    ``torch.backends.cuda.matmul.fp32_precision``, which, unlike
    ``torch.get_float32_matmul_precision``, does not raise once the newer API is used;
    ``allow_tf32`` before torch 2.9, which lacks it), ``highest`` otherwise ("ieee", or
    "tf32x3" for the attention kernels).  16-bit operands ignore the setting."""
    if dtype != torch.float32:
        return "tf32"
    fp32_precision = getattr(torch.backends.cuda.matmul, "fp32_precision", None)
    tf32 = torch.backends.cuda.matmul.allow_tf32 if fp32_precision is None else fp32_precision == "tf32"
    return "tf32" if tf32 else highest


def _forward_outputs(query: torch.Tensor, value: torch.Tensor, seq_major: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The forward's ``out`` ``[B, Hq, Sq, Ev]`` and ``lse`` ``[B, Hq, Sq]``, uninitialised, in the
    layout the kernel writes (and the fake implementation of the registered op reports)."""
    batch, heads, seq_q = query.shape[:3]
    ev = value.shape[3]
    if seq_major:  # [B, Hq, Sq, Ev] view of a contiguous [B, Sq, Hq, Ev]
        out = torch.empty((batch, seq_q, heads, ev), dtype=query.dtype, device=query.device).transpose(1, 2)
    else:
        out = torch.empty((batch, heads, seq_q, ev), dtype=query.dtype, device=query.device)
    return out, torch.empty((batch, heads, seq_q), dtype=torch.float32, device=query.device)


def _backward_outputs(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV, uninitialised and contiguous, as the backward kernels write them."""
    return tuple(torch.empty_like(t, memory_format=torch.contiguous_format) for t in (query, key, value))


def _forward(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None,
    is_causal: bool,
    scale: float,
    window: int | None,
    config: AttentionConfig | None = None,
    seq_major: bool = False,
    dropout: _Dropout | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    query, key, value = (_last_dim_contiguous(t) for t in (query, key, value))
    batch, heads, seq_q, e = query.shape
    kv_heads, seq_k, ev = key.shape[1], key.shape[2], value.shape[3]
    out, lse = _forward_outputs(query, value, seq_major)
    if lse.numel() == 0:
        return out, lse
    if seq_k == 0 or window == 0:
        out.zero_()
        lse.fill_(float("-inf"))
        return out, lse
    cfg = (config or default_config(max(e, ev), query.dtype, query.device, is_causal)).fwd
    mask, mask_strides, mask_flags = _mask_args(attn_mask, query, key)
    seed, drop_threshold, drop_scale, has_dropout = _dropout_launch_args(dropout, query)
    grid = (cdiv(seq_q, cfg.block_m), batch * heads)
    fast(_fwd_kernel)[grid](
        query,
        key,
        value,
        mask,
        out,
        lse,
        seed,
        query.stride(0),
        query.stride(1),
        query.stride(2),
        key.stride(0),
        key.stride(1),
        key.stride(2),
        value.stride(0),
        value.stride(1),
        value.stride(2),
        *mask_strides,
        out.stride(0),
        out.stride(1),
        out.stride(2),
        heads,
        heads // kv_heads,
        seq_q,
        seq_k,
        _window_arg(window, seq_q, seq_k),
        scale * _LOG2E,
        drop_threshold,
        drop_scale,
        HEAD_E=e,
        HEAD_EV=ev,
        BLOCK_E=_block_dim(e),
        BLOCK_EV=_block_dim(ev),
        BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n,
        IS_CAUSAL=bool(is_causal),
        HAS_WINDOW=window is not None,
        POS_SCALE=scale >= 0,
        DOT_PREC=_dot_precision(query.dtype, _HIGHEST),
        SPLIT=cfg.split and attn_mask is None,
        HAS_DROPOUT=has_dropout,
        **mask_flags,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )
    return out, lse


def _window_arg(window: int | None, seq_q: int, seq_k: int) -> int:
    # A window wider than both sequences masks nothing; clamp to stay in int32.
    return 0 if window is None else min(window, seq_q + seq_k + 1)


def _backward(
    grad_out: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None,
    out: torch.Tensor,
    lse: torch.Tensor,
    is_causal: bool,
    scale: float,
    window: int | None,
    config: AttentionConfig | None = None,
    dropout: _Dropout | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    grad_out = _last_dim_contiguous(grad_out)
    query, key, value = (_last_dim_contiguous(t) for t in (query, key, value))
    batch, heads, seq_q, e = query.shape
    kv_heads, seq_k, ev = key.shape[1], key.shape[2], value.shape[3]
    dq, dk, dv = _backward_outputs(query, key, value)
    if seq_q == 0 or seq_k == 0 or window == 0 or batch * heads == 0:
        return dq.zero_(), dk.zero_(), dv.zero_()
    cfg = config or default_config(max(e, ev), query.dtype, query.device, is_causal)
    common = dict(HEAD_E=e, HEAD_EV=ev, BLOCK_E=_block_dim(e), BLOCK_EV=_block_dim(ev))
    delta = torch.empty_like(lse)
    mask, mask_strides, mask_flags = _mask_args(attn_mask, query, key)
    seed, drop_threshold, drop_scale, has_dropout = _dropout_launch_args(dropout, query)
    flags = dict(
        IS_CAUSAL=bool(is_causal),
        HAS_WINDOW=window is not None,
        DOT_PREC=_dot_precision(query.dtype, _HIGHEST),
        HAS_DROPOUT=has_dropout,
        **mask_flags,
    )
    w = _window_arg(window, seq_q, seq_k)
    qk_scale = scale * _LOG2E
    qkv_do_strides = (
        query.stride(0),
        query.stride(1),
        query.stride(2),
        key.stride(0),
        key.stride(1),
        key.stride(2),
        value.stride(0),
        value.stride(1),
        value.stride(2),
        *mask_strides,
        grad_out.stride(0),
        grad_out.stride(1),
        grad_out.stride(2),
    )
    qc = cfg.bwd_q
    fast(_bwd_dq_kernel)[(cdiv(seq_q, qc.block_m), batch * heads)](
        query,
        key,
        value,
        mask,
        grad_out,
        lse,
        out,
        delta,
        dq,
        seed,
        *qkv_do_strides,
        out.stride(0),
        out.stride(1),
        out.stride(2),
        dq.stride(0),
        dq.stride(1),
        dq.stride(2),
        heads,
        heads // kv_heads,
        seq_q,
        seq_k,
        w,
        qk_scale,
        scale,
        drop_threshold,
        drop_scale,
        BLOCK_M=qc.block_m,
        BLOCK_N=qc.block_n,
        SPLIT=qc.split and attn_mask is None,
        **common,
        **flags,
        num_warps=qc.num_warps,
        num_stages=qc.num_stages,
    )
    kv = cfg.bwd_kv
    fast(_bwd_dkdv_kernel)[(cdiv(seq_k, kv.block_n), batch * kv_heads)](
        query,
        key,
        value,
        mask,
        grad_out,
        lse,
        delta,
        dk,
        dv,
        seed,
        *qkv_do_strides,
        dk.stride(0),
        dk.stride(1),
        dk.stride(2),
        dv.stride(0),
        dv.stride(1),
        dv.stride(2),
        kv_heads,
        heads // kv_heads,
        seq_q,
        seq_k,
        w,
        qk_scale,
        scale,
        drop_threshold,
        drop_scale,
        BLOCK_M=kv.block_m,
        BLOCK_N=kv.block_n,
        SPLIT=kv.split and attn_mask is None,
        **common,
        **flags,
        num_warps=kv.num_warps,
        num_stages=kv.num_stages,
    )
    return dq, dk, dv


def _refuse_double_backward() -> None:
    """Raise in a backward run with ``create_graph=True`` (once_differentiable would let the
    gradients pass as constants)."""
    if torch.is_grad_enabled():
        raise RuntimeError(
            "attention does not support double backward (create_graph=True through it, e.g. a "
            "gradient penalty or gradgradcheck): the Triton backward is not differentiable; "
            "use torch.nn.functional.scaled_dot_product_attention for higher-order gradients"
        )


class _FlashAttention(torch.autograd.Function):
    """The eager path: the kernels launched directly, without the dispatcher's per-call cost
    (the registered op's autograd wrapper costs several times an ``autograd.Function``'s)."""

    @staticmethod
    def forward(ctx, query, key, value, attn_mask, is_causal, scale, window, config, seq_major, dropout):
        out, lse = _forward(query, key, value, attn_mask, is_causal, scale, window, config, seq_major, dropout)
        ctx.save_for_backward(query, key, value, attn_mask, out, lse)
        ctx.args = (is_causal, scale, window, config, dropout)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        _refuse_double_backward()
        query, key, value, attn_mask, out, lse = ctx.saved_tensors
        is_causal, scale, window, config, dropout = ctx.args
        dq, dk, dv = _backward(
            grad_out, query, key, value, attn_mask, out, lse, is_causal, scale, window, config, dropout
        )
        return dq, dk, dv, None, None, None, None, None, None, None


# ---------------------------------------------------------------------------
# The registered operators: what torch.compile sees
# ---------------------------------------------------------------------------
#
# Under torch.compile (and torch.export) the kernels run as two custom operators,
# ``ojas::flash_attention_forward`` and ``ojas::flash_attention_backward``, opaque to Dynamo
# and Inductor (``torch.library.custom_op``, not ``triton_op``: Inductor neither traces into
# the kernels nor re-lowers their host code, e.g. the bool mask's ``view(torch.uint8)``), with
# fake implementations giving the outputs' shapes and strides and the backward registered
# with ``register_autograd``.  Their implementations are ``_forward`` and ``_backward``: the
# same kernels with the same arguments as the eager path, so the same values and the same
# theorems.  The dropout key is an input tensor, drawn outside the op.

_FORWARD_SCHEMA = (
    "(Tensor query, Tensor key, Tensor value, Tensor? attn_mask, Tensor? dropout_seed, "
    "bool is_causal, float scale, int? window, float dropout_p, bool seq_major, int[]? config) "
    "-> (Tensor, Tensor)"
)
_BACKWARD_SCHEMA = (
    "(Tensor grad_out, Tensor query, Tensor key, Tensor value, Tensor? attn_mask, Tensor out, "
    "Tensor lse, Tensor? dropout_seed, bool is_causal, float scale, int? window, float dropout_p, "
    "int[]? config) -> (Tensor, Tensor, Tensor)"
)


def _config_ints(config: AttentionConfig | None) -> list[int] | None:
    """``config`` as the ops take it: the fields of its three ``KernelConfig`` in order."""
    if config is None:
        return None
    return [
        int(v)
        for k in (config.fwd, config.bwd_kv, config.bwd_q)
        for v in (k.block_m, k.block_n, k.num_warps, k.num_stages, k.split)
    ]


def _config_of(ints: list[int] | None) -> AttentionConfig | None:
    """The inverse of :func:`_config_ints`."""
    if ints is None:
        return None
    return AttentionConfig(*(KernelConfig(*ints[i : i + 4], bool(ints[i + 4])) for i in (0, 5, 10)))


@torch.library.custom_op("ojas::flash_attention_forward", mutates_args=(), schema=_FORWARD_SCHEMA)
def _forward_op(query, key, value, attn_mask, dropout_seed, is_causal, scale, window, dropout_p, seq_major, config):
    return _forward(
        query,
        key,
        value,
        attn_mask,
        is_causal,
        scale,
        window,
        _config_of(config),
        seq_major,
        _dropout_of(dropout_p, dropout_seed),
    )


@_forward_op.register_fake
def _(query, key, value, attn_mask, dropout_seed, is_causal, scale, window, dropout_p, seq_major, config):
    return _forward_outputs(query, value, seq_major)


@torch.library.custom_op("ojas::flash_attention_backward", mutates_args=(), schema=_BACKWARD_SCHEMA)
def _backward_op(
    grad_out, query, key, value, attn_mask, out, lse, dropout_seed, is_causal, scale, window, dropout_p, config
):
    return _backward(
        grad_out,
        query,
        key,
        value,
        attn_mask,
        out,
        lse,
        is_causal,
        scale,
        window,
        _config_of(config),
        _dropout_of(dropout_p, dropout_seed),
    )


@_backward_op.register_fake
def _(grad_out, query, key, value, attn_mask, out, lse, dropout_seed, is_causal, scale, window, dropout_p, config):
    return _backward_outputs(query, key, value)


def _setup_context(ctx, inputs, output) -> None:
    query, key, value, attn_mask, dropout_seed, is_causal, scale, window, dropout_p, _, config = inputs
    out, lse = output
    ctx.save_for_backward(query, key, value, attn_mask, out, lse, dropout_seed)
    ctx.args = (is_causal, scale, window, dropout_p, config)


def _forward_op_backward(ctx, grad_out, grad_lse):
    """The gradients of query, key and value (lse is not differentiated: its gradient is ignored)."""
    _refuse_double_backward()
    query, key, value, attn_mask, out, lse, dropout_seed = ctx.saved_tensors
    dq, dk, dv = _backward_op(grad_out, query, key, value, attn_mask, out, lse, dropout_seed, *ctx.args)
    return (dq, dk, dv) + (None,) * 8


_forward_op.register_autograd(_forward_op_backward, setup_context=_setup_context)


def _compiled_forward(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None,
    is_causal: bool,
    scale: float,
    window: int | None,
    config: AttentionConfig | None,
    seq_major: bool,
    dropout: _Dropout | None,
    dropout_p: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out, lse)`` by ``ojas::flash_attention_forward`` (differentiable in query, key, value)."""
    return _forward_op(
        query,
        key,
        value,
        attn_mask,
        None if dropout is None else dropout.seed,
        bool(is_causal),
        float(scale),
        window,
        float(dropout_p) if dropout is not None else 0.0,
        bool(seq_major),
        _config_ints(config),
    )


def flash_attention_forward(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    is_causal: bool,
    scale: float,
    window: int | None,
    config: AttentionConfig | None = None,
    *,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    dropout_seed: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward pass: ``(out, lse)``, lse float32 ``[B, Hq, Sq]`` (``-inf`` for a
    fully masked row, whose output is zeros; with dropout the lse of all the
    probabilities, dropped ones included).

    Implements ``attention_forward`` (rocq/Attention/OnlineSoftmax.v), equal to
    the two-pass softmax by Ojas.Attention.StreamCorrect.attention_forward_correct,
    with masked key tiles dropped by Ojas.Attention.Mask.stream_row_masked_keys and
    the lse of Ojas.Attention.Lse.stream_lse.  ``attn_mask``, ``dropout_p`` and
    ``dropout_seed``: see :func:`flash_attention`.  Under torch.compile: the registered op
    ``ojas::flash_attention_forward`` under no_grad (not differentiable, as eagerly)."""
    _check(query, key, value, window, attn_mask)
    dropout = _dropout_args(dropout_p, dropout_seed, query)
    if torch.compiler.is_compiling():
        with torch.no_grad():  # the forward alone, as in eager
            return _compiled_forward(
                query, key, value, attn_mask, is_causal, scale, window, config, False, dropout, dropout_p
            )
    return _forward(query, key, value, attn_mask, is_causal, scale, window, config, dropout=dropout)


def flash_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    is_causal: bool,
    scale: float | None = None,
    window: int | None = None,
    config: AttentionConfig | None = None,
    *,
    attn_mask: torch.Tensor | None = None,
    seq_major: bool = False,
    dropout_p: float = 0.0,
    dropout_seed: torch.Tensor | None = None,
) -> torch.Tensor:
    """Differentiable flash attention; ``scale`` defaults to ``1 / sqrt(E)``.

    ``seq_major``: the output ``[B, Hq, Sq, Ev]`` is a view of a contiguous ``[B, Sq, Hq, Ev]``
    tensor (the kernel writes it through its strides), so that ``out.transpose(1, 2)``, the
    layout Hugging Face's attention modules continue with, needs no copy.  Same values.

    Forward: ``attention_forward`` (OnlineSoftmax.v;
    Ojas.Attention.StreamCorrect.attention_forward_correct,
    Ojas.Attention.Mask.stream_row_masked_keys, Ojas.Attention.Lse.stream_lse).
    Backward: ``attention_backward`` (Backward.v;
    Ojas.Attention.BackwardCorrect.attention_backward_dQ_is_derive, ``_dK_``, ``_dV_``
    and Ojas.Attention.BackwardCorrect.attention_backward_forward_eq), P recomputed
    from the saved lse (Ojas.Attention.Lse.row_probs_stream_row).

    Grouped-query attention (``Hkv`` dividing ``Hq``, ``group = Hq // Hkv``): query
    head ``h`` reads key/value head ``h // group`` (no copy), which over the reals is
    attention on key/value heads repeated ``group`` times
    (Ojas.Attention.GroupedQuery.gqa_forward_repeat_kv,
    Ojas.Attention.GroupedQuery.gqa_forward_correct); dK and dV of key head ``hk``
    accumulate, in one float32 accumulator, query heads ``hk * group + g`` for
    ``g = 0 .. group-1`` in turn, each over its query tiles: the derivative of the
    loss summed over the query heads (Ojas.Attention.GroupedQuery.gqa_dK_is_derive,
    Ojas.Attention.GroupedQuery.gqa_dV_is_derive, stated as a sum in that order; over
    the reals the order is immaterial); dQ per head
    (Ojas.Attention.GroupedQuery.gqa_dQ_is_derive).  The rounding of that accumulation
    is covered by no theorem.

    ``attn_mask`` (optional), broadcastable to ``[B, Hq, Sq, Sk]`` and read with
    stride 0 along its broadcast dimensions: bool (True = takes part) is one more
    conjunct of ``visibility`` (Ojas.Attention.Mask.visibility_true_iff), so
    masked keys are dropped keys (``stream_row_masked_keys``) and a row with none
    left gives zeros, lse -inf and zero gradients (``stream_row_fully_masked``).
    A mask of the query's dtype is added to the scores before the softmax; its
    -inf entries are masked keys as above.  Over the reals, with the mask read as
    a finite bias plus the set of its -inf entries (-inf is not a real):
    Ojas.Attention.AdditiveMask.attention_forward_float_mask_correct (the streamed
    rows on the scores ``scale * (q . k) + mask`` are the two-pass softmax of the
    keys with a finite entry; an instance of the streaming theorem, which holds for
    any scores) and Ojas.Attention.AdditiveMask.stream_row_float_mask_fully_masked
    (a row of -inf gives zeros); the whole-head dQ/dK/dV theorems above are stated
    for scores without a bias, their row terms on biased scores are
    Ojas.Attention.AdditiveMask.row_dQ_bias_is_derive, ``row_dK_bias_is_derive`` and
    ``row_dV_bias_is_derive``, and no theorem covers the mask in floating point.  Values
    below -FLT_MAX / log2(e) (about -2.4e38, e.g. ``torch.finfo(dtype).min`` of
    bfloat16 and float32) overflow the kernels' base-2 scores and act as -inf: a
    row made of them alone is fully masked here, while the reference and SDPA
    average its values.  The kernel computes no gradient for the mask: one
    requiring grad is refused (``ojas_ref.attention(impl="reference")`` has it).

    float32 inputs: the dots follow torch's float32 matmul precision
    (``torch.backends.cuda.matmul.fp32_precision``, set by
    ``torch.set_float32_matmul_precision`` and ``allow_tf32``): TF32 when it is allowed,
    otherwise (precision "highest", the default) 3xTF32, not IEEE float32 (module docstring:
    no theorem bounds 3xTF32 products).

    ``dropout_p`` in [0, 1]: attention dropout on the probabilities, kept ones scaled by
    ``1 / (1 - p)``, as ``scaled_dot_product_attention``'s ``dropout_p`` (applied whenever
    nonzero; p = 1 gives zeros).  ``dropout_seed``: the Philox key, an int64 tensor ``[2]``
    on the query's device holding two values in [0, 2^32) (``ojas_ref.attention`` passes the
    one it drew); None draws it from torch's generator of that device
    (``torch.randint(0, 2**32, (2,), dtype=torch.int64)``, reproducible under
    ``torch.manual_seed``).  The mask: module docstring; it is ``ojas_ref.attention``'s
    reference mask, bit for bit.

    Under torch.compile this calls the registered op ``ojas::flash_attention_forward`` (its
    backward ``ojas::flash_attention_backward``; module docstring): the same kernels with the
    same arguments, so the same values and the theorem citations above unchanged.  A key
    drawn here (no ``dropout_seed``) is then a ``torch.randint`` of the graph, which Inductor
    draws from its own generator unless ``torch._inductor.config.fallback_random`` is set (as
    for torch's own dropout)."""
    _check(query, key, value, window, attn_mask)
    if attn_mask is not None and attn_mask.requires_grad and torch.is_grad_enabled():
        raise ValueError(
            "attn_mask requires grad, but the kernel computes no gradient for the mask; "
            "detach it, or use ojas_ref.attention(..., impl='reference') for d(attn_mask)"
        )
    dropout = _dropout_args(dropout_p, dropout_seed, query)
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    if torch.compiler.is_compiling():
        return _compiled_forward(
            query, key, value, attn_mask, is_causal, scale, window, config, seq_major, dropout, dropout_p
        )[0]
    return _FlashAttention.apply(
        query, key, value, attn_mask, is_causal, float(scale), window, config, bool(seq_major), dropout
    )
