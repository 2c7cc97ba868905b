"""Online-softmax (flash) attention in pure PyTorch, step by step as the Coq spec.

The forward pass is the streaming recurrence of ``rocq/Attention/OnlineSoftmax.v``
(``block_step`` over key tiles, ``stream``, ``finalize``), run for every query
tile; the backward pass is ``attention_backward`` of ``rocq/Attention/Backward.v``,
which recomputes the probabilities from the saved log-sum-exp. The theorems the
reference (``_attention_reference.py``) implements:

* ``Ojas.Attention.StreamCorrect`` (``stream_row_correct``,
  ``attention_forward_correct``): the streamed output equals the two-pass
  softmax for any key tiling, so the tile sizes do not change the result
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
once per call and of the element's index (Philox-4x32-10, ``_dropout_keep``), so the
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

This module holds the public functions, their argument checks, the flattening of the leading
dimensions into one batch dimension (``_as_4d``: every query row is a separate ``stream_row``, so
the theorems hold per row) and the dispatch to the Triton kernel; no theorem covers the checks or
the dispatch (they are tested). The reference's tile loop, its dropout mask and its autograd
Function are in ``_attention_reference.py``, whose docstring says which theorem each piece
implements.
"""

from __future__ import annotations

import math
import numbers
from typing import Optional

import numpy as np
import torch
from torch import Tensor

from ojas_ref.functional._attention_reference import _dropout_args, _OnlineSoftmaxAttention, _reference_forward
from ojas_ref.functional.autocast import autocast_off, cast_for_autocast
from ojas_ref.functional.dispatch import IMPL_ENVS, kernel_runs
from ojas_ref.functional.transforms import refuse_function_transforms

__all__ = ["attention", "attention_forward"]

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
    window = _check_window("window", window)
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


def _check_window(name: str, window: object) -> Optional[int]:
    """``window`` (or ``window_hint``) as a Python int >= 1, or None (numpy ints are accepted)."""
    if window is None:
        return None
    if isinstance(window, bool) or not isinstance(window, numbers.Integral):
        raise TypeError(f"{name} must be an int >= 1 or None, got {_type_name(window)}")
    if window < 1:
        raise ValueError(f"{name} must be >= 1 (keys with |i - j| < {name} take part), got {int(window)}")
    return int(window)


def _check_infer_causal(
    infer_causal: object, window_hint: object, is_causal: bool, window: Optional[int]
) -> tuple[bool, Optional[int]]:
    """``infer_causal`` and ``window_hint`` checked against ``is_causal`` and ``window`` (see :func:`attention`)."""
    infer_causal = _check_bool("infer_causal", infer_causal)
    window_hint = _check_window("window_hint", window_hint)
    if window_hint is not None and not infer_causal:
        raise ValueError("window_hint is a hint for infer_causal=True; pass window= for a window that applies")
    if infer_causal and (is_causal or window is not None):
        raise ValueError(
            "infer_causal=True infers is_causal and window from the mask: pass is_causal=False and window=None "
            f"(got is_causal={is_causal}, window={window})"
        )
    return infer_causal, window_hint


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


def _as_is(query: Tensor, key: Tensor, value: Tensor) -> bool:
    """Whether :func:`attention` takes query, key and value as they are, without the views of
    ``_as_4d`` (which autograd would record, each a node of the backward): 4-D inputs, outside
    torch.compile, of three distinct tensors (one tensor passed twice gets its gradients summed
    in another order without the views: not bit for bit the same)."""
    return (
        query.dim() == 4
        and query is not key
        and key is not value
        and query is not value
        and not torch.compiler.is_compiling()
    )


def _as_4d(
    query: Tensor, key: Tensor, value: Tensor, attn_mask: Optional[Tensor]
) -> tuple[Tensor, Tensor, Tensor, Optional[Tensor]]:
    """The checked inputs as [B, H, S, E] (B the product of the dimensions before the heads;
    [S, E] as [1, 1, S, E]; views where the strides allow; as they are where :func:`_as_is`),
    and the mask as one
    broadcastable to [B, Hq, Sq, Sk]. A mask that broadcasts over some but not all of more
    than one leading dimension is expanded over them (copied by the reshape)."""

    if _as_is(query, key, value):
        return query, key, value, attn_mask

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
    infer_causal: bool = False,
    window_hint: Optional[int] = None,
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

    ``infer_causal`` (with ``is_causal=False`` and no ``window``; a bool; ``window_hint`` an int
    >= 1 or None): where the kernel runs, a bool ``attn_mask`` whose contents lie inside the causal
    pattern (and inside ``window_hint``'s band, if given and it does) runs causal (with that
    window) so that the kernel skips the tiles the pattern masks, without the mask where it is
    exactly that pattern; decided from the mask's contents when the kernel runs, under
    torch.compile too (``ojas_kernels.attention.flash_attention``). The same visibility, so the
    same function (Ojas.Attention.Mask.visibility_true_iff); the reference runs the mask as given.

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
    infer_causal, window_hint = _check_infer_causal(infer_causal, window_hint, is_causal, window)
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
                **(dict(infer_causal=True, window_hint=window_hint) if infer_causal else {}),
            )
        else:
            out = _OnlineSoftmaxAttention.apply(q, k, v, mask, is_causal, scale, window, dropout)
    if _as_is(query, key, value):
        return out  # already the output's shape
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
