"""ojas_ref/tools/step_time.py: the step's products are those the FLOP count has, the
prediction is its parts' arithmetic, the measurement runs (on the CPU here; its H200
comparison is benchmarks/bench_step_time.py's)."""

from __future__ import annotations

import pytest

from benchmarks import bench_step_time
from ojas_ref.tools import plan as P
from ojas_ref.tools import step_time as S
from ojas_ref.tools import throughput as T
from ojas_ref.tools.cli import main

TINY = P.Model(64, 2, 4, 2, 128, 100, name="tiny")


@pytest.mark.parametrize("model", [P.PRESETS["llama-1b"], P.PRESETS["llama-3b"], TINY], ids=lambda m: m.name)
@pytest.mark.parametrize("checkpoint", [False, True])
@pytest.mark.parametrize("ojas", [False, True])
def test_products_are_the_counted_flops_but_attention(model, checkpoint, ojas):
    s = P.Setting(checkpoint=checkpoint, fused=ojas, ojas_attention=ojas, ojas_loss=ojas)
    terms = T.flop_terms(model, s)
    attention = terms["attention forward"] * (2 if checkpoint else 1) + terms["attention backward"]
    assert sum(p.flops for p in S.products(model, s)) == T.step_flops(model, s) - attention
    assert len({p.name for p in S.products(model, s)}) == 3 * 8


def test_prediction_is_the_parts_arithmetic():
    s = P.Setting(dtype="bf16", optimizer="adamw", fused=True, checkpoint=True, seq=32)
    measured = S.Measured(device="test", product_seconds={(p.m, p.k, p.n, p.layout): 1e-3 for p in S.products(TINY, s)},
                          attention_forward=2e-3, attention_step=5e-3, update_per_parameter=1e-9,
                          host_step_1=0.01, host_step_3=0.02, host_per_bucket=1e-4)
    parts = S.predict_step_seconds(TINY, s, measured)
    count = sum(p.count for p in S.products(TINY, s))
    assert parts["products"] == pytest.approx(count * 1e-3)
    assert parts["attention"] == pytest.approx(TINY.layers * 7e-3)
    assert parts["update"] == pytest.approx(TINY.params() * 1e-9)
    assert parts["host"] == pytest.approx(0.01 + (TINY.layers - 1) * 0.005)  # one bucket: no extra
    assert parts["step"] == max(parts["device"], parts["host"])


@pytest.mark.parametrize("setting", [
    P.Setting(dtype="fp32", optimizer="sgd", seq=16),
    P.Setting(dtype="fp32", optimizer="adamw", fused=True, checkpoint=True, ojas_attention=True, ojas_loss=True,
              ojas_rms_norm=True, ojas_swiglu=True, seq=16),
], ids=["standard", "ojas+ckpt"])
def test_measure_runs_on_the_cpu(setting):
    measured = S.measure(TINY, setting, "cpu", repeats=1)
    assert len(measured.product_seconds) == len({(p.m, p.k, p.n, p.layout) for p in S.products(TINY, setting)})
    assert all(v > 0 for v in measured.product_seconds.values())
    assert measured.attention_step > 0 and measured.update_per_parameter > 0 and measured.host_step_1 > 0
    if not setting.fused:
        assert measured.host_per_bucket == 0  # the standard loop has one step, no buckets
    assert S.predict_step_seconds(TINY, setting, measured)["step"] > 0


def test_cli_time_parts(capsys, monkeypatch):
    monkeypatch.setattr(T, "measure_gemm_rate", lambda device, dtype: 1e12)
    fake = S.Measured(device="fake", product_seconds={(p.m, p.k, p.n, p.layout): 1e-4
                                                      for p in S.products(P.PRESETS["llama-1b"], P.Setting())},
                      attention_step=1e-4, update_per_parameter=1e-12, host_step_1=0.02, host_step_3=0.03)
    monkeypatch.setattr(S, "measure", lambda model, setting: fake)
    assert main(["plan", "--preset", "llama-1b", "--time", "--parts"]) == 0
    out = capsys.readouterr().out
    parts = S.predict_step_seconds(P.PRESETS["llama-1b"], P.Setting(), fake)
    assert f"step predicted from its parts timed on fake: {parts['step'] * 1e3:.1f} ms" in out
    assert "measured on an H200" in out.split("step predicted from its parts")[1]
    assert main(["plan", "--parts"]) == 2
    assert "--parts goes with --time" in capsys.readouterr().err


def test_bench_compares_every_record():
    rows = bench_step_time.recorded(["llama-1b", "llama-7b"])
    assert sum(m.name == "llama-1b" for m, _, _ in rows) == 16
    assert sum(m.name == "llama-7b" for m, _, _ in rows) == 4
    assert all(t > 0 for _, _, t in rows)
