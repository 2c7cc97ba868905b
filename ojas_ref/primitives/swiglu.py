"""SwiGLU, ``h = silu(gate) * up``, saving only ``gate`` and ``up`` for backward.

Hugging Face's Llama MLP computes ``down_proj(act_fn(gate_proj(x)) * up_proj(x))``; torch's
autograd of ``F.silu(a) * b`` keeps three ``[tokens, intermediate]`` tensors (``a``, ``b``
and ``silu(a)``).  Here the backward recomputes ``silu(a)`` and ``sigmoid(a)`` from ``a``
(a smooth activation reconstructed instead of stored), so two are kept: a third less MLP
activation memory, and one kernel each way (Triton on CUDA).

Theorem (over the reals): ``Ojas.SwiGLU.Backward.swiglu_backward_eq_vjp``: with only ``a``
and ``b`` saved and ``s = sigmoid(a)`` recomputed,

    da = dh * b * s * (1 + a * (1 - s)),    db = dh * a * s

are ``dh`` times the derivatives of ``silu(a) * b`` in ``a`` and ``b``.  No theorem covers
the rounding.  Both implementations round where torch's autograd of ``F.silu(a) * b``
rounds (compute in float32, or float64 for float64; ``rnd`` rounds to the input dtype):

    forward   h  = rnd(rnd(a / (1 + exp(-a))) * b)            torch's silu, then mul
    backward  g  = rnd(dh * b)                                  mul's backward, into silu
              da = rnd(g * s * (1 + a * (1 - s))),  s = 1 / (1 + exp(-a))   silu_backward
              db = rnd(dh * rnd(a / (1 + exp(-a))))             mul's backward, saved silu

The reference below runs torch's own operations of that sequence (``F.silu``, ``mul``,
``aten.silu_backward``), so it is torch's autograd bit for bit on every device and dtype, only
with ``silu(a)`` recomputed in the backward instead of saved (tests/test_swiglu.py checks it
bitwise, and checks the formula above in float64).  The Triton kernel (``ojas_kernels.swiglu``)
writes the same sequence out in float32; where it can differ from torch in the last bit is
written in its module docstring.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from ojas_ref.primitives.autocast import autocast_off
from ojas_ref.primitives.dispatch import IMPLS, refuse_double_backward, require_kernel_device, requested_impl
from ojas_ref.primitives.transforms import refuse_function_transforms

__all__ = ["BACKWARD_THEOREM", "SwiGLU", "fused_swiglu", "swiglu", "swiglu_forward_reference", "swiglu_backward_reference"]

#: The theorem of the backward from the saved gate and up (cited by optimize_model's report).
BACKWARD_THEOREM = "Ojas.SwiGLU.Backward.swiglu_backward_eq_vjp"

_SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
IMPL_ENV = "OJAS_SWIGLU_IMPL"


def swiglu_forward_reference(a: Tensor, b: Tensor) -> Tensor:
    """``rnd(rnd(silu(a)) * b)``: torch's ``F.silu(a) * b``."""
    return F.silu(a) * b


def swiglu_backward_reference(a: Tensor, b: Tensor, grad_h: Tensor) -> tuple[Tensor, Tensor]:
    """``(da, db)`` from ``a``, ``b`` and ``dh`` alone, silu recomputed: the operations of torch's
    autograd of ``F.silu(a) * b``, ``da = silu_backward(rnd(dh * b), a)``, ``db = rnd(dh * rnd(silu(a)))``
    (Ojas.SwiGLU.Backward.swiglu_backward_eq_vjp over the reals; module docstring)."""
    da = torch.ops.aten.silu_backward(grad_h * b, a)
    return da, grad_h * F.silu(a)


def _check_inputs(gate: object, up: object) -> None:
    """Raise on bad input; the message names the argument."""
    for name, x in (("gate", gate), ("up", up)):
        if not isinstance(x, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__qualname__}")
        if not x.is_floating_point():
            raise TypeError(f"{name} has dtype {x.dtype}; swiglu needs a floating-point tensor "
                            "(float16, bfloat16, float32, float64)")
        if x.dtype not in _SUPPORTED_DTYPES:
            raise TypeError(f"{name} has dtype {x.dtype}; supported: float16, bfloat16, float32, float64")
    if up.dtype != gate.dtype:
        raise TypeError(f"up has dtype {up.dtype} but gate has dtype {gate.dtype}; they must share one dtype "
                        "(cast one of them: swiglu does not promote)")
    if up.device != gate.device:
        raise ValueError(f"up is on {up.device} but gate is on {gate.device}")
    if up.shape != gate.shape:
        raise ValueError(f"gate and up must have the same shape (no broadcasting), got gate {tuple(gate.shape)} "
                         f"and up {tuple(up.shape)}")


def _resolve_impl(impl: Optional[str], gate: Tensor) -> bool:
    """Whether to run the Triton kernel (True) or the reference (False)."""
    impl = requested_impl(impl, IMPL_ENV)
    if impl == "reference":
        return False
    if impl == "auto":
        return gate.is_cuda and gate.dtype in _KERNEL_DTYPES
    if gate.dtype not in _KERNEL_DTYPES:
        raise TypeError(f"impl='triton' supports float16, bfloat16 and float32, got {gate.dtype}; "
                        "use impl='reference' for float64")
    require_kernel_device(gate)
    return True


class _SwiGLUFunction(torch.autograd.Function):
    """Saves only ``a`` and ``b``; the backward recomputes silu and sigmoid
    (Ojas.SwiGLU.Backward.swiglu_backward_eq_vjp)."""

    @staticmethod
    def forward(ctx, a: Tensor, b: Tensor, use_triton: bool) -> Tensor:
        if use_triton:
            from ojas_kernels.swiglu import swiglu_forward

            h = swiglu_forward(a, b)
        else:
            h = swiglu_forward_reference(a, b)
        ctx.save_for_backward(a, b)
        ctx.use_triton = use_triton
        return h

    @staticmethod
    def backward(ctx, grad_h: Tensor) -> tuple[Optional[Tensor], Optional[Tensor], None]:
        refuse_double_backward("swiglu", "torch.nn.functional.silu(gate) * up")
        a, b = ctx.saved_tensors
        with autocast_off(grad_h.device.type):
            if ctx.use_triton:
                from ojas_kernels.swiglu import swiglu_backward

                da, db = swiglu_backward(a, b, grad_h)
            else:
                da, db = swiglu_backward_reference(a, b, grad_h)
        return (da if ctx.needs_input_grad[0] else None), (db if ctx.needs_input_grad[1] else None), None


def swiglu(gate: Tensor, up: Tensor, *, impl: Optional[str] = None) -> Tensor:
    """``F.silu(gate) * up``, differentiable, saving only ``gate`` and ``up`` for backward.

    ``gate`` and ``up``: tensors of one shape (not broadcast), dtype (float16, bfloat16,
    float32 or float64; not promoted) and device; the output has that shape and dtype
    (contiguous).  Rounding: as torch's ``F.silu(gate) * up`` and its autograd, step by
    step (module docstring); the backward is the VJP of ``silu(a) * b`` over the reals
    (Ojas.SwiGLU.Backward.swiglu_backward_eq_vjp); no theorem covers the rounding.

    ``impl``: "triton" runs ``ojas_kernels.swiglu`` (CUDA tensors, or CPU tensors under
    TRITON_INTERPRET=1; not float64), "reference" the PyTorch operations, "auto" the kernel
    for CUDA tensors that are not float64 and the reference otherwise; ``None`` reads
    OJAS_SWIGLU_IMPL, default "auto".  First-order gradients only: a backward with
    ``create_graph=True`` raises RuntimeError; torch.func transforms raise NotImplementedError.
    """
    refuse_function_transforms("swiglu")
    _check_inputs(gate, up)
    use_triton = _resolve_impl(impl, gate)
    with autocast_off(gate.device.type):
        return _SwiGLUFunction.apply(gate, up, use_triton)


def fused_swiglu(gate: Tensor, up: Tensor) -> Tensor:
    """The kernel's :func:`swiglu`, for arguments known to be right (one shape, one kernel dtype,
    one device, autocast off or at their dtype: ``dispatch.plain_kernel_call``). Theorem as
    :func:`swiglu`'s."""
    return _SwiGLUFunction.apply(gate, up, True)


class SwiGLU(nn.Module):
    """``forward(gate, up) = swiglu(gate, up)``: ``F.silu(gate) * up`` saving only gate and up
    (see :func:`swiglu`; Ojas.SwiGLU.Backward.swiglu_backward_eq_vjp)."""

    def __init__(self, impl: Optional[str] = None) -> None:
        super().__init__()
        if impl is not None and impl not in IMPLS:
            raise ValueError(f"impl must be one of {IMPLS} or None, got {impl!r}")
        self.impl = impl

    def forward(self, gate: Tensor, up: Tensor) -> Tensor:
        return swiglu(gate, up, impl=self.impl)

    def extra_repr(self) -> str:
        return "" if self.impl is None else f"impl={self.impl!r}"
