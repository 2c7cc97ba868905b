"""``InBackwardOptimizer.from_recipe``: the optimizer a :class:`ojas_ref.MemoryRecipe` sets is the one
its keywords build (same attributes, the same step bit for bit), and every mismatch between the
recipe and the other arguments raises, naming the argument."""

from __future__ import annotations

import pytest
import torch

from ojas_ref import InBackwardOptimizer, MemoryRecipe

#: the attributes in which the recipe's options and the constructor's other arguments end up
ATTRIBUTES = (
    "optimizer_class",
    "accumulation_steps",
    "max_grad_norm",
    "bucket_cap_mb",
    "overlap",
    "state_device",
    "state_slice_mb",
    "defaults",
)


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 5))


def _attributes(optimizer: InBackwardOptimizer) -> dict:
    return {name: getattr(optimizer, name) for name in ATTRIBUTES}


@pytest.mark.parametrize(
    "recipe",
    [
        MemoryRecipe(in_backward=True),
        MemoryRecipe(in_backward=True, bucket_cap_mb=0.0, overlap=True),
        MemoryRecipe(in_backward=True, bucket_cap_mb=0.001, state_device="cpu", state_slice_mb=0.0005),
    ],
    ids=["defaults", "per-parameter-overlap", "host-state-sliced"],
)
def test_from_recipe_is_the_keywords_optimizer(recipe):
    """Same attributes as ``InBackwardOptimizer(params, AdamW, **recipe.optimizer_options(), ...)``
    and, on a tiny model, the same parameters and state after two steps, bit for bit."""
    models = _model(), _model()
    kwargs = dict(lr=1e-2, weight_decay=0.1)
    built = InBackwardOptimizer.from_recipe(models[0].parameters(), recipe, max_grad_norm=0.5, **kwargs)
    keywords = InBackwardOptimizer(
        models[1].parameters(), torch.optim.AdamW, max_grad_norm=0.5, **recipe.optimizer_options(), **kwargs
    )
    assert _attributes(built) == _attributes(keywords)
    assert (built.bucket_cap_mb, built.overlap, built.state_slice_mb) == (
        recipe.bucket_cap_mb,
        recipe.overlap,
        recipe.state_slice_mb,
    )
    assert built.state_device == (None if recipe.state_device is None else torch.device("cpu"))
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(4, 6, generator=g), torch.randn(4, 5, generator=g)) for _ in range(2)]
    for model, optimizer in zip(models, (built, keywords)):
        for x, y in batches:
            optimizer.backward(torch.nn.functional.mse_loss(model(x), y))
            optimizer.step()
    first, second = (list(m.parameters()) for m in models)
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    assert not torch.equal(first[0], _model()[0].weight)  # the steps ran
    for a, b in zip(first, second):
        assert all(torch.equal(built.state[a][k], keywords.state[b][k]) for k in ("exp_avg", "exp_avg_sq", "step"))


def test_from_recipe_passes_the_optimizer_class_and_head_weight():
    """``optimizer_class``, ``accumulation_steps`` and ``head_weight`` (with ``head_update``) reach
    the constructor."""
    model = _model()
    head = model[2].weight
    recipe = MemoryRecipe(in_backward=True, head_update=True)
    built = InBackwardOptimizer.from_recipe(model.parameters(), recipe, torch.optim.SGD, head_weight=head, lr=0.1)
    assert built.optimizer_class is torch.optim.SGD and built._head is head
    model = _model()
    accumulating = InBackwardOptimizer.from_recipe(
        model.parameters(), MemoryRecipe(in_backward=True), torch.optim.SGD, accumulation_steps=3, lr=0.1
    )
    assert accumulating.accumulation_steps == 3 and accumulating._head is None


def test_from_recipe_refuses_what_the_recipe_does_not_set():
    params = list(_model().parameters())
    with pytest.raises(ValueError, match=r"recipe.in_backward is False.*use optimizer_class directly"):
        InBackwardOptimizer.from_recipe(params, MemoryRecipe())
    with pytest.raises(ValueError, match=r"recipe.head_update is True: pass head_weight="):
        InBackwardOptimizer.from_recipe(params, MemoryRecipe(in_backward=True, head_update=True), torch.optim.SGD)
    with pytest.raises(ValueError, match=r"head_weight= is given but recipe.head_update is False"):
        InBackwardOptimizer.from_recipe(
            params, MemoryRecipe(in_backward=True), torch.optim.SGD, head_weight=params[2], lr=0.1
        )
    with pytest.raises(TypeError, match=r"got bucket_cap_mb=, overlap= as keywords: the recipe sets them"):
        InBackwardOptimizer.from_recipe(params, MemoryRecipe(in_backward=True), overlap=True, bucket_cap_mb=1.0)
    with pytest.raises(TypeError, match=r"recipe must be an ojas_ref.MemoryRecipe, got dict"):
        InBackwardOptimizer.from_recipe(params, {"in_backward": True})
    # nothing was hooked by the refused calls: the keyword-built optimizer takes the parameters
    assert InBackwardOptimizer(params, torch.optim.SGD, lr=0.1).param_groups[0]["params"] == params
