"""Rotary position embedding (RoPE) in Triton, value-equal to Hugging Face's Llama formula.

Hugging Face (``transformers.models.llama.modeling_llama.apply_rotary_pos_emb``) computes, for
``q`` ``[B, Hq, S, E]`` and ``k`` ``[B, Hkv, S, E]`` with ``cos``/``sin`` ``[B or 1, S, E]``
(unsqueezed at dim 1, so broadcast over the heads) and ``h = E / 2``:

    rotate_half(x) = cat(-x[..., h:], x[..., :h])
    out = x * cos + rotate_half(x) * sin

i.e. ``out[i] = x[i] c[i] + rh[i] s[i]`` with ``rh[i] = -x[i+h]`` for ``i < h`` and ``x[i-h]``
for ``i >= h``.  The backward is torch's autograd of that formula; with ``g`` the incoming
gradient, ``a = g c`` and ``u = g s``:

    dx[i] = a[i] + u[i+h]  (i < h),    dx[i] = a[i] - u[i-h]  (i >= h)

Theorem: Ojas.RoPE.Backward.rope_backward_eq_vjp (the backward is the vector-Jacobian product
over the reals, rocq/RoPE/Backward.v, with its pairwise and derivative forms); no theorem covers the
rounding: it reproduces torch's op-by-op rounding, tested bit for bit.

Rounding.  With T the dtype (float32, bfloat16, float16) and ``rnd`` round-to-nearest-even to T,
torch runs each ``mul``/``add``/``neg`` as its own kernel, computing in float32 and rounding the
result to T.  The kernel computes in float32 and rounds at the same points (``_round``,
kernels/ojas_kernels/rounding.py):

* forward: ``out[i] = rnd(rnd(x[i] * c[i]) + rnd(rh[i] * s[i]))`` (the negation is exact).
* backward: autograd's ``mul`` backward gives ``a = rnd(g * c)`` and ``u = rnd(g * s)``; ``cat``,
  ``neg`` and the two slices route ``u`` (negation exact), and the accumulation of the three
  gradients of ``x`` adds ``rnd(a[i] + u[i+h])`` (``i < h``) or ``rnd(a[i] - u[i-h])`` (``i >= h``)
  to the zero padding of the slice gradients; ``y + 0`` is exact, so only the sign of a zero
  may differ (``torch.equal`` treats -0.0 == 0.0).  That backward is the forward's formula
  with ``sin`` replaced by ``sin'`` = ``cat(-s[h:], -s[:h])`` (exactly: negation commutes with
  round-to-nearest-even), so one kernel body does both, ``BACKWARD`` choosing how the sine row
  is loaded.
* float32: Triton contracts ``a * b + c * d`` into a fused multiply-add by default, which rounds
  the product once less than torch; every launch passes ``enable_fp_fusion=False`` (a Triton
  compile option accepted as a launch keyword; the interpreter ignores it and numpy does not
  contract), so each product is rounded as torch rounds it.  In bfloat16 and float16 the
  float32 product of two inputs is exact anyway (at most 16 or 22 significant bits).
* Triton's interpreter (``TRITON_INTERPRET=1``) rounds float32 to bfloat16 toward zero and
  converts bfloat16 subnormals wrongly both ways; there ``_round`` rounds to nearest-even by
  integer arithmetic and ``_to_float32`` / ``_cast`` convert by bit shifts (kernels/ojas_kernels/rounding.py).

Layout: one program per ``(batch, position)`` row handles all ``Hq + Hkv`` heads of ``q`` and
``k`` (one launch for both), loading the ``cos``/``sin`` row once; heads in blocks of
``BLOCK_H`` rows of ``E / 2`` pairs.  Any strides with unit stride in the last dimension
(others are copied): Hugging Face's ``q_proj(x).view(B, S, H, E).transpose(1, 2)`` is read in
place; ``cos``/``sin`` of batch 1 broadcast over ``B`` (batch stride 0).  Outputs are
``torch.empty_like`` of their input (the input's layout when it is a dense permutation, else
contiguous).

Under torch.compile (and torch.export) the kernel runs as two custom operators,
``ojas::rope_forward`` and ``ojas::rope_backward``, registered next to its ``autograd.Function``
in ``ojas_ref.functional.rope`` (``ojas_kernels.host.define_op``, opaque to Dynamo and Inductor,
with fake implementations from :func:`outputs_like`; no autograd of their own: under
torch.compile the Function calls the forward op in its forward and the backward op in its
backward).
They call :func:`rope_forward` and :func:`rope_backward` with the same arguments as the eager
path, so the theorem and the rounding above are unchanged.
"""

from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from .launch import fast
from .rounding import _cast, _round, _to_float32

__all__ = ["outputs_like", "rope_forward", "rope_backward"]

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_TILE = 4096  # elements of a [BLOCK_H, 2 * BLOCK_E] tile of heads; untuned


@triton.jit
def _rope_heads(X, Y, x_row, y_row, sxh, syh, H, c1, c2, s1, s2, e, e_ok, HALF: tl.constexpr, BLOCK_H: tl.constexpr):
    """``y = rnd(rnd(x c) + rnd(rotate_half(x) s))`` for the ``H`` heads of one row, by blocks."""
    dtype = Y.dtype.element_ty
    for h0 in range(0, H, BLOCK_H):
        hs = (h0 + tl.arange(0, BLOCK_H)).to(tl.int64)
        ok = (hs < H)[:, None] & e_ok[None, :]
        xp = X + x_row + hs[:, None] * sxh + e[None, :]
        x1 = _to_float32(tl.load(xp, mask=ok, other=0.0))
        x2 = _to_float32(tl.load(xp + HALF, mask=ok, other=0.0))
        y1 = _round(_round(x1 * c1, dtype) + _round(-x2 * s1, dtype), dtype)
        y2 = _round(_round(x2 * c2, dtype) + _round(x1 * s2, dtype), dtype)
        yp = Y + y_row + hs[:, None] * syh + e[None, :]
        tl.store(yp, _cast(y1, dtype), mask=ok)
        tl.store(yp + HALF, _cast(y2, dtype), mask=ok)


@triton.jit
def _rope_kernel(
    Q,
    K,
    COS,
    SIN,
    QO,
    KO,
    S,
    Hq,
    Hkv,
    sqb,
    sqh,
    sqs,
    skb,
    skh,
    sks,
    soqb,
    soqh,
    soqs,
    sokb,
    sokh,
    soks,
    scb,
    scs,
    ssb,
    sss,
    HALF: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_HQ: tl.constexpr,
    BLOCK_HK: tl.constexpr,
    BACKWARD: tl.constexpr,
):
    """One ``(b, s)`` row of ``q`` and ``k``: the forward, or (``BACKWARD``) the gradient, which is
    the forward with the sine row ``cat(-s[h:], -s[:h])`` (module docstring)."""
    row = tl.program_id(0).to(tl.int64)
    b = row // S
    s = row % S
    e = tl.arange(0, BLOCK_E)
    e_ok = e < HALF
    cp = COS + b * scb + s * scs + e
    c1 = _to_float32(tl.load(cp, mask=e_ok, other=0.0))[None, :]
    c2 = _to_float32(tl.load(cp + HALF, mask=e_ok, other=0.0))[None, :]
    sp = SIN + b * ssb + s * sss + e
    if BACKWARD:
        s1 = -_to_float32(tl.load(sp + HALF, mask=e_ok, other=0.0))[None, :]
        s2 = -_to_float32(tl.load(sp, mask=e_ok, other=0.0))[None, :]
    else:
        s1 = _to_float32(tl.load(sp, mask=e_ok, other=0.0))[None, :]
        s2 = _to_float32(tl.load(sp + HALF, mask=e_ok, other=0.0))[None, :]
    _rope_heads(
        Q,
        QO,
        b * sqb + s * sqs,
        b * soqb + s * soqs,
        sqh,
        soqh,
        Hq,
        c1,
        c2,
        s1,
        s2,
        e,
        e_ok,
        HALF=HALF,
        BLOCK_H=BLOCK_HQ,
    )
    _rope_heads(
        K,
        KO,
        b * skb + s * sks,
        b * sokb + s * soks,
        skh,
        sokh,
        Hkv,
        c1,
        c2,
        s1,
        s2,
        e,
        e_ok,
        HALF=HALF,
        BLOCK_H=BLOCK_HK,
    )


_BLOCKS: dict[tuple[int, int, int], tuple[int, int, int]] = {}
_OPTIONS: dict[tuple[int, int, int, bool], dict] = {}


def _blocks(Hq: int, Hkv: int, half: int) -> tuple[int, int, int]:
    """``(BLOCK_E, BLOCK_HQ, BLOCK_HK)`` (cached per shape)."""
    key = (Hq, Hkv, half)
    hit = _BLOCKS.get(key)
    if hit is None:
        block_e = triton.next_power_of_2(max(half, 1))
        rows = max(1, _TILE // (2 * block_e))
        hit = _BLOCKS[key] = (
            block_e,
            min(triton.next_power_of_2(max(Hq, 1)), rows),
            min(triton.next_power_of_2(max(Hkv, 1)), rows),
        )
    return hit


def _options(Hq: int, Hkv: int, half: int, backward: bool) -> dict:
    """The launch's constexprs and options (cached per shape and direction: a shared dict, not to
    be changed)."""
    key = (Hq, Hkv, half, backward)
    hit = _OPTIONS.get(key)
    if hit is None:
        block_e, block_hq, block_hk = _blocks(Hq, Hkv, half)
        hit = _OPTIONS[key] = dict(
            HALF=half,
            BLOCK_E=block_e,
            BLOCK_HQ=block_hq,
            BLOCK_HK=block_hk,
            BACKWARD=bool(backward),
            enable_fp_fusion=False,
        )
    return hit


def _unit_last(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def outputs_like(x_q: torch.Tensor, x_k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The outputs :func:`rope_forward` (or :func:`rope_backward`) gives for these inputs,
    uninitialised: ``empty_like`` each, after a copy of one whose last dimension is strided (also
    the fake implementations of ``ojas::rope_forward`` and ``ojas::rope_backward``)."""
    return torch.empty_like(_unit_last(x_q)), torch.empty_like(_unit_last(x_k))


def _launch(
    x_q: Optional[torch.Tensor], x_k: Optional[torch.Tensor], cos: torch.Tensor, sin: torch.Tensor, backward: bool
) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
    """Outputs ``empty_like`` their inputs; a ``None`` input (a missing gradient) gives ``None``."""
    first = x_q if x_q is not None else x_k
    B, _, S, E = first.shape
    half = E // 2
    y_q = torch.empty_like(x_q) if x_q is not None else None
    y_k = torch.empty_like(x_k) if x_k is not None else None
    Hq = x_q.shape[1] if x_q is not None else 0
    Hkv = x_k.shape[1] if x_k is not None else 0
    if B * S == 0 or half == 0 or Hq + Hkv == 0:
        return y_q, y_k
    cos, sin = _unit_last(cos), _unit_last(sin)
    q, qo = (x_q, y_q) if x_q is not None else (x_k, y_k)
    k, ko = (x_k, y_k) if x_k is not None else (x_q, y_q)
    sq, sk, soq, sok, sc, ss = q.stride(), k.stride(), qo.stride(), ko.stride(), cos.stride(), sin.stride()
    fast(_rope_kernel)[(B * S,)](
        q,
        k,
        cos,
        sin,
        qo,
        ko,
        S,
        Hq,
        Hkv,
        sq[0],
        sq[1],
        sq[2],
        sk[0],
        sk[1],
        sk[2],
        soq[0],
        soq[1],
        soq[2],
        sok[0],
        sok[1],
        sok[2],
        sc[0] if cos.shape[0] != 1 else 0,
        sc[1],
        ss[0] if sin.shape[0] != 1 else 0,
        ss[1],
        **_options(Hq, Hkv, half, backward),
    )
    return y_q, y_k


def _check(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> None:
    if q.dtype not in _DTYPES:
        raise TypeError(f"q has dtype {q.dtype}; the RoPE kernel supports float16, bfloat16, float32")
    for name, t in (("k", k), ("cos", cos), ("sin", sin)):
        if t.dtype != q.dtype or t.device != q.device:
            raise TypeError(f"{name} ({t.dtype}, {t.device}) must have q's dtype and device ({q.dtype}, {q.device})")
    if q.dim() != 4 or k.dim() != 4 or cos.dim() != 3:
        raise ValueError(
            f"q and k must be 4-D [B, H, S, E] and cos 3-D [B or 1, S, E], got q {tuple(q.shape)}, "
            f"k {tuple(k.shape)}, cos {tuple(cos.shape)}"
        )
    B, _, S, E = q.shape
    if k.shape[0] != B or k.shape[2:] != q.shape[2:]:
        raise ValueError(f"k {tuple(k.shape)} must match q {tuple(q.shape)} in batch, positions and head size")
    if cos.shape[1:] != (S, E) or cos.shape[0] not in (1, B):
        raise ValueError(f"cos {tuple(cos.shape)} must be [{B} or 1, {S}, {E}] for q {tuple(q.shape)}")
    if sin.shape != cos.shape:
        raise ValueError(f"sin {tuple(sin.shape)} must have cos's shape {tuple(cos.shape)}")
    if E % 2:
        raise ValueError(f"q's head size (last dimension) must be even, got {E}")


def rope_forward(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, check: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin)`` with ``cos``/``sin``
    ``[B or 1, S, E]`` broadcast over the heads, rounded as torch rounds Hugging Face's formula
    (module docstring).  One launch for ``q`` and ``k``.  ``check=False`` skips the argument
    checks, for a caller that has made them (``ojas_ref``'s ``apply_rotary_pos_emb`` and
    ``fused_rope``'s callers)."""
    if check:
        _check(q, k, cos, sin)
    return _launch(_unit_last(q), _unit_last(k), cos, sin, False)


def rope_backward(
    grad_q_out: Optional[torch.Tensor], grad_k_out: Optional[torch.Tensor], cos: torch.Tensor, sin: torch.Tensor
) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
    """``(dq, dk)`` from the output gradients (Ojas.RoPE.Backward.rope_backward_eq_vjp over the reals;
    rounding as torch's autograd, module docstring); a ``None`` gradient gives ``None``.  One launch.
    No argument checks: the arguments are those :func:`rope_forward` checked, and gradients of its
    outputs."""
    if grad_q_out is None and grad_k_out is None:
        return None, None
    return _launch(
        None if grad_q_out is None else _unit_last(grad_q_out),
        None if grad_k_out is None else _unit_last(grad_k_out),
        cos,
        sin,
        True,
    )
