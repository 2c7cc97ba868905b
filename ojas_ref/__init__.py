"""ojas-ref: formally verified reference implementations of memory-saving training primitives.

``attention`` is online-softmax (flash) attention following rocq/Attention/OnlineSoftmax.v
and rocq/Attention/Backward.v; see :mod:`ojas_ref.attention`.
"""

from ojas_ref.attention import attention, attention_forward

__all__ = ["attention", "attention_forward"]
