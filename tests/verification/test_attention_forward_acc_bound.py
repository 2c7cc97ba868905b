"""The attention forward's bound with the P.V products accumulated into ``acc * alpha`` by the kernel's
``tl.dot`` (``Ojas.Attention.Float.ForwardAccError``, rocq/Attention/Float/ForwardAccError.v): what
``attention_forward_posteriori_bound`` and ``attention_forward_error_bound`` compute for a dot model
(the H100's :data:`TF32X3_H100`, :data:`TENSOR_CORE_BF16_H100`). The closed form against an exact
rational evaluation of the .v file's definitions written here (``afe_bL``, ``afa_HA``, ``afa_rA``,
``afa_rel``, ``afa_abs``, the instances' ``g_rel``, ``g_abs``, ``score_max_de``, ``score_delta_de``),
its constants against the quantities they bound, the new bound against the old one (float32 products
summed left to right: ``ForwardPosteriori.afp_rel``, ``afp_abs``), the interpreter's kernel within it,
and bad arguments. CPU only."""

from __future__ import annotations

import math
import os
from fractions import Fraction

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from ojas_ref.verification.bounds import attention as ab  # noqa: E402
from ojas_ref.verification.bounds import common  # noqa: E402

F64 = torch.float64
U = Fraction(2) ** -24
EA = Fraction(2) ** -150
EE = Fraction(2) ** -126
UC = Fraction(2) ** -24 + Fraction(2) ** -51  # |qk_scale ln 2 - scale| <= uc scale
UR = Fraction(2) ** -23  # the H100 tensor cores' output truncated to float32: 2^(1 - 24)
STORE = {torch.float32: (U, Fraction(2) ** -150), torch.bfloat16: (Fraction(2) ** -8, Fraction(2) ** -134)}


# --- the .v definitions, over exact rationals ---


def _gamma(d: Fraction, n: int) -> Fraction:
    return n * d / (1 - n * d)


def _tc_delta(bits: int, k: int) -> Fraction:
    """TensorCoreSum.v's ``tc_delta (2^(1 - F)) ur k = (1 + ur)(S k 2^(1 - F)) + ur``."""
    return (1 + UR) * ((k + 1) * Fraction(2) ** (1 - bits)) + UR


def _tf32x3_tc_rel(bits: int, k: int, q: int) -> Fraction:
    """ForwardError.v's ``tf32x3_tc_rel`` (Tf32Product.v's ``tf32x3_c``, ``tf32x3_kl``, ``tf32x3_kh``)."""
    uh, ul = Fraction(1, 2048), Fraction(1, 1024)
    c, kl, kh = uh * uh + 2 * (uh * ul * (1 + uh)), 2 * (uh * (1 + ul) * (1 + uh)), (1 + uh) * (1 + uh)
    d = _tc_delta(bits, k)
    return c + _gamma(d, 3 * q) * kl + _gamma(d, q) * kh


def _instance(dot, head_dim: int, n: int) -> tuple[Fraction, Fraction, Fraction]:
    """``(d_rel, g_rel, g_abs)`` of ``attention_forward_acc_posteriori_tf32x3_op`` / ``_tc_op`` (the scores'
    dot on ``head_dim <= qb k``, P.V on ``n <= qv k`` keys; ``d_abs = 0``)."""
    k, bits = dot.block, dot.bits
    qb, qv = -(-head_dim // k), -(-n // k)
    if isinstance(dot, ab.Tf32x3Dot):
        return _tf32x3_tc_rel(bits, k, qb), U + (1 + U) * _tf32x3_tc_rel(bits, k, qv), (1 + U) * 0 + EA
    return _gamma(_tc_delta(bits, k), qb), _gamma(_tc_delta(bits, k), qv), Fraction(0)


def _afe_bL(ue, B, N, Tt, X, P1, CG, CR):
    H = P1 * ((1 + ue) * X)
    return H * CG * X - 1 + Tt * CR * (((H * CG * X) * N * EE) * (1 + U) + EA + P1 * (B * EE)) * (1 + U)


def _afa_HA(ue, us, X, CGA):
    return (1 + us) * ((1 + ue) * X) * CGA * X


def _afa_rA(ue, us, es, V, n, N, Tt, X, CGA, CRA, g_rel, g_abs):
    inner = _afa_HA(ue, us, X, CGA) * (N * V) * EE * (1 + U) + EA + ((1 + us) * EE + es) * (n * V)
    return Tt * CRA * ((inner * (1 + g_rel)) + g_abs)


def _afa(c: dict, n: int, N: int, Tt: int) -> tuple[Fraction, Fraction]:
    """``(afa_rel, afa_abs)`` of ForwardAccError.v at the constants ``c``."""
    ue, us, es, V, X, Y = (c[k] for k in ("ue", "us", "es", "V", "X", "Y"))
    bL = _afe_bL(ue, n, N, Tt, X, c["P1"], c["CG"], c["CR"])
    assert bL < 1
    rel = ((1 + U) * (_afa_HA(ue, us, X, c["CGA"]) - 1 + bL) * (1 + Y) / (1 - bL) + U * (1 + Y) + Y) * (1 + us) + us
    rA = _afa_rA(ue, us, es, V, n, N, Tt, X, c["CGA"], c["CRA"], c["g_rel"], c["g_abs"])
    return rel, ((1 + U) * rA / (1 - bL) + EA) * (1 + us) + es


def _afp(c: dict, B: int, N: int, Tt: int) -> tuple[Fraction, Fraction]:
    """``(afp_rel, afp_abs)`` of ForwardPosteriori.v (the P.V as float32 products summed left to right) at
    the same ``X, Y, P1, CG, CR``."""
    ue, us, es, V, X, Y, P1, CG, CR = (c[k] for k in ("ue", "us", "es", "V", "X", "Y", "P1", "CG", "CR"))
    bL = _afe_bL(ue, B, N, Tt, X, P1, CG, CR)
    H = P1 * ((1 + U) * (1 + us) * ((1 + ue) * X))
    gA = H * CG * X - 1
    rA = (
        Tt
        * CR
        * (((H * CG * X) * (N * V) * EE) * (1 + U) + EA + P1 * ((1 + U) * ((1 + us) * EE + es) * (B * V) + B * EA))
    )
    rA *= 1 + U
    rel = ((1 + U) * (gA + bL) * (1 + Y) / (1 - bL) + U * (1 + Y) + Y) * (1 + us) + us
    return rel, ((1 + U) * rA / (1 - bL) + EA) * (1 + us) + es


def _score_terms(scale: Fraction, P: Fraction, de: Fraction) -> tuple[Fraction, Fraction]:
    """ForwardError.v's ``score_max_de``, ``score_delta_de``."""
    smax = 2 * (scale * (1 + UC) * (P + de)) * (1 + U) + EA
    delta = scale * ((P + de) * (U * (1 + UC) + UC) + de) + EA
    return smax, delta


def _exp_upper(x: Fraction) -> Fraction:
    """A certified upper bound of ``e^x`` for ``0 <= x <= 4``, within ``10^-40`` relative: the Taylor sum
    to ``x^60 / 60!`` plus ``x^61 / 61! e^4``."""
    assert 0 <= x <= 4
    term, total = Fraction(1), Fraction(1)
    for i in range(1, 61):
        term = term * x / i
        total += term
    return total + term * x / 61 * 55


# --- parameter sets: (dot, dtype, n_keys, head_dim, block_n, max_abs_v, qk_abs_sum, exp2_error) ---

CASES = [
    (ab.TF32X3_H100, torch.float32, 4096, 128, 64, 5.0, 140.0, ab.EXP2_ERROR),
    (ab.TF32X3_H100, torch.float32, 100, 64, 32, 0.75, 30.5, 2.0**-22),
    (ab.TENSOR_CORE_BF16_H100, torch.bfloat16, 16384, 128, 64, 5.5, 150.0, ab.EXP2_ERROR),
    (ab.TENSOR_CORE_BF16_H100, torch.bfloat16, 1, 16, 16, 1.0, 3.0, 2.0**-20),
]
IDS = [f"{type(c[0]).__name__}-N{c[2]}-E{c[3]}-n{c[4]}" for c in CASES]


def _args(dtype, n_keys, head_dim, block_n, v, p, e2):
    return ab._afe_args(n_keys, block_n, dtype, "nearest", e2, 1.0 / math.sqrt(head_dim), p, v)


@pytest.mark.parametrize("dot,dtype,n_keys,head_dim,block_n,v,p,e2", CASES, ids=IDS)
def test_closed_form_is_the_v_files(dot, dtype, n_keys, head_dim, block_n, v, p, e2):
    """``_afa_bounds`` is ``afa_rel``, ``afa_abs`` of the .v file exactly at its constants, whose
    ``g_rel``, ``g_abs`` are the H100 instance's; the public functions round them up: the
    a-posteriori ``afa_rel W + afa_abs``, the a-priori ``afa_rel + afa_abs / V`` (``W <= V``)."""
    args, tiles = _args(dtype, n_keys, head_dim, block_n, v, p, e2)
    assert tiles == -(-n_keys // block_n)
    c = ab._afa_constants(dot, args, head_dim, block_n, tiles)
    _, g_rel, g_abs = _instance(dot, head_dim, block_n)
    assert (c["g_rel"], c["g_abs"]) == (g_rel, g_abs)
    assert (c["ue"], c["us"], c["es"], c["V"]) == (Fraction(e2), *STORE[dtype], Fraction(v))
    rel, absolute = _afa(c, block_n, n_keys, tiles)
    assert ab._afa_bounds(dot, args, head_dim, block_n, n_keys, tiles) == (rel, absolute)
    kw = dict(block_n=block_n, dtype=dtype, max_abs_q=1.0, max_abs_k=1.0, max_abs_v=v, qk_abs_sum=p, exp2_error=e2)
    w = torch.tensor([0.0, 0.5, v], dtype=F64)
    got = ab.attention_forward_posteriori_bound(w, n_keys, head_dim, dot=dot, **kw)
    want = (common._float_up(rel) * w + common._float_up(absolute)) * common._ROUND_UP
    assert torch.equal(got, want)
    assert ab.attention_forward_error_bound(n_keys, head_dim, dot=dot, **kw) == common._float_up(
        rel + absolute / Fraction(v)
    )


@pytest.mark.parametrize("dot,dtype,n_keys,head_dim,block_n,v,p,e2", CASES, ids=IDS)
def test_constants_bound_what_the_premises_ask(dot, dtype, n_keys, head_dim, block_n, v, p, e2):
    """``X >= e^(u K) >= 2^(u K)`` (``K = 2 score_max_de`` at the scores' dot error ``d_rel P``),
    ``Y >= e^(2 score_delta_de) - 1``, ``P1``, ``CG``, ``CR``, ``CGA``, ``CRA`` at least the exact
    powers; each tight (``1 + x + x^2`` for ``e^x``; the powers within ``2^-200`` relative)."""
    args, tiles = _args(dtype, n_keys, head_dim, block_n, v, p, e2)
    c = ab._afa_constants(dot, args, head_dim, block_n, tiles)
    d_rel, g_rel, _ = _instance(dot, head_dim, block_n)
    smax, delta = _score_terms(Fraction(args["scale"]), Fraction(p), d_rel * Fraction(p) + 0)
    x = U * (2 * smax)
    assert _exp_upper(x) <= c["X"] <= _exp_upper(x) + x * x
    assert _exp_upper(2 * delta) - 1 <= c["Y"] <= _exp_upper(2 * delta) - 1 + 4 * delta * delta
    ue = Fraction(e2)
    powers = {
        "P1": (1 + U, block_n - 1),
        "CG": ((1 + ue) * (1 + U) ** 2, tiles),
        "CR": ((1 + ue + EE) * (1 + U) ** 2, tiles),
        "CGA": ((1 + ue) * (1 + U) * (1 + g_rel), tiles),
        "CRA": ((1 + ue + EE) * (1 + U) * (1 + g_rel), tiles),
    }
    for name, (base, k) in powers.items():
        exact = base**k
        assert exact <= c[name] <= exact * (1 + Fraction(2) ** -200), name


def test_exp_and_pow_upper_bounds():
    """``_exp_up`` (``1 + y + y^2`` then squarings) and ``_pow_up`` are upper bounds, tight."""
    for x in (Fraction(0), Fraction(1, 10**6), Fraction(1, 3), Fraction(1), Fraction(37, 10)):
        got = ab._exp_up(x)
        assert _exp_upper(x) <= got <= _exp_upper(x) * (1 + x * x + Fraction(1, 10**30)), x
    for base, k in ((Fraction(3, 2), 0), (Fraction(3, 2), 1), (Fraction(7, 5), 37), (1 + Fraction(1, 3 * 2**40), 4097)):
        exact = base**k
        assert exact <= ab._pow_up(base, k) <= exact * (1 + Fraction(2) ** -200)


# the GPU benchmark's shapes (E = 128, BLOCK_N = 64: default_config's forward tile on CUDA for float32
# and bfloat16 up to head dim 128), max|q|, max|k|, max|v| of randn inputs
BENCH = [
    (dot, dt, s)
    for dot, dt in ((ab.TF32X3_H100, torch.float32), (ab.TENSOR_CORE_BF16_H100, torch.bfloat16))
    for s in (4096, 16384)
]


@pytest.mark.parametrize("dot,dtype,n_keys", BENCH, ids=[f"{str(b[1])[6:]}-S{b[2]}" for b in BENCH])
def test_at_least_the_old_bound_and_within_a_small_factor(dot, dtype, n_keys):
    """At the benchmark's shapes the new bound (P.V by the tensor cores' accumulating dot) is at least the
    old one (ForwardPosteriori.v's float32 products summed left to right at the same constants; the
    a-priori: the old hand copy ``afe_rel`` at the dot's error) and at most 4 times it (measured: up to
    3.1 for float32 at S = 16384, ``Tt g_rel`` with 256 tiles; about 1.1 for bfloat16)."""
    from ojas_kernels.attention_config import default_config

    head_dim, v = 128, 5.4
    block_n = default_config(head_dim, dtype, torch.device("cuda")).fwd.block_n
    assert block_n == 64
    p = head_dim * 5.2 * 5.4
    args, tiles = _args(dtype, n_keys, head_dim, block_n, v, p, ab.EXP2_ERROR)
    c = ab._afa_constants(dot, args, head_dim, block_n, tiles)
    new, old = _afa(c, block_n, n_keys, tiles), _afp(c, block_n, n_keys, tiles)
    for w in (Fraction(0), Fraction(1), Fraction(v)):
        assert old[0] * w + old[1] <= new[0] * w + new[1] <= 4 * (old[0] * w + old[1]), w
    kw = dict(block_n=block_n, dtype=dtype, max_abs_q=5.2, max_abs_k=5.4, max_abs_v=v)
    apriori = ab.attention_forward_error_bound(n_keys, head_dim, dot=dot, **kw)
    de = common._float_up(_instance(dot, head_dim, block_n)[0] * Fraction(p))
    old_apriori = ab._hand_attention_forward_error_bound(*args.values(), head_dim, block_n, n_keys, tiles, de)
    assert old_apriori <= apriori <= 4 * old_apriori


def test_bad_arguments_raise():
    kw = dict(block_n=64, dtype=torch.float32, max_abs_q=1.0, max_abs_k=1.0, max_abs_v=1.0, dot=ab.TF32X3_H100)
    w = torch.ones(2, dtype=F64)
    for bad, match in (
        (dict(block_n=0), "block_n must be"),
        (dict(max_abs_v=0.0), "max_abs_v must be > 0"),
        (dict(max_abs_q=math.nan), "max_abs_q must be"),
        (dict(dtype=torch.int32), "dtype must be"),
        (dict(storage_rounding="up"), "storage_rounding must be"),
        (dict(dot="tf32"), "dot must be"),
        (dict(exp2_error=0.5), "afe_bL < 1 of attention_forward_acc_posteriori"),
        (dict(dot=ab.Tf32x3Dot(block=8, bits=4)), "side condition 3 q tc_delta"),
    ):
        with pytest.raises(ValueError, match=match):
            ab.attention_forward_error_bound(4096, 128, **{**kw, **bad})
        with pytest.raises(ValueError, match=match):
            ab.attention_forward_posteriori_bound(w, 4096, 128, **{**kw, **bad})
    with pytest.raises(ValueError, match="prob_abs_v must be"):
        ab.attention_forward_posteriori_bound(-w, 4096, 128, **kw)
    with pytest.raises(NotImplementedError, match="ref='term'"):
        ab.attention_forward_posteriori_bound(w, 4096, 128, **{**kw, "dot": ab.TensorCoreDot(block=16, ref="term")})


# --- the interpreter's kernel within the bounds taken at the H100's models ---

KERNEL_CASES = [  # (dtype, hq, hkv, S, E, causal); the interpreter's tiles are 16 x 16
    (torch.float32, 2, 2, 64, 32, False),
    (torch.float32, 2, 2, 64, 32, True),
    (torch.float32, 4, 2, 90, 32, True),
    (torch.float32, 2, 1, 1, 16, True),
    (torch.bfloat16, 2, 1, 50, 32, False),
    (torch.bfloat16, 4, 2, 40, 32, True),
]


@pytest.mark.interpreter
@pytest.mark.parametrize(
    "dtype,hq,hkv,s,e,causal",
    KERNEL_CASES,
    ids=[f"{str(c[0])[6:]}-S{c[3]}-{'causal' if c[5] else 'full'}-gqa{c[1] // c[2]}" for c in KERNEL_CASES],
)
def test_interpreter_kernel_within_the_acc_bounds(dtype, hq, hkv, s, e, causal, monkeypatch):
    """With ``kernel_dot`` the H100's model (float32: ``TF32X3_H100``, 16-bit: ``TENSOR_CORE_BF16_H100``),
    the interpreter's kernel (IEEE float32 dots: within the model's larger errors) is within the
    a-priori bound and, entry by entry, the a-posteriori one (full, causal, GQA, S cut by the tiles,
    S = 1), which is below the a-priori one times ``max|v|`` (``W <= max|v|``, up to the rounding of the
    certified ``W``), and neither is vacuous."""
    if torch.cuda.is_available():
        pytest.skip("the interpreter's dots")
    pytest.importorskip("triton")
    from ojas_kernels.attention import flash_attention_forward
    from ojas_ref.verification import attention_error as ae

    gen = torch.Generator().manual_seed(21)
    q, k, v = (torch.randn(1, h, s, e, generator=gen).to(dtype) for h in (hq, hkv, hkv))
    scale = 1.0 / math.sqrt(e)
    out, _ = flash_attention_forward(q, k, v, causal, scale, None)
    ref = ae.exact_attention(q, k, v, causal, scale)
    ent = (out.to(F64) - ref).abs()
    model = ab.TF32X3_H100 if dtype == torch.float32 else ab.TENSOR_CORE_BF16_H100
    monkeypatch.setattr(ae, "kernel_dot", lambda device_type, dt: model)
    bound, post = ae.forward_error_bound(q, k, v, causal, scale), ae.forward_posteriori_bound(q, k, v, causal, scale)
    assert ae.observed_error(out, ref, v) <= bound
    assert bool((ent <= post).all()), (ent - post).max().item()
    assert post.max().item() <= bound * v.abs().max().item() * (1 + 2.0**-20)
    assert bound < (0.05 if dtype == torch.bfloat16 else 1e-3)
