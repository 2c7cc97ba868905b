"""``optimize_model`` where it meets other features (issues 33 and 34): PEFT LoRA on ``lm_head``,
copies (``copy.deepcopy``, pickle, ``torch.save``, ``save_pretrained``), later edits of the model
(``resize_token_embeddings``), the user's own reentrant checkpointing, a second call with other
arguments, and the report as printed.

Each test compares against the unpatched model in float64 (test_optimize_huggingface.py's
tolerance and helpers) or checks the state that the seam used to get wrong.
"""

from __future__ import annotations

import copy
import io
import pickle
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()
warnings.filterwarnings("ignore", module="transformers")

from ojas_ref.functional import dispatch  # noqa: E402
from ojas_ref.functional.dispatch import use_impl  # noqa: E402
from ojas_ref.integrations import hf  # noqa: E402
import ojas_ref.integrations.hf.rope as hf_rope  # noqa: E402
from ojas_ref.integrations.hf.optimize import optimize_model, revert_model  # noqa: E402
from ojas_ref.integrations.hf.report import REPORT_WIDTH  # noqa: E402
from test_optimize_huggingface import (  # noqa: E402
    _LargestTensor,
    _logit_sized,
    assert_same_parameters,
    batch,
    build,
    close,
    float64_causal_lm_loss,
    train,
)

LLAMA = "transformers.models.llama.modeling_llama"


def users() -> int:
    """How many optimized Llama models (of this and earlier tests) use the replaced rotary function."""
    return hf_rope._ROPE_PATCHED.get(LLAMA, (None, 0))[1]


def grads(model, data: dict) -> tuple[float, dict[str, torch.Tensor]]:
    """One training forward and backward: the loss and the gradient of every trainable parameter."""
    model.train()
    model.zero_grad()
    loss = model(**data).loss
    loss.backward()
    return loss.item(), {
        n: p.grad.to_dense() if p.grad.is_sparse else p.grad.clone()
        for n, p in model.named_parameters()
        if p.requires_grad
    }


def assert_same_grads(ref, opt, data: dict) -> None:
    (la, ga), (lb, gb) = grads(ref, data), grads(opt, data)
    assert lb == pytest.approx(la, rel=1e-9)
    assert ga.keys() == gb.keys()
    for name in ga:
        assert close(ga[name], gb[name]), name


# --------------------------------------------------------------------------
# PEFT LoRA on lm_head (issue 33, item 6)
# --------------------------------------------------------------------------


def lora_config(dropout: float = 0.0):
    peft = pytest.importorskip("peft")
    return peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "lm_head"], lora_dropout=dropout)


def test_lora_on_lm_head_in_either_order_trains_as_peft():
    """PEFT around an optimized model and optimize_model around a PEFT model, lm_head among the LoRA
    targets: the unpatched PEFT model's losses, gradients and AdamW steps (the adapters' B made
    nonzero, so that the head's delta weight counts), and no logits in training."""
    peft = pytest.importorskip("peft")
    ref = peft.get_peft_model(build("llama"), lora_config())
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in ref.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.1)
    optimized_first = peft.get_peft_model(optimize_model(build("llama"))[0], lora_config())
    optimized_first.load_state_dict(ref.state_dict())
    optimized_last, report = optimize_model(copy.deepcopy(ref))
    assert any(c.module == "lm_head" and "linear_cross_entropy" in c.what for c in report.changed), report.details()
    data = batch(1, padding=True)
    for opt in (optimized_first, optimized_last):
        assert_same_grads(ref, opt, data)
        assert opt(**data).logits is None
        head = opt.get_base_model().lm_head
        assert len(head._forward_pre_hooks) == 1 and not head.base_layer._forward_pre_hooks
    steps = [[batch(seed, padding=True)] for seed in range(2)]
    losses = train(ref, steps)
    for opt in (optimized_first, optimized_last):
        assert train(opt, steps) == pytest.approx(losses, rel=1e-9)
        assert_same_parameters(ref, opt)
        revert_model(opt)
        head = opt.get_base_model().lm_head
        assert not head._forward_pre_hooks and not head.base_layer._forward_pre_hooks
        assert opt(**data).logits is not None


def test_lora_dropout_on_lm_head_is_refused_in_either_order():
    """LoRA dropout on the head's adapter has no weight form: left alone with the reason when the
    PEFT model is optimized; NotImplementedError naming it at the first training forward, before it
    runs, when PEFT is put on an optimized model."""
    peft = pytest.importorskip("peft")
    _, report = optimize_model(peft.get_peft_model(build("llama"), lora_config(dropout=0.1)))
    head = [s for s in report.left_alone if s.module == "lm_head"]
    assert len(head) == 1 and "lora_dropout=0.1" in head[0].reason
    model = peft.get_peft_model(optimize_model(build("llama"))[0], lora_config(dropout=0.1))
    model.train()
    with pytest.raises(NotImplementedError, match="lora_dropout=0.1.*revert_model"):
        model(**batch(0))
    model.eval()
    assert model(**batch(0)).logits is not None  # outside training the model runs as PEFT's


# --------------------------------------------------------------------------
# Copies (issue 33, item 7; issue 34, item 2)
# --------------------------------------------------------------------------


def test_a_deep_copy_and_the_original_revert_independently():
    """The replaced rotary function is counted per model, copies included: reverting the copy leaves
    the original optimized (the function still replaced), reverting the original then works and,
    when no other model uses it, puts Hugging Face's function back."""
    import transformers.models.llama.modeling_llama as llama

    before = users()
    model, _ = optimize_model(build("llama"))
    replaced = llama.apply_rotary_pos_emb
    copied = copy.deepcopy(model)
    assert users() == before + 2
    revert_model(copied)
    assert users() == before + 1 and llama.apply_rotary_pos_emb is replaced
    data = batch(2, padding=True)
    for m in (model, copied):
        m.train()
    assert model(**data).logits is None and copied(**data).logits is not None
    revert_model(model)
    assert users() == before and (llama.apply_rotary_pos_emb is not replaced) == (before == 0)
    assert model(**data).logits is not None


def test_a_plain_rope_function_is_replaced_by_a_function_and_counted(monkeypatch):
    """Without Hugging Face's kernels package a modeling module's apply_rotary_pos_emb is a function:
    the replacement is a function too (the kernels case, an nn.Module, runs in every Llama test of
    this venv); uses are counted, copies of a use are uses, and the last release puts it back."""
    import types

    from ojas_ref.functional.rope import rope_reference

    module = types.ModuleType("fake_modeling")
    module.apply_rotary_pos_emb = rope_reference
    monkeypatch.setitem(sys.modules, module.__name__, module)
    use = hf_rope.RopeUse(module.__name__)
    replaced = module.apply_rotary_pos_emb
    assert isinstance(replaced, types.FunctionType) and replaced._ojas_original is rope_reference
    copied = pickle.loads(pickle.dumps(use))
    assert hf_rope._ROPE_PATCHED[module.__name__][1] == 2
    use.release()
    use.release()  # once only
    assert module.apply_rotary_pos_emb is replaced
    copied.release()
    assert module.apply_rotary_pos_emb is rope_reference and module.__name__ not in hf_rope._ROPE_PATCHED
    with pytest.raises(RuntimeError, match="released"):
        copy.deepcopy(use)


def _round_trips() -> dict:
    def torch_save(model):
        buffer = io.BytesIO()
        torch.save(model, buffer)
        buffer.seek(0)
        return torch.load(buffer, weights_only=False)

    return {"pickle": lambda m: pickle.loads(pickle.dumps(m)), "torch.save": torch_save, "deepcopy": copy.deepcopy}


@pytest.mark.parametrize("how", list(_round_trips()))
@pytest.mark.parametrize(
    "family, flags",
    [("llama", {}), ("llama", dict(rope=False)), ("gemma3", {}), ("qwen3", dict(sparse_embedding=True))],
)
def test_an_optimized_model_round_trips(how, family, flags):
    """pickle, torch.save / torch.load(weights_only=False) and copy.deepcopy of an optimized model give
    an optimized model (the same losses and gradients in training, no logits) that reverts on its
    own, leaving the original optimized."""
    tie = {} if family == "gemma3" else dict(tie_word_embeddings=False)
    model, report = optimize_model(build(family, **tie), **flags)
    before = users()
    loaded = _round_trips()[how](model)
    assert users() == before + (family == "llama" and not flags)
    assert type(loaded.model.norm) is type(model.model.norm)
    data = batch(3, padding=True)
    assert_same_grads(model, loaded, data)
    assert loaded(**data).logits is None
    assert str(optimize_model(loaded, **flags)[1]) == str(report)
    revert_model(loaded)
    assert users() == before
    assert loaded(**data).logits is not None and model(**data).logits is None
    revert_model(model)


def test_an_optimized_model_loads_in_a_fresh_process(tmp_path):
    """torch.save in this process, torch.load in another (nothing imported there but ojas_ref's
    unpickling): the loaded model computes the ojas loss (no logits) with this process's loss, and
    reverts without error."""
    model = build("llama")
    del model._loss_function  # Hugging Face's loss, which the other process can import
    optimize_model(model)
    data = batch(4, padding=True)
    model.train()
    loss = model(**data).loss.item()
    torch.save({"model": model, "data": data}, tmp_path / "model.pt")
    script = textwrap.dedent(f"""
        import torch
        saved = torch.load({str(tmp_path / "model.pt")!r}, weights_only=False)
        model, data = saved["model"], saved["data"]
        model.train()
        out = model(**data)
        assert out.logits is None, "the loaded model is not optimized"
        print(repr(out.loss.item()))
        from ojas_ref import revert_model
        revert_model(model)
        assert model(**data).logits is not None
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert float(done.stdout.strip().splitlines()[-1]) == pytest.approx(loss, rel=1e-12)


@pytest.mark.parametrize("flags", [{}, dict(checkpoint=True), dict(checkpoint="offload", checkpoint_split=True)])
def test_save_pretrained_and_from_pretrained(tmp_path, flags):
    """save_pretrained of an optimized model writes the plain model's weights and config; the loaded
    model is plain (optimize it again) and computes the same losses and gradients once optimized."""
    model, _ = optimize_model(build("llama", tie_word_embeddings=False), **flags)
    model.save_pretrained(tmp_path)
    loaded = type(model).from_pretrained(tmp_path, dtype=torch.float64)
    assert loaded.config._attn_implementation != hf.ATTENTION_NAME
    assert not hasattr(loaded, "_ojas_optimized")
    loaded._loss_function = float64_causal_lm_loss  # as build's
    optimize_model(loaded, **flags)
    assert_same_grads(model, loaded, batch(5, padding=True))


# --------------------------------------------------------------------------
# Later edits of the model (issue 33, item 8)
# --------------------------------------------------------------------------


def test_the_loss_follows_a_resized_output_embedding():
    """resize_token_embeddings after optimize_model gives a new lm_head: the loss hook moves to it, so
    no [tokens, vocabulary] tensor is formed, and the loss and gradients are the unpatched resized
    model's."""
    vocab = 5003  # above the reference's vocabulary chunk (4096), as test_no_logits_allocated_in_training
    ref = build("llama", tie_word_embeddings=False)
    opt, _ = optimize_model(copy.deepcopy(ref))
    for m in (ref, opt):
        torch.manual_seed(1)  # the new rows' initialisation
        m.resize_token_embeddings(vocab)
    assert torch.equal(ref.lm_head.weight, opt.lm_head.weight)
    data = batch(6, b=2, s=24)
    opt.train()
    with _LargestTensor() as mode:
        opt(**data).loss.backward()
    assert not _logit_sized(mode.shapes, 2 * 24, vocab), "logits formed"
    assert_same_grads(ref, opt, data)
    revert_model(opt)
    assert not opt.lm_head._forward_pre_hooks and not opt._forward_pre_hooks


def test_an_output_embedding_replaced_by_another_kind_raises_before_the_forward():
    model, _ = optimize_model(build("llama"))
    model.set_output_embeddings(torch.nn.Sequential(model.lm_head))
    model.train()
    with pytest.raises(NotImplementedError, match="torch.nn.modules.container.Sequential, not a torch.nn.Linear"):
        model(**batch(0))


def test_a_sparse_embedding_follows_a_replaced_input_embedding():
    """sparse_embedding=True, then set_input_embeddings (resize_token_embeddings keeps the module):
    the new input embedding's gradient is row-sparse too (else the dense [V, D] gradient comes back
    unreported); revert makes it dense; one that cannot be sparse raises before the forward."""
    model, _ = optimize_model(build("llama", tie_word_embeddings=False), sparse_embedding=True)
    model.set_input_embeddings(torch.nn.Embedding(70, 32, dtype=torch.float64))
    model.train()
    model(**batch(8)).loss.backward()
    embedding = model.get_input_embeddings()
    assert embedding.sparse and embedding.weight.grad.is_sparse
    revert_model(model)
    assert not embedding.sparse and not model._forward_pre_hooks
    model, _ = optimize_model(build("llama", tie_word_embeddings=False), sparse_embedding=True)
    model.set_input_embeddings(torch.nn.Embedding(70, 32, max_norm=1.0, dtype=torch.float64))
    model.train()
    with pytest.raises(NotImplementedError, match="replaced after optimize_model.*max_norm"):
        model(**batch(8))


@pytest.mark.parametrize("checkpoint, split", [(True, False), ("offload", False), (True, True)])
def test_checkpointing_replaced_after_optimize_model_raises(checkpoint, split):
    """gradient_checkpointing_enable after optimize_model(checkpoint=...) replaces the function that
    optimize_model set (the offload, the split, the non-reentrant one) by Hugging Face's: the next
    training forward raises instead of silently running what the report does not say."""
    model, _ = optimize_model(build("llama"), checkpoint=checkpoint, checkpoint_split=split)
    model.train()
    model(**batch(0))
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    with pytest.raises(RuntimeError, match=rf"replaced after optimize_model\(checkpoint={checkpoint!r}"):
        model(**batch(0))
    model.eval()
    model(**batch(0))  # outside training nothing checkpoints
    revert_model(model)
    model.train()
    model(**batch(0))


def test_the_same_non_reentrant_checkpointing_set_again_is_accepted():
    """Hugging Face's Trainer (gradient_checkpointing=True) enables non-reentrant checkpointing again
    after optimize_model(checkpoint=True): the same computation, so training goes on; the
    gradients are the unpatched model's."""
    ref = build("llama")
    model, _ = optimize_model(copy.deepcopy(ref), checkpoint=True)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    assert_same_grads(ref, model, batch(9, padding=True))


# --------------------------------------------------------------------------
# The user's reentrant checkpointing (issue 33, item 9)
# --------------------------------------------------------------------------


def test_reentrant_checkpointing_is_made_non_reentrant_and_reverted(monkeypatch):
    """checkpoint=True over the model's own reentrant checkpointing: the layers run non-reentrant (the
    reentrant CheckpointFunction never runs), as reported; the gradients are the unpatched model's;
    revert_model gives the user's function back."""
    ref = build("llama")
    model = copy.deepcopy(ref)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    before = {id(m): m._gradient_checkpointing_func for m in model.modules() if hasattr(m, "gradient_checkpointing")}
    _, report = optimize_model(model, checkpoint=True)
    [change] = [c for c in report.changed if "checkpointing" in c.what]
    assert "made non-reentrant" in change.what
    layers = [m for m in model.modules() if hasattr(m, "gradient_checkpointing")]
    assert all(m._gradient_checkpointing_func.keywords == {"use_reentrant": False} for m in layers)
    reentrant = []
    monkeypatch.setattr(
        torch.utils.checkpoint.CheckpointFunction,
        "apply",
        lambda *a: reentrant.append(1) or pytest.fail("reentrant checkpoint ran"),
    )
    assert_same_grads(ref, model, batch(7, padding=True))
    assert not reentrant
    revert_model(model)
    assert all(m._gradient_checkpointing_func is before[id(m)] for m in layers)


def test_an_unknown_checkpointing_function_is_reported_as_kept():
    model = build("llama")

    def my_checkpoint(function, *args, **kwargs):
        return torch.utils.checkpoint.checkpoint(function, *args, use_reentrant=False, **kwargs)

    model._set_gradient_checkpointing(enable=True, gradient_checkpointing_func=my_checkpoint)
    _, report = optimize_model(model, checkpoint=True)
    [change] = [c for c in report.changed if "checkpointing" in c.what]
    assert "model's own function" in change.what and "my_checkpoint" in change.what
    assert "(non-reentrant)" not in change.what
    assert all(
        m._gradient_checkpointing_func is my_checkpoint for m in model.modules() if hasattr(m, "gradient_checkpointing")
    )


# --------------------------------------------------------------------------
# A second call, and the report as printed (issue 34, item 7)
# --------------------------------------------------------------------------


def test_a_second_call_with_other_arguments_raises_and_the_same_returns_the_report():
    model = build("llama")
    _, first = optimize_model(model)
    assert optimize_model(model)[1] is first
    with pytest.raises(ValueError, match=r"checkpoint=False \(now True\).*revert_model"):
        optimize_model(model, checkpoint=True)
    with pytest.raises(ValueError, match=r"rope=True \(now False\), sparse_embedding=False \(now True\)"):
        optimize_model(model, rope=False, sparse_embedding=True)
    assert not any(getattr(m, "gradient_checkpointing", False) for m in model.modules())  # nothing changed
    revert_model(model)
    _, second = optimize_model(model, checkpoint=True)
    assert any("checkpointing" in c.what for c in second.changed)
    plain = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0)
    optimize_model(plain)
    with pytest.raises(ValueError, match=r"attention=True \(now False\)"):
        optimize_model(plain, attention=False)


def test_the_printed_report_fits_a_screen_at_any_depth(monkeypatch):
    """A 32-layer model: the summary groups the modules with counts, in a screen of lines no wider
    than REPORT_WIDTH, and says what runs on the model's device (the PyTorch reference on the CPU;
    the Triton kernels where they would run); details() lists every module."""
    model = build("llama", num_hidden_layers=32)
    _, report = optimize_model(model)
    text = str(report)
    lines = text.splitlines()
    assert len(lines) <= 20 and max(map(len, lines)) <= REPORT_WIDTH, text
    assert "32 x LlamaAttention" in text and "65 x LlamaRMSNorm" in text and "model.layers.*.mlp" in text
    assert "runs on cpu, float64: the PyTorch reference implementations (Triton kernels: CUDA, float16/" in text
    details = report.details()
    assert all(c.module in details and all(t in details for t in c.theorems) for c in report.changed)
    model.float()
    monkeypatch.setattr(dispatch, "_interpret", True)
    with use_impl("triton"):
        assert "runs on cpu, float32: the Triton kernels" in str(report)
    with use_impl("triton", rope="reference"):
        assert (
            "Triton kernels for attention, rms_norm, swiglu, linear_cross_entropy; PyTorch reference for rope"
            in str(report)
        )


def test_a_printed_plan_is_its_table():
    """print(report.plan(...)) shows the planner's table (Plan.__str__), not the dataclass's fields."""
    _, report = optimize_model(build("llama").float())
    plan = report.plan(batch=2, seq=64)
    assert str(plan) == plan.table() and str(plan).startswith("ojas plan:") and "Plan(" not in str(plan)
    assert ".table()" in str(report)
