"""Attention dropout of ``ojas_ref.attention`` (``dropout_p``, issue 34 item 6): the
reference (ojas_ref/functional/_attention_reference.py) and the Triton kernel
(kernels/ojas_kernels/attention.py; in Triton's CPU interpreter when no CUDA device is
present) against a dense float64 computation with the same keep mask.

The mask is a counter-based function (Philox-4x32-10) of a key drawn per call and the
element's index. It is read back from an implementation by running it on q = 0 (every
visible probability equal) and V = the identity (Ev = Sk), where out[b, h, i, j] is nonzero
iff key j is visible to query i and kept: that compares the masks bit for bit. The
statistical tests use fixed seeds (deterministic) with bounds of 5 standard errors.

GPU tests (``-m gpu``, need CUDA): the kernel's mask against the reference's computed on
the GPU, and the kernel against the dense float64 computation at sizes up to 2K.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from ojas_ref.functional import _attention_reference as attention_reference  # noqa: E402
from ojas_ref.functional.attention import attention, attention_forward  # noqa: E402

F64 = torch.float64
pytestmark = pytest.mark.usefixtures("one_thread")


IMPLS = ["reference", pytest.param("triton", marks=pytest.mark.kernel)]
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def keep_mask(seed: int, p: float, shape: tuple[int, int, int, int], device=DEVICE) -> torch.Tensor:
    """The [B, Hq, Sq, Sk] keep mask that a call made right after torch.manual_seed(seed) uses."""
    torch.manual_seed(seed)
    return attention_reference._dropout_keep_mask(attention_reference._dropout_args(p, torch.device(device)), *shape)


def visibility(sq: int, sk: int, is_causal: bool, window, device=DEVICE) -> torch.Tensor:
    i, j = torch.arange(sq, device=device)[:, None], torch.arange(sk, device=device)[None, :]
    vis = torch.ones(sq, sk, dtype=torch.bool, device=device)
    if is_causal:
        vis &= j <= i
    if window is not None:
        vis &= (i - j).abs() < window
    return vis


def dense(q, k, v, keep, p, *, attn_mask=None, is_causal=False, window=None, scale=None):
    """float64 softmax(scale q k^T + masks) * keep / (1 - p) @ v, GQA by repeating key/value
    heads, zeros for a fully masked row; differentiable in q, k, v."""
    q, k, v = (t.to(F64) for t in (q, k, v))
    group = q.shape[-3] // k.shape[-3]
    k, v = k.repeat_interleave(group, -3), v.repeat_interleave(group, -3)
    s = (q @ k.transpose(-1, -2)) * (scale if scale is not None else q.shape[-1] ** -0.5)
    vis = visibility(q.shape[-2], k.shape[-2], is_causal, window, q.device)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        vis = vis & attn_mask
    elif attn_mask is not None:
        s = s + attn_mask.to(F64)
    s = s.masked_fill(~vis, -math.inf)
    alive = ~torch.isneginf(s).all(-1, keepdim=True)
    probs = torch.softmax(s.masked_fill(~alive, 0.0), -1) * alive
    c = 0.0 if p == 1 else 1 / (1 - p)
    return (probs * keep.reshape(probs.shape) * c) @ v


def leaves(*shapes, dtype=F64, seed=0, device=DEVICE):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g, dtype=F64).to(device=device, dtype=dtype).requires_grad_() for s in shapes]


def grads(out, inputs, seed=1):
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=F64).to(out.device, out.dtype)
    return torch.autograd.grad(out, inputs, g)


def read_mask(
    impl: str,
    seed: int,
    p: float,
    b: int,
    hq: int,
    hkv: int,
    sq: int,
    sk: int,
    is_causal=False,
    dtype=torch.float32,
    device=DEVICE,
    config=None,
) -> torch.Tensor:
    """The keep mask an implementation used, on the visible entries: q = 0 and V = I make
    out[b, h, i, j] = Z_ij / (n_i (1 - p)), nonzero iff j is visible and kept."""
    q = torch.zeros(b, hq, sq, 16, dtype=dtype, device=device)
    k = torch.zeros(b, hkv, sk, 16, dtype=dtype, device=device)
    v = torch.eye(sk, dtype=dtype, device=device).expand(b, hkv, sk, sk)
    torch.manual_seed(seed)
    if config is not None:
        from ojas_kernels.attention import flash_attention

        out = flash_attention(q, k, v, is_causal, config=config, dropout_p=p)
    else:
        out = attention(q, k, v, dropout_p=p, is_causal=is_causal, enable_gqa=hq != hkv, impl=impl)
    return out != 0


# --------------------------------------------------------------------------
# The counter-based generator and its mask
# --------------------------------------------------------------------------

# Random123's known-answer vectors for philox4x32 with 10 rounds (kat_vectors):
# counter, key -> output.
PHILOX_KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]


@pytest.mark.parametrize("counter,key,expected", PHILOX_KAT)
def test_philox_known_answers(counter, key, expected):
    as_tensor = lambda xs: [torch.tensor(x, dtype=torch.int64) for x in xs]  # noqa: E731
    got = attention_reference._philox4x32(*as_tensor(counter), *as_tensor(key))
    assert tuple(int(x) for x in got) == expected


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_mask_fraction_is_p(p):
    """The dropped fraction is p within 5 standard errors, overall, in each of the four
    words of a Philox call (j % 4), on even and odd rows and in each head."""
    keep = keep_mask(0, p, (2, 4, 128, 128))
    sigma = math.sqrt(p * (1 - p) / keep.numel())
    assert abs((~keep).double().mean().item() - p) < 5 * sigma
    parts = [keep[..., w::4] for w in range(4)] + [keep[..., r::2, :] for r in range(2)] + list(keep.flatten(0, 1))
    for part in parts:
        assert abs((~part).double().mean().item() - p) < 5 * math.sqrt(p * (1 - p) / part.numel())
    # neighbours (next key, next row, next head) are uncorrelated
    z = keep.double() - (1 - p)
    for a, b in ((z[..., 1:], z[..., :-1]), (z[..., 1:, :], z[..., :-1, :]), (z[:, 1:], z[:, :-1])):
        corr = (a * b).mean().item() / (p * (1 - p))
        assert abs(corr) < 5 / math.sqrt(a.numel())


def test_mask_reproducible_under_manual_seed_and_new_per_call():
    shape = (1, 2, 33, 41)
    assert torch.equal(keep_mask(7, 0.3, shape), keep_mask(7, 0.3, shape))
    torch.manual_seed(7)
    first = attention_reference._dropout_args(0.3, torch.device(DEVICE))
    second = attention_reference._dropout_args(0.3, torch.device(DEVICE))
    a, b = (attention_reference._dropout_keep_mask(d, *shape) for d in (first, second))
    assert not torch.equal(a, b)
    assert abs((a != b).double().mean().item() - 2 * 0.3 * 0.7) < 0.05  # independent masks


@pytest.mark.parametrize("impl", IMPLS)
def test_implementations_use_the_mask(impl):
    """Bit for bit: the mask each implementation applies is _dropout_keep_mask's, with GQA,
    causal, Sk not a multiple of 4 or of the tiles, p = 0.5."""
    b, hq, hkv, sq, sk = 2, 4, 2, 37, 30
    for is_causal in (False, True):
        got = read_mask(impl, 3, 0.5, b, hq, hkv, sq, sk, is_causal)
        expected = keep_mask(3, 0.5, (b, hq, sq, sk)) & visibility(sq, sk, is_causal, None)
        assert torch.equal(got.cpu(), expected.cpu())


@pytest.mark.kernel
def test_kernel_mask_does_not_depend_on_tiles():
    from ojas_kernels.attention import AttentionConfig, KernelConfig as K

    b, h, sq, sk = 1, 2, 40, 36
    reference = keep_mask(5, 0.25, (b, h, sq, sk))
    for cfg in (AttentionConfig(K(16, 16), K(16, 16), K(16, 16)), AttentionConfig(K(32, 32), K(16, 32), K(32, 16))):
        assert torch.equal(read_mask("triton", 5, 0.25, b, h, h, sq, sk, config=cfg).cpu(), reference.cpu())


# --------------------------------------------------------------------------
# The reference against a dense float64 computation
# --------------------------------------------------------------------------

REF_CASES = [  # (query, key, value shapes), kwargs
    (((2, 3, 37, 8), (2, 3, 41, 8), (2, 3, 41, 5)), dict()),
    (((1, 4, 33, 8), (1, 2, 33, 8), (1, 2, 33, 8)), dict(is_causal=True, enable_gqa=True)),
    (((2, 2, 3, 9, 4), (2, 2, 3, 20, 4), (2, 2, 3, 20, 4)), dict(window=3, scale=0.7)),  # leading dims
    (((9, 4), (12, 4), (12, 6)), dict()),  # one head, 2-D
]


@pytest.mark.parametrize("shapes,kwargs", REF_CASES)
@pytest.mark.parametrize("p", [0.2, 0.7])
def test_reference_equals_dense(shapes, kwargs, p):
    q, k, v = leaves(*shapes)
    torch.manual_seed(11)
    out = attention(q, k, v, dropout_p=p, impl="reference", **kwargs)
    flat = lambda t: t.reshape(-1, *(t.shape[-3:] if t.dim() >= 3 else (1, *t.shape)))  # noqa: E731
    bq = flat(q)
    keep = keep_mask(11, p, (bq.shape[0], bq.shape[1], q.shape[-2], k.shape[-2]))
    dense_kwargs = {n: kwargs[n] for n in ("is_causal", "window", "scale") if n in kwargs}
    ref = dense(flat(q), flat(k), flat(v), keep, p, **dense_kwargs).reshape(out.shape)
    assert (out - ref).abs().max().item() < 1e-12
    for got, exp in zip(grads(out, (q, k, v)), grads(ref, (q, k, v))):
        assert (got - exp).abs().max().item() < 1e-12


def test_reference_with_masks_and_a_fully_masked_row():
    q, k, v = leaves((2, 2, 12, 8), (2, 2, 10, 8), (2, 2, 10, 8))
    bool_mask = torch.rand(2, 1, 12, 10, generator=torch.Generator().manual_seed(0)) < 0.6
    bool_mask[1, :, 4] = False  # fully masked row: zeros, zero gradients
    float_mask = torch.randn(12, 10, dtype=F64, generator=torch.Generator().manual_seed(1))
    for mask in (bool_mask, float_mask):
        torch.manual_seed(2)
        out = attention(q, k, v, attn_mask=mask, dropout_p=0.4, impl="reference")
        ref = dense(q, k, v, keep_mask(2, 0.4, (2, 2, 12, 10)), 0.4, attn_mask=mask)
        assert (out - ref).abs().max().item() < 1e-12
        for got, exp in zip(grads(out, (q, k, v)), grads(ref, (q, k, v))):
            assert (got - exp).abs().max().item() < 1e-12
        if mask is bool_mask:
            assert torch.all(out.detach()[1, :, 4] == 0)


def test_gradcheck_with_a_fixed_mask():
    q, k, v = leaves((1, 2, 5, 3), (1, 1, 7, 3), (1, 1, 7, 2))

    def f(q, k, v):
        torch.manual_seed(4)  # the same mask at every evaluation
        return attention(q, k, v, dropout_p=0.3, is_causal=True, enable_gqa=True, impl="reference")

    with torch.random.fork_rng():
        assert torch.autograd.gradcheck(f, (q, k, v))


@pytest.mark.parametrize("impl", IMPLS)
def test_unbiased(impl):
    """The mean of many dropped outputs is the output without dropout, within 5 standard
    errors (Var(out_i) = p / (1 - p) sum_j P_ij^2 v_j^2 per coordinate)."""
    dtype = F64 if impl == "reference" else torch.float32
    q, k, v = (t.detach() for t in leaves((1, 2, 6, 4), (1, 2, 9, 4), (1, 2, 9, 3), dtype=dtype))
    p, n = 0.4, 300 if impl == "reference" else 40
    torch.manual_seed(0)
    mean = sum(attention(q, k, v, dropout_p=p, impl=impl).to(F64) for _ in range(n)) / n
    probs = torch.softmax(q.to(F64) @ k.to(F64).transpose(-1, -2) / 2, -1)
    exact = probs @ v.to(F64)
    std_err = ((probs**2 @ v.to(F64) ** 2) * p / (1 - p) / n).sqrt()
    assert torch.all((mean - exact).abs() < 5 * std_err)
    assert (mean - exact).abs().max() > 0  # it did drop


# --------------------------------------------------------------------------
# The kernel against the reference (same seed, same mask)
# --------------------------------------------------------------------------

KERNEL_CASES = [  # b, hq, hkv, sq, sk, e, is_causal, window, mask
    (2, 4, 2, 37, 29, 16, False, None, None),
    (1, 2, 2, 40, 40, 16, True, None, "bool"),
    (1, 2, 1, 21, 34, 8, False, 5, "float"),
]


@pytest.mark.kernel
@pytest.mark.parametrize("b,hq,hkv,sq,sk,e,is_causal,window,mask", KERNEL_CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernel_equals_reference(b, hq, hkv, sq, sk, e, is_causal, window, mask, dtype):
    q, k, v = leaves((b, hq, sq, e), (b, hkv, sk, e), (b, hkv, sk, e), dtype=dtype)
    attn_mask = None
    if mask == "bool":
        attn_mask = torch.rand(b, 1, sq, sk, generator=torch.Generator().manual_seed(3)) < 0.7
    elif mask == "float":
        attn_mask = torch.randn(sq, sk, generator=torch.Generator().manual_seed(3), dtype=F64).to(dtype)
    kw = dict(attn_mask=attn_mask, dropout_p=0.3, is_causal=is_causal, enable_gqa=hq != hkv, window=window)
    torch.manual_seed(9)
    out = attention(q, k, v, impl="triton", **kw)
    q64, k64, v64 = (t.detach().to(F64).requires_grad_() for t in (q, k, v))
    torch.manual_seed(9)
    ref = attention(
        q64,
        k64,
        v64,
        impl="reference",
        **dict(kw, attn_mask=None if attn_mask is None else attn_mask.to(F64) if mask == "float" else attn_mask),
    )
    tol_fwd, tol_grad = (1e-5, 1e-5) if dtype == torch.float32 else (1e-2, 2e-2)
    rel = lambda x, y: ((x.to(F64) - y).norm() / y.norm()).item()  # noqa: E731
    assert rel(out.detach(), ref.detach()) < tol_fwd
    for got, exp in zip(grads(out, (q, k, v)), grads(ref, (q64, k64, v64))):
        assert rel(got, exp) < tol_grad


@pytest.mark.kernel
def test_kernel_forward_lse_is_that_of_all_probabilities():
    from ojas_kernels.attention import flash_attention_forward

    q, k, v = (t.detach() for t in leaves((1, 2, 20, 16), (1, 2, 24, 16), (1, 2, 24, 16), dtype=torch.float32))
    out0, lse0 = flash_attention_forward(q, k, v, False, 0.25, None)
    out, lse = flash_attention_forward(q, k, v, False, 0.25, None, dropout_p=0.5)
    assert torch.equal(lse, lse0) and not torch.equal(out, out0)


# --------------------------------------------------------------------------
# Edges: p = 0, p = 1, bad arguments, checkpointing
# --------------------------------------------------------------------------


@pytest.mark.parametrize("impl", IMPLS)
def test_zero_p_is_no_dropout_and_draws_nothing(impl):
    dtype = F64 if impl == "reference" else torch.float32
    q, k, v = leaves((1, 2, 9, 8), (1, 2, 11, 8), (1, 2, 11, 8), dtype=dtype)
    torch.manual_seed(0)
    before = torch.get_rng_state()
    a = attention(q, k, v, dropout_p=0.0, impl=impl)
    assert torch.equal(torch.get_rng_state(), before)
    assert torch.equal(a, attention(q, k, v, impl=impl))


@pytest.mark.parametrize("impl", IMPLS)
def test_p_one_gives_zeros_as_sdpa(impl):
    dtype = F64 if impl == "reference" else torch.float32
    q, k, v = leaves((1, 2, 9, 8), (1, 2, 11, 8), (1, 2, 11, 8), dtype=dtype)
    out = attention(q, k, v, dropout_p=1.0, impl=impl)
    sdpa = F.scaled_dot_product_attention(q, k, v, dropout_p=1.0)
    assert torch.equal(out, torch.zeros_like(out)) and torch.equal(sdpa, torch.zeros_like(sdpa))
    assert all(torch.equal(g, torch.zeros_like(g)) for g in grads(out, (q, k, v)))


@pytest.mark.parametrize("p", [1.5, -0.1, math.nan, np.float64(2.0)])
def test_p_outside_unit_interval_raises(p):
    q = torch.randn(1, 1, 3, 4)
    with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\]"):
        attention(q, q, q, dropout_p=p)


@pytest.mark.kernel
def test_kernel_argument_checks():
    from ojas_kernels.attention import flash_attention

    q = torch.randn(1, 1, 3, 16, device=DEVICE)
    with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\], got 1.5"):
        flash_attention(q, q, q, False, dropout_p=1.5)
    with pytest.raises(TypeError, match="dropout_p must be a float, got bool"):
        flash_attention(q, q, q, False, dropout_p=True)
    with pytest.raises(ValueError, match=r"dropout_seed must be an int64 tensor of shape \[2\].*got torch.int32"):
        flash_attention(q, q, q, False, dropout_p=0.1, dropout_seed=torch.zeros(2, dtype=torch.int32, device=DEVICE))
    seed = torch.tensor([1, 2], device=DEVICE)
    a = flash_attention(q, q, q, False, dropout_p=0.5, dropout_seed=seed)
    assert torch.equal(a, flash_attention(q, q, q, False, dropout_p=0.5, dropout_seed=seed.clone()))


def test_checkpoint_recomputes_the_same_mask():
    q, k, v = leaves((1, 2, 10, 4), (1, 2, 10, 4), (1, 2, 10, 4))
    f = lambda q, k, v: attention(q, k, v, dropout_p=0.5, impl="reference")  # noqa: E731
    torch.manual_seed(3)
    plain = f(q, k, v)
    torch.manual_seed(3)
    recomputed = checkpoint(f, q, k, v, use_reentrant=False)
    assert torch.equal(plain, recomputed)
    for a, b in zip(grads(plain, (q, k, v)), grads(recomputed, (q, k, v))):
        assert torch.equal(a, b)


def test_attention_forward_drops_as_attention():
    q, k, v = leaves((1, 2, 10, 4), (1, 2, 12, 4), (1, 2, 12, 4))
    torch.manual_seed(6)
    out, lse = attention_forward(q, k, v, dropout_p=0.5)
    torch.manual_seed(6)
    assert torch.equal(out, attention(q, k, v, dropout_p=0.5, impl="reference").detach())
    assert torch.equal(lse, attention_forward(q, k, v)[1])


# --------------------------------------------------------------------------
# The tests catch a wrong dropout (mutants of the reference)
# --------------------------------------------------------------------------


def _renormalised(m, l, acc, scores, value, keep=None):
    """Dropout before the softmax: the normaliser sums the kept probabilities only."""
    if keep is not None:
        scores = scores.masked_fill(~keep, -math.inf)
    return _block_step(m, l, acc, scores, value)


def _backward_without_mask(*args):
    """The backward pass forgets the mask (its 12th argument): the gradient of attention
    without dropout."""
    return _backward(*args[:11])


_block_step = attention_reference._online_softmax_block_step
_backward = attention_reference._reference_backward


@pytest.mark.parametrize(
    "name,mutant", [("_online_softmax_block_step", _renormalised), ("_reference_backward", _backward_without_mask)]
)
def test_mutants_are_caught(name, mutant, monkeypatch):
    monkeypatch.setattr(attention_reference, name, mutant)
    with pytest.raises(AssertionError):
        test_reference_equals_dense(*REF_CASES[0], 0.2)


# --------------------------------------------------------------------------
# GPU
# --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.gpu
def test_kernel_mask_matches_reference_gpu(dtype, is_causal):
    """Bit for bit, compiled: the kernel's mask is the reference's (computed by torch on
    the GPU), Sk = 256 (the kernel's largest head dim, V = I), Sq = 300 (partial tiles)."""
    b, hq, hkv, sq, sk = 2, 4, 2, 300, 256
    got = read_mask("triton", 8, 0.2, b, hq, hkv, sq, sk, is_causal, dtype=dtype, device="cuda")
    expected = keep_mask(8, 0.2, (b, hq, sq, sk), device="cuda") & visibility(sq, sk, is_causal, None, "cuda")
    assert torch.equal(got, expected)


GPU_CASES = [  # b, hq, hkv, s, e, dtype, is_causal
    (2, 8, 8, 1024, 64, torch.float16, False),
    (2, 8, 2, 1024, 128, torch.bfloat16, True),
    (1, 4, 4, 2048, 128, torch.float16, True),
    (1, 4, 4, 777, 64, torch.bfloat16, False),
]


@pytest.mark.parametrize("b,hq,hkv,s,e,dtype,is_causal", GPU_CASES)
@pytest.mark.gpu
def test_kernel_vs_dense_gpu(b, hq, hkv, s, e, dtype, is_causal):
    q, k, v = leaves((b, hq, s, e), (b, hkv, s, e), (b, hkv, s, e), dtype=dtype, device="cuda")
    torch.manual_seed(12)
    out = attention(q, k, v, dropout_p=0.1, is_causal=is_causal, enable_gqa=hq != hkv, impl="triton")
    q64, k64, v64 = (t.detach().to(F64).requires_grad_() for t in (q, k, v))
    ref = dense(q64, k64, v64, keep_mask(12, 0.1, (b, hq, s, s), device="cuda"), 0.1, is_causal=is_causal)
    tol_fwd, tol_grad = (2e-3, 5e-3) if dtype == torch.float16 else (1e-2, 2e-2)
    rel = lambda x, y: ((x.to(F64) - y).norm() / y.norm()).item()  # noqa: E731
    assert rel(out.detach(), ref.detach()) < tol_fwd
    for got, exp in zip(grads(out, (q, k, v)), grads(ref, (q64, k64, v64))):
        assert rel(got, exp) < tol_grad
