"""SwiGLU, ``h = silu(gate) * up``, and GeGLU, ``h = gelu_tanh(gate) * up``, saving only ``gate`` and ``up``.

Hugging Face's Llama MLP computes ``down_proj(act_fn(gate_proj(x)) * up_proj(x))`` with silu,
Gemma 2's and Gemma 3's with ``gelu_pytorch_tanh`` (``F.gelu(x, approximate="tanh")``); torch's
autograd of ``act(a) * b`` keeps three ``[tokens, intermediate]`` tensors (``a``, ``b`` and
``act(a)``).  Here the backward recomputes the activation from ``a`` (a smooth activation
reconstructed instead of stored), so two are kept: a third less MLP activation memory, and
one kernel each way (Triton on CUDA).  ``activation`` picks it: "silu" (SwiGLU, the default)
or "gelu_tanh" (GeGLU with the tanh approximation of gelu).

Theorems (over the reals), with only ``a`` and ``b`` saved:

* "silu": ``Ojas.SwiGLU.Backward.swiglu_backward_eq_vjp``: with ``s = sigmoid(a)`` recomputed,
  ``da = dh * b * s * (1 + a * (1 - s))``, ``db = dh * a * s``.
* "gelu_tanh": ``Ojas.SwiGLU.Backward.geglu_tanh_backward_eq_vjp`` (``geglu_tanh_is_derive_a``,
  ``geglu_tanh_is_derive_b``): with ``gelu(a) = a / 2 * (1 + T)``, ``T = tanh(k (a + c a^3))``,
  ``k = sqrt(2 / pi)``, ``c = 0.044715`` recomputed,
  ``da = dh * b * (1/2 (1 + T) + 1/2 a (1 - T^2) k (1 + 3 c a^2))``, ``db = dh * gelu(a)``.

each ``dh`` times the derivatives of ``act(a) * b`` in ``a`` and ``b``.  No theorem covers
the rounding (nor that torch's float32 ``k`` and ``c`` are not the reals').  Both
implementations round where torch's autograd of ``act(a) * b`` rounds (compute in float32, or
float64 for float64; ``rnd`` rounds to the input dtype):

    forward   h  = rnd(rnd(act(a)) * b)                   torch's silu / gelu, then mul
    backward  g  = rnd(dh * b)                            mul's backward, into the activation
              da = rnd(g * act'(a))                       silu_backward / gelu_backward
              db = rnd(dh * rnd(act(a)))                  mul's backward, the saved activation

with, in torch's order of operations, silu: ``act(a) = a / (1 + exp(-a))``, ``g * act'(a) =
g * s * (1 + a * (1 - s))``, ``s = 1 / (1 + exp(-a))``; gelu_tanh: ``T = tanh(k * (a + c *
(a * a * a)))``, ``act(a) = (0.5 * a) * (1 + T)``, ``g * act'(a) = g * (0.5 * (1 + T) + (0.5 *
a) * (1 - T * T) * (k * (1 + 3c * (a * a))))``.

The reference below runs torch's own operations of that sequence (``F.silu`` /
``F.gelu(approximate="tanh")``, ``mul``, ``aten.silu_backward`` / ``aten.gelu_backward``), so it
is torch's autograd bit for bit on every device and dtype, only with the activation
recomputed in the backward instead of saved (tests/functional/test_swiglu.py checks it bitwise, and
checks the formulas above in float64).  The Triton kernel (``ojas_kernels.swiglu``) writes the
same sequence out in float32; where it can differ from torch in the last bit is written in
its module docstring.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor
from torch.nn import functional as F

from ojas_kernels.host import define_op, dynamo_apply
from ojas_ref.functional.autocast import autocast_off
from ojas_ref.functional._kernel_module import KernelModule
from ojas_ref.functional.dispatch import IMPL_ENVS, kernel_runs, refuse_double_backward
from ojas_ref.functional.transforms import refuse_function_transforms

__all__ = [
    "ACTIVATIONS",
    "BACKWARD_THEOREM",
    "BACKWARD_THEOREMS",
    "check_activation",
    "fused_swiglu",
    "swiglu",
    "swiglu_forward_reference",
    "swiglu_backward_reference",
]

#: The activations of the gate: "silu" (SwiGLU) and "gelu_tanh" (GeGLU, ``F.gelu(approximate="tanh")``).
ACTIVATIONS = ("silu", "gelu_tanh")

#: The theorem of the backward from the saved gate and up, per activation (cited by optimize_model's report).
BACKWARD_THEOREMS = {
    "silu": "Ojas.SwiGLU.Backward.swiglu_backward_eq_vjp",
    "gelu_tanh": "Ojas.SwiGLU.Backward.geglu_tanh_backward_eq_vjp",
}
BACKWARD_THEOREM = BACKWARD_THEOREMS["silu"]

_SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
IMPL_ENV = IMPL_ENVS["swiglu"]


def check_activation(activation: object) -> str:
    """``activation`` if it is one of :data:`ACTIVATIONS`, else ValueError naming the argument."""
    if not isinstance(activation, str) or activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    return activation


def _activate(a: Tensor, activation: str) -> Tensor:
    """torch's ``F.silu(a)`` or ``F.gelu(a, approximate="tanh")``."""
    return F.silu(a) if activation == "silu" else F.gelu(a, approximate="tanh")


def swiglu_forward_reference(a: Tensor, b: Tensor, activation: str = "silu") -> Tensor:
    """``rnd(rnd(act(a)) * b)``: torch's ``F.silu(a) * b`` or ``F.gelu(a, approximate="tanh") * b``."""
    return _activate(a, check_activation(activation)) * b


def swiglu_backward_reference(a: Tensor, b: Tensor, grad_h: Tensor, activation: str = "silu") -> tuple[Tensor, Tensor]:
    """``(da, db)`` from ``a``, ``b`` and ``dh`` alone, the activation recomputed: the operations of
    torch's autograd of ``act(a) * b``, ``da = act_backward(rnd(dh * b), a)``, ``db = rnd(dh * rnd(act(a)))``
    (over the reals Ojas.SwiGLU.Backward.swiglu_backward_eq_vjp for silu,
    Ojas.SwiGLU.Backward.geglu_tanh_backward_eq_vjp for gelu_tanh; module docstring)."""
    if check_activation(activation) == "silu":
        da = torch.ops.aten.silu_backward(grad_h * b, a)
    else:
        da = torch.ops.aten.gelu_backward(grad_h * b, a, approximate="tanh")
    return da, grad_h * _activate(a, activation)


def _check_inputs(gate: object, up: object) -> None:
    """Raise on bad input; the message names the argument."""
    for name, x in (("gate", gate), ("up", up)):
        if not isinstance(x, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__qualname__}")
        if not x.is_floating_point():
            raise TypeError(
                f"{name} has dtype {x.dtype}; swiglu needs a floating-point tensor "
                "(float16, bfloat16, float32, float64)"
            )
        if x.dtype not in _SUPPORTED_DTYPES:
            raise TypeError(f"{name} has dtype {x.dtype}; supported: float16, bfloat16, float32, float64")
    if up.dtype != gate.dtype:
        raise TypeError(
            f"up has dtype {up.dtype} but gate has dtype {gate.dtype}; they must share one dtype "
            "(cast one of them: swiglu does not promote)"
        )
    if up.device != gate.device:
        raise ValueError(f"up is on {up.device} but gate is on {gate.device}")
    if up.shape != gate.shape:
        raise ValueError(
            f"gate and up must have the same shape (no broadcasting), got gate {tuple(gate.shape)} "
            f"and up {tuple(up.shape)}"
        )


def _alternative(activation: str) -> str:
    """What to call for double backward, named in the refusal."""
    if activation == "silu":
        return "torch.nn.functional.silu(gate) * up"
    return "torch.nn.functional.gelu(gate, approximate='tanh') * up"


class _SwiGLUFunction(torch.autograd.Function):
    """Saves only ``a`` and ``b``; the backward recomputes the activation
    (Ojas.SwiGLU.Backward.swiglu_backward_eq_vjp, Ojas.SwiGLU.Backward.geglu_tanh_backward_eq_vjp).
    The kernels run whatever the autocast state (they call no op autocast casts); the reference
    runs with autocast off.  Under torch.compile the kernels run as the registered ops (below)."""

    @staticmethod
    def forward(ctx, a: Tensor, b: Tensor, use_triton: bool, activation: str) -> Tensor:
        if use_triton and torch.compiler.is_compiling():
            h = _forward_op(a, b, activation)
        elif use_triton:
            h = _KERNELS.load().swiglu_forward(a, b, activation=activation)
        else:
            h = swiglu_forward_reference(a, b, activation)
        ctx.save_for_backward(a, b)
        ctx.use_triton, ctx.activation = use_triton, activation
        return h

    @staticmethod
    def backward(ctx, grad_h: Tensor) -> tuple[Optional[Tensor], Optional[Tensor], None, None]:
        refuse_double_backward("swiglu", _alternative(ctx.activation))
        a, b = ctx.saved_tensors
        if ctx.use_triton and torch.compiler.is_compiling():
            da, db = _backward_op(a, b, grad_h, ctx.activation)
        elif ctx.use_triton:
            da, db = _KERNELS.load().swiglu_backward(a, b, grad_h, activation=ctx.activation)
        else:
            with autocast_off(grad_h.device.type):
                da, db = swiglu_backward_reference(a, b, grad_h, ctx.activation)
        needs = ctx.needs_input_grad
        return (da if needs[0] else None), (db if needs[1] else None), None, None


# ---------------------------------------------------------------------------
# The registered operators: what torch.compile sees
# ---------------------------------------------------------------------------
#
# Under torch.compile (and torch.export) ``_SwiGLUFunction`` runs the kernels as the operators
# ``ojas::swiglu_forward`` and ``ojas::swiglu_backward`` (``ojas_kernels.host.define_op``: opaque
# to Dynamo and Inductor, fake implementations giving contiguous outputs of the inputs' shape and
# dtype, no autograd kernel: Dynamo traces the Function, which calls the forward op in its forward
# and the backward op in its backward).  They call the eager path's ``swiglu_forward`` and
# ``swiglu_backward`` with the same arguments: the same values, the same theorems.  Eagerly
# ``_SwiGLUFunction`` calls the kernels without the dispatcher.


_KERNELS = KernelModule("swiglu", _SwiGLUFunction)


def _forward_impl(a: Tensor, b: Tensor, activation: str) -> Tensor:
    return _KERNELS.load().swiglu_forward(a, b, activation=activation)


def _forward_fake(a: Tensor, b: Tensor, activation: str) -> Tensor:
    return torch.empty_like(a, memory_format=torch.contiguous_format)


_forward_op = define_op(
    "swiglu_forward", "(Tensor a, Tensor b, str activation) -> Tensor", _forward_impl, _forward_fake
)


def _backward_impl(a: Tensor, b: Tensor, grad_h: Tensor, activation: str) -> tuple[Tensor, Tensor]:
    return _KERNELS.load().swiglu_backward(a, b, grad_h, activation=activation)


def _backward_fake(a: Tensor, b: Tensor, grad_h: Tensor, activation: str) -> tuple[Tensor, Tensor]:
    return tuple(torch.empty_like(t, memory_format=torch.contiguous_format) for t in (a, b))


_backward_op = define_op(
    "swiglu_backward",
    "(Tensor a, Tensor b, Tensor grad_h, str activation) -> (Tensor, Tensor)",
    _backward_impl,
    _backward_fake,
)


def _kernel_swiglu(gate: Tensor, up: Tensor, activation: str) -> Tensor:
    """The kernel path: ``_SwiGLUFunction`` (under torch.compile its ``apply``, which Dynamo
    traces, else the C one)."""
    if torch.compiler.is_compiling():
        return dynamo_apply(_SwiGLUFunction, gate, up, True, activation)
    _KERNELS.load()
    return _KERNELS.apply(gate, up, True, activation)


def swiglu(gate: Tensor, up: Tensor, *, activation: str = "silu", impl: Optional[str] = None) -> Tensor:
    """``F.silu(gate) * up`` (or GeGLU's ``F.gelu(gate, approximate="tanh") * up``), differentiable,
    saving only ``gate`` and ``up`` for backward.

    ``gate`` and ``up``: tensors of one shape (not broadcast), dtype (float16, bfloat16,
    float32 or float64; not promoted) and device; the output has that shape and dtype
    (contiguous).  ``activation``: "silu" (default) or "gelu_tanh"; any other value raises
    ValueError.  Rounding: as torch's ``act(gate) * up`` and its autograd, step by step (module
    docstring); the backward is the VJP of ``act(a) * b`` over the reals
    (Ojas.SwiGLU.Backward.swiglu_backward_eq_vjp for silu,
    Ojas.SwiGLU.Backward.geglu_tanh_backward_eq_vjp for gelu_tanh); no theorem covers the rounding.

    ``impl``: "triton" runs ``ojas_kernels.swiglu`` (CUDA tensors, or CPU tensors under
    TRITON_INTERPRET=1; not float64), "reference" the PyTorch operations, "auto" the kernel
    for CUDA tensors that are not float64 and the reference otherwise; ``None``: the setting of
    ``dispatch.use_impl``, else the environment variable OJAS_SWIGLU_IMPL read at import, else
    "auto" (``ojas_ref.functional.dispatch``).  First-order gradients only: a backward with
    ``create_graph=True`` raises RuntimeError; torch.func transforms raise NotImplementedError.

    Under ``torch.compile`` the kernel runs as the registered ops ``ojas::swiglu_forward`` /
    ``ojas::swiglu_backward`` (the same kernels with the same arguments, so the theorem
    citations above are unchanged; ``fullgraph=True`` works); the reference is traced as torch
    code.
    """
    refuse_function_transforms("swiglu")
    check_activation(activation)
    _check_inputs(gate, up)
    if kernel_runs("swiglu", impl, gate, up):
        return _kernel_swiglu(gate, up, activation)
    with autocast_off(gate.device.type):
        return _SwiGLUFunction.apply(gate, up, False, activation)


def fused_swiglu(gate: Tensor, up: Tensor, activation: str = "silu") -> Tensor:
    """The kernel's :func:`swiglu`, for arguments known to be right (one shape, one kernel dtype,
    one device, autocast off or at their dtype: ``dispatch.plain_kernel_call``; an activation of
    :data:`ACTIVATIONS`). Theorems as :func:`swiglu`'s (Ojas.SwiGLU.Backward.swiglu_backward_eq_vjp,
    Ojas.SwiGLU.Backward.geglu_tanh_backward_eq_vjp; under torch.compile the op ``ojas::swiglu_forward``)."""
    return _kernel_swiglu(gate, up, activation)
