"""ReLU in Triton: ``r = relu(h)`` and the 1-bit mask ``not (h <= 0)`` packed 8 to a byte in one pass,
and a backward from the packed mask alone.

Forward (:func:`relu_forward`): one read of ``h``, one write of ``r`` and one of ``ceil(n / 8)``
bytes: bit ``j`` of byte ``k`` is element ``8 k + j`` of ``h`` flattened in row-major order,
the padding bits of the last byte zero (the layout of ``Ojas.ReLU.Backward.pack``).  Backward
(:func:`relu_backward`): ``dh_i = g_i`` where bit ``i`` is set, ``+0`` elsewhere, a selection
(``Ojas.ReLU.Backward.mask_backward``): torch's ``threshold_backward(g, relu(h), 0)`` bit for bit
(``Ojas.ReLU.Backward.relu_packed_backward_bitwise``), with no rounding
(``Ojas.ReLU.Backward.relu_mask_backward_exact``).

The kernels never do floating-point arithmetic: they read the floats as integers of their width
(float32 as int32, bfloat16 and float16 as int16) and classify the bits: sign bit set, magnitude
``bits & 0x7F..`` zero (a zero), at most that of infinity (a number) or above it (NaN).  So
``h <= 0`` is "sign set and not NaN, or +0" and ``h < 0`` is "sign set, not zero, not NaN", the
IEEE comparisons of the Coq model (``le0``); ``r`` is ``+0`` where ``h < 0`` and ``h``'s own bits
elsewhere: NaN (payload and sign kept) and ``+0.0`` pass through unchanged, and ``-0.0`` as
torch's ``relu`` returns it on the tensor's device type: :func:`keeps_negative_zero` asks torch
once per device type (``relu(-0.0)`` is ``-0.0`` on the CPU, torch 2.13; on CUDA it is whatever
``clamp_min``'s ``max`` gives there, not measured here).  torch's CPU ``relu`` returns the same
bits (measured, torch 2.13) except the payload of some 16-bit NaN inputs, which it converts
through float32: float16 signalling NaNs come back quiet (``0xFC01`` as ``0xFE01``) and bfloat16
negative NaNs as ``0xFFFF``; both are NaN, and the gradient, the selection, is torch's bit for
bit everywhere.  The mask's value at ``h = 0`` (either sign) is 0
(torch's ``relu'(0) = 0``), at NaN 1 (threshold_backward passes the gradient through a NaN).
That these integer tests are IEEE's comparisons is ``Ojas.ReLU.KernelBits.kernel_mask_eq`` (the
mask bit is ``not (h <= 0)`` of the float the bits encode) and ``Ojas.ReLU.KernelBits.kernel_relu_eq``
(the output bits encode ``relu`` of it, with ``-0.0`` kept: ``KEEP_NEG_ZERO``; the variant that
zeroes ``-0.0`` is not covered, and changes only the sign of a zero output), for any IEEE
format of Flocq's ``Bits`` (``float32_constants``, ``bfloat16_constants``, ``float16_constants``:
the ``MAG`` and ``INF`` constants below are those formats'); composed with the backward,
``Ojas.ReLU.KernelBits.kernel_packed_backward_bitwise``: the kernel's whole backward from its packed
bytes is ``threshold_backward`` on ``relu(h)``, element by element.  tests/functional/test_relu.py also
runs every bfloat16 and float16 bit pattern and the float32 boundaries.  Layout: any shape, flattened into
contiguous 1-D blocks of ``block_size`` elements (a power of two, at least 8; non-contiguous
inputs and gradients are copied); dtypes float16, bfloat16, float32.

Under torch.compile (and torch.export) these kernels run as two custom operators,
``ojas::relu_forward`` and ``ojas::relu_backward``, registered next to their ``autograd.Function``
in ``ojas_ref.functional.relu`` (``ojas_kernels.host.define_op``, opaque to Dynamo and Inductor,
with fake implementations; no autograd of their own: under torch.compile the Function calls the
forward op in its forward and the backward op in its backward).  They call :func:`relu_forward`
and :func:`relu_backward` with the same arguments as the eager path (default ``block_size``),
so the theorems above apply unchanged.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .host import cdiv
from .launch import fast

__all__ = ["DEFAULT_BLOCK_SIZE", "keeps_negative_zero", "packed_numel", "relu_forward", "relu_backward"]

DEFAULT_BLOCK_SIZE = 1024  # elements per program; untuned
# per dtype: the integer view, the magnitude mask and the bits of +inf
_BITS = {
    torch.float32: (torch.int32, 0x7FFFFFFF, 0x7F800000),
    torch.bfloat16: (torch.int16, 0x7FFF, 0x7F80),
    torch.float16: (torch.int16, 0x7FFF, 0x7C00),
}


@triton.jit
def _relu_fwd_kernel(
    X, R, P, n, n_bytes, BLOCK: tl.constexpr, MAG: tl.constexpr, INF: tl.constexpr, KEEP_NEG_ZERO: tl.constexpr
):
    """``r = relu(h)`` and the packed mask ``not (h <= 0)`` of one block (8 elements per byte)."""
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    x = tl.load(X + offs, mask=ok, other=0)
    mag = x & MAG
    nan = mag > INF
    neg = x < 0
    lt0 = neg & (mag != 0) & (nan == 0)
    le0 = (neg & (nan == 0)) | (x == 0)  # past the end x is 0: the padding bits are 0
    zeroed = lt0 if KEEP_NEG_ZERO else neg & (nan == 0)  # -0.0 kept or made +0.0, as torch's relu
    tl.store(R + offs, tl.where(zeroed, 0, x).to(x.dtype), mask=ok)
    bits = tl.reshape(tl.where(le0, 0, 1).to(tl.int32), (BLOCK // 8, 8))
    byte = tl.sum(bits << tl.arange(0, 8)[None, :], axis=1)
    boffs = pid * (BLOCK // 8) + tl.arange(0, BLOCK // 8)
    tl.store(P + boffs, byte.to(tl.uint8), mask=boffs < n_bytes)


@triton.jit
def _relu_bwd_kernel(G, P, DX, n, BLOCK: tl.constexpr):
    """``dh = g`` where the element's bit is set, ``+0`` elsewhere (a selection of bits)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    g = tl.load(G + offs, mask=ok, other=0)
    byte = tl.load(P + offs // 8, mask=ok, other=0).to(tl.int32)
    bit = (byte >> (offs % 8).to(tl.int32)) & 1
    tl.store(DX + offs, tl.where(bit != 0, g, 0).to(g.dtype), mask=ok)


_NEGATIVE_ZERO_KEPT: dict[str, bool] = {}


def keeps_negative_zero(device: torch.device) -> bool:
    """Whether torch's ``relu(-0.0)`` is ``-0.0`` (not ``+0.0``) on ``device``'s type; asked once per type."""
    kept = _NEGATIVE_ZERO_KEPT.get(device.type)
    if kept is None:
        kept = bool(torch.signbit(torch.relu(torch.tensor(-0.0, device=device))))
        _NEGATIVE_ZERO_KEPT[device.type] = kept
    return kept


def packed_numel(n: int) -> int:
    """The bytes of the packed mask of ``n`` elements: ``ceil(n / 8)``."""
    return cdiv(n, 8)


def _check_block(block_size: object) -> int:
    if not isinstance(block_size, int) or block_size < 8 or block_size & (block_size - 1):
        raise ValueError(f"block_size must be a power of two >= 8, got {block_size!r}")
    return block_size


def _check_dtype(name: str, t: torch.Tensor) -> tuple:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__qualname__}")
    if t.dtype not in _BITS:
        raise TypeError(f"{name} has dtype {t.dtype}; the ReLU kernel supports float16, bfloat16, float32")
    return _BITS[t.dtype]


def relu_forward(h: torch.Tensor, block_size: int = DEFAULT_BLOCK_SIZE) -> tuple[torch.Tensor, torch.Tensor]:
    """``(relu(h), packed)``: ``relu(h)`` contiguous, with ``h``'s shape and dtype, bit for bit torch's
    ``F.relu`` but NaN payloads (module docstring; Ojas.ReLU.KernelBits.kernel_relu_eq, with ``-0.0``
    kept; where torch's relu gives ``+0.0`` for it the kernel does too, not covered by the theorem),
    and the mask ``not (h <= 0)`` (Ojas.ReLU.KernelBits.kernel_mask_eq) as ``ceil(h.numel() / 8)``
    uint8 bytes (the layout of ``pack`` in rocq/ReLU/Backward.v: Ojas.ReLU.Backward.unpack_pack; the
    Triton program's packing by a reshape and a sum of shifted bits is tested, not proved)."""
    int_dtype, mag, inf = _check_dtype("h", h)
    _check_block(block_size)
    h = h.contiguous()
    r = torch.empty_like(h)
    n = h.numel()
    packed = torch.empty(packed_numel(n), dtype=torch.uint8, device=h.device)
    if n:
        fast(_relu_fwd_kernel)[(cdiv(n, block_size),)](
            h.view(int_dtype),
            r.view(int_dtype),
            packed,
            n,
            packed.numel(),
            BLOCK=block_size,
            MAG=mag,
            INF=inf,
            KEEP_NEG_ZERO=keeps_negative_zero(h.device),
        )
    return r, packed


def relu_backward(grad: torch.Tensor, packed: torch.Tensor, block_size: int = DEFAULT_BLOCK_SIZE) -> torch.Tensor:
    """``dh`` from the incoming gradient and the packed mask alone: ``grad`` where the bit is set, ``+0``
    elsewhere (``Ojas.ReLU.KernelBits.kernel_packed_backward_bitwise``: torch's ``threshold_backward`` bit for
    bit); contiguous, ``grad``'s shape and dtype."""
    int_dtype, _, _ = _check_dtype("grad", grad)
    _check_block(block_size)
    if not isinstance(packed, torch.Tensor) or packed.dtype != torch.uint8 or packed.dim() != 1:
        raise TypeError("packed must be a 1-D uint8 tensor (the mask relu_forward returned)")
    n = grad.numel()
    if packed.numel() != packed_numel(n) or packed.device != grad.device:
        raise ValueError(
            f"packed has {packed.numel()} bytes on {packed.device}; a gradient of {n} elements on "
            f"{grad.device} needs {packed_numel(n)} there"
        )
    grad, packed = grad.contiguous(), packed.contiguous()
    dx = torch.empty_like(grad)
    if n:
        fast(_relu_bwd_kernel)[(cdiv(n, block_size),)](
            grad.view(int_dtype), packed, dx.view(int_dtype), n, BLOCK=block_size
        )
    return dx
