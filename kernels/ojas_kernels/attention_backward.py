"""The flash-attention backward kernels (``_bwd_dq_kernel`` and ``_bwd_dkdv_kernel``, their tile
steps ``_dq_tile`` and ``_dkdv_tile``) and their launch (``_backward``).

They run ``attention_backward`` of ``rocq/Attention/Backward.v``: recompute
``P = exp(s - lse)`` from the lse the forward saved, take ``D = rowsum(dO * O)`` and
``dS = P * (dP - D)``.  The dQ kernel runs first and saves ``D`` for the dK/dV kernel.
Theorems implemented (over the reals; files under ``rocq/Attention/``):

* ``Ojas.Attention.BackwardCorrect`` (BackwardCorrect.v):
  ``attention_backward_{dQ,dK,dV}_is_derive`` (the gradients), ``backward_D_identity``
  (``D = dO . o``), ``attention_backward_dQ_key_tiles`` (dQ accumulated over key tiles),
  ``attention_backward_query_tiles`` (dK, dV summed over query tiles),
  ``attention_backward_forward_eq`` (fed with the streamed forward's out and lse).
* ``Ojas.Attention.Lse`` (Lse.v): ``row_probs_stream_row`` (P recomputed from the saved lse is
  the softmax).
* ``Ojas.Attention.Mask`` (Mask.v): ``stream_row_masked_keys`` (query tiles masked for every
  key of a key tile are skipped, key tiles masked for every row of a query tile too).
* ``Ojas.Attention.GroupedQuery`` (GroupedQuery.v): ``gqa_dK_is_derive``, ``gqa_dV_is_derive``
  (dK, dV of a key head: the sum over ``g = 0 .. group-1`` of query head ``hk * group + g``'s
  terms, the order of ``_bwd_dkdv_kernel``'s loop), ``gqa_dQ_is_derive``.
* ``Ojas.Attention.AdditiveMask`` (AdditiveMask.v): ``row_dQ_bias_is_derive``,
  ``row_dK_bias_is_derive``, ``row_dV_bias_is_derive`` (the row terms on scores with an
  additive mask).

``ojas_ref.verification.kernel_schedule_backward`` is an executable model of these kernels' schedule
that they match bit for bit (``Delta``, every tile's P, dS and accumulators, dQ, dK, dV); for that
check the constexpr ``TRACE`` (``_backward``'s ``trace``) stores P, dS and the accumulators after
every tile (``_trace_tile``).  Off, it compiles to the same instructions (the sm_90 PTX of bf16
64 x 64 and 3xTF32 32 x 32 / 64 x 32 launches compared: the dK/dV kernel's up to register numbering
and the unused ``TR`` parameter, the dQ kernel's the same instructions with the prologue's parameter
loads and index arithmetic in another order); on, it only adds stores.

In floating point (rocq/Attention/Float/): ``Ojas.Attention.Float.DvError`` (``dv_error``)
and ``Ojas.Attention.Float.DkDqError`` (``dk_error``, ``dq_error``, ``delta_close``) bound
dV, dK and dQ a posteriori as the kernels compute them (P recomputed from the saved lse,
``dS = rnd(P * rnd(dP - Delta))`` rounded to the input dtype, fp32 accumulation over the tiles,
the stored results), given the errors of the saved out and lse (``attention_dv_error_bound``,
``attention_dk_error_bound``, ``attention_dq_error_bound`` of
``ojas_ref.verification.bounds.attention``).  Not covered: the tensor cores' order of additions
(and their accumulating into the running sums), additive masks, the 3xTF32
float32 path, the rounding of the grouped-query accumulation.

Dropout (``HAS_DROPOUT``): the keep mask ``Z`` is recomputed (``attention_tiles``), never
stored; the backward is FlashAttention-2's (``dP = dO V^T * Z / (1 - p)``,
``dS = P * (dP - D)``, ``D = rowsum(dO * O)`` of the dropped output).  Over the reals
BackwardCorrect.v's row theorems hold for any values, so for ``Z_ij v_j / (1 - p)``; no theorem
covers the dropout path as a whole, and the floating-point theorems above do not cover it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .attention_args import (
    _backward_outputs,
    _Dropout,
    _last_dim_contiguous,
    _launch_args,
    _tile_args,
)
from .attention_config import AttentionConfig, _block_dim, default_config
from .attention_tiles import (
    _apply_mask,
    _dot,
    _dropout_key,
    _dropout_words,
    _kept,
    _key_tiles,
    _load_2d,
    _query_tiles,
    _tile_range,
    _visible,
)
from .host import cdiv
from .launch import fast


@triton.jit
def _trace_tile(base, x, ROWS: tl.constexpr, COLS: tl.constexpr):
    """``TRACE``: store the float32 [ROWS, COLS] tile ``x`` row by row at ``base``.  Only stores."""
    tl.store(base + tl.arange(0, ROWS)[:, None] * COLS + tl.arange(0, COLS)[None, :], x)


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
    end), dP = (dO V^T) Z / (1 - p), dS = P (dP - D).  Returns dk, dv, and P^T, dS^T (float32,
    for ``TRACE``)."""
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
    return dk, dv, pt, dst


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
    TRACE: tl.constexpr,
):
    """``dK`` and ``dV`` of ``attention_backward`` (Backward.v) for one key tile of
    one key head, summed over the query heads of its group (GroupedQuery.v,
    ``gqa_dK_is_derive``, ``gqa_dV_is_derive``: loop ``g = 0 .. group-1``) and over the
    query tiles that see the key tile (BackwardCorrect.v, ``attention_backward_query_tiles``).

    Rounding: ``Ojas.Attention.Float.DvError.dv_error`` (dV) and
    ``Ojas.Attention.Float.DkDqError.dk_error`` (dK: ``dk_kernel``, this loop's schedule) bound
    every stored entry against the exact gradient; not covered: the MMA order and its
    accumulation into dk/dv, 3xTF32 dots, ``tl.exp2``'s error (assumed)."""
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
        for part in tl.static_range(3):  # masked, unmasked, masked: see _tile_range
            start, end = _tile_range(lo, a, b_end, hi, part)
            for start_m in range(start, end, BLOCK_M):
                if part == 1:
                    start_m = tl.multiple_of(start_m, BLOCK_M)
                dk, dv, pt, dst = _dkdv_tile(
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
                    part != 1,
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
                if TRACE:  # record (program, g, query tile): P^T, dS^T, dk, dv
                    tile = (start_m - lo) // BLOCK_M
                    rec = ((pid_bh.to(tl.int64) * tl.cdiv(seq_k, BLOCK_N) + start_n // BLOCK_N) * group + g) * tl.cdiv(
                        seq_q, BLOCK_M
                    ) + tile
                    base = TR + rec * (BLOCK_N * (2 * BLOCK_M + BLOCK_E + BLOCK_EV))
                    _trace_tile(base, pt, BLOCK_N, BLOCK_M)
                    _trace_tile(base + BLOCK_N * BLOCK_M, dst, BLOCK_N, BLOCK_M)
                    _trace_tile(base + 2 * BLOCK_N * BLOCK_M, dk, BLOCK_N, BLOCK_E)
                    _trace_tile(base + BLOCK_N * (2 * BLOCK_M + BLOCK_E), dv, BLOCK_N, BLOCK_EV)
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
    """One key tile's share of dQ_i (Backward.v); with dropout dP = (dO V^T) Z / (1 - p).
    Returns dq, and P, dS (float32, for ``TRACE``)."""
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
    return dq, p, ds


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
    TRACE: tl.constexpr,
):
    """``dQ`` of ``attention_backward`` (Backward.v) for one query tile of one head,
    accumulated over key tiles (BackwardCorrect.v, ``attention_backward_dQ_key_tiles``).
    It first computes ``D_i = dO_i . o_i`` (``row_dscores``; ``backward_D_identity``)
    in float32 and saves it for the dK/dV kernel, launched after this one.

    Rounding: ``Ojas.Attention.Float.DkDqError.dq_error`` (dQ: ``dq_kernel``, this loop's
    schedule) bounds every stored entry against the exact gradient, ``delta_close`` the error of
    ``D`` (any reduction order of ``tl.sum``) against ``dO . o`` of the stored output; not covered:
    the MMA order and its accumulation into dq, 3xTF32 dots, ``tl.sum``'s padding
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
    for part in tl.static_range(3):  # masked, unmasked, masked: see _tile_range
        start, end = _tile_range(lo, a, b_end, hi, part)
        for start_n in range(start, end, BLOCK_N):
            if part == 1:
                start_n = tl.multiple_of(start_n, BLOCK_N)
            dq, p, ds = _dq_tile(
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
                part != 1,
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
            if TRACE:  # record (program, key tile): P, dS, dq
                tile = (start_n - lo) // BLOCK_N
                rec = (pid_bh.to(tl.int64) * tl.cdiv(seq_q, BLOCK_M) + start_m // BLOCK_M) * tl.cdiv(
                    seq_k, BLOCK_N
                ) + tile
                base = TR + rec * (BLOCK_M * (2 * BLOCK_N + BLOCK_E))
                _trace_tile(base, p, BLOCK_M, BLOCK_N)
                _trace_tile(base + BLOCK_M * BLOCK_N, ds, BLOCK_M, BLOCK_N)
                _trace_tile(base + 2 * BLOCK_M * BLOCK_N, dq, BLOCK_M, BLOCK_E)
    dq = dq * scale
    tl.store(
        DQ + b * stride_dqb + h * stride_dqh + offs_m[:, None] * stride_dqm + offs_e[None, :],
        dq.to(DQ.dtype.element_ty),
        mask=m_ok[:, None] & (offs_e[None, :] < HEAD_E),
    )


def _check_trace(
    trace: tuple[torch.Tensor, torch.Tensor],
    batch: int,
    heads: int,
    kv_heads: int,
    seq_q: int,
    seq_k: int,
    block_e: int,
    block_ev: int,
    cfg: AttentionConfig,
) -> None:
    """``ValueError`` unless ``trace`` is two contiguous float32 tensors with room for every record
    (``_backward``'s docstring)."""
    qm, qn, km, kn = cfg.bwd_q.block_m, cfg.bwd_q.block_n, cfg.bwd_kv.block_m, cfg.bwd_kv.block_n
    need = (
        batch * heads * cdiv(seq_q, qm) * cdiv(seq_k, qn) * qm * (2 * qn + block_e),
        batch * heads * cdiv(seq_k, kn) * cdiv(seq_q, km) * kn * (2 * km + block_e + block_ev),
    )
    for name, t, n in zip(("trace[0] (dQ kernel)", "trace[1] (dK/dV kernel)"), trace, need):
        if t.dtype != torch.float32 or not t.is_contiguous() or t.numel() < n:
            raise ValueError(
                f"{name} must be a contiguous float32 tensor of at least {n} elements, "
                f"got {t.dtype} with {t.numel()} (contiguous: {t.is_contiguous()})"
            )


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
    delta: torch.Tensor | None = None,
    trace: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dQ, dK, dV)`` from the forward's ``out`` and ``lse``: the dQ kernel (which saves
    ``D``), then the dK/dV kernel.  ``delta``: a float32 ``[B, Hq, Sq]`` contiguous tensor on the
    inputs' device to hold ``D`` (``ojas_ref.verification.kernel_schedule_backward`` reads it),
    else a new one.  ``trace``: two float32 tensors on the inputs' device that turn ``TRACE`` on:
    the dQ kernel's, ``B * Hq * cdiv(Sq, BLOCK_M) * cdiv(Sk, BLOCK_N)`` records of ``BLOCK_M * (2 *
    BLOCK_N + BLOCK_E)`` (P, dS, then the dq accumulator after every key tile, at record
    ``(program * cdiv(Sq, BLOCK_M) + query tile) * cdiv(Sk, BLOCK_N) + key tiles since lo``), and the
    dK/dV kernel's, ``B * Hkv * cdiv(Sk, BLOCK_N) * group * cdiv(Sq, BLOCK_M)`` records of ``BLOCK_N *
    (2 * BLOCK_M + BLOCK_E + BLOCK_EV)`` (P^T, dS^T, dk, dv after every query tile, at record
    ``((program * cdiv(Sk, BLOCK_N) + key tile) * group + g) * cdiv(Sq, BLOCK_M) + query tiles since
    lo``); records of tiles not run are left as they are."""
    grad_out = _last_dim_contiguous(grad_out)
    query, key, value = _last_dim_contiguous(query), _last_dim_contiguous(key), _last_dim_contiguous(value)
    batch, heads, seq_q, e = query.shape
    kv_heads, seq_k, ev = key.shape[1], key.shape[2], value.shape[3]
    dq, dk, dv = _backward_outputs(query, key, value)
    if seq_q == 0 or seq_k == 0 or window == 0 or batch * heads == 0:
        return dq.zero_(), dk.zero_(), dv.zero_()
    cfg = config or default_config(max(e, ev), query.dtype, query.device, is_causal)
    if delta is None:
        delta = torch.empty_like(lse)
    elif delta.shape != lse.shape or delta.dtype != torch.float32 or not delta.is_contiguous():
        raise ValueError(
            f"delta must be a contiguous float32 tensor of shape {tuple(lse.shape)}, "
            f"got {delta.dtype} {tuple(delta.shape)} (contiguous: {delta.is_contiguous()})"
        )
    if trace is not None:
        _check_trace(trace, batch, heads, kv_heads, seq_q, seq_k, _block_dim(e), _block_dim(ev), cfg)
    mask, seed, strides, w, qk_scale, drop_threshold, drop_scale, constexprs = _launch_args(
        query, key, value, attn_mask, is_causal, scale, window, dropout
    )
    sdo, so, sdq, sdk, sdv = grad_out.stride(), out.stride(), dq.stride(), dk.stride(), dv.stride()
    strides = (*strides, sdo[0], sdo[1], sdo[2])
    scalars = (seq_q, seq_k, w, qk_scale, scale, drop_threshold, drop_scale)
    fast(_bwd_dq_kernel)[(cdiv(seq_q, cfg.bwd_q.block_m), batch * heads)](
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
        query if trace is None else trace[0],
        *strides,
        so[0],
        so[1],
        so[2],
        sdq[0],
        sdq[1],
        sdq[2],
        heads,
        heads // kv_heads,
        *scalars,
        TRACE=trace is not None,
        **constexprs,
        **_tile_args(cfg.bwd_q, attn_mask),
    )
    fast(_bwd_dkdv_kernel)[(cdiv(seq_k, cfg.bwd_kv.block_n), batch * kv_heads)](
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
        query if trace is None else trace[1],
        *strides,
        sdk[0],
        sdk[1],
        sdk[2],
        sdv[0],
        sdv[1],
        sdv[2],
        kv_heads,
        heads // kv_heads,
        *scalars,
        TRACE=trace is not None,
        **constexprs,
        **_tile_args(cfg.bwd_kv, attn_mask),
    )
    return dq, dk, dv
