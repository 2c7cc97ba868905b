"""ojas_ref.nn.reversible_decoder: the reversible Llama-style decoder.

(a) float64: the reversible backward gives the stored-activation gradients of the same
    weights (Ojas.Reversible.Gradient.backprop_reversible_correct, whose premise of exact
    inversion fails only by float64 rounding here);
(b) float32: a few AdamW steps from one init track each other;
(c) the bytes saved for backward are flat in depth (reversible) / linear (stored);
(d) bad configs raise errors naming the field, and the RoPE names (release 0.1's rotary
    names are deprecated aliases that warn);
(e) on CUDA (gpu marker) the float32 agreement with the Triton kernels.
"""

import math

import pytest
import torch
import torch.nn.functional as F

import ojas_ref.nn.reversible_decoder as rd
from ojas_ref.nn.reversible_decoder import (
    MODES,
    DecoderAttention,
    ReversibleDecoder,
    ReversibleDecoderConfig,
    RopeCache,
    rope_tables,
)

F64 = torch.float64


def tiny(**kw) -> ReversibleDecoderConfig:
    base = dict(vocab=41, hidden=16, layers=2, heads=4, kv_heads=2, intermediate=24, max_seq=16)
    base.update(kw)
    return ReversibleDecoderConfig(**base)


def batch(vocab: int, b: int = 2, s: int = 12, seed: int = 0, pad_from: int = 7):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (b, s), generator=gen)
    labels = ids.clone()
    labels[-1, pad_from:] = -100  # a right-padded row: its padding is ignored
    labels[0, 3] = -100  # and one ignored token inside a row
    return ids, labels


def grads_of(model, ids, labels, mode):
    model.zero_grad(set_to_none=True)
    loss = model(ids, labels, mode=mode)
    loss.backward()
    return loss.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def rel(a, b) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


# -------------------------------------------------------------------------- (a) float64


@pytest.mark.parametrize("layers", [1, 2, 8])
@pytest.mark.parametrize("tied,kv_heads", [(True, 2), (False, 4), (False, 1)])
def test_float64_gradients_equal_stored(layers, tied, kv_heads):
    torch.manual_seed(layers * 10 + kv_heads)
    # init_std 0.2 (not Llama's 0.02) so that F and G change the stream by O(1): with tiny
    # increments reconstruction would be trivially exact.
    cfg = tiny(layers=layers, kv_heads=kv_heads, tie_embeddings=tied, init_std=0.2)
    model = ReversibleDecoder(cfg).to(F64)
    ids, labels = batch(cfg.vocab, seed=layers)
    loss_s, g_s = grads_of(model, ids, labels, "stored")
    loss_r, g_r = grads_of(model, ids, labels, "reversible")
    assert torch.equal(loss_r, loss_s)  # the forward is the same arithmetic
    assert g_s.keys() == g_r.keys()
    assert ("lm_head.weight" in g_s) == (not tied)
    worst = max(rel(g_r[n], g_s[n]) for n in g_s)
    assert worst < 1e-10, worst
    for n in g_s:  # every parameter gets a nonzero gradient
        assert float(g_s[n].abs().max()) > 0, n
    errs = model.reconstruct_check(ids, labels)
    assert len(errs) == layers and max(errs) < 1e-12


def test_float64_loss_is_hf_shifted_mean_and_logits():
    torch.manual_seed(1)
    cfg = tiny(init_std=0.2)
    model = ReversibleDecoder(cfg).to(F64)
    ids, labels = batch(cfg.vocab)
    for mode in MODES:
        logits = model(ids, mode=mode)
        assert logits.shape == (*ids.shape, cfg.vocab)
        want = F.cross_entropy(logits[:, :-1].reshape(-1, cfg.vocab), labels[:, 1:].reshape(-1), ignore_index=-100)
        got = model(ids, labels, mode=mode)
        assert torch.allclose(got, want, rtol=1e-12, atol=0), mode
    # no kept token: 0 and zero gradients (Hugging Face would give NaN)
    none = torch.full_like(labels, -100)
    loss = model(ids, none)
    loss.backward()
    assert float(loss.detach()) == 0.0
    assert all(float(p.grad.abs().max()) == 0 for p in model.parameters())


def test_causal_prefix_invariance():
    """Position t's logits do not depend on tokens after t (causal attention, per-token MLP)."""
    torch.manual_seed(2)
    cfg = tiny(init_std=0.2, layers=3)
    model = ReversibleDecoder(cfg).to(F64)
    ids, _ = batch(cfg.vocab)
    ids2 = ids.clone()
    ids2[:, 6:] = (ids2[:, 6:] + 1) % cfg.vocab
    with torch.no_grad():
        a, b = model(ids), model(ids2)
    assert torch.allclose(a[:, :6], b[:, :6], rtol=0, atol=1e-13)
    assert not torch.allclose(a[:, 6:], b[:, 6:])


def test_streams_duplicated_and_averaged():
    """With every F and G zeroed the decoder is embed -> final norm -> head: cat(e, e) in, mean out."""
    torch.manual_seed(3)
    cfg = tiny()
    model = ReversibleDecoder(cfg).to(F64)
    for blk in model.stack.blocks:
        torch.nn.init.zeros_(blk.f.o_proj.weight)
        torch.nn.init.zeros_(blk.g.down_proj.weight)
    ids, _ = batch(cfg.vocab)
    e = model.embed(ids)
    h = torch.nn.functional.rms_norm(e, (cfg.hidden,), model.norm_weight, cfg.eps)
    assert torch.allclose(model(ids), h @ model.output_weight.T, rtol=1e-13, atol=1e-15)


# -------------------------------------------------------------------------- (b) float32


def adamw_losses(cfg, mode, steps, ids, labels, device="cpu"):
    torch.manual_seed(0)
    model = ReversibleDecoder(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    out = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = model(ids, labels, mode=mode)
        loss.backward()
        opt.step()
        out.append(float(loss.detach()))
    return out


def _float32_agreement(device, cfg=None):
    # Tolerance: float32 has u = 2^-24 ~ 6e-8. The reconstructed inputs differ from the stored
    # ones by a few ulps per layer times F's and G's amplification (FloatError's K per layer;
    # measured ~1e-7 relative here), so the gradients differ by ~1e-6 relative; AdamW
    # normalises each update by its running RMS, so a relative gradient error r moves each
    # step by about lr * r, and after 5 steps the loss (O(log vocab)) moves by far less than
    # 1e-4 relative; measured differences are ~1e-7. 1e-4 leaves room for the GPU kernels'
    # different reduction orders without hiding a real error (a wrong gradient, e.g. a
    # missing G contribution, changes the loss at the 1e-2 level after one step).
    cfg = cfg or tiny(layers=4, init_std=0.1, tie_embeddings=True)
    ids, labels = batch(cfg.vocab, b=2, s=12)
    ids, labels = ids.to(device), labels.to(device)
    torch.manual_seed(0)
    model = ReversibleDecoder(cfg).to(device)
    _, g_s = grads_of(model, ids, labels, "stored")
    _, g_r = grads_of(model, ids, labels, "reversible")
    worst = max(rel(g_r[n], g_s[n]) for n in g_s)
    assert worst < 1e-5, worst  # measured ~6e-7 on the CPU
    # AdamW's first step is lr * g / |g| per coordinate, the same for both unless a gradient
    # coordinate is within the difference of zero; later steps see the difference.
    stored = adamw_losses(cfg, "stored", 5, ids, labels, device)
    rev = adamw_losses(cfg, "reversible", 5, ids, labels, device)
    assert stored[0] == rev[0]  # same init, same forward
    assert stored[-1] < stored[0]  # it trains
    for a, b in zip(stored, rev):
        assert abs(a - b) <= 1e-4 * abs(a), (stored, rev)
    return stored, rev


def test_float32_adamw_tracks_stored():
    _float32_agreement("cpu")


# -------------------------------------------------------------------------- (c) memory


def saved_bytes(model, ids, labels, mode) -> int:
    """Bytes of the distinct storages autograd saves for backward in one forward (parameters'
    storages excluded), through saved_tensors_hooks."""
    param_ptrs = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}
    kept = []

    def pack(t):
        kept.append(t)  # keep it alive so that no storage is reused while we count
        st = t.untyped_storage()
        if st.data_ptr() not in param_ptrs:
            seen[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(ids, labels, mode=mode)
    total = sum(seen.values())
    loss.backward()
    return total


def test_saved_activation_bytes_flat_in_depth():
    depths = [1, 4, 16, 64]
    ids, labels = batch(41, b=1, s=8)
    rev, sto = [], []
    for d in depths:
        torch.manual_seed(0)
        model = ReversibleDecoder(tiny(layers=d, tie_embeddings=True))
        rev.append(saved_bytes(model, ids, labels, "reversible"))
        sto.append(saved_bytes(model, ids, labels, "stored"))
    assert rev[-1] <= 1.05 * rev[0], rev
    # stored: a constant amount per layer (within 2%), and depth 64 >= 20x depth 1
    per_layer = [(sto[i + 1] - sto[i]) / (depths[i + 1] - depths[i]) for i in range(len(depths) - 1)]
    assert min(per_layer) > 0 and max(per_layer) <= 1.02 * min(per_layer), (sto, per_layer)
    assert sto[-1] >= 20 * sto[0], sto
    # and the reversible model saves less than one stored layer's worth beyond the non-layer part
    assert rev[0] < sto[0], (rev, sto)


# -------------------------------------------------------------------------- (d) configs


@pytest.mark.parametrize(
    "kw,field",
    [
        (dict(hidden=18, heads=4), "hidden"),
        (dict(hidden=12, heads=4), "head_dim"),
        (dict(heads=4, kv_heads=3), "kv_heads"),
        (dict(layers=0), "layers"),
        (dict(vocab=0), "vocab"),
        (dict(eps=0.0), "eps"),
        (dict(rope_theta=-1.0), "rope_theta"),
    ],
)
def test_bad_config_names_the_field(kw, field):
    with pytest.raises(ValueError, match=field):
        tiny(**kw)


def test_bad_inputs():
    model = ReversibleDecoder(tiny())
    ids, labels = batch(41)
    with pytest.raises(ValueError, match="max_seq"):
        model(torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(TypeError, match="input_ids"):
        model(ids.float())
    with pytest.raises(ValueError, match="labels"):
        model(ids, labels[:, :-1])
    with pytest.raises(ValueError, match="mode"):
        model(ids, mode="bogus")
    with pytest.raises(TypeError, match="tie_embeddings"):
        tiny(tie_embeddings=1)


def test_blocks_share_the_models_rope_cache():
    model = ReversibleDecoder(tiny(layers=3))
    assert isinstance(model.rope, RopeCache)
    assert all(blk.f.rope is model.rope for blk in model.stack.blocks)
    cos, sin = model.rope(5, torch.device("cpu"), F64)
    assert model.rope(5, torch.device("cpu"), F64)[0] is cos  # cached
    want = rope_tables(5, model.config.head_dim, model.config.rope_theta, torch.device("cpu"), F64)
    assert torch.equal(cos, want[0]) and torch.equal(sin, want[1])


@pytest.mark.parametrize("old, new", [("rotary_tables", rope_tables), ("RotaryCache", RopeCache)])
def test_old_module_names_warn_and_forward(old, new):
    with pytest.warns(DeprecationWarning, match=rf"reversible_decoder\.{old} is deprecated.*use .*\.{new.__name__}"):
        assert getattr(rd, old) is new
    with pytest.raises(AttributeError, match="has no attribute 'rotary'"):
        rd.rotary


def test_old_rotary_keyword_warns_and_forwards():
    cfg = tiny()
    cache = RopeCache(cfg.head_dim, cfg.rope_theta)
    with pytest.warns(DeprecationWarning, match=r"DecoderAttention\(rotary=\.\.\.\) is deprecated.*use rope="):
        block = DecoderAttention(cfg, rotary=cache)
    assert block.rope is cache
    with pytest.raises(TypeError, match="both rope= and its deprecated alias rotary="):
        DecoderAttention(cfg, rope=cache, rotary=cache)


@pytest.mark.parametrize("owner", ["DecoderAttention", "ReversibleDecoder"])
def test_old_rotary_attribute_warns_and_forwards(owner):
    module = DecoderAttention(tiny()) if owner == "DecoderAttention" else ReversibleDecoder(tiny())
    with pytest.warns(DeprecationWarning, match=rf"{owner}\.rotary is deprecated.*use {owner}\.rope"):
        assert module.rotary is module.rope
    other = RopeCache(8, 100.0)
    with pytest.warns(DeprecationWarning, match=rf"{owner}\.rotary is deprecated"):
        module.rotary = other
    assert module.rope is other


# -------------------------------------------------------------------------- (e) CUDA


@pytest.mark.gpu
def test_float32_adamw_tracks_stored_cuda():
    """The same agreement with the Triton kernels (attention, RMSNorm, SwiGLU, RoPE)."""
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        # head_dim 16, the kernels' smallest tile width
        cfg = tiny(hidden=64, heads=4, kv_heads=2, intermediate=96, layers=4, init_std=0.1, tie_embeddings=True)
        stored, rev = _float32_agreement("cuda", cfg)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev
    assert all(math.isfinite(x) for x in stored + rev)
