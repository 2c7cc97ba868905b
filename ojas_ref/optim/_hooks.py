"""Which :class:`~ojas_ref.optim.in_backward.InBackwardOptimizer` updates a parameter in its
post-accumulate-grad hook: the hook itself (:func:`_weak_hook`) and the registry of owners
(:func:`_owner`, read by the DDP watch of ``_distributed``)."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Callable, Optional

from torch import Tensor
from torch.utils.weak import WeakIdKeyDictionary

if TYPE_CHECKING:
    from ojas_ref.optim.in_backward import InBackwardOptimizer

# Hooked parameter -> weak reference to the InBackwardOptimizer whose hook it carries.
# Both sides are weak: a strong value would keep its own keys (the optimizer holds its
# parameters) and so the whole model alive after the user drops it.
_OWNERS = WeakIdKeyDictionary()


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
                "its remove_hooks() before dropping it"
            )
        owner._hook(p, index, nbytes)

    return hook


def _owner(p: Tensor) -> Optional["InBackwardOptimizer"]:
    """The optimizer whose hook ``p`` carries, or None."""
    ref = _OWNERS.get(p)
    return None if ref is None else ref()
