"""Launch a ``@triton.jit`` kernel with less host work once its specialization is compiled.

``kernel[grid](*args, **kwargs)`` runs Triton's ``JITFunction.run`` at every call: it binds
and specializes every argument, builds the cache key (``str`` of the compile options
included), checks the kernel's globals and reads the launch hooks, before the C launcher
runs.  On the H200's host that is tens of microseconds per launch, and the step of a
small model is host-bound (the 1.06B Llama's bf16 step: 37 ms of CUDA time in 55 ms, torch.profiler,
H200, 2026-12-01; ``git show 343a89b:benchmarks/RESULTS.md``).  :class:`FastLaunch` keeps, per
specialization, the compiled kernel Triton returned and calls its launcher directly.

The key is finer than Triton's own specialization, so a kernel found by it is the one
Triton would have compiled for these arguments: per tensor its dtype and whether its data
pointer is 16-byte aligned; per int whether it is 0, 1 or a multiple of 16 and whether it
fits 32 bits; per bool and per keyword argument (the constexprs and launch options) its
value, except floats; per float only that it is a float (Triton does not specialize on
float values).
The arguments go to the launcher in signature order, constexprs included, as
``JITFunction.run`` passes them since Triton 3.3.  Everything else takes Triton's own path:
the CPU interpreter, Triton before 3.3, an active launch hook (profilers), a keyword
argument that is a tensor, a parameter left to its default, a first call.
"""

from __future__ import annotations

import os
from typing import Any, Optional

import torch
import triton

__all__ = ["FastLaunch", "fast"]

_INTERPRETED = os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")
_VERSION = tuple(int(p) for p in triton.__version__.split(".")[:2] if p.isdigit())
_SUPPORTED = _VERSION >= (3, 3) and not _INTERPRETED
_INT32 = range(-(2**31), 2**31)
_EXACT_SIZE = 4096


def _spec(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.dtype, x.data_ptr() % 16 == 0
    if isinstance(x, bool):
        return "b", x
    if isinstance(x, int):
        return "i", x == 0, x == 1, x % 16 == 0, x in _INT32
    if isinstance(x, float):
        return "f"
    return "v", x


def _hashable(values: Any) -> bool:
    try:
        hash(values)
    except TypeError:
        return False
    return True


def _hook_set(hook: Any) -> bool:
    """Whether a launch hook is installed: Triton >= 3.4 keeps a ``HookChain`` there at all
    times (its ``calls`` empty when none is), earlier versions None or a function."""
    return hook is not None and bool(getattr(hook, "calls", True))


#: Triton's runtime knobs (Triton >= 3.4), where the launch hooks are set, read once
_RUNTIME = getattr(getattr(triton, "knobs", None), "runtime", None)


def _hooks_active() -> bool:
    runtime = _RUNTIME
    return runtime is None or _hook_set(runtime.launch_enter_hook) or _hook_set(runtime.launch_exit_hook)


class FastLaunch:
    """``FastLaunch(kernel)[grid](*args, **kwargs)`` launches as ``kernel[grid](*args, **kwargs)`` does.

    Two caches: ``_cache`` maps the specialization key of :func:`_spec` to the compiled kernel;
    ``_exact`` maps a cheaper key, made in one pass over the arguments, to the same entry: ints
    and keyword values as they are (finer than the specialization, so never a wrong kernel),
    floats as "a float", tensors as (dtype, 16-byte aligned).  It holds at most
    ``_EXACT_SIZE`` keys (cleared when full: ints such as chunk offsets vary)."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        self._arg_names = list(getattr(kernel, "arg_names", ()))
        self._cache: dict[tuple, tuple[Any, list[str]]] = {}
        self._exact: dict[tuple, tuple[Any, list[str]]] = {}

    def __getitem__(self, grid: tuple[int, ...]):
        return lambda *args, **kwargs: self._launch(grid, args, kwargs)

    def _launch(self, grid: tuple[int, ...], args: tuple, kwargs: dict[str, Any]) -> None:
        if not _SUPPORTED or _hooks_active():
            self.kernel[grid](*args, **kwargs)
            return
        device = torch._C._cuda_getDevice()  # the arguments live on CUDA: it is initialised
        exact = (
            device,
            tuple(
                [
                    a
                    if type(a) is int
                    else "f"
                    if type(a) is float
                    else (a.dtype, a.data_ptr() % 16 == 0)
                    if isinstance(a, torch.Tensor)
                    else (type(a), a)
                    for a in args
                ]
            ),
            tuple(kwargs.items()),
        )
        try:
            hit = self._exact.get(exact)
        except TypeError:  # an unhashable argument: Triton's own path
            self.kernel[grid](*args, **kwargs)
            return
        if hit is None:
            hit = self._specialization(grid, args, kwargs, device)
            if hit is None:
                return
            if len(self._exact) >= _EXACT_SIZE:
                self._exact.clear()
            self._exact[exact] = hit
        compiled, tail_names = hit
        tail = [kwargs[name] for name in tail_names]
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

    def _specialization(
        self, grid: tuple[int, ...], args: tuple, kwargs: dict[str, Any], device: int
    ) -> Optional[tuple[Any, list[str]]]:
        """The cached compiled kernel of these arguments' specialization, or None after launching
        through Triton (a first call, a tensor keyword argument, a parameter left to its default)."""
        constants = tuple((k, _spec(v) if isinstance(v, float) else v) for k, v in kwargs.items())
        if any(isinstance(v, torch.Tensor) for v in kwargs.values()) or not _hashable(constants):
            self.kernel[grid](*args, **kwargs)
            return None
        key = (device, tuple(map(_spec, args)), constants)
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
