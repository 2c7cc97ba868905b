"""The primitives put into existing models in one call: ``optimize`` (:func:`~ojas_ref.optimize_model`
/ :func:`~ojas_ref.revert_model`, also for ``nn.MultiheadAttention``) and the Hugging Face
adapters (attention function, loss head, RMSNorm and gated-MLP class swaps, rotary embedding,
split checkpoints), each probed against the class it replaces."""

from ojas_ref.integrations.hf.optimize import OptimizationReport, optimize_model, revert_model

__all__ = ["OptimizationReport", "optimize_model", "revert_model"]
