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
    script = ("import sys, ojas_ref.tools.cli as cli\n"
              f"assert cli.__file__.startswith({str(site)!r}), cli.__file__\n"
              "sys.stdout.write('rc=%d %d\\n' % (cli.main(['audit', '--quick']), cli.main(['proofs'])))\n")
    env = {**os.environ, "PYTHONPATH": str(site)}
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
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
