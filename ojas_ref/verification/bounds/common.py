"""The floating-point model that the proved error bounds share, and the oracle that evaluates them.

Two rounding models: ``rocq/FloatModel/NoUnderflow.v`` (every ``+ - * /`` has relative error at most the
unit roundoff ``u``, the computed ``exp`` relative error at most ``exp_error``, and nothing
underflows or overflows: no absolute error term), for the PyTorch references' bounds
(:mod:`.sums`, :mod:`.online_softmax`, the reference's in :mod:`.linear_cross_entropy`); and
``rocq/FloatModel/MixedPrecision.v`` (Flocq's formats, underflow included: float32 arithmetic,
storage in bfloat16, float16 or float32), for the Triton kernels' bounds (:mod:`.attention`,
:mod:`.linear_cross_entropy`, :mod:`.linear_cross_entropy_grad`). Their constants are here.

Where the oracle (``extraction/_build/ojas-oracle``, ``make -C extraction``) is built,
the scalar bounds come from it: its ``error_bounds`` operation runs the definitions of
``rocq/Bounds/`` (``dot_bound_q``, ``chunked_sum_factor_q``, ``nat_err_q``,
``stream_beta_q``, ``stream_err_q``, ``perturbation_q``, ``neg_ln_check``, and the kernels'
closed forms), extracted with exact rationals, whose results are proved equal to (``gamma``)
or at least (the others, which involve ``exp``, ``ln`` or powers too large to carry exactly)
the real bound of the theorem; the rational is rounded up to a float here
(:func:`_float_up`). The inputs (unit roundoffs, ``delta``) are sent as the exact
rationals of their floats. Values are cached per argument.

Without the oracle binary (or with one built before ``error_bounds`` existed) the
hand copies of the formulas (``_hand_*``, beside each bound) are used instead, evaluated in
float64 and rounded up by a relative ``2**-40`` (or in exact rationals) so that the evaluation
does not fall below the real number the theorem states; ``tests/verification/test_error_bounds.py`` checks
that both agree to float64 rounding.
"""

from __future__ import annotations

import math
import warnings
from fractions import Fraction
from typing import Any

import torch

__all__ = ["EXP_ERROR", "UNIT_ROUNDOFF", "oracle_bounds_available"]


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

# Absolute error of the kernels' exp2 / exp for results below the normal range (flush to zero
# included): the absolute term of EXP2_ERROR (attention) and LINEAR_CROSS_ENTROPY_EXP_ERROR.
_EXP2_ABS_ERROR: float = 2.0**-126

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
                warnings.warn(
                    f"the oracle does not answer error_bounds ({answer.get('error')}): rebuild it with "
                    "`make -C extraction`; using the hand formulas",
                    RuntimeWarning,
                    stacklevel=3,
                )
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
    """``ValueError`` unless the unit roundoff ``value`` satisfies ``0 <= value < 1``."""
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must satisfy 0 <= {name} < 1, got {value}")


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
# float32, the kernels' arithmetic: unit roundoff and absolute error below the normal range.
_FP32_U, _FP32_ETA = 2.0**-24, 2.0**-150


def _storage(dtype: torch.dtype, storage_rounding: str) -> tuple[float, float]:
    """(unit roundoff, absolute error) of storing a float32 in ``dtype`` by ``storage_rounding``."""
    if storage_rounding == "nearest":
        return _STORAGE[dtype]
    if storage_rounding == "truncate":
        return _STORAGE_TRUNCATE[dtype]
    raise ValueError(f"storage_rounding must be 'nearest' or 'truncate', got {storage_rounding!r}")


def _enlarged(t: torch.Tensor, n_terms: int) -> torch.Tensor:
    """A float64 sum of ``n_terms`` nonnegative terms, enlarged by ``4 (n + 1) 2^-53`` for its own rounding."""
    return t.to(torch.float64) * (1.0 + 4 * (n_terms + 1) * 2.0**-53)


def _exp_up_small(x: Fraction) -> Fraction:
    """An upper bound of e^x for 0 <= x <= 1: 1 + x + x^2."""
    if not 0 <= x <= 1:
        raise ValueError(f"exp argument {float(x)} outside [0, 1]")
    return 1 + x + x * x
