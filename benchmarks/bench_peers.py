"""Benchmark: Hugging Face's ``LlamaForCausalLM`` trained as is, compiled, patched by Liger-Kernel, and
by ``optimize_model`` + ``InBackwardOptimizer`` (issue 29's table).

    python benchmarks/bench_peers.py [--modes MODE ...] [--settings SETTING ...] [--out FILE]
        [--warmup 3] [--steps 12] [--timeout 900] [--device cuda] [--quick] [--commit HASH] [--profile DIR]

The model is bench_optimize_model.py's (built from a config, no download: hidden 2048, 18 layers,
16 heads, MLP 5632, untied head, sequence 2048), stepped by its ``Runner``. Each mode
(:data:`MODES`) is a :class:`~ojas_ref.MemoryRecipe`, applied by bench_optimize_model's ``setup``
(``optimize_model(model, recipe)``, then ``InBackwardOptimizer.from_recipe`` or the torch
optimizer), and the peer (Liger-Kernel's patch) and compilation around it:

* ``hf``: ``MemoryRecipe.plain()``, the model as built (SDPA attention, Hugging Face's loss on the
  logits).
* ``hf+compile``: the same, then ``torch.compile(model)``.
* ``liger``: ``apply_liger_kernel_to_llama()`` before the model is built (fused linear
  cross-entropy, RMSNorm, SwiGLU, RoPE), ``MemoryRecipe.plain()``; ``liger+ckpt``:
  ``MemoryRecipe.plain(checkpoint=True)``, Hugging Face's activation checkpointing
  (``gradient_checkpointing_enable(use_reentrant=False)``); ``liger+compile`` compiled.
* ``ojas``: :data:`OJAS`, ``MemoryRecipe(in_backward=True, overlap=True, bucket_cap_mb=256)``
  (every primitive, no checkpointing); ``ojas+ckpt``: ``MemoryRecipe(checkpoint=True,
  in_backward=True)`` (``InBackwardOptimizer``'s defaults); ``ojas+compile``: ``ojas`` then
  ``torch.compile(model)``.
* ``hf+cudagraphs``, ``ojas+cudagraphs``: ``hf``, ``ojas`` then ``torch.compile(model,
  mode="reduce-overhead")`` (Inductor's graphs replayed as CUDA graphs: the host launches a graph
  instead of its kernels), ``torch.compiler.cudagraph_mark_step_begin()`` before each forward; CUDA only.

Settings, ``<weights>[-autocast]-<optimizer>-b<batch>[-v<vocabulary>]``: weights and optimizer
state in ``bf16`` or ``fp32``; ``-autocast``: the forward under ``torch.autocast`` to bf16;
``sgd`` (lr 1e-3), ``adamw`` (lr 1e-4, weight decay 0.1; torch's default foreach step) or
``adamw_fused`` (the same with ``fused=True``, Hugging Face Trainer's default); batch; vocabulary (default 32000).
The default settings are issue 29's rows.

Every mode of every setting runs in its own process (nothing compiled, patched or cached by one
mode reaches another): ``--warmup`` steps, one step whose peak ``torch.cuda.max_memory_allocated``
is the record's ``peak_gib``, then ``--steps`` timed steps (synchronised; ``tokens_per_s`` from the
median). A mode whose peer is not installed, or cannot run on the device, is skipped with the
reason; a mode whose process fails is reported with its error. Each measured mode is appended to
``--out`` (default ``benchmarks/records.jsonl``) through ``benchmarks/records.py``, and a table
prints issue 29's ratios: each mode's tokens/s and peak over those of the fastest peer without
checkpointing (``hf``, ``hf+compile``, ``hf+cudagraphs``, ``liger``, ``liger+compile``), and over ``liger+ckpt``'s. ``--quick``: a 2-layer model (runs on the CPU in seconds per mode; memory is
then not measured).

``--profile DIR``: each mode's process also profiles :data:`PROFILED_STEPS` steps after the
timed ones (``torch.profiler``) and writes ``DIR/<setting>-<mode>.txt``: wall time per step, the
time the device was busy (the union of its kernels' intervals) and idle, the device time per
kind of kernel (:data:`KERNEL_KINDS`), the launches per step, and the top kernels and host
operators; the record is the timed steps' as without it.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks import records  # noqa: E402
from benchmarks.bench_optimize_model import Runner, measure_peak, sync, time_interleaved, timing  # noqa: E402
from benchmarks.bench_in_backward import QUICK, Config  # noqa: E402
from benchmarks.report import PEER_RATIOS  # noqa: E402
from ojas_ref import MemoryRecipe  # noqa: E402

#: the recipe of ``ojas`` without checkpointing (docs/huggingface.md): updates overlapping the backward, 256 MiB buckets
OJAS = MemoryRecipe(in_backward=True, overlap=True, bucket_cap_mb=256.0)


@dataclasses.dataclass(frozen=True)
class Mode:
    """A mode: its memory recipe, Liger-Kernel's patch (``liger``) and ``torch.compile`` (``compile``, with
    ``compile_mode`` its ``mode``: None the default)."""

    recipe: MemoryRecipe
    liger: bool = False
    compile: bool = False
    compile_mode: Optional[str] = None


MODES = {
    "hf": Mode(MemoryRecipe.plain()),
    "hf+compile": Mode(MemoryRecipe.plain(), compile=True),
    "liger": Mode(MemoryRecipe.plain(), liger=True),
    "liger+ckpt": Mode(MemoryRecipe.plain(checkpoint=True), liger=True),
    "liger+compile": Mode(MemoryRecipe.plain(), liger=True, compile=True),
    "ojas": Mode(OJAS),
    "ojas+ckpt": Mode(MemoryRecipe(checkpoint=True, in_backward=True)),
    "ojas+compile": Mode(OJAS, compile=True),
    "hf+cudagraphs": Mode(MemoryRecipe.plain(), compile=True, compile_mode="reduce-overhead"),
    "ojas+cudagraphs": Mode(OJAS, compile=True, compile_mode="reduce-overhead"),
}
#: issue 29's rows
SETTINGS = ("bf16-adamw-b1", "fp32-autocast-adamw-b1", "bf16-adamw-b4", "bf16-sgd-b1", "bf16-adamw-b1-v128256")
SETTING_RE = re.compile(r"(bf16|fp32)(-autocast)?-(sgd|adamw|adamw_fused)-b([1-9][0-9]*)(?:-v([1-9][0-9]*))?")
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
#: steps profiled by ``--profile``
PROFILED_STEPS = 3
#: ``--profile``'s kinds of kernel, the first pattern (case-insensitive) of a kernel's name wins
KERNEL_KINDS = (
    ("attention", r"attn|attention|flash|fmha|^_fwd_kernel$|^_bwd_dq_kernel$|^_bwd_dkdv_kernel$|cudnn"),
    ("cross-entropy", r"cross|_logits_kernel|_rows_kernel|_scale_kernel|liger.*ce"),
    ("matmul", r"gemm|sm90_xmma|cutlass|matmul|nvjet|mm_"),
    ("optimizer", r"adam|sgd|multi_tensor|foreach|_update"),
    ("norm/swiglu/rope", r"rms|norm|swiglu|silu|rope|rotary|_swiglu|_relu"),
    ("copy/cast", r"copy|cast|convert|fill|memset|memcpy|to_copy|direct_copy"),
    ("other", r""),
)


@dataclasses.dataclass(frozen=True)
class Setting:
    weights: str
    autocast: bool
    optimizer: str
    batch: int
    vocab: int

    @classmethod
    def parse(cls, text: str) -> "Setting":
        """A setting from its name (module docstring); ``ValueError`` naming the expected form."""
        m = SETTING_RE.fullmatch(text)
        if m is None:
            raise ValueError(
                f"--settings: {text!r} is not <bf16|fp32>[-autocast]-<sgd|adamw|adamw_fused>-b<batch>[-v<vocab>], "
                "e.g. bf16-adamw-b1 or fp32-autocast-adamw-b1 or bf16-adamw-b1-v128256"
            )
        weights, autocast, optimizer, batch, vocab = m.groups()
        if autocast and weights != "fp32":
            raise ValueError(f"--settings: {text!r}: -autocast (to bf16) is for fp32 weights")
        return cls(weights, bool(autocast), optimizer, int(batch), int(vocab or 32000))

    def config(self, quick: bool) -> Config:
        """The model's shape: bench_optimize_model's 1.06B Llama (``QUICK``'s 2 layers with ``quick``)."""
        return dataclasses.replace(QUICK, batch=self.batch) if quick else Config(vocab=self.vocab, batch=self.batch)


class Autocast(torch.nn.Module):
    """``model``'s forward under ``torch.autocast(device_type, torch.bfloat16)``; the backward and the
    optimizer outside it, as torch's automatic mixed precision recipe has them."""

    def __init__(self, model: torch.nn.Module, device_type: str) -> None:
        super().__init__()
        self.model, self.device_type = model, device_type

    def forward(self, **kwargs):
        with torch.autocast(self.device_type, dtype=torch.bfloat16):
            return self.model(**kwargs)


class StepBegin(torch.nn.Module):
    """``model`` compiled with CUDA graphs, each forward a new step of them
    (``torch.compiler.cudagraph_mark_step_begin``): the previous step's outputs may be overwritten."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, **kwargs):
        torch.compiler.cudagraph_mark_step_begin()
        return self.model(**kwargs)


def unavailable(mode: str, device: torch.device) -> Optional[str]:
    """Why ``mode`` cannot run here, or None."""
    if MODES[mode].compile_mode == "reduce-overhead" and device.type != "cuda":
        return "CUDA graphs need CUDA"
    if MODES[mode].liger:
        if importlib.util.find_spec("liger_kernel") is None:
            return "liger_kernel is not installed (pip install liger-kernel)"
        if device.type != "cuda":
            return "Liger-Kernel's Triton kernels need CUDA"
    return None


def runner(mode: str, setting: Setting, c: Config, device: torch.device) -> Runner:
    """bench_optimize_model's ``Runner`` for ``mode``: the model built (after Liger's patch for the
    liger modes), given the mode's recipe and its optimizer, then compiled and put under autocast as
    the mode and setting say."""
    m = MODES[mode]
    if m.liger:
        from liger_kernel.transformers import apply_liger_kernel_to_llama

        apply_liger_kernel_to_llama(
            rope=True, cross_entropy=False, fused_linear_cross_entropy=True, rms_norm=True, swiglu=True
        )
    r = Runner(c, DTYPES[setting.weights], setting.optimizer, mode, device, m.recipe)
    if m.compile:
        r.model = torch.compile(r.model, mode=m.compile_mode)
    if m.compile_mode == "reduce-overhead":
        r.model = StepBegin(r.model)
    if setting.autocast:
        r.model = Autocast(r.model, device.type)
    return r


def busy_seconds(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of ``(start, end)`` intervals."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def kernel_kind(name: str) -> str:
    """The first of :data:`KERNEL_KINDS` whose pattern a kernel's name matches."""
    return next(kind for kind, pattern in KERNEL_KINDS if re.search(pattern, name, re.IGNORECASE))


def device_kernels(events) -> list:
    """The kernels among torch.profiler's ``events``: the device's events less the user annotations
    torch also puts on the device's timeline (``Optimizer.step#AdamW.step``), which span kernels
    counted already (the records of 2026-12-06 before this counted the optimizer twice)."""
    return [
        e
        for e in events
        if e.device_type == torch.autograd.DeviceType.CUDA and not getattr(e, "is_user_annotation", False)
    ]


def profile(r: Runner, device: torch.device, path: Path) -> None:
    """Profile :data:`PROFILED_STEPS` steps of ``r`` and write the summary the module docstring describes."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    sync(device)
    with torch_profile(activities=activities) as prof:
        t0 = time.perf_counter()
        for i in range(PROFILED_STEPS):
            r.step(i)
        sync(device)
        wall = (time.perf_counter() - t0) / PROFILED_STEPS
    kernels = device_kernels(prof.events())
    intervals = [(e.time_range.start / 1e6, e.time_range.end / 1e6) for e in kernels]
    busy = busy_seconds(intervals) / PROFILED_STEPS
    by_kind: dict[str, float] = {}
    for e in kernels:
        kind = kernel_kind(e.name)
        by_kind[kind] = by_kind.get(kind, 0.0) + e.time_range.elapsed_us() / 1e6 / PROFILED_STEPS
    lines = [
        f"{path.stem}: {device}, {PROFILED_STEPS} steps profiled",
        f"wall per step {1e3 * wall:.2f} ms; device busy {1e3 * busy:.2f} ms ({busy / wall:.1%}), "
        f"idle {1e3 * (wall - busy):.2f} ms; {len(kernels) / PROFILED_STEPS:.0f} kernels per step",
        "device ms per step by kind: "
        + ", ".join(f"{k} {1e3 * v:.2f}" for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])),
        "",
        prof.key_averages().table(sort_by="cuda_time_total" if kernels else "cpu_time_total", row_limit=40),
        prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25),
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:3]), flush=True)


def child(
    mode: str,
    setting: Setting,
    quick: bool,
    device: torch.device,
    warmup: int,
    steps: int,
    profile_path: Optional[Path] = None,
) -> dict:
    """Run one mode of one setting in this process: the case, metrics, device name and versions of its
    record (and, with ``profile_path``, :func:`profile` after the timed steps)."""
    c = setting.config(quick)
    r = runner(mode, setting, c, device)
    measure_peak(r, device, warmup, 0)
    time_interleaved([r], device, steps)
    t = timing(r, c)
    if profile_path is not None:
        profile(r, device, profile_path)
    metrics = dict(
        tokens_per_s=t["tokens_per_s"],
        step_ms=1e3 * t["step_s"],
        step_ms_min=1e3 * t["step_s_spread"][0],
        step_ms_max=1e3 * t["step_s_spread"][1],
        last_loss=t["last_loss"],
    )
    if t["peak"] is not None:
        metrics["peak_gib"] = t["peak"] / 2**30
    case = dict(
        model="LlamaForCausalLM",
        hidden=c.hidden,
        layers=c.layers,
        heads=c.heads,
        intermediate=c.intermediate,
        vocab=c.vocab,
        batch=c.batch,
        seq=c.seq,
        weights=setting.weights,
        autocast="bf16" if setting.autocast else "none",
        optimizer=setting.optimizer,
        warmup=warmup,
        steps=steps,
    )
    env = records.environment(device)
    return dict(case=case, metrics=metrics, device=env["device"], versions=env["versions"])


def spawn(mode: str, setting: str, args: argparse.Namespace) -> dict:
    """``mode`` of ``setting`` in a fresh process: :func:`child`'s dict, or ``{"failed": reason}``."""
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        "--modes",
        mode,
        "--settings",
        setting,
        "--device",
        args.device,
        "--warmup",
        str(args.warmup),
        "--steps",
        str(args.steps),
    ]
    if args.quick:
        command.append("--quick")
    if args.profile:
        command += ["--profile", str(args.profile)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return dict(failed=f"timed out after {args.timeout} s")
    result = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not result:
        print(f"== {setting} {mode}: exit {done.returncode}\n" + "\n".join(done.stderr.splitlines()[-25:]), flush=True)
        errors = [line for line in done.stderr.splitlines() if line.strip()]
        return dict(failed=(errors[-1] if errors else f"exit status {done.returncode}")[:200])
    return json.loads(result[-1].removeprefix("RESULT "))


def table(rows: list[tuple[str, str, dict]]) -> str:
    """One line per setting and mode: tokens/s and peak with their ratios (:data:`PEER_RATIOS`) to the
    fastest peer without checkpointing and to Liger-Kernel with it, or why the mode did not run."""
    measured = [row["record"] for _, _, row in rows if "record" in row]
    columns = [
        iter([x for _, x in records.ratios(measured, metric, baseline, by=by)])
        for _, metric, baseline, by in PEER_RATIOS
    ]
    lines = [
        "| setting | mode | tokens/s | peak GiB | " + " | ".join(label for label, *_ in PEER_RATIOS) + " |",
        "|---|---|---|---|" + "---|" * len(PEER_RATIOS),
    ]
    for setting, mode, row in rows:
        if "record" not in row:
            why = row.get("skipped") or "failed: " + row["failed"]
            lines.append(f"| {setting} | {mode} | {why} | |" + " |" * len(PEER_RATIOS))
            continue
        m = row["record"]["metrics"]
        peak = "-" if "peak_gib" not in m else f"{m['peak_gib']:.2f}"
        ratios = ["-" if x is None else f"{x:.3f}x" for x in (next(c) for c in columns)]
        lines.append(f"| {setting} | {mode} | {m['tokens_per_s']:,.0f} | {peak} | " + " | ".join(ratios) + " |")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), help="e.g. bf16-adamw-b1 (module docstring)")
    parser.add_argument("--out", type=Path, default=records.RECORDS, help="records file to append to")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per mode's process")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true", help="a 2-layer model (CPU smoke test)")
    parser.add_argument("--commit", default=None, help="the records' commit (default: git rev-parse of this checkout)")
    parser.add_argument("--profile", type=Path, default=None, help="also profile each mode into this folder")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    settings = {s: Setting.parse(s) for s in args.settings}
    device = torch.device(args.device)
    if args.warmup < 0 or args.steps < 1:
        parser.error(f"--warmup must be >= 0 and --steps >= 1, got {args.warmup} and {args.steps}")
    if args.child:
        (mode,), ((name, setting),) = args.modes, settings.items()
        where = None if args.profile is None else args.profile / f"{name}-{mode}.txt"
        print(
            "RESULT " + json.dumps(child(mode, setting, args.quick, device, args.warmup, args.steps, where)), flush=True
        )
        return
    env = records.environment("cpu")  # the date and commit; the device and versions come from each mode's process
    if args.commit:
        env["commit"] = args.commit
    rows = []
    for name in settings:
        for mode in args.modes:
            reason = unavailable(mode, device)
            t0 = time.perf_counter()
            row = dict(skipped=reason) if reason else spawn(mode, name, args)
            if "metrics" in row:
                row["record"] = records.append(
                    "bench_peers",
                    row["case"],
                    row["metrics"],
                    mode,
                    path=args.out,
                    date=env["date"],
                    commit=env["commit"],
                    device_name=row["device"],
                    versions=row["versions"],
                )
            print(
                f"{name} {mode}: {json.dumps(row.get('metrics') or row)} ({time.perf_counter() - t0:.0f} s)", flush=True
            )
            rows.append((name, mode, row))
    ran = [row["record"] for _, _, row in rows if "record" in row]
    print(
        f"{ran[0]['device'] if ran else device}, {env['date']}, commit {env['commit']}; "
        f"{ran[0]['versions'] if ran else env['versions']}"
    )
    print(table(rows))


if __name__ == "__main__":
    main()
