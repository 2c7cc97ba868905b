"""``optimize_model`` on Hugging Face causal LMs (ojas_ref/integrations/hf/), tiny random configs.

Each family is built from a config in the test (no weights from a hub) and trained side
by side with its unpatched copy. The comparisons run in float64, the unpatched model's
loss being Hugging Face's ``ForCausalLMLoss`` without its float32 upcast (the same shift
and ``fixed_cross_entropy``; the upcast would round the reference to float32 and AdamW
turns that into parameter differences of 1e-4 near zero gradients): the ojas reference
paths then differ from torch only by summation order (relative ~1e-15 per operation),
so every loss and parameter after several AdamW steps must agree to 1e-9 relative; a
wrong mask, label shift, reduction or scale moves them by 1e-3 or more. Gemma 2 supports
only eager attention, which takes its softmax in float32; its unpatched copy runs
Hugging Face's SDPA attention function instead, registered under another name.
The float32 Triton path through a model (interpreter) is checked once, with a
tolerance from float32 rounding.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import warnings

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()
warnings.filterwarnings("ignore", module="transformers")

from ojas_ref.functional import dispatch  # noqa: E402
from ojas_ref.functional.dispatch import plain_kernel_call, use_impl  # noqa: E402
import ojas_ref.integrations.hf.attention as hf_attention  # noqa: E402
import ojas_ref.integrations.hf.rms_norm as hf_rms_norm  # noqa: E402
import ojas_ref.integrations.hf.rope as hf_rope  # noqa: E402
import ojas_ref.integrations.hf.swiglu as hf_swiglu  # noqa: E402
from ojas_ref.integrations import hf  # noqa: E402
from ojas_ref.integrations.hf.rms_norm import _OjasRMSNorm  # noqa: E402
from ojas_ref.integrations.hf.swiglu import _OjasSwiGLU  # noqa: E402
from ojas_ref.recipe import MemoryRecipe  # noqa: E402
from ojas_ref.integrations.hf.optimize import (  # noqa: E402
    RMS_NORM_THEOREMS,
    SWIGLU_THEOREMS,
    optimize_model,
    revert_model,
)
from ojas_ref.functional.swiglu import BACKWARD_THEOREM as SWIGLU_THEOREM  # noqa: E402
from transformers.integrations.sdpa_attention import sdpa_attention_forward  # noqa: E402
from transformers.loss.loss_utils import fixed_cross_entropy  # noqa: E402

V = 61
COMMON = dict(
    vocab_size=V,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    attention_dropout=0.0,
)
FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(sliding_window=5)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(head_dim=8)),
    "gemma2": (
        "Gemma2Config",
        "Gemma2ForCausalLM",
        dict(head_dim=8, sliding_window=5, attn_logit_softcapping=None, final_logit_softcapping=3.0),
    ),
    "gemma3": (
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        dict(head_dim=8, sliding_window=5, final_logit_softcapping=3.0),
    ),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", dict(pad_token_id=0)),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", None),
}
RTOL = 1e-9
REFERENCE_SDPA = "reference_torch"  # no "sdpa" in the name: Hugging Face would check that Gemma 2 supports SDPA
transformers.AttentionInterface.register(REFERENCE_SDPA, sdpa_attention_forward)
transformers.masking_utils.AttentionMaskInterface.register(REFERENCE_SDPA, transformers.masking_utils.sdpa_mask)


def float64_causal_lm_loss(
    logits, labels, vocab_size, num_items_in_batch=None, ignore_index=-100, shift_labels=None, **kwargs
):
    """``ForCausalLMLoss`` of transformers, in the logits' dtype."""
    if shift_labels is None:
        shift_labels = torch.nn.functional.pad(labels, (0, 1), value=ignore_index)[..., 1:]
    return fixed_cross_entropy(
        logits.reshape(-1, vocab_size), shift_labels.reshape(-1), num_items_in_batch, ignore_index
    )


def build(family: str, seed: int = 0, **overrides) -> torch.nn.Module:
    config_name, model_name, extra = FAMILIES[family]
    if extra is None:  # GPT-2 names its sizes differently
        kwargs = dict(
            vocab_size=V,
            n_embd=32,
            n_layer=2,
            n_head=4,
            n_positions=64,
            attn_pdrop=0.0,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
        )
    else:
        kwargs = {**COMMON, **extra}
    kwargs.update(overrides)
    config = getattr(transformers, config_name)(**kwargs)
    torch.manual_seed(seed)
    model = getattr(transformers, model_name)(config).double()
    model._loss_function = float64_causal_lm_loss
    if family == "gemma2" and config.attn_logit_softcapping is None:
        model.set_attn_implementation(REFERENCE_SDPA)
    return model


def batch(seed: int, b: int = 2, s: int = 11, padding: bool = False) -> dict:
    """Token ids, attention mask (left padding of 3 and 1 tokens if asked) and labels with
    the padded positions and the first real token ignored: that token's label is predicted
    from a padded position, whose attention row is fully masked (ojas gives zeros there,
    Hugging Face's eager attention a uniform average: a documented difference)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, V, (b, s), generator=g)
    mask = torch.ones(b, s, dtype=torch.long)
    labels = ids.clone()
    if padding:
        for row, pad in zip(range(b), (3, 1)):
            mask[row, :pad] = 0
            labels[row, : pad + 1] = -100
    labels[0, -2] = -100  # an ignored token inside the sequence
    return dict(input_ids=ids, attention_mask=mask, labels=labels)


def close(a: torch.Tensor, b: torch.Tensor, rtol: float = RTOL) -> bool:
    scale = max(a.abs().max().item(), b.abs().max().item(), 1e-30)
    return (a - b).abs().max().item() <= rtol * scale


def train(model, steps: list[list[dict]], clip: float | None = None, lr: float = 1e-2) -> list[float]:
    """AdamW over micro-batch groups, Hugging Face's accumulation semantics: each micro-batch's
    loss is its sum over num_items_in_batch (the kept tokens of the whole step)."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    losses = []
    for micro in steps:
        n_items = sum(int((m["labels"][:, 1:] != -100).sum()) for m in micro)
        kwargs = dict(num_items_in_batch=torch.tensor(n_items)) if len(micro) > 1 else {}
        total = 0.0
        for m in micro:
            out = model(**m, **kwargs)
            out.loss.backward()
            total += out.loss.item()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        opt.zero_grad()
        losses.append(total)
    return losses


def assert_same_parameters(ref, opt, rtol=RTOL):
    for (name, p), q in zip(ref.named_parameters(), opt.parameters()):
        assert close(p, q, rtol), f"{name}: max diff {(p - q).abs().max().item():.3e}"


def assert_norms_swapped(model, report) -> None:
    """Every RMSNorm module of the model is an ojas one (none for GPT-2, whose norms are
    LayerNorms), each reported with its theorem."""
    norms = {n: m for n, m in model.named_modules() if type(m).__name__.endswith("RMSNorm")}
    assert all(isinstance(m, _OjasRMSNorm) for m in norms.values()), norms
    reported = {c.module: c for c in report.changed if "rms_norm" in c.what}
    assert set(reported) == {n.removeprefix("base_model.model.") for n in norms}
    gemma = model.config.model_type.startswith("gemma")
    theorem = RMS_NORM_THEOREMS[1 if gemma else 0]
    assert all(c.theorems == (theorem,) and "cast to the input dtype" in c.not_covered for c in reported.values())


def assert_mlps_swapped(model, report) -> None:
    """Every gated MLP is an ojas one, reported with its theorem: SwiGLU's for the SiLU ones,
    GeGLU's for Gemma's gelu_pytorch_tanh ones; GPT-2's MLP, without a gate, is no candidate."""
    mlps = {n.removeprefix("base_model.model."): m for n, m in model.named_modules() if hf.is_gated_mlp(m)}
    reported = {c.module: c for c in report.changed if "ojas_ref.swiglu" in c.what}
    if model.config.model_type == "gpt2":
        assert not mlps and not reported
        return
    gemma = model.config.model_type.startswith("gemma")
    theorem = SWIGLU_THEOREMS["gelu_tanh"] if gemma else SWIGLU_THEOREM
    assert all(isinstance(m, _OjasSwiGLU) for m in mlps.values()) and set(reported) == set(mlps) and mlps
    assert all(c.theorems == (theorem,) for c in reported.values())
    assert all(("gelu_tanh(gate) * up" if gemma else "silu(gate) * up") in c.what for c in reported.values())


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("padding", [False, True])
def test_family_trains_like_unpatched(family, padding):
    ref = build(family)
    opt, report = optimize_model(copy.deepcopy(ref))
    assert [c.module for c in report.changed][-1].endswith("lm_head"), str(report)
    assert all(family == "phi3" and "rotary" in s.reason for s in report.left_alone), str(report)
    assert_norms_swapped(opt, report)
    assert_mlps_swapped(opt, report)
    steps = [[batch(seed, padding=padding)] for seed in range(3)]
    ref_losses, opt_losses = train(ref, steps), train(opt, steps)
    for a, b in zip(ref_losses, opt_losses):
        assert abs(a - b) <= RTOL * abs(a), (ref_losses, opt_losses)
    assert_same_parameters(ref, opt)


@pytest.mark.parametrize("family", ["llama", "gemma2", "gpt2"])
def test_accumulation_and_clipping(family):
    ref = build(family)
    opt, _ = optimize_model(copy.deepcopy(ref))
    steps = [[batch(2 * seed, padding=True), batch(2 * seed + 1, s=7)] for seed in range(2)]
    ref_losses = train(ref, steps, clip=0.05)
    opt_losses = train(opt, steps, clip=0.05)
    assert all(abs(a - b) <= RTOL * abs(a) for a, b in zip(ref_losses, opt_losses))
    assert_same_parameters(ref, opt)


def test_packed_sequences_by_position_ids():
    """Two sequences packed in one row, told apart by position_ids restarting at 0: Hugging
    Face builds a block-diagonal causal mask, so the packed row's summed loss is the sum of
    the two sequences' losses computed alone (to 1e-9; attending across the boundary moves
    it by ~1e-5 relative even in this tiny model, checked on the unpacked row)."""
    ref = build("llama")
    opt, _ = optimize_model(copy.deepcopy(ref))
    data = batch(4, b=1)
    ids, labels = data["input_ids"], data["labels"].clone()
    labels[0, 5] = -100  # the second sequence's first token is not predicted from the first's
    # Hugging Face looks for packing only without a cache: use_cache=False
    packed = dict(
        input_ids=ids, labels=labels, position_ids=torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5]]), use_cache=False
    )

    def summed(model, **kwargs):
        kept = int((kwargs["labels"][:, 1:] != -100).sum())
        return model(**kwargs).loss.item() * kept

    for m in (ref, opt):
        m.train()
    alone = summed(opt, input_ids=ids[:, :5], labels=labels[:, :5]) + summed(
        opt, input_ids=ids[:, 5:], labels=labels[:, 5:]
    )
    assert summed(opt, **packed) == pytest.approx(alone, rel=RTOL)
    assert summed(opt, **packed) == pytest.approx(summed(ref, **packed), rel=RTOL)
    unpacked = summed(opt, input_ids=ids, labels=labels, use_cache=False)
    assert abs(unpacked - alone) > 1e-7 * abs(alone)
    losses = train(ref, [[packed]] * 2), train(opt, [[packed]] * 2)
    assert losses[0] == pytest.approx(losses[1], rel=RTOL)
    assert_same_parameters(ref, opt)


def test_bfloat16_autocast_follows_torch():
    """float32 weights under torch.autocast(bfloat16): ojas casts as SDPA and F.linear do,
    the loss is float32; against the unpatched model, 2e-2 relative (both round their
    matrix products to bfloat16, in different orders: measured ~2e-3) on the loss and on
    every gradient's norm."""
    ref = build("llama").float()
    opt, _ = optimize_model(copy.deepcopy(ref))
    data = batch(6, padding=True)
    losses = []
    for m in (ref, opt):
        m.train()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = m(**data).loss
        assert loss.dtype == torch.float32
        loss.backward()
        losses.append(loss.item())
    assert losses[0] == pytest.approx(losses[1], rel=2e-2)
    for (name, p), q in zip(ref.named_parameters(), opt.parameters()):
        assert q.grad.dtype == torch.float32
        assert q.grad.norm().item() == pytest.approx(p.grad.norm().item(), rel=2e-2, abs=1e-6), name


def test_all_tokens_ignored_gives_zero_where_hugging_face_gives_nan():
    model, _ = optimize_model(build("llama"))
    model.train()
    data = batch(0)
    data["labels"][:] = -100
    out = model(**data)
    assert out.loss.item() == 0.0
    out.loss.backward()
    assert all(p.grad is None or torch.all(p.grad == 0) for p in model.parameters())


class _LargestTensor(TorchDispatchMode):
    """Records the shapes of every tensor an operator returns."""

    def __init__(self):
        super().__init__()
        self.shapes: list[tuple[int, ...]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.shapes.append(tuple(t.shape))
        return out


def _logit_sized(shapes, tokens: int, vocab: int) -> list:
    return [s for s in shapes if vocab in s and torch.Size(s).numel() >= tokens * vocab]


def test_no_logits_allocated_in_training():
    vocab = 5000  # above the reference's vocabulary chunk (4096), so a chunk is not the whole row
    ref = build("llama", vocab_size=vocab, hidden_size=16, num_attention_heads=2, num_key_value_heads=1)
    opt, _ = optimize_model(copy.deepcopy(ref))
    data = batch(0, b=2, s=32)
    data["input_ids"] %= vocab
    tokens = 2 * 32
    for model, expect_logits in ((ref, True), (opt, False)):
        model.train()
        with _LargestTensor() as mode:
            out = model(**data)
            out.loss.backward()
        found = _logit_sized(mode.shapes, tokens, vocab)
        assert bool(found) == expect_logits, found
    assert out.logits is None


def test_eval_mode_and_no_labels_return_logits_as_before():
    ref = build("qwen2")
    opt, _ = optimize_model(copy.deepcopy(ref))
    data = batch(1, padding=True)
    for training in (False, True):
        ref.train(training)
        opt.train(training)
        kwargs = dict(data) if not training else {k: v for k, v in data.items() if k != "labels"}
        a, b = ref(**kwargs), opt(**kwargs)
        assert close(a.logits, b.logits)
        if not training:
            assert close(a.loss, b.loss)


@pytest.mark.parametrize("family", ["llama", "mistral", "gemma3", "gpt2"])
def test_generate_gives_the_same_tokens(family):
    ref = build(family)
    opt, _ = optimize_model(copy.deepcopy(ref))
    data = batch(3, padding=True)
    kwargs = dict(
        input_ids=data["input_ids"],
        attention_mask=data["attention_mask"],
        max_new_tokens=6,
        do_sample=False,
        pad_token_id=0,
    )
    for m in (ref, opt):
        m.eval()
    assert torch.equal(ref.generate(**kwargs), opt.generate(**kwargs))


def test_checkpointing_gives_the_same_gradients():
    ref = build("llama")
    opt, report = optimize_model(copy.deepcopy(ref), checkpoint=True)
    assert any(getattr(m, "gradient_checkpointing", False) for m in opt.modules())
    assert any("checkpointing" in c.what for c in report.changed)
    steps = [[batch(seed, padding=True)] for seed in range(2)]
    assert train(ref, steps) == pytest.approx(train(opt, steps), rel=RTOL)
    assert_same_parameters(ref, opt)


def test_peft_lora_adapters_train_alike():
    peft = pytest.importorskip("peft")
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    ref = peft.get_peft_model(build("llama"), lora)
    opt, report = optimize_model(copy.deepcopy(ref))
    assert report.changed
    steps = [[batch(seed, padding=True)] for seed in range(2)]
    assert train(ref, steps) == pytest.approx(train(opt, steps), rel=RTOL)
    assert_same_parameters(ref, opt)


def test_state_dict_save_and_load(tmp_path):
    ref = build("phi3")
    keys = list(ref.state_dict())
    opt, _ = optimize_model(ref)
    assert list(opt.state_dict()) == keys
    opt.save_pretrained(tmp_path)
    loaded = type(opt).from_pretrained(tmp_path, dtype=torch.float64)
    assert loaded.config._attn_implementation != hf.ATTENTION_NAME  # a loaded model is a plain one
    for (k, a), b in zip(opt.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(a, b), k
    reloaded, report = optimize_model(loaded)
    assert reloaded.config._attn_implementation == hf.ATTENTION_NAME and report.changed


def test_second_call_is_a_no_op_and_revert_undoes():
    model = build("llama")
    data = batch(0, padding=True)
    model.train()
    before = model(**data)
    _, first = optimize_model(model)
    _, second = optimize_model(model)
    assert second is first
    model.train()
    optimized = model(**data)
    assert optimized.logits is None and close(optimized.loss, before.loss)
    assert len(model._forward_pre_hooks) == 1 and len(model.lm_head._forward_pre_hooks) == 1
    assert type(model.model.norm) is hf.ojas_rms_norm_class(transformers.models.llama.modeling_llama.LlamaRMSNorm)
    revert_model(model)
    assert model.config._attn_implementation == "sdpa"
    assert {type(m).__name__ for m in model.modules() if "RMSNorm" in type(m).__name__} == {"LlamaRMSNorm"}
    assert model._loss_function is float64_causal_lm_loss and not model._forward_pre_hooks
    after = model(**data)
    assert after.logits is not None and close(after.loss, before.loss)
    assert revert_model(model) is model  # reverting twice changes nothing


def test_a_deep_copy_of_an_optimized_model_is_optimized_and_reverts_alone():
    model, _ = optimize_model(build("llama"))
    copied = copy.deepcopy(model)
    data = batch(2, padding=True)
    for m in (model, copied):
        m.train()
    assert copied(**data).logits is None
    revert_model(copied)
    assert copied(**data).logits is not None and model(**data).logits is None
    assert model._loss_function is not copied._loss_function


def test_report_names_what_is_left_alone():
    gemma = build("gemma2", attn_logit_softcapping=50.0)
    _, report = optimize_model(gemma)
    attention = [s for s in report.left_alone if "mlp" not in s.module]
    assert len(attention) == 2 and all("soft-capping" in s.reason for s in attention)
    assert gemma.config._attn_implementation == "eager"
    head = [c for c in report.changed if c.module == "lm_head"]
    assert len(head) == 1 and "soft cap 3.0" in head[0].what
    gpt2 = build("gpt2", attn_pdrop=0.1)  # GPT-2's default attention dropout: the ojas attention takes it
    _, report = optimize_model(gpt2)
    assert not [s for s in report.left_alone if "attn" in s.module]
    assert gpt2.config._attn_implementation == "ojas"
    bert = transformers.BertForMaskedLM(
        transformers.BertConfig(
            vocab_size=V, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16
        )
    )
    _, report = optimize_model(bert)
    assert not report.changed and all("not among the tested families" in s.reason for s in report.left_alone)
    assert "left" in str(report)


def test_rms_norm_false_and_unchecked_norm_classes_are_left_alone():
    model = build("qwen3")
    _, report = optimize_model(model, rms_norm=False)
    norms = [s for s in report.left_alone if s.reason == "rms_norm=False"]
    assert len(norms) == 9 and not any("rms_norm" in c.what for c in report.changed)
    assert not any(isinstance(m, _OjasRMSNorm) for m in model.modules())

    class LlamaRMSNorm(transformers.models.llama.modeling_llama.LlamaRMSNorm):  # same name, another formula
        def forward(self, hidden_states):
            return super().forward(hidden_states) * 2

    LlamaRMSNorm.__module__ = "transformers.models.llama.modeling_llama"
    model = build("llama")
    model.model.norm.__class__ = LlamaRMSNorm
    _, report = optimize_model(model)
    assert [s.module for s in report.left_alone] == ["model.norm"]
    assert "differs from the checked formula" in report.left_alone[0].reason
    assert type(model.model.norm) is LlamaRMSNorm
    with pytest.raises(TypeError, match="rms_norm must be a bool"):
        optimize_model(build("llama"), rms_norm=0)  # None is the recipe's value (test_a_recipe_...)


def test_swiglu_false_and_unchecked_mlp_classes_are_left_alone():
    model = build("qwen3")
    _, report = optimize_model(model, swiglu=False)
    assert [s.reason for s in report.left_alone] == ["swiglu=False"] * 2
    assert not any(isinstance(m, _OjasSwiGLU) for m in model.modules())

    class LlamaMLP(transformers.models.llama.modeling_llama.LlamaMLP):  # same name, another formula
        def forward(self, x):
            return self.down_proj(torch.relu(self.gate_proj(x)) * self.up_proj(x))

    LlamaMLP.__module__ = "transformers.models.llama.modeling_llama"
    model = build("llama")
    model.model.layers[1].mlp.__class__ = LlamaMLP
    _, report = optimize_model(model)
    assert [s.module for s in report.left_alone] == ["model.layers.1.mlp"]
    assert "differs from down(silu(gate) * up)" in report.left_alone[0].reason
    assert type(model.model.layers[1].mlp) is LlamaMLP and isinstance(model.model.layers[0].mlp, _OjasSwiGLU)
    revert_model(model)
    assert type(model.model.layers[0].mlp) is transformers.models.llama.modeling_llama.LlamaMLP
    with pytest.raises(TypeError, match="swiglu must be a bool"):
        optimize_model(build("llama"), swiglu=1)


def _loss_and_grads(model, data: dict) -> list[torch.Tensor]:
    model.train()
    model.zero_grad(set_to_none=True)
    loss = model(**data).loss
    loss.backward()
    return [loss.detach()] + [p.grad for p in model.parameters()]


@pytest.mark.parametrize(
    "family, overrides",
    [("gemma2", {}), ("gemma3", {}), ("llama", {}), ("llama", dict(hidden_act="gelu_pytorch_tanh"))],
)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_swiglu_swap_alone_is_bitwise(family, overrides, dtype):
    """The gate-product swap alone (everything else off): the loss and every gradient bit for bit
    the unpatched model's on the CPU, SwiGLU and GeGLU (Gemma's gelu_pytorch_tanh, or a Llama
    configured with it); the report lists each MLP with its theorem; revert_model restores the
    class and the model."""
    ref = build(family, **overrides).to(dtype)
    cls = type(ref.model.layers[0].mlp)
    opt, report = optimize_model(
        copy.deepcopy(ref), attention=False, linear_cross_entropy=False, rms_norm=False, rope=False
    )
    activation = "silu" if family == "llama" and not overrides else "gelu_tanh"
    mlps = [f"model.layers.{i}.mlp" for i in range(2)]
    assert [c.module for c in report.changed] == mlps, str(report)
    assert not [s for s in report.left_alone if s.module.endswith("mlp")], str(report)
    assert all(
        c.theorems == (SWIGLU_THEOREMS[activation],) and f"{activation}(gate) * up" in c.what for c in report.changed
    )
    assert all(type(layer.mlp) is hf.ojas_swiglu_class(cls) for layer in opt.model.layers)
    data = batch(4, padding=True)
    want = _loss_and_grads(ref, data)
    for x, y in zip(_loss_and_grads(opt, data), want):
        assert torch.equal(x, y)
    revert_model(opt)
    assert all(type(layer.mlp) is cls for layer in opt.model.layers)
    for x, y in zip(_loss_and_grads(opt, data), want):
        assert torch.equal(x, y)


def test_other_gelu_mlps_are_left_alone():
    """Gemma with the exact (erf) gelu, or one MLP whose GELUTanh runs its Python formula: left
    alone with the reason; an activation replaced after the swap runs Hugging Face's forward."""
    model = build("gemma2", hidden_activation="gelu")
    _, report = optimize_model(model, attention=False)
    mlps = [s for s in report.left_alone if s.module.endswith("mlp")]
    assert [s.module for s in mlps] == ["model.layers.0.mlp", "model.layers.1.mlp"], str(report)
    assert all("activation GELUActivation" in s.reason and "GeGLU" in s.reason for s in mlps)
    assert not any(isinstance(m, _OjasSwiGLU) for m in model.modules())
    model = build("gemma3")
    model.model.layers[1].mlp.act_fn = transformers.activations.GELUTanh(use_gelu_tanh_python=True)
    _, report = optimize_model(model, attention=False)
    mlps = [s for s in report.left_alone if s.module.endswith("mlp")]
    assert [s.module for s in mlps] == ["model.layers.1.mlp"], str(report)
    assert "GELUTanh (its Python formula)" in mlps[0].reason
    assert isinstance(model.model.layers[0].mlp, _OjasSwiGLU)
    mlp = model.model.layers[0].mlp
    mlp.act_fn = torch.nn.ReLU()
    x = torch.randn(3, 32, dtype=torch.float64)
    assert torch.equal(mlp(x), mlp.down_proj(torch.relu(mlp.gate_proj(x)) * mlp.up_proj(x)))


def test_an_optimized_model_pickles():
    import pickle

    model, _ = optimize_model(build("gemma3"))
    copied = pickle.loads(pickle.dumps(model))
    assert type(copied.model.norm) is type(model.model.norm)
    data = batch(0)
    for m in (model, copied):
        m.eval()
    assert torch.equal(model(**data).logits, copied(**data).logits)


def test_soft_capped_attention_with_ojas_attention_refuses():
    model = build("gemma2", attn_logit_softcapping=50.0)
    hf.register()
    model.set_attn_implementation(hf.ATTENTION_NAME)
    with pytest.raises(NotImplementedError, match="soft-capping"):
        model(**batch(0))


def test_bad_uses_raise_clear_errors():
    model = build("llama")
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        optimize_model("llama")
    with pytest.raises(TypeError, match="attention must be a bool"):
        optimize_model(model, attention="yes")
    optimize_model(model)
    model.train()
    with pytest.raises(ValueError, match="logits_to_keep"):
        model(**batch(0), logits_to_keep=1)


def test_torch_compile_of_an_optimized_model():
    """torch.compile (the eager backend: Dynamo's tracing, with graph breaks where the
    primitives need them) gives the uncompiled loss and gradients."""
    import torch._dynamo

    torch._dynamo.reset()
    model, _ = optimize_model(build("llama"))
    model.train()
    data = batch(1, padding=True)
    eager = model(**data).loss
    grads = torch.autograd.grad(eager, list(model.parameters()))
    compiled = torch.compile(model, backend="eager")(**data).loss
    assert close(eager, compiled)
    for g, h in zip(grads, torch.autograd.grad(compiled, list(model.parameters()))):
        assert close(g, h)


def test_the_ojas_mask_builds_no_plain_causal_mask_even_compiled(monkeypatch):
    """``ojas_mask`` is ``sdpa_mask`` except that the plain causal mask is not built (None, and
    the kernel runs ``is_causal``), decided from the arguments alone, so also under torch.compile
    (where transformers 5.17 with torch 2.11 built the full mask and the kernel read it in every
    tile); padding, sliding windows and other patterns keep ``sdpa_mask``'s mask."""
    from transformers.masking_utils import sdpa_mask, sliding_window_causal_mask_function

    import torch._dynamo

    torch._dynamo.reset()
    assert hf_attention.ojas_mask(batch_size=2, q_length=8, kv_length=8) is None
    assert hf_attention.ojas_mask(batch_size=2, q_length=1, kv_length=8) is None
    compiled = torch.compile(lambda: hf_attention.ojas_mask(batch_size=2, q_length=8, kv_length=8), fullgraph=True)
    assert compiled() is None
    pad = torch.ones(2, 8, dtype=torch.bool)
    pad[0, :3] = False
    window = sliding_window_causal_mask_function(3)
    for kwargs in (
        dict(attention_mask=pad),
        dict(mask_function=window, local_size=3),
        dict(allow_is_causal_skip=False),
        dict(q_length=4, q_offset=4),  # the last 4 of 8 positions: top-left causality would be wrong
    ):
        args = {**dict(batch_size=2, q_length=8, kv_length=8), **kwargs}
        mask = hf_attention.ojas_mask(**args)
        assert isinstance(mask, torch.Tensor) and torch.equal(mask, sdpa_mask(**args)), kwargs
    # in a compiled model with a cache (use_cache=True), the attention function receives no mask and
    # runs causal; without one, Hugging Face builds a packed mask and the attention infers causality
    seen = []
    forward = hf_attention.ojas_attention_forward

    def spy(module, query, key, value, attention_mask, **kwargs):
        seen.append(attention_mask)
        return forward(module, query, key, value, attention_mask, **kwargs)

    monkeypatch.setattr(hf_attention, "ojas_attention_forward", spy)
    hf_attention.register()
    try:
        model, _ = optimize_model(build("llama"))
        data = batch(1)
        data.pop("attention_mask", None)
        eager = model(**data).loss
        compiled_loss = torch.compile(model, backend="eager")(**data).loss
        assert seen and all(m is None for m in seen)
        assert close(eager, compiled_loss)
    finally:
        monkeypatch.undo()
        hf_attention.register()


def test_return_dict_false_leaves_the_logits_out():
    ref = build("llama")
    opt, _ = optimize_model(copy.deepcopy(ref))
    for m in (ref, opt):
        m.train()
    a, b = ref(**batch(0), return_dict=False), opt(**batch(0), return_dict=False)
    assert len(b) == len(a) - 1 and close(a[0], b[0])
    assert all(not torch.is_tensor(x) or x.numel() > 0 for x in b)


@pytest.mark.kernel
@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_float32_kernels_through_the_model(monkeypatch, family):
    """The Triton kernels (attention, loss, RMSNorm, SwiGLU / GeGLU; the interpreter on the CPU,
    else on CUDA) inside a padded Llama or Gemma 3, float32 against the unpatched model: relative
    1e-4 on the gradients (float32 accumulation over at most 64 terms per product and a different
    summation order: ~1e-6 expected; TF32 stays off, torch's default)."""
    device = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
    ref = build(family).float().to(device)
    opt, _ = optimize_model(copy.deepcopy(ref))
    data = {k: v.to(device) for k, v in batch(5, padding=True).items()}
    with use_impl(attention="triton", linear_cross_entropy="triton", rms_norm="triton", swiglu="triton"):
        for m in (ref, opt):
            m.train()
            m(**data).loss.backward()
    for (name, p), q in zip(ref.named_parameters(), opt.parameters()):
        assert close(p.grad, q.grad, 1e-4), name


@pytest.mark.kernel
@pytest.mark.parametrize("general", [None, "ATTENTION", "RMS_NORM", "SWIGLU"])
def test_plain_calls_skip_the_general_path(monkeypatch, general):
    """In the plain case (kernels chosen, one dtype and device, autocast off) the adapters call
    the kernels without the primitives' general entry points (``attention``, ``rms_norm``,
    ``swiglu``), and the attention output needs no copy; a primitive set to the reference
    takes its general path.  Same gradients either way (the float32 test above)."""
    impls = use_impl(
        **{
            name.lower(): "reference" if name == general else "triton"
            for name in ("ATTENTION", "LINEAR_CROSS_ENTROPY", "RMS_NORM", "SWIGLU")
        }
    )
    calls = {"ATTENTION": 0, "RMS_NORM": 0, "SWIGLU": 0}
    for name, module, attr in (
        ("ATTENTION", hf_attention, "attention"),
        ("RMS_NORM", hf_rms_norm, "rms_norm"),
        ("SWIGLU", hf_swiglu, "swiglu"),
    ):

        def counted(*args, _f=getattr(module, attr), _name=name, **kwargs):
            calls[_name] += 1
            return _f(*args, **kwargs)

        monkeypatch.setattr(module, attr, counted)
    device = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
    model, _ = optimize_model(build("llama").float().to(device))
    calls.update(dict.fromkeys(calls, 0))  # the swap's probes run the reference
    model.train()
    data = {k: v.to(device) for k, v in batch(2, padding=True).items()}
    with impls:
        model(**data).loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    assert {k for k, n in calls.items() if n} == ({general} if general else set())
    q = torch.randn(2, 4, 8, 16, device=device)
    with impls:
        out, _ = hf.ojas_attention_forward(model.model.layers[0].self_attn, q, q, q, None)
    assert out.shape == (2, 8, 4, 16) and out.is_contiguous()
    assert (out._base is not None) == (general != "ATTENTION")  # the kernel's buffer itself: no copy


def test_plain_kernel_call_is_the_plain_case_only(monkeypatch):
    monkeypatch.setattr(dispatch, "_interpret", True)
    x = torch.zeros(2, 3)
    with use_impl("triton"):
        assert plain_kernel_call("swiglu", x, x) and plain_kernel_call("OJAS_SWIGLU_IMPL", x, x)
        assert not plain_kernel_call("swiglu", x, x.double()) and not plain_kernel_call("swiglu", x.double())
        assert not plain_kernel_call("swiglu", x, x.bfloat16())
        with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast counts where the function casts
            assert plain_kernel_call("swiglu", x) and not plain_kernel_call("attention", x)
    with use_impl("auto"):  # auto runs the kernel on CUDA only
        assert plain_kernel_call("swiglu", x) == (x.device.type == "cuda")
    with use_impl("reference"):
        assert not plain_kernel_call("swiglu", x)
    monkeypatch.setattr(dispatch, "_interpret", False)
    with use_impl("triton"):
        assert not plain_kernel_call("swiglu", x)
    if torch.cuda.is_available():
        y = torch.zeros(2, 3, device="cuda")
        with use_impl("triton"), torch.autocast("cuda", dtype=torch.bfloat16):
            assert not plain_kernel_call("attention", y) and plain_kernel_call("attention", y.bfloat16())


def test_rope_replaced_reported_and_reverted():
    """optimize_model replaces Llama's apply_rotary_pos_emb (process-wide, counted per model), reports
    it with its theorem, and revert_model of the last optimized model puts Hugging Face's back;
    rope=False leaves it alone; a family without a rotary embedding (GPT-2) reports nothing."""
    import transformers.models.llama.modeling_llama as llama

    module = "transformers.models.llama.modeling_llama"
    original = getattr(llama.apply_rotary_pos_emb, "_ojas_original", llama.apply_rotary_pos_emb)
    users = hf_rope._ROPE_PATCHED.get(module, (None, 0))[1]  # models of earlier tests, never reverted
    a, report = optimize_model(build("llama"))
    b, _ = optimize_model(build("llama", seed=1))
    name = f"{module}.apply_rotary_pos_emb"
    change = next(c for c in report.changed if c.module == name)
    assert change.theorems == ("Ojas.RoPE.Backward.rope_backward_eq_vjp",)
    assert llama.apply_rotary_pos_emb is not original and llama.apply_rotary_pos_emb._ojas_original is original
    assert hf_rope._ROPE_PATCHED[module][1] == users + 2
    revert_model(a)
    assert llama.apply_rotary_pos_emb is not original  # b still uses it
    revert_model(b)
    assert (llama.apply_rotary_pos_emb is original) == (users == 0)
    c, report = optimize_model(build("llama"), rope=False)
    assert any(s.module == name and s.reason == "rope=False" for s in report.left_alone)
    assert hf_rope._ROPE_PATCHED.get(module, (None, 0))[1] == users
    revert_model(c)
    _, report = optimize_model(build("gpt2"))
    assert not any("rotary" in x.module for x in report.changed + report.left_alone)


@pytest.mark.kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_replaced_rope_gives_hugging_faces_values(monkeypatch, dtype):
    """The replacement, kernel path and fallback (unsqueeze_dim=2, cos requiring grad), against
    Hugging Face's function: outputs and gradients equal (torch.equal)."""
    import transformers.models.llama.modeling_llama as llama

    calls = []
    monkeypatch.setattr(hf_rope, "fused_rope", lambda *a, _f=hf_rope.fused_rope: calls.append(1) or _f(*a))
    original = getattr(llama.apply_rotary_pos_emb, "_ojas_original", llama.apply_rotary_pos_emb)
    device = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
    plain = build("llama").to(dtype).to(device)
    model, _ = optimize_model(build("llama").to(dtype).to(device))
    with use_impl(rope="triton"):
        try:
            ids = batch(0)["input_ids"].to(device)
            plain(input_ids=ids)  # another Llama in the process: Hugging Face's own function
            assert not calls
            model(input_ids=ids)  # the optimized one: the kernel in each of its 2 layers
            assert len(calls) == 2
            replaced = llama.apply_rotary_pos_emb
            hf_rope._enter_rope_scope(None, ())  # as inside an optimized attention module
            g = torch.Generator().manual_seed(0)
            q = torch.randn(2, 7, 4, 16, generator=g).to(dtype).to(device).transpose(1, 2).requires_grad_()
            k = torch.randn(2, 2, 7, 16, generator=g).to(dtype).to(device).requires_grad_()
            cos, sin = (torch.randn(1, 7, 16, generator=g).to(dtype).to(device) for _ in range(2))
            for args, kwargs in (
                ((q, k, cos, sin), {}),
                ((q.transpose(1, 2), k.transpose(1, 2), cos, sin), {"unsqueeze_dim": 2}),
                ((q, k, cos.clone().requires_grad_(), sin), {}),
            ):
                got, want = replaced(*args, **kwargs), original(*args, **kwargs)
                assert all(torch.equal(x, y) for x, y in zip(got, want))
                w = [torch.randn(t.shape, generator=g).to(dtype).to(device) for t in want]
                assert all(
                    torch.equal(x, y)
                    for x, y in zip(torch.autograd.grad(got, (q, k), w), torch.autograd.grad(want, (q, k), w))
                )
            assert len(calls) == 3  # the kernel ran for the plain case only
        finally:
            hf_rope._ROPE_SCOPE.depth = 0
            revert_model(model)


def test_report_plans_what_it_applied():
    """report.plan(recipe, ...) is the planner's plan of the model as optimized (its dtype, the model
    fields the call applied) with the recipe's optimizer fields; report.recipe by default."""
    from ojas_ref import memory as P

    model = build("llama").float()
    _, report = optimize_model(model, checkpoint="offload")
    assert report.recipe == MemoryRecipe(checkpoint="offload")
    in_backward = dataclasses.replace(report.recipe, in_backward=True)
    expected = P.plan(
        P.Model.from_module(model),
        P.Setting(
            # relu_mask: no effect on a Hugging Face model, planned as applied (off)
            recipe=MemoryRecipe(checkpoint="offload", in_backward=True, relu_mask=False),
            dtype=torch.float32,
            optimizer="sgd",
            batch=2,
            seq=32,
        ),
    )
    assert report.plan(in_backward, optimizer="sgd", batch=2, seq=32) == expected
    with pytest.warns(DeprecationWarning, match=r"OptimizationReport.plan\(in_backward=\.\.\.\) is deprecated"):
        assert report.plan(optimizer="sgd", batch=2, seq=32, in_backward=True) == expected  # True: its default
    with pytest.warns(DeprecationWarning, match=r"OptimizationReport.plan\(fused=\.\.\.\) is deprecated.*in_backward="):
        assert (
            report.plan(optimizer="sgd", fused=False)
            == report.plan(optimizer="sgd")
            != report.plan(in_backward, optimizer="sgd")
        )
    assert f"peak {report.plan().peak / 2**30:.2f} GiB at" in str(report)
    _, partial = optimize_model(build("llama").to(torch.bfloat16), attention=False, swiglu=False)
    s = partial.plan().setting
    r = s.recipe
    assert (s.dtype, r.attention, r.swiglu, r.rms_norm, r.linear_cross_entropy, r.checkpoint) == (
        torch.bfloat16,
        False,
        False,
        True,
        True,
        False,
    )
    for unplanned, reason in (
        (build("llama"), "float32 or bfloat16"),
        (build("gpt2").float(), "Llama-shaped"),
        (torch.nn.TransformerEncoderLayer(8, 2), "plain models"),
    ):
        _, r = optimize_model(unplanned)
        with pytest.raises(NotImplementedError, match=reason):
            r.plan()
        assert "plan: none" in str(r)
    _, sparse = optimize_model(build("llama", tie_word_embeddings=False).float(), sparse_embedding=True)
    with pytest.raises(NotImplementedError, match="sparse embedding"):
        sparse.plan()


def test_report_plans_a_primitive_left_alone_as_off():
    """The family check leaves Llama's attention alone (cross-attention configured): report.recipe
    keeps attention=True, the plan has the standard attention."""
    _, report = optimize_model(build("llama", add_cross_attention=True).float())
    assert report.recipe.attention and not any(c.kind == "attention" for c in report.changed)
    setting = report.plan().setting
    assert not setting.recipe.attention and setting.recipe.linear_cross_entropy and setting.recipe.rms_norm


def test_report_plan_refuses_another_model_and_maps_the_old_keywords():
    _, report = optimize_model(build("llama").float(), checkpoint=True)
    with pytest.raises(ValueError, match=r"recipe: checkpoint=False \(report.recipe: True\).*dataclasses.replace"):
        report.plan(MemoryRecipe(in_backward=True))
    with pytest.raises(TypeError, match="recipe= and the deprecated host_state="):
        report.plan(report.recipe, host_state=True)
    with pytest.raises(TypeError, match="unexpected keyword argument 'ojas_loss'"):
        report.plan(ojas_loss=True)
    with pytest.raises(TypeError, match="recipe must be an ojas_ref.MemoryRecipe or None, got dict"):
        report.plan({"in_backward": True})
    with pytest.warns(DeprecationWarning) as caught:
        old = report.plan(host_state=True, state_slice_mb=1.0, bucket_cap_mb=8.0)
    assert {str(w.message).split(")")[0] for w in caught} == {
        "OptimizationReport.plan(host_state=...",
        "OptimizationReport.plan(state_slice_mb=...",
        "OptimizationReport.plan(bucket_cap_mb=...",
    }
    recipe = dataclasses.replace(
        report.recipe, in_backward=True, state_device="cpu", state_slice_mb=1.0, bucket_cap_mb=8.0
    )
    assert old == report.plan(recipe)
    assert old.setting.recipe.state_device == "cpu" and old.setting.recipe.bucket_cap_mb == 8.0


def test_a_recipe_the_planner_does_not_model_is_printed_without_a_plan():
    """overlap=True: the planner refuses it; print(report) says so instead of raising."""
    _, report = optimize_model(build("llama").float(), MemoryRecipe(in_backward=True, overlap=True))
    with pytest.raises(NotImplementedError, match="recipe.overlap=True is not modelled"):
        report.plan()
    assert "plan (AdamW in InBackwardOptimizer): none (recipe.overlap=True is not modelled" in str(report)


def test_a_recipe_sets_the_keywords_and_the_keywords_override_it():
    recipe = MemoryRecipe(attention=False, checkpoint=True, in_backward=True, bucket_cap_mb=8.0)
    by_recipe_model, by_keywords_model = build("llama"), build("llama")
    _, by_recipe = optimize_model(by_recipe_model, recipe)
    _, by_keywords = optimize_model(by_keywords_model, attention=False, checkpoint=True)
    assert by_recipe.details() == by_keywords.details() and "(decoder layers)" in by_recipe.details()
    assert by_recipe.recipe == recipe and by_keywords.recipe == MemoryRecipe(attention=False, checkpoint=True)
    model = build("llama")
    _, overridden = optimize_model(model, recipe, attention=None, checkpoint=False, rms_norm=False)
    assert overridden.recipe == dataclasses.replace(recipe, checkpoint=False, rms_norm=False)
    assert not any(getattr(m, "gradient_checkpointing", False) for m in model.modules())
    assert {s.reason for s in overridden.left_alone} == {"rms_norm=False"}  # attention=False: not reported
    assert not any(c.kind in ("attention", "rms_norm") for c in overridden.changed)
    # a second call: the same model fields return the report, with the call's recipe
    assert optimize_model(by_recipe_model, recipe)[1] is by_recipe
    again = optimize_model(by_recipe_model, dataclasses.replace(recipe, bucket_cap_mb=16.0))[1]
    assert again.recipe.bucket_cap_mb == 16.0 and by_recipe.recipe == recipe and again.changed == by_recipe.changed
    with pytest.raises(ValueError, match=r"checkpoint=True \(now False\)"):
        optimize_model(by_recipe_model, recipe, checkpoint=False)
    with pytest.raises(TypeError, match="recipe must be an ojas_ref.MemoryRecipe or None, got dict"):
        optimize_model(build("llama"), {"attention": False})
    with pytest.raises(ValueError, match="head_update=True needs linear_cross_entropy=True"):
        optimize_model(build("llama"), MemoryRecipe(in_backward=True, head_update=True), linear_cross_entropy=False)


def test_gpt2_default_attention_dropout_runs_in_the_ojas_attention():
    """GPT-2's default attn_pdrop = 0.1: eval (no dropout) equals the unpatched model; in training
    the probabilities are dropped (loss differs from eval), reproducibly under torch.manual_seed."""
    plain, model = build("gpt2", attn_pdrop=0.1), build("gpt2", attn_pdrop=0.1)
    optimize_model(model)
    data = batch(3)
    plain.eval(), model.eval()
    with torch.no_grad():
        assert close(model(**data).loss, plain(**data).loss)
    model.train()
    losses = []
    for seed in (5, 5, 6):
        torch.manual_seed(seed)
        losses.append(model(**data).loss)
    losses[0].backward()
    assert losses[0].item() == losses[1].item() != losses[2].item()
    assert not close(losses[0], plain(**data).loss, rtol=1e-6)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters() if p.requires_grad)


def test_data_parallel_replicas_are_refused():
    """nn.DataParallel's replicas (torch.nn.parallel.replicate marks them _is_replica) would share the
    loss hook's per-call state across threads: refused before the forward, naming DDP."""
    model = build("llama")
    optimize_model(model)
    replica = model._replicate_for_data_parallel()  # what replicate() makes for each GPU
    with pytest.raises(NotImplementedError, match="DataParallel.*DistributedDataParallel"):
        replica(**batch(0))
    assert model(**batch(0)).loss.isfinite()  # the model itself is unaffected


def test_family_support_cross_entropy_is_a_deprecated_alias():
    """FamilySupport.cross_entropy, the field's name in release 0.1, warns and reads
    ``linear_cross_entropy``: None where the loss is supported (Gemma 2, with its final soft cap),
    else the reason it is left alone (an output embedding that is not a Linear)."""
    support = hf.family_support(build("gemma2"))
    assert support.linear_cross_entropy is None and support.softcap == 3.0
    model = build("llama")
    model.set_output_embeddings(torch.nn.Identity())
    support = hf.family_support(model)
    assert "not a torch.nn.Linear" in support.linear_cross_entropy
    with pytest.warns(DeprecationWarning, match="FamilySupport.cross_entropy is deprecated"):
        assert support.cross_entropy == support.linear_cross_entropy
