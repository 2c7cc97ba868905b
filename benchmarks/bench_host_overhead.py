"""Host-side cost per call of each ojas primitive beside the torch call it replaces, on tiny
tensors where the host's work (argument checks, dispatch, autograd bookkeeping, kernel launch) is
the whole cost: the cost the host-bound bf16 training steps pay once per layer and primitive.

Run with pytest-benchmark (not part of the test suite; the device is CUDA where there is one)::

    pytest benchmarks/bench_host_overhead.py --benchmark-only [--benchmark-json FILE]
    OJAS_BENCH_RECORD=benchmarks/records.jsonl pytest benchmarks/bench_host_overhead.py --benchmark-only

With ``OJAS_BENCH_RECORD`` set, each case's median microseconds per call is appended to that file
as a record of ``bench_host_overhead`` (benchmarks/records.py), peer "ojas" or "torch". On the
GPU the calls are not synchronized: the figure is the host's time to issue the call, not the
kernel's time. Forward only (no autograd graph) and forward + backward.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import records  # noqa: E402
from ojas_ref.functional import apply_rotary_pos_emb, attention, linear_cross_entropy, rms_norm, swiglu  # noqa: E402

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
DTYPE = torch.bfloat16 if DEVICE.type == "cuda" else torch.float32
TOKENS, HIDDEN, HEADS, HEAD_DIM, VOCAB = 16, 64, 2, 32, 128


def _hf_rope(q, k, cos, sin):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb as hf_apply_rotary_pos_emb

    return hf_apply_rotary_pos_emb(q, k, cos, sin)


def _tensor(*shape: int, grad: bool) -> torch.Tensor:
    return torch.randn(*shape, device=DEVICE, dtype=DTYPE).requires_grad_(grad)


def _cases(grad: bool) -> dict[str, tuple[Callable, Callable, tuple]]:
    """name -> (ojas call, torch call, arguments)."""
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    x, w = _tensor(1, TOKENS, HIDDEN, grad=grad), _tensor(HIDDEN, grad=grad)
    gate, up = _tensor(1, TOKENS, HIDDEN, grad=grad), _tensor(1, TOKENS, HIDDEN, grad=grad)
    q, k, v = (_tensor(1, HEADS, TOKENS, HEAD_DIM, grad=grad) for _ in range(3))
    cos, sin = _tensor(1, TOKENS, HEAD_DIM, grad=False), _tensor(1, TOKENS, HEAD_DIM, grad=False)
    head = _tensor(VOCAB, HIDDEN, grad=grad)
    target = torch.randint(0, VOCAB, (TOKENS,), generator=g).to(DEVICE)
    h = x.reshape(TOKENS, HIDDEN)
    return {
        "rms_norm": (
            lambda a, b: rms_norm(a, (HIDDEN,), b, 1e-6),
            lambda a, b: F.rms_norm(a, (HIDDEN,), b, 1e-6),
            (x, w),
        ),
        "swiglu": (lambda a, b: swiglu(a, b), lambda a, b: F.silu(a) * b, (gate, up)),
        "rope": (apply_rotary_pos_emb, _hf_rope, (q, k, cos, sin)),
        "attention": (
            lambda a, b, c: attention(a, b, c, is_causal=True),
            lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True),
            (q, k, v),
        ),
        "linear_cross_entropy": (
            lambda a, b, t: linear_cross_entropy(a, b, t),
            lambda a, b, t: F.cross_entropy(F.linear(a, b).float(), t),
            (h, head, target),
        ),
    }


def _run(fn: Callable, args: tuple, grad: bool) -> Callable[[], object]:
    if not grad:

        def call():
            with torch.no_grad():
                return fn(*args)

        return call

    def step():
        out = fn(*args)
        out = out if isinstance(out, torch.Tensor) else sum(o.float().sum() for o in out)
        out.float().sum().backward()

    return step


@pytest.mark.parametrize("grad", [False, True], ids=["forward", "forward_backward"])
@pytest.mark.parametrize("peer", ["ojas", "torch"])
@pytest.mark.parametrize("name", ["rms_norm", "swiglu", "rope", "attention", "linear_cross_entropy"])
def test_host_cost_per_call(benchmark, name: str, peer: str, grad: bool) -> None:
    ours, theirs, args = _cases(grad)[name]
    call = _run(ours if peer == "ojas" else theirs, args, grad)
    call()  # warm-up: first-call compilation and caches
    benchmark(call)
    path = os.environ.get("OJAS_BENCH_RECORD")
    if path:
        case = dict(
            primitive=name,
            mode="forward_backward" if grad else "forward",
            tokens=TOKENS,
            hidden=HIDDEN,
            dtype=str(DTYPE).removeprefix("torch."),
        )
        records.append(
            "bench_host_overhead",
            case=case,
            metrics={"us_per_call": benchmark.stats.stats.median * 1e6},
            peer=peer,
            path=path,
            device=DEVICE,
        )
