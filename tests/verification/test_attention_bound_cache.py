"""The cache the attention bounds share (``cache=``: :func:`~ojas_ref.verification.attention_error._cached`) and the
one pass of both gradient inputs (:func:`~ojas_ref.verification.attention_error.grad_error_bounds_modes`): at the
H100's 3xTF32 dot model, the same values bit for bit as the bounds computed without them (the model's scores and
``dp`` dots of every pair from ``score_errors.model_scores_all`` / ``model_dots_all``, the forward's bounds, the
constants), with causal and full masks, GQA, a sequence past one chunk of 256 rows and not a multiple of the tiles,
and row blocks starting inside a chunk; a cache met with other inputs raises ``ValueError``. CPU only."""

from __future__ import annotations

import pytest
import torch

from _attention_cases import attention_inputs, interpreter_at_h100_dots
from ojas_ref.verification import attention_error as ae
from ojas_ref.verification import attention_forward_running as afr
from ojas_ref.verification import score_errors as se
from ojas_ref.verification.bounds import attention as ab

F64 = torch.float64


def _small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Row blocks of a few tiles, so that blocks start inside the score errors' chunks of 256 rows."""
    monkeypatch.setattr(ae, "_block_rows", lambda row_size, bm: 3 * bm)
    monkeypatch.setattr(afr, "_block_rows", lambda b_h, sk, ev, tiles, block_m: 3 * block_m)


@pytest.mark.parametrize("causal", [False, True])
def test_cached_scores_and_dp_dots_are_the_computed_ones(monkeypatch, causal):
    """``score_error_block`` from ``model_scores_all``'s entries (every operand order, a GQA head group, rows from
    r0 = 100 across a chunk boundary) and ``_pair_dp_errors`` from ``model_dots_all``'s equal the computed ones."""
    interpreter_at_h100_dots(monkeypatch)
    q, k, v, do = attention_inputs(4, 2, 300, 32, 11)
    scale, dot, cache, rows = 32**-0.5, ab.TF32X3_H100, {}, slice(100, 290)
    for gi in (None, 1):
        qh = q if gi is None else q.unflatten(1, (2, -1))[:, :, gi]
        kk = k.repeat_interleave(2, 1) if gi is None else k
        for operands in se.OPERANDS:
            scores = ae._score_slices(q, k, causal, scale, dot, operands, cache, rows, gi)
            got = se.score_error_block(rows.start, qh[:, :, rows], kk, causal, scale, dot, operands, scores)
            want = se.score_error_block(rows.start, qh[:, :, rows], kk, causal, scale, dot, operands)
            assert torch.equal(got, want), (gi, operands)
    dh = do.unflatten(1, (2, -1))[:, :, 1][:, :, rows]
    pd_up = ae.cb.matmul_upper(dh.to(F64).abs(), v.to(F64).abs().transpose(-1, -2))
    runs = ae._dp_slices(q, do, v, causal, dot, cache, rows, 1)
    got = ae._pair_dp_errors(rows.start, dh, v, pd_up.clone(), causal, dot, runs)
    want = ae._pair_dp_errors(rows.start, dh, v, pd_up.clone(), causal, dot)
    visible = torch.arange(300)[None, :] <= torch.arange(rows.start, rows.stop)[:, None]
    assert torch.equal(got[..., visible], want[..., visible]) if causal else torch.equal(got, want)
    assert bool((got >= want).all())  # the pairs not computed (masked) keep the worst case


@pytest.mark.parametrize("causal", [False, True])
def test_bounds_with_a_cache_are_the_bounds_without(monkeypatch, causal):
    """forward_posteriori_bound, lse_error_bound, dv_error_bound with one cache equal their values without one; the
    running dK/dQ bounds with the cache equal those without; grad_error_bounds_modes equals grad_error_bounds of
    each input alone."""
    interpreter_at_h100_dots(monkeypatch)
    _small_blocks(monkeypatch)
    q, k, v, do = attention_inputs(4, 2, 300, 32, 12)
    scale, cache = 32**-0.5, {}
    out = ae.exact_attention(q, k, v, causal, scale).to(q.dtype)
    lse = ae.exact_lse(q, k, causal, scale).to(q.dtype)
    _, pad = ae.exact_dv(q, k, do, causal, scale)
    for f, args in (
        (ae.forward_posteriori_bound, (q, k, v, causal, scale)),
        (ae.lse_error_bound, (q, k, causal, scale)),
        (ae.dv_error_bound, (q, k, do, pad, causal, scale)),
    ):
        with_cache = f(*args, cache=cache)
        plain = f(*args)
        assert torch.equal(with_cache, plain) if isinstance(plain, torch.Tensor) else with_cache == plain, f.__name__
    c = ae._backward_constants(q, k, causal, scale, 32)
    ed, lse_err = ae._grad_premises(q, k, v, do, out, lse, causal, scale, "measured", c)
    ex = ae.exact_grads(q, k, v, do, causal, scale, ed)
    plain = ae._grad_running_bounds(q, k, v, do, causal, scale, c, ed, lse_err, ex)
    cached = ae._grad_running_bounds(q, k, v, do, causal, scale, c, ed, lse_err, ex, cache)
    assert all(torch.equal(plain[n], cached[n]) for n in ("dq", "dk"))
    both = ae.grad_error_bounds_modes(q, k, v, do, out, lse, causal, scale, ("proved", "measured"), cache=cache)
    for mode in ("proved", "measured"):
        alone = ae.grad_error_bounds(q, k, v, do, out, lse, causal, scale, mode)
        assert alone.keys() == both[mode].keys()
        assert all(torch.equal(alone[n], both[mode][n]) for n in alone), mode


def test_a_cache_of_other_inputs_raises(monkeypatch):
    """A cache filled for some inputs refuses others (and inputs changed in place since)."""
    interpreter_at_h100_dots(monkeypatch)
    q, k, v, _ = attention_inputs(2, 2, 40, 16, 13)
    cache = {}
    ae.forward_posteriori_bound(q, k, v, True, 0.25, cache=cache)
    with pytest.raises(ValueError, match="other inputs"):
        ae.lse_error_bound(q.clone(), k, True, 0.25, cache=cache)
    k.mul_(2.0)
    with pytest.raises(ValueError, match="other inputs"):
        ae.forward_posteriori_bound(q, k, v, True, 0.25, cache=cache)
    with pytest.raises(ValueError, match="inputs must not repeat"):
        ae.grad_error_bounds_modes(q, k, v, q, q, q[..., 0], True, 0.25, ("proved", "proved"))
