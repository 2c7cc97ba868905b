"""Offloaded activation checkpointing: each checkpointed layer's input held in pinned host memory.

``optimize_model(model, checkpoint="offload")`` installs an :class:`OffloadedCheckpoint` as
the ``gradient_checkpointing_func`` of a Hugging Face model's decoder layers (through
``PreTrainedModel._set_gradient_checkpointing``, the hook that ``gradient_checkpointing_enable``
itself uses). It is called as Hugging Face calls ``torch.utils.checkpoint.checkpoint``,
``func(layer_call, *args, **kwargs)``, and is non-reentrant checkpointing with one change:
the layer inputs that the checkpoint keeps for the recomputation live on the host between
the forward and the backward instead of on the device.

How it works
------------
``torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False)`` saves its tensor
arguments (``_CheckpointFrame.save_inputs``, a saved tensor of autograd) *before* it pushes
its own ``saved_tensors_hooks`` that turn every tensor saved inside the layer into a
recomputation placeholder. So a ``torch.autograd.graph.saved_tensors_hooks`` pair pushed
around the ``checkpoint`` call sees exactly the checkpoint's saved inputs and nothing saved
inside the layer (those go to the inner hooks): its pack hook is where the input is moved
off the device, its unpack hook (called once, when the recomputation of the layer starts in
the backward) where it comes back. This is torch's own machinery end to end (the
recomputation, its RNG and autocast state, early stop and the determinism check are torch's),
which is why it is built this way rather than as a ``torch.autograd.Function``: a Function
would have to re-implement the non-reentrant recomputation (or be reentrant, with its
known restrictions) only to change where one tensor is stored.

Which tensors are offloaded (the rule)
--------------------------------------
The *reference* is the layer's hidden states: the first positional argument that is a
floating-point tensor of two or more dimensions and not a parameter (Hugging Face's decoder
layers receive the hidden states positionally and everything else, masks, position ids and
the ``(cos, sin)`` position embeddings, as keyword arguments, which ``checkpoint`` keeps in
the closure and does not save). A saved input is offloaded only if it is a per-token
activation:

* floating point (integer position ids and boolean masks stay),
* not an ``nn.Parameter`` nor a view of one (a tied embedding / head weight is never
  copied to the host),
* the reference's number of dimensions and its leading (batch, sequence) dimensions
  ``shape[:-1]``, with a feature dimension at least the reference's.

Everything else stays on the device as ``checkpoint=True`` keeps it: a float ``[b, 1, q, k]``
mask, and ``cos``/``sin`` of ``[b, s, head_dim]`` (one device copy shared by all layers:
offloading it per layer would free nothing and copy it ``layers`` times).

Streams (CUDA)
--------------
* Forward (pack): a pinned host buffer of the input's layout is allocated, the side stream
  of this device waits for the compute stream (the input is complete), the copy is queued
  on the side stream with ``non_blocking=True``, and ``record_stream(side)`` marks the
  input's block as in use by the side stream, so that the caching allocator does not hand
  it out again (when the model drops the input, which it does when the next layer is done)
  before the copy has read it. The compute stream never waits in the forward.
* Backward (unpack): if the input was prefetched its copy is already queued; otherwise the
  copy back is queued now (the device buffer allocated on the side stream, so that the copy
  waits for none of the compute stream's queued kernels, the copy on the side stream, an
  event recorded after it). The compute stream waits for that event only, the tensor is
  ``record_stream``-ed on the compute stream (its block returns to the side stream's pool
  only once the compute stream is done with it) and returned. Then the *previous* layer's
  input (the next one the backward needs: the handles are chained in pack order) is
  prefetched the same way, so its copy overlaps this layer's recomputation and backward.
  (The buffer was once allocated on the compute stream, the side stream waiting for it: a
  prefetch then started only when the device reached the layer, where it could queue behind
  the optimizer state's copies of ``InBackwardOptimizer(state_device="cpu")`` on the same
  link: the 1.06B fp32 AdamW step with both ran at 0.77x of standard + checkpointing against
  0.96x with host state alone on the H200, which is why it changed.)
* A handle keeps its host buffer while autograd keeps the saved tensor (``retain_graph=True``
  copies it back again on a second backward). When the handle is gone its buffer goes to a
  free list of its layout and the next pack of that layout reuses it: both copies of a buffer
  run on the device's side stream, so the next copy into it runs after the last copy out of
  it, with no event needed; the buffers stay allocated (pinned) as long as the function.
  Through the caching host allocator instead, a buffer is reusable only once the events of its
  copies have passed, so a host running ahead of the device pins new memory, which is slow.
  On the H200 the 1.06B fp32 AdamW step with offload and host state varied from 426 to 510 ms
  (0.825x of standard + checkpointing; ``git show f14c11e:benchmarks/RESULTS.md``) before this reuse
  and ran at 0.942x (``git show 76334d9:benchmarks/RESULTS.md``) and 0.971x after it (with split
  checkpoints too: the bench_memory records of 2026-12-01 at commit 9f59f4c in benchmarks/records.jsonl,
  fp32 AdamW "all"): the cause is inferred from that, not traced.

On the CPU (and other non-CUDA devices) the "host copy" is a plain synchronous copy
(``clone`` on the CPU, ``.to("cpu")`` elsewhere), so the recomputation reads the same bits
and the losses and gradients are bit-identical to ``checkpoint=True``: the exactness is
that of a copy (no theorem is needed or claimed). On an H200 (1.06B Llama, batch 1 x 2048;
2026-12-01, ``git show c7612a0:benchmarks/RESULTS.md``, "Offloaded checkpointing beside Hugging
Face's") it removes the 18 layer inputs from the device (0.25 GiB in fp32) at 0.998x the tokens/s
of ``checkpoint=True`` in fp32 and 0.82-1.02x in bf16 (bench_offload.py, 5-step medians); with
InBackwardOptimizer that lowers the step's peak (bench_memory.py). Not thread-safe: one instance
serves one training loop (``optimize_model`` makes one per model).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

__all__ = ["OffloadStats", "OffloadedCheckpoint", "is_offloaded_activation", "reference_activation"]


def reference_activation(args: tuple) -> Optional[torch.Tensor]:
    """The layer's hidden states: the first positional floating tensor of 2+ dims that is not a parameter."""
    for a in args:
        if isinstance(a, torch.Tensor) and a.is_floating_point() and a.dim() >= 2 and not _is_parameter(a):
            return a
    return None


def _is_parameter(t: torch.Tensor) -> bool:
    return isinstance(t, nn.Parameter) or (t._base is not None and isinstance(t._base, nn.Parameter))


def is_offloaded_activation(t: torch.Tensor, ref_shape: torch.Size) -> bool:
    """The rule of the module docstring: a floating, non-parameter tensor with the reference's
    token dimensions (``shape[:-1]``) and at least its features (``ref_shape``: the hidden
    states' shape)."""
    return (
        t.is_floating_point()
        and not _is_parameter(t)
        and t.dim() == len(ref_shape)
        and t.shape[:-1] == ref_shape[:-1]
        and t.shape[-1] >= ref_shape[-1]
    )


@dataclass
class OffloadStats:
    """Counts since construction (or :meth:`OffloadedCheckpoint.reset_stats`)."""

    offloaded_tensors: int = 0
    offloaded_bytes: int = 0
    restored_tensors: int = 0
    prefetched_tensors: int = 0
    kept_tensors: int = 0  # saved inputs the rule left on the device


def _layout(t: torch.Tensor) -> tuple:
    return (t.device, tuple(t.shape), t.stride(), t.dtype)


class _Offloaded:
    """One offloaded input: its host copy and, once fetched, its device copy and event."""

    __slots__ = ("host", "device", "prev", "fetched", "event", "__weakref__")

    def __init__(self, host: torch.Tensor, device: torch.device, prev: Optional[weakref.ref]) -> None:
        self.host = host
        self.device = device
        self.prev = prev  # weak reference to the handle packed before this one
        self.fetched: Optional[torch.Tensor] = None
        self.event: Optional[Any] = None


class _Kept:
    """A saved input the rule leaves where it is."""

    __slots__ = ("tensor",)

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor


class OffloadedCheckpoint:
    """A ``gradient_checkpointing_func``: non-reentrant checkpointing whose saved layer inputs
    live in (pinned) host memory between forward and backward; see the module docstring.

    Args:
        pin_memory: pin the host buffers (CUDA only; needed for asynchronous copies).
        prefetch: when a layer's backward starts, start copying back the previous layer's input.
        observe: called with each tensor about to be offloaded (tests, accounting).
    """

    def __init__(
        self,
        *,
        pin_memory: bool = True,
        prefetch: bool = True,
        observe: Optional[Callable[[torch.Tensor], None]] = None,
    ) -> None:
        self.pin_memory = pin_memory
        self.prefetch = prefetch
        self.observe = observe
        self.stats = OffloadStats()
        self._streams: dict[torch.device, Any] = {}
        self._last: Optional[weakref.ref] = None
        #: CUDA inputs' host buffers whose handles are gone, by (device, shape, stride, dtype): reused
        #: by the next pack of that layout (see :meth:`_host_buffer`)
        self._free: dict[tuple, list[torch.Tensor]] = {}

    def reset_stats(self) -> None:
        self.stats = OffloadStats()

    # pickling / deepcopy (a model holding this function): streams and the chain are per process
    def __getstate__(self) -> dict:
        return dict(pin_memory=self.pin_memory, prefetch=self.prefetch, observe=self.observe)

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)

    def __repr__(self) -> str:
        return f"OffloadedCheckpoint(pin_memory={self.pin_memory}, prefetch={self.prefetch})"

    def __call__(self, function: Callable, *args: Any, use_reentrant: bool = False, **kwargs: Any) -> Any:
        if use_reentrant:
            raise ValueError("OffloadedCheckpoint is non-reentrant checkpointing; use_reentrant=True is not supported")
        ref = reference_activation(args)
        if ref is None or not torch.is_grad_enabled():
            return checkpoint(function, *args, use_reentrant=False, **kwargs)
        ref_shape = ref.shape  # the shape only: the hooks must not keep the hidden states alive
        with torch.autograd.graph.saved_tensors_hooks(lambda t: self._pack(t, ref_shape), self._unpack):
            return checkpoint(function, *args, use_reentrant=False, **kwargs)

    # ------------------------------------------------------------------ hooks

    def _stream(self, device: torch.device):
        stream = self._streams.get(device)
        if stream is None:
            stream = self._streams[device] = torch.cuda.Stream(device)
        return stream

    def _pack(self, t: torch.Tensor, ref_shape: torch.Size) -> Any:
        if not is_offloaded_activation(t, ref_shape):
            self.stats.kept_tensors += 1
            return _Kept(t)
        if self.observe is not None:
            self.observe(t)
        with torch.no_grad():
            t = t.detach()
            if t.device.type == "cuda":
                host = self._host_buffer(t)
                stream = self._stream(t.device)
                stream.wait_stream(torch.cuda.current_stream(t.device))  # the input is complete
                with torch.cuda.stream(stream):
                    host.copy_(t, non_blocking=self.pin_memory)
                t.record_stream(stream)  # its block is not reused before the copy has read it
            elif t.device.type == "cpu":
                host = t.clone()  # the "host copy" on the CPU: a plain copy
            else:
                host = t.to("cpu")
        handle = _Offloaded(host, t.device, self._last)
        if t.device.type == "cuda":
            weakref.finalize(handle, self._free.setdefault(_layout(t), []).append, host)
        self._last = weakref.ref(handle)
        self.stats.offloaded_tensors += 1
        self.stats.offloaded_bytes += t.numel() * t.element_size()
        return handle

    def _host_buffer(self, t: torch.Tensor) -> torch.Tensor:
        """A (pinned) host buffer of ``t``'s layout: one a finished handle left (its copies, in and
        back, ran on this device's side stream, which runs the new copy after them), else a new one
        (module docstring)."""
        free = self._free.get(_layout(t))
        if free:
            return free.pop()
        return torch.empty_like(t, device="cpu", pin_memory=self.pin_memory)

    def _fetch(self, h: _Offloaded) -> None:
        """Queue the copy back of ``h`` on the side stream (CUDA), unless queued already, into a
        block allocated on the side stream: the copy waits for nothing the compute stream has
        queued, so it runs as soon as the link is free rather than when the device reaches it."""
        if h.fetched is not None:
            return
        stream = self._stream(h.device)
        with torch.cuda.stream(stream):
            dev = torch.empty_like(h.host, device=h.device)
            dev.copy_(h.host, non_blocking=self.pin_memory)
        h.event = torch.cuda.Event()
        h.event.record(stream)
        h.fetched = dev

    def _unpack(self, packed: Any) -> torch.Tensor:
        if isinstance(packed, _Kept):
            return packed.tensor
        h: _Offloaded = packed
        self.stats.restored_tensors += 1
        if h.device.type == "cpu":
            return h.host
        if h.device.type != "cuda":
            return h.host.to(h.device)
        if h.fetched is None:
            self._fetch(h)
        else:
            self.stats.prefetched_tensors += 1
        current = torch.cuda.current_stream(h.device)
        current.wait_event(h.event)
        out, h.fetched, h.event = h.fetched, None, None
        out.record_stream(current)  # a block of the side stream's pool, not reused before the compute stream is done
        prev = h.prev() if (self.prefetch and h.prev is not None) else None
        if prev is not None and prev.device.type == "cuda":
            self._fetch(prev)  # the next input the backward needs, overlapping this layer's recomputation
        return out
