"""The flash-attention forward kernel (``_fwd_kernel``, its key-tile step ``_fwd_tile``) and its
launch (``_forward``).

For every query row the kernel runs the streaming recurrence of
``rocq/Attention/OnlineSoftmax.v`` (``block_step`` folded over the key tiles by ``stream``, then
``finalize``) and saves ``lse = m + ln l``.  Theorems implemented (over the reals; files under
``rocq/Attention/``):

* ``Ojas.Attention.StreamCorrect`` (StreamCorrect.v): ``stream_row_correct``,
  ``attention_forward_correct``: streaming the key tiles, of any size, gives the two-pass
  softmax; the kernel picks the tile sizes per device (``attention_config``).
* ``Ojas.Attention.Mask`` (Mask.v): ``stream_row_masked_keys`` (a masked key is a dropped key,
  so key tiles masked for every row of a query tile are skipped),
  ``stream_row_fully_masked`` (zeros, lse ``None`` = -inf).
* ``Ojas.Attention.Lse`` (Lse.v): ``stream_lse`` (``l > 0`` and ``lse = m + ln l``).
* ``Ojas.Attention.GroupedQuery`` (GroupedQuery.v): ``gqa_forward_repeat_kv`` (query head
  ``h`` reading key head ``h // group`` is attention on key/value heads repeated ``group``
  times).
* ``Ojas.Attention.AdditiveMask`` (AdditiveMask.v): ``attention_forward_float_mask_correct``
  (an additive mask, its -inf entries masked keys, streamed over the biased scores is their
  two-pass softmax).

In floating point (rocq/Attention/Float/): ``Ojas.Attention.Float.ForwardError``
(ForwardError.v): ``attention_forward_error_masked`` bounds every output coordinate of
the tile loop as it runs here (fp32 scores ``rnd(dot(q, k) * qk_scale)``, ``exp2``, P rounded to
the input dtype before P.V, fp32 accumulation, out stored in the input dtype; any boolean
visibility: causal, window, bounds) against the exact softmax over the visible keys;
``ojas_ref.verification.bounds.attention.attention_forward_error_bound`` is its value
(``tests/verification/test_attention_error_bound.py``).  On the GPU the dots run on the tensor
cores (3xTF32 for float32, bf16 MMA for 16-bit inputs), and ``tl.dot(p, v, acc * alpha)``
accumulates into ``acc`` with their truncating, block-aligned arithmetic:
``Ojas.Attention.Float.ForwardAccError`` (ForwardAccError.v: ``attention_forward_acc_posteriori_tf32x3_op``,
``attention_forward_acc_posteriori_tc_op``; the P.V step as any accumulating dot model, with the
H100's identified by ``ojas verify-device``) and its running form ``Ojas.Attention.Float.ForwardAccRunning``
(``attention_forward_acc_running_tf32x3_op`` / ``_tc_op``: each tile's accumulation charged on
the exact signed prefix) cover that path; ``attention_forward_posteriori_bound`` and
``attention_forward_running_bound`` of ``ojas_ref.verification.bounds.attention`` are their
values.  Not covered: ``tl.sum(p)`` (modelled left to right), additive float masks, dropout,
overflow.  FMA contraction is off at every launch (``enable_fp_fusion=False``,
``attention_args._tile_args``), so each product and sum rounds as the model rounds it.  The
finalize division ``out = acc / l`` is IEEE-rounded (``tl.math.div_rn``: Triton's ``/`` on float32
is the approximate ``div.full.f32`` on NVIDIA GPUs, up to 2 ulp), so it is the one correctly
rounded division ``rnd (acc / l)`` of ``Ojas.Attention.Float.OnlineSoftmaxError.final_division``
(and of ``online_softmax_output_error``, OnlineSoftmaxTile.v, which composes it).
``ojas_ref.verification.kernel_schedule`` is an executable model of this kernel's schedule that it
matches bit for bit; for that check the constexpr ``TRACE`` (``_forward``'s ``trace``) stores the
state ``m``, ``l``, ``acc`` after every key tile (``_trace_step``).  Off, it compiles to the same
instructions (the sm_90 PTX of 64 x 64 bf16 and 3xTF32 launches compared, up to register numbering
and the unused ``TR`` parameter); on, it only adds stores.

Dropout (``HAS_DROPOUT``, a constexpr: without it the kernel compiles to the instructions it
had before dropout existed, up to register numbering and three unused parameters; checked on
the PTX for sm_90): the forward sums every probability into ``l`` and only the kept ones into
``acc`` and scales the output by ``1 / (1 - p)``; the lse is that of all the probabilities.
Over the reals one row is the streamed row on the values ``Z_ij v_j / (1 - p)``
(``stream_row_correct`` holds for any values); no theorem covers the dropout path as a whole
(``ojas_ref.attention`` says which parts), and the floating-point theorem above does not
cover it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .attention_args import (
    _Dropout,
    _forward_outputs,
    _last_dim_contiguous,
    _launch_args,
    _tile_args,
)
from .attention_config import AttentionConfig, default_config
from .attention_tiles import (
    _apply_mask,
    _dot,
    _dropout_key,
    _dropout_words,
    _kept,
    _key_tiles,
    _load_2d,
    _tile_range,
    _visible,
)
from .host import cdiv
from .launch import fast


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
def _trace_step(
    TR,
    acc,
    l_i,
    m_i,
    pid_bh,
    start_m,
    start_n,
    lo,
    seq_q,
    seq_k,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_EV: tl.constexpr,
):
    """``TRACE``: store the state after the key tile at ``start_n`` (``m``, ``l``, then ``acc`` row by
    row) at record ``((pid_bh * cdiv(seq_q, BLOCK_M) + start_m // BLOCK_M) * cdiv(seq_k, BLOCK_N) + step)``
    of ``TR`` (float32, ``BLOCK_M * (2 + BLOCK_EV)`` per record; ``step = (start_n - lo) // BLOCK_N``:
    the key tiles run in increasing order).  Only stores: the arithmetic is that of ``TRACE`` off."""
    step = (start_n - lo) // BLOCK_N
    rec = (pid_bh.to(tl.int64) * tl.cdiv(seq_q, BLOCK_M) + start_m // BLOCK_M) * tl.cdiv(seq_k, BLOCK_N) + step
    base = TR + rec * (BLOCK_M * (2 + BLOCK_EV))
    rows = tl.arange(0, BLOCK_M)
    tl.store(base + rows, m_i)
    tl.store(base + BLOCK_M + rows, l_i)
    tl.store(base + 2 * BLOCK_M + rows[:, None] * BLOCK_EV + tl.arange(0, BLOCK_EV)[None, :], acc)


@triton.jit
def _fwd_kernel(
    Q,
    K,
    V,
    M,
    O,
    LSE,
    SEED,
    TR,
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
    TRACE: tl.constexpr,
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
    for part in tl.static_range(3):  # masked, unmasked, masked: see _tile_range
        start, end = _tile_range(lo, a, b_end, hi, part)
        for start_n in range(start, end, BLOCK_N):
            if part == 1:
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
                part != 1,
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
            if TRACE:
                _trace_step(TR, acc, l_i, m_i, pid_bh, start_m, start_n, lo, seq_q, seq_k, BLOCK_M, BLOCK_N, BLOCK_EV)
    # finalize: a fully masked row (l = 0) gives zeros and lse = -inf.
    seen = l_i > 0.0
    # IEEE division (div_rn), not `/` (div.full.f32 on NVIDIA GPUs, up to 2 ulp): final_division's rnd (acc / l)
    out = tl.math.div_rn(acc, tl.where(seen, l_i, 1.0)[:, None])
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
    trace: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out, lse)`` of arguments checked by ``attention_args._check`` and ``_dropout_args``.
    ``trace``: a float32 tensor of ``B * Hq * cdiv(Sq, BLOCK_M) * cdiv(Sk, BLOCK_N) * BLOCK_M * (2 +
    BLOCK_EV)`` elements on the inputs' device, filled with the state after every key tile
    (``_trace_step``; ``ojas_ref.verification.kernel_schedule`` reads it); records of tiles not
    run are left as they are."""
    query, key, value = _last_dim_contiguous(query), _last_dim_contiguous(key), _last_dim_contiguous(value)
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
    mask, seed, strides, w, qk_scale, drop_threshold, drop_scale, constexprs = _launch_args(
        query, key, value, attn_mask, is_causal, scale, window, dropout
    )
    so = out.stride()
    fast(_fwd_kernel)[(cdiv(seq_q, cfg.block_m), batch * heads)](
        query,
        key,
        value,
        mask,
        out,
        lse,
        seed,
        query if trace is None else trace,
        *strides,
        so[0],
        so[1],
        so[2],
        heads,
        heads // kv_heads,
        seq_q,
        seq_k,
        w,
        qk_scale,
        drop_threshold,
        drop_scale,
        POS_SCALE=scale >= 0,
        TRACE=trace is not None,
        **constexprs,
        **_tile_args(cfg, attn_mask),
    )
    return out, lse
