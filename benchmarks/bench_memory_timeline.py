"""Benchmark: the device memory of one training step of the 1.06B decoder over time, beside the
planner's phases for the same setting (ojas_ref/tools/memory_timeline.py, ojas_ref/tools/plan.py).

    python benchmarks/bench_memory_timeline.py [--quick] [--dtype fp32] [--optimizer sgd]
        [--mode ojas+ckpt] [--warmup 2] --out DIR

For one mode of benchmarks/bench_memory.py (its model, optimizer and techniques, built alone in
this process after cuBLAS's workspaces, as that benchmark measures), ``--warmup`` steps, then one
step recorded with :func:`ojas_ref.tools.memory_timeline.record` (memory allocated at every
layer's, attention's, MLP's and the head's forward and backward, and the peak between them).
Writes ``DIR/timeline_<dtype>_<optimizer>_<mode>.png`` (the plan's phases as dashed lines) and
``.json`` (the events, the measured and the predicted peak). On the CPU (``--quick``) there is no
allocator to read: every event reads 0 bytes, and the run checks only that the step, the hooks
and the plot work.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.bench_memory import MODES, MemoryRunner, mode_recipe, skip_reason, techniques  # noqa: E402
from benchmarks.bench_optimize_model import allocate_workspaces, environment  # noqa: E402
from benchmarks.bench_in_backward import DTYPES, OPTIMIZERS, QUICK, Config, sync  # noqa: E402
from ojas_ref.tools import plan as P  # noqa: E402
from ojas_ref.tools.memory_timeline import cuda_memory, default_modules, plot_timeline, record  # noqa: E402


def no_allocator() -> tuple[int, int]:
    """The CPU run's memory function: no caching allocator to read, so 0 allocated, 0 peak."""
    return 0, 0


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny model on the CPU (checks that it runs)")
    parser.add_argument("--dtype", choices=list(DTYPES), default="fp32")
    parser.add_argument("--optimizer", choices=list(OPTIMIZERS), default="sgd")
    parser.add_argument("--mode", choices=MODES, default="ojas+ckpt")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--out", type=Path, required=True, help="folder for the PNG and the JSON")
    args = parser.parse_args(argv)
    reason = skip_reason(args.mode, args.dtype, args.optimizer)
    if reason is not None:
        parser.error(f"--mode {args.mode} with {args.dtype} {args.optimizer}: {reason}")
    if not args.out.is_dir():
        parser.error(f"--out must be an existing folder, got {args.out}")
    device = torch.device("cpu" if args.quick or not torch.cuda.is_available() else "cuda")
    c = QUICK if args.quick else Config()
    allocate_workspaces(device)
    runner = MemoryRunner(c, DTYPES[args.dtype], args.dtype, args.optimizer, args.mode, device, 64.0)
    for i in range(args.warmup):
        runner.step(i)
    sync(device)
    memory = cuda_memory(device) if device.type == "cuda" else no_allocator
    events = record(lambda: runner.step(args.warmup), default_modules(runner.model), memory)
    sync(device)
    recipe = mode_recipe(args.mode, args.dtype, args.optimizer)
    t = None if args.mode in ("standard+ckpt", "reversible") else techniques(recipe)
    setting = P.memory_record_setting(
        dict(mode=args.mode, dtype=args.dtype, optimizer=args.optimizer, techniques=t), c.batch, c.seq
    )
    plan = (
        None
        if setting is None
        else P.plan(P.Model(c.hidden, c.layers, c.heads, c.heads, c.intermediate, c.vocab), setting)
    )
    name = f"timeline_{args.dtype}_{args.optimizer}_{args.mode.replace('+', '_').strip('_')}"
    measured = max(e.peak for e in events)
    title = f"{args.dtype} {args.optimizer} {args.mode}, one step: measured peak {measured / 2**30:.3f} GiB" + (
        f", planned {plan.peak / 2**30:.3f} GiB at {plan.peak_phase.name}" if plan else ""
    )
    plot_timeline(events, args.out / f"{name}.png", plan, title=title)
    result = dict(
        dtype=args.dtype,
        optimizer=args.optimizer,
        mode=args.mode,
        measured_peak=measured,
        predicted_peak=None if plan is None else plan.peak,
        environment=environment(device),
        events=[dict(label=e.label, allocated=e.allocated, peak=e.peak) for e in events],
    )
    (args.out / f"{name}.json").write_text(json.dumps(result, indent=1))
    print(title)
    return result


if __name__ == "__main__":
    main()
