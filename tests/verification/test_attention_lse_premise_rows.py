"""The backward's lse premise per query ROW (``Dl x`` of ``RunningAccError``'s ``dv_error_acc_running`` and
``RunningAccErrorPP``'s ``grad_error_acc_running_pp``, a function of the item): each row's saved-lse bound
``attention_lse_error_masked_tf32x3_op_pp`` at its own ``P``, ``N``, ``Tt`` (``_row_lse_bound``, the
theorem being stated for one row), ``Dl`` per row (``exp2_premise_rows``); at the H100's 3xTF32 model the
interpreter's lse, dV, dQ and dK within the bounds, every bound at most the one with the all-rows lse
premise, dV's largest strictly below it on a causal mask. CPU only."""

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
from ojas_ref.verification import attention_forward_running as afr  # noqa: E402
from ojas_ref.verification.bounds import attention as ab  # noqa: E402
from ojas_ref.verification.bounds import attention_running as ar  # noqa: E402

F64 = torch.float64


def test_exp2_premise_rows_matches_the_uniform_terms():
    """Row by row at least ``exp2_premise_terms``' ``Dl`` at that row's numbers (within 1e-15 relative), and
    increasing in both; a bad shape or a negative entry raises ``ValueError``."""
    lse_abs = torch.tensor([0.5, 3.0, 9.0], dtype=F64)
    lse_err = torch.tensor([1e-5, 2e-5, 1e-6], dtype=F64)
    got = ar.exp2_premise_rows(lse_abs, lse_err)
    for i in range(3):
        dl, _ = ar.exp2_premise_terms(ab.TF32X3_H100, 64, 0.125, 50.0, lse_abs[i].item(), lse_err[i].item())
        assert Fraction(got[i].item()) >= dl and got[i].item() <= float(dl) * (1 + 1e-15)
    assert bool((ar.exp2_premise_rows(lse_abs * 2, lse_err * 2) > got).all())
    with pytest.raises(ValueError, match="lse_abs and lse_error"):
        ar.exp2_premise_rows(lse_abs, lse_err[:2])
    with pytest.raises(ValueError, match="lse_abs and lse_error"):
        ar.exp2_premise_rows(lse_abs, -lse_err)


def test_row_lse_bound_between_the_row_and_all_rows_constants():
    """``_row_lse_bound`` at most the all-rows bound (same ``Dsc``), at least the bound at a row's own
    ``N``, ``p`` (spot rows), and under a causal mask below 0.8 of the all-rows one on the first query tile."""
    q, k, _, _ = attention_inputs(4, 2, 128, 32, 7)
    scale, bm, bn = 32**-0.5, 16, 16
    bnd = ae._bound_inputs(q, k, True, bn)
    kw = dict(scale=scale, dot=ab.TF32X3_H100, **bnd)
    dsc = torch.rand(1, 4, 128, generator=torch.Generator().manual_seed(1), dtype=F64) * 1e-6
    p_rows, counts = afr._row_qk_abs_sum(q, k, True), afr._tile_counts(128, 128, bm, bn, True)
    errs = ae.unary_errors("cpu", 128)
    got = afr._row_lse_bound(dsc, kw, p_rows, counts, 32, 128, "cpu")
    old = ab.attention_lse_error_bound(128, 32, score_shift=dsc, **errs, **kw)
    assert got.shape == dsc.shape and bool((got <= old).all())
    for h, i in ((0, 0), (3, 37), (1, 127)):
        own = dict(kw, qk_abs_sum=p_rows[0, h, i].item())
        one = ab.attention_lse_error_bound(
            min(128, int(counts[i]) * bn), 32, score_shift=dsc[0, h, i].item(), **errs, **own
        )
        assert got[0, h, i].item() >= one
    assert (got[..., :bm] / old[..., :bm]).max().item() < 0.8


@pytest.mark.interpreter
def test_interpreter_within_the_row_lse_bounds_and_smaller_backward_bounds(monkeypatch):
    """With ``kernel_dot`` the H100's 3xTF32 model, causal, GQA 4/2: the interpreter's lse within
    ``_row_lse_errors``, its dV, dQ, dK within ``dv_error_bound`` / ``grad_error_bounds`` "proved"; each bound
    at most the one with the all-rows lse premise (``_row_lse_bound`` at the all-rows constants, ``Dl`` the
    rows' largest), dV's largest below 0.9 of it."""
    interpreter_at_h100_dots(monkeypatch)
    from ojas_kernels.attention import flash_attention, flash_attention_forward

    q, k, v, do = attention_inputs(4, 2, 128, 32, 5)
    scale = 1.0 / math.sqrt(32)
    out, lse = flash_attention_forward(q, k, v, True, scale, None)
    c = ae._backward_constants(q, k, True, scale)
    rows = ae._row_lse_errors(q, k, True, scale, c, 32)
    assert bool(((lse.to(F64) - ae.exact_lse(q, k, True, scale)).abs() <= rows).all())
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    flash_attention(*leaves, True, scale).backward(do)
    exdv, pad = ae.exact_dv(q, k, do, True, scale)

    def bounds() -> dict[str, torch.Tensor]:
        g = ae.grad_error_bounds(q, k, v, do, out, lse, True, scale, "proved")
        return dict(dq=g["dq_bound"], dk=g["dk_bound"], dv=ae.dv_error_bound(q, k, do, pad, True, scale), g=g)

    new = bounds()
    for name, leaf, ref in (
        ("dq", leaves[0], new["g"]["dq"]),
        ("dk", leaves[1], new["g"]["dk"]),
        ("dv", leaves[2], exdv),
    ):
        assert bool(((leaf.grad.to(F64) - ref).abs() <= new[name]).all())
    keep = ae._exp2_premises

    def uniform(cc, lse_error, head_dim, sc):
        dl, am = keep(cc, torch.full_like(lse_error, lse_error.max().item()), head_dim, sc)
        return torch.full_like(dl, dl.max().item()), am

    monkeypatch.setattr(ae, "_exp2_premises", uniform)
    monkeypatch.setattr(
        afr,
        "_row_lse_bound",
        lambda dsc, kw, p_rows, counts, head_dim, n_keys, device: ab.attention_lse_error_bound(
            n_keys, head_dim, score_shift=dsc, **ae.unary_errors(device, n_keys), **kw
        ),
    )
    old = bounds()
    for name in ("dq", "dk", "dv"):
        assert bool((new[name] <= old[name]).all())
    ratios = {n: new[n].max().item() / old[n].max().item() for n in ("dq", "dk", "dv")}
    print(f"largest bound, row lse premise / all-rows lse premise: {ratios}")
    assert ratios["dv"] < 0.9
