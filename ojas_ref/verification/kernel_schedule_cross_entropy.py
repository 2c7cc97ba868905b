"""An executable model of the linear cross-entropy kernels' schedules, and its bit-for-bit check.

The companion of :mod:`ojas_ref.verification.kernel_schedule` (attention forward),
:mod:`~ojas_ref.verification.kernel_schedule_backward` and
:mod:`~ojas_ref.verification.kernel_schedule_rowwise` for the three Triton kernels of
``ojas_kernels.linear_cross_entropy_kernels``. Each ``*_schedule`` function computes on the CPU,
with torch float32 operations in the kernel's order, what one launch of the kernel writes, from
the buffers it reads:

* ``_logits_kernel`` (:func:`logits_schedule`): per token tile and group of vocabulary tiles, the
  logit tile ``acc = dot(x, w^T, acc)`` over ``BLOCK_K`` slices of D (the primitive ``dot``; rows
  past ``n_rows`` and columns past ``v1`` read clamped, K past D zeros), ``r = rnd(acc + b)``
  (bias), capped ``z = rnd(c * rnd(1 - 2 / rnd(exp(min(rnd(2 r) / c, 80)) + 1)))`` (``_softcap``;
  Triton's ``/`` the primitive ``div``, ``2 / x`` the primitive ``two_over``); STATS: the online state
  ``m' = max(m, max z)``, ``l' = rnd(rnd(l * exp(m - m')) + sum exp(z - m'))``, ``s' = rnd(s +
  sum z)`` (``block_step``; ``Ojas.LinearCrossEntropy.ChunkedLse.chunked_lse_chunk``), the target
  logit ``sum(where(v = t, z, 0))``, the float32 logits (WRITE_Z); GRAD: ``_grad_tile``
  ``g = rnd(rnd(rnd(1 + rnd(rnd(2 lam) lse)) * exp(z - lse)) - rnd(eps inv_v))``, minus
  ``rnd(1 - eps)`` at the target, times ``rnd(1 - rnd(zc * zc))``, ``zc = z / c`` (cap), times the
  token weight (each product rounded), cast to G's dtype (``Ojas.LinearCrossEntropy.Gradient.grad_entry_is_derive``);
* ``_rows_kernel`` (:func:`rows_schedule`): per row, STREAM: the same online state over the row's
  logits in ``BLOCK_V`` blocks (bias and cap applied, ``m_ref`` 0 for rows past ``n_rows``), or the
  merge of the groups' states (read from ``_logits_kernel``'s PM, PL, PS, ZT) ``l' = rnd(rnd(l * exp(m - m')) + sum rnd(pl * exp(pm - m')))``,
  ``s' = rnd(s + sum ps)`` in ``BLOCK_P`` blocks (``merge_chunks_lse``); ``lse = rnd(m + log l)``,
  ``loss = rnd(rnd(rnd(rnd(1 - eps) rnd(lse - zt)) + rnd(eps rnd(lse - rnd(s inv_v)))) +
  rnd(rnd(lam lse) lse))`` (``token_loss``; STREAM's target logit ``zt = rnd(zt + sum(where(v = t,
  z, 0)))`` over the blocks); HAS_LSE: lse and the token weight read; GRAD: the
  row of G by ``_grad_tile``;
* ``_scale_kernel`` (:func:`scale_schedule`): ``x = cast(rnd(x * scale))`` unless scale is 1.

``_logits_kernel`` and ``_rows_kernel`` compile without FMA contraction (``enable_fp_fusion=False``
at their launches; ``_scale_kernel`` has one product and no sum, nothing to contract), so every
product and sum above rounds once on its own, as the model does; the only fused products are
those inside the float32 IEEE ``tl.dot`` on the device (Triton lowers it to ``fma.rn.f32``
chains, :func:`fma_dot`) and libdevice's own inside ``tl.log`` (run as they are by the device
primitive).

**The cuBLAS products are not modelled by this check.** The logits that the schedules compute with
torch (``linear_cross_entropy_products._mm_into``: the 3-product schedule's chunk logits in the
input dtype, the 4-product schedule's float32 logits with ``fwd_logits`` / ``bwd_logits``
"cublas") and the gradients' products (grad_input, grad_weight, grad_bias) are taken as they were
computed on the same device: :func:`check_linear_cross_entropy` records every launch of the three
kernels (their arguments and the buffers before and after), and checks each against its model on
the buffers that launch read, so a launch whose logits came from cuBLAS is checked on those
logits. The Triton dots of ``_logits_kernel`` are modelled (the primitive ``dot``).

The operations whose rounding is a parameter are :class:`CrossEntropyPrimitives`. Two sets:

* :func:`interpreter_primitives`: what ``TRITON_INTERPRET=1`` runs: ``tl.dot``
  ``np.matmul(a, b, dtype=float32) + acc`` on the loaded (contiguous) tiles, upcast to float32 by
  ``attention_tiles._dot``; ``tl.sum`` ``np.sum(x, axis=1)`` (numpy's pairwise order);
  ``tl.exp`` / ``tl.log`` ``np.exp`` / ``np.log``; Triton's ``/`` ``np.divide`` (IEEE); the float32
  -> bfloat16 cast the interpreter's (truncation: ``kernel_schedule._interpreter_cast``);
* :func:`device_primitives`: the CUDA device's: 16-bit dots by the ``ojas verify-device``
  record's tensor-core model (``kernel_schedule.device_primitives``' "tl.dot bfloat16"), float32
  IEEE dots by :func:`fma_dot` (the ``fma.rn.f32`` chain over k of Triton's FMA lowering; TF32
  dots are refused); ``tl.exp``, ``tl.log``, Triton's ``/`` (``div.full.f32``, approximate) and
  ``2.0 / x`` (its constant numerator as ``_cap_tanh`` has it) run elementwise by a small Triton
  kernel compiled without contraction (:func:`_op_kernel`); ``tl.sum`` in the order the imported
  Triton (3.6 or 3.9: ``kernel_schedule.in_thread_order``) lowers it on the launch's layout, read
  from the launch's TTGIR: ``kernel_schedule.wgmma_row_sum`` on the Hopper wgmma accumulator
  (``_logits_kernel``'s 16-bit tiles; Triton 3.9's tree at N = 128 read from its sm_90 PTX by the
  tests, Triton 3.6's order at N = 128 assumed to be its order at N = 64, which a fixture pins),
  ``kernel_schedule_rowwise.blocked_sum`` on a blocked layout (``_rows_kernel``'s loaded blocks,
  the float32 FMA dot's accumulator); round-to-nearest-even casts.

:func:`check_linear_cross_entropy` returns ``None`` when every launch's outputs equal its model's
bit for bit, else a :class:`CrossEntropyMismatch`: the first launch (in the order they ran) with a
differing output, the kernel and its variant, and the first differing output in the order the
launch computes them (``_logits_kernel`` STATS: z, then zt, pm, pl, ps; ``_rows_kernel``: lse,
loss, g), its element, the operation, both values and the model's intermediates of that element
(the row's online state after every block). The kernels have no trace: within one output the
check does not separate its steps (a differing ``pl`` names ``exp`` or the row sum, not which).

float16 (its G scaled by ``g_scale``) is checked under the interpreter only; on the device its
dots take the record's bfloat16 model, as ``kernel_schedule.device_primitives`` does. Not
covered: ``tl.maximum`` / ``tl.max`` of a +0 and a -0 (the device's ``max.f32`` and numpy differ
there; exact otherwise); ``_logits_kernel`` dots in single-pass TF32 (refused on the device);
reduction layouts other than the Hopper wgmma accumulator with the warps along the rows and
blocked layouts (refused); changes of the schedule that leave every output's bits unchanged (the
outputs are compared, not the steps: e.g. a model streaming the rows in blocks of 32 instead of
the kernel's 16 gave the same lse on the interpreter tests' rows).
The model is an executable statement of the schedule, not a proof.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
from typing import Callable, Iterator, Union

import numpy as np
import torch

from ojas_ref.verification.kernel_schedule import (
    F32,
    _ieee_div,
    _interpreter_cast,
    _interpreter_dot,
    _np,
    wgmma_row_sum,
)
from ojas_ref.verification.kernel_schedule_rowwise import Blocked, Mismatch, Schedule, blocked_sum, compare, fma32

__all__ = [
    "CrossEntropyPrimitives",
    "Launch",
    "CrossEntropyMismatch",
    "interpreter_primitives",
    "device_primitives",
    "fma_dot",
    "reduce_layout",
    "record_launches",
    "logits_schedule",
    "rows_schedule",
    "scale_schedule",
    "launch_schedule",
    "check_launches",
    "check_linear_cross_entropy",
]

#: a reduction's layout: a blocked one, or ``"wgmma"`` (the Hopper wgmma accumulator, warps along the rows)
Layout = Union[Blocked, str]


@dataclasses.dataclass(frozen=True)
class CrossEntropyPrimitives:
    """The operations of the schedules whose rounding is a parameter (float32 tensors in and out):
    ``dot(a, b, acc)`` = ``acc + a @ b`` (one ``tl.dot`` of ``_logits_kernel``: a [BLOCK_M,
    BLOCK_K], b [BLOCK_K, BLOCK_N] holding the operands' values), ``exp``, ``log`` (elementwise),
    ``div`` (Triton's ``/``), ``two_over`` (``2.0 / x``), ``sum(x, layout)`` (``tl.sum(x, 1)`` of a
    [rows, cols] tile; ``layout`` the reduction's, or None) and ``cast(x, dtype)`` (float32 to
    the storage dtype); ``needs_layout``: ``sum`` needs the launch's layout."""

    name: str
    dot: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
    exp: Callable[[torch.Tensor], torch.Tensor]
    log: Callable[[torch.Tensor], torch.Tensor]
    div: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    two_over: Callable[[torch.Tensor], torch.Tensor]
    sum: Callable[[torch.Tensor, Layout | None], torch.Tensor]
    cast: Callable[[torch.Tensor, torch.dtype], torch.Tensor]
    needs_layout: bool = False


def interpreter_primitives() -> CrossEntropyPrimitives:
    """The primitives of Triton's CPU interpreter (module docstring): the numpy calls it makes."""
    return CrossEntropyPrimitives(
        name="interpreter",
        dot=lambda a, b, acc: _interpreter_dot(a.contiguous(), b.contiguous(), acc),
        exp=lambda x: torch.from_numpy(np.exp(_np(x))),
        log=lambda x: torch.from_numpy(np.log(_np(x))),
        div=_ieee_div,
        two_over=lambda x: _ieee_div(torch.tensor(2.0), x),
        sum=lambda x, layout: torch.from_numpy(np.asarray(np.sum(_np(x), axis=1))),
        cast=_interpreter_cast,
    )


def fma_dot(a: torch.Tensor, b: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
    """``acc + a @ b`` of float32 tiles as Triton lowers an IEEE float32 ``tl.dot`` (no tensor
    cores): per element a chain of ``fma.rn.f32`` over k in increasing order from ``acc``
    (``kernel_schedule_rowwise.fma32``: one rounding each)."""
    acc = acc.to(F32)
    for k in range(a.shape[1]):
        acc = fma32(a[:, k, None].to(F32), b[None, k, :].to(F32), acc)
    return acc


@functools.lru_cache(maxsize=None)
def _op_kernel():
    """``Z = op(X, Y)`` elementwise (float32), the kernels' own operations on the device:
    ``tl.exp``, ``tl.log``, Triton's ``/`` and ``2.0 / x`` (the constant numerator of
    ``_cap_tanh``)."""
    import triton
    import triton.language as tl

    @triton.jit
    def kernel(X, Y, Z, n, OP: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        ok = offs < n
        x = tl.load(X + offs, mask=ok, other=1.0)
        y = tl.load(Y + offs, mask=ok, other=1.0)
        if OP == "exp":
            z = tl.exp(x)
        elif OP == "log":
            z = tl.log(x)
        elif OP == "div":
            z = x / y
        else:
            z = 2.0 / x
        tl.store(Z + offs, z, mask=ok)

    return kernel


def _device_op(op: str) -> Callable[..., torch.Tensor]:
    """``op`` on the CUDA device, elementwise, compiled without FMA contraction (as the kernels)."""

    def run(x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        x, y = torch.broadcast_tensors(x, x if y is None else y)
        shape = x.shape
        x, y = (t.to(F32).contiguous().reshape(-1).cuda() for t in (x, y))
        z = torch.empty_like(x)
        if x.numel():
            grid = (-(-x.numel() // 1024),)
            _op_kernel()[grid](x, y, z, x.numel(), OP=op, BLOCK=1024, enable_fp_fusion=False)
        return z.cpu().reshape(shape)

    return run


def _device_sum(x: torch.Tensor, layout: Layout | None) -> torch.Tensor:
    """``tl.sum(x, 1)`` on the device, in the imported Triton's order on ``layout``."""
    if layout is None:
        raise ValueError("the device's tl.sum needs the reduction's layout (reduce_layout of the launch's TTGIR)")
    if layout == "wgmma":
        return wgmma_row_sum(x)
    return blocked_sum(x, 1, layout)


def device_primitives(dtype: torch.dtype, folder: str | None = None) -> CrossEntropyPrimitives:
    """The primitives of the kernels on this CUDA device for inputs of ``dtype`` (module
    docstring): 16-bit dots from the ``ojas verify-device`` record of this device and these
    versions (``folder`` as ``device_premises.checked_premises``: ``PremisesNotChecked`` without a
    record), float32 dots :func:`fma_dot` (``ValueError`` when torch's float32 matmul setting lets
    ``_logits_kernel`` run TF32 dots); ``RuntimeError`` without a CUDA device."""
    from ojas_kernels.attention_args import _dot_precision
    from ojas_ref.verification import kernel_schedule as ks

    if not torch.cuda.is_available():
        raise RuntimeError("device_primitives needs a CUDA device (its exp, log and / run there)")
    if dtype in (torch.bfloat16, torch.float16):
        dot = ks.device_primitives(dtype, folder).dot
    elif dtype == F32:
        if _dot_precision(dtype) != "ieee":
            raise ValueError("float32 _logits_kernel with TF32 dots (matmul precision not 'highest'): not modelled")
        dot = fma_dot
    else:
        raise ValueError(f"dtype must be float32, bfloat16 or float16, got {dtype}")
    return CrossEntropyPrimitives(
        name=f"device ({dtype})",
        dot=dot,
        exp=_device_op("exp"),
        log=_device_op("log"),
        div=_device_op("div"),
        two_over=_device_op("two_over"),
        sum=_device_sum,
        cast=lambda x, d: x.to(d),
        needs_layout=True,
    )


# ---------------------------------------------------------------------------
# The launches
# ---------------------------------------------------------------------------

_OPTIONS = ("num_warps", "num_stages", "enable_fp_fusion")


@dataclasses.dataclass(frozen=True)
class Launch:
    """One launch of a kernel: its name, ``grid``, its arguments by name (``args``: tensors as
    flat CPU copies of their contents before the launch, other values as passed), the tensors'
    flat contents after it (``after``), the launch options, and the TTGIR it compiled to (when
    recorded with ``ttgir=True``)."""

    kernel: str
    grid: tuple[int, ...]
    args: dict
    after: dict[str, torch.Tensor]
    options: dict
    ttgir: str | None = None


def _flat(t: torch.Tensor, name: str) -> torch.Tensor:
    if not t.is_contiguous():
        raise ValueError(f"{name}: a non-contiguous buffer is not modelled (the kernels index by their own strides)")
    return t.detach().reshape(-1).cpu().clone()


@contextlib.contextmanager
def record_launches(ttgir: bool = False) -> Iterator[list[Launch]]:
    """Within the block, every launch of ``_logits_kernel``, ``_rows_kernel`` and ``_scale_kernel``
    (through ``linear_cross_entropy_kernels.fast``) runs as usual and is appended to the yielded
    list as a :class:`Launch`; ``ttgir``: also compile the launch (``warmup``) for its TTGIR."""
    from ojas_kernels import linear_cross_entropy_kernels as lk

    real = lk.fast
    launches: list[Launch] = []

    class Recorder:
        def __init__(self, kernel):
            self.kernel, self.launcher = kernel, real(kernel)

        def __getitem__(self, grid):
            return lambda *args, **kwargs: self._run(grid, args, kwargs)

        def _run(self, grid, args, kwargs):
            kernel = self.kernel
            names = kernel.arg_names
            bound = dict(zip(names, args))
            bound.update({k: v for k, v in kwargs.items() if k not in _OPTIONS})
            options = {k: v for k, v in kwargs.items() if k in _OPTIONS}
            tensors = {n: v for n, v in bound.items() if isinstance(v, torch.Tensor)}
            before = {n: _flat(v, n) for n, v in tensors.items()}
            asm = kernel.warmup(*args, grid=grid, **kwargs).asm["ttgir"] if ttgir else None
            self.launcher[grid](*args, **kwargs)
            after = {n: _flat(v, n) for n, v in tensors.items()}
            launches.append(Launch(kernel.__name__, tuple(grid), {**bound, **before}, after, options, asm))

    lk.fast = Recorder
    try:
        yield launches
    finally:
        lk.fast = real


_REDUCE = re.compile(
    r'"tt\.reduce"\(%[\w.]+\) <\{axis = (\d) : i32\}>.*?\}\) : \(tensor<(\d+)x(\d+)xf32, #(\w+)>\)', re.S
)
_BLOCKED = re.compile(
    r"^#(\w+) = #ttg\.blocked<\{sizePerThread = \[(\d+), (\d+)\], threadsPerWarp = \[(\d+), (\d+)\], "
    r"warpsPerCTA = \[(\d+), (\d+)\]",
    re.M,
)
_MMA = re.compile(
    r"^#(\w+) = #ttg\.nvidia_mma<\{versionMajor = (\d+), .*?warpsPerCTA = \[(\d+), (\d+)\], "
    r"instrShape = \[\d+, (\d+), \d+\]",
    re.M,
)


def reduce_layout(ttgir: str | None, cols: int) -> Layout:
    """The layout of every 2-D float32 ``tt.reduce`` over tiles of ``cols`` columns in a launch's
    TTGIR (axis 1, one layout for all: ``ValueError`` otherwise): a :class:`Blocked`, or
    ``"wgmma"`` for the Hopper wgmma accumulator (version 3) with the warps along the rows and the
    instruction's N the tile's (``wgmma_row_sum``'s layout); other layouts are refused, and so is
    a launch recorded without its TTGIR (None)."""
    if ttgir is None:
        raise ValueError("the device's row sums need the launch's TTGIR: record it with record_launches(ttgir=True)")
    found = {(int(m.group(1)), m.group(4)) for m in _REDUCE.finditer(ttgir) if int(m.group(3)) == cols}
    if len(found) != 1:
        raise ValueError(f"expected one reduction layout over tiles of {cols} columns, found {sorted(found)}")
    ((axis, name),) = found
    if axis != 1:
        raise ValueError(f"a reduction over axis {axis} is not modelled")
    blocked = {m.group(1): m for m in _BLOCKED.finditer(ttgir)}
    if name in blocked:
        g = [int(x) for x in blocked[name].groups()[1:]]
        return Blocked((g[0], g[1]), (g[2], g[3]), (g[4], g[5]))
    mma = {m.group(1): m for m in _MMA.finditer(ttgir)}
    if name in mma:
        version, warps_m, warps_n, n = (int(x) for x in mma[name].groups()[1:])
        if version == 3 and warps_n == 1 and n == cols:
            return "wgmma"
    raise ValueError(f"the reduction layout #{name} is not modelled (blocked, or wgmma with the warps along the rows)")


# ---------------------------------------------------------------------------
# The shared steps (the kernels' helpers)
# ---------------------------------------------------------------------------


def _f(x: float) -> torch.Tensor:
    """A float kernel argument or constant: float32."""
    return torch.tensor(x, dtype=F32)


def _logits_of(p: CrossEntropyPrimitives, r, bias, cap, softcap, steps: dict | None = None) -> torch.Tensor:
    """``_logits_of``: ``r + b`` (``bias`` [cols] float32 or None), then ``_softcap`` when ``cap``;
    ``steps`` (when given) collects the intermediates."""
    if bias is not None:
        r = r + bias[None, :]
    if cap:
        c = _f(softcap)
        arg = torch.minimum(p.div(_f(2.0) * r, c), _f(80.0))
        e = p.exp(arg)
        t = _f(1.0) - p.two_over(e + _f(1.0))
        if steps is not None:
            steps.update({"raw logit r": r, "exp(min(2 r / c, 80))": e, "tanh(r / c)": t})
        r = c * t
    return r


def _grad_tile(p: CrossEntropyPrimitives, z, lse, is_target, w, eps, lam, inv_v, softcap, cap, steps=None):
    """``_grad_tile``: z [M, N], lse and w [M]."""
    e = p.exp(z - lse[:, None])
    g = (_f(1.0) + _f(2.0) * _f(lam) * lse)[:, None] * e - _f(eps) * _f(inv_v)
    g = torch.where(is_target, g - (_f(1.0) - _f(eps)), g)
    if steps is not None:
        steps["exp(z - lse)"] = e
    if cap:
        zc = p.div(z, _f(softcap))
        chain = _f(1.0) - zc * zc
        g = g * chain
        if steps is not None:
            steps["1 - (z / c)^2"] = chain
    return g * w[:, None]


def _gather(flat: torch.Tensor, offsets: torch.Tensor, mask: torch.Tensor | None = None, other: float = 0.0):
    """``tl.load(ptr + offsets, mask, other)`` from a flat buffer."""
    if mask is None:
        return flat[offsets]
    safe = torch.where(mask, offsets, torch.zeros_like(offsets))
    return torch.where(mask, flat[safe], torch.tensor(other, dtype=flat.dtype))


# ---------------------------------------------------------------------------
# The schedules
# ---------------------------------------------------------------------------


def _ops(*names: str, **texts: str) -> dict[str, str]:
    return {n: texts[n] for n in names}


_LOGITS_OPERATIONS = {
    "z": "the logit tile: the dots over BLOCK_K slices, the bias or the cap (_logits_of)",
    "zt": "the target logit: sum(where(v = t, z, 0)) of the tile holding it",
    "pm": "the group's max m = max(m, max z): the logits",
    "pl": "the group's sum l = l * exp(m - m') + sum(exp(z - m')): exp or the row sum",
    "ps": "the group's logit sum s = s + sum(z): the row sum",
    "g": "G = _grad_tile(z): exp(z - lse), the products, the cap's chain factor, the weight or the cast",
}


def logits_schedule(launch: Launch, primitives: CrossEntropyPrimitives) -> Schedule:
    """What one ``_logits_kernel`` launch writes (module docstring): STATS ``z`` (WRITE_Z; whole
    tiles, [round_up(n_rows, BLOCK_M), n_tiles * BLOCK_N]), ``zt`` [n_rows], ``pm``, ``pl``, ``ps``
    (NEED_SUM) [n_rows, n_groups]; GRAD ``g`` (whole tiles)."""
    a, p = launch.args, primitives
    bm, bn, bk = a["BLOCK_M"], a["BLOCK_N"], a["BLOCK_K"]
    n_rows, v0, v1, d = a["n_rows"], a["v0"], a["v1"], a["D"]
    n_groups, per_group = a["n_groups"], a["tiles_per_group"]
    stats, cap = bool(a["STATS"]), bool(a["HAS_CAP"])
    layout = reduce_layout(launch.ttgir, bn) if p.needs_layout and stats else None  # GRAD has no reduction
    n_tiles, num_m = -(-(v1 - v0) // bn), -(-n_rows // bm)
    d_pad = -(-d // bk) * bk
    rows_pad, cols_pad = num_m * bm, n_tiles * bn
    arange_m, arange_n, arange_k = torch.arange(bm), torch.arange(bn), torch.arange(d_pad)
    k_ok = arange_k < d
    k_safe = torch.minimum(arange_k, torch.tensor(d - 1))
    bias = a["BIAS"].to(F32) if a["HAS_BIAS"] else None
    if stats:
        pm, pl, ps = (torch.zeros(n_rows, n_groups, dtype=F32) for _ in range(3))
        zt = torch.zeros(n_rows, dtype=F32)
        z_out = torch.zeros(rows_pad, cols_pad, dtype=F32)
        states: dict[str, torch.Tensor] = {}  # "m after tile j of the group" -> [rows_pad, n_groups]
    else:
        g_out = torch.zeros(rows_pad, cols_pad, dtype=a["G"].dtype)
    trail: dict[str, torch.Tensor] = {}
    for pid_m in range(num_m):
        m0 = pid_m * bm
        offs_m = m0 + arange_m
        row_ok = offs_m < n_rows
        rows_c = torch.clamp(offs_m, max=n_rows - 1)
        x = _gather(a["X"], rows_c[:, None] * a["stride_x"] + k_safe[None, :], k_ok[None, :].expand(bm, -1)).to(F32)
        tok_c = a["row0"] + rows_c
        tgt = a["TGT"][tok_c].to(torch.int64)
        if not stats:
            lse = a["LSE"][tok_c]
            w = a["RW"][tok_c * a["stride_rw"]]
        for pid_g in range(n_groups):
            m_i = torch.full((bm,), float("-inf"), dtype=F32)
            l_i, s_i = torch.zeros(bm, dtype=F32), torch.zeros(bm, dtype=F32)
            for j, t in enumerate(range(pid_g * per_group, min(pid_g * per_group + per_group, n_tiles))):
                n0 = v0 + t * bn
                cols = n0 + arange_n
                col_ok = cols < v1
                cols_c = torch.clamp(cols, max=v1 - 1)
                wt = _gather(a["W"], cols_c[None, :] * a["stride_w"] + k_safe[:, None], k_ok[:, None].expand(-1, bn))
                wt = wt.to(F32)
                acc = torch.zeros(bm, bn, dtype=F32)
                for k in range(0, d_pad, bk):
                    acc = p.dot(x[:, k : k + bk].contiguous(), wt[k : k + bk].contiguous(), acc)
                b = None if bias is None else torch.where(col_ok, bias[torch.clamp(cols, max=bias.numel() - 1)], 0.0)
                tile_steps = {"dots (acc)": acc}
                z = _logits_of(p, acc, b, cap, a["softcap"], tile_steps)
                tile_steps["logit z"] = z
                is_target = cols[None, :] == tgt[:, None]
                tile = (slice(m0, m0 + bm), slice(t * bn, t * bn + bn))
                if stats:
                    zm = torch.where(col_ok[None, :], z, float("-inf"))
                    m_new = torch.maximum(m_i, zm.amax(1))
                    l_i = l_i * p.exp(m_i - m_new) + p.sum(p.exp(zm - m_new[:, None]), layout)
                    m_i = m_new
                    if a["NEED_SUM"]:
                        s_i = s_i + p.sum(torch.where(col_ok[None, :], z, 0.0), layout)
                    has_t = (tgt >= n0) & (tgt < n0 + bn) & (tgt < v1)
                    target = p.sum(torch.where(is_target, z, 0.0), layout)
                    keep = row_ok & has_t
                    zt[offs_m[keep]] = target[keep]
                    z_out[tile] = z
                    for name, value in (("m", m_i), ("l", l_i), ("s", s_i)):
                        key = f"{name} after tile {j} of the group"
                        states.setdefault(key, torch.full((rows_pad, n_groups), float("nan")))[m0 : m0 + bm, pid_g] = (
                            value
                        )
                else:
                    g = _grad_tile(
                        p, z, lse, is_target, w, a["eps"], a["lam"], a["inv_v"], a["softcap"], cap, tile_steps
                    )
                    g_out[tile] = p.cast(g, g_out.dtype)
                for name, value in tile_steps.items():
                    trail.setdefault(name, torch.zeros(rows_pad, cols_pad))[tile] = value
            if stats:
                pm[offs_m[row_ok], pid_g] = m_i[row_ok]
                pl[offs_m[row_ok], pid_g] = l_i[row_ok]
                ps[offs_m[row_ok], pid_g] = s_i[row_ok]
    tile_trail = {name: (value, (0, 1)) for name, value in trail.items()}
    if not stats:
        return Schedule({"g": g_out}, _ops("g", **_LOGITS_OPERATIONS), {"g": tile_trail})
    names = (("z",) if a["WRITE_Z"] else ()) + ("zt", "pm", "pl") + (("ps",) if a["NEED_SUM"] else ())
    values = {"z": z_out, "zt": zt, "pm": pm, "pl": pl, "ps": ps}
    group_steps = {k: (v, (0, 1)) for k, v in states.items() if a["NEED_SUM"] or not k.startswith("s ")}
    steps = {n: group_steps if n in ("pm", "pl", "ps") else tile_trail if n == "z" else {} for n in names}
    return Schedule({n: values[n] for n in names}, _ops(*names, **_LOGITS_OPERATIONS), steps)


_ROWS_OPERATIONS = {
    "lse": "lse = m + log(l): the row's online max and sum (exp, the row sums; the merge of the groups' "
    "states without STREAM; bias and cap with STREAM) or log",
    "loss": "loss = (1 - eps)(lse - zt) + eps (lse - s / V) + lam lse^2: the target logit, the logit sum "
    "or the products",
    "g": "G = _grad_tile(z): exp(z - lse), the products, the cap's chain factor, the weight or the cast",
}


def rows_schedule(launch: Launch, primitives: CrossEntropyPrimitives) -> Schedule:
    """What one ``_rows_kernel`` launch writes (module docstring): ``lse`` and ``loss`` [n_rows]
    (without HAS_LSE), ``g`` [n_rows, V] (GRAD); the steps: each row's state after every block."""
    a, p = launch.args, primitives
    br, bv, bp = a["BLOCK_R"], a["BLOCK_V"], a["BLOCK_P"]
    n_rows, n_v, v0 = a["n_rows"], a["V"], a["v0"]
    stream, cap = bool(a["STREAM"]), bool(a["HAS_CAP"])
    layout = None  # the reductions: over the Z blocks (STREAM) or the groups' states; none with HAS_LSE
    if p.needs_layout and not a["HAS_LSE"]:
        layout = reduce_layout(launch.ttgir, bv if stream else bp)
    rows = -(-n_rows // br) * br  # every program's rows, at once: a row's values depend on that row only
    offs = torch.arange(rows)
    ok = offs < n_rows
    tok = a["row0"] + offs
    tgt = torch.where(ok, a["TGT"][torch.where(ok, tok, 0)].to(torch.int64), -1) - v0
    zrow = offs * a["stride_z"]
    bias = a["BIAS"].to(F32)[v0:] if a["HAS_BIAS"] else None

    def logits(c0: int, steps: dict | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        cols = c0 + torch.arange(bv)
        col_ok = cols < n_v
        mask = ok[:, None] & col_ok[None, :]
        z = _gather(a["Z"], zrow[:, None] + cols[None, :], mask).to(F32)
        if stream:
            b = None if bias is None else torch.where(col_ok, bias[torch.clamp(cols, max=bias.numel() - 1)], 0.0)
            z = _logits_of(p, z, b, cap, a["softcap"], steps)
        return cols, mask, z

    steps: dict[str, tuple[torch.Tensor, tuple[int, ...]]] = {}
    if a["HAS_LSE"]:
        lse = torch.where(ok, a["LSE"][torch.where(ok, tok, 0)], 0.0)
        weight = torch.where(ok, a["RW"][torch.where(ok, tok, 0) * a["stride_rw"]], 0.0) * _f(a["g_scale"])
    else:
        m = torch.full((rows,), float("-inf"), dtype=F32)
        l, s = torch.zeros(rows, dtype=F32), torch.zeros(rows, dtype=F32)  # noqa: E741
        if stream:
            zt = torch.zeros(rows, dtype=F32)
            blocks = range(0, n_v, bv)
        else:
            blocks = range(0, a["n_groups"], bp)
            prow = offs * a["stride_p"]
        for c0 in blocks:
            if stream:
                cols, mask, z = logits(c0)
                zm = torch.where(mask, z, float("-inf"))
                m_new = torch.maximum(m, zm.amax(1))
                m_ref = torch.where(m_new == float("-inf"), 0.0, m_new)
                l = l * p.exp(m - m_ref) + p.sum(p.exp(zm - m_ref[:, None]), layout)  # noqa: E741
                m = m_new
                if a["NEED_SUM"]:
                    s = s + p.sum(torch.where(mask, z, 0.0), layout)
                zt = zt + p.sum(torch.where(cols[None, :] == tgt[:, None], z, 0.0), layout)
                steps[f"zt after block {c0}"] = (zt, (0,))
            else:
                cols = c0 + torch.arange(bp)
                mask = ok[:, None] & (cols[None, :] < a["n_groups"])
                at = prow[:, None] + cols[None, :]
                pm = _gather(a["PM"], at, mask, float("-inf"))
                pl = _gather(a["PL"], at, mask)
                m_new = torch.maximum(m, pm.amax(1))
                m_ref = torch.where(m_new == float("-inf"), 0.0, m_new)
                l = l * p.exp(m - m_ref) + p.sum(pl * p.exp(pm - m_ref[:, None]), layout)  # noqa: E741
                m = m_new
                if a["NEED_SUM"]:
                    s = s + p.sum(_gather(a["PS"], at, mask), layout)
            steps[f"m after block {c0}"] = (m, (0,))
            steps[f"l after block {c0}"] = (l, (0,))
            if a["NEED_SUM"]:
                steps[f"s after block {c0}"] = (s, (0,))
        if not stream:
            zt = torch.where(ok, a["ZT"][torch.where(ok, tok, 0)], 0.0)
            steps["zt"] = (zt, (0,))
        lse = torch.where(ok, m + p.log(torch.where(ok, l, 1.0)), 0.0)
        eps, lam = _f(a["eps"]), _f(a["lam"])
        one = _f(1.0)
        loss = (one - eps) * (lse - zt) + eps * (lse - s * _f(a["inv_v"])) + lam * lse * lse
        weight = torch.full((rows,), 1.0, dtype=F32) * _f(a["g_scale"])
    steps["lse"] = (lse, (0,))
    out: dict[str, torch.Tensor] = {}
    if not a["HAS_LSE"]:
        out = {"lse": lse[:n_rows], "loss": loss[:n_rows]}
    names = list(out)
    schedule_steps = {n: dict(steps) for n in names}
    if a["GRAD"]:
        g_dtype = a["G"].dtype
        g = torch.zeros(rows, -(-n_v // bv) * bv, dtype=g_dtype)
        trail: dict[str, torch.Tensor] = {}
        for c0 in range(0, n_v, bv):
            tile_steps: dict = {}
            cols, _, z = logits(c0, tile_steps)
            is_target = cols[None, :] == tgt[:, None]
            tile_steps["logit z"] = z
            gt = _grad_tile(p, z, lse, is_target, weight, a["eps"], a["lam"], a["inv_v"], a["softcap"], cap, tile_steps)
            g[:, c0 : c0 + bv] = p.cast(gt, g_dtype)
            for name, value in tile_steps.items():
                trail.setdefault(name, torch.zeros(rows, g.shape[1]))[:, c0 : c0 + bv] = value
        out["g"] = g[:n_rows, :n_v]
        names.append("g")
        schedule_steps["g"] = {**steps, **{n: (v, (0, 1)) for n, v in trail.items()}}
    return Schedule(out, _ops(*names, **_ROWS_OPERATIONS), schedule_steps)


def scale_schedule(launch: Launch, primitives: CrossEntropyPrimitives) -> Schedule:
    """What one ``_scale_kernel`` launch writes: ``x[:n] = cast(rnd(x * scale))``, nothing when
    the factor (``SCALE[0]`` in float32) is 1."""
    a = launch.args
    x, n = a["X"], a["n"]
    scale = a["SCALE"][0].to(F32)
    if scale.item() == 1.0:
        return Schedule({"x": x[:n]}, {"x": "nothing written: the factor is 1"}, {"x": {}})
    product = x[:n].to(F32) * scale
    return Schedule(
        {"x": primitives.cast(product, x.dtype)},
        {"x": "x = cast(x * scale): the product or the cast"},
        {"x": {"x * scale": (product, (0,))}},
    )


_SCHEDULES = {"_logits_kernel": logits_schedule, "_rows_kernel": rows_schedule, "_scale_kernel": scale_schedule}


def launch_schedule(launch: Launch, primitives: CrossEntropyPrimitives) -> Schedule:
    """The model of ``launch`` (by its kernel)."""
    if launch.kernel not in _SCHEDULES:
        raise ValueError(f"no model of the kernel {launch.kernel!r} (models: {sorted(_SCHEDULES)})")
    return _SCHEDULES[launch.kernel](launch, primitives)


# ---------------------------------------------------------------------------
# The check
# ---------------------------------------------------------------------------


def _written(launch: Launch, model: Schedule) -> dict[str, torch.Tensor]:
    """The kernel's values of the model's outputs, read from the launch's buffers after it."""
    a, after, out = launch.args, launch.after, {}
    if launch.kernel == "_scale_kernel":
        return {"x": after["X"][: a["n"]]}
    if launch.kernel == "_rows_kernel":
        n_rows, row0 = a["n_rows"], a["row0"]
        if "lse" in model.outputs:
            out["lse"] = after["LSE"][row0 : row0 + n_rows]
            out["loss"] = after["LOSS"][row0 : row0 + n_rows]
        if "g" in model.outputs:
            at = torch.arange(n_rows)[:, None] * a["stride_z"] + torch.arange(a["V"])[None, :]
            out["g"] = after["G"][at]
        return out
    rows, cols = (model.outputs["z"] if "z" in model.outputs else model.outputs.get("g", torch.zeros(0, 0))).shape
    tile_at = torch.arange(rows)[:, None] * a["stride_z"] + torch.arange(cols)[None, :]
    group_at = torch.arange(a["n_rows"])[:, None] * a["stride_p"] + torch.arange(a["n_groups"])[None, :]
    for name in model.outputs:
        if name in ("z", "g"):
            out[name] = after[name.upper()][tile_at]
        elif name == "zt":
            out[name] = after["ZT"][a["row0"] : a["row0"] + a["n_rows"]]
        else:
            out[name] = after[name.upper()][group_at]
    return out


def _variant(launch: Launch) -> str:
    a = launch.args
    if launch.kernel == "_logits_kernel":
        flags = ["STATS" if a["STATS"] else "GRAD"] + [f for f in ("WRITE_Z", "HAS_BIAS", "HAS_CAP") if a[f]]
    elif launch.kernel == "_rows_kernel":
        flags = [f for f in ("HAS_LSE", "GRAD", "STREAM", "NEED_SUM", "HAS_BIAS", "HAS_CAP") if a[f]]
    else:
        flags = []
    return " ".join(flags)


@dataclasses.dataclass(frozen=True)
class CrossEntropyMismatch:
    """The first launch (``launch``: its index among the recorded ones, ``kernel``, ``variant``:
    its constexpr flags) whose outputs differ from its model's, and the first differing output
    (a :class:`~ojas_ref.verification.kernel_schedule_rowwise.Mismatch`: the output, element,
    operation, both values and the model's intermediates of that element)."""

    launch: int
    kernel: str
    variant: str
    mismatch: Mismatch

    def __str__(self) -> str:
        return f"launch {self.launch} ({self.kernel} {self.variant}): {self.mismatch}"


def check_launches(launches: list[Launch], primitives: CrossEntropyPrimitives) -> CrossEntropyMismatch | None:
    """Each launch (in order) against its model on the buffers it read; None when every output
    of every launch is equal bit for bit, else the :class:`CrossEntropyMismatch` of the first."""
    for i, launch in enumerate(launches):
        model = launch_schedule(launch, primitives)
        found = compare(f"{launch.kernel} {_variant(launch)}", _written(launch, model), model)
        if found is not None:
            return CrossEntropyMismatch(i, launch.kernel, _variant(launch), found)
    return None


def check_linear_cross_entropy(
    input: torch.Tensor,
    linear_weight: torch.Tensor,
    target: torch.Tensor,
    *,
    linear_bias: torch.Tensor | None = None,
    reduction: str = "mean",
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    z_loss: float = 0.0,
    softcap: float | None = None,
    config=None,
    grad_output: torch.Tensor | None = None,
    primitives: CrossEntropyPrimitives,
    launches: list | None = None,
) -> CrossEntropyMismatch | None:
    """Run ``ojas_kernels.linear_cross_entropy`` forward and backward (input, linear_weight and
    linear_bias requiring grad, the names of ``linear_cross_entropy``; the backward with ``grad_output``, default ones) recording every kernel launch
    (:func:`record_launches`), then :func:`check_launches`. ``launches``: a list that receives
    the recorded launches. The cuBLAS products are not checked (module docstring)."""
    from ojas_kernels.linear_cross_entropy import linear_cross_entropy

    leaves = [t.detach().requires_grad_() for t in (input, linear_weight)]
    b = None if linear_bias is None else linear_bias.detach().requires_grad_()
    with record_launches(ttgir=primitives.needs_layout) as recorded:
        loss = linear_cross_entropy(
            leaves[0],
            leaves[1],
            target,
            linear_bias=b,
            reduction=reduction,
            ignore_index=ignore_index,
            label_smoothing=label_smoothing,
            z_loss=z_loss,
            softcap=softcap,
            config=config,
        )
        loss.backward(torch.ones_like(loss) if grad_output is None else grad_output)
    if launches is not None:
        launches.extend(recorded)
    return check_launches(recorded, primitives)
