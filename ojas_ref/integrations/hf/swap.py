"""The class swaps of the Hugging Face adapters: a module of a checked class becomes an instance of
a subclass whose forward is a mixin's (same parameters and ``state_dict``; the model's own forward
passes still run). Used by :mod:`~ojas_ref.integrations.hf.rms_norm`,
:mod:`~ojas_ref.integrations.hf.swiglu` and :mod:`~ojas_ref.integrations.hf.split_checkpoint`."""

from __future__ import annotations

import copyreg
from typing import Any

__all__ = ["SwappedType", "swapped_class"]


class SwappedType(type):
    """The metaclass of the classes :func:`swapped_class` makes: such a class pickles as the call
    that makes it (``copyreg``), so a model pickled with them loads in a process that has not
    optimized a model of that class yet."""


def swapped_class(cls: type, mixin: type, attrs: dict[str, Any], prefix: str = "Ojas") -> type:
    """The subclass ``<prefix><Name>`` of ``cls`` with ``mixin``'s forward, made once and kept in
    this module's namespace."""
    name = f"{prefix}{cls.__name__}"
    swapped = globals().get(name)
    if swapped is None or cls not in swapped.__bases__:
        swapped = SwappedType(
            name,
            (mixin, cls),
            dict(attrs, __module__=__name__, __qualname__=name, _ojas_made_by=(cls, mixin, attrs, prefix)),
        )
        globals()[name] = swapped
    return swapped


copyreg.pickle(SwappedType, lambda swapped: (swapped_class, swapped._ojas_made_by))
