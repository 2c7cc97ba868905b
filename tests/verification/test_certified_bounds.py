"""Certified float64 sums (ojas_ref/verification/bounds/certified.py) against exact rationals.

The a-posteriori sums of the attention and cross-entropy bounds are certified upper bounds of
the exact real values (``Ojas.FloatModel.CertifiedSum``): here against ``fractions.Fraction``
sums and ``decimal`` exponentials (50 digits) on random and adversarial inputs, the premises on
torch's float64 ``exp``, ``log`` and ``tanh`` measured against ``decimal``, and regressions where
the plain float64 evaluation (the helpers' old one) falls below the exact value.
"""

from __future__ import annotations

import math
from decimal import Decimal, getcontext
from fractions import Fraction

import pytest
import torch

from ojas_ref.verification.bounds import certified as cb

F64 = torch.float64
U = 2.0**-53
getcontext().prec = 60


def exact_sum(t: torch.Tensor, dim: int) -> list[Fraction]:
    rows = t.movedim(dim, -1).reshape(-1, t.shape[dim]).tolist()
    return [sum((Fraction(x) for x in r), Fraction(0)) for r in rows]


def exact_matmul(a: torch.Tensor, b: torch.Tensor) -> list[list[Fraction]]:
    A = [[Fraction(x) for x in r] for r in a.tolist()]
    B = [[Fraction(x) for x in r] for r in b.t().tolist()]
    return [[sum((x * y for x, y in zip(ra, cb_)), Fraction(0)) for cb_ in B] for ra in A]


def dec(x: float | Fraction) -> Decimal:
    x = Fraction(x)
    return Decimal(x.numerator) / Decimal(x.denominator)


def exact_softmax(row: list[Fraction]) -> list[Decimal]:
    """softmax of exact scores (None: masked) in 60-digit decimal."""
    vis = [s for s in row if s is not None]
    m = max(vis)
    e = [None if s is None else (dec(s - m)).exp() for s in row]
    tot = sum(x for x in e if x is not None)
    return [Decimal(0) if x is None else x / tot for x in e]


def _inputs(seed: int) -> list[torch.Tensor]:
    """Nonnegative float64 rows: uniform, wide magnitudes (2^-1000 .. 2^1000), tiny subnormal-range
    terms, the worst orders for a running sum (one large term first, many below its half ulp)."""
    g = torch.Generator().manual_seed(seed)
    out = [torch.rand(7, 1000, generator=g, dtype=F64)]
    out.append(
        torch.exp2(torch.randint(-1000, 1000, (5, 300), generator=g).to(F64))
        * torch.rand(5, 300, generator=g, dtype=F64)
    )
    out.append(torch.rand(4, 2000, generator=g, dtype=F64) * 2.0**-1060)
    big_first = torch.full((3, 3000), 2.0**-53, dtype=F64)
    big_first[:, 0] = 1.0
    out.append(big_first)
    halfulp = torch.full((2, 2049), 2.0**-53 * (1 - 2.0**-52), dtype=F64)
    halfulp[:, 0] = 1.0
    out.append(halfulp)
    out.append(torch.zeros(2, 17, dtype=F64))
    return out


@pytest.mark.parametrize("seed", [0, 1])
def test_sum_upper_and_lower_bracket_the_exact_sum(seed):
    for t in _inputs(seed):
        up, lo, fl = cb.sum_upper(t, 1), cb.sum_lower(t, 1), t.sum(1)
        n = t.shape[1]
        for ex, a, b, f in zip(exact_sum(t, 1), up.tolist(), lo.tolist(), fl.tolist()):
            assert Fraction(b) <= ex <= Fraction(a), (t.shape, float(ex), a, b)
            # not loose: at most (1 + 2 n u) times the float64 sum (one ulp of slack where it is subnormal)
            assert a <= f * (1 + 2 * n * U) or a <= math.nextafter(f, math.inf) or f == 0.0
            if f == 0.0:
                assert a == 0.0


def test_plain_float64_sum_falls_below_the_exact_one():
    """The regression: torch's float64 sum (the helpers' old evaluation) and matmul of one term 1
    then 3000 terms 2^-53 round each addition down to 1; the certified ones do not."""
    t = torch.full((3001,), 2.0**-53, dtype=F64)
    t[0] = 1.0
    ex = exact_sum(t[None], 1)[0]
    assert Fraction(t.sum().item()) < ex
    assert Fraction(cb.sum_upper(t, 0).item()) >= ex
    ones = torch.ones(1, 3001, dtype=F64)
    assert Fraction((t[None] @ ones.t()).item()) < ex
    assert Fraction(cb.matmul_upper(t[None], ones.t()).item()) >= ex


def test_dot_abs_sum_is_certified():
    """linear_cross_entropy_error.dot_abs_sum (the logit bounds' max sum |h w|) was a plain float64
    matmul; on the adversarial row it fell below the exact sum."""
    from ojas_ref.verification.linear_cross_entropy_error import dot_abs_sum

    x = torch.full((2, 3001), 2.0**-53, dtype=F64)
    x[:, 0] = 1.0
    w = torch.ones(3, 3001, dtype=F64)
    ex = exact_sum(x[:1], 1)[0]
    assert Fraction((x.abs() @ w.abs().t()).max().item()) < ex
    assert Fraction(dot_abs_sum(x, w)) >= ex


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matmul_upper_and_dot_error(seed):
    g = torch.Generator().manual_seed(seed)
    cases = [
        (torch.rand(3, 200, generator=g, dtype=F64), torch.rand(200, 4, generator=g, dtype=F64)),
        (
            torch.exp2(torch.randint(-500, 500, (2, 64), generator=g).to(F64)),
            torch.exp2(torch.randint(-400, 400, (64, 3), generator=g).to(F64)),
        ),
        (torch.rand(2, 50, generator=g, dtype=F64) * 2.0**-540, torch.rand(50, 2, generator=g, dtype=F64) * 2.0**-540),
    ]
    for a, b in cases:
        up = cb.matmul_upper(a, b).tolist()
        for r, row in enumerate(exact_matmul(a, b)):
            for c, ex in enumerate(row):
                assert ex <= Fraction(up[r][c])
        # signed: |a @ b - exact| <= dot_error(sum |a b|)
        s = a * torch.where(torch.rand(a.shape, generator=g) < 0.5, -1.0, 1.0).to(F64)
        fl = (s @ b).tolist()
        err = cb.dot_error(cb.matmul_upper(s.abs(), b), a.shape[1]).tolist()
        for r, row in enumerate(exact_matmul(s, b)):
            for c, ex in enumerate(row):
                assert abs(Fraction(fl[r][c]) - ex) <= Fraction(err[r][c])
    with pytest.raises(ValueError):
        cb.matmul_upper(-torch.ones(2, 2, dtype=F64), torch.ones(2, 2, dtype=F64))


def test_bad_inputs_refused():
    for bad in (torch.tensor([1.0, math.inf]), torch.tensor([1.0, math.nan]), torch.tensor([1.0, -1.0])):
        with pytest.raises(ValueError, match="finite"):
            cb.sum_upper(bad.to(F64), 0)
    with pytest.raises(ValueError, match="overflows"):
        cb.sum_upper(torch.full((4,), 1e308, dtype=F64), 0)
    with pytest.raises(ValueError, match="visible"):
        cb.softmax_bounds(torch.full((2, 3), -math.inf, dtype=F64), 0.0)
    with pytest.raises(ValueError, match="score_error"):
        cb.softmax_bounds(torch.zeros(2, 3, dtype=F64), -1.0)
    with pytest.raises(ValueError, match="scores"):
        cb.softmax_bounds(torch.tensor([[0.0, math.inf]], dtype=F64), 0.0)
    with pytest.raises(ValueError):
        cb.gamma64(2**52)


def _score_rows(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(6, 40, generator=g, dtype=F64) * torch.tensor([0.1, 1, 5, 30, 300, 2000], dtype=F64)[:, None]
    s[2, 7:] = -math.inf  # a masked row tail
    s[3, ::3] = -math.inf
    return s


@pytest.mark.parametrize("score_error", [0.0, 1e-9])
def test_softmax_and_logsumexp_bounds(score_error):
    s = _score_rows(0)
    p_lo, p_up = cb.softmax_bounds(s, score_error)
    lo, hi = cb.logsumexp_bounds(s, score_error)
    g = torch.Generator().manual_seed(1)
    shifts = [torch.zeros_like(s)] + [
        (torch.rand(s.shape, generator=g, dtype=F64) * 2 - 1) * score_error for _ in range(2 if score_error else 0)
    ]
    for shift in shifts:
        for i, row in enumerate(s.tolist()):
            ex_row = [None if x == -math.inf else Fraction(x) + Fraction(d) for x, d in zip(row, shift[i].tolist())]
            p = exact_softmax(ex_row)
            for j, pj in enumerate(p):
                assert dec(p_lo[i, j].item()) <= pj <= dec(p_up[i, j].item()), (i, j)
            vis = [x for x in ex_row if x is not None]
            m = max(vis)
            lse = dec(m) + sum((dec(x - m)).exp() for x in vis).ln()
            assert dec(lo[i].item()) <= lse <= dec(hi[i].item())
    # tight: within 1e-9 relative (score_error 1e-9 doubles into the weights) where P is not tiny
    big = p_up > 1e-300
    rel = ((p_up - p_lo) / p_up)[big].max().item()
    assert rel < (1e-12 if score_error == 0 else 5e-9), rel
    assert (p_up[s == -math.inf] == 0).all() and (p_lo[s == -math.inf] == 0).all()


def _premise_points() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.cat(
        [
            torch.linspace(-745.0, 709.0, 4001, dtype=F64),
            torch.randn(4000, generator=g, dtype=F64) * 30,
            -torch.rand(2000, generator=g, dtype=F64) * 1e-6,
            torch.tensor([0.0, -1e-300, -740.5, -744.4, -708.4], dtype=F64),
        ]
    )


@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
def test_exp_log_tanh_premises(device):
    """torch's float64 exp, log and tanh (on the CPU, and on CUDA where there is one) within the
    premises EXP64_ERROR, LOG64_ERROR, TANH64_ERROR (4 ulps, absolute 2^-1070), against 60-digit
    decimal values."""
    from ojas_ref.verification.linear_cross_entropy_error import TANH64_ERROR

    x = _premise_points().to(device)
    for fn, ref, (rel, ab), pts in (
        (torch.exp, lambda d: d.exp(), cb.EXP64_ERROR, x),
        (torch.log, lambda d: d.ln(), cb.LOG64_ERROR, torch.exp2(x.clamp(-1074, 1023) / 1.5)),
        (torch.tanh, lambda d: _dtanh(d), TANH64_ERROR, x / 20),
    ):
        pts = pts[(pts > 0) if fn is torch.log else torch.ones_like(pts, dtype=torch.bool)]
        got = fn(pts).tolist()
        worst = 0.0
        for p, y in zip(pts.tolist(), got):
            exact = ref(dec(p))
            err = abs(dec(y) - exact)
            assert err <= dec(rel) * abs(exact) + dec(ab), (fn.__name__, p, y)
            if abs(exact) > dec(2.0**-1000):
                worst = max(worst, float(err / abs(exact)))
        assert worst < rel / 4, (fn.__name__, worst)  # the margin: at most one ulp measured


def _dtanh(d: Decimal) -> Decimal:
    if abs(d) < Decimal("1e-10"):
        return d - d**3 / 3 + 2 * d**5 / 15
    e = (2 * d).exp()
    return (e - 1) / (e + 1)


def test_attention_sums_above_exact():
    """exact_dv's S = P^T |dO| and exact_grads' dQ sums, max |dP - D| and max sum |dO v| against exact
    decimal values on a tiny causal GQA case."""
    from ojas_ref.verification.attention_error import exact_dv, exact_grads

    g = torch.Generator().manual_seed(3)
    q = torch.randn(1, 2, 5, 4, generator=g).to(torch.bfloat16)
    k = torch.randn(1, 1, 5, 4, generator=g).to(torch.bfloat16)
    v = torch.randn(1, 1, 5, 3, generator=g).to(torch.bfloat16)
    do = torch.randn(1, 2, 5, 3, generator=g).to(torch.bfloat16)
    scale = 0.3
    _, sa = exact_dv(q, k, do, True, scale)
    ex = exact_grads(q, k, v, do, True, scale, torch.zeros(1, 2, 5, dtype=F64))
    Q, K, V, DO = (t.to(F64)[0].tolist() for t in (q, k, v, do))
    S_ex = [[[Decimal(0)] * 3 for _ in range(5)]]
    ymax = dpmax = Decimal(0)
    for h in range(2):
        for i in range(5):
            row = [
                Fraction(scale) * sum((Fraction(a) * Fraction(b) for a, b in zip(Q[h][i], K[0][j])), Fraction(0))
                if j <= i
                else None
                for j in range(5)
            ]
            p = exact_softmax(row)
            dp = [sum(dec(a) * dec(b) for a, b in zip(DO[h][i], V[0][j])) for j in range(5)]
            D = sum(p[j] * dp[j] for j in range(5))
            for j in range(5):
                for c in range(3):
                    S_ex[0][j][c] += p[j] * abs(dec(DO[h][i][c]))
                if j <= i:
                    ymax = max(ymax, abs(dp[j] - D))
                dpmax = max(dpmax, sum(abs(dec(a) * dec(b)) for a, b in zip(DO[h][i], V[0][j])))
            pk = [sum(p[j] * abs(dec(K[0][j][c])) for j in range(5)) for c in range(4)]
            for c in range(4):
                assert pk[c] <= dec(ex["dq_sums"][1][0, h, i, c].item())
    for j in range(5):
        for c in range(3):
            assert S_ex[0][j][c] <= dec(sa[0, 0, j, c].item())
    assert ymax <= dec(ex["max_abs_y"]) and dpmax <= dec(ex["dp_abs_sum"])


def test_cross_entropy_sums_above_exact():
    """gradient_sums (with a softcap too) against exact decimal P, G and k = 1 - tanh^2."""
    from ojas_ref.verification.linear_cross_entropy_error import gradient_sums

    g = torch.Generator().manual_seed(5)
    x = torch.randn(3, 4, generator=g).to(torch.bfloat16)
    w = (torch.randn(7, 4, generator=g) * 3).to(torch.bfloat16)
    target = torch.tensor([2, -100, 6])
    for cap in (None, 2.5):
        (sh, th, hh, *rest_h), (sw, tw, hw, *rest_w) = gradient_sums(x, w, target, softcap=cap)
        X, W = x.to(F64).tolist(), w.to(F64).tolist()
        acc_s = [[Decimal(0)] * 4 for _ in range(7)]
        for t in (0, 2):
            y = [sum(dec(a) * dec(b) for a, b in zip(X[t], W[v])) for v in range(7)]
            if cap is not None:
                z = [dec(cap) * _dtanh(yy / dec(cap)) for yy in y]
                kk = [1 - _dtanh(yy / dec(cap)) ** 2 for yy in y]
            else:
                z, kk = y, [Decimal(1)] * 7
            m = max(z)
            e = [(zz - m).exp() for zz in z]
            p = [ee / sum(e) for ee in e]
            gg = [abs(p[v] - (1 if v == target[t] else 0)) for v in range(7)]
            for c in range(4):
                assert sum(p[v] * abs(dec(W[v][c])) for v in range(7)) <= dec(sh[t, c].item())
                assert sum(gg[v] * abs(dec(W[v][c])) for v in range(7)) <= dec(th[t, c].item())
                if cap is not None:
                    assert sum(p[v] * kk[v] * abs(dec(W[v][c])) for v in range(7)) <= dec(rest_h[0][t, c].item())
                    assert sum(gg[v] * kk[v] * abs(dec(W[v][c])) for v in range(7)) <= dec(rest_h[1][t, c].item())
                for v in range(7):
                    acc_s[v][c] += p[v] * abs(dec(X[t][c]))
        for v in range(7):
            for c in range(4):
                assert acc_s[v][c] <= dec(sw[v, c].item())
        assert (sh[1] == 0).all() and (th[1] == 0).all()
