"""The primitives put into models: ``optimize`` (:func:`~ojas_ref.optimize_model` /
:func:`~ojas_ref.revert_model`, the primitives applied to an existing model in one call),
its Hugging Face adapters in ``huggingface`` (attention function, loss head, RMSNorm and
gated-MLP class swaps, each probed against the class it replaces) and ``modules``
(``torch.nn`` modules on the primitives: :class:`~ojas_ref.MultiheadAttention`,
:class:`~ojas_ref.LinearCrossEntropyLoss`). The public names are exported by :mod:`ojas_ref`.
"""
