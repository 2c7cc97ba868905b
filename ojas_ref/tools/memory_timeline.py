"""The device memory of one measured training step over time, beside the planner's phases.

:func:`record` runs one step with hooks on the given modules (by default a decoder's layers
and its output head): at the start and end of each module's forward, when the gradient of its output
arrives (its backward begins) and when the gradient of its input is computed (its backward
ends), and once after the whole step; Hugging Face checkpoints a layer's ``forward``, not its
hooks, so a recomputation shows in the layer's attention and MLP blocks, which
:func:`default_modules` hooks too. Each :class:`Event` holds the bytes allocated at that
moment and the peak since the previous event (CUDA's ``max_memory_allocated``, reset at
every event), so the largest ``peak`` of a step is its ``max_memory_allocated``.
:func:`plot_timeline` draws it, with the phases of a :class:`~ojas_ref.memory.Plan` as
dashed lines (``ojas plan`` predicts those; benchmarks/bench_memory_timeline.py draws a
measured step of the 1.06B model beside its plan). A measurement: nothing here is proved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional

import torch
from torch import nn

from ojas_ref.memory import Plan
from ojas_ref.tools.plan_plot import check_png_path

__all__ = ["Event", "cuda_memory", "default_modules", "plot_timeline", "record"]

_GIB = 2**30


@dataclass(frozen=True)
class Event:
    """``label`` (e.g. ``"forward model.layers.3"``, ``"backward end lm_head"``, ``"step"``),
    the bytes allocated then, and the peak since the previous event."""

    label: str
    allocated: int
    peak: int


def cuda_memory(device: Any = None) -> Callable[[], tuple[int, int]]:
    """(allocated, peak since the last call) of a CUDA device; the peak counter is reset by each call."""

    def read() -> tuple[int, int]:
        allocated, peak = torch.cuda.memory_allocated(device), torch.cuda.max_memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        return allocated, peak

    return read


def default_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The decoder layers (every ``nn.ModuleList`` named ``layers`` or ``h``), each with its
    attention and MLP blocks (children named ``self_attn``, ``attn`` or ``mlp``: called inside the
    layer's forward, so a checkpointed layer's recomputation shows in them, Hugging Face
    checkpointing a layer's ``forward`` and not its hooks), and the output head
    (``get_output_embeddings()``) of a Hugging Face causal LM, with their names."""
    names = {id(m): n for n, m in model.named_modules()}
    picked = []
    for n, m in model.named_modules():
        if isinstance(m, nn.ModuleList) and n.rsplit(".", 1)[-1] in ("layers", "h"):
            for i, layer in enumerate(m):
                picked.append((f"{n}.{i}", layer))
                picked += [
                    (f"{n}.{i}.{c}", child) for c, child in layer.named_children() if c in ("self_attn", "attn", "mlp")
                ]
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None:
        picked.append((names[id(head)], head))
    if not picked:
        raise ValueError(
            "model has no decoder layers (a ModuleList named layers or h) nor output embeddings: "
            "pass modules=[(name, module), ...]"
        )
    return picked


def _first_tensor(value: Any) -> Optional[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)):
        return next((t for v in value if (t := _first_tensor(v)) is not None), None)
    if isinstance(value, dict):  # Hugging Face's ModelOutput too
        return next((t for v in value.values() if (t := _first_tensor(v)) is not None), None)
    return None


def record(
    step: Callable[[], Any], modules: Iterable[tuple[str, nn.Module]], memory: Callable[[], tuple[int, int]]
) -> list[Event]:
    """Run ``step()`` (one forward, backward and optimizer step) once with the module
    docstring's hooks on ``modules``; ``memory()`` returns (allocated, peak since its last
    call), e.g. :func:`cuda_memory`. The hooks are removed afterwards, also on an error."""
    events: list[Event] = []

    def mark(label: str) -> None:
        allocated, peak = memory()
        events.append(Event(label, allocated, peak))

    def on_grad(label: str) -> Callable[[torch.Tensor], None]:
        def hook(grad: torch.Tensor) -> None:
            mark(label)

        return hook

    handles = []
    for name, module in modules:

        def pre(mod: nn.Module, args: Any, kwargs: Any, name: str = name) -> None:
            mark(f"forward {name}")
            x = _first_tensor((args, kwargs))
            if x is not None and x.requires_grad and torch.is_grad_enabled():
                x.register_hook(on_grad(f"backward end {name}"))

        def post(mod: nn.Module, args: Any, kwargs: Any, out: Any, name: str = name) -> None:
            mark(f"forward end {name}")
            y = _first_tensor(out)
            if y is not None and y.requires_grad and torch.is_grad_enabled():
                y.register_hook(on_grad(f"backward {name}"))

        handles += [
            module.register_forward_pre_hook(pre, with_kwargs=True),
            module.register_forward_hook(post, with_kwargs=True),
        ]
    try:
        memory()  # the first interval starts here
        step()
        mark("step")
    finally:
        for h in handles:
            h.remove()
    return events


def plot_timeline(events: list[Event], path: Any, plan: Optional[Plan] = None, title: str = "") -> Any:
    """Draw ``events`` (GiB allocated and peak per event, in order) as a PNG at ``path``, with each
    phase total of ``plan`` as a dashed line; returns the matplotlib ``Figure``. Agg canvas,
    pyplot untouched; ``ValueError`` for a path that is not a writable ``.png``."""
    if not events:
        raise ValueError("events is empty: record() a step first")
    file = check_png_path(path)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(13, 5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    x = range(len(events))
    ax.step(x, [e.peak / _GIB for e in events], where="pre", color="#d62728", label="peak since the previous event")
    ax.plot(x, [e.allocated / _GIB for e in events], ".-", color="#1f77b4", label="allocated at the event")
    if plan is not None:
        for i, phase in enumerate(plan.phases):
            colour = f"C{(i + 2) % 10}"
            ax.axhline(phase.total / _GIB, linestyle="--", linewidth=1, color=colour)
            x0 = 0 if i % 2 == 0 else len(events) // 2  # alternate sides: close phases stay legible
            ax.annotate(
                f"planned: {phase.name} {phase.total / _GIB:.2f}",
                (x0, phase.total / _GIB),
                fontsize=7,
                color=colour,
                xytext=(2, 2),
                textcoords="offset points",
            )
    every = max(1, len(events) // 40)
    ax.set_xticks(list(x)[::every], [e.label for e in events][::every], rotation=90, fontsize=6)
    ax.set_ylabel("GiB")
    top = max(e.peak for e in events)
    ax.set_title(title or f"one training step: {len(events)} events, measured peak {top / _GIB:.3f} GiB")
    ax.legend(loc="lower right", fontsize=8)
    fig.savefig(file, dpi=110)
    return fig
