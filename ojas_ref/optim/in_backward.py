"""An optimizer that updates inside the backward pass: no persistent ``.grad`` buffers.

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
opt.step(); opt.zero_grad()`` (tested: ``tests/optim/test_in_backward.py``).
Two exceptions to calling ``step()`` save ``Optimizer.step``'s per-call Python for each bucket:
plain SGD (``torch.optim.SGD`` without momentum, weight decay, maximize, a tensor lr or
step hooks), whose update is ``torch._foreach_add_(params, grads, alpha=-lr)`` (the call of
torch's foreach path, and the arithmetic of its single-tensor ``param.add_(grad, alpha=-lr)``),
called directly (``InBackwardOptimizer._plain_sgd_lr``); and Adam / AdamW once their state
exists (foreach, single-tensor or fused; not capturable, differentiable, a tensor lr or step
hooks), stepped by the functional ``torch.optim.adam.adam`` with the arguments ``Adam.step``
passes it (``ojas_ref.optim._fast_paths.step_adam_directly``).

Why this is the standard loop, and where it is not (rocq/InBackward/;
the theorems are over exact arithmetic for the schedule of events, for any
per-parameter update rule; the arithmetic of each update is torch's own):

* ``Events``: a backward pass is a list of events, gradient contributions (each
  reading some parameters) and hooks; ``standard_run`` accumulates with frozen
  parameters, then steps every parameter with a gradient once; ``fused_run``
  updates ``p`` at ``Hook p`` and frees its gradient.
* ``Ojas.InBackward.Equivalence.fused_eq_standard``: the two runs give
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
* Buckets: ``Ojas.InBackward.Buckets.bucketed_eq_standard``: updating
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
  ``Ojas.InBackward.SparseRows.sgd_sparse_rows_eq``: with momentum 0 and weight
  decay 0, updating the rows the gradient touches is the dense step (the other rows are
  unchanged); ``SparseRows.lazy_adamw_neq_dense`` / ``lazy_momentum_neq_dense``: not for
  AdamW or momentum, which raise (:meth:`InBackwardOptimizer._update_sparse`).
* The head updated inside the linear cross-entropy's backward (``head_weight``), plain SGD only:
  ``Ojas.InBackward.ChunkedHead.chunked_head_sgd_eq_standard`` (the reference: per
  vocabulary chunk, its dH part and its rows' whole gradients, then the rows' step) and
  ``Ojas.InBackward.ChunkedHead.chunked_head_dh_first_code_eq_standard`` (the Triton
  kernel: dH in the forward, then per slab): backward then the step, every row once, no [V, D]
  gradient; a head with another use (tied embeddings) raises.
* One backward pass is one update (the theorems are about one step): two
  ``.backward()`` calls would be two updates, not one on the summed gradient, so
  a parameter that gets a gradient again after its update and before ``step()``
  raises (nested backward passes, as in reentrant checkpointing, update each
  parameter once and are fine).

Data parallelism (DDP, FSDP2; tested, no theorem) is described in ``ojas_ref/optim/_distributed.py``,
optimizer state on the host (``state_device="cpu"``, ``state_slice_mb``) in
``ojas_ref/optim/_host_state.py``.

The class is split by job: the hooks' plain path, buckets and updates here; ``_end_of_backward``
(accumulation, clipping's passes and reduced gradients: the hooks' general path and the
end-of-backward callbacks), ``_clipping`` (norms), ``_distributed`` (DDP, FSDP2), ``_host_state``,
``_sparse_rows`` (row-sparse gradients), ``_head_update`` (the head updated inside the loss),
``_fast_paths`` (plain SGD and Adam without ``Optimizer.step``'s Python), ``_overlap`` (updates on a
side stream), ``_group_checks`` (``param_groups`` edited under the updates), ``_consumed_grad`` (the
``.grad`` of an updated parameter), ``_hooks`` (which optimizer hooks a parameter) and ``_arguments``
(the checks of the constructor's arguments).

The arguments of ``optimizer_class`` (``lr``, ``betas``, ...) are validated and
defaulted by ``optimizer_class`` itself; :meth:`state_dict` has the format of
``optimizer_class``'s, so checkpoints load into either.

Where the loop around the optimizer meets these updates (no theorem; bitwise tests in
``tests/optim/test_in_backward_semantics.py``): after ``zero_grad(set_to_none=False)``
a parameter without a gradient in a step is stepped at ``step()`` on a zero gradient,
as ``torch.optim`` steps its zeroed ``.grad``; between backward and ``step()`` the
``.grad`` of an updated parameter is a placeholder whose every use raises
(``clip_grad_norm_`` there would clip an update that already ran: pass
``max_grad_norm``); see :class:`InBackwardOptimizer`.
"""

from __future__ import annotations

import inspect
import weakref
from typing import Any, Callable, Iterable, Optional, Union

import torch
from torch import Tensor

from ojas_ref.optim._arguments import check_optimizer_class, check_options, recipe_options
from ojas_ref.optim._clipping import _Mode, total_norm
from ojas_ref.optim._consumed_grad import (
    _GRAD_SCALER,
    _HEAD_OTHER_USE,
    _SECOND_UPDATE,
    ConsumedGrads,
    _live_grad,
    _release_placeholders,
)
from ojas_ref.optim._distributed import _WATCH_HANDLE  # noqa: F401 (tests read it here)
from ojas_ref.optim._distributed import DataParallel, DTensor, _watch_for_ddp, several_processes
from ojas_ref.optim._end_of_backward import EndOfBackwardMixin
from ojas_ref.optim._fast_paths import plain_sgd_lr, step_adam_directly
from ojas_ref.optim._group_checks import GroupChecks
from ojas_ref.optim._head_update import HeadUpdateMixin
from ojas_ref.optim._hooks import _OWNERS, _owner, _weak_hook
from ojas_ref.optim._host_state import _SLICE_ALIGN  # noqa: F401 (the planner's tests read it here)
from ojas_ref.optim._host_state import HostState, check_state_device
from ojas_ref.optim._overlap import UpdateStreams
from ojas_ref.optim._sparse_rows import SparseRowsMixin
from ojas_ref.recipe import MemoryRecipe

__all__ = ["InBackwardOptimizer"]


class InBackwardOptimizer(EndOfBackwardMixin, HeadUpdateMixin, SparseRowsMixin, torch.optim.Optimizer):
    """``optimizer_class`` applied to buckets of parameters whose post-accumulate-grad hooks ran.

    Equal to backward-then-``step()`` by Ojas.InBackward.Buckets.backprop_cap_bucketed_eq_standard
    (reverse-mode hook order, flush when a group's pending gradients reach the cap;
    with ``bucket_cap_mb=0``, Ojas.InBackward.Equivalence.backprop_fused_eq_standard;
    ``sgd_fused_eq_standard`` and ``adamw_fused_eq_standard`` for the rules); accumulation by
    Ojas.InBackward.Repairs.deferred_accum_backprop_eq_standard.

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
            after (see ``ojas_ref/optim/_host_state.py``); the device then holds about one
            bucket's state per group instead of all of it, at the cost of copying
            the state over PCIe twice per update.  Bitwise the same update as
            ``None`` (the bucketed update is
            Ojas.InBackward.Buckets.backprop_cap_bucketed_eq_standard; the
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
            parameters). A parameter whose state is larger is updated in contiguous slices of its
            flattened storage, two slices' state on the device at a time (:meth:`HostState.step_sliced
            <ojas_ref.optim._host_state.HostState.step_sliced>`; ``torch.optim.SGD`` with momentum,
            ``Adam`` and ``AdamW`` themselves only, others whole), bitwise the unsliced step; the
            details are in ``ojas_ref/optim/_host_state.py``.
        overlap: on CUDA, in the plain case (one process, no accumulation, no clipping,
            ``state_device=None``), run each bucket's update on a side stream of its
            device, after the compute stream's work so far (the bucket's gradients, the
            last reads of its parameters), while the backward of the earlier layers
            continues on the compute stream, which waits for it when the next bucket is
            updated and at the end of the backward pass. The same kernels on the same
            tensors: the same bits as ``overlap=False`` (tests/optim/test_in_backward.py).
            Plain-SGD buckets stay on the compute stream (their update is one add). Costs
            memory: a bucket's gradients (and its step's temporaries) live until the next
            bucket's update, so up to one bucket more is alive, and the side stream's
            allocations are its own. Without checkpointing the step's peak is at the start of
            the backward, before any update, so that costs nothing there: use it for AdamW
            (and other stateful optimizers) without checkpointing (H200, 1.06B fp32 AdamW:
            1.05x of standard against 1.00x without it, same peak; 2026-12-01,
            ``git show f14c11e:benchmarks/RESULTS.md``).
            With checkpointing the recomputation's peak comes after updates and the bucket in
            flight adds to it. Default ``False``: every update on the compute stream.
        head_weight: the ``[V, D]`` weight of a linear head whose loss is
            :func:`ojas_ref.linear_cross_entropy` (``LinearCrossEntropyLoss``, the loss of
            ``optimize_model``; e.g. ``model.lm_head.weight``), or None (default). Pass this
            optimizer to that loss as ``head_update=opt`` (``linear_cross_entropy``,
            ``LinearCrossEntropyLoss()(...)``, or ``model(..., labels=..., head_update=opt)`` under
            ``optimize_model``); a backward of the head without it raises. The loss's
            backward then updates it itself, vocabulary chunk by vocabulary chunk: for each chunk
            of rows it computes their whole gradient over all tokens (from the forward's lse),
            adds the chunk's part of the hidden states' gradient with the rows not yet updated,
            steps the rows with plain SGD and drops their gradient, so no ``[V, D]`` gradient
            exists (one ``[vocab chunk, D]`` at a time) and the head's ``.grad`` holds no gradient
            (the placeholder of an updated parameter until ``step()``, then None).
            Equal to backward then ``SGD.step()``:
            Ojas.InBackward.ChunkedHead.chunked_head_sgd_eq_standard (an instance of
            Ojas.InBackward.Equivalence.fused_eq_standard, over any scalars); in floats
            the reference's rows are bitwise the dense path's (each row's gradient summed over the
            token chunks in the same order) and so is the float32 update on the CPU; bfloat16 on
            the CPU may differ by one rounding where ATen's ``add_`` takes its scalar tail
            (tests/optim/test_head_update.py; CUDA not yet compared). Only with
            ``optimizer_class=torch.optim.SGD`` and the head's group plain (momentum 0, weight decay
            0, not maximize, not fused, a float lr, no step hooks), ``accumulation_steps=1``, no
            ``max_grad_norm``, one process: else ValueError here (or RuntimeError at the backward,
            when a group changed since, or under DDP / FSDP2). AdamW, momentum, clipping,
            accumulation and data parallelism keep the dense path: leave ``head_weight`` out.
            The loss then refuses a head with a bias, a head tied to the input embedding, autocast
            casting the weight and a second backward through the same graph; the reference and the
            Triton kernel's schedules, several forwards of the loss and errors mid-backward are
            described in ``ojas_ref/optim/_head_update.py``
            (Ojas.InBackward.ChunkedHead.chunked_head_dh_first_code_eq_standard for the
            kernel's).
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
    sparse gradients other than row-sparse float32 / float64 ones with plain SGD (momentum 0, weight
    decay 0, no clipping, no accumulation, one process: see :meth:`_update_sparse`,
    Ojas.InBackward.SparseRows.sgd_sparse_rows_eq, an instance of
    Ojas.InBackward.SparseRows.rows_update_eq_dense, updated in the hook by
    Ojas.InBackward.Equivalence.sgd_fused_eq_standard), a parameter that already has a
    ``.grad``, reentrant activation checkpointing with ``accumulation_steps > 1`` (its nested
    backward passes would count as micro-batches; use ``use_reentrant=False``).

    Data parallel (not covered by a theorem; tested, see ``ojas_ref/optim/_distributed.py``):
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
        check_optimizer_class(optimizer_class, InBackwardOptimizer)
        max_grad_norm, bucket_cap_mb, state_slice_mb = check_options(
            accumulation_steps, max_grad_norm, bucket_cap_mb, overlap, state_slice_mb
        )
        self.state_slice_mb = state_slice_mb
        self.overlap = overlap
        self._overlap = UpdateStreams()
        self.bucket_cap_mb = bucket_cap_mb
        self.state_device = check_state_device(state_device)
        self._host_state = HostState(
            pin=self.state_device is not None and torch.cuda.is_available(),
            slice_bytes=None if state_slice_mb is None else max(1, int(state_slice_mb * 2**20)),
        )
        self._bucket_cap_bytes = int(bucket_cap_mb * 2**20)
        self.optimizer_class = optimizer_class
        self.accumulation_steps = accumulation_steps
        self.max_grad_norm = max_grad_norm
        self._group_checks = GroupChecks(set(inspect.signature(optimizer_class).parameters) - {"params"})
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
        self._micro_batch = 0  # backward passes since the last update
        self._queued_task = None  # the backward pass whose end-of-backward callback is queued
        self._norms: dict[Tensor, Tensor] = {}
        self._total_norm: Optional[Tensor] = None
        self._data_parallel = DataParallel()
        # id() of the parameters updated since the last step() (ids, not tensors: a tensor's
        # __hash__ is a Python call, and these sets are touched at every hook)
        self._updated: set[int] = set()
        # whether the current backward pass takes the plain path of _hook (set at its first hook)
        self._plain_pass = False
        # The parameters updated since the last step(), whose .grad is their placeholder until then
        self._consumed = ConsumedGrads()
        weakref.finalize(self, _release_placeholders, self._consumed.params)
        # zero_grad(set_to_none=False) semantics: whether the last zero_grad() kept zeroed gradients, and the
        # id() of the parameters that torch.optim's loop would hold a .grad for (one was accumulated since the
        # last zero_grad(set_to_none=True)): see _zero_grad_params
        self._zeroed_grads = False
        self._had_grad: set[int] = set()
        # optimizer_class validates and defaults the hyper-parameters; its groups become ours,
        # and it applies its own load_state_dict fix-ups to them (__setstate__).
        self._template = optimizer_class(params, **optimizer_kwargs)
        super().__init__(self._template.param_groups, self._template.defaults)
        # head_weight: the head updated inside the linear cross-entropy's backward (HeadUpdateMixin)
        self._init_head(head_weight)

    @classmethod
    def from_recipe(
        cls,
        params: Iterable[Union[Tensor, dict[str, Any]]],
        recipe: MemoryRecipe,
        optimizer_class: type[torch.optim.Optimizer] = torch.optim.AdamW,
        *,
        head_weight: Optional[Tensor] = None,
        accumulation_steps: int = 1,
        max_grad_norm: Optional[float] = None,
        **optimizer_kwargs: Any,
    ) -> "InBackwardOptimizer":
        """The optimizer that ``recipe`` (a :class:`~ojas_ref.MemoryRecipe` with ``in_backward=True``)
        sets: its :meth:`~ojas_ref.MemoryRecipe.optimizer_options` (``bucket_cap_mb``, ``overlap``,
        ``state_device``, ``state_slice_mb``) and the other arguments as for the constructor.
        ``head_weight`` (the head's ``[V, D]`` weight) is given exactly when ``recipe.head_update``."""
        options = recipe_options(recipe, head_weight, optimizer_kwargs)
        return cls(
            params,
            optimizer_class,
            accumulation_steps=accumulation_steps,
            max_grad_norm=max_grad_norm,
            head_weight=head_weight,
            **options,
            **optimizer_kwargs,
        )

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
                "parameters, gradients and optimizer state)"
            )
        if with_grad:
            raise ValueError(
                f"params: parameter(s) {with_grad} of group {index} already have a .grad; updates in backward "
                "would add it to the next gradient. Call zero_grad(set_to_none=True) on them first"
            )
        if hooked:
            raise ValueError(
                f"params: parameter(s) {hooked} of group {index} are already updated in backward by another "
                "InBackwardOptimizer (they would be updated twice); call its remove_hooks() first"
            )
        hooked = [p for p in group["params"] if p.requires_grad]
        bucket_opt = None
        if hooked:
            bucket_opt = self.optimizer_class(hooked, **self._group_checks.hyper(group))
            bucket_opt.state = self.state
        self._group_opts.append(bucket_opt)
        self._pending.append([])
        self._pending_bytes.append(0)
        for p in hooked:
            self._group_of[p] = index
            nbytes = p.numel() * p.element_size()  # a gradient has its parameter's shape and dtype
            self._hook_handles.append(p.register_post_accumulate_grad_hook(_weak_hook(self, index, nbytes)))
            _OWNERS[p] = weakref.ref(self)
            self._data_parallel.sharded |= isinstance(p, DTensor)
        if any(not isinstance(p, DTensor) for p in hooked) and several_processes():
            _watch_for_ddp(self)

    def step(self, closure: Optional[Callable[[], float]] = None) -> None:
        """Nothing to update (the parameters were updated during backward): marks the end of
        the step, so that the next backward pass may update again.

        After ``zero_grad(set_to_none=False)`` it steps the parameters that ``torch.optim``'s loop
        would step on a zero ``.grad`` (see :meth:`_zero_grad_params`).  The ``.grad`` of every
        parameter updated since the last ``step()`` goes from its placeholder
        (:class:`~ojas_ref.optim._consumed_grad._ConsumedGrad`) back to None."""
        self._group_checks.check_unhooked(self.param_groups, self._group_of)
        if closure is not None:
            raise RuntimeError(
                "InBackwardOptimizer.step(closure) is not supported: a closure re-evaluates the loss and "
                "steps on the whole gradient, but here every parameter is updated inside backward"
            )
        if hasattr(self, "found_inf") or hasattr(self, "grad_scale"):
            raise RuntimeError(_GRAD_SCALER)
        self._group_checks.check_hyper(self.param_groups)
        self._overlap.join()
        zeros = [
            p
            for p in self._zero_grad_params()  # plain SGD's step on a zero gradient is x + (-lr) * 0.0 == x
            if self._plain_sgd_lr(self._group_of[p]) is None
        ]
        if zeros:
            for p in zeros:
                p.grad = torch.zeros_like(p)
                self._add_to_bucket(p)
            self._flush_all()
            self._overlap.join()
        self._consumed.release()
        self._had_grad.update(self._updated)
        self._updated.clear()
        self._group_checks.hyper_used.clear()
        self._head_done = False

    def register_step_pre_hook(self, hook: Callable[..., Any]) -> Any:
        """Refused: ``torch.optim`` runs a step pre-hook before the update (to edit gradients or
        hyper-parameters for it); here the update ran in backward, before ``step()``."""
        raise NotImplementedError(
            "InBackwardOptimizer.register_step_pre_hook is not supported: torch.optim runs a step pre-hook "
            "before the update, but InBackwardOptimizer updates each parameter in backward, before step(), so "
            "the hook would act after the update. Change hyper-parameters before the backward pass; "
            "register_step_post_hook (after step(), and so after the update, as in torch.optim) works"
        )

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
            self._consumed.release()
            self._had_grad.clear()
        super().zero_grad(set_to_none)  # set_to_none=False after updates: the placeholders raise
        self._zeroed_grads = not set_to_none
        self._overlap.join()
        for index in range(len(self._pending)):
            self._pending[index], self._pending_bytes[index] = [], 0
        self._waiting.clear()
        self._host_state.staged.clear()  # the host state is unchanged (no step ran); drop its device copies
        self._data_parallel.reset()

    def remove_hooks(self) -> None:
        """Detach from the parameters: their hooks are removed, backward no longer updates them."""
        for handle in self._hook_handles:
            handle.remove()
        self._hook_handles.clear()
        self._consumed.release()
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
        raise TypeError(
            "InBackwardOptimizer cannot be pickled or copied (it holds hooks on the parameters); "
            "save and load state_dict() instead"
        )

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
        ``loss.backward()``.  ``Ojas.InBackward.Repairs.two_pass_clip_backprop_eq_standard``:
        this is backward, ``clip_grad_norm_``, step.
        """
        if self.max_grad_norm is None or self.accumulation_steps > 1 or self._data_parallel.active():
            loss.backward()
            return
        if self._mode is not _Mode.UPDATE:
            raise RuntimeError("InBackwardOptimizer.backward cannot be nested in another backward pass")
        self._norms = {}
        try:
            self._mode = _Mode.NORM
            loss.backward(retain_graph=True)
            self._total_norm = total_norm(self._params(), self._norms, {id(p) for p in self._zero_grad_params()})
            self._mode = _Mode.CLIP
            loss.backward()
        finally:
            self._mode = _Mode.UPDATE
            self._norms = {}
            self._total_norm = None

    def _params(self) -> list[Tensor]:
        """The hooked parameters in ``param_groups`` order."""
        return [p for g in self.param_groups for p in g["params"] if p in self._group_of]

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

    @staticmethod
    def _refuse_waiting() -> None:
        raise RuntimeError(
            "a parameter is already waiting for its update: an earlier backward pass did not finish (it "
            "raised?), and its gradient would be stepped twice. Call optimizer.zero_grad() after a failed "
            "backward pass; it drops the gradients and the pending updates"
        )

    def _note_hyper(self, index: int) -> None:
        """At an update of group ``index``: keep its hyper-parameters at its first update of the step
        (checked at :meth:`step`: :meth:`GroupChecks.check_hyper
        <ojas_ref.optim._group_checks.GroupChecks.check_hyper>`)."""
        self._group_checks.note_hyper(self.param_groups, index)

    def _zero_grad_params(self) -> list[Tensor]:
        """The hooked parameters (in ``param_groups`` order) that ``torch.optim``'s loop would step
        on a zero ``.grad`` now: after ``zero_grad(set_to_none=False)`` (its last call), each
        parameter given a gradient since the last ``zero_grad(set_to_none=True)`` keeps a zeroed
        ``.grad``, and ``step()`` steps it whether or not this step's backward gave it a gradient
        (weight decay, momentum). Those here got none in this step: not updated since the last
        :meth:`step`, no gradient now."""
        if not (self._zeroed_grads and self._had_grad):
            return []
        return [p for p in self._params() if id(p) in self._had_grad and id(p) not in self._updated and p.grad is None]

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
        else:
            self._overlap.run(side, bucket, lambda: self._update(index, bucket))
        self._consumed.consume(bucket)

    def _side_stream(self, index: int, bucket: list[Tensor]) -> Any:
        """The side stream for this bucket's update (:attr:`overlap`), or None: the plain pass of
        one process (no clipping, accumulation, DDP, FSDP2), state with the parameters, every
        parameter of the bucket on one CUDA device, and an update that is not plain SGD (one
        ``_foreach_add_``: less device time than the stream and event calls cost the host)."""
        if not (self.overlap and self._plain_pass and self._mode is _Mode.UPDATE and self.state_device is None):
            return None
        if self._plain_sgd_lr(index) is not None:
            return None
        device = bucket[0].device
        if device.type != "cuda" or any(p.device != device or isinstance(p, DTensor) for p in bucket):
            return None
        return self._overlap.stream(device)

    def _update(self, index: int, bucket: list[Tensor]) -> None:
        """The update of the bucket (its gradients are freed by :meth:`_flush`): plain SGD directly
        (:meth:`_plain_sgd_lr`), Adam / AdamW through torch's functional step directly
        (:func:`~ojas_ref.optim._fast_paths.step_adam_directly`), else one ``step()`` of the group's
        ``optimizer_class`` (with ``state_device="cpu"``, on the state staged by :class:`HostState
        <ojas_ref.optim._host_state.HostState>`, a parameter over ``state_slice_mb`` slice by slice)."""
        bucket_opt = self._group_opts[index]
        lr = self._plain_sgd_lr(index) if self.state_device is None else None
        if lr is not None and not any(p.grad.is_sparse for p in bucket):
            with torch.no_grad():
                torch._foreach_add_(bucket, [p.grad for p in bucket], alpha=-lr)
            return
        if self.state_device is None and step_adam_directly(bucket_opt, self.param_groups[index], bucket):
            return  # (with the group's hyper-parameters, which a step() of bucket_opt takes from its copy below)
        group = bucket_opt.param_groups[0]
        group.update((k, v) for k, v in self.param_groups[index].items() if k not in ("params", "param_names"))
        host = self._host_state
        sliced: list[tuple[Tensor, int]] = []
        if self.state_device is not None and host.slice_bytes is not None:
            lengths = [self._slice_length(p, index) for p in bucket]
            sliced = [(p, n) for p, n in zip(bucket, lengths) if n is not None]
            bucket = [p for p, n in zip(bucket, lengths) if n is None]
        if bucket:
            group["params"] = bucket
            hosts = host.swap_in(bucket, self.state, index) if self.state_device is not None else None
            try:
                bucket_opt.step()
            finally:
                group["params"] = []
                if hosts is not None:
                    host.swap_out(bucket, hosts, self.state, self.param_groups[index])
        for p, length in sliced:
            host.step_sliced(bucket_opt, p, self.state[p], self.param_groups[index], length)

    def _plain_sgd_lr(self, index: int) -> Optional[float]:
        """The learning rate when group ``index``'s update is plain SGD, else None
        (:func:`~ojas_ref.optim._fast_paths.plain_sgd_lr`): :meth:`_update` then calls
        ``torch._foreach_add_`` directly."""
        return plain_sgd_lr(self._group_opts[index], self.param_groups[index])

    # ------------------------------------------------------------------
    # Optimizer state on the host (state_device="cpu"): HostState's copies
    # ------------------------------------------------------------------

    def _group_for(self, p: Tensor) -> dict[str, Any]:
        """The group of hooked parameter ``p`` in :attr:`param_groups`; ``{}`` for another."""
        return self.param_groups[self._group_of[p]] if p in self._group_of else {}

    def _stage(self, p: Tensor, index: int) -> None:
        """Start copying the host state of ``p`` (just added to the bucket of group ``index``) to its
        device (:meth:`HostState.stage <ojas_ref.optim._host_state.HostState.stage>`)."""
        self._host_state.stage(p, self.state.get(p), self.param_groups[index], self._group_opts[index], index)

    def _slice_length(self, p: Tensor, index: int) -> Optional[int]:
        """How many elements of ``p`` (group ``index``) each slice of its update holds, or None when
        it is updated whole (:meth:`HostState.slice_length
        <ojas_ref.optim._host_state.HostState.slice_length>`)."""
        return self._host_state.slice_length(p, self.state.get(p), self.param_groups[index], self._group_opts[index])

    def state_dict(self) -> dict[str, Any]:
        """``torch.optim.Optimizer.state_dict``; with ``state_device="cpu"`` its tensors are the
        host ones (after waiting for the copies back)."""
        if self.state_device is not None:
            self._host_state.wait()
        return super().state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """``torch.optim.Optimizer.load_state_dict``; with ``state_device="cpu"`` the state is
        then moved to (pinned) host memory."""
        if self.state_device is not None:
            self._host_state.wait()
            self._host_state.staged.clear()
        super().load_state_dict(state_dict)
        if self.state_device is not None:
            for p, state in self.state.items():
                self._host_state.to_host(state, self._group_for(p))
