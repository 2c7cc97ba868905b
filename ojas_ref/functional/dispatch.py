"""Which implementation a primitive runs (the argument ``impl`` or an environment variable),
and the refusal of double backward that all their backward passes share.

Every primitive takes ``impl`` in ("auto", "reference", "triton"), ``None`` reading its
environment variable (``OJAS_<NAME>_IMPL``, default "auto"); what "auto" picks and what
"triton" refuses is the primitive's own rule.
"""

from __future__ import annotations

import os
from typing import Optional

import torch
from torch import Tensor

__all__ = ["IMPLS", "KERNEL_DTYPES", "plain_kernel_call", "refuse_double_backward", "requested_impl",
           "require_kernel_device", "use_elementwise_kernel"]

IMPLS = ("auto", "reference", "triton")
#: the dtypes every Triton kernel of the project takes
KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def requested_impl(impl: Optional[str], env: str) -> str:
    """``impl``, or the environment variable ``env`` when it is None (default "auto"), checked."""
    if impl is None:
        impl = os.environ.get(env, "auto")
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS} (or set {env}), got {impl!r}")
    return impl


def plain_kernel_call(env: str, first: Tensor, *others: Tensor) -> bool:
    """Whether a call with ``impl=None`` on these tensors is the plain case, in which the
    primitive's general path would run its kernel on them unchanged: ``env`` unset or "auto" or
    "triton", the tensors on one CUDA device (or the CPU under TRITON_INTERPRET=1 with
    "triton") in one of :data:`KERNEL_DTYPES`, no torch.func
    transform, autocast off or at their dtype (nothing to cast).  The integration adapters then
    skip the general path's argument checks, which the kernel wrappers' own checks and the
    adapter's fixed layout make redundant; anything else takes the general path.  (The host
    time of those checks is what a host-bound step of a small model spends: benchmarks/RESULTS.md.)"""
    impl = os.environ.get(env, "auto")
    if impl not in ("auto", "triton"):
        return False
    dtype, device = first.dtype, first.device
    on_device = device.type == "cuda" or (impl == "triton" and os.environ.get("TRITON_INTERPRET") == "1")
    if not on_device or dtype not in KERNEL_DTYPES or any(t.dtype != dtype or t.device != device for t in others):
        return False
    if torch._C._functorch.maybe_current_level() is not None:
        return False
    return not torch.is_autocast_enabled("cuda") or torch.get_autocast_dtype("cuda") == dtype


def use_elementwise_kernel(impl: Optional[str], env: str, x: Tensor) -> bool:
    """The rule of the elementwise primitives (``swiglu``, ``relu``): whether to run the Triton kernel
    on ``x``.  "reference": no; "auto": a CUDA tensor of :data:`KERNEL_DTYPES`; "triton": yes, and
    float64 or a CPU tensor without TRITON_INTERPRET=1 raise; ``None`` reads ``env``."""
    impl = requested_impl(impl, env)
    if impl == "reference":
        return False
    if impl == "auto":
        return x.is_cuda and x.dtype in KERNEL_DTYPES
    if x.dtype not in KERNEL_DTYPES:
        raise TypeError(f"impl='triton' supports float16, bfloat16 and float32, got {x.dtype}; "
                        "use impl='reference' for float64")
    require_kernel_device(x)
    return True


def require_kernel_device(t: Tensor) -> None:
    """``impl='triton'`` runs on CUDA tensors, or on CPU ones under Triton's interpreter."""
    if not t.is_cuda and os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("impl='triton' needs CUDA tensors, or TRITON_INTERPRET=1 to run the kernel on CPU")


def refuse_double_backward(name: str, alternative: str) -> None:
    """Raise in a backward pass run with ``create_graph=True`` (grad mode is on there).

    The primitives' backward passes are not differentiable: their gradients would enter the
    graph as constants and a second derivative through them would silently miss terms.
    ``torch.autograd.function.once_differentiable`` is not enough: it raises only when the
    incoming gradient requires grad, and the gradient of ``out.sum()`` does not."""
    if torch.is_grad_enabled():
        raise RuntimeError(f"{name} does not support double backward (create_graph=True through it, e.g. a "
                           f"gradient penalty or gradgradcheck): its backward is not differentiable; use "
                           f"{alternative} for higher-order gradients")
