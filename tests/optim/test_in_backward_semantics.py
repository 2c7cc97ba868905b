"""torch.optim semantics that InBackwardOptimizer keeps, or refuses with a clear error where the update
already ran in backward (issue 33 items 1, 2 and 5):

* ``zero_grad(set_to_none=False)``: a parameter given a gradient once keeps a zeroed ``.grad`` in
  torch's loop, and ``step()`` steps it in every later step, with or without a new gradient (weight
  decay, momentum, Adam's moments); bitwise against torch's loop, clipping and accumulation included.
* Code between backward and ``step()`` that reads the gradients (``clip_grad_norm_``,
  ``clip_grad_value_``, a gradient norm, ``zero_grad(set_to_none=False)``) raises: the update already
  ran with them (it used to see no gradient: ``clip_grad_norm_`` returned 0.0 and clipped nothing).
* ``head_weight`` with two forwards of the loss and one backward of their sum: the head takes the
  dense path for that step (bitwise torch's), instead of updating it with one loss's part and then
  raising.
"""

from __future__ import annotations

import os
from typing import Any, Optional

import pytest
import torch
from torch import nn

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from ojas_ref import InBackwardOptimizer, linear_cross_entropy  # noqa: E402
from ojas_ref.optim.in_backward import _live_grad  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

OPTIMIZERS = {
    "adamw": (torch.optim.AdamW, dict(lr=0.1, weight_decay=0.1)),
    "adam_amsgrad": (torch.optim.Adam, dict(lr=0.05, weight_decay=0.01, amsgrad=True)),
    "sgd_momentum": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, weight_decay=0.01)),
    "sgd": (torch.optim.SGD, dict(lr=0.1)),
}
CLIP = 0.5  # below this model's gradient norms: clipping acts (checked in the test)


class _TwoBranches(nn.Module):
    """A trunk every step uses and a branch that some steps (some micro-batches) do not."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.trunk, self.branch = nn.Linear(4, 4), nn.Linear(4, 2)

    def loss(self, step: int, micro: int, uses_branch: bool) -> torch.Tensor:
        x = torch.randn(3, 4, generator=torch.Generator().manual_seed(100 * step + micro))
        h = torch.tanh(self.trunk(x))
        return h.square().sum() + (self.branch(h).sum() if uses_branch else 0.0)


def _uses_branch(step: int, micro: int, k: int) -> bool:
    """Step 0 uses the branch (in micro-batch 0); odd steps do not use it at all."""
    return step % 2 == 0 and micro == 0 if k > 1 else step % 2 == 0


def _run(
    name: str,
    in_backward: bool,
    *,
    k: int = 1,
    clip: Optional[float] = None,
    cap: float = 64.0,
    set_to_none: tuple[bool, ...] = (False,) * 5,
) -> tuple[nn.Module, torch.optim.Optimizer, list[float]]:
    """``len(set_to_none)`` steps of the standard loop (``in_backward=False``) or of InBackwardOptimizer,
    each ending with ``zero_grad(set_to_none=set_to_none[step])``; the standard loop's clipped norms."""
    cls, kw = OPTIMIZERS[name]
    model = _TwoBranches()
    if in_backward:
        opt = InBackwardOptimizer(
            model.parameters(), cls, accumulation_steps=k, max_grad_norm=clip, bucket_cap_mb=cap, **kw
        )
    else:
        opt = cls(model.parameters(), **kw)
    norms = []
    for step, none in enumerate(set_to_none):
        for micro in range(k):
            loss = model.loss(step, micro, _uses_branch(step, micro, k)) / k
            opt.backward(loss) if in_backward else loss.backward()
        if clip is not None and not in_backward:
            norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), clip)))
        opt.step()
        opt.zero_grad(set_to_none=none)
    return model, opt, norms


def _assert_same(a: tuple[nn.Module, torch.optim.Optimizer, Any], b: tuple[nn.Module, torch.optim.Optimizer, Any]):
    """Bitwise equal parameters and optimizer state."""
    for (name, p), q in zip(a[0].named_parameters(), b[0].parameters()):
        assert torch.equal(p, q), f"{name} differs by {float((p - q).abs().max()):.3g}"
    sa, sb = a[1].state_dict()["state"], b[1].state_dict()["state"]
    assert sa.keys() == sb.keys()
    for i in sa:
        assert sa[i].keys() == sb[i].keys()
        for key, value in sa[i].items():
            assert torch.equal(value, sb[i][key]) if isinstance(value, torch.Tensor) else value == sb[i][key], (
                f"state {key!r} of parameter {i} differs"
            )


# --------------------------------------------------------------------------
# zero_grad(set_to_none=False)
# --------------------------------------------------------------------------


@pytest.mark.parametrize("cap", [0.0, 64.0], ids=["cap0", "cap64"])
@pytest.mark.parametrize("k,clip", [(1, None), (3, None), (1, CLIP), (3, CLIP)], ids=["k1", "k3", "k1clip", "k3clip"])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_zero_grad_keep_matches_standard_loop(name: str, k: int, clip: Optional[float], cap: float) -> None:
    """The branch gets no gradient in odd steps: torch's loop steps it on its zeroed .grad (weight
    decay, momentum, moments), and so does InBackwardOptimizer; bitwise over five steps."""
    standard = _run(name, False, k=k, clip=clip)
    in_backward = _run(name, True, k=k, clip=clip, cap=cap)
    if clip is not None:
        assert min(standard[2]) > clip, "the test must exercise clipping"
    _assert_same(standard, in_backward)
    if name != "sgd":  # the branch did move in the steps without its gradient
        assert not torch.equal(
            _run(name, False, set_to_none=(False,))[0].branch.weight,
            _run(name, False, set_to_none=(False, False))[0].branch.weight,
        )


@pytest.mark.parametrize("name", ["adamw", "sgd_momentum"])
def test_zero_grad_set_to_none_true_again_stops_the_zero_steps(name: str) -> None:
    """set_to_none=True drops the zeroed gradients in torch's loop: from then on a parameter without
    a gradient is not stepped until it gets one again; any mix of the two calls matches."""
    pattern = (False, False, True, True, False, False, True)
    _assert_same(_run(name, False, set_to_none=pattern), _run(name, True, set_to_none=pattern))


def test_zero_grad_keep_accumulates_as_zero_plus_gradient() -> None:
    """torch's loop adds the gradient into the zeroed .grad: 0.0 + (-0.0) is +0.0, which plain SGD
    makes visible on a -0.0 weight (-0.0 + (-lr) * (+0.0) = -0.0, against +0.0 from a -0.0 gradient).
    The first step's gradient +0.0 keeps the weight -0.0; the second's is -0.0."""
    results = []
    for in_backward in (False, True):
        p = nn.Parameter(torch.tensor([-0.0, 1.0]))
        opt = InBackwardOptimizer([p], torch.optim.SGD, lr=0.5) if in_backward else torch.optim.SGD([p], lr=0.5)
        for c in (torch.tensor([0.0, 2.0]), torch.tensor([-0.0, 2.0])):
            (p * c).sum().backward()  # gradient c
            opt.step()
            opt.zero_grad(set_to_none=False)
        results.append(p.detach().clone())
    assert torch.equal(torch.signbit(results[0]), torch.signbit(results[1])) and torch.equal(*results)
    assert torch.signbit(results[0][0])  # the case that differs without 0.0 + g


def test_zero_grad_keep_between_backward_and_step_raises() -> None:
    """torch's loop would step on the zeroed gradients; the update already ran: refused."""
    model = _TwoBranches()
    opt = InBackwardOptimizer(model.parameters(), torch.optim.AdamW, lr=0.1)
    model.loss(0, 0, True).backward()
    with pytest.raises(
        RuntimeError, match=r"already updated inside this backward pass.*zero_grad\(set_to_none=False\)"
    ):
        opt.zero_grad(set_to_none=False)
    opt.step()
    opt.zero_grad(set_to_none=False)  # after step(): the usual place
    before = model.branch.weight.detach().clone()
    model.loss(1, 0, False).backward()
    opt.step()
    assert not torch.equal(before, model.branch.weight)  # stepped on its zero gradient (weight decay)


# --------------------------------------------------------------------------
# Reading the gradients between backward and step()
# --------------------------------------------------------------------------


@pytest.mark.parametrize("read", ["clip_grad_norm_", "clip_grad_value_", "norm", "get_total_norm"])
def test_reading_consumed_gradients_raises(read: str) -> None:
    """Hugging Face Trainer's order, loss.backward(); clip_grad_norm_(...); step(), without
    max_grad_norm: the update ran unclipped in backward; clip_grad_norm_ used to find no gradient
    and return 0.0. It raises and names the remedy; .grad holds no memory, and after step() is None."""
    model = _TwoBranches()
    opt = InBackwardOptimizer(model.parameters(), torch.optim.AdamW, lr=0.1)
    model.loss(0, 0, True).backward()
    assert all(p.grad is not None and _live_grad(p) is None for p in model.parameters())
    reads = {
        "clip_grad_norm_": lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0),
        "clip_grad_value_": lambda: torch.nn.utils.clip_grad_value_(model.parameters(), 0.1),
        "norm": lambda: model.trunk.weight.grad.norm(),
        "get_total_norm": lambda: torch.nn.utils.get_total_norm([p.grad for p in model.parameters()]),
    }
    with pytest.raises(
        RuntimeError,
        match=r"already updated inside this backward pass.*"
        r"InBackwardOptimizer\(\.\.\., max_grad_norm=\.\.\.\)",
    ):
        reads[read]()
    assert "consumed by InBackwardOptimizer" in repr(model.trunk.weight.grad)
    opt.step()
    assert all(p.grad is None for p in model.parameters())
    model.loss(1, 0, True).backward()  # training goes on
    opt.step()


def test_max_grad_norm_is_clip_grad_norm_() -> None:
    """The remedy the error names: max_grad_norm= and optimizer.backward(loss) give the standard
    loop's backward, clip_grad_norm_, step, bitwise."""
    standard = _run("adamw", False, clip=CLIP, set_to_none=(True,) * 3)
    _assert_same(standard, _run("adamw", True, clip=CLIP, set_to_none=(True,) * 3))
    assert min(standard[2]) > CLIP


def test_head_weight_gradient_is_consumed_too() -> None:
    """The head updated inside the loss: its .grad is the placeholder too until step()."""
    torch.manual_seed(0)
    emb, head = nn.Embedding(11, 4), nn.Parameter(torch.randn(7, 4))
    opt = InBackwardOptimizer([*emb.parameters(), head], torch.optim.SGD, lr=0.1, head_weight=head)
    linear_cross_entropy(emb(torch.arange(5)), head, torch.arange(5), impl="reference", head_update=opt).backward()
    with pytest.raises(RuntimeError, match="already updated inside this backward pass"):
        torch.nn.utils.clip_grad_norm_([head], 1.0)
    opt.step()
    assert head.grad is None


# --------------------------------------------------------------------------
# head_weight: two forwards of the loss, one backward
# --------------------------------------------------------------------------

V, D, EMB, N = 13, 6, 17, 9
CHUNKS = (4, 5)


def _head_model() -> tuple[nn.Embedding, nn.Parameter]:
    torch.manual_seed(0)
    return nn.Embedding(EMB, D), nn.Parameter(torch.randn(V, D))


def _tokens(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, EMB, (N,), generator=g), torch.randint(0, V, (N,), generator=g)


def _head_loss(
    emb: nn.Embedding, head: torch.Tensor, seed: int, reduction: str = "mean", head_update=None
) -> torch.Tensor:
    ids, target = _tokens(seed)
    loss = linear_cross_entropy(
        torch.tanh(emb(ids)),
        head,
        target,
        reduction=reduction,
        chunk_size=CHUNKS,
        impl="reference",
        head_update=head_update,
    )
    return loss if reduction != "none" else loss.sum()


def _head_run(mode: str, losses_per_step: int, reduction: str = "mean", steps: int = 3, stale: bool = False):
    """``steps`` steps of ``losses_per_step`` forwards and one backward of their sum; ``stale``: a
    forward whose loss is kept alive and never back-propagated, made before the others each step."""
    emb, head = _head_model()
    params = [*emb.parameters(), head]
    opt = (
        torch.optim.SGD(params, lr=0.1)
        if mode == "standard"
        else InBackwardOptimizer(params, torch.optim.SGD, lr=0.1, bucket_cap_mb=0, head_weight=head)
    )
    head_update = opt if mode == "head" else None
    kept = []
    for step in range(steps):
        if stale:
            kept.append(_head_loss(emb, head, 1000 + step, reduction, head_update))
        sum(_head_loss(emb, head, 10 * step + i, reduction, head_update) for i in range(losses_per_step)).backward()
        opt.step()
        opt.zero_grad()
    return emb.weight.detach().clone(), head.detach().clone(), opt


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("losses", [2, 3])
def test_head_two_forwards_one_backward_matches_standard_loop(losses: int, reduction: str) -> None:
    """The head's update needs the sum of the losses' gradients: the loss's backward does not
    update it (it would have updated every row with one loss's part, then raised); the dense path
    runs instead, bitwise the standard loop."""
    in_backward = _head_run("head", losses, reduction)
    standard = _head_run("standard", losses, reduction)
    assert torch.equal(in_backward[0], standard[0]) and torch.equal(in_backward[1], standard[1])
    assert not torch.equal(in_backward[1], _head_model()[1])


def test_head_one_backward_with_a_stale_forward_still_updates_inside_the_loss() -> None:
    """A forward kept alive whose backward does not run in this pass does not count: the loss
    updates the head itself (no [V, D] gradient reaches its hook), bitwise the standard loop."""
    seen = []
    emb, head = _head_model()
    opt = InBackwardOptimizer([*emb.parameters(), head], torch.optim.SGD, lr=0.1, head_weight=head)
    head.register_post_accumulate_grad_hook(lambda p: seen.append(_live_grad(p) is not None))
    stale = _head_loss(emb, head, 1, head_update=opt)
    _head_loss(emb, head, 2, head_update=opt).backward()
    assert opt._head_done and not any(seen)
    opt.step()
    del stale
    in_backward, standard = _head_run("head", 1, stale=True), _head_run("standard", 1, stale=True)
    assert torch.equal(in_backward[0], standard[0]) and torch.equal(in_backward[1], standard[1])


def test_head_second_backward_without_step_changes_nothing() -> None:
    """Two forwards, two backward calls without step(): the second is refused (two updates are not
    one on the summed gradient) before it changes any parameter."""
    emb, head = _head_model()
    opt = InBackwardOptimizer([*emb.parameters(), head], torch.optim.SGD, lr=0.1, head_weight=head)
    first, second = _head_loss(emb, head, 1, head_update=opt), _head_loss(emb, head, 2, head_update=opt)
    first.backward()
    after_first = [emb.weight.detach().clone(), head.detach().clone()]
    with pytest.raises(RuntimeError, match=r"already updated since the last optimizer.step\(\)"):
        second.backward()
    assert torch.equal(emb.weight, after_first[0]) and torch.equal(head, after_first[1])
    del opt


def test_zero_grad_keep_with_host_state_matches_standard_loop() -> None:
    """The zero steps at step() go through the same buckets: state_device="cpu" too."""
    cls, kw = OPTIMIZERS["adamw"]
    standard = _run("adamw", False)
    model = _TwoBranches()
    opt = InBackwardOptimizer(model.parameters(), cls, state_device="cpu", bucket_cap_mb=0, **kw)
    for step in range(5):
        model.loss(step, 0, _uses_branch(step, 0, 1)).backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
    _assert_same(standard, (model, opt))


@pytest.mark.parametrize("change", ["double", "bias shape"])
def test_placeholder_follows_a_parameter_changed_in_place(change: str) -> None:
    """A parameter whose data changed dtype (``module.double()``) or shape since its last update gets
    a placeholder of its new dtype and shape (torch's ``.grad`` setter refuses the old one), whose
    use raises as any; training goes on."""
    torch.manual_seed(0)
    lin = nn.Linear(4, 2)
    opt = InBackwardOptimizer(lin.parameters(), torch.optim.SGD, lr=0.1)
    x = torch.randn(3, 4)
    lin(x).sum().backward()
    opt.step()
    if change == "double":
        lin.double()  # the same Parameter objects, their .data replaced
        x = x.double()
    else:
        lin.bias.data = torch.zeros(1)  # broadcast over the two outputs
    lin(x).sum().backward()
    for p in lin.parameters():
        assert _live_grad(p) is None and (p.grad.shape, p.grad.dtype) == (p.shape, p.dtype)
    with pytest.raises(RuntimeError, match="already updated inside this backward pass"):
        lin.bias.grad.sum()
    opt.step()
    assert all(p.grad is None for p in lin.parameters())


def test_dropping_the_optimizer_releases_the_placeholders() -> None:
    """An optimizer collected between backward and step() leaves no placeholder behind (a later
    optimizer's backward would add into it)."""
    import gc

    model = _TwoBranches()
    opt = InBackwardOptimizer(model.parameters(), torch.optim.SGD, lr=0.1)
    model.loss(0, 0, True).backward()
    assert model.trunk.weight.grad is not None
    del opt
    gc.collect()
    assert all(p.grad is None for p in model.parameters())


# --------------------------------------------------------------------------
# param_groups edited after construction
# --------------------------------------------------------------------------


@pytest.mark.parametrize("edit", ["pop", "replace", "move"])
def test_parameter_leaving_its_group_raises_before_any_update(edit: str) -> None:
    """torch.optim no longer steps a parameter removed from param_groups (and steps a moved one with
    its new group's hyper-parameters); its hook would go on updating it with the old group's: the
    next backward raises at its first hook, before any update."""
    model = _TwoBranches()
    opt = InBackwardOptimizer(
        [{"params": model.trunk.parameters()}, {"params": model.branch.parameters(), "lr": 0.01}],
        torch.optim.SGD,
        lr=0.1,
    )
    model.loss(0, 0, True).backward()
    opt.step()
    groups = opt.param_groups
    if edit == "pop":
        groups[1]["params"].pop()
    elif edit == "replace":
        groups[1]["params"] = groups[1]["params"][:1]
    else:
        groups[0]["params"].append(groups[1]["params"].pop())
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(RuntimeError, match=r"param_groups changed after InBackwardOptimizer hooked its parameters"):
        model.loss(1, 0, True).backward()
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))


def test_hyper_parameters_and_added_groups_are_fine() -> None:
    """Editing hyper-parameters in place and add_param_group are torch's semantics (no error)."""
    standard, in_backward = [], []
    for out, make in (
        (standard, lambda ps: torch.optim.AdamW(ps, lr=0.1)),
        (in_backward, lambda ps: InBackwardOptimizer(ps, torch.optim.AdamW, lr=0.1)),
    ):
        model = _TwoBranches()
        opt = make(list(model.trunk.parameters()))
        for step in range(4):
            if step == 1:
                opt.param_groups[0]["weight_decay"] = 0.3
                opt.param_groups[0]["betas"] = (0.5, 0.9)
            if step == 2:
                opt.add_param_group({"params": list(model.branch.parameters()), "lr": 0.02})
            model.loss(step, 0, step >= 2).backward()
            opt.step()
            opt.zero_grad()
        out.extend(p.detach().clone() for p in model.parameters())
    assert all(torch.equal(a, b) for a, b in zip(standard, in_backward))


# --------------------------------------------------------------------------
# Hyper-parameters changed, and step pre-hooks, between backward and step()
# --------------------------------------------------------------------------


@pytest.mark.parametrize("change", ["lr", "betas", "scheduler_first", "tensor_lr_in_place"])
def test_hyper_parameters_changed_between_backward_and_step_raise(change: str) -> None:
    """torch.optim's step() reads the hyper-parameters after backward; the update here read them in
    backward, so a change in between (an lr set there, an LR scheduler stepped before
    optimizer.step()) would silently apply one step late: step() raises instead."""
    model = _TwoBranches()
    lr = torch.tensor(0.1) if change == "tensor_lr_in_place" else 0.1
    opt = InBackwardOptimizer(model.parameters(), torch.optim.Adam, lr=lr)
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    model.loss(0, 0, True).backward()
    opt.step()
    scheduler.step()  # after optimizer.step(): the usual order, fine
    model.loss(1, 0, True).backward()
    group = opt.param_groups[0]
    if change == "lr":
        group["lr"] = 0.01
    elif change == "betas":
        group["betas"] = (0.5, 0.9)
    elif change == "scheduler_first":
        scheduler.step()
    else:
        group["lr"].fill_(0.01)
    with pytest.raises(
        RuntimeError,
        match=r"param_groups\[0\] \['(lr|betas)'\] changed between the backward pass "
        r"and step\(\)",
    ):
        opt.step()


def test_step_pre_hook_is_refused() -> None:
    """A step pre-hook runs before torch.optim's update (to edit gradients or hyper-parameters for
    it); here the update ran in backward: registering one raises, a post-hook is fine."""
    model = _TwoBranches()
    opt = InBackwardOptimizer(model.parameters(), torch.optim.SGD, lr=0.1)
    with pytest.raises(NotImplementedError, match="register_step_pre_hook is not supported"):
        opt.register_step_pre_hook(lambda *args: None)
    calls = []
    opt.register_step_post_hook(lambda *args: calls.append(1))
    model.loss(0, 0, True).backward()
    opt.step()
    assert calls == [1]
