"""The Triton flash-attention kernel (kernels/ojas_kernels/attention.py) against float64 references.

Two kinds of test:

* CPU tests run the kernels in Triton's interpreter.  The interpreter must be
  on before the kernels are decorated, so this module sets
  ``TRITON_INTERPRET=1`` before importing ``ojas_kernels`` when no CUDA device
  is present; they are skipped (with the reason) if the kernels were already
  imported compiled.  Small shapes, hypothesis-drawn, with drawn tile sizes
  (any tiling computes the same function: Ojas.Attention.StreamCorrect),
  against a materialised float64 softmax and against the oracle extracted
  from the Coq spec (ojas_ref.verification.oracle).
  With ``attn_mask`` (bool and additive; key and left padding, packed
  sequences, fully masked rows) against the same float64 softmax.
* GPU tests (``-m gpu``, need CUDA): sizes up to 4K against
  ``scaled_dot_product_attention``'s math backend on float64 copies, a
  left-padded batch among them, and float32 under TF32.

Errors are relative norm errors ``|x - ref| / |ref|``; on the small CPU
shapes ``|ref|`` is floored at a tenth of the norm of the same sum over
absolute values (a gradient that cancels to near zero, e.g. dQ with one key,
is compared at the scale of its terms).  Tolerances: float32 inputs run 3xTF32 dots on
the GPU (ieee in the interpreter), measured at float32's accuracy (errors below 1e-6 at
S=2048), so 1e-5 (forward) and 1e-4 (gradients; the CPU tests use 1e-5 throughout);
float16 2e-3 / 5e-3; bfloat16 1e-2 / 2e-2 (P and dS are rounded to the input
type before their matrix products, as in FlashAttention-2; the output is
rounded once); float32 under TF32 5e-3 / 1e-2 (test_kernel_float32_tf32_gpu).
"""

from __future__ import annotations

import math
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

triton = pytest.importorskip("triton")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from ojas_kernels import attention as kattn  # noqa: E402
from ojas_kernels.attention import (  # noqa: E402
    AttentionConfig,
    KernelConfig,
    flash_attention,
    flash_attention_forward,
)


F64 = torch.float64
TOL = {  # (forward, gradients)
    torch.float32: (1e-5, 1e-4),
    torch.float16: (2e-3, 5e-3),
    torch.bfloat16: (1e-2, 2e-2),
}


def visible_mask(sq: int, sk: int, is_causal: bool, window: int | None, device=None) -> torch.Tensor:
    """``visibility is_causal window None`` of OnlineSoftmax.v as a [Sq, Sk] matrix."""
    i = torch.arange(sq, device=device)[:, None]
    j = torch.arange(sk, device=device)[None, :]
    vis = torch.ones(sq, sk, dtype=torch.bool, device=device)
    if is_causal:
        vis &= j <= i
    if window is not None:
        vis &= (i - j).abs() < window
    return vis


def materialised(q, k, v, is_causal, scale, window, grad_out, attn_mask=None):
    """float64 softmax(scale q k^T (+ additive mask)) v with the masks, lse, autograd
    gradients, and the norms of out/dq/dk/dv computed on absolute values (|P| |V|, ...),
    which floor the relative errors where cancellation makes a result near zero.
    ``attn_mask``: bool (conjunction with causal/window) or additive (its -inf entries
    mask), broadcastable to [B, Hq, Sq, Sk]."""
    q, k, v = (t.detach().to(F64).requires_grad_() for t in (q, k, v))
    do = grad_out.to(F64)
    groups = q.shape[1] // k.shape[1]
    kr, vr = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    vis = visible_mask(q.shape[2], k.shape[2], is_causal, window, q.device)
    s = scale * q @ kr.transpose(-1, -2)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        vis = vis & attn_mask
    elif attn_mask is not None:
        vis = vis & (attn_mask != -math.inf)
        s = s + attn_mask.to(F64)
    any_vis = vis.any(-1, keepdim=True)
    s = s.masked_fill(~vis, -math.inf).masked_fill(~any_vis, 0.0)
    lse = torch.logsumexp(s, -1).masked_fill(~any_vis[..., 0], -math.inf)
    p = torch.where(any_vis, torch.softmax(s, -1), 0.0)
    out = p @ vr
    gq, gk, gv = torch.autograd.grad(out, (q, k, v), do)
    with torch.no_grad():
        p, out = p.detach(), out.detach()
        terms = p * ((do @ vr.transpose(-1, -2)).abs() + (do * out).sum(-1, keepdim=True).abs())
        mags = [
            p @ vr.abs(),
            abs(scale) * terms @ kr.abs(),
            (abs(scale) * terms.transpose(-1, -2) @ q.abs()).unflatten(1, (-1, groups)).sum(2),
            (p.transpose(-1, -2) @ do.abs()).unflatten(1, (-1, groups)).sum(2),
        ]
    return (out, lse, gq, gk, gv), [m.norm().item() for m in mags]


def rel_err(x: torch.Tensor, ref: torch.Tensor, mag: float = 0.0) -> float:
    """|x - ref| / max(|ref|, mag / 10) (mag: the norm of the same sum taken
    over absolute values; 0 for the plain relative error)."""
    assert not torch.isnan(x).any(), "NaN in the kernel's result"
    den = max(ref.norm().item(), 0.1 * mag, 1e-300)
    return ((x.to(F64) - ref).norm() / den).item()


def check_lse(lse: torch.Tensor, ref: torch.Tensor, tol: float) -> None:
    assert lse.dtype == torch.float32
    masked = torch.isinf(ref)
    assert torch.equal(torch.isinf(lse) & (lse < 0), masked), "-inf lse exactly on fully masked rows"
    if (~masked).any():
        assert (lse.to(F64)[~masked] - ref[~masked]).abs().max().item() <= tol


def run_kernel(q, k, v, is_causal, scale, window, grad_out, config=None, attn_mask=None):
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out, lse = flash_attention_forward(
        q.detach(), k.detach(), v.detach(), is_causal, scale, window, config, attn_mask=attn_mask
    )
    out2 = flash_attention(q, k, v, is_causal, scale, window, config, attn_mask=attn_mask)
    assert torch.equal(out, out2.detach())
    grads = torch.autograd.grad(out2, (q, k, v), grad_out)
    return out, lse, *grads


def compare(got, ref, tol_fwd, tol_grad, lse_tol, mags=(0.0, 0.0, 0.0, 0.0)):
    out, lse, gq, gk, gv = got
    rout, rlse, rq, rk, rv = ref
    errs = {
        name: rel_err(x, r, m)
        for name, x, r, m in zip(("out", "dq", "dk", "dv"), (out, gq, gk, gv), (rout, rq, rk, rv), mags)
    }
    check_lse(lse, rlse, lse_tol)
    assert errs["out"] <= tol_fwd, errs
    assert max(errs["dq"], errs["dk"], errs["dv"]) <= tol_grad, errs
    return errs


def make_inputs(b, hq, hkv, sq, sk, e, ev, dtype, device, seed):
    gen = torch.Generator(device="cpu").manual_seed(seed)
    q = torch.randn(b, hq, sq, e, generator=gen)
    k = torch.randn(b, hkv, sk, e, generator=gen)
    v = torch.randn(b, hkv, sk, ev, generator=gen)
    do = torch.randn(b, hq, sq, ev, generator=gen)
    return (t.to(dtype=dtype, device=device) for t in (q, k, v, do))


# ---------------------------------------------------------------------------
# CPU, interpreter
# ---------------------------------------------------------------------------

BLOCKS = st.sampled_from([16, 32])


@st.composite
def small_problems(draw):
    hkv, groups = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    e = draw(st.sampled_from([16, 32, 24]))
    ev = draw(st.sampled_from([e, 16]))
    return dict(
        b=draw(st.integers(1, 2)),
        hq=hkv * groups,
        hkv=hkv,
        sq=draw(st.integers(1, 40)),
        sk=draw(st.integers(1, 40)),
        e=e,
        ev=ev,
        is_causal=draw(st.booleans()),
        window=draw(
            st.one_of(st.none(), st.integers(1, 45))
        ),  # window < 1 is refused (test_strided_inputs_and_head_dim_limit)
        scale=draw(st.sampled_from([None, 0.5, -0.3])),
        dtype=draw(st.sampled_from([torch.float32, torch.bfloat16])),
        config=AttentionConfig(
            *(KernelConfig(draw(BLOCKS), draw(BLOCKS), split=draw(st.booleans())) for _ in range(3))
        ),
        seed=draw(st.integers(0, 2**31 - 1)),
    )


@pytest.mark.interpreter
@settings(max_examples=20)
@given(small_problems())
def test_kernel_matches_materialised_softmax(p):
    q, k, v, do = make_inputs(
        p["b"], p["hq"], p["hkv"], p["sq"], p["sk"], p["e"], p["ev"], p["dtype"], "cpu", p["seed"]
    )
    scale = 1 / math.sqrt(p["e"]) if p["scale"] is None else p["scale"]
    got = run_kernel(q, k, v, p["is_causal"], scale, p["window"], do, p["config"])
    ref, mags = materialised(q, k, v, p["is_causal"], scale, p["window"], do)
    tol = 1e-5 if p["dtype"] == torch.float32 else 2e-2
    compare(got, ref, tol, tol, 1e-4 if p["dtype"] == torch.float32 else 1e-2, mags)


CASES = [  # b, hq, hkv, sq, sk, e, is_causal, window
    (1, 1, 1, 1, 1, 16, False, None),  # S = 1
    (1, 1, 1, 1, 1, 16, True, None),
    (2, 2, 2, 33, 33, 32, True, None),  # causal, tiles not a multiple
    (1, 4, 2, 40, 17, 16, False, None),  # GQA, Sq > Sk
    (1, 2, 1, 17, 40, 32, True, None),  # causal with Sq < Sk
    (1, 2, 2, 37, 37, 16, False, 5),  # window
    (1, 2, 2, 37, 37, 16, True, 3),  # causal window
    (1, 2, 1, 40, 8, 16, False, 4),  # rows past Sk + window - 1 are fully masked
    (1, 1, 1, 9, 2, 16, False, 1),  # rows 2..8 fully masked (window 1: the diagonal only)
]


@pytest.mark.interpreter
@pytest.mark.parametrize("b,hq,hkv,sq,sk,e,is_causal,window", CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernel_cases(b, hq, hkv, sq, sk, e, is_causal, window, dtype):
    q, k, v, do = make_inputs(b, hq, hkv, sq, sk, e, e, dtype, "cpu", seed=sq * 100 + sk)
    got = run_kernel(q, k, v, is_causal, 0.25, window, do)
    ref, mags = materialised(q, k, v, is_causal, 0.25, window, do)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    compare(got, ref, tol, tol, 1e-4 if dtype == torch.float32 else 1e-2, mags)
    masked_rows = ~visible_mask(sq, sk, is_causal, window).any(-1)
    assert (got[0][:, :, masked_rows] == 0).all() and (got[2][:, :, masked_rows] == 0).all()


@pytest.mark.interpreter
def test_strided_inputs_and_head_dim_limit():
    q, k, v, do = make_inputs(1, 2, 2, 20, 20, 16, 16, torch.float32, "cpu", seed=7)
    qt = q.transpose(1, 2).contiguous().transpose(1, 2)  # [B, S, H, E] memory
    got = run_kernel(qt, k, v, True, 0.3, None, do)
    ref, mags = materialised(q, k, v, True, 0.3, None, do)
    compare(got, ref, 1e-5, 1e-5, 1e-4, mags)
    big = torch.zeros(1, 1, 4, 272)
    with pytest.raises(ValueError, match="head dim"):
        flash_attention_forward(big, big, big, False, 1.0, None)
    with pytest.raises(ValueError, match="window must be >= 1"):  # as ojas_ref.attention
        flash_attention_forward(q, k, v, False, 1.0, 0)


@st.composite
def oracle_problems(draw):
    hkv, groups = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    return dict(
        hq=hkv * groups,
        hkv=hkv,
        sq=draw(st.integers(1, 24)),
        sk=draw(st.integers(1, 24)),
        is_causal=draw(st.booleans()),
        window=draw(st.one_of(st.none(), st.integers(1, 12))),
        block=draw(BLOCKS),
        seed=draw(st.integers(0, 2**31 - 1)),
    )


@pytest.mark.interpreter
@settings(max_examples=8)
@given(oracle_problems())
def test_kernel_matches_extracted_oracle(p):
    oracle = pytest.importorskip("ojas_ref.verification.oracle")
    try:
        oracle.oracle_binary()
    except RuntimeError as e:
        pytest.skip(str(e))
    q, k, v, do = make_inputs(1, p["hq"], p["hkv"], p["sq"], p["sk"], 16, 16, torch.float32, "cpu", p["seed"])
    cfg = AttentionConfig(*(KernelConfig(p["block"], p["block"]) for _ in range(3)))
    got = run_kernel(q, k, v, p["is_causal"], 0.25, p["window"], do, cfg)
    res = oracle.attention_oracle(
        q,
        k,
        v,
        is_causal=p["is_causal"],
        scale=0.25,
        enable_gqa=True,
        window=p["window"],
        block_size=p["block"],
        grad_out=do,
    )
    ref = (res["out"], res["lse"], res["grad_query"], res["grad_key"], res["grad_value"])
    mags = materialised(q, k, v, p["is_causal"], 0.25, p["window"], do)[1]
    compare(got, ref, 1e-5, 1e-5, 1e-4, mags)


# ---------------------------------------------------------------------------
# CPU, interpreter: attn_mask
# ---------------------------------------------------------------------------


def left_padding(b, sq, sk, pads, device=None):
    """Hugging Face's bool mask for left-padded batches: causal and key j >= pads[b];
    [B, 1, Sq, Sk].  Query rows i < pads[b] see no key (fully masked)."""
    i = torch.arange(sq, device=device).view(1, 1, sq, 1)
    j = torch.arange(sk, device=device).view(1, 1, 1, sk)
    return (j <= i) & (j >= torch.tensor(pads, device=device).view(b, 1, 1, 1))


def mask_case(kind, b, hq, sq, sk, dtype, gen):
    """(attn_mask, is_causal, window) of one kind of mask."""
    j = torch.arange(sk)
    if kind == "key_padding":  # right padding of the keys, [B, 1, 1, Sk]
        return (j < torch.tensor([sk, sk - 9]).view(b, 1, 1, 1))[:b], False, None
    if kind == "hf_left_padding":  # causal & padding in the mask, as Hugging Face builds it
        return left_padding(b, sq, sk, [0, 9][:b]), False, None
    if kind == "causal_left_padding":  # key padding [B, 1, 1, Sk] combined with is_causal
        return (j >= torch.tensor([0, 9]).view(b, 1, 1, 1))[:b], True, None
    if kind == "packed":  # three sequences in one row: block-diagonal, causal by is_causal
        seg = torch.bucketize(torch.arange(sq), torch.tensor([7, 20]), right=True)
        return (seg[:, None] == seg[None, :]).view(1, 1, sq, sk), True, None
    if kind == "dead_rows":  # random keys, rows 3 and Sq - 1 see none
        keep = torch.rand(1, 1, sq, sk, generator=gen) < 0.7
        keep[..., [3, sq - 1], :] = False
        return keep, False, None
    # Additive masks of the query dtype, some -inf entries and row 5 all -inf; entries
    # hidden by the window / causal mask are NaN (never read, never used).
    shape = (b, hq, sq, sk) if kind == "additive_window" else (1, 1, sq, sk)
    add = 2 * torch.randn(*shape, generator=gen)
    add = add.masked_fill(torch.rand(*shape, generator=gen) < 0.25, -math.inf)
    add[..., 5, :] = -math.inf
    is_causal, window = (False, 9) if kind == "additive_window" else (True, None)
    hidden = ~visible_mask(sq, sk, is_causal, window)
    return add.masked_fill(hidden, math.nan).to(dtype), is_causal, window


MASK_KINDS = [
    "key_padding",
    "hf_left_padding",
    "causal_left_padding",
    "packed",
    "dead_rows",
    "additive_window",
    "additive_causal",
]
MASK_SHAPES = {  # b, hq, hkv, sq, sk: GQA, sizes not multiples of the tiles (16, 32)
    "key_padding": (2, 4, 2, 29, 45),
    "additive_window": (2, 4, 2, 21, 40),
}
MIXED_TILES = AttentionConfig(KernelConfig(32, 16), KernelConfig(16, 32), KernelConfig(32, 16))


@pytest.mark.interpreter
@pytest.mark.parametrize("kind", MASK_KINDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("config", [None, MIXED_TILES], ids=["tiles16", "tiles32x16"])
def test_kernel_with_attn_mask(kind, dtype, config):
    """Forward (out, lse) and dq/dk/dv with a mask against the float64 softmax.  The
    tolerances are those of the unmasked tests: a bool mask only drops keys
    (Ojas.Attention.Mask.stream_row_masked_keys), the same arithmetic on the kept ones;
    an additive mask adds two float32 roundings to a base-2 score (m * log2 e, then the
    sum), |s2| <= 15 here, a perturbation delta <= 2 * 2^-24 * 15 = 1.8e-6 of each score,
    which moves the output by at most (e^(2 delta) - 1) max|v| = 3.6e-6 max|v|
    (Ojas.Attention.ScorePerturbation, bounds.online_softmax.softmax_score_perturbation_bound),
    under 1e-5 (float32) and negligible against 2e-2 (bfloat16)."""
    b, hq, hkv, sq, sk = MASK_SHAPES.get(kind, (2, 4, 2, 37, 37))
    gen = torch.Generator().manual_seed(MASK_KINDS.index(kind))
    mask, is_causal, window = mask_case(kind, b, hq, sq, sk, dtype, gen)
    q, k, v, do = make_inputs(b, hq, hkv, sq, sk, 16, 16, dtype, "cpu", seed=sq * 100 + sk)
    got = run_kernel(q, k, v, is_causal, 0.25, window, do, config, attn_mask=mask)
    ref, mags = materialised(q, k, v, is_causal, 0.25, window, do, attn_mask=mask)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    compare(got, ref, tol, tol, 1e-4 if dtype == torch.float32 else 1e-2, mags)
    dead = torch.isneginf(ref[1])
    if kind not in ("key_padding", "packed"):
        assert dead.any(), "the case has fully masked rows"
    assert (got[0][dead] == 0).all() and (got[2][dead] == 0).all(), "zeros on fully masked rows"


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernel_additive_mask_at_finfo_min(dtype):
    """torch.finfo(dtype).min (Hugging Face's float "masked" value) overflows the base-2
    scores and masks like -inf: where it covers some keys of a row the result is the
    float64 softmax's; rows 2 and 11, covered throughout, are fully masked (zeros, lse
    -inf, zero dq) where the float64 softmax averages the values, so they are left out
    of the comparison and given dO = 0 (then they add nothing to dk, dv on either side)."""
    b, hq, hkv, sq, sk = 1, 2, 1, 20, 23
    mask = torch.zeros(b, 1, sq, sk, dtype=dtype)
    mask[..., [2, 11], :] = torch.finfo(dtype).min
    mask[..., :, 4:9] = torch.finfo(dtype).min
    q, k, v, do = make_inputs(b, hq, hkv, sq, sk, 16, 16, dtype, "cpu", seed=4)
    do[:, :, [2, 11]] = 0
    got = run_kernel(q, k, v, False, 0.25, None, do, attn_mask=mask)
    ref, mags = materialised(q, k, v, False, 0.25, None, do, attn_mask=mask)
    rows = torch.ones(sq, dtype=torch.bool)
    rows[[2, 11]] = False
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    compare(
        [got[0][:, :, rows], got[1][..., rows], got[2][:, :, rows], *got[3:]],
        [ref[0][:, :, rows], ref[1][..., rows], ref[2][:, :, rows], *ref[3:]],
        tol,
        tol,
        1e-4 if dtype == torch.float32 else 1e-2,
        mags,
    )
    assert (got[0][:, :, ~rows] == 0).all() and (got[2][:, :, ~rows] == 0).all()
    assert torch.isneginf(got[1][..., ~rows]).all()


@pytest.mark.interpreter
def test_kernel_attn_mask_errors_and_strides():
    q, k, v, _ = make_inputs(2, 4, 2, 5, 6, 16, 16, torch.float32, "cpu", seed=1)
    bad = [
        (torch.ones(2, 1, 6, 6, dtype=torch.bool), ValueError, r"attn_mask must be broadcastable to \[B, Hq, Sq, Sk\]"),
        (torch.ones(3, 6, dtype=torch.bool), ValueError, "attn_mask must be broadcastable"),
        (torch.ones(1, 1, 1, 1, 6, dtype=torch.bool), ValueError, "attn_mask must be broadcastable"),
        (torch.zeros(5, 6, dtype=torch.float16), ValueError, "attn_mask must have dtype torch.bool or the query's"),
        (torch.ones(5, 6, dtype=torch.int32), ValueError, "attn_mask must have dtype"),
        ([[True] * 6] * 5, TypeError, "attn_mask must be a torch.Tensor"),
    ]
    for mask, exc, message in bad:
        with pytest.raises(exc, match=message):
            flash_attention_forward(q, k, v, False, 1.0, None, attn_mask=mask)
        with pytest.raises(exc, match=message):
            flash_attention(q, k, v, False, attn_mask=mask)
    needs_grad = torch.zeros(5, 6, requires_grad=True)
    with pytest.raises(ValueError, match="attn_mask requires grad, but the kernel computes no gradient"):
        flash_attention(q, k, v, False, attn_mask=needs_grad)
    with torch.no_grad():
        flash_attention(q, k, v, False, attn_mask=needs_grad)
    # A key-padding mask is read through stride 0, not expanded.
    mask, strides, flags = kattn._mask_args(torch.ones(2, 1, 1, 6, dtype=torch.bool), q, k)
    assert strides == (6, 0, 0, 1) and mask.dtype == torch.uint8 and flags == dict(HAS_MASK=True, MASK_BOOL=True)


@pytest.fixture
def matmul_precision():
    """Restores torch's float32 matmul precision after the test."""
    before = torch.get_float32_matmul_precision()
    yield torch.set_float32_matmul_precision
    torch.set_float32_matmul_precision(before)


def test_float32_dots_follow_torch_matmul_precision(matmul_precision):
    matmul_precision("highest")
    assert kattn._dot_precision(torch.float32) == "ieee"
    assert kattn._dot_precision(torch.float32, kattn._HIGHEST) == "tf32x3"  # the attention kernels' choice
    for precision in ("high", "medium"):
        matmul_precision(precision)
        assert kattn._dot_precision(torch.float32) == "tf32"
        assert kattn._dot_precision(torch.float32, kattn._HIGHEST) == "tf32"
    matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = True
    assert kattn._dot_precision(torch.float32) == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = False
    assert kattn._dot_precision(torch.float32) == "ieee"
    assert kattn._dot_precision(torch.bfloat16) == "tf32"  # ignored by 16-bit dots


# ---------------------------------------------------------------------------
# GPU
# ---------------------------------------------------------------------------

GPU_CASES = [  # b, hq, hkv, sq, sk, e, dtype, is_causal, window
    (1, 2, 2, 4096, 4096, 128, torch.bfloat16, True, None),
    (1, 2, 2, 4096, 4096, 128, torch.bfloat16, False, None),
    (1, 8, 2, 4096, 4096, 128, torch.bfloat16, True, 512),
    (2, 4, 2, 2048, 2048, 64, torch.bfloat16, True, 256),
    (1, 4, 1, 1000, 1000, 64, torch.float16, False, None),
    (1, 2, 2, 777, 1500, 128, torch.float16, True, None),
    (1, 2, 2, 1024, 1024, 64, torch.float32, True, None),
    (1, 2, 2, 513, 513, 128, torch.float32, False, 100),
    (1, 2, 2, 1024, 1024, 256, torch.bfloat16, True, None),
    (1, 2, 1, 777, 777, 256, torch.float16, False, None),
    (1, 2, 1, 300, 300, 256, torch.float32, True, None),
    (1, 2, 2, 1000, 1000, 96, torch.bfloat16, False, 64),
]


def sdpa_reference(q, k, v, is_causal, scale, window, grad_out):
    """float64 ``scaled_dot_product_attention`` (math backend) and its gradients.
    Every row sees at least one key in GPU_CASES, so no row is fully masked."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = (t.detach().to(F64).requires_grad_() for t in (q, k, v))
    groups = q.shape[1] // k.shape[1]
    kr, vr = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    with sdpa_kernel(SDPBackend.MATH):
        if window is None:
            out = torch.nn.functional.scaled_dot_product_attention(q, kr, vr, is_causal=is_causal, scale=scale)
        else:
            mask = visible_mask(q.shape[2], k.shape[2], is_causal, window, q.device)
            out = torch.nn.functional.scaled_dot_product_attention(q, kr, vr, attn_mask=mask, scale=scale)
    vis = visible_mask(q.shape[2], k.shape[2], is_causal, window, q.device)
    s = (scale * q.detach() @ kr.detach().transpose(-1, -2)).masked_fill(~vis, -math.inf)
    lse = torch.logsumexp(s, -1)
    gq, gk, gv = torch.autograd.grad(out, (q, k, v), grad_out.to(F64))
    return out.detach(), lse, gq, gk, gv


@pytest.mark.parametrize("b,hq,hkv,sq,sk,e,dtype,is_causal,window", GPU_CASES)
@pytest.mark.gpu
def test_kernel_vs_sdpa_gpu(b, hq, hkv, sq, sk, e, dtype, is_causal, window):
    q, k, v, do = make_inputs(b, hq, hkv, sq, sk, e, e, dtype, "cuda", seed=sq + e)
    scale = 1 / math.sqrt(e)
    got = run_kernel(q, k, v, is_causal, scale, window, do)
    ref = sdpa_reference(q, k, v, is_causal, scale, window, do)
    tol_fwd, tol_grad = TOL[dtype]
    errs = compare(got, ref, tol_fwd, tol_grad, 1e-3 if dtype == torch.float32 else 2e-2)
    print(
        f"\nrel errors {dtype} E={e} S={sq}x{sk} causal={is_causal} window={window}: "
        + ", ".join(f"{n} {x:.2e}" for n, x in errs.items())
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.gpu
def test_kernel_masked_rows_and_strides_gpu(dtype):
    """Rows past Sk + window - 1 see no key (zeros, -inf lse, zero gradients);
    query/key/value laid out as [B, S, H, E] and transposed."""
    b, hq, hkv, sq, sk, e, window = 2, 4, 2, 700, 300, 64, 40
    q, k, v, do = make_inputs(b, hq, hkv, sq, sk, e, e, dtype, "cuda", seed=11)
    q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
    got = run_kernel(q, k, v, False, 0.125, window, do)
    ref, _ = materialised(q, k, v, False, 0.125, window, do)
    tol_fwd, tol_grad = TOL[dtype]
    compare(got, ref, tol_fwd, tol_grad, 1e-3 if dtype == torch.float32 else 2e-2)
    masked_rows = ~visible_mask(sq, sk, False, window).any(-1)
    assert masked_rows.sum() == sq - (sk + window - 1)
    assert (got[0][:, :, masked_rows] == 0).all() and (got[2][:, :, masked_rows] == 0).all()


@pytest.mark.gpu
def test_ojas_ref_attention_runs_the_kernel_on_cuda(monkeypatch):
    """``ojas_ref.attention`` with the default impl sends CUDA tensors to this kernel,
    and its result matches SDPA like the kernel's own."""
    calls = []
    monkeypatch.setattr(kattn, "flash_attention", lambda *a, **kw: calls.append(1) or flash_attention(*a, **kw))
    from ojas_ref import attention

    b, hq, hkv, sq, sk, e = 2, 8, 2, 1000, 1000, 128
    q, k, v, do = make_inputs(b, hq, hkv, sq, sk, e, e, torch.bfloat16, "cuda", seed=5)
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = attention(q, k, v, is_causal=True, enable_gqa=True)
    grads = torch.autograd.grad(out, (q, k, v), do)
    assert calls == [1]
    rout, _, rq, rk, rv = sdpa_reference(q, k, v, True, 1 / math.sqrt(e), None, do)
    tol_fwd, tol_grad = TOL[torch.bfloat16]
    assert rel_err(out.detach(), rout, 0.0) <= tol_fwd
    assert max(rel_err(g, r, 0.0) for g, r in zip(grads, (rq, rk, rv))) <= tol_grad


def sdpa_masked_reference(q, k, v, mask, is_causal, scale, grad_out):
    """float64 ``scaled_dot_product_attention`` (math backend) with the bool mask (and
    causal, folded into it) and its gradients, under the kernel's convention for rows
    that see no key: SDPA gives NaN or zeros there (by backend and version), so they are
    made visible and given dO = 0 (they then add nothing to dK, dV and get dQ = 0), and
    their output is set to zeros, their lse to -inf."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = (t.detach().to(F64).requires_grad_() for t in (q, k, v))
    groups = q.shape[1] // k.shape[1]
    kr, vr = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    full = mask & visible_mask(q.shape[2], k.shape[2], is_causal, None, q.device)
    dead = ~full.any(-1, keepdim=True)
    with sdpa_kernel(SDPBackend.MATH):
        out = torch.nn.functional.scaled_dot_product_attention(q, kr, vr, attn_mask=full | dead, scale=scale)
    gq, gk, gv = torch.autograd.grad(out, (q, k, v), grad_out.to(F64).masked_fill(dead, 0.0))
    with torch.no_grad():
        lse = torch.logsumexp((scale * q @ kr.transpose(-1, -2)).masked_fill(~full, -math.inf), -1)
    return out.detach().masked_fill(dead, 0.0), lse, gq, gk, gv


@pytest.mark.parametrize("kind", ["hf_left_padding", "causal_key_padding"])
@pytest.mark.gpu
def test_kernel_with_padding_mask_vs_sdpa_gpu(kind):
    """A left-padded bfloat16 batch at a training size (GQA 16/4 heads, S = 2048, E = 128)
    against SDPA with the same bool mask: Hugging Face's [B, 1, S, S] mask (causal and
    padding, is_causal False), and a [B, 1, 1, S] key-padding mask with is_causal=True
    (the tiles above the diagonal skipped)."""
    b, hq, hkv, s, e, pads = 2, 16, 4, 2048, 128, [0, 300]
    q, k, v, do = make_inputs(b, hq, hkv, s, s, e, e, torch.bfloat16, "cuda", seed=21)
    if kind == "hf_left_padding":
        mask, is_causal = left_padding(b, s, s, pads, "cuda"), False
    else:
        j = torch.arange(s, device="cuda").view(1, 1, 1, s)
        mask, is_causal = j >= torch.tensor(pads, device="cuda").view(b, 1, 1, 1), True
    scale = 1 / math.sqrt(e)
    got = run_kernel(q, k, v, is_causal, scale, None, do, attn_mask=mask)
    ref = sdpa_masked_reference(q, k, v, mask, is_causal, scale, do)
    tol_fwd, tol_grad = TOL[torch.bfloat16]
    errs = compare(got, ref, tol_fwd, tol_grad, 2e-2)
    dead = torch.isneginf(ref[1])
    assert dead.sum() == hq * pads[1]
    assert (got[0][dead] == 0).all() and (got[2][dead] == 0).all()
    print(f"\nrel errors {kind}: " + ", ".join(f"{n} {x:.2e}" for n, x in errs.items()))


@pytest.mark.parametrize("e", [64, 128, 256])
@pytest.mark.gpu
def test_kernel_float32_tf32_gpu(e, matmul_precision):
    """float32 under torch.set_float32_matmul_precision("high"): the dots run TF32 (with
    the untuned TF32 tiles of default_config).  TF32 rounds the operands to 10 mantissa
    bits (u = 2^-11, float16's), float32 inputs as well as P and dS, so the tolerances
    are about float16's doubled (float16 inputs are not rounded): 5e-3 / 1e-2.  The
    error is also above the IEEE tolerance (1e-5): the setting reached the kernel."""
    matmul_precision("high")
    b, hq, hkv, s = 1, 4, 2, 1024
    q, k, v, do = make_inputs(b, hq, hkv, s, s, e, e, torch.float32, "cuda", seed=e)
    got = run_kernel(q, k, v, True, 1 / math.sqrt(e), None, do)
    ref = sdpa_reference(q, k, v, True, 1 / math.sqrt(e), None, do)
    errs = compare(got, ref, 5e-3, 1e-2, 2e-2)
    assert errs["out"] > TOL[torch.float32][0], errs
    print(f"\nrel errors float32 TF32 E={e}: " + ", ".join(f"{n} {x:.2e}" for n, x in errs.items()))


@pytest.mark.gpu
def test_ojas_ref_attention_sends_masks_to_the_kernel_gpu(monkeypatch):
    """With the default impl, CUDA tensors with a bool mask or a float mask that needs no
    gradient run this kernel; a float mask that requires grad runs the reference (which
    computes d(attn_mask)), and both agree."""
    calls = []
    monkeypatch.setattr(
        kattn, "flash_attention", lambda *a, **kw: calls.append(kw["attn_mask"]) or flash_attention(*a, **kw)
    )
    from ojas_ref import attention

    b, hq, hkv, s, e = 2, 8, 2, 500, 64
    q, k, v, do = make_inputs(b, hq, hkv, s, s, e, e, torch.bfloat16, "cuda", seed=9)
    pad = left_padding(b, s, s, [0, 37], "cuda")
    attention(q, k, v, attn_mask=pad, enable_gqa=True)
    additive = torch.zeros(b, 1, 1, s, dtype=torch.bfloat16, device="cuda").masked_fill(~pad[:, :, -1:], -math.inf)
    out_kernel = attention(q, k, v, attn_mask=additive, is_causal=True, enable_gqa=True)
    needs_grad = additive.clone().requires_grad_()
    out_ref = attention(q, k, v, attn_mask=needs_grad, is_causal=True, enable_gqa=True)
    (dmask,) = torch.autograd.grad(out_ref, needs_grad, do)
    assert len(calls) == 2 and calls[0] is pad and calls[1] is additive
    assert rel_err(out_kernel, out_ref.to(F64)) <= TOL[torch.bfloat16][0]
    assert dmask.shape == additive.shape and torch.isfinite(dmask).all()


@pytest.mark.parametrize(
    "device",
    [
        pytest.param("cpu", marks=pytest.mark.interpreter),
        pytest.param("cuda", marks=pytest.mark.gpu),
    ],
)
@pytest.mark.parametrize("masked", [False, True])
def test_seq_major_output_is_the_same_attention(device, masked):
    """``seq_major=True`` writes the output through the strides of a [B, S, H, E] buffer: the
    same values and gradients, bit for bit (the same tiles in the same order), and
    ``out.transpose(1, 2)`` is contiguous."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 4, 37, 16, generator=g).to(device).requires_grad_() for _ in range(3))
    mask = (torch.rand(2, 1, 37, 37, generator=g) > 0.3).to(device) if masked else None
    outs, grads = [], []
    for seq_major in (False, True):
        out = flash_attention(q, k, v, is_causal=not masked, attn_mask=mask, seq_major=seq_major)
        outs.append(out)
        grads.append(torch.autograd.grad(out, (q, k, v), torch.ones_like(out)))
    assert outs[1].transpose(1, 2).is_contiguous() and not outs[0].transpose(1, 2).is_contiguous()
    assert torch.equal(outs[0], outs[1])
    assert all(torch.equal(a, b) for a, b in zip(*grads))
