"""SwiGLU and GeGLU (ojas_ref.swiglu, ojas_kernels.swiglu) against torch's ``F.silu(a) * b`` and
``F.gelu(a, approximate="tanh") * b`` and their autograd (``activation`` "silu" and "gelu_tanh").

* The reference runs torch's own operations (``F.silu`` / ``F.gelu``, ``mul``,
  ``aten.silu_backward`` / ``aten.gelu_backward``) with the activation recomputed in the
  backward: bitwise torch's autograd, every dtype (asserted bitwise).
* float64: the reference and the Triton kernel's float32 gradients against the formulas of
  Ojas.SwiGLU.Backward.swiglu_backward_eq_vjp, ``da = dh b s (1 + a (1 - s))``, ``db = dh a s``,
  and Ojas.SwiGLU.Backward.geglu_tanh_backward_eq_vjp, ``da = dh b gelu'(a)``, ``db = dh gelu(a)``.
* The Triton kernel in Triton's interpreter (CPU; this module sets TRITON_INTERPRET=1 before
  importing ojas_kernels when there is no CUDA device).  Its ``exp`` is numpy's, torch's CPU one
  SLEEF's or MKL's: float32 results differ by a few units in the last place (tolerance below,
  ``FP32_ULPS``).  A bfloat16/float16 ``da`` differs by at most one unit of its dtype (the
  float32 values differ by a few float32 ulps, so they round to the same or to adjacent
  numbers); ``h`` and ``db`` by at most three, since a one-unit change of the rounded
  ``silu(a)`` they multiply moves the exact product by up to two units.
  Except float16 ``da``: torch's CPU ``silu_backward`` rounds float16 intermediates, its CUDA
  kernel (which the Triton kernel follows) computes in float32; there the reference for the
  interpreted kernel is torch's ``silu_backward`` run in float32 and rounded once.
* GeGLU: the interpreter's tanh is float64 arithmetic rounded to float32, torch's CPU one
  SLEEF's (within an ulp).  For a gate below about -4, ``1 + tanh(.)`` cancels in both, so an
  ulp of tanh is a large part of ``gelu(a)``: float32 results are compared on the scale of
  their terms (``|a b|`` for ``h``, ``|dh b| (1 + |a| k (1 + 3 c a^2))`` for ``da``, as an ulp
  of tanh moves ``1 - T^2`` by about an ulp of 1), and a 16-bit result may also be off by more
  units where it is within that float32 bound (a few in 10^4 elements either way).
* GPU tests (``-m gpu``): the kernel against torch's CUDA kernels; for silu the forward and
  ``db`` bitwise (the same float32 operations: libdevice's expf, IEEE division), ``da`` within
  one unit of the dtype (the compilers may contract ``1 + a (1 - s)`` into an FMA
  differently); for gelu_tanh every result with the interpreter's tolerance (FMA contraction
  of ``a + c a^3`` as well; libdevice's tanhf against the CUDA math library's, not yet run).
"""

from __future__ import annotations

import math
import os

import pytest
import torch
from torch.nn import functional as F

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from ojas_ref.functional import dispatch  # noqa: E402
from ojas_ref.nn import SwiGLU  # noqa: E402
from ojas_ref.functional.swiglu import (  # noqa: E402
    ACTIVATIONS,
    swiglu,
    swiglu_backward_reference,
    swiglu_forward_reference,
)

triton = pytest.importorskip("triton")
from ojas_kernels import swiglu as kswiglu  # noqa: E402


DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# float32, kernel against torch: |diff| <= FP32_ULPS * eps * scale, the scale of each result's
# terms (|h|; |dh b| (1 + |a|) for da: an ulp of sigmoid(a) moves 1 + a (1 - s) by |a| ulps).
FP32_ULPS = 8
GELU_K, GELU_C = math.sqrt(2 / math.pi), 0.044715
TORCH_ACTIVATIONS = {"silu": F.silu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}
act_param = pytest.mark.parametrize("activation", ACTIVATIONS)


def torch_autograd(
    a: torch.Tensor, b: torch.Tensor, dh: torch.Tensor, activation: str = "silu"
) -> tuple[torch.Tensor, ...]:
    """``F.silu(a) * b`` (or ``F.gelu(a, approximate="tanh") * b``) and its gradients by torch's autograd."""
    a, b = a.detach().requires_grad_(), b.detach().requires_grad_()
    h = TORCH_ACTIVATIONS[activation](a) * b
    h.backward(dh)
    return h.detach(), a.grad, b.grad


def ours(
    a: torch.Tensor, b: torch.Tensor, dh: torch.Tensor, impl: str, activation: str = "silu"
) -> tuple[torch.Tensor, ...]:
    a, b = a.detach().requires_grad_(), b.detach().requires_grad_()
    h = swiglu(a, b, activation=activation, impl=impl)
    h.backward(dh)
    return h.detach(), a.grad, b.grad


def draw(shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0, scale: float = 4.0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    a = (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)
    b = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    dh = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    return a, b, dh


def assert_bitwise(x: torch.Tensor, y: torch.Tensor) -> None:
    assert x.dtype == y.dtype and x.shape == y.shape
    bits = {
        torch.float64: torch.int64,
        torch.float32: torch.int32,
        torch.bfloat16: torch.int16,
        torch.float16: torch.int16,
    }[x.dtype]
    differ = x.contiguous().view(bits) != y.contiguous().view(bits)
    assert not differ.any(), f"{int(differ.sum())} of {x.numel()} differ, e.g. {x[differ][:4]} vs {y[differ][:4]}"


def assert_within_units(x: torch.Tensor, ref: torch.Tensor, units: int, slack: torch.Tensor | None = None) -> None:
    """x is at most ``units`` neighbours away from ref in their (16-bit) dtype, or within ``slack``
    (absolute) where given; NaN where ref is NaN."""
    ok = (x == ref) | (x.isnan() & ref.isnan())
    if slack is not None:
        ok |= (x.double() - ref.double()).abs() <= slack
    up = down = ref
    for _ in range(units):
        up = torch.nextafter(up, torch.full_like(ref, float("inf")))
        down = torch.nextafter(down, torch.full_like(ref, float("-inf")))
        ok |= (x == up) | (x == down)
    assert ok.all(), f"{int((~ok).sum())} of {x.numel()} off by more than {units} units: {x[~ok][:4]} vs {ref[~ok][:4]}"


def assert_fp32_close(x: torch.Tensor, ref: torch.Tensor, scale: torch.Tensor) -> None:
    assert (x.isnan() == ref.isnan()).all() and (x.isinf() == ref.isinf()).all()
    assert (x[x.isinf()] == ref[ref.isinf()]).all()
    fin = ref.isfinite()
    err = (x[fin].double() - ref[fin].double()).abs()
    bound = FP32_ULPS * torch.finfo(torch.float32).eps * scale[fin].double() + torch.finfo(torch.float32).tiny
    assert (err <= bound).all(), f"max error / bound {float((err / bound).max()):.3g}"


def term_scales(
    a: torch.Tensor, b: torch.Tensor, dh: torch.Tensor, want: tuple[torch.Tensor, ...], activation: str
) -> tuple[torch.Tensor, ...]:
    """The scale of each result's terms, in float64 (module docstring)."""
    a64, b64, dh64 = a.double(), b.double(), dh.double()
    if activation == "silu":
        return want[0].abs().double(), (dh64 * b64).abs() * (1 + a64.abs()), want[2].abs().double()
    da_scale = (dh64 * b64).abs() * (1 + a64.abs() * GELU_K * (1 + 3 * GELU_C * a64 * a64))
    return (a64 * b64).abs(), da_scale, (dh64 * a64).abs()


def assert_kernel_matches_torch(
    got: tuple[torch.Tensor, ...],
    want: tuple[torch.Tensor, ...],
    a: torch.Tensor,
    b: torch.Tensor,
    dh: torch.Tensor,
    activation: str = "silu",
) -> None:
    """The interpreted kernel against torch's CPU autograd (module docstring)."""
    scales = term_scales(a, b, dh, want, activation)
    if a.dtype == torch.float32:
        for x, ref, scale in zip(got, want, scales):
            assert_fp32_close(x, ref, scale)
    else:
        if activation == "silu" and a.dtype == torch.float16 and not a.is_cuda:
            want = (want[0], float16_da_in_float32(a, b, dh), want[2])
        eps = torch.finfo(torch.float32).eps
        # da: one unit; h and db: three, as a one-unit change of rnd(act(a)) (relative <= 2^-p)
        # moves the exact product by up to two units of its own (relative >= 2^-(p+1))
        # and nearly all bitwise (measured: 0 to 2 in 10^4 differ), which a missed rounding is not;
        # gelu_tanh: or within the float32 bound where 1 + tanh cancels (module docstring)
        for x, ref, units, scale in zip(got, want, (3, 1, 3), scales):
            slack = None if activation == "silu" else FP32_ULPS * eps * scale + torch.finfo(torch.float32).tiny
            assert_within_units(x, ref, units, slack)
            assert int((x != ref).sum()) <= max(1, x.numel() // 100)


def float16_da_in_float32(a: torch.Tensor, b: torch.Tensor, dh: torch.Tensor) -> torch.Tensor:
    """torch's float16 da as its CUDA kernel computes it: ``silu_backward`` in float32 from
    ``rnd16(dh * b)``, rounded once.  Its CPU kernel rounds float16 intermediates (up to a few
    units off that), the kernel follows the CUDA one."""
    return torch.ops.aten.silu_backward((dh * b).float(), a.float()).half()


def vjp_formula64(
    a: torch.Tensor, b: torch.Tensor, dh: torch.Tensor, activation: str = "silu"
) -> tuple[torch.Tensor, ...]:
    """silu: ``h = a s b``, ``da = dh b s (1 + a (1 - s))``, ``db = dh a s`` (the statement of
    Ojas.SwiGLU.Backward.swiglu_backward_eq_vjp); gelu_tanh: ``h = gelu(a) b``, ``da = dh b
    (1/2 (1 + T) + 1/2 a (1 - T^2) k (1 + 3 c a^2))``, ``db = dh gelu(a)`` (the statement of
    Ojas.SwiGLU.Backward.geglu_tanh_backward_eq_vjp, gelu_tanh_grad); in float64."""
    a, b, dh = a.double(), b.double(), dh.double()
    if activation == "silu":
        s = torch.sigmoid(a)
        return a * s * b, dh * b * s * (1 + a * (1 - s)), dh * a * s
    t = torch.tanh(GELU_K * (a + GELU_C * a**3))
    gelu = a / 2 * (1 + t)
    grad = (1 + t) / 2 + a / 2 * (1 - t * t) * GELU_K * (1 + 3 * GELU_C * a * a)
    return gelu * b, dh * b * grad, dh * gelu


# ---------------------------------------------------------------------------
# The reference: bitwise torch
# ---------------------------------------------------------------------------


@act_param
@pytest.mark.parametrize("dtype", (*DTYPES, torch.float64))
@pytest.mark.parametrize("shape", [(7,), (3, 1000), (2, 5, 333)])
def test_reference_bitwise_torch(dtype, shape, activation):
    a, b, dh = draw(shape, dtype)
    for x, ref in zip(ours(a, b, dh, "reference", activation), torch_autograd(a, b, dh, activation)):
        assert_bitwise(x, ref)


@act_param
def test_reference_float64_is_the_vjp_formula(activation):
    a, b, dh = draw((4, 999), torch.float64)
    got = ours(a, b, dh, "reference", activation)
    # da's factor 1 + a (1 - s) cancels near a = -1.28 (gelu'(a) near a = -0.75, 1 + T below
    # a = -4): errors measured on the scale of the terms
    for x, ref, scale in zip(got, vjp_formula64(a, b, dh, activation), term_scales(a, b, dh, got, activation)):
        assert ((x - ref).abs() <= 8 * torch.finfo(torch.float64).eps * scale).all()


@act_param
def test_reference_functions_round_as_torch(activation):
    a, b, dh = draw((257,), torch.bfloat16, seed=3)
    h, da, db = torch_autograd(a, b, dh, activation)
    assert_bitwise(swiglu_forward_reference(a, b, activation), h)
    for x, ref in zip(swiglu_backward_reference(a, b, dh, activation), (da, db)):
        assert_bitwise(x, ref)


# ---------------------------------------------------------------------------
# The kernel in Triton's interpreter
# ---------------------------------------------------------------------------


@pytest.mark.interpreter
@act_param
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1,), (63,), (64,), (65,), (1000,), (3, 7, 41)])
def test_kernel_vs_torch_cpu(dtype, shape, activation):
    """Sizes below, at and above the block (64 here) and not a multiple of it."""
    a, b, dh = draw(shape, dtype, seed=len(shape))
    h = kswiglu.swiglu_forward(a, b, block_size=64, activation=activation)
    da, db = kswiglu.swiglu_backward(a, b, dh, block_size=64, activation=activation)
    assert h.shape == da.shape == db.shape == a.shape
    assert_kernel_matches_torch((h, da, db), torch_autograd(a, b, dh, activation), a, b, dh, activation)


@pytest.mark.interpreter
@act_param
@pytest.mark.parametrize("dtype", DTYPES)
def test_kernel_through_swiglu_cpu(dtype, activation):
    a, b, dh = draw((4, 1500), dtype, seed=5)
    assert_kernel_matches_torch(
        ours(a, b, dh, "triton", activation), torch_autograd(a, b, dh, activation), a, b, dh, activation
    )


@pytest.mark.interpreter
@act_param
def test_kernel_bfloat16_subnormals_cpu(activation):
    """Tiny bfloat16 inputs (subnormals near 1e-39, where exp(-a) is 1 and silu(a) = a / 2, tanh(.)
    is 0 and gelu(a) = a / 2): the kernel's loads and stores keep them (kernels/ojas_kernels/rounding.py's
    bit-shift conversions; the interpreter's own bfloat16 conversion renormalises them wrongly)."""
    tiny = torch.tensor([1e-39, -3e-39, 5e-40, 2e-38, 0.0, -1e-38], dtype=torch.float32).to(torch.bfloat16)
    a, b, dh = tiny, torch.full_like(tiny, 1.5), torch.full_like(tiny, 0.75)
    got = (
        kswiglu.swiglu_forward(a, b, activation=activation),
        *kswiglu.swiglu_backward(a, b, dh, activation=activation),
    )
    want = torch_autograd(a, b, dh, activation)
    assert_kernel_matches_torch(got, want, a, b, dh, activation)
    for x, ref in zip(got, want):
        assert_bitwise(x, ref)
    assert got[0].abs().min() == 0 and (got[0][:4] != 0).all()  # the subnormal outputs survive


@pytest.mark.interpreter
@act_param
def test_kernel_float32_against_vjp_formula_cpu(activation):
    """float32 kernel against the float64 formula: a few float32 ulps of each result's scale."""
    a, b, dh = draw((2000,), torch.float32, seed=7)
    got = ours(a, b, dh, "triton", activation)
    want = vjp_formula64(a, b, dh, activation)
    eps = torch.finfo(torch.float32).eps
    for x, ref, scale, ulps in zip(got, want, term_scales(a, b, dh, want, activation), (4, 16, 4)):
        assert ((x.double() - ref).abs() <= ulps * eps * scale).all()


@pytest.mark.interpreter
@act_param
def test_kernel_non_contiguous_cpu(activation):
    a, b, dh = draw((300, 70), torch.bfloat16, seed=8)
    a_t, b_t, dh_t = a.t(), b.t(), dh.t()
    got = ours(a_t, b_t, dh_t, "triton", activation)
    assert_kernel_matches_torch(got, torch_autograd(a_t, b_t, dh_t, activation), a_t, b_t, dh_t, activation)


@pytest.mark.interpreter
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@act_param
@pytest.mark.parametrize("impl", ["reference", "triton"])
def test_huge_magnitudes_float32(impl, activation):
    """The activation saturated (exp(-a) or a^3 overflows, tanh is +-1): NaN and inf exactly where
    torch has them (gelu_tanh's backward at |a| = 3e38 is 0 * inf in torch's formula: NaN)."""
    vals = [1e4, -1e4, 88.0, -88.0, 89.0, -89.0, 3e38, -3e38, 0.0, -0.0, 20.0, -20.0, 1e-30]
    a = torch.tensor(vals, dtype=torch.float32).repeat_interleave(3)
    b = torch.tensor([1.5, -0.25, 3e38] * len(vals), dtype=torch.float32)
    dh = torch.tensor([0.75, -2.0, 1e-3] * len(vals), dtype=torch.float32)
    got, want = ours(a, b, dh, impl, activation), torch_autograd(a, b, dh, activation)
    if impl == "reference":
        for x, ref in zip(got, want):
            assert_bitwise(x, ref)
    else:
        assert_kernel_matches_torch(got, want, a, b, dh, activation)
    nan = want[1].isnan()
    assert not want[0].isnan().any() and not want[2].isnan().any()
    assert not nan.any() if activation == "silu" else bool(nan.any()) and (a[nan].abs() > 1e30).all()


@act_param
@pytest.mark.parametrize("impl", ["reference", pytest.param("triton", marks=pytest.mark.interpreter)])
@pytest.mark.parametrize("shape", [(0,), (3, 0, 5)])
def test_empty(impl, shape, activation):
    a, b, dh = draw(shape, torch.float32)
    h, da, db = ours(a, b, dh, impl, activation)
    assert h.shape == da.shape == db.shape == shape


@pytest.mark.interpreter
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@settings(max_examples=16)
@given(
    rows=st.integers(0, 5),
    cols=st.integers(1, 300),
    dtype=st.sampled_from(DTYPES),
    scale=st.sampled_from([0.1, 4.0, 30.0]),
    seed=st.integers(0, 2**16),
    activation=st.sampled_from(ACTIVATIONS),
)
def test_property_kernel_and_reference(rows, cols, dtype, scale, seed, activation):
    a, b, dh = draw((rows, cols), dtype, seed=seed, scale=scale)
    want = torch_autograd(a, b, dh, activation)
    for x, ref in zip(ours(a, b, dh, "reference", activation), want):
        assert_bitwise(x, ref)
    assert_kernel_matches_torch(ours(a, b, dh, "triton", activation), want, a, b, dh, activation)


# ---------------------------------------------------------------------------
# Autograd: what is saved, which gradients, double backward
# ---------------------------------------------------------------------------


def saved_by(fn, a: torch.Tensor, b: torch.Tensor) -> list[torch.Tensor]:
    saved = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(a, b)
    return saved


@act_param
@pytest.mark.parametrize("impl", ["reference", pytest.param("triton", marks=pytest.mark.interpreter)])
def test_saves_only_gate_and_up(impl, activation):
    a, b, _ = draw((16, 40), torch.bfloat16)
    a.requires_grad_(), b.requires_grad_()
    saved = saved_by(lambda x, y: swiglu(x, y, activation=activation, impl=impl), a, b)
    assert len(saved) == 2
    assert {t.data_ptr() for t in saved} == {a.data_ptr(), b.data_ptr()}
    assert all(t.shape == a.shape for t in saved)
    # torch's autograd of act(a) * b keeps act(a) as well
    assert len(saved_by(lambda x, y: TORCH_ACTIVATIONS[activation](x) * y, a, b)) == 3


@act_param
@pytest.mark.parametrize("impl", ["reference", pytest.param("triton", marks=pytest.mark.interpreter)])
def test_gradient_of_one_input_only(impl, activation):
    a, b, dh = draw((50,), torch.float32, seed=2)
    a.requires_grad_()
    swiglu(a, b, activation=activation, impl=impl).backward(dh)
    _, da, _ = torch_autograd(a, b, dh, activation)
    assert b.grad is None
    assert_fp32_close(a.grad, da, term_scales(a.detach(), b, dh, (da,) * 3, activation)[1])


@pytest.mark.parametrize("impl", ["reference", pytest.param("triton", marks=pytest.mark.interpreter)])
def test_retained_graph_second_backward(impl):
    a, b, dh = draw((30,), torch.float32, seed=4)
    a.requires_grad_(), b.requires_grad_()
    h = swiglu(a, b, impl=impl)
    h.backward(dh, retain_graph=True)
    first = a.grad.clone()
    h.backward(dh)
    torch.testing.assert_close(a.grad, 2 * first)


@act_param
@pytest.mark.parametrize("impl", ["reference", pytest.param("triton", marks=pytest.mark.interpreter)])
def test_double_backward_refused(impl, activation):
    a, b, _ = draw((10,), torch.float64 if impl == "reference" else torch.float32)
    a.requires_grad_(), b.requires_grad_()
    h = swiglu(a, b, activation=activation, impl=impl)
    with pytest.raises(RuntimeError, match="does not support double backward"):
        torch.autograd.grad(h.sum(), a, create_graph=True)


@pytest.mark.interpreter
def test_impl_selects_the_kernel(monkeypatch):
    calls = []
    for name in ("swiglu_forward", "swiglu_backward"):
        fn = getattr(kswiglu, name)
        monkeypatch.setattr(
            kswiglu, name, lambda *args, _fn=fn, _name=name, **kw: calls.append((_name, kw)) or _fn(*args, **kw)
        )
    a, b, dh = draw((9,), torch.float32)
    ours(a, b, dh, "reference")
    assert calls == []
    ours(a, b, dh, "triton")
    ours(a, b, dh, "triton", "gelu_tanh")
    assert calls == [
        (name, dict(activation=act)) for act in ACTIVATIONS for name in ("swiglu_forward", "swiglu_backward")
    ]


def test_function_transforms_refused():
    a, b, _ = draw((5,), torch.float32)
    with pytest.raises(NotImplementedError, match="torch.func"):
        torch.func.grad(lambda x: swiglu(x, b).sum())(a)


def test_module():
    a, b, dh = draw((2, 3, 20), torch.bfloat16, seed=6)
    m = SwiGLU(impl="reference")
    assert "impl='reference'" in repr(m)
    a.requires_grad_()
    m(a, b).backward(dh)
    assert_bitwise(a.grad, torch_autograd(a, b, dh)[1])
    with pytest.raises(ValueError, match="impl must be one of"):
        SwiGLU(impl="cuda")
    geglu = SwiGLU(activation="gelu_tanh")
    assert repr(geglu) == "SwiGLU(activation='gelu_tanh')"
    b.requires_grad_()
    geglu(a, b).backward(dh)
    assert_bitwise(b.grad, torch_autograd(a, b, dh, "gelu_tanh")[2])
    with pytest.raises(ValueError, match="activation must be one of"):
        SwiGLU(activation="gelu")


# ---------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "gate, up, error, match",
    [
        (torch.ones(3, 4), torch.ones(4, 3), ValueError, "same shape"),
        (torch.ones(3, 4), torch.ones(4), ValueError, "no broadcasting"),
        (torch.ones(3), torch.ones(3, dtype=torch.bfloat16), TypeError, "share one dtype"),
        (torch.ones(3, dtype=torch.int64), torch.ones(3, dtype=torch.int64), TypeError, "floating-point"),
        (torch.ones(3, dtype=torch.complex64), torch.ones(3, dtype=torch.complex64), TypeError, "floating-point"),
        ([1.0, 2.0], torch.ones(2), TypeError, "gate must be a torch.Tensor"),
        (torch.ones(3), torch.ones(3, device="meta"), ValueError, "up is on meta"),
    ],
)
@act_param
def test_bad_input(gate, up, error, match, activation):
    with pytest.raises(error, match=match):
        swiglu(gate, up, activation=activation)


@pytest.mark.parametrize("activation", ["gelu", "relu", "SILU", None, F.silu])
def test_bad_activation(activation):
    """An unsupported activation raises (never another one silently), in the primitive and the kernel."""
    x = torch.ones(3)
    with pytest.raises(ValueError, match="activation must be one of"):
        swiglu(x, x, activation=activation)
    with pytest.raises(ValueError, match="activation must be one of"):
        swiglu_forward_reference(x, x, activation)
    with pytest.raises(ValueError, match="activation must be one of"):
        kswiglu.swiglu_forward(x, x, activation=activation)
    with pytest.raises(ValueError, match="activation must be one of"):
        kswiglu.swiglu_backward(x, x, x, activation=activation)


def test_bad_impl(monkeypatch):
    x = torch.ones(3)
    with pytest.raises(ValueError, match="impl must be one of"):
        swiglu(x, x, impl="fast")
    with pytest.raises(ValueError, match="OJAS_SWIGLU_IMPL"):  # the environment, read at import
        dispatch._settings_from({"OJAS_SWIGLU_IMPL": "fast"})
    with pytest.raises(TypeError, match="impl='reference' for float64"):
        swiglu(x.double(), x.double(), impl="triton")
    monkeypatch.setattr(dispatch, "_interpret", False)
    with pytest.raises(RuntimeError, match="needs CUDA tensors"):
        swiglu(x, x, impl="triton")


@act_param
def test_kernel_refuses_bad_input(activation):
    x = torch.ones(3)
    with pytest.raises(TypeError, match="a has dtype torch.float64.*float16, bfloat16, float32"):
        kswiglu.swiglu_forward(x.double(), x.double(), activation=activation)
    with pytest.raises(ValueError, match="grad_h .* must match a"):
        kswiglu.swiglu_backward(x, x, torch.ones(4), activation=activation)
    with pytest.raises(ValueError, match="b .* must match a"):
        kswiglu.swiglu_forward(x, x.half(), activation=activation)


# ---------------------------------------------------------------------------
# GPU (-m gpu)
# ---------------------------------------------------------------------------


@pytest.mark.gpu
@act_param
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(2048, 5632), (3, 1000, 77)])
def test_kernel_vs_torch_gpu(dtype, shape, activation):
    """silu: bitwise but ``da``; gelu_tanh: the interpreter's tolerance (module docstring; not yet
    run on a GPU)."""
    a, b, dh = (t.cuda() for t in draw(shape, dtype, seed=11))
    got, want = ours(a, b, dh, "triton", activation), torch_autograd(a, b, dh, activation)
    if activation == "gelu_tanh":
        assert_kernel_matches_torch(got, want, a, b, dh, activation)
        return
    (h, da, db), (h_t, da_t, db_t) = got, want
    assert_bitwise(h, h_t)
    assert_bitwise(db, db_t)
    if dtype == torch.float32:
        assert_fp32_close(da, da_t, (dh * b).abs().double() * (1 + a.abs().double()))
    else:
        assert_within_units(da, da_t, 1)


@pytest.mark.gpu
def test_huge_magnitudes_gpu():
    vals = [1e4, -1e4, 88.0, -88.0, 89.0, -89.0, 3e38, -3e38, 0.0, -0.0]
    a = torch.tensor(vals, device="cuda").repeat_interleave(2)
    b = torch.tensor([1.5, -0.25] * len(vals), device="cuda")
    dh = torch.tensor([0.75, -2.0] * len(vals), device="cuda")
    got, want = ours(a, b, dh, "triton"), torch_autograd(a, b, dh)
    assert_bitwise(got[0], want[0])
    assert_bitwise(got[2], want[2])
    assert_fp32_close(got[1], want[1], (dh * b).abs().double() * (1 + a.abs().double()))
