"""Chunked linear cross-entropy in pure PyTorch, step by step as the Coq spec.

The loss of a token with hidden state ``x`` is the cross-entropy of the logits
``z = x W^T + b`` (optionally soft-capped, ``z = c tanh(z / c)``) against its
target class. The logits of all tokens, an ``[N, V]`` tensor, are never built:
tokens are taken ``token_chunk`` at a time and the vocabulary ``vocab_chunk`` at
a time, and the log-sum-exp of each token is the online-softmax state
``(max, sum)`` of ``rocq/Attention/OnlineSoftmax.v`` (``block_step`` with empty
value rows) carried across the vocabulary chunks. The algorithm is ``ce_forward`` /
``ce_output`` / ``ce_backward`` of ``rocq/CrossEntropy/Definitions.v``; the
theorems it implements:

* ``Ojas.CrossEntropy.ChunkedLse.chunked_lse_chunk`` (and ``chunked_lse_correct``,
  ``chunked_lse_any_chunking``): the streamed (max, sum) over vocabulary chunks of
  any size gives lse = ln sum_v exp z_v, so the chunk sizes do not change the result
  (in exact arithmetic).
* ``Ojas.CrossEntropy.Loss.vocab_loop_correct``: the vocabulary loop ends with the
  lse, the target logit and the sum of the logits, for any chunking.
* ``Ojas.CrossEntropy.Loss.token_forward_correct`` / ``token_loss_chunked``: a
  token's (loss, lse) from its hidden row is the specification's
  (1 - eps)(lse - z_t) + eps(lse - mean_v z_v) + lam lse^2 of its logit row, and
  ``Ojas.CrossEntropy.Loss.ce_token_loss_softmax``: that is F.cross_entropy's
  label-smoothed loss -(1 - eps) ln p_t - (eps / V) sum_v ln p_v, plus the z-loss.
* ``Ojas.CrossEntropy.Reduction.ce_loss_correct``: for any token and vocabulary chunk
  sizes, "none" is the per-token loss (0 at ignored tokens), "sum" its sum over the
  kept tokens, "mean" that sum over the number of kept tokens; and
  ``Ojas.CrossEntropy.Reduction.ce_mean_all_ignored``: with every token ignored,
  "mean" is 0 (``ce_output`` divides by the kept count only when it is positive).
* ``Ojas.CrossEntropy.Gradient.ce_backward_correct``: the chunked backward computes
  grad_input = G W, grad_weight = G^T H, grad_bias = column sums of G for any chunk
  sizes; ``Ojas.CrossEntropy.Gradient.grad_entry_is_derive`` (from
  ``logits_loss_is_derive`` and ``raw_logits_loss_is_derive``): each entry of G is the
  token's reduction weight times the derivative of its loss with respect to its raw
  logit, soft cap included.
* End to end (``rocq/CrossEntropy/EndToEnd.v``), for any token and vocabulary chunk
  sizes: ``Ojas.CrossEntropy.EndToEnd.ce_grad_input_is_derive``,
  ``Ojas.CrossEntropy.EndToEnd.ce_grad_weight_is_derive`` and
  ``Ojas.CrossEntropy.EndToEnd.ce_grad_bias_is_derive``: the grad_input[i][c],
  grad_weight[v][c] and grad_bias[v] that ``ce_backward`` returns when fed the lses and
  kept count that ``ce_forward`` streams (not an assumed exact lse) are the partial
  derivatives in H[i][c], W[v][c] and b[v] of sum_k grad_output_k * out_k, out = the
  reduced loss ``ce_loss`` ("none", "sum", "mean"; soft cap, label smoothing, z-loss and
  ignored tokens included); ``Ojas.CrossEntropy.EndToEnd.ce_backward_is_gradient``: for
  "sum" / "mean" with grad_output 1 they are ``Derive`` of the scalar loss;
  ``Ojas.CrossEntropy.EndToEnd.ce_all_ignored_grads_zero``: with every token ignored,
  "sum" and "mean" are 0 and every gradient entry is 0, as this code returns
  (F.cross_entropy gives NaN for "mean" there).

* With the head updated inside the backward (``InBackwardOptimizer(head_weight=...)``,
  ``_backward_kept_update_head``): ``Ojas.OptimizerInBackward.ChunkedHead.chunked_head_sgd_eq_standard``
  (the chunks of ``range(0, V, vocab_chunk)``, each chunk's rows stepped by SGD after its dH part
  and its rows' whole gradients) is backward then ``SGD.step()``, over any scalars; the gradient
  entries themselves are ``ce_backward_correct``'s. No theorem covers the float equality with
  the dense step: tested (bitwise in float32 on the CPU).

The spec keeps ignored tokens in the token loop with loss 0 and gradient weight 0
(``token_chunk_step``, ``token_weight``; their rows of G and grad_input are zero,
``Ojas.CrossEntropy.Reduction.ignored_grad_zero``); here they are removed before the
projection. ``Ojas.CrossEntropy.Reduction.ce_drop_ignored``: for "sum" and "mean",
the forward and backward over the kept tokens only (any token chunks) give the same
loss, grad_weight and grad_bias, and the kept rows of grad_input. For "none" the kept
tokens' losses are the same by ``ce_loss_correct`` (each is its own row's
``token_loss_spec``), and the upstream gradient is taken at the kept positions.

No theorem covers floating point: every theorem above is over the reals (the float
loop is tested against a float64 reference). The end-to-end gradient theorems are about
the spec's loops over all tokens; that this code's loops over the kept tokens give the
same gradients is ``ce_drop_ignored`` for "sum" / "mean" only, no theorem states it for
"none".

Not in the spec, so covered by no theorem (tested against F.cross_entropy of the
materialised logits instead): class weights (``weight=``) and probability targets. Both
keep the chunked scheme: a token's target is a row c of weights over the classes
(``_Targets``), the loss (sum_v c_v) lse - sum_v c_v z_v plus the smoothing term, so the
vocabulary loop carries sum_v c_v z_v where the spec carries the target logit, and the
gradient entry is the derivative of that loss.
"""

from __future__ import annotations

import math
import numbers
import weakref
from typing import Any, Optional, Union

import torch
from torch import Tensor

from ojas_ref.functional.autocast import autocast_off, cast_for_autocast
from ojas_ref.functional.dispatch import IMPL_ENVS, kernel_runs, refuse_double_backward
from ojas_ref.functional.transforms import refuse_function_transforms

__all__ = ["linear_cross_entropy", "linear_cross_entropy_forward"]

# Default chunk sizes. The result does not depend on them in exact arithmetic;
# they bound the memory of one logits block ([token_chunk, vocab_chunk]).
_TOKEN_CHUNK = 1024
_VOCAB_CHUNK = 4096

_SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_TARGET_DTYPES = (torch.int64, torch.int32)
_REDUCTIONS = ("none", "mean", "sum")
IMPL_ENV = IMPL_ENVS["linear_cross_entropy"]

ChunkSize = Union[int, tuple[int, int], None]


# --------------------------------------------------------------------------
# Argument checks
# --------------------------------------------------------------------------


def _check_float(name: str, value: object, low: float, high: float = math.inf, *, open_low: bool = False) -> float:
    """A finite float in [low, high] ((low, high] with open_low), else an error naming it.
    Any real number is taken (a numpy float32 too), not a bool."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a float, got {type(value).__name__}")
    value = float(value)
    too_low = value <= low if open_low else value < low
    if not math.isfinite(value) or too_low or value > high:
        lower = f"> {low}" if open_low else f">= {low}"
        upper = "" if high == math.inf else f" and <= {high}"
        raise ValueError(f"{name} must be a finite float {lower}{upper}, got {value}")
    return value


def _check_chunk_size(chunk_size: ChunkSize) -> tuple[int, int]:
    """(token_chunk, vocab_chunk) from ``chunk_size``: None, an int for both, or a pair."""
    if chunk_size is None:
        return _TOKEN_CHUNK, _VOCAB_CHUNK
    pair = chunk_size if isinstance(chunk_size, tuple) else (chunk_size, chunk_size)
    if len(pair) != 2 or any(isinstance(c, bool) or not isinstance(c, numbers.Integral) for c in pair):
        raise TypeError(
            f"chunk_size must be None, an int or a pair (token_chunk, vocab_chunk) of ints, got {chunk_size!r}"
        )
    if min(pair) < 1:
        raise ValueError(f"chunk_size must be >= 1 (tokens and vocabulary entries per chunk), got {chunk_size!r}")
    return int(pair[0]), int(pair[1])


def _check_inputs(
    input: Tensor,
    linear_weight: Tensor,
    target: Tensor,
    linear_bias: Optional[Tensor],
    weight: Optional[Tensor],
    reduction: str,
    ignore_index: Optional[int],
    label_smoothing: float,
    z_loss: float,
    softcap: Optional[float],
    chunk_size: ChunkSize,
    check_targets: bool = True,
) -> tuple[int, float, float, Optional[float], tuple[int, int]]:
    """Raise on a bad argument (the message names it); return the checked ignore_index
    (None -> -100, as torch maps it for class indices) and scalars.  ``check_targets=False``
    leaves the class targets' values unchecked (a data-dependent branch, which torch.compile
    cannot trace: the caller checks them another way)."""
    for name, x in (
        ("input", input),
        ("linear_weight", linear_weight),
        ("target", target),
        ("linear_bias", linear_bias),
        ("weight", weight),
    ):
        if x is None and name in ("linear_bias", "weight"):
            continue
        if not isinstance(x, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if x.device != input.device:
            raise ValueError(f"{name} is on {x.device} but input is on {input.device}")
    if input.dim() not in (1, 2, 3):
        raise ValueError(f"input must be a 1-D [D], 2-D [N, D] or 3-D [B, S, D] tensor, got shape {tuple(input.shape)}")
    if input.dtype not in _SUPPORTED_DTYPES:
        raise TypeError(f"input has dtype {input.dtype}; supported: float16, bfloat16, float32, float64")
    if linear_weight.dim() != 2:
        raise ValueError(f"linear_weight must be a 2-D [V, D] tensor, got shape {tuple(linear_weight.shape)}")
    V, D = linear_weight.shape
    if D != input.shape[-1]:
        raise ValueError(
            f"linear_weight has D={D} columns but input has D={input.shape[-1]} in its last "
            f"dimension (input {tuple(input.shape)}, linear_weight {tuple(linear_weight.shape)})"
        )
    if V == 0:
        raise ValueError("linear_weight must have at least one row (vocabulary size V >= 1), got V=0")
    if linear_weight.dtype != input.dtype:
        raise TypeError(
            f"linear_weight has dtype {linear_weight.dtype} but input has dtype {input.dtype}; "
            "they must share one dtype (as for F.linear; torch.autocast casts them to one)"
        )
    if linear_bias is not None:
        if tuple(linear_bias.shape) != (V,):
            raise ValueError(f"linear_bias must have shape [V] = [{V}], got {tuple(linear_bias.shape)}")
        if linear_bias.dtype != input.dtype:
            raise TypeError(f"linear_bias has dtype {linear_bias.dtype} but input has dtype {input.dtype}")
    if weight is not None:
        if tuple(weight.shape) != (V,):
            raise ValueError(f"weight (the class weights) must have shape [V] = [{V}], got {tuple(weight.shape)}")
        if not weight.is_floating_point():
            raise TypeError(f"weight (the class weights) must be a floating-point tensor, got {weight.dtype}")
    tokens = list(input.shape[:-1])
    probs = target.is_floating_point()
    if probs and list(target.shape) != tokens + [V]:
        raise (TypeError if list(target.shape) == tokens else ValueError)(
            f"target has floating dtype {target.dtype}, so it must hold class probabilities of shape "
            f"{tokens + [V]} (input's shape without D, then V), got {list(target.shape)}; class indices must be "
            f"int64 or int32 of shape {tokens}"
        )
    if not probs:
        if target.dtype not in _TARGET_DTYPES:
            raise TypeError(
                f"target must hold class indices of dtype int64 or int32 (or class probabilities of a "
                f"floating dtype), got {target.dtype}"
            )
        if list(target.shape) != tokens:
            raise ValueError(f"target must have shape {tokens} (input's shape without D), got {list(target.shape)}")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    if ignore_index is not None and (isinstance(ignore_index, bool) or not isinstance(ignore_index, numbers.Integral)):
        raise TypeError(f"ignore_index must be an int or None, got {type(ignore_index).__name__}")
    ignore_index = -100 if ignore_index is None else int(ignore_index)
    if probs and ignore_index != -100:
        raise ValueError(
            f"ignore_index={ignore_index} applies to class-index targets only; with probability "
            "targets (a floating target) pass ignore_index=None"
        )
    eps = _check_float("label_smoothing", label_smoothing, 0.0, 1.0)
    lam = _check_float("z_loss", z_loss, 0.0)
    if weight is not None and lam != 0.0:
        raise NotImplementedError(
            "z_loss with class weights (weight=) is not defined: torch has no z-loss to "
            "follow and the spec no class weights; pass one or the other"
        )
    if softcap is not None:
        softcap = _check_float("softcap", softcap, 0.0, open_low=True)
    chunks = _check_chunk_size(chunk_size)
    if not probs and check_targets:
        _check_targets(target, ignore_index, V)
    return ignore_index, eps, lam, softcap, chunks


def _check_targets(target: Tensor, ignore_index: int, V: int) -> None:
    """Raise unless every class target is in [0, V) or ``ignore_index`` (a host sync)."""
    bad = (target != ignore_index) & ((target < 0) | (target >= V))
    if bad.any():
        raise ValueError(f"target holds {int(target[bad][0])}, not a class in [0, {V}) nor ignore_index={ignore_index}")


def _kernel_runs(impl: Optional[str], input: Tensor, unsupported: Optional[str]) -> bool:
    """Whether to run the Triton kernel (True) or the reference (False): ``dispatch.kernel_runs``.
    ``unsupported`` names what the call has that the kernel lacks (class weights, probability
    targets), or is None: "auto" runs the reference for it, "triton" raises NotImplementedError."""
    refused = (
        None
        if unsupported is None
        else NotImplementedError(
            f"impl='triton' has no {unsupported}; use impl='reference' (or 'auto', which runs the reference for it)"
        )
    )
    return kernel_runs("linear_cross_entropy", impl, input, refused=refused)


# --------------------------------------------------------------------------
# One block of logits, the vocabulary step, the per-token loss, the reduction
# --------------------------------------------------------------------------


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _chunk_logits(
    x: Tensor, weight: Tensor, bias: Optional[Tensor], v0: int, v1: int, softcap: Optional[float]
) -> Tensor:
    """``chunk_logits`` of rocq/CrossEntropy/Definitions.v for a block of tokens:
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
    """``vocab_step`` of rocq/CrossEntropy/Definitions.v: the lse state through
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
    Ojas.CrossEntropy.Reduction.ce_mean_all_ignored)."""
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
    Ojas.CrossEntropy.Gradient.ce_backward_correct). With probability targets and
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

    The loop of Ojas.OptimizerInBackward.ChunkedHead.chunked_head_code_eq_standard
    (``head_events``, the chunks of ``vocab_chunk``): every row is updated once, after its whole gradient, and nothing reads
    it afterwards (the later chunks read their own rows, the lse comes from the forward), so it
    is backward then the step (``chunked_head_code_eq_standard``,
    ``chunked_head_sgd_eq_standard``). The gradient itself is ``ce_backward``'s
    (Ojas.CrossEntropy.Gradient.ce_backward_correct: any chunk sizes and orders give
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


def _head_optimizer(weight: Any) -> Any:
    """The InBackwardOptimizer constructed with ``head_weight=weight``, or None."""
    if not isinstance(weight, Tensor) or not weight.requires_grad:
        return None
    from ojas_ref.optim.in_backward import _owner

    opt = _owner(weight)
    return opt if opt is not None and opt._head is weight else None


@torch.compiler.assume_constant_result
def _is_head_weight(weight: Any) -> bool:
    """Whether ``weight`` is the ``head_weight`` of an InBackwardOptimizer: a constant to Dynamo
    (the optimizers' weak mapping cannot be traced), read when the graph is compiled."""
    return _head_optimizer(weight) is not None


class _HeadUpdate:
    """One forward's link to the InBackwardOptimizer that updates the head ``weight`` inside the
    backward (held weakly, as the parameters' hooks hold it). The reference's and the Triton
    kernel's autograd Functions call :meth:`begin` at the start of their backward and
    :meth:`end` after the last row's update. Until its backward begins, the optimizer lists it
    (weakly: a forward whose graph is dropped leaves the list) among the forwards whose backward
    may still send the head a gradient (``InBackwardOptimizer._head_forwards``)."""

    def __init__(self, opt: Any, weight: Tensor) -> None:
        self._opt = weakref.ref(opt)
        self.weight = weight
        self.used = False
        self._node: Optional[Any] = None  # weak reference to the loss's autograd node, or None (unknown)
        opt._head_forwards.add(self)

    def attach(self, loss: Tensor) -> None:
        """Remember (weakly) the autograd node of the ``loss`` this forward returned, so that
        :meth:`runs_in_this_pass` can tell whether a backward pass runs it."""
        try:
            self._node = weakref.ref(loss.grad_fn)
        except TypeError:  # a node of torch's own (not weakly referable): unknown, taken as run
            self._node = None

    def runs_in_this_pass(self) -> bool:
        """Whether the backward pass under way runs this forward's backward (True when its node is
        unknown)."""
        node = None if self._node is None else self._node()
        return node is None or _will_accumulate(node)

    def begin(self, node: Any) -> Optional[Any]:
        """Before the saved tensors are read: ``step(v0, v1, grad)``, the plain-SGD update of rows
        [v0, v1) from their whole gradient (in the weight's dtype), or None when this backward does
        not accumulate into the head (``autograd.grad``, ``backward(inputs=...)`` without it), or when
        the backward of another forward of the head's loss runs in this pass too (two forwards, one
        backward of the summed losses; ``InBackwardOptimizer._head_shared_pass``): the head's
        gradient is then returned as usual (summed over the forwards by autograd and, in the second
        case, stepped in the head's hook: the dense path). ``node``: the head's AccumulateGrad.
        Raises on a second backward through the graph (the weights the forward used are gone)."""
        if self.used:
            raise RuntimeError(
                "linear_cross_entropy: a second backward through this graph (retain_graph=True), whose first "
                "backward updated the head weight in place (InBackwardOptimizer(head_weight=...)): the weights the "
                "forward used are gone. Run one backward per forward (or construct the optimizer without "
                "head_weight)"
            )
        opt = self._opt()
        if opt is None or not _will_accumulate(node):
            return None  # a collected optimizer: the head's hook raises with the reason
        opt._head_forwards.discard(self)
        if opt._head_shared_pass():
            return None  # the head's gradients of several forwards are summed first: the dense path
        self.used = True
        lr, weight = opt._head_step_lr(), self.weight
        return lambda v0, v1, grad: opt._head_update(weight, v0, v1, grad, lr)

    def end(self) -> None:
        """Every row of the head was updated."""
        opt = self._opt()
        if opt is not None:
            opt._head_finished()


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


def _will_accumulate(node: Any) -> bool:
    """Whether this backward pass runs ``node``. The head's AccumulateGrad: True for
    ``backward()`` (with ``inputs=`` only if it lists the head), False for ``autograd.grad``
    (which accumulates nothing; torch raises on the query for a leaf there). A loss's node
    (``_HeadUpdate.runs_in_this_pass``): whether it is in the pass's graph (torch answers False
    for the pass's root node itself, whose backward runs first)."""
    if node is None:
        return False
    try:
        return bool(torch._C._will_engine_execute_node(node))
    except RuntimeError:
        return False


# --------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------


def linear_cross_entropy(
    input: Tensor,
    linear_weight: Tensor,
    target: Tensor,
    *,
    linear_bias: Optional[Tensor] = None,
    weight: Optional[Tensor] = None,
    reduction: str = "mean",
    ignore_index: Optional[int] = None,
    label_smoothing: float = 0.0,
    z_loss: float = 0.0,
    softcap: Optional[float] = None,
    chunk_size: ChunkSize = None,
    impl: Optional[str] = None,
) -> Tensor:
    """Cross-entropy of the logits ``input @ linear_weight.T + linear_bias``, chunked, differentiable.

    The arguments of :func:`torch.nn.functional.linear_cross_entropy` (same names and
    defaults; ``options`` aside), plus ``z_loss``, ``softcap``, ``chunk_size`` and ``impl``.
    input [D] (one token), [N, D] or [B, S, D]; target of input's shape without D
    (int64 or int32 class indices in [0, V) or ``ignore_index``), or class
    probabilities: a floating tensor of input's shape with D replaced by V;
    linear_weight [V, D], linear_bias [V] or None; input, linear_weight and linear_bias
    share one dtype (float16, bfloat16, float32, float64), as for
    :func:`torch.nn.functional.linear`, and as there, under :func:`torch.autocast`
    enabled for input's device type, input, linear_weight and linear_bias are first cast
    to the autocast dtype (float64 ones excepted), so a bf16 input with a float32 weight
    works there; the gradients come back in each tensor's own dtype through the casts,
    and the computation below runs with autocast disabled (forward and backward). The logits
    z = input W^T + b are soft-capped, z = c tanh(z / c), when ``softcap=c`` is given
    (D = 0 is allowed: z = b, or 0 without a bias, as F.linear gives).
    The loss of a token with class target t is

        (1 - eps) (lse - z_t) + eps (lse - mean_v z_v) + z_loss * lse^2,

    lse = log sum_v exp z_v, eps = ``label_smoothing`` in [0, 1] (the smoothing of
    :func:`torch.nn.functional.cross_entropy`), ``z_loss`` >= 0 (the PaLM auxiliary
    loss). Tokens whose target is ``ignore_index`` are dropped before the projection;
    ``ignore_index=None`` (the default, as torch's) means -100, as torch maps it for
    class indices. ``reduction``: "none" gives the per-token losses in input's shape
    without D (0 for ignored tokens), "sum" their sum, "mean" the sum divided by the
    number of non-ignored tokens. With no z-loss and no soft cap this is
    :func:`torch.nn.functional.linear_cross_entropy` (and ``cross_entropy`` of the
    materialised logits); unlike torch, "mean" over a batch whose tokens are all
    ignored (or over no token) gives 0 and zero gradients, not NaN (the spec's
    ``ce_output`` defines it as 0).

    Outside the Coq spec, which has neither (no theorem covers them; they are tested
    against F.cross_entropy of the materialised logits): ``weight`` ([V], floating, any
    dtype: torch's per-class weights w) makes a class target's loss
    (1 - eps) w_t (lse - z_t) + (eps / V) sum_v w_v (lse - z_v), and "mean" divides by
    the sum of the kept targets' weights, as F.cross_entropy does (a zero sum, with kept
    tokens, gives a non-finite loss: the sum over 0, so inf where torch gives NaN if the
    smoothing term is nonzero); it cannot be combined with ``z_loss`` (NotImplementedError),
    and it gets no gradient (NotImplementedError if it requires one). Probability
    targets p give sum_v c_v (lse - z_v), c = ((1 - eps) p + eps / V) * w (w = 1 without
    ``weight``), plus the z-loss; "mean" divides by the number of tokens (weighted or
    not, as torch); ``ignore_index`` must be None (or -100, F.cross_entropy's default);
    p gets a gradient, g (1 - eps) w_v (lse - z_v). Both are streamed over the same
    chunks (the target part of a chunk is sum_v c_v z_v); the weights and
    probabilities are used in the compute dtype. The Triton kernel has neither: "auto"
    runs this reference for them, ``impl="triton"`` raises NotImplementedError.

    ``chunk_size``: None (tokens 1024, vocabulary 4096), an int for both, or a pair
    (token_chunk, vocab_chunk). At most one [token_chunk, vocab_chunk] block of
    logits exists at a time; the result does not depend on the chunks in exact
    arithmetic (Ojas.CrossEntropy.ChunkedLse.chunked_lse_chunk). The lse is the
    online-softmax state (max, sum) of rocq/Attention/OnlineSoftmax.v (``block_step``
    with empty value rows) streamed over the vocabulary chunks: ``ce_forward`` /
    ``ce_output`` of rocq/CrossEntropy/Definitions.v, whose per-token result is the
    loss above by Ojas.CrossEntropy.Loss.token_forward_correct and
    Ojas.CrossEntropy.Loss.ce_token_loss_softmax, reduced as
    Ojas.CrossEntropy.Reduction.ce_loss_correct says (see the module docstring). A 1-D
    input is the batch of its one token (its loss, 0-dim for "none" too).

    Backward is ``ce_backward`` (Ojas.CrossEntropy.Gradient.ce_backward_correct,
    Ojas.CrossEntropy.Gradient.grad_entry_is_derive; end to end, fed with the forward's
    lses, its results are the partial derivatives of the reduced loss in input,
    linear_weight and linear_bias over the reals:
    Ojas.CrossEntropy.EndToEnd.ce_grad_input_is_derive,
    Ojas.CrossEntropy.EndToEnd.ce_grad_weight_is_derive,
    Ojas.CrossEntropy.EndToEnd.ce_grad_bias_is_derive,
    Ojas.CrossEntropy.EndToEnd.ce_backward_is_gradient; with every token ignored, 0:
    Ojas.CrossEntropy.EndToEnd.ce_all_ignored_grads_zero): it recomputes each logits
    block and takes softmax = exp(z - lse) from the saved lse (why, rather than
    gradients computed in the forward: see
    ``_LinearCrossEntropy``); the gradient of linear_weight is a [V, D] tensor either
    way. Computation is in float32 (float64 for float64 inputs): bf16/fp16 operands
    are upcast block by block, gradients are accumulated in float32 and returned in
    the dtype of each tensor, and the loss is returned in float32 (float64 for float64
    inputs), as Hugging Face's loss (logits upcast to float32) and Liger return it.
    Double backward is not supported.

    ``impl``: "reference" runs the chunked PyTorch computation above; "triton" runs
    ``ojas_kernels.linear_cross_entropy.linear_cross_entropy`` (CUDA tensors, or CPU
    tensors under TRITON_INTERPRET=1; float16/bfloat16/float32; class targets without
    ``weight``; it picks its own chunks,
    ``chunk_size`` is the reference's; it computes gradients in the forward and hands
    them over in the first backward, a second backward through a retained graph
    recomputes them; the rounding of its grad_input and grad_weight for "mean" / "sum" in
    bfloat16 / float32 without bias, cap, smoothing and z-loss:
    Ojas.FloatModel.CrossEntropyGradError.ce_dh_error / ce_dw_error, no theorem for this
    reference's own float32 rounding); "auto" runs the kernel for bfloat16 and float32 CUDA tensors
    (without ``weight`` or probability targets), the reference otherwise. Not for
    float16 by default: the kernel computes the gradients in the forward for a
    grad_output of 1 and rounds them to float16 there, so a ``torch.amp.GradScaler``'s
    scale, which arrives with grad_output in the backward, comes too late and gradients
    below float16's range (about 6e-8, e.g. the 1/tokens-sized entries of a "mean" over
    many tokens) are lost; the reference scales in float32 before rounding.
    ``impl="triton"`` on float16 is for training without loss scaling.
    ``None``: the setting of ``dispatch.use_impl``, else the environment variable
    OJAS_LINEAR_CROSS_ENTROPY_IMPL read at import, else "auto" (``ojas_ref.functional.dispatch``).

    When ``linear_weight`` is the ``head_weight`` of an :class:`ojas_ref.InBackwardOptimizer`
    (plain SGD), the backward updates it in place chunk by chunk and returns no gradient for it
    (see that argument; Ojas.OptimizerInBackward.ChunkedHead): no [V, D] gradient exists, neither
    in the reference nor in the kernel (which then runs its 4-product schedule). ``linear_bias``,
    a weight used to compute ``input`` (tied embeddings) and autocast's cast of the weight are
    refused then (ValueError / NotImplementedError), as is a second backward through the graph.
    ``torch.autograd.grad`` (which accumulates nothing) gets the weight's gradient as usual.

    Under ``torch.compile`` the kernel runs as the registered op ``ojas::linear_cross_entropy``
    (``ojas_kernels.linear_cross_entropy``: the same computation, so the theorem citations above
    are unchanged; ``fullgraph=True`` works), which checks the class targets itself (the eager
    check is a data-dependent branch); with a ``head_weight`` of an InBackwardOptimizer the
    call runs eagerly behind a graph break (whether the weight is one is read when the graph is
    compiled: construct the optimizer before compiling).
    """
    refuse_function_transforms("linear_cross_entropy")
    # Under torch.compile the targets are checked by the kernel's registered op (no graph break),
    # or below for the reference; the head updated inside the backward (hooks, weak references)
    # runs eagerly, behind a graph break.
    compiling = torch.compiler.is_compiling()
    if compiling and torch.is_grad_enabled() and _is_head_weight(linear_weight):
        return torch.compiler.disable(linear_cross_entropy)(
            input,
            linear_weight,
            target,
            linear_bias=linear_bias,
            weight=weight,
            reduction=reduction,
            ignore_index=ignore_index,
            label_smoothing=label_smoothing,
            z_loss=z_loss,
            softcap=softcap,
            chunk_size=chunk_size,
            impl=impl,
        )
    head = _head_optimizer(linear_weight) if torch.is_grad_enabled() and not compiling else None
    if isinstance(input, Tensor):
        original_weight = linear_weight
        input, linear_weight, linear_bias = cast_for_autocast(input.device.type, input, linear_weight, linear_bias)
        if head is not None and linear_weight is not original_weight:
            raise NotImplementedError(
                "linear_cross_entropy: the head weight is updated inside the loss (InBackwardOptimizer(head_weight="
                "...)) but torch.autocast casts it to another dtype here, so the loss sees a copy: not supported. "
                "Train the model in one dtype without autocast, or construct the optimizer without head_weight"
            )
    ignore_index, eps, lam, softcap, (token_chunk, vocab_chunk) = _check_inputs(
        input,
        linear_weight,
        target,
        linear_bias,
        weight,
        reduction,
        ignore_index,
        label_smoothing,
        z_loss,
        softcap,
        chunk_size,
        check_targets=not compiling,
    )
    if weight is not None and weight.requires_grad and torch.is_grad_enabled():
        raise NotImplementedError("weight (the class weights) gets no gradient here: pass weight.detach()")
    if head is not None:
        if linear_bias is not None:
            raise NotImplementedError(
                "linear_cross_entropy: linear_bias with the head weight updated inside the loss "
                "(InBackwardOptimizer(head_weight=...)) is not supported; use a head without a bias, or construct "
                "the optimizer without head_weight"
            )
        head._check_head_forward(linear_weight, input, target)
        head = _HeadUpdate(head, linear_weight)
    unbatched = input.dim() == 1
    if unbatched:
        input, target = input.unsqueeze(0), target.unsqueeze(0)
    unsupported = (
        "weight= (class weights)"
        if weight is not None
        else "probability targets (a floating target)"
        if target.is_floating_point()
        else None
    )
    kernel = _kernel_runs(impl, input, unsupported)
    if compiling and not kernel and not target.is_floating_point():
        _check_targets(target, ignore_index, linear_weight.shape[0])
    with autocast_off(input.device.type):
        if kernel:
            from ojas_kernels.linear_cross_entropy import linear_cross_entropy as triton_linear_cross_entropy

            loss = triton_linear_cross_entropy(
                input,
                linear_weight,
                target,
                linear_bias=linear_bias,
                reduction=reduction,
                ignore_index=ignore_index,
                label_smoothing=eps,
                z_loss=lam,
                softcap=softcap,
                head=head,
            )
        else:
            loss = _LinearCrossEntropy.apply(
                input,
                linear_weight,
                linear_bias,
                target,
                weight,
                reduction,
                ignore_index,
                eps,
                lam,
                softcap,
                token_chunk,
                vocab_chunk,
                head,
            )
    if head is not None:
        head.attach(loss)
    return loss.squeeze(0) if unbatched and reduction == "none" else loss


def linear_cross_entropy_forward(
    input: Tensor,
    linear_weight: Tensor,
    target: Tensor,
    *,
    linear_bias: Optional[Tensor] = None,
    weight: Optional[Tensor] = None,
    ignore_index: Optional[int] = None,
    label_smoothing: float = 0.0,
    z_loss: float = 0.0,
    softcap: Optional[float] = None,
    chunk_size: ChunkSize = None,
) -> tuple[Tensor, Tensor]:
    """Per-token losses and log-sum-exp of :func:`linear_cross_entropy`, without autograd.

    Returns (loss, lse), both in input's shape without D and in the compute dtype
    (float32, float64 for float64 inputs): the ``reduction="none"`` losses (0 for ignored
    tokens) and lse = log sum_v exp z_v, NaN for ignored tokens (their logits are never
    computed). Same arguments, chunked computation and theorems as
    :func:`linear_cross_entropy` (Ojas.CrossEntropy.Loss.token_forward_correct).
    """
    if isinstance(input, Tensor):
        input, linear_weight, linear_bias = cast_for_autocast(input.device.type, input, linear_weight, linear_bias)
    ignore_index, eps, lam, softcap, (token_chunk, vocab_chunk) = _check_inputs(
        input,
        linear_weight,
        target,
        linear_bias,
        weight,
        "none",
        ignore_index,
        label_smoothing,
        z_loss,
        softcap,
        chunk_size,
    )
    dtype = _compute_dtype(input.dtype)
    flat_input = _flat_input(input)
    kept, kept_target = _kept_targets(_flat_target(target), ignore_index)
    with torch.no_grad(), autocast_off(input.device.type):
        x = flat_input.index_select(0, kept).to(dtype)
        loss_kept, lse_kept = _forward_kept(
            x,
            linear_weight,
            linear_bias,
            _targets(kept_target, weight, dtype),
            eps,
            lam,
            softcap,
            token_chunk,
            vocab_chunk,
        )
        loss = x.new_zeros(flat_input.shape[0]).index_copy(0, kept, loss_kept)
        lse = x.new_full((flat_input.shape[0],), math.nan).index_copy(0, kept, lse_kept)
    return loss.view(input.shape[:-1]), lse.view(input.shape[:-1])
