"""The memory check of an ``ojas train`` run: its step's peak predicted by ``ojas plan``'s formulas
(:func:`predict_peak`, :mod:`ojas_ref.memory`) before the model is built, and the run refused
(:class:`PlanDoesNotFit`) when it exceeds the device's free memory (:func:`check_fits`)."""

from __future__ import annotations

import sys
from typing import Any, Optional

import torch

from ojas_ref import memory
from ojas_ref.tools.train_config import TrainConfig, _vocab

__all__ = ["PlanDoesNotFit", "check_fits", "plan_line", "predict_peak"]


class PlanDoesNotFit(ValueError):
    """The predicted peak of a step exceeds the free device memory (a bad setting: ``ojas train`` exits 2)."""


def _meta_model(config: TrainConfig, vocab_size: int) -> torch.nn.Module:
    """The run's model on the meta device (its shapes, no memory)."""
    import transformers

    transformers.logging.set_verbosity_error()
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(config.model_config(vocab_size))


def predict_peak(config: TrainConfig, model: torch.nn.Module) -> tuple[Any, bool]:
    """``(plan, lower_bound)``: :func:`ojas_ref.memory.plan` of the run's step, ``model`` being the
    run's model (e.g. on the meta device). ``lower_bound``: the setting clips in backward
    (InBackwardOptimizer), whose first of two backward passes keeps the activations alive to its
    end; the planner models the second, so its peak is a lower bound of the run's. ``NotImplementedError``
    (the reason) for a setting the planner does not model."""

    if config.accumulation_steps > 1:
        raise NotImplementedError(
            f"gradient accumulation (accumulation_steps={config.accumulation_steps}) is not modelled by the planner"
        )
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type != "llama":
        raise NotImplementedError(f"the model is {model_type!r}: the planner models Llama decoders only")
    try:  # NotImplementedError for a Llama config of another architecture (biases, ...)
        shape = memory.Model.from_module(model)
    except (ValueError, TypeError) as err:  # a config the planner cannot read is not the run's error
        raise NotImplementedError(f"the planner cannot read the model's config ({err})") from None
    setting = memory.Setting(
        recipe=config.recipe, dtype=config.dtype, optimizer="adamw", batch=config.batch_size, seq=config.seq_len
    )
    lower_bound = config.recipe.in_backward and config.max_grad_norm is not None
    return memory.plan(shape, setting), lower_bound


def _gib(n: int) -> str:
    """Bytes as GiB (three decimals), or MiB (one) below 1 GiB."""
    return f"{n / 2**30:.3f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def check_fits(
    config: TrainConfig, model: torch.nn.Module, available_bytes: int, where: str = "the device"
) -> Optional[Any]:
    """Refuse the run (:class:`PlanDoesNotFit`, naming the predicted peak, its largest terms and
    ``available_bytes``) when its predicted peak (:func:`predict_peak`) exceeds ``available_bytes``;
    return the plan when it fits. A setting the planner does not model is not checked: one line
    on stderr says so and why, and None is returned."""
    try:
        predicted, lower_bound = predict_peak(config, model)
    except NotImplementedError as err:
        print(f"ojas train: memory plan not checked: {err}", file=sys.stderr)
        return None
    peak = predicted.peak_phase
    bound = "at least " if lower_bound else ""
    if predicted.peak > available_bytes:
        largest = sorted((t for t in peak.terms if t.bytes), key=lambda t: t.bytes, reverse=True)[:3]
        terms = ", ".join(f"{t.name} {_gib(t.bytes)}" for t in largest)
        recipe = config.recipe
        advice = [
            a
            for on, a in (
                (config.batch_size > 1, "lower batch_size"),
                (True, "lower seq_len"),
                (not recipe.checkpoint, "turn on activation checkpointing (--checkpoint on)"),
                (recipe.checkpoint is True, "offload the checkpoints (--checkpoint offload)"),
                (
                    recipe.in_backward and recipe.state_device is None,
                    "the AdamW state in host memory (--state-device cpu)",
                ),
                (not recipe.in_backward, "turn on the optimizer in backward (--in-backward)"),
                (
                    not recipe.attention or not recipe.linear_cross_entropy,
                    "turn on --attention and --linear-cross-entropy",
                ),
                (config.dtype == torch.float32, "use --dtype bfloat16"),
            )
            if on
        ]
        advice_text = ", ".join(advice)
        raise PlanDoesNotFit(
            f"the run will not fit in the memory of {where}: predicted peak {bound}{_gib(predicted.peak)} "
            f"({predicted.peak:,} bytes, at {peak.name}; largest terms: {terms}), available "
            f"{_gib(available_bytes)} ({available_bytes:,} bytes free). "
            f"{advice_text[0].upper() + advice_text[1:]} (`ojas plan --fit` lists what fits)"
        )
    note = (
        (
            " (a lower bound: clipping in backward (InBackwardOptimizer) runs two backward passes, the first keeping the "
            "activations, which the planner does not model)"
        )
        if lower_bound
        else ""
    )
    print(
        f"ojas train: memory plan: predicted peak {bound}{_gib(predicted.peak)} at {peak.name}, "
        f"{_gib(available_bytes)} free on {where}{note}",
        file=sys.stderr,
    )
    return predicted


def _check_memory(config: TrainConfig, vocab_size: int, device: torch.device) -> Optional[Any]:
    """:func:`check_fits` with CUDA's free bytes; nothing on another device (the planner
    predicts CUDA's allocator, ``--dry-run`` prints its peak)."""
    if device.type != "cuda":
        return None
    free, _ = torch.cuda.mem_get_info(device)
    return check_fits(config, _meta_model(config, vocab_size), free, str(device))


def plan_line(config: TrainConfig, vocab_size: Optional[int] = None) -> str:
    """``plan`` line of ``--dry-run``: the predicted peak on a GPU, or why it is not predicted."""
    vocab = _vocab(config, vocab_size)
    try:
        predicted, lower_bound = predict_peak(config, _meta_model(config, vocab))
    except NotImplementedError as err:
        return f"plan       predicted peak on a GPU: not predicted ({err})"
    host = (
        f"; host memory {_gib(predicted.host_bytes)} (offloaded checkpoints / optimizer state)"
        if predicted.host
        else ""
    )
    return (
        f"plan       predicted peak on a GPU: {'at least ' if lower_bound else ''}{_gib(predicted.peak)} "
        f"at {predicted.peak_phase.name} (ojas plan's formulas, vocabulary {vocab}"
        + (", a lower bound: clipping in backward runs two backward passes" if lower_bound else "")
        + ")"
        + host
    )
