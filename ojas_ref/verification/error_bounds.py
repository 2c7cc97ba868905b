"""Proved floating-point error bounds, for use as test tolerances.

Each function evaluates the bound of one Coq theorem over the rounding model of
``rocq/RoundingModel.v``: every ``+ - * /`` has relative error at most the unit
roundoff ``u``, the computed ``exp`` has relative error at most ``exp_error``, and
nothing underflows or overflows (the model has no absolute error term).

Where the oracle (``extraction/_build/ojas-oracle``, ``make -C extraction``) is built,
the scalar bounds come from it: its ``error_bounds`` operation runs the definitions of
``rocq/BoundValues.v`` (``dot_bound_q``, ``chunked_sum_factor_q``, ``nat_err_q``,
``stream_beta_q``, ``stream_err_q``, ``perturbation_q``, ``neg_ln_check``), extracted
with exact rationals, whose results are proved equal to (``gamma``) or at least
(the others, which involve ``exp``, ``ln`` or powers too large to carry exactly) the
real bound of the theorem; the rational is rounded up to a float here
(:func:`_float_up`). The inputs (unit roundoffs, ``delta``) are sent as the exact
rationals of their floats. Values are cached per argument.

Without the oracle binary (or with one built before ``error_bounds`` existed) the
hand copies of the formulas (``_hand_*``) are used instead, evaluated in float64 and
rounded up by a relative ``2**-40`` so that the float64 evaluation does not fall below
the real number the theorem states; ``tests/test_error_bounds.py`` checks that both
agree to float64 rounding. The per-token cross-entropy bound and the reductions are
compositions over tensors (``add_err`` / ``mul_err`` / ``div_err`` of
``Ojas.CrossEntropy.LossError``) evaluated in float64 here; only their scalar factors
come from the oracle.
"""

from __future__ import annotations

import math
import warnings
from fractions import Fraction
from typing import Any, Sequence

import torch

__all__ = [
    "EXP2_ERROR",
    "EXP_ERROR",
    "LOG2_ERROR",
    "attention_forward_error_bound",
    "attention_forward_posteriori_bound",
    "attention_lse_error_bound",
    "attention_dv_error_bound",
    "attention_dk_error_bound",
    "attention_dq_error_bound",
    "attention_delta_error_bound",
    "UNIT_ROUNDOFF",
    "dot_product_error_bound",
    "chunked_sum_error_factor",
    "LCE_EXP_ERROR",
    "LCE_LOG_ERROR",
    "LCE_DIV_ERROR",
    "LCE_TANH_ERROR",
    "linear_cross_entropy_grad_error_bound",
    "linear_cross_entropy_lse_error_bound",
    "linear_cross_entropy_logit_error_bound",
    "linear_cross_entropy_merge_lse_error_bound",
    "linear_cross_entropy_loss_error_bound",
    "linear_cross_entropy_reduction_error_bound",
    "linear_cross_entropy_softcap_chain_error_bound",
    "linear_cross_entropy_softcap_logit_error_bound",
    "linear_cross_entropy_token_error_bound",
    "linear_cross_entropy_weighted_dh_error_bound",
    "linear_cross_entropy_weighted_dw_error_bound",
    "online_softmax_error_bound",
    "reversible_reconstruction_error_bound",
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

# Relative error of the kernels' exp2 (tl.exp2) against 2^x, for the mixed-precision
# attention bound: an assumption about the hardware and libraries, not a theorem. In
# Triton's CPU interpreter tl.exp2 is numpy's float32 exp2 (measured on this machine:
# <= 1.73 ulp = 1.73 * 2^-24 relative over 4e6 arguments in [-150, 0] with normal
# results, absolute <= 3.5 * 2^-150 below); on NVIDIA GPUs it is PTX ex2.approx.f32
# (measured by tests/test_attention_error_bound.py and benchmarks/bench_attention_error.py
# on the device they run on). 2^-21 = 8 ulp as margin; the absolute term for results
# below the normal range is taken as 2^-126 (flush to zero included).
EXP2_ERROR: float = 2.0**-21
_EXP2_ABS_ERROR: float = 2.0**-126
# Absolute error of the kernels' log2 (tl.log2) against log2(x), for the lse bound: an
# assumption, not a theorem (the theorem's lg_err premise takes it on a bounded range,
# [1/(1+b), (1+b) n_keys] for the row sum's relative error b, inside [1/2, 2 n_keys] when
# b <= 1; the kernel applies it to the row sum l in [1, n_keys]). A float32 result of magnitude below 32 has an ulp of
# at most 2^-19, so one rounding costs 2^-20; 2^-18 as margin over the approximation
# (numpy's float32 log2 in the interpreter, PTX lg2.approx.f32 on NVIDIA GPUs; measured by
# tests/test_attention_error_bound.py and benchmarks/bench_attention_error.py on [0.5, 2^24]).
LOG2_ERROR: float = 2.0**-18

# Arguments beyond which a bound overflows float64 anyway (and whose exact powers
# would be needlessly large): the functions return inf without asking the oracle.
_EXP_OVERFLOW = 709.0


def _rational(x: float | Fraction) -> str:
    """The exact rational of a float (or Fraction) as the oracle's ``"num/den"``."""
    f = Fraction(x)
    return f"{f.numerator}/{f.denominator}"


def _float_up(value: str | Fraction) -> float:
    """The least float >= the rational ``value`` (``inf`` beyond the float range)."""
    f = Fraction(value)
    try:
        x = f.numerator / f.denominator  # correctly rounded
    except OverflowError:
        return math.inf if f > 0 else -math.float_info.max
    return math.nextafter(x, math.inf) if Fraction(x) < f else x


_oracle_cache: dict[tuple, Any] = {}
_oracle_state: dict[str, bool] = {}


def oracle_bounds_available() -> bool:
    """Whether the oracle binary is built and answers the ``error_bounds`` operation."""
    if "available" not in _oracle_state:
        from ojas_ref.verification.oracle import oracle_binary, oracle_request

        try:
            oracle_binary()
        except RuntimeError:
            _oracle_state["available"] = False
        else:
            answer = oracle_request({"op": "error_bounds", "queries": []})
            _oracle_state["available"] = "values" in answer
            if "values" not in answer:
                warnings.warn(f"the oracle does not answer error_bounds ({answer.get('error')}): rebuild it with "
                              "`make -C extraction`; using the hand formulas", RuntimeWarning, stacklevel=3)
    return _oracle_state["available"]


def _oracle_values(queries: list[dict[str, Any]]) -> list[Any] | None:
    """The oracle's answers (``"num/den"``, ``None`` = the Coq ``None``, or a bool) to
    ``error_bounds`` queries (extraction/README.md), cached; ``None`` without the oracle."""
    if not oracle_bounds_available():
        return None
    keys = [tuple(sorted(q.items())) for q in queries]
    missing = list(dict.fromkeys(k for k in keys if k not in _oracle_cache))
    if missing:
        from ojas_ref.verification.oracle import oracle_request

        answer = oracle_request({"op": "error_bounds", "queries": [dict(k) for k in missing]})
        if "values" not in answer:
            raise RuntimeError(f"oracle error_bounds: {answer.get('error')}")
        _oracle_cache.update(zip(missing, answer["values"]))
    return [_oracle_cache[k] for k in keys]


_NO_ORACLE = object()


def _from_oracle(**query: Any) -> Any:
    """One query's answer, or ``_NO_ORACLE`` when the oracle is not available."""
    values = _oracle_values([query])
    return _NO_ORACLE if values is None else values[0]


def _check_roundoff(name: str, value: float) -> None:
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must satisfy 0 <= {name} < 1, got {value}")


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


def _hand_dot_product_error_bound(n: int, u: float) -> float:
    """Hand copy of ``gamma`` of ``Ojas.DotError`` (fallback without the oracle)."""
    return n * u / (1.0 - n * u) * _ROUND_UP


def _hand_chunked_sum_error_factor(n: int, u: float) -> float:
    """Hand copy of (1+u)^(2n) - 1 (fallback without the oracle)."""
    return math.expm1(2 * n * math.log1p(u)) * _ROUND_UP


def _hand_nat_err(n: int, u: float) -> float:
    """Hand copy of ``nat_err`` of ``Ojas.CrossEntropy.LossError``: ((1+u)^n - 1) n."""
    return math.expm1(n * math.log1p(u)) * n * _ROUND_UP


def _hand_softmax_score_perturbation_bound(delta: float) -> float:
    """Hand copy of exp(2 delta) - 1 (fallback without the oracle)."""
    return math.expm1(2.0 * delta) * _ROUND_UP


def _hand_neg_ln_one_minus(beta: float) -> float:
    """Hand copy of -ln(1 - beta) (fallback without the oracle)."""
    return -math.log1p(-beta) * _ROUND_UP


def _stream_beta(n: int, u: float, ue: float) -> tuple[float, Fraction | None]:
    """An upper bound of ``stream_beta u ue n`` as a float, and the exact rational
    ``stream_beta_q`` of ``Ojas.BoundValues`` it rounds up (``None`` without the oracle;
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

    The value is the oracle's ``stream_err_q`` of ``Ojas.BoundValues``
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


def dot_product_error_bound(n: int, unit_roundoff: float) -> float:
    """Higham's gamma_n = n u / (1 - n u): |dot_hat - dot| <= gamma_n * sum_i |a_i b_i|.

    Implements ``gamma`` of ``Ojas.DotError`` (``rocq/DotError.v``), the bound of
    ``dot_error_bound`` for ``dot fl_ops`` on two vectors of length ``n`` (under the
    model's hypotheses plus idempotent rounding, which every floating-point format
    has). The theorem is about ``Vector.dot``'s summation order; other orders
    (pairwise, blocked, fused multiply-add) satisfy the same gamma_n bound
    (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., section 3.1),
    but that is not proved here. The value is the oracle's exact ``dot_bound_q`` of
    ``Ojas.BoundValues`` (``dot_bound_q_correct``: ``gamma_q u n = gamma u n``),
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


def softmax_score_perturbation_bound(delta: float) -> float:
    """exp(2 delta) - 1: how far the softmax output moves, relative to V, when every
    score moves by at most ``delta``.

    Implements the bound of ``Ojas.Attention.ScorePerturbation.softmax_output_perturbation``
    (``rocq/Attention/ScorePerturbation.v``): for score rows with
    ``|s'_j - s_j| <= delta`` and values ``|v_jc| <= V``, coordinate ``c`` of the
    exact two-pass softmax output moves by at most ``(exp(2 delta) - 1) * V``.
    The value is the oracle's ``perturbation_q`` of ``Ojas.BoundValues``
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


def _nat_err(n: int, u: float) -> float:
    """``nat_err u n = ((1+u)^n - 1) n`` of ``Ojas.CrossEntropy.LossError`` (the error of
    n computed as 1 + ... + 1): the oracle's ``nat_err_q`` (``nat_err_q_ge``), rounded
    up, or the hand copy; ``inf`` when ``n ln(1+u) > 709``."""
    if n * math.log1p(u) > _EXP_OVERFLOW:
        return math.inf
    got = _from_oracle(bound="nat_err", u=_rational(u), n=n)
    return _hand_nat_err(n, u) if got is _NO_ORACLE else _float_up(got)


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
    not proved here. The scalar factors come from the oracle (``Ojas.BoundValues``):
    ``gamma_D`` (:func:`dot_product_error_bound`), ``beta_V`` (``stream_beta_q``),
    ``g`` (``chunked_sum_factor_q``, ``sum_factor_q_ge``), ``nat_err V``
    (``nat_err_q``, ``nat_err_q_ge``) and ``-ln(1 - beta_V)`` (a float candidate
    certified by ``neg_ln_check``, ``neg_ln_check_correct``); the composition over the
    tokens stays a float64 evaluation here. Raises ``ValueError`` unless ``D u < 1``,
    ``beta_V < 1`` and ``((1+u)^V - 1) V < V``. The third tensor is an upper bound of
    |exact loss| (for the bound of a reduction).
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
    beta, beta_q = _stream_beta(V, u, exp_error)
    nat_err = _nat_err(V, u)
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
    g = chunked_sum_error_factor(V, u)  # sum_factor u V = (1+u)^(2V) - 1
    eL = dz + u * (mag(L) + dz) + (1.0 + u) * (log_error + _neg_ln_one_minus(beta, beta_q))
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
    (exponent terms + chunks <= 2 n). The value is the oracle's
    ``chunked_sum_factor_q`` of ``Ojas.BoundValues`` (``chunked_sum_factor_q_ge``:
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
    composition is done here, by hand: it is not a Coq theorem about ``ce_forward``;
    only ``g`` comes from the oracle (``chunked_sum_factor_q``).
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


def reversible_reconstruction_error_bound(
    local_errors: Sequence[float], lipschitz_f: Sequence[float], lipschitz_g: Sequence[float],
    output_error: float = 0.0,
) -> list[float]:
    """A-posteriori bounds on the reconstruction error of a reversible coupling stack,
    one per layer: entry ``i`` bounds max |reconstructed input - stored input| of layer
    ``i`` (max-norm, both halves) when the inverse starts within ``output_error`` of the
    stored output of the last layer.

    Evaluates ``apost_bound`` of ``Ojas.Reversible.APosteriori.vec_stack_recon_error_apost``
    (applied to the layers ``i..N-1``) by its recurrence, last layer first:

        E_N = output_error,   E_i = (1 + LF_i)(1 + LG_i) E_(i+1) + e_i,

    i.e. ``E_i = sum_(j>=i) e_j prod_(i<=k<j) (1+LF_k)(1+LG_k) + prod_(k>=i) (...) E_N``
    (``apost_bound_closed``). The inputs are measured on the run, per layer:

    * ``local_errors[i] = r_i + d_i``: ``r_i`` the max-norm distance between the step the
      code ran (rounded inverse, computed f, g) and the exact inverse, both at the
      reconstructed output the step was fed; ``d_i`` the distance between the exact
      inverse of the layer's stored output and its stored input;
    * ``lipschitz_f[i]``, ``lipschitz_g[i]``: Lipschitz constants (max-norm) of the exact
      functions, needed only at the pairs of points the run visits (``vlip_at``): G at
      the first halves of the reconstructed and stored outputs, F at the second halves
      of their exact inverses; a global constant (e.g. ``||W2||_inf ||W1||_inf`` for a
      tanh MLP) is one such.

    Nothing about the rounding is assumed (it is all in ``e_i``), so unlike
    ``Ojas.Reversible.FloatError.vec_stack_recon_error`` there is no worst-case rounding
    term and the constants are per layer. Not covered: that the measured ``e_i`` and
    constants are correct (a test measures them against a higher-precision reference,
    which stands in for exact arithmetic), and the gradient error that the reconstruction
    error causes: ``Ojas.Reversible.APosteriori.vec_stack_grad_error_apost`` bounds it
    given measured constants of each block's backward, which nothing here computes or
    evaluates. Hand formula (no oracle query): evaluated exactly in
    rationals from the floats given and rounded up (:func:`_float_up`). Raises
    ``ValueError`` on lists of different lengths or a negative or non-finite input.
    """
    if not len(local_errors) == len(lipschitz_f) == len(lipschitz_g):
        raise ValueError(f"local_errors, lipschitz_f, lipschitz_g must have one length, got "
                         f"{len(local_errors)}, {len(lipschitz_f)}, {len(lipschitz_g)}")
    vals = [float(output_error), *map(float, local_errors), *map(float, lipschitz_f), *map(float, lipschitz_g)]
    if not all(math.isfinite(v) and v >= 0.0 for v in vals):
        raise ValueError("local errors, Lipschitz constants and output_error must be finite and >= 0")
    e = Fraction(float(output_error))
    bounds: list[float] = []
    for err, lf, lg in zip(reversed(local_errors), reversed(lipschitz_f), reversed(lipschitz_g)):
        e = (1 + Fraction(float(lf))) * (1 + Fraction(float(lg))) * e + Fraction(float(err))
        bounds.append(_float_up(e))
    return bounds[::-1]


# Storage formats of the mixed-precision model (rocq/FloatModel/MixedPrecision.v): unit
# roundoff 2^-p and absolute error 2^(emin-1) of a rounding below the normal range.
_STORAGE: dict[torch.dtype, tuple[float, float]] = {
    torch.bfloat16: (2.0**-8, 2.0**-134),
    torch.float16: (2.0**-11, 2.0**-25),
    torch.float32: (2.0**-24, 2.0**-150),
}
# The same formats rounded toward zero (what Triton's CPU interpreter does for a float32 to
# bfloat16 cast: its _convert_float truncates): relative error below 2^(1-p) from the smallest
# normal up, absolute below 2^emin under it. No Coq FloatFormat instance is built for them
# (MixedPrecision.v instantiates round-to-nearest-even only): with
# ``storage_rounding="truncate"`` the value is the theorem's formula at these constants, not
# a proved bound.
_STORAGE_TRUNCATE: dict[torch.dtype, tuple[float, float]] = {
    torch.bfloat16: (2.0**-7, 2.0**-133),
    torch.float16: (2.0**-10, 2.0**-24),
    torch.float32: (2.0**-23, 2.0**-149),
}
_FP32_U, _FP32_ETA = 2.0**-24, 2.0**-150


def _storage(dtype: torch.dtype, storage_rounding: str) -> tuple[float, float]:
    if storage_rounding == "nearest":
        return _STORAGE[dtype]
    if storage_rounding == "truncate":
        return _STORAGE_TRUNCATE[dtype]
    raise ValueError(f"storage_rounding must be 'nearest' or 'truncate', got {storage_rounding!r}")
# |qk_scale ln 2 - scale| <= uc scale for the kernel's qk_scale = float32(scale * _LOG2E),
# _LOG2E the float64 nearest log2(e): (1 + 2^-53)^2 (1 + 2^-24) - 1 <= 2^-24 + 2^-51.
_QK_SCALE_ERROR = 2.0**-24 + 2.0**-51
# |cl - ln 2| <= ucl ln 2 for the kernel's float32 constant cl = float32(0.6931471805599453):
# (1 + 2^-53)(1 + 2^-24) - 1 <= 2^-24 + 2^-52.
_LN2_CONST_ERROR = 2.0**-24 + 2.0**-52


def _hand_afe_common(u, ue, ee, ea, uc, scale, p, e, b, n, t):
    """The float64 hand copy of the quantities ``attn_fwd_q`` and ``attn_lse_q`` share:
    (smax, delta, X, P1, CG, CR, bL), each rounded up by a relative 2^-30."""
    def gamma(k):
        return k * u / (1.0 - k * u)

    up = 1.0 + 2.0**-30  # float64 evaluation of a few dozen operations, rounded up
    de = (gamma(e) * p + (1.0 + gamma(e - 1)) * e * ea) * up
    smax = (2.0 * (scale * (1.0 + uc) * (p + de)) * (1.0 + u) + ea) * up
    delta = (scale * ((p + de) * (u * (1.0 + uc) + uc) + de) + ea) * up
    X = math.exp(u * 2.0 * smax) * up
    P1 = math.exp((b - 1) * math.log1p(u)) * up
    CG = math.exp(t * (math.log1p(ue) + 2.0 * math.log1p(u))) * up
    CR = math.exp(t * (math.log1p(ue + ee) + 2.0 * math.log1p(u))) * up
    hl = P1 * ((1.0 + ue) * X)
    bl = (hl * CG * X - 1.0 + t * CR * (((hl * CG * X) * n * ee) * (1.0 + u) + ea + P1 * (b * ee)) * (1.0 + u)) * up
    return smax, delta, X, P1, CG, CR, bl


def _hand_acc_terms(u, ue, ee, ea, us, es, X, P1, CG, CR, v, b, n, t) -> tuple[float, float]:
    """The acc fold's factor minus one and its absolute term (``afp_gA``, ``afp_rA`` of
    ``Ojas.FloatModel.AttentionForwardPosteriori``; ``afe_bN = afp_gA + afp_rA / V``), in
    float64, not yet rounded up."""
    ha = P1 * ((1.0 + u) * (1.0 + us) * ((1.0 + ue) * X))
    ra = t * CR * ((((ha * CG * X) * (n * v) * ee) * (1.0 + u) + ea
                    + P1 * ((1.0 + u) * ((1.0 + us) * ee + es) * (b * v) + b * ea)) * (1.0 + u))
    return ha * CG * X - 1.0, ra


def _hand_attention_forward_error_bound(u, ue, ee, ea, us, es, uc, scale, p, v, e, b, n, t) -> float:
    """Hand copy of ``afe_rel`` of ``Ojas.FloatModel.AttentionForwardError`` at the upper
    bounds ``attn_fwd_q`` computes (fallback without the oracle), in float64 with a
    relative margin; ``inf`` when its side condition ``bL < 1`` fails."""
    up = 1.0 + 2.0**-30
    _, delta, X, P1, CG, CR, bl = _hand_afe_common(u, ue, ee, ea, uc, scale, p, e, b, n, t)
    if not bl < 1.0:
        return math.inf
    Y = math.expm1(2.0 * delta) * up
    ga, ra = _hand_acc_terms(u, ue, ee, ea, us, es, X, P1, CG, CR, v, b, n, t)
    bn = (ga + ra / v) * up
    f = ((bn + bl) + u * (1.0 + bn)) / (1.0 - bl)
    return (((f + ea / v + Y) * (1.0 + us) + us + es / v) * up) * _ROUND_UP


def _hand_attention_forward_posteriori(u, ue, ee, ea, us, es, uc, scale, p, v, e, b, n, t) -> tuple[float, float]:
    """``(afp_rel, afp_abs)`` of ``Ojas.FloatModel.AttentionForwardPosteriori`` at the same
    upper bounds as :func:`_hand_attention_forward_error_bound`, in float64, each rounded
    up by a relative margin; ``(inf, inf)`` when the side condition ``bL < 1`` fails."""
    up = 1.0 + 2.0**-30
    _, delta, X, P1, CG, CR, bl = _hand_afe_common(u, ue, ee, ea, uc, scale, p, e, b, n, t)
    if not bl < 1.0:
        return math.inf, math.inf
    Y = math.expm1(2.0 * delta) * up
    ga, ra = (x * up for x in _hand_acc_terms(u, ue, ee, ea, us, es, X, P1, CG, CR, v, b, n, t))
    rel = (((1.0 + u) * (ga + bl) * (1.0 + Y) / (1.0 - bl) + u * (1.0 + Y) + Y) * (1.0 + us) + us) * up
    absolute = (((1.0 + u) * ra / (1.0 - bl) + ea) * (1.0 + us) + es) * up
    return rel * _ROUND_UP, absolute * _ROUND_UP


def _afe_args(n_keys: int, block_n: int, dtype: torch.dtype, storage_rounding: str, exp2_error: float,
              scale: float, p: float, max_abs_v: float) -> tuple[dict[str, float], int]:
    """The model's constants and the arguments that ``attn_fwd_q`` and ``attn_fwd_post_q``
    take (in their order), and the number of key tiles."""
    us, es = _storage(dtype, storage_rounding)
    args = dict(u=_FP32_U, ue=float(exp2_error), ee=_EXP2_ABS_ERROR, ea=_FP32_ETA, us=us, es=es,
                uc=_QK_SCALE_ERROR, scale=float(scale), p=float(p), v=float(max_abs_v))
    return args, -(-n_keys // block_n)


def attention_forward_error_bound(
    n_keys: int, head_dim: int, *, block_n: int, dtype: torch.dtype, max_abs_q: float, max_abs_k: float,
    max_abs_v: float, scale: float | None = None, qk_abs_sum: float | None = None,
    exp2_error: float = EXP2_ERROR, storage_rounding: str = "nearest",
) -> float:
    """Bound on ``|out - exact| / max_abs_v`` for every output coordinate of the Triton
    flash-attention forward (kernels/ojas_kernels/attention.py) on one query row of at most ``n_keys``
    keys, against the exact softmax of ``scale * q.k`` over the same keys (the inputs
    taken as exact reals; compare with a float64 softmax of the upcast inputs).

    Implements ``Ojas.FloatModel.AttentionForwardError.attention_forward_error_masked``
    (the kernel's loop from its start under any boolean mask: causal, window, sequence
    bounds; the softmax over the visible keys) and ``attention_forward_error`` (fully
    visible tiles), rocq/FloatModel/AttentionForwardError.v, through ``attn_fwd_q`` of
    ``Ojas.BoundValues`` (``Ojas.BoundValues.attn_fwd_q_sound_masked``,
    ``attn_fwd_q_sound``): the oracle computes the closed form ``afe_rel`` over exact
    rationals, with certified upper bounds of its exponentials and powers, and this
    function rounds it up. The theorem's model of the kernel, per key tile of at most
    ``block_n`` keys, ``ceil(n_keys / block_n)`` tiles: scores ``rnd(dot(q, k) * qk_scale)``
    (the fp32 dot over ``head_dim`` as a left-to-right sum of rounded products,
    ``qk_scale`` the fp32 ``scale * log2(e)``), ``p = exp2(rnd(s - m))``,
    ``l = rnd(rnd(l * alpha) + tl.sum(p))``, ``acc = rnd(rnd(acc * alpha) + P.V)`` with
    ``P`` rounded to ``dtype`` before the products, ``out = rnd(acc / l)`` stored in
    ``dtype``; every ``+ - * /`` round-to-nearest in fp32 (Flocq's formats, underflow
    included), ``exp2`` with relative error ``exp2_error`` plus an absolute ``2^-126``.

    Arguments: ``dtype`` the dtype of q, k, v and the output (bfloat16, float16,
    float32); ``storage_rounding`` how the kernel rounds float32 to ``dtype``: "nearest"
    (round-to-nearest-even, Triton's cast on CUDA; the instance MixedPrecision.v builds) or
    "truncate" (Triton's CPU interpreter for bfloat16: the theorem's formula at the
    truncation constants, no Coq instance for them: not a proved bound); ``max_abs_q``, ``max_abs_k``, ``max_abs_v`` upper bounds of |q_i|, |k_ji|,
    |v_jc|; ``scale`` the softmax scale (default ``1 / sqrt(head_dim)``, must be > 0);
    ``qk_abs_sum`` an upper bound of ``sum_i |q_i k_ji|`` over the row's keys (default
    ``head_dim * max_abs_q * max_abs_k``; a measured value makes the bound tighter).
    Raises ``ValueError`` on a bad argument or when the theorem's side condition
    (``afe_bL < 1``, or ``head_dim * 2^-24 < 1``) fails.

    Not covered (the theorem's file lists them): the order of the additions inside the
    tensor cores' dot (and TF32/3xTF32 products: the float32 kernel on CUDA runs
    3xTF32 dots, so for float32 on the GPU this number is not a proved bound; the
    interpreter's float32 dots are IEEE), ``tl.sum`` as a tree, the MMA accumulating
    into ``acc * alpha``, FMA contraction, additive float masks (they change the
    scores), overflow, and ``exp2_error`` itself (:data:`EXP2_ERROR`, an assumption, as
    is ``exp2(0) == 1``, which the masked theorem uses to skip fully masked tiles
    exactly). Grouped-query attention changes only which key/value head a row reads:
    covered; so are causal masks, windows and a last key tile cut by the sequence end.
    """
    p, scale = _attention_bound_args(n_keys, head_dim, block_n, max_abs_q, max_abs_k, scale, qk_abs_sum,
                                     exp2_error, dtype=dtype, max_abs_v=max_abs_v)
    args, tiles = _afe_args(n_keys, block_n, dtype, storage_rounding, exp2_error, scale, p, max_abs_v)
    got = _from_oracle(bound="attention_forward", **{k: _rational(x) for k, x in args.items()},
                       e=head_dim, block=block_n, keys=n_keys, tiles=tiles)
    if got is _NO_ORACLE:
        value = _hand_attention_forward_error_bound(*args.values(), head_dim, block_n, n_keys, tiles)
        if value == math.inf:
            got = None
    elif got is not None:
        value = _float_up(got)
    if got is None:
        raise ValueError(f"side condition afe_bL < 1 of attention_forward_error fails for n_keys={n_keys}, "
                         f"head_dim={head_dim}, block_n={block_n}, dtype={dtype}, exp2_error={exp2_error}")
    return value


def attention_forward_posteriori_bound(
    prob_abs_v: torch.Tensor, n_keys: int, head_dim: int, *, block_n: int, dtype: torch.dtype, max_abs_q: float,
    max_abs_k: float, max_abs_v: float, scale: float | None = None, qk_abs_sum: float | None = None,
    exp2_error: float = EXP2_ERROR, storage_rounding: str = "nearest",
) -> torch.Tensor:
    """Bound on ``|out_ic - exact_ic|`` entry by entry for the Triton flash-attention
    forward (kernels/ojas_kernels/attention.py): ``afp_rel * W_ic + afp_abs`` with
    ``W_ic = prob_abs_v[..., i, c] = sum_j P_ij |v_jc|`` (``P`` the exact softmax of
    ``scale * q.k`` over the row's visible keys; the caller computes it, e.g. a float64
    softmax times ``|v|``, enlarged for its own rounding). Returns a float64 tensor shaped
    like ``prob_abs_v``.

    Implements ``Ojas.FloatModel.AttentionForwardPosteriori.attention_forward_posteriori_masked``
    (the kernel's loop from its start under any boolean mask) and
    ``attention_forward_posteriori`` (fully visible tiles): the same model of the kernel
    as :func:`attention_forward_error_bound` (its docstring lists it: fp32 scores,
    ``exp2``, ``P`` rounded to ``dtype`` before the fp32 products of P.V, the running
    rescale, ``rnd(acc / l)`` stored in ``dtype``) and the same side condition
    ``afe_bL < 1``. ``afp_abs`` holds only the underflow constants (times
    ``n_keys * max_abs_v`` at most). ``W_ic <= max_abs_v``: at ``W_ic = max_abs_v`` the
    value is the a-priori bound's up to a factor ``1 + Y`` (``Y = exp(2 delta) - 1``, the
    computed scores' weights against the exact ones), and below it wherever ``W_ic`` is
    smaller by more than that (random data: several times smaller).

    The closed forms ``afp_rel``, ``afp_abs`` come from ``attn_fwd_post_q`` of
    ``Ojas.BoundValues`` (``Ojas.BoundValues.attn_fwd_post_q_sound_masked``,
    ``attn_fwd_post_q_sound``: whenever it answers ``(r, a)``, ``r * W_ic + a`` bounds the
    error): the oracle computes them over exact rationals at the same certified upper
    bounds of X, Y, P1, CG, CR as ``attn_fwd_q`` (``afe_consts``), and this function rounds
    them up and evaluates ``r * W + a`` in float64, rounded up. Without the oracle binary,
    the float64 hand copy ``_hand_attention_forward_posteriori`` (each step rounded up by a
    relative ``2^-30``; tests/test_error_bounds.py checks that it is at least the oracle's
    pair and within ``32 * 2^-30`` of its ``afp_rel``). Not covered: as for
    :func:`attention_forward_error_bound` (MMA order, ``tl.sum`` tree, FMA contraction,
    additive float masks, overflow, 3xTF32 on CUDA in float32, ``exp2_error`` an
    assumption, and ``storage_rounding="truncate"`` not a proved bound). Raises
    ``ValueError`` on a bad argument or when the side condition fails."""
    p, scale = _attention_bound_args(n_keys, head_dim, block_n, max_abs_q, max_abs_k, scale, qk_abs_sum,
                                     exp2_error, dtype=dtype, max_abs_v=max_abs_v)
    if prob_abs_v.is_complex() or not bool(((prob_abs_v >= 0) & torch.isfinite(prob_abs_v)).all()):
        raise ValueError("prob_abs_v must be finite and >= 0")
    args, tiles = _afe_args(n_keys, block_n, dtype, storage_rounding, exp2_error, scale, p, max_abs_v)
    got = _from_oracle(bound="attention_forward_posteriori", **{k: _rational(x) for k, x in args.items()},
                       e=head_dim, block=block_n, keys=n_keys, tiles=tiles)
    if got is _NO_ORACLE:
        rel, absolute = _hand_attention_forward_posteriori(*args.values(), head_dim, block_n, n_keys, tiles)
    else:
        rel, absolute = (math.inf, math.inf) if got is None else (_float_up(got[0]), _float_up(got[1]))
    if rel == math.inf:
        raise ValueError(f"side condition afe_bL < 1 of attention_forward_posteriori fails for n_keys={n_keys}, "
                         f"head_dim={head_dim}, block_n={block_n}, dtype={dtype}, exp2_error={exp2_error}")
    return (rel * prob_abs_v.to(torch.float64) + absolute) * _ROUND_UP


def _attention_bound_args(n_keys, head_dim, block_n, max_abs_q, max_abs_k, scale, qk_abs_sum, exp2_error, *,
                          dtype=torch.float32, max_abs_v=1.0) -> tuple[float, float]:
    """Validate the arguments of the attention bounds; return (qk_abs_sum, scale)."""
    for name, val in (("n_keys", n_keys), ("head_dim", head_dim), ("block_n", block_n)):
        if isinstance(val, bool) or not isinstance(val, int) or val < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {val!r}")
    if dtype not in _STORAGE:
        raise ValueError(f"dtype must be one of torch.bfloat16, torch.float16, torch.float32, got {dtype}")
    if scale is None:
        scale = 1.0 / math.sqrt(head_dim)
    for name, val in (("max_abs_q", max_abs_q), ("max_abs_k", max_abs_k), ("max_abs_v", max_abs_v),
                      ("scale", scale), ("exp2_error", exp2_error)):
        if not (isinstance(val, (int, float)) and math.isfinite(val) and val >= 0.0):
            raise ValueError(f"{name} must be a finite number >= 0, got {val!r}")
    if not scale > 0.0:
        raise ValueError(f"scale must be > 0 (the theorem's premise), got {scale}")
    if not max_abs_v > 0.0:
        raise ValueError(f"max_abs_v must be > 0 (the theorem's premise; all-zero values give zero outputs), "
                         f"got {max_abs_v}")
    p = head_dim * float(max_abs_q) * float(max_abs_k) if qk_abs_sum is None else qk_abs_sum
    if not (isinstance(p, (int, float)) and math.isfinite(p) and p >= 0.0):
        raise ValueError(f"qk_abs_sum must be a finite number >= 0, got {qk_abs_sum!r}")
    if not head_dim * _FP32_U < 1.0:
        raise ValueError(f"side condition head_dim * 2^-24 < 1 fails: head_dim={head_dim}")
    if _FP32_U * 4.0 * scale * p > _EXP_OVERFLOW:  # 2^(u K) alone is beyond float64: the side condition fails
        raise ValueError(f"side condition afe_bL < 1 of attention_forward_error fails: 2^(u K) overflows for "
                         f"scale={scale}, qk_abs_sum={p}")
    return float(p), float(scale)


def _hand_attention_lse_error_bound(u, ue, ee, ea, el, ucl, uc, scale, p, ln_n, e, b, n, t) -> float:
    """Hand copy of ``lse_bound`` of ``Ojas.FloatModel.AttentionLseError`` at the values
    ``attn_lse_q`` computes (fallback without the oracle); ``inf`` when ``bL >= 1``."""
    up = 1.0 + 2.0**-30
    smax, delta, _, _, _, _, bl = _hand_afe_common(u, ue, ee, ea, uc, scale, p, e, b, n, t)
    if not bl < 1.0:
        return math.inf
    nl = bl / (1.0 - bl) * up
    a = (smax + 2.0 * (ln_n + nl) + el) * up
    a2 = ((1.0 + u) * a + ea) * up
    return ((u * a2 * (1.0 + ucl) + ea + a2 * ucl + (u * a + ea) + el + nl + delta) * up) * _ROUND_UP


def attention_lse_error_bound(
    n_keys: int, head_dim: int, *, block_n: int, max_abs_q: float, max_abs_k: float,
    scale: float | None = None, qk_abs_sum: float | None = None, exp2_error: float = EXP2_ERROR,
    log2_error: float = LOG2_ERROR,
) -> float:
    """Bound on ``|lse - ln sum_j exp(scale q.k_j)|`` (natural log, absolute) for the
    log-sum-exp the Triton flash-attention forward saves per query row (kernels/ojas_kernels/attention.py:
    ``(m + tl.log2(l)) * ln 2`` in float32), against the exact one over the row's visible
    keys (at most ``n_keys``).

    Implements ``Ojas.FloatModel.AttentionLseError.attention_lse_error_masked`` (the
    kernel's loop from its start under any boolean mask) and ``attention_lse_error``
    (fully visible tiles), through ``attn_lse_q`` of ``Ojas.BoundValues``
    (``Ojas.BoundValues.attn_lse_q_sound_masked``, ``attn_lse_q_sound``): the oracle computes
    ``lse_bound`` over exact rationals, ``ln n_keys <= LN`` certified by a lower bound of
    ``exp(LN)``, ``-ln(1 - bL) <= bL / (1 - bL)``. The model and the arguments are those of
    :func:`attention_forward_error_bound` (the value dtype plays no part); ``log2_error``
    is the absolute error of ``tl.log2`` (:data:`LOG2_ERROR`, an assumption).

    Not covered: as for :func:`attention_forward_error_bound` (the dots' order of
    additions, FMA contraction, additive masks, 3xTF32), and ``log2_error``,
    ``exp2_error`` themselves. Raises ``ValueError`` on a bad argument or a failed side
    condition.
    """
    p, scale = _attention_bound_args(n_keys, head_dim, block_n, max_abs_q, max_abs_k, scale, qk_abs_sum,
                                     exp2_error)
    if not (isinstance(log2_error, (int, float)) and math.isfinite(log2_error) and log2_error >= 0.0):
        raise ValueError(f"log2_error must be a finite number >= 0, got {log2_error!r}")
    tiles = -(-n_keys // block_n)
    ln_n = math.log(n_keys) * (1.0 + 2.0**-40) + 2.0**-40  # a candidate the oracle checks: n <= exp_dn(ln_n)
    args = dict(u=_FP32_U, ue=float(exp2_error), ee=_EXP2_ABS_ERROR, ea=_FP32_ETA, el=float(log2_error),
                ucl=_LN2_CONST_ERROR, uc=_QK_SCALE_ERROR, scale=scale, p=p, ln=ln_n)
    got = _from_oracle(bound="attention_lse", **{k: _rational(x) for k, x in args.items()},
                       e=head_dim, block=block_n, keys=n_keys, tiles=tiles)
    if got is _NO_ORACLE:
        value = _hand_attention_lse_error_bound(*args.values(), head_dim, block_n, n_keys, tiles)
        if value == math.inf:
            got = None
    elif got is not None:
        value = _float_up(got)
    if got is None:
        raise ValueError(f"side condition afe_bL < 1 of attention_lse_error fails for n_keys={n_keys}, "
                         f"head_dim={head_dim}, block_n={block_n}, exp2_error={exp2_error}")
    return value


# |c2 ln 2 - 1| <= uc2 for the backward's float32 constant c2 = float32(1.4426950408889634)
# (the float64 nearest log2 e, rounded to float32): (1 + 2^-53)(1 + 2^-24) - 1 <= 2^-24 + 2^-52.
_LOG2E_CONST_ERROR = 2.0**-24 + 2.0**-52


def _backward_weight_terms(n_items: int, n_tiles: int, head_dim: int, block: int, max_abs_q: float,
                           max_abs_k: float, max_abs_lse: float, lse_error: float, scale: float | None,
                           qk_abs_sum: float | None, exp2_error: float, dtype: torch.dtype,
                           storage_rounding: str) -> dict[str, Any]:
    """The exact-rational constants the backward bounds share: the arguments checked, the
    model's ``u, ea, ue, ee, us, es``, ``scale``, ``X >= 2^(2 (delta + Dl) + u Am + ea)`` (score
    terms from ``score2_error``, ``Dl``, ``Am`` from ``lse2_close``; ``X = 1 + perturbation_q(x / 2)``)
    and ``g`` = gamma of ``(block - 1) + (n_tiles - 1)`` (the blocked sum over the tiles)."""
    p, scale = _attention_bound_args(max(n_items, 1), head_dim, block, max_abs_q, max_abs_k, scale,
                                     qk_abs_sum, exp2_error, dtype=dtype)
    for name, val in (("max_abs_lse", max_abs_lse), ("lse_error", lse_error)):
        if not (isinstance(val, (int, float)) and math.isfinite(val) and val >= 0.0):
            raise ValueError(f"{name} must be a finite number >= 0, got {val!r}")
    if n_items < 0 or n_tiles < 1:
        raise ValueError(f"the item count must be >= 0 and the tile count >= 1, got {n_items}, {n_tiles}")
    F_ = Fraction
    u, ea, ue, ee = F_(_FP32_U), F_(_FP32_ETA), F_(float(exp2_error)), F_(_EXP2_ABS_ERROR)
    us, es = (F_(x) for x in _storage(dtype, storage_rounding))
    uc2 = F_(_LOG2E_CONST_ERROR)
    sargs = dict(u=_rational(u), ea=_rational(ea), scale=_rational(scale), uc=_rational(_QK_SCALE_ERROR),
                 e=head_dim, p=_rational(p))
    smax, delta = (_from_oracle(bound=b, **sargs) for b in ("score_max", "score_delta"))
    if smax is _NO_ORACLE or delta is _NO_ORACLE:
        raise RuntimeError("the attention backward bounds need the oracle (make -C extraction): no hand copy")
    smax, delta = F_(smax), F_(delta)
    lb, lmax = F_(float(lse_error)), F_(float(max_abs_lse)) + F_(float(lse_error))
    dl = lb + lmax * (u * (1 + uc2) + uc2) + ea
    am = smax + 2 * ((1 + uc2) * lmax) * (1 + u) + ea
    x = 2 * (delta + dl) + u * am + ea
    pert = _from_oracle(bound="perturbation", delta=_rational(x / 2))
    if pert is None or float(x) > _EXP_OVERFLOW:
        raise ValueError(f"the exp2 argument error {float(x)} is too large")
    k = (block - 1) + (n_tiles - 1)
    g = _from_oracle(bound="gamma", u=_rational(u), n=k) if k * _FP32_U < 1.0 else None
    if g is None:
        raise ValueError(f"side condition fails: ((block - 1) + (tiles - 1)) u >= 1 for k={k}")
    return dict(u=u, ea=ea, ue=ue, ee=ee, us=us, es=es, scale=F_(scale), X=1 + F_(pert), g=F_(g))


def _enlarged(t: torch.Tensor, n_terms: int) -> torch.Tensor:
    """A float64 sum of ``n_terms`` nonnegative terms, enlarged by ``4 (n + 1) 2^-53`` for its own rounding."""
    return t.to(torch.float64) * (1.0 + 4 * (n_terms + 1) * 2.0**-53)


def attention_dv_error_bound(
    prob_abs_do: torch.Tensor, n_queries: int, n_query_tiles: int, head_dim: int, *, block_m: int,
    dtype: torch.dtype, max_abs_q: float, max_abs_k: float, max_abs_do: float, max_abs_lse: float,
    lse_error: float, scale: float | None = None, qk_abs_sum: float | None = None,
    exp2_error: float = EXP2_ERROR, storage_rounding: str = "nearest",
) -> torch.Tensor:
    """A-posteriori bounds on ``|dV_jc - sum_i P_ij dO_ic|`` for the dK/dV kernel of the
    Triton flash attention (kernels/ojas_kernels/attention.py), one per entry of ``prob_abs_do``.

    Implements ``Ojas.FloatModel.AttentionBackwardError.dv_error`` (the kernel's dV
    coordinate: base-2 scores ``rnd(dot(k, q) * qk_scale)``, ``p = exp2(rnd(s2 - lse2))``
    (0 where masked), ``p`` rounded to ``dtype`` before the products, the query tiles
    summed blocked in fp32, dV stored in ``dtype``) with its ``Dl`` and ``Am`` from
    ``Ojas.FloatModel.AttentionBackwardError.lse2_close`` (the backward's
    ``lse2 = rnd(lse * log2 e)`` from a forward lse within ``lse_error`` of the exact
    one, e.g. :func:`attention_lse_error_bound`) and its score terms from
    ``Ojas.FloatModel.AttentionForwardError.score2_error``::

        bound = (1 + us) (((1 + g) F - 1) S + (1 + g) n c) + us S + es,

    ``S = prob_abs_do`` = ``sum_i P_ij |dO_ic|`` over the visible queries of key ``j``
    (every query head of its group; computed by the caller from exact probabilities, in
    float64: enlarged here by ``4 (n + 1) 2^-53``), ``n = n_queries``, ``g`` = gamma of
    ``(block_m - 1) + (n_query_tiles - 1)``, ``F = (1+u)(1+us)(1+ue) X``, ``c`` the absolute
    term. The scalar factors come from the oracle (``gamma``; ``score_max_q``,
    ``score_delta_q`` of ``Ojas.BoundValues``; ``X = 1 + perturbation_q(x / 2) >= 2^x``);
    composing them is exact rational arithmetic here (no single Coq theorem states the
    composed number), the tensor part float64 rounded up by 2^-40.

    Not covered: the MMA order and its accumulation into dv, FMA contraction, 3xTF32
    (float32 on CUDA), ``exp2_error`` (an assumption); dK and dQ: :func:`attention_dk_error_bound`.
    """
    if not (isinstance(max_abs_do, (int, float)) and math.isfinite(max_abs_do) and max_abs_do >= 0.0):
        raise ValueError(f"max_abs_do must be a finite number >= 0, got {max_abs_do!r}")
    c = _backward_weight_terms(n_queries, n_query_tiles, head_dim, block_m, max_abs_q, max_abs_k, max_abs_lse,
                               lse_error, scale, qk_abs_sum, exp2_error, dtype, storage_rounding)
    u, ea, ue, ee, us, es, g = (c[name] for name in ("u", "ea", "ue", "ee", "us", "es", "g"))
    Ff = (1 + u) * (1 + us) * ((1 + ue) * c["X"])
    cc = (1 + u) * ((1 + us) * ee + es) * Fraction(float(max_abs_do)) + ea
    a = _float_up((1 + us) * ((1 + g) * Ff - 1) + us)     # coefficient of S
    b = _float_up((1 + us) * (1 + g) * n_queries * cc + es)  # constant
    return (a * _enlarged(prob_abs_do, n_queries) + b) * _ROUND_UP


def attention_delta_error_bound(o_do_abs_sum: torch.Tensor, value_dim: int) -> torch.Tensor:
    """Bounds on ``|delta_i - dO_i . o_i|`` for the dQ kernel's ``delta = tl.sum(o * dO)``
    (float32 products, any reduction order), against the real dot of the STORED output ``o``
    and ``dO``; one per entry of ``o_do_abs_sum`` = ``sum_c |o_ic dO_ic|`` (float64, enlarged
    here for its own rounding).

    Implements ``Ojas.FloatModel.AttentionGradError.delta_close`` with the tree depth
    ``value_dim - 1`` (every binary reduction tree of ``value_dim`` terms is that deep at
    most)::

        bound = gamma(Ev - 1) ((1 + u) S + Ev ea) + u S + Ev ea.

    Against the exact ``dO_i . O_i``, add ``e * sum_c |dO_ic|`` for an output within ``e`` of
    the exact one per coordinate (``Ojas.FloatModel.AttentionGradError.dot_R_perturb``; ``e``
    from :func:`attention_forward_error_bound`). Not covered: ``tl.sum``'s padding zeros when
    the kernel's ``BLOCK_EV`` exceeds ``value_dim``, FMA contraction of the products into the sums.
    """
    if isinstance(value_dim, bool) or not isinstance(value_dim, int) or value_dim < 1:
        raise ValueError(f"value_dim must be an integer >= 1, got {value_dim!r}")
    u, ea = Fraction(_FP32_U), Fraction(_FP32_ETA)
    g = _from_oracle(bound="gamma", u=_rational(u), n=value_dim - 1)
    if g is _NO_ORACLE:
        raise RuntimeError("attention_delta_error_bound needs the oracle (make -C extraction): no hand copy")
    g = Fraction(g)
    a = _float_up(g * (1 + u) + u)
    b = _float_up((g + 1) * value_dim * ea)
    return (a * _enlarged(o_do_abs_sum, value_dim) + b) * _ROUND_UP


# |fp32(scale) - scale| <= 2^-24 scale: the float32 scale the backward kernels multiply dK and dQ by.
_SCALE_CONST_ERROR = 2.0**-24


def _attention_grad_error_bound(
    sums: tuple[torch.Tensor, torch.Tensor, torch.Tensor], n_items: int, n_tiles: int, head_dim: int,
    value_dim: int, *, block: int, max_abs_w: float, dtype: torch.dtype, max_abs_q: float, max_abs_k: float,
    dp_abs_sum: float, max_abs_y: float, max_delta_error: float, max_abs_lse: float, lse_error: float,
    scale: float | None = None, qk_abs_sum: float | None = None, exp2_error: float = EXP2_ERROR,
    storage_rounding: str = "nearest",
) -> torch.Tensor:
    """``grad_bound`` of ``Ojas.FloatModel.AttentionGradError`` (``dk_error``, ``dq_error``) over
    tensors ``(S1, S2, S3)``: the bound is linear in them, its four coefficients exact rationals."""
    for name, val in (("max_abs_w", max_abs_w), ("dp_abs_sum", dp_abs_sum), ("max_abs_y", max_abs_y),
                      ("max_delta_error", max_delta_error)):
        if not (isinstance(val, (int, float)) and math.isfinite(val) and val >= 0.0):
            raise ValueError(f"{name} must be a finite number >= 0, got {val!r}")
    if isinstance(value_dim, bool) or not isinstance(value_dim, int) or value_dim < 1:
        raise ValueError(f"value_dim must be an integer >= 1, got {value_dim!r}")
    c = _backward_weight_terms(n_items, n_tiles, head_dim, block, max_abs_q, max_abs_k, max_abs_lse, lse_error,
                               scale, qk_abs_sum, exp2_error, dtype, storage_rounding)
    u, ea, ue, ee, us, es, g, scale = (c[k] for k in ("u", "ea", "ue", "ee", "us", "es", "g", "scale"))
    F_ = Fraction
    ge, ge1 = (F_(_from_oracle(bound="gamma", u=_rational(u), n=n)) for n in (value_dim, value_dim - 1))
    ep = ge * F_(float(dp_abs_sum)) + (1 + ge1) * value_dim * ea                     # dot_err Ev Pd
    E = (1 + ue) * c["X"]
    ga = (1 + u) * (1 + us) * ((1 + u) * (1 + u) * E - 1) + (1 + u) * us + u      # grad_A
    gb = (1 + u) * (1 + us) * ((1 + u) * E)                                         # grad_B
    crm = (1 + u) * (ep + F_(float(max_delta_error))) + ea
    gc = (((1 + u) * (1 + us) * ((1 + u) * ee * ((1 + u) * F_(float(max_abs_y)) + crm) + ea) + (1 + u) * es)
          * F_(float(max_abs_w)) + ea)                                              # grad_c
    ucs = F_(_SCALE_CONST_ERROR)
    k = (1 + us) * scale * (1 + u) * (1 + ucs)     # grad_bound's factor of eA
    a1 = _float_up(k * ((1 + g) * ga + g) + (1 + us) * scale * (u * (1 + ucs) + ucs) + us * scale)
    a2 = _float_up(k * (1 + g) * gb * ((1 + u) * ep + ea))
    a3 = _float_up(k * (1 + g) * gb * (1 + u))
    b = _float_up(k * (1 + g) * n_items * gc + (1 + us) * ea + es)
    s1, s2, s3 = (_enlarged(t, n_items) for t in sums)
    return (a1 * s1 + a2 * s2 + a3 * s3 + b) * _ROUND_UP


def attention_dk_error_bound(sums: tuple[torch.Tensor, torch.Tensor, torch.Tensor], n_queries: int,
                             n_query_tiles: int, head_dim: int, value_dim: int, *, block_m: int, max_abs_q: float,
                             **kwargs: Any) -> torch.Tensor:
    """A-posteriori bounds on ``|dK_je - scale sum_i P_ij (dP_ij - D_i) q_ie|`` for the dK/dV
    kernel of the Triton flash attention (kernels/ojas_kernels/attention.py, ``_dkdv_tile``), one per
    entry of the sums ``(S1, S2, S3)`` (each ``[.., Sk, E]``, over the visible queries of
    key ``j``, every query head of its group, from exact probabilities, float64):
    ``S1 = sum_i P_ij |dP_ij - D_i| |q_ie|``, ``S2 = sum_i P_ij |q_ie|``,
    ``S3 = sum_i P_ij eD_i |q_ie|``, with ``dP_ij = dO_i . v_j`` and ``D_i`` the real number
    the kernel's ``delta_i`` is within ``eD_i <= max_delta_error`` of: ``dO_i . O_i`` of the
    exact output for the exact gradient (``eD`` then includes the stored output's error:
    :func:`attention_delta_error_bound`), or of the stored output.

    Implements ``Ojas.FloatModel.AttentionGradError.dk_error`` (the kernel's schedule:
    scores ``rnd(dot(k, q) * qk_scale)``, ``p = exp2(rnd(s2 - lse2))`` (0 where masked),
    ``dp = dot(v, dO)`` in fp32, ``ds = rnd(p * rnd(dp - delta))`` rounded to ``dtype``,
    products with ``q`` in fp32, the query tiles summed blocked, times the float32 scale,
    stored in ``dtype``) with ``Dl``, ``Am`` from ``lse2_close`` and the score terms from
    ``score2_error``; the value is ``grad_bound`` at ``SR = ((1 + u) eP + ea) S2 + (1 + u) S3``,
    ``eP`` = ``dot_err value_dim dp_abs_sum``, ``Ym = max_abs_y``, ``W = max_abs_q``,
    ``n = n_queries``, ``t = n_query_tiles``. The scalar factors come from the oracle
    (``gamma``, ``score_max_q``, ``score_delta_q``, ``perturbation_q``), composed in exact
    rationals here; the tensor part float64, rounded up.

    Keyword arguments besides ``block_m`` (the kernel's query tile) and ``max_abs_q``: ``dtype``,
    ``max_abs_k``, ``qk_abs_sum``, ``scale``, ``exp2_error``, ``storage_rounding`` as for
    :func:`attention_forward_error_bound`; ``max_abs_lse``, ``lse_error`` as for
    :func:`attention_dv_error_bound`; ``dp_abs_sum >= sum_c |v_jc dO_ic|``,
    ``max_abs_y >= |dP_ij - D_i|`` over the visible pairs, ``max_delta_error >= eD_i``.

    Not covered: the MMA order and its accumulation into dk, FMA contraction, 3xTF32
    (float32 on CUDA: not a proved bound there), ``exp2_error`` (an assumption)."""
    return _attention_grad_error_bound(sums, n_queries, n_query_tiles, head_dim, value_dim, block=block_m,
                                       max_abs_w=max_abs_q, max_abs_q=max_abs_q, **kwargs)


def attention_dq_error_bound(sums: tuple[torch.Tensor, torch.Tensor, torch.Tensor], n_keys: int,
                             n_key_tiles: int, head_dim: int, value_dim: int, *, block_n: int, max_abs_k: float,
                             **kwargs: Any) -> torch.Tensor:
    """A-posteriori bounds on ``|dQ_ie - scale sum_j P_ij (dP_ij - D_i) k_je|`` for the dQ
    kernel of the Triton flash attention (kernels/ojas_kernels/attention.py, ``_dq_tile``), one per entry
    of the sums ``(S1, S2, S3)`` (each ``[.., Sq, E]``, over the visible keys of query ``i``):
    ``S1 = sum_j P_ij |dP_ij - D_i| |k_je|``, ``S2 = sum_j P_ij |k_je|``, ``S3 = eD_i S2``
    (``D_i``, ``eD_i`` as in :func:`attention_dk_error_bound`).

    Implements ``Ojas.FloatModel.AttentionGradError.dq_error`` (the kernel's schedule as for
    dK, over the key tiles of ``block_n`` keys, ``dp = dot(dO, v)``, products with ``k``);
    the value is ``grad_bound`` as in :func:`attention_dk_error_bound` with ``W = max_abs_k``,
    ``n = n_keys``, ``t = n_key_tiles``; the other keyword arguments are its. Not covered: as
    for :func:`attention_dk_error_bound`."""
    return _attention_grad_error_bound(sums, n_keys, n_key_tiles, head_dim, value_dim, block=block_n,
                                       max_abs_w=max_abs_k, max_abs_k=max_abs_k, **kwargs)


# ---------------------------------------------------------------------------
# Chunked linear cross-entropy, the streamed lse of kernels/ojas_kernels/linear_cross_entropy.py
# ---------------------------------------------------------------------------

# Relative error of the kernel's tl.exp (float32) for arguments x <= 0, plus the absolute
# _EXP2_ABS_ERROR below the normal range: an assumption, not a theorem (the Section
# hypothesis ex_err of rocq/FloatModel/CrossEntropyLseError.v). In the CPU interpreter
# tl.exp is numpy's float32 exp (within a few ulp); on NVIDIA GPUs Triton lowers it to
# ex2.approx.f32 of rnd(x * log2 e), whose relative error grows with |x|: about
# 2^-22 + |x| log2(e) 2^-24 ln 2 <= 5.6e-6 on [-88, 0]. 2^-17 = 7.6e-6 covers both (to be
# measured on the device: benchmarks/bench_linear_cross_entropy_error.py).
LCE_EXP_ERROR: float = 2.0**-17
# Absolute error of the kernel's tl.log on the row sum l in [1, V] (lg_err): an assumption,
# which the theorems take for float32 x in [1/(1+b), (1+b) e^LN] (b the row sum's relative
# error, so within [1/2, 2 e^LN] when b <= 1); a float32 result below 16 has an ulp of 2^-20
# at most; 2^-18 as margin.
LCE_LOG_ERROR: float = 2.0**-18
# Absolute error of the kernel's computed tanh(r / c) in _softcap (1 - 2 / (tl.exp(min(2r / c,
# 80)) + 1), float32) for every float32 raw logit r (th_err of
# rocq/FloatModel/CrossEntropySoftcapError.v, with ut = 0): an assumption, not a theorem. The
# interpreter's numpy ops round to nearest; on NVIDIA GPUs tl.exp is ex2.approx.f32 and the
# division div.full.f32 (2 ulp), about 2^-21 + 2^-23 in all. 2^-20 as margin (measured by
# lce_error.measured_tanh_error: tests/test_linear_cross_entropy_error_bound.py).
LCE_TANH_ERROR: float = 2.0**-20
# Relative error of the kernel's float32 division z / c in _cap_chain (dv_err, with 2^-126
# absolute): an assumption. IEEE in the interpreter (2^-24); div.full.f32 on NVIDIA GPUs
# (2 ulp, 2^-22); 2^-21 as margin.
LCE_DIV_ERROR: float = 2.0**-21


def _frac_pow(x: Fraction, n: int) -> Fraction:
    return x ** n


def _exp_up_small(x: Fraction) -> Fraction:
    """An upper bound of e^x for 0 <= x <= 1: 1 + x + x^2."""
    if not 0 <= x <= 1:
        raise ValueError(f"exp argument {float(x)} outside [0, 1]")
    return 1 + x + x * x


def _lce_logit_terms(vocab_size, hidden_dim, dtype, max_abs_input, max_abs_weight, dot_abs_sum,
                     logits_in_dtype):
    """(delta, Zmax) as Fractions: the logits' error against h.w_v and the bound of the
    computed logits' magnitudes."""
    if dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"dtype must be float32, bfloat16 or float16, got {dtype!r}")
    if not (isinstance(hidden_dim, int) and hidden_dim >= 1):
        raise ValueError(f"hidden_dim must be an int >= 1, got {hidden_dim!r}")
    if not (isinstance(vocab_size, int) and vocab_size >= 1):
        raise ValueError(f"vocab_size must be an int >= 1, got {vocab_size!r}")
    if dot_abs_sum is None:
        for name, v in (("max_abs_input", max_abs_input), ("max_abs_weight", max_abs_weight)):
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a finite number >= 0 (or give dot_abs_sum), got {v!r}")
        p = Fraction(hidden_dim) * Fraction(float(max_abs_input)) * Fraction(float(max_abs_weight))
    else:
        if not (isinstance(dot_abs_sum, (int, float)) and math.isfinite(dot_abs_sum) and dot_abs_sum >= 0):
            raise ValueError(f"dot_abs_sum must be a finite number >= 0, got {dot_abs_sum!r}")
        p = Fraction(float(dot_abs_sum))
    u = Fraction(_FP32_U)
    if hidden_dim * _FP32_U >= 1.0:
        raise ValueError(f"hidden_dim * 2^-24 must be < 1, got {hidden_dim}")
    gam = hidden_dim * u / (1 - hidden_dim * u)  # any order of the D - 1 additions, rounded products
    dot = gam * p + (1 + gam) * hidden_dim * Fraction(_FP32_ETA)
    zc = p + dot
    if logits_in_dtype and dtype != torch.float32:
        us, es = (Fraction(x) for x in _STORAGE[dtype])
        return dot + us * zc + es, zc * (1 + us) + es
    return dot, zc


def _softcapped(delta, zmax, softcap, tanh_error, tanh_rel_error):
    """(delta, Zmax) of the capped logits (Fractions): ``sc_delta`` and ``sc_zmax`` of
    ``Ojas.FloatModel.CrossEntropySoftcapError.sc_logit_error`` from the raw logits' ``delta``
    (``zmax`` kept without a cap)."""
    if softcap is None:
        return delta, zmax
    if not (isinstance(softcap, (int, float)) and math.isfinite(softcap) and softcap > 0):
        raise ValueError(f"softcap must be a finite number > 0 or None, got {softcap!r}")
    for name, v in (("tanh_error", tanh_error), ("tanh_rel_error", tanh_rel_error)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and 0 <= v < 1):
            raise ValueError(f"{name} must be a finite number in [0, 1), got {v!r}")
    u, ea, c = Fraction(_FP32_U), Fraction(_FP32_ETA), Fraction(float(softcap))
    ut, et = Fraction(float(tanh_rel_error)), Fraction(float(tanh_error))
    return delta + c * (ut + et) + u * (c * (1 + ut + et)) + ea, (1 + u) * (c * (1 + ut + et)) + ea


def _lce_delta_zmax(vocab_size, hidden_dim, dtype, max_abs_input, max_abs_weight, dot_abs_sum, logits_in_dtype,
                    exact_logits, max_abs_logit, exp_error, log_error):
    """The checked premises' (delta, Zmax) of the lse bounds (``exact_logits``: delta = 0)."""
    for name, v in (("exp_error", exp_error), ("log_error", log_error)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and 0 <= v < 1):
            raise ValueError(f"{name} must be a finite number in [0, 1), got {v!r}")
    if not exact_logits:
        return _lce_logit_terms(vocab_size, hidden_dim, dtype, max_abs_input, max_abs_weight, dot_abs_sum,
                                logits_in_dtype)
    if not (isinstance(max_abs_logit, (int, float)) and math.isfinite(max_abs_logit) and max_abs_logit >= 0):
        raise ValueError(f"exact_logits needs max_abs_logit, a finite number >= 0, got {max_abs_logit!r}")
    if not (isinstance(vocab_size, int) and vocab_size >= 1):
        raise ValueError(f"vocab_size must be an int >= 1, got {vocab_size!r}")
    return Fraction(0), Fraction(float(max_abs_logit))


def linear_cross_entropy_lse_error_bound(
    vocab_size: int, hidden_dim: int, *, dtype: torch.dtype, block_v: int,
    max_abs_input: float | None = None, max_abs_weight: float | None = None, dot_abs_sum: float | None = None,
    tile_sum_depth: int | None = None, logits_in_dtype: bool = True, exact_logits: bool = False,
    max_abs_logit: float | None = None, exp_error: float = LCE_EXP_ERROR, log_error: float = LCE_LOG_ERROR,
    softcap: float | None = None, tanh_error: float = LCE_TANH_ERROR, tanh_rel_error: float = 0.0,
) -> float:
    """Bound on ``|lse_kernel - ln sum_v exp(h . w_v)|`` for one token of the chunked linear
    cross-entropy (kernels/ojas_kernels/linear_cross_entropy.py, ``_rows_kernel`` with STREAM: the
    3-product schedule, the default for reductions "mean" / "sum" with a gradient, and
    ``fwd_logits="cublas"``), no bias; with ``softcap = c`` against
    ``ln sum_v exp(c tanh(h . w_v / c))``.

    Implements ``Ojas.FloatModel.CrossEntropyLseError.ce_lse_error``
    (rocq/FloatModel/CrossEntropyLseError.v): over ``ceil(V / block_v)`` vocabulary tiles of
    ``block_v`` fp32 logits, ``m' = max(m, max z)``, ``l = rnd(rnd(l * exp(rnd(m - m'))) +
    tl.sum(exp(rnd(z - m'))))``, ``lse = rnd(m + log(l))``, every operation round-to-nearest
    fp32 (Flocq's format, underflow included),
      bound = u (Zmax + LN + NL + el) + el + NL + delta,
    ``NL = bL / (1 - bL) >= -ln(1 - bL)``, ``bL = ce_bL`` (the rescaling factors telescope),
    ``LN >= ln V``, ``Zmax`` a bound of the computed logits, ``delta`` of their error.
    The oracle computes it (``ce_lse_q`` of ``Ojas.BoundValues``,
    ``Ojas.BoundValues.ce_lse_q_sound``: exact rationals, certified upper bounds of
    ``exp(2 u Zmax)`` and of the powers, ``ln V <= LN`` checked); without the oracle a hand
    copy in exact rationals (``fractions``), rounded up.

    Premises, not theorems: ``exp_error`` (:data:`LCE_EXP_ERROR`) for ``tl.exp`` on x <= 0
    plus 2^-126 absolute, ``log_error`` (:data:`LCE_LOG_ERROR`) for ``tl.log``; ``tl.sum``
    a tree of rounded additions of depth ``tile_sum_depth`` (default ``block_v - 1``, which
    every binary tree of ``block_v`` leaves meets); and ``delta``: with ``exact_logits`` the
    logits the kernel reads are taken as the exact ones (``delta = 0``; compare with a
    float64 logsumexp of those very logits; ``max_abs_logit`` bounds them), else
    ``delta = gamma_D P (+ the storage rounding u_s |z| when ``logits_in_dtype``, as the
    3-product schedule stores them in bfloat16 / float16)``, ``P`` = ``dot_abs_sum`` (a bound
    of ``sum_i |h_i w_vi|``) or ``hidden_dim max_abs_input max_abs_weight``; ``gamma_D`` is the
    classical worst case of any summation order (Higham, Thm 3.1), NOT a Coq theorem for
    cuBLAS's or the CPU BLAS's order (BlockedSum.v proves the blocked order of the Triton
    dots). float32 logits under TF32 (``torch.set_float32_matmul_precision("high")``) are
    not covered. With ``softcap``: ``Ojas.FloatModel.CrossEntropySoftcapError.ce_lse_error_softcap``,
    the raw logits' ``delta`` (above; ``exact_logits``: the raw logits read are the exact ones)
    and ``Zmax`` replaced by ``sc_delta = delta + c (ut + et) + u c (1 + ut + et) + eta`` and
    ``sc_zmax = (1 + u) c (1 + ut + et) + eta`` (``sc_logit_error``: the softcap is 1-Lipschitz,
    ``softcap_lipschitz``; a hand copy in exact rationals), premise: the kernel's computed
    tanh within ``tanh_rel_error |tanh| + tanh_error`` (:data:`LCE_TANH_ERROR`). Not covered
    at all: bias, label smoothing, z-loss, FMA contraction, overflow. The two-level schedule (4 products, ``linear_cross_entropy_forward``) has its own
    bound: :func:`linear_cross_entropy_merge_lse_error_bound`.
    Raises ``ValueError`` on a bad argument or when ``bL < 1`` fails (vacuous)."""
    if not (isinstance(block_v, int) and block_v >= 1):
        raise ValueError(f"block_v must be an int >= 1, got {block_v!r}")
    dt = block_v - 1 if tile_sum_depth is None else tile_sum_depth
    if not (isinstance(dt, int) and 0 <= dt <= max(block_v - 1, 0)) and tile_sum_depth is not None:
        raise ValueError(f"tile_sum_depth must be an int in [0, block_v - 1], got {tile_sum_depth!r}")
    delta, zmax = _lce_delta_zmax(vocab_size, hidden_dim, dtype, max_abs_input, max_abs_weight, dot_abs_sum,
                                  logits_in_dtype, exact_logits, max_abs_logit, exp_error, log_error)
    delta, zmax = _softcapped(delta, zmax, softcap, tanh_error, tanh_rel_error)
    F_ = Fraction
    u, ea, ue, ee, el = F_(_FP32_U), F_(_FP32_ETA), F_(float(exp_error)), F_(_EXP2_ABS_ERROR), F_(float(log_error))
    tt, bt, nn = -(-vocab_size // block_v), block_v, vocab_size
    ln_v = F_(math.log(vocab_size)) * F_(1 + 2.0**-40) + F_(2.0**-60)
    got = _from_oracle(bound="linear_cross_entropy_lse", u=_rational(u), ue=_rational(ue), ee=_rational(ee),
                       ea=_rational(ea), el=_rational(el), zmax=_rational(zmax), delta=_rational(delta),
                       ln=_rational(ln_v), depth=dt, block=bt, tiles=tt, vocab=nn)
    if got is None:
        raise ValueError("the bound is vacuous or a check failed (ce_lse_q answered None: bL >= 1 or ln V > LN)")
    if got is not _NO_ORACLE:
        return _float_up(got) * _ROUND_UP
    # hand copy of ce_lse_q (no oracle): exact rationals, exact powers
    xk = _exp_up_small(u * 2 * zmax)
    c, r = _ce_level(u, ue, ee, ea, xk, F_(1), F_(0), F_(1), dt, bt, tt, nn)
    bl = c - 1 + r
    if not bl < 1:
        raise ValueError(f"the bound is vacuous: bL = {float(bl)} >= 1")
    nl = bl / (1 - bl)
    bound = u * (zmax + ln_v + nl + el) + el + nl + delta
    return _float_up(bound) * _ROUND_UP


def linear_cross_entropy_loss_error_bound(lse_bound: float, logit_error: float, max_abs_loss: float) -> float:
    """Bound on ``|loss_kernel - (ln sum_v e^(y_v) - y_t)|`` for one token, no label smoothing
    and no z-loss (the kernel's other terms are exact zeros):
    ``Ojas.FloatModel.CrossEntropyLseError.ce_loss_error``,
    ``(1 + u) (lse_bound + logit_error) + u max_abs_loss``, with ``lse_bound`` from
    :func:`linear_cross_entropy_lse_error_bound`, ``logit_error`` the bound of the target
    logit's error (the same ``delta``: :func:`linear_cross_entropy_logit_error_bound`) and
    ``max_abs_loss`` a bound of the exact ``|lse - y_t|`` (e.g. ``ln V + 2 max|y|``). With a
    softcap (``Ojas.FloatModel.CrossEntropySoftcapError.ce_loss_error_softcap``) the same
    formula with the capped logits' ``sc_delta`` and ``y`` the exact capped logits. It charges
    ``delta`` twice; for confident tokens see :func:`linear_cross_entropy_loss_posteriori_bound`."""
    for name, v in (("lse_bound", lse_bound), ("logit_error", logit_error), ("max_abs_loss", max_abs_loss)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
    u = Fraction(_FP32_U)
    b = (1 + u) * (Fraction(float(lse_bound)) + Fraction(float(logit_error))) + u * Fraction(float(max_abs_loss))
    return _float_up(b) * _ROUND_UP


def linear_cross_entropy_loss_posteriori_bound(
    probs: torch.Tensor, target: torch.Tensor, logit_error: torch.Tensor | float, stream_lse_bound: float, *,
    ignore_index: int = -100,
) -> torch.Tensor:
    """Per-token bounds [N] on ``|loss_kernel - (ln sum_v e^(y_v) - y_t)|`` (0 at ignored tokens)
    for the 3-product STREAM schedule, no softcap / label smoothing / z-loss, in which the
    logits' errors enter weighted by the softmax, so that a confident token's bound falls to
    the stream's own rounding.

    Implements ``Ojas.FloatModel.CrossEntropyLossPosteriori.ce_loss_posteriori``
    (rocq/FloatModel/CrossEntropyLossPosteriori.v):
    ``(1 + u) (B + NP) + u (-ln p_t)``, ``NP = -ln(1 - E)`` (float64 ``log1p``),
    ``E = sum_(v != t) p_v (e^(delta_v + delta_t) - 1)`` (an upper bound of the theorem's
    ``sum_v p_v (e^|d_v| - 1)``, ``|d_v| = |(z_v - z_t) - (y_v - y_t)| <= delta_v + delta_t``),
    with ``probs`` [N, V] the exact softmax of the exact logits ``y`` (the caller's, e.g. float64),
    ``logit_error`` a bound ``delta_v`` of each computed logit's error (a scalar or [N, V], e.g.
    :func:`linear_cross_entropy_logit_error_bound`: a premise, as there) and ``stream_lse_bound``
    the theorem's ``B``: :func:`linear_cross_entropy_lse_error_bound` with ``exact_logits=True``
    and ``max_abs_logit`` a bound of the computed logits. Not proved: this float64 evaluation of
    ``E`` (enlarged by a relative ``4 (V + 8) 2^-53``, then everything by 2^-40) and the caller's
    probabilities. For rows far from confident (``E`` near ``2 delta``) the a-priori
    :func:`linear_cross_entropy_loss_error_bound` is tighter; both are theorems, so their minimum
    is a bound. Raises ``ValueError`` when ``E >= 1`` at a kept token (vacuous)."""
    f64 = torch.float64
    p = probs.to(f64)
    n, v = p.shape
    keep = target != ignore_index
    t = torch.where(keep, target, torch.zeros_like(target)).to(p.device).long().unsqueeze(1)
    d = torch.as_tensor(logit_error, dtype=f64, device=p.device).expand(n, v)
    w = p * torch.expm1(d + d.gather(1, t))
    e = w.scatter(1, t, 0.0).sum(1) * (1 + 4 * (v + 8) * 2.0**-53)
    keep = keep.to(p.device)
    if bool((e[keep] >= 1).any()):
        raise ValueError(f"the bound is vacuous: E = {e[keep].max().item()} >= 1")
    u = _FP32_U
    np_ = -torch.log1p(-e)
    lt = -torch.log(p.gather(1, t).squeeze(1))
    bound = ((1 + u) * (float(stream_lse_bound) + np_) + u * lt) * _ROUND_UP
    return torch.where(keep, bound, torch.zeros_like(bound))


def linear_cross_entropy_softcap_logit_error_bound(
    raw_error: float, softcap: float, *, tanh_error: float = LCE_TANH_ERROR, tanh_rel_error: float = 0.0,
) -> tuple[float, float]:
    """``(sc_delta, sc_zmax)`` of ``Ojas.FloatModel.CrossEntropySoftcapError.sc_logit_error``:
    the error of the kernel's capped logit ``rnd(c * th(r))`` against ``c tanh(y / c)`` when
    ``|r - y| <= raw_error``, and the bound of its magnitude (premise: the computed tanh within
    ``tanh_rel_error |tanh| + tanh_error``)."""
    if not (isinstance(raw_error, (int, float)) and math.isfinite(raw_error) and raw_error >= 0):
        raise ValueError(f"raw_error must be a finite number >= 0, got {raw_error!r}")
    if softcap is None:
        raise ValueError("softcap must be a finite number > 0, got None")
    d, z = _softcapped(Fraction(float(raw_error)), None, softcap, tanh_error, tanh_rel_error)
    return _float_up(d) * _ROUND_UP, _float_up(z) * _ROUND_UP


def linear_cross_entropy_softcap_chain_error_bound(logit_error: float, softcap: float, *,
                                                   div_error: float = LCE_DIV_ERROR) -> float:
    """Bound on ``|cf - (1 - tanh(y / c)^2)|`` for the gradient's chain factor ``cf`` that
    ``_cap_chain`` computes from a capped logit within ``logit_error`` of ``c tanh(y / c)``
    (e.g. ``sc_delta`` of :func:`linear_cross_entropy_softcap_logit_error_bound`):
    ``sc_chain_bound`` of ``Ojas.FloatModel.CrossEntropySoftcapError.sc_chain_error`` (a hand
    copy in exact rationals; premise: the division within ``div_error |z / c| + 2^-126``,
    :data:`LCE_DIV_ERROR`). The capped dH, dW: :func:`linear_cross_entropy_grad_error_bound`
    with ``softcap``."""
    for name, v in (("logit_error", logit_error), ("div_error", div_error)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
    if not (isinstance(softcap, (int, float)) and math.isfinite(softcap) and softcap > 0):
        raise ValueError(f"softcap must be a finite number > 0, got {softcap!r}")
    u, ea = Fraction(_FP32_U), Fraction(_FP32_ETA)
    dc = Fraction(float(logit_error)) / Fraction(float(softcap))
    e = dc + Fraction(float(div_error)) * (1 + dc) + Fraction(_EXP2_ABS_ERROR)
    e2 = e * (2 + e) + u * (1 + e) ** 2 + ea
    return _float_up((1 + u) * e2 + u + ea) * _ROUND_UP


def linear_cross_entropy_logit_error_bound(
    vocab_size: int, hidden_dim: int, *, dtype: torch.dtype, max_abs_input: float | None = None,
    max_abs_weight: float | None = None, dot_abs_sum: float | None = None, logits_in_dtype: bool = True,
    softcap: float | None = None, tanh_error: float = LCE_TANH_ERROR, tanh_rel_error: float = 0.0,
) -> tuple[float, float]:
    """``(delta, Zmax)``: the bound on each logit's error that
    :func:`linear_cross_entropy_lse_error_bound` uses (``gamma_D P``, plus the storage rounding
    with ``logits_in_dtype``; premises stated there) and the bound of the computed logits; with
    ``softcap`` those of the capped logits (``sc_delta``, ``sc_zmax`` of
    ``Ojas.FloatModel.CrossEntropySoftcapError.sc_logit_error``)."""
    d, z = _lce_logit_terms(vocab_size, hidden_dim, dtype, max_abs_input, max_abs_weight, dot_abs_sum,
                            logits_in_dtype)
    d, z = _softcapped(d, z, softcap, tanh_error, tanh_rel_error)
    return _float_up(d) * _ROUND_UP, _float_up(z) * _ROUND_UP


def _ce_level(u, ue, ee, ea, xk, ci, ri, nx, dt, bt, tt, nn):
    """(C, R) of ``ce_run_gen`` after at most ``tt`` tiles: the factor ``ce_H Q^tt XK`` and the
    absolute term ``tt a^tt ce_b`` (exact rationals), items with factor ``ci``, term ``ri``,
    exact sums at most ``nx``; ``nn`` items in all, tiles of ``bt``, tile sums of depth ``dt``."""
    Ci = ci * ((1 + ue) * xk) * (1 + u)
    Ri = (ci * nx * ee + ri * ((1 + ue) * xk + ee)) * (1 + u) + ea
    pd = _frac_pow(1 + u, dt)
    H = pd * Ci
    Qt = _frac_pow((1 + ue) * (1 + u) ** 2, tt)
    a = (1 + u) ** 2 * ((1 + ue) * xk + ee)
    b = ((H * Qt * xk * (nn * nx) * ee) * (1 + u) + ea + pd * (bt * Ri)) * (1 + u)
    return H * Qt * xk, tt * _frac_pow(a, tt) * b


def linear_cross_entropy_merge_lse_error_bound(
    vocab_size: int, hidden_dim: int, *, dtype: torch.dtype, block_n: int, tiles_per_program: int, block_p: int,
    max_abs_input: float | None = None, max_abs_weight: float | None = None, dot_abs_sum: float | None = None,
    exact_logits: bool = False, max_abs_logit: float | None = None,
    exp_error: float = LCE_EXP_ERROR, log_error: float = LCE_LOG_ERROR,
    softcap: float | None = None, tanh_error: float = LCE_TANH_ERROR, tanh_rel_error: float = 0.0,
) -> float:
    """Bound on ``|lse_kernel - ln sum_v exp(h . w_v)|`` for one token of the two-level
    schedule (4 products, ``linear_cross_entropy_forward``): ``_logits_kernel`` STATS streams
    ``tiles_per_program`` tiles of ``block_n`` float32 logits per program from ``(z_first, 0)``,
    ``_rows_kernel`` merges the programs' states in tiles of ``block_p`` (the kernel's
    ``min(rows.block_p, next_power_of_2(n_groups))``). Implements
    ``Ojas.FloatModel.CrossEntropyLseError.ce_lse_error_two_level`` through ``ce_merge_lse_q``
    of ``Ojas.BoundValues`` (``Ojas.BoundValues.ce_merge_lse_q_sound``: the oracle computes
    the bound over exact rationals with certified upper bounds of ``exp(2 u Zmax)`` and the
    powers, ``ln V <= LN`` checked; without the oracle binary, a hand copy in exact rationals
    with exact powers), tile sums of depth ``block_n - 1`` and
    ``block_p - 1`` (any reduction tree). The logits are the Triton dot's float32 sums (not
    rounded to ``dtype``): ``delta = gamma_D P`` (any order; BlockedSum.v proves the blocked
    order, not used here), or 0 with ``exact_logits``; with ``softcap``
    ``Ojas.FloatModel.CrossEntropySoftcapError.ce_lse_error_two_level_softcap`` (``_logits_kernel``
    caps its accumulator's logits; the capped ``delta``, ``Zmax`` as there). Premises and what
    is not covered: as :func:`linear_cross_entropy_lse_error_bound`. Raises ``ValueError`` on a bad argument or a
    vacuous bound."""
    for name, v in (("block_n", block_n), ("tiles_per_program", tiles_per_program), ("block_p", block_p)):
        if not (isinstance(v, int) and v >= 1):
            raise ValueError(f"{name} must be an int >= 1, got {v!r}")
    delta, zmax = _lce_delta_zmax(vocab_size, hidden_dim, dtype, max_abs_input, max_abs_weight, dot_abs_sum,
                                  False, exact_logits, max_abs_logit, exp_error, log_error)
    delta, zmax = _softcapped(delta, zmax, softcap, tanh_error, tanh_rel_error)
    F_ = Fraction
    u, ea, ue, ee, el = F_(_FP32_U), F_(_FP32_ETA), F_(float(exp_error)), F_(_EXP2_ABS_ERROR), F_(float(log_error))
    n_tiles = -(-vocab_size // block_n)
    groups = -(-n_tiles // tiles_per_program)
    t1, n1 = min(tiles_per_program, n_tiles), min(tiles_per_program * block_n, vocab_size)
    t2 = -(-groups // block_p)
    ln_v = F_(math.log(vocab_size)) * F_(1 + 2.0**-40) + F_(2.0**-60)
    got = _from_oracle(bound="linear_cross_entropy_merge_lse", u=_rational(u), ue=_rational(ue), ee=_rational(ee),
                       ea=_rational(ea), el=_rational(el), zmax=_rational(zmax), delta=_rational(delta),
                       ln=_rational(ln_v), depth=block_n - 1, block=block_n, tiles=t1, items=n1,
                       merge_depth=block_p - 1, merge_block=block_p, merge_tiles=t2, groups=groups, vocab=vocab_size)
    if got is None:
        raise ValueError("the bound is vacuous or a check failed (ce_merge_lse_q answered None: bL >= 1 or ln V > LN)")
    if got is not _NO_ORACLE:
        return _float_up(got) * _ROUND_UP
    # hand copy of ce_merge_lse_q (no oracle): exact rationals, exact powers
    xk = _exp_up_small(u * 2 * zmax)
    c1, r1 = _ce_level(u, ue, ee, ea, xk, F_(1), F_(0), F_(1), block_n - 1, block_n, t1, n1)
    c2, r2 = _ce_level(u, ue, ee, ea, xk, c1, r1, F_(n1), block_p - 1, block_p, t2, groups)
    bl = c2 - 1 + r2
    if not bl < 1:
        raise ValueError(f"the bound is vacuous: bL = {float(bl)} >= 1")
    nl = bl / (1 - bl)
    return _float_up(u * (zmax + ln_v + nl + el) + el + nl + delta) * _ROUND_UP


def _hand_lce_grad_coefs(u, ea, us, es, ue, ee, a0, ua, x, n_terms, n_chunks) -> tuple[Fraction, ...]:
    """Hand copy of ``ce_grad_q`` of ``Ojas.BoundValues`` (fallback without the oracle): the
    coefficients ``(cS, cT, cH, c0)`` of ``ce_dw_bound`` in exact rationals, at the exact
    ``gamma_{n_terms}`` and ``X = 1 + x + x^2 >= e^x``."""
    X = _exp_up_small(x)
    gd = n_terms * u / (1 - n_terms * u)
    kg = (1 + us) * (1 + u)
    cg = (1 + us) * ((1 + u) * ee + ea) + es
    w = ua + u * (1 + ua)
    kc = kg ** n_chunks
    return (kc * a0 * (1 + w) * (1 + gd) * (kg * (1 + ue) * X - 1),
            kc * a0 * (w + (1 + w) * ((1 + gd) * (kg - 1) + gd)) + (kc - 1) * a0,
            kc * a0 * (1 + w) * (1 + gd) * cg,
            n_chunks * kc * (ea + es))


def _capped_grad_coefs(u, ea, us, es, ue, ee, a0, ua, x, chain, n_terms, n_chunks) -> tuple[Fraction, ...]:
    """The coefficients of ``(S, T0, Ha, Sk, Tc)`` and the constant of ``ce_gen_bound`` at
    ``sc_E1`` (``Ojas.FloatModel.CrossEntropySoftcapGradError.sc_dw_error``), exact rationals,
    ``gamma_{n_terms}``, ``X = 1 + x + x^2 >= e^x``, ``chain`` = ``Ec``: the hand copy of
    ``sc_grad_q`` of ``Ojas.BoundValues``, the fallback without the oracle binary."""
    fe = (1 + ue) * _exp_up_small(x)
    gd = n_terms * u / (1 - n_terms * u)
    kg = (1 + us) * (1 + u)
    kcap = (1 + us) * (1 + u) ** 2
    c1 = (1 + u) * ee + ea
    w = ua + u * (1 + ua)
    kc = kg ** n_chunks
    m = kc * a0 * (1 + w) * (1 + gd)
    return (m * kg * chain * ((1 + u) * fe - 1), m * kg * chain * (1 + u),
            m * (kg * chain * c1 + kg * c1 + (1 + us) * ea + es), m * (kcap * fe - 1),
            m * (kcap - 1) + kc * a0 * ((1 + w) * gd + w) + (kc - 1) * a0,
            n_chunks * kc * (ea + es))


def linear_cross_entropy_grad_error_bound(
    prob_abs: torch.Tensor, grad_abs: torch.Tensor, operand_abs: torch.Tensor, *, n_terms: int, dtype: torch.dtype,
    scale: float, logit_error: float, lse_error: float, max_abs_arg: float, n_chunks: int = 1,
    exp_error: float = LCE_EXP_ERROR, storage_rounding: str = "nearest", softcap: float | None = None,
    capped_sums: tuple[torch.Tensor, torch.Tensor] | None = None, tanh_error: float = LCE_TANH_ERROR,
    tanh_rel_error: float = 0.0, div_error: float = LCE_DIV_ERROR,
) -> torch.Tensor:
    """A-posteriori bounds on ``|grad_kernel - grad_exact|`` for every entry of dH (grad_input)
    or dW (grad_weight) of the 3-product schedule of kernels/ojas_kernels/linear_cross_entropy.py
    (``_three_products``: reductions "mean" / "sum"), no bias, no softcap, no smoothing, no z-loss.

    Implements ``Ojas.FloatModel.CrossEntropyGradError.ce_dh_error`` (dH: ``n_chunks = 1``,
    one product over the vocabulary) and ``ce_dw_error`` (dW: ``n_chunks`` token chunks summed
    in ``dtype``), rocq/FloatModel/CrossEntropyGradError.v: G = ``rnd_s(tl.exp(rnd(z - lse)))``
    (the target: minus 1 in fp32 first) stored in ``dtype``, the products accumulated in fp32,
    ``rnd(alpha acc)`` (+ the running sum for dW; a fused or a single-rounding epilogue, as
    cuBLAS's may be: ``ce_dw_error`` with ``epi_fma_ok`` / ``epi_exact_ok``, the same value),
    stored in ``dtype``::

        bound = Kg^C (Q + C ea) + (Kg^C - 1) a0 T + C Kg^C es,  Q = a0 (w (T + E2) + E2),
        E2 = (1 + gd) E1 + gd T,  E1 = (Kg Fe - 1) S + (Kg - 1) T + cg Ha,

    ``S = prob_abs`` = sum P |h|, ``T = grad_abs`` = sum |P - onehot| |h| and ``Ha =
    operand_abs`` = sum |h| over the kept tokens (dH: over the vocabulary with h = W_vd; dW:
    over the tokens with h = H_nd), computed by the caller from the exact probabilities in
    float64 (enlarged here by ``4 (n_terms + 1) 2^-53``); ``a0 = scale`` (1 / kept count for
    "mean", 1 for "sum"; the kernel's alpha is its float32 rounding), ``C = n_chunks``,
    ``Kg = (1 + us)(1 + u)``, ``Fe = (1 + ue) X`` with ``X >= exp(delta + Dl + u Am + ea)``
    (``delta = logit_error``: :func:`linear_cross_entropy_logit_error_bound`; ``Dl = lse_error``:
    :func:`linear_cross_entropy_lse_error_bound`; ``Am = max_abs_arg`` >= |z - lse|),
    ``gd = gamma_{n_terms}`` (``n_terms``: the most terms one accumulated sum has, V for dH,
    the largest token chunk for dW). The coefficients of S, T, Ha and the constant come from
    ``ce_grad_q`` of ``Ojas.BoundValues`` (``Ojas.BoundValues.ce_grad_q_sound_dw``,
    ``ce_grad_q_sound_dh``: whenever it answers ``(cS, cT, cH, c0)``, ``cS S + cT T + cH Ha + c0``
    bounds the kernel's entry under the premises of ``ce_dw_error`` / ``ce_dh_error`` with
    ``gd = gamma_{n_terms}`` and any ``X >= e^x``, ``x = delta + Dl + u Am + ea``): the oracle
    computes them over exact rationals at ``X = 1 + perturbation_q(x / 2)``, each rounded up;
    without the oracle binary, the hand copy ``_hand_lce_grad_coefs`` (exact ``gamma`` and
    ``X = 1 + x + x^2``); the tensor part in float64 rounded up by 2^-40.

    Premises, not theorems: ``exp_error`` for ``tl.exp`` (as the lse bound's, measured on
    [-104, 0]; the arguments exceed 0 by at most the lse's error); the fp32 accumulation of
    cuBLAS / the CPU BLAS within ``gamma_{n_terms}`` of the exact sum, the classical worst case
    of any order with exact or rounded products (``ce_dsum_tree`` proves it for every tree of
    rounded additions of exact products: bf16 operands, whose products are exact in fp32 from
    2^-134 up; not the MMA order, not TF32 products).
    ``storage_rounding="truncate"``: Triton's CPU interpreter truncates G to bfloat16 (the
    formula at those constants, not a proved bound).
    With ``softcap = c`` (None: the above): ``Ojas.FloatModel.CrossEntropySoftcapGradError.sc_dh_error``
    / ``sc_dw_error`` for the capped entries ``rnd_s(rnd(g (1 - (z / c)^2)))`` against
    ``(P_c - onehot)(1 - tanh(y / c)^2)``: the coefficients of ``S, T0, Ha, Sk, Tc`` and the
    constant come from ``sc_grad_q`` of ``Ojas.BoundValues`` (``Ojas.BoundValues.sc_grad_q_sound_dw``,
    ``sc_grad_q_sound_dh``: whenever it answers, they bound the kernel's capped entry under the
    premises of ``sc_dw_error`` / ``sc_dh_error`` with ``gd = gamma_{n_terms}``, any ``X >= e^x``,
    ``x = sc_delta + Dl + u Am + ea``, and ``chain = Ec >= sc_chain_bound``): the oracle computes
    them over exact rationals at ``X = 1 + perturbation_q(x / 2)``, each rounded up; without the
    oracle binary, the hand copy :func:`_capped_grad_coefs` (exact ``gamma``, ``X = 1 + x + x^2``)
    is the fallback. ``logit_error`` is the raw logits' (capped: ``sc_delta``), the sums
    ``prob_abs, grad_abs, operand_abs`` are ``S, T0, Ha`` of the capped probabilities and
    ``capped_sums = (Sk, Tc)`` = (sum P_c k |h|, sum |G0 k| |h|), k = 1 - tanh(y / c)^2
    (:func:`~ojas_ref.verification.linear_cross_entropy_error.gradient_sums` with ``softcap``); premises: the
    computed tanh (``tanh_rel_error``, ``tanh_error``) and the division (``div_error``).
    Not covered: bias, label
    smoothing, z-loss, float16 (G scaled by 256), the scaling by grad_output after the fact,
    overflow. The 4-product schedule (token weights inside G): :func:`linear_cross_entropy_weighted_dw_error_bound`
    and :func:`linear_cross_entropy_weighted_dh_error_bound`."""
    for name, v in (("scale", scale), ("logit_error", logit_error), ("lse_error", lse_error),
                    ("max_abs_arg", max_abs_arg), ("exp_error", exp_error)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
    _check_grad_terms(n_terms, n_chunks)
    F_ = Fraction
    u, ea, ue, ee = F_(_FP32_U), F_(_FP32_ETA), F_(float(exp_error)), F_(_EXP2_ABS_ERROR)
    us, es = (F_(x) for x in _storage(dtype, storage_rounding))
    a0, ua = F_(float(scale)), u
    x = F_(float(logit_error)) + F_(float(lse_error)) + u * F_(float(max_abs_arg)) + ea
    if x > 1:
        raise ValueError(f"the exponent's error {float(x)} exceeds 1: the bound is vacuous (G off by e - 1)")
    consts = (u, ea, us, es, ue, ee, a0, ua, x)
    got = _from_oracle(bound="linear_cross_entropy_grad", **{k: _rational(v) for k, v in zip(
        ("u", "ea", "us", "es", "ue", "ee", "a0", "ua", "x"), consts)}, n=n_terms, chunks=n_chunks)
    if got is None:
        raise ValueError("a check of ce_grad_q failed (the oracle answered None)")
    coef_s, coef_t, coef_h, const = (_hand_lce_grad_coefs(*consts, n_terms, n_chunks) if got is _NO_ORACLE
                                     else (F_(c) for c in got))
    if softcap is not None:
        if capped_sums is None:
            raise ValueError("softcap needs capped_sums = (Sk, Tc)")
        dz, _ = _softcapped(F_(float(logit_error)), None, softcap, tanh_error, tanh_rel_error)
        chain = F_(linear_cross_entropy_softcap_chain_error_bound(float(dz), softcap, div_error=div_error))
        x = dz + F_(float(lse_error)) + u * F_(float(max_abs_arg)) + ea
        if x > 1:
            raise ValueError(f"the exponent's error {float(x)} exceeds 1: the bound is vacuous (G off by e - 1)")
        capped = (u, ea, us, es, ue, ee, a0, ua, x, chain)
        got = _from_oracle(bound="linear_cross_entropy_grad_capped", **{k: _rational(v) for k, v in zip(
            ("u", "ea", "us", "es", "ue", "ee", "a0", "ua", "x", "chain"), capped)}, n=n_terms, chunks=n_chunks)
        if got is None:
            raise ValueError("a check of sc_grad_q failed (the oracle answered None): the constants, x and chain "
                             ">= 0, n_terms u < 1")
        coefs = (_capped_grad_coefs(*capped, n_terms, n_chunks) if got is _NO_ORACLE
                 else tuple(F_(c) for c in got))
        return _grad_coef_sum(coefs, (prob_abs, grad_abs, operand_abs, *capped_sums), n_terms)
    return _grad_coef_sum((coef_s, coef_t, coef_h, const), (prob_abs, grad_abs, operand_abs), n_terms)


def _check_grad_terms(n_terms: int, n_chunks: int) -> None:
    """``ValueError`` unless ``n_terms`` and ``n_chunks`` are ints >= 1 and ``n_terms 2^-24 < 1``."""
    for name, v in (("n_terms", n_terms), ("n_chunks", n_chunks)):
        if not (isinstance(v, int) and v >= 1):
            raise ValueError(f"{name} must be an int >= 1, got {v!r}")
    if n_terms * _FP32_U >= 1.0:
        raise ValueError(f"n_terms * 2^-24 must be < 1, got {n_terms}")


def _grad_coef_sum(coefs: Sequence[Fraction], sums: Sequence[torch.Tensor], n_terms: int) -> torch.Tensor:
    """``sum_i c_i s_i + c_last`` in float64, rounded up: each coefficient rounded up, each sum
    :func:`_enlarged` for its own float64 evaluation, the result by 2^-40."""
    return (sum(_float_up(c) * _enlarged(v, n_terms) for c, v in zip(coefs, sums)) + _float_up(coefs[-1])) * _ROUND_UP


def _hand_gen_grad_coefs(u, ea, us, es, ee, a0, ua, n_terms, n_chunks) -> tuple[Fraction, ...]:
    """Hand copy of ``ce_gp_q`` of ``Ojas.BoundValues`` (fallback without the oracle): the
    coefficients ``(cS, cT, cH, c0)`` of ``ce_gen_bound gd a0 ua C (Sp + (Kg - 1) T + cg Ha) T``
    (``Ojas.FloatModel.CrossEntropyGradError``) in ``Sp``, ``T``, ``Ha``, exact rationals at the
    exact ``gd = gamma_{n_terms}``: ``ce_gen_bound gd a0 ua C B T = Kg^C (|a0| ((1 + w) ((1 + gd) B
    + gd T) + w T) + C ea) + (Kg^C - 1) |a0| T + C Kg^C es``, i.e. ``cB B + cTg T + c0``, composed
    with ``B = Sp + (Kg - 1) T + cg Ha``."""
    gd = n_terms * u / (1 - n_terms * u)
    kg = (1 + us) * (1 + u)
    cg = (1 + us) * ((1 + u) * ee + ea) + es
    kc = kg ** n_chunks
    w = ua + u * (1 + ua)
    a0 = abs(a0)
    c_b = kc * a0 * (1 + w) * (1 + gd)
    c_tg = kc * a0 * ((1 + w) * gd + w) + (kc - 1) * a0
    return (c_b, c_b * (kg - 1) + c_tg, c_b * cg, n_chunks * kc * (ea + es))


def linear_cross_entropy_entry_posteriori_factors(
    log_probs: torch.Tensor, target: torch.Tensor, logit_error: float | torch.Tensor, stream_lse_bound: float, *,
    dtype: torch.dtype, lse_error: float | None = None, exp_error: float = LCE_EXP_ERROR,
    storage_rounding: str = "nearest", ignore_index: int = -100,
) -> torch.Tensor:
    """Per entry of G [N, V], the factor ``k P``, ``k = (1 + us) ((1 + u) (1 + ue) X - 1)``, of
    ``Ojas.FloatModel.CrossEntropyGradPosteriori.ce_gp_S`` (0 at ignored tokens), for
    :func:`linear_cross_entropy_grad_posteriori_bound`: each entry's own exponent's error
    ``A = B + NP`` (``ce_arg_posteriori``: ``B = stream_lse_bound``, the stream's own error,
    :func:`linear_cross_entropy_lse_error_bound` with ``exact_logits=True``;
    ``NP = -ln(1 - E)``, ``E = (1 - P) (e^(2 delta) - 1)`` for ``delta = logit_error`` bounding
    every computed logit's error; ``logit_error`` [N, V] bounds each logit's own error ``delta_v``
    (e.g. measured, ``|z - y|``): ``E_j = e^(delta_j) sum_(v != j) P_v (e^(delta_v) - 1)
    + (e^(delta_j) - 1)(1 - P_j)``, which is ``sum_(v != j) P_v (e^(delta_v + delta_j) - 1)``,
    at least the theorem's ``sum_v P_v (e^|d_v| - 1)``); with ``lse_error`` (``Dl``, the a-priori lse bound of
    ``ce_lse_error``) the smaller of that and ``delta + Dl`` (the triangle inequality: both bound
    ``|(z - lse) - (y - L)|``, and ``ce_gp_ok`` takes any bound; ``-ln(1 - E)`` exceeds ``2 delta``
    where P is small); ``Am = -ln P + A >= |z - lse|``, ``X = e^(A + u Am + ea)``;
    ``log_probs`` the exact log-softmax of the exact logits (the caller's, e.g. float64).
    The confident tokens' targets (``P -> 1``) get ``A -> B`` whatever ``delta``. Not proved:
    this float64 evaluation (``1 - P`` enlarged by ``4 (V + 8) 2^-53``, the exponent by 2^-40,
    ``expm1`` then 2^-40) and the caller's probabilities. Raises ``ValueError`` on a bad
    argument or when ``E >= 1`` (vacuous)."""
    per_logit = isinstance(logit_error, torch.Tensor)
    if per_logit and (logit_error.shape != log_probs.shape or not bool(
            ((logit_error >= 0) & torch.isfinite(logit_error)).all())):
        raise ValueError(f"logit_error must be a number or a finite tensor >= 0 shaped like log_probs "
                         f"{tuple(log_probs.shape)}")
    if per_logit and lse_error is not None:
        raise ValueError("lse_error (the a-priori clamp) needs a scalar logit_error")
    for name, v in (("logit_error", 0.0 if per_logit else logit_error), ("stream_lse_bound", stream_lse_bound),
                    ("exp_error", exp_error), ("lse_error", 0.0 if lse_error is None else lse_error)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
    if log_probs.dim() != 2 or target.shape != (log_probs.shape[0],):
        raise ValueError(f"log_probs must be [N, V] and target [N], got {tuple(log_probs.shape)} and "
                         f"{tuple(target.shape)}")
    lp = log_probs.to(torch.float64)
    if bool((lp > 0).any()) or bool(torch.isnan(lp).any()):
        raise ValueError("log_probs must be <= 0 and not NaN (a log-softmax)")
    n, v = lp.shape
    p = lp.exp()
    slack = 4 * (v + 8) * 2.0**-53
    if per_logit:
        d = logit_error.to(torch.float64)
        em = torch.expm1(d)
        s1 = (p * em).sum(1, keepdim=True)
        others = (s1 - p * em).clamp_min(0.0) + s1 * slack  # sum over v != j of P_v (e^(delta_v) - 1)
        e = (torch.exp(d) * others + em * ((1 - p) + slack).clamp_max(1.0)) * _ROUND_UP
    else:
        e = ((1 - p) + slack).clamp_max(1.0) * math.expm1(2 * float(logit_error)) * _ROUND_UP
    keep = (target != ignore_index).to(lp.device)
    e = torch.where(keep[:, None], e, torch.zeros_like(e))
    if bool((e >= 1).any()):
        raise ValueError(f"the bound is vacuous: E = {e.max().item()} >= 1")
    us, _ = _storage(dtype, storage_rounding)
    a = float(stream_lse_bound) - torch.log1p(-e)
    if lse_error is not None:
        a = a.clamp_max(float(logit_error) + float(lse_error))
    am = -lp + a
    log_k = math.log1p(_FP32_U) + math.log1p(float(exp_error))
    factor = (1 + us) * torch.expm1((log_k + a + _FP32_U * am + _FP32_ETA) * _ROUND_UP) * _ROUND_UP * p
    return torch.where(keep[:, None], factor, torch.zeros_like(factor))


def linear_cross_entropy_grad_posteriori_bound(
    entry_abs: torch.Tensor, grad_abs: torch.Tensor, operand_abs: torch.Tensor, *, n_terms: int,
    dtype: torch.dtype, scale: float, n_chunks: int = 1, storage_rounding: str = "nearest",
) -> torch.Tensor:
    """Per-entry bounds on dH (``n_chunks = 1``) or dW of the 3-product schedule (as
    :func:`linear_cross_entropy_grad_error_bound`: no bias, softcap, smoothing, z-loss) with
    each entry of G charged its own exponent's error, tight for confident tokens.

    Implements ``Ojas.FloatModel.CrossEntropyGradPosteriori.ce_gp_dh_error`` /
    ``ce_gp_dw_error`` (rocq/FloatModel/CrossEntropyGradPosteriori.v)::

        bound = ce_gen_bound gd a0 ua C (Sp + (Kg - 1) T + cg Ha) T

    with ``entry_abs = Sp`` = sum over the items of the factor of
    :func:`linear_cross_entropy_entry_posteriori_factors` times ``|h|`` (dH: ``factors @ |W|``;
    dW: ``factors^T @ |H|`` over the kept tokens), ``grad_abs = T`` and ``operand_abs = Ha``
    as in :func:`linear_cross_entropy_grad_error_bound` (float64, enlarged here by
    ``4 (n_terms + 1) 2^-53``), ``gd = gamma_{n_terms}``, ``a0 = scale``, ``C = n_chunks``.
    The coefficients ``(cS, cT, cH, c0)`` of ``Sp``, ``T``, ``Ha`` and the constant come from
    ``ce_gp_q`` of ``Ojas.BoundValues`` (``Ojas.BoundValues.ce_gp_q_sound_dw``,
    ``ce_gp_q_sound_dh``: whenever it answers ``(cS, cT, cH, c0)``, ``cS Sp + cT T + cH Ha + c0``
    bounds the kernel's entry under the premises of ``ce_gp_dw_error`` / ``ce_gp_dh_error`` with
    ``gd = gamma_{n_terms}``): the oracle computes them over exact rationals, each rounded up;
    without the oracle binary, the hand copy ``_hand_gen_grad_coefs`` (exact rationals, exact
    ``gamma``) is the fallback; the tensor part in float64 rounded up by 2^-40. Premises: those of
    :func:`linear_cross_entropy_grad_error_bound` (``tl.exp``, the products' fp32
    accumulation within ``gamma_{n_terms}``). Both bounds are theorems: their minimum, entry by
    entry, is one too."""
    _check_grad_terms(n_terms, n_chunks)
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale >= 0):
        raise ValueError(f"scale must be a finite number >= 0, got {scale!r}")
    F_ = Fraction
    u, ea, ee = F_(_FP32_U), F_(_FP32_ETA), F_(_EXP2_ABS_ERROR)
    us, es = (F_(x) for x in _storage(dtype, storage_rounding))
    a0, ua = F_(float(scale)), u
    consts = (u, ea, us, es, ee, a0, ua)
    got = _from_oracle(bound="linear_cross_entropy_grad_posteriori", **{k: _rational(v) for k, v in zip(
        ("u", "ea", "us", "es", "ee", "a0", "ua"), consts)}, n=n_terms, chunks=n_chunks)
    if got is None:
        raise ValueError("a check of ce_gp_q failed (the oracle answered None): the constants >= 0, n_terms u < 1")
    coefs = _hand_gen_grad_coefs(*consts, n_terms, n_chunks) if got is _NO_ORACLE else tuple(F_(c) for c in got)
    return _grad_coef_sum(coefs, (entry_abs, grad_abs, operand_abs), n_terms)


def _lce_exp_factor(logit_error: float, lse_error: float, max_abs_arg: float, exp_error: float) -> Fraction:
    """``Fe = (1 + ue) X`` with ``X >= exp(delta + Dl + u Am + ea)`` (``1 + perturbation_q(x / 2)``
    from the oracle, else ``1 + x + x^2``), exact rationals; ``ValueError`` when ``x > 1``."""
    for name, v in (("logit_error", logit_error), ("lse_error", lse_error), ("max_abs_arg", max_abs_arg),
                    ("exp_error", exp_error)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
    u, ea = Fraction(_FP32_U), Fraction(_FP32_ETA)
    x = Fraction(float(logit_error)) + Fraction(float(lse_error)) + u * Fraction(float(max_abs_arg)) + ea
    if x > 1:
        raise ValueError(f"the exponent's error {float(x)} exceeds 1: the bound is vacuous (G off by e - 1)")
    pert = _from_oracle(bound="perturbation", delta=_rational(x / 2))  # >= e^x - 1, certified
    X = _exp_up_small(x) if pert is _NO_ORACLE or pert is None else 1 + Fraction(pert)
    return (1 + Fraction(float(exp_error))) * X


def linear_cross_entropy_weighted_dh_error_bound(
    prob_abs: torch.Tensor, grad_abs: torch.Tensor, operand_abs: torch.Tensor, token_weight: torch.Tensor, *,
    n_terms: int, dtype: torch.dtype, scale: float, storage_rounding: str = "nearest", **premises: float,
) -> torch.Tensor:
    """Per-entry bounds on dH (grad_input [N, D]) of the 4-product schedule of
    kernels/ojas_kernels/linear_cross_entropy.py (reduction "none", or ``products=4``; no bias, softcap,
    smoothing, z-loss, float16): the forward's row ``rnd_s(rnd(alpha G W))`` (G with token weight 1),
    times the token's float32 grad_output ``g`` in the backward, rounded once to ``dtype``.
    Implements ``Ojas.FloatModel.CrossEntropyWeightedGradError.ce_dh4_error``::

        bound = Kg |g| B1 + (Kg - 1) |g| a0 T + cw0,  Kg = (1 + us)(1 + u),  cw0 = (1 + us) ea + es,

    ``B1`` :func:`linear_cross_entropy_grad_error_bound` at ``n_chunks = 1`` on the same sums
    (``ce_dh_error``: the forward's row; its ``logit_error`` the float32 logits' own, not rounded to
    ``dtype``, and ``lse_error`` the merged lse's: :func:`linear_cross_entropy_merge_lse_error_bound`,
    composed in Coq by ``ce_dh4_error_two_level``),
    ``T = grad_abs``, ``a0 = scale``, ``token_weight`` [N] (or [1]) the grad_output of each row.
    ``premises``: ``logit_error``, ``lse_error``, ``max_abs_arg``, ``exp_error`` as there. Not
    covered: as ``ce_dh4_error`` says (rocq/FloatModel/CrossEntropyWeightedGradError.v)."""
    b1 = linear_cross_entropy_grad_error_bound(prob_abs, grad_abs, operand_abs, n_terms=n_terms, dtype=dtype,
                                               scale=scale, storage_rounding=storage_rounding, **premises)
    u, ea = Fraction(_FP32_U), Fraction(_FP32_ETA)
    us, es = (Fraction(x) for x in _storage(dtype, storage_rounding))
    kg = (1 + us) * (1 + u)
    g = token_weight.to(torch.float64).abs().reshape(-1, 1)
    t = _enlarged(grad_abs, n_terms) * float(scale)
    return (_float_up(kg) * g * b1 + _float_up(kg - 1) * g * t + _float_up((1 + us) * ea + es)) * _ROUND_UP


def linear_cross_entropy_weighted_dw_error_bound(
    prob_abs: torch.Tensor, grad_abs: torch.Tensor, weighted_operand_abs: torch.Tensor, operand_abs: torch.Tensor, *,
    n_terms: int, dtype: torch.dtype, weight_error: float = 0.0, logit_error: float, lse_error: float,
    max_abs_arg: float, exp_error: float = LCE_EXP_ERROR, storage_rounding: str = "nearest",
) -> torch.Tensor:
    """Per-entry bounds on dW (grad_weight [V, D]) of the 4-product schedule (``_backward_weight``:
    G = ``rnd_s(rnd(g_e w_n))`` with the float32 token weight ``w_n`` inside, from the recomputed
    float32 logits and the forward's lse; ``G_slab^T H`` one product over all ``n_terms`` kept
    tokens, accumulated in float32 and rounded once to ``dtype``). Implements
    ``Ojas.FloatModel.CrossEntropyWeightedGradError.ce_dw4_error``::

        bound = (1 + us) ((1 + gd) E1 + gd T) + us T + es,
        E1 = (Kw Fe - 1) S + (Kw - 1) T + cw1 Hw + cw0 Ha,  Kw = (1 + us)(1 + u)^2 (1 + ua),
        cw1 = (1 + us)(1 + u)(1 + ua)((1 + u) ee + ea),  cw0 = (1 + us) ea + es,

    over the kept tokens with the exact weights ``w0``: ``S = prob_abs`` = sum |w0| P |h|,
    ``T = grad_abs`` = sum |w0 (P - onehot)| |h|, ``Hw = weighted_operand_abs`` = sum |w0| |h|,
    ``Ha = operand_abs`` = sum |h| (float64, enlarged here), ``ua = weight_error`` with
    ``|w - w0| <= ua |w0|`` (0 for "none" and "sum": grad_output itself; 2^-24 for "mean",
    ``fl32(grad_output / K)`` in float32's normal range), ``gd = gamma_{n_terms}``, ``Fe`` as
    :func:`linear_cross_entropy_grad_error_bound` (the premises there; ``lse_error`` from
    :func:`linear_cross_entropy_merge_lse_error_bound`, the logits float32: composed in Coq by
    ``ce_dw4_error_two_level``). Not covered: as
    ``ce_dw4_error`` says (rocq/FloatModel/CrossEntropyWeightedGradError.v)."""
    if not (isinstance(n_terms, int) and 1 <= n_terms and n_terms * _FP32_U < 1.0):
        raise ValueError(f"n_terms must be an int >= 1 with n_terms * 2^-24 < 1, got {n_terms!r}")
    if not (isinstance(weight_error, (int, float)) and 0 <= weight_error < 1):
        raise ValueError(f"weight_error must be a number in [0, 1), got {weight_error!r}")
    fe = _lce_exp_factor(logit_error, lse_error, max_abs_arg, exp_error)
    u, ea, ee, ua = Fraction(_FP32_U), Fraction(_FP32_ETA), Fraction(_EXP2_ABS_ERROR), Fraction(float(weight_error))
    us, es = (Fraction(x) for x in _storage(dtype, storage_rounding))
    gd = _from_oracle(bound="gamma", u=_rational(u), n=n_terms)
    gd = n_terms * u / (1 - n_terms * u) if gd is _NO_ORACLE else Fraction(gd)
    kw = (1 + us) * (1 + u) ** 2 * (1 + ua)
    cw1 = (1 + us) * (1 + u) * (1 + ua) * ((1 + u) * ee + ea)
    cw0 = (1 + us) * ea + es
    c = (1 + us) * (1 + gd)
    coefs = (c * (kw * fe - 1), c * (kw - 1) + (1 + us) * gd + us, c * cw1, c * cw0)
    sums = (prob_abs, grad_abs, weighted_operand_abs, operand_abs)
    return (sum(_float_up(k) * _enlarged(s, n_terms) for k, s in zip(coefs, sums)) + _float_up(es)) * _ROUND_UP
