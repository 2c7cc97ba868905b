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
* :func:`swiglu` / :class:`SwiGLU`: ``silu(gate) * up`` (or GeGLU's ``gelu_tanh(gate) * up``,
  ``activation="gelu_tanh"``) with gate and up saved and the activation recomputed in backward,
  a fused Triton kernel on CUDA (rocq/SwiGLU/Backward.v).
* :func:`relu` / :class:`ReLU`: ``F.relu`` saving its mask packed 1 bit per element (backward
  bitwise torch's), and :func:`relu_squared_linear`, ReLU² and the linear map after it saving
  ``relu(h)`` but not its square (rocq/ReLU/Backward.v).
* :mod:`ojas_ref.primitives.rope`: the rotary embedding (Hugging Face's rotate-half form)
  as one fused Triton kernel each way (rocq/RoPE/Backward.v); ``optimize_model`` applies it.
* :func:`optimize_model` / :func:`revert_model`: the primitives applied to an existing
  model in one call (Hugging Face causal LMs, ``nn.MultiheadAttention``).
* :class:`MultiheadAttention`, :class:`LinearCrossEntropyLoss`: ``torch.nn`` modules on them.

The package has four parts: ``ojas_ref.primitives`` (the references above and the rules they
share), ``ojas_ref.integrations`` (``optimize_model``, the Hugging Face adapters, the
``torch.nn`` modules), ``ojas_ref.tools`` (``ojas plan``, ``ojas train``, the ``ojas``
command) and ``ojas_ref.verification`` (the oracle client, the differential checks, the
proof audit and ``ojas audit``). Each primitive function lives in the module of the same
name under ``ojas_ref/primitives/`` (``ojas_ref/primitives/attention.py``, ...;
``optimize_model`` in ``ojas_ref/integrations/optimize.py``, the modules in
``ojas_ref/integrations/modules.py``); the package attribute is the function, so reach a
module's internals with ``importlib.import_module("ojas_ref.primitives.attention")``.
"""

import importlib.metadata

from ojas_ref.integrations.modules import LinearCrossEntropyLoss, MultiheadAttention
from ojas_ref.integrations.optimize import optimize_model, revert_model
from ojas_ref.primitives.attention import attention
from ojas_ref.primitives.linear_cross_entropy import linear_cross_entropy
from ojas_ref.primitives.optimizer_in_backward import InBackwardOptimizer
from ojas_ref.primitives.relu import ReLU, relu, relu_squared_linear
from ojas_ref.primitives.reversible import AdditiveCoupling, ReversibleSequence, SymplecticCoupling
from ojas_ref.primitives.rms_norm import RMSNorm, rms_norm
from ojas_ref.primitives.swiglu import SwiGLU, swiglu

__all__ = ["attention", "linear_cross_entropy", "optimize_model", "relu", "relu_squared_linear", "revert_model",
           "rms_norm", "swiglu", "AdditiveCoupling", "InBackwardOptimizer", "LinearCrossEntropyLoss",
           "MultiheadAttention", "RMSNorm", "ReLU", "ReversibleSequence", "SwiGLU", "SymplecticCoupling"]

try:
    __version__: str = importlib.metadata.version("ojas-ref")
except importlib.metadata.PackageNotFoundError:  # a source tree used without installing it
    __version__ = "0+unknown"
