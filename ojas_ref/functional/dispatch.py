"""Which implementation a primitive runs, decided by one rule, and the refusal of double backward
that all their backward passes share.

Every primitive with a Triton kernel takes ``impl`` in :data:`IMPLS`.  ``impl=None`` (the
default) is the primitive's setting: the environment variable ``OJAS_<NAME>_IMPL``
(:data:`IMPL_ENVS`), read once when this module is imported (unset or empty: "auto"), or
what an enclosing :class:`use_impl` block sets.  :func:`kernel_runs` is the rule: the public
functions decide by it, and the Hugging Face adapters' fast path (:func:`plain_kernel_call`)
takes the kernel only where it says the public function would, so the two cannot disagree
(which implementation ran decides which theorem applies).  No environment variable is read
per call: the steps of small models are host-bound (the 1.06B Llama's bf16 step on the H200: 37 ms
of CUDA time in 55 ms, torch.profiler, 2026-12-01; ``git show 343a89b:benchmarks/RESULTS.md``).
"""

from __future__ import annotations

import contextlib
import os
from typing import Callable, Mapping, Optional, Union

import torch
from torch import Tensor

from ojas_ref.functional.autocast import autocast_dtype

__all__ = [
    "IMPLS",
    "IMPL_ENVS",
    "KERNEL_DTYPES",
    "PRIMITIVES",
    "get_impl",
    "kernel_runs",
    "plain_kernel_call",
    "refuse_double_backward",
    "resolve_impl",
    "triton_interpreted",
    "use_impl",
]

IMPLS = ("auto", "reference", "triton")
#: the primitives with a Triton kernel, by the name of their function (rope: ``apply_rotary_pos_emb``)
PRIMITIVES = ("attention", "linear_cross_entropy", "rms_norm", "swiglu", "relu", "rope")
#: the environment variable of each primitive, read at import
IMPL_ENVS = {primitive: f"OJAS_{primitive.upper()}_IMPL" for primitive in PRIMITIVES}
#: the dtypes every Triton kernel of the project takes
KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
# The dtypes for which "auto" picks the kernel.  linear_cross_entropy: not float16, whose
# gradients the kernel rounds in the forward, before a GradScaler's scale arrives (its docstring).
_AUTO_DTYPES = dict.fromkeys(PRIMITIVES, KERNEL_DTYPES) | {"linear_cross_entropy": (torch.bfloat16, torch.float32)}
# The dtypes "triton" takes: rms_norm's kernel computes float64 in float64 too.
_TRITON_DTYPES = dict.fromkeys(PRIMITIVES, KERNEL_DTYPES) | {"rms_norm": KERNEL_DTYPES + (torch.float64,)}
# The primitives whose public function casts its inputs under autocast (cast_for_autocast) before
# deciding; a fast path that skips that cast is plain only where autocast would change nothing.
_AUTOCAST_CASTS = frozenset({"attention", "linear_cross_entropy"})


#: what a call has that the kernel lacks (:func:`kernel_runs`): nothing, the exception, or a function giving it
Refusal = Union[None, Exception, Callable[[], Optional[Exception]]]


def _settings_from(environ: Mapping[str, str]) -> dict[str, str]:
    """Each primitive's setting from ``environ`` (unset or empty: "auto"); ValueError naming the
    variable for a value outside :data:`IMPLS`."""
    settings = {}
    for primitive, name in IMPL_ENVS.items():
        value = environ.get(name) or "auto"
        if value not in IMPLS:
            raise ValueError(f"the environment variable {name} must be one of {IMPLS} (or unset), got {value!r}")
        settings[primitive] = value
    return settings


# What impl=None means now, per primitive: the environment at import, or the innermost use_impl
# block's.  Process-wide, as torch.backends' flags and torch.nn.attention.sdpa_kernel are (the
# autograd engine's threads, which recompute checkpointed forwards, see it too).
_settings = _settings_from(os.environ)
# TRITON_INTERPRET (Triton's interpreter runs the kernels on the CPU), read at the first call that
# asks for a kernel on a CPU tensor: Triton reads it when ojas_kernels is imported, at first use.
_interpret: Optional[bool] = None


def triton_interpreted() -> bool:
    """Whether Triton runs the kernels on the CPU: ``TRITON_INTERPRET`` 1 (true, on, yes), read
    once, at the first call that needs it."""
    global _interpret
    if _interpret is None:
        _interpret = os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")
    return _interpret


def get_impl(primitive: str) -> str:
    """What ``impl=None`` means for ``primitive`` now: its :class:`use_impl` block's setting, else
    its environment variable's at import, else "auto"."""
    setting = _settings.get(primitive)
    if setting is None:
        raise ValueError(f"primitive must be one of {PRIMITIVES}, got {primitive!r}")
    return setting


def resolve_impl(primitive: str, impl: Optional[str]) -> str:
    """``impl`` checked, or :func:`get_impl`'s setting when it is None."""
    setting = get_impl(primitive)
    if impl is None:
        return setting
    if impl not in IMPLS:
        raise ValueError(
            f"impl must be one of {IMPLS} (or None: the setting of use_impl or {IMPL_ENVS[primitive]}), got {impl!r}"
        )
    return impl


class use_impl(contextlib.ContextDecorator):
    """Within the block (or the decorated function), calls with ``impl=None`` run the given
    implementation, as ``torch.nn.attention.sdpa_kernel`` picks SDPA's backends::

        with use_impl(attention="reference", rms_norm="triton"):
            loss = model(batch).loss
            loss.backward()
        with use_impl("reference"):  # every primitive
            ...

    A positional ``impl`` sets every primitive; keyword arguments (by :data:`PRIMITIVES` name)
    set those, over the positional one.  An explicit ``impl=`` argument of a call still wins.  The
    previous settings come back on exit, nested blocks included.  The setting is process-wide (as
    sdpa_kernel's), not per thread.  A backward pass that recomputes a forward (activation
    checkpointing) decides again when it runs: keep it inside the block, as above.  Under
    ``torch.compile`` the setting is read when the graph is traced and guarded (a different
    setting recompiles); a block inside a compiled function is traced too, without a graph
    break."""

    def __init__(self, impl: Optional[str] = None, /, **impls: str) -> None:
        unknown = sorted(set(impls) - set(PRIMITIVES))
        if unknown:
            raise TypeError(f"use_impl() got unknown primitive(s) {unknown}; the primitives are {PRIMITIVES}")
        wanted = dict.fromkeys(PRIMITIVES, impl) if impl is not None else {}
        wanted.update(impls)
        for primitive, value in wanted.items():
            if value not in IMPLS:
                raise ValueError(f"use_impl: {primitive} must be one of {IMPLS}, got {value!r}")
        self._wanted = wanted
        self._saved: list[dict[str, str]] = []

    def __enter__(self) -> None:
        self._saved.append({p: _settings[p] for p in self._wanted})
        _settings.update(self._wanted)

    def __exit__(self, *exc: object) -> None:
        _settings.update(self._saved.pop())


def kernel_runs(primitive: str, impl: Optional[str], *tensors: Tensor, refused: Refusal = None) -> bool:
    """Whether ``primitive``, called with ``impl`` on ``tensors``, runs its Triton kernel (True) or
    its PyTorch reference (False): the one rule, which the public functions and the adapters'
    fast path (:func:`plain_kernel_call`) both follow.

    ``impl=None`` is :func:`get_impl`'s setting.  "reference": False.  "auto": True for CUDA
    tensors (the first one's device) whose dtypes are all ones the kernel takes by default
    (:data:`KERNEL_DTYPES`; linear_cross_entropy: bfloat16 and float32) and nothing refused.
    "triton": True, else an exception: TypeError for a dtype outside :data:`KERNEL_DTYPES`
    (rms_norm: float64 too), RuntimeError for a CPU tensor without Triton's interpreter
    (:func:`triton_interpreted`), then ``refused``.  ``refused`` is what this call has that the
    kernel lacks, as the exception "triton" raises for it: an exception, or a function returning
    one or None, called only where the kernel would otherwise run (so that finding out costs
    nothing elsewhere)."""
    impl = resolve_impl(primitive, impl)
    if impl == "reference":
        return False
    first = tensors[0]
    if impl == "auto":
        if not first.is_cuda:
            return False
        dtypes = _AUTO_DTYPES[primitive]
        for t in tensors:
            if t.dtype not in dtypes:
                return False
        return (refused() if callable(refused) else refused) is None
    dtypes = _TRITON_DTYPES[primitive]
    for t in tensors:
        if t.dtype not in dtypes:
            raise TypeError(
                f"impl='triton' takes tensors of {', '.join(str(d) for d in dtypes)}, got {t.dtype}; "
                "use impl='reference' for float64"
            )
    if not first.is_cuda and not triton_interpreted():
        raise RuntimeError(
            "impl='triton' needs CUDA tensors, or TRITON_INTERPRET=1 (set before the kernels are "
            "imported) to run the kernel on CPU"
        )
    refusal = refused() if callable(refused) else refused
    if refusal is not None:
        raise refusal
    return True


# The environment variables' names, as the adapters named the primitive before it took its own name.
_BY_ENV = {name: primitive for primitive, name in IMPL_ENVS.items()}


def plain_kernel_call(primitive: str, first: Tensor, *others: Tensor) -> bool:
    """Whether the public function of ``primitive`` (a :data:`PRIMITIVES` name; the name of its
    environment variable is accepted too) called with ``impl=None`` on these tensors would run its
    kernel on them unchanged: :func:`kernel_runs` says the kernel, the tensors share one dtype and
    one device (CUDA, or the CPU under Triton's interpreter), no torch.func transform is active,
    and autocast on their device type is off or at their dtype for a primitive that casts under
    autocast (attention, linear_cross_entropy).  The integration adapters then skip the general
    path's argument checks, which the kernel wrappers' own checks and the adapter's fixed layout
    (each adapter checks its shapes) make redundant; anything else takes the general path.  Never
    raises for a refusal: where ``impl="triton"`` would raise, the answer is False and the general
    path raises (the RoPE adapter's general path is Hugging Face's function: the reference).  (The
    host time of those checks is what a host-bound step of a small model spends:
    ``git show 343a89b:benchmarks/RESULTS.md``, "optimize_model on Hugging Face's LlamaForCausalLM".)"""
    primitive = _BY_ENV.get(primitive, primitive)
    setting = get_impl(primitive)  # a known name
    if setting == "reference":
        return False
    dtype = first.dtype
    if dtype not in KERNEL_DTYPES:
        return False
    if others:  # (written out: this runs several times per layer and step)
        device = first.device
        for t in others:
            if t.dtype != dtype or t.device != device:
                return False
    is_cuda = first.is_cuda
    if not (is_cuda or (first.is_cpu and triton_interpreted())):
        return False
    if torch._C._functorch.maybe_current_level() is not None:
        return False
    if primitive in _AUTOCAST_CASTS and autocast_dtype("cuda" if is_cuda else "cpu") not in (None, dtype):
        return False
    return kernel_runs(primitive, setting, first, *others)


def refuse_double_backward(name: str, alternative: str) -> None:
    """Raise in a backward pass run with ``create_graph=True`` (grad mode is on there).

    The primitives' backward passes are not differentiable: their gradients would enter the
    graph as constants and a second derivative through them would silently miss terms.
    ``torch.autograd.function.once_differentiable`` is not enough: it raises only when the
    incoming gradient requires grad, and the gradient of ``out.sum()`` does not."""
    if torch.is_grad_enabled():
        raise RuntimeError(
            f"{name} does not support double backward (create_graph=True through it, e.g. a "
            f"gradient penalty or gradgradcheck): its backward is not differentiable; use "
            f"{alternative} for higher-order gradients"
        )
