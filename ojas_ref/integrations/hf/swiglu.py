"""The Hugging Face gated-MLP (SwiGLU / GeGLU) adapter: each gated MLP of a known class
(:data:`SWIGLU_FORMS`) with a SiLU activation or torch's tanh-approximated gelu (Gemma's
``gelu_pytorch_tanh``; :func:`mlp_activation`), whose forward, probed once per class and
activation, is bit for bit ``down(act(gate) * up)``, is turned (``__class__`` swap) into a subclass
whose gate product is :func:`ojas_ref.functional.swiglu.swiglu` (gate and up saved, the activation
recomputed in backward; one kernel each way on CUDA)."""

from __future__ import annotations

import copy
import functools
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ojas_ref.functional.dispatch import plain_kernel_call
from ojas_ref.functional.swiglu import fused_swiglu, swiglu
from ojas_ref.integrations.hf.swap import swapped_class

__all__ = ["SWIGLU_FORMS", "is_gated_mlp", "mlp_activation", "ojas_swiglu_class", "swiglu_unsupported_reason"]

#: (module, class name) of Hugging Face's gated-MLP classes -> their layout (read from the
#: modeling files of transformers 5.x): "separate", ``down_proj(act_fn(gate_proj(x)) *
#: up_proj(x))`` (Gemma 2's and Gemma 3's too, with ``config.hidden_activation``); "fused"
#: (Phi-3), ``gate, up = gate_up_proj(x).chunk(2, -1)`` then ``down_proj(up * activation_fn(gate))``.
SWIGLU_FORMS: dict[tuple[str, str], str] = {
    **{
        (f"transformers.models.{m}.modeling_{m}", f"{c}MLP"): "separate"
        for m, c in (
            ("llama", "Llama"),
            ("mistral", "Mistral"),
            ("qwen2", "Qwen2"),
            ("qwen3", "Qwen3"),
            ("gemma2", "Gemma2"),
            ("gemma3", "Gemma3"),
        )
    },
    ("transformers.models.phi3.modeling_phi3", "Phi3MLP"): "fused",
}

_PROBED_MLP: dict[tuple[type, str], Optional[str]] = {}


def _act_attr(module: nn.Module) -> str:
    """The name of a gated MLP's activation module: ``act_fn``, or Phi-3's ``activation_fn``."""
    return "act_fn" if hasattr(module, "act_fn") else "activation_fn"


def mlp_activation(module: nn.Module) -> Optional[str]:
    """The :data:`ojas_ref.functional.swiglu.ACTIVATIONS` name of a gated MLP's activation module, or
    None: "silu" for ``nn.SiLU`` and Hugging Face's ``SiLUActivation``; "gelu_tanh" for
    ``nn.GELU(approximate="tanh")`` and Hugging Face's ``GELUTanh`` (``gelu_pytorch_tanh``) when it
    calls ``F.gelu(approximate="tanh")`` (not its Python formula, which rounds otherwise)."""
    act = getattr(module, _act_attr(module), None)
    if isinstance(act, nn.SiLU) or type(act).__name__ == "SiLUActivation":
        return "silu"
    if isinstance(act, nn.GELU):
        return "gelu_tanh" if act.approximate == "tanh" else None
    fn = getattr(act, "act", None)
    if (
        type(act).__name__ == "GELUTanh"
        and isinstance(fn, functools.partial)
        and fn.func is F.gelu
        and not fn.args
        and fn.keywords == {"approximate": "tanh"}
    ):
        return "gelu_tanh"
    return None


def _probe_mlp(module: nn.Module, form: str, activation: str) -> Optional[str]:
    """Why the class of ``module`` does not compute ``down(act(gate) * up)`` in its layout with
    ``module``'s activation, or None: a fresh instance of a small copy of its config, with a
    copy of that activation module, against :func:`_swiglu_mlp_forward`, bit for bit, in float32
    and bfloat16, on the CPU."""
    cls = type(module)
    config = getattr(module, "config", None)
    if config is None:
        return f"{cls.__name__} has no config to build a small copy from"
    small = copy.copy(config)
    small.hidden_size, small.intermediate_size = 16, 24
    g = torch.Generator().manual_seed(0)
    try:
        probe = cls(small)
        setattr(probe, _act_attr(module), copy.deepcopy(getattr(module, _act_attr(module))))
    except Exception as e:  # noqa: BLE001 - any failure means: not the checked class
        return f"{cls.__name__}(config) cannot be built at a small size to check its formula ({e})"
    for dtype in (torch.float32, torch.bfloat16):
        probe = probe.to(dtype)
        with torch.no_grad():
            for p in probe.parameters():
                p.copy_(torch.randn(p.shape, generator=g))
            x = (torch.randn(3, 16, generator=g) * 3).to(dtype)
            if not torch.equal(probe(x), _swiglu_mlp_forward(probe, x, form, activation, impl="reference")):
                return (
                    f"{cls.__name__}'s forward differs from down({activation}(gate) * up) in {dtype}: "
                    "this transformers version changed it"
                )
    return None


def is_gated_mlp(module: nn.Module) -> bool:
    """Whether ``module`` is a Hugging Face gated MLP: a ``*MLP`` class with a down projection and
    a gate (``gate_proj`` and ``up_proj``, or Phi-3's fused ``gate_up_proj``)."""
    return (
        type(module).__name__.endswith("MLP")
        and hasattr(module, "down_proj")
        and (hasattr(module, "gate_proj") and hasattr(module, "up_proj") or hasattr(module, "gate_up_proj"))
    )


def swiglu_unsupported_reason(module: nn.Module) -> Optional[str]:
    """Why ``module`` (a gated MLP, :func:`is_gated_mlp`) is left alone, or None."""
    cls = type(module)
    activation = mlp_activation(module)
    if activation is None:
        act = getattr(module, _act_attr(module), None)
        detail = f"approximate={act.approximate!r}" if isinstance(act, nn.GELU) else None
        detail = detail or ("its Python formula" if type(act).__name__ == "GELUTanh" else None)
        return (
            f"activation {type(act).__name__}{f' ({detail})' if detail else ''}: the fused gate product "
            "takes SiLU (SwiGLU, Ojas.SwiGLU.Backward.swiglu_backward_eq_vjp) and torch's tanh-approximated "
            "gelu (GeGLU, gelu_pytorch_tanh, Ojas.SwiGLU.Backward.geglu_tanh_backward_eq_vjp) only"
        )
    form = SWIGLU_FORMS.get((cls.__module__, cls.__name__))
    if form is None:
        return f"{cls.__module__}.{cls.__name__} is not among the checked gated-MLP classes"
    if (cls, activation) not in _PROBED_MLP:
        _PROBED_MLP[cls, activation] = _probe_mlp(module, form, activation)
    return _PROBED_MLP[cls, activation]


def _swiglu_mlp_forward(module: nn.Module, x: Tensor, form: str, activation: str, impl: Optional[str] = None) -> Tensor:
    if form == "separate":
        gate, up = module.gate_proj(x), module.up_proj(x)
    else:
        gate, up = module.gate_up_proj(x).chunk(2, dim=-1)
    if impl is None and plain_kernel_call("swiglu", gate, up) and gate.shape == up.shape:
        return module.down_proj(fused_swiglu(gate, up, activation))  # what swiglu would run
    return module.down_proj(swiglu(gate, up, activation=activation, impl=impl))


class _OjasSwiGLU:
    """Mixin of the swapped MLP classes: ``act(gate) * up`` by :func:`ojas_ref.functional.swiglu.swiglu`."""

    _ojas_form: str

    def forward(self, x: Tensor) -> Tensor:
        """The module's formula with the gate product fused, the activation recomputed in backward
        (Ojas.SwiGLU.Backward.swiglu_backward_eq_vjp for silu,
        Ojas.SwiGLU.Backward.geglu_tanh_backward_eq_vjp for gelu_tanh); the activation is read
        at each call (:func:`mlp_activation`): one replaced since by another kind runs Hugging
        Face's own forward."""
        activation = mlp_activation(self)
        if activation is None:
            return super().forward(x)
        return _swiglu_mlp_forward(self, x, self._ojas_form, activation)


def ojas_swiglu_class(cls: type) -> type:
    """The subclass of a checked Hugging Face gated-MLP class whose gate product is :func:`swiglu`."""
    return swapped_class(cls, _OjasSwiGLU, dict(_ojas_form=SWIGLU_FORMS[(cls.__module__, cls.__name__)]))
