"""Which parts of a Hugging Face model :func:`ojas_ref.optimize_model` can change: the tested
families (:data:`SUPPORTED_MODEL_TYPES`) and, per family, the reason a part is left alone."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Optional

from torch import nn

from ojas_ref.integrations.hf.linear_cross_entropy import head_unsupported_reason

__all__ = ["SUPPORTED_MODEL_TYPES", "FamilySupport", "family_support", "text_config"]

#: Model types tested in tests/integrations/test_optimize_huggingface.py (config.model_type).
SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text", "phi3", "gpt2")


@dataclass(frozen=True)
class FamilySupport:
    """What :func:`ojas_ref.optimize_model` can change in a Hugging Face model, and why not otherwise."""

    attention: Optional[str]  # None if supported, else the reason it is left alone
    linear_cross_entropy: Optional[str]
    softcap: Optional[float]  # the final-logit soft cap the loss applies
    rms_norm: Optional[str] = None
    swiglu: Optional[str] = None

    @property
    def cross_entropy(self) -> Optional[str]:
        """Deprecated alias of :attr:`linear_cross_entropy`, removed in the next release."""
        warnings.warn(
            "FamilySupport.cross_entropy is deprecated and will be removed in the next release; use "
            "FamilySupport.linear_cross_entropy",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.linear_cross_entropy


def text_config(model: nn.Module) -> Any:
    """The config of ``model``'s text decoder (``get_text_config()`` where the config has one)."""
    config = model.config
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def family_support(model: nn.Module) -> FamilySupport:
    """Check a ``PreTrainedModel`` against what the adapters support (no change made)."""
    config = text_config(model)
    model_type = getattr(config, "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        reason = f"model type {model_type!r} is not among the tested families {SUPPORTED_MODEL_TYPES}"
        return FamilySupport(reason, reason, None, reason, reason)
    attention_reason = None
    if getattr(config, "attn_logit_softcapping", None) is not None:
        attention_reason = (
            f"attention logit soft-capping {config.attn_logit_softcapping} (not in the ojas attention kernel)"
        )
    elif getattr(config, "add_cross_attention", False):
        attention_reason = "cross-attention layers (not tested)"
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    loss_reason = head_unsupported_reason(head)
    if loss_reason is None and not hasattr(type(model), "loss_function"):
        loss_reason = "the model has no loss_function"
    softcap = getattr(config, "final_logit_softcapping", None)
    return FamilySupport(attention_reason, loss_reason, None if softcap is None else float(softcap))
