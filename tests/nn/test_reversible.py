"""ojas_ref.nn.reversible against ordinary autograd on the same blocks.

``ReversibleSequence(blocks)`` must compute what ``nn.Sequential(*blocks)`` computes
(the blocks called directly run with ordinary autograd), keep no activation of any
block for backward, and return the same gradients (Ojas.Reversible.Gradient: backprop
from reconstructed activations is ordinary backprop when the inverse is exact; in
floats it is exact up to the reconstruction error). Exact mode must reconstruct bit for
bit (Ojas.Reversible.FixedPoint).
"""

from __future__ import annotations

import copy
import math
import weakref

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ojas_ref.nn.reversible import AdditiveCoupling, HalfUpdate, ReversibleBlock, ReversibleSequence, SymplecticCoupling
from ojas_ref.verification.bounds.reversible import reversible_reconstruction_error_bound
from ojas_ref.verification.oracle import coupling_stack_oracle
from ojas_ref.verification.reversible_check import (
    make_problem,
    oracle_mismatches,
    reconstruction_bounds,
    tanh_mlp_constants,
    unit_roundoff,
)

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


def make_blocks(
    seed: int,
    depth: int,
    d: int,
    *,
    kinds: str = "as",
    dropout: float = 0.0,
    w1: float = 1.0,
    w2: float = 1.0,
    dtype: torch.dtype = F64,
) -> list[ReversibleBlock]:
    """depth blocks cycling through kinds: "a" AdditiveCoupling(mlp, mlp), "s" SymplecticCoupling(mlp)."""
    torch.manual_seed(seed)
    blocks: list[ReversibleBlock] = []
    for i in range(depth):
        hidden = 2 * d + 1
        if kinds[i % len(kinds)] == "a":
            blocks.append(
                AdditiveCoupling(
                    mlp(d, hidden, dropout=dropout, w1=w1, w2=w2), mlp(d, hidden, dropout=dropout, w1=w1, w2=w2)
                )
            )
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
    return dict(
        seed=draw(st.integers(0, 2**16)),
        depth=draw(st.integers(1, 8)),
        d=draw(st.integers(1, 4)),
        batch=tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=2))),
        kinds=draw(st.sampled_from(["a", "s", "as", "sa"])),
        dropout=draw(st.sampled_from([0.0, 0.3])),
    )


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
    # Same operations on the same inputs with the same dropout masks; not always bitwise
    # equal: torch.matmul picks other kernels for inputs that require grad.
    assert max_rel_error(y_rev, y_seq) <= F64_TOL
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
    blocks = [
        AdditiveCoupling(shared, mlp(3, 5).double()),
        SymplecticCoupling(shared, step_size=0.5),
        AdditiveCoupling(mlp(3, 5).double(), shared),
    ]
    rev, seq = ReversibleSequence(blocks), nn.Sequential(*blocks)
    params = list(rev.parameters())
    x = torch.randn(2, 6, dtype=F64)
    _, g_rev = grads_of(rev, x, params, 1, rng_seed=0)
    _, g_seq = grads_of(seq, x, params, 1, rng_seed=0)
    for a, e in zip(g_rev, g_seq):
        assert max_rel_error(a, e) <= F64_TOL


class FullBias(nn.Module):
    """x + b with b of x's full shape: the gradient of b is the output gradient itself."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.b = nn.Parameter(torch.randn(shape, dtype=F64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.b


def test_functions_aliasing_the_stream():
    """Backward updates the stream and its gradient in place: gradients that alias them (an
    identity velocity with step 1, a bias whose gradient is the output gradient) still match."""
    torch.manual_seed(0)
    blocks = [
        SymplecticCoupling(mlp(3, 5).double(), step_size=1.0),
        AdditiveCoupling(FullBias((4, 3)), mlp(3, 5).double()),
        AdditiveCoupling(mlp(3, 5).double(), FullBias((4, 3))),
    ]
    rev, seq = ReversibleSequence(blocks), nn.Sequential(*blocks)
    params = list(rev.parameters())
    x = torch.randn(4, 6, dtype=F64)
    _, g_rev = grads_of(rev, x, params, 2, rng_seed=0)
    _, g_seq = grads_of(seq, x, params, 2, rng_seed=0)
    for a, e in zip(g_rev, g_seq):
        assert max_rel_error(a, e) <= F64_TOL


class Attention(nn.Module):
    """Causal self-attention on [B, S, d] through ojas_ref.attention (LayerNorm first, no residual)."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from ojas_ref.functional.attention import attention

        q, k, v = self.qkv(self.norm(x)).unflatten(-1, (3, self.heads, -1)).permute(2, 0, 3, 1, 4)
        return self.out(attention(q, k, v, is_causal=True).transpose(1, 2).flatten(-2))


def test_transformer_blocks_attention_and_mlp():
    """f = attention block, g = MLP block on a doubled stream (RevViT / Reformer)."""
    torch.manual_seed(0)
    d = 8
    blocks = [
        AdditiveCoupling(Attention(d, 2), nn.Sequential(nn.LayerNorm(d), mlp(d, 4 * d))).double() for _ in range(3)
    ]
    rev, seq = ReversibleSequence(blocks), nn.Sequential(*blocks)
    params = list(rev.parameters())
    e = torch.randn(2, 5, d, dtype=F64)
    x = torch.cat([e, e], dim=-1)
    y_rev, g_rev = grads_of(rev, x, params, 0, rng_seed=0)
    y_seq, g_seq = grads_of(seq, x, params, 0, rng_seed=0)
    assert max_rel_error(y_rev, y_seq) <= F64_TOL
    for a, b in zip(g_rev, g_seq):
        assert max_rel_error(a, b) <= F64_TOL


# --------------------------------------------------------------------------
# Exact (fixed-point) mode
# --------------------------------------------------------------------------


def straight_through_stack(blocks: list[ReversibleBlock], x: torch.Tensor, k: int) -> torch.Tensor:
    """The fixed-point computation of exact mode with ordinary autograd, float64: every
    increment z is replaced by round(z 2^k) 2^-k with the gradient of z (straight-through).
    The values are multiples of 2^-k below 2^(53-k), so the float64 sums are exact."""

    def st_round(z: torch.Tensor) -> torch.Tensor:
        return torch.round(z.detach() * 2.0**k) * 2.0**-k + (z - z.detach())

    h = list(st_round(x).chunk(2, dim=-1))
    for block in blocks:
        for u in block.half_updates():
            out = u.fn(h[1 - u.target])
            h[u.target] = h[u.target] + st_round(out if u.scale == 1.0 else out * u.scale)
    return torch.cat(h, dim=-1)


@given(stacks(), st.sampled_from([8, 20, 32]))
def test_exact_mode_is_straight_through_fixed_point(p, k):
    """Exact mode's output is the fixed-point computation (bitwise), its gradients those
    of the straight-through estimator (rounding as identity), the inverse is bit-exact."""
    blocks = make_blocks(p["seed"], p["depth"], p["d"], kinds=p["kinds"], dropout=p["dropout"])
    rev = ReversibleSequence(blocks, exact=True, fraction_bits=k, check_reconstruction=True)
    params = list(rev.parameters())
    x = torch.randn(*p["batch"], 2 * p["d"], dtype=F64, generator=torch.Generator().manual_seed(p["seed"]))
    y_rev, g_rev = grads_of(rev, x, params, p["seed"], rng_seed=p["seed"])
    y_ref, g_ref = grads_of(lambda v: straight_through_stack(blocks, v, k), x, params, p["seed"], rng_seed=p["seed"])
    assert torch.equal(y_rev, y_ref)
    assert rev.reconstruction_errors == [0.0] * p["depth"]
    for i, (a, e) in enumerate(zip(g_rev, g_ref)):
        assert max_rel_error(a, e) <= F64_TOL, f"gradient {i}: {max_rel_error(a, e):.3g}"


@given(
    st.integers(0, 2**16),
    st.integers(1, 12),
    st.sampled_from(["a", "s", "as"]),
    st.sampled_from([F32, F64]),
    st.sampled_from([0.3, 1.0, 10.0]),
)
def test_exact_inverse_is_bit_exact(seed, depth, kinds, dtype, scale):
    """stack_inverse(stack_forward(s)) == s for any functions (FixedPoint.fixed_point_stack_inverse_exact_list),
    badly conditioned ones (weights x10) included."""
    blocks = make_blocks(seed, depth, 3, kinds=kinds, w1=scale, w2=scale, dtype=dtype)
    rev = ReversibleSequence(blocks, exact=True, fraction_bits=24)
    s = rev.quantize(torch.randn(6, 6, dtype=dtype, generator=torch.Generator().manual_seed(seed)))
    y = rev.stack_forward(s, dtype)
    assert y.dtype == torch.int64
    assert torch.equal(rev.stack_inverse(y, dtype), s)


def test_badly_conditioned_float_reconstruction_vs_exact():
    """Weights x10, float32, depth 8: the float inverse is visibly off, the exact one is not."""
    blocks = make_blocks(0, 8, 3, kinds="a", w1=10.0, w2=10.0, dtype=F32)
    x = torch.randn(16, 6, generator=torch.Generator().manual_seed(0)).requires_grad_()
    float_rev = ReversibleSequence(blocks, check_reconstruction=True)
    float_rev(x).sum().backward()
    assert max(float_rev.reconstruction_errors) > 1e-4
    assert float((float_rev.stack_inverse(float_rev.stack_forward(x.detach())) - x.detach()).abs().max()) > 1e-4
    exact_rev = ReversibleSequence(blocks, exact=True, check_reconstruction=True)
    exact_rev(x).sum().backward()
    assert exact_rev.reconstruction_errors == [0.0] * 8


# --------------------------------------------------------------------------
# Memory: what autograd saves
# --------------------------------------------------------------------------


def saved_activation_bytes(module: nn.Module, x: torch.Tensor) -> int:
    """Bytes of the tensors autograd saves for backward during module(x), parameters excluded."""
    param_storages = {p.untyped_storage().data_ptr() for p in module.parameters()}
    total = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal total
        if t.untyped_storage().data_ptr() not in param_storages:
            total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        module(x)
    return total


@pytest.mark.parametrize("exact", [False, True])
def test_saved_tensors_do_not_grow_with_depth(exact):
    x = torch.randn(4, 7, 16, requires_grad=True)
    rev, ordinary = {}, {}
    for depth in (1, 4, 16):
        blocks = make_blocks(0, depth, 8, kinds="as", dtype=F32)
        rev[depth] = saved_activation_bytes(ReversibleSequence(blocks, exact=exact), x)
        ordinary[depth] = saved_activation_bytes(nn.Sequential(*blocks), x)
    # reversible: the output only (its int64 state in exact mode)
    assert rev[1] == rev[4] == rev[16] == x.numel() * (8 if exact else 4)
    # ordinary: the same amount per pair of blocks ("as"), so affine in depth
    per_block = (ordinary[16] - ordinary[4]) / 12
    assert per_block > 0 and ordinary[4] - ordinary[1] == 3 * per_block


class LiveBytes(TorchDispatchMode):
    """Peak bytes of the storages allocated by the ops run under the mode and still alive
    (a storage counts from the op that creates it until the last tensor object on it is
    collected: weakref finalizers; views and in-place results of older storages are not
    counted). For the transient memory of a backward pass on the CPU."""

    def __init__(self) -> None:
        super().__init__()
        self.live = self.peak = 0
        self.tensors: dict[int, list[int]] = {}  # storage pointer -> [live tensors, bytes]

    def _drop(self, key: int) -> None:
        entry = self.tensors[key]
        entry[0] -= 1
        if entry[0] == 0:
            self.live -= self.tensors.pop(key)[1]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        older = {t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
        out = func(*args, **kwargs)
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or t.untyped_storage().nbytes() == 0:
                continue
            key = t.untyped_storage().data_ptr()
            if key in self.tensors:
                self.tensors[key][0] += 1
            elif key in older:
                continue
            else:
                self.tensors[key] = [1, t.untyped_storage().nbytes()]
                self.live += self.tensors[key][1]
                self.peak = max(self.peak, self.live)
            weakref.finalize(t, self._drop, key)
        return out


def backward_peak_bytes(depth: int, d: int, rows: int, hidden: int) -> int:
    """Peak live bytes allocated during backward of a float32 AdditiveCoupling stack, with
    the gradients accumulated into .grad buffers that exist before the step."""
    torch.manual_seed(0)
    rev = ReversibleSequence([AdditiveCoupling(mlp(d, hidden), mlp(d, hidden)) for _ in range(depth)])
    x = torch.randn(rows, 2 * d, requires_grad=True)
    for t in [x, *rev.parameters()]:
        t.grad = torch.zeros_like(t)
    y = rev(x)
    gy = torch.randn_like(y)
    with LiveBytes() as mode:
        y.backward(gy)
    return mode.peak


@pytest.mark.parametrize("d, rows, hidden", [(8, 4096, 16), (64, 64, 256)])
def test_backward_peak_memory_does_not_grow_with_depth(d, rows, hidden):
    """Backward's transient memory (reconstructed stream, its gradient, one function's
    recomputation, one block's parameter gradients) is the same at depth 1 and 6, for
    activation-heavy (rows 4096) and parameter-heavy (d 64, hidden 256, rows 64) stacks:
    no per-block stream tensor and no parameter gradient of earlier blocks stays alive."""
    peaks = [backward_peak_bytes(depth, d, rows, hidden) for depth in (1, 6)]
    assert peaks[1] <= 1.05 * peaks[0], peaks


def test_check_reconstruction_stores_inputs():
    """Debug mode keeps every block's input (the memory the stack otherwise saves)."""
    x = torch.randn(4, 16, requires_grad=True)
    blocks = make_blocks(0, 4, 8, dtype=F32)
    rev = ReversibleSequence(blocks, check_reconstruction=True)
    rev(x).sum().backward()
    assert len(rev.reconstruction_errors) == 4 and all(0.0 <= e < 1e-5 for e in rev.reconstruction_errors)


# --------------------------------------------------------------------------
# Autocast
# --------------------------------------------------------------------------


class AutocastProbe(nn.Module):
    """An MLP that records whether CPU autocast is on at each call."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.net = mlp(d, 2 * d)
        self.seen: list[bool] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(torch.is_autocast_enabled("cpu"))
        return self.net(x)


def test_autocast_state_replayed_in_backward():
    torch.manual_seed(0)
    probes = [AutocastProbe(4) for _ in range(4)]
    blocks = [AdditiveCoupling(probes[2 * i], probes[2 * i + 1]) for i in range(2)]
    rev, seq = ReversibleSequence(blocks), nn.Sequential(*blocks)
    params = list(rev.parameters())
    x = torch.randn(3, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y_rev, g_rev = grads_of(rev, x, params, 0, rng_seed=0)
        y_seq, g_seq = grads_of(seq, x, params, 0, rng_seed=0)
    assert all(all(p.seen) and len(p.seen) == 3 for p in probes)  # forward, backward, ordinary
    assert y_rev.dtype == F32 and max_rel_error(y_rev, y_seq) <= 1e-6
    # bf16 products: the reconstructed input may round to another bf16 value than the stored one
    for a, e in zip(g_rev, g_seq):
        assert max_rel_error(a, e) <= 2e-2


# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------


class Tupled(nn.Module):
    def forward(self, x):
        return x, x


class Widen(nn.Module):
    def forward(self, x):
        return torch.cat([x, x], dim=-1)


class InPlace(nn.Module):
    def forward(self, x):
        return x.mul_(2.0)


class Huge(nn.Module):
    def forward(self, x):
        return x * 1e30


class BadBlock(ReversibleBlock):
    def half_updates(self):
        return (HalfUpdate(2, nn.Identity(), 1.0, "f"),)


def test_errors():
    a = AdditiveCoupling(nn.Identity(), nn.Identity())
    with pytest.raises(ValueError, match="even, nonzero last dimension"):
        ReversibleSequence([a])(torch.randn(3, 5))
    with pytest.raises(TypeError, match="floating dtype"):
        ReversibleSequence([a])(torch.ones(3, 4, dtype=torch.int64))
    with pytest.raises(TypeError, match="f must be an nn.Module"):
        AdditiveCoupling(lambda x: x, nn.Identity())
    with pytest.raises(ValueError, match="step_size"):
        SymplecticCoupling(nn.Identity(), step_size=math.nan)
    with pytest.raises(ValueError, match="at least one"):
        ReversibleSequence([])
    with pytest.raises(TypeError, match=r"blocks\[1\] must be a ReversibleBlock"):
        ReversibleSequence([a, nn.Linear(2, 2)])
    with pytest.raises(TypeError, match="single Linear"):
        ReversibleSequence(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="fraction_bits"):
        ReversibleSequence([a], exact=True, fraction_bits=63)
    with pytest.raises(TypeError, match=r"blocks\[0\] \(AdditiveCoupling\): g must return a torch.Tensor"):
        ReversibleSequence([AdditiveCoupling(nn.Identity(), Tupled())])(torch.randn(2, 4))
    with pytest.raises(ValueError, match="f changed the shape"):
        ReversibleSequence([AdditiveCoupling(Widen(), nn.Identity())])(torch.randn(2, 4))
    with pytest.raises(ValueError, match="f changed the shape"):
        AdditiveCoupling(Widen(), nn.Identity())(torch.randn(2, 4))
    with pytest.raises(RuntimeError, match="modified its input in place"):
        ReversibleSequence([AdditiveCoupling(InPlace(), nn.Identity())])(torch.randn(2, 4))
    with pytest.raises(OverflowError, match="fixed-point range"):
        ReversibleSequence([a], exact=True, fraction_bits=40)(torch.full((2, 4), 2.0**30))
    with pytest.raises(OverflowError, match="f's increment"):
        ReversibleSequence([AdditiveCoupling(Huge(), nn.Identity())], exact=True)(torch.ones(2, 4))
    with pytest.raises(TypeError, match="int64 fixed-point state"):
        ReversibleSequence([a], exact=True).stack_forward(torch.ones(2, 4))
    with pytest.raises(TypeError, match=r"blocks\[0\].half_updates\(\) must return HalfUpdate"):
        ReversibleSequence([BadBlock()])(torch.randn(2, 4))


@pytest.mark.parametrize("exact", [False, True], ids=["float", "exact"])
def test_inference_mode_runs_the_forward(exact: bool) -> None:
    """Under torch.inference_mode() the stack computes what it computes with autograd
    (inference tensors have no version counter: the in-place check skips them), for an
    input made outside or inside inference mode; the block's own forward and inverse too."""
    blocks = make_blocks(0, 3, 2, kinds="as", dropout=0.3)
    stack = ReversibleSequence(blocks, exact=exact).eval()
    x = torch.randn(5, 4, dtype=F64)
    expected = stack(x.clone().requires_grad_()).detach()
    with torch.inference_mode():
        y = stack(x)
        y_inside = stack(x.detach().clone())
        inverse = blocks[0].inverse(blocks[0](x))
    assert y.is_inference() and torch.equal(y, expected) and torch.equal(y_inside, expected)
    assert float((inverse - x).abs().max()) < 1e-12


class Closure(nn.Module):
    """x * w for a tensor w the module holds without registering it (as a closure would)."""

    def __init__(self, w) -> None:
        super().__init__()
        self.get_w = lambda: w  # not an attribute nn.Module sees: no parameter, no buffer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.get_w()


@pytest.mark.parametrize("kind", ["leaf", "derived", "other_block"])
def test_tensor_reached_outside_the_parameters_raises(kind: str) -> None:
    """A tensor requiring grad that a function reaches without it being one of its parameters
    (a leaf, a tensor computed from one, a parameter of another block) would get no gradient
    from the reversible backward, where ordinary autograd gives it one: backward raises."""
    torch.manual_seed(0)
    other = AdditiveCoupling(nn.Linear(2, 2), nn.Linear(2, 2))
    w = {
        "leaf": nn.Parameter(torch.randn(2)),
        "derived": nn.Parameter(torch.randn(2)) * 2,
        "other_block": other.f.bias,
    }[kind]
    blocks = [AdditiveCoupling(Closure(w), nn.Linear(2, 2)), other]
    x = torch.randn(3, 4)
    leaf = w if w.is_leaf else next(iter(w.grad_fn.next_functions))[0].variable
    assert torch.autograd.grad(nn.Sequential(*blocks)(x).sum(), leaf)[0].abs().sum() > 0  # ordinary autograd
    with pytest.raises(
        RuntimeError,
        match=r"blocks\[0\] \(AdditiveCoupling\): f uses a tensor that requires "
        r"grad \(shape \(2,\)\) and is not one of its parameters",
    ):
        ReversibleSequence(blocks)(x).sum().backward()


def test_tensor_reached_outside_the_parameters_without_grad_is_fine() -> None:
    """A closed-over constant (no grad required) is not a lost gradient: no error, the
    ordinary gradient (within F64_TOL, the float64 reconstruction tolerance above)."""
    torch.manual_seed(0)
    blocks = [AdditiveCoupling(Closure(torch.randn(2, dtype=F64)), nn.Linear(2, 2).to(F64))]
    x = torch.randn(3, 4, dtype=F64, requires_grad=True)
    (gx,) = torch.autograd.grad(ReversibleSequence(blocks)(x).sum(), x)
    (ex,) = torch.autograd.grad(nn.Sequential(*blocks)(x).sum(), x)
    assert max_rel_error(gx, ex) <= F64_TOL


# --------------------------------------------------------------------------
# float32: the Coq reconstruction bound, gradients
# --------------------------------------------------------------------------


def mlp_constants(dtype: torch.dtype):
    u = unit_roundoff(dtype)
    return lambda m, x_max: tanh_mlp_constants(m[0].weight, m[0].bias, m[3].weight, m[3].bias, x_max, u)


@given(
    st.integers(0, 2**16),
    st.integers(1, 8),
    st.integers(1, 4),
    st.sampled_from([F32, F64]),
    st.sampled_from([0.5, 1.0, 3.0]),
)
def test_reconstruction_within_coq_bound(seed, depth, d, dtype, scale):
    """Measured per-block reconstruction errors <= Ojas.Reversible.FloatError.vec_stack_recon_error
    (evaluated by reversible_check.reconstruction_bounds; inf where not established)."""
    blocks = make_blocks(seed, depth, d, kinds="a", w1=scale, w2=scale, dtype=dtype)
    x = torch.randn(4, 2 * d, dtype=dtype, generator=torch.Generator().manual_seed(seed)).requires_grad_()
    rev = ReversibleSequence(blocks, check_reconstruction=True)
    rev(x).sum().backward()
    bounds = reconstruction_bounds(blocks, x.detach(), mlp_constants(dtype))
    assert math.isfinite(bounds[-1])
    for i, (err, bound) in enumerate(zip(rev.reconstruction_errors, bounds)):
        assert err <= bound, f"block {i}: reconstruction error {err:.3g} > bound {bound:.3g}"


# float32 gradient tolerance, an estimate: the Coq bound above is rigorous but compounds
# worst-case max-norm Lipschitz constants (K = 13..20 per block for these MLPs), so it is
# established only for the last few blocks and cannot serve as a tolerance at depth 8.
# The measured reconstruction error is a few u per block (u = 2^-24) and the gradients'
# sensitivity to it is O(1) for default-init MLPs (observed relative gradient error
# <= 6 u at depth 8), so 64 u per block leaves a margin of about 10 while an
# algorithmic fault (a missed parameter, a wrong mask) gives errors of order 1.
def f32_tol(depth: int) -> float:
    return 64 * depth * 2.0**-24


@given(stacks())
def test_gradients_match_ordinary_float32(p):
    blocks = make_blocks(p["seed"], p["depth"], p["d"], kinds=p["kinds"], dropout=p["dropout"], dtype=F32)
    rev, seq = ReversibleSequence(blocks), nn.Sequential(*blocks)
    params = list(rev.parameters())
    x = torch.randn(*p["batch"], 2 * p["d"], generator=torch.Generator().manual_seed(p["seed"]))
    y_rev, g_rev = grads_of(rev, x, params, p["seed"], rng_seed=p["seed"] + 1)
    y_seq, g_seq = grads_of(seq, x, params, p["seed"], rng_seed=p["seed"] + 1)
    assert max_rel_error(y_rev, y_seq) <= f32_tol(p["depth"])
    for i, (a, e) in enumerate(zip(g_rev, g_seq)):
        assert max_rel_error(a, e) <= f32_tol(p["depth"]), f"gradient {i}: {max_rel_error(a, e):.3g}"


# --------------------------------------------------------------------------
# The oracle extracted from rocq/Reversible (op "reversible")
# --------------------------------------------------------------------------


@given(
    st.integers(0, 2**16),
    st.integers(1, 4),
    st.integers(1, 4),
    st.integers(1, 5),
    st.integers(1, 3),
    st.sampled_from([0.5, 1.0, 2.0]),
)
def test_oracle_float(seed, depth, d, hidden, rows, scale):
    p = make_problem(seed, depth=depth, d=d, hidden=hidden, rows=rows, weight_scale=scale)
    assert oracle_mismatches(p) == []


@given(
    st.integers(0, 2**16),
    st.integers(1, 4),
    st.integers(1, 4),
    st.sampled_from([0, 8, 20, 40]),
    st.sampled_from([1.0, 4.0]),
)
def test_oracle_fixed_point(seed, depth, d, k, scale):
    p = make_problem(seed, depth=depth, d=d, hidden=4, rows=2, weight_scale=scale, fraction_bits=k)
    assert oracle_mismatches(p) == []


def test_oracle_vector_and_errors():
    """A single vector [d] is one row; the oracle names the field of a malformed request."""
    p = make_problem(0, depth=2, d=3, rows=1)
    one = coupling_stack_oracle(p["x1"][0], p["x2"][0], p["layers"])
    rows = coupling_stack_oracle(p["x1"], p["x2"], p["layers"])
    assert one["y1"].shape == (3,) and torch.equal(one["y1"], rows["y1"][0])
    bad = [(f, g[:3]) for f, g in p["layers"]]
    with pytest.raises(ValueError, match=r"layers\[0\].g"):
        coupling_stack_oracle(p["x1"], p["x2"], bad)
    with pytest.raises(ValueError, match="fixed-point range|2\\^60"):
        coupling_stack_oracle(
            torch.full((1, 3), 2**61), torch.zeros(1, 3, dtype=torch.int64), p["layers"], fraction_bits=8
        )


# --------------------------------------------------------------------------
# float32: the a-posteriori bound (Ojas.Reversible.APosteriori)
# --------------------------------------------------------------------------


def _inverse_steps(blocks: list, y: torch.Tensor) -> list[torch.Tensor]:
    """a[i] = the reconstructed output of block i (a[N] = y), by each block's own inverse, last block first."""
    a = [y]
    for b in reversed(blocks):
        a.append(b.inverse(a[-1]))
    return a[::-1]


def _pair_lipschitz(fn: nn.Module, p: torch.Tensor, q: torch.Tensor) -> float:
    """max over rows of |fn(p) - fn(q)|_max / |p - q|_max (0 where p = q): the constant
    ``vlip_at`` needs at this pair only."""
    num, den = (fn(p) - fn(q)).abs().amax(dim=-1), (p - q).abs().amax(dim=-1)
    return float(torch.where(den > 0, num / den.clamp_min(1e-300), torch.zeros_like(num)).max())


def test_reconstruction_within_a_posteriori_bound():
    """float32 stack of depth 32 (w = 0.3 tanh MLPs), float64 copies standing in for the
    exact functions: the measured per-block reconstruction error <= the bound of
    Ojas.Reversible.APosteriori.vec_stack_recon_error_apost evaluated by
    reversible_reconstruction_error_bound from measured local errors r_i + d_i and
    Lipschitz constants at the visited pairs (and from the global ||W2|| ||W1||
    constants, looser), while the worst-case product ((1+LF)(1+LG))^32 is > 1e6.
    The factors asserted are regressions of what this seed gives (observed: error
    9.5e-7, bound 3.4e-5 (x36), sum of local errors 7.6e-6 (bound x4.5), bound with the
    global constants 0.39, K^32 = 1.25e7, sum_j e_j K^j = 6.2 (x1.8e5)). Reconstruction
    only: the gradient bound (vec_stack_grad_error_apost) is not evaluated here."""
    depth, d = 32, 4
    blocks = make_blocks(0, depth, d, kinds="a", w1=0.3, w2=0.3, dtype=F32)
    exact = [copy.deepcopy(b).to(F64) for b in blocks]
    x = torch.randn(8, 2 * d, generator=torch.Generator().manual_seed(0))
    rev = ReversibleSequence(blocks, check_reconstruction=True)
    rev(x.clone().requires_grad_()).sum().backward()

    def exact_inverse(i: int, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        y1, y2 = y.to(F64).chunk(2, dim=-1)
        x2 = y2 - exact[i].g(y1)
        return torch.cat([y1 - exact[i].f(x2), x2], dim=-1), y1, x2

    def inorm(w: torch.Tensor) -> float:
        return float(w.detach().to(F64).abs().sum(dim=1).max())

    with torch.no_grad():
        xs = [x]
        for b in blocks:
            xs.append(b(xs[-1]))
        a = _inverse_steps(blocks, xs[-1])
        observed = [float((a[i].to(F64) - xs[i].to(F64)).abs().max()) for i in range(depth)]
        local, lf, lg, lf_norm, lg_norm = [], [], [], [], []
        for i in range(depth):
            ea, a1, ax2 = exact_inverse(i, a[i + 1])
            ey, y1, yx2 = exact_inverse(i, xs[i + 1])
            r = float((a[i].to(F64) - ea).abs().max())  # the code's step vs the exact inverse, at a[i+1]
            dd = float((ey - xs[i].to(F64)).abs().max())  # exact inverse of the stored output vs stored input
            local.append(r + dd)
            lg.append(_pair_lipschitz(exact[i].g, a1, y1))
            lf.append(_pair_lipschitz(exact[i].f, ax2, yx2))
            lf_norm.append(inorm(exact[i].f[0].weight) * inorm(exact[i].f[3].weight))
            lg_norm.append(inorm(exact[i].g[0].weight) * inorm(exact[i].g[3].weight))
    bound = reversible_reconstruction_error_bound(local, lf, lg)
    bound_norm = reversible_reconstruction_error_bound(local, lf_norm, lg_norm)
    for i in range(depth):
        assert observed[i] <= bound[i] <= bound_norm[i], (i, observed[i], bound[i], bound_norm[i])
        assert rev.reconstruction_errors[i] <= bound[i], (i, rev.reconstruction_errors[i], bound[i])
        assert lf[i] <= lf_norm[i] and lg[i] <= lg_norm[i]
    k_max = max((1 + f) * (1 + g) for f, g in zip(lf_norm, lg_norm))
    worst = k_max**depth
    assert worst > 1e6
    # the same local errors under the uniform worst-case factor: sum_j e_j K^j
    assert sum(e * k_max**j for j, e in enumerate(local)) >= 1e4 * bound[0]
    assert bound[0] <= 10 * sum(local)
    assert bound[0] <= 100 * observed[0]
    assert bound[0] <= 1e-4
