"""InBackwardOptimizer against the standard torch.optim loop, bitwise.

A small transformer (2 layers, d=32, vocabulary 50, input and output embeddings
tied, no dropout) is trained for a few steps twice from the same initial weights
and batches: with ``loss.backward(); clip_grad_norm_; opt.step(); opt.zero_grad()``
and with the same loop over :class:`InBackwardOptimizer`.  Parameters and optimizer
state must be ``torch.equal``.  CPU, float32, deterministic.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Callable, Optional

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook

from ojas_ref.optim.in_backward import InBackwardOptimizer, _live_grad
from ojas_ref.verification.in_backward_check import CASES, make_case, oracle_mismatches, updates

VOCAB, D, HEADS, LAYERS, SEQ, BATCH = 50, 32, 4, 2, 12, 3
CLIP = 0.05  # below the gradient norms of this model (checked), so clipping is active

OPTIMIZERS = {
    "sgd": (torch.optim.SGD, dict(lr=0.1)),
    "sgd_momentum": (torch.optim.SGD, dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    "sgd_nesterov": (torch.optim.SGD, dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)),
    "adam": (torch.optim.Adam, dict(lr=1e-2, weight_decay=0.01)),
    "adamw": (torch.optim.AdamW, dict(lr=1e-2, betas=(0.8, 0.95), weight_decay=0.1)),
}


pytestmark = pytest.mark.usefixtures("one_thread")


# --------------------------------------------------------------------------
# Model, data and training loop
# --------------------------------------------------------------------------


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc, self.out = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class TinyLM(nn.Module):
    """Decoder-only transformer whose output projection is the input embedding."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.pos = nn.Parameter(0.02 * torch.randn(SEQ, D))
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(D)

    def loss(self, tokens, targets, weight_in: torch.Tensor, weight_out: torch.Tensor) -> torch.Tensor:
        h = F.embedding(tokens, weight_in) + self.pos
        for block in self.blocks:
            h = block(h)
        logits = F.linear(self.ln_f(h), weight_out)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())

    def forward(self, tokens, targets) -> torch.Tensor:
        return self.loss(tokens, targets, self.emb.weight, self.emb.weight)


def make_model() -> TinyLM:
    torch.manual_seed(0)
    return TinyLM()


def batch(step: int, micro: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1000 * step + micro)
    tokens = torch.randint(VOCAB, (BATCH, SEQ + 1), generator=gen)
    return tokens[:, :-1], tokens[:, 1:]


def train(
    model: nn.Module, opt: torch.optim.Optimizer, steps: range, *, k: int = 1, clip: Optional[float] = None, sched=None
) -> list[float]:
    """The usual loop; for InBackwardOptimizer the backward call differs and there is no clip_grad_norm_
    call (it clips with max_grad_norm, and refuses clip_grad_norm_ after its updates). Returns the
    clipped norms of the standard loop."""
    norms = []
    for step in steps:
        for micro in range(k):
            loss = model(*batch(step, micro)) / k
            if isinstance(opt, InBackwardOptimizer):
                opt.backward(loss)
            else:
                loss.backward()
        if clip is not None and not isinstance(opt, InBackwardOptimizer):
            norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), clip)))
        opt.step()
        opt.zero_grad()
        if sched is not None:
            sched.step()
    return norms


def run(
    name: str,
    *,
    in_backward: bool,
    steps: int = 3,
    k: int = 1,
    clip: Optional[float] = None,
    sched: Optional[Callable] = None,
    bucket_cap_mb: float = 64.0,
    options: Optional[dict] = None,
) -> tuple[nn.Module, torch.optim.Optimizer, list[float]]:
    """Train ``name`` (with extra ``options`` such as ``foreach=True``) in the standard loop or in backward."""
    cls, kw = OPTIMIZERS[name]
    kw = {**kw, **(options or {})}
    model = make_model()
    if in_backward:
        opt = InBackwardOptimizer(
            model.parameters(), cls, accumulation_steps=k, max_grad_norm=clip, bucket_cap_mb=bucket_cap_mb, **kw
        )
    else:
        opt = cls(model.parameters(), **kw)
    norms = train(model, opt, range(steps), k=k, clip=clip, sched=None if sched is None else sched(opt))
    return model, opt, norms


def same_value(a: Any, b: Any) -> bool:
    """Equal bits and dtype (on any devices: host-held optimizer state against device state)."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a.cpu(), b.cpu())
    return a == b


def assert_same(model_a: nn.Module, opt_a, model_b: nn.Module, opt_b) -> None:
    """Bitwise equal parameters, optimizer state and param_groups."""
    for (name, a), b in zip(model_a.named_parameters(), model_b.parameters()):
        assert torch.equal(a, b), f"parameter {name} differs: max |diff| {float((a - b).abs().max()):.3g}"
    sa, sb = opt_a.state_dict(), opt_b.state_dict()
    assert sa["param_groups"] == sb["param_groups"]
    assert sa["state"].keys() == sb["state"].keys()
    for i, state in sa["state"].items():
        assert state.keys() == sb["state"][i].keys()
        for key, value in state.items():
            assert same_value(value, sb["state"][i][key]), f"state {key!r} of parameter {i} differs"


def max_diff(model_a: nn.Module, model_b: nn.Module) -> float:
    return max(float((a - b).detach().abs().max()) for a, b in zip(model_a.parameters(), model_b.parameters()))


# --------------------------------------------------------------------------
# Equality with the standard loop
# --------------------------------------------------------------------------


@pytest.mark.parametrize("clip", [None, CLIP], ids=["noclip", "clip"])
@pytest.mark.parametrize("k", [1, 3], ids=["k1", "k3"])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_matches_standard_loop(name: str, k: int, clip: Optional[float]) -> None:
    model_s, opt_s, norms = run(name, in_backward=False, k=k, clip=clip)
    model_f, opt_f, _ = run(name, in_backward=True, k=k, clip=clip)
    if clip is not None:
        assert min(norms) > clip, "the test must exercise clipping"
    assert len(opt_f.state) == len(list(model_f.parameters())) or name == "sgd"
    assert_same(model_s, opt_s, model_f, opt_f)


# Buckets: a cap of 0.01 MiB (10 KiB) splits this model's one group (about 110 KB of
# float32 gradients) into several buckets; 0 is one update per parameter.
SPLIT_CAP = 0.01


def count_bucket_steps(opt: InBackwardOptimizer) -> list[int]:
    """A counter of the optimizer_class steps (one per bucket) of each group."""
    calls = [0]

    def count(*_: Any) -> None:
        calls[0] += 1

    for bucket_opt in opt._group_opts:
        bucket_opt.register_step_post_hook(count)
    return calls


@pytest.mark.parametrize("clip", [None, CLIP], ids=["noclip", "clip"])
@pytest.mark.parametrize("k", [1, 3], ids=["k1", "k3"])
@pytest.mark.parametrize("cap", [0, SPLIT_CAP], ids=["cap0", "cap0.01"])
@pytest.mark.parametrize("name", ["sgd", "sgd_momentum", "adam", "adamw"])
def test_buckets_match_standard_loop(name: str, cap: float, k: int, clip: Optional[float]) -> None:
    """Bitwise the standard loop whatever the bucket cap (Buckets.bucketed_eq_standard)."""
    model_s, opt_s, _ = run(name, in_backward=False, k=k, clip=clip)
    model_f, opt_f, _ = run(name, in_backward=True, k=k, clip=clip, bucket_cap_mb=cap)
    assert_same(model_s, opt_s, model_f, opt_f)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "options,direct",
    [
        (dict(), True),
        (dict(foreach=False), True),
        (dict(foreach=True), True),
        (dict(momentum=0.9), False),
        (dict(weight_decay=0.01), False),
        (dict(maximize=True), False),
        (dict(lr=torch.tensor(0.1)), False),
    ],
)
def test_plain_sgd_is_updated_without_optimizer_step(
    options: dict, direct: bool, dtype: torch.dtype, monkeypatch
) -> None:
    """Plain SGD buckets are updated by ``torch._foreach_add_(params, grads, alpha=-lr)`` directly
    (InBackwardOptimizer._plain_sgd_lr), every other setting by ``SGD.step``; both are bitwise
    the standard loop's SGD, in float32 and bfloat16."""

    def build() -> TinyLM:
        return make_model().to(dtype)

    model_s, model_f = build(), build()
    opt_s = torch.optim.SGD(model_s.parameters(), **({"lr": 0.1} | options))
    opt_f = InBackwardOptimizer(
        model_f.parameters(), torch.optim.SGD, bucket_cap_mb=SPLIT_CAP, **({"lr": 0.1} | options)
    )
    train(model_s, opt_s, range(3))
    steps = []
    original = torch.optim.SGD.step
    monkeypatch.setattr(torch.optim.SGD, "step", lambda self, *a, **k: (steps.append(self), original(self, *a, **k))[1])
    train(model_f, opt_f, range(3))
    assert (not steps) == direct
    assert_same(model_s, opt_s, model_f, opt_f)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize(
    "cls,options,direct",
    [
        (torch.optim.AdamW, dict(), True),
        (torch.optim.AdamW, dict(foreach=False), True),
        (torch.optim.AdamW, dict(foreach=True, amsgrad=True), True),
        (torch.optim.AdamW, dict(maximize=True), True),
        (torch.optim.Adam, dict(weight_decay=0.01), True),
        (torch.optim.AdamW, dict(fused=True), True),
        (torch.optim.AdamW, dict(fused=True, amsgrad=True, maximize=True), True),
        (torch.optim.AdamW, dict(lr=torch.tensor(0.01), foreach=False), False),
    ],
    ids=["adamw", "single", "amsgrad", "maximize", "adam", "fused", "fused-amsgrad-maximize", "tensor-lr"],
)
def test_adam_is_updated_without_optimizer_step(
    cls: type, options: dict, direct: bool, dtype: torch.dtype, monkeypatch
) -> None:
    """Once their state exists, Adam / AdamW buckets are stepped by torch's functional ``adam``
    directly (ojas_ref.optim._fast_paths.step_adam_directly), fused steps included; tensor-lr steps
    by ``Adam.step``; both bitwise the standard loop, in float32 and bfloat16."""
    kw = {"lr": 1e-2, "betas": (0.8, 0.95), "weight_decay": 0.1} | options
    model_s, model_f = make_model().to(dtype), make_model().to(dtype)
    opt_s = cls(model_s.parameters(), **kw)
    opt_f = InBackwardOptimizer(model_f.parameters(), cls, bucket_cap_mb=SPLIT_CAP, **kw)
    train(model_s, opt_s, range(4))
    train(model_f, opt_f, range(1))  # the first update creates the state through Adam.step
    steps = []
    for bucket_opt in opt_f._group_opts:
        original = bucket_opt.step
        monkeypatch.setattr(bucket_opt, "step", lambda *a, _o=original, **k: (steps.append(1), _o(*a, **k))[1])
    train(model_f, opt_f, range(1, 4))
    assert (not steps) == direct
    assert_same(model_s, opt_s, model_f, opt_f)


def test_adam_step_patched_on_the_class_is_called(monkeypatch) -> None:
    """Whether a class steps as ``Adam.step`` is decided per step function, not cached per class: a
    ``step`` patched onto AdamW after the direct updates began is the one that runs."""
    model = make_model()
    opt = InBackwardOptimizer(model.parameters(), torch.optim.AdamW, bucket_cap_mb=SPLIT_CAP, lr=1e-2)
    train(model, opt, range(2))  # the state, then direct updates
    steps = []
    original = torch.optim.AdamW.step
    monkeypatch.setattr(torch.optim.AdamW, "step", lambda self, *a, **k: (steps.append(1), original(self, *a, **k))[1])
    train(model, opt, range(2, 3))
    assert len(steps) > 1  # several buckets


def test_plain_sgd_runs_optimizer_step_hooks() -> None:
    """A global optimizer step hook sees every bucket's step: the direct update is not taken then."""
    seen = []
    handle = register_optimizer_step_post_hook(lambda opt, *_: seen.append(type(opt)))
    try:
        model_s, opt_s, _ = run("sgd", in_backward=False)
        model_f, opt_f, _ = run("sgd", in_backward=True, bucket_cap_mb=SPLIT_CAP)
    finally:
        handle.remove()
    assert seen.count(torch.optim.SGD) > 3  # several buckets per step, three steps (and the standard loop's three)
    assert_same(model_s, opt_s, model_f, opt_f)


@pytest.mark.parametrize("cap,buckets", [(0, "params"), (SPLIT_CAP, "several"), (64.0, "one")])
def test_one_step_per_bucket(cap: float, buckets: str) -> None:
    """A cap of 0 steps each parameter alone; a small cap splits the group; a large one
    steps the whole group once, at the end of backward."""
    model = make_model()
    n = len(list(model.parameters()))
    opt = InBackwardOptimizer(model.parameters(), torch.optim.AdamW, bucket_cap_mb=cap, lr=1e-2)
    calls = count_bucket_steps(opt)
    model(*batch(0, 0)).backward()
    expected = {"params": range(n, n + 1), "several": range(3, n // 2), "one": range(1, 2)}[buckets]
    assert calls[0] in expected, calls[0]


@pytest.mark.parametrize("options", [dict(foreach=True), dict(fused=True)], ids=["foreach", "fused"])
@pytest.mark.parametrize("cap", [SPLIT_CAP, 64.0], ids=["cap0.01", "cap64"])
@pytest.mark.parametrize(
    "name,k,clip",
    [
        ("sgd", 1, None),
        ("sgd_momentum", 3, None),
        ("adam", 1, CLIP),
        ("adamw", 1, None),
        ("adamw", 3, CLIP),
    ],
)
def test_foreach_and_fused_buckets_match_standard_loop(
    name: str, k: int, clip: Optional[float], cap: float, options: dict
) -> None:
    """torch's foreach (the CUDA default) and fused paths run on the CPU too: a bucket
    stepped by them is bitwise the standard loop stepping the whole group by them."""
    model_s, opt_s, _ = run(name, in_backward=False, k=k, clip=clip, options=options)
    model_f, opt_f, _ = run(name, in_backward=True, k=k, clip=clip, bucket_cap_mb=cap, options=options)
    assert_same(model_s, opt_s, model_f, opt_f)


@pytest.mark.parametrize(
    "sched",
    [
        lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.3),
        lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s)),
    ],
    ids=["StepLR", "LambdaLR"],
)
@pytest.mark.parametrize("name", ["sgd_momentum", "adamw"])
def test_lr_scheduler(name: str, sched: Callable) -> None:
    model_s, opt_s, _ = run(name, in_backward=False, steps=4, sched=sched)
    model_f, opt_f, _ = run(name, in_backward=True, steps=4, sched=sched)
    assert opt_f.param_groups[0]["lr"] != OPTIMIZERS[name][1]["lr"]
    assert_same(model_s, opt_s, model_f, opt_f)


def test_param_groups_with_their_own_hyperparameters() -> None:
    models, opts = [], []
    for cls in (torch.optim.AdamW, InBackwardOptimizer):
        model = make_model()
        decay = [p for p in model.parameters() if p.dim() >= 2]
        no_decay = [p for p in model.parameters() if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0, "lr": 3e-3}]
        opt = (
            InBackwardOptimizer(groups, torch.optim.AdamW, lr=1e-2)
            if cls is InBackwardOptimizer
            else torch.optim.AdamW(groups, lr=1e-2)
        )
        train(model, opt, range(3))
        models.append(model)
        opts.append(opt)
    assert_same(models[0], opts[0], models[1], opts[1])


def test_parameter_without_gradient_in_last_micro_batch() -> None:
    """With accumulation, a parameter whose gradient came only from earlier micro-batches
    is still updated at the end of the k-th backward (as opt.step() updates it)."""
    results = []
    for in_backward in (False, True):
        torch.manual_seed(0)
        first, second = nn.Linear(4, 4), nn.Linear(4, 1)
        params = list(first.parameters()) + list(second.parameters())
        opt = (
            InBackwardOptimizer(params, torch.optim.Adam, accumulation_steps=3, lr=0.1)
            if in_backward
            else torch.optim.Adam(params, lr=0.1)
        )
        for step in range(2):
            for micro in range(3):
                x = torch.randn(5, 4, generator=torch.Generator().manual_seed(10 * step + micro))
                h = first(x)
                loss = (second(h) if micro == 0 else h).square().mean()
                loss.backward()
            opt.step()
            opt.zero_grad()
        assert all(p.grad is None for p in params)
        results.append((params, opt))
    (ps, os_), (pf, of) = results
    assert all(torch.equal(a, b) for a, b in zip(ps, pf))
    assert int(of.state_dict()["state"][3]["step"]) == 2


# --------------------------------------------------------------------------
# Gradients do not survive
# --------------------------------------------------------------------------


def live_grad_bytes(params: list[torch.Tensor]) -> int:
    return sum(g.numel() * g.element_size() for g in map(_live_grad, params) if g is not None)


def test_no_grad_survives_backward() -> None:
    """Per-parameter updates (cap 0): no gradient is alive after any hook."""
    model = make_model()
    params = list(model.parameters())
    opt = InBackwardOptimizer(params, torch.optim.AdamW, bucket_cap_mb=0, lr=1e-2)  # noqa: F841 (kept alive: its hooks hold it weakly)
    live = []
    for p in params:  # registered after the optimizer's hooks, so they run after each update
        p.register_post_accumulate_grad_hook(lambda p: live.append(sum(_live_grad(q) is not None for q in params)))
    model(*batch(0, 0)).backward()
    assert all(_live_grad(p) is None for p in params)
    assert len(live) == len(params) and max(live) == 0


@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("cap", [SPLIT_CAP, 0.02])
def test_at_most_one_bucket_of_gradients_is_alive(cap: float, groups: int) -> None:
    """After the optimizer's hook of any parameter, the live gradients are those of the
    pending buckets, less than the cap per group; none survives backward, in either pass
    of clipping."""
    model = make_model()
    params = list(model.parameters())
    param_groups = [{"params": params[i::groups]} for i in range(groups)]
    for clip in (None, CLIP):
        opt = InBackwardOptimizer(param_groups, torch.optim.AdamW, bucket_cap_mb=cap, max_grad_norm=clip, lr=1e-2)
        live = []
        handles = [p.register_post_accumulate_grad_hook(lambda p: live.append(live_grad_bytes(params))) for p in params]
        opt.backward(model(*batch(0, 0)))
        assert all(_live_grad(p) is None for p in params)
        assert len(live) == len(params) * (1 if clip is None else 2)
        assert 0 < max(live) < groups * cap * 2**20, (max(live), live)
        for handle in handles:
            handle.remove()
        opt.remove_hooks()


def test_accumulation_keeps_gradients_until_the_last_micro_batch() -> None:
    model = make_model()
    params = list(model.parameters())
    before = [p.detach().clone() for p in params]
    opt = InBackwardOptimizer(params, torch.optim.SGD, accumulation_steps=3, lr=0.1)
    for micro in range(2):
        (model(*batch(0, micro)) / 3).backward()
        assert all(p.grad is not None for p in params)
        assert all(torch.equal(p, b) for p, b in zip(params, before))
    (model(*batch(0, 2)) / 3).backward()
    assert all(_live_grad(p) is None for p in params)
    assert not any(torch.equal(p, b) for p, b in zip(params, before))
    assert opt.step() is None


def test_clipping_first_pass_frees_every_gradient() -> None:
    model = make_model()
    params = list(model.parameters())
    opt = InBackwardOptimizer(params, torch.optim.AdamW, lr=1e-2, max_grad_norm=CLIP, bucket_cap_mb=0)
    live = []
    for p in params:
        p.register_post_accumulate_grad_hook(lambda p: live.append(sum(_live_grad(q) is not None for q in params)))
    opt.backward(model(*batch(0, 0)))
    assert len(live) == 2 * len(params) and max(live) == 0
    assert all(_live_grad(p) is None for p in params)


# --------------------------------------------------------------------------
# Tied weights
# --------------------------------------------------------------------------


def test_tied_weight_hook_fires_once_with_the_summed_gradient() -> None:
    """The embedding is used twice (input lookup, output projection); PyTorch's
    post-accumulate-grad hook fires once, after both contributions (as
    Equivalence.backward_events_hook_once assumes of the backprop order)."""
    model = make_model()
    w = model.emb.weight
    w_in, w_out = w.view_as(w), w.view_as(w)
    loss = model.loss(*batch(0, 0), w_in, w_out)
    g_in, g_out = torch.autograd.grad(loss, [w_in, w_out], retain_graph=True)
    seen = []
    w.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.clone()))
    loss.backward()
    assert len(seen) == 1 and torch.equal(seen[0], g_out + g_in)


def test_hook_per_use_on_tied_weights_differs() -> None:
    """A design that updated at each use's gradient would take two Adam steps on the
    tied embedding (one per use) instead of one with the sum
    (Counterexamples.tied_per_use_neq_standard)."""
    model = make_model()
    w = model.emb.weight
    w_in, w_out = w.view_as(w), w.view_as(w)
    g_in, g_out = torch.autograd.grad(model.loss(*batch(0, 0), w_in, w_out), [w_in, w_out])
    once, per_use = w.detach().clone(), w.detach().clone()
    opt_once, opt_per_use = torch.optim.Adam([once], lr=1e-2), torch.optim.Adam([per_use], lr=1e-2)
    once.grad = g_in + g_out
    opt_once.step()
    for g in (g_out, g_in):  # backward produces the output projection's gradient first
        per_use.grad = g
        opt_per_use.step()
    assert float((once - per_use).abs().max()) > 1e-3


# --------------------------------------------------------------------------
# Counterexamples: what the repairs are for
# --------------------------------------------------------------------------


def test_naive_per_micro_batch_updates_differ() -> None:
    """Updating in every micro-batch's hooks (no accumulation repair) is not the
    standard accumulate-then-step loop (Counterexamples.accum_fused_neq_standard)."""
    model_s, _, _ = run("adamw", in_backward=False, k=3)
    model_n = make_model()
    cls, kw = OPTIMIZERS["adamw"]
    opt = InBackwardOptimizer(model_n.parameters(), cls, **kw)
    for step in range(3):
        for micro in range(3):
            (model_n(*batch(step, micro)) / 3).backward()
            opt.step()  # every backward pass updates: a step per micro-batch
    assert max_diff(model_s, model_n) > 1e-3


def test_one_pass_clipping_differs() -> None:
    """A single backward pass only has the gradients seen so far at each hook; clipping
    each gradient by its own norm there is not clip_grad_norm_ over all gradients
    (Counterexamples.clip_running_neq_standard clips by the running norm)."""
    model_s, _, _ = run("adamw", in_backward=False, clip=CLIP)
    model_n = make_model()

    def clip_alone(p: torch.Tensor) -> None:
        torch.nn.utils.clip_grad_norm_([p], CLIP)

    for p in model_n.parameters():  # runs before the optimizer's hook (registered first)
        p.register_post_accumulate_grad_hook(clip_alone)
    cls, kw = OPTIMIZERS["adamw"]
    train(model_n, InBackwardOptimizer(model_n.parameters(), cls, **kw), range(3))
    assert max_diff(model_s, model_n) > 1e-3


# --------------------------------------------------------------------------
# state_dict
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source,target", [("in_backward", "in_backward"), ("standard", "in_backward"), ("in_backward", "standard")]
)
def test_state_dict_round_trip(source: str, target: str) -> None:
    """Save after 2 steps, load into a fresh model and optimizer, 2 more steps: the
    uninterrupted 4-step run.  The format is AdamW's, so checkpoints cross over."""
    cls, kw = OPTIMIZERS["adamw"]

    def new(kind: str, model: nn.Module) -> torch.optim.Optimizer:
        return (
            InBackwardOptimizer(model.parameters(), cls, **kw)
            if kind == "in_backward"
            else cls(model.parameters(), **kw)
        )

    model_u = make_model()
    opt_u = new(target, model_u)
    train(model_u, opt_u, range(4))

    model_a = make_model()
    opt_a = new(source, model_a)
    train(model_a, opt_a, range(2))
    saved = copy.deepcopy({"model": model_a.state_dict(), "opt": opt_a.state_dict()})
    model_b = make_model()
    opt_b = new(target, model_b)
    model_b.load_state_dict(saved["model"])
    opt_b.load_state_dict(saved["opt"])
    train(model_b, opt_b, range(2, 4))
    assert_same(model_u, opt_u, model_b, opt_b)


# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------


def small() -> tuple[nn.Linear, torch.Tensor]:
    torch.manual_seed(0)
    return nn.Linear(3, 2), torch.randn(4, 3)


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        (dict(optimizer_class=nn.Linear), TypeError, "optimizer_class must be a torch.optim.Optimizer"),
        (dict(optimizer_class=torch.optim.LBFGS), ValueError, "LBFGS needs step.closure."),
        (dict(accumulation_steps=0), ValueError, "accumulation_steps must be >= 1"),
        (dict(accumulation_steps=2.0), TypeError, "accumulation_steps must be an int"),
        (dict(max_grad_norm=-1.0), ValueError, "max_grad_norm must be a finite float > 0"),
        (dict(max_grad_norm=math.inf), ValueError, "max_grad_norm must be a finite float > 0"),
        (dict(bucket_cap_mb=-1.0), ValueError, "bucket_cap_mb must be a finite float >= 0"),
        (dict(bucket_cap_mb="64"), TypeError, "bucket_cap_mb must be a float"),
        (dict(lr=-1.0), ValueError, "Invalid learning rate"),  # optimizer_class's own check
    ],
)
def test_bad_arguments(kwargs: dict, error: type, match: str) -> None:
    layer, _ = small()
    with pytest.raises(error, match=match):
        InBackwardOptimizer(layer.parameters(), **kwargs)


def test_existing_grad_raises() -> None:
    layer, x = small()
    layer(x).sum().backward()
    with pytest.raises(ValueError, match=r"already have a \.grad"):
        InBackwardOptimizer(layer.parameters())


def test_step_closure_raises() -> None:
    layer, _ = small()
    opt = InBackwardOptimizer(layer.parameters())
    with pytest.raises(RuntimeError, match=r"step\(closure\) is not supported"):
        opt.step(lambda: 0.0)


@pytest.mark.parametrize("unscale_first", [False, True])
def test_grad_scaler_raises(unscale_first: bool) -> None:
    layer, x = small()
    opt = InBackwardOptimizer(layer.parameters(), torch.optim.SGD, lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(layer(x).sum()).backward()
    with pytest.raises(RuntimeError, match="cannot be used with an enabled torch.amp.GradScaler"):
        if unscale_first:  # raises here: unscale_ reads the gradients that the updates consumed
            scaler.unscale_(opt)
        scaler.step(opt)


def test_clipping_needs_optimizer_backward() -> None:
    layer, x = small()
    opt = InBackwardOptimizer(layer.parameters(), max_grad_norm=1.0)
    with pytest.raises(RuntimeError, match=r"optimizer.backward\(loss\), not loss.backward\(\)"):
        layer(x).sum().backward()
    del opt


def test_sparse_gradient_raises() -> None:
    """A sparse gradient is refused where the lazy row update is not the dense step (AdamW;
    plain SGD's exact case: tests/optim/test_sparse_embedding.py)."""
    emb = nn.Embedding(10, 4, sparse=True)
    opt = InBackwardOptimizer(emb.parameters(), torch.optim.AdamW, lr=0.1)
    with pytest.raises(RuntimeError, match="does not support sparse gradients"):
        emb(torch.tensor([1, 2])).sum().backward()
    del opt


def test_second_optimizer_on_the_same_parameters_raises() -> None:
    """Two optimizers on one parameter would update it twice; remove_hooks() detaches the first."""
    layer, x = small()
    first = InBackwardOptimizer(layer.parameters(), torch.optim.SGD, lr=0.1)
    with pytest.raises(ValueError, match="already updated in backward by another InBackwardOptimizer"):
        InBackwardOptimizer(layer.parameters(), torch.optim.SGD, lr=0.1)
    first.remove_hooks()
    second = InBackwardOptimizer(layer.parameters(), torch.optim.SGD, lr=0.1)
    params = list(layer.parameters())
    grads = torch.autograd.grad(layer(x).sum(), params)
    expected = [p.detach().add(g, alpha=-0.1) for p, g in zip(params, grads)]
    layer(x).sum().backward()
    assert all(torch.equal(p, e) for p, e in zip(params, expected))  # updated once
    second.remove_hooks()


def test_cannot_be_pickled() -> None:
    layer, _ = small()
    with pytest.raises(TypeError, match="cannot be pickled"):
        copy.deepcopy(InBackwardOptimizer(layer.parameters()))


# --------------------------------------------------------------------------
# One update against the oracle extracted from rocq/InBackward/UpdateRules.v
# --------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("options", CASES, ids=[str(i) for i in range(len(CASES))])
def test_update_matches_oracle(options: dict, seed: int) -> None:
    """float64 torch.optim step and InBackwardOptimizer's update in backward vs the oracle
    (16 ulps of the magnitudes involved); and the two torch runs bitwise equal."""
    case = make_case(seed, **options)
    assert oracle_mismatches(case) == []
    (p_torch, s_torch), (p_in_backward, s_in_backward) = updates(case).values()
    assert torch.equal(p_torch, p_in_backward)
    assert all(same_value(v, s_in_backward[k]) for k, v in s_torch.items())


@pytest.mark.parametrize(
    "change,message",
    [
        ({"rule": "adam"}, "rule: expected"),
        ({"eps": 1e-8}, 'eps: not a hyper-parameter of rule "sgd"'),
        ({"grad": [1.0]}, "grad: dimension n has length 1"),
        ({"state": {"exp_avg": [0.0, 0.0]}}, "state: unknown field exp_avg"),
        ({"nesterov": 1}, "nesterov: expected a boolean"),
        ({"lr": None}, "lr: expected a number"),
        ({"extra": 0}, "extra: unknown field"),
    ],
)
def test_oracle_rejects_malformed_optimizer_requests(change: dict, message: str) -> None:
    from ojas_ref.verification.oracle import oracle_request

    req = {
        "op": "in_backward",
        "rule": "sgd",
        "lr": 0.1,
        "weight_decay": 0.0,
        "momentum": 0.9,
        "dampening": 0.0,
        "nesterov": False,
        "param": [1.0, 2.0],
        "grad": [0.5, -0.5],
    }
    assert "error" not in oracle_request(req)
    answer = oracle_request({**req, **change})
    assert message in answer.get("error", ""), answer


def test_dropping_model_and_optimizer_frees_the_parameters():
    """The registry of hooked parameters holds neither the parameters nor the optimizer:
    once the user drops both, the parameters are freed (no leak across models)."""
    import gc
    import weakref

    model = torch.nn.Linear(4, 3)
    opt = InBackwardOptimizer(model.parameters(), torch.optim.AdamW, lr=1e-2)
    before = model.weight.detach().clone()
    model(torch.randn(2, 4)).sum().backward()
    assert not torch.equal(model.weight, before) and opt.state  # it did update
    alive = weakref.ref(model.weight)
    del model, opt
    gc.collect()
    assert alive() is None


def test_dropping_only_the_optimizer_raises_at_the_next_backward():
    """Hooks hold their optimizer weakly; training on after dropping it is an error, not a silent no-op."""
    model = torch.nn.Linear(4, 3)
    opt = InBackwardOptimizer(model.parameters(), torch.optim.SGD, lr=0.1)
    del opt
    with pytest.raises(RuntimeError, match="was garbage collected while its hooks remain"):
        model(torch.randn(2, 4)).sum().backward()


class _FailingBackward(torch.autograd.Function):
    """Identity whose backward raises: a backward pass that stops midway."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError("backward failed on purpose")


def test_failed_backward_is_reported_then_dropped_by_zero_grad() -> None:
    """A backward that raises after some hooks leaves updates pending (its end-of-backward
    never runs); the next backward would step those parameters twice: it raises instead,
    and zero_grad() drops the pending updates."""
    torch.manual_seed(0)
    first, second = nn.Linear(3, 3), nn.Linear(3, 2)
    opt = InBackwardOptimizer(
        list(first.parameters()) + list(second.parameters()), torch.optim.SGD, bucket_cap_mb=64, lr=0.1
    )
    x = torch.randn(4, 3)
    with pytest.raises(RuntimeError, match="on purpose"):
        second(_FailingBackward.apply(first(x))).sum().backward()
    assert all(p.grad is not None for p in second.parameters())  # hooked, pending, not stepped
    with pytest.raises(RuntimeError, match="already waiting for its update"):
        second(first(x)).sum().backward()
    opt.zero_grad()
    before = [p.detach().clone() for p in second.parameters()]
    second(first(x)).sum().backward()
    assert all(_live_grad(p) is None for p in list(first.parameters()) + list(second.parameters()))
    assert all(not torch.equal(a, p) for a, p in zip(before, second.parameters()))


# --------------------------------------------------------------------------
# Two backward passes in one step, a parameter unfrozen after construction
# --------------------------------------------------------------------------


def test_two_updating_backward_passes_without_step_raise() -> None:
    """torch.optim makes one update of the summed gradient for loss1.backward();
    loss2.backward(); step(); here each backward updates, so the second one raises
    (before touching anything) until step() marks the end of the first update."""
    layer, x = small()
    opt = InBackwardOptimizer(layer.parameters(), torch.optim.SGD, lr=0.1)
    layer(x).sum().backward()
    after_first = [p.detach().clone() for p in layer.parameters()]
    with pytest.raises(
        RuntimeError,
        match=r"already updated since the last optimizer.step\(\) gets a "
        r"gradient again",
    ):
        layer(x).square().sum().backward()
    assert all(torch.equal(p, a) and _live_grad(p) is None for p, a in zip(layer.parameters(), after_first))
    opt.step()
    layer(x).square().sum().backward()  # after step(): the next update
    assert not torch.equal(layer.weight, after_first[0])


def test_accumulating_backward_passes_need_no_step() -> None:
    """Micro-batches 1..k-1 do not update, so they need no step() before the k-th."""
    layer, x = small()
    opt = InBackwardOptimizer(layer.parameters(), torch.optim.SGD, accumulation_steps=2, lr=0.1)
    for _ in range(2):
        for _ in range(2):
            layer(x).sum().backward()
        opt.step()
    with pytest.raises(RuntimeError, match="since the last optimizer.step"):
        for _ in range(3):
            layer(x).sum().backward()


def test_reentrant_checkpointing_updates_each_parameter_once() -> None:
    """Reentrant activation checkpointing runs nested backward passes inside the outer one;
    each parameter is still updated once, as in the standard loop, and needs no extra step()."""
    from torch.utils.checkpoint import checkpoint

    results = []
    for in_backward in (False, True):
        torch.manual_seed(0)
        a, b, c = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 1)
        params = [*a.parameters(), *b.parameters(), *c.parameters()]
        opt = (
            InBackwardOptimizer(params, torch.optim.Adam, bucket_cap_mb=0, lr=0.1)
            if in_backward
            else torch.optim.Adam(params, lr=0.1)
        )
        for step in range(2):
            x = torch.randn(3, 4, generator=torch.Generator().manual_seed(step), requires_grad=True)
            h = checkpoint(b, checkpoint(a, x, use_reentrant=True), use_reentrant=True)
            c(h).sum().backward()
            opt.step()
            opt.zero_grad()
        results.append(params)
    assert all(torch.equal(s, f) for s, f in zip(*results))


@pytest.mark.parametrize("others_trainable", [True, False])
def test_parameter_unfrozen_after_construction_raises(others_trainable: bool) -> None:
    """Frozen at construction, so no hook; unfrozen later, its .grad would grow and it would
    never be updated. Raises at the end of the backward pass (if another parameter has a
    hook) or at step()."""
    layer, x = small()
    layer.bias.requires_grad_(False)
    layer.weight.requires_grad_(others_trainable)
    opt = InBackwardOptimizer(layer.parameters(), torch.optim.SGD, lr=0.1)
    layer.bias.requires_grad_(True)
    message = r"parameter\(s\) \[\(0, 1\)\] .* have a gradient but no hook.*add_param_group"
    if others_trainable:
        with pytest.raises(RuntimeError, match=message):
            layer(x).sum().backward()
    else:
        layer(x).sum().backward()
        with pytest.raises(RuntimeError, match=message):
            opt.step()
    assert layer.bias.grad is not None


def test_parameter_unfrozen_then_added_with_add_param_group() -> None:
    """The remedy the error names: a frozen parameter left out of params and added when unfrozen."""
    layer, x = small()
    layer.bias.requires_grad_(False)
    opt = InBackwardOptimizer([layer.weight], torch.optim.SGD, lr=0.1)
    layer(x).sum().backward()
    opt.step()
    layer.bias.requires_grad_(True)
    opt.add_param_group({"params": [layer.bias]})
    before = layer.bias.detach().clone()
    layer(x).sum().backward()
    opt.step()
    assert not torch.equal(layer.bias, before) and layer.bias.grad is None


@pytest.mark.gpu
@pytest.mark.parametrize("overlap", [False, True], ids=["compute-stream", "overlap"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", ["sgd", "sgd_momentum", "adamw"])
def test_cuda_matches_standard_loop(name: str, dtype: torch.dtype, overlap: bool) -> None:
    """On CUDA (foreach kernels; plain SGD through the direct torch._foreach_add_ update; with
    ``overlap``, the updates on a side stream), bitwise the standard loop, in several buckets.
    SDPA's math backend, so that both runs' gradients are the same bits (the flash backward need
    not be deterministic)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    cls, kw = OPTIMIZERS[name]
    runs = []
    with sdpa_kernel(SDPBackend.MATH):
        for in_backward in (False, True):
            model = make_model().to("cuda", dtype)
            opt = (
                InBackwardOptimizer(model.parameters(), cls, bucket_cap_mb=SPLIT_CAP, overlap=overlap, **kw)
                if in_backward
                else cls(model.parameters(), **kw)
            )
            for step in range(3):
                tokens, targets = (t.cuda() for t in batch(step, 0))
                loss = model(tokens, targets)
                opt.backward(loss) if in_backward else loss.backward()
                opt.step()
                opt.zero_grad()
            runs.append((model, opt))
    assert_same(runs[0][0], runs[0][1], runs[1][0], runs[1][1])


@pytest.mark.gpu
def test_cuda_overlap_keeps_at_most_one_more_bucket() -> None:
    """8 fp32 [1024, 1024] weights, a bucket per weight (4 MiB): with the updates on the side
    stream the backward's peak is at most one bucket of gradients above the compute-stream run,
    and the updates are the same bits."""
    peaks, weights = [], []
    for overlap in (False, True):
        torch.manual_seed(0)
        model = nn.Sequential(*[nn.Linear(1024, 1024, bias=False) for _ in range(8)]).cuda()
        opt = InBackwardOptimizer(model.parameters(), torch.optim.AdamW, bucket_cap_mb=4.0, overlap=overlap, lr=1e-3)
        x = torch.randn(256, 1024, device="cuda")
        for _ in range(3):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            model(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
            torch.cuda.synchronize()
        peaks.append(torch.cuda.max_memory_allocated() - base)
        weights.append([p.detach().clone() for p in model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*weights))
    assert peaks[1] <= peaks[0] + 2 * 4 * 2**20 + 2**20, f"peaks {peaks}"  # a bucket of gradients, its temporaries


@pytest.mark.gpu
@pytest.mark.parametrize(
    "cls,kw,side",
    [
        (torch.optim.SGD, dict(lr=0.1), False),
        (torch.optim.SGD, dict(lr=0.1, momentum=0.9), True),
        (torch.optim.AdamW, dict(lr=1e-3), True),
    ],
)
def test_cuda_overlap_leaves_plain_sgd_on_the_compute_stream(cls: type, kw: dict, side: bool) -> None:
    """overlap=True puts a bucket's update on a side stream unless it is plain SGD (one add)."""
    model = nn.Sequential(*[nn.Linear(256, 256, bias=False) for _ in range(3)]).cuda()
    opt = InBackwardOptimizer(model.parameters(), cls, bucket_cap_mb=0.25, overlap=True, **kw)
    model(torch.randn(8, 256, device="cuda")).sum().backward()
    opt.step()
    torch.cuda.synchronize()
    assert bool(opt._overlap.streams) == side


def test_overlap_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="overlap"):
        InBackwardOptimizer(nn.Linear(2, 2).parameters(), torch.optim.SGD, lr=0.1, overlap=1)
