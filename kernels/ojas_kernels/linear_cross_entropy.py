"""Chunked linear cross-entropy in Triton: the public functions ``linear_cross_entropy`` and
``linear_cross_entropy_forward``, their ``torch.autograd.Function`` and the operators
torch.compile sees.

Semantics are those of ``ojas_ref.linear_cross_entropy`` (the PyTorch reference):
logits ``z = softcap(x W^T + b)``, per-token loss

    (1 - eps) (lse - z_t) + eps (lse - mean_v z_v) + lam lse^2,

ignored tokens dropped, reductions "none" / "sum" / "mean" (over the kept tokens,
0 when none is kept).  The algorithm is ``ce_forward`` / ``ce_output`` /
``ce_backward`` of ``rocq/LinearCrossEntropy/Definitions.v`` with a particular choice of
chunks; the theorems it relies on (over the reals):

* ``Ojas.LinearCrossEntropy.ChunkedLse.merge_chunks_lse`` and ``chunked_lse_app_merge``:
  one online-softmax state (max, sum) per group of vocabulary tiles, merged in any
  order (``merge`` of ``rocq/Attention/Merge.v``), gives lse = ln sum_v exp z_v.  The
  forward logits kernel streams its tiles with ``block_step`` (``chunked_lse_chunk``)
  and writes one state per (token, group); the row kernel merges them.
* ``Ojas.LinearCrossEntropy.Loss.vocab_loop_correct`` / ``token_forward_correct``: the
  per-token loss from the lse, the target logit and the logit sum.
* ``Ojas.LinearCrossEntropy.Reduction.ce_drop_ignored`` (tokens whose target is
  ``ignore_index`` are removed before any matrix product, in every schedule, so they
  cost no product: only the gather of the kept rows and the scatter of their gradient
  rows) and ``ignored_grad_zero`` (their rows of grad_input are 0),
  ``ce_loss_correct`` (sum, mean over the kept count) and ``ce_mean_all_ignored``
  (mean over no kept token is 0).
* ``Ojas.LinearCrossEntropy.Gradient.ce_backward_correct`` (grad_input = G W,
  grad_weight = G^T H, grad_bias = colsum G for any token and vocabulary chunks) and
  ``grad_entry_is_derive`` (G_nv = token weight x dlogit x softcap', the derivative of
  the loss with respect to the raw logit).
* ``Ojas.LinearCrossEntropy.EndToEnd.ce_grad_input_is_derive``,
  ``Ojas.LinearCrossEntropy.EndToEnd.ce_grad_weight_is_derive``,
  ``Ojas.LinearCrossEntropy.EndToEnd.ce_grad_bias_is_derive`` and
  ``Ojas.LinearCrossEntropy.EndToEnd.ce_backward_is_gradient``: for any token and vocabulary
  chunks, ``ce_backward`` fed with the lses and kept count that ``ce_forward`` streams
  returns the partial derivatives of the reduced loss ("none": of
  sum_k grad_output_k loss_k) in H, W and b, soft cap, smoothing, z-loss and ignored
  tokens included; ``Ojas.LinearCrossEntropy.EndToEnd.ce_all_ignored_grads_zero``: with every
  token ignored, the loss ("sum" / "mean") and every gradient entry are 0.  Not covered
  by a theorem: this kernel's rounding (see each module's docstring); computing gradients
  with upstream gradient 1 in the forward and multiplying them by grad_output in the backward (both
  schedules; equal over the reals by linearity, not stated in Coq); the forward's
  merge of per-group states (exact by ``merge_chunks_lse``, but the end-to-end
  theorems are stated for ``ce_forward``'s streamed states); and for "none" the
  gradients over the kept tokens only (``ce_drop_ignored`` is for "sum" / "mean").

The work is split by job: ``linear_cross_entropy_config`` (tile shapes, chunking, the
schedule: ``LinearCrossEntropyConfig``, ``default_config``), ``linear_cross_entropy_args``
(argument checks and layout, options, the kept tokens, the reduction),
``linear_cross_entropy_kernels`` (the ``@triton.jit`` kernels and their launches: the lse,
loss and G), ``linear_cross_entropy_products`` (the cuBLAS products and their precision),
``linear_cross_entropy_three_products`` and ``linear_cross_entropy_four_products`` (the two
schedules).  Each module's docstring names the theorems its code implements, the rounding
theorems included, and what no theorem covers.

Design
------
The [N, V] logits never exist.  G (the gradient with respect to the logits) is
reduced over the vocabulary for grad_input and over the tokens for grad_weight.
Ignored tokens are removed before any product in every schedule (``ce_drop_ignored``),
so with half the tokens ignored the products do half the work: the kept tokens' rows
of the input are gathered (per token chunk, into the workspace, or once for the
4-product backward) and their rows of grad_input scattered into a zeroed grad_input
(the ignored rows 0: ``ignored_grad_zero``).  Two schedules
(``LinearCrossEntropyConfig.products``):

* **3 products** (the default, reductions "mean" and "sum"; ``_three_products`` of
  ``linear_cross_entropy_three_products``): Liger-Kernel's schedule.  The forward goes over
  chunks of kept tokens, each against the whole vocabulary, and computes every gradient
  there, for grad_output 1; the backward multiplies them by grad_output.
* **4 products** (reduction "none", whose per-token grad_output must weight G before the
  token sum, and ``products=4``; ``linear_cross_entropy_four_products``): the forward
  computes the losses, lse and grad_input by token chunks, the backward recomputes the
  logits by vocabulary slabs for grad_weight and grad_bias: every gradient reduced inside
  one product and rounded once, at the price of computing the logits twice.

The peak above the inputs is at most (1 + peak_fraction) x the gradients with 3
products (``_three_products_plan`` counts every allocation; 1.14 x by default, 1.05 x,
issue 30's bound, with ``peak_fraction=0.05`` and smaller chunks), about
(1 + workspace_fraction) x with 4.  Gradients are exact in the sense that every entry of G enters the
products (no filtering of small entries, unlike Cut Cross-Entropy's default).
float16 G is stored times a power of two (probabilities down to 2^-22 stay normal
numbers), undone in the products.  A second backward through a retained graph
recomputes the gradients the first one handed over, by the same computation
(``_LinearCrossEntropy``).

Rounding (in floating point, ``rocq/LinearCrossEntropy/Float/``): the lse and loss
(``Ojas.LinearCrossEntropy.Float.LseLossError``, ``Ojas.LinearCrossEntropy.Float.LossPosteriori``, with a
cap ``Ojas.LinearCrossEntropy.Float.SoftcapError`` and, the loss a posteriori,
``Ojas.LinearCrossEntropy.Float.SoftcapPosteriori``; ``linear_cross_entropy_kernels``), the 3-product
schedule's gradients (``Ojas.LinearCrossEntropy.Float.GradError``,
``Ojas.LinearCrossEntropy.Float.GradPosteriori``, with a cap
``Ojas.LinearCrossEntropy.Float.SoftcapGradError``), the 4-product schedule's
(``Ojas.LinearCrossEntropy.Float.WeightedGradError``), each under the premises and exclusions its
module states; no theorem covers the order of the sums inside cuBLAS and the Triton dots,
TF32 products, bias, label smoothing, z-loss, float16's scaled G, grad_bias,
the 4-product schedule's gradients with a cap and the scaling by grad_output after the fact.
The Triton kernels compile without FMA contraction (``enable_fp_fusion=False``), so each
product and sum rounds as the theorems model it.

torch.compile and torch.export see this kernel as two custom operators,
``ojas::linear_cross_entropy`` and ``ojas::linear_cross_entropy_backward``
(``host.define_op``, opaque to Dynamo and Inductor, with fake implementations; no autograd of
their own: under torch.compile ``_LinearCrossEntropy``, which Dynamo traces, calls the forward op
in its forward and the backward op in its backward; section "The registered operators" below): no
graph break, and Inductor neither traces into the kernels nor lowers their launch code.  They
run the eager path's functions (``_three_products``, ``_forward``, ``_backward_weight``,
``_scale_kernel``) with the same arguments, so every theorem above applies unchanged.  Under
compile the op also checks the targets (eagerly ``ojas_ref.linear_cross_entropy`` does, before
dispatching here).  Not under compile: the head updated inside the backward (``head``), which
raises there (``ojas_ref.linear_cross_entropy`` runs it eagerly, behind a graph break).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import Optional

import torch

from .linear_cross_entropy_args import _check, _kept_tokens, _options, _prepare, _reduce
from .linear_cross_entropy_config import (
    GemmConfig,
    LinearCrossEntropyConfig,
    RowConfig,
    _head_update_config,
    default_config,
)
from .linear_cross_entropy_four_products import _all_lse, _forward, _four_products_backward
from .linear_cross_entropy_kernels import _scale_in_place
from .linear_cross_entropy_three_products import _scaled_gradients, _three_products
from .host import define_op, dynamo_apply

# Imported from here by other modules, tests and benchmarks (to patch one, patch the module that calls it).
from .attention_args import _dot_precision as _dot_precision
from .host import next_power_of_2 as next_power_of_2
from .linear_cross_entropy_args import _Options as _Options, _round_up as _round_up
from .linear_cross_entropy_four_products import _backward_weight as _backward_weight
from .linear_cross_entropy_kernels import (
    _cap_chain as _cap_chain,
    _cap_tanh as _cap_tanh,
    _launch_logits as _launch_logits,
    _launch_rows as _launch_rows,
    _logits_kernel as _logits_kernel,
    _rows_kernel as _rows_kernel,
    _softcap as _softcap,
)
from .linear_cross_entropy_products import _addmm_into as _addmm_into, _mm_f32 as _mm_f32, _mm_into as _mm_into
from .linear_cross_entropy_three_products import (
    _three_products_plan as _three_products_plan,
    _token_chunks as _token_chunks,
)

__all__ = [
    "GemmConfig",
    "RowConfig",
    "LinearCrossEntropyConfig",
    "default_config",
    "linear_cross_entropy",
    "linear_cross_entropy_forward",
]


def _refuse_double_backward() -> None:
    """Raise in a backward run with ``create_graph=True`` (once_differentiable would let the
    gradients pass as constants)."""
    if torch.is_grad_enabled():
        raise RuntimeError(
            "the Triton linear cross-entropy does not support double backward "
            "(create_graph=True): its backward is not differentiable"
        )


class _LinearCrossEntropy(torch.autograd.Function):
    """``products`` 3 ("mean" / "sum"): the forward computes the losses and every
    gradient asked for (``_three_products``); the backward multiplies them by
    grad_output in place.  Otherwise the forward computes the losses, lse and (when
    input requires grad) grad_input, and the backward scales grad_input and computes
    grad_weight and grad_bias by vocabulary slabs.

    The gradients made in the forward are handed over by the first backward.  A second
    backward through a retained graph (``loss.backward(retain_graph=True)`` then
    ``loss.backward()``, as ``InBackwardOptimizer``'s clipping runs it) recomputes them
    from the saved input, weight, bias and target by the forward's own computation (the
    same products in the same order, so the same gradients on a deterministic device:
    no theorem says so, the theorems are over the reals; tested bit for bit).
    Those saved tensors are references to the forward's arguments, no copies: the weight
    is a parameter, and the input was alive beside the gradients and the workspace at
    the forward's peak anyway; holding it until the backward frees the graph adds
    nothing to that peak, nor to the first backward's (which scales the gradients in
    place; the recomputing one allocates what the forward did).  Both run with autocast
    disabled: each product has the precision ``_mm_into`` and ``_dot_precision`` give
    it, whatever the caller's autocast state (the backward runs under the caller's).

    Eagerly ``apply(input, weight, bias, target, reduction, ignore_index, opts, config, need,
    head)``.  Under torch.compile ``apply(input, weight, bias, target, three, *op_args)``: whether
    the 3-product schedule runs, then the rest of ``ojas::linear_cross_entropy``'s arguments; the
    forward calls that op and the backward ``ojas::linear_cross_entropy_backward`` (Dynamo traces
    the function, the ops stay opaque: section "The registered operators")."""

    @staticmethod
    def forward(ctx, input, weight, bias, target, *args):
        if torch.compiler.is_compiling():  # args: whether 3 products run, then the op's arguments after target
            three, *op_args = args
            loss, grad_input, grad_weight, grad_bias, lse = _forward_op(input, weight, bias, target, *op_args)
            ctx.save_for_backward(input, weight, bias, target, lse, grad_input, grad_weight, grad_bias)
            ctx.three, ctx.args = three, op_args
            return loss
        reduction, ignore_index, opts, config, need, head = args
        ctx.head = head  # ojas_ref's _HeadUpdate (config has 4 products), or None
        with torch.autocast(input.device.type, enabled=False):
            x, w, b, t = _prepare(input, weight, target, bias)
            ctx.three = config.products == 3 and reduction != "none" and any(need)
            ctx.args = (reduction, ignore_index, opts, config, need)
            if ctx.three:
                gr = _three_products(x, w, b, t, ignore_index, reduction, opts, need, config)
                ctx.grads = [gr.grad_input, gr.grad_weight, gr.grad_bias]
                ctx.save_for_backward(input, weight, bias, target)
                loss = _reduce(gr.loss, None, t.numel(), reduction, gr.count)
            else:
                fw = _forward(x, w, b, t, ignore_index, reduction, opts, need[0], config)
                ctx.grad_input = fw.grad_input
                ctx.save_for_backward(input, weight, bias, target, fw.kept, fw.tgt, fw.lse)
                loss = _reduce(fw.loss, fw.kept, t.numel(), reduction)
            return loss.view(target.shape) if reduction == "none" else loss

    @staticmethod
    def backward(ctx, grad_output):
        _refuse_double_backward()
        if torch.compiler.is_compiling():
            return _compiled_backward(ctx, grad_output)
        step = None if ctx.head is None else ctx.head.begin(ctx.next_functions[1][0])
        with torch.autocast(grad_output.device.type, enabled=False):
            input, weight, bias, target, *kept_tgt_lse = ctx.saved_tensors
            reduction, ignore_index, opts, config, need = ctx.args
            if ctx.three:
                grads, ctx.grads = ctx.grads, None
                if grads is None:  # a second backward through the retained graph: the forward's gradients again
                    x, w, b, t = _prepare(input, weight, target, bias)
                    gr = _three_products(x, w, b, t, ignore_index, reduction, opts, need, config)
                    grads = [gr.grad_input, gr.grad_weight, gr.grad_bias]
                grads = _scaled_gradients(grads, grad_output, (input, weight, bias))
                return (*grads, None, None, None, None, None, None, None)
            kept, tgt, lse = kept_tgt_lse
            grad_input = None
            if ctx.needs_input_grad[0]:
                grad_input, ctx.grad_input = ctx.grad_input, None
                if grad_input is None:  # a second backward through the retained graph: the forward's again
                    x, w, b, t = _prepare(input, weight, target, bias)
                    grad_input = _forward(x, w, b, t, ignore_index, reduction, opts, True, config).grad_input
            grads = _four_products_backward(
                grad_output,
                input,
                weight,
                bias,
                target,
                kept,
                tgt,
                lse,
                grad_input,
                ctx.needs_input_grad[:3],
                reduction,
                opts,
                config,
                step,
            )
            if step is not None:
                ctx.head.end()
            return (*grads, None, None, None, None, None, None, None)


# ---------------------------------------------------------------------------
# The registered operators: what torch.compile sees
# ---------------------------------------------------------------------------
#
# Under torch.compile (and torch.export) ``_LinearCrossEntropy`` runs the kernels as two
# operators (module docstring; ``host.define_op``, no autograd of their own):
# ``ojas::linear_cross_entropy`` (the forward: the loss, and the gradients the schedule computes
# there, for grad_output 1, or the lse of every token) and ``ojas::linear_cross_entropy_backward``
# (scales the forward's gradients in place, declared as mutations, and computes the 4-product
# schedule's grad_weight and grad_bias).  Their
# implementations are the eager path's functions with the same arguments.  Outputs not
# computed are empty tensors (the ops' outputs have static shapes: the 4-product schedule's
# kept tokens are recomputed from the target in the backward, its lse handed over for every
# token, NaN at ignored ones).

_FORWARD_SCHEMA = (
    "(Tensor input, Tensor weight, Tensor? bias, Tensor target, str reduction, int ignore_index, "
    "float label_smoothing, float z_loss, float? softcap, bool[] need, str config) "
    "-> (Tensor, Tensor, Tensor, Tensor, Tensor)"
)
_BACKWARD_SCHEMA = (
    "(Tensor grad_output, Tensor input, Tensor weight, Tensor? bias, Tensor target, Tensor lse, "
    "Tensor(a!) grad_input, Tensor(b!) grad_weight, Tensor(c!) grad_bias, str reduction, "
    "int ignore_index, float label_smoothing, float z_loss, float? softcap, bool[] need, str config) "
    "-> (Tensor, Tensor)"
)


@torch.compiler.assume_constant_result
def _config_text(config: Optional[LinearCrossEntropyConfig]) -> str:
    """``config`` as the ops take it: JSON of its fields, "" for None (the default config of
    the input's dtype and device); a constant of the graph to Dynamo."""
    return "" if config is None else json.dumps(dataclasses.asdict(config))


def _op_config(text: str, input: torch.Tensor) -> LinearCrossEntropyConfig:
    """The config of an op's call (the inverse of :func:`_config_text`)."""
    return _config_of(text) if text else default_config(input.dtype, input.device)


@functools.lru_cache(maxsize=64)
def _config_of(text: str) -> LinearCrossEntropyConfig:
    fields = json.loads(text)
    return LinearCrossEntropyConfig(
        GemmConfig(**fields.pop("fwd")), GemmConfig(**fields.pop("bwd")), RowConfig(**fields.pop("rows")), **fields
    )


def _check_targets(target: torch.Tensor, ignore_index: int, V: int) -> None:
    """Raise unless every target is in [0, V) or ``ignore_index`` (a host sync; the eager path
    leaves this to ``ojas_ref.linear_cross_entropy``, which checks before dispatching here)."""
    bad = (target != ignore_index) & ((target < 0) | (target >= V))
    if bad.any():
        raise ValueError(f"target holds {int(target[bad][0])}, not a class in [0, {V}) nor ignore_index={ignore_index}")


def _three(config: LinearCrossEntropyConfig, reduction: str, need) -> bool:
    """Whether the 3-product schedule runs (every gradient in the forward)."""
    return config.products == 3 and reduction != "none" and any(need)


def _forward_impl(input, weight, bias, target, reduction, ignore_index, label_smoothing, z_loss, softcap, need, config):
    opts, config = _options(label_smoothing, z_loss, softcap), _op_config(config, input)
    with torch.autocast(input.device.type, enabled=False):
        x, w, b, t = _prepare(input, weight, target, bias)
        _check_targets(t, ignore_index, w.shape[0])
        if _three(config, reduction, need):
            gr = _three_products(x, w, b, t, ignore_index, reduction, opts, tuple(need), config)
            loss = _reduce(gr.loss, None, t.numel(), reduction, gr.count)
            grads, lse = (gr.grad_input, gr.grad_weight, gr.grad_bias), x.new_empty(0, dtype=torch.float32)
        else:
            fw = _forward(x, w, b, t, ignore_index, reduction, opts, need[0], config)
            loss = _reduce(fw.loss, fw.kept, t.numel(), reduction)
            grads, lse = (fw.grad_input, None, None), _all_lse(fw, t.numel())
    # an output computed or an empty one (each its own: the outputs must not alias)
    grad_input, grad_weight = (x.new_empty(0) if g is None else g for g in grads[:2])
    grad_bias = x.new_empty(0, dtype=torch.float32) if grads[2] is None else grads[2]
    return loss.view(target.shape) if reduction == "none" else loss, grad_input, grad_weight, grad_bias, lse


def _forward_fake(input, weight, bias, target, reduction, ignore_index, label_smoothing, z_loss, softcap, need, config):
    N, (V, D) = target.numel(), weight.shape
    three = _three(_op_config(config, input), reduction, need)
    f32 = dict(dtype=torch.float32, device=input.device)
    return (
        torch.empty(target.shape if reduction == "none" else (), **f32),
        input.new_empty((N, D) if need[0] else (0,)),
        input.new_empty((V, D) if three and need[1] else (0,)),
        torch.empty((V,) if three and need[2] else (0,), **f32),
        torch.empty((0,) if three else (N,), **f32),
    )


# both read the kept tokens' count on the host (_kept_tokens)
_forward_op = define_op("linear_cross_entropy", _FORWARD_SCHEMA, _forward_impl, _forward_fake, host_sync=True)


def _backward_impl(
    grad_output,
    input,
    weight,
    bias,
    target,
    lse,
    grad_input,
    grad_weight,
    grad_bias,
    reduction,
    ignore_index,
    label_smoothing,
    z_loss,
    softcap,
    need,
    config,
):
    opts, config = _options(label_smoothing, z_loss, softcap), _op_config(config, input)
    with torch.autocast(grad_output.device.type, enabled=False):
        if _three(config, reduction, need):
            _scale_in_place([grad_input, grad_weight, grad_bias], grad_output)
            return weight.new_empty(0), weight.new_empty(0)
        t = _prepare(input, weight, target, bias)[3]
        mask = t != ignore_index
        kept, _, tgt = _kept_tokens(t, mask, mask.sum())
        _, grad_w, grad_b = _four_products_backward(
            grad_output,
            input,
            weight,
            bias,
            target,
            kept,
            tgt,
            lse if kept is None else lse.index_select(0, kept),
            grad_input,
            tuple(need),
            reduction,
            opts,
            config,
        )
    return tuple(weight.new_empty(0) if g is None else g for g in (grad_w, grad_b))


def _backward_fake(
    grad_output,
    input,
    weight,
    bias,
    target,
    lse,
    grad_input,
    grad_weight,
    grad_bias,
    reduction,
    ignore_index,
    label_smoothing,
    z_loss,
    softcap,
    need,
    config,
):
    four = not _three(_op_config(config, input), reduction, need)
    return (
        weight.new_empty(weight.shape if four and need[1] else (0,)),
        bias.new_empty(bias.shape) if four and need[2] and bias is not None else weight.new_empty(0),
    )


_backward_op = define_op(
    "linear_cross_entropy_backward", _BACKWARD_SCHEMA, _backward_impl, _backward_fake, host_sync=True
)


def _compiled_backward(ctx, grad_output):
    """``_LinearCrossEntropy``'s backward under torch.compile: the gradients of input, weight and
    bias by ``ojas::linear_cross_entropy_backward`` (3 products: the forward's, scaled in place)."""
    input, weight, bias, target, lse, grad_input, grad_weight, grad_bias = ctx.saved_tensors
    new_weight, new_bias = _backward_op(
        grad_output, input, weight, bias, target, lse, grad_input, grad_weight, grad_bias, *ctx.args
    )
    if not ctx.three:
        grad_weight, grad_bias = new_weight, new_bias
    need = ctx.args[5]
    grads = [
        g.view(t.shape).to(t.dtype) if wanted and t is not None else None
        for g, t, wanted in zip((grad_input, grad_weight, grad_bias), (input, weight, bias), need)
    ]
    return (*grads, *(None,) * 9)


def linear_cross_entropy(
    input: torch.Tensor,
    linear_weight: torch.Tensor,
    target: torch.Tensor,
    *,
    linear_bias: Optional[torch.Tensor] = None,
    reduction: str = "mean",
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    z_loss: float = 0.0,
    softcap: Optional[float] = None,
    config: Optional[LinearCrossEntropyConfig] = None,
    head=None,
) -> torch.Tensor:
    """Differentiable linear cross-entropy; arguments and result as
    ``ojas_ref.functional.linear_cross_entropy.linear_cross_entropy`` (which checks them and
    dispatches here with ``impl="triton"``, after ``torch.autocast``'s casts); input,
    weight and bias of one dtype, float16, bfloat16 or float32, the loss float32
    whatever it is; forward and backward run with autocast disabled.  Targets must be
    in [0, V) or ``ignore_index``: not checked here (the check costs a sync).

    Forward: ``ce_forward`` / ``ce_output`` (Definitions.v), the lse by merged
    vocabulary-chunk states (``Ojas.LinearCrossEntropy.ChunkedLse.merge_chunks_lse``), the
    loss by ``Ojas.LinearCrossEntropy.Loss.token_forward_correct``, ignored tokens dropped
    (``Ojas.LinearCrossEntropy.Reduction.ce_drop_ignored``) and reduced by
    ``Ojas.LinearCrossEntropy.Reduction.ce_loss_correct`` / ``ce_mean_all_ignored``.
    Backward: ``Ojas.LinearCrossEntropy.Gradient.ce_backward_correct`` with the entries of
    ``Ojas.LinearCrossEntropy.Gradient.grad_entry_is_derive``; over the reals, fed with the
    forward's lses, these are the partial derivatives of the reduced loss in input,
    linear_weight and linear_bias
    (``Ojas.LinearCrossEntropy.EndToEnd.ce_grad_input_is_derive``,
    ``Ojas.LinearCrossEntropy.EndToEnd.ce_grad_weight_is_derive``,
    ``Ojas.LinearCrossEntropy.EndToEnd.ce_grad_bias_is_derive``; the rounding of the 3-product
    schedule's grad_input and grad_weight: ``Ojas.LinearCrossEntropy.Float.GradError.ce_dh_error``
    / ``ce_dw_error``, the 4-product schedule's (grad_output inside G):
    ``Ojas.LinearCrossEntropy.Float.WeightedGradError.ce_dh4_error`` / ``ce_dw4_error``, without
    bias, cap, smoothing, z-loss, float16; the lse and loss with a cap: ``Ojas.LinearCrossEntropy.Float.SoftcapError.ce_lse_error_softcap`` /
    ``ce_loss_error_softcap``; the capped gradients of the 3-product schedule:
    ``Ojas.LinearCrossEntropy.Float.SoftcapGradError.sc_dh_error`` / ``sc_dw_error``; no theorem
    covers the 4-product schedule's capped gradients nor the rest of this kernel's rounding nor its scaling by grad_output after the fact).  With reduction "mean" or
    "sum" every gradient is computed in the forward (3 products; grad_weight summed
    across token chunks in its dtype, one rounding per chunk), with "none" (or
    ``config.products=4``) grad_input in the forward and the rest by recomputing
    the logits in the backward; the first backward scales the forward's gradients by
    grad_output, a second one through a retained graph recomputes them first (the
    same computation: the same gradients; ``_LinearCrossEntropy``).  Double backward
    is not supported.  Float32 accumulation in every product; see the module
    docstring for the design, the precision of each product and the memory bound.

    ``head``: ojas_ref's ``_HeadUpdate``, the link that ``ojas_ref.linear_cross_entropy(...,
    head_update=opt)`` makes to ``opt = InBackwardOptimizer(head_weight=linear_weight)`` (no bias),
    or None. The schedule is then 4 products whatever ``config`` says: grad_input in
    the forward (from W before any update), and in the backward each vocabulary slab's
    gradient over all kept tokens, after which the slab's rows are updated by plain SGD and
    the gradient dropped (``_backward_weight``'s ``step``): no [V, D] gradient exists. Over the
    reals this is backward then the step, dH whole before the first row's update
    (Ojas.InBackward.ChunkedHead.chunked_head_dh_first_code_eq_standard); in floats each
    row's gradient is the 4-product schedule's, rounded as there (not the 3-product default's:
    grad_weight summed in one product instead of per token chunk). The forward's token chunks
    are sized by ``workspace_fraction`` of the gradients' bytes (16 MiB at least) instead of
    grad_weight's bytes, so the forward's workspace stays below the [V, D] gradient it
    replaces.

    Under torch.compile this calls the registered op ``ojas::linear_cross_entropy`` (its backward
    ``ojas::linear_cross_entropy_backward``; module docstring): the same computation with the
    same arguments, so the same values and the theorem citations above unchanged; it checks
    the targets (ValueError naming the first bad one), and refuses ``head``
    (NotImplementedError).  A second backward through a retained graph gives the first's
    gradients again there too (functionalization keeps the forward's gradients the backward op
    scales; tested with Inductor and aot_eager)."""
    _check(input, linear_weight, target, linear_bias, reduction)
    opts = _options(label_smoothing, z_loss, softcap)
    grad = torch.is_grad_enabled()
    need = tuple(grad and t is not None and t.requires_grad for t in (input, linear_weight, linear_bias))
    if torch.compiler.is_compiling():
        if head is not None:
            raise NotImplementedError(
                "linear_cross_entropy under torch.compile: the head weight updated inside the "
                "backward (head_update=, an InBackwardOptimizer(head_weight=...)) is not supported; "
                "call ojas_ref.linear_cross_entropy(..., head_update=opt), which runs it eagerly, or "
                "pass head_update=None"
            )
        three = _three(config or default_config(input.dtype, input.device), reduction, need)
        return dynamo_apply(
            _LinearCrossEntropy,
            input,
            linear_weight,
            linear_bias,
            target,
            three,
            reduction,
            ignore_index,
            opts.eps,
            opts.lam,
            opts.softcap,
            list(need),
            _config_text(config),
        )
    chosen = config is not None
    config = config or default_config(input.dtype, input.device)
    if head is not None:
        if linear_bias is not None:
            raise NotImplementedError("the head updated inside the backward takes no bias")
        config = _head_update_config(config, input, linear_weight, cublas_logits=not chosen)
    return _LinearCrossEntropy.apply(
        input, linear_weight, linear_bias, target, reduction, ignore_index, opts, config, need, head
    )


def linear_cross_entropy_forward(
    input: torch.Tensor,
    linear_weight: torch.Tensor,
    target: torch.Tensor,
    *,
    linear_bias: Optional[torch.Tensor] = None,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    z_loss: float = 0.0,
    softcap: Optional[float] = None,
    config: Optional[LinearCrossEntropyConfig] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token (loss, lse), float32, in the shape of target, without autograd: 0 and
    NaN at ignored tokens (their logits are never computed).  One GEMM pass
    (``ce_forward``; ``Ojas.LinearCrossEntropy.ChunkedLse.merge_chunks_lse``,
    ``Ojas.LinearCrossEntropy.Loss.token_forward_correct``).  Under torch.compile: the registered op
    ``ojas::linear_cross_entropy`` under no_grad (its lse of every token is this result)."""
    _check(input, linear_weight, target, linear_bias, "none")
    opts = _options(label_smoothing, z_loss, softcap)
    if torch.compiler.is_compiling():
        with torch.no_grad():
            loss, *_, lse = _forward_op(
                input,
                linear_weight,
                linear_bias,
                target,
                "none",
                ignore_index,
                opts.eps,
                opts.lam,
                opts.softcap,
                [False] * 3,
                _config_text(config),
            )
        return loss, lse.view(target.shape)
    config = config or default_config(input.dtype, input.device)
    x, w, b, t = _prepare(input, linear_weight, target, linear_bias)
    with torch.no_grad():
        fw = _forward(x, w, b, t, ignore_index, "none", opts, False, config)
        loss = _reduce(fw.loss, fw.kept, t.numel(), "none")
        lse = _all_lse(fw, t.numel())
    return loss.view(target.shape), lse.view(target.shape)
