"""Chunked linear cross-entropy in Triton: forward and backward.

Semantics are those of ``ojas_ref.linear_cross_entropy`` (the PyTorch reference):
logits ``z = softcap(x W^T + b)``, per-token loss

    (1 - eps) (lse - z_t) + eps (lse - mean_v z_v) + lam lse^2,

ignored tokens dropped, reductions "none" / "sum" / "mean" (over the kept tokens,
0 when none is kept).  The algorithm is ``ce_forward`` / ``ce_output`` /
``ce_backward`` of ``rocq/CrossEntropy/Definitions.v`` with a particular choice of
chunks; the theorems it relies on (over the reals):

* ``Ojas.CrossEntropy.ChunkedLse.merge_chunks_lse`` and ``chunked_lse_app_merge``:
  one online-softmax state (max, sum) per group of vocabulary tiles, merged in any
  order (``merge`` of ``rocq/Attention/Merge.v``), gives lse = ln sum_v exp z_v.  The
  forward logits kernel streams its tiles with ``block_step`` (``chunked_lse_chunk``)
  and writes one state per (token, group); the row kernel merges them.
* ``Ojas.CrossEntropy.Loss.vocab_loop_correct`` / ``token_forward_correct``: the
  per-token loss from the lse, the target logit and the logit sum.
* ``Ojas.CrossEntropy.Reduction.ce_drop_ignored`` (tokens whose target is
  ``ignore_index`` are removed before any matrix product, in every schedule, so they
  cost no product: only the gather of the kept rows and the scatter of their gradient
  rows) and ``ignored_grad_zero`` (their rows of grad_input are 0),
  ``ce_loss_correct`` (sum, mean over the kept count) and ``ce_mean_all_ignored``
  (mean over no kept token is 0).
* ``Ojas.CrossEntropy.Gradient.ce_backward_correct`` (grad_input = G W,
  grad_weight = G^T H, grad_bias = colsum G for any token and vocabulary chunks) and
  ``grad_entry_is_derive`` (G_nv = token weight x dlogit x softcap', the derivative of
  the loss with respect to the raw logit).
* ``Ojas.CrossEntropy.EndToEnd.ce_grad_input_is_derive``,
  ``Ojas.CrossEntropy.EndToEnd.ce_grad_weight_is_derive``,
  ``Ojas.CrossEntropy.EndToEnd.ce_grad_bias_is_derive`` and
  ``Ojas.CrossEntropy.EndToEnd.ce_backward_is_gradient``: for any token and vocabulary
  chunks, ``ce_backward`` fed with the lses and kept count that ``ce_forward`` streams
  returns the partial derivatives of the reduced loss ("none": of
  sum_k grad_output_k loss_k) in H, W and b, soft cap, smoothing, z-loss and ignored
  tokens included; ``Ojas.CrossEntropy.EndToEnd.ce_all_ignored_grads_zero``: with every
  token ignored, the loss ("sum" / "mean") and every gradient entry are 0.  Not covered
  by a theorem: this kernel's rounding (below); computing gradients with upstream
  gradient 1 in the forward and multiplying them by grad_output in the backward (both
  schedules; equal over the reals by linearity, not stated in Coq); the forward's
  merge of per-group states (exact by ``merge_chunks_lse``, but the end-to-end
  theorems are stated for ``ce_forward``'s streamed states); and for "none" the
  gradients over the kept tokens only (``ce_drop_ignored`` is for "sum" / "mean").

Design
------
The [N, V] logits never exist.  G (the gradient with respect to the logits) is
reduced over the vocabulary for grad_input and over the tokens for grad_weight.
Ignored tokens are removed before any product in every schedule (``ce_drop_ignored``),
so with half the tokens ignored the products do half the work: the kept tokens' rows
of the input are gathered (per token chunk, into the workspace, or once for the
4-product backward) and their rows of grad_input scattered into a zeroed grad_input
(the ignored rows 0: ``ignored_grad_zero``).  Two schedules
(``LinearCrossEntropyConfig.products``):

* **3 products** (the default, reductions "mean" and "sum"; ``_three_products``):
  Liger-Kernel's schedule.  The forward goes over chunks of kept tokens, each
  against the whole vocabulary: logits of the chunk by cuBLAS in the input dtype
  (rounded as ``F.linear`` rounds them), ``_rows_kernel`` streams each row
  (``block_step``), stores lse and loss and writes G over the logits in place,
  then grad_weight += w G^T H and grad_input rows = w G W (one product over the whole
  vocabulary, rounded once; w: the token weight, 1 / kept for "mean").
  The backward multiplies the gradients by grad_output (``_scale_kernel``: no
  sync, and no work for 1, the usual ``loss.backward()``).  Each logit is
  computed once, so grad_weight is summed across token chunks in its own dtype:
  one rounding per chunk (about K / chunk of them; 26 at N = 16384,
  V = 128256), each chunk's product accumulated in float32.  A float32 accumulator instead would take 2 x the
  bytes of a bf16 W, over the memory bound.  Workspace: one chunk's logits/G (and, with
  ignored tokens, its gathered rows of the input, which then take its rows of grad_input
  before the scatter), ``workspace_fraction`` of the gradients' bytes; with every token
  kept, the first chunks may use the rows of grad_input that later chunks write instead
  (larger chunks when V is small).
* **4 products** (reduction "none", whose per-token grad_output must weight G
  before the token sum, and ``products=4``): every gradient is reduced inside one
  product and rounded once, at the price of computing the logits twice.
  *Forward*, token chunks x the whole vocabulary: ``_logits_kernel`` (STATS)
  computes logit tiles (float32 accumulation), streams each program's vocabulary
  tiles through ``block_step`` and writes a partial state (m, l, sum z) per token,
  the target logit, and, when grad_input is needed, the float32 logits of the
  chunk; ``_rows_kernel`` merges the partial states (``merge_chunks_lse``),
  finalises lse and the loss and writes the chunk's rows of G with token weight 1;
  a cuBLAS product G_chunk W gives the chunk's rows of grad_input, multiplied by
  the token weight and rounded once, then by grad_output in the backward.
  *Backward*, vocabulary slabs x all kept tokens: ``_logits_kernel`` (GRAD)
  recomputes the slab's logits and writes G (token weights included);
  grad_weight[slab] = G_slab^T H is one cuBLAS product over all the kept tokens;
  grad_bias[slab] = colsum G_slab.  Workspace: the forward chunk (float32 logits +
  G rows, at most grad_weight's bytes) and the backward slab (G, within
  ``workspace_fraction`` of the gradients' bytes less the kept rows of H gathered
  for the product, 16 MiB at least).

Either way the peak above the inputs is about (1 + workspace_fraction) x the
gradients.  Gradients are exact in the sense that every entry of G enters the
products (no filtering of small entries, unlike Cut Cross-Entropy's default).
float16 G is stored times a power of two (probabilities down to 2^-22 stay normal
numbers), undone in the products.  A second backward through a retained graph
recomputes the gradients the first one handed over, by the same computation
(``_LinearCrossEntropy``).

Precision of the products.  Every product accumulates in float32.  3 products: the
logits x W^T (cuBLAS, ``_mm_into``, rounded to the input dtype), grad_input = w G W
and grad_weight += w G^T H (cuBLAS, ``_addmm_into``).  4 products: the forward's
and the backward's logits (Triton dots of ``_logits_kernel``, or cuBLAS with
``fwd_logits`` / ``bwd_logits`` "cublas"), grad_input rows G W and grad_weight
G^T H (cuBLAS, ``_mm_f32`` / ``_mm_into``).  float16/bfloat16 operands multiply
exactly, and cuBLAS's reduced-precision (half) reductions are turned off
(``_float32_reductions``).  float32 operands, Triton dots and cuBLAS alike, follow
torch's own float32 matmul setting (``_dot_precision`` of kernels/ojas_kernels/attention.py): TF32
under ``torch.set_float32_matmul_precision("high")`` or ``"medium"`` (or
``torch.backends.cuda.matmul.allow_tf32 = True``), IEEE under ``"highest"``, torch's
default.  Under the CPU interpreter the Triton dots go through float32 and IEEE
(``_UPCAST_DOTS`` of kernels/ojas_kernels/attention.py), the torch products are CPU matmuls.
Rounding: ``Ojas.CrossEntropy.Float.LseLossError.ce_lse_error`` (and ``ce_lse_error_up``,
whose value the oracle computes: ``Ojas.Bounds.CrossEntropy.ce_lse_q_sound``) bounds the lse that
``_rows_kernel`` with STREAM computes from the float32 logits it reads (the 3-product
schedule, and ``fwd_logits="cublas"``): the online max and rescaled sum over its
vocabulary tiles in float32, ``tl.exp`` / ``tl.log`` / ``tl.sum`` within stated errors
(Section premises), the logits' own error a premise ``delta``;
``Ojas.CrossEntropy.Float.LseLossError.ce_loss_error`` the loss ``rnd(lse - z_t)``
without smoothing and z-loss (tests/verification/test_linear_cross_entropy_error_bound.py uses them as
tolerances; ``linear_cross_entropy_lse_error_bound`` of ojas_ref/verification/error_bounds.py).
``Ojas.CrossEntropy.Float.LseLossError.ce_lse_error_two_level`` bounds the two-level
schedule (4 products, ``linear_cross_entropy_forward``): ``_logits_kernel`` STATS streaming
each program's group of tiles, ``_rows_kernel`` merging the groups' states
(``linear_cross_entropy_merge_lse_error_bound``, whose value the oracle computes:
``Ojas.Bounds.CrossEntropy.ce_merge_lse_q_sound``).
``Ojas.CrossEntropy.Float.GradError.ce_dh_error`` and ``ce_dw_error`` bound every entry
of the 3-product schedule's grad_input and grad_weight (reductions "mean" / "sum", bfloat16
and float32, no bias, cap, smoothing or z-loss): G = ``rnd_s(tl.exp(rnd(z - lse)))`` (the
target: minus 1 first) stored in the input dtype from the lse above (within its bound), the
products accumulated in float32 (within an any-order ``gamma_n``: a premise), the alpha
epilogue rounded, grad_weight's running sum over the token chunks stored in its dtype per
chunk; a-posteriori in the sums of the exact probabilities (``linear_cross_entropy_grad_error_bound``;
tests/verification/test_linear_cross_entropy_error_bound.py uses it as the tolerance).
``Ojas.CrossEntropy.Float.LossPosteriori.ce_loss_posteriori`` (the loss) and
``Ojas.CrossEntropy.Float.GradPosteriori.ce_gp_dh_error`` / ``ce_gp_dw_error`` (the same
gradient entries) charge the logits' errors weighted by the softmax instead (each entry of G its
own exponent error, ``ce_arg_posteriori``: the lse that the same STREAM/GRAD launch streams from
the same stored logits), tight for confident tokens
(``linear_cross_entropy_loss_posteriori_bound``, ``linear_cross_entropy_grad_posteriori_bound``).
With softcap (``HAS_CAP``, no bias): ``Ojas.CrossEntropy.Float.SoftcapError.ce_lse_error_softcap``,
``ce_loss_error_softcap`` and ``ce_lse_error_two_level_softcap`` bound the lse and loss against
the exact capped logits' (``_softcap`` 1-Lipschitz: ``softcap_lipschitz``; the computed tanh
``_cap_tanh`` within a stated error, a premise; the ``softcap`` argument of the bound functions).
No theorem covers: the order of the sums inside cuBLAS / the CPU BLAS and the Triton dots
(only the classical any-order bound enters ``delta`` and the gradients' ``gd``), TF32 products,
the gradients dH, dW with softcap in the 4-product schedule (the 3-product schedule's:
``Ojas.CrossEntropy.Float.SoftcapGradError.sc_dh_error`` / ``sc_dw_error``, built on the chain
factor's ``Ojas.CrossEntropy.Float.SoftcapError.sc_chain_error``), bias, label smoothing, z-loss, FMA contraction, float16's scaled G, grad_bias and
the 3-product schedule's scaling by grad_output after the fact.
``Ojas.CrossEntropy.Float.WeightedGradError.ce_dw4_error`` bounds every entry of the 4-product
schedule's grad_weight (G = ``rnd_s(rnd(g w_n))``, the float32 token weight inside G, from the
recomputed float32 logits and the merged lse; one product over all kept tokens rounded once)
and ``ce_dh4_error`` its grad_input (the forward's row times grad_output in float32, rounded
once) (``linear_cross_entropy_weighted_dw_error_bound`` / ``_dh_error_bound``; same exclusions).

Options, for tuning (benchmarks/linear_cross_entropy_tuning.md): with 4 products,
the logits through cuBLAS with float32 output, ``_rows_kernel`` then making the
statistics or G from them (``fwd_logits`` / ``bwd_logits`` = "cublas").

torch.compile and torch.export see this kernel as two custom operators,
``ojas::linear_cross_entropy`` and ``ojas::linear_cross_entropy_backward``
(``torch.library.custom_op``, opaque to Dynamo and Inductor, with fake implementations; the
backward registered by ``register_autograd``; section "The registered operators" below): no
graph break, and Inductor neither traces into the kernels nor lowers their launch code.  They
run the eager path's functions (``_three_products``, ``_forward``, ``_backward_weight``,
``_scale_kernel``) with the same arguments, so every theorem above applies unchanged.  Under
compile the op also checks the targets (eagerly ``ojas_ref.linear_cross_entropy`` does, before
dispatching here).  Not under compile: the head updated inside the backward (``head``), which
raises there (``ojas_ref.linear_cross_entropy`` runs it eagerly, behind a graph break).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import warnings
from dataclasses import dataclass
from typing import Optional

import torch
import triton
import triton.language as tl

from .host import cdiv, next_power_of_2
from .launch import fast

from .attention import _dot, _dot_precision

__all__ = [
    "GemmConfig",
    "RowConfig",
    "LinearCrossEntropyConfig",
    "default_config",
    "linear_cross_entropy",
    "linear_cross_entropy_forward",
]

_REDUCTIONS = ("none", "mean", "sum")
_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
# float16 G is stored times a power of two so that probabilities down to 2^-14 / 256
# stay normal numbers (|G| <= 1 + 2 lam |lse| before scaling); undone in float32.
_FP16_HEADROOM = 256.0


@dataclass(frozen=True)
class GemmConfig:
    """Tile shape and launch parameters of ``_logits_kernel``."""

    block_m: int = 128
    block_n: int = 128
    block_k: int = 64
    group_m: int = 8
    num_warps: int = 8
    num_stages: int = 3


@dataclass(frozen=True)
class RowConfig:
    """Tile shape of ``_rows_kernel``: rows per program, vocabulary and partial-state columns per step."""

    block_r: int = 4
    block_v: int = 1024
    block_p: int = 64
    num_warps: int = 4


@dataclass(frozen=True)
class LinearCrossEntropyConfig:
    """Launch parameters and chunking.

    ``token_chunk`` (forward rows per chunk) and ``vocab_slab`` (backward vocabulary
    rows per slab) default to what the workspace budget allows;
    ``tiles_per_program`` (vocabulary tiles streamed by one forward program)
    defaults to the count that wastes least of the last wave of programs;
    ``workspace_fraction`` is the backward slab's budget as a fraction of the
    gradients' bytes; ``fwd_logits`` "cublas" computes the forward's float32 logits
    (when grad_input is needed) with cuBLAS and lets ``_rows_kernel`` stream them
    (one more read of them), "triton" with ``_logits_kernel``, the backward's kernel:
    with "cublas" the backward recomputes logits that differ from the forward's by
    rounding (about |z| 2^-24 sqrt(D) in float32), which shows as relative error in
    gradients that cancel (p_t - 1 of a confident token).  ``bwd_logits`` "cublas":
    the backward slab's float32 logits from cuBLAS and G from them by
    ``_rows_kernel`` (slabs a third as wide: logits and G share the budget).  ``products``:
    3 computes every gradient in the forward (``_three_products``; reductions "mean"
    and "sum"), 4 recomputes the logits in the backward (reduction "none" always).
    ``grad_input_space`` (3 products): token chunks may hold their
    logits in the rows of grad_input not yet written (``_token_chunks``)."""

    fwd: GemmConfig
    bwd: GemmConfig
    rows: RowConfig
    token_chunk: Optional[int] = None
    vocab_slab: Optional[int] = None
    tiles_per_program: Optional[int] = None
    workspace_fraction: float = 0.14
    fwd_logits: str = "triton"
    bwd_logits: str = "triton"
    products: int = 3
    grad_input_space: bool = True

    def __post_init__(self) -> None:
        if self.products not in (3, 4):
            raise ValueError(f"products must be 3 or 4, got {self.products!r}")
        for name in ("fwd_logits", "bwd_logits"):
            if getattr(self, name) not in ("triton", "cublas"):
                raise ValueError(f"{name} must be 'triton' or 'cublas', got {getattr(self, name)!r}")


def default_config(dtype: torch.dtype, device: torch.device) -> LinearCrossEntropyConfig:
    """Starting points for the H200 (to be tuned: benchmarks/linear_cross_entropy_tuning.md);
    16-wide tiles for the CPU interpreter."""
    if device.type != "cuda":
        small = GemmConfig(16, 16, 16, 2, 1, 1)
        return LinearCrossEntropyConfig(small, small, RowConfig(16, 16, 16, 1))
    rows = RowConfig(1, 4096, 64, 8)  # H200, big shape: 3.2 ms less than (4, 1024, 64, 4) per 32 chunks
    if dtype == torch.float32:  # ieee float32 dots run on the FMA units: small tiles
        gemm = GemmConfig(64, 64, 32, 8, 4, 2)
        return LinearCrossEntropyConfig(gemm, gemm, rows)
    return LinearCrossEntropyConfig(GemmConfig(), GemmConfig(), rows)


# ---------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------


@triton.jit
def _cap_tanh(r, softcap):
    """tanh(r / c) = 1 - 2 / (exp(2 r / c) + 1) (``sc_tanh`` of Definitions.v; 2 r / c capped at
    80, past which the float32 result is 1 anyway, so exp does not overflow).  Its error in
    float32 is the premise ``th_err`` of ``Ojas.CrossEntropy.Float.SoftcapError`` (measured:
    ``measured_tanh_error`` of ojas_ref/verification/linear_cross_entropy_error.py), not a theorem."""
    return 1.0 - 2.0 / (tl.exp(tl.minimum(2.0 * r / softcap, 80.0)) + 1.0)


@triton.jit
def _softcap(r, softcap):
    """``softcap`` of Definitions.v: c tanh(r / c), the product rounded once (``sc_z`` of
    ``Ojas.CrossEntropy.Float.SoftcapError.sc_logit_error``)."""
    return softcap * _cap_tanh(r, softcap)


@triton.jit
def _cap_chain(z, softcap):
    """softcap'(r) = 1 - (z / c)^2 from the capped logit z (``softcap_grad``); its float32 error
    against 1 - tanh(y / c)^2: ``Ojas.CrossEntropy.Float.SoftcapError.sc_chain_error``
    (the division within a stated error, a premise)."""
    zc = z / softcap
    return 1.0 - zc * zc


@triton.jit
def _logits_of(r, BIAS, cols, col_ok, softcap, HAS_BIAS: tl.constexpr, HAS_CAP: tl.constexpr):
    """``softcap cap (raw_logit)``: r + b (``raw_logit``), capped.  r: [M, N] float32."""
    if HAS_BIAS:
        r += tl.load(BIAS + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    if HAS_CAP:
        r = _softcap(r, softcap)
    return r


@triton.jit
def _grad_tile(z, lse, is_target, w, eps, lam, inv_v, softcap, HAS_CAP: tl.constexpr):
    """``grad_entry`` of Definitions.v for a tile: w_n ((1 + 2 lam lse_n) exp(z - lse_n)
    - eps / V - (1 - eps) [v = t_n]) softcap'(r), softcap'(r) = 1 - (z / c)^2
    (``softcap_grad``; Ojas.CrossEntropy.Gradient.grad_entry_is_derive).
    z: [M, N] capped logits; lse, w: [M]."""
    g = (1.0 + 2.0 * lam * lse)[:, None] * tl.exp(z - lse[:, None]) - eps * inv_v
    g = tl.where(is_target, g - (1.0 - eps), g)
    if HAS_CAP:
        g = g * _cap_chain(z, softcap)
    return g * w[:, None]


@triton.jit
def _logits_kernel(
    X,
    W,
    BIAS,
    TGT,
    LSE,
    RW,
    Z,
    PM,
    PL,
    PS,
    ZT,
    G,
    row0,
    n_rows,
    v0,
    v1,
    D,
    n_groups,
    tiles_per_group,
    stride_x,
    stride_w,
    stride_z,
    stride_p,
    stride_rw,
    softcap,
    eps,
    lam,
    inv_v,
    STATS: tl.constexpr,
    WRITE_Z: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_CAP: tl.constexpr,
    NEED_SUM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    EVEN_K: tl.constexpr,
    DOT_PREC: tl.constexpr,
):
    """Logits of the tokens ``[0, n_rows)`` (rows of X; token ``row0 + i`` of the kept
    tokens for TGT, LSE, RW, ZT) against the vocabulary rows ``[v0, v1)``
    (``chunk_logits``), one token tile by one group of vocabulary tiles.

    STATS (forward): the group's tiles go through ``block_step`` (online max and
    rescaled sum, empty value rows; ``chunked_lse_chunk``; rounding:
    ``Ojas.CrossEntropy.Float.LseLossError.ce_lse_error_two_level``, ``grp_state``; with HAS_CAP
    ``Ojas.CrossEntropy.Float.SoftcapError.ce_lse_error_two_level_softcap``); writes the group's
    partial state (PM, PL, PS = sum z) per token, the target logit (ZT, from the
    one tile holding it: ``target_logit``) and with WRITE_Z the float32 logits.
    GRAD (backward): writes G = ``_grad_tile`` for each tile, from the saved lse and
    the token weights RW.  Rows past ``n_rows`` and columns past ``v1`` are read
    clamped to the last ones (no load masks); Z and G (row stride ``stride_z``) are
    padded to whole tiles and their tiles stored whole (vectorised stores; the
    padding is never read)."""
    pid = tl.program_id(0)
    num_m = tl.cdiv(n_rows, BLOCK_M)
    width = GROUP_M * n_groups
    first_m = (pid // width) * GROUP_M
    size_m = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % size_m
    pid_g = (pid % width) // size_m

    m0 = pid_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    row_ok = offs_m < n_rows
    in_m = tl.minimum(offs_m, n_rows - 1) - m0  # tile-relative rows, clamped
    offs_k = tl.arange(0, BLOCK_K)
    x_tile = X + m0.to(tl.int64) * stride_x + (in_m * stride_x)[:, None] + offs_k[None, :]
    tok = row0 + offs_m
    tok_c = row0 + m0 + in_m  # clamped: rows past n_rows repeat the last row, all finite
    tgt = tl.load(TGT + tok_c).to(tl.int32)
    if STATS:
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        s_i = tl.zeros([BLOCK_M], tl.float32)
    else:
        lse = tl.load(LSE + tok_c)
        w = tl.load(RW + tok_c * stride_rw)

    t_first = pid_g * tiles_per_group
    t_last = tl.minimum(t_first + tiles_per_group, tl.cdiv(v1 - v0, BLOCK_N))
    for t in range(t_first, t_last):
        n0 = v0 + t * BLOCK_N
        cols = n0 + tl.arange(0, BLOCK_N)
        col_ok = cols < v1
        in_n = tl.minimum(cols, v1 - 1) - n0
        x_ptrs = x_tile
        w_ptrs = W + n0.to(tl.int64) * stride_w + (in_n * stride_w)[None, :] + offs_k[:, None]
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        for k in range(0, D, BLOCK_K):
            if EVEN_K:
                x = tl.load(x_ptrs)
                wt = tl.load(w_ptrs)
            else:
                x = tl.load(x_ptrs, mask=offs_k[None, :] < D - k, other=0.0)
                wt = tl.load(w_ptrs, mask=offs_k[:, None] < D - k, other=0.0)
            acc = _dot(x, wt, acc, DOT_PREC)
            x_ptrs += BLOCK_K
            w_ptrs += BLOCK_K
        z = _logits_of(acc, BIAS, cols, col_ok, softcap, HAS_BIAS, HAS_CAP)
        is_target = cols[None, :] == tgt[:, None]
        base = m0.to(tl.int64) * stride_z + t * BLOCK_N
        tile = ((offs_m - m0) * stride_z)[:, None] + (cols - n0)[None, :]
        if STATS:
            zm = tl.where(col_ok[None, :], z, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(zm, 1))
            l_i = l_i * tl.exp(m_i - m_new) + tl.sum(tl.exp(zm - m_new[:, None]), 1)
            m_i = m_new
            if NEED_SUM:
                s_i += tl.sum(tl.where(col_ok[None, :], z, 0.0), 1)
            has_t = (tgt >= n0) & (tgt < n0 + BLOCK_N) & (tgt < v1)
            tl.store(ZT + tok, tl.sum(tl.where(is_target, z, 0.0), 1), mask=row_ok & has_t)
            if WRITE_Z:
                tl.store(Z + base + tile, z)
        else:
            g = _grad_tile(z, lse, is_target, w, eps, lam, inv_v, softcap, HAS_CAP)
            tl.store(G + base + tile, g.to(G.dtype.element_ty))
    if STATS:
        p = offs_m.to(tl.int64) * stride_p + pid_g
        tl.store(PM + p, m_i, mask=row_ok)
        tl.store(PL + p, l_i, mask=row_ok)
        if NEED_SUM:
            tl.store(PS + p, s_i, mask=row_ok)


@triton.jit
def _rows_kernel(
    PM,
    PL,
    PS,
    ZT,
    Z,
    G,
    TGT,
    LOSS,
    LSE,
    BIAS,
    RW,
    row0,
    n_rows,
    n_groups,
    V,
    v0,
    stride_p,
    stride_z,
    stride_rw,
    g_scale,
    softcap,
    eps,
    lam,
    inv_v,
    HAS_LSE: tl.constexpr,
    GRAD: tl.constexpr,
    STREAM: tl.constexpr,
    NEED_SUM: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_CAP: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    """Per token (row ``i`` of Z and G, kept token ``row0 + i``), for the vocabulary
    rows ``v0 + [0, V)`` held in Z.

    Forward (no HAS_LSE): the lse state, lse = m + ln l (``finalize``) and the loss
    (``token_loss``), stored (rounding, STREAM without bias and cap:
    ``Ojas.CrossEntropy.Float.LseLossError.ce_lse_error``, ``ce_loss_error`` at eps = lam = 0;
    with the cap: ``Ojas.CrossEntropy.Float.SoftcapError.ce_lse_error_softcap``,
    ``ce_loss_error_softcap``; the merge of PM, PL below: ``ce_lse_error_two_level``, capped
    logits ``ce_lse_error_two_level_softcap``); the state is the merge of the vocabulary groups'
    partial states PM, PL, PS and target logit ZT written by ``_logits_kernel``
    (``merge`` of Merge.v; ``merge_chunks_lse``), or with STREAM ``block_step`` over
    the row's raw logits Z (bias and cap applied here; ``chunked_lse_chunk``).  G's
    token weight is ``g_scale`` (1, or a power of two for float16).
    Backward (HAS_LSE): lse from LSE, token weights RW (times ``g_scale``).
    With GRAD: the token's row of G (``_grad_tile``) from the float32 logits Z, raw
    with STREAM.  ``V``: Z's width (padded to whole tiles without STREAM).  The rows are kept
    tokens only: every schedule removes the ignored ones before its products (``ce_drop_ignored``)."""
    offs_r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    ok = offs_r < n_rows
    tok = row0 + offs_r
    tgt = tl.load(TGT + tok, mask=ok, other=-1).to(tl.int32) - v0
    zrow = offs_r.to(tl.int64)[:, None] * stride_z
    if HAS_LSE:
        lse = tl.load(LSE + tok, mask=ok, other=0.0)
        weight = tl.load(RW + tok * stride_rw, mask=ok, other=0.0) * g_scale
    else:
        m = tl.full([BLOCK_R], float("-inf"), tl.float32)
        l = tl.zeros([BLOCK_R], tl.float32)
        s = tl.zeros([BLOCK_R], tl.float32)
        if STREAM:
            zt = tl.zeros([BLOCK_R], tl.float32)
            for c0 in range(0, V, BLOCK_V):
                cols = c0 + tl.arange(0, BLOCK_V)
                col_ok = cols < V
                mask = ok[:, None] & col_ok[None, :]
                z = _logits_of(
                    tl.load(Z + zrow + cols[None, :], mask=mask, other=0.0).to(tl.float32),
                    BIAS + v0,
                    cols,
                    col_ok,
                    softcap,
                    HAS_BIAS,
                    HAS_CAP,
                )
                zm = tl.where(mask, z, float("-inf"))
                m_new = tl.maximum(m, tl.max(zm, 1))
                m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows past n_rows: nothing seen
                l = l * tl.exp(m - m_ref) + tl.sum(tl.exp(zm - m_ref[:, None]), 1)
                m = m_new
                if NEED_SUM:
                    s += tl.sum(tl.where(mask, z, 0.0), 1)
                zt += tl.sum(tl.where(cols[None, :] == tgt[:, None], z, 0.0), 1)
        else:
            prow = offs_r.to(tl.int64)[:, None] * stride_p
            for p0 in range(0, n_groups, BLOCK_P):
                cols = p0 + tl.arange(0, BLOCK_P)
                mask = ok[:, None] & (cols[None, :] < n_groups)
                pm = tl.load(PM + prow + cols[None, :], mask=mask, other=float("-inf"))
                pl = tl.load(PL + prow + cols[None, :], mask=mask, other=0.0)
                m_new = tl.maximum(m, tl.max(pm, 1))
                m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows past n_rows: nothing merged
                l = l * tl.exp(m - m_ref) + tl.sum(pl * tl.exp(pm - m_ref[:, None]), 1)
                m = m_new
                if NEED_SUM:
                    s += tl.sum(tl.load(PS + prow + cols[None, :], mask=mask, other=0.0), 1)
            zt = tl.load(ZT + tok, mask=ok, other=0.0)
        lse = tl.where(ok, m + tl.log(tl.where(ok, l, 1.0)), 0.0)
        loss = (1.0 - eps) * (lse - zt) + eps * (lse - s * inv_v) + lam * lse * lse
        tl.store(LOSS + tok, loss, mask=ok)
        tl.store(LSE + tok, lse, mask=ok)
        weight = tl.full([BLOCK_R], 1.0, tl.float32) * g_scale
    if GRAD:  # last block first: the end of the rows just streamed may still be in L2
        n_v = tl.cdiv(V, BLOCK_V)
        for i in range(0, n_v):
            cols = (n_v - 1 - i) * BLOCK_V + tl.arange(0, BLOCK_V)
            col_ok = cols < V
            mask = ok[:, None] & col_ok[None, :]
            z = tl.load(Z + zrow + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            if STREAM:
                z = _logits_of(z, BIAS + v0, cols, col_ok, softcap, HAS_BIAS, HAS_CAP)
            g = _grad_tile(z, lse, cols[None, :] == tgt[:, None], weight, eps, lam, inv_v, softcap, HAS_CAP)
            tl.store(G + zrow + cols[None, :], g.to(G.dtype.element_ty), mask=mask)


@triton.jit
def _scale_kernel(X, SCALE, n, BLOCK: tl.constexpr):
    """X[:n] *= SCALE[0], the product in float32 and rounded once to X's dtype; when the
    factor is 1 (the usual ``loss.backward()``) nothing is read or written."""
    scale = tl.load(SCALE).to(tl.float32)
    if scale != 1.0:
        step = tl.num_programs(0).to(tl.int64) * BLOCK
        for start in range(tl.program_id(0).to(tl.int64) * BLOCK, n, step):
            offs = start + tl.arange(0, BLOCK)
            ok = offs < n
            x = tl.load(X + offs, mask=ok).to(tl.float32)
            tl.store(X + offs, (x * scale).to(X.dtype.element_ty), mask=ok)


# ---------------------------------------------------------------------------
# Host side
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Options:
    eps: float
    lam: float
    softcap: Optional[float]

    def kernel_args(self, V: int) -> dict:
        return dict(softcap=1.0 if self.softcap is None else self.softcap, eps=self.eps, lam=self.lam, inv_v=1.0 / V)


@functools.lru_cache(maxsize=None)
def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


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


def _round_down(x: int, multiple: int) -> int:
    return max(multiple, x // multiple * multiple)


def _round_up(x: int, multiple: int) -> int:
    return cdiv(x, multiple) * multiple


@functools.lru_cache(maxsize=256)
def _tiles_per_program(num_m: int, n_tiles: int, sms: int) -> int:
    """Vocabulary tiles per forward program: the fewest waves x tiles (one program per
    multiprocessor at a time; a last wave that is nearly empty costs a whole one),
    and among counts within 2 % of that the largest (fewer partial states)."""
    cost = {t: cdiv(num_m * cdiv(n_tiles, t), sms) * t for t in range(1, n_tiles + 1)}
    best = min(cost.values())
    return max(t for t, c in cost.items() if c <= 1.02 * best)


def _weight_stride(token_weight: torch.Tensor) -> int:
    """The kernels' stride between the token weights (``RW``): 0 for one weight shared by
    all tokens ([1]), else the tensor's own, which is 0 too for a grad_output expanded
    from one value (``loss.sum().backward()`` with reduction "none")."""
    return 0 if token_weight.numel() == 1 else token_weight.stride(0)


def _launch_rows(n_rows: int, rcfg: RowConfig, *args, **constexprs) -> None:
    """One launch of ``_rows_kernel`` over ``n_rows`` rows with the tiles of ``rcfg``."""
    fast(_rows_kernel)[(cdiv(n_rows, rcfg.block_r),)](
        *args, **constexprs, BLOCK_R=rcfg.block_r, BLOCK_V=rcfg.block_v, num_warps=rcfg.num_warps
    )


def _launch_logits(
    x,
    weight,
    bias,
    tgt,
    row0,
    n_rows,
    v0,
    v1,
    cfg: GemmConfig,
    opts: _Options,
    V: int,
    tiles_per_program: int,
    *,
    stats=None,
    out=None,
    lse=None,
    token_weight=None,
):
    """One launch of ``_logits_kernel`` over the rows ``[0, n_rows)`` of x (kept tokens
    ``row0 + [0, n_rows)``) and vocabulary rows ``[v0, v1)``.  STATS when
    ``stats = (pm, pl, ps, zt)`` is given, ``out`` the float32 logits or None; else
    GRAD (``lse``, ``token_weight`` [K] or [1]), ``out`` the G buffer.  ``out`` has
    whole tiles: at least ``round_up(n_rows, block_m)`` rows and
    ``round_up(v1 - v0, block_n)`` columns."""
    D = x.shape[1]
    n_groups = cdiv(cdiv(v1 - v0, cfg.block_n), tiles_per_program)
    none = torch.empty(1, dtype=torch.float32, device=x.device)  # for the pointers a variant does not use
    pm, pl, ps, zt = stats if stats is not None else (none,) * 4
    stats_out = out if stats is not None and out is not None else none
    fast(_logits_kernel)[(cdiv(n_rows, cfg.block_m) * n_groups,)](
        x,
        weight,
        none if bias is None else bias,
        tgt,
        none if lse is None else lse,
        none if token_weight is None else token_weight,
        stats_out,
        pm,
        pl,
        ps,
        zt,
        out if stats is None else none,
        row0,
        n_rows,
        v0,
        v1,
        D,
        n_groups,
        tiles_per_program,
        x.stride(0),
        weight.stride(0),
        0 if out is None else out.stride(0),
        pm.stride(0),
        0 if token_weight is None else _weight_stride(token_weight),
        **opts.kernel_args(V),
        STATS=stats is not None,
        WRITE_Z=stats is not None and out is not None,
        HAS_BIAS=bias is not None,
        HAS_CAP=opts.softcap is not None,
        NEED_SUM=opts.eps != 0.0,
        BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n,
        BLOCK_K=cfg.block_k,
        GROUP_M=cfg.group_m,
        EVEN_K=D % cfg.block_k == 0,
        DOT_PREC=_dot_precision(x.dtype),
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )


@dataclass
class _Forward:
    loss: torch.Tensor  # [K] float32, the kept tokens'
    lse: torch.Tensor  # [K] float32
    kept: Optional[torch.Tensor]  # [K] int64 indices of the kept tokens, None when all are kept
    tgt: torch.Tensor  # [K] targets of the kept tokens
    grad_input: Optional[torch.Tensor]  # [N, D] in the input dtype, token weights applied, or None


def _kept_tokens(
    target: torch.Tensor, mask: torch.Tensor, count: torch.Tensor
) -> tuple[Optional[torch.Tensor], int, torch.Tensor]:
    """The kept tokens (``Ojas.CrossEntropy.Reduction.ce_drop_ignored``) from ``mask`` =
    (target != ignore_index) and ``count`` = its sum, launched by the caller before any
    host work that does not need them: their indices (None when all are kept), their
    count K (read here: the host sync) and their targets."""
    K = int(count)
    if K == target.numel():
        return None, K, target
    kept = mask.nonzero().squeeze(1)
    return kept, K, target.index_select(0, kept)


def _forward(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    target: torch.Tensor,
    ignore_index: int,
    reduction: str,
    opts: _Options,
    need_grad_input: bool,
    config: LinearCrossEntropyConfig,
) -> _Forward:
    """Losses and lse of the kept tokens, and grad_input when asked (module docstring)."""
    N, D = x.shape
    V = weight.shape[0]
    mask = target != ignore_index
    kept, K, tgt = _kept_tokens(target, mask, mask.sum())
    f32 = dict(dtype=torch.float32, device=x.device)
    loss, lse = torch.empty(K, **f32), torch.empty(K, **f32)
    grad_input = None
    if need_grad_input:
        grad_input = (torch.empty if kept is None else torch.zeros)(N, D, dtype=x.dtype, device=x.device)
    if K == 0:
        return _Forward(loss, lse, kept, tgt, grad_input)

    cfg, rcfg = config.fwd, config.rows
    cublas = need_grad_input and config.fwd_logits == "cublas"
    v_pad = V if cublas else _round_up(V, cfg.block_n)
    itemsize = x.element_size()
    if config.token_chunk is not None:
        chunk = min(config.token_chunk, K)
    elif need_grad_input:  # a chunk's float32 logits, G rows, gathered rows and grad_input rows: grad_weight's bytes
        row_bytes = v_pad * (4 + itemsize) + D * (4 + itemsize)
        chunk = min(_round_down(max(V * D * itemsize, 64 << 20) // row_bytes, cfg.block_m), K)
    else:
        chunk = K
    n_tiles = cdiv(V, cfg.block_n)
    tiles_per_program = config.tiles_per_program or _tiles_per_program(
        cdiv(chunk, cfg.block_m), n_tiles, _num_sms(x.device)
    )
    n_groups = cdiv(n_tiles, tiles_per_program)
    pm, pl, ps = (torch.empty(chunk, n_groups, **f32) for _ in range(3))
    zt = torch.empty(K, **f32)
    none = torch.empty(1, **f32)
    z = g = none
    if need_grad_input:
        rows = chunk if cublas else _round_up(chunk, cfg.block_m)
        z = torch.empty(rows, v_pad, **f32)
        g = torch.empty(rows, v_pad, dtype=x.dtype, device=x.device)
    g_scale = _FP16_HEADROOM if x.dtype == torch.float16 else 1.0
    token_weight = (1.0 / K if reduction == "mean" else 1.0) / g_scale
    for r0 in range(0, K, chunk):
        n = min(chunk, K - r0)
        x_chunk = x[r0 : r0 + n] if kept is None else x.index_select(0, kept[r0 : r0 + n])
        if cublas:  # raw logits; bias and cap applied by _rows_kernel
            _mm_into(z[:n], x_chunk, weight.t())
        else:
            _launch_logits(
                x_chunk,
                weight,
                bias,
                tgt,
                r0,
                n,
                0,
                V,
                cfg,
                opts,
                V,
                tiles_per_program,
                stats=(pm, pl, ps, zt),
                out=z if need_grad_input else None,
            )
        _launch_rows(
            n,
            rcfg,
            pm,
            pl,
            ps,
            zt,
            z,
            g,
            tgt,
            loss,
            lse,
            none if bias is None else bias,
            none,
            r0,
            n,
            n_groups,
            v_pad,
            0,
            pm.stride(0),
            z.stride(0),
            0,
            g_scale,
            **opts.kernel_args(V),
            HAS_LSE=False,
            GRAD=need_grad_input,
            STREAM=cublas,
            NEED_SUM=opts.eps != 0.0,
            HAS_BIAS=cublas and bias is not None,
            HAS_CAP=opts.softcap is not None,
            BLOCK_P=min(rcfg.block_p, next_power_of_2(n_groups)),
        )
        if need_grad_input:
            rows_dx = _mm_f32(g[:n, :V], weight)
            if token_weight != 1.0:
                rows_dx *= token_weight
            if kept is None:
                grad_input[r0 : r0 + n] = rows_dx
            else:
                grad_input.index_copy_(0, kept[r0 : r0 + n], rows_dx.to(x.dtype))
    return _Forward(loss, lse, kept, tgt, grad_input)


def _backward_weight(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    kept: Optional[torch.Tensor],
    tgt: torch.Tensor,
    lse: torch.Tensor,
    token_weight: torch.Tensor,
    need_weight: bool,
    need_bias: bool,
    opts: _Options,
    config: LinearCrossEntropyConfig,
    step=None,
) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
    """grad_weight and grad_bias (float32): per vocabulary slab, G of all kept tokens
    (``_logits_kernel`` GRAD), then G^T H and colsum G.  ``token_weight``: [K], or
    [1] for one weight shared by all kept tokens, float32.  Rounding of grad_weight (bfloat16 /
    float32, no bias, cap, smoothing, z-loss): ``Ojas.CrossEntropy.Float.WeightedGradError.ce_dw4_error``;
    grad_bias, float16's scale and the ``step`` path: no theorem.

    ``step`` (the head updated inside the backward, ``InBackwardOptimizer(head_weight=...)``;
    no bias): instead of grad_weight, each slab's rows of it (its whole gradient, over all kept
    tokens) go into a slab-sized buffer in the weight's dtype, then ``step(v0, v1, rows)``
    updates W[v0:v1]; the slab's logits were recomputed from those rows before it, and later
    slabs read only their own rows
    (Ojas.OptimizerInBackward.ChunkedHead.chunked_head_dh_first_code_eq_standard); returns (None, None).
    The same products into another buffer: each row rounded as without ``step``. With no kept
    token the gradient is zero and the plain-SGD step w + (-lr) 0 = w changes no bit (-0.0
    included): nothing is called."""
    N, D = x.shape
    V = weight.shape[0]
    K = lse.numel()
    new = torch.zeros if lse.numel() == 0 else torch.empty  # every slab writes its rows
    grad_weight = new(weight.shape, dtype=weight.dtype, device=x.device) if need_weight and step is None else None
    grad_bias = new(V, dtype=torch.float32, device=x.device) if need_bias else None
    if K == 0:
        return grad_weight, grad_bias
    hk = x if kept is None else x.index_select(0, kept)
    cfg = config.bwd
    itemsize = x.element_size()
    # float16 G: the token weights (1 / K for "mean") would push its entries into
    # subnormals; they are scaled by a power of two near 256 / max|w|, undone in float32.
    half = x.dtype == torch.float16
    if half:
        top = token_weight.abs().max()
        scale = _FP16_HEADROOM * torch.where(top > 0, torch.exp2(-torch.floor(torch.log2(top))), torch.ones_like(top))
        token_weight = token_weight * scale
    cublas = config.bwd_logits == "cublas"
    if config.vocab_slab is not None:
        slab = min(_round_up(config.vocab_slab, cfg.block_n), _round_up(V, cfg.block_n))
    else:
        grads = (N * D + (V * D if need_weight else 0)) * itemsize
        gathered = 0 if kept is None else K * D * itemsize
        budget = max(int(config.workspace_fraction * grads) - gathered, 16 << 20)
        per_column = (K * (4 + itemsize) if cublas else _round_up(K, cfg.block_m) * itemsize) + (D * 4 if half else 0)
        slab = min(_round_down(budget // per_column, cfg.block_n), _round_up(V, cfg.block_n))
    if cublas:  # float32 logits of the slab from cuBLAS, G from them by _rows_kernel
        z_flat = torch.empty(K * slab, dtype=torch.float32, device=x.device)
        g_flat = torch.empty(K * slab, dtype=x.dtype, device=x.device)
        rcfg = config.rows
        none = torch.empty(1, dtype=torch.float32, device=x.device)
    else:
        g = torch.empty(_round_up(K, cfg.block_m), slab, dtype=x.dtype, device=x.device)
    rows_buf = torch.empty(slab, D, dtype=weight.dtype, device=x.device) if step is not None else None
    for v0 in range(0, V, slab):
        v1 = min(v0 + slab, V)
        if cublas:
            width = v1 - v0
            z, gs = z_flat[: K * width].view(K, width), g_flat[: K * width].view(K, width)
            _mm_into(z, hk, weight[v0:v1].t())
            _launch_rows(
                K,
                rcfg,
                none,
                none,
                none,
                none,
                z,
                gs,
                tgt,
                none,
                lse,
                none if bias is None else bias,
                token_weight,
                0,
                K,
                1,
                width,
                v0,
                0,
                width,
                _weight_stride(token_weight),
                1.0,
                **opts.kernel_args(V),
                HAS_LSE=True,
                GRAD=True,
                STREAM=True,
                NEED_SUM=False,
                HAS_BIAS=bias is not None,
                HAS_CAP=opts.softcap is not None,
                BLOCK_P=16,
            )
        else:
            _launch_logits(
                hk, weight, bias, tgt, 0, K, v0, v1, cfg, opts, V, 1, out=g, lse=lse, token_weight=token_weight
            )
            gs = g[:K, : v1 - v0]
        if step is not None:
            rows = rows_buf[: v1 - v0]
            if half:
                rows.copy_(_mm_f32(gs.t(), hk).div_(scale))
            else:
                _mm_into(rows, gs.t(), hk)
            step(v0, v1, rows)
        elif grad_weight is not None:
            if half:
                grad_weight[v0:v1] = _mm_f32(gs.t(), hk).div_(scale)
            else:
                _mm_into(grad_weight[v0:v1], gs.t(), hk)
        if grad_bias is not None:
            colsum = gs.sum(0, dtype=torch.float32)
            grad_bias[v0:v1] = colsum / scale if half else colsum
    return grad_weight, grad_bias


def _token_chunks(
    K: int, D: int, V: int, limit: int, fixed: Optional[int], in_rows: bool
) -> list[tuple[int, int, bool]]:
    """(first kept token, count, inside) of each token chunk of ``_three_products``:
    ``fixed`` tokens each, or as many as the workspace holds (``limit``), the chunks
    made even.  With ``in_rows`` (every token kept, grad_input wanted) a chunk may put
    its logits/G ("inside") in the rows of grad_input that later chunks write, from
    element ``round_up((first + count) D, 64)`` on: while those rows hold more tokens
    than the workspace, the chunks go there, as large as they fit."""

    def fits(r0: int, n: int) -> bool:
        return in_rows and _round_up((r0 + n) * D, 64) + n * V <= K * D

    plan, r0 = [], 0
    if fixed is not None:
        for r0 in range(0, K, fixed):
            n = min(fixed, K - r0)
            plan.append((r0, n, fits(r0, n)))
        return plan
    while in_rows:
        n = ((K - r0) * D - 64) // (V + D) // 8 * 8
        if n <= limit or not fits(r0, n):
            break
        plan.append((r0, n, True))
        r0 += n
    rest = K - r0
    if rest > 0:
        size = min(limit, _round_up(cdiv(rest, cdiv(rest, limit)), 8))
        plan += [(r, min(size, K - r), False) for r in range(r0, K, size)]
    return plan


def _three_products_plan(
    N: int,
    D: int,
    V: int,
    itemsize: int,
    need: tuple[bool, bool, bool],
    config: LinearCrossEntropyConfig,
    kept: Optional[int] = None,
) -> list[tuple[int, int, bool]]:
    """``_three_products``'s token chunks (``_token_chunks``) over the ``kept`` tokens of N
    (None: all N kept): its workspace, ``workspace_fraction`` of the gradients' bytes (16 MiB
    at least), holds a chunk's logits/G and, when some token is ignored, the chunk's gathered
    rows of the input (then its rows of grad_input); chunks inside grad_input only when
    every token is kept."""
    K = N if kept is None else kept
    grads = (N * D * need[0] + V * D * need[1]) * itemsize
    budget = max(int(config.workspace_fraction * grads), 16 << 20)
    if K == N:
        in_rows = need[0] and config.grad_input_space
        return _token_chunks(N, D, V, _round_down(budget // (V * itemsize), 8), config.token_chunk, in_rows)
    return _token_chunks(K, D, V, _round_down(budget // ((V + D) * itemsize), 8), config.token_chunk, False)


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


@dataclass
class _Gradients:
    loss: torch.Tensor  # [N] float32, 0 at the ignored tokens
    count: int  # the kept tokens
    grad_input: Optional[torch.Tensor]  # [N, D], input dtype
    grad_weight: Optional[torch.Tensor]  # [V, D], input dtype
    grad_bias: Optional[torch.Tensor]  # [V] float32


def _three_products(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    target: torch.Tensor,
    ignore_index: int,
    reduction: str,
    opts: _Options,
    need: tuple[bool, bool, bool],
    config: LinearCrossEntropyConfig,
) -> _Gradients:
    """Losses of every token (0 at the ignored ones) and the gradients for grad_output 1, in
    one pass over chunks of the kept tokens, each against the whole vocabulary: the chunk's
    logits (cuBLAS, float32 accumulation, rounded to the input dtype as ``F.linear`` rounds
    them), then ``_rows_kernel`` (STREAM, GRAD) streams each row with ``block_step``
    (``Ojas.CrossEntropy.ChunkedLse.chunked_lse_chunk``), stores lse and loss and
    writes the row of G over its logits, then grad_weight += w G^T H, grad_bias += w colsum G
    and grad_input rows = w G W (the whole vocabulary reduced in one product, rounded once;
    ``Ojas.CrossEntropy.Gradient.ce_backward_correct``: any token chunking).  Ignored tokens
    are removed before any product (``Ojas.CrossEntropy.Reduction.ce_drop_ignored``: the loss,
    grad_weight and grad_bias over the kept tokens are those over all tokens, grad_input the
    kept rows of all tokens'; ``ignored_grad_zero``: the other rows are 0): each chunk's rows
    of the input are gathered into the workspace, its rows of grad_input computed over them
    and scattered into a zeroed grad_input, "mean" divides by the kept count
    (``ce_loss_correct``).  grad_weight is added up across token chunks in the input dtype:
    each chunk's product is accumulated in float32 and the sum rounded once per chunk, so a
    bfloat16 grad_weight carries one rounding per chunk, not one in all.  Workspace
    (``_three_products_plan``): one chunk's logits (and gathered rows), ``workspace_fraction``
    of the gradients' bytes (16 MiB at least).  ``need``: gradients wanted for (input, weight,
    bias).  Rounding of grad_input and grad_weight ("mean" / "sum", bfloat16 / float32, no
    bias, cap, smoothing, z-loss): ``Ojas.CrossEntropy.Float.GradError.ce_dh_error`` /
    ``ce_dw_error`` (this chunk loop, one stored rounding of grad_weight per chunk; cuBLAS's
    summation order only through an any-order premise) and the a-posteriori
    ``Ojas.CrossEntropy.Float.GradPosteriori.ce_gp_dh_error`` / ``ce_gp_dw_error``;
    grad_bias and the rest: no theorem."""
    N, D = x.shape
    V = weight.shape[0]
    need_input, need_weight, need_bias = need
    mask = target != ignore_index
    count = mask.sum()  # read after the host work below, which so overlaps the device's queue
    f32 = dict(dtype=torch.float32, device=x.device)
    grad_weight = torch.empty_like(weight) if need_weight else None  # the first chunk writes it (beta 0)
    grad_bias = torch.zeros(V, **f32) if need_bias else None
    none = torch.empty(1, **f32)
    kept, K, tgt = _kept_tokens(target, mask, count)  # the host sync: the "mean" factor is a float of the products
    grad_input = None
    if need_input:  # the ignored rows stay zeros (ignored_grad_zero)
        grad_input = (torch.empty if kept is None else torch.zeros)(N, D, dtype=x.dtype, device=x.device)
    loss, lse = torch.empty(K, **f32), torch.empty(K, **f32)
    if K == 0:
        if grad_weight is not None:
            grad_weight.zero_()
        return _Gradients(_reduce(loss, kept, N, "none"), 0, grad_input, grad_weight, grad_bias)
    plan = _three_products_plan(N, D, V, x.element_size(), need, config, K)
    rcfg = config.rows
    workspace = max((n for _, n, inside in plan if not inside), default=0)
    z = torch.empty(workspace, V, dtype=x.dtype, device=x.device)  # a chunk's logits, then G over them
    # a chunk's gathered rows of x, then its rows of grad_input
    rows = None if kept is None else torch.empty(workspace, D, dtype=x.dtype, device=x.device)
    # float16 G is stored times a power of two (_FP16_HEADROOM), undone by the products' alpha
    g_scale = _FP16_HEADROOM if x.dtype == torch.float16 else 1.0
    alpha = (1.0 / K if reduction == "mean" else 1.0) / g_scale
    for r0, n, inside in plan:
        x_chunk = x[r0 : r0 + n] if kept is None else torch.index_select(x, 0, kept[r0 : r0 + n], out=rows[:n])
        if inside:
            start = _round_up((r0 + n) * D, 64)
            g = grad_input.view(-1)[start : start + n * V].view(n, V)
        else:
            g = z[:n]
        _mm_into(g, x_chunk, weight.t())
        _launch_rows(
            n,
            rcfg,
            none,
            none,
            none,
            none,
            g,
            g,
            tgt,
            loss,
            lse,
            none if bias is None else bias,
            none,
            r0,
            n,
            1,
            V,
            0,
            0,
            V,
            0,
            g_scale,
            **opts.kernel_args(V),
            HAS_LSE=False,
            GRAD=True,
            STREAM=True,
            NEED_SUM=opts.eps != 0.0,
            HAS_BIAS=bias is not None,
            HAS_CAP=opts.softcap is not None,
            BLOCK_P=16,
        )
        if need_weight:
            _addmm_into(grad_weight, g.t(), x_chunk, alpha, 1.0 if r0 > 0 else 0.0)
        if need_bias:
            grad_bias.add_(g.sum(0, dtype=torch.float32), alpha=alpha)
        if need_input:
            if kept is None:
                _addmm_into(grad_input[r0 : r0 + n], g, weight, alpha, 0.0)
            else:  # over the gathered rows, read for the last time above
                _addmm_into(x_chunk, g, weight, alpha, 0.0)
                grad_input.index_copy_(0, kept[r0 : r0 + n], x_chunk)
    return _Gradients(_reduce(loss, kept, N, "none"), K, grad_input, grad_weight, grad_bias)


def _check(
    input: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, bias: Optional[torch.Tensor], reduction: str
) -> None:
    if input.dtype not in _DTYPES or weight.dtype != input.dtype or (bias is not None and bias.dtype != input.dtype):
        raise TypeError(
            f"the Triton linear cross-entropy takes float16, bfloat16 or float32 input, weight and bias "
            f"of one dtype, got {input.dtype}, {weight.dtype}, {None if bias is None else bias.dtype}"
        )
    if input.dim() not in (2, 3) or weight.dim() != 2 or weight.shape[1] != input.shape[-1] or weight.shape[0] == 0:
        raise ValueError(
            f"expected input [N, D] or [B, S, D] and weight [V, D], V >= 1; got {tuple(input.shape)} "
            f"and {tuple(weight.shape)}"
        )
    if tuple(target.shape) != tuple(input.shape[:-1]):
        raise ValueError(f"target must have shape {list(input.shape[:-1])}, got {list(target.shape)}")
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise ValueError(f"bias must have shape [{weight.shape[0]}], got {tuple(bias.shape)}")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    if any(t is not None and t.device != input.device for t in (weight, target, bias)):
        raise ValueError("input, weight, target and bias must be on one device")


def _prepare(input, weight, target, bias):
    """2-D input with unit inner stride, contiguous weight/bias, flat contiguous target
    (the kernels read it with stride 1; a strided one, e.g. a column, is copied)."""
    x = input.flatten(0, -2)
    if x.stride(-1) != 1:
        x = x.contiguous()
    return x, weight.contiguous(), None if bias is None else bias.contiguous(), target.reshape(-1).contiguous()


def _reduce(
    loss_kept: torch.Tensor, kept: Optional[torch.Tensor], n_tokens: int, reduction: str, count: Optional[int] = None
) -> torch.Tensor:
    """``ce_output``: per-token losses (0 at ignored tokens), their sum, or the sum over
    the kept count (0 with no kept token: ``ce_mean_all_ignored``).  ``loss_kept``: the kept
    tokens' losses (``kept`` their indices, None when all are kept), or every token's with
    zeros at the ignored ones and ``count`` the kept ones."""
    if reduction == "none":
        if kept is None:
            return loss_kept
        return loss_kept.new_zeros(n_tokens).index_copy_(0, kept, loss_kept)
    total = loss_kept.sum()
    K = loss_kept.numel() if count is None else count
    return total / K if reduction == "mean" and K > 0 else total


def _refuse_double_backward() -> None:
    """Raise in a backward run with ``create_graph=True`` (once_differentiable would let the
    gradients pass as constants)."""
    if torch.is_grad_enabled():
        raise RuntimeError(
            "the Triton linear cross-entropy does not support double backward "
            "(create_graph=True): its backward is not differentiable"
        )


class _LinearCrossEntropy(torch.autograd.Function):
    """``products`` 3 ("mean" / "sum"): the forward computes the losses and every
    gradient asked for (``_three_products``); the backward multiplies them by
    grad_output in place.  Otherwise the forward computes the losses, lse and (when
    input requires grad) grad_input, and the backward scales grad_input and computes
    grad_weight and grad_bias by vocabulary slabs.

    The gradients made in the forward are handed over by the first backward.  A second
    backward through a retained graph (``loss.backward(retain_graph=True)`` then
    ``loss.backward()``, as ``InBackwardOptimizer``'s clipping runs it) recomputes them
    from the saved input, weight, bias and target by the forward's own computation (the
    same products in the same order, so the same gradients on a deterministic device:
    no theorem says so, the theorems are over the reals; tested bit for bit).
    Those saved tensors are references to the forward's arguments, no copies: the weight
    is a parameter, and the input was alive beside the gradients and the workspace at
    the forward's peak anyway; holding it until the backward frees the graph adds
    nothing to that peak, nor to the first backward's (which scales the gradients in
    place; the recomputing one allocates what the forward did).  Both run with autocast
    disabled: each product has the precision ``_mm_into`` and ``_dot_precision`` give
    it, whatever the caller's autocast state (the backward runs under the caller's)."""

    @staticmethod
    def forward(ctx, input, weight, bias, target, reduction, ignore_index, opts, config, need, head=None):
        ctx.head = head  # ojas_ref's _HeadUpdate (config has 4 products), or None
        with torch.autocast(input.device.type, enabled=False):
            x, w, b, t = _prepare(input, weight, target, bias)
            ctx.three = config.products == 3 and reduction != "none" and any(need)
            ctx.args = (reduction, ignore_index, opts, config, need)
            if ctx.three:
                gr = _three_products(x, w, b, t, ignore_index, reduction, opts, need, config)
                ctx.grads = [gr.grad_input, gr.grad_weight, gr.grad_bias]
                ctx.save_for_backward(input, weight, bias, target)
                loss = _reduce(gr.loss, None, t.numel(), reduction, gr.count)
            else:
                fw = _forward(x, w, b, t, ignore_index, reduction, opts, need[0], config)
                ctx.grad_input = fw.grad_input
                ctx.save_for_backward(input, weight, bias, target, fw.kept, fw.tgt, fw.lse)
                loss = _reduce(fw.loss, fw.kept, t.numel(), reduction)
            return loss.view(target.shape) if reduction == "none" else loss

    @staticmethod
    def backward(ctx, grad_output):
        _refuse_double_backward()
        step = None if ctx.head is None else ctx.head.begin(ctx.next_functions[1][0])
        with torch.autocast(grad_output.device.type, enabled=False):
            input, weight, bias, target, *kept_tgt_lse = ctx.saved_tensors
            reduction, ignore_index, opts, config, need = ctx.args
            if ctx.three:
                grads, ctx.grads = ctx.grads, None
                if grads is None:  # a second backward through the retained graph: the forward's gradients again
                    x, w, b, t = _prepare(input, weight, target, bias)
                    gr = _three_products(x, w, b, t, ignore_index, reduction, opts, need, config)
                    grads = [gr.grad_input, gr.grad_weight, gr.grad_bias]
                grads = _scaled_gradients(grads, grad_output, (input, weight, bias))
                return (*grads, None, None, None, None, None, None, None)
            kept, tgt, lse = kept_tgt_lse
            grad_input = None
            if ctx.needs_input_grad[0]:
                grad_input, ctx.grad_input = ctx.grad_input, None
                if grad_input is None:  # a second backward through the retained graph: the forward's again
                    x, w, b, t = _prepare(input, weight, target, bias)
                    grad_input = _forward(x, w, b, t, ignore_index, reduction, opts, True, config).grad_input
            grads = _four_products_backward(
                grad_output,
                input,
                weight,
                bias,
                target,
                kept,
                tgt,
                lse,
                grad_input,
                ctx.needs_input_grad[:3],
                reduction,
                opts,
                config,
                step,
            )
            if step is not None:
                ctx.head.end()
            return (*grads, None, None, None, None, None, None, None)


def _four_products_backward(
    grad_output: torch.Tensor,
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    target: torch.Tensor,
    kept: Optional[torch.Tensor],
    tgt: torch.Tensor,
    lse: torch.Tensor,
    grad_input: Optional[torch.Tensor],
    need: tuple[bool, ...],
    reduction: str,
    opts: _Options,
    config: LinearCrossEntropyConfig,
    step=None,
) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor], Optional[torch.Tensor]]:
    """The backward of the 4-product schedule (``_forward``'s kept tokens, their targets and
    lse): the forward's grad_input scaled by grad_output in place, grad_weight and grad_bias
    by vocabulary slabs (``_backward_weight``), each when ``need`` asks for it."""
    K = lse.numel()
    if reduction == "none":
        g_all = grad_output.reshape(-1).float()
        token_weight = g_all if kept is None else g_all.index_select(0, kept)
        if kept is not None:  # ignored rows of grad_input are zeros: keep them so whatever grad_output says
            g_all = torch.zeros_like(g_all).index_copy_(0, kept, token_weight)
        g_rows = g_all[:, None]
    else:
        g_rows = grad_output.float().reshape(1)
        token_weight = g_rows / K if reduction == "mean" and K > 0 else g_rows
    grad_weight = grad_bias = None
    if need[0]:
        grad_input = grad_input.mul_(g_rows).view(input.shape)
    need_weight = need[1]
    need_bias = bias is not None and need[2]
    if need_weight or need_bias:
        x, w, b, _ = _prepare(input, weight, target, bias)
        grad_weight, gb = _backward_weight(
            x, w, b, kept, tgt, lse, token_weight, need_weight, need_bias, opts, config, step
        )
        grad_bias = None if gb is None else gb.to(bias.dtype)
    return grad_input if need[0] else None, grad_weight, grad_bias


_SCALE_BLOCK = 4096


def _scaled_gradients(
    grads: list[Optional[torch.Tensor]],
    grad_output: torch.Tensor,
    leaves: tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]],
) -> list[Optional[torch.Tensor]]:
    """``_three_products``'s gradients (for grad_output 1) times grad_output, in place
    (``_scale_kernel``: skipped when grad_output is 1), in the shape and dtype of
    ``leaves`` (input, weight, bias)."""
    _scale_in_place(grads, grad_output)
    return [None if g is None else g.view(t.shape).to(t.dtype) for g, t in zip(grads, leaves)]


def _scale_in_place(grads: list[Optional[torch.Tensor]], grad_output: torch.Tensor) -> None:
    """Each gradient times grad_output, in place (``_scale_kernel``)."""
    scale = grad_output.reshape(1).contiguous()
    for g in grads:
        if g is not None and g.numel() > 0:  # the factor is read on the device: no sync
            blocks = min(cdiv(g.numel(), _SCALE_BLOCK), 4 * _num_sms(g.device))
            fast(_scale_kernel)[(blocks,)](g, scale, g.numel(), BLOCK=_SCALE_BLOCK, num_warps=8)


def _options(label_smoothing: float, z_loss: float, softcap: Optional[float]) -> _Options:
    return _Options(float(label_smoothing), float(z_loss), None if softcap is None else float(softcap))


# ---------------------------------------------------------------------------
# The registered operators: what torch.compile sees
# ---------------------------------------------------------------------------
#
# Under torch.compile (and torch.export) the kernels run as two custom operators (module
# docstring): ``ojas::linear_cross_entropy`` (the forward: the loss, and the gradients the
# schedule computes there, for grad_output 1, or the lse of every token) and
# ``ojas::linear_cross_entropy_backward`` (scales the forward's gradients in place, declared
# as mutations, and computes the 4-product schedule's grad_weight and grad_bias).  Their
# implementations are the eager path's functions with the same arguments.  Outputs not
# computed are empty tensors (the ops' outputs have static shapes: the 4-product schedule's
# kept tokens are recomputed from the target in the backward, its lse handed over for every
# token, NaN at ignored ones).

_FORWARD_SCHEMA = (
    "(Tensor input, Tensor weight, Tensor? bias, Tensor target, str reduction, int ignore_index, "
    "float label_smoothing, float z_loss, float? softcap, bool[] need, str config) "
    "-> (Tensor, Tensor, Tensor, Tensor, Tensor)"
)
_BACKWARD_SCHEMA = (
    "(Tensor grad_output, Tensor input, Tensor weight, Tensor? bias, Tensor target, Tensor lse, "
    "Tensor(a!) grad_input, Tensor(b!) grad_weight, Tensor(c!) grad_bias, str reduction, "
    "int ignore_index, float label_smoothing, float z_loss, float? softcap, bool[] need, str config) "
    "-> (Tensor, Tensor)"
)


@torch.compiler.assume_constant_result
def _config_text(config: Optional[LinearCrossEntropyConfig]) -> str:
    """``config`` as the ops take it: JSON of its fields, "" for None (the default config of
    the input's dtype and device); a constant of the graph to Dynamo."""
    return "" if config is None else json.dumps(dataclasses.asdict(config))


def _op_config(text: str, input: torch.Tensor) -> LinearCrossEntropyConfig:
    """The config of an op's call (the inverse of :func:`_config_text`)."""
    return _config_of(text) if text else default_config(input.dtype, input.device)


@functools.lru_cache(maxsize=64)
def _config_of(text: str) -> LinearCrossEntropyConfig:
    fields = json.loads(text)
    return LinearCrossEntropyConfig(
        GemmConfig(**fields.pop("fwd")), GemmConfig(**fields.pop("bwd")), RowConfig(**fields.pop("rows")), **fields
    )


def _check_targets(target: torch.Tensor, ignore_index: int, V: int) -> None:
    """Raise unless every target is in [0, V) or ``ignore_index`` (a host sync; the eager path
    leaves this to ``ojas_ref.linear_cross_entropy``, which checks before dispatching here)."""
    bad = (target != ignore_index) & ((target < 0) | (target >= V))
    if bad.any():
        raise ValueError(f"target holds {int(target[bad][0])}, not a class in [0, {V}) nor ignore_index={ignore_index}")


def _three(config: LinearCrossEntropyConfig, reduction: str, need) -> bool:
    """Whether the 3-product schedule runs (every gradient in the forward)."""
    return config.products == 3 and reduction != "none" and any(need)


def _all_lse(fw: _Forward, n_tokens: int) -> torch.Tensor:
    """The lse of every token, NaN at the ignored ones."""
    return fw.lse if fw.kept is None else fw.lse.new_full((n_tokens,), math.nan).index_copy_(0, fw.kept, fw.lse)


@torch.library.custom_op("ojas::linear_cross_entropy", mutates_args=(), schema=_FORWARD_SCHEMA)
def _forward_op(input, weight, bias, target, reduction, ignore_index, label_smoothing, z_loss, softcap, need, config):
    opts, config = _options(label_smoothing, z_loss, softcap), _op_config(config, input)
    with torch.autocast(input.device.type, enabled=False):
        x, w, b, t = _prepare(input, weight, target, bias)
        _check_targets(t, ignore_index, w.shape[0])
        if _three(config, reduction, need):
            gr = _three_products(x, w, b, t, ignore_index, reduction, opts, tuple(need), config)
            loss = _reduce(gr.loss, None, t.numel(), reduction, gr.count)
            grads, lse = (gr.grad_input, gr.grad_weight, gr.grad_bias), x.new_empty(0, dtype=torch.float32)
        else:
            fw = _forward(x, w, b, t, ignore_index, reduction, opts, need[0], config)
            loss = _reduce(fw.loss, fw.kept, t.numel(), reduction)
            grads, lse = (fw.grad_input, None, None), _all_lse(fw, t.numel())
    # an output computed or an empty one (each its own: the outputs must not alias)
    grad_input, grad_weight = (x.new_empty(0) if g is None else g for g in grads[:2])
    grad_bias = x.new_empty(0, dtype=torch.float32) if grads[2] is None else grads[2]
    return loss.view(target.shape) if reduction == "none" else loss, grad_input, grad_weight, grad_bias, lse


@_forward_op.register_fake
def _(input, weight, bias, target, reduction, ignore_index, label_smoothing, z_loss, softcap, need, config):
    N, (V, D) = target.numel(), weight.shape
    three = _three(_op_config(config, input), reduction, need)
    f32 = dict(dtype=torch.float32, device=input.device)
    return (
        torch.empty(target.shape if reduction == "none" else (), **f32),
        input.new_empty((N, D) if need[0] else (0,)),
        input.new_empty((V, D) if three and need[1] else (0,)),
        torch.empty((V,) if three and need[2] else (0,), **f32),
        torch.empty((0,) if three else (N,), **f32),
    )


@torch.library.custom_op(
    "ojas::linear_cross_entropy_backward",
    mutates_args=("grad_input", "grad_weight", "grad_bias"),
    schema=_BACKWARD_SCHEMA,
)
def _backward_op(
    grad_output,
    input,
    weight,
    bias,
    target,
    lse,
    grad_input,
    grad_weight,
    grad_bias,
    reduction,
    ignore_index,
    label_smoothing,
    z_loss,
    softcap,
    need,
    config,
):
    opts, config = _options(label_smoothing, z_loss, softcap), _op_config(config, input)
    with torch.autocast(grad_output.device.type, enabled=False):
        if _three(config, reduction, need):
            _scale_in_place([grad_input, grad_weight, grad_bias], grad_output)
            return weight.new_empty(0), weight.new_empty(0)
        t = _prepare(input, weight, target, bias)[3]
        mask = t != ignore_index
        kept, _, tgt = _kept_tokens(t, mask, mask.sum())
        _, grad_w, grad_b = _four_products_backward(
            grad_output,
            input,
            weight,
            bias,
            target,
            kept,
            tgt,
            lse if kept is None else lse.index_select(0, kept),
            grad_input,
            tuple(need),
            reduction,
            opts,
            config,
        )
    return tuple(weight.new_empty(0) if g is None else g for g in (grad_w, grad_b))


@_backward_op.register_fake
def _(
    grad_output,
    input,
    weight,
    bias,
    target,
    lse,
    grad_input,
    grad_weight,
    grad_bias,
    reduction,
    ignore_index,
    label_smoothing,
    z_loss,
    softcap,
    need,
    config,
):
    four = not _three(_op_config(config, input), reduction, need)
    return (
        weight.new_empty(weight.shape if four and need[1] else (0,)),
        bias.new_empty(bias.shape) if four and need[2] and bias is not None else weight.new_empty(0),
    )


def _setup_context(ctx, inputs, output) -> None:
    input, weight, bias, target, *args = inputs
    _, grad_input, grad_weight, grad_bias, lse = output
    ctx.save_for_backward(input, weight, bias, target, lse, grad_input, grad_weight, grad_bias)
    ctx.args = args


def _forward_op_backward(ctx, grad_output, *_):
    """The gradients of input, weight and bias (the op's other outputs are not differentiated)."""
    _refuse_double_backward()
    input, weight, bias, target, lse, grad_input, grad_weight, grad_bias = ctx.saved_tensors
    reduction, _, _, _, _, need, config = ctx.args
    new_weight, new_bias = _backward_op(
        grad_output, input, weight, bias, target, lse, grad_input, grad_weight, grad_bias, *ctx.args
    )
    if not _three(_op_config(config, input), reduction, need):
        grad_weight, grad_bias = new_weight, new_bias
    grads = [
        g if wanted and t is not None else None
        for g, t, wanted in zip((grad_input, grad_weight, grad_bias), (input, weight, bias), need)
    ]
    return (
        *(None if g is None else g.view(t.shape).to(t.dtype) for g, t in zip(grads, (input, weight, bias))),
        *(None,) * 8,
    )


_forward_op.register_autograd(_forward_op_backward, setup_context=_setup_context)


def linear_cross_entropy(
    input: torch.Tensor,
    linear_weight: torch.Tensor,
    target: torch.Tensor,
    *,
    linear_bias: Optional[torch.Tensor] = None,
    reduction: str = "mean",
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    z_loss: float = 0.0,
    softcap: Optional[float] = None,
    config: Optional[LinearCrossEntropyConfig] = None,
    head=None,
) -> torch.Tensor:
    """Differentiable linear cross-entropy; arguments and result as
    ``ojas_ref.functional.linear_cross_entropy.linear_cross_entropy`` (which checks them and
    dispatches here with ``impl="triton"``, after ``torch.autocast``'s casts); input,
    weight and bias of one dtype, float16, bfloat16 or float32, the loss float32
    whatever it is; forward and backward run with autocast disabled.  Targets must be
    in [0, V) or ``ignore_index``: not checked here (the check costs a sync).

    Forward: ``ce_forward`` / ``ce_output`` (Definitions.v), the lse by merged
    vocabulary-chunk states (``Ojas.CrossEntropy.ChunkedLse.merge_chunks_lse``), the
    loss by ``Ojas.CrossEntropy.Loss.token_forward_correct``, ignored tokens dropped
    (``Ojas.CrossEntropy.Reduction.ce_drop_ignored``) and reduced by
    ``Ojas.CrossEntropy.Reduction.ce_loss_correct`` / ``ce_mean_all_ignored``.
    Backward: ``Ojas.CrossEntropy.Gradient.ce_backward_correct`` with the entries of
    ``Ojas.CrossEntropy.Gradient.grad_entry_is_derive``; over the reals, fed with the
    forward's lses, these are the partial derivatives of the reduced loss in input,
    linear_weight and linear_bias
    (``Ojas.CrossEntropy.EndToEnd.ce_grad_input_is_derive``,
    ``Ojas.CrossEntropy.EndToEnd.ce_grad_weight_is_derive``,
    ``Ojas.CrossEntropy.EndToEnd.ce_grad_bias_is_derive``; the rounding of the 3-product
    schedule's grad_input and grad_weight: ``Ojas.CrossEntropy.Float.GradError.ce_dh_error``
    / ``ce_dw_error``, the 4-product schedule's (grad_output inside G):
    ``Ojas.CrossEntropy.Float.WeightedGradError.ce_dh4_error`` / ``ce_dw4_error``, without
    bias, cap, smoothing, z-loss, float16; the lse and loss with a cap: ``Ojas.CrossEntropy.Float.SoftcapError.ce_lse_error_softcap`` /
    ``ce_loss_error_softcap``; the capped gradients of the 3-product schedule:
    ``Ojas.CrossEntropy.Float.SoftcapGradError.sc_dh_error`` / ``sc_dw_error``; no theorem
    covers the 4-product schedule's capped gradients nor the rest of this kernel's rounding nor its scaling by grad_output after the fact).  With reduction "mean" or
    "sum" every gradient is computed in the forward (3 products; grad_weight summed
    across token chunks in its dtype, one rounding per chunk), with "none" (or
    ``config.products=4``) grad_input in the forward and the rest by recomputing
    the logits in the backward; the first backward scales the forward's gradients by
    grad_output, a second one through a retained graph recomputes them first (the
    same computation: the same gradients; ``_LinearCrossEntropy``).  Double backward
    is not supported.  Float32 accumulation in every product; see the module
    docstring for the design, the precision of each product and the memory bound.

    ``head``: ojas_ref's ``_HeadUpdate``, the link that ``ojas_ref.linear_cross_entropy(...,
    head_update=opt)`` makes to ``opt = InBackwardOptimizer(head_weight=linear_weight)`` (no bias),
    or None. The schedule is then 4 products whatever ``config`` says: grad_input in
    the forward (from W before any update), and in the backward each vocabulary slab's
    gradient over all kept tokens, after which the slab's rows are updated by plain SGD and
    the gradient dropped (``_backward_weight``'s ``step``): no [V, D] gradient exists. Over the
    reals this is backward then the step, dH whole before the first row's update
    (Ojas.OptimizerInBackward.ChunkedHead.chunked_head_dh_first_code_eq_standard); in floats each
    row's gradient is the 4-product schedule's, rounded as there (not the 3-product default's:
    grad_weight summed in one product instead of per token chunk). The forward's token chunks
    are sized by ``workspace_fraction`` of the gradients' bytes (16 MiB at least) instead of
    grad_weight's bytes, so the forward's workspace stays below the [V, D] gradient it
    replaces.

    Under torch.compile this calls the registered op ``ojas::linear_cross_entropy`` (its backward
    ``ojas::linear_cross_entropy_backward``; module docstring): the same computation with the
    same arguments, so the same values and the theorem citations above unchanged; it checks
    the targets (ValueError naming the first bad one), and refuses ``head``
    (NotImplementedError).  A second backward through a retained graph gives the first's
    gradients again there too (functionalization keeps the forward's gradients the backward op
    scales; tested with Inductor and aot_eager)."""
    _check(input, linear_weight, target, linear_bias, reduction)
    opts = _options(label_smoothing, z_loss, softcap)
    grad = torch.is_grad_enabled()
    need = tuple(grad and t is not None and t.requires_grad for t in (input, linear_weight, linear_bias))
    if torch.compiler.is_compiling():
        if head is not None:
            raise NotImplementedError(
                "linear_cross_entropy under torch.compile: the head weight updated inside the "
                "backward (head_update=, an InBackwardOptimizer(head_weight=...)) is not supported; "
                "call ojas_ref.linear_cross_entropy(..., head_update=opt), which runs it eagerly, or "
                "pass head_update=None"
            )
        return _forward_op(
            input,
            linear_weight,
            linear_bias,
            target,
            reduction,
            ignore_index,
            opts.eps,
            opts.lam,
            opts.softcap,
            list(need),
            _config_text(config),
        )[0]
    chosen = config is not None
    config = config or default_config(input.dtype, input.device)
    if head is not None:
        if linear_bias is not None:
            raise NotImplementedError("the head updated inside the backward takes no bias")
        config = _head_update_config(config, input, linear_weight, cublas_logits=not chosen)
    return _LinearCrossEntropy.apply(
        input, linear_weight, linear_bias, target, reduction, ignore_index, opts, config, need, head
    )


def _head_update_config(
    config: LinearCrossEntropyConfig, input: torch.Tensor, weight: torch.Tensor, cublas_logits: bool = False
) -> LinearCrossEntropyConfig:
    """``config`` with 4 products and, unless it fixes one, a forward token chunk whose float32
    logits, G rows, gathered rows and grad_input rows fit ``workspace_fraction`` of the
    gradients' bytes (16 MiB at least), as the backward slab is sized: the [V, D] gradient is
    gone, so the forward's workspace is not sized by it. ``cublas_logits`` (the default config):
    float32 on CUDA computes both passes' logits with cuBLAS (``fwd_logits`` / ``bwd_logits``
    "cublas", the products the 3-product default uses) instead of the Triton dots, which run
    float32 on the FMA units: on the H200 the 1.06B fp32 SGD step with the head update ran at
    0.918x of standard + checkpointing with the Triton dots and at 1.018x with cuBLAS's (with
    offload and split checkpoints; benchmarks/RESULTS.md)."""
    if cublas_logits and input.dtype == torch.float32 and input.device.type == "cuda":
        config = dataclasses.replace(config, fwd_logits="cublas", bwd_logits="cublas")
    if config.token_chunk is not None:
        return dataclasses.replace(config, products=4)
    V, D = weight.shape
    N = max(input.numel() // max(D, 1), 1)
    itemsize = input.element_size()
    budget = max(int(config.workspace_fraction * (N + V) * D * itemsize), 16 << 20)
    row_bytes = _round_up(V, config.fwd.block_n) * (4 + itemsize) + D * (4 + itemsize)
    chunk = min(_round_down(budget // row_bytes, config.fwd.block_m), N)
    return dataclasses.replace(config, products=4, token_chunk=max(chunk, 1))


def linear_cross_entropy_forward(
    input: torch.Tensor,
    linear_weight: torch.Tensor,
    target: torch.Tensor,
    *,
    linear_bias: Optional[torch.Tensor] = None,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    z_loss: float = 0.0,
    softcap: Optional[float] = None,
    config: Optional[LinearCrossEntropyConfig] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token (loss, lse), float32, in the shape of target, without autograd: 0 and
    NaN at ignored tokens (their logits are never computed).  One GEMM pass
    (``ce_forward``; ``Ojas.CrossEntropy.ChunkedLse.merge_chunks_lse``,
    ``Ojas.CrossEntropy.Loss.token_forward_correct``).  Under torch.compile: the registered op
    ``ojas::linear_cross_entropy`` under no_grad (its lse of every token is this result)."""
    _check(input, linear_weight, target, linear_bias, "none")
    opts = _options(label_smoothing, z_loss, softcap)
    if torch.compiler.is_compiling():
        with torch.no_grad():
            loss, *_, lse = _forward_op(
                input,
                linear_weight,
                linear_bias,
                target,
                "none",
                ignore_index,
                opts.eps,
                opts.lam,
                opts.softcap,
                [False] * 3,
                _config_text(config),
            )
        return loss, lse.view(target.shape)
    config = config or default_config(input.dtype, input.device)
    x, w, b, t = _prepare(input, linear_weight, target, linear_bias)
    with torch.no_grad():
        fw = _forward(x, w, b, t, ignore_index, "none", opts, False, config)
        loss = _reduce(fw.loss, fw.kept, t.numel(), "none")
        lse = _all_lse(fw, t.numel())
    return loss.view(target.shape), lse.view(target.shape)
