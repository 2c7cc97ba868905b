"""Row-sparse gradients (``nn.Embedding(sparse=True)``) in
:class:`~ojas_ref.optim.in_backward.InBackwardOptimizer`, plain SGD only: which settings give the
dense step (:func:`sparse_unsupported`) and the order of the row sums (:func:`coalesce_in_order`);
the update itself is :meth:`InBackwardOptimizer._update_sparse`.

``Ojas.OptimizerInBackward.SparseRows.sgd_sparse_rows_eq``: with momentum 0 and weight decay 0,
updating the rows the gradient touches is the dense step (the other rows are unchanged);
``SparseRows.lazy_adamw_neq_dense`` / ``lazy_momentum_neq_dense``: not for AdamW or momentum, which
raise."""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from ojas_ref.optim._fast_paths import plain_sgd_violations


def sparse_unsupported(optimizer_class: type, group: dict[str, Any], grad: Tensor, plain: bool) -> Optional[str]:
    """Why the sparse gradient ``grad`` of a parameter of ``group``, stepped by ``optimizer_class``,
    cannot be updated exactly as the dense gradient with zero rows would be, or None; ``plain``: the
    optimizer has ``accumulation_steps=1``, no ``max_grad_norm`` and no DDP / FSDP2."""
    if optimizer_class is not torch.optim.SGD:
        return (f"optimizer_class is {optimizer_class.__name__}, not torch.optim.SGD: only plain SGD's "
                "step leaves a row with zero gradient unchanged (Ojas.OptimizerInBackward.SparseRows."
                "sgd_sparse_rows_eq); AdamW / Adam decay their moments and weights on every row, so a row "
                "that got no gradient still changes (SparseRows.adamw_zero_row_changes) and a lazy update of "
                "the touched rows is not the dense step (a subclass of SGD may change the step)")
    bad = plain_sgd_violations(group)
    if bad:
        return (f"SGD with {', '.join(bad)}: only momentum=0, weight_decay=0, maximize=False, fused=False, "
                "differentiable=False is supported. With momentum the buffer of a row with zero gradient "
                "decays and still moves the row (SparseRows.momentum_zero_row_changes), with weight decay the "
                "row shrinks, with maximize the dense step adds +0.0 to an untouched row (turning a -0.0 "
                "weight into +0.0, which the sparse step does not), fused SGD has no sparse path")
    if not plain:
        return ("sparse gradients are supported with accumulation_steps=1, no max_grad_norm and no "
                "DDP/FSDP2 only: clip_grad_norm_'s norm of the dense [V, D] gradient and the norm of the "
                "coalesced sparse rows are equal in reals but reduced in a different order (not bitwise), "
                "and sparse accumulation / reduction are not mirrored here")
    if grad.layout is not torch.sparse_coo or grad.sparse_dim() != 1:
        return (f"the gradient is {grad.layout} with sparse_dim {grad.sparse_dim()}: only row-sparse COO "
                "gradients (sparse_dim 1, as nn.Embedding(sparse=True) gives) are supported")
    if grad.dtype not in (torch.float32, torch.float64):
        return (f"the gradient is {grad.dtype}: only float32 / float64 row sums are the dense backward's "
                "bit for bit (measured: float16 / bfloat16 dense embedding backward rounds differently)")
    return None


def coalesce_in_order(grad: Tensor) -> Tensor:
    """``grad`` (row-sparse COO) coalesced with each row's duplicates summed in the order of the
    indices, from zero: the order of the dense CPU embedding backward, so that the rows are those
    of the dense gradient bit for bit (``Tensor.coalesce`` sums in another order; tested)."""
    if grad.is_coalesced():
        return grad
    rows, inverse = torch.unique(grad._indices()[0], sorted=True, return_inverse=True)
    values = grad._values()
    summed = values.new_zeros((rows.numel(),) + tuple(values.shape[1:])).index_add_(0, inverse, values)
    return torch.sparse_coo_tensor(rows.unsqueeze(0), summed, grad.shape, is_coalesced=True,
                                   check_invariants=False)
