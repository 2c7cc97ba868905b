"""Launch parameters of the flash-attention kernels: tile shapes, warps and pipeline stages.

No theorem depends on them: ``Ojas.Attention.StreamCorrect`` (``stream_row_correct``,
``attention_forward_correct``) holds for key tiles of any size and
``Ojas.Attention.BackwardCorrect`` (``attention_backward_dQ_key_tiles``,
``attention_backward_query_tiles``) for any split of the keys and queries into tiles, so the
tile sizes are picked per device for speed (benchmarks/attention_tuning.md).  The
floating-point bounds (``ojas_ref.verification.bounds.attention``) take the tile sizes as
parameters (``ojas_ref.verification.attention_error`` reads them from :func:`default_config`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch

from .host import next_power_of_2

__all__ = ["KernelConfig", "AttentionConfig", "default_config"]


@dataclass(frozen=True)
class KernelConfig:
    """Tile shape and launch parameters of one kernel."""

    block_m: int
    block_n: int
    num_warps: int = 4
    num_stages: int = 2
    split: bool = True  # run the tiles that need no mask through a loop without masking (not with attn_mask)


@dataclass(frozen=True)
class AttentionConfig:
    """Launch parameters of the forward, dK/dV and dQ kernels."""

    fwd: KernelConfig
    bwd_kv: KernelConfig
    bwd_q: KernelConfig


@lru_cache(maxsize=None)
def default_config(head_dim: int, dtype: torch.dtype, device: torch.device, is_causal: bool = False) -> AttentionConfig:
    """Launch parameters per head-dim block, dtype and mask, picked with ptxas's
    register report and timings on an H200 (benchmarks/attention_tuning.md), except
    float32 under TF32 (untuned); small tiles for the CPU interpreter.  With an
    ``attn_mask`` the same tiles run, every one through the masked loop (untuned).
    Cached (the configurations are frozen): the launch code asks at every call."""
    K = KernelConfig
    if device.type != "cuda":
        return AttentionConfig(K(16, 16), K(16, 16), K(16, 16))
    block_e = _block_dim(head_dim)
    if dtype == torch.float32:
        # TF32 and 3xTF32 dots (see _dot_precision) run on the tensor cores. Up to head
        # dim 128: tiles timed for 3xTF32 on an H200 (E=128, S=2048, causal; forward 0.49
        # ms, backward 1.84 ms; benchmarks/attention_tuning.md), used for TF32 too
        # (untuned there). dQ tiles of 64 x 16 with 8 warps and dK/dV tiles of 16 x 64 with
        # 8 warps made illegal memory accesses under 3xTF32 in that sweep: not used.
        if block_e <= 128:
            return AttentionConfig(K(32, 64, 4, 2), K(64, 32, 8, 1), K(32, 32, 4, 2))
        return AttentionConfig(K(32, 32, 8, 1), K(16, 32, 8, 1), K(32, 16, 8, 1))
    # Under a causal mask the dK/dV kernel runs one masked loop (split=False):
    # measured faster than splitting off its few diagonal tiles.
    if block_e <= 64:
        if is_causal:
            return AttentionConfig(K(128, 64, 8, 3), K(32, 64, 4, 3, False), K(64, 64, 4, 3))
        return AttentionConfig(K(128, 64, 8, 3), K(64, 64, 4, 3), K(64, 64, 4, 3))
    if block_e <= 128:
        if is_causal:
            return AttentionConfig(K(64, 64, 4, 3), K(32, 64, 4, 3, False), K(128, 64, 8, 3))
        return AttentionConfig(K(64, 64, 4, 3), K(32, 64, 4, 3), K(128, 64, 8, 3))
    return AttentionConfig(K(64, 64, 4, 2), K(32, 32, 8, 2), K(64, 32, 4, 2))


def _block_dim(d: int) -> int:
    return max(16, next_power_of_2(d))
