"""The linear cross-entropy kernels against the executable models of their schedules
(``ojas_ref.verification.kernel_schedule_cross_entropy``), bit for bit.

* CPU (``TRITON_INTERPRET=1``, as CI runs): every launch of ``_logits_kernel``, ``_rows_kernel``
  and ``_scale_kernel`` that ``linear_cross_entropy``'s forward and backward make equals its model
  with the interpreter's primitives, on the buffers it read (the cuBLAS products' outputs taken as
  computed), for the 3-product schedule (rows streamed, G in place, grad_output not 1: the scale
  kernel), the 4-product schedule (the logits kernel's statistics, the merge, the backward's G) and
  the 4-product schedule with cuBLAS logits (rows streamed from float32 logits, the backward's
  rows from the saved lse), at three shapes (ragged tiles and K; whole tiles; token chunks,
  vocabulary slabs, several groups and merge blocks), with and without bias, label smoothing,
  z-loss, soft cap and ignored tokens, in float32 and bfloat16 (float16 at one shape: its scaled
  G); and ``linear_cross_entropy_forward``. Mutants (a row sum in another order, a division not
  rounded once, a nearest-even cast, the device's fused float32 dot, the logits as one dot over
  another BLOCK_K) are caught at the output they change.
* sm_90 without a GPU: the GPU tests' launches compile to the reduction layouts the device
  primitives model (wgmma accumulator for 16-bit logits tiles, blocked layouts otherwise), the
  bfloat16 logits tiles' exp sum is ``wgmma_row_sum``'s tree at N = 128 (Triton 3.9's PTX), and the
  float32 IEEE dot compiles to ``fma.rn.f32`` chains over k in increasing order (:func:`fma_dot`).
* GPU (``-m gpu``): the same schedules at three shapes against the device's primitives (the
  ``ojas verify-device`` record's bfloat16 dot model, the FMA chain for float32, the device's
  ``tl.exp`` / ``tl.log`` / ``/``, the row sums in the imported Triton's order on the launches'
  layouts).
"""

from __future__ import annotations

import collections
import dataclasses
import re

import numpy as np
import pytest
import torch
import triton

from ojas_kernels.linear_cross_entropy_config import GemmConfig, LinearCrossEntropyConfig, RowConfig, default_config
from ojas_ref.verification import device_premises as dp
from ojas_ref.verification import kernel_schedule as ks
from ojas_ref.verification import kernel_schedule_cross_entropy as kc
from ojas_ref.verification import kernel_schedule_rowwise as kr

DTYPES = [torch.float32, torch.bfloat16]
DTYPE_IDS = ["float32", "bfloat16"]
CPU = kc.interpreter_primitives()
SMALL = GemmConfig(16, 16, 16, 2, 1, 1)  # default_config's tiles on the CPU
# name, (N, D, V), options, config changes: ragged rows, columns and K (D % 16); whole tiles;
# token chunks (row0 > 0), vocabulary slabs (v0 > 0), 3 groups of tiles merged 2 at a time
SHAPES = [
    ("ragged", (37, 40, 70), dict(ignored=True), {}),
    ("whole-tiles", (32, 32, 48), dict(bias=True, label_smoothing=0.1, z_loss=1e-3), {}),
    (
        "chunks-slabs-groups",
        (50, 24, 131),
        dict(bias=True, softcap=5.0, label_smoothing=0.05, ignored=True),
        dict(token_chunk=16, vocab_slab=48, tiles_per_program=3, rows=RowConfig(16, 16, 2, 1)),
    ),
]
# variant: the reduction, the config, and the kernel launches (kernel, flags) it must make
VARIANTS = {
    "3-products": ("mean", dict(products=3), {("_rows_kernel", "GRAD STREAM"), ("_scale_kernel", "")}),
    "4-products": (
        "none",
        dict(products=4),
        {("_logits_kernel", "STATS WRITE_Z"), ("_rows_kernel", "GRAD"), ("_logits_kernel", "GRAD")},
    ),
    "4-products-cublas": (
        "none",
        dict(products=4, fwd_logits="cublas", bwd_logits="cublas"),
        {("_rows_kernel", "GRAD STREAM"), ("_rows_kernel", "HAS_LSE GRAD STREAM")},
    ),
}


def _inputs(shape, dtype, options, device="cpu", seed=0):
    """(input, weight, target, bias or None, the other options): logits of about unit scale, every
    fifth target ignored when ``options['ignored']``."""
    n, d, v = shape
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    w = torch.randn(v, d, generator=g) / d**0.5
    target = torch.randint(0, v, (n,), generator=g)
    options = dict(options)
    if options.pop("ignored", False):
        target[1::5] = -100
    bias = torch.randn(v, generator=g) if options.pop("bias", False) else None
    cast = [None if t is None else t.to(dtype).to(device) for t in (x, w, bias)]
    return cast[0], cast[1], target.to(device), cast[2], options


def _config(base: LinearCrossEntropyConfig, *changes: dict) -> LinearCrossEntropyConfig:
    for change in changes:
        base = dataclasses.replace(base, **change)
    return base


def _grad_output(reduction: str, n: int, device="cpu") -> torch.Tensor:
    """Not 1, so that the 3-product schedule's scale kernel writes; per token for "none"."""
    if reduction == "none":
        return (0.5 + torch.rand(n, generator=torch.Generator().manual_seed(9))).to(device)
    return torch.tensor(0.75, device=device)


def _run(shape_case, variant, dtype, primitives, device="cpu", seed=0):
    """check_linear_cross_entropy of a case: (mismatch, launches)."""
    _, shape, options, changes = shape_case
    reduction, variant_changes, _ = VARIANTS[variant]
    x, w, target, bias, opts = _inputs(shape, dtype, options, device, seed)
    config = _config(default_config(dtype, torch.device(device)), changes, variant_changes)
    launches: list = []
    mismatch = kc.check_linear_cross_entropy(
        x,
        w,
        target,
        linear_bias=bias,
        reduction=reduction,
        config=config,
        grad_output=_grad_output(reduction, shape[0], device),
        primitives=primitives,
        launches=launches,
        **opts,
    )
    return mismatch, launches


def _kinds(launches) -> set[tuple[str, str]]:
    """(kernel, flags without the options' flags) of every launch."""
    options = {"NEED_SUM", "HAS_BIAS", "HAS_CAP"}
    return {(la.kernel, " ".join(f for f in kc._variant(la).split() if f not in options)) for la in launches}


# ---------------------------------------------------------------------------
# CPU: the interpreter's primitives
# ---------------------------------------------------------------------------


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("shape_case", SHAPES, ids=[s[0] for s in SHAPES])
def test_every_launch_matches_the_interpreter_schedule_bit_for_bit(shape_case, variant, dtype):
    mismatch, launches = _run(shape_case, variant, dtype, CPU)
    assert mismatch is None, str(mismatch)
    assert VARIANTS[variant][2] <= _kinds(launches)  # the schedule's kernels ran
    _, _, options, changes = shape_case
    flags = {f for la in launches for f in kc._variant(la).split()}
    assert ("HAS_BIAS" in flags) == ("bias" in options)
    assert ("HAS_CAP" in flags) == ("softcap" in options)
    assert ("NEED_SUM" in flags) == ("label_smoothing" in options)
    if changes:  # several chunks (row0 > 0) or slabs (v0 > 0), and groups merged over several blocks
        assert any(la.args.get("row0", 0) > 0 or la.args.get("v0", 0) > 0 for la in launches)
        if variant == "4-products":
            merges = [la for la in launches if la.kernel == "_rows_kernel" and not la.args["STREAM"]]
            assert merges and all(la.args["n_groups"] > la.args["BLOCK_P"] for la in merges)
    targets = [la.args["TGT"] for la in launches if la.kernel != "_scale_kernel"]
    assert all((t >= 0).all() for t in targets)  # the kernels see the kept tokens only (ce_drop_ignored)
    assert all(t.numel() < shape_case[1][0] for t in targets) == ("ignored" in options)
    written = [la for la in launches if la.kernel != "_scale_kernel"]
    assert all(la.options["enable_fp_fusion"] is False for la in written)  # no fused products: the model's
    scaled = [la for la in launches if la.kernel == "_scale_kernel"]
    assert all(not torch.equal(la.args["X"], la.after["X"]) for la in scaled)  # grad_output 0.75 was applied


@pytest.mark.interpreter
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_float16_launches_match_with_their_scaled_g(variant):
    """float16: G stored times a power of two (``g_scale`` in the rows kernel, the token weights
    in the backward's logits kernel), as modelled."""
    mismatch, launches = _run(SHAPES[2], variant, torch.float16, CPU)
    assert mismatch is None, str(mismatch)
    scales = {la.args["g_scale"] for la in launches if la.kernel == "_rows_kernel" and not la.args["HAS_LSE"]}
    assert scales == {256.0}


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_the_forward_only_launches_match(dtype):
    """``linear_cross_entropy_forward``: the statistics without the float32 logits (no WRITE_Z), the
    merge without G."""
    from ojas_kernels.linear_cross_entropy import linear_cross_entropy_forward

    x, w, target, bias, opts = _inputs((37, 40, 70), dtype, dict(bias=True, softcap=3.0, ignored=True))
    config = _config(default_config(dtype, torch.device("cpu")), dict(tiles_per_program=2))
    with kc.record_launches() as launches:
        linear_cross_entropy_forward(x, w, target, linear_bias=bias, config=config, label_smoothing=0.1, **opts)
    assert [(la.kernel, kc._variant(la)) for la in launches] == [
        ("_logits_kernel", "STATS HAS_BIAS HAS_CAP"),
        ("_rows_kernel", "NEED_SUM HAS_CAP"),
    ]
    assert (m := kc.check_launches(launches, CPU)) is None, str(m)


@pytest.mark.interpreter
def test_grad_output_one_leaves_the_gradients_as_computed():
    """``loss.backward()``: the scale kernel reads the factor 1 and writes nothing, as its model."""
    x, w, target, _, _ = _inputs((37, 40, 70), torch.bfloat16, {})
    launches: list = []
    assert kc.check_linear_cross_entropy(x, w, target, primitives=CPU, launches=launches) is None
    scaled = [la for la in launches if la.kernel == "_scale_kernel"]
    assert len(scaled) == 2 and all(torch.equal(la.args["X"], la.after["X"]) for la in scaled)
    assert kc.scale_schedule(scaled[0], CPU).operations["x"] == "nothing written: the factor is 1"


# ---------------------------------------------------------------------------
# Mutants
# ---------------------------------------------------------------------------


def _sequential_sum(x: torch.Tensor, layout) -> torch.Tensor:
    acc = x[:, 0].clone()
    for j in range(1, x.shape[1]):
        acc = acc + x[:, j]
    return acc


def _launches(variant: str, dtype=torch.float32, shape_case=SHAPES[0]):
    mismatch, launches = _run(shape_case, variant, dtype, CPU)
    assert mismatch is None, str(mismatch)
    return launches


@pytest.mark.interpreter
def test_a_row_sum_in_another_order_is_caught_at_the_statistics():
    """4 products: the logits tile agrees, the group's sum pl is the first to differ (its max pm
    agrees); 3 products: the streamed row's lse."""
    sequential = dataclasses.replace(CPU, name="sequential row sum", sum=_sequential_sum)
    launches = _launches("4-products", shape_case=SHAPES[1])
    mismatch = kc.check_launches(launches, sequential)
    assert mismatch is not None and (mismatch.launch, mismatch.kernel) == (0, "_logits_kernel")
    assert mismatch.mismatch.output == "pl" and "exp or the row sum" in mismatch.mismatch.operation
    row, group = mismatch.mismatch.index
    steps = dict(mismatch.mismatch.steps)
    right = kc.logits_schedule(launches[0], CPU)
    assert steps["m after tile 0 of the group"] == right.steps["pl"]["m after tile 0 of the group"][0][row, group]
    assert mismatch.mismatch.kernel == right.outputs["pl"][row, group].item() != mismatch.mismatch.model
    three = kc.check_launches(_launches("3-products", shape_case=SHAPES[1]), sequential)
    assert three is not None and three.kernel == "_rows_kernel" and three.mismatch.output == "lse"
    assert str(three).startswith("launch 0 (_rows_kernel GRAD STREAM NEED_SUM HAS_BIAS): ")


@pytest.mark.interpreter
def test_a_division_not_rounded_once_is_caught_at_the_capped_logits():
    launches = _launches("4-products", shape_case=SHAPES[2])
    recip = dataclasses.replace(CPU, name="x * (1 / y)", div=lambda x, y: x * (1.0 / y))
    mismatch = kc.check_launches(launches, recip)
    assert mismatch is not None and mismatch.launch == 0 and mismatch.mismatch.output == "z"
    assert mismatch.mismatch.operation.startswith("the logit tile")
    assert str(mismatch).startswith("launch 0 (_logits_kernel STATS WRITE_Z HAS_BIAS HAS_CAP): ")
    assert "first differing operation: the logit tile" in str(mismatch)


@pytest.mark.interpreter
def test_a_nearest_even_cast_is_caught_at_g_in_bfloat16():
    """The interpreter truncates float32 -> bfloat16: the model with torch's nearest-even cast
    agrees on lse and loss (float32) and first differs at G; in the 3-product schedule's backward
    the scale kernel's cast differs too, later."""
    nearest = dataclasses.replace(CPU, name="nearest-even cast", cast=lambda t, dtype: t.to(dtype))
    launches = _launches("3-products", torch.bfloat16)
    mismatch = kc.check_launches(launches, nearest)
    assert mismatch is not None and mismatch.launch == 0 and mismatch.mismatch.output == "g"
    assert abs(mismatch.mismatch.model) > abs(mismatch.mismatch.kernel)  # truncation: the smaller magnitude
    assert "exp(z - lse)" in dict(mismatch.mismatch.steps)
    scale = [i for i, la in enumerate(launches) if la.kernel == "_scale_kernel"]
    assert scale and kc.check_launches(launches[: scale[0]], CPU) is None
    later = kc.check_launches(launches[scale[0] :], nearest)
    assert later is not None and later.kernel == "_scale_kernel" and later.mismatch.output == "x"


@pytest.mark.interpreter
def test_the_devices_fused_float32_dot_is_caught_at_the_logits():
    """The interpreter's dot is numpy's matmul; the device's float32 FMA chain (:func:`fma_dot`)
    rounds otherwise: caught at the logits of the first launch."""
    launches = _launches("4-products")
    mismatch = kc.check_launches(launches, dataclasses.replace(CPU, name="fma dot", dot=kc.fma_dot))
    assert mismatch is not None and (mismatch.launch, mismatch.mismatch.output) == (0, "z")


@pytest.mark.interpreter
def test_a_model_with_another_block_k_is_caught_at_the_logits():
    """The logits as one dot over K = 32 (BLOCK_K 32) where the kernel adds two dots of 16: caught
    at the forward's float32 logits, and at G of the backward's logits launch."""
    launches = _launches("4-products", shape_case=SHAPES[1])
    stats, grad = launches[0], launches[-1]
    assert (stats.kernel, grad.kernel, stats.args["BLOCK_K"], stats.args["D"]) == ("_logits_kernel",) * 2 + (16, 32)
    for launch, output in ((stats, "z"), (grad, "g")):
        wrong = dataclasses.replace(launch, args={**launch.args, "BLOCK_K": 32})
        mismatch = kc.check_launches([wrong], CPU)
        assert mismatch is not None and mismatch.mismatch.output == output
    assert kc.check_launches([stats, grad], CPU) is None


def _fake_ttgir(layouts: dict[int, str]) -> str:
    """A TTGIR holding only what :func:`reduce_layout` reads: a reduction over 16 x ``cols`` tiles
    in each of ``layouts`` ({cols: "wgmma" or "blocked"})."""
    text = [
        "#blocked = #ttg.blocked<{sizePerThread = [1, 1], threadsPerWarp = [16, 2], warpsPerCTA = [1, 1], order = [1, 0]}>",
        "#mma = #ttg.nvidia_mma<{versionMajor = 3, versionMinor = 0, warpsPerCTA = [1, 1], instrShape = [16, 16, 16]}>",
    ]
    for cols, kind in layouts.items():
        name = "mma" if kind == "wgmma" else "blocked"
        text.append(
            f'%r = "tt.reduce"(%x) <{{axis = 1 : i32}}> ({{ }}) : (tensor<16x{cols}xf32, #{name}>) -> tensor<16xf32>'
        )
    return "\n".join(text)


@pytest.mark.interpreter
def test_the_device_sums_take_each_launchs_layout():
    """The device path on the CPU: the interpreter's launches given (fake) TTGIRs and primitives
    that sum on the layout (the interpreter's other operations): every launch that reduces reads
    its layout (the logits tiles' wgmma, the rows' blocked), the results differ from the
    interpreter's only by the sums' order, and a launch without its TTGIR is refused."""
    launches = _launches("4-products", shape_case=SHAPES[2])
    hybrid = dataclasses.replace(CPU, name="device sums", sum=kc._device_sum, needs_layout=True)
    ttgir = {"_logits_kernel": _fake_ttgir({16: "wgmma"}), "_rows_kernel": _fake_ttgir({2: "blocked"})}
    given = [dataclasses.replace(la, ttgir=ttgir[la.kernel]) for la in launches]
    mismatch = kc.check_launches(given, hybrid)
    assert mismatch is not None and (mismatch.launch, mismatch.mismatch.output) == (0, "pl")
    for la in given:
        model, interpreted = kc.launch_schedule(la, hybrid), kc.launch_schedule(la, CPU)
        for name, value in model.outputs.items():
            torch.testing.assert_close(value.float(), interpreted.outputs[name].float(), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"need the launch's TTGIR: record it with record_launches\(ttgir=True\)"):
        kc.launch_schedule(launches[0], hybrid)
    with pytest.raises(ValueError, match="expected one reduction layout over tiles of 16 columns, found"):
        kc.launch_schedule(dataclasses.replace(launches[0], ttgir=ttgir["_rows_kernel"]), hybrid)


def test_launch_schedule_refuses_other_kernels_and_non_contiguous_buffers():
    with pytest.raises(ValueError, match="no model of the kernel '_other'"):
        kc.launch_schedule(kc.Launch("_other", (1,), {}, {}, {}), CPU)
    with pytest.raises(ValueError, match="Z: a non-contiguous buffer is not modelled"):
        kc._flat(torch.zeros(4, 4).t(), "Z")
    from ojas_kernels import linear_cross_entropy_kernels as lk

    real = lk.fast
    with pytest.raises(RuntimeError, match="inside"), kc.record_launches():
        assert lk.fast is not real
        raise RuntimeError("inside")
    assert lk.fast is real  # the recorder is removed, whatever happened inside


# ---------------------------------------------------------------------------
# The device primitives' pieces, on the CPU
# ---------------------------------------------------------------------------


def test_fma_dot_is_a_chain_of_single_roundings():
    g = torch.Generator().manual_seed(3)
    a, b, c = torch.randn(8, 24, generator=g), torch.randn(24, 5, generator=g), torch.randn(8, 5, generator=g)
    want = c.clone()
    for k in range(24):
        want = kr.fma32(a[:, k, None], b[None, k, :], want)
    assert torch.equal(kc.fma_dot(a, b, c), want)
    unfused = c.clone()
    for k in range(24):
        unfused = unfused + a[:, k, None] * b[None, k, :]
    assert not torch.equal(kc.fma_dot(a, b, c), unfused)


def _sm90(kernel_name: str, dtype: str, **changes) -> dict:
    """``_logits_kernel`` / ``_rows_kernel`` compiled for sm_90 here (no GPU needed) as the GPU
    tests' default_config launches them: bfloat16 logits tiles 128 x 128 x 64 (8 warps, TF32 dot
    precision), float32 64 x 64 x 32 (4 warps, IEEE), rows 1 x 4096 (8 warps); STATS with a cap
    and label smoothing. ``changes``: other constexprs."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile

    from ojas_kernels import linear_cross_entropy_kernels as lk

    kernel = getattr(lk, kernel_name)
    floats = ("softcap", "eps", "lam", "inv_v", "g_scale")
    if kernel_name == "_logits_kernel":
        cfg = default_config({"bf16": torch.bfloat16, "fp32": torch.float32}[dtype], torch.device("cuda")).fwd
        ptrs = dict(X=f"*{dtype}", W=f"*{dtype}", BIAS=f"*{dtype}", G=f"*{dtype}")
        constexprs = dict(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m)
        constexprs.update(DOT_PREC="tf32" if dtype == "bf16" else "ieee", EVEN_K=True, WRITE_Z=True)
        options = dict(num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    else:
        rows = default_config(torch.bfloat16, torch.device("cuda")).rows
        ptrs = dict(Z=f"*{dtype}", G=f"*{dtype}", BIAS=f"*{dtype}")
        constexprs = dict(HAS_LSE=False, GRAD=True, STREAM=True, BLOCK_R=rows.block_r, BLOCK_P=64)
        constexprs["BLOCK_V"] = rows.block_v
        options = dict(num_warps=rows.num_warps)
    constexprs.update(STATS=True, HAS_BIAS=False, HAS_CAP=True, NEED_SUM=True)
    constexprs = {k: v for k, v in {**constexprs, **changes}.items() if k in kernel.arg_names}
    signature = {
        n: "constexpr"
        if n in constexprs
        else ptrs.get(n, "fp32" if n in floats else "*fp32" if n.isupper() and n not in "DV" else "i32")
        for n in kernel.arg_names
    }
    signature["TGT"] = "*i64"
    try:
        source = ASTSource(kernel, signature, constexprs)
        return compile(source, target=GPUTarget("cuda", 90, 32), options={**options, "enable_fp_fusion": False}).asm
    except Exception as err:  # no NVIDIA backend or ptxas in this Triton
        pytest.skip(f"cannot compile for sm_90 here: {type(err).__name__}: {err}")


@pytest.mark.parametrize(
    "kernel_name,dtype,want",
    [
        ("_logits_kernel", "bf16", "wgmma"),
        ("_logits_kernel", "fp32", kr.Blocked((4, 4), (2, 16), (4, 1))),
        ("_rows_kernel", "bf16", kr.Blocked((1, 1), (1, 32), (1, 8))),
        ("_rows_kernel", "fp32", kr.Blocked((1, 1), (1, 32), (1, 8))),
    ],
    ids=["logits-bf16", "logits-fp32", "rows-bf16", "rows-fp32"],
)
def test_the_gpu_launches_reduce_on_the_modelled_layouts(kernel_name, dtype, want):
    """Every row reduction of the GPU tests' launches (sm_90, this Triton) is on one layout that
    the device primitives model: the wgmma accumulator with the warps along the rows and N the
    tile's (:func:`~ojas_ref.verification.kernel_schedule.wgmma_row_sum`), or a blocked layout
    (:func:`~ojas_ref.verification.kernel_schedule_rowwise.blocked_sum`); no fused product outside
    the float32 dot (libdevice's ``logf`` has its own ``fma.rn.ftz.f32``, as the device primitive's
    ``tl.log``); Triton's ``/`` is ``div.full.f32``."""
    asm = _sm90(kernel_name, dtype)
    cols = 4096 if kernel_name == "_rows_kernel" else (128 if dtype == "bf16" else 64)
    assert kc.reduce_layout(asm["ttgir"], cols) == want
    ptx = asm["ptx"]
    assert "div.full.f32" in ptx and "div.rn.f32" not in ptx
    if not (kernel_name == "_logits_kernel" and dtype == "fp32"):  # libdevice's own (tl.log) are .ftz
        assert "fma.rn.f32" not in ptx
    if want == "wgmma":
        mma = re.sub(r"warpsPerCTA = \[8, 1\]", "warpsPerCTA = [4, 2]", asm["ttgir"])
        with pytest.raises(ValueError, match="not modelled"):
            kc.reduce_layout(mma, cols)


def test_the_float32_dot_is_the_fma_chain_of_fma_dot():
    """The float32 IEEE ``tl.dot`` of ``_logits_kernel`` (64 x 64 x 32 tiles, 4 warps) compiles to
    chains of BLOCK_K ``fma.rn.f32``, one per accumulator, each from the accumulator of the previous
    K slice, whose A operands are read from shared memory at increasing offsets (k increasing):
    :func:`fma_dot`'s order."""
    lines = _sm90("_logits_kernel", "fp32")["ptx"].splitlines()
    fmas = []
    for i, line in enumerate(lines):
        m = re.match(r"\s*fma\.rn\.f32\s+(%r\d+), (%r\d+), (%r\d+), (%r\d+);", line)
        if m:
            fmas.append((i, m.groups()))
    defined = {g[0]: i for i, g in fmas}
    users = collections.defaultdict(list)
    for i, g in fmas:
        users[g[3]].append((i, g))
    starts = [(i, g) for i, g in fmas if g[3] not in defined or defined[g[3]] > i]  # the loop-carried acc

    def chain(i, g):
        out = [(i, g)]
        while nxt := [(j, h) for j, h in users[out[-1][1][0]] if j > out[-1][0]]:
            out.append(nxt[0])
        return out

    chains = [chain(i, g) for i, g in starts]
    assert chains and {len(c) for c in chains} == {32} and sum(map(len, chains)) == len(fmas)
    loads = {}
    for line in lines:
        m = re.match(r"\s*ld\.shared(?:\.v\d)?\.(?:b32|f32)\s+(\{[^}]*\}|%r\d+), \[(%r\d+)(?:\+(\d+))?\];", line)
        if m:
            for k, r in enumerate(x.strip() for x in m.group(1).strip("{}").split(",")):
                loads[r] = (m.group(2), int(m.group(3) or 0) + 4 * k)
    for c in chains:
        a = [loads[g[1]] for _, g in c if g[1] in loads]
        base = collections.Counter(b for b, _ in a).most_common(1)[0][0]
        offsets = [off for b, off in a if b == base]
        assert len(offsets) >= 16 and offsets == sorted(offsets) and len(set(offsets)) == len(offsets)


def _wgmma_exp_sums(ptx: str) -> list[tuple[tuple, int]]:
    """The ``add.f32`` trees of ``ex2`` results that reach a ``shfl.sync.bfly`` in the PTX, each
    leaf named by the wgmma accumulator register its exponent's argument is read from (``("x",
    n)``, n the register's place in the wgmma's output list), with the shuffle's offset. The code is
    read twice so that loop-carried registers have their values."""
    regs: dict[str, tuple] = {}

    def get(r: str) -> tuple:
        return regs.get(r, ("U", r))

    def own(e: tuple) -> tuple:
        """The accumulator register an exponent's argument comes from: ex2(mul(sub(selp(acc, ..), m), c))."""
        while e[0] in ("ex2", "mul", "sub", "selp"):
            e = next((c for c in e[1:] if c[0] not in ("U", "K")), ("U", "?"))
        return ("x", e[1]) if e[0] == "A" else e

    found = []
    for line in [raw.strip() for raw in ptx.splitlines()] * 2:
        found_now = None
        if line.startswith("wgmma.mma_async"):
            for n, r in enumerate(re.search(r"\{([^}]*)\}", line).group(1).split(",")):
                regs[r.strip()] = ("A", n)
        elif m := re.match(r"mov\.[bf]32\s+(%r\d+), (%r\d+);", line):
            regs[m.group(1)] = get(m.group(2))
        elif m := re.match(r"(add|sub|mul)\.rn\.f32\s+(%r\d+), (%r\d+|0f\w+), (%r\d+|0f\w+);", line):
            a, b = (("K", x) if x.startswith("0f") else get(x) for x in m.group(3, 4))
            regs[m.group(2)] = (m.group(1), a, b)
        elif m := re.match(r"ex2\.approx\.f32\s+(%r\d+), (%r\d+);", line):
            regs[m.group(1)] = ("ex2", get(m.group(2)))
        elif m := re.match(r"selp\.[bf]32\s+(%r\d+), (%r\d+|0f\w+), (%r\d+|0f\w+), %p\d+;", line):
            a, b = (("K", x) if x.startswith("0f") else get(x) for x in m.group(2, 3))
            regs[m.group(1)] = ("selp", a, b)
        elif m := re.match(r"shfl\.sync\.bfly\.b32\s+(%r\d+), (%r\d+), (\d+)", line):
            found_now = (get(m.group(2)), int(m.group(3)))
            regs[m.group(1)] = ("U", m.group(1))
        elif (m := re.match(r"[\w.]+\s+(%r\d+),", line)) is not None:
            regs[m.group(1)] = ("U", m.group(1))
        if found_now is not None:
            found.append(found_now)
    sums = []
    for tree, offset in found[len(found) // 2 :]:
        leaves = _adds(tree)
        if tree[0] == "add" and all(t[0] == "ex2" for t in leaves):
            sums.append((_relabel(tree, own), offset))
    return sums


def _adds(e: tuple) -> list[tuple]:
    return _adds(e[1]) + _adds(e[2]) if e[0] == "add" else [e]


def _relabel(e: tuple, leaf) -> tuple:
    return ("add", _relabel(e[1], leaf), _relabel(e[2], leaf)) if e[0] == "add" else leaf(e)


@pytest.mark.skipif(
    not triton.__version__.startswith("3.9."),
    reason="read from Triton 3.9's PTX (the in-thread order of other versions: kernel_schedule.in_thread_order)",
)
def test_the_bf16_logits_tiles_sum_rows_as_wgmma_row_sum():
    """``_logits_kernel``'s bfloat16 launch (128 x 128 tiles, wgmma m64n128k16, 8 warps, STATS):
    the PTX's ``sum(exp(z - m'))`` of a thread's first row is a tree over the 32 accumulator
    registers ``4 j + k`` (columns ``8 j + 2 t + k`` of lane t), then lanes xor 2, xor 1; evaluated on
    random rows it equals ``wgmma_row_sum`` (N = 128), not a sequential sum."""
    asm = _sm90("_logits_kernel", "bf16", HAS_CAP=False, NEED_SUM=False, WRITE_Z=False)
    sums = _wgmma_exp_sums(asm["ptx"])
    assert [offset for _, offset in sums] == [2, 2]  # the first shuffle of each of the thread's two rows
    tree = sums[0][0]
    assert sorted(n for _, n in _adds(tree)) == [4 * j + k for j in range(32) for k in range(2) if 4 * j + k < 64]

    def evaluate(e: tuple, x: dict) -> float:
        return x[e[1]] if e[0] == "x" else np.float32(evaluate(e[1], x)) + np.float32(evaluate(e[2], x))

    rows = torch.exp(3 * torch.randn(8, 128, generator=torch.Generator().manual_seed(8)))
    got = []
    for row in rows.tolist():
        lanes = [
            evaluate(tree, {n: np.float32(row[8 * (n // 4) + 2 * t + n % 2]) for n in range(64)}) for t in range(4)
        ]
        for off in (2, 1):
            lanes = [np.float32(lanes[t] + lanes[t ^ off]) for t in range(4)]
        got.append(float(lanes[0]))
    assert got == ks.wgmma_row_sum(rows).tolist()
    sequential = rows[:, 0].clone()
    for j in range(1, 128):
        sequential = sequential + rows[:, j]
    assert got != sequential.tolist()


def test_device_primitives_take_the_record_and_the_launch_layouts(monkeypatch):
    """On the CPU (CUDA reported present, the record given): 16-bit dots are the record's model,
    float32 dots :func:`fma_dot` (TF32 refused), the sums follow the layout (and refuse none)."""
    from ojas_kernels import attention_args

    model = dp.Accumulation(16, 26, "trunc", "truncate", "operands")
    record = {"tl.dot bfloat16": {"measured": [dataclasses.asdict(model)]}}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(dp, "checked_premises", lambda names, folder=None: {n: record[n] for n in names})
    g = torch.Generator().manual_seed(4)
    a, b = torch.randn(8, 32, generator=g).bfloat16().float(), torch.randn(32, 16, generator=g).bfloat16().float()
    c = torch.randn(8, 16, generator=g)
    bf = kc.device_primitives(torch.bfloat16)
    assert torch.equal(bf.dot(a, b, c), ks.accumulate(model, a, b, c)) and bf.needs_layout
    x = torch.exp(3 * torch.randn(4, 128, generator=g))
    assert torch.equal(bf.sum(x, "wgmma"), ks.wgmma_row_sum(x))
    layout = kr.Blocked((1, 1), (1, 32), (1, 2))
    assert torch.equal(bf.sum(x, layout), kr.blocked_sum(x, 1, layout))
    assert not torch.equal(bf.sum(x, layout), bf.sum(x, "wgmma"))  # the layout decides the order
    with pytest.raises(ValueError, match="needs the reduction's layout"):
        bf.sum(x, None)
    assert kc.device_primitives(torch.float32).dot is kc.fma_dot
    monkeypatch.setattr(attention_args, "_dot_precision", lambda dtype, highest="ieee": "tf32")
    with pytest.raises(ValueError, match="TF32 dots"):
        kc.device_primitives(torch.float32)


def test_the_device_sums_follow_the_imported_triton(monkeypatch):
    """As the other models: Triton 3.6 adds a thread's elements one after another, 3.9 by a tree;
    another version is refused by name."""
    x = torch.exp(3 * torch.randn(4, 1024, generator=torch.Generator().manual_seed(5)))
    layout = kr.Blocked((1, 1), (1, 32), (1, 2))
    assert torch.equal(kc._device_sum(x, layout), kr.blocked_sum(x, 1, layout, triton.__version__))
    monkeypatch.setattr(triton, "__version__", "3.6.0")
    assert torch.equal(kc._device_sum(x, layout), kr.blocked_sum(x, 1, layout, "3.6.0"))
    assert not torch.equal(kc._device_sum(x, layout), kr.blocked_sum(x, 1, layout, "3.9.0"))
    monkeypatch.setattr(triton, "__version__", "3.7.0")
    with pytest.raises(ValueError, match="Triton 3.7.0 is not modelled"):
        kc._device_sum(x[:, :128], "wgmma")


# ---------------------------------------------------------------------------
# GPU: the device's primitives
# ---------------------------------------------------------------------------

GPU_SHAPES = [  # default_config's tiles: 128 x 128 x 64 (bf16) / 64 x 64 x 32 (fp32) logits, 1 x 4096 rows
    ("ragged", (300, 256, 1000), dict(ignored=True), {}),
    ("options", (128, 128, 4100), dict(bias=True, label_smoothing=0.1, z_loss=1e-3, softcap=30.0), {}),
    ("chunks", (200, 192, 2048), dict(ignored=True, softcap=15.0), dict(token_chunk=64, vocab_slab=512)),
]


def _device(dtype):
    try:
        return kc.device_primitives(dtype)
    except (RuntimeError, dp.PremisesNotChecked) as err:
        pytest.skip(str(err))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("shape_case", GPU_SHAPES, ids=[s[0] for s in GPU_SHAPES])
def test_every_launch_matches_the_device_schedule_bit_for_bit_gpu(shape_case, variant, dtype):
    mismatch, launches = _run(shape_case, variant, dtype, _device(dtype), "cuda", seed=11)
    assert mismatch is None, str(mismatch)
    assert VARIANTS[variant][2] <= _kinds(launches)
