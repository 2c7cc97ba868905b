"""Two CPU processes on the gloo backend, for tests/optim/test_distributed.py.

:func:`spawn` runs ``fn(rank, world_size, *args)`` in ``world_size`` fresh processes
(torch.multiprocessing, the ``spawn`` start method, a process group over
``tcp://127.0.0.1`` on a free port) and returns each rank's result.  The training
runs below are what the ranks execute, and :func:`reference` is the single-process
standard loop on the concatenated batch that they are compared with.

Float64 throughout, so that the only difference between a distributed run and the
single-process one is the order of the floating-point sums (see the tolerance in
tests/optim/test_distributed.py).
"""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
from typing import Any, Callable, Optional

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn

import ojas_ref
from ojas_ref.optim.in_backward import InBackwardOptimizer
from ojas_ref.nn.reversible import AdditiveCoupling, ReversibleSequence

WORLD, ROWS, STEPS = 2, 4, 3  # ranks, rows per rank and micro-batch, optimizer steps
F64 = torch.float64

# name -> (optimizer_class, its kwargs, max_grad_norm, micro-batches per step)
CONFIGS: dict[str, tuple[type, dict, Optional[float], int]] = {
    "sgd": (torch.optim.SGD, dict(lr=0.1, momentum=0.9), None, 1),
    "adamw": (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1), None, 1),
    "adamw_clip": (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1), 0.05, 1),
    "adamw_accumulate": (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1), None, 2),
    "sgd_accumulate_clip": (torch.optim.SGD, dict(lr=0.1, momentum=0.9), 0.05, 2),
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank: int, world_size: int, port: int, out_dir: str, fn: Callable, args: tuple) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    try:
        result = fn(rank, world_size, *args)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    torch.save(result, os.path.join(out_dir, f"{rank}.pt"))


def spawn(fn: Callable, *args: Any, world_size: int = WORLD, attempts: int = 3) -> list[Any]:
    """``fn(rank, world_size, *args)`` on each rank; the ranks' return values. The free port
    is looked up before the processes bind it, so another process may take it in between:
    that failure (and only that one) is retried on a new port."""
    for attempt in range(attempts):
        with tempfile.TemporaryDirectory() as out_dir:
            try:
                mp.spawn(_entry, (world_size, _free_port(), out_dir, fn, args), nprocs=world_size, join=True)
                return [torch.load(os.path.join(out_dir, f"{r}.pt")) for r in range(world_size)]
            except mp.ProcessRaisedException as e:
                if "address already in use" not in str(e).lower() or attempt == attempts - 1:
                    raise


# --------------------------------------------------------------------------
# Model, data, the standard loop
# --------------------------------------------------------------------------


def make_model(reversible: bool = False) -> nn.Sequential:
    """An MLP 8 -> 16 -> 16 -> 4; ``reversible``: its middle is a ReversibleSequence of two
    AdditiveCoupling blocks (f, g = Linear(8, 8) + tanh) on the 16-wide stream."""
    torch.manual_seed(0)
    if reversible:

        def half() -> nn.Module:
            return nn.Sequential(nn.Linear(8, 8), nn.Tanh())

        middle = ReversibleSequence([AdditiveCoupling(half(), half()) for _ in range(2)])
        return nn.Sequential(nn.Linear(8, 16), middle, nn.Linear(16, 4)).to(F64)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 4)).to(F64)


def global_batch(step: int, micro: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch of all ranks, WORLD * ROWS rows; rank r takes rows r*ROWS:(r+1)*ROWS."""
    gen = torch.Generator().manual_seed(100 * step + micro)
    return (
        torch.randn(WORLD * ROWS, 8, generator=gen, dtype=F64),
        torch.randn(WORLD * ROWS, 4, generator=gen, dtype=F64),
    )


def local_batch(step: int, micro: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = global_batch(step, micro)
    return x[rank * ROWS : (rank + 1) * ROWS], y[rank * ROWS : (rank + 1) * ROWS]


def reference(name: str, reversible: bool = False) -> tuple[list[torch.Tensor], list[float]]:
    """The single-process standard loop on the concatenated batch: parameters after STEPS
    steps, and the gradient norms that clip_grad_norm_ saw (to check that clipping acts)."""
    cls, kw, clip, micro_batches = CONFIGS[name]
    model = make_model(reversible)
    opt = cls(model.parameters(), **kw)
    norms = []
    for step in range(STEPS):
        for micro in range(micro_batches):
            (F.mse_loss(model(global_batch(step, micro)[0]), global_batch(step, micro)[1]) / micro_batches).backward()
        if clip is not None:
            norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), clip)))
        opt.step()
        opt.zero_grad()
    return [p.detach().clone() for p in model.parameters()], norms


def _train(
    wrapped: nn.Module,
    opt: torch.optim.Optimizer,
    rank: int,
    micro_batches: int,
    no_sync: Callable[[bool], Any],
    clip: Optional[float],
) -> None:
    """The data-parallel loop: micro-batches 1..k-1 without gradient synchronisation
    (``no_sync(True)`` is entered around them), the k-th synchronised; a torch.optim
    optimizer is stepped after clip_grad_norm_."""
    for step in range(STEPS):
        for micro in range(micro_batches):
            x, y = local_batch(step, micro, rank)
            with no_sync(micro < micro_batches - 1):
                loss = F.mse_loss(wrapped(x), y) / micro_batches
                if isinstance(opt, InBackwardOptimizer):
                    opt.backward(loss)
                else:
                    loss.backward()
        if clip is not None and not isinstance(opt, InBackwardOptimizer):
            torch.nn.utils.clip_grad_norm_(wrapped.parameters(), clip)
        opt.step()
        opt.zero_grad()


def _error_of(run: Callable[[], Any]) -> str:
    """The message of the RuntimeError that ``run`` raises ("" if none)."""
    try:
        run()
    except RuntimeError as e:
        return str(e)
    return ""


class TinyLM(nn.Module):
    """Embedding, one causal ojas_ref.attention layer (2 heads of 4), an ojas_ref.linear_cross_entropy head."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.qkv, self.head = nn.Embedding(20, 8), nn.Linear(8, 24), nn.Linear(8, 20)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        h = self.emb(tokens)
        q, k, v = self.qkv(h).view(*h.shape[:2], 3, 2, 4).permute(2, 0, 3, 1, 4)
        h = h + ojas_ref.attention(q, k, v, is_causal=True).transpose(1, 2).reshape(h.shape)
        return ojas_ref.linear_cross_entropy(h, self.head.weight, targets, linear_bias=self.head.bias)


def make_lm() -> TinyLM:
    torch.manual_seed(0)
    return TinyLM().to(F64)


def lm_batch(step: int, rank: Optional[int] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens and next-token targets of all ranks (WORLD * 2 sequences of 6), or of ``rank``."""
    tokens = torch.randint(20, (WORLD * 2, 7), generator=torch.Generator().manual_seed(step))
    if rank is not None:
        tokens = tokens[2 * rank : 2 * (rank + 1)]
    return tokens[:, :-1], tokens[:, 1:]


def _lm_optimizer(model: nn.Module, in_backward: bool) -> torch.optim.Optimizer:
    kw = dict(lr=0.1, momentum=0.9)
    return (
        InBackwardOptimizer(model.parameters(), torch.optim.SGD, **kw)
        if in_backward
        else torch.optim.SGD(model.parameters(), **kw)
    )


def lm_reference() -> list[torch.Tensor]:
    """TinyLM, SGD with momentum, STEPS steps of the standard loop on the concatenated batches."""
    model = make_lm()
    opt = _lm_optimizer(model, in_backward=False)
    for step in range(STEPS):
        model(*lm_batch(step)).backward()
        opt.step()
        opt.zero_grad()
    return [p.detach().clone() for p in model.parameters()]


def _lm_run(rank: int, engine: str, in_backward: bool) -> list[torch.Tensor]:
    """TinyLM under DDP or FSDP2 (fully_shard on the root), STEPS steps on rank's sequences."""
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = make_lm()
    if engine == "fsdp":
        fully_shard(model)
    opt = _lm_optimizer(model, in_backward)
    wrapped = DDP(model) if engine == "ddp" else model
    for step in range(STEPS):
        wrapped(*lm_batch(step, rank)).backward()
        opt.step()
        opt.zero_grad()
    return [(p.full_tensor() if engine == "fsdp" else p).detach().clone() for p in model.parameters()]


# --------------------------------------------------------------------------
# DistributedDataParallel
# --------------------------------------------------------------------------


def _ddp_run(
    rank: int,
    name: str,
    *,
    in_backward: bool = True,
    bucket_view: bool = False,
    accumulation_steps: int = 1,
    find_unused: bool = False,
    static_graph: bool = False,
    reversible: bool = False,
) -> list[torch.Tensor]:
    from torch.nn.parallel import DistributedDataParallel as DDP

    cls, kw, clip, micro_batches = CONFIGS[name]
    model = make_model(reversible)
    if find_unused:  # a layer that only rank 1 uses, and one that no rank uses
        model.extend([nn.Linear(4, 4).to(F64), nn.Linear(4, 4).to(F64)])
        model.forward = (lambda x: model[5](model[:5](x))) if rank == 1 else model[:5].forward
    opt = (
        InBackwardOptimizer(model.parameters(), cls, max_grad_norm=clip, accumulation_steps=accumulation_steps, **kw)
        if in_backward
        else cls(model.parameters(), **kw)
    )
    # 1 KB buckets: the 3.8 KB of gradients go through several all-reduces
    ddp = DDP(
        model,
        bucket_cap_mb=0.001,
        gradient_as_bucket_view=bucket_view,
        find_unused_parameters=find_unused,
        static_graph=static_graph,
    )
    _train(ddp, opt, rank, micro_batches, lambda off: ddp.no_sync() if off else contextlib.nullcontext(), clip)
    return [p.detach().clone() for p in model.parameters()]


def ddp_worker(rank: int, world_size: int) -> dict[str, Any]:
    """Each config with InBackwardOptimizer (key: its name) and with torch.optim (name + "/torch");
    DDP options, a reversible model; the error for accumulation_steps > 1, the warning for a
    local update; whether the DDP-finding hook was removed after the first run."""
    from ojas_ref.optim import in_backward as optimizer_in_backward

    out: dict[str, Any] = {}
    for name in CONFIGS:
        out[name] = _ddp_run(rank, name)
        if name == "sgd":  # the global forward pre-hook that found the DDP model is gone
            out["watch_removed"] = not optimizer_in_backward._WATCH_HANDLE
        out[name + "/torch"] = _ddp_run(rank, name, in_backward=False)
    out["sgd/bucket_view"] = _ddp_run(rank, "sgd", bucket_view=True)
    out["sgd/static_graph"] = _ddp_run(rank, "sgd", static_graph=True)
    out["adamw_clip/reversible"] = _ddp_run(rank, "adamw_clip", reversible=True)
    out["lm"], out["lm/torch"] = _lm_run(rank, "ddp", True), _lm_run(rank, "ddp", False)
    for impl in (True, False):
        out["adamw/find_unused" + ("" if impl else "/torch")] = _ddp_run(
            rank, "adamw", in_backward=impl, find_unused=True
        )
    out["error/accumulation_steps"] = _error_of(lambda: _ddp_run(rank, "adamw_accumulate", accumulation_steps=2))
    out["warning/local"] = _local_update_warnings()
    out["error/mixed_precision"] = _error_of(_ddp_mixed_precision)
    return out


def _ddp_mixed_precision() -> None:
    """One forward of a DDP model with mixed_precision (not supported: raises)."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.nn.parallel.distributed import _MixedPrecision

    model = make_model().float()
    opt = InBackwardOptimizer(model.parameters(), torch.optim.SGD, lr=0.1)
    DDP(model, mixed_precision=_MixedPrecision(param_dtype=torch.bfloat16))(torch.zeros(1, 8))
    del opt  # alive until the forward (the hooks hold it weakly)


def _local_update_warnings() -> list[str]:
    """The warnings of one update of a model that no DDP wraps, in a job of several ranks."""
    import warnings

    model = make_model()
    opt = InBackwardOptimizer(model.parameters(), torch.optim.SGD, lr=0.1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model(torch.zeros(1, 8, dtype=F64)).sum().backward()
    opt.step()
    return [str(w.message) for w in caught]


# --------------------------------------------------------------------------
# FSDP2 (fully_shard)
# --------------------------------------------------------------------------


def _fsdp_run(rank: int, name: str, *, accumulation_steps: int = 1, reversible: bool = False) -> list[torch.Tensor]:
    """FSDP2 on each Linear and on the root (a ReversibleSequence is sharded as one unit, by the
    root: its blocks' forwards are not called, so they cannot be FSDP modules of their own)."""
    from torch.distributed.fsdp import fully_shard

    cls, kw, clip, micro_batches = CONFIGS[name]
    model = make_model(reversible)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    opt = InBackwardOptimizer(model.parameters(), cls, max_grad_norm=clip, accumulation_steps=accumulation_steps, **kw)
    _train(model, opt, rank, micro_batches, lambda off: _fsdp_sync(model, not off), clip)
    return [p.detach().full_tensor() for p in model.parameters()]


def _shard_reversible_blocks() -> None:
    """fully_shard on the blocks of a ReversibleSequence, whose forwards the stack never calls."""
    from torch.distributed.fsdp import fully_shard

    model = make_model(reversible=True)
    for block in model[1].blocks:
        fully_shard(block)
    fully_shard(model)
    model(torch.zeros(1, 8, dtype=F64))


@contextlib.contextmanager
def _fsdp_sync(model: nn.Module, sync: bool):
    model.set_requires_gradient_sync(sync)
    yield


def fsdp_worker(rank: int, world_size: int) -> dict[str, Any]:
    """Each config with InBackwardOptimizer; the error for accumulation_steps > 1."""
    out: dict[str, Any] = {name: _fsdp_run(rank, name) for name in CONFIGS}
    out["adamw_clip/reversible"] = _fsdp_run(rank, "adamw_clip", reversible=True)
    out["lm"] = _lm_run(rank, "fsdp", True)
    out["error/reversible_blocks_sharded"] = _error_of(_shard_reversible_blocks)
    out["error/accumulation_steps"] = _error_of(lambda: _fsdp_run(rank, "adamw_accumulate", accumulation_steps=2))
    return out
