"""Host-side helpers for the kernels' launch code: integer helpers, and the autograd functions'
``apply`` without torch's Python wrapper.

``triton.cdiv`` and ``triton.next_power_of_2`` are Triton constexpr functions in recent
releases: called from Python each goes through Triton's argument unwrapping (several
microseconds a call, measured with cProfile on the CPU, triton 3.9), and the launch code
calls them at every forward and backward.  These are the same integer functions in plain
Python.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

__all__ = ["cdiv", "function_apply", "next_power_of_2"]


def cdiv(x: int, y: int) -> int:
    """``ceil(x / y)`` for ints, ``y > 0``."""
    return -(-x // y)


def next_power_of_2(n: int) -> int:
    """The smallest power of two ``>= n`` for ``n >= 1`` (0 for 0), as ``triton.next_power_of_2``."""
    return 0 if n == 0 else 1 << (n - 1).bit_length()


def function_apply(cls: type) -> Callable[..., Any]:
    """``cls.apply`` (``cls`` a ``torch.autograd.Function``) that skips torch's Python wrapper
    ``Function.apply`` where no torch.func transform is active: the wrapper then only unwraps
    dead functorch wrappers, argument by argument, before calling the C ``apply`` this calls
    directly (about 3 microseconds a call with ten arguments, on the host-bound steps of small
    models).  Under a transform it is ``cls.apply``.  For functions without ``setup_context``
    (whose arguments the wrapper would bind to their defaults first): refused otherwise.  A
    dead functorch wrapper passed outside any transform then reaches the forward as it is."""
    if not issubclass(cls, torch.autograd.Function):
        raise TypeError(f"function_apply takes a torch.autograd.Function subclass, got {cls!r}")
    if cls.setup_context is not torch.autograd.Function.setup_context:
        raise ValueError(f"function_apply: {cls.__name__} defines setup_context; call {cls.__name__}.apply")
    c_apply = torch._C._FunctionBase.__dict__["apply"].__get__(None, cls)
    python_apply = cls.apply
    transforms_active = torch._C._are_functorch_transforms_active

    def apply(*args: Any) -> Any:
        if transforms_active():
            return python_apply(*args)
        return c_apply(*args)

    return apply
