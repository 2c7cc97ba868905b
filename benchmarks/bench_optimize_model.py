"""Benchmark: ``optimize_model`` (+ ``InBackwardOptimizer``) on Hugging Face's ``LlamaForCausalLM``
against the standard training loop, with and without per-layer activation checkpointing.

    python benchmarks/bench_optimize_model.py [--quick] [--out FILE] [--dtypes fp32 bf16]
        [--optimizers sgd adamw] [--modes standard standard+ckpt ojas ojas+ckpt] [--profile MODE ...]

The model is built from a config (no download): hidden 2048, 18 layers, 16 heads,
intermediate 5632, vocabulary 32000, untied head (1.06B parameters), batch 1, sequence
2048, weights and optimizer state in the run's dtype. Modes:

* ``standard``: the model as built (SDPA attention, Hugging Face's loss on the logits),
  ``loss.backward(); opt.step(); opt.zero_grad()``.
* ``standard+ckpt``: the same with ``gradient_checkpointing_enable(use_reentrant=False)``.
* ``ojas`` / ``ojas+ckpt``: ``optimize_model(model, checkpoint=...)`` and
  ``InBackwardOptimizer`` (each bucket of parameters updated in backward).
* ``ojas-attention`` / ``ojas-loss`` / ``ojas-optimizer`` (``--modes``, not run by
  default): one of the three alone, the rest standard.

Per configuration, in one process: the peak of ``torch.cuda.max_memory_allocated`` over
the timed steps and tokens/s from the median step time (CUDA synchronised) after
warm-up steps. ``--profile MODE`` prints torch.profiler's top CUDA kernels of one step
of that mode for each dtype/optimizer, ``--host-profile MODE ...`` the
wall time of forward, backward and step and the operators' CPU times. ``--quick``: a tiny model on the CPU (no memory).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.bench_optimizer_in_backward import (  # noqa: E402
    DTYPES, OPTIMIZERS, QUICK, Config, add_common_arguments, gib, sync)
from ojas_ref import InBackwardOptimizer, optimize_model  # noqa: E402

MODES = ("standard", "standard+ckpt", "ojas", "ojas+ckpt")
#: one piece of ``ojas`` alone (no checkpointing), to see which one costs time
PIECES = ("ojas-attention", "ojas-loss", "ojas-optimizer")


def build(c: Config, dtype: torch.dtype, device: torch.device):
    import transformers

    transformers.logging.set_verbosity_error()
    config = transformers.LlamaConfig(
        vocab_size=c.vocab, hidden_size=c.hidden, intermediate_size=c.intermediate, num_hidden_layers=c.layers,
        num_attention_heads=c.heads, num_key_value_heads=c.heads, max_position_embeddings=c.seq,
        tie_word_embeddings=False, attention_dropout=0.0)
    torch.manual_seed(0)
    with torch.device(device):
        model = transformers.LlamaForCausalLM(config).to(dtype)
    model.config.use_cache = False
    return model


def setup(model, mode: str, opt_name: str):
    opt_class, kwargs = OPTIMIZERS[opt_name]
    if mode.startswith("standard"):
        if mode.endswith("+ckpt"):
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return opt_class(model.parameters(), **kwargs), None
    pieces = {"ojas-attention": (True, False, False), "ojas-loss": (False, True, False),
              "ojas-optimizer": (False, False, True)}
    attention, loss, fused = pieces.get(mode, (True, True, True))
    report = None
    if attention or loss:
        _, report = optimize_model(model, attention=attention, cross_entropy=loss, checkpoint=mode.endswith("+ckpt"))
    if fused:
        return InBackwardOptimizer(model.parameters(), opt_class, **kwargs), report
    return opt_class(model.parameters(), **kwargs), report


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


def run(c: Config, dtype: torch.dtype, opt_name: str, mode: str, *, device: torch.device, warmup: int,
        steps: int, profile: bool, host: bool) -> dict:
    model = build(c, dtype, device)
    model.train()
    opt, report = setup(model, mode, opt_name)
    g = torch.Generator(device="cpu").manual_seed(1)
    batches = [torch.randint(0, c.vocab, (c.batch, c.seq), generator=g).to(device) for _ in range(4)]

    def step(i: int) -> float:
        ids = batches[i % len(batches)]
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    for i in range(warmup):
        step(i)
    sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times, losses = [], []
    for i in range(steps):
        sync(device)
        t0 = time.perf_counter()
        losses.append(step(i))
        sync(device)
        times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    table = None
    if profile and device.type == "cuda":
        from torch.profiler import ProfilerActivity, profile as torch_profile

        with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
            step(0)
            sync(device)
        table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=25)
    if host:
        table = (table or "") + host_profile(model, opt, batches[0], device)
    result = dict(dtype=str(dtype).removeprefix("torch."), optimizer=opt_name, mode=mode, peak=peak,
                  step_s=statistics.median(times), tokens_per_s=c.batch * c.seq / statistics.median(times),
                  last_loss=losses[-1], changed=None if report is None else len(report.changed),
                  left_alone=None if report is None else [s.reason for s in report.left_alone])
    del model, opt, batches
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result | ({"profile": table} if table else {})


def markdown(results: list[dict]) -> str:
    lines = ["| dtype | optimizer | mode | peak GiB | tokens/s | vs standard, same checkpointing | last loss |",
             "|---|---|---|---|---|---|---|"]
    base = {(r["dtype"], r["optimizer"], r["mode"].endswith("+ckpt")): r for r in results
            if r["mode"].startswith("standard")}
    for r in results:
        ref = base.get((r["dtype"], r["optimizer"], r["mode"].endswith("+ckpt")))
        ratio = f"{r['tokens_per_s'] / ref['tokens_per_s']:.3f}x" if ref else "-"
        lines.append(f"| {r['dtype']} | {r['optimizer']} | {r['mode']} | {gib(r['peak'])} | "
                     f"{r['tokens_per_s']:,.0f} | {ratio} | {r['last_loss']:.4f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser, warmup=2, steps=5)
    parser.add_argument("--modes", nargs="+", choices=MODES + PIECES, default=list(MODES))
    parser.add_argument("--profile", nargs="*", choices=MODES, default=[],
                        help="print the top CUDA kernels of one step of these modes")
    parser.add_argument("--host-profile", nargs="*", choices=MODES, default=[],
                        help="print the phases' wall times and the operators' CPU times of one step of these modes")
    args = parser.parse_args()
    device = torch.device(args.device)
    c = QUICK if args.quick else Config()
    results = []
    for dtype_name in args.dtypes:
        for opt_name in args.optimizers:
            for mode in args.modes:
                r = run(c, DTYPES[dtype_name], opt_name, mode, device=device, warmup=args.warmup, steps=args.steps,
                        profile=mode in args.profile, host=mode in args.host_profile)
                if "profile" in r:
                    print(f"== profile {dtype_name} {opt_name} {mode}\n{r.pop('profile')}", flush=True)
                print(json.dumps(r), flush=True)
                results.append(r)
    env = dict(torch=torch.__version__, device=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu")
    try:
        import transformers
        import triton

        env |= dict(transformers=transformers.__version__, triton=triton.__version__)
    except ImportError:
        pass
    if args.out:
        args.out.write_text(json.dumps(dict(env=env, config=vars(c), results=results), indent=1))
    print(env)
    print(markdown(results))


if __name__ == "__main__":
    main()
