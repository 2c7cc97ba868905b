"""The checks of :class:`~ojas_ref.optim.in_backward.InBackwardOptimizer`'s arguments (types and
ranges; each error names the argument): :func:`check_optimizer_class`, :func:`check_options`, and
:func:`recipe_options` for ``InBackwardOptimizer.from_recipe``."""

from __future__ import annotations

import math
from typing import Any, Optional

import torch
from torch import Tensor

from ojas_ref.recipe import MemoryRecipe

__all__ = ["check_optimizer_class", "check_options", "recipe_options"]


def check_optimizer_class(optimizer_class: Any, in_backward: type) -> None:
    """``optimizer_class``: a ``torch.optim.Optimizer`` subclass whose step updates each parameter on
    its own (not ``in_backward``, the class itself, nor LBFGS)."""
    if not (isinstance(optimizer_class, type) and issubclass(optimizer_class, torch.optim.Optimizer)):
        raise TypeError(f"optimizer_class must be a torch.optim.Optimizer subclass, got {optimizer_class!r}")
    if issubclass(optimizer_class, in_backward):
        raise TypeError("optimizer_class cannot be InBackwardOptimizer itself")
    if issubclass(optimizer_class, torch.optim.LBFGS):
        raise ValueError(
            "optimizer_class=LBFGS needs step(closure) over all parameters at once; "
            "it cannot update one parameter in its hook"
        )


def check_options(
    accumulation_steps: Any, max_grad_norm: Any, bucket_cap_mb: Any, overlap: Any, state_slice_mb: Any
) -> tuple[Optional[float], float, Optional[float]]:
    """Check the options; return ``max_grad_norm``, ``bucket_cap_mb`` and ``state_slice_mb`` as floats
    (or None)."""
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
            raise ValueError(
                f"state_slice_mb must be None or a finite float > 0 (MiB of one parameter's "
                f"optimizer state on the device at a time), got {state_slice_mb}"
            )
        state_slice_mb = float(state_slice_mb)
    return max_grad_norm, float(bucket_cap_mb), state_slice_mb


def recipe_options(recipe: Any, head_weight: Optional[Tensor], optimizer_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The constructor's keywords that ``recipe`` sets (:meth:`~ojas_ref.MemoryRecipe.optimizer_options`),
    after checking that it asks for the optimizer in backward, that ``head_weight`` is given exactly
    when ``recipe.head_update``, and that ``optimizer_kwargs`` sets none of them."""
    if not isinstance(recipe, MemoryRecipe):
        raise TypeError(f"recipe must be an ojas_ref.MemoryRecipe, got {type(recipe).__name__}")
    if not recipe.in_backward:
        raise ValueError(
            "recipe.in_backward is False: the recipe asks for the standard optimizer step; use "
            "optimizer_class directly (e.g. torch.optim.AdamW(params, ...))"
        )
    if recipe.head_update and head_weight is None:
        raise ValueError(
            "recipe.head_update is True: pass head_weight=, the head's [V, D] weight (e.g. model.lm_head.weight)"
        )
    if head_weight is not None and not recipe.head_update:
        raise ValueError(
            "head_weight= is given but recipe.head_update is False: set head_update=True in the recipe, "
            "or leave head_weight out"
        )
    options = recipe.optimizer_options()
    both = sorted(set(options) & set(optimizer_kwargs))
    if both:
        raise TypeError(f"from_recipe() got {', '.join(f'{name}=' for name in both)} as keywords: the recipe sets them")
    return options
