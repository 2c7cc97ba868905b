"""Benchmark: the fused Triton RMSNorm (ojas_kernels.rms_norm through ojas_ref.rms_norm) beside
Hugging Face's LlamaRMSNorm, torch.nn.functional.rms_norm and torch.compile of LlamaRMSNorm.

    python benchmarks/bench_rms_norm.py [--shapes 2048x2048,8192x4096] [--dtypes bf16,fp32] [--no-compile]
    python benchmarks/bench_rms_norm.py --quick    # tiny shapes on the CPU (Triton interpreter)

Per shape [rows, hidden] and dtype: forward and forward + backward time (median of
``triton.testing.do_bench``: CUDA events, L2 flushed) and the peak memory of one forward +
backward above what was allocated before it (the input, its gradient and the saved tensors
count). Errors: the norm-relative difference of y and dx from the float64 evaluation of
Hugging Face's formula on the same inputs. Kernels per call: CUDA kernels one forward +
backward launches (torch.profiler), the host-bound cost the fused kernel removes. On the
CPU (``--quick``) times are wall-clock medians and there is no peak.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SHAPES = ((2048, 2048), (8192, 4096))
QUICK_SHAPES = ((16, 72),)
DTYPES = {"bf16": "bfloat16", "fp32": "float32", "fp16": "float16"}
EPS = 1e-6


def implementations(torch, module, compile_hf: bool) -> dict:
    """name -> function of x (forward); all of them apply the module's weight."""
    import torch.nn.functional as F

    from ojas_ref.functional.rms_norm import rms_norm

    n = module.weight.shape[0]
    impls = {
        "hf LlamaRMSNorm": module,
        "F.rms_norm": lambda x: F.rms_norm(x, (n,), module.weight, EPS),
        "ojas rms_norm": lambda x: rms_norm(x, n, module.weight, EPS, impl="triton"),
    }
    if compile_hf:
        impls["compile(hf)"] = torch.compile(module)
    return impls


def timer(torch, cuda: bool, fn, reps: int) -> float:
    """Median milliseconds of fn()."""
    if cuda:
        import triton

        return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def peak_mib(torch, fn) -> float:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def kernels_per_call(torch, fn) -> int:
    from torch.profiler import ProfilerActivity, profile

    fn()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


def bench_one(torch, rows: int, n: int, dtype, device: str, args) -> list[str]:
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    cuda = device == "cuda"
    g = torch.Generator(device=device).manual_seed(0)
    module = LlamaRMSNorm(n, eps=EPS).to(device=device, dtype=dtype)
    with torch.no_grad():
        module.weight.copy_(1 + 0.1 * torch.randn(n, generator=g, device=device))
    x = torch.randn(rows, n, generator=g, device=device).to(dtype).requires_grad_()
    dy = torch.randn(rows, n, generator=g, device=device).to(dtype)
    xd = x.detach().double().requires_grad_()
    wd = module.weight.detach().double()
    yd = wd * xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + EPS)
    (dxd,) = torch.autograd.grad(yd, xd, dy.double())
    lines = []
    for name, fn in implementations(torch, module, args.compile and cuda).items():

        def forward():
            with torch.no_grad():
                fn(x)

        def step():
            fn(x).backward(dy)
            x.grad = module.weight.grad = None

        y = fn(x)
        (dx,) = torch.autograd.grad(y, x, dy)
        err_y = ((y.double() - yd).norm() / yd.norm()).item()
        err_dx = ((dx.double() - dxd).norm() / dxd.norm()).item()
        fwd, both = timer(torch, cuda, forward, args.reps), timer(torch, cuda, step, args.reps)
        extra = f" {peak_mib(torch, step):10.1f} {kernels_per_call(torch, step):7d}" if cuda else f" {'-':>10} {'-':>7}"
        lines.append(
            f"{rows}x{n:<6} {str(dtype).removeprefix('torch.'):9} {name:16} {fwd:9.3f} {both:10.3f}"
            f"{extra} {err_y:9.2e} {err_dx:9.2e}"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny shapes on the CPU (Triton interpreter)")
    parser.add_argument("--shapes", default=None, help="comma-separated ROWSxHIDDEN (default 2048x2048,8192x4096)")
    parser.add_argument("--dtypes", default="bf16,fp32", help=f"comma-separated of {sorted(DTYPES)}")
    parser.add_argument("--no-compile", dest="compile", action="store_false", help="skip torch.compile(hf)")
    parser.add_argument("--reps", type=int, default=5, help="CPU timing repetitions")
    args = parser.parse_args()

    import torch

    cuda = torch.cuda.is_available() and not args.quick
    if args.quick and not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"  # before the kernels are imported
    if not cuda and not args.quick:
        sys.exit("needs a CUDA device (or --quick)")
    shapes = QUICK_SHAPES if args.quick else SHAPES
    if args.shapes:
        shapes = tuple(tuple(int(d) for d in s.split("x")) for s in args.shapes.split(","))
    device = "cuda" if cuda else "cpu"
    if cuda:
        print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    print(
        f"{'shape':11} {'dtype':9} {'impl':16} {'fwd ms':>9} {'fwd+bwd ms':>10} {'peak MiB':>10} {'kernels':>7} "
        f"{'err y':>9} {'err dx':>9}"
    )
    for rows, n in shapes:
        for key in args.dtypes.split(","):
            for line in bench_one(torch, rows, n, getattr(torch, DTYPES[key]), device, args):
                print(line, flush=True)


if __name__ == "__main__":
    main()
