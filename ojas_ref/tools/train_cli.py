"""``ojas train``'s options (one per :class:`~ojas_ref.tools.train_config.TrainConfig` field, and
``--dry-run``) and its command, :func:`run_command`, with its exit status (:data:`EXIT_CODES`)."""

from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
from pathlib import Path

from ojas_ref.tools.train import TrainingDiverged, _existing_run, _holds_a_run, train
from ojas_ref.tools.train_config import DTYPES, PRESETS, TrainConfig, describe
from ojas_ref.tools.train_log import OutputError
from ojas_ref.tools.train_memory import plan_line

__all__ = ["EXIT_CODES", "add_arguments", "run_command"]

#: ``ojas train``'s exit status (:func:`run_command`)
EXIT_CODES = {
    0: "the run finished, stopped at --stop-after, or was finished already",
    1: "the training diverged (a NaN/inf loss or gradient)",
    2: "a bad setting: an option, a path, a device, a resume that cannot be done, --out-dir in use by "
    "another run, or a step predicted not to fit in the GPU's free memory",
    3: "a file of the run could not be written (e.g. a full disk); the last complete checkpoint is intact",
    "128+N": "stopped by signal N (SIGTERM: 143, Ctrl-C: 130) after writing a checkpoint of the last step; "
    "a second Ctrl-C stops at once, without one",
}


_HELP = {
    "preset": f"model shape: {', '.join(PRESETS)}",
    "seq_len": "tokens per sequence",
    "model_config_file": "a Hugging Face config.json (file or directory) instead of the preset",
    "init_from": "start from the weights of a save_pretrained directory (with its tokenizer.json)",
    "batch_size": "sequences per micro-batch",
    "accumulation_steps": "micro-batches per optimizer step",
    "steps": "optimizer steps of the whole run",
    "lr": "peak learning rate",
    "min_lr_ratio": "final lr / peak lr of the cosine",
    "warmup_steps": "linear warmup steps",
    "weight_decay": "AdamW weight decay (matrices only)",
    "max_grad_norm": "clip the gradient norm (0: no clipping)",
    "in_backward": "AdamW in backward (InBackwardOptimizer) or the standard loop",
    "ojas": "apply optimize_model (ojas attention and cross-entropy)",
    "activation_checkpointing": "per-layer activation checkpointing",
    "dtype": "parameter dtype",
    "split_checkpoints": "with --activation-checkpointing: checkpoint each layer as its attention half and its "
    "MLP half (optimize_model(checkpoint_split=True))",
    "offload_checkpoints": "with --activation-checkpointing: hold the checkpoints in pinned host memory "
    "(optimize_model(checkpoint='offload'))",
    "state_on_host": "with --in-backward: keep the AdamW state in host memory, streamed per bucket "
    "(InBackwardOptimizer(state_device='cpu'))",
    "device": "cpu, cuda, cuda:N or auto",
    "seed": "seed of the initialisation and the data order",
    "data_dir": "directory of the corpus (default: the Python standard library's own source)",
    "data_glob": "files of the corpus",
    "max_bytes": "corpus bytes",
    "vocab": "BPE vocabulary (special tokens included)",
    "cache_dir": "tokenizer/token cache",
    "out_dir": "log, plot and checkpoints",
    "checkpoint_every": "steps between checkpoints",
    "keep_checkpoints": "checkpoints kept",
    "resume": "continue a run: --resume (or --resume latest) from the latest checkpoint in --out-dir, --resume FILE "
    "from that checkpoint",
    "stop_after": "save and stop after this step (the schedule stays that of --steps)",
    "progress": "progress bar",
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
                f.name, str if default is None else type(default)
            )
            choices = {"preset": sorted(PRESETS), "dtype": sorted(DTYPES)}.get(f.name)
            parser.add_argument(flag, type=kind, default=default, choices=choices, help=_HELP[f.name])
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the setting and its predicted peak on a GPU (and whether --out-dir holds a run), and exit",
    )
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
                print(
                    f"ojas train: warning: {_holds_a_run(Path(config.out_dir), existing)}; this run would be refused",
                    file=sys.stderr,
                )
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
        print(
            "ojas train: interrupted by a second Ctrl-C, without a checkpoint of the current step; --resume "
            "latest continues from the last one",
            file=sys.stderr,
        )
        return 130
    if not result.losses and result.stopped is None:
        print(
            f"ojas train: the run in {config.out_dir} is finished (step {result.step} of {config.steps}, checkpoint "
            f"{result.checkpoint}): nothing to resume. To train further, start a new run in another --out-dir"
        )
        return 0
    first, last = result.losses[0][1], result.losses[-1][1]
    print(
        f"ojas train: step {result.step}, loss {first:.4f} -> {last:.4f}; log {result.log_path}, plot "
        f"{result.plot_path}, checkpoint {result.checkpoint}"
        + (f"; stopped by {result.stopped}, continue with --resume latest" if result.stopped else "")
    )
    if result.stopped and result.stopped != "stop_after":
        return 128 + signal.Signals[result.stopped].value
    return 0
