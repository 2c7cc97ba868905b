"""Data parallelism for :class:`~ojas_ref.optim.in_backward.InBackwardOptimizer`: which DDP model
reduces each parameter's gradient (:class:`DataParallel`, the global forward pre-hook that finds
them), FSDP2 shards, and the updates that wait for the reduction.

Data parallelism is not covered by a theorem: the equalities below are tested
(``tests/optim/test_distributed.py``: 2 CPU processes on gloo, SGD and AdamW, clipping,
accumulation; every rank bitwise equal, equal to the single-process loop on the
concatenated batch within float64 rounding, and under DDP bitwise equal to
``torch.optim`` under DDP).

* ``DistributedDataParallel``: the post-accumulate-grad hook sees this rank's
  gradient, before DDP averages it.  The optimizer finds the DDP models of its
  parameters at their forward (a global module forward pre-hook, installed when
  it is constructed in a process group of several ranks with parameters that are
  not FSDP2 shards, removed once each of those has its DDP; while installed it
  runs at every module call), and defers their updates to an autograd callback
  queued at the end of backward, after every callback queued during the pass:
  DDP's reducer queues its ``finalize_backward`` (wait for the all-reduces; the
  averages are then in ``.grad``) from its hooks, so the update reads the averaged
  gradient, exactly what the standard DDP loop's ``step()`` reads (parameters no
  rank used keep no gradient and are not stepped).  Memory: DDP's buckets hold a
  copy of every gradient anyway (``gradient_as_bucket_view=True`` makes ``.grad``
  that copy), so only the optimizer step's temporaries stay bucket-sized.  A
  backward pass under ``no_sync()`` (DDP's last forward did not prepare a
  reduction) accumulates and does not update: accumulate with ``no_sync()`` and
  ``accumulation_steps=1``.  Clipping needs a single backward pass (the averaged
  gradients are all there at the callback), with their global norm.
* FSDP2 (``fully_shard``): FSDP2 runs the sharded parameter's post-accumulate-grad
  hooks itself, after the reduce-scatter, with the reduced shard in ``.grad``; the
  update of the local shard then runs in the hook as without FSDP (the memory
  saving stays: each shard's gradient is freed at its update).  With clipping the
  shards wait for an end-of-backward callback and ``clip_grad_norm_`` over the
  DTensor gradients, whose norm is the global one.  Accumulate with
  ``set_requires_gradient_sync(False)`` for micro-batches ``1..k-1`` and
  ``accumulation_steps=1`` (unsynchronised passes fire no hook, so they cannot be
  counted).
"""

from __future__ import annotations

import warnings
import weakref
from typing import TYPE_CHECKING, Any, Iterable, Optional

import torch
from torch import Tensor

from ojas_ref.optim._hooks import _owner

if TYPE_CHECKING:
    from ojas_ref.optim.in_backward import InBackwardOptimizer

if torch.distributed.is_available():
    from torch.distributed.tensor import DTensor
else:  # a build without torch.distributed: no FSDP2
    DTensor = ()

# Optimizers that may have parameters of a DistributedDataParallel model whose forward
# they have not seen yet, and the global forward pre-hook that looks for DDP modules while
# there are any (see _find_ddp).
_WATCHING: "weakref.WeakSet[InBackwardOptimizer]" = weakref.WeakSet()
_WATCH_HANDLE: list[Any] = []


def several_processes() -> bool:
    """Whether this process is one of a process group of several ranks."""
    return (
        torch.distributed.is_available()
        and torch.distributed.is_initialized()
        and torch.distributed.get_world_size() > 1
    )


def _watch_for_ddp(opt: "InBackwardOptimizer") -> None:
    _WATCHING.add(opt)
    if not _WATCH_HANDLE:
        _WATCH_HANDLE.append(torch.nn.modules.module.register_module_forward_pre_hook(_find_ddp))


def _find_ddp(module: torch.nn.Module, args: Any) -> None:
    """Global forward pre-hook: tell the optimizers of a DDP model's parameters which DDP
    reduces their gradients; removed once every watched optimizer knows the DDP of each of its
    parameters (FSDP2 shards, DTensors, need none)."""
    if not isinstance(module, torch.nn.parallel.DistributedDataParallel):
        return
    for p in module.parameters():
        owner = _owner(p)
        if owner is not None and not getattr(p, "_ddp_ignored", False):
            owner._data_parallel.attach_ddp(module, p)
    for opt in list(_WATCHING):
        if opt._data_parallel.knows_every(opt._group_of):
            _WATCHING.discard(opt)
    if not _WATCHING and _WATCH_HANDLE:
        _WATCH_HANDLE.pop().remove()


class DataParallel:
    """An optimizer's view of data parallelism: the DDP module that all-reduces each parameter's
    gradient (weakly), the DDP modules that reduce the gradients of the current backward pass,
    whether a hooked parameter is an FSDP2 shard (DTensor), the parameters to update once the
    gradients are reduced (FSDP2 shards, and plain parameters, with clipping), whether the update
    after the reduction is due in this pass, and whether the local-gradient warning was given."""

    def __init__(self) -> None:
        self.ddp_of: dict[Tensor, "weakref.ref[torch.nn.Module]"] = {}
        self.synced: list[torch.nn.Module] = []
        self.sharded = False
        self.reduced: list[Tensor] = []
        self.after_reduction = False
        self.warned_local = False

    def active(self) -> bool:
        """Whether DDP reduces some of the gradients or some parameters are FSDP2 shards: the
        reduced gradients are then whole only after the reduction, and clipping runs at the
        end of the (single) backward pass."""
        return bool(self.ddp_of) or self.sharded

    def knows_every(self, params: Iterable[Tensor]) -> bool:
        """Whether each of ``params`` has its DDP or is an FSDP2 shard (needs none)."""
        return all(p in self.ddp_of or isinstance(p, DTensor) for p in params)

    def ddp(self, p: Tensor) -> Optional[torch.nn.Module]:
        """The DDP module that reduces the gradient of ``p``, or None."""
        ref = self.ddp_of.get(p)
        return None if ref is None else ref()

    def attach_ddp(self, ddp: torch.nn.Module, p: Tensor) -> None:
        """At a forward of DDP model ``ddp``: its reducer all-reduces the gradient of ``p``."""
        unsupported = [
            name
            for name, on in (
                ("mixed_precision", getattr(ddp, "mixed_precision", None) is not None),
                ("a compiled DDP (python reducer)", getattr(ddp, "_use_python_reducer", False)),
                (
                    "delay_all_reduce_named_params covering every parameter",
                    getattr(ddp, "_delay_all_reduce_all_params", False),
                ),
            )
            if on
        ]
        if unsupported:
            raise RuntimeError(
                f"InBackwardOptimizer does not support DistributedDataParallel with "
                f"{', '.join(unsupported)}: the gradients are then reduced on low-precision copies "
                "of the parameters or outside DDP's reducer, not where this optimizer waits for the "
                "averages (the end of backward). Use a torch.optim optimizer"
            )
        self.ddp_of[p] = weakref.ref(ddp)

    def reduces_this_pass(self, ddp: torch.nn.Module) -> None:
        """``ddp`` reduces gradients in this backward pass: update after its reduction."""
        self.after_reduction = True
        if all(d is not ddp for d in self.synced):
            self.synced.append(ddp)

    def reduced_in(self, p: Tensor, synced: list[torch.nn.Module]) -> bool:
        """Whether the gradient of ``p`` was reduced by one of the DDP modules ``synced``."""
        return p in self.ddp_of and any(self.ddp_of[p]() is d for d in synced)

    def reset(self) -> None:
        """Forget the pass's reductions (at its end, or at ``zero_grad``)."""
        self.reduced, self.synced, self.after_reduction = [], [], False

    def warn_if_local(self, p: Tensor) -> None:
        """Warn (once) that a plain parameter is updated with this rank's own gradient in a job
        of several ranks: right for a parameter that is not data-parallel, wrong for one of a
        DDP model whose forward this optimizer did not see (constructed before
        ``init_process_group``, or after the forward of this backward pass)."""
        if self.warned_local or not several_processes() or getattr(p, "_ddp_ignored", False):
            return
        self.warned_local = True
        warnings.warn(
            "InBackwardOptimizer updates a parameter with this rank's local gradient: it is neither reduced by "
            "a DistributedDataParallel model whose forward this optimizer saw nor an FSDP2 shard. If it belongs "
            "to a DDP model, construct the optimizer after torch.distributed.init_process_group (it then finds "
            "DDP models at their forward); otherwise every rank updates with its own gradient",
            RuntimeWarning,
            stacklevel=2,
        )
