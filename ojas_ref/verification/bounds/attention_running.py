"""The RUNNING form of the attention backward's accumulation bounds (rocq/Attention/Float/RunningAccError.v).

The dK/dV and dQ kernels accumulate their tiles with ``acc = tl.dot(a, b, acc)``, a model with
``|result - (acc + a.b)| <= g_acc |acc| + g_dot sum |a_i b_i| + g_abs`` (``acc_dot_split_model``,
:func:`~ojas_ref.verification.bounds.attention.acc_dot_split_constants`; float32's accumulator is added in
one rounding, ``g_acc = u``). ``acc_chain_running_error`` charges tile ``t`` with ``g_acc`` times the
running accumulator and ``g_dot`` times the tile's own terms, not the a-priori sum of every term: over
tiles ``0 .. T - 1`` with ``e_0 = 0``::

    run_err_split g_acc g_dot ga bp bt
        = fold_left (fun e (a, c) => (1 + g_acc) e + g_acc a + g_dot c + ga) (combine bp bt) 0,
    |fold of accf - sum_x z x| <= run_err_split g_acc g_dot g_abs bp bt + sum_x r x,

whenever every item's computed term is within ``r x`` of ``z x`` and ``bp``, ``bt`` meet
``running_split_premise``: ``a_t = bp_t >= |sum of z over tiles < t| + (sum of r over tiles < t)``, ``c_t = bt_t >= sum
over tile t of (|z x| + r x)``. Here:

* :func:`acc_constants_up`: ``(g_acc, g_dot, g_abs)`` of the accumulating dot, rounded up to floats;
* :func:`up_add`, :func:`up_mul`, :func:`up_matmul`, :func:`up_dot_error`: the roundings up of
  :mod:`~ojas_ref.verification.bounds.certified` without their per-operation finiteness checks (no
  device synchronisation; the folds' results are checked once);
* :func:`run_err_step` / :func:`run_err`: the fold evaluated in float64, every operation rounded up,
  so the result is at least the real ``run_err_split`` of any real ``bp``, ``bt`` below the given ones;
* :class:`RunningAcc`: the running tensors of one fold (the signed prefix sum ``Z`` of the float64
  tile sums with a certified bound of its error, the prefix of ``r``, ``e``), one tile at a time:
  memory of one accumulator, whatever the number of tiles (dV, dK: the dK/dV kernel's query tiles);
* :func:`running_error_prefix`: the same fold over the first ``n`` tiles of every entry in closed
  form, all tiles at once (dQ: the dQ kernel's key tiles, a prefix of its loop for every row);
* :func:`exp2_premise_terms`, :func:`exp2_premise_rows`, :func:`exp2_factor_minus_one`: ``X x - 1 >=
  2^((delta x + Dl x) / ln 2 + u Am + ea) - 1`` per pair, from the pair's own score error ``delta x`` and its
  query row's lse premise ``Dl x``;
* :func:`grad_bound_up`: ``grad_bound scale ucs eA S1`` of ``Ojas.Attention.Float.DkDqError``;
* :func:`forward_counted_bound`: the forward output's per-pair running bound with the key tiles that leave
  the running max unchanged charged less (``Ojas.Attention.Float.ForwardAccRunningCounted``);
* :func:`lse_counted_bound`: the saved lse's per-pair bound, the same way (its ``_lse_error_masked_counted_*``).

Not covered by a theorem: the float64 evaluation's premises (torch's ``sum``, ``cumsum`` and
``matmul`` trees of additions and products, as :mod:`~ojas_ref.verification.bounds.certified` states
them) and the Python arithmetic composing the theorems' values.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

import torch

from ojas_ref.verification.bounds import attention as ab
from ojas_ref.verification.bounds import certified as cb
from ojas_ref.verification.bounds.attention import (
    _LOG2E_CONST_ERROR,
    DotModel,
    _score_terms_q,
    acc_dot_split_constants,
)
from ojas_ref.verification.bounds.common import _FP32_ETA, _FP32_U, _ROUND_UP, _float_up

__all__ = [
    "LN2_UP",
    "acc_constants_up",
    "up_add",
    "up_mul",
    "up_matmul",
    "up_dot_error",
    "run_err_step",
    "run_err",
    "RunningAcc",
    "running_error_prefix",
    "exp2_premise_rows",
    "exp2_premise_terms",
    "exp2_factor_minus_one",
    "grad_bound_up",
    "forward_counted_bound",
    "lse_counted_bound",
]

F64 = torch.float64
#: a rational upper bound of ln 2 = 0.693147180559945309417...
LN2_UP = Fraction(6931471805599454, 10**16)


def acc_constants_up(dot: DotModel, n: int) -> tuple[float, float, float]:
    """``(g_acc, g_dot, g_abs)`` of ``tl.dot(a, b, acc)`` of ``dot``'s kind over ``n`` products
    (:func:`~ojas_ref.verification.bounds.attention.acc_dot_split_constants`, exact rationals),
    each rounded up to a float."""
    return tuple(_float_up(g) for g in acc_dot_split_constants(dot, n))


_INF: dict[torch.device, torch.Tensor] = {}


def _up(t: torch.Tensor) -> torch.Tensor:
    """One step toward +inf, in place (``t`` a fresh result of one rounded operation): at least the
    exact value of that operation (round to nearest lands on a neighbour of it)."""
    inf = _INF.get(t.device)
    if inf is None:
        inf = _INF[t.device] = torch.tensor(math.inf, dtype=F64, device=t.device)
    return t.nextafter_(inf)


def up_add(a: torch.Tensor, b: torch.Tensor | float) -> torch.Tensor:
    """An upper bound of the exact ``a + b`` (float64), as :func:`~ojas_ref.verification.bounds.certified.add_upper`
    but without its finiteness check (no device synchronisation): an overflow or NaN propagates to the
    fold's result, which :meth:`RunningAcc.error` checks."""
    return _up(a + b)


def up_mul(a: torch.Tensor, b: torch.Tensor | float) -> torch.Tensor:
    """An upper bound of the exact ``a b`` for NONNEGATIVE float64 ``a``, ``b`` (the caller's), as
    :func:`~ojas_ref.verification.bounds.certified.mul_upper` without the finiteness check."""
    return _up(a * b)


def up_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """An upper bound of the exact ``a @ b`` for NONNEGATIVE float64 ``a`` [..., n, k], ``b`` [..., k, m]
    (the caller builds them so): :func:`~ojas_ref.verification.bounds.certified.matmul_upper`'s
    ``(computed + (1 + g) 3k eta) / (1 - g)``, ``g = gamma_(2k)`` (``ftree_nonneg_upper``), rounded up,
    without its checks."""
    g, c = cb._dot_consts(a.shape[-1])
    up = a @ b
    up.add_(_float_up(c))
    _up(up)
    up.mul_(_float_up(1 / (1 - g)))
    return _up(up)


def up_dot_error(abs_sum: torch.Tensor, k: int) -> torch.Tensor:
    """:func:`~ojas_ref.verification.bounds.certified.dot_error` (a float64 dot of ``k`` products within
    ``gamma_(2k) A + (1 + gamma_(2k)) 3k eta`` of the exact one, ``A >= sum |a_i b_i|``) without the check."""
    g, c = cb._dot_consts(k)
    return up_add(up_mul(abs_sum, _float_up(g)), _float_up(c))


def run_err_step(
    e: torch.Tensor, a: torch.Tensor, c: torch.Tensor, g_acc: float, g_dot: float, g_abs: float
) -> torch.Tensor:
    """One step of ``run_err_split``'s fold, ``(1 + g_acc) e + g_acc a + g_dot c + ga``, rounded up (``e``,
    ``a``, ``c`` >= 0 float64 upper bounds, ``g_acc``, ``g_dot``, ``g_abs`` >= 0 floats at least the exact
    constants); at ``g_acc == g_dot`` as ``g (a + c)``, the one-constant ``run_err``'s step at ``b = a + c``."""
    grow = up_add(e, up_mul(e, g_acc))  # >= (1 + g_acc) e
    if g_acc == g_dot:
        term = up_mul(up_add(a, c), g_acc)
    else:
        term = up_add(up_mul(a, g_acc), up_mul(c, g_dot))
    return up_add(grow, up_add(term, g_abs))


def run_err(a_s: torch.Tensor, c_s: torch.Tensor, g_acc: float, g_dot: float, g_abs: float) -> torch.Tensor:
    """``run_err_split g_acc g_dot g_abs bp bt`` over the LAST dimension of ``a_s``, ``c_s`` (one shape; one
    fold per leading index, ``e_0 = 0``), every operation rounded up: at least the exact value for the real
    ``bp``, ``bt`` (here ``a_s``, ``c_s``), ``g_acc``, ``g_dot``, ``g_abs`` at most the given ones. ``ValueError`` on a negative or
    non-finite input, or a result beyond float64."""
    for name, val in (("g_acc", g_acc), ("g_dot", g_dot), ("g_abs", g_abs)):
        if not (isinstance(val, (int, float)) and math.isfinite(val) and val >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {val!r}")
    a_s, c_s = a_s.to(F64), c_s.to(F64)
    if a_s.shape != c_s.shape:
        raise ValueError(f"a_s and c_s must have one shape, got {tuple(a_s.shape)} and {tuple(c_s.shape)}")
    for name, t in (("a_s", a_s), ("c_s", c_s)):
        if not bool((torch.isfinite(t) & (t >= 0)).all()):
            raise ValueError(f"{name} must be finite and >= 0")
    e = torch.zeros(a_s.shape[:-1], dtype=F64, device=a_s.device)
    for t in range(a_s.shape[-1]):
        e = run_err_step(e, a_s[..., t], c_s[..., t], float(g_acc), float(g_dot), float(g_abs))
    return _finite(e)


def _finite(t: torch.Tensor) -> torch.Tensor:
    """``t``, or ``ValueError`` if an entry is not finite (an upper bound overflowed float64)."""
    if not bool(torch.isfinite(t).all()):
        raise ValueError("the running error bound overflows float64 (or met a NaN): no finite certified bound")
    return t


class RunningAcc:
    """The running quantities of ``acc_chain_running_error`` for a tensor of accumulator entries,
    one tile at a time (:meth:`step`): ``z_sum`` the float64 prefix sum of the tiles' float64 sums
    and ``z_err`` a certified bound of its distance to the exact prefix ``sum z``, ``r_sum`` an upper
    bound of the prefix of ``r``, ``e`` an upper bound of ``run_err_split`` over the tiles so far
    (``a_t``, ``c_t`` the upper bounds of ``running_split_premise``'s quantities built from these; the
    constants those of :func:`acc_constants_up`). Entries whose ``active`` is False at a step are left
    alone: the kernel does not run that tile for them. The steps do not synchronise with the device (no
    finiteness checks): :meth:`error` checks the result once."""

    def __init__(self, shape: tuple[int, ...], device: torch.device, g_acc: float, g_dot: float, g_abs: float) -> None:
        self.z_sum = torch.zeros(shape, dtype=F64, device=device)
        self.z_err = torch.zeros_like(self.z_sum)
        self.r_sum = torch.zeros_like(self.z_sum)
        self.e = torch.zeros_like(self.z_sum)
        self.g_acc, self.g_dot, self.g_abs = float(g_acc), float(g_dot), float(g_abs)

    def step(
        self,
        tile_sum: torch.Tensor,
        tile_err: torch.Tensor,
        abs_sum: torch.Tensor,
        r_sum: torch.Tensor,
        active: torch.Tensor | None = None,
    ) -> None:
        """One tile: ``tile_sum`` its float64 sum of ``z`` within ``tile_err`` of the exact one,
        ``abs_sum >= sum |z x|``, ``r_sum >= sum r x`` over its items (all >= 0 but ``tile_sum``);
        ``active`` (broadcasting against the entries) where the kernel runs the tile, every entry if None."""
        z_abs = up_add(self.z_sum.abs(), self.z_err)  # >= |exact prefix of z|
        a, c = up_add(z_abs, self.r_sum), up_add(abs_sum, r_sum)
        e = run_err_step(self.e, a, c, self.g_acc, self.g_dot, self.g_abs)
        z_sum = self.z_sum + tile_sum  # |fl(x) - x| <= u |fl(x)| for a rounded sum
        z_err = up_add(up_add(self.z_err, tile_err), up_mul(z_sum.abs(), cb.U64))
        r = up_add(self.r_sum, r_sum)
        if active is None:
            self.e, self.z_sum, self.z_err, self.r_sum = e, z_sum, z_err, r
        else:
            self.e = torch.where(active, e, self.e)
            self.z_sum = torch.where(active, z_sum, self.z_sum)
            self.z_err = torch.where(active, z_err, self.z_err)
            self.r_sum = torch.where(active, r, self.r_sum)

    def error(self) -> torch.Tensor:
        """An upper bound of ``run_err_split g_acc g_dot g_abs bp bt + sum_x r x`` after the last tile (``ValueError``
        if not finite)."""
        return _finite(up_add(self.e, self.r_sum))


def _powers_up(base: Fraction, n: int, device: torch.device) -> torch.Tensor:
    """[n] float64 upper bounds of ``base^t``, ``t = 0 .. n - 1`` (``base > 0``): each a product of
    upper bounds rounded up."""
    b, out, x = _float_up(base), [], 1.0
    for _ in range(n):
        out.append(x)
        x = math.nextafter(x * b, math.inf)
    return torch.tensor(out, dtype=F64, device=device)


#: an absolute term above every underflow of :func:`running_error_prefix`'s plain float64 evaluation
#: (each rounding below the normal range loses at most 2^-1075, a few per tile and entry, scaled by
#: factors below 2^20)
_UNDERFLOW = 2.0**-900


def running_error_prefix(
    tile_sum: torch.Tensor,
    tile_err: torch.Tensor,
    abs_sum: torch.Tensor,
    r_sum: torch.Tensor,
    n_active: torch.Tensor,
    g_acc: float,
    g_dot: float,
    g_abs: float,
) -> torch.Tensor:
    """What :class:`RunningAcc` gives after running the tiles ``0 .. n - 1`` (``n = n_active`` per entry,
    >= 1, broadcasting against the entries), every tile at once: the tiles along dim 0 of ``tile_sum``
    (float64 sums of ``z``), ``tile_err`` (>= their distances to the exact sums), ``abs_sum >= sum |z|``,
    ``r_sum >= sum r``. The fold in closed form, ``run_err_split g_acc g_dot ga bp bt`` after ``n`` tiles
    ``= sum_{t < n} (1 + g_acc)^(n - 1 - t) (g_acc a_t + g_dot c_t + ga) = (1 + g_acc)^(n - 1) sum_{t < n}
    (1 + g_acc)^-t (g_acc a_t + g_dot c_t + ga)``, with ``a_t``, ``c_t`` from float64 prefix sums (``cumsum``:
    each prefix a tree of additions over its terms; the signed one within ``dot_error`` of its terms'
    absolute sum); at ``g_acc == g_dot`` the term as ``g (a_t + c_t)``.

    Evaluated plainly in float64, then enlarged once: past the signed prefix (whose error is a term),
    every operation adds or multiplies nonnegative numbers (``g_acc``, ``g_dot``, ``g_abs`` and the powers
    of ``1 + g_acc`` at least the exact ones), at most ``2 T + 40`` roundings on a path (two cumsums of
    ``T`` tiles), so the exact value is at most the computed one over ``(1 - (2 T + 40) u)`` plus the
    underflows' ``2^-900``. An upper bound of ``run_err_split g_acc g_dot g_abs bp bt + sum_x r x`` over
    those tiles (``ValueError`` if not finite)."""
    t = tile_sum.shape[0]
    g2, c2 = cb._dot_consts(t)
    z_abs = tile_sum.cumsum(0).abs() + tile_sum.abs().cumsum(0) * _float_up(g2) + tile_err.cumsum(0) + _float_up(c2)
    r_in = r_sum.cumsum(0)
    c = abs_sum + r_sum
    if g_acc == g_dot:
        c[1:] += z_abs[:-1] + r_in[:-1]
        term = c * g_acc + g_abs
    else:
        term = c * g_dot
        term[1:] += (z_abs[:-1] + r_in[:-1]) * g_acc
        term += g_abs
    grow = Fraction(1) + Fraction(g_acc)
    view = (t,) + (1,) * (c.dim() - 1)
    w, big = _powers_up(1 / grow, t, c.device).view(view), _powers_up(grow, t, c.device)
    if not big[-1].item() < 2.0**20:
        raise ValueError(f"(1 + g_acc)^(tiles - 1) = {big[-1].item()} is beyond the underflow allowance (2^20)")
    e = (term * w).cumsum(0) * big.view(view)  # e after tiles 0 .. t
    idx = (n_active.to(torch.int64) - 1).expand(c.shape[1:])[None]
    total = (e.gather(0, idx) + r_in.gather(0, idx))[0]
    return _finite(up_add(up_mul(total, _float_up(1 / (1 - Fraction(2 * t + 40, 2**53)))), _UNDERFLOW))


def exp2_premise_terms(
    dot: DotModel, head_dim: int, scale: float, qk_abs_sum: float, max_abs_lse: float, lse_error: float
) -> tuple[Fraction, Fraction]:
    """``(Dl, Am)`` of the running theorems' exp2 premise ``X x >= 2^((delta x + Dl) / ln 2 + u Am + ea)``,
    exact rationals: ``Dl`` from ``lse2_close`` (``Ojas.Attention.Float.DvError``: ``|lse - LSE| <=
    lse_error``, ``|LSE| <= max_abs_lse``), ``Am`` from ``score_max_de`` at ``qk_abs_sum`` (at least every
    pair's ``sum |q k|``) plus the lse's magnitude."""
    for name, val in (("qk_abs_sum", qk_abs_sum), ("max_abs_lse", max_abs_lse), ("lse_error", lse_error)):
        if not (isinstance(val, (int, float)) and math.isfinite(val) and val >= 0.0):
            raise ValueError(f"{name} must be a finite number >= 0, got {val!r}")
    u, ea, uc2 = Fraction(_FP32_U), Fraction(_FP32_ETA), Fraction(_LOG2E_CONST_ERROR)
    smax, _ = _score_terms_q(dot, head_dim, Fraction(qk_abs_sum), Fraction(scale))
    lb, lmax = Fraction(lse_error), Fraction(max_abs_lse) + Fraction(lse_error)
    dl = lb + lmax * (u * (1 + uc2) + uc2) + ea
    am = smax + 2 * ((1 + uc2) * lmax) * (1 + u) + ea
    return dl, am


def exp2_premise_rows(lse_abs: torch.Tensor, lse_error: torch.Tensor) -> torch.Tensor:
    """Per query row the ``Dl`` of :func:`exp2_premise_terms` at the row's own ``|LSE| <= lse_abs`` and
    ``|lse - LSE| <= lse_error`` (float64 tensors of one shape, >= 0; the running theorems take ``Dl x``
    per item), rounded up."""
    if lse_abs.shape != lse_error.shape or not bool(((lse_abs >= 0) & (lse_error >= 0)).all()):
        raise ValueError("lse_abs and lse_error must be tensors of one shape, >= 0")
    u, ea, uc2 = Fraction(_FP32_U), Fraction(_FP32_ETA), Fraction(_LOG2E_CONST_ERROR)
    lmax = cb.add_upper(lse_abs.to(F64), lse_error.to(F64))
    return cb.add_upper(cb.add_upper(lse_error.to(F64), cb.scale_upper(lmax, u * (1 + uc2) + uc2)), _float_up(ea))


def _exp2_arg(delta: torch.Tensor, dl: Fraction | torch.Tensor, am: Fraction) -> torch.Tensor:
    """Per entry ``y >= (delta + Dl) + (u Am + ea) ln 2`` (float64, :func:`exp2_factor_minus_one`'s
    arguments), every operation rounded up, ``ln 2`` by ``LN2_UP``."""
    c = (Fraction(_FP32_U) * am + Fraction(_FP32_ETA)) * LN2_UP
    c0 = cb.add_upper(dl.to(F64), _float_up(c)) if isinstance(dl, torch.Tensor) else _float_up(dl + c)
    return cb.add_upper(delta.to(F64), c0)


def exp2_factor_minus_one(delta: torch.Tensor, dl: Fraction | torch.Tensor, am: Fraction) -> torch.Tensor:
    """Per entry an upper bound of ``2^((delta + Dl) / ln 2 + u Am + ea) - 1`` (float64, ``delta >= 0`` the
    pairs' score errors, e.g. :func:`~ojas_ref.verification.score_errors.score_error_block`; ``Dl`` a number
    or a float64 tensor that broadcasts against ``delta``, e.g. per row of :func:`exp2_premise_rows`), so that
    ``X x = 1 + result`` meets the running theorems' premise ``Rpower 2 ((delta + Dl) / ln 2 + u Am + ea) <=
    X``: that power is ``e^y`` at ``y = (delta + Dl) + (u Am + ea) ln 2`` (the ``1 / ln 2`` cancels exactly),
    and ``e^y - 1 <= y / (1 - y)`` for ``y < 1`` (``Ojas.Bounds.Softmax.expm1_le_small``), every operation
    rounded up (:func:`_exp2_arg`; the denominator down). ``ValueError`` where ``y >= 1/2``."""
    y = _exp2_arg(delta, dl, am)
    if not bool((y < 0.5).all()):
        raise ValueError(f"the exp2 argument error {y.max().item()} is too large (>= 1/2 after ln 2)")
    return cb.div_upper(y, (1.0 - y).nextafter_(torch.zeros((), dtype=F64, device=y.device)))


def grad_bound_up(
    e_acc: torch.Tensor, s1: torch.Tensor, scale: Fraction, ucs: Fraction, us: Fraction, es: Fraction
) -> torch.Tensor:
    """``grad_bound scale ucs eA S1`` of ``Ojas.Attention.Float.DkDqError`` at upper bounds ``eA``,
    ``S1`` (float64, the bound monotone in both), rounded up: ``(1 + us) (scale ((1 + u) (1 + ucs) eA
    + (u (1 + ucs) + ucs) S1) + ea) + us scale S1 + es``."""
    u, ea = Fraction(_FP32_U), Fraction(_FP32_ETA)
    c_e = (1 + us) * scale * (1 + u) * (1 + ucs)
    c_s = (1 + us) * scale * (u * (1 + ucs) + ucs) + us * scale
    return cb.add_upper(
        cb.add_upper(cb.scale_upper(e_acc, c_e), cb.scale_upper(s1, c_s)), _float_up((1 + us) * ea + es)
    )


def _counted_constants(kw: dict, changes: int) -> tuple[float, float, float, float] | None:
    """``(afr_rel, afr_C, afr_ypp, afr_abs)`` at ``Y = 0`` of ``attention_forward_acc_running_counted_pp``
    (exact rationals, each rounded up to a float): those of the per-pair theorem (``_afr_bounds`` with
    ``per_pair``) with ``CG := CGc = cg^C (1 + u)^Tt`` (``cg = (1 + ue)(1 + u)^2``, ``C = changes``, ``Tt``
    the tiles), so ``afe_bL`` at ``CGc``; None when ``afe_bL < 1`` fails there."""
    p, scale = ab._attention_bound_args(
        kw["n_keys"], kw["head_dim"], kw["block_n"], kw["max_abs_q"], kw["max_abs_k"], kw["scale"],
        kw["qk_abs_sum"], kw["exp2_error"], dtype=kw["dtype"], max_abs_v=kw["max_abs_v"],
    )  # fmt: skip
    args, tiles = ab._afe_args(
        kw["n_keys"], kw["block_n"], kw["dtype"], kw["storage_rounding"], kw["exp2_error"], scale, p, kw["max_abs_v"]
    )
    k = ab._afa_constants(kw["dot"], args, kw["head_dim"], kw["block_n"], tiles)
    u, ue, ee, ea, us, es, V, X = (k[n] for n in ("u", "ue", "ee", "ea", "us", "es", "V", "X"))
    k["CG"] = ab._pow_up((1 + ue) * (1 + u) ** 2, changes) * ab._pow_up(1 + u, tiles)
    bL, HA, rA = ab._afa_terms(k, kw["block_n"], kw["n_keys"], tiles)
    if not bL < 1:
        return None
    g_rel, g_abs = k["g_rel"], k["g_abs"]
    CB = ab._pow_up(1 + (1 + g_rel) * (1 + u) * (1 + ue) - 1 + g_rel * ((1 + us) * (1 + ue) * X - 1), tiles)
    gA = CB * ((1 + us) * (1 + ue) * X * X - 1)
    Ep = HA * (kw["n_keys"] * V) + rA
    rR = tiles * CB * ((1 + g_rel) * ((1 + u) * ee * Ep + ea + ((1 + us) * ee + es) * (kw["block_n"] * V)) + g_abs)
    rel = ((1 + u) * (gA + bL) / (1 - bL) + u) * (1 + us) + us
    coef = (1 + us) * (1 + u) * X / (1 - bL)
    ypp = ((1 + u) * (gA + bL + X * (CB - 1)) / (1 - bL) + u + 1) * (1 + us)
    absolute = ((1 + u) * rR / (1 - bL) + ea) * (1 + us) + es
    return tuple(_float_up(c) for c in (rel, coef, ypp, absolute))


def forward_counted_bound(
    prob_abs_v: torch.Tensor, run_err: torch.Tensor, score_perturbation: torch.Tensor, changes: int, **kw
) -> torch.Tensor:
    """``Ojas.Attention.Float.ForwardAccRunningCounted``'s bound on ``|out_ic - exact_ic|`` (float64, shaped like
    ``prob_abs_v``; ``attention_forward_acc_running_counted_tf32x3_op_pp`` / ``_tc_op_pp``): every premise and sum
    of :func:`~ojas_ref.verification.bounds.attention.attention_forward_running_bound` with
    ``score_perturbation`` (``kw`` its keyword arguments), plus ``changes >= C``, the caller's count of the row's
    visible keys after its first one whose score's upper bound exceeds every earlier key's lower bound (only at
    a tile holding such a key can the running max change: elsewhere ``alpha = exp2(0) = 1`` and ``l * alpha``
    is exact); the bound ``afr_rel W + afr_C R + afr_ypp Yw + afr_abs`` at ``CG := cg^C (1 + u)^Tt`` in place of
    ``cg^Tt`` (:func:`_counted_constants`: ``afe_bL`` carries ``~ C (ue + 2 u) + Tt u`` instead of
    ``Tt (ue + 2 u)``), ``inf`` everywhere when its ``afe_bL < 1`` fails (no bound). ``ValueError`` as the
    per-pair bound's (its premises are this theorem's) or for ``changes`` not an integer >= 0."""
    if isinstance(changes, bool) or not isinstance(changes, int) or changes < 0:
        raise ValueError(f"changes must be an integer >= 0, got {changes!r}")
    ab.attention_forward_running_bound(prob_abs_v, run_err, score_perturbation=score_perturbation, **kw)
    full = dict(_FORWARD_DEFAULTS, **kw)
    c = _counted_constants(full, changes)
    w, r, y = (t.to(F64) for t in (prob_abs_v, run_err, score_perturbation))
    if c is None:
        return torch.full_like(w, math.inf)
    return _counted_rows(w, r, y, c)


#: the defaults of ``attention_forward_running_bound``'s optional keywords
_FORWARD_DEFAULTS = dict(scale=None, qk_abs_sum=None, exp2_error=ab.EXP2_ERROR, storage_rounding="nearest")
_FORWARD_ARGS = (
    "n_keys", "head_dim", "block_n", "dtype", "max_abs_q", "max_abs_k", "max_abs_v", "scale", "qk_abs_sum",
    "exp2_error", "storage_rounding", "dot",
)  # fmt: skip


def _forward_counted_group(changes: int, kw: dict) -> tuple[float, float, float, float] | None:
    """:func:`_counted_constants` at :func:`forward_counted_bound`'s keywords ``kw`` after the per-pair bound's
    checks and errors (``bounds.attention._afr_prepared``), from its constants computed once: the same exact
    rationals (``afe_bL`` at ``CGc``; ``afa_HA``, ``afa_rA`` and the rest do not depend on ``CG``; ``_afr_from_terms``
    at ``Y = 0`` is :func:`_counted_constants`' formulas)."""
    full = dict(_FORWARD_DEFAULTS, **kw)
    k, (_, ha, ra), tiles = ab._afr_prepared(*(full[n] for n in _FORWARD_ARGS))
    k = dict(k, CG=_counted_cg(k["ue"], k["u"], changes, tiles))
    bl = ab._afe_bL(k, full["block_n"], full["n_keys"], tiles)
    if not bl < 1:
        return None
    c = ab._afr_from_terms(k, (bl, ha, ra), full["block_n"], full["n_keys"], tiles, True)
    return tuple(_float_up(c[n]) for n in ("rel", "C", "ypp", "abs"))


def _counted_rows(
    w: torch.Tensor, r: torch.Tensor, y: torch.Tensor, c: tuple[float | torch.Tensor, ...]
) -> torch.Tensor:
    """``(afr_rel W + afr_C R + afr_ypp Yw + afr_abs) ROUND_UP`` in float64, in that order, at ``c`` of
    :func:`_counted_constants`: floats, or float64 tensors that broadcast (each row's group's)."""
    return (c[0] * w + c[1] * r + c[2] * y + c[3]) * _ROUND_UP


def _lse_counted_base(
    dot: DotModel, args: dict[str, float], head_dim: int, block_n: int, n_keys: int, changes: int, arg: bool = False
):
    """``(lse_bound(Dsc := 0), delta)`` as ``bounds.attention._lse_bound_q`` (exact rationals) with ``CG := CGc =
    cg^C (1 + u)^Tt`` (``C = changes``, ``Tt`` the tiles) in ``afe_bL`` (with ``arg``, ``afe_bL_arg``); None when
    ``afe_bL < 1`` fails there. ``afe_bL`` is affine in ``CG`` and ``lse_bound`` in ``NL``: their coefficients
    once per constants (:func:`_lse_counted_affine`), the same exact rationals at every count."""
    a, b, k0, k1, delta = _lse_counted_affine(ab._dot_model(dot), tuple(args.items()), head_dim, block_n, n_keys, arg)
    bL = a * _counted_cg(Fraction(args["ue"]), Fraction(args["u"]), changes, -(-n_keys // block_n)) + b
    if not bL < 1:
        return None
    return k0 + k1 * (bL / (1 - bL)), delta


@lru_cache(maxsize=ab._MEMO)
def _counted_cg(ue: Fraction, u: Fraction, changes: int, tiles: int) -> Fraction:
    """``CGc = cg^C (1 + u)^Tt`` (``cg = (1 + ue) (1 + u)^2``, ``C = changes``, ``Tt = tiles``), each power rounded
    up (:func:`~ojas_ref.verification.bounds.attention._pow_up`); memoized."""
    return ab._pow_up((1 + ue) * (1 + u) ** 2, changes) * ab._pow_up(1 + u, tiles)


@lru_cache(maxsize=ab._MEMO)
def _lse_counted_affine(
    dot: DotModel,
    items: tuple[tuple[str, float], ...],
    head_dim: int,
    block_n: int,
    n_keys: int,
    arg: bool,
) -> tuple[Fraction, Fraction, Fraction, Fraction, Fraction]:
    """``(a, b, K0, K1, delta)`` at ``args = dict(items)``, exact rationals: ``afe_bL = a CG + b`` (with ``arg``
    ``afe_bL_arg``; :func:`~ojas_ref.verification.bounds.attention._afe_bL` at ``CG`` 0 and 1) and ``lse_bound(Dsc
    := 0) = K0 + K1 NL`` (:func:`~ojas_ref.verification.bounds.attention._lse_bound_nl` at ``NL`` 0 and 1), the
    other constants as ``_lse_bound_q``'s; both affine, checked at 2 (``RuntimeError`` if not); memoized."""
    args = dict(items)
    tiles = -(-n_keys // block_n)
    smax, delta = _score_terms_q(dot, head_dim, Fraction(args["p"]), Fraction(args["scale"]))
    u, ue, ee, ea = (Fraction(args[k]) for k in ("u", "ue", "ee", "ea"))
    k = dict(u=u, ue=ue, ee=ee, ea=ea, X=ab._exp_up(u * 2 * smax), P1=ab._pow_up(1 + u, block_n - 1))
    k["CR"] = ab._pow_up((1 + ue + ee) * (1 + u) ** 2, tiles)

    def bl(cg: int) -> Fraction:
        return ab._afe_bL(dict(k, CG=Fraction(cg)), block_n, n_keys, tiles, arg)

    def lse(nl: int) -> Fraction:
        return ab._lse_bound_nl(smax, Fraction(nl), n_keys, args)

    b, k0 = bl(0), lse(0)
    a, k1 = bl(1) - b, lse(1) - k0
    if bl(2) != 2 * a + b or lse(2) != k0 + 2 * k1:
        raise RuntimeError("afe_bL is not affine in CG or lse_bound in NL: _lse_counted_affine no longer applies")
    return a, b, k0, k1, delta


def lse_counted_bound(
    n_keys: int,
    head_dim: int,
    score_shift: torch.Tensor,
    changes: int,
    *,
    arg: bool = False,
    row_score_max: torch.Tensor | None = None,
    **kw,
) -> torch.Tensor:
    """``Ojas.Attention.Float.ForwardAccRunningCounted``'s bound on the saved lse's ``|lse - exact_lse|`` per row
    (float64, shaped like ``score_shift``; ``attention_lse_error_masked_counted_tf32x3_op_pp`` / ``_tc_op_pp``,
    ``attention_lse_error_masked_dot_counted_pp``): every premise of
    :func:`~ojas_ref.verification.bounds.attention.attention_lse_error_bound` with ``score_shift`` (``kw`` its
    keyword arguments), plus ``changes >= C`` as for :func:`forward_counted_bound`; ``lse_bound(Dsc)`` with
    ``afe_bL`` (through ``NL = bL / (1 - bL)``) at ``CG := cg^C (1 + u)^Tt``, ``Dsc`` capped at ``delta`` (the
    pairs' errors capped at ``delta``: their ``pp_shift`` is at most ``delta`` and their count at most the
    caller's), rounded up; ``inf`` everywhere when its ``afe_bL < 1`` fails. With ``arg``:
    ``Ojas.Attention.Float.PerPairExpArg.attention_lse_error_masked_counted_tf32x3_op_pp_arg``
    (``attention_lse_error_masked_dot_counted_pp_arg``), ``afe_bL_arg`` at ``CGc`` and ``score_shift`` the shift
    of :func:`~ojas_ref.verification.attention_forward_running.exp_arg_shift`, not capped; with ``arg``,
    ``row_score_max`` as for :func:`~ojas_ref.verification.bounds.attention.attention_lse_arg_bound`
    (``attention_lse_error_masked_counted_tf32x3_op_pp_arg_rowmax``). ``changes`` may be an integer tensor shaped
    like ``score_shift``, each row at its own count (the constants once per count). ``ValueError`` as the per-pair
    bound's, for ``changes`` not an integer >= 0 (or such a tensor), or for ``row_score_max`` without ``arg``."""
    if not isinstance(score_shift, torch.Tensor):
        raise ValueError(f"score_shift must be a tensor, got {type(score_shift).__name__}")
    _check_changes(changes, score_shift)
    if row_score_max is not None and not arg:
        raise ValueError("row_score_max goes with arg=True (the _pp_arg_rowmax theorems)")
    ab.attention_lse_error_bound(n_keys, head_dim, score_shift=score_shift, **kw)
    full = dict(dict(scale=None, qk_abs_sum=None, exp2_error=ab.EXP2_ERROR, log2_error=ab.LOG2_ERROR, dot="fp32"), **kw)
    p, scale = ab._attention_bound_args(
        n_keys, head_dim, full["block_n"], full["max_abs_q"], full["max_abs_k"], full["scale"], full["qk_abs_sum"],
        full["exp2_error"],
    )  # fmt: skip
    args = ab._lse_args(n_keys, full["log2_error"], full["exp2_error"], scale, p)
    if isinstance(changes, torch.Tensor):
        cs, index = torch.unique(changes, return_inverse=True)
        cs = cs.tolist()
    else:
        cs, index = [changes], torch.zeros(score_shift.shape, dtype=torch.int64, device=score_shift.device)
    dot, bn = full["dot"], full["block_n"]
    consts = [
        ab._lse_row_constants(_lse_counted_base(dot, args, head_dim, bn, n_keys, c, arg), dot, args, head_dim)
        for c in cs
    ]
    if all(c is None for c in consts):
        return torch.full_like(score_shift, math.inf, dtype=F64)
    return ab._lse_rows(score_shift.to(F64), consts, index, arg, row_score_max)


def _check_changes(changes: int | torch.Tensor, score_shift: torch.Tensor) -> None:
    """``ValueError`` unless ``changes`` is an integer >= 0 or an integer tensor >= 0 shaped like ``score_shift``."""
    if isinstance(changes, torch.Tensor):
        if changes.dtype.is_floating_point or changes.is_complex() or changes.dtype == torch.bool:
            raise ValueError(f"changes must be an integer tensor, got {changes.dtype}")
        if changes.shape != score_shift.shape or bool((changes < 0).any()):
            raise ValueError(f"changes must be >= 0 and shaped like score_shift {tuple(score_shift.shape)}")
    elif isinstance(changes, bool) or not isinstance(changes, int) or changes < 0:
        raise ValueError(f"changes must be an integer >= 0, got {changes!r}")
