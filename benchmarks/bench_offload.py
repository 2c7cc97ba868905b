"""Benchmark: offloaded activation checkpointing (``optimize_model(checkpoint="offload")``) against
Hugging Face's checkpointing on ``LlamaForCausalLM``: peak CUDA memory and tokens/s side by side.

    python benchmarks/bench_offload.py [--quick] [--out FILE] [--dtypes fp32 bf16]
        [--optimizers sgd adamw] [--modes standard+ckpt standard+offload ojas+ckpt ojas+offload]

The model is the 1.06B Llama config of bench_optimize_model.py (hidden 2048, 18 layers,
16 heads, intermediate 5632, vocabulary 32000, untied head, batch 1, sequence 2048), built
from a config (no download). Each mode is a :class:`~ojas_ref.MemoryRecipe` (:data:`RECIPES`),
applied by bench_optimize_model's ``setup`` (``optimize_model(model, recipe)``; a plain optimizer
step, not InBackwardOptimizer):

* ``standard+ckpt``: ``MemoryRecipe.plain(checkpoint=True)``: Hugging Face's
  ``gradient_checkpointing_enable(use_reentrant=False)``, the rest standard.
* ``standard+offload``: ``MemoryRecipe.plain(checkpoint="offload")``, every primitive off
  (attention, loss, RMSNorm, SwiGLU, RoPE standard): only the checkpointing differs.
* ``ojas+ckpt`` / ``ojas+offload``: ``MemoryRecipe(checkpoint=True)`` / ``(checkpoint="offload")``:
  every primitive of ``optimize_model``.

Peak and timing as in bench_optimize_model.py (each mode built and its peak measured in
turn, the earlier modes idle; then all timed together, one synchronised step of each per
round, the order rotated). ``host_bytes_per_step``: the bytes the offloaded modes copied to
the host in one step (the layer inputs; pinned). ``held_after_forward``: the device bytes the
forward leaves for the backward (:func:`held_after_forward`): where offloading shows with a
plain optimizer step, whose peak falls at the update, after the activations are freed
(the H200 run of 2026-12-01 measured the same peak with and without offload for that reason).
``--quick``: a tiny model on the CPU
(no memory figures; the copies are plain copies there, so no speed is claimed either).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks import bench_optimize_model as B  # noqa: E402
from benchmarks.bench_optimize_model import (  # noqa: E402
    allocate_workspaces,
    environment,
    measure_and_time,
    release,
    timing,
)
from benchmarks.bench_in_backward import (  # noqa: E402
    DTYPES,
    QUICK,
    Config,
    add_common_arguments,
    gib,
)
from ojas_ref import MemoryRecipe  # noqa: E402
from ojas_ref.nn.offload import OffloadedCheckpoint  # noqa: E402

#: each mode's memory recipe
RECIPES = {
    "standard+ckpt": MemoryRecipe.plain(checkpoint=True),
    "standard+offload": MemoryRecipe.plain(checkpoint="offload"),
    "ojas+ckpt": MemoryRecipe(checkpoint=True),
    "ojas+offload": MemoryRecipe(checkpoint="offload"),
}
MODES = tuple(RECIPES)


class Runner(B.Runner):
    """bench_optimize_model's Runner of the mode's recipe, its offloaded checkpoint's statistics
    reset at each step."""

    def __init__(self, c: Config, dtype: torch.dtype, opt_name: str, mode: str, device: torch.device) -> None:
        super().__init__(c, dtype, opt_name, mode, device, RECIPES[mode])
        funcs = {
            id(f): f
            for m in self.model.modules()
            if isinstance(f := getattr(m, "_gradient_checkpointing_func", None), OffloadedCheckpoint)
        }
        self.offload = next(iter(funcs.values()), None)

    def step(self, i: int) -> float:
        if self.offload is not None:
            self.offload.reset_stats()
        return super().step(i)


def held_after_forward(r: Runner, device: torch.device) -> int | None:
    """Device bytes the forward leaves for the backward (the loss computed, nothing freed yet):
    the saved activations that offloading moves off the device. The step's peak is not where
    they matter with a plain optimizer step (its gradients and state peak later, the
    activations gone); with InBackwardOptimizer it is (bench_memory.py's ``+offload`` rows)."""
    if device.type != "cuda":
        return None
    ids = r.batches[0]
    torch.cuda.synchronize(device)
    base = torch.cuda.memory_allocated(device)
    loss = r.model(input_ids=ids, labels=ids).loss
    torch.cuda.synchronize(device)
    held = torch.cuda.memory_allocated(device) - base
    loss.backward()
    r.opt.step()
    r.opt.zero_grad(set_to_none=True)
    return held


def run_modes(
    c: Config,
    dtype: torch.dtype,
    opt_name: str,
    modes: list[str],
    *,
    device: torch.device,
    warmup: int,
    steps: int,
    kept: int,
) -> list[dict]:
    runners = measure_and_time(
        (Runner(c, dtype, opt_name, mode, device) for mode in modes), device, warmup, steps, kept
    )
    results = []
    for r in runners:
        stats = r.offload.stats if r.offload is not None else None
        results.append(
            dict(
                dtype=str(dtype).removeprefix("torch."),
                optimizer=opt_name,
                mode=r.mode,
                recipe=dataclasses.asdict(r.recipe),
                **timing(r, c),
                held_after_forward=held_after_forward(r, device),
                host_bytes_per_step=None if stats is None else stats.offloaded_bytes,
                offloaded_tensors_per_step=None if stats is None else stats.offloaded_tensors,
                prefetched_per_step=None if stats is None else stats.prefetched_tensors,
            )
        )
    del runners, r
    release(device)
    return results


def markdown(results: list[dict]) -> str:
    lines = [
        "| dtype | optimizer | mode | peak GiB | held after forward GiB | host GiB/step | tokens/s | "
        "vs same family +ckpt | last loss |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    base = {(r["dtype"], r["optimizer"], r["mode"].split("+")[0]): r for r in results if r["mode"].endswith("+ckpt")}
    for r in results:
        ref = base.get((r["dtype"], r["optimizer"], r["mode"].split("+")[0]))
        ratio = f"{r['tokens_per_s'] / ref['tokens_per_s']:.3f}x" if ref else "-"
        lines.append(
            f"| {r['dtype']} | {r['optimizer']} | {r['mode']} | {gib(r['peak'])} | "
            f"{gib(r['held_after_forward'])} | {gib(r['host_bytes_per_step'])} | {r['tokens_per_s']:,.0f} | "
            f"{ratio} | {r['last_loss']:.4f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser, warmup=2, steps=5)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    args = parser.parse_args()
    device = torch.device(args.device)
    c = QUICK if args.quick else Config()
    kept = allocate_workspaces(device)
    results = []
    for dtype_name in args.dtypes:
        for opt_name in args.optimizers:
            for r in run_modes(
                c,
                DTYPES[dtype_name],
                opt_name,
                args.modes,
                device=device,
                warmup=args.warmup,
                steps=args.steps,
                kept=kept,
            ):
                print(json.dumps(r), flush=True)
                results.append(r)
    env = environment(device)
    if args.out:
        args.out.write_text(json.dumps(dict(env=env, config=vars(c), results=results), indent=1))
    print(env)
    print(markdown(results))


if __name__ == "__main__":
    main()
