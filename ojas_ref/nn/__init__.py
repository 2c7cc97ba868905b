"""``torch.nn`` modules on the functional primitives: ``modules`` (:class:`RMSNorm`,
:class:`SwiGLU`, :class:`ReLU`, :class:`MultiheadAttention`, :class:`LinearCrossEntropyLoss`),
``reversible`` (coupling blocks reconstructed in backward, rocq/Reversible/),
``reversible_decoder`` (a decoder of such blocks) and ``offload`` (activation checkpoints
offloaded to the host)."""

from ojas_ref.nn.modules import LinearCrossEntropyLoss, MultiheadAttention, ReLU, RMSNorm, SwiGLU
from ojas_ref.nn.offload import OffloadedCheckpoint
from ojas_ref.nn.reversible import AdditiveCoupling, ReversibleBlock, ReversibleSequence, SymplecticCoupling
from ojas_ref.nn.reversible_decoder import ReversibleDecoder, ReversibleDecoderConfig

__all__ = [
    "AdditiveCoupling",
    "LinearCrossEntropyLoss",
    "MultiheadAttention",
    "OffloadedCheckpoint",
    "RMSNorm",
    "ReLU",
    "ReversibleBlock",
    "ReversibleDecoder",
    "ReversibleDecoderConfig",
    "ReversibleSequence",
    "SwiGLU",
    "SymplecticCoupling",
]
