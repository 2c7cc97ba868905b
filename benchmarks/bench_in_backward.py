"""Benchmark: the optimizer run in backward (InBackwardOptimizer) against the
standard ``loss.backward(); opt.step(); opt.zero_grad()`` loop.

    python benchmarks/bench_in_backward.py [--quick] [--out FILE] [--records FILE] [--checkpoint off on]
        [--bucket-mb 64] [--state-device device cpu] [--repeat-standard]

A self-contained Llama-style decoder (RMSNorm, RoPE,
SwiGLU MLP, causal SDPA attention, untied output head; no downloads), by default
hidden 2048, 18 layers, 16 heads, intermediate 5632, vocabulary 32000 (1.06B
parameters), batch 1, sequence 2048, trained in float32 and in bfloat16 (the
parameters, gradients and optimizer state in that dtype) with SGD and AdamW, each
with the standard loop and with InBackwardOptimizer, one after the other in one
process from the same initial weights and batches.  ``--checkpoint on`` wraps every
decoder layer in ``torch.utils.checkpoint.checkpoint(use_reentrant=False)`` in both
loops: activations then no longer set the peak (it moves to the backward pass and
the step, where the gradients are), which is where the update in backward saves memory.
The default runs both, without and with checkpointing.  ``--bucket-mb`` lists the
``bucket_cap_mb`` values of InBackwardOptimizer to run (each against the same
standard run); ``optimizer_calls`` is the number of ``optimizer_class`` steps (one per
bucket) in the last step.  ``--state-device`` lists where InBackwardOptimizer keeps its
state: ``device`` (``state_device=None``, the default) and/or ``cpu``
(``state_device="cpu"``: pinned host memory, streamed to the GPU per bucket); each is
run against the same standard run, and the peak then no longer holds the state (but
about a bucket's per group), at the cost of the host-device copies.

Per configuration: the peak of ``torch.cuda.max_memory_allocated`` over the timed
steps (everything: weights, optimizer state, activations, gradients), the memory
allocated between steps (weights and optimizer state), and the median wall time
of a step (CUDA synchronised) after warm-up steps that create the optimizer
state.  ``max_param_diff`` is the largest difference between the parameters
after the standard and the in-backward runs (0 when bitwise equal; GPU backward
kernels that are not deterministic can make it nonzero: ``--repeat-standard``
runs the standard loop twice and reports that difference as
``standard_repeat_diff``, the floor set by the backward itself).  ``--max-grad-norm``
clips in both loops (``clip_grad_norm_`` vs the two backward passes of
``InBackwardOptimizer.backward``).  ``--quick`` runs a tiny model (on the CPU when
there is no GPU; memory is then not measured).

``--out`` writes the results as JSON; ``--records`` appends them to a records file
(``benchmarks/records.jsonl``, :mod:`benchmarks.records`) as benchmark ``bench_in_backward``,
one record per run and comparison (peers ``standard`` and ``ojas``; the case holds the shape,
dtype, optimizer, checkpointing, buckets and state device, the metrics ``peak_gib``,
``between_steps_gib`` (both on CUDA only), ``step_ms``, ``tokens_per_s``, ``optimizer_calls``
and, for ``ojas``, ``max_param_diff``). The records before the rename are benchmark
``bench_optimizer_in_backward``; docs/benchmarks.md shows both as this benchmark.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks import records  # noqa: E402
from ojas_ref.optim.in_backward import InBackwardOptimizer  # noqa: E402

#: the benchmark's name in its records
BENCHMARK = "bench_in_backward"

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
OPTIMIZERS = {
    "sgd": (torch.optim.SGD, dict(lr=1e-3)),
    "adamw": (torch.optim.AdamW, dict(lr=1e-4, weight_decay=0.1)),
    # Hugging Face Trainer's default optimizer (optim="adamw_torch_fused" with torch >= 2.8)
    "adamw_fused": (torch.optim.AdamW, dict(lr=1e-4, weight_decay=0.1, fused=True)),
}


@dataclass
class Config:
    hidden: int = 2048
    layers: int = 18
    heads: int = 16
    intermediate: int = 5632
    vocab: int = 32000
    batch: int = 1
    seq: int = 2048


QUICK = Config(hidden=64, layers=2, heads=4, intermediate=172, vocab=256, batch=2, seq=64)


# --------------------------------------------------------------------------
# Llama-style model
# --------------------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the two halves of the head dimension by the position's angles."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class Layer(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.heads = c.heads
        self.attn_norm, self.mlp_norm = RMSNorm(c.hidden), RMSNorm(c.hidden)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(c.hidden, c.hidden, bias=False) for _ in range(4))
        self.gate = nn.Linear(c.hidden, c.intermediate, bias=False)
        self.up = nn.Linear(c.hidden, c.intermediate, bias=False)
        self.down = nn.Linear(c.intermediate, c.hidden, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        h = self.attn_norm(x)
        q, k, v = (w(h).view(b, s, self.heads, d // self.heads).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        a = F.scaled_dot_product_attention(rope(q, cos, sin), rope(k, cos, sin), v, is_causal=True)
        x = x + self.wo(a.transpose(1, 2).reshape(b, s, d))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self, c: Config, checkpoint: bool = False) -> None:
        super().__init__()
        self.checkpoint = checkpoint
        self.embed = nn.Embedding(c.vocab, c.hidden)
        self.layers = nn.ModuleList(Layer(c) for _ in range(c.layers))
        self.norm = RMSNorm(c.hidden)
        self.head = nn.Linear(c.hidden, c.vocab, bias=False)
        half = c.hidden // c.heads // 2
        angles = torch.outer(
            torch.arange(c.seq, dtype=torch.float32), 10000.0 ** (-torch.arange(half, dtype=torch.float32) / half)
        )
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        cos, sin = self.cos.to(x.dtype), self.sin.to(x.dtype)
        for layer in self.layers:
            if self.checkpoint:
                x = torch.utils.checkpoint.checkpoint(layer, x, cos, sin, use_reentrant=False)
            else:
                x = layer(x, cos, sin)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


# --------------------------------------------------------------------------
# Measurement
# --------------------------------------------------------------------------


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run(
    c: Config,
    dtype: torch.dtype,
    opt_name: str,
    mode: str,
    *,
    device: torch.device,
    warmup: int,
    steps: int,
    max_grad_norm: Optional[float],
    checkpoint: bool,
    bucket_mb: Optional[float] = None,
    state_device: Optional[str] = None,
) -> tuple[dict, list[torch.Tensor]]:
    """Train ``warmup + steps`` steps; return the measurements and the final parameters (on the CPU)."""
    torch.manual_seed(0)
    with torch.device(device):
        model = Llama(c, checkpoint=checkpoint).to(dtype)
    cls, kwargs = OPTIMIZERS[opt_name]
    calls = [0]
    if mode == "standard":
        opt = cls(model.parameters(), **kwargs)
    else:
        opt = InBackwardOptimizer(
            model.parameters(),
            cls,
            max_grad_norm=max_grad_norm,
            bucket_cap_mb=bucket_mb,
            state_device=state_device,
            **kwargs,
        )
        for bucket_opt in opt._group_opts:
            bucket_opt.register_step_post_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    gen = torch.Generator().manual_seed(1)
    batches = [torch.randint(c.vocab, (c.batch, c.seq + 1), generator=gen).to(device) for _ in range(2)]

    def step(i: int) -> None:
        calls[0] = 0
        tokens = batches[i % len(batches)]
        loss = model(tokens[:, :-1], tokens[:, 1:])
        if mode == "standard":
            loss.backward()
            if max_grad_norm is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        else:
            opt.backward(loss)
        opt.step()
        opt.zero_grad(set_to_none=True)

    for i in range(warmup):
        step(i)
    sync(device)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    static = torch.cuda.memory_allocated(device) if cuda else None
    times = []
    for i in range(warmup, warmup + steps):
        t0 = time.perf_counter()
        step(i)
        sync(device)
        times.append(time.perf_counter() - t0)
    result = {
        "dtype": next(k for k, v in DTYPES.items() if v == dtype),
        "optimizer": opt_name,
        "mode": mode,
        "checkpoint": checkpoint,
        "bucket_mb": bucket_mb,
        "state_device": state_device,
        "optimizer_calls": calls[0] if mode == "in_backward" else 1,
        "peak_bytes": torch.cuda.max_memory_allocated(device) if cuda else None,
        "between_steps_bytes": static,
        "median_step_ms": 1e3 * statistics.median(times),
        "step_ms": [1e3 * t for t in times],
    }
    params = [p.detach().to("cpu", copy=True) for p in model.parameters()]
    del model, opt, batches
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return result, params


def gib(x: Optional[int]) -> str:
    return "-" if x is None else f"{x / 2**30:.2f}"


def add_common_arguments(parser: argparse.ArgumentParser, warmup: int, steps: int) -> None:
    """The options this benchmark shares with bench_optimize_model.py."""
    parser.add_argument("--quick", action="store_true", help="tiny model (runs on the CPU)")
    parser.add_argument("--out", type=Path, help="write the results as JSON to this path")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtypes", nargs="+", choices=list(DTYPES), default=list(DTYPES))
    parser.add_argument("--optimizers", nargs="+", choices=list(OPTIMIZERS), default=["sgd", "adamw"])
    parser.add_argument("--warmup", type=int, default=warmup)
    parser.add_argument("--steps", type=int, default=steps)


def model_name(n_params: int) -> str:
    """The ``model`` of a record's case: ``llama-style 1.06B`` (``...M`` below a billion parameters)."""
    return f"llama-style {n_params / 1e9:.2f}B" if n_params >= 1e9 else f"llama-style {n_params / 1e6:.2f}M"


def append_records(
    path: Path, env: dict, case: dict, tokens: int, std: dict, in_backward: dict, param_diff: float
) -> None:
    """Append one comparison to the records file ``path``: the standard run (peer ``standard``) and
    the in-backward run (peer ``ojas``), with ``case`` and the metrics of the module docstring."""
    for peer, result in (("standard", std), ("ojas", in_backward)):
        metrics = {
            "peak_gib": None if result["peak_bytes"] is None else result["peak_bytes"] / 2**30,
            "between_steps_gib": None
            if result["between_steps_bytes"] is None
            else result["between_steps_bytes"] / 2**30,
            "step_ms": result["median_step_ms"],
            "tokens_per_s": tokens / (result["median_step_ms"] / 1e3),
            "optimizer_calls": result["optimizer_calls"],
            "max_param_diff": param_diff if peer == "ojas" else None,
        }
        records.append(
            BENCHMARK,
            case,
            {k: v for k, v in metrics.items() if v is not None},
            peer,
            path=path,
            date=env["date"],
            commit=env["commit"],
            device_name=env["device"],
            versions=env["versions"],
        )


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser, warmup=3, steps=10)
    parser.add_argument(
        "--records", type=Path, help=f"append the results to this records file as benchmark {BENCHMARK}"
    )
    parser.add_argument(
        "--max-grad-norm", type=float, default=None, help="clip in both loops (in backward: two backward passes)"
    )
    parser.add_argument(
        "--checkpoint",
        nargs="+",
        choices=("off", "on"),
        default=["off", "on"],
        help="activation checkpointing per decoder layer (use_reentrant=False), in both loops",
    )
    parser.add_argument(
        "--bucket-mb",
        nargs="+",
        type=float,
        default=[64.0],
        help="bucket_cap_mb values of InBackwardOptimizer (0: one update per parameter)",
    )
    parser.add_argument(
        "--state-device",
        nargs="+",
        choices=("device", "cpu"),
        default=["device"],
        help="where InBackwardOptimizer keeps its state: device (state_device=None) and/or "
        "cpu (state_device='cpu': pinned host memory, streamed per bucket)",
    )
    parser.add_argument(
        "--repeat-standard",
        action="store_true",
        help="run the standard loop twice to measure the nondeterminism of the backward",
    )
    args = parser.parse_args(argv)
    c = QUICK if args.quick else Config()
    device = torch.device(args.device)
    n_params = sum(p.numel() for p in Llama(c).to("meta").parameters())
    env = records.environment(device) if args.records is not None else None
    print(
        f"Llama-style model: {n_params / 1e6:.2f}M parameters, {asdict(c)}, device {device}"
        + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""),
        flush=True,
    )

    def max_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
        return max(float((x.float() - y.float()).abs().max()) for x, y in zip(a, b))

    results, comparisons = [], []
    for ckpt in args.checkpoint:
        for dname in args.dtypes:
            for opt_name in args.optimizers:
                common = dict(
                    device=device,
                    warmup=args.warmup,
                    steps=args.steps,
                    max_grad_norm=args.max_grad_norm,
                    checkpoint=ckpt == "on",
                )
                std, std_params = run(c, DTYPES[dname], opt_name, "standard", **common)
                results.append(std)
                repeat_diff = None
                if args.repeat_standard:
                    again, again_params = run(c, DTYPES[dname], opt_name, "standard", **common)
                    repeat_diff = max_diff(std_params, again_params)
                    del again, again_params
                for bucket_mb, where in [(b, w) for b in args.bucket_mb for w in args.state_device]:
                    state_device = None if where == "device" else where
                    in_backward, in_backward_params = run(
                        c,
                        DTYPES[dname],
                        opt_name,
                        "in_backward",
                        bucket_mb=bucket_mb,
                        state_device=state_device,
                        **common,
                    )
                    results.append(in_backward)
                    cmp = {
                        "checkpoint": ckpt == "on",
                        "dtype": dname,
                        "optimizer": opt_name,
                        "bucket_mb": bucket_mb,
                        "state_device": where,
                        "peak_standard_bytes": std["peak_bytes"],
                        "peak_in_backward_bytes": in_backward["peak_bytes"],
                        "peak_ratio": None
                        if std["peak_bytes"] is None
                        else in_backward["peak_bytes"] / std["peak_bytes"],
                        "peak_saved_bytes": None
                        if std["peak_bytes"] is None
                        else std["peak_bytes"] - in_backward["peak_bytes"],
                        "step_ms_standard": std["median_step_ms"],
                        "step_ms_in_backward": in_backward["median_step_ms"],
                        "time_ratio": in_backward["median_step_ms"] / std["median_step_ms"],
                        "optimizer_calls": in_backward["optimizer_calls"],
                        "max_param_diff": max_diff(std_params, in_backward_params),
                        "standard_repeat_diff": repeat_diff,
                    }
                    comparisons.append(cmp)
                    print(row(cmp), flush=True)
                    if env is not None:
                        case = dict(
                            model=model_name(n_params),
                            **asdict(c),
                            dtype=dname,
                            optimizer=opt_name,
                            checkpoint=ckpt == "on",
                            bucket_mb=bucket_mb,
                            state_device=where,
                            warmup=args.warmup,
                            steps=args.steps,
                        )
                        if args.max_grad_norm is not None:
                            case["max_grad_norm"] = args.max_grad_norm
                        tokens = c.batch * c.seq
                        append_records(args.records, env, case, tokens, std, in_backward, cmp["max_param_diff"])
                    del in_backward_params
                del std_params

    print("\n" + HEADER)
    for cmp in comparisons:
        print(row(cmp))

    if args.out is not None:
        report = {
            "config": asdict(c),
            "parameters": n_params,
            "device": str(device),
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
            "torch": torch.__version__,
            "warmup": args.warmup,
            "steps": args.steps,
            "max_grad_norm": args.max_grad_norm,
            "checkpoint": args.checkpoint,
            "bucket_mb": args.bucket_mb,
            "state_device": args.state_device,
            "results": results,
            "comparisons": comparisons,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
        print(f"\nwrote {args.out}")


HEADER = (
    f"{'ckpt':4} {'dtype':5} {'opt':5} {'bucket':>6} {'state':>6} | {'peak GiB std':>12} {'in-bwd':>7} {'saved':>6} | "
    f"{'step ms std':>11} {'in-bwd':>8} {'ratio':>6} | {'calls':>5} | {'max |param diff|':>16} {'std vs std':>10}"
)


def row(cmp: dict) -> str:
    saved = "-" if cmp["peak_saved_bytes"] is None else f"{cmp['peak_saved_bytes'] / 2**30:.2f}"
    repeat = "-" if cmp["standard_repeat_diff"] is None else f"{cmp['standard_repeat_diff']:.3g}"
    return (
        f"{'on' if cmp['checkpoint'] else 'off':4} {cmp['dtype']:5} {cmp['optimizer']:5} {cmp['bucket_mb']:6g} "
        f"{cmp.get('state_device', 'device'):>6} | "
        f"{gib(cmp['peak_standard_bytes']):>12} {gib(cmp['peak_in_backward_bytes']):>7} {saved:>6} | "
        f"{cmp['step_ms_standard']:11.1f} {cmp['step_ms_in_backward']:8.1f} {cmp['time_ratio']:6.3f} | "
        f"{cmp['optimizer_calls']:5d} | {cmp['max_param_diff']:16.3g} {repeat:>10}"
    )


if __name__ == "__main__":
    main()
