"""Per-pair score error bounds (ojas_ref/verification/score_errors.py) and their use in the running
backward bounds and ``lse_score_error`` (ojas_ref/verification/attention_error.py).

* :func:`score_errors.model_dots` equals ``kernel_schedule.tf32x3_dot`` / ``accumulate`` (the models
  checked bit for bit against the H100's kernels) bit for bit, both operand orders, zeros, wide exponents;
* :func:`score_errors.model_scores` equals an independent computation of the kernel's scores
  (``kernel_schedule``'s dot times the launch's float32 ``qk_scale``); a mutant skipping the final float32
  rounding is caught;
* the per-pair bound is at least the exact error ``|s2 ln 2 - scale q.k|`` (exact rationals and 200-bit ln 2)
  on every visible pair (full, causal, GQA, S = 1, huge magnitudes), 0 at masked pairs, at most the dot
  model's worst case at the pair's ``sum |q k|``;
* ``exp2_factor_minus_one`` and ``lse_score_error`` against high-precision values;
* the running dV / dQ / dK bounds with the per-pair deltas within the interpreter kernels' errors with
  ``kernel_dot`` = ``TF32X3_H100`` (a sanity check only: the interpreter's dots are numpy's float32
  matmuls, not the model whose scores the deltas bound) and tighter than with the worst-case deltas.
"""

from __future__ import annotations

import os
from fractions import Fraction

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

pytest.importorskip("triton")
mpmath = pytest.importorskip("mpmath")

from ojas_ref.verification import attention_error as ae  # noqa: E402
from ojas_ref.verification import score_errors as se  # noqa: E402
from ojas_ref.verification.bounds import attention as ab  # noqa: E402
from ojas_ref.verification.bounds import attention_running as ar  # noqa: E402
from ojas_ref.verification.bounds import certified as cb  # noqa: E402
from ojas_ref.verification.device_premises import Accumulation  # noqa: E402
from ojas_ref.verification.kernel_schedule import Tf32x3, accumulate, tf32x3_dot  # noqa: E402

F32, F64 = torch.float32, torch.float64
mpmath.mp.prec = 200
MODELS = {"tf32x3": (ab.TF32X3_H100, F32), "bf16": (ab.TENSOR_CORE_BF16_H100, torch.bfloat16)}


def _acc(dot) -> Accumulation:
    return Accumulation(dot.block, dot.bits, "trunc", dot.out, dot.ref)


def _reference_dots(a: torch.Tensor, b: torch.Tensor, dot) -> torch.Tensor:
    """``kernel_schedule``'s model of ``dot(a, b^T)`` (a [R, E], b [S, E]), float64."""
    zero = torch.zeros(a.shape[0], b.shape[0])
    if isinstance(dot, ab.Tf32x3Dot):
        return tf32x3_dot(Tf32x3(_acc(dot), "trunc", "chain(0)+c", (0, 1, 2)), a, b.t(), zero).to(F64)
    return accumulate(_acc(dot), a.float(), b.float().t(), zero).to(F64)


def _rows(r: int, e: int, seed: int, spread: int = 8) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(r, e, generator=gen) * torch.exp2(torch.randint(-spread, spread, (r, e), generator=gen).float())
    x[0] = 0.0  # a zero row
    x[1, : e // 2] = 0.0  # zero blocks
    return x


@pytest.mark.parametrize("name", list(MODELS))
def test_model_dots_equal_the_kernel_schedule_models(name):
    """Bit for bit, both orders (3xTF32 is not symmetric: they differ on some pairs), E not a multiple of
    the block."""
    dot, dtype = MODELS[name]
    a, b = _rows(9, 100, 1).to(dtype), _rows(31, 100, 2).to(dtype)
    got = se.model_dots(a, b, dot)
    assert torch.equal(got, _reference_dots(a, b, dot))
    assert torch.equal(se.model_dots(b, a, dot), _reference_dots(b, a, dot))
    if name == "tf32x3":
        q, k = torch.randn(64, 128, generator=torch.Generator().manual_seed(3)), torch.randn(64, 128)
        assert not torch.equal(se.model_dots(q, k, dot), se.model_dots(k, q, dot).t())


def _independent_scores(q: torch.Tensor, k: torch.Tensor, scale: float, dot) -> torch.Tensor:
    """The kernel's scores by another path: ``kernel_schedule``'s dot times the launch's float32
    ``qk_scale`` (``attention_args._launch_args``), as ``forward_schedule`` forms them."""
    from ojas_kernels.attention_args import _launch_args

    qk_scale = _launch_args(q[None, None], k[None, None], k[None, None], None, False, scale, None, None)[4]
    return (_reference_dots(q, k, dot).to(F32) * torch.tensor(qk_scale, dtype=F32)).to(F64)


def _scores_match(q: torch.Tensor, k: torch.Tensor, scale: float, dot) -> bool:
    return torch.equal(se.model_scores(q, k, scale, dot), _independent_scores(q, k, scale, dot))


@pytest.mark.parametrize("name", list(MODELS))
def test_model_scores_match_and_a_rounding_mutant_is_caught(name, monkeypatch):
    """``model_scores`` equals the independent computation; without the final float32 rounding of
    ``D * c`` (the product in float64) it does not."""
    dot, dtype = MODELS[name]
    q, k = _rows(16, 64, 4).to(dtype), _rows(24, 64, 5).to(dtype)
    assert _scores_match(q, k, 0.125, dot)

    def unrounded(a, b, scale, dot):
        return se.model_dots(a, b, dot) * float(torch.tensor(scale * se.LOG2E, dtype=F32))

    monkeypatch.setattr(se, "model_scores", unrounded)
    assert not _scores_match(q, k, 0.125, dot)


def _exact_error(s2: float, q: list[float], k: list[float], scale: float):
    exact = Fraction(scale) * sum(Fraction(a) * Fraction(b) for a, b in zip(q, k))
    return abs(mpmath.mpf(s2) * mpmath.log(2) - mpmath.mpf(exact.numerator) / exact.denominator)


CASES = [  # (model, hq, hkv, S, E, causal, magnitude)
    ("tf32x3", 2, 1, 24, 64, False, 1.0),
    ("tf32x3", 2, 2, 24, 48, True, 1.0),
    ("tf32x3", 1, 1, 1, 32, True, 1.0),
    ("tf32x3", 1, 1, 12, 32, False, 2.0**12),
    ("tf32x3", 1, 1, 12, 32, False, 2.0**-20),
    ("bf16", 2, 1, 24, 64, True, 1.0),
    ("bf16", 1, 1, 12, 32, False, 2.0**12),
]


@pytest.mark.parametrize("model,hq,hkv,s,e,causal,mag", CASES)
@pytest.mark.parametrize("operands", ["qk", "kq", "both"])
def test_bound_holds_on_every_visible_pair(model, hq, hkv, s, e, causal, mag, operands):
    """The bound >= the exact error of the model's score of each order it covers, 0 where masked, at most
    the worst case, and (at magnitude 1) well below it on average."""
    dot, dtype = MODELS[model]
    gen = torch.Generator().manual_seed(s + e)
    q = (torch.randn(1, hq, s, e, generator=gen) * mag).to(dtype)
    k = (torch.randn(1, hkv, s, e, generator=gen) * mag).to(dtype)
    scale = e**-0.5
    d = se.score_errors(q, k, causal, scale, dot, operands, rows=7)
    kr = k.repeat_interleave(hq // hkv, 1)
    firsts = {"qk": ["q"], "kq": ["k"], "both": ["q", "k"]}[operands]
    for first in firsts:
        s2 = se._scores_of(q, kr, first, scale, dot)
        for h in range(hq):
            for i in range(s):
                for j in range(s):
                    if causal and j > i:
                        assert d[0, h, i, j] == 0.0
                        continue
                    err = _exact_error(s2[0, h, i, j].item(), q[0, h, i].tolist(), kr[0, h, j].tolist(), scale)
                    assert err <= d[0, h, i, j].item(), (first, h, i, j)
    worst = se._worst_case(cb.matmul_upper(q.double().abs(), kr.double().abs().transpose(-1, -2)), dot, e, scale)
    vis = d > 0
    assert (d <= worst).all()
    if mag == 1.0:
        assert (d[vis] / worst[vis]).mean() < 0.1


def test_fp32_is_the_worst_case_alone():
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 1, 8, 16, generator=gen), torch.randn(1, 1, 8, 16, generator=gen)
    d = se.score_errors(q, k, False, 0.25, "fp32")
    worst = se._worst_case(cb.matmul_upper(q.double().abs(), k.double().abs().transpose(-1, -2)), "fp32", 16, 0.25)
    assert torch.equal(d, worst)


def test_bad_arguments_raise():
    q = torch.randn(1, 1, 4, 8)
    with pytest.raises(ValueError, match="operands"):
        se.score_errors(q, q, False, 0.5, ab.TF32X3_H100, "kk")
    with pytest.raises(ValueError, match="leading and head"):
        se.score_error_block(0, q, torch.randn(1, 1, 4, 16), False, 0.5, ab.TF32X3_H100)
    with pytest.raises(ValueError, match="Hkv dividing Hq"):
        se.score_errors(torch.randn(1, 3, 4, 8), torch.randn(1, 2, 4, 8), False, 0.5, ab.TF32X3_H100)
    with pytest.raises(ValueError, match="dot"):
        se.model_dots(q[0, 0], q[0, 0], "fp32")
    with pytest.raises(ValueError, match="overflow"):
        se.score_errors(q * 1e19, q * 1e19, False, 1.0, ab.TF32X3_H100)


def _mp(x: Fraction):
    return mpmath.mpf(x.numerator) / x.denominator


def test_exp2_factor_minus_one_bounds_the_power():
    """At least ``2^((delta + Dl) / ln 2 + u Am + ea) - 1`` (the running theorems' premise, 200-bit), within
    1% of it for small arguments."""
    dl, am = Fraction(3, 10**6), Fraction(40)
    delta = torch.tensor([0.0, 1e-9, 1e-6, 1e-3, 0.1], dtype=F64)
    x1 = ar.exp2_factor_minus_one(delta, dl, am)
    u, ea = Fraction(ab._FP32_U), Fraction(ab._FP32_ETA)
    with mpmath.workprec(200):
        for dx, got in zip(delta.tolist(), x1.tolist()):
            power = mpmath.power(2, _mp(Fraction(dx) + dl) / mpmath.log(2) + _mp(u * am + ea)) - 1
            assert got >= power
            if dx <= 1e-3:  # y / (1 - y) exceeds e^y - 1 by a relative y / 2 or so
                assert got <= 1.01 * float(power)
    with pytest.raises(ValueError, match="too large"):
        ar.exp2_factor_minus_one(torch.tensor([0.6], dtype=F64), dl, am)


@pytest.mark.parametrize("tensor_dl", [False, True], ids=["number", "rows"])
def test_exp2_arg_is_the_new_premise_below_the_old(tensor_dl):
    """The exponent ``y`` of ``exp2_factor_minus_one``: at least ``(delta + Dl) + (u Am + ea) ln 2`` (exact
    rationals, ``LN2_UP`` above the 200-bit ln 2), at most the old premise's ``(2 delta + 2 Dl + u Am + ea)
    ln 2`` evaluated as before (``Rpower 2 (2 (delta + Dl) + ...)``), on a few values."""
    with mpmath.workprec(200):
        assert _mp(ar.LN2_UP) > mpmath.log(2)
    u, ea = Fraction(ab._FP32_U), Fraction(ab._FP32_ETA)
    delta = torch.tensor([0.0, 2.0**-1074, 1e-9, 1e-6, 1e-3, 0.1], dtype=F64)
    for dl, am in ((Fraction(0), Fraction(0)), (Fraction(3, 10**6), Fraction(40)), (Fraction(1, 7), Fraction(10**4))):
        arg = torch.tensor([float(dl)] * len(delta), dtype=F64) if tensor_dl else dl
        dlq = Fraction(float(dl)) if tensor_dl else dl
        y = ar._exp2_arg(delta, arg, am)
        c0 = (
            cb.add_upper(cb.scale_upper(arg, 2 * ar.LN2_UP), ab._float_up((u * am + ea) * ar.LN2_UP))
            if tensor_dl
            else ab._float_up((2 * dl + u * am + ea) * ar.LN2_UP)
        )
        old = cb.add_upper(cb.scale_upper(delta, 2 * ar.LN2_UP), c0)
        assert (y <= old).all()
        for dx, got in zip(delta.tolist(), y.tolist()):
            assert Fraction(got) >= Fraction(dx) + dlq + (u * am + ea) * ar.LN2_UP


@pytest.mark.parametrize("causal", [False, True])
def test_lse_score_error_bounds_the_softmax_mean(causal, monkeypatch):
    """``Dsc_i >= ln sum_j P_ij e^(d_ij)`` (P the exact softmax, 200-bit), at most ``max_j d_ij``."""
    monkeypatch.setattr(ae, "kernel_dot", lambda device_type, dtype: ab.TF32X3_H100)
    gen = torch.Generator().manual_seed(7)
    q, k = torch.randn(1, 2, 10, 32, generator=gen), torch.randn(1, 1, 10, 32, generator=gen)
    scale = 32**-0.5
    dsc = ae.lse_score_error(q, k, causal, scale)
    d = se.score_errors(q, k, causal, scale, ab.TF32X3_H100)
    kr = k.repeat_interleave(2, 1)
    for h in range(2):
        for i in range(10):
            keys = range(i + 1) if causal else range(10)
            s = [
                Fraction(scale)
                * sum(Fraction(a) * Fraction(b) for a, b in zip(q[0, h, i].tolist(), kr[0, h, j].tolist()))
                for j in keys
            ]
            w = [mpmath.exp(mpmath.mpf(x.numerator) / x.denominator) for x in s]
            mean = sum(wj * mpmath.exp(d[0, h, i, j].item()) for wj, j in zip(w, keys)) / sum(w)
            # 200-bit exp / log: a relative 1e-50 of slack where Dsc = max d = ln(e^d)
            assert mpmath.log(mean) <= dsc[0, h, i].item() * (1 + mpmath.mpf(10) ** -50)
            assert dsc[0, h, i].item() <= d[0, h, i].max().item()


# ---------------------------------------------------------------------------
# The running bounds with the per-pair deltas, against the interpreter's kernels
# ---------------------------------------------------------------------------


def _worst_block(r0, q, k, is_causal, scale, dot, operands="qk", scores=None):
    """``score_error_block`` with the worst case alone (the deltas of the previous bounds, per pair); ``scores``
    (the model's, when cached) not read."""
    qf, kf = q.to(F64), k.to(F64)
    w = se._worst_case(cb.matmul_upper(qf.abs(), kf.abs().transpose(-1, -2)), dot, q.shape[-1], scale)
    if is_causal:
        i = torch.arange(r0, r0 + q.shape[-2])[:, None]
        w = w.masked_fill(torch.arange(k.shape[-2])[None, :] > i, 0.0)
    return w


RUN_CASES = [
    (torch.float32, 2, 1, 64, 32, True),
    (torch.float32, 1, 1, 1, 16, True),
    (torch.float32, 2, 2, 40, 32, False),
]


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype,hq,hkv,s,e,causal", RUN_CASES)
def test_running_bounds_with_pair_deltas_hold_and_are_tighter(dtype, hq, hkv, s, e, causal, monkeypatch):
    """dV / dQ / dK of the interpreter's kernels within the running bounds at ``TF32X3_H100``; each bound at
    most the same bound with the worst-case per-pair deltas (ratios printed)."""
    if torch.cuda.is_available():
        pytest.skip("the interpreter's dots")
    from ojas_kernels.attention import flash_attention, flash_attention_forward

    monkeypatch.setattr(ae, "kernel_dot", lambda device_type, dtype: ab.TF32X3_H100)
    gen = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(1, h, s, e, generator=gen).to(dtype) for h in (hq, hkv, hkv))
    do = torch.randn(1, hq, s, e, generator=gen).to(dtype)
    scale = e**-0.5
    qq, kk, vv = (x.clone().requires_grad_() for x in (q, k, v))
    flash_attention(qq, kk, vv, causal, scale).backward(do)
    out, lse = flash_attention_forward(q, k, v, causal, scale, None)
    c = ae._backward_constants(q, k, causal, scale)
    lse_err = ab.attention_lse_error_bound(s, e, scale=scale, dot=c["dot"], **c["errs"], **c["bnd"])
    ex_dv, pad = ae.exact_dv(q, k, do, causal, scale)
    ed, lse_m = ae._grad_premises(q, k, v, do, out, lse, causal, scale, "measured", c)
    ex = ae.exact_grads(q, k, v, do, causal, scale, ed)

    def bounds():
        run = ae._grad_running_bounds(q, k, v, do, causal, scale, c, ed, lse_m, ex)
        return dict(dv=ae._dv_running_bound(q, k, do, pad, causal, scale, c, lse_err), **run)

    new = bounds()
    monkeypatch.setattr(se, "score_error_block", _worst_block)
    old = bounds()
    errs = dict(
        dv=(vv.grad.to(F64) - ex_dv).abs(), dq=(qq.grad.to(F64) - ex["dq"]).abs(), dk=(kk.grad.to(F64) - ex["dk"]).abs()
    )
    for name, err in errs.items():
        ratio = (new[name].max() / old[name].max()).item()
        print(
            f"S={s} E={e} causal={causal} {name}: observed {err.max().item():.3e}, per-pair deltas "
            f"{new[name].max().item():.3e}, worst-case deltas {old[name].max().item():.3e}, ratio {ratio:.3f}"
        )
        assert (err <= new[name]).all(), name
        assert (new[name] <= old[name]).all(), name


def test_causal_row_chunks_agree():
    """A causal block of more than ``_CAUSAL_ROWS`` rows (chunked, each chunk's later keys skipped) agrees
    with small blocks, and is 0 exactly above the diagonal."""
    gen = torch.Generator().manual_seed(9)
    s = se._CAUSAL_ROWS + 44
    q, k = torch.randn(1, 1, s, 16, generator=gen), torch.randn(1, 1, s, 16, generator=gen)
    big = se.score_errors(q, k, True, 0.25, ab.TF32X3_H100, "both", rows=s)
    small = se.score_errors(q, k, True, 0.25, ab.TF32X3_H100, "both", rows=50)
    assert torch.allclose(big, small, rtol=1e-4, atol=0)  # float64 matmuls of other shapes round otherwise
    upper = torch.ones(s, s, dtype=torch.bool).triu(1)
    assert (big[0, 0][upper] == 0).all() and (big[0, 0][~upper] > 0).all()
