"""ojas_ref/tools/step_time.py: the prediction is the depth extrapolation's arithmetic, the
shallow steps run (on the CPU here), and the H200 record's predictions (steps at 2 and 10
layers, benchmarks/bench_step_time.py, tests/fixtures/plan/step_time_h200.json) are within issue 15's 15% of the full model's step
timed in the same run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from benchmarks import bench_step_time
from ojas_ref import MemoryRecipe
from ojas_ref.memory.model import _legacy_recipe
from ojas_ref.tools import plan as P
from ojas_ref.tools import step_time as S
from ojas_ref.tools import throughput as T
from ojas_ref.tools.cli import main
from ojas_ref.tools.records import _RECORDED_DTYPES

TINY = P.Model(64, 3, 4, 2, 128, 100, name="tiny")
#: benchmarks/bench_step_time.py's H200 record (its ``--out`` of 2026-12-01, commit e2fb35f; tests/fixtures/plan/README.md)
RECORD = Path(__file__).resolve().parents[1] / "fixtures" / "plan" / "step_time_h200.json"


def test_depths_are_clamped_to_the_model():
    assert S.depths_for(P.PRESETS["llama-1b"]) == (2, 10)
    assert S.depths_for(TINY) == (2, 3)
    assert S.depths_for(P.Model(64, 1, 4, 2, 128, 100)) == (1,)
    with pytest.raises(ValueError, match="depths must be two layer counts"):
        S.depths_for(TINY, (3, 3))


def test_prediction_is_linear_in_depth():
    m = P.PRESETS["llama-1b"]
    parts = S.predict_step_seconds(m, S.Measured("test", (2, 6), (0.12, 0.28)))
    assert parts["per_layer"] == pytest.approx(0.04)
    assert parts["rest"] == pytest.approx(0.04)
    assert parts["step"] == pytest.approx(0.04 + m.layers * 0.04)
    assert S.predict_step_seconds(P.Model(64, 1, 4, 2, 128, 100), S.Measured("t", (1,), (0.5,)))["step"] == 0.5
    with pytest.raises(ValueError, match="one timed depth"):
        S.predict_step_seconds(m, S.Measured("t", (1,), (0.5,)))


@pytest.mark.parametrize(
    "setting",
    [
        P.Setting(dtype=torch.float32, optimizer="sgd", seq=16),
        P.Setting(
            MemoryRecipe.plain(
                attention=True,
                linear_cross_entropy=True,
                rms_norm=True,
                swiglu=True,
                checkpoint=True,
                in_backward=True,
            ),
            dtype=torch.float32,
            optimizer="adamw",
            seq=16,
        ),
        P.Setting(
            MemoryRecipe.plain(
                attention=True,
                linear_cross_entropy=True,
                checkpoint="offload",
                in_backward=True,
                state_device="cpu",
            ),
            dtype=torch.bfloat16,
            optimizer="adamw",
            seq=16,
        ),
    ],
    ids=["standard", "ojas+ckpt", "offload+host-state"],
)
def test_measure_runs_on_the_cpu(setting):
    measured = S.measure(TINY, setting, "cpu", steps=1)
    assert measured.depths == (2, 3) and len(measured.seconds) == 2 and all(t > 0 for t in measured.seconds)
    assert S.predict_step_seconds(TINY, measured)["step"] > 0


def test_build_refuses_what_the_setting_cannot_mean():
    with pytest.raises(ValueError, match="offload is optimize_model"):
        S.build(TINY, P.Setting(MemoryRecipe.plain(checkpoint="offload"), seq=16), 1, "cpu")
    with pytest.raises(ValueError, match="split is optimize_model"):
        S.build(TINY, P.Setting(MemoryRecipe.plain(checkpoint=True, checkpoint_split=True), seq=16), 1, "cpu")
    with pytest.raises(ValueError, match="steps must be >= 1"):
        S.time_steps(TINY, P.Setting(seq=16), (1,), "cpu", steps=0)


def test_built_model_has_the_split_and_the_bucket_size():
    from ojas_ref.integrations.hf import SplitCheckpoint

    model, opt = S.build(
        TINY,
        P.Setting(
            MemoryRecipe.plain(
                rms_norm=True, checkpoint=True, checkpoint_split=True, in_backward=True, bucket_cap_mb=32.0
            ),
            dtype=torch.float32,
            optimizer="sgd",
            seq=8,
        ),
        2,
        "cpu",
    )
    assert all(isinstance(layer._gradient_checkpointing_func, SplitCheckpoint) for layer in model.model.layers)
    assert opt.bucket_cap_mb == 32.0


def test_built_model_has_the_width_and_depth():
    model, opt = S.build(P.Model(96, 4, 6, 2, 160, 90, tied=True), P.Setting(dtype=torch.float32, seq=8), 2, "cpu")
    c = model.config
    assert (
        c.hidden_size,
        c.num_hidden_layers,
        c.num_attention_heads,
        c.num_key_value_heads,
        c.intermediate_size,
        c.vocab_size,
        c.tie_word_embeddings,
    ) == (96, 2, 6, 2, 160, 90, True)
    assert isinstance(opt, torch.optim.AdamW)


def test_cli_time_shallow(capsys, monkeypatch):
    monkeypatch.setattr(T, "measure_gemm_rate", lambda device, dtype: 1e12)
    fake = S.Measured(device="fake", depths=(2, 6), seconds=(0.02, 0.06))
    monkeypatch.setattr(S, "measure", lambda model, setting: fake)
    assert main(["plan", "--preset", "llama-1b", "--time", "--shallow"]) == 0
    out = capsys.readouterr().out
    step = S.predict_step_seconds(P.PRESETS["llama-1b"], fake)["step"]
    assert f"step predicted from steps timed on fake (2 layers 20.0 ms, 6 layers 60.0 ms): {step * 1e3:.1f} ms" in out
    assert "per layer 10.00 ms" in out
    assert main(["plan", "--shallow"]) == 2
    assert "--shallow goes with --time" in capsys.readouterr().err


def test_bench_compares_every_record():
    rows = bench_step_time.recorded(["llama-1b", "llama-7b"])
    assert sum(m.name == "llama-1b" for m, _, _ in rows) == 16
    assert sum(m.name == "llama-7b" for m, _, _ in rows) == 4
    assert all(t > 0 for _, _, t in rows)


def _record_rows() -> list[dict]:
    return json.loads(RECORD.read_text())


def _recorded_setting(fields: dict) -> P.Setting:
    """The setting a row recorded: the fields of release 0.1's Setting (``fused`` for
    ``in_backward``, ``ojas_attention``, ``offload``, ``host_state``, ..., the dtype's short name),
    read by the planner's one translation of them (``_legacy_recipe``, what Setting does with those
    keywords) and records.py's names of the recorded dtypes."""
    old = dict(fields)
    workload = {name: old.pop(name) for name in ("optimizer", "batch", "seq", "ojas_attention_copy")}
    dtype = _RECORDED_DTYPES[old.pop("dtype")]
    return P.Setting(_legacy_recipe(MemoryRecipe.plain(), old), dtype, **workload)


def test_record_predictions_within_15_percent_of_the_full_step():
    """Every H200 row: the extrapolation of its recorded shallow steps, recomputed here, is the
    recorded prediction and within 15% of the full model's step timed in the same run."""
    rows = _record_rows()
    assert len(rows) >= 16 + 4 * 4
    for r in rows:
        m = P.preset_model(r["model"])
        assert m.layers == r["layers"]
        step = S.predict_step_seconds(m, S.Measured(r["device"], tuple(r["depths"]), tuple(r["seconds"])))["step"]
        s = _recorded_setting(r["setting"])
        assert s.tokens / step == pytest.approx(r["predicted_tokens_per_s"], rel=1e-9)
        assert 0.85 <= r["full_seconds"] / step <= 1.15, (r["model"], s.mode, r["full_seconds"], step)
