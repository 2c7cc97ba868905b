"""Error bounds of the streamed (online) softmax, in the rounding model of
``rocq/FloatModel/NoUnderflow.v`` (:mod:`.common`): the computed output against the exact two-pass
softmax (``Ojas.Attention.StreamError``), the exact output's move when every score moves
(``Ojas.Attention.ScorePerturbation``), and the streamed log-sum-exp's ``beta`` and
``-ln(1 - beta)``, which the linear cross-entropy's per-token bound reuses."""

from __future__ import annotations

import math
from fractions import Fraction

from ojas_ref.verification.bounds.common import (
    _EXP_OVERFLOW,
    _NO_ORACLE,
    _ROUND_UP,
    _check_roundoff,
    _float_up,
    _from_oracle,
    _rational,
)

__all__ = ["online_softmax_error_bound", "softmax_score_perturbation_bound"]


def _hand_stream_beta(n: int, u: float, ue: float) -> float:
    """``stream_beta`` of ``Ojas.Attention.StreamError``: (K - 1) + n alpha K with
    K = (1+u)^(2n) (1+ue)^n, alpha = u / ((1-u) e); ``inf`` when it is clearly >= 1."""
    log_k = 2 * n * math.log1p(u) + n * math.log1p(ue)  # K - 1 >= log K, so beta >= 1 when log K >= 1
    alpha = u / (1.0 - u) * math.exp(-1.0)
    return math.inf if log_k >= 1.0 else math.expm1(log_k) + n * alpha * math.exp(log_k)


def _hand_online_softmax_error_bound(n: int, u: float, ue: float) -> float:
    """Hand copy of ``stream_err`` (fallback without the oracle); ``inf`` if beta >= 1."""
    beta = _hand_stream_beta(n, u, ue)
    return (2.0 * beta + u * (1.0 + beta)) / (1.0 - beta) * _ROUND_UP if beta < 1.0 else math.inf


def _hand_softmax_score_perturbation_bound(delta: float) -> float:
    """Hand copy of exp(2 delta) - 1 (fallback without the oracle)."""
    return math.expm1(2.0 * delta) * _ROUND_UP


def _hand_neg_ln_one_minus(beta: float) -> float:
    """Hand copy of -ln(1 - beta) (fallback without the oracle)."""
    return -math.log1p(-beta) * _ROUND_UP


def _stream_beta(n: int, u: float, ue: float) -> tuple[float, Fraction | None]:
    """An upper bound of ``stream_beta u ue n`` as a float, and the exact rational
    ``stream_beta_q`` of ``Ojas.Bounds.Softmax`` it rounds up (``None`` without the oracle;
    ``stream_beta_q_ge``: ``stream_beta <= stream_beta_q``); ``inf`` when beta is
    clearly >= 1 (then the oracle is not asked: its powers would be huge)."""
    hand = _hand_stream_beta(n, u, ue)
    if hand == math.inf:
        return math.inf, None
    got = _from_oracle(bound="stream_beta", u=_rational(u), ue=_rational(ue), n=n)
    if got is _NO_ORACLE:
        return hand * _ROUND_UP, None
    if got is None:  # exp_neg1_q failed: cannot happen (exp_up at x / P = -2^-64)
        raise RuntimeError("oracle: stream_beta_q returned None")
    return _float_up(got), Fraction(got)


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

    The value is the oracle's ``stream_err_q`` of ``Ojas.Bounds.Softmax``
    (``stream_err_q_ge``: it is Some only when ``stream_beta < 1``, and then
    ``stream_err <= stream_err_q``), rounded up; without the oracle, the hand copy.
    Raises ``ValueError`` unless the theorem's side conditions hold:
    ``0 <= u < 1``, ``exp_error >= 0``, ``n_keys >= 0`` and ``beta < 1``.
    """
    n, u, ue = n_keys, unit_roundoff, exp_error
    if n < 0:
        raise ValueError(f"n_keys must be >= 0, got {n}")
    _check_roundoff("unit_roundoff", u)
    if not ue >= 0.0:
        raise ValueError(f"exp_error must be >= 0, got {ue}")
    beta = _hand_stream_beta(n, u, ue)
    got = None if not beta < 1.0 else _from_oracle(bound="stream_err", u=_rational(u), ue=_rational(ue), n=n)
    if not beta < 1.0 or got is None:
        raise ValueError(
            f"side condition beta(n, u, ue) < 1 of stream_row_error_bound fails: beta = {beta} "
            f"for n_keys={n}, unit_roundoff={u}, exp_error={ue}"
        )
    return _hand_online_softmax_error_bound(n, u, ue) if got is _NO_ORACLE else _float_up(got)


def softmax_score_perturbation_bound(delta: float) -> float:
    """exp(2 delta) - 1: how far the softmax output moves, relative to V, when every
    score moves by at most ``delta``.

    Implements the bound of ``Ojas.Attention.ScorePerturbation.softmax_output_perturbation``
    (``rocq/Attention/ScorePerturbation.v``): for score rows with
    ``|s'_j - s_j| <= delta`` and values ``|v_jc| <= V``, coordinate ``c`` of the
    exact two-pass softmax output moves by at most ``(exp(2 delta) - 1) * V``.
    The value is the oracle's ``perturbation_q`` of ``Ojas.Bounds.Softmax``
    (``perturbation_q_ge``: ``exp (2 delta) - 1 <= perturbation_q delta``, a certified
    upper bound), rounded up; ``inf`` when ``2 delta > 709`` (beyond float64); without
    the oracle, the hand copy. Raises ``ValueError`` if ``delta < 0``.
    """
    if not delta >= 0.0:
        raise ValueError(f"delta must be >= 0, got {delta}")
    if 2.0 * delta > _EXP_OVERFLOW:
        return math.inf
    got = _from_oracle(bound="perturbation", delta=_rational(delta))
    if got is None:  # x / P < 1 fails: cannot happen (P >= 2^64 |x|)
        raise RuntimeError(f"oracle: perturbation_q returned None for delta={delta}")
    return _hand_softmax_score_perturbation_bound(delta) if got is _NO_ORACLE else _float_up(got)


def _neg_ln_one_minus(beta: float, beta_q: Fraction | None) -> float:
    """An upper bound of ``-ln(1 - beta)`` (the ``ln`` term of ``lse_err``): the float
    candidate ``-log1p(-beta)``, enlarged, certified against the exact ``beta_q`` by the
    oracle's ``neg_ln_check`` (``neg_ln_check_correct``: then ``-ln(1 - beta_q) <= t``);
    without the oracle (``beta_q`` None), the hand copy."""
    if beta_q is None:
        return _hand_neg_ln_one_minus(beta)
    t = -math.log1p(-beta)
    for k in (50, 40, 30):
        candidate = t * (1.0 + 2.0**-k)
        if _from_oracle(bound="neg_ln_check", b=_rational(beta_q), t=_rational(candidate)) is True:
            return candidate
    raise RuntimeError(f"oracle: neg_ln_check certifies no candidate near -ln(1 - beta) = {t} for beta = {beta}")
