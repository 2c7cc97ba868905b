"""The grouped lse bounds' fast path (``attention_forward_running._lse_grouped``: each group's exact-rational
constants once, memoized, then every row at once) against the direct evaluation, one call of the per-group
bound (``attention_lse_error_bound``, ``attention_lse_arg_bound``, ``lse_counted_bound``) per group of rows:
the same floats, ``inf`` where a group's ``afe_bL < 1`` fails, ``ValueError`` where the direct one raises.
CPU only, no kernels."""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch

from ojas_ref.verification import attention_error as ae
from ojas_ref.verification import attention_forward_running as afr
from ojas_ref.verification.bounds import attention as ab
from ojas_ref.verification.bounds import attention_running as ar

F64 = torch.float64
SQ, BN, BM, E = 96, 16, 16, 64


def _direct(dsc, kw, p_rows, counts, changes, arg=False, row_score_max=None):
    """The rows' bounds by one call of the per-group bound per group of ``_lse_grouped``'s rows."""
    errs = ae.unary_errors("cpu", SQ)
    bound = ab.attention_lse_arg_bound if arg else ab.attention_lse_error_bound
    rm = {} if row_score_max is None else {"row_score_max": row_score_max}
    out = (
        bound(SQ, E, score_shift=dsc, **errs, **kw, **rm).clone()
        if changes is None
        else torch.full_like(dsc, torch.inf)
    )
    level = torch.ceil(p_rows / p_rows.max() * afr._P_LEVELS)
    cl = torch.zeros_like(level, dtype=torch.int64) if changes is None else afr._change_level(changes)
    for t in counts.unique().tolist():
        n_t = min(SQ, t * BN)
        for b in level.unique().tolist():
            for c in cl.unique().tolist():
                sel = (counts == t) & (level == b)
                sub = sel & (cl == c)
                if not bool(sub.any()):
                    continue
                g_kw = dict(kw, qk_abs_sum=min(p_rows[sel].max().item(), kw["qk_abs_sum"]))
                ms = {} if row_score_max is None else {"row_score_max": row_score_max[sub]}
                if changes is None:
                    out[sub] = torch.minimum(out[sub], bound(n_t, E, score_shift=dsc[sub], **errs, **g_kw, **ms))
                else:
                    out[sub] = ar.lse_counted_bound(n_t, E, dsc[sub], c, arg=arg, **errs, **g_kw, **ms)
    return out


def _case(p_max: float, seed: int = 0):
    """``(dsc, kw, p_rows, counts, changes, row_score_max)`` of 2 heads of ``SQ`` causal rows, random."""
    gen = torch.Generator().manual_seed(seed)
    p_rows = torch.rand(1, 2, SQ, generator=gen, dtype=F64) * p_max
    dsc = torch.rand(1, 2, SQ, generator=gen, dtype=F64) * 1e-5
    changes = torch.randint(0, SQ, (1, 2, SQ), generator=gen)
    row_max = torch.rand(1, 2, SQ, generator=gen, dtype=F64) * p_max / 8
    kw = dict(block_n=BN, max_abs_q=4.0, max_abs_k=4.0, qk_abs_sum=p_max, scale=E**-0.5, dot=ab.TF32X3_H100)
    counts = afr._tile_counts(SQ, SQ, BM, BN, True)
    return dsc, kw, p_rows, counts, changes, row_max


@pytest.mark.parametrize("changed", [False, True])
@pytest.mark.parametrize(("arg", "rowmax"), [(False, False), (True, False), (True, True)])
def test_grouped_lse_equals_the_direct_per_group_bounds(changed, arg, rowmax):
    """Every mode of ``_lse_grouped`` (per-pair, counted, with the exp2 argument per pair, at the rows' own score
    bounds) gives exactly the direct per-group values, finite and below 1."""
    dsc, kw, p_rows, counts, changes, row_max = _case(40.0)
    ch, rm = (changes if changed else None), (row_max if rowmax else None)
    got = afr._lse_grouped(dsc, kw, p_rows, counts, E, SQ, "cpu", ch, arg, rm)
    want = _direct(dsc, kw, p_rows, counts, ch, arg, rm)
    assert bool(torch.isfinite(got).all()) and got.max().item() < 1.0
    assert torch.equal(got, want)


def test_grouped_lse_arg_inf_where_a_group_fails():
    """Near ``2^(u K)``'s limit the groups of large ``sum |q k|`` fail ``afe_bL_arg < 1``: ``inf`` there, as the
    direct evaluation, finite in the others; the per-pair and counted modes raise ``ValueError`` as it does."""
    dsc, kw, p_rows, counts, changes, _ = _case(2.0**22 * E**0.5)
    got = afr._lse_grouped(dsc, kw, p_rows, counts, E, SQ, "cpu", None, True)
    assert torch.equal(got, _direct(dsc, kw, p_rows, counts, None, True))
    assert bool(torch.isinf(got).any()) and bool(torch.isfinite(got).any())
    for ch, arg in ((None, False), (changes, False), (changes, True)):
        with pytest.raises(ValueError, match="afe_bL"):
            _direct(dsc, kw, p_rows, counts, ch, arg)
        with pytest.raises(ValueError, match="afe_bL"):
            afr._lse_grouped(dsc, kw, p_rows, counts, E, SQ, "cpu", ch, arg)


def _counted_direct(args: dict, changes: int, arg: bool):
    """``(lse_bound(Dsc := 0), delta)`` of the counted theorem at ``CGc = cg^C (1 + u)^Tt`` straight from its
    formulas (``afe_bL``, ``NL = bL / (1 - bL)``, ``lse_bound``), ``None`` where ``afe_bL < 1`` fails."""
    tiles = -(-SQ // BN)
    smax, delta = ab._score_terms_q(ab.TF32X3_H100, E, Fraction(args["p"]), Fraction(args["scale"]))
    u, ue, ee, ea, el, ucl = (Fraction(args[k]) for k in ("u", "ue", "ee", "ea", "el", "ucl"))
    k = dict(u=u, ue=ue, ee=ee, ea=ea, X=ab._exp_up(u * 2 * smax), P1=ab._pow_up(1 + u, BN - 1))
    k["CG"] = ab._pow_up((1 + ue) * (1 + u) ** 2, changes) * ab._pow_up(1 + u, tiles)
    k["CR"] = ab._pow_up((1 + ue + ee) * (1 + u) ** 2, tiles)
    bl = ab._afe_bL(k, BN, SQ, tiles, arg)
    if not bl < 1:
        return None
    nl = bl / (1 - bl)
    a = smax + 2 * (ab._ln_up(SQ) + nl) + el
    a2 = (1 + u) * a + ea
    return u * a2 * (1 + ucl) + ea + a2 * ucl + (u * a + ea) + el + nl, delta


@pytest.mark.parametrize("arg", [False, True])
def test_counted_base_affine_equals_the_direct_formulas(arg):
    """``_lse_counted_base`` (``afe_bL`` affine in ``CG``, ``lse_bound`` in ``NL``, their coefficients once) gives
    the direct formulas' exact rationals at every count, ``None`` where they fail."""
    for p, counts in ((40.0, (0, 1, 2, 5, 64, 95)), (2.0**22 * E**0.5, (0, 95))):
        args = ab._lse_args(SQ, ab.LOG2_ERROR, ab.EXP2_ERROR, E**-0.5, p)
        for c in counts:
            assert ar._lse_counted_base(ab.TF32X3_H100, args, E, BN, SQ, c, arg) == _counted_direct(args, c, arg)
    assert _counted_direct(args, 95, arg) is None


def test_counted_bound_takes_a_tensor_of_counts():
    """``lse_counted_bound`` with a count per row equals the per-count calls row by row; a float or negative
    tensor of counts raises ``ValueError``."""
    dsc, kw, _, _, changes, row_max = _case(40.0)
    for arg, rm in ((False, None), (True, None), (True, row_max)):
        ms = {} if rm is None else {"row_score_max": rm}
        got = ar.lse_counted_bound(SQ, E, dsc, changes, arg=arg, **kw, **ms)
        for c in changes.unique().tolist():
            sel = changes == c
            ms = {} if rm is None else {"row_score_max": rm[sel]}
            assert torch.equal(got[sel], ar.lse_counted_bound(SQ, E, dsc[sel], c, arg=arg, **kw, **ms))
    for bad in (changes.to(F64), -changes - 1):
        with pytest.raises(ValueError, match="changes"):
            ar.lse_counted_bound(SQ, E, dsc, bad, **kw)


def test_memoized_constants_match_a_fresh_evaluation():
    """The memoized exact constants (``_pow_up``, ``_score_terms_q``, ``_lse_bound_q``'s hand copy, the counted
    ones) equal a fresh evaluation with the memos cleared; a bad ``dot`` or ``n`` still raises ``ValueError``."""
    args = ab._lse_args(SQ, ab.LOG2_ERROR, ab.EXP2_ERROR, E**-0.5, 40.0)
    first = [ab._lse_bound_q(ab.TF32X3_H100, args, E, BN, SQ, SQ // BN, True)]
    first.append(ar._lse_counted_base(ab.TF32X3_H100, args, E, BN, SQ, 7, True))
    memos = (ab._pow_up, ab._exp_up, ab._ln_up, ab._score_terms, ab._lse_bound_hand, ab._dot_constants)
    for memo in memos + (ar._lse_counted_affine, ar._counted_cg):
        memo.cache_clear()
    assert ab._lse_bound_q(ab.TF32X3_H100, args, E, BN, SQ, SQ // BN, True) == first[0]
    assert ar._lse_counted_base(ab.TF32X3_H100, args, E, BN, SQ, 7, True) == first[1]
    with pytest.raises(ValueError, match="dot"):
        ab._score_terms_q(["tf32x3"], E, 40, 1)
    with pytest.raises(ValueError, match="n must be"):
        ab.dot_error_constants(ab.TF32X3_H100, True)
