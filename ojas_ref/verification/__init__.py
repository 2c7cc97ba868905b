"""The link between the code and the Coq proofs: ``proof_audit`` (``ojas proofs``: rocq/
rebuilt, no admits or axioms beyond the allowed ones, ``Print Assumptions``,
rocq/MANIFEST.json), ``oracle`` (the client of the OCaml oracle extracted from the Coq
specs, extraction/), ``bounds`` (the proved floating-point error bounds, as tolerances: one
module per operation), the differential checks of each primitive against the oracle
(``attention_check``, ``linear_cross_entropy_check``, ``reversible_check``,
``in_backward_check``), ``kernel_schedule``, ``kernel_schedule_backward``, ``kernel_schedule_rowwise``
(executable models of the kernels' schedules, matched bit for bit) and ``audit`` (``ojas audit``: implementation <-> theorem
<-> proof status <-> differential status). They need a source checkout (rocq/ and
extraction/ beside the package).
"""
