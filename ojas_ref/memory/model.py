"""The shape of a Llama-style decoder (:class:`Model`, :data:`PRESETS`) and the setting of a
training step (:class:`Setting`) that :func:`ojas_ref.memory.plan` predicts the memory of."""

from __future__ import annotations

import dataclasses
import functools
import warnings
from dataclasses import dataclass, replace
from typing import Any, Mapping, Optional

import torch

from ojas_ref.recipe import MemoryRecipe, as_dtype, dtype_name

__all__ = [
    "BUCKET_CAP_BYTES",
    "BUCKET_CAP_MB",
    "CUBLAS_HANDLES",
    "CUBLAS_WORKSPACE_BYTES",
    "DTYPE_BYTES",
    "FAMILIES",
    "LCE_PEAK_OVER_GRADIENTS",
    "LCE_WORKSPACE_FLOOR",
    "LCE_WORKSPACE_FRACTION",
    "OPTIMIZERS",
    "PRESETS",
    "SLICE_ALIGN",
    "STATE_SLICE_MB",
    "UNMODELLED",
    "Model",
    "Setting",
    "with_layers",
]

#: the dtypes the planner models, and their bytes per element
DTYPE_BYTES = {torch.float32: 4, torch.bfloat16: 2}
OPTIMIZERS = ("sgd", "adamw")
#: torch's default cuBLAS workspace on compute capability 9.x (one per handle and stream,
#: allocated through the caching allocator, so counted by max_memory_allocated)
CUBLAS_WORKSPACE_BYTES = 32 * 2**20
#: handles that run products in a step: the main thread (forward, optimizer step) and the
#: autograd engine's device thread (backward)
CUBLAS_HANDLES = 2
#: InBackwardOptimizer's default ``bucket_cap_mb`` (:class:`MemoryRecipe`'s)
BUCKET_CAP_MB = MemoryRecipe.bucket_cap_mb
#: its bytes (:func:`bucket_cap_bytes` of the default setting)
BUCKET_CAP_BYTES = int(BUCKET_CAP_MB * 2**20)
#: a ``state_slice_mb`` to plan with (``ojas plan --in-backward --state-device cpu --state-slice-mb 128``; the option
#: is off by default in InBackwardOptimizer; bench_memory's host-state rows use it)
STATE_SLICE_MB = 128.0
#: InBackwardOptimizer's ``_SLICE_ALIGN``: a slice's length in elements is a multiple of it
SLICE_ALIGN = 64
#: ``LinearCrossEntropyConfig.workspace_fraction`` of kernels/ojas_kernels/linear_cross_entropy_config.py
LCE_WORKSPACE_FRACTION = 0.14
#: the kernel's floor on its workspace budget (``16 << 20`` in ``_three_products``)
LCE_WORKSPACE_FLOOR = 16 * 2**20
#: the bound kernels/ojas_kernels/linear_cross_entropy.py states and the H200 measures (1.128-1.140:
#: peak_over_gradients of the bench_linear_cross_entropy records, peer ojas, of 2026-11-29 and
#: 2026-12-06 in benchmarks/records.jsonl): the loss's peak above its inputs is at most this times the gradients
LCE_PEAK_OVER_GRADIENTS = 1.15


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
                raise ValueError(
                    f"hidden ({self.hidden}) must be a multiple of heads ({self.heads}), or head_dim given"
                )
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
        tests/integrations/test_optimize_huggingface.py are in :data:`UNMODELLED`, each with its reason), for
        Mistral's sliding window and for biases (``attention_bias``, ``mlp_bias``); a config
        without ``model_type`` is read as a Llama's."""
        get = config.get if isinstance(config, Mapping) else (lambda key, default=None: getattr(config, key, default))
        family = get("model_type")
        if family is not None and family not in FAMILIES:
            why = UNMODELLED.get(family, "not a Llama-shaped decoder")
            raise NotImplementedError(
                f"model_type {family!r} is not modelled by the planner ({why}); it models "
                f"{' and '.join(FAMILIES)} decoders"
            )
        if family == "mistral" and get("sliding_window") is not None:
            raise NotImplementedError(
                f"mistral with sliding_window={get('sliding_window')} is not modelled by the "
                "planner (the attention mask Hugging Face builds for the window); it models "
                "mistral without a window (sliding_window=None)"
            )
        for key in ("attention_bias", "mlp_bias"):
            if get(key, False):
                raise NotImplementedError(f"config.{key}=True: biases are not modelled by the planner")
        values = {}
        for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size"):
            if get(key) is None:
                raise ValueError(f"config has no {key} (a LlamaConfig-like config is needed)")
            values[key] = get(key)
        heads = values["num_attention_heads"]
        return cls(
            hidden=values["hidden_size"],
            layers=values["num_hidden_layers"],
            heads=heads,
            kv_heads=get("num_key_value_heads") or heads,
            intermediate=values["intermediate_size"],
            vocab=values["vocab_size"],
            tied=bool(get("tie_word_embeddings", False)),
            head_dim=get("head_dim"),
            name=name,
        )

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
            raise NotImplementedError(
                f"the model has {count} parameters, a Llama decoder of its config "
                f"{model.params()}: its architecture is not modelled"
            )
        return model


#: the Hugging Face families the planner models: ``LlamaForCausalLM``'s modules and tensors
#: (tests/memory/test_memory.py checks a CPU training step of each against the plan)
FAMILIES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM, without a sliding window"}
#: families that optimize_model handles (tests/integrations/test_optimize_huggingface.py) and the planner does
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
PRESETS: dict[str, Model] = {
    m.name: m
    for m in (
        Model(
            896,
            24,
            14,
            2,
            4864,
            151936,
            tied=True,
            name="llama-0.5b",
            source="the dimensions of Qwen2.5-0.5B's config.json (tied, GQA 14/2), as a LlamaForCausalLM: "
            "Qwen2's q/k/v biases are left out",
        ),
        Model(
            2048,
            18,
            16,
            16,
            5632,
            32000,
            name="llama-1b",
            source="benchmarks/bench_optimize_model.py's 1.06B model (measured on the H200)",
        ),
        Model(
            3072, 28, 24, 8, 8192, 128256, tied=True, name="llama-3b", source="meta-llama/Llama-3.2-3B's config.json"
        ),
        Model(4096, 32, 32, 32, 11008, 32000, name="llama-7b", source="meta-llama/Llama-2-7b-hf's config.json"),
        Model(5120, 40, 40, 40, 13824, 32000, name="llama-13b", source="meta-llama/Llama-2-13b-hf's config.json"),
        Model(8192, 80, 64, 8, 28672, 32000, name="llama-70b", source="meta-llama/Llama-2-70b-hf's config.json"),
    )
}


@dataclass(frozen=True)
class Setting:
    """A training step to plan: what the library does to save memory (``recipe``, a
    :class:`~ojas_ref.recipe.MemoryRecipe`; standard PyTorch by default) and the workload:
    ``dtype`` (of weights, gradients, optimizer state and activations: ``torch.float32`` or
    ``torch.bfloat16``, or their torch names, :func:`ojas_ref.recipe.as_dtype`), ``optimizer``
    (:data:`OPTIMIZERS`), ``batch`` x ``seq`` tokens.

    The planner reads the recipe's ``attention``, ``linear_cross_entropy``, ``rms_norm``,
    ``swiglu`` (what ``optimize_model`` applies, the fused kernels on CUDA), ``checkpoint``
    (per-layer non-reentrant activation checkpointing; ``"offload"``: each checkpointed layer's
    input in pinned host memory between forward and backward, ojas_ref/nn/offload.py,
    :func:`offloaded_checkpoints_device_bytes`), ``checkpoint_split`` (each layer checkpointed as
    two segments, its attention half and its MLP half: :func:`checkpoints_per_layer`,
    :func:`recomputed_mlp_half_bytes`, :func:`recomputed_attention_half_bytes`), ``in_backward``
    (``InBackwardOptimizer``, buckets of ``bucket_cap_mb``), ``state_device`` (``"cpu"``: the
    optimizer state in host memory, streamed to the device bucket by bucket,
    :func:`bucket_state_bytes`), ``state_slice_mb`` (a parameter whose state exceeds it updated
    slice by slice, :func:`sliced`; None, the optimizer's default and what the records measured
    before slicing existed: whole parameters) and ``head_update`` (the head updated chunk by
    chunk inside the loss's backward: plain SGD only, an untied head). ``rope`` and ``relu_mask``
    change no tensor the planner counts (the fused RoPE saves what Hugging Face's saves; a Llama
    has no ReLU); ``sparse_embedding`` and ``overlap`` are not modelled (:func:`plan` raises).

    ``ojas_attention_copy``: the ojas attention output copied to [batch, seq, heads, dim] (the
    adapter before the kernel wrote that layout itself): set for the record files measured then,
    not for a plan.

    The keywords of release 0.2 (``in_backward``, ``checkpoint``, ``ojas_attention``,
    ``ojas_loss``, ``ojas_rms_norm``, ``ojas_swiglu``, ``offload``, ``split``, ``host_state``,
    ``head_update``, ``state_slice_mb``, ``bucket_cap_mb``; ``fused`` of 0.1) and the fields of
    those names are deprecated aliases of the recipe's, for one release: they warn
    (``DeprecationWarning``) and set / read ``recipe`` (:data:`_LEGACY`)."""

    recipe: MemoryRecipe = MemoryRecipe.plain()
    dtype: torch.dtype = torch.bfloat16
    optimizer: str = "adamw"
    batch: int = 1
    seq: int = 2048
    ojas_attention_copy: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.recipe, MemoryRecipe):
            raise TypeError(f"recipe must be an ojas_ref.MemoryRecipe, got {type(self.recipe).__name__}")
        dtype = as_dtype(self.dtype, "dtype")
        if dtype not in DTYPE_BYTES:
            raise ValueError(
                f"dtype must be one of {tuple(dtype_name(d) for d in DTYPE_BYTES)} (the dtypes the planner models), "
                f"got {dtype_name(dtype)}"
            )
        object.__setattr__(self, "dtype", dtype)
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        for name in ("batch", "seq"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if not isinstance(self.ojas_attention_copy, bool):
            raise TypeError(f"ojas_attention_copy must be a bool, got {type(self.ojas_attention_copy).__name__}")
        if self.recipe.head_update and self.optimizer != "sgd":
            raise ValueError(
                f"recipe.head_update=True needs optimizer='sgd', got {self.optimizer!r}: the head is updated inside "
                "the linear cross-entropy's backward by InBackwardOptimizer(head_weight=...), plain SGD only"
            )

    def __getattr__(self, name: str) -> Any:
        """The deprecated fields (:data:`_LEGACY`), read from the recipe (warns ``DeprecationWarning``)."""
        if name in _LEGACY and "recipe" in self.__dict__:
            warnings.warn(
                f"Setting.{name} is deprecated and will be removed in the next release; read "
                f"Setting.recipe.{_LEGACY[name]}",
                DeprecationWarning,
                stacklevel=2,
            )
            return _legacy_value(self.recipe, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

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
        """The benchmark's name of the setting (standard, standard+ckpt, ojas, ojas+ckpt), or the
        recipe's flags of a mix it did not run; ``+split``, ``+offload``, ``+host-state`` and
        ``+head-update`` appended when on (bench_optimize_model's records have none of them), and
        the bucket size when in backward and not the default 64 MiB."""
        r = self.recipe
        pieces = (
            ("attention", r.attention),
            ("linear-cross-entropy", r.linear_cross_entropy),
            ("rms-norm", r.rms_norm),
            ("swiglu", r.swiglu),
            ("in-backward", r.in_backward),
        )
        host = "".join(
            f"+{name}"
            for name, on in (
                ("split", r.checkpoint_split),
                ("offload", r.checkpoint == "offload"),
                ("host-state", r.state_device == "cpu"),
                ("head-update", r.head_update),
            )
            if on
        )
        if r.in_backward and r.bucket_cap_mb != BUCKET_CAP_MB:
            host += f"+bucket-{r.bucket_cap_mb:g}MiB"
        checkpoint = bool(r.checkpoint)
        if all(on for _, on in pieces) or not any(on for _, on in pieces):
            return ("ojas" if r.in_backward else "standard") + ("+ckpt" if checkpoint else "") + host
        parts = [name for name, on in pieces + (("ckpt", checkpoint),) if on]
        return "+".join(parts) + host


#: the old keywords of :class:`Setting` (release 0.1 and 0.2), deprecated aliases for one release:
#: each old name -> the :class:`~ojas_ref.recipe.MemoryRecipe` field it sets. ``checkpoint``,
#: ``offload`` and ``host_state`` set ``checkpoint`` / ``state_device`` together
#: (:func:`_legacy_recipe`); ``fused`` is the name of ``in_backward`` in release 0.1.
_LEGACY = {
    "fused": "in_backward",
    "in_backward": "in_backward",
    "ojas_attention": "attention",
    "ojas_loss": "linear_cross_entropy",
    "ojas_rms_norm": "rms_norm",
    "ojas_swiglu": "swiglu",
    "checkpoint": "checkpoint",
    "offload": "checkpoint",
    "split": "checkpoint_split",
    "host_state": "state_device",
    "head_update": "head_update",
    "state_slice_mb": "state_slice_mb",
    "bucket_cap_mb": "bucket_cap_mb",
}


def _legacy_value(recipe: MemoryRecipe, old: str) -> Any:
    """The value of the old field ``old`` of a setting with ``recipe``."""
    if old == "checkpoint":
        return bool(recipe.checkpoint)
    if old == "offload":
        return recipe.checkpoint == "offload"
    if old == "host_state":
        return recipe.state_device == "cpu"
    return getattr(recipe, _LEGACY[old])


def _legacy_recipe(recipe: MemoryRecipe, old: Mapping[str, Any]) -> MemoryRecipe:
    """``recipe`` with the old keywords ``old`` applied (:data:`_LEGACY`): the one translation of
    the old settings. The old combination rules stand (``offload`` needs ``checkpoint``); the
    others are :class:`MemoryRecipe`'s checks, which name the new field."""
    if "fused" in old and "in_backward" in old:
        raise TypeError("Setting() got both in_backward= and its deprecated alias fused=")
    for name in ("checkpoint", "offload", "host_state"):
        if name in old and not isinstance(old[name], bool):
            raise TypeError(f"{name} must be a bool, got {type(old[name]).__name__}")
    changes = {
        _LEGACY[name]: value for name, value in old.items() if name not in ("checkpoint", "offload", "host_state")
    }
    checkpoint = old.get("checkpoint", _legacy_value(recipe, "checkpoint"))
    offload = old.get("offload", _legacy_value(recipe, "offload"))
    if offload and not checkpoint:
        raise ValueError(
            "offload=True needs checkpoint=True: offload moves the checkpoints (the layer inputs that activation "
            "checkpointing keeps) to host memory"
        )
    changes["checkpoint"] = "offload" if offload else checkpoint
    if "host_state" in old:
        changes["state_device"] = "cpu" if old["host_state"] else None
    return replace(recipe, **changes)


_dataclass_init = Setting.__init__


@functools.wraps(_dataclass_init)
def _init(self: Setting, *args: Any, **kwargs: Any) -> None:
    """``Setting``'s ``__init__``: the dataclass's, after the deprecated keywords (:data:`_LEGACY`)
    are moved into ``recipe`` (on top of the one given, if any) with a ``DeprecationWarning``."""
    old = {name: kwargs.pop(name) for name in list(kwargs) if name in _LEGACY}
    if old:
        base = args[0] if args else kwargs.get("recipe", MemoryRecipe.plain())
        if not isinstance(base, MemoryRecipe):
            raise TypeError(f"recipe must be an ojas_ref.MemoryRecipe, got {type(base).__name__}")
        recipe = _legacy_recipe(base, old)
        plain = MemoryRecipe.plain()
        changed = ", ".join(
            f"{f.name}={getattr(recipe, f.name)!r}"
            for f in dataclasses.fields(recipe)
            if getattr(recipe, f.name) != getattr(plain, f.name)
        )
        warnings.warn(
            f"Setting({', '.join(f'{name}=...' for name in old)}) is deprecated and will be removed in the next "
            f"release; use Setting(recipe=MemoryRecipe.plain({changed}))",
            DeprecationWarning,
            stacklevel=2,
        )
        if args:
            args = (recipe, *args[1:])
        else:
            kwargs["recipe"] = recipe
    _dataclass_init(self, *args, **kwargs)


Setting.__init__ = _init  # type: ignore[method-assign]
