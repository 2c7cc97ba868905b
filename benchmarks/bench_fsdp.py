"""Benchmark: FSDP2 (``fully_shard``) over several GPUs, the standard loop against ``optimize_model`` +
``InBackwardOptimizer``, compared with one GPU on the concatenated batch (issue 18).

    torchrun --standalone --nproc-per-node 2 benchmarks/bench_fsdp.py [--quick] [--device cpu]
        [--dtypes fp32 bf16] [--optimizers sgd adamw] [--modes ...] [--steps 10] [--warmup 2] [--out FILE]

Launched by torchrun (one process per GPU; NCCL on CUDA, gloo with ``--device cpu``; NVLink
multicast off: ``NCCL_NVLS_ENABLE=0`` is set before the process group starts). The model is
bench_optimize_model's Hugging Face ``LlamaForCausalLM`` built from a config (1.06B parameters,
hidden 2048, 18 layers, MLP 5632, vocabulary 32000, sequence 2048, batch 1 per rank), the same seed on
every rank, weights and optimizer state in the run's dtype (so no MixedPrecisionPolicy: FSDP2
all-gathers and reduce-scatters in that dtype). Modes, as bench_optimize_model's: ``standard``,
``standard+ckpt`` (``gradient_checkpointing_enable``), ``ojas`` / ``ojas+ckpt`` (``optimize_model(model,
checkpoint=...)`` applied before sharding, then ``InBackwardOptimizer`` on the sharded parameters).
``fully_shard`` is applied to each decoder layer, then to the root.

Per dtype and optimizer (all at once with ``--quick``): first the one-GPU pass, in a child process of
rank 0 that has no process group (``--single DIR``: one GPU, rank 0's, the concatenated batch of all
ranks, every mode, the final parameters saved to DIR; no process group, so InBackwardOptimizer takes its
one-process path, as a real one-GPU run) while the other ranks wait at a barrier; then the FSDP2 pass on
all ranks.
In both, each mode is built in turn (the earlier ones kept, idle), warmed up (``--warmup`` steps), its
peak ``torch.cuda.max_memory_allocated`` over one more step and its weights + state (memory allocated
between steps) measured less the earlier modes' memory, then the modes stepped together, one
synchronised step of each per round (bench_optimize_model's interleaved timing), ``--steps`` steps
in all per mode. tokens/s: the tokens of all ranks over the slowest rank's median step. Then each
mode's parameters, gathered (``DTensor.full_tensor()``), are compared with the one-GPU run's of the
same mode: the largest absolute difference, the largest difference relative to the tensor's largest
entry, and ``update_rel`` = ||fsdp - single|| / ||single - initial|| (the share of the training update
that disagrees: about 1 for an update with a rank's local gradient, the bug tests/optim/test_distributed.py
guards against). ``--quick``: a tiny model (on the CPU with ``--device cpu``, 2 gloo processes, for
tests/bench/test_bench_fsdp.py; no memory figures).

Tolerance (asserted: the run exits with an error listing the rows beyond it; ``--no-check`` only
reports). tests/optim/test_distributed.py shows, in float64 on 2 gloo processes, that InBackwardOptimizer under
FSDP2 lands where the single-process loop does up to the order of the gradient's sums (a few ulps, TOL
1e-14), as the standard loop does: no error of its own. Here the model runs in fp32 or bf16 on a batch of
1 per rank instead of 2 (other matmul blockings) and reduce-scatters in that dtype, so the floor is not a
few ulps of float64 but the larger of two distances that are not errors of the FSDP2 path: the
``standard`` mode's own ``update_rel`` under FSDP2 (torch's rounding of the same split), and the ojas
mode's distance to ``standard`` on one GPU (``vs_standard_1gpu``: the kernels' rounding, which the split
can change as much). An ojas mode passes (``ok``) when its ``update_rel`` is at most ``FLOOR_FACTOR`` (4)
times that floor; the ``standard`` rows set the floor and are not judged. An update with a rank's local
gradient, or with the sum of the ranks' gradients for SGD, gives about 1 (tests/bench/test_bench_fsdp.py runs
the latter), so a row whose tolerance reaches ``DECISIVE_BELOW`` (0.5) is marked not ``decisive``: its
rounding alone moves the update as much as a bug would (likely in bf16 at full size, where an update of
lr 1e-3 x a small gradient is below half an ulp of the weights and only the elements that round up
move). Measured by ``--quick`` on 2 gloo processes: ``update_rel`` 1.1e-6 to 1.8e-6 in fp32 (floor
2.6e-6 to 2.8e-6), 0.012 to 0.039 in bf16 (floor 0.04 to 0.07); with the Triton kernels forced
(``TRITON_INTERPRET=1`` and ``OJAS_*_IMPL=triton``), AdamW, ``standard`` and ``ojas``: fp32 9.8e-7
(tolerance 3.7e-5), bf16 0.028 (tolerance 0.29).

On two H200s (``nvidia-h200-x2``), one dtype per command to stay within 10 minutes (the one-GPU
pass saves each mode's parameters under ``$TMPDIR``: 17 GB at a time for fp32):

    torchrun --standalone --nproc-per-node 2 benchmarks/bench_fsdp.py --dtypes fp32 --out fsdp_fp32.json
    torchrun --standalone --nproc-per-node 2 benchmarks/bench_fsdp.py --dtypes bf16 --out fsdp_bf16.json

Issue 18's Done-when against the columns: "each GPU's peak in the ojas setting is at most about half of
the single-GPU ojas figure for the sharded terms (weights, state)": the ``w+s ratio`` column (weights +
optimizer state per GPU over the one-GPU figure, about 0.5) of the ojas rows, with ``peak ratio`` for the
whole peak (activations and one all-gathered layer are not sharded); "throughput scales at least 1.8x over
one GPU": the ``scaling`` column (global tokens/s over the one-GPU tokens/s on the same global batch of 2
sequences: strong scaling, stricter than against one GPU at batch 1; the one-GPU ``peak`` also holds
the activations of 2 sequences);
"the parameters agree with the single-GPU run within the tolerance the CPU tests justify": the ``ok``
column of the ojas rows (update_rel against the tolerance above; ``yes, not decisive`` where the
tolerance reaches DECISIVE_BELOW; max abs / max rel are reported beside it).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks import bench_optimize_model as B  # noqa: E402
from benchmarks.bench_in_backward import (  # noqa: E402
    DTYPES,
    OPTIMIZERS,
    Config,
    add_common_arguments,
    gib,
)
from ojas_ref import InBackwardOptimizer, optimize_model  # noqa: E402

#: ``--quick``: smaller than bench_optimize_model's QUICK (a rank's batch of 1): 2 processes on 2 CI cores
TINY = Config(hidden=32, layers=2, heads=2, intermediate=64, vocab=128, batch=1, seq=32)
#: ``update_rel`` of an ojas mode may be this many times its floor (:func:`tolerance`)
FLOOR_FACTOR = 4.0
#: a tolerance at least this cannot tell a bug of the reduction (``update_rel`` about 1) from rounding
DECISIVE_BELOW = 0.5


class Runner(B.Runner):
    """One mode on this process: the model built, optimized (ojas modes) and sharded over the process
    group (``sharded``) or not, its optimizer, and its batches: rank ``rank``'s rows of the global
    batches (``world * c.batch`` rows), all of them when not sharded. Steps as bench_optimize_model's."""

    def __init__(
        self,
        c: Config,
        dtype: torch.dtype,
        opt_name: str,
        mode: str,
        device: torch.device,
        bucket_mb: float,
        rank: int,
        world: int,
        sharded: bool,
    ) -> None:
        self.mode, self.c = mode, c
        self.others = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
        self.model = B.build(c, dtype, device)
        self.model.train()
        self.report = prepare(self.model, mode)
        if sharded:
            shard(self.model)
        self.opt = make_optimizer(self.model, mode, opt_name, bucket_mb)
        g = torch.Generator(device="cpu").manual_seed(1)
        rows = slice(rank * c.batch, (rank + 1) * c.batch) if sharded else slice(None)
        self.batches = [
            torch.randint(0, c.vocab, (world * c.batch, c.seq), generator=g)[rows].to(device) for _ in range(4)
        ]
        self.times: list[float] = []
        self.losses: list[float] = []
        self.peak: Optional[int] = None
        self.static: Optional[int] = None


def prepare(model: torch.nn.Module, mode: str):
    """What ``mode`` changes in the model before it is sharded: checkpointing, ``optimize_model``."""
    if mode == "standard+ckpt":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if mode.startswith("ojas"):
        return optimize_model(model, checkpoint=mode.endswith("+ckpt"))[1]
    return None


def shard(model: torch.nn.Module) -> None:
    """FSDP2: ``fully_shard`` on each decoder layer, then on the root."""
    from torch.distributed.fsdp import fully_shard

    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)


def make_optimizer(model: torch.nn.Module, mode: str, opt_name: str, bucket_mb: float) -> torch.optim.Optimizer:
    opt_class, kwargs = OPTIMIZERS[opt_name]
    if mode.startswith("ojas"):
        return InBackwardOptimizer(model.parameters(), opt_class, bucket_cap_mb=bucket_mb, **kwargs)
    return opt_class(model.parameters(), **kwargs)


def full_parameters(model: torch.nn.Module, keep: bool = True) -> dict[str, torch.Tensor]:
    """Every parameter whole (FSDP2 shards all-gathered: a collective, every rank calls it), on the CPU;
    ``keep=False``: gathered for the others, an empty dict returned."""
    from torch.distributed.tensor import DTensor

    params = {}
    for name, p in model.named_parameters():
        whole = (p.full_tensor() if isinstance(p, DTensor) else p).detach()
        if keep:
            params[name] = whole.to("cpu", copy=True)
    return params


def run_modes(
    c: Config,
    dtype: torch.dtype,
    opt_name: str,
    args: argparse.Namespace,
    device: torch.device,
    kept: int,
    rank: int,
    world: int,
    sharded: bool,
) -> list[tuple[Runner, dict[str, torch.Tensor]]]:
    """Every mode of one dtype and optimizer on this process: measured, timed (``args.steps`` steps in all)
    and its parameters afterwards (gathered on every rank when ``sharded``)."""
    timed = args.steps - args.warmup - (device.type == "cuda")  # B.measure_peak steps once more on CUDA
    if timed < 1:
        raise SystemExit(f"--steps {args.steps} leaves no timed step after {args.warmup} warm-up steps")
    built = []
    for mode in args.modes:
        r = Runner(c, dtype, opt_name, mode, device, args.bucket_mb, rank, world, sharded)
        B.measure_peak(r, device, args.warmup, kept)
        if device.type == "cuda":
            r.static = torch.cuda.memory_allocated(device) - r.others  # weights + state
        built.append(r)
    B.time_interleaved(built, device, timed)
    return [(r, full_parameters(r.model, keep=rank == 0)) for r in built]


def figures(r: Runner, c: Config, world: int) -> dict:
    """This process's figures of one mode: peak, weights + state, median step, and the tokens of the
    global batch (``world`` ranks' rows) over it."""
    t = B.timing(r, c)
    return t | dict(static=r.static, tokens_per_s=world * c.batch * c.seq / t["step_s"])


def run_single(args: argparse.Namespace, device: torch.device, out_dir: Path) -> None:
    """``--single``: the one-device pass (no process group), every mode of every dtype and optimizer on the
    global batch of ``args.world`` ranks; in ``out_dir/<dtype>-<optimizer>``, each mode's figures to
    ``single.json``, its parameters to ``<mode>.pt``, the initial ones to ``initial.pt``."""
    c = TINY if args.quick else Config()
    kept = None
    for dtype_name in args.dtypes:
        for opt_name in args.optimizers:
            folder = out_dir / f"{dtype_name}-{opt_name}"
            folder.mkdir()
            torch.save(full_parameters(B.build(c, DTYPES[dtype_name], device)), folder / "initial.pt")
            B.release(device)
            kept = B.allocate_workspaces(device) if kept is None else kept
            rows = {}
            for r, params in run_modes(
                c, DTYPES[dtype_name], opt_name, args, device, kept, 0, args.world, sharded=False
            ):
                rows[r.mode] = figures(r, c, args.world)
                torch.save(params, folder / f"{r.mode}.pt")
            (folder / "single.json").write_text(json.dumps(rows))
            del r, params
            B.release(device)


def compare(fsdp: dict[str, torch.Tensor], single: dict[str, torch.Tensor], initial: dict[str, torch.Tensor]) -> dict:
    """Max |fsdp - single|, its largest ratio to a tensor's max |single|, and ||fsdp - single|| /
    ||single - initial|| over all parameters (in float64)."""
    assert fsdp.keys() == single.keys() == initial.keys(), "the runs have different parameters"
    max_abs = max_rel = diff_sq = update_sq = 0.0
    for name, a in fsdp.items():
        e, p0 = single[name].double(), initial[name].double()
        d = a.double() - e
        max_abs = max(max_abs, float(d.abs().max()))
        max_rel = max(max_rel, float(d.abs().max() / e.abs().max().clamp_min(torch.finfo(torch.float64).tiny)))
        diff_sq += float(d.square().sum())
        update_sq += float((e - p0).square().sum())
    return dict(max_abs=max_abs, max_rel=max_rel, update_rel=math.sqrt(diff_sq / update_sq) if update_sq else math.inf)


def base_mode(mode: str) -> str:
    """The standard mode with ``mode``'s checkpointing."""
    return "standard+ckpt" if mode.endswith("+ckpt") else "standard"


def tolerance(row: dict, rows: list[dict]) -> Optional[float]:
    """The ``update_rel`` an ojas row may have (module docstring): FLOOR_FACTOR times the larger of the
    standard mode's under FSDP2 and its own distance to the standard mode on one GPU; None for the
    standard rows (they set the floor) and without the standard mode of the same checkpointing."""
    base = [r for r in rows if r["mode"] == base_mode(row["mode"])]
    if not row["mode"].startswith("ojas") or not base:
        return None
    return FLOOR_FACTOR * max(base[0]["update_rel"], row["vs_standard_1gpu"]["update_rel"])


def judge(rows: list[dict]) -> None:
    """Each row's ``tolerance``, ``ok`` (None: not judged) and ``decisive`` (the tolerance below DECISIVE_BELOW)."""
    for r in rows:
        r["tolerance"] = tol = tolerance(r, rows)
        r["ok"] = None if tol is None else r["update_rel"] <= tol
        r["decisive"] = None if tol is None else tol < DECISIVE_BELOW


def groups(args: argparse.Namespace) -> list[tuple[list[str], list[str]]]:
    """The (dtypes, optimizers) of each one-GPU child process: one per dtype and optimizer (the saved
    parameters of one at a time on disk: 17 GB for fp32 at full size), all in one with ``--quick``
    (a process start less per dtype and optimizer)."""
    if args.quick:
        return [(args.dtypes, args.optimizers)]
    return [([d], [o]) for d in args.dtypes for o in args.optimizers]


def one_gpu_pass(
    argv: list[str], dtypes: list[str], optimizers: list[str], folder: str, world: int, device: torch.device
) -> None:
    """This script as ``--single`` in a child process (no process group) on ``device``, the other
    options as given."""
    subprocess.run(
        [
            sys.executable,
            __file__,
            *argv,
            "--single",
            folder,
            "--world",
            str(world),
            "--device",
            str(device),
            "--dtypes",
            *dtypes,
            "--optimizers",
            *optimizers,
        ],
        check=True,
    )


def fsdp_pass(
    c: Config,
    dtype_name: str,
    opt_name: str,
    args: argparse.Namespace,
    device: torch.device,
    kept: int,
    rank: int,
    world: int,
    folder: Path,
) -> list[dict]:
    """The FSDP2 pass of one dtype and optimizer, compared with the one-GPU pass in ``folder``; rank 0
    returns one row per mode (the other ranks an empty list)."""
    results = run_modes(c, DTYPES[dtype_name], opt_name, args, device, kept, rank, world, sharded=True)
    per_rank = [None] * world
    dist.all_gather_object(per_rank, [figures(r, c, world) for r, _ in results])
    if rank != 0:
        return []
    single = json.loads((folder / "single.json").read_text())
    initial = load(folder, "initial")
    rows = [
        row(
            dtype_name,
            opt_name,
            r.mode,
            [p[i] for p in per_rank],
            single[r.mode],
            compare(params, load(folder, r.mode), initial),
        )
        for i, (r, params) in enumerate(results)
    ]
    for r in rows:  # the ojas kernels' own distance to torch's, on one GPU
        if r["mode"].startswith("ojas") and base_mode(r["mode"]) in args.modes:
            r["vs_standard_1gpu"] = compare(load(folder, r["mode"]), load(folder, base_mode(r["mode"])), initial)
    judge(rows)
    return rows


def load(folder: Path, mode: str) -> dict[str, torch.Tensor]:
    """The one-GPU run's parameters of ``mode`` (:func:`run_single`)."""
    return torch.load(Path(folder, f"{mode}.pt"), mmap=True)


def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return None if a is None or not b else a / b


def row(dtype_name: str, opt_name: str, mode: str, ranks: list[dict], single: dict, diff: dict) -> dict:
    """One mode's record: per rank and the worst rank, the one-GPU figures, their ratios, the comparison."""

    def worst(key: str) -> Optional[float]:
        values = [r[key] for r in ranks]
        return None if None in values else max(values)

    tokens = min(r["tokens_per_s"] for r in ranks)  # the slowest rank's step sets the pace
    return dict(
        dtype=str(DTYPES[dtype_name]).removeprefix("torch."),
        optimizer=opt_name,
        mode=mode,
        ranks=ranks,
        peak=worst("peak"),
        static=worst("static"),
        tokens_per_s=tokens,
        last_loss=sum(r["last_loss"] for r in ranks) / len(ranks),
        single=single,
        peak_ratio=ratio(worst("peak"), single["peak"]),
        static_ratio=ratio(worst("static"), single["static"]),
        scaling=tokens / single["tokens_per_s"],
        **diff,
    )


def markdown(results: list[dict], world: int) -> str:
    def r3(x: Optional[float]) -> str:
        return "-" if x is None else f"{x:.3f}"

    lines = [
        f"| dtype | optimizer | mode | peak GiB/GPU ({world}) | 1 GPU | peak ratio | w+s GiB/GPU | 1 GPU | "
        f"w+s ratio | tokens/s ({world}) | 1 GPU | scaling | max abs | max rel | update_rel | tolerance | ok |",
        "|" + "---|" * 17,
    ]
    for r in results:
        s = r["single"]
        lines.append(
            f"| {r['dtype']} | {r['optimizer']} | {r['mode']} | {gib(r['peak'])} | {gib(s['peak'])} | "
            f"{r3(r['peak_ratio'])} | {gib(r['static'])} | {gib(s['static'])} | {r3(r['static_ratio'])} | "
            f"{r['tokens_per_s']:,.0f} | {s['tokens_per_s']:,.0f} | {r['scaling']:.2f}x | "
            f"{r['max_abs']:.3g} | {r['max_rel']:.3g} | {r['update_rel']:.3g} | "
            f"{'floor' if r['tolerance'] is None else format(r['tolerance'], '.3g')} | {verdict(r)} |"
        )
    return "\n".join(lines)


def verdict(r: dict) -> str:
    if r["ok"] is None:
        return "-"
    return ("yes" if r["ok"] else "NO") + ("" if r["decisive"] else ", not decisive")


def init_distributed(device_arg: str) -> tuple[int, int, torch.device]:
    """The process group torchrun describes: NCCL (NVLink multicast off) on CUDA, gloo on the CPU."""
    device = torch.device(device_arg)
    if device.type == "cuda":
        os.environ["NCCL_NVLS_ENABLE"] = "0"
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    dist.init_process_group(
        "nccl" if device.type == "cuda" else "gloo",
        timeout=datetime.timedelta(minutes=60),
        device_id=device if device.type == "cuda" else None,
    )
    return dist.get_rank(), dist.get_world_size(), device


def parse(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser, warmup=2, steps=10)
    parser.add_argument("--modes", nargs="+", choices=B.MODES, default=list(B.MODES))
    parser.add_argument("--bucket-mb", type=float, default=64.0, help="bucket_cap_mb of InBackwardOptimizer")
    parser.add_argument("--no-check", action="store_true", help="report the comparison, do not assert it")
    parser.add_argument("--single", type=Path, help=argparse.SUPPRESS)  # the one-GPU child: its output folder
    parser.add_argument("--world", type=int, default=1, help=argparse.SUPPRESS)  # the child's global batch
    return parser.parse_args(argv)


def main(argv: Optional[list[str]] = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    if args.single is not None:
        run_single(args, torch.device(args.device), args.single)
        return
    rank, world, device = init_distributed(args.device)
    try:
        c = TINY if args.quick else Config()
        kept = B.allocate_workspaces(device)
        results = []
        for dtypes, optimizers in groups(args):
            with tempfile.TemporaryDirectory(prefix="bench_fsdp_") as tmp:
                if rank == 0:
                    one_gpu_pass(argv, dtypes, optimizers, tmp, world, device)
                dist.barrier()  # the other ranks wait for the one-GPU pass
                for dtype_name in dtypes:
                    for opt_name in optimizers:
                        for r in fsdp_pass(
                            c,
                            dtype_name,
                            opt_name,
                            args,
                            device,
                            kept,
                            rank,
                            world,
                            Path(tmp, f"{dtype_name}-{opt_name}"),
                        ):
                            print(json.dumps({k: v for k, v in r.items() if k not in ("ranks", "single")}), flush=True)
                            results.append(r)
                        B.release(device)
        if rank == 0:
            report(args, c, device, world, results)
    finally:
        dist.destroy_process_group()


def report(args: argparse.Namespace, c: Config, device: torch.device, world: int, results: list[dict]) -> None:
    """Print the table, write the JSON (``--out``), then assert the comparison (unless ``--no-check``)."""
    env = B.environment(device) | dict(
        world_size=world, backend=dist.get_backend(), NCCL_NVLS_ENABLE=os.environ.get("NCCL_NVLS_ENABLE")
    )
    if device.type == "cuda":
        env["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps(
                dict(
                    env=env,
                    config=vars(c),
                    steps=args.steps,
                    warmup=args.warmup,
                    bucket_mb=args.bucket_mb,
                    results=results,
                ),
                indent=1,
            )
        )
    print(env)
    print(markdown(results, world))
    bad = [
        f"{r['dtype']} {r['optimizer']} {r['mode']}: update_rel {r['update_rel']:.3g} > {r['tolerance']:.3g}"
        for r in results
        if r["ok"] is False
    ]
    if bad and not args.no_check:
        raise SystemExit("FSDP2 and one GPU disagree beyond the tolerance:\n" + "\n".join(bad))


if __name__ == "__main__":
    main()
