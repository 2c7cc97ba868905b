"""benchmarks/bench_memory.py --quick on the CPU: every requested mode gives a row or a skip
reason, the losses are finite, and the modes that reformulate ojas+ckpt exactly (offload,
sparse embedding with SGD, host state, the head updated inside the loss with SGD, and all of them
together) give its losses bit for bit."""

import math

import pytest

from benchmarks import bench_memory


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_quick_rows(optimizer, tmp_path):
    out = tmp_path / "memory.json"
    result = bench_memory.main(["--quick", "--device", "cpu", "--dtypes", "fp32", "--optimizers", optimizer,
                                "--warmup", "1", "--steps", "2", "--out", str(out)])
    assert out.exists()
    rows = {r["mode"]: r for r in result["results"]}
    skipped = {s["mode"]: s["skipped"] for s in result["skipped"]}
    assert set(rows) | set(skipped) == set(bench_memory.MODES)
    assert not set(rows) & set(skipped)
    assert all(reason for reason in skipped.values())
    assert set(skipped) == ({"+host-state"} if optimizer == "sgd" else {"+sparse-embedding", "+head-update"})
    for r in rows.values():
        assert all(math.isfinite(x) for x in r["losses"]), r["mode"]
        assert r["tokens_per_s"] > 0 and r["vs_baseline"] > 0
        assert r["peak"] is None  # no memory figures on the CPU
    ref = rows["ojas+ckpt"]["losses"]
    for mode in bench_memory.EXACT:
        if mode in rows:
            assert rows[mode]["losses"] == ref, mode
            assert rows[mode]["last_loss"] == rows["ojas+ckpt"]["last_loss"], mode
    assert rows["+offload"]["host"] > 0
    if optimizer == "adamw":
        assert rows["+host-state"]["host"] > 0
    else:
        assert rows["+sparse-embedding"]["techniques"]["sparse_embedding"] is True
        assert rows["all"]["techniques"]["sparse_embedding"] is True
        assert rows["+head-update"]["techniques"]["head_update"] is True
        assert rows["all"]["techniques"]["head_update"] is True


def test_largest_quick():
    result = bench_memory.main(["--quick", "--device", "cpu", "--dtypes", "fp32", "--optimizers", "sgd",
                                "--modes", "ojas+ckpt", "--warmup", "0", "--largest", "--max-layers", "5"])
    (search,) = result["largest"]
    assert [t["layers"] for t in search["tries"]] == [2, 4, 5]
    assert search["largest"]["layers"] == 5 and search["largest"]["fits"]


@pytest.mark.parametrize("argv,match", [
    (["--preset", "llama-1b", "--quick"], "--preset"),
    (["--preset", "llama-1b", "--largest"], "--preset"),
    (["--layers", "4"], "--layers needs --preset"),
    (["--preset", "llama-1b", "--layers", "0"], "layers must be an int >= 1"),
])
def test_preset_arguments_are_checked(argv, match, capsys):
    with pytest.raises(SystemExit):
        bench_memory.main(argv)
    assert match in capsys.readouterr().err


def test_predicted_rows_name_what_the_planner_models():
    """The planner's peak for a modelled row, None for the sparse embedding and the reversible decoder."""
    c = bench_memory.QUICK
    assert bench_memory.predicted(c, "fp32", "sgd", "+offload")["predicted_peak"] > 0
    assert bench_memory.predicted(c, "bf16", "adamw", "+host-state")["predicted_host"] > 0
    assert bench_memory.predicted(c, "fp32", "sgd", "standard+ckpt")["predicted_host"] is None
    for mode in ("+sparse-embedding", "reversible"):
        assert bench_memory.predicted(c, "fp32", "sgd", mode) == dict(predicted_peak=None, predicted_host=None)
