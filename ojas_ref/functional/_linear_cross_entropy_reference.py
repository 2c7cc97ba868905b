"""The PyTorch reference of :func:`ojas_ref.linear_cross_entropy`: the chunk loop of the Coq spec
(``ce_forward`` / ``ce_output`` / ``ce_backward`` of ``rocq/LinearCrossEntropy/Definitions.v``) over the
kept tokens, and its autograd Function :class:`_LinearCrossEntropy`.

The theorems each piece implements are listed in the docstring of
``ojas_ref/functional/linear_cross_entropy.py`` (the public function, its checks and its dispatch
to the Triton kernel) and cited beside the code below; the variant that updates the head inside the
backward (:func:`_backward_kept_update_head`) is driven by the link of
``ojas_ref/functional/_linear_cross_entropy_head.py``."""

from __future__ import annotations

import math
from typing import Any, Optional, Union

import torch
from torch import Tensor

from ojas_ref.functional.autocast import autocast_off
from ojas_ref.functional.dispatch import refuse_double_backward


# --------------------------------------------------------------------------
# One block of logits, the vocabulary step, the per-token loss, the reduction
# --------------------------------------------------------------------------


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _chunk_logits(
    x: Tensor, weight: Tensor, bias: Optional[Tensor], v0: int, v1: int, softcap: Optional[float]
) -> Tensor:
    """``chunk_logits`` of rocq/LinearCrossEntropy/Definitions.v for a block of tokens:
    z = softcap(x W[v0:v1]^T + b[v0:v1]), softcap(r) = c tanh(r / c) (identity without c);
    [tokens, v1 - v0] in x's (compute) dtype."""
    w = weight[v0:v1].to(x.dtype)
    z = x @ w.T if bias is None else torch.addmm(bias[v0:v1].to(x.dtype), x, w.T)
    if softcap is not None:
        z = torch.tanh(z / softcap) * softcap
    return z


def _lse_block_step(m: Tensor, l: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
    """The log-sum-exp part of one vocabulary chunk: ``block_step`` of
    rocq/Attention/OnlineSoftmax.v on ``lse_keys`` (keys (Some z_v, []), empty value rows).

        m' = max(m, max_v z_v)
        l' = exp(m - m') * l + sum_v exp(z_v - m')

    The start state (Coq ``None``) is m = -inf, l = 0: the first chunk gives
    exp(-inf) * 0 + sum_v exp(z_v - m') (the ``None`` branch). m, l: [tokens];
    z: [tokens, vocab chunk] of finite logits.
    """
    m_new = torch.maximum(m, z.amax(dim=1))
    l_new = torch.exp(m - m_new) * l + torch.exp(z - m_new.unsqueeze(1)).sum(dim=1)
    return m_new, l_new


def _target_logit(z: Tensor, target: Tensor, v0: int) -> Tensor:
    """``target_logit``: z[n, target_n - v0] for the tokens whose target lies in the chunk
    starting at v0, 0 for the others."""
    local = target - v0
    inside = (local >= 0) & (local < z.shape[1])
    picked = z.gather(1, local.clamp(0, z.shape[1] - 1).unsqueeze(1)).squeeze(1)
    return torch.where(inside, picked, torch.zeros_like(picked))


class _Targets:
    """The targets of a block of kept tokens and the class weights w ([V], None for all 1).

    Class indices ([T] int64, the spec's targets) or class probabilities ([T, V] in the
    compute dtype; outside the spec). Both are a target row c_n per token: c_n = w_t e_t
    for class t, c_n = p_n * w for probabilities p_n; the loss below needs its mass
    ``mass`` s_n = sum_v c_nv (w_t; p_n . w; 1 for a class without weights) and, per
    vocabulary chunk, sum_v c_nv z_nv (``term``: the spec's ``target_logit`` for a class,
    to be scaled by w_t) and the chunk of c itself (``block``, for the gradient).
    ``smooth_mass`` is (1/V) sum_v w_v, the mass of the uniform part of label smoothing
    (1 without weights)."""

    def __init__(self, target: Tensor, weight: Optional[Tensor], smooth_mass: Union[Tensor, float]) -> None:
        self.target, self.weight, self.smooth_mass = target, weight, smooth_mass
        self.probs = target.is_floating_point()
        if self.probs:
            self.mass = target.sum(1) if weight is None else target @ weight
        else:
            self.mass = 1.0 if weight is None else weight[target]

    def rows(self, t0: int, t1: int) -> "_Targets":
        return _Targets(self.target[t0:t1], self.weight, self.smooth_mass)

    def weights(self, v0: int, v1: int) -> Union[Tensor, float]:
        """w[v0:v1] as a row, 1 without class weights."""
        return 1.0 if self.weight is None else self.weight[v0:v1]

    def block(self, v0: int, v1: int) -> Tensor:
        """c[:, v0:v1] of probability targets."""
        return self.target[:, v0:v1] * self.weights(v0, v1)

    def term(self, z: Tensor, v0: int) -> Tensor:
        """The chunk's part of the target term: ``target_logit`` (class indices), or
        sum_v c_nv z_nv (probabilities)."""
        if self.probs:
            return (z * self.block(v0, v0 + z.shape[1])).sum(dim=1)
        return _target_logit(z, self.target, v0)


_TokState = tuple[Tensor, Tensor, Tensor, Tensor]  # (m, l, z_t, z_sum) of a block of tokens


def _tok_init(x: Tensor) -> _TokState:
    """``tok_init`` for the tokens of x: lse state None (m = -inf, l = 0), z_t = z_sum = 0."""
    n = x.shape[0]
    return x.new_full((n,), -math.inf), x.new_zeros(n), x.new_zeros(n), x.new_zeros(n)


def _vocab_step(st: _TokState, z: Tensor, tg: _Targets, v0: int, need_sum: bool) -> _TokState:
    """``vocab_step`` of rocq/LinearCrossEntropy/Definitions.v: the lse state through
    ``block_step``, z_t += ``target_logit`` (``_Targets.term``), z_sum += sum_v w_v z_v
    (the spec's sum_v z_v without class weights; only needed, and only computed, for
    label smoothing)."""
    m, l, z_t, z_sum = st
    m, l = _lse_block_step(m, l, z)
    z_t = z_t + tg.term(z, v0)
    if need_sum:
        z_sum = z_sum + (z.sum(dim=1) if tg.weight is None else z @ tg.weights(v0, v0 + z.shape[1]))
    return m, l, z_t, z_sum


def _token_loss(V: int, eps: float, lam: float, st: _TokState, tg: _Targets) -> tuple[Tensor, Tensor]:
    """``token_loss``: lse = m + ln l (``finalize``) and
    (1 - eps) (lse - z_t) + eps (lse - z_sum / V) + lam lse^2, without class weights and
    with class indices. With class weights w it is torch's weighted, smoothed loss
    (1 - eps) w_t (lse - z_t) + (eps / V) sum_v w_v (lse - z_v); with probability targets
    p it is sum_v c_v (lse - z_v) for the smoothed, weighted target row
    c = ((1 - eps) p + eps / V) * w, i.e. (1 - eps) (s lse - sum_v p_v w_v z_v) + the same
    smoothing term (s = p . w): F.cross_entropy's formulas (outside the spec). The z-loss
    term is left out when lam = 0 (over the reals it is 0 then, so this is still
    ``token_loss``), not computed as 0 * lse^2: lse^2 overflows to inf for |lse| above
    about 1.8e19 in float32 (finite logits), and 0 * inf is NaN."""
    m, l, z_t, z_sum = st
    lse = m + torch.log(l)
    target_part = tg.mass * lse - z_t if tg.probs else tg.mass * (lse - z_t)
    loss = (1.0 - eps) * target_part + eps * (tg.smooth_mass * lse - z_sum / V)
    return (loss + lam * (lse * lse) if lam != 0.0 else loss), lse


def _dlogit(z: Tensor, lse: Tensor, tg: _Targets, v0: int, V: int, eps: float, lam: float) -> Tensor:
    """``dlogit``: d loss_n / d z_nv = (1 + 2 lam lse_n) exp(z_nv - lse_n) - eps / V
    - (1 - eps) [v = t_n], for the vocabulary chunk starting at v0 (lse: [tokens, 1]);
    with class weights or probability targets, the derivative of ``_token_loss``'s loss,
    ((1 - eps) s_n + eps smooth_mass + 2 lam lse_n) exp(z_nv - lse_n) - (eps / V) w_v
    - (1 - eps) c_nv, which is the spec's when s = smooth_mass = w_v = 1 and c = e_t."""
    v1 = v0 + z.shape[1]
    mass = tg.mass.unsqueeze(1) if isinstance(tg.mass, Tensor) else tg.mass
    coefficient = (1.0 - eps) * mass + eps * tg.smooth_mass + 2.0 * lam * lse
    g = coefficient * torch.exp(z - lse) - eps / V * tg.weights(v0, v1)
    if tg.probs:
        return g - (1.0 - eps) * tg.block(v0, v1)
    local = tg.target - v0
    rows = ((local >= 0) & (local < z.shape[1])).nonzero().squeeze(1)
    g[rows, local[rows]] -= (1.0 - eps) * (mass if tg.weight is None else mass[rows, 0])
    return g


def _reduce(loss: Tensor, n_kept: int, denominator: Union[Tensor, int], reduction: str) -> Tensor:
    """``ce_output`` for "sum" / "mean": the sum of the per-token losses (0 at ignored
    tokens), divided for "mean" by ``denominator`` (the number of kept tokens; with class
    weights and class indices, the sum of the kept targets' weights, as torch divides);
    0 when no token is kept (the guard of the spec's ``ce_output``,
    Ojas.LinearCrossEntropy.Reduction.ce_mean_all_ignored)."""
    total = loss.sum()
    if reduction == "sum" or n_kept == 0:
        return total
    return total / denominator


def _mean_scale(n_kept: int, denominator: Union[Tensor, int]) -> Union[Tensor, float]:
    """``token_weight`` for "mean" per unit of upstream gradient: 1 / denominator (0 with
    no kept token)."""
    return 1.0 / denominator if n_kept > 0 else 0.0


def _mean_denominator(tg: _Targets) -> Union[Tensor, int]:
    """What "mean" divides by, as F.cross_entropy does: the sum of the kept targets'
    class weights for class indices with ``weight``, else the number of kept tokens (for
    probability targets too, weighted or not)."""
    if tg.weight is not None and not tg.probs:
        return tg.mass.sum()
    return tg.target.shape[0]


# --------------------------------------------------------------------------
# Forward and backward over the kept tokens
# --------------------------------------------------------------------------


def _forward_kept(
    x: Tensor,
    weight: Tensor,
    bias: Optional[Tensor],
    tg: _Targets,
    eps: float,
    lam: float,
    softcap: Optional[float],
    token_chunk: int,
    vocab_chunk: int,
) -> tuple[Tensor, Tensor]:
    """``ce_forward`` restricted to the kept tokens (x [K, D] in the compute dtype): per
    token chunk, ``vocab_loop`` over the vocabulary chunks, then ``token_loss``. One
    [token_chunk, vocab_chunk] block of logits exists at a time. Returns (loss, lse), [K]."""
    K, V = x.shape[0], weight.shape[0]
    loss = x.new_empty(K)
    lse = x.new_empty(K)
    for t0 in range(0, K, token_chunk):
        t1 = min(t0 + token_chunk, K)
        x_t, tg_t = x[t0:t1], tg.rows(t0, t1)
        st = _tok_init(x_t)
        for v0 in range(0, V, vocab_chunk):
            z = _chunk_logits(x_t, weight, bias, v0, min(v0 + vocab_chunk, V), softcap)
            st = _vocab_step(st, z, tg_t, v0, eps != 0.0)
        loss[t0:t1], lse[t0:t1] = _token_loss(V, eps, lam, st, tg_t)
    return loss, lse


def _block_grad(
    x_t: Tensor,
    weight: Tensor,
    bias: Optional[Tensor],
    tg_t: _Targets,
    lse_t: Tensor,
    g_t: Tensor,
    t0: int,
    v0: int,
    v1: int,
    V: int,
    eps: float,
    lam: float,
    softcap: Optional[float],
    grad_p: Optional[Tensor],
) -> Tensor:
    """G of one block (tokens t0.., vocabulary [v0, v1)), its logits recomputed:
    G_nv = g_n * ``dlogit`` * softcap'(r_nv) (``grad_entry``; softcap'(r) = 1 - (z / c)^2); with
    probability targets it also writes the block of ``grad_p``, g_n (1 - eps) w_v (lse_n - z_nv)."""
    z = _chunk_logits(x_t, weight, bias, v0, v1, softcap)
    if grad_p is not None:
        grad_p[t0 : t0 + x_t.shape[0], v0:v1] = g_t * (1.0 - eps) * tg_t.weights(v0, v1) * (lse_t - z)
    G = _dlogit(z, lse_t, tg_t, v0, V, eps, lam) * g_t
    if softcap is not None:
        G *= 1.0 - (z / softcap) ** 2
    return G


def _backward_kept(
    x: Tensor,
    weight: Tensor,
    bias: Optional[Tensor],
    tg: _Targets,
    lse: Tensor,
    g: Tensor,
    eps: float,
    lam: float,
    softcap: Optional[float],
    token_chunk: int,
    vocab_chunk: int,
    need_weight: bool,
    need_bias: bool,
    need_target: bool,
) -> tuple[Tensor, Optional[Tensor], Optional[Tensor], Optional[Tensor]]:
    """``ce_backward`` restricted to the kept tokens, logits recomputed block by block.

    G_nv = g_n * ``dlogit`` * softcap'(r_nv) (``grad_entry``, g_n the ``token_weight``,
    softcap'(r) = 1 - tanh(r / c)^2 = 1 - (z / c)^2); per token chunk and vocabulary
    chunk (``vocab_bwd_step``): grad x += G_blk W_blk, grad W[vc] += G_blk^T x_blk,
    grad b[vc] += column sums of G_blk (= G W, G^T H, colsum G:
    Ojas.LinearCrossEntropy.Gradient.ce_backward_correct). With probability targets and
    ``need_target``, also grad p_nv = g_n (1 - eps) w_v (lse_n - z_nv) (outside the spec).
    Returns them in the compute dtype (None where not needed).
    """
    K, V = x.shape[0], weight.shape[0]
    grad_x = torch.zeros_like(x)
    grad_w = x.new_zeros(weight.shape) if need_weight else None
    grad_b = x.new_zeros(V) if need_bias else None
    grad_p = torch.zeros_like(tg.target) if need_target else None
    for t0 in range(0, K, token_chunk):
        t1 = min(t0 + token_chunk, K)
        x_t, tg_t, g_t = x[t0:t1], tg.rows(t0, t1), g[t0:t1].unsqueeze(1)
        lse_t = lse[t0:t1].unsqueeze(1)
        for v0 in range(0, V, vocab_chunk):
            v1 = min(v0 + vocab_chunk, V)
            G = _block_grad(x_t, weight, bias, tg_t, lse_t, g_t, t0, v0, v1, V, eps, lam, softcap, grad_p)
            grad_x[t0:t1] += G @ weight[v0:v1].to(x.dtype)
            if grad_w is not None:
                grad_w[v0:v1] += G.T @ x_t
            if grad_b is not None:
                grad_b[v0:v1] += G.sum(dim=0)
    return grad_x, grad_w, grad_b, grad_p


def _backward_kept_update_head(
    x: Tensor,
    weight: Tensor,
    tg: _Targets,
    lse: Tensor,
    g: Tensor,
    eps: float,
    lam: float,
    softcap: Optional[float],
    token_chunk: int,
    vocab_chunk: int,
    need_target: bool,
    step: Any,
) -> tuple[Tensor, Optional[Tensor]]:
    """:func:`_backward_kept` without a bias and with the head updated in place, chunk by
    chunk (``InBackwardOptimizer(head_weight=...)``): the vocabulary loop outside, the token
    loop inside. For each vocabulary chunk [v0, v1): over all token chunks, the logits block
    from the rows W[v0:v1] not yet updated, G as in :func:`_backward_kept`,
    grad x[t] += G W[v0:v1], dW += G^T x[t]; then ``step(v0, v1, dW)`` updates W[v0:v1] and
    dW is dropped. Only one [vocab_chunk, D] gradient exists, never the [V, D] one.

    The loop of Ojas.InBackward.ChunkedHead.chunked_head_code_eq_standard
    (``head_events``, the chunks of ``vocab_chunk``): every row is updated once, after its whole gradient, and nothing reads
    it afterwards (the later chunks read their own rows, the lse comes from the forward), so it
    is backward then the step (``chunked_head_code_eq_standard``,
    ``chunked_head_sgd_eq_standard``). The gradient itself is ``ce_backward``'s
    (Ojas.LinearCrossEntropy.Gradient.ce_backward_correct: any chunk sizes and orders give
    G W, G^T H). In floats: each entry of grad x and of dW gets the same additions in the same
    order as in :func:`_backward_kept` (grad x[t] over the vocabulary chunks in order, dW[v]
    over the token chunks in order, from zero), so the same bits (tested). Returns (grad x,
    grad p) in the compute dtype."""
    K, V = x.shape[0], weight.shape[0]
    grad_x = torch.zeros_like(x)
    grad_p = torch.zeros_like(tg.target) if need_target else None
    for v0 in range(0, V, vocab_chunk):
        v1 = min(v0 + vocab_chunk, V)
        w = weight[v0:v1].to(x.dtype)  # the rows before their update (a view in the compute dtype)
        dw = x.new_zeros((v1 - v0, weight.shape[1]))
        for t0 in range(0, K, token_chunk):
            t1 = min(t0 + token_chunk, K)
            x_t, tg_t, g_t = x[t0:t1], tg.rows(t0, t1), g[t0:t1].unsqueeze(1)
            lse_t = lse[t0:t1].unsqueeze(1)
            G = _block_grad(x_t, weight, None, tg_t, lse_t, g_t, t0, v0, v1, V, eps, lam, softcap, grad_p)
            grad_x[t0:t1] += G @ w
            dw += G.T @ x_t
            del G
        del w
        step(v0, v1, dw)
        del dw
    return grad_x, grad_p


def _flat_input(input: Tensor) -> Tensor:
    """input as [N, D], N the product of its token dimensions (1 for one token; D may be 0)."""
    return input.reshape(math.prod(input.shape[:-1]), input.shape[-1])


def _flat_target(target: Tensor) -> Tensor:
    """target with the token dimensions flattened (none for one token): [N] class indices
    or [N, V] probabilities."""
    return target.reshape(-1, target.shape[-1]) if target.is_floating_point() else target.reshape(-1)


def _kept_targets(target: Tensor, ignore_index: int) -> tuple[Tensor, Tensor]:
    """(indices of the kept tokens, their targets) of a flat target: class indices
    (kept: not ignore_index; int64) or probabilities (every token kept)."""
    if target.is_floating_point():
        return torch.arange(target.shape[0], device=target.device), target
    kept = (target != ignore_index).nonzero().squeeze(1)
    return kept, target.index_select(0, kept).long()


def _targets(kept_target: Tensor, class_weight: Optional[Tensor], dtype: torch.dtype) -> _Targets:
    """The ``_Targets`` of the kept tokens, probabilities and class weights in the compute dtype."""
    w = None if class_weight is None else class_weight.to(dtype)
    tgt = kept_target.to(dtype) if kept_target.is_floating_point() else kept_target
    return _Targets(tgt, w, 1.0 if w is None else w.sum() / w.shape[0])


class _LinearCrossEntropy(torch.autograd.Function):
    """Forward: streamed lse and losses; saves input, weight, bias, target and lse [N_kept]
    (not the logits, not their gradients). Backward: logits recomputed block by block,
    softmax from the saved lse.

    Why recompute in backward rather than computing the gradients in the forward chunk
    loop: with ``reduction="none"`` the gradient of W is sum_n g_n dz_n^T x_n for a
    per-token grad_output g that is only known in backward, so gradients computed in the
    forward could not be rescaled afterwards; and a [V, D] grad_weight computed in the
    forward would be held from the forward to the backward pass (and computed even if
    backward never runs). Both ways run the logits matmul twice (forward: lse; the other
    way: lse pass + gradient pass), so recomputing costs no extra matmul.
    """

    @staticmethod
    def forward(
        ctx,
        input,
        weight,
        bias,
        target,
        class_weight,
        reduction,
        ignore_index,
        eps,
        lam,
        softcap,
        token_chunk,
        vocab_chunk,
        head=None,
    ):
        dtype = _compute_dtype(input.dtype)
        flat_input = _flat_input(input)
        kept, kept_target = _kept_targets(_flat_target(target), ignore_index)
        tg = _targets(kept_target, class_weight, dtype)
        x = flat_input.index_select(0, kept).to(dtype)
        loss_kept, lse = _forward_kept(x, weight, bias, tg, eps, lam, softcap, token_chunk, vocab_chunk)
        denominator = _mean_denominator(tg)
        ctx.save_for_backward(input, weight, bias, kept_target, class_weight, kept, lse)
        ctx.config = (reduction, eps, lam, softcap, token_chunk, vocab_chunk, denominator, target.shape)
        ctx.head = head  # a _HeadUpdate, or None
        loss = x.new_zeros(flat_input.shape[0]).index_copy(0, kept, loss_kept)
        if reduction == "none":
            return loss.view(input.shape[:-1])
        return _reduce(loss, kept.shape[0], denominator, reduction)

    @staticmethod
    def backward(ctx, grad_output):
        refuse_double_backward("linear_cross_entropy", "torch.nn.functional.cross_entropy on the logits")
        step = None if ctx.head is None else ctx.head.begin(ctx.next_functions[1][0])
        with autocast_off(grad_output.device.type):
            input, weight, bias, kept_target, class_weight, kept, lse = ctx.saved_tensors
            reduction, eps, lam, softcap, token_chunk, vocab_chunk, denominator, target_shape = ctx.config
            dtype = lse.dtype
            K = kept.shape[0]
            if reduction == "none":
                g = grad_output.reshape(-1).index_select(0, kept).to(dtype)
            else:
                scale = _mean_scale(K, denominator) if reduction == "mean" else 1.0
                g = (grad_output.to(dtype) * scale).expand(K)
            flat_input = _flat_input(input)
            tg = _targets(kept_target, class_weight, dtype)
            x = flat_input.index_select(0, kept).to(dtype)
            need_w, need_b = ctx.needs_input_grad[1], bias is not None and ctx.needs_input_grad[2]
            if step is not None:
                grad_x, grad_p = _backward_kept_update_head(
                    x,
                    weight,
                    tg,
                    lse,
                    g,
                    eps,
                    lam,
                    softcap,
                    token_chunk,
                    vocab_chunk,
                    ctx.needs_input_grad[3],
                    lambda v0, v1, dw: step(v0, v1, dw.to(weight.dtype)),
                )
                ctx.head.end()
                grad_w = grad_b = None
            else:
                grad_x, grad_w, grad_b, grad_p = _backward_kept(
                    x,
                    weight,
                    bias,
                    tg,
                    lse,
                    g,
                    eps,
                    lam,
                    softcap,
                    token_chunk,
                    vocab_chunk,
                    need_w,
                    need_b,
                    ctx.needs_input_grad[3],
                )
            grad_input = None
            if ctx.needs_input_grad[0]:
                grad_input = flat_input.new_zeros(flat_input.shape, dtype=dtype).index_copy(0, kept, grad_x)
                grad_input = grad_input.view(input.shape).to(input.dtype)
            grad_weight = None if grad_w is None else grad_w.to(weight.dtype)
            grad_bias = None if grad_b is None else grad_b.to(bias.dtype)
            grad_target = None if grad_p is None else grad_p.view(target_shape).to(kept_target.dtype)
            return (
                grad_input,
                grad_weight,
                grad_bias,
                grad_target,
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                None,
            )
