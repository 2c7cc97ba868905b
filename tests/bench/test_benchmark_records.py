"""benchmarks/records.py: the one benchmark record format (CPU)."""

import json

import pytest

from benchmarks import records

CASE = {"dtype": "bf16", "batch": 1}
ENV = dict(date="2026-12-01", commit="abc1234", device_name="NVIDIA H200", versions={"torch": "2.11.0"})


def test_append_then_read_round_trip(tmp_path):
    path = tmp_path / "r.jsonl"
    a = records.append("bench_x", CASE, {"tokens_per_s": 100.0, "peak_gib": 2.5}, "ojas", path=path, **ENV)
    b = records.append("bench_x", CASE, {"tokens_per_s": 80}, "liger", path=path, **ENV)
    assert path.read_text().count("\n") == 2
    assert records.read(path) == [a, b]
    assert a == dict(
        date="2026-12-01",
        commit="abc1234",
        device="NVIDIA H200",
        versions={"torch": "2.11.0"},
        benchmark="bench_x",
        case=CASE,
        metrics={"tokens_per_s": 100.0, "peak_gib": 2.5},
        peer="ojas",
    )
    assert records.read(path, benchmark="bench_y") == []


def test_append_collects_the_environment(tmp_path):
    path = tmp_path / "r.jsonl"
    r = records.append("bench_x", CASE, {"ms": 1.0}, "torch", path=path, device="cpu")
    assert r["device"].startswith("cpu")
    assert r["versions"]["torch"] and r["versions"]["python"]
    assert len(r["commit"]) >= 7
    assert r["date"] == records.environment("cpu")["date"]


@pytest.mark.parametrize("field", records.FIELDS)
def test_a_missing_field_is_refused(tmp_path, field):
    record = dict(
        date="2026-12-01",
        commit="abc",
        device="cpu",
        versions={},
        benchmark="b",
        case={},
        metrics={"ms": 1.0},
        peer="p",
    )
    records.validate(record)
    del record[field]
    with pytest.raises(ValueError, match=f"missing required field.*'{field}'"):
        records.validate(record)
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(ValueError, match="r.jsonl:1: record is missing"):
        records.read(path)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(date="01/12/2026"), "ISO date"),
        (dict(metrics={}), "non-empty mapping"),
        (dict(metrics={"ms": "1.0"}), "metric 'ms' must be a finite number"),
        (dict(metrics={"ms": float("nan")}), "metric 'ms' must be a finite number"),
        (dict(metrics={"ok": True}), "metric 'ok' must be a finite number"),
        (dict(versions={"torch": 2.11}), "versions"),
        (dict(peer=""), "'peer' must be a non-empty string"),
        (dict(extra=1), "unknown field"),
    ],
)
def test_bad_values_are_refused(change, message):
    record = (
        dict(
            date="2026-12-01",
            commit="abc",
            device="cpu",
            versions={},
            benchmark="b",
            case={},
            metrics={"ms": 1.0},
            peer="p",
        )
        | change
    )
    with pytest.raises(ValueError, match=message):
        records.validate(record)


def test_append_refuses_an_unknown_keyword(tmp_path):
    with pytest.raises(TypeError, match="unexpected keyword"):
        records.append("b", CASE, {"ms": 1.0}, "p", path=tmp_path / "r.jsonl", dtae="2026-12-01", **ENV)
    assert not (tmp_path / "r.jsonl").exists()


def test_ratios_within_each_comparison(tmp_path):
    path = tmp_path / "r.jsonl"
    for peer, tps in (("hf", 100.0), ("liger", 125.0), ("ojas", 150.0)):
        records.append("bench_x", CASE, {"tokens_per_s": tps}, peer, path=path, **ENV)
    other = dict(CASE, batch=4)  # another case: its own comparison, without a liger record
    records.append("bench_x", other, {"tokens_per_s": 300.0}, "ojas", path=path, **ENV)
    records.append("bench_x", other, {"tokens_per_s": 200.0}, "hf", path=path, **ENV)
    rows = records.read(path)
    to_hf = [ratio for _, ratio in records.ratios(rows, "tokens_per_s", "hf")]
    assert to_hf == [1.0, 1.25, 1.5, 1.5, 1.0]
    # the best of several peers: the fastest of hf and liger
    to_fastest = [ratio for _, ratio in records.ratios(rows, "tokens_per_s", ["hf", "liger"])]
    assert to_fastest == [0.8, 1.0, 1.2, 1.5, 1.0]
    # the fastest peer's peak: the baseline record chosen by another metric
    records.append("bench_x", CASE, {"tokens_per_s": 10.0, "peak_gib": 1.0}, "slow", path=path, **ENV)
    rows = records.read(path)
    peaks = records.ratios(rows, "peak_gib", ["hf", "liger", "slow"], by="tokens_per_s")
    assert [x for _, x in peaks] == [None] * 5 + [1.0]  # only "slow" has a peak: it is the baseline of itself
    rows[1]["metrics"]["peak_gib"] = 4.0  # liger, the fastest peer
    peaks = records.ratios(rows, "peak_gib", ["hf", "liger", "slow"], by="tokens_per_s")
    assert [x for _, x in peaks] == [None, 1.0, None, None, None, 0.25]
    assert [x for _, x in records.ratios(rows, "peak_gib", ["liger", "slow"], min)] == [
        None,
        4.0,
        None,
        None,
        None,
        1.0,
    ]
    rows = rows[:5]
    # no baseline in the comparison, or no such metric: None
    assert [ratio for _, ratio in records.ratios(rows, "tokens_per_s", "liger")][3:] == [None, None]
    assert {ratio for _, ratio in records.ratios(rows, "peak_gib", "hf")} == {None}
    # another date is another comparison
    records.append("bench_x", CASE, {"tokens_per_s": 50.0}, "ojas", path=path, **(ENV | {"date": "2026-12-02"}))
    assert records.ratios(records.read(path), "tokens_per_s", "hf")[-1][1] is None


def test_report_tables_each_run_with_its_ratios(tmp_path):
    from benchmarks import report

    path = tmp_path / "r.jsonl"
    case = dict(dtype="bf16", optimizer="adamw", checkpoint=True)
    records.append(
        "bench_optimize_model", case, {"tokens_per_s": 100.0, "peak_gib": 10.0}, "standard", path=path, **ENV
    )
    records.append("bench_optimize_model", case, {"tokens_per_s": 112.0, "peak_gib": 6.5}, "ojas", path=path, **ENV)
    written = report.report(records.read(path), tmp_path / "benchmarks.md", tmp_path / "images")
    text = (tmp_path / "benchmarks.md").read_text()
    assert "## bench_optimize_model" in text and "2026-12-01, commit `abc1234`, NVIDIA H200; torch 2.11.0." in text
    assert "| ojas | 112.00 | 6.50 | 1.120x | 0.650x |" in text
    assert [p.name for p in written] == ["benchmarks.md", "bench_optimize_model.png"]
    records.append("bench_unknown", CASE, {"ms": 1.0}, "ojas", path=path, **ENV)
    with pytest.raises(ValueError, match=r"benchmark\(s\) \['bench_unknown'\] have no section"):
        report.report(records.read(path), tmp_path / "benchmarks.md", tmp_path / "images")


def test_the_commit_of_a_snapshot_comes_from_the_environment(monkeypatch):
    """A ``git archive`` snapshot measured on the device has no checkout of its own: its commit
    is taken from ``OJAS_RECORD_COMMIT``, else from git."""
    monkeypatch.setenv("OJAS_RECORD_COMMIT", "abc1234")
    assert records._commit() == "abc1234"
    monkeypatch.delenv("OJAS_RECORD_COMMIT")
    assert records._commit() != "abc1234"
