"""The head updated inside the linear cross-entropy's backward
(``InBackwardOptimizer(head_weight=...)``, plain SGD only, the optimizer passed to the loss as
``head_update=``): :class:`HeadUpdateMixin`, the methods that :func:`ojas_ref.linear_cross_entropy`'s
backward calls on the optimizer (through ``ojas_ref/functional/_linear_cross_entropy_head.py``).
A gradient of the whole head reaching it in a backward pass whose loss was not given
``head_update`` raises (:meth:`HeadUpdateMixin._check_head_gradient`), before anything is
accumulated or stepped: the loss did not update the head, and a dense step would keep the
``[V, D]`` gradient the option is for.

``Ojas.InBackward.ChunkedHead.chunked_head_sgd_eq_standard`` (the reference: per vocabulary
chunk, its dH part and its rows' whole gradients, then the rows' step) and
``Ojas.InBackward.ChunkedHead.chunked_head_dh_first_code_eq_standard`` (the Triton kernel: dH
in the forward, then per slab): backward then the step, every row once, no [V, D] gradient; a head
with another use (tied embeddings) raises
(``Ojas.InBackward.Counterexamples.tied_per_use_neq_standard``).

With ``head_weight`` the loss refuses (errors name the reason) a head with a bias, a head used by
the computation of its input (tied to the embedding), autocast casting the weight, and a second
backward through the same graph. A use of the head after the loss (a regulariser) raises in the
backward: autograd's in-place check, or this optimizer's hook. The tied check walks the autograd
graph of the loss's input at each forward (Python, once per node). Several forwards of the loss and
one backward of their summed losses: the head's update needs the sum of their gradients, which no
one loss's backward has, so in that backward pass every loss returns the head's gradient and it is
updated in its hook (the dense path for that step: its ``[V, D]`` gradient exists; bitwise the
standard loop); a forward whose loss is alive but not back-propagated in the pass does not count. A
backward that raises after some chunks were updated (out of memory) leaves those rows updated: the
step cannot be undone. The PyTorch reference updates each vocabulary chunk (``chunk_size``) after
its dH part (Ojas.InBackward.ChunkedHead.chunked_head_sgd_eq_standard); the Triton kernel
runs its 4-product schedule, dH in the forward, then each vocabulary slab's gradient and update in
the backward (Ojas.InBackward.ChunkedHead.chunked_head_dh_first_code_eq_standard), which
rounds the head's gradient as its 4-product schedule does, not as the default 3-product one (one
product over all tokens instead of a sum over token chunks)."""

from __future__ import annotations

import weakref
from typing import Any, Optional

import torch
from torch import Tensor

from ojas_ref.optim._clipping import _Mode
from ojas_ref.optim._consumed_grad import _HEAD_OTHER_USE, ConsumedGrads
from ojas_ref.optim._distributed import DTensor, DataParallel, several_processes
from ojas_ref.optim._fast_paths import not_plain_sgd

# Why the head's whole gradient cannot arrive in a backward pass (HeadUpdateMixin._check_head_gradient).
_NO_HEAD_UPDATE = (
    "the head weight of InBackwardOptimizer(head_weight=...) got its whole [V, D] gradient in this backward pass: "
    "the linear cross-entropy that uses it was called without head_update, so it did not update the head inside "
    "its backward. Pass the optimizer to the loss: linear_cross_entropy(..., head_update=opt), "
    "LinearCrossEntropyLoss()(..., head_update=opt), or under optimize_model model(..., labels=..., "
    "head_update=opt); or construct the optimizer without head_weight (the dense path). The head was not updated; "
    "this backward pass is abandoned: call optimizer.zero_grad() before the next"
)


def will_accumulate(node: Any) -> bool:
    """Whether this backward pass runs ``node``. The head's AccumulateGrad: True for
    ``backward()`` (with ``inputs=`` only if it lists the head), False for ``autograd.grad``
    (which accumulates nothing; torch raises on the query for a leaf there). A loss's node
    (``_HeadUpdate.runs_in_this_pass``): whether it is in the pass's graph (torch answers False
    for the pass's root node itself, whose backward runs first)."""
    if node is None:
        return False
    try:
        return bool(torch._C._will_engine_execute_node(node))
    except RuntimeError:
        return False


def _weak_gradient_check(opt: "HeadUpdateMixin") -> Any:
    """The head's gradient hook, holding the optimizer weakly (as its update hook does:
    ``ojas_ref.optim._hooks._weak_hook``); nothing once the optimizer is collected (its update
    hook raises then)."""
    ref = weakref.ref(opt)

    def hook(grad: Tensor) -> None:
        owner = ref()
        if owner is not None:
            owner._check_head_gradient()

    return hook


class HeadUpdateMixin:
    """The head weight updated inside the loss's backward, mixed into
    :class:`~ojas_ref.optim.in_backward.InBackwardOptimizer`: the loss given ``head_update=``
    this optimizer calls :meth:`_check_head_forward` at its forward, then :meth:`_head_shared_pass`,
    :meth:`_head_step_lr`, :meth:`_head_update` per vocabulary chunk and :meth:`_head_finished` in its
    backward, and reads :attr:`_head` and :attr:`_head_forwards`. It owns the attributes set by
    :meth:`_init_head` and reads the optimizer's step bookkeeping annotated below (and calls its
    ``_plain_sgd_lr``, ``_note_hyper`` and ``_as_accumulated``)."""

    # The optimizer's, read here (InBackwardOptimizer.__init__)
    param_groups: list[dict[str, Any]]
    optimizer_class: type[torch.optim.Optimizer]
    accumulation_steps: int
    max_grad_norm: Optional[float]
    _group_of: dict[Tensor, int]
    _group_opts: list[Optional[torch.optim.Optimizer]]
    _updated: set[int]
    _mode: _Mode
    _data_parallel: DataParallel
    _consumed: ConsumedGrads
    _zeroed_grads: bool
    _had_grad: set[int]
    _hook_handles: list[Any]

    def _init_head(self, head_weight: Optional[Tensor]) -> None:
        """The head updated inside the loss (None: none) after checking it (:meth:`_check_head_weight`)."""
        # the head, its id (None: none), and whether the loss updated it since the last step()
        self._head: Optional[Tensor] = None
        self._head_key: Optional[int] = None
        self._head_done = False
        # the loss forwards (linear_cross_entropy's _HeadUpdate) whose backward has not begun, and
        # (backward pass id, whether the head's gradient comes from several of them in it): _head_shared_pass
        self._head_forwards: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self._head_pass: tuple[Optional[int], bool] = (None, False)
        # the head's AccumulateGrad node (kept: every graph of the head uses this one), for the
        # gradient check of _check_head_gradient
        self._head_node: Optional[Any] = None
        if head_weight is not None:
            self._check_head_weight(head_weight)
            self._head, self._head_key = head_weight, id(head_weight)
            with torch.enable_grad():
                self._head_node = head_weight.view_as(head_weight).grad_fn.next_functions[0][0]
            # a gradient hook runs before the gradient is accumulated, so before the update hook
            self._hook_handles.append(head_weight.register_hook(_weak_gradient_check(self)))

    def _check_head_weight(self, head_weight: Any) -> None:
        """Raise unless ``head_weight`` can be updated inside the loss's backward: a hooked 2-D
        parameter of a plain-SGD group, without accumulation or clipping."""
        if not isinstance(head_weight, Tensor):
            raise TypeError(
                f"head_weight must be a torch.Tensor (the [V, D] weight of the loss's head, e.g. "
                f"model.lm_head.weight) or None, got {type(head_weight).__name__}"
            )
        if head_weight.dim() != 2:
            raise ValueError(
                f"head_weight must be the 2-D [V, D] weight of a linear head, got shape {tuple(head_weight.shape)}"
            )
        if head_weight not in self._group_of:
            raise ValueError(
                "head_weight must be one of params and require grad (it is updated by this optimizer, "
                "inside the loss's backward)"
            )
        if isinstance(head_weight, DTensor):
            raise NotImplementedError(
                "head_weight as an FSDP2 shard (DTensor) is not supported: the shard's "
                "gradient is whole only after the reduce-scatter"
            )
        if self.optimizer_class is not torch.optim.SGD:
            raise ValueError(
                f"head_weight needs optimizer_class=torch.optim.SGD (plain: no momentum, weight decay, maximize), "
                f"got {self.optimizer_class.__name__}: only plain SGD's update inside the loss is implemented (one "
                "add_ per vocabulary chunk, no state). With other optimizers the head keeps the dense path (its "
                "[V, D] gradient, updated in its hook): construct the optimizer without head_weight"
            )
        if self.accumulation_steps > 1:
            raise ValueError(
                f"head_weight with accumulation_steps={self.accumulation_steps} is not supported: the head's "
                "gradient must be summed over the micro-batches before its update, so its [V, D] gradient exists "
                "anyway (the dense path); construct the optimizer without head_weight"
            )
        if self.max_grad_norm is not None:
            raise ValueError(
                "head_weight with max_grad_norm is not supported: clipping needs the norm of every gradient "
                "before the first update, the head's included (the dense path); construct the optimizer without "
                "head_weight"
            )
        index = self._group_of[head_weight]
        if self._plain_sgd_lr(index) is None:
            raise ValueError(f"head_weight needs its group to be plain SGD: {self._not_plain_sgd(index)}")

    def _not_plain_sgd(self, index: int) -> str:
        """Why group ``index``'s update is not plain SGD (for the errors of head_weight)."""
        return not_plain_sgd(self._group_opts[index], self.param_groups[index])

    def _check_head_forward(self, weight: Tensor, *inputs: Any) -> None:
        """At the loss's forward: raise if ``weight`` (the head) is already used by the graph that
        produced ``inputs`` (a head tied to the input embedding): its update needs the embedding's
        gradient too, which comes after the loss's backward. (A use after the loss is caught in
        the backward: autograd's version counter, or :meth:`_hook`.)"""
        stack = [t.grad_fn for t in inputs if isinstance(t, Tensor) and t.grad_fn is not None]
        seen = set()
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            for nxt, _ in node.next_functions:
                if nxt is None or nxt in seen:
                    continue
                if getattr(nxt, "variable", None) is weight:
                    raise ValueError(
                        "head_weight is also used by the computation of the loss's input (a head tied to the "
                        "input embedding, tie_word_embeddings=True?): its update needs the embedding's gradient "
                        "as well, which arrives after the loss's backward, so it cannot be updated inside the "
                        "loss (Ojas.InBackward.Counterexamples.tied_per_use_neq_standard). Construct "
                        "InBackwardOptimizer without head_weight for a tied head, and call the loss without "
                        "head_update (the dense path)"
                    )
                stack.append(nxt)

    def _check_head_gradient(self) -> None:
        """The head's gradient hook (before accumulation, so before the head's update hook): raise
        unless its whole gradient may arrive in this backward pass: after the loss updated it (a
        gradient from another use: the update hook raises, naming that), in a pass whose losses
        take the dense path (:meth:`_head_shared_pass`), or in ``autograd.grad`` (which accumulates
        nothing). Otherwise its loss was called without ``head_update``: RuntimeError saying to
        pass it, before anything is accumulated or stepped."""
        if self._head_done:
            return
        if self._head_pass == (torch._C._current_graph_task_id(), True):
            return
        if not will_accumulate(self._head_node):
            return
        raise RuntimeError(_NO_HEAD_UPDATE)

    def _head_shared_pass(self) -> bool:
        """At the start of a loss's backward (``_HeadUpdate.begin``, after it left
        :attr:`_head_forwards`): whether another forward of the loss whose backward has not begun
        sends the head a gradient in this backward pass too (two forwards and one backward of the
        summed losses). The head's update needs the sum of their gradients, which no one loss's
        backward has: then every loss of this pass returns the head's gradient and it is updated in
        its hook (the dense path, its [V, D] gradient alive for the step: bitwise ``torch.optim``'s
        plain SGD); otherwise the loss updates it. Decided at the first loss of the pass, the same for
        every loss of the pass (before any row is updated); a forward whose node is unknown counts as
        one of this pass."""
        task = torch._C._current_graph_task_id()
        if task != self._head_pass[0]:
            self._head_pass = (task, any(f.runs_in_this_pass() for f in list(self._head_forwards)))
        return self._head_pass[1]

    def _head_step_lr(self) -> float:
        """At the loss's backward: the learning rate of the head's plain-SGD step, after checking
        that this backward pass may update it (one process, plain SGD still, not updated yet)."""
        index = self._group_of[self._head]
        if self._head_done or self._head_key in self._updated:
            raise RuntimeError(
                "the head weight was already updated since the last optimizer.step() (a second backward pass "
                "without optimizer.step()?): every backward pass updates it inside the loss, so two would be two "
                "updates, not one on the summed gradient. Call optimizer.step() once per update"
            )
        if self._mode is not _Mode.UPDATE:
            raise RuntimeError(
                "the head weight cannot be updated inside the loss during the passes of "
                "InBackwardOptimizer.backward's clipping"
            )
        if self._data_parallel.active() or several_processes():
            raise RuntimeError(
                "head_weight is not supported with several processes (DDP / FSDP2): the head's gradient must be "
                "averaged over the ranks before its update (the dense path); construct the optimizer without "
                "head_weight"
            )
        lr = self._plain_sgd_lr(index)
        if lr is None:
            raise RuntimeError(f"head_weight's group is no longer plain SGD: {self._not_plain_sgd(index)}")
        return lr

    @torch.no_grad()
    def _head_update(self, weight: Tensor, v0: int, v1: int, grad: Tensor, lr: float) -> None:
        """Plain SGD on rows [v0, v1) of the head ``weight``, their whole gradient ``grad`` in its
        dtype: ``torch._foreach_add_``, the call of :meth:`_update`'s plain-SGD path."""
        if self._zeroed_grads and self._head_key in self._had_grad:
            self._as_accumulated([grad])
        torch._foreach_add_([weight[v0:v1]], [grad], alpha=-lr)

    def _head_finished(self) -> None:
        """The loss's backward updated every row of the head."""
        self._head_done = True
        self._updated.add(self._head_key)
        self._note_hyper(self._group_of[self._head])
        self._consumed.consume([self._head], _HEAD_OTHER_USE)
