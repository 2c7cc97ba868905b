"""Benchmark: ojas_kernels flash attention against PyTorch SDPA (flash, cuDNN) and
the naive materialised-scores attention, bf16, on one CUDA device.

    python benchmarks/bench_attention.py [--quick] [--out FILE]
    python benchmarks/bench_attention.py --tune [--tune-budget S]   # kernel variants, S=4K
    python benchmarks/bench_attention.py --overhead                 # host time per call
    python benchmarks/bench_attention.py --padding                  # masks, float32
    python benchmarks/bench_attention.py --tune-fp32 fwd|kv|q       # float32 tiles, one kernel

Forward FLOPs are counted as 4*B*H*Sq*Sk*E (two matrix products), backward as
2.5 times that, both halved under a causal mask; forward+backward is 3.5 times
the forward count.  Times are medians of ``triton.testing.do_bench`` (CUDA
events, after warm-up, L2 flushed between runs).  Peak memory is the peak of
``torch.cuda.max_memory_allocated`` over one forward+backward, less the inputs.

``--padding``: a left-padded bf16 batch (B=4, H=16, S=2048, E=128; 0, 256, 512 and 768
padding tokens) with Hugging Face's [B, 1, S, S] bool mask (causal and key padding),
ojas with the mask and ``is_causal=True`` (what ``ojas_ref.integrations.hf.attention`` passes for a
mask inside the causal pattern) and with the mask alone, against SDPA with the same mask
(its default dispatch, and the memory-efficient kernel); then float32 causal attention
(B=1, S=2048) under the default "highest" precision, ojas (3xTF32 dots) against SDPA.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from ojas_kernels import attention as kattn  # noqa: E402  (pip install -e ., or a link ojas_kernels -> kernels)

DTYPE = torch.bfloat16
TOKENS = 16 * 1024
HEADS = 16


def naive_attention(q, k, v, is_causal, scale):
    s = (q @ k.transpose(-1, -2)) * scale
    if is_causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return torch.softmax(s.float(), -1).to(q.dtype) @ v


def sdpa(backend):
    def run(q, k, v, is_causal, scale):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale)

    return run


def ojas(config=None):
    def run(q, k, v, is_causal, scale):
        return kattn.flash_attention(q, k, v, is_causal, scale, None, config)

    return run


IMPLS = {
    "ojas": ojas(),
    "flash": sdpa(SDPBackend.FLASH_ATTENTION),
    "cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
    "naive": naive_attention,
}


def flops(b, h, s, e, is_causal):
    f = 4.0 * b * h * s * s * e
    return f / 2 if is_causal else f


def make_inputs(b, h, s, e):
    q, k, v, do = (torch.randn(b, h, s, e, device="cuda", dtype=DTYPE) for _ in range(4))
    for t in (q, k, v):
        t.requires_grad_()
    return q, k, v, do


def measure(fn, b, h, s, e, is_causal):
    """(forward ms, forward+backward ms, peak MiB above the inputs) or None if it does not fit."""
    q, k, v, do = make_inputs(b, h, s, e)
    scale = 1 / math.sqrt(e)
    try:
        with torch.no_grad():
            fwd = triton.testing.do_bench(
                lambda: fn(q, k, v, is_causal, scale), warmup=25, rep=100, return_mode="median"
            )

        def step():
            fn(q, k, v, is_causal, scale).backward(do)

        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
        both = triton.testing.do_bench(step, warmup=25, rep=100, grad_to_none=[q, k, v], return_mode="median")
    except (torch.cuda.OutOfMemoryError, RuntimeError) as err:
        torch.cuda.empty_cache()
        return None, str(err).splitlines()[0][:80]
    finally:
        del q, k, v, do
    return (fwd, both, peak), None


def fits_naive(b, h, s):
    """Rough bytes of the materialised scores through forward and backward (~20 B per score)."""
    return 20 * b * h * s * s < 0.8 * torch.cuda.mem_get_info()[0]


def bench(dims, seqs, impls, out_path):
    rows = []
    header = (
        "| E | S | B | causal | impl | fwd ms | fwd TFLOP/s | fwd+bwd ms | fwd+bwd TFLOP/s | peak MiB |\n"
        "|---|---|---|---|---|---|---|---|---|---|"
    )
    print(header, flush=True)
    lines = [header]
    for e in dims:
        for s in seqs:
            b = max(1, TOKENS // s)
            for is_causal in (False, True):
                res = {}
                for name in impls:
                    if name == "naive" and not fits_naive(b, HEADS, s):
                        res[name] = (None, "skipped: scores would not fit in memory")
                    else:
                        res[name] = measure(IMPLS[name], b, HEADS, s, e, is_causal)
                    f = flops(b, HEADS, s, e, is_causal)
                    got, why = res[name]
                    if got is None:
                        line = f"| {e} | {s} | {b} | {is_causal} | {name} | - | - | - | - | {why} |"
                    else:
                        fwd, both, peak = got
                        line = (
                            f"| {e} | {s} | {b} | {is_causal} | {name} | {fwd:.3f} | {f / fwd / 1e9:.1f} | "
                            f"{both:.3f} | {3.5 * f / both / 1e9:.1f} | {peak:.0f} |"
                        )
                    print(line, flush=True)
                    lines.append(line)
                rows.append(((e, s, b, is_causal), res))
    summary = [
        "",
        "| E | S | causal | fwd ojas/flash | fwd ojas/cuDNN | fwd+bwd ojas/flash | fwd+bwd ojas/cuDNN |",
        "|---|---|---|---|---|---|---|",
    ]
    for (e, s, b, is_causal), res in rows:

        def ratio(peer, i):
            a, p = res.get("ojas", (None,))[0], res.get(peer, (None,))[0]
            return f"{p[i] / a[i]:.2f}" if a and p else "-"

        summary.append(
            f"| {e} | {s} | {is_causal} | {ratio('flash', 0)} | {ratio('cudnn', 0)} | "
            f"{ratio('flash', 1)} | {ratio('cudnn', 1)} |"
        )
    summary[1:1] = [
        "Throughput ratios, ojas TFLOP/s over the peer's (= peer time / ojas time; above 1: ojas faster):",
        "",
    ]
    print("\n".join(summary), flush=True)
    Path(out_path).write_text("\n".join(lines + summary) + "\n")


TUNE_VARIANTS = {  # (BM, BN, warps, stages[, split]); screened for register spills with ptxas first
    "fwd": [(64, 64, 4, 3), (128, 64, 8, 3), (64, 64, 4, 3, False)],
    "bwd_kv": [
        (32, 64, 4, 3),
        (32, 64, 4, 3, True),
        (32, 64, 4, 3, False),
        (64, 64, 4, 3),
        (64, 128, 8, 3),
        (64, 64, 4, 2),
    ],
    "bwd_q": [(128, 64, 8, 3), (64, 64, 4, 3), (128, 64, 8, 4)],
}


def tune_configs(e, is_causal):
    """(kind, variant, AttentionConfig) with one kernel's parameters changed from the default."""
    K, A = kattn.KernelConfig, kattn.AttentionConfig
    base = kattn.default_config(e, DTYPE, torch.device("cuda"), is_causal)
    out = []
    for kind, variants in TUNE_VARIANTS.items():
        for var in map(lambda v: K(*v), variants):
            out.append(
                (
                    kind,
                    var,
                    A(
                        var if kind == "fwd" else base.fwd,
                        var if kind == "bwd_kv" else base.bwd_kv,
                        var if kind == "bwd_q" else base.bwd_q,
                    ),
                )
            )
    return out


def _compile_worker(jobs):
    """Run each (e, is_causal, config) once on a small problem: fills Triton's disk cache.
    S=256, H=16 give the kernels the same integer specialisations as the timed sizes."""
    for e, is_causal, cfg in jobs:
        q, k, v, do = make_inputs(1, HEADS, 256, e)
        try:
            kattn.flash_attention(q, k, v, is_causal, 1 / math.sqrt(e), None, cfg).backward(do)
        except Exception:  # reported by the timing pass
            pass
    torch.cuda.synchronize()


def precompile(jobs, workers):
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    chunks = [jobs[i::workers] for i in range(workers)]
    with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
        list(pool.map(_compile_worker, chunks))


def tune(dims, out_path, budget_s, workers):
    """Time kernel variants at S=4K, B=4, H=16: one kernel's parameters changed at a time."""
    b, s = 4, 4096
    t0 = time.time()
    precompile([(e, c, cfg) for e in dims for c in (False, True) for _, _, cfg in tune_configs(e, c)], workers)
    print(f"precompiled in {time.time() - t0:.0f} s", flush=True)
    start = time.time()
    lines = [
        "| E | causal | kernel | variant (BM, BN, warps, stages, split) | ms | TFLOP/s |",
        "|---|---|---|---|---|---|",
    ]
    print(lines[0], flush=True)
    for e in dims:
        for is_causal in (False, True):
            base = kattn.default_config(e, DTYPE, torch.device("cuda"), is_causal)
            q, k, v, do = make_inputs(b, HEADS, s, e)
            scale = 1 / math.sqrt(e)
            f = flops(b, HEADS, s, e, is_causal)
            with torch.no_grad():
                out, lse = kattn._forward(q, k, v, None, is_causal, scale, None, base)
            for kind, var, cfg in tune_configs(e, is_causal):
                if time.time() - start > budget_s:
                    print("tuning budget spent", flush=True)
                    Path(out_path).write_text("\n".join(lines) + "\n")
                    return
                if kind == "fwd":
                    fn = lambda: kattn._forward(q, k, v, None, is_causal, scale, None, cfg)  # noqa: E731
                    work = f
                else:
                    fn = lambda: kattn._backward(do, q, k, v, None, out, lse, is_causal, scale, None, cfg)  # noqa: E731
                    work = 2.5 * f
                label = (
                    f"| {e} | {is_causal} | {kind} | {var.block_m}, {var.block_n}, {var.num_warps}, "
                    f"{var.num_stages}, {var.split} |"
                )
                try:
                    with torch.no_grad():
                        ms = triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median")
                    line = f"{label} {ms:.3f} | {work / ms / 1e9:.1f} |"
                except Exception as err:  # out of shared memory / registers
                    line = f"{label} - | {type(err).__name__} |"
                print(line, flush=True)
                lines.append(line)
    Path(out_path).write_text("\n".join(lines) + "\n")


def overhead(iters=200):
    """Host time of one forward+backward call on a tiny problem (B=1, H=1, S=128,
    E=64): the GPU work is a few microseconds, so the wall time is the host's."""
    for name in ("ojas", "flash", "cudnn"):
        q, k, v, do = make_inputs(1, 1, 128, 64)
        fn = IMPLS[name]
        for _ in range(10):
            fn(q, k, v, True, 0.125).backward(do)
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(iters):
            fn(q, k, v, True, 0.125).backward(do)
        torch.cuda.synchronize()
        print(
            f"host time per forward+backward call, {name}: {(time.perf_counter() - t) / iters * 1e6:.0f} us", flush=True
        )


def padded_mask(b: int, s: int) -> torch.Tensor:
    """[B, 1, S, S] bool: causal and key padding, row r padded by r * S / 8 tokens on the left."""
    causal = torch.ones(s, s, dtype=torch.bool, device="cuda").tril()
    keys = torch.arange(s, device="cuda")[None, :] >= (torch.arange(b, device="cuda")[:, None] * s // 8)
    return causal[None, None] & keys[:, None, None, :]


def padding() -> None:
    b, h, s, e = 4, 16, 2048, 128
    mask = padded_mask(b, s)
    impls = {
        "ojas mask+causal": lambda q, k, v, c, sc: kattn.flash_attention(q, k, v, True, sc, attn_mask=mask),
        "ojas mask": lambda q, k, v, c, sc: kattn.flash_attention(q, k, v, False, sc, attn_mask=mask),
        "SDPA mask (default)": lambda q, k, v, c, sc: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=sc),
        "SDPA mask (efficient)": lambda q, k, v, c, sc: sdpa_efficient_masked(q, k, v, mask, sc),
    }
    print("| bf16 padded batch | fwd ms | fwd+bwd ms | peak MiB |\n|---|---|---|---|", flush=True)
    for name, fn in impls.items():
        res, err = measure(fn, b, h, s, e, False)
        print(f"| {name} | " + (" | ".join(f"{x:.3f}" for x in res) if res else err) + " |", flush=True)
    global DTYPE
    DTYPE = torch.float32
    print("| float32 causal, B=1 | fwd ms | fwd+bwd ms | peak MiB |\n|---|---|---|---|", flush=True)
    for name, fn in (
        ("ojas (3xTF32)", ojas()),
        ("SDPA (default)", lambda q, k, v, c, sc: F.scaled_dot_product_attention(q, k, v, is_causal=c, scale=sc)),
    ):
        res, err = measure(fn, 1, h, s, e, True)
        print(f"| {name} | " + (" | ".join(f"{x:.3f}" for x in res) if res else err) + " |", flush=True)


def tune_fp32(phase: str) -> None:
    """Time float32 tiles of one kernel (3xTF32 dots under the default "highest" precision),
    E=128, S=2048, H=16, causal; the other two kernels keep the defaults. One phase per
    process: an illegal memory access (seen for some tiles) poisons the CUDA context, so the
    sweep stops there and prints what it measured."""
    import itertools

    K, AC = kattn.KernelConfig, kattn.AttentionConfig
    b, h, s, e = 1, 16, 2048, 128
    q, k, v, do = (torch.randn(b, h, s, e, device="cuda") for _ in range(4))
    scale = e**-0.5
    base = kattn.default_config(e, torch.float32, q.device, True)
    out, lse = kattn.flash_attention_forward(q, k, v, True, scale, None, base)
    if phase == "fwd":
        cands = [K(*c) for c in itertools.product((32, 64), (32, 64), (4, 8), (1, 2, 3))]
        make = lambda c: AC(c, base.bwd_kv, base.bwd_q)  # noqa: E731
        run = lambda cfg: kattn.flash_attention_forward(q, k, v, True, scale, None, cfg)  # noqa: E731
    else:
        if phase == "kv":
            cands = [K(*c) for c in itertools.product((32, 64), (32, 64), (4, 8), (1, 2), (False, True))]
            make = lambda c: AC(base.fwd, c, base.bwd_q)  # noqa: E731
        else:
            cands = [K(*c) for c in itertools.product((32, 64, 128), (16, 32), (4, 8), (1, 2))]
            make = lambda c: AC(base.fwd, base.bwd_kv, c)  # noqa: E731
        run = lambda cfg: kattn._backward(do, q, k, v, None, out, lse, True, scale, None, cfg)  # noqa: E731
    results = []
    for c in cands:
        cfg = make(c)
        try:
            results.append((triton.testing.do_bench(lambda: run(cfg), warmup=10, rep=60, return_mode="median"), c))
        except triton.runtime.errors.OutOfResources:
            continue
        except RuntimeError as err:
            print(f"{phase} {c}: {type(err).__name__} {str(err)[:100]}; sweep stopped", flush=True)
            break
    results.sort(key=lambda r: r[0])
    for t, c in results[:5]:
        print(
            f"| {phase} | {c.block_m}, {c.block_n}, {c.num_warps}, {c.num_stages}, {c.split} | {t:.3f} ms |", flush=True
        )


def sdpa_efficient_masked(q, k, v, mask, scale):
    with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="E=128, S in {1K, 4K} only")
    parser.add_argument("--out", default="attention_bench.md", help="file for the full table")
    parser.add_argument("--impls", default="ojas,flash,cudnn,naive")
    parser.add_argument("--tune", action="store_true", help="time kernel variants instead")
    parser.add_argument("--tune-budget", type=float, default=240.0, help="seconds for --tune's timing")
    parser.add_argument("--tune-dims", default="128,64")
    parser.add_argument("--workers", type=int, default=12, help="processes compiling the --tune variants")
    parser.add_argument("--overhead", action="store_true", help="host time per call on a tiny problem")
    parser.add_argument("--padding", action="store_true", help="left-padded batch with a mask; float32")
    parser.add_argument("--tune-fp32", choices=("fwd", "kv", "q"), help="float32 tiles of one kernel")
    args = parser.parse_args()
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}", flush=True)
    impls = args.impls.split(",")
    if args.overhead:
        overhead()
    elif args.padding:
        padding()
    elif args.tune_fp32:
        tune_fp32(args.tune_fp32)
    elif args.tune:
        tune([int(x) for x in args.tune_dims.split(",")], args.out, args.tune_budget, args.workers)
    elif args.quick:
        bench([128], [1024, 4096], impls, args.out)
    else:
        bench([64, 128], [1024, 2048, 4096, 8192, 16384], impls, args.out)


if __name__ == "__main__":
    main()
