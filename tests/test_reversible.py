"""ojas_ref.reversible against ordinary autograd on the same blocks.

``ReversibleSequence(blocks)`` must compute what ``nn.Sequential(*blocks)`` computes
(the blocks called directly run with ordinary autograd), keep no activation of any
block for backward, and return the same gradients (Ojas.Reversible.Gradient: backprop
from reconstructed activations is ordinary backprop when the inverse is exact; in
floats it is exact up to the reconstruction error). Exact mode must reconstruct bit for
bit (Ojas.Reversible.FixedPoint).
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from ojas_ref.reversible import AdditiveCoupling, ReversibleBlock, ReversibleSequence, SymplecticCoupling

F64 = torch.float64
F32 = torch.float32


# --------------------------------------------------------------------------
# Stacks
# --------------------------------------------------------------------------

def mlp(d: int, hidden: int, *, dropout: float = 0.0, w1: float = 1.0, w2: float = 1.0) -> nn.Module:
    """Linear -> tanh -> (dropout) -> Linear, first and second weights scaled by w1, w2."""
    m = nn.Sequential(nn.Linear(d, hidden), nn.Tanh(), nn.Dropout(dropout), nn.Linear(hidden, d))
    with torch.no_grad():
        m[0].weight.mul_(w1)
        m[3].weight.mul_(w2)
    return m


def make_blocks(seed: int, depth: int, d: int, *, kinds: str = "as", dropout: float = 0.0, w1: float = 1.0,
                w2: float = 1.0, dtype: torch.dtype = F64) -> list[ReversibleBlock]:
    """depth blocks cycling through kinds: "a" AdditiveCoupling(mlp, mlp), "s" SymplecticCoupling(mlp)."""
    torch.manual_seed(seed)
    blocks: list[ReversibleBlock] = []
    for i in range(depth):
        hidden = 2 * d + 1
        if kinds[i % len(kinds)] == "a":
            blocks.append(AdditiveCoupling(mlp(d, hidden, dropout=dropout, w1=w1, w2=w2),
                                           mlp(d, hidden, dropout=dropout, w1=w1, w2=w2)))
        else:
            blocks.append(SymplecticCoupling(mlp(d, hidden, dropout=dropout, w1=w1, w2=w2), step_size=0.3))
    return [b.to(dtype) for b in blocks]


def grads_of(run, x: torch.Tensor, params: list[torch.Tensor], gy_seed: int, rng_seed: int):
    """(output, gradients of <gy, run(x)> w.r.t. x and params), RNG seeded before run."""
    x = x.detach().clone().requires_grad_()
    torch.manual_seed(rng_seed)
    y = run(x)
    gy = torch.randn(y.shape, generator=torch.Generator().manual_seed(gy_seed), dtype=y.dtype)
    return y.detach(), torch.autograd.grad(y, [x, *params], gy)


def max_rel_error(a: torch.Tensor, e: torch.Tensor) -> float:
    """max |a - e| / max(1, max |e|)."""
    return float((a.to(F64) - e.to(F64)).abs().max()) / max(1.0, float(e.abs().max()))


# --------------------------------------------------------------------------
# Gradients: reversible = ordinary
# --------------------------------------------------------------------------

@st.composite
def stacks(draw):
    return dict(seed=draw(st.integers(0, 2**16)), depth=draw(st.integers(1, 8)), d=draw(st.integers(1, 4)),
                batch=tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=2))),
                kinds=draw(st.sampled_from(["a", "s", "as", "sa"])), dropout=draw(st.sampled_from([0.0, 0.3])))


# float64: every block is Lipschitz with a constant of order 1 here (default Linear
# init, tanh), so the reconstruction error of a layer input is a few ulps per half-update
# times a small amplification; the gradients, evaluated at those inputs, are off by the
# same relative amount. 1e-12 is ~5000 ulps of float64.
F64_TOL = 1e-12


@given(stacks())
def test_gradients_match_ordinary_float64(p):
    blocks = make_blocks(p["seed"], p["depth"], p["d"], kinds=p["kinds"], dropout=p["dropout"])
    rev, seq = ReversibleSequence(blocks), nn.Sequential(*blocks)
    params = list(rev.parameters())
    x = torch.randn(*p["batch"], 2 * p["d"], dtype=F64, generator=torch.Generator().manual_seed(p["seed"]))
    y_rev, g_rev = grads_of(rev, x, params, p["seed"], rng_seed=p["seed"] + 1)
    y_seq, g_seq = grads_of(seq, x, params, p["seed"], rng_seed=p["seed"] + 1)
    # Same operations on the same inputs with the same dropout masks: the forward is bitwise equal.
    assert torch.equal(y_rev, y_seq)
    for i, (a, e) in enumerate(zip(g_rev, g_seq)):
        assert max_rel_error(a, e) <= F64_TOL, f"gradient {i} (0 = input): {max_rel_error(a, e):.3g}"


def test_dropout_masks_are_replayed():
    """With dropout the gradients depend on the masks (a different seed gives other
    gradients); the reversible backward replays the forward's masks."""
    blocks = make_blocks(3, 4, 3, dropout=0.5)
    rev, seq = ReversibleSequence(blocks), nn.Sequential(*blocks)
    params = list(rev.parameters())
    x = torch.randn(5, 6, dtype=F64)
    _, g_rev = grads_of(rev, x, params, 0, rng_seed=11)
    _, g_seq = grads_of(seq, x, params, 0, rng_seed=11)
    _, g_other = grads_of(seq, x, params, 0, rng_seed=12)
    assert max_rel_error(g_rev[0], g_seq[0]) <= F64_TOL
    assert max_rel_error(g_other[0], g_seq[0]) > 1e-3
    # the global RNG continues after backward as if backward had drawn nothing
    torch.manual_seed(5)
    y = rev(x.clone().requires_grad_())
    after_forward = torch.get_rng_state()
    y.sum().backward()
    assert torch.equal(torch.get_rng_state(), after_forward)


def test_parameter_grads_accumulate_and_hooks_fire():
    blocks = make_blocks(1, 3, 2, kinds="a")
    rev = ReversibleSequence(blocks)
    x = torch.randn(4, 4, dtype=F64, requires_grad=True)
    fired = []
    w = blocks[1].f[0].weight
    w.register_hook(lambda g: fired.append(g.clone()))
    rev(x).square().sum().backward()
    first = w.grad.clone()
    rev(x).square().sum().backward()
    assert len(fired) == 2 and torch.equal(fired[0], first)
    torch.testing.assert_close(w.grad, 2 * first, rtol=0, atol=0)
    # a parameter with requires_grad=False gets no gradient, the others still do
    blocks[0].g[3].bias.requires_grad_(False)
    for p in rev.parameters():
        p.grad = None
    rev(x).sum().backward()
    assert blocks[0].g[3].bias.grad is None and blocks[0].g[0].weight.grad is not None


def test_shared_parameters_sum_their_gradients():
    """One MLP used by several blocks (and twice per symplectic step): .grad is the sum over uses."""
    torch.manual_seed(0)
    shared = mlp(3, 5).double()
    blocks = [AdditiveCoupling(shared, mlp(3, 5).double()), SymplecticCoupling(shared, step_size=0.5),
              AdditiveCoupling(mlp(3, 5).double(), shared)]
    rev, seq = ReversibleSequence(blocks), nn.Sequential(*blocks)
    params = list(rev.parameters())
    x = torch.randn(2, 6, dtype=F64)
    _, g_rev = grads_of(rev, x, params, 1, rng_seed=0)
    _, g_seq = grads_of(seq, x, params, 1, rng_seed=0)
    for a, e in zip(g_rev, g_seq):
        assert max_rel_error(a, e) <= F64_TOL
