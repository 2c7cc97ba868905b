"""The Hugging Face attention adapter: :func:`ojas_attention_forward` is registered as ``"ojas"``
(:data:`ATTENTION_NAME`) in ``transformers.AttentionInterface``, with :func:`ojas_mask` (Hugging
Face's ``sdpa_mask``, except that a plain causal mask is never built) registered under the same
name in ``AttentionMaskInterface`` (without a mask function the model builds no mask and left
padding is silently ignored); the model is switched with ``set_attn_implementation("ojas")``."""

from __future__ import annotations

import inspect
from typing import Any, Callable, Optional

import torch
from torch import Tensor, nn

from ojas_ref.functional.attention import attention
from ojas_ref.functional.dispatch import plain_kernel_call

__all__ = ["ATTENTION_NAME", "ojas_attention_forward", "ojas_mask", "register"]

#: The name under which the attention function and its mask are registered.
ATTENTION_NAME = "ojas"


def register() -> None:
    """Register ``"ojas"`` in Hugging Face's attention-function and mask registries (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(ATTENTION_NAME, ojas_attention_forward)
    AttentionMaskInterface.register(ATTENTION_NAME, ojas_mask)


def _plain_causal(arguments: dict[str, Any]) -> bool:
    """Whether ``sdpa_mask``'s bound ``arguments`` ask for the causal mask alone (no padding mask,
    no window, packing or other pattern: Hugging Face passes ``allow_is_causal_skip=False`` for
    those) between queries and keys that top-left causality describes: one query, or as many
    keys as queries. Decided from the arguments' Python values and shapes, never from a tensor's
    contents, so it holds under torch.compile too."""
    from transformers.masking_utils import causal_mask_function

    if not arguments.get("allow_is_causal_skip", True) or arguments.get("attention_mask") is not None:
        return False
    if arguments.get("mask_function", causal_mask_function) is not causal_mask_function:
        return False
    kv_length, local_size = arguments.get("kv_length"), arguments.get("local_size")
    if "q_length" in arguments:
        q_length = arguments["q_length"]
    elif isinstance(arguments.get("cache_position"), Tensor):  # transformers before q_length
        q_length = arguments["cache_position"].shape[0]
    else:
        return False
    if local_size is not None and kv_length >= local_size:
        return False
    return q_length == 1 or q_length == kv_length


def ojas_mask(*args: Any, **kwargs: Any) -> Optional[Tensor]:
    """Hugging Face's ``sdpa_mask`` (same arguments, same mask), except that the plain causal
    mask (:func:`_plain_causal`) is not built: None, and :func:`ojas_attention_forward` passes
    ``is_causal``, so the kernel skips the tiles above the diagonal. ``sdpa_mask`` makes the same
    choice eagerly, but under torch.compile (torch < 2.14) it always builds the ``[B, 1, S, S]``
    mask. (Without a cache Hugging Face asks for the packed-sequence pattern instead, which this
    builds: :func:`ojas_attention_forward` then finds the causal pattern in it when it runs.)"""
    from transformers.masking_utils import sdpa_mask

    bound = inspect.signature(sdpa_mask).bind(*args, **kwargs)
    arguments = {**bound.arguments, **bound.arguments.get("kwargs", {})}
    if _plain_causal(arguments):
        return None
    return sdpa_mask(*args, **kwargs)


_FLASH_ATTENTION: Optional[Callable[..., Tensor]] = None


def _flash_attention() -> Callable[..., Tensor]:
    """``ojas_kernels.attention.flash_attention``, imported at the first call (the kernels need
    Triton), then kept (a module global, not functools.cache, whose wrapper torch.compile warns about)."""
    global _FLASH_ATTENTION
    if _FLASH_ATTENTION is None:
        from ojas_kernels.attention import flash_attention

        _FLASH_ATTENTION = flash_attention
    return _FLASH_ATTENTION


def ojas_attention_forward(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Optional[Tensor],
    dropout: float = 0.0,
    scaling: Optional[float] = None,
    sliding_window: Optional[int] = None,
    softcap: Optional[float] = None,
    is_causal: Optional[bool] = None,
    **kwargs: Any,
) -> tuple[Tensor, None]:
    """Hugging Face attention function (``AttentionInterface``) computed by :func:`ojas_ref.attention`.

    query [B, Hq, Sq, E], key/value [B, Hkv, Sk, E]; returns ([B, Sq, Hq, E], None), as
    Hugging Face's ``sdpa_attention_forward``, whose masking rules it follows: without a
    mask the attention is causal when the module is causal and Sq > 1 (top-left aligned);
    a mask (bool, True = attend, from ``sdpa_mask``; or additive float) is applied as is.
    A causal module's bool mask (Sq = Sk > 1) inside the causal pattern also runs ``is_causal``
    (with ``sliding_window`` as the window where it lies inside that band too), so the kernel
    skips masked tiles, and runs without the mask where it is exactly that pattern; the
    conjunction changes nothing (Ojas.Attention.Mask.visibility_true_iff). Decided from the mask's
    contents when the kernel runs (``infer_causal`` of ``flash_attention``: one pass per mask and
    forward), so under torch.compile too, where Hugging Face builds the causal mask of every batch
    that has no padding mask and no cache (it cannot tell there whether ``position_ids`` pack
    several sequences) and the kernel read it in every tile of the full square: twice eager's
    attention time (H100, 2026-12-06, issue 29).

    Theorems: those of :func:`ojas_ref.attention` (Ojas.Attention.StreamCorrect.attention_forward_correct,
    Ojas.Attention.Mask.stream_row_masked_keys, Ojas.Attention.BackwardCorrect.attention_backward_dQ_is_derive).
    Not covered by a theorem: the mask Hugging Face builds, the head layout and GQA
    (key/value head h // (Hq // Hkv) serves query head h, as ``repeat_kv``).
    ``dropout`` is SDPA's ``dropout_p`` (Hugging Face passes 0.0 outside training): the
    probabilities are dropped by a counter-based mask recomputed in the backward, which no
    theorem covers beyond the per-row statements :func:`ojas_ref.attention` names.
    Refused (NotImplementedError): attention soft-capping, a position bias, sinks.
    """
    if softcap is not None:
        raise NotImplementedError(
            f"ojas attention has no logit soft-capping (softcap={softcap}); "
            "optimize_model leaves such models' attention alone"
        )
    for name in ("position_bias", "s_aux", "sinks"):
        if kwargs.get(name) is not None:
            raise NotImplementedError(f"ojas attention does not take {name}")
    causal_module = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    sq, sk = query.shape[2], key.shape[2]
    infer = False
    if attention_mask is None:
        causal = bool(causal_module) and sq > 1
        if causal and sk > sq:  # prefill of an empty static cache, as sdpa_attention_forward
            key, value = key[:, :, :sq], value[:, :, :sq]
    else:
        causal = False
        infer = attention_mask.dtype == torch.bool and bool(causal_module) and sq == sk > 1
    hints = dict(infer_causal=infer, window_hint=sliding_window if infer else None)
    if plain_kernel_call("attention", query, key, value) and (
        attention_mask is None or not attention_mask.requires_grad
    ):
        # what ``attention`` would run: the kernel wrapper checks the shapes and the mask, and
        # writes the output in the [B, S, H, E] layout returned (no copy)
        out = _flash_attention()(
            query,
            key,
            value,
            is_causal=causal,
            scale=scaling,
            attn_mask=attention_mask,
            seq_major=True,
            dropout_p=dropout,
            **hints,
        )
        return out.transpose(1, 2), None
    out = attention(
        query,
        key,
        value,
        attn_mask=attention_mask,
        dropout_p=dropout,
        is_causal=causal,
        scale=scaling,
        enable_gqa=query.shape[1] != key.shape[1],
        **hints,
    )
    return out.transpose(1, 2).contiguous(), None
