"""Property-based fuzz test of the public API (issue 13, deliverable 3).

Hypothesis draws calls of ``ojas_ref.attention`` (the reference), of
``ojas_ref.linear_cross_entropy`` (the reference, and the Triton kernel in Triton's
interpreter on CPU) and of ``ojas_ref.LinearCrossEntropyLoss``: small shapes with 0 and 1
sizes, float32 / float64 / bfloat16, bool / float / no masks, and argument values both
valid and not (wrong types, negative, NaN, numpy scalars). Each call must either

* match PyTorch: ``F.scaled_dot_product_attention`` / ``F.cross_entropy`` on the
  materialised logits, in float64 on the same (rounded) inputs, output and gradients,
  within the tolerances below; apart from the documented differences (a fully masked
  attention row gives zeros, "mean" over no kept token gives 0, ``attn_mask`` may be
  combined with ``is_causal``, the z-loss and soft cap that torch lacks, computed here
  on the materialised logits); or
* raise TypeError, ValueError, NotImplementedError or RuntimeError with a message that
  names the argument at fault.

Anything else fails: another exception (IndexError, ZeroDivisionError, ...), NaN or inf
where torch is finite, a mismatch, an error for a valid call, no error for an invalid one.

Tolerances. Both sides see the same inputs; ours computes in float32 (float64 for float64
inputs, unit roundoff u = 2^-24 or 2^-53) and rounds its outputs to the input dtype
(bfloat16: 2^-8 relative), torch computes in float64. An output's error is bounded by
``16 u (n + S) B + r |expected|``: n the number of terms a value sums (the sizes), S the
largest score or logit (exp(s - m) has relative error about u |s|), B a bound on the
terms' magnitude (e.g. max|v| for an attention output, the sum of |G| |W| for a
gradient), r = 2^-7 for bfloat16 outputs (the rounding of the output and of the
intermediate bfloat16 values the kernels and the backward reuse: the saved output O,
the kernel's G), else 0; the cross-entropy kernel also rounds the logits to the input
dtype (its docstring), 2^-8 S more in bfloat16. The constant 16 leaves a margin of about 4 over the errors
observed; a wrong mask, target or reduction shows as an error of the size of B.

Examples: 1000 attention calls and 1000 cross-entropy calls under the derandomized ``ci``
profile; about a quarter of each are invalid calls, about a fifth of the cross-entropy
calls run the interpreted kernel (``--hypothesis-show-statistics`` lists them by kind);
about 10 s on 2 CPU cores. Devices: CPU only (the GPU tests run through the device tool).
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from hypothesis import event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import ojas_ref  # noqa: E402

try:
    from ojas_kernels import linear_cross_entropy as _klce  # noqa: E402

    # the kernel runs on CPU tensors only interpreted (TRITON_INTERPRET=1 before its import)
    KERNEL = type(_klce._logits_kernel).__name__ == "InterpretedFunction"
except ImportError:  # no triton
    KERNEL = False

F64 = torch.float64
DTYPES = (torch.float32, F64, torch.bfloat16)
DOCUMENTED = (TypeError, ValueError, NotImplementedError, RuntimeError)


def _unit_roundoff(dtype: torch.dtype) -> float:
    return 2.0**-53 if dtype == F64 else 2.0**-24


def _out_rounding(dtype: torch.dtype) -> float:
    return 2.0**-7 if dtype == torch.bfloat16 else 0.0


def _amax(x) -> float:
    return float(x.detach().abs().max()) if isinstance(x, torch.Tensor) and x.numel() else 0.0


def _check_close(what: str, actual: torch.Tensor, expected: torch.Tensor, tol: float) -> None:
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    a, e = actual.detach().to(F64), expected.detach().to(F64)
    assert torch.isfinite(a).all() or not torch.isfinite(e).all(), f"{what}: non-finite where torch is finite: {a}"
    if a.numel():
        err = float((a - e).abs().max())
        assert err <= tol, f"{what}: max error {err:.3g} > tolerance {tol:.3g}\nours   {a}\ntorch's {e}"


def _expect_error(call, arg: str) -> None:
    """The call raises a documented exception whose message names ``arg``."""
    with pytest.raises(DOCUMENTED) as info:
        call()
    assert arg in str(info.value), f"the error does not name {arg!r}: {info.type.__name__}: {info.value}"


def _size(draw, high: int) -> int:
    """A size in [0, high], 0 one time in 16 (empty dimensions, not most of the calls)."""
    n = draw(st.integers(0, 15))
    return 0 if n == 0 else 1 + (n - 1) % high


def _invalid(draw, cases: list) -> object:
    """One time in four, one of ``cases`` (argument name, the change that makes it bad)."""
    return draw(st.sampled_from(cases)) if draw(st.integers(0, 3)) == 0 else None


def _tensor(gen: torch.Generator, shape, dtype: torch.dtype, magnitude: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, generator=gen, dtype=F64) * magnitude).to(dtype)


# --------------------------------------------------------------------------
# attention
# --------------------------------------------------------------------------


@st.composite
def attention_calls(draw):
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    dtype = draw(st.sampled_from(DTYPES))
    lead = draw(st.sampled_from([None, (), (_size(draw, 2),), (2, 1)]))  # None: 2-D [S, E]
    Hkv, group = (1, 1) if lead is None else (_size(draw, 2), draw(st.integers(1, 2)))
    Sq, Sk, E, Ev = _size(draw, 5), _size(draw, 5), draw(st.integers(1, 4)), _size(draw, 3)
    heads = (lambda h: ()) if lead is None else (lambda h: (*lead, h))
    mag = draw(st.sampled_from([1.0, 4.0]))
    q = _tensor(gen, (*heads(Hkv * group), Sq, E), dtype, mag)
    k = _tensor(gen, (*heads(Hkv), Sk, E), dtype, mag)
    v = _tensor(gen, (*heads(Hkv), Sk, Ev), dtype)
    full = (*heads(Hkv * group), Sq, Sk)
    mask = None
    kind = draw(st.sampled_from([None, "bool", "float"]))
    if kind is not None:
        # broadcastable: each dimension full or 1, leading dimensions maybe left out
        shape = [d if draw(st.booleans()) else 1 for d in full][draw(st.integers(0, len(full) - 2)) :]
        if kind == "bool":
            mask = torch.rand(shape, generator=gen) < 0.7
        else:  # values, not near finfo.min: their rounding error would be their size
            values = torch.tensor([0.0, -1.0, 2.5, -30.0, -math.inf], dtype=F64)
            mask = values[torch.randint(0, 5, shape, generator=gen)].to(dtype)
            mask.requires_grad_(draw(st.booleans()))  # the reference differentiates a float mask too
    kw = dict(
        attn_mask=mask,
        is_causal=draw(st.booleans()),
        enable_gqa=group > 1 or draw(st.booleans()),
        window=draw(st.sampled_from([None, 1, 2, np.int64(3)])),
        scale=draw(st.sampled_from([None, 0.5, np.float32(0.25), 2])),
        dropout_p=draw(st.sampled_from([0.0, 0, np.float64(0.0)])),
    )
    if draw(st.booleans()):  # the numpy bools SDPA refuses, accepted here
        kw["is_causal"], kw["enable_gqa"] = np.bool_(kw["is_causal"]), np.bool_(kw["enable_gqa"])
    bad = _invalid(
        draw,
        [
            ("dropout_p", dict(dropout_p=1.5)),
            ("dropout_p", dict(dropout_p="0")),
            ("dropout_p", dict(dropout_p=True)),
            ("scale", dict(scale=math.nan)),
            ("scale", dict(scale=math.inf)),
            ("scale", dict(scale="0.5")),
            ("scale", dict(scale=True)),
            ("window", dict(window=0)),
            ("window", dict(window=-2)),
            ("window", dict(window=1.5)),
            ("window", dict(window=True)),
            ("is_causal", dict(is_causal=1)),
            ("enable_gqa", dict(enable_gqa=None)),
            ("attn_mask", dict(attn_mask=torch.zeros(full, dtype=torch.int32))),
            ("attn_mask", dict(attn_mask=torch.zeros(*full[:-1], Sk + 2, dtype=torch.bool))),
            ("attn_mask", dict(attn_mask=[[True]])),
            ("impl", dict(impl="fast")),
            ("key", dict(key=k.to(torch.float16 if dtype != torch.float16 else F64))),
            ("value", dict(value=_tensor(gen, (*heads(Hkv), Sk + 1, Ev), dtype))),
            ("query", dict(query=q[..., :0], key=k[..., :0])),  # head dim E = 0
            ("query", dict(query=q.tolist())),
        ],
    )
    return q, k, v, kw, bad, torch.randn(*heads(Hkv * group), Sq, Ev, generator=gen, dtype=F64).to(dtype)


def _visibility(kw: dict, Sq: int, Sk: int) -> torch.Tensor:
    """[Sq, Sk] bool: is_causal (j <= i, top-left) and window (|i - j| < w)."""
    i, j = torch.arange(Sq).unsqueeze(1), torch.arange(Sk).unsqueeze(0)
    visible = torch.ones(Sq, Sk, dtype=torch.bool)
    if kw["is_causal"]:
        visible &= j <= i
    if kw["window"] is not None:
        visible &= (i - j).abs() < int(kw["window"])
    return visible


def _sdpa(q, k, v, kw, grad_out):
    """F.scaled_dot_product_attention in float64 of the same inputs, the masks combined
    into one additive mask (SDPA refuses attn_mask with is_causal); rows with no key left
    give zeros (SDPA's math backend gives zeros there in torch 2.13 too)."""
    q, k, v = (t.detach().to(F64).requires_grad_() for t in (q, k, v))
    Sq, Sk = q.shape[-2], k.shape[-2]
    mask = kw["attn_mask"]
    leaves = (q, k, v)
    if mask is not None and mask.requires_grad:
        mask = mask.detach().to(F64).requires_grad_()
        leaves += (mask,)
    keep = _visibility(kw, Sq, Sk)
    add = torch.zeros((), dtype=F64)
    if mask is not None:
        keep = keep & mask if mask.dtype == torch.bool else keep
        add = mask.to(F64) if mask.dtype != torch.bool else add
    total = torch.where(keep, add, -math.inf).expand(*q.shape[:-1], Sk)
    alive = (total > -math.inf).any(-1, keepdim=True)
    scale = None if kw["scale"] is None else float(kw["scale"])
    as4 = (lambda t: t.reshape(math.prod(t.shape[:-3]), *t.shape[-3:])) if q.dim() >= 3 else (lambda t: t[None, None])
    out = F.scaled_dot_product_attention(
        as4(q), as4(k), as4(v), attn_mask=as4(total), scale=scale, enable_gqa=bool(kw["enable_gqa"])
    )
    out = torch.where(alive, out.reshape(*q.shape[:-1], v.shape[-1]), 0.0)
    grads = torch.autograd.grad(out, leaves, grad_out.to(F64), allow_unused=True) if out.numel() else ()
    return out, [torch.zeros_like(t) if g is None else g for t, g in zip(leaves, grads)]  # unused: a 0 gradient


@settings(max_examples=1000, deadline=None)
@given(attention_calls())
def test_attention_fuzz(call):
    q, k, v, kw, bad, grad_out = call
    event(f"invalid {bad[0]}" if bad else f"valid, {'empty' if not q.numel() * k.numel() * v.numel() else 'non-empty'}")
    if bad is not None:
        arg, change = bad
        args = {"query": q, "key": k, "value": v, **kw, "impl": "reference", **change}
        _expect_error(lambda: ojas_ref.attention(args.pop("query"), args.pop("key"), args.pop("value"), **args), arg)
        return
    ins = [t.clone().requires_grad_() for t in (q, k, v)]
    mask = kw["attn_mask"]
    if mask is not None and mask.requires_grad:
        kw = {**kw, "attn_mask": mask.detach().clone().requires_grad_()}
        ins.append(kw["attn_mask"])
    out = ojas_ref.attention(*ins[:3], **kw, impl="reference")
    assert out.dtype == q.dtype
    expected, expected_grads = _sdpa(q, k, v, kw, grad_out)
    u, r = _unit_roundoff(q.dtype), _out_rounding(q.dtype)
    Sq, Sk, E, Ev = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    scale = 1 / math.sqrt(E) if kw["scale"] is None else float(kw["scale"])
    mask = kw["attn_mask"]
    finite_mask = mask[mask.isfinite()] if mask is not None and mask.dtype != torch.bool else None
    S = abs(scale) * E * _amax(q) * _amax(k) + _amax(finite_mask)  # largest score
    c = 16 * u * (Sq + Sk + E + Ev + 1 + S)
    vmax, gmax = _amax(v), _amax(grad_out)
    _check_close("output", out, expected, c * vmax + r * _amax(expected))
    if out.numel() == 0:
        return
    grads = torch.autograd.grad(out, ins, grad_out)
    # dS = P (dP - D) with |dP|, |D| <= Ev gmax vmax; dQ = scale dS K sums Sk terms,
    # dK = scale dS^T Q sums Sq, dV = P^T dO sums Sq of size gmax
    ds = 2 * Ev * gmax * vmax
    # d(attn_mask) is dS summed over the dimensions the mask is broadcast along
    copies = math.prod(out.shape[:-1]) * Sk // max(1, mask.numel()) if len(ins) == 4 else 0
    bounds = (abs(scale) * ds * Sk * _amax(k), abs(scale) * ds * Sq * _amax(q), Sq * gmax, ds * copies)
    for name, a, e, b in zip(("dq", "dk", "dv", "dmask"), grads, expected_grads, bounds):
        _check_close(name, a, e, (c + r) * b + r * _amax(e))


# --------------------------------------------------------------------------
# linear_cross_entropy and LinearCrossEntropyLoss
# --------------------------------------------------------------------------


@st.composite
def cross_entropy_calls(draw):
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    kernel = KERNEL and draw(st.integers(0, 3)) == 0  # one call in 4 through the interpreted kernel
    dtype = draw(st.sampled_from(DTYPES[:1] + DTYPES[2:] if kernel else DTYPES))
    tokens = draw(st.sampled_from([(), (_size(draw, 5),), (2, _size(draw, 3))]))
    D, V = _size(draw, 4), draw(st.integers(1, 6))
    x = _tensor(gen, (*tokens, D), dtype, draw(st.sampled_from([1.0, 3.0])))
    w = _tensor(gen, (V, D), dtype)
    b = _tensor(gen, (V,), dtype) if draw(st.booleans()) else None
    weight = torch.rand(V, generator=gen, dtype=F64) + 0.1 if not kernel and draw(st.booleans()) else None
    if weight is not None and draw(st.booleans()):
        weight = weight.to(dtype)
    ignore_index = draw(st.sampled_from([None, -100, -1, 0, np.int64(-100)]))
    if not kernel and draw(st.integers(0, 3)) == 0:  # class probabilities (rows summing to 1 or not)
        t = torch.rand(*tokens, V, generator=gen, dtype=F64).to(draw(st.sampled_from([dtype, F64])))
        ignore_index = draw(st.sampled_from([None, -100]))
    else:
        t = torch.randint(0, V, tokens, generator=gen)
        ignored = -100 if ignore_index is None else int(ignore_index)
        t = torch.where(torch.rand(tokens, generator=gen) < draw(st.sampled_from([0.0, 0.3, 1.0])), ignored, t)
        t = t.to(draw(st.sampled_from([torch.int64, torch.int32])))
    probs = t.is_floating_point()
    plain = weight is None and not probs  # what the kernel and the module take
    impl = "triton" if kernel else "reference"
    kw = dict(
        weight=weight,
        reduction=draw(st.sampled_from(["none", "mean", "sum"])),
        ignore_index=ignore_index,
        label_smoothing=draw(st.sampled_from([0.0, 0.1, 1.0, np.float32(0.5)])),
        z_loss=0.0 if weight is not None else draw(st.sampled_from([0.0, 1e-2])),
        softcap=draw(st.sampled_from([None, 3.0, 1])),
        chunk_size=draw(st.sampled_from([None, 1, (2, 3)])),
        impl=impl,
    )
    module = plain and draw(st.booleans())
    bad = _invalid(
        draw,
        [
            ("label_smoothing", dict(label_smoothing=-0.1)),
            ("label_smoothing", dict(label_smoothing=math.nan)),
            ("label_smoothing", dict(label_smoothing="0.1")),
            ("label_smoothing", dict(label_smoothing=1.5)),
            ("z_loss", dict(z_loss=-1.0, weight=None)),
            ("z_loss", dict(z_loss=math.inf, weight=None)),
            ("softcap", dict(softcap=0.0)),
            ("softcap", dict(softcap=-3.0)),
            ("softcap", dict(softcap=math.nan)),
            ("softcap", dict(softcap="3")),
            ("chunk_size", dict(chunk_size=0)),
            ("chunk_size", dict(chunk_size=(2, -1))),
            ("chunk_size", dict(chunk_size=2.5)),
            ("reduction", dict(reduction="avg")),
            ("reduction", dict(reduction=None)),
            ("ignore_index", dict(ignore_index=1.5)),
            ("ignore_index", dict(ignore_index=True)),
            ("impl", dict(impl="cuda")),
            ("weight", dict(weight=torch.rand(V + 1, dtype=F64))),
            ("weight", dict(weight=torch.ones(V).long())),
            ("weight", dict(weight=torch.ones(V), z_loss=0.1)),
            ("linear_weight", dict(linear_weight=w[:, :0] if D else torch.zeros(V, 1, dtype=dtype))),
            ("linear_weight", dict(linear_weight=w[:0])),
            ("linear_weight", dict(linear_weight=w.to(torch.float16))),
            ("linear_bias", dict(linear_bias=torch.zeros(V + 1, dtype=dtype))),
            ("target", dict(target=torch.zeros(*tokens, 2, dtype=torch.long))),
            # a class index out of range: only where there is a token to hold it
            *(
                [("target", dict(target=torch.full(tokens, V, dtype=torch.long), ignore_index=None))]
                if torch.Size(tokens).numel()
                else []
            ),
            ("target", dict(target=torch.zeros(*tokens, V + 1, dtype=F64))),
            ("target", dict(target=torch.zeros(tokens, dtype=torch.int16))),
            ("input", dict(input=x.long())),
            ("input", dict(input=x.reshape(1, 1, 1, *x.shape))),
        ],
    )
    return x, w, b, t, kw, module, bad, torch.randn(tokens, generator=gen, dtype=F64)


def _torch_cross_entropy(x, w, b, t, kw):
    """F.cross_entropy of the float64 logits (soft-capped), plus the z-loss on the kept
    tokens; "mean" over no kept token is 0 (torch: NaN)."""
    z = F.linear(x.reshape(math.prod(x.shape[:-1]), x.shape[-1]), w, b)
    if kw["softcap"] is not None:
        z = kw["softcap"] * torch.tanh(z / kw["softcap"])
    probs = t.is_floating_point()
    tf = t.reshape(-1, t.shape[-1]) if probs else t.reshape(-1).long()
    ignore = -100 if kw["ignore_index"] is None else int(kw["ignore_index"])
    kept = torch.ones(z.shape[0], dtype=torch.bool) if probs else tf != ignore
    weight = None if kw["weight"] is None else kw["weight"].to(F64)
    if kw["reduction"] == "mean" and not kept.any():
        return z.sum() * 0.0
    loss = F.cross_entropy(
        z,
        tf.to(F64) if probs else tf,
        weight=weight,
        reduction=kw["reduction"],
        ignore_index=-100 if probs else ignore,
        label_smoothing=float(kw["label_smoothing"]),
    )
    if kw["z_loss"]:
        zl = torch.where(kept, kw["z_loss"] * torch.logsumexp(z, dim=-1) ** 2, 0.0)
        loss = loss + {"none": zl, "sum": zl.sum(), "mean": zl.sum() / kept.sum()}[kw["reduction"]]
    return loss.reshape(x.shape[:-1]) if kw["reduction"] == "none" else loss


@settings(max_examples=1000, deadline=None)
@given(cross_entropy_calls())
def test_linear_cross_entropy_fuzz(call):
    x, w, b, t, kw, module, bad, grad_out = call
    event(f"invalid {bad[0]}" if bad else f"valid, {kw['impl']}{', module' if module else ''}")

    def run(x, w, b, t, **kw):
        if module:
            loss_fn = ojas_ref.LinearCrossEntropyLoss(**{k: v for k, v in kw.items() if k != "weight"})
            return loss_fn(x, w, t, linear_bias=b)
        return ojas_ref.linear_cross_entropy(x, w, t, linear_bias=b, **kw)

    if bad is not None:
        arg, change = bad
        args = {"input": x, "linear_weight": w, "target": t, "linear_bias": b, **kw, **change}
        tensors = [args.pop(name) for name in ("input", "linear_weight", "linear_bias", "target")]
        if module and set(change) <= {
            "label_smoothing",
            "z_loss",
            "softcap",
            "chunk_size",
            "reduction",
            "ignore_index",
            "impl",
        }:
            _expect_error(lambda: run(*tensors, **args), arg)
        else:
            _expect_error(
                lambda: ojas_ref.linear_cross_entropy(
                    tensors[0], tensors[1], tensors[3], linear_bias=tensors[2], **args
                ),
                arg,
            )
        return
    probs = t.is_floating_point()
    leaves = [x, w] + ([b] if b is not None else []) + ([t] if probs else [])
    ins = [v.clone().requires_grad_() for v in leaves]
    b_in = ins[2] if b is not None else None
    loss = run(ins[0], ins[1], b_in, ins[-1] if probs else t, **kw)
    assert loss.dtype == (F64 if x.dtype == F64 else torch.float32)
    mat = [v.detach().to(F64).requires_grad_() for v in leaves]
    expected = _torch_cross_entropy(mat[0], mat[1], mat[2] if b is not None else None, mat[-1] if probs else t, kw)

    # magnitudes: logits S (plus the z-loss's lse^2), class weights, tokens N
    dtype, V, D = x.dtype, w.shape[0], w.shape[1]
    u, r = _unit_roundoff(dtype), _out_rounding(dtype)
    N = max(1, math.prod(x.shape[:-1]))
    S = D * _amax(x) * _amax(w) + _amax(b) + math.log(V) + 1
    S *= 1 + 2 * kw["z_loss"] * S
    weights = kw["weight"]
    wmax = 1.0 if weights is None else max(1.0, _amax(weights))
    mass = V * _amax(t) * wmax if probs else wmax  # sum_v c_v of a token's target row
    # the kernel rounds the logits to the input dtype, as F.linear does (its docstring):
    # |dz| <= 2^-8 S in bfloat16 moves the loss by <= 2 |dz| per unit of target mass
    r_logit = 2.0**-8 if kw["impl"] == "triton" and dtype == torch.bfloat16 else 0.0
    c = 16 * u * (D + V + 4 + S) + 2 * r_logit
    # a token's loss sums terms of size mass * S; "sum" adds N of them, a weighted "mean"
    # divides a sum of N by one of at least N * min(w)
    spread = float(weights.max() / weights.min()) if weights is not None and not probs else 1.0
    tol = c * mass * S * {"none": 1, "sum": N, "mean": spread}[kw["reduction"]]
    _check_close("loss", loss, expected, tol)
    if loss.numel() == 0:
        return
    go = grad_out.to(loss.dtype) if kw["reduction"] == "none" else torch.ones((), dtype=loss.dtype)
    grads = torch.autograd.grad(loss, ins, go)
    expected_grads = [
        torch.zeros_like(m) if e is None else e  # the "mean over none kept is 0" stand-in
        for m, e in zip(mat, torch.autograd.grad(expected, mat, go.to(F64), allow_unused=True))
    ]
    # G (the gradient of the logits) has entries of size <= gmax * spread * (mass + 1 + S)
    # (S covers the z-loss's 2 lam lse); grad_input sums V terms G W, grad_weight and
    # grad_bias N terms G^T x and G; grad_target is g (1 - eps) w (lse - z), of size g w 2S
    G = _amax(go) * spread * (mass + 1 + S)
    bounds = {
        "grad_input": G * V * _amax(w),
        "grad_weight": G * N * max(1.0, _amax(x)),
        "grad_bias": G * N,
        "grad_target": _amax(go) * wmax * 2 * S,
    }
    names = (
        ["grad_input", "grad_weight"] + (["grad_bias"] if b is not None else []) + (["grad_target"] if probs else [])
    )
    for name, leaf, a, e in zip(names, leaves, grads, expected_grads):
        assert a.dtype == leaf.dtype, f"{name}: dtype {a.dtype}, its tensor's is {leaf.dtype}"
        _check_close(name, a, e, (c + r + 2 * r_logit * S) * bounds[name] + r * _amax(e))
