"""The premises' constants the attention bounds take on a device (issue 28, item 4).

``device_premises.premise_constants``: on CUDA, the constant ``ojas verify-device`` measured on every
float32 input of a premise's domain (this device's exhaustive record), rounded up to a float32 and
never below the measured one nor above the assumed one, where the premise passed; the assumed
constant (``EXP2_ERROR``, ``LOG2_ERROR``) without a record, when the premise failed or was not
checked, and on the CPU. ``attention_error.unary_errors`` hands them to the bounds. Fixture: a copy of
the H100's record (benchmarks/device_records/) keyed to this machine, in ``tmp_path``. The bounds
are monotone in the constants: with the H100's measured ones the lse and forward bounds are smaller
than with the assumed ones, and at least those with ``tl.exp2`` and ``tl.log2`` exact.
"""

from __future__ import annotations

import copy
import json
import math
import os
import struct
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from ojas_ref.verification import device_premises as dp
from ojas_ref.verification.attention_error import unary_errors
from ojas_ref.verification.bounds.attention import (
    EXP2_ERROR,
    LOG2_ERROR,
    attention_forward_error_bound,
    attention_forward_posteriori_bound,
    attention_lse_error_bound,
)

H100 = (
    Path(__file__).resolve().parents[2]
    / "benchmarks/device_records/h100-80gb-hbm3_driver580_cuda13.0_torch2.11_triton3.6.json"
)
NAMES = ["tl.exp2", "tl.log2"]


def _is_float32(x: float) -> bool:
    return struct.unpack("<f", struct.pack("<f", x))[0] == x


def h100_record() -> dict:
    """The H100's exhaustive record, keyed to this machine (``load_record`` finds it here)."""
    record = json.loads(H100.read_text())
    assert record["mode"] == "exhaustive"
    record["key"] = dp.device_key()
    return record


def measured(record: dict) -> dict[str, float]:
    p = record["premises"]
    return {"tl.exp2": p["tl.exp2"]["measured"]["relative"], "tl.log2": p["tl.log2"]["measured"]}


def test_measured_constants_from_a_passing_record(tmp_path):
    record = h100_record()
    dp.save_record(record, tmp_path)
    got = dp.premise_constants(NAMES, "cuda", tmp_path)
    for name, assumed in (("tl.exp2", EXP2_ERROR), ("tl.log2", LOG2_ERROR)):
        m = measured(record)[name]
        assert m < got[name] <= m * (1 + 1e-4), (name, m, got[name])  # rounded up, and close
        assert got[name] < assumed / 3 and _is_float32(got[name])
    # the relative premise's absolute term is the record's 2^-126: the constant is the relative one
    assert got["tl.exp2"] < 1.5e-7 and got["tl.log2"] < 1e-6


def test_assumed_constants_without_a_record_on_the_cpu_or_when_a_premise_did_not_pass(tmp_path):
    assumed = {"tl.exp2": EXP2_ERROR, "tl.log2": LOG2_ERROR}
    assert dp.premise_constants(NAMES, "cuda", tmp_path) == assumed  # no record
    record = h100_record()
    dp.save_record(record, tmp_path)
    assert dp.premise_constants(NAMES, "cpu", tmp_path) == assumed  # the interpreter: as the CPU tests take them
    for change in (
        dict(status="FAIL"),
        dict(status="not checked"),
        dict(domain="float32 in [-1, 0]"),  # a record of another domain
    ):
        bad = copy.deepcopy(record)
        bad["premises"]["tl.exp2"].update(change)
        dp.save_record(bad, tmp_path)
        got = dp.premise_constants(NAMES, "cuda", tmp_path)
        assert got["tl.exp2"] == EXP2_ERROR, change
        assert got["tl.log2"] < LOG2_ERROR  # the other premise still measured
    bad = copy.deepcopy(record)
    del bad["premises"]["tl.log2"]
    dp.save_record(bad, tmp_path)
    assert dp.premise_constants(NAMES, "cuda", tmp_path)["tl.log2"] == LOG2_ERROR
    quick = dict(copy.deepcopy(record), mode="quick (sampled)")  # a sampled record is no check
    quick_dir = tmp_path / "quick"
    assert dp.save_record(quick, quick_dir).name.endswith("-quick.json")
    assert dp.premise_constants(NAMES, "cuda", quick_dir) == assumed


@pytest.mark.parametrize(
    "value",
    [0.0, 2.0**-23, 1.4396157080163296e-07, math.nextafter(2.0**-23, 0.0), 1e-6, LOG2_ERROR * (1 - 2.0**-30)],
)
def test_never_below_the_measured_nor_above_the_assumed(tmp_path, value):
    record = h100_record()
    record["premises"]["tl.exp2"]["measured"]["relative"] = min(value, EXP2_ERROR)
    record["premises"]["tl.log2"]["measured"] = value
    dp.save_record(record, tmp_path)
    got = dp.premise_constants(NAMES, "cuda", tmp_path)
    for name, assumed in (("tl.exp2", EXP2_ERROR), ("tl.log2", LOG2_ERROR)):
        m = measured(record)[name]
        assert m <= got[name] <= assumed and _is_float32(got[name]), (name, m, got[name])
        if got[name] < assumed:  # the margin over the float64 reference's error
            assert got[name] >= m + 2.0**-45
    # a "pass" measured above the assumed constant (a record of another assumption): the assumed one
    record["premises"]["tl.log2"]["measured"] = 2 * LOG2_ERROR
    dp.save_record(record, tmp_path)
    assert dp.premise_constants(NAMES, "cuda", tmp_path)["tl.log2"] == LOG2_ERROR


def test_bad_premise_name_raises():
    with pytest.raises(ValueError, match="names must be unary premises"):
        dp.premise_constants(["tl.exp3"], "cuda")


def test_unary_errors_reads_this_devices_record(tmp_path, monkeypatch):
    monkeypatch.setenv(dp.CACHE_ENV, str(tmp_path))
    record = h100_record()
    dp.save_record(record, tmp_path)
    want = dp.premise_constants(NAMES, "cuda")
    assert unary_errors("cuda", 16384) == dict(exp2_error=want["tl.exp2"], log2_error=want["tl.log2"])
    assert want["tl.exp2"] < EXP2_ERROR and want["tl.log2"] < LOG2_ERROR
    # row sums that can pass the checked log2 domain [1/2, 2^25]: the assumption; at 2^24 keys
    # already, since the theorems' (1 + bL) e^LN is slightly above 2 n_keys
    assert unary_errors("cuda", 2**24 - 1) == dict(exp2_error=want["tl.exp2"], log2_error=want["tl.log2"])
    for n_keys in (2**24, 2**24 + 1):
        assert unary_errors("cuda", n_keys) == dict(exp2_error=want["tl.exp2"], log2_error=LOG2_ERROR)
    assert unary_errors("cpu", 16384) == dict(exp2_error=EXP2_ERROR, log2_error=LOG2_ERROR)


def test_bounds_with_the_measured_constants_are_smaller_and_monotone(tmp_path):
    """S = 4096, E = 128, |q|, |k| <= 4 (normal inputs' range), bf16 tile 64: the lse and forward
    bounds at the H100's measured constants lie strictly between those at the assumed constants and
    at exact exp2 / log2."""
    record = h100_record()
    dp.save_record(record, tmp_path)
    c = dp.premise_constants(NAMES, "cuda", tmp_path)
    args = dict(block_n=64, max_abs_q=4.0, max_abs_k=4.0, qk_abs_sum=128 * 1.0)
    lse = {
        key: attention_lse_error_bound(4096, 128, exp2_error=e, log2_error=lg, **args)
        for key, e, lg in (
            ("assumed", EXP2_ERROR, LOG2_ERROR),
            ("measured", c["tl.exp2"], c["tl.log2"]),
            ("exact", 0.0, 0.0),
        )
    }
    assert lse["exact"] < lse["measured"] < lse["assumed"], lse
    for fn in (attention_forward_error_bound, attention_forward_posteriori_bound):
        extra = (torch.ones(1, dtype=torch.float64),) if fn is attention_forward_posteriori_bound else ()
        b = {
            e: float(
                torch.as_tensor(fn(*extra, 4096, 128, dtype=torch.bfloat16, max_abs_v=4.0, exp2_error=e, **args)).max()
            )
            for e in (EXP2_ERROR, c["tl.exp2"], 0.0)
        }
        assert b[0.0] <= b[c["tl.exp2"]] < b[EXP2_ERROR], (fn.__name__, b)


SPIED = (
    "attention_forward_error_bound",
    "attention_forward_posteriori_bound",
    "attention_lse_error_bound",
    "attention_dv_error_bound",
    "attention_dq_error_bound",
    "attention_dk_error_bound",
    "attention_grad_chain",
)


def test_every_attention_bound_takes_unary_errors(monkeypatch):
    """The bounds of ``attention_error`` (the GPU tests' tolerances, the benchmark's) take
    ``unary_errors``' constants: with the H100's measured ones in its place each is below the
    assumed constants' (here, in the interpreter, ``unary_errors`` returns those), entry by entry."""
    from ojas_kernels.attention import flash_attention_forward
    from ojas_ref.verification import attention_error as ae

    gen = torch.Generator().manual_seed(0)
    q, k, v, do = (torch.randn(1, 2, 40, 16, generator=gen) for _ in range(4))
    scale = 0.25
    out, lse = flash_attention_forward(q, k, v, True, scale, None)
    _, prob_abs_do = ae.exact_dv(q, k, do, True, scale)

    def bounds() -> dict[str, torch.Tensor]:
        got = dict(
            out=torch.tensor(ae.forward_error_bound(q, k, v, True, scale)),
            post=ae.forward_posteriori_bound(q, k, v, True, scale),
            lse=torch.tensor(ae.lse_error_bound(q, k, True, scale)),
            dv=ae.dv_error_bound(q, k, do, prob_abs_do, True, scale),
        )
        for inputs in ("proved", "measured"):
            g = ae.grad_error_bounds(q, k, v, do, out, lse, True, scale, inputs)
            got.update({f"{n}_{inputs}": g[f"{n}_bound"] for n in ("dq", "dk")})
        return got

    assert ae.unary_errors("cpu", 40) == dict(exp2_error=EXP2_ERROR, log2_error=LOG2_ERROR)
    old = bounds()
    record = h100_record()
    m = measured(record)
    monkeypatch.setattr(
        ae, "unary_errors", lambda device_type, n_keys: dict(exp2_error=m["tl.exp2"], log2_error=m["tl.log2"])
    )
    calls = []
    for fn in SPIED:  # every call of a bound passes the constants (a default would be the assumed one)

        def spy(*args, _fn=getattr(ae, fn), _name=fn, **kwargs):
            takes_log2 = _name in ("attention_lse_error_bound", "attention_grad_chain")
            calls.append((_name, kwargs.get("exp2_error"), kwargs.get("log2_error") if takes_log2 else m["tl.log2"]))
            return _fn(*args, **kwargs)

        monkeypatch.setattr(ae, fn, spy)
    new = bounds()
    assert {c[0] for c in calls} == set(SPIED)
    assert all(c[1:] == (m["tl.exp2"], m["tl.log2"]) for c in calls), calls
    for name in old:
        assert (new[name] <= old[name]).all() and (new[name] < old[name]).any(), name
