"""The Hugging Face RMSNorm adapter: each module of a known Hugging Face RMSNorm class
(:data:`RMS_NORM_FORMS`) whose forward, probed once per class, gives bit for bit the formula of
:mod:`ojas_ref.functional.rms_norm` is turned (``__class__`` swap, same parameters and
``state_dict``) into a subclass that computes :func:`ojas_ref.functional.rms_norm.rms_norm` (the
fused Triton kernel on CUDA)."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn

from ojas_ref.functional.dispatch import plain_kernel_call
from ojas_ref.functional.rms_norm import fused_rms_norm, rms_norm, rms_norm_reference
from ojas_ref.integrations.hf.swap import swapped_class

__all__ = ["RMS_NORM_FORMS", "ojas_rms_norm_class", "rms_norm_unsupported_reason"]

#: (module, class name) of Hugging Face's RMSNorm classes -> (eps attribute, cast, offset) of
#: their formula (read from the modeling files of transformers 5.x): Llama's copies round the
#: normalised value to the input dtype, then multiply by the weight; Gemma's multiply by
#: ``1 + weight`` in float32 and round once. Qwen3's and Gemma 3's q_norm / k_norm (over the
#: head dimension) are of the same classes.
RMS_NORM_FORMS: dict[tuple[str, str], tuple[str, str, float]] = {
    **{
        (f"transformers.models.{m}.modeling_{m}", f"{c}RMSNorm"): ("variance_epsilon", "before_weight", 0.0)
        for m, c in (
            ("llama", "Llama"),
            ("mistral", "Mistral"),
            ("qwen2", "Qwen2"),
            ("qwen3", "Qwen3"),
            ("phi3", "Phi3"),
        )
    },
    **{
        (f"transformers.models.{m}.modeling_{m}", f"{c}RMSNorm"): ("eps", "after_weight", 1.0)
        for m, c in (("gemma2", "Gemma2"), ("gemma3", "Gemma3"))
    },
}

_PROBED: dict[type, Optional[str]] = {}


def _probe(cls: type, eps_attr: str, cast: str, offset: float) -> Optional[str]:
    """Why ``cls``'s forward is not the formula of ``(cast, offset)``, or None: a fresh
    instance with a random weight against :func:`rms_norm_reference`, bit for bit, in
    float32 and bfloat16 (where the two casts differ), on the CPU."""
    g = torch.Generator().manual_seed(0)
    try:
        module = cls(24, eps=1e-5)
    except TypeError as e:
        return f"{cls.__name__}(hidden_size, eps=...) cannot be constructed to check its formula ({e})"
    if not isinstance(getattr(module, "weight", None), nn.Parameter) or getattr(module, eps_attr, None) != 1e-5:
        return f"{cls.__name__} has no weight Parameter or no {eps_attr!r} attribute"
    for dtype in (torch.float32, torch.bfloat16):
        module = module.to(dtype)
        with torch.no_grad():
            module.weight.copy_(torch.randn(24, generator=g))
            x = (torch.randn(5, 24, generator=g) * 3).to(dtype)
            if not torch.equal(module(x), rms_norm_reference(x, module.weight, 1e-5, (-1,), offset, cast)):
                return (
                    f"{cls.__name__}'s forward differs from the checked formula (cast {cast}, offset {offset}) "
                    f"in {dtype}: this transformers version changed it"
                )
    return None


def rms_norm_unsupported_reason(module: nn.Module) -> Optional[str]:
    """Why ``module`` (a module whose class name ends in RMSNorm) is left alone, or None."""
    cls = type(module)
    form = RMS_NORM_FORMS.get((cls.__module__, cls.__name__))
    if form is None:
        return f"{cls.__module__}.{cls.__name__} is not among the checked RMSNorm classes"
    if cls not in _PROBED:
        _PROBED[cls] = _probe(cls, *form)
    if _PROBED[cls] is not None:
        return _PROBED[cls]
    if module.weight.dim() != 1:
        return f"weight of shape {tuple(module.weight.shape)} (expected 1-D)"
    return None


_MAX_HIDDEN: Optional[int] = None


def _max_hidden() -> int:
    """The kernel's ``MAX_HIDDEN``, imported at the first call (the kernels need Triton), then kept
    (a module global, not functools.cache, whose wrapper torch.compile warns about)."""
    global _MAX_HIDDEN
    if _MAX_HIDDEN is None:
        from ojas_kernels.rms_norm import MAX_HIDDEN

        _MAX_HIDDEN = MAX_HIDDEN
    return _MAX_HIDDEN


class _OjasRMSNorm:
    """Mixin of the swapped RMSNorm classes: the Hugging Face module's forward by :func:`rms_norm`."""

    _ojas_eps_attr: str
    _ojas_cast: str
    _ojas_offset: float

    def forward(self, hidden_states: Tensor) -> Tensor:
        """Hugging Face's formula (Ojas.RMSNorm.Backward.rms_norm_backward_eq_vjp, or with weight
        1 + w Ojas.RMSNorm.Backward.rms_norm_offset_backward_eq_vjp, for the kernel's backward).
        float64 inputs are rounded to float32 first, as Hugging Face's ``.to(torch.float32)``."""
        x, weight = hidden_states, self.weight
        eps = getattr(self, self._ojas_eps_attr)
        if (
            plain_kernel_call("rms_norm", x, weight)
            and weight.dim() == 1
            and 0 < x.shape[-1] == weight.shape[0]
            and type(eps) is float
            and eps >= 0
        ):
            if x.shape[-1] <= _max_hidden():  # what rms_norm would run (cast and offset checked at the swap)
                return fused_rms_norm(x, weight, eps, self._ojas_offset, self._ojas_cast == "after_weight")
        if x.dtype == torch.float64:
            x = x.to(torch.float32)
            if self._ojas_cast == "before_weight":  # the product stays float64, as Hugging Face's
                weight = weight.to(torch.float64)
        y = rms_norm(x, weight.shape, weight, eps, offset=self._ojas_offset, cast=self._ojas_cast)
        return y.to(hidden_states.dtype) if self._ojas_cast == "after_weight" else y


def ojas_rms_norm_class(cls: type) -> type:
    """The subclass of a checked Hugging Face RMSNorm class computed by :func:`rms_norm`."""
    eps_attr, cast, offset = RMS_NORM_FORMS[(cls.__module__, cls.__name__)]
    return swapped_class(cls, _OjasRMSNorm, dict(_ojas_eps_attr=eps_attr, _ojas_cast=cast, _ojas_offset=offset))
