"""One kernel-or-reference rule per primitive (ojas_ref/functional/dispatch.py).

* The environment variables are read once, at import: a process started with one set runs by
  it, a change later changes nothing, a bad value fails the import naming the variable.
* ``use_impl`` sets what ``impl=None`` means within a block, restores on exit, and under
  ``torch.compile(fullgraph=True)`` is traced and guarded (no graph break; another setting
  recompiles).
* The public function and the Hugging Face adapters' fast path (``plain_kernel_call``) pick the
  same path, at the same dtype, over a grid of dtypes, devices (CPU, the CPU under Triton's
  interpreter; CUDA under the ``gpu`` marker), autocast off / at the inputs' dtype / at another,
  attention masks and settings, given by ``impl`` or by ``use_impl``.  The public function's
  decision is recorded by a spy around ``kernel_runs`` that then runs the reference, so no
  kernel runs here.
* No ``os.environ`` read happens per call.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Iterator, MutableMapping
from contextlib import nullcontext

import pytest
import torch

from ojas_ref.functional import dispatch
from ojas_ref.functional.dispatch import (
    IMPL_ENVS,
    IMPLS,
    PRIMITIVES,
    get_impl,
    kernel_runs,
    plain_kernel_call,
    use_impl,
)

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# the primitives' modules (ojas_ref.functional's attributes of those names are the functions)
MODULES = {p: importlib.import_module(f"ojas_ref.functional.{p}") for p in PRIMITIVES}


# --------------------------------------------------------------------------
# The environment, read at import
# --------------------------------------------------------------------------


def test_settings_from_the_environment():
    assert dispatch._settings_from({}) == dict.fromkeys(PRIMITIVES, "auto")
    environ = {
        "OJAS_ATTENTION_IMPL": "reference",
        "OJAS_ROPE_IMPL": "triton",
        "OJAS_RELU_IMPL": "",
        "OJAS_UNRELATED": "x",
    }
    assert dispatch._settings_from(environ) == dict.fromkeys(PRIMITIVES, "auto") | {
        "attention": "reference",
        "rope": "triton",
    }
    assert IMPL_ENVS == {p: f"OJAS_{p.upper()}_IMPL" for p in PRIMITIVES} and IMPL_ENVS["rope"] == "OJAS_ROPE_IMPL"
    for primitive, name in IMPL_ENVS.items():
        assert MODULES[primitive].IMPL_ENV == name
        with pytest.raises(ValueError, match=f"{name} must be one of .*got 'Triton'"):
            dispatch._settings_from({name: "Triton"})


_SET_BEFORE_START = """
import os, torch
from ojas_ref.functional import dispatch
from ojas_ref.functional.relu import relu
assert dispatch.get_impl("relu") == "triton" and dispatch.get_impl("attention") == "reference", dispatch._settings
assert dispatch.get_impl("rope") == "auto"
x = torch.zeros(3)
assert dispatch.kernel_runs("relu", None, x) and dispatch.plain_kernel_call("relu", x)
os.environ["OJAS_RELU_IMPL"] = "reference"  # read at import: a later change is not seen
assert dispatch.get_impl("relu") == "triton" and dispatch.kernel_runs("relu", None, x)
"""


def test_the_environment_is_read_at_import():
    """In a process started with the variables set (the way to use them), and with a bad value."""
    env = dict(os.environ, TRITON_INTERPRET="1", OJAS_RELU_IMPL="triton", OJAS_ATTENTION_IMPL="reference")
    env.pop("OJAS_ROPE_IMPL", None)
    bad = dict(env, OJAS_SWIGLU_IMPL="fast")
    runs = [
        subprocess.Popen([sys.executable, "-c", code], env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for code, e in ((_SET_BEFORE_START, env), ("import ojas_ref", bad))
    ]
    (_, good_err), (_, bad_err) = (r.communicate(timeout=600) for r in runs)
    assert runs[0].returncode == 0, good_err[-3000:]
    assert runs[1].returncode != 0
    assert "ValueError: the environment variable OJAS_SWIGLU_IMPL must be one of" in bad_err, bad_err[-3000:]


# --------------------------------------------------------------------------
# use_impl
# --------------------------------------------------------------------------


def test_use_impl_sets_and_restores():
    before = {p: get_impl(p) for p in PRIMITIVES}
    with use_impl(attention="reference", rms_norm="triton"):
        assert get_impl("attention") == "reference" and get_impl("rms_norm") == "triton"
        assert all(get_impl(p) == before[p] for p in PRIMITIVES if p not in ("attention", "rms_norm"))
        with use_impl("triton", rope="reference"):  # positional: every primitive; keywords over it
            assert {p: get_impl(p) for p in PRIMITIVES} == dict.fromkeys(PRIMITIVES, "triton") | {"rope": "reference"}
        assert get_impl("attention") == "reference" and get_impl("swiglu") == before["swiglu"]
    assert {p: get_impl(p) for p in PRIMITIVES} == before
    with pytest.raises(KeyError), use_impl("reference"):  # restored on an exception too
        assert get_impl("relu") == "reference"
        raise KeyError
    assert {p: get_impl(p) for p in PRIMITIVES} == before

    @use_impl(swiglu="reference")
    def decorated() -> str:
        return get_impl("swiglu")

    assert decorated() == "reference" and get_impl("swiglu") == before["swiglu"]
    block = use_impl(relu="reference")  # one object entered twice, nested
    with block:
        with block:
            assert get_impl("relu") == "reference"
        assert get_impl("relu") == "reference"
    assert get_impl("relu") == before["relu"]


def test_use_impl_bad_arguments():
    with pytest.raises(TypeError, match=r"unknown primitive\(s\) \['rotary'\]"):
        use_impl(rotary="reference")
    with pytest.raises(ValueError, match="use_impl: attention must be one of"):
        use_impl(attention="fast")
    with pytest.raises(ValueError, match="use_impl: .* must be one of"):
        use_impl("kernel")
    with pytest.raises(ValueError, match="primitive must be one of"):
        get_impl("rotary")
    with pytest.raises(ValueError, match="primitive must be one of"):
        plain_kernel_call("rotary", torch.zeros(1))
    with pytest.raises(ValueError, match="primitive must be one of"):
        kernel_runs("rotary", None, torch.zeros(1))
    with pytest.raises(ValueError, match="impl must be one of .* got 'fast'"):
        kernel_runs("relu", "fast", torch.zeros(1))


def test_an_explicit_impl_wins_over_the_setting(monkeypatch):
    monkeypatch.setattr(dispatch, "_interpret", True)
    x = torch.zeros(3)
    with use_impl("reference"):
        assert kernel_runs("swiglu", "triton", x) and not kernel_runs("swiglu", None, x)
    with use_impl("triton"):
        assert not kernel_runs("swiglu", "reference", x) and kernel_runs("swiglu", None, x)


_INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
_KERNEL_DEVICE = "cpu" if _INTERPRETED else "cuda"


@pytest.mark.kernel
def test_use_impl_under_compile_fullgraph():
    """Entered outside or inside a ``fullgraph=True`` function: traced, no graph break; the
    setting is guarded (a different one recompiles) and restored after."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append({str(n.target) for n in gm.graph.nodes if n.op == "call_function"})
        return gm.forward

    torch._dynamo.reset()
    f = torch.compile(lambda g, u: MODULES["swiglu"].swiglu(g, u), backend=backend, fullgraph=True)

    @torch.compile(backend=backend, fullgraph=True)
    def inside(g, u):
        with use_impl(swiglu="reference"):
            return MODULES["swiglu"].swiglu(g, u)

    g, u = torch.randn(2, 8, device=_KERNEL_DEVICE), torch.randn(2, 8, device=_KERNEL_DEVICE)
    before = get_impl("swiglu")
    with use_impl(swiglu="reference"):
        f(g, u)
    with use_impl(swiglu="triton"):  # recompiled: the kernel's registered op
        f(g, u)
        inside(g, u)
        assert get_impl("swiglu") == "triton"
    assert ["ojas.swiglu_forward.default" in ops for ops in graphs] == [False, True, False]
    assert get_impl("swiglu") == before


# --------------------------------------------------------------------------
# The public function and the adapters' rule: the same path
# --------------------------------------------------------------------------


def _inputs(primitive: str, dtype: torch.dtype, device: str, mask: str) -> tuple:
    """(positional arguments of the public function, its keyword arguments, the tensors the
    adapter passes to plain_kernel_call, and whether the adapter's own checks let it be plain)."""
    g = torch.Generator().manual_seed(0)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(device=device, dtype=dtype)

    if primitive == "attention":
        q, k, v = rand(1, 2, 4, 8), rand(1, 2, 4, 8), rand(1, 2, 4, 8)
        masks = {
            "none": None,
            "bool": torch.ones(4, 4, dtype=torch.bool, device=device).tril(),
            "float": torch.zeros(4, 4, device=device, dtype=dtype)
            .triu(1)
            .masked_fill_(torch.ones(4, 4, dtype=torch.bool, device=device).triu(1), -torch.inf),
        }
        masks["float_grad"] = masks["float"].clone().requires_grad_()
        attn_mask = masks[mask]
        # the adapter: plain_kernel_call(query, key, value) and no mask that requires grad
        return (q, k, v), dict(attn_mask=attn_mask), (q, k, v), attn_mask is None or not attn_mask.requires_grad
    if primitive == "linear_cross_entropy":
        x, w = rand(3, 8), rand(16, 8)
        return (x, w, torch.tensor([1, 5, 15], device=device)), {}, (x, w), True
    if primitive == "rms_norm":
        x, w = rand(2, 8), rand(8)
        return (x, 8, w), {}, (x, w), True
    if primitive == "swiglu":
        gate, up = rand(2, 8), rand(2, 8)
        return (gate, up), {}, (gate, up), True
    if primitive == "relu":
        x = rand(2, 8).requires_grad_()
        return (x,), {}, (x,), True
    q, k, cos, sin = rand(1, 2, 4, 8), rand(1, 1, 4, 8), rand(1, 4, 8), rand(1, 4, 8)
    return (q, k, cos, sin), {}, (q, k, cos, sin), True


_PUBLIC = {p: getattr(MODULES[p], "apply_rotary_pos_emb" if p == "rope" else p) for p in PRIMITIVES}


def _public_path(primitive: str, args: tuple, kwargs: dict, impl) -> tuple:
    """What the public function decides: ("kernel", the dtype it would run at), ("reference",),
    or ("raises", the exception type); the reference runs in every case."""
    decisions = []

    def spy(name, impl_, *tensors, **kw):
        try:
            runs = kernel_runs(name, impl_, *tensors, **kw)
        except Exception as e:
            decisions.append(("raises", type(e)))
            raise
        decisions.append(("kernel", tensors[0].dtype) if runs else ("reference",))
        return False

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(MODULES[primitive], "kernel_runs", spy)
        try:
            _PUBLIC[primitive](*args, **kwargs, impl=impl)
        except Exception:  # the refusal (recorded), or the reference's own (torch's CPU autocast refuses some casts)
            pass
    assert len(decisions) <= 1
    return decisions[0] if decisions else ("reference",)  # rope with cos/sin requiring grad decides nothing


def _autocast(device: str, mode: str, dtype: torch.dtype):
    if mode == "off":
        return nullcontext()
    cast = dtype if mode == "same" else torch.float16 if dtype == torch.bfloat16 else torch.bfloat16
    return torch.autocast(device, dtype=cast)


def _grid(primitive: str, device: str):
    for dtype in DTYPES:
        for mode in ("off", "same", "other"):
            if mode == "same" and dtype not in (torch.float16, torch.bfloat16):
                continue  # autocast runs at float16 or bfloat16 only
            for mask in ("none", "bool", "float", "float_grad") if primitive == "attention" else ("none",):
                yield dtype, mode, mask


def _check_agreement(monkeypatch, primitive: str, device: str, interpret: bool) -> list:
    monkeypatch.setattr(dispatch, "_interpret", interpret)
    kernel_cases = []
    for dtype, mode, mask in _grid(primitive, device):
        args, kwargs, adapter_tensors, adapter_plain = _inputs(primitive, dtype, device, mask)
        for setting in IMPLS:
            with _autocast(device, mode, dtype):
                explicit = _public_path(primitive, args, kwargs, setting)
                with use_impl(**{primitive: setting}):
                    public = _public_path(primitive, args, kwargs, None)
                    plain = adapter_plain and plain_kernel_call(primitive, *adapter_tensors)
            case = (primitive, device, interpret, dtype, mode, mask, setting)
            assert explicit == public, case  # impl= and use_impl: one rule
            if plain:  # the fast path runs the kernel on the adapter's tensors, at their dtype
                assert public == ("kernel", adapter_tensors[0].dtype), (case, public)
                kernel_cases.append(case)
            elif primitive == "rope":  # the adapter's general path is Hugging Face's function: the reference
                assert public[0] != "kernel", (case, public)
            # otherwise the adapter's general path is the public function itself
    return kernel_cases


@pytest.mark.parametrize("primitive", PRIMITIVES)
@pytest.mark.parametrize("interpret", [False, True], ids=["cpu", "cpu_interpreted"])
def test_public_function_and_adapter_agree_cpu(monkeypatch, primitive, interpret):
    kernel_cases = _check_agreement(monkeypatch, primitive, "cpu", interpret)
    # not vacuous: under the interpreter the fast path is taken with "triton" (float16 / bfloat16 /
    # float32, autocast off or at their dtype), and never on the CPU otherwise
    if interpret:
        assert {c[3] for c in kernel_cases} == {torch.float16, torch.bfloat16, torch.float32}
        assert {c[6] for c in kernel_cases} == {"triton"}
        if primitive in ("attention", "linear_cross_entropy"):  # they cast under autocast: not plain then
            assert all(c[4] != "other" for c in kernel_cases)
    else:
        assert kernel_cases == []


@pytest.mark.gpu
@pytest.mark.parametrize("primitive", PRIMITIVES)
def test_public_function_and_adapter_agree_cuda(monkeypatch, primitive):
    kernel_cases = _check_agreement(monkeypatch, primitive, "cuda", dispatch.triton_interpreted())
    settings = {c[6] for c in kernel_cases}
    assert settings == {"auto", "triton"}
    auto_dtypes = {c[3] for c in kernel_cases if c[6] == "auto"}
    assert auto_dtypes == (
        {torch.bfloat16, torch.float32}
        if primitive == "linear_cross_entropy"
        else {torch.float16, torch.bfloat16, torch.float32}
    )


# --------------------------------------------------------------------------
# No environment read per call
# --------------------------------------------------------------------------


class _NoEnviron(MutableMapping):
    """os.environ for the test below: any access is a failure."""

    def _fail(self, *args, **kwargs):
        raise AssertionError(f"os.environ read during a call: {args}")

    __getitem__ = __setitem__ = __delitem__ = get = __contains__ = _fail

    def __iter__(self) -> Iterator[str]:
        self._fail("iter")

    def __len__(self) -> int:
        self._fail("len")


def test_no_environment_read_per_call(monkeypatch):
    dispatch.triton_interpreted()  # read once, before
    calls = []
    for primitive in PRIMITIVES:
        args, kwargs, adapter_tensors, _ = _inputs(primitive, torch.float32, "cpu", "bool")
        calls.append((primitive, args, kwargs, adapter_tensors))
    try:
        monkeypatch.setattr(os, "environ", _NoEnviron())
        for primitive, args, kwargs, adapter_tensors in calls:
            for block in (nullcontext(), use_impl(**{primitive: "reference"})):
                with block:
                    _PUBLIC[primitive](*args, **kwargs)
                    plain_kernel_call(primitive, *adapter_tensors)
                    kernel_runs(primitive, None, adapter_tensors[0])
                    get_impl(primitive)
    finally:
        monkeypatch.undo()  # before pytest's own use of os.environ
    with pytest.raises(AssertionError, match="os.environ read"):  # the guard itself works
        _NoEnviron().get("OJAS_ATTENTION_IMPL")


def test_plain_kernel_call_takes_the_variable_name_too(monkeypatch):
    """The adapters' earlier spelling, plain_kernel_call(IMPL_ENV, ...), until they pass the name."""
    monkeypatch.setattr(dispatch, "_interpret", True)
    x = torch.zeros(2, 3)
    for primitive, name in IMPL_ENVS.items():
        for setting in IMPLS:
            with use_impl(**{primitive: setting}):
                assert plain_kernel_call(name, x, x) == plain_kernel_call(primitive, x, x) == (setting == "triton")


def test_function_apply_under_a_torch_func_transform():
    """host.function_apply skips Function.apply's wrapper only outside torch.func transforms:
    under vmap and grad it goes through ``cls.apply`` and gives what ``cls.apply`` gives."""
    from ojas_kernels.host import function_apply

    class Square(torch.autograd.Function):
        generate_vmap_rule = True

        @staticmethod
        def forward(x):
            return x * x

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, g):
            return 2 * ctx.saved_tensors[0] * g

    class Cube(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x * x

        @staticmethod
        def backward(ctx, g):
            return 3 * ctx.saved_tensors[0] ** 2 * g

    with pytest.raises(ValueError, match="defines setup_context"):
        function_apply(Square)
    cube = function_apply(Cube)
    x = torch.randn(4, 3, dtype=torch.float64)
    assert torch.equal(cube(x), Cube.apply(x))
    xg = x.clone().requires_grad_()
    (g,) = torch.autograd.grad(cube(xg).sum(), xg)
    assert torch.equal(g, 3 * x**2)
    # under a transform it is Cube.apply: torch refuses a Function without setup_context there
    for f in (cube, Cube.apply):
        with pytest.raises(RuntimeError, match="must override the setup_context"):
            torch.func.grad(lambda t: f(t).sum())(x[0])


def test_the_ojas_ops_have_direct_cpu_and_cuda_kernels():
    """ojas_kernels.host.define_op registers each op's implementation for CPU and CUDA and its fake
    implementation (Meta), and no autograd kernel (no custom_op per-call wrapper: the primitives'
    autograd.Functions call the ops under torch.compile)."""
    import ojas_kernels.attention  # noqa: F401  (registers the attention ops)
    import ojas_kernels.linear_cross_entropy  # noqa: F401
    import ojas_ref.functional.relu  # noqa: F401
    import ojas_ref.functional.rms_norm  # noqa: F401
    import ojas_ref.functional.rope  # noqa: F401
    import ojas_ref.functional.swiglu  # noqa: F401

    names = [
        f"ojas::{p}_{d}"
        for p in ("rms_norm", "swiglu", "rope", "relu", "flash_attention")
        for d in ("forward", "backward")
    ]
    for name in names + ["ojas::linear_cross_entropy", "ojas::linear_cross_entropy_backward"]:
        for key in ("CPU", "CUDA", "Meta"):
            assert torch._C._dispatch_has_kernel_for_dispatch_key(name, key), (name, key)
        for key in ("Autograd", "AutogradCPU", "AutogradCUDA", "CompositeExplicitAutograd"):
            assert not torch._C._dispatch_has_kernel_for_dispatch_key(name, key), (name, key)
