"""The Hugging Face loss adapter (ojas_ref/integrations/hf/linear_cross_entropy.py,
:class:`LinearCrossEntropyForCausalLM`, formerly ``CausalLMLossHead``): the head updated inside the
loss's backward through ``model(..., labels=..., head_update=opt)`` on a tiny config-built
LlamaForCausalLM (no download), against the standard loop; its errors; the deprecated old name."""

from __future__ import annotations

import warnings

import pytest
import torch

from ojas_ref import InBackwardOptimizer, optimize_model

transformers = pytest.importorskip("transformers")

V, LR = 37, 0.1


def _llama(tied: bool = False) -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=V,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=16,
        tie_word_embeddings=tied,
    )
    model = transformers.LlamaForCausalLM(config)
    optimize_model(model)
    return model.train()


def _ids(seed: int) -> torch.Tensor:
    return torch.randint(0, V, (2, 9), generator=torch.Generator().manual_seed(seed))


def _train(mode: str, steps: int = 3) -> dict[str, torch.Tensor]:
    """mode "standard": torch.optim.SGD after backward; "head": InBackwardOptimizer with
    head_weight=model.lm_head.weight, passed to the model's call as head_update. The parameters
    after ``steps`` steps."""
    model = _llama()
    if mode == "standard":
        opt = torch.optim.SGD(model.parameters(), lr=LR)
    else:
        opt = InBackwardOptimizer(model.parameters(), torch.optim.SGD, lr=LR, head_weight=model.lm_head.weight)
    for step in range(steps):
        ids = _ids(step)
        out = model(ids, labels=ids, **({"head_update": opt} if mode == "head" else {}))
        assert out.logits is None
        out.loss.backward()
        opt.step()
        opt.zero_grad()
        if mode == "head":
            assert model.lm_head.weight.grad is None
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def test_head_update_through_the_model_call_matches_the_standard_loop():
    """model(ids, labels=ids, head_update=opt), three steps: every parameter bit for bit the
    standard loop's (backward, SGD.step; CPU float32, both the reference loss), and the head moved."""
    head, standard = _train("head"), _train("standard")
    assert head.keys() == standard.keys() and all(torch.equal(head[k], standard[k]) for k in head)
    assert not torch.equal(head["lm_head.weight"], _llama().lm_head.weight)


def test_head_update_never_reaches_the_decoder():
    """The adapter's pre-hook takes head_update out of the call's keyword arguments: the decoder
    (and its attention functions) never see it."""
    model = _llama()
    seen = []
    model.model.register_forward_pre_hook(lambda m, args, kwargs: seen.append(sorted(kwargs)), with_kwargs=True)
    opt = InBackwardOptimizer(model.parameters(), torch.optim.SGD, lr=LR, head_weight=model.lm_head.weight)
    ids = _ids(0)
    model(ids, labels=ids, head_update=opt).loss.backward()
    opt.step()
    assert seen and all("head_update" not in kwargs for kwargs in seen)


def test_model_call_without_head_update_raises():
    """The optimizer's head, and a model call without head_update: the head's whole gradient
    arrives in the backward, which raises saying to pass it, the head unchanged."""
    model = _llama()
    opt = InBackwardOptimizer(model.parameters(), torch.optim.SGD, lr=LR, head_weight=model.lm_head.weight)
    before = model.lm_head.weight.detach().clone()
    ids = _ids(0)
    loss = model(ids, labels=ids).loss
    with pytest.raises(RuntimeError, match=r"head_update=opt"):
        loss.backward()
    assert torch.equal(model.lm_head.weight.detach(), before)
    del opt


@pytest.mark.parametrize("case", ["eval", "no labels"])
def test_head_update_needs_a_training_forward_with_labels(case):
    """head_update where the adapter computes no loss without logits (eval mode, or no labels):
    ValueError naming head_update, before the forward runs."""
    model = _llama()
    opt = InBackwardOptimizer(model.parameters(), torch.optim.SGD, lr=LR, head_weight=model.lm_head.weight)
    ids = _ids(0)
    if case == "eval":
        model.eval()
    with pytest.raises(ValueError, match="head_update is for a training forward with labels"):
        model(ids, labels=ids if case == "eval" else None, head_update=opt)


def test_head_update_of_another_weight_is_refused():
    """An InBackwardOptimizer without head_weight as head_update: the loss refuses it (ValueError
    naming head_update), before any update."""
    model = _llama()
    opt = InBackwardOptimizer(model.parameters(), torch.optim.SGD, lr=LR)
    ids = _ids(0)
    with pytest.raises(ValueError, match="head_update is an InBackwardOptimizer constructed without head_weight"):
        model(ids, labels=ids, head_update=opt)


def test_old_name_warns_and_forwards():
    """CausalLMLossHead, the adapter's old name, in both modules: a DeprecationWarning, and the class."""
    from ojas_ref.integrations import hf
    from ojas_ref.integrations.hf import linear_cross_entropy as adapter

    for module in (hf, adapter):
        with pytest.warns(DeprecationWarning, match="LinearCrossEntropyForCausalLM"):
            assert module.CausalLMLossHead is adapter.LinearCrossEntropyForCausalLM
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert hf.LinearCrossEntropyForCausalLM is adapter.LinearCrossEntropyForCausalLM
    with pytest.raises(AttributeError, match="no attribute 'CausalLMLoss'"):
        adapter.CausalLMLoss  # noqa: B018
