"""The updates of :class:`~ojas_ref.optim.in_backward.InBackwardOptimizer` that skip
``Optimizer.step``'s per-call Python, with torch's own arithmetic: plain SGD as one
``torch._foreach_add_`` (:func:`plain_sgd_lr`) and Adam / AdamW through torch's functional ``adam``
(:func:`step_adam_directly`). Each is checked bitwise against ``step()`` in
tests/optim/test_in_backward.py."""

from __future__ import annotations

import inspect
from typing import Any, Optional

import torch
from torch import Tensor
from torch.optim import adam as _adam, optimizer as _optim

#: ``torch.optim.Adam.step`` without torch's wrappers (``Optimizer`` wraps a class's ``step`` for its
#: hooks when the first instance is made): AdamW's too where AdamW is Adam (:func:`step_adam_directly`)
_ADAM_STEP = inspect.unwrap(torch.optim.Adam.step)


def plain_sgd_violations(group: dict[str, Any]) -> list[str]:
    """The settings of ``group`` (``"momentum=0.9"``, ...) that make an SGD update other than plain:
    momentum, weight decay, maximize, fused, differentiable."""
    return [
        f"{k}={group.get(k)!r}"
        for k, ok in (
            ("momentum", group.get("momentum", 0) == 0),
            ("weight_decay", group.get("weight_decay", 0) == 0),
            ("maximize", not group.get("maximize", False)),
            ("fused", not group.get("fused", False)),
            ("differentiable", not group.get("differentiable", False)),
        )
        if not ok
    ]


def plain_sgd_lr(bucket_opt: Optional[torch.optim.Optimizer], group: dict[str, Any]) -> Optional[float]:
    """The learning rate when the update of ``group`` by ``bucket_opt`` is plain SGD
    (``torch.optim.SGD`` itself, no momentum, weight decay, maximize, differentiable or fused step,
    a float lr, no optimizer step hooks), else None. Its step is then ``p.add_(p.grad, alpha=-lr)``
    on both of torch's paths (``_single_tensor_sgd``, and ``_multi_tensor_sgd``'s
    ``torch._foreach_add_``), which :meth:`InBackwardOptimizer._update` calls directly: the same
    arithmetic without ``Optimizer.step``'s per-call cost (about 60 us of Python per bucket, against
    10 us for the update; tests/optim/test_in_backward.py checks the bits against ``SGD.step``)."""
    if type(bucket_opt) is not torch.optim.SGD:
        return None
    lr = group["lr"]
    if (
        group["momentum"] != 0
        or group["weight_decay"] != 0
        or group["maximize"]
        or group["differentiable"]
        or group.get("fused")
        or isinstance(lr, torch.Tensor)
        or bucket_opt._optimizer_step_pre_hooks
        or bucket_opt._optimizer_step_post_hooks
        or _optim._global_optimizer_pre_hooks
        or _optim._global_optimizer_post_hooks
    ):
        return None
    return lr


def steps_as_adam(cls: type) -> bool:
    """Whether ``cls.step`` is ``torch.optim.Adam.step`` itself under torch's wrappers (Adam, and
    AdamW where AdamW is Adam with ``decoupled_weight_decay``); cached per step function, which
    ``Optimizer`` wraps once, at the class's first instance."""
    step = cls.step
    hit = _STEPS_AS_ADAM.get(step)
    if hit is None:
        hit = _STEPS_AS_ADAM[step] = inspect.unwrap(step) is _ADAM_STEP
    return hit


#: step function -> whether it is ``torch.optim.Adam.step`` unwrapped (:func:`steps_as_adam`)
_STEPS_AS_ADAM: dict[Any, bool] = {}


def step_adam_directly(bucket_opt: torch.optim.Optimizer, group: dict[str, Any], bucket: list[Tensor]) -> bool:
    """Step the bucket by torch's functional ``adam`` with the arguments ``Adam.step`` passes it,
    when the group's class steps with ``torch.optim.Adam.step`` itself (Adam, and AdamW where it
    is Adam with ``decoupled_weight_decay``), every parameter has its state already, a dense real
    gradient, and the step is the plain one (not capturable or differentiable, a float lr, no step
    hooks, no ``grad_scale`` / ``found_inf``, not inside a CUDA graph capture); return whether it
    did. The same call ``Adam.step`` makes, foreach, single-tensor or fused (``fused=True``, Hugging
    Face Trainer's default: ``adam`` then runs ``_fused_adam``, as under ``Adam.step``), without its
    per-call Python (``_init_group``, the step wrapper and its ``record_function``; under
    torch.profiler on the H200 a bf16 1.06B step spent 22 ms of host time in 26 bucket
    ``AdamW.step`` calls against 11 ms in the standard loop's one, 2026-12-01:
    ``git show f14c11e:benchmarks/RESULTS.md``); tests/optim/test_in_backward.py checks the bits
    against the standard loop."""
    if (
        not steps_as_adam(type(bucket_opt))
        or group["capturable"]
        or group["differentiable"]
        or isinstance(group["lr"], Tensor)
        or bucket_opt._optimizer_step_pre_hooks
        or bucket_opt._optimizer_step_post_hooks
        or _optim._global_optimizer_pre_hooks
        or _optim._global_optimizer_post_hooks
        or getattr(bucket_opt, "grad_scale", None) is not None
        or getattr(bucket_opt, "found_inf", None) is not None
        or (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())
    ):
        return False
    amsgrad = group["amsgrad"]
    grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps = [], [], [], [], []
    for p in bucket:
        state = bucket_opt.state.get(p)
        if not state or p.grad.is_sparse or torch.is_complex(p):
            return False
        grads.append(p.grad)
        exp_avgs.append(state["exp_avg"])
        exp_avg_sqs.append(state["exp_avg_sq"])
        if amsgrad:
            max_exp_avg_sqs.append(state["max_exp_avg_sq"])
        steps.append(state["step"])
    beta1, beta2 = group["betas"]
    decoupled = {"decoupled_weight_decay": group["decoupled_weight_decay"]} if "decoupled_weight_decay" in group else {}
    with torch.no_grad():
        _adam.adam(
            bucket,
            grads,
            exp_avgs,
            exp_avg_sqs,
            max_exp_avg_sqs,
            steps,
            amsgrad=amsgrad,
            has_complex=False,
            beta1=beta1,
            beta2=beta2,
            lr=group["lr"],
            weight_decay=group["weight_decay"],
            eps=group["eps"],
            maximize=group["maximize"],
            foreach=group["foreach"],
            capturable=False,
            differentiable=False,
            fused=group["fused"],
            grad_scale=None,
            found_inf=None,
            **decoupled,
        )
    return True


def not_plain_sgd(bucket_opt: Optional[torch.optim.Optimizer], group: dict[str, Any]) -> str:
    """Why the update of ``group`` by ``bucket_opt`` is not plain SGD (for the errors of head_weight)."""
    bad = plain_sgd_violations(group)
    if isinstance(group.get("lr"), Tensor):
        bad.append(f"lr={group.get('lr')!r}")
    if (
        bucket_opt is not None
        and (bucket_opt._optimizer_step_pre_hooks or bucket_opt._optimizer_step_post_hooks)
        or _optim._global_optimizer_pre_hooks
        or _optim._global_optimizer_post_hooks
    ):
        bad.append("optimizer step hooks registered (they would not run for the head)")
    return (", ".join(bad) or "not torch.optim.SGD") + (
        "; only momentum=0, weight_decay=0, maximize=False, fused=False, differentiable=False, a float lr and "
        "no step hooks are supported (with momentum or weight decay use the dense path: no head_weight)"
    )
