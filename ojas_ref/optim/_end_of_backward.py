"""The general path of :class:`~ojas_ref.optim.in_backward.InBackwardOptimizer`'s hooks and the end
of the backward pass: gradient accumulation (``accumulation_steps``), the passes of clipping
(``max_grad_norm``), DDP's and FSDP2's reduced gradients (``ojas_ref/optim/_distributed.py``), and
the end-of-backward callbacks that update what the hooks deferred. The plain case (one process, no
accumulation, no clipping) is :meth:`InBackwardOptimizer._hook` alone.

``Ojas.InBackward.Repairs.deferred_accum_backprop_eq_standard``: accumulating in micro-batches
``1..k-1`` and updating at the hooks of the ``k``-th is the standard loop when the ``k``-th contributes
to every parameter an earlier one did; a parameter without a gradient in the ``k``-th is stepped at the
end of its backward (:meth:`EndOfBackwardMixin._end_of_backward`), as ``optimizer.step()`` steps it."""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from ojas_ref.optim._clipping import _Mode, _grad_norm
from ojas_ref.optim._consumed_grad import _live_grad
from ojas_ref.optim._distributed import DataParallel, DTensor, several_processes
from ojas_ref.optim._group_checks import GroupChecks
from ojas_ref.optim._overlap import UpdateStreams


class EndOfBackwardMixin:
    """The hook's general path and the end of the backward pass, mixed into
    :class:`~ojas_ref.optim.in_backward.InBackwardOptimizer`, whose state annotated below it reads
    and sets (and whose ``_params``, ``_update_sparse``, ``_add_to_bucket``, ``_flush_all`` and
    ``_zero_grad_params`` it calls)."""

    # The optimizer's (InBackwardOptimizer.__init__)
    param_groups: list[dict[str, Any]]
    accumulation_steps: int
    max_grad_norm: Optional[float]
    _group_of: dict[Tensor, int]
    _mode: _Mode
    _norms: dict[Tensor, Tensor]
    _micro_batch: int
    _queued_task: Optional[int]
    _plain_pass: bool
    _data_parallel: DataParallel
    _group_checks: GroupChecks
    _overlap: UpdateStreams

    def _hook_general(self, p: Tensor) -> None:
        """The hook with clipping, accumulation, DDP or FSDP2."""
        if p.grad.is_sparse:
            self._update_sparse(p, self._group_of[p])  # raises: sparse only on the plain path
            return
        if self._mode is _Mode.NORM:
            with torch.no_grad():
                self._norms[p] = _grad_norm(p.grad)
            p.grad = None
            return
        ddp = self._data_parallel.ddp(p)
        distributed = ddp is not None or isinstance(p.grad, DTensor)
        if distributed and self.accumulation_steps > 1:
            raise RuntimeError(
                "accumulation_steps > 1 is not supported under DistributedDataParallel or FSDP2 (fully_shard): "
                "keep accumulation_steps=1 and run micro-batches 1..k-1 inside ddp_model.no_sync() (FSDP2: "
                "after model.set_requires_gradient_sync(False), and True again for the k-th); the update then "
                "runs once, when the accumulated gradient is reduced"
            )
        if ddp is not None:
            # DDP copies the average of the ranks' gradients into p.grad in its own end-of-backward
            # callback: update after it (DataParallel.after_reduction). Under no_sync() (DDP's last forward did
            # not prepare a reduction), keep accumulating.
            if ddp.require_forward_param_sync:
                self._data_parallel.reduces_this_pass(ddp)
            return
        if distributed:  # FSDP2 runs the hook on the shard after the reduce-scatter
            self._on_reduced(p)
            return
        self._data_parallel.warn_if_local(p)
        if self._mode is _Mode.CLIP:
            self._add_to_bucket(p)
        elif self.max_grad_norm is not None and self.accumulation_steps == 1 and self._data_parallel.active():
            self._data_parallel.reduced.append(p)  # not reduced, but clipped with them at the end of backward
        elif self.max_grad_norm is not None and self.accumulation_steps == 1:
            raise RuntimeError(
                "with max_grad_norm (and accumulation_steps=1) run the backward pass as "
                "optimizer.backward(loss), not loss.backward(): clipping needs the norm of every gradient "
                "before the first update, so the gradients are computed twice"
            )
        elif self._micro_batch + 1 == self.accumulation_steps and self.max_grad_norm is None:
            self._add_to_bucket(p)
        # else: an earlier micro-batch (or clipping after accumulation): keep accumulating in p.grad

    def _on_reduced(self, p: Tensor) -> None:
        """``p.grad`` is FSDP2's reduce-scattered shard of the gradient: update in its bucket, or
        with clipping after the reduction of every gradient, with their global norm."""
        if self.max_grad_norm is None:
            self._add_to_bucket(p)
        else:
            self._data_parallel.reduced.append(p)
            self._data_parallel.after_reduction = True

    def _queue_end_of_backward(self) -> None:
        """Have :meth:`_end_of_backward` run once at the end of the current backward pass; at
        its first hook, decide whether the pass takes the plain path of :meth:`_hook`: no
        accumulation, no clipping, no DDP or FSDP2, one process (else a plain parameter may
        need :meth:`DataParallel.warn_if_local <ojas_ref.optim._distributed.DataParallel.warn_if_local>`)."""
        task = torch._C._current_graph_task_id()
        if task != self._queued_task:
            self._group_checks.check_layout(self.param_groups, self._group_of)
            self._queued_task = task
            torch.autograd.Variable._execution_engine.queue_callback(self._end_of_backward)
            self._plain_pass = (
                self.accumulation_steps == 1
                and self.max_grad_norm is None
                and not self._data_parallel.active()
                and not several_processes()
            )

    @torch.no_grad()
    def _end_of_backward(self) -> None:
        """Update the pending buckets; count the micro-batch; after the k-th, update what is
        left (parameters without a gradient in it; all of them, clipped, with clipping); then, if
        reduced gradients wait (DDP, or clipping under FSDP2), queue their update."""
        self._queued_task = None
        self._flush_all()
        self._overlap.join()
        if self._mode is not _Mode.CLIP and self.accumulation_steps > 1:
            self._micro_batch += 1
            if self._micro_batch == self.accumulation_steps:
                self._micro_batch = 0
                self._clip_and_update([p for p in self._params() if _live_grad(p) is not None])
        if self._data_parallel.after_reduction:
            # queued now, so after every callback queued during the backward pass: DDP's reducer
            # queues its finalize_backward (wait for the all-reduces, copy the averages into
            # .grad) from its hooks, FSDP2 its root post-backward callback
            torch.autograd.Variable._execution_engine.queue_callback(self._after_reduction_callback)
        else:
            self._group_checks.check_unhooked(self.param_groups, self._group_of)

    @torch.no_grad()
    def _after_reduction_callback(self) -> None:
        """Update the parameters whose reduced gradients were waiting (with clipping, all of this
        pass's, with their global norm): those of the DDP models that reduced this pass (including
        parameters unused on this rank, to which DDP gave the average; not those no rank used,
        which DDP leaves without a gradient and the standard loop does not step), and those held
        for clipping."""
        dp = self._data_parallel
        synced, reduced = dp.synced, set(dp.reduced)
        dp.reset()
        self._clip_and_update(
            [p for p in self._params() if _live_grad(p) is not None and (p in reduced or dp.reduced_in(p, synced))]
        )
        self._group_checks.check_unhooked(self.param_groups, self._group_of)

    def _clip_and_update(self, params: list[Tensor]) -> None:
        """``clip_grad_norm_(params)`` (with ``max_grad_norm``; over DTensor shards its norm is the
        global one), then update them.  With ``zero_grad(set_to_none=False)`` semantics the norm also
        counts, at their places, the zero gradients of :meth:`_zero_grad_params` (its order of summation
        is clip_grad_norm_'s), and those parameters are updated here."""
        if self.max_grad_norm is not None:
            zeros = self._zero_grad_params()
            if zeros:
                for p in zeros:
                    p.grad = torch.zeros_like(p)
                chosen = set(map(id, params)) | set(map(id, zeros))
                params = [p for p in self._params() if id(p) in chosen]
            torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm)
        for p in params:
            self._add_to_bucket(p)
        self._flush_all()
