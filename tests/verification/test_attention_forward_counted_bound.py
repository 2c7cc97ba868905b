"""The forward's per-pair running bound with the key tiles that leave the running max unchanged charged less
(``Ojas.Attention.Float.ForwardAccRunningCounted``: there ``alpha = exp2(0) = 1`` and ``l * alpha`` is exact, so
``afe_bL`` carries ``cg^C (1 + u)^Tt`` in place of ``cg^Tt``, ``C`` the row's count of keys that may raise the
running max): the count (``_row_max_changes``), the bound below the per-pair one on many tiles, and the
interpreter's output within ``forward_per_pair_bounds(counted=True)`` (the smaller of the two) at the H100's
3xTF32 model.
CPU only."""

from __future__ import annotations

import math
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from ojas_ref.verification import attention_error as ae  # noqa: E402
from ojas_ref.verification import attention_forward_running as afr  # noqa: E402
from ojas_ref.verification.bounds import attention as ab  # noqa: E402
from ojas_ref.verification.bounds import attention_running as ar  # noqa: E402

F64 = torch.float64


def _inputs(h: int, s: int, e: int, seed: int) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(1, h, s, e, generator=gen) for _ in range(3))


def test_row_max_changes_counts_the_keys_that_may_raise_the_max():
    """Keys after the first whose ``s + d + es`` exceeds every earlier ``s - d - es``: a rising key, one within
    the errors of the running max (counted), a lower one and a masked one (not); none for falling scores."""
    s = torch.tensor([[[[0.0, 1.0, 0.5, 2.0, 1.95, -math.inf]]]], dtype=F64)
    d = torch.tensor([[[[0.01, 0.01, 0.01, 0.01, 0.01, 0.0]]]], dtype=F64)
    assert afr._row_max_changes(s, d, 0.02).tolist() == [[[3]]]
    assert afr._row_max_changes(s, d, 0.0).tolist() == [[[2]]]
    falling = -torch.arange(6, dtype=F64).reshape(1, 1, 1, 6)
    assert afr._row_max_changes(falling, d, 0.1).tolist() == [[[0]]]


def _bounds(q, k, v, causal, scale, bn, bm):
    """(per-pair row bound, counted row bound, the rows' counts) at the H100's 3xTF32 model."""
    kw = dict(afr._bound_kw(q, k, v, causal, scale, bn), dot=ab.TF32X3_H100)
    rate = ab.attention_forward_running_rate(**kw)
    es = ae._score_error(q, scale, kw["qk_abs_sum"])
    w, r, yw, _, changes = afr._sums(q, k, v, causal, scale, rate, bn, bm, es, kw["dot"], changes=True)
    counts = afr._tile_counts(q.shape[2], k.shape[2], bm, bn, causal)
    p_rows = afr._row_qk_abs_sum(q, k, causal)
    old = afr._row_grouped_bound(w, r, yw, kw, p_rows, counts)
    return old, afr._row_counted_bound(w, r, yw, kw, p_rows, counts, changes), changes


def test_counted_bound_below_the_per_pair_bound_on_many_tiles():
    """S = 1024 in tiles of 16 (64 key tiles), full: every row's running max may change at few of them (at most
    20 keys), and the counted bound is below 0.75 of the per-pair one everywhere; ``changes = Sk`` (every key)
    gives a larger bound than the per-pair one (``cg^Sk (1 + u)^Tt >= cg^Tt``)."""
    q, k, v = _inputs(2, 1024, 32, 0)
    old, new, changes = _bounds(q, k, v, False, 32**-0.5, 16, 16)
    assert int(changes.max()) <= 20
    ratio = (new / old).max().item()
    print(
        f"counted / per-pair bound, S=1024 full, 64 tiles: max {ratio:.3f}, largest {old.max():.3g} -> {new.max():.3g}"
    )
    assert ratio < 0.75
    kw = dict(afr._bound_kw(q, k, v, False, 32**-0.5, 16), dot=ab.TF32X3_H100)
    w = torch.full((3,), 0.5, dtype=F64)
    every = ar.forward_counted_bound(w, w * 1e-5, w * 1e-6, 1024, **kw)
    assert bool((every > ab.attention_forward_running_bound(w, w * 1e-5, score_perturbation=w * 1e-6, **kw)).all())
    with pytest.raises(ValueError, match="changes"):
        ar.forward_counted_bound(w, w, w, -1, **kw)


@pytest.mark.interpreter
def test_interpreter_within_the_counted_bound(monkeypatch):
    """With ``kernel_dot`` the H100's 3xTF32 model, S = 512 (32 key tiles of 16), full and causal: the
    interpreter's output within ``forward_per_pair_bounds`` (the smaller of the per-pair and counted
    bounds), which is below 0.8 of the per-pair bound alone (``_row_counted_bound`` off) at its largest (full)."""
    if torch.cuda.is_available():
        pytest.skip("the interpreter's dots")
    pytest.importorskip("triton")
    from ojas_kernels.attention import flash_attention_forward

    q, k, v = _inputs(1, 512, 32, 7)
    scale = 32**-0.5
    monkeypatch.setattr(ae, "kernel_dot", lambda device_type, dt: ab.TF32X3_H100)
    for causal in (False, True):
        out, _ = flash_attention_forward(q, k, v, causal, scale, None)
        got = afr.forward_per_pair_bounds(q, k, v, causal, scale)[0]
        err = (out.to(F64) - ae.exact_attention(q, k, v, causal, scale)).abs()
        assert bool((err <= got).all())
        with monkeypatch.context() as m:
            m.setattr(afr, "_row_counted_bound", lambda w, *_: torch.full_like(w, math.inf))
            old = afr.forward_per_pair_bounds(q, k, v, causal, scale)[0]
        assert bool((got <= old).all())
        print(
            f"causal={causal}: largest bound {old.max():.3g} -> {got.max():.3g}, max err / bound {(err / got).max():.3g}"
        )
        if not causal:
            assert got.max().item() < 0.8 * old.max().item()
