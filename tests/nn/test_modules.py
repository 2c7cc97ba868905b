"""ojas_ref.MultiheadAttention against torch.nn.MultiheadAttention, ojas_ref.LinearCrossEntropyLoss
against F.cross_entropy of the logits (ojas_ref/nn/modules.py).

float64, so the only difference from torch is summation order: 1e-10 relative. Masks in
nn.MultiheadAttention's convention (bool True = masked, float = added), every mask kind
torch takes, batch_first both ways, unbatched input, kdim/vdim, no bias.
"""

from __future__ import annotations

import copy
import importlib
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

import ojas_ref
from ojas_ref.nn.modules import MultiheadAttention

attn_mod = importlib.import_module("ojas_ref.functional._attention_reference")
modules_mod = importlib.import_module("ojas_ref.nn.modules")

RTOL = 1e-10


def close(a, b, rtol=RTOL):
    # plus 1e-14 absolute: an exactly zero gradient (one key) is rounding noise ~1e-18 in torch
    return (a - b).abs().max().item() <= rtol * max(a.abs().max().item(), b.abs().max().item()) + 1e-14


def pair(**kwargs):
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(dtype=torch.float64, **kwargs)
    ours = nn.MultiheadAttention(dtype=torch.float64, **kwargs)
    ours.load_state_dict(ref.state_dict())
    ours.__class__ = MultiheadAttention
    return ref, ours


def check(ref, ours, q, k, v, **kwargs):
    qs = [x.clone().requires_grad_() for x in (q, k, v)]
    ks = [x.clone().requires_grad_() for x in (q, k, v)]
    a, _ = ref(*qs, need_weights=False, **kwargs)
    b, w = ours(*ks, need_weights=False, **kwargs)
    assert w is None
    assert close(a, b)
    g = torch.randn_like(a)
    (a * g).sum().backward()
    (b * g).sum().backward()
    for x, y in zip(qs, ks):
        assert close(x.grad, y.grad)
    for (name, p), q_ in zip(ref.named_parameters(), ours.parameters()):
        assert close(p.grad, q_.grad), name


@given(
    batch_first=st.booleans(),
    L=st.integers(1, 9),
    S=st.integers(1, 9),
    N=st.integers(1, 3),
    mask_kind=st.sampled_from(["none", "bool2d", "float2d", "bool3d", "kpm_bool", "kpm_float", "both"]),
    bias=st.booleans(),
)
def test_matches_torch(batch_first, L, S, N, mask_kind, bias):
    E, H = 8, 2
    ref, ours = pair(embed_dim=E, num_heads=H, batch_first=batch_first, bias=bias)
    g = torch.Generator().manual_seed(L * 100 + S * 10 + N)
    shape = (lambda n: (N, n, E)) if batch_first else (lambda n: (n, N, E))
    q = torch.randn(shape(L), dtype=torch.float64, generator=g)
    k = torch.randn(shape(S), dtype=torch.float64, generator=g)
    v = torch.randn(shape(S), dtype=torch.float64, generator=g)
    kwargs = {}
    # keep key 0 visible for every query so that no row is fully masked (torch gives NaN there)
    keep = torch.rand(L, S, generator=g) < 0.6
    keep[:, 0] = True
    if mask_kind in ("bool2d", "both"):
        kwargs["attn_mask"] = ~keep
    elif mask_kind == "float2d":
        kwargs["attn_mask"] = torch.randn(L, S, dtype=torch.float64, generator=g)
    elif mask_kind == "bool3d":
        kwargs["attn_mask"] = ~keep.expand(N * H, L, S).clone()
    pad = torch.rand(N, S, generator=g) < 0.4
    pad[:, 0] = False
    if mask_kind in ("kpm_bool", "both"):
        kwargs["key_padding_mask"] = pad
    elif mask_kind == "kpm_float":
        kwargs["key_padding_mask"] = torch.zeros(N, S, dtype=torch.float64).masked_fill(pad, -1e4)
    check(ref, ours, q, k, v, **kwargs)


def test_causal_hint_unbatched_and_kdim():
    ref, ours = pair(embed_dim=8, num_heads=2)
    x = torch.randn(6, 8, dtype=torch.float64)  # unbatched [L, E]
    causal = nn.Transformer.generate_square_subsequent_mask(6, dtype=torch.float64)
    check(ref, ours, x, x, x, attn_mask=causal, is_causal=True)
    ref, ours = pair(embed_dim=8, num_heads=2, kdim=5, vdim=3, batch_first=True)
    q = torch.randn(2, 4, 8, dtype=torch.float64)
    check(ref, ours, q, torch.randn(2, 7, 5, dtype=torch.float64), torch.randn(2, 7, 3, dtype=torch.float64))


def test_need_weights_runs_torch_and_refusals():
    ref, ours = pair(embed_dim=8, num_heads=2)
    x = torch.randn(5, 2, 8, dtype=torch.float64)
    a, wa = ref(x, x, x)
    b, wb = ours(x, x, x)
    assert torch.equal(a, b) and torch.equal(wa, wb)
    with pytest.raises(RuntimeError, match="is_causal=True is a hint"):
        ours(x, x, x, need_weights=False, is_causal=True)
    ours.add_zero_attn = True
    with pytest.raises(NotImplementedError, match="add_zero_attn=True"):
        ours(x, x, x, need_weights=False)


def _dropped_reference(module, x, keep, p):
    """nn.MultiheadAttention's computation on [L, N, E] with the attention probabilities
    multiplied by keep [N, H, L, S] and 1 / (1 - p), float64."""
    L, N, E = x.shape
    H = module.num_heads
    q, k, v = (
        F.linear(x, w, b).reshape(L, N, H, E // H).permute(1, 2, 0, 3)
        for w, b in zip(module.in_proj_weight.chunk(3), module.in_proj_bias.chunk(3))
    )
    probs = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(E // H), -1)
    out = (probs * keep / (1 - p)) @ v
    return module.out_proj(out.permute(2, 0, 1, 3).reshape(L, N, E))


def test_dropout_in_training_mode_only():
    """dropout=0.3: in training the probabilities are dropped with ojas_ref.attention's mask
    (drawn from torch's generator), in eval mode not at all, as nn.MultiheadAttention."""
    ref, ours = pair(embed_dim=8, num_heads=2, dropout=0.3)
    x = torch.randn(5, 3, 8, dtype=torch.float64, requires_grad=True)
    torch.manual_seed(0)
    out, _ = ours(x, x, x, need_weights=False)
    torch.manual_seed(0)
    keep = attn_mod._dropout_keep_mask(attn_mod._dropout_args(0.3, x.device), 3, 2, 5, 5)
    assert 0 < (~keep).sum() < keep.numel()
    expected = _dropped_reference(ours, x, keep, 0.3)
    assert close(out, expected)
    g = torch.randn_like(out)
    assert close(torch.autograd.grad(out, x, g)[0], torch.autograd.grad(expected, x, g)[0])
    ref.eval()
    ours.eval()
    before = torch.get_rng_state()
    assert close(ours(x, x, x, need_weights=False)[0], ref(x, x, x, need_weights=False)[0])
    assert torch.equal(torch.get_rng_state(), before)  # nothing drawn in eval mode


def test_optimize_model_takes_encoders_with_dropout(monkeypatch):
    """nn.TransformerEncoder's default dropout 0.1: optimize_model swaps its attention, which
    then drops with p = 0.1 in training and not in eval mode (equal to torch's there)."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, dtype=torch.float64)  # dropout=0.1
    ref = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    model, report = ojas_ref.optimize_model(copy.deepcopy(ref))
    assert {c.module for c in report.changed} >= {"layers.0.self_attn", "layers.1.self_attn"}
    assert not [s for s in report.left_alone if s.module.endswith("self_attn")]
    calls = []
    real = modules_mod.attention
    monkeypatch.setattr(modules_mod, "attention", lambda *a, **kw: calls.append(kw["dropout_p"]) or real(*a, **kw))
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    model.train()
    torch.manual_seed(1)
    a = model(x)
    torch.manual_seed(1)
    assert torch.equal(a, model(x))  # reproducible under torch.manual_seed
    assert calls == [0.1] * 4
    model.eval()
    ref.eval()
    with torch.enable_grad():  # (torch's inference fast path would bypass self_attn under no_grad)
        b, r = model(x.requires_grad_()), ref(x)
    assert calls[4:] == [0.0] * 2
    assert close(b, r)


def test_fully_masked_row_gives_zeros():
    _, ours = pair(embed_dim=8, num_heads=2, bias=False)
    x = torch.randn(3, 1, 8, dtype=torch.float64)
    out, _ = ours(x, x, x, need_weights=False, key_padding_mask=torch.ones(1, 3, dtype=torch.bool))
    assert torch.all(out == 0)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_linear_cross_entropy_loss_module(reduction):
    torch.manual_seed(0)
    x = torch.randn(2, 5, 7, dtype=torch.float64, requires_grad=True)
    w = torch.randn(11, 7, dtype=torch.float64, requires_grad=True)
    t = torch.randint(0, 11, (2, 5))
    t[0, 1] = -100
    class_weight = torch.rand(11, dtype=torch.float64) + 0.5
    loss_fn = ojas_ref.LinearCrossEntropyLoss(class_weight, reduction=reduction, label_smoothing=0.1)
    ours = loss_fn(x, w, t)
    ref = F.cross_entropy(
        (x @ w.T).reshape(-1, 11), t.reshape(-1), weight=class_weight, reduction=reduction, label_smoothing=0.1
    )
    assert "weight" in dict(loss_fn.named_buffers())
    assert close(ours.reshape(-1), ref.reshape(-1))
    assert "reduction='" + reduction in repr(loss_fn)
    with pytest.raises(ValueError, match="reduction must be one of"):
        ojas_ref.LinearCrossEntropyLoss(reduction="avg")


def test_linear_cross_entropy_loss_module_head_update():
    """LinearCrossEntropyLoss()(input, weight, target, head_update=opt): the head updated inside the
    loss's backward (no .grad), bit for bit the functional call with head_update and the standard
    SGD loop; an optimizer without head_weight as head_update is refused, naming it."""
    torch.manual_seed(0)
    x = torch.randn(6, 7, dtype=torch.float64)
    t = torch.randint(0, 11, (6,))
    start = torch.randn(11, 7, dtype=torch.float64)

    def step(how: str) -> torch.Tensor:
        w = nn.Parameter(start.clone())
        if how == "standard":
            opt = torch.optim.SGD([w], lr=0.5)
            ojas_ref.LinearCrossEntropyLoss()(x, w, t).backward()
        else:
            opt = ojas_ref.InBackwardOptimizer([w], torch.optim.SGD, lr=0.5, head_weight=w)
            if how == "module":
                ojas_ref.LinearCrossEntropyLoss()(x, w, t, head_update=opt).backward()
            else:
                ojas_ref.linear_cross_entropy(x, w, t, head_update=opt).backward()
        opt.step()
        assert (w.grad is None) == (how != "standard")
        return w.detach()

    module = step("module")
    assert torch.equal(module, step("functional")) and torch.equal(module, step("standard"))
    assert not torch.equal(module, start)
    w = nn.Parameter(start.clone())
    with pytest.raises(ValueError, match="head_update is an InBackwardOptimizer constructed without head_weight"):
        ojas_ref.LinearCrossEntropyLoss()(
            x, w, t, head_update=ojas_ref.InBackwardOptimizer([w], torch.optim.SGD, lr=0.5)
        )
