"""``train(TrainConfig(...))``: a Llama-style decoder trained from scratch on a text corpus, with
``optimize_model``, AdamW (in backward by :class:`~ojas_ref.InBackwardOptimizer` or the
standard loop), a warmup + cosine schedule, progress, logs, a loss plot and state files.

* Data (:mod:`ojas_ref.tools.data`): the standard library's ``.py`` files by default, a byte-level
  BPE, a hash-keyed token cache, a seeded resumable loader; ids checked against the model.
* Schedule: the learning rate of step ``s`` is :func:`learning_rate` of ``s`` alone (no
  scheduler state), so a resumed run cannot compound it.
* Records: a tqdm bar from the first step (loss, lr, tokens/s, peak memory),
  ``<out_dir>/train.jsonl`` (one record per step), ``<out_dir>/loss.png``.
* State files (:mod:`ojas_ref.tools.train_state`, in ``<out_dir>/state/``): model, optimizer,
  step, RNG states, loader position and the setting, every ``state_every`` steps, at the end, at
  ``stop_after`` and at SIGTERM/SIGINT (the handler sets a flag; the loop saves after the step and
  returns). ``resume`` continues bitwise as the uninterrupted run (same parameters, same losses;
  tested on the CPU, with both optimizers, accumulation and clipping, at the same thread count;
  not yet on CUDA). A run of release 0.1 kept them in ``<out_dir>/checkpoints/``; its resume
  finds and keeps them there, and reads its setting's old field names (:func:`upgrade_fields`).
* Model: a preset Llama (:data:`PRESETS`) or ``model_config_file``, a Hugging Face config, from
  scratch (seeded initialisation); or ``init_from``, a local directory written by
  ``save_pretrained`` holding the weights, their config and the ``tokenizer.json`` they were
  trained with (the corpus is tokenised with it; nothing is downloaded).
* Memory: on CUDA, before the model is built, :func:`check_fits` predicts the step's peak with
  ``ojas plan``'s formulas (:mod:`ojas_ref.memory`) and refuses (:class:`PlanDoesNotFit`, exit 2)
  when it exceeds ``torch.cuda.mem_get_info``'s free bytes; a setting the planner does not model
  (accumulation, a non-Llama model) is run unchecked, with one line saying why. Not on the CPU.
  ``recipe`` (a :class:`~ojas_ref.MemoryRecipe`, ``--checkpoint``, ``--in-backward``, ... on the
  command line) says what ojas does to save memory: ``optimize_model(model, recipe)`` and, with
  ``in_backward``, ``InBackwardOptimizer.from_recipe``. ``checkpoint="offload"`` and
  ``state_device="cpu"`` move the checkpoints and the AdamW state to host memory; the plan
  predicts it (measured on the H200 through benchmarks/bench_memory.py, not through ``ojas
  train``). Resume with both is bitwise on the CPU (tested). ``checkpoint_split`` checkpoints each
  decoder layer as its attention half and its MLP half (bitwise the same run).
* Guards: :class:`TrainingDiverged`, naming the step, the tensor and the last state file, for a
  non-finite loss (before its backward) and a non-finite gradient: in the standard loop its norm
  is checked before the update; in backward, the update has run when the gradient is
  whole, so the parameters are checked after it. A resume keeps the setting, so the advice is a
  new run (another ``out_dir``) with a lower ``lr``, more ``warmup_steps`` or clipping.
* Files: ``out_dir`` is locked (:func:`ojas_ref.tools.train_state.lock_directory`) from before the
  corpus is read to the end of the run, so a second run into it is refused at once
  (:class:`~ojas_ref.tools.train_state.DirectoryLocked`); a resume needs a state file (a log
  without one is refused, never overwritten) and cuts the log back to its step; a failed write
  (a full disk) raises :class:`OutputError` naming the file and the last complete state file.
* Threads: :func:`default_threads` intra-op threads on the CPU unless ``threads`` is given: the
  cores this process may use, halved (at most 4), so that one other busy process does not stall
  the step; ``OMP_NUM_THREADS``, when set, is kept. On a 2-core machine shared with other jobs
  (load average 6 to 9) the CPU default's median step took 24.9 s with 2 threads (torch's default
  there) and 1.5 s with 1; beside one more busy process, 36.7 s and 3.4 s.
* The CPU default (preset ``tiny``, 1.57M parameters, 300 steps of 8 x 128 tokens) is sized for
  a first run of at most 3 minutes on an idle 2-core machine.

The run is split by job: the setting (:class:`TrainConfig`, presets, schedule, threads,
:func:`describe`) in :mod:`ojas_ref.tools.train_config`, the memory check in
:mod:`ojas_ref.tools.train_memory`, the log and the plot in :mod:`ojas_ref.tools.train_log`, the
``ojas train`` options and exit status in :mod:`ojas_ref.tools.train_cli`; this module holds the
training loop and re-exports the public names of the others.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch

from ojas_ref._deprecation import renamed_attribute
from ojas_ref.tools import train_state
from ojas_ref.tools.data import PreparedData, WindowLoader, prepare, read_corpus
from ojas_ref.tools.train_config import (
    OLD_STATE_DIR,
    LOG_NAME,
    PLOT_NAME,
    PRESETS,
    RESUMABLE_CHANGES,
    STATE_DIR,
    TOKENIZER_NAME,
    TrainConfig,
    _check_device,
    _device,
    _pretrained_tokenizer,
    _vocab,
    default_threads,
    describe,
    learning_rate,
    saved_fields,
    upgrade_fields,
)
from ojas_ref.tools.train_log import (
    OutputError,
    _Log,
    _plot,
    _plot_title,
    _peak_memory,
    _read_log,
    _write,
    _write_failed,
)
from ojas_ref.tools.train_memory import PlanDoesNotFit, _check_memory, check_fits, plan_line, predict_peak

__all__ = [
    "PRESETS",
    "OutputError",
    "PlanDoesNotFit",
    "TrainConfig",
    "TrainResult",
    "TrainingDiverged",
    "check_fits",
    "default_threads",
    "describe",
    "learning_rate",
    "plan_line",
    "predict_peak",
    "train",
]


@dataclass
class TrainResult:
    """What a call of :func:`train` did."""

    model: torch.nn.Module
    #: optimizer steps done in all (the resumed ones included)
    step: int
    #: ``(step, loss)`` of the steps this call ran
    losses: list[tuple[int, float]]
    #: the last state file written (None if none was)
    state: Optional[Path]
    #: None when all ``steps`` ran; ``"stop_after"``, or the signal's name (``"SIGTERM"``)
    stopped: Optional[str]
    log_path: Path
    plot_path: Path

    #: deprecated name of :attr:`state` (release 0.1; "checkpoint" now means activation checkpointing)
    checkpoint = renamed_attribute("TrainResult", "checkpoint", "state")


class TrainingDiverged(RuntimeError):
    """A non-finite loss or gradient; the message names the step, the tensor and the last state file."""


def state_directory(out: Path) -> Path:
    """Where the run in ``out`` keeps its state files: ``out/state``, or ``out/checkpoints`` for a
    run of release 0.1 (state files there and none in ``out/state``)."""
    old = out / OLD_STATE_DIR
    if train_state.list_states(old) and not train_state.list_states(out / STATE_DIR):
        return old
    return out / STATE_DIR


def _existing_run(out: Path) -> Optional[str]:
    """What of a run ``out`` holds (its log's steps, its state files), or None when it holds none."""
    states = train_state.list_states(state_directory(out))
    log = out / LOG_NAME
    if not states and not log.exists():
        return None
    parts = [f"{LOG_NAME} of {len(_read_log(log, math.inf))} step(s)"] if log.exists() else []
    parts.append(f"state files up to step {states[-1][0]}" if states else "no state file")
    return ", ".join(parts)


def _holds_a_run(out: Path, what: str) -> str:
    """The message for a new run into ``out``, which holds ``what`` (:func:`_existing_run`)."""
    return (
        f"--out-dir {str(out)!r} holds a run already ({what}): continue it with --resume latest, or pass "
        "another --out-dir (from Python: resume='latest', or another out_dir)"
    )


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
    """Model (seeded init, ``optimize_model(model, config.recipe)``) and optimizer (AdamW, in
    backward by ``InBackwardOptimizer.from_recipe`` when the recipe says so)."""
    import transformers

    transformers.logging.set_verbosity_error()
    torch.manual_seed(config.seed)
    random.seed(config.seed)
    model_config = config.model_config(data.vocab_size)
    if config.init_from is not None:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            config.init_from, config=model_config, local_files_only=True
        )
    else:
        model = transformers.AutoModelForCausalLM.from_config(model_config)
    model = model.to(device=device, dtype=config.dtype)
    model.train()
    from ojas_ref import InBackwardOptimizer, optimize_model

    model, _ = optimize_model(model, config.recipe)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if config.recipe.in_backward:
        optimizer = InBackwardOptimizer.from_recipe(
            groups,
            config.recipe,
            torch.optim.AdamW,
            lr=config.lr,
            max_grad_norm=config.max_grad_norm,
            accumulation_steps=config.accumulation_steps,
        )
    else:
        optimizer = torch.optim.AdamW(groups, lr=config.lr)
    return model, optimizer


def _check_resumable(saved: dict[str, Any], config: TrainConfig, path: Path) -> None:
    """A ValueError naming the first setting (a recipe field as ``recipe.<field>``) that differs
    between ``saved`` (a state file's, in today's shape or release 0.1's: :func:`upgrade_fields`)
    and ``config``, other than :data:`RESUMABLE_CHANGES`."""
    now = _flat(saved_fields(config))
    for name, value in _flat(upgrade_fields(saved, warn=False)).items():
        if name not in RESUMABLE_CHANGES and now.get(name) != value:
            raise ValueError(
                f"cannot resume from {path}: it was written with {name}={value!r}, this run has "
                f"{name}={now.get(name)!r} (it changes the computation); resume with the "
                "state file's setting, or start a new run in another --out-dir"
            )


def _flat(fields: dict[str, Any]) -> dict[str, Any]:
    """A run's settings with the recipe's fields as ``recipe.<field>`` (the recipe a dict or a MemoryRecipe)."""
    recipe = fields.get("recipe", {})
    recipe = recipe if isinstance(recipe, dict) else dataclasses.asdict(recipe)
    return {**{k: v for k, v in fields.items() if k != "recipe"}, **{f"recipe.{k}": v for k, v in recipe.items()}}


def _first_nonfinite(model: torch.nn.Module, attribute: str) -> str:
    """The first parameter whose ``.grad`` or ``.data`` (``attribute``) holds a NaN or inf, and how many do."""
    bad = [
        n
        for n, p in model.named_parameters()
        if getattr(p, attribute) is not None and not torch.isfinite(getattr(p, attribute)).all()
    ]
    total = sum(1 for _ in model.parameters())
    return f"{bad[0]} (1st of {len(bad)} of {total})" if bad else "<none>"


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
        state_directory(out).mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(
            f"--out-dir {str(out)!r}: cannot create the directory {err.filename} ({err.strerror})"
        ) from None
    threads = torch.get_num_threads()
    torch.set_num_threads(config.threads or default_threads())
    try:
        with train_state.lock_directory(out, what="--out-dir"):
            return _locked_train(config, device, out)
    finally:
        torch.set_num_threads(threads)


def _resume_state(config: TrainConfig, out: Path) -> tuple[Optional[Path], Optional[dict[str, Any]]]:
    """The state file a run resumes from and its state (checked against ``config``), or
    ``(None, None)`` for a new run; a ValueError for a resume that cannot be done or a new run
    into a directory that holds one."""
    states = state_directory(out)
    existing = _existing_run(out)
    if config.resume is None:
        if existing:
            raise ValueError(_holds_a_run(out, existing))
        return None, None
    if config.resume == "latest":
        path = train_state.latest_state(states)
        if path is None:
            logged = (
                (
                    f"holds {existing}: the run stopped before its first state file, so there is nothing to "
                    "resume from, and starting again would overwrite its log. Start a new run with another "
                    f"--out-dir (or delete {str(out)!r} first)"
                )
                if existing
                else ("holds no state file to resume from: start a new run without --resume")
            )
            raise ValueError(f"--resume latest: --out-dir {str(out)!r} {logged}")
    else:
        path = Path(config.resume)
        if not path.is_file():
            raise ValueError(f"--resume {config.resume!r} is neither 'latest' nor a state file")
        if existing and path.resolve().parent != states.resolve():
            raise ValueError(
                f"--resume {config.resume!r} is a state file of another directory, and --out-dir "
                f"{str(out)!r} holds a run already ({existing}): resume into an empty --out-dir"
            )
    try:
        state = train_state.load_state(path)
    except OSError as err:
        raise ValueError(f"--resume: cannot read {path} ({err.strerror})") from None
    _check_resumable(state["config"], config, path)
    if config.stop_after is not None and config.stop_after <= state["step"]:
        raise ValueError(
            f"--stop-after {config.stop_after} is not after the step of the state file resumed "
            f"({state['step']}, {path})"
        )
    return path, state


def _locked_train(config: TrainConfig, device: torch.device, out: Path) -> TrainResult:
    """:func:`train`'s run, ``out`` locked and its state directory made."""
    from tqdm import tqdm

    states = state_directory(out)
    log_path, plot_path = out / LOG_NAME, out / PLOT_NAME
    resume_path, state = _resume_state(config, out)
    for stale in train_state.remove_temporaries(states):
        print(f"ojas train: removed {stale}, left by a writer killed before its rename", file=sys.stderr)
    if config.warmup_steps > config.steps:
        print(
            f"ojas train: warning: warmup_steps (--warmup-steps {config.warmup_steps}) is above steps (--steps "
            f"{config.steps}): the whole run is warm-up and the lr never reaches --lr {config.lr:g}",
            file=sys.stderr,
        )

    config.model_config(_vocab(config, None))  # a config transformers cannot read: refused before the corpus
    print("ojas train: reading and tokenising the corpus (cached after the first run)", file=sys.stderr)
    corpus = read_corpus(config.data_dir, config.data_glob, config.max_bytes)
    try:
        data = prepare(corpus, config.vocab, config.cache_dir, tokenizer=_pretrained_tokenizer(config))
    except OSError as err:
        raise ValueError(
            f"--cache-dir {config.cache_dir!r}: cannot write the token cache: {err.filename or ''} "
            f"({err.strerror or err})"
        ) from None
    print(
        f"ojas train: {corpus.num_bytes:,} bytes in {len(corpus.documents)} files -> {len(data.tokens):,} tokens, "
        f"vocabulary {data.vocab_size} (cache key {data.tokens_key[:12]})",
        file=sys.stderr,
    )
    _write(out / TOKENIZER_NAME, [data.tokenizer.to_str().encode()], None)
    _check_memory(config, data.vocab_size, device)  # before anything is allocated on the device
    model, optimizer = _build(config, data, device)
    loader = WindowLoader(data.tokens, config.batch_size, config.seq_len, config.seed, model.config.vocab_size)

    start = 0
    last_state: Optional[Path] = None
    if state is not None:
        if state["tokens_key"] != data.tokens_key:
            raise ValueError(
                f"cannot resume from {resume_path}: it was trained on other token ids (corpus or "
                f"tokenizer changed: key {state['tokens_key'][:12]}..., now {data.tokens_key[:12]}...)"
            )
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        loader.load_state_dict(state["loader"])
        _set_rng_state(state["rng"])
        start, last_state = state["step"], resume_path
        del state
    records = _read_log(log_path, start)
    _write(log_path, [(json.dumps(r) + "\n").encode() for r in records], last_state)
    title = _plot_title(config, model, device)

    def save(step: int) -> Path:
        path = train_state.state_path(states, step)
        try:
            train_state.save_state(
                path,
                {
                    "format": 1,
                    "step": step,
                    "config": saved_fields(config),
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "loader": loader.state_dict(),
                    "rng": _rng_state(device),
                    "tokens_key": data.tokens_key,
                    "tokenizer": data.tokenizer.to_str(),
                },
            )
            train_state.prune_states(states, config.keep_states)
        except OSError as err:
            raise OutputError(_write_failed(path, err, last_state)) from err
        return path

    def diverged(step: int, what: str, applied: bool = False) -> TrainingDiverged:
        try:
            _plot(records, plot_path, device, title)
        except OSError:
            pass  # the divergence is the news; a full disk shows at the next write
        where = f"the last good state file is {last_state}" if last_state else "no state file was written yet"
        update = (
            "the update was applied in backward (InBackwardOptimizer), so the model in memory is lost"
            if applied
            else "the update was not applied"
        )
        advice = [f"a lower --lr (this run: {config.lr:g})", f"more --warmup-steps (this run: {config.warmup_steps})"]
        if config.max_grad_norm is None:
            advice.append("clipping, e.g. --max-grad-norm 1.0 (this run: none)")
        return TrainingDiverged(
            f"training diverged at step {step}: {what}; {update}; {where}. A resume keeps the setting and would "
            f"diverge again: start a new run in another --out-dir with {', '.join(advice[:-1])} or {advice[-1]}"
        )

    end = config.steps if config.stop_after is None else config.stop_after
    tokens_per_step = config.batch_size * config.seq_len * config.accumulation_steps
    losses: list[tuple[int, float]] = []
    stopped: Optional[str] = None
    print(describe(config, data.vocab_size), file=sys.stderr)
    bar = tqdm(
        total=config.steps,
        initial=start,
        unit="step",
        disable=not config.progress,
        dynamic_ncols=True,
        mininterval=0.25,
        desc="ojas train",
    )
    try:
        with _StopFlag() as flag, _Log(log_path, last_state) as log:
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
                    if config.recipe.in_backward:
                        optimizer.backward(scaled)
                    else:
                        scaled.backward()
                if not config.recipe.in_backward:
                    grads = [p.grad for p in model.parameters() if p.grad is not None]
                    norm = torch.nn.utils.get_total_norm(grads)
                    if not torch.isfinite(norm):
                        raise diverged(
                            step + 1,
                            f"the gradient norm is {norm.item()} (first non-finite gradient: "
                            f"{_first_nonfinite(model, 'grad')})",
                        )
                    if config.max_grad_norm is not None:
                        torch.nn.utils.clip_grads_with_norm_(grads, config.max_grad_norm, norm)
                    grad_norm = norm.item()
                optimizer.step()
                optimizer.zero_grad()
                if (
                    config.recipe.in_backward
                    and not torch.stack([torch.isfinite(p).all() for p in model.parameters()]).all()
                ):
                    raise diverged(
                        step + 1,
                        f"parameter {_first_nonfinite(model, 'data')} is non-finite after its "
                        "update (a non-finite gradient)",
                        applied=True,
                    )
                step_loss = (total / config.accumulation_steps).item()
                seconds = time.perf_counter() - t0
                done = step + 1
                memory = _peak_memory(device)
                record = {
                    "step": done,
                    "loss": step_loss,
                    "lr": lr,
                    "grad_norm": grad_norm,
                    "tokens": done * tokens_per_step,
                    "tokens_per_s": tokens_per_step / seconds,
                    "step_s": seconds,
                    "elapsed_s": time.perf_counter() - began,
                    "peak_memory_bytes": memory,
                }
                records.append(record)
                losses.append((done, step_loss))
                log.write(json.dumps(record) + "\n")
                bar.set_postfix_str(
                    f"loss {step_loss:.4f} lr {lr:.2e} {record['tokens_per_s']:,.0f} tok/s "
                    f"mem {memory / 2**20:,.0f} MiB",
                    refresh=False,
                )
                bar.update(1)
                if done == start + 1:
                    bar.refresh()  # the first step is shown however short it was
                stopped = flag.signal_name or ("stop_after" if done == config.stop_after else None)
                if stopped or done == config.steps or done % config.state_every == 0:
                    last_state = save(done)
                    log.state = last_state
                    bar.write(f"ojas train: step {done}: state {last_state}", file=sys.stderr)
                if stopped:
                    break
    finally:
        bar.close()
    try:
        _plot(records, plot_path, device, title)
    except OSError as err:
        raise OutputError(_write_failed(plot_path, err, last_state)) from err
    final = losses[-1][0] if losses else start
    return TrainResult(model, final, losses, last_state, stopped, log_path, plot_path)
