"""optimize_model on plain PyTorch models (ojas_ref/integrations/hf/optimize.py): nn.TransformerEncoder /
DecoderLayer and nn.MultiheadAttention are computed by ojas attention, the rest is reported.

float64 training for several SGD-with-momentum steps against the unoptimized copy:
relative 1e-9 (summation order only; see tests/integrations/test_optimize_huggingface.py). Not AdamW
here: the key bias of nn.MultiheadAttention has a zero gradient in exact arithmetic (it
shifts every score of a row alike), so its float64 gradient is rounding noise ~1e-18 and
AdamW's normalisation turns that noise into steps of +-lr in either implementation.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from ojas_ref import MultiheadAttention, optimize_model, revert_model


def encoder(dropout: float = 0.0) -> nn.Module:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=dropout, batch_first=True, dtype=torch.float64)
    return nn.Sequential(
        nn.TransformerEncoder(layer, 2, enable_nested_tensor=False), nn.Linear(16, 5, dtype=torch.float64)
    )


def train(model, causal: bool, steps: int = 3) -> list[float]:
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(steps):
        x = torch.randn(2, 7, 16, dtype=torch.float64, generator=g)
        pad = torch.zeros(2, 7, dtype=torch.bool)
        pad[1, 5:] = True
        mask = nn.Transformer.generate_square_subsequent_mask(7, dtype=torch.float64) if causal else None
        enc = model[0]
        out = model[1](enc(x, mask=mask, src_key_padding_mask=pad, is_causal=causal))
        loss = out[~pad].square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("causal", [False, True])
def test_transformer_encoder_trains_alike(causal):
    ref = encoder()
    opt, report = optimize_model(copy.deepcopy(ref))
    assert [c.module for c in report.changed] == ["0.layers.0.self_attn", "0.layers.1.self_attn"]
    assert all(type(m) is MultiheadAttention for m in (opt[0].layers[0].self_attn, opt[0].layers[1].self_attn))
    assert train(ref, causal) == pytest.approx(train(opt, causal), rel=1e-9)
    for p, q in zip(ref.parameters(), opt.parameters()):
        assert torch.allclose(p, q, rtol=1e-9, atol=1e-12)


def test_decoder_layer_self_and_cross_attention():
    torch.manual_seed(0)
    ref = nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, dtype=torch.float64)
    opt, report = optimize_model(copy.deepcopy(ref))
    assert {c.module for c in report.changed} == {"self_attn", "multihead_attn"}
    tgt, memory = torch.randn(5, 2, 8, dtype=torch.float64), torch.randn(6, 2, 8, dtype=torch.float64)
    causal = nn.Transformer.generate_square_subsequent_mask(5, dtype=torch.float64)
    a = ref(tgt, memory, tgt_mask=causal, tgt_is_causal=True)
    b = opt(tgt, memory, tgt_mask=causal, tgt_is_causal=True)
    assert torch.allclose(a, b, rtol=1e-10, atol=1e-12)


def test_layers_with_dropout_are_changed():
    """Attention dropout is supported (ojas_ref.MultiheadAttention applies it in training): with
    dropout 0.1 the attention and the feed-forward relu (relu_mask: tests/functional/test_relu.py) are changed."""
    model, report = optimize_model(encoder(dropout=0.1))
    assert {c.module for c in report.changed} == {
        "0.layers.0.activation",
        "0.layers.1.activation",
        "0.layers.0.self_attn",
        "0.layers.1.self_attn",
    }
    assert not report.left_alone
    assert "LinearCrossEntropyLoss" in str(report)


def test_no_op_twice_revert_and_errors():
    model = encoder()
    keys = list(model.state_dict())
    _, first = optimize_model(model)
    _, second = optimize_model(model)
    assert second is first and list(model.state_dict()) == keys
    revert_model(model)
    assert type(model[0].layers[0].self_attn) is nn.MultiheadAttention
    _, report = optimize_model(model, attention=False)
    assert (
        not report.changed
        and [s.reason for s in report.left_alone if s.module.endswith("self_attn")] == ["attention=False"] * 2
    )
    assert len(report.left_alone) == 4  # and the relu of the two dropout-free feed-forwards (relu_mask)
    with pytest.raises(NotImplementedError, match="checkpoint=True"):
        optimize_model(encoder(), checkpoint=True)
    with pytest.raises(TypeError, match="linear_cross_entropy must be a bool"):
        optimize_model(encoder(), linear_cross_entropy=1)


def test_cross_entropy_is_the_deprecated_name_of_linear_cross_entropy():
    """``cross_entropy=``, the keyword's name in release 0.1, warns and is ``linear_cross_entropy=``;
    both at once raise."""
    note = "a plain model computes its own loss"
    _, report = optimize_model(encoder(), linear_cross_entropy=True)
    assert any(note in n for n in report.notes)
    model = encoder()
    with pytest.warns(DeprecationWarning, match=r"cross_entropy=\.\.\.\) is deprecated.*linear_cross_entropy=") as w:
        _, report = optimize_model(model, cross_entropy=False)
    assert w[0].filename == __file__  # the warning names the caller's line
    assert not any(note in n for n in report.notes)
    assert optimize_model(model, linear_cross_entropy=False)[1] is report  # the same arguments: a no-op
    with pytest.raises(ValueError, match=r"linear_cross_entropy=False \(now True\)"):
        optimize_model(model, linear_cross_entropy=True)
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="linear_cross_entropy must be a bool"):
        optimize_model(encoder(), cross_entropy=1)
    with pytest.raises(TypeError, match="got both linear_cross_entropy= and its deprecated alias cross_entropy="):
        optimize_model(encoder(), cross_entropy=True, linear_cross_entropy=True)


def test_rms_norm_flag_on_a_plain_model():
    """rms_norm changes only Hugging Face RMSNorm classes: a plain model's nn.RMSNorm is not
    reported nor swapped; the flag is checked."""
    model = nn.Sequential(nn.Linear(8, 8), nn.RMSNorm(8))
    _, report = optimize_model(model, rms_norm=True)
    assert not report.changed and not report.left_alone and type(model[1]) is nn.RMSNorm
    with pytest.raises(TypeError, match="rms_norm must be a bool"):
        optimize_model(encoder(), rms_norm="yes")
