"""SwiGLU in Triton: ``h = silu(a) * b`` forward, and a backward from ``(a, b, dh)`` alone.

The forward saves nothing of its own: the backward kernel recomputes ``silu(a)`` and
``sigmoid(a)`` from the gate ``a``, so autograd keeps two ``[tokens, intermediate]``
tensors (``a`` and ``b``) where ``F.silu(a) * b`` keeps three (``a``, ``b`` and
``silu(a)``).  Over the reals the backward is the vector-Jacobian product of
``silu(a) * b`` (theorem ``Ojas.SwiGLU.Backward.swiglu_backward_eq_vjp``):

    s  = sigmoid(a)
    da = dh * b * s * (1 + a * (1 - s))
    db = dh * silu(a)  (= dh * a * s)

No theorem covers the rounding.  The kernels round where torch's autograd of
``F.silu(a) * b`` rounds (every operation in float32, results rounded to the input
dtype T at the same points; the ``_round`` helper):

* forward: ``silu(a) = a / (1 + exp(-a))`` in float32 (torch's CUDA and CPU silu
  kernels), rounded to T; then ``h = rnd_T(rnd_T(silu(a)) * b)``, the second rounding
  of torch's ``mul`` (the float32 product of two bfloat16 or float16 numbers is exact,
  so ``h`` is rounded once from the exact product, as torch).
* backward: torch's ``mul`` backward gives ``g = rnd_T(dh * b)`` (the gradient reaching
  ``silu``) and ``db = rnd_T(dh * rnd_T(silu(a)))`` (the saved ``silu(a)`` is the
  rounded one); ``silu_backward(g, a)`` computes ``s = 1 / (1 + exp(-a))`` and
  ``da = rnd_T(g * s * (1 + a * (1 - s)))`` in float32, in that order.

On CUDA ``exp`` is libdevice's ``expf`` (what torch's kernels call; ``tl.exp`` is an
approximate ``ex2``) and the divisions are IEEE-rounded (``div_rn``; Triton's ``/`` is
not), so the forward reproduces torch's operations one for one.  What can still differ:
the compilers may contract ``1 + a * (1 - s)`` into a fused multiply-add differently
(nvcc and Triton both contract by default), so ``da`` may differ from torch's in the
last bit of the float32 value before rounding to T.  Under ``TRITON_INTERPRET=1`` (CPU)
``exp`` is numpy's and torch's CPU kernels use SLEEF's or MKL's; they differ in the last
float32 bit for some inputs, which changes a 16-bit result only when a value sits at a
rounding boundary (then ``da`` by one unit, ``h`` and ``db``, products of the rounded
silu, by up to three; a few in 10^4 elements).  torch's CPU float16 ``silu_backward``
rounds intermediates to float16; its CUDA kernel, which this follows, does not.  The
interpreter rounds float32 to bfloat16 toward zero (also with ``fp_downcast_rounding="rtne"``),
so there ``_round`` rounds to nearest-even by integer arithmetic, and the loads and stores
convert bfloat16 by bit shifts (``_to_float32``, ``_cast``: the interpreter mishandles
bfloat16 subnormals; kernels/rounding.py).

Layout: any shape, flattened into contiguous 1-D blocks of ``block_size`` elements
(non-contiguous inputs are copied); dtypes float16, bfloat16, float32.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from .host import cdiv
from .launch import fast
from .rounding import _INTERPRETED, _cast, _round, _to_float32

__all__ = ["DEFAULT_BLOCK_SIZE", "swiglu_forward", "swiglu_backward"]

DEFAULT_BLOCK_SIZE = 1024  # elements per program; untuned
_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@triton.jit
def _exp(x):
    """``expf``: libdevice's on CUDA (torch's), numpy's in the interpreter (which has no libdevice)."""
    if _INTERPRETED:
        return tl.exp(x)
    else:
        return libdevice.exp(x)


@triton.jit
def _swiglu_fwd_kernel(A, B, H, n, BLOCK: tl.constexpr):
    """``h = rnd(rnd(silu(a)) * b)`` on one block."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    a = _to_float32(tl.load(A + offs, mask=ok, other=0.0))
    b = _to_float32(tl.load(B + offs, mask=ok, other=0.0))
    dtype = H.dtype.element_ty
    silu = _round(tl.math.div_rn(a, 1.0 + _exp(-a)), dtype)
    tl.store(H + offs, _cast(_round(silu * b, dtype), dtype), mask=ok)


@triton.jit
def _swiglu_bwd_kernel(A, B, DH, DA, DB, n, BLOCK: tl.constexpr):
    """``da = rnd(g * s * (1 + a (1 - s)))`` with ``g = rnd(dh * b)``, ``db = rnd(dh * rnd(silu(a)))``."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    a = _to_float32(tl.load(A + offs, mask=ok, other=0.0))
    b = _to_float32(tl.load(B + offs, mask=ok, other=0.0))
    dh = _to_float32(tl.load(DH + offs, mask=ok, other=0.0))
    dtype = DA.dtype.element_ty
    denom = 1.0 + _exp(-a)
    g = _round(dh * b, dtype)
    s = tl.math.div_rn(1.0, denom)
    da = g * s * (1.0 + a * (1.0 - s))
    silu = _round(tl.math.div_rn(a, denom), dtype)
    tl.store(DA + offs, _cast(_round(da, dtype), dtype), mask=ok)
    tl.store(DB + offs, _cast(_round(dh * silu, dtype), dtype), mask=ok)


def _check(**tensors: torch.Tensor) -> torch.Tensor:
    """The first tensor, after checking that all share its shape, dtype (a kernel dtype) and device."""
    (name0, t0), *rest = tensors.items()
    if t0.dtype not in _DTYPES:
        raise TypeError(f"{name0} has dtype {t0.dtype}; the SwiGLU kernel supports float16, bfloat16, float32")
    for name, t in rest:
        if t.shape != t0.shape or t.dtype != t0.dtype or t.device != t0.device:
            raise ValueError(f"{name} ({tuple(t.shape)}, {t.dtype}, {t.device}) must match {name0} "
                             f"({tuple(t0.shape)}, {t0.dtype}, {t0.device})")
    return t0


def swiglu_forward(a: torch.Tensor, b: torch.Tensor, block_size: int = DEFAULT_BLOCK_SIZE) -> torch.Tensor:
    """``silu(a) * b``, rounded as torch's ``F.silu(a) * b`` (module docstring); contiguous output."""
    _check(a=a, b=b)
    a, b = a.contiguous(), b.contiguous()
    h = torch.empty_like(a)
    n = a.numel()
    if n:
        fast(_swiglu_fwd_kernel)[(cdiv(n, block_size),)](a, b, h, n, BLOCK=block_size)
    return h


def swiglu_backward(a: torch.Tensor, b: torch.Tensor, grad_h: torch.Tensor,
                    block_size: int = DEFAULT_BLOCK_SIZE) -> tuple[torch.Tensor, torch.Tensor]:
    """``(da, db)`` of ``h = silu(a) * b`` from ``a``, ``b`` and ``dh`` alone, silu and sigmoid recomputed
    (Ojas.SwiGLU.Backward.swiglu_backward_eq_vjp over the reals; rounding as torch's autograd,
    module docstring)."""
    _check(a=a, b=b, grad_h=grad_h)
    a, b, grad_h = a.contiguous(), b.contiguous(), grad_h.contiguous()
    da, db = torch.empty_like(a), torch.empty_like(b)
    n = a.numel()
    if n:
        fast(_swiglu_bwd_kernel)[(cdiv(n, block_size),)](a, b, grad_h, da, db, n, BLOCK=block_size)
    return da, db
