"""Online-softmax (flash) attention in pure PyTorch, step by step as the Coq spec.

The forward pass is the streaming recurrence of ``rocq/Attention/OnlineSoftmax.v``
(``block_step`` over key tiles, ``stream``, ``finalize``), run for every query
tile; the backward pass is ``attention_backward`` of ``rocq/Attention/Backward.v``,
which recomputes the probabilities from the saved log-sum-exp. The theorems this
code implements:

* ``Ojas.Attention.StreamCorrect`` (``stream_row_correct``,
  ``attention_forward_correct``): the streamed output equals the two-pass
  softmax for any key tiling, so the tile sizes below do not change the result
  (in exact arithmetic).
* ``Ojas.Attention.Mask`` (``stream_row_masked_keys``, ``stream_row_fully_masked``,
  ``visibility_true_iff``): a masked key (score ``-inf``, the Coq ``None``) is the
  same as a dropped key; a row whose keys are all masked gives zeros and
  ``lse = -inf``.
* ``Ojas.Attention.Lse`` (``stream_lse``, ``row_probs_stream_row``):
  ``P_ij = exp(s_ij - lse_i)`` recomputed from the saved ``lse`` is the softmax
  the forward pass used.
* ``Ojas.Attention.BackwardCorrect`` (``backward_D_identity``,
  ``row_dscores_is_derive``, ``dQ_row_is_derive``, ``dK_row_is_derive``,
  ``dV_row_is_derive``): ``dS = P * (dP - D)`` with ``D_i = dO_i . O_i`` and the
  gradients built from it are the derivatives of the attention output.
* ``Ojas.Attention.GroupedQuery`` (``gqa_forward_repeat_kv``, ``gqa_dK_is_derive``,
  ``gqa_dV_is_derive``, ``gqa_dQ_is_derive``): query head h with key/value head h // G
  is attention on key/value heads repeated G times; dK, dV of a key/value head are the
  sums of its query heads' terms.
* ``Ojas.Attention.AdditiveMask`` (``attention_forward_float_mask_correct``,
  ``attention_dbias_is_derive``): a float mask added to the scores (-inf entries masked)
  is streamed as the two-pass softmax of the biased scores, and its gradient is dS.

The rounding error of the forward recurrence is bounded by
``Ojas.Attention.StreamError`` (``stream_row_error_bound``); the tests use it as
their tolerance against the extracted oracle.

Attention dropout (``dropout_p = p > 0``): the probabilities are multiplied by a keep mask
Z and by c = 1 / (1 - p), O = (P * Z) V * c. Z is a counter-based function of a key drawn
once per call and of the element's index (Philox-4x32-10, :func:`_dropout_keep`), so the
backward pass recomputes it instead of storing it, and the Triton kernel computes the same
Z. The theorems above are stated without dropout; what they say of it, over the reals: for
one query row i the dropped output is the streamed row on the values c Z_ij v_j, and those
theorems hold for any values, so ``stream_row_correct`` covers the forward row (l sums
every probability, acc the kept ones), ``row_dscores_is_derive`` the row's
dS = P * (dP' - D) with dP'_j = c Z_ij (dO . v_j) and D = dO . o, and ``dQ_row_is_derive``,
``dK_row_is_derive`` the row's dQ and its terms of dK. No theorem covers the rest: dV (the
chain rule through c Z_ij from ``dV_row_is_derive``'s values), the sums over the rows of a
head (the whole-head theorems share one value row per key across rows, which a per-element
mask breaks), the mask itself (its generator and its distribution: tested, not proved) or
any of it in floating point. No theorem covers the dropout path as a whole.

Semantics follow :func:`torch.nn.functional.scaled_dot_product_attention` (its
layouts [..., H, S, E], empty dimensions included), with these differences, all written
down in :func:`attention`: a fully masked row gives zeros and zero gradients (not NaN),
``attn_mask`` may be combined with ``is_causal`` (the conjunction, as ``visibility`` in
the Coq file), dropout draws its own mask (not SDPA's), double backward raises, the leading batch
dimensions of query, key and value must be equal (not broadcast), E = 0 and a tensor
``scale`` are refused, and numpy bools are accepted for the flags. Under autocast the
inputs are cast as SDPA's are.
"""

from __future__ import annotations

import math
import numbers
from typing import NamedTuple, Optional

import numpy as np
import torch
from torch import Tensor

from ojas_ref.functional.autocast import autocast_off, cast_for_autocast
from ojas_ref.functional.dispatch import IMPL_ENVS, kernel_runs, refuse_double_backward
from ojas_ref.functional.transforms import refuse_function_transforms

__all__ = ["attention", "attention_forward"]

# Query rows and keys per tile. The result does not depend on them
# (Ojas.Attention.StreamCorrect); they bound the memory of one score block.
_BLOCK_Q = 32
_BLOCK_K = 16

_SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
IMPL_ENV = IMPL_ENVS["attention"]


# --------------------------------------------------------------------------
# Argument checks
# --------------------------------------------------------------------------


def _type_name(x: object) -> str:
    """``float``, ``numpy.bool``, ``torch.Tensor``: the type of x, with its module unless builtin
    (numpy 2's bool is called ``bool`` too)."""
    t = type(x)
    module = "torch" if t is Tensor else t.__module__
    return t.__qualname__ if module == "builtins" else f"{module}.{t.__qualname__}"


def _check_bool(name: str, x: object) -> bool:
    """x as a bool: a Python bool or a numpy bool."""
    if not isinstance(x, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {_type_name(x)}")
    return bool(x)


def _heads(x: Tensor) -> int:
    """The heads of [..., H, S, E]; [S, E] has one."""
    return x.shape[-3] if x.dim() >= 3 else 1


def _check_tensor(name: str, x: object, shape_doc: str) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor {shape_doc}, got {_type_name(x)}")
    if x.is_nested:
        raise NotImplementedError(f"{name}: nested tensors are not supported, pass a dense {shape_doc} tensor")
    if x.dim() < 2:
        raise ValueError(f"{name} must have at least 2 dimensions {shape_doc}, got shape {tuple(x.shape)}")
    if x.dtype not in _SUPPORTED_DTYPES:
        raise TypeError(f"{name} has dtype {x.dtype}; supported: float16, bfloat16, float32, float64")


def _check_inputs(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Optional[Tensor],
    dropout_p: float,
    is_causal: bool,
    scale: Optional[float],
    enable_gqa: bool,
    window: Optional[int],
) -> tuple[float, float, bool, Optional[int]]:
    """Raise on a bad argument (the message names it); return the scale to use, dropout_p,
    is_causal and window as Python scalars (numpy scalars are accepted)."""
    _check_tensor("query", query, "[..., Hq, Sq, E]")
    _check_tensor("key", key, "[..., Hkv, Sk, E]")
    _check_tensor("value", value, "[..., Hkv, Sk, Ev]")
    for name, x in (("key", key), ("value", value)):
        if x.dtype != query.dtype:
            raise TypeError(
                f"{name} has dtype {x.dtype} but query has dtype {query.dtype}; "
                "query, key and value must share one dtype"
            )
        if x.device != query.device:
            raise ValueError(f"{name} is on {x.device} but query is on {query.device}")
        if x.dim() != query.dim():
            raise ValueError(
                f"{name} must have as many dimensions as query ({query.dim()}), "
                f"got {name} shape {tuple(x.shape)} and query shape {tuple(query.shape)}"
            )
    batch = query.shape[:-3]
    if key.shape[:-3] != batch or value.shape[:-3] != batch:
        raise ValueError(
            f"batch size mismatch: the dimensions before the heads are {list(batch)} in query, "
            f"{list(key.shape[:-3])} in key and {list(value.shape[:-3])} in value; they must be equal "
            "(they are not broadcast)"
        )
    Hq, Sq, E = _heads(query), query.shape[-2], query.shape[-1]
    if key.shape[-1] != E:
        raise ValueError(
            f"key must have the query's head dim E={E} in its last dimension, got key shape {tuple(key.shape)}"
        )
    if E == 0:
        raise ValueError("query must have a head dim E >= 1, got E=0")
    Hkv, Sk = _heads(key), key.shape[-2]
    if value.shape[-2] != Sk:
        raise ValueError(f"value must have as many rows Sk as key ({Sk}), got value shape {tuple(value.shape)}")
    if _heads(value) != Hkv:
        raise ValueError(f"value must have as many heads as key ({Hkv}), got value shape {tuple(value.shape)}")
    if _check_bool("enable_gqa", enable_gqa):
        divides = Hq % Hkv == 0 if Hkv else Hq == 0  # no key/value heads serve no query heads only
        if not divides:
            raise ValueError(f"enable_gqa=True needs the key/value heads ({Hkv}) to divide the query heads ({Hq})")
    elif Hkv != Hq:
        raise ValueError(
            f"key/value have {Hkv} heads but query has {Hq}; pass enable_gqa=True for grouped-query attention"
        )
    dropout_p = _check_dropout_p(dropout_p)
    is_causal = _check_bool("is_causal", is_causal)
    if window is not None:
        if isinstance(window, bool) or not isinstance(window, numbers.Integral):
            raise TypeError(f"window must be an int >= 1 or None, got {_type_name(window)}")
        window = int(window)
        if window < 1:
            raise ValueError(f"window must be >= 1 (keys with |i - j| < window take part), got {window}")
    if attn_mask is not None:
        full = (*batch, Hq, Sq, Sk) if query.dim() >= 3 else (Sq, Sk)
        _check_mask(attn_mask, query, full)
    if scale is None:
        return 1.0 / math.sqrt(E), dropout_p, is_causal, window
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a float or None, got {_type_name(scale)}")
    if not math.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale}")
    return float(scale), dropout_p, is_causal, window


def _check_dropout_p(dropout_p: object) -> float:
    """dropout_p as a Python float in [0, 1] (a bool, numpy's included, is refused)."""
    if isinstance(dropout_p, (bool, np.bool_)) or not isinstance(dropout_p, numbers.Real):
        raise TypeError(f"dropout_p must be a float, got {_type_name(dropout_p)}")
    if not 0 <= dropout_p <= 1:  # NaN too
        raise ValueError(
            f"dropout_p must be in [0, 1] (the probability that an attention probability is dropped), got {dropout_p!r}"
        )
    return float(dropout_p)


def _check_mask(attn_mask: object, query: Tensor, full: tuple[int, ...]) -> None:
    if not isinstance(attn_mask, Tensor):
        raise TypeError(f"attn_mask must be a torch.Tensor or None, got {_type_name(attn_mask)}")
    if attn_mask.is_nested:
        raise NotImplementedError("attn_mask: nested tensors are not supported")
    if attn_mask.dtype != torch.bool and attn_mask.dtype != query.dtype:
        raise TypeError(
            f"attn_mask must have dtype torch.bool or the query's dtype {query.dtype}, got {attn_mask.dtype}"
        )
    if attn_mask.device != query.device:
        raise ValueError(f"attn_mask is on {attn_mask.device} but query is on {query.device}")
    shape = tuple(attn_mask.shape)
    padded = (1,) * (len(full) - len(shape)) + shape
    if len(shape) > len(full) or any(m != 1 and m != f for m, f in zip(padded, full)):
        raise ValueError(
            f"attn_mask must be broadcastable to [..., Hq, Sq, Sk] = {list(full)}, got shape {list(shape)}"
        )


def _as_4d(
    query: Tensor, key: Tensor, value: Tensor, attn_mask: Optional[Tensor]
) -> tuple[Tensor, Tensor, Tensor, Optional[Tensor]]:
    """The checked inputs as [B, H, S, E] (B the product of the dimensions before the heads;
    [S, E] as [1, 1, S, E]; views where the strides allow), and the mask as one
    broadcastable to [B, Hq, Sq, Sk]. A mask that broadcasts over some but not all of more
    than one leading dimension is expanded over them (copied by the reshape)."""

    def flat(x: Tensor) -> Tensor:
        return x.reshape(math.prod(x.shape[:-3]), *(1,) * (3 - min(x.dim(), 3)), *x.shape[-3:])

    if attn_mask is not None and query.dim() > 4:
        batch = query.shape[:-3]
        attn_mask = attn_mask.reshape((1,) * (query.dim() - attn_mask.dim()) + attn_mask.shape)
        if any(d != 1 for d in attn_mask.shape[:-3]):
            attn_mask = attn_mask.expand(*batch, *attn_mask.shape[-3:])
        attn_mask = flat(attn_mask)
    return flat(query), flat(key), flat(value), attn_mask


def _kernel_runs(impl: Optional[str], query: Tensor, attn_mask: Optional[Tensor]) -> bool:
    """Whether to run the Triton kernel (True) or the reference (False): ``dispatch.kernel_runs``,
    with the mask gradient the kernel does not compute refused."""
    refused = None
    if attn_mask is not None and attn_mask.requires_grad and torch.is_grad_enabled():
        refused = ValueError(
            "impl='triton' computes no gradient for attn_mask, and this float attn_mask requires "
            "grad; detach it, or use impl='reference' for d(attn_mask)"
        )
    return kernel_runs("attention", impl, query, refused=refused)


# --------------------------------------------------------------------------
# Attention dropout: a counter-based mask (Philox-4x32-10)
# --------------------------------------------------------------------------

# Philox-4x32 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011) with
# 10 rounds, as Random123 and Triton's ``tl.philox_impl`` compute it.
_PHILOX_ROUND_A, _PHILOX_ROUND_B = 0xD2511F53, 0xCD9E8D57
_PHILOX_KEY_A, _PHILOX_KEY_B = 0x9E3779B9, 0xBB67AE85
_PHILOX_ROUNDS = 10
_U32 = 0xFFFFFFFF
_DROPOUT_BITS = 31  # the mask compares the top 31 bits of a Philox word with a threshold


class _Dropout(NamedTuple):
    """One call's attention dropout: the Philox key ``seed`` (int64 [2], two values in
    [0, 2^32), on the inputs' device), ``threshold`` (an element is dropped iff the top 31
    bits of its Philox word are below it) and ``scale`` (1 / (1 - p), 0 for p = 1)."""

    seed: Tensor
    threshold: int
    scale: float


def _mulhilo32(a: int, x: Tensor) -> tuple[Tensor, Tensor]:
    """(high, low) 32-bit halves of ``a * x`` for a 32-bit constant a and int64 x in
    [0, 2^32): x is split in 16-bit halves so that no int64 product overflows."""
    upper = a * (x >> 16)  # < 2^48
    t = a * (x & 0xFFFF) + ((upper & 0xFFFF) << 16)  # < 2^49
    return (upper >> 16) + (t >> 32), t & _U32


def _philox4x32(
    c0: Tensor, c1: Tensor, c2: Tensor, c3: Tensor, k0: Tensor, k1: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Philox-4x32-10 of the counter (c0, c1, c2, c3) under the key (k0, k1), all int64
    tensors holding 32-bit unsigned values (broadcast together): the rounds of Triton's
    ``tl.philox_impl`` (Random123's ``philox4x32_R``), bit for bit."""
    for _ in range(_PHILOX_ROUNDS):
        hi_b, lo_b = _mulhilo32(_PHILOX_ROUND_B, c2)
        hi_a, lo_a = _mulhilo32(_PHILOX_ROUND_A, c0)
        c0, c1, c2, c3 = hi_b ^ c1 ^ k0, lo_b, hi_a ^ c3 ^ k1, lo_a
        k0, k1 = (k0 + _PHILOX_KEY_A) & _U32, (k1 + _PHILOX_KEY_B) & _U32
    return c0, c1, c2, c3


def _dropout_args(dropout_p: float, device: torch.device) -> Optional[_Dropout]:
    """None for dropout_p = 0; else the key drawn once for this call from torch's default
    generator of ``device`` (``torch.manual_seed`` reproduces it; two values of
    ``torch.randint``), the threshold round(p * 2^31) (at most 2^31 - 1) and 1 / (1 - p)."""
    if dropout_p == 0:
        return None
    seed = torch.randint(0, 2**32, (2,), dtype=torch.int64, device=device)
    threshold = min(round(dropout_p * 2**_DROPOUT_BITS), 2**_DROPOUT_BITS - 1)
    return _Dropout(seed, threshold, 0.0 if dropout_p == 1 else 1.0 / (1.0 - dropout_p))


def _dropout_keep(dropout: _Dropout, bh: Tensor, i: Tensor, j: Tensor) -> Tensor:
    """Whether the probability of query row i, key j in head row bh = b * Hq + h is kept
    (bool, broadcast over bh, i, j: int64 tensors). Element (bh, i, j) takes word j % 4 of
    Philox-4x32-10 at the counter (j // 4, i, bh, 0) under the key ``dropout.seed``, and is
    dropped iff that word's top 31 bits are below ``dropout.threshold`` (probability
    threshold / 2^31, dropout_p rounded to a multiple of 2^-31). The kernels compute the
    same function (``_dropout_words`` and ``_kept`` of kernels/ojas_kernels/attention_tiles.py),
    so the mask does not depend on the tiling and is recomputed in the backward pass, never
    stored."""
    c0, c1, c2 = torch.broadcast_tensors(j >> 2, i, bh)
    words = torch.stack(_philox4x32(c0, c1, c2, torch.zeros_like(c0), dropout.seed[0], dropout.seed[1]), dim=-1)
    word = words.gather(-1, torch.broadcast_to(j & 3, c0.shape).unsqueeze(-1)).squeeze(-1)
    return (word >> (32 - _DROPOUT_BITS)) >= dropout.threshold


def _dropout_keep_mask(dropout: _Dropout, batch: int, heads: int, seq_q: int, seq_k: int) -> Tensor:
    """The whole [batch, heads, seq_q, seq_k] keep mask of :func:`_dropout_keep` (for tests)."""
    device = dropout.seed.device
    bh = torch.arange(batch * heads, device=device).view(batch, heads, 1, 1)
    return _dropout_keep(
        dropout, bh, torch.arange(seq_q, device=device).unsqueeze(1), torch.arange(seq_k, device=device)
    )


def _tile_keep(
    dropout: Optional[_Dropout], shape: tuple[int, int, int], q0: int, q1: int, k0: int, k1: int
) -> Optional[Tensor]:
    """The keep mask of one tile, [B, Hkv, G, q1 - q0, k1 - k0] for (B, Hkv, G) = shape
    (query head h = hkv * G + g); None without dropout."""
    if dropout is None:
        return None
    device = dropout.seed.device
    bh = torch.arange(math.prod(shape), device=device).view(*shape, 1, 1)  # b * Hq + hkv * G + g
    return _dropout_keep(
        dropout, bh, torch.arange(q0, q1, device=device).unsqueeze(1), torch.arange(k0, k1, device=device)
    )


# --------------------------------------------------------------------------
# One tile: scores, masks, the block step, finalize
# --------------------------------------------------------------------------


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _tile_visibility(
    q0: int, q1: int, k0: int, k1: int, is_causal: bool, window: Optional[int], device: torch.device
) -> Optional[Tensor]:
    """[q1 - q0, k1 - k0] bool: key j visible to query i by ``causal`` (j <= i) and
    ``in_window`` (|i - j| < window) of rocq/Attention/OnlineSoftmax.v; None if neither is set."""
    if not is_causal and window is None:
        return None
    i = torch.arange(q0, q1, device=device).unsqueeze(1)
    j = torch.arange(k0, k1, device=device).unsqueeze(0)
    visible = torch.ones(q1 - q0, k1 - k0, dtype=torch.bool, device=device)
    if is_causal:
        visible = visible & (j <= i)
    if window is not None:
        visible = visible & ((i - j).abs() < window)
    return visible


def _key_tiles(q0: int, q1: int, n_keys: int, block_k: int, is_causal: bool, window: Optional[int]) -> range:
    """Starts of the key tiles (multiples of block_k) that may hold a visible key for
    query rows q0..q1-1. The others hold only masked keys, on which ``block_step``
    leaves the state unchanged (max unchanged, rescale exp(0) = 1, zero weights; masked
    keys are dropped keys, Ojas.Attention.Mask), so skipping them is the same ``stream``."""
    lo, hi = 0, n_keys
    if is_causal:
        hi = min(hi, q1)
    if window is not None:
        lo = max(lo, q0 - window + 1)
        hi = min(hi, q1 - 1 + window)
    return range(lo // block_k * block_k, hi, block_k)


def _tile_scores(
    q_t: Tensor, k_t: Tensor, scale: float, mask_t: Optional[Tensor], visible_t: Optional[Tensor]
) -> Tensor:
    """Scores of one tile: ``scores`` (s_ij = scale * (q_i . k_j)) and ``masked_keys``
    (masked keys get -inf, the Coq ``None``) of rocq/Attention/OnlineSoftmax.v; a float
    mask is added to the scores as in SDPA (``add_bias`` of rocq/Attention/AdditiveMask.v,
    its -inf entries masked keys: ``float_mask``).

    q_t: [B, Hkv, G, tq, E] (G query heads per key/value head), k_t: [B, Hkv, tk, E],
    mask_t: None or [B, Hkv, G, tq, tk]; returns [B, Hkv, G, tq, tk].
    """
    B, Hkv, G, tq, E = q_t.shape
    s = (q_t.reshape(B, Hkv, G * tq, E) @ k_t.transpose(-1, -2)).mul_(scale).view(B, Hkv, G, tq, k_t.shape[2])
    if mask_t is not None:
        if mask_t.dtype == torch.bool:
            visible_t = mask_t if visible_t is None else mask_t & visible_t
        else:
            s = s + mask_t.to(s.dtype)
    if visible_t is not None:
        s = s.masked_fill(~visible_t, -math.inf)
    return s


def _online_softmax_block_step(
    m: Tensor, l: Tensor, acc: Tensor, scores: Tensor, value: Tensor, keep: Optional[Tensor] = None
) -> tuple[Tensor, Tensor, Tensor]:
    """One key tile of the forward pass: ``block_step`` of rocq/Attention/OnlineSoftmax.v.

        m'  = max(m, max_j s_j)
        p_j = exp(s_j - m')                 (0 for a masked key, s_j = -inf)
        l'  = exp(m - m') * l + sum_j p_j
        acc'= exp(m - m') * acc + sum_j p_j v_j

    The Coq state ``None`` (no unmasked key yet) is m = -inf, l = 0, acc = 0. While
    m' = -inf the state stays None: the reference point is 0 instead of -inf there, so
    that exp(-inf - 0) = 0 replaces exp(-inf + inf) = NaN. From None to a first
    unmasked key, exp(m - m') = 0 gives l' = sum_j p_j, acc' = sum_j p_j v_j, the
    Coq ``None`` branch.

    m, l: [B, Hkv, G, tq]; acc: [B, Hkv, G, tq, Ev]; scores: [B, Hkv, G, tq, tk];
    value: [B, Hkv, tk, Ev] (shared by the G query heads of a group).

    With dropout, ``keep`` ([B, Hkv, G, tq, tk] bool): l sums every p_j as above, acc only
    the kept ones (acc' = exp(m - m') * acc + sum_j keep_j p_j v_j); the caller multiplies
    the finalized output by 1 / (1 - dropout_p). Per row that is ``block_step`` on the
    values keep_ij v_j (module docstring: what the theorems then cover).
    """
    m_new = torch.maximum(m, scores.amax(dim=-1))
    m_ref = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
    p = torch.exp(scores - m_ref.unsqueeze(-1))
    alpha = torch.exp(m - m_ref)
    l_new = alpha * l + p.sum(dim=-1)
    if keep is not None:
        p = p * keep
    acc_new = alpha.unsqueeze(-1) * acc + (p.flatten(2, 3) @ value).view(acc.shape)
    return m_new, l_new, acc_new


def _finalize(m: Tensor, l: Tensor, acc: Tensor) -> tuple[Tensor, Tensor]:
    """``finalize`` of rocq/Attention/OnlineSoftmax.v: out = acc / l, lse = m + ln l;
    zeros and lse = -inf for a fully masked row (state None, m = -inf)."""
    none = torch.isneginf(m)
    l_safe = torch.where(none, torch.ones_like(l), l)
    out = torch.where(none.unsqueeze(-1), torch.zeros_like(acc), acc / l_safe.unsqueeze(-1))
    lse = torch.where(none, m, m + torch.log(l))
    return out, lse


# --------------------------------------------------------------------------
# Whole-head passes
# --------------------------------------------------------------------------


def _grouped(query: Tensor, key: Tensor, value: Tensor, attn_mask: Optional[Tensor], dtype: torch.dtype):
    """Views for grouped-query attention without repeating key/value: query
    [B, Hkv, G, Sq, E], key/value [B, Hkv, Sk, *], mask [B, Hkv, G, Sq, Sk] (an expanded
    view); query head h = hkv * G + g is served by key/value head hkv = h // G
    (``kv_head`` of rocq/Attention/GroupedQuery.v; the same as repeating each key/value
    head G times, Ojas.Attention.GroupedQuery.gqa_forward_repeat_kv)."""
    B, Hq, Sq, E = query.shape
    Hkv, Sk = key.shape[1], key.shape[2]
    G = Hq // Hkv if Hkv else 1  # no heads at all: one (empty) group of none
    q = query.to(dtype).view(B, Hkv, G, Sq, E)
    mask = None
    if attn_mask is not None:
        mask = attn_mask.expand(B, Hq, Sq, Sk).view(B, Hkv, G, Sq, Sk)
    return q, key.to(dtype), value.to(dtype), mask


def _reference_forward(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Optional[Tensor],
    is_causal: bool,
    scale: float,
    window: Optional[int],
    dropout: Optional[_Dropout] = None,
    block_q: int = _BLOCK_Q,
    block_k: int = _BLOCK_K,
) -> tuple[Tensor, Tensor]:
    """``attention_forward`` of rocq/Attention/OnlineSoftmax.v for all heads: ``stream``
    over key tiles of block_k keys, then ``finalize``, for each tile of block_q query rows.
    Returns out [B, Hq, Sq, Ev] and lse [B, Hq, Sq], both in the compute dtype (float32,
    float64 for float64 inputs). With ``dropout`` the output is that of the kept
    probabilities times 1 / (1 - p) (:func:`_online_softmax_block_step`); lse is that of
    all of them, as without dropout."""
    dtype = _compute_dtype(query.dtype)
    q, k, v, mask = _grouped(query, key, value, attn_mask, dtype)
    B, Hkv, G, Sq, _ = q.shape
    Sk, Ev = k.shape[2], v.shape[3]
    out = q.new_empty(B, Hkv, G, Sq, Ev)
    lse = q.new_empty(B, Hkv, G, Sq)
    for q0 in range(0, Sq, block_q):
        q1 = min(q0 + block_q, Sq)
        q_t = q[:, :, :, q0:q1]
        m = q.new_full((B, Hkv, G, q1 - q0), -math.inf)
        l = q.new_zeros(B, Hkv, G, q1 - q0)
        acc = q.new_zeros(B, Hkv, G, q1 - q0, Ev)
        for k0 in _key_tiles(q0, q1, Sk, block_k, is_causal, window):
            k1 = min(k0 + block_k, Sk)
            visible = _tile_visibility(q0, q1, k0, k1, is_causal, window, q.device)
            mask_t = None if mask is None else mask[..., q0:q1, k0:k1]
            s = _tile_scores(q_t, k[:, :, k0:k1], scale, mask_t, visible)
            keep = _tile_keep(dropout, (B, Hkv, G), q0, q1, k0, k1)
            if keep is None:
                m, l, acc = _online_softmax_block_step(m, l, acc, s, v[:, :, k0:k1])
            else:
                m, l, acc = _online_softmax_block_step(m, l, acc, s, v[:, :, k0:k1], keep)
        out[..., q0:q1, :], lse[..., q0:q1] = _finalize(m, l, acc)
        if dropout is not None:
            out[..., q0:q1, :] *= dropout.scale
    Hq = Hkv * G
    return out.view(B, Hq, Sq, Ev), lse.view(B, Hq, Sq)


def _reference_backward(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Optional[Tensor],
    out: Tensor,
    lse: Tensor,
    grad_out: Tensor,
    is_causal: bool,
    scale: float,
    window: Optional[int],
    mask_grad: bool,
    dropout: Optional[_Dropout] = None,
    block_q: int = _BLOCK_Q,
    block_k: int = _BLOCK_K,
) -> tuple[Tensor, Tensor, Tensor, Optional[Tensor]]:
    """``attention_backward`` of rocq/Attention/Backward.v, tile by tile:
    P = exp(S - lse) (0 for masked keys and fully masked rows; Ojas.Attention.Lse),
    D = rowsum(dO * O), dP = dO V^T, dS = P * (dP - D) (Ojas.Attention.BackwardCorrect),
    dQ = scale * dS K, dK = scale * dS^T Q, dV = P^T dO; for GQA dK and dV sum over the
    query heads of a group (Ojas.Attention.GroupedQuery.gqa_dK_is_derive,
    Ojas.Attention.GroupedQuery.gqa_dV_is_derive). With mask_grad, also d(attn_mask) = dS
    (Ojas.Attention.AdditiveMask.attention_dbias_is_derive) summed over the mask's
    broadcast dimensions (that sum is covered by no theorem). out and lse are in the compute dtype (as the forward returns
    them); the gradients come back in the input dtypes.

    With ``dropout`` the keep mask Z of the forward pass is recomputed (never stored) and,
    c = 1 / (1 - p): dV = (P * Z)^T dO * c, dP = (dO V^T) * Z * c, dS = P * (dP - D) with
    D = rowsum(dO * O) of the dropped output O (FlashAttention-2's dropout backward)."""
    dtype = _compute_dtype(query.dtype)
    q, k, v, mask = _grouped(query, key, value, attn_mask, dtype)
    B, Hkv, G, Sq, E = q.shape
    Sk, Ev = k.shape[2], v.shape[3]
    do = grad_out.to(dtype).view(B, Hkv, G, Sq, Ev)
    o = out.view(B, Hkv, G, Sq, Ev)
    lse = lse.view(B, Hkv, G, Sq)
    lse_ref = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    D = (do * o).sum(dim=-1)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    dmask4 = None
    if mask_grad:
        dmask4 = q.new_zeros((1,) * (4 - attn_mask.dim()) + tuple(attn_mask.shape))
    for q0 in range(0, Sq, block_q):
        q1 = min(q0 + block_q, Sq)
        tq = q1 - q0
        q_t, do_t = q[:, :, :, q0:q1], do[:, :, :, q0:q1]
        for k0 in _key_tiles(q0, q1, Sk, block_k, is_causal, window):
            k1 = min(k0 + block_k, Sk)
            visible = _tile_visibility(q0, q1, k0, k1, is_causal, window, q.device)
            mask_t = None if mask is None else mask[..., q0:q1, k0:k1]
            s = _tile_scores(q_t, k[:, :, k0:k1], scale, mask_t, visible)
            p = torch.exp(s - lse_ref[..., q0:q1].unsqueeze(-1)).flatten(2, 3)
            do_f = do_t.flatten(2, 3)
            dp = do_f @ v[:, :, k0:k1].transpose(-1, -2)
            keep = _tile_keep(dropout, (B, Hkv, G), q0, q1, k0, k1)
            if keep is None:
                dv[:, :, k0:k1] += p.transpose(-1, -2) @ do_f
            else:
                keep = keep.flatten(2, 3)
                dv[:, :, k0:k1] += (p * keep).transpose(-1, -2) @ do_f
                dp = dp * keep * dropout.scale
            ds = p * (dp - D[..., q0:q1].flatten(2, 3).unsqueeze(-1))
            dq[:, :, :, q0:q1] += (scale * (ds @ k[:, :, k0:k1])).view(B, Hkv, G, tq, E)
            dk[:, :, k0:k1] += scale * (ds.transpose(-1, -2) @ q_t.flatten(2, 3))
            if dmask4 is not None:
                _accumulate_mask_grad(dmask4, ds.view(B, Hkv * G, tq, k1 - k0), q0, q1, k0, k1)
    if dropout is not None:
        dv *= dropout.scale
    dmask = None if dmask4 is None else dmask4.view(attn_mask.shape).to(attn_mask.dtype)
    return (dq.view(query.shape).to(query.dtype), dk.to(key.dtype), dv.to(value.dtype), dmask)


def _accumulate_mask_grad(dmask4: Tensor, ds: Tensor, q0: int, q1: int, k0: int, k1: int) -> None:
    """Add a [B, Hq, tq, tk] tile of dS (the additive mask's gradient) into dmask4,
    summing over the dimensions in which the mask is broadcast."""
    dims = [d for d in range(4) if dmask4.shape[d] == 1]
    if dims:
        ds = ds.sum(dim=dims, keepdim=True)
    rows = slice(None) if dmask4.shape[2] == 1 else slice(q0, q1)
    cols = slice(None) if dmask4.shape[3] == 1 else slice(k0, k1)
    dmask4[:, :, rows, cols] += ds


class _OnlineSoftmaxAttention(torch.autograd.Function):
    """Forward: the streamed recurrence; saves q, k, v, out and lse (not P).
    Backward: P recomputed from lse (Ojas.Attention.Lse, Ojas.Attention.BackwardCorrect).

    out is saved in the compute dtype: D = rowsum(dO * O) from a float16/bfloat16 out
    would err by u_io * |dO| |O|, and dQ = scale * sum_j P_ij (dP_ij - D_i) k_j does not
    cancel that error against a component shared by all keys (large when the scores are)."""

    @staticmethod
    def forward(ctx, query, key, value, attn_mask, is_causal, scale, window, dropout):
        out, lse = _reference_forward(query, key, value, attn_mask, is_causal, scale, window, dropout)
        ctx.save_for_backward(query, key, value, attn_mask, out, lse)
        ctx.is_causal, ctx.scale, ctx.window, ctx.dropout = is_causal, scale, window, dropout
        return out.to(query.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        refuse_double_backward("attention", "torch.nn.functional.scaled_dot_product_attention")
        query, key, value, attn_mask, out, lse = ctx.saved_tensors
        mask_grad = attn_mask is not None and attn_mask.is_floating_point() and ctx.needs_input_grad[3]
        with autocast_off(grad_out.device.type):  # backward may run under the caller's autocast
            dq, dk, dv, dmask = _reference_backward(
                query,
                key,
                value,
                attn_mask,
                out,
                lse,
                grad_out,
                ctx.is_causal,
                ctx.scale,
                ctx.window,
                mask_grad,
                ctx.dropout,
            )
        return dq, dk, dv, dmask, None, None, None, None


# --------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------


def attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Optional[Tensor] = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: Optional[float] = None,
    enable_gqa: bool = False,
    *,
    window: Optional[int] = None,
    impl: Optional[str] = None,
) -> Tensor:
    """Scaled dot-product attention by online softmax, differentiable.

    Same arguments and semantics as :func:`torch.nn.functional.scaled_dot_product_attention`:
    query [..., Hq, Sq, E], key [..., Hkv, Sk, E], value [..., Hkv, Sk, Ev], with any
    number of leading batch dimensions, the same in all three (SDPA's CPU backends also
    broadcast them; here they must be equal), or 2-D [Sq, E] (one head); the output is
    [..., Hq, Sq, Ev]. The leading dimensions are flattened into one batch dimension and
    back (every query row is a separate ``stream_row``: the theorems hold per row).
    ``is_causal`` keeps key j for query i iff j <= i (top-left aligned, also when Sq != Sk);
    ``attn_mask`` is bool (True = takes part) or of the query's dtype (added to the scores,
    -inf masks), broadcastable to [..., Hq, Sq, Sk]; ``scale`` defaults to 1/sqrt(E);
    ``enable_gqa`` lets Hkv divide Hq, key/value head h // (Hq // Hkv) serving query head h.
    ``window=w`` keeps only keys with |i - j| < w (``in_window`` in
    rocq/Attention/OnlineSoftmax.v). All masks given are combined by conjunction
    (``visibility``); unlike SDPA, ``attn_mask`` together with ``is_causal`` is allowed.
    ``scale``, ``window``, ``dropout_p``, ``is_causal`` and ``enable_gqa`` may be numpy
    scalars (``is_causal`` and ``enable_gqa`` a numpy bool, which SDPA refuses); ``scale``
    may not be a tensor (SDPA takes a 0-d one).

    A fully masked row gives output zeros, lse -inf and zero gradients
    (Ojas.Attention.Mask; SDPA's math backend gives zeros too in torch 2.13, other
    backends and versions may give NaN).

    ``dropout_p`` in [0, 1] (a float, an int or a numpy scalar; not a bool): as SDPA's, it
    applies whenever it is nonzero, whatever the training mode (a module passes
    ``self.dropout if self.training else 0.0``): each attention probability P_ij is dropped
    with probability p and the kept ones are scaled by 1 / (1 - p), after the softmax (the
    normaliser sums every probability); p = 1 gives zeros and zero gradients, as SDPA. The
    mask is not SDPA's: element (b, h, i, j) of the [B, Hq, Sq, Sk] probabilities (b the
    flattened leading dimensions) is dropped iff the top 31 bits of word j % 4 of
    Philox-4x32-10 at the counter (j // 4, i, b * Hq + h, 0) are below round(p * 2^31), the
    key being two values drawn once per call by ``torch.randint`` from the default generator
    of the inputs' device (so ``torch.manual_seed`` reproduces it, consecutive calls differ,
    and ``torch.utils.checkpoint``'s recomputation, which restores the generators, redraws
    the same mask). Both implementations compute that mask, recomputing it in the backward
    pass (nothing stored); the backward is FlashAttention-2's: dP = (dO V^T) * Z / (1 - p),
    dS = P * (dP - D) with D = rowsum(dO * O). Which theorems cover what: module docstring
    (per row over the reals, not the whole path).

    Empty dimensions (B, heads, Sq, Sk or Ev of 0) give what SDPA gives: an output of the
    full shape, zeros when Sk = 0 (every row is fully masked: ``stream_row_fully_masked``
    with no keys; SDPA's CPU backends give zeros too in torch 2.13), zero gradients; in
    both implementations (with no heads the reference runs: the kernel needs Hkv >= 1).
    A head dim E = 0 is refused (SDPA averages the values there).

    ``impl``: "reference" runs the PyTorch recurrence (rocq/Attention/OnlineSoftmax.v,
    Ojas.Attention.StreamCorrect; backward rocq/Attention/Backward.v,
    Ojas.Attention.Lse and Ojas.Attention.BackwardCorrect); "triton" runs
    ``ojas_kernels.attention.flash_attention`` (CUDA tensors, or CPU tensors under
    TRITON_INTERPRET=1; no float64, and no float ``attn_mask`` that requires grad:
    the kernel computes no mask gradient); "auto" runs the kernel for CUDA tensors that
    are not float64, unless a float ``attn_mask`` requires grad, and the reference
    otherwise. ``None``: the setting of ``dispatch.use_impl``, else the environment variable
    OJAS_ATTENTION_IMPL read at import, else "auto" (``ojas_ref.functional.dispatch``).
    Both implement the visibility semantics of Ojas.Attention.Mask: a bool mask is one
    conjunct of ``visibility`` (``visibility_true_iff``), masked keys are dropped keys
    (``stream_row_masked_keys``), a row with no key left gives zeros
    (``stream_row_fully_masked``). A float mask, over the reals (Ojas.Attention.AdditiveMask:
    the mask is a finite bias plus a set of masked entries, its -inf ones, since -inf is
    not a real): the streamed rows on the scores ``scale * (q . k) + mask`` are the
    two-pass softmax of the keys with a finite entry
    (Ojas.Attention.AdditiveMask.attention_forward_float_mask_correct,
    Ojas.Attention.AdditiveMask.stream_row_bias_masked_keys; instances of the streaming
    theorem, which holds for any scores), a row of -inf gives zeros
    (Ojas.Attention.AdditiveMask.stream_row_float_mask_fully_masked), and the gradient the
    reference returns for a mask that requires grad, ``dS_ij = P_ij (dP_ij - D_i)``, is
    the derivative in entry (i, j) (Ojas.Attention.AdditiveMask.attention_dbias_is_derive;
    0 on masked entries, Ojas.Attention.AdditiveMask.attention_dbias_fully_masked for a
    masked row). The dQ, dK, dV returned with a float mask are covered row by row
    (Ojas.Attention.AdditiveMask.row_dQ_bias_is_derive,
    Ojas.Attention.AdditiveMask.row_dK_bias_is_derive,
    Ojas.Attention.AdditiveMask.row_dV_bias_is_derive: the derivatives of one row's
    dO . o on biased scores); no theorem restates their sums over the rows of a head
    with a bias, covers the sum of dS over the dimensions a broadcast mask is broadcast
    in, or any of it in floating point. In the
    kernel, float-mask values below about -2.4e38 (``torch.finfo(dtype).min`` of bfloat16
    and float32) act as -inf: a row made of them alone gives zeros from the kernel, the
    mean of the values from the reference (see ``flash_attention``).

    Grouped-query attention (``enable_gqa``) runs without repeating key/value: query head
    h reads key/value head h // G, G = Hq // Hkv, and dK, dV of a key/value head sum the
    terms of its G query heads. Over the reals that is attention on key/value heads
    repeated G times (``repeat_interleave``, SDPA's semantics):
    Ojas.Attention.GroupedQuery.gqa_forward_repeat_kv (the forward, head by head),
    Ojas.Attention.GroupedQuery.gqa_forward_correct, and the gradients of the loss summed
    over the query heads: Ojas.Attention.GroupedQuery.gqa_dK_is_derive,
    Ojas.Attention.GroupedQuery.gqa_dV_is_derive (the sum over the group's query heads of
    their per-head dK, dV) and Ojas.Attention.GroupedQuery.gqa_dQ_is_derive. The rounding
    of that float32 sum is not covered by any theorem.

    Autocast: as SDPA, under ``torch.autocast`` on the inputs' device type query, key,
    value and a float ``attn_mask`` (unless float64) are cast to the autocast dtype
    (``torch.get_autocast_dtype``), and the output has that dtype; gradients flow back
    through the casts to the original tensors. The attention itself then runs with
    autocast off, forward and backward.

    First-order gradients only: a backward pass with ``create_graph=True`` through the
    attention (a gradient penalty, ``torch.autograd.gradgradcheck``, Hessians) raises
    RuntimeError, in both implementations. The backward is not differentiable, and no
    theorem speaks of second derivatives.

    Computation is in float32 (float64 for float64 inputs); the output has the input dtype.
    In the kernel, float32 dots run TF32 unless torch's float32 matmul precision is
    "highest" (the default; ``torch.set_float32_matmul_precision``), as torch's matmuls.

    Under ``torch.compile`` the kernel runs as the registered ops
    ``ojas::flash_attention_forward`` / ``ojas::flash_attention_backward``
    (``ojas_kernels.attention``: the same kernels with the same arguments, so the theorem
    citations above are unchanged; ``fullgraph=True`` works); the reference is traced as torch
    code.  The dropout key is then a ``torch.randint`` of the graph: Inductor draws it from its
    own generator unless ``torch._inductor.config.fallback_random`` is set.
    """
    refuse_function_transforms("attention")
    if isinstance(query, Tensor):
        query, key, value, attn_mask = cast_for_autocast(query.device.type, query, key, value, attn_mask)
    scale, dropout_p, is_causal, window = _check_inputs(
        query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, window
    )
    q, k, v, mask = _as_4d(query, key, value, attn_mask)
    dropout = _dropout_args(dropout_p, query.device)  # drawn whichever implementation runs
    with autocast_off(query.device.type):
        # The kernel refuses Hkv = 0; with no heads there is nothing to compute, and the
        # reference returns the empty output (and empty gradients).
        if _kernel_runs(impl, query, attn_mask) and k.shape[1] > 0:
            from ojas_kernels.attention import flash_attention

            out = flash_attention(
                q,
                k,
                v,
                is_causal=is_causal,
                scale=scale,
                window=window,
                attn_mask=mask,
                dropout_p=dropout_p,
                dropout_seed=None if dropout is None else dropout.seed,
            )
        else:
            out = _OnlineSoftmaxAttention.apply(q, k, v, mask, is_causal, scale, window, dropout)
    return out.reshape(*query.shape[:-1], value.shape[-1])


def attention_forward(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Optional[Tensor] = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: Optional[float] = None,
    enable_gqa: bool = False,
    *,
    window: Optional[int] = None,
) -> tuple[Tensor, Tensor]:
    """Forward pass of :func:`attention` by the reference recurrence, without autograd.

    Returns (out, lse): out [..., Hq, Sq, Ev] in the input dtype, lse [..., Hq, Sq] in the
    compute dtype (float32, float64 for float64 inputs), -inf for a fully masked row.
    ``stream`` / ``finalize`` of rocq/Attention/OnlineSoftmax.v; equal to the two-pass
    softmax for any tiling by Ojas.Attention.StreamCorrect, masking as Ojas.Attention.Mask.
    Under autocast the inputs are cast as in :func:`attention`. ``dropout_p`` drops as in
    :func:`attention` (the same draw from torch's generator, the same mask); lse is then that
    of all the probabilities, dropped ones included.
    """
    if isinstance(query, Tensor):
        query, key, value, attn_mask = cast_for_autocast(query.device.type, query, key, value, attn_mask)
    scale, dropout_p, is_causal, window = _check_inputs(
        query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, window
    )
    dropout = _dropout_args(dropout_p, query.device)
    with torch.no_grad(), autocast_off(query.device.type):
        out, lse = _reference_forward(*_as_4d(query, key, value, attn_mask), is_causal, scale, window, dropout)
    return out.to(query.dtype).reshape(*query.shape[:-1], value.shape[-1]), lse.reshape(query.shape[:-1])
