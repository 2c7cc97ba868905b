"""The tools around the library (no library module imports them): ``plan`` (``ojas plan``: a
training step's peak memory predicted by :mod:`ojas_ref.memory`, printed, fitted, plotted and set
beside the H200 records), ``throughput`` and ``step_time`` (its ``--time``), ``train`` (``ojas
train``: a resumable training run) with ``data`` (corpus, byte-level BPE, token cache, resumable
loader) and ``train_state`` (atomic, verified training-state files), and ``cli`` (the ``ojas``
console script: ``train``, ``plan``, ``audit``, ``proofs``).
"""
