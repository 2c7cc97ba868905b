"""Old keyword names kept for one release: :func:`renamed_keyword`."""

from __future__ import annotations

import functools
import warnings
from typing import Any, Callable, Optional, TypeVar

__all__ = ["renamed_keyword"]

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
