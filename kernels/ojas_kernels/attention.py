"""Online-softmax (flash) attention in Triton: the public functions ``flash_attention`` and
``flash_attention_forward``, their ``torch.autograd.Function`` and the operators
torch.compile sees.

The work is split by job: ``attention_config`` (tile shapes per device), ``attention_args``
(argument checks, launch arguments, output allocation), ``attention_tiles`` (the ``@triton.jit``
helpers the kernels share: visibility, tile ranges, dots, dropout bits),
``attention_forward`` (the forward kernel and its launch) and ``attention_backward`` (the dQ and
dK/dV kernels and their launch).  Each module's docstring names the theorems its code
implements; over the reals (files under ``rocq/Attention/``):

* forward, ``attention_forward`` of OnlineSoftmax.v: ``Ojas.Attention.StreamCorrect``
  (``attention_forward_correct``), ``Ojas.Attention.Mask`` (``stream_row_masked_keys``,
  ``stream_row_fully_masked``), ``Ojas.Attention.Lse`` (``stream_lse``),
  ``Ojas.Attention.GroupedQuery`` (``gqa_forward_repeat_kv``), ``Ojas.Attention.AdditiveMask``;
* backward, ``attention_backward`` of Backward.v: ``Ojas.Attention.BackwardCorrect``
  (``attention_backward_{dQ,dK,dV}_is_derive``, ``attention_backward_forward_eq``),
  ``Ojas.Attention.Lse`` (``row_probs_stream_row``), ``Ojas.Attention.GroupedQuery``
  (``gqa_dK_is_derive``, ``gqa_dV_is_derive``, ``gqa_dQ_is_derive``);

in floating point (rocq/Attention/Float/): ``Ojas.Attention.Float.ForwardError`` (the forward),
``Ojas.Attention.Float.DvError`` and ``Ojas.Attention.Float.DkDqError`` (the
backward).  Not covered: attention dropout as a whole, the 3xTF32 float32 path, additive masks
in floating point, the tensor cores' order of additions (see the kernel modules).

torch.compile and torch.export see the kernels as two custom operators,
``ojas::flash_attention_forward`` and ``ojas::flash_attention_backward``
(``host.define_op``, opaque to Dynamo and Inductor, with fake implementations; no autograd of
their own: under torch.compile ``_FlashAttention``, which Dynamo traces, calls the forward op in
its forward and the backward op in its backward): no graph break, and Inductor neither traces
into the kernels nor lowers their launch code.  They launch the same kernels with the same
arguments as the eager path (which calls them without the dispatcher), so every theorem
above applies unchanged.  This module's own code (the autograd wiring, the operator
registration, the config packing) is covered by no theorem.
"""

from __future__ import annotations

import math

import torch

from .attention_args import _check, _check_infer_causal, _dropout_args, _dropout_of, _Dropout, _infer_causal
from .attention_args import _forward_outputs, _backward_outputs
from .attention_backward import _backward
from .attention_config import AttentionConfig, KernelConfig, default_config
from .attention_forward import _forward
from .host import define_op, dynamo_apply, function_apply

# Imported from here by other modules, tests and benchmarks.
from .attention_args import _HIGHEST as _HIGHEST, _dot_precision as _dot_precision, _mask_args as _mask_args
from .attention_backward import _dq_tile as _dq_tile
from .attention_forward import _fwd_kernel as _fwd_kernel, _fwd_tile as _fwd_tile
from .attention_tiles import _dot as _dot, _visible as _visible

__all__ = ["KernelConfig", "AttentionConfig", "default_config", "flash_attention", "flash_attention_forward"]


def _refuse_double_backward() -> None:
    """Raise in a backward run with ``create_graph=True`` (once_differentiable would let the
    gradients pass as constants)."""
    if torch.is_grad_enabled():
        raise RuntimeError(
            "attention does not support double backward (create_graph=True through it, e.g. a "
            "gradient penalty or gradgradcheck): the Triton backward is not differentiable; "
            "use torch.nn.functional.scaled_dot_product_attention for higher-order gradients"
        )


class _FlashAttention(torch.autograd.Function):
    """The kernels with autograd.  Eagerly ``apply(query, key, value, attn_mask, is_causal, scale,
    window, config, seq_major, dropout)`` launches them directly, without the dispatcher's per-call
    cost.  Under torch.compile ``apply(query, key, value, attn_mask, *op_args)`` takes the rest of
    ``ojas::flash_attention_forward``'s arguments instead (:func:`_op_args`) and calls that op in
    the forward and ``ojas::flash_attention_backward`` in the backward: Dynamo traces the function,
    the ops stay opaque (section below)."""

    @staticmethod
    def forward(ctx, query, key, value, attn_mask, *args):
        if torch.compiler.is_compiling():
            out, lse = _forward_op(query, key, value, attn_mask, *args)
            dropout_seed, is_causal, scale, window, dropout_p, _, config, *hints = args
            ctx.save_for_backward(query, key, value, attn_mask, out, lse, dropout_seed)
            ctx.args = (is_causal, scale, window, dropout_p, config, *hints)  # hints: infer_causal, window_hint
            return out
        is_causal, scale, window, config, seq_major, dropout = args
        out, lse = _forward(query, key, value, attn_mask, is_causal, scale, window, config, seq_major, dropout)
        ctx.save_for_backward(query, key, value, attn_mask, out, lse)
        ctx.args = (is_causal, scale, window, config, dropout)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        _refuse_double_backward()
        if torch.compiler.is_compiling():
            query, key, value, attn_mask, out, lse, dropout_seed = ctx.saved_tensors
            dq, dk, dv = _backward_op(grad_out, query, key, value, attn_mask, out, lse, dropout_seed, *ctx.args)
            return (dq, dk, dv) + (None,) * 10
        query, key, value, attn_mask, out, lse = ctx.saved_tensors
        is_causal, scale, window, config, dropout = ctx.args
        dq, dk, dv = _backward(
            grad_out, query, key, value, attn_mask, out, lse, is_causal, scale, window, config, dropout
        )
        return dq, dk, dv, None, None, None, None, None, None, None


_flash_apply = function_apply(_FlashAttention)


# ---------------------------------------------------------------------------
# The registered operators: what torch.compile sees
# ---------------------------------------------------------------------------
#
# Under torch.compile (and torch.export) ``_FlashAttention`` runs the kernels as two operators,
# ``ojas::flash_attention_forward`` and ``ojas::flash_attention_backward``, opaque to Dynamo
# and Inductor (``host.define_op``, not ``triton_op``: Inductor neither traces into the kernels
# nor re-lowers their host code, e.g. the bool mask's ``view(torch.uint8)``), with fake
# implementations giving the outputs' shapes and strides and no autograd kernel (Dynamo traces
# the Function, which calls the forward op in its forward and the backward op in its backward).
# Their implementations are ``_forward`` and ``_backward``: the same kernels with the same
# arguments as the eager path, so the same values and the same theorems.  The dropout key is an
# input tensor, drawn outside the op.

_FORWARD_SCHEMA = (
    "(Tensor query, Tensor key, Tensor value, Tensor? attn_mask, Tensor? dropout_seed, "
    "bool is_causal, float scale, int? window, float dropout_p, bool seq_major, int[]? config, "
    "bool infer_causal=False, int? window_hint=None) -> (Tensor, Tensor)"
)
_BACKWARD_SCHEMA = (
    "(Tensor grad_out, Tensor query, Tensor key, Tensor value, Tensor? attn_mask, Tensor out, "
    "Tensor lse, Tensor? dropout_seed, bool is_causal, float scale, int? window, float dropout_p, "
    "int[]? config, bool infer_causal=False, int? window_hint=None) -> (Tensor, Tensor, Tensor)"
)


def _config_ints(config: AttentionConfig | None) -> list[int] | None:
    """``config`` as the ops take it: the fields of its three ``KernelConfig`` in order."""
    if config is None:
        return None
    return [
        int(v)
        for k in (config.fwd, config.bwd_kv, config.bwd_q)
        for v in (k.block_m, k.block_n, k.num_warps, k.num_stages, k.split)
    ]


def _config_of(ints: list[int] | None) -> AttentionConfig | None:
    """The inverse of :func:`_config_ints`."""
    if ints is None:
        return None
    return AttentionConfig(*(KernelConfig(*ints[i : i + 4], bool(ints[i + 4])) for i in (0, 5, 10)))


def _mask_run(attn_mask, query, key, is_causal, window, infer_causal, window_hint):
    """``(attn_mask, is_causal, window)`` the kernels run: inferred from the mask's contents with
    ``infer_causal`` (:func:`~.attention_args._infer_causal`), else as given."""
    if infer_causal:
        return _infer_causal(attn_mask, query, key, window_hint)
    return attn_mask, is_causal, window


def _forward_impl(
    query,
    key,
    value,
    attn_mask,
    dropout_seed,
    is_causal,
    scale,
    window,
    dropout_p,
    seq_major,
    config,
    infer_causal=False,
    window_hint=None,
):
    attn_mask, is_causal, window = _mask_run(attn_mask, query, key, is_causal, window, infer_causal, window_hint)
    return _forward(
        query,
        key,
        value,
        attn_mask,
        is_causal,
        scale,
        window,
        _config_of(config),
        seq_major,
        _dropout_of(dropout_p, dropout_seed),
    )


def _forward_fake(
    query,
    key,
    value,
    attn_mask,
    dropout_seed,
    is_causal,
    scale,
    window,
    dropout_p,
    seq_major,
    config,
    infer_causal=False,
    window_hint=None,
):
    return _forward_outputs(query, value, seq_major)


_forward_op = define_op("flash_attention_forward", _FORWARD_SCHEMA, _forward_impl, _forward_fake)


def _backward_impl(
    grad_out,
    query,
    key,
    value,
    attn_mask,
    out,
    lse,
    dropout_seed,
    is_causal,
    scale,
    window,
    dropout_p,
    config,
    infer_causal=False,
    window_hint=None,
):
    attn_mask, is_causal, window = _mask_run(attn_mask, query, key, is_causal, window, infer_causal, window_hint)
    return _backward(
        grad_out,
        query,
        key,
        value,
        attn_mask,
        out,
        lse,
        is_causal,
        scale,
        window,
        _config_of(config),
        _dropout_of(dropout_p, dropout_seed),
    )


def _backward_fake(
    grad_out,
    query,
    key,
    value,
    attn_mask,
    out,
    lse,
    dropout_seed,
    is_causal,
    scale,
    window,
    dropout_p,
    config,
    infer_causal=False,
    window_hint=None,
):
    return _backward_outputs(query, key, value)


_backward_op = define_op("flash_attention_backward", _BACKWARD_SCHEMA, _backward_impl, _backward_fake)


def _op_args(
    is_causal: bool,
    scale: float,
    window: int | None,
    config: AttentionConfig | None,
    seq_major: bool,
    dropout: _Dropout | None,
    dropout_p: float,
    infer_causal: bool = False,
    window_hint: int | None = None,
) -> tuple:
    """The arguments of ``ojas::flash_attention_forward`` after ``attn_mask``."""
    return (
        None if dropout is None else dropout.seed,
        bool(is_causal),
        float(scale),
        window,
        float(dropout_p) if dropout is not None else 0.0,
        bool(seq_major),
        _config_ints(config),
        bool(infer_causal),
        window_hint,
    )


def flash_attention_forward(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    is_causal: bool,
    scale: float,
    window: int | None,
    config: AttentionConfig | None = None,
    *,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    dropout_seed: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward pass: ``(out, lse)``, lse float32 ``[B, Hq, Sq]`` (``-inf`` for a
    fully masked row, whose output is zeros; with dropout the lse of all the
    probabilities, dropped ones included).

    Implements ``attention_forward`` (rocq/Attention/OnlineSoftmax.v), equal to
    the two-pass softmax by Ojas.Attention.StreamCorrect.attention_forward_correct,
    with masked key tiles dropped by Ojas.Attention.Mask.stream_row_masked_keys and
    the lse of Ojas.Attention.Lse.stream_lse.  ``attn_mask``, ``dropout_p`` and
    ``dropout_seed``: see :func:`flash_attention`.  Under torch.compile: the registered op
    ``ojas::flash_attention_forward`` under no_grad (not differentiable, as eagerly)."""
    _check(query, key, value, window, attn_mask)
    dropout = _dropout_args(dropout_p, dropout_seed, query)
    if torch.compiler.is_compiling():
        with torch.no_grad():  # the forward alone, as in eager
            op_args = _op_args(is_causal, scale, window, config, False, dropout, dropout_p)
            return _forward_op(query, key, value, attn_mask, *op_args)
    return _forward(query, key, value, attn_mask, is_causal, scale, window, config, dropout=dropout)


def flash_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    is_causal: bool,
    scale: float | None = None,
    window: int | None = None,
    config: AttentionConfig | None = None,
    *,
    attn_mask: torch.Tensor | None = None,
    seq_major: bool = False,
    dropout_p: float = 0.0,
    dropout_seed: torch.Tensor | None = None,
    infer_causal: bool = False,
    window_hint: int | None = None,
) -> torch.Tensor:
    """Differentiable flash attention; ``scale`` defaults to ``1 / sqrt(E)``.

    ``seq_major``: the output ``[B, Hq, Sq, Ev]`` is a view of a contiguous ``[B, Sq, Hq, Ev]``
    tensor (the kernel writes it through its strides), so that ``out.transpose(1, 2)``, the
    layout Hugging Face's attention modules continue with, needs no copy.  Same values.

    Forward: ``attention_forward`` (OnlineSoftmax.v;
    Ojas.Attention.StreamCorrect.attention_forward_correct,
    Ojas.Attention.Mask.stream_row_masked_keys, Ojas.Attention.Lse.stream_lse).
    Backward: ``attention_backward`` (Backward.v;
    Ojas.Attention.BackwardCorrect.attention_backward_dQ_is_derive, ``_dK_``, ``_dV_``
    and Ojas.Attention.BackwardCorrect.attention_backward_forward_eq), P recomputed
    from the saved lse (Ojas.Attention.Lse.row_probs_stream_row).

    Grouped-query attention (``Hkv`` dividing ``Hq``, ``group = Hq // Hkv``): query
    head ``h`` reads key/value head ``h // group`` (no copy), which over the reals is
    attention on key/value heads repeated ``group`` times
    (Ojas.Attention.GroupedQuery.gqa_forward_repeat_kv,
    Ojas.Attention.GroupedQuery.gqa_forward_correct); dK and dV of key head ``hk``
    accumulate, in one float32 accumulator, query heads ``hk * group + g`` for
    ``g = 0 .. group-1`` in turn, each over its query tiles: the derivative of the
    loss summed over the query heads (Ojas.Attention.GroupedQuery.gqa_dK_is_derive,
    Ojas.Attention.GroupedQuery.gqa_dV_is_derive, stated as a sum in that order; over
    the reals the order is immaterial); dQ per head
    (Ojas.Attention.GroupedQuery.gqa_dQ_is_derive).  The rounding of that accumulation
    is covered by no theorem.

    ``attn_mask`` (optional), broadcastable to ``[B, Hq, Sq, Sk]`` and read with
    stride 0 along its broadcast dimensions: bool (True = takes part) is one more
    conjunct of ``visibility`` (Ojas.Attention.Mask.visibility_true_iff), so
    masked keys are dropped keys (``stream_row_masked_keys``) and a row with none
    left gives zeros, lse -inf and zero gradients (``stream_row_fully_masked``).
    A mask of the query's dtype is added to the scores before the softmax; its
    -inf entries are masked keys as above.  Over the reals, with the mask read as
    a finite bias plus the set of its -inf entries (-inf is not a real):
    Ojas.Attention.AdditiveMask.attention_forward_float_mask_correct (the streamed
    rows on the scores ``scale * (q . k) + mask`` are the two-pass softmax of the
    keys with a finite entry; an instance of the streaming theorem, which holds for
    any scores) and Ojas.Attention.AdditiveMask.stream_row_float_mask_fully_masked
    (a row of -inf gives zeros); the whole-head dQ/dK/dV theorems above are stated
    for scores without a bias, their row terms on biased scores are
    Ojas.Attention.AdditiveMask.row_dQ_bias_is_derive, ``row_dK_bias_is_derive`` and
    ``row_dV_bias_is_derive``, and no theorem covers the mask in floating point.  Values
    below -FLT_MAX / log2(e) (about -2.4e38, e.g. ``torch.finfo(dtype).min`` of
    bfloat16 and float32) overflow the kernels' base-2 scores and act as -inf: a
    row made of them alone is fully masked here, while the reference and SDPA
    average its values.  The kernel computes no gradient for the mask: one
    requiring grad is refused (``ojas_ref.attention(impl="reference")`` has it).

    float32 inputs: the dots follow torch's float32 matmul precision
    (``torch.backends.cuda.matmul.fp32_precision``, set by
    ``torch.set_float32_matmul_precision`` and ``allow_tf32``): TF32 when it is allowed,
    otherwise (precision "highest", the default) 3xTF32, not IEEE float32 (module docstring:
    no theorem bounds 3xTF32 products).

    ``dropout_p`` in [0, 1]: attention dropout on the probabilities, kept ones scaled by
    ``1 / (1 - p)``, as ``scaled_dot_product_attention``'s ``dropout_p`` (applied whenever
    nonzero; p = 1 gives zeros).  ``dropout_seed``: the Philox key, an int64 tensor ``[2]``
    on the query's device holding two values in [0, 2^32) (``ojas_ref.attention`` passes the
    one it drew); None draws it from torch's generator of that device
    (``torch.randint(0, 2**32, (2,), dtype=torch.int64)``, reproducible under
    ``torch.manual_seed``).  The mask: module docstring; it is ``ojas_ref.attention``'s
    reference mask, bit for bit.

    ``infer_causal`` (with ``is_causal=False`` and no ``window``): a bool ``attn_mask`` whose
    contents lie inside the causal pattern (``j <= i``; and inside ``window_hint``'s band
    ``i - j < window_hint``, if given and it does) runs causal (with that window), so that the kernels
    skip the tiles the pattern masks; the mask is dropped where it is exactly that pattern (every
    tile then runs as without a mask). The same visibility, the mask AND the pattern
    (Ojas.Attention.Mask.visibility_true_iff). Decided from the mask's contents when the kernels run
    (one pass over the mask and one wait for the device, cached per storage, view and version, so a
    mask shared by a model's layers is read once per forward and backward; not while a CUDA graph is
    captured, where the mask runs as given): also under torch.compile, where the
    adapter that builds the mask cannot look at its contents. Hugging Face's adapter passes it for
    causal modules (``ojas_ref.integrations.hf.attention``). Other masks run as given.

    Under torch.compile this calls the registered op ``ojas::flash_attention_forward`` (its
    backward ``ojas::flash_attention_backward``; module docstring): the same kernels with the
    same arguments, so the same values and the theorem citations above unchanged.  A key
    drawn here (no ``dropout_seed``) is then a ``torch.randint`` of the graph, which Inductor
    draws from its own generator unless ``torch._inductor.config.fallback_random`` is set (as
    for torch's own dropout)."""
    _check(query, key, value, window, attn_mask)
    if attn_mask is not None and attn_mask.requires_grad and torch.is_grad_enabled():
        raise ValueError(
            "attn_mask requires grad, but the kernel computes no gradient for the mask; "
            "detach it, or use ojas_ref.attention(..., impl='reference') for d(attn_mask)"
        )
    _check_infer_causal(infer_causal, window_hint, is_causal, window)
    dropout = _dropout_args(dropout_p, dropout_seed, query)
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    if torch.compiler.is_compiling():  # inferred when the op runs: the mask's contents are not known here
        op_args = _op_args(is_causal, scale, window, config, seq_major, dropout, dropout_p, infer_causal, window_hint)
        return dynamo_apply(_FlashAttention, query, key, value, attn_mask, *op_args)
    if infer_causal:
        attn_mask, is_causal, window = _infer_causal(attn_mask, query, key, window_hint)
    return _flash_apply(query, key, value, attn_mask, is_causal, float(scale), window, config, bool(seq_major), dropout)
