"""``ojas_ref.attention`` where it meets the edges of ``scaled_dot_product_attention``
(issue 13): double backward, empty dimensions, leading batch dimensions, numpy
scalars and ``dropout_p``; each for the reference and for the Triton kernel
(``impl="triton"``, in Triton's CPU interpreter when no CUDA device is present).

The interpreter must be on before ``ojas_kernels`` is imported (see
tests/ojas_kernels/test_attention_kernel.py); the kernel cases are skipped if it was imported
compiled without a CUDA device.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from ojas_ref.functional.attention import attention, attention_forward  # noqa: E402

F64 = torch.float64


IMPLS = [
    "reference",
    pytest.param(
        "triton",
        marks=pytest.mark.kernel,
    ),
]
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _leaves(*shapes, dtype=torch.float32, seed=0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g, dtype=dtype).to(DEVICE).requires_grad_() for s in shapes]


# --------------------------------------------------------------------------
# Double backward: refused (item 2 of issue 13)
# --------------------------------------------------------------------------


@pytest.mark.parametrize("impl", IMPLS)
def test_gradient_penalty_raises(impl):
    """create_graph=True through the attention raises, also when the incoming gradient
    does not require grad (that of ``out.sum()``, which once_differentiable lets pass);
    before, the gradient came back as a constant and a gradient penalty's d/dq was wrong
    (issue 13 measured it off by 4.39 where the true value is at most 0.48, float64)."""
    q, k, v = _leaves((1, 2, 5, 16), (1, 2, 7, 16), (1, 2, 7, 8))
    out = attention(q, k, v, is_causal=True, impl=impl)
    with pytest.raises(RuntimeError, match=r"double backward \(create_graph=True"):
        torch.autograd.grad(out.sum(), q, create_graph=True)
    # the graph is intact: a first-order backward still runs, and agrees with SDPA
    (dq,) = torch.autograd.grad(out.sum(), q)
    q2 = q.detach().requires_grad_()
    ref = torch.nn.functional.scaled_dot_product_attention(q2, k, v, is_causal=True)
    (ref_dq,) = torch.autograd.grad(ref.sum(), q2)
    torch.testing.assert_close(dq, ref_dq, rtol=1e-5, atol=1e-5)  # float32, S <= 7: a few ulps of |dq| ~ 1


def test_gradgradcheck_raises():
    """gradgradcheck (float64, reference: the kernel has no float64) no longer fails on
    wrong numbers: it stops at the error."""
    q, k, v = _leaves((1, 1, 3, 4), (1, 1, 4, 4), (1, 1, 4, 2), dtype=F64)
    with pytest.raises(RuntimeError, match="does not support double backward"):
        torch.autograd.gradgradcheck(lambda *x: attention(*x, impl="reference"), (q, k, v))


# --------------------------------------------------------------------------
# Empty dimensions (item 5 of issue 13)
# --------------------------------------------------------------------------

EMPTY_SHAPES = {  # (query, key, value): one dimension 0 each; E > 0
    "batch 0": ((0, 2, 3, 16), (0, 2, 5, 16), (0, 2, 5, 8)),
    "0 heads": ((2, 0, 3, 16), (2, 0, 5, 16), (2, 0, 5, 8)),
    "Sq 0": ((2, 2, 0, 16), (2, 2, 5, 16), (2, 2, 5, 8)),
    "Sk 0": ((2, 2, 3, 16), (2, 2, 0, 16), (2, 2, 0, 8)),  # every row fully masked: zeros
    "Ev 0": ((2, 2, 3, 16), (2, 2, 5, 16), (2, 2, 5, 0)),
    "all": ((0, 0, 0, 16), (0, 0, 0, 16), (0, 0, 0, 0)),
}


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "kw", [{}, dict(is_causal=True, enable_gqa=True), dict(mask=True)], ids=["plain", "causal-gqa", "mask"]
)
@pytest.mark.parametrize("shapes", EMPTY_SHAPES.values(), ids=EMPTY_SHAPES.keys())
def test_empty_dimensions_as_sdpa(shapes, kw, dtype, impl):
    """What SDPA (math backend) returns, exactly: shape, dtype, values (zeros or empty),
    and the gradients' shapes, dtypes and values. Exact equality: no arithmetic takes
    place (Sk = 0 and Ev = 0 give zeros on both sides: no key, or no output column)."""
    xs = _leaves(*shapes, dtype=dtype)
    kw = dict(kw)
    if kw.pop("mask", False):  # a key padding mask of the full batch
        kw["attn_mask"] = torch.ones(shapes[0][0], 1, 1, shapes[1][2], dtype=torch.bool, device=DEVICE)
    out = attention(*xs, impl=impl, **kw)
    grads = torch.autograd.grad(out, xs, torch.ones_like(out))
    ys = [x.detach().requires_grad_() for x in xs]
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        ref = torch.nn.functional.scaled_dot_product_attention(*ys, **kw)
    ref_grads = torch.autograd.grad(ref, ys, torch.ones_like(ref))
    for got, want in zip((out, *grads), (ref, *ref_grads)):
        assert got.shape == want.shape and got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=0, atol=0)


# --------------------------------------------------------------------------
# Leading batch dimensions, numpy scalars, dropout_p = 0 (item 7 of issue 13)
# --------------------------------------------------------------------------

# (query, key/value heads and rows, mask shape or None): SDPA's [..., H, S, E] layouts
LEADING = {
    "2-D": ((5, 16), (7,), (5, 7)),
    "3-D": ((4, 5, 16), (2, 7), (5, 7)),
    "5-D": ((2, 3, 4, 5, 16), (2, 3, 2, 7), (2, 1, 1, 5, 7)),  # mask broadcast over one of two batch dims
    "5-D keys mask": ((2, 3, 4, 5, 16), (2, 3, 2, 7), (3, 1, 1, 7)),  # fewer dims than the query
    "6-D": ((1, 2, 2, 2, 3, 16), (1, 2, 2, 2, 4), (1, 2, 2, 2, 3, 4)),  # a full mask
}
# Norm-relative tolerances against SDPA's math backend, as tests/functional/test_attention_reference.py
# (float64) and the interpreted-kernel check there (float32, S <= 7: a few ulps).
PARITY_RTOL = {F64: 1e-10, torch.float32: 1e-5}


def _normwise_close(got: torch.Tensor, want: torch.Tensor, rtol: float) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    assert (got - want).norm() <= rtol * want.norm() + 1e-30, (got - want).abs().max()


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("mask_kind", [None, "bool", "float"])
@pytest.mark.parametrize("layout", LEADING.values(), ids=LEADING.keys())
def test_leading_batch_dimensions_as_sdpa(layout, mask_kind, impl):
    """Any number of leading batch dimensions (and 2-D inputs), GQA along dim -3, a mask
    broadcast over some of them: output and gradients as SDPA's math backend (float64 for
    the reference, float32 for the kernel, which has no float64); the float mask's
    gradient too (reference only: the kernel computes none)."""
    q_shape, (*kv_lead, sk), mask_shape = layout
    dtype = F64 if impl == "reference" else torch.float32
    k_shape, v_shape = (*kv_lead, sk, q_shape[-1]), (*kv_lead, sk, 8)
    xs = _leaves(q_shape, k_shape, v_shape, dtype=dtype, seed=len(q_shape))
    kw = dict(enable_gqa=len(q_shape) >= 3 and q_shape[-3] != k_shape[-3])
    if mask_kind is not None:
        g = torch.Generator().manual_seed(1)
        if mask_kind == "bool":
            mask = torch.rand(mask_shape, generator=g) < 0.7
            mask[..., 0] = True  # no fully masked rows (SDPA's are NaN or zeros, depending on version)
        else:
            mask = torch.randn(mask_shape, generator=g, dtype=dtype)
        mask = mask.to(DEVICE)
        if mask_kind == "float" and impl == "reference":
            mask.requires_grad_()
            xs.append(mask)
        kw["attn_mask"] = mask
    out = attention(*xs[:3], impl=impl, **kw)
    ys = [x.detach().requires_grad_() for x in xs]
    if len(ys) == 4:
        kw["attn_mask"] = ys[3]
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        ref = torch.nn.functional.scaled_dot_product_attention(*ys[:3], **kw)
    grad_out = torch.randn(ref.shape, generator=torch.Generator().manual_seed(2), dtype=dtype).to(DEVICE)
    grads = torch.autograd.grad(out, xs, grad_out)
    ref_grads = torch.autograd.grad(ref, ys, grad_out)
    for got, want in zip((out, *grads), (ref, *ref_grads)):
        _normwise_close(got, want, PARITY_RTOL[dtype])


def test_attention_forward_leading_dimensions():
    """attention_forward: out [..., Hq, Sq, Ev] and lse [..., Hq, Sq], the rows of the 4-D run."""
    q, k, v = (x.detach() for x in _leaves((2, 3, 4, 5, 16), (2, 3, 2, 7, 16), (2, 3, 2, 7, 8), dtype=F64))
    out, lse = attention_forward(q, k, v, enable_gqa=True)
    out4, lse4 = attention_forward(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), enable_gqa=True)
    assert out.shape == (2, 3, 4, 5, 8) and lse.shape == (2, 3, 4, 5)
    assert torch.equal(out.flatten(0, 1), out4) and torch.equal(lse.flatten(0, 1), lse4)


@pytest.mark.parametrize("impl", IMPLS)
def test_numpy_scalars_as_python_scalars(impl):
    """numpy scalars for scale, window, dropout_p = 0 (also a plain int 0), is_causal and
    enable_gqa give bit for bit the result of the Python scalars."""
    xs = _leaves((1, 4, 6, 16), (1, 2, 6, 16), (1, 2, 6, 8))
    scale = np.float32(0.3)
    want = attention(*xs, is_causal=True, scale=float(scale), enable_gqa=True, window=3, impl=impl)
    for dropout_p in (0, np.float32(0), np.int64(0)):
        got = attention(
            *xs,
            dropout_p=dropout_p,
            is_causal=np.bool_(True),
            scale=scale,
            enable_gqa=np.bool_(True),
            window=np.int64(3),
            impl=impl,
        )
        assert torch.equal(got, want)
