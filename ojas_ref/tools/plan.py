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
import dataclasses
import json
import math
import re
import sys
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional, Sequence

import torch

from ojas_ref.memory import *  # noqa: F403 (re-exported: the formulas, Model, Setting, plan)
from ojas_ref.memory import (
    DTYPE_BYTES,
    FAMILIES,
    OPTIMIZERS,
    PRESETS,
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
from ojas_ref.recipe import MemoryRecipe, add_recipe_arguments, as_dtype, dtype_name, recipe_from_arguments
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


#: the benchmark's four modes (standard, standard+ckpt, ojas, ojas+ckpt): what ``--fit`` compares when the
#: flags leave the recipe at :data:`DEFAULTS`
MODES = (
    MemoryRecipe.plain(),
    MemoryRecipe.plain(checkpoint=True),
    MemoryRecipe(in_backward=True),
    MemoryRecipe(in_backward=True, checkpoint=True),
)
#: ``ojas plan``'s recipe when no flag changes it: standard PyTorch (:class:`Setting`'s default)
DEFAULTS = MemoryRecipe.plain()
#: every primitive of optimize_model (the recipe's defaults)
_OJAS = {name: True for name in ("attention", "linear_cross_entropy", "rms_norm", "swiglu", "rope", "relu_mask")}
#: the flags of release 0.2 (``--fused``: 0.1), hidden and deprecated for one release: each sets
#: recipe fields (None: the flag's value, a number of MiB), and names the flags that replace it
DEPRECATED_FLAGS: dict[str, tuple[str, dict[str, Any]]] = {
    "--fused": ("--in-backward", dict(in_backward=True)),
    "--ojas": ("--attention --linear-cross-entropy --rms-norm --swiglu --rope --relu-mask", _OJAS),
    "--ojas-attention": ("--attention", dict(attention=True)),
    "--ojas-loss": ("--linear-cross-entropy", dict(linear_cross_entropy=True)),
    "--offload": ("--checkpoint offload", dict(checkpoint="offload")),
    "--split": ("--checkpoint-split", dict(checkpoint_split=True)),
    "--host-state": ("--state-device cpu", dict(state_device="cpu")),
    "--bucket-mb": ("--bucket-cap-mb", dict(bucket_cap_mb=None)),
}


class _DeprecatedFlag(argparse.Action):
    """A flag of :data:`DEPRECATED_FLAGS` (hidden from ``--help``): prints a note naming the flags
    that replace it on stderr and records its recipe fields in ``namespace.deprecated_recipe``,
    applied over the recipe's flags by :func:`_recipe`."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        self.new, self.changes = DEPRECATED_FLAGS[option_strings[0]]
        takes_value = None in self.changes.values()
        super().__init__(
            option_strings,
            dest,
            nargs=None if takes_value else 0,
            type=float if takes_value else None,
            metavar="MB" if takes_value else None,
            default=argparse.SUPPRESS,
            help=argparse.SUPPRESS,
            **kwargs,
        )

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
        changes = {field: values if value is None else value for field, value in self.changes.items()}
        namespace.deprecated_recipe = {**getattr(namespace, "deprecated_recipe", {}), **changes}


def _dtype_argument(text: str) -> torch.dtype:
    """``--dtype``: a dtype the planner models, by its torch name (:func:`ojas_ref.recipe.as_dtype`;
    release 0.1's ``bf16`` / ``fp32`` print a deprecation note on stderr)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DeprecationWarning)
        try:
            dtype = as_dtype(text, "--dtype")
        except (TypeError, ValueError) as err:
            raise argparse.ArgumentTypeError(str(err)) from None
    for warning in caught:
        print(f"ojas plan: {warning.message}", file=sys.stderr)
    if dtype not in DTYPE_BYTES:
        names = ", ".join(dtype_name(d) for d in DTYPE_BYTES)
        raise argparse.ArgumentTypeError(f"--dtype must be one the planner models ({names}), got {text!r}")
    return dtype


def add_arguments(parser: Any) -> None:
    """The ``ojas plan`` arguments on an ``argparse`` parser: the model, the workload, the memory
    recipe (:func:`ojas_ref.recipe.add_recipe_arguments`, standard PyTorch by default) and what
    to print."""
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--preset", choices=list(PRESETS), help="a Llama-shaped preset (default llama-1b)")
    source.add_argument("--config", metavar="PATH", help="a Hugging Face config.json (or a folder holding one)")
    parser.add_argument(
        "--layers",
        type=int,
        metavar="N",
        help="the preset's (or config's) shape with N decoder layers instead of its own",
    )
    names = ",".join(dtype_name(d) for d in DTYPE_BYTES)
    parser.add_argument(
        "--dtype",
        type=_dtype_argument,
        metavar=f"{{{names}}}",
        help="weights, gradients, state (default bfloat16; with --fit and no --dtype: each)",
    )
    parser.add_argument("--optimizer", choices=list(OPTIMIZERS), help="default adamw (with --fit and none: each)")
    add_recipe_arguments(parser, DEFAULTS)
    for flag in DEPRECATED_FLAGS:
        parser.add_argument(flag, action=_DeprecatedFlag)
    parser.add_argument("--batch", type=int, default=1, help="sequences per step (default 1)")
    parser.add_argument("--seq", type=int, default=2048, help="tokens per sequence (default 2048)")
    parser.add_argument(
        "--fit",
        type=_memory_argument,
        metavar="GPU_MEMORY",
        help="e.g. 24GiB: for each dtype x optimizer x recipe (the benchmark's four when no flag changes the "
        "recipe, else the flags' one), the largest preset that fits (the largest batch with --preset/--config)",
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


def _recipe(args: argparse.Namespace) -> MemoryRecipe:
    """The recipe of ``ojas plan``'s flags: :func:`ojas_ref.recipe.recipe_from_arguments` after the
    deprecated flags' fields (:data:`DEPRECATED_FLAGS`) are set over the recipe's flags. Refuses a
    bucket size without the optimizer in backward (whose buckets they are)."""
    fields = {field.name: getattr(args, field.name) for field in dataclasses.fields(MemoryRecipe)}
    recipe = recipe_from_arguments(argparse.Namespace(**{**fields, **getattr(args, "deprecated_recipe", {})}))
    if recipe.bucket_cap_mb != DEFAULTS.bucket_cap_mb and not recipe.in_backward:
        raise ValueError("--bucket-cap-mb needs --in-backward (the buckets are InBackwardOptimizer's)")
    return recipe


def run_command(args: Any) -> int:
    """``ojas plan``: the breakdown of one setting (and with ``--plot`` its picture, with
    ``--time`` its predicted tokens/s and time to train), or with ``--fit`` the table of fits."""
    try:
        model = _read_config(args.config) if args.config else PRESETS[args.preset or "llama-1b"]
        if args.layers is not None:
            model = with_layers(model, args.layers)
        recipe = _recipe(args)
        setting = Setting(recipe, args.dtype or torch.bfloat16, args.optimizer or "adamw", args.batch, args.seq)
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
        recipes = [recipe] if recipe != DEFAULTS else MODES
        settings = [
            Setting(r, dtype, optimizer, args.batch, args.seq)
            for dtype in ([args.dtype] if args.dtype else list(DTYPE_BYTES))
            for optimizer in ([args.optimizer] if args.optimizer else list(OPTIMIZERS))
            for r in recipes
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
    from ojas_ref.tools.throughput import measure_gemm_rate, time_lines

    device = "cuda" if torch.cuda.is_available() else "cpu"
    name = torch.cuda.get_device_name() if device == "cuda" else "the CPU"
    return time_lines(model, setting, measure_gemm_rate(device, setting.dtype), name, tokens_per_param)


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
            lines.append(f"| {dtype_name(s.dtype)} | {s.optimizer} | {s.mode} | nothing | - | - | - | predicted |")
            continue
        fs = found.setting
        largest = found.model is max(PRESETS.values(), key=Model.params)
        name = f"batch {fs.batch}" if model else found.model.name + (" (every preset fits)" if largest else "")
        peak = measured_peak(found.model, fs)
        label = "predicted" if peak is None else f"measured {gib(peak)} GiB"
        lines.append(
            f"| {dtype_name(s.dtype)} | {s.optimizer} | {s.mode} | {name} | {fs.tokens} | {gib(found.peak)} | "
            f"{found.peak_phase.name} | {label} |"
        )
    return "\n".join(lines)
