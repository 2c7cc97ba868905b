"""torch's autocast rule for the ops ojas replaces, shared by ``attention`` and ``linear_cross_entropy``.

``scaled_dot_product_attention`` and ``linear`` are on autocast's lower-precision list:
under ``torch.autocast`` on a device type, their floating-point tensor arguments on that
device type other than float64 are cast to the autocast dtype (bool masks, other
devices and non-tensors are left for the argument checks). The casts are autograd ops,
so each gradient comes back in its tensor's own dtype; the primitives then compute with
autocast off, forward and backward (which runs under the caller's autocast state). A
dtype rule of torch's, outside the Coq specs (which are over the reals); tested against
SDPA and F.linear under autocast.
"""

from __future__ import annotations

import contextlib
from typing import Any, Optional

import torch

__all__ = ["autocast_dtype", "autocast_off", "cast_for_autocast"]


def autocast_dtype(device_type: str) -> Optional[torch.dtype]:
    """The autocast dtype when autocast is enabled for ``device_type``, else None. CPU and CUDA
    always have autocast, so torch.compile never meets ``is_autocast_available`` for them (torch
    2.11's Dynamo cannot trace it)."""
    available = device_type in ("cpu", "cuda") or torch.amp.is_autocast_available(device_type)
    if available and torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return None


def cast_for_autocast(device_type: str, *tensors: Any) -> tuple:
    """``tensors`` as autocast hands them to a lower-precision op on ``device_type``."""
    dtype = autocast_dtype(device_type)
    if dtype is None:
        return tensors
    return tuple(
        t.to(dtype)
        if (
            isinstance(t, torch.Tensor)
            and t.is_floating_point()
            and t.dtype != torch.float64
            and t.device.type == device_type
        )
        else t
        for t in tensors
    )


def autocast_off(device_type: str) -> contextlib.AbstractContextManager:
    """A context with autocast disabled for ``device_type`` (nothing to do when it is off)."""
    if autocast_dtype(device_type) is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type, enabled=False)
