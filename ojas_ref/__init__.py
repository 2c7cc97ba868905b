"""ojas-ref: formally verified reference implementations of memory-saving training primitives.

* :func:`attention`: online-softmax attention, a drop-in for
  ``F.scaled_dot_product_attention`` (rocq/Attention/).
* :func:`linear_cross_entropy`: chunked linear cross-entropy (rocq/CrossEntropy/).
* :class:`ReversibleSequence` of :class:`AdditiveCoupling` / :class:`SymplecticCoupling`
  blocks: activations reconstructed in backward (rocq/Reversible/).
* :class:`InBackwardOptimizer`: each parameter updated in its post-accumulate-grad hook,
  no persistent gradients (rocq/OptimizerInBackward/).
* :func:`rms_norm` / :class:`RMSNorm`: RMSNorm with Hugging Face's casting rules, a fused
  Triton kernel on CUDA (backward: rocq/RMSNorm/Backward.v).
* :func:`optimize_model` / :func:`revert_model`: the primitives applied to an existing
  model in one call (Hugging Face causal LMs, ``nn.MultiheadAttention``).
* :class:`MultiheadAttention`, :class:`LinearCrossEntropyLoss`: ``torch.nn`` modules on them.

Each function lives in the module of the same name (``ojas_ref/attention.py``, ...);
the package attribute is the function, so reach a module's internals with
``importlib.import_module("ojas_ref.attention")``.
"""

from ojas_ref.attention import attention
from ojas_ref.linear_cross_entropy import linear_cross_entropy
from ojas_ref.modules import LinearCrossEntropyLoss, MultiheadAttention
from ojas_ref.optimize import optimize_model, revert_model
from ojas_ref.optimizer_in_backward import InBackwardOptimizer
from ojas_ref.reversible import AdditiveCoupling, ReversibleSequence, SymplecticCoupling
from ojas_ref.rms_norm import RMSNorm, rms_norm

__all__ = ["attention", "linear_cross_entropy", "optimize_model", "revert_model", "rms_norm", "AdditiveCoupling",
           "InBackwardOptimizer", "LinearCrossEntropyLoss", "MultiheadAttention", "RMSNorm", "ReversibleSequence",
           "SymplecticCoupling"]
