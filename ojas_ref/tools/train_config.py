"""The setting of an ``ojas train`` run: :class:`TrainConfig` (one field per option; the memory
settings are one :class:`~ojas_ref.MemoryRecipe`), the model presets, the learning-rate schedule
(:func:`learning_rate`), the CPU threads (:func:`default_threads`) and :func:`describe`, the
setting in words. :func:`upgrade_fields` reads release 0.1's field names (deprecated keywords of
:class:`TrainConfig`, and the settings saved in a run's state files)."""

from __future__ import annotations

import dataclasses
import inspect
import math
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch

from ojas_ref import memory
from ojas_ref.recipe import MemoryRecipe, as_dtype, dtype_name
from ojas_ref.tools.data import stdlib_directory
from ojas_ref.tools.data import vocab_size as tokenizer_size

__all__ = [
    "DTYPES",
    "PRESETS",
    "RESUMABLE_CHANGES",
    "TrainConfig",
    "default_threads",
    "describe",
    "learning_rate",
    "upgrade_fields",
]


def _llama_shape(model: memory.Model) -> dict[str, int]:
    """The config fields of a planner preset that ``ojas train`` takes (the vocabulary comes
    from the tokenizer)."""
    return {
        "hidden_size": model.hidden,
        "intermediate_size": model.intermediate,
        "num_hidden_layers": model.layers,
        "num_attention_heads": model.heads,
    }


#: Llama shapes (the vocabulary comes from the tokenizer). ``tiny``: the CPU default;
#: ``nano``: seconds-long smoke tests; ``1b``: the planner's ``llama-1b``, the benchmarks'
#: 1.06B shape (with vocab 32000).
PRESETS: dict[str, dict[str, int]] = {
    "nano": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2},
    "tiny": {"hidden_size": 128, "intermediate_size": 512, "num_hidden_layers": 4, "num_attention_heads": 4},
    "1b": _llama_shape(memory.PRESETS["llama-1b"]),
}
#: the dtypes ``ojas train`` trains in, by their torch names
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
#: settings a resumed run may change (they do not change the computation)
RESUMABLE_CHANGES = frozenset(
    {"resume", "stop_after", "progress", "state_every", "keep_states", "cache_dir", "out_dir", "device", "threads"}
)
_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")
LOG_NAME, PLOT_NAME, TOKENIZER_NAME, STATE_DIR = "train.jsonl", "loss.png", "tokenizer.json", "state"
#: where the runs of release 0.1 kept their state files (still read on resume)
OLD_STATE_DIR = "checkpoints"
#: the memory recipe of a run: optimize_model's defaults (every primitive, no checkpointing), AdamW in backward
DEFAULT_RECIPE = MemoryRecipe(in_backward=True)
#: release 0.1's TrainConfig fields that the recipe replaced (deprecated keywords; :func:`upgrade_fields`)
OLD_RECIPE_FIELDS = (
    "ojas",
    "in_backward",
    "activation_checkpointing",
    "offload_checkpoints",
    "split_checkpoints",
    "state_on_host",
)
#: release 0.1's TrainConfig fields renamed (deprecated keywords; :func:`upgrade_fields`)
RENAMED_FIELDS = {"checkpoint_every": "state_every", "keep_checkpoints": "keep_states"}
#: the recipe fields that ``ojas=`` (release 0.1) switched together: the primitives of optimize_model
_OJAS_FIELDS = tuple(
    f.name
    for f in dataclasses.fields(MemoryRecipe)
    if getattr(MemoryRecipe(), f.name) != getattr(MemoryRecipe.plain(), f.name)
)


def _recipe_with_old_fields(recipe: MemoryRecipe, old: dict[str, Any]) -> MemoryRecipe:
    """``recipe`` with release 0.1's fields ``old`` (:data:`OLD_RECIPE_FIELDS`) written into it:
    ``ojas`` switches every primitive of optimize_model, ``activation_checkpointing`` is
    ``checkpoint``, ``offload_checkpoints`` makes it ``"offload"``, ``split_checkpoints`` is
    ``checkpoint_split``, ``state_on_host`` is ``state_device="cpu"``."""
    changes: dict[str, Any] = {}
    if "ojas" in old:
        changes.update(dict.fromkeys(_OJAS_FIELDS, old["ojas"]))
    if "in_backward" in old:
        changes["in_backward"] = old["in_backward"]
    if "activation_checkpointing" in old:
        changes["checkpoint"] = old["activation_checkpointing"]
    if old.get("offload_checkpoints"):
        if not changes.get("checkpoint", recipe.checkpoint):
            raise ValueError(
                "offload_checkpoints (--offload-checkpoints) needs activation_checkpointing "
                "(--activation-checkpointing): it moves the checkpoints to host memory; write "
                "recipe=MemoryRecipe(checkpoint='offload') (--checkpoint offload)"
            )
        changes["checkpoint"] = "offload"
    if "split_checkpoints" in old:
        changes["checkpoint_split"] = old["split_checkpoints"]
    if "state_on_host" in old:
        changes["state_device"] = "cpu" if old["state_on_host"] else None
    return dataclasses.replace(recipe, **changes)


def upgrade_fields(values: dict[str, Any], *, warn: bool) -> dict[str, Any]:
    """``values`` (:class:`TrainConfig`'s keywords, or the settings a run saved in its state
    files) with release 0.1's fields in today's shape: :data:`OLD_RECIPE_FIELDS` written into
    ``recipe`` (``values``' recipe, a :class:`~ojas_ref.MemoryRecipe` or its dict, else
    :data:`DEFAULT_RECIPE`), :data:`RENAMED_FIELDS` renamed. ``warn``: a ``DeprecationWarning``
    names the old fields and what to write instead. The one place where the old names are read."""
    old = {name: values[name] for name in OLD_RECIPE_FIELDS if name in values}
    renamed = [name for name in RENAMED_FIELDS if name in values]
    if not old and not renamed:
        return values
    if warn:
        instead = [f"{name} -> {RENAMED_FIELDS[name]}" for name in renamed]
        if old:
            instead.append(f"{', '.join(old)} -> recipe=MemoryRecipe(...)")
        warnings.warn(
            f"TrainConfig's fields of release 0.1 are deprecated: {'; '.join(instead)}",
            DeprecationWarning,
            stacklevel=3,
        )
    upgraded = {name: value for name, value in values.items() if name not in old and name not in RENAMED_FIELDS}
    for name in renamed:
        if RENAMED_FIELDS[name] in upgraded:
            raise TypeError(f"pass {RENAMED_FIELDS[name]} or its deprecated name {name}, not both")
        upgraded[RENAMED_FIELDS[name]] = values[name]
    if old:
        recipe = upgraded.get("recipe", DEFAULT_RECIPE)
        recipe = MemoryRecipe(**recipe) if isinstance(recipe, dict) else recipe
        upgraded["recipe"] = _recipe_with_old_fields(recipe, old)
    return upgraded


def _default_cache() -> str:
    return str(Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ojas")


@dataclass(frozen=True)
class TrainConfig:
    """The setting of a run (the fields of ``ojas train``'s options). ``recipe``: what ojas does
    to save memory (:class:`~ojas_ref.MemoryRecipe`; the optimizer is AdamW, so not
    ``head_update`` or ``sparse_embedding``, which need plain SGD). ``dtype``: ``torch.float32``
    or ``torch.bfloat16`` (or its name). Release 0.1's keywords ``ojas``, ``in_backward``,
    ``activation_checkpointing``, ``offload_checkpoints``, ``split_checkpoints``,
    ``state_on_host``, ``checkpoint_every``, ``keep_checkpoints`` are deprecated aliases
    (:func:`upgrade_fields`)."""

    preset: str = "tiny"
    model_config_file: Optional[str] = None
    init_from: Optional[str] = None
    seq_len: int = 128
    batch_size: int = 8
    accumulation_steps: int = 1
    steps: int = 300
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 50
    weight_decay: float = 0.1
    max_grad_norm: Optional[float] = 1.0
    #: what ojas does to save memory: applied by optimize_model(model, recipe) and InBackwardOptimizer.from_recipe
    recipe: MemoryRecipe = DEFAULT_RECIPE
    dtype: torch.dtype = torch.float32
    device: str = "auto"
    seed: int = 0
    data_dir: Optional[str] = None
    data_glob: str = "*.py"
    max_bytes: int = 4_000_000
    vocab: int = 2048
    cache_dir: str = dataclasses.field(default_factory=_default_cache)
    out_dir: str = "ojas-train"
    #: steps between state files (``<out_dir>/state/``)
    state_every: int = 100
    #: state files kept
    keep_states: int = 2
    resume: Optional[str] = None
    stop_after: Optional[int] = None
    progress: bool = True
    #: intra-op CPU threads (torch.set_num_threads); None: :func:`default_threads`
    threads: Optional[int] = None

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {self.preset!r}")
        if self.model_config_file is not None and not Path(self.model_config_file).exists():
            raise ValueError(f"model_config_file {self.model_config_file!r} does not exist")
        if self.init_from is not None:
            if self.model_config_file is not None:
                raise ValueError("init_from and model_config_file both give the model: pass one")
            missing = [n for n in ("config.json", TOKENIZER_NAME) if not (Path(self.init_from) / n).is_file()]
            if missing:
                raise ValueError(
                    f"init_from {self.init_from!r} must be a directory written by save_pretrained with "
                    f"the tokenizer.json the weights were trained with; it lacks {', '.join(missing)}"
                )
        if not isinstance(self.recipe, MemoryRecipe):
            raise TypeError(f"recipe must be an ojas_ref.MemoryRecipe, got {type(self.recipe).__name__}")
        for name in ("head_update", "sparse_embedding"):
            if getattr(self.recipe, name):
                raise ValueError(
                    f"recipe.{name}=True (--{name.replace('_', '-')}) needs plain SGD; ojas train's optimizer is AdamW"
                )
        object.__setattr__(self, "dtype", as_dtype(self.dtype, "dtype (--dtype)"))
        if self.dtype not in DTYPES.values():
            raise ValueError(f"dtype (--dtype) must be one of {sorted(DTYPES)}, got {dtype_name(self.dtype)!r}")
        if not isinstance(self.device, str) or not _DEVICE.fullmatch(self.device):
            raise ValueError(f"device (--device) must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {self.device!r}")
        if self.threads is not None and (
            isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads < 1
        ):
            raise ValueError(f"threads (--threads) must be None (automatic) or an int >= 1, got {self.threads!r}")
        for name in ("seq_len", "batch_size", "accumulation_steps", "steps", "state_every", "keep_states"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if isinstance(self.warmup_steps, bool) or not isinstance(self.warmup_steps, int) or self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be an int >= 0, got {self.warmup_steps!r}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr must be a finite float > 0, got {self.lr!r}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio!r}")
        if self.max_grad_norm is not None and not (math.isfinite(self.max_grad_norm) and self.max_grad_norm > 0):
            raise ValueError(f"max_grad_norm must be None or a finite float > 0, got {self.max_grad_norm!r}")
        if self.stop_after is not None and not (
            isinstance(self.stop_after, int) and 1 <= self.stop_after <= self.steps
        ):
            raise ValueError(f"stop_after must be None or an int in [1, steps={self.steps}], got {self.stop_after!r}")

    def model_config(self, vocab_size: int) -> Any:
        """The ``transformers`` config of the model with ``vocab_size`` tokens: ``init_from``'s (its
        own vocabulary, which must hold the tokenizer's, and positions, which must reach
        ``seq_len``), ``model_config_file`` (its vocabulary replaced, its positions raised to
        ``seq_len`` if fewer), else the preset's Llama."""
        import transformers

        if self.init_from is not None:
            config = transformers.AutoConfig.from_pretrained(self.init_from, local_files_only=True)
            if vocab_size > config.vocab_size:
                raise ValueError(
                    f"init_from {self.init_from!r}: its tokenizer has {vocab_size} ids (added tokens "
                    f"included) but the model's vocabulary only {config.vocab_size}"
                )
            positions = getattr(config, "max_position_embeddings", None)
            if positions is not None and self.seq_len > positions:
                raise ValueError(f"seq_len {self.seq_len} is above init_from's max_position_embeddings {positions}")
            config.use_cache = False
            return config
        if self.model_config_file is not None:
            try:
                config = transformers.AutoConfig.from_pretrained(self.model_config_file)
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
                first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
                raise ValueError(
                    f"model_config_file (--model-config-file) {self.model_config_file!r}: not a Hugging "
                    f"Face config transformers can read ({first})"
                ) from None
            config.vocab_size, config.use_cache = vocab_size, False
            config.max_position_embeddings = max(getattr(config, "max_position_embeddings", 0), self.seq_len)
            return config
        shape = PRESETS[self.preset]
        return transformers.LlamaConfig(
            vocab_size=vocab_size,
            max_position_embeddings=self.seq_len,
            num_key_value_heads=shape["num_attention_heads"],
            tie_word_embeddings=False,
            attention_dropout=0.0,
            use_cache=False,
            **shape,
        )


_fields_init = TrainConfig.__init__


def _init(self: TrainConfig, **values: Any) -> None:
    _fields_init(self, **upgrade_fields(values, warn=True))


_init.__doc__, _init.__signature__ = _fields_init.__doc__, inspect.signature(_fields_init)  # type: ignore[attr-defined]
TrainConfig.__init__ = _init  # type: ignore[method-assign]  # release 0.1's keywords (upgrade_fields), then the fields


def saved_fields(config: TrainConfig) -> dict[str, Any]:
    """``config`` as plain values (the recipe a dict, the dtype its name), as a run saves it in
    its state files and compares it on resume."""
    return {**dataclasses.asdict(config), "dtype": dtype_name(config.dtype)}


def learning_rate(step: int, config: TrainConfig) -> float:
    """The learning rate of optimizer step ``step`` (0-based): linear warmup to ``lr`` over
    ``warmup_steps`` (the whole run if it has no more steps), then cosine decay to
    ``lr * min_lr_ratio`` at the last step. A function of the step number alone."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    decay_steps = max(config.steps - 1 - config.warmup_steps, 1)
    progress = min((step - config.warmup_steps) / decay_steps, 1.0)
    floor = config.lr * config.min_lr_ratio
    return floor + (config.lr - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def _device(config: TrainConfig) -> torch.device:
    if config.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(config.device)


def _check_device(device: torch.device) -> None:
    """A ValueError naming ``device`` when this machine does not have it."""
    if device.type != "cuda":
        return
    if not torch.cuda.is_available():
        why = "torch was built without CUDA" if torch.version.cuda is None else "no CUDA device is visible"
        raise ValueError(
            f"device (--device) {str(device)!r}: CUDA is not available here ({why}, torch "
            f"{torch.__version__}); use --device cpu or --device auto"
        )
    count = torch.cuda.device_count()
    if device.index is not None and device.index >= count:
        raise ValueError(
            f"device (--device) {str(device)!r}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}"
        )


def default_threads() -> int:
    """The intra-op CPU threads of a run without ``threads``: ``torch.get_num_threads()`` when
    ``OMP_NUM_THREADS`` is set (the user's choice), else half the cores this process may use
    (``os.sched_getaffinity``), at least 1 and at most 4. A thread per core stalls as soon as
    another process runs: torch's OpenMP threads wait for each other at every operator, and one
    of them waits for the core the other process holds."""
    if os.environ.get("OMP_NUM_THREADS"):
        return torch.get_num_threads()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return min(4, max(1, cores // 2))


def _threads_line(config: TrainConfig) -> str:
    """The settings block's ``threads`` line."""
    if config.threads is not None:
        return f"threads    {config.threads} intra-op CPU thread(s) (--threads)"
    if os.environ.get("OMP_NUM_THREADS"):
        how = f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}"
    else:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        how = f"automatic: half of this process's {cores} core(s), at most 4"
    return f"threads    {default_threads()} intra-op CPU thread(s) ({how}; --threads N to choose)"


def _pretrained_tokenizer(config: TrainConfig) -> Any:
    """``init_from``'s tokenizer, or None (the run trains its own BPE)."""
    if config.init_from is None:
        return None
    import tokenizers

    return tokenizers.Tokenizer.from_file(str(Path(config.init_from) / TOKENIZER_NAME))


def _vocab(config: TrainConfig, vocab_size: Optional[int]) -> int:
    """The model's vocabulary before the corpus is read: ``vocab_size`` if known, else
    ``init_from``'s tokenizer's, else the BPE's target ``vocab``."""
    if vocab_size is not None:
        return vocab_size
    return config.vocab if config.init_from is None else tokenizer_size(_pretrained_tokenizer(config))


def describe(config: TrainConfig, vocab_size: Optional[int] = None) -> str:
    """The setting in words: model shape and size, tokens, schedule, optimizer, data, outputs."""
    import transformers

    vocab = _vocab(config, vocab_size)
    model_config = config.model_config(vocab)
    with torch.device("meta"):
        parameters = sum(p.numel() for p in transformers.AutoModelForCausalLM.from_config(model_config).parameters())
    tokens_per_step = config.batch_size * config.seq_len * config.accumulation_steps
    source = _source(config, model_config)
    data = config.data_dir or f"the Python standard library ({stdlib_directory()})"
    if config.warmup_steps > config.steps:
        schedule = (
            f"schedule   {config.steps} steps, all inside the {config.warmup_steps}-step warm-up: the lr rises "
            f"to {learning_rate(config.steps - 1, config):g} and never reaches --lr {config.lr:g} "
            "(warning: lower --warmup-steps to at most --steps to reach it)"
        )
    else:
        schedule = (
            f"schedule   {config.steps} steps, lr {config.lr:g}, {config.warmup_steps} warmup steps, cosine "
            f"to {config.lr * config.min_lr_ratio:g}"
        )
    lines = [
        f"model      {source}: hidden {model_config.hidden_size}, {model_config.num_hidden_layers} layers, "
        f"{model_config.num_attention_heads} heads, intermediate {model_config.intermediate_size}, vocabulary {model_config.vocab_size}"
        + (
            " (the BPE's target; the trained tokenizer's size with added tokens is used)"
            if vocab_size is None and config.init_from is None
            else ""
        )
        + f": {parameters / 1e6:.2f}M parameters, {dtype_name(config.dtype)}, device {_device(config)}",
        _recipe_line(config.recipe),
        f"optimizer  AdamW {'in backward (InBackwardOptimizer)' if config.recipe.in_backward else '(standard loop)'}, "
        + ("state in host memory, " if config.recipe.state_device == "cpu" else "")
        + f"weight decay {config.weight_decay}, clip {config.max_grad_norm}",
        schedule,
        f"batch      {config.batch_size} x {config.seq_len} tokens x {config.accumulation_steps} accumulation = "
        f"{tokens_per_step} tokens/step, {tokens_per_step * config.steps:,} in all",
        f"data       {data}, files {config.data_glob!r}, up to {config.max_bytes:,} bytes; "
        + ("init_from's tokenizer.json" if config.init_from else f"byte-level BPE of {config.vocab} tokens")
        + f"; cache {config.cache_dir}",
        f"outputs    {config.out_dir}: {LOG_NAME}, {PLOT_NAME}, state files every {config.state_every} "
        f"steps (keep {config.keep_states})" + (f"; resume {config.resume}" if config.resume else ""),
        _threads_line(config),
    ]
    return "\n".join(lines)


def _recipe_line(recipe: MemoryRecipe) -> str:
    """The settings block's ``ojas`` line: what ``optimize_model`` applies."""
    on = [name for name in _OJAS_FIELDS if getattr(recipe, name)]
    applied = "on" if len(on) == len(_OJAS_FIELDS) else "off" if not on else f"with {', '.join(on)} only"
    return (
        f"ojas       optimize_model {applied}"
        + (", activation checkpointing" if recipe.checkpoint else "")
        + (" (checkpoints offloaded to host memory)" if recipe.checkpoint == "offload" else "")
        + (" (two per layer: attention half, MLP half)" if recipe.checkpoint_split else "")
    )


def _source(config: TrainConfig, model_config: Any) -> str:
    """Where the model comes from, in words."""
    if config.init_from:
        return f"{model_config.model_type} weights of {config.init_from}"
    if config.model_config_file:
        return f"{model_config.model_type} of {config.model_config_file}"
    return f"Llama preset {config.preset!r}"
