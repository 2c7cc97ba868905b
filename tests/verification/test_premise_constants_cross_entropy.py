"""The premises' constants the linear cross-entropy bounds take on a device (issue 28, item 4).

``linear_cross_entropy_error.unary_errors``: ``device_premises.premise_constants`` of "tl.exp",
"tl.log" and the softcap's "softcap tanh c=..." / "softcap z/c c=..." (on CUDA the record's measured
constants, rounded up, where the premise passed; the assumed ``LINEAR_CROSS_ENTROPY_*_ERROR`` on the
CPU, for a cap the record does not check, and for ``tl.log`` when the theorems' log arguments can
leave the checked domain); ``lse_bound`` the lse bounds with them; every bound wrapper of
``linear_cross_entropy_error`` hands them to the bounds. Fixture: a copy of the H100's record keyed
to this machine (``test_premise_constants.h100_record``).
"""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from ojas_kernels import linear_cross_entropy as kernels
from ojas_ref.verification import device_premises as dp
from ojas_ref.verification import linear_cross_entropy_error as ce
from ojas_ref.verification.bounds.linear_cross_entropy import (
    LINEAR_CROSS_ENTROPY_DIV_ERROR,
    LINEAR_CROSS_ENTROPY_EXP_ERROR,
    LINEAR_CROSS_ENTROPY_LOG_ERROR,
    LINEAR_CROSS_ENTROPY_TANH_ERROR,
    linear_cross_entropy_lse_error_bound,
)

from test_premise_constants import h100_record  # noqa: E402

ASSUMED = dict(
    exp_error=LINEAR_CROSS_ENTROPY_EXP_ERROR,
    log_error=LINEAR_CROSS_ENTROPY_LOG_ERROR,
    tanh_error=LINEAR_CROSS_ENTROPY_TANH_ERROR,
    div_error=LINEAR_CROSS_ENTROPY_DIV_ERROR,
)
V = 700


def names(cap: float) -> dict[str, str]:
    return dict(
        exp_error="tl.exp", log_error="tl.log", tanh_error=f"softcap tanh c={cap:g}", div_error=f"softcap z/c c={cap:g}"
    )


@pytest.fixture
def h100(tmp_path, monkeypatch) -> dict:
    """The H100's record saved where ``load_record`` looks; its measured constants."""
    monkeypatch.setenv(dp.CACHE_ENV, str(tmp_path))
    record = h100_record()
    dp.save_record(record, tmp_path)
    return record


def test_unary_errors_take_the_records_constants(h100):
    p = h100["premises"]
    for cap in dp.SOFTCAPS:
        got = ce.unary_errors("cuda", V, cap)
        want = dp.premise_constants(names(cap).values(), "cuda")
        assert got == {key: want[name] for key, name in names(cap).items()}
        assert p["tl.exp"]["measured"]["relative"] <= got["exp_error"] < ASSUMED["exp_error"] / 2
        assert p["tl.log"]["measured"] <= got["log_error"] < ASSUMED["log_error"] / 3
        assert p[f"softcap tanh c={cap:g}"]["measured"] <= got["tanh_error"] < ASSUMED["tanh_error"] / 3
        assert p[f"softcap z/c c={cap:g}"]["measured"]["relative"] <= got["div_error"] < ASSUMED["div_error"] / 4
    # no softcap: the tanh and division constants are not used; the assumed ones
    got = ce.unary_errors("cuda", V)
    assert got["exp_error"] < ASSUMED["exp_error"] and got["log_error"] < ASSUMED["log_error"]
    assert (got["tanh_error"], got["div_error"]) == (ASSUMED["tanh_error"], ASSUMED["div_error"])


@pytest.mark.parametrize("cap", [20.0, 5.0000001, 29.5])
def test_a_cap_the_record_does_not_check_keeps_the_assumed_tanh_and_division(h100, cap):
    """premise_constants raises for a cap not in SOFTCAPS; f"{5.0000001:g}" is "5": the name alone
    would take c = 5's constants for another division."""
    assert f"{cap:g}" != "20" or cap not in dp.SOFTCAPS
    got = ce.unary_errors("cuda", V, cap)
    assert (got["tanh_error"], got["div_error"]) == (ASSUMED["tanh_error"], ASSUMED["div_error"])
    assert got["exp_error"] < ASSUMED["exp_error"] and got["log_error"] < ASSUMED["log_error"]


def test_the_cpu_keeps_the_assumed_constants(h100):
    for cap in (None,) + dp.SOFTCAPS:
        assert ce.unary_errors("cpu", V, cap) == ASSUMED


def test_log_constant_only_inside_the_checked_domain(h100):
    """The theorems ask tl.log on [1 / (1 + b), (1 + b) e^LN], inside [1/2, 2 e^LN] for b <= 1,
    LN >= ln V: the measured constant while 2 V (1 + 2^-30) <= 2^25."""
    assert dp.LOG_DOMAIN == (0.5, 2.0**25)
    assert ce.unary_errors("cuda", 2**24 - 1)["log_error"] < ASSUMED["log_error"]
    for big in (2**24, 2**25):
        got = ce.unary_errors("cuda", big)
        assert got["log_error"] == ASSUMED["log_error"] and got["exp_error"] < ASSUMED["exp_error"]


def test_lse_bound_above_one_takes_the_assumed_log_constant(h100, monkeypatch):
    """b > 1 puts the log arguments' range [1 / (1 + b), (1 + b) e^LN] beyond LOG_DOMAIN."""
    c = ce.unary_errors("cuda", V)
    kw = dict(dtype=torch.bfloat16, block_v=64, max_abs_input=1.0, max_abs_weight=1.0)
    small = ce.lse_bound("cuda", V, 40, **kw)
    assert small == linear_cross_entropy_lse_error_bound(
        V, 40, exp_error=c["exp_error"], log_error=c["log_error"], **kw
    )
    assert small < linear_cross_entropy_lse_error_bound(V, 40, **kw) and small <= 1
    big = dict(kw, max_abs_input=20.0)  # delta > 1
    at = {
        e: linear_cross_entropy_lse_error_bound(V, 40, exp_error=c["exp_error"], log_error=e, **big)
        for e in (c["log_error"], ASSUMED["log_error"])
    }
    assert 1 < at[c["log_error"]] < at[ASSUMED["log_error"]]
    assert ce.lse_bound("cuda", V, 40, **big) == at[ASSUMED["log_error"]]
    assert ce.lse_bound("cuda", V, 40, log_error=c["log_error"], **big) == at[c["log_error"]]  # given: the caller's


# every bound function a wrapper of linear_cross_entropy_error calls, and the constants it takes
SPIED = {
    "linear_cross_entropy_grad_chain_error_bound": ("exp_error", "log_error"),
    "linear_cross_entropy_lse_error_bound": ("exp_error", "log_error", "tanh_error"),
    "linear_cross_entropy_merge_lse_error_bound": ("exp_error", "log_error"),
    "linear_cross_entropy_softcap_grad_chain_error_bound": ("exp_error", "log_error", "tanh_error", "div_error"),
    "linear_cross_entropy_entry_posteriori_factors": ("exp_error",),
    "linear_cross_entropy_weighted_dh_error_bound": ("exp_error",),
    "linear_cross_entropy_weighted_dw_error_bound": ("exp_error",),
}


def _case(dtype: torch.dtype):
    gen = torch.Generator().manual_seed(9)
    N, D = 13, 40
    x = torch.randn(N, D, generator=gen)
    w = torch.randn(V, D, generator=gen) * 0.3
    target = torch.randint(0, V, (N,), generator=gen)
    target[[2, 7]] = -100
    cfg = dataclasses.replace(kernels.default_config(dtype, torch.device("cpu")), token_chunk=5)
    return x.to(dtype), w.to(dtype), target, cfg


def _bounds(x, w, target, cfg) -> dict[str, torch.Tensor]:
    rounding = "nearest" if x.dtype == torch.float32 else "truncate"
    four = dataclasses.replace(cfg, products=4, tiles_per_program=4)
    got = {}
    for key, b in (
        ("grad", ce.gradient_bounds(x, w, target, config=cfg, storage_rounding=rounding)),
        ("cap30", ce.gradient_bounds(x, w, target, config=cfg, storage_rounding=rounding, softcap=30.0)),
        ("cap5", ce.gradient_bounds(x, w, target, config=cfg, storage_rounding=rounding, softcap=5.0)),
        ("post", ce.gradient_posteriori_bounds(x, w, target, config=cfg, storage_rounding=rounding)),
        (
            "meas",
            ce.gradient_posteriori_bounds(
                x, w, target, config=cfg, storage_rounding=rounding, logits=ce.stored_logits(x, w)
            ),
        ),
        ("four", ce.gradient_bounds(x, w, target, reduction="none", config=four, storage_rounding=rounding)),
    ):
        got[f"{key}_dh"], got[f"{key}_dw"] = b
    return got


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_cross_entropy_bound_takes_unary_errors(dtype, monkeypatch):
    """The wrappers' bounds (the GPU tests' and the benchmark's) take ``unary_errors``' constants:
    with the H100's in its place (here, in the interpreter, ``unary_errors`` returns the assumed
    ones) every bound function is called with them, and each bound is at most the assumed
    constants' entry by entry and below it somewhere."""
    x, w, target, cfg = _case(dtype)
    old = _bounds(x, w, target, cfg)
    record = h100_record()
    p = record["premises"]
    measured = dict(exp_error=p["tl.exp"]["measured"]["relative"], log_error=p["tl.log"]["measured"])

    def fake(device_type: str, vocab_size: int, softcap: float | None = None) -> dict[str, float]:
        assert device_type == "cpu" and vocab_size == V
        if softcap is None:
            return dict(ASSUMED, **measured)
        return dict(
            measured,
            tanh_error=p[f"softcap tanh c={softcap:g}"]["measured"],
            div_error=p[f"softcap z/c c={softcap:g}"]["measured"]["relative"],
        )

    monkeypatch.setattr(ce, "unary_errors", fake)
    calls = []
    for fn, keys in SPIED.items():

        def spy(*args, _fn=getattr(ce, fn), _name=fn, _keys=keys, **kwargs):
            calls.append((_name, kwargs.get("softcap"), {k: kwargs.get(k) for k in _keys}))
            return _fn(*args, **kwargs)

        monkeypatch.setattr(ce, fn, spy)
    new = _bounds(x, w, target, cfg)
    assert {c[0] for c in calls} == set(SPIED)
    for name, cap, got in calls:
        assert got == {k: fake("cpu", V, cap)[k] for k in got}, (name, cap, got)
    for name in old:
        assert (new[name] <= old[name]).all() and (new[name] < old[name]).any(), name
