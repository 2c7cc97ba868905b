"""Benchmark: the Triton linear cross-entropy (ojas_kernels.linear_cross_entropy)
against Liger-Kernel's fused linear cross-entropy, Apple's Cut Cross-Entropy (CCE,
filtered and exact), torch's F.linear_cross_entropy and materialised logits, forward
+ backward, bf16, one CUDA device.

    python benchmarks/bench_linear_cross_entropy.py [--out FILE] [--records FILE] [--impls a,b] [--shapes big,v32k]
    python benchmarks/bench_linear_cross_entropy.py --tune [--shapes big]   # kernel variants
    python benchmarks/bench_linear_cross_entropy.py --profile               # CUDA time per kernel, ojas
    python benchmarks/bench_linear_cross_entropy.py --screen                # sm_90a registers/spills, no GPU
    python benchmarks/bench_linear_cross_entropy.py --quick                 # tiny shapes on the CPU

Shapes: N = 16384 tokens, D = 4096, V = 128256 ("big") and 32000 ("v32k"), and N = 8192,
D = 2048, V = 256000 ("v256k"), a fraction 0 or 0.5 of the targets ignored (-100, drawn
at random), reduction "mean"; after both fractions of a shape, each implementation's time
with half ignored over its time with none (the issue's bound for ojas: 0.55).  "ojas" is
the kernel's own entry (``ojas_kernels.linear_cross_entropy.linear_cross_entropy``),
"ojas_api" the public call (``ojas_ref.linear_cross_entropy``, which checks the targets, a
host sync, and dispatches to the kernel for bf16 CUDA tensors).  Inputs: x ~ N(0, 1),
W ~ N(0, 1/D) times ``--logit-std`` (logits of about that standard deviation; CCE's
default filter skips more blocks the peakier the softmax).  Times: median of
``triton.testing.do_bench`` (CUDA events, L2 flushed) of forward + backward.  Peak:
``torch.cuda.max_memory_allocated`` over one forward + backward, less the memory
allocated before it (the inputs), so the gradients are part of it; "x grads" is peak
over the gradients' bytes (dX + dW in bf16; issue 30's bound is 1.05).  Errors: the
gradients' norm-relative difference from ojas_ref's chunked reference in float32 on
the same bf16 inputs; ojas returns the loss in float32, as ojas_ref and the peers do
(the runs before 2026-12-01, e.g. the records of 2026-11-29 at commit 728d179 in
benchmarks/records.jsonl, returned it in the input dtype, so their "loss err" is that bf16 rounding,
at most 2^-9).  FLOPs: each matrix product over the kept tokens is 2 K D V;
"3-GEMM floor" is 3 of them at 790 TFLOP/s (the bf16 rate KINDS.md records for the
H200): logits, grad_input and grad_weight, what ojas (``products`` 3, the default)
and Liger run; the 4-product design recomputes the logits in the backward.

``--configs 'peak 0.05;products 4 workspace 0.05'``: those ``--tune`` variants of the kernel's
config are measured beside the peers as implementations ``ojas[peak 0.05]`` and so on.

``--records FILE``: each measured implementation of each shape and fraction is appended to
FILE (e.g. benchmarks/records.jsonl) as a ``bench_linear_cross_entropy`` record (benchmarks/records.py:
case N, D, V, dtype, ignored, reduction; metrics ms, peak_mib, peak_over_gradients and the errors;
peer the implementation).

Peers are imported from the wheels in .whl/ (benchmarks/linear_cross_entropy_tuning.md
says how to install them on the device); missing ones are reported and skipped.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
import math
import os
import sys
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SHAPES = {"big": (16384, 4096, 128256), "v32k": (16384, 4096, 32000), "v256k": (8192, 2048, 256000)}
QUICK_SHAPES = {"tiny": (48, 32, 300)}
BF16_TFLOPS = 790.0
HBM_TBS = 4.3


def import_ojas_kernels():
    """``ojas_kernels`` (the repo's kernels/ package) whether or not the project is installed."""
    try:
        return importlib.import_module("ojas_kernels.linear_cross_entropy")
    except ImportError:
        package = ROOT / "kernels" / "ojas_kernels"
        spec = importlib.util.spec_from_file_location(
            "ojas_kernels", package / "__init__.py", submodule_search_locations=[str(package)]
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules["ojas_kernels"] = module
        spec.loader.exec_module(module)
        return importlib.import_module("ojas_kernels.linear_cross_entropy")


# ---------------------------------------------------------------------------
# Implementations: fn(x, w, t) -> loss ("mean" over the targets that are not -100)
# ---------------------------------------------------------------------------


def make_impls(torch, F, klce, cuda: bool) -> dict:
    """name -> (fn or None, why not)."""
    ref = importlib.import_module("ojas_ref.functional.linear_cross_entropy")
    impls = {
        "ojas": (lambda x, w, t: klce.linear_cross_entropy(x, w, t), None),
        "ojas_api": (lambda x, w, t: ref.linear_cross_entropy(x, w, t), None),
        "materialised": (lambda x, w, t: F.cross_entropy((x @ w.T).float(), t), None),
    }
    if hasattr(F, "linear_cross_entropy"):
        if hasattr(torch.nn, "LinearCrossEntropyOptions"):
            opts = torch.nn.LinearCrossEntropyOptions()
            impls["torch_chunked"] = (
                lambda x, w, t: F.linear_cross_entropy(x, w, t, ignore_index=-100, options=opts),
                None,
            )
        else:
            impls["torch_chunked"] = (None, "torch has F.linear_cross_entropy but no LinearCrossEntropyOptions")
    else:
        impls["torch_chunked"] = (None, f"torch {torch.__version__} has no F.linear_cross_entropy")
    if not cuda:
        impls["ojas_reference"] = (lambda x, w, t: ref.linear_cross_entropy(x, w, t, impl="reference"), None)
        for name in ("liger", "cce", "cce_exact"):
            impls[name] = (None, "needs CUDA")
        return impls
    try:
        from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

        impls["liger"] = (lambda x, w, t: liger_fused_linear_cross_entropy(x, w, t, ignore_index=-100), None)
    except ImportError as err:
        impls["liger"] = (None, f"liger_kernel not importable: {err}")
    try:
        from cut_cross_entropy import linear_cross_entropy as cce

        impls["cce"] = (lambda x, w, t: cce(x, w, t, ignore_index=-100, impl="cce"), None)

        def cce_exact(x, w, t):
            try:  # newer releases: impl="cce_exact"; 25.1.1: filter_eps=None
                return cce(x, w, t, ignore_index=-100, impl="cce_exact")
            except (NotImplementedError, ValueError, KeyError):
                return cce(x, w, t, ignore_index=-100, impl="cce", filter_eps=None)

        impls["cce_exact"] = (cce_exact, None)
    except ImportError as err:
        impls["cce"] = impls["cce_exact"] = (None, f"cut_cross_entropy not importable: {err}")
    return impls


# ---------------------------------------------------------------------------
# Measurement
# ---------------------------------------------------------------------------


def make_inputs(torch, N, D, V, ignored, device, logit_std, seed=0):
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(N, D, generator=gen, device=device).to(torch.bfloat16).requires_grad_()
    w = (torch.randn(V, D, generator=gen, device=device) * (logit_std / math.sqrt(D))).to(torch.bfloat16)
    w.requires_grad_()
    t = torch.randint(0, V, (N,), generator=gen, device=device)
    t[torch.rand(N, generator=gen, device=device) < ignored] = -100
    return x, w, t


def reference_grads(torch, x, w, t):
    """Loss and gradients of ojas_ref's chunked reference in float32 on the bf16 inputs."""
    ref = importlib.import_module("ojas_ref.functional.linear_cross_entropy")
    xf, wf = (a.detach().float().requires_grad_() for a in (x, w))
    loss = ref.linear_cross_entropy(xf, wf, t, impl="reference")
    loss.backward()
    return loss.detach(), xf.grad, wf.grad


def rel(torch, a, b) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30)).item()


def run_once(fn, x, w, t):
    x.grad = w.grad = None
    loss = fn(x, w, t)
    loss.backward()
    return loss


def measure(torch, fn, x, w, t, ref, cuda: bool, reps: int):
    """(ms, peak MiB or None, errors dict) of forward + backward."""
    import triton

    loss = run_once(fn, x, w, t)  # warm-up (compilation, autotuning)
    errs = {}
    if ref is not None:
        errs = {
            "loss": abs(loss.float().item() - ref[0].item()) / max(abs(ref[0].item()), 1e-30),
            "dx": rel(torch, x.grad, ref[1]),
            "dw": rel(torch, w.grad, ref[2]),
        }
    x.grad = w.grad = None
    del loss
    if not cuda:
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            run_once(fn, x, w, t)
            times.append((time.perf_counter() - start) * 1e3)
        return sorted(times)[len(times) // 2], None, errs
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    run_once(fn, x, w, t)
    torch.cuda.synchronize()
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    x.grad = w.grad = None
    ms = triton.testing.do_bench(
        lambda: run_once(fn, x, w, t), warmup=200, rep=200 * reps, grad_to_none=[x, w], return_mode="median"
    )
    return ms, peak, errs


def floors(N, D, V, ignored):
    K = round(N * (1 - ignored))
    gemm = 2.0 * K * D * V
    return gemm, 4 * gemm / (BF16_TFLOPS * 1e9), 3 * gemm / (BF16_TFLOPS * 1e9)


def bench(args, torch, F, klce, cuda, shapes, device):
    impls = make_impls(torch, F, klce, cuda)
    impls.update(config_impls(klce, torch, args.configs))
    names = [n for n in (args.impls.split(",") if args.impls else impls)]
    lines = []

    def emit(line=""):
        print(line, flush=True)
        lines.append(line)

    for sname, (N, D, V) in shapes.items():
        grads_mib = (N * D + V * D) * 2 / 2**20
        times = {}  # ignored fraction -> {impl: ms}
        for ignored in args.ignored:
            gemm, floor4, floor3 = floors(N, D, V, ignored)
            emit(
                f"\n### {sname}: N={N} D={D} V={V} bf16, ignored {ignored}: one product 2KDV = {gemm / 1e12:.2f} "
                f"TFLOP; floors {floor4:.1f} ms (4 GEMMs) / {floor3:.1f} ms (3 GEMMs) at {BF16_TFLOPS:.0f} TFLOP/s; "
                f"gradients {grads_mib:.0f} MiB\n"
            )
            emit("| impl | fwd+bwd ms | 3-GEMM floor / time | peak MiB | x grads | loss err | dx err | dw err |")
            emit("|---|---|---|---|---|---|---|---|")
            x, w, t = make_inputs(torch, N, D, V, ignored, device, args.logit_std)
            ref = None if args.no_check else reference_grads(torch, x, w, t)
            results = {}
            for name in names:
                fn, why = impls[name]
                if fn is None:
                    emit(f"| {name} | - | - | - | - | - | - | {why} |")
                    continue
                if name == "materialised" and cuda and 12 * N * V > 0.8 * torch.cuda.mem_get_info()[0]:
                    emit(f"| {name} | - | - | - | - | - | - | skipped: logits would not fit |")
                    continue
                try:
                    ms, peak, errs = measure(torch, fn, x, w, t, ref, cuda, args.reps)
                except (RuntimeError, torch.cuda.OutOfMemoryError) as err:
                    if cuda:
                        torch.cuda.empty_cache()
                    emit(f"| {name} | - | - | - | - | - | - | failed: {str(err).splitlines()[0][:90]} |")
                    continue
                results[name] = ms
                if args.records and cuda:
                    from benchmarks import records

                    case = dict(N=N, D=D, V=V, dtype="bf16", ignored=ignored, reduction="mean")
                    metrics = dict(ms=ms, peak_mib=peak, peak_over_gradients=peak / grads_mib)
                    metrics.update({f"{k}_err": v for k, v in errs.items()})
                    records.append("bench_linear_cross_entropy", case, metrics, name, path=args.records, device=device)
                e = {k: f"{v:.1e}" for k, v in errs.items()}
                pk = "-" if peak is None else f"{peak:.0f}"
                ratio = "-" if peak is None else f"{peak / grads_mib:.3f}"
                emit(
                    f"| {name} | {ms:.2f} | {floor3 / ms:.2f} | {pk} | {ratio} | {e.get('loss', '-')} | "
                    f"{e.get('dx', '-')} | {e.get('dw', '-')} |"
                )
            if "ojas" in results:
                emit(
                    "\nojas speed-up (peer time / ojas time): "
                    + ", ".join(f"{n} {ms / results['ojas']:.2f}" for n, ms in results.items() if n != "ojas")
                )
            times[ignored] = results
            x = w = t = ref = None
            if cuda:
                torch.cuda.empty_cache()
        if 0.0 in times and 0.5 in times:
            both = [n for n in times[0.0] if n in times[0.5]]
            emit(
                f"\n{sname}: time with half the tokens ignored / with none: "
                + ", ".join(f"{n} {times[0.5][n] / times[0.0][n]:.3f}" for n in both)
            )
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")


# ---------------------------------------------------------------------------
# Tuning, profile, register screen
# ---------------------------------------------------------------------------


def tune_variants(klce, torch):
    """(label, config) pairs: one change at a time from the default (3 products), and
    the 4-product design with its logits from Triton or cuBLAS."""
    base = klce.default_config(torch.bfloat16, torch.device("cuda"))
    replace = dataclasses.replace
    out = [("default", base)]
    R = klce.RowConfig
    for r in (R(1, 2048, 64, 8), R(1, 8192, 64, 16), R(1, 16384, 64, 16), R(1, 16384, 64, 32), R(1, 32768, 64, 32)):
        out.append((f"rows {r.block_r}x{r.block_v} w{r.num_warps}", replace(base, rows=r)))
    out.append(("no grad_input space", replace(base, grad_input_space=False)))
    # token chunks sized to other peaks (default 0.14): 0.05 is issue 30's bound, 0.33 about Liger's peak at v32k
    for frac in (0.05, 0.08, 0.11, 0.2, 0.33):
        out.append((f"peak {frac}", replace(base, peak_fraction=frac)))
    out.append(("products 4", replace(base, products=4)))
    out.append(("products 4, logits cublas", replace(base, fwd_logits="cublas", bwd_logits="cublas", products=4)))
    four = replace(base, products=4, workspace_fraction=0.05)  # within issue 30's bound when no token is ignored
    out.append(("products 4 workspace 0.05", four))
    out.append(("products 4 workspace 0.05, logits cublas", replace(four, fwd_logits="cublas", bwd_logits="cublas")))
    return out


def config_impls(klce, torch, labels: Optional[str]) -> dict:
    """``ojas[label]`` -> (fn, None) for each of the ';'-separated ``--tune`` variant labels (the
    kernel's entry with that variant's config); a label that is not a variant raises."""
    variants = dict(tune_variants(klce, torch))
    impls = {}
    for label in labels.split(";") if labels else []:
        if label not in variants:
            raise SystemExit(f"--configs: {label!r} is not a --tune variant; the variants are {sorted(variants)}")
        cfg = variants[label]
        impls[f"ojas[{label}]"] = ((lambda c: lambda x, w, t: klce.linear_cross_entropy(x, w, t, config=c))(cfg), None)
    return impls


def tune(args, torch, klce, shapes):
    for sname, (N, D, V) in shapes.items():
        grads_mib = (N * D + V * D) * 2 / 2**20
        for ignored in args.ignored:
            x, w, t = make_inputs(torch, N, D, V, ignored, "cuda", args.logit_std)
            floor3 = floors(N, D, V, ignored)[2]
            print(
                f"\n### tune {sname} ignored {ignored} (3-GEMM floor {floor3:.1f} ms)\n\n"
                "| variant | fwd+bwd ms | fwd ms | peak MiB | x grads |\n|---|---|---|---|---|",
                flush=True,
            )
            for label, cfg in tune_variants(klce, torch):
                if args.variants and label != "default" and not any(v in label for v in args.variants.split(",")):
                    continue
                fn = (lambda c: lambda x, w, t: klce.linear_cross_entropy(x, w, t, config=c))(cfg)
                try:
                    ms, peak, _ = measure(torch, fn, x, w, t, None, True, args.reps)
                    fwd = triton_bench(lambda: fn(x, w, t), args.reps)
                except (RuntimeError, torch.cuda.OutOfMemoryError) as err:
                    print(f"| {label} | failed: {str(err).splitlines()[0][:90]} | | | |", flush=True)
                    continue
                print(f"| {label} | {ms:.2f} | {fwd:.2f} | {peak:.0f} | {peak / grads_mib:.3f} |", flush=True)
            x = w = t = None
            torch.cuda.empty_cache()


def triton_bench(fn, reps):
    import triton

    return triton.testing.do_bench(fn, warmup=200, rep=200 * reps, return_mode="median")


def profile(args, torch, F, klce, shapes):
    """CUDA time per kernel of one forward+backward of each of ``--impls`` (default ojas),
    and the GPU's idle time between its first and last kernel (the largest gaps named)."""
    from torch.profiler import ProfilerActivity, profile as prof

    impls = make_impls(torch, F, klce, True)
    for sname, (N, D, V) in shapes.items():
        for ignored in args.ignored:
            x, w, t = make_inputs(torch, N, D, V, ignored, "cuda", args.logit_std)
            for name in args.impls.split(",") if args.impls else ["ojas"]:
                fn = impls[name][0]
                run_once(fn, x, w, t)
                torch.cuda.synchronize()
                with prof(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
                    run_once(fn, x, w, t)
                    torch.cuda.synchronize()
                print(f"\n### profile {name} {sname} ignored {ignored}\n")
                print(
                    p.key_averages().table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=70),
                    flush=True,
                )
                print(gaps(torch, p.events()), flush=True)
            x = w = t = None
            torch.cuda.empty_cache()


def gaps(torch, events) -> str:
    """Busy and idle time of the GPU from its first kernel to its last, and the three largest gaps."""
    kernels = sorted(
        (e.time_range.start, e.time_range.end, e.name)
        for e in events
        if e.device_type == torch.autograd.DeviceType.CUDA
    )
    busy, idle, end, holes, last = 0.0, 0.0, kernels[0][0], [], ""
    for start, stop, name in kernels:
        if start > end:
            idle += start - end
            holes.append((start - end, last, name))
        busy += max(0.0, stop - max(start, end))
        if stop > end:
            end, last = stop, name
    top = ", ".join(f"{g:.0f} us after {a[:40]} before {b[:40]}" for g, a, b in sorted(holes, reverse=True)[:3])
    return f"GPU span {(end - kernels[0][0]) / 1e3:.2f} ms: busy {busy / 1e3:.2f} ms, idle {idle / 1e3:.2f} ms ({top})"


def screen(klce):
    """Compile ``_logits_kernel`` and ``_rows_kernel`` for sm_90a with Triton's bundled
    ptxas (no GPU) and report registers, stack frame, local-memory instructions and
    HGMMA count.  Signatures mimic the launches' specialisations (pointers, strides
    and lengths divisible by 16)."""
    import re
    import subprocess
    import tempfile

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    tools = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"

    def compile_and_report(label, fn, types, constexprs, divisible, num_warps, num_stages=3):
        sig = {n: ("constexpr" if n in constexprs else types.get(n, "*fp32")) for n in fn.arg_names}
        attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in divisible}
        try:
            c = triton.compile(
                ASTSource(fn, sig, constexprs=constexprs, attrs=attrs),
                target=GPUTarget("cuda", 90, 32),
                options=dict(num_warps=num_warps, num_stages=num_stages),
            )
        except Exception as err:  # noqa: BLE001  (a compile failure is a result here)
            print(f"| {label} | compile failed: {str(err).splitlines()[0][:100]} |", flush=True)
            return
        with tempfile.TemporaryDirectory() as d:
            cubin = Path(d) / "k.cubin"
            cubin.write_bytes(c.asm["cubin"])
            res = subprocess.run(
                [tools / "cuobjdump", "--dump-resource-usage", cubin], capture_output=True, text=True
            ).stdout
            sass = subprocess.run([tools / "cuobjdump", "--dump-sass", cubin], capture_output=True, text=True).stdout
        regs, stack = re.search(r"REG:(\d+)", res).group(1), re.search(r"STACK:(\d+)", res).group(1)
        print(
            f"| {label} | {regs} | {stack} | {len(re.findall(r'(LDL|STL)', sass))} | "
            f"{len(re.findall('HGMMA', sass))} | {c.metadata.shared} |",
            flush=True,
        )

    ints = [
        "row0",
        "n_rows",
        "v0",
        "v1",
        "D",
        "n_groups",
        "tiles_per_group",
        "stride_x",
        "stride_w",
        "stride_z",
        "stride_p",
        "stride_rw",
        "n_groups",
        "V",
    ]
    floats = ["softcap", "eps", "lam", "inv_v"]
    print("| kernel | registers | stack B | LDL/STL | HGMMA | shared B |\n|---|---|---|---|---|---|")
    for mode in ("fwd", "bwd"):
        for bm, bn, bk, warps, stages in (
            (128, 128, 64, 8, 3),
            (128, 64, 64, 8, 3),
            (128, 256, 64, 8, 3),
            (64, 128, 64, 4, 4),
            (128, 128, 32, 8, 4),
        ):
            for cap in (False, True):
                types = {n: "i32" for n in ints} | {n: "fp32" for n in floats}
                types |= {"X": "*bf16", "W": "*bf16", "BIAS": "*bf16", "TGT": "*i64", "G": "*bf16"}
                ce = dict(
                    STATS=mode == "fwd",
                    WRITE_Z=mode == "fwd",
                    HAS_BIAS=False,
                    HAS_CAP=cap,
                    NEED_SUM=False,
                    BLOCK_M=bm,
                    BLOCK_N=bn,
                    BLOCK_K=bk,
                    GROUP_M=8,
                    EVEN_K=True,
                    DOT_PREC="tf32",
                )
                div = [
                    "X",
                    "W",
                    "BIAS",
                    "TGT",
                    "LSE",
                    "RW",
                    "Z",
                    "PM",
                    "PL",
                    "PS",
                    "ZT",
                    "G",
                    "D",
                    "stride_x",
                    "stride_w",
                    "stride_z",
                    "v0",
                    "v1",
                    "row0",
                    "n_rows",
                ]
                compile_and_report(
                    f"{mode} {bm}x{bn}x{bk} w{warps} s{stages}{' softcap' if cap else ''}",
                    klce._logits_kernel,
                    types,
                    ce,
                    div,
                    warps,
                    stages,
                )
    for r in (klce.RowConfig(), klce.RowConfig(1, 2048, 64, 4), klce.RowConfig(8, 512, 64, 8)):
        for label, has_lse, stream in (("", False, False), (" stream", False, True), (" bwd", True, True)):
            types = {n: "i32" for n in ints} | {n: "fp32" for n in floats}
            types |= {"G": "*bf16", "TGT": "*i64", "BIAS": "*bf16", "g_scale": "fp32"}
            ce = dict(
                HAS_LSE=has_lse,
                GRAD=True,
                STREAM=stream,
                NEED_SUM=not has_lse,
                HAS_BIAS=False,
                HAS_CAP=True,
                BLOCK_R=r.block_r,
                BLOCK_P=r.block_p,
                BLOCK_V=r.block_v,
            )
            compile_and_report(
                f"rows {r.block_r}x{r.block_v} w{r.num_warps}{label}",
                klce._rows_kernel,
                types,
                ce,
                ["PM", "PL", "PS", "ZT", "Z", "G", "TGT", "LOSS", "LSE", "RW", "stride_z", "V", "v0"],
                r.num_warps,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny shapes on the CPU (Triton interpreter)")
    parser.add_argument("--tune", action="store_true", help="ojas kernel variants, one change at a time")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="CUDA time per kernel of one forward+backward (--impls, default ojas), idle gaps",
    )
    parser.add_argument("--screen", action="store_true", help="sm_90a registers/spills of kernel variants, no GPU")
    parser.add_argument("--shapes", default=None, help=f"comma-separated of {sorted(SHAPES)} (default all)")
    parser.add_argument("--impls", default=None, help="comma-separated implementations (default all)")
    parser.add_argument("--ignored", default="0,0.5", help="comma-separated ignored fractions (default 0,0.5)")
    parser.add_argument(
        "--variants",
        default=None,
        help="--tune: only variants whose label contains one of these comma-separated strings (and the default)",
    )
    parser.add_argument(
        "--configs",
        default=None,
        help="';'-separated --tune variant labels measured beside the peers as ojas[label] "
        "(e.g. 'peak 0.05;products 4 workspace 0.05'), in the table and the records",
    )
    parser.add_argument("--reps", type=int, default=10, help="timed repetitions (about)")
    parser.add_argument("--logit-std", type=float, default=1.0, help="standard deviation of the logits")
    parser.add_argument("--no-check", action="store_true", help="skip the float32 reference and the errors")
    parser.add_argument("--out", default=None, help="also write the tables to this file")
    parser.add_argument("--records", default=None, help="append a record per measurement to this file (CUDA)")
    args = parser.parse_args()
    args.ignored = [float(f) for f in args.ignored.split(",")]

    import torch

    cuda = torch.cuda.is_available()
    if args.screen:
        os.environ.pop("TRITON_INTERPRET", None)
        screen(import_ojas_kernels())
        return
    if args.quick and not cuda:
        os.environ["TRITON_INTERPRET"] = "1"  # before the kernels are imported
    klce = import_ojas_kernels()
    import torch.nn.functional as F

    if args.quick:
        shapes = QUICK_SHAPES
        cuda = cuda and not os.environ.get("TRITON_INTERPRET")
        args.reps = min(args.reps, 3)
    else:
        if not cuda:
            sys.exit("needs a CUDA device (or --quick / --screen)")
        shapes = {k: SHAPES[k] for k in (args.shapes.split(",") if args.shapes else SHAPES)}
        print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    if args.tune:
        tune(args, torch, klce, shapes)
    elif args.profile:
        profile(args, torch, F, klce, shapes)
    else:
        bench(args, torch, F, klce, cuda, shapes, "cuda" if cuda else "cpu")


if __name__ == "__main__":
    main()
