"""An optimizer fused into the backward pass: no persistent ``.grad`` buffers.

:class:`InBackwardOptimizer` registers a post-accumulate-grad hook on every
parameter.  When autograd has accumulated the whole gradient of a parameter
(``p.grad``), the hook adds the parameter to the pending bucket of its parameter
group; when the pending gradients of the group reach ``bucket_cap_mb``, the bucket
is updated with ``torch.optim``'s own step and its gradients are set to ``None``.
Every bucket left is updated at the end of the backward pass.  So at most the
gradients in flight in the backward pass plus one bucket per group are alive,
instead of one gradient per parameter at the end of backward.

The update of a bucket is one ``step()`` of a per-group instance of
``optimizer_class`` whose only group holds the bucket's parameters (sharing
:attr:`state`, with the hyper-parameters of the group in :attr:`param_groups` at
the time of the update): the arithmetic is ``torch.optim``'s, on the same
per-parameter path as the standard loop (foreach kernels by default on CUDA,
single-tensor ones on the CPU, fused ones with ``fused=True``), and the parameters
and optimizer state are bitwise those of the standard loop ``loss.backward();
opt.step(); opt.zero_grad()`` (tested: ``tests/test_optimizer_in_backward.py``).
Plain SGD (``torch.optim.SGD`` without momentum, weight decay, maximize, a tensor lr or
step hooks) is the one exception to calling ``step()``: its update is
``torch._foreach_add_(params, grads, alpha=-lr)`` (the call of torch's foreach path, and
the arithmetic of its single-tensor ``param.add_(grad, alpha=-lr)``), called directly
(``InBackwardOptimizer._plain_sgd_lr``), which saves ``Optimizer.step``'s per-call Python
for each bucket.

Why this is the standard loop, and where it is not (rocq/OptimizerInBackward/;
the theorems are over exact arithmetic for the schedule of events, for any
per-parameter update rule; the arithmetic of each update is torch's own):

* ``Events``: a backward pass is a list of events, gradient contributions (each
  reading some parameters) and hooks; ``standard_run`` accumulates with frozen
  parameters, then steps every parameter with a gradient once; ``fused_run``
  updates ``p`` at ``Hook p`` and frees its gradient.
* ``Ojas.OptimizerInBackward.Equivalence.fused_eq_standard``: the two runs give
  the same parameters and optimizer states, and the fused run frees every
  gradient, when each contributed parameter is hooked after all its
  contributions and no event reads a parameter after its hook.
  ``backward_events_hypotheses`` / ``backward_events_hook_once``: the reverse
  order of a backprop tape satisfies this, every parameter read being hooked
  exactly once, tied weights included (PyTorch's engine sums all uses before
  ``AccumulateGrad``, then runs the post-accumulate-grad hook once; a node that
  read ``p`` sends ``p`` a contribution, so it ran before the hook; one that saved
  ``p`` without sending a gradient would trip autograd's version counter, an
  error, not a wrong result).  ``backprop_fused_eq_standard``, and for the two
  rules of ``UpdateRules`` ``sgd_fused_eq_standard`` / ``adamw_fused_eq_standard``:
  updating in the hooks of ``loss.backward()`` is ``loss.backward();
  optimizer.step()``.
* Gradient accumulation over ``k`` micro-batches:
  ``Counterexamples.accum_fused_neq_standard``: updating at every micro-batch is
  not the standard loop.  ``Repairs.deferred_accum_eq_standard`` /
  ``deferred_accum_backprop_eq_standard``: accumulating in micro-batches
  ``1..k-1`` and updating at the hooks of the ``k``-th is, when the ``k``-th
  contributes to every parameter an earlier one did.  A parameter without a
  gradient in the ``k``-th micro-batch (outside that hypothesis) is stepped at
  the end of the ``k``-th backward, which is what ``optimizer.step()`` does to it
  (tested).  One gradient per parameter is alive between micro-batches, as in
  the standard loop: with ``accumulation_steps > 1`` no gradient memory is saved.
* Global-norm clipping: ``Counterexamples.clip_running_neq_standard`` /
  ``clip_unclipped_neq_standard``: clipping at each hook with the norm of the
  gradients seen so far, or not at all, is not ``clip_grad_norm_`` then step.
  ``Repairs.two_pass_clip_eq_standard`` / ``two_pass_clip_backprop_eq_standard``:
  two backward passes over the same graph are: the first records each gradient's
  norm and frees it, the second updates at each hook with the clip coefficient of
  the total norm (:meth:`InBackwardOptimizer.backward`).  The Coq total is
  ``sqrt`` of the sum of squared norms; here it is ``clip_grad_norm_``'s norm of
  the per-gradient norms, the same real number, in torch's float arithmetic.
  With ``accumulation_steps > 1`` the gradients are whole at the end of the
  ``k``-th backward anyway; ``clip_grad_norm_`` and the steps run there, as in
  the standard loop.
* Buckets: ``Ojas.OptimizerInBackward.Buckets.bucketed_eq_standard``: updating
  each hooked parameter at any later flush (a flush updates some of the pending
  parameters; everything pending is flushed at the end) is, under the hypotheses
  of ``fused_eq_standard``, the standard loop; ``fused_is_flush_every_hook``: the
  per-parameter run is the schedule that flushes at every hook;
  ``backprop_bucketed_eq_standard`` for the reverse tape order and any flush rule,
  ``backprop_cap_bucketed_eq_standard`` for the rule of this code (flush a group's
  pending parameters when their gradients reach the cap).  Each step of
  ``torch.optim``'s foreach, fused and single-tensor paths is per parameter (the
  state ``step`` tensors included), so stepping a bucket is stepping each of its
  parameters.
* ``Counterexamples.tied_per_use_neq_standard``: a hook per use of a tied weight
  (an update per partial gradient) would not be the standard loop.
* Row-sparse gradients (``nn.Embedding(sparse=True)``), plain SGD only:
  ``Ojas.OptimizerInBackward.SparseRows.sgd_sparse_rows_eq``: with momentum 0 and weight
  decay 0, updating the rows the gradient touches is the dense step (the other rows are
  unchanged); ``SparseRows.lazy_adamw_neq_dense`` / ``lazy_momentum_neq_dense``: not for
  AdamW or momentum, which raise (:meth:`InBackwardOptimizer._update_sparse`).
* The head updated inside the linear cross-entropy's backward (``head_weight``), plain SGD only:
  ``Ojas.OptimizerInBackward.ChunkedHead.chunked_head_sgd_eq_standard`` (the reference: per
  vocabulary chunk, its dH part and its rows' whole gradients, then the rows' step) and
  ``Ojas.OptimizerInBackward.ChunkedHead.chunked_head_dh_first_code_eq_standard`` (the Triton
  kernel: dH in the forward, then per slab): backward then the step, every row once, no [V, D]
  gradient; a head with another use (tied embeddings) raises.
* One backward pass is one update (the theorems are about one step): two
  ``.backward()`` calls would be two updates, not one on the summed gradient, so
  a parameter that gets a gradient again after its update and before ``step()``
  raises (nested backward passes, as in reentrant checkpointing, update each
  parameter once and are fine).

Data parallelism is not covered by a theorem: the equalities below are tested
(``tests/test_distributed.py``: 2 CPU processes on gloo, SGD and AdamW, clipping,
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

Optimizer state on the host (``state_device="cpu"``): the state tensors that torch
keeps with the parameter (AdamW's ``exp_avg`` / ``exp_avg_sq``, SGD's
``momentum_buffer``; not the ``step`` counters torch keeps on the CPU, except with
``fused`` / ``capturable``, where it keeps them with the parameter and so are they
streamed) live in host memory (pinned when CUDA is available) between updates.
A parameter's state is copied to its device when the parameter joins its bucket
(host to device, ``non_blocking``, on a side stream per device, so that the copy
of a bucket overlaps the backward computation and the steps before it; the step's
stream waits on an event of the copies, and the device copies are
``record_stream``-ed on the step's stream so that the caching allocator cannot
reuse them early), the bucket is stepped exactly as without it, then its state is
copied back into the same host tensors (``non_blocking``, on a second side stream, after
the step's stream has reached the step, so that both directions of PCIe run at once; an
event per bucket that the next copy of those host tensors to the device waits on)
and the device copies are dropped.  Between updates no state is on the device;
during the backward pass about one bucket's state per group is.  The update is
bitwise the one with ``state_device=None``: the same ops on the same values, on
the same device with the same dtypes and strides, and a copy is exact (the
bucketed update rests on ``Buckets.backprop_cap_bucketed_eq_standard``; the copies
are exact, no theorem needed).  With ``state_slice_mb`` (off by default) a
parameter whose state exceeds it is updated slice by slice, one slice's state on the device at a
time (:meth:`InBackwardOptimizer._step_sliced`: SGD with momentum, Adam, AdamW only; bitwise
the whole step because their arithmetic is elementwise, tested on the CPU and on an H200, no
theorem; the 1.06B Llama's losses on the H200 bitwise those of the state on the device,
benchmarks/RESULTS.md).  Tested: ``tests/test_optimizer_in_backward_host_state.py``.

The arguments of ``optimizer_class`` (``lr``, ``betas``, ...) are validated and
defaulted by ``optimizer_class`` itself; :meth:`state_dict` has the format of
``optimizer_class``'s, so checkpoints load into either.

Where the loop around the optimizer meets these updates (no theorem; bitwise tests in
``tests/test_optimizer_in_backward_semantics.py``): after ``zero_grad(set_to_none=False)``
a parameter without a gradient in a step is stepped at ``step()`` on a zero gradient,
as ``torch.optim`` steps its zeroed ``.grad``; between backward and ``step()`` the
``.grad`` of an updated parameter is a placeholder whose every use raises
(``clip_grad_norm_`` there would clip an update that already ran: pass
``max_grad_norm``); see :class:`InBackwardOptimizer`.
"""

from __future__ import annotations

import collections
import inspect
import math
import warnings
import weakref
from enum import Enum
from typing import Any, Callable, Iterable, Optional, Union

import torch
from torch import Tensor
from torch.optim import adam as _adam, optimizer as _optim
from torch.utils._foreach_utils import _group_tensors_by_device_and_dtype, _has_foreach_support
from torch.utils.weak import WeakIdKeyDictionary

__all__ = ["InBackwardOptimizer"]

# The optimizer classes whose update InBackwardOptimizer(state_device="cpu") may split into slices of a
# parameter (state_slice_mb): their step is elementwise in the parameter, gradient and state, with
# per-parameter scalars (the step counter); other classes, subclasses included, update whole parameters.
_SLICED_CLASSES = (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW)
# A slice's length in elements is a multiple of this (the last slice excepted), so that every element
# sits at the same offset modulo 64 in its slice as in the whole parameter: torch's vectorised kernels
# then take the same path for it (fused AdamW on the CPU rounds its scalar tail differently from its
# vector body: slices of 1 element differ from the unsliced step by 1.5e-8, measured; CUDA's vectorised
# loads need 16-byte-aligned tensors).
_SLICE_ALIGN = 64

# torch.nn.utils.clip_grad_norm_'s default norm type, the only one supported.
_NORM_TYPE = 2.0

if torch.distributed.is_available():
    from torch.distributed.tensor import DTensor
else:  # a build without torch.distributed: no FSDP2
    DTensor = ()

# Hooked parameter -> weak reference to the InBackwardOptimizer whose hook it carries.
# Both sides are weak: a strong value would keep its own keys (the optimizer holds its
# parameters) and so the whole model alive after the user drops it.
_OWNERS = WeakIdKeyDictionary()


#: ``torch.optim.Adam.step`` without torch's wrappers (``Optimizer`` wraps a class's ``step`` for its
#: hooks when the first instance is made): AdamW's too where AdamW is Adam (:meth:`InBackwardOptimizer._direct_adam`)
_ADAM_STEP = inspect.unwrap(torch.optim.Adam.step)


def _is_cuda(t: Tensor) -> bool:
    """Whether ``t`` is on a CUDA device, for the host-state copies (:meth:`InBackwardOptimizer._stage`,
    ``_swap_in``, ``_swap_out``, ``_step_sliced``, ``_copy``): ``t.device.type == "cuda"``.
    tests/test_optimizer_in_backward_host_state.py replaces it to run their CUDA stream code on the
    CPU against a model of CUDA's stream semantics (which stream each copy and step runs on, what it
    waits for, where its memory was allocated)."""
    return t.device.type == "cuda"


def _weak_hook(opt: "InBackwardOptimizer", index: int, nbytes: int) -> Callable[[Tensor], None]:
    """The parameter's hook, holding the optimizer weakly: a parameter -> hook ->
    optimizer -> parameter cycle through autograd's C++ hook table would never be
    collected.  It carries the parameter's group ``index`` and gradient size
    ``nbytes``, so that the common case (:meth:`InBackwardOptimizer._hook`) looks
    nothing up."""
    ref = weakref.ref(opt)

    def hook(p: Tensor) -> None:
        owner = ref()
        if owner is None:
            raise RuntimeError(
                "the InBackwardOptimizer of this parameter was garbage collected while its hooks remain: "
                "keep a reference to it for as long as you train (it holds the optimizer state), or call "
                "its remove_hooks() before dropping it")
        owner._hook(p, index, nbytes)
    return hook


def _owner(p: torch.Tensor) -> Optional["InBackwardOptimizer"]:
    ref = _OWNERS.get(p)
    return None if ref is None else ref()


# Optimizers that may have parameters of a DistributedDataParallel model whose forward
# they have not seen yet, and the global forward pre-hook that looks for DDP modules while
# there are any (see _find_ddp).
_WATCHING: "weakref.WeakSet[InBackwardOptimizer]" = weakref.WeakSet()
_WATCH_HANDLE: list[Any] = []


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
            owner._attach_ddp(module, p)
    for opt in list(_WATCHING):
        if all(p in opt._ddp_of or isinstance(p, DTensor) for p in opt._group_of):
            _WATCHING.discard(opt)
    if not _WATCHING and _WATCH_HANDLE:
        _WATCH_HANDLE.pop().remove()


def _check_state_device(state_device: Any) -> Optional[torch.device]:
    """``None``, or ``torch.device("cpu")`` for ``"cpu"`` / ``torch.device("cpu")``; else raise."""
    if state_device is None:
        return None
    if not isinstance(state_device, (str, torch.device)):
        raise TypeError(f"state_device must be None, 'cpu' or torch.device('cpu'), got "
                        f"{type(state_device).__name__} {state_device!r}")
    try:
        device = torch.device(state_device)
    except RuntimeError:
        device = None
    if device is None or device.type != "cpu":
        raise ValueError(f"state_device must be None (the state lives with its parameter) or 'cpu' (the state "
                         f"lives in host memory and is streamed to the device for each update), got {state_device!r}")
    return torch.device("cpu")


class _Mode(Enum):
    UPDATE = "update"  # hooks update (or accumulate, before the last micro-batch)
    NORM = "norm"      # first pass of clipping: hooks record the gradient norm and free it
    CLIP = "clip"      # second pass of clipping: hooks clip with the total norm, then update


def _grad_norm(grad: Tensor) -> Tensor:
    """The norm of one gradient as ``clip_grad_norm_`` (``foreach=None``) computes it."""
    if _has_foreach_support([grad], grad.device):
        return torch._foreach_norm([grad], _NORM_TYPE)[0]
    return torch.linalg.vector_norm(grad, _NORM_TYPE)


# Why a parameter updated since the last step() cannot take a gradient again (_hook, and _ConsumedGrad when
# autograd adds a new gradient into the placeholder).
_SECOND_UPDATE = (
    "a parameter already updated since the last optimizer.step() gets a gradient again (a second backward pass "
    "without optimizer.step() after the first?): every backward pass (every accumulation_steps-th with "
    "accumulation) updates the parameters in its hooks, so two backward passes would be two updates, not one on "
    "the summed gradient. Call optimizer.step() once per update (it marks the end of the step); to combine several "
    "losses in one update, back-propagate their sum, or set accumulation_steps to the number of backward passes "
    "per update. This backward pass is abandoned: call optimizer.zero_grad() before the next")

# Why the head updated inside the loss cannot take a gradient from another use (_hook, _ConsumedGrad).
_HEAD_OTHER_USE = (
    "the head weight (InBackwardOptimizer(head_weight=...)) was updated inside the linear cross-entropy's backward "
    "and then got a gradient from another use in the same graph (tied to the input embedding, or used elsewhere): "
    "its update needs the sum of all its gradients, so updating it inside the loss is not the standard step "
    "(Ojas.OptimizerInBackward.Counterexamples.tied_per_use_neq_standard). Its rows were already updated with the "
    "loss's part: restore them from a checkpoint, and construct the optimizer without head_weight for a weight "
    "with several uses")

_GRAD_SCALER = (
    "InBackwardOptimizer cannot be used with an enabled torch.amp.GradScaler: unscaling and the inf/NaN check need "
    "all gradients before any update, but each parameter was already updated in backward with its scaled gradient. "
    "Use bfloat16 autocast (no scaler) instead")

# Why the gradient of an updated parameter cannot be read or changed before step() (_ConsumedGrad).
_CONSUMED = (
    "{op} was called on the .grad of a parameter that InBackwardOptimizer already updated inside this backward pass: the "
    "gradient was used by that update and freed, and until optimizer.step() .grad is a placeholder without memory "
    "whose every use raises. torch.optim reads .grad at step(), after code between backward and step(); here the "
    "update ran before it, so clipping (torch.nn.utils.clip_grad_norm_ / clip_grad_value_; it would return 0 and "
    "clip nothing), a gradient norm, zero_grad(set_to_none=False) or any other edit of the gradients cannot take "
    "effect. To clip, construct InBackwardOptimizer(..., max_grad_norm=...) and run optimizer.backward(loss) "
    "(clip_grad_norm_'s clipping before every update) instead of calling clip_grad_norm_; to read or edit "
    "gradients before the update, use a torch.optim optimizer")


class _ConsumedGrad(Tensor):
    """The ``.grad`` of a parameter from its update in backward to ``step()`` (see
    :attr:`InBackwardOptimizer.step`): the gradient was consumed and freed. No storage; any
    operation on it raises: outside backward with :data:`_CONSUMED` (the torch.optim effect of
    code between backward and step, e.g. ``clip_grad_norm_``, can no longer happen), inside
    backward (autograd adding a new gradient into it) with ``in_backward``, the reason a second
    gradient of an updated parameter is refused. Its shape, dtype and device are the parameter's,
    as ``.grad``'s must be."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, p: Tensor, in_backward: str) -> "_ConsumedGrad":
        t = Tensor._make_wrapper_subclass(cls, p.shape, strides=p.stride(), dtype=p.dtype, device=p.device)
        t.in_backward = in_backward
        return t

    def __repr__(self, *, tensor_contents: Any = None) -> str:
        return (f"<gradient of shape {tuple(self.shape)} consumed by InBackwardOptimizer's update in backward; "
                "freed until optimizer.step()>")

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is torch.ops.aten._amp_foreach_non_finite_check_and_unscale_.default:
            raise RuntimeError(_GRAD_SCALER)
        if torch._C._current_graph_task_id() != -1:  # autograd accumulating a gradient into it
            consumed = next(t for t in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(t, cls))
            raise RuntimeError(consumed.in_backward)
        raise RuntimeError(_CONSUMED.format(op=func))


def _release_placeholders(params: list[Tensor]) -> None:
    """Set back to None each ``.grad`` of ``params`` that is a :class:`_ConsumedGrad` placeholder;
    empty the list. Also run when the optimizer is collected (a finalizer), so that its
    placeholders do not outlive it."""
    for p in params:
        if type(p.grad) is _ConsumedGrad:
            p.grad = None
    params.clear()


def _same_hyper(a: Any, b: Any) -> bool:
    """Whether hyper-parameter values ``a`` (kept at an update; a tensor cloned) and ``b`` (now) are
    the same: equal bits for tensors, ``==`` otherwise."""
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        return (isinstance(a, Tensor) and isinstance(b, Tensor) and a.shape == b.shape and a.dtype == b.dtype
                and torch.equal(a.cpu(), b.cpu()))
    return bool(a == b)


def _live_grad(p: Tensor) -> Optional[Tensor]:
    """``p.grad``, or None when there is none or it was consumed by an update (:class:`_ConsumedGrad`)."""
    grad = p.grad
    return None if grad is None or type(grad) is _ConsumedGrad else grad


class InBackwardOptimizer(torch.optim.Optimizer):
    """``optimizer_class`` applied to buckets of parameters whose post-accumulate-grad hooks ran.

    Equal to backward-then-``step()`` by Ojas.OptimizerInBackward.Buckets.backprop_cap_bucketed_eq_standard
    (reverse-mode hook order, flush when a group's pending gradients reach the cap;
    with ``bucket_cap_mb=0``, Ojas.OptimizerInBackward.Equivalence.backprop_fused_eq_standard;
    ``sgd_fused_eq_standard`` and ``adamw_fused_eq_standard`` for the rules); accumulation by
    Ojas.OptimizerInBackward.Repairs.deferred_accum_backprop_eq_standard.

    Keep a reference to the optimizer while training, as with any optimizer: the
    parameters' hooks hold it weakly (so that dropping model and optimizer frees
    them), and a backward after it was garbage collected raises.

    Args:
        params: the parameters or parameter groups, as for ``optimizer_class``.
            Parameters that do not require grad at construction get no hook and
            are never updated: one of them found with a ``.grad`` (unfrozen after
            construction) at the end of a backward pass or at ``step()`` raises;
            construct the optimizer after unfreezing, or leave it out of
            ``params`` and pass it to :meth:`add_param_group` when unfreezing it.
        optimizer_class: a ``torch.optim.Optimizer`` subclass whose step updates
            each parameter from its own gradient and state only (SGD, Adam, AdamW,
            ...; not LBFGS).
        accumulation_steps: ``k``; micro-batches ``1..k-1`` accumulate into
            ``.grad``, the ``k``-th backward updates and frees (as the standard
            loop with ``opt.step()`` every ``k`` backward passes).
        max_grad_norm: clip as ``torch.nn.utils.clip_grad_norm_(params, max_norm)``
            (2-norm, over the parameters in :attr:`param_groups` order) before
            every update.  With ``accumulation_steps == 1`` run backward with
            :meth:`backward` (two backward passes; one under DDP or FSDP2, see
            below); with ``accumulation_steps > 1``
            the gradients are whole at the end of the ``k``-th backward anyway, and
            clipping and updates run there.
        bucket_cap_mb: a parameter group's pending parameters are updated together,
            in one ``step()`` of ``optimizer_class``, when their gradients reach this
            many MiB (and at the end of the backward pass).  Memory: besides the
            gradients in flight, at most about one bucket of gradients per group
            (``bucket_cap_mb`` plus the last parameter's gradient) stays alive, plus
            the temporaries of one bucket's step (foreach AdamW: one
            parameter-sized buffer per bucket parameter).  Larger buckets mean fewer
            optimizer calls (host time, which short steps do not hide); ``0``
            updates each parameter alone in its hook.
        state_device: where the optimizer state lives between updates.  ``None``
            (default): with its parameter, as in ``torch.optim``.  ``"cpu"`` (or
            ``torch.device("cpu")``): in host memory (pinned when CUDA is available),
            streamed to the parameter's device for its bucket's step and back right
            after (see the module docstring); the device then holds about one
            bucket's state per group instead of all of it, at the cost of copying
            the state over PCIe twice per update.  Bitwise the same update as
            ``None`` (the bucketed update is
            Ojas.OptimizerInBackward.Buckets.backprop_cap_bucketed_eq_standard; the
            copies are exact, no theorem needed).  It saves memory for CUDA
            parameters; for CPU parameters it is allowed and does the same copies
            from host tensor to host tensor (no saving; this is what the CPU tests
            run).  :meth:`state_dict` returns the host tensors (it first waits for the
            copies back); :meth:`load_state_dict` puts the loaded state on the host
            (torch's loading casts it to the parameter's device first, so the whole
            state is briefly on the device).  Reading ``optimizer.state`` directly
            right after a CUDA backward pass needs ``torch.cuda.synchronize()``
            first (the copies back are asynchronous).  Not supported with FSDP2
            (``fully_shard``) parameters (NotImplementedError).
        state_slice_mb: with ``state_device="cpu"`` (ignored without it), the most optimizer state, in
            MiB, that one parameter has on the device during its update (default None: whole
            parameters). A parameter whose state is larger (its bytes times
            the state tensors per element: AdamW 2, with amsgrad 3, SGD momentum 1; before its first
            update, the same count of the tensors the step will create) is not staged with its bucket: it is updated in contiguous slices of
            its flattened storage whose state is half ``state_slice_mb``, each a view of the parameter,
            its gradient and its host state, whose state is copied to one of two device buffers,
            stepped by ``optimizer_class`` and copied back (:meth:`_step_sliced`; the next slice is
            copied in while one is stepped), so two slices' state and the temporaries of one slice's
            step are on the device instead of the whole parameter's (for the 1.06B Llama's 250 MiB
            fp32 head, AdamW: 128 MiB of state and 32 MiB of temporaries instead of 500 and 250 MiB).
            A slice holds a multiple of 64 elements (the last excepted). Sliced: only the classes
            ``torch.optim.SGD`` (with momentum), ``Adam`` and ``AdamW`` themselves (foreach, fused,
            single-tensor, capturable, amsgrad, maximize, weight decay), not ``differentiable``, a
            contiguous parameter and gradient; any other class (subclasses included) or parameter is
            updated whole, at its bucket's step. Bitwise the unsliced step (their arithmetic is
            elementwise with per-parameter scalars, each slice starting from the parameter's ``step``;
            no theorem covers the split, the tests check it). Each slice is one ``step()`` call
            (optimizer step hooks run per slice and see the slice's view), and the copies of a
            parameter's slices wait for the buffers (two): host time and PCIe latency for memory. The default keeps the 1.06B model's MLP weights (92 MB of fp32 AdamW state)
            whole, staged while the backward runs. The first update of a parameter creates its state
            slice by slice on the device; it goes to new host tensors.
        overlap: on CUDA, in the plain case (one process, no accumulation, no clipping,
            ``state_device=None``), run each bucket's update on a side stream of its
            device, after the compute stream's work so far (the bucket's gradients, the
            last reads of its parameters), while the backward of the earlier layers
            continues on the compute stream, which waits for it when the next bucket is
            updated and at the end of the backward pass. The same kernels on the same
            tensors: the same bits as ``overlap=False`` (tests/test_optimizer_in_backward.py).
            Plain-SGD buckets stay on the compute stream (their update is one add). Costs
            memory: a bucket's gradients (and its step's temporaries) live until the next
            bucket's update, so up to one bucket more is alive, and the side stream's
            allocations are its own. Without checkpointing the step's peak is at the start of
            the backward, before any update, so that costs nothing there: use it for AdamW
            (and other stateful optimizers) without checkpointing (H200, 1.06B fp32 AdamW:
            1.05x of standard against 1.00x without it, same peak; benchmarks/RESULTS.md).
            With checkpointing the recomputation's peak comes after updates and the bucket in
            flight adds to it. Default ``False``: every update on the compute stream.
        head_weight: the ``[V, D]`` weight of a linear head whose loss is
            :func:`ojas_ref.linear_cross_entropy` (``LinearCrossEntropyLoss``, the loss of
            ``optimize_model``; e.g. ``model.lm_head.weight``), or None (default). The loss's
            backward then updates it itself, vocabulary chunk by vocabulary chunk: for each chunk
            of rows it computes their whole gradient over all tokens (from the forward's lse),
            adds the chunk's part of the hidden states' gradient with the rows not yet updated,
            steps the rows with plain SGD and drops their gradient, so no ``[V, D]`` gradient
            exists (one ``[vocab chunk, D]`` at a time) and the head's ``.grad`` holds no gradient
            (the placeholder of an updated parameter until ``step()``, then None).
            Equal to backward then ``SGD.step()``:
            Ojas.OptimizerInBackward.ChunkedHead.chunked_head_sgd_eq_standard (an instance of
            Ojas.OptimizerInBackward.Equivalence.fused_eq_standard, over any scalars); in floats
            the reference's rows are bitwise the dense path's (each row's gradient summed over the
            token chunks in the same order) and so is the float32 update on the CPU; bfloat16 on
            the CPU may differ by one rounding where ATen's ``add_`` takes its scalar tail
            (tests/test_head_update.py; CUDA not yet compared). Only with
            ``optimizer_class=torch.optim.SGD`` and the head's group plain (momentum 0, weight decay
            0, not maximize, not fused, a float lr, no step hooks), ``accumulation_steps=1``, no
            ``max_grad_norm``, one process: else ValueError here (or RuntimeError at the backward,
            when a group changed since, or under DDP / FSDP2). AdamW, momentum, clipping,
            accumulation and data parallelism keep the dense path: leave ``head_weight`` out.
            The loss then refuses (errors name the reason) a head with a bias, a head used by
            the computation of its input (tied to the embedding), autocast casting the weight, and
            a second backward through the same graph. A use of the head after the loss (a
            regulariser) raises in the backward: autograd's in-place check, or this optimizer's
            hook. The tied check walks the autograd graph of the loss's input at each forward
            (Python, once per node). Several forwards of the loss and one backward of their summed
            losses: the head's update needs the sum of their gradients, which no one loss's
            backward has, so in that backward pass every loss returns the head's gradient and it is
            updated in its hook (the dense path for that step: its ``[V, D]`` gradient exists;
            bitwise the standard loop); a forward whose loss is alive but not back-propagated in
            the pass does not count. A backward that raises after some chunks were updated (out
            of memory) leaves those rows updated: the step cannot be undone. The PyTorch reference updates each vocabulary chunk (``chunk_size``) after its
            dH part (Ojas.OptimizerInBackward.ChunkedHead.chunked_head_sgd_eq_standard); the Triton
            kernel runs its 4-product schedule, dH in the forward, then each vocabulary slab's
            gradient and update in the backward
            (Ojas.OptimizerInBackward.ChunkedHead.chunked_head_dh_first_code_eq_standard), which
            rounds the head's gradient as its 4-product schedule does, not as the default
            3-product one (one product over all tokens instead of a sum over token chunks).
        optimizer_kwargs: hyper-parameters passed to ``optimizer_class``.

    Call ``step()`` after each update as in the standard loop: it updates nothing
    (backward did) but marks the end of the step, and a parameter that gets a
    gradient again after its update and before it raises (two ``.backward()`` calls
    would otherwise be two updates where ``torch.optim`` makes one on the summed
    gradient; back-propagate the sum of the losses, or set ``accumulation_steps``).  ``zero_grad()`` may stay:
    it clears the gradients that exist (none after an update) and the updates left
    pending by a backward pass that raised; without it, the next backward raises
    rather than step a parameter twice.  Without any ``zero_grad()`` call each step
    uses its own gradients, as after ``zero_grad(set_to_none=True)`` (``torch.optim``
    would add the old gradients in).  ``zero_grad(set_to_none=False)`` keeps
    ``torch.optim``'s semantics: every parameter that got a gradient since the last
    ``zero_grad(set_to_none=True)`` is stepped at every ``step()``, on a zero gradient
    when its backward gave it none (weight decay, momentum; plain SGD's zero step is
    the identity and is skipped), and a gradient is ``0.0 + g`` (``-0.0`` becomes
    ``+0.0``), as accumulated into the zeroed ``.grad``; bitwise the standard loop,
    with clipping (the zero gradients' norms are counted) and accumulation.  Only this
    optimizer's ``zero_grad`` is seen: ``nn.Module.zero_grad(set_to_none=False)``
    after ``step()`` finds no ``.grad`` and acts as ``set_to_none=True``.

    Between backward and ``step()`` the ``.grad`` of each updated parameter (not of an
    FSDP2 shard: None) is a placeholder without memory (:class:`_ConsumedGrad`) whose
    every use raises: code that ``torch.optim``'s loop runs there on the gradients
    (``clip_grad_norm_`` / ``clip_grad_value_``, a gradient norm,
    ``zero_grad(set_to_none=False)``, ``GradScaler.unscale_``) would act after the
    update, so it is refused (``clip_grad_norm_`` used to find no gradient, return 0.0
    and clip nothing); clip with ``max_grad_norm``.  ``step()`` (and
    ``zero_grad(set_to_none=True)``, :meth:`remove_hooks`) sets it back to None, before
    the next backward pass; one that adds a gradient into it raises (the second
    backward without ``step()`` above).  Learning-rate schedulers work: they change
    ``param_groups[i]["lr"]`` and the next update reads it; a hyper-parameter of an updated
    group changed between backward and ``step()`` (an LR scheduler stepped before
    ``optimizer.step()``) raises at ``step()``, since ``torch.optim`` would use it in this
    step (a tensor lr is compared by value; compared: the keys ``optimizer_class`` takes).
    A hooked parameter removed from ``param_groups`` or moved to another group raises at the
    first hook of the next backward pass (its hook would keep updating it with the old
    group's hyper-parameters); editing hyper-parameters in place and
    :meth:`add_param_group` are fine.  ``register_step_pre_hook`` raises (the update runs
    before ``step()``); step post-hooks run after ``step()``, as in ``torch.optim``.  Save checkpoints
    after an update (gradients of an unfinished accumulation are not optimizer
    state, as in ``torch.optim``).  A parameter has at most one
    InBackwardOptimizer; :meth:`remove_hooks` detaches one.

    Exact equality with the standard loop also needs a deterministic backward
    with clipping (the two passes must compute the same gradients), and the same
    parameter order in the standard loop's ``clip_grad_norm_``.  On CUDA it also
    needs the bucket's step to take the kernels the standard loop takes for the
    whole group: it does (``torch.optim`` picks foreach or fused from the
    devices and options, the same for a subset), except for SGD with momentum
    when only some parameters of a group have a momentum buffer (a parameter
    first given a gradient in a later step): torch's foreach step then falls back
    to per-tensor ``mul_``/``add_`` for the whole group, a bucket without such
    a parameter does not (equal on the CPU, where foreach ops are per-tensor
    loops; possibly rounded differently on CUDA).  Not supported
    (errors say why): an enabled ``torch.amp.GradScaler``, ``step(closure)``,
    sparse gradients other than row-sparse float32 / float64 ones with plain SGD (momentum 0,
    weight decay 0, no clipping, no accumulation, one process: see :meth:`_update_sparse`,
    Ojas.OptimizerInBackward.SparseRows.sgd_sparse_rows_eq), a parameter that already has a ``.grad``, reentrant
    activation checkpointing with ``accumulation_steps > 1`` (its nested backward
    passes would count as micro-batches; use ``use_reentrant=False``).

    Data parallel (not covered by a theorem; tested, see the module docstring):
    under ``DistributedDataParallel`` (construct the optimizer after
    ``init_process_group`` and before the first forward) the updates wait for DDP's
    averaged gradients at the end of backward; under FSDP2 (``fully_shard``,
    construct the optimizer after sharding) each local shard is updated after its
    reduce-scatter.  Clipping (``max_grad_norm``) uses the global norm in one
    backward pass.  Accumulate with ``no_sync()`` (FSDP2:
    ``set_requires_gradient_sync(False)``) and ``accumulation_steps=1``;
    ``accumulation_steps > 1`` raises.  DDP with ``mixed_precision``, compiled DDP
    or ``delay_all_reduce_named_params`` over every parameter raises.  In a job of
    several ranks, a plain parameter updated with its local gradient (no DDP seen,
    no FSDP2 shard) warns once.
    """

    # GradScaler.step then calls step() directly, which raises with the reason.
    _step_supports_amp_scaling = True

    def __init__(
        self,
        params: Iterable[Union[Tensor, dict[str, Any]]],
        optimizer_class: type[torch.optim.Optimizer] = torch.optim.AdamW,
        *,
        accumulation_steps: int = 1,
        max_grad_norm: Optional[float] = None,
        bucket_cap_mb: float = 64.0,
        state_device: Optional[Union[str, torch.device]] = None,
        state_slice_mb: Optional[float] = None,
        overlap: bool = False,
        head_weight: Optional[Tensor] = None,
        **optimizer_kwargs: Any,
    ) -> None:
        if not (isinstance(optimizer_class, type) and issubclass(optimizer_class, torch.optim.Optimizer)):
            raise TypeError(f"optimizer_class must be a torch.optim.Optimizer subclass, got {optimizer_class!r}")
        if issubclass(optimizer_class, InBackwardOptimizer):
            raise TypeError("optimizer_class cannot be InBackwardOptimizer itself")
        if issubclass(optimizer_class, torch.optim.LBFGS):
            raise ValueError("optimizer_class=LBFGS needs step(closure) over all parameters at once; "
                             "it cannot update one parameter in its hook")
        if isinstance(accumulation_steps, bool) or not isinstance(accumulation_steps, int):
            raise TypeError(f"accumulation_steps must be an int, got {type(accumulation_steps).__name__}")
        if accumulation_steps < 1:
            raise ValueError(f"accumulation_steps must be >= 1, got {accumulation_steps}")
        if max_grad_norm is not None:
            if isinstance(max_grad_norm, bool) or not isinstance(max_grad_norm, (int, float)):
                raise TypeError(f"max_grad_norm must be None or a float, got {type(max_grad_norm).__name__}")
            if not (math.isfinite(max_grad_norm) and max_grad_norm > 0):
                raise ValueError(f"max_grad_norm must be a finite float > 0, got {max_grad_norm}")
            max_grad_norm = float(max_grad_norm)
        if isinstance(bucket_cap_mb, bool) or not isinstance(bucket_cap_mb, (int, float)):
            raise TypeError(f"bucket_cap_mb must be a float, got {type(bucket_cap_mb).__name__}")
        if not (math.isfinite(bucket_cap_mb) and bucket_cap_mb >= 0):
            raise ValueError(f"bucket_cap_mb must be a finite float >= 0, got {bucket_cap_mb}")
        if not isinstance(overlap, bool):
            raise TypeError(f"overlap must be a bool, got {type(overlap).__name__}")
        if state_slice_mb is not None:
            if isinstance(state_slice_mb, bool) or not isinstance(state_slice_mb, (int, float)):
                raise TypeError(f"state_slice_mb must be None or a float, got {type(state_slice_mb).__name__}")
            if not (math.isfinite(state_slice_mb) and state_slice_mb > 0):
                raise ValueError(f"state_slice_mb must be None or a finite float > 0 (MiB of one parameter's "
                                 f"optimizer state on the device at a time), got {state_slice_mb}")
            state_slice_mb = float(state_slice_mb)
        self.state_slice_mb = state_slice_mb
        self._state_slice_bytes = None if state_slice_mb is None else max(1, int(state_slice_mb * 2**20))
        self.overlap = overlap
        # overlap: per device, the side stream of the updates
        self._update_streams: dict[torch.device, Any] = {}
        # per device, the update in flight on the side stream: (compute stream, its end event,
        # the bucket's gradients, kept alive until the compute stream waits for that event)
        self._in_flight: dict[torch.device, tuple[Any, Any, list[Tensor]]] = {}
        self.bucket_cap_mb = float(bucket_cap_mb)
        self.state_device = _check_state_device(state_device)
        # state_device="cpu": whether host state is pinned; per parameter id, the device copies of
        # its state staged for its bucket's step; per group, the event of the latest staging copy;
        # per parameter id, the event after the latest copy back into its host tensors; the side
        # stream of the host-to-device copies, per device.
        self._pin = self.state_device is not None and torch.cuda.is_available()
        self._staged: dict[int, dict[Any, Tensor]] = {}
        self._stage_events: dict[int, Any] = {}
        self._out_events: dict[int, Any] = {}
        self._copy_streams: dict[tuple[torch.device, str], Any] = {}
        self._bucket_cap_bytes = int(bucket_cap_mb * 2**20)
        self.optimizer_class = optimizer_class
        self.accumulation_steps = accumulation_steps
        self.max_grad_norm = max_grad_norm
        self._constructor_args = set(inspect.signature(optimizer_class).parameters) - {"params"}
        # hooked param -> index of its group in param_groups; per group: the optimizer_class
        # instance that steps its buckets (None without hooked parameters), the pending
        # bucket and the bytes of its gradients
        self._group_of: dict[Tensor, int] = {}
        self._group_opts: list[Optional[torch.optim.Optimizer]] = []
        self._pending: list[list[Tensor]] = []
        self._waiting: set[int] = set()  # id() of the parameters in the pending buckets
        self._pending_bytes: list[int] = []
        self._hook_handles: list[Any] = []
        self._mode = _Mode.UPDATE
        self._micro_batch = 0           # backward passes since the last update
        self._queued_task = None        # the backward pass whose end-of-backward callback is queued
        self._norms: dict[Tensor, Tensor] = {}
        self._total_norm: Optional[Tensor] = None
        # Distributed: the DDP module that all-reduces each parameter's gradient (weakly), the DDP
        # modules that reduce the gradients of the current backward pass, whether a hooked
        # parameter is an FSDP2 shard (DTensor), the parameters to update once the gradients are
        # reduced (FSDP2 shards, and plain parameters, with clipping), whether the update after
        # the reduction is due in this pass.
        self._ddp_of: dict[Tensor, "weakref.ref[torch.nn.Module]"] = {}
        self._synced: list[torch.nn.Module] = []
        self._sharded = False
        self._reduced: list[Tensor] = []
        self._after_reduction = False
        self._warned_local = False
        # id() of the parameters updated since the last step() (ids, not tensors: a tensor's
        # __hash__ is a Python call, and these sets are touched at every hook)
        self._updated: set[int] = set()
        # whether the current backward pass takes the plain path of _hook (set at its first hook)
        self._plain_pass = False
        # (group, index, parameter) of the parameters in param_groups without a hook, and the
        # id() of each group's parameters when they were found (_check_param_groups)
        self._unhooked: list[tuple[int, int, Tensor]] = []
        self._layout: Optional[list[list[int]]] = None
        # The parameters updated since the last step(), whose .grad is their _ConsumedGrad placeholder
        # until then, and each parameter's placeholder (made once, by id())
        self._consumed: list[Tensor] = []
        self._placeholders: dict[int, Tensor] = {}
        weakref.finalize(self, _release_placeholders, self._consumed)
        # zero_grad(set_to_none=False) semantics: whether the last zero_grad() kept zeroed gradients, and the
        # id() of the parameters that torch.optim's loop would hold a .grad for (one was accumulated since the
        # last zero_grad(set_to_none=True)): see _zero_grad_params
        self._zeroed_grads = False
        self._had_grad: set[int] = set()
        # per group updated since the last step(), its hyper-parameters at its first update (_check_hyper)
        self._hyper_used: dict[int, dict[str, Any]] = {}
        # optimizer_class validates and defaults the hyper-parameters; its groups become ours,
        # and it applies its own load_state_dict fix-ups to them (__setstate__).
        self._template = optimizer_class(params, **optimizer_kwargs)
        super().__init__(self._template.param_groups, self._template.defaults)
        # head_weight: the head updated inside the linear cross-entropy's backward (None: none);
        # its id (None: none), and whether the loss updated it since the last step()
        self._head: Optional[Tensor] = None
        self._head_key: Optional[int] = None
        self._head_done = False
        # the loss forwards (linear_cross_entropy's _HeadUpdate) whose backward has not begun, and
        # (backward pass id, whether the head's gradient comes from several of them in it): _head_shared_pass
        self._head_forwards: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self._head_pass: tuple[Optional[int], bool] = (None, False)
        if head_weight is not None:
            self._check_head_weight(head_weight)
            self._head, self._head_key = head_weight, id(head_weight)

    # ------------------------------------------------------------------
    # torch.optim.Optimizer interface
    # ------------------------------------------------------------------

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group (as ``torch.optim.Optimizer``) and hook its parameters."""
        super().add_param_group(param_group)
        index = len(self.param_groups) - 1
        group = self.param_groups[index]
        with_grad = [i for i, p in enumerate(group["params"]) if p.grad is not None]
        hooked = [i for i, p in enumerate(group["params"]) if _owner(p) is not None]
        sharded = [i for i, p in enumerate(group["params"]) if isinstance(p, DTensor)]
        if with_grad or hooked or (sharded and self.state_device is not None):
            self.param_groups.pop()
        if sharded and self.state_device is not None:
            raise NotImplementedError(
                f"state_device={str(self.state_device)!r} is not supported with FSDP2 (fully_shard) parameters "
                f"(parameter(s) {sharded} of group {index} are DTensors): streaming DTensor shard state to and "
                "from the host is not implemented. Use state_device=None (FSDP2's own CPUOffloadPolicy offloads "
                "parameters, gradients and optimizer state)")
        if with_grad:
            raise ValueError(
                f"params: parameter(s) {with_grad} of group {index} already have a .grad; updates in backward "
                "would add it to the next gradient. Call zero_grad(set_to_none=True) on them first")
        if hooked:
            raise ValueError(
                f"params: parameter(s) {hooked} of group {index} are already updated in backward by another "
                "InBackwardOptimizer (they would be updated twice); call its remove_hooks() first")
        hooked = [p for p in group["params"] if p.requires_grad]
        bucket_opt = None
        if hooked:
            bucket_opt = self.optimizer_class(hooked, **{k: v for k, v in group.items() if k in self._constructor_args})
            bucket_opt.state = self.state
        self._group_opts.append(bucket_opt)
        self._pending.append([])
        self._pending_bytes.append(0)
        for p in hooked:
            self._group_of[p] = index
            nbytes = p.numel() * p.element_size()  # a gradient has its parameter's shape and dtype
            self._hook_handles.append(p.register_post_accumulate_grad_hook(_weak_hook(self, index, nbytes)))
            _OWNERS[p] = weakref.ref(self)
            self._sharded |= isinstance(p, DTensor)
        if (any(not isinstance(p, DTensor) for p in hooked) and torch.distributed.is_available()
                and torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1):
            _watch_for_ddp(self)

    def step(self, closure: Optional[Callable[[], float]] = None) -> None:
        """Nothing to update (the parameters were updated during backward): marks the end of
        the step, so that the next backward pass may update again.

        After ``zero_grad(set_to_none=False)`` it steps the parameters that ``torch.optim``'s loop
        would step on a zero ``.grad`` (see :meth:`_zero_grad_params`).  The ``.grad`` of every
        parameter updated since the last ``step()`` goes from its placeholder
        (:class:`_ConsumedGrad`) back to None."""
        self._check_unhooked()
        if closure is not None:
            raise RuntimeError(
                "InBackwardOptimizer.step(closure) is not supported: a closure re-evaluates the loss and "
                "steps on the whole gradient, but here every parameter is updated inside backward")
        if hasattr(self, "found_inf") or hasattr(self, "grad_scale"):
            raise RuntimeError(_GRAD_SCALER)
        self._check_hyper()
        self._join_updates()
        zeros = [p for p in self._zero_grad_params()  # plain SGD's step on a zero gradient is x + (-lr) * 0.0 == x
                 if self._plain_sgd_lr(self._group_opts[self._group_of[p]], self._group_of[p]) is None]
        if zeros:
            for p in zeros:
                p.grad = torch.zeros_like(p)
                self._add_to_bucket(p)
            self._flush_all()
            self._join_updates()
        self._release_consumed()
        self._had_grad.update(self._updated)
        self._updated.clear()
        self._hyper_used.clear()
        self._head_done = False

    def register_step_pre_hook(self, hook: Callable[..., Any]) -> Any:
        """Refused: ``torch.optim`` runs a step pre-hook before the update (to edit gradients or
        hyper-parameters for it); here the update ran in backward, before ``step()``."""
        raise NotImplementedError(
            "InBackwardOptimizer.register_step_pre_hook is not supported: torch.optim runs a step pre-hook "
            "before the update, but InBackwardOptimizer updates each parameter in backward, before step(), so "
            "the hook would act after the update. Change hyper-parameters before the backward pass; "
            "register_step_post_hook (after step(), and so after the update, as in torch.optim) works")

    def zero_grad(self, set_to_none: bool = True) -> None:
        """``torch.optim.Optimizer.zero_grad``; also drops the updates still pending from a
        backward pass that did not finish (one that raised): after an update no gradient
        and nothing pending is left, so in a training loop this changes nothing.

        ``set_to_none=False`` gives ``torch.optim``'s semantics for parameters without a gradient
        in later steps: each parameter that got a gradient since the last
        ``zero_grad(set_to_none=True)`` is stepped at every ``step()`` (on a zero gradient when
        backward gave it none; see :meth:`_zero_grad_params`), until a
        ``zero_grad(set_to_none=True)``.  Between a backward pass that updated parameters and
        ``step()`` it raises (``torch.optim`` would step on the zeroed gradients, but the update
        already ran).  Only this method is seen: ``nn.Module.zero_grad(set_to_none=False)`` after
        ``step()`` finds no gradient and changes nothing here."""
        if set_to_none:
            self._release_consumed()
            self._had_grad.clear()
        super().zero_grad(set_to_none)  # set_to_none=False after updates: the placeholders raise
        self._zeroed_grads = not set_to_none
        self._join_updates()
        for index in range(len(self._pending)):
            self._pending[index], self._pending_bytes[index] = [], 0
        self._waiting.clear()
        self._staged.clear()  # the host state is unchanged (no step ran); drop its device copies
        self._reduced, self._synced, self._after_reduction = [], [], False

    def remove_hooks(self) -> None:
        """Detach from the parameters: their hooks are removed, backward no longer updates them."""
        for handle in self._hook_handles:
            handle.remove()
        self._hook_handles.clear()
        self._release_consumed()
        for p in self._group_of:
            if _owner(p) is self:
                del _OWNERS[p]

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        if "_template" in self.__dict__:  # load_state_dict: optimizer_class's fix-ups, then share the state
            self._template.__setstate__({"state": self.state, "param_groups": self.param_groups})
            for bucket_opt in self._group_opts:
                if bucket_opt is not None:
                    bucket_opt.state = self.state

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("InBackwardOptimizer cannot be pickled or copied (it holds hooks on the parameters); "
                        "save and load state_dict() instead")

    # ------------------------------------------------------------------
    # Backward
    # ------------------------------------------------------------------

    def backward(self, loss: Tensor) -> None:
        """``loss.backward()``, with the two passes of clipping when it needs them.

        With ``max_grad_norm`` and ``accumulation_steps == 1``: a first backward
        (``retain_graph=True``) whose hooks record the norm of each gradient and
        free it, then the total norm and clip coefficient exactly as
        ``clip_grad_norm_``, then a second backward whose hooks clip and update.
        It costs a second backward pass (no second forward). Otherwise it is
        ``loss.backward()``.  ``Ojas.OptimizerInBackward.Repairs.two_pass_clip_backprop_eq_standard``:
        this is backward, ``clip_grad_norm_``, step.
        """
        if self.max_grad_norm is None or self.accumulation_steps > 1 or self._distributed():
            loss.backward()
            return
        if self._mode is not _Mode.UPDATE:
            raise RuntimeError("InBackwardOptimizer.backward cannot be nested in another backward pass")
        self._norms = {}
        try:
            self._mode = _Mode.NORM
            loss.backward(retain_graph=True)
            self._total_norm = self._total_norm_of(self._norms)
            self._mode = _Mode.CLIP
            loss.backward()
        finally:
            self._mode = _Mode.UPDATE
            self._norms = {}
            self._total_norm = None

    def _distributed(self) -> bool:
        """Whether DDP reduces some of the gradients or some parameters are FSDP2 shards: the
        reduced gradients are then whole only after the reduction, and clipping runs at the
        end of the (single) backward pass."""
        return bool(self._ddp_of) or self._sharded

    def _params(self) -> list[Tensor]:
        """The hooked parameters in ``param_groups`` order."""
        return [p for g in self.param_groups for p in g["params"] if p in self._group_of]

    def _total_norm_of(self, norms: dict[Tensor, Tensor]) -> Optional[Tensor]:
        """``clip_grad_norm_``'s total: the norm of the per-gradient norms, in its order (with a norm
        0 at the place of each zero gradient of :meth:`_zero_grad_params`, which ``clip_grad_norm_``
        counts)."""
        zeros = {id(p) for p in self._zero_grad_params()}
        params = [p for p in self._params() if p in norms or id(p) in zeros]
        if not params:
            return None
        groups = _group_tensors_by_device_and_dtype([params], with_indices=True)
        ordered = [norms[p] if p in norms else p.new_zeros(()) for _, (_, indices) in groups.items()
                   for p in (params[i] for i in indices)]
        first_device = params[0].device
        return torch.linalg.vector_norm(torch.stack([n.to(first_device) for n in ordered]), _NORM_TYPE)

    def _hook(self, p: Tensor, index: int, nbytes: int) -> None:
        """Post-accumulate-grad hook of ``p`` (group ``index``, gradient of ``nbytes``).  The
        plain case (one process, no accumulation, no clipping: see ``_plain_pass``) only adds
        ``p`` to its bucket; everything else goes through :meth:`_hook_general`.  No
        ``no_grad`` here: the update runs in ``optimizer_class.step()``, which sets its own
        grad mode, and the norms of clipping in their own ``no_grad``."""
        key = id(p)
        if key == self._head_key and self._head_done:
            if _live_grad(p) is None:  # the loss updated it in place and sent it no gradient: nothing to do
                return
            p.grad = None
            raise RuntimeError(_HEAD_OTHER_USE)
        if key in self._updated:
            p.grad = None
            raise RuntimeError(_SECOND_UPDATE)
        self._queue_end_of_backward()
        if not (self._plain_pass and self._mode is _Mode.UPDATE):
            self._hook_general(p)
            return
        if p.grad.is_sparse:
            self._update_sparse(p, index)
            return
        if key in self._waiting:
            self._refuse_waiting()
        self._waiting.add(key)
        self._pending[index].append(p)
        self._pending_bytes[index] += nbytes
        if self.state_device is not None:
            self._stage(p, index)
        if self._pending_bytes[index] >= self._bucket_cap_bytes:
            self._flush(index)

    def _sparse_unsupported(self, p: Tensor, index: int) -> Optional[str]:
        """Why the sparse gradient of ``p`` (group ``index``) cannot be updated exactly as the dense
        gradient with zero rows would be, or None (see :meth:`_update_sparse`)."""
        grad = p.grad
        if self.optimizer_class is not torch.optim.SGD:
            return (f"optimizer_class is {self.optimizer_class.__name__}, not torch.optim.SGD: only plain SGD's "
                    "step leaves a row with zero gradient unchanged (Ojas.OptimizerInBackward.SparseRows."
                    "sgd_sparse_rows_eq); AdamW / Adam decay their moments and weights on every row, so a row "
                    "that got no gradient still changes (SparseRows.adamw_zero_row_changes) and a lazy update of "
                    "the touched rows is not the dense step (a subclass of SGD may change the step)")
        group = self.param_groups[index]
        bad = [f"{k}={group.get(k)!r}" for k, ok in (
            ("momentum", group.get("momentum", 0) == 0), ("weight_decay", group.get("weight_decay", 0) == 0),
            ("maximize", not group.get("maximize", False)), ("fused", not group.get("fused", False)),
            ("differentiable", not group.get("differentiable", False))) if not ok]
        if bad:
            return (f"SGD with {', '.join(bad)}: only momentum=0, weight_decay=0, maximize=False, fused=False, "
                    "differentiable=False is supported. With momentum the buffer of a row with zero gradient "
                    "decays and still moves the row (SparseRows.momentum_zero_row_changes), with weight decay the "
                    "row shrinks, with maximize the dense step adds +0.0 to an untouched row (turning a -0.0 "
                    "weight into +0.0, which the sparse step does not), fused SGD has no sparse path")
        if self.accumulation_steps > 1 or self.max_grad_norm is not None or self._distributed():
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

    @staticmethod
    def _coalesce_in_order(grad: Tensor) -> Tensor:
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

    def _update_sparse(self, p: Tensor, index: int) -> None:
        """Update ``p`` alone, now, from its sparse gradient (``nn.Embedding(sparse=True)``): no dense
        ``[V, D]`` gradient is allocated.  Only plain SGD (momentum 0, weight decay 0, not maximize,
        not fused), one backward per update, no clipping, one process, float32 / float64: else raise
        with the reason (:meth:`_sparse_unsupported`).

        Why this is the dense step: Ojas.OptimizerInBackward.SparseRows.sgd_sparse_rows_eq (an SGD
        update with a gradient that is zero outside a set of rows is the update of those rows, the
        others unchanged; Ojas.OptimizerInBackward.SparseRows.rows_update_eq_dense for any rule that
        leaves an element unchanged under a zero gradient), with
        Ojas.OptimizerInBackward.Equivalence.sgd_fused_eq_standard for the update in the hook.  In floats: torch's sparse ``add_`` writes ``x + (-lr) * g`` on the rows
        of the gradient, the same kernel as the dense ``add_`` on them (tested bitwise), and the dense
        step on an untouched row is ``x + (-lr) * (+0.0) = x + (-0.0) = x`` bit for bit for every x
        (-0.0 and infinities included); the duplicate rows of a batch are summed in index order from
        zero (:meth:`_coalesce_in_order`), as the dense CPU embedding backward does (tested bitwise;
        a CUDA dense backward sums in another order: equal in reals, rounding not checked).  Not
        the dense step: AdamW / momentum / weight decay (SparseRows.adamw_zero_row_changes,
        SparseRows.momentum_zero_row_changes)."""
        reason = self._sparse_unsupported(p, index)
        if reason is not None:
            p.grad = None
            raise RuntimeError(f"InBackwardOptimizer does not support sparse gradients (e.g. "
                               f"nn.Embedding(sparse=True)) here: {reason}. Use a dense gradient (sparse=False)")
        with torch.no_grad():
            p.grad = self._coalesce_in_order(p.grad)
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
        self._consume(p)

    @staticmethod
    def _refuse_waiting() -> None:
        raise RuntimeError(
            "a parameter is already waiting for its update: an earlier backward pass did not finish (it "
            "raised?), and its gradient would be stepped twice. Call optimizer.zero_grad() after a failed "
            "backward pass; it drops the gradients and the pending updates")

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
        ddp = self._ddp_of[p]() if p in self._ddp_of else None
        distributed = ddp is not None or isinstance(p.grad, DTensor)
        if distributed and self.accumulation_steps > 1:
            raise RuntimeError(
                "accumulation_steps > 1 is not supported under DistributedDataParallel or FSDP2 (fully_shard): "
                "keep accumulation_steps=1 and run micro-batches 1..k-1 inside ddp_model.no_sync() (FSDP2: "
                "after model.set_requires_gradient_sync(False), and True again for the k-th); the update then "
                "runs once, when the accumulated gradient is reduced")
        if ddp is not None:
            # DDP copies the average of the ranks' gradients into p.grad in its own end-of-backward
            # callback: update after it (_after_reduction). Under no_sync() (DDP's last forward did
            # not prepare a reduction), keep accumulating.
            if ddp.require_forward_param_sync:
                self._after_reduction = True
                if all(d is not ddp for d in self._synced):
                    self._synced.append(ddp)
            return
        if distributed:  # FSDP2 runs the hook on the shard after the reduce-scatter
            self._on_reduced(p)
            return
        self._warn_if_local(p)
        if self._mode is _Mode.CLIP:
            self._add_to_bucket(p)
        elif self.max_grad_norm is not None and self.accumulation_steps == 1 and self._distributed():
            self._reduced.append(p)  # not reduced, but clipped with them at the end of backward
        elif self.max_grad_norm is not None and self.accumulation_steps == 1:
            raise RuntimeError(
                "with max_grad_norm (and accumulation_steps=1) run the backward pass as "
                "optimizer.backward(loss), not loss.backward(): clipping needs the norm of every gradient "
                "before the first update, so the gradients are computed twice")
        elif self._micro_batch + 1 == self.accumulation_steps and self.max_grad_norm is None:
            self._add_to_bucket(p)
        # else: an earlier micro-batch (or clipping after accumulation): keep accumulating in p.grad

    def _on_reduced(self, p: Tensor) -> None:
        """``p.grad`` is FSDP2's reduce-scattered shard of the gradient: update in its bucket, or
        with clipping after the reduction of every gradient, with their global norm."""
        if self.max_grad_norm is None:
            self._add_to_bucket(p)
        else:
            self._reduced.append(p)
            self._after_reduction = True

    def _attach_ddp(self, ddp: torch.nn.Module, p: Tensor) -> None:
        """At a forward of DDP model ``ddp``: its reducer all-reduces the gradient of ``p``."""
        unsupported = [name for name, on in (
            ("mixed_precision", getattr(ddp, "mixed_precision", None) is not None),
            ("a compiled DDP (python reducer)", getattr(ddp, "_use_python_reducer", False)),
            ("delay_all_reduce_named_params covering every parameter",
             getattr(ddp, "_delay_all_reduce_all_params", False))) if on]
        if unsupported:
            raise RuntimeError(f"InBackwardOptimizer does not support DistributedDataParallel with "
                               f"{', '.join(unsupported)}: the gradients are then reduced on low-precision copies "
                               "of the parameters or outside DDP's reducer, not where this optimizer waits for the "
                               "averages (the end of backward). Use a torch.optim optimizer")
        self._ddp_of[p] = weakref.ref(ddp)

    def _warn_if_local(self, p: Tensor) -> None:
        """Warn (once) that a plain parameter is updated with this rank's own gradient in a job
        of several ranks: right for a parameter that is not data-parallel, wrong for one of a
        DDP model whose forward this optimizer did not see (constructed before
        ``init_process_group``, or after the forward of this backward pass)."""
        if (self._warned_local or not torch.distributed.is_available() or not torch.distributed.is_initialized()
                or torch.distributed.get_world_size() == 1 or getattr(p, "_ddp_ignored", False)):
            return
        self._warned_local = True
        warnings.warn(
            "InBackwardOptimizer updates a parameter with this rank's local gradient: it is neither reduced by "
            "a DistributedDataParallel model whose forward this optimizer saw nor an FSDP2 shard. If it belongs "
            "to a DDP model, construct the optimizer after torch.distributed.init_process_group (it then finds "
            "DDP models at their forward); otherwise every rank updates with its own gradient",
            RuntimeWarning, stacklevel=2)

    def _queue_end_of_backward(self) -> None:
        """Have :meth:`_end_of_backward` run once at the end of the current backward pass; at
        its first hook, decide whether the pass takes the plain path of :meth:`_hook`: no
        accumulation, no clipping, no DDP or FSDP2, one process (else a plain parameter may
        need :meth:`_warn_if_local`)."""
        task = torch._C._current_graph_task_id()
        if task != self._queued_task:
            self._check_param_groups()
            self._queued_task = task
            torch.autograd.Variable._execution_engine.queue_callback(self._end_of_backward)
            self._plain_pass = (
                self.accumulation_steps == 1 and self.max_grad_norm is None and not self._distributed()
                and not (torch.distributed.is_available() and torch.distributed.is_initialized()
                         and torch.distributed.get_world_size() > 1))

    @torch.no_grad()
    def _end_of_backward(self) -> None:
        """Update the pending buckets; count the micro-batch; after the k-th, update what is
        left (parameters without a gradient in it; all of them, clipped, with clipping); then, if
        reduced gradients wait (DDP, or clipping under FSDP2), queue their update."""
        self._queued_task = None
        self._flush_all()
        self._join_updates()
        if self._mode is not _Mode.CLIP and self.accumulation_steps > 1:
            self._micro_batch += 1
            if self._micro_batch == self.accumulation_steps:
                self._micro_batch = 0
                self._clip_and_update([p for p in self._params() if _live_grad(p) is not None])
        if self._after_reduction:
            # queued now, so after every callback queued during the backward pass: DDP's reducer
            # queues its finalize_backward (wait for the all-reduces, copy the averages into
            # .grad) from its hooks, FSDP2 its root post-backward callback
            torch.autograd.Variable._execution_engine.queue_callback(self._after_reduction_callback)
        else:
            self._check_unhooked()

    @torch.no_grad()
    def _after_reduction_callback(self) -> None:
        """Update the parameters whose reduced gradients were waiting (with clipping, all of this
        pass's, with their global norm): those of the DDP models that reduced this pass (including
        parameters unused on this rank, to which DDP gave the average; not those no rank used,
        which DDP leaves without a gradient and the standard loop does not step), and those held
        for clipping."""
        synced, reduced = self._synced, set(self._reduced)
        self._synced, self._reduced, self._after_reduction = [], [], False
        self._clip_and_update([p for p in self._params() if _live_grad(p) is not None and (
            p in reduced or (p in self._ddp_of and any(self._ddp_of[p]() is d for d in synced)))])
        self._check_unhooked()

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

    def _hyper(self, index: int) -> dict[str, Any]:
        """The hyper-parameters of group ``index`` (its keys that ``optimizer_class`` takes)."""
        return {k: v for k, v in self.param_groups[index].items() if k in self._constructor_args}

    def _note_hyper(self, index: int) -> None:
        """At an update of group ``index``: keep its hyper-parameters at its first update of the step."""
        if index not in self._hyper_used:
            self._hyper_used[index] = {k: v.clone() if isinstance(v, Tensor) else v
                                       for k, v in self._hyper(index).items()}

    def _check_hyper(self) -> None:
        """At :meth:`step`: raise if a group updated since the last step() has other
        hyper-parameters now than at its update (an lr set, or an LR scheduler stepped, between
        backward and step()): ``torch.optim`` would use the new values in this step."""
        for index, used in self._hyper_used.items():
            now = self._hyper(index) if index < len(self.param_groups) else {}
            changed = [k for k, v in used.items() if not _same_hyper(v, now.get(k))]
            if changed:
                raise RuntimeError(
                    f"param_groups[{index}] {changed} changed between the backward pass and step(): torch.optim's "
                    "step() would use the new values in this step, but InBackwardOptimizer already updated the "
                    "parameters in backward with the old ones. Change hyper-parameters before the backward pass "
                    "(an LR scheduler: its step() after optimizer.step(), as usual)")

    def _check_param_groups(self) -> None:
        """When the parameters of :attr:`param_groups` changed since the last check (a list edited,
        replaced, a group added): raise if a hooked parameter left the group it was hooked in (its
        hook would go on updating it, with that group's hyper-parameters, where ``torch.optim``
        would not step it or would use its new group's), and find the parameters without a hook
        again (:meth:`_check_unhooked`). Called at the first hook of each backward pass (before
        any update in it), at its end and at :meth:`step`; O(parameters) identity checks."""
        layout = [[id(p) for p in g["params"]] for g in self.param_groups]
        if layout == self._layout:
            return
        members = [set(ids) for ids in layout]
        left = sorted({i for p, i in self._group_of.items() if i >= len(members) or id(p) not in members[i]})
        if left:
            raise RuntimeError(
                f"param_groups changed after InBackwardOptimizer hooked its parameters: group(s) {left} no longer "
                "hold some of the parameters they were constructed with (removed, or moved to another group). Their "
                "hooks would keep updating them with the old group's hyper-parameters, where torch.optim would not "
                "step them or would use the new group's. Change hyper-parameters in place (param_groups[i]['lr'] "
                "= ...), freeze a parameter with requires_grad_(False) instead of removing it, or call "
                "remove_hooks() and construct a new InBackwardOptimizer over the new groups")
        self._unhooked = [(i, j, p) for i, g in enumerate(self.param_groups) for j, p in enumerate(g["params"])
                          if p not in self._group_of]
        self._layout = layout

    def _check_unhooked(self) -> None:
        """Raise if a parameter of param_groups without a hook (frozen at construction, unfrozen
        since) has a gradient: it would never be updated while its ``.grad`` grows."""
        self._check_param_groups()
        unhooked = [(i, j) for i, j, p in self._unhooked if p.grad is not None]
        if unhooked:
            raise RuntimeError(
                f"parameter(s) {unhooked} ((group, index) in param_groups) have a gradient but no hook: they did "
                "not require grad when InBackwardOptimizer was constructed (unfrozen since?), so they are never "
                "updated while their .grad accumulates. Construct the optimizer after unfreezing, or leave "
                "frozen parameters out of params and pass them to add_param_group when you unfreeze them")

    def _consume(self, p: Tensor, in_backward: str = _SECOND_UPDATE) -> None:
        """After the update of ``p``: drop its gradient; ``.grad`` is its placeholder
        :class:`_ConsumedGrad` until :meth:`step` (an FSDP2 shard's: None), whose every use raises,
        inside backward with ``in_backward``."""
        if isinstance(p, DTensor):
            p.grad = None
            return
        holder = self._placeholders.get(id(p))
        if holder is None or holder.shape != p.shape or holder.dtype != p.dtype or holder.device != p.device:
            holder = self._placeholders[id(p)] = _ConsumedGrad(p, in_backward)
        holder.in_backward = in_backward
        p.grad = holder
        self._consumed.append(p)

    def _release_consumed(self) -> None:
        """The ``.grad`` of the parameters updated since the last :meth:`step` goes from its
        placeholder to None (``torch.optim``'s after ``zero_grad()``), before the next backward
        pass, which would add its gradient into the placeholder."""
        _release_placeholders(self._consumed)

    def _zero_grad_params(self) -> list[Tensor]:
        """The hooked parameters (in ``param_groups`` order) that ``torch.optim``'s loop would step
        on a zero ``.grad`` now: after ``zero_grad(set_to_none=False)`` (its last call), each
        parameter given a gradient since the last ``zero_grad(set_to_none=True)`` keeps a zeroed
        ``.grad``, and ``step()`` steps it whether or not this step's backward gave it a gradient
        (weight decay, momentum). Those here got none in this step: not updated since the last
        :meth:`step`, no gradient now."""
        if not (self._zeroed_grads and self._had_grad):
            return []
        return [p for p in self._params()
                if id(p) in self._had_grad and id(p) not in self._updated and p.grad is None]

    @staticmethod
    @torch.no_grad()
    def _as_accumulated(grads: list[Tensor]) -> None:
        """``grads`` as ``torch.optim``'s loop accumulates them into a zeroed ``.grad``
        (``zero_grad(set_to_none=False)``): ``0.0 + g``, which is ``g`` except that ``-0.0``
        becomes ``+0.0`` (IEEE 754 round to nearest); in place."""
        if grads:
            torch._foreach_add_(grads, 0.0)

    def _add_to_bucket(self, p: Tensor) -> None:
        """Add ``p`` (whose gradient is whole) to its group's bucket; update the bucket once full."""
        if id(p) in self._waiting:
            self._refuse_waiting()
        index = self._group_of[p]
        self._waiting.add(id(p))
        self._pending[index].append(p)
        self._pending_bytes[index] += p.grad.numel() * p.grad.element_size()
        if self.state_device is not None:
            self._stage(p, index)
        if self._pending_bytes[index] >= self._bucket_cap_bytes:
            self._flush(index)

    def _flush_all(self) -> None:
        for index, bucket in enumerate(self._pending):
            if bucket:
                self._flush(index)

    def _flush(self, index: int) -> None:
        """One step of the group's optimizer over its bucket, with the group's current
        hyper-parameters (clipped first in the second pass of clipping); free the gradients."""
        bucket = self._pending[index]
        self._pending[index], self._pending_bytes[index] = [], 0
        self._waiting.difference_update(map(id, bucket))
        if self._mode is _Mode.CLIP:
            torch.nn.utils.clip_grads_with_norm_(bucket, self.max_grad_norm, self._total_norm)
        if self._zeroed_grads and self._had_grad:
            self._as_accumulated([p.grad for p in bucket if id(p) in self._had_grad and not p.grad.is_sparse])
        self._note_hyper(index)
        self._updated.update(map(id, bucket))
        side = self._side_stream(index, bucket)
        if side is None:
            self._update(index, bucket)
            for p in bucket:
                self._consume(p)
            return
        device = bucket[0].device
        compute = torch.cuda.current_stream(device)
        side.wait_stream(compute)  # the bucket's gradients are complete, its parameters read
        with torch.cuda.stream(side):
            self._update(index, bucket)
        done = torch.cuda.Event()
        done.record(side)
        self._release_in_flight(device)  # the previous bucket's update is over before what follows
        self._in_flight[device] = (compute, done, [p.grad for p in bucket])
        for p in bucket:
            self._consume(p)

    def _side_stream(self, index: int, bucket: list[Tensor]) -> Any:
        """The side stream for this bucket's update (:attr:`overlap`), or None: the plain pass of
        one process (no clipping, accumulation, DDP, FSDP2), state with the parameters, every
        parameter of the bucket on one CUDA device, and an update that is not plain SGD (one
        ``_foreach_add_``: less device time than the stream and event calls cost the host)."""
        if not (self.overlap and self._plain_pass and self._mode is _Mode.UPDATE and self.state_device is None):
            return None
        if self._plain_sgd_lr(self._group_opts[index], index) is not None:
            return None
        device = bucket[0].device
        if device.type != "cuda" or any(p.device != device or isinstance(p, DTensor) for p in bucket):
            return None
        side = self._update_streams.get(device)
        if side is None:
            side = self._update_streams[device] = torch.cuda.Stream(device)
        return side

    def _release_in_flight(self, device: torch.device) -> None:
        """The compute stream waits for the update in flight on ``device`` (queued: the host does
        not wait), then that update's gradients are dropped: in the compute stream's order, so
        the allocator can hand their blocks out to its next kernels at once (no ``record_stream``,
        whose blocks wait for the device to catch up, which a host running ahead of the device
        would pay in memory). So at most one bucket's gradients are in flight beside the
        pending bucket."""
        in_flight = self._in_flight.pop(device, None)
        if in_flight is not None:
            compute, done, _grads = in_flight
            compute.wait_event(done)

    def _join_updates(self) -> None:
        """At the end of the backward pass: the compute streams wait for the last updates."""
        for device in list(self._in_flight):
            self._release_in_flight(device)

    def _update(self, index: int, bucket: list[Tensor]) -> None:
        """The update of the bucket (its gradients are freed by :meth:`_flush`): plain SGD directly
        (:meth:`_plain_sgd_lr`), Adam / AdamW through torch's functional step directly
        (:meth:`_direct_adam`), else one ``step()`` of the group's ``optimizer_class``."""
        bucket_opt = self._group_opts[index]
        lr = self._plain_sgd_lr(bucket_opt, index) if self.state_device is None else None
        if lr is not None and not any(p.grad.is_sparse for p in bucket):
            with torch.no_grad():
                torch._foreach_add_(bucket, [p.grad for p in bucket], alpha=-lr)
            return
        group = bucket_opt.param_groups[0]
        group.update((k, v) for k, v in self.param_groups[index].items() if k not in ("params", "param_names"))
        if self.state_device is None and self._direct_adam(bucket_opt, group, bucket):
            return
        sliced: list[tuple[Tensor, int]] = []
        if self.state_device is not None and self._state_slice_bytes is not None:
            lengths = [self._slice_length(p, index) for p in bucket]
            sliced = [(p, n) for p, n in zip(bucket, lengths) if n is not None]
            bucket = [p for p, n in zip(bucket, lengths) if n is None]
        if bucket:
            group["params"] = bucket
            hosts = self._swap_in(bucket) if self.state_device is not None else None
            try:
                bucket_opt.step()
            finally:
                group["params"] = []
                if hosts is not None:
                    self._swap_out(bucket, hosts)
        for p, length in sliced:
            self._step_sliced(bucket_opt, p, length)

    def _direct_adam(self, bucket_opt: torch.optim.Optimizer, group: dict, bucket: list[Tensor]) -> bool:
        """Step the bucket by torch's functional ``adam`` with the arguments ``Adam.step`` passes it,
        when the group's class steps with ``torch.optim.Adam.step`` itself (Adam, and AdamW where it
        is Adam with ``decoupled_weight_decay``), every parameter has its state already, a dense real
        gradient, and the step is the plain one (not fused, capturable or differentiable, a float lr,
        no step hooks, no ``grad_scale`` / ``found_inf``, not inside a CUDA graph capture); return
        whether it did. The same call ``Adam.step`` makes, without its per-call Python (``_init_group``,
        the step wrapper; under torch.profiler on the H200 a bf16 1.06B step spent 22 ms of host time
        in 26 bucket ``AdamW.step`` calls against 11 ms in the standard loop's one, benchmarks/RESULTS.md);
        tests/test_optimizer_in_backward.py checks the bits against the standard loop."""
        if (inspect.unwrap(type(bucket_opt).step) is not _ADAM_STEP or group["fused"] or group["capturable"]
                or group["differentiable"] or isinstance(group["lr"], Tensor)
                or bucket_opt._optimizer_step_pre_hooks or bucket_opt._optimizer_step_post_hooks
                or _optim._global_optimizer_pre_hooks or _optim._global_optimizer_post_hooks
                or getattr(bucket_opt, "grad_scale", None) is not None
                or getattr(bucket_opt, "found_inf", None) is not None
                or (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())):
            return False
        amsgrad = group["amsgrad"]
        grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps = [], [], [], [], []
        for p in bucket:
            state = bucket_opt.state.get(p)
            if not state or p.grad.is_sparse or torch.is_complex(p):
                return False
            grads.append(p.grad)
            exp_avgs.append(state["exp_avg"])
            exp_avg_sqs.append(state["exp_avg_sq"])
            if amsgrad:
                max_exp_avg_sqs.append(state["max_exp_avg_sq"])
            steps.append(state["step"])
        beta1, beta2 = group["betas"]
        decoupled = {"decoupled_weight_decay": group["decoupled_weight_decay"]} if "decoupled_weight_decay" in group else {}
        with torch.no_grad():
            _adam.adam(bucket, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, amsgrad=amsgrad,
                       has_complex=False, beta1=beta1, beta2=beta2, lr=group["lr"],
                       weight_decay=group["weight_decay"], eps=group["eps"], maximize=group["maximize"],
                       foreach=group["foreach"], capturable=False, differentiable=False, fused=group["fused"],
                       grad_scale=None, found_inf=None, **decoupled)
        return True

    def _plain_sgd_lr(self, bucket_opt: torch.optim.Optimizer, index: int) -> Optional[float]:
        """The learning rate when the group's update is plain SGD (``torch.optim.SGD`` itself, no
        momentum, weight decay, maximize, differentiable or fused step, a float lr, no optimizer
        step hooks), else None. Its step is then ``p.add_(p.grad, alpha=-lr)`` on both of torch's
        paths (``_single_tensor_sgd``, and ``_multi_tensor_sgd``'s ``torch._foreach_add_``), which
        :meth:`_update` calls directly: the same arithmetic without ``Optimizer.step``'s per-call
        cost (about 60 us of Python per bucket, against 10 us for the update;
        tests/test_optimizer_in_backward.py checks the bits against ``SGD.step``)."""
        if type(bucket_opt) is not torch.optim.SGD:
            return None
        group = self.param_groups[index]
        lr = group["lr"]
        if (group["momentum"] != 0 or group["weight_decay"] != 0 or group["maximize"] or group["differentiable"]
                or group.get("fused") or isinstance(lr, torch.Tensor) or bucket_opt._optimizer_step_pre_hooks
                or bucket_opt._optimizer_step_post_hooks or _optim._global_optimizer_pre_hooks
                or _optim._global_optimizer_post_hooks):
            return None
        return lr

    # ------------------------------------------------------------------
    # The head updated inside the linear cross-entropy's backward (head_weight)
    # ------------------------------------------------------------------

    def _check_head_weight(self, head_weight: Any) -> None:
        """Raise unless ``head_weight`` can be updated inside the loss's backward: a hooked 2-D
        parameter of a plain-SGD group, without accumulation or clipping."""
        if not isinstance(head_weight, Tensor):
            raise TypeError(f"head_weight must be a torch.Tensor (the [V, D] weight of the loss's head, e.g. "
                            f"model.lm_head.weight) or None, got {type(head_weight).__name__}")
        if head_weight.dim() != 2:
            raise ValueError(f"head_weight must be the 2-D [V, D] weight of a linear head, got shape "
                             f"{tuple(head_weight.shape)}")
        if head_weight not in self._group_of:
            raise ValueError("head_weight must be one of params and require grad (it is updated by this optimizer, "
                             "inside the loss's backward)")
        if isinstance(head_weight, DTensor):
            raise NotImplementedError("head_weight as an FSDP2 shard (DTensor) is not supported: the shard's "
                                      "gradient is whole only after the reduce-scatter")
        if self.optimizer_class is not torch.optim.SGD:
            raise ValueError(
                f"head_weight needs optimizer_class=torch.optim.SGD (plain: no momentum, weight decay, maximize), "
                f"got {self.optimizer_class.__name__}: only plain SGD's update inside the loss is implemented (one "
                "add_ per vocabulary chunk, no state). With other optimizers the head keeps the dense path (its "
                "[V, D] gradient, updated in its hook): construct the optimizer without head_weight")
        if self.accumulation_steps > 1:
            raise ValueError(
                f"head_weight with accumulation_steps={self.accumulation_steps} is not supported: the head's "
                "gradient must be summed over the micro-batches before its update, so its [V, D] gradient exists "
                "anyway (the dense path); construct the optimizer without head_weight")
        if self.max_grad_norm is not None:
            raise ValueError(
                "head_weight with max_grad_norm is not supported: clipping needs the norm of every gradient "
                "before the first update, the head's included (the dense path); construct the optimizer without "
                "head_weight")
        index = self._group_of[head_weight]
        if self._plain_sgd_lr(self._group_opts[index], index) is None:
            raise ValueError(f"head_weight needs its group to be plain SGD: {self._not_plain_sgd(index)}")

    def _not_plain_sgd(self, index: int) -> str:
        """Why group ``index``'s update is not plain SGD (for the errors of head_weight)."""
        group = self.param_groups[index]
        bad = [f"{k}={group.get(k)!r}" for k, ok in (
            ("momentum", group.get("momentum", 0) == 0), ("weight_decay", group.get("weight_decay", 0) == 0),
            ("maximize", not group.get("maximize", False)), ("fused", not group.get("fused", False)),
            ("differentiable", not group.get("differentiable", False)),
            ("lr", not isinstance(group.get("lr"), Tensor))) if not ok]
        bucket_opt = self._group_opts[index]
        if (bucket_opt is not None and (bucket_opt._optimizer_step_pre_hooks or bucket_opt._optimizer_step_post_hooks)
                or _optim._global_optimizer_pre_hooks or _optim._global_optimizer_post_hooks):
            bad.append("optimizer step hooks registered (they would not run for the head)")
        return (", ".join(bad) or "not torch.optim.SGD") + (
            "; only momentum=0, weight_decay=0, maximize=False, fused=False, differentiable=False, a float lr and "
            "no step hooks are supported (with momentum or weight decay use the dense path: no head_weight)")

    def _check_head_forward(self, weight: Tensor, *inputs: Any) -> None:
        """At the loss's forward: raise if ``weight`` (the head) is already used by the graph that
        produced ``inputs`` (a head tied to the input embedding): its update needs the embedding's
        gradient too, which comes after the loss's backward. (A use after the loss is caught in
        the backward: autograd's version counter, or :meth:`_hook`.)"""
        stack = [t.grad_fn for t in inputs if isinstance(t, Tensor) and t.grad_fn is not None]
        seen = set()
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            for nxt, _ in node.next_functions:
                if nxt is None or nxt in seen:
                    continue
                if getattr(nxt, "variable", None) is weight:
                    raise ValueError(
                        "head_weight is also used by the computation of the loss's input (a head tied to the "
                        "input embedding, tie_word_embeddings=True?): its update needs the embedding's gradient "
                        "as well, which arrives after the loss's backward, so it cannot be updated inside the "
                        "loss (Ojas.OptimizerInBackward.Counterexamples.tied_per_use_neq_standard). Construct "
                        "InBackwardOptimizer without head_weight for a tied head (it keeps the dense path)")
                stack.append(nxt)

    def _head_shared_pass(self) -> bool:
        """At the start of a loss's backward (``_HeadUpdate.begin``, after it left
        :attr:`_head_forwards`): whether another forward of the loss whose backward has not begun
        sends the head a gradient in this backward pass too (two forwards and one backward of the
        summed losses). The head's update needs the sum of their gradients, which no one loss's
        backward has: then every loss of this pass returns the head's gradient and it is updated in
        its hook (the dense path, its [V, D] gradient alive for the step: bitwise ``torch.optim``'s
        plain SGD); otherwise the loss updates it. Decided at the first loss of the pass, the same for
        every loss of the pass (before any row is updated); a forward whose node is unknown counts as
        one of this pass."""
        task = torch._C._current_graph_task_id()
        if task != self._head_pass[0]:
            self._head_pass = (task, any(f.runs_in_this_pass() for f in list(self._head_forwards)))
        return self._head_pass[1]

    def _head_step_lr(self) -> float:
        """At the loss's backward: the learning rate of the head's plain-SGD step, after checking
        that this backward pass may update it (one process, plain SGD still, not updated yet)."""
        index = self._group_of[self._head]
        if self._head_done or self._head_key in self._updated:
            raise RuntimeError(
                "the head weight was already updated since the last optimizer.step() (a second backward pass "
                "without optimizer.step()?): every backward pass updates it inside the loss, so two would be two "
                "updates, not one on the summed gradient. Call optimizer.step() once per update")
        if self._mode is not _Mode.UPDATE:
            raise RuntimeError("the head weight cannot be updated inside the loss during the passes of "
                               "InBackwardOptimizer.backward's clipping")
        if self._distributed() or (torch.distributed.is_available() and torch.distributed.is_initialized()
                                   and torch.distributed.get_world_size() > 1):
            raise RuntimeError(
                "head_weight is not supported with several processes (DDP / FSDP2): the head's gradient must be "
                "averaged over the ranks before its update (the dense path); construct the optimizer without "
                "head_weight")
        lr = self._plain_sgd_lr(self._group_opts[index], index)
        if lr is None:
            raise RuntimeError(f"head_weight's group is no longer plain SGD: {self._not_plain_sgd(index)}")
        return lr

    @torch.no_grad()
    def _head_update(self, weight: Tensor, v0: int, v1: int, grad: Tensor, lr: float) -> None:
        """Plain SGD on rows [v0, v1) of the head ``weight``, their whole gradient ``grad`` in its
        dtype: ``torch._foreach_add_``, the call of :meth:`_update`'s plain-SGD path."""
        if self._zeroed_grads and self._head_key in self._had_grad:
            self._as_accumulated([grad])
        torch._foreach_add_([weight[v0:v1]], [grad], alpha=-lr)

    def _head_finished(self) -> None:
        """The loss's backward updated every row of the head."""
        self._head_done = True
        self._updated.add(self._head_key)
        self._note_hyper(self._group_of[self._head])
        self._consume(self._head, _HEAD_OTHER_USE)

    # ------------------------------------------------------------------
    # Optimizer state on the host (state_device="cpu")
    # ------------------------------------------------------------------

    def _streamed(self, p: Tensor, key: Any, value: Any) -> bool:
        """Whether state ``key`` of ``p`` is streamed: a tensor torch keeps with the parameter
        (the policy of ``Optimizer.load_state_dict``: everything but ``step``, and ``step`` too
        with ``fused`` or ``capturable``)."""
        if not isinstance(value, Tensor):
            return False
        if key != "step":
            return True
        group = self.param_groups[self._group_of[p]] if p in self._group_of else {}
        return bool(group.get("fused")) or bool(group.get("capturable"))

    def _copy_stream(self, device: torch.device, direction: str = "in") -> Any:
        """The side stream of the state's copies to the device (``"in"``) or back to the host
        (``"out"``): one each, so that the two directions of PCIe run at once."""
        stream = self._copy_streams.get((device, direction))
        if stream is None:
            stream = self._copy_streams[(device, direction)] = torch.cuda.Stream(device)
        return stream

    def _stage(self, p: Tensor, index: int) -> None:
        """Start copying the host state of ``p`` (just added to the bucket of group ``index``) to
        its device: on CUDA ``non_blocking`` on the side stream, after the latest copy back into
        those host tensors; the step waits on ``_stage_events[index]``."""
        state = self.state.get(p)
        if not state:
            return  # no state yet: the first step creates it on the device
        if self._slice_length(p, index) is not None:
            return  # updated in slices, each slice's state copied in by _step_sliced
        hosts = {k: v for k, v in state.items() if self._streamed(p, k, v)}
        if not hosts:
            return
        if not _is_cuda(p):
            self._staged[id(p)] = {k: torch.empty_like(h, device=p.device).copy_(h) for k, h in hosts.items()}
            return
        stream = self._copy_stream(p.device)
        done = self._out_events.get(id(p))
        with torch.cuda.stream(stream):
            if done is not None:
                stream.wait_event(done)
            self._staged[id(p)] = {k: torch.empty_like(h, device=p.device).copy_(h, non_blocking=True)
                                   for k, h in hosts.items()}
            event = torch.cuda.Event()
            event.record(stream)
        self._stage_events[index] = event

    def _slice_length(self, p: Tensor, index: int) -> Optional[int]:
        """How many elements of ``p`` (group ``index``) each slice of its update holds, or None when
        ``p`` is updated whole: ``state_slice_mb`` is None, the group's class is not one of
        :data:`_SLICED_CLASSES` exactly, the step is ``differentiable``, plain SGD (momentum 0: no
        state), ``p`` or its gradient not contiguous (or sparse, or an FSDP2 shard), a state tensor of
        ``p`` neither of ``p``'s shape nor 0-d, or the state fits the slice. The state's bytes per
        element are the sum of the element sizes of its tensors of ``p``'s shape (AdamW 2 x, with
        amsgrad 3 x, SGD momentum 1 x the parameter's); before the first update (no state yet) those of
        the tensors the step will create, of the parameter's dtype (the same counts: the first update
        creates each slice's state on the device, so its slices are those of the later updates; they
        were the parameter's own element size, which made the first update's slices of AdamW state
        twice ``state_slice_mb / 2``). A slice's state is half ``state_slice_mb`` (two are on the
        device at a time), its length rounded down to a multiple of :data:`_SLICE_ALIGN`."""
        limit = self._state_slice_bytes
        bucket_opt = self._group_opts[index]
        if limit is None or type(bucket_opt) not in _SLICED_CLASSES:
            return None
        group = self.param_groups[index]
        grad = p.grad
        if (group.get("differentiable") or (type(bucket_opt) is torch.optim.SGD and group["momentum"] == 0)
                or grad is None or grad.is_sparse or isinstance(p, DTensor) or not p.is_contiguous()
                or not grad.is_contiguous() or grad.shape != p.shape):
            return None
        per_element = 0
        for v in self.state.get(p, {}).values():
            if isinstance(v, Tensor) and v.dim() > 0:
                if v.shape != p.shape or not v.is_contiguous():
                    return None
                per_element += v.element_size()
        if not per_element:  # the tensors the step creates: momentum_buffer; exp_avg, exp_avg_sq (max_exp_avg_sq)
            created = 1 if type(bucket_opt) is torch.optim.SGD else 3 if group.get("amsgrad") else 2
            per_element = created * p.element_size()
        length = max(_SLICE_ALIGN, limit // 2 // per_element // _SLICE_ALIGN * _SLICE_ALIGN)  # two slices in flight
        return length if p.numel() * per_element > limit and p.numel() > length else None

    def _step_sliced(self, bucket_opt: torch.optim.Optimizer, p: Tensor, length: int) -> None:
        """Update ``p`` with one ``step()`` of ``bucket_opt`` per slice of ``length`` elements of its
        flattened storage, so that at most two slices' state (``state_slice_mb`` in all) is on the
        device at a time.

        Each slice is a view of ``p``, given the view of its gradient as ``.grad`` and, in a state
        of its own, the slice of each state tensor of ``p``'s shape (copied from the host into one of
        two device buffers per state tensor, the slices alternating between them; created by the
        step at the first update) and a copy of each 0-d state value (``step``). After its step the
        slice's state goes back into its part of the host tensors; the 0-d values of the last slice
        become ``p``'s. On CUDA the buffers (and the device copies of 0-d values) are allocated on
        the inward copy stream (``_copy_stream(device, "in")``), as :meth:`_stage`'s copies are: a
        block allocated on the compute stream may still be used by that stream's queued kernels, and
        the inward stream does not wait for it. The copies in run there, each after the copy back of
        the slice before last, which read the same buffer; the
        step's stream waits for them; the copies back run on the outward stream after the slice's
        step. So the next slice's copy in, this slice's step and the previous slice's copy back can
        run at once. The first copy in waits for the copies back of the parameter's previous update.

        Why this is the unsliced step (no theorem; tested bitwise): the classes of
        :data:`_SLICED_CLASSES` compute each element of the new parameter and state from the same
        element of the parameter, gradient and state and from per-parameter scalars (lr, betas,
        weight decay, maximize, and the bias corrections of ``step``), whose values are the same for
        every slice, since each slice starts from the same ``step`` and adds one. torch's foreach,
        fused and single-tensor kernels are elementwise; whether a kernel rounds an element the same
        way at another offset in a tensor (vectorised body against scalar tail) is what the tests
        check (tests/test_optimizer_in_backward_host_state.py, slices of 1 element and of sizes not
        dividing the parameter's, CPU; the default slices are multiples of 2**20 bytes)."""
        state = self.state[p]
        n = p.numel()
        flat_p, flat_g = p.detach().view(-1), p.grad.view(-1)
        hosts = {k: v.view(-1) for k, v in state.items() if isinstance(v, Tensor) and v.dim() > 0}
        scalars = {k: v for k, v in state.items() if k not in hosts}
        cuda = _is_cuda(p)
        streams: tuple[Any, Any] = (None, None)
        freed: list[Any] = [None, None]  # per buffer, the event after the copy back that last read it
        bounds = [(a, min(n, a + length)) for a in range(0, n, length)]
        if cuda:
            streams = (self._copy_stream(p.device, "in"), self._copy_stream(p.device, "out"))
            compute = torch.cuda.current_stream(p.device)
            done = self._out_events.get(id(p))
            if done is not None:
                streams[0].wait_event(done)  # the copies back of the previous update are done
            # The device memory the inward stream writes is allocated on that stream, as _stage's: a block
            # allocated on the compute stream may be one it freed a moment ago whose kernels are still
            # queued there (the host runs ahead of the device), and a copy on another stream that does
            # not wait for the compute stream would race them (its state overwritten by them, or theirs
            # by it). Blocks of the inward stream's pool are handed out again only after the streams
            # recorded on them (compute: the steps; outward: the copies back) have passed their frees.
            with torch.cuda.stream(streams[0]):
                # the 0-d values torch keeps with the parameter (fused / capturable step), once on the device
                scalars = {k: (self._copy(torch.empty_like(v, device=p.device), v, streams[0])
                               if self._streamed(p, k, v) else v) for k, v in scalars.items()}
                buffers = [{k: torch.empty(b - a, dtype=h.dtype, device=p.device) for k, h in hosts.items()}
                           for a, b in bounds[:2]]
            for t in [*(v for v in scalars.values() if isinstance(v, Tensor) and _is_cuda(v)),
                      *(t for d in buffers for t in d.values())]:
                t.record_stream(compute)  # read and written by the steps
        else:
            buffers = [{k: torch.empty(b - a, dtype=h.dtype, device=p.device) for k, h in hosts.items()}
                       for a, b in bounds[:2]]

        def copy_in(i: int) -> tuple[dict[Any, Tensor], Any]:
            """Slice ``i``'s state in its buffer (and, on CUDA, the event after its copies in)."""
            a, b = bounds[i]
            if freed[i % 2] is not None:
                streams[0].wait_event(freed[i % 2])
            copies = {k: self._copy(buffers[i % 2][k][:b - a], h[a:b], streams[0]) for k, h in hosts.items()}
            event = None
            if cuda:
                event = torch.cuda.Event()
                event.record(streams[0])
            return copies, event

        created: dict[Any, Tensor] = {}  # host tensors of the state the first update creates
        last: dict[Any, Any] = {}
        slice_state: Any = collections.defaultdict(dict)
        group = bucket_opt.param_groups[0]
        shared = bucket_opt.state
        bucket_opt.state = slice_state
        try:
            staged = copy_in(0)
            for i, (a, b) in enumerate(bounds):
                mine, copied = staged
                if i + 1 < len(bounds):
                    staged = copy_in(i + 1)
                view = flat_p[a:b]
                view.grad = flat_g[a:b]
                if cuda:
                    # this slice's copies in, not the next one's; before the clones below, which read the
                    # device copy of a 0-d value (fused / capturable step) that the inward stream writes
                    compute.wait_event(copied)
                for k, v in scalars.items():
                    mine[k] = v.clone() if isinstance(v, Tensor) else v
                slice_state.clear()
                slice_state[view] = mine
                group["params"] = [view]
                bucket_opt.step()
                view.grad = None
                if cuda:
                    streams[1].wait_stream(compute)
                for k, v in mine.items():
                    if k in hosts or (isinstance(v, Tensor) and v.dim() > 0):
                        if k not in hosts and k not in created:
                            created[k] = torch.empty(n, dtype=v.dtype, pin_memory=self._pin)
                        self._copy((hosts[k] if k in hosts else created[k])[a:b], v, streams[1])
                    else:
                        last[k] = v
                if cuda:
                    freed[i % 2] = torch.cuda.Event()
                    freed[i % 2].record(streams[1])
        finally:
            bucket_opt.state = shared
            group["params"] = []
        for k, h in created.items():
            state[k] = h.view(p.shape)
        for k, v in last.items():
            old = state.get(k)
            if isinstance(v, Tensor) and self._streamed(p, k, v):  # back to its host tensor
                if not (isinstance(old, Tensor) and old.shape == v.shape and old.dtype == v.dtype):
                    old = state[k] = torch.empty_like(v, device="cpu", pin_memory=self._pin)
                self._copy(old, v, streams[1])
            elif isinstance(v, Tensor) and isinstance(old, Tensor) and old.shape == v.shape and old.dtype == v.dtype:
                old.copy_(v)  # the step counter torch keeps on the CPU, in place as torch's own step
            else:
                state[k] = v
        if cuda:
            event = torch.cuda.Event()
            event.record(streams[1])
            self._out_events[id(p)] = event

    @staticmethod
    def _copy(dst: Tensor, src: Tensor, stream: Any) -> Tensor:
        """``dst.copy_(src)``; between host and device ``non_blocking`` on ``stream``, the device
        tensor kept (``record_stream``) until the copy is done."""
        if stream is None or _is_cuda(dst) == _is_cuda(src):
            return dst.copy_(src)
        with torch.cuda.stream(stream):
            dst.copy_(src, non_blocking=True)
        (src if _is_cuda(src) else dst).record_stream(stream)  # kept until the copy is done
        return dst

    def _swap_in(self, bucket: list[Tensor]) -> dict[int, dict[Any, Tensor]]:
        """Put the staged device copies of the bucket's state in :attr:`state` (the step's stream
        waiting for their copies); return the host tensors they stand for."""
        index = self._group_of[bucket[0]]
        event = self._stage_events.pop(index, None)
        hosts: dict[int, dict[Any, Tensor]] = {}
        streams: dict[torch.device, Any] = {}
        for p in bucket:
            staged = self._staged.pop(id(p), None)
            if _is_cuda(p) and p.device not in streams:
                streams[p.device] = torch.cuda.current_stream(p.device)
                if event is not None:
                    streams[p.device].wait_event(event)
            if not staged:
                continue
            state = self.state[p]
            hosts[id(p)] = {k: state[k] for k in staged}
            for k, dev in staged.items():
                if _is_cuda(dev):
                    dev.record_stream(streams[p.device])  # used by the step and the copy back there
                state[k] = dev
        return hosts

    def _swap_out(self, bucket: list[Tensor], hosts: dict[int, dict[Any, Tensor]]) -> None:
        """Copy the bucket's state back into its host tensors (new pinned ones for state the step
        created) and put them in :attr:`state`: the device copies are dropped. On CUDA the copies
        run ``non_blocking`` on the outward copy stream (not :meth:`_stage`'s: the two directions of
        PCIe at once; on the H200 the 1.06B fp32 AdamW step went from 0.869x to 0.988x of standard
        + checkpointing with it, benchmarks/RESULTS.md), after the step's stream has reached this
        point, so the backward's kernels do not wait for them; each device copy is kept
        (``record_stream``) until its copy is done."""
        streams: dict[torch.device, Any] = {}
        for p in bucket:
            state = self.state.get(p)
            if not state:
                continue
            if _is_cuda(p) and p.device not in streams:
                streams[p.device] = self._copy_stream(p.device, "out")
                streams[p.device].wait_stream(torch.cuda.current_stream(p.device))  # the step's results are written
            old = hosts.get(id(p), {})
            for k, v in list(state.items()):
                if not self._streamed(p, k, v) or (v.device.type == "cpu" and p.device.type != "cpu"):
                    continue
                h = old.get(k)
                if v is h:
                    continue
                if (h is None or h.shape != v.shape or h.dtype != v.dtype or h.stride() != v.stride()
                        or (self._pin and not h.is_pinned())):
                    h = torch.empty_like(v, device="cpu", pin_memory=self._pin)
                if _is_cuda(v):
                    with torch.cuda.stream(streams[p.device]):
                        h.copy_(v, non_blocking=True)
                    v.record_stream(streams[p.device])
                else:
                    h.copy_(v)
                state[k] = h
        events = {device: torch.cuda.Event() for device in streams}
        for device, event in events.items():
            event.record(streams[device])
        for p in bucket:
            if p.device in events:
                self._out_events[id(p)] = events[p.device]

    def _wait_for_host_state(self) -> None:
        """Wait for the copies back into the host tensors (before the host reads them)."""
        for event in {id(e): e for e in self._out_events.values()}.values():
            event.synchronize()
        self._out_events.clear()

    def _state_to_host(self) -> None:
        """Put every streamed state tensor in (pinned) host memory: after load_state_dict."""
        for p, state in self.state.items():
            for k, v in list(state.items()):
                if self._streamed(p, k, v):
                    h = torch.empty_like(v, device="cpu", pin_memory=self._pin)
                    h.copy_(v)
                    state[k] = h

    def state_dict(self) -> dict[str, Any]:
        """``torch.optim.Optimizer.state_dict``; with ``state_device="cpu"`` its tensors are the
        host ones (after waiting for the copies back)."""
        if self.state_device is not None:
            self._wait_for_host_state()
        return super().state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """``torch.optim.Optimizer.load_state_dict``; with ``state_device="cpu"`` the state is
        then moved to (pinned) host memory."""
        if self.state_device is not None:
            self._wait_for_host_state()
            self._staged.clear()
        super().load_state_dict(state_dict)
        if self.state_device is not None:
            self._state_to_host()
