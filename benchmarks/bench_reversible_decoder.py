"""Benchmark: the reversible Llama-style decoder (ojas_ref.nn.reversible_decoder)
against the same blocks run with stored activations and with per-layer checkpointing.

    python benchmarks/bench_reversible_decoder.py [--shapes 1.06B,deep64] [--out FILE]
    python benchmarks/bench_reversible_decoder.py --quick      # tiny config on the CPU: proves it runs
    python benchmarks/bench_reversible_decoder.py --shapes deep64 --depths 1,2,4,8,16,32,64   # flat in depth?

Shapes:

* ``1.06B``: hidden 2048, 18 layers, 16 heads (kv 16), MLP 5632, vocab 32000, seq 2048
  (TinyLlama's width at 18 layers; ~1.06e9 parameters untied);
* ``deep64``: hidden 1024, 64 layers, 16 heads, MLP 2816, vocab 32000, seq 2048;
* ``quick``: hidden 64, 4 layers, 4 heads (kv 2), MLP 96, vocab 256, seq 64, batch 2.

Modes (the SAME module and weights, ``forward(..., mode=...)``): ``reversible``,
``stored`` (ordinary autograd), ``checkpointed`` (``torch.utils.checkpoint`` per layer).

One step = forward with labels (linear cross-entropy loss) + backward, gradients
accumulated into ``.grad`` buffers that exist before the step (zeroed, not freed, between
steps), no optimizer. Precision: parameters and the residual stream in float32, the
layers' matmuls, attention, RoPE and SwiGLU in bf16 under ``torch.autocast`` (cache off,
so autocast's bf16 weight copies are not counted as activations) on CUDA with ``--bf16``
(the default on CUDA); float32 throughout on the CPU.

Measured per (shape, mode): ``tokens_per_s`` (batch * seq / median step time over
``--steps`` after ``--warmup``; CUDA events on CUDA, wall clock on the CPU);
``peak_mib`` (CUDA: ``max_memory_allocated`` during one step) and ``act_mib`` (that peak
minus the memory allocated before the step: parameters, their gradients, the batch);
``saved_mib`` (bytes autograd saves for backward in the forward, parameters excluded,
by ``saved_tensors_hooks``; the only memory figure on the CPU); ``loss`` of the first
step and ``grad_rel_diff`` (|grad - grad of stored| / |grad of stored| over all
parameters) as a sanity check. An out-of-memory mode is recorded as ``"oom"``.
H200 figures (the depth sweep): the bench_reversible_decoder records of 2026-12-01 (commit 84be453)
in benchmarks/records.jsonl, drawn in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ojas_ref.nn.reversible_decoder import MODES, ReversibleDecoder, ReversibleDecoderConfig  # noqa: E402

SHAPES = {
    "1.06B": dict(
        config=dict(vocab=32000, hidden=2048, layers=18, heads=16, kv_heads=16, intermediate=5632, max_seq=2048),
        batch=1,
        seq=2048,
    ),
    "deep64": dict(
        config=dict(vocab=32000, hidden=1024, layers=64, heads=16, kv_heads=16, intermediate=2816, max_seq=2048),
        batch=1,
        seq=2048,
    ),
    "quick": dict(
        config=dict(vocab=256, hidden=64, layers=4, heads=4, kv_heads=2, intermediate=96, max_seq=64), batch=2, seq=64
    ),
}
MIB = 2.0**20


def saved_bytes(model, ids, labels, mode, ctx) -> int:
    param_ptrs = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}
    kept = []

    def pack(t):
        kept.append(t)
        st = t.untyped_storage()
        if st.data_ptr() not in param_ptrs:
            seen[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), ctx():
        loss = model(ids, labels, mode=mode)
    loss.backward()
    del loss, kept
    return sum(seen.values())


def run_mode(model, ids, labels, mode, args, ctx, cuda: bool, ref_grads):
    for p in model.parameters():
        p.grad = torch.zeros_like(p)

    def step():
        with ctx():
            loss = model(ids, labels, mode=mode)
        loss.backward()
        return loss.detach()

    def zero():
        for p in model.parameters():
            p.grad.zero_()

    out = {}
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    loss = step()
    if cuda:
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
        out["peak_mib"] = round(peak / MIB, 1)
        out["act_mib"] = round((peak - before) / MIB, 1)
    out["loss"] = float(loss)
    grads = [p.grad.detach().clone() for p in model.parameters()]
    if ref_grads is not None:
        num = sum(float((g - r).double().pow(2).sum()) for g, r in zip(grads, ref_grads))
        den = sum(float(r.double().pow(2).sum()) for r in ref_grads)
        out["grad_rel_diff"] = (num / den) ** 0.5 if den else float("nan")
    zero()
    for _ in range(args.warmup):
        step()
        zero()
    times = []
    for _ in range(args.steps):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
        zero()
    med = statistics.median(times)
    out["step_s"] = med
    out["tokens_per_s"] = ids.numel() / med
    out["saved_mib"] = round(saved_bytes(model, ids, labels, mode, ctx) / MIB, 3)
    zero()
    return out, grads


def bench_shape(name, args, device, layers=None):
    spec = SHAPES[name]
    cfg = ReversibleDecoderConfig(**(spec["config"] | ({} if layers is None else dict(layers=layers))))
    cuda = device.type == "cuda"
    torch.manual_seed(0)
    model = ReversibleDecoder(cfg).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, cfg.vocab, (spec["batch"], spec["seq"]), generator=gen).to(device)
    labels = ids.clone()
    bf16 = cuda and not args.fp32
    ctx = (lambda: torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False)) if bf16 else nullcontext
    rows, ref = [], None
    order = ["stored"] + [m for m in MODES if m != "stored"]
    for mode in order:
        if args.modes and mode not in args.modes:
            continue
        row = dict(
            shape=name if layers is None else f"{name}@{layers}",
            mode=mode,
            params=n_params,
            batch=spec["batch"],
            seq=spec["seq"],
            layers=cfg.layers,
            hidden=cfg.hidden,
            compute="bf16-autocast" if bf16 else "fp32",
            device=str(device),
        )
        try:
            res, grads = run_mode(model, ids, labels, mode, args, ctx, cuda, ref)
            row.update(res)
            if mode == "stored":
                ref = grads
        except torch.OutOfMemoryError:
            row["result"] = "oom"
            for p in model.parameters():
                p.grad = None
            if cuda:
                torch.cuda.empty_cache()
        print(json.dumps(row), flush=True)
        rows.append(row)
    del model, ref
    if cuda:
        torch.cuda.empty_cache()
    return rows


def depth_table(rows: list[dict]) -> str:
    """Per mode, the activation memory (act_mib on CUDA, saved_mib elsewhere) at each depth and
    its largest over its smallest: 1.0 is flat in depth."""
    key = "act_mib" if any("act_mib" in r for r in rows) else "saved_mib"
    lines = [f"| mode | {key} by depth | max / min |", "|---|---|---|"]
    for mode in dict.fromkeys(r["mode"] for r in rows):
        got = [(r["layers"], r[key]) for r in rows if r["mode"] == mode and key in r]
        if got:
            values = [v for _, v in got]
            ratio = f"{max(values) / min(values):.3f}" if min(values) > 0 else "-"
            lines.append(f"| {mode} | " + ", ".join(f"{n}: {v}" for n, v in got) + f" | {ratio} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="the tiny config on the CPU")
    ap.add_argument("--shapes", default="1.06B,deep64", help=f"comma list of {sorted(SHAPES)}")
    ap.add_argument("--modes", default="", help=f"comma list of {MODES} (default all)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--fp32", action="store_true", help="no bf16 autocast on CUDA")
    ap.add_argument(
        "--depths",
        default="",
        help="comma list of layer counts: each shape at each depth (the flatness of act_mib in depth)",
    )
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    args = ap.parse_args(argv)
    args.modes = [m for m in args.modes.split(",") if m]
    if args.quick:
        device, shapes = torch.device("cpu"), ["quick"]
        args.steps, args.warmup = min(args.steps, 3), min(args.warmup, 1)
    else:
        if not torch.cuda.is_available():
            ap.error("the full shapes need a CUDA device; use --quick on the CPU")
        device, shapes = torch.device("cuda"), [s for s in args.shapes.split(",") if s]
    try:
        depths = [int(d) for d in args.depths.split(",") if d] or [None]
    except ValueError:
        ap.error(f"--depths must be a comma list of layer counts, got {args.depths!r}")
    if any(d is not None and d < 1 for d in depths):
        ap.error(f"--depths must be >= 1, got {args.depths!r}")
    rows = []
    for s in shapes:
        if s not in SHAPES:
            ap.error(f"unknown shape {s!r}; choose from {sorted(SHAPES)}")
        for d in depths:
            rows.extend(bench_shape(s, args, device, d))
    if len(depths) > 1:
        print(depth_table(rows))
    meta = dict(
        torch=torch.__version__,
        python=platform.python_version(),
        gpu=torch.cuda.get_device_name() if device.type == "cuda" else None,
    )
    if args.out:
        Path(args.out).write_text(json.dumps(dict(meta=meta, rows=rows), indent=1) + "\n")
    return rows


if __name__ == "__main__":
    main()
