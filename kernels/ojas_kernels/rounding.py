"""Rounding float32 values to a kernel's storage dtype as torch rounds them (nearest-even).

Shared by the kernels that reproduce torch's op-by-op rounding (``swiglu``, ``rope``).  On CUDA
``x.to(tl.bfloat16)`` / ``x.to(tl.float16)`` round to nearest-even.  Under ``TRITON_INTERPRET=1``
(CPU) the float32 -> bfloat16 conversion rounds toward zero (also with
``fp_downcast_rounding="rtne"``), so there :func:`_round` rounds to nearest-even by integer
arithmetic on the float32 bits (NaN kept; a finite value past bfloat16's largest rounds to inf,
as the hardware conversion does); numpy's float32 -> float16 conversion already rounds to
nearest-even.

The interpreter's bfloat16 <-> float32 conversions are also wrong for subnormal numbers (its
generic bit-field conversion renormalizes a bfloat16 subnormal to an exponent float32 does not
have, then clamps it: 1e-39 comes back as 4.4e-39).  bfloat16 is float32's upper half, so
:func:`_to_float32` (after a load) and :func:`_cast` (before a store of a value ``_round`` made
representable) convert by shifting the bits there; on CUDA they are the plain conversions.
"""

from __future__ import annotations

import os

import triton
import triton.language as tl

__all__ = ["_INTERPRETED", "_cast", "_round", "_to_float32"]

_INTERPRETED = tl.constexpr(os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes"))


@triton.jit
def _round(x, dtype: tl.constexpr):
    """The float32 ``x`` rounded to nearest-even in ``dtype``, returned as float32."""
    if dtype == tl.float32:
        return x
    elif dtype == tl.bfloat16:
        if _INTERPRETED:
            bits = x.to(tl.uint32, bitcast=True)
            rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
            return tl.where(x != x, x, rounded.to(tl.float32, bitcast=True))
        else:
            return x.to(tl.bfloat16).to(tl.float32)
    else:
        return x.to(dtype).to(tl.float32)


@triton.jit
def _to_float32(x):
    """``x`` (a block of float16, bfloat16 or float32) in float32, exactly (subnormals included)."""
    if _INTERPRETED and x.dtype == tl.bfloat16:
        return (x.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
    else:
        return x.to(tl.float32)


@triton.jit
def _cast(x, dtype: tl.constexpr):
    """The float32 ``x``, representable in ``dtype`` (a result of :func:`_round`), as ``dtype``."""
    if _INTERPRETED and dtype == tl.bfloat16:
        return (x.to(tl.uint32, bitcast=True) >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        return x.to(dtype)
