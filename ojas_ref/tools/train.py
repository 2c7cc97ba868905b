"""``train(TrainConfig(...))``: a Llama-style decoder trained from scratch on a text corpus, with
``optimize_model``, AdamW (fused into backward by :class:`~ojas_ref.InBackwardOptimizer` or the
standard loop), a warmup + cosine schedule, progress, logs, a loss plot and checkpoints.

* Data (:mod:`ojas_ref.tools.data`): the standard library's ``.py`` files by default, a byte-level
  BPE, a hash-keyed token cache, a seeded resumable loader; ids checked against the model.
* Schedule: the learning rate of step ``s`` is :func:`learning_rate` of ``s`` alone (no
  scheduler state), so a resumed run cannot compound it.
* Records: a tqdm bar from the first step (loss, lr, tokens/s, peak memory),
  ``<out_dir>/train.jsonl`` (one record per step), ``<out_dir>/loss.png``.
* Checkpoints (:mod:`ojas_ref.tools.train_state`): model, optimizer, step, RNG states, loader position
  and the setting, every ``checkpoint_every`` steps, at the end, at ``stop_after`` and at
  SIGTERM/SIGINT (the handler sets a flag; the loop saves after the step and returns).
  ``resume`` continues bitwise as the uninterrupted run (same parameters, same losses; tested
  on the CPU, with both optimizers, accumulation and clipping, at the same thread count; not yet
  on CUDA).
* Model: a preset Llama (:data:`PRESETS`) or ``model_config_file``, a Hugging Face config, from
  scratch (seeded initialisation); or ``init_from``, a local directory written by
  ``save_pretrained`` holding the weights, their config and the ``tokenizer.json`` they were
  trained with (the corpus is tokenised with it; nothing is downloaded).
* Memory: on CUDA, before the model is built, :func:`check_fits` predicts the step's peak with
  ``ojas plan``'s formulas (:mod:`ojas_ref.memory`) and refuses (:class:`PlanDoesNotFit`, exit 2)
  when it exceeds ``torch.cuda.mem_get_info``'s free bytes; a setting the planner does not model
  (accumulation, a non-Llama model) is run unchecked, with one line saying why. Not on the CPU.
  ``offload_checkpoints`` (``--offload-checkpoints``, with activation checkpointing:
  ``optimize_model(checkpoint="offload")``) and ``state_on_host`` (``--state-on-host``, with
  ``in_backward``: ``InBackwardOptimizer(state_device="cpu")``) move the checkpoints and the
  AdamW state to host memory; the plan's ``offload`` / ``host_state`` predict it (measured on
  the H200 through benchmarks/bench_memory.py, not through ``ojas train``). Resume with both is bitwise on the CPU (tested). ``split_checkpoints``
  (``--split-checkpoints``, with activation checkpointing: ``optimize_model(checkpoint_split=True)``)
  checkpoints each decoder layer as its attention half and its MLP half (bitwise the same run).
* Guards: :class:`TrainingDiverged`, naming the step, the tensor and the last checkpoint, for a
  non-finite loss (before its backward) and a non-finite gradient: in the standard loop its norm
  is checked before the update; fused into backward, the update has run when the gradient is
  whole, so the parameters are checked after it. A resume keeps the setting, so the advice is a
  new run (another ``out_dir``) with a lower ``lr``, more ``warmup_steps`` or clipping.
* Files: ``out_dir`` is locked (:func:`ojas_ref.tools.train_state.lock_directory`) from before the
  corpus is read to the end of the run, so a second run into it is refused at once
  (:class:`~ojas_ref.tools.train_state.DirectoryLocked`); a resume needs a checkpoint (a log
  without one is refused, never overwritten) and cuts the log back to the checkpoint's step; a
  failed write (a full disk) raises :class:`OutputError` naming the file and the last complete
  checkpoint.
* Threads: :func:`default_threads` intra-op threads on the CPU unless ``threads`` is given: the
  cores this process may use, halved (at most 4), so that one other busy process does not stall
  the step; ``OMP_NUM_THREADS``, when set, is kept. On a 2-core machine shared with other jobs
  (load average 6 to 9) the CPU default's median step took 24.9 s with 2 threads (torch's default
  there) and 1.5 s with 1; beside one more busy process, 36.7 s and 3.4 s.
* The CPU default (preset ``tiny``, 1.57M parameters, 300 steps of 8 x 128 tokens) is sized for
  a first run of at most 3 minutes on an idle 2-core machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import re
import resource
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch

from ojas_ref.tools import train_state as ckpt
from ojas_ref.tools import plan as planner
from ojas_ref.tools.data import PreparedData, WindowLoader, prepare, read_corpus, stdlib_directory
from ojas_ref.tools.data import vocab_size as tokenizer_size

__all__ = ["EXIT_CODES", "PRESETS", "OutputError", "PlanDoesNotFit", "TrainConfig", "TrainResult", "TrainingDiverged",
           "add_arguments", "check_fits", "default_threads", "describe", "learning_rate", "plan_line", "predict_peak",
           "run_command", "train"]

def _llama_shape(model: planner.Model) -> dict[str, int]:
    """The config fields of a planner preset that ``ojas train`` takes (the vocabulary comes
    from the tokenizer)."""
    return {"hidden_size": model.hidden, "intermediate_size": model.intermediate,
            "num_hidden_layers": model.layers, "num_attention_heads": model.heads}


#: Llama shapes (the vocabulary comes from the tokenizer). ``tiny``: the CPU default;
#: ``nano``: seconds-long smoke tests; ``1b``: the planner's ``llama-1b``, the benchmarks'
#: 1.06B shape (with vocab 32000).
PRESETS: dict[str, dict[str, int]] = {
    "nano": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2},
    "tiny": {"hidden_size": 128, "intermediate_size": 512, "num_hidden_layers": 4, "num_attention_heads": 4},
    "1b": _llama_shape(planner.PRESETS["llama-1b"]),
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
#: settings a resumed run may change (they do not change the computation)
RESUMABLE_CHANGES = frozenset({"resume", "stop_after", "progress", "checkpoint_every", "keep_checkpoints",
                               "cache_dir", "out_dir", "device", "threads"})
#: ``ojas train``'s exit status (:func:`run_command`)
EXIT_CODES = {0: "the run finished, stopped at --stop-after, or was finished already",
              1: "the training diverged (a NaN/inf loss or gradient)",
              2: "a bad setting: an option, a path, a device, a resume that cannot be done, --out-dir in use by "
                 "another run, or a step predicted not to fit in the GPU's free memory",
              3: "a file of the run could not be written (e.g. a full disk); the last complete checkpoint is intact",
              "128+N": "stopped by signal N (SIGTERM: 143, Ctrl-C: 130) after writing a checkpoint of the last step; "
                       "a second Ctrl-C stops at once, without one"}
_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")
LOG_NAME, PLOT_NAME, TOKENIZER_NAME, CHECKPOINT_DIR = "train.jsonl", "loss.png", "tokenizer.json", "checkpoints"


def _default_cache() -> str:
    return str(Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ojas")


@dataclass(frozen=True)
class TrainConfig:
    """The setting of a run (the fields of ``ojas train``'s options)."""

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
    in_backward: bool = True
    ojas: bool = True
    activation_checkpointing: bool = False
    #: with activation_checkpointing: the checkpoints in pinned host memory (optimize_model(checkpoint="offload"))
    offload_checkpoints: bool = False
    #: with activation_checkpointing: each layer as two checkpoints (optimize_model(checkpoint_split=True))
    split_checkpoints: bool = False
    #: with in_backward: the AdamW state in host memory (InBackwardOptimizer(state_device="cpu"))
    state_on_host: bool = False
    dtype: str = "float32"
    device: str = "auto"
    seed: int = 0
    data_dir: Optional[str] = None
    data_glob: str = "*.py"
    max_bytes: int = 4_000_000
    vocab: int = 2048
    cache_dir: str = dataclasses.field(default_factory=_default_cache)
    out_dir: str = "ojas-train"
    checkpoint_every: int = 100
    keep_checkpoints: int = 2
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
                raise ValueError(f"init_from {self.init_from!r} must be a directory written by save_pretrained with "
                                 f"the tokenizer.json the weights were trained with; it lacks {', '.join(missing)}")
        if self.offload_checkpoints and not self.activation_checkpointing:
            raise ValueError("offload_checkpoints (--offload-checkpoints) needs activation_checkpointing "
                             "(--activation-checkpointing): it moves the checkpoints to host memory")
        if self.split_checkpoints and not self.activation_checkpointing:
            raise ValueError("split_checkpoints (--split-checkpoints) needs activation_checkpointing "
                             "(--activation-checkpointing): it splits each layer's checkpoint in two")
        if self.state_on_host and not self.in_backward:
            raise ValueError("state_on_host (--state-on-host) needs in_backward (--in-backward): only "
                             "InBackwardOptimizer streams its state from host memory")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")
        if not isinstance(self.device, str) or not _DEVICE.fullmatch(self.device):
            raise ValueError(f"device (--device) must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {self.device!r}")
        if self.threads is not None and (isinstance(self.threads, bool) or not isinstance(self.threads, int)
                                         or self.threads < 1):
            raise ValueError(f"threads (--threads) must be None (automatic) or an int >= 1, got {self.threads!r}")
        for name in ("seq_len", "batch_size", "accumulation_steps", "steps", "checkpoint_every", "keep_checkpoints"):
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
        if self.stop_after is not None and not (isinstance(self.stop_after, int)
                                                and 1 <= self.stop_after <= self.steps):
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
                raise ValueError(f"init_from {self.init_from!r}: its tokenizer has {vocab_size} ids (added tokens "
                                 f"included) but the model's vocabulary only {config.vocab_size}")
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
                raise ValueError(f"model_config_file (--model-config-file) {self.model_config_file!r}: not a Hugging "
                                 f"Face config transformers can read ({first})") from None
            config.vocab_size, config.use_cache = vocab_size, False
            config.max_position_embeddings = max(getattr(config, "max_position_embeddings", 0), self.seq_len)
            return config
        shape = PRESETS[self.preset]
        return transformers.LlamaConfig(
            vocab_size=vocab_size, max_position_embeddings=self.seq_len,
            num_key_value_heads=shape["num_attention_heads"], tie_word_embeddings=False, attention_dropout=0.0,
            use_cache=False, **shape)


@dataclass
class TrainResult:
    """What a call of :func:`train` did."""

    model: torch.nn.Module
    #: optimizer steps done in all (the resumed ones included)
    step: int
    #: ``(step, loss)`` of the steps this call ran
    losses: list[tuple[int, float]]
    #: the last checkpoint written (None if none was)
    checkpoint: Optional[Path]
    #: None when all ``steps`` ran; ``"stop_after"``, or the signal's name (``"SIGTERM"``)
    stopped: Optional[str]
    log_path: Path
    plot_path: Path


class TrainingDiverged(RuntimeError):
    """A non-finite loss or gradient; the message names the step, the tensor and the last checkpoint."""


class PlanDoesNotFit(ValueError):
    """The predicted peak of a step exceeds the free device memory (a bad setting: ``ojas train`` exits 2)."""


class OutputError(RuntimeError):
    """A file of the run could not be written (a full disk, ...): the message names it and the last
    complete checkpoint (``ojas train`` exits 3)."""


#: TrainConfig's dtypes as the planner's
_PLAN_DTYPES = {"float32": "fp32", "bfloat16": "bf16"}


def _meta_model(config: TrainConfig, vocab_size: int) -> torch.nn.Module:
    """The run's model on the meta device (its shapes, no memory)."""
    import transformers

    transformers.logging.set_verbosity_error()
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(config.model_config(vocab_size))


def predict_peak(config: TrainConfig, model: torch.nn.Module) -> tuple[Any, bool]:
    """``(plan, lower_bound)``: :func:`ojas_ref.memory.plan` of the run's step, ``model`` being the
    run's model (e.g. on the meta device). ``lower_bound``: the setting clips inside a fused
    backward, whose first of two backward passes keeps the activations alive to its end; the
    planner models the second, so its peak is a lower bound of the run's. ``NotImplementedError``
    (the reason) for a setting the planner does not model."""

    if config.accumulation_steps > 1:
        raise NotImplementedError(f"gradient accumulation (accumulation_steps={config.accumulation_steps}) is not "
                                  "modelled by the planner")
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type != "llama":
        raise NotImplementedError(f"the model is {model_type!r}: the planner models Llama decoders only")
    try:  # NotImplementedError for a Llama config of another architecture (biases, ...)
        shape = planner.Model.from_module(model)
    except (ValueError, TypeError) as err:  # a config the planner cannot read is not the run's error
        raise NotImplementedError(f"the planner cannot read the model's config ({err})") from None
    setting = planner.Setting(dtype=_PLAN_DTYPES[config.dtype], optimizer="adamw", fused=config.in_backward,
                              batch=config.batch_size, seq=config.seq_len,
                              checkpoint=config.activation_checkpointing, ojas_attention=config.ojas,
                              ojas_loss=config.ojas, ojas_rms_norm=config.ojas, ojas_swiglu=config.ojas,
                              offload=config.offload_checkpoints, split=config.split_checkpoints,
                              host_state=config.state_on_host)
    lower_bound = config.in_backward and config.max_grad_norm is not None
    return planner.plan(shape, setting), lower_bound


def _gib(n: int) -> str:
    """Bytes as GiB (three decimals), or MiB (one) below 1 GiB."""
    return f"{n / 2**30:.3f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def check_fits(config: TrainConfig, model: torch.nn.Module, available_bytes: int,
               where: str = "the device") -> Optional[Any]:
    """Refuse the run (:class:`PlanDoesNotFit`, naming the predicted peak, its largest terms and
    ``available_bytes``) when its predicted peak (:func:`predict_peak`) exceeds ``available_bytes``;
    return the plan when it fits. A setting the planner does not model is not checked: one line
    on stderr says so and why, and None is returned."""
    try:
        predicted, lower_bound = predict_peak(config, model)
    except NotImplementedError as err:
        print(f"ojas train: memory plan not checked: {err}", file=sys.stderr)
        return None
    peak = predicted.peak_phase
    bound = "at least " if lower_bound else ""
    if predicted.peak > available_bytes:
        largest = sorted((t for t in peak.terms if t.bytes), key=lambda t: t.bytes, reverse=True)[:3]
        terms = ", ".join(f"{t.name} {_gib(t.bytes)}" for t in largest)
        advice = [a for on, a in ((config.batch_size > 1, "lower batch_size"), (True, "lower seq_len"),
                                  (not config.activation_checkpointing, "turn on activation_checkpointing"),
                                  (config.activation_checkpointing and not config.offload_checkpoints,
                                   "turn on offload_checkpoints"),
                                  (config.in_backward and not config.state_on_host, "turn on state_on_host"),
                                  (not config.in_backward, "turn on in_backward"), (not config.ojas, "turn on ojas"),
                                  (config.dtype == "float32", "use bfloat16")) if on]
        advice_text = ", ".join(advice)
        raise PlanDoesNotFit(
            f"the run will not fit in the memory of {where}: predicted peak {bound}{_gib(predicted.peak)} "
            f"({predicted.peak:,} bytes, at {peak.name}; largest terms: {terms}), available "
            f"{_gib(available_bytes)} ({available_bytes:,} bytes free). "
            f"{advice_text[0].upper() + advice_text[1:]} (`ojas plan --fit` lists what fits)")
    note = (" (a lower bound: clipping in a fused backward runs two backward passes, the first keeping the "
            "activations, which the planner does not model)") if lower_bound else ""
    print(f"ojas train: memory plan: predicted peak {bound}{_gib(predicted.peak)} at {peak.name}, "
          f"{_gib(available_bytes)} free on {where}{note}", file=sys.stderr)
    return predicted


def _check_memory(config: TrainConfig, vocab_size: int, device: torch.device) -> Optional[Any]:
    """:func:`check_fits` with CUDA's free bytes; nothing on another device (the planner
    predicts CUDA's allocator, ``--dry-run`` prints its peak)."""
    if device.type != "cuda":
        return None
    free, _ = torch.cuda.mem_get_info(device)
    return check_fits(config, _meta_model(config, vocab_size), free, str(device))


def _vocab(config: TrainConfig, vocab_size: Optional[int]) -> int:
    """The model's vocabulary before the corpus is read: ``vocab_size`` if known, else
    ``init_from``'s tokenizer's, else the BPE's target ``vocab``."""
    if vocab_size is not None:
        return vocab_size
    return config.vocab if config.init_from is None else tokenizer_size(_pretrained_tokenizer(config))


def plan_line(config: TrainConfig, vocab_size: Optional[int] = None) -> str:
    """``plan`` line of ``--dry-run``: the predicted peak on a GPU, or why it is not predicted."""
    vocab = _vocab(config, vocab_size)
    try:
        predicted, lower_bound = predict_peak(config, _meta_model(config, vocab))
    except NotImplementedError as err:
        return f"plan       predicted peak on a GPU: not predicted ({err})"
    host = (f"; host memory {_gib(predicted.host_bytes)} (offloaded checkpoints / optimizer state)"
            if predicted.host else "")
    return (f"plan       predicted peak on a GPU: {'at least ' if lower_bound else ''}{_gib(predicted.peak)} "
            f"at {predicted.peak_phase.name} (ojas plan's formulas, vocabulary {vocab}"
            + (", a lower bound: clipping in a fused backward runs two backward passes" if lower_bound else "")
            + ")" + host)


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
        raise ValueError(f"device (--device) {str(device)!r}: CUDA is not available here ({why}, torch "
                         f"{torch.__version__}); use --device cpu or --device auto")
    count = torch.cuda.device_count()
    if device.index is not None and device.index >= count:
        raise ValueError(f"device (--device) {str(device)!r}: this machine has {count} CUDA device(s), "
                         f"cuda:0 to cuda:{count - 1}")


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


def _existing_run(out: Path) -> Optional[str]:
    """What of a run ``out`` holds (its log's steps, its checkpoints), or None when it holds none."""
    checkpoints = ckpt.list_checkpoints(out / CHECKPOINT_DIR)
    log = out / LOG_NAME
    if not checkpoints and not log.exists():
        return None
    parts = [f"{LOG_NAME} of {len(_read_log(log, math.inf))} step(s)"] if log.exists() else []
    parts.append(f"checkpoints up to step {checkpoints[-1][0]}" if checkpoints else "no checkpoint")
    return ", ".join(parts)


def _holds_a_run(out: Path, what: str) -> str:
    """The message for a new run into ``out``, which holds ``what`` (:func:`_existing_run`)."""
    return (f"--out-dir {str(out)!r} holds a run already ({what}): continue it with --resume latest, or pass "
            "another --out-dir (from Python: resume='latest', or another out_dir)")


def _peak_memory(device: torch.device) -> int:
    """Peak bytes: CUDA's ``max_memory_allocated``, or the process's maximum resident set on the CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


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
        schedule = (f"schedule   {config.steps} steps, all inside the {config.warmup_steps}-step warm-up: the lr rises "
                    f"to {learning_rate(config.steps - 1, config):g} and never reaches --lr {config.lr:g} "
                    "(warning: lower --warmup-steps to at most --steps to reach it)")
    else:
        schedule = (f"schedule   {config.steps} steps, lr {config.lr:g}, {config.warmup_steps} warmup steps, cosine "
                    f"to {config.lr * config.min_lr_ratio:g}")
    lines = [
        f"model      {source}: hidden {model_config.hidden_size}, {model_config.num_hidden_layers} layers, "
        f"{model_config.num_attention_heads} heads, intermediate {model_config.intermediate_size}, vocabulary {model_config.vocab_size}"
        + (" (the BPE's target; the trained tokenizer's size with added tokens is used)"
           if vocab_size is None and config.init_from is None else "")
        + f": {parameters / 1e6:.2f}M parameters, {config.dtype}, device {_device(config)}",
        f"ojas       optimize_model {'on' if config.ojas else 'off'}"
        + (", activation checkpointing" if config.activation_checkpointing else "")
        + (" (checkpoints offloaded to host memory)" if config.offload_checkpoints else "")
        + (" (two per layer: attention half, MLP half)" if config.split_checkpoints else ""),
        f"optimizer  AdamW {'fused into backward (InBackwardOptimizer)' if config.in_backward else '(standard loop)'}, "
        + ("state in host memory, " if config.state_on_host else "") +
        f"weight decay {config.weight_decay}, clip {config.max_grad_norm}",
        schedule,
        f"batch      {config.batch_size} x {config.seq_len} tokens x {config.accumulation_steps} accumulation = "
        f"{tokens_per_step} tokens/step, {tokens_per_step * config.steps:,} in all",
        f"data       {data}, files {config.data_glob!r}, up to {config.max_bytes:,} bytes; "
        + ("init_from's tokenizer.json" if config.init_from else f"byte-level BPE of {config.vocab} tokens")
        + f"; cache {config.cache_dir}",
        f"outputs    {config.out_dir}: {LOG_NAME}, {PLOT_NAME}, {CHECKPOINT_DIR}/ every {config.checkpoint_every} "
        f"steps (keep {config.keep_checkpoints})" + (f"; resume {config.resume}" if config.resume else ""),
        _threads_line(config),
    ]
    return "\n".join(lines)


def _source(config: TrainConfig, model_config: Any) -> str:
    """Where the model comes from, in words."""
    if config.init_from:
        return f"{model_config.model_type} weights of {config.init_from}"
    if config.model_config_file:
        return f"{model_config.model_type} of {config.model_config_file}"
    return f"Llama preset {config.preset!r}"


class _StopFlag:
    """SIGTERM / SIGINT handlers (in the main thread) that record the signal for the loop to
    save and return; a second SIGINT raises KeyboardInterrupt."""

    def __init__(self) -> None:
        self.signal_name: Optional[str] = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signal_name is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signal_name = signal.Signals(signum).name

    def __enter__(self) -> "_StopFlag":
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


def _rng_state(device: torch.device) -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state:
        torch.cuda.set_rng_state_all(state["cuda"])


def _build(config: TrainConfig, data: PreparedData, device: torch.device):
    """Model (seeded init, ``optimize_model`` if asked) and optimizer."""
    import transformers

    transformers.logging.set_verbosity_error()
    torch.manual_seed(config.seed)
    random.seed(config.seed)
    model_config = config.model_config(data.vocab_size)
    if config.init_from is not None:
        model = transformers.AutoModelForCausalLM.from_pretrained(config.init_from, config=model_config,
                                                                  local_files_only=True)
    else:
        model = transformers.AutoModelForCausalLM.from_config(model_config)
    model = model.to(device=device, dtype=DTYPES[config.dtype])
    model.train()
    checkpointing: Any = "offload" if config.offload_checkpoints else config.activation_checkpointing
    if config.ojas:
        from ojas_ref import optimize_model

        model, _ = optimize_model(model, checkpoint=checkpointing, checkpoint_split=config.split_checkpoints)
    elif config.offload_checkpoints or config.split_checkpoints:  # optimize_model's checkpointing, no kernel swapped
        from ojas_ref import optimize_model

        model, _ = optimize_model(model, attention=False, cross_entropy=False, rms_norm=False, swiglu=False,
                                  rope=False, checkpoint=checkpointing, checkpoint_split=config.split_checkpoints)
    elif config.activation_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if config.in_backward:
        from ojas_ref import InBackwardOptimizer

        optimizer = InBackwardOptimizer(groups, torch.optim.AdamW, lr=config.lr, max_grad_norm=config.max_grad_norm,
                                        accumulation_steps=config.accumulation_steps,
                                        state_device="cpu" if config.state_on_host else None)
    else:
        optimizer = torch.optim.AdamW(groups, lr=config.lr)
    return model, optimizer


def _check_resumable(saved: dict[str, Any], config: TrainConfig, path: Path) -> None:
    current = dataclasses.asdict(config)
    for name, value in saved.items():
        if name not in RESUMABLE_CHANGES and current.get(name) != value:
            raise ValueError(f"cannot resume from {path}: it was written with {name}={value!r}, this run has "
                             f"{name}={current.get(name)!r} (it changes the computation); resume with the "
                             "checkpoint's setting, or start a new run in another --out-dir")


def _read_log(path: Path, up_to: int) -> list[dict[str, Any]]:
    """The records of ``path`` of steps <= ``up_to`` (a resumed run redoes the later ones)."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # a line cut by a kill
            continue
        if record.get("step", math.inf) <= up_to:
            records.append(record)
    return records


def _plot_title(config: TrainConfig, model: torch.nn.Module, device: torch.device) -> str:
    """The plot's title: the model and the setting, in two lines."""
    parameters = sum(p.numel() for p in model.parameters())
    optimizer = "AdamW in backward" if config.in_backward else "AdamW"
    return (f"ojas train: {_source(config, model.config)}, {parameters / 1e6:.2f}M parameters, {config.dtype} on "
            f"{device}\n{config.steps} steps of {config.batch_size} x {config.seq_len} tokens"
            + (f" x {config.accumulation_steps}" if config.accumulation_steps > 1 else "")
            + f", lr {config.lr:g} ({config.warmup_steps} warm-up, cosine), {optimizer}, clip {config.max_grad_norm}, "
            f"optimize_model {'on' if config.ojas else 'off'}")


def _plot(records: list[dict[str, Any]], path: Path, device: torch.device, title: str) -> None:
    """Loss and peak memory against the step, as a PNG (matplotlib, no display needed), under
    ``title``; the memory axis starts at 0."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    steps = [r["step"] for r in records]
    figure = Figure(figsize=(8, 6))
    FigureCanvasAgg(figure)
    loss_axes, memory_axes = figure.subplots(2, 1, sharex=True)
    losses = [r["loss"] for r in records]
    window = max(1, len(losses) // 50)
    smooth = [sum(losses[max(0, i - window + 1):i + 1]) / len(losses[max(0, i - window + 1):i + 1])
              for i in range(len(losses))]
    loss_axes.plot(steps, losses, alpha=0.35, label="per step")
    loss_axes.plot(steps, smooth, label=f"mean of {window} steps")
    loss_axes.legend()
    loss_axes.set_ylabel("training loss (nats/token)")
    loss_axes.grid(True, alpha=0.3)
    memory_axes.plot(steps, [r["peak_memory_bytes"] / 2**20 for r in records])
    memory_axes.set_ylabel("peak memory (MiB)\n" + ("CUDA allocated" if device.type == "cuda" else "process max RSS"))
    memory_axes.set_ylim(bottom=0)
    memory_axes.set_xlabel("step")
    memory_axes.grid(True, alpha=0.3)
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def _first_nonfinite(model: torch.nn.Module, attribute: str) -> str:
    """The first parameter whose ``.grad`` or ``.data`` (``attribute``) holds a NaN or inf, and how many do."""
    bad = [n for n, p in model.named_parameters()
           if getattr(p, attribute) is not None and not torch.isfinite(getattr(p, attribute)).all()]
    total = sum(1 for _ in model.parameters())
    return f"{bad[0]} (1st of {len(bad)} of {total})" if bad else "<none>"


def _pretrained_tokenizer(config: TrainConfig) -> Any:
    """``init_from``'s tokenizer, or None (the run trains its own BPE)."""
    if config.init_from is None:
        return None
    import tokenizers

    return tokenizers.Tokenizer.from_file(str(Path(config.init_from) / TOKENIZER_NAME))


def train(config: TrainConfig) -> TrainResult:
    """Run (or resume) the training run of ``config``; see the module docstring.

    Raises ValueError for a setting that cannot run here (the device, ``out_dir``, a resume
    that cannot be done; :class:`~ojas_ref.tools.train_state.DirectoryLocked` when another
    run holds ``out_dir``), all before the corpus is read; :class:`TrainingDiverged`;
    :class:`OutputError` when a file of the run cannot be written."""
    device = _device(config)
    _check_device(device)
    out = Path(config.out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out-dir {str(out)!r} is a file, not a directory")
    try:
        (out / CHECKPOINT_DIR).mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"--out-dir {str(out)!r}: cannot create the directory {err.filename} "
                         f"({err.strerror})") from None
    threads = torch.get_num_threads()
    torch.set_num_threads(config.threads or default_threads())
    try:
        with ckpt.lock_directory(out, what="--out-dir"):
            return _locked_train(config, device, out)
    finally:
        torch.set_num_threads(threads)


def _resume_state(config: TrainConfig, out: Path) -> tuple[Optional[Path], Optional[dict[str, Any]]]:
    """The checkpoint a run resumes from and its state (checked against ``config``), or
    ``(None, None)`` for a new run; a ValueError for a resume that cannot be done or a new run
    into a directory that holds one."""
    checkpoints = out / CHECKPOINT_DIR
    existing = _existing_run(out)
    if config.resume is None:
        if existing:
            raise ValueError(_holds_a_run(out, existing))
        return None, None
    if config.resume == "latest":
        path = ckpt.latest_checkpoint(checkpoints)
        if path is None:
            logged = (f"holds {existing}: the run stopped before its first checkpoint, so there is nothing to "
                      "resume from, and starting again would overwrite its log. Start a new run with another "
                      f"--out-dir (or delete {str(out)!r} first)") if existing else (
                "holds no checkpoint to resume from: start a new run without --resume")
            raise ValueError(f"--resume latest: --out-dir {str(out)!r} {logged}")
    else:
        path = Path(config.resume)
        if not path.is_file():
            raise ValueError(f"--resume {config.resume!r} is neither 'latest' nor a checkpoint file")
        if existing and path.resolve().parent != checkpoints.resolve():
            raise ValueError(f"--resume {config.resume!r} is a checkpoint of another directory, and --out-dir "
                             f"{str(out)!r} holds a run already ({existing}): resume into an empty --out-dir")
    try:
        state = ckpt.load_checkpoint(path)
    except OSError as err:
        raise ValueError(f"--resume: cannot read {path} ({err.strerror})") from None
    _check_resumable(state["config"], config, path)
    if config.stop_after is not None and config.stop_after <= state["step"]:
        raise ValueError(f"--stop-after {config.stop_after} is not after the step of the checkpoint resumed "
                         f"({state['step']}, {path})")
    return path, state


def _locked_train(config: TrainConfig, device: torch.device, out: Path) -> TrainResult:
    """:func:`train`'s run, ``out`` locked and its checkpoint directory made."""
    from tqdm import tqdm

    checkpoints = out / CHECKPOINT_DIR
    log_path, plot_path = out / LOG_NAME, out / PLOT_NAME
    resume_path, state = _resume_state(config, out)
    for stale in ckpt.remove_temporaries(checkpoints):
        print(f"ojas train: removed {stale}, left by a writer killed before its rename", file=sys.stderr)
    if config.warmup_steps > config.steps:
        print(f"ojas train: warning: warmup_steps (--warmup-steps {config.warmup_steps}) is above steps (--steps "
              f"{config.steps}): the whole run is warm-up and the lr never reaches --lr {config.lr:g}",
              file=sys.stderr)

    config.model_config(_vocab(config, None))  # a config transformers cannot read: refused before the corpus
    print("ojas train: reading and tokenising the corpus (cached after the first run)", file=sys.stderr)
    corpus = read_corpus(config.data_dir, config.data_glob, config.max_bytes)
    try:
        data = prepare(corpus, config.vocab, config.cache_dir, tokenizer=_pretrained_tokenizer(config))
    except OSError as err:
        raise ValueError(f"--cache-dir {config.cache_dir!r}: cannot write the token cache: {err.filename or ''} "
                         f"({err.strerror or err})") from None
    print(f"ojas train: {corpus.num_bytes:,} bytes in {len(corpus.documents)} files -> {len(data.tokens):,} tokens, "
          f"vocabulary {data.vocab_size} (cache key {data.tokens_key[:12]})", file=sys.stderr)
    _write(out / TOKENIZER_NAME, [data.tokenizer.to_str().encode()], None)
    _check_memory(config, data.vocab_size, device)  # before anything is allocated on the device
    model, optimizer = _build(config, data, device)
    loader = WindowLoader(data.tokens, config.batch_size, config.seq_len, config.seed, model.config.vocab_size)

    start = 0
    last_checkpoint: Optional[Path] = None
    if state is not None:
        if state["tokens_key"] != data.tokens_key:
            raise ValueError(f"cannot resume from {resume_path}: it was trained on other token ids (corpus or "
                             f"tokenizer changed: key {state['tokens_key'][:12]}..., now {data.tokens_key[:12]}...)")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        loader.load_state_dict(state["loader"])
        _set_rng_state(state["rng"])
        start, last_checkpoint = state["step"], resume_path
        del state
    records = _read_log(log_path, start)
    _write(log_path, [(json.dumps(r) + "\n").encode() for r in records], last_checkpoint)
    title = _plot_title(config, model, device)

    def save(step: int) -> Path:
        path = ckpt.checkpoint_path(checkpoints, step)
        try:
            ckpt.save_checkpoint(path, {
                "format": 1, "step": step, "config": dataclasses.asdict(config), "model": model.state_dict(),
                "optimizer": optimizer.state_dict(), "loader": loader.state_dict(), "rng": _rng_state(device),
                "tokens_key": data.tokens_key, "tokenizer": data.tokenizer.to_str()})
            ckpt.prune_checkpoints(checkpoints, config.keep_checkpoints)
        except OSError as err:
            raise OutputError(_write_failed(path, err, last_checkpoint)) from err
        return path

    def diverged(step: int, what: str, applied: bool = False) -> TrainingDiverged:
        try:
            _plot(records, plot_path, device, title)
        except OSError:
            pass  # the divergence is the news; a full disk shows at the next write
        where = f"the last good checkpoint is {last_checkpoint}" if last_checkpoint else "no checkpoint was written yet"
        update = ("the update was applied in backward (InBackwardOptimizer), so the model in memory is lost"
                  if applied else "the update was not applied")
        advice = [f"a lower --lr (this run: {config.lr:g})",
                  f"more --warmup-steps (this run: {config.warmup_steps})"]
        if config.max_grad_norm is None:
            advice.append("clipping, e.g. --max-grad-norm 1.0 (this run: none)")
        return TrainingDiverged(
            f"training diverged at step {step}: {what}; {update}; {where}. A resume keeps the setting and would "
            f"diverge again: start a new run in another --out-dir with {', '.join(advice[:-1])} or {advice[-1]}")

    end = config.steps if config.stop_after is None else config.stop_after
    tokens_per_step = config.batch_size * config.seq_len * config.accumulation_steps
    losses: list[tuple[int, float]] = []
    stopped: Optional[str] = None
    print(describe(config, data.vocab_size), file=sys.stderr)
    bar = tqdm(total=config.steps, initial=start, unit="step", disable=not config.progress, dynamic_ncols=True,
               mininterval=0.25, desc="ojas train")
    try:
        with _StopFlag() as flag, _Log(log_path, last_checkpoint) as log:
            began = time.perf_counter()
            for step in range(start, end):
                lr = learning_rate(step, config)
                for group in optimizer.param_groups:
                    group["lr"] = lr
                t0 = time.perf_counter()
                total = torch.zeros((), device=device)
                grad_norm: Optional[float] = None
                for micro in range(config.accumulation_steps):
                    window = next(loader).to(device)
                    inputs, targets = window[:, :-1].contiguous(), window[:, 1:].contiguous()
                    loss = model(input_ids=inputs, labels=targets, shift_labels=targets).loss
                    if not torch.isfinite(loss):
                        optimizer.zero_grad()
                        raise diverged(step + 1, f"the loss of micro-batch {micro} is {loss.item()}")
                    total += loss.detach()
                    scaled = loss / config.accumulation_steps
                    if config.in_backward:
                        optimizer.backward(scaled)
                    else:
                        scaled.backward()
                if not config.in_backward:
                    grads = [p.grad for p in model.parameters() if p.grad is not None]
                    norm = torch.nn.utils.get_total_norm(grads)
                    if not torch.isfinite(norm):
                        raise diverged(step + 1, f"the gradient norm is {norm.item()} (first non-finite gradient: "
                                                 f"{_first_nonfinite(model, 'grad')})")
                    if config.max_grad_norm is not None:
                        torch.nn.utils.clip_grads_with_norm_(grads, config.max_grad_norm, norm)
                    grad_norm = norm.item()
                optimizer.step()
                optimizer.zero_grad()
                if config.in_backward and not torch.stack([torch.isfinite(p).all() for p in model.parameters()]).all():
                    raise diverged(step + 1, f"parameter {_first_nonfinite(model, 'data')} is non-finite after its "
                                             "update (a non-finite gradient)", applied=True)
                step_loss = (total / config.accumulation_steps).item()
                seconds = time.perf_counter() - t0
                done = step + 1
                memory = _peak_memory(device)
                record = {"step": done, "loss": step_loss, "lr": lr, "grad_norm": grad_norm,
                          "tokens": done * tokens_per_step,
                          "tokens_per_s": tokens_per_step / seconds, "step_s": seconds,
                          "elapsed_s": time.perf_counter() - began, "peak_memory_bytes": memory}
                records.append(record)
                losses.append((done, step_loss))
                log.write(json.dumps(record) + "\n")
                bar.set_postfix_str(f"loss {step_loss:.4f} lr {lr:.2e} {record['tokens_per_s']:,.0f} tok/s "
                                    f"mem {memory / 2**20:,.0f} MiB", refresh=False)
                bar.update(1)
                if done == start + 1:
                    bar.refresh()  # the first step is shown however short it was
                stopped = flag.signal_name or ("stop_after" if done == config.stop_after else None)
                if stopped or done == config.steps or done % config.checkpoint_every == 0:
                    last_checkpoint = save(done)
                    log.checkpoint = last_checkpoint
                    bar.write(f"ojas train: step {done}: checkpoint {last_checkpoint}", file=sys.stderr)
                if stopped:
                    break
    finally:
        bar.close()
    try:
        _plot(records, plot_path, device, title)
    except OSError as err:
        raise OutputError(_write_failed(plot_path, err, last_checkpoint)) from err
    final = losses[-1][0] if losses else start
    return TrainResult(model, final, losses, last_checkpoint, stopped, log_path, plot_path)


def _write_failed(path: Path, err: OSError, last_checkpoint: Optional[Path]) -> str:
    """The message of an :class:`OutputError`: the file, the error, the last complete checkpoint."""
    where = (f"the last complete checkpoint is {last_checkpoint}: free space (or fix the path) and continue with "
             "--resume latest" if last_checkpoint else "no checkpoint was written")
    return f"cannot write {path} ({err.strerror or err}); {where}"


def _write(path: Path, chunks: list[bytes], last_checkpoint: Optional[Path]) -> None:
    """:func:`ojas_ref.tools.train_state.atomic_write`, an OSError raised as :class:`OutputError`."""
    try:
        ckpt.atomic_write(path, chunks)
    except OSError as err:
        raise OutputError(_write_failed(path, err, last_checkpoint)) from err


class _Log:
    """The log opened for appending: ``write`` appends and flushes a record, an OSError raised
    as :class:`OutputError` naming the log and ``checkpoint`` (the last complete one)."""

    def __init__(self, path: Path, checkpoint: Optional[Path]) -> None:
        self.path, self.checkpoint = path, checkpoint

    def __enter__(self) -> "_Log":
        try:
            self._file = self.path.open("a")
        except OSError as err:
            raise OutputError(_write_failed(self.path, err, self.checkpoint)) from err
        return self

    def write(self, text: str) -> None:
        try:
            self._file.write(text)
            self._file.flush()
        except OSError as err:
            raise OutputError(_write_failed(self.path, err, self.checkpoint)) from err

    def __exit__(self, *exc: Any) -> None:
        try:
            self._file.close()
        except OSError:
            pass  # every write was flushed, and a failed one raised already


_HELP = {
    "preset": f"model shape: {', '.join(PRESETS)}", "seq_len": "tokens per sequence",
    "model_config_file": "a Hugging Face config.json (file or directory) instead of the preset",
    "init_from": "start from the weights of a save_pretrained directory (with its tokenizer.json)",
    "batch_size": "sequences per micro-batch",
    "accumulation_steps": "micro-batches per optimizer step", "steps": "optimizer steps of the whole run",
    "lr": "peak learning rate", "min_lr_ratio": "final lr / peak lr of the cosine",
    "warmup_steps": "linear warmup steps",
    "weight_decay": "AdamW weight decay (matrices only)", "max_grad_norm": "clip the gradient norm (0: no clipping)",
    "in_backward": "AdamW fused into backward (InBackwardOptimizer) or the standard loop",
    "ojas": "apply optimize_model (ojas attention and cross-entropy)",
    "activation_checkpointing": "per-layer activation checkpointing", "dtype": "parameter dtype",
    "split_checkpoints": "with --activation-checkpointing: checkpoint each layer as its attention half and its "
                         "MLP half (optimize_model(checkpoint_split=True))",
    "offload_checkpoints": "with --activation-checkpointing: hold the checkpoints in pinned host memory "
                           "(optimize_model(checkpoint='offload'))",
    "state_on_host": "with --in-backward: keep the AdamW state in host memory, streamed per bucket "
                     "(InBackwardOptimizer(state_device='cpu'))",
    "device": "cpu, cuda, cuda:N or auto", "seed": "seed of the initialisation and the data order",
    "data_dir": "directory of the corpus (default: the Python standard library's own source)",
    "data_glob": "files of the corpus",
    "max_bytes": "corpus bytes", "vocab": "BPE vocabulary (special tokens included)",
    "cache_dir": "tokenizer/token cache",
    "out_dir": "log, plot and checkpoints", "checkpoint_every": "steps between checkpoints",
    "keep_checkpoints": "checkpoints kept",
    "resume": "continue a run: --resume (or --resume latest) from the latest checkpoint in --out-dir, --resume FILE "
              "from that checkpoint",
    "stop_after": "save and stop after this step (the schedule stays that of --steps)", "progress": "progress bar",
    "threads": "intra-op CPU threads (default: half of the cores this process may use, at most 4; "
               "OMP_NUM_THREADS if set)",
}


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Defaults shown, except a None default (its help says what it means) and where the help
    names the default itself."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or "default" in (action.help or ""):
            return action.help or ""
        return super()._get_help_string(action)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``ojas train``: one per :class:`TrainConfig` field, and ``--dry-run``; the help
    shows the defaults and the exit status."""
    parser.formatter_class = _HelpFormatter
    defaults = TrainConfig()
    for f in dataclasses.fields(TrainConfig):
        flag, default = "--" + f.name.replace("_", "-"), getattr(defaults, f.name)
        if isinstance(default, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=_HELP[f.name])
        elif f.name == "resume":
            parser.add_argument(flag, nargs="?", const="latest", default=None, metavar="CHECKPOINT", help=_HELP[f.name])
        else:
            kind = {"max_grad_norm": float, "stop_after": int, "threads": int}.get(
                f.name, str if default is None else type(default))
            choices = {"preset": sorted(PRESETS), "dtype": sorted(DTYPES)}.get(f.name)
            parser.add_argument(flag, type=kind, default=default, choices=choices,
                                help=_HELP[f.name])
    parser.add_argument("--dry-run", action="store_true",
                        help="print the setting and its predicted peak on a GPU (and whether --out-dir holds a run), "
                             "and exit")
    parser.epilog = "exit status: " + "; ".join(f"{code}: {what}" for code, what in EXIT_CODES.items())


def run_command(args: argparse.Namespace) -> int:
    """``ojas train``; returns the exit status (:data:`EXIT_CODES`): 0 when the run finished (or
    stopped at ``--stop-after``, or was finished already), 1 when it diverged, 2 for a bad setting
    (an option, a path, the device, a resume that cannot be done, ``--out-dir`` in use by another
    run, or a step predicted not to fit in the device's free memory: :class:`PlanDoesNotFit`), 3
    when a file of the run could not be written, 128 + N when stopped by signal N (checkpoint
    written; not at a second Ctrl-C, which stops at once: 130)."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig)}
    if values["max_grad_norm"] == 0:
        values["max_grad_norm"] = None
    try:
        config = TrainConfig(**values)
        if args.dry_run:
            print(describe(config))
            print(plan_line(config))
            existing = _existing_run(Path(config.out_dir)) if Path(config.out_dir).is_dir() else None
            if existing and config.resume is None:
                print(f"ojas train: warning: {_holds_a_run(Path(config.out_dir), existing)}; this run would be "
                      "refused", file=sys.stderr)
            return 0
        result = train(config)
    except TrainingDiverged as err:
        print(f"ojas train: {err}", file=sys.stderr)
        return 1
    except ValueError as err:
        print(f"ojas train: {err}", file=sys.stderr)
        return 2
    except ImportError as err:
        print(f"ojas train: needs the package {err.name!r} ({err}): pip install 'ojas-ref[train]'", file=sys.stderr)
        return 2
    except OutputError as err:
        print(f"ojas train: {err}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("ojas train: interrupted by a second Ctrl-C, without a checkpoint of the current step; --resume "
              "latest continues from the last one", file=sys.stderr)
        return 130
    if not result.losses and result.stopped is None:
        print(f"ojas train: the run in {config.out_dir} is finished (step {result.step} of {config.steps}, checkpoint "
              f"{result.checkpoint}): nothing to resume. To train further, start a new run in another --out-dir")
        return 0
    first, last = result.losses[0][1], result.losses[-1][1]
    print(f"ojas train: step {result.step}, loss {first:.4f} -> {last:.4f}; log {result.log_path}, plot "
          f"{result.plot_path}, checkpoint {result.checkpoint}"
          + (f"; stopped by {result.stopped}, continue with --resume latest" if result.stopped else ""))
    if result.stopped and result.stopped != "stop_after":
        return 128 + signal.Signals[result.stopped].value
    return 0
