"""Differential check of attention against the oracle extracted from the Coq spec.

Shared by the tests (tests/functional/test_attention_reference.py, test_attention_mutations.py)
and by ``ojas audit``: deterministic cases (``make_case``), the tolerances derived
from the proved error bounds (``forward_tolerance``), and ``oracle_mismatches``,
which runs an implementation and the oracle on a case and lists what disagrees.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Optional

import torch
from torch import Tensor

from ojas_ref.functional._attention_reference import _BLOCK_K
from ojas_ref.functional.attention import attention, attention_forward
from ojas_ref.verification.bounds.common import EXP_ERROR, UNIT_ROUNDOFF
from ojas_ref.verification.bounds.online_softmax import online_softmax_error_bound, softmax_score_perturbation_bound
from ojas_ref.verification.bounds.sums import dot_product_error_bound

F64 = torch.float64


@dataclass(frozen=True)
class Case:
    query: Tensor
    key: Tensor
    value: Tensor
    grad_out: Tensor
    attn_mask: Optional[Tensor] = None
    is_causal: bool = False
    scale: Optional[float] = None
    enable_gqa: bool = False
    window: Optional[int] = None

    def kwargs(self) -> dict:
        """Keyword arguments of ``attention`` (and of the oracle) besides q, k, v."""
        return dict(
            attn_mask=self.attn_mask,
            is_causal=self.is_causal,
            scale=self.scale,
            enable_gqa=self.enable_gqa,
            window=self.window,
        )


MASK_SHAPES = {  # shape of an attn_mask that broadcasts to [B, Hq, Sq, Sk]
    "full": lambda b, h, sq, sk: (b, h, sq, sk),
    "rows": lambda b, h, sq, sk: (sq, sk),
    "batch": lambda b, h, sq, sk: (b, 1, sq, sk),
    "keys": lambda b, h, sq, sk: (b, 1, 1, sk),
}


def make_case(
    seed: int,
    *,
    batch: int = 1,
    kv_heads: int = 1,
    group: int = 1,
    sq: int,
    sk: int,
    e: int,
    ev: int,
    dtype: torch.dtype,
    is_causal: bool = False,
    window: Optional[int] = None,
    mask: Optional[str] = None,
    mask_shape: str = "full",
    dead_rows: tuple[int, ...] = (),
    regime: str = "normal",
    scale: Optional[float] = None,
) -> Case:
    """A deterministic case. ``mask``: None, "bool" or "float" (random, about 25% of the
    keys masked); ``dead_rows``: query rows whose keys are all masked (needs a mask shape
    with an Sq dimension); ``regime``: "normal" (scores ~ N(0, 1)), "peaked" (~ N(0, 16^2)),
    "large" (scores near +-1e4 with O(1) differences within a row)."""
    g = torch.Generator().manual_seed(seed)
    hq = kv_heads * group
    q = torch.randn(batch, hq, sq, e, generator=g, dtype=F64)
    k = torch.randn(batch, kv_heads, sk, e, generator=g, dtype=F64)
    v = torch.randn(batch, kv_heads, sk, ev, generator=g, dtype=F64)
    do = torch.randn(batch, hq, sq, ev, generator=g, dtype=F64)
    s = 1.0 / math.sqrt(e) if scale is None else scale
    if regime == "peaked":
        q, k = 4 * q, 4 * k
    elif regime == "large":
        # A shared coordinate puts every score of row i near sign_i * 1e4.
        c = math.sqrt(1e4 / abs(s))
        sign = torch.randint(0, 2, (batch, hq, sq), generator=g, dtype=F64) * 2 - 1
        q[..., 0] = c * sign
        k[..., 0] = c
    attn_mask = None
    if mask is not None:
        shape = MASK_SHAPES[mask_shape](batch, hq, sq, sk)
        keep = torch.rand(shape, generator=g) >= 0.25
        if dead_rows:
            keep[..., list(dead_rows), :] = False
        if mask == "bool":
            attn_mask = keep
        else:
            attn_mask = (2 * torch.randn(shape, generator=g, dtype=F64)).masked_fill(~keep, -math.inf).to(dtype)
    return Case(q.to(dtype), k.to(dtype), v.to(dtype), do.to(dtype), attn_mask, is_causal, scale, group > 1, window)


def structural_visibility(case: Case) -> Tensor:
    """[Sq, Sk] bool: ``causal`` and ``in_window`` of rocq/Attention/OnlineSoftmax.v."""
    sq, sk = case.query.shape[2], case.key.shape[2]
    i = torch.arange(sq)[:, None]
    j = torch.arange(sk)[None, :]
    visible = torch.ones(sq, sk, dtype=torch.bool)
    if case.is_causal:
        visible &= j <= i
    if case.window is not None:
        visible &= (i - j).abs() < case.window
    return visible


def full_visibility(case: Case) -> Tensor:
    """[B, Hq, Sq, Sk] bool: every mask of the case combined (Coq ``visibility``)."""
    b, hq, sq, _ = case.query.shape
    visible = structural_visibility(case).expand(b, hq, sq, -1)
    m = case.attn_mask
    if m is not None:
        visible = visible & (m if m.dtype == torch.bool else ~torch.isneginf(m))
    return visible


def dead_rows_of(case: Case) -> Tensor:
    """[B, Hq, Sq] bool: the query rows with no visible key."""
    return ~full_visibility(case).any(-1)


def assert_normwise_close(actual: Tensor, expected: Tensor, rtol: float, what: str) -> None:
    """max |actual - expected| <= rtol * max(max |expected|, 1)."""
    err = (actual.to(F64) - expected.to(F64)).abs().max().item() if actual.numel() else 0.0
    ref = max(expected.to(F64).abs().max().item() if expected.numel() else 0.0, 1.0)
    assert err <= rtol * ref, f"{what}: max error {err:.3g} > {rtol:.1g} * {ref:.3g}"


def score_magnitude(case: Case) -> tuple[float, Tensor]:
    """The scale and A_i = max_j sum_c |q_ic k_jc| for every query row, [B, Hq, Sq]."""
    q, k = case.query.to(F64), case.key.to(F64)
    b, hq, sq, e = q.shape
    abs_qk = q.abs().view(b, k.shape[1], -1, e) @ k.abs().transpose(-1, -2)  # [B, Hkv, G*Sq, Sk]
    scale = 1.0 / math.sqrt(e) if case.scale is None else case.scale
    return scale, abs_qk.amax(-1).view(b, hq, sq)


def forward_tolerance(
    case: Case, oracle_out: Tensor, *, score_roundings: int = 2, weight_rounding: float = 0.0
) -> Tensor:
    """Elementwise bound on |out - oracle_out| for the reference run on ``case``
    (float32 computation) against the float64 oracle, shape [B, Hq, Sq, Ev].

    By the triangle inequality through the exact attention out* of the inputs, it is the
    sum of the two implementations' error bounds and of the output rounding:

    * computed scores: the score of row i is fl(fl(scale) * fl(q_i . k_j)). The dot
      product errs by at most gamma_E * sum_c |q_ic k_jc| (``dot_product_error_bound``),
      rounding scale and the product add (2u + u^2)(1 + gamma_E) relative. So every score
      moves by at most delta_i = |scale| * A_i * (gamma_E + (2u + u^2)(1 + gamma_E)),
      A_i = max_j sum_c |q_ic k_jc|, and softmax with scores moved by <= delta_i differs
      from the exact one by <= V_c * (exp(2 delta_i) - 1) in coordinate c
      (``softmax_score_perturbation_bound``; Ojas.Attention.ScorePerturbation,
      ``softmax_output_perturbation``), V_c = max_j |v_jc| over the head's keys.
    * the streamed recurrence on those scores: <= V_c * ``online_softmax_error_bound``(Sk,
      u, u_exp) (Ojas.Attention.StreamError, ``stream_row_error_bound``; masked keys
      are keys of weight 0, so n = Sk), u = 2^-24 for the float32 computation, u_exp =
      ``bounds.common.EXP_ERROR`` (see there). The theorem is about left-to-right sums; torch sums a
      tile in another order (and fuses multiply-adds), which gives no term more roundings
      than the proof counts. The model has no underflow: the float32 weights that
      underflow (exp(s - m) < 2^-126) err by at most 2^-149 each, with Z >= 1 a change
      of out below Sk * 2^-148 * V, far inside this bound.
    * the oracle itself: the same two terms with u = 2^-53 and its exp error.
    * output rounding: the float32 result is rounded to the output dtype, relative
      error u_out = 2^-8 for bfloat16 (0 for float32), applied to
      |out| <= |oracle_out| + (the bounds above).
    * ``score_roundings``: roundings after the dot product (2 for the reference: scale
      and the product; 3 for the Triton kernel, which also folds log2(e) into the
      scale and calls exp2): relative score error (1 + u)^k - 1 instead of 2u + u^2.
    * ``weight_rounding``: the unit roundoff of the weights P when they are rounded
      before P @ V (the Triton kernel rounds P to bfloat16/float16 for the matrix
      unit): each numerator weight moves by at most that relative amount while l keeps
      the unrounded sum, so out moves by at most ``weight_rounding`` * V_c.
    """
    b, hq, _, e = case.query.shape
    hkv, sk = case.key.shape[1], case.key.shape[2]
    scale, a = score_magnitude(case)
    # V_c = max_j |v_jc| of the head, per value coordinate c (the theorems are per coordinate)
    v_max = case.value.to(F64).abs().amax(dim=2).repeat_interleave(hq // hkv, dim=1).unsqueeze(2)  # [B, Hq, 1, Ev]

    def implementation_bound(u: float, u_exp: float) -> Tensor:
        gamma = dot_product_error_bound(e, u)
        delta = abs(scale) * a * (gamma + ((1 + u) ** score_roundings - 1) * (1 + gamma))
        perturbation = torch.tensor(
            [softmax_score_perturbation_bound(d) for d in delta.flatten().tolist()], dtype=F64
        ).view_as(delta)
        return v_max * (online_softmax_error_bound(sk, u, u_exp) + perturbation).unsqueeze(-1)

    bound = implementation_bound(UNIT_ROUNDOFF[torch.float32], EXP_ERROR[torch.float32]) + implementation_bound(
        UNIT_ROUNDOFF[F64], EXP_ERROR[F64]
    )
    u_out = UNIT_ROUNDOFF[case.query.dtype] if case.query.dtype != torch.float32 else 0.0
    bound = bound + weight_rounding * v_max
    return bound + u_out * (oracle_out.abs() + bound)


def lse_tolerance(case: Case, oracle_lse: Tensor) -> Tensor:
    """Bound used for |lse - oracle_lse|. Not a Coq theorem (none covers lse): by hand,
    lse is 1-Lipschitz in the max-norm of the scores (the delta of ``forward_tolerance``,
    bounded by A_i * scale * (E + 3) * u); the sum l of Sk positive terms, rescaled once
    per tile, has relative error <= about (Sk + 2 * tiles) * (u + u_exp), which moves
    ln l by as much; ln and the final addition add a few u * |lse|. Doubled as margin."""
    u, u_exp = 2.0**-24, EXP_ERROR[torch.float32]
    e, sk = case.query.shape[3], case.key.shape[2]
    scale, a = score_magnitude(case)
    tiles = math.ceil(sk / _BLOCK_K)
    hand = abs(scale) * a * (e + 3) * u + (sk + 2 * tiles + 2) * (u + u_exp) + 4 * u * oracle_lse.abs()
    return 2 * hand


def grad_rtol(case: Case) -> float:
    """Norm-relative tolerance of the gradients. NOT proved (no Coq bound on the backward
    pass): 4 times a relative forward error estimate (the softmax perturbation of the worst
    score error, plus Sk roundings, in float32), plus 4 u_io for the gradients' rounding to
    the input dtype."""
    e, sk = case.query.shape[3], case.key.shape[2]
    scale, a = score_magnitude(case)
    u = UNIT_ROUNDOFF[torch.float32]
    forward_rel = softmax_score_perturbation_bound(abs(scale) * a.max().item() * (e + 3) * u) + (sk + 8) * u
    return 4 * forward_rel + 4 * UNIT_ROUNDOFF[case.query.dtype]


def _on(case: Case, device: torch.device) -> Case:
    """``case`` with its tensors on ``device``."""
    fields = ("query", "key", "value", "grad_out", "attn_mask")
    return replace(case, **{f: getattr(case, f).to(device) for f in fields if getattr(case, f) is not None})


def _run_forward(case: Case, impl: str) -> tuple[Tensor, Tensor]:
    """(out, lse) of the implementation ``impl`` ("reference" or "triton") on ``case``."""
    if impl == "reference":
        return attention_forward(case.query, case.key, case.value, **case.kwargs())
    from ojas_kernels.attention import flash_attention_forward

    scale = 1.0 / math.sqrt(case.query.shape[-1]) if case.scale is None else case.scale
    return flash_attention_forward(
        case.query, case.key, case.value, case.is_causal, scale, case.window, attn_mask=case.attn_mask
    )


def oracle_mismatches(case: Case, impl: str = "reference") -> list[str]:
    """Run an implementation (``impl``: "reference" or "triton") and the oracle on
    ``case``; return what disagrees (empty = agree).

    Forward: |out - oracle| <= ``forward_tolerance``, lse within ``lse_tolerance`` and -inf
    exactly on the oracle's fully masked rows, zeros there. Backward: dQ, dK, dV within
    ``grad_rtol`` (norm-relative), exactly zero dQ on fully masked rows."""
    from ojas_ref.verification.oracle import attention_oracle

    device = case.query.device  # where the implementation runs; the comparison is on the CPU
    case = _on(case, torch.device("cpu"))
    ref = attention_oracle(
        case.query, case.key, case.value, grad_out=case.grad_out, block_size=_BLOCK_K, **case.kwargs()
    )
    out, lse = (t.cpu() for t in _run_forward(_on(case, device), impl))
    problems = []
    dead = torch.isneginf(ref["lse"])
    kernel_low_precision = impl == "triton" and case.query.dtype in (torch.bfloat16, torch.float16)
    tolerance = forward_tolerance(
        case,
        ref["out"],
        score_roundings=2 if impl == "reference" else 3,
        weight_rounding=UNIT_ROUNDOFF[case.query.dtype] if kernel_low_precision else 0.0,
    )
    excess = (out.to(F64) - ref["out"]).abs() - tolerance
    if not (excess <= 0).all():
        bad = excess.nan_to_num(nan=math.inf)
        problems.append(
            f"out: exceeds the error bound by {bad.max().item():.3g} "
            f"at {tuple(torch.nonzero(bad == bad.max())[0].tolist())}"
        )
    if not torch.equal(torch.isneginf(lse), dead):
        problems.append("lse: -inf rows differ from the oracle's fully masked rows")
    elif not torch.all(out[dead] == 0):
        problems.append("out: fully masked rows are not zero")
    else:
        diff = (lse.to(F64) - ref["lse"]).masked_fill(dead, 0.0).abs()
        if not (diff <= lse_tolerance(case, ref["lse"])).all():
            problems.append(f"lse: max error {diff.nan_to_num(nan=math.inf).max().item():.3g} exceeds the tolerance")
    on_device = _on(case, device)
    xs = [t.detach().clone().requires_grad_() for t in (on_device.query, on_device.key, on_device.value)]
    grads = [
        g.cpu() for g in torch.autograd.grad(attention(*xs, impl=impl, **on_device.kwargs()), xs, on_device.grad_out)
    ]
    rtol = grad_rtol(case)
    for name, g in zip(("grad_query", "grad_key", "grad_value"), grads):
        try:
            assert_normwise_close(g, ref[name], rtol, name)
        except AssertionError as err:
            problems.append(str(err))
    if not torch.all(grads[0][dead] == 0):
        problems.append("grad_query: fully masked rows are not zero")
    return problems
