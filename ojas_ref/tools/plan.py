"""``ojas plan``: the peak of device memory of a training step predicted by
:func:`ojas_ref.memory.plan` (its formulas, presets and settings live in the library,
:mod:`ojas_ref.memory`), printed as a table, fitted to a GPU's memory (``--fit``), drawn
(``--plot``, :mod:`ojas_ref.tools.plan_plot`) and set beside the H200 record of the setting
where there is one (:mod:`ojas_ref.tools.records`). The time of a step:
ojas_ref/tools/throughput.py and ojas_ref/tools/step_time.py (``--time``, ``--shallow``).

The formulas, the records and the plot are re-exported here, as ``ojas_ref.tools.plan``
held them before the library's :mod:`ojas_ref.memory` existed.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional, Sequence

from ojas_ref.memory import *  # noqa: F403 (re-exported: the formulas, Model, Setting, plan)
from ojas_ref.memory import (
    BUCKET_CAP_MB,
    DTYPE_BYTES,
    FAMILIES,
    OPTIMIZERS,
    PRESETS,
    STATE_SLICE_MB,
    UNMODELLED,
    Model,
    Phase,
    Plan,
    Setting,
    Term,
    gib,
    plan,
    with_layers,
)
from ojas_ref.tools.plan_plot import TENSOR_CLASSES, check_png_path, plot_plan, tensor_class  # noqa: F401 (re-exported)
from ojas_ref.tools.records import (
    config_model,  # noqa: F401 (re-exported)
    load_memory_records,
    load_records,  # noqa: F401 (re-exported)
    measured_peak,
    memory_record_setting,
    preset_model,
    record_model,
)

__all__ = [
    "FAMILIES",
    "PRESETS",
    "UNMODELLED",
    "Model",
    "Phase",
    "Plan",
    "Setting",
    "Term",
    "fit_batch",
    "fit_preset",
    "fit_table",
    "load_memory_records",
    "load_records",
    "measured_peak",
    "memory_record_setting",
    "parse_bytes",
    "plan",
    "plot_plan",
    "preset_model",
    "record_model",
    "tensor_class",
    "with_layers",
]

_UNITS = {
    "": 1,
    "b": 1,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
}


def parse_bytes(text: str) -> int:
    """'24GiB', '80GB', '139 GiB', '512MiB' or a plain byte count, as bytes."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(
            f"GPU_MEMORY must be a number with a unit among B, KiB, MiB, GiB, TiB, KB, MB, GB, TB "
            f"(e.g. 24GiB), got {text!r}"
        )
    value = float(match.group(1)) * _UNITS[match.group(2).lower()]
    if value <= 0 or not math.isfinite(value):
        raise ValueError(f"GPU_MEMORY must be positive, got {text!r}")
    return int(value)


def fit_preset(memory: int, setting: Setting, presets: Sequence[Model] = tuple(PRESETS.values())) -> Optional[Plan]:
    """The plan of the largest preset (by parameters) whose predicted peak is at most
    ``memory`` bytes under ``setting``; None if none fits."""
    fitting = [p for p in (plan(m, setting) for m in presets) if p.peak <= memory]
    return max(fitting, key=lambda p: p.model.params(), default=None)


def fit_batch(memory: int, model: Any, setting: Setting, limit: int = 2**20) -> Optional[Plan]:
    """The plan of the largest batch (at ``setting.seq``, up to ``limit``) whose predicted
    peak is at most ``memory`` bytes; None if batch 1 does not fit. The peak grows with
    the batch, so a bisection finds it."""

    def at(batch: int) -> Plan:
        return plan(model, replace(setting, batch=batch))

    if at(1).peak > memory:
        return None
    low, high = 1, limit
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if at(mid).peak <= memory else (low, mid - 1)
    return at(low)


#: the benchmark's four modes, as (in_backward, checkpoint, ojas attention and loss)
MODES = ((False, False, False), (False, True, False), (True, False, True), (True, True, True))


def _slice_mb(text: str) -> float:
    """``--state-slice-mb``: a positive finite number of MiB, or ``none`` (0.0 here: whole parameters)."""
    if text.strip().lower() == "none":
        return 0.0
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"--state-slice-mb must be a number of MiB > 0 or 'none', got {text!r}")
    return value


def _bucket_mb(text: str) -> float:
    """``--bucket-mb``: a finite number of MiB >= 0 (0: every gradient updated at once)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"--bucket-mb must be a number of MiB >= 0, got {text!r}")
    return value


class _DeprecatedFlag(argparse.Action):
    """A flag kept for one release under its old name (hidden from ``--help``): sets ``dest`` and
    prints a note naming the new flag on stderr."""

    def __init__(self, option_strings: Sequence[str], dest: str, new: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **kwargs)
        self.new = new

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: Optional[str] = None,
    ) -> None:
        print(
            f"{parser.prog}: {option_string} is deprecated and will be removed in the next release; use {self.new}",
            file=sys.stderr,
        )
        setattr(namespace, self.dest, True)


def add_arguments(parser: Any) -> None:
    """The ``ojas plan`` arguments on an ``argparse`` parser."""
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--preset", choices=list(PRESETS), help="a Llama-shaped preset (default llama-1b)")
    source.add_argument("--config", metavar="PATH", help="a Hugging Face config.json (or a folder holding one)")
    parser.add_argument(
        "--layers",
        type=int,
        metavar="N",
        help="the preset's (or config's) shape with N decoder layers instead of its own",
    )
    parser.add_argument("--dtype", choices=list(DTYPE_BYTES), help="weights, gradients, state (default bf16)")
    parser.add_argument("--optimizer", choices=list(OPTIMIZERS), help="default adamw")
    parser.add_argument(
        "--in-backward",
        action="store_true",
        help="the optimizer in backward: InBackwardOptimizer (64 MiB buckets, or --bucket-mb)",
    )
    parser.add_argument("--fused", action=_DeprecatedFlag, dest="in_backward", new="--in-backward")
    parser.add_argument(
        "--bucket-mb",
        type=_bucket_mb,
        metavar="MB",
        help=f"with --in-backward: InBackwardOptimizer's bucket_cap_mb (default {BUCKET_CAP_MB:g})",
    )
    parser.add_argument("--checkpoint", action="store_true", help="per-layer activation checkpointing")
    parser.add_argument(
        "--split",
        action="store_true",
        help="with --checkpoint: each layer checkpointed as two segments, attention half and MLP "
        "half (optimize_model(checkpoint_split=True))",
    )
    parser.add_argument(
        "--offload",
        action="store_true",
        help="with --checkpoint: the checkpoints in pinned host memory (optimize_model(checkpoint='offload'))",
    )
    parser.add_argument(
        "--host-state",
        action="store_true",
        help="with --in-backward: the optimizer state in host memory (InBackwardOptimizer(state_device='cpu'))",
    )
    parser.add_argument(
        "--state-slice-mb",
        type=_slice_mb,
        metavar="MB|none",
        help="with --host-state: InBackwardOptimizer's state_slice_mb (default none: whole parameters, "
        f"its default), e.g. {STATE_SLICE_MB:g}: a parameter whose state exceeds it updated "
        "slice by slice",
    )
    parser.add_argument(
        "--head-update",
        action="store_true",
        help="with --in-backward, the ojas loss and --optimizer sgd: the head updated chunk by chunk inside "
        "the loss's backward (InBackwardOptimizer(head_weight=model.lm_head.weight)), no [V, D] "
        "gradient",
    )
    parser.add_argument(
        "--ojas",
        action="store_true",
        help="everything optimize_model applies: attention, linear cross-entropy, RMSNorm, SwiGLU",
    )
    parser.add_argument("--ojas-attention", action="store_true", help="ojas attention only")
    parser.add_argument("--ojas-loss", action="store_true", help="ojas linear cross-entropy only")
    parser.add_argument("--batch", type=int, default=1, help="sequences per step (default 1)")
    parser.add_argument("--seq", type=int, default=2048, help="tokens per sequence (default 2048)")
    parser.add_argument(
        "--fit",
        type=_memory_argument,
        metavar="GPU_MEMORY",
        help="e.g. 24GiB: for each dtype x optimizer x mode (the benchmark's four, or the one the "
        "flags give), the largest preset that fits (the largest batch with --preset/--config)",
    )
    parser.add_argument(
        "--plot",
        metavar="FILE.png",
        help="also draw the breakdown of every phase as a stacked bar chart (PNG, needs matplotlib), "
        "with the measured peak beside it for a recorded setting",
    )
    parser.add_argument(
        "--time",
        action="store_true",
        help="also measure this device's GEMM rate (a few seconds) and predict tokens/s and the wall "
        "time to --tokens-per-param tokens (ojas_ref/tools/throughput.py)",
    )
    parser.add_argument(
        "--shallow",
        action="store_true",
        help="with --time: also time training steps of the model's width at 2 and 10 decoder layers "
        "on this device (the model built there: seconds on a GPU) and predict the step by "
        "extrapolating in depth (ojas_ref/tools/step_time.py)",
    )
    parser.add_argument(
        "--tokens-per-param",
        type=float,
        nargs="+",
        default=[20.0, 30.0],
        metavar="K",
        help="with --time: token budgets as multiples of the parameter count (default 20 30)",
    )


def _memory_argument(text: str) -> int:
    try:
        return parse_bytes(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _read_config(path: str) -> Model:
    """``--config``'s model: a Hugging Face config.json (its ``text_config`` where it has one)."""
    file = Path(path)
    file = file / "config.json" if file.is_dir() else file
    try:
        config = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"--config {path}: cannot read a JSON config ({err})") from None
    config = config.get("text_config", config) if isinstance(config, dict) else config
    if not isinstance(config, dict):
        raise ValueError(
            f"--config {path}: expected a JSON object of config fields (a Hugging Face config.json), "
            f"got a JSON {type(config).__name__}"
        )
    return Model.from_config(config, name=file.parent.name or file.stem)


def run_command(args: Any) -> int:
    """``ojas plan``: the breakdown of one setting (and with ``--plot`` its picture, with
    ``--time`` its predicted tokens/s and time to train), or with ``--fit`` the table of fits."""
    try:
        model = _read_config(args.config) if args.config else PRESETS[args.preset or "llama-1b"]
        if args.layers is not None:
            model = with_layers(model, args.layers)
        flags = dict(
            in_backward=args.in_backward,
            checkpoint=args.checkpoint,
            ojas_attention=args.ojas or args.ojas_attention,
            ojas_loss=args.ojas or args.ojas_loss,
            ojas_rms_norm=args.ojas,
            ojas_swiglu=args.ojas,
            offload=args.offload,
            host_state=args.host_state,
            head_update=args.head_update,
            split=args.split,
        )
        if args.state_slice_mb is not None and not args.host_state:
            raise ValueError("--state-slice-mb needs --host-state (only state on the host is updated in slices)")
        if args.host_state:
            flags["state_slice_mb"] = args.state_slice_mb or None
        if args.offload and not args.checkpoint:
            raise ValueError("--offload needs --checkpoint (it moves the checkpoints to host memory)")
        if args.split and not args.checkpoint:
            raise ValueError("--split needs --checkpoint (it splits each layer's checkpoint in two)")
        if args.bucket_mb is not None:
            if not args.in_backward:
                raise ValueError("--bucket-mb needs --in-backward (the buckets are InBackwardOptimizer's)")
            flags["bucket_cap_mb"] = args.bucket_mb
        if args.host_state and not args.in_backward:
            raise ValueError("--host-state needs --in-backward (InBackwardOptimizer streams its state from the host)")
        setting = Setting(
            dtype=args.dtype or "bf16", optimizer=args.optimizer or "adamw", batch=args.batch, seq=args.seq, **flags
        )
        if args.plot is not None:
            if args.fit is not None:
                raise ValueError("--plot draws the plan of one setting: it does not go with --fit")
            check_png_path(args.plot)
        if args.shallow and not args.time:
            raise ValueError("--shallow goes with --time (it refines the time prediction)")
        if args.time and args.fit is not None:
            raise ValueError("--time times one setting: it does not go with --fit")
        if any(not (k > 0 and math.isfinite(k)) for k in args.tokens_per_param):
            raise ValueError(f"--tokens-per-param must be positive numbers, got {args.tokens_per_param}")
        if args.fit is None:
            predicted = plan(model, setting)
            print(predicted.table())
            measured = measured_peak(model, setting)
            if measured is not None:
                print(
                    f"\nmeasured on an H200: {gib(measured)} GiB (torch.cuda.max_memory_allocated, "
                    f"ojas_ref/tools/h200_records.py); predicted {100 * (predicted.peak - measured) / measured:+.2f}%"
                )
            if args.plot is not None:
                plot_plan(predicted, args.plot, measured)
                print(f"\nplot written to {args.plot}")
            if args.time:
                print("\n" + "\n".join(_time_lines(model, setting, args.tokens_per_param)))
                if args.shallow:
                    print("\n" + "\n".join(_shallow_lines(model, setting)))
            return 0
        modes = (
            [flags]
            if any(flags.values())
            else [
                dict(in_backward=f, checkpoint=c, ojas_attention=o, ojas_loss=o, ojas_rms_norm=o, ojas_swiglu=o)
                for f, c, o in MODES
            ]
        )
        settings = [
            Setting(dtype=d, optimizer=o, batch=args.batch, seq=args.seq, **mode)
            for d in ([args.dtype] if args.dtype else list(DTYPE_BYTES))
            for o in ([args.optimizer] if args.optimizer else list(OPTIMIZERS))
            for mode in modes
        ]
    except (ValueError, TypeError, NotImplementedError, OSError, ImportError) as err:
        print(f"ojas plan: {err}", file=sys.stderr)
        return 2
    by_batch = bool(args.preset or args.config)
    print(fit_table(args.fit, settings, model if by_batch else None))
    return 0


def _time_lines(model: Model, setting: Setting, tokens_per_param: Sequence[float]) -> list[str]:
    """``--time``: the GEMM rate measured on this device (CUDA if available) in the setting's
    dtype, and :func:`ojas_ref.tools.throughput.time_lines` at it."""
    import torch

    from ojas_ref.tools.throughput import measure_gemm_rate, time_lines

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[setting.dtype]
    name = torch.cuda.get_device_name() if device == "cuda" else "the CPU"
    return time_lines(model, setting, measure_gemm_rate(device, dtype), name, tokens_per_param)


def _shallow_lines(model: Model, setting: Setting) -> list[str]:
    """``--time --shallow``: the step predicted from steps of the model's width at two small depths
    timed on this device (:func:`ojas_ref.tools.step_time.measure`), beside the H200 record
    where there is one."""
    from ojas_ref.tools.step_time import measure, predict_step_seconds

    measured = measure(model, setting)
    predicted = predict_step_seconds(model, measured)
    timed = ", ".join(f"{d} layers {t * 1e3:.1f} ms" for d, t in zip(measured.depths, measured.seconds))
    lines = [
        f"step predicted from steps timed on {measured.device} ({timed}): {predicted['step'] * 1e3:.1f} ms, "
        f"{setting.tokens / predicted['step']:,.0f} tokens/s",
        f"  per layer {predicted['per_layer'] * 1e3:.2f} ms, the rest of the step {predicted['rest'] * 1e3:.1f} ms",
    ]
    recorded = measured_peak(model, setting, "tokens_per_s")
    if recorded is not None:
        lines.append(
            f"  measured on an H200: {recorded:,.0f} tokens/s (predicted "
            f"{100 * (setting.tokens / predicted['step'] - recorded) / recorded:+.1f}%)"
        )
    return lines


def fit_table(memory: int, settings: Sequence[Setting], model: Optional[Model] = None) -> str:
    """One row per setting: the largest preset that fits in ``memory`` (or, given a
    ``model``, its largest batch), its predicted peak, and the measured peak where the row
    is a recorded configuration (the llama-1b records)."""
    what = f"largest batch of {model.name} at seq {settings[0].seq}" if model else "largest preset"
    lines = [
        f"ojas plan --fit {gib(memory)} GiB: {what}; peak predicted by the formulas of ojas_ref/memory",
        "| dtype | optimizer | mode | fits | tokens/step | peak GiB | at | measured on H200 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in settings:
        found = fit_batch(memory, model, s) if model else fit_preset(memory, s)
        if found is None:
            lines.append(f"| {s.dtype} | {s.optimizer} | {s.mode} | nothing | - | - | - | predicted |")
            continue
        fs = found.setting
        largest = found.model is max(PRESETS.values(), key=Model.params)
        name = f"batch {fs.batch}" if model else found.model.name + (" (every preset fits)" if largest else "")
        peak = measured_peak(found.model, fs)
        label = "predicted" if peak is None else f"measured {gib(peak)} GiB"
        lines.append(
            f"| {s.dtype} | {s.optimizer} | {s.mode} | {name} | {fs.tokens} | {gib(found.peak)} | "
            f"{found.peak_phase.name} | {label} |"
        )
    return "\n".join(lines)
