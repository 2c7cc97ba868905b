"""``ojas plan``: predict the peak of device memory of a training step before running it.

``plan(model, setting)`` returns, without allocating anything on a device, the bytes
alive at each candidate point of one steady-state step of Hugging Face's
``LlamaForCausalLM`` (``model(input_ids=ids, labels=ids).loss.backward(); opt.step();
opt.zero_grad(set_to_none=True)``, as benchmarks/bench_optimize_model.py runs it), broken
down by tensor class, and the largest of them: the predicted
``torch.cuda.max_memory_allocated``. Every term is one function below whose docstring
says where its count comes from.

What is modelled: weights, optimizer state and gradients in the run's dtype (no
autocast, no master weights); SGD without momentum (the benchmark's ``lr`` only) or
AdamW (torch's foreach path); the standard loop or :class:`ojas_ref.InBackwardOptimizer`
(``bucket_cap_mb``, 64 by default); per-layer non-reentrant checkpointing, the layer whole or split in
its attention and MLP halves (``split``); SDPA attention and
Hugging Face's loss, or ``optimize_model``'s ojas attention and
:func:`ojas_ref.linear_cross_entropy` (together, as ``--ojas``, or apart); and two ways of
moving bytes to host memory (:attr:`Plan.host`, printed as "host memory"): checkpoints
offloaded to pinned host memory (``offload``, ``optimize_model(checkpoint="offload")``) and
the fused optimizer's state on the host (``host_state``, ``InBackwardOptimizer(
state_device="cpu")``; with ``state_slice_mb`` the parameters whose state exceeds it updated
slice by slice, :func:`sliced`). Both are checked against the H200 records of
benchmarks/bench_memory.py (:data:`MEMORY_RECORDS_PATHS`, tests/test_plan.py), whole-parameter
and sliced (``state_slice_mb=128``) updates. Not modelled (yet): gradient
accumulation, reversible stacks, autocast, padding masks, and the families other than
Llama and Mistral without a sliding window (:data:`FAMILIES`; :data:`UNMODELLED` says what each other
family of optimize_model's tests would need). The time of a step: ojas_ref/tools/throughput.py (``--time``).

The per-tensor counts were read off the modules' autograd graphs (``saved_tensors_hooks``
on a small ``LlamaForCausalLM`` on the CPU, transformers 5.24) and the kernels' source.
tests/test_plan.py checks the peaks against the 16 recorded on an H200 in each of
benchmarks/results/bench_optimize_model_h200*.json (errors -1.0% to +1.6%), and the
phases against the live bytes of real CPU training steps (standard and fused loops,
checkpointing, bf16, GQA, tied heads; SDPA and Hugging Face's loss: the ojas loss runs
another algorithm on the CPU, and only the float32 ojas attention saves there what its
kernel saves). The cuBLAS workspace and the float32 partial sums
of the embedding's backward are CUDA's and rest on the H200 records alone.

:func:`plot_plan` (``ojas plan --plot FILE.png``) draws a plan as a stacked bar per phase,
by :func:`tensor_class`, beside the measured peak where the setting was recorded.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

__all__ = ["FAMILIES", "PRESETS", "UNMODELLED", "Model", "Phase", "Plan", "Setting", "Term", "fit_batch", "fit_preset", "fit_table",
           "load_memory_records", "load_records", "measured_peak", "memory_record_setting", "parse_bytes", "plan",
           "plot_plan", "preset_model", "record_model", "tensor_class", "with_layers"]

DTYPE_BYTES = {"fp32": 4, "bf16": 2}
OPTIMIZERS = ("sgd", "adamw")
#: torch's default cuBLAS workspace on compute capability 9.x (one per handle and stream,
#: allocated through the caching allocator, so counted by max_memory_allocated)
CUBLAS_WORKSPACE_BYTES = 32 * 2**20
#: handles that run products in a step: the main thread (forward, optimizer step) and the
#: autograd engine's device thread (backward)
CUBLAS_HANDLES = 2
#: InBackwardOptimizer's default ``bucket_cap_mb``
BUCKET_CAP_MB = 64.0
#: its bytes (:func:`bucket_cap_bytes` of the default setting)
BUCKET_CAP_BYTES = int(BUCKET_CAP_MB * 2**20)
#: a ``state_slice_mb`` to plan with (``ojas plan --host-state --state-slice-mb 128``; the option
#: is off by default in InBackwardOptimizer; bench_memory's host-state rows use it)
STATE_SLICE_MB = 128.0
#: InBackwardOptimizer's ``_SLICE_ALIGN``: a slice's length in elements is a multiple of it
SLICE_ALIGN = 64
#: ``LinearCrossEntropyConfig.workspace_fraction`` of kernels/ojas_kernels/linear_cross_entropy.py
LCE_WORKSPACE_FRACTION = 0.14
#: the kernel's floor on its workspace budget (``16 << 20`` in ``_three_products``)
LCE_WORKSPACE_FLOOR = 16 * 2**20
#: the bound kernels/ojas_kernels/linear_cross_entropy.py states and benchmarks/RESULTS.md measures
#: (1.128-1.139): the loss's peak above its inputs is at most this times the gradients
LCE_PEAK_OVER_GRADIENTS = 1.15
_RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
#: the H200 records of benchmarks/bench_optimize_model.py: before the fused RMSNorm and SwiGLU
#: existed (its ojas modes: attention and loss), and with everything optimize_model applies
RECORDS_PATHS = (_RESULTS / "bench_optimize_model_h200.json", _RESULTS / "bench_optimize_model_h200_fused.json",
                 _RESULTS / "bench_optimize_model_h200_rope.json")
RECORDS_PATH = RECORDS_PATHS[-1]
#: the H200 records of benchmarks/bench_memory.py: the 1.06B decoder with its memory techniques
#: (offload, host state), and the presets at scale (llama-0.5b to llama-13b, llama-70b, and
#: llama-70b's shape at 23 and 58 layers: 20.2B and 50.2B parameters), and fp32 AdamW with the state
#: on the host in 128 MiB slices, split checkpoints offloaded in its "all" row (its host bytes: the
#: two inputs per layer), and issue 14's one run (32 MiB buckets: offload, head update, split, host state)
MEMORY_RECORDS_PATHS = (_RESULTS / "bench_memory_h200.json", _RESULTS / "bench_memory_h200_presets.json",
                        _RESULTS / "bench_memory_h200_host_state_sliced128_pool_split.json",
                        _RESULTS / "bench_memory_h200_one_run.json")


# --------------------------------------------------------------------------
# The model and the setting
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class Model:
    """The shape of a Llama-style decoder (``LlamaForCausalLM``: RMSNorm, rotary
    attention with ``kv_heads`` key/value heads, SwiGLU MLP, no biases)."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tied: bool = False
    head_dim: Optional[int] = None
    name: str = "custom"
    source: str = ""

    def __post_init__(self) -> None:
        for field_name in ("hidden", "layers", "heads", "kv_heads", "intermediate", "vocab"):
            value = getattr(self, field_name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{field_name} must be an int >= 1, got {value!r}")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        if self.head_dim is None:
            if self.hidden % self.heads:
                raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads}), "
                                 "or head_dim given")
            object.__setattr__(self, "head_dim", self.hidden // self.heads)

    @property
    def q_width(self) -> int:
        """Width of the queries and of the attention output: heads x head_dim."""
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """Width of the keys and of the values: kv_heads x head_dim."""
        return self.kv_heads * self.head_dim

    def layer_params(self) -> int:
        """Parameters of one decoder layer: q, k, v, o projections, gate, up and down
        projections, two RMSNorm weights (``LlamaDecoderLayer``)."""
        attention = self.hidden * (2 * self.q_width + 2 * self.kv_width)
        mlp = 3 * self.hidden * self.intermediate
        return attention + mlp + 2 * self.hidden

    def head_params(self) -> int:
        """The output layer's parameters: 0 when tied to the embedding."""
        return 0 if self.tied else self.vocab * self.hidden

    def params(self) -> int:
        """All parameters: embedding, layers, final norm, head (if not tied)."""
        return self.vocab * self.hidden + self.layers * self.layer_params() + self.hidden + self.head_params()

    @classmethod
    def from_config(cls, config: Any, name: str = "custom") -> "Model":
        """From a Hugging Face config (``LlamaConfig`` or any object or mapping with its
        attribute names). ``NotImplementedError`` naming the family and what the planner does
        not model for a ``model_type`` outside :data:`FAMILIES` (the families of
        tests/test_optimize_huggingface.py are in :data:`UNMODELLED`, each with its reason), for
        Mistral's sliding window and for biases (``attention_bias``, ``mlp_bias``); a config
        without ``model_type`` is read as a Llama's."""
        get = config.get if isinstance(config, Mapping) else (lambda key, default=None: getattr(config, key, default))
        family = get("model_type")
        if family is not None and family not in FAMILIES:
            why = UNMODELLED.get(family, "not a Llama-shaped decoder")
            raise NotImplementedError(f"model_type {family!r} is not modelled by the planner ({why}); it models "
                                      f"{' and '.join(FAMILIES)} decoders")
        if family == "mistral" and get("sliding_window") is not None:
            raise NotImplementedError(f"mistral with sliding_window={get('sliding_window')} is not modelled by the "
                                      "planner (the attention mask Hugging Face builds for the window); it models "
                                      "mistral without a window (sliding_window=None)")
        for key in ("attention_bias", "mlp_bias"):
            if get(key, False):
                raise NotImplementedError(f"config.{key}=True: biases are not modelled by the planner")
        values = {}
        for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size"):
            if get(key) is None:
                raise ValueError(f"config has no {key} (a LlamaConfig-like config is needed)")
            values[key] = get(key)
        heads = values["num_attention_heads"]
        return cls(hidden=values["hidden_size"], layers=values["num_hidden_layers"], heads=heads,
                   kv_heads=get("num_key_value_heads") or heads, intermediate=values["intermediate_size"],
                   vocab=values["vocab_size"], tied=bool(get("tie_word_embeddings", False)),
                   head_dim=get("head_dim"), name=name)

    @classmethod
    def from_module(cls, module: Any) -> "Model":
        """From a Hugging Face ``PreTrainedModel`` on any device (the meta device included):
        its config, refused when the module's parameter count is not the Llama formula's
        (another architecture: biases, other norms or MLPs are not modelled)."""
        config = getattr(module, "config", None)
        if config is None or not hasattr(module, "parameters"):
            raise TypeError(f"model must be a Hugging Face PreTrainedModel (with .config), got {type(module).__name__}")
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        model = cls.from_config(text, name=getattr(text, "model_type", None) or "custom")
        count = sum(p.numel() for p in module.parameters())
        if count != model.params():
            raise NotImplementedError(f"the model has {count} parameters, a Llama decoder of its config "
                                      f"{model.params()}: its architecture is not modelled")
        return model


#: the Hugging Face families the planner models: ``LlamaForCausalLM``'s modules and tensors
#: (tests/test_plan.py checks a CPU training step of each against the plan)
FAMILIES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM, without a sliding window"}
#: families that optimize_model handles (tests/test_optimize_huggingface.py) and the planner does
#: not model, with what it would have to model
UNMODELLED = {
    "qwen2": "the q/k/v projections' biases",
    "qwen3": "the per-head RMSNorms of the queries and keys (q_norm, k_norm)",
    "gemma2": "the soft-capped attention, which optimize_model leaves to eager attention (a [seq, seq] score "
              "matrix per head), four RMSNorms per layer, a GeGLU MLP",
    "gemma3_text": "four RMSNorms per layer and per-head query and key norms, a GeGLU MLP, local and global "
                   "attention layers",
    "gemma3": "four RMSNorms per layer and per-head query and key norms, a GeGLU MLP, local and global attention "
              "layers",
    "phi3": "the fused qkv_proj and gate_up_proj, the partial rotary embedding that optimize_model leaves alone",
    "gpt2": "LayerNorm, a two-matrix GELU MLP, learned position embeddings, Conv1D layers, attention dropout",
}


def with_layers(model: Model, layers: int) -> Model:
    """``model``'s shape with ``layers`` decoder layers (``ojas plan --layers``; the 20B and 50B
    models of benchmarks/bench_memory.py's ``--preset llama-70b --layers N``)."""
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
        raise ValueError(f"layers must be an int >= 1, got {layers!r}")
    return replace(model, layers=layers, name=f"{model.name}@{layers}", source=f"{model.name} with {layers} layers")


#: Llama-shaped presets, smallest first (the family ``--fit`` searches).
PRESETS: dict[str, Model] = {m.name: m for m in (
    Model(896, 24, 14, 2, 4864, 151936, tied=True, name="llama-0.5b",
          source="the dimensions of Qwen2.5-0.5B's config.json (tied, GQA 14/2), as a LlamaForCausalLM: "
                 "Qwen2's q/k/v biases are left out"),
    Model(2048, 18, 16, 16, 5632, 32000, name="llama-1b",
          source="benchmarks/bench_optimize_model.py's 1.06B model (measured on the H200)"),
    Model(3072, 28, 24, 8, 8192, 128256, tied=True, name="llama-3b",
          source="meta-llama/Llama-3.2-3B's config.json"),
    Model(4096, 32, 32, 32, 11008, 32000, name="llama-7b", source="meta-llama/Llama-2-7b-hf's config.json"),
    Model(5120, 40, 40, 40, 13824, 32000, name="llama-13b", source="meta-llama/Llama-2-13b-hf's config.json"),
    Model(8192, 80, 64, 8, 28672, 32000, name="llama-70b", source="meta-llama/Llama-2-70b-hf's config.json"),
)}


@dataclass(frozen=True)
class Setting:
    """A training setting. ``ojas_attention`` / ``ojas_loss`` / ``ojas_rms_norm`` /
    ``ojas_swiglu``: what ``optimize_model`` applies (``attention=`` / ``cross_entropy=`` /
    ``rms_norm=`` / ``swiglu=``, the fused kernels on CUDA); ``fused``: the optimizer runs in
    backward (``InBackwardOptimizer``, buckets of ``bucket_cap_mb``, 64 MiB by default);
    ``checkpoint``: per-layer non-reentrant activation checkpointing; ``split`` (needs
    ``checkpoint``): ``optimize_model(checkpoint_split=True)``, each layer checkpointed as two
    segments, its attention half and its MLP half (:func:`checkpoints_per_layer`,
    :func:`recomputed_mlp_half_bytes`, :func:`recomputed_attention_half_bytes`).

    ``offload`` (needs ``checkpoint``): ``optimize_model(checkpoint="offload")``
    (ojas_ref/nn/offload.py), each checkpointed layer's input held in pinned host
    memory between forward and backward; ``host_state`` (needs ``fused``):
    ``InBackwardOptimizer(state_device="cpu")``, the optimizer state in host memory, streamed
    to the device bucket by bucket. Both default off; their H200 records are
    :data:`MEMORY_RECORDS_PATHS`' (:func:`offloaded_checkpoints_device_bytes`,
    :func:`bucket_state_bytes`). ``state_slice_mb`` (with ``host_state``): the optimizer's
    ``state_slice_mb``, a parameter whose state exceeds it updated slice by slice
    (:func:`sliced`); None (the default, and the records measured before slicing existed):
    whole parameters. ``ojas plan --host-state`` uses :data:`STATE_SLICE_MB`, the optimizer's
    default."""

    dtype: str = "bf16"
    optimizer: str = "adamw"
    fused: bool = False
    batch: int = 1
    seq: int = 2048
    checkpoint: bool = False
    ojas_attention: bool = False
    ojas_loss: bool = False
    ojas_rms_norm: bool = False
    ojas_swiglu: bool = False
    #: the ojas attention output copied to [batch, seq, heads, dim] (the adapter before the
    #: kernel wrote that layout itself): set for the record files measured then, not for a plan
    ojas_attention_copy: bool = False
    #: checkpoints in pinned host memory (``optimize_model(checkpoint="offload")``); needs checkpoint
    offload: bool = False
    #: the optimizer state in host memory (``InBackwardOptimizer(state_device="cpu")``); needs fused
    host_state: bool = False
    #: the head updated chunk by chunk inside the loss's backward
    #: (``InBackwardOptimizer(head_weight=...)``): needs fused, ojas_loss, plain SGD, an untied head
    head_update: bool = False
    #: with host_state: InBackwardOptimizer's ``state_slice_mb`` (None: whole parameters, as recorded
    #: before it existed)
    state_slice_mb: Optional[float] = None
    #: each checkpointed layer as two segments, attention half and MLP half
    #: (``optimize_model(checkpoint_split=True)``); needs checkpoint
    split: bool = False
    #: InBackwardOptimizer's ``bucket_cap_mb`` (with fused: a bucket is updated when its gradients reach it)
    bucket_cap_mb: float = BUCKET_CAP_MB

    def __post_init__(self) -> None:
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"dtype must be one of {tuple(DTYPE_BYTES)}, got {self.dtype!r}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        for name in ("batch", "seq"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        for name in ("fused", "checkpoint", "ojas_attention", "ojas_loss", "ojas_rms_norm", "ojas_swiglu",
                     "ojas_attention_copy", "offload", "host_state", "head_update", "split"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {type(getattr(self, name)).__name__}")
        if isinstance(self.bucket_cap_mb, bool) or not isinstance(self.bucket_cap_mb, (int, float)):
            raise TypeError(f"bucket_cap_mb must be a float, got {type(self.bucket_cap_mb).__name__}")
        if not (math.isfinite(self.bucket_cap_mb) and self.bucket_cap_mb >= 0):
            raise ValueError(f"bucket_cap_mb must be a finite float >= 0, got {self.bucket_cap_mb}")
        if self.split and not self.checkpoint:
            raise ValueError("split=True needs checkpoint=True: it checkpoints each layer as two segments")
        if self.offload and not self.checkpoint:
            raise ValueError("offload=True needs checkpoint=True: offload moves the checkpoints (the layer inputs "
                             "that activation checkpointing keeps) to host memory")
        if self.host_state and not self.fused:
            raise ValueError("host_state=True needs fused=True: the optimizer state is streamed from the host only "
                             "by InBackwardOptimizer(state_device=\"cpu\")")
        if self.state_slice_mb is not None:
            if isinstance(self.state_slice_mb, bool) or not isinstance(self.state_slice_mb, (int, float)):
                raise TypeError(f"state_slice_mb must be None or a float, got {type(self.state_slice_mb).__name__}")
            if not (math.isfinite(self.state_slice_mb) and self.state_slice_mb > 0):
                raise ValueError(f"state_slice_mb must be None or a finite float > 0, got {self.state_slice_mb}")
            if not self.host_state:
                raise ValueError("state_slice_mb needs host_state=True: only InBackwardOptimizer(state_device=\"cpu\") "
                                 "updates a parameter slice by slice")
        if self.head_update and not (self.fused and self.ojas_loss and self.optimizer == "sgd"):
            raise ValueError("head_update=True needs fused=True, ojas_loss=True and optimizer='sgd': the head is "
                             "updated inside the linear cross-entropy's backward by InBackwardOptimizer(head_weight="
                             "...), plain SGD only")

    @property
    def size(self) -> int:
        """Bytes per element of weights, gradients, optimizer state and activations."""
        return DTYPE_BYTES[self.dtype]

    @property
    def tokens(self) -> int:
        """Tokens per step: batch x sequence."""
        return self.batch * self.seq

    @property
    def mode(self) -> str:
        """The benchmark's name of the setting (standard, standard+ckpt, ojas, ojas+ckpt), or a
        description of a mix it did not run; ``+split``, ``+offload``, ``+host-state`` and
        ``+head-update`` appended when on (bench_optimize_model's records have none of them), and
        the bucket size when fused and not the default 64 MiB."""
        pieces = (("ojas-attention", self.ojas_attention), ("ojas-loss", self.ojas_loss),
                  ("ojas-rms-norm", self.ojas_rms_norm), ("ojas-swiglu", self.ojas_swiglu), ("fused", self.fused))
        host = "".join(f"+{name}" for name, on in (("split", self.split), ("offload", self.offload),
                                                   ("host-state", self.host_state),
                                                   ("head-update", self.head_update)) if on)
        if self.fused and self.bucket_cap_mb != BUCKET_CAP_MB:
            host += f"+bucket-{self.bucket_cap_mb:g}MiB"
        if all(on for _, on in pieces) or not any(on for _, on in pieces):
            return ("ojas" if self.fused else "standard") + ("+ckpt" if self.checkpoint else "") + host
        parts = [name for name, on in pieces + (("ckpt", self.checkpoint),) if on]
        return "+".join(parts) + host


# --------------------------------------------------------------------------
# The terms (bytes)
# --------------------------------------------------------------------------

def weights_bytes(m: Model, s: Setting) -> int:
    """Parameters x dtype size (:meth:`Model.params`)."""
    return m.params() * s.size


def optimizer_state_bytes(m: Model, s: Setting) -> int:
    """AdamW: exp_avg and exp_avg_sq, two parameter-sized tensors in the parameters' dtype
    (torch.optim.AdamW). SGD without momentum keeps none."""
    return 2 * m.params() * s.size if s.optimizer == "adamw" else 0


def state_per_gradient(s: Setting) -> int:
    """Optimizer state bytes per gradient byte: AdamW's two moments (2), SGD without momentum (0)."""
    return 2 if s.optimizer == "adamw" else 0


def bucket_state_bytes(m: Model, s: Setting, gradient_bytes: int) -> int:
    """With ``host_state`` (``InBackwardOptimizer(state_device="cpu")``), the optimizer state on
    the device during the backward: the state of the parameters in the group's bucket, its
    gradients' ``gradient_bytes`` x :func:`state_per_gradient`. ``_stage`` starts copying a
    parameter's state to the device when it joins its bucket, ``_swap_in`` puts the copies in
    the state for the bucket's step, ``_swap_out`` copies them back to the host and drops them
    at ``_flush``: between updates no state is on the device, during the backward the state of
    about one bucket per group (the planner models one group). The whole
    :func:`optimizer_state_bytes` is in host memory (:attr:`Plan.host`). A prediction; no
    H200 record of it yet."""
    return state_per_gradient(s) * gradient_bytes if s.host_state else 0


def slice_elements(s: Setting) -> int:
    """With ``state_slice_mb``, the elements of one slice: half ``state_slice_mb`` MiB (two slices
    are in flight) over the state's bytes per element (:func:`state_per_gradient` x size), rounded
    down to a multiple of SLICE_ALIGN (``InBackwardOptimizer._slice_length`` in the steady state,
    the state existing)."""
    per_element = state_per_gradient(s) * s.size
    if s.state_slice_mb is None or per_element == 0:
        return 0
    return max(SLICE_ALIGN, max(1, int(s.state_slice_mb * 2**20)) // 2 // per_element // SLICE_ALIGN * SLICE_ALIGN)


def sliced(s: Setting, elements: int) -> bool:
    """Whether a parameter of ``elements`` is updated slice by slice (``InBackwardOptimizer(
    state_device="cpu", state_slice_mb=...)``, :meth:`InBackwardOptimizer._step_sliced`): host
    state, a slice size, state (AdamW; SGD without momentum keeps none) larger than it. It is then
    not staged with its bucket: its state is on the device one slice at a time, at its update."""
    n = slice_elements(s)
    return (s.host_state and n > 0 and elements * state_per_gradient(s) * s.size > s.state_slice_mb * 2**20
            and elements > n)


def slice_state_bytes(m: Model, s: Setting) -> int:
    """The state on the device during a sliced update: two slices' (two device buffers per state
    tensor, the slices alternating between them: one stepped while the next is copied in),
    2 x :func:`slice_elements` x the state's bytes per element (an upper bound for a parameter of
    fewer than two whole slices)."""
    return 2 * slice_elements(s) * state_per_gradient(s) * s.size


def slice_temporary_bytes(m: Model, s: Setting) -> int:
    """One slice's step temporaries: foreach AdamW's sqrt of the slice of exp_avg_sq (one buffer of
    the slice's size). SGD: none."""
    return slice_elements(s) * s.size if s.optimizer == "adamw" else 0


def step_temporary_bytes(m: Model, s: Setting) -> int:
    """The standard loop's ``opt.step()``: foreach AdamW's ``_foreach_sqrt`` of exp_avg_sq
    (one parameter-sized buffer; the other updates are in place). SGD: none."""
    return m.params() * s.size if s.optimizer == "adamw" else 0


def rmsnorm_saved_bytes(m: Model, s: Setting) -> int:
    """What ``LlamaRMSNorm`` saves: its input in float32 (``pow`` and ``mul``; the
    ``.to(float32)`` copy, or the input itself in float32), ``rsqrt`` of the variance
    ([tokens, 1] float32), ``x * rsqrt`` in the model dtype (``weight * ...``) and its
    output (saved by the next projection): (4 + 2 size) x tokens x hidden + 4 tokens.
    The fused ``ojas_ref.rms_norm`` (``ojas_rms_norm``) saves its input as it is and the
    float32 rstd per row (``tests/test_rms_norm.py`` checks what it saves), and its output
    is saved by the next projection: 2 size x tokens x hidden + 4 tokens."""
    per_element = 2 * s.size if s.ojas_rms_norm else 4 + 2 * s.size
    return per_element * s.tokens * m.hidden + 4 * s.tokens


def attention_saved_bytes(m: Model, s: Setting) -> int:
    """What attention saves: the rotated queries and keys and the values (the rotary
    ``q * cos + rotate_half(q) * sin`` saves only cos and sin: they need no gradient), the
    output, and the float32 log-sum-exp [batch, heads, seq] (SDPA's flash /
    memory-efficient kernels and the ojas kernel alike). SDPA and the ojas kernel (``seq_major``)
    return their output in the [batch, seq, heads, dim] layout, so Hugging Face's
    ``transpose(1, 2).contiguous()`` is free and o_proj saves the same tensor. (With
    ``ojas_attention_copy``, as measured before the kernel wrote that layout, the output was
    copied: one more [tokens, q width] tensor.)  The fused RoPE (``optimize_model(rope=True)``)
    saves what Hugging Face's saves (cos and sin), so it is no term of its own."""
    out_copies = 2 if s.ojas_attention and s.ojas_attention_copy else 1
    return (s.size * s.tokens * ((1 + out_copies) * m.q_width + 2 * m.kv_width)
            + 4 * s.batch * m.heads * s.seq)


def mlp_saved_bytes(m: Model, s: Setting) -> int:
    """``LlamaMLP``: gate output (SiLU's input), SiLU output and up output (the product's
    factors), the product (down_proj's input): 4 x tokens x intermediate. With
    ``ojas_swiglu`` the SiLU output is recomputed in backward, not saved
    (Ojas.SwiGLU.Backward.swiglu_backward_eq_vjp; ``tests/test_swiglu.py`` checks that only
    gate and up are saved): 3 x tokens x intermediate."""
    return (3 if s.ojas_swiglu else 4) * s.size * s.tokens * m.intermediate


def layer_saved_bytes(m: Model, s: Setting) -> int:
    """Saved for backward by one ``LlamaDecoderLayer`` (two norms, attention, MLP; the
    residual additions save nothing): in float32 with SDPA, 10 x tokens x hidden + 4 x
    tokens x intermediate elements."""
    return 2 * rmsnorm_saved_bytes(m, s) + attention_saved_bytes(m, s) + mlp_saved_bytes(m, s)


def checkpoint_bytes(m: Model, s: Setting) -> int:
    """Non-reentrant checkpointing keeps each segment's input: layers x
    :func:`checkpoints_per_layer` x tokens x hidden. With ``offload`` these bytes are in pinned
    host memory (:attr:`Plan.host`), not on the device."""
    return m.layers * checkpoints_per_layer(s) * checkpoint_layer_bytes(m, s)


def checkpoints_per_layer(s: Setting) -> int:
    """Checkpointed segments per layer: the layer (1), or with ``split`` its attention half (input
    x) and its MLP half (input h = x + attention): 2."""
    return 2 if s.split else 1


def checkpoint_layer_bytes(m: Model, s: Setting) -> int:
    """One checkpoint, a segment's input hidden states: size x tokens x hidden."""
    return s.size * s.tokens * m.hidden


def offloaded_checkpoints_device_bytes(m: Model, s: Setting) -> int:
    """With ``offload`` (ojas_ref/nn/offload.py), the segment inputs on the device at
    a time: at most two, min(2, checkpoints) x :func:`checkpoint_layer_bytes`. In the forward, the
    input just packed, whose block ``record_stream`` keeps until its copy to the host has read
    it; in the backward, the input unpacked for the segment being recomputed and the previous
    segment's (the previous layer's, or with ``split`` the same layer's attention half), prefetched
    by the unpack hook. An upper bound of the copies in flight (the H200 records of
    :data:`MEMORY_RECORDS_PATHS` agree within 1.5%, unsplit)."""
    return min(2, m.layers * checkpoints_per_layer(s)) * checkpoint_layer_bytes(m, s)


def recomputed_layer_bytes(m: Model, s: Setting) -> int:
    """A checkpointed layer recomputed in backward saves :func:`layer_saved_bytes`, less its
    input when the first norm saves the input itself, which is then the checkpoint
    (:func:`norm_shared_input_bytes`)."""
    return layer_saved_bytes(m, s) - norm_shared_input_bytes(m, s)


def norm_shared_input_bytes(m: Model, s: Setting) -> int:
    """The bytes of a segment's input that its norm saves as itself (the checkpoint, not a
    recomputed tensor): in float32 models (the norm's ``.to(float32)`` returns it) and with the
    fused RMSNorm, size x tokens x hidden; none otherwise (a float32 copy is saved)."""
    return s.size * s.tokens * m.hidden if s.size == 4 or s.ojas_rms_norm else 0


def recomputed_mlp_half_bytes(m: Model, s: Setting) -> int:
    """With ``split``, the MLP half recomputed in its backward: the post-attention norm's and the
    MLP's saved tensors (:func:`rmsnorm_saved_bytes` + :func:`mlp_saved_bytes`), less the
    segment's input the norm shares; the attention half is recomputed only after it."""
    return rmsnorm_saved_bytes(m, s) + mlp_saved_bytes(m, s) - norm_shared_input_bytes(m, s)


def recomputed_attention_half_bytes(m: Model, s: Setting) -> int:
    """With ``split``, the attention half recomputed in its backward, after the MLP half's saved
    tensors are freed: the input norm's and attention's (:func:`rmsnorm_saved_bytes` +
    :func:`attention_saved_bytes`), less the shared input."""
    return rmsnorm_saved_bytes(m, s) + attention_saved_bytes(m, s) - norm_shared_input_bytes(m, s)


def rotary_bytes(m: Model, s: Setting) -> int:
    """cos and sin [1, seq, head_dim] in the model dtype, shared by the layers (the default
    position ids are one row for the whole batch)."""
    return 2 * s.size * s.seq * m.head_dim


def inputs_bytes(m: Model, s: Setting) -> int:
    """input_ids and the shifted labels, int64."""
    return 2 * 8 * s.tokens


def overhead_bytes(m: Model, s: Setting) -> int:
    """cuBLAS workspaces: CUBLAS_HANDLES x CUBLAS_WORKSPACE_BYTES (64 MiB, the residual of
    the fp32 AdamW standard record over 5 x weights: 64.06 MiB)."""
    return CUBLAS_HANDLES * CUBLAS_WORKSPACE_BYTES


def standard_loss_forward_bytes(m: Model, s: Setting) -> int:
    """Hugging Face's ``ForCausalLMLoss`` in the forward: the logits [tokens, V] in the
    model dtype, their float32 copy (``logits.float()``, none in float32) and
    ``log_softmax``'s float32 output, which cross_entropy saves."""
    return (s.size + (4 if s.size < 4 else 0) + 4) * s.tokens * m.vocab


def standard_loss_backward_bytes(m: Model, s: Setting) -> int:
    """The standard loss's peak, in ``log_softmax``'s backward: its saved output,
    ``nll_loss``'s float32 gradient and its own float32 gradient, 3 x 4 x tokens x V."""
    return 3 * 4 * s.tokens * m.vocab


def standard_loss_logits_gradient_bytes(m: Model, s: Setting) -> int:
    """The gradient of the logits [tokens, V] in the model dtype, the head's backward input
    with the standard loss (none with the linear cross-entropy: it has no logits)."""
    return 0 if s.ojas_loss else s.size * s.tokens * m.vocab


def lce_gradients_bytes(m: Model, s: Setting) -> int:
    """:func:`ojas_ref.linear_cross_entropy` (the kernel's 3-product schedule, reductions
    mean / sum) computes grad_input [tokens, hidden] and grad_weight [V, hidden] in the
    forward and holds them until backward; no logits remain
    (Ojas.CrossEntropy.Gradient.ce_backward_correct: the chunked backward is the gradient)."""
    return s.size * (s.tokens + m.vocab) * m.hidden


def lce_workspace_bytes(m: Model, s: Setting) -> int:
    """One token chunk's logits [n, V] (G written over them), its gathered rows and
    grad_input rows (2 x [n, hidden]) and the float32 loss and lse [tokens]; with
    n = round_down(budget / ((V + 2 hidden) size), 8) and
    budget = max(LCE_WORKSPACE_FRACTION x gradients, 16 MiB), as ``_three_products``
    sizes it when some token is ignored (the last one, whose label is padding). That one
    block suffices is Ojas.CrossEntropy.ChunkedLse.chunked_lse_chunk (lse streamed over
    chunks of any size); the kernel's stated bound, gradients + workspace <=
    LCE_PEAK_OVER_GRADIENTS x gradients, holds whenever the budget is not the floor."""
    budget = max(int(LCE_WORKSPACE_FRACTION * lce_gradients_bytes(m, s)), LCE_WORKSPACE_FLOOR)
    rows = min(max(budget // ((m.vocab + 2 * m.hidden) * s.size) // 8 * 8, 8), s.tokens)
    return rows * s.size * (m.vocab + 2 * m.hidden) + 2 * 4 * s.tokens


def head_gradient_bytes(m: Model, s: Setting) -> int:
    """The output layer's weight gradient [V, hidden] (the embedding's, when tied)."""
    return s.size * m.vocab * m.hidden


def head_updated_first(m: Model, s: Setting) -> bool:
    """Whether InBackwardOptimizer updates (and frees) the head's gradient as soon as it
    exists: the head is untied (a tied weight's hook fires once, after the embedding's
    contribution) and its gradient fills a bucket alone (at least :func:`bucket_cap_bytes`)."""
    return s.fused and not m.tied and head_gradient_bytes(m, s) >= bucket_cap_bytes(s)


def bucket_cap_bytes(s: Setting) -> int:
    """InBackwardOptimizer's ``_bucket_cap_bytes``: ``int(bucket_cap_mb * 2**20)``."""
    return int(s.bucket_cap_mb * 2**20)


def bucket_step_temporary_bytes(m: Model, s: Setting) -> int:
    """InBackwardOptimizer's update of the head's bucket, the first of the backward when
    :func:`head_updated_first`: foreach AdamW's step allocates one buffer of the
    gradient's size (the sqrt of exp_avg_sq); a :func:`sliced` head one of a slice's
    (:func:`slice_temporary_bytes`). SGD, or a head that waits: none."""
    if s.optimizer != "adamw" or not head_updated_first(m, s):
        return 0
    return slice_temporary_bytes(m, s) if sliced(s, m.vocab * m.hidden) else head_gradient_bytes(m, s)


def mlp_backward_transient_bytes(m: Model, s: Setting) -> int:
    """The largest point of a decoder layer's backward, in the MLP: the gradient of the
    product [tokens, I] and the gradients of its two factors (2 x [tokens, I]), less the
    product (freed with down_proj's node). down_proj's weight gradient is counted with
    the gradients (:func:`down_proj_gradient_bytes`, :func:`pending_gradients_bytes`)."""
    return 2 * s.size * s.tokens * m.intermediate


def attention_backward_transient_bytes(m: Model, s: Setting) -> int:
    """With ``split``, the point of a layer's attention backward: the gradient of the attention
    output (o_proj's input gradient, [tokens, q width]), the kernel's dq, dk, dv ([tokens, q + 2 kv
    width], kernels/ojas_kernels/attention.py ``_backward``) and its float32 delta [batch, heads, seq]. A
    prediction from the kernel's allocations (no record isolates this phase)."""
    return s.size * s.tokens * (2 * m.q_width + 2 * m.kv_width) + 4 * s.batch * m.heads * s.seq


def layer_gradients_bytes(m: Model, s: Setting, count: int) -> int:
    """The first ``count`` weight gradients of a layer's backward (:func:`gradient_order`'s layer
    order: down, up, gate, post-attention norm, o, ...)."""
    return sum(gradient_order(m)[-1 - 9:-1][:count]) * s.size


def down_proj_gradient_bytes(m: Model, s: Setting) -> int:
    """down_proj's weight gradient [hidden, I], the first of a layer's backward."""
    return s.size * m.hidden * m.intermediate


def gradient_order(m: Model) -> list[int]:
    """Parameter sizes (elements) in the order backward completes their gradients: the head
    (untied), the final norm, per layer from the last down, up, gate, post-attention norm,
    o, v, k, q, input norm, then the embedding (a tied weight's, summed, last)."""
    layer = [m.hidden * m.intermediate] * 3 + [m.hidden, m.q_width * m.hidden, m.kv_width * m.hidden,
                                               m.kv_width * m.hidden, m.q_width * m.hidden, m.hidden]
    return ([] if m.tied else [m.vocab * m.hidden]) + [m.hidden] + layer * m.layers + [m.vocab * m.hidden]


def bucketed_order(m: Model, s: Setting) -> list[int]:
    """:func:`gradient_order` of the gradients that go through InBackwardOptimizer's buckets:
    all of them, but the head's with ``head_update`` (updated inside the loss, it never has a
    whole gradient)."""
    order = gradient_order(m)
    return order[1:] if s.head_update and not m.tied else order


def pending_gradients_bytes(m: Model, s: Setting, count: int) -> int:
    """InBackwardOptimizer's gradients not yet updated after the first ``count`` of
    :func:`bucketed_order`: a bucket is updated and freed when its gradients reach
    :func:`bucket_cap_bytes` (the rule of Ojas.OptimizerInBackward.Buckets.backprop_cap_bucketed_eq_standard).
    A model whose gradients fit in one bucket keeps them all until the end, as the
    standard loop."""
    return _pending(m, s, count)[0]


def pending_staged_bytes(m: Model, s: Setting, count: int) -> int:
    """The part of :func:`pending_gradients_bytes` whose parameters' state is staged with the
    bucket (host state): those not :func:`sliced`."""
    return _pending(m, s, count)[1]


def _pending(m: Model, s: Setting, count: int) -> tuple[int, int]:
    """(pending gradient bytes, those of parameters not :func:`sliced`) after ``count`` gradients."""
    pending = staged = 0
    for n in bucketed_order(m, s)[:count]:
        pending += n * s.size
        staged += 0 if sliced(s, n) else n * s.size
        if pending >= bucket_cap_bytes(s):
            pending = staged = 0
    return pending, staged


def gradients_before_first_layer_bytes(m: Model, s: Setting) -> int:
    """The standard loop's gradients accumulated when the first decoder layer's backward
    starts: every parameter's but the embedding's and the first layer's (a tied head's
    contribution waits in autograd's buffer for the embedding's: the same bytes)."""
    return (m.params() - m.vocab * m.hidden - m.layer_params()) * s.size + (head_gradient_bytes(m, s) if m.tied else 0)


def first_layer_saved_bytes(m: Model, s: Setting) -> int:
    """The first decoder layer's saved tensors in its backward: :func:`layer_saved_bytes`,
    or when checkpointed :func:`recomputed_layer_bytes` and its checkpoint (the
    embedding's output); with ``split``, :func:`recomputed_mlp_half_bytes` and both halves'
    checkpoints (on the device then, offloaded or not: the attention half's is prefetched)."""
    if s.split:  # the MLP half recomputed, its input h and the attention half's x (the embedding's output)
        return recomputed_mlp_half_bytes(m, s) + 2 * checkpoint_layer_bytes(m, s)
    if s.checkpoint:
        return recomputed_layer_bytes(m, s) + s.size * s.tokens * m.hidden
    return layer_saved_bytes(m, s)


def embedding_backward_bytes(m: Model, s: Setting) -> int:
    """The embedding's backward, last of the pass: the incoming gradient [tokens, hidden]
    in the model dtype and ``embedding_dense_backward``'s float32 per-segment partial
    sums, at most one [tokens, hidden] row per token."""
    return (s.size + 4) * s.tokens * m.hidden


def last_bucket_temporary_bytes(m: Model, s: Setting) -> int:
    """InBackwardOptimizer's last update, at the end of the backward: foreach AdamW's buffer
    over the pending gradients and the embedding's; with host state, over those of the
    parameters updated whole (the :func:`sliced` ones are stepped after them, a slice at a time:
    :func:`slice_temporary_bytes`)."""
    count = len(bucketed_order(m, s)) - 1
    embedding = m.vocab * m.hidden
    return pending_staged_bytes(m, s, count) + (0 if sliced(s, embedding) else head_gradient_bytes(m, s))


#: the tile of kernels/ojas_kernels/linear_cross_entropy.py's ``default_config`` on CUDA: (block_m, block_n) of
#: its forward and backward GemmConfig, per dtype
LCE_BLOCKS = {"fp32": (64, 64), "bf16": (128, 128)}


def _round_to(x: int, multiple: int, up: bool) -> int:
    return -(-x // multiple) * multiple if up else max(multiple, x // multiple * multiple)


def head_update_forward_bytes(m: Model, s: Setting) -> int:
    """With ``head_update`` the kernel runs 4 products (kernels/ojas_kernels/linear_cross_entropy.py
    ``_head_update_config``): the forward computes grad_input [tokens, hidden] (the model dtype,
    held until the backward, where it is the hidden states' gradient) and no other gradient,
    over token chunks whose float32 logits and G rows [chunk, V rounded to block_n] fit
    LCE_WORKSPACE_FRACTION of the gradients' bytes (LCE_WORKSPACE_FLOOR at least)."""
    bm, bn = LCE_BLOCKS[s.dtype]
    budget = max(int(LCE_WORKSPACE_FRACTION * (s.tokens + m.vocab) * m.hidden * s.size), LCE_WORKSPACE_FLOOR)
    v_pad = _round_to(m.vocab, bn, True)
    chunk = min(_round_to(budget // (v_pad * (4 + s.size) + m.hidden * (4 + s.size)), bm, False), s.tokens)
    return s.size * s.tokens * m.hidden + chunk * v_pad * (4 + s.size) + 2 * 4 * s.tokens


def head_update_backward_bytes(m: Model, s: Setting) -> int:
    """With ``head_update``, the kernel's backward (``_backward_weight`` with ``step``) besides the
    hidden states' gradient: the kept rows gathered [tokens, hidden] (the last token's label is
    padding, so some token is ignored), one vocabulary slab's G [tokens rounded to block_m, slab]
    and its rows' gradient [slab, hidden], both in the model dtype; the slab as the kernel sizes it
    (LCE_WORKSPACE_FRACTION of the gradients' bytes less the gathered rows). No [V, hidden]
    gradient (Ojas.OptimizerInBackward.ChunkedHead.chunked_head_dh_first_code_eq_standard)."""
    bm, bn = LCE_BLOCKS[s.dtype]
    gathered = s.tokens * m.hidden * s.size
    budget = max(int(LCE_WORKSPACE_FRACTION * (s.tokens + m.vocab) * m.hidden * s.size) - gathered,
                 LCE_WORKSPACE_FLOOR)
    k_pad = _round_to(s.tokens, bm, True)
    slab = min(_round_to(budget // (k_pad * s.size), bn, False), _round_to(m.vocab, bn, True))
    return gathered + k_pad * slab * s.size + slab * m.hidden * s.size


# --------------------------------------------------------------------------
# Phases and the plan
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class Term:
    """One tensor class alive at a phase."""

    name: str
    bytes: int
    formula: str


@dataclass(frozen=True)
class Phase:
    """A point of the step and what is alive there."""

    name: str
    terms: tuple[Term, ...]

    @property
    def total(self) -> int:
        return sum(t.bytes for t in self.terms)


@dataclass(frozen=True)
class Plan:
    """The phases of one step; the peak is the largest. ``host``: what the setting keeps in
    host memory instead (``offload``: the checkpoints; ``host_state``: the optimizer state),
    empty otherwise; not part of any phase's device total."""

    model: Model
    setting: Setting
    phases: tuple[Phase, ...]
    host: tuple[Term, ...] = ()

    @property
    def host_bytes(self) -> int:
        """The host memory of :attr:`host` (pinned on CUDA), all of it alive at the end of the forward."""
        return sum(t.bytes for t in self.host)

    @property
    def peak_phase(self) -> Phase:
        return max(self.phases, key=lambda p: p.total)

    @property
    def peak(self) -> int:
        return self.peak_phase.total

    def table(self) -> str:
        """The breakdown at the peak and every phase's total."""
        m, s = self.model, self.setting
        peak = self.peak_phase
        lines = [f"ojas plan: {m.name} ({m.params() / 1e9:.2f}B parameters), {s.dtype}, {s.optimizer}"
                 f"{' fused into backward' if s.fused else ''}, {s.mode}, batch {s.batch} x seq {s.seq} "
                 "(predicted)",
                 f"peak {gib(self.peak)} GiB at: {peak.name}", "",
                 f"{'tensor class':<50} {'GiB':>8}  formula"]
        lines += [f"{t.name:<50} {gib(t.bytes):>8}  {t.formula}" for t in peak.terms if t.bytes]
        if self.host:
            lines += ["", f"host memory {gib(self.host_bytes)} GiB (predicted)", f"{'host memory':<50} {'GiB':>8}  formula"]
            lines += [f"{t.name:<50} {gib(t.bytes):>8}  {t.formula}" for t in self.host]
        lines += ["", f"{'phase':<50} {'GiB':>8}"]
        lines += [f"{p.name:<50} {gib(p.total):>8}" + ("  <- peak" if p is peak else "") for p in self.phases]
        return "\n".join(lines)

    def __str__(self) -> str:
        """:meth:`table`: ``print(plan)`` prints the breakdown (``repr`` keeps the fields)."""
        return self.table()


def gib(n: int) -> str:
    """Bytes as GiB with three decimals."""
    return f"{n / 2**30:.3f}"


def _term(name: str, fn: Any, m: Model, s: Setting) -> Term:
    return Term(name, fn(m, s), fn.__name__)


def plan(model: Any, setting: Setting) -> Plan:
    """The predicted phases of one steady-state training step of ``model`` (a :class:`Model`,
    a preset name, or a Hugging Face Llama-style ``PreTrainedModel``, e.g. on the meta
    device) under ``setting``."""
    m = _model(model)
    s = setting
    if not isinstance(s, Setting):
        raise TypeError(f"setting must be a Setting, got {type(s).__name__}")
    if s.head_update and m.tied:
        raise ValueError(f"head_update=True with a tied head ({m.name}): the loss refuses it (the tied weight's "
                         "update needs the embedding's gradient too); the dense path is the one to plan")
    host = []
    if s.host_state:  # the state lives on the host; the device holds the buckets' in flight (the phases')
        host.append(_term("optimizer state (host, state_device='cpu')",
                          optimizer_state_bytes, m, s))
        state = ()
    else:
        state = (_term("optimizer state", optimizer_state_bytes, m, s),)
    fixed = (_term("weights", weights_bytes, m, s),) + state + (
        _term("cuBLAS workspaces", overhead_bytes, m, s), _term("input ids and labels", inputs_bytes, m, s))

    def bucket_state(gradient_bytes: int, what: str) -> tuple[Term, ...]:
        """The in-flight state of a bucket whose gradients are ``gradient_bytes`` (host_state only)."""
        if not s.host_state:
            return ()
        return (Term("optimizer state: bucket in flight (host state)", bucket_state_bytes(m, s, gradient_bytes),
                     f"bucket_state_bytes({what})"),)

    if s.checkpoint and s.offload:
        host.append(_term("layer inputs (offloaded checkpoints, pinned)", checkpoint_bytes, m, s))
        stack = _term("saved activations: layer inputs in flight (offload)", offloaded_checkpoints_device_bytes, m, s)
        below = below_attention = stack
    elif s.checkpoint:
        stack = _term("saved activations: layer inputs (checkpoints)", checkpoint_bytes, m, s)
        below = stack
        below_attention = Term("saved activations: layer inputs (checkpoints) but the last MLP half's",
                               stack.bytes - checkpoint_layer_bytes(m, s), "checkpoint_bytes - checkpoint_layer_bytes")
    if s.split:
        last = _term("saved activations: recomputed last MLP half (split)", recomputed_mlp_half_bytes, m, s)
    elif s.checkpoint:
        last = _term("saved activations: recomputed last layer", recomputed_layer_bytes, m, s)
    else:
        stack = Term("saved activations: all layers", m.layers * layer_saved_bytes(m, s),
                     "layers x layer_saved_bytes")
        below = Term("saved activations: layers below the last", (m.layers - 1) * layer_saved_bytes(m, s),
                     "(layers - 1) x layer_saved_bytes")
        last = _term("saved activations: last layer", layer_saved_bytes, m, s)
    head_in = (_term("saved activations: final norm", rmsnorm_saved_bytes, m, s),
               _term("rotary cos/sin", rotary_bytes, m, s))
    grad_flow = Term("gradient of the hidden states", s.size * s.tokens * m.hidden, "size x tokens x hidden")
    head_grad = _term("gradient of the head weight", head_gradient_bytes, m, s)
    if s.head_update:
        head_grad = Term("gradient of the head weight (updated inside the loss)", 0, "none: head_update")
    phases = []
    if s.head_update:
        phases.append(Phase("end of forward (linear cross-entropy, 4 products)", fixed + (stack,) + head_in + (
            _term("loss: grad_input and one token chunk (head update)", head_update_forward_bytes, m, s),)))
    elif s.ojas_loss:
        phases.append(Phase("end of forward (linear cross-entropy)", fixed + (stack,) + head_in + (
            _term("loss: gradients computed in the forward", lce_gradients_bytes, m, s),
            _term("loss: kernel workspace (one token chunk)", lce_workspace_bytes, m, s))))
    else:
        phases.append(Phase("end of forward (loss)", fixed + (stack,) + head_in + (
            _term("loss: logits, float32 copy, log-softmax", standard_loss_forward_bytes, m, s),)))
        phases.append(Phase("start of backward (loss gradient)", fixed + (stack,) + head_in + (
            _term("loss: log-softmax output and 2 gradients", standard_loss_backward_bytes, m, s),)))
    head_sliced = not m.tied and sliced(s, m.vocab * m.hidden)

    def slice_terms(what: str) -> tuple[Term, ...]:
        """One slice's state and step temporaries, at the sliced update of ``what``."""
        return (Term(f"optimizer state: two slices of the {what} (host state)", slice_state_bytes(m, s),
                     "slice_state_bytes"),
                Term(f"bucket update temporaries (one slice of the {what})", slice_temporary_bytes(m, s),
                     "slice_temporary_bytes"))

    at_head = fixed + (stack,) + head_in + (grad_flow, head_grad) + bucket_state(
        0 if m.tied or head_sliced else head_grad.bytes,
        "none: the head is sliced" if head_sliced else "head gradient, untied")
    if s.head_update:
        phases.append(Phase("backward: loss, head updated chunk by chunk", at_head + (
            _term("loss: one vocabulary slab (head update)", head_update_backward_bytes, m, s),)))
    else:
        phases.append(Phase("backward: head gradient", at_head + (
            _term("loss: gradient of the logits", standard_loss_logits_gradient_bytes, m, s),)))
    if head_sliced and head_updated_first(m, s):
        phases.append(Phase("backward: head's bucket update, one slice at a time", at_head + slice_terms("head")))
    elif bucket_step_temporary_bytes(m, s):
        phases.append(Phase("backward: head's bucket update", at_head + (
            _term("bucket update temporaries (head)", bucket_step_temporary_bytes, m, s),)))
    mlp = _term("layer backward temporaries (MLP)", mlp_backward_transient_bytes, m, s)
    tied_head = Term("tied head's gradient, waiting for the embedding's", head_gradient_bytes(m, s) if m.tied else 0,
                     "head_gradient_bytes if tied")
    first = len(bucketed_order(m, s)) - 1 - 9 + 1  # up to the first layer's down_proj
    head_first = not m.tied and not s.head_update  # the head's gradient is the first in the buckets
    if s.fused:
        in_flight_last = (tied_head, Term("gradients pending in the bucket", pending_gradients_bytes(
            m, s, 2 + head_first), "pending_gradients_bytes(head, final norm, down_proj)" if head_first else
            "pending_gradients_bytes(final norm, down_proj)"))
        in_flight_first = (tied_head, Term("gradients pending in the bucket", pending_gradients_bytes(
            m, s, first), "pending_gradients_bytes(..., first layer's down_proj)"))
    else:
        down = _term("down_proj weight gradient", down_proj_gradient_bytes, m, s)
        in_flight_last = (head_grad, down)
        in_flight_first = (_term("gradients accumulated so far", gradients_before_first_layer_bytes, m, s), down)
    staged_last = pending_staged_bytes(m, s, 2 + head_first) if s.fused else 0
    staged_first = pending_staged_bytes(m, s, first) if s.fused else 0
    phases.append(Phase("backward: last decoder layer (MLP)", fixed + (below, last) + in_flight_last + (
        head_in[1], grad_flow, mlp) + bucket_state(staged_last, "gradients pending in the bucket, not sliced")))
    if s.split:
        phases.append(_split_attention_phase(m, s, fixed + (below_attention, tied_head if s.fused else head_grad,
                                                    head_in[1], grad_flow), head_first, bucket_state))
    phases.append(Phase("backward: first decoder layer (MLP)", fixed + in_flight_first + (
        _term("saved activations: first layer", first_layer_saved_bytes, m, s), head_in[1], grad_flow, mlp)
        + bucket_state(staged_first, "gradients pending in the bucket, not sliced")))
    if s.fused:
        before = Term("gradients pending in the bucket", pending_gradients_bytes(m, s, len(bucketed_order(m, s)) - 1),
                      "pending_gradients_bytes(all but the embedding)")
    else:
        before = Term("gradients of all but the embedding", (m.params() - m.vocab * m.hidden) * s.size,
                      "(params - vocab x hidden) x size")
    embedding = Term("gradient of the embedding", head_gradient_bytes(m, s), "head_gradient_bytes")
    staged = pending_staged_bytes(m, s, len(bucketed_order(m, s)) - 1) if s.fused else 0
    pending_state = bucket_state(staged, "gradients pending in the bucket, not sliced")
    embedding_sliced = sliced(s, m.vocab * m.hidden)
    phases.append(Phase("end of backward (embedding)", fixed + (before, embedding, tied_head) + (
        _term("embedding backward temporaries", embedding_backward_bytes, m, s),) + pending_state))
    if m.tied:
        phases.append(Phase("end of backward (tied gradients summed)", fixed + (before, embedding, tied_head) + (
            Term("their sum", head_gradient_bytes(m, s), "head_gradient_bytes"),) + pending_state))
    if s.fused and s.optimizer == "adamw":
        phases.append(Phase("end of backward (last bucket's update)", fixed + (before, embedding) + (
            _term("bucket update temporaries (last)", last_bucket_temporary_bytes, m, s),) + bucket_state(
            staged + (0 if embedding_sliced else embedding.bytes),
            "pending gradients, not sliced" if embedding_sliced else "pending and the embedding's gradients")))
        if embedding_sliced:  # then the embedding's slices; the whole part's copies back may be in flight
            phases.append(Phase("end of backward (the embedding's update, one slice at a time)", fixed + (
                before, embedding) + pending_state + slice_terms("embedding")))
    if not s.fused:
        grads = Term("gradients (all parameters)", m.params() * s.size, "params x size")
        phases.append(Phase("optimizer step", fixed + (grads,) + (
            _term("optimizer step temporaries", step_temporary_bytes, m, s),)))
    return Plan(m, s, tuple(phases), tuple(host))


def _split_attention_phase(m: Model, s: Setting, alive: tuple[Term, ...], head_first: bool,
                           bucket_state: Any) -> Phase:
    """With ``split``, the last layer's attention backward: ``alive`` (what every layer phase
    holds), its recomputed attention half, the layer's gradients so far (down, up, gate,
    post-attention norm, o: pending in the bucket when fused, held otherwise) and the attention
    backward's temporaries."""
    count = 1 + head_first + 5  # (head,) final norm, down, up, gate, post-attention norm, o
    if s.fused:
        grads = Term("gradients pending in the bucket", pending_gradients_bytes(m, s, count),
                     "pending_gradients_bytes(..., last layer's o_proj)")
        state = bucket_state(pending_staged_bytes(m, s, count), "gradients pending in the bucket, not sliced")
    else:
        grads = Term("last layer's weight gradients (MLP, norm, o_proj)", layer_gradients_bytes(m, s, 5),
                     "layer_gradients_bytes(5)")
        state = ()
    return Phase("backward: last decoder layer (attention, split)", alive + (
        _term("saved activations: recomputed last attention half (split)", recomputed_attention_half_bytes, m, s),
        grads, _term("layer backward temporaries (attention)", attention_backward_transient_bytes, m, s)) + state)


def _model(model: Any) -> Model:
    if isinstance(model, Model):
        return model
    if isinstance(model, str):
        if model not in PRESETS:
            raise ValueError(f"unknown preset {model!r}; presets: {', '.join(PRESETS)}")
        return PRESETS[model]
    return Model.from_module(model)


# --------------------------------------------------------------------------
# The picture (``ojas plan --plot FILE.png``)
# --------------------------------------------------------------------------

#: the classes a phase's terms are stacked by, bottom (left) first, with their colours
TENSOR_CLASSES = (("weights", "#4c72b0"), ("optimizer state", "#dd8452"), ("weight gradients", "#55a868"),
                  ("saved activations", "#c44e52"), ("loss: logits / kernel gradients and workspace", "#8172b3"),
                  ("activation gradients and temporaries", "#937860"), ("cuBLAS workspaces", "#da8bc3"),
                  ("input ids and labels", "#8c8c8c"))
_CLASS_OF_TERM = {
    "weights": "weights", "optimizer state": "optimizer state", "cuBLAS workspaces": "cuBLAS workspaces",
    "input ids and labels": "input ids and labels", "rotary cos/sin": "saved activations",
    "gradient of the hidden states": "activation gradients and temporaries", "their sum": "weight gradients",
    "tied head's gradient, waiting for the embedding's": "weight gradients",
}


def tensor_class(term: str) -> str:
    """The class of the picture a term of :func:`plan` is stacked in (by its name:
    ``saved activations: ...``, ``loss: ...``, ``... temporaries ...``, weight gradients);
    ``other`` for a name none of the rules knows."""
    if term in _CLASS_OF_TERM:
        return _CLASS_OF_TERM[term]
    if term.startswith("saved activations"):
        return "saved activations"
    if term.startswith("optimizer state"):
        return "optimizer state"
    if term.startswith("loss:"):
        return "loss: logits / kernel gradients and workspace"
    if "temporaries" in term:
        return "activation gradients and temporaries"
    if "gradient" in term:
        return "weight gradients"
    return "other"


def check_png_path(path: Any) -> Path:
    """``path`` as a ``Path`` for a PNG to write (plot_plan, memory_timeline.plot_timeline):
    ``ValueError`` unless it ends in ``.png``, is not a directory, and its directory exists."""
    file = Path(path)
    if file.suffix.lower() != ".png":
        raise ValueError(f"the plot is a PNG: its file name must end in .png, got {str(path)!r}")
    if file.is_dir():
        raise ValueError(f"the plot's path {str(path)!r} is a directory, not a .png file")
    if not file.parent.is_dir():
        raise ValueError(f"the plot's directory {str(file.parent)!r} does not exist")
    return file


def plot_plan(result: Plan, path: Any, measured: Optional[int] = None) -> Any:
    """Draw ``result`` (a :class:`Plan`) as a PNG at ``path`` and return the
    ``matplotlib.figure.Figure`` (written, not shown).

    One horizontal bar per phase of the step, in step order from the top, stacked by
    :func:`tensor_class` (GiB); the peak phase is outlined and its total labelled "peak".
    Every phase is drawn, not only the peak's, since where the peak falls is part of the
    prediction (the loss with the standard loss, somewhere in the backward with the fused
    optimizer). The left panel is the whole of each bar from zero; the right panel the
    same bars less the weights and the optimizer state (the same at every phase and most
    of the bytes, they hide what changes through the step), with each phase's total.
    Given ``measured`` (bytes, e.g. :func:`measured_peak` of the plan's model and
    setting), a hatched bar of the measured peak is drawn below the phases and a dashed
    line at its value across them, in both panels (in the right one, less the same
    predicted weights and state).

    Uses matplotlib's Agg canvas, imported here (the planner does not need matplotlib;
    pyplot's global state is not touched). ``ValueError`` for a path that does not end
    in ``.png``, is a directory, or whose directory does not exist."""
    if not isinstance(result, Plan):
        raise TypeError(f"result must be a Plan (from plan()), got {type(result).__name__}")
    if measured is not None and (isinstance(measured, bool) or not isinstance(measured, int) or measured <= 0):
        raise ValueError(f"measured must be a positive byte count or None, got {measured!r}")
    file = check_png_path(path)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    m, s = result.model, result.setting
    phases = list(result.phases)
    peak = result.peak_phase
    rows = len(phases) + (measured is not None)
    fixed_classes = ("weights", "optimizer state")
    fixed = max(sum(t.bytes for t in p.terms if tensor_class(t.name) in fixed_classes) for p in phases)
    colours = dict(TENSOR_CLASSES) | {"other": "#cccccc"}
    fig = Figure(figsize=(13, 2.4 + 0.42 * rows), layout="constrained")
    FigureCanvasAgg(fig)
    full, zoom = fig.subplots(1, 2, sharey=True, width_ratios=(3, 2))
    for ax, skip in ((full, ()), (zoom, fixed_classes)):
        left = [0.0] * len(phases)
        for cls in list(colours):
            if cls in skip:
                continue
            widths = [sum(t.bytes for t in p.terms if tensor_class(t.name) == cls) / 2**30 for p in phases]
            if any(widths):
                ax.barh(range(len(phases)), widths, left=left, height=0.7, color=colours[cls],
                        label=cls if ax is full else "_" + cls)  # "_": in the legend once
                left = [a + b for a, b in zip(left, widths)]
        i = phases.index(peak)
        ax.barh(i, left[i], height=0.7, fill=False, edgecolor="black", linewidth=2.0)
        shift = fixed / 2**30 if skip else 0.0
        ends = left
        if measured is not None:
            ax.barh(len(phases), measured / 2**30 - shift, height=0.7, color="white", edgecolor="black", hatch="//",
                    label="measured peak (torch.cuda.max_memory_allocated on an H200)" if ax is full else None)
            ax.axvline(measured / 2**30 - shift, color="black", linestyle="--", linewidth=1.0)
            ends = left + [measured / 2**30 - shift]
        ax.grid(axis="x", alpha=0.3)
        ax.set_axisbelow(True)
    full.set_xlim(0, max([result.peak] + ([measured] if measured is not None else [])) / 2**30 * 1.04)
    # the totals in one column right of the longest bar (clear of the dashed line)
    top = max(ends)
    column = top * 1.04
    for i, p in enumerate(phases):
        is_peak = p is peak
        zoom.text(column, i, f"{gib(p.total)}" + ("  peak" if is_peak else ""),
                  va="center", ha="left", fontsize=9, fontweight="bold" if is_peak else "normal")
    labels = [p.name for p in phases]
    if measured is not None:
        error = 100 * (result.peak - measured) / measured
        zoom.text(column, len(phases), f"{gib(measured)}  measured\n(predicted {error:+.2f}%)",
                  va="center", ha="left", fontsize=9, fontweight="bold")
        labels.append("measured on an H200")
    zoom.set_xlim(0, top * 1.7)
    full.set_yticks(range(rows), labels)
    full.invert_yaxis()
    full.set_xlabel("device memory (GiB)")
    zoom.set_xlabel(f"GiB above weights + optimizer state ({gib(fixed)} GiB)")
    full.set_title("whole step, from zero", fontsize=9)
    zoom.set_title("what changes through the step; phase totals (GiB) on the right", fontsize=9)
    fig.suptitle(f"ojas plan: {m.name} ({m.params() / 1e9:.2f}B parameters), {s.dtype}, {s.optimizer}"
                 f"{' fused into backward' if s.fused else ''}, {s.mode}, batch {s.batch} x seq {s.seq}\n"
                 f"predicted peak {gib(result.peak)} GiB at: {peak.name}"
                 + (f"; measured {gib(measured)} GiB" if measured is not None else ""), fontsize=10)
    fig.legend(loc="outside lower center", ncols=3, fontsize=8.5, frameon=False)
    fig.savefig(file, dpi=110)
    return fig


# --------------------------------------------------------------------------
# Fitting and the measured records
# --------------------------------------------------------------------------

_UNITS = {"": 1, "b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
          "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}


def parse_bytes(text: str) -> int:
    """'24GiB', '80GB', '139 GiB', '512MiB' or a plain byte count, as bytes."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(f"GPU_MEMORY must be a number with a unit among B, KiB, MiB, GiB, TiB, KB, MB, GB, TB "
                         f"(e.g. 24GiB), got {text!r}")
    value = float(match.group(1)) * _UNITS[match.group(2).lower()]
    if value <= 0 or not math.isfinite(value):
        raise ValueError(f"GPU_MEMORY must be positive, got {text!r}")
    return int(value)


def fit_preset(memory: int, setting: Setting, presets: Sequence[Model] = tuple(PRESETS.values())) -> Optional[Plan]:
    """The plan of the largest preset (by parameters) whose predicted peak is at most
    ``memory`` bytes under ``setting``; None if none fits."""
    fitting = [p for p in (plan(m, setting) for m in presets) if p.peak <= memory]
    return max(fitting, key=lambda p: p.model.params(), default=None)


def fit_batch(memory: int, model: Any, setting: Setting, limit: int = 2**20) -> Optional[Plan]:
    """The plan of the largest batch (at ``setting.seq``, up to ``limit``) whose predicted
    peak is at most ``memory`` bytes; None if batch 1 does not fit. The peak grows with
    the batch, so a bisection finds it."""
    def at(batch: int) -> Plan:
        return plan(model, replace(setting, batch=batch))

    if at(1).peak > memory:
        return None
    low, high = 1, limit
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if at(mid).peak <= memory else (low, mid - 1)
    return at(low)


def load_records(path: Path = RECORDS_PATH, field: str = "peak") -> list[tuple[Setting, Any]]:
    """The measurements of one record file of :data:`RECORDS_PATHS` (the llama-1b preset on
    an H200) as (setting, the result's ``field``: ``"peak"``, torch.cuda.max_memory_allocated
    bytes, or ``"tokens_per_s"``, from the median step time). What an ojas mode applied
    is each result's ``applied`` (attention and loss only where it is absent: the first
    file, measured before the fused RMSNorm and SwiGLU existed)."""
    data = json.loads(Path(path).read_text())
    config = data["config"]
    dtypes = {"float32": "fp32", "bfloat16": "bf16"}
    records = []
    for r in data["results"]:
        ojas = r["mode"].startswith("ojas")
        applied = r.get("applied") or dict(attention=ojas, cross_entropy=ojas, rms_norm=False, swiglu=False)
        setting = Setting(dtype=dtypes[r["dtype"]], optimizer=r["optimizer"], fused=ojas, batch=config["batch"],
                          seq=config["seq"], checkpoint=r["mode"].endswith("+ckpt"),
                          ojas_attention=applied["attention"], ojas_loss=applied["cross_entropy"],
                          ojas_rms_norm=applied["rms_norm"], ojas_swiglu=applied["swiglu"],
                          ojas_attention_copy=applied["attention"] and "rope" not in applied)
        records.append((setting, r[field]))
    return records


def memory_record_setting(row: Mapping[str, Any], batch: int, seq: int) -> Optional[Setting]:
    """The setting of one row of benchmarks/bench_memory.py (its ``mode``, ``dtype``,
    ``optimizer`` and the ``techniques`` it applied; a host-state row without ``state_slice_mb``,
    measured before slicing existed, updated whole parameters; a row without ``split`` or
    ``bucket_cap_mb``, measured before they were recorded, whole-layer checkpoints and 64 MiB
    buckets), or None where the planner does not model the row (the sparse embedding, the
    reversible decoder)."""
    t = row.get("techniques")
    if row["mode"] == "reversible" or (t is not None and t["sparse_embedding"]):
        return None
    ojas = t is not None
    return Setting(dtype=row["dtype"], optimizer=row["optimizer"], fused=ojas, batch=batch, seq=seq, checkpoint=True,
                   ojas_attention=ojas, ojas_loss=ojas, ojas_rms_norm=ojas, ojas_swiglu=ojas,
                   offload=ojas and t["checkpoint"] == "offload", host_state=ojas and t["state_device"] is not None,
                   head_update=ojas and bool(t.get("head_update", False)),
                   state_slice_mb=t.get("state_slice_mb") if ojas and t["state_device"] is not None else None,
                   split=ojas and bool(t.get("split", False)),
                   bucket_cap_mb=float(t.get("bucket_cap_mb", BUCKET_CAP_MB)) if ojas else BUCKET_CAP_MB)


def preset_model(name: str) -> Model:
    """A preset by name, or ``NAME@LAYERS`` (:func:`with_layers`) as bench_memory.py's rows name them."""
    base, _, layers = name.partition("@")
    if base not in PRESETS:
        raise ValueError(f"preset must be one of {list(PRESETS)} (optionally @LAYERS), got {name!r}")
    return with_layers(PRESETS[base], int(layers)) if layers else PRESETS[base]


def load_memory_records(path: Path) -> list[tuple[Model, Setting, dict]]:
    """The modelled rows of one file of :data:`MEMORY_RECORDS_PATHS` that fitted, as (model (the
    row's ``preset``, or else the file's config: :func:`config_model`), setting, the row: ``peak``,
    ``host``, ``tokens_per_s``, ``losses``, ...)."""
    data = json.loads(Path(path).read_text())
    c = data["config"]
    records = []
    for row in data["results"]:
        setting = memory_record_setting(row, c["batch"], c["seq"])
        if setting is not None and row.get("fits", True):
            records.append((preset_model(row["preset"]) if "preset" in row else config_model(c), setting, row))
    return records


def record_model(path: Path = RECORDS_PATH) -> Model:
    """The model the records were measured on, from their config."""
    return config_model(json.loads(Path(path).read_text())["config"])


def config_model(c: Mapping[str, Any]) -> Model:
    """The model of a record file's ``config`` (bench_optimize_model's and bench_memory's: hidden,
    layers, heads, intermediate, vocab; no GQA, untied), named llama-1b when it is that preset's
    shape: the model of a bench_memory row without a ``preset``."""
    m = Model(c["hidden"], c["layers"], c["heads"], c["heads"], c["intermediate"], c["vocab"])
    one_b = PRESETS["llama-1b"]
    return replace(m, name="llama-1b") if replace(m, name="", source="") == replace(one_b, name="", source="") else m


# --------------------------------------------------------------------------
# The command (``ojas plan``)
# --------------------------------------------------------------------------

#: the benchmark's four modes, as (fused, checkpoint, ojas attention and loss)
MODES = ((False, False, False), (False, True, False), (True, False, True), (True, True, True))


def _slice_mb(text: str) -> float:
    """``--state-slice-mb``: a positive finite number of MiB, or ``none`` (0.0 here: whole parameters)."""
    if text.strip().lower() == "none":
        return 0.0
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (math.isfinite(value) and value > 0):
        import argparse
        raise argparse.ArgumentTypeError(f"--state-slice-mb must be a number of MiB > 0 or 'none', got {text!r}")
    return value


def _bucket_mb(text: str) -> float:
    """``--bucket-mb``: a finite number of MiB >= 0 (0: every gradient updated at once)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (math.isfinite(value) and value >= 0):
        import argparse
        raise argparse.ArgumentTypeError(f"--bucket-mb must be a number of MiB >= 0, got {text!r}")
    return value


def add_arguments(parser: Any) -> None:
    """The ``ojas plan`` arguments on an ``argparse`` parser."""
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--preset", choices=list(PRESETS), help="a Llama-shaped preset (default llama-1b)")
    source.add_argument("--config", metavar="PATH", help="a Hugging Face config.json (or a folder holding one)")
    parser.add_argument("--layers", type=int, metavar="N",
                        help="the preset's (or config's) shape with N decoder layers instead of its own")
    parser.add_argument("--dtype", choices=list(DTYPE_BYTES), help="weights, gradients, state (default bf16)")
    parser.add_argument("--optimizer", choices=list(OPTIMIZERS), help="default adamw")
    parser.add_argument("--fused", action="store_true", help="InBackwardOptimizer (64 MiB buckets, or --bucket-mb)")
    parser.add_argument("--bucket-mb", type=_bucket_mb, metavar="MB",
                        help=f"with --fused: InBackwardOptimizer's bucket_cap_mb (default {BUCKET_CAP_MB:g})")
    parser.add_argument("--checkpoint", action="store_true", help="per-layer activation checkpointing")
    parser.add_argument("--split", action="store_true",
                        help="with --checkpoint: each layer checkpointed as two segments, attention half and MLP "
                             "half (optimize_model(checkpoint_split=True))")
    parser.add_argument("--offload", action="store_true",
                        help="with --checkpoint: the checkpoints in pinned host memory (optimize_model("
                             "checkpoint='offload'))")
    parser.add_argument("--host-state", action="store_true",
                        help="with --fused: the optimizer state in host memory (InBackwardOptimizer("
                             "state_device='cpu'))")
    parser.add_argument("--state-slice-mb", type=_slice_mb, metavar="MB|none",
                        help="with --host-state: InBackwardOptimizer's state_slice_mb (default none: whole parameters, "
                             f"its default), e.g. {STATE_SLICE_MB:g}: a parameter whose state exceeds it updated "
                             "slice by slice")
    parser.add_argument("--head-update", action="store_true",
                        help="with --fused, the ojas loss and --optimizer sgd: the head updated chunk by chunk inside "
                             "the loss's backward (InBackwardOptimizer(head_weight=model.lm_head.weight)), no [V, D] "
                             "gradient")
    parser.add_argument("--ojas", action="store_true",
                        help="everything optimize_model applies: attention, linear cross-entropy, RMSNorm, SwiGLU")
    parser.add_argument("--ojas-attention", action="store_true", help="ojas attention only")
    parser.add_argument("--ojas-loss", action="store_true", help="ojas linear cross-entropy only")
    parser.add_argument("--batch", type=int, default=1, help="sequences per step (default 1)")
    parser.add_argument("--seq", type=int, default=2048, help="tokens per sequence (default 2048)")
    parser.add_argument("--fit", type=_memory_argument, metavar="GPU_MEMORY",
                        help="e.g. 24GiB: for each dtype x optimizer x mode (the benchmark's four, or the one the "
                             "flags give), the largest preset that fits (the largest batch with --preset/--config)")
    parser.add_argument("--plot", metavar="FILE.png",
                        help="also draw the breakdown of every phase as a stacked bar chart (PNG, needs matplotlib), "
                             "with the measured peak beside it for a recorded setting")
    parser.add_argument("--time", action="store_true",
                        help="also measure this device's GEMM rate (a few seconds) and predict tokens/s and the wall "
                             "time to --tokens-per-param tokens (ojas_ref/tools/throughput.py)")
    parser.add_argument("--shallow", action="store_true",
                        help="with --time: also time training steps of the model's width at 2 and 10 decoder layers "
                             "on this device (the model built there: seconds on a GPU) and predict the step by "
                             "extrapolating in depth (ojas_ref/tools/step_time.py)")
    parser.add_argument("--tokens-per-param", type=float, nargs="+", default=[20.0, 30.0], metavar="K",
                        help="with --time: token budgets as multiples of the parameter count (default 20 30)")


def _memory_argument(text: str) -> int:
    import argparse

    try:
        return parse_bytes(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _read_config(path: str) -> Model:
    """``--config``'s model: a Hugging Face config.json (its ``text_config`` where it has one)."""
    file = Path(path)
    file = file / "config.json" if file.is_dir() else file
    try:
        config = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"--config {path}: cannot read a JSON config ({err})") from None
    config = config.get("text_config", config) if isinstance(config, dict) else config
    if not isinstance(config, dict):
        raise ValueError(f"--config {path}: expected a JSON object of config fields (a Hugging Face config.json), "
                         f"got a JSON {type(config).__name__}")
    return Model.from_config(config, name=file.parent.name or file.stem)


def run_command(args: Any) -> int:
    """``ojas plan``: the breakdown of one setting (and with ``--plot`` its picture, with
    ``--time`` its predicted tokens/s and time to train), or with ``--fit`` the table of fits."""
    import sys

    try:
        model = _read_config(args.config) if args.config else PRESETS[args.preset or "llama-1b"]
        if args.layers is not None:
            model = with_layers(model, args.layers)
        flags = dict(fused=args.fused, checkpoint=args.checkpoint, ojas_attention=args.ojas or args.ojas_attention,
                     ojas_loss=args.ojas or args.ojas_loss, ojas_rms_norm=args.ojas, ojas_swiglu=args.ojas,
                     offload=args.offload, host_state=args.host_state, head_update=args.head_update,
                     split=args.split)
        if args.state_slice_mb is not None and not args.host_state:
            raise ValueError("--state-slice-mb needs --host-state (only state on the host is updated in slices)")
        if args.host_state:
            flags["state_slice_mb"] = args.state_slice_mb or None
        if args.offload and not args.checkpoint:
            raise ValueError("--offload needs --checkpoint (it moves the checkpoints to host memory)")
        if args.split and not args.checkpoint:
            raise ValueError("--split needs --checkpoint (it splits each layer's checkpoint in two)")
        if args.bucket_mb is not None:
            if not args.fused:
                raise ValueError("--bucket-mb needs --fused (the buckets are InBackwardOptimizer's)")
            flags["bucket_cap_mb"] = args.bucket_mb
        if args.host_state and not args.fused:
            raise ValueError("--host-state needs --fused (InBackwardOptimizer streams its state from the host)")
        setting = Setting(dtype=args.dtype or "bf16", optimizer=args.optimizer or "adamw", batch=args.batch,
                          seq=args.seq, **flags)
        if args.plot is not None:
            if args.fit is not None:
                raise ValueError("--plot draws the plan of one setting: it does not go with --fit")
            check_png_path(args.plot)
        if args.shallow and not args.time:
            raise ValueError("--shallow goes with --time (it refines the time prediction)")
        if args.time and args.fit is not None:
            raise ValueError("--time times one setting: it does not go with --fit")
        if any(not (k > 0 and math.isfinite(k)) for k in args.tokens_per_param):
            raise ValueError(f"--tokens-per-param must be positive numbers, got {args.tokens_per_param}")
        if args.fit is None:
            predicted = plan(model, setting)
            print(predicted.table())
            measured = measured_peak(model, setting)
            if measured is not None:
                print(f"\nmeasured on an H200: {gib(measured)} GiB (torch.cuda.max_memory_allocated, "
                      f"benchmarks/results/); predicted {100 * (predicted.peak - measured) / measured:+.2f}%")
            if args.plot is not None:
                plot_plan(predicted, args.plot, measured)
                print(f"\nplot written to {args.plot}")
            if args.time:
                print("\n" + "\n".join(_time_lines(model, setting, args.tokens_per_param)))
                if args.shallow:
                    print("\n" + "\n".join(_shallow_lines(model, setting)))
            return 0
        modes = [flags] if any(flags.values()) else [
            dict(fused=f, checkpoint=c, ojas_attention=o, ojas_loss=o, ojas_rms_norm=o, ojas_swiglu=o)
            for f, c, o in MODES]
        settings = [Setting(dtype=d, optimizer=o, batch=args.batch, seq=args.seq, **mode)
                    for d in ([args.dtype] if args.dtype else list(DTYPE_BYTES))
                    for o in ([args.optimizer] if args.optimizer else list(OPTIMIZERS)) for mode in modes]
    except (ValueError, TypeError, NotImplementedError, OSError, ImportError) as err:
        print(f"ojas plan: {err}", file=sys.stderr)
        return 2
    by_batch = bool(args.preset or args.config)
    print(fit_table(args.fit, settings, model if by_batch else None))
    return 0


def _time_lines(model: Model, setting: Setting, tokens_per_param: Sequence[float]) -> list[str]:
    """``--time``: the GEMM rate measured on this device (CUDA if available) in the setting's
    dtype, and :func:`ojas_ref.tools.throughput.time_lines` at it."""
    import torch

    from ojas_ref.tools.throughput import measure_gemm_rate, time_lines

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[setting.dtype]
    name = torch.cuda.get_device_name() if device == "cuda" else "the CPU"
    return time_lines(model, setting, measure_gemm_rate(device, dtype), name, tokens_per_param)


def _shallow_lines(model: Model, setting: Setting) -> list[str]:
    """``--time --shallow``: the step predicted from steps of the model's width at two small depths
    timed on this device (:func:`ojas_ref.tools.step_time.measure`), beside the H200 record
    where there is one."""
    from ojas_ref.tools.step_time import measure, predict_step_seconds

    measured = measure(model, setting)
    predicted = predict_step_seconds(model, measured)
    timed = ", ".join(f"{d} layers {t * 1e3:.1f} ms" for d, t in zip(measured.depths, measured.seconds))
    lines = [f"step predicted from steps timed on {measured.device} ({timed}): {predicted['step'] * 1e3:.1f} ms, "
             f"{setting.tokens / predicted['step']:,.0f} tokens/s",
             f"  per layer {predicted['per_layer'] * 1e3:.2f} ms, the rest of the step {predicted['rest'] * 1e3:.1f} ms"]
    recorded = measured_peak(model, setting, "tokens_per_s")
    if recorded is not None:
        lines.append(f"  measured on an H200: {recorded:,.0f} tokens/s (predicted "
                     f"{100 * (setting.tokens / predicted['step'] - recorded) / recorded:+.1f}%)")
    return lines


def fit_table(memory: int, settings: Sequence[Setting], model: Optional[Model] = None) -> str:
    """One row per setting: the largest preset that fits in ``memory`` (or, given a
    ``model``, its largest batch), its predicted peak, and the measured peak where the row
    is a recorded configuration (the llama-1b records)."""
    what = f"largest batch of {model.name} at seq {settings[0].seq}" if model else "largest preset"
    lines = [f"ojas plan --fit {gib(memory)} GiB: {what}; peak predicted by the formulas of ojas_ref/tools/plan.py",
             "| dtype | optimizer | mode | fits | tokens/step | peak GiB | at | measured on H200 |",
             "|---|---|---|---|---|---|---|---|"]
    for s in settings:
        found = fit_batch(memory, model, s) if model else fit_preset(memory, s)
        if found is None:
            lines.append(f"| {s.dtype} | {s.optimizer} | {s.mode} | nothing | - | - | - | predicted |")
            continue
        fs = found.setting
        largest = found.model is max(PRESETS.values(), key=Model.params)
        name = f"batch {fs.batch}" if model else found.model.name + (" (every preset fits)" if largest else "")
        peak = measured_peak(found.model, fs)
        label = "predicted" if peak is None else f"measured {gib(peak)} GiB"
        lines.append(f"| {s.dtype} | {s.optimizer} | {s.mode} | {name} | {fs.tokens} | {gib(found.peak)} | "
                     f"{found.peak_phase.name} | {label} |")
    return "\n".join(lines)


def measured_peak(model: Model, setting: Setting, field: str = "peak") -> Optional[Any]:
    """The recorded peak (or another ``field`` of :func:`load_records`) of this model and
    setting (benchmarks/results/, a source checkout; the later file where both hold it), or
    None where nothing was measured."""
    def shape(m: Model) -> Model:
        return replace(m, name="", source="")

    found = {(shape(m), s): row[field] for p in MEMORY_RECORDS_PATHS if p.exists()
             for m, s, row in load_memory_records(p) if field in row}
    paths = [p for p in RECORDS_PATHS if p.exists()]
    if paths and shape(model) == shape(record_model()):
        found |= {(shape(model), s): value for p in paths for s, value in load_records(p, field)}
    return found.get((shape(model), setting))
