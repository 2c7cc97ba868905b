"""The RUNNING bound on the attention forward's output (``Ojas.Attention.Float.ForwardAccRunning``,
rocq/Attention/Float/ForwardAccRunning.v), entry by entry, from the inputs.

The theorem bounds ``|out_ic - sum_j P_ij v_jc|`` by ``afr_rel W + afr_C run_err(afr_gb, 0, bs) + afr_abs``
(:func:`~ojas_ref.verification.bounds.attention.attention_forward_running_bound`), where the caller supplies
``W >= sum_j P_ij |v_jc|`` and, per key tile ``t`` of the kernel's loop for the row's query tile (in its
order, fully masked tiles included), ``b_t >= |sum_{j in tiles < t} P_ij v_jc| + sum_{j in tile t} P_ij |v_jc|``.
Here they are certified upper bounds of the exact values, a block of query rows at a time:

* the scores: float64 ``(q k^T) * scale`` within :func:`~ojas_ref.verification.attention_error._score_error`
  of the exact ones, ``P`` between :func:`~ojas_ref.verification.bounds.certified.softmax_bounds`
  (``p_lo``, ``p_up``) and ``pr`` the float64 softmax;
* per tile, three batched float64 matmuls over the tile's keys: the signed ``y_t = pr_t v_t`` within
  ``err_t = dot_error(a_t + e_t) + e_t`` of the exact ``sum P v`` (``e_t >= |pr - P| |v|`` from
  ``dp = max(pr - p_lo, p_up - pr)``), ``a_t >= sum P |v|`` (``p_up |v|``, upward);
* ``bs`` and ``run_err`` by :func:`~ojas_ref.verification.bounds.attention_running.running_error_prefix`
  (the prefixes ``|sum_{t' < t} y_t'|`` plus their float64 and ``err`` terms; the fold in closed form, every
  tile at once), the number of tiles of each row the kernel's: key tiles ``0, BLOCK_N, ...`` below
  ``hi = min(Sk, last row of the query tile + 1)`` under a causal mask (``_key_tiles`` without a window),
  ``ceil(Sk / BLOCK_N)`` otherwise; ``W`` the sum of the ``a_t`` (``sum_upper``).

Per pair (``Ojas.Attention.Float.PerPairScoreError.attention_forward_acc_running_tf32x3_op_pp``, ``_tc_op_pp``,
and the saved lse's ``attention_lse_error_masked_tf32x3_op_pp``): :func:`forward_per_pair_sums` adds, from each
pair's score error ``d_ij`` (:func:`~ojas_ref.verification.score_errors.score_error_block` at the dot model),
``Dsc_i >= ln sum_j P_ij e^(d_ij)`` and ``Yw_ic >= sum_j P_ij |v_jc| (e^(d_ij + Dsc_i) - 1)``;
:func:`forward_per_pair_bounds` gives the output's and the lse's bounds from them in one pass, both at
each query row's own constants (the theorems are stated for one row: ``P`` the row's ``sum |q k|`` bound over its
visible keys, ``N``, ``Tt`` its keys and tiles; :func:`_row_grouped_bound`, :func:`_row_lse_bound`), the output's
and the lse's where smaller ``Ojas.Attention.Float.ForwardAccRunningCounted``'s (:func:`~ojas_ref.verification.
bounds.attention_running.forward_counted_bound`, ``lse_counted_bound``) at the row's count of keys that may raise
the running max (:func:`_row_max_changes`).

Memory: ``O(tiles * rows * Ev)`` per block of rows, the rows chosen so that a block's tensors hold about
``2^24`` entries. Not covered: as the theorem (its header), and the premises of
:mod:`~ojas_ref.verification.bounds.certified` (torch's float64 ``exp``).
"""

from __future__ import annotations

import torch

from ojas_ref.verification import attention_error as ae
from ojas_ref.verification.attention_error import _cached
from ojas_ref.verification import score_errors as se
from ojas_ref.verification.bounds import attention as ab
from ojas_ref.verification.bounds import attention_running as ar
from ojas_ref.verification.bounds import certified as cb

__all__ = [
    "expm1_upper",
    "forward_per_pair_bounds",
    "forward_per_pair_sums",
    "forward_running_bound",
    "forward_running_sums",
]

F64 = torch.float64
#: entries of a block's largest tensor ([B, Hq, rows, keys] or [tiles, B, Hq, rows, Ev])
_BLOCK_ENTRIES = 2**24


def _tile_counts(sq: int, sk: int, block_m: int, block_n: int, is_causal: bool) -> torch.Tensor:
    """[Sq]: the number of key tiles the forward kernel's loop runs for each query row (its query tile's
    ``hi`` of ``_key_tiles`` without a window, in tiles of ``block_n`` from key 0)."""
    i = torch.arange(sq)
    hi = torch.clamp((i // block_m * block_m + block_m).clamp_max(sq), max=sk) if is_causal else torch.full_like(i, sk)
    return -(-hi // block_n)


def _block_rows(b_h: int, sk: int, ev: int, tiles: int, block_m: int) -> int:
    """Rows per block: a multiple of ``block_m`` whose largest tensor holds about ``_BLOCK_ENTRIES`` entries."""
    per_row = b_h * max(sk, tiles * ev)
    return block_m * max(1, _BLOCK_ENTRIES // (per_row * block_m))


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_n: int, block_m: int) -> None:
    """``ValueError`` naming the argument unless the shapes are attention's ([B, H, S, E], GQA) and the tiles >= 1."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4 or not t.is_floating_point():
            raise ValueError(f"{name} must be a floating tensor [B, H, S, E], got {getattr(t, 'shape', type(t))}")
    if k.shape[:3] != v.shape[:3] or q.shape[0] != k.shape[0] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"k and v must match q's batch and head dim: q {q.shape}, k {k.shape}, v {v.shape}")
    if k.shape[1] == 0 or q.shape[1] % k.shape[1]:
        raise ValueError(f"q's heads ({q.shape[1]}) must be a multiple of k's ({k.shape[1]})")
    if k.shape[2] < 1 or q.shape[2] < 1:
        raise ValueError(f"q and k need a row: q {q.shape}, k {k.shape}")
    for name, val in (("block_n", block_n), ("block_m", block_m)):
        if isinstance(val, bool) or not isinstance(val, int) or val < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {val!r}")


def _block_sums(
    pr: torch.Tensor, p_lo: torch.Tensor, p_up: torch.Tensor, vt: torch.Tensor, n_tiles: int, block_n: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(y, err, a)`` [T, B, H, rows, Ev] of a block of rows: ``pr`` its float64 softmax [B, H, rows, keys]
    (``keys <= T block_n``), ``p_lo <= P <= p_up`` the exact one's bounds, ``vt`` the values in tiles
    [B, H, T, block_n, Ev] (zero padded): the float64 tile sums ``y = pr_t v_t``, ``err >= |y - sum_t P v|``
    and ``a >= sum_t P |v|``."""
    dp = torch.maximum(ar.up_add(pr, -p_lo), ar.up_add(p_up, -pr)).clamp_min_(0.0)
    pad = n_tiles * block_n - pr.shape[-1]

    def tiles(p: torch.Tensor) -> torch.Tensor:  # [B, H, rows, keys] -> [B, H, T, rows, block_n]
        p = torch.nn.functional.pad(p, (0, pad))
        return p.unflatten(-1, (n_tiles, block_n)).transpose(-3, -2)

    va = vt.abs()
    y = tiles(pr) @ vt
    a = ar.up_matmul(tiles(p_up), va)
    e = ar.up_matmul(tiles(dp), va)
    err = ar.up_add(ar.up_dot_error(ar.up_add(a, e), block_n), e)
    return tuple(t.movedim(2, 0) for t in (y, err, a))


def expm1_upper(x: torch.Tensor) -> torch.Tensor:
    """An upper bound of ``e^x - 1`` for float64 ``0 <= x < 1/2``: ``x / (1 - x)``
    (``Ojas.Bounds.Softmax.expm1_le_small``), the quotient rounded up and the denominator down.
    ``ValueError`` where ``x >= 1/2`` (a score error of half a nat: no useful bound)."""
    if not bool((x < 0.5).all()):
        raise ValueError(f"score errors plus shift up to {x.max().item()} nats: expm1_upper needs them < 1/2")
    return cb.div_upper(x, (1.0 - x).nextafter_(torch.zeros((), dtype=F64, device=x.device)))


def _pair_shift(p_up: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """[B, H, rows] ``>= ln sum_j P_j e^(d_j)`` (``p_up >= P``, ``d >= 0`` per pair, 0 where masked): the smaller
    of ``max_j d_j`` (``pp_shift_le_uniform``) and ``sum_j p_up_j (e^(d_j) - 1)`` (``ln x <= x - 1``), rounded
    up."""
    return torch.minimum(d.amax(-1), cb.sum_upper(cb.mul_upper(p_up, expm1_upper(d)), -1))


def exp_arg_shift(s: torch.Tensor, d: torch.Tensor, p_up: torch.Tensor, score_error: float) -> torch.Tensor:
    """[B, H, rows] ``Dsc >= ln sum_j P_j e^(d_j + g_j)``, the premise of
    ``Ojas.Attention.Float.PerPairExpArg.attention_lse_error_masked_tf32x3_op_pp_arg``: ``s`` the float64 scores
    [B, H, rows, keys] (-inf where masked) within ``score_error`` of the exact ones, ``d`` the pairs' score
    errors of the kernel's dot (0 where masked), ``p_up >= P``; ``g_j = u (max_i (s_i + d_i) - s_j + d_j + 2
    score_error) >= u ln 2 (sck_i - sck_j)`` for every visible ``i`` (``sck`` the kernel's base-2 scores, ``u =
    2^-24``: the rounding of the exp2 argument ``s_j - m'``, at most ``u`` times the gap to the row's max),
    every operation rounded up (:func:`_pair_shift`)."""
    seen = torch.isfinite(s)
    top = torch.where(seen, ar.up_add(s, d), -torch.inf).amax(-1, keepdim=True)
    gap = ar.up_add(ar.up_add(top, torch.where(seen, -s, 0.0)), ar.up_add(d, 2.0 * score_error))
    g = torch.where(seen, ar.up_mul(gap, ab._FP32_U), 0.0)
    return _pair_shift(p_up, torch.where(seen, ar.up_add(d, g), 0.0))


def _block_per_pair(p_up: torch.Tensor, d: torch.Tensor, va: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(Yw, Dsc)`` of a block of rows: ``p_up >= P`` [B, H, rows, keys], ``d`` the pairs' score errors (same
    shape, 0 where masked), ``va = |v|`` [B, H, keys, Ev]. ``Dsc`` [B, H, rows] ``>= ln sum_j P_j e^(d_j)``:
    the smaller of ``max_j d_j`` (``pp_shift_le_uniform``) and ``sum_j p_up_j (e^(d_j) - 1)`` (``ln x <= x - 1``,
    ``sum_j P_j = 1``); ``Yw`` [B, H, rows, Ev] ``>= sum_j P_j |v_j| (e^(d_j + Dsc) - 1)``; every operation
    rounded up (:func:`expm1_upper`)."""
    dsc = _pair_shift(p_up, d)
    f = expm1_upper(ar.up_add(d, dsc[..., None]))
    return ar.up_matmul(ar.up_mul(p_up, f), va), dsc


def _row_max_changes(s: torch.Tensor, d: torch.Tensor, score_error: float) -> torch.Tensor:
    """[B, H, rows] int64: per row, the visible keys after its first one (key 0) whose score's upper bound
    ``hi_j >= scale q.k_j + d_j`` exceeds every earlier key's lower bound ``lo_i <= scale q.k_i - d_i`` (the
    count ``nrec`` of ``attention_forward_acc_running_counted_pp``, at least the number of key tiles at which the
    kernel's running max can change): ``s`` the float64 scores [B, H, rows, keys] (-inf where masked), within
    ``score_error`` of the exact ones, ``d`` the pairs' score errors of the kernel's dot (0 where masked);
    ``hi``, ``lo`` rounded outward."""
    m = ar.up_add(d, score_error)
    seen = torch.isfinite(s)
    hi = torch.where(seen, ar.up_add(s, m), -torch.inf)
    lo = torch.where(seen, -ar.up_add(-s, m), -torch.inf)
    before = torch.cummax(lo, -1).values.roll(1, -1)
    before[..., 0] = -torch.inf
    return (hi > before).sum(-1) - 1


def _sums(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool,
    scale: float,
    rate: float,
    block_n: int,
    block_m: int,
    score_error: float,
    dot: ab.DotModel | None,
    changes: bool = False,
    arg: bool = False,
    cache: dict | None = None,
) -> list[torch.Tensor]:
    """``[W, R]`` of :func:`forward_running_sums`, and ``Yw``, ``Dsc`` of :func:`forward_per_pair_sums` when
    ``dot`` is given (the pairs' errors of the forward's ``dot(q, k^T)``: ``score_error_block`` at ``dot``),
    then with ``changes`` the rows' :func:`_row_max_changes` and with ``arg`` their :func:`exp_arg_shift` at
    those errors; ``cache``: the model's scores computed once per cache
    (:func:`~ojas_ref.verification.attention_error._score_slices`)."""
    _check(q, k, v, block_n, block_m)
    b, hq, sq, _ = q.shape
    sk, ev = k.shape[2], v.shape[-1]
    g = hq // k.shape[1]
    counts = _tile_counts(sq, sk, block_m, block_n, is_causal).to(q.device)
    kr = k.repeat_interleave(g, 1)
    vr = v.to(F64).repeat_interleave(g, 1)
    rows = _block_rows(b * hq, sk, ev, int(counts.max()), block_m)
    parts = []
    for r0 in range(0, sq, rows):
        n_act = counts[r0 : r0 + rows]
        n_tiles = int(n_act.max())
        keys = min(sk, n_tiles * block_n)
        qc = q[:, :, r0 : r0 + rows]
        s = ae._scores(r0, qc.to(F64), kr[:, :, :keys].to(F64), is_causal, scale)
        pr = torch.softmax(s, -1)
        p_lo, p_up = cb.softmax_bounds(s, score_error)
        vt = torch.nn.functional.pad(vr[:, :, :keys], (0, 0, 0, n_tiles * block_n - keys))
        y, err, a = _block_sums(pr, p_lo, p_up, vt.unflatten(2, (n_tiles, block_n)), n_tiles, block_n)
        part = [
            cb.sum_upper(a, 0),
            ar.running_error_prefix(y, err, a, torch.zeros_like(a), n_act[:, None], rate, rate, 0.0),
        ]
        if dot is not None:
            scores = ae._score_slices(q, k, is_causal, scale, dot, "qk", cache, slice(r0, r0 + rows))
            d = se.score_error_block(r0, qc, kr[:, :, :keys], is_causal, scale, dot, "qk", scores)
            part += _block_per_pair(p_up, d, vr[:, :, :keys].abs())
            if changes:
                part.append(_row_max_changes(s, d, score_error))
            if arg:
                part.append(exp_arg_shift(s, d, p_up, score_error))
        parts.append(part)
    return [torch.cat(ts, 2) for ts in zip(*parts)]


def forward_running_sums(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool,
    scale: float,
    rate: float,
    *,
    block_n: int,
    block_m: int,
    score_error: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(W, R)`` float64 [B, Hq, Sq, Ev]: certified upper bounds of ``W_ic = sum_j P_ij |v_jc|`` and of
    ``run_err(rate, 0, bs)`` over the forward kernel's key tiles of ``block_n`` keys for row ``i``'s query
    tile of ``block_m`` rows, ``bs`` the premise's ``b_t`` (module docstring); ``P`` the exact softmax of
    ``scale q.k`` (causal: key ``j <= i``), the scores within ``score_error`` of the float64 ones
    (:func:`~ojas_ref.verification.attention_error._score_error`). GQA: query head ``h`` reads key head
    ``h // (Hq / Hkv)``."""
    w, r = _sums(q, k, v, is_causal, scale, rate, block_n, block_m, score_error, None)
    return w, r


def forward_per_pair_sums(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool,
    scale: float,
    rate: float,
    *,
    block_n: int,
    block_m: int,
    score_error: float,
    dot: ab.DotModel,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(W, R, Yw, Dsc)``: ``W``, ``R`` of :func:`forward_running_sums`, and the per-pair premises of
    ``Ojas.Attention.Float.PerPairScoreError`` (certified upper bounds, float64): ``Dsc`` [B, Hq, Sq] ``>= ln
    sum_j P_ij e^(d_ij)`` and ``Yw`` [B, Hq, Sq, Ev] ``>= sum_j P_ij |v_jc| (e^(d_ij + Dsc_i) - 1)``, ``d_ij``
    pair ``(i, j)``'s score error of the forward's ``dot(q, k^T)`` at the dot model ``dot``
    (:func:`~ojas_ref.verification.score_errors.score_error_block`, ``operands="qk"``; 0 at masked keys),
    ``P`` the exact softmax (``softmax_bounds``' upper ``P_up`` in the sums)."""
    w, r, yw, dsc = _sums(q, k, v, is_causal, scale, rate, block_n, block_m, score_error, dot)
    return w, r, yw, dsc


def _forward_tiles(
    q: torch.Tensor, v: torch.Tensor, is_causal: bool, block_n: int | None, block_m: int | None
) -> tuple[int, int]:
    """``(block_n, block_m)``: the forward kernel's tile (``default_config`` for ``max(E, Ev)``, as the
    kernel's launch picks it) where not given."""
    if block_n is None or block_m is None:
        from ojas_kernels.attention import default_config

        cfg = default_config(max(q.shape[-1], v.shape[-1]), q.dtype, q.device, is_causal).fwd
        block_n = cfg.block_n if block_n is None else block_n
        block_m = cfg.block_m if block_m is None else block_m
    return block_n, block_m


def _bound_kw(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool,
    scale: float,
    block_n: int,
    cache: dict | None = None,
) -> dict:
    """The keyword arguments of ``attention_forward_running_bound`` for these inputs on their device."""
    return dict(
        n_keys=k.shape[2],
        head_dim=q.shape[-1],
        dtype=q.dtype,
        max_abs_v=v.abs().max().item(),
        scale=scale,
        exp2_error=ae.unary_errors(q.device.type, k.shape[2])["exp2_error"],
        storage_rounding=ae.storage_rounding(q.device.type, q.dtype),
        dot=ae.kernel_dot(q.device.type, q.dtype),
        **ae._bound_inputs(q, k, is_causal, block_n, v.shape[-1], cache),
    )


def forward_running_bound(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool,
    scale: float,
    block_n: int | None = None,
    block_m: int | None = None,
    per_pair: bool = False,
) -> torch.Tensor:
    """The entry-by-entry bound on ``|out - exact_attention|`` [B, Hq, Sq, Ev] of
    ``Ojas.Attention.Float.ForwardAccRunning.attention_forward_acc_running`` (its H100 instances ``_tf32x3_op``,
    ``_tc_op``): :func:`~ojas_ref.verification.bounds.attention.attention_forward_running_bound` at the
    device's dot model (:func:`~ojas_ref.verification.attention_error.kernel_dot`; "fp32", the interpreter's,
    raises ``ValueError``: no instance), ``exp2`` premise and storage rounding, with ``W`` and ``run_err`` from
    :func:`forward_running_sums`. ``block_n``, ``block_m``: the forward kernel's tile (``default_config`` for
    ``max(E, Ev)``, as the kernel's launch picks it), unless given. ``per_pair``: the per-pair theorem
    (``Ojas.Attention.Float.PerPairScoreError.attention_forward_acc_running_tf32x3_op_pp``, ``_tc_op_pp``),
    :func:`forward_per_pair_bounds`' first result."""
    if per_pair:
        return forward_per_pair_bounds(q, k, v, is_causal, scale, block_n, block_m)[0]
    block_n, block_m = _forward_tiles(q, v, is_causal, block_n, block_m)
    _check(q, k, v, block_n, block_m)
    kw = _bound_kw(q, k, v, is_causal, scale, block_n)
    rate = ab.attention_forward_running_rate(**kw)
    es = ae._score_error(q, scale, kw["qk_abs_sum"])
    w, r = forward_running_sums(q, k, v, is_causal, scale, rate, block_n=block_n, block_m=block_m, score_error=es)
    return ab.attention_forward_running_bound(w, r, **kw)


def _row_qk_abs_sum(q: torch.Tensor, k: torch.Tensor, is_causal: bool, cache: dict | None = None) -> torch.Tensor:
    """[B, Hq, Sq] float64: per query row a certified upper bound of ``max_j sum_c |q_ic k_jc|`` over the
    row's visible keys (causal: ``j <= i``), ``up_matmul`` of the absolute values (GQA as the kernel). Once per
    ``cache`` (:func:`~ojas_ref.verification.attention_error._cached`; a copy returned)."""
    got = _cached(cache, ("row_qk_abs_sum", is_causal), (q, k), lambda: _row_qk_abs_sum_of(q, k, is_causal))
    return got.clone()


def _row_qk_abs_sum_of(q: torch.Tensor, k: torch.Tensor, is_causal: bool) -> torch.Tensor:
    """:func:`_row_qk_abs_sum`, computed."""
    parts = []
    for r0, qc, kr in ae._row_blocks(q, k):
        a = ar.up_matmul(qc.abs(), kr.abs().transpose(-1, -2))
        if is_causal:
            i = torch.arange(r0, r0 + qc.shape[2], device=q.device)[:, None]
            a = a.masked_fill(torch.arange(kr.shape[2], device=q.device)[None, :] > i, 0.0)
        parts.append(a.amax(-1))
    return torch.cat(parts, 2)


def _row_score_abs_max(
    q: torch.Tensor, k: torch.Tensor, is_causal: bool, scale: float, es: float, cache: dict | None = None
) -> torch.Tensor:
    """[B, Hq, Sq] float64: per query row a certified upper bound of ``max_j |scale q_i.k_j|`` over the row's
    visible keys: the float64 scores' (:func:`~ojas_ref.verification.attention_error._scores`) plus their error
    ``es`` (:func:`~ojas_ref.verification.attention_error._score_error`), rounded up. Once per ``cache`` (a copy
    returned)."""
    key = ("row_score_abs_max", is_causal, scale, es)
    return _cached(cache, key, (q, k), lambda: _row_score_abs_max_of(q, k, is_causal, scale, es)).clone()


def _row_score_abs_max_of(q: torch.Tensor, k: torch.Tensor, is_causal: bool, scale: float, es: float) -> torch.Tensor:
    """:func:`_row_score_abs_max`, computed."""
    parts = []
    for r0, qc, kr in ae._row_blocks(q, k):
        s = ae._scores(r0, qc, kr, is_causal, scale)
        parts.append(s.abs().masked_fill(s == -torch.inf, 0.0).amax(-1))
    return cb.add_upper(torch.cat(parts, 2), es)


#: the per-row score bounds' levels: a row's group holds the rows within ``1 / _P_LEVELS`` of the largest
_P_LEVELS = 16


def _change_level(changes: torch.Tensor) -> torch.Tensor:
    """The rows' counts of max-changing keys rounded up to 0 or a power of two (fewer groups)."""
    return torch.where(changes > 0, 2 ** torch.ceil(torch.log2(changes.clamp_min(1).to(F64))), 0).to(torch.int64)


def _grouped(
    w: torch.Tensor,
    r: torch.Tensor,
    yw: torch.Tensor,
    kw: dict,
    p_rows: torch.Tensor,
    counts: torch.Tensor,
    changes: torch.Tensor | None,
) -> torch.Tensor:
    """The rows grouped as :func:`_row_grouped_bound` says (and by :func:`_change_level` of ``changes`` when
    given), each group's bound at its constants: the per-pair one, or with ``changes`` the counted one. The same
    values and errors as one call of ``attention_forward_running_bound`` (or ``forward_counted_bound``) per group,
    in the groups' order: each group's constants once (:func:`_group_constants`), then every row at once
    (``_afr_rows``, ``_counted_rows``: the same operations entry by entry)."""
    ev, sk, bn, top = w.shape[-1], kw["n_keys"], kw["block_n"], p_rows.max().clamp_min(torch.finfo(F64).tiny)
    level = torch.ceil(p_rows / top * _P_LEVELS).to(torch.int64)
    n_lev = 2 * sk  # the levels of changes (< sk) are below 2 sk
    cl = torch.zeros_like(level) if changes is None else _change_level(changes)
    gid = ((counts.to(torch.int64) * (_P_LEVELS + 1) + level) * n_lev + cl).flatten()  # counts broadcast
    keys, inv = torch.unique(gid, return_inverse=True)
    p_g = torch.full(keys.shape, -torch.inf, dtype=F64, device=w.device)
    p_g = p_g.scatter_reduce_(0, inv, p_rows.flatten().to(F64), "amax").tolist()
    rows = [x.reshape(-1, ev) for x in (w, r, yw)]
    bad = _bad_groups(rows, inv, len(p_g))
    consts = []
    for g, (key, p) in enumerate(zip(keys.tolist(), p_g)):
        tiles, c = divmod(key, n_lev)
        g_kw = dict(kw, n_keys=min(sk, tiles // (_P_LEVELS + 1) * bn), qk_abs_sum=min(p, kw["qk_abs_sum"]))
        consts.append(_group_constants(g_kw, None if changes is None else c))
        for name, b in zip(("prob_abs_v", "run_err", "score_perturbation"), bad):
            if b[g]:
                raise ValueError(f"{name} must be a real tensor, finite and >= 0")
    table = torch.tensor([(0.0,) * 4 if c is None else c for c in consts], dtype=F64, device=w.device)
    per_row = tuple(table.reshape(-1, 4)[inv].movedim(-1, 0)[..., None])
    w64, r64, y64 = (x.to(F64) for x in rows)
    if changes is None:
        out = ab._afr_rows(w64, r64, y64, per_row)
    else:
        none = torch.tensor([c is None for c in consts], dtype=torch.bool, device=w.device)[inv]
        out = ar._counted_rows(w64, r64, y64, per_row).masked_fill(none[:, None], torch.inf)
    return out.to(w.dtype).reshape(w.shape)


def _group_constants(g_kw: dict, changes: int | None) -> tuple[float, float, float, float] | None:
    """One group's constants: ``(afr_rel, afr_C, afr_abs, afr_ypp)`` of the per-pair bound at ``g_kw``
    (``attention_forward_running_bound``'s keywords, its errors), or with ``changes`` the counted bound's
    ``(afr_rel, afr_C, afr_ypp, afr_abs)`` (``None`` where its ``afe_bL < 1`` fails: ``inf``), after the
    per-pair bound's checks (``forward_counted_bound``'s)."""
    return ab._afr_pp_constants(**g_kw) if changes is None else ar._forward_counted_group(changes, g_kw)


def _bad_groups(rows: list[torch.Tensor], inv: torch.Tensor, n_groups: int) -> list[list[bool]]:
    """Per tensor of ``rows`` ([R, Ev] each) and per group (``inv`` [R] the rows' groups): whether a row of the
    group is not finite and >= 0 (complex: every group), as ``attention_forward_running_bound`` checks."""
    out = []
    for t in rows:
        if t.is_complex():
            out.append([True] * n_groups)
            continue
        bad_row = ~((t >= 0) & torch.isfinite(t)).all(-1)
        out.append((torch.bincount(inv, weights=bad_row.to(F64), minlength=n_groups) > 0).tolist())
    return out


def _row_grouped_bound(
    w: torch.Tensor, r: torch.Tensor, yw: torch.Tensor, kw: dict, p_rows: torch.Tensor, counts: torch.Tensor
) -> torch.Tensor:
    """``attention_forward_running_bound(w, r, score_perturbation=yw, **kw)`` with the theorem's per-ROW
    constants (it is stated for one query row): rows grouped by their number of key tiles ``T`` (``Tt = T``,
    ``N = min(Sk, T block_n)``, at least the row's visible keys) and by ``p_rows`` [B, Hq, Sq] (their
    ``sum |q k|`` bounds, :func:`_row_qk_abs_sum`) in :data:`_P_LEVELS` levels of the largest, each group
    at its largest ``p`` (the premise ``dot_abs q k_j <= P``); ``r`` may be computed at any rate at least
    each group's ``afr_gb`` (``run_err`` grows with the rate: ``kw``'s, at the all-pairs ``qk_abs_sum``)."""
    return _grouped(w, r, yw, kw, p_rows, counts, None)


def _row_counted_bound(
    w: torch.Tensor,
    r: torch.Tensor,
    yw: torch.Tensor,
    kw: dict,
    p_rows: torch.Tensor,
    counts: torch.Tensor,
    changes: torch.Tensor,
) -> torch.Tensor:
    """:func:`_row_grouped_bound`'s groups, also by the rows' ``changes`` [B, Hq, Sq] (:func:`_row_max_changes`,
    rounded up by :func:`_change_level`), each at the counted theorem's bound
    (:func:`~ojas_ref.verification.bounds.attention_running.forward_counted_bound`, ``C`` the group's level)."""
    return _grouped(w, r, yw, kw, p_rows, counts, changes)


def _lse_group_constants(
    n_t: int,
    head_dim: int,
    arg: bool,
    *,
    block_n: int,
    max_abs_q: float,
    max_abs_k: float,
    scale: float | None = None,
    qk_abs_sum: float | None = None,
    exp2_error: float = ab.EXP2_ERROR,
    log2_error: float = ab.LOG2_ERROR,
    dot: ab.DotModel = "fp32",
) -> tuple[float, float, float, float] | None:
    """One group's constants of :func:`~ojas_ref.verification.bounds.attention._lse_rows`
    (:func:`~ojas_ref.verification.bounds.attention._lse_row_constants` of ``_lse_bound_q``, with ``arg`` at
    ``afe_bL_arg``) at ``n_t`` keys and the keywords of
    :func:`~ojas_ref.verification.bounds.attention.attention_lse_error_bound`; ``None`` where ``afe_bL_arg < 1``
    fails (``inf``), ``ValueError`` as that bound where ``afe_bL < 1`` fails (not ``arg``)."""
    p, sc = ab._attention_bound_args(n_t, head_dim, block_n, max_abs_q, max_abs_k, scale, qk_abs_sum, exp2_error)
    args = ab._lse_args(n_t, log2_error, exp2_error, sc, p)
    got = ab._lse_bound_q(dot, args, head_dim, block_n, n_t, -(-n_t // block_n), arg)
    if got is None and not arg:
        raise ValueError(
            f"side condition afe_bL < 1 of attention_lse_error fails for n_keys={n_t}, "
            f"head_dim={head_dim}, block_n={block_n}, exp2_error={exp2_error}"
        )
    return ab._lse_row_constants(got, dot, args, head_dim)


def _lse_grouped(
    dsc: torch.Tensor,
    kw: dict,
    p_rows: torch.Tensor,
    counts: torch.Tensor,
    head_dim: int,
    n_keys: int,
    device: str,
    changes: torch.Tensor | None,
    arg: bool = False,
    row_score_max: torch.Tensor | None = None,
) -> torch.Tensor:
    """The rows grouped as :func:`_row_lse_bound` says (and by :func:`_change_level` of ``changes`` when given),
    each group's lse bound at its constants: the per-pair one (at most the all-rows one), with ``arg`` the one
    with the exp2 argument's rounding per pair (:func:`~ojas_ref.verification.bounds.attention.attention_lse_arg_bound`,
    ``dsc`` then :func:`exp_arg_shift`, and ``row_score_max`` each row's :func:`_row_score_abs_max`), or with
    ``changes`` the counted one. The same values as one call of those bounds per group: without ``changes`` each
    group's exact constants once (:func:`_lse_group_constants`, memoized), then every row at once
    (:func:`~ojas_ref.verification.bounds.attention._lse_rows`); with ``changes`` one call of
    :func:`~ojas_ref.verification.bounds.attention_running.lse_counted_bound` per group of tiles and level, at its
    rows' levels of ``changes``."""
    errs = ae.unary_errors(device, n_keys)  # the log2 domain of n_keys covers every row's N <= n_keys
    bound = ab.attention_lse_arg_bound if arg else ab.attention_lse_error_bound
    rm = {} if row_score_max is None else {"row_score_max": row_score_max}
    if changes is None:
        out = bound(n_keys, head_dim, score_shift=dsc, **errs, **kw, **rm)
    level = torch.ceil(p_rows / p_rows.max().clamp_min(torch.finfo(F64).tiny) * _P_LEVELS).to(torch.int64)
    tl = (counts.to(torch.int64) * (_P_LEVELS + 1) + level).flatten()  # counts broadcast
    keys, inv = torch.unique(tl, return_inverse=True)
    p_g = torch.full(keys.shape, -torch.inf, dtype=F64, device=dsc.device)
    p_g = p_g.scatter_reduce_(0, inv, p_rows.flatten().to(F64), "amax").tolist()
    groups = [
        (min(n_keys, key // (_P_LEVELS + 1) * kw["block_n"]), dict(kw, qk_abs_sum=min(p, kw["qk_abs_sum"])))
        for key, p in zip(keys.tolist(), p_g)
    ]
    shift = dsc.to(F64).flatten()
    if changes is None:
        consts = [_lse_group_constants(n_t, head_dim, arg, **errs, **g_kw) for n_t, g_kw in groups]
        rows = ab._lse_rows(shift, consts, inv, arg, None if row_score_max is None else row_score_max.flatten())
        return torch.minimum(out, rows.reshape(dsc.shape))
    cl, rms = _change_level(changes).flatten(), None if row_score_max is None else row_score_max.flatten()
    order = torch.argsort(inv, stable=True)
    sizes = torch.bincount(inv, minlength=len(groups)).tolist()
    got, start = torch.empty_like(shift), 0
    for (n_t, g_kw), size in zip(groups, sizes):
        sel = order[start : start + size]
        ms = {} if rms is None else {"row_score_max": rms[sel]}
        got[sel] = ar.lse_counted_bound(n_t, head_dim, shift[sel], cl[sel], arg=arg, **errs, **g_kw, **ms)
        start += size
    return got.reshape(dsc.shape)


def _row_lse_bound(
    dsc: torch.Tensor, kw: dict, p_rows: torch.Tensor, counts: torch.Tensor, head_dim: int, n_keys: int, device: str
) -> torch.Tensor:
    """[B, Hq, Sq]: ``attention_lse_error_bound(score_shift=dsc)`` (``attention_lse_error_masked_tf32x3_op_pp``,
    stated for one query row) at each row's own constants, grouped as :func:`_row_grouped_bound` (``N =
    min(Sk, T block_n)``, ``p`` the group's largest ``p_rows``, at most ``kw``'s ``qk_abs_sum``), and at most
    the bound at the all-rows constants (``kw``: ``n_keys`` keys; both proved, the bound monotone in them)."""
    return _lse_grouped(dsc, kw, p_rows, counts, head_dim, n_keys, device, None)


def _row_lse_counted_bound(
    dsc: torch.Tensor,
    kw: dict,
    p_rows: torch.Tensor,
    counts: torch.Tensor,
    head_dim: int,
    n_keys: int,
    device: str,
    changes: torch.Tensor,
    arg: bool = False,
    row_score_max: torch.Tensor | None = None,
) -> torch.Tensor:
    """:func:`_row_lse_bound`'s groups, also by the rows' ``changes`` [B, Hq, Sq] (:func:`_row_max_changes`,
    rounded up by :func:`_change_level`), each at the counted lse bound
    (:func:`~ojas_ref.verification.bounds.attention_running.lse_counted_bound`,
    ``attention_lse_error_masked_counted_tf32x3_op_pp``, ``C`` the group's level); with ``arg`` its form with the
    exp2 argument's rounding per pair (``_counted_tf32x3_op_pp_arg``, ``dsc`` of :func:`exp_arg_shift`; with
    ``row_score_max``, ``_counted_tf32x3_op_pp_arg_rowmax``)."""
    return _lse_grouped(dsc, kw, p_rows, counts, head_dim, n_keys, device, changes, arg, row_score_max)


def _row_lse_arg_bound(
    dsc_arg: torch.Tensor,
    kw: dict,
    p_rows: torch.Tensor,
    counts: torch.Tensor,
    head_dim: int,
    n_keys: int,
    device: str,
    changes: torch.Tensor,
    row_score_max: torch.Tensor | None = None,
) -> torch.Tensor:
    """:func:`_row_lse_bound`'s groups at ``attention_lse_error_masked_tf32x3_op_pp_arg``
    (:func:`~ojas_ref.verification.bounds.attention.attention_lse_arg_bound`) and, where smaller,
    :func:`_row_lse_counted_bound`'s with ``arg`` (``attention_lse_error_masked_counted_tf32x3_op_pp_arg``);
    ``dsc_arg`` of :func:`exp_arg_shift`; with ``row_score_max`` (:func:`_row_score_abs_max`) their ``_rowmax``
    forms (``lse_bound``'s magnitude at the row's own score bound)."""
    args = (dsc_arg, kw, p_rows, counts, head_dim, n_keys, device)
    return torch.minimum(
        _lse_grouped(*args, None, True, row_score_max), _row_lse_counted_bound(*args, changes, True, row_score_max)
    )


def forward_per_pair_bounds(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool,
    scale: float,
    block_n: int | None = None,
    block_m: int | None = None,
    *,
    cache: dict | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out_bound, lse_bound)`` with each pair's own score error (``Ojas.Attention.Float.PerPairScoreError``),
    one pass over the pairs (:func:`forward_per_pair_sums` at the device's dot model, ``kernel_dot``):

    * ``out_bound`` [B, Hq, Sq, Ev] on ``|out - exact_attention|`` entry by entry:
      ``attention_forward_acc_running_tf32x3_op_pp`` / ``_tc_op_pp``, i.e.
      :func:`~ojas_ref.verification.bounds.attention.attention_forward_running_bound` with
      ``score_perturbation = Yw``, at each row's own ``P``, ``N``, ``Tt`` (:func:`_row_grouped_bound`;
      ``run_err`` at the all-pairs rate, at least each row's); where smaller,
      ``attention_forward_acc_running_counted_tf32x3_op_pp`` / ``_tc_op_pp`` at the row's count of keys that may
      raise the running max (:func:`_row_max_changes`, :func:`_row_counted_bound`);
    * ``lse_bound`` [B, Hq, Sq] on ``|lse - exact_lse|`` per row: ``attention_lse_error_masked_tf32x3_op_pp``
      (``attention_lse_error_masked_dot_pp`` at ``tc_op_dot_model`` for 16-bit inputs), i.e.
      :func:`~ojas_ref.verification.bounds.attention.attention_lse_error_bound` with ``score_shift = Dsc``,
      at each row's own ``P``, ``N``, ``Tt`` (:func:`_row_lse_bound`; the backward's lse premise ``Dl x`` of
      the item's row); where smaller, ``attention_lse_error_masked_counted_tf32x3_op_pp`` / ``_tc_op_pp`` at the
      row's count (:func:`_row_max_changes`, :func:`_row_lse_counted_bound`), or
      ``attention_lse_error_masked_tf32x3_op_pp_arg`` or its counted form (the exp2 argument's rounding per pair:
      :func:`exp_arg_shift`, :func:`_row_lse_arg_bound`).

    Tiles as :func:`forward_running_bound`; "fp32" (the interpreter's dots) raises ``ValueError``. ``cache``: as
    :func:`~ojas_ref.verification.attention_error.forward_posteriori_bound`'s."""
    block_n, block_m = _forward_tiles(q, v, is_causal, block_n, block_m)
    _check(q, k, v, block_n, block_m)
    kw = _bound_kw(q, k, v, is_causal, scale, block_n, cache)
    rate = ab.attention_forward_running_rate(**kw)
    es = ae._score_error(q, scale, kw["qk_abs_sum"])
    w, r, yw, dsc, changes, dsc_arg = _sums(
        q, k, v, is_causal, scale, rate, block_n, block_m, es, kw["dot"], True, True, cache
    )
    counts = _tile_counts(q.shape[2], k.shape[2], block_m, block_n, is_causal).to(q.device)
    p_rows = _row_qk_abs_sum(q, k, is_causal, cache)
    out = torch.minimum(
        _row_grouped_bound(w, r, yw, kw, p_rows, counts), _row_counted_bound(w, r, yw, kw, p_rows, counts, changes)
    )
    lse_kw = {n: kw[n] for n in ("block_n", "max_abs_q", "max_abs_k", "qk_abs_sum", "scale", "dot")}
    lse_args = (dsc, lse_kw, p_rows, counts, q.shape[-1], k.shape[2], q.device.type)
    lse = torch.minimum(_row_lse_bound(*lse_args), _row_lse_counted_bound(*lse_args, changes))
    row_max = _row_score_abs_max(q, k, is_causal, scale, es, cache)
    return out, torch.minimum(lse, _row_lse_arg_bound(dsc_arg, *lse_args[1:], changes, row_max))
