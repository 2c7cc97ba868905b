"""The functional primitives, one module each, in the role of ``torch.nn.functional``: a pure
PyTorch reference of one memory-saving training operation, its ``torch.autograd.Function``, and
the dispatch to its Triton kernel in :mod:`ojas_kernels` where one exists, with the Coq theorems
it rests on named in its docstrings.

``attention`` (online-softmax attention, rocq/Attention/), ``linear_cross_entropy`` (chunked
linear cross-entropy, rocq/LinearCrossEntropy/), ``rms_norm`` (rocq/RMSNorm/), ``swiglu``
(rocq/SwiGLU/), ``relu`` (the packed 1-bit ReLU mask and ReLU², rocq/ReLU/) and ``rope`` (the
rotary embedding, rocq/RoPE/); and the rules they share: ``dispatch`` (kernel or reference),
``autocast`` (torch's autocast casts for the ops they replace) and ``transforms`` (torch.func's
transforms refused, torch.compile allowed).
"""

from ojas_ref.functional.attention import attention
from ojas_ref.functional.linear_cross_entropy import linear_cross_entropy
from ojas_ref.functional.relu import relu, relu_squared_linear
from ojas_ref.functional.rms_norm import rms_norm
from ojas_ref.functional.rope import apply_rotary_pos_emb
from ojas_ref.functional.swiglu import swiglu

__all__ = [
    "apply_rotary_pos_emb",
    "attention",
    "linear_cross_entropy",
    "relu",
    "relu_squared_linear",
    "rms_norm",
    "swiglu",
]
