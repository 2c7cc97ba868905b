"""RMSNorm with Hugging Face's casting semantics: the PyTorch reference and the fused Triton kernel.

Over the last ``k`` dimensions (``normalized_shape``), in the compute dtype ``c``
(float32; float64 for float64 inputs), ``r = 1 / sqrt(mean(x^2) + eps)`` and, by ``cast``:

* ``"before_weight"`` (Llama, Mistral, Qwen2, Qwen3, Phi-3): ``weight * (x.to(c) * r).to(x.dtype)``:
  the normalised value is rounded to the input dtype before the product, which has the
  dtype torch promotes ``weight`` and ``x`` to. ``offset`` must be 0.
* ``"after_weight"`` (Gemma 2, Gemma 3: ``offset=1``):
  ``(x.to(c) * r * (offset + weight.to(c))).to(x.dtype)``.

:func:`rms_norm_reference` is that formula in plain PyTorch ops, in Hugging Face's order
(differentiated by torch's autograd); it runs on the CPU. On CUDA, :func:`rms_norm`
runs the fused kernel ``ojas_kernels.rms_norm`` (one kernel forward, one backward and a
sum of per-program dW partials), which saves only ``x`` and the per-row ``r``.

Theorems (rocq/RMSNorm/Backward.v, over the reals): the kernel's backward
``dx_j = r g_j - (r^3 / n) x_j sum_i g_i x_i`` with ``g_i = w_i dy_i`` and ``dw_i = dy_i x_i r``
(summed over rows) is the vector-Jacobian product of ``y_i = w_i x_i r`` from the saved
``x`` and ``r`` alone: Ojas.RMSNorm.Backward.rms_norm_backward_eq_vjp; with weight
``1 + w_i``: Ojas.RMSNorm.Backward.rms_norm_offset_backward_eq_vjp (both for ``eps > 0``;
``eps = 0`` is accepted, as torch's, and not covered). Not covered by a theorem: the floating-point rounding (tests/functional/test_rms_norm.py justifies its tolerances),
and the cast of the normalised value to the input dtype, which the kernel's backward
treats as the identity, as torch's autograd does for ``.to()`` (checked numerically
against torch's backward of Hugging Face's module in the tests: its bfloat16 gradient
equals, to bfloat16 rounding, the formula with no cast at all). Offsets other than 0 and
1 run the same formula with ``offset + w``; the theorems name weight ``w`` and ``1 + w``.

Differences from ``torch.nn.functional.rms_norm``: the two casting rules above (torch
multiplies in float32 and rounds once, like ``"after_weight"`` with ``offset=0``),
``offset``, and double backward through the kernel raises. Differences from Hugging Face's
modules: float64 inputs are normalised in float64 (Hugging Face's ``.to(torch.float32)``
rounds them to float32; :func:`ojas_ref.optimize_model`'s swapped modules do the same).
"""

from __future__ import annotations

import math
import numbers
from typing import Optional, Sequence, Union

import torch
from torch import Tensor

from ojas_kernels.host import define_op
from ojas_ref.functional._kernel_module import KernelModule
from ojas_ref.functional.dispatch import IMPL_ENVS, kernel_runs, refuse_double_backward
from ojas_ref.functional.transforms import refuse_function_transforms

__all__ = ["CASTS", "fused_rms_norm", "normalized_shape_tuple", "real_argument", "rms_norm", "rms_norm_reference"]

BACKWARD_THEOREMS = (
    "Ojas.RMSNorm.Backward.rms_norm_backward_eq_vjp",
    "Ojas.RMSNorm.Backward.rms_norm_offset_backward_eq_vjp",
)
CASTS = ("before_weight", "after_weight")
_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
IMPL_ENV = IMPL_ENVS["rms_norm"]


def rms_norm_reference(
    input: Tensor,
    weight: Tensor,
    eps: float,
    dims: tuple[int, ...] = (-1,),
    offset: float = 0.0,
    cast: str = "before_weight",
) -> Tensor:
    """The formula of the module docstring in plain PyTorch ops (no argument checks)."""
    compute = torch.float64 if input.dtype == torch.float64 else torch.float32
    x = input.to(compute)
    normed = x * torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + eps)
    if cast == "after_weight":
        return (normed * (offset + weight.to(compute))).to(input.dtype)
    return weight * normed.to(input.dtype)


class _FusedRMSNorm(torch.autograd.Function):
    """The Triton kernels on ``input [..., n]`` (``rows`` rows) and ``weight`` (``n`` entries),
    read as ``[rows, n]`` and ``[n]`` inside the function, so that autograd records no view
    around it (the output is allocated in the input's shape, the gradients in their inputs'
    shapes: the same memory as ``[rows, n]`` and ``[n]``); saves ``x [rows, n]``, ``weight [n]``
    and ``rstd``.  Under torch.compile the kernels run as the registered ops (below)."""

    @staticmethod
    def forward(ctx, input: Tensor, weight: Tensor, rows: int, eps: float, offset: float, after_weight: bool) -> Tensor:
        n = weight.numel()
        x = input if input.dim() == 2 and input.shape[0] == rows else input.reshape(rows, n)
        w = weight if weight.dim() == 1 else weight.reshape(n)
        if torch.compiler.is_compiling():
            y, rstd = _forward_op(x, w, float(eps), float(offset), bool(after_weight))
            y = y.reshape(input.shape)
        else:
            y, rstd = _KERNELS.load().forward(x, w, eps, offset, after_weight, input.shape)
        ctx.save_for_backward(x, w, rstd)
        ctx.args = (offset, after_weight, input.shape, weight.shape)
        return y

    @staticmethod
    def backward(ctx, grad_y: Tensor):
        refuse_double_backward("rms_norm", "impl='reference'")
        x, weight, rstd = ctx.saved_tensors
        if torch.compiler.is_compiling():
            offset, after_weight, input_shape, weight_shape = ctx.args
            dx, dw = _backward_op(grad_y.reshape(x.shape), x, weight, rstd, float(offset), bool(after_weight))
            dx, dw = dx.reshape(input_shape), dw.reshape(weight_shape)
        else:
            dx, dw = _KERNELS.load().backward(grad_y, x, weight, rstd, *ctx.args)
        return dx, (dw if ctx.needs_input_grad[1] else None), None, None, None, None


_KERNELS = KernelModule("rms_norm", _FusedRMSNorm)


# ---------------------------------------------------------------------------
# The registered operators: what torch.compile sees
# ---------------------------------------------------------------------------
#
# Under torch.compile (and torch.export) ``_FusedRMSNorm`` runs the kernels as the operators
# ``ojas::rms_norm_forward`` and ``ojas::rms_norm_backward`` (``ojas_kernels.host.define_op``:
# opaque to Dynamo and Inductor, fake implementations ``ojas_kernels.rms_norm.forward_outputs`` /
# ``backward_outputs``, no autograd kernel: Dynamo traces the Function, which calls the forward op
# in its forward and the backward op in its backward).  They call the eager path's
# ``rms_norm_forward`` and ``rms_norm_backward`` with the same arguments: the same values, the same
# theorems.  Eagerly ``_FusedRMSNorm`` calls the kernels without the dispatcher.


def _forward_impl(x: Tensor, weight: Tensor, eps: float, offset: float, after_weight: bool) -> tuple[Tensor, Tensor]:
    return _KERNELS.load().rms_norm_forward(x, weight, eps, offset, after_weight)


def _forward_fake(x: Tensor, weight: Tensor, eps: float, offset: float, after_weight: bool) -> tuple[Tensor, Tensor]:
    from ojas_kernels.rms_norm import forward_outputs

    return forward_outputs(x, weight, after_weight)


_forward_op = define_op(
    "rms_norm_forward",
    "(Tensor x, Tensor weight, float eps, float offset, bool after_weight) -> (Tensor, Tensor)",
    _forward_impl,
    _forward_fake,
)


def _backward_impl(
    grad_y: Tensor, x: Tensor, weight: Tensor, rstd: Tensor, offset: float, after_weight: bool
) -> tuple[Tensor, Tensor]:
    return _KERNELS.load().rms_norm_backward(grad_y, x, weight, rstd, offset, after_weight)


def _backward_fake(
    grad_y: Tensor, x: Tensor, weight: Tensor, rstd: Tensor, offset: float, after_weight: bool
) -> tuple[Tensor, Tensor]:
    from ojas_kernels.rms_norm import backward_outputs

    return backward_outputs(x, weight)


_backward_op = define_op(
    "rms_norm_backward",
    "(Tensor grad_y, Tensor x, Tensor weight, Tensor rstd, float offset, bool after_weight) -> (Tensor, Tensor)",
    _backward_impl,
    _backward_fake,
)


def normalized_shape_tuple(normalized_shape: Union[int, Sequence[int], torch.Size]) -> tuple[int, ...]:
    if isinstance(normalized_shape, numbers.Integral) and not isinstance(normalized_shape, bool):
        return (int(normalized_shape),)
    if (
        not isinstance(normalized_shape, (Sequence, torch.Size))
        or not normalized_shape
        or not all(isinstance(d, numbers.Integral) and not isinstance(d, bool) and d >= 0 for d in normalized_shape)
    ):
        raise TypeError(
            f"normalized_shape must be an int or a non-empty sequence of non-negative ints, got {normalized_shape!r}"
        )
    return tuple(int(d) for d in normalized_shape)


def real_argument(name: str, value: object, minimum: Optional[float] = None) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise TypeError(f"{name} must be a finite real number, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return float(value)


def _check(input: object, shape: tuple[int, ...], weight: object, offset: float, cast: object) -> None:
    if not isinstance(input, Tensor) or input.dtype not in _DTYPES:
        what = input.dtype if isinstance(input, Tensor) else type(input).__name__
        raise TypeError(f"input must be a float16, bfloat16, float32 or float64 tensor, got {what}")
    if tuple(input.shape[input.dim() - len(shape) :]) != shape or input.dim() < len(shape):
        raise ValueError(f"input of shape {tuple(input.shape)} does not end with normalized_shape {shape}")
    if cast not in CASTS:
        raise ValueError(f"cast must be one of {CASTS}, got {cast!r}")
    if offset != 0.0 and cast == "before_weight":
        raise ValueError(
            f"offset={offset} needs cast='after_weight' (Gemma's form); no Hugging Face family adds an "
            "offset to a weight applied after the cast"
        )
    if weight is None:
        if offset != 0.0:
            raise ValueError(f"offset={offset} needs a weight")
        return
    if not isinstance(weight, Tensor) or weight.dtype not in _DTYPES:
        what = weight.dtype if isinstance(weight, Tensor) else type(weight).__name__
        raise TypeError(f"weight must be None or a float16, bfloat16, float32 or float64 tensor, got {what}")
    if tuple(weight.shape) != shape:
        raise ValueError(f"weight must have shape normalized_shape {shape}, got {tuple(weight.shape)}")
    if weight.device != input.device:
        raise ValueError(f"weight is on {weight.device} but input on {input.device}")


def _kernel_runs(impl: Optional[str], input: Tensor, weight: Tensor, n: int) -> bool:
    """Whether to run the Triton kernel (True) or the reference (False): ``dispatch.kernel_runs``,
    with more than the kernel's ``MAX_HIDDEN`` entries to normalise refused."""

    def too_wide() -> Optional[Exception]:
        from ojas_kernels.rms_norm import MAX_HIDDEN

        if n <= MAX_HIDDEN:
            return None
        return ValueError(
            f"impl='triton' normalises at most {MAX_HIDDEN} entries (prod(normalized_shape) = {n}); "
            "use impl='reference'"
        )

    return kernel_runs("rms_norm", impl, input, weight, refused=too_wide)


def rms_norm(
    input: Tensor,
    normalized_shape: Union[int, Sequence[int], torch.Size],
    weight: Optional[Tensor] = None,
    eps: Optional[float] = None,
    *,
    offset: float = 0.0,
    cast: str = "before_weight",
    impl: Optional[str] = None,
) -> Tensor:
    """RMSNorm of ``input`` over its last dimensions ``normalized_shape`` (the module docstring's formula).

    Arguments as ``torch.nn.functional.rms_norm`` (``eps=None`` is ``torch.finfo(input.dtype).eps``;
    ``weight=None`` multiplies by nothing), plus ``offset`` (Gemma: 1.0, with
    ``cast="after_weight"``), ``cast`` (where the normalised value is rounded to the input
    dtype: ``"before_weight"``, Llama's, or ``"after_weight"``, Gemma's) and ``impl``:
    "triton" runs the fused kernel (CUDA, or the CPU under TRITON_INTERPRET=1;
    ``prod(normalized_shape) <= 65536``), "reference" :func:`rms_norm_reference`, "auto"
    the kernel for CUDA tensors other than float64 and the reference otherwise; None: the setting
    of ``dispatch.use_impl``, else the environment variable OJAS_RMS_NORM_IMPL read at import,
    else "auto" (``ojas_ref.functional.dispatch``).

    Backward of the kernel: Ojas.RMSNorm.Backward.rms_norm_backward_eq_vjp (offset 0),
    Ojas.RMSNorm.Backward.rms_norm_offset_backward_eq_vjp (offset 1); not covered: the
    rounding and the cast to the input dtype (treated as the identity, as torch's autograd
    does). Double backward through the kernel raises. Autocast changes nothing (the
    formula casts for itself, as Hugging Face's, whose ops autocast leaves in float32).

    Under ``torch.compile`` the kernel runs as the registered ops ``ojas::rms_norm_forward`` /
    ``ojas::rms_norm_backward`` (the same kernels with the same arguments, so the theorem
    citations above are unchanged; ``fullgraph=True`` works); the reference is traced as torch
    code.
    """
    refuse_function_transforms("rms_norm")
    shape = normalized_shape_tuple(normalized_shape)
    offset = real_argument("offset", offset)
    _check(input, shape, weight, offset, cast)
    eps = torch.finfo(input.dtype).eps if eps is None else real_argument("eps", eps, minimum=0.0)
    if weight is None:
        weight = torch.ones(shape, dtype=input.dtype, device=input.device)
    n = math.prod(shape)
    if not _kernel_runs(impl, input, weight, n):
        return rms_norm_reference(input, weight, eps, tuple(range(-len(shape), 0)), offset, cast)
    rows = math.prod(input.shape[: input.dim() - len(shape)])
    return _fused(input, weight, rows, n, eps, offset, cast == "after_weight")


def fused_rms_norm(input: Tensor, weight: Tensor, eps: float, offset: float, after_weight: bool) -> Tensor:
    """The kernel's RMSNorm of ``input [..., n]`` over its last dimension, for arguments
    :func:`rms_norm` has checked, or that the caller knows to be right (a 1-D ``weight [n]`` of
    the input's dtype and device, ``0 < n <= MAX_HIDDEN``, a float ``eps >= 0``, and
    ``after_weight`` for an ``offset`` other than 0).  Theorems as :func:`rms_norm`'s; under
    torch.compile the op ``ojas::rms_norm_forward``, as :func:`rms_norm`'s kernel path."""
    n = weight.shape[0]
    return _fused(input, weight, input.numel() // n if n else math.prod(input.shape[:-1]), n, eps, offset, after_weight)


def _fused(input: Tensor, weight: Tensor, rows: int, n: int, eps: float, offset: float, after_weight: bool) -> Tensor:
    """The kernel path on ``input`` of ``rows`` rows of ``n`` entries: ``_FusedRMSNorm`` (no view
    recorded around it; under torch.compile its ``apply``, which Dynamo traces, else the C one)."""
    if input is weight:  # one tensor as both: through a view, so that its two gradients sum in the same order
        input = input.view(input.shape)
    if torch.compiler.is_compiling():
        return _FusedRMSNorm.apply(input, weight, rows, eps, offset, after_weight)
    _KERNELS.load()
    return _KERNELS.apply(input, weight, rows, eps, offset, after_weight)
