"""``ojas plan --plot FILE.png``: a :class:`~ojas_ref.memory.Plan` drawn as a stacked bar per
phase, by :func:`tensor_class`, beside the measured peak where the setting was recorded."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from ojas_ref.memory import Plan, gib
from ojas_ref.recipe import dtype_name

__all__ = ["TENSOR_CLASSES", "check_png_path", "plot_plan", "tensor_class"]

#: the classes a phase's terms are stacked by, bottom (left) first, with their colours
TENSOR_CLASSES = (
    ("weights", "#4c72b0"),
    ("optimizer state", "#dd8452"),
    ("weight gradients", "#55a868"),
    ("saved activations", "#c44e52"),
    ("loss: logits / kernel gradients and workspace", "#8172b3"),
    ("activation gradients and temporaries", "#937860"),
    ("cuBLAS workspaces", "#da8bc3"),
    ("input ids and labels", "#8c8c8c"),
)
_CLASS_OF_TERM = {
    "weights": "weights",
    "optimizer state": "optimizer state",
    "cuBLAS workspaces": "cuBLAS workspaces",
    "input ids and labels": "input ids and labels",
    "RoPE cos/sin": "saved activations",
    "gradient of the hidden states": "activation gradients and temporaries",
    "their sum": "weight gradients",
    "tied head's gradient, waiting for the embedding's": "weight gradients",
}


def tensor_class(term: str) -> str:
    """The class of the picture a term of :func:`plan` is stacked in (by its name:
    ``saved activations: ...``, ``loss: ...``, ``... temporaries ...``, weight gradients);
    ``other`` for a name none of the rules knows."""
    if term in _CLASS_OF_TERM:
        return _CLASS_OF_TERM[term]
    if term.startswith("saved activations"):
        return "saved activations"
    if term.startswith("optimizer state"):
        return "optimizer state"
    if term.startswith("loss:"):
        return "loss: logits / kernel gradients and workspace"
    if "temporaries" in term:
        return "activation gradients and temporaries"
    if "gradient" in term:
        return "weight gradients"
    return "other"


def check_png_path(path: Any) -> Path:
    """``path`` as a ``Path`` for a PNG to write (plot_plan, memory_timeline.plot_timeline):
    ``ValueError`` unless it ends in ``.png``, is not a directory, and its directory exists."""
    file = Path(path)
    if file.suffix.lower() != ".png":
        raise ValueError(f"the plot is a PNG: its file name must end in .png, got {str(path)!r}")
    if file.is_dir():
        raise ValueError(f"the plot's path {str(path)!r} is a directory, not a .png file")
    if not file.parent.is_dir():
        raise ValueError(f"the plot's directory {str(file.parent)!r} does not exist")
    return file


def plot_plan(result: Plan, path: Any, measured: Optional[int] = None) -> Any:
    """Draw ``result`` (a :class:`Plan`) as a PNG at ``path`` and return the
    ``matplotlib.figure.Figure`` (written, not shown).

    One horizontal bar per phase of the step, in step order from the top, stacked by
    :func:`tensor_class` (GiB); the peak phase is outlined and its total labelled "peak".
    Every phase is drawn, not only the peak's, since where the peak falls is part of the
    prediction (the loss with the standard loss, somewhere in the backward with the fused
    optimizer). The left panel is the whole of each bar from zero; the right panel the
    same bars less the weights and the optimizer state (the same at every phase and most
    of the bytes, they hide what changes through the step), with each phase's total.
    Given ``measured`` (bytes, e.g. :func:`measured_peak` of the plan's model and
    setting), a hatched bar of the measured peak is drawn below the phases and a dashed
    line at its value across them, in both panels (in the right one, less the same
    predicted weights and state).

    Uses matplotlib's Agg canvas, imported here (the planner does not need matplotlib;
    pyplot's global state is not touched). ``ValueError`` for a path that does not end
    in ``.png``, is a directory, or whose directory does not exist."""
    if not isinstance(result, Plan):
        raise TypeError(f"result must be a Plan (from plan()), got {type(result).__name__}")
    if measured is not None and (isinstance(measured, bool) or not isinstance(measured, int) or measured <= 0):
        raise ValueError(f"measured must be a positive byte count or None, got {measured!r}")
    file = check_png_path(path)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    m, s = result.model, result.setting
    phases = list(result.phases)
    peak = result.peak_phase
    rows = len(phases) + (measured is not None)
    fixed_classes = ("weights", "optimizer state")
    fixed = max(sum(t.bytes for t in p.terms if tensor_class(t.name) in fixed_classes) for p in phases)
    colours = dict(TENSOR_CLASSES) | {"other": "#cccccc"}
    fig = Figure(figsize=(13, 2.4 + 0.42 * rows), layout="constrained")
    FigureCanvasAgg(fig)
    full, zoom = fig.subplots(1, 2, sharey=True, width_ratios=(3, 2))
    for ax, skip in ((full, ()), (zoom, fixed_classes)):
        left = [0.0] * len(phases)
        for cls in list(colours):
            if cls in skip:
                continue
            widths = [sum(t.bytes for t in p.terms if tensor_class(t.name) == cls) / 2**30 for p in phases]
            if any(widths):
                ax.barh(
                    range(len(phases)),
                    widths,
                    left=left,
                    height=0.7,
                    color=colours[cls],
                    label=cls if ax is full else "_" + cls,
                )  # "_": in the legend once
                left = [a + b for a, b in zip(left, widths)]
        i = phases.index(peak)
        ax.barh(i, left[i], height=0.7, fill=False, edgecolor="black", linewidth=2.0)
        shift = fixed / 2**30 if skip else 0.0
        ends = left
        if measured is not None:
            ax.barh(
                len(phases),
                measured / 2**30 - shift,
                height=0.7,
                color="white",
                edgecolor="black",
                hatch="//",
                label="measured peak (torch.cuda.max_memory_allocated on an H200)" if ax is full else None,
            )
            ax.axvline(measured / 2**30 - shift, color="black", linestyle="--", linewidth=1.0)
            ends = left + [measured / 2**30 - shift]
        ax.grid(axis="x", alpha=0.3)
        ax.set_axisbelow(True)
    full.set_xlim(0, max([result.peak] + ([measured] if measured is not None else [])) / 2**30 * 1.04)
    # the totals in one column right of the longest bar (clear of the dashed line)
    top = max(ends)
    column = top * 1.04
    for i, p in enumerate(phases):
        is_peak = p is peak
        zoom.text(
            column,
            i,
            f"{gib(p.total)}" + ("  peak" if is_peak else ""),
            va="center",
            ha="left",
            fontsize=9,
            fontweight="bold" if is_peak else "normal",
        )
    labels = [p.name for p in phases]
    if measured is not None:
        error = 100 * (result.peak - measured) / measured
        zoom.text(
            column,
            len(phases),
            f"{gib(measured)}  measured\n(predicted {error:+.2f}%)",
            va="center",
            ha="left",
            fontsize=9,
            fontweight="bold",
        )
        labels.append("measured on an H200")
    zoom.set_xlim(0, top * 1.7)
    full.set_yticks(range(rows), labels)
    full.invert_yaxis()
    full.set_xlabel("device memory (GiB)")
    zoom.set_xlabel(f"GiB above weights + optimizer state ({gib(fixed)} GiB)")
    full.set_title("whole step, from zero", fontsize=9)
    zoom.set_title("what changes through the step; phase totals (GiB) on the right", fontsize=9)
    fig.suptitle(
        f"ojas plan: {m.name} ({m.params() / 1e9:.2f}B parameters), {dtype_name(s.dtype)}, {s.optimizer}"
        f"{', optimizer in backward' if s.recipe.in_backward else ''}, {s.mode}, batch {s.batch} x seq {s.seq}\n"
        f"predicted peak {gib(result.peak)} GiB at: {peak.name}"
        + (f"; measured {gib(measured)} GiB" if measured is not None else ""),
        fontsize=10,
    )
    fig.legend(loc="outside lower center", ncols=3, fontsize=8.5, frameon=False)
    fig.savefig(file, dpi=110)
    return fig
