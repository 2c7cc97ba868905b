"""``torch.nn`` modules on the functional primitives (:mod:`ojas_ref.functional`), for people who
write their own models.

* :class:`RMSNorm`, :class:`SwiGLU`, :class:`ReLU`: :func:`~ojas_ref.functional.rms_norm`,
  :func:`~ojas_ref.functional.swiglu`, :func:`~ojas_ref.functional.relu` as modules.

* :class:`MultiheadAttention`: ``nn.MultiheadAttention`` (same constructor, parameters,
  ``state_dict`` keys and call) computed by :func:`ojas_ref.attention`;
  :func:`ojas_ref.optimize_model` turns existing ``nn.MultiheadAttention`` modules
  (those of ``nn.TransformerEncoderLayer`` / ``DecoderLayer`` too) into it.
* :class:`LinearCrossEntropyLoss`: :func:`ojas_ref.linear_cross_entropy` as a loss module,
  in the style of ``nn.CrossEntropyLoss``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ojas_ref.functional.attention import attention
from ojas_ref.functional.dispatch import IMPLS
from ojas_ref.functional.linear_cross_entropy import linear_cross_entropy
from ojas_ref.functional.relu import relu
from ojas_ref.functional.rms_norm import CASTS, normalized_shape_tuple, real_argument, rms_norm
from ojas_ref.functional.swiglu import check_activation, swiglu

if TYPE_CHECKING:
    from ojas_ref.optim.in_backward import InBackwardOptimizer

__all__ = ["LinearCrossEntropyLoss", "MultiheadAttention", "RMSNorm", "ReLU", "SwiGLU", "unsupported_reason"]

_REDUCTIONS = ("none", "mean", "sum")


def unsupported_reason(module: nn.MultiheadAttention) -> Optional[str]:
    """Why ``module`` cannot be computed by :class:`MultiheadAttention`, or None."""
    if module.bias_k is not None:
        return "add_bias_kv=True (not supported)"
    if module.add_zero_attn:
        return "add_zero_attn=True (not supported)"
    return None


def _keep_mask(mask: Tensor, shape: tuple[int, ...], name: str, dtype: torch.dtype) -> Tensor:
    """An ``nn.MultiheadAttention`` mask (bool True = masked, or additive float) as an
    ``ojas_ref.attention`` mask of the given 4-D shape (bool True = takes part, or additive)."""
    if mask.dtype == torch.bool:
        return ~mask.reshape(shape)
    if not mask.is_floating_point():
        raise TypeError(f"{name} must be a bool or floating-point tensor, got {mask.dtype}")
    return mask.reshape(shape).to(dtype)


def _combine(a: Optional[Tensor], b: Optional[Tensor]) -> Optional[Tensor]:
    """The conjunction of two ojas masks (bool AND, or sum of additive masks)."""
    if a is None or b is None:
        return a if b is None else b
    if a.dtype == torch.bool and b.dtype == torch.bool:
        return a & b
    dtype = a.dtype if a.is_floating_point() else b.dtype
    a, b = (
        m if m.is_floating_point() else torch.zeros(m.shape, dtype=dtype, device=m.device).masked_fill(~m, -torch.inf)
        for m in (a, b)
    )
    return a + b


class MultiheadAttention(nn.MultiheadAttention):
    """``nn.MultiheadAttention`` whose attention is :func:`ojas_ref.attention`.

    Same constructor, parameters and call. The projections are ``nn.MultiheadAttention``'s;
    the attention of each head is the online-softmax recurrence
    (Ojas.Attention.StreamCorrect.attention_forward_correct; masks by
    Ojas.Attention.Mask.stream_row_masked_keys; backward by
    Ojas.Attention.BackwardCorrect.attention_backward_dQ_is_derive). ``dropout`` applies to
    the attention probabilities in training mode only, as in ``nn.MultiheadAttention``
    (``dropout_p`` of :func:`ojas_ref.attention`: its own counter-based mask, not torch's
    ``nn.Dropout`` draws, so the same seed gives other masks than torch's; no theorem covers
    the dropout path as a whole: see :func:`ojas_ref.attention`). ``attn_mask`` (2-D
    [L, S] or 3-D [N * num_heads, L, S]) and ``key_padding_mask`` ([N, S]) follow
    ``nn.MultiheadAttention``: bool True = masked, float = added. ``is_causal`` is
    torch's hint that ``attn_mask`` is the causal mask; here the causal pattern and the
    mask are combined. Differences: a query row that every key is masked for gives zeros,
    not NaN; ``need_weights=True`` (the default of ``nn.MultiheadAttention``) needs the
    attention weights, which ojas never forms, so that call runs ``nn.MultiheadAttention``'s
    own computation; ``add_bias_kv`` and ``add_zero_attn`` are refused.
    """

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Optional[Tensor] = None,
        need_weights: bool = True,
        attn_mask: Optional[Tensor] = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[Tensor, Optional[Tensor]]:
        if need_weights:
            return super().forward(
                query,
                key,
                value,
                key_padding_mask=key_padding_mask,
                need_weights=True,
                attn_mask=attn_mask,
                average_attn_weights=average_attn_weights,
                is_causal=is_causal,
            )
        reason = unsupported_reason(self)
        if reason is not None:
            raise NotImplementedError(f"ojas_ref.MultiheadAttention: {reason}")
        if is_causal and attn_mask is None:
            raise RuntimeError(
                "is_causal=True is a hint that attn_mask is the causal mask: pass attn_mask too "
                "(as nn.MultiheadAttention requires)"
            )
        batched = query.dim() == 3
        if query.dim() not in (2, 3):
            raise ValueError(f"query must be [L, E] or a batch of them, got shape {tuple(query.shape)}")
        q, k, v = (x if batched else x.unsqueeze(1) for x in (query, key, value))
        if self.batch_first and batched:
            q, k, v = (x.transpose(0, 1) for x in (q, k, v))
        L, N, E = q.shape
        S = k.shape[0]
        H, hd = self.num_heads, self.head_dim
        if self._qkv_same_embed_dim:
            wq, wk, wv = self.in_proj_weight.chunk(3)
        else:
            wq, wk, wv = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
        bq, bk, bv = (None, None, None) if self.in_proj_bias is None else self.in_proj_bias.chunk(3)
        # [L, N, E] -> [N, H, L, hd]
        q, k, v = (
            F.linear(x, w, b).reshape(x.shape[0], N, H, hd).permute(1, 2, 0, 3)
            for x, w, b in ((q, wq, bq), (k, wk, bk), (v, wv, bv))
        )
        mask = None
        if attn_mask is not None:
            shape = (1, 1, L, S) if attn_mask.dim() == 2 else (N, H, L, S)
            mask = _keep_mask(attn_mask, shape, "attn_mask", q.dtype)
        if key_padding_mask is not None:
            mask = _combine(mask, _keep_mask(key_padding_mask, (N, 1, 1, S), "key_padding_mask", q.dtype))
        out = attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=bool(is_causal) and L > 1,
        )
        out = F.linear(out.permute(2, 0, 1, 3).reshape(L, N, E), self.out_proj.weight, self.out_proj.bias)
        if self.batch_first and batched:
            out = out.transpose(0, 1)
        return (out if batched else out.squeeze(1)), None


class LinearCrossEntropyLoss(nn.Module):
    """``loss_fn(input, linear_weight, target, linear_bias=None, head_update=None)``: the cross-entropy of
    ``input @ linear_weight.T + linear_bias`` by :func:`ojas_ref.linear_cross_entropy`,
    never forming the logits (Ojas.LinearCrossEntropy.ChunkedLse.chunked_lse_chunk,
    Ojas.LinearCrossEntropy.Reduction.ce_loss_correct, Ojas.LinearCrossEntropy.Gradient.ce_backward_correct).

    Arguments as ``nn.CrossEntropyLoss`` (``weight``, a buffer as there, ``ignore_index``,
    ``reduction``, ``label_smoothing``) plus ``z_loss``, ``softcap``, ``chunk_size`` and
    ``impl`` of :func:`ojas_ref.linear_cross_entropy`, which checks them and says what
    differs from torch (class weights are outside the Coq spec).

    ``head_update`` (a :meth:`forward` argument): None, or the
    :class:`~ojas_ref.optim.in_backward.InBackwardOptimizer` constructed with
    ``head_weight=linear_weight``, which the backward then updates inside the loss (see
    :func:`ojas_ref.linear_cross_entropy`). A forward argument, not a constructor one, because it
    belongs to the ``linear_weight`` passed with it, and a module holding an optimizer would carry
    it into its ``deepcopy`` and ``repr``.
    """

    def __init__(
        self,
        weight: Optional[Tensor] = None,
        ignore_index: int = -100,
        reduction: str = "mean",
        label_smoothing: float = 0.0,
        z_loss: float = 0.0,
        softcap: Optional[float] = None,
        chunk_size=None,
        impl: Optional[str] = None,
    ) -> None:
        super().__init__()
        if reduction not in _REDUCTIONS:
            raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")
        self.register_buffer("weight", weight)
        self.ignore_index, self.reduction, self.label_smoothing = ignore_index, reduction, label_smoothing
        self.z_loss, self.softcap, self.chunk_size, self.impl = z_loss, softcap, chunk_size, impl

    def forward(
        self,
        input: Tensor,
        linear_weight: Tensor,
        target: Tensor,
        linear_bias: Optional[Tensor] = None,
        head_update: Optional["InBackwardOptimizer"] = None,
    ) -> Tensor:
        return linear_cross_entropy(
            input,
            linear_weight,
            target,
            linear_bias=linear_bias,
            weight=self.weight,
            reduction=self.reduction,
            ignore_index=self.ignore_index,
            label_smoothing=self.label_smoothing,
            z_loss=self.z_loss,
            softcap=self.softcap,
            chunk_size=self.chunk_size,
            impl=self.impl,
            head_update=head_update,
        )

    def extra_repr(self) -> str:
        return (
            f"ignore_index={self.ignore_index}, reduction={self.reduction!r}, "
            f"label_smoothing={self.label_smoothing}, z_loss={self.z_loss}, softcap={self.softcap}"
        )


class RMSNorm(nn.Module):
    """:func:`rms_norm` as a module, in the style of ``torch.nn.RMSNorm`` (same constructor and
    ``weight``), plus ``offset`` and ``cast``; the weight starts at ``1 - offset`` (scale 1)."""

    def __init__(
        self,
        normalized_shape: Union[int, Sequence[int], torch.Size],
        eps: Optional[float] = None,
        elementwise_affine: bool = True,
        *,
        offset: float = 0.0,
        cast: str = "before_weight",
        device: Optional[torch.device] = None,
        dtype: Optional[torch.dtype] = None,
    ) -> None:
        super().__init__()
        self.normalized_shape = normalized_shape_tuple(normalized_shape)
        self.eps = None if eps is None else real_argument("eps", eps, minimum=0.0)
        self.offset = real_argument("offset", offset)
        if cast not in CASTS:
            raise ValueError(f"cast must be one of {CASTS}, got {cast!r}")
        self.cast = cast
        if not elementwise_affine and self.offset:
            raise ValueError(f"offset={offset} needs elementwise_affine=True")
        self.weight = (
            nn.Parameter(torch.full(self.normalized_shape, 1.0 - self.offset, device=device, dtype=dtype))
            if elementwise_affine
            else None
        )

    def forward(self, input: Tensor) -> Tensor:
        return rms_norm(input, self.normalized_shape, self.weight, self.eps, offset=self.offset, cast=self.cast)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.weight is not None}, "
            f"offset={self.offset}, cast={self.cast!r}"
        )


class SwiGLU(nn.Module):
    """``forward(gate, up) = swiglu(gate, up, activation=activation)``: ``act(gate) * up`` saving only
    gate and up (see :func:`swiglu`; Ojas.SwiGLU.Backward.swiglu_backward_eq_vjp,
    Ojas.SwiGLU.Backward.geglu_tanh_backward_eq_vjp)."""

    def __init__(self, impl: Optional[str] = None, activation: str = "silu") -> None:
        super().__init__()
        if impl is not None and impl not in IMPLS:
            raise ValueError(f"impl must be one of {IMPLS} or None, got {impl!r}")
        self.impl, self.activation = impl, check_activation(activation)

    def forward(self, gate: Tensor, up: Tensor) -> Tensor:
        return swiglu(gate, up, activation=self.activation, impl=self.impl)

    def extra_repr(self) -> str:
        parts = ([] if self.impl is None else [f"impl={self.impl!r}"]) + (
            [] if self.activation == "silu" else [f"activation={self.activation!r}"]
        )
        return ", ".join(parts)


class ReLU(nn.Module):
    """``forward(x) = relu(x)``: ``nn.ReLU`` saving a packed 1-bit mask (see :func:`relu`;
    Ojas.ReLU.Backward.relu_packed_backward_bitwise).  ``inplace=True`` raises NotImplementedError."""

    def __init__(self, inplace: bool = False, impl: Optional[str] = None) -> None:
        super().__init__()
        if inplace is not False:
            raise NotImplementedError("ReLU(inplace=True) is not supported: the packed-mask relu returns a new tensor")
        if impl is not None and impl not in IMPLS:
            raise ValueError(f"impl must be one of {IMPLS} or None, got {impl!r}")
        self.impl = impl

    def forward(self, input: Tensor) -> Tensor:
        return relu(input, impl=self.impl)

    def extra_repr(self) -> str:
        return "" if self.impl is None else f"impl={self.impl!r}"
