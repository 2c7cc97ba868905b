"""The tensor-core accumulation of ``tl.dot`` identified on an H100 (issue 28 items 2-3), on the CPU.

tests/verification/data/tensor_core_h100.json holds rows measured on an H100 80GB HBM3 (2026-12-06,
torch 2.11, Triton 3.6, 64 x 64 tiles of ``device_dot``; K = 16, 32, 64): ``a``, ``b``, ``c`` and
the device's float32 ``y`` as float32 bit patterns, chosen from the Fasi-style probes, random and
cancellation vectors so that each candidate model other than the identified one fails on one of
them. The identified models (:class:`Accumulation`'s docstring) reproduce every row bit for bit;
the models tried before (aligned to the largest term's leading bit) fail.
"""

from __future__ import annotations

import dataclasses
import json
import struct
from pathlib import Path

import pytest

from ojas_ref.verification import device_premises as dp

DATA = Path(__file__).parent / "data" / "tensor_core_h100.json"
#: The models identified on the H100, per operand label of the fixture.
H100 = {
    "bf16": dp.Accumulation(16, 26, "trunc", "truncate", "operands"),
    "tf32": dp.Accumulation(8, 26, "trunc", "truncate", "operands"),
    "f32ieee": dp.Accumulation(1, None, "trunc", "nearest"),
}


def _floats(hexes: str) -> list[float]:
    return [struct.unpack("<f", bytes.fromhex(hexes[i : i + 8])[::-1])[0] for i in range(0, len(hexes), 8)]


@pytest.fixture(scope="module")
def rows() -> dict[str, tuple[list, list[float]]]:
    """key ("bf16-k16", ...) -> (vectors (a, b, c), the device's results), the random and
    cancellation rows first (most models fail on one of those at once)."""
    data = json.loads(DATA.read_text())
    out = {}
    for key, entry in data["rows"].items():
        rs = sorted(entry, key=lambda r: r["kind"] == "fasi")
        vectors = [(_floats(r["a"]), _floats(r["b"]), _floats(r["c"])[0]) for r in rs]
        out[key] = vectors, [_floats(r["y"])[0] for r in rs]
    return out


def _keys(label: str) -> list[str]:
    return [f"{label}-k{k}" for k in (16, 32, 64)]


def test_fixture_holds_every_label_and_k(rows):
    assert sorted(rows) == sorted(k for label in ("bf16", "f32ieee", "tf32", "tf32x3") for k in _keys(label))
    for key, (vectors, ys) in rows.items():
        k = int(key.rsplit("k", 1)[1])
        assert len(vectors) == len(ys) >= 10 and all(len(a) == len(b) == k for a, b, _ in vectors)


@pytest.mark.parametrize("label", ["bf16", "tf32", "f32ieee"])
def test_identified_model_reproduces_the_device_rows_and_is_the_only_candidate(rows, label):
    """Every row bit for bit; among all candidates (blocks 1 to 32: verify-device's K = 32 check)
    only the identified model (and, at K = 16, the same model with blocks of 32, which one
    instruction cannot tell apart)."""
    model = H100[label]
    for key in _keys(label):
        vectors, ys = rows[key]
        assert [dp.emulate_dot(model, a, b, c) for a, b, c in vectors] == ys, key
        got = dp.identify_accumulation(lambda vs, ys=ys: ys, vectors, dp.accumulation_candidates(32))
        same = [model] if key != "bf16-k16" else [model, dataclasses.replace(model, block=32)]
        assert got == same, (key, got)


@pytest.mark.parametrize("label", ["bf16", "tf32"])
def test_the_models_aligned_to_the_largest_term_fail(rows, label):
    """The candidates tried before (blocks 1..K, exact or 23..35 bits from the largest term's leading
    bit, trunc / floor, nearest / truncate) each fail on a row; the nearest one (the identified
    block and bits, aligned to the largest term) matches the Fasi probes, whose products are below 2,
    and fails on a random row."""
    old = [m for m in dp.accumulation_candidates(64) if m.ref == "term"]
    near = dataclasses.replace(H100[label], ref="term")
    for key in _keys(label):
        vectors, ys = rows[key]
        assert dp.identify_accumulation(lambda vs, ys=ys: ys, vectors, old) == [], key
    vectors, ys = rows[f"{label}-k32"]
    dataset = json.loads(DATA.read_text())["rows"][f"{label}-k32"]
    fasi = [i for i, r in enumerate(sorted(dataset, key=lambda r: r["kind"] == "fasi")) if r["kind"] == "fasi"]
    assert fasi and all(dp.emulate_dot(near, *vectors[i]) == ys[i] for i in fasi)
    assert any(dp.emulate_dot(near, *v) != y for v, y in zip(vectors, ys))


def test_tf32x3_is_three_chained_tf32_dots_from_zero_then_the_accumulator(rows):
    """The "tf32x3" dot: the three TF32 dots (lo a . hi b, hi a . lo b, hi a . hi b) chained from 0 with the
    H100's TF32 model, the low parts read by truncation, then ``+ c`` in float32 (Triton 3.6's
    F32DotTC): every row bit for bit, the only schedule and order that does; with the models tried
    before, no schedule matches."""
    for key in _keys("tf32x3"):
        vectors, ys = rows[key]
        got = [dp.emulate_tf32x3(H100["tf32"], "trunc", "chain(0)+c", (0, 1, 2), a, b, c) for a, b, c in vectors]
        assert got == ys, key
        found = dp.identify_tf32x3(lambda vs, ys=ys: ys, vectors, [H100["tf32"]], "trunc")
        assert found == [dict(model=dataclasses.asdict(H100["tf32"]), schedule="chain(0)+c", order=[0, 1, 2])], key
    vectors, ys = rows["tf32x3-k32"]
    old = [m for m in dp.accumulation_candidates(8) if m.ref == "term"]
    assert dp.identify_tf32x3(lambda vs: ys, vectors, old, "trunc") == []
