"""The ``@triton.jit`` kernels of the linear cross-entropy and their launches: ``_logits_kernel``
(logit tiles: the forward's online-softmax statistics, or the backward's G), ``_rows_kernel``
(per token: lse, loss and the row of G), ``_scale_kernel`` (gradients times grad_output), the
helpers they share (``_softcap``, ``_cap_tanh``, ``_cap_chain``, ``_logits_of``, ``_grad_tile``)
and the host functions that launch them (``_launch_logits``, ``_launch_rows``,
``_scale_in_place``).  Both schedules (``linear_cross_entropy_three_products``,
``linear_cross_entropy_four_products``) run these kernels.

They compute ``ce_forward`` / ``ce_backward`` of ``rocq/LinearCrossEntropy/Definitions.v`` for one
chunk of tokens and one range of the vocabulary.  Theorems implemented (over the reals):

* ``Ojas.LinearCrossEntropy.ChunkedLse.merge_chunks_lse`` and ``chunked_lse_app_merge``: one
  online-softmax state (max, sum) per group of vocabulary tiles, merged in any order
  (``merge`` of ``rocq/Attention/Merge.v``), gives lse = ln sum_v exp z_v.  ``_logits_kernel``
  (STATS) streams its tiles with ``block_step`` (``chunked_lse_chunk``) and writes one state
  per (token, group); ``_rows_kernel`` merges them, or with STREAM streams a row's logits
  itself.
* ``Ojas.LinearCrossEntropy.Loss.vocab_loop_correct`` / ``token_forward_correct``: the per-token
  loss from the lse, the target logit and the logit sum (``_rows_kernel``).
* ``Ojas.LinearCrossEntropy.Gradient.grad_entry_is_derive``: G_nv = token weight x dlogit x
  softcap', the derivative of the loss with respect to the raw logit (``_grad_tile``).

Rounding: ``Ojas.LinearCrossEntropy.Float.LseLossError.ce_lse_error`` (and ``ce_lse_error_up``,
whose value the oracle computes: ``Ojas.Bounds.LinearCrossEntropy.ce_lse_q_sound``) bounds the lse
that ``_rows_kernel`` with STREAM computes from the float32 logits it reads (the 3-product
schedule, and ``fwd_logits="cublas"``): the online max and rescaled sum over its vocabulary
tiles in float32, ``tl.exp`` / ``tl.log`` / ``tl.sum`` within stated errors (Section
premises), the logits' own error a premise ``delta``;
``Ojas.LinearCrossEntropy.Float.LseLossError.ce_loss_error`` the loss ``rnd(lse - z_t)`` without
smoothing and z-loss (tests/verification/test_linear_cross_entropy_error_bound.py uses them as
tolerances; ``linear_cross_entropy_lse_error_bound`` of ojas_ref/verification/error_bounds.py).
``Ojas.LinearCrossEntropy.Float.LseLossError.ce_lse_error_two_level`` bounds the two-level schedule
(4 products, ``linear_cross_entropy_forward``): ``_logits_kernel`` STATS streaming each
program's group of tiles, ``_rows_kernel`` merging the groups' states
(``linear_cross_entropy_merge_lse_error_bound``, whose value the oracle computes:
``Ojas.Bounds.LinearCrossEntropy.ce_merge_lse_q_sound``).
``Ojas.LinearCrossEntropy.Float.LossPosteriori.ce_loss_posteriori`` (the loss) charges the logits'
errors weighted by the softmax instead, tight for confident tokens
(``linear_cross_entropy_loss_posteriori_bound``).  With softcap (``HAS_CAP``, no bias):
``Ojas.LinearCrossEntropy.Float.SoftcapError.ce_lse_error_softcap``, ``ce_loss_error_softcap`` and
``ce_lse_error_two_level_softcap`` bound the lse and loss against the exact capped logits'
(``_softcap`` 1-Lipschitz: ``softcap_lipschitz``; the computed tanh ``_cap_tanh`` within a
stated error, a premise; the ``softcap`` argument of the bound functions), and
``Ojas.LinearCrossEntropy.Float.SoftcapError.sc_chain_error`` the chain factor ``_cap_chain``.  The
entries of G that ``_grad_tile`` writes are those the gradient theorems of the schedules
bound (``Ojas.LinearCrossEntropy.Float.GradError``, ``Ojas.LinearCrossEntropy.Float.WeightedGradError``).
No theorem covers: the order of the sums inside the Triton dots (only the classical any-order
bound enters ``delta``), TF32 products, bias, label smoothing, z-loss, float16's scaled G, and
``_scale_kernel`` (the gradients computed for grad_output 1 and scaled after the fact: equal
over the reals by linearity, not stated in Coq).  ``_rows_kernel`` and ``_logits_kernel``
compile without FMA contraction (``enable_fp_fusion=False`` at every launch), so each product
and sum rounds as the theorems model it.
"""

from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from .attention_args import _dot_precision
from .attention_tiles import _dot
from .host import cdiv
from .launch import fast
from .linear_cross_entropy_args import _num_sms, _Options
from .linear_cross_entropy_config import GemmConfig, RowConfig


@triton.jit
def _cap_tanh(r, softcap):
    """tanh(r / c) = 1 - 2 / (exp(2 r / c) + 1) (``sc_tanh`` of Definitions.v; 2 r / c capped at
    80, past which the float32 result is 1 anyway, so exp does not overflow).  Its error in
    float32 is the premise ``th_err`` of ``Ojas.LinearCrossEntropy.Float.SoftcapError`` (measured:
    ``measured_tanh_error`` of ojas_ref/verification/linear_cross_entropy_error.py), not a theorem."""
    return 1.0 - 2.0 / (tl.exp(tl.minimum(2.0 * r / softcap, 80.0)) + 1.0)


@triton.jit
def _softcap(r, softcap):
    """``softcap`` of Definitions.v: c tanh(r / c), the product rounded once (``sc_z`` of
    ``Ojas.LinearCrossEntropy.Float.SoftcapError.sc_logit_error``)."""
    return softcap * _cap_tanh(r, softcap)


@triton.jit
def _cap_chain(z, softcap):
    """softcap'(r) = 1 - (z / c)^2 from the capped logit z (``softcap_grad``); its float32 error
    against 1 - tanh(y / c)^2: ``Ojas.LinearCrossEntropy.Float.SoftcapError.sc_chain_error``
    (the division within a stated error, a premise)."""
    zc = z / softcap
    return 1.0 - zc * zc


@triton.jit
def _logits_of(r, BIAS, cols, col_ok, softcap, HAS_BIAS: tl.constexpr, HAS_CAP: tl.constexpr):
    """``softcap cap (raw_logit)``: r + b (``raw_logit``), capped.  r: [M, N] float32."""
    if HAS_BIAS:
        r += tl.load(BIAS + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    if HAS_CAP:
        r = _softcap(r, softcap)
    return r


@triton.jit
def _grad_tile(z, lse, is_target, w, eps, lam, inv_v, softcap, HAS_CAP: tl.constexpr):
    """``grad_entry`` of Definitions.v for a tile: w_n ((1 + 2 lam lse_n) exp(z - lse_n)
    - eps / V - (1 - eps) [v = t_n]) softcap'(r), softcap'(r) = 1 - (z / c)^2
    (``softcap_grad``; Ojas.LinearCrossEntropy.Gradient.grad_entry_is_derive).
    z: [M, N] capped logits; lse, w: [M]."""
    g = (1.0 + 2.0 * lam * lse)[:, None] * tl.exp(z - lse[:, None]) - eps * inv_v
    g = tl.where(is_target, g - (1.0 - eps), g)
    if HAS_CAP:
        g = g * _cap_chain(z, softcap)
    return g * w[:, None]


@triton.jit
def _logits_kernel(
    X,
    W,
    BIAS,
    TGT,
    LSE,
    RW,
    Z,
    PM,
    PL,
    PS,
    ZT,
    G,
    row0,
    n_rows,
    v0,
    v1,
    D,
    n_groups,
    tiles_per_group,
    stride_x,
    stride_w,
    stride_z,
    stride_p,
    stride_rw,
    softcap,
    eps,
    lam,
    inv_v,
    STATS: tl.constexpr,
    WRITE_Z: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_CAP: tl.constexpr,
    NEED_SUM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    EVEN_K: tl.constexpr,
    DOT_PREC: tl.constexpr,
):
    """Logits of the tokens ``[0, n_rows)`` (rows of X; token ``row0 + i`` of the kept
    tokens for TGT, LSE, RW, ZT) against the vocabulary rows ``[v0, v1)``
    (``chunk_logits``), one token tile by one group of vocabulary tiles.

    STATS (forward): the group's tiles go through ``block_step`` (online max and
    rescaled sum, empty value rows; ``chunked_lse_chunk``; rounding:
    ``Ojas.LinearCrossEntropy.Float.LseLossError.ce_lse_error_two_level``, ``grp_state``; with HAS_CAP
    ``Ojas.LinearCrossEntropy.Float.SoftcapError.ce_lse_error_two_level_softcap``); writes the group's
    partial state (PM, PL, PS = sum z) per token, the target logit (ZT, from the
    one tile holding it: ``target_logit``) and with WRITE_Z the float32 logits.
    GRAD (backward): writes G = ``_grad_tile`` for each tile, from the saved lse and
    the token weights RW.  Rows past ``n_rows`` and columns past ``v1`` are read
    clamped to the last ones (no load masks); Z and G (row stride ``stride_z``) are
    padded to whole tiles and their tiles stored whole (vectorised stores; the
    padding is never read)."""
    pid = tl.program_id(0)
    num_m = tl.cdiv(n_rows, BLOCK_M)
    width = GROUP_M * n_groups
    first_m = (pid // width) * GROUP_M
    size_m = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % size_m
    pid_g = (pid % width) // size_m

    m0 = pid_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    row_ok = offs_m < n_rows
    in_m = tl.minimum(offs_m, n_rows - 1) - m0  # tile-relative rows, clamped
    offs_k = tl.arange(0, BLOCK_K)
    x_tile = X + m0.to(tl.int64) * stride_x + (in_m * stride_x)[:, None] + offs_k[None, :]
    tok = row0 + offs_m
    tok_c = row0 + m0 + in_m  # clamped: rows past n_rows repeat the last row, all finite
    tgt = tl.load(TGT + tok_c).to(tl.int32)
    if STATS:
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        s_i = tl.zeros([BLOCK_M], tl.float32)
    else:
        lse = tl.load(LSE + tok_c)
        w = tl.load(RW + tok_c * stride_rw)

    t_first = pid_g * tiles_per_group
    t_last = tl.minimum(t_first + tiles_per_group, tl.cdiv(v1 - v0, BLOCK_N))
    for t in range(t_first, t_last):
        n0 = v0 + t * BLOCK_N
        cols = n0 + tl.arange(0, BLOCK_N)
        col_ok = cols < v1
        in_n = tl.minimum(cols, v1 - 1) - n0
        x_ptrs = x_tile
        w_ptrs = W + n0.to(tl.int64) * stride_w + (in_n * stride_w)[None, :] + offs_k[:, None]
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        for k in range(0, D, BLOCK_K):
            if EVEN_K:
                x = tl.load(x_ptrs)
                wt = tl.load(w_ptrs)
            else:
                x = tl.load(x_ptrs, mask=offs_k[None, :] < D - k, other=0.0)
                wt = tl.load(w_ptrs, mask=offs_k[:, None] < D - k, other=0.0)
            acc = _dot(x, wt, acc, DOT_PREC)
            x_ptrs += BLOCK_K
            w_ptrs += BLOCK_K
        z = _logits_of(acc, BIAS, cols, col_ok, softcap, HAS_BIAS, HAS_CAP)
        is_target = cols[None, :] == tgt[:, None]
        base = m0.to(tl.int64) * stride_z + t * BLOCK_N
        tile = ((offs_m - m0) * stride_z)[:, None] + (cols - n0)[None, :]
        if STATS:
            zm = tl.where(col_ok[None, :], z, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(zm, 1))
            l_i = l_i * tl.exp(m_i - m_new) + tl.sum(tl.exp(zm - m_new[:, None]), 1)
            m_i = m_new
            if NEED_SUM:
                s_i += tl.sum(tl.where(col_ok[None, :], z, 0.0), 1)
            has_t = (tgt >= n0) & (tgt < n0 + BLOCK_N) & (tgt < v1)
            tl.store(ZT + tok, tl.sum(tl.where(is_target, z, 0.0), 1), mask=row_ok & has_t)
            if WRITE_Z:
                tl.store(Z + base + tile, z)
        else:
            g = _grad_tile(z, lse, is_target, w, eps, lam, inv_v, softcap, HAS_CAP)
            tl.store(G + base + tile, g.to(G.dtype.element_ty))
    if STATS:
        p = offs_m.to(tl.int64) * stride_p + pid_g
        tl.store(PM + p, m_i, mask=row_ok)
        tl.store(PL + p, l_i, mask=row_ok)
        if NEED_SUM:
            tl.store(PS + p, s_i, mask=row_ok)


@triton.jit
def _rows_kernel(
    PM,
    PL,
    PS,
    ZT,
    Z,
    G,
    TGT,
    LOSS,
    LSE,
    BIAS,
    RW,
    row0,
    n_rows,
    n_groups,
    V,
    v0,
    stride_p,
    stride_z,
    stride_rw,
    g_scale,
    softcap,
    eps,
    lam,
    inv_v,
    HAS_LSE: tl.constexpr,
    GRAD: tl.constexpr,
    STREAM: tl.constexpr,
    NEED_SUM: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_CAP: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    """Per token (row ``i`` of Z and G, kept token ``row0 + i``), for the vocabulary
    rows ``v0 + [0, V)`` held in Z.

    Forward (no HAS_LSE): the lse state, lse = m + ln l (``finalize``) and the loss
    (``token_loss``), stored (rounding, STREAM without bias and cap:
    ``Ojas.LinearCrossEntropy.Float.LseLossError.ce_lse_error``, ``ce_loss_error`` at eps = lam = 0;
    with the cap: ``Ojas.LinearCrossEntropy.Float.SoftcapError.ce_lse_error_softcap``,
    ``ce_loss_error_softcap``; the merge of PM, PL below: ``ce_lse_error_two_level``, capped
    logits ``ce_lse_error_two_level_softcap``); the state is the merge of the vocabulary groups'
    partial states PM, PL, PS and target logit ZT written by ``_logits_kernel``
    (``merge`` of Merge.v; ``merge_chunks_lse``), or with STREAM ``block_step`` over
    the row's raw logits Z (bias and cap applied here; ``chunked_lse_chunk``).  G's
    token weight is ``g_scale`` (1, or a power of two for float16).
    Backward (HAS_LSE): lse from LSE, token weights RW (times ``g_scale``).
    With GRAD: the token's row of G (``_grad_tile``) from the float32 logits Z, raw
    with STREAM.  ``V``: Z's width (padded to whole tiles without STREAM).  The rows are kept
    tokens only: every schedule removes the ignored ones before its products (``ce_drop_ignored``)."""
    offs_r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    ok = offs_r < n_rows
    tok = row0 + offs_r
    tgt = tl.load(TGT + tok, mask=ok, other=-1).to(tl.int32) - v0
    zrow = offs_r.to(tl.int64)[:, None] * stride_z
    if HAS_LSE:
        lse = tl.load(LSE + tok, mask=ok, other=0.0)
        weight = tl.load(RW + tok * stride_rw, mask=ok, other=0.0) * g_scale
    else:
        m = tl.full([BLOCK_R], float("-inf"), tl.float32)
        l = tl.zeros([BLOCK_R], tl.float32)
        s = tl.zeros([BLOCK_R], tl.float32)
        if STREAM:
            zt = tl.zeros([BLOCK_R], tl.float32)
            for c0 in range(0, V, BLOCK_V):
                cols = c0 + tl.arange(0, BLOCK_V)
                col_ok = cols < V
                mask = ok[:, None] & col_ok[None, :]
                z = _logits_of(
                    tl.load(Z + zrow + cols[None, :], mask=mask, other=0.0).to(tl.float32),
                    BIAS + v0,
                    cols,
                    col_ok,
                    softcap,
                    HAS_BIAS,
                    HAS_CAP,
                )
                zm = tl.where(mask, z, float("-inf"))
                m_new = tl.maximum(m, tl.max(zm, 1))
                m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows past n_rows: nothing seen
                l = l * tl.exp(m - m_ref) + tl.sum(tl.exp(zm - m_ref[:, None]), 1)
                m = m_new
                if NEED_SUM:
                    s += tl.sum(tl.where(mask, z, 0.0), 1)
                zt += tl.sum(tl.where(cols[None, :] == tgt[:, None], z, 0.0), 1)
        else:
            prow = offs_r.to(tl.int64)[:, None] * stride_p
            for p0 in range(0, n_groups, BLOCK_P):
                cols = p0 + tl.arange(0, BLOCK_P)
                mask = ok[:, None] & (cols[None, :] < n_groups)
                pm = tl.load(PM + prow + cols[None, :], mask=mask, other=float("-inf"))
                pl = tl.load(PL + prow + cols[None, :], mask=mask, other=0.0)
                m_new = tl.maximum(m, tl.max(pm, 1))
                m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows past n_rows: nothing merged
                l = l * tl.exp(m - m_ref) + tl.sum(pl * tl.exp(pm - m_ref[:, None]), 1)
                m = m_new
                if NEED_SUM:
                    s += tl.sum(tl.load(PS + prow + cols[None, :], mask=mask, other=0.0), 1)
            zt = tl.load(ZT + tok, mask=ok, other=0.0)
        lse = tl.where(ok, m + tl.log(tl.where(ok, l, 1.0)), 0.0)
        loss = (1.0 - eps) * (lse - zt) + eps * (lse - s * inv_v) + lam * lse * lse
        tl.store(LOSS + tok, loss, mask=ok)
        tl.store(LSE + tok, lse, mask=ok)
        weight = tl.full([BLOCK_R], 1.0, tl.float32) * g_scale
    if GRAD:  # last block first: the end of the rows just streamed may still be in L2
        n_v = tl.cdiv(V, BLOCK_V)
        for i in range(0, n_v):
            cols = (n_v - 1 - i) * BLOCK_V + tl.arange(0, BLOCK_V)
            col_ok = cols < V
            mask = ok[:, None] & col_ok[None, :]
            z = tl.load(Z + zrow + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            if STREAM:
                z = _logits_of(z, BIAS + v0, cols, col_ok, softcap, HAS_BIAS, HAS_CAP)
            g = _grad_tile(z, lse, cols[None, :] == tgt[:, None], weight, eps, lam, inv_v, softcap, HAS_CAP)
            tl.store(G + zrow + cols[None, :], g.to(G.dtype.element_ty), mask=mask)


@triton.jit
def _scale_kernel(X, SCALE, n, BLOCK: tl.constexpr):
    """X[:n] *= SCALE[0], the product in float32 and rounded once to X's dtype; when the
    factor is 1 (the usual ``loss.backward()``) nothing is read or written."""
    scale = tl.load(SCALE).to(tl.float32)
    if scale != 1.0:
        step = tl.num_programs(0).to(tl.int64) * BLOCK
        for start in range(tl.program_id(0).to(tl.int64) * BLOCK, n, step):
            offs = start + tl.arange(0, BLOCK)
            ok = offs < n
            x = tl.load(X + offs, mask=ok).to(tl.float32)
            tl.store(X + offs, (x * scale).to(X.dtype.element_ty), mask=ok)


def _weight_stride(token_weight: torch.Tensor) -> int:
    """The kernels' stride between the token weights (``RW``): 0 for one weight shared by
    all tokens ([1]), else the tensor's own, which is 0 too for a grad_output expanded
    from one value (``loss.sum().backward()`` with reduction "none")."""
    return 0 if token_weight.numel() == 1 else token_weight.stride(0)


def _launch_rows(n_rows: int, rcfg: RowConfig, *args, **constexprs) -> None:
    """One launch of ``_rows_kernel`` over ``n_rows`` rows with the tiles of ``rcfg``."""
    fast(_rows_kernel)[(cdiv(n_rows, rcfg.block_r),)](
        *args,
        **constexprs,
        BLOCK_R=rcfg.block_r,
        BLOCK_V=rcfg.block_v,
        num_warps=rcfg.num_warps,
        enable_fp_fusion=False,
    )


def _launch_logits(
    x,
    weight,
    bias,
    tgt,
    row0,
    n_rows,
    v0,
    v1,
    cfg: GemmConfig,
    opts: _Options,
    V: int,
    tiles_per_program: int,
    *,
    stats=None,
    out=None,
    lse=None,
    token_weight=None,
):
    """One launch of ``_logits_kernel`` over the rows ``[0, n_rows)`` of x (kept tokens
    ``row0 + [0, n_rows)``) and vocabulary rows ``[v0, v1)``.  STATS when
    ``stats = (pm, pl, ps, zt)`` is given, ``out`` the float32 logits or None; else
    GRAD (``lse``, ``token_weight`` [K] or [1]), ``out`` the G buffer.  ``out`` has
    whole tiles: at least ``round_up(n_rows, block_m)`` rows and
    ``round_up(v1 - v0, block_n)`` columns."""
    D = x.shape[1]
    n_groups = cdiv(cdiv(v1 - v0, cfg.block_n), tiles_per_program)
    none = torch.empty(1, dtype=torch.float32, device=x.device)  # for the pointers a variant does not use
    pm, pl, ps, zt = stats if stats is not None else (none,) * 4
    stats_out = out if stats is not None and out is not None else none
    fast(_logits_kernel)[(cdiv(n_rows, cfg.block_m) * n_groups,)](
        x,
        weight,
        none if bias is None else bias,
        tgt,
        none if lse is None else lse,
        none if token_weight is None else token_weight,
        stats_out,
        pm,
        pl,
        ps,
        zt,
        out if stats is None else none,
        row0,
        n_rows,
        v0,
        v1,
        D,
        n_groups,
        tiles_per_program,
        x.stride(0),
        weight.stride(0),
        0 if out is None else out.stride(0),
        pm.stride(0),
        0 if token_weight is None else _weight_stride(token_weight),
        **opts.kernel_args(V),
        STATS=stats is not None,
        WRITE_Z=stats is not None and out is not None,
        HAS_BIAS=bias is not None,
        HAS_CAP=opts.softcap is not None,
        NEED_SUM=opts.eps != 0.0,
        BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n,
        BLOCK_K=cfg.block_k,
        GROUP_M=cfg.group_m,
        EVEN_K=D % cfg.block_k == 0,
        DOT_PREC=_dot_precision(x.dtype),
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
        enable_fp_fusion=False,
    )


_SCALE_BLOCK = 4096


def _scale_in_place(grads: list[Optional[torch.Tensor]], grad_output: torch.Tensor) -> None:
    """Each gradient times grad_output, in place (``_scale_kernel``)."""
    scale = grad_output.reshape(1).contiguous()
    for g in grads:
        if g is not None and g.numel() > 0:  # the factor is read on the device: no sync
            blocks = min(cdiv(g.numel(), _SCALE_BLOCK), 4 * _num_sms(g.device))
            fast(_scale_kernel)[(blocks,)](g, scale, g.numel(), BLOCK=_SCALE_BLOCK, num_warps=8)
