"""Benchmark: the step time predicted by ojas_ref/tools/step_time.py (steps of the model's
width at two small depths, extrapolated in depth) beside the full model's step, timed in the
same run, and the tokens/s of the H200 records.

    python benchmarks/bench_step_time.py [--out FILE] [--presets llama-1b llama-7b ...] [--steps N]

For every recorded configuration of the given presets (llama-1b: the 16 settings of
tests/fixtures/plan/bench_optimize_model_h200_rope.json; the others: the bf16 rows of
tests/fixtures/plan/bench_memory_h200_presets.json), :func:`ojas_ref.tools.step_time.time_steps` times the steps
at the two shallow depths of :func:`~ojas_ref.tools.step_time.depths_for` and at the model's
own depth, in the same interleaved rounds when the planner says the three models fit on the
GPU together (``together`` in the row), else the full model after the shallow ones; and
:func:`~ojas_ref.tools.step_time.predict_step_seconds` extrapolates the shallow steps.
Issue 15's bar: predicted tokens/s within 15% of the measured. The timed steps are written
to ``--out`` (the H200 run of 2026-12-01 at commit e2fb35f: tests/fixtures/plan/step_time_h200.json,
from which tests/tools/test_step_time.py recomputes every prediction; its rows are the
bench_step_time records of benchmarks/records.jsonl). Run on the device the records were
measured on (an H200); elsewhere the record's column means nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from ojas_ref.recipe import dtype_name  # noqa: E402
from ojas_ref.tools import plan as P  # noqa: E402
from ojas_ref.tools.step_time import Measured, depths_for, predict_step_seconds, time_steps  # noqa: E402

#: the H200 records the predictions are compared with (the planner's test fixtures)
RECORDS = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "plan"


def recorded(presets: list[str]) -> list[tuple[P.Model, P.Setting, float]]:
    """(model, setting, recorded tokens/s) of the records of these presets."""
    rows = []
    if "llama-1b" in presets:
        path = RECORDS / "bench_optimize_model_h200_rope.json"
        rows += [(P.record_model(path), s, t) for s, t in P.load_records(path, "tokens_per_s")]
    for m, s, row in P.load_memory_records(RECORDS / "bench_memory_h200_presets.json"):
        if m.name in presets and m.name != "llama-1b":
            rows.append((m, s, row["tokens_per_s"]))
    return rows


def fit_together(m: P.Model, s: P.Setting, depths: tuple[int, ...]) -> bool:
    """Whether the models of these depths fit on the GPU at once: the planner's peaks
    (ojas_ref/tools/plan.py) summed, against 85% of the free memory."""
    import torch

    if not torch.cuda.is_available():
        return True
    need = sum(P.plan(P.with_layers(m, d), s).peak for d in depths)
    return need < 0.85 * torch.cuda.mem_get_info()[0]


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["llama-1b", "llama-0.5b", "llama-3b", "llama-7b", "llama-13b"])
    parser.add_argument("--steps", type=int, default=16, help="timed steps per depth (after 2 warm-up steps)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    unknown = [p for p in args.presets if p not in P.PRESETS]
    if unknown:
        parser.error(f"--presets: unknown {unknown}; choose from {list(P.PRESETS)}")
    results = []
    for m, s, recorded_tokens_per_s in recorded(args.presets):
        depths = depths_for(m)
        together = fit_together(m, s, depths + (m.layers,))
        if together:  # one interleaved run: every depth sees the same drift of the host
            timed = time_steps(m, s, depths + (m.layers,), steps=args.steps)
            shallow = Measured(timed.device, depths, timed.seconds[:-1])
            full = Measured(timed.device, (m.layers,), timed.seconds[-1:])
        else:
            shallow = time_steps(m, s, depths, steps=args.steps)
            full = time_steps(m, s, (m.layers,), steps=args.steps)
        predicted = predict_step_seconds(m, shallow)
        row = dict(
            model=m.name,
            layers=m.layers,
            dtype=dtype_name(s.dtype),
            optimizer=s.optimizer,
            mode=s.mode,
            # the setting as JSON: its recipe's fields, the dtype by torch's name
            setting=dataclasses.asdict(s) | dict(recipe=dataclasses.asdict(s.recipe), dtype=dtype_name(s.dtype)),
            device=shallow.device,
            depths=list(shallow.depths),
            seconds=list(shallow.seconds),
            full_seconds=full.seconds[0],
            together=together,
            predicted_tokens_per_s=s.tokens / predicted["step"],
            measured_tokens_per_s=s.tokens / full.seconds[0],
            recorded_tokens_per_s=recorded_tokens_per_s,
            per_layer=predicted["per_layer"],
            rest=predicted["rest"],
        )
        row["ratio"] = row["predicted_tokens_per_s"] / row["measured_tokens_per_s"]
        print(json.dumps(row), flush=True)
        results.append(row)
        if args.out:  # after every row: a run cut short keeps what it timed
            args.out.write_text(json.dumps(results, indent=1))
    print(markdown(results))
    return results


def markdown(rows: list[dict]) -> str:
    lines = [
        "| model | dtype | optimizer | mode | steps timed (ms) | predicted tokens/s | measured | predicted / "
        "measured | recorded (earlier run) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        timed = ", ".join(f"{d}: {t * 1e3:.1f}" for d, t in zip(r["depths"], r["seconds"]))
        lines.append(
            f"| {r['model']} | {r['dtype']} | {r['optimizer']} | {r['mode']} | {timed}; {r['layers']}: "
            f"{r['full_seconds'] * 1e3:.1f} | {r['predicted_tokens_per_s']:,.0f} | "
            f"{r['measured_tokens_per_s']:,.0f} | {r['ratio']:.3f} | {r['recorded_tokens_per_s']:,.0f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
