"""Where :attr:`param_groups` changes under the updates of
:class:`~ojas_ref.optim.in_backward.InBackwardOptimizer` (no theorem; tests in
tests/optim/test_in_backward_semantics.py): :class:`GroupChecks` raises when a group's
hyper-parameters change between its update in backward and ``step()``, when a hooked parameter
leaves its group, and when a parameter without a hook gets a gradient."""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor


def _same_hyper(a: Any, b: Any) -> bool:
    """Whether hyper-parameter values ``a`` (kept at an update; a tensor cloned) and ``b`` (now) are
    the same: equal bits for tensors, ``==`` otherwise."""
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        return (
            isinstance(a, Tensor)
            and isinstance(b, Tensor)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and torch.equal(a.cpu(), b.cpu())
        )
    return bool(a == b)


class GroupChecks:
    """The hyper-parameters of each group at its first update since the last ``step()``, and the
    layout of :attr:`param_groups` (the ``id()`` of each group's parameters) when last checked, with
    the parameters without a hook found then.

    Args:
        constructor_args: the keyword arguments that ``optimizer_class`` takes: a group's
            hyper-parameters are its values for them.
    """

    def __init__(self, constructor_args: set[str]) -> None:
        self.constructor_args = constructor_args
        self.hyper_used: dict[int, dict[str, Any]] = {}
        # (group, index, parameter) of the parameters in param_groups without a hook, and the
        # id() of each group's parameters when they were found (check_layout)
        self.unhooked: list[tuple[int, int, Tensor]] = []
        self.layout: Optional[list[list[int]]] = None

    def hyper(self, group: dict[str, Any]) -> dict[str, Any]:
        """The hyper-parameters of ``group`` (its keys that ``optimizer_class`` takes)."""
        return {k: v for k, v in group.items() if k in self.constructor_args}

    def note_hyper(self, param_groups: list[dict[str, Any]], index: int) -> None:
        """At an update of group ``index``: keep its hyper-parameters at its first update of the step."""
        if index not in self.hyper_used:
            self.hyper_used[index] = {
                k: v.clone() if isinstance(v, Tensor) else v for k, v in self.hyper(param_groups[index]).items()
            }

    def check_hyper(self, param_groups: list[dict[str, Any]]) -> None:
        """At ``step()``: raise if a group updated since the last step() has other
        hyper-parameters now than at its update (an lr set, or an LR scheduler stepped, between
        backward and step()): ``torch.optim`` would use the new values in this step."""
        for index, used in self.hyper_used.items():
            now = self.hyper(param_groups[index]) if index < len(param_groups) else {}
            changed = [k for k, v in used.items() if not _same_hyper(v, now.get(k))]
            if changed:
                raise RuntimeError(
                    f"param_groups[{index}] {changed} changed between the backward pass and step(): torch.optim's "
                    "step() would use the new values in this step, but InBackwardOptimizer already updated the "
                    "parameters in backward with the old ones. Change hyper-parameters before the backward pass "
                    "(an LR scheduler: its step() after optimizer.step(), as usual)"
                )

    def check_layout(self, param_groups: list[dict[str, Any]], group_of: dict[Tensor, int]) -> None:
        """When the parameters of ``param_groups`` changed since the last check (a list edited,
        replaced, a group added): raise if a hooked parameter (``group_of``: its group) left the
        group it was hooked in (its hook would go on updating it, with that group's
        hyper-parameters, where ``torch.optim`` would not step it or would use its new group's),
        and find the parameters without a hook again (:meth:`check_unhooked`). Called at the first
        hook of each backward pass (before any update in it), at its end and at ``step()``;
        O(parameters) identity checks."""
        layout = [[id(p) for p in g["params"]] for g in param_groups]
        if layout == self.layout:
            return
        members = [set(ids) for ids in layout]
        left = sorted({i for p, i in group_of.items() if i >= len(members) or id(p) not in members[i]})
        if left:
            raise RuntimeError(
                f"param_groups changed after InBackwardOptimizer hooked its parameters: group(s) {left} no longer "
                "hold some of the parameters they were constructed with (removed, or moved to another group). Their "
                "hooks would keep updating them with the old group's hyper-parameters, where torch.optim would not "
                "step them or would use the new group's. Change hyper-parameters in place (param_groups[i]['lr'] "
                "= ...), freeze a parameter with requires_grad_(False) instead of removing it, or call "
                "remove_hooks() and construct a new InBackwardOptimizer over the new groups"
            )
        self.unhooked = [
            (i, j, p) for i, g in enumerate(param_groups) for j, p in enumerate(g["params"]) if p not in group_of
        ]
        self.layout = layout

    def check_unhooked(self, param_groups: list[dict[str, Any]], group_of: dict[Tensor, int]) -> None:
        """Raise if a parameter of ``param_groups`` without a hook (frozen at construction, unfrozen
        since) has a gradient: it would never be updated while its ``.grad`` grows."""
        self.check_layout(param_groups, group_of)
        unhooked = [(i, j) for i, j, p in self.unhooked if p.grad is not None]
        if unhooked:
            raise RuntimeError(
                f"parameter(s) {unhooked} ((group, index) in param_groups) have a gradient but no hook: they did "
                "not require grad when InBackwardOptimizer was constructed (unfrozen since?), so they are never "
                "updated while their .grad accumulates. Construct the optimizer after unfreezing, or leave "
                "frozen parameters out of params and pass them to add_param_group when you unfreeze them"
            )
