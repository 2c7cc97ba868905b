"""Certified float64 evaluation of the a-posteriori sums of the error bounds.

The a-posteriori bounds (attention's ``W = P |v|``, the cross-entropy's ``P |W|``, ...) are
sums over the data that the verification helpers evaluate in float64 with torch, in torch's own
order (vectorised partial sums, cascades, blocked BLAS kernels with or without FMA). The
functions here return float64 tensors that are **upper bounds of the exact real values** (lower
bounds where named so), not rounded estimates that could fall below them:

* :func:`sum_upper`, :func:`sum_lower`, :func:`inflate_sum`: a float64 sum of ``n`` nonnegative
  float64 terms in any order, ``S <= computed / (1 - (n - 1) u)`` and ``(1 - (n - 1) u) computed <= S``
  (``Ojas.FloatModel.CertifiedSum.tree_sum_nonneg_upper`` / ``tree_sum_nonneg_lower``, at binary64
  ``fp64_tree_sum_nonneg_upper``: any tree of rounded additions, exact zeros such as zero-initialised
  accumulators free, no underflow premise). Premise: torch's float64 ``sum`` only adds (true of
  every reduction torch has: no FMA, no compensation).
* :func:`matmul_upper`: a float64 matmul of nonnegative operands, ``(1 - g) S <= computed + (1 + g)
  m eta`` with ``g = gamma_(2k)``, ``m = 3k`` for ``k`` products (``ftree_nonneg_upper``: any tree of
  rounded additions over the exact products, each product rounded or fused into an FMA, underflow
  included). Premise: each entry of torch's float64 matmul is such a tree with at most ``2k``
  roundings on a path from a product to the result and ``3k`` in all. Any algorithm that only
  multiplies and adds (BLAS and cuBLAS dgemm with ``alpha = 1``, ``beta = 0``, blocked, split or
  fused) has at most ``k`` and ``2k - 1`` once its additions of 0 to a float64 value (zero-initialised
  accumulators: exact, they leave the value unchanged) are dropped: a product's own rounding or
  FMA, and at most ``k - 1`` additions joining other products.
  :func:`dot_error` the signed form (``ftree_error_bound``): ``|computed - exact| <= g A + (1 + g) m
  eta`` for ``A >= sum |a_i b_i|``, the bound of any float64 matmul or product-then-sum.
* :func:`mul_upper`, :func:`add_upper`, :func:`div_upper`, ... : one correctly rounded
  operation then one step toward +inf (or -inf): an upper (lower) bound of the exact result
  whatever the range (round to nearest lands on a neighbour of the exact value).
* :func:`softmax_bounds`: ``P_lo <= softmax(s) <= P_up`` entry by entry for exact scores ``s``
  within ``score_error`` of the given float64 scores, from torch's float64 ``exp`` under the premise
  :data:`EXP64_ERROR` (below); :func:`logsumexp_bounds` the same for ``ln sum_j exp(s_j)``,
  with the premise :data:`LOG64_ERROR` for torch's float64 ``log``.

Premises, not theorems: torch's float64 ``exp`` and ``log`` are not correctly rounded; we take
``|exp~(x) - e^x| <= 2^-50 e^x + 2^-1070`` and ``|log~(x) - ln x| <= 2^-50 |ln x| + 2^-1070``
(4 ulps; CUDA documents 1 ulp, SLEEF's ``u10`` functions 1 ulp), checked against exact
decimal values on the CPU by ``tests/verification/test_certified_bounds.py``. Inputs must be
finite float64 (``ValueError`` otherwise: a rounded ``inf`` bounds nothing); results that
overflow raise ``ValueError`` too.
"""

from __future__ import annotations

import math
from fractions import Fraction

import torch

from ojas_ref.verification.bounds.common import EXP_ERROR, _float_up

__all__ = [
    "U64",
    "ETA64",
    "EXP64_ERROR",
    "LOG64_ERROR",
    "gamma64",
    "sum_upper",
    "sum_lower",
    "inflate_sum",
    "matmul_upper",
    "dot_error",
    "mul_upper",
    "add_upper",
    "div_upper",
    "div_lower",
    "mul_lower",
    "scale_upper",
    "scale_lower",
    "softmax_bounds",
    "logsumexp_bounds",
]

F64 = torch.float64
#: binary64's unit roundoff ``u = 2^-53`` (``fp64_u``)
U64 = 2.0**-53
#: binary64's absolute rounding error below the normal range, ``eta = 2^-1075`` (``fp64_eta``)
ETA64 = Fraction(1, 2**1075)
#: premise on torch's float64 exp: ``|exp~(x) - e^x| <= rel e^x + abs`` for every float64 x
EXP64_ERROR = (EXP_ERROR[torch.float64], 2.0**-1070)
#: premise on torch's float64 log: ``|log~(x) - ln x| <= rel |ln x| + abs`` for every float64 x > 0
LOG64_ERROR = (2.0**-50, 2.0**-1070)
# weights below this are dropped from lower bounds and floored in upper ones (softmax_bounds)
_TINY = 2.0**-1000
_INF = math.inf


def _float_down(value: Fraction) -> float:
    """The greatest float <= ``value``."""
    return -_float_up(-Fraction(value))


def _check(t: torch.Tensor, name: str, nonneg: bool = True) -> torch.Tensor:
    """``t`` as float64; ``ValueError`` unless finite (and >= 0 with ``nonneg``)."""
    if not isinstance(t, torch.Tensor) or t.is_complex():
        raise ValueError(f"{name} must be a real tensor, got {type(t).__name__}")
    t = t.to(F64)
    lo, hi = _range(t)
    if not (math.isfinite(lo) and math.isfinite(hi) and (lo >= 0 or not nonneg)):
        raise ValueError(f"{name} must be finite{' and >= 0' if nonneg else ''} (float64)")
    return t


def _range(t: torch.Tensor) -> tuple[float, float]:
    """(min, max) of ``t`` in one pass, NaN when ``t`` holds a NaN; (0, 0) when empty."""
    if t.numel() == 0:
        return 0.0, 0.0
    lo, hi = torch.aminmax(t)
    return lo.item(), hi.item()


def _finite(t: torch.Tensor, what: str) -> torch.Tensor:
    lo, hi = _range(t)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"{what} overflows float64: no finite certified bound")
    return t


def _up(t: torch.Tensor, exact_zero: torch.Tensor | None = None) -> torch.Tensor:
    """One step toward +inf: at least the exact value of the one rounded operation that gave ``t``
    (round to nearest lands on a neighbour of it); 0 kept where ``exact_zero`` (the exact value is 0).
    In place: ``t`` is that operation's fresh result."""
    t = t.nextafter_(t.new_full((), _INF))
    return t if exact_zero is None else t.masked_fill_(exact_zero, 0.0)


def _down(t: torch.Tensor) -> torch.Tensor:
    """One step toward -inf, then clamped at 0 (for nonnegative exact values); in place, as :func:`_up`."""
    return t.nextafter_(t.new_full((), -_INF)).clamp_min_(0.0)


def gamma64(n: int) -> Fraction:
    """``gamma_n = n u / (1 - n u)`` at ``u = 2^-53``, exactly; ``ValueError`` unless ``2 n u < 1``."""
    if not (isinstance(n, int) and n >= 0):
        raise ValueError(f"n must be an int >= 0, got {n!r}")
    nu = Fraction(n, 2**53)
    if 2 * nu >= 1:
        raise ValueError(f"n = {n} terms: 2 n u >= 1, no float64 sum bound")
    return nu / (1 - nu)


def mul_upper(a: torch.Tensor | float, b: torch.Tensor | float) -> torch.Tensor:
    """An upper bound of the exact ``|a| |b|`` (one rounded product, one step up)."""
    a = (a if isinstance(a, torch.Tensor) else torch.tensor(float(a), dtype=F64)).to(F64).abs()
    b = (b if isinstance(b, torch.Tensor) else torch.tensor(float(b), dtype=F64)).to(F64).abs()
    return _finite(_up(a * b, (a == 0) | (b == 0)), "the product")


def mul_lower(a: torch.Tensor, b: torch.Tensor | float) -> torch.Tensor:
    """A lower bound of the exact ``|a| |b|``, >= 0."""
    b = b if isinstance(b, torch.Tensor) else torch.tensor(float(b), dtype=F64)
    return _down(a.to(F64).abs() * b.to(F64).abs())


def add_upper(a: torch.Tensor | float, b: torch.Tensor | float) -> torch.Tensor:
    """An upper bound of the exact ``a + b`` (one rounded sum, one step up)."""
    a = a if isinstance(a, torch.Tensor) else torch.tensor(float(a), dtype=F64)
    s = a.to(F64) + (b.to(F64) if isinstance(b, torch.Tensor) else float(b))
    return _finite(_up(s, s == 0), "the sum")  # a float sum is 0 only when exactly 0


def div_upper(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """An upper bound of the exact ``a / b`` for ``a >= 0``, ``b > 0``."""
    return _finite(_up(a.to(F64) / b.to(F64), a == 0), "the quotient")


def div_lower(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A lower bound of the exact ``a / b`` for ``a >= 0``, ``b > 0``, >= 0."""
    return _down(a.to(F64) / b.to(F64))


def scale_upper(t: torch.Tensor, c: Fraction | float) -> torch.Tensor:
    """An upper bound of ``c t`` for ``t >= 0`` and the exact ``c >= 0`` (``c`` rounded up first)."""
    return mul_upper(t, _float_up(Fraction(c)))


def scale_lower(t: torch.Tensor, c: Fraction | float) -> torch.Tensor:
    """A lower bound of ``c t`` for ``t >= 0`` and the exact ``c >= 0``, >= 0."""
    return mul_lower(t, max(_float_down(Fraction(c)), 0.0))


def inflate_sum(s: torch.Tensor, n: int) -> torch.Tensor:
    """An upper bound of the exact sum of ``n`` nonnegative float64 terms from their float64 sum
    ``s`` (any order): ``s / (1 - (n - 1) u)`` rounded up (``fp64_tree_sum_nonneg_upper``)."""
    s = _check(s, "s")
    k = max(n - 1, 0)
    return _up(s * _float_up(1 / (1 - Fraction(k, 2**53))), s == 0) if k else s  # a sum 0: every term 0


def sum_upper(t: torch.Tensor, dim: int | tuple[int, ...], keepdim: bool = False) -> torch.Tensor:
    """An upper bound of the exact sum of the nonnegative float64 ``t`` over ``dim``
    (torch's float64 sum, :func:`inflate_sum`)."""
    t = _check(t, "t")
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    n = math.prod(t.shape[d] for d in dims)
    return _finite(inflate_sum(_finite(t.sum(dims, keepdim=keepdim), "the sum"), n), "the sum")


def sum_lower(t: torch.Tensor, dim: int, keepdim: bool = False) -> torch.Tensor:
    """A lower bound of the exact sum of the nonnegative float64 ``t`` over ``dim``:
    ``(1 - (n - 1) u) computed`` rounded down (``tree_sum_nonneg_lower``)."""
    t = _check(t, "t")
    k = max(t.shape[dim] - 1, 0)
    s = t.sum(dim, keepdim=keepdim)
    return _down(s * _float_down(1 - Fraction(k, 2**53))) if k else s


def _dot_consts(k: int) -> tuple[Fraction, Fraction]:
    """``(g, (1 + g) m eta)`` of a float64 dot of ``k`` products: ``g = gamma_(2k)``, ``m = 3k``."""
    g = gamma64(2 * k)
    return g, (1 + g) * 3 * k * ETA64


def matmul_upper(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """An upper bound of the exact ``a @ b`` for nonnegative float64 ``a`` [..., n, k], ``b`` [..., k, m]:
    ``(computed + (1 + g) 3k eta) / (1 - g)``, ``g = gamma_(2k)``, rounded up (``ftree_nonneg_upper``);
    0 where a row of ``a`` or a column of ``b`` is all zeros (the exact entry is 0)."""
    a, b = _check(a, "a"), _check(b, "b")
    k = a.shape[-1]
    g, c = _dot_consts(k)
    if g >= 1:
        raise ValueError(f"k = {k} products: gamma_(2k) >= 1")
    up = a @ b  # then add_upper, mul_upper in place: the same values, no temporary of the product's size
    up.add_(_float_up(c))
    _finite(_up(up, up == 0), "the sum")  # a float sum is 0 only when exactly 0
    up.mul_(_float_up(1 / (1 - g)))
    _finite(_up(up, up == 0), "the product")  # a product of nonnegative floats >= 1: 0 only when exactly 0
    _finite(up, "the matmul")
    return up.masked_fill_((a == 0).all(-1, keepdim=True) | (b == 0).all(-2, keepdim=True), 0.0)  # exact zeros


def dot_error(abs_sum: torch.Tensor | float, k: int) -> torch.Tensor:
    """An upper bound of ``|computed - exact|`` of a float64 dot of ``k`` products (torch's matmul,
    or products then ``sum``), given ``abs_sum >= sum |a_i b_i|``: ``gamma_(2k) A + (1 + gamma_(2k)) 3k
    eta`` (``fp64_ftree_error_bound``), rounded up."""
    g, c = _dot_consts(k)
    a = abs_sum if isinstance(abs_sum, torch.Tensor) else torch.tensor(float(abs_sum), dtype=F64)
    return add_upper(scale_upper(_check(a, "abs_sum"), g), _float_up(c))


def _exp_small_up(x: Fraction) -> Fraction:
    """``e^x <= 1 + x + x^2`` for ``0 <= x <= 1``."""
    if not 0 <= x <= 1:
        raise ValueError(f"the scores' error {float(x)} must lie in [0, 1]")
    return 1 + x + x * x


def _weights(scores: torch.Tensor, score_error: float, dim: int):
    """(visible mask, row max, computed exp of the shifted scores, c_lo, c_hi): for every visible
    entry whose computed exp ``y~`` is at least ``2^-1000``, ``c_lo y~ <= e^(s - m) <= c_hi y~``;
    for the others ``0 <= e^(s - m) <= c_hi 2^-1000`` (``s`` the exact scores, ``m`` the row max)."""
    s = scores.to(F64)
    if bool(torch.isnan(s).any()) or bool((s == _INF).any()):
        raise ValueError("scores must be finite or -inf (masked)")
    vis = s > -_INF
    if not bool(vis.any(dim).all()):
        raise ValueError("every row needs a visible (finite) score")
    if not (isinstance(score_error, (int, float)) and math.isfinite(score_error) and score_error >= 0):
        raise ValueError(f"score_error must be a finite number >= 0, got {score_error!r}")
    m = s.amax(dim, keepdim=True)
    y = torch.exp(s - m)  # the shifted scores rounded (|err| <= u |s - m|), then exp~
    rel, ab = (Fraction(x) for x in EXP64_ERROR)
    # entries with s~ - m >= -800: |s - m - d~| <= score_error + 800 u =: tau, and e^(d~) within
    # (y~ -+ ab) / (1 +- rel); y~ >= 2^-1000 makes ab <= 2^-70 y~. Below -800, y~ < 2 ab and
    # e^(s - m) < e^(1 - 800) < 2^-1000.
    tau = Fraction(score_error) + 800 * Fraction(U64)
    slack = Fraction(1, 2**70)
    c_hi = _exp_small_up(tau) * (1 + slack) / (1 - rel)
    c_lo = (1 - tau) * (1 - slack) / (1 + rel)
    return vis, m, y, c_lo, c_hi


def softmax_bounds(scores: torch.Tensor, score_error: float, dim: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
    """``(P_lo, P_up)`` float64 with ``P_lo <= softmax(s, dim) <= P_up`` entry by entry, for every exact
    ``s`` with ``|s - scores| <= score_error`` at the finite scores (``-inf``: masked, ``P = 0``; every
    row needs a finite one). Premise :data:`EXP64_ERROR`; ``score_error <= 1 - 800 u``."""
    vis, _, y, c_lo, c_hi = _weights(scores, score_error, dim)
    n_hi = scale_upper(y.clamp_min(_TINY).masked_fill(~vis, 0.0), c_hi)
    y_lo = y.masked_fill(~(vis & (y >= _TINY)), 0.0)
    l_lo = scale_lower(sum_lower(y_lo, dim, keepdim=True), c_lo)
    l_hi = sum_upper(n_hi, dim, keepdim=True)
    p_up = div_upper(n_hi, l_lo).clamp_max(1.0)
    p_lo = div_lower(scale_lower(y_lo, c_lo), l_hi)
    return p_lo, p_up


def logsumexp_bounds(scores: torch.Tensor, score_error: float, dim: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
    """``(lo, hi)`` float64 with ``lo <= ln sum_j exp(s_j) <= hi`` over ``dim`` (visible entries, as
    :func:`softmax_bounds`), premises :data:`EXP64_ERROR` and :data:`LOG64_ERROR`."""
    vis, m, y, c_lo, c_hi = _weights(scores, score_error, dim)
    l_hi = scale_upper(sum_upper(y.clamp_min(_TINY).masked_fill(~vis, 0.0), dim), c_hi)
    l_lo = scale_lower(sum_lower(y.masked_fill(~(vis & (y >= _TINY)), 0.0), dim), c_lo)
    if not bool((l_lo > 0).all()):
        raise ValueError("a row's exp sum has no positive lower bound")
    rel, ab = (Fraction(x) for x in LOG64_ERROR)
    # ln x within (log~(x) -+ ab) / (1 -+ rel) in magnitude; l_lo, l_hi are float64 > 0
    g_hi, g_lo = torch.log(l_hi), torch.log(l_lo)
    f_up = _float_up(1 / (1 - rel))
    ab_up = _float_up(ab / (1 - rel))

    def log_up(g: torch.Tensor) -> torch.Tensor:  # >= ln x: g + rel |ln x| + ab, |ln x| <= (|g| + ab) / (1 - rel)
        return add_upper(g, add_upper(mul_upper(g.abs(), _float_up(rel * f_up)), ab_up))

    def log_down(g: torch.Tensor) -> torch.Tensor:
        return -add_upper(-g, add_upper(mul_upper(g.abs(), _float_up(rel * f_up)), ab_up))

    mm = m.squeeze(dim)
    hi = add_upper(mm, log_up(g_hi))
    lo = -add_upper(-mm, -log_down(g_lo))
    return lo, hi
