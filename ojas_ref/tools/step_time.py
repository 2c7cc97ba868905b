"""The time of one training step, from parts measured on the device in a few seconds.

:func:`ojas_ref.tools.throughput.predict_time` divides the step's FLOPs by one GEMM rate:
a bound, which a host-bound step (a 1B model in bf16 on an H200: 14-35% of the product
rate, benchmarks/RESULTS.md) misses by a factor of 3 to 7. This module predicts the step
from its parts instead:

    step seconds   = max(device seconds, host seconds)
    device seconds = the step's matrix products (:func:`products`), each timed at its own
                     shape, operand layout and dtype (:func:`time_products`)
                   + attention forward and backward timed at the model's shape (SDPA's
                     flash kernel, or the ojas kernel when the setting uses it)
                   + the optimizer's update, timed per element on a 2^24-element tensor
                     and scaled to the parameter count (memory-bound: linear in it)
    host seconds   = the step of a tiny model of the same structure and setting, timed
                     at 1 and at 3 layers (a tiny model's step is all host: Python,
                     launches), extrapolated to the model's layers, plus the update
                     buckets the tiny model does not have (:func:`time_host`)

Left out (so ``device seconds`` is a lower bound of the device's work): the elementwise
kernels (norms, rotary, SiLU, residual adds, the loss's softmax), whose bytes are a few
percent of a large model's step. ``max`` idealises the overlap of host and device (the
host runs ahead of the device as long as it can). Nothing here is proved; how close the
prediction comes is what the H200 records measure (benchmarks/bench_step_time.py).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ojas_ref.tools.plan import BUCKET_CAP_BYTES, DTYPE_BYTES, Model, Setting
from ojas_ref.tools.throughput import head_tokens

__all__ = ["Measured", "Product", "measure", "predict_step_seconds", "products", "time_host", "time_products"]


@dataclass(frozen=True)
class Product:
    """``count`` products ``[m, k] @ [k, n]``; ``layout``: ``"forward"`` (activations times a
    weight's transpose), ``"grad_input"`` (gradient times the weight) or ``"grad_weight"``
    (a gradient's transpose times the activations), the operand layouts of nn.Linear's
    forward and backward."""

    name: str
    m: int
    k: int
    n: int
    count: int
    layout: str

    @property
    def flops(self) -> int:
        return 2 * self.m * self.k * self.n * self.count


def products(m: Model, s: Setting) -> list[Product]:
    """Every matrix product of one training step (attention's excepted): per decoder layer
    q, k, v, o, gate, up and down, forward, grad input and grad weight, and the forward again
    for all but down_proj with checkpointing (torch's early stop: see
    :func:`ojas_ref.tools.throughput.flop_terms`, whose product terms these sum to); the head
    over its tokens."""
    linears = [("q_proj", m.hidden, m.q_width), ("k_proj", m.hidden, m.kv_width), ("v_proj", m.hidden, m.kv_width),
               ("o_proj", m.q_width, m.hidden), ("gate_proj", m.hidden, m.intermediate),
               ("up_proj", m.hidden, m.intermediate), ("down_proj", m.intermediate, m.hidden)]
    out: list[Product] = []

    def linear(name: str, tokens: int, d_in: int, d_out: int, count: int, recompute: bool) -> None:
        out.append(Product(f"{name} forward", tokens, d_in, d_out, count * (2 if recompute else 1), "forward"))
        out.append(Product(f"{name} grad input", tokens, d_out, d_in, count, "grad_input"))
        out.append(Product(f"{name} grad weight", d_out, tokens, d_in, count, "grad_weight"))

    for name, d_in, d_out in linears:
        linear(name, s.tokens, d_in, d_out, m.layers, s.checkpoint and name != "down_proj")
    linear("head", head_tokens(s), m.hidden, m.vocab, 1, False)
    return out


@dataclass
class Measured:
    """The parts of :func:`measure`, in seconds: per product (by its key ``(m, k, n, layout)``),
    attention forward and forward + backward of one layer, the update per parameter, and the
    host's step at 1 and 3 layers and per extra bucket."""

    device: str
    product_seconds: dict[tuple[int, int, int, str], float] = field(default_factory=dict)
    attention_forward: float = 0.0
    attention_step: float = 0.0
    update_per_parameter: float = 0.0
    host_step_1: float = 0.0
    host_step_3: float = 0.0
    host_per_bucket: float = 0.0


def _torch_dtype(s: Setting) -> Any:
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16}[s.dtype]


def _median_seconds(run: Callable[[], Any], device: Any, repeats: int, warmup: int = 2) -> float:
    """Median wall time of ``run`` (synchronised each time on CUDA)."""
    import torch

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda *a: None)
    for _ in range(warmup):
        run()
    sync(device)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_products(shapes: list[Product], dtype: Any, device: Any, repeats: int = 5) -> dict:
    """Seconds of one product of each distinct (m, k, n, layout), random operands in the
    layouts of nn.Linear (weights ``[out, in]`` contiguous, activations ``[tokens, features]``)."""
    import torch

    generator = torch.Generator(device=device).manual_seed(0)
    seconds = {}
    for p in shapes:
        key = (p.m, p.k, p.n, p.layout)
        if key in seconds:
            continue
        if p.layout == "forward":       # x [m, k] @ W^T, W [n, k]
            a = torch.randn(p.m, p.k, device=device, dtype=dtype, generator=generator)
            b = torch.randn(p.n, p.k, device=device, dtype=dtype, generator=generator).t()
        elif p.layout == "grad_input":  # dy [m, k] @ W, W [k, n]
            a = torch.randn(p.m, p.k, device=device, dtype=dtype, generator=generator)
            b = torch.randn(p.k, p.n, device=device, dtype=dtype, generator=generator)
        else:                           # dy^T @ x, dy [k, m], x [k, n]
            a = torch.randn(p.k, p.m, device=device, dtype=dtype, generator=generator).t()
            b = torch.randn(p.k, p.n, device=device, dtype=dtype, generator=generator)
        seconds[key] = _median_seconds(lambda: torch.mm(a, b), device, repeats)
        del a, b
    return seconds


def _time_attention(m: Model, s: Setting, dtype: Any, device: Any, repeats: int) -> tuple[float, float]:
    """(forward, forward + backward) seconds of one layer's causal attention at the model's shape."""
    import torch
    import torch.nn.functional as F

    from ojas_ref.primitives.attention import attention

    q = torch.randn(s.batch, m.heads, s.seq, m.head_dim, device=device, dtype=dtype, requires_grad=True)
    k, v = (torch.randn(s.batch, m.kv_heads, s.seq, m.head_dim, device=device, dtype=dtype, requires_grad=True)
            for _ in range(2))
    gqa = m.kv_heads != m.heads
    fn = attention if s.ojas_attention else F.scaled_dot_product_attention
    grad = torch.randn(s.batch, m.heads, s.seq, m.head_dim, device=device, dtype=dtype)
    with torch.no_grad():
        forward = _median_seconds(lambda: fn(q, k, v, is_causal=True, enable_gqa=gqa), device, repeats)
    step = _median_seconds(lambda: torch.autograd.backward(fn(q, k, v, is_causal=True, enable_gqa=gqa), grad),
                           device, repeats)
    return forward, step


def _time_update(s: Setting, dtype: Any, device: Any, repeats: int, elements: int = 2**24) -> float:
    """Seconds per parameter of the setting's optimizer update (torch's default kernels),
    on one ``elements``-element parameter."""
    import torch

    p = torch.nn.Parameter(torch.randn(elements, device=device, dtype=dtype))
    p.grad = torch.randn_like(p)
    opt = (torch.optim.SGD([p], lr=1e-3) if s.optimizer == "sgd" else
           torch.optim.AdamW([p], lr=1e-4, weight_decay=0.1))
    return _median_seconds(opt.step, device, repeats) / elements


def time_host(m: Model, s: Setting, device: Any, repeats: int = 10) -> tuple[float, float, float]:
    """(step at 1 layer, step at 3 layers, per extra bucket) seconds of a tiny
    ``LlamaForCausalLM`` (hidden 64, 4 heads, the model's kv-head ratio and tying,
    vocabulary 128, sequence 16) trained in the setting (optimize_model and
    InBackwardOptimizer as ``ojas`` does, checkpointing): a step of this size is host work.
    The per-bucket cost is the tiny model's step with one bucket per parameter less its
    step with one bucket, over the extra buckets (fused settings; 0 otherwise)."""
    import torch
    import transformers

    from ojas_ref import InBackwardOptimizer, optimize_model

    transformers.logging.set_verbosity_error()
    kv = max(1, 4 * m.kv_heads // m.heads)
    dtype = _torch_dtype(s)

    def step_seconds(layers: int, bucket_cap_mb: float) -> tuple[float, int]:
        config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                          num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=kv,
                                          max_position_embeddings=16, tie_word_embeddings=m.tied)
        torch.manual_seed(0)
        with torch.device(device):
            model = transformers.LlamaForCausalLM(config).to(dtype)
        model.train()
        if s.ojas_attention or s.ojas_loss:
            optimize_model(model, checkpoint=s.checkpoint, attention=s.ojas_attention, cross_entropy=s.ojas_loss,
                           rms_norm=s.ojas_rms_norm, swiglu=s.ojas_swiglu)
        elif s.checkpoint:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        cls, kwargs = ((torch.optim.SGD, dict(lr=1e-3)) if s.optimizer == "sgd" else
                       (torch.optim.AdamW, dict(lr=1e-4, weight_decay=0.1)))
        opt = (InBackwardOptimizer(model.parameters(), cls, bucket_cap_mb=bucket_cap_mb, **kwargs) if s.fused
               else cls(model.parameters(), **kwargs))
        ids = torch.randint(0, 128, (s.batch, 16), device=device)

        def run() -> None:
            model(input_ids=ids, labels=ids).loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        seconds = _median_seconds(run, device, repeats, warmup=3)
        if s.fused:
            opt.remove_hooks()
        return seconds, sum(1 for _ in model.parameters())

    cap = BUCKET_CAP_BYTES / 2**20
    (one, params), (three, _) = step_seconds(1, cap), step_seconds(3, cap)
    per_bucket = 0.0
    if s.fused:  # one bucket per parameter (cap 0) against one bucket for all
        per_bucket = max(0.0, (step_seconds(1, 0.0)[0] - one) / (params - 1))
    return one, three, per_bucket


def measure(m: Model, s: Setting, device: Any = None, repeats: int = 5) -> Measured:
    """Every part of :func:`predict_step_seconds` for this model and setting, on ``device``
    (default CUDA if available): products, attention, update, host."""
    import torch

    device = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = _torch_dtype(s)
    out = Measured(device=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu")
    out.product_seconds = time_products(products(m, s), dtype, device, repeats)
    out.attention_forward, out.attention_step = _time_attention(m, s, dtype, device, repeats)
    out.update_per_parameter = _time_update(s, dtype, device, repeats)
    out.host_step_1, out.host_step_3, out.host_per_bucket = time_host(m, s, device)
    return out


def _buckets(m: Model, s: Setting) -> int:
    """InBackwardOptimizer's bucket updates in one step: the gradient bytes over the cap (at
    least one); 1 for the standard loop's single step."""
    if not s.fused:
        return 1
    return max(1, -(-m.params() * DTYPE_BYTES[s.dtype] // BUCKET_CAP_BYTES))


def predict_step_seconds(m: Model, s: Setting, measured: Measured) -> dict[str, float]:
    """The parts and the step's predicted seconds (``step``), from :func:`measure`'s parts."""
    product_time = sum(measured.product_seconds[(p.m, p.k, p.n, p.layout)] * p.count for p in products(m, s))
    attention_time = m.layers * (measured.attention_step + (measured.attention_forward if s.checkpoint else 0.0))
    update_time = m.params() * measured.update_per_parameter
    device = product_time + attention_time + update_time
    per_layer = (measured.host_step_3 - measured.host_step_1) / 2
    host = measured.host_step_1 + (m.layers - 1) * per_layer + (_buckets(m, s) - 1) * measured.host_per_bucket
    return dict(products=product_time, attention=attention_time, update=update_time, device=device, host=host,
                step=max(device, host))
