"""Benchmark: a reversible transformer stack (ojas_ref.nn.reversible) against the same
stack run ordinarily and with per-block activation checkpointing: memory and step time
at several depths, side by side in one run.

    python benchmarks/bench_reversible.py [--out FILE] [--depths 1,8,16,32,64]
    python benchmarks/bench_reversible.py --quick          # tiny sizes, CPU, proves it runs

Model (RevViT / Reformer): every block is ``AdditiveCoupling(f, g)`` on a doubled
residual stream ``x = cat(x1, x2)``, x1 = x2 = the embedding [B, S, d_model] at the
input; f = LayerNorm + causal multi-head attention (``F.scaled_dot_product_attention``)
+ output projection, g = LayerNorm + MLP (d_model -> 4 d_model -> d_model, GELU). The
three variants run the very same blocks (same parameters, same arithmetic):

* ``ordinary``: ``nn.Sequential(*blocks)``, autograd stores every activation;
* ``checkpoint``: ``torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)``
  per block: the block inputs are stored, each block is recomputed in backward;
* ``reversible``: ``ReversibleSequence(blocks)``: only the output is stored, each
  block's input is reconstructed in backward (each function evaluated once more).

Precision: parameters and the computation inside f and g in bf16 (f and g cast their
input to bf16 and their output back to float32), the residual stream in float32. A bf16
stream would lose about 3 significant digits of the reconstructed activations per block
(x + f - f in 8 bits); a float32 stream with bf16 compute is what RevViT trains with (there
through autocast; explicit casts here avoid autocast's cache of bf16 weight copies, which
would be counted as activation memory).

Measured per (depth, variant), on CUDA: ``step_ms``, the median over ``--steps`` timed
forward+backward steps after ``--warmup`` (CUDA events); ``act_mib``, activation memory:
the peak of ``torch.cuda.max_memory_allocated`` during one step minus the memory
allocated before it minus the output. Before the first step every parameter's and the
input's ``.grad`` is set to zeros, so the steps accumulate into buffers that exist
before the step and the memory before it holds the parameters, their ``.grad``
buffers, the input, its ``.grad`` and the upstream gradient: ``act_mib`` excludes the
gradient buffers (the same for every variant) but includes any gradient an
implementation keeps alive transiently during backward; ``saved_mib``, the bytes autograd saves for backward
(``saved_tensors_hooks``, parameters excluded), which is all the CPU run reports;
``grad_x_rel_diff``, max |grad x - grad x of ordinary| / max |grad x of ordinary|.
Ratios to ``ordinary`` are in the JSON written to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from ojas_ref.nn.reversible import AdditiveCoupling, ReversibleSequence  # noqa: E402

MIB = 2.0**20
COMPUTE = torch.bfloat16


class Attention(nn.Module):
    """f: LayerNorm, causal multi-head self-attention, output projection (no residual)."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self.qkv(self.norm(x.to(COMPUTE))).unflatten(-1, (3, self.heads, -1)).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(o.transpose(1, 2).flatten(-2)).float()


class MLP(nn.Module):
    """g: LayerNorm, d -> 4 d -> d with GELU (no residual)."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d))

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x.to(COMPUTE)).float()


def make_blocks(depth: int, d: int, heads: int, device: torch.device) -> list[AdditiveCoupling]:
    return [AdditiveCoupling(Attention(d, heads), MLP(d)).to(device, COMPUTE) for _ in range(depth)]


def runners(blocks: list[AdditiveCoupling]) -> dict[str, Callable[[Tensor], Tensor]]:
    ordinary = nn.Sequential(*blocks)
    reversible = ReversibleSequence(blocks)

    def checkpointed(x: Tensor) -> Tensor:
        for b in blocks:
            x = checkpoint(b, x, use_reentrant=False)
        return x

    return {"ordinary": ordinary, "checkpoint": checkpointed, "reversible": reversible}


def saved_bytes(run: Callable[[Tensor], Tensor], x: Tensor, params: list[Tensor]) -> int:
    """Bytes autograd saves for backward during run(x), parameters excluded."""
    storages = {p.untyped_storage().data_ptr() for p in params}
    total = 0

    def pack(t: Tensor) -> Tensor:
        nonlocal total
        if t.untyped_storage().data_ptr() not in storages:
            total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = run(x)
    del y
    return total


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_steps(step: Callable[[], None], device: torch.device, warmup: int, steps: int) -> float:
    """Median milliseconds of ``steps`` calls after ``warmup`` calls."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            step()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def measure(
    run: Callable[[Tensor], Tensor],
    x: Tensor,
    gy: Tensor,
    params: list[Tensor],
    device: torch.device,
    warmup: int,
    steps: int,
) -> dict:
    def step() -> None:
        run(x).backward(gy)

    for t in (x, *params):  # gradient buffers that exist before the step: not counted in act_mib
        t.grad = torch.zeros_like(t)
    step()
    grad_x = x.grad.detach().clone()
    result = {"saved_mib": saved_bytes(run, x, params) / MIB}
    if device.type == "cuda":
        sync(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        step()
        sync(device)
        peak = torch.cuda.max_memory_allocated(device) - base
        result["peak_mib"] = peak / MIB
        result["act_mib"] = (peak - gy.numel() * gy.element_size()) / MIB
    result["step_ms"] = timed_steps(step, device, max(warmup - 1, 0), steps)
    return result, grad_x


def bench(args: argparse.Namespace) -> dict:
    device = torch.device(args.device)
    torch.manual_seed(0)
    rows = []
    for depth in args.depths:
        blocks = make_blocks(depth, args.d_model, args.heads, device)
        params = [p for b in blocks for p in b.parameters()]
        e = torch.randn(args.batch, args.seq, args.d_model, device=device)
        x = torch.cat([e, e], dim=-1).requires_grad_()
        gy = torch.randn_like(x)
        reference: Optional[Tensor] = None
        for name, run in runners(blocks).items():
            row = {"depth": depth, "impl": name, "params_mib": sum(p.numel() * p.element_size() for p in params) / MIB}
            try:
                result, grad_x = measure(run, x, gy, params, device, args.warmup, args.steps)
            except torch.OutOfMemoryError:
                row["error"] = "out of memory"
                result, grad_x = {}, None
            row.update(result)
            if name == "ordinary":
                reference = grad_x
            elif reference is not None and grad_x is not None:
                row["grad_x_rel_diff"] = float((grad_x - reference).abs().max() / reference.abs().max())
            rows.append(row)
            print(json.dumps(row), flush=True)
            del grad_x
            if device.type == "cuda":
                torch.cuda.empty_cache()
        del blocks, params, x, gy, reference
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return {
        "config": {k: v for k, v in vars(args).items() if k != "out"},
        "act_mib_definition": ACT_MIB,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "results": rows,
        "ratios": ratios(rows),
    }


def ratios(rows: list[dict]) -> list[dict]:
    """Per depth and variant: memory and time relative to the ordinary stack."""
    by = {(r["depth"], r["impl"]): r for r in rows}
    out = []
    for (depth, impl), r in by.items():
        base = by.get((depth, "ordinary"))
        if impl == "ordinary" or base is None:
            continue
        entry = {"depth": depth, "impl": impl}
        for key in ("act_mib", "saved_mib", "step_ms"):
            if r.get(key) is not None and base.get(key):
                entry[f"{key}_vs_ordinary"] = r[key] / base[key]
        out.append(entry)
    return out


ACT_MIB = (
    "act_mib: peak allocated during a step - allocated before it (parameters, their preallocated .grad "
    "buffers, x, x.grad, upstream gradient) - the output"
)


def print_table(report: dict) -> None:
    print(ACT_MIB)
    cols = ("depth", "impl", "step_ms", "act_mib", "params_mib", "saved_mib", "grad_x_rel_diff")
    print(" | ".join(f"{c:>15}" for c in cols))
    for r in report["results"]:
        cells = []
        for c in cols:
            v = r.get(c, r.get("error", "") if c == "step_ms" else "")
            cells.append(f"{v:>15.4g}" if isinstance(v, float) else f"{v!s:>15}")
        print(" | ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny sizes on the CPU (d_model 64, 4 heads, batch 2, seq 32, depths 1,2,4)",
    )
    parser.add_argument("--out", default="reversible_bench.json", help="JSON report")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--depths", default="1,8,16,32,64")
    parser.add_argument("--d-model", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    if args.quick:
        args.device, args.depths, args.d_model, args.heads, args.batch, args.seq = "cpu", "1,2,4", 64, 4, 2, 32
        args.warmup, args.steps = 1, 3
    args.depths = [int(d) for d in args.depths.split(",")]
    if args.d_model % args.heads:
        parser.error(f"--d-model {args.d_model} must be a multiple of --heads {args.heads}")
    report = bench(args)
    print_table(report)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
