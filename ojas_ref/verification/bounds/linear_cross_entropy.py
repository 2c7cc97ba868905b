"""Error bounds of the linear cross-entropy's forward: the PyTorch reference's per-token loss and
lse and their reductions (``Ojas.LinearCrossEntropy.LossError``, rounding model of
``rocq/FloatModel/NoUnderflow.v``), and the Triton kernel's (kernels/ojas_kernels/linear_cross_entropy.py)
streamed and two-level lse, loss, logits and softcap (``rocq/LinearCrossEntropy/Float/*.v``,
mixed-precision model), with the premises about the kernel's ``tl.exp``, ``tl.log``, tanh and
division (``LINEAR_CROSS_ENTROPY_*_ERROR``). The gradients: :mod:`.linear_cross_entropy_grad`."""

from __future__ import annotations

import math
from fractions import Fraction

import torch

from ojas_ref.verification.bounds.common import (
    _EXP2_ABS_ERROR,
    _FP32_ETA,
    _FP32_U,
    _NO_ORACLE,
    _ROUND_UP,
    _STORAGE,
    _check_roundoff,
    _exp_up_small,
    _float_up,
    _from_oracle,
    _rational,
)
from ojas_ref.verification.bounds.online_softmax import _neg_ln_one_minus, _stream_beta
from ojas_ref.verification.bounds.sums import _nat_err, chunked_sum_error_factor, dot_product_error_bound

__all__ = [
    "LINEAR_CROSS_ENTROPY_DIV_ERROR",
    "LINEAR_CROSS_ENTROPY_EXP_ERROR",
    "LINEAR_CROSS_ENTROPY_LOG_ERROR",
    "LINEAR_CROSS_ENTROPY_TANH_ERROR",
    "linear_cross_entropy_logit_error_bound",
    "linear_cross_entropy_loss_error_bound",
    "linear_cross_entropy_loss_posteriori_bound",
    "linear_cross_entropy_lse_error_bound",
    "linear_cross_entropy_merge_lse_error_bound",
    "linear_cross_entropy_reduction_error_bound",
    "linear_cross_entropy_softcap_chain_error_bound",
    "linear_cross_entropy_softcap_logit_error_bound",
    "linear_cross_entropy_softcap_loss_posteriori_bound",
    "linear_cross_entropy_token_error_bound",
]


# Relative error of the kernel's tl.exp (float32) for arguments x <= 0, plus the absolute
# _EXP2_ABS_ERROR below the normal range: an assumption, not a theorem (the Section
# hypothesis ex_err of rocq/LinearCrossEntropy/Float/LseLossError.v). In the CPU interpreter
# tl.exp is numpy's float32 exp (within a few ulp); on NVIDIA GPUs Triton lowers it to
# ex2.approx.f32 of rnd(x * log2 e), whose relative error grows with |x|: about
# 2^-22 + |x| log2(e) 2^-24 ln 2 <= 5.6e-6 on [-88, 0]. 2^-17 = 7.6e-6 covers both (to be
# measured on the device: benchmarks/bench_linear_cross_entropy_error.py).
LINEAR_CROSS_ENTROPY_EXP_ERROR: float = 2.0**-17
# Absolute error of the kernel's tl.log on the row sum l in [1, V] (lg_err): an assumption,
# which the theorems take for float32 x in [1/(1+b), (1+b) e^LN] (b the row sum's relative
# error, so within [1/2, 2 e^LN] when b <= 1); a float32 result below 16 has an ulp of 2^-20
# at most; 2^-18 as margin.
LINEAR_CROSS_ENTROPY_LOG_ERROR: float = 2.0**-18
# Absolute error of the kernel's computed tanh(r / c) in _softcap (1 - 2 / (tl.exp(min(2r / c,
# 80)) + 1), float32) for every float32 raw logit r (th_err of
# rocq/LinearCrossEntropy/Float/SoftcapError.v, with ut = 0): an assumption, not a theorem. The
# interpreter's numpy ops round to nearest; on NVIDIA GPUs tl.exp is ex2.approx.f32 and the
# division div.full.f32 (2 ulp), about 2^-21 + 2^-23 in all. 2^-20 as margin (measured by
# linear_cross_entropy_error.measured_tanh_error: tests/verification/test_linear_cross_entropy_error_bound.py).
LINEAR_CROSS_ENTROPY_TANH_ERROR: float = 2.0**-20
# Relative error of the kernel's float32 division z / c in _cap_chain (dv_err, with 2^-126
# absolute): an assumption. IEEE in the interpreter (2^-24); div.full.f32 on NVIDIA GPUs
# (2 ulp, 2^-22); 2^-21 as margin.
LINEAR_CROSS_ENTROPY_DIV_ERROR: float = 2.0**-21


def _add_err(u: float, a, ea, b, eb):
    """``add_err`` of ``Ojas.LinearCrossEntropy.LossError``: fl(a' +- b') against a +- b."""
    return ea + eb + u * (abs(a) + abs(b) + ea + eb)


def _mul_err(u: float, a, ea, b, eb):
    """``mul_err``: fl(a' * b') against a * b."""
    return abs(a) * eb + abs(b) * ea + ea * eb + u * ((abs(a) + ea) * (abs(b) + eb))


def _div_err(u: float, a, ea, b: float, eb: float):
    """``div_err``: fl(a' / b') against a / b, for eb < |b|."""
    return (ea * abs(b) + abs(a) * eb) / (abs(b) * (abs(b) - eb)) + u * ((abs(a) + ea) / (abs(b) - eb))


def linear_cross_entropy_token_error_bound(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    target: torch.Tensor,
    *,
    label_smoothing: float,
    z_loss: float,
    unit_roundoff: float,
    exp_error: float,
    log_error: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token bounds (loss, lse), each [N], on |computed - exact| for the chunked
    linear cross-entropy forward without softcap, tokens ``x`` [N, D] with targets in
    ``[0, V)`` (kept tokens), any chunk sizes.

    Implements ``Ojas.LinearCrossEntropy.LossError.token_forward_error_bound``
    (rocq/LinearCrossEntropy/LossError.v) with ``dz`` from
    ``Ojas.LinearCrossEntropy.LossError.raw_logit_error_bound``: in the rounding model
    (``u``, ``exp_error`` = ue relative, ``log_error`` = ul absolute on
    ``[1/2, Lmax]``, no underflow; the theorem takes ``beta_V <= 1/2`` and
    ``(1 + beta_V) V <= Lmax``, which put the computed row sum in that range),
    ``token_forward fl_ops`` is within ``lse_err`` (lse) and
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
    not proved here. The scalar factors come from the oracle (``Ojas.Bounds.LinearCrossEntropy``):
    ``gamma_D`` (:func:`dot_product_error_bound`), ``beta_V`` (``stream_beta_q``),
    ``g`` (``chunked_sum_factor_q``, ``sum_factor_q_ge``), ``nat_err V``
    (``nat_err_q``, ``nat_err_q_ge``) and ``-ln(1 - beta_V)`` (a float candidate
    certified by ``neg_ln_check``, ``neg_ln_check_correct``); the composition over the
    tokens stays a float64 evaluation here. Raises ``ValueError`` unless ``D u < 1``,
    ``beta_V <= 1/2`` and ``((1+u)^V - 1) V < V``. The third tensor is an upper bound of
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
    if not (beta <= 0.5 and nat_err < V):
        raise ValueError(f"side conditions of token_forward_error_bound fail: beta={beta}, V={V}, u={u}")
    slack = 4 * (D + V + 4) * 2.0**-53
    absb = bias.to(f64).abs() if bias is not None else torch.zeros(V, dtype=f64)
    prod = x.abs() @ weight.abs().T  # sum_i |x_i w_vi|, [N, V]
    z = x @ weight.T + (bias.to(f64) if bias is not None else 0.0)  # exact logits, float64
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


def linear_cross_entropy_reduction_error_bound(
    token_bounds: torch.Tensor,
    loss_magnitudes: torch.Tensor,
    n_tokens: int,
    reduction: str,
    unit_roundoff: float,
) -> float:
    """Bound on |computed - exact| of the "sum" or "mean" of per-token losses (0 at the
    ignored tokens), from the kept tokens' error bounds B_i and upper bounds |loss_i|.

    "sum": sum_i B_i + g (sum_i |loss_i| + sum_i B_i), g = ``chunked_sum_error_factor``
    (n_tokens, u): ``Ojas.LinearCrossEntropy.LossError.chunked_sum_error_bound`` for the sum
    over token chunks, applied to losses known within B_i. "mean": that, then the
    rounded division by the kept count K (computed as a sum of ones and zeros, within
    g K): ``div_err`` of ``Ojas.LinearCrossEntropy.LossError`` (``rnd_div_err``). This
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


def _frac_pow(x: Fraction, n: int) -> Fraction:
    return x**n


def _logit_terms(vocab_size, hidden_dim, dtype, max_abs_input, max_abs_weight, dot_abs_sum, logits_in_dtype):
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
    ``Ojas.LinearCrossEntropy.Float.SoftcapError.sc_logit_error`` from the raw logits' ``delta``
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


def _delta_zmax(
    vocab_size,
    hidden_dim,
    dtype,
    max_abs_input,
    max_abs_weight,
    dot_abs_sum,
    logits_in_dtype,
    exact_logits,
    max_abs_logit,
    exp_error,
    log_error,
):
    """The checked premises' (delta, Zmax) of the lse bounds (``exact_logits``: delta = 0)."""
    for name, v in (("exp_error", exp_error), ("log_error", log_error)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and 0 <= v < 1):
            raise ValueError(f"{name} must be a finite number in [0, 1), got {v!r}")
    if not exact_logits:
        return _logit_terms(vocab_size, hidden_dim, dtype, max_abs_input, max_abs_weight, dot_abs_sum, logits_in_dtype)
    if not (isinstance(max_abs_logit, (int, float)) and math.isfinite(max_abs_logit) and max_abs_logit >= 0):
        raise ValueError(f"exact_logits needs max_abs_logit, a finite number >= 0, got {max_abs_logit!r}")
    if not (isinstance(vocab_size, int) and vocab_size >= 1):
        raise ValueError(f"vocab_size must be an int >= 1, got {vocab_size!r}")
    return Fraction(0), Fraction(float(max_abs_logit))


def linear_cross_entropy_lse_error_bound(
    vocab_size: int,
    hidden_dim: int,
    *,
    dtype: torch.dtype,
    block_v: int,
    max_abs_input: float | None = None,
    max_abs_weight: float | None = None,
    dot_abs_sum: float | None = None,
    tile_sum_depth: int | None = None,
    logits_in_dtype: bool = True,
    exact_logits: bool = False,
    max_abs_logit: float | None = None,
    exp_error: float = LINEAR_CROSS_ENTROPY_EXP_ERROR,
    log_error: float = LINEAR_CROSS_ENTROPY_LOG_ERROR,
    softcap: float | None = None,
    tanh_error: float = LINEAR_CROSS_ENTROPY_TANH_ERROR,
    tanh_rel_error: float = 0.0,
) -> float:
    """Bound on ``|lse_kernel - ln sum_v exp(h . w_v)|`` for one token of the chunked linear
    cross-entropy (kernels/ojas_kernels/linear_cross_entropy_kernels.py, ``_rows_kernel`` with STREAM: the
    3-product schedule, the default for reductions "mean" / "sum" with a gradient, and
    ``fwd_logits="cublas"``), no bias; with ``softcap = c`` against
    ``ln sum_v exp(c tanh(h . w_v / c))``.

    Implements ``Ojas.LinearCrossEntropy.Float.LseLossError.ce_lse_error``
    (rocq/LinearCrossEntropy/Float/LseLossError.v): over ``ceil(V / block_v)`` vocabulary tiles of
    ``block_v`` fp32 logits, ``m' = max(m, max z)``, ``l = rnd(rnd(l * exp(rnd(m - m'))) +
    tl.sum(exp(rnd(z - m'))))``, ``lse = rnd(m + log(l))``, every operation round-to-nearest
    fp32 (Flocq's format, underflow included),
      bound = u (Zmax + LN + NL + el) + el + NL + delta,
    ``NL = bL / (1 - bL) >= -ln(1 - bL)``, ``bL = ce_bL`` (the rescaling factors telescope),
    ``LN >= ln V``, ``Zmax`` a bound of the computed logits, ``delta`` of their error.
    The oracle computes it (``ce_lse_q`` of ``Ojas.Bounds.LinearCrossEntropy``,
    ``Ojas.Bounds.LinearCrossEntropy.ce_lse_q_sound``: exact rationals, certified upper bounds of
    ``exp(2 u Zmax)`` and of the powers, ``ln V <= LN`` checked); without the oracle a hand
    copy in exact rationals (``fractions``), rounded up.

    Premises, not theorems: ``exp_error`` (:data:`LINEAR_CROSS_ENTROPY_EXP_ERROR`) for ``tl.exp``
    on x <= 0 plus 2^-126 absolute, ``log_error`` (:data:`LINEAR_CROSS_ENTROPY_LOG_ERROR`) for
    ``tl.log``; ``tl.sum`` a tree of rounded additions of depth ``tile_sum_depth`` (default ``block_v - 1``, which
    every binary tree of ``block_v`` leaves meets); and ``delta``: with ``exact_logits`` the
    logits the kernel reads are taken as the exact ones (``delta = 0``; compare with a
    float64 logsumexp of those very logits; ``max_abs_logit`` bounds them), else
    ``delta = gamma_D P (+ the storage rounding u_s |z| when ``logits_in_dtype``, as the
    3-product schedule stores them in bfloat16 / float16)``, ``P`` = ``dot_abs_sum`` (a bound
    of ``sum_i |h_i w_vi|``) or ``hidden_dim max_abs_input max_abs_weight``; ``gamma_D`` is the
    classical worst case of any summation order (Higham, Thm 3.1), NOT a Coq theorem for
    cuBLAS's or the CPU BLAS's order (BlockedSum.v proves the blocked order of the Triton
    dots). float32 logits under TF32 (``torch.set_float32_matmul_precision("high")``) are
    not covered. With ``softcap``: ``Ojas.LinearCrossEntropy.Float.SoftcapError.ce_lse_error_softcap``,
    the raw logits' ``delta`` (above; ``exact_logits``: the raw logits read are the exact ones)
    and ``Zmax`` replaced by ``sc_delta = delta + c (ut + et) + u c (1 + ut + et) + eta`` and
    ``sc_zmax = (1 + u) c (1 + ut + et) + eta`` (``sc_logit_error``: the softcap is 1-Lipschitz,
    ``softcap_lipschitz``; a hand copy in exact rationals), premise: the kernel's computed
    tanh within ``tanh_rel_error |tanh| + tanh_error`` (:data:`LINEAR_CROSS_ENTROPY_TANH_ERROR`).
    Not covered at all: bias, label smoothing, z-loss, FMA contraction, overflow. The two-level
    schedule (4 products, ``linear_cross_entropy_forward``) has its own bound:
    :func:`linear_cross_entropy_merge_lse_error_bound`.
    Raises ``ValueError`` on a bad argument or when ``bL < 1`` fails (vacuous)."""
    if not (isinstance(block_v, int) and block_v >= 1):
        raise ValueError(f"block_v must be an int >= 1, got {block_v!r}")
    dt = block_v - 1 if tile_sum_depth is None else tile_sum_depth
    if not (isinstance(dt, int) and 0 <= dt <= max(block_v - 1, 0)) and tile_sum_depth is not None:
        raise ValueError(f"tile_sum_depth must be an int in [0, block_v - 1], got {tile_sum_depth!r}")
    delta, zmax = _delta_zmax(
        vocab_size,
        hidden_dim,
        dtype,
        max_abs_input,
        max_abs_weight,
        dot_abs_sum,
        logits_in_dtype,
        exact_logits,
        max_abs_logit,
        exp_error,
        log_error,
    )
    delta, zmax = _softcapped(delta, zmax, softcap, tanh_error, tanh_rel_error)
    F_ = Fraction
    u, ea, ue, ee, el = F_(_FP32_U), F_(_FP32_ETA), F_(float(exp_error)), F_(_EXP2_ABS_ERROR), F_(float(log_error))
    tt, bt, nn = -(-vocab_size // block_v), block_v, vocab_size
    ln_v = F_(math.log(vocab_size)) * F_(1 + 2.0**-40) + F_(2.0**-60)
    got = _from_oracle(
        bound="linear_cross_entropy_lse",
        u=_rational(u),
        ue=_rational(ue),
        ee=_rational(ee),
        ea=_rational(ea),
        el=_rational(el),
        zmax=_rational(zmax),
        delta=_rational(delta),
        ln=_rational(ln_v),
        depth=dt,
        block=bt,
        tiles=tt,
        vocab=nn,
    )
    if got is None:
        raise ValueError("the bound is vacuous or a check failed (ce_lse_q answered None: bL >= 1 or ln V > LN)")
    if got is not _NO_ORACLE:
        return _float_up(got) * _ROUND_UP
    # hand copy of ce_lse_q (no oracle): exact rationals, exact powers
    xk = _exp_up_small(u * 2 * zmax)
    c, r = _stream_level(u, ue, ee, ea, xk, F_(1), F_(0), F_(1), dt, bt, tt, nn)
    bl = c - 1 + r
    if not bl < 1:
        raise ValueError(f"the bound is vacuous: bL = {float(bl)} >= 1")
    nl = bl / (1 - bl)
    bound = u * (zmax + ln_v + nl + el) + el + nl + delta
    return _float_up(bound) * _ROUND_UP


def linear_cross_entropy_loss_error_bound(lse_bound: float, logit_error: float, max_abs_loss: float) -> float:
    """Bound on ``|loss_kernel - (ln sum_v e^(y_v) - y_t)|`` for one token, no label smoothing
    and no z-loss (the kernel's other terms are exact zeros):
    ``Ojas.LinearCrossEntropy.Float.LseLossError.ce_loss_error``,
    ``(1 + u) (lse_bound + logit_error) + u max_abs_loss``, with ``lse_bound`` from
    :func:`linear_cross_entropy_lse_error_bound`, ``logit_error`` the bound of the target
    logit's error (the same ``delta``: :func:`linear_cross_entropy_logit_error_bound`) and
    ``max_abs_loss`` a bound of the exact ``|lse - y_t|`` (e.g. ``ln V + 2 max|y|``). With a
    softcap (``Ojas.LinearCrossEntropy.Float.SoftcapError.ce_loss_error_softcap``) the same
    formula with the capped logits' ``sc_delta`` and ``y`` the exact capped logits. It charges
    ``delta`` twice; for confident tokens see :func:`linear_cross_entropy_loss_posteriori_bound`."""
    for name, v in (("lse_bound", lse_bound), ("logit_error", logit_error), ("max_abs_loss", max_abs_loss)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
    u = Fraction(_FP32_U)
    b = (1 + u) * (Fraction(float(lse_bound)) + Fraction(float(logit_error))) + u * Fraction(float(max_abs_loss))
    return _float_up(b) * _ROUND_UP


def linear_cross_entropy_loss_posteriori_bound(
    probs: torch.Tensor,
    target: torch.Tensor,
    logit_error: torch.Tensor | float,
    stream_lse_bound: float,
    *,
    ignore_index: int = -100,
) -> torch.Tensor:
    """Per-token bounds [N] on ``|loss_kernel - (ln sum_v e^(y_v) - y_t)|`` (0 at ignored tokens)
    for the 3-product STREAM schedule, no softcap / label smoothing / z-loss, in which the
    logits' errors enter weighted by the softmax, so that a confident token's bound falls to
    the stream's own rounding.

    Implements ``Ojas.LinearCrossEntropy.Float.LossPosteriori.ce_loss_posteriori``
    (rocq/LinearCrossEntropy/Float/LossPosteriori.v):
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


def linear_cross_entropy_lse_posteriori_bound(
    probs: torch.Tensor, logit_error: torch.Tensor | float, stream_lse_bound: float
) -> torch.Tensor:
    """Per-row bounds [N] on ``|lse_kernel - ln sum_v e^(y_v)|`` for the lse that the 3-product
    STREAM schedule's rows kernel computes from the logits ``z`` it reads, no softcap, in which
    the logits' errors enter weighted by the softmax of the exact logits.

    Implements ``Ojas.LinearCrossEntropy.Float.LossPosteriori.ce_lse_posteriori``
    (rocq/LinearCrossEntropy/Float/LossPosteriori.v): ``B + NP``, ``NP = -ln(1 - E)`` (float64
    ``log1p``), ``E = sum_v p_v (e^(delta_v) - 1)`` (an upper bound of the theorem's
    ``sum_v p_v (e^|z_v - y_v| - 1)``), with ``probs`` [N, V] the exact softmax of the exact
    logits ``y`` (the caller's, e.g. float64), ``logit_error`` a bound ``delta_v`` of each
    computed logit's error (a scalar or [N, V]: a premise; measured in
    ``linear_cross_entropy_error.measured_lse_bounds``) and ``stream_lse_bound`` the theorem's
    ``B``: :func:`linear_cross_entropy_lse_error_bound` with ``exact_logits=True`` and
    ``max_abs_logit`` a bound of the computed logits. Every row is bounded (the theorem has no
    target). Unlike the loss (:func:`linear_cross_entropy_loss_posteriori_bound`) the target's own
    error does not cancel: for a confident row ``E`` tends to ``e^(delta_t) - 1``, not to 0.
    Not proved: this float64 evaluation of ``E`` (enlarged by a relative ``4 (V + 8) 2^-53``,
    then everything by 2^-40) and the caller's probabilities. Where the a-priori
    :func:`linear_cross_entropy_lse_error_bound` is smaller it is the better one; both are
    theorems, so their minimum is a bound. Raises ``ValueError`` when ``E >= 1`` in a row
    (vacuous)."""
    f64 = torch.float64
    p = probs.to(f64)
    n, v = p.shape
    d = torch.as_tensor(logit_error, dtype=f64, device=p.device).expand(n, v)
    e = (p * torch.expm1(d)).sum(1) * (1 + 4 * (v + 8) * 2.0**-53)
    if bool((e >= 1).any()):
        raise ValueError(f"the bound is vacuous: E = {e.max().item()} >= 1")
    return (float(stream_lse_bound) - torch.log1p(-e)) * _ROUND_UP


def linear_cross_entropy_softcap_logit_error_bound(
    raw_error: float,
    softcap: float,
    *,
    tanh_error: float = LINEAR_CROSS_ENTROPY_TANH_ERROR,
    tanh_rel_error: float = 0.0,
) -> tuple[float, float]:
    """``(sc_delta, sc_zmax)`` of ``Ojas.LinearCrossEntropy.Float.SoftcapError.sc_logit_error``:
    the error of the kernel's capped logit ``rnd(c * th(r))`` against ``c tanh(y / c)`` when
    ``|r - y| <= raw_error``, and the bound of its magnitude (premise: the computed tanh within
    ``tanh_rel_error |tanh| + tanh_error``)."""
    if not (isinstance(raw_error, (int, float)) and math.isfinite(raw_error) and raw_error >= 0):
        raise ValueError(f"raw_error must be a finite number >= 0, got {raw_error!r}")
    if softcap is None:
        raise ValueError("softcap must be a finite number > 0, got None")
    d, z = _softcapped(Fraction(float(raw_error)), None, softcap, tanh_error, tanh_rel_error)
    return _float_up(d) * _ROUND_UP, _float_up(z) * _ROUND_UP


def linear_cross_entropy_softcap_loss_posteriori_bound(
    capped_probs: torch.Tensor,
    target: torch.Tensor,
    raw_logit_error: torch.Tensor | float,
    stream_lse_bound: float,
    softcap: float,
    *,
    tanh_error: float = LINEAR_CROSS_ENTROPY_TANH_ERROR,
    tanh_rel_error: float = 0.0,
    ignore_index: int = -100,
) -> torch.Tensor:
    """Per-token bounds [N] on ``|loss_kernel - (ln sum_v e^(c tanh(y_v / c)) - c tanh(y_t / c))|``
    (0 at ignored tokens) for the 3-product STREAM schedule with ``softcap = c`` (``_softcap``: each
    raw logit ``r`` capped to ``rnd(c * th(r))``), no bias / label smoothing / z-loss, the capped
    logits' errors weighted by the softmax of the exact capped logits.

    Implements ``Ojas.LinearCrossEntropy.Float.SoftcapPosteriori.ce_loss_posteriori_softcap``
    (rocq/LinearCrossEntropy/Float/SoftcapPosteriori.v): each raw logit within ``dr_v``
    (``raw_logit_error``, a scalar or [N, V]: a premise, e.g. measured,
    ``linear_cross_entropy_error.measured_logit_errors``) gives the capped logit's bound
    ``dz_v >= sc_delta(dr_v) = dr_v + c (ut + et) + u c (1 + ut + et) + eta`` (``sc_logit_error``;
    here ``dr_v`` plus :func:`linear_cross_entropy_softcap_logit_error_bound`'s ``sc_delta`` at 0,
    rounded up), then the theorem's ``(1 + u) (B + NP) + u (-ln p_t)``, ``NP = -ln(1 - E)``,
    ``E = sum_(v != t) p_v (e^(dz_v + dz_t) - 1)`` (the weighted premise less the target's term) by
    :func:`linear_cross_entropy_loss_posteriori_bound` on the ``dz``. ``capped_probs`` [N, V]: the
    softmax of the exact capped logits ``c tanh(y / c)`` (the caller's, e.g. float64);
    ``stream_lse_bound``: the theorem's ``B = ce_lse_bound u el sc_zmax LN NL 0``, i.e.
    :func:`linear_cross_entropy_lse_error_bound` with ``exact_logits=True``, no ``softcap`` and
    ``max_abs_logit`` at least ``sc_zmax`` (the second value of
    :func:`linear_cross_entropy_softcap_logit_error_bound`). Premise: the kernel's computed tanh within
    ``tanh_rel_error |tanh| + tanh_error`` (``th_err``). Not proved: the caller's probabilities and
    this float64 evaluation of ``dz`` and ``E`` (as :func:`linear_cross_entropy_loss_posteriori_bound`
    says). The a-priori :func:`linear_cross_entropy_loss_error_bound` with the capped ``sc_delta``
    (``ce_loss_error_softcap``) is also a theorem: per token their minimum is a bound. Raises
    ``ValueError`` when ``E >= 1`` at a kept token (vacuous)."""
    from ojas_ref.verification.bounds.certified import add_upper

    k, _ = linear_cross_entropy_softcap_logit_error_bound(
        0.0, softcap, tanh_error=tanh_error, tanh_rel_error=tanh_rel_error
    )
    d = torch.as_tensor(raw_logit_error, dtype=torch.float64, device=capped_probs.device)
    if not bool(torch.isfinite(d).all()) or bool((d < 0).any()):
        raise ValueError("raw_logit_error must be finite and >= 0")
    dz = add_upper(d, k)  # >= dr + sc_delta(0) = sc_delta(dr): sc_delta is dr plus a constant
    return linear_cross_entropy_loss_posteriori_bound(
        capped_probs, target, dz, stream_lse_bound, ignore_index=ignore_index
    )


def linear_cross_entropy_softcap_chain_error_bound(
    logit_error: float, softcap: float, *, div_error: float = LINEAR_CROSS_ENTROPY_DIV_ERROR
) -> float:
    """Bound on ``|cf - (1 - tanh(y / c)^2)|`` for the gradient's chain factor ``cf`` that
    ``_cap_chain`` computes from a capped logit within ``logit_error`` of ``c tanh(y / c)``
    (e.g. ``sc_delta`` of :func:`linear_cross_entropy_softcap_logit_error_bound`):
    ``sc_chain_bound`` of ``Ojas.LinearCrossEntropy.Float.SoftcapError.sc_chain_error`` (a hand
    copy in exact rationals; premise: the division within ``div_error |z / c| + 2^-126``,
    :data:`LINEAR_CROSS_ENTROPY_DIV_ERROR`). The capped dH, dW: :func:`linear_cross_entropy_grad_error_bound`
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
    vocab_size: int,
    hidden_dim: int,
    *,
    dtype: torch.dtype,
    max_abs_input: float | None = None,
    max_abs_weight: float | None = None,
    dot_abs_sum: float | None = None,
    logits_in_dtype: bool = True,
    softcap: float | None = None,
    tanh_error: float = LINEAR_CROSS_ENTROPY_TANH_ERROR,
    tanh_rel_error: float = 0.0,
) -> tuple[float, float]:
    """``(delta, Zmax)``: the bound on each logit's error that
    :func:`linear_cross_entropy_lse_error_bound` uses (``gamma_D P``, plus the storage rounding
    with ``logits_in_dtype``; premises stated there) and the bound of the computed logits; with
    ``softcap`` those of the capped logits (``sc_delta``, ``sc_zmax`` of
    ``Ojas.LinearCrossEntropy.Float.SoftcapError.sc_logit_error``)."""
    d, z = _logit_terms(vocab_size, hidden_dim, dtype, max_abs_input, max_abs_weight, dot_abs_sum, logits_in_dtype)
    d, z = _softcapped(d, z, softcap, tanh_error, tanh_rel_error)
    return _float_up(d) * _ROUND_UP, _float_up(z) * _ROUND_UP


def _stream_level(u, ue, ee, ea, xk, ci, ri, nx, dt, bt, tt, nn):
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
    vocab_size: int,
    hidden_dim: int,
    *,
    dtype: torch.dtype,
    block_n: int,
    tiles_per_program: int,
    block_p: int,
    max_abs_input: float | None = None,
    max_abs_weight: float | None = None,
    dot_abs_sum: float | None = None,
    exact_logits: bool = False,
    max_abs_logit: float | None = None,
    exp_error: float = LINEAR_CROSS_ENTROPY_EXP_ERROR,
    log_error: float = LINEAR_CROSS_ENTROPY_LOG_ERROR,
    softcap: float | None = None,
    tanh_error: float = LINEAR_CROSS_ENTROPY_TANH_ERROR,
    tanh_rel_error: float = 0.0,
) -> float:
    """Bound on ``|lse_kernel - ln sum_v exp(h . w_v)|`` for one token of the two-level
    schedule (4 products, ``linear_cross_entropy_forward``): ``_logits_kernel`` STATS streams
    ``tiles_per_program`` tiles of ``block_n`` float32 logits per program from ``(z_first, 0)``,
    ``_rows_kernel`` merges the programs' states in tiles of ``block_p`` (the kernel's
    ``min(rows.block_p, next_power_of_2(n_groups))``). Implements
    ``Ojas.LinearCrossEntropy.Float.LseLossError.ce_lse_error_two_level`` through ``ce_merge_lse_q``
    of ``Ojas.Bounds.LinearCrossEntropy`` (``Ojas.Bounds.LinearCrossEntropy.ce_merge_lse_q_sound``: the oracle computes
    the bound over exact rationals with certified upper bounds of ``exp(2 u Zmax)`` and the
    powers, ``ln V <= LN`` checked; without the oracle binary, a hand copy in exact rationals
    with exact powers), tile sums of depth ``block_n - 1`` and
    ``block_p - 1`` (any reduction tree). The logits are the Triton dot's float32 sums (not
    rounded to ``dtype``): ``delta = gamma_D P`` (any order; BlockedSum.v proves the blocked
    order, not used here), or 0 with ``exact_logits``; with ``softcap``
    ``Ojas.LinearCrossEntropy.Float.SoftcapError.ce_lse_error_two_level_softcap`` (``_logits_kernel``
    caps its accumulator's logits; the capped ``delta``, ``Zmax`` as there). Premises and what
    is not covered: as :func:`linear_cross_entropy_lse_error_bound`. Raises ``ValueError`` on a bad argument or a
    vacuous bound."""
    for name, v in (("block_n", block_n), ("tiles_per_program", tiles_per_program), ("block_p", block_p)):
        if not (isinstance(v, int) and v >= 1):
            raise ValueError(f"{name} must be an int >= 1, got {v!r}")
    delta, zmax = _delta_zmax(
        vocab_size,
        hidden_dim,
        dtype,
        max_abs_input,
        max_abs_weight,
        dot_abs_sum,
        False,
        exact_logits,
        max_abs_logit,
        exp_error,
        log_error,
    )
    delta, zmax = _softcapped(delta, zmax, softcap, tanh_error, tanh_rel_error)
    F_ = Fraction
    u, ea, ue, ee, el = F_(_FP32_U), F_(_FP32_ETA), F_(float(exp_error)), F_(_EXP2_ABS_ERROR), F_(float(log_error))
    n_tiles = -(-vocab_size // block_n)
    groups = -(-n_tiles // tiles_per_program)
    t1, n1 = min(tiles_per_program, n_tiles), min(tiles_per_program * block_n, vocab_size)
    t2 = -(-groups // block_p)
    ln_v = F_(math.log(vocab_size)) * F_(1 + 2.0**-40) + F_(2.0**-60)
    got = _from_oracle(
        bound="linear_cross_entropy_merge_lse",
        u=_rational(u),
        ue=_rational(ue),
        ee=_rational(ee),
        ea=_rational(ea),
        el=_rational(el),
        zmax=_rational(zmax),
        delta=_rational(delta),
        ln=_rational(ln_v),
        depth=block_n - 1,
        block=block_n,
        tiles=t1,
        items=n1,
        merge_depth=block_p - 1,
        merge_block=block_p,
        merge_tiles=t2,
        groups=groups,
        vocab=vocab_size,
    )
    if got is None:
        raise ValueError("the bound is vacuous or a check failed (ce_merge_lse_q answered None: bL >= 1 or ln V > LN)")
    if got is not _NO_ORACLE:
        return _float_up(got) * _ROUND_UP
    # hand copy of ce_merge_lse_q (no oracle): exact rationals, exact powers
    xk = _exp_up_small(u * 2 * zmax)
    c1, r1 = _stream_level(u, ue, ee, ea, xk, F_(1), F_(0), F_(1), block_n - 1, block_n, t1, n1)
    c2, r2 = _stream_level(u, ue, ee, ea, xk, c1, r1, F_(n1), block_p - 1, block_p, t2, groups)
    bl = c2 - 1 + r2
    if not bl < 1:
        raise ValueError(f"the bound is vacuous: bL = {float(bl)} >= 1")
    nl = bl / (1 - bl)
    return _float_up(u * (zmax + ln_v + nl + el) + el + nl + delta) * _ROUND_UP
