"""An executable model of the attention forward kernel's schedule, and its bit-for-bit check.

:func:`forward_schedule` runs, with torch float32 tensor operations, what
``ojas_kernels.attention_forward._fwd_kernel`` runs for one launch configuration
(:class:`~ojas_kernels.attention_config.KernelConfig`: BLOCK_M, BLOCK_N, SPLIT): for every
batch, query head (GQA: key head ``h // group``) and query tile, the three parts of key tiles of
``attention_tiles._key_tiles`` / ``_tile_range`` (masked, unmasked, masked), each tile's
``_fwd_tile`` step, then the finalize. Each step names the theorem it implements:

* the key tiles, and the tiles skipped as masked for every row: ``Ojas.Attention.Mask``
  ``stream_row_masked_keys``; visibility (causal, window, boolean ``attn_mask``, bounds):
  ``visibility`` of OnlineSoftmax.v, ``Ojas.Attention.Mask.visibility_true_iff``;
* the scores ``rnd(dot(q, k) * qk_scale)`` (base 2): ``score2_with`` of
  ``Ojas.Attention.Float.ForwardError`` (its ``dotf`` the primitive ``dot``);
* one tile (``block_step``): ``m' = max(m, max s)``, ``p = exp2(s - m')``, ``alpha = exp2(m - m')``,
  ``l' = rnd(rnd(l * alpha) + sum p)``, P rounded to the input dtype, ``acc' = dot(P, V,
  rnd(acc * alpha))``: ``kernel_step`` / ``tile_l`` / ``tile_pv`` of
  ``Ojas.Attention.Float.OnlineSoftmaxTile`` (``tile_l_inv``, ``tile_acc_inv``) and
  ``tile_acc_dot_step`` of ``Ojas.Attention.Float.ForwardError`` (the dot accumulating into
  ``acc * alpha``), no fused multiply-add (the kernels compile with ``enable_fp_fusion=False``);
  the theorems' ``tile_l`` sums ``p`` left to right (``tile_sum``), which is neither the device's
  tree nor numpy's pairwise sum: OnlineSoftmaxTile.v lists ``tl.sum`` as a tree as not covered,
  and here the order is the primitive ``row_sum``; a row with no visible key yet stays
  ``m = -inf, l = 0, acc = 0`` (``Ojas.Attention.Mask.stream_row_fully_masked``);
* the finalize: ``out = rnd(acc / l)`` (one IEEE division, ``tl.math.div_rn``):
  ``Ojas.Attention.Float.OnlineSoftmaxError.final_division``; out stored in the input dtype;
  ``lse = rnd(rnd(m + log2 l) * ln 2)`` (``Ojas.Attention.Float.SavedLseError``); a fully masked
  row gives zeros and ``lse = -inf``.

The operations whose rounding no theorem fixes are the parameters, :class:`Primitives`: the dot
``dot(a, b, acc) = acc + a @ b``, ``exp2``, ``log2``, the order of ``tl.sum`` over a row
(``row_sum``), the division and the float32 -> storage-dtype cast. Two sets:

* :func:`interpreter_primitives`: what ``TRITON_INTERPRET=1`` runs (triton/runtime/interpreter.py):
  ``tl.dot`` is ``np.matmul(a, b, dtype=float32) + acc`` (the kernels' ``_dot`` upcasts 16-bit
  operands to float32 there), ``tl.sum`` ``np.sum(x, axis=1)``, ``tl.exp2`` / ``tl.log2``
  ``np.exp2`` / ``np.log2``, division ``np.divide``, and the float32 -> bfloat16 cast the
  interpreter's ``_convert_float`` (it truncates); the same numpy calls on arrays of the same
  shapes, since they are the primitives there, and ``np.matmul`` on operands of the same memory
  order (a ``tl.trans`` of a loaded tile is a transposed view there, and numpy's matmul of a
  transposed view may round otherwise than of its contiguous copy: the backward's ``tl.trans(do)``
  does), so the model passes a transposed torch view where the kernel passes ``tl.trans`` of a tile;
* :func:`device_primitives`: the tensor-core dot models ``ojas verify-device`` identified (its
  record: :class:`~ojas_ref.verification.device_premises.Accumulation` for 16-bit operands,
  Triton's 3xTF32 split of Tf32Product.v for float32, emulated with torch integer-exact float64
  operations by :func:`accumulate` / :func:`tf32x3_dot`), the sum tree of ``tl.sum`` in the
  layout the launch sums ``p`` in, read from its TTGIR (:func:`forward_sum_layout`): without
  ``attn_mask`` the Hopper MMA accumulator (:func:`wgmma_row_sum`); with a boolean ``attn_mask`` the
  kernel converts the masked scores to the blocked layout of the mask tile's load and takes the row
  maximum, ``exp2`` and the row sum of ``p`` there (``p`` computed again in the MMA layout for
  P.V, the same values), so the sum runs in that blocked layout
  (``kernel_schedule_rowwise.blocked_sum``: the GPU tests' launches, 8 or 4 adjacent columns a
  thread, then butterflies across 8 or 16 lanes); both in the imported Triton's order (3.6 and 3.9
  are modelled, :func:`in_thread_order`), the device's own ``tl.exp2`` / ``tl.log2`` applied
  elementwise by a small Triton kernel (``attention_error._unary_kernel``, compiled without FMA
  contraction as the attention kernel is), IEEE division and round-to-nearest-even casts.

:func:`check_forward` runs the kernel with its ``TRACE`` on (the state ``m``, ``l``, ``acc`` stored
after every key tile) and the model on the same inputs, and returns ``None`` when every traced state
and every stored output are equal bit for bit, else a :class:`Mismatch`: the first differing
operation (the programs in order, each key tile's ``m``, then ``l``, then ``acc``, then the
finalize's ``lse`` and ``out``), the row, column, both values, and both sides' ``m``, ``l``,
``acc`` of that row after every key tile.

The model is an executable statement of the schedule, not a proof: where it departs from the
theorems' model (the row sum's order above) it follows the kernel.  Not covered: dropout
(refused), additive masks (refused), float32 dots in single-pass TF32
(refused), other sum layouts than :func:`forward_sum_layout` returns (the Hopper wgmma
accumulator with the warps along the rows, or a blocked layout: the default float32 configuration,
32 x 64 tiles, runs ``mma.sync`` with the warps along the keys, neither its accumulation nor its
cross-warp sum is identified; blocked layouts are summed as ``blocked_sum`` models them, checked on
the PTX only for the GPU tests' bool-mask launches, which the compiler picks from the launch's
specialization: the mask's key stride 1 there), subnormal products in the tensor-core emulation,
and the order inside one step: a differing ``l`` names ``exp2`` or the row sum, not which of the two.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import re
from typing import TYPE_CHECKING, Callable, Iterator

import numpy as np
import torch

from ojas_ref.verification.device_premises import TF32X3_SCHEDULES, Accumulation, _round_bits

if TYPE_CHECKING:  # kernel_schedule_rowwise imports this module
    from ojas_ref.verification.kernel_schedule_rowwise import Blocked

__all__ = [
    "Primitives",
    "TileStep",
    "Schedule",
    "Mismatch",
    "Tf32x3",
    "interpreter_primitives",
    "device_primitives",
    "accumulate",
    "tf32x3_dot",
    "IN_THREAD_ORDERS",
    "in_thread_order",
    "in_thread_sum",
    "wgmma_row_sum",
    "forward_sum_layout",
    "forward_schedule",
    "check_forward",
]

F32, F64 = torch.float32, torch.float64
_LN2 = torch.tensor(0.6931471805599453, dtype=F32)  # the kernel's constant, a float32 there


@dataclasses.dataclass(frozen=True)
class Primitives:
    """The operations of the schedule whose rounding is a parameter (float32 tensors in and out):
    ``dot(a, b, acc)`` = ``acc + a @ b`` (a [M, K], b [K, N] float32 holding the operands' values,
    acc [M, N]), ``exp2``, ``log2`` (elementwise), ``row_sum`` (``tl.sum(x, 1)`` of [M, N]),
    ``div`` (``x / y`` broadcast) and ``cast(x, dtype)`` (float32 to the storage dtype).
    ``needs_layout``: the row sum's order depends on the layout the launch sums ``p`` in, which
    the compiler picks (the device: :func:`forward_sum_layout`); ``row_sum`` is then the sum in the
    wgmma layout, and a launch summing in a blocked layout is modelled by ``forward_schedule``'s
    ``sum_layout``."""

    name: str
    dot: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
    exp2: Callable[[torch.Tensor], torch.Tensor]
    log2: Callable[[torch.Tensor], torch.Tensor]
    row_sum: Callable[[torch.Tensor], torch.Tensor]
    div: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    cast: Callable[[torch.Tensor, torch.dtype], torch.Tensor]
    needs_layout: bool = False


def _np(x: torch.Tensor) -> np.ndarray:
    return x.detach().contiguous().numpy()


def _ieee_div(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x / y


def _interpreter_cast(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Triton's interpreter's float32 -> ``dtype`` cast: bfloat16 by its ``_convert_float``
    (the significand truncated), float16 by numpy's ``astype``."""
    if dtype == F32:
        return x
    if dtype == torch.bfloat16:
        import triton.language as tl
        from triton.runtime.interpreter import _convert_float

        bits = _convert_float(_np(x), tl.float32, tl.bfloat16, None)
        return torch.from_numpy(np.ascontiguousarray(bits).view(np.int16)).view(torch.bfloat16)
    if dtype == torch.float16:
        return torch.from_numpy(_np(x).astype(np.float16))
    raise ValueError(f"dtype must be float32, bfloat16 or float16, got {dtype}")


def _interpreter_dot(a: torch.Tensor, b: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
    """The interpreter's ``tl.dot``: ``np.matmul(a, b, dtype=float32) + acc`` on ``a`` and ``b`` in their
    memory order (views, not contiguous copies: module docstring)."""
    a, b = a.detach().cpu(), b.detach().cpu()
    return torch.from_numpy(np.matmul(a.numpy(), b.numpy(), dtype=np.float32) + _np(acc))


def interpreter_primitives() -> Primitives:
    """The primitives of Triton's CPU interpreter (module docstring): the numpy calls it makes."""
    return Primitives(
        name="interpreter",
        dot=_interpreter_dot,
        exp2=lambda x: torch.from_numpy(np.exp2(_np(x))),
        log2=lambda x: torch.from_numpy(np.log2(_np(x))),
        row_sum=lambda x: torch.from_numpy(np.sum(_np(x), axis=1)),
        div=_ieee_div,
        cast=_interpreter_cast,
    )


# ---------------------------------------------------------------------------
# The device's dots, emulated with exact float64 integer arithmetic
# ---------------------------------------------------------------------------


def _exponent(x: torch.Tensor) -> torch.Tensor:
    """floor(log2 |x|) of float64 ``x`` (0 for 0: masked by the callers)."""
    return torch.frexp(x).exponent.to(torch.int64) - 1


def _round32(x: torch.Tensor, out: str) -> torch.Tensor:
    """float64 ``x`` (exact) rounded to float32 to nearest even or toward zero ("truncate")."""
    r = x.to(F32)
    if out == "nearest":
        return r
    if out != "truncate":
        raise ValueError(f"out must be 'nearest' or 'truncate', got {out!r}")
    over = r.to(F64).abs() > x.abs()
    return torch.where(over, torch.nextafter(r, torch.zeros_like(r)), r)


def _accumulate_rows(model: Accumulation, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """``c_r + sum_i a_ri b_ri`` for every row ``r`` (a, b [R, K] float32, c [R] float32) as ``model``
    accumulates it: :func:`~ojas_ref.verification.device_premises.emulate_dot` vectorised. Each
    block's terms are scaled to integers below 2^(bits + 2) (at most 2^33 summed: exact in float64)."""
    if model.bits is None:
        raise ValueError(f"{model}: exact alignment (bits=None) is not emulated here (device_premises.emulate_dot is)")
    if model.align not in ("trunc", "floor"):
        raise ValueError(f"align must be 'trunc' or 'floor', got {model.align!r}")
    a64, b64 = a.to(F64), b.to(F64)
    acc = c.to(F32)
    for k0 in range(0, a.shape[1], model.block):
        x, y = a64[:, k0 : k0 + model.block], b64[:, k0 : k0 + model.block]
        terms = torch.cat([acc.to(F64)[:, None], x * y], 1)  # products exact: at most 48 bits
        nonzero = terms != 0
        if model.ref == "operands":
            ref = torch.cat([_exponent(acc.to(F64))[:, None], _exponent(x) + _exponent(y)], 1)
        else:
            ref = _exponent(terms)
        big = torch.where(nonzero, ref, torch.full_like(ref, -(2**40))).amax(1)
        any_term = nonzero.any(1)
        q = torch.where(any_term, big - model.bits + 1, torch.zeros_like(big))
        scaled = terms * torch.pow(2.0, (-q).to(F64))[:, None]
        cut = torch.trunc(scaled) if model.align == "trunc" else torch.floor(scaled)
        total = torch.where(nonzero, cut, torch.zeros_like(cut)).sum(1) * torch.pow(2.0, q.to(F64))
        acc = torch.where(any_term, _round32(total, model.out), torch.zeros_like(acc))
    return acc


def accumulate(model: Accumulation, a: torch.Tensor, b: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
    """``acc + a @ b`` (a [M, K], b [K, N], acc [M, N], float32) as the tensor cores accumulate it
    under ``model`` (TensorCoreSum.v's ``tc_acc`` / ``tc_acc_op``: blocks of ``model.block`` along K
    chained from ``acc``)."""
    m, k = a.shape
    n = b.shape[1]
    rows_a = a.to(F32)[:, None, :].expand(m, n, k).reshape(m * n, k)
    rows_b = b.to(F32).t()[None, :, :].expand(m, n, k).reshape(m * n, k)
    return _accumulate_rows(model, rows_a, rows_b, acc.reshape(m * n)).reshape(m, n)


@dataclasses.dataclass(frozen=True)
class Tf32x3:
    """Triton's 3xTF32 float32 dot as ``ojas verify-device`` identified it (Tf32Product.v): ``hi =
    rna(x)`` (11 bits), ``lo = read(x - hi)``, the TF32 dots ``lo a . hi b`` (0), ``hi a . lo b`` (1),
    ``hi a . hi b`` (2) accumulated by ``model``, chained by ``schedule`` in ``order``
    (:data:`~ojas_ref.verification.device_premises.TF32X3_SCHEDULES`)."""

    model: Accumulation
    read: str
    schedule: str
    order: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.schedule not in TF32X3_SCHEDULES:
            raise ValueError(f"schedule must be one of {TF32X3_SCHEDULES}, got {self.schedule!r}")


def tf32x3_dot(spec: Tf32x3, a: torch.Tensor, b: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
    """``acc + a @ b`` (float32) as Triton's 3xTF32 dot under ``spec``:
    :func:`~ojas_ref.verification.device_premises.emulate_tf32x3` on tiles."""
    a, b = a.to(F32).contiguous(), b.to(F32).contiguous()
    ha, hb = _round_bits(a, 11, "rna"), _round_bits(b, 11, "rna")
    la, lb = _round_bits(a - ha, 11, spec.read), _round_bits(b - hb, 11, spec.read)
    pairs = ((la, hb), (ha, lb), (ha, hb))

    def chain(indices: tuple[int, ...], start: torch.Tensor) -> torch.Tensor:
        for i in indices:
            start = accumulate(spec.model, *pairs[i], start)
        return start

    zero = torch.zeros_like(acc)
    if spec.schedule == "chain(c)":
        return chain(spec.order, acc)
    if spec.schedule == "chain(0)+c":
        return chain(spec.order, zero) + acc
    low = chain(tuple(i for i in spec.order if i != 2), zero)
    if spec.schedule == "hi(c)+lo":
        return chain((2,), acc) + low
    return (chain((2,), zero) + low) + acc  # "hi(0)+lo+c"


#: the Triton versions whose sm_90 reductions are modelled, and how each adds a thread's own
#: elements (read from the PTX it compiles for ``_fwd_kernel``'s ``tl.sum(p, 1)``, ``_bwd_dq_kernel``'s
#: Delta and ``_rms_norm_{fwd,bwd}_kernel``'s sums): "tree", a balanced tree of adjacent pairs;
#: "sequential", one after another in register order. Both then add across lanes and warps by the
#: same butterflies.
IN_THREAD_ORDERS = {"3.6": "sequential", "3.9": "tree"}


def in_thread_order(version: str | None = None) -> str:
    """How Triton ``version`` (default: the one imported) adds a thread's elements in a
    reduction for sm_90 (:data:`IN_THREAD_ORDERS`); ``ValueError`` for a version not modelled."""
    if version is None:
        import triton

        version = triton.__version__
    order = IN_THREAD_ORDERS.get(".".join(str(version).split(".")[:2]))
    if order is None:
        modelled = ", ".join(IN_THREAD_ORDERS)
        raise ValueError(f"version: the reduction order of Triton {version} is not modelled (Triton {modelled} are)")
    return order


def _tree(v: torch.Tensor) -> torch.Tensor:
    """The balanced tree of adjacent pairs over the last dimension (a power of 2)."""
    while v.shape[-1] > 1:
        if v.shape[-1] % 2:
            raise ValueError(f"the in-thread tree is modelled for a power of 2 of elements, got {v.shape[-1]}")
        v = v[..., 0::2] + v[..., 1::2]
    return v[..., 0]


def in_thread_sum(v: torch.Tensor, version: str | None = None) -> torch.Tensor:
    """A thread's elements (the last dimension, in register order) added as Triton ``version``
    (default: the one imported) adds them (:func:`in_thread_order`)."""
    if in_thread_order(version) == "tree":
        return _tree(v)
    total = v[..., 0]
    for k in range(1, v.shape[-1]):
        total = total + v[..., k]
    return total


def wgmma_row_sum(x: torch.Tensor, version: str | None = None) -> torch.Tensor:
    """``tl.sum(x, 1)`` of a float32 [M, N] tile in the Hopper wgmma accumulator layout with the
    warps along the rows (``nvidia_mma`` version 3, ``warpsPerCTA = [w, 1]``, the instruction's N the
    tile's), as Triton ``version`` (default: the one imported; 3.6 and 3.9 are modelled) lowers it
    for sm_90 (read from the PTX of ``_fwd_kernel``, 64 x 64 and 128 x 64 tiles, 4 and 8 warps, bf16
    and 3xTF32): lane ``t`` of the 4 lanes of a row holds columns ``8 j + 2 t + {0, 1}``,
    j = 0..N/8-1, in that order; it adds them (:func:`in_thread_sum`: Triton 3.9 by a balanced tree of
    adjacent pairs, 3.6 one after another), then the lanes add across ``xor 2``, then ``xor 1``. The
    attention theorems sum a tile left to right (``tile_l``), not in this order."""
    m, n = x.shape
    if n % 8 or (n // 4) & (n // 4 - 1):
        raise ValueError(f"the wgmma row sum needs N a multiple of 8 with N / 4 a power of 2, got N = {n}")
    e = x.to(F32).reshape(m, n // 8, 4, 2).permute(0, 2, 1, 3).reshape(m, 4, n // 4)
    v = in_thread_sum(e, version)
    v = v + v[:, [2, 3, 0, 1]]
    v = v + v[:, [1, 0, 3, 2]]
    return v[:, 0].contiguous()


_L_SUM = re.compile(
    r'%l_i_\w+ = "tt\.reduce"\(%[\w.]+\) <\{axis = 1 : i32\}>.*?\}\) : \(tensor<\d+x(\d+)xf32, #(\w+)>\)', re.S
)


def forward_sum_layout(ttgir: str) -> Blocked | str:
    """The layout ``_fwd_kernel``'s ``tl.sum(p, 1)`` (the ``l_i`` reduction) runs in, from the TTGIR
    of its launch: ``"wgmma"`` (the accumulator of the scores' dot, :func:`wgmma_row_sum`'s layout:
    the launches without ``attn_mask``), or a
    :class:`~ojas_ref.verification.kernel_schedule_rowwise.Blocked` layout. A boolean ``attn_mask``
    converts the scores to the blocked layout of the mask's load and the kernel takes the maximum,
    ``exp2`` and the sum there (``p`` is computed twice, once more in the wgmma layout for P.V: the
    same values); on sm_90 (Triton 3.6 and 3.9 alike) the GPU tests' launches, 64 x 64 key tiles of
    head dim 64 and a mask contiguous along the keys, sum in the layout of the 16-byte loads of the
    query tile: 8 (bfloat16) or 4 (float32) adjacent columns a thread, 8 or 16 lanes along the row,
    the warps along the rows. ``ValueError`` for any other layout (wgmma with warps along the keys,
    several ``l_i`` reductions in different layouts)."""
    from ojas_ref.verification.kernel_schedule_cross_entropy import reduce_layout

    found = {(int(m.group(1)), m.group(2)) for m in _L_SUM.finditer(ttgir)}
    if len(found) != 1:
        raise ValueError(f"expected one layout of _fwd_kernel's tl.sum(p, 1) in the TTGIR, found {sorted(found)}")
    ((cols, name),) = found
    definitions = "\n".join(line for line in ttgir.splitlines() if line.startswith(f"#{name} = "))
    op = f'"tt.reduce"(%p) <{{axis = 1 : i32}}> ({{}}) : (tensor<1x{cols}xf32, #{name}>)'
    return reduce_layout(definitions + "\n" + op, cols)


def _device_unary(op: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """``tl.exp2`` / ``tl.log2`` on the CUDA device, elementwise, by ``attention_error``'s unary
    kernel compiled as the attention kernels are, without FMA contraction (``tl.log2`` is
    libdevice's polynomial: with contraction on its PTX has ``mul.f32`` / ``add.f32`` that ptxas
    may fuse; the attention kernel's, ``.rn``, may not be)."""

    def run(x: torch.Tensor) -> torch.Tensor:
        from ojas_ref.verification.attention_error import _unary_kernel

        x = x.to(F32).contiguous().cuda()
        y = torch.empty_like(x)
        grid = (max(1, -(-x.numel() // 1024)),)
        _unary_kernel(op)[grid](x, y, x.numel(), OP=op, BLOCK=1024, enable_fp_fusion=False)
        return y.cpu()

    return run


def device_primitives(dtype: torch.dtype, folder: str | None = None) -> Primitives:
    """The primitives of the kernels on this CUDA device for inputs of ``dtype``, from the
    ``ojas verify-device`` record of this device and these versions (``folder`` as
    :func:`~ojas_ref.verification.device_premises.checked_premises`: ``PremisesNotChecked`` without
    a record, ``PremiseFailed`` when an entry failed): "tl.dot bfloat16" for 16-bit inputs (the
    float16 dots assumed to accumulate as the bfloat16 ones), "tl.dot float32 tf32x3" and the
    "tf32 low-part reading" for float32 (``ValueError`` when torch's float32 matmul precision lets the
    kernels run single-pass TF32; when the record leaves several models, each tile is computed by
    all of them and ``ValueError`` raised where they differ); ``tl.exp2`` /
    ``tl.log2`` run on the device; the row sum is :func:`wgmma_row_sum`."""
    from ojas_kernels.attention_args import _HIGHEST, _dot_precision
    from ojas_ref.verification import device_premises as dp

    if not torch.cuda.is_available():
        raise RuntimeError("device_primitives needs a CUDA device (its tl.exp2 and tl.log2 run there)")
    if dtype in (torch.bfloat16, torch.float16):
        name = "tl.dot bfloat16"
        found = dp.checked_premises([name], folder)[name]["measured"]
        dots = [functools.partial(accumulate, Accumulation(**m)) for m in found]
    elif dtype == F32:
        if _dot_precision(dtype, _HIGHEST) != "tf32x3":
            raise ValueError(
                "float32 attention with single-pass TF32 dots (matmul precision not 'highest'): not modelled"
            )
        name, reading = "tl.dot float32 tf32x3", "tf32 low-part reading"
        entries = dp.checked_premises([name, reading], folder)
        found = entries[name]["measured"]
        read = entries[reading]["measured"]
        specs = [Tf32x3(Accumulation(**m["model"]), read, m["schedule"], tuple(m["order"])) for m in found]
        dots = [functools.partial(tf32x3_dot, spec) for spec in specs]
    else:
        raise ValueError(f"dtype must be float32, bfloat16 or float16, got {dtype}")
    if not dots:
        raise ValueError(f"{name}: the record identifies no model")

    def dot(a: torch.Tensor, b: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
        """The record's model; with several, all of them, which must agree on these operands."""
        results = [f(a, b, acc) for f in dots]
        if any(not torch.equal(_bits(results[0]), _bits(r)) for r in results[1:]):
            raise ValueError(f"{name}: the record's {len(dots)} models differ on this tile: {found}")
        return results[0]

    return Primitives(
        name=f"device ({dtype})",
        dot=dot,
        exp2=_device_unary("exp2"),
        log2=_device_unary("log2"),
        row_sum=wgmma_row_sum,
        div=_ieee_div,
        cast=lambda x, d: x.to(d),
        needs_layout=True,
    )


# ---------------------------------------------------------------------------
# The schedule
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TileStep:
    """A query tile's state after one key tile: the tile's ``part`` of ``_tile_range`` (0 and 2
    masked, 1 unmasked), its first key ``start_n`` and ``m``, ``l`` [BLOCK_M], ``acc`` [BLOCK_M, BLOCK_EV]."""

    part: int
    start_n: int
    m: torch.Tensor
    l: torch.Tensor  # noqa: E741
    acc: torch.Tensor


@dataclasses.dataclass(frozen=True)
class Schedule:
    """The model's ``out`` [B, Hq, Sq, Ev] (input dtype), ``lse`` [B, Hq, Sq] (float32) and, when
    traced, the steps of every program keyed by ``(b, h, start_m)``."""

    out: torch.Tensor
    lse: torch.Tensor
    steps: dict[tuple[int, int, int], list[TileStep]] | None


def _key_tiles(
    start_m: int, seq_q: int, seq_k: int, window: int, bm: int, bn: int, causal: bool, has_window: bool, split: bool
) -> tuple[int, int, int, int]:
    """``attention_tiles._key_tiles`` on Python ints (``lo <= a <= b <= hi``)."""
    last_m = min(start_m + bm, seq_q) - 1
    lo, hi, full_lo, full_end = 0, seq_k, 0, seq_k
    if causal:
        hi = min(hi, last_m + 1)
        full_end = min(full_end, start_m + 1)
    if has_window:
        lo = max(start_m - window + 1, 0)
        hi = min(hi, last_m + window)
        full_lo = max(last_m - window + 1, 0)
        full_end = min(full_end, start_m + window)
    return _split_tiles(lo, hi, full_lo, full_end, bn, split)


def _split_tiles(lo: int, hi: int, full_lo: int, full_end: int, bn: int, split: bool) -> tuple[int, int, int, int]:
    """The tail of ``attention_tiles._key_tiles`` / ``_query_tiles``: tiles of ``bn`` from ``lo``
    rounded down, ``[a, b)`` those inside ``[full_lo, full_end)``; without ``split`` ``a = b = hi``."""
    lo = (lo // bn) * bn
    a = min(max(-(-full_lo // bn) * bn, lo), max(hi, lo))
    b = max((full_end // bn) * bn, a)
    if not split:
        a = b = max(hi, lo)
    return lo, a, b, hi


def _visible(
    mask: torch.Tensor | None,
    b: int,
    h: int,
    start_m: int,
    start_n: int,
    bm: int,
    bn: int,
    seq_q: int,
    seq_k: int,
    window: int,
    causal: bool,
    has_window: bool,
) -> torch.Tensor:
    """``attention_tiles._visible`` (and ``_apply_mask`` of a boolean ``mask`` [B, Hq, Sq, Sk]) on the
    tile of rows ``start_m ..`` and keys ``start_n ..``: [bm, bn] bool."""
    i, j = torch.arange(start_m, start_m + bm)[:, None], torch.arange(start_n, start_n + bn)[None, :]
    vis = (i < seq_q) & (j < seq_k)
    if causal:
        vis &= j <= i
    if has_window:
        vis &= (i - j < window) & (j - i < window)
    if mask is not None:
        seen = torch.zeros(bm, bn, dtype=torch.bool)
        r, c = min(bm, seq_q - start_m), min(bn, seq_k - start_n)
        seen[:r, :c] = mask[b, h, start_m : start_m + r, start_n : start_n + c] != 0
        vis &= seen
    return vis


def _scale(query: torch.Tensor, scale: float | None) -> float:
    """``scale`` as a float, 1 / sqrt(E) when None (``flash_attention``'s default)."""
    return 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)


def _model_inputs(
    tensors: tuple[torch.Tensor, ...], attn_mask: torch.Tensor | None, window: int | None
) -> tuple[tuple[torch.Tensor, ...], torch.Tensor | None]:
    """The schedules' argument checks (``attention_args._check`` of query, key, value: the first
    three of ``tensors``; a float ``attn_mask`` raises, additive masks are not modelled), then
    ``tensors`` and ``attn_mask`` detached, on the CPU."""
    from ojas_kernels.attention_args import _check

    _check(*tensors[:3], window, attn_mask)
    if attn_mask is not None and attn_mask.dtype != torch.bool:
        raise ValueError(f"attn_mask must be boolean: additive masks are not modelled, got {attn_mask.dtype}")
    return tuple(x.detach().cpu() for x in tensors), None if attn_mask is None else attn_mask.detach().cpu()


def _tile(x: torch.Tensor, start: int, rows: int, cols: int) -> torch.Tensor:
    """float32 [rows, cols] of ``x`` [S, D] from row ``start``, zeros outside (the kernel's masked loads)."""
    out = torch.zeros(rows, cols, dtype=F32)
    part = x[start : start + rows].to(F32)
    out[: part.shape[0], : part.shape[1]] = part
    return out


def forward_schedule(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    window: int | None = None,
    *,
    config,
    primitives: Primitives,
    trace: bool = False,
    sum_layout: Blocked | str | None = None,
) -> Schedule:
    """``_fwd_kernel``'s outputs for these inputs under the launch configuration ``config``
    (a ``KernelConfig``: block_m, block_n, split) with ``primitives`` (module docstring), computed on
    the CPU; ``trace``: keep every tile's ``m``, ``l``, ``acc``. Arguments as ``flash_attention``
    (``scale`` defaults to 1 / sqrt(E)); a float ``attn_mask`` raises (additive masks are not modelled).
    ``sum_layout``: for primitives that need it (``needs_layout``, the device's), the layout the
    launch sums ``p`` in (:func:`forward_sum_layout` of its TTGIR; None or ``"wgmma"``: ``row_sum``);
    a :class:`~ojas_ref.verification.kernel_schedule_rowwise.Blocked` one is summed by ``blocked_sum``
    in the imported Triton's order. With a boolean ``attn_mask`` the device sums in a blocked layout
    (:func:`forward_sum_layout`), so these primitives raise ``ValueError`` there without ``sum_layout``."""
    from ojas_kernels.attention_args import _launch_args
    from ojas_ref.verification.kernel_schedule_rowwise import Blocked, blocked_sum

    (query, key, value), attn_mask = _model_inputs((query, key, value), attn_mask, window)
    scale = _scale(query, scale)
    batch, heads, seq_q, _ = query.shape
    kv_heads, seq_k, ev = key.shape[1], key.shape[2], value.shape[3]
    out = torch.zeros(batch, heads, seq_q, ev, dtype=query.dtype)
    lse = torch.full((batch, heads, seq_q), float("-inf"), dtype=F32)
    steps: dict[tuple[int, int, int], list[TileStep]] | None = {} if trace else None
    if lse.numel() == 0 or seq_k == 0:
        return Schedule(out, lse, steps)
    row_sum = primitives.row_sum
    if sum_layout is not None and not primitives.needs_layout:
        raise ValueError(f"sum_layout: {primitives.name} sums rows by its row_sum, got a layout {sum_layout!r}")
    if sum_layout not in (None, "wgmma") and not isinstance(sum_layout, Blocked):
        raise ValueError(f"sum_layout must be None, 'wgmma' or a Blocked layout, got {sum_layout!r}")
    if isinstance(sum_layout, Blocked):
        row_sum = functools.partial(blocked_sum, axis=1, layout=sum_layout)
    elif primitives.needs_layout and attn_mask is not None and sum_layout is None:
        raise ValueError(
            f"sum_layout: {primitives.name} sums p with an attn_mask in the blocked layout of the launch "
            "(forward_sum_layout of its TTGIR), got None"
        )
    mask, _, _, w, qk_scale, _, _, cx = _launch_args(query, key, value, attn_mask, is_causal, scale, window, None)
    qk = torch.tensor(qk_scale, dtype=F32)  # a float32 kernel argument
    bm, bn, be, bev = config.block_m, config.block_n, cx["BLOCK_E"], cx["BLOCK_EV"]
    split, has_window, pos = config.split and attn_mask is None, window is not None, scale >= 0
    group = heads // kv_heads
    bool_mask = mask if attn_mask is not None else None
    p_ = primitives
    for b in range(batch):
        for h in range(heads):
            hk = h // group
            for start_m in range(0, seq_q, bm):
                q = _tile(query[b, h], start_m, bm, be)
                m_i = torch.full((bm,), float("-inf"), dtype=F32)
                l_i = torch.zeros(bm, dtype=F32)
                acc = torch.zeros(bm, bev, dtype=F32)
                trail = []
                lo, a, b_end, hi = _key_tiles(start_m, seq_q, seq_k, w, bm, bn, is_causal, has_window, split)
                for part, (start, end) in enumerate(((lo, a), (a, b_end), (b_end, hi))):
                    for start_n in range(start, end, bn):
                        s = p_.dot(q, _tile(key[b, hk], start_n, bn, be).t().contiguous(), torch.zeros(bm, bn))
                        if part != 1:  # the masked loop
                            vis = _visible(
                                bool_mask, b, h, start_m, start_n, bm, bn, seq_q, seq_k, w, is_causal, has_window
                            )
                            s = torch.where(vis, s * qk, float("-inf"))
                            m_new = torch.maximum(m_i, s.amax(1))
                            m_use = torch.where(m_new == float("-inf"), 0.0, m_new)
                            p = p_.exp2(s - m_use[:, None])
                            alpha = p_.exp2(m_i - m_use)
                        else:
                            m_new = torch.maximum(m_i, (s.amax(1) if pos else s.amin(1)) * qk)
                            p = p_.exp2(s * qk - m_new[:, None])
                            alpha = p_.exp2(m_i - m_new)
                        l_i = l_i * alpha + row_sum(p)
                        v = _tile(value[b, hk], start_n, bn, bev)
                        acc = acc * alpha[:, None]
                        acc = p_.dot(p_.cast(p, value.dtype).to(F32), v, acc)
                        m_i = m_new
                        if trace:
                            trail.append(TileStep(part, start_n, m_i.clone(), l_i.clone(), acc.clone()))
                seen = l_i > 0.0
                l_safe = torch.where(seen, l_i, torch.ones_like(l_i))
                o = p_.div(acc, l_safe[:, None])
                ls = torch.where(seen, (m_i + p_.log2(l_safe)) * _LN2, float("-inf"))
                rows = min(bm, seq_q - start_m)
                out[b, h, start_m : start_m + rows] = p_.cast(o, query.dtype)[:rows, :ev]
                lse[b, h, start_m : start_m + rows] = ls[:rows]
                if trace:
                    steps[(b, h, start_m)] = trail
    return Schedule(out, lse, steps)


# ---------------------------------------------------------------------------
# The check against the kernel
# ---------------------------------------------------------------------------


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous().view({2: torch.int16, 4: torch.int32}[x.element_size()])


_OPERATIONS = {
    "m": "m = max(m, max s): the scores (the dot q.k, * qk_scale, the mask)",
    "l": "l = l * alpha + sum(p): exp2 or the row sum",
    "acc": "acc = dot(P, V, acc * alpha): P's cast or the P.V dot",
    "lse": "the finalize: lse = (m + log2 l) * ln 2",
    "out": "the finalize: out = acc / l, or the output cast",
}


@dataclasses.dataclass(frozen=True)
class Mismatch:
    """The first operation whose result differs between the kernel and the model. The programs
    (b, h, query tile ``start_m``) are taken in order, the key tiles of each in the order they run,
    each tile's ``m`` (all rows), then ``l``, then ``acc``; then each row's ``lse`` and ``out``.
    ``quantity`` is one of "m", "l", "acc" (after the key tile ``key_tile`` = (part, start_n)), "lse",
    "out"; ``operation`` names the operation that computes it; ``row`` = (b, h, i), ``column`` (acc,
    out), ``kernel`` and ``model`` the two values; ``steps``: (part, start_n, m, l, acc[column]) of
    that row after each key tile, the model's and the kernel's. With a model of other tile sizes
    (a mutant), states are compared after the key tiles that end at the same key."""

    quantity: str
    operation: str
    row: tuple[int, int, int]
    start_m: int
    key_tile: tuple[int, int] | None
    column: int | None
    kernel: float
    model: float
    steps: list[tuple[int, int, float, float, float]]
    kernel_steps: list[tuple[int, int, float, float, float]]

    def __str__(self) -> str:
        b, h, i = self.row
        where = "" if self.key_tile is None else f" after key tile {self.key_tile[1]} (part {self.key_tile[0]})"
        col = "" if self.column is None else f"[{self.column}]"
        lines = [
            f"first differing operation: {self.operation}",
            f"  {self.quantity}{col} of row b={b} h={h} i={i} (query tile {self.start_m}){where}: "
            f"kernel {self.kernel!r}, model {self.model!r}",
        ]
        for who, steps in (("model", self.steps), ("kernel", self.kernel_steps)):
            for part, start_n, m, l, a in steps:
                lines.append(f"  {who} after key tile {start_n} (part {part}): m={m!r} l={l!r} acc={a!r}")
        return "\n".join(lines)


def _kernel_steps(
    trace: torch.Tensor, sched_args: tuple, b: int, h: int, heads: int, start_m: int, ev: int
) -> list[TileStep]:
    """The kernel's states (``_trace_step``'s records) of program (b, h, start_m), its tiles as
    ``_key_tiles`` runs them (``sched_args``: Sq, Sk, the window argument, causal, window, split,
    BLOCK_M, BLOCK_N, BLOCK_EV of the kernel's launch)."""
    seq_q, seq_k, w, causal, has_window, split, bm, bn, bev = sched_args
    lo, a, b_end, hi = _key_tiles(start_m, seq_q, seq_k, w, bm, bn, causal, has_window, split)
    n_tiles, n_steps = -(-seq_q // bm), -(-seq_k // bn)
    out = []
    for part, (start, end) in enumerate(((lo, a), (a, b_end), (b_end, hi))):
        for start_n in range(start, end, bn):
            rec = trace[((b * heads + h) * n_tiles + start_m // bm) * n_steps + (start_n - lo) // bn]
            out.append(TileStep(part, start_n, rec[:bm], rec[bm : 2 * bm], rec[2 * bm :].reshape(bm, bev)[:, :ev]))
    return out


@contextlib.contextmanager
def _recording_ttgir(into: list[str] | None) -> Iterator[None]:
    """Within the block, each ``_fwd_kernel`` launch (``attention_forward.fast``) also compiles
    (``warmup``: Triton's cache, the specialization of these arguments) and appends its TTGIR to
    ``into``; None: nothing changes."""
    from ojas_kernels import attention_forward as af

    real = af.fast
    if into is None:
        yield
        return

    class Recorder:
        def __init__(self, kernel):
            self.kernel, self.launcher = kernel, real(kernel)

        def __getitem__(self, grid):
            def run(*args, **kwargs):
                into.append(self.kernel.warmup(*args, grid=grid, **kwargs).asm["ttgir"])
                return self.launcher[grid](*args, **kwargs)

            return run

    af.fast = Recorder
    try:
        yield
    finally:
        af.fast = real


def check_forward(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    window: int | None = None,
    *,
    config=None,
    primitives: Primitives,
    model_config=None,
) -> Mismatch | None:
    """Run ``_fwd_kernel`` (launch configuration ``config``, a ``KernelConfig``; default that of
    ``default_config``), then again with ``TRACE`` on (``RuntimeError`` unless its outputs are the
    same bits), and :func:`forward_schedule` (under ``model_config``,
    default ``config``: another one is a mutant) on the same inputs; None when every traced state
    (rows below Sq, columns below Ev) and every stored output are equal bit for bit, else the
    :class:`Mismatch` of the first differing operation. With primitives that need the layout
    (``needs_layout``: the device's) the first launch is also compiled for its TTGIR, and the model
    sums ``p`` in the layout found there (:func:`forward_sum_layout`)."""
    from ojas_kernels.attention_args import _window_arg
    from ojas_kernels.attention_config import AttentionConfig, _block_dim, default_config
    from ojas_kernels.attention_forward import _forward

    if config is None:
        config = default_config(max(query.shape[-1], value.shape[-1]), query.dtype, query.device, is_causal).fwd
    scale = _scale(query, scale)
    model_config = model_config or config
    batch, heads, seq_q, _ = query.shape
    seq_k, ev = key.shape[2], value.shape[3]
    bev = _block_dim(ev)
    bm, bn = config.block_m, config.block_n
    n = batch * heads * -(-seq_q // bm) * -(-seq_k // bn)
    trace = torch.full((n, bm * (2 + bev)), float("nan"), dtype=F32, device=query.device)
    launch = (query, key, value, attn_mask, is_causal, scale, window, AttentionConfig(config, config, config))
    ttgir: list[str] = []
    with _recording_ttgir(ttgir if primitives.needs_layout else None):
        out, lse = (x.cpu() for x in _forward(*launch))
    layout = forward_sum_layout(ttgir[0]) if ttgir else None
    model = forward_schedule(
        query,
        key,
        value,
        attn_mask,
        is_causal,
        scale,
        window,
        config=model_config,
        primitives=primitives,
        trace=True,
        sum_layout=layout,
    )
    traced = [x.cpu() for x in _forward(*launch, trace=trace)]
    if not all(torch.equal(_bits(x), _bits(y)) for x, y in zip((out, lse), traced)):
        raise RuntimeError("the kernel with TRACE on stored other outputs than without: its steps cannot be compared")
    trace = trace.cpu()
    w = _window_arg(window, seq_q, seq_k)
    split = config.split and attn_mask is None
    sched_args = (seq_q, seq_k, w, is_causal, window is not None, split, bm, bn, bev)
    same_rows = model_config.block_m == bm  # else (a mutant) only the outputs are compared
    for (b, h, start_m), steps in model.steps.items() if same_rows else ():
        rows = min(bm, seq_q - start_m)
        kernel = {st.start_n + bn: st for st in _kernel_steps(trace, sched_args, b, h, heads, start_m, ev)}
        for st in steps:
            kst = kernel.get(st.start_n + model_config.block_n)  # the kernel's state after the same keys
            if kst is None:
                continue
            for name, kv, mv in (("m", kst.m, st.m), ("l", kst.l, st.l), ("acc", kst.acc, st.acc[:, :ev])):
                kv, mv = kv[:rows].reshape(rows, -1), mv[:rows].reshape(rows, -1)
                diff = _bits(kv) != _bits(mv)
                if diff.any():
                    r, c = (int(x) for x in diff.nonzero()[0])
                    return _mismatch(
                        name,
                        (b, h, start_m + r),
                        start_m,
                        (st.part, st.start_n),
                        c if name == "acc" else None,
                        kv[r, c].item(),
                        mv[r, c].item(),
                        model,
                        trace,
                        sched_args,
                        heads,
                        ev,
                    )
    lse_diff = _bits(lse) != _bits(model.lse)
    out_diff = (_bits(out) != _bits(model.out)).any(-1)
    bad = (lse_diff | out_diff).nonzero()
    if bad.numel() == 0:
        return None
    b, h, i = (int(x) for x in bad[0])
    start_m = i // model_config.block_m * model_config.block_m
    if lse_diff[b, h, i]:
        return _mismatch(
            "lse",
            (b, h, i),
            start_m,
            None,
            None,
            lse[b, h, i].item(),
            model.lse[b, h, i].item(),
            model,
            trace,
            sched_args,
            heads,
            ev,
        )
    c = int((_bits(out[b, h, i]) != _bits(model.out[b, h, i])).nonzero()[0])
    return _mismatch(
        "out",
        (b, h, i),
        start_m,
        None,
        c,
        out[b, h, i, c].item(),
        model.out[b, h, i, c].item(),
        model,
        trace,
        sched_args,
        heads,
        ev,
    )


def _mismatch(
    quantity, row, start_m, key_tile, column, kernel, model_value, model, trace, sched_args, heads, ev
) -> Mismatch:
    """The :class:`Mismatch` with both step lists of ``row`` (``acc`` at ``column``, or 0)."""
    b, h, i = row
    c = column or 0
    bm = sched_args[6]

    def rows_of(steps, first):
        return [
            (s.part, s.start_n, s.m[i - first].item(), s.l[i - first].item(), s.acc[i - first, c].item()) for s in steps
        ]

    return Mismatch(
        quantity=quantity,
        operation=_OPERATIONS[quantity],
        row=row,
        start_m=start_m,
        key_tile=key_tile,
        column=column,
        kernel=kernel,
        model=model_value,
        steps=rows_of(model.steps[(b, h, start_m)], start_m),
        kernel_steps=rows_of(_kernel_steps(trace, sched_args, b, h, heads, i // bm * bm, ev), i // bm * bm),
    )
