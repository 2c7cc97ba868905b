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

__all__ = ["IMPLS", "refuse_double_backward", "requested_impl", "require_kernel_device"]

IMPLS = ("auto", "reference", "triton")


def requested_impl(impl: Optional[str], env: str) -> str:
    """``impl``, or the environment variable ``env`` when it is None (default "auto"), checked."""
    if impl is None:
        impl = os.environ.get(env, "auto")
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS} (or set {env}), got {impl!r}")
    return impl


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
