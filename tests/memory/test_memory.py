"""``ojas_ref.memory``: the predicted peaks against the peaks measured on an H200 (the 16
configurations three times, tests/fixtures/plan/bench_optimize_model_h200*.json: before the
fused RMSNorm and SwiGLU, with them, and with the fused RoPE and the attention output written
in place; and bench_memory's techniques and presets), the formulas against what a Hugging Face
model on the CPU or the meta device actually holds, and the settings' bookkeeping; the library
imports nothing of ojas_ref.tools."""

from __future__ import annotations

import ast
import re
import weakref
from dataclasses import fields, replace
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from _plan_fixtures import (  # tests/
    MEMORY_RECORDS,
    OJAS,
    OJAS_CKPT,
    ONE_B,
    RECORDS,
    SGD_1B,
    SLICED_1B,
    changed,
    llama_config,
)
from ojas_ref import memory as P
from ojas_ref.recipe import MemoryRecipe, dtype_name

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()


#: issue 15's bar for the 1.06B configurations; every record is inside it (errors of
#: -1.0% to +0.12% for the first file when written; 0.0% to +1.6% for the second, whose
#: peaks after its first leave out the 64 MiB of cuBLAS workspaces: see its note; the third's
#: are printed by ``ojas plan`` beside its measured peak)
TOLERANCE = 0.05


def _id(record: tuple[P.Setting, int]) -> str:
    s = record[0]
    return f"{dtype_name(s.dtype)}-{s.optimizer}-{s.mode}"


@pytest.mark.parametrize("record", RECORDS, ids=_id)
def test_predicted_peak_within_5_percent_of_measured(record):
    setting, measured = record
    predicted = P.plan(ONE_B, setting).peak
    assert abs(predicted - measured) <= TOLERANCE * measured, (
        f"predicted {predicted / 2**30:.3f} GiB, measured {measured / 2**30:.3f} GiB "
        f"({100 * (predicted - measured) / measured:+.2f}%)"
    )


def _memory_id(record: tuple[P.Model, P.Setting, dict]) -> str:
    m, s, _ = record
    return f"{m.name}-{dtype_name(s.dtype)}-{s.optimizer}-{s.mode}"


@pytest.mark.parametrize("record", MEMORY_RECORDS, ids=_memory_id)
def test_predicted_peak_and_host_of_the_memory_records(record):
    """Issue 15's tolerances: within 5% of the measured peak for the 1.06B model, 10% for the
    others; the host bytes (offloaded checkpoints, host state) within 1% of those counted."""
    model, setting, row = record
    predicted = P.plan(model, setting)
    tolerance = TOLERANCE if model.name == "llama-1b" else 0.10
    assert abs(predicted.peak - row["peak"]) <= tolerance * row["peak"], (
        f"predicted {predicted.peak / 2**30:.3f} GiB, measured {row['peak'] / 2**30:.3f} GiB"
    )
    if row["host"] is not None:
        assert abs(predicted.host_bytes - row["host"]) <= 0.01 * row["host"]


@pytest.mark.parametrize("name", list(P.PRESETS))
def test_param_count_of_presets_matches_meta_model(name):
    m = P.PRESETS[name]
    config = llama_config(
        vocab_size=m.vocab,
        hidden_size=m.hidden,
        intermediate_size=m.intermediate,
        num_hidden_layers=m.layers,
        num_attention_heads=m.heads,
        num_key_value_heads=m.kv_heads,
        tie_word_embeddings=m.tied,
    )
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    assert m.params() == sum(p.numel() for p in model.parameters())
    assert P.Model.from_config(config).params() == m.params()
    for dtype in P.DTYPE_BYTES:
        assert P.weights_bytes(m, P.Setting(dtype=dtype)) == m.params() * P.DTYPE_BYTES[dtype]
    assert P.DTYPE_BYTES == {torch.float32: 4, torch.bfloat16: 2}


def test_param_count_with_head_dim():
    config = llama_config(head_dim=32, num_key_value_heads=2)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    assert P.Model.from_config(config).params() == sum(p.numel() for p in model.parameters())


def test_plan_of_a_meta_device_module():
    config = llama_config(num_key_value_heads=2, tie_word_embeddings=True)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    s = P.Setting(seq=64)
    assert P.plan(model, s).peak == P.plan(P.Model.from_config(config), s).peak
    with torch.device("meta"):
        qwen = transformers.Qwen2ForCausalLM(
            transformers.Qwen2Config(
                vocab_size=101,
                hidden_size=64,
                intermediate_size=176,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=2,
            )
        )
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
# output in float32 (ojas_ref/functional/_attention_reference.py, _OnlineSoftmaxAttention), where the CUDA
# kernel the plan models saves it in bfloat16 (kernels/ojas_kernels/attention.py, _FlashAttention).
# The fused RMSNorm is left out too: on the CPU the swapped modules run Hugging Face's ops
# (ojas_ref/integrations/hf/rms_norm.py), so they save what the plan's unfused formula counts. SwiGLU's
# autograd Function saves gate and up on every device.
@pytest.mark.parametrize(
    "dtype,attention,swiglu",
    [
        (torch.float32, False, False),
        (torch.bfloat16, False, False),
        (torch.float32, True, False),
        (torch.bfloat16, False, True),
    ],
)
@pytest.mark.parametrize("kv_heads", [4, 2])
def test_saved_activations_match_a_real_llama(dtype, attention, swiglu, kv_heads):
    """layer_saved_bytes counts exactly what one decoder layer saves (second layer minus
    first), and the rest of the model saves the final norm, RoPE tables, the loss's
    log-softmax output, the ids and the labels (+ nll_loss's 4-byte total weight). On
    the CPU SDPA runs its flash kernel, which saves q, k, v, out and lse as the CUDA kernels do."""
    from ojas_ref import optimize_model

    batch, seq = 2, 32
    # on the CPU the adapter's general path copies the reference's [B, H, S, E] output (the CUDA
    # kernel writes [B, S, H, E] itself): the copy of the older records
    setting = P.Setting(
        recipe=MemoryRecipe.plain(attention=attention, swiglu=swiglu),
        dtype=dtype,
        batch=batch,
        seq=seq,
        ojas_attention_copy=attention,
    )
    ids = torch.randint(0, 101, (batch, seq), generator=torch.Generator().manual_seed(0))
    totals = []
    for layers in (1, 2):
        config = llama_config(num_hidden_layers=layers, num_key_value_heads=kv_heads)
        torch.manual_seed(0)
        model = transformers.LlamaForCausalLM(config).to(dtype).train()
        if attention or swiglu:
            optimize_model(model, **setting.recipe.model_options())
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
BUCKETED = dict(
    vocab_size=16500,
    hidden_size=1024,
    intermediate_size=2816,
    num_hidden_layers=2,
    num_attention_heads=8,
    num_key_value_heads=4,
)


#: a wide MLP and a small vocabulary: the split step's peak is the last layer's MLP backward
SPLIT_MLP = dict(vocab_size=64, hidden_size=256, intermediate_size=2048, num_hidden_layers=3, num_attention_heads=4)


#: (model shape, the Setting's keywords but its recipe, the recipe's fields)
CPU_STEPS = {
    "standard": (SMALL, dict(), dict()),
    "adamw": (SMALL, dict(optimizer="adamw"), dict()),
    "ckpt": (SMALL, dict(), dict(checkpoint=True)),
    "bf16-ckpt": (SMALL, dict(dtype=torch.bfloat16), dict(checkpoint=True)),
    "bf16-gqa": (SMALL | dict(num_key_value_heads=2), dict(dtype=torch.bfloat16), dict()),
    "tied-ckpt": (SMALL | dict(tie_word_embeddings=True), dict(), dict(checkpoint=True)),
    "in-backward-ckpt-one-bucket": (SMALL, dict(), dict(in_backward=True, checkpoint=True)),
    "in-backward-ckpt-buckets": (BUCKETED, dict(), dict(in_backward=True, checkpoint=True)),
    "in-backward-adamw-buckets": (BUCKETED, dict(optimizer="adamw"), dict(in_backward=True)),
    "in-backward-adamw-tied-buckets": (
        BUCKETED | dict(tie_word_embeddings=True),
        dict(optimizer="adamw"),
        dict(in_backward=True),
    ),
    "ckpt-split": (SMALL, dict(), dict(checkpoint=True, checkpoint_split=True)),
    # the peak in the first layer's MLP backward: its half recomputed, both halves' inputs
    "in-backward-ckpt-split-first-layer": (
        SPLIT_MLP,
        dict(),
        dict(in_backward=True, checkpoint=True, checkpoint_split=True),
    ),
}


def _cpu_setting(workload: dict, recipe: dict) -> P.Setting:
    """float32 SGD, 2 x 64 tokens, unless ``workload`` says otherwise, under the recipe's fields ``recipe``."""
    return P.Setting(
        **(dict(dtype=torch.float32, optimizer="sgd", batch=2, seq=64) | workload), recipe=MemoryRecipe.plain(**recipe)
    )


@pytest.mark.parametrize("shape,workload,recipe", list(CPU_STEPS.values()), ids=list(CPU_STEPS))
def test_predicted_peak_equals_a_cpu_step(shape, workload, recipe):
    """The phases of the plan against the live bytes of a real training step of a Hugging
    Face Llama on the CPU (the second, when the optimizer state exists), cuBLAS
    workspaces left out; SDPA and
    Hugging Face's loss (the ojas loss runs another algorithm on the CPU than the
    kernel the plan models)."""
    s = _cpu_setting(workload, recipe)
    measured, m = _cpu_step_peak(shape, s)
    # on the CPU, embedding_dense_backward has no float32 per-segment buffer (the CUDA kernel's)
    cuda_only = {"end of backward (embedding)": 4 * s.tokens * m.hidden}
    predicted = max(p.total - P.overhead_bytes(m, s) - cuda_only.get(p.name, 0) for p in P.plan(m, s).phases)
    assert abs(predicted - measured) <= 1e-3 * measured, (predicted, measured)


def _cpu_step_peak(shape: dict, s: P.Setting, family: str = "llama") -> tuple[int, P.Model]:
    """The peak live bytes of the second of two training steps of a Hugging Face Llama (or another
    ``family`` of :data:`ojas_ref.memory.FAMILIES`, its config of the same fields) of ``shape``
    on the CPU under ``s`` (:class:`_LiveBytes`; ``checkpoint_split``: optimize_model's, the kernels off),
    and the planner's model of it."""
    from ojas_ref import InBackwardOptimizer, optimize_model

    config = llama_config(**shape)
    if family != "llama":
        fields = {k: v for k, v in config.to_dict().items() if k != "model_type"}
        config = transformers.AutoConfig.for_model(family, **fields | dict(sliding_window=None))
    optimizer = {
        "sgd": (torch.optim.SGD, dict(lr=1e-3)),
        "adamw": (torch.optim.AdamW, dict(lr=1e-4, weight_decay=0.1, foreach=True)),
    }[s.optimizer]
    ids = torch.randint(0, config.vocab_size, (s.batch, s.seq), generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).to(s.dtype)
    model.train()
    if s.recipe.checkpoint_split:
        optimize_model(model, **s.recipe.model_options())
    elif s.recipe.checkpoint:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    opt = (
        InBackwardOptimizer(model.parameters(), optimizer[0], bucket_cap_mb=s.recipe.bucket_cap_mb, **optimizer[1])
        if s.recipe.in_backward
        else optimizer[0](model.parameters(), **optimizer[1])
    )
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


@pytest.mark.parametrize(
    "recipe", [dict(), dict(in_backward=True, checkpoint=True)], ids=["standard", "in-backward-ckpt"]
)
def test_mistral_without_a_window_is_planned_as_its_cpu_step(recipe):
    """Mistral, the other family of :data:`ojas_ref.memory.FAMILIES`: its step on the CPU holds
    what the plan says, as a Llama's does (test_predicted_peak_equals_a_cpu_step)."""
    s = _cpu_setting(dict(), recipe)
    measured, m = _cpu_step_peak(SMALL | dict(num_key_value_heads=2), s, family="mistral")
    cuda_only = {"end of backward (embedding)": 4 * s.tokens * m.hidden}
    predicted = max(p.total - P.overhead_bytes(m, s) - cuda_only.get(p.name, 0) for p in P.plan(m, s).phases)
    assert abs(predicted - measured) <= 1e-3 * measured, (predicted, measured)


#: the families of tests/integrations/test_optimize_huggingface.py (config class, its overrides there)
TESTED_FAMILIES = {
    "llama": ("LlamaConfig", {}),
    "mistral": ("MistralConfig", dict(sliding_window=None)),
    "qwen2": ("Qwen2Config", {}),
    "qwen3": ("Qwen3Config", {}),
    "gemma2": ("Gemma2Config", {}),
    "gemma3_text": ("Gemma3TextConfig", {}),
    "phi3": ("Phi3Config", {}),
    "gpt2": ("GPT2Config", {}),
}


@pytest.mark.parametrize("family", list(TESTED_FAMILIES))
def test_every_tested_family_is_planned_or_named_with_its_reason(family):
    """A family optimize_model handles is planned (:data:`ojas_ref.memory.FAMILIES`) or refused
    naming it and what the planner would have to model, from a config and from a module."""
    name, overrides = TESTED_FAMILIES[family]
    config = getattr(transformers, name)(**overrides)
    assert config.model_type == family
    if family in P.FAMILIES:
        assert P.Model.from_config(config).params() > 0
        return
    message = (
        f"model_type {family!r} is not modelled by the planner ({P.UNMODELLED[family]}); it models llama and "
        "mistral decoders"
    )
    with pytest.raises(NotImplementedError, match=re.escape(message)):
        P.Model.from_config(config)
    with pytest.raises(NotImplementedError, match=re.escape(message)):
        P.Model.from_config(config.to_dict())
    if family == "qwen2":  # the module path, as optimize_model's report takes it
        with torch.device("meta"):
            model = transformers.Qwen2ForCausalLM(
                transformers.Qwen2Config(
                    vocab_size=101, hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4
                )
            )
        with pytest.raises(NotImplementedError, match=re.escape(message)):
            P.Model.from_module(model)


def test_mistral_with_a_sliding_window_is_refused():
    with pytest.raises(
        NotImplementedError,
        match=r"mistral with sliding_window=4096 is not modelled by the planner "
        r"\(the attention mask",
    ):
        P.Model.from_config(transformers.MistralConfig(sliding_window=4096))


def test_a_printed_plan_is_its_table():
    plan = P.plan("llama-1b", OJAS_CKPT)
    assert str(plan) == plan.table() and repr(plan).startswith("Plan(model=Model(")


def test_split_lowers_a_cpu_steps_last_layer_peak_as_planned():
    """Every gradient updated at once (bucket_cap_mb=0): the peak is the last layer's MLP backward,
    and the split lowers it by what the plan says, to the byte: the attention half's recomputed
    activations (the recomputed whole layer less the MLP half) less the second input each layer
    keeps. (At that phase the plan is 1 MiB,
    one [tokens, intermediate] float32 tensor, below the CPU step with and without the split.)"""
    s = _cpu_setting(dict(), dict(in_backward=True, checkpoint=True, bucket_cap_mb=0.0))
    peaks, plans = {}, {}
    for split in (False, True):
        peaks[split], m = _cpu_step_peak(SPLIT_MLP, changed(s, checkpoint_split=split))
        plans[split] = P.plan(m, changed(s, checkpoint_split=split))
        assert plans[split].peak_phase.name == "backward: last decoder layer (MLP)"
    saved = P.recomputed_layer_bytes(m, s) - P.recomputed_mlp_half_bytes(m, changed(s, checkpoint_split=True))
    assert saved == P.rmsnorm_saved_bytes(m, s) + P.attention_saved_bytes(m, s) > 0
    second_inputs = m.layers * P.checkpoint_layer_bytes(m, s)  # each layer's h, kept for its MLP half
    assert peaks[False] - peaks[True] == plans[False].peak - plans[True].peak == saved - second_inputs > 0


def test_linear_cross_entropy_workspace_within_the_kernels_bound():
    """gradients + workspace <= 1.15 x gradients (kernels/ojas_kernels/linear_cross_entropy.py), where
    the budget is not the 16 MiB floor."""
    for m in P.PRESETS.values():
        for dtype in P.DTYPE_BYTES:
            s = P.Setting(MemoryRecipe.plain(linear_cross_entropy=True), dtype=dtype, seq=4096)
            grads = P.lce_gradients_bytes(m, s)
            assert P.LCE_WORKSPACE_FRACTION * grads > P.LCE_WORKSPACE_FLOOR
            assert grads + P.lce_workspace_bytes(m, s) <= P.LCE_PEAK_OVER_GRADIENTS * grads


def test_peak_is_the_largest_phase_and_grows_with_tokens():
    m = P.PRESETS["llama-1b"]
    small = P.plan(m, P.Setting(seq=1024))
    big = P.plan(m, P.Setting(seq=4096))
    assert small.peak == max(p.total for p in small.phases) and big.peak > small.peak
    assert all(t.bytes >= 0 for p in big.phases for t in p.terms)


def test_in_backward_sgd_holds_no_gradients_and_ojas_loss_no_logits():
    m = P.PRESETS["llama-1b"]
    in_backward = MemoryRecipe.plain(in_backward=True, checkpoint=True)
    updated = P.plan(m, P.Setting(in_backward, dtype=torch.float32, optimizer="sgd"))
    assert not any("gradients (all parameters)" == t.name for p in updated.phases for t in p.terms)
    assert not any(p.name == "optimizer step" for p in updated.phases)
    ojas = P.plan(m, P.Setting(MemoryRecipe.plain(linear_cross_entropy=True)))
    assert not any("log-softmax" in t.name for p in ojas.phases for t in p.terms)


def test_tied_head_waits_for_the_embedding():
    """A tied weight's gradient is whole only after the embedding's backward: it is held
    through the backward even when the optimizer is in backward."""
    s = P.Setting(MemoryRecipe.plain(in_backward=True, attention=True, linear_cross_entropy=True))
    tied = P.PRESETS["llama-3b"]
    untied = replace(tied, tied=False)
    assert not P.head_updated_first(tied, s) and P.head_updated_first(untied, s)
    layer_phase = {p.name: p for p in P.plan(tied, s).phases}["backward: last decoder layer (MLP)"]
    held = {t.name: t.bytes for t in layer_phase.terms}["tied head's gradient, waiting for the embedding's"]
    assert held == P.head_gradient_bytes(tied, s)
    assert P.bucket_step_temporary_bytes(tied, s) == 0 < P.bucket_step_temporary_bytes(untied, s)


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
    text = (
        "import ojas_ref.tools.plan as P\ndef f():\n    from ojas_ref import tools\n"
        "    from ...tools import cli\n    from . import report\n"
    )
    assert _imported_modules(text, "ojas_ref.integrations.hf") == {
        "ojas_ref.tools.plan",
        "ojas_ref",
        "ojas_ref.tools",
        "ojas_ref.tools.cli",
        "ojas_ref.integrations.hf",
        "ojas_ref.integrations.hf.report",
    }


PACKAGE = Path(P.__file__).resolve().parents[1]


def test_no_library_module_imports_the_tools():
    """The layers: functional, nn, optim, integrations, verification and memory import nothing of
    ojas_ref.tools (the commands and their helpers), which may import them."""
    upward = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] == "tools":
            continue
        package = ".".join(path.parent.relative_to(PACKAGE.parent).parts)
        upward[str(path.relative_to(PACKAGE.parent))] = sorted(
            m for m in _imported_modules(path.read_text(), package) if m.split(".")[:2] == ["ojas_ref", "tools"]
        )
    assert {path: modules for path, modules in upward.items() if modules} == {}


@pytest.mark.parametrize(
    "base",
    [
        P.Setting(MemoryRecipe.plain(checkpoint=True), dtype=torch.bfloat16, optimizer="adamw"),
        P.Setting(MemoryRecipe.plain(checkpoint=True), dtype=torch.float32, optimizer="sgd", seq=4096),
        OJAS_CKPT,
    ],
    ids=lambda s: s.mode,
)
def test_offload_moves_the_checkpoints_to_host(base):
    m = P.PRESETS["llama-1b"]
    on, off = P.plan(m, changed(base, checkpoint="offload")), P.plan(m, base)
    per_layer = P.checkpoint_layer_bytes(m, base)
    assert per_layer == base.size * base.tokens * m.hidden
    assert off.host == () and off.host_bytes == 0
    assert on.host_bytes - off.host_bytes == P.checkpoint_bytes(m, base) == m.layers * per_layer
    # every phase that held all the checkpoints now holds two layer inputs (the first layer's is its own)
    for a, b in zip(off.phases, on.phases):
        assert a.name == b.name and b.total in (a.total, a.total - (m.layers - 2) * per_layer)
    assert off.peak - on.peak <= (m.layers - 2) * per_layer
    assert on.setting.mode == base.mode + "+offload"


@pytest.mark.parametrize(
    "base",
    [  # peaks at the loss's backward, and in the last layer's backward
        P.Setting(MemoryRecipe.plain(checkpoint=True), dtype=torch.bfloat16, optimizer="sgd", batch=16, seq=4096),
        replace(OJAS_CKPT, batch=8, seq=4096),
    ],
    ids=lambda s: s.mode,
)
def test_offload_peak_is_lower_by_all_but_two_layer_inputs(base):
    """Where the peak holds the checkpoints (not the optimizer step, nor the first layer's backward)."""
    m, s = P.PRESETS["llama-1b"], base
    off, on = P.plan(m, s), P.plan(m, changed(s, checkpoint="offload"))
    assert off.peak_phase.name == on.peak_phase.name != "backward: first decoder layer (MLP)"
    assert off.peak - on.peak == (m.layers - 2) * P.checkpoint_layer_bytes(m, s)


@pytest.mark.parametrize(
    "base",
    [
        P.Setting(MemoryRecipe.plain(in_backward=True), dtype=torch.bfloat16, optimizer="adamw"),
        P.Setting(MemoryRecipe.plain(in_backward=True, checkpoint="offload"), dtype=torch.float32, optimizer="adamw"),
        OJAS_CKPT,
    ],
    ids=lambda s: s.mode,
)
@pytest.mark.parametrize("name", ["llama-1b", "llama-0.5b"])  # untied head, tied head
def test_host_state_moves_the_optimizer_state_to_host(base, name):
    m = P.PRESETS[name]
    on, off = P.plan(m, changed(base, state_device="cpu")), P.plan(m, base)
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
    m = P.PRESETS["llama-1b"]
    s = P.Setting(MemoryRecipe.plain(in_backward=True, state_device="cpu"), dtype=torch.bfloat16, optimizer="adamw")
    phases = {p.name: p for p in P.plan(m, s).phases}

    def in_flight(phase):
        return sum(t.bytes for t in phases[phase].terms if t.name.startswith("optimizer state: bucket"))

    assert in_flight("backward: head's bucket update") == 2 * P.head_gradient_bytes(m, s)
    last = P.pending_gradients_bytes(m, s, len(P.gradient_order(m)) - 1) + P.head_gradient_bytes(m, s)
    assert in_flight("end of backward (last bucket's update)") == 2 * last
    assert (
        in_flight("end of forward (linear cross-entropy)" if s.recipe.linear_cross_entropy else "end of forward (loss)")
        == 0
    )
    sgd = P.plan(m, replace(s, optimizer="sgd"))  # no state: nothing moves
    assert sgd.host_bytes == 0 and sgd.peak == P.plan(m, changed(replace(s, optimizer="sgd"), state_device=None)).peak


@pytest.mark.parametrize(
    "changes, field",
    [
        (dict(state_device="cpu"), "state_device='cpu' needs in_backward"),
        (dict(state_device="cpu", checkpoint=True), "state_device='cpu' needs in_backward"),
        (dict(checkpoint="host"), "checkpoint must be True, False or 'offload'"),
    ],
)
def test_host_state_needs_its_technique(changes, field):
    """The state on the host is InBackwardOptimizer's; offload is a value of checkpoint (the recipe's
    checks, before the setting's)."""
    with pytest.raises(ValueError, match=field):
        P.Setting(MemoryRecipe.plain(**changes))


def test_sliced_host_state_keeps_one_slice_of_the_head_and_embedding():
    """state_slice_mb 128 (InBackwardOptimizer's option, off by default): the 1.06B fp32 head (250 MiB, 500 MiB of
    AdamW state) and embedding are updated in slices of 8 Mi elements (two slices' state in flight,
    128 MiB, and 32 MiB of foreach temporaries); the MLP weights (88 MiB of state) stay whole. The head's update phase is
    the unsliced one less its whole state and temporaries plus one slice's; the head is not staged
    at its hook; the peak falls under issue 14's 4.6 GiB (a prediction; not yet measured)."""
    m = P.PRESETS["llama-1b"]
    whole, sliced = P.plan(m, changed(SLICED_1B, state_slice_mb=None)), P.plan(m, SLICED_1B)
    assert P.slice_elements(SLICED_1B) == 8 * 2**20
    assert P.sliced(SLICED_1B, m.vocab * m.hidden) and not P.sliced(SLICED_1B, m.hidden * m.intermediate)
    assert not P.sliced(changed(SLICED_1B, state_slice_mb=None), m.vocab * m.hidden)
    assert not P.sliced(replace(SLICED_1B, optimizer="sgd"), m.vocab * m.hidden)  # no state
    w, t = {p.name: p for p in whole.phases}, {p.name: p for p in sliced.phases}
    head = P.head_gradient_bytes(m, SLICED_1B)
    one_slice = P.slice_state_bytes(m, SLICED_1B) + P.slice_temporary_bytes(m, SLICED_1B)
    assert one_slice == (128 + 32) * 2**20  # two slices' state, one slice's sqrt
    assert (
        t["backward: head's bucket update, one slice at a time"].total
        == w["backward: head's bucket update"].total - 3 * head + one_slice
    )
    assert t["backward: head gradient"].total == w["backward: head gradient"].total - 2 * head
    assert "end of backward (the embedding's update, one slice at a time)" in t
    assert sliced.host_bytes == whole.host_bytes
    assert sliced.peak < 4.6 * 2**30 < whole.peak
    # parameters within the slice: the plan of whole parameters
    assert P.plan(m, changed(SLICED_1B, state_slice_mb=1e4)).peak == whole.peak


@pytest.mark.parametrize(
    "changes,error",
    [
        (dict(state_slice_mb=64.0), ValueError),
        (dict(state_device="cpu", in_backward=True, state_slice_mb=0.0), ValueError),
        (dict(state_device="cpu", in_backward=True, state_slice_mb=float("nan")), ValueError),
        (dict(state_device="cpu", in_backward=True, state_slice_mb="64"), TypeError),
    ],
)
def test_bad_state_slice_mb(changes, error):
    with pytest.raises(error, match="state_slice_mb"):
        P.Setting(MemoryRecipe.plain(**changes))


def test_head_update_drops_the_head_gradient():
    """--head-update (InBackwardOptimizer(head_weight=...)): no [V, hidden] gradient in any phase
    (neither the kernel's forward gradients nor the head's bucket), the loss phases lower by
    most of that much (one slab's workspace comes instead), the layers' phases unchanged;
    refused without SGD in backward and the ojas loss, and for a tied head."""
    m = P.PRESETS["llama-1b"]
    base = P.Setting(
        MemoryRecipe.plain(in_backward=True, checkpoint="offload", **OJAS), dtype=torch.float32, optimizer="sgd"
    )
    dense, head = P.plan(m, base), P.plan(m, changed(base, head_update=True))
    assert head.setting.mode.endswith("+head-update")
    grads = {"gradient of the head weight", "loss: gradients computed in the forward"}
    assert not any(t.name in grads and t.bytes for p in head.phases for t in p.terms)
    d, h = ({p.name: p.total for p in plan.phases} for plan in (dense, head))
    # the [V, hidden] gradient (250 MiB) goes, one vocabulary slab's workspace (about 60 MiB) comes
    saved = 0.6 * P.head_gradient_bytes(m, base)
    assert h["backward: loss, head updated chunk by chunk"] < d["backward: head gradient"] - saved
    assert h["end of forward (linear cross-entropy, 4 products)"] < d["end of forward (linear cross-entropy)"] - saved
    assert h["backward: last decoder layer (MLP)"] == d["backward: last decoder layer (MLP)"]
    with pytest.raises(ValueError, match="head_update=True needs optimizer='sgd'"):
        replace(changed(base, head_update=True), optimizer="adamw")
    with pytest.raises(ValueError, match="head_update=True needs in_backward=True"):
        changed(base, head_update=True, in_backward=False)
    with pytest.raises(ValueError, match="head_update=True needs linear_cross_entropy=True"):
        changed(base, head_update=True, linear_cross_entropy=False)
    with pytest.raises(ValueError, match="tied head"):
        P.plan(replace(m, tied=True), changed(base, head_update=True))


@pytest.mark.parametrize("offload", [False, True])
def test_split_recomputes_the_mlp_half_alone_and_keeps_two_inputs_per_layer(offload):
    m = P.PRESETS["llama-1b"]
    whole = changed(SGD_1B, checkpoint="offload" if offload else True)
    split = changed(whole, checkpoint_split=True)
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
    assert {t.name for t in t[attention].terms} >= {
        "saved activations: recomputed last attention half (split)",
        "layer backward temporaries (attention)",
    }
    assert P.plan(m, split).setting.mode.endswith("+split" + ("+offload" if offload else "") + "+head-update")


def test_a_32_mib_bucket_updates_down_proj_at_once():
    """down_proj's 44 MiB fp32 gradient waits in a 64 MiB bucket through the last layer's MLP backward;
    in a 32 MiB one it fills the bucket and is updated alone at once. The issue's fp32 SGD step
    (offload, head update, split): above 4.3 GiB with 64 MiB buckets, below with 32 (predicted)."""
    m = P.PRESETS["llama-1b"]
    split = changed(SGD_1B, checkpoint_split=True)
    small = changed(split, bucket_cap_mb=32.0)
    assert P.bucket_cap_bytes(split) == P.BUCKET_CAP_BYTES == 64 * 2**20 and P.bucket_cap_bytes(small) == 32 * 2**20
    down = P.down_proj_gradient_bytes(m, split)
    assert P.pending_gradients_bytes(m, split, 2) == down + m.hidden * 4 and P.pending_gradients_bytes(m, small, 2) == 0
    big, little = P.plan(m, split), P.plan(m, small)
    assert little.peak_phase.name == "backward: last decoder layer (MLP)"
    assert big.peak - little.peak == down + m.hidden * 4
    assert little.peak < 4.3 * 2**30 < big.peak < P.plan(m, SGD_1B).peak
    assert little.setting.mode.endswith("+bucket-32MiB") and "bucket" not in big.setting.mode
    assert P.plan(m, changed(SGD_1B, bucket_cap_mb=64)).peak == P.plan(m, SGD_1B).peak


@pytest.mark.parametrize(
    "changes,error,match",
    [
        (dict(checkpoint_split=True), ValueError, "checkpoint_split=True needs checkpoint"),
        (dict(checkpoint=True, checkpoint_split=1), TypeError, "checkpoint_split must be a bool"),
        (dict(bucket_cap_mb=-1.0), ValueError, "bucket_cap_mb"),
        (dict(bucket_cap_mb=float("inf")), ValueError, "bucket"),
        (dict(bucket_cap_mb="64"), TypeError, "bucket_cap_mb"),
        (dict(bucket_cap_mb=True), TypeError, "bucket_cap_mb"),
    ],
)
def test_bad_split_and_bucket_settings(changes, error, match):
    with pytest.raises(error, match=match):
        P.Setting(MemoryRecipe.plain(**changes))


#: the peaks of the default Setting() (plain Hugging Face: bf16 AdamW, batch 1 x 2048) and of fp32 SGD with
#: checkpointing, as the planner gave them before Setting took a MemoryRecipe (commit 94b7020)
PLAIN_PEAKS = {
    "llama-0.5b": (9602082048, 5976378880),
    "llama-1b": (10699673600, 8557150208),
    "llama-3b": (32194639872, 28921159680),
    "llama-7b": (67451297792, 54041575424),
    "llama-13b": (130225784832, 104277942272),
    "llama-70b": (689833623552, 552014544896),
}


@pytest.mark.parametrize("name", list(PLAIN_PEAKS))
def test_the_plain_recipe_is_the_former_default(name):
    """Setting()'s recipe is MemoryRecipe.plain() (standard PyTorch) in bfloat16 with AdamW, and plans what
    the former Setting() planned; the fields that change no counted tensor (rope, relu_mask) change nothing."""
    default = P.Setting()
    assert default == P.Setting(recipe=MemoryRecipe.plain(), dtype=torch.bfloat16, optimizer="adamw", batch=1, seq=2048)
    assert default.mode == "standard" and default.dtype is torch.bfloat16
    checkpointed = P.Setting(MemoryRecipe.plain(checkpoint=True), dtype=torch.float32, optimizer="sgd")
    assert (P.plan(name, default).peak, P.plan(name, checkpointed).peak) == PLAIN_PEAKS[name]
    for recipe in (MemoryRecipe.plain(rope=True, relu_mask=True), MemoryRecipe(rope=False, relu_mask=False)):
        together = replace(default, recipe=replace(recipe, rope=True, relu_mask=True))
        assert P.plan(name, replace(default, recipe=recipe)).phases == P.plan(name, together).phases


def test_setting_spells_the_dtype_as_torch_does():
    """A torch.dtype or its torch name; bf16 / fp32 (release 0.1's) warn; float16 is not planned."""
    assert P.Setting(dtype="float32") == P.Setting(dtype=torch.float32) and P.Setting(dtype="float32").size == 4
    assert P.Setting(dtype="bfloat16").dtype is torch.bfloat16
    with pytest.warns(DeprecationWarning, match="'fp32' is deprecated: write 'float32'"):
        assert P.Setting(dtype="fp32") == P.Setting(dtype=torch.float32)
    with pytest.warns(DeprecationWarning, match="'bf16' is deprecated: write 'bfloat16'"):
        assert P.Setting(dtype="bf16") == P.Setting()
    with pytest.raises(ValueError, match=r"dtype must be one of \('float32', 'bfloat16'\)"):
        P.Setting(dtype=torch.float16)
    with pytest.raises(ValueError, match="dtype must be"):
        P.Setting(dtype="int8")


@pytest.mark.parametrize(
    "make,error,match",
    [
        (lambda: P.Setting(recipe=dict(in_backward=True)), TypeError, "recipe must be an ojas_ref.MemoryRecipe"),
        (lambda: P.Setting(ojas_attention_copy=1), TypeError, "ojas_attention_copy must be a bool"),
        (lambda: P.Setting(MemoryRecipe.plain(in_backward=1)), TypeError, "in_backward must be a bool"),
    ],
)
def test_bad_setting_fields_name_the_field(make, error, match):
    with pytest.raises(error, match=match):
        make()


@pytest.mark.parametrize("field", ["sparse_embedding", "overlap"])
def test_plan_refuses_what_it_does_not_model(field):
    """The recipe's sparse embedding and overlapped updates: NotImplementedError naming the field."""
    recipe = MemoryRecipe.plain(in_backward=True, **{field: True})
    with pytest.raises(NotImplementedError, match=f"recipe.{field}=True is not modelled by the planner"):
        P.plan("llama-1b", P.Setting(recipe))


#: each deprecated keyword of Setting (release 0.2's; fused: 0.1's), with the fields it needs, and the recipe
#: it means
LEGACY = {
    "fused": (dict(fused=True), MemoryRecipe.plain(in_backward=True)),
    "in_backward": (dict(in_backward=True), MemoryRecipe.plain(in_backward=True)),
    "ojas_attention": (dict(ojas_attention=True), MemoryRecipe.plain(attention=True)),
    "ojas_loss": (dict(ojas_loss=True), MemoryRecipe.plain(linear_cross_entropy=True)),
    "ojas_rms_norm": (dict(ojas_rms_norm=True), MemoryRecipe.plain(rms_norm=True)),
    "ojas_swiglu": (dict(ojas_swiglu=True), MemoryRecipe.plain(swiglu=True)),
    "checkpoint": (dict(checkpoint=True), MemoryRecipe.plain(checkpoint=True)),
    "offload": (dict(checkpoint=True, offload=True), MemoryRecipe.plain(checkpoint="offload")),
    "split": (dict(checkpoint=True, split=True), MemoryRecipe.plain(checkpoint=True, checkpoint_split=True)),
    "host_state": (dict(in_backward=True, host_state=True), MemoryRecipe.plain(in_backward=True, state_device="cpu")),
    "head_update": (
        dict(in_backward=True, ojas_loss=True, head_update=True),
        MemoryRecipe.plain(in_backward=True, linear_cross_entropy=True, head_update=True),
    ),
    "state_slice_mb": (
        dict(in_backward=True, host_state=True, state_slice_mb=8.0),
        MemoryRecipe.plain(in_backward=True, state_device="cpu", state_slice_mb=8.0),
    ),
    "bucket_cap_mb": (
        dict(in_backward=True, bucket_cap_mb=32.0),
        MemoryRecipe.plain(in_backward=True, bucket_cap_mb=32.0),
    ),
}


@pytest.mark.parametrize("old", list(LEGACY))
def test_the_old_setting_keywords_are_deprecated_aliases_of_the_recipe(old):
    """Setting(<old keyword>=...) and Setting.<old field> (kept one release) warn DeprecationWarning, naming the
    recipe to write, and mean / read that recipe; the old numbers are the recipe's."""
    keywords, recipe = LEGACY[old]
    new = P.Setting(recipe=recipe, optimizer="sgd")
    plain = MemoryRecipe.plain()
    written = ", ".join(
        f"{f.name}={getattr(recipe, f.name)!r}"
        for f in fields(recipe)
        if getattr(recipe, f.name) != getattr(plain, f.name)
    )
    with pytest.warns(DeprecationWarning) as caught:
        setting = P.Setting(optimizer="sgd", **keywords)
    assert str(caught[0].message) == (
        f"Setting({', '.join(f'{k}=...' for k in keywords)}) is deprecated and will be removed in the next release; "
        f"use Setting(recipe=MemoryRecipe.plain({written}))"
    )
    assert setting == new and P.plan("llama-1b", setting).peak == P.plan("llama-1b", new).peak
    with pytest.warns(DeprecationWarning, match=rf"Setting\.{old} is deprecated.*Setting\.recipe\."):
        assert getattr(setting, old) == keywords[old]


def test_the_old_keywords_apply_over_a_given_recipe_and_keep_their_rules():
    """dataclasses.replace(setting, <old keyword>=...) changes the recipe's field; both names of the
    optimizer in backward at once, offload without checkpoint and a non-bool are refused."""
    with pytest.warns(DeprecationWarning):
        offloaded = replace(OJAS_CKPT, offload=True)
    assert offloaded == changed(OJAS_CKPT, checkpoint="offload")
    with pytest.raises(TypeError, match="both in_backward= and its deprecated alias fused="):
        P.Setting(fused=True, in_backward=True)
    with pytest.raises(ValueError, match="offload=True needs checkpoint=True"):
        P.Setting(offload=True, in_backward=True)
    with pytest.raises(TypeError, match="offload must be a bool"):
        P.Setting(checkpoint=True, offload=1)
    with pytest.raises(ValueError, match="state_device='cpu' needs in_backward"):
        P.Setting(host_state=True, checkpoint=True)
    with pytest.raises(AttributeError, match="no attribute 'ojas'"):
        P.Setting().ojas
