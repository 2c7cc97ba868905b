"""Global-norm clipping for :class:`~ojas_ref.optim.in_backward.InBackwardOptimizer`
(``max_grad_norm``): the passes of its backward (:class:`_Mode`) and ``clip_grad_norm_``'s norms.

``Ojas.InBackward.Repairs.two_pass_clip_backprop_eq_standard``: two backward passes over the
same graph, the first recording each gradient's norm and freeing it, the second updating at each hook
with the clip coefficient of the total norm, are ``loss.backward(); clip_grad_norm_; step()``. The Coq
total is ``sqrt`` of the sum of squared norms; here it is ``clip_grad_norm_``'s norm of the
per-gradient norms (:func:`total_norm`), the same real number, in torch's float arithmetic."""

from __future__ import annotations

from enum import Enum
from typing import Iterable, Optional

import torch
from torch import Tensor
from torch.utils._foreach_utils import _group_tensors_by_device_and_dtype, _has_foreach_support

# torch.nn.utils.clip_grad_norm_'s default norm type, the only one supported.
_NORM_TYPE = 2.0


class _Mode(Enum):
    UPDATE = "update"  # hooks update (or accumulate, before the last micro-batch)
    NORM = "norm"  # first pass of clipping: hooks record the gradient norm and free it
    CLIP = "clip"  # second pass of clipping: hooks clip with the total norm, then update


def _grad_norm(grad: Tensor) -> Tensor:
    """The norm of one gradient as ``clip_grad_norm_`` (``foreach=None``) computes it."""
    if _has_foreach_support([grad], grad.device):
        return torch._foreach_norm([grad], _NORM_TYPE)[0]
    return torch.linalg.vector_norm(grad, _NORM_TYPE)


def total_norm(params: Iterable[Tensor], norms: dict[Tensor, Tensor], zeros: set[int]) -> Optional[Tensor]:
    """``clip_grad_norm_``'s total over ``params`` (in ``param_groups`` order) that have a norm in
    ``norms`` or whose ``id()`` is in ``zeros``: the norm of the per-gradient norms, in its order (with
    a norm 0 at the place of each zero gradient of ``zero_grad(set_to_none=False)``, which
    ``clip_grad_norm_`` counts); None without any."""
    params = [p for p in params if p in norms or id(p) in zeros]
    if not params:
        return None
    groups = _group_tensors_by_device_and_dtype([params], with_indices=True)
    ordered = [
        norms[p] if p in norms else p.new_zeros(())
        for _, (_, indices) in groups.items()
        for p in (params[i] for i in indices)
    ]
    first_device = params[0].device
    return torch.linalg.vector_norm(torch.stack([n.to(first_device) for n in ordered]), _NORM_TYPE)
