"""The backward's ``delta`` of the forward kernel's stored output against the exact ``D``
(``Ojas.Attention.Float.DeltaKernelError.attention_delta_kernel_error_tf32x3_op``:
:func:`~ojas_ref.verification.attention_delta.delta_kernel_error_bound`): the interpreter's output within it at the
H100's 3xTF32 dot model, below the a-posteriori forward bound's ``sum_c |dO_c| e_c``, the "proved" ``eD`` of
``_grad_premises`` at most the old one; bad arguments raise ``ValueError``, a failed premise gives ``inf``. CPU only."""

from __future__ import annotations

import math
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from _attention_cases import attention_inputs, interpreter_at_h100_dots  # noqa: E402
from ojas_ref.verification import attention_error as ae  # noqa: E402
from ojas_ref.verification.attention_delta import delta_kernel_error_bound  # noqa: E402
from ojas_ref.verification.bounds import attention as ab  # noqa: E402
from ojas_ref.verification.bounds import certified as cb  # noqa: E402

F64 = torch.float64


@pytest.mark.interpreter
@pytest.mark.parametrize("causal", [False, True])
def test_interpreter_delta_within_the_kernel_bound(monkeypatch, causal):
    """S = 128, E = 64, GQA 4/2, the H100's 3xTF32 model: at every row ``|dO . out - D|`` (``out`` the interpreter's
    stored output, ``D`` of the float64 exact attention) is within the new bound; the bound is below the old
    ``eD`` (``attention_delta_error_bound`` plus ``sum_c |dO_c| e_c`` of the a-posteriori forward bound) at more
    than 90% of the rows; ``_grad_premises``' "proved" ``eD`` is at most the old one everywhere, below it at its
    median."""
    interpreter_at_h100_dots(monkeypatch)
    from ojas_kernels.attention import flash_attention_forward

    q, k, v, do = attention_inputs(4, 2, 128, 64, 3)
    scale = 64**-0.5
    out, lse = flash_attention_forward(q, k, v, causal, scale, None)
    c = ae._backward_constants(q, k, causal, scale, 64)
    new = delta_kernel_error_bound(q, k, v, do, out, causal, scale, c)
    dof = do.to(F64)
    measured = ((dof * out.to(F64)).sum(-1) - (dof * ae.exact_attention(q, k, v, causal, scale)).sum(-1)).abs()
    assert new.shape == measured.shape
    assert bool((measured <= new).all())
    close = ab.attention_delta_error_bound(cb.sum_upper(cb.mul_upper(out.to(F64), dof), -1), 64)
    e_out = cb.sum_upper(cb.mul_upper(ae.forward_posteriori_bound(q, k, v, causal, scale), dof), -1)
    old = cb.add_upper(close, e_out)
    got = ae._grad_premises(q, k, v, do, out, lse, causal, scale, "proved", c)[0]
    print(
        f"causal={causal}: new / old sum|dO| e median {(new / e_out).median():.3g}, new / old eD median "
        f"{(new / old).median():.3g}, eD median {old.median():.4g} -> {got.median():.4g}, "
        f"measured / new max {(measured / new).max():.3g}"
    )
    assert (new < old).double().mean().item() > 0.9
    assert bool((got <= old).all())
    assert got.median().item() < old.median().item()


def test_delta_kernel_bound_arguments(monkeypatch):
    """A mis-shaped ``do`` or ``out``, a non-positive ``scale``, a ``c`` without the backward's constants or with the
    interpreter's "fp32" dot raise ``ValueError`` naming it; an ``exp2_error`` of 1 (``tb >= 1``) gives ``inf``."""
    interpreter_at_h100_dots(monkeypatch)
    q, k, v, do = attention_inputs(2, 1, 64, 16, 1)
    scale = 0.25
    c = ae._backward_constants(q, k, False, scale, 16)
    for bad, name in (
        (dict(do=do[..., :8]), "do"),
        (dict(out=do[:, :1]), "out"),
        (dict(scale=-1.0), "scale"),
        (dict(c={"dot": c["dot"]}), "c"),
        (dict(c=dict(c, dot="fp32")), "fp32"),
    ):
        args = dict(do=do, out=do, scale=scale, c=c) | bad
        with pytest.raises(ValueError, match=name):
            delta_kernel_error_bound(q, k, v, args["do"], args["out"], False, args["scale"], args["c"])
    ok = delta_kernel_error_bound(q, k, v, do, do, False, scale, c)
    assert bool(torch.isfinite(ok).all())
    worse = delta_kernel_error_bound(q, k, v, do, do, False, scale, dict(c, errs=dict(c["errs"], exp2_error=1.0)))
    assert bool((worse == math.inf).all())
