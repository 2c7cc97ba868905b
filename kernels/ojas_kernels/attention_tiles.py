"""The ``@triton.jit`` helpers that the flash-attention kernels share (forward and backward).

* ``_visible``: visibility of key ``j`` for query ``i``: causal ``j <= i`` (top-left, as
  ``scaled_dot_product_attention``), window ``w`` ``|i - j| < w``, in-range rows and columns
  (``visibility`` of ``rocq/Attention/OnlineSoftmax.v``); ``_apply_mask`` adds a boolean
  ``attn_mask`` as one more conjunct (``Ojas.Attention.Mask.visibility_true_iff``), or an
  additive one to the scores, its -inf entries masked keys
  (``Ojas.Attention.AdditiveMask.attention_forward_float_mask_correct``).
* ``_key_tiles`` / ``_query_tiles`` / ``_tile_range``: the key tiles of a query tile (query
  tiles of a key tile), split into those that need the mask and those visible for every row
  and in bounds; tiles masked for every row are skipped:
  ``Ojas.Attention.Mask.stream_row_masked_keys`` (a masked key is a dropped key).  Key tiles
  are skipped by causal/window only; with an ``attn_mask`` every remaining tile runs the
  masked loop, the mask read on visible entries.
* ``_dot``: ``acc + a @ b`` with float32 accumulation at the precision ``DOT_PREC``
  (``attention_args._dot_precision``).  Triton's CPU interpreter multiplies bfloat16 tiles as
  their raw uint16 bits, so there (``_UPCAST_DOTS``) the operands go through float32 (exact for
  16-bit inputs).
* ``_dropout_key`` / ``_dropout_words`` / ``_kept``: the attention-dropout keep mask.
  Element ``(b, h, i, j)`` is kept iff the top 31 bits of word ``j % 4`` of Philox-4x32-10
  (``tl.philox_impl``) at the counter ``(j // 4, i, b * Hq + h, 0)``, under a 64-bit key read
  from ``SEED``, reach ``drop_threshold``; recomputed in the backward kernels, never stored,
  the same function as ``ojas_ref.functional._attention_reference._dropout_keep``.  No theorem covers the
  random bits: they are checked against that reference (tests/functional/test_attention_dropout.py).

Scores are in base 2 inside the kernels (``s2 = s * log2(e)``, so ``exp(s - m) = exp2(s2 - m2)``).
"""

from __future__ import annotations

import os

import triton
import triton.language as tl

_UPCAST_DOTS = tl.constexpr(os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes"))


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
def _tile_range(lo, a, b, hi, PART: tl.constexpr):
    """Part ``PART`` of the tiles that ``_key_tiles`` / ``_query_tiles`` split at ``lo <= a <= b <= hi``:
    0 is ``[lo, a)`` and 2 is ``[b, hi)`` (masked loop), 1 is ``[a, b)`` (no mask)."""
    if PART == 0:
        return lo, a
    elif PART == 1:
        return a, b
    else:
        return b, hi


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
    (``ojas_ref.functional._attention_reference._dropout_keep``) computes the same words."""
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
