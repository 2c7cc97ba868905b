"""``ojas train``'s options (one per :class:`~ojas_ref.tools.train_config.TrainConfig` field, the
recipe's from :func:`ojas_ref.recipe.add_recipe_arguments`, release 0.1's flags as hidden
deprecated aliases (:data:`OLD_FLAGS`), and ``--dry-run``) and its command, :func:`run_command`,
with its exit status (:data:`EXIT_CODES`)."""

from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
import warnings
from pathlib import Path
from typing import Any, Optional

from ojas_ref.recipe import add_recipe_arguments, dtype_name, recipe_from_arguments
from ojas_ref.tools.train import TrainingDiverged, _existing_run, _holds_a_run, train
from ojas_ref.tools.train_config import DTYPES, PRESETS, RENAMED_FIELDS, TrainConfig, describe
from ojas_ref.tools.train_log import OutputError
from ojas_ref.tools.train_memory import plan_line

__all__ = ["EXIT_CODES", "OLD_FLAGS", "add_arguments", "run_command"]

#: ``ojas train``'s exit status (:func:`run_command`)
EXIT_CODES = {
    0: "the run finished, stopped at --stop-after, or was finished already",
    1: "the training diverged (a NaN/inf loss or gradient)",
    2: "a bad setting: an option, a path, a device, a resume that cannot be done, --out-dir in use by "
    "another run, or a step predicted not to fit in the GPU's free memory",
    3: "a file of the run could not be written (e.g. a full disk); the last complete state file is intact",
    "128+N": "stopped by signal N (SIGTERM: 143, Ctrl-C: 130) after writing a state file of the last step; "
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
    "dtype": "parameter dtype",
    "device": "cpu, cuda, cuda:N or auto",
    "seed": "seed of the initialisation and the data order",
    "data_dir": "directory of the corpus (default: the Python standard library's own source)",
    "data_glob": "files of the corpus",
    "max_bytes": "corpus bytes",
    "vocab": "BPE vocabulary (special tokens included)",
    "cache_dir": "tokenizer/token cache",
    "out_dir": "log, plot and state files (in its state/)",
    "state_every": "steps between state files",
    "keep_states": "state files kept",
    "resume": "continue a run: --resume (or --resume latest) from the latest state file in --out-dir, --resume FILE "
    "from that state file",
    "stop_after": "save and stop after this step (the schedule stays that of --steps)",
    "progress": "progress bar",
    "threads": "intra-op CPU threads (default: half of the cores this process may use, at most 4; "
    "OMP_NUM_THREADS if set)",
}


#: release 0.1's flags, hidden deprecated aliases (one release): flag -> (TrainConfig's deprecated
#: keyword it sets, its value (a type: the flag takes one), the flag to write instead)
OLD_FLAGS: dict[str, tuple[str, Any, str]] = {
    "--ojas": ("ojas", True, "the primitives' flags (--attention, --linear-cross-entropy, ...: on by default)"),
    "--no-ojas": (
        "ojas",
        False,
        "--no-attention --no-linear-cross-entropy --no-rms-norm --no-swiglu --no-rope --no-relu-mask",
    ),
    "--activation-checkpointing": ("activation_checkpointing", True, "--checkpoint on"),
    "--no-activation-checkpointing": ("activation_checkpointing", False, "--checkpoint off"),
    "--offload-checkpoints": ("offload_checkpoints", True, "--checkpoint offload"),
    "--no-offload-checkpoints": ("offload_checkpoints", False, "--checkpoint on"),
    "--split-checkpoints": ("split_checkpoints", True, "--checkpoint-split"),
    "--no-split-checkpoints": ("split_checkpoints", False, "--no-checkpoint-split"),
    "--state-on-host": ("state_on_host", True, "--state-device cpu"),
    "--no-state-on-host": ("state_on_host", False, "--state-device none"),
    "--checkpoint-every": ("checkpoint_every", int, "--state-every"),
    "--keep-checkpoints": ("keep_checkpoints", int, "--keep-states"),
}


class _OldFlag(argparse.Action):
    """A flag of :data:`OLD_FLAGS`: warns on stderr and sets its renamed field, or records its
    keyword in ``deprecated``."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: Optional[str] = None
    ) -> None:
        keyword, value, instead = OLD_FLAGS[option]
        print(f"ojas train: warning: {option} is deprecated: write {instead}", file=sys.stderr)
        if keyword in RENAMED_FIELDS:  # the field under its new name
            setattr(namespace, RENAMED_FIELDS[keyword], values)
        else:  # the deprecated keyword, mapped by upgrade_fields with the other flags of the recipe
            namespace.deprecated = {**namespace.deprecated, keyword: value}


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
        if f.name == "recipe":
            add_recipe_arguments(parser, default)
        elif isinstance(default, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=_HELP[f.name])
        elif f.name == "resume":
            parser.add_argument(flag, nargs="?", const="latest", default=None, metavar="STATE", help=_HELP[f.name])
        elif f.name == "dtype":
            parser.add_argument(flag, default=dtype_name(default), choices=sorted(DTYPES), help=_HELP[f.name])
        else:
            kind = {"max_grad_norm": float, "stop_after": int, "threads": int}.get(
                f.name, str if default is None else type(default)
            )
            choices = {"preset": sorted(PRESETS)}.get(f.name)
            parser.add_argument(flag, type=kind, default=default, choices=choices, help=_HELP[f.name])
    parser.set_defaults(deprecated={})
    for flag, (_, value, _) in OLD_FLAGS.items():
        takes = dict(type=value) if isinstance(value, type) else dict(nargs=0)
        parser.add_argument(flag, action=_OldFlag, help=argparse.SUPPRESS, **takes)
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
    when a file of the run could not be written, 128 + N when stopped by signal N (state file
    written; not at a second Ctrl-C, which stops at once: 130)."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig) if f.name != "recipe"}
    if values["max_grad_norm"] == 0:
        values["max_grad_norm"] = None
    try:
        values["recipe"] = recipe_from_arguments(args)
        with warnings.catch_warnings():  # each deprecated flag was said on stderr already
            warnings.simplefilter("ignore", DeprecationWarning)
            config = TrainConfig(**values, **args.deprecated)
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
            "ojas train: interrupted by a second Ctrl-C, without a state file of the current step; --resume "
            "latest continues from the last one",
            file=sys.stderr,
        )
        return 130
    if not result.losses and result.stopped is None:
        print(
            f"ojas train: the run in {config.out_dir} is finished (step {result.step} of {config.steps}, state file "
            f"{result.state}): nothing to resume. To train further, start a new run in another --out-dir"
        )
        return 0
    first, last = result.losses[0][1], result.losses[-1][1]
    print(
        f"ojas train: step {result.step}, loss {first:.4f} -> {last:.4f}; log {result.log_path}, plot "
        f"{result.plot_path}, state file {result.state}"
        + (f"; stopped by {result.stopped}, continue with --resume latest" if result.stopped else "")
    )
    if result.stopped and result.stopped != "stop_after":
        return 128 + signal.Signals[result.stopped].value
    return 0
