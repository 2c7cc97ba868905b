"""Benchmark: the memory table of the project's techniques on the 1.06B Llama decoder.

    python benchmarks/bench_memory.py [--quick] [--out FILE] [--dtypes fp32 bf16]
        [--optimizers sgd adamw] [--modes standard+ckpt ojas+ckpt +offload +offload+head-update+split ...]
        [--bucket-mb MB] [--steps N] [--warmup N]
    python benchmarks/bench_memory.py --largest [--largest-presets] [--max-layers N] ...
    python benchmarks/bench_memory.py --preset llama-70b --layers 58 --dtypes bf16 --optimizers sgd --modes ojas+ckpt

Its H200 records: benchmarks/records.jsonl, benchmark ``bench_memory`` (2026-12-01, commits 9f59f4c,
5b96e1e and 5f7cdf8; docs/benchmarks.md).

The model is benchmarks/bench_optimize_model.py's (built by its ``build``, no download):
``LlamaForCausalLM`` with hidden 2048, 18 layers, 16 heads, intermediate 5632, vocabulary
32000, untied head (1.06B parameters), batch 1 x sequence 2048, weights and optimizer state
in the run's dtype; SGD (lr 1e-3) and AdamW (lr 1e-4, weight decay 0.1). Each row is a
:class:`~ojas_ref.MemoryRecipe` (:func:`mode_recipe`) applied by bench_optimize_model's ``setup``
(``optimize_model(model, recipe)``, ``InBackwardOptimizer.from_recipe``). Rows, per dtype (fp32,
bf16) and optimizer:

* ``standard+ckpt`` (the baseline): ``MemoryRecipe.plain(checkpoint=True)``, the torch optimizer
  (``loss.backward(); opt.step(); opt.zero_grad()``), Hugging Face's
  ``gradient_checkpointing_enable(use_reentrant=False)``.
* ``ojas+ckpt``: ``MemoryRecipe(checkpoint=True, in_backward=True)``: every primitive of
  ``optimize_model`` (ojas attention, linear cross-entropy, fused RMSNorm / SwiGLU / RoPE) and
  ``InBackwardOptimizer`` (64 MiB buckets).
* ``+offload``: ojas+ckpt with ``checkpoint="offload"`` (each layer's input in pinned host
  memory between forward and backward). Host GiB: the bytes offloaded per step.
* ``+sparse-embedding``: ojas+ckpt with ``sparse_embedding=True`` (no dense [V, D]
  embedding gradient). SGD only (AdamW changes rows without gradient) and fp32 only
  (InBackwardOptimizer's sparse path is exact for float32 / float64 row sums only); skipped
  with the reason otherwise.
* ``+host-state``: ojas+ckpt with ``InBackwardOptimizer(state_device="cpu")`` (the optimizer
  state in pinned host memory, streamed per bucket, ``state_slice_mb=128``: a parameter whose
  state exceeds 128 MiB updated in slices). AdamW only (SGD without momentum has no state). Host
  GiB: the state's bytes. Rows without ``state_slice_mb`` in their techniques (recorded before
  it existed) and rows with None are whole parameters.
* ``+head-update``: ojas+ckpt with ``InBackwardOptimizer(head_weight=model.lm_head.weight)``:
  the head updated by plain SGD chunk by chunk inside the loss's backward, no [V, D] gradient
  (Ojas.InBackward.ChunkedHead.chunked_head_dh_first_code_eq_standard). SGD only (AdamW
  keeps the dense path; skipped with the reason). On CUDA the loss kernel then runs its 4-product
  schedule (grad_input in the forward, each vocabulary slab's gradient in the backward, then its
  rows' update) instead of the default 3 products: its rounding differs from ojas+ckpt's, so the
  losses are close, not bitwise; on the CPU both run the PyTorch reference, bit for bit.
* ``+split``: ojas+ckpt with ``checkpoint_split=True``: each decoder layer checkpointed as two
  segments, (input norm + self-attention) and (post-attention norm + MLP), so the MLP half's
  backward runs without the attention half's recomputed activations; one layer input more per
  layer kept (on the host when offloaded). Exact (the losses of ojas+ckpt bit for bit on the CPU).
* ``all``: every technique above that applies to the dtype / optimizer together.
* a concatenation of the techniques' suffixes, e.g. ``+offload+head-update+split``: those
  together (skipped with the reason when one of them does not apply).
* ``reversible``: a separate architecture, ``ReversibleDecoder`` of the same shape (additive
  couplings, activations reconstructed in backward, no checkpointing) with
  ``InBackwardOptimizer`` (``MemoryRecipe.plain(in_backward=True)``); its loss is not comparable with the Llama rows' (other model).

Per dtype and optimizer, in one process, as bench_optimize_model does (its ``measure_peak``,
``allocate_workspaces``, ``time_interleaved``): each mode built in turn (the earlier ones
kept, idle), warmed up, and its peak is ``torch.cuda.max_memory_allocated`` over one step
less the earlier modes' memory; then all modes timed together, rotated. Reported: peak GiB,
host GiB (where known), tokens/s from the median step, its ratio to standard+ckpt of the
same dtype / optimizer, the last loss. The modes that are exact reformulations of ojas+ckpt
(+offload, +sparse-embedding, +host-state, +split, their concatenations and ``all``) give its
losses bit for bit on the CPU (tests/bench/test_bench_memory.py); on CUDA the sparse embedding's row
sums are in another order than the dense backward's. ``--bucket-mb`` (default 64) is every
InBackwardOptimizer's ``bucket_cap_mb``; each row records its recipe (``recipe``, a dict) and,
under the names the earlier rows have (``techniques``: ojas_ref/tools/records.py reads them), the
techniques on top of ojas+ckpt, so that the planner plans what ran.

Issue 14's Done-when figures to compare with (1.06B, batch 1 x 2048, peak of one step):
fp32 SGD <= 4.3 GiB; fp32 AdamW <= 12.6 GiB with the state on the GPU, <= 4.6 GiB with the
state on the host; bf16 SGD <= 2.3 GiB; bf16 AdamW <= 6.4 GiB; each at >= 0.9x the tokens/s
of standard+ckpt.

Every row also carries the planner's prediction (``predicted_peak``, ``predicted_host``:
:func:`ojas_ref.memory.plan` of the row's recipe; None for the sparse embedding and the reversible
decoder, which it does not model).

``--preset NAME [--layers N]``: each requested mode at a plan.py preset's shape (with N layers:
``--preset llama-70b --layers 23`` is a 20.2B model, ``--layers 58`` a 50.2B one), built alone in
its dtype directly, its peak over one step after ``--warmup``, then ``--steps`` timed steps, and
the planner's prediction beside it; an out-of-memory is recorded as a row.

``--largest``: for each (dtype, optimizer, mode) requested, the largest model that trains one
step (``--warmup`` + 1 steps) without running out of memory, searched by doubling the number
of layers of the 1.06B shape from 18 (halving when 18 does not fit) and then bisecting
between the largest fit and the smallest failure (``--max-layers`` caps the search), or with
``--largest-presets`` over ojas_ref/tools/plan.py's PRESETS in order of size; every try is
recorded as measured (fits, peak, parameters).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Optional

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.bench_optimize_model import (  # noqa: E402
    Runner,
    allocate_workspaces,
    build,
    environment,
    measure_and_time,
    measure_peak,
    release,
    setup,
    time_interleaved,
    timing,
)
from benchmarks.bench_in_backward import (  # noqa: E402
    DTYPES,
    OPTIMIZERS,
    QUICK,
    Config,
    add_common_arguments,
    gib,
)
from ojas_ref import InBackwardOptimizer, MemoryRecipe  # noqa: E402
from ojas_ref.memory import PRESETS, STATE_SLICE_MB, Model, Setting, plan, with_layers  # noqa: E402

#: the techniques added to ojas+ckpt, each a mode of its own; ``all`` and a concatenation combine them
TECHNIQUES = ("+offload", "+sparse-embedding", "+host-state", "+head-update", "+split")
MODES = ("standard+ckpt", "ojas+ckpt", *TECHNIQUES, "all", "reversible")
#: the modes whose steps are ojas+ckpt's, reformulated exactly (equal losses on the CPU)
EXACT = (*TECHNIQUES, "all")
BASELINE = "standard+ckpt"


def mode_techniques(mode: str) -> tuple[str, ...]:
    """The techniques of ``mode``: none for standard+ckpt, ojas+ckpt and reversible, all of them
    for ``all``, else the suffixes it concatenates (``ValueError`` for another name)."""
    if mode in (BASELINE, "ojas+ckpt", "reversible"):
        return ()
    if mode == "all":
        return TECHNIQUES
    parts = tuple(f"+{p}" for p in mode.split("+")[1:])
    if not mode.startswith("+") or not parts or any(p not in TECHNIQUES for p in parts) or len(set(parts)) < len(parts):
        raise ValueError(f"mode must be one of {MODES} or a concatenation of {TECHNIQUES}, got {mode!r}")
    return parts


def _mode(text: str) -> str:
    """``--modes``: a mode name, checked by :func:`mode_techniques`."""
    try:
        mode_techniques(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def skip_reason(mode: str, dtype_name: str, opt_name: str) -> Optional[str]:
    """Why ``mode`` does not apply to this dtype / optimizer (for a concatenation, the first of its
    techniques that does not), or None; ``all`` applies what applies."""
    if mode == "all":
        return None
    return next((r for t in mode_techniques(mode) if (r := _technique_skip_reason(t, dtype_name, opt_name))), None)


def _technique_skip_reason(mode: str, dtype_name: str, opt_name: str) -> Optional[str]:
    """Why one technique does not apply to this dtype / optimizer, or None."""
    if mode == "+sparse-embedding":
        if opt_name != "sgd":
            return (
                f"sparse embedding needs plain SGD: {opt_name} changes rows that got no gradient "
                "(InBackwardOptimizer raises)"
            )
        if dtype_name != "fp32":
            return (
                f"sparse embedding in {dtype_name}: InBackwardOptimizer's sparse path is exact for float32 / "
                "float64 row sums only (it raises)"
            )
    if mode == "+host-state" and opt_name == "sgd":
        return "host state: SGD without momentum has no optimizer state to move to the host"
    if mode == "+head-update" and opt_name != "sgd":
        return (
            f"head update inside the loss: plain SGD only ({opt_name} keeps the dense path; "
            "InBackwardOptimizer(head_weight=...) raises)"
        )
    return None


def mode_recipe(mode: str, dtype_name: str, opt_name: str, bucket_mb: float = 64.0) -> MemoryRecipe:
    """The memory recipe of ``mode``: ``MemoryRecipe.plain(checkpoint=True)`` for standard+ckpt,
    ``MemoryRecipe.plain(in_backward=True)`` for the reversible decoder (its own architecture),
    else ojas+ckpt's ``MemoryRecipe(checkpoint=True, in_backward=True)`` with those of the mode's
    techniques that apply to this dtype / optimizer: ``checkpoint="offload"``,
    ``checkpoint_split``, ``sparse_embedding``, ``state_device="cpu"`` (with ``state_slice_mb``
    plan.py's ``STATE_SLICE_MB``, 128, so that the head's and the embedding's state are never
    whole on the device), ``head_update``; every in-backward one with ``bucket_cap_mb``."""
    if mode == BASELINE:
        return MemoryRecipe.plain(checkpoint=True)
    if mode == "reversible":
        return MemoryRecipe.plain(in_backward=True, bucket_cap_mb=bucket_mb)
    on = {m for m in mode_techniques(mode) if _technique_skip_reason(m, dtype_name, opt_name) is None}
    host = "+host-state" in on
    return MemoryRecipe(
        checkpoint="offload" if "+offload" in on else True,
        checkpoint_split="+split" in on,
        sparse_embedding="+sparse-embedding" in on,
        in_backward=True,
        bucket_cap_mb=bucket_mb,
        state_device="cpu" if host else None,
        state_slice_mb=STATE_SLICE_MB if host else None,
        head_update="+head-update" in on,
    )


def techniques(recipe: MemoryRecipe) -> dict:
    """An ojas row's ``techniques``: its recipe's fields under the names the earlier rows recorded
    them with (checkpoint, split, sparse_embedding, state_device, its state_slice_mb, head_update,
    bucket_cap_mb), which ojas_ref/tools/records.py reads."""
    t = dict(
        checkpoint=recipe.checkpoint,
        split=recipe.checkpoint_split,
        sparse_embedding=recipe.sparse_embedding,
        state_device=recipe.state_device,
        head_update=recipe.head_update,
        bucket_cap_mb=recipe.bucket_cap_mb,
    )
    if recipe.state_device is not None:
        t["state_slice_mb"] = recipe.state_slice_mb
    return t


def build_model(c: Config, dtype: torch.dtype, device: torch.device, preset=None):
    """bench_optimize_model's ``build`` for a :class:`Config`; for a plan.py preset (kv heads, tied head,
    head_dim), the same LlamaConfig with the preset's fields."""
    if preset is None:
        return build(c, dtype, device)
    import transformers

    transformers.logging.set_verbosity_error()
    config = transformers.LlamaConfig(
        vocab_size=preset.vocab,
        hidden_size=preset.hidden,
        intermediate_size=preset.intermediate,
        num_hidden_layers=preset.layers,
        num_attention_heads=preset.heads,
        num_key_value_heads=preset.kv_heads,
        head_dim=preset.head_dim,
        max_position_embeddings=c.seq,
        tie_word_embeddings=preset.tied,
        attention_dropout=0.0,
    )
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # built in its dtype: a 50B model has no room for a float32 copy
    try:
        with torch.device(device):
            model = transformers.LlamaForCausalLM(config).to(dtype)
    finally:
        torch.set_default_dtype(default)
    model.config.use_cache = False
    return model


def build_reversible(c: Config, dtype: torch.dtype, device: torch.device, preset=None):
    from ojas_ref.nn.reversible_decoder import ReversibleDecoder, ReversibleDecoderConfig

    shape = (
        dict(
            vocab=c.vocab,
            hidden=c.hidden,
            layers=c.layers,
            heads=c.heads,
            kv_heads=c.heads,
            intermediate=c.intermediate,
        )
        if preset is None
        else dict(
            vocab=preset.vocab,
            hidden=preset.hidden,
            layers=preset.layers,
            heads=preset.heads,
            kv_heads=preset.kv_heads,
            intermediate=preset.intermediate,
            tie_embeddings=preset.tied,
        )
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = ReversibleDecoder(ReversibleDecoderConfig(max_seq=c.seq, **shape)).to(dtype)
    return model


class MemoryRunner(Runner):
    """bench_optimize_model's :class:`Runner` (its step, batches and fields, measured by its
    ``measure_peak`` / ``time_interleaved``) for this benchmark's modes."""

    def __init__(
        self,
        c: Config,
        dtype: torch.dtype,
        dtype_name: str,
        opt_name: str,
        mode: str,
        device: torch.device,
        bucket_mb: float,
        preset=None,
    ) -> None:
        self.mode, self.c = mode, c
        self.others = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
        self.recipe = mode_recipe(mode, dtype_name, opt_name, bucket_mb)
        self.techniques = None if mode in (BASELINE, "reversible") else techniques(self.recipe)
        if mode == "reversible":
            self.model = build_reversible(c, dtype, device, preset)
            self.model.train()
            opt_class, kwargs = OPTIMIZERS[opt_name]
            self.opt = InBackwardOptimizer.from_recipe(self.model.parameters(), self.recipe, opt_class, **kwargs)
            self.report = None
        else:
            self.model = build_model(c, dtype, device, preset)
            self.model.train()
            self.opt, self.report = setup(self.model, self.recipe, opt_name)
        g = torch.Generator(device="cpu").manual_seed(1)
        self.batches = [torch.randint(0, c.vocab, (c.batch, c.seq), generator=g).to(device) for _ in range(4)]
        self.times: list[float] = []
        self.losses: list[float] = []
        self.peak: int | None = None
        self.n_steps = 0

    def step(self, i: int) -> float:
        self.n_steps += 1
        if self.mode != "reversible":
            return super().step(i)
        ids = self.batches[i % len(self.batches)]
        loss = self.model(ids, labels=ids)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss.item()

    def host_bytes(self) -> Optional[int]:
        """Bytes held on the host: the layer inputs offloaded per step, plus the optimizer state when
        ``state_device="cpu"``; None when the mode keeps nothing there."""
        if self.techniques is None:
            return None
        total, known = 0, False
        if self.techniques["checkpoint"] == "offload":
            from ojas_ref.nn.offload import OffloadedCheckpoint

            layer_funcs = (m.__dict__.get("_gradient_checkpointing_func") for m in self.model.modules())
            funcs = {
                id(f): f
                for g in layer_funcs  # a split layer's function holds its segments' one
                if isinstance(f := getattr(g, "segment_checkpoint", g), OffloadedCheckpoint)
            }
            if funcs and self.n_steps:
                known = True
                total += sum(f.stats.offloaded_bytes for f in funcs.values()) // self.n_steps
        if self.techniques["state_device"] is not None:
            known = True
            total += sum(
                t.numel() * t.element_size()
                for s in self.opt.state.values()
                for t in s.values()
                if isinstance(t, torch.Tensor) and t.device.type == "cpu"
            )
        return total if known else None


def predicted(c: Config, dtype_name: str, opt_name: str, mode: str, preset=None, bucket_mb: float = 64.0) -> dict:
    """The planner's peak and host bytes for this row's recipe (``predicted_peak``,
    ``predicted_host``), both None where it does not model the row (the sparse embedding, the
    reversible decoder)."""
    recipe = mode_recipe(mode, dtype_name, opt_name, bucket_mb)
    if mode == "reversible" or recipe.sparse_embedding:
        return dict(predicted_peak=None, predicted_host=None)
    model = preset if preset is not None else Model(c.hidden, c.layers, c.heads, c.heads, c.intermediate, c.vocab)
    result = plan(model, Setting(recipe, DTYPES[dtype_name], opt_name, c.batch, c.seq))
    return dict(predicted_peak=result.peak, predicted_host=result.host_bytes if result.host else None)


def run_modes(
    c: Config,
    dtype_name: str,
    opt_name: str,
    modes: list[str],
    *,
    device: torch.device,
    warmup: int,
    steps: int,
    bucket_mb: float,
    kept: int,
) -> tuple[list[dict], list[dict]]:
    """Every applicable mode of one dtype / optimizer in one process (bench_optimize_model's
    ``measure_and_time``); returns (rows, skipped)."""
    dtype = DTYPES[dtype_name]
    skipped = []

    def applicable():
        for mode in modes:
            reason = skip_reason(mode, dtype_name, opt_name)
            if reason is None:
                yield MemoryRunner(c, dtype, dtype_name, opt_name, mode, device, bucket_mb)
                continue
            print(f"skip {dtype_name} {opt_name} {mode}: {reason}", flush=True)
            skipped.append(dict(dtype=dtype_name, optimizer=opt_name, mode=mode, skipped=reason))

    runners = measure_and_time(applicable(), device, warmup, steps, kept)
    rows = [
        dict(
            dtype=dtype_name,
            optimizer=opt_name,
            mode=r.mode,
            **timing(r, c),
            host=r.host_bytes(),
            **predicted(c, dtype_name, opt_name, r.mode, bucket_mb=bucket_mb),
            losses=r.losses,
            recipe=dataclasses.asdict(r.recipe),
            techniques=r.techniques,
            left_alone=None if r.report is None else [s.reason for s in r.report.left_alone],
        )
        for r in runners
    ]
    base = next((row for row in rows if row["mode"] == BASELINE), None)
    for row in rows:
        row["vs_baseline"] = None if base is None else row["tokens_per_s"] / base["tokens_per_s"]
    del runners
    release(device)
    return rows, skipped


def _is_oom(e: BaseException) -> bool:
    return isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in str(e).lower()


def try_one(
    c: Config,
    dtype_name: str,
    opt_name: str,
    mode: str,
    device: torch.device,
    warmup: int,
    bucket_mb: float,
    kept: int,
    preset=None,
    steps: int = 1,
) -> dict:
    """Build the model alone, train ``warmup`` steps, measure the peak of one more (CUDA), then
    time ``steps`` more (each synchronised); or the OOM."""
    r = None
    try:
        r = MemoryRunner(c, DTYPES[dtype_name], dtype_name, opt_name, mode, device, bucket_mb, preset)
        params = sum(p.numel() for p in r.model.parameters())
        measure_peak(r, device, warmup, kept)
        time_interleaved([r], device, steps)
        out = dict(fits=True, params=params, host=r.host_bytes(), **timing(r, c), losses=r.losses)
    except (RuntimeError, torch.cuda.OutOfMemoryError) as e:
        if not _is_oom(e):
            raise
        out = dict(fits=False, error=str(e).splitlines()[0][:200])
    del r
    release(device)
    return out


def largest(
    c: Config,
    dtype_name: str,
    opt_name: str,
    mode: str,
    *,
    device: torch.device,
    warmup: int,
    bucket_mb: float,
    kept: int,
    max_layers: int,
    presets: bool,
) -> dict:
    """The largest model of ``mode`` that trains one step: layers doubled then bisected, or presets."""
    tries = []
    if presets:
        best = None
        for name, p in sorted(PRESETS.items(), key=lambda kv: kv[1].hidden * kv[1].layers * kv[1].intermediate):
            res = try_one(c, dtype_name, opt_name, mode, device, warmup, bucket_mb, kept, preset=p)
            tries.append(dict(preset=name, **res))
            print(json.dumps(dict(dtype=dtype_name, optimizer=opt_name, mode=mode, **tries[-1])), flush=True)
            if not res["fits"]:
                break
            best = tries[-1]
        return dict(dtype=dtype_name, optimizer=opt_name, mode=mode, search="presets", largest=best, tries=tries)

    def attempt(n: int) -> bool:
        res = try_one(replace(c, layers=n), dtype_name, opt_name, mode, device, warmup, bucket_mb, kept)
        tries.append(dict(layers=n, **res))
        print(json.dumps(dict(dtype=dtype_name, optimizer=opt_name, mode=mode, **tries[-1])), flush=True)
        return res["fits"]

    lo, hi = 0, None  # lo: largest fit so far (0: none), hi: smallest failure (None: none)
    n = min(c.layers, max_layers)
    if attempt(n):
        lo = n
        while lo < max_layers:
            n = min(2 * lo, max_layers)
            if not attempt(n):
                hi = n
                break
            lo = n
    else:
        hi = n
        while hi > 1:
            n = hi // 2
            if attempt(n):
                lo = n
                break
            hi = n
    while hi is not None and hi - lo > 1:
        n = (lo + hi) // 2
        if attempt(n):
            lo = n
        else:
            hi = n
    best = next((t for t in tries if t["layers"] == lo and t["fits"]), None)
    return dict(
        dtype=dtype_name,
        optimizer=opt_name,
        mode=mode,
        search="layers",
        max_layers=max_layers,
        largest=best,
        smallest_failure=hi,
        tries=tries,
    )


def at_scale(
    c: Config,
    dtype_name: str,
    opt_name: str,
    modes: list[str],
    *,
    device: torch.device,
    warmup: int,
    steps: int,
    bucket_mb: float,
    kept: int,
    preset,
) -> tuple[list[dict], list[dict]]:
    """``--preset``: each applicable mode of one dtype / optimizer at the preset's shape, built
    alone (:func:`try_one`: too large to keep another beside it), its peak, ``steps`` timed
    steps and the planner's prediction; an out-of-memory is a row with ``fits: false``."""
    rows, skipped = [], []
    for mode in modes:
        reason = skip_reason(mode, dtype_name, opt_name)
        if reason is not None:
            skipped.append(dict(dtype=dtype_name, optimizer=opt_name, mode=mode, skipped=reason))
            continue
        row = dict(
            preset=preset.name,
            dtype=dtype_name,
            optimizer=opt_name,
            mode=mode,
            recipe=dataclasses.asdict(mode_recipe(mode, dtype_name, opt_name, bucket_mb)),
            techniques=(
                None
                if mode in (BASELINE, "reversible")
                else techniques(mode_recipe(mode, dtype_name, opt_name, bucket_mb))
            ),
            **try_one(c, dtype_name, opt_name, mode, device, warmup, bucket_mb, kept, preset, steps),
            **predicted(c, dtype_name, opt_name, mode, preset, bucket_mb),
        )
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows, skipped


def scale_markdown(rows: list[dict]) -> str:
    lines = [
        "| model | parameters | dtype | optimizer | mode | peak GiB | predicted GiB | host GiB "
        "| predicted host GiB "
        "| tokens/s | losses |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if not r["fits"]:
            lines.append(
                f"| {r['preset']} | - | {r['dtype']} | {r['optimizer']} | {r['mode']} | out of memory | "
                f"{gib(r['predicted_peak'])} | | | | |"
            )
            continue
        losses = ", ".join(f"{x:.4f}" for x in r["losses"])
        lines.append(
            f"| {r['preset']} | {r['params'] / 1e9:.2f}B | {r['dtype']} | {r['optimizer']} | {r['mode']} | "
            f"{gib(r['peak'])} | {gib(r['predicted_peak'])} | {gib(r['host'])} | {gib(r['predicted_host'])} | "
            f"{r['tokens_per_s']:,.0f} | {losses} |"
        )
    return "\n".join(lines)


def markdown(rows: list[dict], skipped: list[dict]) -> str:
    lines = [
        "| dtype | optimizer | mode | peak GiB | predicted GiB | host GiB | tokens/s | vs standard+ckpt | last loss |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = "-" if r["vs_baseline"] is None else f"{r['vs_baseline']:.3f}x"
        lines.append(
            f"| {r['dtype']} | {r['optimizer']} | {r['mode']} | {gib(r['peak'])} | "
            f"{gib(r['predicted_peak'])} | {gib(r['host'])} | "
            f"{r['tokens_per_s']:,.0f} | {ratio} | {r['last_loss']:.4f} |"
        )
    for s in skipped:
        lines.append(f"| {s['dtype']} | {s['optimizer']} | {s['mode']} | skipped: {s['skipped']} | | | | | |")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser, warmup=2, steps=5)
    parser.add_argument(
        "--modes",
        nargs="+",
        type=_mode,
        default=list(MODES),
        help=f"among {', '.join(MODES)}, or techniques concatenated (e.g. +offload+head-update+split)",
    )
    parser.add_argument("--bucket-mb", type=float, default=64.0, help="bucket_cap_mb of InBackwardOptimizer")
    parser.add_argument(
        "--largest",
        action="store_true",
        help="search the largest model of each (dtype, optimizer, mode) that trains one step",
    )
    parser.add_argument(
        "--largest-presets",
        action="store_true",
        help="with --largest: try ojas_ref/tools/plan.py's PRESETS instead of layer counts",
    )
    parser.add_argument(
        "--max-layers",
        type=int,
        default=None,
        help="with --largest: cap on the layers searched (default 1024; --quick: 8)",
    )
    parser.add_argument(
        "--preset",
        choices=list(PRESETS),
        default=None,
        help="each mode at this plan.py preset's shape (built alone; peak, timed steps, prediction)",
    )
    parser.add_argument("--layers", type=int, default=None, help="with --preset: its shape with this many layers")
    args = parser.parse_args(argv)
    if args.largest_presets and (args.quick or not args.largest):
        parser.error("--largest-presets needs --largest and no --quick (the presets are full size)")
    if args.preset is not None and (args.largest or args.quick):
        parser.error("--preset measures one shape: it does not go with --largest or --quick")
    if args.layers is not None and args.preset is None:
        parser.error("--layers needs --preset (the shape whose layer count it changes)")
    preset = None if args.preset is None else PRESETS[args.preset]
    if args.layers is not None:
        try:
            preset = with_layers(preset, args.layers)
        except ValueError as err:
            parser.error(f"--layers: {err}")
    device = torch.device(args.device)
    c = QUICK if args.quick else Config()
    kept = allocate_workspaces(device)
    rows, skipped, searches = [], [], []
    for dtype_name in args.dtypes:
        for opt_name in args.optimizers:
            if preset is not None:
                new_rows, new_skipped = at_scale(
                    c,
                    dtype_name,
                    opt_name,
                    args.modes,
                    device=device,
                    warmup=args.warmup,
                    steps=args.steps,
                    bucket_mb=args.bucket_mb,
                    kept=kept,
                    preset=preset,
                )
                rows += new_rows
                skipped += new_skipped
                continue
            if args.largest:
                for mode in args.modes:
                    reason = skip_reason(mode, dtype_name, opt_name)
                    if reason is not None:
                        print(f"skip {dtype_name} {opt_name} {mode}: {reason}", flush=True)
                        skipped.append(dict(dtype=dtype_name, optimizer=opt_name, mode=mode, skipped=reason))
                        continue
                    max_layers = args.max_layers or (8 if args.quick else 1024)
                    s = largest(
                        c,
                        dtype_name,
                        opt_name,
                        mode,
                        device=device,
                        warmup=args.warmup,
                        bucket_mb=args.bucket_mb,
                        kept=kept,
                        max_layers=max_layers,
                        presets=args.largest_presets,
                    )
                    print(json.dumps({k: v for k, v in s.items() if k != "tries"}), flush=True)
                    searches.append(s)
                continue
            new_rows, new_skipped = run_modes(
                c,
                dtype_name,
                opt_name,
                args.modes,
                device=device,
                warmup=args.warmup,
                steps=args.steps,
                bucket_mb=args.bucket_mb,
                kept=kept,
            )
            for r in new_rows:
                print(json.dumps(r), flush=True)
            rows += new_rows
            skipped += new_skipped
    env = environment(device)
    result = dict(env=env, config=vars(c), results=rows, skipped=skipped, largest=searches)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    print(env)
    if preset is not None:
        print(scale_markdown(rows))
    elif rows or not searches:
        print(markdown(rows, skipped))
    return result


if __name__ == "__main__":
    main()
