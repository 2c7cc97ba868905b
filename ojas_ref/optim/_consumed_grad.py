"""The ``.grad`` of a parameter that :class:`~ojas_ref.optim.in_backward.InBackwardOptimizer`
updated inside backward, until ``step()``: a placeholder without memory (:class:`_ConsumedGrad`)
whose every use raises with the reason (:class:`ConsumedGrads` puts and removes them), and the
messages of the refusals that go with it (a second gradient of an updated parameter, a gradient
of the head from another use, ``GradScaler``)."""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from ojas_ref.optim._distributed import DTensor

# Why a parameter updated since the last step() cannot take a gradient again (_hook, and _ConsumedGrad when
# autograd adds a new gradient into the placeholder).
_SECOND_UPDATE = (
    "a parameter already updated since the last optimizer.step() gets a gradient again (a second backward pass "
    "without optimizer.step() after the first?): every backward pass (every accumulation_steps-th with "
    "accumulation) updates the parameters in its hooks, so two backward passes would be two updates, not one on "
    "the summed gradient. Call optimizer.step() once per update (it marks the end of the step); to combine several "
    "losses in one update, back-propagate their sum, or set accumulation_steps to the number of backward passes "
    "per update. This backward pass is abandoned: call optimizer.zero_grad() before the next"
)

# Why the head updated inside the loss cannot take a gradient from another use (_hook, _ConsumedGrad).
_HEAD_OTHER_USE = (
    "the head weight (InBackwardOptimizer(head_weight=...)) was updated inside the linear cross-entropy's backward "
    "and then got a gradient from another use in the same graph (tied to the input embedding, or used elsewhere): "
    "its update needs the sum of all its gradients, so updating it inside the loss is not the standard step "
    "(Ojas.InBackward.Counterexamples.tied_per_use_neq_standard). Its rows were already updated with the "
    "loss's part: restore them from a checkpoint, and construct the optimizer without head_weight for a weight "
    "with several uses"
)

_GRAD_SCALER = (
    "InBackwardOptimizer cannot be used with an enabled torch.amp.GradScaler: unscaling and the inf/NaN check need "
    "all gradients before any update, but each parameter was already updated in backward with its scaled gradient. "
    "Use bfloat16 autocast (no scaler) instead"
)

# Why the gradient of an updated parameter cannot be read or changed before step() (_ConsumedGrad).
_CONSUMED = (
    "{op} was called on the .grad of a parameter that InBackwardOptimizer already updated inside this backward pass: "
    "the gradient was used by that update and freed, and until optimizer.step() .grad is a placeholder without memory "
    "whose every use raises. torch.optim reads .grad at step(), after code between backward and step(); here the "
    "update ran before it, so clipping (torch.nn.utils.clip_grad_norm_ / clip_grad_value_; it would return 0 and "
    "clip nothing), a gradient norm, zero_grad(set_to_none=False) or any other edit of the gradients cannot take "
    "effect. To clip, construct InBackwardOptimizer(..., max_grad_norm=...) and run optimizer.backward(loss) "
    "(clip_grad_norm_'s clipping before every update) instead of calling clip_grad_norm_; to read or edit "
    "gradients before the update, use a torch.optim optimizer"
)


class _ConsumedGrad(Tensor):
    """The ``.grad`` of a parameter from its update in backward to ``step()`` (see
    :attr:`InBackwardOptimizer.step`): the gradient was consumed and freed. No storage; any
    operation on it raises: outside backward with :data:`_CONSUMED` (the torch.optim effect of
    code between backward and step, e.g. ``clip_grad_norm_``, can no longer happen), inside
    backward (autograd adding a new gradient into it) with ``in_backward``, the reason a second
    gradient of an updated parameter is refused. Its shape, dtype and device are the parameter's,
    as ``.grad``'s must be."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, p: Tensor, in_backward: str) -> "_ConsumedGrad":
        t = Tensor._make_wrapper_subclass(cls, p.shape, strides=p.stride(), dtype=p.dtype, device=p.device)
        t.in_backward = in_backward
        return t

    def __repr__(self, *, tensor_contents: Any = None) -> str:
        return (
            f"<gradient of shape {tuple(self.shape)} consumed by InBackwardOptimizer's update in backward; "
            "freed until optimizer.step()>"
        )

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is torch.ops.aten._amp_foreach_non_finite_check_and_unscale_.default:
            raise RuntimeError(_GRAD_SCALER)
        if torch._C._current_graph_task_id() != -1:  # autograd accumulating a gradient into it
            consumed = next(t for t in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(t, cls))
            raise RuntimeError(consumed.in_backward)
        raise RuntimeError(_CONSUMED.format(op=func))


def _release_placeholders(params: list[Tensor]) -> None:
    """Set back to None each ``.grad`` of ``params`` that is a :class:`_ConsumedGrad` placeholder;
    empty the list. Also run when the optimizer is collected (a finalizer), so that its
    placeholders do not outlive it."""
    for p in params:
        if type(p.grad) is _ConsumedGrad:
            p.grad = None
    params.clear()


def _live_grad(p: Tensor) -> Optional[Tensor]:
    """``p.grad``, or None when there is none or it was consumed by an update (:class:`_ConsumedGrad`)."""
    grad = p.grad
    return None if grad is None or type(grad) is _ConsumedGrad else grad


class ConsumedGrads:
    """The parameters updated since the last ``step()``, whose ``.grad`` is their
    :class:`_ConsumedGrad` placeholder until then, and each parameter's placeholder (made once,
    by ``id()``)."""

    def __init__(self) -> None:
        self.params: list[Tensor] = []
        self.placeholders: dict[int, Tensor] = {}

    def consume(self, params: list[Tensor], in_backward: str = _SECOND_UPDATE) -> None:
        """After the update of ``params``: drop their gradients; each ``.grad`` is its parameter's
        placeholder :class:`_ConsumedGrad` until :meth:`release` (an FSDP2 shard's: None), whose
        every use raises, inside backward with ``in_backward``.  A placeholder is made at a
        parameter's first update and again when the parameter's shape, dtype or device changed
        since: torch's ``.grad`` setter refuses the old one then (checking them here would cost
        more than the rest of this loop, run for every parameter at every step)."""
        placeholders = self.placeholders
        for p in params:
            if isinstance(p, DTensor):
                p.grad = None
                continue
            holder = placeholders.get(id(p))
            if holder is None:
                holder = placeholders[id(p)] = _ConsumedGrad(p, in_backward)
            elif holder.in_backward is not in_backward:
                holder.in_backward = in_backward
            try:
                p.grad = holder
            except RuntimeError:  # another shape, dtype or device than when the placeholder was made
                holder = placeholders[id(p)] = _ConsumedGrad(p, in_backward)
                p.grad = holder
            self.params.append(p)

    def release(self) -> None:
        """The ``.grad`` of the parameters updated since the last ``step()`` goes from its
        placeholder to None (``torch.optim``'s after ``zero_grad()``), before the next backward
        pass, which would add its gradient into the placeholder."""
        _release_placeholders(self.params)
