"""Packaging: a built wheel works without Coq or a source checkout, and the repository shadows no package.

The top-level ``kernels/`` folder once was the package itself and hid Hugging Face's ``kernels``
package (which transformers >= 5.2x imports) whenever the repository root was on ``sys.path``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_no_top_level_package_shadows_another():
    """No ``__init__.py`` in a top-level folder but ``ojas_ref``: ``kernels`` from the root is not ours."""
    shadowing = sorted(p.parent.name for p in REPO.glob("*/__init__.py") if p.parent.name != "ojas_ref")
    assert shadowing == [], f"top-level folders that are packages: {shadowing}"
    origin = _run(
        [
            sys.executable,
            "-c",
            "import importlib.util as u; s = u.find_spec('kernels'); print(s.origin if s else 'absent')",
        ],
        cwd=REPO,
    ).strip()
    assert not origin.startswith(str(REPO / "kernels")), origin


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    _run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(REPO)],
        cwd=out,
    )
    (built,) = out.glob("ojas_ref-*.whl")
    return built


def test_wheel_holds_the_library_and_the_license_only(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert {"ojas_ref", "ojas_kernels"} <= tops
    assert not any(top in tops for top in ("kernels", "rocq", "extraction", "tests", "benchmarks", "proofs"))
    assert any(name.endswith("licenses/LICENSE") for name in names)
    metadata = next(name for name in names if name.endswith(".dist-info/METADATA"))
    assert "License-Expression: Apache-2.0" in zipfile.ZipFile(wheel).read(metadata).decode()


def test_installed_wheel_runs_without_a_checkout(wheel, tmp_path):
    """Installed into an empty folder and run from elsewhere: the primitives and a kernel import and compute."""
    target = tmp_path / "site"
    _run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(target), str(wheel)],
        cwd=tmp_path,
    )
    script = (
        "import torch, ojas_ref, ojas_kernels, torch.nn.functional as F\n"
        "assert ojas_ref.__file__.startswith(%r), ojas_ref.__file__\n"
        "assert ojas_kernels.__file__.startswith(%r), ojas_kernels.__file__\n"
        "torch.manual_seed(0)\n"
        "h, w, y = torch.randn(6, 8, dtype=torch.float64), torch.randn(11, 8, dtype=torch.float64), "
        "torch.randint(0, 11, (6,))\n"
        "torch.testing.assert_close(ojas_ref.linear_cross_entropy(h, w, y), F.cross_entropy(h @ w.T, y))\n"
        "q = torch.randn(1, 2, 5, 4, dtype=torch.float64)\n"
        "torch.testing.assert_close(ojas_ref.attention(q, q, q, is_causal=True), "
        "F.scaled_dot_product_attention(q, q, q, is_causal=True))\n"
        "print('ok')\n"
    ) % (str(target), str(target))
    env = {**os.environ, "PYTHONPATH": str(target)}
    assert _run([sys.executable, "-c", script], cwd=tmp_path, env=env).strip() == "ok"
