"""Optimizer state on the host (``InBackwardOptimizer(state_device="cpu")``): :class:`HostState`.

The state tensors that torch keeps with the parameter (AdamW's ``exp_avg`` / ``exp_avg_sq``, SGD's
``momentum_buffer``; not the ``step`` counters torch keeps on the CPU, except with ``fused`` /
``capturable``, where it keeps them with the parameter and so are they streamed) live in host memory
(pinned when CUDA is available) between updates. A parameter's state is copied to its device when the
parameter joins its bucket (host to device, ``non_blocking``, on a side stream per device, so that the
copy of a bucket overlaps the backward computation and the steps before it; the step's stream waits on
an event of the copies, and the device copies are ``record_stream``-ed on the step's stream so that the
caching allocator cannot reuse them early), the bucket is stepped exactly as without it, then its state
is copied back into the same host tensors (``non_blocking``, on a second side stream, after the step's
stream has reached the step, so that both directions of PCIe run at once; an event per bucket that the
next copy of those host tensors to the device waits on) and the device copies are dropped. Between
updates no state is on the device; during the backward pass about one bucket's state per group is. The
update is bitwise the one with ``state_device=None``: the same ops on the same values, on the same
device with the same dtypes and strides, and a copy is exact (the bucketed update rests on
``Ojas.InBackward.Buckets.backprop_cap_bucketed_eq_standard``; the copies are exact, no
theorem needed). With ``state_slice_mb`` (off by default) a parameter whose state exceeds it is
updated slice by slice, one slice's state on the device at a time (:meth:`HostState.step_sliced`: SGD
with momentum, Adam, AdamW only; bitwise the whole step because their arithmetic is elementwise, tested
on the CPU and on an H200, no theorem; the 1.06B Llama's losses on the H200 bitwise those of the state
on the device, 2026-12-01: ``git show f14c11e:benchmarks/RESULTS.md``). Tested:
``tests/optim/test_in_backward_host_state.py``.

``state_slice_mb``: a parameter whose state is larger (its bytes times the state tensors per
element: AdamW 2, with amsgrad 3, SGD momentum 1; before its first update, the same count of the
tensors the step will create) is not staged with its bucket: it is updated in contiguous slices of
its flattened storage whose state is half ``state_slice_mb``, each a view of the parameter, its
gradient and its host state, whose state is copied to one of two device buffers, stepped by
``optimizer_class`` and copied back (:meth:`HostState.step_sliced`; the next slice is copied in
while one is stepped), so two slices' state and the temporaries of one slice's step are on the
device instead of the whole parameter's (for the 1.06B Llama's 250 MiB fp32 head, AdamW: 128 MiB of
state and 32 MiB of temporaries instead of 500 and 250 MiB). A slice holds a multiple of 64 elements
(the last excepted). Sliced: only the classes ``torch.optim.SGD`` (with momentum), ``Adam`` and
``AdamW`` themselves (foreach, fused, single-tensor, capturable, amsgrad, maximize, weight decay),
not ``differentiable``, a contiguous parameter and gradient; any other class (subclasses included)
or parameter is updated whole, at its bucket's step. Bitwise the unsliced step (their arithmetic is
elementwise with per-parameter scalars, each slice starting from the parameter's ``step``; no
theorem covers the split, the tests check it). Each slice is one ``step()`` call (optimizer step
hooks run per slice and see the slice's view), and the copies of a parameter's slices wait for the
buffers (two): host time and PCIe latency for memory. The default keeps the 1.06B model's MLP
weights (92 MB of fp32 AdamW state) whole, staged while the backward runs. The first update of a
parameter creates its state slice by slice on the device; it goes to new host tensors.

:class:`HostState` owns the copies (staged device copies, events, side streams) and the slicing; the
optimizer passes it each parameter's state dict, group and bucket optimizer.
"""

from __future__ import annotations

import collections
from typing import Any, Optional

import torch
from torch import Tensor

from ojas_ref.optim._distributed import DTensor

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


def _is_cuda(t: Tensor) -> bool:
    """Whether ``t`` is on a CUDA device, for the host-state copies (:meth:`HostState.stage`,
    ``swap_in``, ``swap_out``, ``step_sliced``, ``copy``): ``t.device.type == "cuda"``.
    tests/optim/test_in_backward_host_state.py replaces it to run their CUDA stream code on the
    CPU against a model of CUDA's stream semantics (which stream each copy and step runs on, what it
    waits for, where its memory was allocated)."""
    return t.device.type == "cuda"


def check_state_device(state_device: Any) -> Optional[torch.device]:
    """``None``, or ``torch.device("cpu")`` for ``"cpu"`` / ``torch.device("cpu")``; else raise."""
    if state_device is None:
        return None
    if not isinstance(state_device, (str, torch.device)):
        raise TypeError(
            f"state_device must be None, 'cpu' or torch.device('cpu'), got "
            f"{type(state_device).__name__} {state_device!r}"
        )
    try:
        device = torch.device(state_device)
    except RuntimeError:
        device = None
    if device is None or device.type != "cpu":
        raise ValueError(
            f"state_device must be None (the state lives with its parameter) or 'cpu' (the state "
            f"lives in host memory and is streamed to the device for each update), got {state_device!r}"
        )
    return torch.device("cpu")


class HostState:
    """The host copies of an :class:`~ojas_ref.optim.in_backward.InBackwardOptimizer`'s state and their
    traffic (see the module docstring).

    Args:
        pin: whether new host tensors are pinned (``state_device="cpu"`` with CUDA available).
        slice_bytes: the most state bytes of one parameter on the device at a time (``state_slice_mb``
            in bytes), or None: whole parameters.
    """

    def __init__(self, pin: bool, slice_bytes: Optional[int]) -> None:
        self.pin = pin
        self.slice_bytes = slice_bytes
        # per parameter id, the device copies of its state staged for its bucket's step; per group,
        # the event of the latest staging copy; per parameter id, the event after the latest copy
        # back into its host tensors; the side streams of the copies, per (device, direction)
        self.staged: dict[int, dict[Any, Tensor]] = {}
        self.stage_events: dict[int, Any] = {}
        self.out_events: dict[int, Any] = {}
        self.copy_streams: dict[tuple[torch.device, str], Any] = {}

    @staticmethod
    def streamed(key: Any, value: Any, group: dict[str, Any]) -> bool:
        """Whether state ``key`` (``value``) of a parameter of ``group`` (``{}`` for a parameter
        without a group) is streamed: a tensor torch keeps with the parameter (the policy of
        ``Optimizer.load_state_dict``: everything but ``step``, and ``step`` too with ``fused`` or
        ``capturable``)."""
        if not isinstance(value, Tensor):
            return False
        if key != "step":
            return True
        return bool(group.get("fused")) or bool(group.get("capturable"))

    def copy_stream(self, device: torch.device, direction: str = "in") -> Any:
        """The side stream of the state's copies to the device (``"in"``) or back to the host
        (``"out"``): one each, so that the two directions of PCIe run at once."""
        stream = self.copy_streams.get((device, direction))
        if stream is None:
            stream = self.copy_streams[(device, direction)] = torch.cuda.Stream(device)
        return stream

    def stage(
        self,
        p: Tensor,
        state: Optional[dict[Any, Any]],
        group: dict[str, Any],
        bucket_opt: Optional[torch.optim.Optimizer],
        index: int,
    ) -> None:
        """Start copying the host state of ``p`` (just added to the bucket of group ``index``) to
        its device: on CUDA ``non_blocking`` on the side stream, after the latest copy back into
        those host tensors; the step waits on ``stage_events[index]``."""
        if not state:
            return  # no state yet: the first step creates it on the device
        if self.slice_length(p, state, group, bucket_opt) is not None:
            return  # updated in slices, each slice's state copied in by step_sliced
        hosts = {k: v for k, v in state.items() if self.streamed(k, v, group)}
        if not hosts:
            return
        if not _is_cuda(p):
            self.staged[id(p)] = {k: torch.empty_like(h, device=p.device).copy_(h) for k, h in hosts.items()}
            return
        stream = self.copy_stream(p.device)
        done = self.out_events.get(id(p))
        with torch.cuda.stream(stream):
            if done is not None:
                stream.wait_event(done)
            self.staged[id(p)] = {
                k: torch.empty_like(h, device=p.device).copy_(h, non_blocking=True) for k, h in hosts.items()
            }
            event = torch.cuda.Event()
            event.record(stream)
        self.stage_events[index] = event

    def slice_length(
        self,
        p: Tensor,
        state: Optional[dict[Any, Any]],
        group: dict[str, Any],
        bucket_opt: Optional[torch.optim.Optimizer],
    ) -> Optional[int]:
        """How many elements of ``p`` (of ``group``, stepped by ``bucket_opt``; ``state`` its state) each slice
        of its update holds, or None when ``p`` is updated whole: ``state_slice_mb`` is None, the group's
        class is not one of :data:`_SLICED_CLASSES` exactly, the step is ``differentiable``, plain SGD
        (momentum 0: no state), ``p`` or its gradient not contiguous (or sparse, or an FSDP2 shard), a state
        tensor of ``p`` neither of ``p``'s shape nor 0-d, or the state fits the slice. The state's bytes per
        element are the sum of the element sizes of its tensors of ``p``'s shape (AdamW 2 x, with amsgrad 3
        x, SGD momentum 1 x the parameter's); before the first update (no state yet) those of the tensors
        the step will create, of the parameter's dtype (the same counts: the first update creates each
        slice's state on the device, so its slices are those of the later updates; they were the parameter's
        own element size, which made the first update's slices of AdamW state twice ``state_slice_mb / 2``).
        A slice's state is half ``state_slice_mb`` (two are on the device at a time), its length rounded
        down to a multiple of :data:`_SLICE_ALIGN`."""
        limit = self.slice_bytes
        if limit is None or type(bucket_opt) not in _SLICED_CLASSES:
            return None
        grad = p.grad
        if (
            group.get("differentiable")
            or (type(bucket_opt) is torch.optim.SGD and group["momentum"] == 0)
            or grad is None
            or grad.is_sparse
            or isinstance(p, DTensor)
            or not p.is_contiguous()
            or not grad.is_contiguous()
            or grad.shape != p.shape
        ):
            return None
        per_element = 0
        for v in (state or {}).values():
            if isinstance(v, Tensor) and v.dim() > 0:
                if v.shape != p.shape or not v.is_contiguous():
                    return None
                per_element += v.element_size()
        if not per_element:  # the tensors the step creates: momentum_buffer; exp_avg, exp_avg_sq (max_exp_avg_sq)
            created = 1 if type(bucket_opt) is torch.optim.SGD else 3 if group.get("amsgrad") else 2
            per_element = created * p.element_size()
        length = max(_SLICE_ALIGN, limit // 2 // per_element // _SLICE_ALIGN * _SLICE_ALIGN)  # two slices in flight
        return length if p.numel() * per_element > limit and p.numel() > length else None

    def step_sliced(
        self,
        bucket_opt: torch.optim.Optimizer,
        p: Tensor,
        state: dict[Any, Any],
        param_group: dict[str, Any],
        length: int,
    ) -> None:
        """Update ``p`` with one ``step()`` of ``bucket_opt`` per slice of ``length`` elements of its
        flattened storage, so that at most two slices' state (``state_slice_mb`` in all) is on the
        device at a time.

        Each slice is a view of ``p``, given the view of its gradient as ``.grad`` and, in a state
        of its own, the slice of each state tensor of ``p``'s shape (copied from the host into one of
        two device buffers per state tensor, the slices alternating between them; created by the
        step at the first update) and a copy of each 0-d state value (``step``). After its step the
        slice's state goes back into its part of the host tensors; the 0-d values of the last slice
        become ``p``'s. On CUDA the buffers (and the device copies of 0-d values) are allocated on
        the inward copy stream (``copy_stream(device, "in")``), as :meth:`stage`'s copies are: a
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
        check (tests/optim/test_in_backward_host_state.py, slices of 1 element and of sizes not
        dividing the parameter's, CPU; the default slices are multiples of 2**20 bytes)."""
        n = p.numel()
        flat_p, flat_g = p.detach().view(-1), p.grad.view(-1)
        hosts = {k: v.view(-1) for k, v in state.items() if isinstance(v, Tensor) and v.dim() > 0}
        scalars = {k: v for k, v in state.items() if k not in hosts}
        cuda = _is_cuda(p)
        streams: tuple[Any, Any] = (None, None)
        freed: list[Any] = [None, None]  # per buffer, the event after the copy back that last read it
        bounds = [(a, min(n, a + length)) for a in range(0, n, length)]
        if cuda:
            streams = (self.copy_stream(p.device, "in"), self.copy_stream(p.device, "out"))
            compute = torch.cuda.current_stream(p.device)
            done = self.out_events.get(id(p))
            if done is not None:
                streams[0].wait_event(done)  # the copies back of the previous update are done
            # The device memory the inward stream writes is allocated on that stream, as stage's: a block
            # allocated on the compute stream may be one it freed a moment ago whose kernels are still
            # queued there (the host runs ahead of the device), and a copy on another stream that does
            # not wait for the compute stream would race them (its state overwritten by them, or theirs
            # by it). Blocks of the inward stream's pool are handed out again only after the streams
            # recorded on them (compute: the steps; outward: the copies back) have passed their frees.
            with torch.cuda.stream(streams[0]):
                # the 0-d values torch keeps with the parameter (fused / capturable step), once on the device
                scalars = {
                    k: (
                        self.copy(torch.empty_like(v, device=p.device), v, streams[0])
                        if self.streamed(k, v, param_group)
                        else v
                    )
                    for k, v in scalars.items()
                }
                buffers = [
                    {k: torch.empty(b - a, dtype=h.dtype, device=p.device) for k, h in hosts.items()}
                    for a, b in bounds[:2]
                ]
            for t in [
                *(v for v in scalars.values() if isinstance(v, Tensor) and _is_cuda(v)),
                *(t for d in buffers for t in d.values()),
            ]:
                t.record_stream(compute)  # read and written by the steps
        else:
            buffers = [
                {k: torch.empty(b - a, dtype=h.dtype, device=p.device) for k, h in hosts.items()} for a, b in bounds[:2]
            ]

        def copy_in(i: int) -> tuple[dict[Any, Tensor], Any]:
            """Slice ``i``'s state in its buffer (and, on CUDA, the event after its copies in)."""
            a, b = bounds[i]
            if freed[i % 2] is not None:
                streams[0].wait_event(freed[i % 2])
            copies = {k: self.copy(buffers[i % 2][k][: b - a], h[a:b], streams[0]) for k, h in hosts.items()}
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
                            created[k] = torch.empty(n, dtype=v.dtype, pin_memory=self.pin)
                        self.copy((hosts[k] if k in hosts else created[k])[a:b], v, streams[1])
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
            if isinstance(v, Tensor) and self.streamed(k, v, param_group):  # back to its host tensor
                if not (isinstance(old, Tensor) and old.shape == v.shape and old.dtype == v.dtype):
                    old = state[k] = torch.empty_like(v, device="cpu", pin_memory=self.pin)
                self.copy(old, v, streams[1])
            elif isinstance(v, Tensor) and isinstance(old, Tensor) and old.shape == v.shape and old.dtype == v.dtype:
                old.copy_(v)  # the step counter torch keeps on the CPU, in place as torch's own step
            else:
                state[k] = v
        if cuda:
            event = torch.cuda.Event()
            event.record(streams[1])
            self.out_events[id(p)] = event

    @staticmethod
    def copy(dst: Tensor, src: Tensor, stream: Any) -> Tensor:
        """``dst.copy_(src)``; between host and device ``non_blocking`` on ``stream``, the device
        tensor kept (``record_stream``) until the copy is done."""
        if stream is None or _is_cuda(dst) == _is_cuda(src):
            return dst.copy_(src)
        with torch.cuda.stream(stream):
            dst.copy_(src, non_blocking=True)
        (src if _is_cuda(src) else dst).record_stream(stream)  # kept until the copy is done
        return dst

    def swap_in(
        self, bucket: list[Tensor], states: dict[Tensor, dict[Any, Any]], index: int
    ) -> dict[int, dict[Any, Tensor]]:
        """Put the staged device copies of the bucket's state in :attr:`state` (the step's stream
        waiting for their copies); return the host tensors they stand for."""
        event = self.stage_events.pop(index, None)
        hosts: dict[int, dict[Any, Tensor]] = {}
        streams: dict[torch.device, Any] = {}
        for p in bucket:
            staged = self.staged.pop(id(p), None)
            if _is_cuda(p) and p.device not in streams:
                streams[p.device] = torch.cuda.current_stream(p.device)
                if event is not None:
                    streams[p.device].wait_event(event)
            if not staged:
                continue
            state = states[p]
            hosts[id(p)] = {k: state[k] for k in staged}
            for k, dev in staged.items():
                if _is_cuda(dev):
                    dev.record_stream(streams[p.device])  # used by the step and the copy back there
                state[k] = dev
        return hosts

    def swap_out(
        self,
        bucket: list[Tensor],
        hosts: dict[int, dict[Any, Tensor]],
        states: dict[Tensor, dict[Any, Any]],
        group: dict[str, Any],
    ) -> None:
        """Copy the bucket's state back into its host tensors (new pinned ones for state the step
        created) and put them in :attr:`state`: the device copies are dropped. On CUDA the copies
        run ``non_blocking`` on the outward copy stream (not :meth:`stage`'s: the two directions of
        PCIe at once; on the H200 the 1.06B fp32 AdamW step went from 0.869x to 0.988x of standard
        + checkpointing with it, 2026-12-01: ``git show f14c11e:benchmarks/RESULTS.md``), after the
        step's stream has reached this point, so the backward's kernels do not wait for them; each device copy is kept
        (``record_stream``) until its copy is done."""
        streams: dict[torch.device, Any] = {}
        for p in bucket:
            state = states.get(p)
            if not state:
                continue
            if _is_cuda(p) and p.device not in streams:
                streams[p.device] = self.copy_stream(p.device, "out")
                streams[p.device].wait_stream(torch.cuda.current_stream(p.device))  # the step's results are written
            old = hosts.get(id(p), {})
            for k, v in list(state.items()):
                if not self.streamed(k, v, group) or (v.device.type == "cpu" and p.device.type != "cpu"):
                    continue
                h = old.get(k)
                if v is h:
                    continue
                if (
                    h is None
                    or h.shape != v.shape
                    or h.dtype != v.dtype
                    or h.stride() != v.stride()
                    or (self.pin and not h.is_pinned())
                ):
                    h = torch.empty_like(v, device="cpu", pin_memory=self.pin)
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
                self.out_events[id(p)] = events[p.device]

    def wait(self) -> None:
        """Wait for the copies back into the host tensors (before the host reads them)."""
        for event in {id(e): e for e in self.out_events.values()}.values():
            event.synchronize()
        self.out_events.clear()

    def to_host(self, state: dict[Any, Any], group: dict[str, Any]) -> None:
        """Put every streamed tensor of one parameter's ``state`` (of ``group``) in (pinned) host
        memory: after ``load_state_dict``."""
        for k, v in list(state.items()):
            if self.streamed(k, v, group):
                h = torch.empty_like(v, device="cpu", pin_memory=self.pin)
                h.copy_(v)
                state[k] = h
