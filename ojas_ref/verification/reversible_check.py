"""Differential check of ojas_ref.nn.reversible against the oracle extracted from Coq.

Shared by tests/nn/test_reversible.py and ``ojas audit``. A problem (``make_problem``) is
a stack of additive coupling layers whose f and g are tanh MLPs given by their weights
(the oracle's residual functions), input halves x1, x2 [N, d], upstream gradients, and
``fraction_bits`` (None: float mode; k: exact mode). ``oracle_mismatches`` runs
:class:`ojas_ref.nn.reversible.ReversibleSequence` and the oracle's ``reversible`` op
on it and lists what disagrees:

* float mode: forward output, the inverse of that output (the reconstructed input),
  the input gradient and every parameter gradient (the oracle's from
  ``coupling_stack_backward`` of rocq/Reversible/Gradient.v, the reference's from its
  autograd Function), within ``oracle_tolerance``;
* exact mode: each side's inverse must give back the quantised input bit for bit
  (rocq/Reversible/FixedPoint.v), and the fixed-point outputs must agree within
  ``fixed_point_tolerance`` units (both evaluate the MLPs in float64, with different
  summation orders, so an increment may round to a neighbouring integer).
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Sequence

import torch
from torch import Tensor, nn

from ojas_ref.nn.reversible import AdditiveCoupling, ReversibleSequence

F64 = torch.float64

__all__ = [
    "TanhMLP",
    "make_problem",
    "oracle_mismatches",
    "oracle_tolerance",
    "reconstruction_bounds",
    "reference_stack",
    "tanh_mlp_constants",
    "unit_roundoff",
]


class TanhMLP(nn.Module):
    """x -> W2 tanh(W1 x + b1) + b2 (W1 [h, d], b1 [h], W2 [d, h], b2 [d]): the oracle's residual function."""

    def __init__(self, w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor) -> None:
        super().__init__()
        self.w1, self.b1, self.w2, self.b2 = (nn.Parameter(t.detach().clone()) for t in (w1, b1, w2, b2))

    def forward(self, x: Tensor) -> Tensor:
        return nn.functional.linear(torch.tanh(nn.functional.linear(x, self.w1, self.b1)), self.w2, self.b2)


def make_problem(
    seed: int,
    *,
    depth: int = 3,
    d: int = 3,
    hidden: int = 5,
    rows: int = 2,
    weight_scale: float = 1.0,
    fraction_bits: Optional[int] = None,
) -> dict:
    """A deterministic problem; weights ~ N(0, 1) * weight_scale / sqrt(fan_in)."""
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape: int, scale: float = 1.0) -> Tensor:
        return torch.randn(*shape, generator=gen, dtype=F64) * scale

    def mlp_weights() -> list[Tensor]:
        return [
            randn(hidden, d, scale=weight_scale / math.sqrt(d)),
            randn(hidden),
            randn(d, hidden, scale=weight_scale / math.sqrt(hidden)),
            randn(d),
        ]

    return {
        "x1": randn(rows, d),
        "x2": randn(rows, d),
        "layers": [(mlp_weights(), mlp_weights()) for _ in range(depth)],
        "grad_y1": randn(rows, d),
        "grad_y2": randn(rows, d),
        "fraction_bits": fraction_bits,
    }


def reference_stack(p: dict) -> ReversibleSequence:
    """The problem's stack as a float64 ReversibleSequence (exact mode if fraction_bits is set)."""
    blocks = [AdditiveCoupling(TanhMLP(*f), TanhMLP(*g)) for f, g in p["layers"]]
    if p["fraction_bits"] is None:
        return ReversibleSequence(blocks)
    return ReversibleSequence(blocks, exact=True, fraction_bits=p["fraction_bits"])


def amplification(p: dict) -> float:
    """prod over the functions of (1 + L), L = ||W2||_inf ||W1||_inf (induced max-norms, tanh
    is 1-Lipschitz): how much a perturbation of a state can grow, in the max-norm, through
    the rest of the stack."""
    a = 1.0
    for fg in p["layers"]:
        for w1, _, w2, _ in fg:
            a *= 1.0 + float(w1.abs().sum(dim=1).max() * w2.abs().sum(dim=1).max())
    return a


def oracle_tolerance(p: dict, expected: Tensor, *, gradient: bool = False) -> float:
    """Norm-relative float64 tolerance for reference vs oracle, a heuristic, not a theorem:
    each MLP evaluation (dot products of length d and h, summed in different orders by
    torch and the oracle) and each addition contribute at most about (d + h + 2) unit
    roundoffs of the magnitudes involved, per layer; gradients go through the stack twice
    (reconstruction, then the backward) and through products of Jacobians, one more
    factor depth. ||ref - oracle||_inf <= 16 u depth (d + h + 2) max(1, ||oracle||_inf)
    (times depth for gradients). The worst-case propagation factor (``amplification``)
    is not included: it is astronomically pessimistic (1e4 for four layers of unit-scale
    weights) while the observed errors are tens of ulps."""
    depth = len(p["layers"])
    h, d = p["layers"][0][0][0].shape
    scale = float(expected.abs().max()) if expected.numel() else 0.0
    return 16 * 2.0**-53 * depth * (d + h + 2) * (depth if gradient else 1) * max(1.0, scale)


def fixed_point_tolerance(p: dict) -> int:
    """Units (of 2^-k) by which the two fixed-point outputs may differ: the float64 MLPs
    (summed in different orders) may round an increment to the neighbouring integer, and a
    unit of difference in a state grows by at most ``amplification`` through the later
    layers: 2 depth A units. Assumes u |increment| 2^k stays well below 1/2 (so at most
    one unit per increment), true for the problems here (k <= 40)."""
    return math.ceil(2 * len(p["layers"]) * amplification(p))


def unit_roundoff(dtype: torch.dtype) -> float:
    """u = 2^-p of round-to-nearest in precision p (Flocq FLX): float32 2^-24, float64 2^-53."""
    return {torch.float32: 2.0**-24, F64: 2.0**-53}[dtype]


def _gamma(n: int, u: float) -> float:
    return n * u / (1 - n * u)


def tanh_mlp_constants(
    w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor, x_max: float, u: float, tanh_ulps: float = 4.0
) -> tuple[float, float]:
    """(L, dF) such that the computed MLP x -> W2 tanh(W1 x + b1) + b2 satisfies
    |f(a) - f(b)|_max <= L |a - b|_max + dF for |a|_max, |b|_max <= x_max: the
    ``vapprox_lipschitz n L dF`` hypothesis of Ojas.Reversible.FloatError.

    L = ||W2||_inf ||W1||_inf (induced max-norms; tanh is 1-Lipschitz) is the exact
    MLP's constant, and dF = 2 eF with eF a forward error bound of the computed MLP
    (FloatError's remark: within eF of an L-Lipschitz function gives dF = 2 eF):
    dot products of length n in any order err by at most gamma_n = n u / (1 - n u)
    times the sum of |terms|, and tanh by ``tanh_ulps`` u (an assumption about the
    library's tanh, not a proof), so
    eF = gamma_(h+1) (||W2||_inf + |b2|_max) + ||W2||_inf (gamma_(d+1) (||W1||_inf x_max + |b1|_max) + tanh_ulps u).
    """

    def inorm(w: Tensor) -> float:
        return float(w.detach().abs().sum(dim=1).max())

    h, d = w1.shape
    n1, n2 = inorm(w1), inorm(w2)
    e_hidden = _gamma(d + 1, u) * (n1 * x_max + float(b1.detach().abs().max())) + tanh_ulps * u
    e_f = _gamma(h + 1, u) * (n2 + float(b2.detach().abs().max())) + n2 * e_hidden
    return n1 * n2, 2 * e_f


def reconstruction_bounds(
    blocks: Sequence[AdditiveCoupling], x: Tensor, constants: Callable[[nn.Module, float], tuple[float, float]]
) -> list[float]:
    """Per block l, a bound on max |reconstructed input - stored input| of block l when the
    float inverse starts from the stored output of the stack (e0 = 0):
    Ojas.Reversible.FloatError.vec_stack_recon_error (with ``vec_stack_recon_error_flx``
    for round-to-nearest in x's precision) applied to the blocks l.. of the stack, i.e.
    the recurrence e_l = K e_(l+1) + delta_l, with

        K = (1 + u)^2 (1 + LF) (1 + LG)                               (recon_factor)
        delta_l = (1 + (1 + u) LF) ((1 + u) (dG + u (X2 + PG)) + u X2)
                  + (1 + u) (dF + u (X1 + PF)) + u X1                   (recon_term)

    at block l's stored input (X1 = |x1|, X2 = |x2|, PF = |f(x2)|, PG = |g(y1)|, max-norms
    over the whole batch: recon_term is monotone). ``constants(fn, x_max)`` gives (L, dF)
    of a function on inputs of max-norm <= x_max (e.g. ``tanh_mlp_constants``); LF, LG, dF,
    dG are the maxima over the blocks. Each row of the batch is one vector of the theorem.
    The bound holds without underflow or overflow (the theorem's rounding model). Bounds
    above 1 (the margin the constants allow for reconstructed inputs) are not established
    and returned as inf, as are those of the blocks before them."""
    u = unit_roundoff(x.dtype)
    acts = []
    h = x
    with torch.no_grad():
        for b in blocks:
            x1, x2 = h.chunk(2, dim=-1)
            fx = b.f(x2)
            y1 = x1 + fx
            gy = b.g(y1)
            acts.append(tuple(float(t.abs().max()) for t in (x1, x2, fx, gy)))
            h = torch.cat([y1, x2 + gy], dim=-1)
    # f and g see stored and reconstructed inputs: the constants are taken for inputs up
    # to the stored maximum plus a margin, so a bound is established only while it stays
    # below the margin (the bounds grow towards the first block; the others are inf).
    margin = 1.0
    x_max = max(max(a) for a in acts) + margin
    lf, df = (max(c) for c in zip(*(constants(b.f, x_max) for b in blocks)))
    lg, dg = (max(c) for c in zip(*(constants(b.g, x_max) for b in blocks)))
    k = (1 + u) ** 2 * (1 + lf) * (1 + lg)
    bounds = [0.0] * len(blocks)
    e = 0.0
    for i in reversed(range(len(blocks))):
        x1, x2, pf, pg = acts[i]
        e = (
            k * e
            + (1 + (1 + u) * lf) * ((1 + u) * (dg + u * (x2 + pg)) + u * x2)
            + (1 + u) * (df + u * (x1 + pf))
            + u * x1
        )
        if e > margin:
            break
        bounds[i] = e
    else:
        return bounds
    return [math.inf] * (i + 1) + bounds[i + 1 :]


def _float_mismatches(p: dict) -> list[str]:
    from ojas_ref.verification.oracle import coupling_stack_oracle

    rev = reference_stack(p)
    oracle = coupling_stack_oracle(p["x1"], p["x2"], p["layers"], grad_y1=p["grad_y1"], grad_y2=p["grad_y2"])
    x = torch.cat([p["x1"], p["x2"]], dim=-1).requires_grad_()
    y = rev(x)
    grads = torch.autograd.grad(y, [x, *rev.parameters()], torch.cat([p["grad_y1"], p["grad_y2"]], dim=-1))
    x_rec = rev.stack_inverse(y.detach())
    d = p["x1"].shape[-1]
    pairs = {
        "y": (y.detach(), torch.cat([oracle["y1"], oracle["y2"]], dim=-1)),
        "x reconstructed": (x_rec, torch.cat([oracle["x1"], oracle["x2"]], dim=-1)),
        "grad x": (grads[0], torch.cat([oracle["grad_x1"], oracle["grad_x2"]], dim=-1)),
    }
    names = ("W1", "b1", "W2", "b2")
    ours = iter(grads[1:])
    for i, (gf, gg) in enumerate(oracle["grad_layers"]):
        for fn, ws in (("f", gf), ("g", gg)):
            for name, w in zip(names, ws):
                pairs[f"grad layers[{i}].{fn}.{name}"] = (next(ours), w)
    problems = []
    for name, (a, e) in pairs.items():
        err = float((a - e).abs().max())
        tol = oracle_tolerance(p, e, gradient=name.startswith("grad"))
        if not err <= tol:
            problems.append(f"{name}: max error {err:.3g} exceeds the tolerance {tol:.3g} (d = {d})")
    return problems


def _fixed_mismatches(p: dict) -> list[str]:
    from ojas_ref.verification.oracle import coupling_stack_oracle

    rev = reference_stack(p)
    s = rev.quantize(torch.cat([p["x1"], p["x2"]], dim=-1))
    s1, s2 = s.chunk(2, dim=-1)
    oracle = coupling_stack_oracle(s1, s2, p["layers"], fraction_bits=p["fraction_bits"])
    y = rev.stack_forward(s, F64)
    y_oracle = torch.cat([oracle["y1"], oracle["y2"]], dim=-1)
    problems = []
    if not torch.equal(rev.stack_inverse(y, F64), s):
        problems.append("reference: the exact inverse does not give back the quantised input")
    if not torch.equal(torch.cat([oracle["x1"], oracle["x2"]], dim=-1), s):
        problems.append("oracle: the exact inverse does not give back the quantised input")
    diff = int((y - y_oracle).abs().max())
    if diff > fixed_point_tolerance(p):
        problems.append(f"y: fixed-point outputs differ by {diff} units (tolerance {fixed_point_tolerance(p)})")
    return problems


def oracle_mismatches(p: dict) -> list[str]:
    """ReversibleSequence (float64) vs the oracle on problem ``p``: what disagrees."""
    return _float_mismatches(p) if p["fraction_bits"] is None else _fixed_mismatches(p)
