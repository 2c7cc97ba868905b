"""The attention kernels' launches under torch.compile are eager's (issue 29).

A compiled ``optimize_model``'d Llama ran its attention about twice as slowly as eagerly on an H100
(benchmarks/profiles/h100-2026-12-06): without a padding mask and a cache (the benchmark's
``use_cache=False`` training batch) Hugging Face cannot tell while tracing whether ``position_ids``
pack several sequences, so it builds the ``[B, 1, S, S]`` causal mask of every batch, and the kernels
ran it without ``is_causal``: every tile of the full square, each through the masked loop. Eagerly it
builds no mask and the kernels run causal. Checked here: every launch of the forward, dQ and dK/dV
kernels (grid, constexprs and launch options, the tensors' shapes, strides and dtypes, the ints and
floats) is eager's, compiled by aot_eager and by Inductor, with and without a padding mask; and
``infer_causal`` of ``flash_attention`` and ``ojas_ref.attention``, which decides from the mask's
contents when the kernels run (eagerly and in the compiled op alike).

The launches are recorded around ``ojas_kernels.launch.FastLaunch._launch`` (monkeypatched), the
one place every attention kernel launches from.
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

pytest.importorskip("triton")
import torch._dynamo  # noqa: E402

import ojas_ref  # noqa: E402
from ojas_kernels import attention as kattn  # noqa: E402
from ojas_kernels import attention_args  # noqa: E402
from ojas_kernels import launch  # noqa: E402
from ojas_kernels.attention import flash_attention  # noqa: E402
from ojas_ref.functional.dispatch import use_impl  # noqa: E402

_INTERPRETED = type(kattn._fwd_kernel).__name__ == "InterpretedFunction"
DEVICE = "cpu" if _INTERPRETED else "cuda"
KERNELS = ("_fwd_kernel", "_bwd_dq_kernel", "_bwd_dkdv_kernel")


def _describe(x: object) -> object:
    """A launch argument as compared: a tensor by shape, strides and dtype (not its address)."""
    if isinstance(x, torch.Tensor):
        return tuple(x.shape), x.stride(), x.dtype
    return x


@pytest.fixture
def launches(monkeypatch) -> list[dict]:
    """The attention kernels' launches from here on: kernel, grid, positional and keyword arguments."""
    recorded = []
    original = launch.FastLaunch._launch

    def record(self, grid, args, kwargs):
        name = getattr(getattr(self.kernel, "fn", self.kernel), "__name__", "")
        if name in KERNELS:
            recorded.append(
                dict(
                    kernel=name,
                    grid=tuple(grid),
                    args=tuple(_describe(a) for a in args),
                    kwargs={k: _describe(v) for k, v in kwargs.items()},
                )
            )
        return original(self, grid, args, kwargs)

    monkeypatch.setattr(launch.FastLaunch, "_launch", record)
    return recorded


def _difference(a: dict, b: dict) -> dict:
    """The fields of two recorded launches that differ: ``{name: (a's, b's)}``."""
    fields = {"grid": (a["grid"], b["grid"])} | {f"arg {n}": p for n, p in enumerate(zip(a["args"], b["args"]))}
    fields |= {k: (a["kwargs"].get(k), b["kwargs"].get(k)) for k in a["kwargs"].keys() | b["kwargs"].keys()}
    return {name: pair for name, pair in fields.items() if pair[0] != pair[1]}


def _llama(transformers, padding: bool):
    """A 2-layer optimize_model'd bfloat16 Llama as benchmarks/bench_optimize_model.py builds the 1.06B
    one (``use_cache=False``, as many key/value heads as heads), and its batch: input ids and labels,
    with ``padding`` a left-padded attention mask too."""
    config = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=64,
        attention_dropout=0.0,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to(device=DEVICE, dtype=torch.bfloat16)
    model.config.use_cache = False
    model, _ = ojas_ref.optimize_model(model)
    model.train()
    ids = torch.randint(0, 128, (2, 40), generator=torch.Generator().manual_seed(3))
    data = dict(input_ids=ids, labels=ids.clone())
    if padding:
        mask = torch.ones(2, 40, dtype=torch.long)
        mask[0, :5] = 0
        data["attention_mask"] = mask
    return model, {k: t.to(DEVICE) for k, t in data.items()}


@pytest.mark.kernel
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("padding", [False, True], ids=["no mask", "padding mask"])
def test_compiled_llama_attention_launches_are_eager(launches, backend, padding):
    """One training step of the Llama eagerly and compiled: the same attention launches, call by call;
    causal in both (the upper triangle's tiles skipped), without a mask where the batch has no padding.
    On the old code the compiled launches had IS_CAUSAL off, a mask and SPLIT off."""
    transformers = pytest.importorskip("transformers")
    model, data = _llama(transformers, padding)
    torch._dynamo.reset()
    recorded = []
    with use_impl(attention="triton", linear_cross_entropy="triton"):
        for m in (model, torch.compile(model, backend=backend)):
            launches.clear()
            m(**data).loss.backward()
            recorded.append(list(launches))
    eager, compiled = recorded
    assert [c["kernel"] for c in eager] == list(KERNELS[:1]) * 2 + list(KERNELS[1:]) * 2
    assert all(c["kwargs"]["IS_CAUSAL"] and c["kwargs"]["HAS_MASK"] == padding for c in eager)
    assert len(compiled) == len(eager)
    for i, (a, b) in enumerate(zip(eager, compiled)):
        assert a == b, f"launch {i} ({a['kernel']}), eager -> compiled: {_difference(a, b)}"


def _qkv(b=2, h=2, s=9, e=16):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(b, h, s, e, generator=g).to(DEVICE).requires_grad_() for _ in range(3)]


def _causal(s=9, window=None):
    i, j = torch.arange(s).unsqueeze(1), torch.arange(s).unsqueeze(0)
    allowed = j <= i
    return (allowed if window is None else allowed & (i - j < window)).to(DEVICE)


def _padded(s=9):
    """The causal pattern with the first two keys of batch 0 masked (left padding): inside the pattern."""
    mask = _causal(s).expand(2, 1, s, s).clone()
    mask[0, :, :, :2] = False
    return mask


def _step(fn, q, k, v):
    out = fn(q, k, v)
    return out, torch.autograd.grad(out.sum(), (q, k, v))


def _flags(call: dict) -> tuple:
    return call["kwargs"]["IS_CAUSAL"], call["kwargs"]["HAS_WINDOW"], call["kwargs"]["HAS_MASK"]


INFERRED = {  # mask, window_hint -> the flags the kernels run with (IS_CAUSAL, HAS_WINDOW, HAS_MASK), and as what
    "causal pattern": (_causal, None, (True, False, False), dict(is_causal=True)),
    "inside the causal pattern": (_padded, None, (True, False, True), dict(is_causal=True, attn_mask=_padded)),
    "band of the hint": (lambda: _causal(window=3), 3, (True, True, False), dict(is_causal=True, window=3)),
    "causal, outside the hint's band": (_causal, 3, (True, False, False), dict(is_causal=True)),
    "outside the causal pattern": (lambda: ~_causal(), None, (False, False, True), dict(attn_mask=lambda: ~_causal())),
}


@pytest.mark.kernel
@pytest.mark.parametrize("case", list(INFERRED))
def test_infer_causal_runs_the_pattern_it_finds(launches, case):
    """``flash_attention(..., infer_causal=True)`` with a bool mask: the launches and the values (bit for
    bit) of the call the mask's contents make it (the causal pattern, with the hint's window where the
    mask lies in its band, without the mask where it is the pattern), eagerly and compiled
    (``fullgraph=True``: decided when the op runs)."""
    make_mask, hint, flags, same_as = INFERRED[case]
    mask = make_mask()
    q, k, v = _qkv()
    expected_kwargs = {key: (val() if callable(val) else val) for key, val in same_as.items()}
    expected = _step(lambda *x: flash_attention(*x, **{"is_causal": False, **expected_kwargs}), q, k, v)
    launches.clear()

    def inferred(*x):
        return flash_attention(*x, is_causal=False, attn_mask=mask, infer_causal=True, window_hint=hint)

    torch._dynamo.reset()
    for fn in (inferred, torch.compile(inferred, backend="aot_eager", fullgraph=True)):
        launches.clear()
        out, grads = _step(fn, q, k, v)
        assert [_flags(c) for c in launches] == [flags] * 3
        assert torch.equal(out, expected[0]) and all(torch.equal(a, b) for a, b in zip(grads, expected[1]))


@pytest.mark.kernel
def test_infer_causal_reads_a_mask_once_per_version(monkeypatch, launches):
    """The mask's structure is read once for the forward and backward of every call on it (cached per
    storage, view and version), and again after an in-place change, which changes the launch: a mask
    changed to reach above the diagonal runs without ``is_causal``, with the values of the mask alone."""
    passes = []
    weak_ref = attention_args.StorageWeakRef

    def counting(storage):  # one per pass over a mask
        passes.append(1)
        return weak_ref(storage)

    monkeypatch.setattr(attention_args, "StorageWeakRef", counting)
    q, k, v = _qkv()
    mask = _padded()
    for _ in range(2):
        _step(lambda *x: flash_attention(*x, False, attn_mask=mask, infer_causal=True), q, k, v)
    assert len(passes) == 1
    assert [_flags(c) for c in launches] == [(True, False, True)] * 6
    mask[1, 0, 0, 5] = True  # above the diagonal
    launches.clear()
    out, _ = _step(lambda *x: flash_attention(*x, False, attn_mask=mask, infer_causal=True), q, k, v)
    assert len(passes) == 2
    assert [_flags(c) for c in launches] == [(False, False, True)] * 3
    assert torch.equal(out, flash_attention(q, k, v, False, attn_mask=mask))


@pytest.mark.kernel
def test_attention_passes_infer_causal_to_the_kernel(launches):
    """``ojas_ref.attention(..., infer_causal=True)`` runs the kernel as ``flash_attention`` does with it
    (the causal pattern: causal, no mask), with the same values."""
    q, k, v = _qkv()
    out = ojas_ref.attention(q, k, v, attn_mask=_causal(), infer_causal=True, impl="triton")
    assert [_flags(c) for c in launches] == [(True, False, False)]
    assert torch.equal(out, flash_attention(q, k, v, True))


@pytest.mark.parametrize("impl", ["triton", "reference"])
@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(window_hint=3), "window_hint is a hint for infer_causal=True"),
        (dict(infer_causal=True, is_causal=True), "pass is_causal=False and window=None"),
        (dict(infer_causal=True, window=3), "pass is_causal=False and window=None"),
        (dict(infer_causal=True, window_hint=0), "window_hint must be >= 1"),
    ],
)
def test_infer_causal_refuses_bad_arguments(impl, kwargs, match):
    """Refused by ``ojas_ref.attention`` (whichever implementation runs) and by ``flash_attention``."""
    q, k, v = (t.detach() for t in _qkv())
    with pytest.raises(ValueError, match=match):
        ojas_ref.attention(q, k, v, attn_mask=_causal(), impl=impl, **kwargs)
    if impl == "triton":
        with pytest.raises(ValueError, match=match):
            flash_attention(q, k, v, **{"is_causal": False, **kwargs}, attn_mask=_causal())


@pytest.mark.kernel
@pytest.mark.parametrize("window_hint", [None, 3])
def test_opcheck_with_infer_causal(window_hint):
    """torch.library.opcheck of both ops with ``infer_causal`` and ``window_hint`` (schema, fake
    implementation, autograd registration), on a mask inside the causal pattern."""
    q, k, v = _qkv()
    forward = torch.ops.ojas.flash_attention_forward.default
    args = (q, k, v, _padded(), None, False, 0.25, None, 0.0, True, None, True, window_hint)
    torch.library.opcheck(forward, args)
    out, lse = (t.detach() for t in forward(*args))
    backward = torch.ops.ojas.flash_attention_backward.default
    q, k, v = (t.detach() for t in (q, k, v))
    grad_args = (
        torch.randn_like(out),
        q,
        k,
        v,
        _padded(),
        out,
        lse,
        None,
        False,
        0.25,
        None,
        0.0,
        None,
        True,
        window_hint,
    )
    torch.library.opcheck(backward, grad_args)
