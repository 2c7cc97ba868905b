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
import json
import pathlib
import re
from fractions import Fraction

import numpy as np
import pytest
import torch
import triton

from ojas_ref.verification import kernel_schedule as ks
from ojas_ref.verification import kernel_schedule_rowwise as kr

DTYPES = [torch.float32, torch.bfloat16]
DTYPE_IDS = ["float32", "bfloat16"]
# rows, n, offset, after_weight: one row, widths not powers of 2, several backward programs (n=1000: 4 rows a block)
RMS_CASES = [(1, 37, 0.0, False), (5, 100, 1.0, True), (37, 1000, 0.0, False), (3, 300, 0.5, False), (6, 77, 1.0, True)]
SWIGLU_SIZES = [1, 1000, 3001]
ROPE_CASES = [((1, 3, 5, 6), 1, 1), ((2, 4, 7, 10), 2, 2), ((2, 2, 1, 64), 1, 1)]  # (B, Hq, S, E), Hkv, cos batch


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


def test_interpreter_sqrt_is_correctly_rounded():
    """The interpreter's ``tl.sqrt`` is numpy's IEEE sqrt, so its model is too: float32 sqrt
    rounded once from the float64 one (exact for sqrt). torch's CPU sqrt was seen 1 ulp off on
    an AVX-512 machine at 2.8944973945617676 (1.7013223 for 1.7013222), which failed the RMSNorm
    schedule tests there."""
    gen = torch.Generator().manual_seed(0)
    x = torch.cat([torch.tensor([2.8944973945617676]), torch.rand(4096, generator=gen) * 1e3]).float()
    want = torch.from_numpy(np.sqrt(x.double().numpy()).astype(np.float32))
    assert torch.equal(CPU.sqrt(x), want)


def _assert_swiglu_matches(a, b, dh, activation, primitives):
    """swiglu's forward and backward kernels equal their schedules bit for bit."""
    assert (m := kr.check_swiglu_forward(a, b, activation, primitives=primitives)) is None, str(m)
    assert (m := kr.check_swiglu_backward(a, b, dh, activation, primitives=primitives)) is None, str(m)


def _assert_rope_matches(q, k, cos, sin):
    """rope's forward and backward kernels equal their schedules bit for bit."""
    assert (m := kr.check_rope(q, k, cos, sin)) is None, str(m)
    assert (m := kr.check_rope(q, k, cos, sin, backward=True)) is None, str(m)


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
    _assert_swiglu_matches(*_swiglu_inputs(size, dtype), activation, CPU)


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", ROPE_CASES, ids=["one-batch", "batched-cos", "one-position-broadcast-cos"])
def test_rope_matches_the_schedule_bit_for_bit(case, dtype):
    _assert_rope_matches(*_rope_inputs(case, dtype))


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


@pytest.mark.interpreter
def test_a_nearest_even_cast_is_caught_in_rms_norm_under_the_interpreter():
    """rms_norm's ``.to(bfloat16)`` (of x r, y, dx, dw) truncates under TRITON_INTERPRET=1 (it has no
    ``rounding._round``, unlike swiglu and rope): the model with torch's nearest-even cast differs
    from the kernel at y, rstd (computed before any cast) agreeing."""
    x, w, _ = _rms_inputs(5, 100, torch.bfloat16, seed=16)
    nearest = dataclasses.replace(CPU, name="nearest-even cast", cast=lambda t, dtype: t.to(dtype))
    mismatch = kr.check_rms_norm_forward(x, w, 1e-6, primitives=nearest)
    assert mismatch is not None and mismatch.output == "y"
    assert mismatch.operation.startswith("y = cast(x r * (offset + w)) or cast(cast(x r) * w)")
    assert abs(mismatch.model) > abs(mismatch.kernel)  # the truncated value is the smaller in magnitude


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
    got = kr.blocked_sum(x, 1, layout, "3.9.0")
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
    assert torch.equal(kr.blocked_sum(x.t().contiguous(), 0, columns, "3.9.0"), got)
    assert not torch.equal(got, _sequential_sum(x, 1, None))
    with pytest.raises(ValueError, match="replicates"):
        kr.blocked_sum(torch.zeros(2, 32), 1, layout)


def test_the_launches_pin_fma_contraction_as_the_models_assume(monkeypatch):
    """rms_norm and rope compile without contraction, swiglu with it (the models' fused products),
    whatever Triton's default (Triton 3.10 turns it off)."""
    from ojas_kernels import rms_norm as rn
    from ojas_kernels import rope, swiglu

    assert rn._fwd_plan(100, torch.bfloat16, torch.bfloat16, False)[3]["enable_fp_fusion"] is False
    _, _, options, dw_options, _ = rn._bwd_plan(100, torch.bfloat16, True)
    assert options["enable_fp_fusion"] is False and dw_options["enable_fp_fusion"] is False
    assert rope._options(2, 1, 4, False)["enable_fp_fusion"] is False
    launches = []

    class Recorder:
        def __init__(self, kernel):
            self.kernel = kernel

        def __getitem__(self, grid):
            return lambda *args, **kwargs: launches.append(kwargs)

    monkeypatch.setattr(swiglu, "fast", Recorder)
    a = torch.zeros(8)
    swiglu.swiglu_forward(a, a)
    swiglu.swiglu_backward(a, a, a, activation="gelu_tanh")
    assert [k.get("enable_fp_fusion") for k in launches] == [True, True]


def _sm90(kernel, signature: dict, constexprs: dict, options: dict, aligned: tuple[str, ...] = ()) -> dict:
    """``kernel`` compiled for sm_90 on this machine (no GPU needed: Triton's NVIDIA backend and its
    ptxas); ``aligned``: the arguments specialized as multiples of 16 (pointers and ints), as a launch
    with 16-byte aligned tensors and such sizes specializes them."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile

    sig = {n: "constexpr" if n in constexprs else signature.get(n, "i32") for n in kernel.arg_names}
    attrs = {(kernel.arg_names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    try:
        source = ASTSource(kernel, sig, constexprs, attrs)
        return compile(source, target=GPUTarget("cuda", 90, 32), options=options).asm
    except Exception as err:  # no NVIDIA backend or ptxas in this Triton
        pytest.skip(f"cannot compile for sm_90 here: {type(err).__name__}: {err}")


def _rms_sm90(direction: str, n: int, dtype: str, aligned: bool) -> dict:
    """``_rms_norm_fwd_kernel`` / ``_rms_norm_bwd_kernel`` for rows of ``n`` (Llama variant) with the
    launch's constexprs and options (``_fwd_plan`` / ``_bwd_plan``)."""
    from ojas_kernels import rms_norm as rn

    torch_dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
    ptr = f"*{dtype}"
    if direction == "fwd":
        kernel, *_, options = rn._rms_norm_fwd_kernel, *rn._fwd_plan(n, torch_dtype, torch_dtype, False)
        sig = dict(X=ptr, W=ptr, Y=ptr, RSTD="*fp32", eps="fp32", offset="fp32")
        ints = ("n", "stride_x", "stride_y")
    else:
        kernel, options = rn._rms_norm_bwd_kernel, rn._bwd_plan(n, torch_dtype, False)[2]
        sig = dict(DY=ptr, X=ptr, W=ptr, RSTD="*fp32", DX=ptr, DW_PART="*fp32", offset="fp32")
        ints = ("n", "stride_dy", "stride_x", "stride_dx")
    consts = {k: v for k, v in options.items() if k not in ("num_warps", "enable_fp_fusion")}
    opts = {k: options[k] for k in ("num_warps", "enable_fp_fusion")}
    pointers = tuple(k for k, v in sig.items() if v.startswith("*"))
    return _sm90(kernel, sig, consts, opts, pointers + (ints if aligned else ()))


def _ptx_in_thread_sums(ptx: str) -> tuple[list[tuple], list[int]]:
    """The in-thread sums of the PTX's reductions, as expression trees, and the ``shfl.sync.bfly``
    offsets in order (0 for a store to shared memory). A register loaded from global memory is the
    leaf ("L", k), k increasing with the loads (two for a 32-bit register of two 16-bit values);
    shuffled and shared-memory registers are ("U", reg). The code is read twice, the sums and offsets
    taken from the second reading, so that a loop-carried register (a load software-pipelined into
    the previous iteration) has its value. A sum is an ``add.rn.f32`` tree of at least two products
    reaching a shuffle, a store to shared memory, or an addition to an unknown value (the dW
    accumulator)."""
    regs, count, sums, offsets = {}, [0], [], []

    def get(r: str) -> tuple:
        return regs.get(r, ("U", r))

    def leaf() -> tuple:
        count[0] += 2
        return ("L", count[0] - 2)

    for line in [raw.strip() for raw in ptx.splitlines()] * 2:
        if line.startswith(".visible .entry"):
            sums, offsets = [], []
        if m := re.match(r"(?:@%p\d+ )?ld\.global(?:\.[\w:]+)*?\.b(?:16|32) \{ ([^}]*) \}", line):
            for r in m.group(1).split(","):
                regs[r.strip()] = leaf()
        elif m := re.match(r"mov\.b32\s+\{(%rs\d+), (%rs\d+)\}, (%r\d+);", line):
            e = get(m.group(3))
            halves = {"L": lambda: (("L", e[1]), ("L", e[1] + 1)), "pack": lambda: (e[1], e[2])}
            regs[m.group(1)], regs[m.group(2)] = halves.get(e[0], lambda: (("U", line), ("U", line)))()
        elif m := re.match(r"mov\.b32\s+(%r\d+), \{(%rs\d+), (%rs\d+)\};", line):
            regs[m.group(1)] = ("pack", get(m.group(2)), get(m.group(3)))
        elif m := re.match(r"(?:mov\.(?:b32|f32)|cvt\.f32\.bf16)\s+(%r\d+), (%rs?\d+);", line):
            regs[m.group(1)] = get(m.group(2))
        elif m := re.match(
            r"(mul|add|sub|div)\.(?:rn|full)\.(?:f32|bf16)\s+(%rs?\d+), (%rs?\d+|0f\w+), (%rs?\d+|0f\w+);", line
        ):
            op, out, x, y = m.groups()
            regs[out] = (op, get(x), get(y))
            if op == "add" and (get(x)[0] == "U") != (get(y)[0] == "U"):
                sums.append(get(y) if get(x)[0] == "U" else get(x))
        elif m := re.match(r"shfl\.sync\.bfly\.b32\s+(%r\d+), (%r\d+), (\d+)", line):
            sums.append(get(m.group(2)))
            offsets.append(int(m.group(3)))
            regs[m.group(1)] = ("U", m.group(1))
        elif m := re.match(r"st\.shared\.b32\s+\[[^]]*\], (%r\d+);", line):
            sums.append(get(m.group(1)))
            offsets.append(0)
        elif m := re.match(r"ld\.shared\.b32\s+(%r\d+)", line):
            regs[m.group(1)] = ("U", m.group(1))
    return [e for e in sums if e[0] == "add" and all(t[0] == "mul" for t in _terms(e))], offsets


def _terms(e: tuple) -> list[tuple]:
    return _terms(e[1]) + _terms(e[2]) if e[0] == "add" else [e]


def _first_load(e: tuple) -> int:
    """The first load of the tree ``e`` (-1 for none)."""
    if e[0] == "L":
        return e[1]
    return min((k for c in e[1:] if isinstance(c, tuple) for k in [_first_load(c)] if k >= 0), default=-1)


def _balanced_adjacent(e: tuple) -> bool:
    """Whether the ``add`` tree ``e`` is the balanced tree of adjacent pairs of its terms in the order
    of their loads."""
    if e[0] != "add":
        return True
    a, b = sorted(map(_first_load, _terms(e[1]))), sorted(map(_first_load, _terms(e[2])))
    halves = len(a) == len(b) and (a[-1] < b[0] or b[-1] < a[0])
    return halves and _balanced_adjacent(e[1]) and _balanced_adjacent(e[2])


RMS_SM90 = [  # the GPU tests' launches: direction, n, dtype, aligned (n a multiple of 16)
    ("fwd", 4096, "bf16", True),
    ("fwd", 4096, "bf16", False),
    ("fwd", 1000, "bf16", False),
    ("fwd", 100, "fp32", False),
    ("fwd", 5120, "fp32", True),
    ("bwd", 4096, "bf16", True),
    ("bwd", 1000, "bf16", False),
    ("bwd", 100, "fp32", False),
    ("bwd", 5120, "fp32", True),
]


@pytest.mark.parametrize("case", RMS_SM90, ids=[f"{c[0]}-{c[1]}-{c[2]}{'-aligned' * c[3]}" for c in RMS_SM90])
@pytest.mark.skipif(
    not triton.__version__.startswith("3.9."),
    reason="the balanced in-thread tree and the shared-memory stores it reads are Triton 3.9's PTX (3.6's sum is "
    "sequential: test_the_triton_36_sums_of_rms_norm_evaluate_as_blocked_sum)",
)
def test_the_sm90_reductions_of_rms_norm_are_blocked_sum(case):
    """Every in-thread sum of ``_rms_norm_{fwd,bwd}_kernel``'s sm_90 PTX is the balanced tree of
    adjacent pairs of the thread's elements (in the order of their loads: the ``j``, then ``i``
    order of :func:`blocked_sum`), with the number of terms :func:`blocked_sum` gives the layout the
    TTGIR reduces; the shuffles then go xor t/2 .. 1 over the lanes and, after shared memory,
    w/2 .. 1 over the warps; the only float operations are ``.rn`` ones (no contraction),
    ``div.full.f32`` and ``sqrt.approx.ftz.f32``."""
    from ojas_kernels import rms_norm as rn

    direction, n, dtype, aligned = case
    asm = _rms_sm90(direction, n, dtype, aligned)
    block_m, block_n, _ = rn._blocks(n)
    layouts = kr.reduce_layouts(asm["ttgir"])
    assert [axis for axis, _ in layouts] == ([1] if direction == "fwd" else [0, 1])
    per_thread = {}
    for axis, layout in layouts:
        size = (block_m, block_n)[axis]
        s, t, w = layout.size[axis], layout.threads[axis], layout.warps[axis]
        per_thread[axis] = size // (s * t * w) * s
    sums, offsets = _ptx_in_thread_sums(asm["ptx"])
    assert all(_first_load(t) >= 0 for e in sums for t in _terms(e))  # every product's loads are known
    assert all(_balanced_adjacent(e) for e in sums)
    x = [("mul", ("L", 2 * k), ("L", 2 * k)) for k in range(4)]
    assert not _balanced_adjacent(("add", ("add", ("add", x[0], x[1]), x[2]), x[3]))  # sequential
    assert not _balanced_adjacent(("add", ("add", x[0], x[2]), ("add", x[1], x[3])))  # not adjacent
    assert {len(_terms(e)) for e in sums} == {k for k in per_thread.values() if k > 1}
    ptx = asm["ptx"]
    assert "fma" not in ptx
    approximate = re.findall(r"\b(div\.\w+\.f32|sqrt\.\w+(?:\.ftz)?\.f32)", ptx)
    assert set(approximate) == ({"div.full.f32", "sqrt.approx.ftz.f32"} if direction == "fwd" else {"div.full.f32"})
    row = next(layout for axis, layout in layouts if axis == 1)
    lanes = [row.threads[1] >> k for k in range(1, row.threads[1].bit_length())]
    warps = [row.warps[1] >> k for k in range(1, row.warps[1].bit_length())]
    text = " ".join(map(str, offsets))
    assert " ".join(map(str, lanes)) in text
    if direction == "fwd" and block_m == 1:  # one row: the whole sequence
        assert offsets == lanes + ([0] + warps if warps else [])


@pytest.mark.parametrize("aligned", [True, False], ids=["aligned", "unaligned"])
def test_the_sm90_row_sum_of_rms_norm_evaluates_as_blocked_sum(aligned):
    """``_rms_norm_fwd_kernel`` for 4096 bf16 columns (1 row, 8 warps): its PTX's in-thread sum,
    evaluated in float32 on random values of the thread's 16 elements of X (in the order of their
    loads), equals :func:`blocked_sum`'s in-thread tree on the squares."""
    asm = _rms_sm90("fwd", 4096, "bf16", aligned)
    ((_, layout),) = kr.reduce_layouts(asm["ttgir"])
    assert layout == kr.Blocked((1, 8 if aligned else 1), (1, 32), (1, 8))
    tree = _ptx_in_thread_sums(asm["ptx"])[0][0]
    terms = _terms(tree)
    assert len(terms) == 16 and all(t[0] == "mul" and t[1] == t[2] and t[1][0] == "L" for t in terms)
    ids = sorted(t[1][1] for t in terms)  # the elements' load order

    def evaluate(e: tuple, value: dict) -> np.float32:
        if e[0] == "L":
            return value[e[1]]
        x, y = evaluate(e[1], value), evaluate(e[2], value)
        return x * y if e[0] == "mul" else x + y

    g = _gen(10)
    for _ in range(5):
        elements = torch.exp(3 * torch.randn(16, generator=g)).bfloat16().float()
        value = {leaf: np.float32(v) for leaf, v in zip(ids, elements.tolist())}
        assert evaluate(tree, value) == ks.in_thread_sum((elements * elements)[None, :])[0].item()


#: what Triton 3.6 compiles for sm_90, read by these tests' helpers (data/make_triton36_reductions.py)
TRITON36 = json.loads((pathlib.Path(__file__).parent / "data" / "triton36_reductions.json").read_text())


def test_blocked_sum_of_triton_36_adds_a_thread_s_elements_in_order():
    """Triton 3.6: a thread's elements one after another (order j), then the same butterflies."""
    x = torch.exp(4 * torch.randn(3, 256, generator=_gen(9)))
    layout = kr.Blocked((1, 1), (1, 32), (1, 2))  # 4 elements a thread: k = lane + 32 (warp + 2 j)
    got = kr.blocked_sum(x, 1, layout, "3.6.0")
    for r in range(3):

        def thread(lane, warp):
            e = [x[r, lane + 32 * (warp + 2 * j)] for j in range(4)]
            return ((e[0] + e[1]) + e[2]) + e[3]

        v = [[thread(lane, warp) for lane in range(32)] for warp in range(2)]
        for warp in range(2):
            for off in (16, 8, 4, 2, 1):
                v[warp] = [v[warp][t] + v[warp][t ^ off] for t in range(32)]
        assert got[r] == v[0][0] + v[1][0]
    y = torch.exp(4 * torch.randn(64, 1024, generator=_gen(12)))  # 32 elements a thread
    assert not torch.equal(kr.blocked_sum(y, 1, layout, "3.6.0"), kr.blocked_sum(y, 1, layout, "3.9.0"))
    with pytest.raises(ValueError, match="Triton 3.10.0 is not modelled"):
        kr.blocked_sum(x, 1, layout, "3.10.0")


def _tuples(e):
    """A JSON tree (lists) as :func:`_ptx_in_thread_sums`' tuples."""
    return tuple(map(_tuples, e)) if isinstance(e, list) else e


@pytest.mark.parametrize("key", sorted(k for k, v in TRITON36["rms_norm"].items() if v["first_sum"]))
def test_the_triton_36_sums_of_rms_norm_evaluate_as_blocked_sum(key):
    """Triton 3.6's first in-thread sum of each rms_norm launch (the fixture), its products given
    random float32 values in the order of their loads, equals ``in_thread_sum(..., "3.6.0")``; the
    layouts are the ones Triton 3.9 compiles (:data:`RMS_SM90`'s tests), and the 1-row forward's
    shuffles are the lanes' then the warps' butterflies."""
    fixture = TRITON36["rms_norm"][key]
    assert TRITON36["triton"].startswith("3.6.")
    tree = _tuples(fixture["first_sum"])
    terms = _terms(tree)
    assert len(terms) >= 2 and all(t[0] == "mul" for t in terms)
    order = sorted(range(len(terms)), key=lambda i: _first_load(terms[i]))

    def evaluate(e: tuple, value: dict) -> np.float32:
        if e[0] == "mul":
            return value[id(e)]
        return evaluate(e[1], value) + evaluate(e[2], value)

    g = _gen(11)
    for _ in range(5):
        v = torch.exp(3 * torch.randn(len(terms), generator=g))
        value = {id(terms[i]): np.float32(v[k].item()) for k, i in enumerate(order)}
        assert evaluate(tree, value) == ks.in_thread_sum(v[None, :], "3.6.0")[0].item()
    if key == "fwd-4096-bf16-aligned":
        assert fixture["layouts"] == [[1, [1, 8], [1, 32], [1, 8]]] and len(terms) == 16
        assert fixture["offsets"] == [16, 8, 4, 2, 1, 4, 2, 1]


_C_HEX, _C3_HEX, _ONE, _HALF = "0f3D372713", "0f3E095D4E", "0f3F800000", "0f3F000000"
SWIGLU_FUSED = {  # (kernel, activation): (the product, the addend) of each kernel-level fma.rn.f32
    ("fwd", "silu"): [("e * 2^i", _ONE)],
    ("bwd", "silu"): [("e * 2^i", _ONE), ("(1 - s) * a", _ONE)],
    ("fwd", "gelu_tanh"): [(f"a^3 * {_C_HEX}", "a")],
    ("bwd", "gelu_tanh"): [
        (f"a^3 * {_C_HEX}", "a"),
        ("-T * T", _ONE),
        (f"a^2 * {_C3_HEX}", _ONE),
        (f"right * {_HALF}", "P"),
    ],
}


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("activation", ["silu", "gelu_tanh"])
def test_the_sm90_fused_products_of_swiglu_are_the_models(activation, dtype):
    """The kernel-level contractions (``fma.rn.f32``; libdevice's own are ``.ftz``) of the sm_90
    code, per element, are the model's: silu ``1 + exp(-a)`` (expf's final scaling by 2^i fused:
    exact, so ``1 + expf(-a)``), backward also ``1 + a (1 - s)``; gelu_tanh ``a + a^3 C``,
    backward also ``1 - T T``, ``1 + a^2 C3`` and ``0.5 (1 + T) + P``; divisions ``div.rn.f32``
    only."""
    from ojas_kernels import swiglu as sw

    ptr = f"*{dtype}"
    per_thread = 1024 // (32 * 4)  # BLOCK over the default 4 warps' threads
    for direction, kernel, names in (
        ("fwd", sw._swiglu_fwd_kernel, ("A", "B", "H")),
        ("bwd", sw._swiglu_bwd_kernel, ("A", "B", "DH", "DA", "DB")),
    ):
        options = dict(enable_fp_fusion=True)  # as the launches
        asm = _sm90(kernel, {n: ptr for n in names}, dict(BLOCK=1024, ACT=activation), options)
        ptx = asm["ptx"]
        fmas = re.findall(r"\bfma\.rn\.f32\s+%r\d+, (\S+), (\S+), (\S+);", ptx)
        fused = SWIGLU_FUSED[(direction, activation)]
        assert len(fmas) == len(fused) * per_thread
        for product, addend in fused:
            constant = re.search(r"0f\w+", product)
            matching = [
                f
                for f in fmas
                if (constant is None or constant.group(0) == f[1]) and (not addend.startswith("0f") or addend == f[2])
            ]
            assert len(matching) >= per_thread, (product, addend)
        assert not re.search(r"div\.(full|approx)\.f32", ptx)


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
    _assert_swiglu_matches(*_swiglu_inputs(size, dtype, "cuda", seed=12), activation, primitives)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", ROPE_CASES, ids=["one-batch", "batched-cos", "one-position-broadcast-cos"])
def test_rope_matches_the_schedule_bit_for_bit_gpu(case, dtype):
    _assert_rope_matches(*_rope_inputs(case, dtype, "cuda", seed=13))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES + [torch.float16], ids=DTYPE_IDS + ["float16"])
@pytest.mark.parametrize("size", [1, 13, 100_003])
def test_relu_matches_the_schedule_bit_for_bit_gpu(size, dtype):
    from ojas_kernels.relu import relu_forward

    h = _relu_input(size, dtype, "cuda", seed=14)
    assert (m := kr.check_relu_forward(h)) is None, str(m)
    grad = torch.randn(size, generator=_gen(15)).to(dtype).cuda()
    assert (m := kr.check_relu_backward(grad, relu_forward(h)[1])) is None, str(m)
