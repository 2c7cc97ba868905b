"""The primitives put into Hugging Face models (and ``nn.MultiheadAttention``) in one call:
:func:`optimize_model` / :func:`revert_model` (``optimize``), with its :class:`OptimizationReport`
(``report``), and one adapter per replaced piece, each probed against the class or function it
replaces: ``attention`` (the attention function registered as ``"ojas"``), ``linear_cross_entropy``
(the training loss without logits), ``rms_norm`` and ``swiglu`` (class swaps), ``rope`` (the rotary
embedding), ``split_checkpoint`` (two checkpoints per decoder layer); ``family`` says which parts of
a model can be changed. No modeling code is copied: the models' own forward passes run.
``CausalLMLossHead`` is the deprecated old name of :class:`LinearCrossEntropyForCausalLM` (it warns)."""

import warnings
from typing import Any

from ojas_ref.integrations.hf.attention import ATTENTION_NAME, ojas_attention_forward, register
from ojas_ref.integrations.hf.family import SUPPORTED_MODEL_TYPES, FamilySupport, family_support
from ojas_ref.integrations.hf.linear_cross_entropy import LinearCrossEntropyForCausalLM
from ojas_ref.integrations.hf.optimize import optimize_model, revert_model
from ojas_ref.integrations.hf.report import OptimizationReport
from ojas_ref.integrations.hf.rms_norm import RMS_NORM_FORMS, ojas_rms_norm_class, rms_norm_unsupported_reason
from ojas_ref.integrations.hf.split_checkpoint import (
    SPLIT_LAYERS,
    SplitCheckpoint,
    split_layers,
    split_swap,
    split_unsupported_reason,
)
from ojas_ref.integrations.hf.swiglu import (
    SWIGLU_FORMS,
    is_gated_mlp,
    mlp_activation,
    ojas_swiglu_class,
    swiglu_unsupported_reason,
)

__all__ = [
    "ATTENTION_NAME",
    "RMS_NORM_FORMS",
    "SPLIT_LAYERS",
    "SUPPORTED_MODEL_TYPES",
    "SWIGLU_FORMS",
    "FamilySupport",
    "LinearCrossEntropyForCausalLM",
    "OptimizationReport",
    "SplitCheckpoint",
    "family_support",
    "is_gated_mlp",
    "mlp_activation",
    "ojas_attention_forward",
    "ojas_rms_norm_class",
    "ojas_swiglu_class",
    "optimize_model",
    "register",
    "revert_model",
    "rms_norm_unsupported_reason",
    "split_layers",
    "split_swap",
    "split_unsupported_reason",
    "swiglu_unsupported_reason",
]


def __getattr__(name: str) -> Any:
    """``CausalLMLossHead``, the old name of :class:`LinearCrossEntropyForCausalLM`, with a ``DeprecationWarning``."""
    if name == "CausalLMLossHead":
        warnings.warn(
            f"{__name__}.CausalLMLossHead is deprecated and will be removed in the next release; use "
            f"{__name__}.LinearCrossEntropyForCausalLM",
            DeprecationWarning,
            stacklevel=2,
        )
        return LinearCrossEntropyForCausalLM
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
