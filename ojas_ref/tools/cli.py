"""The ojas command of ojas-ref: formally verified memory-saving primitives for LLM training.

  ojas train    train a small Llama from scratch on the CPU (or a GPU): the main job
  ojas plan     predict the peak GPU memory (and with --time the speed) of a training step, no GPU used
  ojas audit    check the proofs and run every implementation against the oracle extracted from them
  ojas rocq     rebuild rocq/ (the Coq proofs) and audit its assumptions; ojas proofs is its former
                name, still accepted for one release
  ojas verify-device  check, on this CUDA GPU, the premises the float theorems take about it (exp,
                log, tanh accuracy over every float32 input of their domains, the casts, tl.sum's
                tree, tl.dot's accumulation) and record the result for the GPU tests and ojas audit

Each subcommand's --help lists its options and its exit status. ojas audit and ojas rocq: 0
when everything holds, 1 when something does not, 2 when they cannot run here (they need a
source checkout with rocq/ and extraction/, and coqc, coq_makefile and make to rebuild the
proofs; the message says which is missing); ojas audit exits 3 when a check was skipped
(--allow-skip: 0). ojas verify-device: 0 when every premise holds, 1 when one fails, 2 when it
cannot run here (no CUDA GPU, unless --quick in Triton's interpreter)."""

from __future__ import annotations

import argparse
import sys


def _rocq(args: argparse.Namespace) -> int:
    from ojas_ref.verification import proof_audit as pa

    try:
        data = pa.run_audit()
    except pa.SourcesMissing as err:
        print(f"ojas rocq: cannot run: {err}", file=sys.stderr)
        return 2
    except pa.ProofAuditError as err:
        print(f"proof audit FAILED: {err}", file=sys.stderr)
        return 1
    pa.print_report(data["theorems"])
    n = len(data["theorems"])
    print(
        f"proof audit passed: {n} exported theorems, no admitted proof, "
        f"no assumption beyond {', '.join(sorted(pa.ALLOWED_AXIOMS))}"
    )
    if args.write_manifest:
        pa.write_manifest(data)
        print(f"wrote {pa.MANIFEST_PATH.relative_to(pa.REPO_ROOT)}")
    elif args.check_manifest and not pa.manifest_matches(data):
        print(
            f"{pa.MANIFEST_PATH.relative_to(pa.REPO_ROOT)} is out of date: "
            "run `ojas rocq --write-manifest` and commit it",
            file=sys.stderr,
        )
        return 1
    return 0


def _proofs(args: argparse.Namespace) -> int:
    """``ojas proofs``, the former name of ``ojas rocq`` (``proofs/`` is the Lean folder): a note, then the same."""
    print(
        "ojas proofs is deprecated and will be removed in the next release; use ojas rocq (it audits rocq/)",
        file=sys.stderr,
    )
    return _rocq(args)


def _audit(args: argparse.Namespace) -> int:
    from ojas_ref.verification.audit import run

    return run(seed=args.seed, quick=args.quick, allow_skip=args.allow_skip)


def _verify_device(args: argparse.Namespace) -> int:
    import os

    import torch

    interpreter = os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")
    if not torch.cuda.is_available() and not (args.quick and interpreter):
        print(
            "ojas verify-device: cannot run: it checks the premises on a CUDA GPU and none is available here "
            "(torch.cuda.is_available() is False); `TRITON_INTERPRET=1 ojas verify-device --quick` runs a "
            "sampled smoke test of the checks in Triton's interpreter, which checks nothing about a GPU",
            file=sys.stderr,
        )
        return 2
    from ojas_ref.verification import device_premises as dp

    print(f"ojas verify-device: {'sampled (--quick)' if args.quick else 'every input of each domain'}", flush=True)
    record = dp.verify_device(
        quick=args.quick, softcaps=args.softcap or dp.SOFTCAPS, log=lambda m: print(m, flush=True)
    )
    path = dp.save_record(record, args.out)
    key = record["key"]
    print(
        f"\n{key['gpu']}, driver {key['driver']}, CUDA {key['cuda']}, torch {key['torch']}, Triton {key['triton']} "
        f"({record['mode']})"
    )
    print(dp.format_table(record))
    print(f"record: {path}")
    bad = dp.failed(record)
    if bad:
        print(f"verify-device: {len(bad)} premise(s) do not hold or were not checked: {', '.join(bad)}")
        return 1
    print("verify-device: every premise holds on this device")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``), run the subcommand, return its exit status."""
    from ojas_ref import __version__

    parser = argparse.ArgumentParser(
        prog="ojas", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"ojas-ref {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{train,plan,audit,rocq,verify-device}")
    from ojas_ref.tools import train_cli

    train_parser = sub.add_parser("train", help="train a Llama-style model from scratch (the CPU default: minutes)")
    train_cli.add_arguments(train_parser)
    train_parser.set_defaults(func=train_cli.run_command)
    from ojas_ref.tools import plan

    plan_parser = sub.add_parser("plan", help="predict the peak GPU memory of a training step (no GPU used)")
    plan.add_arguments(plan_parser)
    plan_parser.set_defaults(func=plan.run_command)
    audit = sub.add_parser("audit", help="check the proofs and the implementations against the oracle")
    audit.add_argument("--seed", type=int, default=0, help="seed of the random differential inputs")
    audit.add_argument("--quick", action="store_true", help="fewer differential cases")
    audit.add_argument(
        "--allow-skip",
        action="store_true",
        help="exit 0 when every check that ran held, even if some were skipped (without it: 3)",
    )
    audit.set_defaults(func=_audit)
    verify = sub.add_parser(
        "verify-device", help="check the float theorems' device premises on this GPU and record them"
    )
    verify.add_argument(
        "--out", default=None, help="the record's folder (default: $OJAS_DEVICE_CACHE or ~/.cache/ojas/device)"
    )
    verify.add_argument(
        "--quick",
        action="store_true",
        help="sample each domain (a smoke test; with TRITON_INTERPRET=1 it runs without a GPU): not a check",
    )
    verify.add_argument(
        "--softcap",
        type=float,
        action="append",
        default=None,
        help="a softcap whose tanh and division premises to check (repeatable; default 5 and 30)",
    )
    verify.set_defaults(func=_verify_device)
    rocq = sub.add_parser("rocq", help="build rocq/ (the Coq proofs) and audit its assumptions")
    rocq.set_defaults(func=_rocq)
    proofs = sub.add_parser("proofs")  # the former name of rocq, deprecated: no help, so not listed
    proofs.set_defaults(func=_proofs)
    for command in (rocq, proofs):
        group = command.add_mutually_exclusive_group()
        group.add_argument("--write-manifest", action="store_true", help="write rocq/MANIFEST.json")
        group.add_argument(
            "--check-manifest", action="store_true", help="fail if rocq/MANIFEST.json differs from what the audit finds"
        )
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
