"""Proved floating-point error bounds, for use as test tolerances.

Each function evaluates the bound of one Coq theorem over the rounding model of
``rocq/RoundingModel.v``: every ``+ - * /`` has relative error at most the unit
roundoff ``u``, the computed ``exp`` has relative error at most ``exp_error``, and
nothing underflows or overflows (the model has no absolute error term).

The formulas are evaluated in float64 and then rounded up by a relative ``2**-40``,
so that the float64 evaluation of the formula does not fall below the real number
the theorem states.
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "UNIT_ROUNDOFF",
    "dot_product_error_bound",
    "online_softmax_error_bound",
    "softmax_score_perturbation_bound",
]

# Unit roundoff u = 2^-p of round-to-nearest in precision p (p counts the implicit bit).
UNIT_ROUNDOFF: dict[torch.dtype, float] = {
    torch.float64: 2.0**-53,
    torch.float32: 2.0**-24,
    torch.bfloat16: 2.0**-8,
    torch.float16: 2.0**-11,
}

_ROUND_UP = 1.0 + 2.0**-40


def _check_roundoff(name: str, value: float) -> None:
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must satisfy 0 <= {name} < 1, got {value}")


def online_softmax_error_bound(n_keys: int, unit_roundoff: float, exp_error: float) -> float:
    """Bound E(n, u, ue) on |out_hat_c - out_c| / V for the streamed softmax.

    Implements ``stream_err`` of ``Ojas.Attention.StreamError``
    (``rocq/Attention/StreamError.v``), the bound of ``stream_row_error_bound``
    (tiles of any size ``b``, ``stream_row``), ``stream_keywise_error_bound``
    (key by key) and ``stream_error_bound`` (any tiling; ``n_keys`` is then the
    number of keys plus the number of empty tiles): for a row of ``n_keys`` keys
    (masked ones included) whose value coordinate ``c`` satisfies ``|v_jc| <= V``,
    the computed output coordinate differs from the exact two-pass softmax by at
    most ``E * V``, whatever the scores. With ``K = (1+u)^(2n) (1+ue)^n`` and
    ``alpha = u / ((1-u) e)``::

        beta = (K - 1) + n * alpha * K
        E    = (2 beta + u (1 + beta)) / (1 - beta)

    Raises ``ValueError`` unless the theorem's side conditions hold:
    ``0 <= u < 1``, ``exp_error >= 0``, ``n_keys >= 0`` and ``beta < 1``.
    """
    n, u, ue = n_keys, unit_roundoff, exp_error
    if n < 0:
        raise ValueError(f"n_keys must be >= 0, got {n}")
    _check_roundoff("unit_roundoff", u)
    if not ue >= 0.0:
        raise ValueError(f"exp_error must be >= 0, got {ue}")
    log_k = 2 * n * math.log1p(u) + n * math.log1p(ue)  # K - 1 >= log K, so beta >= 1 when log K >= 1
    alpha = u / (1.0 - u) * math.exp(-1.0)
    beta = math.inf if log_k >= 1.0 else math.expm1(log_k) + n * alpha * math.exp(log_k)
    if not beta < 1.0:
        raise ValueError(
            f"side condition beta(n, u, ue) < 1 of stream_row_error_bound fails: beta = {beta} "
            f"for n_keys={n}, unit_roundoff={u}, exp_error={ue}"
        )
    return (2.0 * beta + u * (1.0 + beta)) / (1.0 - beta) * _ROUND_UP


def dot_product_error_bound(n: int, unit_roundoff: float) -> float:
    """Higham's gamma_n = n u / (1 - n u): |dot_hat - dot| <= gamma_n * sum_i |a_i b_i|.

    Implements ``gamma`` of ``Ojas.DotError`` (``rocq/DotError.v``), the bound of
    ``dot_error_bound`` for ``dot fl_ops`` on two vectors of length ``n`` (under the
    model's hypotheses plus idempotent rounding, which every floating-point format
    has). The theorem is about ``Vector.dot``'s summation order; other orders
    (pairwise, blocked, fused multiply-add) satisfy the same gamma_n bound
    (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., section 3.1),
    but that is not proved here. Raises ``ValueError`` unless ``n >= 0`` and
    ``n u < 1``.
    """
    u = unit_roundoff
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    _check_roundoff("unit_roundoff", u)
    if not n * u < 1.0:
        raise ValueError(f"side condition n * u < 1 of dot_error_bound fails: n={n}, unit_roundoff={u}")
    return n * u / (1.0 - n * u) * _ROUND_UP


def softmax_score_perturbation_bound(delta: float) -> float:
    """exp(2 delta) - 1: how far the softmax output moves, relative to V, when every
    score moves by at most ``delta``.

    Implements the bound of ``Ojas.Attention.ScorePerturbation.softmax_output_perturbation``
    (``rocq/Attention/ScorePerturbation.v``): for score rows with
    ``|s'_j - s_j| <= delta`` and values ``|v_jc| <= V``, coordinate ``c`` of the
    exact two-pass softmax output moves by at most ``(exp(2 delta) - 1) * V``.
    Raises ``ValueError`` if ``delta < 0``.
    """
    if not delta >= 0.0:
        raise ValueError(f"delta must be >= 0, got {delta}")
    return math.expm1(2.0 * delta) * _ROUND_UP
