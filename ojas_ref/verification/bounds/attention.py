"""Error bounds of the Triton flash-attention kernel (kernels/ojas_kernels/attention.py), in the
mixed-precision model of ``rocq/FloatModel/`` (:mod:`.common`): the output (a priori and entry
by entry), the saved log-sum-exp, and dV, dK, dQ and the backward's ``delta`` a posteriori; the
premises about ``tl.exp2`` and ``tl.log2`` (:data:`EXP2_ERROR`, :data:`LOG2_ERROR`) and the
errors of the kernel's float32 constants."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any, ClassVar, Self, Union

import torch

from ojas_ref.verification.bounds import certified as cb
from ojas_ref.verification.bounds.common import (
    _EXP2_ABS_ERROR,
    _EXP_OVERFLOW,
    _FP32_ETA,
    _FP32_U,
    _NO_ORACLE,
    _ROUND_UP,
    _STORAGE,
    _enlarged,
    _exp_up_small,
    _float_up,
    _from_oracle,
    _rational,
    _storage,
)

__all__ = [
    "EXP2_ERROR",
    "LOG2_ERROR",
    "TENSOR_CORE_BF16_H100",
    "TF32X3_H100",
    "TensorCoreDot",
    "Tf32x3Dot",
    "acc_dot_error_constants",
    "acc_dot_split_constants",
    "dot_error_constants",
    "attention_delta_error_bound",
    "attention_dk_error_bound",
    "attention_dq_error_bound",
    "attention_dv_error_bound",
    "attention_forward_error_bound",
    "attention_forward_posteriori_bound",
    "attention_forward_running_bound",
    "attention_forward_running_rate",
    "attention_grad_chain",
    "attention_grad_chain_bound",
    "attention_lse_error_bound",
]


# Relative error of the kernels' exp2 (tl.exp2) against 2^x, for the mixed-precision
# attention bound: an assumption about the hardware and libraries, not a theorem. In
# Triton's CPU interpreter tl.exp2 is numpy's float32 exp2 (measured on this machine:
# <= 1.73 ulp = 1.73 * 2^-24 relative over 4e6 arguments in [-150, 0] with normal
# results, absolute <= 3.5 * 2^-150 below); on NVIDIA GPUs it is PTX ex2.approx.f32
# (measured by tests/verification/test_attention_error_bound.py and benchmarks/bench_attention_error.py
# on the device they run on). 2^-21 = 8 ulp as margin; the absolute term for results
# below the normal range is taken as 2^-126 (flush to zero included).
EXP2_ERROR: float = 2.0**-21
# Absolute error of the kernels' log2 (tl.log2) against log2(x), for the lse bound: an
# assumption, not a theorem (the theorem's lg_err premise takes it on a bounded range,
# [1/(1+b), (1+b) n_keys] for the row sum's relative error b, inside [1/2, 2 n_keys] when
# b <= 1; the kernel applies it to the row sum l in [1, n_keys]). A float32 result of magnitude below 32 has an ulp of
# at most 2^-19, so one rounding costs 2^-20; 2^-18 as margin over the approximation
# (numpy's float32 log2 in the interpreter, PTX lg2.approx.f32 on NVIDIA GPUs; measured by
# tests/verification/test_attention_error_bound.py and benchmarks/bench_attention_error.py on [0.5, 2^24]).
LOG2_ERROR: float = 2.0**-18

# |qk_scale ln 2 - scale| <= uc scale for the kernel's qk_scale = float32(scale * _LOG2E),
# _LOG2E the float64 nearest log2(e): (1 + 2^-53)^2 (1 + 2^-24) - 1 <= 2^-24 + 2^-51.
_QK_SCALE_ERROR = 2.0**-24 + 2.0**-51
# |cl - ln 2| <= ucl ln 2 for the kernel's float32 constant cl = float32(0.6931471805599453):
# (1 + 2^-53)(1 + 2^-24) - 1 <= 2^-24 + 2^-52.
_LN2_CONST_ERROR = 2.0**-24 + 2.0**-52


@dataclass(frozen=True)
class _TruncatingAccumulation:
    """The fields of a tensor-core accumulation model (``block`` None: left to right, where the
    subclass allows it), checked, and built from an identified accumulation."""

    block: int | None
    bits: int = 26
    out: str = "truncate"
    ref: str = "operands"
    _allow_no_block: ClassVar[bool] = False

    def __post_init__(self) -> None:
        block, bits = self.block, self.bits
        if not (block is None and self._allow_no_block) and (
            isinstance(block, bool) or not isinstance(block, int) or block < 1
        ):
            raise ValueError(
                f"block must be {'None or ' if self._allow_no_block else ''}an integer >= 1, got {block!r}"
            )
        if isinstance(bits, bool) or not isinstance(bits, int) or bits < 1:
            raise ValueError(f"bits must be an integer >= 1, got {bits!r}")
        if self.out not in ("nearest", "truncate"):
            raise ValueError(f"out must be 'nearest' or 'truncate', got {self.out!r}")
        if self.ref not in ("term", "operands"):
            raise ValueError(f"ref must be 'term' or 'operands', got {self.ref!r}")

    @classmethod
    def from_accumulation(cls, accumulation: Any) -> Self:
        """The model of an identified accumulation (``ojas verify-device``'s ``Accumulation``); only
        alignment by truncation to a number of bits is ``tc_align`` / ``tc_align_op``: others raise."""
        if accumulation.bits is None or accumulation.align != "trunc":
            raise ValueError(
                f"accumulation must align by truncation to a number of bits (TensorCoreSum.tc_align, tc_align_op), "
                f"got bits={accumulation.bits!r}, align={accumulation.align!r}"
            )
        return cls(accumulation.block, accumulation.bits, accumulation.out, getattr(accumulation, "ref", "term"))


@dataclass(frozen=True)
class TensorCoreDot(_TruncatingAccumulation):
    """The scores' dot of the 16-bit kernels on tensor cores (rocq/FloatModel/TensorCoreSum.v, the
    products of bfloat16 / float16 operands exact): blocks of ``block`` products with the running
    accumulator, every term truncated below ``2^(E - bits + 1)``, ``E`` the exponent of the block's
    largest term (``ref="term"``: ``Ojas.Attention.Float.ForwardError.tc_dot_model``) or the largest
    of the accumulator's exponent and the products' operand exponent sums (``ref="operands"``:
    ``tc_op_dot_model``, the H100's), the block's sum rounded to float32 by ``out`` ("nearest":
    ``ur = 2^-24``, "truncate": ``2^-23``); the parameters ``ojas verify-device`` identifies for
    "tl.dot bfloat16" (:meth:`from_accumulation`; :data:`TENSOR_CORE_BF16_H100`). Both references
    have the same constants (:func:`dot_error_constants`)."""

    block: int


@dataclass(frozen=True)
class Tf32x3Dot(_TruncatingAccumulation):
    """The scores' dot as Triton's 3xTF32 computes it (``tl.dot(..., input_precision="tf32x3")``:
    the float32 attention kernels on CUDA, ``_HIGHEST`` of kernels/ojas_kernels/attention_args.py),
    the model of rocq/FloatModel/Tf32Product.v: the high parts ``cvt.rna`` to TF32 (``uh = 2^-11``),
    the low parts read by truncation (``ul = 2^-10``; ``ojas verify-device``'s "tf32 low-part
    reading" must say ``trunc``), the three TF32 dots accumulated

    * on tensor cores (``block`` set), chained from 0 (dot1, dot2, dot3; Triton 3.6 adds the
      accumulator afterwards, exactly 0 for the scores' and ``dp``'s dots), each as a
      :class:`TensorCoreDot` (``ref="operands"``: ``Ojas.Attention.Float.ForwardError.tf32x3_tc_op_dot_model``,
      the H100's; ``ref="term"``: ``tf32x3_tc_dot_model``) with the parameters ``ojas verify-device``
      identifies for "tl.dot float32 tf32" (:meth:`from_accumulation`; :data:`TF32X3_H100`);
    * left to right in float32 (``block=None``: ``tf32x3_seq_dot_model``).

    Either way the dot of ``n`` pairs is within ``g_rel * sum_i |q_i k_i|`` of the exact one
    (:func:`dot_error_constants`), no underflow (the accumulation is Flocq's FLX)."""

    block: int | None = None
    _allow_no_block: ClassVar[bool] = True


#: The float32 kernels' 3xTF32 dots on an H100 (``ojas verify-device`` on 2026-12-06, Triton 3.6:
#: "tl.dot float32 tf32" = blocks of 8, 26 bits from the operands' exponents, truncated, the low
#: parts read by truncation, chained from 0): ``attention_forward_error_masked_tf32x3_op``.
TF32X3_H100 = Tf32x3Dot(block=8, bits=26, out="truncate", ref="operands")
#: The bf16 kernels' dots on an H100 (the same record: blocks of 16): ``attention_forward_error_masked_tc_op``.
TENSOR_CORE_BF16_H100 = TensorCoreDot(block=16, bits=26, out="truncate", ref="operands")

#: The scores' dot: "fp32" (float32 products summed left to right, the blocked sum of
#: ``Ojas.Attention.Float.ForwardError.blocked_dot_model``: the default), "tf32x3" (=
#: ``Tf32x3Dot()``), a :class:`Tf32x3Dot` or a :class:`TensorCoreDot`.
DotModel = Union[str, Tf32x3Dot, TensorCoreDot]

_TF32_UH = Fraction(1, 2048)  # cvt.rna to TF32 (precision 11)
_TF32_UL = Fraction(1, 1024)  # the low part read by truncation


def _dot_model(dot: DotModel) -> str | Tf32x3Dot | TensorCoreDot:
    """``dot`` checked: "fp32", a :class:`Tf32x3Dot` ("tf32x3" is ``Tf32x3Dot()``) or a
    :class:`TensorCoreDot`."""
    if isinstance(dot, (Tf32x3Dot, TensorCoreDot)):
        return dot
    if dot == "fp32":
        return "fp32"
    if dot == "tf32x3":
        return Tf32x3Dot()
    raise ValueError(f"dot must be 'fp32', 'tf32x3', a Tf32x3Dot or a TensorCoreDot, got {dot!r}")


def _gamma_q(u: Fraction, n: int) -> Fraction:
    """Higham's ``gamma_n = n u / (1 - n u)`` exactly (``n u < 1``, checked by the caller)."""
    return n * u / (1 - n * u)


def dot_error_constants(dot: DotModel, n: int) -> tuple[Fraction, Fraction]:
    """``(g_rel, g_abs)`` of the dot model ``dot`` on vectors of length ``n`` (exact rationals):
    the computed dot is within ``g_rel * sum_i |q_i k_i| + g_abs`` of the exact one
    (``Ojas.Attention.Float.ForwardError.dot_model``).

    * "fp32": ``gamma(n)``, ``(1 + gamma(n - 1)) n eta`` (``blocked_dot_model``, ``u = 2^-24``,
      ``eta`` float32's underflow term; ``g_rel P + g_abs`` is ``dot_err n P``);
    * a :class:`Tf32x3Dot` on tensor cores: ``c + gamma_d(3 q) kl + gamma_d(q) kh``, 0
      (``tf32x3_tc_op_dot_model``, ``tf32x3_tc_dot_model``: ``q = ceil(n / block)``, ``d = tc_delta = (1 + ur)(block + 1)
      2^(1 - bits) + ur``), left to right: ``c + gamma(3 n - 1) kl + gamma(n) kh``, 0
      (``tf32x3_seq_dot_model``), with Tf32Product.v's ``c = uh^2 + 2 uh ul (1 + uh)``,
      ``kl = 2 uh (1 + ul)(1 + uh)``, ``kh = (1 + uh)^2``;
    * a :class:`TensorCoreDot`: ``gamma_d(q)``, 0 (``tc_op_dot_model``, ``tc_dot_model``).

    The alignment reference (``ref``) does not change the constants.

    Raises ``ValueError`` on a bad argument or a failed side condition (``n u < 1``,
    ``3 n u < 1``, ``3 q d < 1``)."""
    dot = _dot_model(dot)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    return _dot_constants(dot, n)


#: entries kept by each memo of the exact-rational constants below (pure functions of hashable arguments: the
#: bounds evaluate them once per group of rows, mostly at arguments already seen)
_MEMO = 1 << 16


@lru_cache(maxsize=_MEMO)
def _dot_constants(dot: str | Tf32x3Dot | TensorCoreDot, n: int) -> tuple[Fraction, Fraction]:
    """:func:`dot_error_constants` at a checked ``dot`` and ``n``, memoized."""
    u = Fraction(_FP32_U)
    if dot == "fp32":
        if not n * u < 1:
            raise ValueError(f"side condition n u < 1 of blocked_dot_model fails for n={n}")
        return _gamma_q(u, n), (1 + _gamma_q(u, n - 1)) * n * Fraction(_FP32_ETA)
    if dot.block is not None:
        ur = u if dot.out == "nearest" else 2 * u
        d = (1 + ur) * (dot.block + 1) * Fraction(2) ** (1 - dot.bits) + ur  # tc_delta
        q = -(-n // dot.block)
    if isinstance(dot, TensorCoreDot):
        if not q * d < 1:
            raise ValueError(f"side condition q tc_delta < 1 of tc_dot_model fails for n={n}, {dot}")
        return _gamma_q(d, q), Fraction(0)
    uh, ul = _TF32_UH, _TF32_UL
    c, kl, kh = uh * uh + 2 * uh * ul * (1 + uh), 2 * uh * (1 + ul) * (1 + uh), (1 + uh) * (1 + uh)
    if dot.block is None:
        if not 3 * n * u < 1:
            raise ValueError(f"side condition 3 n u < 1 of tf32x3_seq_dot_model fails for n={n}")
        return c + _gamma_q(u, 3 * n - 1) * kl + _gamma_q(u, n) * kh, Fraction(0)
    if not 3 * q * d < 1:
        raise ValueError(f"side condition 3 q tc_delta < 1 of tf32x3_tc_dot_model fails for n={n}, {dot}")
    return c + _gamma_q(d, 3 * q) * kl + _gamma_q(d, q) * kh, Fraction(0)


def acc_dot_error_constants(dot: DotModel, n: int) -> tuple[Fraction, Fraction]:
    """``(g_rel, g_abs)`` of the ACCUMULATING dot ``tl.dot(a, b, acc)`` of ``dot``'s kind on vectors
    of length ``n`` (exact rationals): the computed result is within
    ``g_rel * (|acc| + sum_i |a_i b_i|) + g_abs`` of ``acc + a.b``
    (``Ojas.Attention.Float.NumeratorError.acc_dot_model``).

    * "fp32" and a :class:`Tf32x3Dot`: the dot from 0 (:func:`dot_error_constants`' ``g, ga``),
      then ``acc`` added in float32 (``u = 2^-24``, ``eta`` float32's underflow term):
      ``u + (1 + u) g``, ``(1 + u) ga + eta`` (``Ojas.Attention.Float.ForwardError.acc_of_dot_model``;
      ``blocked_acc_dot_model``, ``tf32x3_tc_op_acc_dot_model``: Triton 3.6 adds ``acc`` after the
      three TF32 dots);
    * a :class:`TensorCoreDot` with ``ref="operands"`` (the H100's): the accumulator aligned and
      truncated with each block, ``gamma_d(q)``, 0 (``tc_acc_op_dot_model``).

    Raises ``NotImplementedError`` for a :class:`TensorCoreDot` with ``ref="term"`` (no accumulating
    model is proved for it) and ``ValueError`` as :func:`dot_error_constants`."""
    dot = _dot_model(dot)
    if isinstance(dot, TensorCoreDot):
        if dot.ref != "operands":
            raise NotImplementedError(
                f"no accumulating tensor-core model is proved for ref={dot.ref!r} (only 'operands'): {dot}"
            )
        return dot_error_constants(dot, n)
    g, ga = dot_error_constants(dot, n)
    u = Fraction(_FP32_U)
    return u + (1 + u) * g, (1 + u) * ga + Fraction(_FP32_ETA)


def acc_dot_split_constants(dot: DotModel, n: int) -> tuple[Fraction, Fraction, Fraction]:
    """``(g_acc, g_dot, g_abs)`` of the ACCUMULATING dot ``tl.dot(a, b, acc)`` of ``dot``'s kind on vectors
    of length ``n`` (exact rationals): the computed result is within
    ``g_acc |acc| + g_dot sum_i |a_i b_i| + g_abs`` of ``acc + a.b``
    (``Ojas.Attention.Float.RunningAccError.acc_dot_split_model``), the running theorems' model.

    * "fp32" and a :class:`Tf32x3Dot`: the dot from 0 (:func:`dot_error_constants`' ``g, ga``), then
      ``acc`` added in one float32 rounding: ``u``, ``u + (1 + u) g``, ``(1 + u) ga + eta``
      (``acc_of_dot_split_model``; ``blocked_acc_dot_split_model``, ``tf32x3_tc_op_acc_dot_split_model``);
    * a :class:`TensorCoreDot` with ``ref="operands"``: :func:`acc_dot_error_constants`' ``g_rel`` for both,
      ``g_abs`` (``acc_dot_split_of_model`` of ``tc_acc_op_dot_model``).

    Raises as :func:`acc_dot_error_constants`."""
    g_rel, g_abs = acc_dot_error_constants(dot, n)
    if isinstance(_dot_model(dot), TensorCoreDot):
        return g_rel, g_rel, g_abs
    return Fraction(_FP32_U), g_rel, g_abs


def _score_dot_error(dot: DotModel, head_dim: int, p: float) -> float | None:
    """The scores' dot error ``g_rel p + g_abs`` rounded up to a float, ``None`` for "fp32" (the
    oracle's and the hand formulas' own ``dot_err``)."""
    if _dot_model(dot) == "fp32":
        return None
    g_rel, g_abs = dot_error_constants(dot, head_dim)
    return _float_up(g_rel * Fraction(p) + g_abs)


def _hand_afe_common(u, ue, ee, ea, uc, scale, p, e, b, n, t, de=None):
    """The float64 hand copy of the quantities ``attn_fwd_q`` and ``attn_lse_q`` share:
    (smax, delta, X, P1, CG, CR, bL), each rounded up by a relative 2^-30; ``de`` the scores'
    dot error (``score_max_de``, ``score_delta_de``), ``dot_err e p`` when ``None``."""

    def gamma(k):
        return k * u / (1.0 - k * u)

    up = 1.0 + 2.0**-30  # float64 evaluation of a few dozen operations, rounded up
    if de is None:
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
    ``Ojas.Attention.Float.ForwardPosteriori``; ``afe_bN = afp_gA + afp_rA / V``), in
    float64, not yet rounded up."""
    ha = P1 * ((1.0 + u) * (1.0 + us) * ((1.0 + ue) * X))
    ra = (
        t
        * CR
        * (
            (
                ((ha * CG * X) * (n * v) * ee) * (1.0 + u)
                + ea
                + P1 * ((1.0 + u) * ((1.0 + us) * ee + es) * (b * v) + b * ea)
            )
            * (1.0 + u)
        )
    )
    return ha * CG * X - 1.0, ra


def _hand_attention_forward_error_bound(u, ue, ee, ea, us, es, uc, scale, p, v, e, b, n, t, de=None) -> float:
    """Hand copy of ``afe_rel`` of ``Ojas.Attention.Float.ForwardError`` at the upper
    bounds ``attn_fwd_q`` computes (fallback without the oracle), in float64 with a
    relative margin; ``inf`` when its side condition ``bL < 1`` fails. ``de``: the scores'
    dot error (``attention_forward_error_masked_dot``; only the tests pass it, comparing
    the old P.V model with :func:`_afa_bounds`)."""
    up = 1.0 + 2.0**-30
    _, delta, X, P1, CG, CR, bl = _hand_afe_common(u, ue, ee, ea, uc, scale, p, e, b, n, t, de)
    if not bl < 1.0:
        return math.inf
    Y = math.expm1(2.0 * delta) * up
    ga, ra = _hand_acc_terms(u, ue, ee, ea, us, es, X, P1, CG, CR, v, b, n, t)
    bn = (ga + ra / v) * up
    f = ((bn + bl) + u * (1.0 + bn)) / (1.0 - bl)
    return (((f + ea / v + Y) * (1.0 + us) + us + es / v) * up) * _ROUND_UP


def _hand_attention_forward_posteriori(u, ue, ee, ea, us, es, uc, scale, p, v, e, b, n, t) -> tuple[float, float]:
    """``(afp_rel, afp_abs)`` of ``Ojas.Attention.Float.ForwardPosteriori`` at the same
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


_POW_GRID = 2**256


def _grid_up(x: Fraction) -> Fraction:
    """The least multiple of ``2^-256`` at or above ``x``."""
    return Fraction(-((-x.numerator * _POW_GRID) // x.denominator), _POW_GRID)


@lru_cache(maxsize=_MEMO)
def _pow_up(x: Fraction, k: int) -> Fraction:
    """An upper bound of ``x^k`` (``x >= 0``, ``k >= 0``): repeated squaring with every product rounded
    up to a multiple of ``2^-256`` (the factors are >= 0, so every step stays at or above the exact power);
    memoized."""
    r, b = Fraction(1), _grid_up(x)
    while k:
        if k & 1:
            r = _grid_up(r * b)
        k >>= 1
        if k:
            b = _grid_up(b * b)
    return r


@lru_cache(maxsize=_MEMO)
def _exp_up(x: Fraction) -> Fraction:
    """An upper bound of ``e^x`` for ``x >= 0``: ``(1 + y + y^2)^(2^j)`` at ``y = x / 2^j <= 1``; memoized."""
    j = 0
    while x > 2**j:
        j += 1
    return _pow_up(_exp_up_small(x / 2**j), 2**j)


def _afa_constants(dot: DotModel, args: dict[str, float], head_dim: int, block_n: int, tiles: int) -> dict[str, Any]:
    """The constants of ``Ojas.Attention.Float.ForwardAccError``'s closed form (exact rationals) for the
    scores' dot ``dot`` over ``head_dim`` and P.V accumulated by its ``tl.dot`` on tiles of ``block_n``
    keys (``g_rel``, ``g_abs``: :func:`acc_dot_error_constants`), ``Tt = tiles``, at ``args``
    (:func:`_afe_args`; ``V`` its ``v``): the certified upper bounds ``X = e^(u K) >= 2^(u K)``,
    ``Y >= e^(2 delta) - 1`` (:func:`_exp_up`; ``K = 2 score_max_de``, ``delta = score_delta_de``:
    :func:`_score_terms_q`), ``P1 >= (1 + u)^(n - 1)``, ``CG >= cg^Tt``, ``CR >= cr^Tt``,
    ``CGA >= cgA^Tt``, ``CRA >= crA^Tt`` (:func:`_pow_up`)."""
    c = {k: Fraction(args[k]) for k in ("u", "ue", "ee", "ea", "us", "es")}
    u, ue, ee = c["u"], c["ue"], c["ee"]
    smax, delta = _score_terms_q(dot, head_dim, Fraction(args["p"]), Fraction(args["scale"]))
    g_rel, g_abs = acc_dot_error_constants(dot, block_n)
    return dict(
        c,
        V=Fraction(args["v"]),
        g_rel=g_rel,
        g_abs=g_abs,
        X=_exp_up(u * 2 * smax),
        Y=_exp_up(2 * delta) - 1,
        P1=_pow_up(1 + u, block_n - 1),
        CG=_pow_up((1 + ue) * (1 + u) ** 2, tiles),
        CR=_pow_up((1 + ue + ee) * (1 + u) ** 2, tiles),
        CGA=_pow_up((1 + ue) * (1 + u) * (1 + g_rel), tiles),
        CRA=_pow_up((1 + ue + ee) * (1 + u) * (1 + g_rel), tiles),
    )


def _afa_bounds(
    dot: DotModel, args: dict[str, float], head_dim: int, block_n: int, n_keys: int, tiles: int
) -> tuple[Fraction, Fraction] | None:
    """``(afa_rel, afa_abs)`` of ``Ojas.Attention.Float.ForwardAccError`` (exact rationals) at
    :func:`_afa_constants`, ``n = block_n``, ``N = n_keys``, ``Tt = tiles``; ``None`` when its side
    condition ``afe_bL < 1`` fails."""
    k = _afa_constants(dot, args, head_dim, block_n, tiles)
    bL, HA, rA = _afa_terms(k, block_n, n_keys, tiles)
    if not bL < 1:
        return None
    u, ea, us, es, Y = (k[n] for n in ("u", "ea", "us", "es", "Y"))
    rel = ((1 + u) * (HA - 1 + bL) * (1 + Y) / (1 - bL) + u * (1 + Y) + Y) * (1 + us) + us
    absolute = ((1 + u) * rA / (1 - bL) + ea) * (1 + us) + es
    return rel, absolute


def _afe_bL(k: dict[str, Any], block_n: int, n_keys: int, tiles: int, arg: bool = False) -> Fraction:
    """``afe_bL`` of ForwardError.v (``B = block_n``, ``N = n_keys``, ``Tt = tiles``) at the constants ``k``
    (``u``, ``ue``, ``ee``, ``ea``, ``X``, ``P1``, ``CG``, ``CR``); with ``arg``, PerPairExpArg.v's
    ``afe_bL_arg`` (``H = P1 (1 + ue)``: the exp2 argument's rounding charged per pair, not by ``X``)."""
    u, ue, ee, ea, X, P1, CG, CR = (k[n] for n in ("u", "ue", "ee", "ea", "X", "P1", "CG", "CR"))
    H = P1 * ((1 + ue) * (1 if arg else X))
    return H * CG * X - 1 + tiles * CR * ((H * CG * X * n_keys * ee) * (1 + u) + ea + P1 * (block_n * ee)) * (1 + u)


def _afa_terms(k: dict[str, Any], block_n: int, n_keys: int, tiles: int) -> tuple[Fraction, Fraction, Fraction]:
    """``(afe_bL, afa_HA, afa_rA)`` (ForwardError.v at ``B = n``, ForwardAccError.v) at the constants
    ``k`` of :func:`_afa_constants`, ``n = block_n``, ``N = n_keys``, ``Tt = tiles``."""
    u, ue, ee, ea, us, es, V, X = (k[n] for n in ("u", "ue", "ee", "ea", "us", "es", "V", "X"))
    CGA, CRA, g_rel = (k[n] for n in ("CGA", "CRA", "g_rel"))
    bL = _afe_bL(k, block_n, n_keys, tiles)
    HA = (1 + us) * ((1 + ue) * X) * CGA * X
    cw = (1 + us) * ee + es
    rA = tiles * CRA * ((HA * (n_keys * V) * ee * (1 + u) + ea + cw * (block_n * V)) * (1 + g_rel) + k["g_abs"])
    return bL, HA, rA


def _afr_bounds(
    dot: DotModel,
    args: dict[str, float],
    head_dim: int,
    block_n: int,
    n_keys: int,
    tiles: int,
    per_pair: bool = False,
) -> dict[str, Fraction] | None:
    """``afr_gb``, ``afr_rel``, ``afr_C``, ``afr_abs`` of ``Ojas.Attention.Float.ForwardAccRunning``
    (exact rationals, keys ``gb``, ``rel``, ``C``, ``abs``) at :func:`_afa_constants` and
    ``CB = (1 + afr_gb)^Tt`` rounded up (:func:`_pow_up`), ``n = block_n``, ``N = n_keys``,
    ``Tt = tiles``; ``None`` when the side condition ``afe_bL < 1`` fails. ``per_pair``: those of
    ``Ojas.Attention.Float.PerPairScoreError.attention_forward_acc_running_pp`` instead, ``afr_rel`` and
    ``afr_C`` at ``Y = 0`` and ``afr_ypp`` (key ``ypp``)."""
    k = _afa_constants(dot, args, head_dim, block_n, tiles)
    terms = _afa_terms(k, block_n, n_keys, tiles)
    if not terms[0] < 1:
        return None
    return _afr_from_terms(k, terms, block_n, n_keys, tiles, per_pair)


def _afr_from_terms(
    k: dict[str, Any],
    terms: tuple[Fraction, Fraction, Fraction],
    block_n: int,
    n_keys: int,
    tiles: int,
    per_pair: bool = False,
) -> dict[str, Fraction]:
    """:func:`_afr_bounds`' values at the constants ``k`` and ``terms = (afe_bL, afa_HA, afa_rA)`` (``afe_bL <
    1``), exact rationals."""
    bL, HA, rA = terms
    u, ue, ee, ea, us, es, V, X = (k[n] for n in ("u", "ue", "ee", "ea", "us", "es", "V", "X"))
    Y = Fraction(0) if per_pair else k["Y"]
    g_rel, g_abs = k["g_rel"], k["g_abs"]
    gb = (1 + g_rel) * (1 + u) * (1 + ue) - 1 + g_rel * ((1 + us) * (1 + ue) * X - 1)
    CB = _pow_up(1 + gb, tiles)
    gA = CB * ((1 + us) * (1 + ue) * X * X - 1)
    Ep = HA * (n_keys * V) + rA
    rR = tiles * CB * ((1 + g_rel) * ((1 + u) * ee * Ep + ea + ((1 + us) * ee + es) * (block_n * V)) + g_abs)
    got = dict(
        gb=gb,
        rel=((1 + u) * ((gA + bL) * (1 + Y) + X * Y * (CB - 1)) / (1 - bL) + u * (1 + Y) + Y) * (1 + us) + us,
        C=(1 + us) * (1 + u) * X * (1 + Y) / (1 - bL),
        abs=((1 + u) * rR / (1 - bL) + ea) * (1 + us) + es,
    )
    if per_pair:
        got["ypp"] = ((1 + u) * (gA + bL + X * (CB - 1)) / (1 - bL) + u + 1) * (1 + us)
    return got


def _afa_checked(
    dot: DotModel, args: dict[str, float], head_dim: int, block_n: int, n_keys: int, tiles: int, dtype: torch.dtype
) -> tuple[Fraction, Fraction]:
    """:func:`_afa_bounds`, ``ValueError`` when its side condition fails."""
    got = _afa_bounds(dot, args, head_dim, block_n, n_keys, tiles)
    if got is None:
        raise ValueError(
            f"side condition afe_bL < 1 of attention_forward_acc_posteriori fails for n_keys={n_keys}, "
            f"head_dim={head_dim}, block_n={block_n}, dtype={dtype}, exp2_error={args['ue']}, dot={dot}"
        )
    return got


def _afe_args(
    n_keys: int,
    block_n: int,
    dtype: torch.dtype,
    storage_rounding: str,
    exp2_error: float,
    scale: float,
    p: float,
    max_abs_v: float,
) -> tuple[dict[str, float], int]:
    """The model's constants and the arguments that ``attn_fwd_q`` and ``attn_fwd_post_q``
    take (in their order), and the number of key tiles."""
    us, es = _storage(dtype, storage_rounding)
    args = dict(
        u=_FP32_U,
        ue=float(exp2_error),
        ee=_EXP2_ABS_ERROR,
        ea=_FP32_ETA,
        us=us,
        es=es,
        uc=_QK_SCALE_ERROR,
        scale=float(scale),
        p=float(p),
        v=float(max_abs_v),
    )
    return args, -(-n_keys // block_n)


def attention_forward_error_bound(
    n_keys: int,
    head_dim: int,
    *,
    block_n: int,
    dtype: torch.dtype,
    max_abs_q: float,
    max_abs_k: float,
    max_abs_v: float,
    scale: float | None = None,
    qk_abs_sum: float | None = None,
    exp2_error: float = EXP2_ERROR,
    storage_rounding: str = "nearest",
    dot: DotModel = "fp32",
) -> float:
    """Bound on ``|out - exact| / max_abs_v`` for every output coordinate of the Triton
    flash-attention forward (kernels/ojas_kernels/attention_forward.py) on one query row of at most ``n_keys``
    keys, against the exact softmax of ``scale * q.k`` over the same keys (the inputs
    taken as exact reals; compare with a float64 softmax of the upcast inputs).

    With ``dot="fp32"`` (the default) implements
    ``Ojas.Attention.Float.ForwardError.attention_forward_error_masked`` (the kernel's loop
    from its start under any boolean mask: causal, window, sequence bounds; the softmax over
    the visible keys) and ``attention_forward_error`` (fully visible tiles),
    rocq/Attention/Float/ForwardError.v, through ``attn_fwd_q`` of
    ``Ojas.Bounds.Attention`` (``Ojas.Bounds.Attention.attn_fwd_q_sound_masked``,
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
    truncation constants, no Coq instance for them: not a proved bound); ``max_abs_q``,
    ``max_abs_k``, ``max_abs_v`` upper bounds of |q_i|, |k_ji|, |v_jc|; ``scale`` the softmax
    scale (default ``1 / sqrt(head_dim)``, must be > 0);
    ``qk_abs_sum`` an upper bound of ``sum_i |q_i k_ji|`` over the row's keys (default
    ``head_dim * max_abs_q * max_abs_k``; a measured value makes the bound tighter).
    Raises ``ValueError`` on a bad argument or when the theorem's side condition
    (``afe_bL < 1``, or ``head_dim * 2^-24 < 1``) fails.

    ``dot`` is the model of the kernel's dots (:class:`Tf32x3Dot`, :class:`TensorCoreDot`): "fp32" (the
    default: the interpreter's IEEE float32 dots) is the theorems above. A model (the dots on CUDA:
    :data:`TF32X3_H100` for float32, :data:`TENSOR_CORE_BF16_H100` for 16-bit inputs on an H100) is
    ``Ojas.Attention.Float.ForwardAccError.attention_forward_acc_posteriori`` at ``W <= max_abs_v``
    (one line: ``W = sum_j P_j |v_j| <= max |v|``), i.e. ``afa_rel + afa_abs / max_abs_v``: the scores'
    dot that model's and the P.V ``acc = tl.dot(p, v, acc * alpha)`` accumulated by its ``tl.dot``
    (:func:`acc_dot_error_constants` on tiles of ``block_n`` keys), as
    :func:`attention_forward_posteriori_bound` says (the H100 instances
    ``attention_forward_acc_posteriori_tf32x3_op``, ``attention_forward_acc_posteriori_tc_op``); a
    :class:`TensorCoreDot` with ``ref="term"`` raises ``NotImplementedError`` (no accumulating model).

    Not covered (the theorems' files list them): with ``dot="fp32"`` the tensor cores' order of
    additions in either dot and the MMA accumulating into ``acc * alpha`` (the float32 kernel on CUDA
    runs 3xTF32 dots: pass a :class:`Tf32x3Dot`; single-pass TF32 is not covered); with any ``dot``:
    ``tl.sum(p)`` modelled left to right (not as a tree), the unmasked tiles' fused
    ``s * qk_scale - m`` (the model rounds the product first), FMA contraction (off at launch),
    dropout, additive float masks (they change the scores), overflow, and ``exp2_error`` itself
    (:data:`EXP2_ERROR`, an assumption, as is ``exp2(0) == 1``). Grouped-query attention changes only
    which key/value head a row reads: covered; so are causal masks, windows and a last key tile cut by
    the sequence end (its padding keys masked).
    """
    p, scale = _attention_bound_args(
        n_keys, head_dim, block_n, max_abs_q, max_abs_k, scale, qk_abs_sum, exp2_error, dtype=dtype, max_abs_v=max_abs_v
    )
    args, tiles = _afe_args(n_keys, block_n, dtype, storage_rounding, exp2_error, scale, p, max_abs_v)
    if _dot_model(dot) != "fp32":
        rel, absolute = _afa_checked(dot, args, head_dim, block_n, n_keys, tiles, dtype)
        return _float_up(rel + absolute / Fraction(args["v"]))
    got = _from_oracle(
        bound="attention_forward",
        **{k: _rational(x) for k, x in args.items()},
        e=head_dim,
        block=block_n,
        keys=n_keys,
        tiles=tiles,
    )
    if got is _NO_ORACLE:
        value = _hand_attention_forward_error_bound(*args.values(), head_dim, block_n, n_keys, tiles)
        if value == math.inf:
            got = None
    elif got is not None:
        value = _float_up(got)
    if got is None:
        raise ValueError(
            f"side condition afe_bL < 1 of attention_forward_error fails for n_keys={n_keys}, "
            f"head_dim={head_dim}, block_n={block_n}, dtype={dtype}, exp2_error={exp2_error}"
        )
    return value


def attention_forward_posteriori_bound(
    prob_abs_v: torch.Tensor,
    n_keys: int,
    head_dim: int,
    *,
    block_n: int,
    dtype: torch.dtype,
    max_abs_q: float,
    max_abs_k: float,
    max_abs_v: float,
    scale: float | None = None,
    qk_abs_sum: float | None = None,
    exp2_error: float = EXP2_ERROR,
    storage_rounding: str = "nearest",
    dot: DotModel = "fp32",
) -> torch.Tensor:
    """Bound on ``|out_ic - exact_ic|`` entry by entry for the Triton flash-attention
    forward (kernels/ojas_kernels/attention_forward.py): ``afp_rel * W_ic + afp_abs`` with
    ``W_ic = prob_abs_v[..., i, c] = sum_j P_ij |v_jc|`` (``P`` the exact softmax of
    ``scale * q.k`` over the row's visible keys; the caller computes it, e.g. a float64
    softmax times ``|v|``, enlarged for its own rounding). Returns a float64 tensor shaped
    like ``prob_abs_v``.

    With ``dot="fp32"`` (the default: the interpreter's float32 dots) implements
    ``Ojas.Attention.Float.ForwardPosteriori.attention_forward_posteriori_masked`` (the kernel's
    loop from its start under any boolean mask) and
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
    ``Ojas.Bounds.Attention`` (``Ojas.Bounds.Attention.attn_fwd_post_q_sound_masked``,
    ``attn_fwd_post_q_sound``: whenever it answers ``(r, a)``, ``r * W_ic + a`` bounds the
    error): the oracle computes them over exact rationals at the same certified upper
    bounds of X, Y, P1, CG, CR as ``attn_fwd_q`` (``afe_consts``), and this function rounds
    them up and evaluates ``r * W + a`` in float64, rounded up. Without the oracle binary,
    the float64 hand copy ``_hand_attention_forward_posteriori`` (each step rounded up by a
    relative ``2^-30``; tests/verification/test_error_bounds.py checks that it is at least the oracle's
    pair and within ``32 * 2^-30`` of its ``afp_rel``). Not covered: as for
    :func:`attention_forward_error_bound` (the MMA's order and accumulation, ``tl.sum`` tree,
    FMA contraction, additive float masks, overflow, ``exp2_error`` an assumption, and
    ``storage_rounding="truncate"`` not a proved bound).

    ``dot``: a model of the kernel's dots (not "fp32": the dots on CUDA, :data:`TF32X3_H100` for
    float32 and :data:`TENSOR_CORE_BF16_H100` for 16-bit inputs on an H100) gives
    ``Ojas.Attention.Float.ForwardAccError.attention_forward_acc_posteriori``
    (rocq/Attention/Float/ForwardAccError.v): the scores' dot the model's
    :func:`dot_error_constants` over ``head_dim``, and the P.V
    ``acc = tl.dot(p.to(v.dtype), v, acc * alpha)`` the model's accumulating dot on tiles of
    exactly ``n = block_n`` keys (the padding past the sequence end masked) with
    ``(g_rel, g_abs)`` = :func:`acc_dot_error_constants` (the MMA's order, alignment and truncation,
    and its accumulating into ``acc * alpha``, not float32 products summed left to right). On an H100
    it is the instance ``attention_forward_acc_posteriori_tf32x3_op`` (:class:`Tf32x3Dot` with
    ``ref="operands"``: 3xTF32 scores ``tf32x3_dot_tc_op``; P.V's three TF32 dots chained from 0
    then ``acc * alpha`` added in float32, ``g_rel = u + (1 + u) tf32x3_tc_rel``,
    ``g_abs = (1 + u) 0 + eta``) or ``attention_forward_acc_posteriori_tc_op`` (:class:`TensorCoreDot`:
    the MMA chain from ``acc * alpha``, ``g_rel = gamma(tc_delta) q``, ``g_abs = 0``); other
    :class:`Tf32x3Dot` models are the general theorem at their dot models (``tf32x3_tc_dot_model``,
    ``tf32x3_seq_dot_model``, with ``acc_of_dot_model``); a :class:`TensorCoreDot` with ``ref="term"``
    raises ``NotImplementedError``. The bound is ``afa_rel * W + afa_abs``, ``N = n_keys``,
    ``Tt = ceil(n_keys / block_n)`` (tiles run, fully masked ones included), with
    ``bL = afe_bL`` (ForwardError.v, ``B = n``), ``HA = (1 + us)(1 + ue) X CGA X``,
    ``rA = Tt CRA ((HA N V ee (1 + u) + ea + ((1 + us) ee + es) n V)(1 + g_rel) + g_abs)``,
    ``afa_rel = ((1 + u)(HA - 1 + bL)(1 + Y)/(1 - bL) + u (1 + Y) + Y)(1 + us) + us``,
    ``afa_abs = ((1 + u) rA/(1 - bL) + ea)(1 + us) + es``, computed here in exact rationals
    (:func:`_afa_bounds`: ``X = e^(u K) >= 2^(u K)``, ``Y >= e^(2 delta) - 1`` by ``1 + x + x^2``
    and certified squarings, ``P1 >= (1 + u)^(n - 1)``, ``CG``, ``CR``, ``CGA``, ``CRA`` the
    ``Tt``-th powers of ``cg``, ``cr``, ``cgA = (1 + ue)(1 + u)(1 + g_rel)``,
    ``crA = (1 + ue + ee)(1 + u)(1 + g_rel)``, each power rounded up), each rounded up to a float.
    Not covered (the .v file's header): ``tl.sum(p)`` modelled left to right, the unmasked tiles'
    fused ``s * qk_scale - m``, FMA contraction in ``l * alpha + sum``, dropout, additive float
    masks, overflow; the tensor cores' alignment model and ``exp2_error`` are premises.

    Raises ``ValueError`` on a bad argument or when the side condition fails."""
    p, scale = _attention_bound_args(
        n_keys, head_dim, block_n, max_abs_q, max_abs_k, scale, qk_abs_sum, exp2_error, dtype=dtype, max_abs_v=max_abs_v
    )
    if prob_abs_v.is_complex() or not bool(((prob_abs_v >= 0) & torch.isfinite(prob_abs_v)).all()):
        raise ValueError("prob_abs_v must be finite and >= 0")
    args, tiles = _afe_args(n_keys, block_n, dtype, storage_rounding, exp2_error, scale, p, max_abs_v)
    if _dot_model(dot) != "fp32":
        rel, absolute = (_float_up(x) for x in _afa_checked(dot, args, head_dim, block_n, n_keys, tiles, dtype))
        return (rel * prob_abs_v.to(torch.float64) + absolute) * _ROUND_UP
    got = _from_oracle(
        bound="attention_forward_posteriori",
        **{k: _rational(x) for k, x in args.items()},
        e=head_dim,
        block=block_n,
        keys=n_keys,
        tiles=tiles,
    )
    if got is _NO_ORACLE:
        rel, absolute = _hand_attention_forward_posteriori(*args.values(), head_dim, block_n, n_keys, tiles)
    else:
        rel, absolute = (math.inf, math.inf) if got is None else (_float_up(got[0]), _float_up(got[1]))
    if rel == math.inf:
        raise ValueError(
            f"side condition afe_bL < 1 of attention_forward_posteriori fails for n_keys={n_keys}, "
            f"head_dim={head_dim}, block_n={block_n}, dtype={dtype}, exp2_error={exp2_error}"
        )
    return (rel * prob_abs_v.to(torch.float64) + absolute) * _ROUND_UP


def _afr_checked(
    n_keys: int,
    head_dim: int,
    block_n: int,
    dtype: torch.dtype,
    max_abs_q: float,
    max_abs_k: float,
    max_abs_v: float,
    scale: float | None,
    qk_abs_sum: float | None,
    exp2_error: float,
    storage_rounding: str,
    dot: DotModel,
    per_pair: bool = False,
) -> dict[str, Fraction]:
    """The arguments checked and :func:`_afr_bounds` (``per_pair`` passed on); ``ValueError`` for "fp32" or a
    failed side condition."""
    k, terms, tiles = _afr_prepared(
        n_keys, head_dim, block_n, dtype, max_abs_q, max_abs_k, max_abs_v, scale, qk_abs_sum, exp2_error,
        storage_rounding, dot,
    )  # fmt: skip
    return _afr_from_terms(k, terms, block_n, n_keys, tiles, per_pair)


def _afr_prepared(
    n_keys: int,
    head_dim: int,
    block_n: int,
    dtype: torch.dtype,
    max_abs_q: float,
    max_abs_k: float,
    max_abs_v: float,
    scale: float | None,
    qk_abs_sum: float | None,
    exp2_error: float,
    storage_rounding: str,
    dot: DotModel,
) -> tuple[dict[str, Any], tuple[Fraction, Fraction, Fraction], int]:
    """:func:`_afr_checked`'s checks, then ``(k, (afe_bL, afa_HA, afa_rA), Tt)`` (:func:`_afa_constants`,
    :func:`_afa_terms`); ``ValueError`` for "fp32" or a failed side condition."""
    if _dot_model(dot) == "fp32":
        raise ValueError(
            "dot must be a Tf32x3Dot or a TensorCoreDot: ForwardAccRunning.v has no instance for 'fp32' "
            "(the interpreter's float32 P.V: use attention_forward_posteriori_bound)"
        )
    p, scale = _attention_bound_args(
        n_keys, head_dim, block_n, max_abs_q, max_abs_k, scale, qk_abs_sum, exp2_error, dtype=dtype, max_abs_v=max_abs_v
    )
    args, tiles = _afe_args(n_keys, block_n, dtype, storage_rounding, exp2_error, scale, p, max_abs_v)
    k = _afa_constants(dot, args, head_dim, block_n, tiles)
    terms = _afa_terms(k, block_n, n_keys, tiles)
    if not terms[0] < 1:
        raise ValueError(
            f"side condition afe_bL < 1 of attention_forward_acc_running fails for n_keys={n_keys}, "
            f"head_dim={head_dim}, block_n={block_n}, dtype={dtype}, exp2_error={exp2_error}, dot={dot}"
        )
    return k, terms, tiles


def attention_forward_running_rate(
    n_keys: int,
    head_dim: int,
    *,
    block_n: int,
    dtype: torch.dtype,
    max_abs_q: float,
    max_abs_k: float,
    max_abs_v: float,
    dot: DotModel,
    scale: float | None = None,
    qk_abs_sum: float | None = None,
    exp2_error: float = EXP2_ERROR,
    storage_rounding: str = "nearest",
) -> float:
    """``afr_gb`` of ``Ojas.Attention.Float.ForwardAccRunning`` rounded up to a float: the rate of the
    running error ``run_err(afr_gb, 0, bs)`` that :func:`attention_forward_running_bound` takes (``run_err``
    is increasing in the rate for ``bs >= 0``, so a fold at this float bounds the theorem's). Arguments and
    errors as :func:`attention_forward_running_bound`."""
    c = _afr_checked(
        n_keys,
        head_dim,
        block_n,
        dtype,
        max_abs_q,
        max_abs_k,
        max_abs_v,
        scale,
        qk_abs_sum,
        exp2_error,
        storage_rounding,
        dot,
    )
    return _float_up(c["gb"])


def attention_forward_running_bound(
    prob_abs_v: torch.Tensor,
    run_err: torch.Tensor,
    n_keys: int,
    head_dim: int,
    *,
    block_n: int,
    dtype: torch.dtype,
    max_abs_q: float,
    max_abs_k: float,
    max_abs_v: float,
    dot: DotModel,
    scale: float | None = None,
    qk_abs_sum: float | None = None,
    exp2_error: float = EXP2_ERROR,
    storage_rounding: str = "nearest",
    score_perturbation: torch.Tensor | None = None,
) -> torch.Tensor:
    """Bound on ``|out_ic - exact_ic|`` entry by entry for the Triton flash-attention forward on the tensor
    cores, in the RUNNING form: ``afr_rel * W + afr_C * R + afr_abs`` rounded up (float64, shaped like
    ``prob_abs_v``), with ``W = prob_abs_v >= sum_j P_ij |v_jc|`` and ``R = run_err >= run_err(afr_gb, 0, bs)``
    (the caller's certified upper bounds, e.g.
    :func:`ojas_ref.verification.attention_forward_running.forward_running_bound`): ``P`` the exact softmax of
    ``scale * q.k`` over the row's visible keys, ``bs`` one ``b_t`` per key tile the kernel's loop runs
    for the row's block (its order, fully masked tiles included) with
    ``b_t >= |sum_{visible j in tiles < t} P_j v_jc| + sum_{visible j in tile t} P_j |v_jc|``, and
    ``run_err(g, 0, bs)``: ``e = 0; e = (1 + g) e + g b`` for each ``b`` (the rate ``afr_gb`` rounded up:
    :func:`attention_forward_running_rate`).

    Implements ``Ojas.Attention.Float.ForwardAccRunning.attention_forward_acc_running`` (rocq/Attention/Float/
    ForwardAccRunning.v) at the dot model ``dot``: the H100 instances ``attention_forward_acc_running_tf32x3_op``
    (:class:`Tf32x3Dot` with ``ref="operands"``, :data:`TF32X3_H100`) and ``attention_forward_acc_running_tc_op``
    (:class:`TensorCoreDot`, :data:`TENSOR_CORE_BF16_H100`); other :class:`Tf32x3Dot` models are the general
    theorem at their dot models, as in :func:`attention_forward_posteriori_bound`. The kernel's model, the
    scores' dot ``dot_error_constants(dot, head_dim)``, the P.V ``acc_dot_error_constants(dot, block_n)``
    (``g_rel``, ``g_abs``) on tiles of ``n = block_n`` keys, ``N = n_keys``, ``Tt = ceil(n_keys / block_n)``
    and the constants ``X``, ``Y``, ``P1``, ``CG``, ``CR``, ``CGA``, ``CRA`` are those of
    :func:`attention_forward_posteriori_bound` with a dot model (:func:`_afa_constants`), and in exact
    rationals (:func:`_afr_bounds`)::

        gb      = (1 + g_rel)(1 + u)(1 + ue) - 1 + g_rel ((1 + us)(1 + ue) X - 1),   CB >= (1 + gb)^Tt,
        bL      = afe_bL,   gA = CB ((1 + us)(1 + ue) X X - 1),   Ep = afa_HA N V + afa_rA,
        rR      = Tt CB ((1 + g_rel)((1 + u) ee Ep + ea + ((1 + us) ee + es) n V) + g_abs),
        afr_rel = ((1 + u)((gA + bL)(1 + Y) + X Y (CB - 1)) / (1 - bL) + u (1 + Y) + Y)(1 + us) + us,
        afr_C   = (1 + us)(1 + u) X (1 + Y) / (1 - bL),
        afr_abs = ((1 + u) rR / (1 - bL) + ea)(1 + us) + es,

    each rounded up to a float, ``r W + C R + a`` evaluated in float64 and rounded up. Against
    :func:`attention_forward_posteriori_bound`'s ``afa_rel W`` (whose ``HA - 1 ~ Tt (ue + u + g_rel)``),
    the accumulation's growth is ``afr_C R``, ``R ~ gb sum_t b_t``: the signed prefixes, small on random
    data. Not covered (the .v file's header): the computation of ``W`` and ``bs`` (the caller's: they must
    be upper bounds of the exact quantities), ``tl.sum(p)`` modelled left to right, the unmasked tiles'
    fused ``s * qk_scale - m``, FMA contraction in ``l * alpha + sum``, dropout, additive float masks,
    overflow; the tensor cores' alignment model and ``exp2_error`` are premises.

    With ``score_perturbation`` (a tensor ``Yw`` shaped like ``prob_abs_v``): the PER-PAIR form,
    ``Ojas.Attention.Float.PerPairScoreError.attention_forward_acc_running_pp`` (H100 instances
    ``attention_forward_acc_running_tf32x3_op_pp``, ``attention_forward_acc_running_tc_op_pp``): each score
    within its own ``d_j`` (``|score2_with dotf c q k_j * ln 2 - scale q.k_j| <= d_j``), ``Dsc >= ln sum_j P_j
    e^(d_j)`` per row and ``Yw >= sum_j P_j |v_jc| (e^(d_j + Dsc) - 1)`` per entry (the caller's certified
    upper bounds, e.g. :func:`ojas_ref.verification.attention_forward_running.forward_per_pair_sums`); the
    bound is ``afr_rel(Y := 0) W + afr_C(Y := 0) R + afr_ypp Yw + afr_abs``::

        afr_ypp = ((1 + u)(gA + bL + X (CB - 1)) / (1 - bL) + u + 1)(1 + us),

    ``W``, ``R``, the rate and the other constants as above (the uniform ``Y`` is not in it).

    Raises ``ValueError`` on a bad argument (``dot="fp32"``: the .v file has no float32-products instance),
    tensors of different shapes, negative or non-finite, or when ``afe_bL < 1`` fails;
    ``NotImplementedError`` for a :class:`TensorCoreDot` with ``ref="term"``."""
    per_pair = score_perturbation is not None
    c = _afr_checked(
        n_keys,
        head_dim,
        block_n,
        dtype,
        max_abs_q,
        max_abs_k,
        max_abs_v,
        scale,
        qk_abs_sum,
        exp2_error,
        storage_rounding,
        dot,
        per_pair,
    )
    named = [("prob_abs_v", prob_abs_v), ("run_err", run_err)] + per_pair * [("score_perturbation", score_perturbation)]
    for name, t in named:
        if not isinstance(t, torch.Tensor) or t.is_complex() or not bool(((t >= 0) & torch.isfinite(t)).all()):
            raise ValueError(f"{name} must be a real tensor, finite and >= 0")
        if t.shape != prob_abs_v.shape:
            raise ValueError(f"{name} must have prob_abs_v's shape {tuple(prob_abs_v.shape)}, got {tuple(t.shape)}")
    rel, coef, absolute = (_float_up(c[n]) for n in ("rel", "C", "abs"))
    ypp = _float_up(c["ypp"]) if per_pair else None
    return _afr_rows(prob_abs_v, run_err, score_perturbation, (rel, coef, absolute, ypp))


def _afr_pp_constants(
    n_keys: int,
    head_dim: int,
    *,
    block_n: int,
    dtype: torch.dtype,
    max_abs_q: float,
    max_abs_k: float,
    max_abs_v: float,
    dot: DotModel,
    scale: float | None = None,
    qk_abs_sum: float | None = None,
    exp2_error: float = EXP2_ERROR,
    storage_rounding: str = "nearest",
) -> tuple[float, float, float, float]:
    """``(afr_rel, afr_C, afr_abs, afr_ypp)`` of :func:`attention_forward_running_bound` with
    ``score_perturbation`` (the per-pair form), each rounded up to a float, for :func:`_afr_rows`; arguments and
    errors (but the tensors') as that bound's."""
    c = _afr_checked(
        n_keys,
        head_dim,
        block_n,
        dtype,
        max_abs_q,
        max_abs_k,
        max_abs_v,
        scale,
        qk_abs_sum,
        exp2_error,
        storage_rounding,
        dot,
        True,
    )
    return tuple(_float_up(c[n]) for n in ("rel", "C", "abs", "ypp"))


def _afr_rows(
    prob_abs_v: torch.Tensor,
    run_err: torch.Tensor,
    score_perturbation: torch.Tensor | None,
    consts: tuple[float | torch.Tensor, ...],
) -> torch.Tensor:
    """``(rel W + C R + abs + ypp Yw) ROUND_UP`` in float64, in that order (``ypp Yw`` only with
    ``score_perturbation``): ``consts = (rel, C, abs, ypp)`` floats, or float64 tensors that broadcast (each
    row's group's, the same products and sums entry by entry)."""
    rel, coef, absolute, ypp = consts
    got = rel * prob_abs_v.to(torch.float64) + coef * run_err.to(torch.float64) + absolute
    if score_perturbation is not None:
        got = got + ypp * score_perturbation.to(torch.float64)
    return got * _ROUND_UP


def _attention_bound_args(
    n_keys,
    head_dim,
    block_n,
    max_abs_q,
    max_abs_k,
    scale,
    qk_abs_sum,
    exp2_error,
    *,
    dtype=torch.float32,
    max_abs_v=1.0,
) -> tuple[float, float]:
    """Validate the arguments of the attention bounds; return (qk_abs_sum, scale)."""
    for name, val in (("n_keys", n_keys), ("head_dim", head_dim), ("block_n", block_n)):
        if isinstance(val, bool) or not isinstance(val, int) or val < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {val!r}")
    if dtype not in _STORAGE:
        raise ValueError(f"dtype must be one of torch.bfloat16, torch.float16, torch.float32, got {dtype}")
    if scale is None:
        scale = 1.0 / math.sqrt(head_dim)
    for name, val in (
        ("max_abs_q", max_abs_q),
        ("max_abs_k", max_abs_k),
        ("max_abs_v", max_abs_v),
        ("scale", scale),
        ("exp2_error", exp2_error),
    ):
        if not (isinstance(val, (int, float)) and math.isfinite(val) and val >= 0.0):
            raise ValueError(f"{name} must be a finite number >= 0, got {val!r}")
    if not scale > 0.0:
        raise ValueError(f"scale must be > 0 (the theorem's premise), got {scale}")
    if not max_abs_v > 0.0:
        raise ValueError(
            f"max_abs_v must be > 0 (the theorem's premise; all-zero values give zero outputs), got {max_abs_v}"
        )
    p = head_dim * float(max_abs_q) * float(max_abs_k) if qk_abs_sum is None else qk_abs_sum
    if not (isinstance(p, (int, float)) and math.isfinite(p) and p >= 0.0):
        raise ValueError(f"qk_abs_sum must be a finite number >= 0, got {qk_abs_sum!r}")
    if not head_dim * _FP32_U < 1.0:
        raise ValueError(f"side condition head_dim * 2^-24 < 1 fails: head_dim={head_dim}")
    if _FP32_U * 4.0 * scale * p > _EXP_OVERFLOW:  # 2^(u K) alone is beyond float64: the side condition fails
        raise ValueError(
            f"side condition afe_bL < 1 of attention_forward_error fails: 2^(u K) overflows for "
            f"scale={scale}, qk_abs_sum={p}"
        )
    return float(p), float(scale)


def _hand_attention_lse_error_bound(u, ue, ee, ea, el, ucl, uc, scale, p, ln_n, e, b, n, t, de=None) -> float:
    """Hand copy of ``lse_bound`` of ``Ojas.Attention.Float.SavedLseError`` at the values
    ``attn_lse_q`` computes (fallback without the oracle); ``inf`` when ``bL >= 1``."""
    up = 1.0 + 2.0**-30
    smax, delta, _, _, _, _, bl = _hand_afe_common(u, ue, ee, ea, uc, scale, p, e, b, n, t, de)
    if not bl < 1.0:
        return math.inf
    nl = bl / (1.0 - bl) * up
    a = (smax + 2.0 * (ln_n + nl) + el) * up
    a2 = ((1.0 + u) * a + ea) * up
    return ((u * a2 * (1.0 + ucl) + ea + a2 * ucl + (u * a + ea) + el + nl + delta) * up) * _ROUND_UP


def _grid_down(x: Fraction) -> Fraction:
    """The greatest multiple of ``2^-256`` at or below ``x``."""
    return Fraction((x.numerator * _POW_GRID) // x.denominator, _POW_GRID)


def _exp_down(x: Fraction) -> Fraction:
    """A lower bound of ``e^x`` for ``x >= 0``: the Taylor polynomial of degree 6 (terms >= 0) at
    ``y = x / 2^j <= 2^-8``, squared ``j`` times, every step rounded down to a multiple of ``2^-256``."""
    j = 0
    while x > Fraction(2**j, 256):
        j += 1
    y = x / 2**j
    r = _grid_down(sum(y**i / math.factorial(i) for i in range(7)))
    for _ in range(j):
        r = _grid_down(r * r)
    return r


@lru_cache(maxsize=_MEMO)
def _ln_up(n: int) -> Fraction:
    """A rational ``LN >= ln n`` (``n >= 1``), ``n <= exp(LN)`` checked by :func:`_exp_down`: the float
    ``ln n (1 + 2^-40) + 2^-40`` (the candidate ``attention_lse`` gives the oracle), its margin doubled until
    the check passes; memoized."""
    margin = 2.0**-40
    while True:
        ln = Fraction(math.log(n) * (1.0 + margin) + margin)
        if n <= _exp_down(ln):
            return ln
        margin *= 2


def _lse_args(n_keys: int, log2_error: float, exp2_error: float, scale: float, p: float) -> dict[str, float]:
    """The model's constants and the arguments of ``attn_lse_q`` (in its order), ``ln`` a candidate the
    oracle checks (``n_keys <= exp_dn(ln)``)."""
    if not (isinstance(log2_error, (int, float)) and math.isfinite(log2_error) and log2_error >= 0.0):
        raise ValueError(f"log2_error must be a finite number >= 0, got {log2_error!r}")
    return dict(
        u=_FP32_U,
        ue=float(exp2_error),
        ee=_EXP2_ABS_ERROR,
        ea=_FP32_ETA,
        el=float(log2_error),
        ucl=_LN2_CONST_ERROR,
        uc=_QK_SCALE_ERROR,
        scale=scale,
        p=p,
        ln=math.log(n_keys) * (1.0 + 2.0**-40) + 2.0**-40,
    )


def _lse_bound_q(
    dot: DotModel, args: dict[str, float], head_dim: int, block_n: int, n_keys: int, tiles: int, arg: bool = False
) -> tuple[Fraction, Fraction] | None:
    """``(lse_bound(Dsc := 0), delta)`` exact rationals: ``lse_bound u ea el ucl smax 0 LN NL`` of
    ``Ojas.Attention.Float.SavedLseError`` (``lse_bound`` is ``delta`` plus a part without it) and
    ``delta = score_delta_de`` at the scores' dot ``dot``; ``smax = score_max_de``, ``X = e^(u 2 smax)`` rounded
    up (:func:`_exp_up`), ``P1``, ``CG``, ``CR`` (:func:`_pow_up`), ``NL = bL / (1 - bL) >= -ln(1 - bL)``. For
    "fp32" with the oracle: its ``attn_lse_q`` (the uniform bound, rounded up) minus ``delta``
    (``score_delta_q``, equal); otherwise ``LN`` from :func:`_ln_up`. ``None`` when ``afe_bL < 1`` fails. With
    ``arg``: ``bL = afe_bL_arg`` (PerPairExpArg.v), always through the hand copy."""
    smax, delta = _score_terms_q(dot, head_dim, Fraction(args["p"]), Fraction(args["scale"]))
    if _dot_model(dot) == "fp32" and not arg:
        got = _from_oracle(
            bound="attention_lse",
            **{k: _rational(x) for k, x in args.items()},
            e=head_dim,
            block=block_n,
            keys=n_keys,
            tiles=tiles,
        )
        if got is not _NO_ORACLE:
            return None if got is None else (Fraction(got) - delta, delta)
    return _lse_bound_hand(_dot_model(dot), tuple(args.items()), head_dim, block_n, n_keys, tiles, arg)


@lru_cache(maxsize=_MEMO)
def _lse_bound_hand(
    dot: str | Tf32x3Dot | TensorCoreDot,
    items: tuple[tuple[str, float], ...],
    head_dim: int,
    block_n: int,
    n_keys: int,
    tiles: int,
    arg: bool,
) -> tuple[Fraction, Fraction] | None:
    """:func:`_lse_bound_q`'s hand copy at ``args = dict(items)``, memoized."""
    args = dict(items)
    smax, delta = _score_terms_q(dot, head_dim, Fraction(args["p"]), Fraction(args["scale"]))
    u, ue, ee, ea = (Fraction(args[k]) for k in ("u", "ue", "ee", "ea"))
    X = _exp_up(u * 2 * smax)
    P1 = _pow_up(1 + u, block_n - 1)
    CG = _pow_up((1 + ue) * (1 + u) ** 2, tiles)
    CR = _pow_up((1 + ue + ee) * (1 + u) ** 2, tiles)
    bL = _afe_bL(dict(u=u, ue=ue, ee=ee, ea=ea, X=X, P1=P1, CG=CG, CR=CR), block_n, n_keys, tiles, arg)
    if not bL < 1:
        return None
    return _lse_bound_nl(smax, bL / (1 - bL), n_keys, args), delta


def _lse_bound_nl(smax: Fraction, nl: Fraction, n_keys: int, args: dict[str, float]) -> Fraction:
    """``lse_bound u ea el ucl smax 0 LN NL`` of ``Ojas.Attention.Float.SavedLseError`` without ``delta``
    (``NL = nl``, ``LN`` of :func:`_ln_up`), exact: ``A = smax + 2 (LN + NL) + el``, ``A2 = (1 + u) A + ea``."""
    u, ea, el, ucl = (Fraction(args[k]) for k in ("u", "ea", "el", "ucl"))
    A = smax + 2 * (_ln_up(n_keys) + nl) + el
    A2 = (1 + u) * A + ea
    return u * A2 * (1 + ucl) + ea + A2 * ucl + (u * A + ea) + el + nl


# an upper bound of 1 / ln 2 = log2 e (the float64 nearest, within 2^-52 relative, raised by 2^-50)
_INV_LN2_UP = Fraction(math.log2(math.e)) * (1 + Fraction(1, 2**50))


def _lse_rowmax_shift(
    shift: torch.Tensor,
    base: Fraction,
    dot: DotModel,
    args: dict[str, float],
    head_dim: int,
    row_score_max: torch.Tensor | None,
) -> torch.Tensor:
    """``shift + lse_bound(Dsc := 0)`` rounded up, ``base`` the latter at the a-priori ``smax`` (:func:`_lse_bound_q`).
    With ``row_score_max`` (float64 like ``shift``, each row's certified ``max_j |scale q.k_j|`` over its visible
    keys): the ``_rowmax`` theorems of ``Ojas.Attention.Float.PerPairExpArg``, ``smax`` in ``lse_bound``'s ``A``
    replaced by ``Sm = min(smax, (row_score_max + delta) / ln 2) >= |score2|`` (``lse_bound`` is affine in it)."""
    if row_score_max is None:
        return cb.add_upper(shift, _float_up(base))
    if not isinstance(row_score_max, torch.Tensor) or row_score_max.shape != shift.shape:
        raise ValueError(f"row_score_max must be a tensor shaped like score_shift {tuple(shift.shape)}")
    smax, delta = _score_terms_q(dot, head_dim, Fraction(args["p"]), Fraction(args["scale"]))
    coef = _smax_coef()
    rm = cb._check(row_score_max, "row_score_max")
    sm = torch.clamp(cb.scale_upper(cb.add_upper(rm, _float_up(delta)), _INV_LN2_UP), max=_float_up(smax))
    return cb.add_upper(shift, cb.add_upper(cb.scale_upper(sm, coef), _float_up(base - coef * smax)))


@lru_cache(maxsize=1)
def _smax_coef() -> Fraction:
    """``d lse_bound / d smax = (1 + u) (u (1 + ucl) + ucl) + u`` at :func:`_lse_args`' ``u``, ``ucl``."""
    u, ucl = Fraction(_FP32_U), Fraction(_LN2_CONST_ERROR)
    return (1 + u) * (u * (1 + ucl) + ucl) + u


def _lse_row_constants(
    got: tuple[Fraction, Fraction] | None, dot: DotModel, args: dict[str, float], head_dim: int
) -> tuple[float, float, float, float] | None:
    """``(D, B, S, B2)`` of ``got = (lse_bound(Dsc := 0), delta)`` (:func:`_lse_bound_q`), each rounded up, for
    :func:`_lse_rows`: ``D = delta``, ``B = lse_bound(0)``, ``S = smax``, ``B2 = B - coef smax``
    (:func:`_lse_rowmax_shift`, :func:`_smax_coef`); ``None`` for ``None`` (``afe_bL < 1`` fails)."""
    if got is None:
        return None
    base, delta = got
    smax = _score_terms_q(dot, head_dim, Fraction(args["p"]), Fraction(args["scale"]))[0]
    return tuple(_float_up(x) for x in (delta, base, smax, base - _smax_coef() * smax))


def _lse_rows(
    shift: torch.Tensor,
    consts: list[tuple[float, float, float, float] | None],
    index: torch.Tensor,
    arg: bool,
    row_score_max: torch.Tensor | None,
) -> torch.Tensor:
    """The rows' lse bounds, each at the constants ``consts[index]`` (:func:`_lse_row_constants`; ``inf`` where
    ``None``), elementwise as :func:`_lse_shift_bound` (``shift`` capped at ``D``, plus ``B``; not ``arg``) and
    :func:`_lse_rowmax_shift` (``shift + B``, or with ``row_score_max`` ``shift + coef min((row_score_max + D)
    / ln 2, S) + B2``, ``coef`` of :func:`_smax_coef`), rounded up: ``shift`` float64, ``index`` int64 of its
    shape."""
    bad = torch.tensor([c is None for c in consts], dtype=torch.bool, device=shift.device)[index]
    table = torch.tensor([(0.0,) * 4 if c is None else c for c in consts], dtype=torch.float64, device=shift.device)
    d, b, smax, b2 = table.reshape(-1, 4)[index].movedim(-1, 0)
    if not arg:
        rows = cb.add_upper(torch.minimum(shift, d), b)
    elif row_score_max is None:
        rows = cb.add_upper(shift, b)
    else:
        if not isinstance(row_score_max, torch.Tensor) or row_score_max.shape != shift.shape:
            raise ValueError(f"row_score_max must be a tensor shaped like score_shift {tuple(shift.shape)}")
        rm = cb._check(row_score_max, "row_score_max")
        sm = torch.minimum(cb.scale_upper(cb.add_upper(rm, d), _INV_LN2_UP), smax)
        rows = cb.add_upper(shift, cb.add_upper(cb.scale_upper(sm, _smax_coef()), b2))
    return rows.masked_fill(bad, math.inf)


def _uniform_lse_bound(dot: DotModel, args: dict[str, float], head_dim: int, block_n: int, n_keys: int) -> float | None:
    """The uniform ``lse_bound`` (``delta = score_delta_de``) rounded up: the oracle's ``attn_lse_q`` for
    "fp32", else (or without the oracle) the float64 hand copy; ``None`` when ``afe_bL < 1`` fails."""
    tiles = -(-n_keys // block_n)
    de = _score_dot_error(dot, head_dim, args["p"])
    got = (
        _NO_ORACLE
        if de is not None
        else _from_oracle(
            bound="attention_lse",
            **{k: _rational(x) for k, x in args.items()},
            e=head_dim,
            block=block_n,
            keys=n_keys,
            tiles=tiles,
        )
    )
    if got is _NO_ORACLE:
        value = _hand_attention_lse_error_bound(*args.values(), head_dim, block_n, n_keys, tiles, de)
        return None if value == math.inf else value
    return None if got is None else _float_up(got)


def _check_score_shift(score_shift: float | torch.Tensor) -> None:
    """Raise ``ValueError`` unless ``score_shift`` is a finite number or real tensor, every entry ``>= 0``."""
    if isinstance(score_shift, torch.Tensor):
        ok = not score_shift.is_complex() and bool(((score_shift >= 0) & torch.isfinite(score_shift)).all())
    else:
        ok = isinstance(score_shift, (int, float)) and math.isfinite(score_shift) and score_shift >= 0.0
    if not ok:
        raise ValueError(f"score_shift must be a finite number or real tensor >= 0, got {score_shift!r}")


def _lse_shift_bound(
    score_shift: float | torch.Tensor, dot: DotModel, args: dict[str, float], block_n: int, n_keys: int, head_dim: int
) -> float | torch.Tensor | None:
    """``lse_bound(Dsc := min(score_shift, delta))`` rounded up (:func:`_lse_bound_q`): a float, or float64
    shaped like the tensor ``score_shift``; ``None`` when ``afe_bL < 1`` fails."""
    _check_score_shift(score_shift)
    got = _lse_bound_q(dot, args, head_dim, block_n, n_keys, -(-n_keys // block_n))
    if got is None:
        return None
    base, delta = got
    if not isinstance(score_shift, torch.Tensor):
        return _float_up(base + min(Fraction(score_shift), delta))
    shift = torch.clamp(score_shift.to(torch.float64), max=_float_up(delta))
    return cb.add_upper(shift, _float_up(base))


def attention_lse_error_bound(
    n_keys: int,
    head_dim: int,
    *,
    block_n: int,
    max_abs_q: float,
    max_abs_k: float,
    scale: float | None = None,
    qk_abs_sum: float | None = None,
    exp2_error: float = EXP2_ERROR,
    log2_error: float = LOG2_ERROR,
    dot: DotModel = "fp32",
    score_shift: float | torch.Tensor | None = None,
) -> float | torch.Tensor:
    """Bound on ``|lse - ln sum_j exp(scale q.k_j)|`` (natural log, absolute) for the
    log-sum-exp the Triton flash-attention forward saves per query row (kernels/ojas_kernels/attention_forward.py:
    ``(m + tl.log2(l)) * ln 2`` in float32), against the exact one over the row's visible
    keys (at most ``n_keys``).

    Implements ``Ojas.Attention.Float.SavedLseError.attention_lse_error_masked`` (the
    kernel's loop from its start under any boolean mask) and ``attention_lse_error``
    (fully visible tiles), through ``attn_lse_q`` of ``Ojas.Bounds.Attention``
    (``Ojas.Bounds.Attention.attn_lse_q_sound_masked``, ``attn_lse_q_sound``): the oracle computes
    ``lse_bound`` over exact rationals, ``ln n_keys <= LN`` certified by a lower bound of
    ``exp(LN)``, ``-ln(1 - bL) <= bL / (1 - bL)``. The model and the arguments are those of
    :func:`attention_forward_error_bound` (the value dtype plays no part); ``log2_error``
    is the absolute error of ``tl.log2`` (:data:`LOG2_ERROR`, an assumption).

    ``dot``: the scores' dot as for :func:`attention_forward_error_bound`; a :class:`Tf32x3Dot` is
    ``Ojas.Attention.Float.SavedLseError.attention_lse_error_masked_tf32x3_op`` (the H100's tensor
    cores), ``attention_lse_error_masked_tf32x3`` (aligning to the largest term) or
    ``attention_lse_error_masked_dot`` at the dot model (``tf32x3_seq_dot_model``,
    ``tc_op_dot_model``, ``tc_dot_model``), through the hand copy.

    ``score_shift`` (a number, or a tensor of one per query row): the PER-PAIR bound,
    ``Ojas.Attention.Float.PerPairScoreError.attention_lse_error_masked_tf32x3_op_pp`` (and
    ``attention_lse_error_masked_tf32x3_pp``, ``attention_lse_error_masked_dot_pp`` at the dot models above,
    ``attention_lse_error_dot_pp`` for fully visible tiles; "fp32" at ``blocked_dot_model``): with each pair's
    score error ``|score2_with dotf c q k_j * ln 2 - scale q.k_j| <= d_j`` and ``score_shift >= Dsc >= ln
    sum_j P_j e^(d_j)`` (``P`` the row's exact softmax; the caller's certified upper bounds, e.g.
    :func:`ojas_ref.verification.attention_error.lse_score_error`), the bound is ``lse_bound`` with ``Dsc``
    in place of the uniform ``delta`` and ``smax``, ``X`` still a priori: ``lse_bound(0) + Dsc``, exact
    rationals (:func:`_lse_bound_q`; "fp32" through the oracle's uniform bound minus ``delta``), ``Dsc``
    capped at ``delta`` (the uniform theorem's bound: both hold), rounded up. The bound increases with
    ``Dsc``: a tensor gives a bound per row (float64, its shape), its maximum one for every row.

    Not covered: as for :func:`attention_forward_error_bound` (the dots' order of
    additions for ``dot="fp32"``, FMA contraction, additive masks), and ``log2_error``,
    ``exp2_error`` themselves. Raises ``ValueError`` on a bad argument or a failed side
    condition.
    """
    p, scale = _attention_bound_args(n_keys, head_dim, block_n, max_abs_q, max_abs_k, scale, qk_abs_sum, exp2_error)
    args = _lse_args(n_keys, log2_error, exp2_error, scale, p)
    if score_shift is None:
        value = _uniform_lse_bound(dot, args, head_dim, block_n, n_keys)
    else:
        value = _lse_shift_bound(score_shift, dot, args, block_n, n_keys, head_dim)
    if value is None:
        raise ValueError(
            f"side condition afe_bL < 1 of attention_lse_error fails for n_keys={n_keys}, "
            f"head_dim={head_dim}, block_n={block_n}, exp2_error={exp2_error}"
        )
    return value


def attention_lse_arg_bound(
    n_keys: int,
    head_dim: int,
    *,
    score_shift: torch.Tensor,
    block_n: int,
    max_abs_q: float,
    max_abs_k: float,
    scale: float | None = None,
    qk_abs_sum: float | None = None,
    exp2_error: float = EXP2_ERROR,
    log2_error: float = LOG2_ERROR,
    dot: DotModel = "fp32",
    row_score_max: torch.Tensor | None = None,
) -> torch.Tensor:
    """The saved lse's bound per row with the exp2 argument's rounding charged per pair:
    ``Ojas.Attention.Float.PerPairExpArg.attention_lse_error_masked_tf32x3_op_pp_arg`` (and
    ``attention_lse_error_masked_dot_pp_arg`` at the other dot models), ``lse_bound(Dsc)`` with ``bL =
    afe_bL_arg`` (no ``X`` in the weights' factor). ``score_shift`` (float64, one per row) must be
    ``>= ln sum_j P_j e^(d_j + g_j)``, ``g_j >= u ln 2 (s_i - s_j)`` for every visible ``i`` (``s`` the kernel's
    base-2 scores: :func:`~ojas_ref.verification.attention_forward_running.exp_arg_shift`); it is NOT capped at
    ``delta`` (the theorem has no uniform counterpart). The other arguments as for
    :func:`attention_lse_error_bound`; ``inf`` everywhere when ``afe_bL_arg < 1`` fails; ``ValueError`` as it, or
    for a ``score_shift`` that is not a tensor. ``row_score_max`` (float64 like ``score_shift``): each row's
    certified upper bound of ``max_j |scale q.k_j|`` over its visible keys, for
    ``attention_lse_error_masked_tf32x3_op_pp_arg_rowmax`` (``_dot_pp_arg_rowmax``): the magnitude in
    ``lse_bound`` at the row's own score bound where below the a-priori ``smax`` (:func:`_lse_rowmax_shift`)."""
    if not isinstance(score_shift, torch.Tensor):
        raise ValueError(f"score_shift must be a tensor, got {type(score_shift).__name__}")
    _check_score_shift(score_shift)
    p, scale = _attention_bound_args(n_keys, head_dim, block_n, max_abs_q, max_abs_k, scale, qk_abs_sum, exp2_error)
    args = _lse_args(n_keys, log2_error, exp2_error, scale, p)
    got = _lse_bound_q(dot, args, head_dim, block_n, n_keys, -(-n_keys // block_n), arg=True)
    if got is None:
        return torch.full_like(score_shift, math.inf, dtype=torch.float64)
    return _lse_rowmax_shift(score_shift.to(torch.float64), got[0], dot, args, head_dim, row_score_max)


# |c2 ln 2 - 1| <= uc2 for the backward's float32 constant c2 = float32(1.4426950408889634)
# (the float64 nearest log2 e, rounded to float32): (1 + 2^-53)(1 + 2^-24) - 1 <= 2^-24 + 2^-52.
_LOG2E_CONST_ERROR = 2.0**-24 + 2.0**-52


def _score_terms_q(dot: DotModel, head_dim: int, p: Fraction, scale: Fraction) -> tuple[Fraction, Fraction]:
    """``score_max_de``, ``score_delta_de`` of ``Ojas.Attention.Float.ForwardError`` (the bounds of
    ``score2_with_error``) at the dot's error ``g_rel p + g_abs``, exact rationals; for "fp32" they
    are ``score_max_q``, ``score_delta_q`` of ``Ojas.Bounds.Attention``; memoized."""
    return _score_terms(_dot_model(dot), head_dim, p, scale)


@lru_cache(maxsize=_MEMO)
def _score_terms(
    dot: str | Tf32x3Dot | TensorCoreDot, head_dim: int, p: Fraction, scale: Fraction
) -> tuple[Fraction, Fraction]:
    """:func:`_score_terms_q` at a checked ``dot``."""
    u, ea, uc = Fraction(_FP32_U), Fraction(_FP32_ETA), Fraction(_QK_SCALE_ERROR)
    g_rel, g_abs = dot_error_constants(dot, head_dim)
    de = g_rel * p + g_abs
    smax = 2 * (scale * (1 + uc) * (p + de)) * (1 + u) + ea
    delta = scale * ((p + de) * (u * (1 + uc) + uc) + de) + ea
    return smax, delta


def _backward_weight_terms(
    n_items: int,
    n_tiles: int,
    head_dim: int,
    block: int,
    max_abs_q: float,
    max_abs_k: float,
    max_abs_lse: float,
    lse_error: float,
    scale: float | None,
    qk_abs_sum: float | None,
    exp2_error: float,
    dtype: torch.dtype,
    storage_rounding: str,
    dot: DotModel = "fp32",
) -> dict[str, Any]:
    """The exact-rational constants the backward bounds share: the arguments checked, the
    model's ``u, ea, ue, ee, us, es``, ``scale``, ``X >= 2^(2 (delta + Dl) + u Am + ea)`` (score
    terms from ``score2_error``, or ``score2_with_error`` at ``dot``'s model, ``Dl``, ``Am`` from
    ``lse2_close``; ``X = 1 + perturbation_q(x / 2)``) and ``g`` = gamma of
    ``(block - 1) + (n_tiles - 1)`` (the blocked sum over the tiles)."""
    p, scale = _attention_bound_args(
        max(n_items, 1), head_dim, block, max_abs_q, max_abs_k, scale, qk_abs_sum, exp2_error, dtype=dtype
    )
    for name, val in (("max_abs_lse", max_abs_lse), ("lse_error", lse_error)):
        if not (isinstance(val, (int, float)) and math.isfinite(val) and val >= 0.0):
            raise ValueError(f"{name} must be a finite number >= 0, got {val!r}")
    if n_items < 0 or n_tiles < 1:
        raise ValueError(f"the item count must be >= 0 and the tile count >= 1, got {n_items}, {n_tiles}")
    F_ = Fraction
    u, ea, ue, ee = F_(_FP32_U), F_(_FP32_ETA), F_(float(exp2_error)), F_(_EXP2_ABS_ERROR)
    us, es = (F_(x) for x in _storage(dtype, storage_rounding))
    uc2 = F_(_LOG2E_CONST_ERROR)
    sargs = dict(
        u=_rational(u),
        ea=_rational(ea),
        scale=_rational(scale),
        uc=_rational(_QK_SCALE_ERROR),
        e=head_dim,
        p=_rational(p),
    )
    if _dot_model(dot) == "fp32":
        smax, delta = (_from_oracle(bound=b, **sargs) for b in ("score_max", "score_delta"))
        if smax is _NO_ORACLE or delta is _NO_ORACLE:
            raise RuntimeError("the attention backward bounds need the oracle (make -C extraction): no hand copy")
        smax, delta = F_(smax), F_(delta)
    else:
        smax, delta = _score_terms_q(dot, head_dim, F_(p), F_(scale))
    lb, lmax = F_(float(lse_error)), F_(float(max_abs_lse)) + F_(float(lse_error))
    dl = lb + lmax * (u * (1 + uc2) + uc2) + ea
    am = smax + 2 * ((1 + uc2) * lmax) * (1 + u) + ea
    x = 2 * (delta + dl) + u * am + ea
    pert = _from_oracle(bound="perturbation", delta=_rational(x / 2))
    k = (block - 1) + (n_tiles - 1)
    g = _from_oracle(bound="gamma", u=_rational(u), n=k) if k * _FP32_U < 1.0 else None
    if _NO_ORACLE in (pert, g):
        raise RuntimeError("the attention backward bounds need the oracle (make -C extraction): no hand copy")
    if pert is None or float(x) > _EXP_OVERFLOW:
        raise ValueError(f"the exp2 argument error {float(x)} is too large")
    if g is None:
        raise ValueError(f"side condition fails: ((block - 1) + (tiles - 1)) u >= 1 for k={k}")
    return dict(u=u, ea=ea, ue=ue, ee=ee, us=us, es=es, scale=F_(scale), X=1 + F_(pert), g=F_(g))


def attention_dv_error_bound(
    prob_abs_do: torch.Tensor,
    n_queries: int,
    n_query_tiles: int,
    head_dim: int,
    *,
    block_m: int,
    dtype: torch.dtype,
    max_abs_q: float,
    max_abs_k: float,
    max_abs_do: float,
    max_abs_lse: float,
    lse_error: float,
    scale: float | None = None,
    qk_abs_sum: float | None = None,
    exp2_error: float = EXP2_ERROR,
    storage_rounding: str = "nearest",
    dot: DotModel = "fp32",
) -> torch.Tensor:
    """A-posteriori bounds on ``|dV_jc - sum_i P_ij dO_ic|`` for the dK/dV kernel of the
    Triton flash attention (kernels/ojas_kernels/attention.py), one per entry of ``prob_abs_do``.

    Implements ``Ojas.Attention.Float.DvError.dv_error`` (the kernel's dV
    coordinate: base-2 scores ``rnd(dot(k, q) * qk_scale)``, ``p = exp2(rnd(s2 - lse2))``
    (0 where masked), ``p`` rounded to ``dtype`` before the products, the query tiles
    summed blocked in fp32, dV stored in ``dtype``) with its ``Dl`` and ``Am`` from
    ``Ojas.Attention.Float.DvError.lse2_close`` (the backward's
    ``lse2 = rnd(lse * log2 e)`` from a forward lse within ``lse_error`` of the exact
    one, e.g. :func:`attention_lse_error_bound`) and its score terms from
    ``Ojas.Attention.Float.ForwardError.score2_error``::

        bound = (1 + us) (((1 + g) F - 1) S + (1 + g) n c) + us S + es,

    ``S = prob_abs_do`` = ``sum_i P_ij |dO_ic|`` over the visible queries of key ``j``
    (every query head of its group; computed by the caller from exact probabilities, in
    float64: enlarged here by ``4 (n + 1) 2^-53``), ``n = n_queries``, ``g`` = gamma of
    ``(block_m - 1) + (n_query_tiles - 1)``, ``F = (1+u)(1+us)(1+ue) X``, ``c`` the absolute
    term. The scalar factors come from the oracle (``gamma``; ``score_max_q``,
    ``score_delta_q`` of ``Ojas.Bounds.Attention``; ``X = 1 + perturbation_q(x / 2) >= 2^x``);
    composing them is exact rational arithmetic here (no single Coq theorem states the
    composed number), the tensor part float64 rounded up by 2^-40.

    ``dot``: the scores' dot model (default "fp32"; :class:`Tf32x3Dot`, :class:`TensorCoreDot`): a
    model is ``Ojas.Attention.Float.DvError.dv_error_dot`` with the score terms of
    ``Ojas.Attention.Float.ForwardError.score2_with_error`` at its dot model
    (``tf32x3_tc_op_dot_model``, ``tf32x3_tc_dot_model``, ``tf32x3_seq_dot_model``,
    ``tc_op_dot_model``, ``tc_dot_model``), computed exactly here (``score_max_de``,
    ``score_delta_de``).

    With a model (not "fp32") the accumulation into dv is the model's too
    (``Ojas.Attention.Float.DvError.dv_error_acc`` at :func:`acc_dot_error_constants` of
    ``block_m`` rows, ``t = n_query_tiles`` query tiles of ``block_m`` rows each)::

        bound = (1 + us) ((G H - 1) S + G cw (t block_m) D + t G g_abs) + us S + es,

    ``G = (1 + g_rel)^t``, ``H = (1 + us)(1 + ue) X``, ``cw = (1 + us) ee + es``, ``D = max_abs_do``;
    a :class:`TensorCoreDot` with ``ref="term"`` raises ``NotImplementedError``.

    Not covered: FMA contraction, ``exp2_error`` (an assumption); with "fp32" the MMA order and
    its accumulation into dv (modelled as float32 products summed blocked); dK and dQ:
    :func:`attention_dk_error_bound` (their accumulation is the per-product model).
    """
    if not (isinstance(max_abs_do, (int, float)) and math.isfinite(max_abs_do) and max_abs_do >= 0.0):
        raise ValueError(f"max_abs_do must be a finite number >= 0, got {max_abs_do!r}")
    c = _backward_weight_terms(
        n_queries,
        n_query_tiles,
        head_dim,
        block_m,
        max_abs_q,
        max_abs_k,
        max_abs_lse,
        lse_error,
        scale,
        qk_abs_sum,
        exp2_error,
        dtype,
        storage_rounding,
        dot,
    )
    u, ea, ue, ee, us, es, g = (c[name] for name in ("u", "ea", "ue", "ee", "us", "es", "g"))
    if _dot_model(dot) == "fp32":
        Ff = (1 + u) * (1 + us) * ((1 + ue) * c["X"])
        cc = (1 + u) * ((1 + us) * ee + es) * Fraction(float(max_abs_do)) + ea
        a = _float_up((1 + us) * ((1 + g) * Ff - 1) + us)  # coefficient of S
        b = _float_up((1 + us) * (1 + g) * n_queries * cc + es)  # constant
    else:  # dv_error_acc: query tiles of block_m rows accumulated by the model's tl.dot
        g_rel, g_abs = acc_dot_error_constants(dot, block_m)
        t = n_query_tiles
        G = (1 + g_rel) ** t
        H = (1 + us) * ((1 + ue) * c["X"])
        cw = (1 + us) * ee + es
        a = _float_up((1 + us) * (G * H - 1) + us)
        b = _float_up((1 + us) * (G * cw * (t * block_m) * Fraction(float(max_abs_do)) + t * G * g_abs) + es)
    return (a * _enlarged(prob_abs_do, n_queries) + b) * _ROUND_UP


def attention_delta_error_bound(o_do_abs_sum: torch.Tensor, value_dim: int) -> torch.Tensor:
    """Bounds on ``|delta_i - dO_i . o_i|`` for the dQ kernel's ``delta = tl.sum(o * dO)``
    (float32 products, any reduction order), against the real dot of the STORED output ``o``
    and ``dO``; one per entry of ``o_do_abs_sum`` = ``sum_c |o_ic dO_ic|`` (float64, enlarged
    here for its own rounding).

    Implements ``Ojas.Attention.Float.DkDqError.delta_close`` with the tree depth
    ``value_dim - 1`` (every binary reduction tree of ``value_dim`` terms is that deep at
    most)::

        bound = gamma(Ev - 1) ((1 + u) S + Ev ea) + u S + Ev ea.

    Against the exact ``dO_i . O_i``, add ``e * sum_c |dO_ic|`` for an output within ``e`` of
    the exact one per coordinate (``Ojas.Attention.Float.DkDqError.dot_R_perturb``; ``e``
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
    sums: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    n_items: int,
    n_tiles: int,
    head_dim: int,
    value_dim: int,
    *,
    block: int,
    max_abs_w: float,
    dtype: torch.dtype,
    max_abs_q: float,
    max_abs_k: float,
    dp_abs_sum: float,
    max_abs_y: float,
    max_delta_error: float,
    max_abs_lse: float,
    lse_error: float,
    scale: float | None = None,
    qk_abs_sum: float | None = None,
    exp2_error: float = EXP2_ERROR,
    storage_rounding: str = "nearest",
    dot: DotModel = "fp32",
) -> torch.Tensor:
    """``grad_bound`` of ``Ojas.Attention.Float.DkDqError`` (``dk_error``, ``dq_error``; with a
    model ``dot`` (not "fp32"), ``dk_error_acc``, ``dq_error_acc``: the scores' dot over ``head_dim``
    and ``dp``'s over ``value_dim`` that model's :func:`dot_error_constants`, the tiles of ``block``
    items accumulated by its ``tl.dot`` (:func:`acc_dot_error_constants`), ``eA = G (gacc_A S1 +
    gacc_B SR + n gacc_c) + (G - 1) S1 + t G g_abs``, ``G = (1 + g_rel)^t``, ``n = t block``) over
    tensors ``(S1, S2, S3)``: the bound is linear in them, its four coefficients exact rationals."""
    for name, val in (
        ("max_abs_w", max_abs_w),
        ("dp_abs_sum", dp_abs_sum),
        ("max_abs_y", max_abs_y),
        ("max_delta_error", max_delta_error),
    ):
        if not (isinstance(val, (int, float)) and math.isfinite(val) and val >= 0.0):
            raise ValueError(f"{name} must be a finite number >= 0, got {val!r}")
    if isinstance(value_dim, bool) or not isinstance(value_dim, int) or value_dim < 1:
        raise ValueError(f"value_dim must be an integer >= 1, got {value_dim!r}")
    c = _backward_weight_terms(
        n_items,
        n_tiles,
        head_dim,
        block,
        max_abs_q,
        max_abs_k,
        max_abs_lse,
        lse_error,
        scale,
        qk_abs_sum,
        exp2_error,
        dtype,
        storage_rounding,
        dot,
    )
    u, ea, ue, ee, us, es, g, scale = (c[k] for k in ("u", "ea", "ue", "ee", "us", "es", "g", "scale"))
    F_ = Fraction
    if _dot_model(dot) == "fp32":
        ge, ge1 = (_from_oracle(bound="gamma", u=_rational(u), n=n) for n in (value_dim, value_dim - 1))
        if _NO_ORACLE in (ge, ge1):
            raise RuntimeError("the attention backward bounds need the oracle (make -C extraction): no hand copy")
        ge, ge1 = F_(ge), F_(ge1)
        ep = ge * F_(float(dp_abs_sum)) + (1 + ge1) * value_dim * ea  # dot_err Ev Pd
    else:
        gp_rel, gp_abs = dot_error_constants(dot, value_dim)
        ep = gp_rel * F_(float(dp_abs_sum)) + gp_abs  # dp's dot model: gp_rel Pd + gp_abs
    E = (1 + ue) * c["X"]
    crm = (1 + u) * (ep + F_(float(max_delta_error))) + ea
    K0 = (1 + u) * ee * ((1 + u) * F_(float(max_abs_y)) + crm) + ea
    ucs = F_(_SCALE_CONST_ERROR)
    k = (1 + us) * scale * (1 + u) * (1 + ucs)  # grad_bound's factor of eA
    rest = (1 + us) * scale * (u * (1 + ucs) + ucs) + us * scale  # grad_bound's other factor of S1
    if _dot_model(dot) == "fp32":
        ga = (1 + u) * (1 + us) * ((1 + u) * (1 + u) * E - 1) + (1 + u) * us + u  # grad_A
        gb = (1 + u) * (1 + us) * ((1 + u) * E)  # grad_B
        gc = ((1 + u) * (1 + us) * K0 + (1 + u) * es) * F_(float(max_abs_w)) + ea  # grad_c
        G, G1, n_terms, tail = 1 + g, g, n_items, Fraction(0)
    else:  # dk_error_acc / dq_error_acc: tiles of `block` items accumulated by the model's tl.dot
        g_rel, g_abs = acc_dot_error_constants(dot, block)
        G = (1 + g_rel) ** n_tiles
        ga = (1 + us) * ((1 + u) * (1 + u) * E - 1) + us  # gacc_A
        gb = (1 + us) * ((1 + u) * E)  # gacc_B
        gc = ((1 + us) * K0 + es) * F_(float(max_abs_w))  # gacc_c
        G1, n_terms, tail = G - 1, n_tiles * block, n_tiles * G * g_abs
    a1 = _float_up(k * (G * ga + G1) + rest)
    a2 = _float_up(k * G * gb * ((1 + u) * ep + ea))
    a3 = _float_up(k * G * gb * (1 + u))
    b = _float_up(k * (G * n_terms * gc + tail) + (1 + us) * ea + es)
    s1, s2, s3 = (_enlarged(t, n_items) for t in sums)
    return (a1 * s1 + a2 * s2 + a3 * s3 + b) * _ROUND_UP


def attention_dk_error_bound(
    sums: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    n_queries: int,
    n_query_tiles: int,
    head_dim: int,
    value_dim: int,
    *,
    block_m: int,
    max_abs_q: float,
    **kwargs: Any,
) -> torch.Tensor:
    """A-posteriori bounds on ``|dK_je - scale sum_i P_ij (dP_ij - D_i) q_ie|`` for the dK/dV
    kernel of the Triton flash attention (kernels/ojas_kernels/attention_backward.py, ``_dkdv_tile``), one per
    entry of the sums ``(S1, S2, S3)`` (each ``[.., Sk, E]``, over the visible queries of
    key ``j``, every query head of its group, from exact probabilities, float64):
    ``S1 = sum_i P_ij |dP_ij - D_i| |q_ie|``, ``S2 = sum_i P_ij |q_ie|``,
    ``S3 = sum_i P_ij eD_i |q_ie|``, with ``dP_ij = dO_i . v_j`` and ``D_i`` the real number
    the kernel's ``delta_i`` is within ``eD_i <= max_delta_error`` of: ``dO_i . O_i`` of the
    exact output for the exact gradient (``eD`` then includes the stored output's error:
    :func:`attention_delta_error_bound`), or of the stored output.

    Implements ``Ojas.Attention.Float.DkDqError.dk_error`` (the kernel's schedule:
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

    ``dot``: the dots' model (default "fp32"; :class:`Tf32x3Dot`, :class:`TensorCoreDot`): a model
    gives ``Ojas.Attention.Float.DkDqError.dk_error_acc`` with the scores' and ``dp``'s dots that
    model (``tf32x3_tc_op_dot_model`` for float32 on an H100, ... as for
    :func:`attention_dv_error_bound`; the score terms from ``score2_with_error``) and the query
    tiles of ``block_m`` rows accumulated by its ``tl.dot`` (:func:`acc_dot_error_constants`;
    on an H100 ``dk_error_tf32x3_op``, ``dk_error_tc_op``); a :class:`TensorCoreDot` with
    ``ref="term"`` raises ``NotImplementedError``.

    Not covered: FMA contraction, ``exp2_error`` (an assumption); with "fp32" the MMA order and
    its accumulation into dk (modelled as float32 products summed blocked)."""
    return _attention_grad_error_bound(
        sums,
        n_queries,
        n_query_tiles,
        head_dim,
        value_dim,
        block=block_m,
        max_abs_w=max_abs_q,
        max_abs_q=max_abs_q,
        **kwargs,
    )


def attention_dq_error_bound(
    sums: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    n_keys: int,
    n_key_tiles: int,
    head_dim: int,
    value_dim: int,
    *,
    block_n: int,
    max_abs_k: float,
    **kwargs: Any,
) -> torch.Tensor:
    """A-posteriori bounds on ``|dQ_ie - scale sum_j P_ij (dP_ij - D_i) k_je|`` for the dQ
    kernel of the Triton flash attention (kernels/ojas_kernels/attention_backward.py, ``_dq_tile``), one per entry
    of the sums ``(S1, S2, S3)`` (each ``[.., Sq, E]``, over the visible keys of query ``i``):
    ``S1 = sum_j P_ij |dP_ij - D_i| |k_je|``, ``S2 = sum_j P_ij |k_je|``, ``S3 = eD_i S2``
    (``D_i``, ``eD_i`` as in :func:`attention_dk_error_bound`).

    Implements ``Ojas.Attention.Float.DkDqError.dq_error`` (the kernel's schedule as for
    dK, over the key tiles of ``block_n`` keys, ``dp = dot(dO, v)``, products with ``k``);
    the value is ``grad_bound`` as in :func:`attention_dk_error_bound` with ``W = max_abs_k``,
    ``n = n_keys``, ``t = n_key_tiles``; the other keyword arguments are its. Not covered: as
    for :func:`attention_dk_error_bound`."""
    return _attention_grad_error_bound(
        sums,
        n_keys,
        n_key_tiles,
        head_dim,
        value_dim,
        block=block_n,
        max_abs_w=max_abs_k,
        max_abs_k=max_abs_k,
        **kwargs,
    )


def attention_grad_chain(
    n_keys: int,
    head_dim: int,
    value_dim: int,
    *,
    block_n: int,
    dtype: torch.dtype,
    max_abs_q: float,
    max_abs_k: float,
    max_abs_v: float,
    max_abs_lse: float,
    dp_abs_sum: float,
    max_abs_y: float,
    max_abs_w: float,
    n_items: int,
    block: int,
    n_tiles: int,
    scale: float | None = None,
    qk_abs_sum: float | None = None,
    exp2_error: float = EXP2_ERROR,
    log2_error: float = LOG2_ERROR,
    storage_rounding: str = "nearest",
) -> dict[str, Fraction]:
    """The coefficients of the composed bound of attention's backward chain dO -> Delta -> dS -> dQ / dK,
    from ONE extracted function: ``attn_grad_chain_q`` of ``Ojas.Bounds.AttentionChain`` (the oracle's
    ``attention_grad_chain``), which computes the forward's saved-lse bound and a-posteriori output
    constants itself (``attn_lse_q``, ``attn_fwd_post_q``), exact rationals, each coefficient rounded up.

    Returns ``{"c1", "c2", "c3", "c0", "cD", "d0", "d1", "r", "a"}`` (all >= 0, checked):
    ``Ojas.Bounds.AttentionChain.attn_dq_chain_q_sound`` (one query row of the dQ kernel) and
    ``attn_dk_chain_q_sound`` (one key of the dK kernel, its rows each with its own forward) state

        |kernel - exact| <= c1 S1 + c2 S2 + c3 S3 + c0 + cD eDm,
        eD_i = d0 + d1 sum_c |o_ic dO_ic| + sum_c (r W_ic + a) |dO_ic|,

    ``S1 = sum P |dP - D| |w|``, ``S2 = sum P |w|``, ``S3 = sum P eD |w|`` over the visible items
    (dQ: keys, ``w = k_je``, ``S3 = eD_i S2``, ``eDm = eD_i``; dK: query rows of every head of the
    group, ``w = q_ie``, ``eDm >= max eD_i``), ``o`` the stored output, ``W_ic = sum_j P_ij |v_jc|``,
    ``D_i = dO_i . O_i`` of the EXACT output, the exact lse (:func:`attention_grad_chain_bound` evaluates it).
    The premises are about the inputs, the model and the device only (``tl.log2`` within
    ``log2_error`` on ``[1/2, 2 n_keys]``, the lse's bound checked <= 1): no premise on the lse's or
    delta's error.

    The forward's arguments are :func:`attention_lse_error_bound`'s (``n_keys``, ``head_dim``,
    ``block_n``, ``max_abs_q``, ``max_abs_k``, ``max_abs_v``, ``qk_abs_sum``, ``scale``); the backward's:
    ``max_abs_lse >= |LSE|``, ``dp_abs_sum >= sum_c |dO_ic v_jc|``, ``max_abs_y >= |dP_ij - D_i|`` over
    the visible pairs, ``max_abs_w >= |w|``, and its tiling: ``n_items`` items in ``n_tiles`` tiles of
    at most ``block``.  The dots are the blocked float32 dot (``dot="fp32"``: the interpreter's); the
    tensor-core and 3xTF32 models have no composed theorem (:func:`attention_dq_error_bound` with
    their premises). Raises ``ValueError`` on a bad argument or a failed check, ``RuntimeError``
    without the oracle (no hand copy)."""
    p, scale = _attention_bound_args(
        n_keys, head_dim, block_n, max_abs_q, max_abs_k, scale, qk_abs_sum, exp2_error, dtype=dtype, max_abs_v=max_abs_v
    )
    for name, val in (
        ("max_abs_lse", max_abs_lse),
        ("dp_abs_sum", dp_abs_sum),
        ("max_abs_y", max_abs_y),
        ("max_abs_w", max_abs_w),
        ("log2_error", log2_error),
    ):
        if not (isinstance(val, (int, float)) and math.isfinite(val) and val >= 0.0):
            raise ValueError(f"{name} must be a finite number >= 0, got {val!r}")
    for name, val in (("value_dim", value_dim), ("block", block), ("n_tiles", n_tiles), ("n_items", n_items)):
        if isinstance(val, bool) or not isinstance(val, int) or val < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {val!r}")
    query, tiles = _afe_args(n_keys, block_n, dtype, storage_rounding, exp2_error, scale, p, max_abs_v)
    query.update(
        el=float(log2_error),
        ucl=_LN2_CONST_ERROR,
        ln=math.log(n_keys) * (1.0 + 2.0**-40) + 2.0**-40,  # a candidate the oracle checks: n <= exp_dn(ln)
        uc2=_LOG2E_CONST_ERROR,
        ucs=_SCALE_CONST_ERROR,
        lse_max=float(max_abs_lse),
        dp_abs_sum=float(dp_abs_sum),
        y_max=float(max_abs_y),
        w=float(max_abs_w),
    )
    got = _from_oracle(
        bound="attention_grad_chain",
        **{k: _rational(x) for k, x in query.items()},
        e=head_dim,
        block=block_n,
        keys=n_keys,
        tiles=tiles,
        value_dim=value_dim,
        grad_depth=(block - 1) + (n_tiles - 1),
        items=n_items,
    )
    if got is _NO_ORACLE:
        raise RuntimeError("attention_grad_chain needs the oracle (make -C extraction): no hand copy")
    if got is None:
        raise ValueError(
            f"a check or side condition of attn_grad_chain_q fails (n_keys={n_keys}, head_dim={head_dim}, "
            f"value_dim={value_dim}, block_n={block_n}, block={block}, n_tiles={n_tiles}, max_abs_lse={max_abs_lse}, "
            f"dtype={dtype}): e.g. the lse's bound above 1, (block - 1 + n_tiles - 1) u >= 1, or 2^x overflowing"
        )
    coefs = dict(zip(("c1", "c2", "c3", "c0", "cD", "d0", "d1", "r", "a"), (Fraction(x) for x in got)))
    negative = [k for k, c in coefs.items() if c < 0]
    if negative:  # the evaluation at upper bounds of the sums needs them >= 0
        raise ValueError(f"attn_grad_chain_q answered negative coefficients {negative}: {coefs}")
    return coefs


def attention_grad_chain_bound(
    coefs: dict[str, Fraction],
    sums: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    max_delta_error: torch.Tensor | float,
    n_items: int,
) -> torch.Tensor:
    """``c1 S1 + c2 S2 + c3 S3 + c0 + cD eDm`` of :func:`attention_grad_chain` over upper bounds of the
    sums (float64, enlarged by ``4 (n + 1) 2^-53`` for their own rounding, the coefficients rounded up,
    the result rounded up by 2^-40): sound since every coefficient is >= 0. ``max_delta_error`` is
    ``eDm``: a tensor broadcasting against the sums (dQ: each row's own ``eD_i``) or a number (dK)."""
    c1, c2, c3, c0, cd = (_float_up(coefs[k]) for k in ("c1", "c2", "c3", "c0", "cD"))
    s1, s2, s3 = (_enlarged(t, n_items) for t in sums)
    e = max_delta_error.to(torch.float64) if isinstance(max_delta_error, torch.Tensor) else float(max_delta_error)
    return (c1 * s1 + c2 * s2 + c3 * s3 + c0 + cd * e) * _ROUND_UP
