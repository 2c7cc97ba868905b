"""benchmarks/bench_host_overhead.py on the CPU: the launches replaced by no-ops, a quick run that
writes records, and the harness leaving the kernels as it found them."""

import pytest
import torch

pytest.importorskip("triton")

from benchmarks import bench_host_overhead as bench, records  # noqa: E402


def test_quick_run_writes_one_record_per_op_peer_and_pass(tmp_path):
    path = tmp_path / "records.jsonl"
    rows = bench.main(["--quick", "--calls", "3", "--repeats", "1", "--records", str(path)])
    read = records.read(path, benchmark="bench_host_overhead")
    assert [(r["case"], r["metrics"], r["peer"]) for r in read] == [(r["case"], r["metrics"], r["peer"]) for r in rows]
    got = {(r["case"]["op"], r["case"]["pass"], r["peer"]) for r in read}
    peers = ("ojas", "ojas-public", "ojas-op")  # torch's CPU kernels would run: left out on the CPU
    assert got == {(op, p, peer) for op in bench.OPS for p in bench.PASSES for peer in peers}
    assert len(read) == len(got)
    for r in read:
        assert r["metrics"]["us_per_call"] > 0
        assert r["case"]["launch"] == "no-op" and r["case"]["seq"] == bench.CPU_SHAPE.seq


def test_ops_argument_is_checked():
    with pytest.raises(SystemExit):
        bench.main(["--quick", "--ops", "rms_norm,layer_norm"])


def test_no_op_launches_takes_the_cached_launch_path_and_restores_everything():
    from ojas_kernels import launch, rms_norm as kernels
    from ojas_ref.functional import dispatch
    from ojas_ref.functional.rms_norm import fused_rms_norm

    kernel = kernels._rms_norm_fwd_kernel
    before = (launch._SUPPORTED, dispatch._interpret, hasattr(torch._C, "_cuda_getDevice"))
    x, w = torch.randn(4, 8, dtype=torch.bfloat16), torch.randn(8, dtype=torch.bfloat16)
    with bench.no_op_launches():
        for _ in range(3):
            y = fused_rms_norm(x, w, 1e-6, 0.0, False)
        assert y.shape == x.shape
        # the third call found the kernel in the exact cache: the path a CUDA launch takes
        assert len(launch.fast(kernel)._exact) == 1 and len(launch.fast(kernel)._cache) == 1
        assert len(launch.fast(kernel)._keyers[10].compiled) == 1  # and the generated key's cache
    assert (launch._SUPPORTED, dispatch._interpret, hasattr(torch._C, "_cuda_getDevice")) == before
    assert "run" not in vars(kernel)
    assert not launch.fast(kernel)._exact and not launch.fast(kernel)._cache and not launch.fast(kernel)._keyers


def test_report_shows_step_records():
    """report.py's bench_host_overhead section shows a --step record's metrics (us_per_step, phases)."""
    from benchmarks import report

    section = next(s for s in report.SECTIONS if s.benchmark == "bench_host_overhead")
    case = dict(op="step", **{"pass": "train"}, optimizer="adamw_fused", launch="no-op")
    metrics = {"us_per_step": 25360.0, "forward_us": 11646.0, "backward_us": 13803.0, "optimizer_us": 362.0}
    record = dict(
        benchmark="bench_host_overhead",
        date="2026-12-07",
        commit="abc1234",
        device="cpu",
        versions={"torch": "2"},
        case=case,
        metrics=metrics,
    )
    lines = report.table(section, [dict(record, peer="ojas")])
    head = next(line for line in lines if line.startswith("| peer"))
    assert all(m in head for m in metrics) and "us_per_call" not in head
    assert report.fmt_metric("us_per_step", 25360.0) in lines[-2]
