"""Host side of the Triton linear cross-entropy that both schedules share: the argument checks
and layout (``_check``, ``_prepare``), the options as the kernels take them (``_Options``), the
kept tokens (``_kept_tokens``), the reduction of the per-token losses (``_reduce``) and integer
sizes.

Theorems implemented (over the reals, ``rocq/LinearCrossEntropy/``):

* ``Ojas.LinearCrossEntropy.Reduction.ce_drop_ignored``: the tokens whose target is ``ignore_index``
  are removed before any matrix product (``_kept_tokens``: their indices and targets), so they
  cost no product; ``ignored_grad_zero``: their rows of grad_input are 0.
* ``Ojas.LinearCrossEntropy.Reduction.ce_loss_correct`` (``_reduce``: ``ce_output``, the sum, or the
  mean over the kept count) and ``ce_mean_all_ignored`` (the mean over no kept token is 0).

The rest is bookkeeping no theorem covers: the checks, the layouts, the options' conversion,
the number of multiprocessors, the rounding of sizes.  float16 G is stored times
``_FP16_HEADROOM`` (a power of two; no theorem covers float16's scaled G).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Optional

import torch

from .host import cdiv


_REDUCTIONS = ("none", "mean", "sum")
_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
# float16 G is stored times a power of two so that probabilities down to 2^-14 / 256
# stay normal numbers (|G| <= 1 + 2 lam |lse| before scaling); undone in float32.
_FP16_HEADROOM = 256.0


@dataclass(frozen=True)
class _Options:
    eps: float
    lam: float
    softcap: Optional[float]

    def kernel_args(self, V: int) -> dict:
        return dict(softcap=1.0 if self.softcap is None else self.softcap, eps=self.eps, lam=self.lam, inv_v=1.0 / V)


def _options(label_smoothing: float, z_loss: float, softcap: Optional[float]) -> _Options:
    return _Options(float(label_smoothing), float(z_loss), None if softcap is None else float(softcap))


@functools.lru_cache(maxsize=None)
def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def _round_down(x: int, multiple: int) -> int:
    return max(multiple, x // multiple * multiple)


def _round_up(x: int, multiple: int) -> int:
    return cdiv(x, multiple) * multiple


def _kept_tokens(
    target: torch.Tensor, mask: torch.Tensor, count: torch.Tensor
) -> tuple[Optional[torch.Tensor], int, torch.Tensor]:
    """The kept tokens (``Ojas.LinearCrossEntropy.Reduction.ce_drop_ignored``) from ``mask`` =
    (target != ignore_index) and ``count`` = its sum, launched by the caller before any
    host work that does not need them: their indices (None when all are kept), their
    count K (read here: the host sync) and their targets."""
    K = int(count)
    if K == target.numel():
        return None, K, target
    kept = mask.nonzero().squeeze(1)
    return kept, K, target.index_select(0, kept)


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
