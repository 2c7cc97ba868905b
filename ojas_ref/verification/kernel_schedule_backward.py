"""An executable model of the attention backward kernels' schedule, and its bit-for-bit check.

:func:`backward_schedule` runs, with torch float32 tensor operations and the rounding primitives of
:mod:`~ojas_ref.verification.kernel_schedule` (:class:`~ojas_ref.verification.kernel_schedule.Primitives`:
the same two sets, the interpreter's and the device's), what ``ojas_kernels.attention_backward._backward``
launches for one :class:`~ojas_kernels.attention_config.AttentionConfig` (its ``bwd_q`` and ``bwd_kv``),
given the forward's ``out`` and ``lse``:

* ``_bwd_dq_kernel``, one program per (b, h, query tile): ``Delta = row_sum(rnd(o * dO))`` over the
  tile's ``BLOCK_EV`` columns (padding zeros; ``backward_D_identity`` of BackwardCorrect.v, bounded by
  ``delta_close`` of ``Ojas.Attention.Float.DkDqError``), saved for the dK/dV kernel;
  ``lse2 = rnd(lse * log2 e)``; then over the key tiles of ``_key_tiles`` / ``_tile_range`` (masked,
  unmasked, masked: ``Ojas.Attention.Mask.stream_row_masked_keys``), key head ``h // group``:
  ``s = rnd(dot(q, K^T) * qk_scale)``, ``P = exp2(s - lse2)`` (0 where not visible: the recomputed
  softmax, ``row_probs_stream_row`` of Lse.v), ``dP = dot(dO, V^T)``, ``dS = rnd(P * rnd(dP - Delta))``,
  ``dQ = dot(cast(dS), K, dQ)`` (``attention_backward_dQ_key_tiles``; ``dq_kernel`` of DkDqError.v);
  finally ``dQ = rnd(dQ * scale)`` stored in the input dtype;
* ``_bwd_dkdv_kernel``, one program per (b, key head hk, key tile), transposed (rows are keys): for
  ``g = 0 .. group-1`` (query head ``hk * group + g``: GroupedQuery.v's ``gqa_dK_is_derive`` /
  ``gqa_dV_is_derive``, the sum in that order into the same accumulators), over the query tiles of
  ``_query_tiles`` / ``_tile_range``: ``s^T = rnd(dot(K, Q^T) * qk_scale)``, ``P^T = exp2(s^T -
  lse2)`` (0 where not visible), ``dV = dot(cast(P^T), dO, dV)`` (``dv_error`` of DvError.v),
  ``dP^T = dot(V, dO^T)``, ``dS^T = rnd(P^T * rnd(dP^T - Delta))``, ``dK = dot(cast(dS^T), Q, dK)``
  (``attention_backward_query_tiles``; ``dk_kernel`` of DkDqError.v); finally ``dK = rnd(dK * scale)``,
  both stored in the input dtype.

Every dot is the primitive ``dot`` on the operand tiles as the kernel holds them: the same shapes
(``s^T`` is ``dot(K, Q^T)``, not the transpose of ``dot(Q, K^T)``) and, where the kernel passes
``tl.trans`` of a loaded tile (``dO^T``, ``Q`` and ``K`` in the dK and dQ dots), the layout the
interpreter hands ``np.matmul`` (:func:`_trans`: it rounds otherwise on a transposed view than on a
contiguous copy: float32 dK, and the traced bfloat16 dS^T, differed);
``Delta``'s sum is the primitive ``row_sum`` (``tl.sum`` of ``o * dO`` in the dQ
kernel's load layout: on the device :func:`blocked_row_sum`, or ``blocked_sum`` over
:data:`ALIGNED_DELTA_LAYOUTS` for aligned launches). No fused multiply-add (the kernels
compile with ``enable_fp_fusion=False``).

:func:`check_backward` runs ``_backward`` with its ``TRACE`` on (``Delta`` saved; P, dS and the
accumulators stored after every tile) and the model on the same inputs and the same ``out`` /
``lse``, and returns ``None`` when ``Delta``, every traced step and dQ, dK, dV are equal bit for
bit, else a :class:`BackwardMismatch` naming the first differing operation in the order the kernels
run them (``Delta``; each dQ step's P, dS, dq; dQ; each dK/dV step's P^T, dV, dS^T, dK; dV, dK): the
operation, the element, both values and both sides' accumulator of that element after every step
of its program.  Within one step the trace does not separate the scores from ``exp2`` (P), ``dP``'s
dot from the product (dS), or the cast from the dot (the accumulators).

Not covered: dropout (no argument for it) and additive masks (refused), float32 dots in
single-pass TF32 (refused by :func:`~ojas_ref.verification.kernel_schedule.device_primitives`), the order of ``tl.sum`` on the
device for ``Delta`` in other layouts than :func:`blocked_row_sum` and :data:`ALIGNED_DELTA_LAYOUTS`
model (other head dims or warp counts of the dQ kernel), dots that compile to ``mma.sync`` rather than wgmma (the float32 default
tiles: whether ``mma.sync`` accumulates as the record's models is not checked; the GPU tests run
64 x 64 float32 tiles, wgmma as the forward's GPU tests), subnormal products in the tensor-core
emulation.
"""

from __future__ import annotations

import dataclasses
import functools

import torch

from ojas_ref.verification.kernel_schedule import (
    F32,
    Primitives,
    _bits,
    _key_tiles,
    _model_inputs,
    _scale,
    _split_tiles,
    _tile,
    _visible,
    device_primitives,
)
from ojas_ref.verification.kernel_schedule_rowwise import Blocked, blocked_sum

__all__ = [
    "BackwardStep",
    "BackwardSchedule",
    "BackwardMismatch",
    "backward_schedule",
    "check_backward",
    "blocked_row_sum",
    "ALIGNED_DELTA_LAYOUTS",
    "backward_device_primitives",
]

_LOG2E = torch.tensor(1.4426950408889634, dtype=F32)  # the kernels' constant, a float32 there


@dataclasses.dataclass(frozen=True)
class BackwardStep:
    """One tile step of a backward program, as ``TRACE`` records it (float32): ``tile`` = (part,
    start_n) in the dQ kernel, (g, part, start_m) in the dK/dV kernel; ``p`` and ``ds`` the tile's
    P and dS (transposed in the dK/dV kernel: rows are keys), ``acc`` the accumulators after the step
    (dq; or dk, dv), before the final scale."""

    tile: tuple[int, ...]
    p: torch.Tensor
    ds: torch.Tensor
    acc: tuple[torch.Tensor, ...]


@dataclasses.dataclass(frozen=True)
class BackwardSchedule:
    """The model's ``dq`` [B, Hq, Sq, E], ``dk`` [B, Hkv, Sk, E], ``dv`` [B, Hkv, Sk, Ev] (input dtype),
    ``delta`` [B, Hq, Sq] (float32) and, when traced, each program's :class:`BackwardStep` list:
    ``dq_steps[(b, h, start_m)]``, ``dkdv_steps[(b, hk, start_n)]``."""

    dq: torch.Tensor
    dk: torch.Tensor
    dv: torch.Tensor
    delta: torch.Tensor
    dq_steps: dict | None
    dkdv_steps: dict | None


def _query_tiles(
    start_n: int, seq_q: int, seq_k: int, window: int, bm: int, bn: int, causal: bool, has_window: bool, split: bool
) -> tuple[int, int, int, int]:
    """``attention_tiles._query_tiles`` on Python ints (``lo <= a <= b <= hi``)."""
    last_n = min(start_n + bn, seq_k) - 1
    lo, hi, full_lo, full_end = 0, seq_q, 0, seq_q
    if causal:
        lo = start_n
        full_lo = start_n + bn - 1
    if has_window:
        lo = max(lo, start_n - window + 1)
        hi = min(hi, last_n + window)
        full_lo = max(full_lo, start_n + bn - window)
        full_end = min(full_end, start_n + window)
    if start_n + bn > seq_k:
        full_end = 0
    return _split_tiles(lo, hi, full_lo, full_end, bm, split)


def _trans(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The operand ``tl.trans(x)`` of a kernel's ``_dot`` on a loaded tile ``x`` of inputs in ``dtype``:
    in the interpreter a transposed view for float32, a contiguous array for 16-bit inputs (``_dot``
    upcasts them with ``.to(float32)``, which writes a new array)."""
    return x.t() if dtype == F32 else x.t().contiguous()


def _parts(lo: int, a: int, b: int, hi: int, step: int):
    """(part, start) of the tiles of ``_tile_range``'s three parts, in the order they run."""
    for part, (start, end) in enumerate(((lo, a), (a, b), (b, hi))):
        for first in range(start, end, step):
            yield part, first


def backward_schedule(
    grad_out: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    window: int | None = None,
    *,
    config,
    primitives: Primitives,
    trace: bool = False,
) -> BackwardSchedule:
    """``_backward``'s dQ, dK, dV (and its ``Delta``) for these inputs and the forward's ``out`` and
    ``lse`` under ``config`` (an ``AttentionConfig``: its ``bwd_q`` and ``bwd_kv``) with ``primitives``
    (module docstring), computed on the CPU; ``trace``: keep every tile's accumulators. Arguments as
    ``flash_attention`` (``scale`` defaults to 1 / sqrt(E)); a float ``attn_mask`` raises (additive
    masks are not modelled)."""
    from ojas_kernels.attention_args import _launch_args

    (query, key, value, grad_out, out, lse), attn_mask = _model_inputs(
        (query, key, value, grad_out, out, lse), attn_mask, window
    )
    if grad_out.shape != out.shape or out.shape != (*query.shape[:3], value.shape[3]):
        raise ValueError(
            f"grad_out and out must have shape {(*query.shape[:3], value.shape[3])}, "
            f"got {tuple(grad_out.shape)} and {tuple(out.shape)}"
        )
    if lse.shape != query.shape[:3] or lse.dtype != F32:
        raise ValueError(f"lse must be float32 of shape {tuple(query.shape[:3])}, got {lse.dtype} {tuple(lse.shape)}")
    scale = _scale(query, scale)
    batch, heads, seq_q, e = query.shape
    kv_heads, seq_k, ev = key.shape[1], key.shape[2], value.shape[3]
    dtype = query.dtype
    dq = torch.zeros(batch, heads, seq_q, e, dtype=dtype)
    dk = torch.zeros(batch, kv_heads, seq_k, e, dtype=dtype)
    dv = torch.zeros(batch, kv_heads, seq_k, ev, dtype=dtype)
    delta = torch.zeros(batch, heads, seq_q, dtype=F32)
    dq_steps: dict | None = {} if trace else None
    dkdv_steps: dict | None = {} if trace else None
    if seq_q == 0 or seq_k == 0 or window == 0 or batch * heads == 0:
        return BackwardSchedule(dq, dk, dv, delta, dq_steps, dkdv_steps)
    mask, _, _, w, qk_scale, _, _, cx = _launch_args(query, key, value, attn_mask, is_causal, scale, window, None)
    qk, sc = torch.tensor(qk_scale, dtype=F32), torch.tensor(scale, dtype=F32)  # float32 kernel arguments
    be, bev = cx["BLOCK_E"], cx["BLOCK_EV"]
    bool_mask = mask if attn_mask is not None else None
    has_window, group, p_ = window is not None, heads // kv_heads, primitives

    def lse2_of(b: int, h: int, start_m: int, bm: int) -> torch.Tensor:
        return _tile(lse[b, h][:, None], start_m, bm, 1)[:, 0] * _LOG2E

    # _bwd_dq_kernel: Delta, then dQ over the key tiles.
    cfg = config.bwd_q
    bm, bn, split = cfg.block_m, cfg.block_n, cfg.split and attn_mask is None
    for b in range(batch):
        for h in range(heads):
            hk = h // group
            for start_m in range(0, seq_q, bm):
                rows = min(bm, seq_q - start_m)
                q, do = _tile(query[b, h], start_m, bm, be), _tile(grad_out[b, h], start_m, bm, bev)
                d = p_.row_sum(_tile(out[b, h], start_m, bm, bev) * do)
                delta[b, h, start_m : start_m + rows] = d[:rows]
                lse2 = lse2_of(b, h, start_m, bm)
                acc = torch.zeros(bm, be, dtype=F32)
                trail = []
                for part, start_n in _parts(
                    *_key_tiles(start_m, seq_q, seq_k, w, bm, bn, is_causal, has_window, split), bn
                ):
                    kt = _tile(key[b, hk], start_n, bn, be).t().contiguous()
                    vt = _tile(value[b, hk], start_n, bn, bev).t().contiguous()
                    s = p_.dot(q, kt, torch.zeros(bm, bn)) * qk
                    p = p_.exp2(s - lse2[:, None])
                    if part != 1:
                        vis = _visible(
                            bool_mask, b, h, start_m, start_n, bm, bn, seq_q, seq_k, w, is_causal, has_window
                        )
                        p = torch.where(vis, p, 0.0)
                    dp = p_.dot(do, vt, torch.zeros(bm, bn))
                    ds = p * (dp - d[:, None])
                    acc = p_.dot(p_.cast(ds, dtype).to(F32), _trans(kt, dtype), acc)
                    if trace:
                        trail.append(BackwardStep((part, start_n), p, ds, (acc.clone(),)))
                dq[b, h, start_m : start_m + rows] = p_.cast(acc * sc, dtype)[:rows, :e]
                if trace:
                    dq_steps[(b, h, start_m)] = trail

    # _bwd_dkdv_kernel: dK, dV of a key tile over the group's heads and their query tiles.
    cfg = config.bwd_kv
    bm, bn, split = cfg.block_m, cfg.block_n, cfg.split and attn_mask is None
    for b in range(batch):
        for hk in range(kv_heads):
            for start_n in range(0, seq_k, bn):
                cols = min(bn, seq_k - start_n)
                k, v = _tile(key[b, hk], start_n, bn, be), _tile(value[b, hk], start_n, bn, bev)
                acc_k, acc_v = torch.zeros(bn, be, dtype=F32), torch.zeros(bn, bev, dtype=F32)
                trail = []
                tiles = _query_tiles(start_n, seq_q, seq_k, w, bm, bn, is_causal, has_window, split)
                for g in range(group):
                    h = hk * group + g
                    for part, start_m in _parts(*tiles, bm):
                        qt = _tile(query[b, h], start_m, bm, be).t().contiguous()
                        do = _tile(grad_out[b, h], start_m, bm, bev)
                        lse2 = lse2_of(b, h, start_m, bm)
                        d = _tile(delta[b, h][:, None], start_m, bm, 1)[:, 0]
                        st = p_.dot(k, qt, torch.zeros(bn, bm)) * qk
                        pt = p_.exp2(st - lse2[None, :])
                        if part != 1:
                            vis = _visible(
                                bool_mask, b, h, start_m, start_n, bm, bn, seq_q, seq_k, w, is_causal, has_window
                            )
                            pt = torch.where(vis.t(), pt, 0.0)
                        acc_v = p_.dot(p_.cast(pt, dtype).to(F32), do, acc_v)
                        dpt = p_.dot(v, _trans(do, dtype), torch.zeros(bn, bm))
                        dst = pt * (dpt - d[None, :])
                        acc_k = p_.dot(p_.cast(dst, dtype).to(F32), _trans(qt, dtype), acc_k)
                        if trace:
                            trail.append(BackwardStep((g, part, start_m), pt, dst, (acc_k.clone(), acc_v.clone())))
                dk[b, hk, start_n : start_n + cols] = p_.cast(acc_k * sc, dtype)[:cols, :e]
                dv[b, hk, start_n : start_n + cols] = p_.cast(acc_v, dtype)[:cols, :ev]
                if trace:
                    dkdv_steps[(b, hk, start_n)] = trail
    return BackwardSchedule(dq, dk, dv, delta, dq_steps, dkdv_steps)


def blocked_row_sum(x: torch.Tensor, lanes: int = 32, warps: int = 2) -> torch.Tensor:
    """``tl.sum(x, 1)`` of a float32 [M, N] tile in a blocked layout with one column per thread and
    repetition (``sizePerThread = [1, 1]``, ``threadsPerWarp = [*, lanes]``, ``warpsPerCTA = [*, warps]``,
    ``order = [1, 0]``), as Triton 3.9 lowers it for sm_90 (read from the PTX of ``_bwd_dq_kernel``'s
    ``Delta``, 64-column tiles, 4 warps, bf16 and float32): thread (lane ``t``, warp ``w``) holds
    columns ``t + lanes * w + lanes * warps * r`` and adds its repetitions ``r`` in order, the lanes add
    across ``xor lanes/2``, ..., ``xor 1``, then the warps' partial sums are added through shared
    memory (one addition: two warps; more are not identified and raise)."""
    m, n = x.shape
    if lanes & (lanes - 1) or n % (lanes * warps):
        raise ValueError(f"N = {n} must be a multiple of lanes * warps = {lanes * warps}, lanes a power of 2")
    if warps not in (1, 2):
        raise ValueError(f"the sum across {warps} warps is not identified (1 or 2 are)")
    e = x.to(F32).reshape(m, n // (lanes * warps), warps, lanes)
    v = e[:, 0]
    for r in range(1, e.shape[1]):
        v = v + e[:, r]
    while v.shape[-1] > 1:
        half = v.shape[-1] // 2
        v = v[..., :half] + v[..., half:]
    v = v[..., 0]
    return (v[:, 0] + v[:, 1] if warps == 2 else v[:, 0]).contiguous()


#: ``Delta``'s reduce layout in the dQ kernel's 4-warp 64-column launches when O, dO and their
#: strides are multiples of 16 (as the GPU tests' contiguous tensors are, head dim 64): the loads
#: are vectorised to 16 bytes a thread, so each thread holds 8 (bfloat16) or 4 (float32) columns
#: and no sum crosses warps (read from the sm_90 ttgir of Triton 3.6 and 3.9 alike; the unaligned
#: compile is :func:`blocked_row_sum`'s one column a thread)
ALIGNED_DELTA_LAYOUTS = {
    torch.bfloat16: Blocked((1, 8), (4, 8), (4, 1)),
    torch.float32: Blocked((1, 4), (2, 16), (4, 1)),
}


def backward_device_primitives(
    dtype: torch.dtype, folder: str | None = None, warps: int = 2, delta_layout: Blocked | None = None
) -> Primitives:
    """:func:`~ojas_ref.verification.kernel_schedule.device_primitives` with ``Delta``'s row sum the
    dQ kernel's: :func:`blocked_row_sum` over ``warps`` warps along the columns (the unaligned
    4-warp 64-column launches: 2), or, given ``delta_layout`` (the aligned launches':
    :data:`ALIGNED_DELTA_LAYOUTS`), ``blocked_sum`` over it in the imported Triton's order. The
    backward has no other row sum."""
    if delta_layout is None:
        row_sum = functools.partial(blocked_row_sum, lanes=32, warps=warps)
    else:
        row_sum = functools.partial(blocked_sum, axis=1, layout=delta_layout)
    return dataclasses.replace(device_primitives(dtype, folder), name=f"device backward ({dtype})", row_sum=row_sum)


# ---------------------------------------------------------------------------
# The check against the kernels
# ---------------------------------------------------------------------------

_OPERATIONS = {
    "delta": "Delta = row_sum(o * dO) (the dQ kernel's first step): the products or the row sum",
    "dq.p": "P = exp2(s - lse2) of a dQ step: the scores dot(q, K^T) * qk_scale, lse * log2 e, exp2 or the mask",
    "dq.ds": "dS = P * (dP - Delta) of a dQ step: the dot dP = dot(dO, V^T) or the product",
    "dq.acc": "dQ = dot(cast(dS), K, dQ): dS's cast or the dot",
    "dq": "the dQ kernel's finalize: dQ * scale or the cast",
    "dkdv.p": "P^T = exp2(s^T - lse2) of a dK/dV step: the scores dot(K, Q^T) * qk_scale, lse * log2 e, exp2 or the mask",
    "dkdv.dv": "dV = dot(cast(P^T), dO, dV): P^T's cast or the dot",
    "dkdv.ds": "dS^T = P^T * (dP^T - Delta) of a dK/dV step: the dot dP^T = dot(V, dO^T) or the product",
    "dkdv.dk": "dK = dot(cast(dS^T), Q, dK): dS^T's cast or the dot",
    "dv": "the dK/dV kernel's finalize: dV's cast",
    "dk": "the dK/dV kernel's finalize: dK * scale or the cast",
}
_UNCOMPARED = "the stored {0} (steps not compared: the model's tiles are not the kernel's)"


@dataclasses.dataclass(frozen=True)
class BackwardMismatch:
    """The first operation whose result differs between the kernels and the model, in the order the
    kernels run them: ``Delta`` (every row), then the dQ kernel's programs (b, h, query tile) in order,
    each key tile's P, dS and dq accumulator, then the stored dQ; then the dK/dV kernel's programs
    (b, hk, key tile), each (g, query tile) step's P^T, dV, dS^T, dK, then the stored dV and dK.
    ``quantity`` is a key of the operations above ("dq.p", "dkdv.dk", "dv", ...), ``operation`` the
    step that computes it; ``index``: (b, h, i) for delta; (b, h, i, j), query row i and key j, for P
    and dS; (b, h, i, c) for dq; (b, hk, j, c) for dk and dv; ``tile`` the step's tile (None for
    delta and the stored outputs); ``kernel`` and ``model`` the two values; ``steps``: (tile, model,
    kernel) of the accumulator that the element feeds (dq, dk or dv; P^T and dS^T feed dv and dk, at
    column 0 for P and dS) after every step of its program. Per-step states are compared only when
    the model runs the kernels' tiles (not for a mutant of other tile sizes: outputs only)."""

    quantity: str
    operation: str
    index: tuple[int, ...]
    tile: tuple[int, ...] | None
    kernel: float
    model: float
    steps: list[tuple[tuple[int, ...], float, float]]

    def __str__(self) -> str:
        where = "" if self.tile is None else f" at tile {self.tile}"
        lines = [
            f"first differing operation: {self.operation}",
            f"  {self.quantity}{list(self.index)}{where}: kernel {self.kernel!r}, model {self.model!r}",
        ]
        lines += [f"  after tile {tile}: model {m!r}, kernel {k!r}" for tile, m, k in self.steps]
        return "\n".join(lines)


def check_backward(
    grad_out: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    window: int | None = None,
    *,
    config=None,
    primitives: Primitives,
    model_config=None,
    out: torch.Tensor | None = None,
    lse: torch.Tensor | None = None,
) -> BackwardMismatch | None:
    """Run ``_backward`` (launch configuration ``config``, an ``AttentionConfig``; default that of
    ``default_config``) on the forward kernel's ``out`` and ``lse`` (computed with ``config`` unless
    given), then again with ``TRACE`` on (``RuntimeError`` unless its outputs are the same bits), and
    :func:`backward_schedule` (under ``model_config``, default ``config``: another one is a mutant)
    on the same inputs; None when ``Delta``, every traced step (rows and columns in bounds) and dQ,
    dK, dV are equal bit for bit, else the :class:`BackwardMismatch` of the first differing operation.
    On the device, ``primitives.row_sum`` is ``Delta``'s sum: :func:`backward_device_primitives`."""
    from ojas_kernels.attention_backward import _backward
    from ojas_kernels.attention_config import _block_dim, default_config
    from ojas_kernels.attention_forward import _forward

    if config is None:
        config = default_config(max(query.shape[-1], value.shape[-1]), query.dtype, query.device, is_causal)
    model_config = model_config or config
    scale = _scale(query, scale)
    if out is None or lse is None:
        out, lse = _forward(query, key, value, attn_mask, is_causal, scale, window, config)
    batch, heads, seq_q, e = query.shape
    kv_heads, seq_k, ev = key.shape[1], key.shape[2], value.shape[3]
    be, bev, group = _block_dim(e), _block_dim(ev), heads // kv_heads
    qm, qn = config.bwd_q.block_m, config.bwd_q.block_n
    km, kn = config.bwd_kv.block_m, config.bwd_kv.block_n
    n_q = batch * heads * -(-seq_q // qm) * -(-seq_k // qn)
    n_kv = batch * kv_heads * -(-seq_k // kn) * group * -(-seq_q // km)
    trace = (
        torch.full((n_q, qm * (2 * qn + be)), float("nan"), dtype=F32, device=query.device),
        torch.full((n_kv, kn * (2 * km + be + bev)), float("nan"), dtype=F32, device=query.device),
    )
    delta = torch.full(query.shape[:3], float("nan"), dtype=F32, device=query.device)
    args = (grad_out, query, key, value, attn_mask, out, lse, is_causal, scale, window, config)
    plain = [x.cpu() for x in _backward(*args)]
    traced = [x.cpu() for x in _backward(*args, delta=delta, trace=trace)]
    if not all(torch.equal(_bits(x), _bits(y)) for x, y in zip(plain, traced)):
        raise RuntimeError("the kernels with TRACE on stored other gradients than without: steps cannot be compared")
    trace = tuple(t.cpu() for t in trace)
    model = backward_schedule(
        *args[:4], out, lse, attn_mask, is_causal, scale, window, config=model_config, primitives=primitives, trace=True
    )
    kernel = {"delta": delta.cpu(), "dq": plain[0], "dk": plain[1], "dv": plain[2]}
    found = _first_difference(kernel["delta"], model.delta)
    if found is not None:
        return BackwardMismatch(
            "delta", _OPERATIONS["delta"], found, None, kernel["delta"][found].item(), model.delta[found].item(), []
        )
    # the dQ kernel: program (b, h, start_m) at records (pid_bh * cdiv(Sq, BM) + start_m / BM) * cdiv(Sk, BN) + ...
    same_q = (model_config.bwd_q.block_m, model_config.bwd_q.block_n) == (qm, qn)
    same_kv = (model_config.bwd_kv.block_m, model_config.bwd_kv.block_n) == (km, kn)
    kernel_q_steps: dict = {}  # the kernel's records, per program, where the tiles are the model's
    kernel_kv_steps: dict = {}
    if same_q:
        for (b, h, start_m), steps in model.dq_steps.items():
            first = ((b * heads + h) * -(-seq_q // qm) + start_m // qm) * -(-seq_k // qn)
            lo = steps[0].tile[1] if steps else 0
            recs = [trace[0][first + (st.tile[1] - lo) // qn] for st in steps]
            kst = kernel_q_steps[(b, h, start_m)] = [_record(r, st.tile, qm, qn, (be,)) for r, st in zip(recs, steps)]
            rows = min(qm, seq_q - start_m)
            for st, ks_ in zip(steps, kst):
                cols = min(qn, seq_k - st.tile[1])
                for name, kv, mv, c_lim, offs in (
                    ("dq.p", ks_.p, st.p, cols, st.tile[1]),
                    ("dq.ds", ks_.ds, st.ds, cols, st.tile[1]),
                    ("dq.acc", ks_.acc[0], st.acc[0], e, 0),
                ):
                    found = _first_difference(kv[:rows, :c_lim], mv[:rows, :c_lim])
                    if found is not None:
                        r, c = found
                        index = (b, h, start_m + r, offs + c)
                        return _step_mismatch(
                            name, index, st.tile, kv[r, c], mv[r, c], steps, kst, 0, r, c if name == "dq.acc" else 0
                        )
    found = _first_difference(kernel["dq"], model.dq)
    if found is not None:
        b, h, i, c = found
        bm = model_config.bwd_q.block_m
        steps = model.dq_steps.get((b, h, i // bm * bm), [])
        return BackwardMismatch(
            "dq",
            _OPERATIONS["dq"] if same_q else _UNCOMPARED.format("dQ"),
            found,
            None,
            kernel["dq"][found].item(),
            model.dq[found].item(),
            _history(steps, kernel_q_steps.get((b, h, i // bm * bm)), 0, i % bm, c),
        )
    if same_kv:
        n_m = -(-seq_q // km)
        for (b, hk, start_n), steps in model.dkdv_steps.items():
            program = (b * kv_heads + hk) * -(-seq_k // kn) + start_n // kn
            lo = min((st.tile[2] for st in steps), default=0)
            kst = kernel_kv_steps[(b, hk, start_n)] = [
                _record(
                    trace[1][(program * group + st.tile[0]) * n_m + (st.tile[2] - lo) // km], st.tile, kn, km, (be, bev)
                )
                for st in steps
            ]
            rows = min(kn, seq_k - start_n)
            for st, ks_ in zip(steps, kst):
                g, _, start_m = st.tile
                cols = min(km, seq_q - start_m)
                for name, kv, mv, c_lim, which in (
                    ("dkdv.p", ks_.p, st.p, cols, 1),
                    ("dkdv.dv", ks_.acc[1], st.acc[1], ev, 1),
                    ("dkdv.ds", ks_.ds, st.ds, cols, 0),
                    ("dkdv.dk", ks_.acc[0], st.acc[0], e, 0),
                ):
                    found = _first_difference(kv[:rows, :c_lim], mv[:rows, :c_lim])
                    if found is not None:
                        r, c = found
                        acc_name = name.endswith(("dv", "dk"))
                        index = (b, hk, start_n + r, c) if acc_name else (b, hk * group + g, start_m + c, start_n + r)
                        return _step_mismatch(
                            name, index, st.tile, kv[r, c], mv[r, c], steps, kst, which, r, c if acc_name else 0
                        )
    for name, which in (("dv", 1), ("dk", 0)):  # the stored outputs
        found = _first_difference(kernel[name], getattr(model, name))
        if found is not None:
            b, hk, j, c = found
            bn = model_config.bwd_kv.block_n
            steps = model.dkdv_steps.get((b, hk, j // bn * bn), [])
            history = _history(steps, kernel_kv_steps.get((b, hk, j // bn * bn)), which, j % bn, c)
            return BackwardMismatch(
                name,
                _OPERATIONS[name] if same_kv else _UNCOMPARED.format({"dv": "dV", "dk": "dK"}[name]),
                found,
                None,
                kernel[name][found].item(),
                getattr(model, name)[found].item(),
                history,
            )
    return None


def _first_difference(kernel: torch.Tensor, model: torch.Tensor) -> tuple[int, ...] | None:
    """The first index (row-major) where the two tensors' bits differ, or None."""
    diff = _bits(kernel.contiguous()) != _bits(model.contiguous())
    return tuple(int(x) for x in diff.nonzero()[0]) if diff.any() else None


def _record(rec: torch.Tensor, tile: tuple[int, ...], rows: int, cols: int, acc_cols: tuple[int, ...]) -> BackwardStep:
    """A ``TRACE`` record (P, dS, then the accumulators, each [rows, *] row by row) as a step."""
    p, ds = rec[: rows * cols].reshape(rows, cols), rec[rows * cols : 2 * rows * cols].reshape(rows, cols)
    accs, at = [], 2 * rows * cols
    for n in acc_cols:
        accs.append(rec[at : at + rows * n].reshape(rows, n))
        at += rows * n
    return BackwardStep(tile, p, ds, tuple(accs))


def _history(steps, kernel_steps, which: int, r: int, c: int) -> list[tuple[tuple[int, ...], float, float]]:
    """(tile, model, kernel) of the accumulator ``which`` at (r, c) after every step of a program
    (the kernel's NaN where its steps were not compared)."""
    kernel_steps = kernel_steps or [None] * len(steps)
    return [
        (st.tile, st.acc[which][r, c].item(), float("nan") if ks_ is None else ks_.acc[which][r, c].item())
        for st, ks_ in zip(steps, kernel_steps)
    ]


def _step_mismatch(name, index, tile, kernel, model, steps, kernel_steps, which, r, c) -> BackwardMismatch:
    """The :class:`BackwardMismatch` of a traced step, with the accumulator ``which`` at (r, c)."""
    history = _history(steps, kernel_steps, which, r, c)
    return BackwardMismatch(name, _OPERATIONS[name], index, tile, kernel.item(), model.item(), history)
