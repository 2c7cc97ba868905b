"""Benchmark: the fused RoPE (``ojas_ref.functional.rope``) beside Hugging Face's Llama
``apply_rotary_pos_emb``, forward + backward.

    python benchmarks/bench_rope.py [--out FILE] [--impl auto|reference|triton]
    python benchmarks/bench_rope.py --quick          # tiny sizes, CPU, proves it runs

Shapes (batch, query heads, key/value heads, sequence, head dim), q and k in Hugging Face's
layout (``proj(x).view(B, S, H, E).transpose(1, 2)``), cos/sin ``[B, S, E]``: a 1B Llama at
2K tokens (1, 16, 16, 2048, 128) and Llama-3 8B at 8K (1, 32, 8, 8192, 128), bfloat16 and
float32.  One step is ``q_out, k_out = fn(q, k, cos, sin)`` and their backward.

Measured per (shape, dtype, variant): ``step_ms`` (``triton.testing.do_bench``'s median on
CUDA, ``time.perf_counter``'s on the CPU), ``host_us`` (CUDA: the host time of one step,
from 200 unsynchronised steps of a tiny shape, where the GPU keeps up), ``equal``: outputs
and gradients ``torch.equal`` to Hugging Face's (the kernel is meant to be bit for bit).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.bench_swiglu import kernel_bench_cli, write_rows  # noqa: E402
from ojas_ref.functional.rope import apply_rotary_pos_emb  # noqa: E402

SHAPES = [(1, 16, 16, 2048, 128), (1, 32, 8, 8192, 128)]
QUICK_SHAPES = [(2, 4, 2, 37, 16)]
TINY = (1, 2, 2, 16, 16)
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}

Rope = Callable[[Tensor, Tensor, Tensor, Tensor], tuple[Tensor, Tensor]]


def inputs(shape: tuple[int, ...], dtype: torch.dtype, device: str) -> tuple[Tensor, ...]:
    b, hq, hkv, s, e = shape
    g = torch.Generator(device).manual_seed(0)
    q = torch.randn(b, s, hq, e, device=device, generator=g).to(dtype).transpose(1, 2).requires_grad_()
    k = torch.randn(b, s, hkv, e, device=device, generator=g).to(dtype).transpose(1, 2).requires_grad_()
    cos, sin = (torch.randn(b, s, e, device=device, generator=g).to(dtype) for _ in range(2))
    dq, dk = torch.randn_like(q), torch.randn_like(k)
    return q, k, cos, sin, dq, dk


def step(fn: Rope, q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, dq: Tensor, dk: Tensor) -> tuple[Tensor, ...]:
    q_out, k_out = fn(q, k, cos, sin)
    torch.autograd.backward((q_out, k_out), (dq, dk))
    return q_out.detach(), k_out.detach()


def step_ms(fn: Rope, args: tuple[Tensor, ...], reps: int) -> float:
    q, k = args[:2]
    if q.is_cuda:
        import triton

        return triton.testing.do_bench(
            lambda: step(fn, *args), warmup=25, rep=100, grad_to_none=[q, k], return_mode="median"
        )
    times = []
    for _ in range(reps):
        q.grad = k.grad = None
        t0 = time.perf_counter()
        step(fn, *args)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def host_us(fn: Rope, dtype: torch.dtype) -> float:
    args = inputs(TINY, dtype, "cuda")
    for _ in range(10):
        step(fn, *args)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(200):
        step(fn, *args)
    return (time.perf_counter() - t0) / 200 * 1e6


def run_case(shape: tuple[int, ...], dtype: torch.dtype, device: str, impl: str, reps: int) -> list[dict]:
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb as hf_rope

    variants: dict[str, Rope] = {"hf": hf_rope, "ojas": lambda q, k, c, s: apply_rotary_pos_emb(q, k, c, s, impl=impl)}
    args = inputs(shape, dtype, device)
    q, k = args[:2]
    results = {}
    for name, fn in variants.items():
        q.grad = k.grad = None
        results[name] = (*step(fn, *args), q.grad, k.grad)
    q.grad = k.grad = None
    rows = []
    for name, fn in variants.items():
        row = {
            "shape": list(shape),
            "dtype": str(dtype).removeprefix("torch."),
            "variant": name,
            "step_ms": step_ms(fn, args, reps),
            "equal": all(torch.equal(a, b) for a, b in zip(results[name], results["hf"])),
        }
        if device == "cuda":
            row["host_us"] = host_us(fn, dtype)
        rows.append(row)
    return rows


def main() -> None:
    args, device = kernel_bench_cli(__doc__, "the ojas function")
    shapes = QUICK_SHAPES if args.quick else SHAPES
    rows = [
        row for shape in shapes for dtype in DTYPES.values() for row in run_case(shape, dtype, device, args.impl, 5)
    ]
    print(f"{'shape (B,Hq,Hkv,S,E)':>22} {'dtype':>9} {'variant':>7} {'step ms':>9} {'host us':>8} {'equal':>6}")
    for r in rows:
        host = f"{r['host_us']:8.1f}" if "host_us" in r else f"{'-':>8}"
        print(
            f"{','.join(map(str, r['shape'])):>22} {r['dtype']:>9} {r['variant']:>7} {r['step_ms']:9.3f} "
            f"{host} {str(r['equal']):>6}"
        )
    write_rows(args.out, device, rows)


if __name__ == "__main__":
    main()
