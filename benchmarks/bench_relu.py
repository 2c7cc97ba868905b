"""Benchmark: ``ojas_ref.functional.relu.relu`` (a packed 1-bit mask saved) beside torch's ``F.relu`` /
``nn.ReLU``, and ``relu_squared_linear`` (``relu(h)`` saved, not its square) beside Hugging Face's
``ReLUSquaredActivation`` followed by ``nn.Linear``; forward + backward.

    python benchmarks/bench_relu.py [--out FILE] [--impl auto|reference|triton]
    python benchmarks/bench_relu.py --quick          # tiny sizes, CPU, proves it runs

Cases, each at ``[tokens, ffn]`` = [4096, 4096] and [8192, 16384], bfloat16 and float32:

* ``act``: the activation alone, ``r = act(h); r.backward(g)``, ``h`` a leaf.
* ``ffn_dropout``: ``nn.Sequential(Linear(d, ffn), act, Dropout(0.1), Linear(ffn, d))`` in training
  (nn.TransformerEncoderLayer's and T5's feed-forward), ``d = ffn / 4``: the case where the mask
  replaces a tensor (torch keeps relu's output, the dropout's mask and its output).
* ``ffn``: the same without dropout: the down projection keeps relu's output anyway, so the mask
  saves nothing there (its ``n / 8`` bytes are extra: the row shows it).
* ``relu2_linear``: ``down(relu(h)^2)`` with ``down`` an ``nn.Linear(ffn, d)``: torch keeps ``relu(h)``
  and its square, ``relu_squared_linear`` only ``relu(h)`` (the backward recomputes the square).

Measured per row: ``step_ms``, the median of ``triton.testing.do_bench`` on CUDA (gradients reset to
None between runs), of ``time.perf_counter`` over a few steps on the CPU; ``saved_mib``, the
distinct storages autograd keeps for backward (``saved_tensors_hooks``; parameters included);
``peak_mib`` (CUDA only), ``torch.cuda.max_memory_allocated`` during one step minus the memory
allocated before it; ``equal``: whether the output and every gradient are bitwise torch's
(with the same dropout seed).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch
from torch import Tensor, nn
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.bench_swiglu import kernel_bench_cli, write_rows  # noqa: E402
from ojas_ref.functional.relu import relu, relu_squared_linear  # noqa: E402
from ojas_ref.nn import ReLU  # noqa: E402

MIB = 2.0**20
SHAPES = [(4096, 4096), (8192, 16384)]
QUICK_SHAPES = [(64, 96), (100, 200)]
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def hf_relu2() -> Callable[[Tensor], Tensor]:
    """Hugging Face's ``ACT2FN["relu2"]`` (torch's ``square(relu(x))`` when transformers is missing)."""
    try:
        from transformers.activations import ACT2FN

        return ACT2FN["relu2"]
    except ImportError:
        return lambda x: torch.square(F.relu(x))


def saved_mib(fn: Callable[[], Tensor]) -> float:
    seen: dict[int, int] = {}

    def pack(t: Tensor) -> Tensor:
        s = t.untyped_storage()
        seen[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values()) / MIB


def time_ms(step: Callable[[], None], leaves: list[Tensor], device: str, reps: int) -> float:
    if device == "cuda":
        import triton

        return triton.testing.do_bench(step, warmup=25, rep=100, grad_to_none=leaves, return_mode="median")
    times = []
    for _ in range(reps):
        for t in leaves:
            t.grad = None
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def peak_mib(step: Callable[[], None], leaves: list[Tensor]) -> float:
    for t in leaves:
        t.grad = None
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - before) / MIB


def bitwise(x: Tensor, y: Tensor) -> bool:
    return (
        x.shape == y.shape
        and x.dtype == y.dtype
        and torch.equal(x.contiguous().view(torch.uint8), y.contiguous().view(torch.uint8))
    )


def variants(case: str, tokens: int, ffn: int, dtype: torch.dtype, device: str, impl: str) -> dict:
    """Per variant: (forward, the leaves whose gradients are compared)."""
    g = torch.Generator(device).manual_seed(0)
    d = max(ffn // 4, 1)
    if case == "act":
        h = (torch.randn(tokens, ffn, device=device, generator=g) * 3).to(dtype).requires_grad_()
        return {"torch": (lambda: F.relu(h), [h]), "ojas": (lambda: relu(h, impl=impl), [h])}
    if case == "relu2_linear":
        h = torch.randn(tokens, ffn, device=device, generator=g).to(dtype).requires_grad_()
        down = nn.Linear(ffn, d, device=device, dtype=dtype)
        act = hf_relu2()
        leaves = [h, down.weight, down.bias]
        return {
            "torch": (lambda: down(act(h)), leaves),
            "ojas": (lambda: relu_squared_linear(h, down.weight, down.bias), leaves),
        }
    x = torch.randn(tokens, d, device=device, generator=g).to(dtype).requires_grad_()
    p = 0.1 if case == "ffn_dropout" else 0.0
    torch.manual_seed(0)
    up, down = nn.Linear(d, ffn, device=device, dtype=dtype), nn.Linear(ffn, d, device=device, dtype=dtype)
    leaves = [x, up.weight, up.bias, down.weight, down.bias]
    out = {}
    for name, act in (("torch", nn.ReLU()), ("ojas", ReLU(impl=impl))):
        mlp = nn.Sequential(up, act, nn.Dropout(p), down)

        def fwd(mlp=mlp) -> Tensor:
            torch.manual_seed(1)
            return mlp(x)

        out[name] = (fwd, leaves)
    return out


def run_case(case: str, shape: tuple[int, int], dtype: torch.dtype, device: str, impl: str, reps: int) -> list[dict]:
    tokens, ffn = shape
    vs = variants(case, tokens, ffn, dtype, device, impl)
    results = {}
    for name, (fwd, leaves) in vs.items():
        for t in leaves:
            t.grad = None
        y = fwd()
        dy = torch.ones_like(y) if name == "torch" else dy
        y.backward(dy)
        results[name] = [y.detach(), *[t.grad.clone() for t in leaves]]
        for t in leaves:
            t.grad = None
    rows = []
    for name, (fwd, leaves) in vs.items():

        def step(fwd=fwd) -> None:
            fwd().backward(dy)

        row = {
            "case": case,
            "shape": list(shape),
            "dtype": str(dtype).removeprefix("torch."),
            "variant": name,
            "step_ms": time_ms(step, leaves, device, reps),
            "saved_mib": saved_mib(fwd),
            "equal": all(bitwise(a, b) for a, b in zip(results[name], results["torch"])),
        }
        if device == "cuda":
            row["peak_mib"] = peak_mib(step, leaves)
        rows.append(row)
    return rows


CASES = ("act", "ffn_dropout", "ffn", "relu2_linear")


def main() -> None:
    args, device = kernel_bench_cli(__doc__, "ojas_ref.functional.relu.relu")
    shapes = QUICK_SHAPES if args.quick else SHAPES
    rows = [
        row
        for case in CASES
        for shape in shapes
        for dtype in DTYPES.values()
        for row in run_case(case, shape, dtype, device, args.impl, 5)
    ]
    print(
        f"{'case':>12} {'shape':>12} {'dtype':>9} {'variant':>7} {'step ms':>9} {'saved MiB':>10} "
        f"{'peak MiB':>9} {'equal':>6}"
    )
    for r in rows:
        peak = f"{r['peak_mib']:9.1f}" if "peak_mib" in r else f"{'-':>9}"
        print(
            f"{r['case']:>12} {'x'.join(map(str, r['shape'])):>12} {r['dtype']:>9} {r['variant']:>7} "
            f"{r['step_ms']:9.3f} {r['saved_mib']:10.3f} {peak} {str(r['equal']):>6}"
        )
    write_rows(args.out, device, rows)


if __name__ == "__main__":
    main()
