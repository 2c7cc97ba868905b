"""The outputs of an ``ojas train`` run besides its state files: the log (one JSON record per
step, cut back to the resumed step), the loss and memory plot, and every write failing as
:class:`OutputError`, naming the file and the last complete state file."""

from __future__ import annotations

import json
import math
import resource
from pathlib import Path
from typing import Any, Optional

import torch

from ojas_ref.tools import train_state
from ojas_ref.recipe import dtype_name
from ojas_ref.tools.train_config import TrainConfig, _recipe_line, _source

__all__ = ["OutputError"]


class OutputError(RuntimeError):
    """A file of the run could not be written (a full disk, ...): the message names it and the last
    complete state file (``ojas train`` exits 3)."""


def _write_failed(path: Path, err: OSError, last_state: Optional[Path]) -> str:
    """The message of an :class:`OutputError`: the file, the error, the last complete state file."""
    where = (
        f"the last complete state file is {last_state}: free space (or fix the path) and continue with --resume latest"
        if last_state
        else "no state file was written"
    )
    return f"cannot write {path} ({err.strerror or err}); {where}"


def _write(path: Path, chunks: list[bytes], last_state: Optional[Path]) -> None:
    """:func:`ojas_ref.tools.train_state.atomic_write`, an OSError raised as :class:`OutputError`."""
    try:
        train_state.atomic_write(path, chunks)
    except OSError as err:
        raise OutputError(_write_failed(path, err, last_state)) from err


class _Log:
    """The log opened for appending: ``write`` appends and flushes a record, an OSError raised
    as :class:`OutputError` naming the log and ``state`` (the last complete state file)."""

    def __init__(self, path: Path, state: Optional[Path]) -> None:
        self.path, self.state = path, state

    def __enter__(self) -> "_Log":
        try:
            self._file = self.path.open("a")
        except OSError as err:
            raise OutputError(_write_failed(self.path, err, self.state)) from err
        return self

    def write(self, text: str) -> None:
        try:
            self._file.write(text)
            self._file.flush()
        except OSError as err:
            raise OutputError(_write_failed(self.path, err, self.state)) from err

    def __exit__(self, *exc: Any) -> None:
        try:
            self._file.close()
        except OSError:
            pass  # every write was flushed, and a failed one raised already


def _read_log(path: Path, up_to: int) -> list[dict[str, Any]]:
    """The records of ``path`` of steps <= ``up_to`` (a resumed run redoes the later ones)."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # a line cut by a kill
            continue
        if record.get("step", math.inf) <= up_to:
            records.append(record)
    return records


def _peak_memory(device: torch.device) -> int:
    """Peak bytes: CUDA's ``max_memory_allocated``, or the process's maximum resident set on the CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _plot_title(config: TrainConfig, model: torch.nn.Module, device: torch.device) -> str:
    """The plot's title: the model and the setting, in two lines."""
    parameters = sum(p.numel() for p in model.parameters())
    optimizer = "AdamW in backward" if config.recipe.in_backward else "AdamW"
    return (
        f"ojas train: {_source(config, model.config)}, {parameters / 1e6:.2f}M parameters, {dtype_name(config.dtype)} on "
        f"{device}\n{config.steps} steps of {config.batch_size} x {config.seq_len} tokens"
        + (f" x {config.accumulation_steps}" if config.accumulation_steps > 1 else "")
        + f", lr {config.lr:g} ({config.warmup_steps} warm-up, cosine), {optimizer}, clip {config.max_grad_norm}, "
        f"{_recipe_line(config.recipe).removeprefix('ojas').strip()}"
    )


def _plot(records: list[dict[str, Any]], path: Path, device: torch.device, title: str) -> None:
    """Loss and peak memory against the step, as a PNG (matplotlib, no display needed), under
    ``title``; the memory axis starts at 0."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    steps = [r["step"] for r in records]
    figure = Figure(figsize=(8, 6))
    FigureCanvasAgg(figure)
    loss_axes, memory_axes = figure.subplots(2, 1, sharex=True)
    losses = [r["loss"] for r in records]
    window = max(1, len(losses) // 50)
    smooth = [
        sum(losses[max(0, i - window + 1) : i + 1]) / len(losses[max(0, i - window + 1) : i + 1])
        for i in range(len(losses))
    ]
    loss_axes.plot(steps, losses, alpha=0.35, label="per step")
    loss_axes.plot(steps, smooth, label=f"mean of {window} steps")
    loss_axes.legend()
    loss_axes.set_ylabel("training loss (nats/token)")
    loss_axes.grid(True, alpha=0.3)
    memory_axes.plot(steps, [r["peak_memory_bytes"] / 2**20 for r in records])
    memory_axes.set_ylabel("peak memory (MiB)\n" + ("CUDA allocated" if device.type == "cuda" else "process max RSS"))
    memory_axes.set_ylim(bottom=0)
    memory_axes.set_xlabel("step")
    memory_axes.grid(True, alpha=0.3)
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
