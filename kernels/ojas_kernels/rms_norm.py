"""Fused RMSNorm in Triton: one kernel forward, two kernels backward (dx with partial dW sums, then dW).

Rows of ``x [rows, n]`` are normalised over their ``n`` entries in the compute dtype
``c`` (float32, float64 for float64 inputs): ``r = 1 / sqrt(mean(x^2) + eps)``, saved
per row (``rstd``, dtype ``c``). Two ways of applying the weight, as Hugging Face's two
RMSNorm families do:

* ``after_weight=False`` (Llama, Mistral, Qwen2/3, Phi-3): ``y = w * (x r).to(x.dtype)``;
  the normalised value is rounded to the input dtype, then multiplied by the weight in
  the dtype torch promotes ``w`` and ``x`` to (one rounding of the product, as torch's
  16-bit multiply, whose exact product fits in float32).
* ``after_weight=True`` (Gemma 2/3, offset 1): ``y = (x r (offset + w.to(c))).to(x.dtype)``.

Backward, from the saved ``x`` and ``r`` alone, with ``g = (offset + w) dy`` in ``c``:
``dx_j = r g_j - (r^3 / n) x_j sum_i g_i x_i`` and ``dw_i = sum over rows of dy_i n_i``
(``n_i`` the value the forward multiplied by the weight: ``(x r).to(x.dtype)`` or ``x r``),
each program summing its rows in registers, the per-program partial sums added in ``c``
afterwards (``_rms_norm_dw_kernel``, in program order, rounded once to the weight's dtype).
The kernels compile without FMA contraction (``enable_fp_fusion=False``), so every product and
sum is rounded on its own; Triton's ``/`` and ``tl.sqrt`` are approximate on NVIDIA GPUs
(``div.full.f32``, ``sqrt.approx.ftz.f32``): ``r`` is not the correctly rounded
``1 / sqrt(mean(x^2) + eps)`` (``ojas_ref.verification.kernel_schedule_rowwise`` models the
schedule with the device's own operations). That ``dx``/``dw`` is the vector-Jacobian product of the forward over the
reals, for ``eps > 0``: Ojas.RMSNorm.Backward.rms_norm_backward_eq_vjp (offset 0) and
Ojas.RMSNorm.Backward.rms_norm_offset_backward_eq_vjp (weight ``1 + w``). The cast of the
normalised value to the input dtype is treated as the identity (as torch's autograd
treats ``.to()``); no theorem covers it, nor the rounding.

Under torch.compile (and torch.export) these kernels run as two custom operators,
``ojas::rms_norm_forward`` and ``ojas::rms_norm_backward``, registered next to their
``autograd.Function`` in ``ojas_ref.functional.rms_norm`` (``ojas_kernels.host.define_op``,
opaque to Dynamo and Inductor, with fake implementations from :func:`forward_outputs` and
:func:`backward_outputs`; no autograd of their own: under torch.compile the Function calls the
forward op in its forward and the backward op in its backward).  They call
:func:`rms_norm_forward` and :func:`rms_norm_backward` with the same arguments as the eager
path, so the theorems above apply unchanged.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from .host import cdiv, next_power_of_2
from .launch import fast

__all__ = [
    "MAX_HIDDEN",
    "backward",
    "backward_outputs",
    "forward",
    "forward_outputs",
    "rms_norm_backward",
    "rms_norm_forward",
]

#: The largest normalised size: a row lives in registers (one block of columns).
MAX_HIDDEN = 65536
# Elements of x per program tile: rows per program = this / the column block.
_TILE = 4096

_TL_DTYPES = {
    torch.float16: tl.float16,
    torch.bfloat16: tl.bfloat16,
    torch.float32: tl.float32,
    torch.float64: tl.float64,
}


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _blocks(n: int) -> tuple[int, int, int]:
    """(rows per program, column block, warps) for rows of n entries."""
    block_n = next_power_of_2(max(n, 1))
    block_m = max(1, _TILE // block_n)
    warps = min(16, max(1, block_m * block_n // 512))
    return block_m, block_n, warps


@triton.jit
def _rms_norm_fwd_kernel(
    X,
    W,
    Y,
    RSTD,
    n_rows,
    n,
    stride_x,
    stride_y,
    eps,
    offset,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    AFTER_WEIGHT: tl.constexpr,
    COMPUTE: tl.constexpr,
    PRODUCT: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    row_ok = rows < n_rows
    col_ok = cols < n
    ok = row_ok[:, None] & col_ok[None, :]
    x = tl.load(X + rows[:, None].to(tl.int64) * stride_x + cols[None, :], mask=ok, other=0.0).to(COMPUTE)
    w = tl.load(W + cols, mask=col_ok, other=0.0)
    r = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / n + eps)
    normed = x * r[:, None]
    if AFTER_WEIGHT:
        y = normed * (offset + w.to(COMPUTE))[None, :]
    else:
        rounded = normed.to(X.dtype.element_ty)
        y = rounded.to(PRODUCT) * w.to(PRODUCT)[None, :]
    tl.store(Y + rows[:, None].to(tl.int64) * stride_y + cols[None, :], y.to(Y.dtype.element_ty), mask=ok)
    tl.store(RSTD + rows, r, mask=row_ok)


@triton.jit
def _rms_norm_bwd_kernel(
    DY,
    X,
    W,
    RSTD,
    DX,
    DW_PART,
    n_rows,
    n,
    stride_dy,
    stride_x,
    stride_dx,
    offset,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    AFTER_WEIGHT: tl.constexpr,
    COMPUTE: tl.constexpr,
):
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n
    w = tl.load(W + cols, mask=col_ok, other=0.0).to(COMPUTE) + offset
    dw = tl.zeros([BLOCK_N], dtype=COMPUTE)
    for block in range(pid, tl.cdiv(n_rows, BLOCK_M), programs):
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < n_rows
        ok = row_ok[:, None] & col_ok[None, :]
        rows64 = rows[:, None].to(tl.int64)
        x = tl.load(X + rows64 * stride_x + cols[None, :], mask=ok, other=0.0).to(COMPUTE)
        dy = tl.load(DY + rows64 * stride_dy + cols[None, :], mask=ok, other=0.0).to(COMPUTE)
        r = tl.load(RSTD + rows, mask=row_ok, other=0.0)
        normed = x * r[:, None]
        if not AFTER_WEIGHT:
            normed = normed.to(X.dtype.element_ty).to(COMPUTE)
        dw += tl.sum(dy * normed, axis=0)
        g = dy * w[None, :]
        dot = tl.sum(g * x, axis=1)
        dx = r[:, None] * g - ((r * r * r) / n * dot)[:, None] * x
        tl.store(DX + rows64 * stride_dx + cols[None, :], dx.to(DX.dtype.element_ty), mask=ok)
    tl.store(DW_PART + pid.to(tl.int64) * n + cols, dw, mask=col_ok)


@triton.jit
def _rms_norm_dw_kernel(DW_PART, DW, n_parts, n, BLOCK: tl.constexpr, COMPUTE: tl.constexpr):
    """dW = the column sums of the programs' partial rows (in ``c``, in row order), in W's dtype."""
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = cols < n
    acc = tl.zeros([BLOCK], dtype=COMPUTE)
    # unrolled: the rows' loads do not wait on the running sum, so they are in flight together
    for row in tl.range(0, n_parts, loop_unroll_factor=4):
        acc += tl.load(DW_PART + row * n + cols, mask=ok, other=0.0)
    tl.store(DW + cols, acc.to(DW.dtype.element_ty), mask=ok)


#: dW columns per program and its warps: many programs, each a short column block (the sum over
#: the partial rows is sequential per column, so its speed comes from programs side by side). Picked
#: by an ad-hoc timing sweep on an H100, not a benchmark record; the profiles in
#: benchmarks/profiles/h100-2026-12-07/ (29564a3, 128 columns, unrolled 8) show the kernel at 29.8 us
#: a call in the 1.06B Llama's step against 72.9 us for 256 columns, 4 warps, not unrolled (f489412).
_DW_BLOCK = 64
_DW_WARPS = 1


def _check(x: torch.Tensor, weight: torch.Tensor) -> None:
    if x.dim() != 2 or weight.dim() != 1 or weight.shape[0] != x.shape[1]:
        raise ValueError(f"expected x [rows, n] and weight [n], got {tuple(x.shape)} and {tuple(weight.shape)}")
    for name, t in (("x", x), ("weight", weight)):
        if t.dtype not in _TL_DTYPES:
            raise TypeError(f"{name} must be float16, bfloat16, float32 or float64, got {t.dtype}")
    if x.device != weight.device:
        raise ValueError(f"x and weight must be on one device, got {x.device} and {weight.device}")
    if x.shape[1] > MAX_HIDDEN:
        raise ValueError(f"the Triton RMSNorm normalises rows of at most {MAX_HIDDEN} entries, got {x.shape[1]}")


def _row_major(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def forward_outputs(x: torch.Tensor, weight: torch.Tensor, after_weight: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`rms_norm_forward`'s ``(y, rstd)``, uninitialised: ``y [rows, n]`` contiguous in the
    input dtype (``after_weight``) or torch's promotion of ``weight`` and ``x``, ``rstd [rows]`` in
    the compute dtype (also the fake implementation of ``ojas::rms_norm_forward``)."""
    rows, n = x.shape
    out_dtype = x.dtype if after_weight else torch.promote_types(x.dtype, weight.dtype)
    return (
        torch.empty((rows, n), dtype=out_dtype, device=x.device),
        torch.empty(rows, dtype=_compute_dtype(x.dtype), device=x.device),
    )


def backward_outputs(x: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`rms_norm_backward`'s ``(dx, dw)``, uninitialised and contiguous, in the dtypes of
    ``x`` and ``weight`` (also the fake implementation of ``ojas::rms_norm_backward``)."""
    return (
        torch.empty(x.shape, dtype=x.dtype, device=x.device),
        torch.empty(weight.shape[0], dtype=weight.dtype, device=weight.device),
    )


def _fwd_plan(n: int, x_dtype: torch.dtype, w_dtype: torch.dtype, after_weight: bool) -> tuple:
    """``(rows per program, output dtype, compute dtype, launch keywords)`` of the forward for
    rows of ``n`` entries (cached: the launch code runs at every call)."""
    key = (n, x_dtype, w_dtype, after_weight)
    plan = _FWD_PLANS.get(key)
    if plan is None:
        compute = _compute_dtype(x_dtype)
        out_dtype = x_dtype if after_weight else torch.promote_types(x_dtype, w_dtype)
        block_m, block_n, warps = _blocks(n)
        options = dict(
            BLOCK_M=block_m,
            BLOCK_N=block_n,
            AFTER_WEIGHT=bool(after_weight),
            COMPUTE=_TL_DTYPES[compute],
            PRODUCT=_TL_DTYPES[_compute_dtype(out_dtype)],
            num_warps=warps,
            enable_fp_fusion=False,
        )
        plan = _FWD_PLANS[key] = (block_m, out_dtype, compute, options)
    return plan


def _bwd_plan(n: int, x_dtype: torch.dtype, after_weight: bool) -> tuple:
    """``(rows per program, compute dtype, dX launch keywords, dW launch keywords, dW grid)`` of
    the backward for rows of ``n`` entries (cached)."""
    key = (n, x_dtype, after_weight)
    plan = _BWD_PLANS.get(key)
    if plan is None:
        compute = _compute_dtype(x_dtype)
        block_m, block_n, warps = _blocks(n)
        tl_compute = _TL_DTYPES[compute]
        options = dict(
            BLOCK_M=block_m,
            BLOCK_N=block_n,
            AFTER_WEIGHT=bool(after_weight),
            COMPUTE=tl_compute,
            num_warps=warps,
            enable_fp_fusion=False,
        )
        plan = _BWD_PLANS[key] = (
            block_m,
            compute,
            options,
            dict(BLOCK=_DW_BLOCK, COMPUTE=tl_compute, num_warps=_DW_WARPS, enable_fp_fusion=False),
            (cdiv(n, _DW_BLOCK),),
        )
    return plan


_FWD_PLANS: dict[tuple, tuple] = {}
_BWD_PLANS: dict[tuple, tuple] = {}


def rms_norm_forward(
    x: torch.Tensor, weight: torch.Tensor, eps: float, offset: float = 0.0, after_weight: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(y, rstd)`` for ``x [rows, n]`` and ``weight [n]`` (see the module docstring).

    ``y`` has the input dtype (``after_weight``) or torch's promotion of ``weight`` and
    ``x``; ``rstd [rows]`` the compute dtype (float32; float64 for float64 ``x``)."""
    _check(x, weight)
    return forward(x, weight, eps, offset, after_weight, x.shape)


def forward(
    x: torch.Tensor, weight: torch.Tensor, eps: float, offset: float, after_weight: bool, shape: torch.Size
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`rms_norm_forward` without the argument checks, for ``x [rows, n]`` and ``weight [n]``
    its caller has checked, with ``y`` of ``shape`` (``rows * n`` entries, contiguous: the same
    memory as ``[rows, n]``, so that the caller needs no view of it)."""
    x, weight = _row_major(x), weight.contiguous()
    rows, n = x.shape
    block_m, out_dtype, compute, options = _fwd_plan(n, x.dtype, weight.dtype, after_weight)
    device = x.device
    y = torch.empty(shape, dtype=out_dtype, device=device)
    rstd = torch.empty(rows, dtype=compute, device=device)
    if rows == 0 or n == 0:
        return y, rstd.fill_(torch.nan if n == 0 else 0.0)
    # y's row stride is n: it is contiguous
    fast(_rms_norm_fwd_kernel)[(cdiv(rows, block_m),)](
        x, weight, y, rstd, rows, n, x.stride(0), n, float(eps), float(offset), **options
    )
    return y, rstd


@functools.lru_cache(maxsize=None)
def _multiprocessors(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1


def _programs(device: torch.device, blocks: int) -> int:
    """Backward programs: a few per multiprocessor on a GPU (each adds one partial dW row)."""
    return max(1, min(blocks, 4 * _multiprocessors(device)))


def rms_norm_backward(
    grad_y: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    rstd: torch.Tensor,
    offset: float = 0.0,
    after_weight: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(dx, dw)`` from the saved ``x`` and ``rstd`` (see the module docstring); ``dx`` in
    the dtype of ``x``, ``dw`` in the dtype of ``weight`` (summed in the compute dtype)."""
    _check(x, weight)
    return backward(grad_y, x, weight, rstd, offset, after_weight, x.shape, weight.shape)


def backward(
    grad_y: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    rstd: torch.Tensor,
    offset: float,
    after_weight: bool,
    dx_shape: torch.Size,
    dw_shape: torch.Size,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`rms_norm_backward` without the argument checks, for ``x [rows, n]``, ``weight [n]``
    and ``grad_y`` of ``rows * n`` entries (read as ``[rows, n]``), with ``dx`` of ``dx_shape``
    and ``dw`` of ``dw_shape`` (``rows * n`` and ``n`` entries, contiguous)."""
    x, weight = _row_major(x), weight.contiguous()
    rows, n = x.shape
    if grad_y.shape != x.shape:
        grad_y = grad_y.reshape(rows, n)
    grad_y = _row_major(grad_y)
    block_m, compute, options, dw_options, dw_grid = _bwd_plan(n, x.dtype, after_weight)
    device = x.device
    dx = torch.empty(dx_shape, dtype=x.dtype, device=device)
    dw = torch.empty(dw_shape, dtype=weight.dtype, device=device)
    if rows == 0 or n == 0:
        return dx, dw.zero_()
    programs = _programs(device, cdiv(rows, block_m))
    partial = torch.empty((programs, n), dtype=compute, device=device)
    # dx's row stride is n: it is contiguous
    fast(_rms_norm_bwd_kernel)[(programs,)](
        grad_y, x, weight, rstd, dx, partial, rows, n, grad_y.stride(0), x.stride(0), n, float(offset), **options
    )
    fast(_rms_norm_dw_kernel)[dw_grid](partial, dw, programs, n, **dw_options)
    return dx, dw
