"""Host-side helpers for the kernels' launch code: integer helpers, the autograd functions'
``apply`` without torch's Python wrapper, and the ``ojas::`` operators' registration
(:func:`define_op`; ``ojas_ref`` imports it, and this module needs no Triton).

``triton.cdiv`` and ``triton.next_power_of_2`` are Triton constexpr functions in recent
releases: called from Python each goes through Triton's argument unwrapping (several
microseconds a call, measured with cProfile on the CPU, triton 3.9), and the launch code
calls them at every forward and backward.  These are the same integer functions in plain
Python.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

__all__ = ["cdiv", "define_op", "dynamo_apply", "function_apply", "next_power_of_2"]


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


#: the ``ojas::`` operators' registrations (a Library's last as long as it does)
_LIBRARY = torch.library.Library("ojas", "FRAGMENT")


def define_op(
    name: str, schema: str, impl: Callable[..., Any], fake: Callable[..., Any], host_sync: bool = False
) -> torch._ops.OpOverload:
    """Define the operator ``ojas::name`` with ``schema`` (its arguments and results, e.g.
    ``"(Tensor x, float eps) -> (Tensor, Tensor)"``; tagged pt2-compliant), ``impl`` its CPU and
    CUDA kernel and ``fake`` its fake implementation (torch.compile's shapes and strides), and
    return it.  The dispatcher calls ``impl`` directly (under ``torch._disable_dynamo``), with no
    Python layer around it: no autograd kernel (the caller's ``torch.autograd.Function`` calls the
    forward op in its forward and the backward op in its backward under torch.compile, where
    Dynamo traces it), no other wrapper (``torch.library.custom_op`` adds Python frames per call
    at its autograd and default kernels).  The ops are not differentiable on their own.
    ``host_sync``: ``impl`` reads a device value on the host (a count), which a CUDA graph cannot
    capture: the op is also tagged ``cudagraph_unsafe``, so that ``torch.compile(mode="reduce-overhead")``
    runs it outside the captured graphs (Inductor's graph partition)."""
    tags = (torch.Tag.pt2_compliant_tag,) + ((torch.Tag.cudagraph_unsafe,) if host_sync else ())
    _LIBRARY.define(name + schema, tags=tags)
    kernel = torch._disable_dynamo(impl)
    for key in ("CPU", "CUDA"):
        _LIBRARY.impl(name, kernel, key)
    torch.library.register_fake(f"ojas::{name}", fake, lib=_LIBRARY)
    return getattr(torch.ops.ojas, name).default


def dynamo_apply(cls: type, *args: Any) -> Any:
    """``cls.apply(*args)`` (``cls`` a ``torch.autograd.Function``) for torch.compile, with a
    tensor met a second time among ``args`` passed as a view of itself: Dynamo refuses a Function
    given one tensor at two inputs, and autograd sums the view's gradient into the tensor's as it
    sums a repeated input's."""
    seen: list[torch.Tensor] = []
    distinct = []
    for a in args:
        if isinstance(a, torch.Tensor):
            if any(a is t for t in seen):
                a = a.view_as(a)
            else:
                seen.append(a)
        distinct.append(a)
    return cls.apply(*distinct)
