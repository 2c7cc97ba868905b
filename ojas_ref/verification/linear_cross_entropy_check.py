"""Differential check of linear cross-entropy against the oracle extracted from Coq.

Shared by tests/functional/test_linear_cross_entropy.py and ``ojas audit``: a problem is a dict
(x [.., D], w [V, D], b, t, ignore_index, chunks, reduction, eps, lam, cap, grad_out),
``oracle_and_reference`` runs the reference and the oracle on it, and
``oracle_mismatches`` lists what disagrees beyond the tolerances: the proved
``forward_tolerances`` for the loss and lse (without softcap), the heuristic
``oracle_tolerance`` for the gradients (and for the loss and lse with softcap).
``autocast_mismatches`` (tests of the reference and of the kernel): the call under
``torch.autocast`` against torch's autocast rule for F.linear.
"""

from __future__ import annotations

import importlib
import math

import torch
import torch.nn.functional as F

from ojas_ref.functional.linear_cross_entropy import linear_cross_entropy, linear_cross_entropy_forward
from ojas_ref.verification.bounds.common import EXP_ERROR, UNIT_ROUNDOFF
from ojas_ref.verification.bounds.linear_cross_entropy import (
    linear_cross_entropy_reduction_error_bound,
    linear_cross_entropy_token_error_bound,
)

linear_cross_entropy_module = importlib.import_module("ojas_ref.functional.linear_cross_entropy")

F64 = torch.float64


def make_problem(
    seed: int,
    *,
    shape: tuple[int, ...],
    D: int,
    V: int,
    reduction: str = "mean",
    ignored: float = 0.3,
    bias: bool = True,
    chunks=(3, 7),
    eps: float = 0.0,
    lam: float = 0.0,
    cap: float | None = None,
    ignore_index: int = -100,
) -> dict:
    """A deterministic problem: a fraction ``ignored`` of the targets set to ``ignore_index``."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, D, generator=gen, dtype=F64)
    w = torch.randn(V, D, generator=gen, dtype=F64) * 2.0 / math.sqrt(D)
    b = torch.randn(V, generator=gen, dtype=F64) if bias else None
    t = torch.randint(0, V, shape, generator=gen)
    t = torch.where(torch.rand(shape, generator=gen) < ignored, torch.full_like(t, ignore_index), t)
    return {
        "x": x,
        "w": w,
        "b": b,
        "t": t,
        "ignore_index": ignore_index,
        "chunks": chunks,
        "reduction": reduction,
        "eps": eps,
        "lam": lam,
        "cap": cap,
        "grad_out": torch.randn(shape, generator=gen, dtype=F64),
    }


def oracle_tolerance(unit_roundoff: float, D: int, V: int, expected: torch.Tensor) -> float:
    """Norm-relative tolerance for reference vs oracle: a HEURISTIC, not a theorem, used
    for the gradients (no rounding-error bound of the backward is proved) and for the
    loss and lse with softcap (``forward_tolerances`` does not cover the softcap).

    A dot product of length D and a sum of V exponentials each add at most about
    (D + V) unit roundoffs relative to the magnitude of what they sum, and the
    gradients are of the size of the largest entry, so ||ref - oracle||_inf <=
    16 u (D + V + 2) max(1, ||oracle||_inf). Observed errors are below 1/10 of it."""
    scale = float(expected.abs().max()) if expected.numel() else 0.0
    return 16 * unit_roundoff * (D + V + 2) * max(1.0, scale)


def _log_error(dtype: torch.dtype, V: int) -> float:
    """Assumed absolute error of the computed ln on the lse sum l in [1 - beta, V (1 + beta)]:
    ``EXP_ERROR`` (the assumed relative error of exp and ln, see bounds.common) times
    max |ln l| <= 1 + ln V. An assumption, like ``EXP_ERROR``."""
    return EXP_ERROR[dtype] * (1.0 + math.log(V))


def _forward_bounds(p: dict, dtype: torch.dtype, u: float) -> dict[str, torch.Tensor]:
    """Bounds on |computed - exact| of "loss" (as the reference returns it) and "lse"
    (kept tokens) when the whole forward runs in the rounding model with unit roundoff
    ``u`` (``dtype``'s exp/ln errors). Per token: Ojas.LinearCrossEntropy.LossError.
    token_forward_error_bound (``linear_cross_entropy_token_error_bound``); ignored
    tokens have loss 0 exactly. "sum" / "mean": ``linear_cross_entropy_reduction_error_bound``
    (proved lemmas composed by hand, not a theorem about ``ce_forward``)."""
    D, V = p["w"].shape[1], p["w"].shape[0]
    x = p["x"].to(dtype).to(F64).reshape(-1, D)
    t = p["t"].reshape(-1)
    kept = t != p["ignore_index"]
    b = None if p["b"] is None else p["b"].to(dtype)
    loss_b, lse_b, loss_mag = linear_cross_entropy_token_error_bound(
        x[kept],
        p["w"].to(dtype),
        b,
        t[kept],
        label_smoothing=p["eps"],
        z_loss=p["lam"],
        unit_roundoff=u,
        exp_error=EXP_ERROR[dtype],
        log_error=_log_error(dtype, V),
    )
    per_token = torch.zeros(t.shape, dtype=F64)
    per_token[kept] = loss_b
    if p["reduction"] == "none":
        loss = per_token.reshape(p["t"].shape)
    else:
        loss = torch.tensor(
            linear_cross_entropy_reduction_error_bound(loss_b, loss_mag, t.numel(), p["reduction"], u), dtype=F64
        )
    return {"loss": loss, "lse": lse_b}


def forward_tolerances(p: dict, dtype: torch.dtype) -> dict[str, torch.Tensor] | None:
    """Elementwise tolerances for reference (``dtype``) vs oracle (float64) on "loss"
    and "lse": the proved forward bound of each against the exact result, summed
    (|ref - oracle| <= |ref - exact| + |exact - oracle|). ``None`` with softcap (not
    covered by Ojas.LinearCrossEntropy.LossError.token_forward_error_bound). The reference's
    matmul and torch sums are not left to right: see
    ``linear_cross_entropy_token_error_bound``."""
    if p["cap"] is not None:
        return None
    ref, orc = _forward_bounds(p, dtype, UNIT_ROUNDOFF[dtype]), _forward_bounds(p, F64, UNIT_ROUNDOFF[F64])
    return {name: ref[name] + orc[name] for name in ref}


def oracle_and_reference(p, dtype, device="cpu"):
    """(result, oracle) pairs: loss, lse (kept tokens), grad_input, grad_weight, grad_bias;
    ``linear_cross_entropy`` runs on ``device`` (where the dispatch sends it), the
    lse is the reference's."""
    from ojas_ref.verification.oracle import linear_cross_entropy_oracle

    token_chunk, vocab_chunk = linear_cross_entropy_module._check_chunk_size(p["chunks"])
    kw = dict(
        linear_bias=None if p["b"] is None else p["b"].to(dtype),
        reduction=p["reduction"],
        ignore_index=p["ignore_index"],
        label_smoothing=p["eps"],
        z_loss=p["lam"],
        softcap=p["cap"],
    )
    x, w = p["x"].to(dtype), p["w"].to(dtype)
    go = p["grad_out"] if p["reduction"] == "none" else torch.tensor(1.7, dtype=F64)
    oracle = linear_cross_entropy_oracle(
        x.detach(), w.detach(), p["t"], token_chunk=token_chunk, vocab_chunk=vocab_chunk, grad_output=go, **kw
    )
    _, lse = linear_cross_entropy_forward(
        x, w, p["t"], chunk_size=(token_chunk, vocab_chunk), **{k: v for k, v in kw.items() if k != "reduction"}
    )
    leaves = [t.detach().to(device).requires_grad_() for t in (x, w, kw["linear_bias"]) if t is not None]
    if kw["linear_bias"] is not None:
        kw["linear_bias"] = leaves[2]
    loss = linear_cross_entropy(leaves[0], leaves[1], p["t"].to(device), chunk_size=(token_chunk, vocab_chunk), **kw)
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
    proved = forward_tolerances(p, dtype) or {}
    problems = []
    for name, (a, e) in oracle_and_reference(p, dtype, device).items():
        diff = (a.detach().to(F64) - e).abs()
        if name in proved:
            bad = ~(diff <= proved[name])
            if bad.any():
                i = int(bad.reshape(-1).nonzero()[0])
                problems.append(
                    f"{name}: error {float(diff.reshape(-1)[i]):.3g} exceeds the proved bound "
                    f"{float(proved[name].reshape(-1)[i]):.3g}"
                )
        else:
            err = diff.max().item() if diff.numel() else 0.0
            if not err <= oracle_tolerance(u, D, V, e):
                problems.append(f"{name}: max error {err:.3g} exceeds the (heuristic) tolerance")
    return problems


def autocast_runs(impl: str, reduction: str = "mean", device: str = "cpu") -> dict[str, list[torch.Tensor]]:
    """Loss and gradients (input, linear_weight, linear_bias) of a problem with a bfloat16
    input and a float32 weight and bias, three ways:

    * "autocast": ``linear_cross_entropy(impl=impl)`` under ``torch.autocast(device,
      torch.bfloat16)``, its backward inside the autocast region too;
    * "cast": the same with the weight and bias cast to bfloat16 by hand, autocast off
      (what autocast's rule for F.linear makes of the call);
    * "torch": ``F.cross_entropy(F.linear(input, weight, bias).float(), target)`` under
      autocast (Hugging Face's loss), backward outside.

    grad_output: the problem's for "none", 1.7 otherwise (float32). On ``device`` (where
    the dispatch sends ``impl``)."""
    p = make_problem(21, shape=(3, 5), D=16, V=37, reduction=reduction, ignored=0.2)
    t = p["t"].to(device)
    go = (p["grad_out"] if reduction == "none" else torch.tensor(1.7)).to(device=device, dtype=torch.float32)
    kw = dict(reduction=reduction, ignore_index=p["ignore_index"])
    runs = {}
    for way in ("autocast", "cast", "torch"):
        leaves = [
            p["x"].to(device=device, dtype=torch.bfloat16).requires_grad_(),
            p["w"].to(device=device, dtype=torch.float32).requires_grad_(),
            p["b"].to(device=device, dtype=torch.float32).requires_grad_(),
        ]
        x, w, b = leaves
        if way == "cast":
            loss = linear_cross_entropy(x, w.to(torch.bfloat16), t, linear_bias=b.to(torch.bfloat16), impl=impl, **kw)
            grads = torch.autograd.grad(loss, leaves, go)
        elif way == "autocast":
            with torch.autocast(device, dtype=torch.bfloat16):
                loss = linear_cross_entropy(x, w, t, linear_bias=b, impl=impl, **kw)
                grads = torch.autograd.grad(loss, leaves, go)
        else:
            with torch.autocast(device, dtype=torch.bfloat16):
                z = F.linear(x, w, b).float()
            loss = F.cross_entropy(z.flatten(0, -2), t.reshape(-1), **kw)
            loss = loss.view(t.shape) if reduction == "none" else loss
            grads = torch.autograd.grad(loss, leaves, go)
        runs[way] = [loss.detach(), *grads]
    return runs


def _norm_rel(a: torch.Tensor, e: torch.Tensor) -> float:
    return float((a.to(F64) - e.to(F64)).norm() / e.to(F64).norm())


def autocast_mismatches(impl: str, reduction: str = "mean", device: str = "cpu") -> list[str]:
    """What of :func:`autocast_runs` disagrees with torch's autocast rule for F.linear: the
    loss must be float32 and the gradients in each tensor's own dtype (bf16, float32,
    float32), bit for bit the "cast" run (the computation runs with autocast disabled,
    its backward too although called inside the autocast region), and close to "torch".
    Tolerance against "torch": its logits are rounded to bf16 (unit roundoff u = 2^-8, of
    |z| <= 6 here) and its G before its bf16 products, so each result differs by a few u
    relative to its norm: 2e-2 (5u; observed <= 7e-3)."""
    runs = autocast_runs(impl, reduction, device)
    got = runs["autocast"]
    names = ("loss", "grad_input", "grad_weight", "grad_bias")
    problems = []
    dtypes = [g.dtype for g in got]
    if dtypes != [torch.float32, torch.bfloat16, torch.float32, torch.float32]:
        problems.append(f"dtypes {dtypes}")
    for name, a, c, e in zip(names, got, runs["cast"], runs["torch"]):
        if not torch.equal(a, c):
            problems.append(f"{name}: under autocast not the explicit cast's")
        if not _norm_rel(a, e) <= 2e-2:
            problems.append(f"{name}: relative error {_norm_rel(a, e):.3g} to torch's autocast F.linear above 2e-2")
    return problems
