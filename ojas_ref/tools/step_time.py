"""The time of one training step, predicted from steps of the same model at two small depths.

:func:`ojas_ref.tools.throughput.predict_time` divides the step's FLOPs by one GEMM rate:
a bound, which a host-bound step (a 1B model in bf16 on an H200: 14-35% of the product
rate, ojas_ref/tools/h200_records.py) misses by a factor of 3 to 7, and a sum of the step's kernels
timed one by one misses too (it has no host, and the host and device overlap in part: 0.67-1.73x
of the recorded tokens/s on the H200, 2026-12-01, ``git show 9d4109c:benchmarks/RESULTS.md``).
This module times instead the training step of
the model's own width (hidden, heads, MLP, vocabulary, batch, sequence; the setting's dtype,
optimizer, update in backward, checkpointing or offload, host state, ojas kernels) at two depths
``a < b`` on the device, interleaved, and extrapolates linearly in the decoder layers:

    step(L) = step(a) + (L - a) * (step(b) - step(a)) / (b - a)

Why linear: every decoder layer runs the same kernels and the same host code (its products,
attention, norms, its parameters' updates and buckets), and the rest of the step (embedding,
final norm, head and loss, the optimizer's per-step work) does not depend on L; the overlap of
host and device inside a layer is the same at any depth, so the timed steps carry it.

Not modelled: what changes with depth other than the layer count (the allocator near the
device's capacity; host-state streaming and offload copies, timed at the shallow depths,
whose overlap with the deeper model's compute can differ). Nothing here is proved; how close
the prediction comes is what benchmarks/bench_step_time.py measures on the H200, the full
model's step timed in the same run beside it.
"""

from __future__ import annotations

import gc
import statistics
import time
from dataclasses import dataclass
from typing import Any

from ojas_ref.memory import Model, Setting

#: the recipe's fields that make :func:`build` call ``optimize_model``
_PRIMITIVES = ("attention", "linear_cross_entropy", "rms_norm", "swiglu", "rope", "relu_mask", "sparse_embedding")

__all__ = ["DEPTHS", "Measured", "build", "depths_for", "measure", "predict_step_seconds", "time_steps"]

#: the two depths timed by default (clamped to the model's own layers by :func:`depths_for`)
DEPTHS = (2, 10)


@dataclass
class Measured:
    """Median seconds of one training step at each timed depth, on ``device``."""

    device: str
    depths: tuple[int, ...]
    seconds: tuple[float, ...]


def depths_for(m: Model, depths: tuple[int, int] = DEPTHS) -> tuple[int, ...]:
    """The depths to time for ``m``: ``depths`` clamped to its layers (one depth when it has one)."""
    a, b = depths
    if not 1 <= a < b:
        raise ValueError(f"depths must be two layer counts 1 <= a < b, got {depths}")
    b = min(b, m.layers)
    a = min(a, b - 1)
    return (b,) if a < 1 else (a, b)


def build(m: Model, s: Setting, layers: int, device: Any) -> tuple[Any, Any]:
    """(model, optimizer): a ``LlamaForCausalLM`` of ``m``'s width with ``layers`` decoder layers,
    in the setting's dtype, set up as the setting's recipe trains it: ``optimize_model`` with its
    model options (:meth:`~ojas_ref.recipe.MemoryRecipe.model_options`) where it names a primitive,
    or Hugging Face's non-reentrant checkpointing for the standard loop (``recipe.checkpoint=True``
    without a primitive; ``"offload"`` and ``checkpoint_split`` are optimize_model's and are refused
    there); ``InBackwardOptimizer`` with ``recipe.in_backward`` (its
    :meth:`~ojas_ref.recipe.MemoryRecipe.optimizer_options`). SGD lr 1e-3, AdamW lr 1e-4 weight
    decay 0.1."""
    import torch
    import transformers

    from ojas_ref import InBackwardOptimizer, optimize_model

    transformers.logging.set_verbosity_error()
    config = transformers.LlamaConfig(
        vocab_size=m.vocab,
        hidden_size=m.hidden,
        intermediate_size=m.intermediate,
        num_hidden_layers=layers,
        num_attention_heads=m.heads,
        num_key_value_heads=m.kv_heads,
        head_dim=m.head_dim,
        max_position_embeddings=s.seq,
        tie_word_embeddings=m.tied,
        attention_dropout=0.0,
    )
    dtype = s.dtype
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # built in its dtype: no float32 copy of a large model
    try:
        with torch.device(device):
            model = transformers.LlamaForCausalLM(config).to(dtype)
    finally:
        torch.set_default_dtype(default)
    model.config.use_cache = False
    model.train()
    r = s.recipe
    if any(r.model_options()[name] for name in _PRIMITIVES):
        optimize_model(model, **r.model_options())
    elif r.checkpoint == "offload" or r.checkpoint_split:
        what = (
            "offload is optimize_model(checkpoint='offload')"
            if r.checkpoint == "offload"
            else ("split is optimize_model(checkpoint_split=True)")
        )
        raise ValueError(f"{what}: set a primitive of the recipe with it")
    elif r.checkpoint:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    cls, kwargs = (
        (torch.optim.SGD, dict(lr=1e-3))
        if s.optimizer == "sgd"
        else (torch.optim.AdamW, dict(lr=1e-4, weight_decay=0.1))
    )
    if r.in_backward:
        opt = InBackwardOptimizer(model.parameters(), cls, **r.optimizer_options(), **kwargs)
    else:
        opt = cls(model.parameters(), **kwargs)
    return model, opt


def time_steps(
    m: Model, s: Setting, depths: tuple[int, ...], device: Any = None, steps: int = 16, warmup: int = 2
) -> Measured:
    """Median seconds of a synchronised training step (forward, backward, ``step()``,
    ``zero_grad()``) of :func:`build`'s model at each of ``depths``, the models built together
    and stepped in interleaved rounds (the host's speed drifts: each depth sees the same)."""
    import torch

    if steps < 1 or warmup < 0:
        raise ValueError(f"steps must be >= 1 and warmup >= 0, got steps={steps}, warmup={warmup}")
    device = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    g = torch.Generator(device="cpu").manual_seed(1)
    ids = [torch.randint(0, m.vocab, (s.batch, s.seq), generator=g).to(device) for _ in range(2)]
    runs = [build(m, s, d, device) for d in depths]

    def step(model: Any, opt: Any, i: int) -> None:
        model(input_ids=ids[i % 2], labels=ids[i % 2]).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    times: list[list[float]] = [[] for _ in depths]
    try:
        for i in range(warmup + steps):
            for j in range(len(runs)):
                k = (i + j) % len(runs)
                sync()
                t0 = time.perf_counter()
                step(*runs[k], i)
                sync()
                if i >= warmup:
                    times[k].append(time.perf_counter() - t0)
    finally:
        for _, opt in runs:
            if hasattr(opt, "remove_hooks"):
                opt.remove_hooks()
        del runs
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return Measured(device=name, depths=tuple(depths), seconds=tuple(statistics.median(t) for t in times))


def measure(m: Model, s: Setting, device: Any = None, steps: int = 16, depths: tuple[int, int] = DEPTHS) -> Measured:
    """:func:`time_steps` at :func:`depths_for` ``m``: what :func:`predict_step_seconds` needs."""
    return time_steps(m, s, depths_for(m, depths), device, steps)


def predict_step_seconds(m: Model, measured: Measured) -> dict[str, float]:
    """``per_layer`` (the slope between the two timed depths), ``rest`` (the step less its
    layers) and ``step``: the module docstring's extrapolation to ``m.layers``."""
    if len(measured.depths) == 1:
        (d,), (t,) = measured.depths, measured.seconds
        if d != m.layers:
            raise ValueError(f"one timed depth ({d}) extrapolates only to itself, not to {m.layers} layers")
        return dict(per_layer=t / d, rest=0.0, step=t)
    (a, b), (ta, tb) = measured.depths, measured.seconds
    per_layer = (tb - ta) / (b - a)
    rest = ta - a * per_layer
    return dict(per_layer=per_layer, rest=rest, step=rest + m.layers * per_layer)
