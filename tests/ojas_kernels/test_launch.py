"""kernels/ojas_kernels/launch.py: FastLaunch launches what ``kernel[grid]`` launches.

On the CPU (Triton's interpreter) FastLaunch takes Triton's own path; the specialization
key is checked here for what it must tell apart, and the cached path is run with a stand-in
kernel that compiles per Triton's own specialization.  On CUDA the cached launch is compared
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
from triton.backends.compiler import BaseBackend  # noqa: E402
from triton.runtime.jit import JITFunction, create_function_from_signature  # noqa: E402

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


@triton.jit
def _scale_kernel(X, OUT, n, alpha, SCALE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    tl.store(OUT + offs, tl.load(X + offs, mask=ok) * alpha * SCALE, mask=ok)


def _device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def test_spec_tells_apart_what_triton_specializes_on():
    t = torch.zeros(8)

    def spec(x):
        return launch._spec(x, False)

    assert spec(t) != spec(t[1:])  # 16-byte alignment of the pointer
    assert spec(t) != spec(t.double())  # dtype
    assert len({spec(v) for v in (0, 1, 2, 16, 2**31, 2**63)}) == 6  # 0, 1, multiple of 16, i64, u64
    assert spec(3) == spec(5) and spec(0.5) == spec(2.0)  # a runtime float: fp32 whatever its value
    assert spec(True) != spec(False) != spec(0)


def test_spec_of_a_constexpr_is_its_type_and_value():
    def spec(x):
        return launch._spec(x, True)

    assert spec(0.5) != spec(2.0) and spec(0.5) == spec(0.5)
    assert len({spec(v) for v in (True, 1, 1.0)}) == 3 and len({spec(v) for v in (False, 0, 0.0)}) == 3
    assert spec(32) != spec(64)  # not only the class of an int (both multiples of 16)


def test_constexpr_flags_are_tritons():
    """What FastLaunch reads from the kernel's function is ``JITFunction.params``' ``is_constexpr``
    (the interpreter's kernel has no ``params``); nothing for an object without a function."""
    for kernel in (_axpy_kernel, _scale_kernel):
        want = {p.name: p.is_constexpr for p in JITFunction(kernel.fn).params}
        assert launch._constexpr_flags(kernel) == want and sum(want.values()) == 2
    assert launch._constexpr_flags(object()) == {}


def test_a_float_constexpr_is_compiled_per_value():
    """SCALE (a float constexpr, by position and by keyword) and alpha (a runtime float) change
    between the calls of one launcher: each call computes with its own values (on CUDA the
    repeated calls take the cached path; under the interpreter Triton's own)."""
    x = torch.arange(1.0, 9.0, device=_device())
    for _ in range(2):
        for scale, alpha in ((2.0, 1.5), (3.0, 2.5), (2.0, 2.5)):
            for by_keyword in (False, True):
                out = torch.full_like(x, float("nan"))
                if by_keyword:
                    fast(_scale_kernel)[(1,)](x, out, 8, alpha, SCALE=scale, BLOCK=8)
                else:
                    fast(_scale_kernel)[(1,)](x, out, 8, alpha, scale, 8)
                assert torch.equal(out, x * alpha * scale), (scale, alpha, by_keyword)


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


def test_no_launch_hook_means_fast_path(monkeypatch):
    """Triton >= 3.4 keeps an empty ``HookChain`` in ``knobs.runtime.launch_enter_hook``: that
    is no hook (the cached path is allowed); one with a call in it is."""

    class Chain:
        def __init__(self, calls):
            self.calls = calls

    class Runtime:
        def __init__(self, enter, leave):
            self.launch_enter_hook, self.launch_exit_hook = enter, leave

    for enter, leave, active in (
        (Chain([]), Chain([]), False),
        (None, None, False),
        (Chain([print]), Chain([]), True),
        (Chain([]), Chain([print]), True),
        (print, None, True),
    ):
        monkeypatch.setattr(launch, "_RUNTIME", Runtime(enter, leave))
        assert launch._hooks_active() is active
    monkeypatch.setattr(launch, "_RUNTIME", None)
    assert launch._hooks_active()  # Triton without knobs: its own path


def test_a_launch_hook_takes_tritons_path(cuda_path, monkeypatch):
    kernel = _FakeKernel()
    x = torch.zeros(8)
    monkeypatch.setattr(launch, "_hooks_active", lambda: True)
    for _ in range(3):
        FastLaunch(kernel)[(1,)](x, x, 5, 1.0, None, BLOCK=8, MODE="a")
    assert [path for path, _, _ in kernel.launches] == ["triton"] * 3


class _FakeCompiled:
    """What Triton's launch returns: a launcher that records its arguments, for one specialization."""

    function = packed_metadata = None

    def __init__(self, spec: str, launches: list) -> None:
        self.spec, self.launches = spec, launches

    def run(self, *args: object) -> None:
        self.launches.append(("cached", self.spec, args))


def _fake_signature(X, Y, n, alpha, flag, BLOCK: tl.constexpr, MODE: tl.constexpr = "a"):
    """The parameters of ``_FakeKernel`` (a function only for its signature)."""


_FAKE_JIT = JITFunction(_fake_signature)
#: Triton's binder of ``_fake_signature``: the arguments' specialization, as ``JITFunction.run`` makes it
_BIND = create_function_from_signature(_FAKE_JIT.signature, _FAKE_JIT.params, BaseBackend)


def _true_spec(args: tuple, kwargs: dict) -> str:
    """The specialization Triton compiles for, by its own binder: per tensor its dtype and 16-byte
    alignment, per int its type (i32, i64, u64) and divisibility by 16 (1 a constexpr), per float
    fp32, per bool u1, per constexpr its value; as its kernel cache's key (``compute_cache_key``),
    ``str`` of it and of the launch options (so that ``True``, ``1`` and ``1.0`` differ)."""
    _, specialization, options = _BIND(*args, **kwargs)
    return str(specialization) + str(options)


class _FakeKernel:
    """A ``@triton.jit`` kernel as FastLaunch sees it on CUDA: ``fn`` (its parameters), and
    ``kernel[grid]`` launching (recorded) and returning the compiled kernel of the arguments'
    specialization."""

    arg_names = _FAKE_JIT.arg_names

    def __init__(self) -> None:
        self.fn = _fake_signature
        self.launches: list = []
        self.compiled: dict[str, _FakeCompiled] = {}

    def __getitem__(self, grid: tuple):
        def launch(*args: object, **kwargs: object) -> _FakeCompiled:
            spec = _true_spec(args, kwargs)
            self.launches.append(("triton", spec, (grid, args, kwargs)))
            return self.compiled.setdefault(spec, _FakeCompiled(spec, self.launches))

        return launch


@pytest.fixture
def cuda_path(monkeypatch):
    """FastLaunch's CUDA path on the CPU: supported, device 0 and stream 7 from torch's stand-ins."""
    monkeypatch.setattr(launch, "_SUPPORTED", True)
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 0, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 7, raising=False)
    if launch._hooks_active():
        pytest.skip("a Triton launch hook is installed (or no knobs): FastLaunch always takes Triton's path")


def _calls() -> list[tuple[tuple, tuple, dict]]:
    """(grid, args, kwargs) of calls that change each part of the key in turn, each made twice."""
    base = torch.zeros(64)
    x, y = base[:32], base[32:]
    calls = []
    for args, kwargs in (
        ((x, y, 16, 0.5, None), dict(BLOCK=32, MODE="a")),
        ((x, y, 17, 2.5, None), dict(BLOCK=32, MODE="a")),  # another int class, float value
        ((x, y, 1, 0.5, None), dict(BLOCK=32, MODE="a")),
        ((x, y, True, 0.5, None), dict(BLOCK=32, MODE="a")),  # a bool where an int was
        ((x, y, 16.0, 0.5, None), dict(BLOCK=32, MODE="a")),  # a float where an int was
        ((x, y, 2**40, 0.5, None), dict(BLOCK=32, MODE="a")),  # 64 bits
        ((x, y, 2**63, 0.5, None), dict(BLOCK=32, MODE="a")),  # unsigned 64 bits
        ((base[1:33], y, 16, 0.5, None), dict(BLOCK=32, MODE="a")),  # misaligned
        ((x.double(), y, 16, 0.5, None), dict(BLOCK=32, MODE="a")),  # dtype
        ((x, y, 16, 0.5, None), dict(BLOCK=64, MODE="a")),  # constexpr
        ((x, y, 16, 0.5, None), dict(MODE="b", BLOCK=32)),  # keyword order, constexpr
        ((x, y, 16, 0.5, None), dict(BLOCK=True, MODE="a")),  # a bool constexpr where an int was
        ((x, y, 16, 0.5, None), dict(BLOCK=1, MODE="a")),  # an int constexpr equal to that bool
        ((x, y, 16, 0.5, None), dict(BLOCK=1.0, MODE="a")),  # a float constexpr equal to both
        ((x, y, 16, 0.5, None), dict(BLOCK=32, MODE=0.5)),  # a float constexpr
        ((x, y, 16, 0.5, None), dict(BLOCK=32, MODE=2.5)),  # another value of it
        ((x, y, 16, 0.5, None, 32, 0.5), {}),  # constexprs by position
        ((x, y, 16, 0.5, None, 32, 2.5), {}),  # a float constexpr's value, by position
        ((x, y, 16, 0.5, None, 64, 2.5), {}),  # an int constexpr's value (of one class), by position
        ((x, y, 16, 0.5, None, True, 2.5), {}),  # a bool constexpr where an int was, by position
        ((x, y, 16, 0.5, None, 1, 2.5), {}),  # an int constexpr equal to that bool, by position
        ((x, y, 16, 0.5, y), dict(BLOCK=32, MODE="a")),  # a tensor where None was
        ((x, y, y, 0.5, None), dict(BLOCK=32, MODE="a")),  # a tensor where an int was
        ((x, 3, 16, 0.5, None), dict(BLOCK=32, MODE="a")),  # an int where a tensor was
        ((x, y, 16, 0.5), dict(flag=None, BLOCK=32, MODE="a")),  # fewer positional arguments
        ((x, y, 16, 0.5, None), dict(BLOCK=32)),  # a parameter left to its default: Triton's path
        ((x, y, 16, 0.5, None), dict(BLOCK=32, MODE="a", num_warps=4)),  # a launch option
        ((x, y, 16, 0.5, None), dict(BLOCK=32, MODE=y)),  # a tensor keyword argument: Triton's path
        ((x, y, 16, 0.5, None), dict(BLOCK=32, MODE="a")),  # the first call again
    ):
        calls += [((2, 3), args, kwargs)] * 2
    return calls


def test_cached_path_launches_the_specialization_of_each_call(cuda_path):
    """Every call launches once, with the compiled kernel of its own specialization (as Triton
    would pick) and its arguments unchanged, in signature order: positional ones, then the
    keyword arguments of the remaining parameters; repeated calls take the generated key's cache."""
    kernel = _FakeKernel()
    launcher = FastLaunch(kernel)
    for grid, args, kwargs in _calls():
        before = len(kernel.launches)
        launcher[grid](*args, **kwargs)
        assert len(kernel.launches) == before + 1
        path, spec, got = kernel.launches[-1]
        assert spec == _true_spec(args, kwargs), (args[2:], kwargs)
        if path == "cached":
            tail = [kwargs[name] for name in kernel.arg_names[len(args) :]]
            want = (grid[0], grid[1], 1, 7, None, None, None, None, None, *args, *tail)
            assert len(got) == len(want) and all(g is w for g, w in zip(got, want))
    cached = sum(1 for path, _, _ in kernel.launches if path == "cached")
    assert cached >= len(_calls()) // 2 - 4  # the second of each pair, but of a default or a tensor keyword
    keyer = launcher._keyers[5]
    assert keyer.compiled and all(
        not isinstance(part, torch.Tensor) for key in keyer.compiled for part in key
    )  # no tensor kept alive by a key


def test_generated_key_is_the_cached_path(cuda_path):
    """After the first call of a specialization the key of the generated function finds it: no
    more Triton launches, and the exact key is not made again."""
    kernel = _FakeKernel()
    launcher = FastLaunch(kernel)
    x = torch.zeros(8)
    for _ in range(4):
        launcher[(1,)](x, x, 5, 1.0, None, BLOCK=8, MODE="a")
    assert [path for path, _, _ in kernel.launches] == ["triton", "cached", "cached", "cached"]
    assert len(launcher._keyers[5].compiled) == 1 and len(launcher._exact) == 1


def test_generated_key_tells_apart_what_the_exact_key_does():
    base = torch.zeros(16)
    t = base[:8]
    kinds = launch._kinds((t, 5, 0.5, None, 1.5, 2), (False, False, False, False, True, True))
    assert kinds == ("t", int, "f", type(None), float, int)  # the last two are constexprs
    keyer = launch._Keyer(kinds, ["BLOCK"])

    def key(*args, **kwargs):
        return keyer.key(0, args, kwargs)[0]

    k = key(t, 5, 0.5, None, 1.5, 2, BLOCK=8)
    assert k == key(t + 1, 5, 2.0, None, 1.5, 2, BLOCK=8)  # the runtime float's value and the tensor's address
    assert key(t, 5, 1.5, None, 1.5, 2, BLOCK=8) == key(t, 5, 2.5, None, 1.5, 2, BLOCK=8)
    for other in (
        key(base[1:9], 5, 0.5, None, 1.5, 2, BLOCK=8),  # alignment
        key(t.double(), 5, 0.5, None, 1.5, 2, BLOCK=8),  # dtype
        key(t, 6, 0.5, None, 1.5, 2, BLOCK=8),  # int value
        key(t, True, 0.5, None, 1.5, 2, BLOCK=8),  # a bool where an int was
        key(t, 5, 1, None, 1.5, 2, BLOCK=8),  # an int where a float was
        key(t, 5, 0.5, None, 2.5, 2, BLOCK=8),  # a float constexpr's value
        key(t, 5, 0.5, None, 1.5, 3, BLOCK=8),  # an int constexpr's value
        key(t, 5, 0.5, None, 1.5, 2, BLOCK=16),  # a keyword constexpr
        key(t, 5, 0.5, None, 1.5, 2, BLOCK=8.0),  # a float equal to the int
        key(t, 5, 0.5, None, 1.5, 2, BLOCK=8, num_warps=4),  # another keyword
    ):
        assert other != k
    assert key(t, 5, 0.5, None, 1.5, True, BLOCK=8) != key(t, 5, 0.5, None, 1.5, 1, BLOCK=8)
    assert key(t, 5, 0.5, None, 1.5, 2, BLOCK=True) != key(t, 5, 0.5, None, 1.5, 2, BLOCK=1)
    assert keyer.key(0, (t, 5, 0.5, None, 1.5, 2), {"BLOCK": 8})[1] == (8,)  # the tail
    with pytest.raises(AttributeError):
        key(3, 5, 0.5, None, 1.5, 2, BLOCK=8)  # an int where a tensor was: the exact path
    with pytest.raises(KeyError):
        key(t, 5, 0.5, None, 1.5, 2)  # BLOCK left to its default: the exact path
