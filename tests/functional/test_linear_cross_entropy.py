"""ojas_ref.linear_cross_entropy against materialised torch computations.

The reference streams over token and vocabulary chunks (rocq/LinearCrossEntropy/Definitions.v);
here it is compared with ``F.cross_entropy`` / ``F.linear_cross_entropy`` on the full
[N, V] logits, with autograd on that materialised computation for the gradients.
"""

from __future__ import annotations

import importlib
import math
import re
from typing import Optional

import pytest
import torch
import torch.nn.functional as F
from hypothesis import example, given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ojas_ref.functional.linear_cross_entropy import linear_cross_entropy, linear_cross_entropy_forward
from ojas_ref.verification.linear_cross_entropy_check import (
    autocast_mismatches,
    oracle_and_reference,
    oracle_mismatches,
)

# the reference's chunk loop (the mutation tests patch its pieces where they are defined)
reference_module = importlib.import_module("ojas_ref.functional._linear_cross_entropy_reference")

F64 = torch.float64
REDUCTIONS = ("none", "mean", "sum")


# --------------------------------------------------------------------------
# Materialised computation and comparison helper
# --------------------------------------------------------------------------


def materialised(x, w, t, *, b=None, reduction="mean", ignore_index=-100, eps=0.0, lam=0.0, cap=None):
    """F.cross_entropy of the full logits, plus the z-loss; mean over no kept token is 0."""
    z = F.linear(x.reshape(-1, x.shape[-1]), w, b)
    if cap is not None:
        z = cap * torch.tanh(z / cap)
    tf = t.reshape(-1).long()
    kept = tf != ignore_index
    if reduction == "mean" and not kept.any():
        return z.sum() * 0.0
    loss = F.cross_entropy(z, tf, reduction=reduction, ignore_index=ignore_index, label_smoothing=eps)
    if lam:
        zl = torch.where(kept, lam * torch.logsumexp(z, dim=-1) ** 2, 0.0)
        loss = loss + {"none": zl, "sum": zl.sum(), "mean": zl.sum() / kept.sum()}[reduction]
    return loss.view(t.shape) if reduction == "none" else loss


def mismatch(actual: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float) -> Optional[str]:
    """None if actual matches expected (shape, dtype-independent values), else a message."""
    if actual.shape != expected.shape:
        return f"shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    a, e = actual.detach().to(F64), expected.detach().to(F64)
    bad = ~torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)
    if bad.any():
        i = bad.nonzero()[0].tolist()
        return f"{int(bad.sum())} of {a.numel()} entries differ, e.g. at {i}: {a[tuple(i)]} vs {e[tuple(i)]}"
    return None


def assert_close(actual, expected, rtol, atol, what=""):
    msg = mismatch(actual, expected, rtol, atol)
    assert msg is None, f"{what}: {msg}"


def run_both(p, dtype):
    """(reference, materialised) losses and gradients of problem p, inputs cast to dtype;
    the materialised side runs in float64 on the same (rounded) inputs."""
    kw = dict(
        reduction=p["reduction"],
        ignore_index=p["ignore_index"],
        label_smoothing=p["eps"],
        z_loss=p["lam"],
        softcap=p["cap"],
    )
    leaves = [p["x"].to(dtype), p["w"].to(dtype)] + ([p["b"].to(dtype)] if p["b"] is not None else [])
    ref_in = [t.clone().requires_grad_() for t in leaves]
    mat_in = [t.to(F64).requires_grad_() for t in leaves]
    out = linear_cross_entropy(
        ref_in[0], ref_in[1], p["t"], linear_bias=ref_in[2] if len(ref_in) > 2 else None, chunk_size=p["chunks"], **kw
    )
    exp = materialised(
        mat_in[0],
        mat_in[1],
        p["t"],
        b=mat_in[2] if len(mat_in) > 2 else None,
        reduction=p["reduction"],
        ignore_index=p["ignore_index"],
        eps=p["eps"],
        lam=p["lam"],
        cap=p["cap"],
    )
    go = p["grad_out"] if p["reduction"] == "none" else torch.tensor(1.7, dtype=F64)
    g_ref = torch.autograd.grad(out, ref_in, go.to(out.dtype))
    g_mat = torch.autograd.grad(exp, mat_in, go)
    res = {"loss": (out, exp)}
    for name, a, e in zip(("grad_input", "grad_weight", "grad_bias"), g_ref, g_mat):
        res[name] = (a, e)
    return res


# --------------------------------------------------------------------------
# Problems
# --------------------------------------------------------------------------


@st.composite
def problems(draw, options=True):
    three_d = draw(st.booleans())
    shape = (draw(st.integers(1, 3)), draw(st.integers(1, 4))) if three_d else (draw(st.integers(1, 9)),)
    D, V = draw(st.integers(1, 6)), draw(st.integers(1, 13))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31)))
    scale = draw(st.sampled_from([0.5, 2.0, 6.0]))
    x = torch.randn(*shape, D, generator=gen, dtype=F64)
    w = torch.randn(V, D, generator=gen, dtype=F64) * scale / math.sqrt(D)
    b = torch.randn(V, generator=gen, dtype=F64) if draw(st.booleans()) else None
    ignore_index = draw(st.sampled_from([-100, -1, 0, V - 1]))
    t = torch.randint(0, V, shape, generator=gen)
    t = torch.where(
        torch.rand(shape, generator=gen) < draw(st.sampled_from([0.0, 0.3, 1.0])), torch.full_like(t, ignore_index), t
    )
    chunks = draw(st.sampled_from([None, 1, 2, 5, (1, 3), (4, 1), (3, 7), (2, 100)]))
    return {
        "x": x,
        "w": w,
        "b": b,
        "t": t.to(draw(st.sampled_from([torch.int64, torch.int32]))),
        "ignore_index": ignore_index,
        "chunks": chunks,
        "reduction": draw(st.sampled_from(REDUCTIONS)),
        "eps": draw(st.sampled_from([0.0, 0.1, 1.0])) if options else 0.0,
        "lam": draw(st.sampled_from([0.0, 1e-2, 0.5])) if options else 0.0,
        "cap": draw(st.sampled_from([None, 1.0, 5.0])) if options else None,
        "grad_out": torch.randn(shape, generator=gen, dtype=F64),
    }


# --------------------------------------------------------------------------
# Against the materialised computation
# --------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(problems())
def test_float64_matches_materialised(p):
    for name, (a, e) in run_both(p, F64).items():
        assert a.dtype == F64
        assert_close(a, e, 1e-10, 1e-10, name)


@settings(max_examples=40, deadline=None)
@given(problems())
def test_float32_matches_materialised(p):
    for name, (a, e) in run_both(p, torch.float32).items():
        assert a.dtype == torch.float32
        assert_close(a, e, 1e-4, 1e-5, name)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision(dtype):
    """bf16/fp16 operands, float32 blocks: close to float64 on the same rounded inputs;
    the loss is float32, the gradients in the input dtype."""
    gen = torch.Generator().manual_seed(1)
    N, D, V = 12, 16, 37
    t = torch.randint(0, V, (N,), generator=gen)
    t[3] = -100
    for reduction in REDUCTIONS:
        p = {
            "x": torch.randn(N, D, generator=gen, dtype=F64),
            "w": torch.randn(V, D, generator=gen, dtype=F64) / 4,
            "b": torch.randn(V, generator=gen, dtype=F64),
            "t": t,
            "ignore_index": -100,
            "chunks": (5, 8),
            "reduction": reduction,
            "eps": 0.1,
            "lam": 1e-3,
            "cap": 3.0,
            "grad_out": torch.randn(N, generator=gen, dtype=F64),
        }
        for name, (a, e) in run_both(p, dtype).items():
            # the loss in float32 (as Hugging Face's and Liger's), gradients in the input dtype
            assert a.dtype == (torch.float32 if name == "loss" else dtype), name
            # output rounding of one half-precision value (2^-8 for bf16) and of the
            # float32 accumulation, relative to the size of the tensor
            assert_close(a, e, 1e-2, 1e-2 * float(e.detach().abs().max()) + 1e-6, f"{dtype} {reduction} {name}")


@settings(max_examples=30, deadline=None)
@given(problems(options=False))
@example(
    {
        "x": torch.ones(1, 3, dtype=F64),
        "w": torch.eye(5, 3, dtype=F64),
        "b": None,
        "t": torch.tensor([4]),
        "ignore_index": -100,
        "chunks": (1, 2),
        "reduction": "mean",
        "eps": 0.0,
        "lam": 0.0,
        "cap": None,
        "grad_out": torch.ones(1, dtype=F64),
    }
)
def test_matches_torch_linear_cross_entropy(p):
    """Without z-loss and soft cap the loss is F.linear_cross_entropy's (input flattened to
    [N, D]; torch's "mean" over only ignored tokens is NaN, ours 0)."""
    x = p["x"].reshape(-1, p["x"].shape[-1]).requires_grad_()
    w = p["w"].clone().requires_grad_()
    t = p["t"].reshape(-1).long()
    kw = dict(linear_bias=p["b"], reduction=p["reduction"], ignore_index=p["ignore_index"], label_smoothing=p["eps"])
    ours = linear_cross_entropy(x, w, t, chunk_size=p["chunks"], **kw)
    theirs = F.linear_cross_entropy(x, w, t, **kw)
    if p["reduction"] == "mean" and (t == p["ignore_index"]).all():
        assert torch.isnan(theirs) and ours.item() == 0.0
        return
    assert_close(ours, theirs, 1e-10, 1e-10, "loss")
    go = p["grad_out"].reshape(-1) if p["reduction"] == "none" else torch.tensor(1.0, dtype=F64)
    for name, a, e in zip(
        ("grad_input", "grad_weight"), torch.autograd.grad(ours, (x, w), go), torch.autograd.grad(theirs, (x, w), go)
    ):
        assert_close(a, e, 1e-10, 1e-10, name)


def test_gradcheck():
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(2, 3, 4, generator=gen, dtype=F64, requires_grad=True)
    w = torch.randn(7, 4, generator=gen, dtype=F64, requires_grad=True)
    b = torch.randn(7, generator=gen, dtype=F64, requires_grad=True)
    t = torch.tensor([[1, -100, 6], [0, 3, 3]])
    for reduction in REDUCTIONS:
        assert torch.autograd.gradcheck(
            lambda x, w, b: linear_cross_entropy(
                x,
                w,
                t,
                linear_bias=b,
                reduction=reduction,
                label_smoothing=0.2,
                z_loss=0.1,
                softcap=2.0,
                chunk_size=(2, 3),
            ),
            (x, w, b),
        )


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_double_backward_raises(reduction):
    """Double backward is not supported: a backward with create_graph=True raises, rather
    than returning gradients that would be taken for constants."""
    x = torch.randn(4, 3, dtype=F64, requires_grad=True)
    w = torch.randn(5, 3, dtype=F64, requires_grad=True)
    loss = linear_cross_entropy(x, w, torch.tensor([0, 1, 4, -100]), reduction=reduction)
    with pytest.raises(RuntimeError, match="does not support double backward"):
        torch.autograd.grad(loss, (x, w), torch.ones_like(loss), create_graph=True)


# --------------------------------------------------------------------------
# Edge cases
# --------------------------------------------------------------------------


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_all_ignored(reduction):
    """Every token ignored: the spec's guarded mean is 0, so "mean" is 0 (F.cross_entropy: NaN),
    "sum" 0, "none" zeros; all gradients zero."""
    x = torch.randn(2, 3, 4, dtype=F64, requires_grad=True)
    w = torch.randn(5, 4, dtype=F64, requires_grad=True)
    b = torch.randn(5, dtype=F64, requires_grad=True)
    t = torch.full((2, 3), -100)
    loss = linear_cross_entropy(x, w, t, linear_bias=b, reduction=reduction, label_smoothing=0.3, z_loss=0.1)
    assert loss.shape == ((2, 3) if reduction == "none" else ())
    assert (loss == 0).all()
    grads = torch.autograd.grad(loss, (x, w, b), torch.ones_like(loss))
    assert all((g == 0).all() for g in grads)
    if reduction == "mean":
        assert torch.isnan(F.cross_entropy((x @ w.T + b).reshape(6, 5), t.reshape(-1)))


def test_empty_batch():
    """N = 0 tokens: like all ignored (mean 0, empty "none", zero gradients)."""
    x = torch.randn(2, 0, 3, dtype=F64, requires_grad=True)
    w = torch.randn(4, 3, dtype=F64, requires_grad=True)
    t = torch.zeros(2, 0, dtype=torch.long)
    for reduction in REDUCTIONS:
        loss = linear_cross_entropy(x, w, t, reduction=reduction)
        assert loss.shape == ((2, 0) if reduction == "none" else ()) and (loss == 0).all()
        gx, gw = torch.autograd.grad(loss, (x, w), torch.ones_like(loss))
        assert gx.shape == x.shape and (gw == 0).all()


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("bias", [False, True])
def test_hidden_size_zero(reduction, bias):
    """Issue 13 item 5: D = 0 (input [B, S, 0], linear_weight [V, 0]) is torch's
    F.cross_entropy(F.linear(x, w, b), t): the logits are the bias (zeros without one,
    so each loss is ln V), grad_input and grad_weight are empty. float64, the same
    operations on the same numbers up to the order of V-term sums: 1e-12."""
    x = torch.randn(2, 3, 0, dtype=F64, requires_grad=True)
    w = torch.randn(5, 0, dtype=F64, requires_grad=True)
    b = torch.randn(5, dtype=F64, requires_grad=True) if bias else None
    t = torch.tensor([[0, 1, -100], [4, 2, 3]])
    leaves = (x, w) + ((b,) if bias else ())
    ours = linear_cross_entropy(x, w, t, linear_bias=b, reduction=reduction)
    theirs = F.cross_entropy(F.linear(x, w, b).transpose(1, 2), t, reduction=reduction)
    if reduction == "none" and not bias:
        assert_close(ours[t != -100], torch.full((5,), math.log(5.0), dtype=F64), 1e-12, 0.0, "ln V")
    assert_close(ours, theirs, 1e-12, 1e-12, "loss")
    go = torch.ones_like(ours)
    for a, e in zip(torch.autograd.grad(ours, leaves, go), torch.autograd.grad(theirs, leaves, go)):
        assert_close(a, e, 1e-12, 1e-12, "gradient")


def test_chunking_does_not_change_the_result():
    """Ojas.LinearCrossEntropy.ChunkedLse.chunked_lse_chunk: any chunk sizes give the same lse
    and loss (here up to float64 rounding)."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(11, 6, generator=gen, dtype=F64)
    w = torch.randn(23, 6, generator=gen, dtype=F64)
    t = torch.randint(0, 23, (11,), generator=gen)
    loss0, lse0 = linear_cross_entropy_forward(x, w, t, label_smoothing=0.1, z_loss=0.01, chunk_size=(11, 23))
    assert_close(lse0, torch.logsumexp(x @ w.T, dim=-1), 1e-12, 1e-12, "lse")
    for chunks in [1, (1, 23), (11, 1), (3, 5), (4, 22), (100, 100)]:
        loss, lse = linear_cross_entropy_forward(x, w, t, label_smoothing=0.1, z_loss=0.01, chunk_size=chunks)
        assert_close(loss, loss0, 1e-12, 1e-12, f"loss {chunks}")
        assert_close(lse, lse0, 1e-12, 1e-12, f"lse {chunks}")


def test_forward_lse_of_ignored_tokens_is_nan():
    x, w = torch.randn(4, 3, dtype=F64), torch.randn(6, 3, dtype=F64)
    t = torch.tensor([1, -100, 5, -100])
    loss, lse = linear_cross_entropy_forward(x, w, t, chunk_size=2)
    assert torch.isnan(lse[[1, 3]]).all() and (loss[[1, 3]] == 0).all()
    assert_close(lse[[0, 2]], torch.logsumexp(x @ w.T, dim=-1)[[0, 2]], 1e-12, 1e-12, "lse")


def test_large_logits_do_not_overflow():
    """Logits around 1e4 (exp overflows in float32 and float64): the running max keeps
    every exp <= 1."""
    x = torch.tensor([[1.0], [-1.0]], dtype=torch.float32) * 1e4
    w = torch.tensor([[1.0], [0.5], [-1.0]], dtype=torch.float32)
    t = torch.tensor([0, 2])
    loss = linear_cross_entropy(x, w, t, reduction="none", chunk_size=1)
    assert torch.isfinite(loss).all()
    assert_close(loss, F.cross_entropy(x @ w.T, t, reduction="none"), 1e-6, 1e-6, "loss")


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_autocast_casts_as_f_linear(reduction):
    """Under torch.autocast("cpu", bfloat16) a bf16 input with a float32 weight and bias
    is cast as F.linear casts them: float32 loss, gradients in each tensor's dtype, the
    explicit cast's bit for bit, close to Hugging Face's F.cross_entropy(F.linear(...).float())
    (linear_cross_entropy_check.autocast_mismatches, which justifies the tolerance)."""
    assert autocast_mismatches("reference", reduction) == []


def huge_logits_problem():
    """Logits +-1e20, finite in float32, whose lse^2 (1e40) is not: float32 x, w, targets."""
    x = torch.tensor([[1e10], [-1e10]])
    w = torch.tensor([[1e10], [-1e10], [0.0]])
    return x, w, torch.tensor([1, 2])


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_huge_logits_without_z_loss_are_finite(reduction):
    """Issue 13 item 3: with z_loss = 0 the z-loss term is not computed as 0 * lse^2
    (inf times 0, NaN): losses of 1e20 scale, and gradients, as torch's. Every value
    here is a sum of one or two float32 products of powers of ten and an exp that is
    exactly 0 or 1, so torch's and ours agree to a float32 rounding (rtol 1e-6)."""
    x, w, t = huge_logits_problem()
    x.requires_grad_()
    w.requires_grad_()
    ours = linear_cross_entropy(x, w, t, reduction=reduction, chunk_size=(1, 2))
    theirs = F.cross_entropy(F.linear(x, w), t, reduction=reduction)
    assert torch.isfinite(ours).all() and theirs.abs().max() >= 1e20
    assert_close(ours, theirs, 1e-6, 0.0, "loss")
    go = torch.ones_like(ours)
    for name, a, e in zip(
        ("grad_input", "grad_weight"), torch.autograd.grad(ours, (x, w), go), torch.autograd.grad(theirs, (x, w), go)
    ):
        assert_close(a, e, 1e-6, 0.0, name)


# --------------------------------------------------------------------------
# Errors name the argument
# --------------------------------------------------------------------------


def _args():
    return dict(input=torch.randn(4, 3), linear_weight=torch.randn(5, 3), target=torch.tensor([0, 1, 4, -100]))


@pytest.mark.parametrize(
    "change, exc, words",
    [
        (dict(input=torch.randn(3)), ValueError, "target"),  # one token: target must be 0-dim
        (dict(input=torch.randn(1, 2, 4, 3)), ValueError, "input"),
        (dict(input=torch.randn(4, 3).long()), TypeError, "input"),
        (dict(input=[[0.0] * 3] * 4), TypeError, "input"),
        (dict(linear_weight=torch.randn(5, 2)), ValueError, "linear_weight"),
        (dict(linear_weight=torch.randn(15)), ValueError, "linear_weight"),
        (dict(linear_weight=torch.randn(0, 3)), ValueError, "linear_weight"),
        (dict(linear_weight=torch.randn(5, 3, dtype=F64)), TypeError, "linear_weight"),
        (dict(linear_bias=torch.randn(4)), ValueError, "linear_bias"),
        (dict(linear_bias=torch.randn(5, 1)), ValueError, "linear_bias"),
        (dict(linear_bias=torch.randn(5, dtype=F64)), TypeError, "linear_bias"),
        (dict(input=torch.randn(4, 3, dtype=torch.bfloat16)), TypeError, "linear_weight"),  # no autocast, no cast
        (
            dict(
                input=torch.randn(4, 3, dtype=torch.bfloat16),
                linear_weight=torch.randn(5, 3, dtype=torch.bfloat16),
                linear_bias=torch.randn(5),
            ),
            TypeError,
            "linear_bias",
        ),
        (dict(target=torch.tensor([0, 1, 2])), ValueError, "target"),
        (dict(target=torch.tensor([[0, 1, 2, 3]])), ValueError, "target"),
        (dict(target=torch.tensor([0.0, 1.0, 2.0, 3.0])), TypeError, "target"),
        (dict(target=torch.tensor([0, 1, 2, 3], dtype=torch.int16)), TypeError, "target"),
        (dict(target=torch.tensor([0, 1, 5, 3])), ValueError, "target"),
        (dict(target=torch.tensor([0, -1, 2, 3])), ValueError, "target"),
        (dict(target=torch.tensor([0, 1, 2, -100]), ignore_index=-1), ValueError, "target"),
        (dict(reduction="avg"), ValueError, "reduction"),
        (dict(ignore_index=1.5), TypeError, "ignore_index"),
        (dict(label_smoothing=-0.1), ValueError, "label_smoothing"),
        (dict(label_smoothing=1.5), ValueError, "label_smoothing"),
        (dict(label_smoothing=math.nan), ValueError, "label_smoothing"),
        (dict(z_loss=-1.0), ValueError, "z_loss"),
        (dict(z_loss=math.inf), ValueError, "z_loss"),
        (dict(softcap=0.0), ValueError, "softcap"),
        (dict(softcap=-2.0), ValueError, "softcap"),
        (dict(softcap="1"), TypeError, "softcap"),
        (dict(chunk_size=0), ValueError, "chunk_size"),
        (dict(chunk_size=(4, 0)), ValueError, "chunk_size"),
        (dict(chunk_size=(4, 2, 1)), TypeError, "chunk_size"),
        (dict(chunk_size=2.0), TypeError, "chunk_size"),
    ],
)
def test_errors_name_the_argument(change, exc, words):
    args = _args()
    args.update(change)
    with pytest.raises(exc, match=words):
        linear_cross_entropy(args.pop("input"), args.pop("linear_weight"), args.pop("target"), **args)


def test_ignore_index_inside_the_vocabulary():
    """ignore_index may be a class: tokens with that target are ignored, others are not."""
    x, w = torch.randn(4, 3, dtype=F64), torch.randn(5, 3, dtype=F64)
    t = torch.tensor([0, 1, 2, 1])
    ours = linear_cross_entropy(x, w, t, ignore_index=1, reduction="none")
    assert_close(ours, F.cross_entropy(x @ w.T, t, ignore_index=1, reduction="none"), 1e-12, 1e-12, "loss")
    assert (ours[[1, 3]] == 0).all()


# --------------------------------------------------------------------------
# Parity with F.cross_entropy / F.linear_cross_entropy (issue 13 item 7): class
# weights, probability targets, ignore_index=None, one token (1-D input)
# --------------------------------------------------------------------------


@st.composite
def parity_problems(draw):
    """A float64 problem with class weights and/or probability targets, on any token
    shape (a single token [D] included), ignored tokens for class targets."""
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    shape = draw(st.sampled_from([(), (1,), (5,), (2, 3)]))
    D, V = draw(st.integers(1, 5)), draw(st.integers(1, 9))
    x = torch.randn(*shape, D, generator=gen, dtype=F64)
    w = torch.randn(V, D, generator=gen, dtype=F64) * 2.0
    b = torch.randn(V, generator=gen, dtype=F64) if draw(st.booleans()) else None
    if draw(st.booleans()):  # probabilities: a softmax, or rows not summing to 1 (torch does not check)
        t = torch.rand(*shape, V, generator=gen, dtype=F64)
        t = t.softmax(-1) if draw(st.booleans()) else t
        ignore_index = None
    else:
        t = torch.randint(0, V, shape, generator=gen)
        t = torch.where(torch.rand(shape, generator=gen) < draw(st.sampled_from([0.0, 0.4, 1.0])), -100, t)
        ignore_index = draw(st.sampled_from([None, -100]))
    weight = draw(st.sampled_from([None, "positive", "zeros"]))
    if weight is not None:
        weight = torch.rand(V, generator=gen, dtype=F64) + 0.1
        if draw(st.booleans()):
            weight[torch.rand(V, generator=gen) < 0.4] = 0.0  # classes of weight 0
    return {
        "x": x,
        "w": w,
        "b": b,
        "t": t,
        "weight": weight,
        "ignore_index": ignore_index,
        "reduction": draw(st.sampled_from(REDUCTIONS)),
        "eps": draw(st.sampled_from([0.0, 0.3, 1.0])),
        "cap": draw(st.sampled_from([None, 2.0])),
        "chunks": draw(st.sampled_from([None, 1, (2, 3)])),
        "grad_out": torch.randn(shape, generator=gen, dtype=F64),
    }


def _parity_sides(p):
    """(ours, torch's) loss and gradients (input, linear_weight, linear_bias, target when
    it holds probabilities) of problem p: torch's F.cross_entropy on the materialised
    float64 logits, the token dimensions flattened (a single token unflattened)."""
    probs = p["t"].is_floating_point()
    leaves = [p["x"], p["w"]] + ([p["b"]] if p["b"] is not None else []) + ([p["t"]] if probs else [])
    sides = []
    for mine in (True, False):
        ins = [t.clone().requires_grad_() for t in leaves]
        x, w = ins[0], ins[1]
        b = ins[2] if p["b"] is not None else None
        t = ins[-1] if probs else p["t"]
        kw = dict(weight=p["weight"], reduction=p["reduction"], label_smoothing=p["eps"])
        if mine:
            out = linear_cross_entropy(
                x, w, t, linear_bias=b, ignore_index=p["ignore_index"], softcap=p["cap"], chunk_size=p["chunks"], **kw
            )
        else:
            z = F.linear(x.reshape(-1, x.shape[-1]) if x.dim() > 1 else x, w, b)
            z = z if p["cap"] is None else p["cap"] * torch.tanh(z / p["cap"])
            tt = t.reshape(z.shape) if probs else t.reshape(z.shape[:-1])
            out = F.cross_entropy(z, tt, **kw)
            out = out.reshape(p["x"].shape[:-1]) if p["reduction"] == "none" else out
        go = p["grad_out"] if p["reduction"] == "none" else torch.ones((), dtype=F64)
        sides.append((out, torch.autograd.grad(out, ins, go, allow_unused=True)))
    return sides


@settings(max_examples=60, deadline=None)
@given(parity_problems())
@example(
    {
        "x": torch.ones(2, 3, dtype=F64),
        "w": torch.eye(4, 3, dtype=F64),
        "b": None,
        "t": torch.tensor([1, -100]),
        "weight": torch.tensor([1.0, 0.0, 1.0, 1.0], dtype=F64),
        "ignore_index": None,
        "reduction": "mean",
        "eps": 0.3,
        "cap": None,
        "chunks": None,
        "grad_out": torch.ones(2, dtype=F64),
    }
)  # kept weight 0
def test_weights_and_probability_targets_match_torch(p):
    """Loss and every gradient equal torch's (float64, 1e-10: a few hundred roundings of
    values of size <= 1e2 at most, against 1e-10 relative), except torch's NaN for
    "mean" over no kept token, where ours is 0 with zero gradients (documented)."""
    (ours, our_grads), (theirs, their_grads) = _parity_sides(p)
    assert ours.dtype == F64 and ours.shape == theirs.shape
    probs = p["t"].is_floating_point()
    none_kept = p["t"].numel() == 0 if probs else bool((p["t"] == -100).all())
    if p["reduction"] == "mean" and none_kept:
        assert torch.isnan(theirs) and ours.item() == 0.0
        assert all(g is None or not g.any() for g in our_grads)
        return
    kept_weight = None if p["weight"] is None or probs else p["weight"][p["t"][p["t"] != -100]].sum()
    if p["reduction"] == "mean" and kept_weight == 0:
        # kept targets of total weight 0: torch's 0/0 is NaN, ours the sum over 0 (NaN or inf; documented)
        assert torch.isnan(theirs) and not torch.isfinite(ours)
        return
    assert_close(ours, theirs, 1e-10, 1e-10, "loss")
    for k, (a, e) in enumerate(zip(our_grads, their_grads)):
        assert_close(a, e, 1e-10, 1e-10, f"gradient {k}")


def test_ignore_index_none_is_torchs_default():
    """``ignore_index=None`` (torch's F.linear_cross_entropy default, and ours) ignores -100
    for class targets, as torch maps it; the defaults agree with torch's call."""
    x, w = torch.randn(5, 3, dtype=F64), torch.randn(7, 3, dtype=F64)
    t = torch.tensor([0, -100, 6, 2, -100])
    for kw in ({}, {"ignore_index": None}, {"ignore_index": -100}):
        for reduction in REDUCTIONS:
            assert_close(
                linear_cross_entropy(x, w, t, reduction=reduction, **kw),
                F.linear_cross_entropy(x, w, t, reduction=reduction),
                1e-12,
                1e-12,
                f"{kw} {reduction}",
            )


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_one_token(reduction):
    """A 1-D input [D] with a 0-dim target is one token, as F.linear_cross_entropy takes it:
    the loss is 0-dim for every reduction; the gradient has input's shape."""
    x = torch.randn(4, dtype=F64, requires_grad=True)
    w = torch.randn(6, 4, dtype=F64)
    for t in (torch.tensor(3), torch.rand(6, dtype=F64).softmax(0)):
        ours = linear_cross_entropy(x, w, t, reduction=reduction, label_smoothing=0.1)
        theirs = F.linear_cross_entropy(x, w, t, reduction=reduction, label_smoothing=0.1)
        assert ours.shape == theirs.shape == ()
        assert_close(ours, theirs, 1e-12, 1e-12, "loss")
        assert_close(torch.autograd.grad(ours, x)[0], torch.autograd.grad(theirs, x)[0], 1e-12, 1e-12, "grad")
    loss, lse = linear_cross_entropy_forward(x, w, torch.tensor(3))
    assert loss.shape == lse.shape == ()
    assert_close(lse, torch.logsumexp(x @ w.T, 0), 1e-12, 1e-12, "lse")


def test_weight_with_float32_inputs_and_numpy_scalars():
    """Class weights of another floating dtype are used in the compute dtype (float32
    here; torch requires the logits' dtype): float32 tolerance 1e-5. numpy scalars are
    accepted for label_smoothing and ignore_index."""
    np = pytest.importorskip("numpy")
    gen = torch.Generator().manual_seed(3)
    x, w = torch.randn(6, 4, generator=gen), torch.randn(9, 4, generator=gen)
    t, cw = torch.randint(0, 9, (6,), generator=gen), torch.rand(9, generator=gen, dtype=F64)
    ours = linear_cross_entropy(x, w, t, weight=cw, label_smoothing=np.float32(0.25), ignore_index=np.int64(-100))
    assert ours.dtype == torch.float32
    assert_close(ours, F.cross_entropy(x @ w.T, t, weight=cw.float(), label_smoothing=0.25), 1e-5, 1e-5, "loss")


@pytest.mark.parametrize(
    "change, exc, words",
    [
        (dict(weight=torch.rand(4)), ValueError, "weight"),
        (dict(weight=torch.ones(5, dtype=torch.long)), TypeError, "weight"),
        (dict(weight=[1.0] * 5), TypeError, "weight"),
        (dict(weight=torch.rand(5), z_loss=0.1), NotImplementedError, "z_loss with class weights"),
        (dict(weight=torch.rand(5, requires_grad=True)), NotImplementedError, "weight.detach()"),
        (dict(weight=torch.rand(5), impl="triton"), NotImplementedError, "impl='triton' has no weight="),
        (dict(target=torch.rand(4, 5), impl="triton"), NotImplementedError, "impl='triton' has no probability"),
        (dict(target=torch.rand(4, 5), ignore_index=3), ValueError, "ignore_index=3 applies to class-index"),
        (dict(target=torch.rand(4, 4)), ValueError, "target"),
        (dict(target=torch.rand(5)), ValueError, "target"),
        (dict(ignore_index=True), TypeError, "ignore_index"),
    ],
)
def test_parity_errors_name_the_argument(change, exc, words):
    args = _args()
    args.update(change)
    with pytest.raises(exc, match=re.escape(words)):
        linear_cross_entropy(args.pop("input"), args.pop("linear_weight"), args.pop("target"), **args)


# --------------------------------------------------------------------------
# Memory: no [N, V] tensor
# --------------------------------------------------------------------------


class _RecordShapes(TorchDispatchMode):
    """Records the shape of every tensor an aten op returns."""

    def __init__(self):
        super().__init__()
        self.shapes: list[tuple[str, tuple[int, ...]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.shapes.extend((str(func), tuple(t.shape)) for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor))
        return out


def test_no_n_by_v_tensor_is_created_or_saved():
    """With chunks (16, 16), forward and backward create no tensor with N * V elements
    (nothing larger than the inputs [N, D], [V, D]); autograd saves none either. The same
    recorder does see the [N, V] logits of the materialised computation."""
    N, D, V, chunk = 64, 8, 48, 16
    x = torch.randn(N, D, requires_grad=True)
    w = torch.randn(V, D, requires_grad=True)
    b = torch.randn(V, requires_grad=True)
    t = torch.randint(0, V, (N,))
    t[::5] = -100
    saved = []

    def pack(tensor):
        saved.append(tuple(tensor.shape))
        return tensor

    for reduction in REDUCTIONS:
        with _RecordShapes() as rec, torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            loss = linear_cross_entropy(
                x,
                w,
                t,
                linear_bias=b,
                reduction=reduction,
                label_smoothing=0.1,
                z_loss=1e-3,
                softcap=10.0,
                chunk_size=chunk,
            )
            n_forward = len(rec.shapes)
            loss.backward(torch.ones_like(loss))
        assert len(rec.shapes) > n_forward, "the recorder saw no backward op"
        largest = max(math.prod(s) for _, s in rec.shapes)
        assert largest <= max(N * D, V * D) < N * V, rec.shapes
        assert (chunk, chunk) in {s for _, s in rec.shapes}, "no logits block recorded"
        assert all(math.prod(s) < N * V for s in saved), saved

    with _RecordShapes() as rec:
        materialised(x, w, t, b=b)
    assert (N, V) in {s for _, s in rec.shapes}


# --------------------------------------------------------------------------
# Mutations of the reference are caught
# --------------------------------------------------------------------------


def _mismatches(p) -> list[str]:
    return [
        f"{name}: {msg}"
        for name, (a, e) in run_both(p, F64).items()
        if (msg := mismatch(a, e, 1e-10, 1e-10)) is not None
    ]


def _mutation_problem(reduction="none", ignored=False):
    gen = torch.Generator().manual_seed(4)
    N, D, V = 6, 4, 12
    t = torch.randint(0, V, (N,), generator=gen)
    if ignored:
        t[1] = -100
    return {
        "x": torch.randn(N, D, generator=gen, dtype=F64),
        "w": torch.randn(V, D, generator=gen, dtype=F64),
        "b": None,
        "t": t,
        "ignore_index": -100,
        "chunks": (4, 3),
        "reduction": reduction,
        "eps": 0.0,
        "lam": 0.0,
        "cap": None,
        "grad_out": torch.randn(N, generator=gen, dtype=F64),
    }


def test_mutation_no_rescale_is_caught(monkeypatch):
    """Dropping exp(m - m') from the running sum (block_step's rescale) is detected."""
    p = _mutation_problem()
    assert _mismatches(p) == []

    def no_rescale(m, l, z):
        m_new = torch.maximum(m, z.amax(dim=1))
        return m_new, l + torch.exp(z - m_new.unsqueeze(1)).sum(dim=1)

    monkeypatch.setattr(reference_module, "_lse_block_step", no_rescale)
    assert any(s.startswith("loss") for s in _mismatches(p))


def test_mutation_mean_over_all_tokens_is_caught(monkeypatch):
    """Counting ignored tokens in the mean's denominator is detected."""
    p = _mutation_problem("mean", ignored=True)
    assert _mismatches(p) == []
    monkeypatch.setattr(
        reference_module, "_reduce", lambda loss, n_kept, denominator, reduction: loss.sum() / loss.numel()
    )
    assert any(s.startswith("loss") for s in _mismatches(p))


def test_mutation_target_in_wrong_chunk_is_caught(monkeypatch):
    """An off-by-one in the target logit's chunk offset is detected (loss and gradients)."""
    p = _mutation_problem()
    original = reference_module._target_logit
    monkeypatch.setattr(reference_module, "_target_logit", lambda z, target, v0: original(z, target, v0 + 1))
    assert any(s.startswith("loss") for s in _mismatches(p))


# --------------------------------------------------------------------------
# Against the oracle extracted from rocq/LinearCrossEntropy/Definitions.v
# --------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(problems())
def test_reference_matches_oracle(p):
    """float64 and float32 reference against the float64 oracle (same chunks), every
    option: loss and lse within the proved forward bound (bounds.linear_cross_entropy, LossError.v;
    the heuristic with softcap), gradients within the heuristic tolerance
    (linear_cross_entropy_check.oracle_mismatches, the check ``ojas audit`` runs)."""
    for dtype in (F64, torch.float32):
        assert oracle_mismatches(p, dtype) == [], dtype
    if p["reduction"] == "mean" and (p["t"] == p["ignore_index"]).all():
        # ce_output's guard: "mean" with no kept token is exactly 0 in both
        loss, oracle_loss = oracle_and_reference(p, torch.float32)["loss"]
        assert loss.item() == 0.0 and oracle_loss.item() == 0.0


@pytest.mark.parametrize(
    "field, change",
    [
        ("target", {"target": [0, 3]}),
        ("target", {"target": [0, -1]}),
        ("target", {"target": [0]}),
        ("target", {"target": [0, 1.5]}),
        ("linear_bias", {"linear_bias": [0.0, 1.0]}),
        ("linear_weight", {"linear_weight": [[1.0], [2.0], [3.0]]}),
        ("reduction", {"reduction": "avg"}),
        ("token_chunk", {"token_chunk": 0}),
        ("vocab_chunk", {"vocab_chunk": 1.0}),
        ("softcap", {"softcap": 0.0}),
        ("grad_output", {"reduction": "none", "grad_output": [1.0]}),
        ("ignore_index", {"ignore_index": "x"}),
        ("weight", {"weight": None}),
    ],
)
def test_oracle_rejects_malformed_requests(field, change):
    from ojas_ref.verification.oracle import oracle_request

    req = {
        "op": "linear_cross_entropy",
        "input": [[1.0, 0.5], [0.0, 2.0]],
        "linear_weight": [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]],
        "linear_bias": None,
        "target": [0, 2],
        "ignore_index": -100,
        "reduction": "mean",
        "label_smoothing": 0.0,
        "z_loss": 0.0,
        "softcap": None,
        "token_chunk": 1,
        "vocab_chunk": 2,
        "grad_output": None,
    }
    assert "error" not in oracle_request(req)
    req.update(change)
    answer = oracle_request(req)
    assert set(answer) == {"error"} and answer["error"].startswith(field + ":"), answer
