"""The tools around the library: ``plan`` (``ojas plan``: a training step's peak memory
predicted from its formulas and checked against the H200 records under
benchmarks/results/), ``train`` (``ojas train``: a resumable training run) with ``data``
(corpus, byte-level BPE, token cache, resumable loader) and ``checkpoint`` (atomic, verified
checkpoints), and ``cli`` (the ``ojas`` console script: ``audit``, ``proofs``, ``plan``,
``train``).
"""
