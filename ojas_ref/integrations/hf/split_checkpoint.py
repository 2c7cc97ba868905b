"""Split checkpointing, the Hugging Face adapter of ``optimize_model(checkpoint_split=True)``: a
decoder layer as two checkpointed segments. :class:`SplitCheckpoint` is the
``gradient_checkpointing_func`` of each decoder layer of a checked layout (:data:`SPLIT_LAYERS`);
the layer's own forward runs, with its two norms passing their input through and its
``self_attn`` and ``mlp`` each computing ``module(norm(x))`` inside a checkpoint of its own
(``__class__`` swaps of the four modules, :func:`split_swap`)."""

from __future__ import annotations

import functools
import threading
from contextlib import contextmanager
from typing import Any, Callable, Optional

from torch import Tensor, nn

from ojas_ref.integrations.hf.family import text_config
from ojas_ref.integrations.hf.swap import swapped_class

__all__ = [
    "SPLIT_LAYERS",
    "SPLIT_SEGMENTS",
    "SplitCheckpoint",
    "split_layers",
    "split_swap",
    "split_unsupported_reason",
]

#: (module, class name) of the decoder layers whose forward is, in this order, ``h = x +
#: self_attn(hidden_states=input_layernorm(x), ...)[0]`` and ``h + mlp(post_attention_layernorm(h))``
#: (read from the modeling files of transformers 5.x; Gemma's extra norms and Phi-3's residual
#: dropout are other layouts). :class:`SplitCheckpoint` checks the order at every call.
SPLIT_LAYERS: tuple[tuple[str, str], ...] = tuple(
    (f"transformers.models.{m}.modeling_{m}", f"{c}DecoderLayer")
    for m, c in (("llama", "Llama"), ("mistral", "Mistral"), ("qwen2", "Qwen2"), ("qwen3", "Qwen3"))
)
#: (the norm, the module it feeds) of the two segments of a split layer
SPLIT_SEGMENTS = (("input_layernorm", "self_attn"), ("post_attention_layernorm", "mlp"))

# .run: the _SplitRun of the layer whose forward runs split on this thread (outside its
# segments), or None
_SPLIT = threading.local()


class _SplitRun:
    """One split forward of a layer: the segments' checkpoint function, and the norm whose
    input was passed through, waiting for its module (``marked``)."""

    __slots__ = ("layer", "checkpoint", "marked")

    def __init__(self, layer: nn.Module, checkpoint: Callable[..., Any]) -> None:
        self.layer = layer
        self.checkpoint = checkpoint
        self.marked: Optional[tuple[nn.Module, Tensor]] = None


@contextmanager
def _running(run: Optional[_SplitRun]):
    previous = getattr(_SPLIT, "run", None)
    _SPLIT.run = run
    try:
        yield
    finally:
        _SPLIT.run = previous


def _segment_norm(run: Optional[_SplitRun], module: nn.Module) -> Optional[nn.Module]:
    """The norm of ``module``'s segment when ``module`` is a segment module of the layer running split."""
    if run is not None:
        for norm_name, module_name in SPLIT_SEGMENTS:
            if run.layer._modules.get(module_name) is module:
                return run.layer._modules[norm_name]
    return None


def _is_segment_norm(run: Optional[_SplitRun], module: nn.Module) -> bool:
    return run is not None and any(run.layer._modules.get(n) is module for n, _ in SPLIT_SEGMENTS)


class SplitCheckpoint:
    """The ``gradient_checkpointing_func`` of one split decoder layer (:data:`SPLIT_LAYERS`).

    Hugging Face calls it as it calls ``torch.utils.checkpoint.checkpoint`` (``func(forward,
    *args)``) when the layer checkpoints (training, gradients on); it runs the layer's forward
    as is, not checkpointed as a whole: the two norms pass their input through, and
    ``self_attn`` and ``mlp`` each run ``segment_checkpoint(segment, x, ...)``, the segment
    being the norm and the module called as modules (their hooks run in the forward and the
    recomputation alike). So the layer keeps two inputs, x and h, and in the backward the MLP
    half is recomputed (and its saved tensors freed) before the attention half is: the
    attention half's activations are never alive during the MLP's backward.
    ``segment_checkpoint``: non-reentrant ``torch.utils.checkpoint.checkpoint``, or an
    :class:`ojas_ref.nn.offload.OffloadedCheckpoint` shared by all layers (the two
    inputs in pinned host memory, prefetched one segment ahead). Exact: each segment is
    recomputed from its input by the same operations (deterministic layers: no dropout); no
    theorem needed or claimed. ``RuntimeError`` when the layer's forward does not call each norm
    right before its module with the norm's output (a transformers version that changed the
    layout)."""

    def __init__(self, layer: nn.Module, segment_checkpoint: Callable[..., Any]) -> None:
        self.layer = layer
        self.segment_checkpoint = segment_checkpoint

    def __call__(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        run = _SplitRun(self.layer, self.segment_checkpoint)
        with _running(run):
            out = function(*args, **kwargs)
        if run.marked is not None:
            raise RuntimeError(
                f"split checkpointing: {type(self.layer).__name__}'s forward did not pass the output of "
                "a norm to its module (self_attn / mlp): not the checked layout"
            )
        return out

    def __repr__(self) -> str:
        return f"SplitCheckpoint({type(self.layer).__name__}, {self.segment_checkpoint!r})"


def _run_segment(norm: nn.Module, module: nn.Module, x: Tensor, *args: Any, **kwargs: Any) -> Any:
    """One segment, as checkpointed and as recomputed: ``module(norm(x), ...)``, neither passing through."""
    with _running(None):
        return module(norm(x), *args, **kwargs)


class _SplitNorm:
    """Mixin of a split layer's norms: while the layer runs split (outside its segments) the
    input passes through, marked for the segment module, which normalises it inside its checkpoint."""

    def forward(self, hidden_states: Tensor) -> Tensor:
        run = getattr(_SPLIT, "run", None)
        if not _is_segment_norm(run, self):
            return super().forward(hidden_states)
        if run.marked is not None:
            raise RuntimeError(
                f"split checkpointing: {type(run.layer).__name__} called two norms before their "
                "modules: not the checked layout"
            )
        run.marked = (self, hidden_states)
        return hidden_states


class _SplitSegment:
    """Mixin of a split layer's ``self_attn`` and ``mlp``: while the layer runs split, the
    segment ``module(norm(x))`` under the run's checkpoint function, ``x`` (the hidden states,
    first positional or ``hidden_states=``) its saved input; the module's own forward otherwise."""

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        run = getattr(_SPLIT, "run", None)
        norm = _segment_norm(run, self)
        if norm is None:
            return super().forward(*args, **kwargs)
        x, args = (args[0], args[1:]) if args else (kwargs.pop("hidden_states"), ())
        if run.marked is None or run.marked[0] is not norm or run.marked[1] is not x:
            raise RuntimeError(
                f"split checkpointing: {type(self).__name__} did not receive its norm's output: "
                f"{type(run.layer).__name__} is not the checked layout"
            )
        run.marked = None
        return run.checkpoint(functools.partial(_run_segment, norm, self), x, *args, **kwargs)


def split_layers(model: nn.Module) -> list[nn.Module]:
    """The decoder layers of ``model`` (Hugging Face's ``GradientCheckpointingLayer`` modules)."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    return [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]


def split_unsupported_reason(model: nn.Module) -> Optional[str]:
    """Why ``model``'s decoder layers cannot be split (none found, or a class outside
    :data:`SPLIT_LAYERS`), or None."""
    layers = split_layers(model)
    family = getattr(text_config(model), "model_type", None)
    if not layers:
        return f"{type(model).__name__} (model type {family!r}) has no decoder layers (GradientCheckpointingLayer)"
    other = sorted(
        {
            f"{type(m).__module__}.{type(m).__name__}"
            for m in layers
            if (type(m).__module__, type(m).__name__) not in SPLIT_LAYERS
        }
    )
    if other:
        return (
            f"model type {family!r}: its decoder layers ({', '.join(other)}) are not among the checked "
            "norm / self-attention / norm / MLP layouts (Llama, Mistral, Qwen2, Qwen3)"
        )
    return None


def split_swap(module: nn.Module, segment: bool) -> type:
    """Swap ``module``'s class for its split subclass (a segment module's, or a norm's); returns the class before."""
    cls = type(module)
    mixin = _SplitSegment if segment else _SplitNorm
    module.__class__ = swapped_class(cls, mixin, {}, prefix="OjasSplit")
    return cls
