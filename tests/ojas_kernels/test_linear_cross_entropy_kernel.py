"""The Triton linear cross-entropy (kernels/ojas_kernels/linear_cross_entropy.py) against the
float64 reference (ojas_ref.linear_cross_entropy) and the oracle extracted from Coq.

* CPU tests run the kernels in Triton's interpreter: this module sets
  ``TRITON_INTERPRET=1`` before importing ``ojas_kernels`` when no CUDA device is
  present; they are skipped (with the reason) if the kernels were already imported
  compiled.  Small shapes (N <= 24, D <= 32, V <= 70, 16-wide tiles), drawn chunks:
  token chunks, vocabulary slabs and vocabulary tiles per program do not change the
  result (Ojas.LinearCrossEntropy.ChunkedLse.merge_chunks_lse,
  Ojas.LinearCrossEntropy.Gradient.ce_backward_correct).
* GPU tests (``-m gpu``, need CUDA): realistic shapes against the float64 reference,
  the memory bound, the dispatch of ``ojas_ref.linear_cross_entropy``, a second
  backward through a retained graph, D = 0, and float32 products under torch's
  "high" and "highest" matmul precision.

Errors are norm-relative, |x - ref| / |ref|, the reference computed in float64 on the
inputs rounded to the kernel's dtype.  Tolerances: float32 1e-5 (the CPU run sees
about 2e-7); float16 5e-3 and bfloat16 2e-2 (G is rounded to the input dtype before
its two products, and the results are rounded once).
"""

from __future__ import annotations

import dataclasses
import importlib
import itertools
import math
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

triton = pytest.importorskip("triton")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from ojas_kernels import linear_cross_entropy as klce  # noqa: E402
from ojas_kernels import linear_cross_entropy_four_products as klce_four  # noqa: E402
from ojas_kernels import linear_cross_entropy_three_products as klce_three  # noqa: E402
from ojas_ref.functional.dispatch import use_impl  # noqa: E402
from ojas_kernels.linear_cross_entropy import (  # noqa: E402
    LinearCrossEntropyConfig,
    default_config,
    linear_cross_entropy,
    linear_cross_entropy_forward,
)
from ojas_ref.verification.linear_cross_entropy_check import (  # noqa: E402
    autocast_mismatches,
    make_problem,
    oracle_mismatches,
    oracle_tolerance,
)

ref_module = importlib.import_module("ojas_ref.functional.linear_cross_entropy")


F64 = torch.float64
TOL = {torch.float32: 1e-5, torch.float16: 5e-3, torch.bfloat16: 2e-2}
GPU_TOL = {**TOL, torch.float32: 1e-4}  # sums over thousands of terms
NAMES = ("loss", "grad_input", "grad_weight", "grad_bias")


def with_chunks(
    dtype,
    device,
    token_chunk=None,
    vocab_slab=None,
    tiles_per_program=None,
    fwd_logits="triton",
    bwd_logits="triton",
    products=3,
):
    cfg = default_config(dtype, torch.device(device))
    return LinearCrossEntropyConfig(
        cfg.fwd,
        cfg.bwd,
        cfg.rows,
        token_chunk,
        vocab_slab,
        tiles_per_program,
        fwd_logits=fwd_logits,
        bwd_logits=bwd_logits,
        products=products,
    )


def run(fn, p, dtype, device="cpu", **kw):
    """Loss and gradients of ``fn`` on problem ``p`` (make_problem), inputs rounded to
    ``dtype`` (the reference then runs in float64 on them); grad_output p["grad_out"]
    for "none", 1.7 otherwise."""
    compute_dtype = kw.pop("compute_dtype", dtype)
    leaves = [p["x"], p["w"]] + ([p["b"]] if p["b"] is not None else [])
    leaves = [t.to(dtype).to(device=device, dtype=compute_dtype).requires_grad_() for t in leaves]
    out = fn(
        leaves[0],
        leaves[1],
        p["t"].to(device),
        linear_bias=leaves[2] if len(leaves) > 2 else None,
        reduction=p["reduction"],
        ignore_index=p["ignore_index"],
        label_smoothing=p["eps"],
        z_loss=p["lam"],
        softcap=p["cap"],
        **kw,
    )
    go = p["grad_out"] if p["reduction"] == "none" else torch.tensor(1.7, dtype=F64)
    grads = torch.autograd.grad(out, leaves, go.to(device=device, dtype=out.dtype))
    return [out.detach(), *grads]


def reference(p, dtype, device="cpu"):
    return run(ref_module.linear_cross_entropy, p, dtype, device, compute_dtype=F64, impl="reference")


def rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    assert not torch.isnan(x).any(), "NaN in the kernel's result"
    if ref.abs().max() == 0:
        return x.abs().max().item()
    return ((x.to(F64) - ref.to(F64)).norm() / ref.to(F64).norm()).item()


def compare(got, want, dtype, floor=None, tol=TOL):
    """Norm-relative errors of ``got`` against ``want``, each within TOL[dtype] or
    8 x its entry in ``floor`` (the reference's own errors in ``dtype``, for problems
    whose gradients cancel, e.g. a confident token's p_t - 1, or whose results are
    float16 subnormals)."""
    errs = {name: rel_err(a, e) for name, a, e in zip(NAMES, got, want)}
    for name, a, e in zip(NAMES, got, want):  # the loss float32 whatever the dtype, gradients in dtype
        assert a.shape == e.shape and a.dtype == (torch.float32 if name == "loss" else dtype)
    tols = {name: max(tol[dtype], 8 * (floor or {}).get(name, 0.0)) for name in errs}
    assert all(errs[n] <= tols[n] for n in errs), (errs, tols)
    return errs


def reference_errors(p, want, dtype=torch.float32) -> dict:
    """Errors of the reference run in ``dtype`` against the float64 one."""
    got = run(ref_module.linear_cross_entropy, p, dtype, impl="reference")
    return {name: rel_err(a, e) for name, a, e in zip(NAMES, got, want)}


# ---------------------------------------------------------------------------
# CPU, interpreter
# ---------------------------------------------------------------------------


@st.composite
def problems(draw):
    three_d = draw(st.booleans())
    shape = (draw(st.integers(1, 3)), draw(st.integers(1, 8))) if three_d else (draw(st.integers(1, 24)),)
    p = make_problem(
        draw(st.integers(0, 2**31 - 1)),
        shape=shape,
        D=draw(st.sampled_from([16, 24, 32])),
        V=draw(st.integers(1, 70)),
        reduction=draw(st.sampled_from(["none", "mean", "sum"])),
        ignored=draw(st.sampled_from([0.0, 0.5])),
        bias=draw(st.booleans()),
        eps=draw(st.sampled_from([0.0, 0.1])),
        lam=draw(st.sampled_from([0.0, 1e-2])),
        cap=draw(st.sampled_from([None, 3.0])),
    )
    p["dtype"] = draw(st.sampled_from([torch.float32, torch.bfloat16, torch.float16]))
    # "cublas": forward and backward logits from different products, whose rounding
    # differences show in cancelling float32 gradients (p_t - 1)
    paths = ["triton"] if p["dtype"] == torch.float32 else ["triton", "cublas"]
    p["config"] = with_chunks(
        p["dtype"],
        "cpu",
        draw(st.sampled_from([None, 5, 16])),
        draw(st.sampled_from([None, 16, 32])),
        draw(st.sampled_from([None, 1, 2])),
        draw(st.sampled_from(paths)),
        draw(st.sampled_from(paths)),
        draw(st.sampled_from([3, 4])),
    )
    if draw(st.booleans()):
        p["t"] = p["t"].int()
    return p


@pytest.mark.interpreter
@settings(max_examples=40)
@given(problems())
def test_kernel_matches_reference(p):
    got = run(linear_cross_entropy, p, p["dtype"], config=p["config"])
    want = reference(p, p["dtype"])
    compare(got, want, p["dtype"], reference_errors(p, want, p["dtype"]))


@pytest.mark.interpreter
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_kernel_matches_extracted_oracle(reduction, monkeypatch):
    """ojas_ref.verification.linear_cross_entropy_check.oracle_mismatches (the check ``ojas audit``
    runs) with the dispatch sent to the kernel, and the kernel's lse against the oracle's."""
    oracle = pytest.importorskip("ojas_ref.verification.oracle")
    try:
        oracle.oracle_binary()
    except RuntimeError as e:
        pytest.skip(str(e))
    p = make_problem(11, shape=(3, 7), D=24, V=45, reduction=reduction, eps=0.1, lam=1e-3, cap=4.0)
    with use_impl(linear_cross_entropy="triton"):
        assert oracle_mismatches(p, torch.float32) == []
    res = oracle.linear_cross_entropy_oracle(
        p["x"],
        p["w"],
        p["t"],
        linear_bias=p["b"],
        reduction=reduction,
        ignore_index=p["ignore_index"],
        label_smoothing=p["eps"],
        z_loss=p["lam"],
        softcap=p["cap"],
        token_chunk=3,
        vocab_chunk=7,
    )
    loss, lse = linear_cross_entropy_forward(
        p["x"].float(),
        p["w"].float(),
        p["t"],
        linear_bias=p["b"].float(),
        label_smoothing=p["eps"],
        z_loss=p["lam"],
        softcap=p["cap"],
    )
    kept = p["t"] != p["ignore_index"]
    assert torch.isnan(lse[~kept]).all() and (loss[~kept] == 0).all()
    err = (lse[kept].to(F64) - res["lse"][kept]).abs().max().item()
    assert err <= oracle_tolerance(2.0**-24, 24, 45, res["lse"][kept])


@pytest.mark.interpreter
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_all_ignored_and_empty(reduction):
    """Every token ignored: losses 0 ("mean" included: Ojas.LinearCrossEntropy.Reduction.ce_mean_all_ignored),
    zero gradients; an empty batch likewise."""
    for shape, ignored in (((6,), 1.0), ((0,), 0.0)):
        p = make_problem(3, shape=shape, D=16, V=20, reduction=reduction, ignored=ignored)
        got = run(linear_cross_entropy, p, torch.float32)
        assert all((g == 0).all() for g in got), got
        assert got[0].shape == (shape if reduction == "none" else ())


@pytest.mark.interpreter
def test_large_logits_and_all_options():
    """Logits in the thousands (the lse is shifted by the running max), smoothing,
    z-loss, bias, softcap, 3-D input with targets as int32, several chunks and slabs,
    the Triton and cuBLAS logits paths."""
    p = make_problem(5, shape=(2, 11), D=32, V=67, reduction="mean", eps=0.2, lam=1e-4, ignored=0.3, cap=900.0)
    p["w"] = p["w"] * 300.0
    p["t"] = p["t"].int()
    want = reference(p, torch.float32)
    # With logits near 1e3, the forward's and the backward's logits (different products
    # with "cublas") differ by rounding of about 1e3 x 2^-24 x sqrt(D): exp(z - lse)
    # moves by that much relative, hence 1e-4 rather than 1e-5.
    for paths in (("triton", "triton", 3), ("triton", "triton", 4), ("cublas", "triton", 4), ("cublas", "cublas", 4)):
        cfg = with_chunks(torch.float32, "cpu", 7, 32, 1, *paths)
        compare(run(linear_cross_entropy, p, torch.float32, config=cfg), want, torch.float32, tol={torch.float32: 1e-4})


@settings(max_examples=200)
@given(
    st.integers(1, 5000),
    st.integers(1, 64),
    st.integers(1, 3000),
    st.integers(1, 600),
    st.one_of(st.none(), st.integers(1, 700)),
    st.booleans(),
)
def test_token_chunks_plan(K, D, V, limit, fixed, in_rows):
    """The chunks cover the kept tokens in order; a chunk in the workspace fits it; a
    chunk inside grad_input lies in rows that neither it nor an earlier chunk has
    written, and (automatic sizes) holds more tokens than the workspace would."""
    limit = limit // 8 * 8 or 8
    plan = klce._token_chunks(K, D, V, limit, fixed, in_rows)
    assert [r0 for r0, _, _ in plan] == list(itertools.accumulate([n for _, n, _ in plan][:-1], initial=0))
    assert sum(n for _, n, _ in plan) == K and all(n >= 1 for _, n, _ in plan)
    for r0, n, inside in plan:
        if fixed is not None:
            assert n == min(fixed, K - r0)
        if inside:
            start = klce._round_up((r0 + n) * D, 64)
            assert in_rows and start >= (r0 + n) * D and start + n * V <= K * D
            assert fixed is not None or n > limit
        elif fixed is None:
            assert n <= limit


def test_token_chunks_v32k():
    """At N = 16384, D = 4096, V = 32000 with 864 tokens of workspace, the first seven
    chunks (1856 tokens down to 904) lie in grad_input, the other nine in the workspace."""
    plan = klce._token_chunks(16384, 4096, 32000, 864, None, True)
    assert [n for _, n, inside in plan if inside] == [1856, 1648, 1456, 1296, 1144, 1016, 904]
    assert len(plan) == 16 and all(n <= 864 for _, n, inside in plan if not inside)


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chunks_inside_grad_input(dtype):
    """Chunks whose logits lie in grad_input's unwritten rows give bit for bit the
    result of chunks in the workspace (the same products, other memory)."""
    p = make_problem(12, shape=(24,), D=16, V=30, reduction="mean", bias=True, eps=0.1, ignored=0.0)
    assert [inside for _, _, inside in klce._token_chunks(24, 16, 30, 8, 5, True)] == [True] * 2 + [False] * 3
    cfg = with_chunks(dtype, "cpu", 5)
    got = run(linear_cross_entropy, p, dtype, config=cfg)
    apart = run(linear_cross_entropy, p, dtype, config=dataclasses.replace(cfg, grad_input_space=False))
    assert all(torch.equal(a, b) for a, b in zip(got, apart))
    compare(got, reference(p, dtype), dtype)


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grad_output_scaling(dtype):
    """The backward multiplies the forward's gradients by grad_output once, in float32,
    rounded once to their dtype (bit for bit in float32; in bfloat16 within one unit in
    the last place: the interpreter truncates where the GPU rounds to nearest);
    grad_output 1 leaves them as they are."""
    p = make_problem(13, shape=(17,), D=16, V=30, reduction="sum", bias=True, ignored=0.2)
    leaves = [p[k].to(dtype).requires_grad_() for k in ("x", "w", "b")]
    grads = {}
    for go in (1.0, 0.3, 0.0):
        loss = linear_cross_entropy(leaves[0], leaves[1], p["t"], linear_bias=leaves[2], reduction="sum")
        grads[go] = (loss.detach(), *torch.autograd.grad(loss, leaves, torch.tensor(go, dtype=loss.dtype)))
    factor = torch.tensor(0.3, dtype=torch.float32).item()  # grad_output has the loss's dtype, float32
    for g1, g03, g0 in zip(grads[1.0][1:], grads[0.3][1:], grads[0.0][1:]):
        want = g1.float() * factor
        ulp = 0.0 if dtype == torch.float32 else 2.0**-7
        assert ((g03.float() - want).abs() <= ulp * want.abs()).all() and not torch.equal(g03, g1)
        assert (g0 == 0).all()
    want = reference(p, dtype)
    compare(grads[1.0], [want[0], *[g / 1.7 for g in want[1:]]], dtype)


@pytest.mark.interpreter
def test_grad_subsets_and_no_grad():
    """Only the weight, only the input, or nothing requiring grad: the same values."""
    p = make_problem(8, shape=(13,), D=16, V=30, reduction="sum", bias=False, ignored=0.4)
    x, w = p["x"].float(), p["w"].float()
    full = run(linear_cross_entropy, p, torch.float32)
    only_w = torch.autograd.grad(
        linear_cross_entropy(x, w.requires_grad_(), p["t"], reduction="sum"), w, torch.tensor(1.7)
    )[0]
    only_x = torch.autograd.grad(
        linear_cross_entropy(x.requires_grad_(), w.detach(), p["t"], reduction="sum"), x, torch.tensor(1.7)
    )[0]
    with torch.no_grad():
        loss = linear_cross_entropy(x, w, p["t"], reduction="sum")
    assert max(rel_err(only_w, full[2]), rel_err(only_x, full[1]), rel_err(loss, full[0])) <= 1e-6


def check_second_backward(p, dtype, products, device="cpu", cfg=None, tol=TOL):
    """Backward twice through a retained graph (InBackwardOptimizer's clipping): the
    first hands over the gradients made in the forward, the second recomputes them by
    the forward's own computation, so they are equal bit for bit (grad_output 1.7, or
    per token, applied to both; one device, one stream: cuBLAS and the kernels are
    deterministic there), and they are the reference's."""
    leaves = [p[k].to(device=device, dtype=dtype).requires_grad_() for k in ("x", "w", "b")]
    cfg = cfg or with_chunks(dtype, device, products=products)
    loss = linear_cross_entropy(
        leaves[0], leaves[1], p["t"].to(device), linear_bias=leaves[2], reduction=p["reduction"], config=cfg
    )
    go = (p["grad_out"] if p["reduction"] == "none" else torch.tensor(1.7)).to(device=device, dtype=torch.float32)
    first = torch.autograd.grad(loss, leaves, go, retain_graph=True)
    second = torch.autograd.grad(loss, leaves, go)
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    compare([loss.detach(), *first], reference(p, dtype, device), dtype, tol=tol)


@pytest.mark.interpreter
@pytest.mark.parametrize("ignored", [0.0, 0.3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("products,reduction", [(3, "mean"), (3, "sum"), (4, "mean"), (4, "none")])
def test_second_backward_through_retained_graph(products, reduction, dtype, ignored):
    p = make_problem(2, shape=(3, 5), D=16, V=40, reduction=reduction, ignored=ignored)
    check_second_backward(p, dtype, products, cfg=with_chunks(dtype, "cpu", 5, 16, products=products))


@pytest.mark.interpreter
@pytest.mark.parametrize("products,reduction", [(3, "mean"), (4, "none")])
def test_double_backward_raises(products, reduction):
    """Double backward is not supported: a backward with create_graph=True raises, rather
    than returning gradients that would be taken for constants (what once_differentiable
    does when grad_output does not require grad)."""
    p = make_problem(3, shape=(9,), D=16, V=20, reduction=reduction)
    x, w = p["x"].float().requires_grad_(), p["w"].float().requires_grad_()
    loss = linear_cross_entropy(
        x, w, p["t"], reduction=reduction, config=with_chunks(torch.float32, "cpu", products=products)
    )
    with pytest.raises(RuntimeError, match="does not support double backward"):
        torch.autograd.grad(loss, (x, w), torch.ones_like(loss), create_graph=True)


class _TinyLM(torch.nn.Module):
    """Embedding -> linear hidden layer (tanh) -> ojas_ref.linear_cross_entropy(impl="triton")."""

    def __init__(self, V: int, D: int):
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.embed = torch.nn.Embedding(V, D)
        self.hidden = torch.nn.Linear(D, D)
        self.head = torch.nn.Parameter(torch.randn(V, D, generator=gen) / math.sqrt(D))

    def forward(self, tokens, targets):
        h = torch.tanh(self.hidden(self.embed(tokens)))
        return ref_module.linear_cross_entropy(h, self.head, targets, impl="triton")


@pytest.mark.interpreter
@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "autocast_bf16"])
def test_in_backward_optimizer_clipping_matches_standard_loop(autocast):
    """Gradient clipping with the kernel: InBackwardOptimizer(AdamW, max_grad_norm) runs
    backward twice through a retained graph (norms, then clipped updates); 3 steps give
    the standard loop's (loss.backward(); clip_grad_norm_; step) parameters and optimizer
    state bit for bit: the second backward recomputes the kernel's gradients by the same
    computation (test_second_backward_through_retained_graph), and InBackwardOptimizer is
    the standard loop bitwise for equal gradients (tests/optim/test_in_backward.py),
    so no tolerance is needed.  Also with float32 parameters and the forward under
    torch.autocast("cpu", bfloat16), as Hugging Face's mixed precision runs it (the
    head gets a bf16 hidden state and the float32 weight)."""
    from ojas_ref.optim.in_backward import InBackwardOptimizer

    V, D, clip = 30, 16, 0.05
    torch.manual_seed(0)
    standard = _TinyLM(V, D)
    fused = _TinyLM(V, D)
    fused.load_state_dict(standard.state_dict())
    opt_s = torch.optim.AdamW(standard.parameters(), lr=1e-2)
    opt_f = InBackwardOptimizer(fused.parameters(), torch.optim.AdamW, max_grad_norm=clip, lr=1e-2)
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        tokens = torch.randint(V, (2, 9), generator=gen)
        targets = torch.randint(V, (2, 9), generator=gen)
        targets[0, :3] = -100
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = standard(tokens, targets)
            loss_f = fused(tokens, targets)
        assert loss.dtype == torch.float32
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(standard.parameters(), clip)
        assert norm > clip, "the test must exercise clipping"
        opt_s.step()
        opt_s.zero_grad()
        opt_f.backward(loss_f)
        opt_f.step()
        opt_f.zero_grad()
    for (name, a), b in zip(standard.named_parameters(), fused.parameters()):
        assert torch.equal(a, b), name
    state_s, state_f = opt_s.state_dict()["state"], opt_f.state_dict()["state"]
    assert state_s.keys() == state_f.keys()
    assert all(torch.equal(state_s[i][k], state_f[i][k]) for i in state_s for k in state_s[i])


def check_hidden_size_zero(device):
    """D = 0: the logits are the bias, each loss is F.cross_entropy's of them (ln V
    without a bias), grad_input and grad_weight are empty, grad_bias the softmax less the
    one-hot, for both schedules. float32: a softmax over V = 5 entries and a sum of 5
    tokens, a few roundings (1e-6)."""
    x = torch.randn(2, 3, 0, device=device, requires_grad=True)
    w = torch.randn(5, 0, device=device, requires_grad=True)
    b = torch.randn(5, device=device, requires_grad=True)
    t = torch.tensor([[0, 1, -100], [4, 2, 3]], device=device)
    for reduction, products in itertools.product(("none", "mean", "sum"), (3, 4)):
        cfg = with_chunks(torch.float32, device, products=products)
        loss = linear_cross_entropy(x, w, t, linear_bias=b, reduction=reduction, config=cfg)
        want = torch.nn.functional.cross_entropy(
            torch.nn.functional.linear(x, w, b).transpose(1, 2), t, reduction=reduction
        )
        go = torch.ones_like(loss)
        for a, e in zip(
            [loss, *torch.autograd.grad(loss, (x, w, b), go)], [want, *torch.autograd.grad(want, (x, w, b), go)]
        ):
            assert a.shape == e.shape and torch.allclose(a, e, rtol=1e-6, atol=1e-6), (reduction, products, a, e)


@pytest.mark.interpreter
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_autocast_casts_as_f_linear(reduction):
    """ojas_ref.linear_cross_entropy(impl="triton") under torch.autocast: as the
    reference's (linear_cross_entropy_check.autocast_mismatches)."""
    assert autocast_mismatches("triton", reduction) == []


@pytest.mark.interpreter
def test_hidden_size_zero():
    check_hidden_size_zero("cpu")


@pytest.mark.interpreter
@pytest.mark.parametrize("ignored", [0.0, 0.3])
@pytest.mark.parametrize("products", [3, 4])
def test_none_then_sum_or_mean(products, ignored):
    """reduction "none" then loss.sum() or loss.mean(), as a training loop reduces
    per-token losses itself: grad_output is one value expanded (stride 0), which the
    kernels must read as such, not as K contiguous weights."""
    p = make_problem(14, shape=(3, 7), D=16, V=30, reduction="none", ignored=ignored)
    for reduce, weight in ((torch.sum, 1.0), (torch.mean, 1.0 / 21)):
        leaves = [p[k].float().requires_grad_() for k in ("x", "w", "b")]
        loss = linear_cross_entropy(
            leaves[0],
            leaves[1],
            p["t"],
            linear_bias=leaves[2],
            reduction="none",
            config=with_chunks(torch.float32, "cpu", products=products),
        )
        got = [loss.detach(), *torch.autograd.grad(reduce(loss), leaves)]
        compare(got, reference(dict(p, grad_out=torch.full((3, 7), weight, dtype=F64)), torch.float32), torch.float32)


@pytest.mark.interpreter
@pytest.mark.parametrize("products,reduction", [(3, "mean"), (4, "none")])
def test_strided_target(products, reduction):
    """A target that is a column of a wider tensor (stride 2, every token kept): the
    kernels read the column's values, not its neighbours'."""
    p = make_problem(15, shape=(13,), D=16, V=30, reduction=reduction, ignored=0.0)
    want = reference(p, torch.float32)
    p["t"] = torch.stack([p["t"], (p["t"] + 1) % 30], 1)[:, 0]
    assert p["t"].stride() == (2,)
    got = run(linear_cross_entropy, p, torch.float32, config=with_chunks(torch.float32, "cpu", products=products))
    compare(got, want, torch.float32)


@pytest.mark.interpreter
def test_strided_input():
    """A [B, S, D] input viewed through a transpose, and rows with a stride above D."""
    p = make_problem(4, shape=(3, 5), D=16, V=40, reduction="none", ignored=0.2)
    want = reference(p, torch.float32)
    x = p["x"].float().transpose(0, 1).contiguous().transpose(0, 1).requires_grad_()
    w = p["w"].float().requires_grad_()
    loss = linear_cross_entropy(x, w, p["t"], linear_bias=p["b"].float(), reduction="none")
    got = [loss.detach(), *torch.autograd.grad(loss, (x, w), p["grad_out"].float())]
    compare(got, want[:3], torch.float32)
    wide = torch.cat([p["x"].float().reshape(15, 16), torch.randn(15, 8)], 1)[:, :16]
    assert wide.stride(0) == 24
    loss2 = linear_cross_entropy(wide, p["w"].float(), p["t"].reshape(-1), linear_bias=p["b"].float(), reduction="none")
    assert rel_err(loss2, want[0].reshape(-1)) <= TOL[torch.float32]


class _Allocations(TorchDispatchMode):
    """Records the element count of every floating tensor an operator returns (the
    interpreter's byte copies of the kernels' arguments, uint8, and the ``set_`` and
    ``copy_`` views of them are not allocations of the algorithm)."""

    def __init__(self):
        super().__init__()
        self.sizes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket not in (torch.ops.aten.set_, torch.ops.aten.copy_):
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor) and t.is_floating_point():
                    self.sizes.append(t.numel())
        return out


@pytest.mark.interpreter
@pytest.mark.parametrize("products", [3, 4])
def test_workspace_is_one_chunk_or_slab(products):
    """No [N, V] tensor: the forward holds [token_chunk, V] blocks, the backward (4 products) [K, vocab_slab]."""
    N, V = 24, 70
    p = make_problem(6, shape=(N,), D=16, V=V, reduction="mean", ignored=0.0)
    x, w = p["x"].float().requires_grad_(), p["w"].float().requires_grad_()
    with _Allocations() as mode:
        loss = linear_cross_entropy(x, w, p["t"], config=with_chunks(torch.float32, "cpu", 8, 16, products=products))
        loss.backward()
    assert max(mode.sizes) < N * V, max(mode.sizes)


@pytest.mark.interpreter
@pytest.mark.parametrize("products", [3, 4])
def test_saves_only_references_to_its_arguments(products):
    """What autograd saves for a second backward are the forward's input, weight, bias and
    target themselves (no copies: their memory is not added to) and, with 4 products, [K]
    tensors (kept indices, their targets, lse)."""
    N = 24
    p = make_problem(7, shape=(N,), D=16, V=70, reduction="mean", ignored=0.3)
    x, w, b = (p[k].float().requires_grad_() for k in ("x", "w", "b"))
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        linear_cross_entropy(x, w, p["t"], linear_bias=b, config=with_chunks(torch.float32, "cpu", products=products))
    arguments = {t.data_ptr() for t in (x, w, b, p["t"])}
    assert saved and all(t.data_ptr() in arguments or t.numel() <= N for t in saved), [t.shape for t in saved]


@pytest.mark.interpreter
def test_dispatch(monkeypatch):
    """impl="triton" and use_impl reach the kernel; "auto" keeps CPU tensors on the reference."""
    calls = []
    real = klce.linear_cross_entropy

    def spy(*args, **kw):
        calls.append(kw)
        return real(*args, **kw)

    monkeypatch.setattr(klce, "linear_cross_entropy", spy)
    p = make_problem(9, shape=(7,), D=16, V=25, eps=0.1, lam=1e-3, cap=5.0)
    args = (p["x"].float(), p["w"].float(), p["t"])
    kw = dict(linear_bias=p["b"].float(), label_smoothing=0.1, z_loss=1e-3, softcap=5.0)
    a = ref_module.linear_cross_entropy(*args, impl="triton", **kw)
    b = ref_module.linear_cross_entropy(*args, impl="reference", **kw)
    assert len(calls) == 1 and rel_err(a, b) <= 1e-6
    with use_impl(linear_cross_entropy="triton"):
        ref_module.linear_cross_entropy(*args, **kw)
    with use_impl(linear_cross_entropy="auto"):
        ref_module.linear_cross_entropy(*args, **kw)
    assert len(calls) == 2
    with pytest.raises(TypeError, match="float64"):
        ref_module.linear_cross_entropy(p["x"], p["w"], p["t"], impl="triton")


@pytest.fixture
def restore_matmul_precision():
    """Puts torch's float32 matmul setting back (through the legacy setter, which sets the
    new API's value too, so the two stay consistent)."""
    saved = torch.get_float32_matmul_precision()
    yield
    torch.set_float32_matmul_precision(saved)


def _set_cuda_matmul(name, value):
    return lambda: setattr(torch.backends.cuda.matmul, name, value)


@pytest.mark.parametrize(
    "setting, want",
    [
        (lambda: torch.set_float32_matmul_precision("highest"), "ieee"),
        (lambda: torch.set_float32_matmul_precision("high"), "tf32"),
        (lambda: torch.set_float32_matmul_precision("medium"), "tf32"),
        (_set_cuda_matmul("allow_tf32", True), "tf32"),
        (_set_cuda_matmul("fp32_precision", "tf32"), "tf32"),
        (_set_cuda_matmul("fp32_precision", "ieee"), "ieee"),
    ],
    ids=["highest", "high", "medium", "allow_tf32", "fp32_precision_tf32", "fp32_precision_ieee"],
)
def test_float32_dot_precision_follows_torch(setting, want, restore_matmul_precision):
    """The Triton dots of float32 operands (``_dot_precision``, shared with the attention
    kernel) take torch's own float32 matmul setting, as the cuBLAS products beside them
    do: TF32 unless the precision is "highest"."""
    setting()
    assert klce._dot_precision(torch.float32) == want


@pytest.mark.interpreter
def test_kernel_rejects_bad_arguments():
    x, w, t = torch.randn(4, 16), torch.randn(10, 16), torch.randint(0, 10, (4,))
    with pytest.raises(TypeError, match="float16, bfloat16 or float32"):
        linear_cross_entropy(x.double(), w.double(), t)
    with pytest.raises(ValueError, match="reduction"):
        linear_cross_entropy(x, w, t, reduction="avg")
    with pytest.raises(ValueError, match="target"):
        linear_cross_entropy(x, w, t[:3])
    with pytest.raises(ValueError, match="products must be 3 or 4"):
        with_chunks(torch.float32, "cpu", products=2)


# ---------------------------------------------------------------------------
# GPU
# ---------------------------------------------------------------------------

GPU_CASES = [  # N, D, V, dtype, reduction, ignored, bias, eps, lam, cap, products
    (4096, 1024, 32000, torch.bfloat16, "mean", 0.0, False, 0.0, 0.0, None, 3),
    (8192, 4096, 8000, torch.bfloat16, "mean", 0.0, True, 0.1, 1e-4, None, 3),  # chunks inside grad_input
    (4096, 1024, 32000, torch.bfloat16, "mean", 0.5, False, 0.0, 0.0, None, 3),
    (4096, 1024, 32000, torch.bfloat16, "mean", 0.5, False, 0.0, 0.0, None, 4),
    (3000, 1000, 50257, torch.bfloat16, "sum", 0.3, True, 0.1, 1e-4, 30.0, 3),
    (3000, 1000, 50257, torch.bfloat16, "sum", 0.3, True, 0.1, 1e-4, 30.0, 4),
    (2048, 2048, 32003, torch.float16, "mean", 0.2, False, 0.1, 0.0, None, 3),
    (2048, 512, 32000, torch.float16, "none", 0.0, True, 0.0, 1e-4, 15.0, 4),
    (1024, 512, 10000, torch.float32, "mean", 0.3, True, 0.1, 1e-4, 30.0, 3),
]


@pytest.mark.parametrize("N,D,V,dtype,reduction,ignored,bias,eps,lam,cap,products", GPU_CASES)
@pytest.mark.gpu
def test_kernel_vs_reference_gpu(N, D, V, dtype, reduction, ignored, bias, eps, lam, cap, products):
    p = make_problem(
        N + V, shape=(N,), D=D, V=V, reduction=reduction, ignored=ignored, bias=bias, eps=eps, lam=lam, cap=cap
    )
    got = run(linear_cross_entropy, p, dtype, "cuda", config=with_chunks(dtype, "cuda", products=products))
    errs = compare(got, reference(p, dtype, "cuda"), dtype, tol=GPU_TOL)
    print(
        f"\nrel errors {dtype} N={N} D={D} V={V} {reduction} ignored={ignored} products={products}: "
        + ", ".join(f"{n} {e:.2e}" for n, e in errs.items())
    )


@pytest.mark.gpu
@pytest.mark.parametrize("peak_fraction", [None, 0.05])
@pytest.mark.parametrize("N,D,V", [(8192, 2048, 65536), (16384, 4096, 32000)])
def test_peak_memory_gpu(N, D, V, peak_fraction):
    """Peak memory above the inputs over forward + backward within 1.15 x the gradients'
    bytes (issue 5's bound) and within the 3-product schedule's own bound, the gradients plus
    ``peak_fraction`` of them (16 MiB at least: ``_three_products_plan``), with the default
    config and with ``peak_fraction=0.05`` (issue 30's bound), at ignore fractions 0 and 0.5,
    after a first call (as the benchmark measures: cuBLAS's workspace is made once)."""
    grads = (N * D + V * D) * 2
    config = default_config(torch.bfloat16, torch.device("cuda"))
    if peak_fraction is not None:
        config = dataclasses.replace(config, peak_fraction=peak_fraction)
    bound = grads + max(config.peak_fraction * grads, klce_three._WORKSPACE_FLOOR)
    for ignored in (0.0, 0.5):
        x = torch.randn(N, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        w = (torch.randn(V, D, device="cuda", dtype=torch.bfloat16) / math.sqrt(D)).requires_grad_()
        t = torch.randint(0, V, (N,), device="cuda")
        t[torch.rand(N, device="cuda") < ignored] = -100
        linear_cross_entropy(x, w, t, config=config).backward()  # cuBLAS's workspace made before the count
        x.grad = w.grad = None
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        linear_cross_entropy(x, w, t, config=config).backward()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        print(
            f"\nN={N} D={D} V={V} ignored {ignored} peak_fraction {config.peak_fraction}: "
            f"peak {peak / 2**20:.0f} MiB = {peak / grads:.3f} x gradients"
        )
        assert peak <= 1.15 * grads and peak <= bound
        del x, w, t


@pytest.mark.gpu
def test_dispatch_gpu(monkeypatch):
    """ojas_ref.linear_cross_entropy sends CUDA tensors to the kernel ("auto")."""
    calls = []
    real = klce.linear_cross_entropy
    monkeypatch.setattr(klce, "linear_cross_entropy", lambda *a, **k: calls.append(1) or real(*a, **k))
    p = make_problem(1, shape=(512,), D=256, V=5000)
    with use_impl(linear_cross_entropy="auto"):
        got = run(ref_module.linear_cross_entropy, p, torch.bfloat16, "cuda")
    assert calls == [1]
    compare(got, reference(p, torch.bfloat16, "cuda"), torch.bfloat16, tol=GPU_TOL)


@pytest.mark.gpu
def test_float16_auto_runs_the_reference_gpu(monkeypatch):
    """float16 CUDA tensors go to the reference under "auto": a GradScaler-sized grad_output
    (2^16) keeps the small gradients the kernel's float16 forward-time gradients lose."""
    calls = []
    real = klce.linear_cross_entropy
    monkeypatch.setattr(klce, "linear_cross_entropy", lambda *a, **k: calls.append(1) or real(*a, **k))
    x = torch.randn(4096, 64, device="cuda", dtype=torch.float16, requires_grad=True)
    w = torch.randn(8192, 64, device="cuda", dtype=torch.float16, requires_grad=True)
    t = torch.randint(0, 8192, (4096,), device="cuda")
    with use_impl(linear_cross_entropy="auto"):
        loss = ref_module.linear_cross_entropy(x, w, t)
    (gw,) = torch.autograd.grad(loss * 2.0**16, w)
    assert calls == []
    exact = torch.autograd.grad(torch.nn.functional.cross_entropy((x.float() @ w.float().T), t) * 2.0**16, w)[0]
    assert rel_err(gw.float(), exact) <= 5e-3  # float16 rounding of the scaled gradient


@pytest.mark.gpu
def test_hidden_size_zero_gpu():
    """D = 0 on the device: the kernels get empty x and W (null pointers) and no K loop."""
    check_hidden_size_zero("cuda")


@pytest.mark.gpu
def test_float32_precision_follows_torch_gpu(restore_matmul_precision):
    """float32 products in TF32 under torch.set_float32_matmul_precision("high"), IEEE
    under "highest": 4 products (Triton dots for the logits; reduction "none", the
    per-token losses) and 3 (cuBLAS; reduction "mean", grad_input), against the float64
    reference.  IEEE: errors at the float32 level (GPU_TOL, 1e-4); TF32 rounds each
    operand to 10 bits (2^-11 relative), some 100 x the float32 sums' error at D = 512,
    so at least 10 x the "highest" error."""
    errs = {}
    for reduction, products, which in (("none", 4, 0), ("mean", 3, 1)):  # 0: loss, 1: grad_input
        p = make_problem(5, shape=(1024,), D=512, V=10000, reduction=reduction, ignored=0.2)
        want = reference(p, torch.float32, "cuda")[which]
        for precision in ("highest", "high"):
            torch.set_float32_matmul_precision(precision)
            got = run(
                linear_cross_entropy,
                p,
                torch.float32,
                "cuda",
                config=with_chunks(torch.float32, "cuda", products=products),
            )[which]
            errs[products, precision] = rel_err(got, want)
    print(f"\nfloat32 relative errors (products, precision): {errs}")
    for products in (3, 4):
        assert errs[products, "highest"] <= GPU_TOL[torch.float32], errs
        assert errs[products, "high"] >= 10 * errs[products, "highest"], errs


@pytest.mark.gpu
@pytest.mark.parametrize("products,reduction,ignored", [(3, "mean", 0.0), (3, "mean", 0.3), (4, "none", 0.3)])
def test_second_backward_through_retained_graph_gpu(products, reduction, ignored):
    p = make_problem(17, shape=(4096,), D=1024, V=32000, reduction=reduction, ignored=ignored)
    check_second_backward(p, torch.bfloat16, products, "cuda", tol=GPU_TOL)


class _ProductRows:
    """Marks the tokens whose row of the input enters one of the kernel's matrix products (the
    cuBLAS ones, ``_mm_into`` / ``_mm_f32`` / ``_addmm_into``, and the Triton logits,
    ``_launch_logits``): every operand read by a product is matched row by row against ``x``
    (random rows, so a match is that token's row, gathered or not).  Each is wrapped in the
    schedule modules that call it."""

    def __init__(self, monkeypatch, x: torch.Tensor):
        self.x = x.detach().reshape(-1, x.shape[-1])
        self.seen = torch.zeros(self.x.shape[0], dtype=torch.bool)
        for module, name, operands in (
            (klce_three, "_mm_into", (1, 2)),
            (klce_three, "_addmm_into", (1, 2)),
            (klce_four, "_mm_into", (1, 2)),
            (klce_four, "_mm_f32", (0, 1)),
            (klce_four, "_launch_logits", (0,)),
        ):
            monkeypatch.setattr(module, name, self._marking(getattr(module, name), operands))

    def _marking(self, fn, operands):
        def wrapped(*args, **kw):
            for i in operands:
                t = args[i]
                if t.dim() == 2 and t.shape[1] == self.x.shape[1] and t.dtype == self.x.dtype and t.numel():
                    self.seen |= (t[:, None, :] == self.x[None]).all(-1).any(0).cpu()
            return fn(*args, **kw)

        return wrapped


def _with_ignored(p: dict, pattern: str) -> dict:
    """``p`` (made with no token ignored) with the targets of ``pattern`` set to ignore_index:
    "half" every other token, "ends" the first 3 and the last 4, "all", "none"."""
    t = p["t"].clone()
    flat = t.view(-1)
    assert (flat != p["ignore_index"]).all()
    if pattern == "half":
        flat[::2] = p["ignore_index"]
    elif pattern == "ends":
        flat[:3] = flat[-4:] = p["ignore_index"]
    elif pattern == "all":
        flat[:] = p["ignore_index"]
    return dict(p, t=t)


def _kept_only(p: dict) -> dict:
    """The problem on the kept tokens alone (a flat batch of them)."""
    kept = p["t"] != p["ignore_index"]
    return dict(p, x=p["x"][kept], t=p["t"][kept], grad_out=p["grad_out"][kept])


IGNORE_PATTERNS = ["half", "ends", "none", "all"]
SCHEDULES = {  # products, reduction, options of make_problem
    "3-mean": (3, "mean", {}),
    "3-sum-options": (3, "sum", dict(bias=True, eps=0.1, lam=1e-2, cap=3.0)),
    "4-mean": (4, "mean", {}),
    "4-sum-options": (4, "sum", dict(bias=True, eps=0.1, lam=1e-2, cap=3.0)),
    "4-none-options": (4, "none", dict(bias=True, eps=0.1, lam=1e-2, cap=3.0)),
}


@pytest.mark.interpreter
@pytest.mark.parametrize("schedule", list(SCHEDULES))
@pytest.mark.parametrize("pattern", IGNORE_PATTERNS)
def test_ignored_tokens_enter_no_product(pattern, schedule, monkeypatch):
    """Ignored tokens are removed before any matrix product in every schedule
    (Ojas.LinearCrossEntropy.Reduction.ce_drop_ignored): the products read the rows of the kept tokens
    and of no other (with half ignored, half the tokens; the 3-product schedule used to read
    them all, with zero rows of G).  The results are the kernel's on the kept tokens alone (the
    same chunks: bit for bit in the gradients) and the float64 reference's; the ignored rows of
    grad_input are exactly 0 (Ojas.LinearCrossEntropy.Reduction.ignored_grad_zero), and so are their
    losses with reduction "none"."""
    products, reduction, options = SCHEDULES[schedule]
    p = _with_ignored(
        make_problem(31, shape=(3, 8), D=16, V=37, reduction=reduction, ignored=0.0, **{"bias": False, **options}),
        pattern,
    )
    kept = (p["t"] != p["ignore_index"]).reshape(-1)
    cfg = with_chunks(torch.float32, "cpu", 5, 16, products=products)
    rows = _ProductRows(monkeypatch, p["x"].float())
    got = run(linear_cross_entropy, p, torch.float32, config=cfg)
    assert torch.equal(rows.seen, kept), (rows.seen, kept)
    grad_input = got[1].reshape(-1, 16)
    assert (grad_input[~kept] == 0).all()
    if reduction == "none":
        assert (got[0].reshape(-1)[~kept] == 0).all()
    compare(got, reference(p, torch.float32), torch.float32)
    if kept.any():
        alone = run(linear_cross_entropy, _kept_only(p), torch.float32, config=cfg)
        assert torch.equal(grad_input[kept], alone[1]) and all(torch.equal(a, b) for a, b in zip(got[2:], alone[2:]))
        loss = got[0].reshape(-1)[kept] if reduction == "none" else got[0]
        assert rel_err(loss, alone[0]) <= TOL[torch.float32]


@pytest.mark.interpreter
@pytest.mark.parametrize("pattern", ["half", "ends"])
def test_ignored_tokens_enter_no_product_head_update(pattern, monkeypatch):
    """The head updated inside the backward (InBackwardOptimizer(head_weight=...), 4 products,
    the kernel through ojas_ref.linear_cross_entropy(impl="triton")): the products read the kept
    tokens' rows only, the ignored rows of grad_input are 0, and the stepped head and grad_input
    are those of the same run on the kept tokens alone."""
    from ojas_ref.optim.in_backward import InBackwardOptimizer

    p = _with_ignored(make_problem(32, shape=(3, 8), D=16, V=37, ignored=0.0, bias=False), pattern)
    kept = (p["t"] != p["ignore_index"]).reshape(-1)

    def step(x, t):
        w = torch.nn.Parameter(p["w"].float())
        x = x.float().requires_grad_()
        opt = InBackwardOptimizer([w], torch.optim.SGD, lr=0.5, head_weight=w)
        loss = ref_module.linear_cross_entropy(x, w, t, impl="triton", head_update=opt)
        opt.backward(loss)
        opt.step()
        assert w.grad is None
        return loss.detach(), x.grad.reshape(-1, 16), w.detach()

    rows = _ProductRows(monkeypatch, p["x"].float())
    loss, grad_input, head = step(p["x"], p["t"])
    assert torch.equal(rows.seen, kept), (rows.seen, kept)
    assert (grad_input[~kept] == 0).all() and not torch.equal(head, p["w"].float())
    alone = step(p["x"][p["t"] != p["ignore_index"]], p["t"][p["t"] != p["ignore_index"]])
    for a, b in zip((loss, grad_input[kept], head), alone):
        assert rel_err(a, b) <= TOL[torch.float32]


@pytest.mark.parametrize("V", [128256, 32000])
def test_three_products_plan_with_ignored_tokens(V):
    """With half the tokens ignored (N = 16384, D = 4096, bfloat16) the 3-product schedule's
    chunks cover the 8192 kept tokens only, each chunk's logits and gathered rows within the
    budget (``peak_fraction`` of the gradients' bytes), none inside grad_input (whose
    ignored rows must stay 0); with every token kept the plan is the one over all of them."""
    N, D, K = 16384, 4096, 8192
    cfg = default_config(torch.bfloat16, torch.device("cuda"))
    budget = cfg.peak_fraction * (N * D + V * D) * 2
    plan = klce._three_products_plan(N, D, V, 2, (True, True, False), cfg, K)
    assert sum(n for _, n, _ in plan) == K and not any(inside for *_, inside in plan)
    assert max(n for _, n, _ in plan) * (V + D) * 2 <= budget
    assert klce._three_products_plan(N, D, V, 2, (True, True, False), cfg, N) == klce._three_products_plan(
        N, D, V, 2, (True, True, False), cfg
    )


@pytest.mark.interpreter
def test_three_products_gathers_one_chunk_at_a_time():
    """With half the tokens ignored, the 3-product schedule holds one chunk's gathered rows at a
    time (its workspace, ``_three_products_plan``), never a [K, D] copy of the kept rows: every
    floating tensor made is a gradient, a [N] / [K] / [V] vector, the loss (or an empty one), or a chunk's [n, V]
    logits or [n, D] rows (n the plan's chunk sizes)."""
    N, D, V, chunk = 24, 16, 37, 5
    p = _with_ignored(make_problem(33, shape=(N,), D=D, V=V, ignored=0.0, bias=True), "half")
    K = N // 2
    leaves = [p[k].float().requires_grad_() for k in ("x", "w", "b")]
    with _Allocations() as mode:
        loss = linear_cross_entropy(
            leaves[0], leaves[1], p["t"], linear_bias=leaves[2], config=with_chunks(torch.float32, "cpu", chunk)
        )
        loss.backward()
    sizes = {min(chunk, K - r0) * width for r0 in range(0, K, chunk) for width in (V, D)}
    allowed = sizes | {N * D, V * D, V, N, K, 1, 0}
    assert K * D not in allowed and set(mode.sizes) <= allowed, set(mode.sizes) - allowed
