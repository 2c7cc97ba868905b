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
