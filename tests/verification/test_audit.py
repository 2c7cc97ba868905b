"""Every implementation names, in its docstring, theorems that exist in rocq/MANIFEST.json,
and the manifest matches the Coq sources (hashes), so ``ojas audit`` can vouch for each."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ojas_ref.verification import audit
from ojas_ref.verification import proof_audit as pa


def _known_names() -> set[str]:
    saved = pa.load_manifest()
    theorems = {th["name"] for th in saved["theorems"]}
    return theorems | set(saved["lemmas"]) | {name.rsplit(".", 1)[0] for name in theorems}


@pytest.mark.parametrize("impl", audit.implementations(), ids=lambda impl: impl.name)
def test_implementation_cites_existing_theorems(impl):
    assert impl.function is not None, impl.unavailable
    cited = audit.cited_theorems(impl.function)
    assert cited, f"{impl.name}: its docstring names no Ojas.* theorem"
    missing = [name for name in cited if name not in _known_names()]
    assert not missing, f"{impl.name} cites theorems that do not exist: {missing}"


def test_manifest_matches_the_sources():
    assert pa.stale_files(pa.load_manifest()) == []


def test_audit_without_a_source_checkout_says_what_it_needs(tmp_path):
    """``ojas audit`` / ``ojas proofs`` from an install that is not editable (the package
    copied alone into a site directory, as ``pip install .`` lays it out: no rocq/, no
    extraction/ beside it) exit with status 2 and name what they need, instead of a bare
    ``make`` "No such file or directory" (issue 13 item 8)."""
    site = tmp_path / "site"
    shutil.copytree(Path(audit.__file__).parents[1], site / "ojas_ref", ignore=shutil.ignore_patterns("__pycache__"))
    script = (
        "import sys, ojas_ref.tools.cli as cli\n"
        f"assert cli.__file__.startswith({str(site)!r}), cli.__file__\n"
        "sys.stdout.write('rc=%d %d\\n' % (cli.main(['audit', '--quick']), cli.main(['proofs'])))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "rc=2 2" in out, out
    assert "No such file" not in out and "Traceback" not in out, out
    for needed in ("source checkout", "rocq/", "extraction/", "coqc", "make", "pip install -e ."):
        assert out.count(needed) >= 2, (needed, out)


def test_proofs_name_a_missing_tool(monkeypatch):
    """With the sources present but a tool of the rebuild missing from PATH, ``run_audit``
    says which, instead of failing inside ``make``."""
    real_which = pa.shutil.which
    monkeypatch.setattr(pa.shutil, "which", lambda name: None if name == "make" else real_which(name))
    with pytest.raises(pa.SourcesMissing, match="needs make, not found on PATH"):
        pa.run_audit()


def _cites_a_theorem() -> None:
    """Backed by Ojas.Fake.theorem."""


def _stub_audit(monkeypatch: pytest.MonkeyPatch, skipped: bool, failing: bool = False) -> None:
    """``audit.run`` on two stand-in implementations (one skipped when ``skipped``), the proofs and
    the oracle stubbed: what the verdict says about skipped checks, nothing else."""
    ran = audit.Implementation("ran", _cites_a_theorem, [{}], lambda case, seed: ["differs"] if failing else [])
    other = audit.Implementation(
        "kernel",
        _cites_a_theorem,
        [{}],
        lambda case, seed: [],
        "no CUDA device (set TRITON_INTERPRET=1 to run it on the CPU)" if skipped else None,
    )
    monkeypatch.setattr(audit.pa, "require_sources", lambda: None)
    monkeypatch.setattr(audit, "proof_status", lambda: ({"Ojas.Fake.theorem": "proved, audited"}, True))
    monkeypatch.setattr(audit, "implementations", lambda: [ran, other])
    monkeypatch.setattr(audit, "ensure_oracle", lambda: None)


def test_audit_is_ok_only_when_every_check_ran(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """A skipped check (a Triton kernel without CUDA or TRITON_INTERPRET=1) makes the audit
    INCOMPLETE, exit 3, naming it; --allow-skip exits 0 and still says INCOMPLETE."""
    _stub_audit(monkeypatch, skipped=False)
    assert audit.run() == 0
    assert capsys.readouterr().out.splitlines()[-1] == "audit: OK"
    _stub_audit(monkeypatch, skipped=True)
    assert audit.run() == 3
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == (
        "audit: INCOMPLETE: every check that ran held; 1 of 2 differential checks were skipped: kernel "
        "(no CUDA device (set TRITON_INTERPRET=1 to run it on the CPU))"
    )
    assert audit.run(allow_skip=True) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("audit: INCOMPLETE (allowed by --allow-skip): ") and "OK" not in last
    _stub_audit(monkeypatch, skipped=True, failing=True)
    assert audit.run(allow_skip=True) == 1  # a failure is a failure, skipped checks or not
    assert capsys.readouterr().out.splitlines()[-1] == "audit: PROBLEMS FOUND (see above)"


def test_cli_audit_allow_skip(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    from ojas_ref.tools.cli import main

    _stub_audit(monkeypatch, skipped=True)
    assert main(["audit", "--quick"]) == 3
    assert main(["audit", "--quick", "--allow-skip"]) == 0
    assert "INCOMPLETE" in capsys.readouterr().out
