"""ojas_ref.tools.train / ``ojas train``: a real (tiny) run, bitwise resume, signals, SIGKILL while
writing a state file, divergence, the schedule, the CLI, the memory recipe and release 0.1's names."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from ojas_ref import MemoryRecipe
from ojas_ref.tools import train_state
from ojas_ref.tools import plan
from ojas_ref.tools import train as train_module
from ojas_ref.tools import train_memory
from ojas_ref.tools.cli import main
from ojas_ref.tools.train import TrainConfig, TrainingDiverged, learning_rate, train
from ojas_ref.tools.train_config import DEFAULT_RECIPE


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("token-cache"))


def small(out_dir: Path, cache: str, **changes) -> TrainConfig:
    """The nano preset on 200 kB of the standard library: about 10 ms a step."""
    settings = dict(
        preset="nano",
        seq_len=32,
        batch_size=4,
        steps=12,
        lr=1e-2,
        warmup_steps=3,
        max_bytes=200_000,
        vocab=512,
        cache_dir=cache,
        out_dir=str(out_dir),
        state_every=4,
        keep_states=10,
        progress=False,
    )
    return TrainConfig(**{**settings, **changes})


def recipe(**changes) -> MemoryRecipe:
    """TrainConfig's default recipe (every primitive, AdamW in backward) with ``changes``."""
    return dataclasses.replace(DEFAULT_RECIPE, **changes)


#: the recipe of ``ojas=False`` (release 0.1): no primitive, AdamW in backward
NO_OJAS = MemoryRecipe.plain(in_backward=True)


def _parameters(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _assert_bitwise(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    different = [k for k in a if not torch.equal(a[k], b[k])]
    assert not different, f"parameters differ: {different}"


def _logged_losses(out_dir: Path) -> list[tuple[int, float]]:
    return [(r["step"], r["loss"]) for r in map(json.loads, (out_dir / "train.jsonl").read_text().splitlines())]


def test_schedule_is_a_function_of_the_step() -> None:
    config = TrainConfig(steps=100, warmup_steps=10, lr=1e-3, min_lr_ratio=0.1)
    lrs = [learning_rate(s, config) for s in range(100)]
    assert lrs[:10] == pytest.approx([1e-4 * (s + 1) for s in range(10)])
    assert lrs[10] == pytest.approx(1e-3) and lrs[-1] == pytest.approx(1e-4)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))
    assert lrs[55] == pytest.approx(1e-4 + 0.9e-3 * 0.5 * (1 + math.cos(math.pi * 45 / 89)))
    assert [learning_rate(s, config) for s in range(100)] == lrs  # no state: a resume cannot compound it
    short = TrainConfig(steps=5, warmup_steps=50, lr=1e-3)  # all warmup
    assert [learning_rate(s, short) for s in range(5)] == pytest.approx([2e-5 * (s + 1) for s in range(5)])


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"preset": "huge"}, "preset"),
        ({"steps": 0}, "steps"),
        ({"lr": -1.0}, "lr"),
        ({"dtype": "fp8"}, "dtype"),
        ({"warmup_steps": -1}, "warmup_steps"),
        ({"stop_after": 11, "steps": 10, "warmup_steps": 1}, "stop_after"),
        ({"max_grad_norm": float("nan")}, "max_grad_norm"),
        ({"accumulation_steps": 0}, "accumulation_steps"),
    ],
)
def test_bad_setting_names_the_field(changes: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        TrainConfig(**changes)


def test_loss_falls_and_records(tmp_path: Path, cache: str) -> None:
    result = train(small(tmp_path, cache, steps=60, state_every=30))
    losses = [loss for _, loss in result.losses]
    assert [s for s, _ in result.losses] == list(range(1, 61)) and result.step == 60 and result.stopped is None
    assert abs(losses[0] - math.log(512)) < 0.3  # starts at chance
    assert sum(losses[-10:]) / 10 < losses[0] - 0.6  # and learns
    assert _logged_losses(tmp_path) == result.losses
    record = json.loads((tmp_path / "train.jsonl").read_text().splitlines()[0])
    assert {"lr", "tokens_per_s", "peak_memory_bytes", "tokens"} <= record.keys() and record["tokens"] == 4 * 32
    assert result.plot_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for _, p in train_state.list_states(tmp_path / "state")] == [
        "step-00000030.ckpt",
        "step-00000060.ckpt",
    ]


RUNS = {  # AdamW in backward with two-pass clipping; the standard loop with accumulation and clipping
    "in-backward": {"recipe": recipe(in_backward=True)},
    "standard-accumulation": {"recipe": recipe(in_backward=False), "accumulation_steps": 2},
}


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, cache: str) -> dict[str, tuple]:
    """The uninterrupted 12-step runs of RUNS: (parameters, losses)."""
    runs = {}
    for name, changes in RUNS.items():
        result = train(small(tmp_path_factory.mktemp(name), cache, **changes))
        runs[name] = (_parameters(result.model), result.losses)
    return runs


@pytest.mark.parametrize("name", RUNS)
def test_resume_is_bitwise(tmp_path: Path, cache: str, reference: dict, name: str) -> None:
    parameters, losses = reference[name]
    stopped = train(small(tmp_path, cache, stop_after=7, **RUNS[name]))
    assert stopped.stopped == "stop_after" and stopped.losses == losses[:7]
    # resume from the step-4 state file, not the latest (7): the log is cut back to step 4
    resumed = train(small(tmp_path, cache, resume=str(train_state.state_path(tmp_path / "state", 4)), **RUNS[name]))
    assert resumed.losses == losses[4:] and resumed.step == 12
    _assert_bitwise(_parameters(resumed.model), parameters)
    assert _logged_losses(tmp_path) == losses
    again = train(small(tmp_path, cache, resume="latest", **RUNS[name]))  # finished: nothing left to do
    assert again.losses == [] and again.step == 12


def test_resume_refuses_other_setting(tmp_path: Path, cache: str) -> None:
    train(small(tmp_path, cache, steps=4))
    with pytest.raises(ValueError, match="holds a run already"):
        train(small(tmp_path, cache, steps=4))
    with pytest.raises(ValueError, match=r"lr=0\.01.*lr=0\.02"):
        train(small(tmp_path, cache, steps=4, lr=2e-2, resume="latest"))


# A run in a subprocess, through the CLI, with a hook on the loader or on the state writer.
_RUNNER = textwrap.dedent("""
    import json, os, signal, sys
    from ojas_ref.tools import data
    from ojas_ref.tools.cli import main

    args, hook = json.loads(sys.argv[1]), sys.argv[2]
    sys.path.insert(0, sys.argv[3])
    from _half_writer import stop_half_way
    if hook == "sigterm":  # a real SIGTERM to this process while it fetches the batch of step 6
        next_batch = data.WindowLoader.__next__
        def sigterm_at_step_6(self):
            if self.index == 5:
                os.kill(os.getpid(), signal.SIGTERM)
            return next_batch(self)
        data.WindowLoader.__next__ = sigterm_at_step_6
    else:  # hang half-way through writing the step-8 state file, to be SIGKILLed there
        stop_half_way("step-00000008")
    sys.exit(main(["train"] + args))
""")


def _cli_args(config: TrainConfig) -> list[str]:
    """``ojas train``'s flags of ``config`` (the recipe's included)."""
    args = []
    values = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name != "recipe"}
    values |= dataclasses.asdict(config.recipe) | {"dtype": str(config.dtype).removeprefix("torch.")}
    for name, value in values.items():
        flag = "--" + name.replace("_", "-")
        if name == "checkpoint":
            args += [flag, {True: "on", False: "off"}.get(value, value)]
        elif isinstance(value, bool):
            args.append(flag if value else "--no-" + flag[2:])
        elif value is not None:
            args += [flag, str(value)]
    return args


def test_sigterm_saves_and_resumes_bitwise(tmp_path: Path, cache: str, reference: dict) -> None:
    parameters, losses = reference["in-backward"]
    config = small(tmp_path, cache, **RUNS["in-backward"])
    run = subprocess.run(
        [sys.executable, "-c", _RUNNER, json.dumps(_cli_args(config)), "sigterm", str(Path(__file__).parents[1])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 128 + signal.SIGTERM, run.stderr
    assert "stopped by SIGTERM" in run.stdout
    assert train_state.latest_state(tmp_path / "state") == train_state.state_path(tmp_path / "state", 6)
    assert _logged_losses(tmp_path) == losses[:6]
    resumed = train(dataclasses.replace(config, resume="latest"))
    assert resumed.losses == losses[6:]
    _assert_bitwise(_parameters(resumed.model), parameters)


def test_sigkill_while_saving_resumes_from_previous(tmp_path: Path, cache: str, reference: dict) -> None:
    parameters, losses = reference["in-backward"]
    config = small(tmp_path, cache, **RUNS["in-backward"])
    runner = subprocess.Popen(
        [sys.executable, "-c", _RUNNER, json.dumps(_cli_args(config)), "sigkill", str(Path(__file__).parents[1])],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert runner.stdout.readline().strip() == "READY"
        os.kill(runner.pid, signal.SIGKILL)
    finally:
        runner.kill()
        runner.wait(timeout=30)
    checkpoints = tmp_path / "state"
    assert [s for s, _ in train_state.list_states(checkpoints)] == [4]
    assert any(p.name.endswith(train_state.TEMP_SUFFIX) for p in checkpoints.iterdir())  # the half-written one
    resumed = train(dataclasses.replace(config, resume="latest"))
    assert resumed.losses == losses[4:]
    _assert_bitwise(_parameters(resumed.model), parameters)
    assert _logged_losses(tmp_path) == losses
    assert not any(p.name.endswith(train_state.TEMP_SUFFIX) for p in checkpoints.iterdir())


@pytest.mark.parametrize("in_backward", [True, False])
def test_nan_stops_naming_step_and_state_file(tmp_path: Path, cache: str, in_backward: bool) -> None:
    config = small(tmp_path, cache, steps=10, recipe=recipe(in_backward=in_backward))
    path = train(dataclasses.replace(config, stop_after=5)).state
    state = train_state.load_state(path)
    state["model"]["model.norm.weight"][0] = float("nan")  # a valid state file of a broken model
    train_state.save_state(path, state)
    with pytest.raises(TrainingDiverged, match=rf"at step 6: the loss .* is nan.*not applied.*{re.escape(str(path))}"):
        train(dataclasses.replace(config, resume="latest"))
    assert train_state.latest_state(tmp_path / "state") == path
    assert (tmp_path / "loss.png").exists()


def test_cli_dry_run_and_run(tmp_path: Path, cache: str, capsys: pytest.CaptureFixture) -> None:
    config = small(tmp_path / "run", cache, steps=3)
    assert main(["train", "--dry-run"] + _cli_args(config)) == 0
    out = capsys.readouterr().out
    assert "preset 'nano'" in out and "3 steps" in out and "128 tokens/step" in out
    assert not (tmp_path / "run").exists()
    assert main(["train"] + _cli_args(config)) == 0
    assert "step 3, loss" in capsys.readouterr().out
    assert len(_logged_losses(tmp_path / "run")) == 3 and (tmp_path / "run" / "loss.png").exists()
    assert main(["train", "--steps", "0"]) == 2
    assert "steps must be" in capsys.readouterr().err


def test_cli_refuses_truncated_state_file(tmp_path: Path, cache: str, capsys: pytest.CaptureFixture) -> None:
    config = small(tmp_path, cache, steps=4)
    path = train(config).state
    path.write_bytes(path.read_bytes()[:-100])  # cut, as by a full disk outside the atomic writer
    assert main(["train", "--resume"] + _cli_args(config)) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "truncated or corrupted" in err and "refusing to load it" in err


@pytest.mark.parametrize("in_backward", [True, False])
def test_nonfinite_gradient_stops_naming_parameter(
    tmp_path: Path, cache: str, in_backward: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A NaN gradient with a finite loss (a hook poisons one parameter's gradient at step 3)."""
    original = train_module._build
    backward_passes = []

    def poison(gradient: torch.Tensor) -> torch.Tensor:
        backward_passes.append(None)
        return gradient * float("nan") if len(backward_passes) == 3 else gradient  # one backward pass a step

    def build_with_poison(*args):
        model, optimizer = original(*args)
        model.get_parameter("model.layers.1.mlp.up_proj.weight").register_hook(poison)
        return model, optimizer

    monkeypatch.setattr(train_module, "_build", build_with_poison)
    applied = "was applied in backward" if in_backward else "was not applied"
    # without clipping (a NaN norm would make every parameter NaN), only the poisoned one goes bad
    with pytest.raises(
        TrainingDiverged,
        match=rf"at step 3: .*model\.layers\.1\.mlp\.up_proj\.weight "
        rf"\(1st of 1 of 21\).*{applied}",
    ):
        train(
            small(tmp_path, cache, steps=6, state_every=2, recipe=recipe(in_backward=in_backward), max_grad_norm=None)
        )
    assert train_state.latest_state(tmp_path / "state") == train_state.state_path(tmp_path / "state", 2)


def test_hugging_face_config_file(tmp_path: Path, cache: str, capsys: pytest.CaptureFixture) -> None:
    from transformers import Qwen2Config

    file = tmp_path / "config.json"
    Qwen2Config(
        hidden_size=48,
        intermediate_size=96,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=7,
        max_position_embeddings=8,
    ).to_json_file(file)
    result = train(small(tmp_path / "run", cache, steps=3, model_config_file=str(file)))
    config = result.model.config
    assert (config.model_type, config.hidden_size, config.num_hidden_layers, config.num_key_value_heads) == (
        "qwen2",
        48,
        1,
        2,
    )
    assert config.vocab_size == 512 and config.max_position_embeddings == 32  # the tokenizer's, the run's
    assert f"qwen2 of {file}: hidden 48, 1 layers" in capsys.readouterr().err
    with pytest.raises(ValueError, match="model_config_file 'nowhere.json' does not exist"):
        small(tmp_path, cache, model_config_file="nowhere.json")


def test_stop_flag_signals() -> None:
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with train_module._StopFlag() as flag:
        assert flag.signal_name is None
        os.kill(os.getpid(), signal.SIGINT)  # the first Ctrl-C asks the loop to save and stop
        assert flag.signal_name == "SIGINT"
        with pytest.raises(KeyboardInterrupt):  # a second one interrupts at once
            os.kill(os.getpid(), signal.SIGINT)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


# The memory plan (ojas plan's formulas) checked before the first step.


def _planned_peak(config: TrainConfig, vocab: int, recipe: MemoryRecipe, dtype: torch.dtype) -> int:
    """The planner's peak of ``config``'s model under the recipe and dtype written out here."""
    from ojas_ref.tools import plan as planner

    shape = planner.Model.from_module(train_memory._meta_model(config, vocab))
    setting = planner.Setting(
        recipe=recipe, dtype=dtype, optimizer="adamw", batch=config.batch_size, seq=config.seq_len
    )
    return planner.plan(shape, setting).peak


@pytest.mark.parametrize(
    "changes, setting",
    [
        ({"recipe": recipe(in_backward=False)}, dict(recipe=MemoryRecipe(), dtype=torch.float32)),
        (
            {"recipe": MemoryRecipe.plain(checkpoint=True), "dtype": "bfloat16"},
            dict(recipe=MemoryRecipe.plain(checkpoint=True), dtype=torch.bfloat16),
        ),
        (
            {"recipe": recipe(in_backward=True), "max_grad_norm": None, "batch_size": 3, "seq_len": 64},
            dict(recipe=MemoryRecipe(in_backward=True), dtype=torch.float32),
        ),
    ],
)
def test_check_fits_passes_and_refuses_with_peak_and_available(
    tmp_path: Path, cache: str, changes: dict, setting: dict, capsys: pytest.CaptureFixture
) -> None:
    config = small(tmp_path, cache, **changes)
    model = train_memory._meta_model(config, 512)
    expected = _planned_peak(config, 512, **setting)
    fits = train_module.check_fits(config, model, expected, "cuda:0")  # exactly enough
    assert fits is not None and fits.peak == expected
    assert fits.setting == plan.Setting(
        optimizer="adamw", batch=config.batch_size, seq=config.seq_len, **setting
    )  # TrainConfig -> Setting, the rest of its fields their defaults
    assert f"memory plan: predicted peak {expected / 2**20:.1f} MiB" in capsys.readouterr().err
    with pytest.raises(train_module.PlanDoesNotFit) as refused:
        train_module.check_fits(config, model, expected - 1, "cuda:0")
    assert f"predicted peak {expected / 2**20:.1f} MiB ({expected:,} bytes" in str(refused.value)
    assert f"({expected - 1:,} bytes free)" in str(refused.value)
    largest = max(fits.peak_phase.terms, key=lambda t: t.bytes)
    with pytest.raises(
        ValueError,
        match=rf"will not fit in the memory of cuda:0: .*largest terms: "
        rf"{re.escape(largest.name)} .*available 1\.0 MiB \(1,048,576 bytes free\)",
    ):
        train_module.check_fits(config, model, 2**20, "cuda:0")


def test_check_fits_with_clipping_in_backward_is_a_lower_bound(tmp_path: Path, cache: str) -> None:
    config = small(tmp_path, cache, recipe=recipe(in_backward=True), max_grad_norm=1.0)
    expected = _planned_peak(config, 512, MemoryRecipe(in_backward=True), torch.float32)
    with pytest.raises(train_module.PlanDoesNotFit, match=rf"predicted peak at least {expected / 2**20:.1f} MiB"):
        train_module.check_fits(config, train_memory._meta_model(config, 512), 2**20)


def test_check_fits_skips_what_the_planner_does_not_model(
    tmp_path: Path, cache: str, capsys: pytest.CaptureFixture
) -> None:
    from transformers import LlamaConfig, Qwen2Config

    accumulation = small(tmp_path, cache, accumulation_steps=2)
    assert train_module.check_fits(accumulation, train_memory._meta_model(accumulation, 512), 2**20) is None
    assert capsys.readouterr().err == (
        "ojas train: memory plan not checked: gradient accumulation "
        "(accumulation_steps=2) is not modelled by the planner\n"
    )
    qwen = tmp_path / "qwen2.json"
    Qwen2Config(
        hidden_size=48, intermediate_size=96, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2
    ).to_json_file(qwen)
    config = small(tmp_path, cache, model_config_file=str(qwen))
    assert train_module.check_fits(config, train_memory._meta_model(config, 512), 2**20) is None
    assert "memory plan not checked: the model is 'qwen2': the planner models Llama decoders only" in (
        capsys.readouterr().err
    )
    biased = tmp_path / "llama-bias.json"
    LlamaConfig(
        hidden_size=48, intermediate_size=96, num_hidden_layers=1, num_attention_heads=4, mlp_bias=True
    ).to_json_file(biased)
    config = small(tmp_path, cache, model_config_file=str(biased))
    assert train_module.check_fits(config, train_memory._meta_model(config, 512), 2**20) is None
    assert "memory plan not checked: config.mlp_bias=True" in capsys.readouterr().err


def test_cuda_run_refused_before_the_model_is_built(
    tmp_path: Path, cache: str, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CUDA path on a CPU machine: mem_get_info and the model's construction stubbed."""
    asked = []

    def mem_get_info(device: torch.device) -> tuple[int, int]:
        asked.append(str(device))
        return free, 80 * 2**30

    def build(*args):
        raise RuntimeError("built")

    monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # past train's check of the device
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(train_module, "_build", build)
    config = small(tmp_path / "run", cache, device="cuda", recipe=recipe(in_backward=False))
    expected = _planned_peak(config, 512, MemoryRecipe(), torch.float32)
    free = 2**20
    assert main(["train"] + _cli_args(config)) == 2
    err = capsys.readouterr().err
    assert (
        asked == ["cuda"]
        and f"ojas train: the run will not fit in the memory of cuda: predicted peak "
        f"{expected / 2**20:.1f} MiB ({expected:,} bytes"
        in err
    )
    assert "(1,048,576 bytes free)" in err
    assert not train_state.list_states(tmp_path / "run" / "state")
    free = expected  # fits: the check passes and the run goes on to build the model
    with pytest.raises(RuntimeError, match="built"):
        train(dataclasses.replace(config, out_dir=str(tmp_path / "run2")))
    assert f"memory plan: predicted peak {expected / 2**20:.1f} MiB" in capsys.readouterr().err


def test_cpu_run_is_not_checked_and_dry_run_prints_the_peak(
    tmp_path: Path, cache: str, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def mem_get_info(device: torch.device) -> tuple[int, int]:
        raise AssertionError("mem_get_info called on a CPU run")

    monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)
    config = small(tmp_path / "run", cache, steps=2, device="cpu")
    expected = _planned_peak(config, 512, MemoryRecipe(in_backward=True), torch.float32)
    assert main(["train", "--dry-run"] + _cli_args(config)) == 0
    assert f"predicted peak on a GPU: at least {expected / 2**20:.1f} MiB at " in capsys.readouterr().out
    assert main(["train", "--dry-run"] + _cli_args(dataclasses.replace(config, accumulation_steps=2))) == 0
    assert "predicted peak on a GPU: not predicted (gradient accumulation" in capsys.readouterr().out
    assert main(["train"] + _cli_args(config)) == 0
    assert "memory plan" not in capsys.readouterr().err  # the CPU: no check, no line


def _pretrained(directory: Path, cache: str, extra_vocab: int = 3) -> Path:
    """A save_pretrained directory: a tiny Llama whose vocabulary holds a BPE's ids (plus
    ``extra_vocab`` unused rows, as pretrained models often pad), and that BPE's tokenizer.json."""
    import transformers

    from ojas_ref.tools import data as data_module

    corpus = data_module.read_corpus(None, "*.py", 200_000)
    tokenizer = data_module.train_tokenizer(corpus.texts()[:50], 400)
    size = data_module.vocab_size(tokenizer)
    config = transformers.LlamaConfig(
        vocab_size=size + extra_vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    )
    torch.manual_seed(7)
    transformers.LlamaForCausalLM(config).save_pretrained(directory)
    (directory / "tokenizer.json").write_text(tokenizer.to_str())
    return directory


def test_init_from_pretrained_weights(tmp_path: Path, cache: str) -> None:
    """The run starts from the saved weights (its first loss is theirs on the first batch, taken
    by the same loader from the corpus tokenised with their tokenizer), keeps their vocabulary
    and config, and trains."""
    import tokenizers
    import transformers

    from ojas_ref.tools import data as data_module

    pretrained = _pretrained(tmp_path / "pretrained", cache)
    config = small(tmp_path / "run", cache, init_from=str(pretrained), steps=3, recipe=NO_OJAS)
    result = train(config)
    loaded = transformers.LlamaForCausalLM.from_pretrained(pretrained)
    assert result.model.config.vocab_size == loaded.config.vocab_size and result.model.config.hidden_size == 32
    tokenizer = tokenizers.Tokenizer.from_file(str(pretrained / "tokenizer.json"))
    data = data_module.prepare(
        data_module.read_corpus(None, "*.py", config.max_bytes), config.vocab, cache, tokenizer=tokenizer
    )
    window = next(
        data_module.WindowLoader(data.tokens, config.batch_size, config.seq_len, config.seed, loaded.config.vocab_size)
    )
    with torch.no_grad():
        inputs, targets = window[:, :-1].contiguous(), window[:, 1:].contiguous()
        first = loaded(input_ids=inputs, labels=targets, shift_labels=targets).loss.item()
    assert result.losses[0][1] == pytest.approx(first, rel=1e-6)
    assert result.losses[-1][1] != result.losses[0][1]  # and it trained


def test_init_from_is_checked(tmp_path: Path, cache: str) -> None:
    pretrained = _pretrained(tmp_path / "pretrained", cache)
    (tmp_path / "weights-only").mkdir()
    (tmp_path / "weights-only" / "config.json").write_text((pretrained / "config.json").read_text())
    with pytest.raises(ValueError, match="lacks tokenizer.json"):
        small(tmp_path / "a", cache, init_from=str(tmp_path / "weights-only"))
    with pytest.raises(ValueError, match="pass one"):
        small(tmp_path / "b", cache, init_from=str(pretrained), model_config_file=str(pretrained / "config.json"))
    with pytest.raises(ValueError, match="max_position_embeddings 64"):
        train(small(tmp_path / "c", cache, init_from=str(pretrained), seq_len=100))
    small_vocab = _pretrained(tmp_path / "small-vocab", cache, extra_vocab=-1)
    with pytest.raises(ValueError, match="the model's vocabulary only"):
        train(small(tmp_path / "d", cache, init_from=str(small_vocab)))


# Offloaded checkpoints and the optimizer state on the host (--checkpoint offload, --state-device cpu)

HOST = {"recipe": recipe(checkpoint="offload", state_device="cpu")}


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"offload_checkpoints": True}, "offload_checkpoints.*--activation-checkpointing"),
        ({"offload_checkpoints": True, "activation_checkpointing": False, "in_backward": False}, "offload_checkpoints"),
        ({"state_on_host": True, "in_backward": False}, "state_device='cpu' needs in_backward=True"),
        ({"state_on_host": True, "in_backward": False, "activation_checkpointing": True}, "state_device"),
    ],
)
def test_offload_and_state_on_host_need_their_technique(
    changes: dict, match: str, capsys: pytest.CaptureFixture
) -> None:
    """Release 0.1's keywords and flags (deprecated) keep their checks; the state on the host is the
    recipe's (``state_device='cpu'`` needs ``in_backward``), named by the recipe's field."""
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match=match):
        TrainConfig(**changes)
    assert main(["train", "--dry-run", "--offload-checkpoints"]) == 2
    assert "--offload-checkpoints" in capsys.readouterr().err
    assert main(["train", "--dry-run", "--no-in-backward", "--state-on-host"]) == 2
    assert "--state-on-host" in capsys.readouterr().err
    assert main(["train", "--dry-run", "--no-in-backward", "--state-device", "cpu"]) == 2
    assert "state_device='cpu' needs in_backward=True" in capsys.readouterr().err


def test_offload_and_state_on_host_resume_bitwise(tmp_path: Path, cache: str) -> None:
    """Both flags on (the CPU: the offload is a plain copy, the host state the same tensors): the run
    equals the one without them, and a resume from step 4 continues it bitwise."""
    full = train(small(tmp_path / "full", cache, **HOST))
    from ojas_ref.nn.offload import OffloadedCheckpoint

    assert isinstance(full.model.model.layers[0]._gradient_checkpointing_func, OffloadedCheckpoint)
    plain = train(small(tmp_path / "plain", cache, recipe=recipe(checkpoint=True)))
    assert full.losses == plain.losses
    _assert_bitwise(_parameters(full.model), _parameters(plain.model))
    stopped = train(small(tmp_path / "run", cache, stop_after=7, **HOST))
    assert stopped.stopped == "stop_after" and stopped.losses == full.losses[:7]
    state = train_state.load_state(train_state.state_path(tmp_path / "run" / "state", 4))
    moments = [v for s in state["optimizer"]["state"].values() for k, v in s.items() if k != "step"]
    assert moments and all(v.device.type == "cpu" for v in moments)
    assert state["config"]["recipe"]["checkpoint"] == "offload" and state["config"]["recipe"]["state_device"] == "cpu"
    resumed = train(
        small(tmp_path / "run", cache, resume=str(train_state.state_path(tmp_path / "run" / "state", 4)), **HOST)
    )
    assert resumed.losses == full.losses[4:] and resumed.step == 12
    _assert_bitwise(_parameters(resumed.model), _parameters(full.model))
    with pytest.raises(ValueError, match="recipe.state_device='cpu'"):  # a run of the setting resumes only with it
        train(small(tmp_path / "run", cache, resume="latest", recipe=recipe(checkpoint="offload")))


def test_offload_and_state_on_host_in_the_plan_and_dry_run(
    tmp_path: Path, cache: str, capsys: pytest.CaptureFixture
) -> None:
    config = small(tmp_path, cache, max_grad_norm=None, **HOST)
    model = train_memory._meta_model(config, 512)
    expected = _planned_peak(
        config, 512, MemoryRecipe(in_backward=True, checkpoint="offload", state_device="cpu"), torch.float32
    )
    fits = train_module.check_fits(config, model, expected, "cuda:0")
    assert fits is not None and fits.peak == expected
    assert fits.setting.recipe == HOST["recipe"] and fits.host_bytes > 0
    capsys.readouterr()
    assert main(["train", "--dry-run"] + _cli_args(config)) == 0  # max_grad_norm None is not a flag: clipping
    out = capsys.readouterr().out
    assert "checkpoints offloaded to host memory" in out and "state in host memory" in out
    assert f"predicted peak on a GPU: at least {expected / 2**20:.1f} MiB" in out
    assert f"host memory {fits.host_bytes / 2**20:.1f} MiB" in out


# Split checkpoints (--checkpoint-split)


def test_split_checkpoints_need_activation_checkpointing(capsys: pytest.CaptureFixture) -> None:
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="checkpoint_split=True needs checkpoint"):
        TrainConfig(split_checkpoints=True)
    assert main(["train", "--dry-run", "--split-checkpoints"]) == 2
    assert "--split-checkpoints" in capsys.readouterr().err
    assert main(["train", "--dry-run", "--checkpoint-split"]) == 2
    assert "checkpoint_split=True needs checkpoint" in capsys.readouterr().err


@pytest.mark.parametrize("ojas", [True, False], ids=["ojas", "plain"])
def test_split_checkpoints_train_bitwise_and_are_planned(tmp_path: Path, cache: str, ojas: bool) -> None:
    """With the ojas kernels and without: the run equals whole-layer checkpointing bit for bit, each
    decoder layer checkpointing through SplitCheckpoint, and the plan is the split one."""
    from ojas_ref.integrations.hf import SplitCheckpoint

    base = dataclasses.replace(DEFAULT_RECIPE if ojas else NO_OJAS, checkpoint=True)
    split = train(small(tmp_path / "split", cache, recipe=dataclasses.replace(base, checkpoint_split=True)))
    assert all(isinstance(layer._gradient_checkpointing_func, SplitCheckpoint) for layer in split.model.model.layers)
    whole = train(small(tmp_path / "whole", cache, recipe=base))
    assert split.losses == whole.losses
    _assert_bitwise(_parameters(split.model), _parameters(whole.model))
    config = small(tmp_path, cache, max_grad_norm=None, recipe=dataclasses.replace(base, checkpoint_split=True))
    fits = train_module.check_fits(config, train_memory._meta_model(config, 512), 2**40, "cuda:0")
    assert fits is not None and fits.setting.recipe.checkpoint_split and fits.setting.recipe.checkpoint


# Files and errors (issue 33 items 3, 4, 11, 12; issue 34 items 5 and 7).


def test_a_second_run_into_a_locked_out_dir_is_refused_at_once(
    tmp_path: Path, cache: str, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run in a subprocess holds --out-dir (stopped half-way through its step-8 checkpoint); a
    second run into it, new or resumed, exits 2 naming the directory and the holder before
    reading the corpus; once the holder is gone the directory is free."""
    config = small(tmp_path, cache, **RUNS["in-backward"])
    runner = subprocess.Popen(
        [sys.executable, "-c", _RUNNER, json.dumps(_cli_args(config)), "sigkill", str(Path(__file__).parents[1])],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert runner.stdout.readline().strip() == "READY"
        monkeypatch.setattr(train_module, "read_corpus", lambda *a: pytest.fail("the corpus was read"))
        for extra in ([], ["--resume", "latest"]):
            assert main(["train"] + _cli_args(config) + extra) == 2
            err = capsys.readouterr().err
            assert f"--out-dir {str(tmp_path)!r} is in use by another run (process {runner.pid} holds" in err, err
    finally:
        runner.kill()
        runner.wait(timeout=30)
    monkeypatch.undo()
    assert train(dataclasses.replace(config, resume="latest")).step == 12


def test_resume_without_a_checkpoint_keeps_the_log(tmp_path: Path, cache: str, capsys: pytest.CaptureFixture) -> None:
    """A run killed before its first state file leaves a log and none: --resume refuses,
    naming what is there, and the log is left as it was (it used to restart and overwrite it)."""
    config = small(tmp_path, cache, steps=6, state_every=6)
    train(config)
    for _, path in train_state.list_states(tmp_path / "state"):
        path.unlink()  # as if killed before the step-6 state file
    log = (tmp_path / "train.jsonl").read_bytes()
    assert main(["train", "--resume"] + _cli_args(config)) == 2
    err = capsys.readouterr().err
    assert (
        f"--resume latest: --out-dir {str(tmp_path)!r} holds train.jsonl of 6 step(s), no state file: the run "
        "stopped before its first state file, so there is nothing to resume from"
    ) in err
    assert (tmp_path / "train.jsonl").read_bytes() == log
    with pytest.raises(ValueError, match="holds no state file to resume from"):
        train(small(tmp_path / "empty", cache, resume="latest"))


def test_resume_does_not_mix_runs(tmp_path: Path, cache: str) -> None:
    """--resume FILE of another directory into a directory holding a run, and --stop-after at or
    before the state file's step, are refused before anything is written."""
    first = train(small(tmp_path / "a", cache, steps=4)).state
    train(small(tmp_path / "b", cache, steps=4))
    log = (tmp_path / "b" / "train.jsonl").read_bytes()
    with pytest.raises(ValueError, match="is a state file of another directory.*resume into an empty --out-dir"):
        train(small(tmp_path / "b", cache, steps=4, resume=str(first)))
    assert (tmp_path / "b" / "train.jsonl").read_bytes() == log
    stopped = train(small(tmp_path / "c", cache, steps=8, stop_after=6)).state
    with pytest.raises(ValueError, match=r"--stop-after 5 is not after the step of the state file resumed \(6"):
        train(small(tmp_path / "c", cache, steps=8, resume="latest", stop_after=5))
    assert train(small(tmp_path / "d", cache, steps=8, resume=str(stopped))).step == 8  # into an empty one


def test_divergence_advice_is_what_works(tmp_path: Path, cache: str) -> None:
    """The advice is a new run with a lower lr, more warm-up or clipping, in another directory: a
    resume with a changed lr is refused, as the message says."""
    config = small(tmp_path, cache, steps=10, max_grad_norm=None)
    path = train(dataclasses.replace(config, stop_after=5)).state
    state = train_state.load_state(path)
    state["model"]["model.norm.weight"][0] = float("nan")
    train_state.save_state(path, state)
    with pytest.raises(TrainingDiverged) as info:
        train(dataclasses.replace(config, resume="latest"))
    message = str(info.value)
    assert "resume from it" not in message
    assert message.endswith(
        "A resume keeps the setting and would diverge again: start a new run in another "
        "--out-dir with a lower --lr (this run: 0.01), more --warmup-steps (this run: 3) or "
        "clipping, e.g. --max-grad-norm 1.0 (this run: none)"
    )
    with pytest.raises(ValueError, match="changes the computation"):
        train(dataclasses.replace(config, resume="latest", lr=1e-3))
    advised = train(dataclasses.replace(config, out_dir=str(tmp_path / "new"), lr=1e-3, max_grad_norm=1.0))
    assert advised.step == 10 and all(math.isfinite(loss) for _, loss in advised.losses)


def test_bad_device_and_out_dir_exit_2_with_a_message(
    tmp_path: Path, cache: str, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = small(tmp_path / "run", cache, steps=2)
    args = _cli_args(config)
    file = tmp_path / "file"
    file.write_text("")
    cases = [
        (["--device", "bogus"], "device (--device) must be 'auto', 'cpu', 'cuda' or 'cuda:N', got 'bogus'"),
        (["--device", "cuda"], "device (--device) 'cuda': CUDA is not available here"),
        (["--out-dir", str(file / "run")], f"--out-dir {str(file / 'run')!r}: cannot create the directory"),
        (["--out-dir", str(file)], f"--out-dir {str(file)!r} is a file, not a directory"),
        (["--threads", "0"], "threads (--threads) must be None (automatic) or an int >= 1, got 0"),
    ]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for extra, message in cases:
        assert main(["train"] + args + extra) == 2, extra
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, (extra, err)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert main(["train"] + args + ["--device", "cuda:1"]) == 2
    assert "device (--device) 'cuda:1': this machine has 1 CUDA device(s), cuda:0 to cuda:0" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
    bad = tmp_path / "config.json"
    bad.write_text('{"model_type": "llama", "hidden_size": ')
    monkeypatch.setattr(train_module, "read_corpus", lambda *a: pytest.fail("the corpus was read"))
    assert main(["train"] + args + ["--model-config-file", str(bad)]) == 2
    err = capsys.readouterr().err
    assert (
        f"model_config_file (--model-config-file) {str(bad)!r}: not a Hugging Face config transformers can read "
        "(It looks like the config file"
        in err
        and "Traceback" not in err
    )


def test_full_disk_at_a_state_file_exits_3_and_keeps_the_last(
    tmp_path: Path, cache: str, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC while the step-8 checkpoint is written: exit 3 naming the file and the step-4
    checkpoint, which a resume then continues from, bitwise the uninterrupted run."""
    import errno

    config = small(tmp_path, cache, **RUNS["in-backward"])
    save = train_state.save_state

    def full_disk(path: Path, state: dict) -> Path:
        if Path(path).name == "step-00000008.ckpt":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return save(path, state)

    monkeypatch.setattr(train_state, "save_state", full_disk)
    assert main(["train"] + _cli_args(config)) == 3
    err = capsys.readouterr().err
    four = train_state.state_path(tmp_path / "state", 4)
    assert (
        f"ojas train: cannot write {train_state.state_path(tmp_path / 'state', 8)} (No space left on device); "
        f"the last complete state file is {four}: free space (or fix the path) and continue with --resume latest"
    ) in err
    monkeypatch.undo()
    assert train_state.latest_state(tmp_path / "state") == four


def test_warmup_longer_than_the_run_is_said(tmp_path: Path, cache: str, capsys: pytest.CaptureFixture) -> None:
    config = small(tmp_path, cache, steps=5, warmup_steps=50)
    assert main(["train", "--dry-run"] + _cli_args(config)) == 0
    out = capsys.readouterr().out
    assert (
        "schedule   5 steps, all inside the 50-step warm-up: the lr rises to 0.001 and never reaches --lr 0.01 "
        "(warning: lower --warmup-steps to at most --steps to reach it)"
    ) in out
    train(config)
    assert (
        "ojas train: warning: warmup_steps (--warmup-steps 50) is above steps (--steps 5): the whole run is "
        "warm-up and the lr never reaches --lr 0.01"
    ) in capsys.readouterr().err


def test_threads_default_override_and_restore(
    tmp_path: Path, cache: str, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Half the cores (1 to 4), OMP_NUM_THREADS kept, --threads wins; set for the run only."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    for cores, threads in ((1, 1), (2, 1), (3, 1), (8, 4), (64, 4)):
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid, n=cores: set(range(n)))
        assert train_module.default_threads() == threads
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5})
    seen = []
    original = train_module._build

    def build(*args):
        seen.append(torch.get_num_threads())
        return original(*args)

    monkeypatch.setattr(train_module, "_build", build)
    before = torch.get_num_threads()
    train(small(tmp_path / "auto", cache, steps=1))
    assert "threads    3 intra-op CPU thread(s) (automatic: half of this process's 6 core(s), at most 4" in (
        capsys.readouterr().err
    )
    train(small(tmp_path / "flag", cache, steps=1, threads=2))
    assert "threads    2 intra-op CPU thread(s) (--threads)" in capsys.readouterr().err
    assert seen == [3, 2] and torch.get_num_threads() == before
    monkeypatch.setenv("OMP_NUM_THREADS", "5")
    assert train_module.default_threads() == torch.get_num_threads()
    assert "(OMP_NUM_THREADS=5; --threads N to choose)" in train_module.describe(small(tmp_path, cache))


def test_cli_messages_for_runs_already_there(tmp_path: Path, cache: str, capsys: pytest.CaptureFixture) -> None:
    """--dry-run warns that --out-dir holds a run; a new run there is refused in the CLI's words;
    --resume on a finished run says it is finished (it printed ``loss nan -> nan``)."""
    config = small(tmp_path, cache, steps=3)
    assert main(["train"] + _cli_args(config)) == 0
    capsys.readouterr()
    assert main(["train", "--dry-run"] + _cli_args(config)) == 0
    held = (
        f"--out-dir {str(tmp_path)!r} holds a run already (train.jsonl of 3 step(s), state files up to step 3): "
        "continue it with --resume latest, or pass another --out-dir"
    )
    assert f"ojas train: warning: {held}" in capsys.readouterr().err
    assert main(["train"] + _cli_args(config)) == 2
    assert f"ojas train: {held}" in capsys.readouterr().err
    assert main(["train", "--resume"] + _cli_args(config)) == 0
    out = capsys.readouterr().out
    assert "nan" not in out
    assert (
        f"ojas train: the run in {tmp_path} is finished (step 3 of 3, state file "
        f"{train_state.state_path(tmp_path / 'state', 3)}): nothing to resume"
    ) in out


def test_plot_has_the_setting_and_memory_from_zero(tmp_path: Path, cache: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from matplotlib.figure import Figure

    figures = []
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: figures.append(self))
    train(small(tmp_path, cache, steps=3))
    figure = figures[-1]
    assert figure._suptitle.get_text() == (
        "ojas train: Llama preset 'nano', 0.05M parameters, float32 on cpu\n3 steps of 4 x 32 tokens, lr 0.01 "
        "(3 warm-up, cosine), AdamW in backward, clip 1.0, optimize_model on"
    )
    assert figure.axes[1].get_ylim()[0] == 0


# The memory recipe, and release 0.1's names (deprecated aliases for one release).


def test_the_default_recipe_is_optimize_model_s_defaults_in_backward() -> None:
    """The first README command's run: every primitive, no checkpointing, AdamW in backward, float32."""
    config = TrainConfig()
    assert config.recipe == MemoryRecipe(in_backward=True) and config.dtype == torch.float32
    assert config.recipe.model_options() == MemoryRecipe().model_options()


@pytest.mark.parametrize(
    "old, new",
    [
        ({"ojas": False}, {"recipe": NO_OJAS}),
        ({"in_backward": False}, {"recipe": recipe(in_backward=False)}),
        ({"activation_checkpointing": True}, {"recipe": recipe(checkpoint=True)}),
        ({"activation_checkpointing": True, "offload_checkpoints": True}, {"recipe": recipe(checkpoint="offload")}),
        (
            {"activation_checkpointing": True, "split_checkpoints": True, "ojas": False},
            {"recipe": dataclasses.replace(NO_OJAS, checkpoint=True, checkpoint_split=True)},
        ),
        ({"state_on_host": True}, {"recipe": recipe(state_device="cpu")}),
        ({"checkpoint_every": 7, "keep_checkpoints": 3}, {"state_every": 7, "keep_states": 3}),
        ({"dtype": "bfloat16"}, {"dtype": torch.bfloat16}),
    ],
)
def test_old_fields_warn_and_map_into_the_recipe(old: dict, new: dict) -> None:
    deprecated = "dtype" not in old  # a dtype's torch name is today's spelling too
    with pytest.warns(DeprecationWarning, match="deprecated") if deprecated else contextlib.nullcontext():
        config = TrainConfig(**old)
    assert config == TrainConfig(**new)
    with pytest.raises(TypeError, match="pass state_every or its deprecated name checkpoint_every, not both"):
        with pytest.warns(DeprecationWarning):
            TrainConfig(checkpoint_every=3, state_every=4)


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"recipe": recipe(head_update=True)}, r"recipe\.head_update=True \(--head-update\) needs plain SGD"),
        ({"recipe": recipe(sparse_embedding=True)}, r"recipe\.sparse_embedding=True .* needs plain SGD"),
        ({"dtype": torch.float16}, r"dtype \(--dtype\) must be one of \['bfloat16', 'float32'\], got 'float16'"),
    ],
)
def test_what_ojas_train_cannot_run_is_refused(changes: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        TrainConfig(**changes)
    with pytest.raises(TypeError, match="recipe must be an ojas_ref.MemoryRecipe, got dict"):
        TrainConfig(recipe={"checkpoint": True})


def test_old_flags_warn_and_set_the_recipe(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Release 0.1's flags: hidden from --help, each warned about on stderr, the same setting as
    today's flags."""
    old = ["--no-ojas", "--activation-checkpointing", "--split-checkpoints", "--checkpoint-every", "7"]
    new = ["--no-attention", "--no-linear-cross-entropy", "--no-rms-norm", "--no-swiglu", "--no-rope"]
    new += ["--no-relu-mask", "--checkpoint", "on", "--checkpoint-split", "--state-every", "7"]
    old, new = old + ["--out-dir", str(tmp_path)], new + ["--out-dir", str(tmp_path)]
    assert main(["train", "--dry-run", *old]) == 0
    printed = capsys.readouterr()
    for flag in ("--no-ojas", "--activation-checkpointing", "--split-checkpoints", "--checkpoint-every"):
        assert f"ojas train: warning: {flag} is deprecated: write " in printed.err
    assert "optimize_model off, activation checkpointing (two per layer" in printed.out
    assert "state files every 7 steps" in printed.out
    assert main(["train", "--dry-run", *new]) == 0
    assert capsys.readouterr() == (printed.out, "")
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert "--activation-checkpointing" not in capsys.readouterr().out


def _as_release_0_1(out: Path) -> None:
    """``out``'s run as release 0.1 wrote it: its state files in checkpoints/, their settings in
    the old fields (no recipe, dtype by name)."""
    (out / "state").rename(out / "checkpoints")
    for _, path in train_state.list_states(out / "checkpoints"):
        state = train_state.load_state(path)
        config = state["config"]
        old_recipe = config.pop("recipe")
        config.pop("state_every"), config.pop("keep_states")
        config.update(
            ojas=old_recipe["attention"],
            in_backward=old_recipe["in_backward"],
            activation_checkpointing=bool(old_recipe["checkpoint"]),
            offload_checkpoints=old_recipe["checkpoint"] == "offload",
            split_checkpoints=old_recipe["checkpoint_split"],
            state_on_host=old_recipe["state_device"] == "cpu",
            checkpoint_every=4,
            keep_checkpoints=10,
        )
        train_state.save_state(path, state)


def test_a_release_0_1_run_resumes_from_its_checkpoints_folder(tmp_path: Path, cache: str, reference: dict) -> None:
    """A run directory of release 0.1 (state files in checkpoints/, settings in the old fields)
    resumes bitwise, keeps writing there, and a setting that changes the computation is refused
    naming the recipe's field."""
    parameters, losses = reference["in-backward"]
    train(small(tmp_path, cache, stop_after=7, **RUNS["in-backward"]))
    _as_release_0_1(tmp_path)
    with pytest.raises(ValueError, match=r"recipe\.checkpoint=False, this run has recipe\.checkpoint=True"):
        train(small(tmp_path, cache, resume="latest", recipe=recipe(in_backward=True, checkpoint=True)))
    resumed = train(small(tmp_path, cache, resume="latest", **RUNS["in-backward"]))
    assert resumed.losses == losses[7:] and resumed.state == train_state.state_path(tmp_path / "checkpoints", 12)
    _assert_bitwise(_parameters(resumed.model), parameters)
    assert not (tmp_path / "state").exists() or not train_state.list_states(tmp_path / "state")
    with pytest.warns(DeprecationWarning, match="TrainResult.state"):
        assert resumed.checkpoint == resumed.state
