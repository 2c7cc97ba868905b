"""The per-pair forward bound at each query ROW's own constants (``forward_per_pair_bounds``: the theorem
``attention_forward_acc_running_tf32x3_op_pp`` is stated for one row, so its ``P >= sum |q k_j|``, ``N`` and
``Tt`` may be the row's): the rows' ``sum |q k|`` bounds over their visible keys, the grouped bound between
the single row's constants and the all-rows ones, and, at the H100's 3xTF32 model, the interpreter's
output, dQ and dK within the bounds, the gradients' "proved" bounds below those of the all-rows forward
constants on a causal mask. CPU only."""

from __future__ import annotations

import math
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from _attention_cases import attention_inputs, interpreter_at_h100_dots  # noqa: E402
from ojas_ref.verification import attention_error as ae  # noqa: E402
from ojas_ref.verification import attention_forward_running as afr  # noqa: E402
from ojas_ref.verification.bounds import attention as ab  # noqa: E402

F64 = torch.float64


def test_row_qk_abs_sum_is_the_visible_keys_max():
    """At least the float64 ``max_j sum_c |q_ic k_jc|`` over the row's visible keys and within 1e-12 of it;
    a large key seen only by the rows after it (causal) leaves the earlier rows' bounds small; GQA."""
    q, k, _, _ = attention_inputs(4, 2, 40, 16, 3)
    k[:, :, 20] *= 50.0
    a = q.to(F64).abs() @ k.to(F64).abs().repeat_interleave(2, 1).transpose(-1, -2)
    for causal in (False, True):
        want = a.masked_fill(torch.ones(40, 40, dtype=torch.bool).triu(1), 0.0) if causal else a
        got = afr._row_qk_abs_sum(q, k, causal)
        assert got.shape == (1, 4, 40)
        assert bool((got >= want.amax(-1)).all()) and bool((got <= want.amax(-1) * (1 + 1e-12)).all())
    early, late = got[..., :20].max().item(), got[..., 20:].min().item()
    assert early * 5 < late


@pytest.mark.parametrize("causal,hq,hkv", [(True, 4, 4), (False, 2, 2), (True, 4, 2)], ids=["causal", "full", "gqa2"])
def test_grouped_bound_between_one_row_and_all_rows(causal, hq, hkv):
    """Entry by entry: at most the bound at the all-rows constants (``_bound_kw``: all pairs' ``sum |q k|``,
    every key, every tile) and at least the bound at the row's own constants (``N = min(Sk, T block_n)``, ``T``
    its tiles, ``P`` its own ``sum |q k|`` bound); causal: below 0.7 of the all-rows bound on the first query
    tile (one key tile of eight there)."""
    q, k, v, _ = attention_inputs(hq, hkv, 128, 32, 11)
    scale, bn, bm = 32**-0.5, 16, 16
    kw = dict(afr._bound_kw(q, k, v, causal, scale, bn), dot=ab.TF32X3_H100)
    rate = ab.attention_forward_running_rate(**kw)
    sums = dict(block_n=bn, block_m=bm, score_error=ae._score_error(q, scale, kw["qk_abs_sum"]), dot=kw["dot"])
    w, r, yw, _ = afr.forward_per_pair_sums(q, k, v, causal, scale, rate, **sums)
    p_rows = afr._row_qk_abs_sum(q, k, causal)
    counts = afr._tile_counts(128, 128, bm, bn, causal)
    got = afr._row_grouped_bound(w, r, yw, kw, p_rows, counts)
    old = ab.attention_forward_running_bound(w, r, score_perturbation=yw, **kw)
    assert bool((got <= old).all())
    for h, i in ((0, 0), (hq - 1, 37), (1, 127)):
        own = dict(kw, n_keys=min(128, int(counts[i]) * bn), qk_abs_sum=p_rows[0, h, i].item())
        one = ab.attention_forward_running_bound(w[0, h, i], r[0, h, i], score_perturbation=yw[0, h, i], **own)
        assert bool((got[0, h, i] >= one).all())
    if causal:
        assert (got[..., :bm, :] / old[..., :bm, :]).max().item() < 0.7


@pytest.mark.interpreter
def test_interpreter_within_the_row_bounds_and_smaller_grad_bounds(monkeypatch):
    """With ``kernel_dot`` the H100's 3xTF32 model, causal, GQA: the interpreter's output within
    ``forward_per_pair_bounds``' row-constant bound, its dQ and dK within ``grad_error_bounds`` "proved"
    (``_grad_premises``' ``eD`` from that bound), whose largest dK / dQ bounds are below 0.9 of those at the
    all-rows forward constants (``_row_grouped_bound`` replaced by the single-constant bound). ``eD``'s other
    bound (``attention_delta.delta_kernel_error_bound``, which does not take the forward bound) is off in both
    runs: where it is smaller it hides the forward bound's constants."""
    from ojas_ref.verification import attention_delta

    interpreter_at_h100_dots(monkeypatch)
    monkeypatch.setattr(
        attention_delta, "delta_kernel_error_bound", lambda q, *_, **__: torch.full(q.shape[:-1], math.inf, dtype=F64)
    )
    from ojas_kernels.attention import flash_attention, flash_attention_forward

    q, k, v, do = attention_inputs(4, 2, 128, 32, 5)
    scale = 1.0 / math.sqrt(32)
    out, lse = flash_attention_forward(q, k, v, True, scale, None)
    # the row constants alone: the counted bound (its own test) off in both runs
    monkeypatch.setattr(afr, "_row_counted_bound", lambda w, *_: torch.full_like(w, math.inf))
    out_b = afr.forward_per_pair_bounds(q, k, v, True, scale)[0]
    assert bool(((out.to(F64) - ae.exact_attention(q, k, v, True, scale)).abs() <= out_b).all())
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    flash_attention(*leaves, True, scale).backward(do)
    new = ae.grad_error_bounds(q, k, v, do, out, lse, True, scale, "proved")
    for name, leaf in (("dq", leaves[0]), ("dk", leaves[1])):
        assert bool(((leaf.grad.to(F64) - new[name]).abs() <= new[f"{name}_bound"]).all())
    monkeypatch.setattr(
        afr,
        "_row_grouped_bound",
        lambda w, r, yw, kw, p_rows, counts: ab.attention_forward_running_bound(w, r, score_perturbation=yw, **kw),
    )
    old = ae.grad_error_bounds(q, k, v, do, out, lse, True, scale, "proved")
    ratios = {n: new[f"{n}_bound"].max().item() / old[f"{n}_bound"].max().item() for n in ("dq", "dk")}
    print(f"largest bound, row constants / all-rows constants: {ratios}")
    assert max(ratios.values()) < 0.9
