"""RoPE (ojas_ref.functional.rope, ojas_kernels.rope) against transformers' Llama ``apply_rotary_pos_emb``.

* Every comparison is ``torch.equal`` (value-equal; -0.0 == 0.0, the only difference autograd's
  zero padding allows), forward and both gradients by torch's autograd of transformers' own
  function, float32/bfloat16/float16: GQA, odd S, E in (8, 64, 128), Hugging Face's transposed
  views of ``q_proj(x)``, cos/sin of batch 1 broadcast over B = 2, huge and tiny magnitudes,
  S = 1 and S = 0, an output unused by the loss, cos requiring grad (the reference runs).
* The Triton kernel in Triton's interpreter (CPU; this module sets TRITON_INTERPRET=1 before
  importing ojas_kernels when there is no CUDA device), where the float32 -> bfloat16 rounding
  is the integer one of kernels/ojas_kernels/rounding.py.
* GPU tests (``-m gpu``): the same comparisons against torch's CUDA kernels.
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from ojas_ref.functional import dispatch  # noqa: E402
from ojas_ref.functional import rope as prope  # noqa: E402
from ojas_ref.functional.dispatch import use_impl  # noqa: E402
from ojas_ref.functional.rope import (  # noqa: E402
    BACKWARD_THEOREM,
    IMPL_ENV,
    apply_rotary_pos_emb,
    fused_rope,
    rope_reference,
)

hf_llama = pytest.importorskip("transformers.models.llama.modeling_llama")
triton = pytest.importorskip("triton")
from ojas_kernels import rope as krope  # noqa: E402

KERNEL = pytest.param("triton", marks=pytest.mark.interpreter)

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
BIG = {torch.float32: 1e30, torch.bfloat16: 3.0e38, torch.float16: 6.0e4}
TINY = {torch.float32: 1e-41, torch.bfloat16: 1e-39, torch.float16: 1e-7}


def hf_apply(q, k, cos, sin, unsqueeze_dim=1):
    return hf_llama.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim)


def rope_tables(
    B: int, S: int, E: int, dtype: torch.dtype, kind: str = "hf", seed: int = 0, device: str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin ``[B, S, E]``: Hugging Face's (float32, then cast) or random in [-1, 1] (halves differ)."""
    if kind == "hf":
        inv_freq = 1.0 / (10000 ** (torch.arange(0, E, 2, dtype=torch.float32) / E))
        pos = torch.arange(S, dtype=torch.float32)[None].expand(B, S) + 3 * torch.arange(B)[:, None]
        freqs = pos[..., None] * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
    else:
        g = torch.Generator().manual_seed(seed + 1)
        cos, sin = torch.rand(2, B, S, E, generator=g, dtype=torch.float64) * 2 - 1
    return cos.to(dtype).to(device), sin.to(dtype).to(device)


def draw(shape, dtype: torch.dtype, g: torch.Generator, scale: float = 1.0, device: str = "cpu") -> torch.Tensor:
    """Normal; with a scale, ``scale * tanh(normal)`` (finite: within the dtype's range when scale is)."""
    x = torch.randn(shape, generator=g, dtype=torch.float64)
    return (x if scale == 1.0 else scale * torch.tanh(x)).to(dtype).to(device)


def hf_qk(
    B: int,
    Hq: int,
    Hkv: int,
    S: int,
    E: int,
    dtype: torch.dtype,
    seed: int = 0,
    scale: float = 1.0,
    device: str = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Leaves ``[B, S, H * E]`` (the projections' outputs), as Hugging Face makes them."""
    g = torch.Generator().manual_seed(seed)
    return draw((B, S, Hq * E), dtype, g, scale, device), draw((B, S, Hkv * E), dtype, g, scale, device)


def views(xq: torch.Tensor, xk: torch.Tensor, Hq: int, Hkv: int, E: int) -> tuple[torch.Tensor, torch.Tensor]:
    B, S = xq.shape[:2]
    return xq.view(B, S, Hq, E).transpose(1, 2), xk.view(B, S, Hkv, E).transpose(1, 2)


def run(fn, xq, xk, cos, sin, Hq, Hkv, E, gq, gk):
    """``fn`` on Hugging Face's views of fresh leaves; returns outputs and the leaves' gradients
    (``gq``/``gk`` None: that output left out of the loss)."""
    xq, xk = xq.detach().requires_grad_(), xk.detach().requires_grad_()
    q, k = views(xq, xk, Hq, Hkv, E)
    q_out, k_out = fn(q, k, cos, sin)
    outs = [o for o, g in ((q_out, gq), (k_out, gk)) if g is not None]
    grads = [g for g in (gq, gk) if g is not None]
    torch.autograd.backward(outs, grads)
    return q_out.detach(), k_out.detach(), xq.grad, xk.grad


def assert_equal(x, ref) -> None:
    if ref is None:
        assert x is None
        return
    assert x.dtype == ref.dtype and x.shape == ref.shape
    assert not ref.isnan().any()
    differ = x != ref
    assert torch.equal(x, ref), f"{int(differ.sum())} of {x.numel()} differ, e.g. {x[differ][:4]} vs {ref[differ][:4]}"


def check_parity(
    impl: str,
    dtype: torch.dtype,
    B=2,
    Hq=4,
    Hkv=2,
    S=37,
    E=64,
    cos_batch=1,
    kind="hf",
    scale=1.0,
    seed=0,
    use_q=True,
    use_k=True,
    device="cpu",
) -> None:
    xq, xk = hf_qk(B, Hq, Hkv, S, E, dtype, seed, scale, device)
    cos, sin = rope_tables(cos_batch, S, E, dtype, kind, seed, device)
    g = torch.Generator().manual_seed(seed + 2)
    gq = draw((B, Hq, S, E), dtype, g, scale, device) if use_q else None
    gk = draw((B, Hkv, S, E), dtype, g, scale, device) if use_k else None
    want = run(hf_apply, xq, xk, cos, sin, Hq, Hkv, E, gq, gk)
    got = run(lambda *a: apply_rotary_pos_emb(*a, impl=impl), xq, xk, cos, sin, Hq, Hkv, E, gq, gk)
    for x, ref in zip(got, want):
        assert_equal(x, ref)


# ---------------------------------------------------------------------------
# Parity with transformers, reference and kernel
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("impl", ["reference", KERNEL])
@pytest.mark.parametrize("E", [8, 64, 128])
@pytest.mark.parametrize("dtype", DTYPES)
def test_parity_gqa_odd_length(impl, dtype, E):
    """GQA (Hq=4, Hkv=2), S=37, transposed views, cos/sin of batch 1 over B=2, Hugging Face's tables."""
    check_parity(impl, dtype, E=E)


@pytest.mark.parametrize("impl", ["reference", KERNEL])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cos_batch", [1, 2])
def test_parity_random_tables(impl, dtype, cos_batch):
    """cos/sin random in [-1, 1] (their halves differ), per-batch or broadcast; E=96 (not a power of 2)."""
    check_parity(impl, dtype, E=96, cos_batch=cos_batch, kind="random", seed=5)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.parametrize("impl", ["reference", KERNEL])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("magnitude", ["big", "tiny"])
def test_parity_extreme_magnitudes(impl, dtype, magnitude):
    """1e30 in float32, near the largest bfloat16/float16 (sums overflow to inf, as torch's do);
    subnormal products."""
    scale = (BIG if magnitude == "big" else TINY)[dtype]
    check_parity(impl, dtype, S=9, E=64, kind="random", scale=scale, seed=7)


@pytest.mark.parametrize("impl", ["reference", KERNEL])
@pytest.mark.parametrize("S", [1, 0])
def test_parity_length_one_and_empty(impl, S):
    check_parity(impl, torch.bfloat16, S=S, E=8)


@pytest.mark.parametrize("impl", ["reference", KERNEL])
@pytest.mark.parametrize("used", ["q", "k"])
def test_one_output_unused(impl, used):
    """The other output out of the loss: its input gets no gradient (None), as in transformers."""
    check_parity(impl, torch.float32, E=8, use_q=used == "q", use_k=used == "k")


@pytest.mark.parametrize("impl", ["reference", KERNEL])
def test_unsqueeze_dim_2(impl):
    """q/k ``[B, S, H, E]`` (Hugging Face's view before the transpose) with unsqueeze_dim=2."""
    B, Hq, Hkv, S, E = 2, 4, 2, 11, 16
    xq, xk = hf_qk(B, Hq, Hkv, S, E, torch.bfloat16, seed=3)
    cos, sin = rope_tables(1, S, E, torch.bfloat16, "random", 3)
    q, k = xq.view(B, S, Hq, E).requires_grad_(), xk.view(B, S, Hkv, E).requires_grad_()
    w = [torch.randn(t.shape, dtype=torch.bfloat16) for t in (q, k)]
    results = []
    for fn in (hf_apply, lambda *a: apply_rotary_pos_emb(*a, impl=impl)):
        q.grad = k.grad = None
        outs = fn(q, k, cos, sin, 2)
        torch.autograd.backward(outs, w)
        results.append((*(o.detach() for o in outs), q.grad, k.grad))
    for x, ref in zip(*results):
        assert_equal(x, ref)


@pytest.mark.parametrize("impl", ["reference", KERNEL])
def test_sum_loss_expanded_gradient(impl):
    """``out.sum()`` sends expanded gradients (every stride 0): copied, same values."""
    B, Hq, Hkv, S, E = 2, 4, 2, 5, 8
    xq, xk = hf_qk(B, Hq, Hkv, S, E, torch.float16, seed=4)
    cos, sin = rope_tables(1, S, E, torch.float16, "random", 4)
    results = []
    for fn in (hf_apply, lambda *a: apply_rotary_pos_emb(*a, impl=impl)):
        lq, lk = xq.detach().requires_grad_(), xk.detach().requires_grad_()
        q_out, k_out = fn(*views(lq, lk, Hq, Hkv, E), cos, sin)
        (q_out.sum() + k_out.sum()).backward()
        results.append((lq.grad, lk.grad))
    for x, ref in zip(*results):
        assert_equal(x, ref)


@pytest.mark.parametrize("impl", ["reference", KERNEL])
def test_cos_requiring_grad_runs_reference(impl, monkeypatch):
    calls = []
    monkeypatch.setattr(krope, "rope_forward", lambda *a: calls.append(1))
    B, Hq, Hkv, S, E = 1, 2, 1, 6, 8
    xq, xk = hf_qk(B, Hq, Hkv, S, E, torch.float32, seed=6)
    cos, sin = rope_tables(1, S, E, torch.float32, "random", 6)
    results = []
    for fn in (hf_apply, lambda *a: apply_rotary_pos_emb(*a, impl=impl)):
        c, s = cos.clone().requires_grad_(), sin.clone()
        lq, lk = xq.detach().requires_grad_(), xk.detach().requires_grad_()
        q_out, k_out = fn(*views(lq, lk, Hq, Hkv, E), c, s)
        (q_out * 1.5 + k_out.sum()).sum().backward()
        results.append((q_out.detach(), k_out.detach(), lq.grad, lk.grad, c.grad))
    assert calls == []
    for x, ref in zip(*results):
        assert_equal(x, ref)


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_rope(dtype):
    B, Hq, Hkv, S, E = 2, 4, 2, 7, 64
    xq, xk = hf_qk(B, Hq, Hkv, S, E, dtype, seed=8)
    cos, sin = rope_tables(1, S, E, dtype, "hf")
    gq, gk = torch.randn(B, Hq, S, E).to(dtype), torch.randn(B, Hkv, S, E).to(dtype)
    for x, ref in zip(
        run(fused_rope, xq, xk, cos, sin, Hq, Hkv, E, gq, gk), run(hf_apply, xq, xk, cos, sin, Hq, Hkv, E, gq, gk)
    ):
        assert_equal(x, ref)


@pytest.mark.interpreter
def test_kernel_functions_direct():
    """rope_forward / rope_backward: contiguous and transposed inputs, a None gradient, layouts kept."""
    B, Hq, Hkv, S, E = 2, 3, 1, 5, 16
    q = torch.randn(B, S, Hq, E, dtype=torch.bfloat16).transpose(1, 2)
    k = torch.randn(B, Hkv, S, E, dtype=torch.bfloat16)
    cos, sin = rope_tables(1, S, E, torch.bfloat16, "random")
    q_out, k_out = krope.rope_forward(q, k, cos, sin)
    want_q, want_k = rope_reference(q, k, cos, sin)
    assert_equal(q_out, want_q)
    assert_equal(k_out, want_k)
    assert q_out.stride() == q.stride() and k_out.is_contiguous()
    assert krope.rope_backward(None, None, cos, sin) == (None, None)
    dq, dk = krope.rope_backward(None, k_out, cos, sin)
    assert dq is None and dk.shape == k.shape
    q_last = torch.randn(B, Hq, S, 2 * E, dtype=torch.bfloat16)[..., ::2]  # last stride 2: copied
    assert_equal(krope.rope_forward(q_last, k, cos, sin)[0], rope_reference(q_last, k, cos, sin)[0])


@pytest.mark.interpreter
def test_one_launch_each_way_without_fp_fusion(monkeypatch):
    """One launch for q and k each way, with enable_fp_fusion=False and every constexpr explicit."""
    launches = []
    real_fast = krope.fast

    def spy(kernel):
        launcher = real_fast(kernel)

        class Spy:
            def __getitem__(self, grid):
                def call(*args, **kwargs):
                    launches.append((grid, kwargs))
                    return launcher[grid](*args, **kwargs)

                return call

        return Spy()

    monkeypatch.setattr(krope, "fast", spy)
    check_parity("triton", torch.float32, S=3, E=8)
    assert len(launches) == 2
    assert [kw["BACKWARD"] for _, kw in launches] == [False, True]
    for grid, kw in launches:
        assert grid == (2 * 3,)
        assert kw["enable_fp_fusion"] is False
        assert {"HALF", "BLOCK_E", "BLOCK_HQ", "BLOCK_HK", "BACKWARD"} <= set(kw)


# ---------------------------------------------------------------------------
# Autograd: what is saved, double backward, transforms, impl selection
# ---------------------------------------------------------------------------


@pytest.mark.interpreter
def test_saves_only_cos_and_sin():
    saved = []

    def pack(t):
        saved.append(t)
        return t

    xq, xk = hf_qk(1, 2, 1, 4, 8, torch.float32)
    cos, sin = rope_tables(1, 4, 8, torch.float32)
    q, k = views(xq.requires_grad_(), xk.requires_grad_(), 2, 1, 8)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        apply_rotary_pos_emb(q, k, cos, sin, impl="triton")
    assert {t.data_ptr() for t in saved} == {cos.data_ptr(), sin.data_ptr()} and len(saved) == 2


@pytest.mark.interpreter
def test_double_backward_refused():
    xq, xk = hf_qk(1, 2, 1, 4, 8, torch.float32)
    cos, sin = rope_tables(1, 4, 8, torch.float32)
    xq.requires_grad_()
    q, k = views(xq, xk, 2, 1, 8)
    q_out, _ = apply_rotary_pos_emb(q, k, cos, sin, impl="triton")
    with pytest.raises(RuntimeError, match="does not support double backward"):
        torch.autograd.grad(q_out.square().sum(), xq, create_graph=True)


def test_reference_double_backward_works():
    xq, xk = hf_qk(1, 2, 1, 4, 8, torch.float64)
    cos, sin = rope_tables(1, 4, 8, torch.float64)
    xq.requires_grad_()
    q, k = views(xq, xk, 2, 1, 8)
    q_out, _ = apply_rotary_pos_emb(q, k, cos, sin, impl="reference")
    (g,) = torch.autograd.grad(q_out.square().sum(), xq, create_graph=True)
    g.sum().backward()


@pytest.mark.interpreter
def test_function_transforms_refused_by_kernel():
    q, k = torch.ones(1, 2, 3, 4), torch.ones(1, 1, 3, 4)
    cos, sin = torch.ones(1, 3, 4), torch.zeros(1, 3, 4)
    with pytest.raises(NotImplementedError, match="torch.func"):
        torch.func.grad(lambda x: apply_rotary_pos_emb(x, k, cos, sin, impl="triton")[0].sum())(q)
    # "auto" on CPU runs the reference, which torch.func differentiates
    torch.func.grad(lambda x: apply_rotary_pos_emb(x, k, cos, sin, impl="auto")[0].sum())(q)


@pytest.mark.interpreter
def test_impl_selects_the_kernel(monkeypatch):
    calls = []
    for name in ("rope_forward", "rope_backward"):
        fn = getattr(krope, name)
        monkeypatch.setattr(krope, name, lambda *a, _fn=fn, _name=name: calls.append(_name) or _fn(*a))
    check_parity("reference", torch.float32, S=3, E=8)
    check_parity("auto", torch.float32, S=3, E=8)  # CPU tensors: auto is the reference
    assert calls == []
    check_parity("triton", torch.float32, S=3, E=8)
    assert calls == ["rope_forward", "rope_backward"]
    calls.clear()
    with use_impl(rope="triton"):
        check_parity(None, torch.float32, S=3, E=8)
    assert calls == ["rope_forward", "rope_backward"]


def test_constants():
    assert IMPL_ENV == "OJAS_ROPE_IMPL"
    assert BACKWARD_THEOREM == "Ojas.RoPE.Backward.rope_backward_eq_vjp"
    assert BACKWARD_THEOREM in krope.__doc__ and BACKWARD_THEOREM in prope.__doc__


@pytest.mark.parametrize("old, new", [("fused_rotary", fused_rope), ("rotary_reference", rope_reference)])
def test_old_names_warn_and_give_the_new_functions(old, new):
    """Release 0.1's names are deprecated aliases for one release: they warn and are the renamed functions."""
    with pytest.warns(
        DeprecationWarning, match=rf"ojas_ref\.functional\.rope\.{old} is deprecated.*use .*\.{new.__name__}"
    ):
        assert getattr(prope, old) is new
    with pytest.warns(DeprecationWarning, match=old):
        exec(f"from ojas_ref.functional.rope import {old}", {})
    with pytest.raises(AttributeError, match="has no attribute 'rotary'"):
        prope.rotary


def test_reference_is_transformers():
    q, k = torch.randn(2, 4, 5, 8), torch.randn(2, 2, 5, 8)
    cos, sin = rope_tables(1, 5, 8, torch.float32, "random")
    for x, ref in zip(rope_reference(q, k, cos, sin), hf_apply(q, k, cos, sin)):
        assert_equal(x, ref)


# ---------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------

_Q, _K, _C = torch.ones(2, 4, 5, 8), torch.ones(2, 2, 5, 8), torch.ones(1, 5, 8)


@pytest.mark.parametrize(
    "args, error, match",
    [
        (
            (torch.ones(2, 4, 5, 7), torch.ones(2, 2, 5, 7), torch.ones(1, 5, 7), torch.ones(1, 5, 7)),
            ValueError,
            "q's head size .* must be even, got 7",
        ),
        ((_Q, _K.double(), _C, _C), TypeError, "k has dtype torch.float64 but q has dtype torch.float32"),
        ((_Q, _K, _C.bfloat16(), _C), TypeError, "cos has dtype torch.bfloat16"),
        ((_Q, _K, _C, _C.half()), TypeError, "sin has dtype torch.float16"),
        ((_Q, _K, _C, torch.ones(1, 5, 8, device="meta")), ValueError, "sin is on meta"),
        ((_Q, _K, _C, torch.ones(2, 5, 8)), ValueError, r"sin \(2, 5, 8\) must have cos's shape"),
        ((_Q, torch.ones(2, 2, 5, 6), _C, _C), ValueError, "k's last dimension"),
        ((_Q, torch.ones(3, 2, 5, 8), _C, _C), ValueError, "k's batch"),
        ((_Q, torch.ones(2, 2, 6, 8), _C, _C), ValueError, "k's positions"),
        ((_Q, _K, torch.ones(1, 6, 8), torch.ones(1, 6, 8)), ValueError, "cos .* must have q's 5 positions"),
        ((_Q, _K, torch.ones(3, 5, 8), torch.ones(3, 5, 8)), ValueError, "cos's batch"),
        (([1.0], _K, _C, _C), TypeError, "q must be a torch.Tensor"),
        ((_Q.long(), _K, _C, _C), TypeError, "q has dtype torch.int64"),
    ],
)
@pytest.mark.parametrize("impl", ["reference", KERNEL])
def test_bad_input(args, error, match, impl):
    with pytest.raises(error, match=match):
        apply_rotary_pos_emb(*args, impl=impl)


def test_bad_impl(monkeypatch):
    with pytest.raises(ValueError, match="impl must be one of"):
        apply_rotary_pos_emb(_Q, _K, _C, _C, impl="fast")
    with pytest.raises(ValueError, match=IMPL_ENV):  # the environment, read at import
        dispatch._settings_from({IMPL_ENV: "fast"})
    with pytest.raises(TypeError, match="impl='reference' for float64"):
        apply_rotary_pos_emb(_Q.double(), _K.double(), _C.double(), _C.double(), impl="triton")
    with pytest.raises(ValueError, match="impl='triton' needs 4-D q and k"):
        apply_rotary_pos_emb(_Q[0], _K[0], _C, _C, impl="triton")
    with pytest.raises(ValueError, match="unsqueeze_dim=0"):
        apply_rotary_pos_emb(_Q, _K, _C, _C, 0, impl="triton")
    monkeypatch.setattr(dispatch, "_interpret", False)
    with pytest.raises(RuntimeError, match="needs CUDA tensors"):
        apply_rotary_pos_emb(_Q, _K, _C, _C, impl="triton")


def test_kernel_refuses_bad_input():
    with pytest.raises(TypeError, match="float16, bfloat16, float32"):
        krope.rope_forward(_Q.double(), _K.double(), _C.double(), _C.double())
    with pytest.raises(TypeError, match="cos"):
        krope.rope_forward(_Q, _K, _C.half(), _C)
    with pytest.raises(ValueError, match="must be even"):
        krope.rope_forward(_Q[..., :7], _K[..., :7], _C[..., :7], _C[..., :7])
    with pytest.raises(ValueError, match="cos"):
        krope.rope_forward(_Q, _K, torch.ones(1, 4, 8), torch.ones(1, 4, 8))


# ---------------------------------------------------------------------------
# GPU (-m gpu)
# ---------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("E", [64, 128])
def test_parity_gpu(dtype, E):
    check_parity("triton", dtype, B=2, Hq=32, Hkv=8, S=1023, E=E, device="cuda")
    check_parity("auto", dtype, B=2, Hq=4, Hkv=2, S=37, E=E, kind="random", device="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_extreme_magnitudes_gpu(dtype):
    check_parity("triton", dtype, S=65, E=128, kind="random", scale=BIG[dtype], device="cuda")
    check_parity("triton", dtype, S=65, E=128, kind="random", scale=TINY[dtype], device="cuda")
