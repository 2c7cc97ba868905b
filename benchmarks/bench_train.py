"""Benchmark: ``ojas train`` end to end, and its resume, on one device.

    python benchmarks/bench_train.py [--preset 1b] [--device cuda] [--dtype bfloat16] [--steps 100]
        [--stop 50] [--seq-len 1024] [--batch-size 8] [--out FILE] [--work DIR] [memory recipe flags]

Three calls of :func:`ojas_ref.tools.train.train` on the same setting (the corpus and
tokenizer of ``ojas train``'s default: the Python standard library's sources, a byte-level
BPE), with ``ojas train``'s memory recipe (its default, ``MemoryRecipe(in_backward=True)``, or
the recipe's flags: ``--checkpoint on``, ``--no-in-backward``, ...): ``full``, all ``--steps``
uninterrupted; ``stopped``, the same run stopped after ``--stop`` steps (a state file written);
``resumed``, that run continued from its state file to ``--steps``. Reported: the loss at the first and last step, whether it fell, the median
tokens/s and the peak device memory of the full run (from its JSON-lines log), and whether
the resumed run's losses and final parameters are bit for bit the full run's (the resume
guarantee of ojas_ref/tools/train.py; tests/tools/test_train.py checks it on the CPU; on CUDA it
also needs every kernel of the step to be deterministic, which this run measures rather
than assumes). The loss plot of the full run is copied beside ``--out``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from ojas_ref.recipe import add_recipe_arguments, recipe_from_arguments  # noqa: E402
from ojas_ref.tools.train import PRESETS, TrainConfig, train  # noqa: E402
from ojas_ref.tools.train_config import DEFAULT_RECIPE  # noqa: E402


def _same_parameters(a: torch.nn.Module, b: torch.nn.Module) -> tuple[bool, list[str]]:
    differ = [n for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters()) if not torch.equal(p, q)]
    return not differ, differ


def run(args: argparse.Namespace) -> dict:
    work = Path(args.work or tempfile.mkdtemp(prefix="bench_train_"))
    base = dict(
        preset=args.preset,
        device=args.device,
        dtype=args.dtype,
        steps=args.steps,
        seq_len=args.seq_len,
        batch_size=args.batch_size,
        lr=args.lr,
        warmup_steps=args.warmup_steps,
        vocab=args.vocab,
        recipe=recipe_from_arguments(args),
        state_every=args.steps,
        cache_dir=str(work / "cache"),
        progress=False,
    )
    full = train(TrainConfig(out_dir=str(work / "full"), **base))
    stopped = train(TrainConfig(out_dir=str(work / "resumed"), stop_after=args.stop, **base))
    resumed = train(TrainConfig(out_dir=str(work / "resumed"), resume="latest", **base))
    records = [json.loads(line) for line in full.log_path.read_text().splitlines()]
    same_params, differ = _same_parameters(full.model, resumed.model)
    tail = dict(full.losses)
    resumed_losses = dict(resumed.losses)
    result = dict(
        setting=base | dict(recipe=dataclasses.asdict(base["recipe"]), stop=args.stop),
        device_name=torch.cuda.get_device_name() if torch.cuda.is_available() and "cuda" in args.device else "cpu",
        torch=torch.__version__,
        first_loss=full.losses[0][1],
        last_loss=full.losses[-1][1],
        loss_fell=full.losses[-1][1] < full.losses[0][1],
        median_tokens_per_s=statistics.median(r["tokens_per_s"] for r in records[1:] or records),
        peak_memory_bytes=max(r["peak_memory_bytes"] or 0 for r in records),
        stopped_at=stopped.step,
        stopped_reason=stopped.stopped,
        resumed_losses_equal=all(resumed_losses[s] == tail[s] for s in resumed_losses),
        resumed_steps=sorted(resumed_losses),
        max_resumed_loss_diff=max(abs(resumed_losses[s] - tail[s]) for s in resumed_losses),
        resumed_parameters_equal=same_params,
        parameters_that_differ=differ[:10],
        losses=full.losses,
    )
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
        shutil.copyfile(full.plot_path, Path(args.out).with_suffix(".png"))
    return result


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=list(PRESETS), default="tiny")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--stop", type=int, default=10, help="the stopped run's last step (then resumed)")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--warmup-steps", type=int, default=5)
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--work", default=None, help="directory of the runs (default: a new temporary one)")
    parser.add_argument("--out", default=None, help="write the result as JSON here (and the loss plot beside it)")
    add_recipe_arguments(parser, DEFAULT_RECIPE)
    args = parser.parse_args(argv)
    if not 0 < args.stop < args.steps:
        parser.error(f"--stop must be between 1 and --steps - 1, got {args.stop} with --steps {args.steps}")
    result = run(args)
    print(json.dumps({k: v for k, v in result.items() if k != "losses"}, indent=1))
    return result


if __name__ == "__main__":
    main()
