"""benchmarks/bench_peers.py on the CPU: settings, the modes' set-up, and a quick run that writes records."""

import importlib.util

import pytest
import torch

from benchmarks import bench_peers, records
from benchmarks.bench_optimize_model import Runner
from ojas_ref import InBackwardOptimizer, MemoryRecipe


def test_settings_parse_and_refuse():
    assert bench_peers.Setting.parse("fp32-autocast-adamw-b1") == bench_peers.Setting("fp32", True, "adamw", 1, 32000)
    assert bench_peers.Setting.parse("bf16-sgd-b4-v128256") == bench_peers.Setting("bf16", False, "sgd", 4, 128256)
    assert bench_peers.Setting.parse("bf16-adamw_fused-b1").optimizer == "adamw_fused"
    for name in bench_peers.SETTINGS:
        bench_peers.Setting.parse(name)
    for bad in ("bf16-adam-b1", "bf16-adamw", "bf16-adamw-b0", "fp16-sgd-b1", "bf16-adamw-b1-v"):
        with pytest.raises(ValueError, match="--settings: .* is not <bf16|fp32>"):
            bench_peers.Setting.parse(bad)
    with pytest.raises(ValueError, match="-autocast .* is for fp32 weights"):
        bench_peers.Setting.parse("bf16-autocast-adamw-b1")


def test_modes_are_set_up_as_issue_29_says():
    cpu = torch.device("cpu")
    ojas = bench_peers.runner("ojas", bench_peers.Setting.parse("bf16-adamw-b1"), bench_peers.QUICK, cpu)
    assert isinstance(ojas.opt, InBackwardOptimizer) and ojas.opt.overlap and ojas.opt.bucket_cap_mb == 256
    ckpt = bench_peers.runner("ojas+ckpt", bench_peers.Setting.parse("bf16-sgd-b1"), bench_peers.QUICK, cpu)
    assert isinstance(ckpt.opt, InBackwardOptimizer) and not ckpt.opt.overlap and ckpt.opt.bucket_cap_mb == 64
    hf = bench_peers.runner("hf", bench_peers.Setting.parse("fp32-autocast-adamw-b1"), bench_peers.QUICK, cpu)
    assert isinstance(hf.opt, torch.optim.AdamW)
    assert all(p.dtype == torch.float32 for p in hf.model.parameters())
    ids = hf.batches[0]
    assert hf.model(input_ids=ids).logits.dtype == torch.bfloat16  # the forward under bf16 autocast
    fused = bench_peers.runner("ojas", bench_peers.Setting.parse("bf16-adamw_fused-b1"), bench_peers.QUICK, cpu)
    assert fused.opt.param_groups[0]["fused"] is True  # Hugging Face Trainer's default AdamW
    before = [p.detach().clone() for p in fused.model.parameters()]
    fused.model(input_ids=fused.batches[0], labels=fused.batches[0]).loss.backward()
    fused.opt.step()
    assert any(not torch.equal(p, q) for p, q in zip(fused.model.parameters(), before))
    assert bench_peers.unavailable("liger", torch.device("cpu")) is not None
    assert bench_peers.unavailable("hf", torch.device("cpu")) is None


def test_each_mode_is_a_recipe_and_its_peer():
    """The modes' recipes: the peers standard PyTorch (liger+ckpt with Hugging Face's checkpointing),
    ojas every primitive with AdamW in backward; Liger-Kernel's patch and compilation beside them."""
    modes = bench_peers.MODES
    assert bench_peers.OJAS == MemoryRecipe(in_backward=True, overlap=True, bucket_cap_mb=256.0)
    assert modes["ojas"].recipe == modes["ojas+compile"].recipe == bench_peers.OJAS
    assert modes["ojas+ckpt"].recipe == MemoryRecipe(checkpoint=True, in_backward=True)
    assert modes["liger+ckpt"] == bench_peers.Mode(MemoryRecipe.plain(checkpoint=True), liger=True)
    for name in ("hf", "hf+compile", "liger", "liger+compile", "hf+cudagraphs"):
        assert modes[name].recipe == MemoryRecipe.plain(), name
    compiled = {"hf+compile", "liger+compile", "ojas+compile", "hf+cudagraphs", "ojas+cudagraphs"}
    assert {name for name, m in modes.items() if m.compile} == compiled
    graphs = {name for name, m in modes.items() if m.compile_mode == "reduce-overhead"}
    assert graphs == {"hf+cudagraphs", "ojas+cudagraphs"}
    assert modes["ojas+cudagraphs"].recipe == bench_peers.OJAS
    assert bench_peers.unavailable("ojas+cudagraphs", torch.device("cpu")) == "CUDA graphs need CUDA"
    assert {name for name, m in modes.items() if m.liger} == {"liger", "liger+ckpt", "liger+compile"}
    # the recipe as applied (Liger's patch aside, which needs CUDA): liger+ckpt's is Hugging Face's checkpointing
    c, cpu = bench_peers.QUICK, torch.device("cpu")
    ckpt = Runner(c, torch.float32, "sgd", "liger+ckpt", cpu, modes["liger+ckpt"].recipe)
    assert any(getattr(m, "gradient_checkpointing", False) for m in ckpt.model.modules())
    assert isinstance(ckpt.opt, torch.optim.SGD)
    assert ckpt.report is None  # Hugging Face's checkpointing as users run it: optimize_model not called
    ojas = Runner(c, torch.float32, "sgd", "ojas+ckpt", cpu, MemoryRecipe(checkpoint=True))
    assert ojas.report is not None and len(ojas.report.changed) > 1  # the recipe's primitives swapped in


def test_quick_run_on_the_cpu_appends_records(tmp_path, capsys):
    out = tmp_path / "records.jsonl"
    bench_peers.main(
        [
            "--quick",
            "--device",
            "cpu",
            "--modes",
            "hf",
            "ojas",
            "liger",
            "--settings",
            "bf16-sgd-b1",
            "--warmup",
            "1",
            "--steps",
            "2",
            "--out",
            str(out),
            "--timeout",
            "600",
        ]
    )
    rows = records.read(out)
    assert [r["peer"] for r in rows] == ["hf", "ojas"]
    for r in rows:
        assert r["benchmark"] == "bench_peers" and r["device"].startswith("cpu")
        assert r["case"]["layers"] == 2 and r["case"]["optimizer"] == "sgd" and r["case"]["weights"] == "bf16"
        assert r["metrics"]["tokens_per_s"] > 0 and "peak_gib" not in r["metrics"]
    # the same model and batches: the two modes' losses agree to bf16's precision
    assert rows[0]["metrics"]["last_loss"] == pytest.approx(rows[1]["metrics"]["last_loss"], rel=2e-2)
    printed = capsys.readouterr().out
    assert "| bf16-sgd-b1 | hf |" in printed and "| bf16-sgd-b1 | ojas |" in printed
    if importlib.util.find_spec("liger_kernel") is None:
        assert "| bf16-sgd-b1 | liger | liger_kernel is not installed" in printed


def test_profile_summary_helpers():
    """--profile's busy time is the union of the kernels' intervals (overlaps counted once), and each
    kernel falls in the first kind whose pattern matches."""
    assert bench_peers.busy_seconds([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0), (5.5, 5.8)]) == 4.0
    assert bench_peers.busy_seconds([]) == 0.0
    assert bench_peers.kernel_kind("_fwd_kernel") == "attention"
    assert bench_peers.kernel_kind("_bwd_dkdv_kernel") == "attention"
    assert bench_peers.kernel_kind("_rms_norm_fwd_kernel") == "norm/swiglu/rope"  # not attention's _fwd_kernel
    assert bench_peers.kernel_kind("sm90_xmma_gemm_bf16bf16_bf16f32") == "matmul"
    assert bench_peers.kernel_kind("multi_tensor_apply_kernel") == "optimizer"
    assert bench_peers.kernel_kind("triton_poi_fused_add_mul_0") == "other"


def test_profile_counts_kernels_not_the_annotations_on_the_device_timeline():
    from types import SimpleNamespace

    cuda, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU
    kernel = SimpleNamespace(device_type=cuda, is_user_annotation=False, name="_fused_adamw")
    annotation = SimpleNamespace(device_type=cuda, is_user_annotation=True, name="Optimizer.step#AdamW.step")
    host = SimpleNamespace(device_type=cpu, is_user_annotation=False, name="aten::mm")
    assert bench_peers.device_kernels([kernel, annotation, host]) == [kernel]


def test_profile_writes_summary(tmp_path):
    """A quick CPU run with --profile writes each mode's summary (wall, busy, kinds, operator tables)."""
    cpu = torch.device("cpu")
    setting = bench_peers.Setting.parse("bf16-sgd-b1")
    bench_peers.child("hf", setting, True, cpu, 0, 1, tmp_path / "p.txt")
    text = (tmp_path / "p.txt").read_text()
    assert "wall per step" in text and "kernels per step" in text and "Self CPU" in text
