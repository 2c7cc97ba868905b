"""``optimize_model(model, checkpoint="offload")`` (ojas_ref/nn/offload.py).

On the CPU the host copy is a plain copy, so the offloaded path must give the losses and
gradients of ``checkpoint=True`` bit for bit; the hooks must offload exactly the decoder
layers' inputs (one per layer, the hidden states' shape) and never a parameter. The
``gpu`` tests (skipped without CUDA) check the side-stream copies bitwise and that the
peak CUDA memory drops.
"""

from __future__ import annotations

import copy
import os
import warnings

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS for the gpu tests

import pytest  # noqa: E402
import torch  # noqa: E402

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()
warnings.filterwarnings("ignore", module="transformers")

from ojas_ref.nn.offload import OffloadedCheckpoint, is_offloaded_activation  # noqa: E402
from ojas_ref.integrations.hf.optimize import optimize_model, revert_model  # noqa: E402
from ojas_ref.recipe import MemoryRecipe  # noqa: E402

V = 61
CONFIG = dict(
    vocab_size=V,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    attention_dropout=0.0,
)


def build(seed: int = 0, dtype=torch.float64, device="cpu", **overrides) -> torch.nn.Module:
    config = transformers.LlamaConfig(**(CONFIG | overrides))
    torch.manual_seed(seed)
    with torch.device(device):
        model = transformers.LlamaForCausalLM(config).to(dtype)
    model.config.use_cache = False
    return model


def batch(seed: int, b: int = 2, s: int = 11, padding: bool = False, device="cpu") -> dict:
    """Token ids, attention mask (left padding of 3 and 1 tokens if asked) and labels with the
    padded positions and the first real token ignored."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, V, (b, s), generator=g)
    mask = torch.ones(b, s, dtype=torch.long)
    labels = ids.clone()
    if padding:
        for row, pad in zip(range(b), (3, 1)):
            mask[row, :pad] = 0
            labels[row, : pad + 1] = -100
    return {k: v.to(device) for k, v in dict(input_ids=ids, attention_mask=mask, labels=labels).items()}


def train(model, batches: list[dict], lr: float = 1e-2) -> tuple[list[torch.Tensor], list[list[torch.Tensor]]]:
    """AdamW steps; the losses and every step's gradients (cloned before the update)."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    losses, grads = [], []
    for data in batches:
        loss = model(**data).loss
        loss.backward()
        losses.append(loss.detach().clone())
        grads.append([p.grad.clone() for p in model.parameters()])
        opt.step()
        opt.zero_grad()
    return losses, grads


def offload_func(model) -> OffloadedCheckpoint:
    funcs = {
        id(m._gradient_checkpointing_func): m._gradient_checkpointing_func
        for m in model.modules()
        if getattr(m, "gradient_checkpointing", False)
    }
    assert len(funcs) == 1
    func = next(iter(funcs.values()))
    assert isinstance(func, OffloadedCheckpoint)
    return func


# ---------------------------------------------------------------- (a) bit-identical training


@pytest.mark.parametrize("padding", [False, True])
@pytest.mark.parametrize("optimized", [True, False], ids=["ojas", "checkpoint-only"])
def test_offload_trains_bit_identically_to_checkpointing(padding, optimized):
    flags = (
        {} if optimized else dict(attention=False, linear_cross_entropy=False, rms_norm=False, swiglu=False, rope=False)
    )
    ref = build()
    ckpt, _ = optimize_model(copy.deepcopy(ref), checkpoint=True, **flags)
    off, report = optimize_model(copy.deepcopy(ref), checkpoint="offload", **flags)
    assert any("offloaded to pinned host memory" in c.what for c in report.changed), str(report)
    batches = [batch(seed, padding=padding) for seed in range(3)]
    ckpt_losses, ckpt_grads = train(ckpt, batches)
    off_losses, off_grads = train(off, batches)
    assert all(torch.equal(a, b) for a, b in zip(ckpt_losses, off_losses)), (ckpt_losses, off_losses)
    for step, (ga, gb) in enumerate(zip(ckpt_grads, off_grads)):
        for (name, _), a, b in zip(ckpt.named_parameters(), ga, gb):
            assert torch.equal(a, b), f"step {step} {name}"
    for a, b in zip(ckpt.parameters(), off.parameters()):
        assert torch.equal(a, b)
    stats = offload_func(off).stats
    assert stats.offloaded_tensors == 3 * CONFIG["num_hidden_layers"] == stats.restored_tensors


# ---------------------------------------------------------------- (b) what is offloaded


@pytest.mark.parametrize("tied", [True, False])
def test_exactly_the_layer_inputs_are_offloaded_never_a_parameter(tied):
    model, _ = optimize_model(build(tie_word_embeddings=tied), checkpoint="offload")
    assert (model.lm_head.weight is model.model.embed_tokens.weight) == tied
    func = offload_func(model)
    offloaded, inputs = [], []
    func.observe = lambda t: offloaded.append((t.data_ptr(), tuple(t.shape), t.dtype))
    hooks = [
        layer.register_forward_pre_hook(
            lambda m, args: inputs.append((args[0].data_ptr(), tuple(args[0].shape), args[0].dtype))
        )
        for layer in model.model.layers
    ]
    data = batch(0, padding=True)
    model.train()
    loss = model(**data).loss
    n = CONFIG["num_hidden_layers"]
    assert offloaded == inputs and len(offloaded) == n, (offloaded, inputs)
    assert all(shape == (2, 11, CONFIG["hidden_size"]) for _, shape, _ in offloaded)
    param_ptrs = {p.data_ptr() for p in model.parameters()}
    assert not param_ptrs & {ptr for ptr, _, _ in offloaded}
    assert func.stats.kept_tensors == 0  # masks and cos/sin are keyword arguments, not saved inputs
    loss.backward()
    assert func.stats.restored_tensors == n
    for h in hooks:
        h.remove()


def test_the_rule_offloads_activations_only():
    """Called directly with positional extras: a parameter of the hidden states' shape, a view
    of one, cos/sin of [b, s, head_dim], a float [b, 1, s, s] mask, integer ids, a bool mask:
    only the hidden states and a [b, s, >= hidden] activation are offloaded."""
    b, s, h, d = 2, 5, 8, 4
    w = torch.nn.Parameter(torch.randn(b, s, h, dtype=torch.float64))
    w2 = torch.nn.Parameter(torch.randn(b * s, h, dtype=torch.float64))
    x = torch.randn(b, s, h, dtype=torch.float64, requires_grad=True) * 1.0
    wide = torch.randn(b, s, 2 * h, dtype=torch.float64, requires_grad=True) * 1.0
    cos = torch.randn(b, s, d, dtype=torch.float64)
    fmask = torch.zeros(b, 1, s, s, dtype=torch.float64)
    ids = torch.arange(s).expand(b, s)
    bmask = torch.ones(b, s, dtype=torch.bool)

    def fn(x, w, wv, wide, cos, fmask, ids, bmask):
        y = torch.tanh(x * w + wv) + wide[..., :h] + wide[..., h:]
        y = y * cos.repeat(1, 1, h // d) + fmask.sum() + ids[..., None] * bmask[..., None]
        return y.sin().sum()

    args = (x, w, w2.view(b, s, h), wide, cos, fmask, ids, bmask)
    seen = []
    func = OffloadedCheckpoint(observe=lambda t: seen.append(t))
    loss = func(fn, *args)
    assert [t.data_ptr() for t in seen] == [x.data_ptr(), wide.data_ptr()]
    assert func.stats.offloaded_tensors == 2 and func.stats.kept_tensors == 6
    assert not is_offloaded_activation(w, x.shape) and not is_offloaded_activation(w2.view(b, s, h), x.shape)
    grads = torch.autograd.grad(loss, (x, w, w2, wide))
    ref = torch.autograd.grad(torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False), (x, w, w2, wide))
    assert all(torch.equal(a, r) for a, r in zip(grads, ref))


def test_without_grad_and_without_an_activation_nothing_is_saved():
    func = OffloadedCheckpoint()
    x = torch.randn(2, 3, 4, requires_grad=True)
    with torch.no_grad():
        func(torch.sin, x)
    func(lambda i: i.float().sum(), torch.arange(3))  # no floating positional argument: plain checkpoint
    assert func.stats.offloaded_tensors == 0
    with pytest.raises(ValueError, match="use_reentrant=True"):
        func(torch.sin, x, use_reentrant=True)


def test_offloaded_checkpoint_pickles_and_deep_copies():
    import pickle

    model, _ = optimize_model(build(), checkpoint="offload")
    clone = copy.deepcopy(model)  # (Hugging Face's checkpointing itself leaves the model unpicklable)
    assert offload_func(clone) is not offload_func(model)
    clone.train()
    clone(**batch(0)).loss.backward()
    assert offload_func(clone).stats.offloaded_tensors == CONFIG["num_hidden_layers"]
    func = pickle.loads(pickle.dumps(OffloadedCheckpoint(prefetch=False)))
    assert not func.prefetch and func.stats.offloaded_tensors == 0


# ---------------------------------------------------------------- (c) bad values


@pytest.mark.parametrize(
    "value,error",
    [
        (1, TypeError),
        (1.0, TypeError),
        ("yes", ValueError),
        ("Offload", ValueError),
        ("", ValueError),
    ],
)
def test_bad_checkpoint_values_raise_naming_the_argument(value, error):
    with pytest.raises(error, match="checkpoint must be") as info:
        optimize_model(build(), checkpoint=value)
    assert "offload" in str(info.value)


def test_checkpoint_none_is_the_recipes_value():
    """``checkpoint=None`` (the keyword's default) takes the recipe's field."""
    assert optimize_model(build(), checkpoint=None)[1].recipe.checkpoint is False
    recipe = MemoryRecipe(checkpoint="offload")
    assert optimize_model(build(), recipe, checkpoint=None)[1].recipe.checkpoint == "offload"


def test_offload_on_a_plain_model_is_refused():
    with pytest.raises(NotImplementedError, match="checkpoint='offload' is supported for Hugging Face models only"):
        optimize_model(torch.nn.Linear(2, 2), checkpoint="offload")


# ---------------------------------------------------------------- (d) revert


def test_revert_model_restores_the_model():
    model = build()
    data = batch(0, padding=True)
    model.train()
    before = model(**data)
    optimize_model(model, checkpoint="offload")
    assert all(isinstance(m._gradient_checkpointing_func, OffloadedCheckpoint) for m in model.model.layers)
    revert_model(model)
    assert not any(getattr(m, "gradient_checkpointing", False) for m in model.modules())
    assert not any(
        isinstance(getattr(m, "_gradient_checkpointing_func", None), OffloadedCheckpoint) for m in model.modules()
    )
    model.train()
    after = model(**data)
    assert torch.equal(before.loss, after.loss) and torch.equal(before.logits, after.logits)


def test_offload_over_the_users_checkpointing_and_revert_gives_it_back():
    model = build()
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False}, every_n_layers=2)
    flags = [m.gradient_checkpointing for m in model.model.layers]
    old = [m._gradient_checkpointing_func for m in model.model.layers]
    _, report = optimize_model(model, checkpoint="offload")
    assert [m.gradient_checkpointing for m in model.model.layers] == flags == [True, False, True]
    func = offload_func(model)
    model.train()
    model(**batch(0)).loss.backward()
    assert func.stats.offloaded_tensors == 2
    revert_model(model)
    assert [m._gradient_checkpointing_func for m in model.model.layers] == old
    assert [m.gradient_checkpointing for m in model.model.layers] == flags  # the user's checkpointing stays


# ---------------------------------------------------------------- (e) CUDA


def _deterministic_train(model, batches):
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        return train(model, batches)
    finally:
        torch.use_deterministic_algorithms(False)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_offload_matches_checkpointing_bitwise_gpu(dtype):
    """Side-stream copies, prefetch, host buffers reused: the same bits as checkpoint=True. Checkpointing alone (the
    ojas kernels off, eager attention), deterministic algorithms; a tensor that differs between
    two runs of checkpoint=True itself is not compared (none of the layers' may)."""
    flags = dict(attention=False, linear_cross_entropy=False, rms_norm=False, swiglu=False, rope=False)
    ref = build(dtype=dtype, device="cuda", num_hidden_layers=4, attn_implementation="eager")
    batches = [batch(seed, padding=seed == 1, device="cuda") for seed in range(3)]
    runs = {}
    for name, value in (("ckpt", True), ("ckpt2", True), ("offload", "offload")):
        model, _ = optimize_model(copy.deepcopy(ref), checkpoint=value, **flags)
        runs[name] = _deterministic_train(model, batches)
    func = offload_func(model)
    assert func.stats.offloaded_tensors == 4 * 3 and func.stats.prefetched_tensors == 3 * 3
    assert sum(map(len, func._free.values())) == 4  # one host buffer per layer, reused in steps 2 and 3
    names = [n for n, _ in ref.named_parameters()]
    for (la, ga), (lb, gb), (lc, gc) in [(runs["ckpt"], runs["ckpt2"], runs["offload"])]:
        assert [torch.equal(a, c) for a, c in zip(la, lc)] == [torch.equal(a, b) for a, b in zip(la, lb)]
        for step in range(len(batches)):
            stable = [torch.equal(a, b) for a, b in zip(ga[step], gb[step])]
            assert all(s for n, s in zip(names, stable) if ".layers." in n), "checkpoint=True is not deterministic"
            for n, s, a, c in zip(names, stable, ga[step], gc[step]):
                if s:
                    assert torch.equal(a, c), f"step {step} {n}"


@pytest.mark.gpu
def test_offload_lowers_peak_cuda_memory_gpu():
    """8 layers of hidden 1024, 2 x 1024 tokens, fp32: checkpoint=True keeps 8 layer inputs of
    8 MiB from the forward to the backward; offloaded, none is on the device after the forward
    and the backward holds two (the one recomputed and the one prefetched). Each gradient is
    dropped as soon as it is accumulated (as InBackwardOptimizer frees it after its update), so
    the step's peak is that of the activations, not of 400 MiB of gradients at its end."""
    layers, b, s, hidden = 8, 2, 1024, 1024
    held, peaks = {}, {}
    for value in (True, "offload"):
        model = build(
            dtype=torch.float32,
            device="cuda",
            num_hidden_layers=layers,
            hidden_size=hidden,
            intermediate_size=2816,
            num_attention_heads=8,
            num_key_value_heads=8,
            max_position_embeddings=s,
            vocab_size=256,
        )
        optimize_model(model, checkpoint=value, attention=False, linear_cross_entropy=False)
        model.train()
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(lambda p: setattr(p, "grad", None))
        ids = torch.randint(0, 256, (b, s), device="cuda")
        for _ in range(2):  # warm up, then measure
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            loss = model(input_ids=ids, labels=ids).loss
            torch.cuda.synchronize()
            held[value] = torch.cuda.memory_allocated() - base
            loss.backward()
            del loss
            torch.cuda.synchronize()
            peaks[value] = torch.cuda.max_memory_allocated() - base
        del model
        torch.cuda.empty_cache()
    layer_input = b * s * hidden * 4
    mib = 2**20
    print(
        f"\nheld after the forward: checkpoint=True {held[True] / mib:.1f} MiB, offload {held['offload'] / mib:.1f};"
        f" peak of the step: {peaks[True] / mib:.1f} MiB, offload {peaks['offload'] / mib:.1f}"
    )
    # after the forward the 8 layer inputs are the only difference (1 MiB of slack: allocator rounding)
    assert held[True] - held["offload"] >= layers * layer_input - mib
    # the peak falls in the forward's last layer or the backward's first: at least half the inputs are off
    assert peaks["offload"] <= peaks[True] - (layers // 2) * layer_input
