"""Old names kept for one release, each warning ``DeprecationWarning`` and forwarding to the new
one: keywords (:func:`renamed_keyword`), attributes (:func:`renamed_attribute`) and module
attributes (:func:`renamed_module_attributes`)."""

from __future__ import annotations

import functools
import sys
import warnings
from typing import Any, Callable, Optional, TypeVar

__all__ = ["renamed_attribute", "renamed_keyword", "renamed_module_attributes"]

_F = TypeVar("_F", bound=Callable[..., Any])


def renamed_keyword(old: str, new: str, owner: Optional[str] = None) -> Callable[[_F], _F]:
    """Accept the keyword ``old`` as a deprecated alias of ``new`` for one release: it warns
    (``DeprecationWarning``, naming ``owner``, by default the function's name) and is passed on
    as ``new``; both at once raise ``TypeError``. Wraps a function, or a dataclass's ``__init__``
    (``cls.__init__ = renamed_keyword("old", "new", "Cls")(cls.__init__)``)."""

    def decorate(func: _F) -> _F:
        name = owner or func.__name__

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if old in kwargs:
                if new in kwargs:
                    raise TypeError(f"{name}() got both {new}= and its deprecated alias {old}=")
                warnings.warn(
                    f"{name}({old}=...) is deprecated and will be removed in the next release; use {new}=...",
                    DeprecationWarning,
                    stacklevel=2,
                )
                kwargs[new] = kwargs.pop(old)
            return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def _warn(old: str, new: str, stacklevel: int) -> None:
    warnings.warn(
        f"{old} is deprecated and will be removed in the next release; use {new}",
        DeprecationWarning,
        stacklevel=stacklevel,
    )


def renamed_attribute(owner: str, old: str, new: str) -> property:
    """The attribute ``old`` of class ``owner`` as a deprecated alias of ``new`` for one release
    (``rotary = renamed_attribute("Cls", "rotary", "rope")`` in the class body): reading or setting
    it warns and reads or sets ``new``."""

    def get(self: Any) -> Any:
        _warn(f"{owner}.{old}", f"{owner}.{new}", 3)
        return getattr(self, new)

    def set_(self: Any, value: Any) -> None:
        _warn(f"{owner}.{old}", f"{owner}.{new}", 3)
        setattr(self, new, value)

    return property(get, set_, doc=f"Deprecated alias of :attr:`{new}` (release 0.1).")


def renamed_module_attributes(module: str, renamed: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` (``__getattr__ = renamed_module_attributes(__name__, {"old": "new"})``)
    that serves each old name of ``renamed`` as the module's attribute ``new``, with a warning;
    any other missing name raises ``AttributeError`` as usual."""

    def __getattr__(name: str) -> Any:
        if name in renamed:
            _warn(f"{module}.{name}", f"{module}.{renamed[name]}", 3)
            return getattr(sys.modules[module], renamed[name])
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
