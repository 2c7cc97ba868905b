"""The matrix products of the Triton linear cross-entropy that run in torch (cuBLAS on CUDA, the
CPU BLAS under the interpreter): ``_mm_into``, ``_mm_f32`` and ``_addmm_into``, with float32
accumulation and one rounding of the result.

Precision of the products.  Every product accumulates in float32.  3 products: the logits x
W^T (cuBLAS, ``_mm_into``, rounded to the input dtype), grad_input = w G W and grad_weight +=
w G^T H (cuBLAS, ``_addmm_into``).  4 products: the forward's and the backward's logits
(Triton dots of ``_logits_kernel``, or cuBLAS with ``fwd_logits`` / ``bwd_logits`` "cublas"),
grad_input rows G W and grad_weight G^T H (cuBLAS, ``_mm_f32`` / ``_mm_into``).
float16/bfloat16 operands multiply exactly, and cuBLAS's reduced-precision (half) reductions
are turned off (``_float32_reductions``).  float32 operands, Triton dots and cuBLAS alike,
follow torch's own float32 matmul setting (``_dot_precision`` of
kernels/ojas_kernels/attention_args.py): TF32 under ``torch.set_float32_matmul_precision("high")``
or ``"medium"`` (or ``torch.backends.cuda.matmul.allow_tf32 = True``), IEEE under
``"highest"``, torch's default.  Under the CPU interpreter the Triton dots go through float32
and IEEE (``_UPCAST_DOTS`` of kernels/ojas_kernels/attention_tiles.py), the torch products are
CPU matmuls.

In the rounding theorems these products are float32 sums of exact products within an
any-order ``gamma_n`` (a premise of ``Ojas.LinearCrossEntropy.Float.GradError.ce_dh_error`` /
``ce_dw_error`` and ``Ojas.LinearCrossEntropy.Float.WeightedGradError.ce_dw4_error``), then one
rounding (the alpha epilogue of ``_addmm_into`` included).  No theorem covers the order of the
sums inside cuBLAS / the CPU BLAS, nor TF32 products.
"""

from __future__ import annotations

import contextlib
import warnings

import torch


@contextlib.contextmanager
def _float32_reductions(device: torch.device):
    """cuBLAS products of float16/bfloat16 operands with float32 reductions (no
    half-precision split-K sums); float32 products are left to torch's TF32 setting,
    which the Triton dots follow too (``_dot_precision``)."""
    if device.type != "cuda":
        yield
        return
    mm = torch.backends.cuda.matmul
    saved = (mm.allow_fp16_reduced_precision_reduction, mm.allow_bf16_reduced_precision_reduction)
    mm.allow_fp16_reduced_precision_reduction = False
    mm.allow_bf16_reduced_precision_reduction = False
    try:
        yield
    finally:
        mm.allow_fp16_reduced_precision_reduction, mm.allow_bf16_reduced_precision_reduction = saved


_OUT_DTYPE_OK = [True]  # torch.mm(out_dtype=) works here (CUDA, torch >= 2.8)


def _mm_into(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """out = a @ b with float32 accumulation, rounded once to out's dtype (float32 or
    a's dtype; out contiguous).  cuBLAS: float32 operands in TF32 or IEEE as torch's
    setting says (as ``_dot_precision``), 16-bit ones with float32 reductions; on the CPU
    (the interpreter's runs) torch's float32 matmul."""
    if not a.is_cuda:
        out.copy_(torch.mm(a.float(), b.float()))
        return
    with _float32_reductions(a.device):
        if out.dtype == a.dtype:
            torch.mm(a, b, out=out)
            return
        if _OUT_DTYPE_OK[0]:
            try:
                torch.mm(a, b, out_dtype=out.dtype, out=out)
                return
            except (RuntimeError, TypeError) as err:
                _OUT_DTYPE_OK[0] = False
                warnings.warn(f"torch.mm(out_dtype=float32) failed ({err}); rounding through {a.dtype}")
        out.copy_(torch.mm(a, b))


def _mm_f32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b in float32 (float32 accumulation and output)."""
    out = torch.empty(a.shape[0], b.shape[1], dtype=torch.float32, device=a.device)
    _mm_into(out, a, b)
    return out


def _addmm_into(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, alpha: float, beta: float) -> None:
    """out = alpha a @ b + beta out, the product accumulated in float32 and the sum
    rounded once to out's dtype (cuBLAS's epilogue; emulated so on the CPU); precision
    as ``_mm_into``."""
    if not a.is_cuda:
        acc = torch.mm(a.float(), b.float()).mul_(alpha)
        out.copy_(acc.add_(out.float(), alpha=beta) if beta else acc)
        return
    with _float32_reductions(a.device):
        torch.addmm(out, a, b, beta=beta, alpha=alpha, out=out)
