"""The row-wise and elementwise kernels against the executable models of their schedules
(``ojas_ref.verification.kernel_schedule_rowwise``), bit for bit.

* CPU (``TRITON_INTERPRET=1``, as CI runs): rms_norm forward and backward (dx, the partial dW
  rows, dW; both weight variants, an offset; widths not powers of 2, one row, several backward
  programs), swiglu forward and backward (silu, gelu_tanh), rope forward and backward (GQA, a
  broadcast cos / sin), relu forward and backward (NaN, both zeros, infinities), each at three
  or more shapes in float32 and bfloat16, equal the models with the interpreter's primitives;
  mutants (a row sum in another order, a division not rounded once, the device's fused products
  on the CPU, another number of dW programs, the forward's sine row in the backward, the other
  sign of relu(-0.0)) are caught and located. The device primitives' pieces are checked on the
  CPU: :func:`fma32` against exact rational arithmetic, :func:`blocked_sum` against the tree of
  the sm_90 PTX of ``_rms_norm_fwd_kernel`` (compiled here, no GPU), and the sm_90 code's fused
  products of swiglu are the model's.
* GPU (``-m gpu``): the same kernels against the device's primitives (its ``/``, ``1 / x``,
  ``tl.sqrt``, libdevice ``exp`` / ``tanh`` run by tiny kernels; the row sums on the layouts the
  launches compiled to).
"""

from __future__ import annotations

import dataclasses
import re
from fractions import Fraction

import numpy as np
import pytest
import torch

from ojas_ref.verification import kernel_schedule_rowwise as kr

DTYPES = [torch.float32, torch.bfloat16]
DTYPE_IDS = ["float32", "bfloat16"]
# rows, n, offset, after_weight: one row, widths not powers of 2, several backward programs (n=1000: 4 rows a block)
RMS_CASES = [(1, 37, 0.0, False), (5, 100, 1.0, True), (37, 1000, 0.0, False), (3, 300, 0.5, False), (6, 77, 1.0, True)]
SWIGLU_SIZES = [1, 1000, 3001]
ROPE_CASES = [((1, 3, 5, 6), 1, 1), ((2, 4, 7, 10), 2, 2), ((2, 2, 1, 64), 1, 2)]  # (B, Hq, S, E), Hkv, cos batch


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _rms_inputs(rows, n, dtype, device="cpu", seed=0):
    g = _gen(seed)
    x = (2 * torch.randn(rows, n, generator=g)).to(dtype)
    w = (1 + 0.3 * torch.randn(n, generator=g)).to(dtype)
    dy = torch.randn(rows, n, generator=g).to(dtype)
    return x.to(device), w.to(device), dy.to(device)


def _swiglu_inputs(size, dtype, device="cpu", seed=0):
    g = _gen(seed)
    a = 3 * torch.randn(size, generator=g)
    a[: min(size, 4)] = torch.tensor([0.0, -9.0, 12.0, -0.0])[: min(size, 4)]
    b, dh = torch.randn(size, generator=g), torch.randn(size, generator=g)
    return tuple(t.to(dtype).to(device) for t in (a, b, dh))


def _rope_inputs(case, dtype, device="cpu", seed=0):
    (b, hq, s, e), hkv, cb = case
    g = _gen(seed)
    q, k = torch.randn(b, hq, s, e, generator=g), torch.randn(b, hkv, s, e, generator=g)
    angle = torch.rand(cb, s, e, generator=g) * 6
    return tuple(t.to(dtype).to(device) for t in (q, k, angle.cos(), angle.sin()))


def _relu_input(size, dtype, device="cpu", seed=0):
    h = torch.randn(size, generator=_gen(seed))
    special = torch.tensor([0.0, -0.0, float("nan"), -float("nan"), float("inf"), -float("inf"), 1e-40, -1e-40])
    h[: min(size, 8)] = special[: min(size, 8)]
    return h.to(dtype).to(device)


CPU = kr.interpreter_primitives()


# ---------------------------------------------------------------------------
# CPU: the interpreter's primitives
# ---------------------------------------------------------------------------


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", RMS_CASES, ids=[f"{c[0]}x{c[1]}" for c in RMS_CASES])
def test_rms_norm_matches_the_interpreter_schedule_bit_for_bit(case, dtype):
    from ojas_kernels.rms_norm import rms_norm_forward

    rows, n, offset, after = case
    x, w, dy = _rms_inputs(rows, n, dtype)
    mismatch = kr.check_rms_norm_forward(x, w, 1e-6, offset, after, primitives=CPU)
    assert mismatch is None, str(mismatch)
    _, rstd = rms_norm_forward(x, w, 1e-6, offset, after)
    mismatch = kr.check_rms_norm_backward(dy, x, w, rstd, offset, after, primitives=CPU)
    assert mismatch is None, str(mismatch)


@pytest.mark.interpreter
def test_rms_norm_float32_weight_of_bfloat16_rows_matches():
    """The promoted output (float32) of the Llama variant: the product in float32, no final cast."""
    x, _, dy = _rms_inputs(4, 50, torch.bfloat16)
    w = 1 + 0.3 * torch.randn(50, generator=_gen(3))
    assert kr.check_rms_norm_forward(x, w, 1e-5, primitives=CPU) is None
    model = kr.rms_norm_forward_schedule(x, w, 1e-5, primitives=CPU)
    assert model.outputs["y"].dtype == torch.float32


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("activation", ["silu", "gelu_tanh"])
@pytest.mark.parametrize("size", SWIGLU_SIZES)
def test_swiglu_matches_the_interpreter_schedule_bit_for_bit(size, activation, dtype):
    a, b, dh = _swiglu_inputs(size, dtype)
    assert (m := kr.check_swiglu_forward(a, b, activation, primitives=CPU)) is None, str(m)
    assert (m := kr.check_swiglu_backward(a, b, dh, activation, primitives=CPU)) is None, str(m)


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", ROPE_CASES, ids=["one-head-pair", "batched-cos", "one-position"])
def test_rope_matches_the_schedule_bit_for_bit(case, dtype):
    q, k, cos, sin = _rope_inputs(case, dtype)
    assert (m := kr.check_rope(q, k, cos, sin)) is None, str(m)
    assert (m := kr.check_rope(q, k, cos, sin, backward=True)) is None, str(m)


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", DTYPES + [torch.float16], ids=DTYPE_IDS + ["float16"])
@pytest.mark.parametrize("size", [1, 13, 2053])
def test_relu_matches_the_schedule_bit_for_bit(size, dtype):
    from ojas_kernels.relu import relu_forward

    h = _relu_input(size, dtype)
    assert (m := kr.check_relu_forward(h)) is None, str(m)
    packed = relu_forward(h)[1]
    grad = torch.randn(size, generator=_gen(1)).to(dtype)
    assert (m := kr.check_relu_backward(grad, packed)) is None, str(m)


# ---------------------------------------------------------------------------
# Mutants
# ---------------------------------------------------------------------------


def _sequential_sum(x: torch.Tensor, axis: int, layout) -> torch.Tensor:
    x = x if axis == 1 else x.t()
    acc = x[:, 0].clone()
    for j in range(1, x.shape[1]):
        acc = acc + x[:, j]
    return acc


@pytest.mark.interpreter
def test_a_row_sum_in_another_order_is_caught_at_rstd():
    x, w, _ = _rms_inputs(6, 1000, torch.float32, seed=2)
    mutant = dataclasses.replace(CPU, name="sequential row sum", sum=_sequential_sum)
    mismatch = kr.check_rms_norm_forward(x, w, 1e-6, primitives=mutant)
    assert mismatch is not None and mismatch.output == "rstd"  # rstd is stored first... and differs
    assert mismatch.operation.startswith("r = 1 / sqrt(sum(x * x) / n + eps): the row sum")
    steps = dict(mismatch.steps)
    assert steps["r"] == mismatch.model != mismatch.kernel
    (row,) = mismatch.index
    correct = kr.rms_norm_forward_schedule(x, w, 1e-6, primitives=CPU)
    assert correct.steps["rstd"]["sum(x*x)"][0][row].item() != steps["sum(x*x)"]  # the sum is what changed
    assert "first differing operation: r = 1 / sqrt" in str(mismatch)


@pytest.mark.interpreter
def test_another_number_of_dw_programs_is_caught_at_dw_only():
    """The kernel's 4 programs on the CPU add 10 blocks of rows in 4 partial rows; a model with one
    program adds them in another order: dx agrees, dw does not."""
    from ojas_kernels.rms_norm import rms_norm_backward, rms_norm_forward

    x, w, dy = _rms_inputs(40, 1000, torch.float32, seed=4)
    _, rstd = rms_norm_forward(x, w, 1e-6)
    dx, dw = rms_norm_backward(dy, x, w, rstd)
    right = kr.rms_norm_backward_schedule(dy, x, w, rstd, programs=4, primitives=CPU)
    assert kr.compare("rms_norm backward", {"dx": dx, "dw": dw}, right) is None
    wrong = kr.rms_norm_backward_schedule(dy, x, w, rstd, programs=1, primitives=CPU)
    mismatch = kr.compare("rms_norm backward", {"dx": dx, "dw": dw}, wrong)
    assert mismatch is not None and mismatch.output == "dw" and mismatch.operation.startswith("dw = cast(sum")
    assert [name for name, _ in mismatch.steps] == ["dw_part[0]"]


@pytest.mark.interpreter
def test_a_division_not_rounded_once_is_caught_in_swiglu():
    a, b, _ = _swiglu_inputs(1000, torch.float32, seed=5)
    mutant = dataclasses.replace(CPU, name="a * (1 / d)", div_rn=lambda x, y: x * (1.0 / y))
    mismatch = kr.check_swiglu_forward(a, b, "silu", primitives=mutant)
    assert mismatch is not None and mismatch.output == "h" and mismatch.operation.startswith("h = rnd(rnd(silu(a))")
    (i,) = mismatch.index
    steps = dict(mismatch.steps)
    correct = kr.swiglu_forward_schedule(a, b, "silu", primitives=CPU).steps["h"]
    assert steps["1 + exp(-a)"] == correct["1 + exp(-a)"][0][i].item()  # the steps before the division agree
    assert steps["act = a / (1 + exp(-a))"] != correct["act = a / (1 + exp(-a))"][0][i].item()


@pytest.mark.interpreter
@pytest.mark.parametrize("activation", ["silu", "gelu_tanh"])
def test_the_devices_fused_products_are_caught_on_the_cpu(activation):
    """The interpreter rounds every product: the model with the device's fused products (fma32)
    differs, first in da (silu: the forward has none; gelu_tanh: its a + C a^3 shows in h first)."""
    a, b, dh = _swiglu_inputs(3001, torch.float32, seed=6)
    fused = dataclasses.replace(CPU, name="fused", fma=kr.fma32)
    forward = kr.check_swiglu_forward(a, b, activation, primitives=fused)
    backward = kr.check_swiglu_backward(a, b, dh, activation, primitives=fused)
    assert backward is not None and backward.output in ("da", "db")
    if activation == "silu":
        assert forward is None and backward.output == "da"
        assert "fma(a, 1 - s, 1)" in dict(backward.steps)
    else:
        assert forward is not None and forward.output == "h"


@pytest.mark.interpreter
def test_the_forward_sine_row_in_the_backward_is_caught():
    from ojas_kernels.rope import rope_backward

    q, k, cos, sin = _rope_inputs(ROPE_CASES[1], torch.bfloat16, seed=7)
    dq, dk = rope_backward(q, k, cos, sin)
    mismatch = kr.compare("rope backward", {"q_out": dq, "k_out": dk}, kr.rope_schedule(q, k, cos, sin, False))
    assert mismatch is not None and mismatch.output == "q_out" and len(mismatch.index) == 4
    assert set(dict(mismatch.steps)) == {"rnd(x c)", "rnd(rotate_half(x) s)"}


@pytest.mark.interpreter
def test_the_other_sign_of_relu_negative_zero_is_caught():
    from ojas_kernels.relu import keeps_negative_zero

    h = _relu_input(64, torch.float32)
    keep = keeps_negative_zero(h.device)
    mismatch = kr.check_relu_forward(h, keep_negative_zero=not keep)
    assert mismatch is not None and mismatch.output == "r" and mismatch.index == (1,)  # h[1] is -0.0
    assert mismatch.kernel == mismatch.model == 0.0  # the bits differ: the sign of the zero


def test_compare_refuses_outputs_of_another_shape():
    model = kr.relu_backward_schedule(torch.zeros(9), torch.zeros(2, dtype=torch.uint8))
    with pytest.raises(ValueError, match="dx: kernel"):
        kr.compare("relu backward", {"dx": torch.zeros(8)}, model)


def test_rms_norm_schedule_refuses_float64_and_device_sums_without_layouts():
    x = torch.randn(2, 8, dtype=torch.float64)
    with pytest.raises(ValueError, match="float64 is not modelled"):
        kr.rms_norm_forward_schedule(x, torch.ones(8, dtype=torch.float64), 1e-6, primitives=CPU)
    device_like = dataclasses.replace(CPU, needs_layout=True)
    with pytest.raises(ValueError, match="launch's layouts"):
        kr.rms_norm_forward_schedule(x.float(), torch.ones(8), 1e-6, primitives=device_like)


# ---------------------------------------------------------------------------
# The device primitives' pieces, on the CPU
# ---------------------------------------------------------------------------


def test_fma32_rounds_once():
    g = _gen(8)
    a, b = torch.randn(4000, generator=g), torch.randn(4000, generator=g)
    c = -(a * b) + torch.randn(4000, generator=g) * 1e-6  # cancellation: the product's low bits matter
    # midpoints of float32 reached only by the exact sum: 1 + 2^-24 (+-) a tiny product
    a = torch.cat([a, torch.tensor([2.0**-24, 2.0**-24, 1.0 + 2.0**-23])])
    b = torch.cat([b, torch.tensor([1.0 + 2.0**-23, 1.0 - 2.0**-24, 1.0 + 2.0**-23])])
    c = torch.cat([c, torch.tensor([1.0, 1.0, -1.0])])
    got = kr.fma32(a, b, c)
    for x, y, z, r in zip(a.tolist(), b.tolist(), c.tolist(), got.tolist()):
        exact = Fraction(x) * Fraction(y) + Fraction(z)
        near = np.float32(float(exact))  # within an ulp of the correctly rounded value
        candidates = [near, np.nextafter(near, np.float32(np.inf)), np.nextafter(near, np.float32(-np.inf))]
        # the nearest, ties to the even significand
        want = min(candidates, key=lambda f: (abs(exact - Fraction(float(f))), int(np.float32(f).view(np.int32)) % 2))
        assert r == float(want), (x, y, z)
    unfused = a * b + c
    assert not torch.equal(got, unfused)


def test_blocked_sum_is_its_tree():
    """A thread's elements by a balanced tree of adjacent pairs, then the butterflies over lanes and warps."""
    g = _gen(9)
    x = torch.exp(4 * torch.randn(3, 256, generator=g))
    layout = kr.Blocked((1, 1), (1, 32), (1, 2))  # 4 elements a thread: k = lane + 32 (warp + 2 j)
    got = kr.blocked_sum(x, 1, layout)
    for r in range(3):

        def thread(lane, warp):
            e = [x[r, lane + 32 * (warp + 2 * j)] for j in range(4)]
            return (e[0] + e[1]) + (e[2] + e[3])

        v = [[thread(lane, warp) for lane in range(32)] for warp in range(2)]
        for warp in range(2):
            for off in (16, 8, 4, 2, 1):
                v[warp] = [v[warp][t] + v[warp][t ^ off] for t in range(32)]
        assert got[r] == v[0][0] + v[1][0]
    columns = kr.Blocked((1, 1), (32, 1), (2, 1))  # the same along the rows
    assert torch.equal(kr.blocked_sum(x.t().contiguous(), 0, columns), got)
    assert not torch.equal(got, _sequential_sum(x, 1, None))
    with pytest.raises(ValueError, match="replicates"):
        kr.blocked_sum(torch.zeros(2, 32), 1, layout)


def _sm90(kernel, signature: dict, constexprs: dict, options: dict) -> dict:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile

    sig = {n: "constexpr" if n in constexprs else signature.get(n, "i32") for n in kernel.arg_names}
    try:
        return compile(ASTSource(kernel, sig, constexprs), target=GPUTarget("cuda", 90, 32), options=options).asm
    except Exception as err:  # no NVIDIA backend or ptxas in this Triton
        pytest.skip(f"cannot compile for sm_90 here: {type(err).__name__}: {err}")


def _rms_fwd_sm90(n: int, dtype: str):
    from ojas_kernels import rms_norm as rn

    torch_dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
    *_, options = rn._fwd_plan(n, torch_dtype, torch_dtype, False)  # the launch's constexprs and options
    consts = {k: v for k, v in options.items() if k not in ("num_warps", "enable_fp_fusion")}
    ptr = f"*{dtype}"
    sig = dict(X=ptr, W=ptr, Y=ptr, RSTD="*fp32", eps="fp32", offset="fp32")
    opts = {k: options[k] for k in ("num_warps", "enable_fp_fusion") if k in options}
    return _sm90(rn._rms_norm_fwd_kernel, sig, consts, opts)


def test_the_sm90_row_sum_of_rms_norm_is_blocked_sum():
    """``_rms_norm_fwd_kernel`` for 4096 bf16 columns (1 row, 8 warps) compiled for sm_90: its
    reduction's layout is read by :func:`reduce_layouts`; evaluating the PTX's in-thread
    ``add.rn.f32`` tree (element k of a thread its k-th load of X) gives the balanced tree of
    :func:`blocked_sum`, then shuffles xor 16 .. 1 and, after shared memory, xor 4 .. 1; the only
    float operations are ``.rn`` (no contraction), ``div.full.f32`` and ``sqrt.approx.ftz.f32``."""
    asm = _rms_fwd_sm90(4096, "bf16")
    ((axis, layout),) = kr.reduce_layouts(asm["ttgir"])
    assert axis == 1 and layout == kr.Blocked((1, 1), (1, 32), (1, 8))
    ptx = asm["ptx"]
    assert "fma" not in ptx and re.findall(r"\b(div\.\w+\.f32|sqrt\.\w+(?:\.ftz)?\.f32)", ptx) == [
        "div.full.f32",
        "sqrt.approx.ftz.f32",
        "div.full.f32",
    ]
    lines = ptx.splitlines()
    first_shfl = next(i for i, line in enumerate(lines) if "shfl.sync.bfly" in line)
    offsets = [int(m.group(1)) for m in re.finditer(r"shfl\.sync\.bfly\.b32\s+%r\d+, %r\d+, (\d+)", ptx)]
    assert offsets == [16, 8, 4, 2, 1, 4, 2, 1]
    g = _gen(10)
    for _ in range(5):
        values = torch.exp(3 * torch.randn(16, generator=g)).bfloat16().float()
        regs, loads = {}, 0
        for line in lines[:first_shfl]:
            if m := re.search(r"ld\.global\.b16 \{ (%rs\d+) \}", line):
                if loads < 16:  # X's loads come first, in element order
                    regs[m.group(1)] = values[loads].item()
                loads += 1
            elif m := re.search(r"mov\.b32\s+(%r\d+), \{(%rs\d+), (%rs\d+)\}", line):
                regs[m.group(1)] = (regs.get(m.group(2)), regs.get(m.group(3)))
            elif m := re.search(r"mov\.b32\s+\{(%rs\d+), (%rs\d+)\}, (%r\d+)", line):
                regs[m.group(1)], regs[m.group(2)] = regs[m.group(3)]
            elif m := re.search(r"cvt\.f32\.bf16\s+(%r\d+), (%rs\d+)", line):
                regs[m.group(1)] = np.float32(regs[m.group(2)])
            elif m := re.search(r"(mul|add)\.rn\.f32\s+(%r\d+), (%r\d+), (%r\d+)", line):
                x, y = np.float32(regs[m.group(3)]), np.float32(regs[m.group(4)])
                regs[m.group(2)] = x * y if m.group(1) == "mul" else x + y
        root = re.search(r"shfl\.sync\.bfly\.b32\s+%r\d+, (%r\d+),", lines[first_shfl]).group(1)
        assert regs[root] == kr._tree((values * values)[None, :])[0].item()


@pytest.mark.parametrize("activation", ["silu", "gelu_tanh"])
def test_the_sm90_fused_products_of_swiglu_are_the_models(activation):
    """The kernel-level contractions (``fma.rn.f32``, not libdevice's ``.ftz`` ones) of the sm_90
    code, per element: silu forward 1 (``1 + exp(-a)`` with expf's final scaling, exact), backward
    2 (that and ``1 + a (1 - s)``); gelu_tanh forward 1 (``a + a^3 C``), backward 4 (that,
    ``1 - T T``, ``1 + a^2 C3``, ``0.5 (1 + T) + P``); divisions ``div.rn.f32`` only."""
    from ojas_kernels import swiglu as sw

    ptr = "*bf16"
    fused = {"silu": (1, 2), "gelu_tanh": (1, 4)}[activation]
    for kernel, names, want in (
        (sw._swiglu_fwd_kernel, ("A", "B", "H"), fused[0]),
        (sw._swiglu_bwd_kernel, ("A", "B", "DH", "DA", "DB"), fused[1]),
    ):
        asm = _sm90(kernel, {n: ptr for n in names}, dict(BLOCK=1024, ACT=activation), dict(enable_fp_fusion=True))
        ptx = asm["ptx"]
        per_thread = 1024 // (32 * 4)  # BLOCK over the default 4 warps' threads
        assert len(re.findall(r"\bfma\.rn\.f32\b", ptx)) == want * per_thread
        assert not re.search(r"div\.(full|approx)\.f32", ptx)
    if activation == "gelu_tanh":  # the fourth: 0.5 (1 + T) fused, the other product rounded
        assert re.search(r"fma\.rn\.f32\s+%r\d+, %r\d+, 0f3F000000, %r\d+;", ptx)


# ---------------------------------------------------------------------------
# GPU: the device's primitives
# ---------------------------------------------------------------------------

GPU_RMS_CASES = [(8, 4096, 0.0, False), (64, 1000, 1.0, True), (300, 100, 0.0, False), (1, 5120, 0.0, False)]


def _device():
    try:
        return kr.device_primitives()
    except RuntimeError as err:
        pytest.skip(str(err))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", GPU_RMS_CASES, ids=[f"{c[0]}x{c[1]}" for c in GPU_RMS_CASES])
def test_rms_norm_matches_the_device_schedule_bit_for_bit_gpu(case, dtype):
    from ojas_kernels.rms_norm import rms_norm_forward

    primitives = _device()
    rows, n, offset, after = case
    x, w, dy = _rms_inputs(rows, n, dtype, "cuda", seed=11)
    assert (m := kr.check_rms_norm_forward(x, w, 1e-6, offset, after, primitives=primitives)) is None, str(m)
    _, rstd = rms_norm_forward(x, w, 1e-6, offset, after)
    assert (m := kr.check_rms_norm_backward(dy, x, w, rstd, offset, after, primitives=primitives)) is None, str(m)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("activation", ["silu", "gelu_tanh"])
@pytest.mark.parametrize("size", [1, 4097, 100_003])
def test_swiglu_matches_the_device_schedule_bit_for_bit_gpu(size, activation, dtype):
    primitives = _device()
    a, b, dh = _swiglu_inputs(size, dtype, "cuda", seed=12)
    assert (m := kr.check_swiglu_forward(a, b, activation, primitives=primitives)) is None, str(m)
    assert (m := kr.check_swiglu_backward(a, b, dh, activation, primitives=primitives)) is None, str(m)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", ROPE_CASES, ids=["one-head-pair", "batched-cos", "one-position"])
def test_rope_matches_the_schedule_bit_for_bit_gpu(case, dtype):
    q, k, cos, sin = _rope_inputs(case, dtype, "cuda", seed=13)
    assert (m := kr.check_rope(q, k, cos, sin)) is None, str(m)
    assert (m := kr.check_rope(q, k, cos, sin, backward=True)) is None, str(m)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES + [torch.float16], ids=DTYPE_IDS + ["float16"])
@pytest.mark.parametrize("size", [1, 13, 100_003])
def test_relu_matches_the_schedule_bit_for_bit_gpu(size, dtype):
    from ojas_kernels.relu import relu_forward

    h = _relu_input(size, dtype, "cuda", seed=14)
    assert (m := kr.check_relu_forward(h)) is None, str(m)
    grad = torch.randn(size, generator=_gen(15)).to(dtype).cuda()
    assert (m := kr.check_relu_backward(grad, relu_forward(h)[1])) is None, str(m)
