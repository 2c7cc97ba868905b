"""Benchmark: ``optimize_model`` (+ ``InBackwardOptimizer``) on Hugging Face's ``LlamaForCausalLM``
against the standard training loop, with and without per-layer activation checkpointing. Each mode
is a :class:`~ojas_ref.MemoryRecipe` (:data:`RECIPES`), applied by :func:`setup`.

    python benchmarks/bench_optimize_model.py [--quick] [--out FILE] [--dtypes fp32 bf16]
        [--optimizers sgd adamw] [--modes standard standard+ckpt ojas ojas+ckpt] [--profile MODE ...]

The model is built from a config (no download): hidden 2048, 18 layers, 16 heads,
intermediate 5632, vocabulary 32000, untied head (1.06B parameters), batch 1, sequence
2048, weights and optimizer state in the run's dtype. Modes:

* ``standard``: ``MemoryRecipe.plain()``, the model as built (SDPA attention, Hugging Face's loss
  on the logits), ``loss.backward(); opt.step(); opt.zero_grad()``.
* ``standard+ckpt``: ``MemoryRecipe.plain(checkpoint=True)``, the same with Hugging Face's
  ``gradient_checkpointing_enable(use_reentrant=False)`` (through ``optimize_model``).
* ``ojas`` / ``ojas+ckpt``: ``MemoryRecipe(in_backward=True)`` / ``MemoryRecipe(checkpoint=True,
  in_backward=True)``: every primitive of ``optimize_model`` and ``InBackwardOptimizer`` (each
  bucket of parameters updated in backward).
* ``ojas-attention`` / ``ojas-loss`` / ``ojas-optimizer`` (``--modes``, not run by
  default): ``MemoryRecipe.plain(attention=True)`` / ``(linear_cross_entropy=True)`` /
  ``(in_backward=True)``, one of the three alone, the rest standard.
* ``ojas+overlap`` / ``ojas+ckpt+overlap`` (``--modes``, not run by default): ``ojas`` /
  ``ojas+ckpt`` with ``overlap=True`` (each bucket's update on a side
  stream while the backward goes on), with ``--overlap-bucket-mb`` buckets if given (without
  checkpointing the peak comes before the first update, so larger buckets cost no peak there
  and save per-bucket host time).

Per dtype and optimizer, in one process: each mode is built in turn (those built before
it kept, idle) and warmed up, and its peak is ``torch.cuda.max_memory_allocated`` over one
step less the memory of the earlier modes; then the modes are timed together, one
synchronised step of each per round with the order rotated (host drift hits all modes
alike), and tokens/s comes from each mode's median step time. ``--profile MODE`` prints torch.profiler's top CUDA kernels of one step
of that mode for each dtype/optimizer, ``--host-profile MODE ...`` the
wall time of forward, backward and step and the operators' CPU times. ``--quick``: a tiny model on the CPU (no memory).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Iterable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.bench_in_backward import (  # noqa: E402
    DTYPES,
    OPTIMIZERS,
    QUICK,
    Config,
    add_common_arguments,
    gib,
    sync,
)
from ojas_ref import InBackwardOptimizer, MemoryRecipe, optimize_model  # noqa: E402

MODES = ("standard", "standard+ckpt", "ojas", "ojas+ckpt")
#: one piece of ``ojas`` alone (no checkpointing), to see which one costs time
PIECES = ("ojas-attention", "ojas-loss", "ojas-optimizer")
OVERLAP = ("ojas+overlap", "ojas+ckpt+overlap")
#: each mode's memory recipe (``--bucket-mb`` / ``--overlap-bucket-mb`` set the in-backward ones' buckets)
RECIPES = {
    "standard": MemoryRecipe.plain(),
    "standard+ckpt": MemoryRecipe.plain(checkpoint=True),
    "ojas": MemoryRecipe(in_backward=True),
    "ojas+ckpt": MemoryRecipe(checkpoint=True, in_backward=True),
    "ojas-attention": MemoryRecipe.plain(attention=True),
    "ojas-loss": MemoryRecipe.plain(linear_cross_entropy=True),
    "ojas-optimizer": MemoryRecipe.plain(in_backward=True),
    "ojas+overlap": MemoryRecipe(in_backward=True, overlap=True),
    "ojas+ckpt+overlap": MemoryRecipe(checkpoint=True, in_backward=True, overlap=True),
}


def build(c: Config, dtype: torch.dtype, device: torch.device):
    import transformers

    transformers.logging.set_verbosity_error()
    config = transformers.LlamaConfig(
        vocab_size=c.vocab,
        hidden_size=c.hidden,
        intermediate_size=c.intermediate,
        num_hidden_layers=c.layers,
        num_attention_heads=c.heads,
        num_key_value_heads=c.heads,
        max_position_embeddings=c.seq,
        tie_word_embeddings=False,
        attention_dropout=0.0,
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = transformers.LlamaForCausalLM(config).to(dtype)
    model.config.use_cache = False
    return model


def mode_recipe(mode: str, bucket_mb: float = 64.0) -> MemoryRecipe:
    """:data:`RECIPES`' recipe of ``mode``, its in-backward buckets of ``bucket_mb`` MiB."""
    recipe = RECIPES[mode]
    return dataclasses.replace(recipe, bucket_cap_mb=bucket_mb) if recipe.in_backward else recipe


def uses_ojas_model(recipe: MemoryRecipe) -> bool:
    """Whether ``recipe`` changes the model beyond Hugging Face's own checkpointing (a primitive, the
    sparse embedding, offloaded or split checkpoints): then ``optimize_model`` applies it; otherwise
    the model is left as users run it (the standard loop, the peers)."""
    plain = MemoryRecipe.plain(checkpoint=bool(recipe.checkpoint))
    return recipe.model_options() != plain.model_options()


def setup(model, recipe: MemoryRecipe, opt_name: str):
    """``(optimizer, report)`` of ``recipe`` on ``model``: ``optimize_model(model, recipe)`` where the
    recipe changes the model (:func:`uses_ojas_model`; else Hugging Face's checkpointing and report
    None), then
    ``InBackwardOptimizer.from_recipe`` (the head as ``head_weight`` with ``head_update``) when
    ``recipe.in_backward``, else the torch optimizer ``opt_name`` stepped after the backward."""
    opt_class, kwargs = OPTIMIZERS[opt_name]
    report = None
    if uses_ojas_model(recipe):
        _, report = optimize_model(model, recipe)
    elif recipe.checkpoint:  # a peer or the standard loop: Hugging Face's own checkpointing, as users run it
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if not recipe.in_backward:
        return opt_class(model.parameters(), **kwargs), report
    head = model.get_output_embeddings().weight if recipe.head_update else None
    return InBackwardOptimizer.from_recipe(model.parameters(), recipe, opt_class, head_weight=head, **kwargs), report


def host_profile(model, opt, ids, device: torch.device) -> str:
    """Where the host's time goes in one step: wall time of the forward, the backward (with
    the in-backward updates) and the step, each synchronised, and torch.profiler's
    operators by CPU time (all threads, the autograd engine's included)."""
    from torch.profiler import ProfilerActivity, profile as torch_profile

    phases = {}
    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        sync(device)
        t0 = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        sync(device)
        t1 = time.perf_counter()
        loss.backward()
        sync(device)
        t2 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync(device)
        t3 = time.perf_counter()
    phases = dict(forward_ms=1e3 * (t1 - t0), backward_ms=1e3 * (t2 - t1), step_ms=1e3 * (t3 - t2))
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30)
    return f"phases {json.dumps(phases)}\n{table}"


class Runner:
    """One mode's model, optimizer (:func:`setup` of its ``recipe``) and batches, stepping as the
    training loop does (the optimizer passed to the loss as ``head_update`` with the recipe's
    ``head_update``)."""

    #: the mode's memory recipe (a subclass that builds its model its own way may leave it plain)
    recipe: MemoryRecipe = MemoryRecipe.plain()

    def __init__(
        self, c: Config, dtype: torch.dtype, opt_name: str, mode: str, device: torch.device, recipe: MemoryRecipe
    ) -> None:
        self.mode, self.c, self.recipe = mode, c, recipe
        #: bytes held by the modes built before this one (idle while this one runs)
        self.others = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
        self.model = build(c, dtype, device)
        self.model.train()
        self.opt, self.report = setup(self.model, recipe, opt_name)
        g = torch.Generator(device="cpu").manual_seed(1)
        self.batches = [torch.randint(0, c.vocab, (c.batch, c.seq), generator=g).to(device) for _ in range(4)]
        self.times: list[float] = []
        self.losses: list[float] = []
        self.peak: int | None = None

    def step(self, i: int) -> float:
        ids = self.batches[i % len(self.batches)]
        head_update = {"head_update": self.opt} if self.recipe.head_update else {}
        loss = self.model(input_ids=ids, labels=ids, **head_update).loss
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss.item()


def measure_peak(r: Runner, device: torch.device, warmup: int, kept: int) -> None:
    """Warm up ``r``, then its peak over one more step, less the memory of the modes built before
    it (idle, so constant), plus the ``kept`` bytes of :func:`allocate_workspaces`: the peak it
    would have alone in a fresh process."""
    for i in range(warmup):
        r.step(i)
    sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        r.step(warmup)
        sync(device)
        r.peak = torch.cuda.max_memory_allocated(device) - r.others + kept


def time_interleaved(runners: list[Runner], device: torch.device, steps: int) -> None:
    """``steps`` rounds, one synchronised step of every mode per round, the order rotated each
    round: every mode sees the same drift of the host (a bf16 step of this size is host-bound,
    and the host's speed varied by 20% between and within runs)."""
    for k in range(steps):
        for j in range(len(runners)):
            r = runners[(j + k) % len(runners)]
            sync(device)
            t0 = time.perf_counter()
            r.losses.append(r.step(k))
            sync(device)
            r.times.append(time.perf_counter() - t0)


def profile_table(r: Runner, device: torch.device) -> str:
    """torch.profiler's top CUDA kernels of one step."""
    from torch.profiler import ProfilerActivity, profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
        r.step(0)
        sync(device)
    return prof.key_averages().table(sort_by="cuda_time_total", row_limit=25)


def allocate_workspaces(device: torch.device) -> int:
    """Bytes the process keeps once it has multiplied matrices: a Linear forward and backward per
    dtype gives cuBLAS its workspaces (one per handle: the main thread's and the autograd
    engine's), which the handles keep. Allocated before any mode is built, so that every mode's
    peak counts them as a fresh process would (:func:`measure_peak`)."""
    if device.type != "cuda":
        return 0
    for dtype in DTYPES.values():
        layer = torch.nn.Linear(64, 64, device=device, dtype=dtype)
        layer(torch.randn(8, 64, device=device, dtype=dtype, requires_grad=True)).sum().backward()
    del layer
    sync(device)
    return torch.cuda.memory_allocated(device)


def measure_and_time(
    runners: Iterable[Runner], device: torch.device, warmup: int, steps: int, kept: int
) -> list[Runner]:
    """Each runner, as ``runners`` builds it, warmed up and its peak measured (the earlier ones
    kept, idle: :func:`measure_peak`), then all timed together (:func:`time_interleaved`)."""
    built = []
    for r in runners:
        measure_peak(r, device, warmup, kept)
        built.append(r)
    time_interleaved(built, device, steps)
    return built


def environment(device: torch.device) -> dict:
    """What a record names of where it ran: torch, the device, transformers and triton (where installed)."""
    env = dict(torch=torch.__version__, device=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu")
    for name in ("transformers", "triton"):
        try:
            env[name] = __import__(name).__version__
        except ImportError:
            pass
    return env


def timing(r: Runner, c: Config) -> dict:
    """A measured runner's peak, median step, its spread, tokens/s and last loss."""
    step_s = statistics.median(r.times)
    return dict(
        peak=r.peak,
        step_s=step_s,
        step_s_spread=[min(r.times), max(r.times)],
        tokens_per_s=c.batch * c.seq / step_s,
        last_loss=r.losses[-1],
    )


def release(device: torch.device) -> None:
    """Give the memory of the runners just dropped back before the next dtype/optimizer."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def run_modes(
    c: Config,
    dtype: torch.dtype,
    opt_name: str,
    modes: list[str],
    *,
    device: torch.device,
    warmup: int,
    steps: int,
    profile: list[str],
    host: list[str],
    bucket_mb: float,
    kept: int,
    overlap_bucket_mb: float | None = None,
) -> list[dict]:
    """Every mode of one dtype and optimizer in one process (:func:`measure_and_time`)."""

    def buckets(mode: str) -> float:
        return overlap_bucket_mb if overlap_bucket_mb is not None and mode in OVERLAP else bucket_mb

    runners = measure_and_time(
        (Runner(c, dtype, opt_name, mode, device, mode_recipe(mode, buckets(mode))) for mode in modes),
        device,
        warmup,
        steps,
        kept,
    )
    results = []
    for r in runners:
        table = profile_table(r, device) if r.mode in profile and device.type == "cuda" else None
        if r.mode in host:
            table = (table or "") + host_profile(r.model, r.opt, r.batches[0], device)
        results.append(
            dict(
                dtype=str(dtype).removeprefix("torch."),
                optimizer=opt_name,
                mode=r.mode,
                **timing(r, c),
                bucket_mb=r.recipe.bucket_cap_mb if r.recipe.in_backward else None,
                changed=0 if r.report is None else len(r.report.changed),
                # the primitives under the names the record files have (ojas_ref/tools/records.py reads them)
                applied=dict(
                    attention=r.recipe.attention,
                    cross_entropy=r.recipe.linear_cross_entropy,
                    rms_norm=r.recipe.rms_norm,
                    swiglu=r.recipe.swiglu,
                    rope=r.recipe.rope,
                ),
                recipe=dataclasses.asdict(r.recipe),
                left_alone=[] if r.report is None else [s.reason for s in r.report.left_alone],
            )
            | ({"profile": table} if table else {})
        )
    del runners, r
    release(device)
    return results


def markdown(results: list[dict]) -> str:
    lines = [
        "| dtype | optimizer | mode | peak GiB | tokens/s | vs standard, same checkpointing | last loss |",
        "|---|---|---|---|---|---|---|",
    ]
    base = {(r["dtype"], r["optimizer"], "+ckpt" in r["mode"]): r for r in results if r["mode"].startswith("standard")}
    for r in results:
        ref = base.get((r["dtype"], r["optimizer"], "+ckpt" in r["mode"]))
        ratio = f"{r['tokens_per_s'] / ref['tokens_per_s']:.3f}x" if ref else "-"
        lines.append(
            f"| {r['dtype']} | {r['optimizer']} | {r['mode']} | {gib(r['peak'])} | "
            f"{r['tokens_per_s']:,.0f} | {ratio} | {r['last_loss']:.4f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser, warmup=2, steps=5)
    parser.add_argument("--modes", nargs="+", choices=MODES + PIECES + OVERLAP, default=list(MODES))
    parser.add_argument("--bucket-mb", type=float, default=64.0, help="bucket_cap_mb of InBackwardOptimizer")
    parser.add_argument(
        "--overlap-bucket-mb",
        type=float,
        default=None,
        help="bucket_cap_mb of the +overlap modes (default: --bucket-mb)",
    )
    parser.add_argument(
        "--profile", nargs="*", choices=MODES, default=[], help="print the top CUDA kernels of one step of these modes"
    )
    parser.add_argument(
        "--host-profile",
        nargs="*",
        choices=MODES + PIECES,
        default=[],
        help="print the phases' wall times and the operators' CPU times of one step of these modes",
    )
    args = parser.parse_args()
    device = torch.device(args.device)
    c = QUICK if args.quick else Config()
    results = []
    kept = allocate_workspaces(device)
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
                profile=args.profile,
                host=args.host_profile,
                bucket_mb=args.bucket_mb,
                kept=kept,
                overlap_bucket_mb=args.overlap_bucket_mb,
            ):
                if "profile" in r:
                    print(f"== profile {dtype_name} {opt_name} {r['mode']}\n{r.pop('profile')}", flush=True)
                print(json.dumps(r), flush=True)
                results.append(r)
    env = environment(device)
    if args.out:
        args.out.write_text(json.dumps(dict(env=env, config=vars(c), results=results), indent=1))
    print(env)
    print(markdown(results))


if __name__ == "__main__":
    main()
