"""The link between :func:`ojas_ref.linear_cross_entropy` and the
:class:`~ojas_ref.optim.in_backward.InBackwardOptimizer` passed to it as ``head_update``, which
updates the head inside the loss's backward (``InBackwardOptimizer(head_weight=...)``, plain SGD):
:func:`head_update_link` checks the argument at the forward and returns a :class:`_HeadUpdate`,
which the reference's and the Triton kernel's autograd Functions call in their backward.

The update itself (the optimizer's side, with its errors and the float behaviour of the reference
and the kernel) is ``ojas_ref/optim/_head_update.py``:
Ojas.InBackward.ChunkedHead.chunked_head_sgd_eq_standard (the reference's chunk loop) and
Ojas.InBackward.ChunkedHead.chunked_head_dh_first_code_eq_standard (the kernel's)."""

from __future__ import annotations

import weakref
from typing import Any, Optional

import torch
from torch import Tensor

from ojas_ref.optim._head_update import will_accumulate
from ojas_ref.optim.in_backward import InBackwardOptimizer


def head_update_link(
    head_update: Any, linear_weight: Tensor, used_weight: Tensor, linear_bias: Optional[Tensor], *inputs: Tensor
) -> Optional["_HeadUpdate"]:
    """The forward's link to ``head_update`` (None for None, or when grad mode is off: no backward
    will run), after checking it: the :class:`InBackwardOptimizer` constructed with
    ``head_weight=linear_weight`` (else TypeError / ValueError naming ``head_update``), a
    ``used_weight`` that is ``linear_weight`` itself (not autocast's copy), no ``linear_bias``, and
    a head that the computation of ``inputs`` does not use (a tied embedding) (else
    NotImplementedError / ValueError)."""
    if head_update is None:
        return None
    if not isinstance(head_update, InBackwardOptimizer):
        raise TypeError(
            "head_update must be None or the InBackwardOptimizer constructed with head_weight=linear_weight "
            f"(it updates the head inside this loss's backward), got {type(head_update).__name__}"
        )
    head = head_update._head
    if head is None:
        raise ValueError(
            "head_update is an InBackwardOptimizer constructed without head_weight: construct it with "
            "head_weight=linear_weight (the [V, D] weight passed to this loss) to update the head inside the "
            "loss's backward, or pass head_update=None"
        )
    if head is not linear_weight:
        raise ValueError(
            f"head_update's head_weight (shape {tuple(head.shape)}) is not this loss's linear_weight (shape "
            f"{tuple(linear_weight.shape)}): pass the weight the optimizer was constructed with "
            "(InBackwardOptimizer(head_weight=...)) as linear_weight, or head_update=None"
        )
    if not torch.is_grad_enabled():
        return None
    if used_weight is not linear_weight:
        raise NotImplementedError(
            "linear_cross_entropy: the head weight is updated inside the loss (head_update=...) but torch.autocast "
            "casts it to another dtype here, so the loss sees a copy: not supported. Train the model in one dtype "
            "without autocast, or pass head_update=None (and construct the optimizer without head_weight)"
        )
    if linear_bias is not None:
        raise NotImplementedError(
            "linear_cross_entropy: linear_bias with the head weight updated inside the loss (head_update=...) is "
            "not supported; use a head without a bias, or pass head_update=None (and construct the optimizer "
            "without head_weight)"
        )
    head_update._check_head_forward(linear_weight, *inputs)
    return _HeadUpdate(head_update, linear_weight)


class _HeadUpdate:
    """One forward's link to the InBackwardOptimizer that updates the head ``weight`` inside the
    backward (held weakly, as the parameters' hooks hold it). The reference's and the Triton
    kernel's autograd Functions call :meth:`begin` at the start of their backward and
    :meth:`end` after the last row's update. Until its backward begins, the optimizer lists it
    (weakly: a forward whose graph is dropped leaves the list) among the forwards whose backward
    may still send the head a gradient (``InBackwardOptimizer._head_forwards``)."""

    def __init__(self, opt: Any, weight: Tensor) -> None:
        self._opt = weakref.ref(opt)
        self.weight = weight
        self.used = False
        self._node: Optional[Any] = None  # weak reference to the loss's autograd node, or None (unknown)
        opt._head_forwards.add(self)

    def attach(self, loss: Tensor) -> None:
        """Remember (weakly) the autograd node of the ``loss`` this forward returned, so that
        :meth:`runs_in_this_pass` can tell whether a backward pass runs it."""
        try:
            self._node = weakref.ref(loss.grad_fn)
        except TypeError:  # a node of torch's own (not weakly referable): unknown, taken as run
            self._node = None

    def runs_in_this_pass(self) -> bool:
        """Whether the backward pass under way runs this forward's backward (True when its node is
        unknown)."""
        node = None if self._node is None else self._node()
        return node is None or will_accumulate(node)

    def begin(self, node: Any) -> Optional[Any]:
        """Before the saved tensors are read: ``step(v0, v1, grad)``, the plain-SGD update of rows
        [v0, v1) from their whole gradient (in the weight's dtype), or None when this backward does
        not accumulate into the head (``autograd.grad``, ``backward(inputs=...)`` without it), or when
        the backward of another forward of the head's loss runs in this pass too (two forwards, one
        backward of the summed losses; ``InBackwardOptimizer._head_shared_pass``): the head's
        gradient is then returned as usual (summed over the forwards by autograd and, in the second
        case, stepped in the head's hook: the dense path). ``node``: the head's AccumulateGrad.
        Raises on a second backward through the graph (the weights the forward used are gone)."""
        if self.used:
            raise RuntimeError(
                "linear_cross_entropy: a second backward through this graph (retain_graph=True), whose first "
                "backward updated the head weight in place (InBackwardOptimizer(head_weight=...)): the weights the "
                "forward used are gone. Run one backward per forward (or construct the optimizer without "
                "head_weight)"
            )
        opt = self._opt()
        if opt is None or not will_accumulate(node):
            return None  # a collected optimizer: the head's hook raises with the reason
        opt._head_forwards.discard(self)
        if opt._head_shared_pass():
            return None  # the head's gradients of several forwards are summed first: the dense path
        self.used = True
        lr, weight = opt._head_step_lr(), self.weight
        return lambda v0, v1, grad: opt._head_update(weight, v0, v1, grad, lr)

    def end(self) -> None:
        """Every row of the head was updated."""
        opt = self._opt()
        if opt is not None:
            opt._head_finished()
