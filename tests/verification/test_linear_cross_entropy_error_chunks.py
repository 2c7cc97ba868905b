"""The cross-entropy verification helpers over blocks of the vocabulary (issue 28: the benchmark at
N = 16384, D = 4096, V = 128256 on an 80 GB GPU).

``gradient_sums``, ``gradient_bounds`` and ``gradient_posteriori_bounds`` inflate the certified dW sums
and evaluate the [V, D] bounds ``chunk_size`` vocabulary rows at a time, and ``matmul_upper``
certifies its product in place. The guarantee tested here is bitwise: every float64 product keeps
its one full-shape call (a BLAS's sum order may depend on the shape), and only entry-by-entry
operations are split, so each result equals the one-block result (``chunk_size >= V``) bit for bit
at any block size (1, a non-divisor of V, V), with ignored tokens, several token blocks, the
softcap, the measured logits, and the oracle's coefficients or the hand formulas. The 3-product
bounds take no bias.
"""

from __future__ import annotations

import pytest
import torch

from ojas_ref.verification import linear_cross_entropy_error as lce
from ojas_ref.verification.bounds import certified as cb
from ojas_ref.verification.bounds import common

F64 = torch.float64
N, D, V = 21, 12, 103  # V = 103: a prime, chunk 7 leaves a short last block
CHUNKS = (1, 7, 64, V)


@pytest.fixture(autouse=True)
def _token_blocks(monkeypatch):
    """Several token blocks (the dW sums accumulate and inflate over them)."""
    monkeypatch.setattr(lce, "ROW_CHUNK", 8)


@pytest.fixture(params=["oracle", "hand"])
def formulas(request, monkeypatch):
    """The bounds' coefficients from the oracle (skipped without it) or from the hand formulas."""
    if request.param == "oracle" and not common.oracle_bounds_available():
        pytest.skip("needs the oracle (make -C extraction)")
    monkeypatch.setitem(common._oracle_state, "available", request.param == "oracle")
    return request.param


def _inputs(dtype: torch.dtype = torch.float32):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(N, D, generator=gen).to(dtype)
    w = (0.4 * torch.randn(V, D, generator=gen)).to(dtype)
    target = torch.randint(0, V, (N,), generator=gen)
    target[::4] = -100
    return x, w, target


def _assert_bitwise(got, want) -> None:
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, t in zip(got, want):
            _assert_bitwise(g, t)
        return
    assert got.shape == want.shape and got.dtype == want.dtype
    assert torch.equal(got.view(torch.int64), want.contiguous().view(torch.int64))  # bits, -0.0 included


@pytest.mark.parametrize("softcap", [None, 5.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gradient_sums_blocks_bitwise(softcap, dtype):
    x, w, target = _inputs(dtype)
    whole = lce.gradient_sums(x, w, target, softcap=softcap, chunk_size=V)
    assert len(whole[1]) == (3 if softcap is None else 5) and whole[1][0].shape == (V, D)
    for chunk in CHUNKS[:-1] + (10 * V,):
        _assert_bitwise(lce.gradient_sums(x, w, target, softcap=softcap, chunk_size=chunk), whole)


@pytest.mark.parametrize("softcap", [None, 30.0])
def test_gradient_bounds_blocks_bitwise(softcap, formulas):
    x, w, target = _inputs()
    whole = lce.gradient_bounds(x, w, target, softcap=softcap, chunk_size=V)
    assert whole[1].shape == (V, D) and bool((whole[1] > 0).all())
    for chunk in CHUNKS[:-1]:
        _assert_bitwise(lce.gradient_bounds(x, w, target, softcap=softcap, chunk_size=chunk), whole)


@pytest.mark.parametrize("measured", [False, True])
def test_gradient_posteriori_bounds_blocks_bitwise(measured, formulas):
    x, w, target = _inputs(torch.bfloat16)
    logits = (x.float() @ w.float().t()).to(x.dtype) if measured else None
    kw = dict(logits=logits, storage_rounding="truncate")
    whole = lce.gradient_posteriori_bounds(x, w, target, chunk_size=V, **kw)
    assert whole[1].shape == (V, D) and bool((whole[1] > 0).all())
    for chunk in CHUNKS[:-1]:
        _assert_bitwise(lce.gradient_posteriori_bounds(x, w, target, chunk_size=chunk, **kw), whole)


def test_posteriori_sums_are_those_of_gradient_sums():
    """The a-posteriori bound's T and Ha (its own pass, without the sums of P) are gradient_sums'."""
    x, w, target = _inputs()
    (s_h, t_h, ha_h), (s_w, t_w, ha_w) = lce.gradient_sums(x, w, target, chunk_size=5)
    (n_h, u_h, hb_h), (n_w, u_w, hb_w) = lce._gradient_sums(x, w.to(F64), target, -100, None, 5, prob=False)
    assert n_h is None and n_w is None
    _assert_bitwise((u_h, hb_h, u_w, hb_w), (t_h, ha_h, t_w, ha_w))


def test_dw_sums_are_certified():
    """The dW sums over the vocabulary blocks and token blocks stay above the float64 P^T |H|,
    |G|^T |H| and colsum |H_kept| over the kept tokens (within 1e-12 of the exact sums): no block is
    dropped or counted short."""
    x, w, target = _inputs()
    (_, _, _), (s_w, t_w, ha_w) = lce.gradient_sums(x, w, target, chunk_size=7)
    h, kept = x.to(F64), (target != -100).to(F64)[:, None]
    p = torch.softmax(h @ w.to(F64).t(), dim=1) * kept
    g = p.clone()
    rows = (target != -100).nonzero().squeeze(1)
    g[rows, target[rows]] -= 1
    ha = h.abs() * kept
    for up, ref in ((s_w, p.t() @ ha), (t_w, g.abs().t() @ ha), (ha_w, ha.sum(0).expand(V, -1))):
        assert bool((up >= ref * (1 - 1e-12)).all())


@pytest.mark.parametrize("shape", [((5, 7), (7, 3)), ((2, 4, 9), (9, 6)), ((6, 0), (0, 4))])
def test_matmul_upper_in_place_is_add_then_mul_upper(shape):
    """matmul_upper's product certified in place: the same bits as add_upper then mul_upper on it."""
    gen = torch.Generator().manual_seed(1)
    a, b = (torch.rand(s, generator=gen, dtype=F64) for s in shape)
    if a.numel():
        a[..., 1, :] = 0  # an exact zero row
    g, c = cb._dot_consts(a.shape[-1])
    want = cb.mul_upper(cb.add_upper(a @ b, common._float_up(c)), common._float_up(1 / (1 - g)))
    want = want.masked_fill((a == 0).all(-1, keepdim=True) | (b == 0).all(-2, keepdim=True), 0.0)
    _assert_bitwise(cb.matmul_upper(a, b), want)


@pytest.mark.parametrize("chunk", [0, -3, 2.5, True, "8", None])
def test_bad_chunk_size_raises(chunk):
    x, w, target = _inputs()
    for fn in (lce.gradient_sums, lce.gradient_bounds, lce.gradient_posteriori_bounds):
        with pytest.raises(ValueError, match="chunk_size must be an int >= 1"):
            fn(x, w, target, chunk_size=chunk)
