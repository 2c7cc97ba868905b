"""Host time per call of ojas's RMSNorm, SwiGLU, RoPE and attention, forward and backward, beside
the plain torch op of the same role (issue 29: the bf16 step of the 1.06B Llama is host-bound).

    python benchmarks/bench_host_overhead.py [--calls 100] [--repeats 7] [--ops rms_norm,attention]
                                             [--records benchmarks/records.jsonl]
    python benchmarks/bench_host_overhead.py --quick     # the CPU, the launches replaced by no-ops

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
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from dataclasses import asdict, dataclass
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


def _ops_registered() -> None:
    """Import the modules that register the ``ojas::`` ops."""
    import ojas_kernels.attention  # noqa: F401
    import ojas_ref.functional.rms_norm  # noqa: F401
    import ojas_ref.functional.rope  # noqa: F401
    import ojas_ref.functional.swiglu  # noqa: F401


@contextlib.contextmanager
def no_op_launches() -> Iterator[None]:
    """Within the block the kernels of rms_norm, swiglu, rope and attention launch nothing: Triton's
    own launch returns a stand-in compiled kernel whose launcher does nothing, which
    ``ojas_kernels.launch`` then caches and calls as it calls a real one (its cached path is
    switched on, and the CUDA device and stream it asks torch for are stand-ins), and
    ``dispatch`` runs the kernels of CPU tensors as under Triton's interpreter.  Everything is
    restored on exit, the launch caches of these kernels emptied.  For timing the host code on
    the CPU; the outputs are uninitialised."""
    from triton.runtime.jit import KernelInterface

    from ojas_kernels import attention_backward, attention_forward, launch, rms_norm, rope, swiglu
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
        for m in (rms_norm, swiglu, rope, attention_forward, attention_backward)
        for v in vars(m).values()
        if isinstance(v, KernelInterface)
    ]
    stand_ins = {"_cuda_getDevice": lambda: 0, "_cuda_getCurrentRawStream": lambda device: 0}
    saved_c = {name: getattr(torch._C, name, None) for name in stand_ins}
    saved = (launch._SUPPORTED, dispatch._interpret)

    def empty_caches() -> None:
        for k in kernels:
            launch.fast(k)._cache.clear()
            launch.fast(k)._exact.clear()

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


def _given(record: dict) -> dict:
    return dict(date=record["date"], commit=record["commit"], device_name=record["device"], versions=record["versions"])


def main(argv: Optional[Sequence[str]] = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the CPU, 16 tokens, few calls (launches are no-ops)")
    parser.add_argument("--ops", default=",".join(OPS), help=f"comma-separated, of {OPS}")
    parser.add_argument("--calls", type=int, default=None, help="calls per round (default 100; --quick 20)")
    parser.add_argument("--repeats", type=int, default=None, help="rounds (default 7; --quick 2)")
    parser.add_argument("--records", type=Path, default=None, help="append the records to this file")
    args = parser.parse_args(argv)
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
