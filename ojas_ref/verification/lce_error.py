"""Helpers for the proved bound on the chunked linear cross-entropy's streamed lse.

The theorem is ``Ojas.FloatModel.CrossEntropyLseError.ce_lse_error`` (and ``ce_loss_error``)
of rocq/FloatModel/CrossEntropyLseError.v; its value is
:func:`ojas_ref.verification.error_bounds.linear_cross_entropy_lse_error_bound`.

* :func:`kernel_stream_lse`: the kernel's own ``_rows_kernel`` with STREAM (the loop the
  theorem models) run on given logits, returning its lse and loss per row;
* :func:`emulated_stream_lse`: the theorem's ``ce_run`` in float32 torch operations, with a
  ``drop_rescale`` mutant (one tile's ``l * alpha`` replaced by ``l``), for mutation tests;
* :func:`measured_exp_error`, :func:`measured_log_error`: the premises ``ex_err`` /
  ``lg_err`` (``tl.exp`` on x <= 0, ``tl.log`` on [1, 2^24]) measured on a device.
No theorem covers these helpers themselves; they only feed the tests and the benchmark.
"""

from __future__ import annotations

import functools

import torch

F64 = torch.float64


def kernel_stream_lse(z: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(lse, loss) [n] float32 of ``_rows_kernel`` STREAM (no bias, no cap, eps = lam = 0) over the
    rows of the logits ``z`` [n, V] (float32, bfloat16 or float16, as the 3-product schedule
    stores them), targets ``target`` [n] in [0, V)."""
    from ojas_kernels import linear_cross_entropy as lce

    if z.dim() != 2 or target.shape != (z.shape[0],):
        raise ValueError(f"z must be [n, V] and target [n], got {tuple(z.shape)} and {tuple(target.shape)}")
    z = z.contiguous()
    n, V = z.shape
    cfg = lce.default_config(z.dtype, z.device)
    f32 = dict(dtype=torch.float32, device=z.device)
    loss, lse = torch.empty(n, **f32), torch.empty(n, **f32)
    none = torch.empty(1, **f32)
    opts = lce._Options(0.0, 0.0, None)
    lce._launch_rows(
        n, cfg.rows, none, none, none, none, z, z, target, loss, lse, none, none,
        0, n, 1, V, 0, 0, V, 0, 1.0,
        **opts.kernel_args(V), ignore_index=-100, masked=False,
        HAS_LSE=False, GRAD=False, STREAM=True, NEED_SUM=False, HAS_BIAS=False, HAS_CAP=False, BLOCK_P=16,
    )
    return lse, loss


def stream_block_v(dtype: torch.dtype, device: torch.device | str) -> int:
    """The vocabulary tile width of ``_rows_kernel`` on ``device`` (the theorem's ``Bt``)."""
    from ojas_kernels import linear_cross_entropy as lce

    return lce.default_config(dtype, torch.device(device)).rows.block_v


def emulated_stream_lse(z: torch.Tensor, block_v: int, drop_rescale: int | None = None) -> torch.Tensor:
    """The theorem's ``ce_run`` from ``(z_first, 0)`` over tiles of ``block_v`` logits, then
    ``rnd(m + ln l)``, every operation in float32 (``torch.sum`` as the tile sum); rows of
    ``z`` [n, V]. ``drop_rescale = k``: the mutant whose tile ``k`` adds its sum to ``l``
    without the rescale ``l * exp(m - m')``."""
    z = z.to(torch.float32)
    m = z[:, 0].clone()
    l = torch.zeros_like(m)
    for k, c0 in enumerate(range(0, z.shape[1], block_v)):
        tile = z[:, c0:c0 + block_v]
        m_new = torch.maximum(m, tile.max(dim=1).values)
        alpha = torch.exp(m - m_new)
        scaled = l if k == drop_rescale else l * alpha
        l = scaled + torch.exp(tile - m_new[:, None]).sum(dim=1)
        m = m_new
    return m + torch.log(l)


def exact_lse(z: torch.Tensor) -> torch.Tensor:
    """float64 logsumexp of the rows of ``z`` (upcast)."""
    return torch.logsumexp(z.to(F64), dim=1)


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
