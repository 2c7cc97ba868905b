"""Differential check of linear cross-entropy against the oracle extracted from Coq.

Shared by tests/test_linear_cross_entropy.py and ``ojas audit``: a problem is a dict
(x [.., D], w [V, D], b, t, ignore_index, chunks, reduction, eps, lam, cap, grad_out),
``oracle_and_reference`` runs the reference and the oracle on it, and
``oracle_mismatches`` lists what disagrees beyond ``oracle_tolerance``.
"""

from __future__ import annotations

import importlib
import math

import torch

from ojas_ref.linear_cross_entropy import linear_cross_entropy, linear_cross_entropy_forward

lce_module = importlib.import_module("ojas_ref.linear_cross_entropy")

F64 = torch.float64


def make_problem(seed: int, *, shape: tuple[int, ...], D: int, V: int, reduction: str = "mean",
                 ignored: float = 0.3, bias: bool = True, chunks=(3, 7), eps: float = 0.0,
                 lam: float = 0.0, cap: float | None = None, ignore_index: int = -100) -> dict:
    """A deterministic problem: a fraction ``ignored`` of the targets set to ``ignore_index``."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, D, generator=gen, dtype=F64)
    w = torch.randn(V, D, generator=gen, dtype=F64) * 2.0 / math.sqrt(D)
    b = torch.randn(V, generator=gen, dtype=F64) if bias else None
    t = torch.randint(0, V, shape, generator=gen)
    t = torch.where(torch.rand(shape, generator=gen) < ignored, torch.full_like(t, ignore_index), t)
    return {"x": x, "w": w, "b": b, "t": t, "ignore_index": ignore_index, "chunks": chunks,
            "reduction": reduction, "eps": eps, "lam": lam, "cap": cap,
            "grad_out": torch.randn(shape, generator=gen, dtype=F64)}


def oracle_tolerance(unit_roundoff: float, D: int, V: int, expected: torch.Tensor) -> float:
    """Norm-relative tolerance for reference vs oracle, a heuristic, not a theorem.

    Ojas.CrossEntropy.LseError.chunk_lse_error_bound bounds the rounding error of the
    chunked lse of given logits, but not that of the logits' dot products, the loss or
    the gradients, and ojas_ref.error_bounds does not evaluate it; so: a dot product of
    length D and a sum of V exponentials each add at most about (D + V) unit roundoffs
    relative to the magnitude of what they sum, and the loss, lse and gradients are of
    the size of the largest entry, so ||ref - oracle||_inf <= 16 u (D + V + 2)
    max(1, ||oracle||_inf). Observed errors are below 1/10 of it."""
    scale = float(expected.abs().max()) if expected.numel() else 0.0
    return 16 * unit_roundoff * (D + V + 2) * max(1.0, scale)


def oracle_and_reference(p, dtype, device="cpu"):
    """(result, oracle) pairs: loss, lse (kept tokens), grad_input, grad_weight, grad_bias;
    ``linear_cross_entropy`` runs on ``device`` (where the dispatch sends it), the
    lse is the reference's."""
    from ojas_ref.oracle import linear_cross_entropy_oracle

    token_chunk, vocab_chunk = lce_module._check_chunk_size(p["chunks"])
    kw = dict(linear_bias=None if p["b"] is None else p["b"].to(dtype), reduction=p["reduction"],
              ignore_index=p["ignore_index"], label_smoothing=p["eps"], z_loss=p["lam"], softcap=p["cap"])
    x, w = p["x"].to(dtype), p["w"].to(dtype)
    go = p["grad_out"] if p["reduction"] == "none" else torch.tensor(1.7, dtype=F64)
    oracle = linear_cross_entropy_oracle(x.detach(), w.detach(), p["t"], token_chunk=token_chunk,
                                         vocab_chunk=vocab_chunk, grad_output=go, **kw)
    _, lse = linear_cross_entropy_forward(x, w, p["t"], chunk_size=(token_chunk, vocab_chunk),
                                          **{k: v for k, v in kw.items() if k != "reduction"})
    leaves = [t.to(device).requires_grad_() for t in (x, w, kw["linear_bias"]) if t is not None]
    if kw["linear_bias"] is not None:
        kw["linear_bias"] = leaves[2]
    loss = linear_cross_entropy(leaves[0], leaves[1], p["t"].to(device), chunk_size=(token_chunk, vocab_chunk),
                                **kw)
    grads = [g.cpu() for g in torch.autograd.grad(loss, leaves, go.to(device=device, dtype=dtype))]
    loss = loss.cpu()
    kept = p["t"] != p["ignore_index"]
    pairs = {"loss": (loss, oracle["loss"]), "lse": (lse[kept], oracle["lse"][kept])}
    for name, g in zip(("grad_input", "grad_weight", "grad_bias"), grads):
        pairs[name] = (g, oracle[name])
    return pairs


def oracle_mismatches(p: dict, dtype: torch.dtype = torch.float32, device: str = "cpu") -> list[str]:
    """``ojas_ref.linear_cross_entropy`` (inputs cast to ``dtype``, on ``device``) vs
    the oracle on problem ``p``: what disagrees."""
    D, V = p["w"].shape[1], p["w"].shape[0]
    u = {F64: 2.0**-53, torch.float32: 2.0**-24}[dtype]
    problems = []
    for name, (a, e) in oracle_and_reference(p, dtype, device).items():
        err = (a.detach().to(F64) - e).abs().max().item() if a.numel() else 0.0
        if not err <= oracle_tolerance(u, D, V, e):
            problems.append(f"{name}: max error {err:.3g} exceeds the tolerance")
    return problems
