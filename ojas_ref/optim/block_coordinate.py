"""Block-coordinate training (BAdam, Luo et al. 2024): one block of parameters trains at a time.

The parameters are partitioned into blocks (typically one or a few decoder layers each,
:func:`decoder_layer_blocks`). Only the active block is trainable: an optimizer
(``torch.optim.AdamW`` by default) runs on it for ``switch_every`` steps, then the next block
(in ascending, descending or random order) becomes active, with a fresh optimizer: the
previous block's state is dropped. At each switch every parameter of the other blocks gets
``requires_grad=False`` (autograd computes and keeps no gradient for it) and the active
block's get ``requires_grad=True``.

No theorem is claimed: BAdam is a different algorithm from full training (each step updates
one block, and its Adam moments restart at every switch), not an exact reformulation of it.
What is tested (``tests/optim/test_block_coordinate.py``) is that this code is that schedule: bitwise
equal to a hand-written freeze / AdamW-on-the-active-block / switch / fresh-state loop, and,
with one block holding every parameter, bitwise the standard AdamW loop.

Memory saved: the gradients and the optimizer state of the inactive blocks (AdamW: 2 floats
per parameter of state, plus the gradient, live for the active block only; the weights are
all there). With ``fused_into_backward=True`` the active block's update runs in the backward
pass (:class:`ojas_ref.InBackwardOptimizer`), so not even its whole gradient is alive at once.
The activations are not reduced in general: the layers before the active block save none
(nothing there requires grad), but every layer from the active block on saves its own, so
with the first block active the activation memory is that of full training.

A GPU benchmark should measure the peak memory of a training step (``torch.cuda.max_memory_allocated``)
on the 1.06B Llama of ``benchmarks/bench_memory.py``, block-coordinate with one decoder layer per block against
:class:`ojas_ref.InBackwardOptimizer` over the whole model, both with AdamW and the same
activation checkpointing, and the loss after a fixed number of tokens (the price of training one
block at a time). The peer figure: BAdam's paper trains Llama-3-8B on one 24 GB RTX 3090.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Optional, Sequence

import torch
from torch import Tensor, nn

from ojas_ref.optim.in_backward import InBackwardOptimizer

__all__ = ["BlockCoordinateOptimizer", "decoder_layer_blocks"]

ORDERS = ("ascending", "descending", "random")
EXTRAS = ("last", "own")


class BlockCoordinateOptimizer(torch.optim.Optimizer):
    """``optimizer_class`` on one block of parameters at a time, switching every ``switch_every`` steps.

    Args:
        blocks: a list of lists of parameters; a parameter may appear in one block only.
            Parameters in no block are left alone (freeze them yourself, or they accumulate
            gradients that nothing applies).
        optimizer_class: the ``torch.optim.Optimizer`` built, fresh, for each active block.
        switch_every: the number of ``step()`` calls a block stays active (an int >= 1).
        order: ``"ascending"`` (blocks 0, 1, ...), ``"descending"`` (the last block first), or
            ``"random"`` (a new permutation of the blocks for each pass over them, drawn from
            ``seed`` and the pass number, so a resumed run draws the same ones).
        seed: the seed of ``"random"``.
        fused_into_backward: update the active block inside the backward pass
            (:class:`ojas_ref.InBackwardOptimizer`, with ``optimizer_class``); else the plain
            ``optimizer_class`` steps it at ``step()``.
        optimizer_kwargs: passed to ``optimizer_class`` (``lr``, ``betas``, ...), and with
            ``fused_into_backward`` also InBackwardOptimizer's own (``max_grad_norm``,
            ``bucket_cap_mb``, ...; with ``max_grad_norm`` call :meth:`backward`).

    A parameter the user froze (``requires_grad=False`` at construction) is never unfrozen: it
    stays frozen in its block, and a block of frozen parameters only raises. The switch runs at
    the end of the ``step()`` that completes a block's ``switch_every`` steps; it drops that
    block's gradients (``.grad = None``) and its optimizer state, also when the next block is the
    same one (a single block, or a random pass that starts with the block the last one ended on).

    Learning-rate schedulers see :attr:`param_groups`: one group, the active block's. At each
    switch the new group takes over every hyper-parameter of the old one (``lr`` as the scheduler
    left it, ``initial_lr``, ...), so a schedule runs across switches as over one optimizer.
    :meth:`state_dict` is the active optimizer's plus a ``"block_coordinate"`` entry (step count,
    active block, order, seed); :meth:`load_state_dict` activates that block, so a resumed run
    continues bit for bit.
    """

    def __init__(
        self,
        blocks: Sequence[Sequence[Tensor]],
        optimizer_class: type[torch.optim.Optimizer] = torch.optim.AdamW,
        *,
        switch_every: int,
        order: str = "ascending",
        seed: int = 0,
        fused_into_backward: bool = True,
        **optimizer_kwargs: Any,
    ) -> None:
        if isinstance(switch_every, bool) or not isinstance(switch_every, int) or switch_every < 1:
            raise ValueError(f"switch_every must be an int >= 1, got {switch_every!r}")
        if order not in ORDERS:
            raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed must be an int, got {type(seed).__name__}")
        if not isinstance(fused_into_backward, bool):
            raise TypeError(f"fused_into_backward must be a bool, got {type(fused_into_backward).__name__}")
        self.blocks = _check_blocks(blocks)
        self.switch_every, self.order, self.seed = switch_every, order, seed
        self.fused_into_backward = fused_into_backward
        self.optimizer_class, self.optimizer_kwargs = optimizer_class, optimizer_kwargs
        # the parameters this optimizer may unfreeze: those not frozen by the user
        self._trainable = [[p for p in block if p.requires_grad] for block in self.blocks]
        frozen = [i for i, block in enumerate(self._trainable) if not block]
        if frozen:
            raise ValueError(
                f"blocks: block(s) {frozen} hold only frozen parameters (requires_grad=False); they would train nothing"
            )
        self._steps = 0
        self._inner: Optional[torch.optim.Optimizer] = None
        self._activate()
        super().__init__(self._inner.param_groups, self._inner.defaults)
        self._adopt_inner()

    @property
    def active_block(self) -> int:
        """The index (in ``blocks``) of the block being trained."""
        return self.block_at(self._steps // self.switch_every)

    def block_at(self, period: int) -> int:
        """The block trained during steps ``period * switch_every`` to ``(period + 1) * switch_every - 1``."""
        n = len(self.blocks)
        if self.order == "ascending":
            return period % n
        if self.order == "descending":
            return n - 1 - period % n
        passes, position = divmod(period, n)
        return random.Random(f"{self.seed}:{passes}").sample(range(n), n)[position]

    def _activate(self, hyper: Optional[dict[str, Any]] = None) -> None:
        """Freeze every block but the active one; drop the old optimizer (its hooks, gradients and
        state) and build a fresh one over the active block, with the hyper-parameters ``hyper``."""
        active = self.active_block
        if self._inner is not None:
            self._inner.zero_grad(set_to_none=True)
            if isinstance(self._inner, InBackwardOptimizer):
                self._inner.remove_hooks()
            self._inner = None
        for i, block in enumerate(self._trainable):
            for p in block:
                p.requires_grad_(i == active)
        params = self._trainable[active]
        if self.fused_into_backward:
            self._inner = InBackwardOptimizer(params, self.optimizer_class, **self.optimizer_kwargs)
        else:
            self._inner = self.optimizer_class(params, **self.optimizer_kwargs)
        if hyper is not None:
            self._inner.param_groups[0].update(hyper)

    def _adopt_inner(self) -> None:
        """Make the active optimizer's groups and state this optimizer's."""
        self.param_groups, self.state = self._inner.param_groups, self._inner.state

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Only at construction (by ``torch.optim.Optimizer``): the groups are the active block's."""
        if self.param_groups is self._inner.param_groups:
            raise TypeError("BlockCoordinateOptimizer.add_param_group is not supported: pass every parameter in blocks")
        super().add_param_group(param_group)

    def backward(self, loss: Tensor) -> None:
        """``loss.backward()`` (through :meth:`ojas_ref.InBackwardOptimizer.backward` when fused,
        which clipping needs)."""
        if isinstance(self._inner, InBackwardOptimizer):
            self._inner.backward(loss)
        else:
            loss.backward()

    def step(self, closure: Optional[Callable[[], float]] = None) -> Optional[float]:
        """The active optimizer's step; after the last step of a block, switch to the next one."""
        loss = self._inner.step(closure)
        self._steps += 1
        if self._steps % self.switch_every == 0:
            hyper = {k: v for k, v in self.param_groups[0].items() if k != "params"}
            self._activate(hyper)
            self._adopt_inner()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        """The active optimizer's ``zero_grad`` (the other blocks have no gradient)."""
        self._inner.zero_grad(set_to_none)

    def state_dict(self) -> dict[str, Any]:
        """The active optimizer's state dict, plus ``"block_coordinate"``: the steps taken, the
        active block and the schedule (order, seed, switch_every, number of blocks)."""
        return {
            **self._inner.state_dict(),
            "block_coordinate": {**self._schedule(), "steps": self._steps, "active_block": self.active_block},
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`: the same schedule (else ValueError), its block activated."""
        state_dict = dict(state_dict)
        saved = state_dict.pop("block_coordinate", None)
        if saved is None:
            raise ValueError("state_dict has no 'block_coordinate' entry: not a BlockCoordinateOptimizer's")
        mismatched = {k: (saved.get(k), v) for k, v in self._schedule().items() if saved.get(k) != v}
        if mismatched:
            raise ValueError(f"state_dict: its schedule differs from this optimizer's, (saved, here): {mismatched}")
        self._steps = saved["steps"]
        self._activate()
        self._inner.load_state_dict(state_dict)
        self._adopt_inner()

    def _schedule(self) -> dict[str, Any]:
        return {
            "order": self.order,
            "seed": self.seed,
            "switch_every": self.switch_every,
            "num_blocks": len(self.blocks),
        }


def _check_blocks(blocks: Sequence[Sequence[Tensor]]) -> list[list[Tensor]]:
    """``blocks`` as a list of non-empty lists of parameters, none in two blocks; else raise."""
    blocks = [list(block) for block in blocks]
    if not blocks:
        raise ValueError("blocks is empty: give at least one block of parameters")
    seen: dict[int, int] = {}
    for i, block in enumerate(blocks):
        if not block:
            raise ValueError(f"blocks: block {i} is empty")
        for p in block:
            if not isinstance(p, Tensor):
                raise TypeError(f"blocks: block {i} holds a {type(p).__name__}, not a parameter tensor")
            if id(p) in seen:
                raise ValueError(
                    f"blocks: a parameter of shape {tuple(p.shape)} is in block {seen[id(p)]} and "
                    f"again in block {i}; each parameter must be in one block, once"
                )
            seen[id(p)] = i
    return blocks


def decoder_layer_blocks(model: nn.Module, layers_per_block: int = 1, extra: str = "last") -> list[list[Tensor]]:
    """Blocks of a Hugging Face causal LM: ``layers_per_block`` consecutive decoder layers each.

    The decoder layers are the modules whose class is in the model's ``_no_split_modules``
    (``LlamaDecoderLayer``, ...), in model order. The other parameters (embedding, final norm,
    head; a tied head once) join the last block with ``extra="last"``, or form a block of their
    own after the layers' with ``extra="own"``.
    """
    if isinstance(layers_per_block, bool) or not isinstance(layers_per_block, int) or layers_per_block < 1:
        raise ValueError(f"layers_per_block must be an int >= 1, got {layers_per_block!r}")
    if extra not in EXTRAS:
        raise ValueError(f"extra must be one of {EXTRAS}, got {extra!r}")
    classes = set(getattr(model, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in classes]
    if not layers:
        raise ValueError(
            f"model: no decoder layers found (modules of a class in _no_split_modules, "
            f"{sorted(classes)}); is {type(model).__name__} a Hugging Face causal LM?"
        )
    seen: set[int] = set()

    def new(params: Any) -> list[Tensor]:
        fresh = [p for p in params if id(p) not in seen]
        seen.update(map(id, fresh))
        return fresh

    blocks = [
        new(p for layer in layers[i : i + layers_per_block] for p in layer.parameters())
        for i in range(0, len(layers), layers_per_block)
    ]
    rest = new(model.parameters())
    if extra == "last":
        blocks[-1].extend(rest)
    elif rest:
        blocks.append(rest)
    return blocks
