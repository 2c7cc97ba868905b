"""The primitives under torch.func transforms (refused with a clear error) and under
torch.compile (ojas_ref/functional/transforms.py): compiled results equal eager ones."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch import nn

import ojas_ref

X = torch.randn(6, 8, dtype=torch.float64)
W = torch.randn(11, 8, dtype=torch.float64)
T = torch.randint(0, 11, (6,))
Q = torch.randn(1, 2, 8, 4, dtype=torch.float64)


def stack() -> ojas_ref.ReversibleSequence:
    torch.manual_seed(0)
    return ojas_ref.ReversibleSequence(
        [
            ojas_ref.AdditiveCoupling(nn.Linear(2, 2, dtype=torch.float64), nn.Linear(2, 2, dtype=torch.float64))
            for _ in range(2)
        ]
    )


STACK = stack()
CALLS = {
    "linear_cross_entropy": lambda x: ojas_ref.linear_cross_entropy(x, W, T),
    "attention": lambda q: ojas_ref.attention(q, q, q, is_causal=True).sum(),
    "ReversibleSequence": lambda x: STACK(x).sum(),
    "relu": lambda x: (ojas_ref.relu(x) * X).sum(),
    "relu_squared_linear": lambda x: ojas_ref.relu_squared_linear(x, W).sum(),
}
INPUTS = {
    "linear_cross_entropy": X,
    "attention": Q,
    "ReversibleSequence": torch.randn(3, 4, dtype=torch.float64),
    "relu": X,
    "relu_squared_linear": X,
}


@pytest.mark.parametrize("name", list(CALLS))
@pytest.mark.parametrize("transform", ["grad", "vmap"])
def test_function_transforms_are_refused(name, transform):
    f, x = CALLS[name], INPUTS[name]
    call = torch.func.grad(f) if transform == "grad" else torch.func.vmap(f)
    arg = x if transform == "grad" else x.unsqueeze(0)
    with pytest.raises(NotImplementedError, match=f"{name} does not support torch.func transforms"):
        call(arg)


@pytest.mark.parametrize("name", list(CALLS))
def test_compiled_equals_eager(name):
    torch._dynamo.reset()
    f, x = CALLS[name], INPUTS[name]
    eager_x, compiled_x = x.clone().requires_grad_(), x.clone().requires_grad_()
    eager = f(eager_x)
    eager.backward()
    compiled = torch.compile(f, backend="eager")(compiled_x)
    compiled.backward()
    assert torch.equal(eager, compiled) and torch.equal(eager_x.grad, compiled_x.grad)


def test_attention_compiles_without_graph_breaks():
    torch._dynamo.reset()
    assert torch._dynamo.explain(CALLS["attention"])(Q.clone().requires_grad_()).graph_break_count == 0
