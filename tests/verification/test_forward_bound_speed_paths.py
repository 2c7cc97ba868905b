"""The forward output bound's grouped evaluation (``attention_forward_running._grouped``: each group's constants
once, every row at once) against one ``attention_forward_running_bound`` / ``forward_counted_bound`` call per
group: the same values (``torch.equal``), ``inf`` groups and errors."""

import math

import pytest
import torch

from ojas_ref.verification import attention_forward_running as afr
from ojas_ref.verification.bounds import attention as ab
from ojas_ref.verification.bounds import attention_running as ar

F64 = torch.float64


def _per_group(w, r, yw, kw, p_rows, counts, changes):
    """The grouping of ``afr._grouped``, one bound call per group (the direct evaluation)."""
    ev, sk, bn = w.shape[-1], kw["n_keys"], kw["block_n"]
    level = torch.ceil(p_rows / p_rows.max().clamp_min(torch.finfo(F64).tiny) * afr._P_LEVELS).to(torch.int64)
    n_lev = 2 * sk
    cl = torch.zeros_like(level) if changes is None else afr._change_level(changes)
    gid = ((counts.to(torch.int64) * (afr._P_LEVELS + 1) + level) * n_lev + cl).flatten()
    ws, rs, ys = (x.reshape(-1, ev) for x in (w, r, yw))
    ps, out = p_rows.flatten(), torch.empty_like(ws)
    for key in torch.unique(gid).tolist():
        g = gid == key
        tiles, c = divmod(key, n_lev)
        g_kw = dict(
            kw, n_keys=min(sk, tiles // (afr._P_LEVELS + 1) * bn), qk_abs_sum=min(ps[g].max().item(), kw["qk_abs_sum"])
        )
        if changes is None:
            got = ab.attention_forward_running_bound(ws[g], rs[g], score_perturbation=ys[g], **g_kw)
        else:
            got = ar.forward_counted_bound(ws[g], rs[g], ys[g], c, **g_kw)
        out[g] = got.to(out.dtype)
    return out.reshape(w.shape)


def _case(seed: int, sq: int = 48, ev: int = 8, qk_max: float = 40.0):
    """Random ``(w, r, yw, kw, p_rows, counts, changes)`` in the ranges of ``forward_per_pair_bounds``'."""
    g = torch.Generator().manual_seed(seed)
    shape = (1, 2, sq, ev)
    w, r, yw = (torch.rand(shape, generator=g, dtype=F64) * s for s in (1.0, 1e-3, 1e-2))
    kw = dict(
        n_keys=sq,
        head_dim=16,
        block_n=8,
        dtype=torch.float32,
        max_abs_q=3.0,
        max_abs_k=3.0,
        max_abs_v=1.0,
        scale=0.25,
        qk_abs_sum=qk_max,
        dot=ab.TF32X3_H100,
    )
    p_rows = torch.rand(shape[:-1], generator=g, dtype=F64) * qk_max
    counts = -(-torch.arange(1, sq + 1) // 8)
    changes = torch.randint(0, sq, shape[:-1], generator=g)
    return w, r, yw, kw, p_rows, counts, changes


@pytest.mark.parametrize("seed", [0, 1])
def test_grouped_equals_per_group(seed: int) -> None:
    w, r, yw, kw, p_rows, counts, changes = _case(seed)
    got = afr._row_grouped_bound(w, r, yw, kw, p_rows, counts)
    assert torch.equal(got, _per_group(w, r, yw, kw, p_rows, counts, None))
    got_c = afr._row_counted_bound(w, r, yw, kw, p_rows, counts, changes)
    assert torch.equal(got_c, _per_group(w, r, yw, kw, p_rows, counts, changes))
    assert torch.isfinite(got).all() and not torch.equal(got, got_c)


def test_counted_inf_groups() -> None:
    """Groups whose counted ``afe_bL < 1`` fails (many changes at a large ``exp2_error``: ``cg^C`` beyond the
    per-pair ``cg^Tt``) are ``inf``, the others finite, each as the per-group call."""
    w, r, yw, kw, p_rows, counts, changes = _case(2)
    kw["exp2_error"] = 2.0**-5
    changes = torch.where(torch.arange(48) % 2 == 0, 47, 0).expand(changes.shape).contiguous()
    got = afr._row_counted_bound(w, r, yw, kw, p_rows, counts, changes)
    assert torch.equal(got, _per_group(w, r, yw, kw, p_rows, counts, changes))
    assert torch.isinf(got).any() and torch.isfinite(got).any()


def test_float32_rows() -> None:
    """``w`` in float32: the result in its dtype, as the per-group calls' stored into it."""
    w, r, yw, kw, p_rows, counts, changes = _case(3)
    w32 = w.to(torch.float32)
    for ch in (None, changes):
        got = afr._grouped(w32, r, yw, kw, p_rows, counts, ch)
        assert got.dtype == torch.float32
        assert torch.equal(got, _per_group(w32, r, yw, kw, p_rows, counts, ch))


def _message(fn, *args) -> str:
    with pytest.raises(ValueError) as err:
        fn(*args)
    return str(err.value)


@pytest.mark.parametrize("which", [0, 1, 2])
@pytest.mark.parametrize("counted", [False, True])
def test_bad_rows_raise_as_per_group(which: int, counted: bool) -> None:
    w, r, yw, kw, p_rows, counts, changes = _case(4)
    bad = [w, r, yw]
    bad[which] = bad[which].clone()
    bad[which][0, 1, 30, 2] = -1.0 if which != 1 else math.nan
    args = (*bad, kw, p_rows, counts, changes if counted else None)
    msg = _message(afr._grouped, *args)
    assert msg == _message(_per_group, *args)
    assert ("prob_abs_v", "run_err", "score_perturbation")[which] in msg


@pytest.mark.parametrize("counted", [False, True])
def test_side_condition_raises_as_per_group(counted: bool) -> None:
    """A failed per-pair ``afe_bL < 1`` (huge scores) raises the per-pair bound's error in both paths, before
    any row check."""
    w, r, yw, kw, p_rows, counts, changes = _case(5)
    kw["scale"] = 2.0**40
    r = r.clone()
    r[0, 0, -1, 0] = -1.0
    args = (w, r, yw, kw, p_rows, counts, changes if counted else None)
    msg = _message(afr._grouped, *args)
    assert msg == _message(_per_group, *args)
    assert "afe_bL < 1" in msg


@pytest.mark.parametrize("changes", [0, 1, 5, 64, 4096])
@pytest.mark.parametrize("exp2_error", [ab.EXP2_ERROR, 2.0**-5])
def test_counted_group_constants(changes: int, exp2_error: float) -> None:
    """``_forward_counted_group`` (the per-pair constants once, ``afe_bL`` at ``CGc``) is ``_counted_constants``
    (``None`` included)."""
    kw = dict(_case(6)[3], n_keys=40, qk_abs_sum=17.5, exp2_error=exp2_error)
    want = ar._counted_constants(dict(ar._FORWARD_DEFAULTS, **kw), changes)
    assert ar._forward_counted_group(changes, kw) == want
    assert (want is None) == (exp2_error > ab.EXP2_ERROR and changes >= 64)
