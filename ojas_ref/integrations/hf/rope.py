"""The Hugging Face rotary-embedding (RoPE) adapter: a modeling module's ``apply_rotary_pos_emb``
whose formula is Llama's rotate-half one (probed once per module, :func:`rope_unsupported_reason`)
is replaced, while an optimized model uses it (:class:`RopeUse`), by a function that runs the fused
kernel of :mod:`ojas_ref.functional.rope` inside the attention modules of optimized models
(:func:`scope_rope`) and Hugging Face's own function everywhere else."""

from __future__ import annotations

import functools
import importlib
import sys
import threading
from typing import Any, Callable, Optional

import torch
from torch import Tensor, nn

from ojas_ref.functional.dispatch import plain_kernel_call
from ojas_ref.functional.rope import fused_rope, rope_reference

__all__ = ["ROPE_MODULES", "RopeUse", "patch_rope", "rope_unsupported_reason", "scope_rope", "unpatch_rope"]

#: modeling modules whose ``apply_rotary_pos_emb`` is Llama's rotate-half formula (checked by
#: :func:`_probe_rope` before it is replaced)
ROPE_MODULES = tuple(
    f"transformers.models.{m}.modeling_{m}" for m in ("llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3")
)

# modeling module -> (Hugging Face's function, the optimized models using the replacement)
_ROPE_PATCHED: dict[str, tuple[Callable[..., Any], int]] = {}
_PROBED_ROPE: dict[str, Optional[str]] = {}
# .depth: how many attention modules of optimized models this thread is inside (their forward,
# or its recomputation by checkpointing): the replacement runs the kernel only there, so that
# other models of the family in the process compute with Hugging Face's own function
_ROPE_SCOPE = threading.local()


def _enter_rope_scope(module: nn.Module, args: tuple) -> None:
    _ROPE_SCOPE.depth = getattr(_ROPE_SCOPE, "depth", 0) + 1


def _leave_rope_scope(module: nn.Module, args: tuple, output: Any) -> None:
    _ROPE_SCOPE.depth = max(0, getattr(_ROPE_SCOPE, "depth", 0) - 1)  # also after a raising pre-hook


def scope_rope(attention_modules: list[nn.Module]) -> list[Any]:
    """Hooks that make the replaced ``apply_rotary_pos_emb`` use the kernel inside these modules
    only (left even when the forward raises); returns their handles."""
    handles = []
    for m in attention_modules:
        handles.append(m.register_forward_pre_hook(_enter_rope_scope))
        handles.append(m.register_forward_hook(_leave_rope_scope, always_call=True))
    return handles


def _probe_rope(original: Callable[..., Any]) -> Optional[str]:
    """Why ``original`` is not the rotate-half formula of :func:`rope_reference`, or None: random
    inputs (GQA, batch-broadcast cos/sin), forward and gradients, bit for bit, float32 and
    bfloat16, on the CPU."""
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        q, k = (torch.randn(2, h, 5, 8, generator=g).to(dtype).requires_grad_() for h in (4, 2))
        cos, sin = (torch.randn(1, 5, 8, generator=g).to(dtype) for _ in range(2))
        try:
            got, want = original(q, k, cos, sin), rope_reference(q, k, cos, sin)
        except Exception as e:  # noqa: BLE001 - any failure means: not the checked formula
            return f"its apply_rotary_pos_emb cannot be called as Llama's ({e})"
        ones = [torch.ones_like(t) for t in want]
        if not all(torch.equal(a, b) for a, b in zip(got, want)) or not all(
            torch.equal(a, b)
            for a, b in zip(torch.autograd.grad(got, (q, k), ones), torch.autograd.grad(want, (q, k), ones))
        ):
            return f"its apply_rotary_pos_emb differs from Llama's rotate-half formula in {dtype}"
    return None


def _ojas_rope(original: Callable[..., Any]) -> Callable[..., Any]:
    """``apply_rotary_pos_emb`` by the fused kernel inside the attention modules of optimized
    models (:func:`scope_rope`) in the plain case (4-D q and k, cos/sin [B or 1, S, E] not
    requiring grad, unsqueeze_dim 1, one kernel dtype and device), Hugging Face's ``original``
    otherwise: the same values and gradients either way."""

    @functools.wraps(original, updated=())  # (original may be a kernels nn.Module: none of its __dict__)
    def apply_rotary_pos_emb(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, unsqueeze_dim: int = 1):
        if (
            getattr(_ROPE_SCOPE, "depth", 0) > 0
            and unsqueeze_dim == 1
            and q.dim() == 4
            and k.dim() == 4
            and cos.dim() == 3
            and sin.shape == cos.shape
            and not (cos.requires_grad or sin.requires_grad)
            and plain_kernel_call("rope", q, k, cos, sin)
            and q.shape[-1] % 2 == 0
            and q.shape[-1] == k.shape[-1] == cos.shape[-1]
            and q.shape[2] == k.shape[2] == cos.shape[1]
            and cos.shape[0] in (1, q.shape[0])
            and q.shape[0] == k.shape[0]
        ):
            return fused_rope(q, k, cos, sin)
        return original(q, k, cos, sin, unsqueeze_dim)

    apply_rotary_pos_emb._ojas_original = original
    return apply_rotary_pos_emb


def rope_unsupported_reason(model: nn.Module) -> tuple[Optional[str], str]:
    """(why the rotary embedding of ``model``'s family is left alone, or None; its modeling module)."""
    module_name = type(model).__module__
    if module_name not in ROPE_MODULES:
        return f"{module_name} is not among the modules with Llama's checked rotary formula", module_name
    if module_name not in _PROBED_ROPE:
        module = sys.modules[module_name]
        fn = getattr(module, "apply_rotary_pos_emb", None)
        original = getattr(fn, "_ojas_original", fn)
        _PROBED_ROPE[module_name] = "no apply_rotary_pos_emb" if original is None else _probe_rope(original)
    return _PROBED_ROPE[module_name], module_name


def _replacement(original: Callable[..., Any]) -> Callable[..., Any]:
    """The replacement of Hugging Face's ``apply_rotary_pos_emb`` (:func:`_ojas_rope`), of the same
    type as ``original``: a function, or, where Hugging Face's ``kernels`` package made the function
    an ``nn.Module`` (``use_kernel_forward_from_hub``), a fresh instance of that class with the
    replacement as its forward. The type matters: ``kernels`` rebuilds the wrappers that each
    attention module holds, when a model is unpickled, as ``type(module.apply_rotary_pos_emb)()``."""
    replaced = _ojas_rope(original)
    if not isinstance(original, nn.Module):
        return replaced
    module = type(original)()
    module.forward = replaced
    module.__dict__["_ojas_original"] = original  # not a submodule
    return module


def patch_rope(module_name: str) -> None:
    """Replace ``module_name.apply_rotary_pos_emb`` (the modeling module's attention layers look
    the function up at each call) by :func:`_replacement`; counted per :class:`RopeUse`."""
    module = importlib.import_module(module_name)
    original, users = _ROPE_PATCHED.get(module_name, (module.apply_rotary_pos_emb, 0))
    if users == 0:
        module.apply_rotary_pos_emb = _replacement(original)
    _ROPE_PATCHED[module_name] = (original, users + 1)


def unpatch_rope(module_name: str) -> None:
    """Undo one :func:`patch_rope`; Hugging Face's function is back when no model uses it."""
    if module_name not in _ROPE_PATCHED:
        raise RuntimeError(
            f"unpatch_rope: {module_name}.apply_rotary_pos_emb is not replaced (more releases than uses)"
        )
    original, users = _ROPE_PATCHED[module_name]
    if users == 1:
        sys.modules[module_name].apply_rotary_pos_emb = original
        del _ROPE_PATCHED[module_name]
    else:
        _ROPE_PATCHED[module_name] = (original, users - 1)


class RopeUse:
    """One optimized model's use of the replaced ``apply_rotary_pos_emb`` of a modeling module:
    :func:`patch_rope` when made, :func:`unpatch_rope` at :meth:`release`. A copy of the
    model (``copy.deepcopy``, pickle, ``torch.save``) makes a use of its own, so reverting one copy
    leaves the other optimized, and a model unpickled in a fresh process is optimized there too."""

    def __init__(self, module_name: str) -> None:
        patch_rope(module_name)
        self.module_name = module_name
        self.held = True

    def release(self) -> None:
        """Give the use back (once; a second call does nothing)."""
        if self.held:
            self.held = False
            unpatch_rope(self.module_name)

    def __reduce__(self) -> tuple[type, tuple[str]]:
        if not self.held:
            raise RuntimeError("a released RopeUse is not copied (its model was reverted)")
        return type(self), (self.module_name,)
