"""Time to train (``ojas plan --time``): the FLOPs of one training step, the device's
sustained matrix-product rate, and from them tokens/s and the wall time to N tokens.

:func:`flop_terms` counts the floating-point operations of the step that
:mod:`ojas_ref.memory` models (Hugging Face's ``LlamaForCausalLM``, one forward and
backward), term by term; :func:`measure_gemm_rate` times a square product on the
device; :func:`predict_time` divides one by the other. The prediction is a bound: a step
is not only products (norms, rotary, SiLU, the loss's softmax and the optimizer update
are memory-bound, not FLOP-bound, and counted as 0 FLOPs here), and a small step is
bound by the host's launches. The H200 records (ojas_ref/tools/h200_records.py) show how far from
the bound a real step is (:func:`recorded_throughput`, tests/tools/test_throughput.py): the
fp32 steps of the 1.06B model run 39-43 TFLOP/s of counted work, the bf16 steps
108-278 TFLOP/s, 14-35% of the H200's measured bf16 product rate (the bf16 step is host-bound:
its CUDA time 37 ms of a 55 ms step under torch.profiler, 2026-12-01,
``git show 343a89b:benchmarks/RESULTS.md``). No efficiency factor is applied by default: the records are of one
model size, and the fraction they show does not carry to another. ``ojas plan --time --shallow``
predicts the step instead from steps of the model's width timed at two small depths
(ojas_ref/tools/step_time.py; within 15% of the measured step in all 32 H200 rows).
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any, Optional, Sequence

import torch

from ojas_ref.memory import Model, Setting
from ojas_ref.recipe import dtype_name
from ojas_ref.tools.records import measured_peak

__all__ = [
    "CAUSAL_FRACTION",
    "H200_BF16_GEMM_RATE",
    "TOKENS_PER_PARAM",
    "duration",
    "flop_terms",
    "head_tokens",
    "measure_gemm_rate",
    "predict_time",
    "recorded_throughput",
    "step_flops",
    "time_lines",
]

#: the share of the [seq, seq] score matrix a causal kernel computes: SDPA's flash and
#: memory-efficient kernels and the ojas kernel skip the tiles above the diagonal, so
#: about half (exactly (1 + BLOCK / seq) / 2 with the diagonal tiles computed whole;
#: counted as 1/2, the convention of FlashAttention's benchmarks)
CAUSAL_FRACTION = 0.5
#: an 8192^3 bfloat16 product on the H200 measured at 769-798 TFLOP/s (random data;
#: ``BF16_TFLOPS`` of benchmarks/bench_linear_cross_entropy.py). No float32 rate is recorded.
H200_BF16_GEMM_RATE = 790e12
#: the default token budgets, in tokens per parameter (20: Chinchilla's compute-optimal ratio)
TOKENS_PER_PARAM = (20, 30)


def _layer_matmul_params(m: Model) -> int:
    """Weights of one layer that enter a product: q, k, v, o, gate, up, down (the
    RMSNorm weights are elementwise)."""
    return m.hidden * (2 * m.q_width + 2 * m.kv_width) + 3 * m.hidden * m.intermediate


def head_tokens(s: Setting) -> int:
    """Tokens whose logits are computed: all of them for Hugging Face's loss (the logits of
    every position exist), all but the last of each sequence for the ojas loss (its shifted
    label is ``ignore_index``, and ignored tokens are removed before any product)."""
    return s.tokens - s.batch if s.recipe.linear_cross_entropy else s.tokens


def flop_terms(m: Model, s: Setting) -> dict[str, int]:
    """The FLOPs of one training step by term (a multiply-add is 2 FLOPs):

    * ``layer products forward``: 2 x tokens x the layers' product weights
      (:func:`_layer_matmul_params`); the embedding is a lookup (0 FLOPs).
    * ``head forward``: 2 x head tokens (:func:`head_tokens`) x hidden x vocab, tied or not.
    * ``products backward``: 2 x both forward terms (grad input and grad weight of every
      product; the first layer's grad input too, since the embedding needs a gradient). The
      ojas loss (the kernel's default schedule for "mean" and "sum", 3 products) computes
      the logits once and both gradients from them: the same 3 head products as Hugging
      Face's loss (its 4-product schedule, for reduction "none" or ``products=4``, and the
      CPU reference recompute the logits in the backward: +1 head forward, not modelled).
    * ``attention forward``: Q K^T and P V, 2 x 2 x batch x heads x seq^2 x head_dim per
      layer, times :data:`CAUSAL_FRACTION` (GQA: per query head).
    * ``attention backward``: the flash backward of SDPA and of the ojas kernel recomputes
      Q K^T, then dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q: 5 products, 2.5 x forward
      (torch.utils.flop_counter's ``sdpa_backward_flop_count`` counts the same 5).
    * ``checkpoint recompute`` (``recipe.checkpoint``): each layer's forward once more in the
      backward, attention included, but for down_proj: torch's non-reentrant checkpoint
      stops recomputing once the tensors the backward needs exist (``early_stop``, the
      default), and down_proj's output, the layer's last product, is saved by nothing
      (tests/tools/test_throughput.py counts it). The head and the embedding are not checkpointed.

    Elementwise work (norms, rotary, SiLU, softmax, the optimizer update) is left out: it
    is memory-bound, not FLOP-bound."""
    layers_forward = 2 * s.tokens * m.layers * _layer_matmul_params(m)
    head_forward = 2 * head_tokens(s) * m.hidden * m.vocab
    full_scores = 2 * s.batch * m.heads * s.seq * s.seq * m.head_dim * m.layers
    attention_forward = round(CAUSAL_FRACTION * 2 * full_scores)
    terms = {
        "layer products forward": layers_forward,
        "head forward": head_forward,
        "products backward": 2 * (layers_forward + head_forward),
        "attention forward": attention_forward,
        "attention backward": round(CAUSAL_FRACTION * 5 * full_scores),
    }
    if s.recipe.checkpoint:
        down_proj = 2 * s.tokens * m.layers * m.hidden * m.intermediate
        terms["checkpoint recompute"] = layers_forward - down_proj + attention_forward
    return terms


def step_flops(m: Model, s: Setting) -> int:
    """The FLOPs of one training step: the sum of :func:`flop_terms`."""
    return sum(flop_terms(m, s).values())


def measure_gemm_rate(device: Any = None, dtype: Any = None, seconds: float = 2.0, size: Optional[int] = None) -> float:
    """FLOP/s of a sustained ``size`` x ``size`` x ``size`` product on ``device`` (default:
    CUDA if available, else the CPU) in ``dtype`` (default bfloat16): random operands (zeros
    run faster on the H200), two warm-up products excluded, then products timed one at a
    time (CUDA events on CUDA, ``perf_counter`` on the CPU) for about ``seconds`` (at least
    3), 2 size^3 over the median time. ``size`` defaults to 8192 on CUDA, 1024 on the CPU.
    float32 follows ``torch.set_float32_matmul_precision`` as the training step does."""

    device = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = dtype if dtype is not None else torch.bfloat16
    size = size if size is not None else (8192 if device.type == "cuda" else 1024)
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"size must be an int >= 1, got {size!r}")
    if not (isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"seconds must be a positive number, got {seconds!r}")
    generator = torch.Generator(device=device).manual_seed(0)
    a, b = (torch.randn(size, size, device=device, dtype=dtype, generator=generator) for _ in range(2))
    out = torch.empty_like(a)
    cuda = device.type == "cuda"
    for _ in range(2):
        torch.mm(a, b, out=out)
    if cuda:
        torch.cuda.synchronize(device)
    times: list[float] = []
    deadline = time.perf_counter() + seconds
    while len(times) < 3 or time.perf_counter() < deadline:
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.mm(a, b, out=out)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            torch.mm(a, b, out=out)
            times.append(time.perf_counter() - t0)
    return 2 * size**3 / statistics.median(times)


def predict_time(
    m: Model, s: Setting, rate: float, *, efficiency: float = 1.0, tokens_per_param: Sequence[float] = TOKENS_PER_PARAM
) -> tuple[float, dict[float, float]]:
    """(tokens/s, {k: seconds to k x parameters tokens}) at ``rate`` FLOP/s times
    ``efficiency``: tokens per step over :func:`step_flops` / (rate x efficiency). With
    the default efficiency 1 it is a bound (the step as fast as its products at the
    measured rate); a measured fraction (e.g. from :func:`recorded_throughput`) gives an
    estimate for the model size it was measured at."""
    for name, value in (("rate", rate), ("efficiency", efficiency)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name} must be a positive number, got {value!r}")
    if not 0 < efficiency <= 1:
        raise ValueError(f"efficiency must be in (0, 1], got {efficiency!r}")
    if not tokens_per_param or any(not (isinstance(k, (int, float)) and k > 0) for k in tokens_per_param):
        raise ValueError(f"tokens_per_param must be positive numbers, got {tokens_per_param!r}")
    tokens_per_s = s.tokens * rate * efficiency / step_flops(m, s)
    return tokens_per_s, {k: k * m.params() / tokens_per_s for k in tokens_per_param}


def recorded_throughput(m: Model, s: Setting) -> Optional[tuple[float, float]]:
    """(measured tokens/s, achieved FLOP/s = :func:`step_flops` x tokens/s / tokens) of this
    model and setting on the H200 (:func:`~ojas_ref.tools.records.measured_peak`), or None."""
    measured = measured_peak(m, s, "tokens_per_s")
    return None if measured is None else (measured, step_flops(m, s) * measured / s.tokens)


def duration(seconds: float) -> str:
    """'412.3 days', '5.2 hours' or '17.0 minutes'."""
    for unit, length in (("days", 86400), ("hours", 3600)):
        if seconds >= length:
            return f"{seconds / length:.1f} {unit}"
    return f"{seconds / 60:.1f} minutes"


def time_lines(
    m: Model, s: Setting, rate: float, device: str, tokens_per_param: Sequence[float] = TOKENS_PER_PARAM
) -> list[str]:
    """What ``ojas plan --time`` prints: the step's FLOPs by term, the rate measured on
    ``device``, the predicted tokens/s and wall times, and the H200 record beside them
    where this setting was measured."""
    terms = flop_terms(m, s)
    total = sum(terms.values())
    tokens_per_s, seconds = predict_time(m, s, rate, tokens_per_param=tokens_per_param)
    lines = [
        f"time to train {m.name} ({m.params() / 1e9:.2f}B parameters), {s.tokens} tokens per step: "
        f"{total / 1e12:.2f} TFLOP per step (ojas_ref/tools/throughput.py, flop_terms)"
    ]
    lines += [f"  {name:<24} {value / 1e12:9.3f} TFLOP" for name, value in terms.items()]
    lines.append(f"GEMM rate measured on {device} ({dtype_name(s.dtype)}): {rate / 1e12:.3f} TFLOP/s")
    lines.append(
        f"predicted at that rate (a bound: elementwise work and host time are not counted): "
        f"{tokens_per_s:,.0f} tokens/s"
    )
    lines += [
        f"  {k:g} tokens per parameter ({k * m.params() / 1e9:,.1f}B tokens): {duration(t)}" for k, t in seconds.items()
    ]
    recorded = recorded_throughput(m, s)
    if recorded is not None:
        measured, achieved = recorded
        at_h200 = predict_time(m, s, H200_BF16_GEMM_RATE, tokens_per_param=tokens_per_param)[0]
        lines.append(
            f"measured on an H200: {measured:,.0f} tokens/s ({achieved / 1e12:.1f} TFLOP/s of counted work; "
            "ojas_ref/tools/h200_records.py)"
        )
        if s.dtype == torch.bfloat16:
            lines.append(
                f"  {100 * achieved / H200_BF16_GEMM_RATE:.0f}% of the H200's measured bf16 GEMM rate (790 "
                f"TFLOP/s, at which the bound is {at_h200:,.0f} tokens/s): the bf16 step is host-bound "
                "(the standard one: 37 ms of CUDA time in a 55 ms step, torch.profiler), so the FLOP bound "
                "overestimates it"
            )
        else:
            lines.append("  no float32 GEMM rate of the H200 is recorded to set it against")
    return lines
