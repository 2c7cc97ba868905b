"""``ojas_ref.memory`` and ``ojas plan``: the predicted peaks against the peaks measured on an H200 (the 16
configurations three times, tests/fixtures/plan/bench_optimize_model_h200*.json: before the
fused RMSNorm and SwiGLU, with them, and with the fused RoPE and the attention output written
in place), and the formulas against what a Hugging Face model on the CPU
or the meta device actually holds."""

from __future__ import annotations

import ast
import json
import re
import weakref
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ojas_ref.tools import plan as P
from ojas_ref.tools.cli import main

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

#: the H200 records the formulas are checked against, copied from benchmarks/results/ (README.md there)
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "plan"
#: benchmarks/bench_optimize_model.py's: before the fused RMSNorm and SwiGLU existed (its ojas modes:
#: attention and loss), with everything optimize_model applies, and with the fused RoPE too
RECORDS_PATHS = tuple(FIXTURES / f"bench_optimize_model_h200{s}.json" for s in ("", "_fused", "_rope"))
#: benchmarks/bench_memory.py's: the 1.06B decoder with its memory techniques (offload, host state),
#: the presets at scale (llama-0.5b to llama-13b, llama-70b, and llama-70b's shape at 23 and 58
#: layers: 20.2B and 50.2B parameters), fp32 AdamW with the state on the host in 128 MiB slices,
#: split checkpoints offloaded in its "all" row, and issue 14's one run (32 MiB buckets)
MEMORY_RECORDS_PATHS = tuple(FIXTURES / f"bench_memory_h200{s}.json"
                             for s in ("", "_presets", "_host_state_sliced128_pool_split", "_one_run"))
ONE_B = P.record_model(RECORDS_PATHS[-1])
RECORDS = [r for path in RECORDS_PATHS for r in P.load_records(path)]
#: issue 15's bar for the 1.06B configurations; every record is inside it (errors of
#: -1.0% to +0.12% for the first file when written; 0.0% to +1.6% for the second, whose
#: peaks after its first leave out the 64 MiB of cuBLAS workspaces: see its note; the third's
#: are printed by ``ojas plan`` beside its measured peak)
TOLERANCE = 0.05


def _id(record: tuple[P.Setting, int]) -> str:
    s = record[0]
    return f"{s.dtype}-{s.optimizer}-{s.mode}"


@pytest.mark.parametrize("path", RECORDS_PATHS, ids=lambda p: p.name)
def test_each_record_file_holds_the_16_configurations(path):
    records = P.load_records(path)
    assert len(records) == 16 and len({(s.dtype, s.optimizer, s.mode) for s, _ in records}) == 16
    assert P.record_model(path) == replace(P.PRESETS["llama-1b"], source="")


def test_the_files_tell_the_ojas_settings_apart():
    """The first file's ojas modes ran attention and loss only, the second's every kernel with
    the attention output copied, the third's (RoPE too) without that copy."""
    first, second, third = (dict(P.load_records(p)) for p in RECORDS_PATHS)
    ojas = [s for s in first if s.in_backward]
    assert ojas and not any(s.ojas_rms_norm or s.ojas_swiglu for s in ojas)
    assert all(s.ojas_rms_norm and s.ojas_swiglu and s.ojas_attention_copy for s in second if s.in_backward)
    assert all(s.ojas_rms_norm and s.ojas_swiglu and not s.ojas_attention_copy for s in third if s.in_backward)
    assert len(set(first) | set(second) | set(third)) == 32  # the 8 standard settings are in all three
    # a plan made today is the third file's setting
    assert P.Setting(dtype="bf16", optimizer="sgd", in_backward=True, ojas_attention=True, ojas_loss=True,
                     ojas_rms_norm=True, ojas_swiglu=True) in third


@pytest.mark.parametrize("record", RECORDS, ids=_id)
def test_predicted_peak_within_5_percent_of_measured(record):
    setting, measured = record
    predicted = P.plan(ONE_B, setting).peak
    assert abs(predicted - measured) <= TOLERANCE * measured, (
        f"predicted {predicted / 2**30:.3f} GiB, measured {measured / 2**30:.3f} GiB "
        f"({100 * (predicted - measured) / measured:+.2f}%)")


MEMORY_RECORDS = [r for path in MEMORY_RECORDS_PATHS for r in P.load_memory_records(path)]


def _resolved(field: str) -> dict:
    """The records' ``field`` by (model shape, setting), the later file where two hold a setting,
    bench_optimize_model's over bench_memory's: what ``ojas plan`` prints beside its prediction."""
    found = {(_shape(m), s): row[field] for m, s, row in MEMORY_RECORDS if field in row}
    return found | {(_shape(ONE_B), s): v for path in RECORDS_PATHS for s, v in P.load_records(path, field)}


def _shape(m: P.Model) -> P.Model:
    return replace(m, name="", source="")


def test_the_packaged_measurements_are_the_records():
    """ojas_ref/tools/h200_records.py, which ``ojas plan`` reads (the package reads no file of
    benchmarks/), holds every measured peak and tokens/s of the record files, and nothing else."""
    from ojas_ref.tools.h200_records import MODELS, ROWS

    peaks, speeds = _resolved("peak"), _resolved("tokens_per_s")
    packaged = {(_shape(P.Model(*MODELS[name])), P.Setting(**fields)): (peak, speed)
                for name, fields, peak, speed in ROWS}
    assert len(packaged) == len(ROWS) == len(peaks.keys() | speeds.keys()) == 69
    assert packaged == {key: (peaks.get(key), speeds.get(key)) for key in peaks.keys() | speeds.keys()}
    for (m, s), (peak, speed) in packaged.items():
        assert P.measured_peak(m, s) == peak and P.measured_peak(m, s, "tokens_per_s") == speed
    assert {name: _shape(P.preset_model(name)) for name in MODELS if name != "llama-1b"} == {
        name: _shape(P.Model(*shape)) for name, shape in MODELS.items() if name != "llama-1b"}
    with pytest.raises(ValueError, match="field must be one of"):
        P.measured_peak(ONE_B, P.Setting(), "host")


def test_measured_peak_reads_no_file(monkeypatch):
    """An installed package has no benchmarks/ folder: the measurements come with the package."""
    from ojas_ref.tools import records

    def refuse(*args, **kwargs):
        raise AssertionError("measured_peak read a file")

    records._measured.cache_clear()
    monkeypatch.setattr(Path, "read_text", refuse)
    monkeypatch.setattr(Path, "read_bytes", refuse)
    monkeypatch.setattr(Path, "open", refuse)
    assert P.measured_peak(P.PRESETS["llama-1b"], OJAS_CKPT) == dict(RECORDS)[OJAS_CKPT]


def _memory_id(record: tuple[P.Model, P.Setting, dict]) -> str:
    m, s, _ = record
    return f"{m.name}-{s.dtype}-{s.optimizer}-{s.mode}"


def test_memory_records_hold_the_techniques_and_the_presets():
    """bench_memory's H200 records: every 1.06B technique the planner models, each preset of
    0.5B to 13B in the four bf16 settings, the 20B / 50B models of llama-70b's shape and
    llama-70b itself (bf16 SGD)."""
    names = {(m.name, s.mode) for m, s, _ in MEMORY_RECORDS}
    assert {("llama-1b", mode) for mode in ("standard+ckpt", "ojas+ckpt", "ojas+ckpt+offload",
                                            "ojas+ckpt+host-state", "ojas+ckpt+offload+host-state")} <= names
    for preset in ("llama-0.5b", "llama-3b", "llama-7b", "llama-13b"):
        assert sum(m.name == preset for m, _, _ in MEMORY_RECORDS) == 4
    assert {("llama-70b@58", "ojas+ckpt"), ("llama-70b@23", "ojas+ckpt+host-state"), ("llama-70b", "ojas+ckpt")} <= names
    big = {m.name: m.params() for m, _, _ in MEMORY_RECORDS if m.name.startswith("llama-70b@")}
    assert big["llama-70b@23"] >= 20e9 and big["llama-70b@58"] >= 50e9


@pytest.mark.parametrize("record", MEMORY_RECORDS, ids=_memory_id)
def test_predicted_peak_and_host_of_the_memory_records(record):
    """Issue 15's tolerances: within 5% of the measured peak for the 1.06B model, 10% for the
    others; the host bytes (offloaded checkpoints, host state) within 1% of those counted."""
    model, setting, row = record
    predicted = P.plan(model, setting)
    tolerance = TOLERANCE if model.name == "llama-1b" else 0.10
    assert abs(predicted.peak - row["peak"]) <= tolerance * row["peak"], (
        f"predicted {predicted.peak / 2**30:.3f} GiB, measured {row['peak'] / 2**30:.3f} GiB")
    if row["host"] is not None:
        assert abs(predicted.host_bytes - row["host"]) <= 0.01 * row["host"]


def _llama_config(**overrides) -> "transformers.LlamaConfig":
    base = dict(vocab_size=101, hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=4, max_position_embeddings=128, tie_word_embeddings=False, attention_dropout=0.0)
    return transformers.LlamaConfig(**(base | overrides))


@pytest.mark.parametrize("name", list(P.PRESETS))
def test_param_count_of_presets_matches_meta_model(name):
    m = P.PRESETS[name]
    config = _llama_config(vocab_size=m.vocab, hidden_size=m.hidden, intermediate_size=m.intermediate,
                           num_hidden_layers=m.layers, num_attention_heads=m.heads, num_key_value_heads=m.kv_heads,
                           tie_word_embeddings=m.tied)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    assert m.params() == sum(p.numel() for p in model.parameters())
    assert P.Model.from_config(config).params() == m.params()
    for dtype in P.DTYPE_BYTES:
        assert P.weights_bytes(m, P.Setting(dtype=dtype)) == m.params() * P.DTYPE_BYTES[dtype]


def test_param_count_with_head_dim():
    config = _llama_config(head_dim=32, num_key_value_heads=2)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    assert P.Model.from_config(config).params() == sum(p.numel() for p in model.parameters())


def test_plan_of_a_meta_device_module():
    config = _llama_config(num_key_value_heads=2, tie_word_embeddings=True)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    s = P.Setting(seq=64)
    assert P.plan(model, s).peak == P.plan(P.Model.from_config(config), s).peak
    with torch.device("meta"):
        qwen = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
            vocab_size=101, hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2))
    with pytest.raises(NotImplementedError, match="not modelled"):
        P.plan(qwen, s)  # q/k/v biases
    with pytest.raises(TypeError, match="model must be"):
        P.plan(torch.nn.Linear(2, 2), s)


def _saved_bytes(model, ids) -> int:
    """Bytes of the distinct storages autograd saves in one forward, parameters excluded."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in params:
            seen[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=ids, labels=ids).loss
    return sum(seen.values())


# ojas attention in bf16 is left out: on the CPU it runs the reference, which saves its
# output in float32 (ojas_ref/functional/attention.py, _OnlineSoftmaxAttention), where the CUDA
# kernel the plan models saves it in bfloat16 (kernels/ojas_kernels/attention.py, _FlashAttention).
# The fused RMSNorm is left out too: on the CPU the swapped modules run Hugging Face's ops
# (ojas_ref/integrations/hf/adapters.py), so they save what the plan's unfused formula counts. SwiGLU's
# autograd Function saves gate and up on every device.
@pytest.mark.parametrize("dtype,ojas_attention,ojas_swiglu",
                         [("fp32", False, False), ("bf16", False, False), ("fp32", True, False), ("bf16", False, True)])
@pytest.mark.parametrize("kv_heads", [4, 2])
def test_saved_activations_match_a_real_llama(dtype, ojas_attention, ojas_swiglu, kv_heads):
    """layer_saved_bytes counts exactly what one decoder layer saves (second layer minus
    first), and the rest of the model saves the final norm, RoPE tables, the loss's
    log-softmax output, the ids and the labels (+ nll_loss's 4-byte total weight). On
    the CPU SDPA runs its flash kernel, which saves q, k, v, out and lse as the CUDA kernels do."""
    from ojas_ref import optimize_model

    batch, seq = 2, 32
    # on the CPU the adapter's general path copies the reference's [B, H, S, E] output (the CUDA
    # kernel writes [B, S, H, E] itself): the copy of the older records
    setting = P.Setting(dtype=dtype, batch=batch, seq=seq, ojas_attention=ojas_attention, ojas_swiglu=ojas_swiglu,
                        ojas_attention_copy=ojas_attention)
    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    ids = torch.randint(0, 101, (batch, seq), generator=torch.Generator().manual_seed(0))
    totals = []
    for layers in (1, 2):
        config = _llama_config(num_hidden_layers=layers, num_key_value_heads=kv_heads)
        torch.manual_seed(0)
        model = transformers.LlamaForCausalLM(config).to(torch_dtype).train()
        if ojas_attention or ojas_swiglu:
            optimize_model(model, attention=ojas_attention, linear_cross_entropy=False, rms_norm=False,
                           swiglu=ojas_swiglu)
        totals.append(_saved_bytes(model, ids))
    m = P.Model.from_config(config)
    assert totals[1] - totals[0] == P.layer_saved_bytes(m, setting)
    log_softmax = 4 * setting.tokens * m.vocab  # the loss's float32 output, saved; the logits are not
    rest = P.rmsnorm_saved_bytes(m, setting) + P.rope_bytes(m, setting) + log_softmax + P.inputs_bytes(m, setting) + 4
    assert totals[0] - P.layer_saved_bytes(m, setting) == rest


class _LiveBytes(TorchDispatchMode):
    """The bytes of the storages alive, and their peak, as the CPU allocator would count
    them (every tensor an operator returns, freed with its storage)."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, int] = {}
        self.current = self.peak = 0

    def _add(self, t: torch.Tensor) -> None:
        storage = t.untyped_storage()
        key, size = storage.data_ptr(), storage.nbytes()
        if key in self.live or size == 0:
            return
        self.live[key] = size
        self.current += size
        self.peak = max(self.peak, self.current)
        weakref.finalize(storage, self._free, key)

    def _free(self, key: int) -> None:
        self.current -= self.live.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self._add(t)
        return out


SMALL = dict(vocab_size=2000, hidden_size=256, intermediate_size=688, num_hidden_layers=3, num_attention_heads=4)
#: the head's gradient fills a 64 MiB bucket alone (fp32): several buckets per step
BUCKETED = dict(vocab_size=16500, hidden_size=1024, intermediate_size=2816, num_hidden_layers=2, num_attention_heads=8,
                num_key_value_heads=4)
#: a wide MLP and a small vocabulary: the split step's peak is the last layer's MLP backward
SPLIT_MLP = dict(vocab_size=64, hidden_size=256, intermediate_size=2048, num_hidden_layers=3, num_attention_heads=4)


CPU_STEPS = {
    "standard": (SMALL, dict()), "adamw": (SMALL, dict(optimizer="adamw")), "ckpt": (SMALL, dict(checkpoint=True)),
    "bf16-ckpt": (SMALL, dict(dtype="bf16", checkpoint=True)),
    "bf16-gqa": (SMALL | dict(num_key_value_heads=2), dict(dtype="bf16")),
    "tied-ckpt": (SMALL | dict(tie_word_embeddings=True), dict(checkpoint=True)),
    "fused-ckpt-one-bucket": (SMALL, dict(in_backward=True, checkpoint=True)),
    "fused-ckpt-buckets": (BUCKETED, dict(in_backward=True, checkpoint=True)),
    "fused-adamw-buckets": (BUCKETED, dict(in_backward=True, optimizer="adamw")),
    "fused-adamw-tied-buckets": (BUCKETED | dict(tie_word_embeddings=True), dict(in_backward=True, optimizer="adamw")),
    "ckpt-split": (SMALL, dict(checkpoint=True, split=True)),
    # the peak in the first layer's MLP backward: its half recomputed, both halves' inputs
    "fused-ckpt-split-first-layer": (SPLIT_MLP, dict(in_backward=True, checkpoint=True, split=True)),
}


@pytest.mark.parametrize("shape,setting", list(CPU_STEPS.values()), ids=list(CPU_STEPS))
def test_predicted_peak_equals_a_cpu_step(shape, setting):
    """The phases of the plan against the live bytes of a real training step of a Hugging
    Face Llama on the CPU (the second, when the optimizer state exists), cuBLAS
    workspaces left out; SDPA and
    Hugging Face's loss (the ojas loss runs another algorithm on the CPU than the
    kernel the plan models)."""
    s = P.Setting(**(dict(dtype="fp32", optimizer="sgd", batch=2, seq=64) | setting))
    measured, m = _cpu_step_peak(shape, s)
    # on the CPU, embedding_dense_backward has no float32 per-segment buffer (the CUDA kernel's)
    cuda_only = {"end of backward (embedding)": 4 * s.tokens * m.hidden}
    predicted = max(p.total - P.overhead_bytes(m, s) - cuda_only.get(p.name, 0) for p in P.plan(m, s).phases)
    assert abs(predicted - measured) <= 1e-3 * measured, (predicted, measured)


def _cpu_step_peak(shape: dict, s: P.Setting, family: str = "llama") -> tuple[int, P.Model]:
    """The peak live bytes of the second of two training steps of a Hugging Face Llama (or another
    ``family`` of :data:`ojas_ref.tools.plan.FAMILIES`, its config of the same fields) of ``shape``
    on the CPU under ``s`` (:class:`_LiveBytes`; ``split``: optimize_model's, the kernels off),
    and the planner's model of it."""
    from ojas_ref import InBackwardOptimizer, optimize_model

    config = _llama_config(**shape)
    if family != "llama":
        fields = {k: v for k, v in config.to_dict().items() if k != "model_type"}
        config = transformers.AutoConfig.for_model(family, **fields | dict(sliding_window=None))
    optimizer = {"sgd": (torch.optim.SGD, dict(lr=1e-3)),
                 "adamw": (torch.optim.AdamW, dict(lr=1e-4, weight_decay=0.1, foreach=True))}[s.optimizer]
    ids = torch.randint(0, config.vocab_size, (s.batch, s.seq), generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).to(
        {"fp32": torch.float32, "bf16": torch.bfloat16}[s.dtype])
    model.train()
    if s.split:
        optimize_model(model, checkpoint=True, checkpoint_split=True, attention=False, linear_cross_entropy=False,
                       rms_norm=False, swiglu=False, rope=False)
    elif s.checkpoint:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    opt = (InBackwardOptimizer(model.parameters(), optimizer[0], bucket_cap_mb=s.bucket_cap_mb, **optimizer[1])
           if s.in_backward
           else optimizer[0](model.parameters(), **optimizer[1]))
    tracker = _LiveBytes()
    with tracker:
        for t in [ids, *model.parameters()]:
            tracker._add(t)
        for step in range(2):
            if step == 1:
                tracker.peak = tracker.current
            model(input_ids=ids, labels=ids).loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    return tracker.peak, P.Model.from_config(config)


@pytest.mark.parametrize("setting", [dict(), dict(in_backward=True, checkpoint=True)], ids=["standard", "fused-ckpt"])
def test_mistral_without_a_window_is_planned_as_its_cpu_step(setting):
    """Mistral, the other family of :data:`ojas_ref.tools.plan.FAMILIES`: its step on the CPU holds
    what the plan says, as a Llama's does (test_predicted_peak_equals_a_cpu_step)."""
    s = P.Setting(**(dict(dtype="fp32", optimizer="sgd", batch=2, seq=64) | setting))
    measured, m = _cpu_step_peak(SMALL | dict(num_key_value_heads=2), s, family="mistral")
    cuda_only = {"end of backward (embedding)": 4 * s.tokens * m.hidden}
    predicted = max(p.total - P.overhead_bytes(m, s) - cuda_only.get(p.name, 0) for p in P.plan(m, s).phases)
    assert abs(predicted - measured) <= 1e-3 * measured, (predicted, measured)


#: the families of tests/test_optimize_huggingface.py (config class, its overrides there)
TESTED_FAMILIES = {"llama": ("LlamaConfig", {}), "mistral": ("MistralConfig", dict(sliding_window=None)),
                   "qwen2": ("Qwen2Config", {}), "qwen3": ("Qwen3Config", {}), "gemma2": ("Gemma2Config", {}),
                   "gemma3_text": ("Gemma3TextConfig", {}), "phi3": ("Phi3Config", {}), "gpt2": ("GPT2Config", {})}


@pytest.mark.parametrize("family", list(TESTED_FAMILIES))
def test_every_tested_family_is_planned_or_named_with_its_reason(family):
    """A family optimize_model handles is planned (:data:`ojas_ref.tools.plan.FAMILIES`) or refused
    naming it and what the planner would have to model, from a config and from a module."""
    name, overrides = TESTED_FAMILIES[family]
    config = getattr(transformers, name)(**overrides)
    assert config.model_type == family
    if family in P.FAMILIES:
        assert P.Model.from_config(config).params() > 0
        return
    message = f"model_type {family!r} is not modelled by the planner ({P.UNMODELLED[family]}); it models llama and " \
              "mistral decoders"
    with pytest.raises(NotImplementedError, match=re.escape(message)):
        P.Model.from_config(config)
    with pytest.raises(NotImplementedError, match=re.escape(message)):
        P.Model.from_config(config.to_dict())
    if family == "qwen2":  # the module path, as optimize_model's report takes it
        with torch.device("meta"):
            model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
                vocab_size=101, hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4))
        with pytest.raises(NotImplementedError, match=re.escape(message)):
            P.Model.from_module(model)


def test_mistral_with_a_sliding_window_is_refused():
    with pytest.raises(NotImplementedError, match=r"mistral with sliding_window=4096 is not modelled by the planner "
                                                  r"\(the attention mask"):
        P.Model.from_config(transformers.MistralConfig(sliding_window=4096))


def test_cli_plan_config_of_a_family_it_does_not_model(tmp_path, capsys):
    """``ojas plan --config`` of a Gemma 2 or Qwen2 config.json exits 2 naming the family and why
    (it planned them as a Llama with the ojas attention); JSON that is not an object is named."""
    for family, config in (("gemma2", transformers.Gemma2Config()), ("qwen2", transformers.Qwen2Config())):
        path = tmp_path / family / "config.json"
        path.parent.mkdir()
        config.to_json_file(path)
        assert main(["plan", "--config", str(path.parent), "--ojas"]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err == (f"ojas plan: model_type {family!r} is not modelled by the planner "
                                f"({P.UNMODELLED[family]}); it models llama and mistral decoders\n")
    for text, kind in (("[1, 2]", "list"), ("3", "int"), ('{"text_config": "x"}', "str")):
        path = tmp_path / "bad.json"
        path.write_text(text)
        assert main(["plan", "--config", str(path)]) == 2
        assert capsys.readouterr().err == (f"ojas plan: --config {path}: expected a JSON object of config fields "
                                           f"(a Hugging Face config.json), got a JSON {kind}\n")


def test_a_printed_plan_is_its_table():
    plan = P.plan("llama-1b", OJAS_CKPT)
    assert str(plan) == plan.table() and repr(plan).startswith("Plan(model=Model(")


def test_split_lowers_a_cpu_steps_last_layer_peak_as_planned():
    """Every gradient updated at once (bucket_cap_mb=0): the peak is the last layer's MLP backward,
    and the split lowers it by what the plan says, to the byte: the attention half's recomputed
    activations (the recomputed whole layer less the MLP half) less the second input each layer
    keeps. (At that phase the plan is 1 MiB,
    one [tokens, intermediate] float32 tensor, below the CPU step with and without the split.)"""
    s = P.Setting(dtype="fp32", optimizer="sgd", batch=2, seq=64, in_backward=True, checkpoint=True, bucket_cap_mb=0.0)
    peaks, plans = {}, {}
    for split in (False, True):
        peaks[split], m = _cpu_step_peak(SPLIT_MLP, replace(s, split=split))
        plans[split] = P.plan(m, replace(s, split=split))
        assert plans[split].peak_phase.name == "backward: last decoder layer (MLP)"
    saved = P.recomputed_layer_bytes(m, s) - P.recomputed_mlp_half_bytes(m, replace(s, split=True))
    assert saved == P.rmsnorm_saved_bytes(m, s) + P.attention_saved_bytes(m, s) > 0
    second_inputs = m.layers * P.checkpoint_layer_bytes(m, s)  # each layer's h, kept for its MLP half
    assert peaks[False] - peaks[True] == plans[False].peak - plans[True].peak == saved - second_inputs > 0


def test_linear_cross_entropy_workspace_within_the_kernels_bound():
    """gradients + workspace <= 1.15 x gradients (kernels/ojas_kernels/linear_cross_entropy.py), where
    the budget is not the 16 MiB floor."""
    for m in P.PRESETS.values():
        for dtype in P.DTYPE_BYTES:
            s = P.Setting(dtype=dtype, seq=4096, ojas_loss=True)
            grads = P.lce_gradients_bytes(m, s)
            assert P.LCE_WORKSPACE_FRACTION * grads > P.LCE_WORKSPACE_FLOOR
            assert grads + P.lce_workspace_bytes(m, s) <= P.LCE_PEAK_OVER_GRADIENTS * grads


def test_peak_is_the_largest_phase_and_grows_with_tokens():
    m = P.PRESETS["llama-1b"]
    small = P.plan(m, P.Setting(seq=1024))
    big = P.plan(m, P.Setting(seq=4096))
    assert small.peak == max(p.total for p in small.phases) and big.peak > small.peak
    assert all(t.bytes >= 0 for p in big.phases for t in p.terms)


def test_fused_sgd_holds_no_gradients_and_ojas_loss_no_logits():
    m = P.PRESETS["llama-1b"]
    fused = P.plan(m, P.Setting(dtype="fp32", optimizer="sgd", in_backward=True, checkpoint=True))
    assert not any("gradients (all parameters)" == t.name for p in fused.phases for t in p.terms)
    assert not any(p.name == "optimizer step" for p in fused.phases)
    ojas = P.plan(m, P.Setting(ojas_loss=True))
    assert not any("log-softmax" in t.name for p in ojas.phases for t in p.terms)


def test_tied_head_waits_for_the_embedding():
    """A tied weight's gradient is whole only after the embedding's backward: it is held
    through the backward even when the optimizer is fused."""
    s = P.Setting(in_backward=True, ojas_attention=True, ojas_loss=True)
    tied = P.PRESETS["llama-3b"]
    untied = replace(tied, tied=False)
    assert not P.head_updated_first(tied, s) and P.head_updated_first(untied, s)
    layer_phase = {p.name: p for p in P.plan(tied, s).phases}["backward: last decoder layer (MLP)"]
    held = {t.name: t.bytes for t in layer_phase.terms}["tied head's gradient, waiting for the embedding's"]
    assert held == P.head_gradient_bytes(tied, s)
    assert P.bucket_step_temporary_bytes(tied, s) == 0 < P.bucket_step_temporary_bytes(untied, s)


def test_fit_preset_and_batch():
    s = P.Setting(dtype="bf16", optimizer="adamw", in_backward=True, checkpoint=True, ojas_attention=True, ojas_loss=True)
    memory = P.parse_bytes("24GiB")
    best = P.fit_preset(memory, s)
    sizes = list(P.PRESETS.values())
    assert best.peak <= memory
    bigger = [m for m in sizes if m.params() > best.model.params()]
    assert all(P.plan(m, s).peak > memory for m in bigger)
    batch = P.fit_batch(memory, "llama-1b", s)
    assert batch.peak <= memory < P.plan("llama-1b", replace(s, batch=batch.setting.batch + 1)).peak
    assert P.fit_batch(2**20, "llama-1b", s) is None


@pytest.mark.parametrize("text,expected", [("24GiB", 24 * 2**30), ("80GB", 80 * 10**9), ("1.5 MiB", 3 * 2**19),
                                           ("4096", 4096)])
def test_parse_bytes(text, expected):
    assert P.parse_bytes(text) == expected


@pytest.mark.parametrize("make,match", [
    (lambda: P.Setting(dtype="fp16"), "dtype"),
    (lambda: P.Setting(optimizer="adam"), "optimizer"),
    (lambda: P.Setting(batch=0), "batch"),
    (lambda: P.Setting(seq=2.5), "seq"),
    (lambda: P.Setting(in_backward=1), "in_backward"),
    (lambda: P.plan("llama-405b", P.Setting()), "preset"),
    (lambda: P.with_layers(P.PRESETS["llama-1b"], 0), "layers"),
    (lambda: P.Model(64, 2, 4, 3, 100, 100), "kv_heads"),
    (lambda: P.Model.from_config({"hidden_size": 64}), "num_hidden_layers"),
    (lambda: P.Model.from_config(_llama_config(attention_bias=True)), "attention_bias"),
    (lambda: P.parse_bytes("24 gigs"), "GPU_MEMORY"),
])
def test_bad_arguments_name_the_argument(make, match):
    with pytest.raises((ValueError, TypeError, NotImplementedError), match=match):
        make()


def test_fused_is_the_deprecated_name_of_in_backward(capsys):
    """``Setting(fused=...)``, ``Setting.fused`` and ``ojas plan --fused`` (0.1's names) warn and mean
    ``in_backward`` / ``--in-backward``, for one release; both names at once are refused."""
    with pytest.warns(DeprecationWarning, match=r"Setting\(fused=...\) is deprecated.*use in_backward="):
        old = P.Setting(fused=True, checkpoint=True)
    assert old == P.Setting(in_backward=True, checkpoint=True) and old.mode == "in-backward+ckpt"
    with pytest.warns(DeprecationWarning, match="use Setting.in_backward"):
        assert old.fused is True
    with pytest.raises(TypeError, match="both in_backward= and its deprecated alias fused="):
        P.Setting(fused=True, in_backward=True)
    assert main(["plan", "--preset", "llama-1b", "--in-backward", "--checkpoint"]) == 0
    new = capsys.readouterr()
    assert main(["plan", "--preset", "llama-1b", "--fused", "--checkpoint"]) == 0
    deprecated = capsys.readouterr()
    assert deprecated.out == new.out and "optimizer in backward" in new.out and new.err == ""
    assert "--fused is deprecated and will be removed in the next release; use --in-backward" in deprecated.err
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    help_text = capsys.readouterr().out
    assert "--in-backward" in help_text and "--fused" not in help_text


def _imported_modules(text: str, package: str) -> set[str]:
    """The modules a source ``text`` of ``package`` (where its relative imports start) imports
    anywhere, function bodies included: ``from a import b`` counts as ``a`` and ``a.b``."""
    found = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(p for p in (base, node.module) if p)
            found |= {module} | {f"{module}.{alias.name}" for alias in node.names}
    return found


def test_imported_modules_sees_every_form_of_import():
    text = ("import ojas_ref.tools.plan as P\ndef f():\n    from ojas_ref import tools\n"
            "    from ...tools import cli\n    from . import report\n")
    assert _imported_modules(text, "ojas_ref.integrations.hf") == {
        "ojas_ref.tools.plan", "ojas_ref", "ojas_ref.tools", "ojas_ref.tools.cli", "ojas_ref.integrations.hf",
        "ojas_ref.integrations.hf.report"}


PACKAGE = Path(P.__file__).resolve().parents[1]


@pytest.mark.xfail(strict=True, reason="ojas_ref/integrations/hf/report.py (OptimizationReport.plan) and optimize.py "
                                       "(_planned) import ojas_ref.tools.plan until they import ojas_ref.memory")
def test_no_library_module_imports_the_tools():
    """The layers: functional, nn, optim, integrations, verification and memory import nothing of
    ojas_ref.tools (the commands and their helpers), which may import them."""
    upward = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] == "tools":
            continue
        package = ".".join(path.parent.relative_to(PACKAGE.parent).parts)
        upward[str(path.relative_to(PACKAGE.parent))] = sorted(
            m for m in _imported_modules(path.read_text(), package) if m.split(".")[:2] == ["ojas_ref", "tools"])
    assert {path: modules for path, modules in upward.items() if modules} == {}


def test_cli_plan_prints_the_breakdown(capsys):
    args = ["plan", "--preset", "llama-1b", "--dtype", "bf16", "--optimizer", "adamw", "--in-backward", "--checkpoint",
            "--ojas", "--batch", "1", "--seq", "2048"]
    assert main(args) == 0
    out = capsys.readouterr().out
    expected = P.plan("llama-1b", OJAS_CKPT)
    assert f"peak {P.gib(expected.peak)} GiB" in out and "weights" in out and "predicted" in out


def test_cli_plan_layers_changes_the_depth_only(capsys):
    """``--layers 58`` of llama-70b's shape: the 50B model of bench_memory.py's at-scale rows."""
    args = ["plan", "--preset", "llama-70b", "--layers", "58", "--dtype", "bf16", "--optimizer", "sgd", "--in-backward",
            "--checkpoint", "--ojas"]
    assert main(args) == 0
    model = P.with_layers(P.PRESETS["llama-70b"], 58)
    per_layer = 8192 * (2 * 8192 + 2 * 1024) + 3 * 8192 * 28672 + 2 * 8192
    assert model.params() == 58 * per_layer + 2 * 32000 * 8192 + 8192 and model.kv_heads == 8
    setting = P.Setting(dtype="bf16", optimizer="sgd", in_backward=True, checkpoint=True, ojas_attention=True,
                        ojas_loss=True, ojas_rms_norm=True, ojas_swiglu=True)
    out = capsys.readouterr().out
    assert "llama-70b@58 (50.15B parameters)" in out and f"peak {P.gib(P.plan(model, setting).peak)} GiB" in out


def test_cli_plan_from_a_config_file(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_llama_config().to_dict()))
    assert main(["plan", "--config", str(path), "--seq", "32"]) == 0
    m = P.Model.from_config(_llama_config())
    assert f"peak {P.gib(P.plan(m, P.Setting(seq=32)).peak)} GiB" in capsys.readouterr().out


def test_cli_fit_labels_measured_rows(capsys):
    assert main(["plan", "--fit", "139GiB", "--preset", "llama-1b", "--batch", "1"]) == 0
    out = capsys.readouterr().out
    assert "predicted" in out and not re.search(r"measured \d", out)  # batch > 1 fits: none of it was run
    assert main(["plan", "--fit", "24GiB", "--seq", "2048"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") >= 16 and "llama-" in out


def test_cli_fit_measured_row(capsys):
    """A fit whose answer is the recorded configuration carries the measured figure."""
    s = RECORDS[0][0]
    measured = dict(RECORDS)[s]  # the latest record of the setting, as the CLI shows it
    memory = P.plan("llama-1b", s).peak + 2**20
    assert main(["plan", "--fit", str(memory), "--dtype", s.dtype, "--optimizer", s.optimizer,
                 "--seq", str(s.seq)]) == 0
    out = capsys.readouterr().out
    assert f"measured {P.gib(measured)}" in out


def test_cli_bad_arguments(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["plan", "--preset", "llama-1b", "--fit", "lots"])
    assert exit_info.value.code == 2 and "--fit" in capsys.readouterr().err
    assert main(["plan", "--preset", "llama-1b", "--batch", "0"]) == 2
    assert "batch" in capsys.readouterr().err


# --------------------------------------------------------------------------
# The picture (plot_plan, ojas plan --plot)
# --------------------------------------------------------------------------

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
OJAS_CKPT = P.Setting(dtype="bf16", optimizer="adamw", in_backward=True, checkpoint=True, ojas_attention=True,
                      ojas_loss=True, ojas_rms_norm=True, ojas_swiglu=True)


def _stacked(ax, rows: int) -> list[float]:
    """Per row, the summed widths of the axes' tensor-class bars (labelled "_class" on the
    right panel, out of the legend)."""
    classes = {name for name, _ in P.TENSOR_CLASSES}
    sums = [0.0] * rows
    for container in ax.containers:
        if container.get_label().lstrip("_") in classes:
            for i, patch in enumerate(container.patches):
                sums[i] += patch.get_width()
    return sums


def _is_png(path) -> bool:
    data = path.read_bytes()
    return data[:8] == PNG_MAGIC and len(data) > 20_000


def test_plot_plan_writes_a_png_with_the_measured_peak(tmp_path):
    pytest.importorskip("matplotlib")
    result = P.plan("llama-1b", OJAS_CKPT)
    measured = P.measured_peak(result.model, result.setting)
    assert measured == dict(RECORDS)[OJAS_CKPT]
    path = tmp_path / "plan.png"
    fig = P.plot_plan(result, path, measured)
    assert _is_png(path)
    full, zoom = fig.axes[:2]
    texts = [t.get_text() for ax in fig.axes for t in ax.texts] + [fig.get_suptitle()]
    assert any(f"{P.gib(measured)}  measured" in t for t in texts)
    assert any(f"{P.gib(result.peak)}  peak" in t for t in texts)
    labels = [t.get_text() for t in full.get_yticklabels()]
    assert labels == [p.name for p in result.phases] + ["measured on an H200"]
    # the measured bar and the dashed line are at the measured value (less weights and state on the right)
    measured_bar = [c for c in full.containers if c.get_label().startswith("measured peak")]
    assert len(measured_bar) == 1 and measured_bar[0].patches[0].get_width() == pytest.approx(measured / 2**30)
    fixed = P.weights_bytes(result.model, OJAS_CKPT) + P.optimizer_state_bytes(result.model, OJAS_CKPT)
    assert [line.get_xdata()[0] for line in full.lines] == [pytest.approx(measured / 2**30)]
    assert [line.get_xdata()[0] for line in zoom.lines] == [pytest.approx((measured - fixed) / 2**30)]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert len(legend) == len(set(legend)) and legend[-1].startswith("measured peak")
    assert set(legend[:-1]) == {P.tensor_class(t.name) for p in result.phases for t in p.terms if t.bytes}
    # every phase's stack adds up to its predicted total
    assert _stacked(full, len(result.phases)) == pytest.approx([p.total / 2**30 for p in result.phases])
    assert _stacked(zoom, len(result.phases)) == pytest.approx([(p.total - fixed) / 2**30 for p in result.phases])


def test_plot_plan_without_a_measured_peak(tmp_path):
    pytest.importorskip("matplotlib")
    result = P.plan("llama-3b", P.Setting(dtype="fp32", optimizer="sgd"))
    assert P.measured_peak(result.model, result.setting) is None
    path = tmp_path / "PLAN.PNG"
    fig = P.plot_plan(result, path)
    assert _is_png(path)
    full = fig.axes[0]
    assert not full.lines and "measured" not in " ".join(t.get_text() for ax in fig.axes for t in ax.texts)
    assert len(full.get_yticks()) == len(result.phases)
    assert _stacked(full, len(result.phases)) == pytest.approx([p.total / 2**30 for p in result.phases])


def test_every_term_has_a_tensor_class():
    for m in P.PRESETS.values():
        for dtype in P.DTYPE_BYTES:
            for optimizer in P.OPTIMIZERS:
                for fused in (False, True):
                    for checkpoint in (False, True):
                        for ojas in (False, True):
                            s = P.Setting(dtype=dtype, optimizer=optimizer, in_backward=fused, checkpoint=checkpoint,
                                          ojas_attention=ojas, ojas_loss=ojas)
                            for phase in P.plan(m, s).phases:
                                for t in phase.terms:
                                    assert P.tensor_class(t.name) != "other", t.name
    assert P.tensor_class("something new") == "other"


def test_plot_plan_bad_paths(tmp_path):
    result = P.plan("llama-1b", P.Setting())
    with pytest.raises(ValueError, match=r"must end in \.png"):
        P.plot_plan(result, tmp_path / "plan.jpg")
    with pytest.raises(ValueError, match="does not exist"):
        P.plot_plan(result, tmp_path / "missing" / "plan.png")
    (tmp_path / "dir.png").mkdir()
    with pytest.raises(ValueError, match="is a directory"):
        P.plot_plan(result, tmp_path / "dir.png")
    with pytest.raises(ValueError, match="measured"):
        P.plot_plan(result, tmp_path / "plan.png", measured=-1)
    with pytest.raises(TypeError, match="Plan"):
        P.plot_plan(result.peak_phase, tmp_path / "plan.png")
    assert not (tmp_path / "plan.png").exists()


def test_plot_does_not_import_matplotlib_until_asked():
    import subprocess
    import sys

    code = "import sys, ojas_ref.tools.plan; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_cli_plot_passes_the_measured_peak(tmp_path, capsys, monkeypatch):
    pytest.importorskip("matplotlib")
    calls = []
    original = P.plot_plan

    def spy(result, path, measured=None):
        calls.append((result.setting, measured))
        return original(result, path, measured)

    monkeypatch.setattr(P, "plot_plan", spy)
    path = tmp_path / "plan.png"
    assert main(["plan", "--preset", "llama-1b", "--dtype", "bf16", "--optimizer", "adamw", "--in-backward",
                 "--checkpoint", "--ojas", "--plot", str(path)]) == 0
    assert _is_png(path) and f"plot written to {path}" in capsys.readouterr().out
    assert calls == [(OJAS_CKPT, dict(RECORDS)[OJAS_CKPT])]
    assert main(["plan", "--preset", "llama-3b", "--plot", str(tmp_path / "3b.png")]) == 0
    assert calls[-1][1] is None and _is_png(tmp_path / "3b.png")


def test_cli_plot_bad_arguments(tmp_path, capsys):
    assert main(["plan", "--preset", "llama-1b", "--plot", str(tmp_path / "plan.pdf")]) == 2
    err = capsys.readouterr().err
    assert "ojas plan:" in err and ".png" in err
    assert main(["plan", "--preset", "llama-1b", "--plot", str(tmp_path / "no" / "plan.png")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["plan", "--fit", "24GiB", "--plot", str(tmp_path / "plan.png")]) == 2
    assert "--fit" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


# --------------------------------------------------------------------------
# Offloaded checkpoints and host optimizer state: the formulas' bookkeeping (their H200
# records are checked above, test_predicted_peak_and_host_of_the_memory_records)
# --------------------------------------------------------------------------

@pytest.mark.parametrize("base", [
    P.Setting(dtype="bf16", optimizer="adamw", checkpoint=True),
    P.Setting(dtype="fp32", optimizer="sgd", checkpoint=True, seq=4096),
    OJAS_CKPT,
], ids=lambda s: s.mode)
def test_offload_moves_the_checkpoints_to_host(base):
    m = P.PRESETS["llama-1b"]
    on, off = P.plan(m, replace(base, offload=True)), P.plan(m, base)
    per_layer = P.checkpoint_layer_bytes(m, base)
    assert per_layer == base.size * base.tokens * m.hidden
    assert off.host == () and off.host_bytes == 0
    assert on.host_bytes - off.host_bytes == P.checkpoint_bytes(m, base) == m.layers * per_layer
    # every phase that held all the checkpoints now holds two layer inputs (the first layer's is its own)
    for a, b in zip(off.phases, on.phases):
        assert a.name == b.name and b.total in (a.total, a.total - (m.layers - 2) * per_layer)
    assert off.peak - on.peak <= (m.layers - 2) * per_layer
    assert on.setting.mode == base.mode + "+offload"


@pytest.mark.parametrize("base", [  # peaks at the loss's backward, and in the last layer's backward
    P.Setting(dtype="bf16", optimizer="sgd", checkpoint=True, batch=16, seq=4096),
    replace(OJAS_CKPT, batch=8, seq=4096),
], ids=lambda s: s.mode)
def test_offload_peak_is_lower_by_all_but_two_layer_inputs(base):
    """Where the peak holds the checkpoints (not the optimizer step, nor the first layer's backward)."""
    m, s = P.PRESETS["llama-1b"], base
    off, on = P.plan(m, s), P.plan(m, replace(s, offload=True))
    assert off.peak_phase.name == on.peak_phase.name != "backward: first decoder layer (MLP)"
    assert off.peak - on.peak == (m.layers - 2) * P.checkpoint_layer_bytes(m, s)


@pytest.mark.parametrize("base", [
    P.Setting(dtype="bf16", optimizer="adamw", in_backward=True),
    P.Setting(dtype="fp32", optimizer="adamw", in_backward=True, checkpoint=True, offload=True),
    OJAS_CKPT,
], ids=lambda s: s.mode)
@pytest.mark.parametrize("name", ["llama-1b", "llama-0.5b"])  # untied head, tied head
def test_host_state_moves_the_optimizer_state_to_host(base, name):
    m = P.PRESETS[name]
    on, off = P.plan(m, replace(base, host_state=True)), P.plan(m, base)
    state = P.optimizer_state_bytes(m, base)
    assert on.host_bytes - off.host_bytes == state > 0
    bucket = max(P.head_gradient_bytes(m, base), P.BUCKET_CAP_BYTES + max(P.gradient_order(m)) * base.size)
    for a, b in zip(off.phases, on.phases):
        in_flight = sum(t.bytes for t in b.terms if t.name.startswith("optimizer state: bucket"))
        assert b.total == a.total - state + in_flight
        assert 0 <= in_flight <= 2 * bucket  # AdamW's two moments of at most one bucket's parameters
    assert not any(t.name == "optimizer state" for p in on.phases for t in p.terms)
    assert on.phases[0].total == off.phases[0].total - state  # between updates no state is on the device
    assert on.peak < off.peak and on.setting.mode == base.mode + "+host-state"


def test_host_state_keeps_one_buckets_state_at_its_update():
    """The head's bucket (the head's gradient alone, untied llama-1b) is on the device while it is
    stepped, and the last bucket (pending gradients and the embedding's) at the end."""
    m, s = P.PRESETS["llama-1b"], P.Setting(dtype="bf16", optimizer="adamw", in_backward=True, host_state=True)
    phases = {p.name: p for p in P.plan(m, s).phases}

    def in_flight(phase):
        return sum(t.bytes for t in phases[phase].terms if t.name.startswith("optimizer state: bucket"))

    assert in_flight("backward: head's bucket update") == 2 * P.head_gradient_bytes(m, s)
    last = P.pending_gradients_bytes(m, s, len(P.gradient_order(m)) - 1) + P.head_gradient_bytes(m, s)
    assert in_flight("end of backward (last bucket's update)") == 2 * last
    assert in_flight("end of forward (linear cross-entropy)" if s.ojas_loss else "end of forward (loss)") == 0
    sgd = P.plan(m, replace(s, optimizer="sgd"))  # no state: nothing moves
    assert sgd.host_bytes == 0 and sgd.peak == P.plan(m, replace(s, optimizer="sgd", host_state=False)).peak


def test_existing_settings_keep_their_names_and_records():
    assert {s.mode for s, _ in RECORDS} >= {"standard", "standard+ckpt", "ojas", "ojas+ckpt"}
    assert all(not s.offload and not s.host_state for s, _ in RECORDS)
    assert P.Setting(checkpoint=True, offload=True, in_backward=True, host_state=True).mode == "in-backward+ckpt+offload+host-state"
    # recorded by benchmarks/bench_memory.py (its +offload row), not by bench_optimize_model
    assert P.measured_peak(ONE_B, replace(OJAS_CKPT, offload=True)) == next(
        row["peak"] for m, s, row in P.load_memory_records(MEMORY_RECORDS_PATHS[0]) if s.offload and not s.host_state
        and s.dtype == OJAS_CKPT.dtype and s.optimizer == OJAS_CKPT.optimizer)


@pytest.mark.parametrize("changes, field", [
    (dict(offload=True), "offload"), (dict(offload=True, in_backward=True), "offload"),
    (dict(host_state=True), "host_state"), (dict(host_state=True, checkpoint=True), "host_state"),
])
def test_offload_and_host_state_need_their_technique(changes, field):
    with pytest.raises(ValueError, match=field):
        P.Setting(**changes)
    with pytest.raises(TypeError, match="offload"):
        P.Setting(checkpoint=True, offload=1)


def test_cli_offload_and_host_state_print_the_host_memory(capsys):
    """--host-state plans whole-parameter updates (InBackwardOptimizer's default, what bench_memory's
    records measured: their record is printed); with --state-slice-mb 128, the slices."""
    assert main(["plan", "--preset", "llama-1b", "--in-backward", "--checkpoint", "--ojas", "--offload",
                 "--host-state", "--state-slice-mb", "128"]) == 0
    out = capsys.readouterr().out
    sliced = P.plan("llama-1b", replace(OJAS_CKPT, offload=True, host_state=True, state_slice_mb=P.STATE_SLICE_MB))
    assert f"peak {P.gib(sliced.peak)} GiB" in out and "measured on an H200" not in out
    assert main(["plan", "--preset", "llama-1b", "--in-backward", "--checkpoint", "--ojas", "--offload",
                 "--host-state"]) == 0
    out = capsys.readouterr().out
    expected = P.plan("llama-1b", replace(OJAS_CKPT, offload=True, host_state=True))
    assert expected.peak > sliced.peak
    assert f"peak {P.gib(expected.peak)} GiB" in out and "ojas+ckpt+offload+host-state" in out
    assert f"host memory {P.gib(expected.host_bytes)} GiB" in out
    assert "layer inputs (offloaded checkpoints, pinned)" in out and "optimizer state (host" in out
    measured = P.measured_peak(ONE_B, replace(OJAS_CKPT, offload=True, host_state=True))
    assert f"measured on an H200: {P.gib(measured)} GiB" in out  # bench_memory's "all" row of bf16 AdamW
    assert main(["plan", "--preset", "llama-1b"]) == 0
    assert "host memory" not in capsys.readouterr().out
    assert main(["plan", "--preset", "llama-1b", "--offload"]) == 2
    assert "--offload needs --checkpoint" in capsys.readouterr().err
    assert main(["plan", "--preset", "llama-1b", "--checkpoint", "--host-state"]) == 2
    assert "--host-state needs --in-backward" in capsys.readouterr().err
    assert main(["plan", "--fit", "24GiB", "--in-backward", "--checkpoint", "--offload", "--host-state"]) == 0
    assert "in-backward+ckpt+offload+host-state" in capsys.readouterr().out
    assert main(["plan", "--preset", "llama-1b", "--in-backward", "--state-slice-mb", "64"]) == 2
    assert "--state-slice-mb needs --host-state" in capsys.readouterr().err
    for bad in ("0", "-1", "inf", "big"):
        with pytest.raises(SystemExit):
            main(["plan", "--preset", "llama-1b", "--in-backward", "--host-state", "--state-slice-mb", bad])
        assert "--state-slice-mb must be" in capsys.readouterr().err


SLICED_1B = replace(OJAS_CKPT, dtype="fp32", optimizer="adamw", offload=True, host_state=True,
                    state_slice_mb=P.STATE_SLICE_MB)


def test_sliced_host_state_keeps_one_slice_of_the_head_and_embedding():
    """state_slice_mb 128 (InBackwardOptimizer's option, off by default): the 1.06B fp32 head (250 MiB, 500 MiB of
    AdamW state) and embedding are updated in slices of 8 Mi elements (two slices' state in flight,
    128 MiB, and 32 MiB of foreach temporaries); the MLP weights (88 MiB of state) stay whole. The head's update phase is
    the unsliced one less its whole state and temporaries plus one slice's; the head is not staged
    at its hook; the peak falls under issue 14's 4.6 GiB (a prediction; not yet measured)."""
    m = P.PRESETS["llama-1b"]
    whole, sliced = P.plan(m, replace(SLICED_1B, state_slice_mb=None)), P.plan(m, SLICED_1B)
    assert P.slice_elements(SLICED_1B) == 8 * 2**20
    assert P.sliced(SLICED_1B, m.vocab * m.hidden) and not P.sliced(SLICED_1B, m.hidden * m.intermediate)
    assert not P.sliced(replace(SLICED_1B, state_slice_mb=None), m.vocab * m.hidden)
    assert not P.sliced(replace(SLICED_1B, optimizer="sgd"), m.vocab * m.hidden)  # no state
    w, t = {p.name: p for p in whole.phases}, {p.name: p for p in sliced.phases}
    head = P.head_gradient_bytes(m, SLICED_1B)
    one_slice = P.slice_state_bytes(m, SLICED_1B) + P.slice_temporary_bytes(m, SLICED_1B)
    assert one_slice == (128 + 32) * 2**20  # two slices' state, one slice's sqrt
    assert (t["backward: head's bucket update, one slice at a time"].total
            == w["backward: head's bucket update"].total - 3 * head + one_slice)
    assert t["backward: head gradient"].total == w["backward: head gradient"].total - 2 * head
    assert "end of backward (the embedding's update, one slice at a time)" in t
    assert sliced.host_bytes == whole.host_bytes
    assert sliced.peak < 4.6 * 2**30 < whole.peak
    # parameters within the slice: the plan of whole parameters
    assert P.plan(m, replace(SLICED_1B, state_slice_mb=1e4)).peak == whole.peak


def test_state_slice_default_is_whole_parameters_and_bench_memory_records_it():
    """Slicing is off by default in the optimizer and the report's plan, on at STATE_SLICE_MB in
    bench_memory's rows; a row that records a slice size (None: whole) is planned with it."""
    import inspect

    from benchmarks import bench_memory
    from ojas_ref.optim.in_backward import InBackwardOptimizer, _SLICE_ALIGN
    from ojas_ref.integrations.hf.optimize import OptimizationReport
    for fn in (InBackwardOptimizer, OptimizationReport.plan):
        assert inspect.signature(fn).parameters["state_slice_mb"].default is None
    assert _SLICE_ALIGN == P.SLICE_ALIGN
    t = bench_memory.techniques("all", "fp32", "adamw")
    assert "state_slice_mb" in t and t["state_slice_mb"] == P.STATE_SLICE_MB
    row = dict(mode="all", dtype="fp32", optimizer="adamw", techniques=t)
    assert P.memory_record_setting(row, 1, 2048) == replace(SLICED_1B, batch=1, seq=2048,
                                                            split=True)  # "all" splits the checkpoints too
    whole = dict(row, techniques=dict(t, state_slice_mb=None))
    assert P.memory_record_setting(whole, 1, 2048) == replace(SLICED_1B, batch=1, seq=2048, state_slice_mb=None,
                                                              split=True)
    old = dict(row, techniques={k: v for k, v in t.items() if k != "state_slice_mb"})  # recorded before slicing
    assert P.memory_record_setting(old, 1, 2048).state_slice_mb is None


@pytest.mark.parametrize("changes,error", [
    (dict(state_slice_mb=64.0), ValueError), (dict(host_state=True, in_backward=True, state_slice_mb=0.0), ValueError),
    (dict(host_state=True, in_backward=True, state_slice_mb=float("nan")), ValueError),
    (dict(host_state=True, in_backward=True, state_slice_mb="64"), TypeError),
])
def test_bad_state_slice_mb(changes, error):
    with pytest.raises(error, match="state_slice_mb"):
        P.Setting(**changes)


def test_plot_of_offload_and_host_state(tmp_path):
    pytest.importorskip("matplotlib")
    result = P.plan("llama-1b", replace(OJAS_CKPT, offload=True, host_state=True))
    assert all(P.tensor_class(t.name) != "other" for p in result.phases for t in p.terms)
    P.plot_plan(result, tmp_path / "plan.png")
    assert _is_png(tmp_path / "plan.png")


def test_head_update_drops_the_head_gradient():
    """--head-update (InBackwardOptimizer(head_weight=...)): no [V, hidden] gradient in any phase
    (neither the kernel's forward gradients nor the head's bucket), the loss phases lower by
    most of that much (one slab's workspace comes instead), the layers' phases unchanged;
    refused without fused SGD and the ojas loss, and for a tied head."""
    m = P.PRESETS["llama-1b"]
    base = P.Setting(dtype="fp32", optimizer="sgd", in_backward=True, checkpoint=True, offload=True, ojas_attention=True,
                     ojas_loss=True, ojas_rms_norm=True, ojas_swiglu=True)
    dense, head = P.plan(m, base), P.plan(m, replace(base, head_update=True))
    assert head.setting.mode.endswith("+head-update")
    grads = {"gradient of the head weight", "loss: gradients computed in the forward"}
    assert not any(t.name in grads and t.bytes for p in head.phases for t in p.terms)
    d, h = ({p.name: p.total for p in plan.phases} for plan in (dense, head))
    # the [V, hidden] gradient (250 MiB) goes, one vocabulary slab's workspace (about 60 MiB) comes
    saved = 0.6 * P.head_gradient_bytes(m, base)
    assert h["backward: loss, head updated chunk by chunk"] < d["backward: head gradient"] - saved
    assert h["end of forward (linear cross-entropy, 4 products)"] < d["end of forward (linear cross-entropy)"] - saved
    assert h["backward: last decoder layer (MLP)"] == d["backward: last decoder layer (MLP)"]
    with pytest.raises(ValueError, match="head_update=True needs"):
        replace(base, optimizer="adamw", head_update=True)
    with pytest.raises(ValueError, match="tied head"):
        P.plan(replace(m, tied=True), replace(base, head_update=True))


# --------------------------------------------------------------------------
# Split checkpoints and the bucket size (optimize_model(checkpoint_split=True),
# InBackwardOptimizer(bucket_cap_mb=...)); the CPU steps above check the split's phases
# --------------------------------------------------------------------------

SGD_1B = P.Setting(dtype="fp32", optimizer="sgd", in_backward=True, checkpoint=True, offload=True, head_update=True,
                   ojas_attention=True, ojas_loss=True, ojas_rms_norm=True, ojas_swiglu=True)


@pytest.mark.parametrize("offload", [False, True])
def test_split_recomputes_the_mlp_half_alone_and_keeps_two_inputs_per_layer(offload):
    m = P.PRESETS["llama-1b"]
    whole = replace(SGD_1B, offload=offload)
    split = replace(whole, split=True)
    w, t = ({p.name: p for p in P.plan(m, s).phases} for s in (whole, split))
    layer_input = P.checkpoint_layer_bytes(m, whole)
    assert P.checkpoints_per_layer(split) == 2 * P.checkpoints_per_layer(whole) == 2
    assert P.plan(m, split).host_bytes == (2 * m.layers * layer_input if offload else 0)
    attention_half = P.recomputed_layer_bytes(m, whole) - P.recomputed_mlp_half_bytes(m, split)
    assert attention_half == P.rmsnorm_saved_bytes(m, whole) + P.attention_saved_bytes(m, whole)
    more_inputs = 0 if offload else m.layers * layer_input  # on the device unless offloaded
    mlp = "backward: last decoder layer (MLP)"
    assert t[mlp].total == w[mlp].total - attention_half + more_inputs
    first = "backward: first decoder layer (MLP)"
    assert t[first].total == w[first].total - attention_half + layer_input  # the attention half's input too
    attention = "backward: last decoder layer (attention, split)"
    assert attention in t and attention not in w and t[attention].total < t[mlp].total
    assert {t.name for t in t[attention].terms} >= {"saved activations: recomputed last attention half (split)",
                                                     "layer backward temporaries (attention)"}
    assert P.plan(m, split).setting.mode.endswith("+split" + ("+offload" if offload else "") + "+head-update")


def test_a_32_mib_bucket_updates_down_proj_at_once():
    """down_proj's 44 MiB fp32 gradient waits in a 64 MiB bucket through the last layer's MLP backward;
    in a 32 MiB one it fills the bucket and is updated alone at once. The issue's fp32 SGD step
    (offload, head update, split): above 4.3 GiB with 64 MiB buckets, below with 32 (predicted)."""
    m = P.PRESETS["llama-1b"]
    split = replace(SGD_1B, split=True)
    small = replace(split, bucket_cap_mb=32.0)
    assert P.bucket_cap_bytes(split) == P.BUCKET_CAP_BYTES == 64 * 2**20 and P.bucket_cap_bytes(small) == 32 * 2**20
    down = P.down_proj_gradient_bytes(m, split)
    assert P.pending_gradients_bytes(m, split, 2) == down + m.hidden * 4 and P.pending_gradients_bytes(m, small, 2) == 0
    big, little = P.plan(m, split), P.plan(m, small)
    assert little.peak_phase.name == "backward: last decoder layer (MLP)"
    assert big.peak - little.peak == down + m.hidden * 4
    assert little.peak < 4.3 * 2**30 < big.peak < P.plan(m, SGD_1B).peak
    assert little.setting.mode.endswith("+bucket-32MiB") and "bucket" not in big.setting.mode
    assert P.plan(m, replace(SGD_1B, bucket_cap_mb=64)).peak == P.plan(m, SGD_1B).peak


@pytest.mark.parametrize("changes,error,match", [
    (dict(split=True), ValueError, "split=True needs checkpoint"),
    (dict(checkpoint=True, split=1), TypeError, "split must be a bool"),
    (dict(bucket_cap_mb=-1.0), ValueError, "bucket_cap_mb"), (dict(bucket_cap_mb=float("inf")), ValueError, "bucket"),
    (dict(bucket_cap_mb="64"), TypeError, "bucket_cap_mb"), (dict(bucket_cap_mb=True), TypeError, "bucket_cap_mb"),
])
def test_bad_split_and_bucket_settings(changes, error, match):
    with pytest.raises(error, match=match):
        P.Setting(**changes)


def test_cli_split_and_bucket_mb(capsys):
    argv = ["plan", "--preset", "llama-1b", "--dtype", "fp32", "--optimizer", "sgd", "--in-backward", "--checkpoint",
            "--offload", "--head-update", "--ojas", "--split", "--bucket-mb", "32"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    expected = P.plan("llama-1b", replace(SGD_1B, split=True, bucket_cap_mb=32.0))
    assert f"peak {P.gib(expected.peak)} GiB" in out and "ojas+ckpt+split+offload+head-update+bucket-32MiB" in out
    assert "recomputed last MLP half (split)" in out and "backward: last decoder layer (attention, split)" in out
    for bad, message in ((["plan", "--split"], "--split needs --checkpoint"),
                         (["plan", "--checkpoint", "--bucket-mb", "32"], "--bucket-mb needs --in-backward")):
        assert main(bad) == 2
        assert message in capsys.readouterr().err
    for bad in ("-1", "nan", "big"):
        with pytest.raises(SystemExit):
            main(["plan", "--in-backward", "--bucket-mb", bad])
        assert "--bucket-mb must be" in capsys.readouterr().err


def test_memory_rows_record_the_split_and_the_bucket():
    """bench_memory's rows name the split and the bucket size in their techniques; older rows (without
    them) were whole-layer checkpoints and 64 MiB buckets."""
    t = dict(checkpoint="offload", sparse_embedding=False, state_device=None, head_update=True)
    row = dict(mode="all", dtype="fp32", optimizer="sgd", techniques=t)
    assert P.memory_record_setting(row, 1, 2048) == replace(SGD_1B, batch=1, seq=2048)
    new = dict(row, techniques=dict(t, split=True, bucket_cap_mb=32.0))
    assert P.memory_record_setting(new, 1, 2048) == replace(SGD_1B, split=True, bucket_cap_mb=32.0)


def test_the_recorded_split_row_is_planned():
    """The H200 row of fp32 AdamW "all" (offload, split, host state in 128 MiB slices; a bench_memory row
    without a preset: the file's config, the 1.06B model): its host bytes are the two inputs per layer and
    the state (checked within 1% with the others above), its peak within 1.5% of the plan; the same for
    every split row of issue 14's one run (32 MiB buckets)."""
    rows = [(m, s, r) for m, s, r in MEMORY_RECORDS if s.split]
    assert len(rows) >= 4
    for m, s, r in rows:
        assert m.name == "llama-1b" and s.offload
        predicted = P.plan(m, s)
        inputs = 2 * m.layers * P.checkpoint_layer_bytes(m, s)
        assert predicted.host_bytes == (P.optimizer_state_bytes(m, s) if s.host_state else 0) + inputs
        # 1.5%: the planner's largest error on the earlier offload rows (fp32 AdamW "all" at 32 MiB: +1.03%)
        assert abs(predicted.peak - r["peak"]) <= 0.015 * r["peak"]
    assert any(s.host_state and s.state_slice_mb == P.STATE_SLICE_MB for _, s, _ in rows)
    assert P.config_model(dict(hidden=64, layers=2, heads=4, intermediate=128, vocab=100)).name == "custom"
