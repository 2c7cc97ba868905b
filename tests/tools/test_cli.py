"""The ``ojas`` command: ``--version``, ``--help`` as a reader sees it, ``ojas train --help``."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys

import pytest

import ojas_ref
from ojas_ref.tools.cli import main


def test_version_is_the_package_metadata(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"ojas-ref {ojas_ref.__version__}\n"
    assert ojas_ref.__version__ == importlib.metadata.version("ojas-ref")


def test_version_without_metadata_is_marked_unknown() -> None:
    """A source tree imported without being installed: no metadata, a version that says so."""
    script = (
        "import importlib.metadata as m\n"
        "def version(name):\n"
        "    raise m.PackageNotFoundError(name)\n"
        "m.version = version\n"
        "import ojas_ref\n"
        "print(ojas_ref.__version__)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout == "0+unknown\n"


def test_help_reads_as_text_and_names_train_the_main_job(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "``" not in out and "`" not in out
    assert "ojas train    train a small Llama from scratch on the CPU (or a GPU): the main job" in out
    assert out.count("main job") == 1
    for command in ("train", "plan", "audit", "rocq", "proofs"):
        assert f"ojas {command}" in out


def test_train_help_prints_each_default_once_and_the_exit_status(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps to the terminal's width
    options = out[out.index("options:") :]
    data_dir = options[options.index("--data-dir DATA_DIR") : options.index("--data-glob DATA_GLOB")]
    assert data_dir.count("default") == 1 and "(default: None)" not in out
    assert "--threads THREADS intra-op CPU threads" in out
    assert "exit status: 0: the run finished" in out and "1: the training diverged" in out
    assert "2: a bad setting" in out and "3: a file of the run could not be written" in out


@pytest.mark.parametrize("command", ["rocq", "proofs"])
def test_rocq_failing_audit_exits_1(monkeypatch: pytest.MonkeyPatch, command: str) -> None:
    """``ojas rocq`` (and ``ojas proofs``, its former name) runs the audit with its default, which fails on
    an exported theorem with premises and no witness; a failing audit exits 1."""
    from ojas_ref.verification import proof_audit as pa

    seen = []

    def fake_audit(require_witnesses=None):
        seen.append(require_witnesses)
        raise pa.ProofAuditError("Ojas.X.t has premises and no witness")

    monkeypatch.setattr(pa, "run_audit", fake_audit)
    assert main([command]) == 1
    assert seen == [None]


def test_proofs_is_the_deprecated_name_of_rocq(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """``ojas proofs`` (0.1's name; ``proofs/`` is the Lean folder) says it is deprecated, then runs ``ojas rocq``;
    ``ojas --help`` lists rocq as the command."""
    from ojas_ref.verification import proof_audit as pa

    def missing(require_witnesses=None):
        raise pa.SourcesMissing("no rocq/ here")

    monkeypatch.setattr(pa, "run_audit", missing)
    assert main(["rocq"]) == 2
    rocq = capsys.readouterr().err
    assert rocq == "ojas rocq: cannot run: no rocq/ here\n"
    assert main(["proofs"]) == 2
    assert capsys.readouterr().err == (
        "ojas proofs is deprecated and will be removed in the next release; use ojas rocq (it audits rocq/)\n" + rocq
    )
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "{train,plan,audit,rocq,verify-device}" in out and "ojas rocq     rebuild rocq/" in out
