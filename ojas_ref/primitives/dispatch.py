"""Which implementation a primitive runs: the argument ``impl`` or an environment variable.

Every primitive takes ``impl`` in ("auto", "reference", "triton"), ``None`` reading its
environment variable (``OJAS_<NAME>_IMPL``, default "auto"); what "auto" picks and what
"triton" refuses is the primitive's own rule.
"""

from __future__ import annotations

import os
from typing import Optional

from torch import Tensor

__all__ = ["IMPLS", "requested_impl", "require_kernel_device"]

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
