"""``ojas audit``: which theorem backs each implementation, and does it hold here.

Three steps, with progress shown as they run:

1. proofs: rebuild ``rocq/`` and audit its assumptions where ``coqc`` exists;
   otherwise check the sources against the hashes in ``rocq/MANIFEST.json``;
2. differential check: run every implementation available on this machine on
   a few random inputs and compare it with the oracle extracted from the Coq
   spec, within the tolerance derived from the proved error bounds;
3. a table: implementation <-> theorem <-> proof status <-> differential status;
   on a CUDA machine, then, whether this device's record of ``ojas verify-device`` exists and
   every premise the float theorems take about the device holds in it: without a record the
   audit is INCOMPLETE, with a failed premise it FAILS, and either way it says that the float
   error bounds are not proved on this device.

It reads the Coq sources and the manifest of a source checkout; from an install that
has none it exits with status 2 and says what it needs (``proof_audit.require_sources``).
A check that cannot run here (a Triton kernel without CUDA or ``TRITON_INTERPRET=1``, every
differential check without the oracle) is skipped and named: the audit then ends with
``audit: INCOMPLETE`` and exit status 3, or 0 with ``allow_skip`` (``--allow-skip``); it says
``audit: OK`` only when every check ran and held.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import time
from dataclasses import dataclass, replace
from typing import Callable

import torch

from ojas_ref.functional.dispatch import use_impl
from ojas_ref.verification import proof_audit as pa

CITATION_RE = re.compile(r"\bOjas(?:\.[A-Za-z_][A-Za-z0-9_']*)+")

#: Differential cases (``ojas_ref.verification.attention_check.make_case`` arguments): causal GQA with
#: Sq != Sk, a window, scores near 1e4, one query row, bf16, a key-padding bool mask with
#: is_causal, a GQA mask with a fully masked row (the oracle takes bool masks only); the
#: first three are --quick.
ATTENTION_CASES = [
    dict(dtype=torch.float32, kv_heads=2, group=2, sq=37, sk=53, e=16, ev=16, is_causal=True),
    dict(dtype=torch.float32, batch=2, sq=33, sk=33, e=32, ev=8, window=7, is_causal=True),
    dict(dtype=torch.float32, sq=19, sk=40, e=16, ev=16, regime="large"),
    dict(dtype=torch.float32, sq=1, sk=70, e=64, ev=32, regime="peaked"),
    dict(dtype=torch.bfloat16, kv_heads=1, group=3, sq=24, sk=24, e=16, ev=16, is_causal=True),
    dict(dtype=torch.float32, sq=20, sk=20, e=16, ev=8, window=2),
    dict(dtype=torch.float32, batch=2, sq=21, sk=21, e=16, ev=16, is_causal=True, mask="bool", mask_shape="keys"),
    dict(
        dtype=torch.float32,
        kv_heads=2,
        group=2,
        sq=18,
        sk=25,
        e=16,
        ev=8,
        mask="bool",
        mask_shape="batch",
        dead_rows=(3,),
    ),
]


#: Linear cross-entropy cases (``ojas_ref.verification.linear_cross_entropy_check.make_problem``):
#: every reduction, smoothing, z-loss, softcap, V not a multiple of the vocabulary chunk.
LINEAR_CROSS_ENTROPY_CASES = [
    dict(shape=(9,), D=5, V=13, reduction="mean"),
    dict(shape=(2, 4), D=4, V=11, reduction="none", eps=0.1, lam=1e-2),
    dict(shape=(7,), D=6, V=17, reduction="sum", cap=5.0, ignored=0.5),
    dict(shape=(12,), D=8, V=40, reduction="mean", eps=0.1, chunks=(5, 16), bias=False),
]


#: Reversible coupling cases (``ojas_ref.verification.reversible_check.make_problem``): float stacks
#: (forward, inverse, gradients) and the exact fixed-point mode (bit-exact inverse).
REVERSIBLE_CASES = [
    dict(depth=3, d=3, hidden=5, rows=2),
    dict(depth=2, d=4, hidden=6, rows=1, fraction_bits=20),
    dict(depth=6, d=2, hidden=4, rows=3, weight_scale=2.0),
    dict(depth=5, d=3, hidden=5, rows=2, weight_scale=4.0, fraction_bits=24),
]


@dataclass
class Implementation:
    name: str
    function: Callable | None  # None when it cannot be imported here
    cases: list[dict]
    check: Callable[[dict, int], list[str]] | None  # (case, seed) -> mismatches with the oracle
    unavailable: str | None = None  # why it cannot run on this machine


def _say(msg: str) -> None:
    print(msg, flush=True)


def cited_theorems(function: Callable) -> list[str]:
    """The Coq modules or theorems a function's docstring names (``Ojas.X.Y``); for a
    class, its docstring and those of the methods it defines."""
    docs = [function.__doc__ or ""]
    if isinstance(function, type):
        docs += [m.__doc__ or "" for m in vars(function).values() if callable(m)]
    return sorted({name for doc in docs for name in CITATION_RE.findall(doc)})


def _attention_check(impl: str) -> Callable[[dict, int], list[str]]:
    def check(params: dict, seed: int) -> list[str]:
        from ojas_ref.verification.attention_check import make_case, oracle_mismatches

        case = make_case(seed, **params)
        if impl == "triton" and torch.cuda.is_available():
            case = replace(case, **{f: getattr(case, f).cuda() for f in ("query", "key", "value", "grad_out")})
        return oracle_mismatches(case, impl=impl)

    return check


def _linear_cross_entropy_check(impl: str) -> Callable[[dict, int], list[str]]:
    def check(params: dict, seed: int) -> list[str]:
        from ojas_ref.verification.linear_cross_entropy_check import make_problem, oracle_mismatches

        device = "cuda" if impl == "triton" and torch.cuda.is_available() else "cpu"
        with use_impl(linear_cross_entropy=impl):
            return oracle_mismatches(make_problem(seed, **params), device=device)

    return check


def _reversible_check(params: dict, seed: int) -> list[str]:
    from ojas_ref.verification.reversible_check import make_problem, oracle_mismatches

    return oracle_mismatches(make_problem(seed, **params))


def _in_backward_check(params: dict, seed: int) -> list[str]:
    from ojas_ref.verification.in_backward_check import make_case, oracle_mismatches

    return oracle_mismatches(make_case(seed, **params))


def implementations() -> list[Implementation]:
    """The implementations of this library, and whether each can run here."""
    from ojas_ref.functional.attention import attention
    from ojas_ref.functional.linear_cross_entropy import linear_cross_entropy
    from ojas_ref.optim.in_backward import InBackwardOptimizer
    from ojas_ref.nn.reversible import ReversibleSequence
    from ojas_ref.verification.in_backward_check import CASES as IN_BACKWARD_CASES

    impls = [
        Implementation(
            "ojas_ref.attention (PyTorch reference)", attention, ATTENTION_CASES, _attention_check("reference")
        ),
        Implementation(
            "ojas_ref.linear_cross_entropy (PyTorch reference)",
            linear_cross_entropy,
            LINEAR_CROSS_ENTROPY_CASES,
            _linear_cross_entropy_check("reference"),
        ),
        Implementation("ojas_ref.ReversibleSequence", ReversibleSequence, REVERSIBLE_CASES, _reversible_check),
        Implementation("ojas_ref.InBackwardOptimizer", InBackwardOptimizer, IN_BACKWARD_CASES, _in_backward_check),
    ]
    why = None
    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        why = "no CUDA device (set TRITON_INTERPRET=1 to run it on the CPU)"
    for name, module, function, cases, check in (
        (
            "ojas_kernels.attention (Triton)",
            "ojas_kernels.attention",
            "flash_attention",
            ATTENTION_CASES,
            _attention_check("triton"),
        ),
        (
            "ojas_kernels.linear_cross_entropy (Triton)",
            "ojas_kernels.linear_cross_entropy",
            "linear_cross_entropy",
            LINEAR_CROSS_ENTROPY_CASES,
            _linear_cross_entropy_check("triton"),
        ),
    ):
        try:
            kernel = getattr(importlib.import_module(module), function)
        except ImportError as err:  # triton missing
            impls.append(Implementation(name, None, [], None, f"cannot import: {err}"))
        else:
            impls.append(Implementation(name, kernel, cases, check, why))
    return impls


def proof_status(log=_say) -> tuple[dict[str, str], bool]:
    """Status of every theorem and module: rebuilt and audited, or hash-checked."""
    if pa.coq_available():
        log("[1/3] proofs: coqc found: rebuilding rocq/ and running Print Assumptions")
        try:
            data = pa.run_audit(log=lambda m: log(f"      {m}"))
        except pa.ProofAuditError as err:
            log(f"      FAILED: {err}")
            return {}, False
        how = "proved, audited"
        saved = data
        if not pa.manifest_matches(data):
            log("      rocq/MANIFEST.json is out of date: run `ojas proofs --write-manifest` and commit it")
            return {}, False
    else:
        log("[1/3] proofs: coqc not found: checking sources against rocq/MANIFEST.json")
        saved = pa.load_manifest()
        stale = pa.stale_files(saved)
        if stale:
            log("      sources differ from the manifest: " + ", ".join(stale))
            return {}, False
        how = "hash matches manifest"
    status: dict[str, str] = {}
    for th in saved["theorems"]:
        status[th["name"]] = how
        status.setdefault(th["name"].rsplit(".", 1)[0], how)
    for name in saved["lemmas"]:
        status.setdefault(name, "lemma, used by the theorems")
    log(f"      {len(saved['theorems'])} exported theorems: {how}")
    return status, True


def _describe(params: dict) -> str:
    return " ".join(f"{k}={str(v).replace('torch.', '')}" for k, v in params.items())


def differential_status(impls: list[Implementation], quick: bool, seed: int, log=_say) -> dict[str, str]:
    """Run each available implementation against the oracle; 'pass', 'FAIL: ...' or 'skipped: ...'."""
    log("[2/3] differential check against the oracle extracted from rocq/")
    results: dict[str, str] = {}
    for impl in impls:
        if impl.unavailable:
            results[impl.name] = f"skipped: {impl.unavailable}"
            log(f"      {impl.name}: {results[impl.name]}")
            continue
        cases = impl.cases[:2] if quick else impl.cases
        t0 = time.perf_counter()
        failures = []
        for k, params in enumerate(cases, 1):
            log(f"      {impl.name}: case {k}/{len(cases)}: {_describe(params)}")
            problems = impl.check(params, seed + k)
            if problems:
                failures.append(f"case {k}: {problems[0]}")
        took = time.perf_counter() - t0
        results[impl.name] = (
            f"FAIL ({len(failures)}/{len(cases)}) {failures[0]}"
            if failures
            else f"pass ({len(cases)} cases, {took:.1f} s)"
        )
    return results


def ensure_oracle(log=_say) -> str | None:
    """Build the oracle if it is missing and the tools exist; return why not, or None."""
    from ojas_ref.verification.oracle import oracle_binary

    try:
        oracle_binary()
        return None
    except RuntimeError:
        pass
    missing = pa.missing_tools(pa.ORACLE_TOOLS)
    if missing:
        return f"the oracle is not built and {', '.join(missing)} (needed to build it) not found (run scripts/setup.sh)"
    log("      building the oracle: make -C extraction")
    proc = subprocess.run(["make", "-s", "-C", str(pa.REPO_ROOT / "extraction")], capture_output=True, text=True)
    return None if proc.returncode == 0 else f"oracle build failed: {proc.stderr[-500:]}"


def device_premise_status() -> tuple[str, str]:
    """("n/a" | "pass" | "missing" | "FAIL", what to say) for this machine's device premises: on
    a CUDA machine, whether its record of ``ojas verify-device`` (device_premises.load_record: this
    GPU, driver, CUDA, torch and Triton versions) exists and every premise in it holds."""
    if not torch.cuda.is_available():
        return "n/a", "no CUDA device here: the float bounds' device premises are about a GPU (checked there)"
    from ojas_ref.verification import device_premises as dp

    record = dp.load_record()
    key = dp.device_key()
    where = f"{key['gpu']} (driver {key['driver']}, CUDA {key['cuda']}, torch {key['torch']}, Triton {key['triton']})"
    if record is None:
        return "missing", (
            f"no record of the device premises for {where} in {dp.cache_dir()}: run `ojas verify-device`; "
            "until then the float error bounds are NOT proved on this device"
        )
    bad = dp.failed(record)
    if bad:
        return "FAIL", (
            f"the device premises of {where} do not all hold ({', '.join(bad)}; record of {record['date']}): "
            "the float error bounds are NOT proved on this device"
        )
    n = len(record["premises"])
    return "pass", f"{n} device premises hold on {where} (record of {record['date']}, {record['mode']})"


def print_table(rows: list[tuple[str, str, str, str]]) -> None:
    header = ("implementation", "theorem", "proof", "vs oracle")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    line = "  ".join("{:<%d}" % w for w in widths)
    _say(line.format(*header))
    _say(line.format(*("-" * w for w in widths)))
    for r in rows:
        _say(line.format(*r))


def run(seed: int = 0, quick: bool = False, allow_skip: bool = False) -> int:
    """``ojas audit``; returns the process exit code: 0 when every check ran and held, 1 when
    something does not hold, 2 when the audit cannot run here (no source checkout: the
    message says what it needs), 3 when every check that ran held but some were skipped
    (named; 0 with ``allow_skip``)."""
    try:
        pa.require_sources()
    except pa.SourcesMissing as err:
        _say(f"audit: cannot run: {err}")
        return 2
    statuses, proofs_ok = proof_status()
    impls = implementations()
    why_no_oracle = ensure_oracle()
    if why_no_oracle:
        _say(f"[2/3] differential check skipped: {why_no_oracle}")
        diff = {impl.name: f"skipped: {why_no_oracle}" for impl in impls}
    else:
        diff = differential_status(impls, quick=quick, seed=seed)
    _say("[3/3] theorem <-> implementation")
    rows = []
    ok = proofs_ok and not any(v.startswith("FAIL") for v in diff.values())
    for impl in impls:
        cited = cited_theorems(impl.function) if impl.function else ["(not importable)"]
        if not cited:
            cited, ok = ["(no theorem cited in its docstring)"], False
        for k, name in enumerate(cited):
            proof = statuses.get(name, "NOT FOUND" if proofs_ok else "unchecked")
            if proof == "NOT FOUND" and impl.function:
                ok = False
            rows.append((impl.name if k == 0 else "", name, proof, diff[impl.name] if k == 0 else ""))
    print_table(rows)
    device, device_note = device_premise_status()
    _say(f"device premises: {device_note}")
    ok = ok and device != "FAIL"
    if not ok:
        _say("audit: PROBLEMS FOUND (see above)")
        return 1
    skipped = [f"{name} ({why.removeprefix('skipped: ')})" for name, why in diff.items() if why.startswith("skipped")]
    if not skipped and device != "missing":
        _say("audit: OK")
        return 0
    verdict = "INCOMPLETE (allowed by --allow-skip)" if allow_skip else "INCOMPLETE"
    parts = [f"{len(skipped)} of {len(diff)} differential checks were skipped: {'; '.join(skipped)}"] if skipped else []
    if device == "missing":
        parts.append("the device premises were not checked (run `ojas verify-device`)")
    _say(f"audit: {verdict}: every check that ran held; {'; '.join(parts)}")
    return 0 if allow_skip else 3
