"""benchmarks/bench_memory.py --quick on the CPU: every requested mode gives a row or a skip
reason, the losses are finite, and the modes that reformulate ojas+ckpt exactly (offload,
sparse embedding with SGD, host state, the head updated inside the loss with SGD, split checkpoints,
their concatenations and all of them together) give its losses bit for bit."""

import dataclasses
import math

import pytest
import torch

from benchmarks import bench_memory
from ojas_ref import MemoryRecipe


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_quick_rows(optimizer, tmp_path):
    out = tmp_path / "memory.json"
    result = bench_memory.main(
        [
            "--quick",
            "--device",
            "cpu",
            "--dtypes",
            "fp32",
            "--optimizers",
            optimizer,
            "--warmup",
            "1",
            "--steps",
            "2",
            "--out",
            str(out),
        ]
    )
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
    assert rows["+split"]["techniques"]["split"] is True and rows["all"]["techniques"]["split"] is True
    assert rows["+split"]["host"] is None and rows["all"]["host"] > rows["+offload"]["host"]  # two inputs per layer
    assert rows["ojas+ckpt"]["techniques"]["split"] is False
    # each row records its recipe: ojas+ckpt's is MemoryRecipe(checkpoint=True, in_backward=True), the baseline plain
    assert rows["ojas+ckpt"]["recipe"] == dataclasses.asdict(MemoryRecipe(checkpoint=True, in_backward=True))
    assert rows["standard+ckpt"]["recipe"] == dataclasses.asdict(MemoryRecipe.plain(checkpoint=True))
    assert rows["reversible"]["recipe"] == dataclasses.asdict(MemoryRecipe.plain(in_backward=True))
    assert rows["+offload"]["recipe"]["checkpoint"] == "offload"


def test_concatenated_techniques_and_the_bucket_size_are_recorded():
    """``+offload+head-update+split`` at 32 MiB buckets: those three together, the bucket in every row's
    techniques (the planner plans it), the losses of ``+offload+head-update`` (test_quick_rows: those of
    ojas+ckpt) bit for bit, twice its offloaded bytes."""
    from ojas_ref.tools import plan as P

    modes = ["+offload+head-update", "+offload+head-update+split"]
    result = bench_memory.main(
        [
            "--quick",
            "--device",
            "cpu",
            "--dtypes",
            "fp32",
            "--optimizers",
            "sgd",
            "--warmup",
            "0",
            "--steps",
            "2",
            "--bucket-mb",
            "32",
            "--modes",
            *modes,
        ]
    )
    rows = {r["mode"]: r for r in result["results"]}
    t = rows[modes[1]]["techniques"]
    assert (t["checkpoint"], t["head_update"], t["split"], t["sparse_embedding"], t["bucket_cap_mb"]) == (
        "offload",
        True,
        True,
        False,
        32.0,
    )
    assert rows[modes[0]]["techniques"] == dict(t, split=False)
    assert rows[modes[0]]["losses"] == rows[modes[1]]["losses"]
    assert rows[modes[1]]["host"] == 2 * rows[modes[0]]["host"]
    recorded = P.memory_record_setting(rows[modes[1]], bench_memory.QUICK.batch, bench_memory.QUICK.seq).recipe
    assert recorded.checkpoint_split and recorded.checkpoint == "offload" and recorded.head_update
    assert recorded.bucket_cap_mb == 32.0
    recipe = MemoryRecipe(**rows[modes[1]]["recipe"])
    assert recipe == MemoryRecipe(
        checkpoint="offload", checkpoint_split=True, in_backward=True, bucket_cap_mb=32.0, head_update=True
    )
    setting = P.Setting(recipe, torch.float32, "sgd", bench_memory.QUICK.batch, bench_memory.QUICK.seq)
    assert (
        rows[modes[1]]["predicted_peak"]
        == P.plan(
            P.Model(
                *(
                    getattr(bench_memory.QUICK, k)
                    for k in ("hidden", "layers", "heads", "heads", "intermediate", "vocab")
                )
            ),
            setting,
        ).peak
    )
    skipped = bench_memory.main(
        [
            "--quick",
            "--device",
            "cpu",
            "--dtypes",
            "fp32",
            "--optimizers",
            "adamw",
            "--warmup",
            "0",
            "--steps",
            "1",
            "--modes",
            "+split+head-update",
        ]
    )["skipped"]
    assert [s["mode"] for s in skipped] == ["+split+head-update"] and "plain SGD" in skipped[0]["skipped"]


@pytest.mark.parametrize("mode", ["+split+split", "split", "+offload+bogus", "ojas+ckpt+split", "+"])
def test_bad_modes_are_refused(mode, capsys):
    with pytest.raises(SystemExit):
        bench_memory.main(["--quick", "--device", "cpu", "--modes", mode])
    assert "mode must be one of" in capsys.readouterr().err


def test_largest_quick():
    result = bench_memory.main(
        [
            "--quick",
            "--device",
            "cpu",
            "--dtypes",
            "fp32",
            "--optimizers",
            "sgd",
            "--modes",
            "ojas+ckpt",
            "--warmup",
            "0",
            "--largest",
            "--max-layers",
            "5",
        ]
    )
    (search,) = result["largest"]
    assert [t["layers"] for t in search["tries"]] == [2, 4, 5]
    assert search["largest"]["layers"] == 5 and search["largest"]["fits"]


@pytest.mark.parametrize(
    "argv,match",
    [
        (["--preset", "llama-1b", "--quick"], "--preset"),
        (["--preset", "llama-1b", "--largest"], "--preset"),
        (["--layers", "4"], "--layers needs --preset"),
        (["--preset", "llama-1b", "--layers", "0"], "layers must be an int >= 1"),
    ],
)
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
