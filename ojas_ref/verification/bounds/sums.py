"""Error bounds of sums, in the rounding model of ``rocq/FloatModel/NoUnderflow.v`` (:mod:`.common`): a dot
product (Higham's ``gamma_n``, ``Ojas.FloatModel.DotError``), a sum cut into chunks
(``Ojas.LinearCrossEntropy.LossError.chunked_sum_error_bound``) and ``n`` computed as ``1 + ... + 1``
(``nat_err``)."""

from __future__ import annotations

import math

from ojas_ref.verification.bounds.common import (
    _EXP_OVERFLOW,
    _NO_ORACLE,
    _ROUND_UP,
    _check_roundoff,
    _float_up,
    _from_oracle,
    _rational,
)

__all__ = ["chunked_sum_error_factor", "dot_product_error_bound"]


def _hand_dot_product_error_bound(n: int, u: float) -> float:
    """Hand copy of ``gamma`` of ``Ojas.FloatModel.DotError`` (fallback without the oracle)."""
    return n * u / (1.0 - n * u) * _ROUND_UP


def _hand_chunked_sum_error_factor(n: int, u: float) -> float:
    """Hand copy of (1+u)^(2n) - 1 (fallback without the oracle)."""
    return math.expm1(2 * n * math.log1p(u)) * _ROUND_UP


def _hand_nat_err(n: int, u: float) -> float:
    """Hand copy of ``nat_err`` of ``Ojas.LinearCrossEntropy.LossError``: ((1+u)^n - 1) n."""
    return math.expm1(n * math.log1p(u)) * n * _ROUND_UP


def dot_product_error_bound(n: int, unit_roundoff: float) -> float:
    """Higham's gamma_n = n u / (1 - n u): |dot_hat - dot| <= gamma_n * sum_i |a_i b_i|.

    Implements ``gamma`` of ``Ojas.FloatModel.DotError`` (``rocq/FloatModel/DotError.v``), the bound of
    ``dot_error_bound`` for ``dot fl_ops`` on two vectors of length ``n`` (under the
    model's hypotheses plus idempotent rounding, which every floating-point format
    has). The theorem is about ``Vector.dot``'s summation order; other orders
    (pairwise, blocked, fused multiply-add) satisfy the same gamma_n bound
    (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., section 3.1),
    but that is not proved here. The value is the oracle's exact ``dot_bound_q`` of
    ``Ojas.Bounds.Sums`` (``dot_bound_q_correct``: ``gamma_q u n = gamma u n``),
    rounded up; without the oracle, the hand copy. Raises ``ValueError`` unless
    ``n >= 0`` and ``n u < 1``.
    """
    u = unit_roundoff
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    _check_roundoff("unit_roundoff", u)
    got = _from_oracle(bound="gamma", u=_rational(u), n=n) if n * u < 1.0 else None
    if got is None:
        raise ValueError(f"side condition n * u < 1 of dot_error_bound fails: n={n}, unit_roundoff={u}")
    return _hand_dot_product_error_bound(n, u) if got is _NO_ORACLE else _float_up(got)


def chunked_sum_error_factor(n_terms: int, unit_roundoff: float) -> float:
    """(1+u)^(2n) - 1: a left-to-right sum of ``n_terms`` values cut into at most
    ``n_terms`` chunks (each chunk summed, then added to the running total) is within
    this factor times sum |x_i| of the exact sum.

    Implements the bound of ``Ojas.LinearCrossEntropy.LossError.chunked_sum_error_bound``
    (exponent terms + chunks <= 2 n). The value is the oracle's
    ``chunked_sum_factor_q`` of ``Ojas.Bounds.Sums`` (``chunked_sum_factor_q_ge``:
    ``(1+u)^(2n) - 1 <= chunked_sum_factor_q u n``), rounded up; ``inf`` when
    ``2 n ln(1+u) > 709``; without the oracle, the hand copy. Raises ``ValueError``
    unless ``0 <= u < 1`` and ``n_terms >= 0``."""
    n, u = n_terms, unit_roundoff
    _check_roundoff("unit_roundoff", u)
    if n < 0:
        raise ValueError(f"n_terms must be >= 0, got {n}")
    if 2 * n * math.log1p(u) > _EXP_OVERFLOW:
        return math.inf
    got = _from_oracle(bound="chunked_sum_factor", u=_rational(u), n=n)
    return _hand_chunked_sum_error_factor(n, u) if got is _NO_ORACLE else _float_up(got)


def _nat_err(n: int, u: float) -> float:
    """``nat_err u n = ((1+u)^n - 1) n`` of ``Ojas.LinearCrossEntropy.LossError`` (the error of
    n computed as 1 + ... + 1): the oracle's ``nat_err_q`` (``nat_err_q_ge``), rounded
    up, or the hand copy; ``inf`` when ``n ln(1+u) > 709``."""
    if n * math.log1p(u) > _EXP_OVERFLOW:
        return math.inf
    got = _from_oracle(bound="nat_err", u=_rational(u), n=n)
    return _hand_nat_err(n, u) if got is _NO_ORACLE else _float_up(got)
