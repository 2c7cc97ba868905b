"""Per-pair bounds of the attention scores' error, from the kernels' dot model run on the data.

The attention theorems take the premise (``Ojas.Attention.Float.ForwardError.score2_with_error``'s
conclusion; per item in ``Ojas.Attention.Float.RunningAccError``'s ``dv_error_acc_running``,
``dk_error_acc_running``, ``dq_error_acc_running``)::

    |score2_with A_ dotf c q k * ln 2 - scale * dot_R q k| <= delta,

``score2_with A_ dotf c q k = rnd (dotf q k * c)``: the kernel's float32 dot ``D`` of the query and key
rows, times the float32 ``c = qk_scale = float32(scale log2 e)``, rounded to float32.
:func:`score_error_block` returns, for every visible pair of a block of query rows, a certified upper
bound of the left side: the minimum of

* the ACTUAL error of the model, ``s2 = rnd(D c)`` computed exactly as the kernel computes it (``D``:
  :func:`model_dots`, the H100's tensor-core blocks of ``TensorCoreSum.tc_acc_op`` / ``tc_dot_op`` for
  16-bit inputs, Triton's 3xTF32 ``Tf32Product.tf32x3_dot_tc_op`` for float32), then
  ``|s2 ln 2 - scale q.k|`` evaluated in float64 with certified margins (:func:`_model_error`);
* the dot model's worst case at the pair's own ``P = sum_e |q_e k_e|``: ``score_delta_de scale uc P
  (g_rel P + g_abs)`` (``score2_with_error``; :func:`_worst_case`).

Both bound the same quantity, so their minimum does. The model's equality with the Coq definitions
(``tf32x3_dot_tc_op``, ``tc_dot_op`` at the identified ``tc_align_op`` / output rounding) is TESTED,
not proved: :func:`model_dots` is checked bit for bit against
:func:`~ojas_ref.verification.kernel_schedule.tf32x3_dot` / :func:`~ojas_ref.verification.kernel_schedule.accumulate`
(``tests/verification/test_score_errors.py``), which match the H100's kernels bit for bit
(``tests/verification/test_kernel_schedule*.py`` on an H100). Not modelled: subnormal products
(the emulation's premise, as ``kernel_schedule``'s), a ``Tf32x3Dot`` without tensor-core blocks and the
interpreter's "fp32" dots (numpy's float32 matmul on the kernels' tiles): for those only the worst case.
The float64 evaluation's premises are :mod:`~ojas_ref.verification.bounds.certified`'s.

Which operand is the dot's first matters for 3xTF32 (``lo a . hi b`` first): the forward and the dQ
kernel compute ``dot(q, k^T)`` (``operands="qk"``), the dK/dV kernel ``dot(k, q^T)`` (``"kq"``; the
theorems' ``dotf`` is any function, here ``fun q k => tf32x3_dot_tc_op k q``); ``"both"`` takes the
larger of the two bounds.
"""

from __future__ import annotations

import math
from fractions import Fraction

import torch

from ojas_ref.verification.bounds import certified as cb
from ojas_ref.verification.bounds.attention import _QK_SCALE_ERROR, DotModel, TensorCoreDot, Tf32x3Dot
from ojas_ref.verification.bounds.attention import _dot_model, dot_error_constants
from ojas_ref.verification.bounds.common import _FP32_ETA, _FP32_U, _float_up
from ojas_ref.verification.device_premises import _round_bits

__all__ = [
    "OPERANDS",
    "model_dots",
    "model_dots_all",
    "model_scores",
    "model_scores_all",
    "score_error_block",
    "score_errors",
]

F32, F64 = torch.float32, torch.float64
#: the kernels' log2(e) (``ojas_kernels.attention_args._LOG2E``): ``qk_scale = float32(scale * LOG2E)``
LOG2E = 1.4426950408889634
#: float64 ln 2 and a bound of its distance to ln 2 = 0.693147180559945309417232121458...
_LN2 = 0.6931471805599453
_LN2_ERR = Fraction(232, 10**19)  # ln 2 - _LN2 = 2.31904...e-17
OPERANDS = ("qk", "kq", "both")
_CAUSAL_ROWS = 256  # query rows per chunk under a causal mask (the keys after a chunk's last row are skipped)
_NONE = -(2**20)  # the exponent given to a zero operand: below every sum of real ones


def _pairs(device: torch.device) -> int:
    """Pairs per emulation chunk: its ``[pairs, block]`` float64 temporaries are 16 MiB on the CPU, 256 MiB on
    a GPU (fewer, larger launches)."""
    return 2**22 if device.type == "cuda" else 2**18


def _exponent(x: torch.Tensor) -> torch.Tensor:
    """int32 ``floor(log2 |x|)`` of float64 ``x``, ``_NONE`` where ``x == 0``."""
    e = torch.frexp(x).exponent.to(torch.int32) - 1
    return e.masked_fill(x == 0, _NONE)


def _pow2(e: torch.Tensor) -> torch.Tensor:
    """float64 ``2^e`` for int ``e`` in [-1022, 1023], exactly (built from its bits)."""
    return ((e.to(torch.int64) + 1023) << 52).view(F64)


def _round32(x: torch.Tensor, out: str) -> torch.Tensor:
    """float64 ``x`` (exact) rounded to float32 to nearest even or toward zero, as float64."""
    r32 = x.to(F32)
    r = r32.to(F64)
    if out == "truncate":
        r = torch.where(r.abs() > x.abs(), torch.nextafter(r32, torch.zeros((), dtype=F32, device=r.device)).to(F64), r)
    return r


def _chain(model: TensorCoreDot | Tf32x3Dot, groups: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """``tc_acc_op`` from 0 over the blocks of every group in order: a group ``(x [R, K], y [S, K])`` float64
    (float32 / TF32 / bfloat16 values: products exact) is ``chunk block (combine x_r y_s)`` for every
    pair ``(r, s)``; float64 [R, S] holding the float32 results."""
    acc = torch.zeros(groups[0][0].shape[0], groups[0][1].shape[0], dtype=F64, device=groups[0][0].device)
    blk = model.block
    for x, y in groups:
        ex, ey = _exponent(x)[:, None], _exponent(y)[None]
        x, y = x[:, None], y[None]
        for k0 in range(0, x.shape[-1], blk):
            t = x[..., k0 : k0 + blk] * y[..., k0 : k0 + blk]
            if model.ref == "operands":
                ref = (ex[..., k0 : k0 + blk] + ey[..., k0 : k0 + blk]).amax(-1)
            else:
                ref = _exponent(t).amax(-1)
            big = torch.maximum(ref, _exponent(acc))
            q = (big - model.bits + 1).clamp(-1000, 1000)  # pairs with no nonzero term: zeroed below
            down = _pow2(-q)  # once for the terms and the accumulator
            total = (t.mul_(down[..., None]).trunc_().sum(-1) + torch.trunc(acc * down)) * _pow2(q)
            acc = torch.where(big > _NONE // 2, _round32(total, model.out), 0.0)
    return acc


def model_dots(a: torch.Tensor, b: torch.Tensor, dot: DotModel) -> torch.Tensor:
    """float64 [..., R, S] holding the float32 dots ``dotf(a_r, b_s)`` of ``dot``'s model (a [..., R, E],
    b [..., S, E], ``a`` the dot's FIRST operand): a :class:`TensorCoreDot` ``tc_dot_op`` (the products of
    the operands' values, blocks of ``block``), a :class:`Tf32x3Dot` with blocks ``tf32x3_dot_tc_op``
    (high parts ``rna`` to 11 bits, low parts read by truncation, ``lo a . hi b``, ``hi a . lo b``,
    ``hi a . hi b`` chained from 0, then ``+ 0``). Computed in chunks of pairs. ``ValueError`` for
    "fp32" or a model without blocks (not emulated)."""
    model = _dot_model(dot)
    if model == "fp32" or model.block is None:
        raise ValueError(f"dot: only the tensor-core models are emulated, got {dot!r}")
    a32, b32 = a.to(F32), b.to(F32)
    if isinstance(model, Tf32x3Dot):
        ha, hb = _round_bits(a32, 11, "rna"), _round_bits(b32, 11, "rna")
        la, lb = _round_bits(a32 - ha, 11, "trunc"), _round_bits(b32 - hb, 11, "trunc")
        parts = [(la, hb), (ha, lb), (ha, hb)]
    else:
        parts = [(a32, b32)]
    lead = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    (r, e), s = a.shape[-2:], b.shape[-2]
    parts = [(x.expand(*lead, r, e).reshape(-1, r, e), y.expand(*lead, s, e).reshape(-1, s, e)) for x, y in parts]
    out = torch.empty(math.prod(lead), r, s, dtype=F64, device=a.device)
    rows = max(1, _pairs(a.device) // max(s, 1))
    for n in range(out.shape[0]):
        for r0 in range(0, r, rows):
            groups = [(x[n, r0 : r0 + rows].to(F64), y[n].to(F64)) for x, y in parts]
            out[n, r0 : r0 + rows] = _chain(model, groups)
    return out.view(*lead, r, s)


def model_scores(a: torch.Tensor, b: torch.Tensor, scale: float, dot: DotModel) -> torch.Tensor:
    """float64 [..., R, S] holding the kernel's float32 base-2 scores ``score2_with A_ dotf c a b =
    rnd(D * c)``, ``D`` = :func:`model_dots` and ``c = float32(scale * LOG2E)`` (the kernel's float32
    ``qk_scale`` argument), the product in float32."""
    c = torch.tensor(scale * LOG2E, dtype=F32, device=a.device)
    return (model_dots(a, b, dot).to(F32) * c).to(F64)


def _worst_case(abs_sum: torch.Tensor, dot: DotModel, head_dim: int, scale: float) -> torch.Tensor:
    """``score_delta_de scale uc P (g_rel P + g_abs)`` at ``P = abs_sum`` (an upper bound of the pair's
    ``sum_e |q_e k_e|``), rounded up: ``alpha P + beta`` with ``alpha = s ((1 + g_rel)(u (1 + uc) + uc) +
    g_rel)``, ``beta = s g_abs (1 + u (1 + uc) + uc) + ea`` (``s = |scale|``), linear in ``P``."""
    u, ea, uc, sc = Fraction(_FP32_U), Fraction(_FP32_ETA), Fraction(_QK_SCALE_ERROR), abs(Fraction(scale))
    g_rel, g_abs = dot_error_constants(dot, head_dim)
    k = u * (1 + uc) + uc
    alpha, beta = sc * ((1 + g_rel) * k + g_rel), sc * g_abs * (1 + k) + ea
    return cb.add_upper(cb.scale_upper(abs_sum, alpha), _float_up(beta))


def _model_error(
    s2: torch.Tensor, exact: torch.Tensor, abs_sum: torch.Tensor, head_dim: int, scale: float
) -> torch.Tensor:
    """A certified upper bound of ``|s2 ln 2 - scale q.k|`` from the float64 ``exact = q @ k^T`` (a dot of
    ``head_dim`` products, within ``dot_error(abs_sum)`` of ``q.k``): with ``a~ = fl(s2 L)`` (``L`` the
    float64 ln 2, ``|ln 2 - L| <= 2.32e-17``), ``b~ = fl(scale exact)`` and ``t~ = fl(a~ - b~)``, each
    within ``u |result| + eta`` of its exact operation: ``|t~| (1 + u) + u (|a~| + |b~|) + 2 eta +
    2.32e-17 |s2| + |scale| dot_error``."""
    a = s2 * _LN2
    b = exact * scale
    t = a - b
    u = Fraction(cb.U64)
    err = cb.add_upper(cb.scale_upper(t.abs(), 1 + u), cb.scale_upper(cb.add_upper(a.abs(), b.abs()), u))
    err = cb.add_upper(err, cb.add_upper(cb.scale_upper(s2.abs(), _LN2_ERR), _float_up(2 * cb.ETA64)))
    return cb.add_upper(err, cb.scale_upper(cb.dot_error(abs_sum, head_dim), abs(Fraction(scale))))


def _scores_of(q: torch.Tensor, k: torch.Tensor, first: str, scale: float, model: DotModel) -> torch.Tensor:
    """:func:`model_scores` [..., R, Sk] with ``q`` ("q") or ``k`` ("k") the dot's first operand;
    ``ValueError`` where a score is not finite."""
    s2 = model_scores(q, k, scale, model) if first == "q" else model_scores(k, q, scale, model).transpose(-1, -2)
    if not bool(torch.isfinite(s2).all()):
        raise ValueError("the model's scores overflow float32: no score bound")
    return s2


def score_error_block(
    r0: int,
    q: torch.Tensor,
    k: torch.Tensor,
    is_causal: bool,
    scale: float,
    dot: DotModel,
    operands: str = "qk",
    scores: dict[str, torch.Tensor] | None = None,
) -> torch.Tensor:
    """float64 [..., R, Sk]: for the query rows ``q`` [..., R, E] (rows ``r0 ..`` of the sequence) against
    the keys ``k`` [..., Sk, E] (one per query head: repeat GQA's key heads first), a certified upper bound
    of ``|score2_with A_ dotf c q_i k_j * ln 2 - scale * q_i . k_j|`` for every visible pair (0 at the
    causally masked ``j > i``): the minimum of the model's actual error (``dot`` a :class:`TensorCoreDot`
    or a :class:`Tf32x3Dot` with blocks; ``operands`` names the dot's first operand: "qk", "kq" or
    "both", the larger) and the worst case at the pair's ``sum |q k|`` (alone for other models: "fp32").
    ``scores``: the model's scores of these pairs already computed (``{"q": .., "k": ..}`` [..., R, >= Sk],
    :func:`model_scores_all`'s entries for these rows and heads, any device, float32 or float64; at the masked
    pairs any finite value: their bound is 0): then not computed again, the same values (each pair's model
    score depends on its own two rows only). Module docstring."""
    if operands not in OPERANDS:
        raise ValueError(f"operands must be one of {OPERANDS}, got {operands!r}")
    if q.shape[-1] != k.shape[-1] or q.shape[:-2] != k.shape[:-2]:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} must share the leading and head dimensions")
    if is_causal and q.shape[-2] > _CAUSAL_ROWS:  # per chunk of rows, only the keys up to its last row
        return torch.cat(
            [
                score_error_block(
                    r0 + i,
                    q[..., i : i + _CAUSAL_ROWS, :],
                    k,
                    True,
                    scale,
                    dot,
                    operands,
                    None if scores is None else {f: s[..., i : i + _CAUSAL_ROWS, :] for f, s in scores.items()},
                )
                for i in range(0, q.shape[-2], _CAUSAL_ROWS)
            ],
            -2,
        )
    sk = k.shape[-2]
    if is_causal:  # the keys after the block's last row are masked for all its rows: not computed
        k = k[..., : min(sk, r0 + q.shape[-2]), :]
    qf, kf = q.to(F64), k.to(F64)
    kt = kf.transpose(-1, -2)
    abs_sum = cb.matmul_upper(qf.abs(), kt.abs())
    bound = _worst_case(abs_sum, dot, q.shape[-1], scale)
    model = _dot_model(dot)
    if model != "fp32" and model.block is not None:
        exact = qf @ kt
        firsts = {"qk": ["q"], "kq": ["k"], "both": ["q", "k"]}[operands]
        if isinstance(model, TensorCoreDot):
            firsts = firsts[:1]  # exact products: the same scores either way
        if scores is None:
            s2 = {first: _scores_of(q, k, first, scale, model) for first in firsts}
        else:
            s2 = {first: scores[first][..., : k.shape[-2]].to(device=q.device, dtype=F64) for first in firsts}
        errs = [_model_error(s2[first], exact, abs_sum, q.shape[-1], scale) for first in firsts]
        bound = torch.minimum(bound, errs[0] if len(errs) == 1 else torch.maximum(*errs))
    if is_causal:
        i = torch.arange(r0, r0 + q.shape[-2], device=q.device)[:, None]
        bound = bound.masked_fill(torch.arange(k.shape[-2], device=q.device)[None, :] > i, 0.0)
        bound = torch.nn.functional.pad(bound, (0, sk - k.shape[-2]))
    return bound


def model_scores_all(
    q: torch.Tensor,
    k: torch.Tensor,
    is_causal: bool,
    scale: float,
    dot: DotModel,
    first: str,
    storage: torch.device | str | None = None,
) -> torch.Tensor:
    """float32 [B, Hq, Sq, Sk] on ``storage`` (default q's device): the model's scores
    (:func:`model_scores`, ``first`` "q" or "k" the dot's first operand) of every pair, q [B, Hq, Sq, E],
    k [B, Hkv, Sk, E] (GQA: key heads repeated), as :func:`score_error_block` computes them (the same
    chunks of :data:`_CAUSAL_ROWS` rows; under a causal mask only the keys up to a chunk's last row, the
    others 0), ``ValueError`` where one overflows float32. For ``score_error_block``'s ``scores``: the
    values are float32 (``model_scores`` rounds to float32), so storing them in float32 is exact."""
    if first not in ("q", "k"):
        raise ValueError(f"first must be 'q' or 'k', got {first!r}")
    model = _dot_model(dot)
    return _all_pairs(q, k, is_causal, lambda a, b: _scores_of(a, b, first, scale, model), storage)


def model_dots_all(
    a: torch.Tensor,
    b: torch.Tensor,
    is_causal: bool,
    dot: DotModel,
    first: str,
    storage: torch.device | str | None = None,
) -> torch.Tensor:
    """float32 [B, H, Sa, Sb] on ``storage`` (default a's device): :func:`model_dots` of every pair of rows of
    ``a`` [B, H, Sa, E] and ``b`` [B, Hb, Sb, E] (``Hb`` dividing ``H``: repeated), ``first`` "a" (``dotf(a_i,
    b_j)``) or "b" (``dotf(b_j, a_i)``, transposed), in chunks of :data:`_CAUSAL_ROWS` rows of ``a``, under a
    causal mask only the ``b`` rows up to a chunk's last row (the others 0). ``ValueError`` for a model
    without blocks. float32 values: exact in float32."""
    if first not in ("a", "b"):
        raise ValueError(f"first must be 'a' or 'b', got {first!r}")
    if first == "a":
        return _all_pairs(a, b, is_causal, lambda x, y: model_dots(x, y, dot), storage)
    return _all_pairs(a, b, is_causal, lambda x, y: model_dots(y, x, dot).transpose(-1, -2), storage)


def _all_pairs(
    q: torch.Tensor, k: torch.Tensor, is_causal: bool, fn, storage: torch.device | str | None
) -> torch.Tensor:
    """float32 [B, Hq, Sq, Sk]: ``fn(q rows, k rows)`` (float64 [B, Hq, R, keys] of float32 values) for every
    chunk of :data:`_CAUSAL_ROWS` rows of ``q`` [B, Hq, Sq, E] against ``k`` [B, Hkv, Sk, E] repeated to Hq
    heads, the keys up to the chunk's last row under a causal mask (0 after), stored on ``storage``."""
    kr = k.repeat_interleave(q.shape[1] // k.shape[1], 1)
    sq, sk = q.shape[2], k.shape[2]
    out = torch.zeros(q.shape[:3] + (sk,), dtype=F32, device=q.device if storage is None else storage)
    for r0 in range(0, sq, _CAUSAL_ROWS):
        qc = q[:, :, r0 : r0 + _CAUSAL_ROWS]
        keys = min(sk, r0 + qc.shape[2]) if is_causal else sk
        out[:, :, r0 : r0 + qc.shape[2], :keys] = fn(qc, kr[:, :, :keys]).to(F32)
    return out


def score_errors(
    q: torch.Tensor,
    k: torch.Tensor,
    is_causal: bool,
    scale: float,
    dot: DotModel,
    operands: str = "qk",
    rows: int = 256,
) -> torch.Tensor:
    """:func:`score_error_block` for every query row, [B, Hq, Sq, Sk] (q [B, Hq, Sq, E], k [B, Hkv, Sk, E],
    GQA by repeating the key heads), ``rows`` query rows at a time (the result is the whole matrix: for
    long sequences call :func:`score_error_block` on row blocks)."""
    if q.dim() != 4 or k.dim() != 4 or q.shape[1] % k.shape[1] != 0:
        raise ValueError(
            f"q [B, Hq, Sq, E] and k [B, Hkv, Sk, E] with Hkv dividing Hq, got {tuple(q.shape)}, {tuple(k.shape)}"
        )
    kr = k.repeat_interleave(q.shape[1] // k.shape[1], 1)
    return torch.cat(
        [
            score_error_block(r0, q[:, :, r0 : r0 + rows], kr, is_causal, scale, dot, operands)
            for r0 in range(0, q.shape[2], rows)
        ],
        2,
    )
