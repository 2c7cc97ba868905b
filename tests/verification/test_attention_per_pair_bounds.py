"""The per-pair score-error bounds (``Ojas.Attention.Float.PerPairScoreError``, rocq/Attention/Float/
PerPairScoreError.v): ``attention_lse_error_bound(score_shift=Dsc)`` (``attention_lse_error_masked_tf32x3_op_pp``,
``_masked_dot_pp``: ``lse_bound`` with ``Dsc`` in place of ``delta``) and ``attention_forward_running_bound(
score_perturbation=Yw)`` (``attention_forward_acc_running_tf32x3_op_pp``, ``_tc_op_pp``) against exact rational
evaluations of the .v definitions written here; ``forward_per_pair_sums``' ``Dsc`` and ``Yw`` against their
definitions over the float64 softmax; the interpreter's kernel within both bounds at the H100's dot models and
the bounds below the uniform ones; bad arguments. CPU only."""

from __future__ import annotations

import math
import os
from fractions import Fraction

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from ojas_ref.verification import attention_error as ae  # noqa: E402
from ojas_ref.verification import attention_forward_running as afr  # noqa: E402
from ojas_ref.verification import score_errors as se  # noqa: E402
from ojas_ref.verification.bounds import attention as ab  # noqa: E402
from ojas_ref.verification.bounds import common  # noqa: E402

F64 = torch.float64
U = Fraction(2) ** -24
EA = Fraction(2) ** -150
EE = Fraction(2) ** -126


# --- the .v definitions, over exact rationals ---


def _afe_bL(ue, n, N, Tt, X, P1, CG, CR):
    H = P1 * ((1 + ue) * X)
    return H * CG * X - 1 + Tt * CR * (((H * CG * X) * N * EE) * (1 + U) + EA + P1 * (n * EE)) * (1 + U)


def _lse_bound(u, ea, el, ucl, smax, delta, LN, NL):
    """SavedLseError.v's ``lse_bound``."""
    A = smax + 2 * (LN + NL) + el
    A2 = (1 + u) * A + ea
    return u * A2 * (1 + ucl) + ea + A2 * ucl + (u * A + ea) + el + NL + delta


def _score_max_delta(dot, E, P, scale):
    """``score_max_de``, ``score_delta_de`` (ForwardError.v) at the dot's ``g_rel P + g_abs``."""
    uc = Fraction(ab._QK_SCALE_ERROR)
    g_rel, g_abs = ab.dot_error_constants(dot, E)
    de = g_rel * P + g_abs
    return 2 * (scale * (1 + uc) * (P + de)) * (1 + U) + EA, scale * ((P + de) * (U * (1 + uc) + uc) + de) + EA


LSE_CASES = [  # (dot, n_keys, head_dim, block_n, qk_abs_sum)
    (ab.TF32X3_H100, 4096, 128, 64, 140.0),
    (ab.TF32X3_H100, 1, 16, 16, 3.0),
    (ab.TENSOR_CORE_BF16_H100, 1000, 64, 32, 60.0),
    ("fp32", 4096, 128, 64, 140.0),
]


@pytest.mark.parametrize("dot,n,e,bn,p", LSE_CASES, ids=[f"{c[0]}-N{c[1]}"[:40] for c in LSE_CASES])
def test_lse_closed_form_is_the_v_files(dot, n, e, bn, p):
    """``lse_bound(Dsc) = lse_bound(0) + Dsc`` of the .v file at ``_lse_bound_q``'s constants exactly (dot
    models; "fp32" through the oracle: at most the exact value at the same ``LN``, within ``1e-6`` relative);
    ``LN >= ln n`` certified; the public bound rounds it up, per row for a tensor, ``Dsc`` capped at ``delta``
    where it is the uniform bound (within ``1e-8``: its float64 hand copy rounds up more)."""
    scale = 1.0 / math.sqrt(e)
    args = ab._lse_args(n, ab.LOG2_ERROR, ab.EXP2_ERROR, scale, p)
    tiles = -(-n // bn)
    base, delta = ab._lse_bound_q(dot, args, e, bn, n, tiles)
    smax, delta_v = _score_max_delta(dot, e, Fraction(p), Fraction(scale))
    assert delta == delta_v
    ue = Fraction(ab.EXP2_ERROR)
    X = ab._exp_up(U * 2 * smax)
    P1, CG = ab._pow_up(1 + U, bn - 1), ab._pow_up((1 + ue) * (1 + U) ** 2, tiles)
    CR = ab._pow_up((1 + ue + EE) * (1 + U) ** 2, tiles)
    assert Fraction(2) ** (U * 2 * smax) <= X  # Rpower 2 .. <= X, as e^x >= 2^x
    bL = _afe_bL(ue, bn, n, tiles, X, P1, CG, CR)
    LN = ab._ln_up(n)
    assert n <= ab._exp_down(LN) and math.log(n) <= float(LN) < math.log(n) + 1e-10
    want = _lse_bound(U, EA, Fraction(ab.LOG2_ERROR), Fraction(ab._LN2_CONST_ERROR), smax, 0, LN, bL / (1 - bL))
    if dot == "fp32" and common.oracle_bounds_available():
        assert want * (1 - Fraction(1, 10**6)) <= base <= want  # the oracle's X, LN slightly tighter
    else:
        assert base == want
    kw = dict(block_n=bn, max_abs_q=1.0, max_abs_k=1.0, qk_abs_sum=p, dot=dot)
    for shift in (0.0, 1e-7, float(delta) / 2):
        got = ab.attention_lse_error_bound(n, e, score_shift=shift, **kw)
        assert got == common._float_up(base + Fraction(shift))
    shifts = torch.tensor([0.0, 1e-7, 3e-6, 10.0], dtype=F64)
    rows = ab.attention_lse_error_bound(n, e, score_shift=shifts, **kw)
    assert rows.shape == shifts.shape and bool((rows[1:] >= rows[:-1]).all())
    for i in range(3):
        assert Fraction(rows[i].item()) >= base + min(Fraction(shifts[i].item()), delta)
    uniform = ab.attention_lse_error_bound(n, e, **kw)
    assert Fraction(rows[3].item()) >= base + delta and abs(uniform - rows[3].item()) < 1e-8
    print(f"{dot} N={n}: lse_bound(0) {float(base):.3e} delta {float(delta):.3e} uniform {uniform:.3e}")


FWD_CASES = [  # (dot, dtype, n_keys, head_dim, block_n, max_abs_v, qk_abs_sum)
    (ab.TF32X3_H100, torch.float32, 4096, 128, 64, 5.0, 140.0),
    (ab.TF32X3_H100, torch.float32, 1, 16, 16, 1.0, 3.0),
    (ab.TENSOR_CORE_BF16_H100, torch.bfloat16, 16384, 128, 64, 5.5, 150.0),
]


@pytest.mark.parametrize("dot,dtype,n,e,bn,v,p", FWD_CASES, ids=[f"{c[1]}-N{c[2]}"[6:] for c in FWD_CASES])
def test_forward_closed_form_is_the_v_files(dot, dtype, n, e, bn, v, p):
    """``_afr_bounds(per_pair=True)``: ``afr_rel``, ``afr_C`` at ``Y = 0`` and ``afr_ypp`` of the .v files
    exactly; the public bound is ``rel W + C R + ypp Yw + abs`` rounded up, at least the exact value, and at
    ``Yw = Y W`` (the uniform case, ``d = Dsc = delta``) at most the uniform running bound."""
    args, tiles = ab._afe_args(n, bn, dtype, "nearest", ab.EXP2_ERROR, 1.0 / math.sqrt(e), p, v)
    c = ab._afa_constants(dot, args, e, bn, tiles)
    ue, us, X = c["ue"], c["us"], c["X"]
    uni = ab._afr_bounds(dot, args, e, bn, n, tiles)
    pp = ab._afr_bounds(dot, args, e, bn, n, tiles, per_pair=True)
    CB = ab._pow_up(1 + uni["gb"], tiles)
    bL = _afe_bL(ue, bn, n, tiles, X, c["P1"], c["CG"], c["CR"])
    gA = CB * ((1 + us) * (1 + ue) * X * X - 1)
    assert pp["gb"] == uni["gb"] and pp["abs"] == uni["abs"]
    assert pp["rel"] == ((1 + U) * (gA + bL) / (1 - bL) + U) * (1 + us) + us
    assert pp["C"] == (1 + us) * (1 + U) * X / (1 - bL)
    assert pp["ypp"] == ((1 + U) * (gA + bL + X * (CB - 1)) / (1 - bL) + U + 1) * (1 + us)
    kw = dict(block_n=bn, dtype=dtype, max_abs_q=1.0, max_abs_k=1.0, max_abs_v=v, qk_abs_sum=p, dot=dot)
    w = torch.tensor([0.0, 0.5, v], dtype=F64)
    r = torch.tensor([0.0, 3.0, 1e-3], dtype=F64)
    yw = w * float(c["Y"])
    got = ab.attention_forward_running_bound(w, r, n, e, score_perturbation=yw, **kw)
    old = ab.attention_forward_running_bound(w, r, n, e, **kw)
    for i in range(3):
        exact = pp["rel"] * Fraction(w[i].item()) + pp["C"] * Fraction(r[i].item()) + pp["abs"]
        assert Fraction(got[i].item()) >= exact + pp["ypp"] * Fraction(yw[i].item())
    assert bool((got <= old * (1 + 1e-12)).all())
    print(f"{dot} N={n}: ypp {float(pp['ypp']):.4f} rel {float(pp['rel']):.3e} (uniform {float(uni['rel']):.3e})")


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_per_pair_sums_bound_their_definitions(causal):
    """``Dsc >= ln sum_j P_j e^(d_j)`` and ``Yw >= sum_j P_j |v_j| (e^(d_j + Dsc) - 1)`` over the float64
    softmax (exact to ``1e-12`` here), within 1% of them (the bounds are tight), ``Dsc <= max_j d_j``; ``W``,
    ``R`` those of ``forward_running_sums``. GQA, S cut by the tiles."""
    gen = torch.Generator().manual_seed(5)
    s, e, ev = 45, 32, 3
    q = torch.randn(1, 4, s, e, generator=gen)
    k, v = torch.randn(1, 2, s, e, generator=gen), torch.randn(1, 2, s, ev, generator=gen)
    scale, dot = 1.0 / math.sqrt(e), ab.TF32X3_H100
    es = ae._score_error(q, scale, ae._qk_abs_sum(q, k))
    kw = dict(block_n=8, block_m=16, score_error=es)
    w, r, yw, dsc = afr.forward_per_pair_sums(q, k, v, causal, scale, 1e-6, dot=dot, **kw)
    w0, r0 = afr.forward_running_sums(q, k, v, causal, scale, 1e-6, **kw)
    assert torch.equal(w, w0) and torch.equal(r, r0)
    kr, vr = k.repeat_interleave(2, 1), v.to(F64).repeat_interleave(2, 1)
    pr = torch.softmax(ae._scores(0, q.to(F64), kr.to(F64), causal, scale), -1)
    d = se.score_errors(q, k, causal, scale, dot)
    shift = torch.log1p((pr * torch.expm1(d)).sum(-1))
    want = (pr * torch.expm1(d + dsc[..., None])) @ vr.abs()
    assert bool((dsc >= shift * (1 - 1e-12)).all()) and bool((dsc <= shift * 1.01).all())
    assert bool((dsc <= d.amax(-1)).all()) and float(dsc.min()) > 0
    assert bool((yw >= want * (1 - 1e-12)).all()) and bool((yw <= want * 1.01 + 1e-300).all())


# --- the interpreter's kernel within the per-pair bounds at the H100's dot models ---

KERNEL_CASES = [  # (dtype, hq, hkv, S, E, causal); the interpreter's tiles are 16 x 16
    (torch.float32, 2, 2, 64, 32, False),
    (torch.float32, 4, 2, 90, 32, True),
    (torch.float32, 2, 1, 1, 16, True),
    (torch.float32, 1, 1, 512, 32, False),
    (torch.bfloat16, 2, 1, 50, 32, False),
    (torch.bfloat16, 4, 2, 40, 32, True),
]


@pytest.mark.interpreter
@pytest.mark.parametrize(
    "dtype,hq,hkv,s,e,causal",
    KERNEL_CASES,
    ids=[f"{str(c[0])[6:]}-S{c[3]}-{'causal' if c[5] else 'full'}-gqa{c[1] // c[2]}" for c in KERNEL_CASES],
)
def test_interpreter_kernel_within_the_per_pair_bounds(dtype, hq, hkv, s, e, causal, monkeypatch):
    """With ``kernel_dot`` the H100's model, the interpreter's output and saved lse are within the per-pair
    bounds (entry by entry, row by row; its IEEE float32 dots are not the model's, whose per-pair errors
    ``d`` the bounds take: a check of the other terms' slack, not of ``d``), at most the uniform ones
    (running bound, ``lse_error_bound``), the lse's by a factor below 0.7 (measured 0.42 to 0.68); float32's
    output from 64 keys on by a factor below 0.6 (measured 0.30 to 0.56)."""
    if torch.cuda.is_available():
        pytest.skip("the interpreter's dots")
    pytest.importorskip("triton")
    from ojas_kernels.attention import flash_attention_forward

    gen = torch.Generator().manual_seed(21)
    q, k, v = (torch.randn(1, h, s, e, generator=gen).to(dtype) for h in (hq, hkv, hkv))
    scale = 1.0 / math.sqrt(e)
    out, lse = flash_attention_forward(q, k, v, causal, scale, None)
    ent = (out.to(F64) - ae.exact_attention(q, k, v, causal, scale)).abs()
    lse_err = (lse.to(F64) - ae.exact_lse(q, k, causal, scale)).abs()
    model = ab.TF32X3_H100 if dtype == torch.float32 else ab.TENSOR_CORE_BF16_H100
    monkeypatch.setattr(ae, "kernel_dot", lambda device_type, dt: model)
    out_b, lse_b = afr.forward_per_pair_bounds(q, k, v, causal, scale)
    assert torch.equal(afr.forward_running_bound(q, k, v, causal, scale, per_pair=True), out_b)
    run = afr.forward_running_bound(q, k, v, causal, scale)
    # the uniform lse bound alone (ae.lse_error_bound takes its minimum with the per-pair one)
    bnd, errs = ae._bound_inputs(q, k, causal, None), ae.unary_errors(q.device.type, k.shape[2])
    lse_u = ab.attention_lse_error_bound(k.shape[2], e, scale=scale, dot=model, **errs, **bnd)
    out_ratio, lse_ratio = (out_b / run).max().item(), lse_b.max().item() / lse_u
    print(
        f"out: observed {ent.max().item():.3e} per-pair {out_b.max().item():.3e} uniform {run.max().item():.3e} "
        f"max ratio {out_ratio:.3f}; lse: observed {lse_err.max().item():.3e} per-pair {lse_b.max().item():.3e} "
        f"uniform {lse_u:.3e} ratio {lse_ratio:.3f}"
    )
    assert lse_b.shape == lse.shape and out_b.shape == out.shape
    assert bool((ent <= out_b).all()) and bool((lse_err <= lse_b).all())
    assert out_ratio <= 1 and lse_ratio < 0.7
    if dtype == torch.float32 and s >= 64:
        assert out_ratio < 0.6


def test_bad_arguments_raise():
    kw = dict(block_n=64, max_abs_q=1.0, max_abs_k=1.0, dot=ab.TF32X3_H100)
    for shift in (-1.0, math.nan, math.inf, "0", torch.tensor([0.0, -1e-9]), torch.tensor([math.inf])):
        with pytest.raises(ValueError, match="score_shift must be"):
            ab.attention_lse_error_bound(4096, 128, score_shift=shift, **kw)
    with pytest.raises(ValueError, match="afe_bL < 1 of attention_lse_error"):
        ab.attention_lse_error_bound(4096, 128, score_shift=0.0, exp2_error=0.5, **kw)
    fkw = dict(kw, dtype=torch.float32, max_abs_v=1.0)
    w = torch.ones(2, dtype=F64)
    for yw, match in (
        (-w, "score_perturbation must be"),
        (w * math.nan, "score_perturbation must be"),
        (torch.ones(3, dtype=F64), "score_perturbation must have"),
    ):
        with pytest.raises(ValueError, match=match):
            ab.attention_forward_running_bound(w, w, 4096, 128, score_perturbation=yw, **fkw)
    with pytest.raises(ValueError, match="dot must be a Tf32x3Dot"):
        ab.attention_forward_running_bound(w, w, 4096, 128, score_perturbation=w, **dict(fkw, dot="fp32"))
    with pytest.raises(ValueError, match="expm1_upper needs"):
        afr.expm1_upper(torch.tensor([0.1, 0.5], dtype=F64))
    q = torch.randn(1, 2, 8, 4)
    with pytest.raises(ValueError, match="dot must be a Tf32x3Dot"):  # the interpreter's "fp32"
        afr.forward_per_pair_bounds(q, q, q, False, 0.5)
    with pytest.raises(ValueError, match="block_n must be"):
        afr.forward_per_pair_sums(q, q, q, False, 0.5, 1e-6, block_n=0, block_m=4, score_error=0.0, dot=ab.TF32X3_H100)
