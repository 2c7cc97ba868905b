"""Host time per call of ojas's RMSNorm, SwiGLU, RoPE and attention, forward and backward, beside
the plain torch op of the same role (issue 29: the bf16 step of the 1.06B Llama is host-bound).

    python benchmarks/bench_host_overhead.py [--calls 100] [--repeats 7] [--ops rms_norm,attention]
                                             [--records benchmarks/records.jsonl]
    python benchmarks/bench_host_overhead.py --quick     # the CPU, the launches replaced by no-ops
    python benchmarks/bench_host_overhead.py --step [--optimizer adamw_fused] [--steps 5] [--repeats 7]
                                             [--profile 20]   # one training step, on the CPU

Shapes: the 1.06B Llama's layer, batch 1 x 2048 tokens, hidden 2048, 16 heads of 128, MLP 5632,
bfloat16 (``--quick`` and the CPU: 16 tokens).  Peers, per op and pass:

* ``ojas``: the kernel path ``optimize_model``'s modules take (``fused_rms_norm``, ``fused_swiglu``,
  ``fused_rope``, ``ojas_kernels.attention.flash_attention(..., seq_major=True)``);
* ``ojas-public``: the public function with its checks and dispatch (``rms_norm``, ``swiglu``,
  ``apply_rotary_pos_emb``, ``attention``);
* ``ojas-op``: the registered op a torch.compile graph calls (``torch.ops.ojas.*_forward`` under
  no_grad, ``torch.ops.ojas.*_backward``: what the compiled forward and backward graphs run);
* ``torch``: ``F.rms_norm``, ``F.silu(gate) * up``, Hugging Face's rotate-half RoPE
  (``rope_reference``, its operations) and ``F.scaled_dot_product_attention``.

Forward: the call on inputs that require grad (the graph is recorded).  Backward:
``torch.autograd.grad`` of one forward's outputs with respect to its inputs, each call on its own
graph (recorded beforehand); the autograd engine's own cost is in every peer's figure but
``ojas-op``'s, which calls the backward op directly.

On CUDA the figure is the launch-queue time: the GPU is first kept busy (``torch.cuda._sleep``)
so that the host issues ``--calls`` calls back to back without waiting for the device, and
the host's wall time over them, per call, is the median over ``--repeats`` rounds; a round in
which the GPU went idle before the host finished is reported.  On the CPU (``--quick``, or no
CUDA device) the Triton launches are replaced by no-ops in this process (``no_op_launches``:
the cached launch path of ``ojas_kernels.launch`` runs up to the launcher call), so what is
timed is the Python around the kernels, and the torch peers are left out (their CPU kernels
would run); the figure is the least thread CPU time per call over the rounds (other processes
share the cores).

Records (``--records``): benchmark ``bench_host_overhead``, case ``{op, pass, batch, seq, hidden,
heads, head_dim, mlp, dtype, launch}`` (``launch`` "cuda", or "no-op" on the CPU), metric
``us_per_call``, one record per peer; the ratio printed is each peer's over torch's.

``--step``: the host time of one whole training step of issue 29's ``ojas`` mode, on the CPU
whatever the machine (launches no-ops, as ``--quick``; so a CPU figure, not a GPU claim):
Hugging Face's ``LlamaForCausalLM`` passed through ``optimize_model`` with every primitive (the
kernel paths taken on the CPU under ``use_impl("triton")``), bf16, trained by
``InBackwardOptimizer(overlap=True)`` (``--optimizer``: ``adamw`` with torch's CUDA default step,
foreach; ``adamw_fused``, Hugging Face Trainer's; ``sgd``) with ``loss.backward(); opt.step();
opt.zero_grad()``.  The model has the 1.06B Llama's structure, 18 layers and 165 parameter tensors
(:class:`StepShape`), at widths where the CPU's own matmuls and optimizer arithmetic cost little
beside the host code (the linear cross-entropy's kernels are no-ops too), and its gradients fill
about as many buckets as the 1.06B's 2.1 GB of bf16 gradients fill buckets of 256 MiB (9).  The
figure is the least main-thread CPU time per step over ``--repeats`` rounds of ``--steps`` steps
(the CPU runs the backward in that thread), with the mean of its phases (forward; backward with
the updates in its hooks; ``step()`` and ``zero_grad()``); ``--profile N`` adds cProfile's Python
self time over ``N`` steps, by where the code lives, and the top functions.  Records: case
``{op: "step", pass: "train", batch, seq, hidden, layers, heads, mlp, vocab, buckets, dtype,
optimizer, launch: "no-op"}``, metrics ``us_per_step`` and ``forward_us``, ``backward_us``,
``optimizer_us`` (the phases' means per step), peer ``ojas``.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import pstats
import statistics
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import records  # noqa: E402

OPS = ("rms_norm", "swiglu", "rope", "attention")
PEERS = ("ojas", "ojas-public", "ojas-op", "torch")
PASSES = ("forward", "backward")
EPS = 1e-6
#: the torch.cuda._sleep cycles per call issued (about 0.3 ms on a GPU at 1.7 GHz: above any
#: host time per call measured here), so that the GPU is still busy when the host is done
SLEEP_CYCLES_PER_CALL = 500_000


@dataclass(frozen=True)
class Shape:
    """One Llama layer's sizes."""

    batch: int = 1
    seq: int = 2048
    hidden: int = 2048
    heads: int = 16
    head_dim: int = 128
    mlp: int = 5632


FULL = Shape()
CPU_SHAPE = Shape(seq=16)


@dataclass(frozen=True)
class StepShape:
    """``--step``'s model: the 1.06B Llama's 18 layers and parameter tensors (per layer four attention
    and three MLP projections and two RMSNorm weights; the embedding, the final norm and the untied
    head: 165), 16 wide (one head of 16, the attention kernels' smallest head size), and gradients
    in ``buckets`` in-backward buckets."""

    batch: int = 1
    seq: int = 16
    hidden: int = 16
    layers: int = 18
    heads: int = 1
    mlp: int = 44
    vocab: int = 64
    buckets: int = 9


STEP_SHAPE = StepShape()
#: ``--optimizer``: (class, keyword arguments); ``adamw`` with foreach, which torch picks on CUDA (on the
#: CPU it would pick the single-tensor step)
STEP_OPTIMIZERS = {
    "adamw": (torch.optim.AdamW, dict(lr=1e-4, weight_decay=0.1, foreach=True)),
    "adamw_fused": (torch.optim.AdamW, dict(lr=1e-4, weight_decay=0.1, fused=True)),
    "sgd": (torch.optim.SGD, dict(lr=1e-3)),
}
#: ``--profile``'s groups of Python self time, by the first of these path parts in a function's file
PROFILE_GROUPS = (
    "ojas_ref/optim",
    "ojas_ref/integrations",
    "ojas_ref/functional",
    "ojas_kernels",
    "ojas_ref",
    "transformers",
    "torch/optim",
    "torch/nn",
    "torch",
)


def _ops_registered() -> None:
    """Import the modules that register the ``ojas::`` ops."""
    import ojas_kernels.attention  # noqa: F401
    import ojas_ref.functional.rms_norm  # noqa: F401
    import ojas_ref.functional.rope  # noqa: F401
    import ojas_ref.functional.swiglu  # noqa: F401


@contextlib.contextmanager
def no_op_launches() -> Iterator[None]:
    """Within the block the kernels of rms_norm, swiglu, rope, attention and the linear cross-entropy
    launch nothing: Triton's own launch returns a stand-in compiled kernel whose launcher does
    nothing, which ``ojas_kernels.launch`` then caches and calls as it calls a real one (its cached
    path is switched on, and the CUDA device and stream it asks torch for are stand-ins), and
    ``dispatch`` runs the kernels of CPU tensors as under Triton's interpreter.  Everything is
    restored on exit, the launch caches of these kernels emptied.  For timing the host code on
    the CPU; the outputs are uninitialised."""
    from triton.runtime.jit import KernelInterface

    from ojas_kernels import attention_backward, attention_forward, launch, linear_cross_entropy_kernels, rms_norm
    from ojas_kernels import rope, swiglu
    from ojas_ref.functional import dispatch

    class Compiled:
        function = packed_metadata = None

        @staticmethod
        def run(*args: object) -> None:
            return None

    def run(*args: object, grid: object, warmup: bool, **kwargs: object) -> Compiled:
        return Compiled()

    kernels = [
        v
        for m in (rms_norm, swiglu, rope, attention_forward, attention_backward, linear_cross_entropy_kernels)
        for v in vars(m).values()
        if isinstance(v, KernelInterface)
    ]
    stand_ins = {"_cuda_getDevice": lambda: 0, "_cuda_getCurrentRawStream": lambda device: 0}
    saved_c = {name: getattr(torch._C, name, None) for name in stand_ins}
    saved = (launch._SUPPORTED, dispatch._interpret)

    def empty_caches() -> None:
        for k in kernels:
            launch.fast(k).clear()

    empty_caches()
    try:
        for k in kernels:
            k.run = run
        for name, fn in stand_ins.items():
            setattr(torch._C, name, fn)
        launch._SUPPORTED, dispatch._interpret = True, True
        yield
    finally:
        launch._SUPPORTED, dispatch._interpret = saved
        for name, fn in saved_c.items():
            if fn is None:
                delattr(torch._C, name)
            else:
                setattr(torch._C, name, fn)
        for k in kernels:
            vars(k).pop("run", None)
        empty_caches()


@dataclass
class Calls:
    """One peer's calls of one op and pass: ``make(n)`` gives ``n`` zero-argument calls to time in
    a row (the backward's each on a graph of its own)."""

    make: Callable[[int], list[Callable[[], object]]]


def _repeat(fn: Callable[[], object]) -> Callable[[int], list[Callable[[], object]]]:
    return lambda n: [fn] * n


def _no_grad(fn: Callable[[], object]) -> Callable[[], object]:
    def call() -> object:
        with torch.no_grad():
            return fn()

    return call


def _backwards(forward: Callable[[], object], inputs: Sequence[torch.Tensor]) -> Callable[[int], list]:
    """``n`` calls of ``torch.autograd.grad`` of ``forward()``'s outputs (each its own graph, made
    now) with respect to ``inputs``, with output gradients of ones."""

    def make(n: int) -> list[Callable[[], object]]:
        outs = [forward() for _ in range(n)]
        outs = [o if isinstance(o, tuple) else (o,) for o in outs]
        grads = [torch.ones_like(t) for t in outs[0]]
        return [lambda o=o: torch.autograd.grad(o, inputs, grads) for o in outs]

    return make


def cases(op: str, shape: Shape, device: torch.device) -> dict[tuple[str, str], Calls]:
    """(peer, pass) -> the calls of ``op`` at ``shape`` on ``device`` (bfloat16)."""
    from ojas_ref.functional.attention import attention
    from ojas_ref.functional.rms_norm import fused_rms_norm, rms_norm
    from ojas_ref.functional.rope import apply_rotary_pos_emb, fused_rope, rope_reference
    from ojas_ref.functional.swiglu import fused_swiglu, swiglu

    _ops_registered()
    from ojas_kernels.attention import flash_attention

    impl = None if device.type == "cuda" else "triton"  # CPU tensors take the kernel path only if asked to
    gen = torch.Generator(device="cpu").manual_seed(0)
    B, S, H, NH, E = shape.batch, shape.seq, shape.hidden, shape.heads, shape.head_dim

    def rand(*size: int, grad: bool = True) -> torch.Tensor:
        return torch.randn(*size, generator=gen).to(device, torch.bfloat16).requires_grad_(grad)

    ops = torch.ops.ojas
    out: dict[str, dict[str, Callable]] = {}
    if op == "rms_norm":
        x, w = rand(B, S, H), rand(H)
        x2, w2 = x.detach().reshape(B * S, H), w.detach()
        with torch.no_grad():
            _, rstd = ops.rms_norm_forward(x2, w2, EPS, 0.0, False)
        dy = torch.ones_like(x2)
        out = {
            "ojas": dict(f=lambda: fused_rms_norm(x, w, EPS, 0.0, False), inputs=(x, w)),
            "ojas-public": dict(f=lambda: rms_norm(x, (H,), w, EPS, impl=impl), inputs=(x, w)),
            "ojas-op": dict(
                f=_no_grad(lambda: ops.rms_norm_forward(x2, w2, EPS, 0.0, False)),
                b=lambda: ops.rms_norm_backward(dy, x2, w2, rstd, 0.0, False),
            ),
            "torch": dict(f=lambda: F.rms_norm(x, (H,), w, EPS), inputs=(x, w)),
        }
    elif op == "swiglu":
        g, u = rand(B, S, shape.mlp), rand(B, S, shape.mlp)
        gd, ud = g.detach(), u.detach()
        dh = torch.ones_like(gd)
        out = {
            "ojas": dict(f=lambda: fused_swiglu(g, u, "silu"), inputs=(g, u)),
            "ojas-public": dict(f=lambda: swiglu(g, u, impl=impl), inputs=(g, u)),
            "ojas-op": dict(
                f=_no_grad(lambda: ops.swiglu_forward(gd, ud, "silu")),
                b=lambda: ops.swiglu_backward(gd, ud, dh, "silu"),
            ),
            "torch": dict(f=lambda: F.silu(g) * u, inputs=(g, u)),
        }
    elif op == "rope":
        # q and k as Hugging Face's attention makes them: [B, S, H, E] projections seen as [B, H, S, E]
        qp, kp = rand(B, S, NH, E), rand(B, S, NH, E)
        q, k = qp.transpose(1, 2), kp.transpose(1, 2)
        cos, sin = rand(1, S, E, grad=False), rand(1, S, E, grad=False)
        qd, kd = q.detach(), k.detach()
        dq, dk = torch.ones_like(qd), torch.ones_like(kd)
        out = {
            "ojas": dict(f=lambda: fused_rope(q, k, cos, sin), inputs=(q, k)),
            "ojas-public": dict(f=lambda: apply_rotary_pos_emb(q, k, cos, sin, impl=impl), inputs=(q, k)),
            "ojas-op": dict(
                f=_no_grad(lambda: ops.rope_forward(qd, kd, cos, sin)),
                b=lambda: ops.rope_backward(dq, dk, cos, sin),
            ),
            "torch": dict(f=lambda: rope_reference(q, k, cos, sin), inputs=(q, k)),
        }
    elif op == "attention":
        q, k, v = rand(B, NH, S, E), rand(B, NH, S, E), rand(B, NH, S, E)
        qd, kd, vd = q.detach(), k.detach(), v.detach()
        scale = E**-0.5
        with torch.no_grad():
            o, lse = ops.flash_attention_forward(qd, kd, vd, None, None, True, scale, None, 0.0, True, None)
        do = torch.ones_like(o)
        out = {
            "ojas": dict(
                f=lambda: flash_attention(q, k, v, is_causal=True, scale=scale, seq_major=True), inputs=(q, k, v)
            ),
            "ojas-public": dict(f=lambda: attention(q, k, v, is_causal=True, impl=impl), inputs=(q, k, v)),
            "ojas-op": dict(
                f=_no_grad(
                    lambda: ops.flash_attention_forward(qd, kd, vd, None, None, True, scale, None, 0.0, True, None)
                ),
                b=lambda: ops.flash_attention_backward(
                    do, qd, kd, vd, None, o, lse, None, True, scale, None, 0.0, None
                ),
            ),
            "torch": dict(f=lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), inputs=(q, k, v)),
        }
    else:
        raise ValueError(f"--ops: {op!r} is not one of {OPS}")
    result = {}
    for peer, spec in out.items():
        result[peer, "forward"] = Calls(_repeat(spec["f"]))
        backward = _repeat(spec["b"]) if "b" in spec else _backwards(spec["f"], spec["inputs"])
        result[peer, "backward"] = Calls(backward)
    return result


def host_us(calls: list[Callable[[], object]], device: torch.device) -> tuple[float, bool]:
    """Microseconds per call of issuing ``calls`` in a row, and (CUDA) whether the GPU was still
    busy when the host was done (True on the CPU)."""
    if device.type != "cuda":
        start = time.thread_time_ns()
        for call in calls:
            call()
        return (time.thread_time_ns() - start) / len(calls) / 1e3, True
    torch.cuda.synchronize(device)
    torch.cuda._sleep(SLEEP_CYCLES_PER_CALL * len(calls))
    start = time.perf_counter_ns()
    for call in calls:
        call()
    elapsed = time.perf_counter_ns() - start
    busy = not torch.cuda.current_stream(device).query()
    torch.cuda.synchronize(device)
    return elapsed / len(calls) / 1e3, busy


def measure(calls: Calls, device: torch.device, n: int, repeats: int) -> tuple[float, int]:
    """``(us per call, rounds in which the GPU went idle first)``: the median over ``repeats``
    rounds of ``n`` calls on CUDA, the least on the CPU, after a warm-up round."""
    host_us(calls.make(min(n, 3)), device)  # first calls: compilation, caches
    times, idle = [], 0
    for _ in range(repeats):
        us, busy = host_us(calls.make(n), device)
        times.append(us)
        idle += not busy
    return (statistics.median(times) if device.type == "cuda" else min(times)), idle


def run(
    ops: Sequence[str], shape: Shape, device: torch.device, n: int, repeats: int, path: Optional[Path]
) -> list[dict]:
    """Measure every peer of ``ops`` (both passes), print the table, append the records to
    ``path`` if given; return the records (as :func:`records.validate` gives them)."""
    launch = "cuda" if device.type == "cuda" else "no-op"
    context = contextlib.nullcontext() if device.type == "cuda" else no_op_launches()
    env = records.environment(device)
    rows = []
    with context:
        for op in ops:
            for (peer, pass_), calls in cases(op, shape, device).items():
                if peer == "torch" and device.type != "cuda":
                    continue  # its CPU kernels run, ours do not: no comparable figure
                us, idle = measure(calls, device, n, repeats)
                case = dict(op=op, **{"pass": pass_}, **asdict(shape), dtype="bf16", launch=launch)
                rows.append(
                    records.validate(
                        dict(
                            env,
                            benchmark="bench_host_overhead",
                            case=case,
                            metrics={"us_per_call": round(us, 2)},
                            peer=peer,
                        )
                    )
                )
                if idle:
                    print(
                        f"warning: {op} {pass_} {peer}: the GPU went idle before the host was done in {idle} round(s)"
                    )
    print(f"{'op':10s} {'pass':9s} {'peer':12s} {'us/call':>9s} {'vs torch':>9s}   ({env['device']}, launch {launch})")
    for record, ratio in records.ratios(rows, "us_per_call", "torch", best=min):
        c = record["case"]
        shown = f"{ratio:9.2f}" if ratio is not None else f"{'':9s}"
        print(f"{c['op']:10s} {c['pass']:9s} {record['peer']:12s} {record['metrics']['us_per_call']:9.2f} {shown}")
    if path is not None:
        for r in rows:
            records.append(r["benchmark"], r["case"], r["metrics"], r["peer"], path=path, **_given(r))
    return rows


def step_model(shape: StepShape, optimizer: str) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """Issue 29's ``ojas`` mode on ``shape``'s Llama (bf16, on the CPU): ``optimize_model`` with every
    primitive, then ``InBackwardOptimizer(overlap=True)`` stepping ``optimizer`` in buckets of
    ``1 / shape.buckets`` of the gradients. Call inside :func:`no_op_launches` and
    ``use_impl("triton")`` (the kernel paths on CPU tensors)."""
    from benchmarks.bench_in_backward import Config
    from benchmarks.bench_optimize_model import build
    from benchmarks.bench_peers import OJAS
    from ojas_ref import InBackwardOptimizer, optimize_model

    c = Config(shape.hidden, shape.layers, shape.heads, shape.mlp, shape.vocab, shape.batch, shape.seq)
    model = build(c, torch.bfloat16, torch.device("cpu"))
    model.train()
    gradient_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    recipe = replace(OJAS, bucket_cap_mb=gradient_bytes / shape.buckets / 2**20)
    optimize_model(model, recipe)
    cls, kwargs = STEP_OPTIMIZERS[optimizer]
    return model, InBackwardOptimizer.from_recipe(model.parameters(), recipe, cls, **kwargs)


def step_profile(profiler: cProfile.Profile, top: int) -> str:
    """cProfile's Python self time: its share by :data:`PROFILE_GROUPS` (C functions, torch's
    operators among them, apart), then the ``top`` functions."""
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    groups: dict[str, float] = {}
    for (path, _, _), (_, _, self_s, _, _) in stats.stats.items():
        group = "C functions (torch ops, builtins)" if path == "~" else "other Python"
        group = next((part for part in PROFILE_GROUPS if f"/{part}/" in path), group)
        groups[group] = groups.get(group, 0.0) + self_s
    total = sum(groups.values())
    lines = [f"  {name:36s} {t / total:6.1%}" for name, t in sorted(groups.items(), key=lambda kv: -kv[1])]
    stats.sort_stats("tottime").print_stats(top)
    return "\n".join(["Python self time by code (cProfile):", *lines, out.getvalue()])


class TrainingStep:
    """``model`` trained by ``opt`` on ``ids`` one step per call, the main thread's CPU time of its
    phases summed in :attr:`phases` (microseconds) when ``timed``."""

    def __init__(self, model: torch.nn.Module, opt: torch.optim.Optimizer, ids: torch.Tensor) -> None:
        self.model, self.opt, self.ids = model, opt, ids
        self.phases = {"forward_us": 0.0, "backward_us": 0.0, "optimizer_us": 0.0}

    def __call__(self, timed: bool = True) -> None:
        t0 = time.thread_time_ns()
        loss = self.model(input_ids=self.ids, labels=self.ids).loss
        t1 = time.thread_time_ns()
        loss.backward()
        t2 = time.thread_time_ns()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        if timed:
            self.phases["forward_us"] += (t1 - t0) / 1e3
            self.phases["backward_us"] += (t2 - t1) / 1e3
            self.phases["optimizer_us"] += (time.thread_time_ns() - t2) / 1e3


@contextlib.contextmanager
def _cpu_step_settings() -> Iterator[None]:
    """One intra-op thread (what the main thread's time counts is then all the work) and denormals
    flushed (the no-op kernels' outputs hold any bits, whose denormals would slow the CPU's
    arithmetic); restored on exit."""
    threads, denormals = torch.get_num_threads(), torch.set_flush_denormal(True)
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.set_flush_denormal(denormals)


def step(
    optimizer: str, steps: int, repeats: int, path: Optional[Path], profile: int = 0, shape: StepShape = STEP_SHAPE
) -> dict:
    """Time ``--step`` (module docstring), print it, append its record to ``path`` if given; return
    the record (as :func:`records.validate` gives it)."""
    from ojas_ref.functional.dispatch import use_impl

    with _cpu_step_settings(), no_op_launches(), use_impl("triton"):
        torch.manual_seed(0)
        model, opt = step_model(shape, optimizer)
        ids = torch.randint(0, shape.vocab, (shape.batch, shape.seq), generator=torch.Generator().manual_seed(1))
        one = TrainingStep(model, opt, ids)
        for _ in range(3):  # the first updates make the optimizer state
            one(timed=False)
        rounds = [host_us([one] * steps, torch.device("cpu"))[0] for _ in range(repeats)]
        profiler = cProfile.Profile() if profile else None
        if profiler is not None:
            profiler.runcall(lambda: [one(timed=False) for _ in range(profile)])
    env = records.environment("cpu")
    metrics = {"us_per_step": round(min(rounds), 1)}
    metrics |= {k: round(v / (steps * repeats), 1) for k, v in one.phases.items()}
    case = dict(op="step", **{"pass": "train"}, **asdict(shape), dtype="bf16", optimizer=optimizer, launch="no-op")
    record = records.validate(dict(env, benchmark="bench_host_overhead", case=case, metrics=metrics, peer="ojas"))
    tensors = sum(1 for _ in model.parameters())
    print(f"training step, {env['device']}, launches no-ops: {shape}, {tensors} parameter tensors, {optimizer}")
    median = statistics.median(rounds)
    print(f"  {metrics['us_per_step']:.0f} us per step (least of {repeats} rounds of {steps}; median {median:.0f})")
    print("  mean per step: " + ", ".join(f"{k.removesuffix('_us')} {metrics[k]:.0f} us" for k in one.phases))
    if profiler is not None:
        print(step_profile(profiler, 25))
    if path is not None:
        records.append(record["benchmark"], case, metrics, "ojas", path=path, **_given(record))
    return record


def _given(record: dict) -> dict:
    return dict(date=record["date"], commit=record["commit"], device_name=record["device"], versions=record["versions"])


def main(argv: Optional[Sequence[str]] = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the CPU, 16 tokens, few calls (launches are no-ops)")
    parser.add_argument("--ops", default=",".join(OPS), help=f"comma-separated, of {OPS}")
    parser.add_argument("--calls", type=int, default=None, help="calls per round (default 100; --quick 20)")
    parser.add_argument("--repeats", type=int, default=None, help="rounds (default 7; --quick 2)")
    parser.add_argument("--records", type=Path, default=None, help="append the records to this file")
    parser.add_argument("--step", action="store_true", help="a whole training step on the CPU (--ops ignored)")
    parser.add_argument("--optimizer", choices=sorted(STEP_OPTIMIZERS), default="adamw_fused", help="with --step")
    parser.add_argument("--steps", type=int, default=5, help="with --step: steps per round (default 5)")
    parser.add_argument("--profile", type=int, default=0, help="with --step: cProfile this many more steps")
    args = parser.parse_args(argv)
    if args.step:
        repeats = args.repeats or 7
        if args.steps < 1 or repeats < 1 or args.profile < 0:
            parser.error("--steps and --repeats must be >= 1, --profile >= 0")
        return [step(args.optimizer, args.steps, repeats, args.records, args.profile)]
    ops = [o for o in args.ops.split(",") if o]
    unknown = [o for o in ops if o not in OPS]
    if unknown or not ops:
        parser.error(f"--ops: {unknown or args.ops!r} not among {OPS}")
    cuda = torch.cuda.is_available() and not args.quick
    device = torch.device("cuda" if cuda else "cpu")
    n = args.calls or (20 if args.quick else 100)
    repeats = args.repeats or (2 if args.quick else 7)
    if n < 1 or repeats < 1:
        parser.error("--calls and --repeats must be >= 1")
    return run(ops, FULL if cuda else CPU_SHAPE, device, n, repeats, args.records)


if __name__ == "__main__":
    main()
