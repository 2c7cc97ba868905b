"""Benchmark: ``ojas_ref.swiglu(a, b)`` beside torch's ``F.silu(a) * b``, forward + backward; with
``--activation gelu_tanh`` (or ``all``) GeGLU, ``ojas_ref.swiglu(a, b, activation="gelu_tanh")``
beside Hugging Face's Gemma MLP activation, ``GELUTanh`` (``F.gelu(a, approximate="tanh") * b``).

    python benchmarks/bench_swiglu.py [--out FILE] [--impl auto|reference|triton]
                                      [--activation silu|gelu_tanh|all]
    python benchmarks/bench_swiglu.py --quick          # tiny sizes, CPU, proves it runs

Shapes ``[tokens, intermediate]``: [2048, 5632] (a 1B Llama's MLP at 2K tokens) and
[8192, 14336] (Llama-3 8B's at 8K tokens), bfloat16 and float32.  One step is
``h = fn(a, b); h.backward(dh)`` with ``a`` and ``b`` leaves that require grad.

Measured per (activation, shape, dtype, variant): ``step_ms``, the median of
``triton.testing.do_bench`` on CUDA (their ``.grad`` reset to None between runs), the
median of ``time.perf_counter`` over a few steps on the CPU; ``saved_mib``, the bytes
autograd saves for backward (``saved_tensors_hooks``: ``a``, ``b`` and, for torch,
``act(a)``); ``peak_mib`` (CUDA only), ``torch.cuda.max_memory_allocated`` during one
step minus the memory allocated before it (the inputs and ``dh``), so it counts ``h``, the
saved tensors, the gradients and any temporaries; ``max_rel_diff``, the largest
``max |x - x_torch| / max |x_torch|`` over ``h``, ``da``, ``db``.
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
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from ojas_ref.functional.swiglu import ACTIVATIONS, swiglu  # noqa: E402

MIB = 2.0**20
SHAPES = [(2048, 5632), (8192, 14336)]
QUICK_SHAPES = [(64, 176), (100, 300)]
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def torch_gated(activation: str) -> Callable[[Tensor, Tensor], Tensor]:
    """Hugging Face's MLP gate product: ``act_fn(a) * b`` with its SiLU or GELUTanh module (torch's
    ``F.silu`` / ``F.gelu(approximate="tanh")`` when transformers is not installed)."""
    try:
        from transformers.activations import ACT2FN

        act = ACT2FN["silu" if activation == "silu" else "gelu_pytorch_tanh"]
    except ImportError:
        act = F.silu if activation == "silu" else lambda x: F.gelu(x, approximate="tanh")
    return lambda a, b: act(a) * b


def step(fn: Callable[[Tensor, Tensor], Tensor], a: Tensor, b: Tensor, dh: Tensor) -> Tensor:
    h = fn(a, b)
    h.backward(dh)
    return h


def saved_bytes(fn: Callable[[Tensor, Tensor], Tensor], a: Tensor, b: Tensor) -> int:
    seen: dict[int, int] = {}

    def pack(t: Tensor) -> Tensor:
        seen[t.data_ptr()] = t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(a, b)
    return sum(seen.values())


def time_ms(fn: Callable[[Tensor, Tensor], Tensor], a: Tensor, b: Tensor, dh: Tensor, reps: int) -> float:
    if a.is_cuda:
        import triton

        return triton.testing.do_bench(
            lambda: step(fn, a, b, dh), warmup=25, rep=100, grad_to_none=[a, b], return_mode="median"
        )
    times = []
    for _ in range(reps):
        a.grad = b.grad = None
        t0 = time.perf_counter()
        step(fn, a, b, dh)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def peak_mib(fn: Callable[[Tensor, Tensor], Tensor], a: Tensor, b: Tensor, dh: Tensor) -> float:
    a.grad = b.grad = None
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    h = step(fn, a, b, dh)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    del h
    return peak / MIB


def rel_diff(x: Tensor, ref: Tensor) -> float:
    scale = ref.abs().max().item()
    return (x.float() - ref.float()).abs().max().item() / (scale or 1.0)


def run_case(
    shape: tuple[int, int], dtype: torch.dtype, device: str, impl: str, reps: int, activation: str = "silu"
) -> list[dict]:
    g = torch.Generator(device).manual_seed(0)
    a = (torch.randn(shape, device=device, generator=g) * 3).to(dtype).requires_grad_()
    b = torch.randn(shape, device=device, generator=g).to(dtype).requires_grad_()
    dh = torch.randn(shape, device=device, generator=g).to(dtype)
    variants = {"torch": torch_gated(activation), "ojas": lambda x, y: swiglu(x, y, activation=activation, impl=impl)}
    outs = {}
    for name, fn in variants.items():
        a.grad = b.grad = None
        h = step(fn, a, b, dh)
        outs[name] = (h.detach(), a.grad, b.grad)
        a.grad = b.grad = None  # the timed steps below would accumulate into these (do_bench's first call)
    rows = []
    for name, fn in variants.items():
        row = {
            "activation": activation,
            "shape": list(shape),
            "dtype": str(dtype).removeprefix("torch."),
            "variant": name,
            "step_ms": time_ms(fn, a, b, dh, reps),
            "saved_mib": saved_bytes(fn, a, b) / MIB,
            "max_rel_diff": max(rel_diff(x, r) for x, r in zip(outs[name], outs["torch"])),
        }
        if a.is_cuda:
            row["peak_mib"] = peak_mib(fn, a, b, dh)
        rows.append(row)
    return rows


def kernel_bench_cli(
    doc: str, impl_of: str, extra: Optional[Callable[[argparse.ArgumentParser], None]] = None
) -> tuple[argparse.Namespace, str]:
    """The command line of a kernel benchmark (``--quick``, ``--impl``, ``--out``, and what ``extra``
    adds) and its device: the CPU with ``--quick``, else CUDA (an error without it)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny shapes on the CPU (checks that it runs)")
    parser.add_argument(
        "--impl",
        default="auto",
        choices=["auto", "reference", "triton"],
        help=f"{impl_of}'s impl (auto: the Triton kernel on CUDA)",
    )
    parser.add_argument("--out", type=Path, help="write the rows as JSON")
    if extra is not None:
        extra(parser)
    args = parser.parse_args()
    if not args.quick and not torch.cuda.is_available():
        parser.error("needs CUDA (or --quick for the CPU)")
    return args, "cpu" if args.quick else "cuda"


def write_rows(path: Optional[Path], device: str, rows: list[dict]) -> None:
    """The rows as JSON, with the device and torch's version, when ``--out`` was given."""
    if path:
        path.write_text(
            json.dumps(
                {
                    "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
                    "torch": torch.__version__,
                    "rows": rows,
                },
                indent=2,
            )
            + "\n"
        )


def _activation_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--activation",
        default="silu",
        choices=[*ACTIVATIONS, "all"],
        help="the gate's activation: silu (SwiGLU), gelu_tanh (GeGLU, Gemma's), or all",
    )


def main() -> None:
    args, device = kernel_bench_cli(__doc__, "ojas_ref.swiglu", _activation_option)
    shapes = QUICK_SHAPES if args.quick else SHAPES
    activations = ACTIVATIONS if args.activation == "all" else (args.activation,)
    rows = [
        row
        for activation in activations
        for shape in shapes
        for dtype in DTYPES.values()
        for row in run_case(shape, dtype, device, args.impl, 5, activation)
    ]
    print(
        f"{'activation':>10} {'shape':>14} {'dtype':>9} {'variant':>7} {'step ms':>9} {'saved MiB':>10} "
        f"{'peak MiB':>9} {'rel diff':>9}"
    )
    for r in rows:
        peak = f"{r['peak_mib']:9.1f}" if "peak_mib" in r else f"{'-':>9}"
        print(
            f"{r['activation']:>10} {'x'.join(map(str, r['shape'])):>14} {r['dtype']:>9} {r['variant']:>7} "
            f"{r['step_ms']:9.3f} {r['saved_mib']:10.2f} {peak} {r['max_rel_diff']:9.2e}"
        )
    write_rows(args.out, device, rows)


if __name__ == "__main__":
    main()
