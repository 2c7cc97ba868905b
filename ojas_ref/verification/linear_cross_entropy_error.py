"""Helpers for the proved bound on the chunked linear cross-entropy's streamed lse.

The theorem is ``Ojas.LinearCrossEntropy.Float.LseLossError.ce_lse_error`` (and ``ce_loss_error``)
of rocq/LinearCrossEntropy/Float/LseLossError.v; its value is
:func:`ojas_ref.verification.bounds.linear_cross_entropy.linear_cross_entropy_lse_error_bound`.

* :func:`kernel_stream_lse`: the kernel's own ``_rows_kernel`` with STREAM (the loop the
  theorem models) run on given logits, returning its lse and loss per row;
* :func:`emulated_stream_lse`: the theorem's ``ce_run`` in float32 torch operations, with a
  ``drop_rescale`` mutant (one tile's ``l * alpha`` replaced by ``l``), for mutation tests;
* :func:`measured_exp_error`, :func:`measured_log_error`: the premises ``ex_err`` /
  ``lg_err`` (``tl.exp`` on x <= 0, ``tl.log`` on [1, 2^24]) measured on a device;
  :func:`measured_tanh_error` the softcap's ``th_err``
  (``Ojas.LinearCrossEntropy.Float.SoftcapError``: the kernel's ``_cap_tanh``; at it,
  :func:`measured_softcap_loss_bounds` the per-token bounds of
  ``Ojas.LinearCrossEntropy.Float.SoftcapPosteriori.ce_loss_posteriori_softcap`` on the measured
  raw-logit errors of a run's logits, :func:`kernel_logits`); :func:`kernel_cap`
  the kernel's ``_cap_tanh`` / ``_cap_chain`` on given raw logits, :func:`kernel_divide` its
  division ``z / c`` (``dv_err``); sampled (the benchmark's check): ``ojas verify-device``
  (:mod:`ojas_ref.verification.device_premises`) checks these premises on every float32 input;
* :func:`exact_gradients`, :func:`gradient_sums`, :func:`gradient_bounds`: the float64
  gradients, the a-posteriori sums and the per-entry bounds of
  ``Ojas.LinearCrossEntropy.Float.GradChainError.ce_dh_error_from_lse`` / ``ce_dw_error_from_lse``
  (:func:`ojas_ref.verification.bounds.linear_cross_entropy_grad.linear_cross_entropy_grad_chain_error_bound`;
  with a softcap ``SoftcapGradChainError.sc_dh_error_from_lse`` / ``sc_dw_error_from_lse``,
  :func:`ojas_ref.verification.bounds.linear_cross_entropy_grad.linear_cross_entropy_softcap_grad_chain_error_bound`) for the
  3-product schedule on given inputs; :func:`weighted_gradient_sums`,
  :func:`four_product_gradient_bounds` those of
  ``Ojas.LinearCrossEntropy.Float.WeightedGradError.ce_dh4_error`` / ``ce_dw4_error`` for the
  4-product schedule (reduction "none" or ``products=4``, token weights from grad_output);
  :func:`gradient_posteriori_bounds` those of ``Ojas.LinearCrossEntropy.Float.GradPosteriori.ce_gp_dh_error``
  / ``ce_gp_dw_error`` (each entry of G with its own exponent error: tight for confident tokens),
  optionally on the measured errors (:func:`measured_logit_errors`) of the logits the kernel
  computed in the run (:func:`kernel_logits`; :func:`stored_logits` recomputes them, equal only
  where checked); :func:`measured_loss_bounds` the per-token bounds of
  ``Ojas.LinearCrossEntropy.Float.LossPosteriori.ce_loss_posteriori`` on such measured errors,
  :func:`measured_lse_bounds` the per-row bounds of ``LossPosteriori.ce_lse_posteriori`` (the rows
  kernel's lse of those logits); :func:`tile_sum_identification`
  the tree of the rows kernel's ``tl.sum`` (layout, depth), identified bit for bit on a device
  (:func:`checked_tile_sum_depth` its depth; :func:`matching_tree_layouts` the identification);
* :func:`unary_errors`: the constants of the ``tl.exp``, ``tl.log``, softcap tanh and division
  premises every bound here takes on a device (on CUDA those ``ojas verify-device`` measured on
  every float32 input, rounded up; else the assumed ones), :func:`lse_bound` the lse bounds with
  them.
The data's sums that the bounds take (``dot_abs_sum``, the gradient sums ``P |W|``, ``|G| |W|``, ...,
the a-posteriori ``factors @ |W|``) are certified upper bounds of the exact values
(:mod:`ojas_ref.verification.bounds.certified`: float64 sums and matmuls in any order,
``Ojas.FloatModel.CertifiedSum``; P between ``softmax_bounds`` of the float64 logits, whose
error :func:`logit_score_error` bounds), not float64 estimates.
No theorem covers these helpers themselves; they only feed the tests and the benchmark.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import Any, Callable, Iterator

import torch
import torch.nn.functional as F

from ojas_ref.verification.bounds import certified as cb
from ojas_ref.verification.bounds.common import _float_up
from ojas_ref.verification.bounds.linear_cross_entropy import (
    LINEAR_CROSS_ENTROPY_DIV_ERROR,
    LINEAR_CROSS_ENTROPY_LOG_ERROR,
    LINEAR_CROSS_ENTROPY_TANH_ERROR,
    linear_cross_entropy_logit_error_bound,
    linear_cross_entropy_loss_posteriori_bound,
    linear_cross_entropy_lse_error_bound,
    linear_cross_entropy_lse_posteriori_bound,
    linear_cross_entropy_merge_lse_error_bound,
)
from ojas_ref.verification.bounds.linear_cross_entropy_grad import (
    linear_cross_entropy_entry_posteriori_factors,
    linear_cross_entropy_grad_chain_error_bound,
    linear_cross_entropy_grad_posteriori_bound,
    linear_cross_entropy_softcap_grad_chain_error_bound,
    linear_cross_entropy_weighted_dh_error_bound,
    linear_cross_entropy_weighted_dw_error_bound,
)

F64 = torch.float64
#: tokens per float64 block of the exact logits (``[ROW_CHUNK, V]``: 1 GiB at V = 128256): the helpers
#: below go over the tokens in such blocks, so that N = 16384 fits a GPU
ROW_CHUNK = 1024


#: vocabulary rows per block of the [V, D] float64 dW sums and bounds (``[VOCAB_CHUNK, D]``: 256 MiB at
#: D = 4096): :func:`gradient_sums`, :func:`gradient_bounds` and :func:`gradient_posteriori_bounds`
#: inflate the sums and evaluate the bounds a block at a time (entry by entry: the same values as in
#: one piece); beside the float64 W and the [V, D] sums they hold one [V, D] product or ``|W|`` at a time
VOCAB_CHUNK = 8192


def _row_chunks(n: int, chunk: int | None = None) -> Iterator[slice]:
    """Slices of ``chunk`` rows (default :data:`ROW_CHUNK` tokens) over ``n``."""
    chunk = ROW_CHUNK if chunk is None else chunk
    for r0 in range(0, max(n, 1), chunk):
        yield slice(r0, min(r0 + chunk, n))


def _check_chunk_size(chunk_size: int) -> None:
    """``ValueError`` unless ``chunk_size`` is an int >= 1."""
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be an int >= 1, got {chunk_size!r}")


def _by_vocab_rows(fn: Any, sums: tuple[torch.Tensor, ...], chunk_size: int) -> torch.Tensor:
    """``fn(*sums)`` for an entry-by-entry ``fn`` of [V, D] tensors, ``chunk_size`` rows at a time
    (the same values as in one call), into one tensor."""
    out = None
    for v in _row_chunks(sums[0].shape[0], chunk_size):
        part = fn(*(t[v] for t in sums))
        if out is None:
            out = part.new_empty((sums[0].shape[0],) + part.shape[1:])
        out[v] = part
        del part
    return out


def _inflate_rows_(t: torch.Tensor, n: int, chunk_size: int) -> torch.Tensor:
    """``t`` overwritten by ``inflate_sum(t, n)``, ``chunk_size`` rows at a time (the same values)."""
    for v in _row_chunks(t.shape[0], chunk_size):
        t[v] = cb.inflate_sum(t[v], n)
    return t


def dot_abs_sum(x: torch.Tensor, w: torch.Tensor) -> float:
    """A certified upper bound of ``max_(t, v) sum_i |h_ti w_vi|`` (the logit bounds' premise
    ``dot_abs_sum``; ``matmul_upper``), a block of tokens at a time."""
    wa = w.abs().to(F64).t()  # |w| exact in any format: one float64 copy
    return max(cb.matmul_upper(x[r].to(F64).abs(), wa).max().item() for r in _row_chunks(x.shape[0]))


#: premise on torch's float64 tanh: ``|tanh~(x) - tanh x| <= rel |tanh x| + abs`` (4 ulps, as
#: :data:`~ojas_ref.verification.bounds.certified.EXP64_ERROR`; checked by tests/verification/test_certified_bounds.py)
TANH64_ERROR = (2.0**-50, 2.0**-1070)
# max |d/dx tanh(x)^2| = max 2 t (1 - t^2) = 4 / (3 sqrt 3) < 0.7699
_TANH_SQ_LIPSCHITZ = Fraction(7699, 10000)


def unary_errors(device_type: str, vocab_size: int, softcap: float | None = None) -> dict[str, float]:
    """``exp_error``, ``log_error``, ``tanh_error`` and ``div_error``: the premises' constants the
    bounds here take on ``device_type`` for a vocabulary of ``vocab_size`` (and ``softcap``):
    :func:`~ojas_ref.verification.device_premises.premise_constants` of "tl.exp", "tl.log" and the
    cap's "softcap tanh c=..." / "softcap z/c c=..." (on CUDA the measured ones of this device's
    exhaustive record, rounded up, where it passed; else the assumed
    ``LINEAR_CROSS_ENTROPY_*_ERROR``). The assumed ``tanh_error`` and ``div_error`` for a cap the
    record does not check (not in :data:`~ojas_ref.verification.device_premises.SOFTCAPS`) or
    without one; the assumed ``log_error`` when the lse theorems' log argument range
    ``[1 / (1 + b), (1 + b) e^LN]`` (``ce_lse_q_sound``, ``LN`` the certified ``ln V`` the bounds
    take, ``b <= 1`` the lse's bound) can leave the checked domain ``LOG_DOMAIN``: unless
    ``2 V (1 + 2^-30) <= 2^25`` (``b <= 1`` itself: :func:`lse_bound`, ``ce_grad_chain_q``'s check)."""
    from ojas_ref.verification import device_premises as dp

    cap = None if softcap is None or float(softcap) not in dp.SOFTCAPS else float(softcap)
    names = {"exp_error": "tl.exp", "log_error": "tl.log"}
    if cap is not None:
        names.update(tanh_error=f"softcap tanh c={cap:g}", div_error=f"softcap z/c c={cap:g}")
    c = dp.premise_constants(names.values(), device_type)
    errs = dict(tanh_error=LINEAR_CROSS_ENTROPY_TANH_ERROR, div_error=LINEAR_CROSS_ENTROPY_DIV_ERROR)
    errs.update({key: c[name] for key, name in names.items()})
    # e^LN <= V (1 + 2^-30) for LN = ln V (1 + 2^-40) + 2^-60 and V <= 2^25
    if not 2 * vocab_size * (1 + 2.0**-30) <= dp.LOG_DOMAIN[1]:
        errs["log_error"] = LINEAR_CROSS_ENTROPY_LOG_ERROR
    return errs


def lse_bound(device_type: str, vocab_size: int, hidden_dim: int, *, two_level: bool = False, **kwargs: Any) -> float:
    """:func:`~ojas_ref.verification.bounds.linear_cross_entropy.linear_cross_entropy_lse_error_bound`
    (``two_level``: ``linear_cross_entropy_merge_lse_error_bound``) with :func:`unary_errors`'
    ``exp_error``, ``log_error`` and ``tanh_error`` on ``device_type`` where ``kwargs`` does not
    give them. The measured ``log_error`` holds on ``LOG_DOMAIN = [1/2, 2^25]`` only, which holds
    the theorem's log arguments ``[1 / (1 + b), (1 + b) e^LN]`` when the bound ``b <= 1``: above 1
    the bound at the assumed ``LINEAR_CROSS_ENTROPY_LOG_ERROR``."""
    fn = linear_cross_entropy_merge_lse_error_bound if two_level else linear_cross_entropy_lse_error_bound
    errs = unary_errors(device_type, vocab_size, kwargs.get("softcap"))
    args = {k: errs[k] for k in ("exp_error", "log_error", "tanh_error")} | kwargs
    b = fn(vocab_size, hidden_dim, **args)
    if b > 1 and "log_error" not in kwargs and args["log_error"] != LINEAR_CROSS_ENTROPY_LOG_ERROR:
        b = fn(vocab_size, hidden_dim, **(args | dict(log_error=LINEAR_CROSS_ENTROPY_LOG_ERROR)))
    return b


def _wrapper_errors(
    x: torch.Tensor, vocab_size: int, exp_error: float | None, softcap: float | None = None
) -> dict[str, float]:
    """:func:`unary_errors` on ``x``'s device, ``exp_error`` in place of its own when given."""
    errs = unary_errors(x.device.type, vocab_size, softcap)
    if exp_error is not None:
        errs["exp_error"] = exp_error
    return errs


def logit_score_error(abs_sum: float, dim: int) -> float:
    """A bound on ``|y~ - h . w_v|`` for the float64 logits ``h @ W^T`` of ``dim`` products with
    ``abs_sum >= max sum_i |h_i w_vi|`` (:func:`dot_abs_sum`): ``dot_error`` (``fp64_ftree_error_bound``)."""
    return cb.dot_error(abs_sum, dim).item()


def _capped_bounds(y: torch.Tensor, es: float, softcap: float) -> tuple[torch.Tensor, float, torch.Tensor]:
    """For the float64 logits ``y`` within ``es`` of the exact ones: ``(z~, ez, k_up)``, the capped
    logits ``c tanh~(y / c)`` (as :func:`exact_capped`), a bound ``ez`` on their error against
    ``c tanh(y_exact / c)`` and ``k_up >= 1 - tanh(y_exact / c)^2`` (capped at 1). ``c tanh(. / c)``
    is 1-Lipschitz: ``ez = es + u max|y| + eta c + c (rel + abs) + u c (1 + rel + abs) + eta``
    (the division, :data:`TANH64_ERROR`, the product); ``tanh^2`` is 0.7699-Lipschitz and ``1 - t~^2``
    within ``2 (rel + abs)(1 + rel + abs) + u (1 + rel + abs)^2 + eta + u`` of ``1 - tanh(x~)^2``."""
    c = Fraction(abs(float(softcap)))
    u, eta = Fraction(cb.U64), cb.ETA64
    rel, ab = (Fraction(v) for v in TANH64_ERROR)
    ymax = Fraction(y.abs().max().item()) if y.numel() else Fraction(0)
    t = torch.tanh(y / float(softcap))
    z = float(softcap) * t
    ez = Fraction(es) + u * ymax + eta * c + c * (rel + ab) + u * c * (1 + rel + ab) + eta
    dx = (Fraction(es) + u * ymax) / c + eta
    ek = _TANH_SQ_LIPSCHITZ * dx + 2 * (rel + ab) * (1 + rel + ab) + u * (1 + rel + ab) ** 2 + eta + u
    k_up = cb.add_upper(1.0 - t * t, _float_up(ek)).clamp_max(1.0)
    return z, _float_up(ez), k_up


def _prob_bounds(
    h: torch.Tensor, ww: torch.Tensor, target: torch.Tensor, ignore_index: int, softcap: float | None = None
) -> tuple[torch.Tensor, ...]:
    """(kept [n, 1], P_up, |G|_up, k_up or None) float64 for the exact (capped) logits of the float64
    ``h``, ``ww``: ``P_up >= P`` (``softmax_bounds``), ``|G|_up >= |P - onehot|`` (``1 - P_lo`` at the
    target), both 0 at the ignored tokens; ``k_up >= 1 - tanh^2`` with ``softcap``."""
    y = h @ ww.t()
    es = logit_score_error(cb.matmul_upper(h.abs(), ww.abs().t()).max().item() if y.numel() else 0.0, h.shape[1])
    k_up = None
    if softcap is not None:
        y, es, k_up = _capped_bounds(y, es, softcap)
    kept = (target != ignore_index).to(F64)[:, None]
    p_lo, p_up = cb.softmax_bounds(y, es, dim=1)
    p_up = p_up * kept
    rows = (target != ignore_index).nonzero().squeeze(1)
    g_up = p_up.clone()
    g_up[rows, target[rows]] = cb.add_upper(torch.ones_like(rows, dtype=F64), -p_lo[rows, target[rows]])
    return kept, p_up, g_up, k_up


def kernel_stream_lse(
    z: torch.Tensor, target: torch.Tensor, softcap: float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(lse, loss) [n] float32 of ``_rows_kernel`` STREAM (no bias, eps = lam = 0; the raw
    logits capped at ``softcap`` when given) over the rows of the logits ``z`` [n, V] (float32,
    bfloat16 or float16, as the 3-product schedule stores them), targets ``target`` [n] in [0, V)."""
    from ojas_kernels import linear_cross_entropy as kernels

    if z.dim() != 2 or target.shape != (z.shape[0],):
        raise ValueError(f"z must be [n, V] and target [n], got {tuple(z.shape)} and {tuple(target.shape)}")
    z = z.contiguous()
    n, V = z.shape
    cfg = kernels.default_config(z.dtype, z.device)
    f32 = dict(dtype=torch.float32, device=z.device)
    loss, lse = torch.empty(n, **f32), torch.empty(n, **f32)
    none = torch.empty(1, **f32)
    opts = kernels._Options(0.0, 0.0, None if softcap is None else float(softcap))
    kernels._launch_rows(
        n,
        cfg.rows,
        none,
        none,
        none,
        none,
        z,
        z,
        target,
        loss,
        lse,
        none,
        none,
        0,
        n,
        1,
        V,
        0,
        0,
        V,
        0,
        1.0,
        **opts.kernel_args(V),
        HAS_LSE=False,
        GRAD=False,
        STREAM=True,
        NEED_SUM=False,
        HAS_BIAS=False,
        HAS_CAP=softcap is not None,
        BLOCK_P=16,
    )
    return lse, loss


def stream_block_v(dtype: torch.dtype, device: torch.device | str) -> int:
    """The vocabulary tile width of ``_rows_kernel`` on ``device`` (the theorem's ``Bt``)."""
    from ojas_kernels import linear_cross_entropy as kernels

    return kernels.default_config(dtype, torch.device(device)).rows.block_v


def emulated_stream_lse(z: torch.Tensor, block_v: int, drop_rescale: int | None = None) -> torch.Tensor:
    """The theorem's ``ce_run`` from ``(z_first, 0)`` over tiles of ``block_v`` logits, then
    ``rnd(m + ln l)``, every operation in float32 (``torch.sum`` as the tile sum); rows of
    ``z`` [n, V]. ``drop_rescale = k``: the mutant whose tile ``k`` adds its sum to ``l``
    without the rescale ``l * exp(m - m')``."""
    z = z.to(torch.float32)
    m = z[:, 0].clone()
    l = torch.zeros_like(m)
    for k, c0 in enumerate(range(0, z.shape[1], block_v)):
        tile = z[:, c0 : c0 + block_v]
        m_new = torch.maximum(m, tile.max(dim=1).values)
        alpha = torch.exp(m - m_new)
        scaled = l if k == drop_rescale else l * alpha
        l = scaled + torch.exp(tile - m_new[:, None]).sum(dim=1)
        m = m_new
    return m + torch.log(l)


def exact_lse(z: torch.Tensor, softcap: float | None = None) -> torch.Tensor:
    """float64 logsumexp of the rows of ``z`` (upcast), capped ``c tanh(z / c)`` first when
    ``softcap = c`` is given."""
    return torch.logsumexp(exact_capped(z, softcap), dim=1)


def exact_capped(z: torch.Tensor, softcap: float | None = None) -> torch.Tensor:
    """``c tanh(z / c)`` in float64 (``z`` upcast; ``z`` itself without a cap)."""
    z = z.to(F64)
    return z if softcap is None else softcap * torch.tanh(z / softcap)


@functools.lru_cache(maxsize=None)
def _unary_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def kernel(X, Y, n, LOG: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        ok = offs < n
        x = tl.load(X + offs, mask=ok, other=1.0)
        if LOG:
            y = tl.log(x)
        else:
            y = tl.exp(x)
        tl.store(Y + offs, y, mask=ok)

    return kernel


_cap_tanh = _softcap = _cap_chain = (
    None  # the kernel's jit functions, set by _cap_kernel (Triton finds callees in globals)
)


@functools.lru_cache(maxsize=None)
def _cap_kernel():
    global _cap_tanh, _softcap, _cap_chain
    import triton
    import triton.language as tl
    from ojas_kernels import linear_cross_entropy as kernels

    _cap_tanh, _softcap, _cap_chain = kernels._cap_tanh, kernels._softcap, kernels._cap_chain

    @triton.jit
    def kernel(R, Y, n, softcap, OP: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        ok = offs < n
        r = tl.load(R + offs, mask=ok, other=0.0)
        if OP == "chain":
            y = _cap_chain(_softcap(r, softcap), softcap)
        elif OP == "div":
            y = r / softcap
        else:
            y = _cap_tanh(r, softcap)
        tl.store(Y + offs, y, mask=ok)

    return kernel


def _run_cap(r: torch.Tensor, softcap: float, op: str) -> torch.Tensor:
    y = torch.empty_like(r)
    block = 1024
    _cap_kernel()[((r.numel() + block - 1) // block,)](r, y, r.numel(), float(softcap), OP=op, BLOCK=block)
    return y


def kernel_cap(r: torch.Tensor, softcap: float, chain: bool = False) -> torch.Tensor:
    """On the float32 raw logits ``r``: the kernel's ``_cap_tanh`` (its computed tanh(r / c)), or
    with ``chain`` its ``_cap_chain`` of its capped logit ``_softcap(r)`` (the gradient's factor)."""
    return _run_cap(r, softcap, "chain" if chain else "tanh")


def kernel_divide(z: torch.Tensor, softcap: float) -> torch.Tensor:
    """``z / softcap`` of float32 ``z`` by a float32 scalar argument, as ``_cap_chain`` divides (the
    premise ``dv_err`` of ``Ojas.LinearCrossEntropy.Float.SoftcapError``)."""
    return _run_cap(z, softcap, "div")


def cap_sweep(softcap: float, points: int, device: str) -> torch.Tensor:
    """float32 raw logits ``r``: ``r / c`` evenly spread over [-48, 48] (past which tanh is +-1
    within 2^-130) and geometrically over +-[2^-40, 1] (the cancellation in 1 - 2 / (e^(2r/c) + 1))."""
    t = torch.linspace(-48.0, 48.0, points, dtype=F64)
    small = torch.exp2(torch.linspace(-40.0, 0.0, points // 4, dtype=F64))
    return (torch.cat([t, small, -small]) * softcap).to(device=device, dtype=torch.float32)


@functools.lru_cache(maxsize=None)
def measured_tanh_error(device: str, softcap: float, points: int = 1 << 20) -> float:
    """max ``|_cap_tanh(r) - tanh(r / c)|`` over :func:`cap_sweep` (the premise ``th_err`` with
    ``ut = 0``)."""
    r = cap_sweep(softcap, points, device)
    return (kernel_cap(r, softcap).to(F64) - torch.tanh(r.to(F64) / softcap)).abs().max().item()


def _run(x: torch.Tensor, log: bool) -> torch.Tensor:
    y = torch.empty_like(x)
    block = 1024
    _unary_kernel()[((x.numel() + block - 1) // block,)](x, y, x.numel(), LOG=log, BLOCK=block)
    return y


@functools.lru_cache(maxsize=None)
def measured_exp_error(device: str, points: int = 1 << 20) -> tuple[float, float]:
    """``tl.exp`` on float32 x evenly spread over [-104, 0]: max relative error where e^x is
    a normal float32, max absolute error below (the premise ``ex_err``)."""
    x = torch.linspace(-104.0, 0.0, points, device=device, dtype=torch.float32)
    y = _run(x, log=False)
    exact = torch.exp(x.to(F64))
    normal = exact >= 2.0**-126
    err = (y.to(F64) - exact).abs()
    return (err / exact)[normal].max().item(), err[~normal].max().item()


@functools.lru_cache(maxsize=None)
def measured_log_error(device: str, points: int = 1 << 20) -> float:
    """max ``|tl.log(x) - ln x|`` over float32 x spread geometrically over [1, 2^24] (the row
    sums ``l`` lie in [1, V]; the premise ``lg_err``)."""
    x = torch.exp2(torch.linspace(0.0, 24.0, points, device=device, dtype=F64)).to(torch.float32)
    y = _run(x, log=True)
    return (y.to(F64) - torch.log(x.to(F64))).abs().max().item()


def exact_gradients(
    x: torch.Tensor,
    w: torch.Tensor,
    target: torch.Tensor,
    reduction: str = "mean",
    ignore_index: int = -100,
    grad_output: torch.Tensor | None = None,
    softcap: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(dH, dW) float64: autograd of ``F.cross_entropy(x @ w^T)`` (with ``softcap``: of the
    capped logits ``c tanh(x @ w^T / c)``) on the upcast inputs, with ``grad_output`` (upcast;
    default 1) as the loss's upstream gradient."""
    if reduction == "none" or grad_output is not None:
        h, ww = x.to(F64).requires_grad_(), w.to(F64).requires_grad_()
        loss = F.cross_entropy(
            exact_capped(h @ ww.t(), softcap), target, reduction=reduction, ignore_index=ignore_index
        )
        go = torch.ones_like(loss) if grad_output is None else grad_output.to(F64).reshape(loss.shape)
        dh, dw = torch.autograd.grad(loss, (h, ww), go)
        return dh, dw
    # "mean" / "sum" with grad_output 1: the sum over blocks of tokens, "mean" divided by the kept count
    kept = int((target != ignore_index).sum())
    scale = 1.0 / kept if reduction == "mean" else 1.0
    if kept == 0 and reduction == "mean":
        scale = math.nan  # F.cross_entropy's mean over no token
    ww = w.to(F64).requires_grad_()
    dh, dw = torch.empty(x.shape, dtype=F64, device=x.device), torch.zeros(w.shape, dtype=F64, device=w.device)
    for r in _row_chunks(x.shape[0]):
        h = x[r].to(F64).requires_grad_()
        loss = F.cross_entropy(exact_capped(h @ ww.t(), softcap), target[r], reduction="sum", ignore_index=ignore_index)
        gh, gw = torch.autograd.grad(loss * scale, (h, ww))
        dh[r] = gh
        dw += gw
    return dh, dw


def weighted_gradient_sums(
    x: torch.Tensor, w: torch.Tensor, target: torch.Tensor, token_weight: torch.Tensor, ignore_index: int = -100
) -> tuple[torch.Tensor, ...]:
    """Certified upper bounds of the sums (S, T, Hw, Ha) [V, D] of ``ce_dw4_error`` over the kept
    tokens, weights ``|w0| <= |token_weight|`` [N] (upcast): ``(|w0| P)^T |H|``, ``|w0 G|^T |H|``,
    ``colsum |w0| |H|``, ``colsum |H_kept|`` (:func:`_prob_bounds`, ``matmul_upper``, ``sum_upper``)."""
    h = x.to(F64)
    kept, p_up, g_up, _ = _prob_bounds(h, w.to(F64), target, ignore_index)
    ha = h.abs() * kept
    wa = token_weight.to(F64).abs().reshape(-1, 1).expand(h.shape[0], 1)
    V = w.shape[0]
    return (
        cb.matmul_upper(cb.mul_upper(wa, p_up).t(), ha),
        cb.matmul_upper(cb.mul_upper(wa, g_up).t(), ha),
        cb.sum_upper(cb.mul_upper(wa, ha), 0)[None, :].expand(V, -1),
        cb.sum_upper(ha, 0)[None, :].expand(V, -1),
    )


def gradient_sums(
    x: torch.Tensor,
    w: torch.Tensor,
    target: torch.Tensor,
    ignore_index: int = -100,
    softcap: float | None = None,
    *,
    chunk_size: int = VOCAB_CHUNK,
) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
    """Certified upper bounds of the sums (S, T, Ha) of ``ce_dh_error`` [N, D] and ``ce_dw_error``
    [V, D], P the exact probabilities of the kept tokens, G = P - onehot: dH ``P |W|``, ``|G| |W|``,
    ``kept x colsum |W|``; dW ``P^T |H|``, ``|G|^T |H|``, ``colsum |H_kept|``.  With ``softcap``
    (``sc_dh_error`` / ``sc_dw_error``): P of the capped logits, then also (Sk, Tc) with the
    exact chain factor k = 1 - tanh(h . w_v / c)^2: ``(P k) |W|``, ``|G k| |W|`` and the
    transposes for dW. P and |G| at most :func:`_prob_bounds`' (``softmax_bounds`` of the float64
    logits within :func:`logit_score_error`), each product ``matmul_upper`` / ``sum_upper``, the
    dW sums over the token blocks ``inflate_sum``, ``chunk_size`` vocabulary rows at a time
    (:data:`VOCAB_CHUNK`; the same values whatever it is)."""
    _check_chunk_size(chunk_size)
    return _gradient_sums(x, w.to(F64), target, ignore_index, softcap, chunk_size)


def _gradient_sums(
    x: torch.Tensor,
    ww: torch.Tensor,
    target: torch.Tensor,
    ignore_index: int,
    softcap: float | None,
    chunk_size: int,
    prob: bool = True,
) -> tuple[tuple[torch.Tensor | None, ...], tuple[torch.Tensor | None, ...]]:
    """:func:`gradient_sums` on the float64 weights ``ww``; without ``prob`` the sums of P (S, and Sk
    with ``softcap``) are None (not computed). ``|ww|`` is made where it is needed and dropped after
    (one [V, D] tensor fewer held beside the sums)."""
    (N, D), V = x.shape, ww.shape[0]
    f64 = dict(dtype=F64, device=x.device)
    n_mats = 2 if softcap is None else 4  # P, |G| (with softcap also P k, |G k|)
    keep = [i for i in range(n_mats) if prob or i % 2]
    dh = {i: torch.empty(N, D, **f64) for i in keep}
    dw = {i: torch.zeros(V, D, **f64) for i in keep}
    dh_ha, dw_ha = torch.empty(N, D, **f64), torch.zeros(1, D, **f64)
    col_w = cb.sum_upper(ww.abs(), 0)[None, :]
    blocks = 0
    for r in _row_chunks(N):  # a block of tokens at a time: dH's rows, dW's sums
        h = x[r].to(F64)
        kept, p, g, k = _prob_bounds(h, ww, target[r], ignore_index, softcap)
        mats = [p, g] if softcap is None else [p, g, cb.mul_upper(p, k), cb.mul_upper(g, k)]
        ha = h.abs() * kept
        for i in keep:
            dw[i] += cb.matmul_upper(mats[i].t(), ha)
        wa = ww.abs()
        for i in keep:
            dh[i][r] = cb.matmul_upper(mats[i], wa)
        del wa
        dh_ha[r] = kept * col_w  # the third sums: kept x colsum |W| (dH), colsum |H_kept| (dW)
        dw_ha += cb.sum_upper(ha, 0)[None, :]
        blocks += 1
        del h, kept, p, g, k, mats, ha
    for t in dw.values():
        _inflate_rows_(t, blocks, chunk_size)
    sums_h, sums_w = [dh.get(i) for i in range(n_mats)], [dw.get(i) for i in range(n_mats)]
    sums_h.insert(2, dh_ha)
    sums_w.insert(2, cb.inflate_sum(dw_ha, blocks).expand(V, -1))
    return tuple(sums_h), tuple(sums_w)


def gradient_bounds(
    x: torch.Tensor,
    w: torch.Tensor,
    target: torch.Tensor,
    *,
    reduction: str = "mean",
    ignore_index: int = -100,
    config=None,
    exp_error: float | None = None,
    storage_rounding: str = "nearest",
    grad_output: torch.Tensor | None = None,
    softcap: float | None = None,
    chunk_size: int = VOCAB_CHUNK,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-entry bounds (dH [N, D], dW [V, D]) for ``_three_products`` (no bias, reduction
    "mean" / "sum") on these inputs, ``dot_abs_sum`` = max sum_i |h_i w_vi| of the data, the
    token chunks of the kernel's plan, one extracted function per bound, the streamed lse's error
    composed in Coq: without ``softcap``,
    :func:`~ojas_ref.verification.bounds.linear_cross_entropy_grad.linear_cross_entropy_grad_chain_error_bound`
    (``ce_grad_chain_q``: ``ce_dh_error_from_lse`` / ``ce_dw_error_from_lse``); with ``softcap``
    (3 products only; the 4-product schedule with a cap: no theorem),
    :func:`~ojas_ref.verification.bounds.linear_cross_entropy_grad.linear_cross_entropy_softcap_grad_chain_error_bound`
    (``sc_grad_chain_q``: the capped lse into ``sc_dh_error`` / ``sc_dw_error``,
    ``sc_dh_error_from_lse`` / ``sc_dw_error_from_lse``). Reduction "none"
    or ``config.products == 4``: the 4-product schedule's (:func:`four_product_gradient_bounds`,
    ``grad_output`` the loss's upstream gradient, default 1; the 3-product bounds are for 1).
    ``chunk_size``: vocabulary rows per block of the dW sums and bound (:func:`gradient_sums`; the
    same values whatever it is)."""
    from ojas_kernels import linear_cross_entropy as kernels

    _check_chunk_size(chunk_size)
    if reduction == "none" or (config is not None and config.products == 4):
        if softcap is not None:
            raise ValueError("no theorem bounds the 4-product schedule's capped gradients")
        return four_product_gradient_bounds(
            x,
            w,
            target,
            config,
            reduction=reduction,
            ignore_index=ignore_index,
            exp_error=exp_error,
            storage_rounding=storage_rounding,
            grad_output=grad_output,
        )
    (N, D), V = x.shape, w.shape[0]
    errs = _wrapper_errors(x, V, exp_error, softcap)
    config = config or kernels.default_config(x.dtype, x.device)
    K = int((target != ignore_index).sum())
    kw = dict(dtype=x.dtype, dot_abs_sum=dot_abs_sum(x, w))
    plan = kernels._three_products_plan(N, D, V, x.element_size(), (True, True, False), config, K)
    scale = 1.0 / K if reduction == "mean" else 1.0
    # one extracted function per bound, the lse composed in Coq: ce_grad_chain_q, capped sc_grad_chain_q
    sums_h, sums_w = gradient_sums(x, w, target, ignore_index, softcap, chunk_size=chunk_size)
    chain = dict(
        scale=scale,
        vocab_size=V,
        hidden_dim=D,
        block_v=config.rows.block_v,
        exp_error=errs["exp_error"],
        log_error=errs["log_error"],
        storage_rounding=storage_rounding,
        **kw,
    )
    bound = linear_cross_entropy_grad_chain_error_bound
    if softcap is not None:
        bound = linear_cross_entropy_softcap_grad_chain_error_bound
        chain.update(softcap=softcap, tanh_error=errs["tanh_error"], div_error=errs["div_error"])
    bh = bound(*sums_h, n_terms=V, **chain)
    dw_args = dict(n_terms=max(n for _, n, _ in plan), n_chunks=len(plan), **chain)
    bw = _by_vocab_rows(lambda *sums: bound(*sums, **dw_args), sums_w, chunk_size)
    return bh, bw


@functools.lru_cache(maxsize=None)
def _sum_probe():
    import triton
    import triton.language as tl

    @triton.jit
    def probe(X, Y, V: tl.constexpr):
        r = tl.program_id(0) + tl.arange(0, 1)
        x = tl.load(X + r[:, None] * V + tl.arange(0, V)[None, :]).to(tl.float32)
        tl.store(Y + r, tl.sum(x, axis=1))

    return probe


def _blocked_layout(ttgir: str) -> tuple[int, int, int] | None:
    """(sizePerThread, threadsPerWarp, warpsPerCTA) along axis 1 of the first 2-D blocked layout
    of a TTGIR module, or None."""
    import re

    m = re.search(r"sizePerThread = \[1, (\d+)\], threadsPerWarp = \[1, (\d+)\], warpsPerCTA = \[1, (\d+)\]", ttgir)
    return None if m is None else tuple(int(g) for g in m.groups())


def _tree_sum(x: torch.Tensor, spt: int, lanes: int, warps: int) -> torch.Tensor:
    """float32 rows of ``x`` [n, V] summed in the order identified for ``tl.sum`` on a blocked
    layout: each thread adds its elements in register order (``spt`` contiguous ones, then the
    next repetition of ``spt * lanes * warps`` columns), then butterflies (xor) over the lanes and
    over the warps."""
    n, V = x.shape
    e = x.reshape(n, V // (spt * lanes * warps), warps, lanes, spt).permute(0, 2, 3, 1, 4).reshape(n, warps, lanes, -1)
    acc = e[..., 0].clone()
    for i in range(1, e.shape[-1]):
        acc = acc + e[..., i]
    for width, dim in ((lanes, 2), (warps, 1)):
        off = width // 2
        while off:
            idx = torch.arange(width, device=x.device) ^ off
            acc = acc + acc.index_select(dim, idx)
            off //= 2
    return acc[:, 0, 0]


def tree_layouts(block_v: int, lanes: int = 32) -> list[tuple[int, int, int]]:
    """The blocked layouts (sizePerThread, lanes, warps) that can hold a [1, block_v] tile: the
    candidates :func:`matching_tree_layouts` tries."""
    out = []
    for w in (1, 2, 4, 8, 16, 32):
        spt = 1
        while spt * lanes * w <= block_v:
            if block_v % (spt * lanes * w) == 0:
                out.append((spt, lanes, w))
            spt *= 2
    return out


def matching_tree_layouts(
    rows: list[torch.Tensor], sums: list[torch.Tensor], layouts: list[tuple[int, int, int]]
) -> list[tuple[int, int, int]]:
    """The layouts whose :func:`_tree_sum` gives ``sums`` (float32 [n] each) bit for bit on
    every case of ``rows`` (float32 [n, V] each)."""
    return [lay for lay in layouts if all(torch.equal(_tree_sum(x, *lay), y) for x, y in zip(rows, sums))]


def tree_depth(block_v: int, layout: tuple[int, int, int]) -> int:
    """The depth of :func:`_tree_sum` on ``layout`` for a tile of ``block_v``:
    ``(elements per thread - 1) + log2(lanes) + log2(warps)``."""
    _, lanes, w = layout
    return block_v // (lanes * w) - 1 + (lanes.bit_length() - 1) + (w.bit_length() - 1)


@functools.lru_cache(maxsize=None)
def tile_sum_identification(dtype: torch.dtype, device: str = "cuda") -> dict:
    """The tree of ``_rows_kernel``'s vocabulary-tile sum on ``device``: ``tl.sum`` over a
    [1, block_v] float32 tile (the logits loaded in ``dtype``) with the rows config's warps,
    compiled to the same blocked layout as the compiled ``_rows_kernel``, and equal bit for bit,
    on random rows (positive, signed, and a few ones among tiny numbers), to :func:`_tree_sum`
    on that layout (:func:`matching_tree_layouts`). Returns ``layout``, ``depth``
    (:func:`tree_depth`: the premise ``sum_ok ts Dt Bt`` of
    ``Ojas.LinearCrossEntropy.Float.LseLossError.ce_lse_error_up`` with this ``Dt``, ``ce_dsum_tree``:
    any tree of that depth), ``block_v``, ``rows`` (how many rows matched) and ``others`` (other
    candidate layouts that match the same rows): an identification of Triton's lowering for this
    layout on these inputs, not a theorem about it. Raises ``ValueError`` when the layouts differ,
    no layout is found or a row differs."""
    from ojas_kernels import linear_cross_entropy as kernels
    from ojas_kernels.launch import fast

    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError("the tile sum's order is identified on a CUDA device (the interpreter sums with numpy)")
    rows = kernels.default_config(dtype, device).rows
    V, warps = rows.block_v, rows.num_warps
    gen = torch.Generator(device=device).manual_seed(0)
    n = 4096
    probe = _sum_probe()
    cases = (
        torch.exp(3 * torch.randn(n, V, device=device, generator=gen)),
        torch.randn(n, V, device=device, generator=gen),
        torch.where(torch.rand(n, V, device=device, generator=gen) < 1e-3, 1.0, 1e-9),
    )

    def compiled() -> dict[int, Any]:
        return {id(k): k for c in probe.device_caches.values() for k in c[0].values()}

    layout, before, xs, ys = None, compiled(), [], []
    for x in cases:
        x = x.to(dtype)
        y = torch.empty(n, device=device)
        probe[(n,)](x, y, V=V, num_warps=warps)
        if layout is None:  # the variant this dtype compiled (the function is cached per dtype)
            found = {_blocked_layout(k.asm["ttgir"]) for i, k in compiled().items() if i not in before} - {None}
            if len(found) != 1:
                raise ValueError(f"expected one blocked layout in the probe, found {found}")
            layout = found.pop()
        xs.append(x.float())
        ys.append(y)
    if layout not in matching_tree_layouts(xs, ys, [layout]):
        raise ValueError(f"tl.sum on layout {layout} is not the identified tree on these rows")
    z = torch.zeros(2, V, device=device, dtype=dtype)
    kernel_stream_lse(z, torch.zeros(2, dtype=torch.long, device=device))
    rows_layouts = {_blocked_layout(k.asm["ttgir"]) for k, _ in fast(kernels._rows_kernel)._cache.values()}
    if layout not in rows_layouts:
        raise ValueError(f"the probe's layout {layout} is not among _rows_kernel's {rows_layouts}")
    others = [lay for lay in matching_tree_layouts(xs, ys, tree_layouts(V)) if lay != layout]
    return dict(layout=layout, depth=tree_depth(V, layout), block_v=V, rows=len(cases) * n, others=others)


def checked_tile_sum_depth(dtype: torch.dtype, device: str = "cuda") -> int:
    """The depth of :func:`tile_sum_identification` (the premise ``Dt``); ``ValueError`` as it."""
    return tile_sum_identification(dtype, device)["depth"]


def measured_premise_depth(x: torch.Tensor) -> int | None:
    """:func:`checked_tile_sum_depth` for ``x``'s dtype on its CUDA device; None (any order) on
    the CPU."""
    return checked_tile_sum_depth(x.dtype, str(x.device)) if x.is_cuda else None


def stored_logits(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The logits [N, V] of ``_mm_into(z, x, w^T)`` (the product the 3-product schedule stores for
    ``_rows_kernel``, rounded to the input dtype), recomputed: one call over all N rows, computed
    twice, ``ValueError`` unless bitwise equal.

    What this does not cover: the kernel makes one such call per token chunk, over that chunk's
    rows (the kept tokens gathered into a workspace when some are ignored), of
    ``_three_products_plan``'s sizes, writing into its workspace or into grad_input's memory.
    cuBLAS picks its algorithm (tiles, split-K: the order of each dot's sum) by the shapes, so
    a product over other rows need not round as the kernel's does; equality with the kernel's
    own logits holds only where it is checked (:func:`kernel_logits` records those; the
    benchmark's ``*_logits_match``). A measured-logit bound must take the logits of the run
    whose outputs it bounds: :func:`kernel_logits`'."""
    from ojas_kernels import linear_cross_entropy as kernels

    zs = []
    for _ in range(2):
        z = torch.empty(x.shape[0], w.shape[0], dtype=x.dtype, device=x.device)
        kernels._mm_into(z, x, w.t())
        zs.append(z)
    if not torch.equal(*zs):
        raise ValueError("the logit product is not deterministic: the measured logits need not be the kernel's")
    return zs[0]


def kernel_logits(
    run: Callable[[], Any], x: torch.Tensor, w: torch.Tensor, target: torch.Tensor, *, ignore_index: int = -100
) -> tuple[Any, torch.Tensor]:
    """``(run(), z)``: ``run`` (a call that runs the 3-product schedule, ``_three_products``, once
    on ``x``, ``w`` and ``target``: the forward or forward + backward of ``linear_cross_entropy``)
    and ``z`` [N, V] in ``x``'s dtype, the logits that the schedule's own ``_mm_into`` calls wrote
    in that run: each token chunk's product, copied as the call returns, before ``_rows_kernel``
    streams it and overwrites it with G. These are the logits the kernel's lse, loss and G come
    from (the same cuBLAS call, shapes and memory), so the measured-logit premise of
    ``ce_loss_posteriori`` / ``ce_arg_posteriori`` (each logit's error ``|z - y|``) is checked on
    the very logits of the outputs it bounds. Each call is checked: its left operand the next
    kept tokens' rows of ``x`` (the chunks in order), its right ``w^T``; ``ValueError`` unless the
    calls cover the K kept tokens once each (e.g. the 4-product schedule ran instead). The
    ignored tokens' rows (which no bound charges: their G rows and loss are 0) are filled by
    :func:`stored_logits`' product over those rows, so that ``max |z|`` stays finite and
    realistic. No theorem covers this recording itself (Python around the kernel's calls)."""
    from ojas_kernels import linear_cross_entropy_three_products as three

    N, V = x.shape[0], w.shape[0]
    keep = target != ignore_index
    kept = keep.nonzero().squeeze(1)
    z = torch.empty(N, V, dtype=x.dtype, device=x.device)
    if bool((~keep).any()):
        ign = (~keep).nonzero().squeeze(1)
        rows = torch.empty(len(ign), V, dtype=x.dtype, device=x.device)
        three._mm_into(rows, x[ign], w.t())
        z.index_copy_(0, ign, rows)
        del rows
    done = [0]
    real = three._mm_into

    def record(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
        real(out, a, b)
        n, r0 = out.shape[0], done[0]
        idx = kept[r0 : r0 + n]
        if out.shape[1] != V or len(idx) != n or not torch.equal(a, x[idx]) or not torch.equal(b, w.t()):
            raise ValueError("a logit product of the run is not the next kept tokens' rows of x times w^T")
        z.index_copy_(0, idx, out)
        done[0] += n

    three._mm_into = record
    try:
        result = run()
    finally:
        three._mm_into = real
    if done[0] != len(kept):
        raise ValueError(f"the run's logit products covered {done[0]} tokens, not the {len(kept)} kept ones")
    return result, z


def measured_logit_errors(h: torch.Tensor, ww: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """Certified bounds [n, V] of ``|z - h . w_v|`` for computed logits ``z`` [n, V] and the
    float64 logits ``y = h @ ww^T`` (``h`` [n, D], ``ww`` [V, D] float64): the float64
    ``|z - y|`` rounded up, plus :func:`logit_score_error` (the float64 product's own error)."""
    es = logit_score_error(cb.matmul_upper(h.abs(), ww.abs().t()).max().item() if y.numel() else 0.0, h.shape[1])
    return cb.add_upper(cb.add_upper(z.to(F64), -y).abs(), es)


def _check_logits(x: torch.Tensor, w: torch.Tensor, logits: torch.Tensor) -> None:
    """``ValueError`` unless ``logits`` is [N, V] for ``x`` [N, D] and ``w`` [V, D]."""
    if logits.shape != (x.shape[0], w.shape[0]):
        raise ValueError(f"logits must be [N, V] = {(x.shape[0], w.shape[0])}, got {tuple(logits.shape)}")


def _max_abs(logits: torch.Tensor) -> float:
    """``max |z|`` of ``logits`` without a copy of them."""
    lo, hi = torch.aminmax(logits)
    return max(-lo.item(), hi.item())


def _stream_bound(
    x: torch.Tensor, vocab_size: int, max_abs_logit: float, exp_error: float, tile_sum_depth: int | None
) -> float:
    """``B``, the rows kernel's own STREAM bound (:func:`lse_bound` with ``exact_logits``) at logits within
    ``max_abs_logit``, for ``x``'s dtype and device."""
    return lse_bound(
        x.device.type,
        vocab_size,
        1,
        dtype=x.dtype,
        block_v=stream_block_v(x.dtype, x.device),
        exact_logits=True,
        max_abs_logit=max_abs_logit,
        exp_error=exp_error,
        tile_sum_depth=tile_sum_depth,
    )


def _over_row_chunks(
    x: torch.Tensor,
    w: torch.Tensor,
    logits: torch.Tensor,
    bound_of: Callable[[slice, torch.Tensor, torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """``bound_of(r, y, errors)`` over the token chunks ``r`` (:func:`_row_chunks`), concatenated: ``y`` the
    chunk's float64 logits ``h . w_v``, ``errors`` its logits' measured errors (:func:`measured_logit_errors`)."""
    ww, out = w.to(F64), []
    for r in _row_chunks(x.shape[0]):
        h = x[r].to(F64)
        y = h @ ww.t()
        out.append(bound_of(r, y, measured_logit_errors(h, ww, y, logits[r])))
        del h, y
    return torch.cat(out)


def measured_softcap_loss_bounds(
    x: torch.Tensor,
    w: torch.Tensor,
    target: torch.Tensor,
    logits: torch.Tensor,
    softcap: float,
    *,
    ignore_index: int = -100,
    exp_error: float | None = None,
    tanh_error: float | None = None,
    tile_sum_depth: int | None = None,
) -> torch.Tensor:
    """Per-token bounds [N] (0 at ignored tokens) of
    :func:`~ojas_ref.verification.bounds.linear_cross_entropy.linear_cross_entropy_softcap_loss_posteriori_bound`
    (``Ojas.LinearCrossEntropy.Float.SoftcapPosteriori.ce_loss_posteriori_softcap``; no bias, label
    smoothing or z-loss) on ``|loss - (ln sum_v e^(c tanh(y_v / c)) - c tanh(y_t / c))|`` for the
    3-product STREAM forward with ``softcap = c`` on these inputs, with each RAW logit's error measured
    on ``logits`` [N, V] (the raw logits of the run whose loss is bounded, :func:`kernel_logits`: the
    schedule's products, which the rows kernel caps as it streams them; :func:`measured_logit_errors`:
    certified against the exact ``h . w_v``; the theorem takes any raw-logit errors, no premise on
    cuBLAS's order), each capped logit's error bound ``sc_delta`` of it (``sc_logit_error``) at the
    tanh premise ``tanh_error`` (default :func:`unary_errors`' for this device and cap: on CUDA the
    measured one where ``ojas verify-device`` checked the cap, else the assumed
    ``LINEAR_CROSS_ENTROPY_TANH_ERROR``; relative part 0), the weights the float64 softmax of the
    capped float64 logits (:func:`exact_capped`), and ``B`` the stream's own bound (:func:`lse_bound`
    with ``exact_logits``) at ``sc_zmax``; ``tile_sum_depth``: the stream's tile-sum depth premise
    (default any order; :func:`checked_tile_sum_depth` on a device). Not proved: the float64
    softmax and the sum ``E`` (as the bound functions say)."""
    from ojas_ref.verification.bounds.linear_cross_entropy import (
        linear_cross_entropy_softcap_logit_error_bound,
        linear_cross_entropy_softcap_loss_posteriori_bound,
    )

    _check_logits(x, w, logits)
    errs = _wrapper_errors(x, w.shape[0], exp_error, softcap)
    th = errs["tanh_error"] if tanh_error is None else tanh_error
    _, zmax = linear_cross_entropy_softcap_logit_error_bound(0.0, softcap, tanh_error=th)
    B = _stream_bound(x, w.shape[0], zmax, errs["exp_error"], tile_sum_depth)  # at sc_zmax, the theorem's Zmax
    return _over_row_chunks(
        x,
        w,
        logits,
        lambda r, y, errors: linear_cross_entropy_softcap_loss_posteriori_bound(
            torch.softmax(exact_capped(y, softcap), dim=1),
            target[r],
            errors,
            B,
            softcap,
            tanh_error=th,
            ignore_index=ignore_index,
        ),
    )


def measured_loss_bounds(
    x: torch.Tensor,
    w: torch.Tensor,
    target: torch.Tensor,
    logits: torch.Tensor,
    *,
    ignore_index: int = -100,
    exp_error: float | None = None,
    tile_sum_depth: int | None = None,
) -> torch.Tensor:
    """Per-token bounds [N] (0 at ignored tokens) of
    :func:`~ojas_ref.verification.bounds.linear_cross_entropy.linear_cross_entropy_loss_posteriori_bound`
    (``Ojas.LinearCrossEntropy.Float.LossPosteriori.ce_loss_posteriori``; no softcap, bias, label
    smoothing or z-loss) for the 3-product STREAM forward on these inputs, with each logit's error
    measured on ``logits`` [N, V] (the logits of the run whose loss is bounded,
    :func:`kernel_logits`; :func:`measured_logit_errors`: certified against the exact logits; the
    theorem takes any logit errors, no premise on cuBLAS's order) and ``B`` the stream's own bound
    (:func:`lse_bound` with ``exact_logits``) at their ``max |z|``; ``tile_sum_depth``: the
    stream's tile-sum depth premise (default any order; :func:`checked_tile_sum_depth` on a
    device). Not proved: the float64 softmax and the sum ``E`` (as the bound function says)."""
    _check_logits(x, w, logits)
    B = _stream_bound(
        x, w.shape[0], _max_abs(logits), _wrapper_errors(x, w.shape[0], exp_error)["exp_error"], tile_sum_depth
    )
    return _over_row_chunks(
        x,
        w,
        logits,
        lambda r, y, errors: linear_cross_entropy_loss_posteriori_bound(
            torch.softmax(y, dim=1), target[r], errors, B, ignore_index=ignore_index
        ),
    )


def measured_lse_bounds(
    x: torch.Tensor,
    w: torch.Tensor,
    logits: torch.Tensor,
    *,
    exp_error: float | None = None,
    tile_sum_depth: int | None = None,
) -> torch.Tensor:
    """Per-row bounds [N] of
    :func:`~ojas_ref.verification.bounds.linear_cross_entropy.linear_cross_entropy_lse_posteriori_bound`
    (``Ojas.LinearCrossEntropy.Float.LossPosteriori.ce_lse_posteriori``; no softcap or bias) on
    ``|lse - ln sum_v e^(h . w_v)|``, ``lse`` the rows kernel's STREAM lse of ``logits`` [N, V] (the
    logits of the run whose lse is bounded, :func:`kernel_logits`; the lse of those logits by the
    rows kernel, :func:`kernel_stream_lse`), with each logit's error measured on them
    (:func:`measured_logit_errors`: certified against the exact logits; the theorem takes any
    logit errors, no premise on cuBLAS's order) and ``B`` the stream's own bound (:func:`lse_bound`
    with ``exact_logits``) at their ``max |z|``, as :func:`measured_loss_bounds`; ``tile_sum_depth``:
    the stream's tile-sum depth premise (default any order; :func:`checked_tile_sum_depth` on a
    device). Every row is bounded (the lse has no target: ignored tokens' rows too, whatever
    logits they hold). Not proved: the float64 softmax and the sum ``E`` (as the bound function
    says)."""
    _check_logits(x, w, logits)
    B = _stream_bound(
        x, w.shape[0], _max_abs(logits), _wrapper_errors(x, w.shape[0], exp_error)["exp_error"], tile_sum_depth
    )
    return _over_row_chunks(
        x, w, logits, lambda r, y, errors: linear_cross_entropy_lse_posteriori_bound(torch.softmax(y, dim=1), errors, B)
    )


def gradient_posteriori_bounds(
    x: torch.Tensor,
    w: torch.Tensor,
    target: torch.Tensor,
    *,
    reduction: str = "mean",
    ignore_index: int = -100,
    config=None,
    exp_error: float | None = None,
    storage_rounding: str = "nearest",
    logits: torch.Tensor | None = None,
    tile_sum_depth: int | None = None,
    chunk_size: int = VOCAB_CHUNK,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-entry bounds (dH [N, D], dW [V, D]) of
    :func:`~ojas_ref.verification.bounds.linear_cross_entropy_grad.linear_cross_entropy_grad_posteriori_bound`
    (``Ojas.LinearCrossEntropy.Float.GradPosteriori.ce_gp_dh_error`` / ``ce_gp_dw_error``) for
    ``_three_products`` (no bias or softcap; reductions "mean" / "sum") on these inputs: each
    entry's exponent error from ``ce_arg_posteriori`` with ``delta`` the logit bound (as in
    :func:`gradient_bounds`) and ``B`` the stream's own bound at the logits' magnitude bound, or
    ``delta + Dl`` (the a-priori lse bound) where that is smaller;
    the token chunks of the kernel's plan. With ``logits`` (the logits of the run whose
    gradients are bounded, :func:`kernel_logits`; :func:`stored_logits` only where checked equal):
    each logit's error measured (:func:`measured_logit_errors`: the float64 ``|z - y~|`` rounded up
    plus :func:`logit_score_error`; ``ce_arg_posteriori`` takes any logit errors: no premise on
    cuBLAS's order), and ``B`` at ``max |z|``. ``tile_sum_depth``: the stream's tile-sum depth premise (default: any order,
    ``block_v - 1``; :func:`checked_tile_sum_depth` identifies the kernel's on a device).
    ``chunk_size``: vocabulary rows per block of the dW sums and bound (as :func:`gradient_bounds`)."""
    from ojas_kernels import linear_cross_entropy as kernels

    _check_chunk_size(chunk_size)
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum' (the 3-product schedule), got {reduction!r}")
    (N, D), V = x.shape, w.shape[0]
    exp_error = _wrapper_errors(x, V, exp_error)["exp_error"]
    config = config or kernels.default_config(x.dtype, x.device)
    K = int((target != ignore_index).sum())
    ww = w.to(F64)
    if logits is None:
        kw = dict(dtype=x.dtype, dot_abs_sum=dot_abs_sum(x, w))
        delta, zmax = linear_cross_entropy_logit_error_bound(V, D, **kw)
        dl = lse_bound(x.device.type, V, D, block_v=config.rows.block_v, exp_error=exp_error, **kw)
    elif logits.shape != (N, V):
        raise ValueError(f"logits must be [N, V] = {(N, V)}, got {tuple(logits.shape)}")
    else:
        lo, hi = torch.aminmax(logits)  # max |z| without a copy of the logits
        delta, dl, zmax = None, None, max(-lo.item(), hi.item())
    B = lse_bound(
        x.device.type,
        V,
        1,
        dtype=x.dtype,
        block_v=config.rows.block_v,
        exact_logits=True,
        max_abs_logit=zmax,
        exp_error=exp_error,
        tile_sum_depth=tile_sum_depth,
    )
    s_h, s_w = torch.empty(N, D, dtype=F64, device=x.device), torch.zeros(V, D, dtype=F64, device=w.device)
    blocks = 0
    for r in _row_chunks(N):  # a block of tokens at a time: dH's rows, dW's sum
        h, errors = x[r].to(F64), None
        y = h @ ww.t()
        if logits is not None:  # |z - y_exact| <= |z - y~| (rounded up) + the float64 logits' error
            errors = measured_logit_errors(h, ww, y, logits[r])
        factors = linear_cross_entropy_entry_posteriori_factors(
            torch.log_softmax(y, dim=1),
            target[r],
            delta if logits is None else errors,
            B,
            dtype=x.dtype,
            lse_error=dl,
            exp_error=exp_error,
            storage_rounding=storage_rounding,
            ignore_index=ignore_index,
        )
        s_w += cb.matmul_upper(factors.t(), h.abs() * (target[r] != ignore_index).to(F64)[:, None])
        s_h[r] = cb.matmul_upper(factors, ww.abs())  # |W| made here and dropped: one [V, D] tensor fewer held
        blocks += 1
        del h, y, factors, errors  # before the next block's
    _inflate_rows_(s_w, blocks, chunk_size)
    (_, t_h, ha_h), (_, t_w, ha_w) = _gradient_sums(x, ww, target, ignore_index, None, chunk_size, prob=False)
    del ww
    plan = kernels._three_products_plan(N, D, V, x.element_size(), (True, True, False), config, K)
    common = dict(dtype=x.dtype, scale=1.0 / K if reduction == "mean" else 1.0, storage_rounding=storage_rounding)
    bh = linear_cross_entropy_grad_posteriori_bound(s_h, t_h, ha_h, n_terms=V, **common)
    dw_args = dict(n_terms=max(n for _, n, _ in plan), n_chunks=len(plan), **common)
    bw = _by_vocab_rows(
        lambda *sums: linear_cross_entropy_grad_posteriori_bound(*sums, **dw_args), (s_w, t_w, ha_w), chunk_size
    )
    return bh, bw


def four_product_gradient_bounds(
    x: torch.Tensor,
    w: torch.Tensor,
    target: torch.Tensor,
    config,
    *,
    reduction: str = "none",
    ignore_index: int = -100,
    exp_error: float | None = None,
    storage_rounding: str = "nearest",
    grad_output: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-entry bounds (dH [N, D], dW [V, D]) of ``ce_dh4_error`` / ``ce_dw4_error``
    (:func:`~ojas_ref.verification.bounds.linear_cross_entropy_grad.linear_cross_entropy_weighted_dh_error_bound`,
    ``..._weighted_dw_error_bound``) for the 4-product schedule with ``config`` (which must fix
    ``tiles_per_program``: the forward's groups of tiles enter the lse bound), no bias:
    ``delta`` of the float32 logits (not rounded to the dtype), ``Dl`` the merged lse's
    (``ce_lse_error_two_level``), ``Am = 2 Zmax + ln V + Dl``; the token weights grad_output
    (per token for "none"), ``grad_output / K`` for "mean" (``ua = 2^-24``). The lse premise is
    composed in Coq: ``ce_dh4_error_two_level`` / ``ce_dw4_error_two_level`` take
    ``ce_lse_error_two_level``'s premises per token's row and conclude at that ``Dl``."""
    from ojas_kernels import linear_cross_entropy as kernels

    if config is None or config.tiles_per_program is None:
        raise ValueError("the 4-product bounds need a config that fixes tiles_per_program")
    (N, D), V = x.shape, w.shape[0]
    exp_error = _wrapper_errors(x, V, exp_error)["exp_error"]
    K = int((target != ignore_index).sum())
    go = torch.ones(1 if reduction != "none" else N, dtype=F64) if grad_output is None else grad_output.to(F64)
    go = go.reshape(-1).to(x.device)
    kw = dict(dtype=x.dtype, dot_abs_sum=dot_abs_sum(x, w))
    delta, zmax = linear_cross_entropy_logit_error_bound(V, D, logits_in_dtype=False, **kw)
    n_groups = -(-(-(-V // config.fwd.block_n)) // config.tiles_per_program)
    dl = lse_bound(
        x.device.type,
        V,
        D,
        two_level=True,
        block_n=config.fwd.block_n,
        tiles_per_program=config.tiles_per_program,
        block_p=min(config.rows.block_p, kernels.next_power_of_2(n_groups)),
        exp_error=exp_error,
        **kw,
    )
    premises = dict(
        logit_error=delta, lse_error=dl, max_abs_arg=(2 * zmax + math.log(V) + dl) * 1.01, exp_error=exp_error
    )
    mean = reduction == "mean"
    sums_h, _ = gradient_sums(x, w, target, ignore_index)
    bh = linear_cross_entropy_weighted_dh_error_bound(
        *sums_h,
        go,
        n_terms=V,
        dtype=x.dtype,
        scale=1.0 / K if mean else 1.0,
        storage_rounding=storage_rounding,
        **premises,
    )
    w0 = (cb.div_upper(go.abs(), torch.tensor(float(K), dtype=F64)) if mean and K else go).expand(N)
    bw = linear_cross_entropy_weighted_dw_error_bound(
        *weighted_gradient_sums(x, w, target, w0, ignore_index),
        n_terms=max(K, 1),
        dtype=x.dtype,
        weight_error=2.0**-24 if mean else 0.0,
        storage_rounding=storage_rounding,
        **premises,
    )
    return bh, bw
