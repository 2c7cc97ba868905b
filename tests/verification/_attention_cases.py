"""What the attention verification tests share (tests/verification/test_attention_row_constants.py,
test_attention_lse_premise_rows.py, test_attention_lse_counted_bound.py): their random inputs, and the
interpreter's kernels checked against the bounds at the H100's 3xTF32 dot model."""

from __future__ import annotations

import pytest
import torch

from ojas_ref.verification import attention_error as ae
from ojas_ref.verification.bounds import attention as ab


def attention_inputs(hq: int, hkv: int, s: int, e: int, seed: int) -> tuple[torch.Tensor, ...]:
    """``(q, k, v, do)``, float32 standard normal of shape [1, H, s, e]: ``q`` and ``do`` with ``hq`` heads,
    ``k`` and ``v`` with ``hkv``, drawn in that order from one generator seeded ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(1, h, s, e, generator=gen) for h in (hq, hkv, hkv, hq))


def interpreter_at_h100_dots(monkeypatch: pytest.MonkeyPatch) -> None:
    """Skips on a CUDA device (the tests check the interpreter's dots) or without triton; else sets
    ``attention_error.kernel_dot`` to the H100's 3xTF32 model for the test."""
    if torch.cuda.is_available():
        pytest.skip("the interpreter's dots")
    pytest.importorskip("triton")
    monkeypatch.setattr(ae, "kernel_dot", lambda device_type, dt: ab.TF32X3_H100)
