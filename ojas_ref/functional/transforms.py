"""The primitives under torch.func's function transforms (grad, vmap, jacrev, jvp, ...): refused.

Their backward passes are custom ``torch.autograd.Function`` s written for the chunked and
tiled schedules (token selection by data-dependent indices, recomputation in backward),
without the ``setup_context`` / ``vmap`` rules that functorch needs. Called under a
transform, torch would raise a message about ``setup_context``; this says what to do.
"""

from __future__ import annotations

import torch

__all__ = ["refuse_function_transforms"]


def refuse_function_transforms(name: str) -> None:
    """Raise NotImplementedError if a torch.func transform is active (not under torch.compile,
    whose tracing runs no transform of its own here)."""
    if torch.compiler.is_compiling():
        return
    if torch._C._functorch.maybe_current_level() is not None:
        raise NotImplementedError(
            f"{name} does not support torch.func transforms (grad, vmap, jacrev, jvp, ...): its backward is a "
            "custom torch.autograd.Function of the chunked schedule; use torch.autograd (loss.backward(), "
            "torch.autograd.grad) instead"
        )
