"""Optimizers, in the role of ``torch.optim``: ``in_backward`` (:class:`InBackwardOptimizer`,
each parameter updated in its post-accumulate-grad hook, rocq/InBackward/) and
``block_coordinate`` (:class:`BlockCoordinateOptimizer`, BAdam's one block at a time)."""

from ojas_ref.optim.block_coordinate import BlockCoordinateOptimizer, decoder_layer_blocks
from ojas_ref.optim.in_backward import InBackwardOptimizer

__all__ = ["BlockCoordinateOptimizer", "InBackwardOptimizer", "decoder_layer_blocks"]
