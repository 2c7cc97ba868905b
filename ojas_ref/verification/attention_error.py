"""The proved forward-attention bound against the kernel's observed error.

Shared by ``tests/verification/test_attention_error_bound.py`` and ``benchmarks/bench_attention_error.py``:

* :func:`exact_attention`: float64 ``softmax(scale q k^T) v`` of the (upcast) inputs,
  causal or not, GQA by repeating the key/value heads, computed a block of query rows at
  a time (a [H, 16384, 16384] float64 score matrix is 17 GiB per 8 heads);
* :func:`forward_error_bound`: ``attention_forward_error_bound`` (the value of
  ``Ojas.Attention.Float.ForwardError.attention_forward_error``, computed by the
  oracle's ``attn_fwd_q``) for these inputs and the kernel's forward tile ``block_n``;
* :func:`forward_posteriori_bound`: ``attention_forward_posteriori_bound`` (the value of
  ``Ojas.Attention.Float.ForwardPosteriori.attention_forward_posteriori_masked``) entry
  by entry, in terms of ``sum_j P_ij |v_jc|``, with a device's dot model its minimum with the per-pair
  running bound (``PerPairScoreError``); the stored output's error in the
  gradient bounds' ``delta`` (:func:`grad_error_bounds`);
* :func:`lse_error_bound`: ``attention_lse_error_bound``, with a device's dot model its minimum with the
  per-pair ``attention_lse_error_masked_tf32x3_op_pp``; the backward bounds' lse premise is that per query
  row, at the row's own constants (:func:`_row_lse_errors`, ``Dl x`` of ``RunningAccError``);
* :func:`dv_error_bound`, :func:`grad_error_bounds`: the backward's a-posteriori bounds, entry by
  entry the smaller of the a-priori theorems (``dv_error``, ``dk_error``, ``dq_error`` and their
  ``_acc`` forms) and the RUNNING ones of ``Ojas.Attention.Float.RunningAccError`` (the accumulation
  charged on the signed partial sums over the tiles the kernels run, in their order, each pair's
  score error its own: :mod:`ojas_ref.verification.bounds.attention_running`,
  :mod:`ojas_ref.verification.score_errors`; dK and dQ with each pair's ``dp`` error its own too,
  ``Ojas.Attention.Float.RunningAccErrorPP``);
* :func:`lse_score_error`: per row ``Dsc_i >= ln sum_j P_ij e^(d_ij)``, ``d`` the pairs' score errors;
* the data's sums that the bounds take (``W = P |v|``, ``P^T |dO|``, ``sum_c |dO_ic| e_ic``, the
  dQ/dK sums, ``max sum |q k|``, ``max |lse|``, ...) are certified upper bounds of the exact
  values (:mod:`ojas_ref.verification.bounds.certified`: float64 sums and matmuls in any order,
  ``Ojas.FloatModel.CertifiedSum``; P between :func:`~ojas_ref.verification.bounds.certified.softmax_bounds`
  for scores within :func:`_score_error` of the float64 ones), not float64 estimates;
* :func:`kernel_dot`: the dot model the bounds take for the kernel's dots on this device: on
  CUDA the accumulation ``ojas verify-device`` identified (its record; none raises): the
  tensor cores' blocks for 16-bit inputs, Triton's 3xTF32 for float32
  (``Ojas.Attention.Float.ForwardError`` ``tc_op_dot_model`` / ``tf32x3_tc_op_dot_model``); the
  float32 sum of ``blocked_dot_model`` in the interpreter;
* :func:`unary_errors`: the constants of the ``tl.exp2`` and ``tl.log2`` premises every bound here
  takes on this device: on CUDA those ``ojas verify-device`` measured on every float32 input
  (rounded up), else ``EXP2_ERROR``, ``LOG2_ERROR``;
* :func:`observed_error`: ``max |out - exact| / max|v|``, the quantity the bound bounds;
* :func:`measured_exp2_error`: the relative error of ``tl.exp2`` on the device, which
  the bound takes as given (``EXP2_ERROR``, an assumption, not a theorem), and whether
  ``exp2(0) == 1``; sampled (the interpreter's test and the benchmark): ``ojas verify-device``
  (:mod:`ojas_ref.verification.device_premises`, which reuses :func:`_run_unary`) checks it, and
  ``tl.log2`` and the casts of :func:`storage_rounding`, on every float32 input, for the GPU tests;
* :func:`tf32_dots`: the TF32 mutant's switch (torch's float32 matmuls, and so the kernels'
  float32 dots, in TF32 inside a ``with`` block, the setting restored after it), for the float32
  bar's discrimination (``tests/verification/test_tf32_mutant.py``, the error benchmarks).
"""

from __future__ import annotations

import contextlib
import functools
import math
from fractions import Fraction
from typing import Any, Callable, Iterator

import torch

from ojas_ref.verification import score_errors as se
from ojas_ref.verification.bounds import attention_running as ar
from ojas_ref.verification.bounds import certified as cb
from ojas_ref.verification.bounds.common import _EXP2_ABS_ERROR, _FP32_ETA, _FP32_U, _float_up, _storage
from ojas_ref.verification.bounds.attention import (
    _SCALE_CONST_ERROR,
    LOG2_ERROR,
    DotModel,
    TensorCoreDot,
    Tf32x3Dot,
    _dot_model,
    attention_delta_error_bound,
    dot_error_constants,
    attention_dk_error_bound,
    attention_dq_error_bound,
    attention_dv_error_bound,
    attention_forward_error_bound,
    attention_forward_posteriori_bound,
    attention_grad_chain,
    attention_grad_chain_bound,
    attention_lse_error_bound,
)

__all__ = [
    "exact_attention",
    "exact_lse",
    "exact_dv",
    "exact_grads",
    "forward_error_bound",
    "forward_posteriori_bound",
    "lse_error_bound",
    "lse_score_error",
    "dv_error_bound",
    "grad_error_bounds",
    "grad_error_bounds_modes",
    "kernel_dot",
    "unary_errors",
    "observed_error",
    "measured_exp2_error",
    "measured_log2_error",
    "storage_rounding",
    "tf32_dots",
]

F64 = torch.float64
F32 = torch.float32


def _fingerprint(t: torch.Tensor) -> tuple:
    """What identifies a tensor's current contents: its storage, layout, dtype, device and version counter
    (bumped by every in-place write)."""
    return (t.data_ptr(), tuple(t.shape), t.stride(), t.dtype, str(t.device), t._version)


def _cached(cache: dict | None, key: tuple, tensors: tuple[torch.Tensor, ...], compute: Callable[[], Any]) -> Any:
    """``compute()``, once per ``cache`` and ``key``: ``cache`` is a dict the caller passes to the bounds of ONE
    set of inputs (:func:`forward_posteriori_bound`, :func:`lse_error_bound`, :func:`dv_error_bound`,
    :func:`grad_error_bounds`, ``cache=``) so that what they share (the dot model's scores of every pair, the
    backward's constants, ...) is computed once: the same values (the same operations on the same inputs),
    only not recomputed. ``key`` names the value and its non-tensor arguments, ``tensors`` the inputs it
    was computed from: ``ValueError`` if they are not the ones of the cached entry (other tensors, or changed
    in place since). ``None``: no cache, ``compute()``."""
    if cache is None:
        return compute()
    fp = tuple(_fingerprint(t) for t in tensors)
    if key in cache:
        got_fp, value = cache[key]
        if got_fp != fp:
            raise ValueError(f"the cache's {key[0]!r} was computed for other inputs: one cache per set of inputs")
        return value
    value = compute()
    cache[key] = (fp, value)
    return value


def _storage_device(q: torch.Tensor, k: torch.Tensor, cache: dict) -> torch.device:
    """Where the cache keeps its [B, Hq, Sq, Sk] float32 entries (the model's scores and ``dp`` dots): ``cache``'s
    ``"storage"`` if given, else q's device unless that is a GPU with less than three times four such
    tensors' bytes of memory (then the CPU's memory)."""
    if "storage" in cache:
        return torch.device(cache["storage"])
    if q.device.type != "cuda":
        return q.device
    need = 16 * q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2]
    return q.device if 3 * need <= torch.cuda.get_device_properties(q.device).total_memory else torch.device("cpu")


def _score_slices(
    q: torch.Tensor,
    k: torch.Tensor,
    is_causal: bool,
    scale: float,
    dot: DotModel,
    operands: str,
    cache: dict | None,
    rows: slice,
    group: int | None = None,
) -> dict[str, torch.Tensor] | None:
    """``score_error_block``'s ``scores`` for the query rows ``rows`` of every query head (``group`` None) or of
    the query heads ``h g + group`` (``g = Hq / Hkv``, one per key head ``h``, as :func:`_grad_running_bounds`
    takes them), from the model's scores of every pair (:func:`~ojas_ref.verification.score_errors.model_scores_all`
    of the whole ``q`` [B, Hq, Sq, E] and ``k`` [B, Hkv, Sk, E], computed once per ``cache``, for the dot's first
    operands ``operands`` names); None without a cache or for a model ``score_error_block`` does not run."""
    model = _dot_model(dot)
    if cache is None or model == "fp32" or model.block is None:
        return None
    firsts = {"qk": ["q"], "kq": ["k"], "both": ["q", "k"]}[operands]
    if isinstance(model, TensorCoreDot):
        firsts = firsts[:1]  # as score_error_block
    out = {}
    for f in firsts:
        full = _cached(
            cache,
            ("model_scores", f, is_causal, scale, repr(dot)),
            (q, k),
            lambda f=f: se.model_scores_all(q, k, is_causal, scale, dot, f, _storage_device(q, k, cache)),
        )
        if group is not None:
            full = full.unflatten(1, (k.shape[1], -1))[:, :, group]
        out[f] = full[:, :, rows]
    return out


def _dp_slices(
    q: torch.Tensor,
    do: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool,
    dot: DotModel,
    cache: dict | None,
    rows: slice,
    group: int,
) -> list[torch.Tensor] | None:
    """:func:`_pair_dp_errors`' ``runs`` for the query rows ``rows`` of the query heads ``h g + group`` (as
    :func:`_score_slices`): the model's ``dot(dO, v^T)`` and for 3xTF32 also ``dot(v, dO^T)`` of every pair
    (:func:`~ojas_ref.verification.score_errors.model_dots_all`, computed once per ``cache``, float32 [.., R, Sk],
    0 after each chunk's last row under a causal mask); None without a cache or for a model without blocks."""
    model = _dot_model(dot)
    if cache is None or model == "fp32" or model.block is None:
        return None
    firsts = ["a", "b"] if isinstance(model, Tf32x3Dot) else ["a"]  # lo a . hi b first: the order matters
    out = []
    for f in firsts:
        full = _cached(
            cache,
            ("model_dp_dots", f, is_causal, repr(dot)),
            (do, v),
            lambda f=f: se.model_dots_all(do, v, is_causal, dot, f, _storage_device(q, v, cache)),
        )
        out.append(full.unflatten(1, (v.shape[1], -1))[:, :, group][:, :, rows])
    return out


def _row_blocks(q: torch.Tensor, k: torch.Tensor, rows: int = 1024) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
    """(first row, float64 query rows, float64 keys repeated to the query heads)."""
    kr = k.to(F64).repeat_interleave(q.shape[1] // k.shape[1], 1)
    for r0 in range(0, q.shape[2], rows):
        yield r0, q[:, :, r0 : r0 + rows].to(F64), kr


def _scores(r0: int, qc: torch.Tensor, kr: torch.Tensor, is_causal: bool, scale: float) -> torch.Tensor:
    """float64 ``(q k^T) * scale`` (the dot, then one rounded product: :func:`_score_error`), -inf
    at the causally masked pairs."""
    s = (qc @ kr.transpose(-1, -2)) * scale
    if is_causal:
        i = torch.arange(r0, r0 + qc.shape[2], device=qc.device)[:, None]
        j = torch.arange(kr.shape[2], device=qc.device)[None, :]
        s = s.masked_fill(j > i, -math.inf)
    return s


def _qk_abs_sum(q: torch.Tensor, k: torch.Tensor, cache: dict | None = None) -> float:
    """A certified upper bound of ``max_ij sum_c |q_ic k_jc|`` (:func:`~ojas_ref.verification.bounds.certified.matmul_upper`);
    once per ``cache`` (:func:`_cached`)."""
    return _cached(
        cache,
        ("qk_abs_sum",),
        (q, k),
        lambda: max(
            cb.matmul_upper(qc.abs(), kr.abs().transpose(-1, -2)).max().item() for _, qc, kr in _row_blocks(q, k)
        ),
    )


def _score_error(q: torch.Tensor, scale: float, qk_abs_sum: float) -> float:
    """A bound on ``|s~ - scale q.k|`` for every score of :func:`_scores`, ``A = qk_abs_sum`` (at least
    ``max sum_c |q_ic k_jc|``): the float64 dot of ``E`` products within
    ``d = dot_error(A, E)`` (``fp64_ftree_error_bound``), then ``rnd(t scale)`` within
    ``u scale |t| + eta``: ``scale d + u scale (A + d) + eta``, rounded up."""
    a, sc = Fraction(qk_abs_sum), abs(Fraction(scale))
    d = Fraction(cb.dot_error(qk_abs_sum, q.shape[-1]).item())
    return _float_up(sc * d + Fraction(cb.U64) * sc * (a + d) + cb.ETA64)


def _lse_bounds(
    q: torch.Tensor, k: torch.Tensor, is_causal: bool, scale: float, score_error: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(lo, hi) [B, Hq, S] with ``lo <= LSE <= hi`` for the exact scores (``logsumexp_bounds``)."""
    parts = [
        cb.logsumexp_bounds(_scores(r0, qc, kr, is_causal, scale), score_error) for r0, qc, kr in _row_blocks(q, k)
    ]
    return torch.cat([lo for lo, _ in parts], 2), torch.cat([hi for _, hi in parts], 2)


def _max_abs_lse(lo: torch.Tensor, hi: torch.Tensor) -> float:
    """A bound on ``max |LSE|`` from :func:`_lse_bounds`."""
    return max(lo.abs().max().item(), hi.abs().max().item())


def _out_bounds(
    pt: torch.Tensor, p_lo: torch.Tensor, p_up: torch.Tensor, vr: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(O~, err)``: ``O~ = pt @ v`` in float64 for any float64 weights ``pt`` and ``err >= |O~ - P v|``
    entry by entry, P the exact probabilities (``p_lo <= P <= p_up``): the matmul's own error
    (``dot_error`` of ``|pt| |v|``) plus ``max(pt - p_lo, p_up - pt) |v|``."""
    va, n = vr.abs(), vr.shape[-2]
    dp = torch.maximum(cb.add_upper(pt, -p_lo), cb.add_upper(p_up, -pt)).clamp_min(0.0)
    err = cb.add_upper(cb.dot_error(cb.matmul_upper(pt.abs(), va), n), cb.matmul_upper(dp, va))
    return pt @ vr, err


def exact_lse(q: torch.Tensor, k: torch.Tensor, is_causal: bool, scale: float) -> torch.Tensor:
    """float64 ln sum_j exp(scale q.k_j) over the visible keys, [B, Hq, S]."""
    return torch.cat(
        [torch.logsumexp(_scores(r0, qc, kr, is_causal, scale), -1) for r0, qc, kr in _row_blocks(q, k)], 2
    )


def exact_dv(
    q: torch.Tensor, k: torch.Tensor, do: torch.Tensor, is_causal: bool, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 dV = P^T dO summed over each key/value head's query heads, and
    S >= P^T |dO| (the same sum over absolute values, a certified upper bound: P at most
    ``softmax_bounds``' upper one, each block's ``matmul_upper``, their float64 sum over the
    blocks and heads ``inflate_sum``), both [B, Hkv, Sk, Ev]."""
    g = q.shape[1] // k.shape[1]
    es = _score_error(q, scale, _qk_abs_sum(q, k))
    dv = torch.zeros(k.shape[0], q.shape[1], k.shape[2], do.shape[-1], dtype=F64, device=q.device)
    sa = torch.zeros_like(dv)
    blocks = 0
    for r0, qc, kr in _row_blocks(q, k):
        s = _scores(r0, qc, kr, is_causal, scale)
        pr = torch.softmax(s, -1).transpose(-1, -2)
        d = do[:, :, r0 : r0 + qc.shape[2]].to(F64)
        dv += pr @ d
        sa += cb.matmul_upper(cb.softmax_bounds(s, es)[1].transpose(-1, -2), d.abs())
        blocks += 1
    fold = lambda t: t.unflatten(1, (k.shape[1], g)).sum(2)  # noqa: E731
    return fold(dv), cb.inflate_sum(fold(sa), blocks * g)


def _dscores(
    r0: int,
    qc: torch.Tensor,
    kr: torch.Tensor,
    vr: torch.Tensor,
    d: torch.Tensor,
    is_causal: bool,
    scale: float,
    es: float,
) -> dict[str, torch.Tensor]:
    """The float64 backward quantities of a block of query rows ``qc`` (from ``r0``) against the keys
    ``kr`` and values ``vr`` (float64, one per query head), ``d`` their float64 dO: the scores ``s``
    (:func:`_scores`), the probabilities ``pr`` (float64 softmax) and their bounds ``p_lo``, ``p_up``
    for the exact ones, ``y = dP~ - D~`` and certified bounds ``ya >= |dP - D|`` and
    ``ey >= |y - (dP - D)|`` (0 where masked; ``|dP - D| <= |y| / (1 - u) + e_dP + e_D``, ``e_dP`` the
    dot's error of the row's largest ``sum_c |dO_ic v_jc|``, ``e_D`` that of ``D~ = sum_c dO_ic O~_ic``
    plus ``sum_c |dO_ic| |O~_ic - O_ic|``, :func:`_out_bounds`), and ``pd_up >= sum_c |dO_ic v_jc|``."""
    e_dim = d.shape[-1]
    s = _scores(r0, qc, kr, is_causal, scale)
    pr = torch.softmax(s, -1)
    p_lo, p_up = cb.softmax_bounds(s, es)
    o, o_err = _out_bounds(pr, p_lo, p_up, vr)
    y = d @ vr.transpose(-1, -2) - (d * o).sum(-1, keepdim=True)
    pd_up = cb.matmul_upper(d.abs(), vr.abs().transpose(-1, -2))
    e_dp = cb.dot_error(pd_up.amax(-1, keepdim=True), e_dim)
    e_d = cb.add_upper(
        cb.dot_error(cb.sum_upper(cb.mul_upper(d, o), -1, keepdim=True), e_dim),
        cb.sum_upper(cb.mul_upper(d, o_err), -1, keepdim=True),
    )
    masked = s == -math.inf
    e_y = cb.add_upper(e_dp, e_d)
    ya = cb.add_upper(cb.mul_upper(y, _float_up(1 / (1 - Fraction(cb.U64)))), e_y).masked_fill(masked, 0.0)
    ey = cb.add_upper(cb.mul_upper(y, cb.U64), e_y).masked_fill(masked, 0.0)
    return dict(s=s, pr=pr, p_lo=p_lo, p_up=p_up, y=y, ya=ya, ey=ey, pd_up=pd_up)


def exact_grads(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    do: torch.Tensor,
    is_causal: bool,
    scale: float,
    delta_error: torch.Tensor,
) -> dict:
    """float64 ``dq`` [B, Hq, Sq, E] and ``dk`` [B, Hkv, Sk, E] of attention against ``do``
    (``D_i = dO_i . O_i``, O the exact output); the a-posteriori sums of
    ``attention_dq_error_bound`` / ``attention_dk_error_bound`` (``dq_sums``, ``dk_sums``:
    ``sum P |dP - D| |w|``, ``sum P |w|``, ``sum P eD |w|`` with ``eD = delta_error`` [B, Hq, Sq]),
    ``max_abs_y`` >= max |dP - D| over the visible pairs and ``dp_abs_sum`` >= max_ij sum_c |dO_ic v_jc|.
    The sums and maxima are certified upper bounds of the exact values (P the exact
    probabilities, ``D_i = dO_i . (P v)_i``; :mod:`~ojas_ref.verification.bounds.certified`):
    ``|dP - D| <= |y~| / (1 - u) + e_dP + e_D`` for the float64 ``y~ = dP~ - D~``, with ``e_dP`` the
    dot's error (``dot_error`` of the row's largest ``sum_c |dO_ic v_jc|``) and ``e_D`` that of
    ``D~ = sum_c dO_ic O~_ic`` (``dot_error``, plus ``sum_c |dO_ic| |O~_ic - O_ic|``, :func:`_out_bounds`)."""
    return _exact_grads_modes(q, k, v, do, is_causal, scale, [delta_error])[0]


def _exact_grads_modes(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    do: torch.Tensor,
    is_causal: bool,
    scale: float,
    delta_errors: list[torch.Tensor],
    cache: dict | None = None,
) -> list[dict]:
    """:func:`exact_grads` for each of ``delta_errors`` in one pass: the sums without ``eD`` once (copies in
    every result but the first), ``sum P eD |w|`` per ``eD``; each result the values of its own call."""
    g = q.shape[1] // k.shape[1]
    es = _score_error(q, scale, _qk_abs_sum(q, k, cache))
    vr = v.to(F64).repeat_interleave(g, 1)
    dk = [torch.zeros(q.shape[:2] + (k.shape[2], q.shape[3]), dtype=F64, device=q.device) for _ in range(3)]
    dk_e = [torch.zeros_like(dk[0]) for _ in delta_errors]
    dq: list[list[torch.Tensor]] = [[], [], []]
    dq_e: list[list[torch.Tensor]] = [[] for _ in delta_errors]
    ym = pd = 0.0
    blocks = 0
    for r0, qc, kr in _row_blocks(q, k):
        blk = _dscores(r0, qc, kr, vr, do[:, :, r0 : r0 + qc.shape[2]].to(F64), is_causal, scale, es)
        pr, p_up, y, ya = blk["pr"], blk["p_up"], blk["y"], blk["ya"]
        ym = max(ym, ya.max().item())
        pd = max(pd, blk["pd_up"].max().item())
        es_rows = [delta_error[:, :, r0 : r0 + qc.shape[2], None].to(F64) for delta_error in delta_errors]
        py, pay = pr * y, cb.mul_upper(p_up, ya)
        dk[0] += (py * scale).transpose(-1, -2) @ qc
        for acc, t in zip(dk[1:], (pay, p_up)):
            acc += cb.matmul_upper(t.transpose(-1, -2), qc.abs())
        for acc, e in zip(dk_e, es_rows):
            acc += cb.matmul_upper(cb.mul_upper(p_up, e).transpose(-1, -2), qc.abs())
        ka = kr.abs()
        pka = cb.matmul_upper(p_up, ka)
        for parts, t in zip(dq, (scale * py @ kr, cb.matmul_upper(pay, ka), pka)):
            parts.append(t)
        for parts, e in zip(dq_e, es_rows):
            parts.append(cb.mul_upper(e, pka))
        blocks += 1
    fold = lambda t: t.unflatten(1, (k.shape[1], g)).sum(2)  # noqa: E731
    dq_all = [torch.cat(parts, 2) for parts in dq]
    dk_all = [fold(dk[0])] + [cb.inflate_sum(fold(t), blocks * g) for t in dk[1:]]
    out = []
    for i, (acc, parts) in enumerate(zip(dk_e, dq_e)):
        copy = (lambda t: t) if i == 0 else torch.clone  # noqa: E731
        out.append(
            dict(
                dq=copy(dq_all[0]),
                dk=copy(dk_all[0]),
                dq_sums=(copy(dq_all[1]), copy(dq_all[2]), torch.cat(parts, 2)),
                dk_sums=(copy(dk_all[1]), copy(dk_all[2]), cb.inflate_sum(fold(acc), blocks * g)),
                max_abs_y=ym,
                dp_abs_sum=pd,
            )
        )
    return out


def exact_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool, scale: float) -> torch.Tensor:
    """float64 softmax(scale q k^T) v, [B, Hq, S, Ev]; causal top-left (key j <= query i)."""
    vr = v.to(F64).repeat_interleave(q.shape[1] // k.shape[1], 1)
    out = []
    for r0, qc, kr in _row_blocks(q, k):
        out.append(torch.softmax(_scores(r0, qc, kr, is_causal, scale), -1) @ vr)
    return torch.cat(out, 2)


def kernel_dot(device_type: str, dtype: torch.dtype) -> DotModel:
    """The model of the kernels' dots for ``dtype`` on ``device_type``, which every bound here takes.

    On CUDA, from the ``ojas verify-device`` record of this device and these versions
    (:func:`~ojas_ref.verification.device_premises.checked_premises`: ``PremisesNotChecked``
    without one, ``PremiseFailed`` when the dot's identification failed): 16-bit inputs run the
    tensor cores' blocks of "tl.dot bfloat16" (:class:`TensorCoreDot`, the float16 kernels
    assumed to accumulate as the bfloat16 ones: the same instructions), float32 inputs
    Triton's 3xTF32 dots of "tl.dot float32 tf32x3" (:class:`Tf32x3Dot`, the three TF32 dots
    chained from 0 then ``+ c``, as ``tf32x3_dot_tc_op_error`` states them). float32 dots in
    single-pass TF32 (torch's float32 matmul precision "high" or "medium") have no theorem:
    ``ValueError``. Elsewhere (the interpreter, whose dots are float32 matmuls) the float32 sum,
    ``"fp32"``."""
    if device_type != "cuda":
        return "fp32"
    from ojas_kernels.attention_args import _HIGHEST, _dot_precision
    from ojas_ref.verification import device_premises as dp

    if dtype != torch.float32:
        name = "tl.dot bfloat16"
        models = dp.checked_premises([name])[name]["measured"]
        found = {TensorCoreDot.from_accumulation(dp.Accumulation(**m)) for m in models}
    else:
        if _dot_precision(dtype, _HIGHEST) != "tf32x3":
            raise ValueError(
                "float32 attention with single-pass TF32 dots (torch's float32 matmul precision is not "
                "'highest'): no theorem bounds them"
            )
        name = "tl.dot float32 tf32x3"
        models = dp.checked_premises([name])[name]["measured"]
        if any(m["schedule"] != "chain(0)+c" for m in models):
            raise ValueError(f"{name}: the device chains the three TF32 dots otherwise than Tf32Product.v: {models}")
        found = {Tf32x3Dot.from_accumulation(dp.Accumulation(**m["model"])) for m in models}
    if len(found) != 1:
        raise ValueError(f"{name}: the record identifies {len(found)} dot models, not one: {models}")
    return found.pop()


def unary_errors(device_type: str, n_keys: int) -> dict[str, float]:
    """``exp2_error`` and ``log2_error``, the premises' constants every bound here takes on
    ``device_type`` for ``n_keys`` keys: :func:`~ojas_ref.verification.device_premises.premise_constants`
    of "tl.exp2" and "tl.log2" (on CUDA the measured ones of this device's exhaustive record, rounded
    up, where it passed; else ``EXP2_ERROR``, :data:`LOG2_ERROR`), ``log2_error`` the assumed
    one when the theorem's log2 arguments ``[1 - bL, (1 + bL) e^LN]`` (``SavedLseError``: ``e^LN``
    slightly above ``n_keys``, ``bL`` the lse's bound) can leave the checked domain ``LOG_DOMAIN``:
    ``2 n_keys (1 + 2^-30)`` past its end."""
    from ojas_ref.verification import device_premises as dp

    c = dp.premise_constants(["tl.exp2", "tl.log2"], device_type)
    return dict(
        exp2_error=c["tl.exp2"],
        log2_error=c["tl.log2"] if 2 * n_keys * (1 + 2.0**-30) <= dp.LOG_DOMAIN[1] else LOG2_ERROR,
    )


def _bound_inputs(
    q: torch.Tensor,
    k: torch.Tensor,
    is_causal: bool,
    block_n: int | None,
    value_dim: int | None = None,
    cache: dict | None = None,
) -> dict:
    """block_n (the kernel's forward key tile, ``default_config`` of ``max(E, Ev)`` as the kernels' launch
    picks it, ``Ev = value_dim``, default E; unless given), max|q|, max|k| and a certified upper bound
    of the measured ``max_j sum_i |q_i k_ji|`` (:func:`_qk_abs_sum`)."""
    if block_n is None:
        from ojas_kernels.attention import default_config

        head = max(q.shape[-1], value_dim or q.shape[-1])
        block_n = default_config(head, q.dtype, q.device, is_causal).fwd.block_n
    return dict(
        block_n=block_n,
        max_abs_q=q.abs().max().item(),
        max_abs_k=k.abs().max().item(),
        qk_abs_sum=_qk_abs_sum(q, k, cache),
    )


def forward_error_bound(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool, scale: float, block_n: int | None = None
) -> float:
    """The bound on :func:`observed_error` for these inputs (``attention_forward_error_bound``),
    at the float32-to-``q.dtype`` rounding the device's kernels use (:func:`storage_rounding`)."""
    return attention_forward_error_bound(
        k.shape[2],
        q.shape[-1],
        dtype=q.dtype,
        max_abs_v=v.abs().max().item(),
        scale=scale,
        exp2_error=unary_errors(q.device.type, k.shape[2])["exp2_error"],
        storage_rounding=storage_rounding(q.device.type, q.dtype),
        dot=kernel_dot(q.device.type, q.dtype),
        **_bound_inputs(q, k, is_causal, block_n, v.shape[-1]),
    )


def _prob_abs_v(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool, scale: float, score_error: float
) -> torch.Tensor:
    """A certified upper bound of ``W_ic = sum_j P_ij |v_jc|`` [B, Hq, S, Ev]: the upper probabilities of
    ``softmax_bounds`` (scores within ``score_error`` of the float64 ones) times ``|v|``, ``matmul_upper``."""
    va = v.to(F64).abs().repeat_interleave(q.shape[1] // k.shape[1], 1)
    return torch.cat(
        [
            cb.matmul_upper(cb.softmax_bounds(_scores(r0, qc, kr, is_causal, scale), score_error)[1], va)
            for r0, qc, kr in _row_blocks(q, k)
        ],
        2,
    )


def forward_posteriori_bound(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool,
    scale: float,
    block_n: int | None = None,
    *,
    cache: dict | None = None,
) -> torch.Tensor:
    """The entry-by-entry bound on ``|out - exact_attention|`` [B, Hq, S, Ev]
    (``attention_forward_posteriori_bound``) with ``W >= P |v|`` certified: the upper probabilities
    of ``softmax_bounds`` (scores within :func:`_score_error`) times ``|v|``, ``matmul_upper``.
    With a device's dot model (CUDA) and the kernel's own tiles (``block_n`` None), also the per-pair
    running bound (``Ojas.Attention.Float.PerPairScoreError.attention_forward_acc_running_tf32x3_op_pp``,
    ``_tc_op_pp``: :func:`~ojas_ref.verification.attention_forward_running.forward_per_pair_bounds`):
    both are proved, so their minimum is. ``cache``: a dict shared with the other bounds of the same inputs
    (:func:`_cached`: what they share computed once, the same values)."""
    return _forward_bounds(q, k, v, is_causal, scale, block_n, cache)[0]


def _forward_bounds(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool,
    scale: float,
    block_n: int | None,
    cache: dict | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(forward_posteriori_bound, per-pair lse bounds)``: the second [B, Hq, Sq] each row's
    ``attention_lse_error_masked_tf32x3_op_pp`` (``_dot_pp`` at ``tc_op_dot_model``) at its own constants, of the
    same pass over the pairs (:func:`~ojas_ref.verification.attention_forward_running.forward_per_pair_bounds`),
    None where that pass does not run ("fp32", or ``block_n`` given). Once per ``cache`` (copies returned)."""
    got = _cached(
        cache,
        ("forward_bounds", is_causal, scale, block_n),
        (q, k, v),
        lambda: _forward_bounds_of(q, k, v, is_causal, scale, block_n, cache),
    )
    return tuple(None if t is None else t.clone() for t in got)


def _forward_bounds_of(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool,
    scale: float,
    block_n: int | None,
    cache: dict | None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`_forward_bounds`, computed."""
    inputs = _bound_inputs(q, k, is_causal, block_n, v.shape[-1], cache)
    post = attention_forward_posteriori_bound(
        _prob_abs_v(q, k, v, is_causal, scale, _score_error(q, scale, inputs["qk_abs_sum"])),
        k.shape[2],
        q.shape[-1],
        dtype=q.dtype,
        max_abs_v=v.abs().max().item(),
        scale=scale,
        exp2_error=unary_errors(q.device.type, k.shape[2])["exp2_error"],
        storage_rounding=storage_rounding(q.device.type, q.dtype),
        dot=kernel_dot(q.device.type, q.dtype),
        **inputs,
    )
    if block_n is not None or kernel_dot(q.device.type, q.dtype) == "fp32":
        return post, None
    from ojas_ref.verification.attention_forward_running import forward_per_pair_bounds

    out_b, lse_b = forward_per_pair_bounds(q, k, v, is_causal, scale, cache=cache)
    return torch.minimum(post, out_b), lse_b


def _lse_error(
    q: torch.Tensor,
    k: torch.Tensor,
    is_causal: bool,
    scale: float,
    dot: DotModel,
    errs: dict,
    bnd: dict,
    per_pair: float | None = None,
    cache: dict | None = None,
) -> float:
    """A proved bound on ``max |lse - exact_lse|`` at the dot model ``dot``, the unary premises ``errs`` and
    the forward's :func:`_bound_inputs` ``bnd``: ``attention_lse_error_bound`` (one uniform score error
    ``delta``); with a device's dot model the smaller of it and the per-pair bound ``per_pair`` (both proved),
    unless given ``attention_lse_error_masked_tf32x3_op_pp`` (``attention_lse_error_masked_dot_pp`` at
    ``tc_op_dot_model``) at ``score_shift = max_i Dsc_i`` of :func:`lse_score_error`."""
    kw = dict(scale=scale, dot=dot, **errs, **bnd)
    uniform = attention_lse_error_bound(k.shape[2], q.shape[-1], **kw)
    if dot == "fp32":
        return uniform
    if per_pair is None:
        dsc = _lse_row_terms(q, k, is_causal, scale, cache)[0].max().item()
        per_pair = attention_lse_error_bound(k.shape[2], q.shape[-1], score_shift=dsc, **kw)
    return min(uniform, per_pair)


def lse_error_bound(
    q: torch.Tensor,
    k: torch.Tensor,
    is_causal: bool,
    scale: float,
    block_n: int | None = None,
    value_dim: int | None = None,
    *,
    cache: dict | None = None,
) -> float:
    """The proved bound on ``max |lse - exact_lse|`` for these inputs: ``attention_lse_error_bound``, with
    a device's dot model (CUDA) the smaller of it and the per-pair bound
    (``Ojas.Attention.Float.PerPairScoreError.attention_lse_error_masked_tf32x3_op_pp``; ``Dsc`` of
    :func:`lse_score_error`): :func:`_lse_error`. ``value_dim``: the values' head dim where it is not
    q's (the kernel's key tile is picked for the larger of the two). ``cache``: as :func:`forward_posteriori_bound`'s."""
    dot, errs = kernel_dot(q.device.type, q.dtype), unary_errors(q.device.type, k.shape[2])
    bnd = _bound_inputs(q, k, is_causal, block_n, value_dim, cache)
    return _lse_error(q, k, is_causal, scale, dot, errs, bnd, None, cache)


def lse_score_error(q: torch.Tensor, k: torch.Tensor, is_causal: bool, scale: float) -> torch.Tensor:
    """[B, Hq, Sq] float64 upper bounds ``Dsc_i >= ln sum_j P_ij e^(d_ij)`` over the visible keys, ``P`` the
    exact softmax of the row and ``d_ij`` the pair's score error of the forward's ``dot(q, k^T)`` at the
    device's dot model (:func:`~ojas_ref.verification.score_errors.score_error_block`, :func:`kernel_dot`;
    "fp32": the worst case at the pair's ``sum |q k|``): the smaller of ``max_j d_ij`` and, where every
    ``d_ij <= 1``, ``sum_j P_up_ij (d_ij + d_ij^2)`` (``ln x <= x - 1`` with ``sum_j P_ij = 1``, ``e^d - 1 <=
    d + d^2`` on [0, 1], ``P <= P_up`` of ``softmax_bounds``), every operation rounded up. For a bound on
    the saved lse taking per-pair score errors in place of one uniform ``delta``."""
    return _lse_row_terms(q, k, is_causal, scale)[0]


def _lse_row_terms(
    q: torch.Tensor, k: torch.Tensor, is_causal: bool, scale: float, cache: dict | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(Dsc, changes, Dsc_arg)`` [B, Hq, Sq]: :func:`lse_score_error`'s ``Dsc`` and, from the same scores and
    pair errors, each row's count of keys that may raise the running max
    (:func:`~ojas_ref.verification.attention_forward_running._row_max_changes`) and the shift with the exp2
    argument's rounding per pair (:func:`~ojas_ref.verification.attention_forward_running.exp_arg_shift`).
    Once per ``cache`` (copies returned)."""
    got = _cached(
        cache, ("lse_row_terms", is_causal, scale), (q, k), lambda: _lse_row_terms_of(q, k, is_causal, scale, cache)
    )
    return tuple(t.clone() for t in got)


def _lse_row_terms_of(
    q: torch.Tensor, k: torch.Tensor, is_causal: bool, scale: float, cache: dict | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`_lse_row_terms`, computed."""
    from ojas_ref.verification.attention_forward_running import _row_max_changes, exp_arg_shift

    dot = kernel_dot(q.device.type, q.dtype)
    es = _score_error(q, scale, _qk_abs_sum(q, k, cache))
    shifts, changes, arg_shifts = [], [], []
    for r0, qc, kr in _row_blocks(q, k):
        s = _scores(r0, qc, kr, is_causal, scale)
        p_up = cb.softmax_bounds(s, es)[1]
        rows = _score_slices(q, k, is_causal, scale, dot, "qk", cache, slice(r0, r0 + qc.shape[2]))
        d = se.score_error_block(r0, qc, kr, is_causal, scale, dot, "qk", rows)
        d_max = d.amax(-1)
        mean = cb.sum_upper(cb.mul_upper(p_up, cb.add_upper(d, cb.mul_upper(d, d))), -1)
        shifts.append(torch.where(d_max <= 1.0, torch.minimum(mean, d_max), d_max))
        changes.append(_row_max_changes(s, d, es))
        arg_shifts.append(exp_arg_shift(s, d, p_up, es))
    return torch.cat(shifts, 2), torch.cat(changes, 2), torch.cat(arg_shifts, 2)


def _row_lse_errors(
    q: torch.Tensor, k: torch.Tensor, is_causal: bool, scale: float, c: dict, value_dim: int, cache: dict | None = None
) -> torch.Tensor:
    """[B, Hq, Sq] float64: per query row a proved bound on ``|lse - exact_lse|``, the backward's lse premise
    ``Dl x`` of the items of that row: :func:`_lse_error` (all rows' constants) and, with a device's dot model,
    its minimum with the row's ``attention_lse_error_masked_tf32x3_op_pp`` at its own constants and
    ``Dsc_i`` (:func:`lse_score_error`;
    :func:`~ojas_ref.verification.attention_forward_running._row_lse_bound`), and where smaller the counted
    ``attention_lse_error_masked_counted_tf32x3_op_pp`` at the row's count of keys that may raise the running
    max (:func:`~ojas_ref.verification.attention_forward_running._row_lse_counted_bound`), or
    ``attention_lse_error_masked_tf32x3_op_pp_arg_rowmax`` and its counted form (the exp2 argument's rounding per
    pair, the row's own score bound: :func:`~ojas_ref.verification.attention_forward_running._row_lse_arg_bound`,
    :func:`~ojas_ref.verification.attention_forward_running._row_score_abs_max`)."""
    if c["dot"] == "fp32":
        uniform = _lse_error(q, k, is_causal, scale, c["dot"], c["errs"], c["bnd"])
        return torch.full(q.shape[:3], uniform, dtype=F64, device=q.device)
    from ojas_kernels.attention import default_config

    from ojas_ref.verification import attention_forward_running as afr

    bn, sq, sk, e = c["bnd"]["block_n"], q.shape[2], k.shape[2], q.shape[-1]
    kw = dict(scale=scale, dot=c["dot"], **c["bnd"])
    dsc, changes, dsc_arg = _lse_row_terms(q, k, is_causal, scale, cache)
    all_rows = attention_lse_error_bound(sk, e, score_shift=dsc.max().item(), **c["errs"], **kw)
    uniform = _lse_error(q, k, is_causal, scale, c["dot"], c["errs"], c["bnd"], all_rows)
    rows = torch.full(q.shape[:3], uniform, dtype=F64, device=q.device)
    bm = default_config(max(e, value_dim), q.dtype, q.device, is_causal).fwd.block_m
    counts = afr._tile_counts(sq, sk, bm, bn, is_causal).to(q.device)
    p_rows, device = afr._row_qk_abs_sum(q, k, is_causal, cache), q.device.type
    got = afr._row_lse_bound(dsc, kw, p_rows, counts, e, sk, device)
    counted = afr._row_lse_counted_bound(dsc, kw, p_rows, counts, e, sk, device, changes)
    row_max = afr._row_score_abs_max(q, k, is_causal, scale, c["es"], cache)
    arg = afr._row_lse_arg_bound(dsc_arg, kw, p_rows, counts, e, sk, device, changes, row_max)
    return torch.minimum(torch.minimum(rows, arg), torch.minimum(got, counted))


def _backward_constants(
    q: torch.Tensor,
    k: torch.Tensor,
    is_causal: bool,
    scale: float,
    value_dim: int | None = None,
    cache: dict | None = None,
) -> dict:
    """What every backward bound here takes from the inputs and the device: the kernels' tiles
    (``default_config`` of ``max(E, Ev)``, ``Ev = value_dim`` (default E), as the kernels' launch picks it: ``bm``,
    ``bn`` of the dK/dV kernel, ``qm``, ``qn`` of the dQ kernel), the
    forward's :func:`_bound_inputs`, the float64 scores' error ``es`` (:func:`_score_error`), the lse's
    bounds, the dot model, the unary premises' constants and the storage rounding. Once per ``cache`` (a copy
    of the dict returned)."""
    got = _cached(
        cache,
        ("backward_constants", is_causal, scale, value_dim),
        (q, k),
        lambda: _backward_constants_of(q, k, is_causal, scale, value_dim, cache),
    )
    return dict(got)


def _backward_constants_of(
    q: torch.Tensor, k: torch.Tensor, is_causal: bool, scale: float, value_dim: int | None, cache: dict | None
) -> dict:
    """:func:`_backward_constants`, computed."""
    from ojas_kernels.attention import default_config

    cfg = default_config(max(q.shape[-1], value_dim or q.shape[-1]), q.dtype, q.device, is_causal)
    bnd = _bound_inputs(q, k, is_causal, None, value_dim, cache)
    es = _score_error(q, scale, bnd["qk_abs_sum"])
    lse_lo, lse_hi = _lse_bounds(q, k, is_causal, scale, es)
    return dict(
        bm=cfg.bwd_kv.block_m,
        bn=cfg.bwd_kv.block_n,
        qm=cfg.bwd_q.block_m,
        qn=cfg.bwd_q.block_n,
        bnd=bnd,
        es=es,
        lse_lo=lse_lo,
        lse_hi=lse_hi,
        dot=kernel_dot(q.device.type, q.dtype),
        errs=unary_errors(q.device.type, k.shape[2]),
        rounding=storage_rounding(q.device.type, q.dtype),
    )


def _first_query_tile(sk: int, bm: int, bn: int, is_causal: bool, device: torch.device) -> torch.Tensor:
    """[Sk]: the first query row of the dK/dV kernel's loop for key ``j``'s key tile (``_query_tiles``
    without a window: ``lo`` = the key tile's start rounded down to a query tile under a causal mask,
    else 0); the kernel runs every query tile from there to the end, in order, for each query head of
    the group."""
    j = torch.arange(sk, device=device)
    return (j // bn * bn) // bm * bm if is_causal else torch.zeros_like(j)


def _last_key_end(sq: int, sk: int, qm: int, is_causal: bool, device: torch.device) -> torch.Tensor:
    """[Sq]: the end ``hi`` of the dQ kernel's key loop for query ``i``'s query tile (``_key_tiles``
    without a window: ``min(Sk, last row + 1)`` under a causal mask, else ``Sk``); the kernel runs
    the key tiles ``0, bn, ...`` below it, in order."""
    i = torch.arange(sq, device=device)
    return (
        (torch.minimum(i // qm * qm + qm, torch.tensor(sq, device=device))).clamp_max(sk)
        if is_causal
        else (torch.full_like(i, sk))
    )


def _block_rows(row_size: int, bm: int) -> int:
    """Query rows per block of the running bounds: a multiple of the query tile ``bm`` with about
    ``2^26`` pairs (512 MiB per float64 tensor) when a row holds ``row_size`` pairs."""
    return bm * max(1, 2**26 // (row_size * bm))


def _exp2_premises(
    c: dict, lse_error: float | torch.Tensor, head_dim: int, scale: float
) -> tuple[torch.Tensor, Fraction]:
    """``(Dl, Am)`` of the running theorems' exp2 premise: ``Dl`` [B, Hq, Sq] per query row at the row's
    lse bound ``lse_error`` ([B, Hq, Sq], or one number for every row) and ``|LSE|`` (:func:`_lse_bounds`;
    :func:`~ojas_ref.verification.bounds.attention_running.exp2_premise_rows`), ``Am`` one for every pair
    (:func:`~ojas_ref.verification.bounds.attention_running.exp2_premise_terms` at the largest of both)."""
    lse_abs = torch.maximum(c["lse_lo"].abs(), c["lse_hi"].abs())
    lse_error = torch.as_tensor(lse_error, dtype=F64, device=lse_abs.device).expand(lse_abs.shape)
    _, am = ar.exp2_premise_terms(
        c["dot"], head_dim, scale, c["bnd"]["qk_abs_sum"], lse_abs.max().item(), lse_error.max().item()
    )
    return ar.exp2_premise_rows(lse_abs, lse_error), am


def _pair_exp2_factors(
    r0: int,
    q: torch.Tensor,
    k: torch.Tensor,
    is_causal: bool,
    scale: float,
    c: dict,
    premises: tuple[torch.Tensor, Fraction],
    operands: str,
    scores: dict[str, torch.Tensor] | None = None,
) -> torch.Tensor:
    """float64 [..., R, Sk]: per pair of the query rows ``q`` (from ``r0``) and the keys ``k`` (one per
    query head), ``X x - 1 >= 2^((delta x + Dl x) / ln 2 + u Am + ea) - 1`` of the running theorems
    (:func:`~ojas_ref.verification.bounds.attention_running.exp2_factor_minus_one`), ``delta x`` the
    pair's own score error (:func:`~ojas_ref.verification.score_errors.score_error_block` at the device's
    dot model, ``operands`` the kernel's first operand: the minimum of the model's actual error and the
    worst case at the pair's ``sum |q k|``, both proved bounds), ``premises = (Dl, Am)``: ``Dl`` [..., R]
    the rows' (:func:`_exp2_premises`), ``Am`` uniform; ``scores`` the model's scores of these pairs where
    already computed (:func:`_score_slices`)."""
    delta = se.score_error_block(r0, q, k, is_causal, scale, c["dot"], operands, scores)
    return ar.exp2_factor_minus_one(delta, premises[0][..., None], premises[1])


def _dv_running_bound(
    q: torch.Tensor,
    k: torch.Tensor,
    do: torch.Tensor,
    prob_abs_do: torch.Tensor,
    is_causal: bool,
    scale: float,
    c: dict,
    lse_error: float | torch.Tensor,
    cache: dict | None = None,
) -> torch.Tensor:
    """``dv_error_acc_running`` (``Ojas.Attention.Float.RunningAccError``) for every stored dV entry
    [B, Hkv, Sk, Ev]: ``(1 + us) (run_err_split g_acc g_dot g_abs as cs + sum_x r x) + us S + es`` over the
    query tiles of the dK/dV kernel for the key's tile, in the kernel's order (query heads of the group,
    then the tiles from :func:`_first_query_tile`: a tile whose rows are all masked for the key is a
    tile), ``S = prob_abs_do``, ``(g_acc, g_dot, g_abs)`` the accumulating dot's constants over ``bm`` rows
    (``acc_dot_split_model``: :func:`~ojas_ref.verification.bounds.attention.acc_dot_split_constants`).
    Every item ``x = (i, j)`` has ``z x = P_ij dO_ic`` and ``r x = ((H x - 1) P_ij + cw) |dO_ic|``
    (0 where masked), ``H x = (1 + us)(1 + ue) X x`` with ``X x - 1`` from the pair's own score error
    ``delta x`` (:func:`_pair_exp2_factors`: :func:`~ojas_ref.verification.score_errors.score_error_block`
    of the dK/dV kernel's ``dot(k, q^T)``) and its query row's ``Dl x`` (``lse_error`` [B, Hq, Sq], each
    row's lse bound, or one for every row); ``as``, ``cs`` from the running tensors of
    :class:`~ojas_ref.verification.bounds.attention_running.RunningAcc`: the float64 ``P~^T dO`` of each
    tile within ``dot_error`` plus ``|P~ - P| |dO|`` of the exact one (P between ``softmax_bounds``),
    ``sum |z| <= P_up^T |dO|``."""
    bm, dot, errs = c["bm"], c["dot"], c["errs"]
    us, es_s = (Fraction(x) for x in _storage(q.dtype, c["rounding"]))
    e1 = (1 + us) * (1 + Fraction(errs["exp2_error"]))  # H - 1 = (e1 - 1) + e1 (X - 1)
    cw = _float_up((1 + us) * Fraction(_EXP2_ABS_ERROR) + es_s)
    b, hq, sq, _ = q.shape
    hkv, sk, ev = k.shape[1], k.shape[2], do.shape[-1]
    acc = ar.RunningAcc((b, hkv, sk, ev), q.device, *ar.acc_constants_up(dot, bm))
    first = _first_query_tile(sk, bm, c["bn"], is_causal, q.device)[:, None]
    kf = k.to(F64)
    rows = _block_rows(b * hkv * sk, bm)
    dl, am = _exp2_premises(c, lse_error, q.shape[-1], scale)
    heads = (t.unflatten(1, (hkv, -1)).unbind(2) for t in (q, do, dl))
    for gi, (qh, dh, lh) in enumerate(zip(*heads)):
        for r0 in range(0, sq, rows):
            qc = qh[:, :, r0 : r0 + rows].to(F64)
            s = _scores(r0, qc, kf, is_causal, scale)
            pr, (p_lo, p_up) = torch.softmax(s, -1), cb.softmax_bounds(s, c["es"])
            pre = (lh[:, :, r0 : r0 + rows], am)
            scores = _score_slices(q, k, is_causal, scale, dot, "kq", cache, slice(r0, r0 + rows), gi)
            x1 = _pair_exp2_factors(r0, qh[:, :, r0 : r0 + rows], k, is_causal, scale, c, pre, "kq", scores)
            h = cb.add_upper(cb.scale_upper(x1, e1), _float_up(e1 - 1))
            del x1
            d = dh[:, :, r0 : r0 + rows].to(F64)
            for t0 in range(0, qc.shape[2], bm):
                sl = slice(t0, t0 + bm)
                p, up, dt = pr[..., sl, :], p_up[..., sl, :], d[..., sl, :]
                da = dt.abs()
                dp = torch.maximum(ar.up_add(p, -p_lo[..., sl, :]), ar.up_add(up, -p)).clamp_min(0.0)
                a = ar.up_matmul(up.transpose(-1, -2), da)
                e_p = ar.up_matmul(dp.transpose(-1, -2), da)
                err = ar.up_add(ar.up_dot_error(ar.up_add(a, e_p), dt.shape[-2]), e_p)
                wr = ar.up_add(ar.up_mul(h[..., sl, :], up), (s[..., sl, :] > -math.inf).to(F64) * cw)
                r = ar.up_matmul(wr.transpose(-1, -2), da)
                acc.step(p.transpose(-1, -2) @ dt, err, a, r, first <= r0 + t0)
    return cb.add_upper(
        cb.scale_upper(acc.error(), 1 + us), cb.add_upper(cb.scale_upper(prob_abs_do.to(F64), us), _float_up(es_s))
    )


def dv_error_bound(
    q: torch.Tensor,
    k: torch.Tensor,
    do: torch.Tensor,
    prob_abs_do: torch.Tensor,
    is_causal: bool,
    scale: float,
    *,
    cache: dict | None = None,
) -> torch.Tensor:
    """Proved a-posteriori bounds on |dV - exact| [B, Hkv, Sk, Ev] (``prob_abs_do`` from
    :func:`exact_dv`), with the forward's lse bound of each query row (:func:`_row_lse_errors`:
    ``attention_lse_error_bound``, with a device's dot model its minimum with the row's
    ``attention_lse_error_masked_tf32x3_op_pp`` at its own constants; the a-priori theorem at their largest), the dK/dV
    kernel's query tile (``default_config``) and every query head of a key's group counted: entry by
    entry the smaller of two theorems' values, both at the same premises:

    * ``Ojas.Attention.Float.RunningAccError.dv_error_acc_running`` (:func:`_dv_running_bound`): the
      accumulation charged on the running signed partial sums over the tiles the kernel runs, each
      pair's score error its own (:mod:`~ojas_ref.verification.score_errors`: the smaller of the dot
      model's actual error on the data and its worst case at the pair's ``sum |q k|``, both proved);
    * the a-priori ``attention_dv_error_bound`` (``dv_error``; ``dv_error_acc`` with a dot model:
      the accumulation charged ``((1 + g_rel)^t - 1) S``, one score error for every pair).

    No theorem covers: FMA contraction, ``exp2_error`` (an assumption); with "fp32" the MMA's
    order (the interpreter's IEEE float32 dots, the blocked float32 model); the float64 evaluation
    of ``as``, ``cs``, ``S``, the score errors and ``X`` (certified upper bounds under
    :mod:`~ojas_ref.verification.bounds.certified`'s premises on torch's float64 operations).
    ``cache``: as :func:`forward_posteriori_bound`'s."""
    c = _backward_constants(q, k, is_causal, scale, do.shape[-1], cache)
    g, sq, bm, bnd = q.shape[1] // k.shape[1], q.shape[2], c["bm"], c["bnd"]
    lse_rows = _row_lse_errors(q, k, is_causal, scale, c, do.shape[-1], cache)
    old = attention_dv_error_bound(
        prob_abs_do,
        g * sq,
        g * -(-sq // bm),
        q.shape[-1],
        block_m=bm,
        dtype=q.dtype,
        max_abs_q=bnd["max_abs_q"],
        max_abs_k=bnd["max_abs_k"],
        qk_abs_sum=bnd["qk_abs_sum"],
        max_abs_do=do.abs().max().item(),
        max_abs_lse=_max_abs_lse(c["lse_lo"], c["lse_hi"]),
        lse_error=lse_rows.max().item(),
        scale=scale,
        exp2_error=c["errs"]["exp2_error"],
        storage_rounding=c["rounding"],
        dot=c["dot"],
    )
    return torch.minimum(old, _dv_running_bound(q, k, do, prob_abs_do, is_causal, scale, c, lse_rows, cache=cache))


def _delta_output_error(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    do: torch.Tensor,
    out: torch.Tensor,
    is_causal: bool,
    scale: float,
    score_error: float,
) -> torch.Tensor:
    """A certified bound [B, Hq, S] on ``|sum_c dO_ic (out_ic - O_ic)|`` (O the exact output): with
    ``O~, e = _out_bounds`` and ``z~ = out - O~`` (one rounding, ``|z - z~| <= u |z~| / (1 - u)``),
    ``|sum dO z~|`` computed, plus its ``dot_error``, plus ``u / (1 - u) sum |dO z~|``, plus ``sum |dO| e``."""
    vr = v.to(F64).repeat_interleave(q.shape[1] // k.shape[1], 1)
    e_dim, parts = do.shape[-1], []
    c = _float_up(Fraction(cb.U64) / (1 - Fraction(cb.U64)))
    for r0, qc, kr in _row_blocks(q, k):
        s = _scores(r0, qc, kr, is_causal, scale)
        p_lo, p_up = cb.softmax_bounds(s, score_error)
        o, o_err = _out_bounds(torch.softmax(s, -1), p_lo, p_up, vr)
        rows = slice(r0, r0 + qc.shape[2])
        d, z = do[:, :, rows].to(F64), out[:, :, rows].to(F64) - o
        a = cb.sum_upper(cb.mul_upper(d, z), -1)
        err = cb.add_upper(
            cb.dot_error(a, e_dim), cb.add_upper(cb.scale_upper(a, c), cb.sum_upper(cb.mul_upper(d, o_err), -1))
        )
        parts.append(cb.add_upper((d * z).sum(-1).abs(), err))
    return torch.cat(parts, 2)


def _chain_delta_error(coefs: dict, out: torch.Tensor, dof: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``eD_i = d0 + d1 sum_c |o_ic dO_ic| + sum_c (r W_ic + a) |dO_ic|`` of :func:`attention_grad_chain`
    [B, Hq, S], every sum a certified upper bound (``o = out`` the stored output, ``W >= P |v|``)."""
    t1 = cb.sum_upper(cb.mul_upper(out.to(F64), dof), -1)
    t2 = cb.sum_upper(cb.mul_upper(w, dof), -1)
    t3 = cb.sum_upper(dof.abs(), -1)
    return cb.add_upper(
        cb.add_upper(cb.scale_upper(t1, coefs["d1"]), cb.scale_upper(t2, coefs["r"])),
        cb.add_upper(cb.scale_upper(t3, coefs["a"]), _float_up(coefs["d0"])),
    )


def _grad_pair_factors(c: dict, x1: torch.Tensor, q: torch.Tensor) -> dict[str, torch.Tensor]:
    """``gacc_A (E x)``, ``gacc_B (E x)`` (``Ojas.Attention.Float.DkDqError``) per pair at ``E x = (1 + ue)
    X x`` from ``x1 >= X x - 1`` (:func:`_pair_exp2_factors`), rounded up: both affine in ``X - 1`` with
    nonnegative coefficients, ``gacc_A = (1 + us)((1 + u)^2 (1 + ue) - 1) + us + (1 + us)(1 + u)^2 (1 + ue)
    (X - 1)``, ``gacc_B = (1 + us)(1 + u)(1 + ue) (1 + (X - 1))``."""
    u = Fraction(_FP32_U)
    us, _ = (Fraction(x) for x in _storage(q.dtype, c["rounding"]))
    e1 = 1 + Fraction(c["errs"]["exp2_error"])
    a1, b1 = (1 + us) * (1 + u) * (1 + u) * e1, (1 + us) * (1 + u) * e1
    return dict(
        ga=cb.add_upper(cb.scale_upper(x1, a1), _float_up(a1 - (1 + us) + us)),
        gb=cb.add_upper(cb.scale_upper(x1, b1), _float_up(b1)),
    )


def _grad_pair_terms(blk: dict, h: dict, cr: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per pair of a block (:func:`_dscores`), before the factor ``|w|``: ``py = P~ y`` (float64),
    ``h1 >= P |dP - D|``, ``ew >= |py - P (dP - D)|`` (``|P~ - P| |y| + P |y - Y| + u |py|``), the
    weight ``rw >= gacc_A(E) h1 + gacc_B(E) P cR`` of ``r`` (``cR`` the row's ``(1 + u)(eP + eD_i) + ea``,
    ``h = {"ga", "gb"}`` the pairs' own terms, :func:`_grad_pair_factors`) and ``vis`` (1 where visible)."""
    t = _grad_pair_base(blk)
    return dict(t, rw=_grad_pair_rw(blk, t, h, cr))


def _grad_pair_base(blk: dict) -> dict[str, torch.Tensor]:
    """:func:`_grad_pair_terms` but ``rw`` (which alone depends on the premises): ``py``, ``h1``, ``ew``, ``vis``."""
    pr, p_lo, p_up, y = blk["pr"], blk["p_lo"], blk["p_up"], blk["y"]
    py = pr * y
    dp = torch.maximum(cb.add_upper(pr, -p_lo), cb.add_upper(p_up, -pr)).clamp_min(0.0)
    ew = cb.add_upper(cb.add_upper(cb.mul_upper(dp, y), cb.mul_upper(p_up, blk["ey"])), cb.mul_upper(py, cb.U64))
    h1 = cb.mul_upper(p_up, blk["ya"])
    return dict(py=py, h1=h1, ew=ew, vis=(blk["s"] > -math.inf).to(F64))


def _grad_pair_rw(blk: dict, t: dict, h: dict, cr: torch.Tensor) -> torch.Tensor:
    """:func:`_grad_pair_terms`' ``rw`` from its other terms ``t`` (:func:`_grad_pair_base`)."""
    return cb.add_upper(cb.mul_upper(h["ga"], t["h1"]), cb.mul_upper(h["gb"], cb.mul_upper(blk["p_up"], cr)))


def _grad_tile_step(acc: ar.RunningAcc, t: dict, w: torch.Tensor, gc: float, active: torch.Tensor) -> None:
    """One query tile of dK: ``t`` the pair terms of :func:`_grad_pair_terms` [.., keys, rows] (rows the
    tile's items), ``w`` the rows' ``q`` [.., rows, E]: ``z = py w`` summed in float64 within
    ``dot_error`` plus ``ew |w|``, ``sum |z| <= h1 |w|``, ``sum r <= rw |w| + gc n_visible``."""
    _grad_tile_steps([acc], t, [t["rw"]], w, [gc], active)


def _grad_tile_steps(
    accs: list[ar.RunningAcc],
    t: dict,
    rws: list[torch.Tensor],
    w: torch.Tensor,
    gcs: list[float],
    active: torch.Tensor,
) -> None:
    """:func:`_grad_tile_step` for several accumulators of the same tile, each with its own ``rw`` and ``gc``
    (``t``'s ``rw`` not read): ``z``, its error and ``sum |z|`` once, ``sum r`` per accumulator."""
    wa = w.abs()
    a = ar.up_matmul(t["h1"], wa)
    e_w = ar.up_matmul(t["ew"], wa)
    err = ar.up_add(ar.up_dot_error(ar.up_add(a, e_w), w.shape[-2]), e_w)
    z = t["py"] @ w
    for acc, rw, gc in zip(accs, rws, gcs):
        r = ar.up_add(ar.up_matmul(rw, wa), ar.up_mul(t["vis"].sum(-1, keepdim=True), gc))
        acc.step(z, err, a, r, active)


def _dq_block_error(
    t: dict, kf: torch.Tensor, gc: float, n_active: torch.Tensor, qn: int, g: tuple[float, float, float]
) -> torch.Tensor:
    """``run_err_split + sum r`` of dQ (upper bound) for a block of query rows, every key tile of ``qn`` keys
    at once (:func:`~ojas_ref.verification.bounds.attention_running.running_error_prefix`): ``t`` the
    pair terms of :func:`_grad_pair_terms` [.., rows, Sk], ``kf`` the float64 keys [.., Sk, E],
    ``n_active`` [rows, 1] the number of key tiles the dQ kernel runs for each row, ``g`` the
    accumulating dot's ``(g_acc, g_dot, g_abs)``
    (:func:`~ojas_ref.verification.bounds.attention_running.acc_constants_up`); the last tile padded with
    zero items (exact zeros, counted in its ``dot_error``)."""
    return _dq_block_errors(t, [t["rw"]], kf, [gc], n_active, qn, g)[0]


def _dq_block_errors(
    t: dict,
    rws: list[torch.Tensor],
    kf: torch.Tensor,
    gcs: list[float],
    n_active: torch.Tensor,
    qn: int,
    g: tuple[float, float, float],
) -> list[torch.Tensor]:
    """:func:`_dq_block_error` for several ``rw`` and ``gc`` of the same pairs (``t``'s ``rw`` not read): the
    tiles' sums, errors and ``sum |z|`` once, ``sum r`` and the running fold per pair of them."""
    sk = kf.shape[-2]
    n_t, pad = -(-sk // qn), -(-sk // qn) * qn - sk
    kt = torch.nn.functional.pad(kf, (0, 0, 0, pad)).unflatten(-2, (n_t, qn)).movedim(-3, 0)
    ka = kt.abs()
    rows = t["py"].shape[-2]
    sub = max(1, 2**25 // (n_t * kf.shape[0] * kf.shape[1] * kf.shape[-1]))  # [tiles, .., sub, E] tensors
    outs: list[list[torch.Tensor]] = [[] for _ in rws]

    def tiles(x: torch.Tensor, i0: int) -> torch.Tensor:
        return torch.nn.functional.pad(x[..., i0 : i0 + sub, :], (0, pad)).unflatten(-1, (n_t, qn)).movedim(-2, 0)

    for i0 in range(0, rows, sub):
        tt = {n: tiles(x, i0) for n, x in t.items() if n != "rw"}
        a = ar.up_matmul(tt["h1"], ka)
        e_w = ar.up_matmul(tt["ew"], ka)
        err = ar.up_add(ar.up_dot_error(ar.up_add(a, e_w), qn), e_w)
        z = tt["py"] @ kt
        for out, rw, gc in zip(outs, rws, gcs):
            r = ar.up_add(ar.up_matmul(tiles(rw, i0), ka), ar.up_mul(tt["vis"].sum(-1, keepdim=True), gc))
            out.append(ar.running_error_prefix(z, err, a, r, n_active[i0 : i0 + sub], *g))
    return [torch.cat(out, -2) for out in outs]


def _pair_dp_errors(
    r0: int,
    do: torch.Tensor,
    v: torch.Tensor,
    pd_up: torch.Tensor,
    is_causal: bool,
    dot: DotModel,
    runs: list[torch.Tensor] | None = None,
) -> torch.Tensor:
    """float64 [..., R, Sk]: per pair of the rows ``do`` [..., R, Ev] (rows ``r0 ..``) and the values ``v``
    [..., Sk, Ev] (the kernels' dtype, one per row head), an upper bound ``eP`` of ``|dp - dO_i . v_j|``
    for BOTH backward kernels' ``dp`` dots (the dK/dV kernel's ``dot(v, dO^T)``, the dQ kernel's
    ``dot(dO, v^T)``), the per-pair premise of ``dk_error_acc_running_pp`` / ``dq_error_acc_running_pp``:
    the dot model's worst case at the pair's own ``pd_up >= sum_c |dO_ic v_jc|`` (``gp_rel pd_up + gp_abs``,
    ``Ojas.Attention.Float.DkDqError.dm_eP_bound``), with a tensor-core model with blocks its minimum with
    the model's actual error on the data (:func:`~ojas_ref.verification.score_errors.model_dots`, tested
    against the kernels, not proved equal; the larger of the two operand orders) against the float64 dot,
    within ``dot_error(pd_up)`` of the real one. Under a causal mask the keys after the block's last row
    keep the worst case (masked for every row). ``runs``: the model's dots of these rows where already computed
    (:func:`_dp_slices`, [..., R, >= n], any device; 0 after the last row of each chunk of
    ``score_errors._CAUSAL_ROWS`` rows under a causal mask): the same values at the pairs computed, and the
    worst case kept at the others (masked pairs, after the row: no visible pair's bound changes)."""
    gp_rel, gp_abs = dot_error_constants(dot, v.shape[-1])
    bound = cb.add_upper(cb.scale_upper(pd_up, gp_rel), _float_up(gp_abs))
    model = _dot_model(dot)
    if model == "fp32" or model.block is None:
        return bound
    n = min(v.shape[-2], r0 + do.shape[-2]) if is_causal else v.shape[-2]
    vn = v[..., :n, :]
    exact = do.to(F64) @ vn.to(F64).transpose(-1, -2)
    slack = cb.dot_error(pd_up[..., :n], v.shape[-1])
    if runs is None:
        runs = [se.model_dots(do, vn, dot)]
        if isinstance(model, Tf32x3Dot):  # lo a . hi b first: the order matters
            runs.append(se.model_dots(vn, do, dot).transpose(-1, -2))
        computed = None
    else:
        runs = [m[..., :n].to(device=do.device, dtype=F64) for m in runs]
        i = torch.arange(r0, r0 + do.shape[-2], device=do.device)[:, None]
        ends = ((i // se._CAUSAL_ROWS + 1) * se._CAUSAL_ROWS).clamp_max(v.shape[-2])  # each chunk's keys
        computed = torch.arange(n, device=do.device)[None, :] < ends if is_causal else None
    err = functools.reduce(
        torch.maximum, (torch.maximum(cb.add_upper(m, -exact), cb.add_upper(exact, -m)) for m in runs)
    )
    got = torch.minimum(bound[..., :n], cb.add_upper(err, slack))
    bound[..., :n] = got if computed is None else torch.where(computed, got, bound[..., :n])
    return bound


def _grad_running_bounds(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    do: torch.Tensor,
    is_causal: bool,
    scale: float,
    c: dict,
    delta_error: torch.Tensor,
    lse_error: float | torch.Tensor,
    ex: dict,
    cache: dict | None = None,
) -> dict[str, torch.Tensor]:
    """``dk_error_acc_running_pp`` and ``dq_error_acc_running_pp`` (``grad_error_acc_running_pp``,
    ``Ojas.Attention.Float.RunningAccErrorPP``: ``Ojas.Attention.Float.RunningAccError``'s
    ``dk_error_acc_running``, ``dq_error_acc_running`` with the ``dp`` dot's error per pair) for every
    stored dK [B, Hkv, Sk, E] and dQ [B, Hq, Sq, E] entry: ``grad_bound scale ucs (run_err_split g_acc g_dot
    g_abs as cs + sum_x r x) S1`` (``acc_dot_split_model``'s constants, ``S1`` the sums of :func:`exact_grads`
    ``ex``) over the tiles the kernels run, in their order: dK the dK/dV kernel's query tiles
    (:func:`_first_query_tile`, every query head of the group), dQ the dQ kernel's key tiles
    (:func:`_last_key_end`). Items have ``z x = P (dP - D) w`` and
    ``r x = gacc_A(E x) h1 x + gacc_B(E x) h2 x + gacc_c(E x, Ym, (1 + u)(eP x + eDm) + ea, W)`` (0 where
    masked; ``gacc_c`` taken at the largest ``eP``, monotone), ``E x = (1 + ue) X x`` from the pair's own
    score error (:func:`_pair_exp2_factors`, the larger of the dK/dV kernel's ``dot(k, q^T)`` and the dQ
    kernel's ``dot(q, k^T)``; :func:`_grad_pair_factors`) and its query row's lse premise ``Dl x``
    (``lse_error`` [B, Hq, Sq] per row or one for every row, :func:`_exp2_premises`), ``h1 = P |dP - D| |w|``, ``h2 = P ((1 + u)(eP x
    + eD_i) + ea) |w|``, ``eD = delta_error`` [B, Hq, Sq], ``eP x`` the pair's own ``dp`` error
    (:func:`_pair_dp_errors`, at most the dot model's at ``ex``'s ``dp_abs_sum``), ``Ym`` ``max_abs_y``."""
    return _grad_running_bounds_modes(q, k, v, do, is_causal, scale, c, [(delta_error, lse_error, ex)], cache)[0]


def _grad_running_bounds_modes(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    do: torch.Tensor,
    is_causal: bool,
    scale: float,
    c: dict,
    modes: list[tuple[torch.Tensor, float | torch.Tensor, dict]],
    cache: dict | None = None,
) -> list[dict[str, torch.Tensor]]:
    """:func:`_grad_running_bounds` for each ``(delta_error, lse_error, ex)`` of ``modes`` (the premises of
    :func:`grad_error_bounds`' inputs), in one pass over the pairs: what does not depend on the premises (the
    pairs' float64 quantities, score and ``dp`` errors, ``P (dP - D)`` and its sums, their errors) computed once
    per block and tile, the premises' terms (``X x - 1``, ``r x`` and its sums, the running accumulators) per
    mode; each mode's values those of its own call (the same operations on the same numbers)."""
    dot, bnd = c["dot"], c["bnd"]
    u, ea, ee = Fraction(_FP32_U), Fraction(_FP32_ETA), Fraction(_EXP2_ABS_ERROR)
    us, es_s = (Fraction(x) for x in _storage(q.dtype, c["rounding"]))
    b, hq, sq, e_dim = q.shape
    hkv, sk, ev = k.shape[1], k.shape[2], v.shape[-1]
    gp_rel, gp_abs = dot_error_constants(dot, ev)
    bm, qn = c["bm"], c["qn"]
    gcs, dk_accs, dq_errs, premises = [], [], [], []
    for delta_error, lse_error, ex in modes:
        ep = gp_rel * Fraction(ex["dp_abs_sum"]) + gp_abs
        crm = (1 + u) * (ep + Fraction(delta_error.max().item())) + ea
        k0 = (1 + us) * ((1 + u) * ee * ((1 + u) * Fraction(ex["max_abs_y"]) + crm) + ea) + es_s
        gcs.append({name: _float_up(k0 * Fraction(bnd[f"max_abs_{name}"])) for name in ("q", "k")})  # gacc_c
        dk_accs.append(ar.RunningAcc((b, hkv, sk, e_dim), q.device, *ar.acc_constants_up(dot, bm)))
        dq_errs.append(torch.zeros(b, hkv, hq // hkv, sq, e_dim, dtype=F64, device=q.device))
        dl, am = _exp2_premises(c, lse_error, e_dim, scale)
        premises.append((delta_error.unflatten(1, (hkv, -1)).unbind(2), dl.unflatten(1, (hkv, -1)).unbind(2), am))
    first = _first_query_tile(sk, bm, c["bn"], is_causal, q.device)[:, None]
    n_keys = -(-_last_key_end(sq, sk, c["qm"], is_causal, q.device)[:, None] // qn)  # key tiles run per row
    g_dq = ar.acc_constants_up(dot, qn)
    kf, vf = k.to(F64), v.to(F64)
    rows = _block_rows(b * hkv * sk, bm)
    heads = (t.unflatten(1, (hkv, -1)).unbind(2) for t in (q, do))
    for gi, (qh, dh) in enumerate(zip(*heads)):
        for r0 in range(0, sq, rows):
            qc = qh[:, :, r0 : r0 + rows].to(F64)
            blk = _dscores(r0, qc, kf, vf, dh[:, :, r0 : r0 + rows].to(F64), is_causal, scale, c["es"])
            scores = _score_slices(q, k, is_causal, scale, dot, "both", cache, slice(r0, r0 + rows), gi)
            delta = se.score_error_block(r0, qh[:, :, r0 : r0 + rows], k, is_causal, scale, dot, "both", scores)
            runs = _dp_slices(q, do, v, is_causal, dot, cache, slice(r0, r0 + rows), gi)
            e_p = _pair_dp_errors(r0, dh[:, :, r0 : r0 + rows], v, blk["pd_up"], is_causal, dot, runs)
            t = _grad_pair_base(blk)
            rws = []
            for eh, lh, am in premises:  # _pair_exp2_factors at the mode's premises, of the same delta
                x1 = ar.exp2_factor_minus_one(delta, lh[gi][:, :, r0 : r0 + rows][..., None], am)
                cr = cb.add_upper(  # (1 + u)(eP x + eD_i) + ea per pair
                    cb.scale_upper(cb.add_upper(e_p, eh[gi][:, :, r0 : r0 + rows, None].to(F64)), 1 + u),
                    _float_up(ea),
                )
                rws.append(_grad_pair_rw(blk, t, _grad_pair_factors(c, x1, q), cr))
                del x1, cr
            del blk, delta, e_p
            for t0 in range(0, qc.shape[2], bm):  # dK: the query tiles of this block, items = rows
                tt = {n: x[..., t0 : t0 + bm, :].transpose(-1, -2) for n, x in t.items()}
                rw_t = [rw[..., t0 : t0 + bm, :].transpose(-1, -2) for rw in rws]
                _grad_tile_steps(dk_accs, tt, rw_t, qc[..., t0 : t0 + bm, :], [g["q"] for g in gcs], first <= r0 + t0)
            got = _dq_block_errors(t, rws, kf, [g["k"] for g in gcs], n_keys[r0 : r0 + rows], qn, g_dq)
            for dq_err, x in zip(dq_errs, got):
                dq_err[:, :, gi, r0 : r0 + rows] = x
    sc, ucs = Fraction(scale), Fraction(_SCALE_CONST_ERROR)
    return [
        dict(
            dk=ar.grad_bound_up(dk_acc.error(), ex["dk_sums"][0], sc, ucs, us, es_s),
            dq=ar.grad_bound_up(dq_err.flatten(1, 2), ex["dq_sums"][0], sc, ucs, us, es_s),
        )
        for dk_acc, dq_err, (_, _, ex) in zip(dk_accs, dq_errs, modes)
    ]


def _grad_premises(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    do: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    is_causal: bool,
    scale: float,
    inputs: str,
    c: dict,
    cache: dict | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(eD, lse_error)``: the premises ``|delta_i - D_i| <= eD_i`` and ``|lse_i - LSE_i| <= lse_error_i``
    [B, Hq, Sq] of the dQ / dK theorems: ``attention_delta_error_bound`` plus, "proved",
    ``sum_c |dO_ic| e_ic`` of the a-posteriori forward bound (``dot_R_perturb``) and
    ``attention_lse_error_bound`` (:func:`_lse_error`: with a device's dot model its minimum with each row's
    ``attention_lse_error_masked_tf32x3_op_pp`` at its own constants, of the forward bound's own pass over the
    pairs, :func:`_forward_bounds`); with a device's dot model the ``sum_c |dO_ic| e_ic`` term's minimum with
    ``Ojas.Attention.Float.DeltaKernelError.attention_delta_kernel_error_tf32x3_op`` / ``_tc_op`` (both bound
    ``|dO_i . out_i - D_i|``: :func:`~ojas_ref.verification.attention_delta.delta_kernel_error_bound`);
    "measured", the saved tensors' own deviations (certified: :func:`_delta_output_error`, the lse between
    :func:`_lse_bounds`)."""
    dof = do.to(F64)
    ed = attention_delta_error_bound(cb.sum_upper(cb.mul_upper(out.to(F64), dof), -1), v.shape[-1])
    if inputs == "proved":
        fwd, lse_pp = _forward_bounds(q, k, v, is_causal, scale, None, cache)
        e_out = cb.sum_upper(cb.mul_upper(fwd, dof), -1)
        if c["dot"] != "fp32":
            from ojas_ref.verification.attention_delta import delta_kernel_error_bound

            e_out = torch.minimum(e_out, delta_kernel_error_bound(q, k, v, do, out, is_causal, scale, c, cache=cache))
        ed = cb.add_upper(ed, e_out)
        uniform = _lse_error(q, k, is_causal, scale, c["dot"], c["errs"], c["bnd"], math.inf)
        rows = torch.full(ed.shape, uniform, dtype=F64, device=ed.device)
        return ed, rows if lse_pp is None else torch.minimum(rows, lse_pp)
    ed = cb.add_upper(ed, _delta_output_error(q, k, v, do, out, is_causal, scale, c["es"]))
    saved = lse.to(F64)
    dev = torch.maximum(cb.add_upper(c["lse_hi"], -saved), cb.add_upper(saved, -c["lse_lo"]))
    return ed, dev.clamp_min(0.0)


def _chain_grad_bounds(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    do: torch.Tensor,
    out: torch.Tensor,
    is_causal: bool,
    scale: float,
    c: dict,
) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """``(exact_grads, dq bound, dk bound)`` of ``attn_grad_chain_q`` (:func:`attention_grad_chain`,
    the blocked float32 dots): ``eD_i`` from its ``(d0, d1, r, a)`` (:func:`_chain_delta_error`; these
    depend on the forward's arguments only, so a first answer at ``dp_abs_sum = max_abs_y = 0`` gives
    them for :func:`exact_grads`' sums, and the final answers are checked to carry the same), dQ with
    each row's own ``eD_i``, dK with their max."""
    g, sq, sk, bnd = q.shape[1] // k.shape[1], q.shape[2], k.shape[2], c["bnd"]
    bm, bn = c["bm"], c["qn"]
    chain = dict(
        n_keys=sk,
        head_dim=q.shape[-1],
        value_dim=v.shape[-1],
        block_n=bnd["block_n"],
        dtype=q.dtype,
        max_abs_q=bnd["max_abs_q"],
        max_abs_k=bnd["max_abs_k"],
        max_abs_v=v.abs().max().item(),
        max_abs_lse=_max_abs_lse(c["lse_lo"], c["lse_hi"]),
        qk_abs_sum=bnd["qk_abs_sum"],
        scale=scale,
        storage_rounding=c["rounding"],
        **c["errs"],
    )
    tiling = {
        "dq": dict(max_abs_w=bnd["max_abs_k"], n_items=sk, block=bn, n_tiles=-(-sk // bn)),
        "dk": dict(max_abs_w=bnd["max_abs_q"], n_items=g * sq, block=bm, n_tiles=g * -(-sq // bm)),
    }
    first = attention_grad_chain(**chain, **tiling["dq"], dp_abs_sum=0.0, max_abs_y=0.0)
    ed = _chain_delta_error(first, out, do.to(F64), _prob_abs_v(q, k, v, is_causal, scale, c["es"]))
    ex = exact_grads(q, k, v, do, is_causal, scale, ed)
    coefs = {
        name: attention_grad_chain(**chain, **t, dp_abs_sum=ex["dp_abs_sum"], max_abs_y=ex["max_abs_y"])
        for name, t in tiling.items()
    }
    for name, cf in coefs.items():
        if any(cf[x] != first[x] for x in ("d0", "d1", "r", "a")):
            raise RuntimeError(f"attn_grad_chain_q's delta coefficients moved with the backward's data ({name})")
    dq = attention_grad_chain_bound(coefs["dq"], ex["dq_sums"], ed[..., None], sk)
    dk = attention_grad_chain_bound(coefs["dk"], ex["dk_sums"], ed.max().item(), g * sq)
    return ex, dq, dk


def _apriori_grad_bounds(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, c: dict, ex: dict, ed: torch.Tensor, lse_err: float, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(dq bound, dk bound)`` of ``attention_dq_error_bound``, ``attention_dk_error_bound`` (``dq_error``,
    ``dk_error``; ``*_acc`` with a dot model) at the premises ``eD = ed``, ``lse_err``."""
    g, sq, sk, ev, bnd = q.shape[1] // k.shape[1], q.shape[2], k.shape[2], v.shape[-1], c["bnd"]
    bm, bn = c["bm"], c["qn"]
    common = dict(
        dtype=q.dtype,
        max_abs_q=bnd["max_abs_q"],
        max_abs_k=bnd["max_abs_k"],
        qk_abs_sum=bnd["qk_abs_sum"],
        dp_abs_sum=ex["dp_abs_sum"],
        max_abs_y=ex["max_abs_y"],
        max_delta_error=ed.max().item(),
        max_abs_lse=_max_abs_lse(c["lse_lo"], c["lse_hi"]),
        lse_error=lse_err,
        scale=scale,
        exp2_error=c["errs"]["exp2_error"],
        storage_rounding=c["rounding"],
        dot=c["dot"],
    )
    dk = attention_dk_error_bound(ex["dk_sums"], g * sq, g * -(-sq // bm), q.shape[-1], ev, block_m=bm, **common)
    dq = attention_dq_error_bound(ex["dq_sums"], sk, -(-sk // bn), q.shape[-1], ev, block_n=bn, **common)
    return dq, dk


def grad_error_bounds(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    do: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    is_causal: bool,
    scale: float,
    inputs: str = "proved",
    *,
    cache: dict | None = None,
) -> dict:
    """The float64 exact ``dq``, ``dk`` and the proved a-posteriori bounds ``dq_bound``, ``dk_bound``
    on |kernel - exact| entry by entry for the backward kernels' tiles (``default_config``), fed with
    the forward's saved ``out`` and ``lse`` (``flash_attention_forward``; the forward is
    deterministic, so these are the tensors the autograd backward reads).

    ``inputs="proved"`` with the blocked float32 dots (``kernel_dot`` "fp32": the interpreter): ONE
    extracted function per bound (:func:`_chain_grad_bounds`: ``Ojas.Bounds.AttentionChain.attn_grad_chain_q``;
    ``attn_dq_chain_q_sound``, ``attn_dk_chain_q_sound``: the chain dO -> Delta -> dS -> dQ, dK composed
    in Coq, the forward's lse and stored output's errors discharged there), alone. Otherwise (the GPU's
    tensor cores and 3xTF32, where no composed theorem exists, or ``inputs="measured"``) entry by
    entry the smaller of two theorems' values:

    * the RUNNING bounds (:func:`_grad_running_bounds`): ``dk_error_acc_running_pp``,
      ``dq_error_acc_running_pp`` (``Ojas.Attention.Float.RunningAccErrorPP``: ``RunningAccError``'s
      ``dk_error_acc_running``, ``dq_error_acc_running`` with the ``dp`` dot's error per pair) over the
      tiles the kernels run in their order, each pair's score error and ``dp`` error its own
      (:mod:`~ojas_ref.verification.score_errors`, :func:`_pair_dp_errors`: the smaller of the dot model's
      actual error on the data and its worst case at the pair's ``sum |q k|`` / ``sum |dO v|``, both proved);
    * the a-priori ``attention_dq_error_bound``, ``attention_dk_error_bound`` (``dq_error``,
      ``dk_error``; with a dot model ``dq_error_acc``, ``dk_error_acc``);

    both at the premises ``|lse_i - LSE_i| <= lse_error_i`` (the a-priori ones at the largest),
    ``|delta_i - D_i| <= eD_i`` of
    :func:`_grad_premises`: ``inputs="proved"``, the forward theorems (``attention_lse_error_bound`` and
    ``attention_lse_error_masked_tf32x3_op_pp``;
    ``attention_delta_error_bound`` plus ``sum_c |dO_ic| e_ic`` with ``e`` the a-posteriori forward
    bound :func:`forward_posteriori_bound`, ``dot_R_perturb``), composed here; ``inputs="measured"``,
    the saved tensors' own deviations from the exact lse and ``dO . O`` (certified upper bounds: the
    lse between :func:`_lse_bounds`, :func:`_delta_output_error`): a premise checked on these inputs,
    not a theorem about the forward.
    Every data sum here is a certified upper bound of the exact one (:mod:`~ojas_ref.verification.bounds.certified`).
    No theorem covers: FMA contraction, ``exp2_error`` (an assumption); with "fp32" the MMA's order;
    the float64 evaluation of the running premises' ``as``, ``cs`` and the score errors (certified upper
    bounds under :mod:`~ojas_ref.verification.bounds.certified`'s premises on torch's float64 operations).
    ``cache``: as :func:`forward_posteriori_bound`'s (one dict for both ``inputs`` and the other bounds of the
    same ``q``, ``k``, ``v``, ``do``: the model's scores and ``dp`` dots, the forward's bounds, the constants
    computed once); without one, a cache of this call."""
    if inputs not in ("proved", "measured"):
        raise ValueError(f"inputs must be 'proved' or 'measured', got {inputs!r}")
    return grad_error_bounds_modes(q, k, v, do, out, lse, is_causal, scale, (inputs,), cache=cache)[inputs]


def grad_error_bounds_modes(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    do: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    is_causal: bool,
    scale: float,
    inputs: tuple[str, ...] = ("proved", "measured"),
    *,
    cache: dict | None = None,
) -> dict[str, dict]:
    """``{mode: grad_error_bounds(..., mode)}`` for each mode of ``inputs`` ("proved", "measured"), in one pass
    over the pairs: :func:`exact_grads`' sums and the running bounds (:func:`_exact_grads_modes`,
    :func:`_grad_running_bounds_modes`) computed together, what does not depend on a mode's premises once.
    Each result holds the values of :func:`grad_error_bounds` for its mode (the same theorems, the same
    operations on the same numbers). ``cache``: as :func:`grad_error_bounds`'."""
    for mode in inputs:
        if mode not in ("proved", "measured"):
            raise ValueError(f"inputs must be 'proved' or 'measured', got {mode!r}")
    if len(set(inputs)) != len(inputs):
        raise ValueError(f"inputs must not repeat a mode, got {inputs!r}")
    cache = {} if cache is None else cache
    c = _backward_constants(q, k, is_causal, scale, v.shape[-1], cache)
    got, rest = {}, []
    for mode in inputs:
        if mode == "proved" and c["dot"] == "fp32":
            ex, dq, dk = _chain_grad_bounds(q, k, v, do, out, is_causal, scale, c)
            got[mode] = dict(dq=ex["dq"], dk=ex["dk"], dq_bound=dq, dk_bound=dk)
        else:
            rest.append(mode)
    if rest:
        prem = [_grad_premises(q, k, v, do, out, lse, is_causal, scale, mode, c, cache) for mode in rest]
        exs = _exact_grads_modes(q, k, v, do, is_causal, scale, [ed for ed, _ in prem], cache)
        if len(rest) == 1:  # one mode: _grad_running_bounds itself
            runs = [_grad_running_bounds(q, k, v, do, is_causal, scale, c, *prem[0], exs[0], cache)]
        else:
            modes = [(ed, le, ex) for (ed, le), ex in zip(prem, exs)]
            runs = _grad_running_bounds_modes(q, k, v, do, is_causal, scale, c, modes, cache)
        for mode, (ed, lse_err), ex, run in zip(rest, prem, exs, runs):
            dq, dk = _apriori_grad_bounds(q, k, v, c, ex, ed, lse_err.max().item(), scale)
            got[mode] = dict(
                dq=ex["dq"], dk=ex["dk"], dq_bound=torch.minimum(dq, run["dq"]), dk_bound=torch.minimum(dk, run["dk"])
            )
    return {mode: got[mode] for mode in inputs}


def observed_error(out: torch.Tensor, ref: torch.Tensor, v: torch.Tensor) -> float:
    """max |out - ref| / max|v| over every output coordinate (NaN refused)."""
    if torch.isnan(out).any():
        raise ValueError("NaN in the kernel's output")
    return ((out.to(F64) - ref).abs().max() / v.abs().max().to(F64)).item()


@functools.lru_cache(maxsize=None)
def _unary_kernel(op: str):
    """A Triton kernel storing ``op(x)`` (``tl.exp2``, ``tl.log2``, or a cast to the
    output's dtype) for a float32 vector."""
    import triton
    import triton.language as tl

    @triton.jit
    def kernel(X, Y, n, OP: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        ok = offs < n
        x = tl.load(X + offs, mask=ok, other=1.0)
        if OP == "exp2":
            y = tl.exp2(x)
        elif OP == "log2":
            y = tl.log2(x)
        else:
            y = x
        tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=ok)

    return kernel


def _run_unary(op: str, x: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    import triton

    y = torch.empty(x.shape, dtype=out_dtype, device=x.device)
    # Without FMA contraction, as the attention and cross-entropy kernels launch: tl.log2's
    # expansion has a product and a sum a contracting build would fuse.
    _unary_kernel(op)[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), OP=op, BLOCK=1024, enable_fp_fusion=False)
    return y


@functools.lru_cache(maxsize=None)
def measured_exp2_error(device: str, points: int = 1 << 22) -> tuple[float, float, bool]:
    """tl.exp2 on ``points`` float32 arguments evenly spread over [-150, 0]: its max
    relative error where 2^x is normal, its max absolute error below, and whether
    ``exp2(0) == 1`` exactly (a premise of the masked theorem)."""
    x = torch.linspace(-150.0, 0.0, points, device=device, dtype=torch.float32)
    y = _run_unary("exp2", x, torch.float32)
    exact = torch.exp2(x.to(F64))
    normal = exact >= 2.0**-126
    err = (y.to(F64) - exact).abs()
    return (err / exact)[normal].max().item(), err[~normal].max().item(), bool(y[-1] == 1.0)


@functools.lru_cache(maxsize=None)
def measured_log2_error(device: str, points: int = 1 << 22) -> float:
    """max |tl.log2(x) - log2(x)| over ``points`` float32 x spread geometrically over
    [0.5, 2^24] (the kernel's row sums l lie in [1, n_keys])."""
    x = torch.exp2(torch.linspace(-1.0, 24.0, points, device=device, dtype=torch.float64)).to(torch.float32)
    y = _run_unary("log2", x, torch.float32)
    return (y.to(F64) - torch.log2(x.to(F64))).abs().max().item()


@functools.lru_cache(maxsize=None)
def storage_rounding(device: str, dtype: torch.dtype, points: int = 1 << 16) -> str:
    """How Triton's ``x.to(dtype)`` rounds float32 on ``device`` (the kernels' P and output
    casts), measured against torch's casts: "nearest" (round-to-nearest-even) or "truncate"
    (toward zero; Triton's CPU interpreter for bfloat16); ValueError if neither."""
    if dtype == torch.float32:
        return "nearest"
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(points, generator=gen) * torch.exp2(torch.randint(-10, 10, (points,), generator=gen))).to(device)
    y = _run_unary("cast", x, dtype)
    if torch.equal(y, x.to(dtype)):
        return "nearest"
    trunc = torch.where(
        x.abs() < x.to(dtype).to(torch.float32).abs(),
        torch.nextafter(x.to(dtype), torch.zeros_like(x, dtype=dtype)),
        x.to(dtype),
    )
    if torch.equal(y, trunc):
        return "truncate"
    raise ValueError(f"Triton's float32 -> {dtype} cast on {device} is neither round-to-nearest nor truncation")


@contextlib.contextmanager
def tf32_dots() -> Iterator[None]:
    """Inside the block torch's float32 matmuls run TF32 (``torch.backends.cuda.matmul.fp32_precision
    = "tf32"``; ``allow_tf32 = True`` before torch 2.9), and so do the float32 dots of the attention
    and cross-entropy kernels, which read that setting (``attention_args._dot_precision``): the
    mutant of the float32 bar.  The setting is restored on leaving, also on an exception.  No effect
    on the CPU (the interpreter's dots and the CPU matmuls are IEEE)."""
    mm = torch.backends.cuda.matmul
    if hasattr(mm, "fp32_precision"):
        saved = mm.fp32_precision
        mm.fp32_precision = "tf32"
        try:
            yield
        finally:
            mm.fp32_precision = saved
    else:  # torch < 2.9: allow_tf32 is the setting (reading it after the newer API raises)
        saved = mm.allow_tf32
        mm.allow_tf32 = True
        try:
            yield
        finally:
            mm.allow_tf32 = saved
