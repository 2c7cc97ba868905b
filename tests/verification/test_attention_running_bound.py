"""The running accumulation bounds of the attention backward (``Ojas.Attention.Float.RunningAccError``;
ojas_ref/verification/bounds/attention_running.py and the running parts of
ojas_ref/verification/attention_error.py): ``run_err``'s float64 evaluation against the exact rational
fold ``run_err_split`` (and a mutant without the ``g_acc a`` term, caught), :class:`RunningAcc` and
:func:`running_error_prefix` against the exact premise and each other, both equal to the one-constant form
at ``g_acc == g_dot``, and the running dV / dK / dQ bounds against the interpreter's kernels (within, and at
most the a-priori bounds), much tighter over many tiles."""

from __future__ import annotations

import math
import os
import random
from fractions import Fraction

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

pytest.importorskip("triton")

from ojas_kernels.attention import flash_attention, flash_attention_forward  # noqa: E402
from ojas_ref.verification import attention_error as ae  # noqa: E402
from ojas_ref.verification import score_errors as se  # noqa: E402
from ojas_ref.verification.bounds import attention as ab  # noqa: E402
from ojas_ref.verification.bounds import attention_running as ar  # noqa: E402
from ojas_ref.verification.bounds import certified as cb  # noqa: E402
from ojas_ref.verification.bounds.common import _float_up  # noqa: E402

F64 = torch.float64
INF = torch.tensor(math.inf, dtype=F64)


def _exact_run_err(g_acc: Fraction, g_dot: Fraction, ga: Fraction, a_s: list, c_s: list) -> Fraction:
    """``run_err_split g_acc g_dot ga as cs`` over exact rationals: ``fold_left2 (fun e a c => (1 + g_acc) e
    + g_acc a + g_dot c + ga) as cs 0``."""
    e = Fraction(0)
    for a, c in zip(a_s, c_s, strict=True):
        e = (1 + g_acc) * e + g_acc * Fraction(a) + g_dot * Fraction(c) + ga
    return e


def _random_constants(rng: random.Random, split: bool) -> tuple[Fraction, Fraction, Fraction]:
    """``(g_acc, g_dot, ga)`` exact rationals: ``g_acc = g_dot`` unless ``split`` (then ``g_acc`` up to
    2^-10 times ``g_dot``, as float32's ``u`` against a dot's ``gamma``)."""
    g_dot = Fraction(rng.randint(1, 2**20), 2 ** rng.randint(30, 60))
    g_acc = g_dot / rng.randint(1, 2**10) if split else g_dot
    return g_acc, g_dot, Fraction(rng.randint(0, 2**10), 2 ** rng.randint(100, 160))


def _run_err_is_upper(fn) -> bool:
    """Whether ``fn`` (``run_err``'s signature) is at least the exact fold on 200 random folds of
    random lengths, magnitudes and constants (exact rationals rounded up first; half of them split)."""
    rng = random.Random(0)
    for i in range(200):
        n = rng.randint(1, 40)
        a_s, c_s = ([rng.uniform(0, 1) * 2.0 ** rng.randint(-30, 30) for _ in range(n)] for _ in range(2))
        g = _random_constants(rng, i % 2 == 1)
        got = fn(torch.tensor(a_s, dtype=F64), torch.tensor(c_s, dtype=F64), *(_float_up(x) for x in g))
        if Fraction(got.item()) < _exact_run_err(*g, a_s, c_s):
            return False
    return True


def test_run_err_is_at_least_the_exact_fold():
    assert _run_err_is_upper(ar.run_err)


def test_run_err_mutant_without_g_acc_a_is_caught(monkeypatch):
    """Dropping ``g_acc a`` from the step (the accumulator's own error on the running sum) goes below the
    exact fold: the check above fails on it."""

    def mutant(e, a, c, g_acc, g_dot, g_abs):
        return cb.add_upper(cb.add_upper(e, cb.mul_upper(e, g_acc)), cb.add_upper(cb.mul_upper(c, g_dot), g_abs))

    monkeypatch.setattr(ar, "run_err_step", mutant)
    assert not _run_err_is_upper(ar.run_err)


def test_run_err_bad_arguments_raise():
    one = torch.tensor([1.0], dtype=F64)
    with pytest.raises(ValueError, match="a_s"):
        ar.run_err(torch.tensor([1.0, -1.0], dtype=F64), torch.ones(2, dtype=F64), 1e-6, 1e-6, 0.0)
    with pytest.raises(ValueError, match="c_s"):
        ar.run_err(one, one * math.nan, 1e-6, 1e-6, 0.0)
    with pytest.raises(ValueError, match="one shape"):
        ar.run_err(one, torch.ones(2, dtype=F64), 1e-6, 1e-6, 0.0)
    for i, name in enumerate(("g_acc", "g_dot", "g_abs")):
        g = [1e-6, 1e-6, 0.0]
        g[i] = -1e-6
        with pytest.raises(ValueError, match=name):
            ar.run_err(one, one, *g)


def _old_step(e: torch.Tensor, b: torch.Tensor, g: float, ga: float) -> torch.Tensor:
    """The one-constant ``run_err``'s step as evaluated before the split: ``(1 + g) e + g b + ga`` rounded up."""
    return ar.up_add(ar.up_add(e, ar.up_mul(e, g)), ar.up_add(ar.up_mul(b, g), ga))


def _old_running_acc(z, err, a, r, active, g: float, ga: float) -> torch.Tensor:
    """The one-constant :class:`RunningAcc` (``b_t = a_t + c_t`` in one rounding), tiles along dim 0."""
    zs, ze, rs, e = (torch.zeros_like(a[0]) for _ in range(4))
    for t in range(z.shape[0]):
        b = ar.up_add(ar.up_add(ar.up_add(zs.abs(), ze), rs), ar.up_add(a[t], r[t]))
        e = torch.where(active[t], _old_step(e, b, g, ga), e)
        z_new = zs + z[t]
        ze = torch.where(active[t], ar.up_add(ar.up_add(ze, err[t]), ar.up_mul(z_new.abs(), cb.U64)), ze)
        zs, rs = torch.where(active[t], z_new, zs), torch.where(active[t], ar.up_add(rs, r[t]), rs)
    return ar.up_add(e, rs)


def _old_prefix(z, err, a, r, n_run, g: float, ga: float) -> torch.Tensor:
    """The one-constant :func:`running_error_prefix` as evaluated before the split."""
    t = z.shape[0]
    g2, c2 = cb._dot_consts(t)
    z_abs = z.cumsum(0).abs() + z.abs().cumsum(0) * _float_up(g2) + err.cumsum(0) + _float_up(c2)
    r_in = r.cumsum(0)
    b = a + r
    b[1:] += z_abs[:-1] + r_in[:-1]
    grow = 1 + Fraction(g)
    w, big = ar._powers_up(1 / grow, t, b.device)[:, None], ar._powers_up(grow, t, b.device)[:, None]
    e = ((b * g + ga) * w).cumsum(0) * big
    idx = (n_run - 1)[None]
    total = (e.gather(0, idx) + r_in.gather(0, idx))[0]
    return ar.up_add(ar.up_mul(total, _float_up(1 / (1 - Fraction(2 * t + 40, 2**53)))), ar._UNDERFLOW)


def _tiles(seed: int, n_tiles: int = 12, n: int = 8, entries: int = 5):
    """Random items [tiles, n, entries] ``z`` (magnitudes 2^-8 .. 2^8 per tile) and ``r``, and the float64
    per-tile ``(sum z, its dot_error, sum |z| up, sum r up)`` :class:`RunningAcc` takes."""
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(n_tiles, n, entries, generator=gen, dtype=F64) * torch.exp2(
        torch.randint(-8, 8, (n_tiles, 1, entries), generator=gen).to(F64)
    )
    r = torch.rand(n_tiles, n, entries, generator=gen, dtype=F64) * 1e-3
    a = cb.sum_upper(z.abs(), 1)
    return z, r, (z.sum(1), cb.dot_error(a, n), a, cb.sum_upper(r, 1))


def test_one_constant_form_at_g_acc_equal_g_dot():
    """At ``g_acc == g_dot`` every evaluation is the one-constant form's, bit for bit: the step and the fold
    at ``b = a + c``, :class:`RunningAcc` and :func:`running_error_prefix` (two sets of constants, random
    tiles, entries running 1 .. 12 of them); with ``g_acc < g_dot`` the closed form is smaller past the
    first tile."""
    rng = random.Random(7)
    gen = torch.Generator().manual_seed(7)
    e, a, c = (torch.rand(50, generator=gen, dtype=F64) * 2.0**10 for _ in range(3))
    for seed in range(2):
        g, _, ga = (_float_up(x) for x in _random_constants(rng, False))
        assert torch.equal(ar.run_err_step(e, a, c, g, g, ga), _old_step(e, ar.up_add(a, c), g, ga))
        ref = torch.zeros(5, dtype=F64)
        for t in range(10):
            ref = _old_step(ref, ar.up_add(a.view(5, 10)[:, t], c.view(5, 10)[:, t]), g, ga)
        assert torch.equal(ar.run_err(a.view(5, 10), c.view(5, 10), g, g, ga), ref)
        z, r, sums = _tiles(seed)
        n_run = torch.randint(1, z.shape[0] + 1, (z.shape[-1],), generator=gen)
        active = torch.arange(z.shape[0])[:, None] < n_run
        acc = ar.RunningAcc((z.shape[-1],), torch.device("cpu"), g, g, ga)
        for t in range(z.shape[0]):
            acc.step(*(x[t] for x in sums), active[t])
        assert torch.equal(acc.error(), _old_running_acc(*sums, active, g, ga))
        old = _old_prefix(*sums, n_run, g, ga)
        assert torch.equal(ar.running_error_prefix(*sums, n_run, g, g, ga), old)
        split = ar.running_error_prefix(*sums, n_run, g / 64, g, ga)
        assert (split <= old).all() and (split < old)[n_run > 1].all()


@pytest.mark.parametrize(
    "g", [(Fraction(3, 2**20),) * 2, (Fraction(1, 2**24), Fraction(3, 2**20))], ids=["one", "split"]
)
@pytest.mark.parametrize("prefix", [False, True], ids=["steps", "closed-form"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_running_acc_is_at_least_the_exact_premise(prefix, g, seed):
    """:class:`RunningAcc` (one tile at a time, inactive tiles left alone) and
    :func:`running_error_prefix` (every tile at once, the first ``n`` tiles of each entry) fed float64
    tile sums (within ``dot_error`` of the exact ones) give at least ``run_err_split g_acc g_dot ga as cs +
    sum r`` at the EXACT ``a_t = |Z_t| + R_t``, ``c_t = sum_tile (|z| + r)`` over the tiles run, and the two
    agree (``g_acc = g_dot`` and ``g_acc = u`` below ``g_dot``)."""
    gen = torch.Generator().manual_seed(100 + seed)
    z, r, sums = _tiles(seed)
    n_tiles, entries = z.shape[0], z.shape[-1]
    if prefix:
        n_run = torch.randint(1, n_tiles + 1, (entries,), generator=gen)
        active = torch.arange(n_tiles)[:, None] < n_run
    else:
        active = torch.rand(n_tiles, entries, generator=gen) < 0.7
    g_acc, g_dot, ga = *g, Fraction(1, 2**140)
    g_up = tuple(_float_up(x) for x in (g_acc, g_dot, ga))
    acc = ar.RunningAcc((entries,), torch.device("cpu"), *g_up)
    for t in range(n_tiles):
        acc.step(*(x[t] for x in sums), active[t])
    got = acc.error()
    if prefix:
        closed = ar.running_error_prefix(*sums, n_run, *g_up)
        torch.testing.assert_close(closed, got, rtol=1e-12, atol=0)
        got = closed
    for c in range(entries):
        zs, rs, a_s, c_s = Fraction(0), Fraction(0), [], []
        for t in range(n_tiles):
            if not active[t, c]:
                continue
            tz = [Fraction(x) for x in z[t, :, c].tolist()]
            tr = [Fraction(x) for x in r[t, :, c].tolist()]
            a_s.append(abs(zs) + rs)
            c_s.append(sum(abs(x) for x in tz) + sum(tr))
            zs, rs = zs + sum(tz), rs + sum(tr)
        assert Fraction(got[c].item()) >= _exact_run_err(g_acc, g_dot, ga, a_s, c_s) + rs, c


def test_tile_orders_follow_the_kernels():
    """The dK/dV kernel's first query row for a key (``_query_tiles``' ``lo``) and the dQ kernel's key
    loop end (``_key_tiles``' ``hi``), without a window."""
    first = ae._first_query_tile(70, 16, 32, True, torch.device("cpu"))
    assert first[:32].eq(0).all() and first[32:64].eq(32).all() and first[64:].eq(64).all()
    assert ae._first_query_tile(70, 16, 32, False, torch.device("cpu")).eq(0).all()
    hi = ae._last_key_end(40, 50, 16, True, torch.device("cpu"))
    assert hi[:16].eq(16).all() and hi[16:32].eq(32).all() and hi[32:].eq(40).all()
    assert ae._last_key_end(40, 30, 16, True, torch.device("cpu"))[16:].eq(30).all()
    assert ae._last_key_end(40, 50, 16, False, torch.device("cpu")).eq(50).all()


# ---------------------------------------------------------------------------
# The bounds against the interpreter's kernels
# ---------------------------------------------------------------------------


def _inputs(hq: int, hkv: int, s: int, e: int, dtype: torch.dtype, seed: int = 3):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, h, s, e, generator=gen).to(dtype) for h in (hq, hkv, hkv))
    return q, k, v, torch.randn(1, hq, s, e, generator=gen).to(dtype)


def _dv(q, k, v, do, causal, scale) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(kernel's dV error, running bound, a-priori bound)."""
    vv = v.clone().requires_grad_()
    flash_attention(q, k, vv, causal, scale).backward(do)
    ex, pad = ae.exact_dv(q, k, do, causal, scale)
    c = ae._backward_constants(q, k, causal, scale)
    lse_err = ae._row_lse_errors(q, k, causal, scale, c, v.shape[-1])  # dv_error_bound's premise
    run = ae._dv_running_bound(q, k, do, pad, causal, scale, c, lse_err)
    keep = ae._dv_running_bound
    ae._dv_running_bound = lambda *a, **kw: INF
    try:
        old = ae.dv_error_bound(q, k, do, pad, causal, scale)
    finally:
        ae._dv_running_bound = keep
    assert torch.equal(ae.dv_error_bound(q, k, do, pad, causal, scale), torch.minimum(old, run))
    return (vv.grad.to(F64) - ex).abs(), run, old


def _grads(q, k, v, do, causal, scale, inputs) -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """{"dq", "dk"}: (kernel's error, running bound, a-priori bound)."""
    out, lse = flash_attention_forward(q, k, v, causal, scale, None)
    qq, kk = q.clone().requires_grad_(), k.clone().requires_grad_()
    flash_attention(qq, kk, v, causal, scale).backward(do)
    keep, run = ae._grad_running_bounds, {}

    def spy(*args, **kwargs):
        run.update(keep(*args, **kwargs))
        return run

    ae._grad_running_bounds = spy
    try:
        got = ae.grad_error_bounds(q, k, v, do, out, lse, causal, scale, inputs)
        ae._grad_running_bounds = lambda *a, **kw: dict(dq=INF, dk=INF)
        old = ae.grad_error_bounds(q, k, v, do, out, lse, causal, scale, inputs)
    finally:
        ae._grad_running_bounds = keep
    res = {}
    for name, g in (("dq", qq.grad), ("dk", kk.grad)):
        assert torch.equal(got[f"{name}_bound"], torch.minimum(old[f"{name}_bound"], run[name]))
        res[name] = ((g.to(F64) - got[name]).abs(), run[name], old[f"{name}_bound"])
    return res


def _check(label: str, name: str, err: torch.Tensor, run: torch.Tensor, old: torch.Tensor) -> float:
    """The kernel within the running bound entry by entry, the running bound at most the a-priori one;
    returns the ratio of their maxima (printed)."""
    ratio = (run.max() / old.max()).item()
    print(
        f"{label} {name}: observed max {err.max().item():.3e}, running bound max {run.max().item():.3e}, "
        f"a-priori {old.max().item():.3e}, running / a-priori {ratio:.3f} (entries {(run / old).min().item():.3f}"
        f"..{(run / old).max().item():.3f}), tightness {run.max().item() / max(err.max().item(), 1e-300):.3g}"
    )
    assert (err <= run).all(), (label, name, (err - run).max().item())
    assert (run <= old).all(), (label, name, (run / old).max().item())
    return ratio


CASES = [  # (dtype, hq, hkv, S, E, causal); the interpreter's tiles are 16 x 16
    (torch.float32, 2, 2, 64, 32, False),
    (torch.float32, 2, 2, 64, 32, True),
    (torch.float32, 4, 2, 90, 32, True),
    (torch.bfloat16, 2, 1, 50, 32, False),
    (torch.float32, 2, 1, 1, 16, True),
]


@pytest.mark.interpreter
@pytest.mark.parametrize("model", ["fp32", "tf32x3_h100"])
@pytest.mark.parametrize(
    "dtype,hq,hkv,s,e,causal",
    CASES,
    ids=[f"{str(c[0])[6:]}-S{c[3]}-{'causal' if c[5] else 'full'}-gqa{c[1] // c[2]}" for c in CASES],
)
def test_running_bounds_hold_and_are_at_most_the_a_priori_ones(dtype, hq, hkv, s, e, causal, model, monkeypatch):
    """dV, dQ, dK of the interpreter's kernels within the running bounds (full, causal, GQA, S cut by the
    tiles, S = 1), each at most the a-priori bound; with "tf32x3_h100" the bounds take the H100's 3xTF32
    model (``TF32X3_H100``: larger errors than the interpreter's float32 dots, so still bounds) for
    every dot and accumulation, and dQ/dK's "proved" inputs take the running bound too."""
    if torch.cuda.is_available():
        pytest.skip("the interpreter's dots")
    if model != "fp32":
        monkeypatch.setattr(ae, "kernel_dot", lambda device_type, dtype: ab.TF32X3_H100)
    q, k, v, do = _inputs(hq, hkv, s, e, dtype)
    scale = 1.0 / math.sqrt(e)
    label = f"{model} {dtype} S={s} causal={causal} gqa={hq // hkv}"
    _check(label, "dv", *_dv(q, k, v, do, causal, scale))
    for inputs in ("measured",) if model == "fp32" else ("measured", "proved"):
        for name, t in _grads(q, k, v, do, causal, scale, inputs).items():
            _check(f"{label} {inputs}", name, *t)


@pytest.mark.interpreter
def test_running_bounds_much_tighter_over_many_tiles(monkeypatch):
    """S = 512 in tiles of 16, 4 query heads on one key head (128 query tiles per key, 32 key tiles per
    query), the H100's 3xTF32 model: the accumulation's a-priori ``((1 + g_rel)^t - 1) S`` dominates the
    old bounds, the running ones are several times smaller, and the kernel within them."""
    if torch.cuda.is_available():
        pytest.skip("the interpreter's dots")
    monkeypatch.setattr(ae, "kernel_dot", lambda device_type, dtype: ab.TF32X3_H100)
    q, k, v, do = _inputs(4, 1, 512, 16, torch.float32, seed=5)
    scale = 0.25
    assert _check("S=512 causal gqa4", "dv", *_dv(q, k, v, do, True, scale)) < 0.5
    for name, t in _grads(q, k, v, do, True, scale, "measured").items():
        assert _check("S=512 causal gqa4 measured", name, *t) < 0.5


def _dp_worst(do: torch.Tensor, v: torch.Tensor, dot) -> torch.Tensor:
    """The dot model's worst case ``gp_rel sum_c |dO_ic v_jc| + gp_abs`` per pair, float64."""
    g_rel, g_abs = ab.dot_error_constants(dot, v.shape[-1])
    return (do.to(F64).abs() @ v.to(F64).abs().transpose(-1, -2)) * float(g_rel) + float(g_abs)


@pytest.mark.parametrize("causal", [False, True])
def test_pair_dp_errors_bound_both_kernels_dots(causal):
    """``_pair_dp_errors`` at the H100's 3xTF32 model: at least the model's actual error of BOTH kernels'
    ``dp`` dots (``dot(v, dO^T)``, ``dot(dO, v^T)``) against the float64 dot on every pair, far below the
    worst case at the pairs' own sums (the tightening), the worst case itself past a causal block's last row;
    "fp32" (no emulation) the worst case."""
    gen = torch.Generator().manual_seed(3)
    do, v = torch.randn(1, 2, 24, 64, generator=gen), torch.randn(1, 2, 40, 64, generator=gen) * 3
    r0, dot = 8, ab.TF32X3_H100
    pd_up = cb.matmul_upper(do.to(F64).abs(), v.to(F64).abs().transpose(-1, -2))
    got = ae._pair_dp_errors(r0, do, v, pd_up, causal, dot)
    exact = do.to(F64) @ v.to(F64).transpose(-1, -2)
    for m in (se.model_dots(do, v, dot), se.model_dots(v, do, dot).transpose(-1, -2)):
        assert ((m - exact).abs() <= got).all()
    worst = _dp_worst(do, v, dot)
    n = r0 + do.shape[-2] if causal else v.shape[-2]
    assert (got[..., :n] <= worst[..., :n] * (1 + 1e-12)).all()
    assert got[..., :n].max() < 0.1 * worst[..., :n].max()
    if causal:
        assert torch.allclose(got[..., n:], worst[..., n:], rtol=1e-12, atol=0)
    assert torch.allclose(ae._pair_dp_errors(r0, do, v, pd_up, causal, "fp32"), _dp_worst(do, v, "fp32"), rtol=1e-12)


@pytest.mark.interpreter
def test_per_pair_dp_error_tightens_dk_dq(monkeypatch):
    """The running dK / dQ bounds with the per-pair ``dp`` errors (``dk_error_acc_running_pp``,
    ``dq_error_acc_running_pp``) below those with every pair's error at the worst case of the largest
    ``sum |dO v|`` (``dk_error_acc_running``'s uniform ``eP``), and the kernel within them (causal GQA, the
    H100's 3xTF32 model, "measured" inputs)."""
    if torch.cuda.is_available():
        pytest.skip("the interpreter's dots")
    monkeypatch.setattr(ae, "kernel_dot", lambda device_type, dtype: ab.TF32X3_H100)
    q, k, v, do = _inputs(4, 2, 64, 32, torch.float32, seed=2)
    scale = 1.0 / math.sqrt(32)
    new = _grads(q, k, v, do, True, scale, "measured")
    keep = ae._pair_dp_errors
    monkeypatch.setattr(
        ae,
        "_pair_dp_errors",
        lambda r0, d, vv, pd_up, causal, dot, runs=None: torch.full_like(
            pd_up, keep(0, d, vv, pd_up, False, "fp32").max().item()
        ),
    )
    old = _grads(q, k, v, do, True, scale, "measured")
    for name in ("dq", "dk"):
        err, run, _ = new[name]
        assert (err <= run).all()
        assert (run <= old[name][1]).all()
        assert run.max() < 0.9 * old[name][1].max(), (name, (run.max() / old[name][1].max()).item())
