"""Executable models of the row-wise and elementwise kernels' schedules, and their bit-for-bit check.

The companion of :mod:`ojas_ref.verification.kernel_schedule` (the attention forward) for
``ojas_kernels.rms_norm`` (forward, backward dx with its partial dW rows, the dW sum),
``ojas_kernels.swiglu`` (forward, backward; "silu" and "gelu_tanh"), ``ojas_kernels.rope``
(forward, backward) and ``ojas_kernels.relu`` (the 1-bit mask kernels). Each ``*_schedule``
function computes on the CPU, with torch float32 operations, what the kernel computes, operation
by operation, in the kernel's order; each :func:`check_*` runs the kernel and the model on the
same inputs and returns ``None`` when every output is equal bit for bit, else a
:class:`Mismatch`: the first differing output (in the order the schedule computes them), its first
differing element (row-major), the step that computes it, both values, and the model's
intermediate values of that element.

The operations whose rounding is a parameter are :class:`RowwisePrimitives` (float32 tensors in
and out). Two sets:

* :func:`interpreter_primitives`: what ``TRITON_INTERPRET=1`` runs: ``tl.sum`` is ``np.sum`` over
  the axis of an array of the kernel's block shape (numpy's pairwise order), Triton's ``/`` and
  ``tl.sqrt`` numpy's IEEE ``divide`` / ``sqrt``, ``tl.exp`` ``np.exp``, swiglu's interpreter
  ``tanh`` its float64 formula, a contracted product ``fma(a, b, c)`` two roundings (the
  interpreter never contracts), and a ``.to(dtype)`` cast the interpreter's
  (``kernel_schedule._interpreter_cast``: bfloat16 truncated);
* :func:`device_primitives`: the CUDA device's own operations where they are not IEEE, each run
  elementwise by a tiny Triton kernel (:func:`_op_kernel`) compiled with the kernel's FMA setting:
  Triton's ``/`` (``div.full.f32``, approximate; ``1.0 / x`` run as the kernel writes it, a
  constant numerator) and ``tl.sqrt`` (``sqrt.approx.ftz.f32``) of ``rms_norm`` (compiled without contraction), libdevice's ``expf`` and ``tanhf`` of ``swiglu``
  (compiled with contraction, as swiglu); ``fma`` one rounding (exact float64 arithmetic and a
  two-sum correction); ``tl.sum`` :func:`blocked_sum`, the order the imported Triton (3.6 or 3.9)
  lowers a reduction of a blocked layout to (read from the sm_90 PTX: a thread's elements by a
  balanced tree of adjacent pairs in 3.9, one after another in 3.6, then ``shfl.sync.bfly`` over the lanes, then over the warps through shared
  memory), on the layout the launch compiled to; round-to-nearest-even casts.

Per kernel (the theorems are the kernels' docstrings'; none of them covers the rounding):

* ``rms_norm`` (Ojas.RMSNorm.Backward.rms_norm_backward_eq_vjp, rms_norm_offset_backward_eq_vjp,
  over the reals), compiled without FMA contraction (``enable_fp_fusion=False``): forward
  ``ss = sum(x * x)``, ``r = 1 / sqrt(ss / n + eps)`` with Triton's ``/`` and ``tl.sqrt`` (on the
  device approximate: ``div.full.f32``, ``sqrt.approx.ftz.f32``; the model uses the device's own),
  ``y = cast(x r * (offset + w))`` or ``cast(cast(x r) * w)``; backward per program (``programs``
  of them, blocks of rows taken ``pid, pid + programs, ...``) ``dot = sum(dy (offset + w) x)``,
  ``dx = cast(r g - (((r r) r) / n) dot x)``, ``dw_part += sum_rows(dy n)``; then
  ``dw = cast(sum over programs of dw_part, in program order)``.
* ``swiglu``, compiled with contraction (the default of Triton 3.9; torch's nvcc contracts too):
  the fused products are those of the sm_90 PTX: silu backward ``1 + a (1 - s)``; gelu_tanh
  ``a + (a^2 a) C`` (both directions), backward ``1 - T T``, ``1 + a^2 C3`` and
  ``0.5 (1 + T) + P``; silu's ``1 + exp(-a)`` is fused with expf's final scaling by a power of
  2, exact where the sum is not 1, so it is ``1 + expf(-a)``; divisions ``div_rn`` (IEEE); casts
  ``_round`` (nearest-even on both sides).
* ``rope``: IEEE products and sums, no contraction, ``_round`` casts: the same on both sides.
* ``relu``: integer operations only: the same on both sides.

Not modelled (raises): float64 ``rms_norm`` and reduction layouts that replicate elements. The
model is an executable statement of the schedule, not a proof.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Callable

import numpy as np
import torch

from ojas_ref.verification.kernel_schedule import F32, F64, _bits, _ieee_div, _interpreter_cast, _np, in_thread_sum

__all__ = [
    "Blocked",
    "RowwisePrimitives",
    "Schedule",
    "Mismatch",
    "interpreter_primitives",
    "device_primitives",
    "fma32",
    "blocked_sum",
    "reduce_layouts",
    "rms_norm_forward_schedule",
    "rms_norm_backward_schedule",
    "swiglu_forward_schedule",
    "swiglu_backward_schedule",
    "rope_schedule",
    "relu_forward_schedule",
    "relu_backward_schedule",
    "compare",
    "check_rms_norm_forward",
    "check_rms_norm_backward",
    "check_swiglu_forward",
    "check_swiglu_backward",
    "check_rope",
    "check_relu_forward",
    "check_relu_backward",
]


@dataclasses.dataclass(frozen=True)
class Blocked:
    """A ``#ttg.blocked`` layout of a 2-D tile: per dimension ``size`` (sizePerThread),
    ``threads`` (threadsPerWarp), ``warps`` (warpsPerCTA)."""

    size: tuple[int, int]
    threads: tuple[int, int]
    warps: tuple[int, int]


@dataclasses.dataclass(frozen=True)
class RowwisePrimitives:
    """The operations of the schedules whose rounding is a parameter (module docstring):
    ``sum(x, axis, layout)`` (``tl.sum`` of a 2-D float32 block; ``layout`` the reduction's
    :class:`Blocked` or None), ``div`` (Triton's ``/``), ``rcp`` (``1.0 / x``), ``div_rn``
    (``tl.math.div_rn``: IEEE in both sets), ``sqrt`` (``tl.sqrt``), ``exp`` and ``tanh``
    (swiglu's ``_exp`` / ``_tanh``), ``fma(a, b, c)`` (a product the compiler contracts with the
    sum ``+ c``) and ``cast(x, dtype)`` (``.to(dtype)`` from float32; the kernels' ``_round`` is
    nearest-even on both sides and not a parameter)."""

    name: str
    sum: Callable[[torch.Tensor, int, Blocked | None], torch.Tensor]
    div: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    rcp: Callable[[torch.Tensor], torch.Tensor]
    div_rn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    sqrt: Callable[[torch.Tensor], torch.Tensor]
    exp: Callable[[torch.Tensor], torch.Tensor]
    tanh: Callable[[torch.Tensor], torch.Tensor]
    fma: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
    cast: Callable[[torch.Tensor, torch.dtype], torch.Tensor]
    needs_layout: bool = False


def _interpreter_tanh(x: torch.Tensor) -> torch.Tensor:
    """swiglu's ``_tanh`` under the interpreter: ``1 - 2 / (exp(2 y) + 1)`` in float64, y clamped
    to [-40, 40], rounded to float32."""
    y = _np(x).astype(np.float64)
    y = np.where(y > 40.0, 40.0, np.where(y < -40.0, -40.0, y))
    return torch.from_numpy((1.0 - 2.0 / (np.exp(2.0 * y) + 1.0)).astype(np.float32))


def interpreter_primitives() -> RowwisePrimitives:
    """The primitives of Triton's CPU interpreter (module docstring): the numpy calls it makes."""
    return RowwisePrimitives(
        name="interpreter",
        sum=lambda x, axis, layout: torch.from_numpy(np.asarray(np.sum(_np(x), axis=axis))),
        div=_ieee_div,
        rcp=lambda x: _ieee_div(torch.ones_like(x), x),
        div_rn=_ieee_div,
        sqrt=lambda x: torch.from_numpy(np.sqrt(_np(x))),  # numpy's IEEE sqrt; torch's CPU sqrt can be 1 ulp off
        exp=lambda x: torch.from_numpy(np.exp(_np(x))),
        tanh=_interpreter_tanh,
        fma=lambda a, b, c: a * b + c,
        cast=_interpreter_cast,
    )


def fma32(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """``a * b + c`` of float32 tensors rounded once to float32 (``fma.rn.f32``): the product is
    exact in float64, the float64 sum's error is recovered by a two-sum, and a sum that lands on a
    float32 midpoint is rounded toward the side of that error."""
    a64, b64, c64 = (t.to(F64) for t in torch.broadcast_tensors(a, b, c))
    p = a64 * b64
    s = p + c64
    v = s - p
    err = (p - (s - v)) + (c64 - v)
    r = s.to(F32)
    r64 = r.to(F64)
    toward = torch.where(s > r64, torch.tensor(float("inf")), torch.tensor(float("-inf"))).to(F32)
    nb = torch.nextafter(r, toward)
    mid = (r64 + nb.to(F64)) / 2
    past = (err != 0) & (s == mid) & ((err > 0) == (s > r64))
    return torch.where(torch.isfinite(s) & past, nb, r)


def _butterfly(v: torch.Tensor) -> torch.Tensor:
    """``v += shfl.bfly(v, off)`` for off = P/2, ..., 1 over the last dimension (P a power of 2),
    the value of index 0 (every index holds the same bits: + commutes)."""
    p = v.shape[-1]
    off = p // 2
    while off:
        v = v + v[..., torch.arange(p) ^ off]
        off //= 2
    return v[..., 0]


def blocked_sum(x: torch.Tensor, axis: int, layout: Blocked, version: str | None = None) -> torch.Tensor:
    """``tl.sum(x, axis)`` of a float32 [M, N] tile in the blocked ``layout`` as Triton ``version``
    (default: the one imported; 3.6 and 3.9 are modelled) lowers it for sm_90 (read from the PTX of
    ``_rms_norm_fwd_kernel``, 1 x 4096 bf16, 8 warps, and ``_rms_norm_bwd_kernel``): element ``k``
    along the axis is ``i + s (lane + t (warp + w j))`` (s, t, w the layout's size, threads and warps
    along the axis); a thread adds its elements, in the order ``j``, then ``i``
    (:func:`~ojas_ref.verification.kernel_schedule.in_thread_sum`: Triton 3.9 by a balanced tree of
    adjacent pairs, 3.6 one after another); the lanes then add by butterfly shuffles (xor t/2, ...,
    1), then the warps, through shared memory, the same way."""
    x = x.to(F32)
    if axis == 0:
        x = x.t()
    s, t, w = layout.size[axis], layout.threads[axis], layout.warps[axis]
    m, n = x.shape
    if n % (s * t * w):
        raise ValueError(f"a layout of {s * t * w} elements along the axis replicates a block of {n}: not modelled")
    j = n // (s * t * w)
    v = x.reshape(m, j, w, t, s).permute(0, 2, 3, 1, 4).reshape(m, w, t, j * s)
    return _butterfly(_butterfly(in_thread_sum(v, version)))


_BLOCKED = re.compile(
    r"^(#\w+) = #ttg\.blocked<\{sizePerThread = \[(\d+), (\d+)\], threadsPerWarp = \[(\d+), (\d+)\], "
    r"warpsPerCTA = \[(\d+), (\d+)\]",
    re.M,
)
_REDUCE = re.compile(r'"tt\.reduce"\(%[\w.]+\) <\{axis = (\d) : i32\}>.*?\}\) : \(tensor<\d+x\d+xf32, (#\w+)>\)', re.S)


def reduce_layouts(ttgir: str) -> list[tuple[int, Blocked]]:
    """``(axis, layout)`` of every 2-D float32 ``tt.reduce`` of a kernel's TTGIR, in order."""
    layouts = {
        m.group(1): Blocked(*(tuple(int(g) for g in m.groups()[k : k + 2]) for k in (1, 3, 5)))
        for m in _BLOCKED.finditer(ttgir)
    }
    found = [(int(m.group(1)), m.group(2)) for m in _REDUCE.finditer(ttgir)]
    missing = [name for _, name in found if name not in layouts]
    if missing:
        raise ValueError(f"reductions of layouts other than blocked are not modelled: {missing}")
    return [(axis, layouts[name]) for axis, name in found]


@functools.lru_cache(maxsize=None)
def _op_kernel():
    """``Z = op(X, Y)`` elementwise (float32): Triton's ``/``, ``1.0 / x`` (the constant numerator
    as the kernel has it, which the assembler may treat otherwise than a loaded one), ``tl.sqrt``, libdevice's ``exp``
    and ``tanh`` (the device's own operations, for :func:`device_primitives`)."""
    import triton
    import triton.language as tl
    from triton.language.extra import libdevice

    @triton.jit
    def kernel(X, Y, Z, n, OP: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        ok = offs < n
        x = tl.load(X + offs, mask=ok, other=1.0)
        y = tl.load(Y + offs, mask=ok, other=1.0)
        if OP == "div":
            z = x / y
        elif OP == "rcp":
            z = 1.0 / x
        elif OP == "sqrt":
            z = tl.sqrt(x)
        elif OP == "exp":
            z = libdevice.exp(x)
        else:
            z = libdevice.tanh(x)
        tl.store(Z + offs, z, mask=ok)

    return kernel


def _device_op(op: str, fusion: bool) -> Callable[..., torch.Tensor]:
    """``op`` on the CUDA device, elementwise, compiled with ``enable_fp_fusion=fusion`` (the
    setting of the kernel whose operation it is)."""

    def run(x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        x, y = torch.broadcast_tensors(x, x if y is None else y)
        shape = x.shape
        x, y = (t.to(F32).contiguous().reshape(-1).cuda() for t in (x, y))
        z = torch.empty_like(x)
        _op_kernel()[(max(1, -(-x.numel() // 1024)),)](x, y, z, x.numel(), OP=op, BLOCK=1024, enable_fp_fusion=fusion)
        return z.cpu().reshape(shape)

    return run


def device_primitives() -> RowwisePrimitives:
    """The primitives of the kernels on this CUDA device (module docstring); ``RuntimeError``
    without one."""
    if not torch.cuda.is_available():
        raise RuntimeError("device_primitives needs a CUDA device (its /, sqrt, exp and tanh run there)")

    def total(x: torch.Tensor, axis: int, layout: Blocked | None) -> torch.Tensor:
        if layout is None:
            raise ValueError("the device's tl.sum needs the reduction's layout (reduce_layouts)")
        return blocked_sum(x, axis, layout)

    return RowwisePrimitives(
        name="device",
        sum=total,
        div=_device_op("div", False),
        rcp=_device_op("rcp", False),
        div_rn=_ieee_div,
        sqrt=_device_op("sqrt", False),
        exp=_device_op("exp", True),
        tanh=_device_op("tanh", True),
        fma=fma32,
        cast=lambda x, d: x.to(d),
        needs_layout=True,
    )


# ---------------------------------------------------------------------------
# The schedules
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Schedule:
    """A model's outputs in the order the schedule computes them, the step that computes each
    (``operations``), and per output its intermediates: ``steps[output][name]`` = (tensor, dims),
    ``dims`` the positions of the output's index that index the tensor (a per-row value of a
    [rows, n] output: (0,))."""

    outputs: dict[str, torch.Tensor]
    operations: dict[str, str]
    steps: dict[str, dict[str, tuple[torch.Tensor, tuple[int, ...]]]]


def _round(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``rounding._round``: ``x`` rounded to nearest-even in ``dtype``, as float32."""
    return x if dtype == F32 else x.to(dtype).to(F32)


def _layouts(primitives: RowwisePrimitives, launch: Callable[[], str] | None, axes: tuple[int, ...]) -> list:
    """The layouts of the kernel's reductions (over ``axes``, in order) when ``primitives`` need them."""
    if not primitives.needs_layout:
        return [None] * len(axes)
    if launch is None:
        raise ValueError("the device primitives need the launch's layouts (launch=)")
    found = reduce_layouts(launch())
    if tuple(axis for axis, _ in found) != axes:
        raise ValueError(f"expected reductions over the axes {axes} in the kernel's TTGIR, found {found}")
    return [layout for _, layout in found]


def _check_rms(x: torch.Tensor) -> None:
    if x.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"x must be float32, bfloat16 or float16 (float64 is not modelled), got {x.dtype}")


def rms_norm_forward_schedule(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    offset: float = 0.0,
    after_weight: bool = False,
    *,
    primitives: RowwisePrimitives,
    launch: Callable[[], str] | None = None,
) -> Schedule:
    """``_rms_norm_fwd_kernel``'s ``(rstd, y)`` (module docstring) for ``x [rows, n]``;
    ``launch``: returns the launch's TTGIR (for the device's row sum)."""
    from ojas_kernels.rms_norm import _blocks

    _check_rms(x)
    p = primitives
    rows, n = x.shape
    _, block_n, _ = _blocks(n)
    out_dtype = x.dtype if after_weight else torch.promote_types(x.dtype, weight.dtype)
    xs = torch.zeros(rows, block_n, dtype=F32)
    xs[:, :n] = x.detach().cpu().to(F32)
    w = torch.zeros(block_n, dtype=weight.dtype)
    w[:n] = weight.detach().cpu()
    (layout,) = _layouts(p, launch, (1,))
    ss = p.sum(xs * xs, 1, layout)
    mean = p.div(ss, torch.tensor(float(n)))
    var = mean + torch.tensor(eps, dtype=F32)
    sq = p.sqrt(var)
    r = p.rcp(sq)
    normed = xs * r[:, None]
    if after_weight:
        y = normed * (torch.tensor(offset, dtype=F32) + w.to(F32))[None, :]
    else:
        product = F32 if out_dtype != F64 else F64
        y = p.cast(normed, x.dtype).to(product) * w.to(product)[None, :]
    y = p.cast(y.to(F32), out_dtype) if out_dtype != F64 else y
    row = {"sum(x*x)": (ss, (0,)), "/ n": (mean, (0,)), "+ eps": (var, (0,)), "sqrt": (sq, (0,)), "r": (r, (0,))}
    return Schedule(
        {"rstd": r, "y": y[:, :n]},
        {
            "rstd": "r = 1 / sqrt(sum(x * x) / n + eps): the row sum, Triton's / or tl.sqrt",
            "y": "y = cast(x r * (offset + w)) or cast(cast(x r) * w): the products or the casts",
        },
        {"rstd": row, "y": {**row, "x * r": (normed[:, :n], (0, 1))}},
    )


def rms_norm_backward_schedule(
    grad_y: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    rstd: torch.Tensor,
    offset: float = 0.0,
    after_weight: bool = False,
    *,
    programs: int,
    primitives: RowwisePrimitives,
    launch: Callable[[], str] | None = None,
) -> Schedule:
    """``_rms_norm_bwd_kernel`` with ``programs`` programs, then ``_rms_norm_dw_kernel``:
    ``(dx, dw)`` (module docstring); ``launch``: returns the dX launch's TTGIR."""
    from ojas_kernels.rms_norm import _blocks

    _check_rms(x)
    p = primitives
    rows, n = x.shape
    block_m, block_n, _ = _blocks(n)
    xs, dys = (torch.zeros(-(-rows // block_m) * block_m, block_n, dtype=F32) for _ in range(2))
    xs[:rows, :n] = x.detach().cpu().to(F32)
    dys[:rows, :n] = grad_y.detach().cpu().reshape(rows, n).to(F32)
    rs = torch.zeros(xs.shape[0], dtype=F32)
    rs[:rows] = rstd.detach().cpu()
    w = torch.zeros(block_n, dtype=F32)
    w[:n] = weight.detach().cpu().to(F32)
    w = w + torch.tensor(offset, dtype=F32)
    col_layout, row_layout = _layouts(p, launch, (0, 1))
    parts = torch.zeros(programs, block_n, dtype=F32)
    dx = torch.zeros_like(xs)
    dots = torch.zeros(xs.shape[0], dtype=F32)
    coefs = torch.zeros(xs.shape[0], dtype=F32)
    n32 = torch.tensor(float(n))
    for pid in range(programs):
        dw = torch.zeros(block_n, dtype=F32)
        for block in range(pid, -(-rows // block_m), programs):
            sl = slice(block * block_m, (block + 1) * block_m)
            xb, dyb, r = xs[sl], dys[sl], rs[sl]
            normed = xb * r[:, None]
            if not after_weight:
                normed = p.cast(normed, x.dtype).to(F32)
            dw = dw + p.sum(dyb * normed, 0, col_layout)
            g = dyb * w[None, :]
            dot = p.sum(g * xb, 1, row_layout)
            coef = p.div(r * r * r, n32) * dot
            dx[sl] = r[:, None] * g - coef[:, None] * xb
            dots[sl], coefs[sl] = dot, coef
        parts[pid] = dw
    acc = torch.zeros(block_n, dtype=F32)
    for part in parts:
        acc = acc + part
    dx_steps = {"sum(g*x)": (dots[:rows], (0,)), "r^3 / n * dot": (coefs[:rows], (0,))}
    dw_steps = {f"dw_part[{pid}]": (parts[pid, :n], (0,)) for pid in range(programs)}
    return Schedule(
        {"dx": p.cast(dx[:rows, :n], x.dtype), "dw": p.cast(acc[:n], weight.dtype)},
        {
            "dx": "dx = cast(r g - (r r r / n * sum(g x)) x): the row sum, Triton's / or the products",
            "dw": "dw = cast(sum of the programs' partial rows sum_rows(dy * n)): a column sum or the cast",
        },
        {"dx": dx_steps, "dw": dw_steps},
    )


_K = float(np.float32(np.sqrt(2.0) * (2.0 / np.sqrt(np.pi)) * 0.5))
_C = float(np.float32(0.044715))
_C3 = float(np.float32(3.0) * np.float32(0.044715))


def _swiglu_check(activation: str, a: torch.Tensor) -> None:
    if activation not in ("silu", "gelu_tanh"):
        raise ValueError(f"activation must be 'silu' or 'gelu_tanh', got {activation!r}")
    if a.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"a must be float32, bfloat16 or float16, got {a.dtype}")


def _f32(*ts: torch.Tensor) -> list[torch.Tensor]:
    return [t.detach().cpu().reshape(-1).to(F32) for t in ts]


def swiglu_forward_schedule(
    a: torch.Tensor, b: torch.Tensor, activation: str = "silu", *, primitives: RowwisePrimitives
) -> Schedule:
    """``_swiglu_fwd_kernel``: ``h = rnd(rnd(act(a)) * b)`` (module docstring), flattened."""
    _swiglu_check(activation, a)
    p, dt = primitives, a.dtype
    af, bf = _f32(a, b)
    c = torch.tensor
    if activation == "silu":
        e = p.exp(-af)
        denom = c(1.0) + e
        act = p.div_rn(af, denom)
        steps = {"exp(-a)": e, "1 + exp(-a)": denom, "act = a / (1 + exp(-a))": act}
    else:
        u = p.fma((af * af) * af, c(_C), af)
        t = p.tanh(u * c(_K))
        act = (af * c(0.5)) * (c(1.0) + t)
        steps = {"fma(a^2 a, C, a)": u, "T = tanh(u K)": t, "act": act}
    h = _round(_round(act, dt) * bf, dt)
    return Schedule(
        {"h": h.to(dt)},
        {"h": f"h = rnd(rnd({activation}(a)) * b): the activation's steps or the roundings"},
        {"h": {k: (v, (0,)) for k, v in steps.items()}},
    )


def swiglu_backward_schedule(
    a: torch.Tensor, b: torch.Tensor, grad_h: torch.Tensor, activation: str = "silu", *, primitives: RowwisePrimitives
) -> Schedule:
    """``_swiglu_bwd_kernel``: ``da = rnd(g act'(a))`` with ``g = rnd(dh b)``, ``db = rnd(dh rnd(act(a)))``."""
    _swiglu_check(activation, a)
    p, dt = primitives, a.dtype
    af, bf, dh = _f32(a, b, grad_h)
    c = torch.tensor
    g = _round(dh * bf, dt)
    if activation == "silu":
        e = p.exp(-af)
        denom = c(1.0) + e
        s = p.div_rn(c(1.0), denom)
        act = p.div_rn(af, denom)
        inner = p.fma(af, c(1.0) - s, c(1.0))
        da = (g * s) * inner
        steps = {"exp(-a)": e, "1 + exp(-a)": denom, "s": s, "act": act, "fma(a, 1 - s, 1)": inner}
    else:
        a2 = af * af
        u = p.fma(a2 * af, c(_C), af)
        t = p.tanh(u * c(_K))
        left, right = af * c(0.5), c(1.0) + t
        act = left * right
        sech = p.fma(-t, t, c(1.0))
        slope = p.fma(a2, c(_C3), c(1.0)) * c(_K)
        prod = slope * (left * sech)
        deriv = p.fma(right, c(0.5), prod)
        da = deriv * g
        steps = {"fma(a^2 a, C, a)": u, "T": t, "act": act, "fma(-T, T, 1)": sech, "slope": slope, "deriv": deriv}
    steps["g = rnd(dh b)"] = g
    return Schedule(
        {"da": _round(da, dt).to(dt), "db": _round(dh * _round(act, dt), dt).to(dt)},
        {
            "da": f"da = rnd(rnd(dh b) * {activation}'(a)): the derivative's steps (fused products) or the roundings",
            "db": f"db = rnd(dh rnd({activation}(a))): the activation's steps or the roundings",
        },
        {out: {k: (v, (0,)) for k, v in steps.items()} for out in ("da", "db")},
    )


def rope_schedule(
    x_q: torch.Tensor,
    x_k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    backward: bool = False,
) -> Schedule:
    """``_rope_kernel``: ``y = rnd(rnd(x c) + rnd(rotate_half(x) s))`` per head, the backward with
    the sine row ``cat(-s[h:], -s[:h])``: IEEE operations without contraction, the same on the
    CPU and the device (no primitives)."""
    dt = x_q.dtype
    half = x_q.shape[-1] // 2
    cs, sn = (t.detach().cpu().to(F32)[:, None] for t in (cos, sin))  # [B or 1, 1, S, E]
    c1, c2 = cs[..., :half], cs[..., half:]
    s1, s2 = (-sn[..., half:], -sn[..., :half]) if backward else (sn[..., :half], sn[..., half:])
    outputs, steps = {}, {}
    for name, x in (("q_out", x_q), ("k_out", x_k)):
        xf = x.detach().cpu().to(F32)
        x1, x2 = xf[..., :half], xf[..., half:]
        pc1, ps1 = _round(x1 * c1, dt), _round(-x2 * s1, dt)
        pc2, ps2 = _round(x2 * c2, dt), _round(x1 * s2, dt)
        y = torch.cat([_round(pc1 + ps1, dt), _round(pc2 + ps2, dt)], -1)
        outputs[name] = y.to(dt)
        steps[name] = {
            "rnd(x c)": (torch.cat([pc1, pc2], -1).expand(xf.shape), (0, 1, 2, 3)),
            "rnd(rotate_half(x) s)": (torch.cat([ps1, ps2], -1).expand(xf.shape), (0, 1, 2, 3)),
        }
    op = "rnd(rnd(x c) + rnd(rotate_half(x) s'))" if backward else "rnd(rnd(x c) + rnd(rotate_half(x) s))"
    return Schedule(outputs, {"q_out": op, "k_out": op}, steps)


_RELU_BITS = {torch.float32: (torch.int32, 0x7FFFFFFF, 0x7F800000), torch.bfloat16: (torch.int16, 0x7FFF, 0x7F80),
              torch.float16: (torch.int16, 0x7FFF, 0x7C00)}  # fmt: skip


def relu_forward_schedule(h: torch.Tensor, keep_negative_zero: bool) -> Schedule:
    """``_relu_fwd_kernel``: ``r`` (flattened; ``+0`` where ``h < 0``, else ``h``'s bits; ``-0.0`` kept
    or made ``+0.0``) and the mask ``not (h <= 0)`` packed 8 to a byte (bit j of byte k: element 8 k + j),
    by the kernel's integer tests."""
    int_dtype, mag_mask, inf = _RELU_BITS[h.dtype]
    x = h.detach().cpu().contiguous().reshape(-1).view(int_dtype).to(torch.int64)
    mag = x & mag_mask
    nan = mag > inf
    neg = x < 0
    lt0 = neg & (mag != 0) & ~nan
    le0 = (neg & ~nan) | (x == 0)
    zeroed = lt0 if keep_negative_zero else neg & ~nan
    r = torch.where(zeroed, 0, x).to(int_dtype).view(h.dtype)
    bits = torch.zeros(-(-x.numel() // 8) * 8, dtype=torch.int64)
    bits[: x.numel()] = (~le0).to(torch.int64)
    packed = (bits.reshape(-1, 8) << torch.arange(8)).sum(1).to(torch.uint8)
    return Schedule(
        {"r": r, "packed": packed},
        {
            "r": "r = +0 where h < 0, h's bits elsewhere (-0.0 by KEEP_NEG_ZERO)",
            "packed": "the mask not (h <= 0), packed",
        },
        {"r": {"h < 0": (lt0, (0,))}, "packed": {}},
    )


def relu_backward_schedule(grad: torch.Tensor, packed: torch.Tensor) -> Schedule:
    """``_relu_bwd_kernel``: ``grad`` where the element's bit is set, ``+0`` elsewhere."""
    int_dtype = _RELU_BITS[grad.dtype][0]
    g = grad.detach().cpu().contiguous().reshape(-1).view(int_dtype)
    i = torch.arange(g.numel())
    bit = (packed.detach().cpu().to(torch.int64)[i // 8] >> (i % 8)) & 1
    dx = torch.where(bit != 0, g, torch.zeros_like(g)).view(grad.dtype)
    return Schedule(
        {"dx": dx}, {"dx": "dx = g where the bit is set, +0 elsewhere (flattened)"}, {"dx": {"bit": (bit, (0,))}}
    )


# ---------------------------------------------------------------------------
# The checks
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Mismatch:
    """The first output (in the order the schedule computes them) with an element whose bits differ
    between the kernel and the model: its ``index`` (the first such, row-major), ``operation`` (the
    step that computes it), both values, and ``steps``: the model's intermediates of that element."""

    kernel_name: str
    output: str
    index: tuple[int, ...]
    operation: str
    kernel: float
    model: float
    steps: list[tuple[str, float]]

    def __str__(self) -> str:
        lines = [
            f"{self.kernel_name}: first differing operation: {self.operation}",
            f"  {self.output}{list(self.index)}: kernel {self.kernel!r}, model {self.model!r}",
        ]
        lines += [f"  model {name} = {value!r}" for name, value in self.steps]
        return "\n".join(lines)


def compare(kernel_name: str, outputs: dict[str, torch.Tensor], model: Schedule) -> Mismatch | None:
    """None when every output of the kernel (``outputs``, by the model's names) has the model's
    bits, else the :class:`Mismatch` of the first differing output and element."""
    for name, want in model.outputs.items():
        got = outputs[name].detach().cpu()
        if got.shape != want.shape or got.dtype != want.dtype:
            raise ValueError(f"{name}: kernel {tuple(got.shape)} {got.dtype}, model {tuple(want.shape)} {want.dtype}")
        diff = _bits(got) != _bits(want) if got.is_floating_point() else got != want
        if not diff.any():
            continue
        index = tuple(int(i) for i in diff.nonzero()[0])
        steps = [
            (step, tensor[tuple(index[d] for d in dims)].item()) for step, (tensor, dims) in model.steps[name].items()
        ]
        return Mismatch(kernel_name, name, index, model.operations[name], got[index].item(), want[index].item(), steps)
    return None


def _ttgir(kernel, grid: tuple, args: tuple, options: dict) -> Callable[[], str]:
    """The TTGIR of ``kernel`` compiled for these launch arguments (Triton's own specialization)."""
    return lambda: kernel.warmup(*args, grid=grid, **options).asm["ttgir"]


def check_rms_norm_forward(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    offset: float = 0.0,
    after_weight: bool = False,
    *,
    primitives: RowwisePrimitives,
) -> Mismatch | None:
    """``rms_norm_forward`` against :func:`rms_norm_forward_schedule`."""
    from ojas_kernels import rms_norm as rn

    y, rstd = rn.rms_norm_forward(x, weight, eps, offset, after_weight)
    launch = None
    if primitives.needs_layout:
        rows, n = x.shape
        block_m, _, _, options = rn._fwd_plan(n, x.dtype, weight.dtype, after_weight)
        args = (x, weight, y, rstd, rows, n, x.stride(0), n, float(eps), float(offset))
        launch = _ttgir(rn._rms_norm_fwd_kernel, (-(-rows // block_m),), args, options)
    model = rms_norm_forward_schedule(x, weight, eps, offset, after_weight, primitives=primitives, launch=launch)
    return compare("rms_norm forward", {"rstd": rstd, "y": y}, model)


def check_rms_norm_backward(
    grad_y: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    rstd: torch.Tensor,
    offset: float = 0.0,
    after_weight: bool = False,
    *,
    primitives: RowwisePrimitives,
) -> Mismatch | None:
    """``rms_norm_backward`` against :func:`rms_norm_backward_schedule` (the kernel's number of
    programs, ``rms_norm._programs``)."""
    from ojas_kernels import rms_norm as rn

    dx, dw = rn.rms_norm_backward(grad_y, x, weight, rstd, offset, after_weight)
    rows, n = x.shape
    block_m, compute, options, _, _ = rn._bwd_plan(n, x.dtype, after_weight)
    programs = rn._programs(x.device, -(-rows // block_m))
    launch = None
    if primitives.needs_layout:
        part = torch.empty((programs, n), dtype=compute, device=x.device)
        args = (grad_y, x, weight, rstd, dx, part, rows, n, grad_y.stride(0), x.stride(0), n, float(offset))
        launch = _ttgir(rn._rms_norm_bwd_kernel, (programs,), args, options)
    model = rms_norm_backward_schedule(
        grad_y, x, weight, rstd, offset, after_weight, programs=programs, primitives=primitives, launch=launch
    )
    return compare("rms_norm backward", {"dx": dx, "dw": dw}, model)


def check_swiglu_forward(
    a: torch.Tensor, b: torch.Tensor, activation: str = "silu", *, primitives: RowwisePrimitives
) -> Mismatch | None:
    """``swiglu_forward`` against :func:`swiglu_forward_schedule`."""
    from ojas_kernels.swiglu import swiglu_forward

    h = swiglu_forward(a, b, activation=activation).reshape(-1)
    return compare(
        f"swiglu forward ({activation})", {"h": h}, swiglu_forward_schedule(a, b, activation, primitives=primitives)
    )


def check_swiglu_backward(
    a: torch.Tensor, b: torch.Tensor, grad_h: torch.Tensor, activation: str = "silu", *, primitives: RowwisePrimitives
) -> Mismatch | None:
    """``swiglu_backward`` against :func:`swiglu_backward_schedule`."""
    from ojas_kernels.swiglu import swiglu_backward

    da, db = swiglu_backward(a, b, grad_h, activation=activation)
    model = swiglu_backward_schedule(a, b, grad_h, activation, primitives=primitives)
    return compare(f"swiglu backward ({activation})", {"da": da.reshape(-1), "db": db.reshape(-1)}, model)


def check_rope(
    x_q: torch.Tensor,
    x_k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    backward: bool = False,
) -> Mismatch | None:
    """``rope_forward`` (or ``rope_backward`` of the gradients ``x_q``, ``x_k``) against :func:`rope_schedule`."""
    from ojas_kernels.rope import rope_backward, rope_forward

    q, k = (rope_backward if backward else rope_forward)(x_q, x_k, cos, sin)
    model = rope_schedule(x_q, x_k, cos, sin, backward)
    return compare("rope backward" if backward else "rope forward", {"q_out": q, "k_out": k}, model)


def check_relu_forward(h: torch.Tensor, keep_negative_zero: bool | None = None) -> Mismatch | None:
    """``relu_forward`` against :func:`relu_forward_schedule` (``keep_negative_zero`` defaults to
    ``relu.keeps_negative_zero`` of ``h``'s device, as the kernel's launch)."""
    from ojas_kernels.relu import keeps_negative_zero, relu_forward

    r, packed = relu_forward(h)
    keep = keeps_negative_zero(h.device) if keep_negative_zero is None else keep_negative_zero
    return compare("relu forward", {"r": r.reshape(-1), "packed": packed}, relu_forward_schedule(h, keep))


def check_relu_backward(grad: torch.Tensor, packed: torch.Tensor) -> Mismatch | None:
    """``relu_backward`` against :func:`relu_backward_schedule`."""
    from ojas_kernels.relu import relu_backward

    dx = relu_backward(grad, packed).reshape(-1)
    return compare("relu backward", {"dx": dx}, relu_backward_schedule(grad, packed))
