"""Chunked linear cross-entropy in pure PyTorch, step by step as the Coq spec.

The loss of a token with hidden state ``x`` is the cross-entropy of the logits
``z = x W^T + b`` (optionally soft-capped, ``z = c tanh(z / c)``) against its
target class. The logits of all tokens, an ``[N, V]`` tensor, are never built:
tokens are taken ``token_chunk`` at a time and the vocabulary ``vocab_chunk`` at
a time, and the log-sum-exp of each token is the online-softmax state
``(max, sum)`` of ``rocq/Attention/OnlineSoftmax.v`` (``block_step`` with empty
value rows) carried across the vocabulary chunks. The algorithm is ``ce_forward`` /
``ce_output`` / ``ce_backward`` of ``rocq/LinearCrossEntropy/Definitions.v``; the
theorems it implements:

* ``Ojas.LinearCrossEntropy.ChunkedLse.chunked_lse_chunk`` (and ``chunked_lse_correct``,
  ``chunked_lse_any_chunking``): the streamed (max, sum) over vocabulary chunks of
  any size gives lse = ln sum_v exp z_v, so the chunk sizes do not change the result
  (in exact arithmetic).
* ``Ojas.LinearCrossEntropy.Loss.vocab_loop_correct``: the vocabulary loop ends with the
  lse, the target logit and the sum of the logits, for any chunking.
* ``Ojas.LinearCrossEntropy.Loss.token_forward_correct`` / ``token_loss_chunked``: a
  token's (loss, lse) from its hidden row is the specification's
  (1 - eps)(lse - z_t) + eps(lse - mean_v z_v) + lam lse^2 of its logit row, and
  ``Ojas.LinearCrossEntropy.Loss.ce_token_loss_softmax``: that is F.cross_entropy's
  label-smoothed loss -(1 - eps) ln p_t - (eps / V) sum_v ln p_v, plus the z-loss.
* ``Ojas.LinearCrossEntropy.Reduction.ce_loss_correct``: for any token and vocabulary chunk
  sizes, "none" is the per-token loss (0 at ignored tokens), "sum" its sum over the
  kept tokens, "mean" that sum over the number of kept tokens; and
  ``Ojas.LinearCrossEntropy.Reduction.ce_mean_all_ignored``: with every token ignored,
  "mean" is 0 (``ce_output`` divides by the kept count only when it is positive).
* ``Ojas.LinearCrossEntropy.Gradient.ce_backward_correct``: the chunked backward computes
  grad_input = G W, grad_weight = G^T H, grad_bias = column sums of G for any chunk
  sizes; ``Ojas.LinearCrossEntropy.Gradient.grad_entry_is_derive`` (from
  ``logits_loss_is_derive`` and ``raw_logits_loss_is_derive``): each entry of G is the
  token's reduction weight times the derivative of its loss with respect to its raw
  logit, soft cap included.
* End to end (``rocq/LinearCrossEntropy/EndToEnd.v``), for any token and vocabulary chunk
  sizes: ``Ojas.LinearCrossEntropy.EndToEnd.ce_grad_input_is_derive``,
  ``Ojas.LinearCrossEntropy.EndToEnd.ce_grad_weight_is_derive`` and
  ``Ojas.LinearCrossEntropy.EndToEnd.ce_grad_bias_is_derive``: the grad_input[i][c],
  grad_weight[v][c] and grad_bias[v] that ``ce_backward`` returns when fed the lses and
  kept count that ``ce_forward`` streams (not an assumed exact lse) are the partial
  derivatives in H[i][c], W[v][c] and b[v] of sum_k grad_output_k * out_k, out = the
  reduced loss ``ce_loss`` ("none", "sum", "mean"; soft cap, label smoothing, z-loss and
  ignored tokens included); ``Ojas.LinearCrossEntropy.EndToEnd.ce_backward_is_gradient``: for
  "sum" / "mean" with grad_output 1 they are ``Derive`` of the scalar loss;
  ``Ojas.LinearCrossEntropy.EndToEnd.ce_all_ignored_grads_zero``: with every token ignored,
  "sum" and "mean" are 0 and every gradient entry is 0, as this code returns
  (F.cross_entropy gives NaN for "mean" there).

* With the head updated inside the backward (``head_update=``, an
  ``InBackwardOptimizer(head_weight=...)``; ``_backward_kept_update_head``):
  ``Ojas.InBackward.ChunkedHead.chunked_head_sgd_eq_standard``
  (the chunks of ``range(0, V, vocab_chunk)``, each chunk's rows stepped by SGD after its dH part
  and its rows' whole gradients) is backward then ``SGD.step()``, over any scalars; the gradient
  entries themselves are ``ce_backward_correct``'s. No theorem covers the float equality with
  the dense step: tested (bitwise in float32 on the CPU).

The spec keeps ignored tokens in the token loop with loss 0 and gradient weight 0
(``token_chunk_step``, ``token_weight``; their rows of G and grad_input are zero,
``Ojas.LinearCrossEntropy.Reduction.ignored_grad_zero``); here they are removed before the
projection. ``Ojas.LinearCrossEntropy.Reduction.ce_drop_ignored``: for "sum" and "mean",
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

This module holds the public functions, their argument checks and the dispatch to the Triton
kernel; the reference's chunk loop and its autograd Function are in
``_linear_cross_entropy_reference.py``, the link to the optimizer of ``head_update`` in
``_linear_cross_entropy_head.py``.
"""

from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING, Optional, Union

import torch
from torch import Tensor

from ojas_ref.functional._linear_cross_entropy_head import _HeadUpdate, head_update_link
from ojas_ref.functional._linear_cross_entropy_reference import (
    _compute_dtype,
    _flat_input,
    _flat_target,
    _forward_kept,
    _kept_targets,
    _LinearCrossEntropy,
    _targets,
)
from ojas_ref.functional.autocast import autocast_off, cast_for_autocast
from ojas_ref.functional.dispatch import IMPL_ENVS, kernel_runs
from ojas_ref.functional.transforms import refuse_function_transforms

if TYPE_CHECKING:
    from ojas_ref.optim.in_backward import InBackwardOptimizer

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
    head_update: Optional["InBackwardOptimizer"] = None,
) -> Tensor:
    """Cross-entropy of the logits ``input @ linear_weight.T + linear_bias``, chunked, differentiable.

    The arguments of :func:`torch.nn.functional.linear_cross_entropy` (same names and
    defaults; ``options`` aside), plus ``z_loss``, ``softcap``, ``chunk_size``, ``impl`` and
    ``head_update``.
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
    arithmetic (Ojas.LinearCrossEntropy.ChunkedLse.chunked_lse_chunk). The lse is the
    online-softmax state (max, sum) of rocq/Attention/OnlineSoftmax.v (``block_step``
    with empty value rows) streamed over the vocabulary chunks: ``ce_forward`` /
    ``ce_output`` of rocq/LinearCrossEntropy/Definitions.v, whose per-token result is the
    loss above by Ojas.LinearCrossEntropy.Loss.token_forward_correct and
    Ojas.LinearCrossEntropy.Loss.ce_token_loss_softmax, reduced as
    Ojas.LinearCrossEntropy.Reduction.ce_loss_correct says (see the module docstring). A 1-D
    input is the batch of its one token (its loss, 0-dim for "none" too).

    Backward is ``ce_backward`` (Ojas.LinearCrossEntropy.Gradient.ce_backward_correct,
    Ojas.LinearCrossEntropy.Gradient.grad_entry_is_derive; end to end, fed with the forward's
    lses, its results are the partial derivatives of the reduced loss in input,
    linear_weight and linear_bias over the reals:
    Ojas.LinearCrossEntropy.EndToEnd.ce_grad_input_is_derive,
    Ojas.LinearCrossEntropy.EndToEnd.ce_grad_weight_is_derive,
    Ojas.LinearCrossEntropy.EndToEnd.ce_grad_bias_is_derive,
    Ojas.LinearCrossEntropy.EndToEnd.ce_backward_is_gradient; with every token ignored, 0:
    Ojas.LinearCrossEntropy.EndToEnd.ce_all_ignored_grads_zero): it recomputes each logits
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
    Ojas.LinearCrossEntropy.Float.GradError.ce_dh_error / ce_dw_error, no theorem for this
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

    ``head_update``: None, or the :class:`ojas_ref.InBackwardOptimizer` constructed with
    ``head_weight=linear_weight`` (plain SGD; else TypeError / ValueError naming ``head_update``):
    the backward then updates ``linear_weight`` in place chunk by chunk and returns no gradient
    for it (see ``head_weight`` there; Ojas.InBackward.ChunkedHead): no [V, D] gradient
    exists, neither in the reference nor in the kernel (which then runs its 4-product schedule).
    ``linear_bias``, a weight used to compute ``input`` (tied embeddings) and autocast's cast of
    the weight are refused then (ValueError / NotImplementedError), as is a second backward
    through the graph. ``torch.autograd.grad`` (which accumulates nothing) gets the weight's
    gradient as usual. This loss on an optimizer's ``head_weight`` called without
    ``head_update`` raises in the backward, when the head's whole gradient arrives, saying to pass
    it (the loss did not update the head). An explicit argument, not looked up from the weight:
    the loss's caller says which optimizer steps its head (``optimize_model``'s Hugging Face loss
    takes it as ``model(..., labels=..., head_update=opt)``).

    Under ``torch.compile`` the kernel runs as the registered op ``ojas::linear_cross_entropy``
    (``ojas_kernels.linear_cross_entropy``: the same computation, so the theorem citations above
    are unchanged; ``fullgraph=True`` works), which checks the class targets itself (the eager
    check is a data-dependent branch); with ``head_update`` the call runs eagerly behind a graph
    break.
    """
    refuse_function_transforms("linear_cross_entropy")
    # Under torch.compile the targets are checked by the kernel's registered op (no graph break),
    # or below for the reference; the head updated inside the backward (hooks, weak references)
    # runs eagerly, behind a graph break.
    compiling = torch.compiler.is_compiling()
    if compiling and head_update is not None:
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
            head_update=head_update,
        )
    original_weight = linear_weight
    if isinstance(input, Tensor):
        input, linear_weight, linear_bias = cast_for_autocast(input.device.type, input, linear_weight, linear_bias)
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
    head: Optional[_HeadUpdate] = head_update_link(
        head_update, original_weight, linear_weight, linear_bias, input, target
    )
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
    :func:`linear_cross_entropy` (Ojas.LinearCrossEntropy.Loss.token_forward_correct).
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
