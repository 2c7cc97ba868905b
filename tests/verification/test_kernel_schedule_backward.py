"""The attention backward kernels against the executable model of their schedule
(``ojas_ref.verification.kernel_schedule_backward``), bit for bit.

* CPU (``TRITON_INTERPRET=1``): ``_backward``'s Delta, dQ, dK, dV equal ``backward_schedule`` with
  the interpreter's primitives at four shapes (causal with GQA and lengths not a multiple of the
  tile, a window, a boolean mask with a fully masked row, 32 x 16 / 16 x 32 tiles with a negative
  scale), in bfloat16 and float32; four mutants (the dQ kernel's BLOCK_N, the dK/dV kernel's
  BLOCK_M, a row sum in another order, a rounding cast) are caught and located.
* sm_90 without a GPU: the GPU tests' launches compile to wgmma, and Delta's row sum to the tree
  :func:`blocked_row_sum` models (unaligned compile), or, aligned as the GPU tests' tensors are,
  ``blocked_sum`` over ``ALIGNED_DELTA_LAYOUTS`` (this Triton's order, and Triton 3.6's from
  ``data/triton36_reductions.json``).
* GPU (``-m gpu``): the same shapes against the device's primitives (the ``ojas verify-device``
  record's dot models, Delta's aligned blocked sum, the device's tl.exp2), head dim 64, 4-warp dQ tiles.
"""

from __future__ import annotations

import dataclasses
import functools
import re

import numpy as np
import pytest
import torch

from ojas_kernels.attention_config import AttentionConfig, KernelConfig
from ojas_ref.verification import device_premises as dp
from ojas_ref.verification import kernel_schedule as ks
from ojas_ref.verification import kernel_schedule_backward as kb
from ojas_ref.verification import kernel_schedule_rowwise as kr
from test_kernel_schedule import TRITON36, _gpu_case
from test_kernel_schedule import _inputs as _attention_inputs
from test_kernel_schedule_rowwise import _first_load, _ptx_in_thread_sums, _terms, _tuples

DTYPES = [torch.float32, torch.bfloat16]
K16 = KernelConfig(16, 16)
# name, (B, Hq, Hkv, Sq, Sk, E), is_causal, window, mask, scale, config (None: default_config)
CPU_CASES = [
    ("causal-gqa", (2, 4, 2, 37, 45, 32), True, None, False, None, None),
    ("window", (1, 2, 2, 70, 61, 16), False, 40, False, 0.25, None),
    ("bool-mask", (1, 2, 1, 20, 29, 24), False, None, True, None, None),
    (
        "neg-scale-tiles",
        (1, 4, 2, 50, 70, 16),
        False,
        None,
        False,
        -0.3,
        AttentionConfig(K16, KernelConfig(16, 32), KernelConfig(32, 16)),
    ),
]
GPU_CASES = [
    ("causal-gqa", (1, 4, 2, 200, 200, 64), True, None, False, None, None),
    ("window", (1, 2, 2, 130, 190, 64), False, 37, False, None, None),
    ("bool-mask", (2, 2, 1, 100, 150, 64), False, None, True, None, None),
]
K64 = KernelConfig(64, 64, 4, 2)
GPU_FLOAT32_CONFIG = AttentionConfig(K64, K64, K64)  # wgmma (m64n64k8 tf32) in both kernels


_inputs = functools.partial(_attention_inputs, grad_out=True)  # ((dO, q, k, v), mask)


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "bfloat16"])
@pytest.mark.parametrize("case", CPU_CASES, ids=[c[0] for c in CPU_CASES])
def test_kernels_match_the_interpreter_schedule_bit_for_bit(case, dtype):
    from ojas_kernels.attention_forward import _forward

    _, shape, causal, window, masked, scale, config = case
    (do, q, k, v), mask = _inputs(shape, dtype, masked)
    cpu = ks.interpreter_primitives()
    mismatch = kb.check_backward(do, q, k, v, mask, causal, scale, window, config=config, primitives=cpu)
    assert mismatch is None, str(mismatch)
    cfg = config or AttentionConfig(K16, K16, K16)  # default_config on the CPU
    s = 1 / shape[-1] ** 0.5 if scale is None else scale
    out, lse = _forward(q, k, v, mask, causal, s, window, cfg)
    sched = kb.backward_schedule(
        do, q, k, v, out, lse, mask, causal, scale, window, config=cfg, primitives=cpu, trace=True
    )
    parts = {st.tile[1] for steps in sched.dkdv_steps.values() for st in steps}
    parts |= {st.tile[0] for steps in sched.dq_steps.values() for st in steps}
    assert 0 in parts or 2 in parts  # the masked loops ran
    if not masked:
        assert 1 in parts  # and the loops without the mask
    groups = {st.tile[0] for steps in sched.dkdv_steps.values() for st in steps}
    assert groups == set(range(shape[1] // shape[2]))  # dK, dV summed over every head of the group
    if masked:  # row 3 sees no key: Delta = o . dO = 0 (o = 0), no dQ, no share of dK, dV
        assert (sched.dq[:, :, 3] == 0).all() and (sched.delta[:, :, 3] == 0).all()


def _check_mutant(dtype=torch.float32, seed=0, **kwargs):
    (do, q, k, v), _ = _inputs((1, 2, 1, 40, 45, 32), dtype, False, seed=seed)
    kwargs.setdefault("primitives", ks.interpreter_primitives())
    return kb.check_backward(do, q, k, v, is_causal=True, config=AttentionConfig(K16, K16, K16), **kwargs)


def _replaced(**ops):
    return dataclasses.replace(ks.interpreter_primitives(), name="mutant", **ops)


def _located_at_its_step(mismatch):
    """The accumulator history agrees up to the differing step, and the step's values differ."""
    step = [t for t, _, _ in mismatch.steps].index(mismatch.tile)
    assert all(m == k for _, m, k in mismatch.steps[:step])
    assert mismatch.kernel != mismatch.model


@pytest.mark.interpreter
def test_a_dq_model_with_another_block_n_is_caught_at_dq():
    mismatch = _check_mutant(model_config=AttentionConfig(K16, K16, KernelConfig(16, 32)))
    assert mismatch is not None and mismatch.quantity == "dq"  # Delta agrees: its tiles are the rows'
    assert mismatch.operation.startswith("the stored dQ (steps not compared")
    assert mismatch.kernel != mismatch.model and mismatch.tile is None
    assert [t[1] % 32 for t, _, _ in mismatch.steps] == [0] * len(mismatch.steps)  # the model's key tiles of 32
    b, h, i, c = mismatch.index
    assert str(mismatch).startswith(f"first differing operation: {mismatch.operation}\n  dq[{b}, {h}, {i}, {c}]")


@pytest.mark.interpreter
def test_a_dkdv_model_with_another_block_m_is_caught_at_dv():
    mismatch = _check_mutant(model_config=AttentionConfig(K16, KernelConfig(32, 16), K16))
    assert mismatch is not None and mismatch.quantity == "dv"  # Delta and dQ agree; dV is stored before dK
    assert [t[2] % 32 for t, _, _ in mismatch.steps] == [0] * len(mismatch.steps)  # query tiles of 32
    assert mismatch.kernel != mismatch.model


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "bfloat16"])
def test_a_row_sum_in_another_order_is_caught_at_delta(dtype):
    sequential = _replaced(row_sum=lambda x: torch.from_numpy(x.numpy().cumsum(1)[:, -1].copy()))
    mismatch = _check_mutant(dtype, seed=2, primitives=sequential)
    assert mismatch is not None and mismatch.quantity == "delta" and len(mismatch.index) == 3
    assert mismatch.operation.startswith("Delta = row_sum(o * dO)")
    assert mismatch.kernel != mismatch.model and mismatch.steps == []


@pytest.mark.interpreter
def test_a_cast_rounding_to_nearest_is_caught_at_the_dq_dot_it_feeds():
    """bfloat16: the interpreter truncates dS to bfloat16 before dot(dS, K); a model that rounds to
    nearest agrees on Delta, P and dS and differs first at a dQ step's accumulator."""
    mismatch = _check_mutant(torch.bfloat16, primitives=_replaced(cast=lambda x, d: x.to(d)))
    assert mismatch is not None and mismatch.quantity == "dq.acc"
    assert mismatch.operation.startswith("dQ = dot(cast(dS), K, dQ)")
    _located_at_its_step(mismatch)


@pytest.mark.interpreter
def test_a_correctly_rounded_exp2_is_caught_at_p():
    exp2 = _replaced(exp2=lambda x: torch.from_numpy(np.exp2(x.numpy().astype(np.float64)).astype(np.float32)))
    mismatch = _check_mutant(primitives=exp2)
    assert mismatch is not None and mismatch.quantity == "dq.p" and len(mismatch.tile) == 2
    _located_at_its_step(mismatch)


@pytest.mark.interpreter
def test_a_dot_on_contiguous_copies_is_caught_in_the_dkdv_kernel():
    """The interpreter's np.matmul of tl.trans(dO)'s transposed view rounds otherwise than on a
    contiguous copy (kernel_schedule's interpreter dot keeps the views): float32 Delta, dQ, P^T and
    dV agree, dS^T = P^T * (dot(V, dO^T) - Delta) differs."""
    copies = _replaced(
        dot=lambda a, b, acc: torch.from_numpy(np.matmul(ks._np(a), ks._np(b), dtype=np.float32) + ks._np(acc))
    )
    mismatch = _check_mutant(primitives=copies)
    assert mismatch is not None and mismatch.quantity == "dkdv.ds" and len(mismatch.tile) == 3
    _located_at_its_step(mismatch)


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "bfloat16"])
def test_the_trace_leaves_the_gradients_unchanged(dtype):
    from ojas_kernels.attention_backward import _backward
    from ojas_kernels.attention_forward import _forward

    (do, q, k, v), mask = _inputs((1, 2, 1, 37, 45, 24), dtype, True)
    out, lse = _forward(q, k, v, mask, True, 0.3, None)
    trace = (  # 16 x 16 tiles, BLOCK_E = BLOCK_EV = 32: records of P, dS, dq and of P^T, dS^T, dk, dv
        torch.full((2 * 3 * 3, 16 * (2 * 16 + 32)), float("nan")),
        torch.full((3 * 2 * 3, 16 * (2 * 16 + 32 + 32)), float("nan")),
    )
    plain = _backward(do, q, k, v, mask, out, lse, True, 0.3, None)
    traced = _backward(do, q, k, v, mask, out, lse, True, 0.3, None, trace=trace)
    assert all(torch.equal(x.view(torch.int8), y.view(torch.int8)) for x, y in zip(plain, traced))
    assert not trace[0].isnan().all() and not trace[1].isnan().all()
    with pytest.raises(
        ValueError, match=r"trace\[1\] \(dK/dV kernel\) must be a contiguous float32 tensor of at least"
    ):
        _backward(do, q, k, v, mask, out, lse, True, 0.3, None, trace=(trace[0], trace[1][:-1]))


@pytest.mark.interpreter
def test_the_saved_delta_is_the_kernels_and_a_bad_one_is_refused():
    from ojas_kernels.attention_backward import _backward
    from ojas_kernels.attention_forward import _forward

    (do, q, k, v), _ = _inputs((1, 2, 1, 20, 24, 16), torch.float32, False)
    out, lse = _forward(q, k, v, None, False, 0.25, None)
    delta = torch.full(lse.shape, float("nan"))
    plain = _backward(do, q, k, v, None, out, lse, False, 0.25, None)
    saved = _backward(do, q, k, v, None, out, lse, False, 0.25, None, delta=delta)
    assert all(torch.equal(x, y) for x, y in zip(plain, saved))
    torch.testing.assert_close(delta, (do * out).sum(-1), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="delta must be a contiguous float32 tensor of shape"):
        _backward(do, q, k, v, None, out, lse, False, 0.25, None, delta=delta.double())


def test_backward_schedule_refuses_what_it_does_not_model():
    (do, q, k, v), _ = _inputs((1, 1, 1, 8, 8, 16), torch.float32, False)
    lse = torch.zeros(1, 1, 8)
    cfg, cpu = AttentionConfig(K16, K16, K16), ks.interpreter_primitives()
    with pytest.raises(ValueError, match="additive masks are not modelled"):
        kb.backward_schedule(do, q, k, v, do, lse, torch.zeros(8, 8), config=cfg, primitives=cpu)
    with pytest.raises(ValueError, match="lse must be float32"):
        kb.backward_schedule(do, q, k, v, do, lse.double(), config=cfg, primitives=cpu)
    with pytest.raises(ValueError, match="grad_out and out must have shape"):
        kb.backward_schedule(do[..., :8], q, k, v, do, lse, config=cfg, primitives=cpu)
    with pytest.raises(ValueError, match="not identified"):
        kb.blocked_row_sum(torch.zeros(2, 128), 32, 4)


def test_blocked_row_sum_is_the_butterfly_of_the_ptx():
    """Lane ``t`` of warp ``w`` holds column ``t + 32 w`` (+ 64 r, added in order); lanes add across
    xor 16, 8, 4, 2, 1 (every lane then holds its warp's sum), then the two warps add."""
    gen = torch.Generator().manual_seed(3)
    x = torch.exp(4 * torch.randn(6, 128, generator=gen))
    got = kb.blocked_row_sum(x)
    for r in range(6):
        warps = []
        for w in range(2):
            lanes = [x[r, t + 32 * w] + x[r, t + 32 * w + 64] for t in range(32)]
            for off in (16, 8, 4, 2, 1):
                lanes = [lanes[t] + lanes[t ^ off] for t in range(32)]
            assert len({v.item() for v in lanes}) == 1
            warps.append(lanes[0])
        assert got[r] == warps[0] + warps[1]
    assert not torch.equal(got, torch.from_numpy(np.sum(x.numpy(), axis=1)))  # the order matters here


H100_MODELS = {  # device_premises.Accumulation's docstring: identified on an H100
    "bfloat16": dp.Accumulation(16, 26, "trunc", "truncate", "operands"),
}


def test_backward_device_primitives_take_the_blocked_row_sum(monkeypatch):
    record = {"tl.dot bfloat16": {"measured": [dataclasses.asdict(H100_MODELS["bfloat16"])]}}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(dp, "checked_premises", lambda names, folder=None: {n: record[n] for n in names})
    prims = kb.backward_device_primitives(torch.bfloat16)
    x = torch.exp(4 * torch.randn(4, 64, generator=torch.Generator().manual_seed(1)))
    assert torch.equal(prims.row_sum(x), kb.blocked_row_sum(x, 32, 2))
    a, b, c = torch.randn(8, 32).bfloat16().float(), torch.randn(32, 16).bfloat16().float(), torch.randn(8, 16)
    assert torch.equal(prims.dot(a, b, c), ks.accumulate(H100_MODELS["bfloat16"], a, b, c))
    # the whole schedule runs with them (the interpreter's exp2 standing in for the device's), head
    # dim 64 as the GPU tests: the same gradients to the dots' accuracy, not the same bits
    (do, q, k, v), mask = _inputs((1, 2, 1, 20, 29, 64), torch.bfloat16, True)
    cpu = ks.interpreter_primitives()
    out = torch.randn(1, 2, 20, 64).bfloat16()
    lse = torch.logsumexp(torch.randn(1, 2, 20, 29), -1)
    cfg = AttentionConfig(K16, K16, K16)
    got = kb.backward_schedule(
        do, q, k, v, out, lse, mask, config=cfg, primitives=dataclasses.replace(prims, exp2=cpu.exp2)
    )
    ref = kb.backward_schedule(do, q, k, v, out, lse, mask, config=cfg, primitives=cpu)
    assert not torch.equal(got.delta, ref.delta)  # another row sum
    torch.testing.assert_close(got.delta, ref.delta, rtol=1e-5, atol=1e-5)
    for name in ("dq", "dk", "dv"):
        torch.testing.assert_close(getattr(got, name).float(), getattr(ref, name).float(), rtol=0.05, atol=0.05)


def _sm90_asm(
    kernel_name: str,
    dtype: str,
    config: KernelConfig,
    e: int,
    prec: str,
    causal: bool,
    trace: bool = False,
    aligned: bool = False,
) -> dict[str, str]:
    """``_bwd_dq_kernel`` / ``_bwd_dkdv_kernel`` compiled for sm_90 on this machine (no GPU needed);
    ``aligned``: the pointers and strides specialized as multiples of 16, as a launch on contiguous
    tensors of head dim 64 specializes them."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile

    from ojas_kernels import attention_backward

    kernel = getattr(attention_backward, kernel_name)
    constexprs = dict(HEAD_E=e, HEAD_EV=e, BLOCK_E=e, BLOCK_EV=e, BLOCK_M=config.block_m, BLOCK_N=config.block_n)
    constexprs.update(IS_CAUSAL=causal, HAS_WINDOW=False, HAS_MASK=False, MASK_BOOL=False, DOT_PREC=prec)
    constexprs.update(SPLIT=config.split, HAS_DROPOUT=False, TRACE=trace)
    pointers = {n: f"*{dtype}" for n in ("Q", "K", "V", "M", "DO", "O", "DQ", "DK", "DV")}
    pointers.update(LSE="*fp32", DELTA="*fp32", SEED="*i64", TR="*fp32")
    floats = ("qk_scale", "scale", "drop_scale")
    signature = {
        n: "constexpr" if n in constexprs else pointers.get(n, "fp32" if n in floats else "i32")
        for n in kernel.arg_names
    }
    options = dict(num_warps=config.num_warps, num_stages=config.num_stages, enable_fp_fusion=False)
    try:
        multiples = [n for n, v in signature.items() if v.startswith("*") or aligned and n.startswith("stride")]
        attrs = {(kernel.arg_names.index(n),): [["tt.divisibility", 16]] for n in multiples if aligned}
        source = ASTSource(kernel, signature, constexprs, attrs)
        compiled = compile(source, target=GPUTarget("cuda", 90, 32), options=options)
    except Exception as err:  # no NVIDIA backend or ptxas in this Triton
        pytest.skip(f"cannot compile for sm_90 here: {type(err).__name__}: {err}")
    return compiled.asm


SM90_CASES = [  # what the GPU tests launch (E = 64): bf16 default_config causal and not, float32 64 x 64
    ("_bwd_dq_kernel", "bf16", KernelConfig(64, 64, 4, 3), "tf32", True),
    ("_bwd_dkdv_kernel", "bf16", KernelConfig(32, 64, 4, 3, False), "tf32", True),
    ("_bwd_dkdv_kernel", "bf16", KernelConfig(64, 64, 4, 3), "tf32", False),
    ("_bwd_dq_kernel", "fp32", K64, "tf32x3", False),
    ("_bwd_dkdv_kernel", "fp32", K64, "tf32x3", False),
]


@pytest.mark.parametrize(
    "name,dtype,config,prec,causal",
    SM90_CASES,
    ids=["dq-bf16", "dkdv-bf16-causal", "dkdv-bf16", "dq-fp32", "dkdv-fp32"],
)
def test_the_gpu_launches_compile_to_wgmma_and_the_blocked_delta_sum(name, dtype, config, prec, causal):
    """Every dot of the GPU tests' launches is a wgmma (the layout of the forward's GPU tests), and
    the dQ kernel's Delta is a row sum of a [64, 64] blocked tile, one column per thread, two warps
    along the columns, by ``shfl.bfly`` 16, 8, 4, 2, 1 each followed by its add (the first row's
    chain): :func:`blocked_row_sum`'s order."""
    asm = _sm90_asm(name, dtype, config, 64, prec, causal)
    assert asm["ptx"].count("wgmma.mma_async") > 0 and "mma.sync" not in asm["ptx"]
    traced = _sm90_asm(name, dtype, config, 64, prec, causal, trace=True)["ptx"]  # the GPU tests' TRACE compiles
    assert traced.count("st.global") > asm["ptx"].count("st.global")
    versions = re.findall(r"#ttg\.nvidia_mma<\{versionMajor = (\d+)", asm["ttgir"])
    assert versions and set(versions) == {"3"}
    if name != "_bwd_dq_kernel":
        assert '"tt.reduce"' not in asm["ttgir"]
        return
    layout = re.search(r'"tt\.reduce".*?\(tensor<64x64xf32, #(\w+)>\)', asm["ttgir"], re.S).group(1)
    definition = re.search(rf"^#{layout} = (.*)$", asm["ttgir"], re.M).group(1)
    assert "sizePerThread = [1, 1], threadsPerWarp = [1, 32], warpsPerCTA = [2, 2], order = [1, 0]" in definition
    lines = asm["ptx"].splitlines()
    first = next(i for i, line in enumerate(lines) if "shfl.sync.bfly" in line)
    chain = [line for line in lines[first:] if "shfl.sync.bfly" in line or "add.rn.f32" in line][:9]
    products = {m.group(1) for m in re.finditer(r"mul\.rn\.f32\s+(%r\d+),", "\n".join(lines[:first]))}
    reg = re.search(r"shfl\.sync\.bfly\.b32\s+%r\d+, (%r\d+), 16", chain[0]).group(1)
    assert reg in products  # the tree starts from one product o * dO per thread and row: no in-thread sum
    for step, off in enumerate((16, 8, 4, 2, 1)):
        got = re.search(r"shfl\.sync\.bfly\.b32\s+(%r\d+), (%r\d+), (\d+)", chain[2 * step])
        assert got.group(2) == reg and int(got.group(3)) == off
        if off != 1:  # the last add comes later, with the other rows'
            add = re.search(r"add\.rn\.f32\s+(%r\d+), (%r\d+), (%r\d+)", chain[2 * step + 1])
            assert {add.group(2), add.group(3)} == {reg, got.group(1)}
            reg = add.group(1)


def _aligned_delta(dtype: str) -> tuple[kr.Blocked, tuple, list[int]]:
    """The dQ kernel's Delta in the GPU tests' aligned launch (E = 64, 4 warps; float32 64 x 64):
    its reduce layout, the first in-thread sum of its PTX (:func:`_ptx_in_thread_sums`) and the
    shuffle offsets that follow it."""
    config, prec = (KernelConfig(64, 64, 4, 3), "tf32") if dtype == "bf16" else (K64, "tf32x3")
    asm = _sm90_asm("_bwd_dq_kernel", dtype, config, 64, prec, False, aligned=True)
    ((axis, layout),) = kr.reduce_layouts(asm["ttgir"])
    assert axis == 1
    sums, offsets = _ptx_in_thread_sums(asm["ptx"])
    return layout, sums[0], offsets[: layout.threads[1].bit_length() - 1]


def _evaluate_delta(tree: tuple, offsets: list[int], layout: kr.Blocked, rows: torch.Tensor) -> torch.Tensor:
    """The PTX's Delta on [R, 64] rows of products: lane ``l`` of a row holds columns
    ``s l + k`` (k in the order of their loads), adds them by ``tree``, then the lanes by ``offsets``."""
    s, lanes = layout.size[1], layout.threads[1]
    terms = _terms(tree)
    assert len(terms) == s and all(t[0] == "mul" for t in terms)
    order = sorted(range(s), key=lambda i: _first_load(terms[i]))

    def evaluate(e: tuple, value: dict) -> np.float32:
        return value[id(e)] if e[0] == "mul" else evaluate(e[1], value) + evaluate(e[2], value)

    got = []
    for row in rows.tolist():
        v = [
            evaluate(tree, {id(terms[i]): np.float32(row[s * lane + k]) for k, i in enumerate(order)})
            for lane in range(lanes)
        ]
        for off in offsets:
            v = [v[t] + v[t ^ off] for t in range(lanes)]
        got.append(v[0])
    return torch.tensor(got)


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_the_aligned_gpu_launches_sum_delta_as_blocked_sum(dtype):
    """The GPU tests' launches (contiguous tensors, E = 64: pointers and strides multiples of 16)
    vectorise o * dO's loads: Delta's layout is :data:`ALIGNED_DELTA_LAYOUTS`' (8 or 4 columns a
    thread, no sum across warps), and its PTX, evaluated on random rows, is ``blocked_sum`` over it
    in this Triton's order; the unaligned compile's :func:`blocked_row_sum` is another order."""
    layout, tree, offsets = _aligned_delta(dtype)
    assert layout == kb.ALIGNED_DELTA_LAYOUTS[{"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]]
    assert offsets == [4, 2, 1] if dtype == "bf16" else [8, 4, 2, 1]
    rows = torch.exp(4 * torch.randn(16, 64, generator=torch.Generator().manual_seed(7)))
    got = _evaluate_delta(tree, offsets, layout, rows)
    assert torch.equal(got, kr.blocked_sum(rows, 1, layout))
    assert not torch.equal(got, kb.blocked_row_sum(rows, 32, 2))


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_triton_36_sums_delta_as_blocked_sum_in_its_order(dtype):
    """Triton 3.6's Delta of the aligned launches (the fixture, written by
    data/make_triton36_reductions.py) is ``blocked_sum(..., "3.6.0")`` over the same layout, and
    not Triton 3.9's order on these rows."""
    fixture = TRITON36["delta"][dtype]
    layout = kr.Blocked(*(tuple(v) for v in fixture["layout"]))
    assert layout == kb.ALIGNED_DELTA_LAYOUTS[{"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]]
    rows = torch.exp(4 * torch.randn(16, 64, generator=torch.Generator().manual_seed(7)))
    got = _evaluate_delta(_tuples(fixture["first_sum"]), fixture["offsets"], layout, rows)
    assert torch.equal(got, kr.blocked_sum(rows, 1, layout, "3.6.0"))
    assert not torch.equal(got, kr.blocked_sum(rows, 1, layout, "3.9.0"))


def test_backward_device_primitives_take_the_aligned_delta_layout(monkeypatch):
    record = {"tl.dot bfloat16": {"measured": [dataclasses.asdict(H100_MODELS["bfloat16"])]}}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(dp, "checked_premises", lambda names, folder=None: {n: record[n] for n in names})
    layout = kb.ALIGNED_DELTA_LAYOUTS[torch.bfloat16]
    prims = kb.backward_device_primitives(torch.bfloat16, delta_layout=layout)
    x = torch.exp(4 * torch.randn(16, 64, generator=torch.Generator().manual_seed(1)))
    assert torch.equal(prims.row_sum(x), kr.blocked_sum(x, 1, layout))
    assert not torch.equal(prims.row_sum(x), kb.blocked_row_sum(x, 32, 2))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "bfloat16"])
@pytest.mark.parametrize("case", GPU_CASES, ids=[c[0] for c in GPU_CASES])
def test_kernels_match_the_device_schedule_bit_for_bit_gpu(case, dtype):
    device = functools.partial(kb.backward_device_primitives, delta_layout=kb.ALIGNED_DELTA_LAYOUTS[dtype])
    primitives, shape, causal, window, masked, scale, config = _gpu_case(case, dtype, device, GPU_FLOAT32_CONFIG)
    (do, q, k, v), mask = _inputs(shape, dtype, masked, "cuda", seed=11)
    mismatch = kb.check_backward(do, q, k, v, mask, causal, scale, window, config=config, primitives=primitives)
    assert mismatch is None, str(mismatch)
