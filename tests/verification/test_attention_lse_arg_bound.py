"""The saved lse's bound with the rounding of the exp2 argument ``s_j - m'`` charged per pair
(``Ojas.Attention.Float.PerPairExpArg.attention_lse_error_masked_tf32x3_op_pp_arg``: ``afe_bL_arg``, no ``X`` in
the weights' factor, and ``Dsc >= ln sum_j P_j e^(d_j + g_j)``, ``g_j`` the argument's error at most ``u`` times
the key's gap to the row's max): ``attention_lse_arg_bound`` against the per-pair bound, ``exp_arg_shift``, and
the interpreter's lse within the new bound at the H100's 3xTF32 model. CPU only."""

from __future__ import annotations

import math
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from _attention_cases import attention_inputs, interpreter_at_h100_dots  # noqa: E402
from ojas_ref.verification import attention_error as ae  # noqa: E402
from ojas_ref.verification import attention_forward_running as afr  # noqa: E402
from ojas_ref.verification.bounds import attention as ab  # noqa: E402

F64 = torch.float64


def test_lse_arg_bound_below_the_per_pair_bound():
    """4096 keys in tiles of 64, the H100's 3xTF32 dot, exp2 error 1.44e-7: at the same shift the bound without
    ``X`` in the weights is below the per-pair one by more than 1e-6; it grows with ``score_shift``; a float
    ``score_shift`` raises ``ValueError``."""
    kw = dict(block_n=64, max_abs_q=3.0, max_abs_k=3.0, scale=0.125, qk_abs_sum=60.0, dot=ab.TF32X3_H100)
    kw["exp2_error"] = 1.44e-7
    dsc = torch.tensor([0.0, 1e-6, 1e-5], dtype=F64)
    old = ab.attention_lse_error_bound(4096, 64, score_shift=dsc, **kw)
    new = ab.attention_lse_arg_bound(4096, 64, score_shift=dsc, **kw)
    print(f"lse bound, 4096 keys, Dsc = 0: per-pair {old[0]:.4g}, exp2 argument per pair {new[0]:.4g}")
    assert bool((new < old - 1e-6).all())
    assert bool((new[1:] > new[:-1]).all())
    with pytest.raises(ValueError, match="score_shift"):
        ab.attention_lse_arg_bound(4096, 64, score_shift=1e-6, **kw)


def test_lse_arg_bound_at_the_row_score_max():
    """``row_score_max`` (``_pp_arg_rowmax``): below the a-priori bound for rows whose scores are below ``smax``,
    equal to it for a row bound above ``smax`` (capped there), increasing in the row bound; a mis-shaped or
    negative one raises ``ValueError``."""
    kw = dict(block_n=64, max_abs_q=3.0, max_abs_k=3.0, scale=0.125, qk_abs_sum=60.0, dot=ab.TF32X3_H100)
    kw["exp2_error"] = 1.44e-7
    dsc = torch.full((3,), 1e-6, dtype=F64)
    old = ab.attention_lse_arg_bound(4096, 64, score_shift=dsc, **kw)
    rm = torch.tensor([1.0, 4.0, 1e3], dtype=F64)
    new = ab.attention_lse_arg_bound(4096, 64, score_shift=dsc, row_score_max=rm, **kw)
    print(f"lse arg bound, 4096 keys: a priori {old[0]:.4g}, row max 1 {new[0]:.4g}, row max 4 {new[1]:.4g}")
    assert bool((new[:2] < old[:2] - 1e-6).all())
    assert new[0] < new[1]
    assert new[2] <= old[2] * (1 + 1e-12)
    for bad in (rm[:2], -rm):
        with pytest.raises(ValueError, match="row_score_max"):
            ab.attention_lse_arg_bound(4096, 64, score_shift=dsc, row_score_max=bad, **kw)


def test_row_score_abs_max_bounds_the_scores():
    """``_row_score_abs_max``: at least every visible ``|scale q.k_j|`` of the row, causal keys past the row left
    out (the first row sees only its own key)."""
    q, k = (torch.randn(1, 2, 8, 16, generator=torch.Generator().manual_seed(s), dtype=F64) for s in (1, 2))
    got = afr._row_score_abs_max(q, k, True, 0.25, 1e-12)
    s = (q @ k.transpose(-1, -2) * 0.25).abs()
    assert bool((got >= s.tril().amax(-1)).all())
    assert torch.allclose(got[..., 0], s[..., 0, 0], rtol=1e-9)


def test_exp_arg_shift_adds_the_gap():
    """Two visible keys 10 nats apart and a masked one: the shift is at least the one of the scores' errors
    alone and at least the far key's weight times ``u`` its gap; the masked key adds nothing."""
    s = torch.tensor([[[[0.0, -10.0, -math.inf]]]], dtype=F64)
    d = torch.tensor([[[[1e-7, 1e-7, 0.0]]]], dtype=F64)
    p_up = torch.softmax(s, -1) * (1 + 1e-12)
    got = afr.exp_arg_shift(s, d, p_up, 0.0)
    assert got.shape == (1, 1, 1)
    assert got.item() >= afr._pair_shift(p_up, d).item()
    assert got.item() >= p_up[..., 1].item() * 10.0 * 2.0**-24
    assert got.item() <= 2e-7 + 11.0 * 2.0**-24


@pytest.mark.interpreter
def test_interpreter_lse_within_the_arg_bound(monkeypatch):
    """With ``kernel_dot`` the H100's 3xTF32 model, S = 256, E = 64, full and causal: the interpreter's lse
    within the new bound alone (``_row_lse_arg_bound`` at the rows' own score bounds, ``_pp_arg_rowmax``) and
    below it at the a-priori ``smax``; the backward's per-row lse premise (``_row_lse_errors``) at most the one
    without it everywhere, and below it at its median (causal)."""
    interpreter_at_h100_dots(monkeypatch)
    from ojas_kernels.attention import flash_attention_forward

    q, k, v, _ = attention_inputs(1, 1, 256, 64, 7)
    scale = 64**-0.5
    for causal in (False, True):
        _, lse = flash_attention_forward(q, k, v, causal, scale, None)
        err = (lse.to(F64) - ae.exact_lse(q, k, causal, scale)).abs()
        c = ae._backward_constants(q, k, causal, scale)
        orig, seen = afr._row_lse_arg_bound, {}
        with monkeypatch.context() as m:
            m.setattr(afr, "_row_lse_arg_bound", lambda *a: seen.setdefault("arg", orig(*a)))
            got = ae._row_lse_errors(q, k, causal, scale, c, 64)
        assert bool((err <= seen["arg"]).all())
        with monkeypatch.context() as m:
            m.setattr(afr, "_row_score_abs_max", lambda *_: None)
            m.setattr(afr, "_row_lse_arg_bound", lambda *a: seen.setdefault("smax", orig(*a)))
            ae._row_lse_errors(q, k, causal, scale, c, 64)
        assert bool((seen["arg"] < seen.pop("smax")).all())
        with monkeypatch.context() as m:
            m.setattr(afr, "_row_lse_arg_bound", lambda dsc, *_: torch.full_like(dsc, math.inf))
            old = ae._row_lse_errors(q, k, causal, scale, c, 64)
        print(
            f"causal={causal}: lse premise largest {old.max():.4g} -> {got.max():.4g}, median "
            f"{old.median():.4g} -> {got.median():.4g}, max err / new bound {(err / seen['arg']).max():.3g}"
        )
        assert bool((got <= old).all())
        if causal:
            assert got.median().item() < old.median().item()
