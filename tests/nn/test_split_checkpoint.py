"""``optimize_model(..., checkpoint_split=True)``: each decoder layer checkpointed as two segments
(ojas_ref/integrations/hf/split_checkpoint.py, ``SplitCheckpoint``).

Recomputing a segment from its input repeats the forward's operations, so on the CPU the losses
and gradients must be those of the unsplit checkpointed model bit for bit (float32 and bfloat16,
padding masks, each checked family, checkpoint=True and "offload", the ojas reference paths and,
under TRITON_INTERPRET=1, the Triton kernels). The backward must recompute the MLP half before,
and apart from, the attention half; everything outside training (eval, no_grad, generate),
``state_dict``, copies and :func:`revert_model` must be as without the split. The ``gpu`` tests
(skipped without CUDA) check the bits and the peak on CUDA.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import pickle
import warnings

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS for the gpu tests

import pytest  # noqa: E402
import torch  # noqa: E402

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()
warnings.filterwarnings("ignore", module="transformers")

from ojas_ref.functional.dispatch import use_impl  # noqa: E402
from ojas_ref.integrations import hf  # noqa: E402
from ojas_ref.nn.offload import OffloadedCheckpoint  # noqa: E402
from ojas_ref.integrations.hf.optimize import optimize_model, revert_model  # noqa: E402
from test_offload import batch, train  # noqa: E402
from test_optimize_huggingface import COMMON, FAMILIES, V  # noqa: E402

SPLIT_FAMILIES = ("llama", "mistral", "qwen2", "qwen3")
LAYERS = 3
OFF = dict(attention=False, linear_cross_entropy=False, rms_norm=False, swiglu=False, rope=False)


def build(family: str = "llama", dtype=torch.float32, device="cpu", **overrides) -> torch.nn.Module:
    config_name, model_name, extra = FAMILIES[family]
    config = getattr(transformers, config_name)(**(COMMON | dict(num_hidden_layers=LAYERS) | (extra or {}) | overrides))
    torch.manual_seed(0)
    with torch.device(device):
        model = getattr(transformers, model_name)(config).to(dtype)
    model.config.use_cache = False
    return model


def run(model, steps: int = 2, device="cpu") -> tuple[list[torch.Tensor], list[list[torch.Tensor]]]:
    """test_offload's AdamW steps on its left-padded batches: the losses and each step's gradients."""
    return train(model, [batch(seed, padding=True, device=device) for seed in range(steps)])


def assert_bitwise(ref, split, runs) -> None:
    (la, ga), (lb, gb) = runs
    assert all(torch.equal(a, b) for a, b in zip(la, lb)), (la, lb)
    names = [n for n, _ in ref.named_parameters()]
    for step, (sa, sb) in enumerate(zip(ga, gb)):
        for name, a, b in zip(names, sa, sb):
            assert torch.equal(a, b), f"step {step} {name}"


def pair(family: str, dtype, checkpoint, device="cpu", **flags):
    ref = build(family, dtype, device)
    whole, _ = optimize_model(copy.deepcopy(ref), checkpoint=checkpoint, **flags)
    split, report = optimize_model(copy.deepcopy(ref), checkpoint=checkpoint, checkpoint_split=True, **flags)
    return whole, split, report


# ---------------------------------------------------------------- exactness


@pytest.mark.parametrize(
    "family,dtype,checkpoint",
    [
        *((f, d, True) for f in SPLIT_FAMILIES for d in (torch.float32, torch.bfloat16)),
        ("llama", torch.float32, "offload"),
        ("qwen3", torch.bfloat16, "offload"),
    ],
    ids=str,
)
def test_split_trains_bit_identically_to_whole_layer_checkpointing(family, dtype, checkpoint):
    whole, split, report = pair(family, dtype, checkpoint)
    assert any("split in two segments" in c.what for c in report.changed), str(report)
    assert_bitwise(whole, split, (run(whole), run(split)))
    if checkpoint == "offload":
        func = split.model.layers[0]._gradient_checkpointing_func.segment_checkpoint
        assert isinstance(func, OffloadedCheckpoint)
        assert func.stats.offloaded_tensors == 2 * 2 * LAYERS == func.stats.restored_tensors  # 2 steps


def test_split_with_the_ojas_kernels_off_is_bitwise_too():
    whole, split, _ = pair("llama", torch.float32, True, **OFF)
    assert_bitwise(whole, split, (run(whole), run(split)))


@pytest.mark.interpreter
def test_split_with_the_triton_kernels_interpreted():
    with use_impl(attention="triton", linear_cross_entropy="triton", rms_norm="triton", swiglu="triton", rope="triton"):
        whole, split, _ = pair("llama", torch.float32, "offload")
        assert_bitwise(whole, split, (run(whole, 1), run(split, 1)))


# ---------------------------------------------------------------- what the split changes


def _backward_events(model) -> list[str]:
    """The order of the recomputations (forward pre-hooks firing during the backward) and of the
    first weight gradient of each half, over one training step."""
    events, state = [], {"backward": False}
    handles = []
    for i, layer in enumerate(model.model.layers):
        for part in ("self_attn", "mlp"):
            module = getattr(layer, part)
            handles.append(
                module.register_forward_pre_hook(
                    lambda m, a, k, tag=f"recompute {part} {i}": events.append(tag) if state["backward"] else None,
                    with_kwargs=True,
                )
            )
        for part, weight in (("mlp", layer.mlp.down_proj.weight), ("self_attn", layer.self_attn.q_proj.weight)):
            handles.append(
                weight.register_post_accumulate_grad_hook(lambda p, tag=f"grad {part} {i}": events.append(tag))
            )
    model.train()
    loss = model(**batch(0, padding=True)).loss
    state["backward"] = True
    loss.backward()
    for h in handles:
        h.remove()
    return events


def test_the_mlp_half_is_recomputed_and_done_before_the_attention_half():
    whole, split, _ = pair("llama", torch.float32, True)
    last = LAYERS - 1
    assert _backward_events(whole)[:4] == [
        f"recompute self_attn {last}",
        f"recompute mlp {last}",
        f"grad mlp {last}",
        f"grad self_attn {last}",
    ]
    events = _backward_events(split)
    assert events == [
        e
        for i in reversed(range(LAYERS))
        for e in (f"recompute mlp {i}", f"grad mlp {i}", f"recompute self_attn {i}", f"grad self_attn {i}")
    ]


def test_the_segment_inputs_are_the_saved_checkpoints():
    """Two [batch, seq, hidden] inputs per layer offloaded, x and h = x + attention: none is a parameter."""
    _, split, _ = pair("llama", torch.float32, "offload")
    func = split.model.layers[0]._gradient_checkpointing_func.segment_checkpoint
    seen = []
    func.observe = lambda t: seen.append(t)
    split.train()
    split(**batch(0, padding=True)).loss.backward()
    assert len(seen) == 2 * LAYERS and all(t.shape == (2, 11, COMMON["hidden_size"]) for t in seen)
    assert not {t.data_ptr() for t in seen} & {p.data_ptr() for p in split.parameters()}
    assert func.stats.kept_tensors == 0


def test_outside_training_nothing_changes():
    """eval, training mode without gradients, and generate give the unsplit model's bits."""
    whole, split, _ = pair("llama", torch.float32, "offload")
    data = batch(1, padding=True)
    for m in (whole, split):
        m.eval()
    with torch.no_grad():
        assert torch.equal(whole(**data).logits, split(**data).logits)
        for m in (whole, split):
            m.train()
        assert torch.equal(whole(**data).loss, split(**data).loss)
    for m in (whole, split):
        m.eval()
    prompt = dict(input_ids=data["input_ids"], attention_mask=data["attention_mask"])
    args = dict(max_new_tokens=4, do_sample=False, pad_token_id=0)
    assert torch.equal(whole.generate(**prompt, **args), split.generate(**prompt, **args))
    assert split.model.layers[0]._gradient_checkpointing_func.segment_checkpoint.stats.offloaded_tensors == 0


def test_state_dict_copies_and_revert():
    ref = build()
    split, report = optimize_model(copy.deepcopy(ref), checkpoint=True, checkpoint_split=True)
    assert list(split.state_dict()) == list(ref.state_dict())
    assert report.plan().setting.recipe.checkpoint_split and report.plan().setting.recipe.checkpoint
    in_backward = dataclasses.replace(report.recipe, in_backward=True, bucket_cap_mb=32.0)
    assert report.plan(in_backward).setting.recipe.bucket_cap_mb == 32.0
    layer = split.model.layers[0]
    assert type(layer.input_layernorm).__name__ == "OjasSplitOjasLlamaRMSNorm"
    assert type(layer.self_attn).__name__ == "OjasSplitLlamaAttention"
    assert type(layer.mlp).__name__ == "OjasSplitOjasLlamaMLP"
    clone = copy.deepcopy(split)  # (Hugging Face's checkpointing leaves the model itself unpicklable)
    func = clone.model.layers[0]._gradient_checkpointing_func
    assert isinstance(func, hf.SplitCheckpoint) and func.layer is clone.model.layers[0]
    assert_bitwise(split, clone, (run(copy.deepcopy(split), 1), run(clone, 1)))
    pickled = pickle.loads(pickle.dumps(layer))  # a split layer pickles: classes and function
    assert type(pickled.mlp) is type(layer.mlp) and pickled._gradient_checkpointing_func.layer is pickled
    revert_model(split)
    assert [type(m) for m in split.modules()] == [type(m) for m in ref.modules()]
    assert not any(
        isinstance(getattr(m, "_gradient_checkpointing_func", None), hf.SplitCheckpoint) for m in split.modules()
    )
    assert not any(getattr(m, "gradient_checkpointing", False) for m in split.modules())
    split.train()
    ref.train()
    data = batch(2, padding=True)
    assert torch.equal(split(**data).logits, ref(**data).logits)


def test_over_the_users_every_other_layer_checkpointing():
    model = build()
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False}, every_n_layers=2)
    old = [m._gradient_checkpointing_func for m in model.model.layers]
    _, report = optimize_model(model, checkpoint="offload", checkpoint_split=True, **OFF)
    funcs = [m._gradient_checkpointing_func for m in model.model.layers]
    assert [isinstance(f, hf.SplitCheckpoint) for f in funcs] == [True, False, True]
    assert type(model.model.layers[1].mlp) is transformers.models.llama.modeling_llama.LlamaMLP
    model.train()
    model(**batch(0, padding=True)).loss.backward()
    assert funcs[0].segment_checkpoint is funcs[2].segment_checkpoint
    assert funcs[0].segment_checkpoint.stats.offloaded_tensors == 4
    revert_model(model)
    assert [m._gradient_checkpointing_func for m in model.model.layers] == old
    assert [m.gradient_checkpointing for m in model.model.layers] == [True, False, True]


# ---------------------------------------------------------------- refusals


@pytest.mark.parametrize("family", ["gemma2", "gemma3", "phi3", "gpt2"])
def test_other_layouts_are_refused_naming_the_family_before_any_change(family):
    config_name, model_name, extra = FAMILIES[family]
    if extra is None:
        config = transformers.GPT2Config(vocab_size=V, n_embd=32, n_layer=2, n_head=4, n_positions=64)
    else:
        config = getattr(transformers, config_name)(**(COMMON | extra))
    model = getattr(transformers, model_name)(config)
    before = (model.config._attn_implementation, [type(m) for m in model.modules()])
    with pytest.raises(NotImplementedError, match=f"checkpoint_split=True: model type '{config.model_type}'"):
        optimize_model(model, checkpoint=True, checkpoint_split=True)
    assert (model.config._attn_implementation, [type(m) for m in model.modules()]) == before
    assert not any(getattr(m, "gradient_checkpointing", False) for m in model.modules())


def test_bad_uses_raise():
    with pytest.raises(ValueError, match="checkpoint_split=True needs checkpoint"):
        optimize_model(build(), checkpoint_split=True)
    with pytest.raises(TypeError, match="checkpoint_split must be a bool"):
        optimize_model(build(), checkpoint=True, checkpoint_split="yes")
    with pytest.raises(NotImplementedError, match="Hugging Face models only"):
        optimize_model(torch.nn.Linear(2, 2), checkpoint=True, checkpoint_split=True)


def test_a_changed_layout_raises_at_the_call():
    """A layer forward that does not feed each norm's output to its own module (as a transformers
    version that changed the layout would) raises instead of computing something else."""
    _, split, _ = pair("llama", torch.float32, True, **OFF)
    layer = split.model.layers[0]
    func = layer._gradient_checkpointing_func
    x = torch.randn(2, 5, COMMON["hidden_size"], requires_grad=True)
    for wrong in (
        lambda h: layer.post_attention_layernorm(h),  # a norm's output never reaches its module
        lambda h: layer.mlp(layer.input_layernorm(h)),  # the other segment's norm
        lambda h: layer.mlp(layer.post_attention_layernorm(h) * 2),  # not the norm's output itself
        lambda h: layer.input_layernorm(layer.post_attention_layernorm(h)),
    ):  # two norms in a row
        with pytest.raises(RuntimeError, match="split checkpointing"):
            func(wrong, x)
    right = func(lambda h: layer.mlp(layer.post_attention_layernorm(h)), x)
    assert torch.equal(right, layer.mlp(layer.post_attention_layernorm(x)))


# ---------------------------------------------------------------- CUDA


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_split_matches_whole_layer_checkpointing_bitwise_gpu(dtype):
    """Side-stream copies and prefetch of both segments' inputs, the ojas kernels on: the bits of
    the unsplit offloaded model (deterministic algorithms; a tensor that differs between two runs
    of the unsplit model itself is not compared)."""
    ref = build("llama", dtype, "cuda", num_hidden_layers=4)
    runs = {}
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        for name, split in (("whole", False), ("whole2", False), ("split", True)):
            model, _ = optimize_model(copy.deepcopy(ref), checkpoint="offload", checkpoint_split=split)
            runs[name] = run(model, 3, "cuda")
    finally:
        torch.use_deterministic_algorithms(False)
    func = model.model.layers[0]._gradient_checkpointing_func.segment_checkpoint
    assert func.stats.offloaded_tensors == 3 * 8 and func.stats.prefetched_tensors == 3 * 7
    names = [n for n, _ in ref.named_parameters()]
    (la, ga), (lb, gb), (lc, gc) = runs["whole"], runs["whole2"], runs["split"]
    assert [torch.equal(a, c) for a, c in zip(la, lc)] == [torch.equal(a, b) for a, b in zip(la, lb)]
    for step in range(3):
        for n, a, b, c in zip(names, ga[step], gb[step], gc[step]):
            if torch.equal(a, b):
                assert torch.equal(a, c), f"step {step} {n}"


@pytest.mark.gpu
def test_split_lowers_the_backward_peak_gpu():
    """8 layers of hidden 1024 and MLP 2816, 2 x 1024 tokens, fp32, offloaded, each gradient dropped
    once accumulated: the split's peak (the last layer's MLP backward) is below the unsplit one by
    at least half of the attention half's recomputed activations (q, k, v, output: 4 x 8 MiB, the
    norm's output 8 MiB), as ojas_ref/tools/plan.py's recomputed_attention_half_bytes counts them."""
    from ojas_ref import MemoryRecipe
    from ojas_ref.tools import plan as P

    b, s, hidden = 2, 1024, 1024
    peaks = {}
    for split in (False, True):
        model = build(
            "llama",
            torch.float32,
            "cuda",
            num_hidden_layers=8,
            hidden_size=hidden,
            intermediate_size=2816,
            num_attention_heads=8,
            num_key_value_heads=8,
            max_position_embeddings=s,
            vocab_size=256,
        )
        optimize_model(model, checkpoint="offload", checkpoint_split=split, linear_cross_entropy=False)
        model.train()
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(lambda p: setattr(p, "grad", None))
        ids = torch.randint(0, 256, (b, s), device="cuda")
        for _ in range(2):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            model(input_ids=ids, labels=ids).loss.backward()
            torch.cuda.synchronize()
            peaks[split] = torch.cuda.max_memory_allocated() - base
        del model
        torch.cuda.empty_cache()
    shape = P.Model(hidden, 8, 8, 8, 2816, 256)
    attention_half = P.recomputed_attention_half_bytes(
        shape,
        P.Setting(
            MemoryRecipe.plain(attention=True, rms_norm=True, swiglu=True, checkpoint=True, checkpoint_split=True),
            dtype=torch.float32,
            batch=b,
            seq=s,
        ),
    )
    print(
        f"\npeak unsplit {peaks[False] / 2**20:.1f} MiB, split {peaks[True] / 2**20:.1f} MiB, attention half "
        f"{attention_half / 2**20:.1f} MiB"
    )
    assert peaks[True] <= peaks[False] - attention_half // 2
