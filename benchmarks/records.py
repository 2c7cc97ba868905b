"""The repository's one benchmark record format: ``benchmarks/records.jsonl``.

One JSON object per line, one measurement of one implementation ("peer") in one configuration::

    {"date": "2026-12-01", "commit": "d148639", "device": "NVIDIA H200",
     "versions": {"torch": "2.11.0+cu130", "triton": "3.6.0", ...},
     "benchmark": "bench_optimize_model", "case": {"dtype": "bf16", "optimizer": "adamw", ...},
     "metrics": {"tokens_per_s": 28314.0, "peak_gib": 8.63}, "peer": "ojas"}

``date`` is an ISO date (UTC), ``commit`` the code's commit, ``device`` the device's name,
``versions`` the libraries that ran, ``benchmark`` the script's name, ``case`` the configuration
(shape, dtype, mode...), ``metrics`` numbers with their unit in their name (``tokens_per_s``,
``peak_gib``, ``ms``), and ``peer`` the implementation measured. Records of the same benchmark,
date, commit, device and case are one comparison: :func:`ratios` sets each beside a baseline peer.

    from benchmarks import records
    records.append("bench_peers", case={...}, metrics={"tokens_per_s": 43500.0}, peer="ojas")
    rows = records.read(benchmark="bench_peers")
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import math
import platform
import os
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

if TYPE_CHECKING:
    import torch

#: the repository's records
RECORDS = Path(__file__).resolve().with_name("records.jsonl")
#: every record has exactly these fields
FIELDS = ("date", "commit", "device", "versions", "benchmark", "case", "metrics", "peer")
#: distributions whose versions a record names where installed (key: distribution name)
DISTRIBUTIONS = {
    "torch": "torch",
    "triton": "triton",
    "transformers": "transformers",
    "liger_kernel": "liger-kernel",
    "cut_cross_entropy": "cut-cross-entropy",
}


def validate(record: Mapping[str, Any]) -> dict:
    """``record`` as a plain dict if it has every field of :data:`FIELDS` (and no other) with the
    right type; otherwise ``ValueError`` naming the field and what was expected."""
    if not isinstance(record, Mapping):
        raise ValueError(f"a record must be a mapping, got {type(record).__name__}")
    missing = [f for f in FIELDS if f not in record]
    if missing:
        raise ValueError(f"record is missing required field(s) {missing}; a record has {list(FIELDS)}")
    unknown = sorted(set(record) - set(FIELDS))
    if unknown:
        raise ValueError(f"record has unknown field(s) {unknown}; a record has {list(FIELDS)}")
    for name in ("date", "commit", "device", "benchmark", "peer"):
        if not isinstance(record[name], str) or not record[name]:
            raise ValueError(f"record field {name!r} must be a non-empty string, got {record[name]!r}")
    try:
        datetime.date.fromisoformat(record["date"])
    except ValueError:
        raise ValueError(f"record field 'date' must be an ISO date (YYYY-MM-DD), got {record['date']!r}") from None
    versions = record["versions"]
    if not isinstance(versions, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in versions.items()
    ):
        raise ValueError(f"record field 'versions' must map names to version strings, got {versions!r}")
    if not isinstance(record["case"], Mapping):
        raise ValueError(f"record field 'case' must be a mapping of the configuration, got {record['case']!r}")
    metrics = record["metrics"]
    if not isinstance(metrics, Mapping) or not metrics:
        raise ValueError(f"record field 'metrics' must be a non-empty mapping of name to number, got {metrics!r}")
    for name, value in metrics.items():
        if (
            not isinstance(name, str)
            or isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
        ):
            raise ValueError(f"record metric {name!r} must be a finite number, got {value!r}")
    out = {f: record[f] for f in FIELDS}
    json.dumps(out, allow_nan=False)  # the case too must be JSON
    return out


def _commit() -> str:
    """``$OJAS_RECORD_COMMIT`` when set (a snapshot measured outside its git checkout, such as
    ``git archive`` on the device), else the checkout's short commit, ``"unknown"`` outside one."""
    if os.environ.get("OJAS_RECORD_COMMIT"):
        return os.environ["OJAS_RECORD_COMMIT"]
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=RECORDS.parent, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"


def _driver() -> Optional[str]:
    """The NVIDIA driver's version (``nvidia-smi``), or None."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = out.stdout.split()
    return lines[0] if out.returncode == 0 and lines else None


def versions(device: Optional[Union[str, "torch.device"]] = None) -> dict[str, str]:
    """The versions a record names: Python, each of :data:`DISTRIBUTIONS` that is installed, and on
    CUDA the CUDA runtime torch was built with and the driver."""
    out = {"python": platform.python_version()}
    for key, dist in DISTRIBUTIONS.items():
        try:
            out[key] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    if device is not None and str(device).startswith("cuda"):
        import torch

        if torch.version.cuda:
            out["cuda"] = torch.version.cuda
        driver = _driver()
        if driver:
            out["driver"] = driver
    return out


def device_name(device: Optional[Union[str, "torch.device"]] = None) -> str:
    """The name a record gives ``device`` (default: CUDA if available, else the CPU)."""
    import torch

    device = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.processor() or platform.machine()})"


def environment(device: Optional[Union[str, "torch.device"]] = None) -> dict:
    """``date`` (today, UTC), ``commit``, ``device`` and ``versions`` of a record measured now on ``device``."""
    import torch

    device = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    return dict(
        date=datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
        commit=_commit(),
        device=device_name(device),
        versions=versions(device),
    )


def append(
    benchmark: str,
    case: Mapping[str, Any],
    metrics: Mapping[str, float],
    peer: str,
    *,
    path: Union[str, Path] = RECORDS,
    device: Optional[Union[str, "torch.device"]] = None,
    **given: Any,
) -> dict:
    """Validate one record and append it to ``path`` as one line; return it. ``date``, ``commit``,
    ``device`` and ``versions`` are collected (:func:`environment` on ``device``) unless given."""
    unknown = sorted(set(given) - {"date", "commit", "device_name", "versions"})
    if unknown:
        raise TypeError(
            f"append() got unexpected keyword argument(s) {unknown}; it takes date=, commit=, device_name=, versions="
        )
    env = {}
    if not {"date", "commit", "device_name", "versions"} <= set(given):
        env = environment(device)
    if "device_name" in given:
        env["device"] = given.pop("device_name")
    record = validate(env | given | dict(benchmark=benchmark, case=dict(case), metrics=dict(metrics), peer=peer))
    with open(path, "a") as f:
        f.write(json.dumps(record, allow_nan=False) + "\n")
    return record


def read(path: Union[str, Path] = RECORDS, *, benchmark: Optional[str] = None) -> list[dict]:
    """Every record of ``path`` (of ``benchmark`` only, if given), each validated; a malformed line
    raises ``ValueError`` naming the file and line."""
    out = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = validate(json.loads(line))
            except ValueError as e:
                raise ValueError(f"{path}:{number}: {e}") from None
            if benchmark is None or record["benchmark"] == benchmark:
                out.append(record)
    return out


def comparison_key(record: Mapping[str, Any]) -> tuple:
    """The records one comparison holds share this: benchmark, date, commit, device and case."""
    return (
        record["benchmark"],
        record["date"],
        record["commit"],
        record["device"],
        json.dumps(record["case"], sort_keys=True),
    )


def ratios(
    rows: Iterable[Mapping[str, Any]],
    metric: str,
    baseline: Union[str, Sequence[str]],
    best: Callable[..., Any] = max,
    by: Optional[str] = None,
) -> list[tuple[dict, Optional[float]]]:
    """Each record of ``rows`` with ``metric`` over the baseline's ``metric`` in its comparison
    (:func:`comparison_key`). ``baseline`` names one peer, or several, of which the baseline is the
    record with the ``best`` (``max`` or ``min``) value of ``by`` (default ``metric``): e.g. the
    fastest peer's peak memory is ``ratios(rows, "peak_gib", peers, by="tokens_per_s")``. The ratio
    is None where the comparison has no baseline or the record lacks ``metric``."""
    rows = list(rows)
    by = by or metric
    names = {baseline} if isinstance(baseline, str) else set(baseline)
    if not names:
        raise ValueError("ratios(): baseline must name at least one peer")
    candidates: dict[tuple, list[Mapping[str, Any]]] = {}
    for r in rows:
        if r["peer"] in names and metric in r["metrics"] and by in r["metrics"]:
            candidates.setdefault(comparison_key(r), []).append(r)
    out = []
    for r in rows:
        found = candidates.get(comparison_key(r))
        value = best(found, key=lambda b: b["metrics"][by])["metrics"][metric] if found else None
        ok = value is not None and value != 0 and metric in r["metrics"]
        out.append((dict(r), r["metrics"][metric] / value if ok else None))
    return out
