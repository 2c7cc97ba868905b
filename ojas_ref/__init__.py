"""ojas-ref: formally verified memory-saving primitives for training large language models.

The package is layered as torch is:

* :mod:`ojas_ref.functional`: the primitives as functions (``torch.nn.functional``'s role):
  :func:`attention` (online-softmax attention, a drop-in for
  ``F.scaled_dot_product_attention``, rocq/Attention/), :func:`linear_cross_entropy` (chunked
  linear cross-entropy, rocq/LinearCrossEntropy/), :func:`rms_norm`, :func:`swiglu`, :func:`relu` /
  :func:`relu_squared_linear` and ``apply_rotary_pos_emb`` (the rotary embedding), each with its
  reference, its ``autograd.Function`` and its dispatch to the Triton kernels of
  :mod:`ojas_kernels` (the top-level ``kernels/`` folder).
* :mod:`ojas_ref.nn`: modules on them (:class:`RMSNorm`, :class:`SwiGLU`, :class:`ReLU`,
  :class:`MultiheadAttention`, :class:`LinearCrossEntropyLoss`), reversible coupling blocks
  (:class:`ReversibleSequence` of :class:`AdditiveCoupling` / :class:`SymplecticCoupling`,
  rocq/Reversible/) and offloaded activation checkpoints.
* :mod:`ojas_ref.optim`: :class:`InBackwardOptimizer` (each parameter updated in its
  post-accumulate-grad hook, no persistent gradients, rocq/InBackward/) and the
  block-coordinate optimizer.
* :class:`MemoryRecipe` (:mod:`ojas_ref.recipe`): the memory settings, one frozen dataclass read by
  ``optimize_model``, ``InBackwardOptimizer``, the planner, ``ojas train`` and the benchmarks.
* :mod:`ojas_ref.integrations.hf`: :func:`optimize_model` / :func:`revert_model`, the primitives
  applied to an existing model in one call (Hugging Face causal LMs, ``nn.MultiheadAttention``).
* :mod:`ojas_ref.verification`: the oracle client, the differential checks, the proved error
  bounds and the proof audit.
* :mod:`ojas_ref.tools`: ``ojas plan``, ``ojas train`` and the ``ojas`` command (no library
  module imports them).
"""

import importlib.metadata

from ojas_ref import _moved
from ojas_ref.functional import attention, linear_cross_entropy, relu, relu_squared_linear, rms_norm, swiglu
from ojas_ref.integrations.hf.optimize import optimize_model, revert_model
from ojas_ref.nn import (
    AdditiveCoupling,
    LinearCrossEntropyLoss,
    MultiheadAttention,
    ReLU,
    ReversibleSequence,
    RMSNorm,
    SwiGLU,
    SymplecticCoupling,
)
from ojas_ref.optim import InBackwardOptimizer
from ojas_ref.recipe import MemoryRecipe

__all__ = [
    "attention",
    "linear_cross_entropy",
    "optimize_model",
    "relu",
    "relu_squared_linear",
    "revert_model",
    "rms_norm",
    "swiglu",
    "AdditiveCoupling",
    "InBackwardOptimizer",
    "LinearCrossEntropyLoss",
    "MemoryRecipe",
    "MultiheadAttention",
    "RMSNorm",
    "ReLU",
    "ReversibleSequence",
    "SwiGLU",
    "SymplecticCoupling",
]

_moved.install()

try:
    __version__: str = importlib.metadata.version("ojas-ref")
except importlib.metadata.PackageNotFoundError:  # a source tree used without installing it
    __version__ = "0+unknown"
