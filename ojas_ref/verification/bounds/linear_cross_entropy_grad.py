"""Error bounds of the Triton linear cross-entropy's gradients dH and dW
(kernels/ojas_kernels/linear_cross_entropy.py), in the mixed-precision model of
``rocq/FloatModel/`` (:mod:`.common`): the 3-product schedule a priori
(``Ojas.LinearCrossEntropy.Float.GradError``; with a softcap
``Ojas.LinearCrossEntropy.Float.SoftcapGradError``) and with each entry's own exponent error
(``Ojas.LinearCrossEntropy.Float.GradPosteriori``), and the 4-product schedule's, with the token
weights inside (``Ojas.LinearCrossEntropy.Float.WeightedGradError``). The forward's bounds, which
these take as inputs: :mod:`.linear_cross_entropy`."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Sequence

import torch

from ojas_ref.verification.bounds.common import (
    _EXP2_ABS_ERROR,
    _FP32_ETA,
    _FP32_U,
    _NO_ORACLE,
    _ROUND_UP,
    _enlarged,
    _exp_up_small,
    _float_up,
    _from_oracle,
    _rational,
    _storage,
)
from ojas_ref.verification.bounds.linear_cross_entropy import (
    LINEAR_CROSS_ENTROPY_DIV_ERROR,
    LINEAR_CROSS_ENTROPY_EXP_ERROR,
    LINEAR_CROSS_ENTROPY_LOG_ERROR,
    LINEAR_CROSS_ENTROPY_TANH_ERROR,
    _logit_terms,
    _softcapped,
    linear_cross_entropy_lse_error_bound,
    linear_cross_entropy_softcap_chain_error_bound,
)

__all__ = [
    "linear_cross_entropy_entry_posteriori_factors",
    "linear_cross_entropy_grad_chain_error_bound",
    "linear_cross_entropy_grad_error_bound",
    "linear_cross_entropy_grad_posteriori_bound",
    "linear_cross_entropy_softcap_grad_chain_error_bound",
    "linear_cross_entropy_weighted_dh_error_bound",
    "linear_cross_entropy_weighted_dw_error_bound",
]


def _hand_grad_coefs(u, ea, us, es, ue, ee, a0, ua, x, n_terms, n_chunks) -> tuple[Fraction, ...]:
    """Hand copy of ``ce_grad_q`` of ``Ojas.Bounds.LinearCrossEntropyGrad`` (fallback without the oracle): the
    coefficients ``(cS, cT, cH, c0)`` of ``ce_dw_bound`` in exact rationals, at the exact
    ``gamma_{n_terms}`` and ``X = 1 + x + x^2 >= e^x``."""
    X = _exp_up_small(x)
    gd = n_terms * u / (1 - n_terms * u)
    kg = (1 + us) * (1 + u)
    cg = (1 + us) * ((1 + u) * ee + ea) + es
    w = ua + u * (1 + ua)
    kc = kg**n_chunks
    return (
        kc * a0 * (1 + w) * (1 + gd) * (kg * (1 + ue) * X - 1),
        kc * a0 * (w + (1 + w) * ((1 + gd) * (kg - 1) + gd)) + (kc - 1) * a0,
        kc * a0 * (1 + w) * (1 + gd) * cg,
        n_chunks * kc * (ea + es),
    )


def _capped_grad_coefs(u, ea, us, es, ue, ee, a0, ua, x, chain, n_terms, n_chunks) -> tuple[Fraction, ...]:
    """The coefficients of ``(S, T0, Ha, Sk, Tc)`` and the constant of ``ce_gen_bound`` at
    ``sc_E1`` (``Ojas.LinearCrossEntropy.Float.SoftcapGradError.sc_dw_error``), exact rationals,
    ``gamma_{n_terms}``, ``X = 1 + x + x^2 >= e^x``, ``chain`` = ``Ec``: the hand copy of
    ``sc_grad_q`` of ``Ojas.Bounds.LinearCrossEntropyGrad``, the fallback without the oracle binary."""
    fe = (1 + ue) * _exp_up_small(x)
    gd = n_terms * u / (1 - n_terms * u)
    kg = (1 + us) * (1 + u)
    kcap = (1 + us) * (1 + u) ** 2
    c1 = (1 + u) * ee + ea
    w = ua + u * (1 + ua)
    kc = kg**n_chunks
    m = kc * a0 * (1 + w) * (1 + gd)
    return (
        m * kg * chain * ((1 + u) * fe - 1),
        m * kg * chain * (1 + u),
        m * (kg * chain * c1 + kg * c1 + (1 + us) * ea + es),
        m * (kcap * fe - 1),
        m * (kcap - 1) + kc * a0 * ((1 + w) * gd + w) + (kc - 1) * a0,
        n_chunks * kc * (ea + es),
    )


def linear_cross_entropy_grad_error_bound(
    prob_abs: torch.Tensor,
    grad_abs: torch.Tensor,
    operand_abs: torch.Tensor,
    *,
    n_terms: int,
    dtype: torch.dtype,
    scale: float,
    logit_error: float,
    lse_error: float,
    max_abs_arg: float,
    n_chunks: int = 1,
    exp_error: float = LINEAR_CROSS_ENTROPY_EXP_ERROR,
    storage_rounding: str = "nearest",
    softcap: float | None = None,
    capped_sums: tuple[torch.Tensor, torch.Tensor] | None = None,
    tanh_error: float = LINEAR_CROSS_ENTROPY_TANH_ERROR,
    tanh_rel_error: float = 0.0,
    div_error: float = LINEAR_CROSS_ENTROPY_DIV_ERROR,
) -> torch.Tensor:
    """A-posteriori bounds on ``|grad_kernel - grad_exact|`` for every entry of dH (grad_input)
    or dW (grad_weight) of the 3-product schedule of kernels/ojas_kernels/linear_cross_entropy_three_products.py
    (``_three_products``: reductions "mean" / "sum"), no bias, no softcap, no smoothing, no z-loss.

    Implements ``Ojas.LinearCrossEntropy.Float.GradError.ce_dh_error`` (dH: ``n_chunks = 1``,
    one product over the vocabulary) and ``ce_dw_error`` (dW: ``n_chunks`` token chunks summed
    in ``dtype``), rocq/LinearCrossEntropy/Float/GradError.v: G = ``rnd_s(tl.exp(rnd(z - lse)))``
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
    ``ce_grad_q`` of ``Ojas.Bounds.LinearCrossEntropyGrad`` (``Ojas.Bounds.LinearCrossEntropyGrad.ce_grad_q_sound_dw``,
    ``ce_grad_q_sound_dh``: whenever it answers ``(cS, cT, cH, c0)``, ``cS S + cT T + cH Ha + c0``
    bounds the kernel's entry under the premises of ``ce_dw_error`` / ``ce_dh_error`` with
    ``gd = gamma_{n_terms}`` and any ``X >= e^x``, ``x = delta + Dl + u Am + ea``): the oracle
    computes them over exact rationals at ``X = 1 + perturbation_q(x / 2)``, each rounded up;
    without the oracle binary, the hand copy ``_hand_grad_coefs`` (exact ``gamma`` and
    ``X = 1 + x + x^2``); the tensor part in float64 rounded up by 2^-40.

    Premises, not theorems: ``exp_error`` for ``tl.exp`` (as the lse bound's, measured on
    [-104, 0]; the arguments exceed 0 by at most the lse's error); the fp32 accumulation of
    cuBLAS / the CPU BLAS within ``gamma_{n_terms}`` of the exact sum, the classical worst case
    of any order with exact or rounded products (``ce_dsum_tree`` proves it for every tree of
    rounded additions of exact products: bf16 operands, whose products are exact in fp32 from
    2^-134 up; not the MMA order, not TF32 products).
    ``storage_rounding="truncate"``: Triton's CPU interpreter truncates G to bfloat16 (the
    formula at those constants, not a proved bound).
    With ``softcap = c`` (None: the above): ``Ojas.LinearCrossEntropy.Float.SoftcapGradError.sc_dh_error``
    / ``sc_dw_error`` for the capped entries ``rnd_s(rnd(g (1 - (z / c)^2)))`` against
    ``(P_c - onehot)(1 - tanh(y / c)^2)``: the coefficients of ``S, T0, Ha, Sk, Tc`` and the
    constant come from ``sc_grad_q`` of ``Ojas.Bounds.LinearCrossEntropyGrad`` (``Ojas.Bounds.LinearCrossEntropyGrad.sc_grad_q_sound_dw``,
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
    for name, v in (
        ("scale", scale),
        ("logit_error", logit_error),
        ("lse_error", lse_error),
        ("max_abs_arg", max_abs_arg),
        ("exp_error", exp_error),
    ):
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
    got = _from_oracle(
        bound="linear_cross_entropy_grad",
        **{k: _rational(v) for k, v in zip(("u", "ea", "us", "es", "ue", "ee", "a0", "ua", "x"), consts)},
        n=n_terms,
        chunks=n_chunks,
    )
    if got is None:
        raise ValueError("a check of ce_grad_q failed (the oracle answered None)")
    coef_s, coef_t, coef_h, const = (
        _hand_grad_coefs(*consts, n_terms, n_chunks) if got is _NO_ORACLE else (F_(c) for c in got)
    )
    if softcap is not None:
        if capped_sums is None:
            raise ValueError("softcap needs capped_sums = (Sk, Tc)")
        dz, _ = _softcapped(F_(float(logit_error)), None, softcap, tanh_error, tanh_rel_error)
        chain = F_(linear_cross_entropy_softcap_chain_error_bound(float(dz), softcap, div_error=div_error))
        x = dz + F_(float(lse_error)) + u * F_(float(max_abs_arg)) + ea
        if x > 1:
            raise ValueError(f"the exponent's error {float(x)} exceeds 1: the bound is vacuous (G off by e - 1)")
        capped = (u, ea, us, es, ue, ee, a0, ua, x, chain)
        got = _from_oracle(
            bound="linear_cross_entropy_grad_capped",
            **{k: _rational(v) for k, v in zip(("u", "ea", "us", "es", "ue", "ee", "a0", "ua", "x", "chain"), capped)},
            n=n_terms,
            chunks=n_chunks,
        )
        if got is None:
            raise ValueError(
                "a check of sc_grad_q failed (the oracle answered None): the constants, x and chain >= 0, n_terms u < 1"
            )
        coefs = _capped_grad_coefs(*capped, n_terms, n_chunks) if got is _NO_ORACLE else tuple(F_(c) for c in got)
        return _grad_coef_sum(coefs, (prob_abs, grad_abs, operand_abs, *capped_sums), n_terms)
    return _grad_coef_sum((coef_s, coef_t, coef_h, const), (prob_abs, grad_abs, operand_abs), n_terms)


def linear_cross_entropy_grad_chain_error_bound(
    prob_abs: torch.Tensor,
    grad_abs: torch.Tensor,
    operand_abs: torch.Tensor,
    *,
    n_terms: int,
    dtype: torch.dtype,
    scale: float,
    vocab_size: int,
    hidden_dim: int,
    block_v: int,
    n_chunks: int = 1,
    dot_abs_sum: float | None = None,
    max_abs_input: float | None = None,
    max_abs_weight: float | None = None,
    tile_sum_depth: int | None = None,
    exp_error: float = LINEAR_CROSS_ENTROPY_EXP_ERROR,
    log_error: float = LINEAR_CROSS_ENTROPY_LOG_ERROR,
    storage_rounding: str = "nearest",
) -> torch.Tensor:
    """:func:`linear_cross_entropy_grad_error_bound` (no softcap) with the streamed lse's error
    composed in Coq: per-entry bounds on dH (``n_chunks = 1``, ``n_terms = V``) or dW of the
    3-product schedule, every token's lse the one ``_rows_kernel`` streams over its row of
    ``vocab_size`` logits in tiles of ``block_v``.

    One extracted function per bound: the oracle's ``linear_cross_entropy_grad_chain`` query,
    ``ce_grad_chain_q`` of ``Ojas.Bounds.LinearCrossEntropyChain`` (``ce_grad_chain_q_sound_dw``,
    ``ce_grad_chain_q_sound_dh``; over the reals ``Ojas.LinearCrossEntropy.Float.GradChainError
    .ce_dw_error_from_lse`` / ``ce_dh_error_from_lse``): it computes the lse's bound ``Dl``
    (``ce_lse_q``, as :func:`~ojas_ref.verification.bounds.linear_cross_entropy.linear_cross_entropy_lse_error_bound`)
    itself, checks ``0 <= Dl <= 1``, and answers the coefficients of ``ce_grad_q`` at
    ``x = delta + Dl + u Am + ea``, ``Am = 2 Zmax + 3 delta + LN + Dl`` (``chain_Am``: no
    premise on ``|z - lse|``). ``delta`` and ``Zmax`` are the logits' (``_logit_terms``, the
    logits stored in ``dtype``: ``dot_abs_sum`` or ``hidden_dim max_abs_input max_abs_weight``),
    ``LN`` the certified ``ln V``; the premises are those of both bounds (``tl.exp`` within
    ``exp_error``, ``tl.log`` within ``log_error`` on ``[1/2, 2 V]``, ``tl.sum`` a tree of
    depth ``tile_sum_depth``, default ``block_v - 1``, the products' fp32 accumulation within
    ``gamma_{n_terms}``). The sums and their float64 evaluation as
    :func:`linear_cross_entropy_grad_error_bound`. Without the oracle binary: the hand copies
    (:func:`~ojas_ref.verification.bounds.linear_cross_entropy.linear_cross_entropy_lse_error_bound`'s
    ``Dl``, then :func:`linear_cross_entropy_grad_error_bound` at it and ``Am``). Raises
    ``ValueError`` on a bad argument or when a check fails (``Dl`` outside ``[0, 1]``,
    ``bL >= 1``)."""
    depth = _check_chain_args(scale, exp_error, log_error, block_v, tile_sum_depth, n_terms, n_chunks)
    delta, zmax = _logit_terms(vocab_size, hidden_dim, dtype, max_abs_input, max_abs_weight, dot_abs_sum, True)
    F_ = Fraction
    u, ea, ue, ee, el = F_(_FP32_U), F_(_FP32_ETA), F_(float(exp_error)), F_(_EXP2_ABS_ERROR), F_(float(log_error))
    us, es = (F_(x) for x in _storage(dtype, storage_rounding))
    ln_v = F_(math.log(vocab_size)) * F_(1 + 2.0**-40) + F_(2.0**-60)  # >= ln V; ce_lse_q checks it
    consts = dict(u=u, ea=ea, us=us, es=es, ue=ue, ee=ee, el=el, zmax=zmax, delta=delta, ln=ln_v, a0=F_(float(scale)))
    got = _from_oracle(
        bound="linear_cross_entropy_grad_chain",
        **{k: _rational(v) for k, v in consts.items()},
        ua=_rational(u),
        depth=depth,
        block=block_v,
        tiles=-(-vocab_size // block_v),
        vocab=vocab_size,
        n=n_terms,
        chunks=n_chunks,
    )
    if got is None:
        raise ValueError(
            "a check of ce_grad_chain_q failed (the oracle answered None): the lse's bound vacuous "
            "(bL >= 1 or Dl > 1) or the gradient's (n_terms u >= 1)"
        )
    if got is not _NO_ORACLE:
        return _grad_coef_sum(tuple(F_(c) for c in got), (prob_abs, grad_abs, operand_abs), n_terms)
    lse_args = dict(dtype=dtype, block_v=block_v, dot_abs_sum=dot_abs_sum, max_abs_input=max_abs_input)
    lse_args.update(max_abs_weight=max_abs_weight, tile_sum_depth=tile_sum_depth, log_error=log_error)
    dl = linear_cross_entropy_lse_error_bound(vocab_size, hidden_dim, exp_error=exp_error, **lse_args)
    if dl > 1:
        raise ValueError(f"the lse's bound {dl} exceeds 1 (ce_grad_chain_q's check)")
    return linear_cross_entropy_grad_error_bound(
        prob_abs,
        grad_abs,
        operand_abs,
        n_terms=n_terms,
        n_chunks=n_chunks,
        dtype=dtype,
        scale=scale,
        logit_error=_float_up(delta) * _ROUND_UP,
        lse_error=dl,
        max_abs_arg=_float_up(2 * zmax + 3 * delta + ln_v + F_(dl)) * _ROUND_UP,
        exp_error=exp_error,
        storage_rounding=storage_rounding,
    )


def linear_cross_entropy_softcap_grad_chain_error_bound(
    prob_abs: torch.Tensor,
    grad_abs: torch.Tensor,
    operand_abs: torch.Tensor,
    capped_prob_abs: torch.Tensor,
    capped_grad_abs: torch.Tensor,
    *,
    n_terms: int,
    dtype: torch.dtype,
    scale: float,
    vocab_size: int,
    hidden_dim: int,
    block_v: int,
    softcap: float,
    n_chunks: int = 1,
    dot_abs_sum: float | None = None,
    max_abs_input: float | None = None,
    max_abs_weight: float | None = None,
    tile_sum_depth: int | None = None,
    exp_error: float = LINEAR_CROSS_ENTROPY_EXP_ERROR,
    log_error: float = LINEAR_CROSS_ENTROPY_LOG_ERROR,
    tanh_error: float = LINEAR_CROSS_ENTROPY_TANH_ERROR,
    tanh_rel_error: float = 0.0,
    div_error: float = LINEAR_CROSS_ENTROPY_DIV_ERROR,
    storage_rounding: str = "nearest",
) -> torch.Tensor:
    """:func:`linear_cross_entropy_grad_error_bound` with ``softcap = c`` and the capped streamed
    lse's error composed in Coq: per-entry bounds on the capped dH (``n_chunks = 1``,
    ``n_terms = V``) or dW of the 3-product schedule, every token's lse the one ``_rows_kernel``
    (STREAM, HAS_CAP) streams over its row of ``vocab_size`` raw logits, each capped, in tiles of
    ``block_v``.

    One extracted function per bound: the oracle's ``linear_cross_entropy_softcap_grad_chain``
    query, ``sc_grad_chain_q`` of ``Ojas.Bounds.LinearCrossEntropySoftcapChain``
    (``sc_grad_chain_q_sound_dw``, ``sc_grad_chain_q_sound_dh``; over the reals
    ``Ojas.LinearCrossEntropy.Float.SoftcapGradChainError.sc_dw_error_from_lse`` /
    ``sc_dh_error_from_lse``): from the raw logits' error ``dr`` and bound ``zr``
    (``_logit_terms``, the logits stored in ``dtype``: ``dot_abs_sum`` or
    ``hidden_dim max_abs_input max_abs_weight``) it computes the capped logits' error
    ``dz = sc_delta dr`` and bound ``Zc = min(sc_zmax, (1 + u) (zr (1 + ut) + c et) + ea)``, the
    lse's bound ``Dl`` over the capped logits (``ce_lse_q``, checked ``0 <= Dl <= 1``), the chain
    factor's ``Ec = sc_chain_bound dz``, and answers the coefficients of ``sc_grad_q`` at
    ``x = dz + Dl + u Am + ea``, ``Am = 2 Zc + 3 dz + LN + Dl`` (no premise on ``|z - lse|``)
    and ``Ec``. The sums ``S, T0, Ha, Sk, Tc`` (``prob_abs`` ... ``capped_grad_abs``) as
    :func:`linear_cross_entropy_grad_error_bound`'s with ``softcap``
    (:func:`~ojas_ref.verification.linear_cross_entropy_error.gradient_sums` with ``softcap``).
    Premises: those of both bounds (``tl.exp`` within ``exp_error``, ``tl.log`` within
    ``log_error`` on ``[1/2, 2 V]``, ``tl.sum`` a tree of depth ``tile_sum_depth``, default
    ``block_v - 1``, the computed tanh within ``tanh_rel_error |tanh| + tanh_error``, the division
    ``z / c`` within ``div_error |z / c| + 2^-126``, the products' fp32 accumulation within
    ``gamma_{n_terms}``). Without the oracle binary: the hand copies
    (:func:`~ojas_ref.verification.bounds.linear_cross_entropy.linear_cross_entropy_lse_error_bound`'s
    capped ``Dl``, at ``sc_zmax``, then :func:`linear_cross_entropy_grad_error_bound` at it and
    ``Am``). Raises ``ValueError`` on a bad argument or when a check fails (``Dl`` outside
    ``[0, 1]``, ``bL >= 1``)."""
    depth = _check_chain_args(scale, exp_error, log_error, block_v, tile_sum_depth, n_terms, n_chunks)
    if not (isinstance(div_error, (int, float)) and math.isfinite(div_error) and div_error >= 0):
        raise ValueError(f"div_error must be a finite number >= 0, got {div_error!r}")
    delta, zmax = _logit_terms(vocab_size, hidden_dim, dtype, max_abs_input, max_abs_weight, dot_abs_sum, True)
    dz, zc = _softcapped(delta, zmax, softcap, tanh_error, tanh_rel_error)  # checks softcap and the tanh errors
    F_ = Fraction
    u, ea, ue, ee, el = F_(_FP32_U), F_(_FP32_ETA), F_(float(exp_error)), F_(_EXP2_ABS_ERROR), F_(float(log_error))
    us, es = (F_(x) for x in _storage(dtype, storage_rounding))
    c, ut, et = F_(float(softcap)), F_(float(tanh_rel_error)), F_(float(tanh_error))
    ln_v = F_(math.log(vocab_size)) * F_(1 + 2.0**-40) + F_(2.0**-60)  # >= ln V; ce_lse_q checks it
    consts = dict(u=u, ea=ea, us=us, es=es, ue=ue, ee=ee, el=el, cap=c, ut=ut, et=et, ud=F_(float(div_error)))
    consts.update(ed=F_(_EXP2_ABS_ERROR), zr=zmax, dr=delta, ln=ln_v, a0=F_(float(scale)), ua=u)
    got = _from_oracle(
        bound="linear_cross_entropy_softcap_grad_chain",
        **{k: _rational(v) for k, v in consts.items()},
        depth=depth,
        block=block_v,
        tiles=-(-vocab_size // block_v),
        vocab=vocab_size,
        n=n_terms,
        chunks=n_chunks,
    )
    if got is None:
        raise ValueError(
            "a check of sc_grad_chain_q failed (the oracle answered None): the lse's bound vacuous "
            "(bL >= 1 or Dl > 1) or the gradient's (n_terms u >= 1)"
        )
    sums = (prob_abs, grad_abs, operand_abs, capped_prob_abs, capped_grad_abs)
    if got is not _NO_ORACLE:
        return _grad_coef_sum(tuple(F_(v) for v in got), sums, n_terms)
    lse_args = dict(dtype=dtype, block_v=block_v, dot_abs_sum=dot_abs_sum, max_abs_input=max_abs_input)
    lse_args.update(max_abs_weight=max_abs_weight, tile_sum_depth=tile_sum_depth, log_error=log_error)
    cap_args = dict(softcap=softcap, tanh_error=tanh_error, tanh_rel_error=tanh_rel_error)
    dl = linear_cross_entropy_lse_error_bound(vocab_size, hidden_dim, exp_error=exp_error, **lse_args, **cap_args)
    if dl > 1:
        raise ValueError(f"the lse's bound {dl} exceeds 1 (sc_grad_chain_q's check)")
    zc = min(zc, (1 + u) * (zmax * (1 + ut) + c * et) + ea)
    return linear_cross_entropy_grad_error_bound(
        *sums[:3],
        n_terms=n_terms,
        n_chunks=n_chunks,
        dtype=dtype,
        scale=scale,
        logit_error=_float_up(delta) * _ROUND_UP,
        lse_error=dl,
        max_abs_arg=_float_up(2 * zc + 3 * dz + ln_v + F_(dl)) * _ROUND_UP,
        exp_error=exp_error,
        storage_rounding=storage_rounding,
        capped_sums=sums[3:],
        div_error=div_error,
        **cap_args,
    )


def _check_chain_args(scale, exp_error, log_error, block_v, tile_sum_depth, n_terms, n_chunks) -> int:
    """The chain bounds' common checks (``ValueError`` naming the argument); the tile sum's depth."""
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale >= 0):
        raise ValueError(f"scale must be a finite number >= 0, got {scale!r}")
    for name, v in (("exp_error", exp_error), ("log_error", log_error)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and 0 <= v < 1):
            raise ValueError(f"{name} must be a finite number in [0, 1), got {v!r}")
    if not (isinstance(block_v, int) and block_v >= 1):
        raise ValueError(f"block_v must be an int >= 1, got {block_v!r}")
    depth = block_v - 1 if tile_sum_depth is None else tile_sum_depth
    if not (isinstance(depth, int) and 0 <= depth <= block_v - 1):
        raise ValueError(f"tile_sum_depth must be an int in [0, block_v - 1], got {tile_sum_depth!r}")
    _check_grad_terms(n_terms, n_chunks)
    return depth


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
    """Hand copy of ``ce_gp_q`` of ``Ojas.Bounds.LinearCrossEntropyGrad`` (fallback without the oracle): the
    coefficients ``(cS, cT, cH, c0)`` of ``ce_gen_bound gd a0 ua C (Sp + (Kg - 1) T + cg Ha) T``
    (``Ojas.LinearCrossEntropy.Float.GradError``) in ``Sp``, ``T``, ``Ha``, exact rationals at the
    exact ``gd = gamma_{n_terms}``: ``ce_gen_bound gd a0 ua C B T = Kg^C (|a0| ((1 + w) ((1 + gd) B
    + gd T) + w T) + C ea) + (Kg^C - 1) |a0| T + C Kg^C es``, i.e. ``cB B + cTg T + c0``, composed
    with ``B = Sp + (Kg - 1) T + cg Ha``."""
    gd = n_terms * u / (1 - n_terms * u)
    kg = (1 + us) * (1 + u)
    cg = (1 + us) * ((1 + u) * ee + ea) + es
    kc = kg**n_chunks
    w = ua + u * (1 + ua)
    a0 = abs(a0)
    c_b = kc * a0 * (1 + w) * (1 + gd)
    c_tg = kc * a0 * ((1 + w) * gd + w) + (kc - 1) * a0
    return (c_b, c_b * (kg - 1) + c_tg, c_b * cg, n_chunks * kc * (ea + es))


def linear_cross_entropy_entry_posteriori_factors(
    log_probs: torch.Tensor,
    target: torch.Tensor,
    logit_error: float | torch.Tensor,
    stream_lse_bound: float,
    *,
    dtype: torch.dtype,
    lse_error: float | None = None,
    exp_error: float = LINEAR_CROSS_ENTROPY_EXP_ERROR,
    storage_rounding: str = "nearest",
    ignore_index: int = -100,
) -> torch.Tensor:
    """Per entry of G [N, V], the factor ``k P``, ``k = (1 + us) ((1 + u) (1 + ue) X - 1)``, of
    ``Ojas.LinearCrossEntropy.Float.GradPosteriori.ce_gp_S`` (0 at ignored tokens), for
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
    if per_logit and (
        logit_error.shape != log_probs.shape or not bool(((logit_error >= 0) & torch.isfinite(logit_error)).all())
    ):
        raise ValueError(
            f"logit_error must be a number or a finite tensor >= 0 shaped like log_probs {tuple(log_probs.shape)}"
        )
    if per_logit and lse_error is not None:
        raise ValueError("lse_error (the a-priori clamp) needs a scalar logit_error")
    for name, v in (
        ("logit_error", 0.0 if per_logit else logit_error),
        ("stream_lse_bound", stream_lse_bound),
        ("exp_error", exp_error),
        ("lse_error", 0.0 if lse_error is None else lse_error),
    ):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
    if log_probs.dim() != 2 or target.shape != (log_probs.shape[0],):
        raise ValueError(
            f"log_probs must be [N, V] and target [N], got {tuple(log_probs.shape)} and {tuple(target.shape)}"
        )
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
    entry_abs: torch.Tensor,
    grad_abs: torch.Tensor,
    operand_abs: torch.Tensor,
    *,
    n_terms: int,
    dtype: torch.dtype,
    scale: float,
    n_chunks: int = 1,
    storage_rounding: str = "nearest",
) -> torch.Tensor:
    """Per-entry bounds on dH (``n_chunks = 1``) or dW of the 3-product schedule (as
    :func:`linear_cross_entropy_grad_error_bound`: no bias, softcap, smoothing, z-loss) with
    each entry of G charged its own exponent's error, tight for confident tokens.

    Implements ``Ojas.LinearCrossEntropy.Float.GradPosteriori.ce_gp_dh_error`` /
    ``ce_gp_dw_error`` (rocq/LinearCrossEntropy/Float/GradPosteriori.v)::

        bound = ce_gen_bound gd a0 ua C (Sp + (Kg - 1) T + cg Ha) T

    with ``entry_abs = Sp`` = sum over the items of the factor of
    :func:`linear_cross_entropy_entry_posteriori_factors` times ``|h|`` (dH: ``factors @ |W|``;
    dW: ``factors^T @ |H|`` over the kept tokens), ``grad_abs = T`` and ``operand_abs = Ha``
    as in :func:`linear_cross_entropy_grad_error_bound` (float64, enlarged here by
    ``4 (n_terms + 1) 2^-53``), ``gd = gamma_{n_terms}``, ``a0 = scale``, ``C = n_chunks``.
    The coefficients ``(cS, cT, cH, c0)`` of ``Sp``, ``T``, ``Ha`` and the constant come from
    ``ce_gp_q`` of ``Ojas.Bounds.LinearCrossEntropyGrad`` (``Ojas.Bounds.LinearCrossEntropyGrad.ce_gp_q_sound_dw``,
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
    got = _from_oracle(
        bound="linear_cross_entropy_grad_posteriori",
        **{k: _rational(v) for k, v in zip(("u", "ea", "us", "es", "ee", "a0", "ua"), consts)},
        n=n_terms,
        chunks=n_chunks,
    )
    if got is None:
        raise ValueError("a check of ce_gp_q failed (the oracle answered None): the constants >= 0, n_terms u < 1")
    coefs = _hand_gen_grad_coefs(*consts, n_terms, n_chunks) if got is _NO_ORACLE else tuple(F_(c) for c in got)
    return _grad_coef_sum(coefs, (entry_abs, grad_abs, operand_abs), n_terms)


def _exp_factor(logit_error: float, lse_error: float, max_abs_arg: float, exp_error: float) -> Fraction:
    """``Fe = (1 + ue) X`` with ``X >= exp(delta + Dl + u Am + ea)`` (``1 + perturbation_q(x / 2)``
    from the oracle, else ``1 + x + x^2``), exact rationals; ``ValueError`` when ``x > 1``."""
    for name, v in (
        ("logit_error", logit_error),
        ("lse_error", lse_error),
        ("max_abs_arg", max_abs_arg),
        ("exp_error", exp_error),
    ):
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
    prob_abs: torch.Tensor,
    grad_abs: torch.Tensor,
    operand_abs: torch.Tensor,
    token_weight: torch.Tensor,
    *,
    n_terms: int,
    dtype: torch.dtype,
    scale: float,
    storage_rounding: str = "nearest",
    **premises: float,
) -> torch.Tensor:
    """Per-entry bounds on dH (grad_input [N, D]) of the 4-product schedule of
    kernels/ojas_kernels/linear_cross_entropy_four_products.py (reduction "none", or ``products=4``; no bias, softcap,
    smoothing, z-loss, float16): the forward's row ``rnd_s(rnd(alpha G W))`` (G with token weight 1),
    times the token's float32 grad_output ``g`` in the backward, rounded once to ``dtype``.
    Implements ``Ojas.LinearCrossEntropy.Float.WeightedGradError.ce_dh4_error``::

        bound = Kg |g| B1 + (Kg - 1) |g| a0 T + cw0,  Kg = (1 + us)(1 + u),  cw0 = (1 + us) ea + es,

    ``B1`` :func:`linear_cross_entropy_grad_error_bound` at ``n_chunks = 1`` on the same sums
    (``ce_dh_error``: the forward's row; its ``logit_error`` the float32 logits' own, not rounded to
    ``dtype``, and ``lse_error`` the merged lse's: :func:`linear_cross_entropy_merge_lse_error_bound`,
    composed in Coq by ``ce_dh4_error_two_level``),
    ``T = grad_abs``, ``a0 = scale``, ``token_weight`` [N] (or [1]) the grad_output of each row.
    ``premises``: ``logit_error``, ``lse_error``, ``max_abs_arg``, ``exp_error`` as there. Not
    covered: as ``ce_dh4_error`` says (rocq/LinearCrossEntropy/Float/WeightedGradError.v)."""
    b1 = linear_cross_entropy_grad_error_bound(
        prob_abs,
        grad_abs,
        operand_abs,
        n_terms=n_terms,
        dtype=dtype,
        scale=scale,
        storage_rounding=storage_rounding,
        **premises,
    )
    u, ea = Fraction(_FP32_U), Fraction(_FP32_ETA)
    us, es = (Fraction(x) for x in _storage(dtype, storage_rounding))
    kg = (1 + us) * (1 + u)
    g = token_weight.to(torch.float64).abs().reshape(-1, 1)
    t = _enlarged(grad_abs, n_terms) * float(scale)
    return (_float_up(kg) * g * b1 + _float_up(kg - 1) * g * t + _float_up((1 + us) * ea + es)) * _ROUND_UP


def linear_cross_entropy_weighted_dw_error_bound(
    prob_abs: torch.Tensor,
    grad_abs: torch.Tensor,
    weighted_operand_abs: torch.Tensor,
    operand_abs: torch.Tensor,
    *,
    n_terms: int,
    dtype: torch.dtype,
    weight_error: float = 0.0,
    logit_error: float,
    lse_error: float,
    max_abs_arg: float,
    exp_error: float = LINEAR_CROSS_ENTROPY_EXP_ERROR,
    storage_rounding: str = "nearest",
) -> torch.Tensor:
    """Per-entry bounds on dW (grad_weight [V, D]) of the 4-product schedule (``_backward_weight``:
    G = ``rnd_s(rnd(g_e w_n))`` with the float32 token weight ``w_n`` inside, from the recomputed
    float32 logits and the forward's lse; ``G_slab^T H`` one product over all ``n_terms`` kept
    tokens, accumulated in float32 and rounded once to ``dtype``). Implements
    ``Ojas.LinearCrossEntropy.Float.WeightedGradError.ce_dw4_error``::

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
    ``ce_dw4_error`` says (rocq/LinearCrossEntropy/Float/WeightedGradError.v)."""
    if not (isinstance(n_terms, int) and 1 <= n_terms and n_terms * _FP32_U < 1.0):
        raise ValueError(f"n_terms must be an int >= 1 with n_terms * 2^-24 < 1, got {n_terms!r}")
    if not (isinstance(weight_error, (int, float)) and 0 <= weight_error < 1):
        raise ValueError(f"weight_error must be a number in [0, 1), got {weight_error!r}")
    fe = _exp_factor(logit_error, lse_error, max_abs_arg, exp_error)
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
