"""The attention forward kernel against the executable model of its schedule
(``ojas_ref.verification.kernel_schedule``), bit for bit.

* CPU (``TRITON_INTERPRET=1``, as CI runs): ``_fwd_kernel`` equals ``forward_schedule`` with the
  interpreter's primitives at four shapes (causal with GQA and lengths not a multiple of the tile,
  a window, a boolean mask with a fully masked row, a negative scale through 32 x 16 tiles), in
  bfloat16 and float32; two mutants (the model with another BLOCK_N, a division not rounded once)
  are caught and located. The vectorised tensor-core emulation equals ``device_premises``'
  scalar one on its test vectors, and the wgmma row sum is the tree of the PTX (this Triton's, and
  Triton 3.6's from ``data/triton36_reductions.json``). The GPU bool-mask launch, compiled for sm_90
  as the launch specializes it, sums ``p`` in a blocked layout (the mask tile's load), which
  ``forward_sum_layout`` reads from its TTGIR, and the model's first-tile ``l`` in that layout is the
  PTX's sum bit for bit (this Triton's, and Triton 3.6's from the same fixture).
* GPU (``-m gpu``): the same shapes against the device's primitives (the ``ojas verify-device``
  record's dot models, the wgmma row-sum tree, the device's tl.exp2 / tl.log2), on 64-row tiles
  (the wgmma layouts the row sum models; float32 on 64 x 64 tiles, not its default 32 x 64).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

import pytest
import torch
import triton

from ojas_kernels.attention_config import KernelConfig
from ojas_ref.verification import device_premises as dp
from ojas_ref.verification import kernel_schedule as ks

DTYPES = [torch.float32, torch.bfloat16]
# name, (B, Hq, Hkv, Sq, Sk, E), is_causal, window, mask, scale, config (None: default_config)
CPU_CASES = [
    ("causal-gqa", (2, 4, 2, 37, 45, 32), True, None, False, None, None),
    ("window", (1, 2, 2, 70, 61, 16), False, 40, False, 0.25, None),
    ("bool-mask", (1, 2, 1, 20, 29, 24), False, None, True, None, None),
    ("neg-scale-32x16", (1, 2, 2, 50, 70, 16), False, None, False, -0.3, KernelConfig(32, 16)),
]
GPU_CASES = [
    ("causal-gqa", (1, 4, 2, 200, 200, 64), True, None, False, None, None),
    ("window", (1, 2, 2, 130, 190, 128), False, 37, False, None, None),
    ("bool-mask", (2, 2, 1, 100, 150, 64), False, None, True, None, None),
]
GPU_FLOAT32_TILES = KernelConfig(64, 64, 4, 2)  # wgmma (m64n64k8 tf32), warps along the rows


def _inputs(shape, dtype, masked, device="cpu", seed=0, grad_out=False):
    """((q, k, v), mask), or ((dO, q, k, v), mask) with ``grad_out`` (the backward's inputs)."""
    b, hq, hkv, sq, sk, e = shape
    gen = torch.Generator().manual_seed(seed)
    sizes = ((hq, sq), (hkv, sk), (hkv, sk)) + (((hq, sq),) if grad_out else ())
    q, k, v, *do = (torch.randn(b, h, s, e, generator=gen) for h, s in sizes)
    mask = None
    if masked:
        mask = torch.rand(sq, sk, generator=gen) < 0.6
        mask[3] = False  # a fully masked row
    return tuple(x.to(dtype).to(device) for x in (*do, q, k, v)), None if mask is None else mask.to(device)


def _gpu_case(case, dtype, device_primitives, float32_config):
    """(primitives, shape, causal, window, masked, scale, config) of a GPU case: the primitives
    ``device_primitives(dtype)`` (the test skips where the record does not check them), the config
    ``float32_config`` for float32 (wgmma tiles)."""
    try:
        primitives = device_primitives(dtype)
    except dp.PremisesNotChecked as err:
        pytest.skip(str(err))
    _, shape, causal, window, masked, scale, config = case
    return primitives, shape, causal, window, masked, scale, float32_config if dtype == torch.float32 else config


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "bfloat16"])
@pytest.mark.parametrize("case", CPU_CASES, ids=[c[0] for c in CPU_CASES])
def test_kernel_matches_the_interpreter_schedule_bit_for_bit(case, dtype):
    _, shape, causal, window, masked, scale, config = case
    (q, k, v), mask = _inputs(shape, dtype, masked)
    mismatch = ks.check_forward(
        q, k, v, mask, causal, scale, window, config=config, primitives=ks.interpreter_primitives()
    )
    assert mismatch is None, str(mismatch)
    cfg = config or KernelConfig(16, 16)  # default_config on the CPU
    sched = ks.forward_schedule(
        q, k, v, mask, causal, scale, window, config=cfg, primitives=ks.interpreter_primitives(), trace=True
    )
    parts = {st.part for steps in sched.steps.values() for st in steps}
    assert 0 in parts or 2 in parts  # the masked loop ran
    if not masked:
        assert 1 in parts  # and the loop without the mask
    if masked:  # row 3 sees no key: zeros and lse -inf
        assert (sched.out[:, :, 3] == 0).all() and (sched.lse[:, :, 3] == float("-inf")).all()


@pytest.mark.interpreter
def test_a_model_with_another_block_n_is_caught():
    (q, k, v), _ = _inputs((1, 2, 1, 40, 45, 32), torch.float32, False)
    mismatch = ks.check_forward(
        q,
        k,
        v,
        is_causal=True,
        config=KernelConfig(16, 16),
        model_config=KernelConfig(16, 32),
        primitives=ks.interpreter_primitives(),
    )
    assert mismatch is not None and mismatch.quantity in ("m", "l", "acc")
    part, start_n = mismatch.key_tile  # compared after the same keys: the model's tile of 32, the kernel's two of 16
    assert start_n % 32 == 0 and all(s[1] % 32 == 0 for s in mismatch.steps)
    assert [s[1] for s in mismatch.kernel_steps] == list(range(0, len(mismatch.kernel_steps) * 16, 16))
    assert mismatch.kernel != mismatch.model
    b, h, i = mismatch.row
    assert str(mismatch).startswith(f"first differing operation: {mismatch.operation}")


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "bfloat16"])
def test_a_row_sum_in_another_order_is_caught_at_its_tile(dtype):
    (q, k, v), _ = _inputs((1, 2, 2, 40, 45, 32), dtype, False, seed=1)
    sequential = dataclasses.replace(
        ks.interpreter_primitives(),
        name="sequential row sum",
        row_sum=lambda x: torch.from_numpy(x.numpy().cumsum(1)[:, -1].copy()),
    )
    mismatch = ks.check_forward(q, k, v, is_causal=True, primitives=sequential)
    assert mismatch is not None
    assert mismatch.quantity == "l" and mismatch.operation.startswith("l = l * alpha + sum(p)")
    step = [s[:2] for s in mismatch.steps].index(mismatch.key_tile)
    assert mismatch.steps[step][2] == mismatch.kernel_steps[step][2]  # m agrees at that tile: the sum differs
    assert mismatch.steps[:step] == mismatch.kernel_steps[:step]  # and every earlier state
    assert mismatch.steps[step][3] == mismatch.model != mismatch.kernel == mismatch.kernel_steps[step][3]


@pytest.mark.interpreter
def test_a_division_not_rounded_once_is_caught_at_the_finalize():
    """float32 only: in bfloat16 the stored output is rounded to 8 bits after the division, so a
    one-ulp float32 difference there shows only when it crosses a bfloat16 rounding boundary."""
    (q, k, v), _ = _inputs((1, 2, 2, 40, 45, 32), torch.float32, False)
    recip = dataclasses.replace(ks.interpreter_primitives(), name="acc * (1 / l)", div=lambda x, y: x * (1.0 / y))
    mismatch = ks.check_forward(q, k, v, is_causal=True, primitives=recip)
    assert mismatch is not None
    assert mismatch.quantity == "out" and mismatch.operation.startswith("the finalize: out = acc / l")
    assert mismatch.steps == mismatch.kernel_steps  # every tile's m, l and acc agree
    assert mismatch.kernel != mismatch.model


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "bfloat16"])
def test_the_trace_leaves_the_outputs_unchanged(dtype):
    from ojas_kernels.attention_forward import _forward

    (q, k, v), mask = _inputs((1, 2, 1, 37, 45, 24), dtype, True)
    trace = torch.full((2 * 3 * 3, 16 * (2 + 32)), float("nan"))
    plain = _forward(q, k, v, mask, True, 0.3, None)
    traced = _forward(q, k, v, mask, True, 0.3, None, trace=trace)
    assert all(torch.equal(x.view(torch.int8), y.view(torch.int8)) for x, y in zip(plain, traced))
    assert not trace.isnan().all()


def test_forward_schedule_refuses_what_it_does_not_model():
    (q, k, v), _ = _inputs((1, 1, 1, 8, 8, 16), torch.float32, False)
    with pytest.raises(ValueError, match="additive masks are not modelled"):
        ks.forward_schedule(
            q, k, v, torch.zeros(8, 8), config=KernelConfig(16, 16), primitives=ks.interpreter_primitives()
        )
    with pytest.raises(ValueError, match="sum_layout: interpreter sums rows by its row_sum, got a layout 'wgmma'"):
        ks.forward_schedule(
            q, k, v, config=KernelConfig(16, 16), primitives=ks.interpreter_primitives(), sum_layout="wgmma"
        )
    device_sum = dataclasses.replace(ks.interpreter_primitives(), needs_layout=True)
    with pytest.raises(ValueError, match="sum_layout must be None, 'wgmma' or a Blocked layout, got 'blocked'"):
        ks.forward_schedule(q, k, v, config=KernelConfig(16, 16), primitives=device_sum, sum_layout="blocked")
    with pytest.raises(ValueError, match="exact alignment"):
        ks.accumulate(dp.Accumulation(1, None, "trunc", "nearest"), q[0, 0], k[0, 0].t(), torch.zeros(8, 8))


H100_MODELS = {  # device_premises.Accumulation's docstring: identified on an H100
    "bfloat16": dp.Accumulation(16, 26, "trunc", "truncate", "operands"),
    "tf32": dp.Accumulation(8, 26, "trunc", "truncate", "operands"),
}


@pytest.mark.parametrize(
    "model,fmt",
    [
        (H100_MODELS["bfloat16"], "bfloat16"),
        (H100_MODELS["tf32"], "tf32"),
        (dp.Accumulation(4, 24, "floor", "nearest", "term"), "bfloat16"),
    ],
    ids=["h100-bf16", "h100-tf32", "term-floor-nearest"],
)
def test_vectorised_accumulation_equals_emulate_dot(model, fmt):
    vectors = dp.dot_test_vectors(32, fmt, random=64)[::7]
    a = torch.tensor([x[0] for x in vectors], dtype=torch.float32)
    b = torch.tensor([x[1] for x in vectors], dtype=torch.float32)
    c = torch.tensor([x[2] for x in vectors], dtype=torch.float32)
    got = ks._accumulate_rows(model, a, b, c)
    want = torch.tensor([dp.emulate_dot(model, *x) for x in vectors], dtype=torch.float32)
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))
    # the tile form: acc + a @ b for a [4, 32] by [32, 3] tile
    tile = ks.accumulate(model, a[:4], b[:3].t(), c[:12].reshape(4, 3))
    assert tile[1, 2].item() == dp.emulate_dot(model, a[1].tolist(), b[2].tolist(), c[5].item())


@pytest.mark.parametrize("schedule", dp.TF32X3_SCHEDULES)
def test_vectorised_tf32x3_equals_emulate_tf32x3(schedule):
    spec = ks.Tf32x3(H100_MODELS["tf32"], "trunc", schedule, (0, 1, 2))
    vectors = dp.dot_test_vectors(16, "float32", random=24, seed=1)[-24:]
    a = torch.tensor([x[0] for x in vectors], dtype=torch.float32)
    b = torch.tensor([x[1] for x in vectors], dtype=torch.float32)
    c = torch.tensor([x[2] for x in vectors], dtype=torch.float32)
    got = ks.tf32x3_dot(spec, a, b.t(), c[:, None].expand(24, 24).contiguous()).diagonal()
    want = [dp.emulate_tf32x3(spec.model, "trunc", schedule, (0, 1, 2), *x) for x in vectors]
    assert got.tolist() == want


def _fake_record(monkeypatch, bf16_models, tf32x3_entries):
    """``device_primitives`` on the CPU: CUDA reported present, the record's entries given."""
    record = {
        "tl.dot bfloat16": {"measured": [dataclasses.asdict(m) for m in bf16_models]},
        "tl.dot float32 tf32x3": {"measured": tf32x3_entries},
        "tf32 low-part reading": {"measured": "trunc"},
    }
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(dp, "checked_premises", lambda names, folder=None: {n: record[n] for n in names})


def test_device_primitives_take_the_dots_of_the_record(monkeypatch):
    from ojas_ref.verification.kernel_schedule_rowwise import Blocked

    tf32x3 = dict(model=dataclasses.asdict(H100_MODELS["tf32"]), schedule="chain(0)+c", order=[0, 1, 2])
    _fake_record(monkeypatch, [H100_MODELS["bfloat16"]], [tf32x3])
    gen = torch.Generator().manual_seed(4)
    a, b, c = torch.randn(8, 32, generator=gen), torch.randn(32, 16, generator=gen), torch.randn(8, 16, generator=gen)
    bf = ks.device_primitives(torch.bfloat16)
    a16, b16 = a.bfloat16().float(), b.bfloat16().float()
    assert torch.equal(bf.dot(a16, b16, c), ks.accumulate(H100_MODELS["bfloat16"], a16, b16, c))
    f32 = ks.device_primitives(torch.float32)
    spec = ks.Tf32x3(H100_MODELS["tf32"], "trunc", "chain(0)+c", (0, 1, 2))
    assert torch.equal(f32.dot(a, b, c), ks.tf32x3_dot(spec, a, b, c))
    assert f32.row_sum is ks.wgmma_row_sum and f32.cast(c, torch.bfloat16).dtype == torch.bfloat16
    # the whole schedule runs with them (the interpreter's exp2 / log2 standing in for the device's):
    # the same softmax to the dots' accuracy, not the same bits
    (q, k, v), mask = _inputs((1, 2, 1, 37, 45, 32), torch.bfloat16, True)
    cpu = ks.interpreter_primitives()
    hybrid = dataclasses.replace(bf, exp2=cpu.exp2, log2=cpu.log2)
    cfg = KernelConfig(16, 16)
    # with the mask the device sums p in the launch's blocked layout: one of 16-column tiles here
    layout = Blocked((1, 4), (8, 4), (2, 1))
    got = ks.forward_schedule(q, k, v, mask, True, config=cfg, primitives=hybrid, sum_layout=layout)
    ref = ks.forward_schedule(q, k, v, mask, True, config=cfg, primitives=cpu)
    torch.testing.assert_close(got.out.float(), ref.out.float(), atol=2e-2, rtol=0)
    torch.testing.assert_close(got.lse, ref.lse, atol=1e-2, rtol=0)


def test_device_primitives_refuse_record_models_that_disagree(monkeypatch):
    _fake_record(monkeypatch, [H100_MODELS["bfloat16"], dp.Accumulation(16, 26, "trunc", "nearest", "operands")], [])
    bf = ks.device_primitives(torch.bfloat16)
    gen = torch.Generator().manual_seed(6)
    a, b = torch.randn(16, 64, generator=gen).bfloat16().float(), torch.randn(64, 16, generator=gen).bfloat16().float()
    with pytest.raises(ValueError, match="models differ on this tile"):
        bf.dot(a, b, torch.randn(16, 16, generator=gen))
    with pytest.raises(ValueError, match="identifies no model"):
        ks.device_primitives(torch.float32)


def test_wgmma_row_sum_is_the_tree_of_the_ptx():
    """The tree transcribed from the PTX of ``_fwd_kernel`` for sm_90 (Triton 3.9, 64 x 64 bf16
    tiles): per lane a balanced tree of adjacent pairs over its 16 columns, then lanes xor 2, xor 1."""
    gen = torch.Generator().manual_seed(3)
    x = torch.exp(4 * torch.randn(20, 64, generator=gen))

    def lane(row, t):
        a = [row[8 * j + 2 * t + k] for j in range(8) for k in range(2)]
        pairs = [a[i] + a[i + 1] for i in range(0, 16, 2)]
        quads = [pairs[i] + pairs[i + 1] for i in range(0, 8, 2)]
        return (quads[0] + quads[1]) + (quads[2] + quads[3])

    for r in range(20):
        v = [lane(x[r], t) for t in range(4)]
        assert ks.wgmma_row_sum(x, "3.9.0")[r] == (v[0] + v[2]) + (v[1] + v[3])
    seq = x[:, 0].clone()
    for j in range(1, 64):
        seq = seq + x[:, j]
    assert not torch.equal(ks.wgmma_row_sum(x, "3.9.0"), seq)  # the order matters on these rows
    with pytest.raises(ValueError, match="power of 2"):
        ks.wgmma_row_sum(torch.zeros(2, 24))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "bfloat16"])
@pytest.mark.parametrize("case", GPU_CASES, ids=[c[0] for c in GPU_CASES])
def test_kernel_matches_the_device_schedule_bit_for_bit_gpu(case, dtype):
    primitives, shape, causal, window, masked, scale, config = _gpu_case(
        case, dtype, ks.device_primitives, GPU_FLOAT32_TILES
    )
    (q, k, v), mask = _inputs(shape, dtype, masked, "cuda", seed=11)
    mismatch = ks.check_forward(q, k, v, mask, causal, scale, window, config=config, primitives=primitives)
    assert mismatch is None, str(mismatch)


def _sm90_asm(dtype: str, config: KernelConfig, e: int, prec: str) -> dict[str, str]:
    """``_fwd_kernel`` compiled for sm_90 on this machine (no GPU needed: Triton's NVIDIA backend
    and its ptxas), full attention, for the layouts the GPU tests run."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile

    from ojas_kernels.attention_forward import _fwd_kernel

    flags = dict(IS_CAUSAL=False, HAS_WINDOW=False, HAS_MASK=False, MASK_BOOL=False, POS_SCALE=True)
    constexprs = dict(HEAD_E=e, HEAD_EV=e, BLOCK_E=e, BLOCK_EV=e, BLOCK_M=config.block_m, BLOCK_N=config.block_n)
    constexprs.update(flags, DOT_PREC=prec, SPLIT=True, HAS_DROPOUT=False, TRACE=False)
    pointers = dict(
        Q=f"*{dtype}", K=f"*{dtype}", V=f"*{dtype}", M=f"*{dtype}", O=f"*{dtype}", LSE="*fp32", SEED="*i64", TR="*fp32"
    )
    signature = {
        n: "constexpr" if n in constexprs else pointers.get(n, "fp32" if n in ("qk_scale", "drop_scale") else "i32")
        for n in _fwd_kernel.arg_names
    }
    options = dict(num_warps=config.num_warps, num_stages=config.num_stages, enable_fp_fusion=False)
    try:
        kernel = compile(
            ASTSource(_fwd_kernel, signature, constexprs), target=GPUTarget("cuda", 90, 32), options=options
        )
    except Exception as err:  # no NVIDIA backend or ptxas in this Triton
        pytest.skip(f"cannot compile for sm_90 here: {type(err).__name__}: {err}")
    return kernel.asm


def _ptx_row_sum(ptx: str) -> tuple[str, list[int]]:
    """The first ``tl.sum(p, 1)`` of the PTX: the tree of ``add.rn.f32`` over the registers of the
    first run of ``ex2`` (as a Python expression in ``x[n]``, n the register's index in that run)
    and the offsets of the ``shfl.sync.bfly`` chain after it (each shuffle's value added to the
    shuffled one, shuffled again: the lanes' butterfly)."""
    import re

    lines = ptx.splitlines()
    ex2 = [i for i, line in enumerate(lines) if "ex2.approx" in line]
    run = [i for i in ex2 if i < ex2[0] + 200]
    index = {re.search(r"ex2\.approx\S*\s+(%r\d+)", lines[i]).group(1): n for n, i in enumerate(run)}
    shfl = [i for i, line in enumerate(lines) if "shfl.sync.bfly" in line and i > run[-1]]
    adds = {}
    for line in lines[run[-1] :]:
        m = re.search(r"add\.rn\.f32\s+(%r\d+), (%r\d+), (%r\d+);", line)
        if m:
            adds.setdefault(m.group(1), (m.group(2), m.group(3)))
    shuffles = {}  # source register -> (shuffled register, offset)
    for i in shfl:
        m = re.search(r"shfl\.sync\.bfly\.b32\s+(%r\d+), (%r\d+), (\d+),", lines[i])
        shuffles.setdefault(m.group(2), (m.group(1), int(m.group(3))))

    def expr(r: str) -> str:
        return f"x[{index[r]}]" if r in index else f"({expr(adds[r][0])} + {expr(adds[r][1])})"

    root = re.search(r"shfl\.sync\.bfly\.b32\s+%r\d+, (%r\d+), (\d+)", lines[shfl[0]]).group(1)
    offsets, value = [], root
    while value in shuffles:
        shuffled, offset = shuffles[value]
        offsets.append(offset)
        total = [r for r, pair in adds.items() if sorted(pair) == sorted((value, shuffled))]
        if not total:
            break
        value = total[0]
    return expr(root), offsets


SM90_CASES = [  # what the GPU tests launch: bf16 default_config for E = 64 and 128, float32 64 x 64
    ("bf16", KernelConfig(128, 64, 8, 3), 64, "tf32"),
    ("bf16", KernelConfig(64, 64, 4, 3), 128, "tf32"),
    ("fp32", GPU_FLOAT32_TILES, 64, "tf32x3"),
]


@pytest.mark.parametrize("dtype,config,e,prec", SM90_CASES, ids=["bf16-128x64", "bf16-64x64", "fp32-64x64"])
def test_the_gpu_launches_sum_rows_as_wgmma_row_sum(dtype, config, e, prec):
    """The GPU tests' launches compile (sm_90, this Triton) to the layout :func:`wgmma_row_sum`
    models (wgmma, warps along the rows, the instruction's N the tile's), and the PTX's first row
    sum, evaluated on random rows (register ``4 j + 2 i + k`` of lane ``t`` is row ``i``, column
    ``8 j + 2 t + k`` of the warp's rows), equals it bit for bit."""
    import re

    asm = _sm90_asm(dtype, config, e, prec)
    mma = re.search(
        r"#mma = #ttg\.nvidia_mma<\{versionMajor = (\d+), .*warpsPerCTA = \[(\d+), (\d+)\], "
        r"instrShape = \[\d+, (\d+), \d+\]",
        asm["ttgir"],
    )
    assert mma is not None and [int(g) for g in mma.groups()] == [3, config.num_warps, 1, config.block_n]
    tree, offsets = _ptx_row_sum(asm["ptx"])
    assert offsets == [2, 1]
    rows = torch.exp(4 * torch.randn(16, 64, generator=torch.Generator().manual_seed(5)))
    assert torch.equal(_evaluate_row_sum(tree, offsets, rows), ks.wgmma_row_sum(rows))


def _evaluate_row_sum(tree: str, offsets: list[int], rows: torch.Tensor) -> torch.Tensor:
    """The PTX's row sum (:func:`_ptx_row_sum`) evaluated on the rows of a [R, 64] tile: register
    ``4 j + 2 i + k`` of lane ``t`` is row ``i``, column ``8 j + 2 t + k`` of the warp's rows."""
    sums = []
    for r in range(rows.shape[0]):
        lanes = []
        for t in range(4):
            x = torch.zeros(32)
            for n in range(32):
                if (n // 2) % 2 == 0:
                    x[n] = rows[r, 8 * (n // 4) + 2 * t + n % 2]
            lanes.append(eval(tree, {"x": x}))
        for off in offsets:
            lanes = [lanes[t] + lanes[t ^ off] for t in range(4)]
        sums.append(lanes[0])
    return torch.stack(sums)


def _sm90_launch_asm(case, dtype: torch.dtype) -> dict[str, str]:
    """The ``_fwd_kernel`` launch of the GPU test ``case`` in ``dtype`` (bfloat16: the default
    configuration of its head dim on the H100, :data:`SM90_CASES`; float32: :data:`GPU_FLOAT32_TILES`)
    compiled for sm_90 on this machine, its arguments specialized as Triton specializes them at the
    launch (the mask's key stride 1 a constant, 16-byte divisibility): ``_forward`` runs on CPU
    tensors of the test's inputs up to the launch, which is compiled instead (Triton's binder for a
    GPUTarget), not run."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile, make_backend
    from triton.runtime.jit import create_function_from_signature

    from ojas_kernels import attention_forward as af
    from ojas_kernels.attention_config import AttentionConfig

    _, shape, causal, window, masked, scale, _ = case
    config = (
        {e: c for d, c, e, _ in SM90_CASES if d == "bf16"}[shape[-1]] if dtype == torch.bfloat16 else GPU_FLOAT32_TILES
    )
    (q, k, v), mask = _inputs(shape, dtype, masked, seed=11)
    launched = {}

    class Capture:
        def __init__(self, kernel):
            self.kernel = kernel

        def __getitem__(self, grid):
            def run(*args, **kwargs):
                launched.update(kernel=self.kernel, args=args, kwargs=kwargs)
                raise StopIteration

            return run

    real, af.fast = af.fast, Capture
    try:
        with pytest.raises(StopIteration):
            af._forward(q, k, v, mask, causal, ks._scale(q, scale), window, AttentionConfig(config, config, config))
    finally:
        af.fast = real
    fn, args, kwargs = launched["kernel"], launched["args"], launched["kwargs"]
    target = GPUTarget("cuda", 90, 32)
    try:
        backend = make_backend(target)
        bound, specialization, options = create_function_from_signature(fn.signature, fn.params, backend)(
            *args, **kwargs
        )
        options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, specialization, options)
        return compile(ASTSource(fn, signature, constexprs, attrs), target=target, options=options.__dict__).asm
    except Exception as err:  # no NVIDIA backend or ptxas in this Triton
        pytest.skip(f"cannot compile for sm_90 here: {type(err).__name__}: {err}")


def _evaluate_blocked_row_sum(tree: str, offsets: list[int], rows: torch.Tensor, layout) -> torch.Tensor:
    """The PTX's row sum (:func:`_ptx_row_sum`) evaluated on the rows of a [R, N] tile in the blocked
    ``layout`` (warps along the rows only): register ``n`` of the lanes' first row is column
    ``size * t + n`` of lane ``t`` along the row; then the butterfly of ``offsets``."""
    size, lanes = layout.size[1], layout.threads[1]
    assert layout.warps[1] == 1 and size * lanes == rows.shape[1]
    sums = []
    for r in range(rows.shape[0]):
        values = [eval(tree, {"x": rows[r, size * t : size * (t + 1)]}) for t in range(lanes)]
        for off in offsets:
            values = [values[t] + values[t ^ off] for t in range(lanes)]
        sums.append(values[0])
    return torch.stack(sums)


BOOL_MASK_CASE = next(c for c in GPU_CASES if c[0] == "bool-mask")
#: the bool-mask launches' sum layout along the keys on sm_90 (Triton 3.6 and 3.9): 16-byte vectors
BOOL_MASK_LAYOUTS = {"bf16": ((1, 8), (4, 8), (8, 1)), "fp32": ((1, 4), (2, 16), (4, 1))}


def _model_l_of_first_tile(layout, rows: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """``(p, l)`` of the model's first key tile: a bool-mask launch of one query tile of ``rows``
    rows and one key tile of 64 keys, the interpreter's primitives but the sum of the device
    (``needs_layout``) in ``layout`` (the launch's, from its TTGIR); ``p`` as ``exp2`` returned it."""
    from ojas_kernels.attention_config import KernelConfig

    (q, k, v), mask = _inputs((1, 1, 1, rows, 64, 64), torch.float32, True, seed=7)
    seen = []
    cpu = ks.interpreter_primitives()

    def exp2(x):
        seen.append(cpu.exp2(x))
        return seen[-1]

    device_sum = dataclasses.replace(cpu, exp2=exp2, row_sum=ks.wgmma_row_sum, needs_layout=True)
    sched = ks.forward_schedule(
        q, k, v, mask, config=KernelConfig(rows, 64), primitives=device_sum, trace=True, sum_layout=layout
    )
    (steps,) = sched.steps.values()
    return seen[0], steps[0].l  # l = 0 * alpha + sum(p): the sum's own bits


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "bfloat16"])
def test_the_bool_mask_launch_sums_p_in_its_blocked_layout_as_the_model_does(dtype):
    """The GPU bool-mask case's launch (sm_90, this Triton, specialized as at the launch) takes
    ``tl.sum(p, 1)`` in a blocked layout (the mask tile's load), not the wgmma accumulator:
    :func:`forward_sum_layout` reads it from the TTGIR, and the model's ``l`` after the first tile in
    that layout equals the PTX's sum of that ``p`` bit for bit, where the wgmma order differs (the
    model before this layout was read: the 2026-12-07 H100 failure of the bool-mask cases)."""
    from ojas_ref.verification.kernel_schedule_rowwise import Blocked

    name = "bf16" if dtype == torch.bfloat16 else "fp32"
    asm = _sm90_launch_asm(BOOL_MASK_CASE, dtype)
    layout = ks.forward_sum_layout(asm["ttgir"])
    assert layout == Blocked(*BOOL_MASK_LAYOUTS[name])
    tree, offsets = _ptx_row_sum(asm["ptx"])
    _check_the_model_sums_as(tree, offsets, layout)
    for unmasked in (c for c in GPU_CASES if not c[4]):  # the other launches sum in the wgmma layout
        assert ks.forward_sum_layout(_sm90_launch_asm(unmasked, dtype)["ttgir"]) == "wgmma"


def _check_the_model_sums_as(tree: str, offsets: list[int], layout) -> None:
    """The model's first-tile ``l`` in ``layout`` is the PTX's sum (``tree``, ``offsets``) of its
    ``p``, and the wgmma order gives other bits on these rows; without the layout the device's
    primitives refuse a masked launch."""
    assert offsets == [layout.threads[1] >> k for k in range(1, layout.threads[1].bit_length())]
    p, l = _model_l_of_first_tile(layout)
    got = _evaluate_blocked_row_sum(tree, offsets, p, layout)
    assert torch.equal(l.view(torch.int32), got.view(torch.int32))
    assert not torch.equal(ks.wgmma_row_sum(p).view(torch.int32), got.view(torch.int32))
    with pytest.raises(ValueError, match="sum_layout: .* in the blocked layout of the launch"):
        _model_l_of_first_tile(None)


#: what Triton 3.6 compiles for sm_90, read by these tests' helpers (data/make_triton36_reductions.py)
TRITON36 = json.loads((pathlib.Path(__file__).parent / "data" / "triton36_reductions.json").read_text())


@pytest.mark.parametrize("key", sorted(TRITON36["forward"]))
def test_wgmma_row_sum_of_triton_36_is_the_tree_of_its_ptx(key):
    """Triton 3.6's first ``tl.sum(p, 1)`` of the GPU tests' launches (the fixture: a thread adds
    its 16 elements one after another, then lanes xor 2, xor 1), evaluated on random rows, equals
    ``wgmma_row_sum(x, "3.6.0")`` bit for bit, and not Triton 3.9's order on these rows."""
    fixture = TRITON36["forward"][key]
    assert TRITON36["triton"].startswith("3.6.") and fixture["offsets"] == [2, 1]
    rows = torch.exp(4 * torch.randn(16, 64, generator=torch.Generator().manual_seed(5)))
    got = _evaluate_row_sum(fixture["tree"], fixture["offsets"], rows)
    assert torch.equal(got, ks.wgmma_row_sum(rows, "3.6.0"))
    assert not torch.equal(got, ks.wgmma_row_sum(rows, "3.9.0"))


def test_the_row_sum_follows_the_triton_that_runs_and_refuses_others():
    """The default order is the imported Triton's; a version not modelled is refused by name."""
    x = torch.exp(4 * torch.randn(8, 64, generator=torch.Generator().manual_seed(6)))
    assert torch.equal(ks.wgmma_row_sum(x), ks.wgmma_row_sum(x, triton.__version__))
    assert ks.in_thread_order("3.6.0") == "sequential" and ks.in_thread_order("3.9.1") == "tree"
    for version in ("3.7.0", "4.0.0", "3"):
        with pytest.raises(ValueError, match=rf"Triton {version} is not modelled \(Triton 3\.6, 3\.9 are\)"):
            ks.wgmma_row_sum(x, version)


@pytest.mark.parametrize("key", sorted(TRITON36["bool_mask"]))
def test_triton_36_bool_mask_launch_sums_p_as_the_model_does(key, monkeypatch):
    """Triton 3.6's bool-mask launch (the fixture: the layout definitions and ``l_i`` reductions of
    its TTGIR, and the PTX's sum, a thread's 8 or 4 columns one after another, then the lanes'
    butterfly) is what the model runs with Triton 3.6 imported (:func:`_check_the_model_sums_as`,
    the version the model reads set to the fixture's)."""
    from ojas_ref.verification.kernel_schedule_rowwise import Blocked

    fixture = TRITON36["bool_mask"][key]
    layout = ks.forward_sum_layout(fixture["ttgir"])
    assert layout == Blocked(*BOOL_MASK_LAYOUTS[key])
    monkeypatch.setattr(triton, "__version__", TRITON36["triton"])
    _check_the_model_sums_as(fixture["tree"], fixture["offsets"], layout)
