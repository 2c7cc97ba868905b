"""The backward's ``delta`` of the forward kernel's stored output against the exact ``D``
(``Ojas.Attention.Float.DeltaKernelError.attention_delta_kernel_error_tf32x3_op``:
:func:`~ojas_ref.verification.attention_delta.delta_kernel_error_bound`): the interpreter's output within it at the
H100's 3xTF32 dot model, below the a-posteriori forward bound's ``sum_c |dO_c| e_c``, the "proved" ``eD`` of
``_grad_premises`` at most the old one; with ``g_acc = g_dot`` the tables are the one-constant (pre-split) formula's
bit for bit, the split constants' bound at most that one; bad arguments raise ``ValueError``, a failed premise gives
``inf``. CPU only."""

from __future__ import annotations

import math
import os
from fractions import Fraction

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from _attention_cases import attention_inputs, interpreter_at_h100_dots  # noqa: E402
from ojas_ref.verification import attention_error as ae  # noqa: E402
from ojas_ref.verification import attention_delta as ad  # noqa: E402
from ojas_ref.verification.attention_delta import delta_kernel_error_bound  # noqa: E402
from ojas_ref.verification.bounds import attention as ab  # noqa: E402
from ojas_ref.verification.bounds import certified as cb  # noqa: E402
from ojas_ref.verification.bounds.common import _float_up  # noqa: E402

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


def _one_constant_tables(k: dict, tiles: int) -> dict[str, torch.Tensor]:
    """The tables before the split (a copy of the old ``_tile_tables``): ``rho = (1 + g) (1 + u)``, ``g`` on the
    products, ``(1 + g) ea + ga``, one constant ``g`` of ``acc_dot_error_constants``."""
    u, ue, ee, g = k["u"], k["ue"], k["ee"], k["g"]

    def up(x):
        return Fraction(_float_up(x))

    b_ue, b_pm, b_r = up(1 + ue), up(1 + ue + ee), up((1 + ue + ee) * (1 + ue))
    b_lg, b_rho = up((1 + u) ** 2 * (1 + ue + ee)), up((1 + g) * (1 + u))
    names = ("c1", "c1m1", "R", "pm", "la", "lg", "rho1", "rhoT", "rhog", "ea")
    rows = {n: [] for n in names}
    for t in range(tiles + 1):
        c1, pm, rho = b_ue**t, b_pm**t, b_rho**t
        vals = dict(
            c1=c1,
            c1m1=c1 - 1,
            R=t * b_r**t * ee,
            pm=pm,
            la=(1 + u) ** int(k["n"] - 1 + 2 * t) - 1,
            lg=t * b_lg**t * k["ea"],
            rho1=rho * (b_rho - 1),
            rhoT=rho * (b_rho - 1) * t,
            rhog=rho * g,
            ea=rho * t * pm * ((1 + g) * k["ea"] + k["ga"]),
        )
        for n in names:
            rows[n].append(_float_up(vals[n]))
    return {n: torch.tensor(x, dtype=F64) for n, x in rows.items()}


def _one_constant(dot):
    """``acc_dot_split_constants`` replaced by the one-constant model as a split one (``g_acc = g_dot = g``)."""

    def split(d, n):
        g, ga = ab.acc_dot_error_constants(d, n)
        assert d == dot
        return g, g, ga

    return split


@pytest.mark.parametrize("dot", [ab.TF32X3_H100, ab.TENSOR_CORE_BF16_H100])
def test_split_tables_against_the_one_constant_formula(dot):
    """At ``g_acc = g_dot = g`` the tables equal the one-constant formula's bit for bit; with the split constants
    (3xTF32: ``g_acc = u``) every entry is at most that, ``rho^Tt (rho - 1)`` below it past ``Tt = 0`` (the
    tensor cores' chain: ``g_acc = g_dot``, the same tables)."""
    c = dict(dot=dot, errs=dict(exp2_error=2.0**-22), rounding="nearest")
    k = ad._constants(torch.float32, c, 64)
    g, ga = ab.acc_dot_error_constants(dot, 64)
    assert k["g_dot"] == g and k["ga"] == ga
    old = _one_constant_tables(dict(k, g=g), 40)
    same = ad._tile_tables(dict(k, g_acc=g, g_dot=g), 40)
    new = ad._tile_tables(k, 40)
    for name, t in old.items():
        assert torch.equal(same[name], t), name
        assert bool((new[name] <= t).all()), name
    if isinstance(dot, ab.TensorCoreDot):
        assert k["g_acc"] == g
        assert all(torch.equal(new[n], t) for n, t in old.items())
    else:
        assert k["g_acc"] == Fraction(2) ** -24 < g
        assert bool((new["rho1"][1:] < old["rho1"][1:] / 10).all())
        assert bool((new["rhoT"][1:] < old["rhoT"][1:]).all())


@pytest.mark.parametrize("causal", [False, True])
def test_split_bound_below_the_one_constant_bound(monkeypatch, causal):
    """S = 512, E = 16, the H100's 3xTF32 model, ``out`` the float64 exact output rounded to float32: the bound with
    the split constants is at most the one with ``g_acc = g_dot = g`` (``acc_dot_error_constants``) at every row,
    below it by more than 10% at the median."""
    q, k, v, do = attention_inputs(2, 1, 512, 16, 7)
    scale = 0.25
    monkeypatch.setattr(ae, "kernel_dot", lambda device_type, dt: ab.TF32X3_H100)
    c = ae._backward_constants(q, k, causal, scale, 16)
    out = ae.exact_attention(q, k, v, causal, scale).to(torch.float32)
    new = delta_kernel_error_bound(q, k, v, do, out, causal, scale, c)
    monkeypatch.setattr(ad.ab, "acc_dot_split_constants", _one_constant(c["dot"]))
    old = delta_kernel_error_bound(q, k, v, do, out, causal, scale, c)
    assert bool(torch.isfinite(new).all())
    assert bool((new <= old).all())
    print(f"causal={causal}: split / one-constant median {(new / old).median():.3f}, max {(new / old).max():.3f}")
    assert (new / old).median().item() < 0.9
