"""Per-layer activation checkpointing of a Hugging Face model as :func:`ojas_ref.optimize_model`
installs it (``checkpoint=True``, ``"offload"``, ``checkpoint_split=True``): Hugging Face's own
checkpointing enabled non-reentrant, or the user's made non-reentrant, the offloaded or split
checkpointing function, each change recorded in the call's state for :func:`ojas_ref.revert_model`."""

from __future__ import annotations

import functools
import inspect
from typing import TYPE_CHECKING, Any, Optional, Union

from torch import nn

from ojas_ref.integrations.hf.report import Change
from ojas_ref.integrations.hf.split_checkpoint import SPLIT_SEGMENTS, SplitCheckpoint, split_layers, split_swap

if TYPE_CHECKING:
    from ojas_ref.integrations.hf.optimize import _State

__all__ = ["install_checkpointing", "torch_checkpoint_reentrant"]


def install_checkpointing(model: nn.Module, state: _State, checkpoint: Union[bool, str], split: bool) -> None:
    """Checkpoint each decoder layer of ``model`` (``checkpoint`` True or ``"offload"``; ``split``:
    two segments per layer) and report it in ``state.report``; ``NotImplementedError`` for a model
    that cannot be checkpointed so."""
    if not getattr(model, "supports_gradient_checkpointing", False):
        raise NotImplementedError(f"{type(model).__name__} does not support gradient checkpointing")
    if checkpoint == "offload" and "value" in inspect.signature(model._set_gradient_checkpointing).parameters:
        raise NotImplementedError(
            f"checkpoint='offload': {type(model).__name__} uses the old "
            "_set_gradient_checkpointing(value) format, which takes no function"
        )
    if not any(getattr(m, "gradient_checkpointing", False) for m in model.modules()):
        kwargs = {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.24's name
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        state.enabled_checkpointing = True
    not_covered = "recomputation equals the stored activations only for deterministic layers (no dropout)"
    if split:
        install_split(model, state, checkpoint == "offload")
        where = ", the segments' inputs offloaded to pinned host memory" if checkpoint == "offload" else ""
        state.report.changed.append(
            Change(
                "(decoder layers)",
                "activation checkpointing split in two segments per layer (input norm + "
                f"self-attention, post-attention norm + MLP; non-reentrant){where}",
                (),
                not_covered
                + "; the split and the offload are exact rearrangements (no theorem); their cost is measured, not "
                "proved (benchmarks/bench_memory.py, +split)",
            )
        )
    elif checkpoint == "offload":
        install_offload(model, state)
        state.report.changed.append(
            Change(
                "(decoder layers)",
                "per-layer activation checkpointing, layer inputs offloaded to pinned host memory (non-reentrant)",
                (),
                not_covered + "; the offload is a copy (exact, no theorem); "
                "its cost is measured, not proved (benchmarks/bench_memory.py, +offload)",
            )
        )
    else:
        what = "per-layer activation checkpointing (non-reentrant)"
        if not state.enabled_checkpointing:
            what = make_non_reentrant(model, state)
        state.report.changed.append(Change("(decoder layers)", what, (), not_covered))


def torch_checkpoint_reentrant(func: Any) -> Optional[bool]:
    """For ``functools.partial(torch.utils.checkpoint.checkpoint, **keywords)`` (Hugging Face's
    checkpointing function): whether it is reentrant (``use_reentrant`` True or unset, torch's
    default True); None for any other function."""
    from torch.utils.checkpoint import checkpoint as torch_checkpoint

    if isinstance(func, functools.partial) and func.func is torch_checkpoint and not func.args:
        return func.keywords.get("use_reentrant", True) is not False
    return None


def make_non_reentrant(model: nn.Module, state: _State) -> str:
    """``checkpoint=True`` over checkpointing the user enabled: each reentrant checkpointing function
    (:func:`torch_checkpoint_reentrant`) replaced by the non-reentrant one with the same other
    arguments (:func:`~ojas_ref.revert_model` puts it back); any other function kept. Returns what now runs."""
    replaced, kept = False, set()
    for m in model.modules():
        func = m.__dict__.get("_gradient_checkpointing_func")
        if not hasattr(m, "gradient_checkpointing") or func is None:
            continue
        reentrant = torch_checkpoint_reentrant(func)
        if reentrant:
            state.checkpoint_funcs.append((m, func))
            m._gradient_checkpointing_func = functools.partial(func.func, **{**func.keywords, "use_reentrant": False})
            replaced = True
        elif reentrant is None and m.gradient_checkpointing:
            kept.add(getattr(getattr(func, "func", func), "__qualname__", type(func).__name__))
    if kept:
        return (
            f"per-layer activation checkpointing by the model's own function ({', '.join(sorted(kept))}), kept as "
            "it is: optimize_model does not know whether it is non-reentrant"
        )
    if replaced:
        return (
            "per-layer activation checkpointing (non-reentrant: the model's reentrant checkpointing made "
            "non-reentrant, its other arguments kept)"
        )
    return "per-layer activation checkpointing (non-reentrant)"


def install_split(model: nn.Module, state: _State, offload: bool) -> None:
    """Make each checkpointed decoder layer's checkpointing function a
    :class:`~ojas_ref.integrations.hf.SplitCheckpoint` (its segments checkpointed by one
    shared :class:`~ojas_ref.nn.offload.OffloadedCheckpoint` with ``offload``, else by
    non-reentrant ``checkpoint``) and swap the classes of its norms and segment modules;
    :func:`~ojas_ref.revert_model` puts both back."""
    from torch.utils.checkpoint import checkpoint

    from ojas_ref.nn.offload import OffloadedCheckpoint

    segment_checkpoint = OffloadedCheckpoint() if offload else functools.partial(checkpoint, use_reentrant=False)
    for layer in split_layers(model):
        if not layer.gradient_checkpointing:  # the user's checkpointing left it out (every_n_layers)
            continue
        state.checkpoint_funcs.append((layer, layer.__dict__.get("_gradient_checkpointing_func")))
        layer._gradient_checkpointing_func = SplitCheckpoint(layer, segment_checkpoint)
        for norm_name, module_name in SPLIT_SEGMENTS:
            for name, segment in ((norm_name, False), (module_name, True)):
                module = getattr(layer, name)
                state.swapped.append((module, split_swap(module, segment)))
        state.split = True


def install_offload(model: nn.Module, state: _State) -> None:
    """Make :class:`~ojas_ref.nn.offload.OffloadedCheckpoint` the checkpointing function:
    through ``_set_gradient_checkpointing`` (Hugging Face's own hook) when this call enabled the
    checkpointing, else (the user's, e.g. every n layers) by replacing each module's function,
    which :func:`~ojas_ref.revert_model` puts back."""
    from ojas_ref.nn.offload import OffloadedCheckpoint

    func = OffloadedCheckpoint()
    if state.enabled_checkpointing:
        model._set_gradient_checkpointing(enable=True, gradient_checkpointing_func=func)
        return
    for m in model.modules():
        if hasattr(m, "gradient_checkpointing"):
            state.checkpoint_funcs.append((m, m.__dict__.get("_gradient_checkpointing_func")))
            m._gradient_checkpointing_func = func
