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
    assert (launch._SUPPORTED, dispatch._interpret, hasattr(torch._C, "_cuda_getDevice")) == before
    assert "run" not in vars(kernel)
    assert not launch.fast(kernel)._exact and not launch.fast(kernel)._cache
