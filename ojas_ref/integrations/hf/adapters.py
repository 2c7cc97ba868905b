"""Hugging Face adapters of :func:`ojas_ref.optimize_model`, through the library's public extension points.

* Attention: :func:`ojas_attention_forward` is registered as ``"ojas"`` in
  ``transformers.AttentionInterface``, with Hugging Face's own ``sdpa_mask`` registered
  under the same name in ``AttentionMaskInterface`` (without it the model builds no mask
  and left padding is silently ignored); the model is switched with
  ``set_attn_implementation("ojas")``.
* Loss: :class:`CausalLMLossHead` hooks the causal LM (forward pre- and post-hooks) and
  its output embedding at each training forward (a forward pre-hook on ``lm_head``, or on the
  module that replaced it since: ``resize_token_embeddings``, PEFT's LoRA layer) and sets the
  model's ``loss_function``. In
  training mode with ``labels``, the head receives an empty sequence (so the model's
  forward allocates no ``[tokens, vocabulary]`` logits), the loss is
  :func:`ojas_ref.linear_cross_entropy` of the hidden states and the head's weight with
  Hugging Face's semantics (labels shifted left, ``ignore_index``, mean over the kept
  tokens or sum over ``num_items_in_batch``), and the output's ``logits`` is None, as
  in Liger-Kernel. Otherwise the model runs unchanged.
* RMSNorm: each module of a known Hugging Face RMSNorm class (:data:`RMS_NORM_FORMS`) whose
  forward, probed once per class, gives bit for bit the formula of :mod:`ojas_ref.functional.rms_norm`
  is turned (``__class__`` swap, same parameters and ``state_dict``) into a subclass that
  computes :func:`ojas_ref.functional.rms_norm.rms_norm` (the fused Triton kernel on CUDA).
* Split checkpointing: :class:`SplitCheckpoint` is the ``gradient_checkpointing_func`` of each
  decoder layer of a checked layout (:data:`SPLIT_LAYERS`); the layer's own forward runs, with
  its two norms passing their input through and its ``self_attn`` and ``mlp`` each computing
  ``module(norm(x))`` inside a checkpoint of its own (``__class__`` swaps of the four modules).
* SwiGLU / GeGLU: each gated MLP of a known class (:data:`SWIGLU_FORMS`) with a SiLU activation
  or torch's tanh-approximated gelu (Gemma's ``gelu_pytorch_tanh``; :func:`mlp_activation`),
  whose forward, probed once per class and activation, is bit for bit ``down(act(gate) * up)``,
  is turned (``__class__`` swap) into a subclass whose gate product is
  :func:`ojas_ref.functional.swiglu.swiglu` (gate and up saved, the activation recomputed in
  backward; one kernel each way on CUDA).

No modeling code is copied: the models' own forward passes run.
"""

from __future__ import annotations

import copy
import copyreg
import functools
import importlib
import inspect
import sys
import threading
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ojas_ref.functional.attention import IMPL_ENV as ATTENTION_IMPL_ENV, attention
from ojas_ref.functional.dispatch import plain_kernel_call
from ojas_ref.functional.linear_cross_entropy import linear_cross_entropy
from ojas_ref.functional.rms_norm import IMPL_ENV as RMS_NORM_IMPL_ENV, fused_rms_norm, rms_norm, rms_norm_reference
from ojas_ref.functional.rope import IMPL_ENV as ROTARY_IMPL_ENV, fused_rotary, rotary_reference
from ojas_ref.functional.swiglu import IMPL_ENV as SWIGLU_IMPL_ENV, fused_swiglu, swiglu

__all__ = ["ATTENTION_NAME", "RMS_NORM_FORMS", "SPLIT_LAYERS", "SWIGLU_FORMS", "CausalLMLossHead", "FamilySupport",
           "SplitCheckpoint", "family_support", "split_layers", "split_unsupported_reason", "split_swap",
           "is_gated_mlp", "mlp_activation", "ojas_attention_forward", "ojas_rms_norm_class", "ojas_swiglu_class",
           "register",
           "rms_norm_unsupported_reason", "swiglu_unsupported_reason"]

#: The name under which the attention function and its mask are registered.
ATTENTION_NAME = "ojas"

#: Model types tested in tests/test_optimize_huggingface.py (config.model_type).
SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text", "phi3", "gpt2")


def register() -> None:
    """Register ``"ojas"`` in Hugging Face's attention-function and mask registries (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTENTION_NAME, ojas_attention_forward)
    AttentionMaskInterface.register(ATTENTION_NAME, sdpa_mask)


# --------------------------------------------------------------------------
# Attention
# --------------------------------------------------------------------------

# (id(mask), window) -> (weak reference to mask, its version, within): whether a bool mask
# lies inside the causal pattern (and the window). Hugging Face builds one mask per layer
# type per forward and hands the same tensor to every layer, so the check runs once per
# forward and mask, not once per layer.
_MASK_STRUCTURE: dict[tuple[int, Optional[int]], tuple[weakref.ref, int, bool]] = {}
_MASK_CACHE_SIZE = 8


def _within_causal(mask: Tensor, window: Optional[int]) -> bool:
    """Whether every key the bool mask keeps has j <= i (and i - j < window): then the mask
    AND the causal (and window) pattern is the mask itself, and passing ``is_causal`` lets
    the kernel skip the tiles above the diagonal (Ojas.Attention.Mask.stream_row_masked_keys)."""
    cached = _MASK_STRUCTURE.get((id(mask), window))
    if cached is not None and cached[0]() is mask and cached[1] == mask._version:
        return cached[2]
    sq, sk = mask.shape[-2], mask.shape[-1]
    i = torch.arange(sq, device=mask.device).unsqueeze(1)
    j = torch.arange(sk, device=mask.device).unsqueeze(0)
    allowed = j <= i
    if window is not None:
        allowed = allowed & (i - j < window)
    within = not bool((mask & ~allowed).any())
    if len(_MASK_STRUCTURE) >= _MASK_CACHE_SIZE:
        _MASK_STRUCTURE.clear()
    _MASK_STRUCTURE[(id(mask), window)] = (weakref.ref(mask), mask._version, within)
    return within


def ojas_attention_forward(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Optional[Tensor],
    dropout: float = 0.0,
    scaling: Optional[float] = None,
    sliding_window: Optional[int] = None,
    softcap: Optional[float] = None,
    is_causal: Optional[bool] = None,
    **kwargs: Any,
) -> tuple[Tensor, None]:
    """Hugging Face attention function (``AttentionInterface``) computed by :func:`ojas_ref.attention`.

    query [B, Hq, Sq, E], key/value [B, Hkv, Sk, E]; returns ([B, Sq, Hq, E], None), as
    Hugging Face's ``sdpa_attention_forward``, whose masking rules it follows: without a
    mask the attention is causal when the module is causal and Sq > 1 (top-left aligned);
    a mask (bool, True = attend, from ``sdpa_mask``; or additive float) is applied as is.
    A bool mask inside the causal pattern (checked once per mask) is also given as
    ``is_causal`` (and ``sliding_window`` as ``window``) so the kernel skips masked tiles;
    the conjunction changes nothing (Ojas.Attention.Mask.visibility_true_iff).

    Theorems: those of :func:`ojas_ref.attention` (Ojas.Attention.StreamCorrect.attention_forward_correct,
    Ojas.Attention.Mask.stream_row_masked_keys, Ojas.Attention.BackwardCorrect.attention_backward_dQ_is_derive).
    Not covered by a theorem: the mask Hugging Face builds, the head layout and GQA
    (key/value head h // (Hq // Hkv) serves query head h, as ``repeat_kv``).
    ``dropout`` is SDPA's ``dropout_p`` (Hugging Face passes 0.0 outside training): the
    probabilities are dropped by a counter-based mask recomputed in the backward, which no
    theorem covers beyond the per-row statements :func:`ojas_ref.attention` names.
    Refused (NotImplementedError): attention soft-capping, a position bias, sinks.
    """
    if softcap is not None:
        raise NotImplementedError(f"ojas attention has no logit soft-capping (softcap={softcap}); "
                                  "optimize_model leaves such models' attention alone")
    for name in ("position_bias", "s_aux", "sinks"):
        if kwargs.get(name) is not None:
            raise NotImplementedError(f"ojas attention does not take {name}")
    causal_module = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    sq, sk = query.shape[2], key.shape[2]
    window = None
    if attention_mask is None:
        causal = bool(causal_module) and sq > 1
        if causal and sk > sq:  # prefill of an empty static cache, as sdpa_attention_forward
            key, value = key[:, :, :sq], value[:, :, :sq]
    else:
        causal = False
        if (attention_mask.dtype == torch.bool and causal_module and sq == sk > 1
                and not torch.compiler.is_compiling()):
            if sliding_window is not None and _within_causal(attention_mask, sliding_window):
                causal, window = True, sliding_window
            else:
                causal = _within_causal(attention_mask, None)
    if (plain_kernel_call(ATTENTION_IMPL_ENV, query, key, value)
            and (attention_mask is None or not attention_mask.requires_grad)):
        # what ``attention`` would run: the kernel wrapper checks the shapes and the mask, and
        # writes the output in the [B, S, H, E] layout returned (no copy)
        from ojas_kernels.attention import flash_attention

        out = flash_attention(query, key, value, is_causal=causal, scale=scaling, window=window,
                              attn_mask=attention_mask, seq_major=True, dropout_p=dropout)
        return out.transpose(1, 2), None
    out = attention(query, key, value, attn_mask=attention_mask, dropout_p=dropout, is_causal=causal,
                    scale=scaling, enable_gqa=query.shape[1] != key.shape[1], window=window)
    return out.transpose(1, 2).contiguous(), None


# --------------------------------------------------------------------------
# Which parts of a model can be changed
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class FamilySupport:
    """What :func:`ojas_ref.optimize_model` can change in a Hugging Face model, and why not otherwise."""

    attention: Optional[str]      # None if supported, else the reason it is left alone
    cross_entropy: Optional[str]
    softcap: Optional[float]      # the final-logit soft cap the loss applies
    rms_norm: Optional[str] = None
    swiglu: Optional[str] = None


def _text_config(model: nn.Module) -> Any:
    config = model.config
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def family_support(model: nn.Module) -> FamilySupport:
    """Check a ``PreTrainedModel`` against what the adapters support (no change made)."""
    config = _text_config(model)
    model_type = getattr(config, "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        reason = (f"model type {model_type!r} is not among the tested families {SUPPORTED_MODEL_TYPES}")
        return FamilySupport(reason, reason, None, reason, reason)
    attention_reason = None
    if getattr(config, "attn_logit_softcapping", None) is not None:
        attention_reason = (f"attention logit soft-capping {config.attn_logit_softcapping} "
                            "(not in the ojas attention kernel)")
    elif getattr(config, "add_cross_attention", False):
        attention_reason = "cross-attention layers (not tested)"
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    ce_reason = head_unsupported_reason(head)
    if ce_reason is None and not hasattr(type(model), "loss_function"):
        ce_reason = "the model has no loss_function"
    softcap = getattr(config, "final_logit_softcapping", None)
    return FamilySupport(attention_reason, ce_reason, None if softcap is None else float(softcap))


# --------------------------------------------------------------------------
# The loss
# --------------------------------------------------------------------------

def _lora_linear_class() -> Optional[type]:
    """PEFT's LoRA ``Linear`` layer class, or None when PEFT is not imported (then no layer is one)."""
    return getattr(sys.modules.get("peft.tuners.lora.layer"), "Linear", None)


def head_unsupported_reason(head: Optional[nn.Module]) -> Optional[str]:
    """Why the loss cannot be computed from the weight of the output embedding ``head`` without
    logits, or None: a ``torch.nn.Linear``, or PEFT's LoRA ``Linear`` around one (``lm_head`` in
    ``target_modules``: the weight plus the active adapters' deltas, ``get_delta_weight``) with
    plain LoRA adapters (no DoRA or other variant) without LoRA dropout."""
    if type(head) is nn.Linear:
        return None
    what = "absent" if head is None else f"{type(head).__module__}.{type(head).__qualname__}"
    if head is None or type(head) is not _lora_linear_class():
        return f"the output embedding is {what}, not a torch.nn.Linear or PEFT's LoRA Linear around one"
    if type(head.base_layer) is not nn.Linear:
        return f"the output embedding is a LoRA layer around {type(head.base_layer).__name__}, not a torch.nn.Linear"
    if head.disable_adapters and head.merged:
        return "the output embedding's LoRA adapters are merged and disabled (PEFT unmerges them in the forward)"
    if head.disable_adapters or head.merged:
        return None
    for name in head.active_adapters:
        if name not in head.lora_A:
            continue
        if name in head.lora_variant:
            return (f"the output embedding's LoRA adapter {name!r} is a {type(head.lora_variant[name]).__name__} "
                    "(DoRA or another variant), not plain LoRA")
        dropout = head.lora_dropout[name]
        if isinstance(dropout, nn.Dropout) and dropout.p > 0:
            return (f"the output embedding's LoRA adapter {name!r} has lora_dropout={dropout.p}: the dropout of "
                    "the hidden states has no weight form (set lora_dropout=0, or leave lm_head out of "
                    "target_modules)")
    return None


def head_weight_and_bias(head: nn.Module) -> tuple[Tensor, Optional[Tensor]]:
    """The weight and bias that ``head`` (one that :func:`head_unsupported_reason` clears) multiplies
    its input by: a LoRA layer's base weight plus ``get_delta_weight`` of each active adapter,
    cast to the weight's dtype (a [vocabulary, hidden] tensor made for the step, which the
    gradients of the adapters flow through), unless the adapters are merged or disabled."""
    if type(head) is nn.Linear:
        return head.weight, head.bias
    base = head.base_layer
    weight = base.weight
    if not (head.disable_adapters or head.merged):
        for name in head.active_adapters:
            if name in head.lora_A:
                weight = weight + head.get_delta_weight(name).to(weight.dtype)
    return weight, base.bias


class CausalLMLossHead:
    """The hooks and loss function that compute a causal LM's training loss without logits.

    Installed by :meth:`install`, removed by :meth:`remove`. The loss is
    :func:`ojas_ref.linear_cross_entropy` (Ojas.CrossEntropy.ChunkedLse.chunked_lse_chunk,
    Ojas.CrossEntropy.Reduction.ce_loss_correct, Ojas.CrossEntropy.Gradient.ce_backward_correct);
    the label shift and the ``num_items_in_batch`` division are Hugging Face's
    ``ForCausalLMLoss`` and no theorem's. Differences: "mean" over a batch whose tokens
    are all ignored gives 0, not NaN.

    The head is the model's output embedding at each training forward, not the one at
    :meth:`install`: after ``resize_token_embeddings``, ``set_output_embeddings`` or a PEFT adapter
    put on ``lm_head`` the hook moves to the new module; one that :func:`head_unsupported_reason`
    does not clear raises ``NotImplementedError`` before the forward runs.
    """

    def __init__(self, model: nn.Module, softcap: Optional[float]) -> None:
        self.head: nn.Module = model.get_output_embeddings()  # the module whose pre-hook is installed
        self.softcap = softcap
        self.original_loss = model.loss_function
        self.had_loss_attr = "_loss_function" in model.__dict__
        self._signature = inspect.signature(type(model).forward)
        self._active = False
        self._hidden: Optional[Tensor] = None
        self._handles: list[Any] = []
        self._head_handle: Any = None

    def install(self, model: nn.Module) -> None:
        """Hook ``model`` (the one this head was made for) and set its loss function."""
        self._handles = [
            model.register_forward_pre_hook(self._model_pre_hook, with_kwargs=True),
            model.register_forward_hook(self._model_post_hook, with_kwargs=True, always_call=True),
        ]
        self._head_handle = self.head.register_forward_pre_hook(self._head_pre_hook)
        model._loss_function = self.loss

    def remove(self, model: nn.Module) -> None:
        """Undo :meth:`install` on ``model`` (a deep copy's own hooks go with the copy's handles)."""
        for handle in self._handles + [self._head_handle]:
            handle.remove()
        self._handles, self._head_handle = [], None
        if self.had_loss_attr:
            model._loss_function = self.original_loss
        else:
            model.__dict__.pop("_loss_function", None)

    def _follow(self, head: nn.Module) -> None:
        """Move the head's hook to ``head``, the model's output embedding now, if it changed;
        ``NotImplementedError`` for one the loss cannot be computed from."""
        reason = head_unsupported_reason(head)
        if reason is not None:
            raise NotImplementedError(f"optimize_model's training loss (linear cross-entropy without logits): {reason}."
                                      " revert_model(model) to train with Hugging Face's loss")
        if head is not self.head:
            self._head_handle.remove()
            self.head = head
            self._head_handle = head.register_forward_pre_hook(self._head_pre_hook)

    def _labels(self, args: tuple, kwargs: dict) -> Optional[Tensor]:
        if "labels" in kwargs:
            return kwargs["labels"]
        bound = self._signature.bind_partial(None, *args)
        return bound.arguments.get("labels")

    def _model_pre_hook(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        if getattr(module, "_is_replica", False):  # set by torch.nn.parallel.replicate
            raise NotImplementedError(
                "optimize_model's model under nn.DataParallel: its replicas run in threads and would share the "
                "training loss's per-call state; use DistributedDataParallel (one process per GPU) instead")
        self._active = module.training and self._labels(args, kwargs) is not None
        self._hidden = None
        if self._active:
            self._follow(module.get_output_embeddings())

    def _head_pre_hook(self, module: nn.Module, args: tuple) -> Optional[tuple]:
        if not self._active:
            return None
        (hidden,) = args
        self._hidden = hidden
        return (hidden[..., :0, :],)  # logits of no token: [B, 0, V]

    def _model_post_hook(self, module: nn.Module, args: tuple, kwargs: dict, output: Any) -> Any:
        """Drop the empty logits: ``logits=None`` in a ModelOutput; left out of a tuple
        (``return_dict=False``), as ``ModelOutput.to_tuple`` leaves out None fields."""
        active, self._active, self._hidden = self._active, False, None
        if not active:
            return None
        if isinstance(output, tuple):
            return tuple(x for x in output if not (torch.is_tensor(x) and x.dim() == 3 and x.shape[1] == 0))
        if getattr(output, "logits", None) is None:
            return None
        fields = {k: v for k, v in output.items() if k != "logits"}
        return type(output)(**fields)

    def loss(self, logits: Tensor, labels: Tensor, vocab_size: int, num_items_in_batch: Optional[Any] = None,
             ignore_index: int = -100, shift_labels: Optional[Tensor] = None, **kwargs: Any) -> Tensor:
        """Hugging Face's ``ForCausalLMLoss`` of the hidden states the head received, without logits
        (float32, as its upcast logits give, since ``linear_cross_entropy`` returns float32 for
        16-bit inputs; float64 stays float64)."""
        hidden, self._hidden = self._hidden, None
        if hidden is None:  # eval mode, or no labels at the forward: the logits exist
            return self.original_loss(logits, labels, vocab_size, num_items_in_batch=num_items_in_batch,
                                      ignore_index=ignore_index, shift_labels=shift_labels, **kwargs)
        if shift_labels is None:
            shift_labels = F.pad(labels, (0, 1), value=ignore_index)[..., 1:]
        if shift_labels.shape != hidden.shape[:-1]:
            raise ValueError(f"labels of shape {tuple(shift_labels.shape)} do not match the {tuple(hidden.shape[:-1])} "
                             "positions whose hidden states reach the head (logits_to_keep must be 0 in training)")
        reduction = "sum" if num_items_in_batch is not None else "mean"
        weight, bias = head_weight_and_bias(self.head)
        loss = linear_cross_entropy(hidden, weight, shift_labels.to(hidden.device), linear_bias=bias,
                                    reduction=reduction, ignore_index=ignore_index, softcap=self.softcap)
        if reduction == "sum":
            if torch.is_tensor(num_items_in_batch):
                num_items_in_batch = num_items_in_batch.to(loss.device)
            loss = loss / num_items_in_batch
        return loss


# --------------------------------------------------------------------------
# RMSNorm
# --------------------------------------------------------------------------

#: (module, class name) of Hugging Face's RMSNorm classes -> (eps attribute, cast, offset) of
#: their formula (read from the modeling files of transformers 5.x): Llama's copies round the
#: normalised value to the input dtype, then multiply by the weight; Gemma's multiply by
#: ``1 + weight`` in float32 and round once. Qwen3's and Gemma 3's q_norm / k_norm (over the
#: head dimension) are of the same classes.
RMS_NORM_FORMS: dict[tuple[str, str], tuple[str, str, float]] = {
    **{(f"transformers.models.{m}.modeling_{m}", f"{c}RMSNorm"): ("variance_epsilon", "before_weight", 0.0)
       for m, c in (("llama", "Llama"), ("mistral", "Mistral"), ("qwen2", "Qwen2"), ("qwen3", "Qwen3"),
                    ("phi3", "Phi3"))},
    **{(f"transformers.models.{m}.modeling_{m}", f"{c}RMSNorm"): ("eps", "after_weight", 1.0)
       for m, c in (("gemma2", "Gemma2"), ("gemma3", "Gemma3"))},
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
                return (f"{cls.__name__}'s forward differs from the checked formula (cast {cast}, offset {offset}) "
                        f"in {dtype}: this transformers version changed it")
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
        if (plain_kernel_call(RMS_NORM_IMPL_ENV, x, weight) and weight.dim() == 1
                and 0 < x.shape[-1] == weight.shape[0] and type(eps) is float and eps >= 0):
            from ojas_kernels.rms_norm import MAX_HIDDEN

            if x.shape[-1] <= MAX_HIDDEN:  # what rms_norm would run (cast and offset checked at the swap)
                return fused_rms_norm(x, weight, eps, self._ojas_offset, self._ojas_cast == "after_weight")
        if x.dtype == torch.float64:
            x = x.to(torch.float32)
            if self._ojas_cast == "before_weight":  # the product stays float64, as Hugging Face's
                weight = weight.to(torch.float64)
        y = rms_norm(x, weight.shape, weight, eps, offset=self._ojas_offset, cast=self._ojas_cast)
        return y.to(hidden_states.dtype) if self._ojas_cast == "after_weight" else y


class _SwappedType(type):
    """The metaclass of the classes :func:`_swapped_class` makes: such a class pickles as the call
    that makes it (``copyreg``), so a model pickled with them loads in a process that has not
    optimized a model of that class yet."""


def _swapped_class(cls: type, mixin: type, attrs: dict[str, Any], prefix: str = "Ojas") -> type:
    """The subclass ``<prefix><Name>`` of ``cls`` with ``mixin``'s forward, made once and kept in
    this module's namespace."""
    name = f"{prefix}{cls.__name__}"
    swapped = globals().get(name)
    if swapped is None or cls not in swapped.__bases__:
        swapped = _SwappedType(name, (mixin, cls), dict(attrs, __module__=__name__, __qualname__=name,
                                                        _ojas_made_by=(cls, mixin, attrs, prefix)))
        globals()[name] = swapped
    return swapped


copyreg.pickle(_SwappedType, lambda swapped: (_swapped_class, swapped._ojas_made_by))


def ojas_rms_norm_class(cls: type) -> type:
    """The subclass of a checked Hugging Face RMSNorm class computed by :func:`rms_norm`."""
    eps_attr, cast, offset = RMS_NORM_FORMS[(cls.__module__, cls.__name__)]
    return _swapped_class(cls, _OjasRMSNorm, dict(_ojas_eps_attr=eps_attr, _ojas_cast=cast, _ojas_offset=offset))


# --------------------------------------------------------------------------
# Rotary position embedding
# --------------------------------------------------------------------------

#: modeling modules whose ``apply_rotary_pos_emb`` is Llama's rotate-half formula (checked by
#: :func:`_probe_rotary` before it is replaced)
ROTARY_MODULES = tuple(f"transformers.models.{m}.modeling_{m}"
                       for m in ("llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3"))

# modeling module -> (Hugging Face's function, the optimized models using the replacement)
_ROTARY_PATCHED: dict[str, tuple[Callable[..., Any], int]] = {}
_PROBED_ROTARY: dict[str, Optional[str]] = {}
# .depth: how many attention modules of optimized models this thread is inside (their forward,
# or its recomputation by checkpointing): the replacement runs the kernel only there, so that
# other models of the family in the process compute with Hugging Face's own function
_ROTARY_SCOPE = threading.local()


def _enter_rotary_scope(module: nn.Module, args: tuple) -> None:
    _ROTARY_SCOPE.depth = getattr(_ROTARY_SCOPE, "depth", 0) + 1


def _leave_rotary_scope(module: nn.Module, args: tuple, output: Any) -> None:
    _ROTARY_SCOPE.depth = max(0, getattr(_ROTARY_SCOPE, "depth", 0) - 1)  # also after a raising pre-hook


def scope_rotary(attention_modules: list[nn.Module]) -> list[Any]:
    """Hooks that make the replaced ``apply_rotary_pos_emb`` use the kernel inside these modules
    only (left even when the forward raises); returns their handles."""
    handles = []
    for m in attention_modules:
        handles.append(m.register_forward_pre_hook(_enter_rotary_scope))
        handles.append(m.register_forward_hook(_leave_rotary_scope, always_call=True))
    return handles


def _probe_rotary(original: Callable[..., Any]) -> Optional[str]:
    """Why ``original`` is not the rotate-half formula of :func:`rotary_reference`, or None: random
    inputs (GQA, batch-broadcast cos/sin), forward and gradients, bit for bit, float32 and
    bfloat16, on the CPU."""
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        q, k = (torch.randn(2, h, 5, 8, generator=g).to(dtype).requires_grad_() for h in (4, 2))
        cos, sin = (torch.randn(1, 5, 8, generator=g).to(dtype) for _ in range(2))
        try:
            got, want = original(q, k, cos, sin), rotary_reference(q, k, cos, sin)
        except Exception as e:  # noqa: BLE001 - any failure means: not the checked formula
            return f"its apply_rotary_pos_emb cannot be called as Llama's ({e})"
        ones = [torch.ones_like(t) for t in want]
        if not all(torch.equal(a, b) for a, b in zip(got, want)) or not all(
                torch.equal(a, b) for a, b in zip(torch.autograd.grad(got, (q, k), ones),
                                                   torch.autograd.grad(want, (q, k), ones))):
            return f"its apply_rotary_pos_emb differs from Llama's rotate-half formula in {dtype}"
    return None


def _ojas_rotary(original: Callable[..., Any]) -> Callable[..., Any]:
    """``apply_rotary_pos_emb`` by the fused kernel inside the attention modules of optimized
    models (:func:`scope_rotary`) in the plain case (4-D q and k, cos/sin [B or 1, S, E] not
    requiring grad, unsqueeze_dim 1, one kernel dtype and device), Hugging Face's ``original``
    otherwise: the same values and gradients either way."""

    @functools.wraps(original, updated=())  # (original may be a kernels nn.Module: none of its __dict__)
    def apply_rotary_pos_emb(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, unsqueeze_dim: int = 1):
        if (getattr(_ROTARY_SCOPE, "depth", 0) > 0 and unsqueeze_dim == 1 and q.dim() == 4 and k.dim() == 4 and cos.dim() == 3 and sin.shape == cos.shape
                and not (cos.requires_grad or sin.requires_grad) and plain_kernel_call(ROTARY_IMPL_ENV, q, k, cos, sin)
                and q.shape[-1] % 2 == 0 and q.shape[-1] == k.shape[-1] == cos.shape[-1]
                and q.shape[2] == k.shape[2] == cos.shape[1] and cos.shape[0] in (1, q.shape[0]) and q.shape[0] == k.shape[0]):
            return fused_rotary(q, k, cos, sin)
        return original(q, k, cos, sin, unsqueeze_dim)

    apply_rotary_pos_emb._ojas_original = original
    return apply_rotary_pos_emb


def rotary_unsupported_reason(model: nn.Module) -> tuple[Optional[str], str]:
    """(why the rotary embedding of ``model``'s family is left alone, or None; its modeling module)."""
    module_name = type(model).__module__
    if module_name not in ROTARY_MODULES:
        return f"{module_name} is not among the modules with Llama's checked rotary formula", module_name
    if module_name not in _PROBED_ROTARY:
        module = sys.modules[module_name]
        fn = getattr(module, "apply_rotary_pos_emb", None)
        original = getattr(fn, "_ojas_original", fn)
        _PROBED_ROTARY[module_name] = ("no apply_rotary_pos_emb" if original is None else _probe_rotary(original))
    return _PROBED_ROTARY[module_name], module_name


def _replacement(original: Callable[..., Any]) -> Callable[..., Any]:
    """The replacement of Hugging Face's ``apply_rotary_pos_emb`` (:func:`_ojas_rotary`), of the same
    type as ``original``: a function, or, where Hugging Face's ``kernels`` package made the function
    an ``nn.Module`` (``use_kernel_forward_from_hub``), a fresh instance of that class with the
    replacement as its forward. The type matters: ``kernels`` rebuilds the wrappers that each
    attention module holds, when a model is unpickled, as ``type(module.apply_rotary_pos_emb)()``."""
    replaced = _ojas_rotary(original)
    if not isinstance(original, nn.Module):
        return replaced
    module = type(original)()
    module.forward = replaced
    module.__dict__["_ojas_original"] = original  # not a submodule
    return module


def patch_rotary(module_name: str) -> None:
    """Replace ``module_name.apply_rotary_pos_emb`` (the modeling module's attention layers look
    the function up at each call) by :func:`_replacement`; counted per :class:`RotaryUse`."""
    module = importlib.import_module(module_name)
    original, users = _ROTARY_PATCHED.get(module_name, (module.apply_rotary_pos_emb, 0))
    if users == 0:
        module.apply_rotary_pos_emb = _replacement(original)
    _ROTARY_PATCHED[module_name] = (original, users + 1)


def unpatch_rotary(module_name: str) -> None:
    """Undo one :func:`patch_rotary`; Hugging Face's function is back when no model uses it."""
    if module_name not in _ROTARY_PATCHED:
        raise RuntimeError(f"unpatch_rotary: {module_name}.apply_rotary_pos_emb is not replaced (more releases "
                           "than uses)")
    original, users = _ROTARY_PATCHED[module_name]
    if users == 1:
        sys.modules[module_name].apply_rotary_pos_emb = original
        del _ROTARY_PATCHED[module_name]
    else:
        _ROTARY_PATCHED[module_name] = (original, users - 1)


class RotaryUse:
    """One optimized model's use of the replaced ``apply_rotary_pos_emb`` of a modeling module:
    :func:`patch_rotary` when made, :func:`unpatch_rotary` at :meth:`release`. A copy of the
    model (``copy.deepcopy``, pickle, ``torch.save``) makes a use of its own, so reverting one copy
    leaves the other optimized, and a model unpickled in a fresh process is optimized there too."""

    def __init__(self, module_name: str) -> None:
        patch_rotary(module_name)
        self.module_name = module_name
        self.held = True

    def release(self) -> None:
        """Give the use back (once; a second call does nothing)."""
        if self.held:
            self.held = False
            unpatch_rotary(self.module_name)

    def __reduce__(self) -> tuple[type, tuple[str]]:
        if not self.held:
            raise RuntimeError("a released RotaryUse is not copied (its model was reverted)")
        return type(self), (self.module_name,)


# --------------------------------------------------------------------------
# SwiGLU / GeGLU MLPs
# --------------------------------------------------------------------------

#: (module, class name) of Hugging Face's gated-MLP classes -> their layout (read from the
#: modeling files of transformers 5.x): "separate", ``down_proj(act_fn(gate_proj(x)) *
#: up_proj(x))`` (Gemma 2's and Gemma 3's too, with ``config.hidden_activation``); "fused"
#: (Phi-3), ``gate, up = gate_up_proj(x).chunk(2, -1)`` then ``down_proj(up * activation_fn(gate))``.
SWIGLU_FORMS: dict[tuple[str, str], str] = {
    **{(f"transformers.models.{m}.modeling_{m}", f"{c}MLP"): "separate"
       for m, c in (("llama", "Llama"), ("mistral", "Mistral"), ("qwen2", "Qwen2"), ("qwen3", "Qwen3"),
                    ("gemma2", "Gemma2"), ("gemma3", "Gemma3"))},
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
    if (type(act).__name__ == "GELUTanh" and isinstance(fn, functools.partial) and fn.func is F.gelu
            and not fn.args and fn.keywords == {"approximate": "tanh"}):
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
                return (f"{cls.__name__}'s forward differs from down({activation}(gate) * up) in {dtype}: "
                        "this transformers version changed it")
    return None


def is_gated_mlp(module: nn.Module) -> bool:
    """Whether ``module`` is a Hugging Face gated MLP: a ``*MLP`` class with a down projection and
    a gate (``gate_proj`` and ``up_proj``, or Phi-3's fused ``gate_up_proj``)."""
    return (type(module).__name__.endswith("MLP") and hasattr(module, "down_proj")
            and (hasattr(module, "gate_proj") and hasattr(module, "up_proj") or hasattr(module, "gate_up_proj")))


def swiglu_unsupported_reason(module: nn.Module) -> Optional[str]:
    """Why ``module`` (a gated MLP, :func:`is_gated_mlp`) is left alone, or None."""
    cls = type(module)
    activation = mlp_activation(module)
    if activation is None:
        act = getattr(module, _act_attr(module), None)
        detail = f"approximate={act.approximate!r}" if isinstance(act, nn.GELU) else None
        detail = detail or ("its Python formula" if type(act).__name__ == "GELUTanh" else None)
        return (f"activation {type(act).__name__}{f' ({detail})' if detail else ''}: the fused gate product "
                "takes SiLU (SwiGLU, Ojas.SwiGLU.Backward.swiglu_backward_eq_vjp) and torch's tanh-approximated "
                "gelu (GeGLU, gelu_pytorch_tanh, Ojas.SwiGLU.Backward.geglu_tanh_backward_eq_vjp) only")
    form = SWIGLU_FORMS.get((cls.__module__, cls.__name__))
    if form is None:
        return f"{cls.__module__}.{cls.__name__} is not among the checked gated-MLP classes"
    if (cls, activation) not in _PROBED_MLP:
        _PROBED_MLP[cls, activation] = _probe_mlp(module, form, activation)
    return _PROBED_MLP[cls, activation]


def _swiglu_mlp_forward(module: nn.Module, x: Tensor, form: str, activation: str,
                        impl: Optional[str] = None) -> Tensor:
    if form == "separate":
        gate, up = module.gate_proj(x), module.up_proj(x)
    else:
        gate, up = module.gate_up_proj(x).chunk(2, dim=-1)
    if impl is None and plain_kernel_call(SWIGLU_IMPL_ENV, gate, up) and gate.shape == up.shape:
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
    return _swapped_class(cls, _OjasSwiGLU, dict(_ojas_form=SWIGLU_FORMS[(cls.__module__, cls.__name__)]))


# --------------------------------------------------------------------------
# Split checkpointing: a decoder layer as two checkpointed segments
# --------------------------------------------------------------------------

#: (module, class name) of the decoder layers whose forward is, in this order, ``h = x +
#: self_attn(hidden_states=input_layernorm(x), ...)[0]`` and ``h + mlp(post_attention_layernorm(h))``
#: (read from the modeling files of transformers 5.x; Gemma's extra norms and Phi-3's residual
#: dropout are other layouts). :class:`SplitCheckpoint` checks the order at every call.
SPLIT_LAYERS: tuple[tuple[str, str], ...] = tuple(
    (f"transformers.models.{m}.modeling_{m}", f"{c}DecoderLayer")
    for m, c in (("llama", "Llama"), ("mistral", "Mistral"), ("qwen2", "Qwen2"), ("qwen3", "Qwen3")))
#: (the norm, the module it feeds) of the two segments of a split layer
SPLIT_SEGMENTS = (("input_layernorm", "self_attn"), ("post_attention_layernorm", "mlp"))

# .run: the _SplitRun of the layer whose forward runs split on this thread (outside its
# segments), or None
_SPLIT = threading.local()


class _SplitRun:
    """One split forward of a layer: the segments' checkpoint function, and the norm whose
    input was passed through, waiting for its module (``marked``)."""

    __slots__ = ("layer", "checkpoint", "marked")

    def __init__(self, layer: nn.Module, checkpoint: Callable[..., Any]) -> None:
        self.layer = layer
        self.checkpoint = checkpoint
        self.marked: Optional[tuple[nn.Module, Tensor]] = None


@contextmanager
def _running(run: Optional[_SplitRun]):
    previous = getattr(_SPLIT, "run", None)
    _SPLIT.run = run
    try:
        yield
    finally:
        _SPLIT.run = previous


def _segment_norm(run: Optional[_SplitRun], module: nn.Module) -> Optional[nn.Module]:
    """The norm of ``module``'s segment when ``module`` is a segment module of the layer running split."""
    if run is not None:
        for norm_name, module_name in SPLIT_SEGMENTS:
            if run.layer._modules.get(module_name) is module:
                return run.layer._modules[norm_name]
    return None


def _is_segment_norm(run: Optional[_SplitRun], module: nn.Module) -> bool:
    return run is not None and any(run.layer._modules.get(n) is module for n, _ in SPLIT_SEGMENTS)


class SplitCheckpoint:
    """The ``gradient_checkpointing_func`` of one split decoder layer (:data:`SPLIT_LAYERS`).

    Hugging Face calls it as it calls ``torch.utils.checkpoint.checkpoint`` (``func(forward,
    *args)``) when the layer checkpoints (training, gradients on); it runs the layer's forward
    as is, not checkpointed as a whole: the two norms pass their input through, and
    ``self_attn`` and ``mlp`` each run ``segment_checkpoint(segment, x, ...)``, the segment
    being the norm and the module called as modules (their hooks run in the forward and the
    recomputation alike). So the layer keeps two inputs, x and h, and in the backward the MLP
    half is recomputed (and its saved tensors freed) before the attention half is: the
    attention half's activations are never alive during the MLP's backward.
    ``segment_checkpoint``: non-reentrant ``torch.utils.checkpoint.checkpoint``, or an
    :class:`ojas_ref.nn.offload.OffloadedCheckpoint` shared by all layers (the two
    inputs in pinned host memory, prefetched one segment ahead). Exact: each segment is
    recomputed from its input by the same operations (deterministic layers: no dropout); no
    theorem needed or claimed. ``RuntimeError`` when the layer's forward does not call each norm
    right before its module with the norm's output (a transformers version that changed the
    layout)."""

    def __init__(self, layer: nn.Module, segment_checkpoint: Callable[..., Any]) -> None:
        self.layer = layer
        self.segment_checkpoint = segment_checkpoint

    def __call__(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        run = _SplitRun(self.layer, self.segment_checkpoint)
        with _running(run):
            out = function(*args, **kwargs)
        if run.marked is not None:
            raise RuntimeError(f"split checkpointing: {type(self.layer).__name__}'s forward did not pass the output of "
                               "a norm to its module (self_attn / mlp): not the checked layout")
        return out

    def __repr__(self) -> str:
        return f"SplitCheckpoint({type(self.layer).__name__}, {self.segment_checkpoint!r})"


def _run_segment(norm: nn.Module, module: nn.Module, x: Tensor, *args: Any, **kwargs: Any) -> Any:
    """One segment, as checkpointed and as recomputed: ``module(norm(x), ...)``, neither passing through."""
    with _running(None):
        return module(norm(x), *args, **kwargs)


class _SplitNorm:
    """Mixin of a split layer's norms: while the layer runs split (outside its segments) the
    input passes through, marked for the segment module, which normalises it inside its checkpoint."""

    def forward(self, hidden_states: Tensor) -> Tensor:
        run = getattr(_SPLIT, "run", None)
        if not _is_segment_norm(run, self):
            return super().forward(hidden_states)
        if run.marked is not None:
            raise RuntimeError(f"split checkpointing: {type(run.layer).__name__} called two norms before their "
                               "modules: not the checked layout")
        run.marked = (self, hidden_states)
        return hidden_states


class _SplitSegment:
    """Mixin of a split layer's ``self_attn`` and ``mlp``: while the layer runs split, the
    segment ``module(norm(x))`` under the run's checkpoint function, ``x`` (the hidden states,
    first positional or ``hidden_states=``) its saved input; the module's own forward otherwise."""

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        run = getattr(_SPLIT, "run", None)
        norm = _segment_norm(run, self)
        if norm is None:
            return super().forward(*args, **kwargs)
        x, args = (args[0], args[1:]) if args else (kwargs.pop("hidden_states"), ())
        if run.marked is None or run.marked[0] is not norm or run.marked[1] is not x:
            raise RuntimeError(f"split checkpointing: {type(self).__name__} did not receive its norm's output: "
                               f"{type(run.layer).__name__} is not the checked layout")
        run.marked = None
        return run.checkpoint(functools.partial(_run_segment, norm, self), x, *args, **kwargs)


def split_layers(model: nn.Module) -> list[nn.Module]:
    """The decoder layers of ``model`` (Hugging Face's ``GradientCheckpointingLayer`` modules)."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    return [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]


def split_unsupported_reason(model: nn.Module) -> Optional[str]:
    """Why ``model``'s decoder layers cannot be split (none found, or a class outside
    :data:`SPLIT_LAYERS`), or None."""
    layers = split_layers(model)
    family = getattr(_text_config(model), "model_type", None)
    if not layers:
        return f"{type(model).__name__} (model type {family!r}) has no decoder layers (GradientCheckpointingLayer)"
    other = sorted({f"{type(m).__module__}.{type(m).__name__}" for m in layers
                    if (type(m).__module__, type(m).__name__) not in SPLIT_LAYERS})
    if other:
        return (f"model type {family!r}: its decoder layers ({', '.join(other)}) are not among the checked "
                "norm / self-attention / norm / MLP layouts (Llama, Mistral, Qwen2, Qwen3)")
    return None


def split_swap(module: nn.Module, segment: bool) -> type:
    """Swap ``module``'s class for its split subclass (a segment module's, or a norm's); returns the class before."""
    cls = type(module)
    mixin = _SplitSegment if segment else _SplitNorm
    module.__class__ = _swapped_class(cls, mixin, {}, prefix="OjasSplit")
    return cls
