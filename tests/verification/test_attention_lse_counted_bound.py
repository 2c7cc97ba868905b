"""The saved lse's per-pair bound with the key tiles that leave the running max unchanged charged less
(``Ojas.Attention.Float.ForwardAccRunningCounted``'s ``attention_lse_error_masked_counted_tf32x3_op_pp``: ``afe_bL``,
through ``NL``, at ``cg^C (1 + u)^Tt`` in place of ``cg^Tt``, ``C`` the row's count of keys that may raise the
running max): ``lse_counted_bound`` against the per-pair bound, and the interpreter's lse within
``forward_per_pair_bounds``' lse bound (the smaller of the two) at the H100's 3xTF32 model. CPU only."""

from __future__ import annotations

import math
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from _attention_cases import attention_inputs, interpreter_at_h100_dots  # noqa: E402
from ojas_ref.verification import attention_error as ae  # noqa: E402
from ojas_ref.verification import attention_forward_running as afr  # noqa: E402
from ojas_ref.verification.bounds import attention as ab  # noqa: E402
from ojas_ref.verification.bounds import attention_running as ar  # noqa: E402

F64 = torch.float64


def test_lse_counted_bound_against_the_per_pair_bound():
    """4096 keys in tiles of 64: with no key raising the max the counted bound is below 0.7 of the per-pair one,
    with every key (``cg^Sk (1 + u)^Tt >= cg^Tt``) above it; it grows with ``score_shift``; ``changes`` < 0
    or a float ``score_shift`` raises ``ValueError``."""
    kw = dict(block_n=64, max_abs_q=3.0, max_abs_k=3.0, scale=0.125, qk_abs_sum=60.0, dot=ab.TF32X3_H100)
    dsc = torch.tensor([0.0, 1e-6, 1e-5], dtype=F64)
    old = ab.attention_lse_error_bound(4096, 64, score_shift=dsc, **kw)
    low = ar.lse_counted_bound(4096, 64, dsc, 0, **kw)
    print(f"lse bound, 4096 keys, 64 tiles, Dsc = 0: per-pair {old[0]:.3g}, counted C = 0 {low[0]:.3g}")
    assert bool((low < 0.7 * old).all())
    assert bool((ar.lse_counted_bound(4096, 64, dsc, 4096, **kw) > old).all())
    assert bool((low[1:] > low[:-1]).all())
    with pytest.raises(ValueError, match="changes"):
        ar.lse_counted_bound(4096, 64, dsc, -1, **kw)
    with pytest.raises(ValueError, match="score_shift"):
        ar.lse_counted_bound(4096, 64, 1e-6, 0, **kw)


@pytest.mark.interpreter
def test_interpreter_lse_within_the_counted_bound(monkeypatch):
    """With ``kernel_dot`` the H100's 3xTF32 model, S = 512 (32 key tiles of 16), full and causal: the
    interpreter's lse within ``forward_per_pair_bounds``' lse bound, which is at most the bound without the
    count (``lse_counted_bound`` off) everywhere and below 0.8 of it at its largest (full)."""
    interpreter_at_h100_dots(monkeypatch)
    from ojas_kernels.attention import flash_attention_forward

    q, k, v, _ = attention_inputs(1, 1, 512, 32, 7)
    scale = 32**-0.5
    for causal in (False, True):
        _, lse = flash_attention_forward(q, k, v, causal, scale, None)
        got = afr.forward_per_pair_bounds(q, k, v, causal, scale)[1]
        err = (lse.to(F64) - ae.exact_lse(q, k, causal, scale)).abs()
        assert bool((err <= got).all())
        with monkeypatch.context() as m:
            m.setattr(ar, "lse_counted_bound", lambda n, e, dsc, *_, **__: torch.full_like(dsc, math.inf))
            old = afr.forward_per_pair_bounds(q, k, v, causal, scale)[1]
        assert bool((got <= old).all())
        print(
            f"causal={causal}: largest lse bound {old.max():.3g} -> {got.max():.3g}, "
            f"max err / bound {(err / got).max():.3g}"
        )
        if not causal:
            assert got.max().item() < 0.8 * old.max().item()


@pytest.mark.interpreter
def test_dv_lse_premise_takes_the_counted_bound(monkeypatch):
    """The backward's per-row lse premise (``_row_lse_errors``, dV's ``Dl x``) at the H100's 3xTF32 model,
    S = 512 (32 key tiles of 16), full: at most the premise without the counted bound, below 0.85 of it at its
    largest, and the interpreter's lse within it."""
    interpreter_at_h100_dots(monkeypatch)
    from ojas_kernels.attention import flash_attention_forward

    q, k, v, _ = attention_inputs(1, 1, 512, 32, 7)
    scale = 32**-0.5
    c = ae._backward_constants(q, k, False, scale)
    got = ae._row_lse_errors(q, k, False, scale, c, 32)
    _, lse = flash_attention_forward(q, k, v, False, scale, None)
    assert bool(((lse.to(F64) - ae.exact_lse(q, k, False, scale)).abs() <= got).all())
    monkeypatch.setattr(afr, "_row_lse_counted_bound", lambda dsc, *_: torch.full_like(dsc, math.inf))
    old = ae._row_lse_errors(q, k, False, scale, c, 32)
    print(f"dV's lse premise, S=512 full: largest {old.max():.3g} -> {got.max():.3g}")
    assert bool((got <= old).all()) and got.max().item() < 0.85 * old.max().item()
