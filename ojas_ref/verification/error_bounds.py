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
    "EXP_ERROR",
    "UNIT_ROUNDOFF",
    "dot_product_error_bound",
    "chunked_sum_error_factor",
    "linear_cross_entropy_reduction_error_bound",
    "linear_cross_entropy_token_error_bound",
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

# Relative error of a computed exp against exp of its (computed) argument: an assumption
# about the libraries, not a theorem. torch's CPU float32 exp is SLEEF's expf_u10
# (vectorised) or the C library's expf, both within 1 ulp, i.e. relative error <= 2^-23
# (measured on this machine: <= 0.57 ulp over 8e6 arguments in [-87, 0]); we take
# 4 ulp = 2^-21 as margin. The oracle's exp is OCaml's Float.exp = glibc's double exp
# (< 1 ulp); margin 4 ulp = 2^-50.
EXP_ERROR: dict[torch.dtype, float] = {torch.float32: 2.0**-21, torch.float64: 2.0**-50}

_ROUND_UP = 1.0 + 2.0**-40


def _check_roundoff(name: str, value: float) -> None:
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must satisfy 0 <= {name} < 1, got {value}")


def _stream_beta(n: int, u: float, ue: float) -> float:
    """``stream_beta`` of ``Ojas.Attention.StreamError``: (K - 1) + n alpha K with
    K = (1+u)^(2n) (1+ue)^n, alpha = u / ((1-u) e); ``inf`` when it is clearly >= 1."""
    log_k = 2 * n * math.log1p(u) + n * math.log1p(ue)  # K - 1 >= log K, so beta >= 1 when log K >= 1
    alpha = u / (1.0 - u) * math.exp(-1.0)
    return math.inf if log_k >= 1.0 else math.expm1(log_k) + n * alpha * math.exp(log_k)


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
    beta = _stream_beta(n, u, ue)
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


def _add_err(u: float, a, ea, b, eb):
    """``add_err`` of ``Ojas.CrossEntropy.LossError``: fl(a' +- b') against a +- b."""
    return ea + eb + u * (abs(a) + abs(b) + ea + eb)


def _mul_err(u: float, a, ea, b, eb):
    """``mul_err``: fl(a' * b') against a * b."""
    return abs(a) * eb + abs(b) * ea + ea * eb + u * ((abs(a) + ea) * (abs(b) + eb))


def _div_err(u: float, a, ea, b: float, eb: float):
    """``div_err``: fl(a' / b') against a / b, for eb < |b|."""
    return (ea * abs(b) + abs(a) * eb) / (abs(b) * (abs(b) - eb)) + u * ((abs(a) + ea) / (abs(b) - eb))


def linear_cross_entropy_token_error_bound(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, target: torch.Tensor, *,
    label_smoothing: float, z_loss: float, unit_roundoff: float, exp_error: float, log_error: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token bounds (loss, lse), each [N], on |computed - exact| for the chunked
    linear cross-entropy forward without softcap, tokens ``x`` [N, D] with targets in
    ``[0, V)`` (kept tokens), any chunk sizes.

    Implements ``Ojas.CrossEntropy.LossError.token_forward_error_bound``
    (rocq/CrossEntropy/LossError.v) with ``dz`` from
    ``Ojas.CrossEntropy.LossError.raw_logit_error_bound``: in the rounding model
    (``u``, ``exp_error`` = ue relative, ``log_error`` = ul absolute, no
    underflow), ``token_forward fl_ops`` is within ``lse_err`` (lse) and
    ``token_loss_err`` (loss) of the exact ``(ce_token_loss_R, lse_row)``, where

    * ``dz = max_v gamma_D sum_i |x_i w_vi| (+ u (|z_v| + gamma_D sum_i |x_i w_vi|)
      with bias)`` bounds every logit's error,
    * ``lse_err = dz + u (|L| + dz) + (1 + u) (ul - ln(1 - beta_V))``,
    * ``token_loss_err`` composes ``add_err`` / ``mul_err`` / ``div_err`` over the
      operations of ``(1 - eps)(L - z_t) + eps (L - S / V) + lam L^2`` with input
      errors ``lse_err`` (L), ``dz + g (|z_t| + dz)`` (z_t) and
      ``V dz + g (sum_v |z_v| + V dz)`` (S), ``g = (1+u)^(2V) - 1``, and the error
      ``((1+u)^V - 1) V`` of V computed as 1 + ... + 1.

    The exact magnitudes (|z_v|, |L|, |z_t|, |L - z_t|, ...) enter only as factors
    of error terms; they are evaluated in float64 and enlarged by
    ``4 (D + V + 4) 2^-53`` times their natural scale (sum_i |x_i w_vi| + |b_v|, and
    |L| + 1), a bound of their float64 error; the result is rounded up by 2^-40.
    The theorem is about ``dot``'s and the vocabulary loop's left-to-right sums;
    a blocked matmul or pairwise sum satisfies the same gamma bounds (Higham 3.1),
    not proved here. Raises ``ValueError`` unless ``D u < 1``, ``beta_V < 1`` and
    ``((1+u)^V - 1) V < V``. The third tensor is an upper bound of |exact loss|
    (for the bound of a reduction).
    """
    f64 = torch.float64
    x, weight, u = x.to(f64), weight.to(f64), unit_roundoff
    D = x.shape[1]
    V = weight.shape[0]
    _check_roundoff("unit_roundoff", u)
    if not (exp_error >= 0.0 and log_error >= 0.0):
        raise ValueError(f"exp_error and log_error must be >= 0, got {exp_error}, {log_error}")
    if not D * u < 1.0:
        raise ValueError(f"side condition D u < 1 of raw_logit_error_bound fails: D={D}, u={u}")
    beta = _stream_beta(V, u, exp_error)
    nat_err = math.expm1(V * math.log1p(u)) * V
    if not (beta < 1.0 and nat_err < V):
        raise ValueError(f"side conditions of token_forward_error_bound fail: beta={beta}, V={V}, u={u}")
    slack = 4 * (D + V + 4) * 2.0**-53
    absb = bias.to(f64).abs() if bias is not None else torch.zeros(V, dtype=f64)
    prod = x.abs() @ weight.abs().T                                   # sum_i |x_i w_vi|, [N, V]
    z = x @ weight.T + (bias.to(f64) if bias is not None else 0.0)   # exact logits, float64
    scale = prod + absb
    zmag = z.abs() + slack * scale
    gdot = dot_product_error_bound(D, u) * prod
    dz_v = gdot if bias is None else gdot + u * (zmag + gdot)
    dz = dz_v.amax(dim=1)
    L = torch.logsumexp(z, dim=1)
    tok_scale = scale.amax(dim=1) + L.abs() + 1.0
    slack_t = slack * tok_scale

    def mag(t: torch.Tensor) -> torch.Tensor:  # |exact| <= |float64| + slack
        return t.abs() + slack_t

    zt = z.gather(1, target.long().view(-1, 1)).squeeze(1)
    S, asum = z.sum(dim=1), zmag.sum(dim=1)
    g = math.expm1(2 * V * math.log1p(u))
    eL = dz + u * (mag(L) + dz) + (1.0 + u) * (log_error - math.log1p(-beta))
    et = dz + g * (mag(zt) + dz)
    eS = V * dz + g * (asum + V * dz)
    eps, lam = label_smoothing, z_loss
    q = S / V
    e1 = _add_err(u, 1.0, 0.0, eps, 0.0)
    e2 = _add_err(u, mag(L), eL, mag(zt), et)
    e3 = _mul_err(u, 1.0 - eps, e1, mag(L - zt), e2)
    e4 = _div_err(u, S.abs() + V * slack_t, eS, float(V), nat_err)
    e5 = _add_err(u, mag(L), eL, mag(q), e4)
    e6 = _mul_err(u, eps, 0.0, mag(L - q), e5)
    a7, b7 = abs(1.0 - eps) * mag(L - zt), abs(eps) * mag(L - q)
    e7 = _add_err(u, a7, e3, b7, e6)
    e8 = _mul_err(u, mag(L), eL, mag(L), eL)
    e9 = _mul_err(u, lam, 0.0, mag(L) * mag(L), e8)
    loss_bound = _add_err(u, a7 + b7, e7, abs(lam) * mag(L) * mag(L), e9)
    magnitude = a7 + b7 + abs(lam) * mag(L) * mag(L)
    return loss_bound * _ROUND_UP, eL * _ROUND_UP, magnitude * _ROUND_UP


def chunked_sum_error_factor(n_terms: int, unit_roundoff: float) -> float:
    """(1+u)^(2n) - 1: a left-to-right sum of ``n_terms`` values cut into at most
    ``n_terms`` chunks (each chunk summed, then added to the running total) is within
    this factor times sum |x_i| of the exact sum.

    Implements the bound of ``Ojas.CrossEntropy.LossError.chunked_sum_error_bound``
    (exponent terms + chunks <= 2 n). Raises ``ValueError`` unless ``0 <= u < 1``."""
    _check_roundoff("unit_roundoff", unit_roundoff)
    return math.expm1(2 * n_terms * math.log1p(unit_roundoff)) * _ROUND_UP


def linear_cross_entropy_reduction_error_bound(
    token_bounds: torch.Tensor, loss_magnitudes: torch.Tensor, n_tokens: int, reduction: str,
    unit_roundoff: float,
) -> float:
    """Bound on |computed - exact| of the "sum" or "mean" of per-token losses (0 at the
    ignored tokens), from the kept tokens' error bounds B_i and upper bounds |loss_i|.

    "sum": sum_i B_i + g (sum_i |loss_i| + sum_i B_i), g = ``chunked_sum_error_factor``
    (n_tokens, u): ``Ojas.CrossEntropy.LossError.chunked_sum_error_bound`` for the sum
    over token chunks, applied to losses known within B_i. "mean": that, then the
    rounded division by the kept count K (computed as a sum of ones and zeros, within
    g K): ``div_err`` of ``Ojas.CrossEntropy.LossError`` (``rnd_div_err``). This
    composition is done here, by hand: it is not a Coq theorem about ``ce_forward``.
    """
    u = unit_roundoff
    g = chunked_sum_error_factor(n_tokens, u)
    b, m = float(token_bounds.sum()), float(loss_magnitudes.sum())
    total = b + g * (m + b)
    k = token_bounds.numel()
    if reduction == "mean" and k > 0:
        if not g * k < k:
            raise ValueError(f"side condition of the mean's division fails: g={g}")
        total = _div_err(u, m, total, float(k), g * k)
    return total * _ROUND_UP
