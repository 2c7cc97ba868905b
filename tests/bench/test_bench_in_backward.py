"""benchmarks/bench_in_backward.py on the CPU: a quick run appends its records as benchmark
bench_in_backward; docs/benchmarks.md (benchmarks/report.py) shows them and the records written
as bench_optimizer_in_backward before the rename as one benchmark."""

from __future__ import annotations


import pytest

from benchmarks import bench_in_backward as bench
from benchmarks import records, report

ENV = dict(commit="abc1234", device_name="NVIDIA H200", versions={"torch": "2.11.0"})


def test_quick_run_appends_records(tmp_path):
    path = tmp_path / "records.jsonl"
    quick = ["--quick", "--device", "cpu", "--dtypes", "fp32", "--optimizers", "sgd", "--checkpoint", "off"]
    bench.main([*quick, "--warmup", "1", "--steps", "1", "--bucket-mb", "0", "64", "--records", str(path)])
    rows = records.read(path)
    assert [(r["benchmark"], r["peer"], r["case"]["bucket_mb"]) for r in rows] == [
        ("bench_in_backward", "standard", 0.0),
        ("bench_in_backward", "ojas", 0.0),
        ("bench_in_backward", "standard", 64.0),
        ("bench_in_backward", "ojas", 64.0),
    ]
    standard, ojas = rows[:2]
    assert standard["case"] == ojas["case"]
    assert {k: standard["case"][k] for k in ("dtype", "optimizer", "checkpoint", "state_device", "steps")} == dict(
        dtype="fp32", optimizer="sgd", checkpoint=False, state_device="device", steps=1
    )
    # on the CPU no memory is measured; the tokens/s are the step's
    assert set(standard["metrics"]) == {"step_ms", "tokens_per_s", "optimizer_calls"}
    assert set(ojas["metrics"]) == {"step_ms", "tokens_per_s", "optimizer_calls", "max_param_diff"}
    tokens = bench.QUICK.batch * bench.QUICK.seq
    assert ojas["metrics"]["tokens_per_s"] == pytest.approx(tokens / (ojas["metrics"]["step_ms"] / 1e3))
    assert standard["metrics"]["optimizer_calls"] == 1 and ojas["metrics"]["optimizer_calls"] > 1
    assert ojas["metrics"]["max_param_diff"] < 1e-6


def test_report_shows_the_old_name_as_the_new_benchmark(tmp_path):
    path = tmp_path / "r.jsonl"
    case = dict(dtype="bf16", optimizer="adamw", checkpoint=True)
    for date, name in (("2026-11-29", "bench_optimizer_in_backward"), ("2026-12-07", "bench_in_backward")):
        records.append(name, case, {"peak_gib": 10.0, "step_ms": 300.0}, "standard", path=path, date=date, **ENV)
        records.append(name, case, {"peak_gib": 8.0, "step_ms": 330.0}, "ojas", path=path, date=date, **ENV)
    rows = records.read(path)
    report.report(rows, tmp_path / "benchmarks.md", tmp_path / "images")
    text = (tmp_path / "benchmarks.md").read_text()
    assert text.count("## bench_") == 1 and "## bench_in_backward" in text
    assert "(#bench_in_backward)" in text and "#bench_optimizer_in_backward" not in text
    assert text.index("2026-12-07, commit") < text.index("2026-11-29, commit")  # both runs, newest first
    assert text.count("| ojas | 8.00 | 330.00 | 0.800x | 1.100x |") == 2
    # the records keep the name they were written with
    assert [r["benchmark"] for r in records.read(path)] == ["bench_optimizer_in_backward"] * 2 + [
        "bench_in_backward"
    ] * 2
