"""ojas_ref/tools/memory_timeline.py: the events of one step come in the step's order (layers
forward, the head, the backward in reverse, a checkpointed layer's recomputation), the peak of
each interval is what the memory function reports, and the plot is written."""

from __future__ import annotations

import pytest
import torch
import transformers

from ojas_ref.tools import plan as P
from ojas_ref.tools.memory_timeline import Event, default_modules, plot_timeline, record

transformers.logging.set_verbosity_error()


def tiny_llama(layers: int = 3) -> transformers.LlamaForCausalLM:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=16,
    )
    return transformers.LlamaForCausalLM(config)


class Counter:
    """A memory function: allocated = calls so far, peak = twice that (a value the test can check)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> tuple[int, int]:
        self.calls += 1
        return self.calls, 2 * self.calls


def one_step(model: torch.nn.Module):
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 64, (1, 8), generator=torch.Generator().manual_seed(1))

    def step() -> None:
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()

    return step


def labels(events: list[Event]) -> list[str]:
    return [e.label for e in events]


def test_events_follow_the_step():
    model = tiny_llama()
    counter = Counter()
    events = record(one_step(model), default_modules(model), counter)
    names = [f"model.layers.{i}" for i in range(3)] + ["lm_head"]
    blocks = {n: [n] + ([f"{n}.self_attn", f"{n}.mlp"] if n != "lm_head" else []) for n in names}
    forward = [
        e
        for n in names
        for e in (
            [f"forward {n}"]
            + [f"{kind} {b}" for b in blocks[n][1:] for kind in ("forward", "forward end")]
            + [f"forward end {n}"]
        )
    ]
    assert labels(events)[: len(forward)] == forward
    order = labels(events)
    for n in names:  # each module's backward begins (its output's gradient) before it ends (its input's)
        assert len(forward) <= order.index(f"backward {n}") < order.index(f"backward end {n}")
    starts = [order.index(f"backward {n}") for n in names]
    assert starts == sorted(starts, reverse=True)  # the head first, then the layers from the last
    assert labels(events)[-1] == "step"
    assert [(e.allocated, e.peak) for e in events] == [(k, 2 * k) for k in range(2, len(events) + 2)]
    assert all(not h for m in model.modules() for h in (m._forward_hooks, m._forward_pre_hooks))


def test_checkpointed_layers_recompute_in_the_backward():
    model = tiny_llama()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    events = record(one_step(model), default_modules(model), Counter())
    order = labels(events)
    assert order.count("forward model.layers.1") == 1  # the layer's hooks run once (its forward is checkpointed)
    assert order.count("forward model.layers.1.mlp") == 2  # its blocks run again: the recomputation
    recompute = order.index("forward model.layers.1.mlp", order.index("forward end lm_head"))
    assert order.index("backward model.layers.2") < recompute < order.index("backward end model.layers.1")


def test_modules_are_required_and_hooks_removed_on_error():
    with pytest.raises(ValueError, match="no decoder layers"):
        default_modules(torch.nn.Sequential(torch.nn.Linear(2, 2)))
    model = tiny_llama(1)

    def failing() -> None:
        model(input_ids=torch.zeros(1, 4, dtype=torch.long))
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        record(failing, default_modules(model), Counter())
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_plot_is_written(tmp_path):
    model = tiny_llama()
    events = record(one_step(model), default_modules(model), Counter())
    plan = P.plan(P.Model.from_module(model), P.Setting(dtype=torch.float32, optimizer="sgd", seq=8))
    fig = plot_timeline(events, tmp_path / "timeline.png", plan)
    assert (tmp_path / "timeline.png").stat().st_size > 10_000
    assert len(fig.axes[0].lines) == 1 + 1 + len(plan.phases)  # peak, allocated, one line per phase
    with pytest.raises(ValueError, match="must end in .png"):
        plot_timeline(events, tmp_path / "timeline.svg")
    with pytest.raises(ValueError, match="events is empty"):
        plot_timeline([], tmp_path / "t.png")


def test_bench_quick_writes_the_plot_and_events(tmp_path):
    from benchmarks import bench_memory_timeline

    result = bench_memory_timeline.main(["--quick", "--out", str(tmp_path), "--mode", "+offload"])
    assert (tmp_path / "timeline_fp32_sgd_offload.png").exists()
    assert result["predicted_peak"] > 0 and result["events"][-1]["label"] == "step"
    assert sum(e["label"].startswith("forward model.layers.0.mlp") for e in result["events"]) == 2  # recomputed
