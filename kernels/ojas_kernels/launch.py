"""Launch a ``@triton.jit`` kernel with less host work once its specialization is compiled.

``kernel[grid](*args, **kwargs)`` runs Triton's ``JITFunction.run`` at every call: it binds
and specializes every argument, builds the cache key (``str`` of the compile options
included), checks the kernel's globals and reads the launch hooks, before the C launcher
runs.  On the H200's host that is tens of microseconds per launch, and the step of a
small model is host-bound (the 1.06B Llama's bf16 step: 37 ms of CUDA time in 55 ms, torch.profiler,
H200, 2026-12-01; ``git show 343a89b:benchmarks/RESULTS.md``).  :class:`FastLaunch` keeps, per
specialization, the compiled kernel Triton returned and calls its launcher directly.

The key is finer than Triton's own specialization, so a kernel found by it is the one
Triton would have compiled for these arguments: per constexpr parameter and per launch option
its type and value (``True``, ``1`` and ``1.0`` are equal in Python, not in a key); per tensor
its dtype and whether its data pointer is 16-byte aligned; per int whether it is 0, 1 or a
multiple of 16 and whether it fits 32 or 64 bits (Triton's i32, i64, u64); per bool its
value; per float that is not a constexpr only that it is a float (Triton specializes it as
fp32 whatever its value).
After the first calls of a specialization the key is made by a function generated for the
shape of the call (which arguments are tensors, runtime floats or other values; as Triton
generates a binder per kernel signature), without testing each argument's type.
The arguments go to the launcher in signature order, constexprs included, as
``JITFunction.run`` passes them since Triton 3.3.  Everything else takes Triton's own path:
the CPU interpreter, Triton before 3.3, an active launch hook (profilers), a kernel without a
Python function (``fn``: its constexprs unknown), more positional arguments than parameters, a
keyword argument that is a tensor, a parameter left to its default, a first call.
"""

from __future__ import annotations

import inspect
import os
from typing import Any, Callable, Optional

import torch
import triton
from triton.runtime.jit import KernelParam

__all__ = ["FastLaunch", "fast"]

_INTERPRETED = os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")
_VERSION = tuple(int(p) for p in triton.__version__.split(".")[:2] if p.isdigit())
_SUPPORTED = _VERSION >= (3, 3) and not _INTERPRETED
_INT32 = range(-(2**31), 2**31)
_INT64 = range(-(2**63), 2**63)
_EXACT_SIZE = 4096


def _spec(x: Any, constexpr: bool) -> Any:
    """What Triton specializes ``x`` on, as a parameter that is a ``constexpr`` or not."""
    if constexpr:
        return type(x), x
    if isinstance(x, torch.Tensor):
        return x.dtype, x.data_ptr() % 16 == 0
    if isinstance(x, bool):
        return "b", x
    if isinstance(x, int):
        return "i", x == 0, x == 1, x % 16 == 0, x in _INT32, x in _INT64
    if isinstance(x, float):
        return "f"
    return "v", x


def _constexpr_flags(kernel: Any) -> dict[str, bool]:
    """Per parameter name of ``kernel``'s function whether it is a constexpr, by Triton's rule
    (``KernelParam``, as in ``JITFunction.params``, which an interpreted kernel lacks); empty for
    an object without a function (every call then takes Triton's path)."""
    fn = getattr(kernel, "fn", None)
    if fn is None:
        return {}
    parameters = inspect.signature(fn).parameters.values()
    return {p.name: KernelParam(i, p, False, False).is_constexpr for i, p in enumerate(parameters)}


def _hashable(values: Any) -> bool:
    try:
        hash(values)
    except TypeError:
        return False
    return True


#: Triton's runtime knobs (Triton >= 3.4), where the launch hooks are set, read once
_RUNTIME = getattr(getattr(triton, "knobs", None), "runtime", None)


def _hooks_active() -> bool:
    """Whether a launch hook is installed: Triton >= 3.4 keeps a ``HookChain`` in each of the
    two knobs at all times (its ``calls`` empty when none is), earlier versions None or a
    function (and no knobs: then True, Triton's path)."""
    runtime = _RUNTIME
    if runtime is None:
        return True
    enter, leave = runtime.launch_enter_hook, runtime.launch_exit_hook
    return (enter is not None and bool(getattr(enter, "calls", True))) or (
        leave is not None and bool(getattr(leave, "calls", True))
    )


def _kinds(args: tuple, constexprs: tuple[bool, ...]) -> tuple:
    """What :func:`_keyer_source` keys each argument by: "t" (a tensor: its dtype and alignment),
    "f" (a float that is not a ``constexprs`` parameter: its type), else its type (its type and
    value)."""
    return tuple(
        [
            "t" if isinstance(a, torch.Tensor) else "f" if type(a) is float and not c else type(a)
            for a, c in zip(args, constexprs)
        ]
    )


def _run(compiled: Any, grid: tuple[int, ...], device: int, args: tuple, tail: Any) -> None:
    """``compiled``'s launcher on ``grid`` in the current stream of ``device``: the arguments
    in signature order (``args``, then ``tail``), constexprs included."""
    n = len(grid)
    compiled.run(
        grid[0],
        grid[1] if n > 1 else 1,
        grid[2] if n > 2 else 1,
        torch._C._cuda_getCurrentRawStream(device),
        compiled.function,
        compiled.packed_metadata,
        None,
        None,
        None,
        *args,
        *tail,
    )


def _keyer_source(kinds: tuple, tail_names: list[str]) -> str:
    """The source of ``keyer(device, args, kwargs) -> (key, tail)`` for positional arguments of
    ``kinds`` (:func:`_kinds`): the key holds the device, per tensor its dtype and whether its
    data pointer is 16-byte aligned, per runtime float its type, per other argument its type and
    value, then the keyword names, values and their types in call order (as fine as
    ``FastLaunch``'s exact key);
    ``tail`` is the keyword values of ``tail_names``, in that order.  AttributeError (a
    non-tensor where ``kinds`` has one) or KeyError (a name of ``tail_names`` missing) for a
    call of another shape; another type of argument gives another key."""
    parts = ["_d"]
    for i, kind in enumerate(kinds):
        a = f"_a{i}"
        parts += [f"{a}.dtype", f"{a}.data_ptr() % 16 == 0"] if kind == "t" else [f"type({a})"]
        if kind != "t" and kind != "f":
            parts.append(a)
    unpack = "".join(f"_a{i}, " for i in range(len(kinds)))
    tail = "".join(f"kwargs[{name!r}], " for name in tail_names)
    return (
        "def keyer(_d, args, kwargs):\n"
        + (f"    {unpack}= args\n" if kinds else "")
        + f"    return ({', '.join(parts)}, *kwargs, *kwargs.values(), *map(type, kwargs.values())), ({tail})\n"
    )


class _Keyer:
    """The generated key of one count of positional arguments (:func:`_keyer_source`, made from
    the first call of that count found in ``FastLaunch._exact``; as Triton generates a binder per
    kernel signature), and the compiled kernels by that key (at most ``_EXACT_SIZE``)."""

    def __init__(self, kinds: tuple, tail_names: list[str]) -> None:
        namespace: dict[str, Any] = {}
        exec(_keyer_source(kinds, tail_names), namespace)  # noqa: S102 - generated from kinds and reprs
        self.key: Callable[[int, tuple, dict[str, Any]], tuple] = namespace["keyer"]
        self.kinds = kinds
        self.compiled: dict[tuple, Any] = {}

    def add(self, key: tuple, kinds: tuple, compiled: Any) -> None:
        """Map ``key`` to ``compiled`` if ``kinds`` (the call's :func:`_kinds`) are this keyer's
        (so that no tensor is kept in a key)."""
        if kinds == self.kinds:
            if len(self.compiled) >= _EXACT_SIZE:
                self.compiled.clear()
            self.compiled[key] = compiled


class FastLaunch:
    """``FastLaunch(kernel)[grid](*args, **kwargs)`` launches as ``kernel[grid](*args, **kwargs)`` does.

    Three caches: ``_cache`` maps the specialization key of :func:`_spec` to the compiled kernel;
    ``_exact`` maps a cheaper key, made in one pass over the arguments, to the same entry: ints
    as they are, keyword values and other constexprs with their types (finer than the
    specialization, so never a wrong kernel), runtime floats as "a float", tensors as (dtype,
    16-byte aligned).  It holds at most ``_EXACT_SIZE`` keys (cleared when full: ints such as
    chunk offsets vary).  ``_keyers``
    maps a count of positional arguments to its :class:`_Keyer`, whose key is as fine as
    ``_exact``'s and made without a test of each argument's type: the path of every call after
    the first ones of a specialization."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        self._constexpr = _constexpr_flags(kernel)
        self._constexprs = tuple(self._constexpr.values())
        self._arg_names = list(self._constexpr)
        self._cache: dict[tuple, tuple[Any, list[str]]] = {}
        self._exact: dict[tuple, tuple[Any, list[str]]] = {}
        self._keyers: dict[int, _Keyer] = {}

    def clear(self) -> None:
        """Forget every compiled kernel found (the next calls take Triton's path first)."""
        self._cache.clear()
        self._exact.clear()
        self._keyers.clear()

    def __getitem__(self, grid: tuple[int, ...]):
        return lambda *args, **kwargs: self._launch(grid, args, kwargs)

    def _launch(self, grid: tuple[int, ...], args: tuple, kwargs: dict[str, Any]) -> None:
        if not _SUPPORTED or _hooks_active():
            self.kernel[grid](*args, **kwargs)
            return
        device = torch._C._cuda_getDevice()  # the arguments live on CUDA: it is initialised
        keyer = self._keyers.get(len(args))
        key = None
        if keyer is not None:
            try:
                key, tail = keyer.key(device, args, kwargs)
                compiled = keyer.compiled.get(key)
            except (AttributeError, KeyError, TypeError):  # another shape of call, an unhashable value
                key = compiled = None
            if compiled is not None:
                _run(compiled, grid, device, args, tail)
                return
        hit = self._launch_exact(grid, args, kwargs, device)
        if hit is None:
            return
        kinds = _kinds(args, self._constexprs)
        if keyer is None:
            self._keyers[len(args)] = _Keyer(kinds, hit[1])
        elif key is not None:
            keyer.add(key, kinds, hit[0])

    def _launch_exact(
        self, grid: tuple[int, ...], args: tuple, kwargs: dict[str, Any], device: int
    ) -> Optional[tuple[Any, list[str]]]:
        """Launch through ``_exact`` (or Triton's path); the entry it launched, or None after
        Triton's path."""
        if len(args) > len(self._constexprs):  # more arguments than parameters known: Triton's path
            self.kernel[grid](*args, **kwargs)
            return None
        exact = (
            device,
            tuple(
                [
                    a
                    if type(a) is int
                    else "f"
                    if type(a) is float and not c
                    else (a.dtype, a.data_ptr() % 16 == 0)
                    if isinstance(a, torch.Tensor)
                    else (type(a), a)
                    for a, c in zip(args, self._constexprs)
                ]
            ),
            tuple(kwargs.items()),
            tuple(map(type, kwargs.values())),
        )
        try:
            hit = self._exact.get(exact)
        except TypeError:  # an unhashable argument: Triton's own path
            self.kernel[grid](*args, **kwargs)
            return None
        if hit is None:
            hit = self._specialization(grid, args, kwargs, device)
            if hit is None:
                return None
            if len(self._exact) >= _EXACT_SIZE:
                self._exact.clear()
            self._exact[exact] = hit
        compiled, tail_names = hit
        _run(compiled, grid, device, args, [kwargs[name] for name in tail_names])
        return hit

    def _specialization(
        self, grid: tuple[int, ...], args: tuple, kwargs: dict[str, Any], device: int
    ) -> Optional[tuple[Any, list[str]]]:
        """The cached compiled kernel of these arguments' specialization, or None after launching
        through Triton (a first call, a tensor keyword argument, a parameter left to its default)."""
        constants = tuple((k, _spec(v, self._constexpr.get(k, True))) for k, v in kwargs.items())
        if any(isinstance(v, torch.Tensor) for v in kwargs.values()) or not _hashable(constants):
            self.kernel[grid](*args, **kwargs)
            return None
        key = (device, tuple(map(_spec, args, self._constexprs)), constants)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        compiled = self.kernel[grid](*args, **kwargs)
        tail_names = self._arg_names[len(args) :]
        if (
            self._arg_names
            and all(name in kwargs for name in tail_names)
            and all(hasattr(compiled, a) for a in ("run", "function", "packed_metadata"))
        ):
            self._cache[key] = (compiled, tail_names)
        return None


_LAUNCHERS: dict[int, FastLaunch] = {}


def fast(kernel: Any) -> FastLaunch:
    """The :class:`FastLaunch` of ``kernel`` (one per kernel object)."""
    launcher = _LAUNCHERS.get(id(kernel))
    if launcher is None or launcher.kernel is not kernel:
        launcher = _LAUNCHERS[id(kernel)] = FastLaunch(kernel)
    return launcher
