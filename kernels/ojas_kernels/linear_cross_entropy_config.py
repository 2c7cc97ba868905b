"""Launch parameters and chunking of the Triton linear cross-entropy: ``GemmConfig`` (the tiles of
``_logits_kernel``), ``RowConfig`` (those of ``_rows_kernel``), ``LinearCrossEntropyConfig``
(both, the token chunk and vocabulary slab, the schedule), ``default_config`` (per dtype and
device) and ``_head_update_config`` (the 4-product config the head updated inside the backward
runs).

No theorem depends on them: ``Ojas.LinearCrossEntropy.ChunkedLse.merge_chunks_lse`` holds for any
split of the vocabulary into groups of tiles, ``Ojas.LinearCrossEntropy.Gradient.ce_backward_correct``
and the end-to-end theorems (``Ojas.LinearCrossEntropy.EndToEnd.ce_backward_is_gradient``) for any
token and vocabulary chunks, so the tiles and chunks are picked for speed and memory
(benchmarks/linear_cross_entropy_tuning.md).  The floating-point bounds take them as
parameters: the number of token chunks enters ``Ojas.LinearCrossEntropy.Float.GradError.ce_dw_error``
(one rounding of grad_weight per chunk), the vocabulary tiles of a program
``Ojas.LinearCrossEntropy.Float.LseLossError.ce_lse_error_two_level``.

Options, for tuning (benchmarks/linear_cross_entropy_tuning.md): with 4 products, the logits
through cuBLAS with float32 output, ``_rows_kernel`` then making the statistics or G from them
(``fwd_logits`` / ``bwd_logits`` = "cublas").
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

import torch

from .linear_cross_entropy_args import _round_down, _round_up

__all__ = ["GemmConfig", "RowConfig", "LinearCrossEntropyConfig", "default_config"]


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
    ``workspace_fraction`` (4 products) is the backward slab's budget as a fraction of the
    gradients' bytes; ``peak_fraction`` (3 products) bounds all that the forward and backward
    allocate beyond the gradients, as a fraction of the gradients' bytes (16 MiB at least):
    the token chunks are sized to it (``_three_products_plan``).  The default 0.14 keeps the
    chunks the H200 tune of 2026-11-29 picked for speed (``git show
    00e45ce:benchmarks/results/linear_cross_entropy_h200_tune.md``, N = 16384, D = 4096,
    V = 128256, none ignored: a workspace of 0.06 / 0.09 / 0.12 / 0.14 x the gradients ran
    125.0 / 106.3 / 93.8 / 93.1 ms, each chunk reading and writing grad_weight; 4 products
    132.2 ms, with cuBLAS logits 119.2); 0.05 meets issue 30's bound (peak at most 1.05 x the
    gradients) with about 2.3 x as many chunks at that shape and 2.7 x at N = 8192, D = 2048,
    V = 256000 (``products=4`` with ``workspace_fraction=0.05`` meets it too when every token
    is kept, at the price of the fourth product); ``fwd_logits`` "cublas" computes the
    forward's float32 logits (when grad_input is needed) with cuBLAS and lets
    ``_rows_kernel`` stream them (one more read of them), "triton" with ``_logits_kernel``, the backward's kernel:
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
    peak_fraction: float = 0.14
    fwd_logits: str = "triton"
    bwd_logits: str = "triton"
    products: int = 3
    grad_input_space: bool = True

    def __post_init__(self) -> None:
        if not self.peak_fraction > 0.0:  # NaN too
            raise ValueError(f"peak_fraction must be > 0, got {self.peak_fraction!r}")
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
    0.918x of standard + checkpointing with the Triton dots (``git show 04b62fa:benchmarks/RESULTS.md``)
    and at 1.018x with cuBLAS's (with offload and split checkpoints: the bench_memory records of
    2026-12-01 at commit 9f59f4c in benchmarks/records.jsonl, mode +offload+head-update+split)."""
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
