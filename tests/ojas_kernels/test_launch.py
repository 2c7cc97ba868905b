"""kernels/ojas_kernels/launch.py: FastLaunch launches what ``kernel[grid]`` launches.

On the CPU (Triton's interpreter) FastLaunch takes Triton's own path; the specialization
key is checked here for what it must tell apart.  On CUDA the cached launch is compared
with Triton's on inputs that change every key component (alignment, int classes, dtypes,
constexprs, floats)."""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from ojas_kernels import launch  # noqa: E402
from ojas_kernels.launch import FastLaunch, fast  # noqa: E402


@triton.jit
def _axpy_kernel(X, Y, OUT, n, alpha, stride, BLOCK: tl.constexpr, SQUARE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    x = tl.load(X + offs * stride, mask=ok).to(tl.float32)
    if SQUARE:
        x = x * x
    y = tl.load(Y + offs, mask=ok).to(tl.float32)
    tl.store(OUT + offs, (alpha * x + y).to(OUT.dtype.element_ty), mask=ok)


def _device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def test_spec_tells_apart_what_triton_specializes_on():
    t = torch.zeros(8)
    assert launch._spec(t) != launch._spec(t[1:])  # 16-byte alignment of the pointer
    assert launch._spec(t) != launch._spec(t.double())  # dtype
    assert len({launch._spec(v) for v in (0, 1, 2, 16, 2**31)}) == 5  # 0, 1, multiple of 16, 64-bit
    assert launch._spec(3) == launch._spec(5) and launch._spec(0.5) == launch._spec(2.0)
    assert launch._spec(True) != launch._spec(False) != launch._spec(0)


def test_fast_is_one_launcher_per_kernel():
    assert fast(_axpy_kernel) is fast(_axpy_kernel) and isinstance(fast(_axpy_kernel), FastLaunch)


@pytest.mark.parametrize("repeat", [1, 3])
def test_fast_launch_equals_triton_launch(repeat):
    """Several calls per specialization (the second and later take the cached path on
    CUDA), with arguments that change each key component in turn."""
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        base = torch.randn(130, generator=g).to(dtype).to(_device())
        for x, n, alpha, stride, block, square in (
            (base, 100, 0.5, 1, 32, False),
            (base[1:], 100, -2.0, 1, 32, False),
            (base, 64, 3.0, 1, 16, True),
            (base, 16, 1.5, 2, 16, False),
            (base, 1, 0.25, 1, 32, True),
        ):
            y = torch.randn(n, generator=g).to(dtype).to(_device())
            for _ in range(repeat):
                want, got = torch.full_like(y, float("nan")), torch.full_like(y, float("nan"))
                grid = (triton.cdiv(n, block),)
                _axpy_kernel[grid](x, y, want, n, alpha, stride, BLOCK=block, SQUARE=square)
                fast(_axpy_kernel)[grid](x, y, got, n, alpha, stride, BLOCK=block, SQUARE=square)
                assert torch.equal(got, want) and not got.isnan().any()
    if torch.cuda.is_available() and repeat > 1:  # the later calls took the cached path
        assert len(fast(_axpy_kernel)._cache) >= 5


def test_no_launch_hook_means_fast_path():
    """Triton >= 3.4 keeps an empty ``HookChain`` in ``knobs.runtime.launch_enter_hook``: that
    is no hook (the cached path is allowed); one with a call in it is."""

    class Chain:
        def __init__(self, calls):
            self.calls = calls

    assert not launch._hook_set(None) and not launch._hook_set(Chain([]))
    assert launch._hook_set(Chain([print])) and launch._hook_set(print)
    knobs = getattr(triton, "knobs", None)
    if knobs is not None and not launch._INTERPRETED:
        assert not launch._hooks_active()
