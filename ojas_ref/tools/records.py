"""The H200 records beside the planner: :func:`measured_peak`, the measurement ``ojas plan`` prints
beside its prediction (from the table of :mod:`ojas_ref.tools.h200_records`, shipped with the
package), and the readers of the benchmarks' record files as the planner's models and settings,
each given the file's path (benchmarks/bench_optimize_model.py's: :func:`load_records`;
benchmarks/bench_memory.py's: :func:`load_memory_records`, :func:`memory_record_setting`). The
package reads no file of benchmarks/: tests/memory/test_memory.py reads the records it checks the formulas
against from tests/fixtures/plan/."""

from __future__ import annotations

import functools
import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Optional

from ojas_ref.memory import BUCKET_CAP_MB, PRESETS, Model, Setting, with_layers
from ojas_ref.recipe import MemoryRecipe, as_dtype

__all__ = [
    "config_model",
    "load_memory_records",
    "load_records",
    "measured_peak",
    "memory_record_setting",
    "preset_model",
    "record_model",
]


def load_records(path: Path | str, field: str = "peak") -> list[tuple[Setting, Any]]:
    """The measurements of one record file of benchmarks/bench_optimize_model.py (the llama-1b
    preset on an H200) as (setting, the result's ``field``: ``"peak"``, torch.cuda.max_memory_allocated
    bytes, or ``"tokens_per_s"``, from the median step time). What an ojas mode applied
    is each result's ``applied`` (attention and loss only where it is absent: the first
    file, measured before the fused RMSNorm and SwiGLU existed); the file names the loss
    ``cross_entropy``, the recipe ``linear_cross_entropy``. The attention output was copied
    (``ojas_attention_copy``) until the fused RoPE came (files without ``rope`` in ``applied``)."""
    data = json.loads(Path(path).read_text())
    config = data["config"]
    records = []
    for r in data["results"]:
        ojas = r["mode"].startswith("ojas")
        applied = r.get("applied") or dict(attention=ojas, cross_entropy=ojas, rms_norm=False, swiglu=False)
        recipe = MemoryRecipe.plain(
            attention=applied["attention"],
            linear_cross_entropy=applied["cross_entropy"],
            rms_norm=applied["rms_norm"],
            swiglu=applied["swiglu"],
            rope=applied.get("rope", False),
            checkpoint=r["mode"].endswith("+ckpt"),
            in_backward=ojas,
        )
        setting = Setting(
            recipe=recipe,
            dtype=as_dtype(r["dtype"]),
            optimizer=r["optimizer"],
            batch=config["batch"],
            seq=config["seq"],
            ojas_attention_copy=applied["attention"] and "rope" not in applied,
        )
        records.append((setting, r[field]))
    return records


def memory_record_setting(row: Mapping[str, Any], batch: int, seq: int) -> Optional[Setting]:
    """The setting of one row of benchmarks/bench_memory.py (its ``mode``, ``dtype``,
    ``optimizer`` and the ``techniques`` it applied, optimize_model's primitives but RoPE, all
    checkpointed; a host-state row without ``state_slice_mb``, measured before slicing existed,
    updated whole parameters; a row without ``split`` or ``bucket_cap_mb``, measured before they
    were recorded, whole-layer checkpoints and 64 MiB buckets), or None where the planner does not
    model the row (the sparse embedding, the reversible decoder)."""
    t = row.get("techniques")
    if row["mode"] == "reversible" or (t is not None and t["sparse_embedding"]):
        return None
    dtype = _RECORDED_DTYPES.get(row["dtype"], row["dtype"])  # the rows spell dtypes as release 0.1 did
    if t is None:
        return Setting(MemoryRecipe.plain(checkpoint=True), dtype, row["optimizer"], batch, seq)
    primitives = dict(attention=True, linear_cross_entropy=True, rms_norm=True, swiglu=True)
    recipe = MemoryRecipe.plain(
        **primitives,
        checkpoint=t["checkpoint"],
        checkpoint_split=bool(t.get("split", False)),
        in_backward=True,
        state_device=t["state_device"],
        state_slice_mb=t.get("state_slice_mb") if t["state_device"] is not None else None,
        head_update=bool(t.get("head_update", False)),
        bucket_cap_mb=float(t.get("bucket_cap_mb", BUCKET_CAP_MB)),
    )
    return Setting(recipe, dtype, row["optimizer"], batch, seq)


#: the dtypes of bench_memory's rows, by the names they were recorded with
_RECORDED_DTYPES = {"fp32": "float32", "bf16": "bfloat16"}


def preset_model(name: str) -> Model:
    """A preset by name, or ``NAME@LAYERS`` (:func:`with_layers`) as bench_memory.py's rows name them."""
    base, _, layers = name.partition("@")
    if base not in PRESETS:
        raise ValueError(f"preset must be one of {list(PRESETS)} (optionally @LAYERS), got {name!r}")
    return with_layers(PRESETS[base], int(layers)) if layers else PRESETS[base]


def load_memory_records(path: Path | str) -> list[tuple[Model, Setting, dict]]:
    """The modelled rows of one record file of benchmarks/bench_memory.py that fitted, as (model (the
    row's ``preset``, or else the file's config: :func:`config_model`), setting, the row: ``peak``,
    ``host``, ``tokens_per_s``, ``losses``, ...)."""
    data = json.loads(Path(path).read_text())
    c = data["config"]
    records = []
    for row in data["results"]:
        setting = memory_record_setting(row, c["batch"], c["seq"])
        if setting is not None and row.get("fits", True):
            records.append((preset_model(row["preset"]) if "preset" in row else config_model(c), setting, row))
    return records


def record_model(path: Path | str) -> Model:
    """The model the records of a benchmarks/bench_optimize_model.py file were measured on, from
    their config."""
    return config_model(json.loads(Path(path).read_text())["config"])


def config_model(c: Mapping[str, Any]) -> Model:
    """The model of a record file's ``config`` (bench_optimize_model's and bench_memory's: hidden,
    layers, heads, intermediate, vocab; no GQA, untied), named llama-1b when it is that preset's
    shape: the model of a bench_memory row without a ``preset``."""
    m = Model(c["hidden"], c["layers"], c["heads"], c["heads"], c["intermediate"], c["vocab"])
    one_b = PRESETS["llama-1b"]
    return replace(m, name="llama-1b") if replace(m, name="", source="") == replace(one_b, name="", source="") else m


def measured_peak(model: Model, setting: Setting, field: str = "peak") -> Optional[Any]:
    """The peak (``field="peak"``, bytes) or the tokens per second (``"tokens_per_s"``) measured on
    the H200 for this model shape and setting (:mod:`ojas_ref.tools.h200_records`), or None where
    nothing was measured. The recipe's ``rope`` and ``relu_mask`` do not tell settings apart here
    (they change no tensor the planner counts: the measurement with or without them is the
    setting's)."""
    if field not in _FIELDS:
        raise ValueError(f"field must be one of {_FIELDS}, got {field!r}")
    return _measured().get((_shape(model), _key(setting)), {}).get(field)


_FIELDS = ("peak", "tokens_per_s")


def _shape(m: Model) -> Model:
    """``m`` without its name and source: the key of a measurement."""
    return replace(m, name="", source="")


def _key(s: Setting) -> Setting:
    """``s`` without what changes no counted tensor (the recipe's ``rope`` and ``relu_mask``)."""
    return replace(s, recipe=replace(s.recipe, rope=False, relu_mask=False))


@functools.cache
def _measured() -> dict[tuple[Model, Setting], dict[str, Any]]:
    """:mod:`ojas_ref.tools.h200_records`' rows by (model shape, :func:`_key` of the setting)."""
    from ojas_ref.tools.h200_records import MODELS, ROWS

    table = {}
    for name, fields, peak, tokens_per_s in ROWS:
        table[(_shape(Model(*MODELS[name])), _key(Setting(**fields)))] = {"peak": peak, "tokens_per_s": tokens_per_s}
    return table
