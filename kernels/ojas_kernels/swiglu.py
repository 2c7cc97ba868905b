"""SwiGLU and GeGLU in Triton: ``h = act(a) * b`` forward, and a backward from ``(a, b, dh)`` alone.

``act`` is a ``tl.constexpr`` of the two kernels: "silu" (SwiGLU) or "gelu_tanh" (GeGLU, torch's
``F.gelu(x, approximate="tanh")``).  The forward saves nothing of its own: the backward kernel
recomputes the activation from the gate ``a``, so autograd keeps two ``[tokens, intermediate]``
tensors (``a`` and ``b``) where ``act(a) * b`` keeps three (``a``, ``b`` and ``act(a)``).  Over
the reals the backward is the vector-Jacobian product of ``act(a) * b`` (theorems
``Ojas.SwiGLU.Backward.swiglu_backward_eq_vjp`` and ``Ojas.SwiGLU.Backward.geglu_tanh_backward_eq_vjp``):

    silu:       s = sigmoid(a),  da = dh * b * s * (1 + a * (1 - s)),  db = dh * a * s
    gelu_tanh:  T = tanh(k (a + c a^3)),  da = dh * b * (1/2 (1 + T) + 1/2 a (1 - T^2) k (1 + 3 c a^2)),
                db = dh * a / 2 * (1 + T)        (k = sqrt(2 / pi), c = 0.044715)

No theorem covers the rounding.  The kernels round where torch's autograd of ``act(a) * b``
rounds (every operation in float32, results rounded to the input dtype T at the same points;
the ``_round`` helper):

* forward: ``act(a)`` in float32 as torch's CUDA kernel computes it, rounded to T; then
  ``h = rnd_T(rnd_T(act(a)) * b)``, the second rounding of torch's ``mul`` (the float32
  product of two bfloat16 or float16 numbers is exact, so ``h`` is rounded once from the
  exact product, as torch).  silu: ``a / (1 + exp(-a))`` (torch's CUDA and CPU silu kernels);
  gelu_tanh: ``(0.5 * a) * (1 + tanh(K * (a + C * ((a * a) * a))))`` (torch's
  ``GeluCUDAKernelImpl``), with torch's float32 constants ``K = float32(sqrt(2) * 2/sqrt(pi) * 0.5)``
  and ``C = float32(0.044715)``.
* backward: torch's ``mul`` backward gives ``g = rnd_T(dh * b)`` (the gradient reaching the
  activation) and ``db = rnd_T(dh * rnd_T(act(a)))`` (the saved ``act(a)`` is the rounded
  one); the activation's backward computes, in float32 and in this order, silu
  (``silu_backward``): ``s = 1 / (1 + exp(-a))``, ``da = rnd_T(g * s * (1 + a * (1 - s)))``;
  gelu_tanh (``GeluBackwardCUDAKernelImpl``): ``T = tanh(K * (a + C * ((a * a) * a)))``,
  ``da = rnd_T(g * (0.5 * (1 + T) + (0.5 * a) * (1 - T * T) * (K * (1 + C3 * (a * a)))))`` with
  ``C3 = float32(3 * C)``.

On CUDA ``exp`` and ``tanh`` are libdevice's ``expf`` and ``tanhf`` (what torch's kernels call;
``tl.exp`` is an approximate ``ex2``) and the divisions are IEEE-rounded (``div_rn``; Triton's
``/`` is not), so the silu forward reproduces torch's operations one for one.  What can still
differ: the compilers may contract products and sums into fused multiply-adds differently (nvcc
and Triton both contract by default): silu's ``1 + a * (1 - s)``, and in gelu_tanh ``a + C * a^3``
(forward and backward), ``1 - T * T`` and ``1 + C3 * a^2`` (backward) and the sum of the two
terms of the derivative, so a gelu_tanh ``h`` and ``db`` (through ``T``) and any ``da`` may
differ from torch's in the last bit of the float32 value before rounding to T.  The launches
pass ``enable_fp_fusion=True`` (Triton 3.9's default, which Triton 3.10 turns off), so that the
products the sm_90 code fuses are fixed: those just listed, the derivative's sum as
``fma(1 + T, 0.5, P)`` (``ojas_ref.verification.kernel_schedule_rowwise`` models them); and
libdevice's ``tanhf`` is assumed to be the CUDA math library's that torch calls (not measured
here: no GPU run yet).  Under ``TRITON_INTERPRET=1`` (CPU), which has no libdevice, ``exp`` is
numpy's and ``tanh`` is
``1 - 2 / (exp(2x) + 1)`` in float64 rounded to float32 (nearly always the correctly rounded
``tanhf``); torch's CPU kernels use SLEEF's or MKL's ``expf`` and ``tanhf`` (within an ulp),
which changes a 16-bit result only when a value sits at a rounding boundary (then ``da`` by
one unit, ``h`` and ``db``, products of the rounded activation, by up to three; a few in 10^4
elements).  For gelu_tanh of a gate below about -4, ``1 + T`` cancels (torch's too): an ulp of
``T`` is then a large part of ``h``, so there float32 results are compared on the scale of
``|a b|``.  torch's CPU float16 ``silu_backward`` rounds intermediates to float16; its CUDA
kernel, which this follows, does not.  The interpreter rounds float32 to bfloat16 toward zero
(also with ``fp_downcast_rounding="rtne"``), so there ``_round`` rounds to nearest-even by
integer arithmetic, and the loads and stores convert bfloat16 by bit shifts (``_to_float32``,
``_cast``: the interpreter mishandles bfloat16 subnormals; kernels/ojas_kernels/rounding.py).

Layout: any shape, flattened into contiguous 1-D blocks of ``block_size`` elements
(non-contiguous inputs are copied); dtypes float16, bfloat16, float32.

Under torch.compile (and torch.export) these kernels run as two custom operators,
``ojas::swiglu_forward`` and ``ojas::swiglu_backward``, registered next to their
``autograd.Function`` in ``ojas_ref.functional.swiglu`` (``ojas_kernels.host.define_op``, opaque
to Dynamo and Inductor, with fake implementations; no autograd of their own: under torch.compile
the Function calls the forward op in its forward and the backward op in its backward).  They
call :func:`swiglu_forward` and :func:`swiglu_backward` with the same arguments as the eager
path (default ``block_size``), so the theorems above apply unchanged.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from .host import cdiv
from .launch import fast
from .rounding import _INTERPRETED, _cast, _round, _to_float32

__all__ = ["ACTIVATIONS", "DEFAULT_BLOCK_SIZE", "swiglu_forward", "swiglu_backward"]

DEFAULT_BLOCK_SIZE = 1024  # elements per program; untuned
ACTIVATIONS = ("silu", "gelu_tanh")
_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

# torch's float32 constants of the tanh approximation of gelu (kBeta, kKappa, 3 * kKappa)
_K = tl.constexpr(float(np.float32(math.sqrt(2.0) * (2.0 / math.sqrt(math.pi)) * 0.5)))
_C = tl.constexpr(float(np.float32(0.044715)))
_C3 = tl.constexpr(float(np.float32(3.0) * np.float32(0.044715)))


@triton.jit
def _exp(x):
    """``expf``: libdevice's on CUDA (torch's), numpy's in the interpreter (which has no libdevice)."""
    if _INTERPRETED:
        return tl.exp(x)
    else:
        return libdevice.exp(x)


@triton.jit
def _tanh(x):
    """``tanhf``: libdevice's on CUDA (torch's); in the interpreter ``1 - 2 / (exp(2x) + 1)`` in
    float64, rounded to float32 (absolute error ~1e-16 before the rounding; ``x`` clamped to
    [-40, 40], where tanh is +-1 in float64, so that exp does not overflow; NaN kept)."""
    if _INTERPRETED:
        y = x.to(tl.float64)
        y = tl.where(y > 40.0, 40.0, tl.where(y < -40.0, -40.0, y))
        return (1.0 - 2.0 / (tl.exp(2.0 * y) + 1.0)).to(tl.float32)
    else:
        return libdevice.tanh(x)


@triton.jit
def _activation(a, ACT: tl.constexpr):
    """``act(a)`` in float32, in torch's order of operations (module docstring; a constant times a
    tensor is written tensor first, the same IEEE product, as the interpreter keeps a constexpr
    on the left a constexpr)."""
    if ACT == "gelu_tanh":
        return (0.5 * a) * (1.0 + _tanh((a + ((a * a) * a) * _C) * _K))
    else:
        return tl.math.div_rn(a, 1.0 + _exp(-a))


@triton.jit
def _activation_backward(a, g, ACT: tl.constexpr):
    """``(act(a), g * act'(a))`` in float32, in the order of torch's forward and backward kernels."""
    if ACT == "gelu_tanh":
        a2 = a * a
        t = _tanh((a + (a2 * a) * _C) * _K)
        left = 0.5 * a
        right = 1.0 + t
        return left * right, g * (0.5 * right + left * (1.0 - t * t) * ((1.0 + a2 * _C3) * _K))
    else:
        denom = 1.0 + _exp(-a)
        s = tl.math.div_rn(1.0, denom)
        return tl.math.div_rn(a, denom), g * s * (1.0 + a * (1.0 - s))


@triton.jit
def _swiglu_fwd_kernel(A, B, H, n, BLOCK: tl.constexpr, ACT: tl.constexpr):
    """``h = rnd(rnd(act(a)) * b)`` on one block."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    a = _to_float32(tl.load(A + offs, mask=ok, other=0.0))
    b = _to_float32(tl.load(B + offs, mask=ok, other=0.0))
    dtype = H.dtype.element_ty
    act = _round(_activation(a, ACT), dtype)
    tl.store(H + offs, _cast(_round(act * b, dtype), dtype), mask=ok)


@triton.jit
def _swiglu_bwd_kernel(A, B, DH, DA, DB, n, BLOCK: tl.constexpr, ACT: tl.constexpr):
    """``da = rnd(g * act'(a))`` with ``g = rnd(dh * b)``, ``db = rnd(dh * rnd(act(a)))``."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    a = _to_float32(tl.load(A + offs, mask=ok, other=0.0))
    b = _to_float32(tl.load(B + offs, mask=ok, other=0.0))
    dh = _to_float32(tl.load(DH + offs, mask=ok, other=0.0))
    dtype = DA.dtype.element_ty
    act, da = _activation_backward(a, _round(dh * b, dtype), ACT)
    tl.store(DA + offs, _cast(_round(da, dtype), dtype), mask=ok)
    tl.store(DB + offs, _cast(_round(dh * _round(act, dtype), dtype), dtype), mask=ok)


def _check(activation: object, a: torch.Tensor, *others: tuple[str, torch.Tensor]) -> None:
    """Check ``activation`` and that every ``(name, tensor)`` of ``others`` shares ``a``'s shape,
    dtype (a kernel dtype) and device."""
    if not isinstance(activation, str) or activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    if a.dtype not in _DTYPES:
        raise TypeError(f"a has dtype {a.dtype}; the SwiGLU kernel supports float16, bfloat16, float32")
    for name, t in others:
        if t.shape != a.shape or t.dtype != a.dtype or t.device != a.device:
            raise ValueError(
                f"{name} ({tuple(t.shape)}, {t.dtype}, {t.device}) must match a "
                f"({tuple(a.shape)}, {a.dtype}, {a.device})"
            )


def swiglu_forward(
    a: torch.Tensor, b: torch.Tensor, block_size: int = DEFAULT_BLOCK_SIZE, *, activation: str = "silu"
) -> torch.Tensor:
    """``act(a) * b`` (``activation`` "silu" or "gelu_tanh"), rounded as torch's ``F.silu(a) * b`` or
    ``F.gelu(a, approximate="tanh") * b`` (module docstring); contiguous output."""
    _check(activation, a, ("b", b))
    a, b = a.contiguous(), b.contiguous()
    h = torch.empty_like(a)
    n = a.numel()
    if n:
        fast(_swiglu_fwd_kernel)[(cdiv(n, block_size),)](
            a, b, h, n, BLOCK=block_size, ACT=activation, enable_fp_fusion=True
        )
    return h


def swiglu_backward(
    a: torch.Tensor,
    b: torch.Tensor,
    grad_h: torch.Tensor,
    block_size: int = DEFAULT_BLOCK_SIZE,
    *,
    activation: str = "silu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(da, db)`` of ``h = act(a) * b`` from ``a``, ``b`` and ``dh`` alone, the activation recomputed
    (over the reals Ojas.SwiGLU.Backward.swiglu_backward_eq_vjp for silu,
    Ojas.SwiGLU.Backward.geglu_tanh_backward_eq_vjp for gelu_tanh; rounding as torch's autograd,
    module docstring)."""
    _check(activation, a, ("b", b), ("grad_h", grad_h))
    a, b, grad_h = a.contiguous(), b.contiguous(), grad_h.contiguous()
    da, db = torch.empty_like(a), torch.empty_like(b)
    n = a.numel()
    if n:
        fast(_swiglu_bwd_kernel)[(cdiv(n, block_size),)](
            a, b, grad_h, da, db, n, BLOCK=block_size, ACT=activation, enable_fp_fusion=True
        )
    return da, db
