"""The scores' dot model of the attention bounds (``dot=`` of ``ojas_ref.verification.bounds.attention``):
the blocked float32 sum (the default, ``Ojas.Attention.Float.ForwardError.blocked_dot_model``) gives
the bounds as before, and the 3xTF32 dots of the float32 kernels on CUDA (``tf32x3_tc_dot_model``,
``tf32x3_seq_dot_model``) their constants. CPU only."""

from __future__ import annotations

import math
from fractions import Fraction
from types import SimpleNamespace

import pytest
import torch

from ojas_ref.verification.bounds import attention as ab
from ojas_ref.verification.bounds import attention_running as ar
from ojas_ref.verification.bounds import common

U = Fraction(2) ** -24
ETA = Fraction(common._FP32_ETA)
SHAPES = [(1, 16, 16), (128, 64, 64), (4096, 128, 64), (16384, 128, 128)]  # (n_keys, head_dim, block_n)


def _gamma(u: Fraction, n: int) -> Fraction:
    return n * u / (1 - n * u)


def _fwd_kwargs(dtype=torch.float32) -> dict:
    return dict(dtype=dtype, max_abs_q=1.5, max_abs_k=2.0, max_abs_v=1.0)


@pytest.mark.parametrize("n", [1, 2, 64, 128, 1000])
def test_fp32_constants_are_dot_err(n):
    """The "fp32" dot is ``blocked_dot_model``: ``g_rel P + g_abs = dot_err n P`` exactly."""
    g_rel, g_abs = ab.dot_error_constants("fp32", n)
    p = Fraction(37, 3)
    assert g_rel * p + g_abs == _gamma(U, n) * p + (1 + _gamma(U, n - 1)) * n * ETA


@pytest.mark.parametrize("n", [1, 64, 128])
def test_tf32x3_constants(n):
    """Tf32Product.v's constants: ``c + gamma(3n - 1) kl + gamma(n) kh`` left to right,
    ``c + gamma_d(3q) kl + gamma_d(q) kh`` on tensor cores (``d = tc_delta``), no absolute term."""
    uh, ul = Fraction(1, 2048), Fraction(1, 1024)
    c = 5 * Fraction(2) ** -22 + Fraction(2) ** -31  # tf32x3_c_fp32
    assert uh * uh + 2 * uh * ul * (1 + uh) == c
    kl, kh = 2 * uh * (1 + ul) * (1 + uh), (1 + uh) ** 2
    assert ab.dot_error_constants("tf32x3", n) == (c + _gamma(U, 3 * n - 1) * kl + _gamma(U, n) * kh, 0)
    assert ab.dot_error_constants(ab.Tf32x3Dot(), n) == ab.dot_error_constants("tf32x3", n)
    for out, ur in (("truncate", 2 * U), ("nearest", U)):
        d = (1 + ur) * 9 * Fraction(2) ** -26 + ur  # tc_delta 8 at F = 27
        q = -(-n // 8)
        got = ab.dot_error_constants(ab.Tf32x3Dot(block=8, bits=27, out=out), n)
        assert got == (c + _gamma(d, 3 * q) * kl + _gamma(d, q) * kh, 0)


@pytest.mark.parametrize("n", [1, 64, 128])
def test_tensor_core_constants(n):
    """The 16-bit kernels' tensor-core dot (``tc_dot_model``): ``gamma_d(q)``, no absolute term."""
    for out, ur in (("truncate", 2 * U), ("nearest", U)):
        d = (1 + ur) * 5 * Fraction(2) ** -23 + ur  # tc_delta 4 at F = 24
        q = -(-n // 4)
        assert ab.dot_error_constants(ab.TensorCoreDot(block=4, bits=24, out=out), n) == (_gamma(d, q), 0)
    bound = ab.attention_forward_error_bound(
        4096, n, block_n=64, dot=ab.TensorCoreDot(block=8), **_fwd_kwargs(torch.bfloat16)
    )
    assert 0.0 < bound < math.inf


def test_tf32x3_seq_constant_above_fp32():
    """Left to right, the 3xTF32 dot's relative constant exceeds float32's ``gamma(n)`` by about ``c``."""
    for n in (1, 64, 128, 4096):
        g3, _ = ab.dot_error_constants("tf32x3", n)
        g1, _ = ab.dot_error_constants("fp32", n)
        assert g3 > g1 + Fraction(119, 10**8)


@pytest.mark.skipif(not common.oracle_bounds_available(), reason="needs the oracle (make -C extraction)")
@pytest.mark.parametrize("n", [1, 64, 128])
def test_fp32_score_terms_equal_the_oracles(n):
    """At the blocked instance the exact score terms (``score_max_de``, ``score_delta_de``) are the
    oracle's ``score_max_q``, ``score_delta_q`` (Bounds/Attention.v) and ``gamma`` its ``gamma``."""
    p, scale = Fraction(n) * 3, Fraction(1, 8)
    smax, delta = ab._score_terms_q("fp32", n, p, scale)
    args = dict(
        u=common._rational(U),
        ea=common._rational(ETA),
        scale=common._rational(scale),
        uc=common._rational(ab._QK_SCALE_ERROR),
        e=n,
        p=common._rational(p),
    )
    assert smax == Fraction(common._from_oracle(bound="score_max", **args))
    assert delta == Fraction(common._from_oracle(bound="score_delta", **args))
    assert ab.dot_error_constants("fp32", n)[0] == Fraction(
        common._from_oracle(bound="gamma", u=common._rational(U), n=n)
    )


@pytest.mark.parametrize("n_keys,head_dim,block_n", SHAPES)
def test_default_is_fp32_and_the_hand_copy_at_its_dot_error_agrees(n_keys, head_dim, block_n):
    """``dot="fp32"`` is the default; the hand copy with the blocked dot's error passed as ``de`` is
    the hand copy without (its own ``dot_err``) up to its float64 rounding."""
    kw = _fwd_kwargs()
    for f in (ab.attention_forward_error_bound, ab.attention_lse_error_bound):
        k = kw if f is ab.attention_forward_error_bound else dict(max_abs_q=1.5, max_abs_k=2.0)
        assert f(n_keys, head_dim, block_n=block_n, **k) == f(n_keys, head_dim, block_n=block_n, dot="fp32", **k)
    p, scale = head_dim * 1.5 * 2.0, 1.0 / math.sqrt(head_dim)
    args, tiles = ab._afe_args(n_keys, block_n, torch.float32, "nearest", ab.EXP2_ERROR, scale, p, 1.0)
    g_rel, g_abs = ab.dot_error_constants("fp32", head_dim)
    de = float(g_rel * Fraction(p) + g_abs)
    old = ab._hand_attention_forward_error_bound(*args.values(), head_dim, block_n, n_keys, tiles)
    new = ab._hand_attention_forward_error_bound(*args.values(), head_dim, block_n, n_keys, tiles, de)
    assert new == pytest.approx(old, rel=2.0**-28)


@pytest.mark.parametrize("n_keys,head_dim,block_n", SHAPES)
def test_tf32x3_seq_bounds_at_least_fp32(n_keys, head_dim, block_n):
    """With the 3xTF32 dot accumulated left to right the forward, lse and a-posteriori bounds are at
    least the float32 ones (its dot error is larger); the tensor-core model gives a finite bound."""
    kw = _fwd_kwargs()
    fwd = {
        d: ab.attention_forward_error_bound(n_keys, head_dim, block_n=block_n, dot=d, **kw)
        for d in ("fp32", "tf32x3", ab.Tf32x3Dot(block=8, bits=27))
    }
    lse = {
        d: ab.attention_lse_error_bound(n_keys, head_dim, block_n=block_n, max_abs_q=1.5, max_abs_k=2.0, dot=d)
        for d in ("fp32", "tf32x3")
    }
    w = torch.tensor([0.0, 0.25, 1.0], dtype=torch.float64)
    post = {
        d: ab.attention_forward_posteriori_bound(w, n_keys, head_dim, block_n=block_n, dot=d, **kw)
        for d in ("fp32", "tf32x3")
    }
    assert fwd["tf32x3"] > fwd["fp32"] and lse["tf32x3"] > lse["fp32"]
    assert bool((post["tf32x3"] >= post["fp32"]).all()) and bool((post["tf32x3"] > post["fp32"])[1:].all())
    assert 0.0 < fwd[ab.Tf32x3Dot(block=8, bits=27)] < math.inf


@pytest.mark.skipif(not common.oracle_bounds_available(), reason="needs the oracle (make -C extraction)")
def test_tf32x3_seq_backward_bounds_at_least_fp32():
    """dV, dK, dQ: the 3xTF32 scores (and dp) give bounds at least the float32 ones."""
    common_kw = dict(max_abs_q=1.5, max_abs_k=2.0, max_abs_lse=10.0, lse_error=1e-4, dtype=torch.float32)
    s = torch.tensor([0.0, 0.5, 2.0], dtype=torch.float64)
    dv = {
        d: ab.attention_dv_error_bound(s, 256, 4, 64, block_m=64, max_abs_do=1.0, dot=d, **common_kw)
        for d in ("fp32", "tf32x3")
    }
    sums = (s, s, s)
    grad_kw = dict(dp_abs_sum=64.0, max_abs_y=10.0, max_delta_error=1e-3, **common_kw)
    dk = {
        d: ab.attention_dk_error_bound(sums, 256, 4, 64, 64, block_m=64, dot=d, **grad_kw) for d in ("fp32", "tf32x3")
    }
    dq = {
        d: ab.attention_dq_error_bound(sums, 256, 4, 64, 64, block_n=64, dot=d, **grad_kw) for d in ("fp32", "tf32x3")
    }
    for b in (dv, dk, dq):  # equal at S = 0 (the constant terms), larger where S > 0
        assert bool((b["tf32x3"] >= b["fp32"]).all()) and bool((b["tf32x3"] > b["fp32"])[1:].all())
    assert bool(
        (ab.attention_dv_error_bound(s, 256, 4, 64, block_m=64, max_abs_do=1.0, **common_kw) == dv["fp32"]).all()
    )


def test_bad_dot_arguments_raise():
    with pytest.raises(ValueError, match="dot must be"):
        ab.attention_forward_error_bound(16, 16, block_n=16, dot="tf32", **_fwd_kwargs())
    with pytest.raises(ValueError, match="block must be"):
        ab.Tf32x3Dot(block=0)
    with pytest.raises(ValueError, match="block must be an integer"):
        ab.TensorCoreDot(block=None)
    with pytest.raises(ValueError, match="out must be"):
        ab.Tf32x3Dot(block=8, out="floor")
    with pytest.raises(ValueError, match="ref must be"):
        ab.TensorCoreDot(block=8, ref="largest")
    with pytest.raises(ValueError, match="side condition 3 q tc_delta"):
        ab.dot_error_constants(ab.Tf32x3Dot(block=8, bits=2), 64)
    with pytest.raises(ValueError, match="n must be"):
        ab.dot_error_constants("fp32", 0)


def test_from_accumulation():
    """The device's identified accumulation (``ojas verify-device``) as the tensor-core model; only
    truncating alignment to a number of bits is ``tc_align``."""
    acc = SimpleNamespace(block=4, bits=26, align="trunc", out="nearest", ref="term")
    assert ab.Tf32x3Dot.from_accumulation(acc) == ab.Tf32x3Dot(block=4, bits=26, out="nearest", ref="term")
    assert ab.TensorCoreDot.from_accumulation(acc) == ab.TensorCoreDot(block=4, bits=26, out="nearest", ref="term")
    h100_tf32 = SimpleNamespace(block=8, bits=26, align="trunc", out="truncate", ref="operands")
    h100_bf16 = SimpleNamespace(block=16, bits=26, align="trunc", out="truncate", ref="operands")
    assert ab.Tf32x3Dot.from_accumulation(h100_tf32) == ab.TF32X3_H100
    assert ab.TensorCoreDot.from_accumulation(h100_bf16) == ab.TENSOR_CORE_BF16_H100
    # the alignment reference does not change the constants
    assert ab.dot_error_constants(ab.TF32X3_H100, 128) == ab.dot_error_constants(
        ab.Tf32x3Dot(block=8, bits=26, out="truncate", ref="term"), 128
    )
    for bad in (
        SimpleNamespace(block=4, bits=26, align="floor", out="nearest"),
        SimpleNamespace(block=1, bits=None, align="trunc", out="nearest"),
    ):
        with pytest.raises(ValueError, match="align by truncation"):
            ab.Tf32x3Dot.from_accumulation(bad)


def test_kernel_dot_reads_the_device_record(monkeypatch):
    """attention_error.kernel_dot: "fp32" off CUDA; on CUDA the model the verify-device record
    identified (tensor cores for 16-bit inputs, 3xTF32 chained from 0 for float32), refusing a
    record that names another chaining or several models, and single-pass TF32."""
    from ojas_kernels import attention_args
    from ojas_ref.verification import attention_error, device_premises as dp
    from ojas_ref.verification.bounds.attention import TENSOR_CORE_BF16_H100, TF32X3_H100

    h100 = dict(block=16, bits=26, align="trunc", out="truncate", ref="operands")
    tf32 = dict(h100, block=8)
    record = {
        "tl.dot bfloat16": {"measured": [h100]},
        "tl.dot float32 tf32x3": {"measured": [{"model": tf32, "schedule": "chain(0)+c", "order": [0, 1, 2]}]},
    }
    monkeypatch.setattr(dp, "checked_premises", lambda names: {n: record[n] for n in names})
    monkeypatch.setattr(attention_args, "_dot_precision", lambda dtype, default=None: "tf32x3")
    assert attention_error.kernel_dot("cpu", torch.bfloat16) == "fp32"
    assert attention_error.kernel_dot("cuda", torch.bfloat16) == TENSOR_CORE_BF16_H100
    assert attention_error.kernel_dot("cuda", torch.float32) == TF32X3_H100
    record["tl.dot float32 tf32x3"]["measured"][0]["schedule"] = "chain(c)"
    with pytest.raises(ValueError, match="chains the three TF32 dots otherwise"):
        attention_error.kernel_dot("cuda", torch.float32)
    record["tl.dot bfloat16"]["measured"].append(dict(h100, block=32))
    with pytest.raises(ValueError, match="identifies 2 dot models"):
        attention_error.kernel_dot("cuda", torch.bfloat16)
    monkeypatch.setattr(attention_args, "_dot_precision", lambda dtype, default=None: "tf32")
    with pytest.raises(ValueError, match="single-pass TF32"):
        attention_error.kernel_dot("cuda", torch.float32)


# --- the accumulating dots tl.dot(a, b, acc) (Ojas.Attention.Float.NumeratorError.acc_dot_model) ---


@pytest.mark.parametrize("n", [1, 64, 128])
def test_acc_constants(n):
    """``acc_of_dot_model`` (the dot from 0, then ``acc`` added in float32): ``u + (1 + u) g``,
    ``(1 + u) ga + eta`` for "fp32" (``blocked_acc_dot_model``) and 3xTF32
    (``tf32x3_tc_op_acc_dot_model``); the H100's tensor-core chain (``tc_acc_op_dot_model``): ``gamma_d(q)``, 0."""
    g, ga = _gamma(U, n), (1 + _gamma(U, n - 1)) * n * ETA
    assert ab.acc_dot_error_constants("fp32", n) == (U + (1 + U) * g, (1 + U) * ga + ETA)
    uh, ul = Fraction(1, 2048), Fraction(1, 1024)
    c, kl, kh = uh * uh + 2 * uh * ul * (1 + uh), 2 * uh * (1 + ul) * (1 + uh), (1 + uh) ** 2
    d = (1 + 2 * U) * 9 * Fraction(2) ** -25 + 2 * U  # tc_delta 8 at F = 26, truncation
    q = -(-n // 8)
    g3 = c + _gamma(d, 3 * q) * kl + _gamma(d, q) * kh
    assert ab.acc_dot_error_constants(ab.TF32X3_H100, n) == (U + (1 + U) * g3, ETA)
    d16 = (1 + 2 * U) * 17 * Fraction(2) ** -25 + 2 * U  # tc_delta 16 at F = 26, truncation
    assert ab.acc_dot_error_constants(ab.TENSOR_CORE_BF16_H100, n) == (_gamma(d16, -(-n // 16)), 0)
    with pytest.raises(NotImplementedError, match="ref='term'"):
        ab.acc_dot_error_constants(ab.TensorCoreDot(block=16, ref="term"), n)


@pytest.mark.parametrize("n", [1, 64, 128])
def test_acc_split_constants(n):
    """``acc_dot_split_model``'s ``(g_acc, g_dot, g_abs)``: for "fp32" and 3xTF32 (``acc_of_dot_split_model``:
    ``acc`` added in one float32 rounding) ``u``, ``u + (1 + u) g``, ``(1 + u) ga + eta``, ``(g, ga)`` the dot's
    from 0; the H100's tensor-core chain (``acc_dot_split_of_model``) its ``g_rel`` twice, ``g_abs``; rounded up
    to floats by ``acc_constants_up``."""
    for dot in ("fp32", ab.TF32X3_H100):
        g, ga = ab.dot_error_constants(dot, n)
        assert ab.acc_dot_split_constants(dot, n) == (U, U + (1 + U) * g, (1 + U) * ga + ETA)
        assert ab.acc_dot_split_constants(dot, n)[1:] == ab.acc_dot_error_constants(dot, n)
    g_rel, g_abs = ab.acc_dot_error_constants(ab.TENSOR_CORE_BF16_H100, n)
    assert ab.acc_dot_split_constants(ab.TENSOR_CORE_BF16_H100, n) == (g_rel, g_rel, g_abs) and g_abs == 0
    for dot in ("fp32", ab.TF32X3_H100, ab.TENSOR_CORE_BF16_H100):
        up = ar.acc_constants_up(dot, n)
        exact = ab.acc_dot_split_constants(dot, n)
        assert all(Fraction(math.nextafter(f, -math.inf)) < x <= Fraction(f) for f, x in zip(up, exact, strict=True))
    with pytest.raises(NotImplementedError, match="ref='term'"):
        ab.acc_dot_split_constants(ab.TensorCoreDot(block=16, ref="term"), n)


def test_dv_accumulates_with_the_model():
    """With a tensor-core model, dV's tiles accumulate by ``tc_acc_op_dot_model`` (``dv_error_acc``):
    at ``S = 0`` the bound is ``(1 + us)(G cw t block_m D + t G g_abs) + es``, ``G = (1 + g_rel)^t``
    (the X-free part); "fp32" keeps ``dv_error``'s value."""
    kw = dict(max_abs_q=1.5, max_abs_k=2.0, max_abs_lse=10.0, lse_error=1e-4, max_abs_do=3.0)
    zero = torch.zeros(1, dtype=torch.float64)
    t, bm = 4, 64
    got = ab.attention_dv_error_bound(
        zero, 256, t, 64, block_m=bm, dtype=torch.bfloat16, dot=ab.TENSOR_CORE_BF16_H100, **kw
    )
    us, es = (Fraction(x) for x in common._storage(torch.bfloat16, "nearest"))
    cw = (1 + us) * Fraction(common._EXP2_ABS_ERROR) + es
    g_rel, g_abs = ab.acc_dot_error_constants(ab.TENSOR_CORE_BF16_H100, bm)
    G = (1 + g_rel) ** t
    want = common._float_up((1 + us) * (G * cw * (t * bm) * 3 + t * G * g_abs) + es) * common._ROUND_UP
    assert float(got[0]) == want
    fp32 = ab.attention_dv_error_bound(zero, 256, t, 64, block_m=bm, dtype=torch.bfloat16, **kw)
    assert float(fp32[0]) != want
    with pytest.raises(NotImplementedError, match="ref='term'"):
        ab.attention_dv_error_bound(
            zero, 256, t, 64, block_m=bm, dtype=torch.bfloat16, dot=ab.TensorCoreDot(block=16, ref="term"), **kw
        )


def test_dk_dq_accumulate_with_the_model():
    """With a tensor-core model, dK's and dQ's tiles accumulate by ``tc_acc_op_dot_model`` (``dk_error_acc``,
    ``dq_error_acc``): at ``S1 = S2 = S3 = 0`` the bound is
    ``k (G t block gacc_c + t G g_abs) + (1 + us) ea + es`` (``k = (1 + us) scale (1 + u)(1 + ucs)``);
    "fp32" keeps ``dk_error``'s value."""
    z = torch.zeros(1, dtype=torch.float64)
    t, bm, ev, scale = 4, 64, 64, 0.125
    dot = ab.TENSOR_CORE_BF16_H100
    kw = dict(
        max_abs_k=2.0,
        max_abs_lse=10.0,
        lse_error=1e-4,
        dtype=torch.bfloat16,
        scale=scale,
        dp_abs_sum=64.0,
        max_abs_y=10.0,
        max_delta_error=1e-3,
    )
    us, es = (Fraction(x) for x in common._storage(torch.bfloat16, "nearest"))
    ee = Fraction(common._EXP2_ABS_ERROR)
    gp_rel, gp_abs = ab.dot_error_constants(dot, ev)
    crm = (1 + U) * (gp_rel * 64 + gp_abs + Fraction(1e-3)) + ETA
    k0 = (1 + U) * ee * ((1 + U) * 10 + crm) + ETA
    g_rel, g_abs = ab.acc_dot_error_constants(dot, bm)
    G = (1 + g_rel) ** t
    k = (1 + us) * Fraction(scale) * (1 + U) * (1 + U)
    for fn, w_kw, w in (
        (ab.attention_dk_error_bound, dict(block_m=bm, max_abs_q=1.5), Fraction(1.5)),
        (ab.attention_dq_error_bound, dict(block_n=bm, max_abs_q=1.5), Fraction(2)),
    ):
        gc = ((1 + us) * k0 + es) * w
        want = common._float_up(k * (G * t * bm * gc + t * G * g_abs) + (1 + us) * ETA + es) * common._ROUND_UP
        got = fn((z, z, z), 256, t, 64, ev, dot=dot, **w_kw, **kw)
        assert float(got[0]) == want
        assert float(fn((z, z, z), 256, t, 64, ev, **w_kw, **kw)[0]) != want


@pytest.mark.parametrize("bound", ["dv", "dk"])
def test_backward_bounds_without_the_oracle_say_so(monkeypatch, bound):
    """Without the oracle (a GPU machine where extraction/ was not built or carried) the 3xTF32
    backward bounds raise a RuntimeError naming it, not a bare TypeError from ``Fraction``."""
    monkeypatch.setattr(ab, "_from_oracle", lambda **query: common._NO_ORACLE)
    kw = dict(max_abs_q=1.5, max_abs_k=2.0, max_abs_lse=10.0, lse_error=1e-4, dtype=torch.float32, dot="tf32x3")
    s = torch.tensor([0.0, 0.5], dtype=torch.float64)
    with pytest.raises(RuntimeError, match=r"need the oracle \(make -C extraction\)"):
        if bound == "dv":
            ab.attention_dv_error_bound(s, 256, 4, 64, block_m=64, max_abs_do=1.0, **kw)
        else:
            ab.attention_dk_error_bound(
                (s, s, s), 256, 4, 64, 64, block_m=64, dp_abs_sum=64.0, max_abs_y=10.0, max_delta_error=1e-3, **kw
            )
