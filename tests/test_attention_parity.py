"""``ojas_ref.attention`` where it meets the edges of ``scaled_dot_product_attention``
(issue 13): double backward, empty dimensions, leading batch dimensions, numpy
scalars and ``dropout_p``; each for the reference and for the Triton kernel
(``impl="triton"``, in Triton's CPU interpreter when no CUDA device is present).

The interpreter must be on before ``ojas_kernels`` is imported (see
tests/test_attention_kernel.py); the kernel cases are skipped if it was imported
compiled without a CUDA device.
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from ojas_ref.attention import attention  # noqa: E402

F64 = torch.float64


def _kernel_runs() -> bool:
    try:
        from ojas_kernels import attention as kattn
    except ImportError:
        return False
    return torch.cuda.is_available() or type(kattn._fwd_kernel).__name__ == "InterpretedFunction"


IMPLS = ["reference", pytest.param("triton", marks=pytest.mark.skipif(
    not _kernel_runs(), reason="needs triton, and CUDA or TRITON_INTERPRET=1 before ojas_kernels is imported"))]
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
    does not require grad (that of ``out.sum()``; once_differentiable lets it pass and
    the second derivative comes out wrong: d/dq off by 4.39 against at most 0.48 in
    float64 before this check)."""
    q, k, v = _leaves((1, 2, 5, 16), (1, 2, 7, 16), (1, 2, 7, 8))
    out = attention(q, k, v, is_causal=True, impl=impl)
    with pytest.raises(RuntimeError, match=r"double backward \(create_graph=True"):
        torch.autograd.grad(out.sum(), q, create_graph=True)
    # the graph is intact: a first-order backward still runs, and agrees with SDPA
    dq, = torch.autograd.grad(out.sum(), q)
    q2 = q.detach().requires_grad_()
    ref = torch.nn.functional.scaled_dot_product_attention(q2, k, v, is_causal=True)
    ref_dq, = torch.autograd.grad(ref.sum(), q2)
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
@pytest.mark.parametrize("kw", [{}, dict(is_causal=True, enable_gqa=True), dict(mask=True)], ids=["plain", "causal-gqa", "mask"])
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
