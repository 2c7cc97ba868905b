"""The 4-product schedule of the Triton linear cross-entropy (reduction "none", whose per-token
grad_output must weight G before the token sum, ``products=4``, and the head updated inside the
backward): its forward ``_forward`` (also ``linear_cross_entropy_forward``'s one GEMM pass) and
its backward ``_four_products_backward`` with the vocabulary slabs of ``_backward_weight``.

Every gradient is reduced inside one product and rounded once, at the price of computing the
logits twice.  *Forward*, token chunks x the whole vocabulary: ``_logits_kernel`` (STATS)
computes logit tiles (float32 accumulation), streams each program's vocabulary tiles through
``block_step`` and writes a partial state (m, l, sum z) per token, the target logit, and, when
grad_input is needed, the float32 logits of the chunk; ``_rows_kernel`` merges the partial
states (``merge_chunks_lse``), finalises lse and the loss and writes the chunk's rows of G with
token weight 1; a cuBLAS product G_chunk W gives the chunk's rows of grad_input, multiplied by
the token weight and rounded once, then by grad_output in the backward.  *Backward*,
vocabulary slabs x all kept tokens: ``_logits_kernel`` (GRAD) recomputes the slab's logits and
writes G (token weights included); grad_weight[slab] = G_slab^T H is one cuBLAS product over
all the kept tokens; grad_bias[slab] = colsum G_slab.  Workspace: the forward chunk (float32
logits + G rows, at most grad_weight's bytes) and the backward slab (G, within
``workspace_fraction`` of the gradients' bytes less the kept rows of H gathered for the
product, 16 MiB at least).

Theorems implemented (over the reals, ``rocq/LinearCrossEntropy/``):
``Ojas.LinearCrossEntropy.ChunkedLse.merge_chunks_lse`` (the groups' states merged),
``Ojas.LinearCrossEntropy.Loss.token_forward_correct`` (the loss),
``Ojas.LinearCrossEntropy.Gradient.ce_backward_correct`` (grad_input = G W over the token chunks,
grad_weight = G^T H and grad_bias = colsum G over the vocabulary slabs),
``Ojas.LinearCrossEntropy.Reduction.ce_drop_ignored`` and ``ignored_grad_zero`` (the ignored tokens
removed before any product, their rows of grad_input 0); end to end,
``Ojas.LinearCrossEntropy.EndToEnd.ce_backward_is_gradient`` (for "none", the gradients over the kept
tokens only: ``ce_drop_ignored`` is for "sum" / "mean").  With the head updated inside the
backward (``_backward_weight``'s ``step``):
``Ojas.InBackward.ChunkedHead.chunked_head_dh_first_code_eq_standard``.

Rounding: ``Ojas.LinearCrossEntropy.Float.LseLossError.ce_lse_error_two_level`` (the forward's lse,
two levels: the programs' groups of tiles, then their merge; with a cap
``Ojas.LinearCrossEntropy.Float.SoftcapError.ce_lse_error_two_level_softcap``).
``Ojas.LinearCrossEntropy.Float.WeightedGradError.ce_dw4_error`` bounds every entry of this
schedule's grad_weight (G = ``rnd_s(rnd(g w_n))``, the float32 token weight inside G, from the
recomputed float32 logits and the merged lse; one product over all kept tokens rounded once)
and ``ce_dh4_error`` its grad_input (the forward's row times grad_output in float32, rounded
once) (``linear_cross_entropy_weighted_dw_error_bound`` / ``_dh_error_bound``).  No theorem
covers: the gradients with softcap, bias, label smoothing, z-loss, the order of the sums inside
cuBLAS and the Triton dots, TF32 products, float16's scaled G, grad_bias, and
the ``step`` path in floating point (each row's gradient there is this schedule's, rounded as
without ``step``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Optional

import torch

from .host import cdiv, next_power_of_2
from .linear_cross_entropy_args import (
    _FP16_HEADROOM,
    _kept_tokens,
    _num_sms,
    _Options,
    _prepare,
    _round_down,
    _round_up,
)
from .linear_cross_entropy_config import LinearCrossEntropyConfig
from .linear_cross_entropy_kernels import _launch_logits, _launch_rows, _weight_stride
from .linear_cross_entropy_products import _mm_f32, _mm_into


@functools.lru_cache(maxsize=256)
def _tiles_per_program(num_m: int, n_tiles: int, sms: int) -> int:
    """Vocabulary tiles per forward program: the fewest waves x tiles (one program per
    multiprocessor at a time; a last wave that is nearly empty costs a whole one),
    and among counts within 2 % of that the largest (fewer partial states)."""
    cost = {t: cdiv(num_m * cdiv(n_tiles, t), sms) * t for t in range(1, n_tiles + 1)}
    best = min(cost.values())
    return max(t for t, c in cost.items() if c <= 1.02 * best)


@dataclass
class _Forward:
    loss: torch.Tensor  # [K] float32, the kept tokens'
    lse: torch.Tensor  # [K] float32
    kept: Optional[torch.Tensor]  # [K] int64 indices of the kept tokens, None when all are kept
    tgt: torch.Tensor  # [K] targets of the kept tokens
    grad_input: Optional[torch.Tensor]  # [N, D] in the input dtype, token weights applied, or None


def _forward(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    target: torch.Tensor,
    ignore_index: int,
    reduction: str,
    opts: _Options,
    need_grad_input: bool,
    config: LinearCrossEntropyConfig,
) -> _Forward:
    """Losses and lse of the kept tokens, and grad_input when asked (module docstring)."""
    N, D = x.shape
    V = weight.shape[0]
    mask = target != ignore_index
    kept, K, tgt = _kept_tokens(target, mask, mask.sum())
    f32 = dict(dtype=torch.float32, device=x.device)
    loss, lse = torch.empty(K, **f32), torch.empty(K, **f32)
    grad_input = None
    if need_grad_input:
        grad_input = (torch.empty if kept is None else torch.zeros)(N, D, dtype=x.dtype, device=x.device)
    if K == 0:
        return _Forward(loss, lse, kept, tgt, grad_input)

    cfg, rcfg = config.fwd, config.rows
    cublas = need_grad_input and config.fwd_logits == "cublas"
    v_pad = V if cublas else _round_up(V, cfg.block_n)
    itemsize = x.element_size()
    if config.token_chunk is not None:
        chunk = min(config.token_chunk, K)
    elif need_grad_input:  # a chunk's float32 logits, G rows, gathered rows and grad_input rows: grad_weight's bytes
        row_bytes = v_pad * (4 + itemsize) + D * (4 + itemsize)
        chunk = min(_round_down(max(V * D * itemsize, 64 << 20) // row_bytes, cfg.block_m), K)
    else:
        chunk = K
    n_tiles = cdiv(V, cfg.block_n)
    tiles_per_program = config.tiles_per_program or _tiles_per_program(
        cdiv(chunk, cfg.block_m), n_tiles, _num_sms(x.device)
    )
    n_groups = cdiv(n_tiles, tiles_per_program)
    pm, pl, ps = (torch.empty(chunk, n_groups, **f32) for _ in range(3))
    zt = torch.empty(K, **f32)
    none = torch.empty(1, **f32)
    z = g = none
    if need_grad_input:
        rows = chunk if cublas else _round_up(chunk, cfg.block_m)
        z = torch.empty(rows, v_pad, **f32)
        g = torch.empty(rows, v_pad, dtype=x.dtype, device=x.device)
    g_scale = _FP16_HEADROOM if x.dtype == torch.float16 else 1.0
    token_weight = (1.0 / K if reduction == "mean" else 1.0) / g_scale
    for r0 in range(0, K, chunk):
        n = min(chunk, K - r0)
        x_chunk = x[r0 : r0 + n] if kept is None else x.index_select(0, kept[r0 : r0 + n])
        if cublas:  # raw logits; bias and cap applied by _rows_kernel
            _mm_into(z[:n], x_chunk, weight.t())
        else:
            _launch_logits(
                x_chunk,
                weight,
                bias,
                tgt,
                r0,
                n,
                0,
                V,
                cfg,
                opts,
                V,
                tiles_per_program,
                stats=(pm, pl, ps, zt),
                out=z if need_grad_input else None,
            )
        _launch_rows(
            n,
            rcfg,
            pm,
            pl,
            ps,
            zt,
            z,
            g,
            tgt,
            loss,
            lse,
            none if bias is None else bias,
            none,
            r0,
            n,
            n_groups,
            v_pad,
            0,
            pm.stride(0),
            z.stride(0),
            0,
            g_scale,
            **opts.kernel_args(V),
            HAS_LSE=False,
            GRAD=need_grad_input,
            STREAM=cublas,
            NEED_SUM=opts.eps != 0.0,
            HAS_BIAS=cublas and bias is not None,
            HAS_CAP=opts.softcap is not None,
            BLOCK_P=min(rcfg.block_p, next_power_of_2(n_groups)),
        )
        if need_grad_input:
            rows_dx = _mm_f32(g[:n, :V], weight)
            if token_weight != 1.0:
                rows_dx *= token_weight
            if kept is None:
                grad_input[r0 : r0 + n] = rows_dx
            else:
                grad_input.index_copy_(0, kept[r0 : r0 + n], rows_dx.to(x.dtype))
    return _Forward(loss, lse, kept, tgt, grad_input)


def _backward_weight(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    kept: Optional[torch.Tensor],
    tgt: torch.Tensor,
    lse: torch.Tensor,
    token_weight: torch.Tensor,
    need_weight: bool,
    need_bias: bool,
    opts: _Options,
    config: LinearCrossEntropyConfig,
    step=None,
) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
    """grad_weight and grad_bias (float32): per vocabulary slab, G of all kept tokens
    (``_logits_kernel`` GRAD), then G^T H and colsum G.  ``token_weight``: [K], or
    [1] for one weight shared by all kept tokens, float32.  Rounding of grad_weight (bfloat16 /
    float32, no bias, cap, smoothing, z-loss): ``Ojas.LinearCrossEntropy.Float.WeightedGradError.ce_dw4_error``;
    grad_bias, float16's scale and the ``step`` path: no theorem.

    ``step`` (the head updated inside the backward, ``InBackwardOptimizer(head_weight=...)``;
    no bias): instead of grad_weight, each slab's rows of it (its whole gradient, over all kept
    tokens) go into a slab-sized buffer in the weight's dtype, then ``step(v0, v1, rows)``
    updates W[v0:v1]; the slab's logits were recomputed from those rows before it, and later
    slabs read only their own rows
    (Ojas.InBackward.ChunkedHead.chunked_head_dh_first_code_eq_standard); returns (None, None).
    The same products into another buffer: each row rounded as without ``step``. With no kept
    token the gradient is zero and the plain-SGD step w + (-lr) 0 = w changes no bit (-0.0
    included): nothing is called."""
    N, D = x.shape
    V = weight.shape[0]
    K = lse.numel()
    new = torch.zeros if lse.numel() == 0 else torch.empty  # every slab writes its rows
    grad_weight = new(weight.shape, dtype=weight.dtype, device=x.device) if need_weight and step is None else None
    grad_bias = new(V, dtype=torch.float32, device=x.device) if need_bias else None
    if K == 0:
        return grad_weight, grad_bias
    hk = x if kept is None else x.index_select(0, kept)
    cfg = config.bwd
    itemsize = x.element_size()
    # float16 G: the token weights (1 / K for "mean") would push its entries into
    # subnormals; they are scaled by a power of two near 256 / max|w|, undone in float32.
    half = x.dtype == torch.float16
    if half:
        top = token_weight.abs().max()
        scale = _FP16_HEADROOM * torch.where(top > 0, torch.exp2(-torch.floor(torch.log2(top))), torch.ones_like(top))
        token_weight = token_weight * scale
    cublas = config.bwd_logits == "cublas"
    if config.vocab_slab is not None:
        slab = min(_round_up(config.vocab_slab, cfg.block_n), _round_up(V, cfg.block_n))
    else:
        grads = (N * D + (V * D if need_weight else 0)) * itemsize
        gathered = 0 if kept is None else K * D * itemsize
        budget = max(int(config.workspace_fraction * grads) - gathered, 16 << 20)
        per_column = (K * (4 + itemsize) if cublas else _round_up(K, cfg.block_m) * itemsize) + (D * 4 if half else 0)
        slab = min(_round_down(budget // per_column, cfg.block_n), _round_up(V, cfg.block_n))
    if cublas:  # float32 logits of the slab from cuBLAS, G from them by _rows_kernel
        z_flat = torch.empty(K * slab, dtype=torch.float32, device=x.device)
        g_flat = torch.empty(K * slab, dtype=x.dtype, device=x.device)
        rcfg = config.rows
        none = torch.empty(1, dtype=torch.float32, device=x.device)
    else:
        g = torch.empty(_round_up(K, cfg.block_m), slab, dtype=x.dtype, device=x.device)
    rows_buf = torch.empty(slab, D, dtype=weight.dtype, device=x.device) if step is not None else None
    for v0 in range(0, V, slab):
        v1 = min(v0 + slab, V)
        if cublas:
            width = v1 - v0
            z, gs = z_flat[: K * width].view(K, width), g_flat[: K * width].view(K, width)
            _mm_into(z, hk, weight[v0:v1].t())
            _launch_rows(
                K,
                rcfg,
                none,
                none,
                none,
                none,
                z,
                gs,
                tgt,
                none,
                lse,
                none if bias is None else bias,
                token_weight,
                0,
                K,
                1,
                width,
                v0,
                0,
                width,
                _weight_stride(token_weight),
                1.0,
                **opts.kernel_args(V),
                HAS_LSE=True,
                GRAD=True,
                STREAM=True,
                NEED_SUM=False,
                HAS_BIAS=bias is not None,
                HAS_CAP=opts.softcap is not None,
                BLOCK_P=16,
            )
        else:
            _launch_logits(
                hk, weight, bias, tgt, 0, K, v0, v1, cfg, opts, V, 1, out=g, lse=lse, token_weight=token_weight
            )
            gs = g[:K, : v1 - v0]
        if step is not None:
            rows = rows_buf[: v1 - v0]
            if half:
                rows.copy_(_mm_f32(gs.t(), hk).div_(scale))
            else:
                _mm_into(rows, gs.t(), hk)
            step(v0, v1, rows)
        elif grad_weight is not None:
            if half:
                grad_weight[v0:v1] = _mm_f32(gs.t(), hk).div_(scale)
            else:
                _mm_into(grad_weight[v0:v1], gs.t(), hk)
        if grad_bias is not None:
            colsum = gs.sum(0, dtype=torch.float32)
            grad_bias[v0:v1] = colsum / scale if half else colsum
    return grad_weight, grad_bias


def _four_products_backward(
    grad_output: torch.Tensor,
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    target: torch.Tensor,
    kept: Optional[torch.Tensor],
    tgt: torch.Tensor,
    lse: torch.Tensor,
    grad_input: Optional[torch.Tensor],
    need: tuple[bool, ...],
    reduction: str,
    opts: _Options,
    config: LinearCrossEntropyConfig,
    step=None,
) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor], Optional[torch.Tensor]]:
    """The backward of the 4-product schedule (``_forward``'s kept tokens, their targets and
    lse): the forward's grad_input scaled by grad_output in place, grad_weight and grad_bias
    by vocabulary slabs (``_backward_weight``), each when ``need`` asks for it."""
    K = lse.numel()
    if reduction == "none":
        g_all = grad_output.reshape(-1).float()
        token_weight = g_all if kept is None else g_all.index_select(0, kept)
        if kept is not None:  # ignored rows of grad_input are zeros: keep them so whatever grad_output says
            g_all = torch.zeros_like(g_all).index_copy_(0, kept, token_weight)
        g_rows = g_all[:, None]
    else:
        g_rows = grad_output.float().reshape(1)
        token_weight = g_rows / K if reduction == "mean" and K > 0 else g_rows
    grad_weight = grad_bias = None
    if need[0]:
        grad_input = grad_input.mul_(g_rows).view(input.shape)
    need_weight = need[1]
    need_bias = bias is not None and need[2]
    if need_weight or need_bias:
        x, w, b, _ = _prepare(input, weight, target, bias)
        grad_weight, gb = _backward_weight(
            x, w, b, kept, tgt, lse, token_weight, need_weight, need_bias, opts, config, step
        )
        grad_bias = None if gb is None else gb.to(bias.dtype)
    return grad_input if need[0] else None, grad_weight, grad_bias


def _all_lse(fw: _Forward, n_tokens: int) -> torch.Tensor:
    """The lse of every token, NaN at the ignored ones."""
    return fw.lse if fw.kept is None else fw.lse.new_full((n_tokens,), math.nan).index_copy_(0, fw.kept, fw.lse)
