"""Row-sparse gradients (``nn.Embedding(sparse=True)``) in
:class:`~ojas_ref.optim.in_backward.InBackwardOptimizer`, plain SGD only: which settings give the
dense step (:func:`sparse_unsupported`), the order of the row sums (:func:`coalesce_in_order`) and
the update (:meth:`SparseRowsMixin._update_sparse`, ``InBackwardOptimizer._update_sparse``).

``Ojas.InBackward.SparseRows.sgd_sparse_rows_eq``: with momentum 0 and weight decay 0,
updating the rows the gradient touches is the dense step (the other rows are unchanged);
``SparseRows.lazy_adamw_neq_dense`` / ``lazy_momentum_neq_dense``: not for AdamW or momentum, which
raise."""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from ojas_ref.optim._consumed_grad import ConsumedGrads
from ojas_ref.optim._distributed import DataParallel
from ojas_ref.optim._fast_paths import plain_sgd_violations


def sparse_unsupported(optimizer_class: type, group: dict[str, Any], grad: Tensor, plain: bool) -> Optional[str]:
    """Why the sparse gradient ``grad`` of a parameter of ``group``, stepped by ``optimizer_class``,
    cannot be updated exactly as the dense gradient with zero rows would be, or None; ``plain``: the
    optimizer has ``accumulation_steps=1``, no ``max_grad_norm`` and no DDP / FSDP2."""
    if optimizer_class is not torch.optim.SGD:
        return (
            f"optimizer_class is {optimizer_class.__name__}, not torch.optim.SGD: only plain SGD's "
            "step leaves a row with zero gradient unchanged (Ojas.InBackward.SparseRows."
            "sgd_sparse_rows_eq); AdamW / Adam decay their moments and weights on every row, so a row "
            "that got no gradient still changes (SparseRows.adamw_zero_row_changes) and a lazy update of "
            "the touched rows is not the dense step (a subclass of SGD may change the step)"
        )
    bad = plain_sgd_violations(group)
    if bad:
        return (
            f"SGD with {', '.join(bad)}: only momentum=0, weight_decay=0, maximize=False, fused=False, "
            "differentiable=False is supported. With momentum the buffer of a row with zero gradient "
            "decays and still moves the row (SparseRows.momentum_zero_row_changes), with weight decay the "
            "row shrinks, with maximize the dense step adds +0.0 to an untouched row (turning a -0.0 "
            "weight into +0.0, which the sparse step does not), fused SGD has no sparse path"
        )
    if not plain:
        return (
            "sparse gradients are supported with accumulation_steps=1, no max_grad_norm and no "
            "DDP/FSDP2 only: clip_grad_norm_'s norm of the dense [V, D] gradient and the norm of the "
            "coalesced sparse rows are equal in reals but reduced in a different order (not bitwise), "
            "and sparse accumulation / reduction are not mirrored here"
        )
    if grad.layout is not torch.sparse_coo or grad.sparse_dim() != 1:
        return (
            f"the gradient is {grad.layout} with sparse_dim {grad.sparse_dim()}: only row-sparse COO "
            "gradients (sparse_dim 1, as nn.Embedding(sparse=True) gives) are supported"
        )
    if grad.dtype not in (torch.float32, torch.float64):
        return (
            f"the gradient is {grad.dtype}: only float32 / float64 row sums are the dense backward's "
            "bit for bit (measured: float16 / bfloat16 dense embedding backward rounds differently)"
        )
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
    return torch.sparse_coo_tensor(rows.unsqueeze(0), summed, grad.shape, is_coalesced=True, check_invariants=False)


class SparseRowsMixin:
    """The update of a parameter with a row-sparse gradient, mixed into
    :class:`~ojas_ref.optim.in_backward.InBackwardOptimizer` (its hook calls :meth:`_update_sparse`);
    reads the optimizer's state annotated below (and calls its ``_note_hyper``)."""

    # The optimizer's (InBackwardOptimizer.__init__)
    param_groups: list[dict[str, Any]]
    optimizer_class: type[torch.optim.Optimizer]
    accumulation_steps: int
    max_grad_norm: Optional[float]
    _group_opts: list[Optional[torch.optim.Optimizer]]
    _updated: set[int]
    _data_parallel: DataParallel
    _consumed: ConsumedGrads

    def _update_sparse(self, p: Tensor, index: int) -> None:
        """Update ``p`` alone, now, from its sparse gradient (``nn.Embedding(sparse=True)``): no dense
        ``[V, D]`` gradient is allocated. Only plain SGD (momentum 0, weight decay 0, not maximize, not
        fused), one backward per update, no clipping, one process, float32 / float64: else raise with the
        reason (:func:`sparse_unsupported`).

        Why this is the dense step:
        Ojas.InBackward.SparseRows.sgd_sparse_rows_eq (an SGD update with a gradient that is zero
        outside a set of rows is the update of those rows, the others unchanged;
        Ojas.InBackward.SparseRows.rows_update_eq_dense for any rule that leaves an element
        unchanged under a zero gradient), with Ojas.InBackward.Equivalence.sgd_fused_eq_standard
        for the update in the hook. In floats: torch's sparse ``add_`` writes ``x + (-lr) * g`` on the rows
        of the gradient, the same kernel as the dense ``add_`` on them (tested bitwise), and the dense step
        on an untouched row is ``x + (-lr) * (+0.0) = x + (-0.0) = x`` bit for bit for every x (-0.0 and
        infinities included); the duplicate rows of a batch are summed in index order from zero
        (:func:`coalesce_in_order`), as the dense CPU embedding backward does
        (tested bitwise; a CUDA dense backward sums in another order: equal in reals, rounding not checked).
        Not the dense step: AdamW / momentum / weight decay (SparseRows.adamw_zero_row_changes,
        SparseRows.momentum_zero_row_changes)."""
        plain = self.accumulation_steps == 1 and self.max_grad_norm is None and not self._data_parallel.active()
        reason = sparse_unsupported(self.optimizer_class, self.param_groups[index], p.grad, plain)
        if reason is not None:
            p.grad = None
            raise RuntimeError(
                f"InBackwardOptimizer does not support sparse gradients (e.g. "
                f"nn.Embedding(sparse=True)) here: {reason}. Use a dense gradient (sparse=False)"
            )
        with torch.no_grad():
            p.grad = coalesce_in_order(p.grad)
        bucket_opt = self._group_opts[index]
        group = bucket_opt.param_groups[0]
        group.update((k, v) for k, v in self.param_groups[index].items() if k not in ("params", "param_names"))
        group["params"] = [p]
        self._updated.add(id(p))
        self._note_hyper(index)
        try:
            bucket_opt.step()
        except BaseException:
            p.grad = None
            raise
        finally:
            group["params"] = []
        self._consumed.consume([p])
