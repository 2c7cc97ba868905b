"""benchmarks/bench_fsdp.py: ``--quick`` through torchrun on 2 gloo processes (every dtype, optimizer and
mode has a row, and every row's parameters agree with the one-process run within the benchmark's
tolerance), and that comparison catching a wrong reduction (InBackwardOptimizer stepping SGD with the
sum of the ranks' gradients instead of their mean). A GPU variant runs the same on 2 CUDA devices with NCCL."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import _distributed as D  # noqa: E402  (tests/_distributed.py)
from benchmarks import bench_fsdp
from benchmarks.bench_optimize_model import MODES
from ojas_ref import InBackwardOptimizer, revert_model

pytestmark = pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available()), reason="needs torch.distributed with the gloo backend"
)

ROOT = Path(__file__).resolve().parents[2]
QUICK = ["--quick", "--steps", "3", "--warmup", "1"]
MUTANT = ["--quick", "--steps", "2", "--warmup", "0", "--device", "cpu", "--modes", "ojas"]


def torchrun(device: str, out: Path) -> dict:
    """The benchmark as its docstring launches it; its JSON."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            str(ROOT / "benchmarks" / "bench_fsdp.py"),
            *QUICK,
            "--device",
            device,
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(out.read_text())


def check_rows(report: dict, decisive: tuple[str, ...] = ("float32", "bfloat16")) -> None:
    """Every (dtype, optimizer, mode) once, each ojas row within its tolerance, in the ``decisive`` dtypes
    that tolerance below a bug's size."""
    rows = report["results"]
    assert sorted((r["dtype"], r["optimizer"], r["mode"]) for r in rows) == sorted(
        itertools.product(["float32", "bfloat16"], ["sgd", "adamw"], MODES)
    )
    for r in rows:
        name = f"{r['dtype']} {r['optimizer']} {r['mode']}"
        if r["mode"].startswith("ojas"):
            assert r["ok"] and r["update_rel"] <= r["tolerance"], name
            assert r["decisive"] == (r["tolerance"] < bench_fsdp.DECISIVE_BELOW), name
            assert r["decisive"] or r["dtype"] not in decisive, name
        else:
            assert r["ok"] is None and r["tolerance"] is None, name
        assert len(r["ranks"]) == 2 and r["tokens_per_s"] > 0 and r["single"]["tokens_per_s"] > 0, name
        if r["dtype"] == "float32" and r["mode"].startswith("standard"):  # the split, gathered right: a few
            assert r["update_rel"] < 1e-4, name  # float32 roundings (measured 1.8e-6)
    assert report["env"]["world_size"] == 2 and report["steps"] == 3


def test_quick_on_two_gloo_processes(tmp_path: Path) -> None:
    report = torchrun("cpu", tmp_path / "fsdp.json")
    check_rows(report)
    assert report["env"]["backend"] == "gloo"
    assert all(r["peak"] is None and r["static"] is None for r in report["results"])  # no memory on the CPU


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices")
def test_quick_on_two_gpus(tmp_path: Path) -> None:
    """NCCL, NVLink multicast off; the memory columns filled, weights + state per GPU below one GPU's (the
    tiny model's tensors are a few allocator blocks each: not yet the half of the full-size run)."""
    report = torchrun("cuda", tmp_path / "fsdp.json")
    check_rows(report, decisive=("float32",))  # the Triton kernels' bf16 rounding may set a high floor
    assert report["env"]["backend"] == "nccl" and report["env"]["NCCL_NVLS_ENABLE"] == "0"
    for r in report["results"]:
        assert r["peak"] > 0 and r["static"] > 0 and 0 < r["static_ratio"] < 0.8, r["mode"]


def _summed_rank(rank: int, world: int) -> dict[str, torch.Tensor]:
    """``ojas`` with SGD under FSDP2, InBackwardOptimizer updating each shard with the sum of the ranks'
    gradients (the reduced mean times ``world``) instead of their mean."""
    on_reduced = InBackwardOptimizer._on_reduced

    def summed(self: InBackwardOptimizer, p: torch.Tensor) -> None:
        p.grad.mul_(world)
        on_reduced(self, p)

    InBackwardOptimizer._on_reduced = summed
    args = bench_fsdp.parse(MUTANT)
    ((_, params),) = bench_fsdp.run_modes(
        bench_fsdp.TINY, torch.float32, "sgd", args, torch.device("cpu"), 0, rank, world, sharded=True
    )
    return params


def test_comparison_catches_summed_gradients() -> None:
    """Twice the update: update_rel about 1, beyond every decisive tolerance (DECISIVE_BELOW)."""
    fsdp = D.spawn(_summed_rank)[0]
    args = bench_fsdp.parse(MUTANT)
    initial = bench_fsdp.full_parameters(bench_fsdp.B.build(bench_fsdp.TINY, torch.float32, torch.device("cpu")))
    ((runner, single),) = bench_fsdp.run_modes(
        bench_fsdp.TINY, torch.float32, "sgd", args, torch.device("cpu"), 0, 0, 2, sharded=False
    )
    revert_model(runner.model)  # optimize_model's patch of the Llama module, for the other tests
    diff = bench_fsdp.compare(fsdp, single, initial)
    assert 0.9 < diff["update_rel"] < 1.1 and diff["update_rel"] > bench_fsdp.DECISIVE_BELOW, diff
