"""One vocabulary for the memory settings: :class:`MemoryRecipe`, a frozen dataclass that
:func:`ojas_ref.optimize_model`, :class:`ojas_ref.InBackwardOptimizer`, the planner
(:mod:`ojas_ref.memory`), ``ojas plan``, ``ojas train`` and the benchmarks all read, and the
command-line flags derived from it in one place (:func:`add_recipe_arguments`,
:func:`recipe_from_arguments`). Each field has the name of the keyword it sets:
``optimize_model``'s (``attention`` ... ``checkpoint_split``) or ``InBackwardOptimizer``'s
(``bucket_cap_mb`` ... ``state_slice_mb``); ``in_backward`` chooses the optimizer in backward
and ``head_update`` its update of the head inside the loss.

Also :func:`as_dtype`, the one spelling of a dtype: a ``torch.dtype`` or its torch name
(``"bfloat16"``, ``"float32"``, ``"float16"``)."""

from __future__ import annotations

import argparse
import dataclasses
import math
import warnings
from typing import Any, Literal, Optional, Union

import torch

__all__ = ["MemoryRecipe", "add_recipe_arguments", "as_dtype", "recipe_from_arguments"]

#: the dtypes the library trains in, by their torch names
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}
#: release 0.1's short names (deprecated)
_SHORT_DTYPES = {"bf16": "bfloat16", "fp32": "float32", "fp16": "float16"}

#: the fields that choose a primitive of ``optimize_model`` (each a bool, on by default)
_PRIMITIVES = ("attention", "linear_cross_entropy", "rms_norm", "swiglu", "rope", "relu_mask")


def as_dtype(value: Union[str, torch.dtype], argument: str = "dtype") -> torch.dtype:
    """``value`` as a ``torch.dtype``: a ``torch.dtype`` of :data:`DTYPES`, or its torch name
    (``"bfloat16"``, ``"float32"``, ``"float16"``, with or without ``"torch."``). Release 0.1's
    ``"bf16"`` / ``"fp32"`` / ``"fp16"`` warn (``DeprecationWarning``). ``argument`` names the
    argument in the error."""
    if isinstance(value, torch.dtype):
        if value not in DTYPES.values():
            raise ValueError(f"{argument} must be one of {tuple(DTYPES)}, got {value}")
        return value
    if not isinstance(value, str):
        raise TypeError(f"{argument} must be a torch.dtype or its name {tuple(DTYPES)}, got {type(value).__name__}")
    name = value.removeprefix("torch.")
    if name in _SHORT_DTYPES:
        warnings.warn(
            f"{argument}={value!r} is deprecated: write {_SHORT_DTYPES[name]!r} (torch's name)",
            DeprecationWarning,
            stacklevel=3,
        )
        name = _SHORT_DTYPES[name]
    if name not in DTYPES:
        raise ValueError(f"{argument} must be a torch.dtype or one of {tuple(DTYPES)}, got {value!r}")
    return DTYPES[name]


def dtype_name(dtype: torch.dtype) -> str:
    """The torch name of a dtype of :data:`DTYPES` (``torch.bfloat16`` -> ``"bfloat16"``)."""
    return str(as_dtype(dtype)).removeprefix("torch.")


def _check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")


def _check_mb(name: str, value: Any, *, positive: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a float, got {type(value).__name__}")
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ValueError(f"{name} must be a finite float {'> 0' if positive else '>= 0'} (MiB), got {value}")


@dataclasses.dataclass(frozen=True)
class MemoryRecipe:
    """What the library does to a model and its optimizer to save memory. The defaults are
    ``optimize_model``'s (every primitive, no checkpointing) with the standard optimizer step;
    :meth:`plain` is standard PyTorch (nothing on).

    Model (``optimize_model``'s keywords): ``attention``, ``linear_cross_entropy``,
    ``rms_norm``, ``swiglu``, ``rope``, ``relu_mask``, ``sparse_embedding``; ``checkpoint``
    (``True``: per-layer activation checkpointing; ``"offload"``: the same with each layer's
    input in pinned host memory; ``False``: none); ``checkpoint_split`` (needs ``checkpoint``:
    each layer as two checkpointed segments).

    Optimizer: ``in_backward`` (:class:`~ojas_ref.InBackwardOptimizer`: each parameter updated
    in its hook, no persistent gradients), and its keywords (each needs ``in_backward``):
    ``bucket_cap_mb``, ``overlap``, ``state_device`` (``"cpu"``: the optimizer state in host
    memory), ``state_slice_mb`` (needs ``state_device``); ``head_update`` (needs
    ``in_backward`` and ``linear_cross_entropy``: the head updated inside the loss's backward,
    plain SGD only)."""

    attention: bool = True
    linear_cross_entropy: bool = True
    rms_norm: bool = True
    swiglu: bool = True
    rope: bool = True
    relu_mask: bool = True
    sparse_embedding: bool = False
    checkpoint: Union[bool, Literal["offload"]] = False
    checkpoint_split: bool = False
    in_backward: bool = False
    bucket_cap_mb: float = 64.0
    overlap: bool = False
    state_device: Optional[str] = None
    state_slice_mb: Optional[float] = None
    head_update: bool = False

    def __post_init__(self) -> None:
        for name in (*_PRIMITIVES, "sparse_embedding", "checkpoint_split", "in_backward", "overlap", "head_update"):
            _check_bool(name, getattr(self, name))
        if not isinstance(self.checkpoint, (bool, str)):
            raise TypeError(f"checkpoint must be a bool or 'offload', got {type(self.checkpoint).__name__}")
        if isinstance(self.checkpoint, str) and self.checkpoint != "offload":
            raise ValueError(f"checkpoint must be True, False or 'offload', got {self.checkpoint!r}")
        if self.checkpoint_split and not self.checkpoint:
            raise ValueError("checkpoint_split=True needs checkpoint=True or 'offload': it splits each checkpoint")
        _check_mb("bucket_cap_mb", self.bucket_cap_mb, positive=False)
        if self.state_device not in (None, "cpu"):
            raise ValueError(
                f"state_device must be None or 'cpu' (the optimizer state in host memory), got {self.state_device!r}"
            )
        if self.state_slice_mb is not None:
            _check_mb("state_slice_mb", self.state_slice_mb, positive=True)
            if self.state_device is None:
                raise ValueError("state_slice_mb needs state_device='cpu': it slices the state streamed from the host")
        if not self.in_backward:
            for name in ("overlap", "head_update"):
                if getattr(self, name):
                    raise ValueError(f"{name}=True needs in_backward=True (an option of InBackwardOptimizer)")
            if self.state_device is not None:
                raise ValueError("state_device='cpu' needs in_backward=True (an option of InBackwardOptimizer)")
        if self.head_update and not self.linear_cross_entropy:
            raise ValueError("head_update=True needs linear_cross_entropy=True: the head is updated inside that loss")

    @classmethod
    def plain(cls, **changes: Any) -> "MemoryRecipe":
        """Standard PyTorch: no primitive, no checkpointing, the standard optimizer step (then
        ``changes``)."""
        return cls(**{**{name: False for name in _PRIMITIVES}, **changes})

    def model_options(self) -> dict[str, Any]:
        """The keywords of :func:`ojas_ref.optimize_model` this recipe sets."""
        names = (*_PRIMITIVES, "sparse_embedding", "checkpoint", "checkpoint_split")
        return {name: getattr(self, name) for name in names}

    def optimizer_options(self) -> dict[str, Any]:
        """The keywords of :class:`ojas_ref.InBackwardOptimizer` this recipe sets (without
        ``head_weight``, which is the model's tensor)."""
        names = ("bucket_cap_mb", "overlap", "state_device", "state_slice_mb")
        return {name: getattr(self, name) for name in names}


#: the help of each flag, by field
_HELP = {
    "attention": "ojas attention (the Triton kernel on CUDA)",
    "linear_cross_entropy": "the loss by ojas linear cross-entropy (no [N, V] logits)",
    "rms_norm": "the fused RMSNorm",
    "swiglu": "the fused SwiGLU",
    "rope": "the fused rotary embedding",
    "relu_mask": "1-bit ReLU masks",
    "sparse_embedding": "sparse embedding gradients (rows of the batch only)",
    "checkpoint": "per-layer activation checkpointing: on, off, or 'offload' (inputs in host memory)",
    "checkpoint_split": "each checkpointed layer as two segments (attention half, MLP half)",
    "in_backward": "the optimizer in backward (InBackwardOptimizer)",
    "bucket_cap_mb": "MiB of gradients per in-backward update",
    "overlap": "updates on a side CUDA stream, overlapping the backward",
    "state_device": "'cpu': the optimizer state in host memory, streamed bucket by bucket",
    "state_slice_mb": "with --state-device cpu: MiB of one parameter's state on the device at a time",
    "head_update": "the head updated inside the loss's backward (plain SGD, untied head)",
}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _checkpoint_value(text: str) -> Union[bool, str]:
    lowered = text.lower()
    if lowered in ("true", "on", "1", "yes"):
        return True
    if lowered in ("false", "off", "0", "no", "none"):
        return False
    if lowered == "offload":
        return "offload"
    raise argparse.ArgumentTypeError(f"--checkpoint must be on, off or offload, got {text!r}")


def _optional(kind: type) -> Any:
    def parse(text: str) -> Any:
        return None if text.lower() == "none" else kind(text)

    parse.__name__ = kind.__name__
    return parse


def add_recipe_arguments(parser: argparse.ArgumentParser, defaults: Optional[MemoryRecipe] = None) -> None:
    """One flag per :class:`MemoryRecipe` field (``--attention/--no-attention``, ...,
    ``--checkpoint {on,off,offload}``, ``--bucket-cap-mb MB``), with ``defaults``' values (the
    dataclass's when None), in an argument group "memory recipe". Read back with
    :func:`recipe_from_arguments`."""
    defaults = MemoryRecipe() if defaults is None else defaults
    group = parser.add_argument_group("memory recipe", "what ojas does to save memory (ojas_ref.MemoryRecipe)")
    for field in dataclasses.fields(MemoryRecipe):
        name, default = field.name, getattr(defaults, field.name)
        help_text = f"{_HELP[name]} (default: {'none' if default is None else default})"
        if name == "checkpoint":
            group.add_argument(
                _flag(name),
                type=_checkpoint_value,
                nargs="?",
                const=True,
                default=default,
                metavar="{on,off,offload}",
                help=help_text + "; a bare --checkpoint means on",
            )
        elif name == "state_device":
            group.add_argument(
                _flag(name),
                type=_optional(str),
                default=default,
                choices=(None, "cpu"),
                metavar="{cpu,none}",
                help=help_text,
            )
        elif name in ("bucket_cap_mb", "state_slice_mb"):
            kind = float if name == "bucket_cap_mb" else _optional(float)
            group.add_argument(_flag(name), type=kind, default=default, metavar="MB", help=help_text)
        else:
            group.add_argument(_flag(name), action=argparse.BooleanOptionalAction, default=default, help=help_text)


def recipe_from_arguments(args: argparse.Namespace) -> MemoryRecipe:
    """The :class:`MemoryRecipe` of a namespace parsed with :func:`add_recipe_arguments`'s flags
    (its checks raise ``ValueError`` naming the field)."""
    return MemoryRecipe(**{field.name: getattr(args, field.name) for field in dataclasses.fields(MemoryRecipe)})
