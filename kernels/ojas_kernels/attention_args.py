"""Host side of the flash-attention kernels: check the arguments, allocate the outputs and turn
the arguments into what the kernels take (pointers, strides, scalars and constexpr flags).

Layout: query ``[B, Hq, Sq, E]``, key ``[B, Hkv, Sk, E]``, value ``[B, Hkv, Sk, Ev]`` with
``Hkv`` dividing ``Hq`` (query head ``h`` reads key head ``h // (Hq // Hkv)``:
``Ojas.Attention.GroupedQuery.gqa_forward_repeat_kv``).  A boolean ``attn_mask`` broadcast to
``[B, Hq, Sq, Sk]`` is one more conjunct of the visibility
(``Ojas.Attention.Mask.visibility_true_iff``), read through stride-0 views, never expanded in
memory; an additive one is added to the scores (``Ojas.Attention.AdditiveMask``).  The rest is
bookkeeping no theorem covers: the checks, the dropout key and threshold, the window clamp,
the output layouts.

float32 dots follow torch's float32 matmul precision (``_dot_precision``): TF32 unless it is
"highest", and then 3xTF32 (``tf32x3``: each operand split into a TF32 high part and a TF32
remainder, three tensor-core products, the remainders' product dropped; about float32's
accuracy: relative errors 4e-7 to 8e-7 at S=2048, E=128 on an H200, against 5e-7 to 9e-7 for
torch's float32 SDPA kernel and 5e-7 to 1e-6 for IEEE dots, which ran 7x slower).  The
rounding model of the proofs (one rounding of relative error u per operation) is not that of
3xTF32 products: no theorem bounds their error.
"""

from __future__ import annotations

import functools
import numbers
from dataclasses import dataclass
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from .attention_config import KernelConfig, _block_dim

_LOG2E = 1.4426950408889634
_HIGHEST = "tf32x3"  # float32 dots under torch's "highest" precision (module docstring)
_MAX_HEAD_DIM = 256


def _last_dim_contiguous(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def _check(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, window: int | None, attn_mask: torch.Tensor | None
) -> None:
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        raise ValueError("flash_attention expects [B, H, S, E] query, key and value")
    dtypes = (torch.float16, torch.bfloat16, torch.float32)
    if not (query.dtype == key.dtype == value.dtype) or query.dtype not in dtypes:
        raise ValueError(
            f"flash_attention supports float16, bfloat16 and float32 inputs of one dtype, "
            f"got {query.dtype}, {key.dtype}, {value.dtype}"
        )
    if not (query.device == key.device == value.device):
        raise ValueError("query, key and value must be on one device")
    bq, hq, _, e = query.shape
    bk, hk, sk, ek = key.shape
    if bk != bq or value.shape[0] != bq or value.shape[1] != hk or value.shape[2] != sk or ek != e:
        raise ValueError(
            f"incompatible shapes: query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}"
        )
    if hk == 0 or hq % hk != 0:
        raise ValueError(f"key heads ({hk}) must divide query heads ({hq})")
    if max(e, value.shape[3]) > _MAX_HEAD_DIM:
        raise ValueError(f"head dim {max(e, value.shape[3])} is above the kernel's limit of {_MAX_HEAD_DIM}")
    if window is not None and window < 1:
        raise ValueError(f"window must be >= 1 (keys with |i - j| < window take part), got {window}")
    if attn_mask is not None:
        _check_mask(attn_mask, query, key)


def _full_mask_shape(query: torch.Tensor, key: torch.Tensor) -> tuple[int, int, int, int]:
    return (query.shape[0], query.shape[1], query.shape[2], key.shape[2])


def _check_mask(attn_mask: torch.Tensor, query: torch.Tensor, key: torch.Tensor) -> None:
    if not isinstance(attn_mask, torch.Tensor):
        raise TypeError(f"attn_mask must be a torch.Tensor or None, got {type(attn_mask).__name__}")
    if attn_mask.dtype != torch.bool and attn_mask.dtype != query.dtype:
        raise ValueError(
            f"attn_mask must have dtype torch.bool or the query's dtype {query.dtype}, got {attn_mask.dtype}"
        )
    if attn_mask.device != query.device:
        raise ValueError(f"attn_mask is on {attn_mask.device} but query is on {query.device}")
    full = _full_mask_shape(query, key)
    shape = tuple(attn_mask.shape)
    padded = (1,) * (4 - len(shape)) + shape
    if len(shape) > 4 or any(m != 1 and m != f for m, f in zip(padded, full)):
        raise ValueError(f"attn_mask must be broadcastable to [B, Hq, Sq, Sk] = {list(full)}, got shape {list(shape)}")


def _check_infer_causal(infer_causal: bool, window_hint: int | None, is_causal: bool, window: int | None) -> None:
    """``infer_causal`` and ``window_hint`` (:func:`_infer_causal`) against ``is_causal`` and ``window``."""
    if window_hint is not None:
        if not infer_causal:
            raise ValueError("window_hint is a hint for infer_causal=True; pass window= for a window that applies")
        if window_hint < 1:
            raise ValueError(f"window_hint must be >= 1 (keys with |i - j| < window_hint), got {window_hint}")
    if infer_causal and (is_causal or window is not None):
        raise ValueError(
            "infer_causal=True infers is_causal and window from the mask: pass is_causal=False and window=None "
            f"(got is_causal={is_causal}, window={window})"
        )


# (storage, storage offset, shape, strides, Sq, Sk, window) -> (weak reference to the storage, the
# mask's version, within, equal): a bool mask's structure (_mask_structure). Hugging Face builds one
# mask per forward (and layer type) and hands it to every layer, and the backward gets it back;
# Inductor passes each layer a new tensor over the same storage: one pass per forward. Keyed by the
# storage, held weakly (while it lives, no other storage takes its address): contents changed
# without a version bump (through ``.data``, numpy, or code that writes the memory itself) are not
# noticed.
_MASK_STRUCTURE: dict[tuple, tuple[StorageWeakRef, int, bool, bool]] = {}
_MASK_CACHE_SIZE = 16


def _mask_structure(mask: torch.Tensor, seq_q: int, seq_k: int, window: int | None) -> tuple[bool, bool]:
    """``(within, equal)`` for a bool mask broadcastable to ``[..., Sq, Sk]``: whether every key it
    keeps has ``j <= i`` (and ``i - j < window``), and whether it keeps all of those in every
    ``[Sq, Sk]`` slice. Read from its contents (one pass, one wait for the device), cached per
    storage, view and version (``_MASK_STRUCTURE``)."""
    storage = mask.untyped_storage()
    key = (storage._cdata, mask.storage_offset(), tuple(mask.shape), mask.stride(), seq_q, seq_k, window)
    cached = _MASK_STRUCTURE.get(key)
    if cached is not None and not cached[0].expired() and cached[1] == mask._version:
        return cached[2], cached[3]
    i = torch.arange(seq_q, device=mask.device).unsqueeze(1)
    j = torch.arange(seq_k, device=mask.device).unsqueeze(0)
    allowed = j <= i
    if window is not None:
        allowed = allowed & (i - j < window)
    outside, missing = torch.stack(((mask & ~allowed).any(), (allowed & ~mask).any())).tolist()
    if len(_MASK_STRUCTURE) >= _MASK_CACHE_SIZE:
        _MASK_STRUCTURE.clear()
    _MASK_STRUCTURE[key] = (StorageWeakRef(storage), mask._version, not outside, not (outside or missing))
    return not outside, not (outside or missing)


def _capturing(mask: torch.Tensor) -> bool:
    """Whether a CUDA graph is being captured on the mask's device's current stream."""
    return mask.is_cuda and torch.cuda.is_current_stream_capturing()


def _infer_causal(
    attn_mask: torch.Tensor | None, query: torch.Tensor, key: torch.Tensor, window_hint: int | None
) -> tuple[torch.Tensor | None, bool, int | None]:
    """``(attn_mask, is_causal, window)`` to run for ``attn_mask`` with ``is_causal=False`` and no
    window, inferred from a bool mask's contents (:func:`_mask_structure`): inside the causal pattern
    and ``window_hint``'s band, or else inside the causal pattern: causal (and that window), the mask
    kept unless it is exactly that pattern. The visibility, the mask AND the pattern, is the mask's
    (Ojas.Attention.Mask.visibility_true_iff); the kernel skips the tiles the pattern masks. No mask,
    a float mask, a bool mask outside the pattern, or a CUDA graph being captured (which a wait for
    the device would break): as given."""
    if attn_mask is None or attn_mask.dtype != torch.bool or _capturing(attn_mask):
        return attn_mask, False, None
    for window in (window_hint, None) if window_hint is not None else (None,):
        within, equal = _mask_structure(attn_mask, query.shape[2], key.shape[2], window)
        if within:
            return None if equal else attn_mask, True, window
    return attn_mask, False, None


_NO_MASK_FLAGS = dict(HAS_MASK=False, MASK_BOOL=False)


def _mask_args(
    attn_mask: torch.Tensor | None, query: torch.Tensor, key: torch.Tensor
) -> tuple[torch.Tensor, tuple[int, ...], dict[str, bool]]:
    """The kernels' mask pointer, its ``[B, Hq, Sq, Sk]`` strides (0 along broadcast
    dimensions: the mask is never expanded in memory) and flags (a shared dict: not to be
    changed).  Without a mask the query stands in for the pointer, which the kernels then never
    read."""
    if attn_mask is None:
        return query, (0, 0, 0, 0), _NO_MASK_FLAGS
    mask = attn_mask.reshape((1,) * (4 - attn_mask.dim()) + tuple(attn_mask.shape))
    mask = mask.expand(_full_mask_shape(query, key))
    is_bool = mask.dtype == torch.bool
    if is_bool:
        mask = mask.view(torch.uint8)
    return mask, mask.stride(), dict(HAS_MASK=True, MASK_BOOL=is_bool)


@dataclass(frozen=True)
class _Dropout:
    """One call's attention dropout: the Philox key ``seed`` (int64 ``[2]`` on the inputs'
    device, values in [0, 2^32)), ``threshold`` = min(round(p * 2^31), 2^31 - 1) (an element
    is dropped iff the top 31 bits of its Philox word are below it) and ``scale`` = 1 / (1 - p)
    (0 for p = 1: every output and gradient zero, as SDPA)."""

    seed: torch.Tensor
    threshold: int
    scale: float


def _dropout_args(dropout_p: float, dropout_seed: torch.Tensor | None, query: torch.Tensor) -> _Dropout | None:
    """Check ``dropout_p`` and ``dropout_seed``; None when dropout_p is 0.  Without a seed one
    is drawn from torch's generator of the query's device, as ``ojas_ref.attention`` draws it
    (``torch.randint(0, 2**32, (2,), dtype=torch.int64)``)."""
    if dropout_p == 0 and type(dropout_p) in (float, int):  # the common case, without the ABC checks
        return None
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, numbers.Real):
        raise TypeError(f"dropout_p must be a float, got {type(dropout_p).__name__}")
    if not 0 <= dropout_p <= 1:
        raise ValueError(f"dropout_p must be in [0, 1], got {dropout_p!r}")
    if dropout_p == 0:
        return None
    if dropout_seed is None:
        dropout_seed = torch.randint(0, 2**32, (2,), dtype=torch.int64, device=query.device)
    elif (
        not isinstance(dropout_seed, torch.Tensor)
        or dropout_seed.dtype != torch.int64
        or tuple(dropout_seed.shape) != (2,)
        or dropout_seed.device != query.device
    ):
        got = (
            f"{dropout_seed.dtype} of shape {list(dropout_seed.shape)} on {dropout_seed.device}"
            if isinstance(dropout_seed, torch.Tensor)
            else type(dropout_seed).__name__
        )
        raise ValueError(
            f"dropout_seed must be an int64 tensor of shape [2] on the query's device {query.device} "
            f"(the Philox key), got {got}"
        )
    return _dropout_of(dropout_p, dropout_seed.contiguous())


def _dropout_of(dropout_p: float, dropout_seed: torch.Tensor | None) -> _Dropout | None:
    """The checked ``dropout_p`` and contiguous ``dropout_seed`` as the kernels take them
    (None when dropout_p is 0)."""
    if dropout_p == 0:
        return None
    threshold = min(round(dropout_p * 2**31), 2**31 - 1)
    return _Dropout(dropout_seed, threshold, 0.0 if dropout_p == 1 else 1.0 / (1.0 - dropout_p))


def _dropout_launch_args(dropout: _Dropout | None, query: torch.Tensor) -> tuple[torch.Tensor, int, float, bool]:
    """The kernels' SEED pointer, threshold, scale and HAS_DROPOUT; without dropout the
    query stands in for the pointer, which the kernels then never read."""
    if dropout is None:
        return query, 0, 1.0, False
    return dropout.seed, dropout.threshold, dropout.scale, True


def _dot_precision(dtype: torch.dtype, highest: str = "ieee") -> str:
    """float32 dots as torch's float32 matmuls: "tf32" when TF32 is allowed
    (``torch.set_float32_matmul_precision`` other than "highest", or
    ``torch.backends.cuda.matmul.allow_tf32``, or the newer
    ``torch.backends[.cuda.matmul].fp32_precision = "tf32"``: all read back through
    ``torch.backends.cuda.matmul.fp32_precision``, which, unlike
    ``torch.get_float32_matmul_precision``, does not raise once the newer API is used;
    ``allow_tf32`` before torch 2.9, which lacks it), ``highest`` otherwise ("ieee", or
    "tf32x3" for the attention kernels).  16-bit operands ignore the setting."""
    if dtype != torch.float32:
        return "tf32"
    fp32_precision = getattr(torch.backends.cuda.matmul, "fp32_precision", None)
    tf32 = torch.backends.cuda.matmul.allow_tf32 if fp32_precision is None else fp32_precision == "tf32"
    return "tf32" if tf32 else highest


def _forward_outputs(query: torch.Tensor, value: torch.Tensor, seq_major: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The forward's ``out`` ``[B, Hq, Sq, Ev]`` and ``lse`` ``[B, Hq, Sq]``, uninitialised, in the
    layout the kernel writes (and the fake implementation of the registered op reports)."""
    batch, heads, seq_q = query.shape[:3]
    ev = value.shape[3]
    if seq_major:  # [B, Hq, Sq, Ev] view of a contiguous [B, Sq, Hq, Ev]
        out = torch.empty((batch, seq_q, heads, ev), dtype=query.dtype, device=query.device).transpose(1, 2)
    else:
        out = torch.empty((batch, heads, seq_q, ev), dtype=query.dtype, device=query.device)
    return out, torch.empty((batch, heads, seq_q), dtype=torch.float32, device=query.device)


def _backward_outputs(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV, uninitialised and contiguous, as the backward kernels write them."""
    return tuple(torch.empty_like(t, memory_format=torch.contiguous_format) for t in (query, key, value))


def _window_arg(window: int | None, seq_q: int, seq_k: int) -> int:
    # A window wider than both sequences masks nothing; clamp to stay in int32.
    return 0 if window is None else min(window, seq_q + seq_k + 1)


def _launch_args(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None,
    is_causal: bool,
    scale: float,
    window: int | None,
    dropout: _Dropout | None,
) -> tuple[torch.Tensor, torch.Tensor, tuple[int, ...], int, float, int, float, dict[str, Any]]:
    """What the forward, dQ and dK/dV kernels take alike (query, key and value with a contiguous
    last dim): the mask and SEED pointers, the ``[B, H, S]`` strides of query, key and value and
    the mask's four (in the kernels' order), the clamped window, ``scale * log2(e)`` (scores in
    base 2), the dropout threshold and scale, and the constexprs (head dims and their blocks,
    causal, window, dot precision, dropout and mask flags).  A plain tuple: the launch code runs
    at every call."""
    _, _, seq_q, e = query.shape
    seq_k, ev = key.shape[2], value.shape[3]
    mask, mask_strides, mask_flags = _mask_args(attn_mask, query, key)
    seed, drop_threshold, drop_scale, has_dropout = _dropout_launch_args(dropout, query)
    sq, sk, sv = query.stride(), key.stride(), value.stride()
    strides = (sq[0], sq[1], sq[2], sk[0], sk[1], sk[2], sv[0], sv[1], sv[2], *mask_strides)
    constexprs = _constexprs(
        e,
        ev,
        bool(is_causal),
        window is not None,
        _dot_precision(query.dtype, _HIGHEST),
        has_dropout,
        mask_flags["HAS_MASK"],
        mask_flags["MASK_BOOL"],
    )
    window_arg = _window_arg(window, seq_q, seq_k)
    return mask, seed, strides, window_arg, scale * _LOG2E, drop_threshold, drop_scale, constexprs


@functools.lru_cache(maxsize=None)
def _constexprs(
    e: int,
    ev: int,
    is_causal: bool,
    has_window: bool,
    dot_prec: str,
    has_dropout: bool,
    has_mask: bool,
    mask_bool: bool,
) -> dict[str, Any]:
    """The constexprs the three kernels share (cached: a shared dict, not to be changed)."""
    return dict(
        HEAD_E=e,
        HEAD_EV=ev,
        BLOCK_E=_block_dim(e),
        BLOCK_EV=_block_dim(ev),
        IS_CAUSAL=is_causal,
        HAS_WINDOW=has_window,
        DOT_PREC=dot_prec,
        HAS_DROPOUT=has_dropout,
        HAS_MASK=has_mask,
        MASK_BOOL=mask_bool,
    )


def _tile_args(config: KernelConfig, attn_mask: torch.Tensor | None) -> dict[str, Any]:
    """One kernel's tile constexprs and launch options from its :class:`KernelConfig`; with an
    ``attn_mask`` every tile runs the masked loop (``SPLIT`` off).  Every launch compiles
    without FMA contraction (``enable_fp_fusion=False``): ``s * qk_scale - m`` and
    ``l * alpha + sum`` round twice, as the theorems of rocq/Attention/Float/ model them.
    Cached per configuration: a shared dict, not to be changed."""
    return _tile_options(config, attn_mask is None)


@functools.lru_cache(maxsize=None)
def _tile_options(config: KernelConfig, no_mask: bool) -> dict[str, Any]:
    return dict(
        BLOCK_M=config.block_m,
        BLOCK_N=config.block_n,
        SPLIT=config.split and no_mask,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
        enable_fp_fusion=False,  # no FMA contraction: each product and sum rounds as modelled
    )
