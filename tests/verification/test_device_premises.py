"""``ojas verify-device`` (ojas_ref/verification/device_premises.py) on the CPU.

The GPU run checks every float32 input of each premise's domain; here the same code runs on
small domains (every float32 in [1, 2], in float32 chunks built from bit patterns), with torch's
functions or Triton's interpreter as the device, and on fakes: a function off by 2^-18 fails
its premise, a truncating cast is identified as truncating, a fake dot that truncates (or
aligns to 25 bits, or is an FMA chain) is identified as such among the models of
rocq/FloatModel/TensorCoreSum.v, a fake tree sum is identified by its layout. The record
round-trips and is keyed by the versions; the CLI refuses clearly without CUDA.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from fractions import Fraction

import numpy as np
import pytest
import torch

from ojas_ref.verification import device_premises as dp

GEN = torch.Generator().manual_seed(0)


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.int32).to(torch.int64)


# ---------------------------------------------------------------------------
# Enumeration
# ---------------------------------------------------------------------------


def test_every_float32_in_one_to_two_once_in_order():
    """[1, 2] in chunks of 2^20: 2^23 + 1 values, each float32 once, in order (bit patterns
    consecutive), from 1 to 2."""
    xs = torch.cat(list(dp.float32_chunks(1.0, 2.0, device="cpu", chunk=1 << 20)))
    assert xs.numel() == (1 << 23) + 1 == dp.float32_count(1.0, 2.0)
    assert xs[0].item() == 1.0 and xs[-1].item() == 2.0
    assert bool((_bits(xs).diff() == 1).all())


def test_enumeration_signs_zeros_infinities_and_step():
    """Both zeros inside [-1, 1], the negative part by magnitude, -inf..0 has every non-positive
    float32 (2^31 - 2^23 + 2 patterns with both zeros and -inf); a coarse step keeps every step-th
    pattern; bad bounds are refused."""
    xs = torch.cat(list(dp.float32_chunks(-1.0, 1.0, device="cpu", step=1 << 16)))
    assert (xs == 0).sum() == 2 and xs.abs().max().item() <= 1.0
    assert dp.float32_count(-math.inf, 0.0) == (1 << 31) - (1 << 23) + 2
    assert dp.float32_count(-math.inf, math.inf) == (1 << 32) - (1 << 24) + 2
    assert dp.float32_count(1.0, 2.0, step=1 << 20) == 9
    with pytest.raises(ValueError, match="float32"):
        list(dp.float32_chunks(0.1, 1.0, device="cpu"))
    with pytest.raises(ValueError, match="lo must be <= hi"):
        dp.float32_count(2.0, 1.0)
    with pytest.raises(ValueError, match="step"):
        list(dp.float32_chunks(1.0, 2.0, device="cpu", step=0))


# ---------------------------------------------------------------------------
# Unary premises
# ---------------------------------------------------------------------------

EXP2 = dp.UnaryPremise("exp2", "test", 1.0, 2.0, True, 2.0**-21)


def test_exhaustive_scan_passes_a_good_function_and_fails_a_wrong_one():
    """Every float32 in [1, 2]: torch's float32 exp2 (within an ulp) holds 2^-21; the same off by
    2^-18 fails with that error measured at some input of the domain; a NaN counts as infinite."""
    good = dp.scan_unary(EXP2, torch.exp2, torch.exp2, device="cpu", chunk=1 << 21)
    assert good["passed"] and good["inputs"] == (1 << 23) + 1 and 0 < good["measured"] <= 2.0**-23
    bad = dp.scan_unary(EXP2, lambda x: torch.exp2(x) * (1 + 2.0**-18), torch.exp2, device="cpu", chunk=1 << 21)
    assert not bad["passed"] and bad["measured"] == pytest.approx(2.0**-18, rel=0.05)
    assert 1.0 <= bad["worst_input"] <= 2.0
    nan = dp.scan_unary(
        EXP2, lambda x: torch.where(x == 1.5, math.nan, torch.exp2(x)), torch.exp2, device="cpu", chunk=1 << 21
    )
    assert not nan["passed"] and nan["measured"] == math.inf and nan["worst_input"] == 1.5


def test_absolute_premise_and_the_below_normal_term():
    """An absolute premise (log2 on [1, 2]) and, for a relative one, the 2^-126 absolute term where
    the exact result is below the normal range: exp2 on [-140, -120] flushed to zero below 2^-126
    still passes; returning 2^-125 there fails."""
    log2 = dp.UnaryPremise("log2", "test", 1.0, 2.0, False, 2.0**-18)
    assert dp.scan_unary(log2, torch.log2, torch.log2, device="cpu", step=1 << 8)["passed"]
    wrong = dp.scan_unary(log2, lambda x: torch.log2(x) + 2.0**-17, torch.log2, device="cpu", step=1 << 8)
    assert not wrong["passed"]
    low = dp.UnaryPremise("exp2", "test", -140.0, -120.0, True, 2.0**-21)
    ftz = lambda x: torch.where(torch.exp2(x) < 2.0**-126, 0.0, torch.exp2(x))  # noqa: E731
    r = dp.scan_unary(low, ftz, torch.exp2, device="cpu", step=1 << 4)
    assert r["passed"] and 0 < r["measured_below_normal"] <= 2.0**-126
    lift = lambda x: torch.where(torch.exp2(x) < 2.0**-126, 2.0**-125, torch.exp2(x))  # noqa: E731
    assert not dp.scan_unary(low, lift, torch.exp2, device="cpu", step=1 << 4)["passed"]


def test_relative_premise_in_the_coq_form():
    """``|f(x) - 2^x| <= ue 2^x + 2^-126`` as ex_err states it: flushing to zero the results just
    above the normal range (below 2^-126 (1 + 2^-4)) costs a relative error of 1 there, yet holds
    the premise with ue = 1 - 1/(1 + 2^-4) = 1/17 (every float32 in [-126.2, -125.8])."""
    lo, hi = float(torch.tensor(-126.2)), float(torch.tensor(-125.8))
    premise = dp.UnaryPremise("exp2", "test", lo, hi, True, 2.0**-3)
    edge = 2.0**-126 * (1 + 2.0**-4)
    flush = lambda x: torch.where(torch.exp2(x.double()) < edge, 0.0, torch.exp2(x))  # noqa: E731
    r = dp.scan_unary(premise, flush, torch.exp2, device="cpu")
    assert r["passed"] and r["measured"] == pytest.approx(1 / 17, rel=1e-3) and r["inputs"] > 10000
    assert r["measured_below_normal"] <= 2.0**-126


@pytest.mark.interpreter
def test_interpreter_exp2_exhaustive_on_a_small_domain():
    """The attention kernels' tl.exp2 (the interpreter's numpy exp2) on every float32 in [-1, -0.99]:
    the chunked scan through the device function holds the assumed 2^-21."""
    pytest.importorskip("triton")
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("needs TRITON_INTERPRET=1")
    from ojas_ref.verification import attention_error as ae

    premise = dp.UnaryPremise("tl.exp2", "test", -1.0, -0.9921875, True, 2.0**-21)
    r = dp.scan_unary(
        premise, lambda x: ae._run_unary("exp2", x, torch.float32), torch.exp2, device="cpu", chunk=1 << 14
    )
    assert r["passed"] and r["inputs"] == dp.float32_count(-1.0, -0.9921875) == (1 << 17) + 1


# ---------------------------------------------------------------------------
# Casts
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cast_rounding_identified(dtype):
    """Over a sample of every float32 (and +-inf): torch's cast is round to nearest even (passes), a
    cast toward zero is identified as "truncate" (fails: the theorems' instances are nearest), one
    rounding away from zero as "neither"."""
    kw = dict(device="cpu", step=1 << 12, chunk=1 << 20)
    nearest = dp.scan_cast(lambda x: x.to(dtype), dtype, **kw)
    assert nearest == dict(inputs=dp.float32_count(-math.inf, math.inf, step=1 << 12), measured="nearest", passed=True)

    def toward_zero(x):
        y = x.to(dtype)
        down = y.to(torch.float64).abs() > x.to(torch.float64).abs()
        return (y.view(torch.int16) - down.to(torch.int16)).view(dtype)

    assert dp.scan_cast(toward_zero, dtype, **kw)["measured"] == "truncate"
    assert not dp.scan_cast(toward_zero, dtype, **kw)["passed"]

    def away(x):
        y = x.to(dtype)
        up = (y.to(torch.float64).abs() < x.to(torch.float64).abs()) & torch.isfinite(y)
        return (y.view(torch.int16) + up.to(torch.int16)).view(dtype)

    assert dp.scan_cast(away, dtype, **kw)["measured"] == "neither"


def test_bfloat16_truncation_is_the_upper_half():
    """scan_cast's truncation reference agrees with a second, independent definition (the upper
    16 bits of the float32 pattern) on a sample including subnormals and infinities."""

    def upper(x):
        return (_bits(x) >> 16).to(torch.int16).view(torch.bfloat16)

    r = dp.scan_cast(upper, torch.bfloat16, device="cpu", step=1 << 14, chunk=1 << 20)
    assert r["measured"] == "truncate" and r["inputs"] > 200000


# ---------------------------------------------------------------------------
# tl.sum's tree
# ---------------------------------------------------------------------------


def test_tree_identification_on_synthetic_sums():
    """Rows summed by the tree of one layout are matched by that layout (and its depth is
    (elements per thread - 1) + 5 + log2 warps), a left-to-right sum by none of the candidates."""
    from ojas_ref.verification.linear_cross_entropy_error import (
        _tree_sum,
        matching_tree_layouts,
        tree_depth,
        tree_layouts,
    )

    V = 512
    rows = [torch.exp(3 * torch.randn(64, V, generator=GEN)), torch.randn(64, V, generator=GEN)]
    layouts = tree_layouts(V)
    assert (4, 32, 2) in layouts and (1, 32, 16) in layouts and all(s * 32 * w <= V for s, _, w in layouts)
    truth = (2, 32, 4)
    sums = [_tree_sum(x, *truth) for x in rows]
    assert matching_tree_layouts(rows, sums, layouts) == [truth]
    assert tree_depth(V, truth) == 512 // 128 - 1 + 5 + 2
    seq = []
    for x in rows:
        acc = x[:, 0].clone()
        for j in range(1, V):
            acc = acc + x[:, j]
        seq.append(acc)
    assert matching_tree_layouts(rows, seq, layouts) == []


# ---------------------------------------------------------------------------
# tl.dot's accumulation
# ---------------------------------------------------------------------------

K = 16


def _fake(model):
    return lambda vectors: [dp.emulate_dot(model, a, b, c) for a, b, c in vectors]


def _vectors(fmt, random=48):
    v = dp.dot_test_vectors(K, fmt, random=random)
    return v[-random:] + v[:-random]


def test_emulated_dot_with_exact_alignment_is_one_rounding():
    """Blocks of K with exact alignment: the exact sum (Fractions) rounded once to float32: the
    nearest float32 for "nearest", the next one toward zero for "truncate"."""
    for a, b, c in _vectors("float32", 16)[:16]:
        exact = Fraction(c) + sum(Fraction(x) * Fraction(y) for x, y in zip(a, b))
        for out in ("nearest", "truncate"):
            got = dp.emulate_dot(dp.Accumulation(K, None, "trunc", out), a, b, c)
            g = np.float32(got)
            assert float(g) == got
            up, down = (float(np.nextafter(g, np.float32(s))) for s in (np.inf, -np.inf))
            if out == "nearest":
                assert abs(Fraction(got) - exact) <= min(abs(Fraction(up) - exact), abs(Fraction(down) - exact))
            else:
                away = up if exact > 0 else down
                assert abs(Fraction(got)) <= abs(exact) < abs(Fraction(away))


@pytest.mark.parametrize(
    "truth",
    [
        dp.Accumulation(8, 27, "trunc", "truncate"),  # the A100 of Fasi et al.: 3 extra bits, truncation
        dp.Accumulation(4, 25, "floor", "nearest"),
        dp.Accumulation(16, 24, "trunc", "truncate"),
    ],
    ids=str,
)
def test_fake_tensor_core_identified(truth):
    """A fake dot that accumulates as ``truth`` is identified as exactly that model among every
    candidate (block, kept bits, alignment cut, output rounding) on the test vectors."""
    got = dp.identify_accumulation(_fake(truth), _vectors("bfloat16"), dp.accumulation_candidates(K))
    assert got == [truth]


def test_fma_chain_identified_and_a_truncating_dot_is_not_it():
    """An FMA chain (IEEE float32 dots) is identified as one (first among the models it is
    indistinguishable from: one-product blocks aligned to 31+ bits); a truncating output is not."""
    cands = dp.accumulation_candidates(K)
    fma = dp.Accumulation(1, None, "trunc", "nearest")
    got = dp.identify_accumulation(_fake(fma), _vectors("float32"), cands)
    assert got[0] == fma and all(m.block == 1 and m.out == "nearest" and (m.bits or 99) >= 31 for m in got)
    assert got[0].describe() == "fma chain (round to nearest)"
    trunc = dp.identify_accumulation(_fake(dp.Accumulation(1, None, "trunc", "truncate")), _vectors("float32"), cands)
    assert fma not in trunc and all(m.out == "truncate" for m in trunc)


def test_operand_exponent_reference_keeps_one_more_bit_under_a_large_product():
    """``ref="operands"`` (the H100) aligns to the operands' exponent sum: under ``1.5 * 1.5 = 2.25``
    (exponent sum 0, leading bit 2^1) 26 bits reach down to 2^-25, where the largest term's leading
    bit keeps them down to 2^-24; fifteen terms ``1.5 * 2^-25`` then add 2^-22 (one float32 ulp of
    2.25 after truncation) or nothing. The probes of :func:`dot_test_vectors` hold that vector and
    the two models agree on every probe whose products are below 2 (b = 1); a bad ``ref`` is refused."""
    hopper = dp.Accumulation(16, 26, "trunc", "truncate", "operands")
    term = dataclasses.replace(hopper, ref="term")
    a, b = [1.5] + [1.5 * 2.0**-25] * 15, [1.5] + [1.0] * 15
    assert dp.emulate_dot(hopper, a, b, 0.0) == 2.25 + 2.0**-22
    assert dp.emulate_dot(term, a, b, 0.0) == 2.25
    probes = dp.dot_test_vectors(K, "bfloat16", random=0)
    assert (a, b, 0.0) in probes
    assert all(dp.emulate_dot(hopper, *v) == dp.emulate_dot(term, *v) for v in probes if max(v[1]) == 1.0)
    assert (
        hopper.describe()
        == "blocks of 16, aligned to 26 bits of the largest operand exponent sum (trunc), output truncate"
    )
    with pytest.raises(ValueError, match="ref must be"):
        dp.Accumulation(16, 26, "trunc", "truncate", "operand")


def test_unmodelled_dot_matches_nothing():
    """A dot no candidate describes (a modelled one, then scaled by 1 + 2^-20) leaves no model."""
    model = dp.Accumulation(4, 27, "trunc", "nearest")
    noisy = lambda vs: [y * (1 + 2.0**-20) for y in _fake(model)(vs)]  # noqa: E731
    assert dp.identify_accumulation(noisy, _vectors("bfloat16"), dp.accumulation_candidates(K)) == []


def test_tf32_reading_identified():
    """A TF32 product's reading of a float32 operand: truncation, round to nearest even or ties
    away identified bit for bit on a sample of [1, 2) (odd step: the low bits vary); reading it
    exactly is none of them; inputs whose low 13 bits are 0 do not tell them apart."""
    x = torch.cat(list(dp.float32_chunks(1.0, 2.0 - 2.0**-23, device="cpu", step=(1 << 4) + 1)))
    for mode in ("trunc", "rne", "rna"):
        assert dp.tf32_readings(lambda t, mode=mode: dp._round_bits(t, 11, mode), x) == {mode}
    assert dp.tf32_readings(lambda t: t, x) == set()
    coarse = torch.cat(list(dp.float32_chunks(1.0, 2.0 - 2.0**-23, device="cpu", step=1 << 13)))
    assert dp.tf32_readings(lambda t: dp._round_bits(t, 11, "trunc"), coarse) == {"trunc", "rne", "rna"}
    assert dp._round_bits(torch.tensor([1.0 + 2.0**-11]), 11, "rne").item() == 1.0
    assert dp._round_bits(torch.tensor([1.0 + 2.0**-11]), 11, "rna").item() == 1.0 + 2.0**-10


def test_tf32_reading_probes_tell_the_readings_apart():
    """The probes that join every TF32 reading check are in +-[1, 2) and identify each reading on
    their own, and with the quick mode's strided sample (whose low 13 bits stay below half, so that
    alone it cannot tell the readings apart: the H100 run of 2026-12-06 found "rna/rne/trunc")."""
    probes = dp.tf32_reading_probes("cpu")
    assert bool(((probes.abs() >= 1) & (probes.abs() < 2)).all()) and bool((probes < 0).any())
    quick = torch.cat(list(dp.float32_chunks(1.0, 2.0 - 2.0**-23, device="cpu", step=dp._step(1.0, 2.0, True, 1024))))
    assert dp.tf32_readings(lambda t: dp._round_bits(t, 11, "trunc"), quick) == {"trunc", "rne", "rna"}
    for mode in ("trunc", "rne", "rna"):
        read = lambda t, mode=mode: dp._round_bits(t, 11, mode)  # noqa: E731
        assert dp.tf32_readings(read, probes) == {mode}
        assert dp.tf32_readings(read, torch.cat([quick, probes])) == {mode}


def test_tf32x3_emulation_within_the_split_bound():
    """The 3xTF32 dot of Tf32Product.v (rna high parts, truncated low parts, FMA-chain
    accumulation) is within c + gamma(3n) kl + gamma(n) kh of sum |x_i y_i| of the exact dot
    (``tf32x3_dot_seq_error_fp32``), and not exact on every vector (the dropped lo.lo)."""
    fma = dp.Accumulation(1, None, "trunc", "nearest")
    u, n = 2.0**-24, K
    gamma = lambda m: m * u / (1 - m * u)  # noqa: E731
    c3 = 5 * 2.0**-22 + 2.0**-31
    kl, kh = 2.0**-10 * (1 + 2.0**-10) * (1 + 2.0**-11), (1 + 2.0**-11) ** 2
    bound = c3 + gamma(3 * n - 1) * kl + gamma(n) * kh
    inexact = 0
    for a, b, c in _vectors("float32", 32)[:32]:
        got = dp.emulate_tf32x3(fma, "trunc", "chain(c)", (0, 1, 2), a, b, 0.0)
        exact = sum(Fraction(x) * Fraction(y) for x, y in zip(a, b))
        assert abs(Fraction(got) - exact) <= Fraction(bound) * sum(abs(Fraction(x) * Fraction(y)) for x, y in zip(a, b))
        inexact += Fraction(got) != exact
    assert inexact > 0


# ---------------------------------------------------------------------------
# The record
# ---------------------------------------------------------------------------

KEY = dict(gpu="NVIDIA H100 80GB HBM3", driver="550.54.15", cuda="12.4", torch="2.6.0", triton="3.2.0")


def _record(status="pass", mode="exhaustive", key=KEY):
    entry = dict(name="tl.exp2", theorem="t", domain="d", inputs=3, assumed=1.0, measured=0.5, status=status)
    return dict(key=key, date="2026-12-06", ojas_commit="abc", mode=mode, premises={"tl.exp2": entry})


def test_record_round_trips_and_is_keyed_by_versions(tmp_path, monkeypatch):
    path = dp.save_record(_record(), tmp_path)
    assert path.parent == tmp_path and json.loads(path.read_text())["key"] == KEY
    assert dp.load_record(tmp_path, key=KEY) == _record()
    for field in KEY:
        assert dp.load_record(tmp_path, key={**KEY, field: KEY[field] + "x"}) is None, field
    assert dp.load_record(tmp_path, key=KEY, quick=True) is None  # a quick record is another file
    dp.save_record(_record(mode="quick (sampled)"), tmp_path)
    assert dp.load_record(tmp_path, key=KEY, quick=True)["mode"] == "quick (sampled)"
    assert dp.load_record(tmp_path, key=KEY)["mode"] == "exhaustive"
    monkeypatch.setenv(dp.CACHE_ENV, str(tmp_path / "env"))
    assert dp.cache_dir() == tmp_path / "env" and dp.cache_dir(tmp_path) == tmp_path
    monkeypatch.delenv(dp.CACHE_ENV)
    assert dp.cache_dir() == dp.Path("~/.cache/ojas/device").expanduser()


def test_checked_premises_skips_without_a_record_and_fails_on_a_failed_premise(tmp_path, monkeypatch):
    monkeypatch.setattr(dp, "device_key", lambda: KEY)
    with pytest.raises(dp.PremisesNotChecked, match="ojas verify-device"):
        dp.checked_premises(["tl.exp2"], tmp_path)
    dp.save_record(_record(), tmp_path)
    assert dp.checked_premises(["tl.exp2"], tmp_path)["tl.exp2"]["measured"] == 0.5
    with pytest.raises(dp.PremisesNotChecked, match="tl.log2"):
        dp.checked_premises(["tl.exp2", "tl.log2"], tmp_path)
    dp.save_record(_record("FAIL"), tmp_path)
    with pytest.raises(dp.PremiseFailed, match="tl.exp2"):
        dp.checked_premises(["tl.exp2"], tmp_path)
    dp.save_record(_record("not checked"), tmp_path)
    with pytest.raises(dp.PremisesNotChecked):
        dp.checked_premises(["tl.exp2"], tmp_path)
    assert dp.failed(_record("FAIL")) == ["tl.exp2"] and dp.failed(_record()) == []
    table = dp.format_table(_record())
    assert "tl.exp2" in table and "assumed" in table and "pass" in table


# ---------------------------------------------------------------------------
# The CLI
# ---------------------------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
@pytest.mark.parametrize("argv", [["verify-device"], ["verify-device", "--quick"]])
def test_cli_refuses_without_cuda(argv, monkeypatch, capsys, tmp_path):
    """Without CUDA, and for --quick without TRITON_INTERPRET=1: exit 2, saying it checks a CUDA GPU;
    no record written; verify_device itself refuses the exhaustive mode."""
    from ojas_ref.tools.cli import main

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert main(argv + ["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "CUDA GPU" in err and "TRITON_INTERPRET=1 ojas verify-device --quick" in err
    assert not list(tmp_path.iterdir())
    with pytest.raises(RuntimeError, match="CUDA GPU"):
        dp.verify_device()
    with pytest.raises(ValueError, match="softcaps"):
        dp.verify_device(quick=True, softcaps=(0.0,))


@pytest.mark.interpreter
@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter's smoke test")
def test_cli_quick_in_the_interpreter(monkeypatch, capsys, tmp_path):
    """--quick in Triton's interpreter: the table of every premise, the record written (quick), and
    exit 1: the interpreter's bf16 cast is not round to nearest and the sum tree is not checked
    there (CUDA only), which the table says."""
    pytest.importorskip("triton")
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("needs TRITON_INTERPRET=1")
    from ojas_ref.tools.cli import main

    assert main(["verify-device", "--quick", "--out", str(tmp_path), "--softcap", "30"]) == 1
    out = capsys.readouterr().out
    for name in ("tl.exp2", "tl.log", "softcap tanh c=30", "cast float32->bfloat16", "tl.dot bfloat16"):
        assert name in out
    assert "not checked" in out and "do not hold or were not checked" in out
    (path,) = tmp_path.iterdir()
    record = json.loads(path.read_text())
    assert record["mode"].startswith("quick") and path.name.endswith("-quick.json")
    p = record["premises"]
    assert p["tl.exp2"]["status"] == "pass" and p["tl.exp2"]["exp2_0_is_1"]
    assert p["tl.sum tree rows float32"]["status"] == "not checked"
    assert p["cast float32->bfloat16"]["status"] == "FAIL"


# ---------------------------------------------------------------------------
# ojas audit
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("record, code", [(None, 3), ("FAIL", 1), ("pass", 0)])
def test_audit_on_a_gpu_reads_the_record(record, code, monkeypatch, capsys):
    """``ojas audit`` on a CUDA machine (stubbed: no implementation, proofs fine): without this
    device's record INCOMPLETE (exit 3) and with a failed premise PROBLEMS FOUND (exit 1), both
    saying the float bounds are not proved on this device; OK only when the record passes."""
    from ojas_ref.verification import audit

    monkeypatch.setattr(audit.pa, "require_sources", lambda: None)
    monkeypatch.setattr(audit, "proof_status", lambda: ({}, True))
    monkeypatch.setattr(audit, "implementations", lambda: [])
    monkeypatch.setattr(audit, "ensure_oracle", lambda: None)
    monkeypatch.setattr(audit.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(dp, "device_key", lambda: KEY)
    monkeypatch.setattr(dp, "load_record", lambda *a, **k: None if record is None else _record(record))
    assert audit.run() == code
    out = capsys.readouterr().out
    last = out.splitlines()[-1]
    if record is None:
        assert "NOT proved on this device" in out and "ojas verify-device" in out
        assert (
            last
            == "audit: INCOMPLETE: every check that ran held; the device premises were not checked (run `ojas verify-device`)"
        )
    elif record == "FAIL":
        assert "NOT proved on this device" in out and "tl.exp2" in out and last == "audit: PROBLEMS FOUND (see above)"
    else:
        assert "1 device premises hold on NVIDIA H100" in out and last == "audit: OK"


def test_audit_without_cuda_says_the_premises_concern_a_gpu(monkeypatch):
    from ojas_ref.verification import audit

    monkeypatch.setattr(audit.torch.cuda, "is_available", lambda: False)
    status, note = audit.device_premise_status()
    assert status == "n/a" and "GPU" in note


@pytest.mark.gpu
def test_quick_run_on_the_gpu_holds_every_premise():
    """On a CUDA GPU, the quick mode (sampled domains, every identification) runs every check (none
    "not checked"), identifies the bf16 cast as round to nearest even, and every premise holds; the
    table is printed (-s)."""
    record = dp.verify_device(quick=True, softcaps=(30.0,))
    print(dp.format_table(record))
    p = record["premises"]
    assert all(e["status"] in ("pass", "FAIL") for e in p.values())
    assert p["cast float32->bfloat16"]["measured"] == "nearest"
    assert dp.failed(record) == [], {name: p[name]["measured"] for name in dp.failed(record)}


def test_tf32x3_schedule_identified():
    """A fake 3xTF32 dot that chains the three TF32 dots from 0 and adds the accumulator last (later
    Triton versions) is told apart from one that starts from the accumulator (Tf32Product.v's
    reading), with the TF32 model it was built from."""
    model = dp.Accumulation(4, 25, "trunc", "truncate")
    vectors = _vectors("float32", 24)[:24]
    for schedule in ("chain(0)+c", "chain(c)"):

        def fake(vs, schedule=schedule):
            return [dp.emulate_tf32x3(model, "trunc", schedule, (0, 1, 2), a, b, c) for a, b, c in vs]

        got = dp.identify_tf32x3(fake, vectors, [model, dp.Accumulation(1, None, "trunc", "nearest")], "trunc")
        assert {(g["schedule"], tuple(g["order"])) for g in got} <= {(schedule, o) for o in dp._TF32X3_ORDERS}
        assert dict(model=dataclasses.asdict(model), schedule=schedule, order=[0, 1, 2]) in got
    with pytest.raises(ValueError, match="schedule"):
        dp.emulate_tf32x3(model, "trunc", "other", (0, 1, 2), [1.0], [1.0], 0.0)


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_device_dot_probe_in_the_interpreter(dtype):
    """The tl.dot probe returns each vector's ``c + a . b`` (37 vectors: the last tile padded), within
    float32 rounding of the float64 dot of the same (rounded) inputs; bad arguments refused."""
    pytest.importorskip("triton")
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("needs TRITON_INTERPRET=1")
    a, b = (torch.randn(37, 32, generator=GEN).to(dtype) for _ in range(2))
    c = torch.randn(37, generator=GEN)
    got = dp.device_dot(a, b, c, "ieee").double()
    exact = c.double() + (a.double() * b.double()).sum(1)
    scale = c.double().abs() + (a.double() * b.double()).abs().sum(1)
    assert got.shape == (37,) and bool(((got - exact).abs() <= 33 * 2.0**-24 * scale).all())
    with pytest.raises(ValueError, match="precision"):
        dp.device_dot(a, b, c, "tf64")
    with pytest.raises(ValueError, match="a, b"):
        dp.device_dot(a, b[:, :16], c, "ieee")


def test_a_check_that_raises_is_recorded_as_failed_and_the_others_run(monkeypatch):
    """One kind of check crashing (here the casts) becomes a FAIL entry with the error; the checks
    after it still run (the sum trees: not checked on the CPU)."""

    def crash(*args):
        raise RuntimeError("compilation failed")
        yield

    monkeypatch.setattr(dp, "_check_unaries", lambda *a: iter([dp._entry("u", "t", "d", 1, 1.0, 0.5, True)]))
    monkeypatch.setattr(dp, "_check_casts", crash)
    monkeypatch.setattr(dp, "_check_dots", lambda *a: iter([]))
    record = dp.verify_device(quick=True, log=lambda m: None)
    p = record["premises"]
    assert p["u"]["status"] == "pass"
    assert p["casts: error"]["status"] == "FAIL" and p["casts: error"]["measured"] == "RuntimeError: compilation failed"
    assert p["tl.sum tree rows float32"]["status"] == ("pass" if torch.cuda.is_available() else "not checked")
    assert dp.failed(record)[0] == "casts: error"


H100_TF32 = dp.Accumulation(8, 26, "trunc", "truncate", "operands")  # the H100 record's "tl.dot float32 tf32"
K_DOT = 32  # verify-device's tl.dot vectors


def _together(vectors, model, read="trunc"):
    """The pairs of ``model``'s 3xTF32 candidates that no vector tells apart."""
    cands = dp.tf32x3_candidates(model)
    got = {c: [dp.emulate_tf32x3(model, read, *c, *v) for v in vectors] for c in cands}
    return [(x, y) for i, x in enumerate(cands) for y in cands[i + 1 :] if got[x] == got[y]]


def test_tf32x3_probes_separate_every_two_chainings():
    """The H100 record's tf32x3 row left "chain(0)+c" in the orders [0, 1, 2] and [1, 0, 2] together
    (the 256 random vectors of K = 32 could not tell them apart: the high dot's alignment drops the
    low dots' last bits); the probes tell every two candidates apart, for that model and two others
    (blocks of 4 with 25 bits from the largest term, the fma chain), with a few vectors each."""
    old = dp.dot_test_vectors(K_DOT, "float32", random=256, seed=1)[-256:]
    pair = [("chain(0)+c", (0, 1, 2)), ("chain(0)+c", (1, 0, 2))]
    assert len({tuple(dp.emulate_tf32x3(H100_TF32, "trunc", *c, *v) for v in old) for c in pair}) == 1
    models = [H100_TF32, dp.Accumulation(4, 25, "trunc", "truncate"), dp.Accumulation(1, None, "trunc", "nearest")]
    probes = dp.tf32x3_probe_vectors(K_DOT, models, "trunc")
    assert 0 < len(probes) <= 32 and probes == dp.tf32x3_probe_vectors(K_DOT, models, "trunc")
    assert all(len(a) == len(b) == K_DOT for a, b, _ in probes)
    for model in models:
        assert len(dp.tf32x3_candidates(model)) == 16
        assert _together(probes, model) == [], model


def test_tf32x3_each_chaining_identified_exactly():
    """A fake 3xTF32 dot built from any one candidate (the H100 TF32 model) is identified as that
    candidate and no other, on a few random vectors with the probes."""
    vectors = dp.dot_test_vectors(K_DOT, "float32", random=8, seed=1)[-8:]
    vectors += dp.tf32x3_probe_vectors(K_DOT, [H100_TF32], "trunc")
    for schedule, order in dp.tf32x3_candidates(H100_TF32):

        def fake(vs, schedule=schedule, order=order):
            return [dp.emulate_tf32x3(H100_TF32, "trunc", schedule, order, a, b, c) for a, b, c in vs]

        got = dp.identify_tf32x3(fake, vectors, [H100_TF32], "trunc")
        assert got == [dict(model=dataclasses.asdict(H100_TF32), schedule=schedule, order=list(order))]


def test_tf32x3_probes_refuse_when_they_cannot_separate():
    """Too few tries to tell the candidates apart is an error naming them, not a silent probe set;
    K < 2 (no cancelling pair) is refused."""
    with pytest.raises(RuntimeError, match="leave 3xTF32 candidates together"):
        dp.tf32x3_probe_vectors(K_DOT, [H100_TF32], "trunc", tries=2)
    with pytest.raises(ValueError, match="k must be >= 2"):
        dp.tf32x3_probe_vectors(1, [H100_TF32], "trunc")


def test_record_commit_is_the_snapshots_when_set(monkeypatch):
    """A snapshot run inside another checkout (the device machine) records $OJAS_RECORD_COMMIT, not
    the surrounding checkout's HEAD (a record of 2026-12-06 named the wrong commit without it)."""
    monkeypatch.setenv("OJAS_RECORD_COMMIT", "08e1907")
    assert dp._commit() == "08e1907"
    monkeypatch.delenv("OJAS_RECORD_COMMIT")
    assert dp._commit() != "08e1907"
