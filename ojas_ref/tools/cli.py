"""The ``ojas`` command: ``ojas audit`` (the main job), ``ojas proofs`` and ``ojas train``.

Exit status: 0 when everything holds, 1 when something does not, 2 when the command
cannot run here (it needs a source checkout with rocq/ and extraction/, and coqc,
coq_makefile and make to rebuild the proofs; the message says which is missing)."""

from __future__ import annotations

import argparse
import sys


def _proofs(args: argparse.Namespace) -> int:
    from ojas_ref.verification import proof_audit as pa

    try:
        data = pa.run_audit()
    except pa.SourcesMissing as err:
        print(f"ojas proofs: cannot run: {err}", file=sys.stderr)
        return 2
    except pa.ProofAuditError as err:
        print(f"proof audit FAILED: {err}", file=sys.stderr)
        return 1
    pa.print_report(data["theorems"])
    n = len(data["theorems"])
    print(f"proof audit passed: {n} exported theorems, no admitted proof, "
          f"no assumption beyond {', '.join(sorted(pa.ALLOWED_AXIOMS))}")
    if args.write_manifest:
        pa.write_manifest(data)
        print(f"wrote {pa.MANIFEST_PATH.relative_to(pa.REPO_ROOT)}")
    elif args.check_manifest and not pa.manifest_matches(data):
        print(f"{pa.MANIFEST_PATH.relative_to(pa.REPO_ROOT)} is out of date: "
              "run `ojas proofs --write-manifest` and commit it", file=sys.stderr)
        return 1
    return 0


def _audit(args: argparse.Namespace) -> int:
    from ojas_ref.verification.audit import run

    return run(seed=args.seed, quick=args.quick)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ojas", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    audit = sub.add_parser("audit", help="check the proofs and the implementations against the oracle")
    audit.add_argument("--seed", type=int, default=0, help="seed of the random differential inputs")
    audit.add_argument("--quick", action="store_true", help="fewer differential cases")
    audit.set_defaults(func=_audit)
    from ojas_ref.tools import plan

    plan_parser = sub.add_parser("plan", help="predict the peak GPU memory of a training step (no GPU used)")
    plan.add_arguments(plan_parser)
    plan_parser.set_defaults(func=plan.run_command)
    proofs = sub.add_parser("proofs", help="build rocq/ and audit its assumptions")
    group = proofs.add_mutually_exclusive_group()
    group.add_argument("--write-manifest", action="store_true", help="write rocq/MANIFEST.json")
    group.add_argument("--check-manifest", action="store_true",
                       help="fail if rocq/MANIFEST.json differs from what the audit finds")
    proofs.set_defaults(func=_proofs)
    from ojas_ref.tools import train

    train_parser = sub.add_parser("train", help="train a Llama-style model from scratch (CPU default: minutes)",
                                  formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    train.add_arguments(train_parser)
    train_parser.set_defaults(func=train.run_command)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
