"""Check the Lean files under proofs/ with a bare `lean` binary, standing in for `lake build`.

Usage: python proofs/build.py [--lean PATH] [--out DIR]

Every module under proofs/Proofs/ (and the root proofs/Proofs.lean) is compiled in dependency
order (`lean --deps` gives each file's imports) with `lean FILE -o OUT/Mod.olean`, `LEAN_PATH=OUT`.
The check fails when any `lean` call exits non-zero (a segfault, 139, included), when any output
says a declaration uses `sorry`, or when the axiom audit (`proofs/Proofs/Audit.lean`, compiled
last) reports an axiom outside `ALLOWED_AXIOMS` or a theorem it lists is missing.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent  # proofs/
REPO = ROOT.parent
# The trusted core declares no axiom; an exported theorem may depend on none.
ALLOWED_AXIOMS: frozenset[str] = frozenset()
SORRY_RE = re.compile(r"declaration uses 'sorry'|\bsorryAx\b")
AXIOM_DECL_RE = re.compile(
    r"^[ \t]*(?:@\[[^\]]*\][ \t]*)?(?:private |protected |noncomputable )*(unsafe )?axiom[ \t]+(\S+)", re.M
)


def module_name(path: Path) -> str:
    """`proofs/Proofs/Attention/X.lean` -> `Proofs.Attention.X`."""
    rel = path.relative_to(ROOT).with_suffix("")
    return ".".join(rel.parts)


def sources() -> dict[str, Path]:
    """Every Lean module of the library: proofs/Proofs.lean and proofs/Proofs/**/*.lean."""
    files = [ROOT / "Proofs.lean", *sorted((ROOT / "Proofs").rglob("*.lean"))]
    return {module_name(f): f for f in files}


def run(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)


def deps(lean: str, src: Path, mods: dict[str, Path], out: Path, env: dict[str, str]) -> list[str]:
    """Modules of the library that `src` imports, from `lean --deps` (it prints .olean paths)."""
    res = run([lean, "--deps", str(src.relative_to(ROOT))], env)
    if res.returncode != 0:
        sys.exit(f"lean --deps {src} failed (rc {res.returncode}):\n{res.stdout}{res.stderr}")
    found = []
    for line in res.stdout.split():
        p = Path(line)
        try:
            rel = p.resolve().relative_to(out.resolve())
        except ValueError:
            sys.exit(f"{src} imports {line}, which is outside the library (only proofs/ modules are allowed)")
        name = ".".join(rel.with_suffix("").parts)
        if name not in mods:
            sys.exit(f"{src} imports {name}, which has no source under proofs/")
        found.append(name)
    return found


def topo_order(graph: dict[str, list[str]]) -> list[str]:
    """Depth-first topological order; a cycle is an error."""
    order: list[str] = []
    state: dict[str, int] = {}

    def visit(m: str, stack: list[str]) -> None:
        if state.get(m) == 2:
            return
        if state.get(m) == 1:
            sys.exit("import cycle: " + " -> ".join([*stack, m]))
        state[m] = 1
        for d in graph[m]:
            visit(d, [*stack, m])
        state[m] = 2
        order.append(m)

    for m in sorted(graph):
        visit(m, [])
    return order


def audit(output: str, expected: list[str]) -> list[str]:
    """Problems in the `#print axioms` output of Audit.lean: a listed theorem not reported,
    or reported with an axiom outside ALLOWED_AXIOMS."""
    problems = []
    free = set(re.findall(r"'([^']+)' does not depend on any axioms", output))
    with_ax = {}
    for name, axs in re.findall(r"'([^']+)' depends on axioms: \[([^\]]*)\]", output):
        with_ax[name] = {a.strip() for a in axs.split(",") if a.strip()}
    for name in expected:
        if name in free:
            continue
        if name not in with_ax:
            problems.append(f"{name}: no `#print axioms` answer")
        elif not with_ax[name] <= ALLOWED_AXIOMS:
            problems.append(f"{name} depends on {sorted(with_ax[name] - ALLOWED_AXIOMS)}")
    return problems


def declared_axioms(mods: dict[str, Path]) -> list[str]:
    """Every `axiom` declaration in the sources (`unsafe` ones included): there must be none."""
    return [
        f"{f.relative_to(REPO)}: axiom {name}"
        for f in mods.values()
        for _, name in AXIOM_DECL_RE.findall(f.read_text())
    ]


def audited_names(src: Path) -> list[str]:
    return re.findall(r"^#print axioms (\S+)", src.read_text(), re.M)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lean", default=str(REPO / ".lean" / "bin" / "lean"), help="the lean binary")
    ap.add_argument("--out", default=str(REPO / ".lean" / "build"), help="where the .olean files go")
    args = ap.parse_args()
    lean = str(Path(args.lean).resolve())
    if not Path(lean).is_file():
        sys.exit(f"--lean: no lean binary at {lean} (run scripts/lean.sh setup first)")
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "LEAN_PATH": str(out)}
    t0 = time.monotonic()
    mods = sources()
    extra = declared_axioms(mods)
    if extra:
        print(
            "lean: FAILED axiom declared outside the trusted core (and none is allowed in it):\n  "
            + "\n  ".join(extra),
            flush=True,
        )
        return 1
    for m in mods:  # `lean --deps` resolves `import A.B` only if the folder out/A exists
        out.joinpath(*m.split(".")).parent.mkdir(parents=True, exist_ok=True)
    graph = {m: deps(lean, f, mods, out, env) for m, f in mods.items()}
    order = topo_order(graph)
    print(f"lean: {len(order)} modules, dependency order computed in {time.monotonic() - t0:.1f}s", flush=True)
    audit_out = ""
    for m in order:
        src = mods[m]
        olean = out.joinpath(*m.split(".")).with_suffix(".olean")
        olean.parent.mkdir(parents=True, exist_ok=True)
        t = time.monotonic()
        res = run([lean, str(src.relative_to(ROOT)), "-o", str(olean)], env)
        text = res.stdout + res.stderr
        if res.returncode != 0:
            what = "segfault" if res.returncode in (139, -11) else f"rc {res.returncode}"
            print(text, end="")
            print(f"lean: FAILED {src.relative_to(REPO)} ({what})", flush=True)
            return 1
        if SORRY_RE.search(text):
            print(text, end="")
            print(f"lean: FAILED {src.relative_to(REPO)} uses sorry", flush=True)
            return 1
        if m == "Proofs.Audit":
            audit_out = text
        print(f"lean: checked {src.relative_to(REPO)} ({time.monotonic() - t:.2f}s)", flush=True)
    audit_src = mods.get("Proofs.Audit")
    if audit_src is None:
        print("lean: FAILED no proofs/Proofs/Audit.lean", flush=True)
        return 1
    names = audited_names(audit_src)
    problems = audit(audit_out, names)
    if not names or problems:
        print("lean: FAILED axiom audit:\n  " + "\n  ".join(problems or ["Audit.lean lists no theorem"]))
        return 1
    print(
        f"lean: axiom audit: {len(names)} theorems, no axioms (allowed: {sorted(ALLOWED_AXIOMS) or 'none'}); no sorry",
        flush=True,
    )
    print(f"lean: all {len(order)} modules checked in {time.monotonic() - t0:.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
