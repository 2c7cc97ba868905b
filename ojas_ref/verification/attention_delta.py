"""The backward's ``delta`` of the forward kernel's stored output against the exact ``D``, per query row
(``Ojas.Attention.Float.DeltaKernelError``, rocq/Attention/Float/DeltaKernelError.v, from branch delta-reweight).

The theorem bounds ``|sum_c dO_c out_c - D|`` (``out`` the forward kernel's stored output, ``D = sum_k P_k dp_k``,
``dp_k = dO . v_k``, ``P`` the exact softmax) by ``delta_kernel_bound``::

    (sum_k P_k (tw_k + tb) |dp_k - D| + r sum_(k vis) |dp_k - D| + sum_k P_k us (1 + tw_k) |dp_k|
     + sa sum_(k vis) |dp_k| + sum_c |dO_c| EB_c) / ((1 - tb) (1 - lb))
    + lb / (1 - lb) |D| + sum_c |dO_c| (store_ur |out_c| + store_er),

with ``tw_k = (1 + ue)^Tt 2^(u Kk_k) e^(dl_k) - 1``, ``r = Tt ((1 + ue + ee) (1 + ue))^Tt 2^(u K) ee e^dmax``,
``pm = (1 + ue + ee)^Tt``, ``sa = us r + es pm e^dmax``, ``rho = (1 + g_acc) (1 + u)``,
``EB_c = rho^Tt (sum_(t < Tt) (rho - 1) Pre_c,t + (rho - 1) Tt Aa_c + g_dot (Av_c + Aa_c)) + rho^Tt Tt pm ((1 +
g_acc) ea + ga) e^dmax`` (``Av``, ``Aa``, ``Pre`` as ``dk_Av``, ``dk_Aa``, ``dk_Pre``; per tile the accumulator is
rescaled by ``alpha``, one rounding ``u``, then the P.V dot adds the tile's products to it: the signed prefixes
``Pre`` grow by ``rho``, the products are charged ``g_dot``), ``tb >= sum_k P_k tw_k + N r``, ``lb >=
(1 + u)^(n - 1 + 2 Tt) - 1 + Tt l_growth^Tt ea e^dmax / (1 - tb)``, ``l_growth = (1 + u)^2 (1 + ue + ee)``. Here
:func:`delta_kernel_error_bound` evaluates it for every query row at the row's own ``Tt`` (the forward kernel's key
tiles for the row's query tile, :func:`~ojas_ref.verification.attention_forward_running._tile_counts`), ``n`` the
forward's key tile, the caller's numbers:

* ``dl_k``: the pair's score error of the forward's ``dot(q, k^T)``
  (:func:`~ojas_ref.verification.score_errors.score_error_block`, ``"qk"``), ``dmax`` the row's largest;
* ``Kk_k = gap_k / ln 2`` with ``gap_k = max_j (s_j + dl_j) - s_k + dl_k + 2 e`` (``s`` the float64 scores
  within ``e`` of the exact ones, ``_score_error``), so ``(sc_j - sc_k) ln 2 <= gap_k`` for the kernel's
  base-2 scores and ``2^(u Kk_k) = e^(u gap_k)``; ``K = max_k Kk_k`` (``m0`` the row's least visible base-2 score);
* every sum over the exact softmax a certified upper bound (:mod:`~ojas_ref.verification.bounds.certified`:
  ``P <= P_up`` of ``softmax_bounds``, ``|dp - D|`` and ``|dp|`` of
  :func:`~ojas_ref.verification.attention_error._dscores`, ``|D|`` from
  :func:`~ojas_ref.verification.attention_error._out_bounds`, the signed prefixes ``Pre`` from the float64 tile
  sums of :func:`~ojas_ref.verification.attention_forward_running._block_sums` with their errors), ``e^x - 1 <=
  x / (1 - x)`` (:func:`~ojas_ref.verification.attention_forward_running.expm1_upper`), the constants exact
  rationals rounded up, every operation rounded up (denominators down).

The constants: ``u``, ``ea`` float32's, ``ue`` the device's ``exp2_error``, ``ee`` its absolute term,
``us``, ``es`` the storage format's (``_storage`` at the device's rounding), ``g_acc``, ``g_dot``, ``ga`` the
accumulating P.V dot's (``acc_dot_split_constants`` over ``n`` keys, ``acc_dot_split_model``: for float32
``tf32x3_tc_op_acc_dot_split_model``, the accumulator added in one float32 rounding after the three TF32 dots,
``g_acc = u``, theorem ``attention_delta_kernel_error_tf32x3_op``; for 16-bit inputs ``tc_acc_op_dot_model``,
``g_acc = g_dot``, ``_tc_op``).

Not covered: what the theorem's header does not cover (ForwardAccError.v's); the ``exp2`` accuracy (an
assumption, as every bound here); a "truncate" storage rounding (no Coq format instance: the formula at its
constants); the interpreter's "fp32" dots (no instance: ``ValueError``); the score errors' model of the dots
(tested against the kernels, not proved: :mod:`~ojas_ref.verification.score_errors`); the float64 evaluation's premises
(:mod:`~ojas_ref.verification.bounds.certified`'s, torch's float64 ``exp`` in ``softmax_bounds``). The
backward's own float32 ``delta = tl.sum(o * dO)`` is not in this bound (``attention_delta_error_bound`` adds it).
"""

from __future__ import annotations

import math
from fractions import Fraction

import torch

from ojas_ref.verification import attention_error as ae
from ojas_ref.verification import attention_forward_running as afr
from ojas_ref.verification import score_errors as se
from ojas_ref.verification.bounds import attention as ab
from ojas_ref.verification.bounds import certified as cb
from ojas_ref.verification.bounds.common import _EXP2_ABS_ERROR, _FP32_ETA, _FP32_U, _float_up, _storage

__all__ = ["delta_kernel_error_bound"]

F64 = torch.float64


def _check_args(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor, out: torch.Tensor, scale: float, c: dict
) -> None:
    """``ValueError`` naming the argument unless ``do`` and ``out`` are [B, Hq, Sq, Ev], ``scale`` a finite
    number > 0 and ``c`` the backward's constants (``_backward_constants``) with a device's dot model."""
    for name, t in (("do", do), ("out", out)):
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != tuple(q.shape[:3]) + (v.shape[-1],):
            raise ValueError(f"{name} must be [B, Hq, Sq, Ev] = {tuple(q.shape[:3]) + (v.shape[-1],)}")
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a finite number > 0, got {scale!r}")
    if not isinstance(c, dict) or not {"dot", "errs", "rounding", "es", "bnd"} <= c.keys():
        raise ValueError("c must be the backward's constants (attention_error._backward_constants)")
    if ab._dot_model(c["dot"]) == "fp32":
        raise ValueError("c's dot is 'fp32' (the interpreter's): no instance of attention_delta_kernel_error")


def _constants(dtype: torch.dtype, c: dict, block_n: int) -> dict[str, Fraction]:
    """The model's constants, exact rationals: ``u``, ``ea``, ``ue``, ``ee``, ``us``, ``es``, the P.V dot's
    ``g_acc``, ``g_dot``, ``ga`` over ``block_n`` keys (``acc_dot_split_constants``), ``n = block_n``."""
    us, es = (Fraction(x) for x in _storage(dtype, c["rounding"]))
    g_acc, g_dot, ga = ab.acc_dot_split_constants(c["dot"], block_n)
    return dict(
        u=Fraction(_FP32_U),
        ea=Fraction(_FP32_ETA),
        ue=Fraction(c["errs"]["exp2_error"]),
        ee=Fraction(_EXP2_ABS_ERROR),
        us=us,
        es=es,
        g_acc=g_acc,
        g_dot=g_dot,
        ga=ga,
        n=Fraction(block_n),
    )


def _tile_tables(k: dict[str, Fraction], tiles: int) -> dict[str, torch.Tensor]:
    """Per number of tiles ``Tt = 0 .. tiles``, float64 upper bounds [tiles + 1] of the factors that depend on it:
    ``c1 = (1 + ue)^Tt`` and ``c1 - 1``, ``R = Tt ((1 + ue + ee)(1 + ue))^Tt ee``, ``pm``, ``la = (1 + u)^(n - 1 +
    2 Tt) - 1``, ``lg = Tt l_growth^Tt ea``, ``rho^Tt`` (``rho = (1 + g_acc) (1 + u)``) times ``rho - 1``, ``(rho -
    1) Tt``, ``g_dot`` and ``Tt pm ((1 + g_acc) ea + ga)``. Each base rounded up to a float first (the factors grow
    with it), then exact powers."""
    u, ue, ee, g_acc, g_dot = k["u"], k["ue"], k["ee"], k["g_acc"], k["g_dot"]

    def up(x: Fraction) -> Fraction:
        return Fraction(_float_up(x))

    b_ue, b_pm, b_r = up(1 + ue), up(1 + ue + ee), up((1 + ue + ee) * (1 + ue))
    b_lg, b_rho = up((1 + u) ** 2 * (1 + ue + ee)), up((1 + g_acc) * (1 + u))
    names = ("c1", "c1m1", "R", "pm", "la", "lg", "rho1", "rhoT", "rhog", "ea")
    rows: dict[str, list[float]] = {n: [] for n in names}
    for t in range(tiles + 1):
        c1, pm, rho = b_ue**t, b_pm**t, b_rho**t
        vals = dict(
            c1=c1,
            c1m1=c1 - 1,
            R=t * b_r**t * ee,
            pm=pm,
            la=(1 + u) ** int(k["n"] - 1 + 2 * t) - 1,
            lg=t * b_lg**t * k["ea"],
            rho1=rho * (b_rho - 1),
            rhoT=rho * (b_rho - 1) * t,
            rhog=rho * g_dot,
            ea=rho * t * pm * ((1 + g_acc) * k["ea"] + k["ga"]),
        )
        for n in names:
            rows[n].append(_float_up(vals[n]))
    return {n: torch.tensor(x, dtype=F64) for n, x in rows.items()}


def _exp_up(x: torch.Tensor) -> torch.Tensor:
    """An upper bound of ``e^x`` for float64 ``0 <= x < 1/2``: ``1 + x / (1 - x)``."""
    return cb.add_upper(afr.expm1_upper(x), 1.0)


def _one_minus_down(x: torch.Tensor) -> torch.Tensor:
    """A lower bound of ``1 - x`` (float64), one step down."""
    return (1.0 - x).nextafter_(x.new_full((), -math.inf))


def _weights(
    s: torch.Tensor, dl: torch.Tensor, score_error: float, k: dict, tab: dict, n_act: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Per pair ``tw >= tw_k`` (0 where masked) and per row ``e^dmax``, ``r``, ``pm e^dmax``, from the float64
    scores ``s`` (-inf where masked) within ``score_error`` of the exact ones, the pairs' score errors ``dl`` and
    the rows' tiles ``n_act``."""
    seen = torch.isfinite(s)
    top = torch.where(seen, cb.add_upper(s.masked_fill(~seen, 0.0), dl), -math.inf).amax(-1, keepdim=True)
    gap = cb.add_upper(cb.add_upper(top, torch.where(seen, -s, 0.0)), cb.add_upper(dl, 2.0 * score_error))
    gap = gap.masked_fill(~seen, 0.0)
    x = cb.add_upper(cb.scale_upper(gap, k["u"]), dl).masked_fill(~seen, 0.0)
    c1, c1m1 = tab["c1"][n_act][:, None], tab["c1m1"][n_act][:, None]
    tw = cb.add_upper(cb.mul_upper(afr.expm1_upper(x), c1), c1m1).masked_fill(~seen, 0.0)
    dmax = dl.masked_fill(~seen, 0.0).amax(-1)
    e_dmax = _exp_up(dmax)
    e_k = _exp_up(cb.scale_upper(gap.amax(-1), k["u"]))  # 2^(u K), K = max_k gap_k / ln 2
    r = cb.mul_upper(cb.mul_upper(tab["R"][n_act], e_k), e_dmax)
    return dict(tw=tw, vis=seen.to(F64), e_dmax=e_dmax, r=r, pm_e=cb.mul_upper(tab["pm"][n_act], e_dmax))


def _prefix_sum(y: torch.Tensor, err: torch.Tensor, n_act: torch.Tensor) -> torch.Tensor:
    """``>= sum_(t < Tt) |sum_(t' < t) Y_t'|`` per entry [B, H, rows, Ev], ``y`` the float64 tile sums [T, B, H,
    rows, Ev] within ``err`` of the exact ``Y``, ``Tt = n_act`` [rows] per row: the float64 prefix ``z`` within
    ``ze`` (``|fl(a + b) - (a + b)| <= u |fl(a + b)|``), every operation rounded up."""
    z = torch.zeros_like(y[0])
    ze, total = torch.zeros_like(z), torch.zeros_like(z)
    for t in range(1, y.shape[0]):
        z = z + y[t - 1]
        ze = cb.add_upper(cb.add_upper(ze, err[t - 1]), cb.scale_upper(z.abs(), cb.U64))
        pre = cb.add_upper(z.abs(), ze)
        total = torch.where((t < n_act)[:, None], cb.add_upper(total, pre), total)
    return total


def _delta_abs(d: torch.Tensor, pr: torch.Tensor, p_lo: torch.Tensor, p_up: torch.Tensor, vr: torch.Tensor):
    """``>= |D| = |dO . (P v)|`` per row (``O~, e = _out_bounds``: ``|sum dO O~|`` plus its ``dot_error`` plus
    ``sum |dO| e``), rounded up."""
    o, o_err = ae._out_bounds(pr, p_lo, p_up, vr)
    err = cb.add_upper(
        cb.dot_error(cb.sum_upper(cb.mul_upper(d, o), -1), d.shape[-1]), cb.sum_upper(cb.mul_upper(d, o_err), -1)
    )
    return cb.add_upper((d * o).sum(-1).abs(), err)


def _row_block(
    blk: dict, w: dict, d: torch.Tensor, o: torch.Tensor, va: torch.Tensor, k: dict, tab: dict
) -> torch.Tensor:
    """``delta_kernel_bound`` [B, H, rows] of a block of rows: ``blk`` its ``_dscores`` (plus ``spre``, ``dabs``,
    ``n_act``), ``w`` its :func:`_weights`, ``d = |dO|`` and ``o`` the stored output (float64), ``va = |v|``."""
    us, es, n_act = k["us"], k["es"], blk["n_act"]
    p_up, ya, pd_up, tw, vis, r = blk["p_up"], blk["ya"], blk["pd_up"], w["tw"], w["vis"], w["r"]
    tb = cb.add_upper(cb.sum_upper(cb.mul_upper(p_up, tw), -1), cb.mul_upper(vis.sum(-1), r))
    ok = tb < 1
    om_tb = torch.where(ok, _one_minus_down(tb), 1.0)
    lb = cb.add_upper(tab["la"][n_act], cb.div_upper(cb.mul_upper(tab["lg"][n_act], w["e_dmax"]), om_tb))
    ok &= lb < 1
    om_lb = torch.where(ok, _one_minus_down(lb), 1.0)
    av = cb.matmul_upper(p_up, va)
    ca = cb.add_upper(cb.scale_upper(r, 1 + us), cb.scale_upper(w["pm_e"], es))  # (1 + us) r + es pm e^dmax
    aa = cb.add_upper(
        cb.matmul_upper(cb.mul_upper(p_up, cb.add_upper(cb.scale_upper(tw, 1 + us), _float_up(us))), va),
        cb.mul_upper(ca[..., None], cb.matmul_upper(vis, va)),
    )
    row = lambda name: tab[name][n_act][:, None]  # noqa: E731
    eb = cb.add_upper(
        cb.add_upper(cb.mul_upper(blk["spre"], row("rho1")), cb.mul_upper(aa, row("rhoT"))),
        cb.add_upper(cb.mul_upper(cb.add_upper(av, aa), row("rhog")), cb.mul_upper(row("ea"), w["e_dmax"][..., None])),
    )
    sa = cb.add_upper(cb.scale_upper(r, us), cb.scale_upper(w["pm_e"], es))
    terms = (
        cb.sum_upper(cb.mul_upper(cb.mul_upper(p_up, cb.add_upper(tw, tb[..., None])), ya), -1),
        cb.mul_upper(r, cb.sum_upper(ya, -1)),
        cb.scale_upper(cb.sum_upper(cb.mul_upper(cb.mul_upper(p_up, cb.add_upper(tw, 1.0)), pd_up), -1), us),
        cb.mul_upper(sa, cb.sum_upper(cb.mul_upper(pd_up, vis), -1)),
        cb.sum_upper(cb.mul_upper(d, eb), -1),
    )
    num = terms[0]
    for t in terms[1:]:
        num = cb.add_upper(num, t)
    main = cb.div_upper(num, cb.mul_lower(om_tb, om_lb))
    u, ea = k["u"], k["ea"]
    store_ur, store_er = (us / (1 - us) + u) / (1 - u), (es / (1 - us) + ea) / (1 - u)
    store = cb.sum_upper(cb.mul_upper(d, cb.add_upper(cb.scale_upper(o.abs(), store_ur), _float_up(store_er))), -1)
    total = cb.add_upper(cb.add_upper(main, cb.div_upper(cb.mul_upper(lb, blk["dabs"]), om_lb)), store)
    return torch.where(ok, total, math.inf)


def delta_kernel_error_bound(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    do: torch.Tensor,
    out: torch.Tensor,
    is_causal: bool,
    scale: float,
    c: dict,
    *,
    cache: dict | None = None,
) -> torch.Tensor:
    """[B, Hq, Sq] float64: per query row an upper bound of ``|sum_c dO_ic out_ic - D_i|`` (``out`` the forward
    kernel's stored output, ``D_i = sum_j P_ij dO_i . v_j``, ``P`` the exact softmax of ``scale q.k``, causal
    top-left), the value of ``delta_kernel_bound`` of
    ``Ojas.Attention.Float.DeltaKernelError.attention_delta_kernel_error_tf32x3_op`` (float32: the P.V dot in
    3xTF32) / ``attention_delta_kernel_error_tc_op`` (bf16/fp16: the tensor cores' chain) at the forward kernel's
    tiles (``default_config``) and ``c`` (``attention_error._backward_constants``: the dot model, the ``exp2``
    premise, the storage rounding, the float64 scores' error); ``inf`` where a premise ``tb < 1`` or ``lb < 1``
    fails; ``ValueError`` naming a bad argument. GQA: query head ``h`` reads key head ``h // (Hq / Hkv)``. Module docstring (what is not covered).
    ``cache``: as :func:`~ojas_ref.verification.attention_error.forward_posteriori_bound`'s (the model's scores)."""
    block_n, block_m = afr._forward_tiles(q, v, is_causal, None, None)
    afr._check(q, k, v, block_n, block_m)
    _check_args(q, k, v, do, out, scale, c)
    b, hq, sq, _ = q.shape
    sk, ev, es = k.shape[2], v.shape[-1], c["es"]
    consts = _constants(q.dtype, c, block_n)
    counts = afr._tile_counts(sq, sk, block_m, block_n, is_causal).to(q.device)
    tab = {n: t.to(q.device) for n, t in _tile_tables(consts, int(counts.max())).items()}
    kr = k.repeat_interleave(hq // k.shape[1], 1)
    vr = v.to(F64).repeat_interleave(hq // k.shape[1], 1)
    rows = afr._block_rows(b * hq, sk, ev, int(counts.max()), block_m)
    parts = []
    for r0 in range(0, sq, rows):
        n_act = counts[r0 : r0 + rows]
        n_tiles = int(n_act.max())
        keys = min(sk, n_tiles * block_n)
        qc, d = q[:, :, r0 : r0 + rows], do[:, :, r0 : r0 + rows].to(F64)
        kf, vk = kr[:, :, :keys].to(F64), vr[:, :, :keys]
        blk = ae._dscores(r0, qc.to(F64), kf, vk, d, is_causal, scale, es)
        scores = ae._score_slices(q, k, is_causal, scale, c["dot"], "qk", cache, slice(r0, r0 + rows))
        dl = se.score_error_block(r0, qc, kr[:, :, :keys], is_causal, scale, c["dot"], "qk", scores)
        w = _weights(blk["s"], dl, es, consts, tab, n_act)
        vt = torch.nn.functional.pad(vk, (0, 0, 0, n_tiles * block_n - keys)).unflatten(2, (n_tiles, block_n))
        y, err, _ = afr._block_sums(blk["pr"], blk["p_lo"], blk["p_up"], vt, n_tiles, block_n)
        blk.update(
            spre=_prefix_sum(y, err, n_act),
            dabs=_delta_abs(d, blk["pr"], blk["p_lo"], blk["p_up"], vk),
            n_act=n_act,
        )
        parts.append(_row_block(blk, w, d.abs(), out[:, :, r0 : r0 + rows].to(F64), vk.abs(), consts, tab))
    return torch.cat(parts, 2)
