"""The 3-product schedule of the Triton linear cross-entropy (the default, reductions "mean" and
"sum"; ``LinearCrossEntropyConfig.products`` 3): ``_three_products``, its token chunks
(``_token_chunks``, ``_three_products_plan``) and the scaling of its gradients by grad_output
in the backward (``_scaled_gradients``).

Liger-Kernel's schedule.  The forward goes over chunks of kept tokens, each against the whole
vocabulary: logits of the chunk by cuBLAS in the input dtype (rounded as ``F.linear`` rounds
them), ``_rows_kernel`` streams each row (``block_step``), stores lse and loss and writes G over
the logits in place, then grad_weight += w G^T H and grad_input rows = w G W (one product over
the whole vocabulary, rounded once; w: the token weight, 1 / kept for "mean").  The backward
multiplies the gradients by grad_output (``_scale_kernel``: no sync, and no work for 1, the
usual ``loss.backward()``).  Each logit is computed once, so grad_weight is summed across token
chunks in its own dtype: one rounding per chunk (about K / chunk of them; 26 at N = 16384,
D = 4096, V = 128256 in bfloat16 by default, 59 with ``peak_fraction=0.05``), each chunk's
product accumulated in float32.  A float32 accumulator instead would take 2 x the bytes of a
bf16 W, over the memory bound.
Memory (``_three_products_plan``): beyond the gradients, one chunk's logits/G (and, with ignored
tokens, its gathered rows of the input, which then take its rows of grad_input before the
scatter) and [N], [K] and [V] vectors (``_fixed_bytes``), all within ``peak_fraction`` of the
gradients' bytes; with every token kept, the first chunks may use the rows of grad_input that
later chunks write instead (larger chunks when V is small).  Every chunk reads W twice (the
logits, grad_input) and reads and writes grad_weight once, so the smaller the chunks the more
that memory traffic weighs against the 6 n D V flops of a chunk of n tokens.

Theorems implemented (over the reals, ``rocq/LinearCrossEntropy/``):
``Ojas.LinearCrossEntropy.ChunkedLse.chunked_lse_chunk`` (each row streamed with ``block_step``),
``Ojas.LinearCrossEntropy.Gradient.ce_backward_correct`` (grad_input = G W, grad_weight = G^T H,
grad_bias = colsum G for any token chunking), ``Ojas.LinearCrossEntropy.Reduction.ce_drop_ignored``
(the ignored tokens removed before any product: the loss, grad_weight and grad_bias over the
kept tokens are those over all tokens, grad_input the kept rows of all tokens'),
``ignored_grad_zero`` (the other rows of grad_input are 0) and ``ce_loss_correct`` ("mean"
divides by the kept count); end to end, ``Ojas.LinearCrossEntropy.EndToEnd.ce_backward_is_gradient``.

Rounding: ``Ojas.LinearCrossEntropy.Float.GradError.ce_dh_error`` and ``ce_dw_error`` bound every
entry of this schedule's grad_input and grad_weight (reductions "mean" / "sum", bfloat16 and
float32, no bias, cap, smoothing or z-loss): G = ``rnd_s(tl.exp(rnd(z - lse)))`` (the target:
minus 1 first) stored in the input dtype from the lse of ``_rows_kernel`` (within its bound,
``Ojas.LinearCrossEntropy.Float.LseLossError.ce_lse_error``), the products accumulated in float32
(within an any-order ``gamma_n``: a premise), the alpha epilogue rounded, grad_weight's running
sum over the token chunks stored in its dtype per chunk; a-posteriori in the sums of the exact
probabilities (``linear_cross_entropy_grad_error_bound``;
tests/verification/test_linear_cross_entropy_error_bound.py uses it as the tolerance).
``Ojas.LinearCrossEntropy.Float.GradPosteriori.ce_gp_dh_error`` / ``ce_gp_dw_error`` (the same
gradient entries) charge the logits' errors weighted by the softmax instead (each entry of G
its own exponent error, ``ce_arg_posteriori``: the lse that the same STREAM/GRAD launch
streams from the same stored logits), tight for confident tokens
(``linear_cross_entropy_grad_posteriori_bound``).  With softcap:
``Ojas.LinearCrossEntropy.Float.SoftcapGradError.sc_dh_error`` / ``sc_dw_error``, built on the chain
factor's ``Ojas.LinearCrossEntropy.Float.SoftcapError.sc_chain_error``.  No theorem covers: the order
of the sums inside cuBLAS / the CPU BLAS (only the any-order bound enters the gradients'
``gd``), TF32 products, bias, label smoothing, z-loss, float16's scaled G,
grad_bias and the scaling by grad_output after the fact (``_scaled_gradients``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from .host import cdiv
from .linear_cross_entropy_args import (
    _FP16_HEADROOM,
    _kept_tokens,
    _Options,
    _reduce,
    _round_down,
    _round_up,
)
from .linear_cross_entropy_config import LinearCrossEntropyConfig
from .linear_cross_entropy_kernels import _launch_rows, _scale_in_place
from .linear_cross_entropy_products import _addmm_into, _mm_into


def _token_chunks(
    K: int, D: int, V: int, limit: int, fixed: Optional[int], in_rows: bool
) -> list[tuple[int, int, bool]]:
    """(first kept token, count, inside) of each token chunk of ``_three_products``:
    ``fixed`` tokens each, or as many as the workspace holds (``limit``), the chunks
    made even.  With ``in_rows`` (every token kept, grad_input wanted) a chunk may put
    its logits/G ("inside") in the rows of grad_input that later chunks write, from
    element ``round_up((first + count) D, 64)`` on: while those rows hold more tokens
    than the workspace, the chunks go there, as large as they fit."""

    def fits(r0: int, n: int) -> bool:
        return in_rows and _round_up((r0 + n) * D, 64) + n * V <= K * D

    plan, r0 = [], 0
    if fixed is not None:
        for r0 in range(0, K, fixed):
            n = min(fixed, K - r0)
            plan.append((r0, n, fits(r0, n)))
        return plan
    while in_rows:
        n = ((K - r0) * D - 64) // (V + D) // 8 * 8
        if n <= limit or not fits(r0, n):
            break
        plan.append((r0, n, True))
        r0 += n
    rest = K - r0
    if rest > 0:
        size = min(limit, _round_up(cdiv(rest, cdiv(rest, limit)), 8))
        plan += [(r, min(size, K - r), False) for r in range(r0, K, size)]
    return plan


# The smallest budget of the workspace (small problems: few chunks rather than the fraction).
_WORKSPACE_FLOOR = 16 << 20
# The CUDA caching allocator rounds every block up to a multiple of 512 bytes.
_BLOCK = 512
# It splits a cached block of its large pool (blocks over 1 MiB) only when more than 1 MiB would
# remain, and counts the block it hands out whole (``max_memory_allocated``): a large block may count
# up to 1 MiB beyond its size.
_LARGE_SLACK = 1 << 20


def _large_slack(*sizes: int) -> int:
    """What the caching allocator may count beyond blocks of ``sizes`` bytes: 1 MiB per large one."""
    return _LARGE_SLACK * sum(size > _LARGE_SLACK for size in sizes)


def _fixed_bytes(N: int, K: int, V: int, need_bias: bool) -> int:
    """Bytes that ``_three_products`` and the backward allocate besides the gradients and the
    chunk workspace, each block rounded up as the CUDA caching allocator rounds it, counting
    those alive at once at the peak (in the token loop, and ``_reduce``'s [N] losses made
    before the workspace is freed): the mask [N] bool, its count, the 1-element placeholder,
    loss and lse [K] float32, and with ignored tokens the kept indices and their targets [K]
    int64 and the [N] losses; with grad_bias, a chunk's colsum [V] float32."""

    def block(nbytes: int) -> int:
        return _round_up(nbytes, _BLOCK)

    fixed = block(N) + block(8) + block(4) + 2 * block(4 * K)
    if K < N:
        fixed += 2 * block(8 * K) + block(4 * N)
    if need_bias:
        fixed += block(4 * V)
    return fixed


def _three_products_plan(
    N: int,
    D: int,
    V: int,
    itemsize: int,
    need: tuple[bool, bool, bool],
    config: LinearCrossEntropyConfig,
    kept: Optional[int] = None,
) -> list[tuple[int, int, bool]]:
    """``_three_products``'s token chunks (``_token_chunks``) over the ``kept`` tokens of N
    (None: all N kept), sized so that all that the forward and backward allocate beyond the
    gradients is at most ``peak_fraction`` of the gradients' bytes (``_WORKSPACE_FLOOR`` at
    least): ``_fixed_bytes``, the caching allocator's slack on large blocks (``_large_slack``: the
    gradients' and the workspace's) and the workspace, which holds a chunk's logits/G and, when some
    token is ignored, the chunk's gathered rows of the input (then its rows of grad_input);
    chunks inside grad_input (no workspace) only when every token is kept."""
    K = N if kept is None else kept
    grads = (N * D * need[0] + V * D * need[1]) * itemsize + 4 * V * need[2]
    budget = max(int(config.peak_fraction * grads), _WORKSPACE_FLOOR) - _fixed_bytes(N, K, V, need[2])
    budget -= 2 * (_BLOCK - 1)  # the workspace's one or two blocks rounded up
    # the allocator's slack on the gradients' blocks and on the workspace's (taken as large)
    budget -= _large_slack(N * D * itemsize * need[0], V * D * itemsize * need[1], 4 * V * need[2])
    budget -= _LARGE_SLACK * (1 if K == N else 2)
    if K == N:
        in_rows = need[0] and config.grad_input_space
        return _token_chunks(N, D, V, _round_down(budget // (V * itemsize), 8), config.token_chunk, in_rows)
    return _token_chunks(K, D, V, _round_down(budget // ((V + D) * itemsize), 8), config.token_chunk, False)


@dataclass
class _Gradients:
    loss: torch.Tensor  # [N] float32, 0 at the ignored tokens
    count: int  # the kept tokens
    grad_input: Optional[torch.Tensor]  # [N, D], input dtype
    grad_weight: Optional[torch.Tensor]  # [V, D], input dtype
    grad_bias: Optional[torch.Tensor]  # [V] float32


def _three_products(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    target: torch.Tensor,
    ignore_index: int,
    reduction: str,
    opts: _Options,
    need: tuple[bool, bool, bool],
    config: LinearCrossEntropyConfig,
) -> _Gradients:
    """Losses of every token (0 at the ignored ones) and the gradients for grad_output 1, in
    one pass over chunks of the kept tokens, each against the whole vocabulary: the chunk's
    logits (cuBLAS, float32 accumulation, rounded to the input dtype as ``F.linear`` rounds
    them), then ``_rows_kernel`` (STREAM, GRAD) streams each row with ``block_step``
    (``Ojas.LinearCrossEntropy.ChunkedLse.chunked_lse_chunk``), stores lse and loss and
    writes the row of G over its logits, then grad_weight += w G^T H, grad_bias += w colsum G
    and grad_input rows = w G W (the whole vocabulary reduced in one product, rounded once;
    ``Ojas.LinearCrossEntropy.Gradient.ce_backward_correct``: any token chunking).  Ignored tokens
    are removed before any product (``Ojas.LinearCrossEntropy.Reduction.ce_drop_ignored``: the loss,
    grad_weight and grad_bias over the kept tokens are those over all tokens, grad_input the
    kept rows of all tokens'; ``ignored_grad_zero``: the other rows are 0): each chunk's rows
    of the input are gathered into the workspace, its rows of grad_input computed over them
    and scattered into a zeroed grad_input, "mean" divides by the kept count
    (``ce_loss_correct``).  grad_weight is added up across token chunks in the input dtype:
    each chunk's product is accumulated in float32 and the sum rounded once per chunk, so a
    bfloat16 grad_weight carries one rounding per chunk, not one in all.  Workspace
    (``_three_products_plan``): one chunk's logits (and gathered rows), all allocations beyond
    the gradients within ``peak_fraction`` of the gradients' bytes (16 MiB at least).
    ``need``: gradients wanted for (input, weight, bias).  Rounding of grad_input and
    grad_weight ("mean" / "sum", bfloat16 / float32, no bias, cap, smoothing, z-loss):
    ``Ojas.LinearCrossEntropy.Float.GradError.ce_dh_error`` / ``ce_dw_error`` (this chunk loop,
    one stored rounding of grad_weight per chunk; cuBLAS's summation order only through an
    any-order premise) and the a-posteriori
    ``Ojas.LinearCrossEntropy.Float.GradPosteriori.ce_gp_dh_error`` / ``ce_gp_dw_error``;
    grad_bias and the rest: no theorem."""
    N, D = x.shape
    V = weight.shape[0]
    need_input, need_weight, need_bias = need
    mask = target != ignore_index
    count = mask.sum()  # read after the host work below, which so overlaps the device's queue
    f32 = dict(dtype=torch.float32, device=x.device)
    grad_weight = torch.empty_like(weight) if need_weight else None  # the first chunk writes it (beta 0)
    grad_bias = torch.zeros(V, **f32) if need_bias else None
    none = torch.empty(1, **f32)
    kept, K, tgt = _kept_tokens(target, mask, count)  # the host sync: the "mean" factor is a float of the products
    grad_input = None
    if need_input:  # the ignored rows stay zeros (ignored_grad_zero)
        grad_input = (torch.empty if kept is None else torch.zeros)(N, D, dtype=x.dtype, device=x.device)
    loss, lse = torch.empty(K, **f32), torch.empty(K, **f32)
    if K == 0:
        if grad_weight is not None:
            grad_weight.zero_()
        return _Gradients(_reduce(loss, kept, N, "none"), 0, grad_input, grad_weight, grad_bias)
    plan = _three_products_plan(N, D, V, x.element_size(), need, config, K)
    rcfg = config.rows
    workspace = max((n for _, n, inside in plan if not inside), default=0)
    z = torch.empty(workspace, V, dtype=x.dtype, device=x.device)  # a chunk's logits, then G over them
    # a chunk's gathered rows of x, then its rows of grad_input
    rows = None if kept is None else torch.empty(workspace, D, dtype=x.dtype, device=x.device)
    # float16 G is stored times a power of two (_FP16_HEADROOM), undone by the products' alpha
    g_scale = _FP16_HEADROOM if x.dtype == torch.float16 else 1.0
    alpha = (1.0 / K if reduction == "mean" else 1.0) / g_scale
    for r0, n, inside in plan:
        x_chunk = x[r0 : r0 + n] if kept is None else torch.index_select(x, 0, kept[r0 : r0 + n], out=rows[:n])
        if inside:
            start = _round_up((r0 + n) * D, 64)
            g = grad_input.view(-1)[start : start + n * V].view(n, V)
        else:
            g = z[:n]
        _mm_into(g, x_chunk, weight.t())
        _launch_rows(
            n,
            rcfg,
            none,
            none,
            none,
            none,
            g,
            g,
            tgt,
            loss,
            lse,
            none if bias is None else bias,
            none,
            r0,
            n,
            1,
            V,
            0,
            0,
            V,
            0,
            g_scale,
            **opts.kernel_args(V),
            HAS_LSE=False,
            GRAD=True,
            STREAM=True,
            NEED_SUM=opts.eps != 0.0,
            HAS_BIAS=bias is not None,
            HAS_CAP=opts.softcap is not None,
            BLOCK_P=16,
        )
        if need_weight:
            _addmm_into(grad_weight, g.t(), x_chunk, alpha, 1.0 if r0 > 0 else 0.0)
        if need_bias:
            grad_bias.add_(g.sum(0, dtype=torch.float32), alpha=alpha)
        if need_input:
            if kept is None:
                _addmm_into(grad_input[r0 : r0 + n], g, weight, alpha, 0.0)
            else:  # over the gathered rows, read for the last time above
                _addmm_into(x_chunk, g, weight, alpha, 0.0)
                grad_input.index_copy_(0, kept[r0 : r0 + n], x_chunk)
    return _Gradients(_reduce(loss, kept, N, "none"), K, grad_input, grad_weight, grad_bias)


def _scaled_gradients(
    grads: list[Optional[torch.Tensor]],
    grad_output: torch.Tensor,
    leaves: tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]],
) -> list[Optional[torch.Tensor]]:
    """``_three_products``'s gradients (for grad_output 1) times grad_output, in place
    (``_scale_kernel``: skipped when grad_output is 1), in the shape and dtype of
    ``leaves`` (input, weight, bias)."""
    _scale_in_place(grads, grad_output)
    return [None if g is None else g.view(t.shape).to(t.dtype) for g, t in zip(grads, leaves)]
