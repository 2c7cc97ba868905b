"""Write ``docs/benchmarks.md`` and its plots (``docs/images/bench_*.png``) from ``benchmarks/records.jsonl``.

    python benchmarks/report.py [--records FILE] [--out docs/benchmarks.md] [--images docs/images]

One section per benchmark, one table per run (date, commit, device and versions above it), each
record's ratio to the peer it is compared with, and one plot per headline comparison from the
latest run (needs matplotlib). The files are generated: edit this script or the records, not them.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks import records  # noqa: E402


@dataclass(frozen=True)
class Ratio:
    """A column of ``metric`` over the baseline's: the peer named, or the best of several."""

    metric: str
    baseline: str | tuple[str, ...]
    label: str
    best: Callable = max
    by: Optional[str] = None  #: the metric that chooses the baseline among several peers (default ``metric``)


#: bench_peers' peers without checkpointing: the fastest of them is the baseline of the modes without it (issue 29)
PEERS = ("hf", "hf+compile", "hf+cudagraphs", "liger", "liger+compile")
#: bench_peers' ratios (printed by it, tabled here): (label, metric, baseline, the metric choosing the baseline)
PEER_RATIOS = (
    ("tokens/s vs fastest peer", "tokens_per_s", PEERS, "tokens_per_s"),
    ("peak vs fastest peer's", "peak_gib", PEERS, "tokens_per_s"),
    ("tokens/s vs liger+ckpt", "tokens_per_s", "liger+ckpt", None),
    ("peak vs liger+ckpt", "peak_gib", "liger+ckpt", None),
)


#: benchmarks renamed after records were written -> their name now: the records keep the name they were
#: written with (history is data) and the report shows them as the renamed benchmark's
RENAMED = {"bench_optimizer_in_backward": "bench_in_backward"}


@dataclass(frozen=True)
class Section:
    benchmark: str
    title: str
    about: str
    metrics: tuple[str, ...]
    ratios: tuple[Ratio, ...] = ()
    plot: Optional[str] = None  #: name of the plot function in PLOTS
    case_filter: dict = field(default_factory=dict)  #: only the comparisons whose case has these values plot
    where: Optional[Callable[[dict], bool]] = None  #: the benchmark's records it shows (default: all)
    anchor: Optional[str] = None  #: its heading (default: the benchmark's name)

    @property
    def heading(self) -> str:
        return self.anchor or self.benchmark

    def shows(self, record: dict) -> bool:
        return record["benchmark"] == self.benchmark and (self.where is None or self.where(record))


def _bar_record(record: dict) -> bool:
    """A float32-bar record (one quantity of one shape) of the error benchmarks."""
    return "quantity" in record["case"]


def _row_record(record: dict) -> bool:
    return not _bar_record(record)


#: the float32 bar's metrics (bench_attention_error, bench_linear_cross_entropy_error)
BAR_METRICS = (
    "observed",
    "tolerance",
    "tightness",
    "tightness_bar",
    "tightness_ok",
    "tf32_observed",
    "discrimination",
    "discrimination_ok",
    "discrimination_floor",
    "tf32_caught",
)
#: metrics that are 1 / 0 flags, shown as yes / no
FLAGS = {"tightness_ok", "discrimination_ok", "tf32_caught"}
BAR_ABOUT = (
    "Issue 28's float32 bar, one row per shape and quantity: `observed` the largest error of the kernel, "
    "`tolerance` the largest value of the proved bound the tests use, `tightness` = tolerance / observed "
    "against `tightness_bar` (float32: 100x lse and loss, 300x out and dW, dV / dQ / dK / dH at most 1000x and "
    "within 10x of the sqrt(n) floor of a sum of n terms; bfloat16: 100x); float32 also the same kernel with "
    "TF32 dots (the mutant, `attention_error.tf32_dots`): `tf32_observed` its largest error, `discrimination` = "
    "tolerance / tf32_observed (bar: at most 1/8; the float32 run's tolerance: dQ / dK and the cross-entropy's "
    "measured-logit bounds take premises measured on the run, so the tolerance the tests compute on the mutant's "
    "own run is larger, recorded as `tf32_own_discrimination` where measured), `discrimination_floor` the least "
    "discrimination any tolerance at the tightness floor (1, or sqrt(n) for a sum) could have, floor / "
    "(tf32_observed / observed): above 1/8 the row cannot meet both bars, `tf32_caught` whether an entry of the "
    "mutant's error exceeds its tolerance (attention: the float32 run's; cross-entropy: the mutant's own run's)."
)


SECTIONS = (
    Section(
        "bench_peers",
        "Hugging Face Llama against Liger-Kernel and torch.compile",
        "`benchmarks/bench_peers.py`: Hugging Face's `LlamaForCausalLM` (hidden 2048, 18 layers, 16 heads, "
        "MLP 5632, untied head, sequence 2048) trained as is (`hf`), compiled (`+compile`), patched by "
        "Liger-Kernel (`apply_liger_kernel_to_llama()`), with Hugging Face's activation checkpointing "
        "(`+ckpt`), and by `optimize_model` + `InBackwardOptimizer` (`ojas`); each mode in its own process, "
        "3 warm-up and 12 timed steps; peak: `torch.cuda.max_memory_allocated` over one step after warm-up. "
        "Ratios (issue 29's): tokens/s and peak over those of the fastest peer without checkpointing "
        "(`hf`, `hf+compile`, `liger`, `liger+compile`) and over `liger+ckpt`'s, in the same case.",
        ("tokens_per_s", "peak_gib"),
        tuple(Ratio(metric, baseline, label, by=by) for label, metric, baseline, by in PEER_RATIOS),
        "plot_peers",
    ),
    Section(
        "bench_optimize_model",
        "optimize_model against the standard loop",
        "`benchmarks/bench_optimize_model.py`: Hugging Face's `LlamaForCausalLM` (1.06B parameters, batch 1 x "
        "2048), the standard loop against `optimize_model` + `InBackwardOptimizer`, with and without "
        "Hugging Face's activation checkpointing (`checkpoint`); `ojas+overlap` is the recipe without "
        "checkpointing (`overlap=True, bucket_cap_mb=256`), `ojas` the defaults (64 MiB buckets). "
        "Ratio: tokens/s over the standard loop's with the same checkpointing.",
        ("tokens_per_s", "peak_gib"),
        (Ratio("tokens_per_s", "standard", "tokens/s vs standard"), Ratio("peak_gib", "standard", "peak vs standard")),
        "plot_optimize_model",
    ),
    Section(
        "bench_memory",
        "Memory techniques",
        "`benchmarks/bench_memory.py`: the techniques of docs/memory.md on the 1.06B Llama and on larger "
        "presets; peer: the standard loop with checkpointing (`standard+ckpt`) in the same run; "
        "`predicted_peak_gib`: `ojas plan` for the same setting.",
        ("peak_gib", "predicted_peak_gib", "host_gib", "tokens_per_s"),
        (
            Ratio("tokens_per_s", "standard+ckpt", "tokens/s vs standard+ckpt"),
            Ratio("peak_gib", "standard+ckpt", "peak vs standard+ckpt", min),
        ),
        "plot_memory",
        {"model": "llama-1.06b"},
    ),
    Section(
        "bench_reversible_decoder",
        "The reversible decoder in depth",
        "`benchmarks/bench_reversible_decoder.py`: activation memory (the step's peak above the memory "
        "allocated before it) of stored, checkpointed and reversible layers from 1 to 64 layers.",
        ("activation_mib", "peak_mib", "tokens_per_s"),
        (Ratio("activation_mib", "stored", "activations vs stored", min),),
        "plot_reversible",
    ),
    Section(
        "bench_in_backward",
        "InBackwardOptimizer's buckets",
        "`benchmarks/bench_in_backward.py` (`bench_optimizer_in_backward.py` before 2026-12-06): a Llama-style "
        "1.06B decoder, the standard `backward(); step()` against `InBackwardOptimizer` (64 MiB buckets), "
        "with and without checkpointing.",
        ("peak_gib", "between_steps_gib", "step_ms"),
        (Ratio("peak_gib", "standard", "peak vs standard"), Ratio("step_ms", "standard", "step time vs standard")),
    ),
    Section(
        "bench_linear_cross_entropy",
        "Linear cross-entropy against Liger-Kernel and Cut Cross-Entropy",
        '`benchmarks/bench_linear_cross_entropy.py`: forward + backward, reduction "mean", '
        "`triton.testing.do_bench` medians; peak above the inputs; errors against a float32 reference.",
        ("ms", "peak_mib", "peak_over_gradients"),
        (Ratio("ms", "liger", "time vs Liger"),),
        "plot_linear_cross_entropy",
    ),
    Section(
        "bench_host_overhead",
        "Host time per call of the fused operations",
        "`benchmarks/bench_host_overhead.py`: microseconds of host time per call (the GPU kept busy so that "
        "calls queue), ojas's kernel path, public function and registered op beside the torch op of the same "
        "role, at the 1.06B Llama's layer shapes (batch 1 x 2048, bf16). `--step` records (op `step`): the "
        "main thread's CPU time of one whole training step of issue 29's ojas mode on the CPU, launches no-ops "
        "(`us_per_step`, and the phases' means).",
        ("us_per_call", "us_per_step", "forward_us", "backward_us", "optimizer_us"),
        (Ratio("us_per_call", "torch", "vs torch"),),
    ),
    Section(
        "bench_rms_norm",
        "RMSNorm",
        "`benchmarks/bench_rms_norm.py`: forward and forward + backward (`do_bench` medians) and kernels per "
        "forward + backward; peers Hugging Face's `LlamaRMSNorm`, torch's `F.rms_norm` and the compiled "
        "Hugging Face module.",
        ("forward_ms", "forward_backward_ms", "kernels", "peak_mib"),
        (Ratio("forward_backward_ms", "hf", "fwd+bwd time vs HF"),),
    ),
    Section(
        "bench_relu",
        "ReLU with a packed mask",
        "`benchmarks/bench_relu.py`: forward + backward against torch's `F.relu` (and Hugging Face's relu2 + "
        "`nn.Linear`); `saved_mib`: the memory saved for backward; `bitwise_equal`: values and gradients "
        "bitwise torch's.",
        ("step_ms", "saved_mib", "bitwise_equal"),
        (Ratio("step_ms", "torch", "time vs torch"), Ratio("saved_mib", "torch", "saved vs torch")),
    ),
    Section(
        "bench_step_time",
        "Step time predicted from two shallow depths",
        "`benchmarks/bench_step_time.py`: `ojas plan --time --shallow`'s prediction (`ojas_ref/tools/"
        "step_time.py`) beside the full model's step measured in the same rounds.",
        ("tokens_per_s",),
        (Ratio("tokens_per_s", "measured", "vs measured"),),
    ),
    Section(
        "bench_memory_timeline",
        "One step's memory against the plan",
        "`benchmarks/bench_memory_timeline.py`: the measured peak of one step beside `ojas plan`'s.",
        ("peak_gib",),
        (Ratio("peak_gib", "measured", "vs measured"),),
    ),
    Section(
        "bench_attention_error",
        "Attention: proved error bounds beside observed errors",
        "`benchmarks/bench_attention_error.py`: the Triton attention against a float64 reference; each "
        "ratio is the proved bound over the observed error (largest over largest; `min` ratios entry by entry). "
        "No peer: no peer library publishes rounding bounds.",
        (
            "ratio",
            "out_post_max_ratio",
            "lse_ratio",
            "dv_min_ratio",
            "dq_proved_max_ratio",
            "dk_proved_max_ratio",
            "dq_measured_max_ratio",
            "dk_measured_max_ratio",
            "holds",
        ),
        where=_row_record,
    ),
    Section(
        "bench_attention_error",
        "Attention: the float32 bar",
        "`benchmarks/bench_attention_error.py` (S = 4096 and 16384, E = 128, full / causal / GQA). " + BAR_ABOUT,
        BAR_METRICS,
        where=_bar_record,
        anchor="bench_attention_error-float32-bar",
    ),
    Section(
        "bench_linear_cross_entropy_error",
        "Linear cross-entropy: proved error bounds beside observed errors",
        "`benchmarks/bench_linear_cross_entropy_error.py`: the kernel against float64 autograd; ratios are "
        "bound over observed error; `*_vs_trivial`: the bound over the trivial `|computed| + |exact|` "
        "(above 1: vacuous).",
        (
            "loss_bound",
            "loss_observed",
            "ratio",
            "loss_post_ratio",
            "dh_max_ratio",
            "dw_max_ratio",
            "loss_vs_trivial",
            "holds",
        ),
        where=_row_record,
    ),
    Section(
        "bench_linear_cross_entropy_error",
        "Linear cross-entropy: the float32 bar",
        "`benchmarks/bench_linear_cross_entropy_error.py` (N = 16384, D = 4096, V = 128256; normal, peaked and "
        "soft-capped logits). " + BAR_ABOUT,
        BAR_METRICS,
        where=_bar_record,
        anchor="bench_linear_cross_entropy_error-float32-bar",
    ),
)


def fmt(value: float) -> str:
    """A number as the tables print it: thousands separated, about four significant digits."""
    if isinstance(value, int) or (abs(value) >= 1000 and float(value).is_integer()):
        return f"{value:,.0f}"
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    if abs(value) >= 0.01:
        return f"{value:.3g}"
    return f"{value:.3e}"


def fmt_metric(name: str, value: float) -> str:
    """A metric as the tables print it: :data:`FLAGS` as yes / no, numbers by :func:`fmt`."""
    if name in FLAGS:
        return "yes" if value else "no"
    return fmt(value)


def case_text(value) -> str:
    return "x".join(map(str, value)) if isinstance(value, list) else str(value)


def runs(rows: Sequence[dict]) -> list[list[dict]]:
    """``rows`` grouped by run (date, commit, device), newest date first (the same date in record
    order), each in record order."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["date"], r["commit"], r["device"]), []).append(r)
    order = sorted(range(len(groups)), key=lambda i: list(groups)[i][0], reverse=True)  # stable: record order
    return [list(groups.values())[i] for i in order]


def table(section: Section, run: list[dict]) -> list[str]:
    """One run's markdown: where it ran, what its cases share, and one row per record."""
    first = run[0]
    versions = ", ".join(f"{k} {v}" for k, v in sorted({k: v for r in run for k, v in r["versions"].items()}.items()))
    keys = list(dict.fromkeys(k for r in run for k in r["case"]))
    varying = [k for k in keys if len({json.dumps(r["case"].get(k)) for r in run}) > 1]
    shared = {k: first["case"][k] for k in keys if k not in varying and k in first["case"]}
    metrics = [m for m in section.metrics if any(m in r["metrics"] for r in run)]
    columns = [
        (ratio, [x for _, x in records.ratios(run, ratio.metric, ratio.baseline, ratio.best, ratio.by)])
        for ratio in section.ratios
    ]
    columns = [(ratio, xs) for ratio, xs in columns if any(x is not None for x in xs)]
    lines = [f"{first['date']}, commit `{first['commit']}`, {first['device']}; {versions}.", ""]
    if shared:
        lines += ["Case: " + ", ".join(f"{k} {case_text(v)}" for k, v in shared.items()) + ".", ""]
    head = varying + ["peer"] + metrics + [ratio.label for ratio, _ in columns]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i, r in enumerate(run):
        cells = [case_text(r["case"].get(k, "-")) for k in varying] + [r["peer"]]
        cells += [fmt_metric(m, r["metrics"][m]) if m in r["metrics"] else "-" for m in metrics]
        cells += [f"{xs[i]:.3f}x" if xs[i] is not None else "-" for _, xs in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


# ---------------------------------------------------------------------------------------------
# plots: one per headline comparison, from the latest run


def _title(run: list[dict], what: str) -> str:
    r = run[0]
    return f"{what}\n{r['device']}, {r['date']}, commit {r['commit']}"


def _label(case: dict, keys: Sequence[str]) -> str:
    return " ".join(case_text(case[k]) for k in keys if k in case)


def _grouped_bars(ax, groups: list[str], peers: list[str], values: dict[tuple[str, str], float], ylabel: str):
    width = 0.8 / max(len(peers), 1)
    for j, peer in enumerate(peers):
        xs = [i + (j - (len(peers) - 1) / 2) * width for i in range(len(groups))]
        ys = [values.get((g, peer), 0.0) for g in groups]
        ax.bar(xs, ys, width, label=peer)
    ax.set_xticks(range(len(groups)), groups, rotation=20, ha="right")
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)


def _setting(case: dict) -> str:
    """bench_peers' setting as its row label: weights (+ autocast), optimizer, batch, vocabulary."""
    autocast = "" if case.get("autocast", "none") == "none" else f" + {case['autocast']} autocast"
    return f"{case.get('weights')}{autocast} {case.get('optimizer')}\nbatch {case.get('batch')}, V {case.get('vocab')}"


def plot_peers(run: list[dict], plt):
    groups = list(dict.fromkeys(_setting(r["case"]) for r in run))
    peers = list(dict.fromkeys(r["peer"] for r in run))
    fig, axes = plt.subplots(2, 1, figsize=(11, 8), sharex=True)
    for ax, metric, ylabel in ((axes[0], "tokens_per_s", "tokens/s"), (axes[1], "peak_gib", "peak GiB")):
        values = {(_setting(r["case"]), r["peer"]): r["metrics"][metric] for r in run if metric in r["metrics"]}
        _grouped_bars(ax, groups, peers, values, ylabel)
    axes[0].legend(ncol=4, fontsize=8)
    fig.suptitle(_title(run, "Llama training step: ojas against Hugging Face, torch.compile and Liger-Kernel"))
    return fig


def plot_optimize_model(run: list[dict], plt):
    rows = [r for r in run if r["case"].get("checkpoint")]
    groups = list(dict.fromkeys(_label(r["case"], ("dtype", "optimizer")) for r in rows))
    peers = list(dict.fromkeys(r["peer"] for r in rows))
    values = {(_label(r["case"], ("dtype", "optimizer")), r["peer"]): r["metrics"]["peak_gib"] for r in rows}
    fig, ax = plt.subplots(figsize=(8, 4.5))
    _grouped_bars(ax, groups, peers, values, "peak GiB")
    ratios = {
        (_label(r["case"], ("dtype", "optimizer")), r["peer"]): x
        for r, x in records.ratios(rows, "tokens_per_s", "standard")
    }
    for i, g in enumerate(groups):
        x = ratios.get((g, "ojas"))
        if x is not None:
            ax.annotate(
                f"{x:.2f}x tokens/s", (i + 0.2, values.get((g, "ojas"), 0)), ha="center", va="bottom", fontsize=8
            )
    ax.legend([f"{p} + checkpointing" for p in peers])
    fig.suptitle(_title(run, "1.06B Llama, batch 1 x 2048: peak memory with activation checkpointing"))
    return fig


def plot_memory(run: list[dict], plt):
    groups = list(dict.fromkeys(r["peer"] for r in run))
    settings = list(dict.fromkeys(_label(r["case"], ("dtype", "optimizer")) for r in run))
    values = {(r["peer"], _label(r["case"], ("dtype", "optimizer"))): r["metrics"]["peak_gib"] for r in run}
    fig, ax = plt.subplots(figsize=(10, 4.5))
    _grouped_bars(ax, groups, settings, values, "peak GiB")
    ax.legend(title="dtype, optimizer", fontsize=8)
    fig.suptitle(_title(run, "1.06B Llama, batch 1 x 2048: peak memory per technique"))
    return fig


def plot_reversible(run: list[dict], plt):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for peer in dict.fromkeys(r["peer"] for r in run):
        rows = sorted((r for r in run if r["peer"] == peer), key=lambda r: r["case"]["layers"])
        ax.plot([r["case"]["layers"] for r in rows], [r["metrics"]["activation_mib"] for r in rows], "o-", label=peer)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("decoder layers")
    ax.set_ylabel("activation memory, MiB")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.suptitle(_title(run, "Activation memory in depth (hidden 1024, batch 1 x 2048)"))
    return fig


def plot_linear_cross_entropy(run: list[dict], plt):
    groups = list(dict.fromkeys(f"V {r['case']['V']}, ignored {r['case']['ignored']:g}" for r in run))
    peers = list(dict.fromkeys(r["peer"] for r in run))
    values = {(f"V {r['case']['V']}, ignored {r['case']['ignored']:g}", r["peer"]): r["metrics"]["ms"] for r in run}
    fig, ax = plt.subplots(figsize=(9, 4.5))
    _grouped_bars(ax, groups, peers, values, "forward + backward, ms")
    ax.legend(fontsize=8)
    n, d = run[0]["case"]["N"], run[0]["case"]["D"]
    fig.suptitle(_title(run, f"Linear cross-entropy, N {n}, D {d}, bf16 (lower is better)"))
    return fig


PLOTS = dict(
    plot_peers=plot_peers,
    plot_optimize_model=plot_optimize_model,
    plot_memory=plot_memory,
    plot_reversible=plot_reversible,
    plot_linear_cross_entropy=plot_linear_cross_entropy,
)


def write_plot(section: Section, run: list[dict], images: Path) -> Optional[Path]:
    """The section's plot of ``run`` as ``images/<benchmark>.png``; None without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in run if all(r["case"].get(k) == v for k, v in section.case_filter.items())]
    fig = PLOTS[section.plot](rows, plt)
    fig.tight_layout()
    path = images / f"{section.benchmark}.png"
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)
    return path


def report(rows: Sequence[dict], out: Path, images: Path) -> list[Path]:
    """Write ``out`` (markdown) and the plots under ``images``; return the files written."""
    images.mkdir(parents=True, exist_ok=True)
    written = []
    lines = [
        "# Benchmarks",
        "",
        "Generated by `python benchmarks/report.py` from `benchmarks/records.jsonl` (one record per line: "
        "date, commit, device, versions, benchmark, case, metrics, peer; `benchmarks/records.py` writes "
        "and reads them). Do not edit: add records, then run the script.",
        "",
    ]
    rows = [dict(r, benchmark=RENAMED.get(r["benchmark"], r["benchmark"])) for r in rows]
    sections = [s for s in SECTIONS if any(s.shows(r) for r in rows)]
    unknown = sorted({r["benchmark"] for r in rows} - {s.benchmark for s in SECTIONS})
    if unknown:
        raise ValueError(f"records of benchmark(s) {unknown} have no section in benchmarks/report.py's SECTIONS")
    lines += [f"- [{s.title}](#{s.heading})" for s in sections] + [""]
    for s in sections:
        mine = [r for r in rows if s.shows(r)]
        lines += [f"## {s.heading}", "", f"**{s.title}.** {s.about}", ""]
        by_run = runs(mine)
        if s.plot:
            path = write_plot(s, by_run[0], images)
            if path is not None:
                written.append(path)
                lines += [f"![{s.title}]({path.relative_to(out.parent).as_posix()})", ""]
        for run in by_run:
            lines += table(s, run)
    out.write_text("\n".join(lines))
    return [out] + written


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=Path, default=records.RECORDS)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--images", type=Path, default=ROOT / "docs" / "images")
    args = parser.parse_args(argv)
    for path in report(records.read(args.records), args.out, args.images):
        print(path)


if __name__ == "__main__":
    main()
