"""The proved bound on the linear cross-entropy's lse and loss with a final-logit softcap as tolerances.

``Ojas.LinearCrossEntropy.Float.SoftcapError`` (rocq/LinearCrossEntropy/Float/SoftcapError.v): the
kernel's capped logit ``rnd(c * th(r))`` (``_softcap``; ``th`` = ``_cap_tanh``, its computed
tanh(r / c), within a measured premise ``LINEAR_CROSS_ENTROPY_TANH_ERROR``) is within ``sc_delta`` of
``c tanh(y / c)`` (``sc_logit_error``: the softcap is 1-Lipschitz), so ``ce_lse_error_softcap`` /
``ce_loss_error_softcap`` / ``ce_lse_error_two_level_softcap`` bound the lse and the loss
against the exact capped logits' (the ``softcap`` argument of the bound functions).

* CPU (Triton's interpreter): the premise measured; the row loop (``_rows_kernel`` STREAM,
  HAS_CAP) on given raw float32 / bfloat16 logits against float64 (raw delta = 0), caps 30 and
  5 (where it bites: the raw logits reach 7 c); the whole 3-product forward with ignored tokens
  and the 4-product forward against float64 from the upcast inputs.
* Mutants of ``_softcap`` (the cap applied twice; the clamp of 2 r / c at 8 instead of 80)
  exceed the bound; the kernel as it is stays within it.
* GPU (``-m gpu``): the premises on the device (``_cap_tanh`` with ex2.approx and the
  approximate division) from its record of ``ojas verify-device``, then V = 128256, D = 4096, bfloat16 and float32, caps 30 and 5.
The capped gradients of the 3-product schedule: ``Ojas.LinearCrossEntropy.Float.SoftcapGradError.sc_dh_error``
/ ``sc_dw_error`` (built on ``sc_chain_error`` for the chain factor ``1 - (z / c)^2``), their
coefficients from the oracle (``Ojas.Bounds.LinearCrossEntropyGrad.sc_grad_q``); the 4-product schedule's capped
gradients have no theorem.
"""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

from ojas_kernels import linear_cross_entropy as kernels  # noqa: E402
from ojas_kernels import linear_cross_entropy_kernels as jit_kernels  # noqa: E402  (where the kernels find _softcap)
from ojas_ref.verification.bounds.common import EXP_ERROR  # noqa: E402
from ojas_ref.verification.bounds.linear_cross_entropy import (  # noqa: E402
    LINEAR_CROSS_ENTROPY_DIV_ERROR,
    LINEAR_CROSS_ENTROPY_TANH_ERROR,
    linear_cross_entropy_logit_error_bound,
    linear_cross_entropy_loss_error_bound,
    linear_cross_entropy_lse_error_bound,
    linear_cross_entropy_merge_lse_error_bound,
    linear_cross_entropy_softcap_chain_error_bound,
    linear_cross_entropy_softcap_logit_error_bound,
)
from ojas_ref.verification.linear_cross_entropy_error import (  # noqa: E402
    cap_sweep,
    exact_capped,
    exact_gradients,
    gradient_bounds,
    gradient_sums,
    exact_lse,
    kernel_cap,
    kernel_stream_lse,
    measured_tanh_error,
    stream_block_v,
)

F64 = torch.float64
CPU_EXP_ERROR = EXP_ERROR[torch.float32]
CAPS = (30.0, 5.0)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("cap", CAPS)
def test_tanh_premise_measured_on_cpu(cap):
    assert measured_tanh_error("cpu", cap, points=1 << 16) <= LINEAR_CROSS_ENTROPY_TANH_ERROR


def test_softcap_bound_values():
    # the cap shrinks Zmax to about c: the exact-logit bound at raw |z| <= 300 drops
    kw = dict(dtype=torch.float32, block_v=4096, exact_logits=True, max_abs_logit=300.0)
    raw = linear_cross_entropy_lse_error_bound(128256, 4096, **kw)
    capped = linear_cross_entropy_lse_error_bound(128256, 4096, softcap=30.0, **kw)
    assert capped < raw and capped < 1e-3
    d, z = linear_cross_entropy_softcap_logit_error_bound(0.01, 30.0)
    et = LINEAR_CROSS_ENTROPY_TANH_ERROR
    sc_delta = 0.01 + 30.0 * et + 2.0**-24 * 30.0 * (1 + et) + 2.0**-149
    assert sc_delta <= d <= sc_delta * (1 + 1e-9) and 30.0 < z < 30.0 * (1 + 2e-6)
    # the logit bound with softcap: the raw delta composed
    dl, _ = linear_cross_entropy_logit_error_bound(128256, 4096, dtype=torch.bfloat16, dot_abs_sum=60.0)
    dc, zc = linear_cross_entropy_logit_error_bound(128256, 4096, dtype=torch.bfloat16, dot_abs_sum=60.0, softcap=30.0)
    assert (dc, zc) == pytest.approx(linear_cross_entropy_softcap_logit_error_bound(dl, 30.0), rel=1e-9)
    for bad in (
        dict(softcap=0.0),
        dict(softcap=-1.0),
        dict(softcap=float("nan")),
        dict(softcap=5.0, tanh_error=1.0),
        dict(softcap=5.0, tanh_rel_error=-1.0),
    ):
        with pytest.raises(ValueError):
            linear_cross_entropy_lse_error_bound(
                1000, 1, dtype=torch.float32, block_v=16, exact_logits=True, max_abs_logit=1.0, **bad
            )


def _chain_errors(device: str, cap: float, points: int) -> tuple[float, float, float]:
    """(largest error of the kernel's chain factor _cap_chain(_softcap(r)) against
    1 - tanh(r / c)^2, sc_chain_error's bound at raw error 0, the error with the factor dropped)."""
    r = cap_sweep(cap, points, device)
    exact = 1.0 - torch.tanh(r.to(F64) / cap) ** 2
    err = (kernel_cap(r, cap, chain=True).to(F64) - exact).abs().max().item()
    bound = linear_cross_entropy_softcap_chain_error_bound(
        linear_cross_entropy_softcap_logit_error_bound(0.0, cap)[0], cap
    )
    return err, bound, (1.0 - exact).abs().max().item()


@pytest.mark.parametrize("cap", CAPS)
def test_chain_factor_within_bound(cap):
    """sc_chain_error on the kernel's _cap_chain; the mutant without the factor far outside."""
    err, bound, dropped = _chain_errors("cpu", cap, 1 << 14)
    print(f"cap {cap}: chain factor error {err:.3e} bound {bound:.3e} ratio {bound / max(err, 1e-300):.1f}")
    assert err <= bound < 1e-5 < dropped


def _raw_logits(dtype: torch.dtype, n: int = 6, V: int = 1000, scale: float = 8.0) -> torch.Tensor:
    z = torch.randn(n, V, generator=_gen(1)) * scale
    z[0, 700] += 35.0  # the max jumps in a late tile, past 7 c at c = 5
    return z.to(dtype)


def _row_bound(V: int, dtype: torch.dtype, z: torch.Tensor, cap: float) -> float:
    return linear_cross_entropy_lse_error_bound(
        V,
        1,
        dtype=dtype,
        block_v=stream_block_v(dtype, "cpu"),
        exact_logits=True,
        max_abs_logit=z.abs().max().item(),
        exp_error=CPU_EXP_ERROR,
        softcap=cap,
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("cap", CAPS)
def test_row_kernel_lse_and_loss_within_bound(dtype, cap):
    z = _raw_logits(dtype)
    n, V = z.shape
    tgt = torch.arange(n) * 7
    tgt[0] = 700
    lse, loss = kernel_stream_lse(z, tgt, softcap=cap)
    ref = exact_lse(z, cap)
    bound = _row_bound(V, dtype, z, cap)
    err = (lse.to(F64) - ref).abs().max().item()
    print(f"{dtype} cap {cap}: lse error {err:.3e} bound {bound:.3e} ratio {bound / max(err, 1e-300):.1f}")
    assert err <= bound < 1e-3, (err, bound)
    # the loss rnd(lse - z_t) with the capped target logit: ce_loss_error_softcap at raw delta 0
    yt = exact_capped(z, cap)[torch.arange(n), tgt]
    delta, _ = linear_cross_entropy_softcap_logit_error_bound(0.0, cap)
    lerr = (loss.to(F64) - (ref - yt)).abs().max().item()
    assert lerr <= linear_cross_entropy_loss_error_bound(bound, delta, (ref - yt).abs().max().item())
    # the cap bites: the uncapped lse is far outside
    assert (exact_lse(z) - ref).abs().max().item() > 100 * bound


_SOFTCAP = kernels._softcap


@triton.jit
def _cap_twice(r, softcap):
    return _SOFTCAP(_SOFTCAP(r, softcap), softcap)


@triton.jit
def _tanh_clamped_at_8(r, softcap):
    return 1.0 - 2.0 / (tl.exp(tl.minimum(2.0 * r / softcap, 8.0)) + 1.0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="mutants are patched into the interpreter's kernels")
@pytest.mark.parametrize("mutant", [None, "cap_twice", "clamp_at_8"])
def test_softcap_mutants_exceed_bound(mutant, monkeypatch):
    cap = 5.0
    z = _raw_logits(torch.float32)
    if mutant == "cap_twice":
        monkeypatch.setattr(jit_kernels, "_softcap", _cap_twice)
    elif mutant == "clamp_at_8":
        monkeypatch.setattr(jit_kernels, "_cap_tanh", _tanh_clamped_at_8)
    lse, _ = kernel_stream_lse(z, torch.zeros(z.shape[0], dtype=torch.long), softcap=cap)
    excess = (lse.to(F64) - exact_lse(z, cap)).abs().max().item() / _row_bound(z.shape[1], torch.float32, z, cap)
    print(f"{mutant}: largest error / bound {excess:.3g}")
    assert (excess <= 1.0) == (mutant is None)


def _gpu_inputs(N: int, dtype: torch.dtype, ignore_every: int):
    """N tokens at V = 128256, D = 4096 on CUDA (weights of std 0.02), every
    ``ignore_every``-th target ignored; IEEE float32 products (TF32 is not covered)."""
    assert torch.get_float32_matmul_precision() == "highest"
    D, V = 4096, 128256
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(N, D, device="cuda", generator=gen).to(dtype)
    w = (torch.randn(V, D, device="cuda", generator=gen) * 0.02).to(dtype)
    target = torch.randint(0, V, (N,), device="cuda", generator=gen)
    target[::ignore_every] = -100
    return x, w, target


def _capped_reference(x, w, target, cap):
    y = exact_capped(x.to(F64) @ w.to(F64).t(), cap)
    lse = torch.logsumexp(y, dim=1)
    kept = (target != -100).nonzero().squeeze(1)
    return lse, lse[kept] - y[kept, target[kept]], kept


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("cap", CAPS)
def test_three_product_forward_within_bound(dtype, cap):
    N, D, V = 8, 64, 700
    x = torch.randn(N, D, generator=_gen(3)).to(dtype)
    w = (torch.randn(V, D, generator=_gen(4)) * 0.6).to(dtype)  # raw logits up to about 20
    target = torch.randint(0, V, (N,), generator=_gen(5))
    target[[1, 6]] = -100
    cfg = kernels.default_config(dtype, x.device)
    loss = kernels._three_products(
        x, w, None, target, -100, "sum", kernels._Options(0.0, 0.0, cap), (True, False, False), cfg
    ).loss
    _, ref, kept = _capped_reference(x, w, target, cap)
    P = (x.to(F64).abs() @ w.to(F64).abs().t()).max().item()
    kw = dict(dtype=dtype, dot_abs_sum=P, softcap=cap)
    b = linear_cross_entropy_lse_error_bound(V, D, block_v=stream_block_v(dtype, "cpu"), exp_error=CPU_EXP_ERROR, **kw)
    delta, _ = linear_cross_entropy_logit_error_bound(V, D, **kw)
    lb = linear_cross_entropy_loss_error_bound(b, delta, ref.abs().max().item())
    err = (loss[kept].to(F64) - ref).abs().max().item()
    print(f"{dtype} cap {cap}: loss error {err:.3e} bound {lb:.3e} ratio {lb / max(err, 1e-300):.1f}")
    assert err <= lb < 1.0, (err, lb)
    assert (loss[target == -100] == 0).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_two_level_forward_within_bound(dtype):
    """linear_cross_entropy_forward (4 products) with softcap 5: ce_lse_error_two_level_softcap."""
    N, D, V, tpp, cap = 6, 32, 700, 4, 5.0
    x = torch.randn(N, D, generator=_gen(6)).to(dtype)
    w = (torch.randn(V, D, generator=_gen(7)) * 0.6).to(dtype)
    target = torch.randint(0, V, (N,), generator=_gen(8))
    cfg = dataclasses.replace(kernels.default_config(dtype, torch.device("cpu")), tiles_per_program=tpp)
    _, lse = kernels.linear_cross_entropy_forward(x, w, target, softcap=cap, config=cfg)
    ref, _, _ = _capped_reference(x, w, target, cap)
    P = (x.to(F64).abs() @ w.to(F64).abs().t()).max().item()
    n_groups = -(-(-(-V // cfg.fwd.block_n)) // tpp)
    block_p = min(cfg.rows.block_p, 1 << (n_groups - 1).bit_length())
    b = linear_cross_entropy_merge_lse_error_bound(
        V,
        D,
        dtype=dtype,
        block_n=cfg.fwd.block_n,
        tiles_per_program=tpp,
        block_p=block_p,
        dot_abs_sum=P,
        exp_error=CPU_EXP_ERROR,
        softcap=cap,
    )
    err = (lse.to(F64) - ref).abs().max().item()
    assert err <= b < 1e-2, (err, b)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("cap", CAPS)
def test_gpu_llama3_size_softcap_within_bound(dtype, cap):
    """The device's computed tanh (within LINEAR_CROSS_ENTROPY_TANH_ERROR) and division ``z / c``
    (within LINEAR_CROSS_ENTROPY_DIV_ERROR) from this device's record of ``ojas verify-device`` (every
    float32 input; skipped, naming it, without a record), then the 3-product forward at
    V = 128256, D = 4096 (raw logits up to about 7: cap 5 bites) against float64, every ninth
    token ignored (IEEE float32 products)."""
    from ojas_ref.verification import device_premises as dp

    names = [f"softcap tanh c={cap:g}", f"softcap z/c c={cap:g}"]
    try:
        p = dp.checked_premises(names)
    except dp.PremisesNotChecked as err:
        pytest.skip(str(err))
    stale = "the record assumed other constants: rerun `ojas verify-device`"
    assert p[names[0]]["assumed"] == LINEAR_CROSS_ENTROPY_TANH_ERROR, stale
    assert p[names[1]]["assumed"]["relative"] == LINEAR_CROSS_ENTROPY_DIV_ERROR, stale
    print(f"softcap premises on the device (ojas verify-device), cap {cap}: {[p[n]['measured'] for n in names]}")
    err, bound, _ = _chain_errors("cuda", cap, 1 << 20)
    print(f"chain factor on the device, cap {cap}: error {err:.3e} bound {bound:.3e}")
    assert err <= bound
    x, w, target = _gpu_inputs(64, dtype, ignore_every=9)
    D, V = x.shape[1], w.shape[0]
    loss = kernels._three_products(
        x,
        w,
        None,
        target,
        -100,
        "sum",
        kernels._Options(0.0, 0.0, cap),
        (True, False, False),
        kernels.default_config(dtype, x.device),
    ).loss
    _, ref, kept = _capped_reference(x, w, target, cap)
    P = (x.to(F64).abs() @ w.to(F64).abs().t()).max().item()
    kw = dict(dtype=dtype, dot_abs_sum=P, softcap=cap)
    b = linear_cross_entropy_lse_error_bound(V, D, block_v=stream_block_v(dtype, "cuda"), **kw)
    delta, _ = linear_cross_entropy_logit_error_bound(V, D, **kw)
    lb = linear_cross_entropy_loss_error_bound(b, delta, ref.abs().max().item())
    err = (loss[kept].to(F64) - ref).abs().max().item()
    print(f"{dtype} softcap {cap}: observed {err:.3e}, bound {lb:.3e}, ratio {lb / max(err, 1e-300):.1f}")
    assert err <= lb < 1.0
    assert (loss[target == -100] == 0).all()


# The capped gradients: sc_dh_error / sc_dw_error of rocq/LinearCrossEntropy/Float/SoftcapGradError.v.


def _capped_case(dtype, cap, N=13, D=40, V=700):
    """Raw logits up to about 15 (cap 5 bites, cap 30 barely), two ignored tokens, chunks (5, 5, 3)."""
    x = torch.randn(N, D, generator=_gen(11))
    w = torch.randn(V, D, generator=_gen(12)) * 0.4
    target = torch.randint(0, V, (N,), generator=_gen(13))
    target[[2, 7]] = -100
    cfg = dataclasses.replace(kernels.default_config(dtype, torch.device("cpu")), token_chunk=5)
    return x.to(dtype), w.to(dtype), target, cfg


def _capped_errors(x, w, target, cfg, cap):
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    kernels.linear_cross_entropy(xr, wr, target, softcap=cap, config=cfg).backward()
    dh, dw = exact_gradients(x, w, target, softcap=cap)  # float64 autograd of the capped loss
    rounding = "nearest" if x.dtype == torch.float32 else "truncate"  # the interpreter truncates G to bf16
    bh, bw = gradient_bounds(x, w, target, config=cfg, exp_error=CPU_EXP_ERROR, storage_rounding=rounding, softcap=cap)
    return (xr.grad.to(F64) - dh).abs(), (wr.grad.to(F64) - dw).abs(), bh, bw


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("cap", CAPS)
def test_capped_gradients_within_bound(dtype, cap):
    """Every entry of dH and dW within sc_dh_error / sc_dw_error (bfloat16 on the interpreter:
    truncated G, the formula at those constants, not a proved bound); not vacuous: the largest
    bound at most 1000x the largest error and every kept entry's bound below half the trivial
    a0 sum |G0 k| |h|."""
    x, w, target, cfg = _capped_case(dtype, cap)
    eh, ew, bh, bw = _capped_errors(x, w, target, cfg, cap)
    kept = target != -100
    rh, rw = (bh.max() / eh.max()).item(), (bw.max() / ew.max()).item()
    print(
        f"{dtype} cap {cap}: dH err {eh.max().item():.3e} bound {bh.max().item():.3e} ratio {rh:.1f}; "
        f"dW err {ew.max().item():.3e} bound {bw.max().item():.3e} ratio {rw:.1f}"
    )
    assert (eh <= bh).all() and (ew <= bw).all()
    assert (eh[~kept] == 0).all()
    a0 = 1.0 / int(kept.sum())
    sums_h, sums_w = gradient_sums(x, w, target, softcap=cap)
    assert (bh[kept] < 0.5 * a0 * sums_h[4][kept]).all() and (bw < 0.5 * a0 * sums_w[4]).all()
    assert rh < 1000 and rw < 1000, (rh, rw)


@triton.jit
def _no_chain(z, softcap):
    return z * 0.0 + 1.0


@triton.jit
def _chain_of_uncapped(z, softcap):  # 1 - (r / c)^2 from the raw logit, z = c tanh(r / c) undone
    r = 0.5 * softcap * tl.log((1.0 + z / softcap) / (1.0 - z / softcap))
    zc = r / softcap
    return 1.0 - zc * zc


@pytest.mark.skipif(torch.cuda.is_available(), reason="mutants are patched into the interpreter's kernels")
@pytest.mark.parametrize("mutant", [None, "no_chain", "raw_chain"])
def test_capped_gradient_mutants_exceed_bound(mutant, monkeypatch):
    x, w, target, cfg = _capped_case(torch.float32, 5.0)
    if mutant is not None:
        monkeypatch.setattr(jit_kernels, "_cap_chain", _no_chain if mutant == "no_chain" else _chain_of_uncapped)
    eh, ew, bh, bw = _capped_errors(x, w, target, cfg, 5.0)
    excess = max((eh / bh).max().item(), (ew / bw).max().item())
    print(f"{mutant}: largest error / bound {excess:.3g}")
    assert (excess <= 1.0) == (mutant is None)


def test_capped_grad_bound_oracle_factors_match_the_hand_values(oracle_and_hand):
    """The oracle's certified coefficients of the capped bound (``sc_grad_q``: gamma and the exp
    factor inside) against the hand copy ``_capped_grad_coefs`` (exact rationals, e^x by
    1 + x + x^2): never above it (the oracle's e^x bound 1 + perturbation is <= 1 + x + x^2)
    and within 5%, for dH (V terms, bfloat16, one chunk) and dW (512 terms, float32, two
    chunks), caps 30 and 5."""
    from ojas_ref.verification.bounds.linear_cross_entropy_grad import linear_cross_entropy_grad_error_bound

    s = torch.tensor([0.5, 2.0])
    sums = (torch.tensor([0.25, 1.5]), torch.tensor([0.4, 1.0]))
    for cap in CAPS:
        for args in (
            dict(n_terms=128256, dtype=torch.bfloat16, scale=1.0 / 3, n_chunks=1),
            dict(n_terms=512, dtype=torch.float32, scale=1.0, n_chunks=2),
        ):
            args.update(logit_error=0.01, lse_error=0.01, max_abs_arg=2 * cap + 12.0, softcap=cap, capped_sums=sums)
            oracle, hand = oracle_and_hand(linear_cross_entropy_grad_error_bound, s, s, s, **args)
            assert torch.allclose(oracle, hand, rtol=5e-2) and (oracle <= hand).all(), (cap, args, oracle, hand)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("cap", CAPS)
def test_gpu_llama3_size_capped_gradients_within_bound(dtype, cap):
    """V = 128256, D = 4096, 1024 tokens (two token chunks), every seventh ignored."""
    x, w, target = _gpu_inputs(1024, dtype, ignore_every=7)
    eh, ew, bh, bw = _capped_errors(x, w, target, kernels.default_config(dtype, x.device), cap)
    rh, rw = (bh.max() / eh.max()).item(), (bw.max() / ew.max()).item()
    print(
        f"{dtype} cap {cap}: dH err {eh.max().item():.3e} bound {bh.max().item():.3e} ratio {rh:.1f}; "
        f"dW err {ew.max().item():.3e} bound {bw.max().item():.3e} ratio {rw:.1f}"
    )
    assert (eh <= bh).all() and (ew <= bw).all()
