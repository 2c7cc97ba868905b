"""The Hugging Face loss adapter: :class:`LinearCrossEntropyForCausalLM` hooks the causal LM (forward pre- and
post-hooks) and its output embedding at each training forward (a forward pre-hook on ``lm_head``,
or on the module that replaced it since: ``resize_token_embeddings``, PEFT's LoRA layer) and sets
the model's ``loss_function``. In training mode with ``labels``, the head receives an empty
sequence (so the model's forward allocates no ``[tokens, vocabulary]`` logits), the loss is
:func:`ojas_ref.linear_cross_entropy` of the hidden states and the head's weight with Hugging
Face's semantics (labels shifted left, ``ignore_index``, mean over the kept tokens or sum over
``num_items_in_batch``), and the output's ``logits`` is None, as in Liger-Kernel. Otherwise the
model runs unchanged. ``model(..., labels=..., head_update=opt)`` passes the optimizer that updates
the head inside the loss's backward to the loss (:class:`LinearCrossEntropyForCausalLM`).
``CausalLMLossHead`` is the deprecated old name of the adapter (it warns)."""

from __future__ import annotations

import inspect
import sys
from typing import TYPE_CHECKING, Any, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ojas_ref._deprecation import renamed_module_attributes
from ojas_ref.functional.linear_cross_entropy import linear_cross_entropy

if TYPE_CHECKING:
    from ojas_ref.optim.in_backward import InBackwardOptimizer

__all__ = ["LinearCrossEntropyForCausalLM", "head_unsupported_reason", "head_weight_and_bias"]

# The adapter's old name, kept for one release (module __getattr__ below).
_RENAMED = {"CausalLMLossHead": "LinearCrossEntropyForCausalLM"}


def _lora_linear_class() -> Optional[type]:
    """PEFT's LoRA ``Linear`` layer class, or None when PEFT is not imported (then no layer is one)."""
    return getattr(sys.modules.get("peft.tuners.lora.layer"), "Linear", None)


def head_unsupported_reason(head: Optional[nn.Module]) -> Optional[str]:
    """Why the loss cannot be computed from the weight of the output embedding ``head`` without
    logits, or None: a ``torch.nn.Linear``, or PEFT's LoRA ``Linear`` around one (``lm_head`` in
    ``target_modules``: the weight plus the active adapters' deltas, ``get_delta_weight``) with
    plain LoRA adapters (no DoRA or other variant) without LoRA dropout."""
    if type(head) is nn.Linear:
        return None
    what = "absent" if head is None else f"{type(head).__module__}.{type(head).__qualname__}"
    if head is None or type(head) is not _lora_linear_class():
        return f"the output embedding is {what}, not a torch.nn.Linear or PEFT's LoRA Linear around one"
    if type(head.base_layer) is not nn.Linear:
        return f"the output embedding is a LoRA layer around {type(head.base_layer).__name__}, not a torch.nn.Linear"
    if head.disable_adapters and head.merged:
        return "the output embedding's LoRA adapters are merged and disabled (PEFT unmerges them in the forward)"
    if head.disable_adapters or head.merged:
        return None
    for name in head.active_adapters:
        if name not in head.lora_A:
            continue
        if name in head.lora_variant:
            return (
                f"the output embedding's LoRA adapter {name!r} is a {type(head.lora_variant[name]).__name__} "
                "(DoRA or another variant), not plain LoRA"
            )
        dropout = head.lora_dropout[name]
        if isinstance(dropout, nn.Dropout) and dropout.p > 0:
            return (
                f"the output embedding's LoRA adapter {name!r} has lora_dropout={dropout.p}: the dropout of "
                "the hidden states has no weight form (set lora_dropout=0, or leave lm_head out of "
                "target_modules)"
            )
    return None


def head_weight_and_bias(head: nn.Module) -> tuple[Tensor, Optional[Tensor]]:
    """The weight and bias that ``head`` (one that :func:`head_unsupported_reason` clears) multiplies
    its input by: a LoRA layer's base weight plus ``get_delta_weight`` of each active adapter,
    cast to the weight's dtype (a [vocabulary, hidden] tensor made for the step, which the
    gradients of the adapters flow through), unless the adapters are merged or disabled."""
    if type(head) is nn.Linear:
        return head.weight, head.bias
    base = head.base_layer
    weight = base.weight
    if not (head.disable_adapters or head.merged):
        for name in head.active_adapters:
            if name in head.lora_A:
                weight = weight + head.get_delta_weight(name).to(weight.dtype)
    return weight, base.bias


class LinearCrossEntropyForCausalLM:
    """The hooks and loss function that compute a causal LM's training loss without logits
    (formerly ``CausalLMLossHead``).

    Installed by :meth:`install`, removed by :meth:`remove`. The loss is
    :func:`ojas_ref.linear_cross_entropy` (Ojas.LinearCrossEntropy.ChunkedLse.chunked_lse_chunk,
    Ojas.LinearCrossEntropy.Reduction.ce_loss_correct, Ojas.LinearCrossEntropy.Gradient.ce_backward_correct);
    the label shift and the ``num_items_in_batch`` division are Hugging Face's
    ``ForCausalLMLoss`` and no theorem's. Differences: "mean" over a batch whose tokens
    are all ignored gives 0, not NaN.

    The head is the model's output embedding at each training forward, not the one at
    :meth:`install`: after ``resize_token_embeddings``, ``set_output_embeddings`` or a PEFT adapter
    put on ``lm_head`` the hook moves to the new module; one that :func:`head_unsupported_reason`
    does not clear raises ``NotImplementedError`` before the forward runs.

    The head updated inside the loss's backward: ``model(input_ids, labels=labels,
    head_update=opt)``, ``opt`` the :class:`~ojas_ref.optim.in_backward.InBackwardOptimizer`
    constructed with ``head_weight=model.lm_head.weight`` (plain SGD). The model's forward
    pre-hook takes ``head_update`` out of the call's keyword arguments (so the decoder and its
    attention never see it) and the loss passes it to :func:`ojas_ref.linear_cross_entropy`,
    which checks it (its head must be the output embedding's weight: not a PEFT LoRA head, whose
    weight is made for the step). A keyword of the call, as ``labels``, rather than a setting of
    the adapter: the loop that calls the model and steps the optimizer names it at each step, as
    it would pass it to the loss itself. Only with a training forward with ``labels`` (the loss
    without logits): otherwise ValueError. Without it, the optimizer's head gets its whole
    gradient in the backward and raises there, saying to pass it.
    """

    def __init__(self, model: nn.Module, softcap: Optional[float]) -> None:
        self.head: nn.Module = model.get_output_embeddings()  # the module whose pre-hook is installed
        self.softcap = softcap
        self.original_loss = model.loss_function
        self.had_loss_attr = "_loss_function" in model.__dict__
        self._signature = inspect.signature(type(model).forward)
        self._active = False
        self._hidden: Optional[Tensor] = None
        self._head_update: Optional["InBackwardOptimizer"] = None  # the call's head_update (training forward)
        self._handles: list[Any] = []
        self._head_handle: Any = None

    def install(self, model: nn.Module) -> None:
        """Hook ``model`` (the one this head was made for) and set its loss function."""
        self._handles = [
            model.register_forward_pre_hook(self._model_pre_hook, with_kwargs=True),
            model.register_forward_hook(self._model_post_hook, with_kwargs=True, always_call=True),
        ]
        self._head_handle = self.head.register_forward_pre_hook(self._head_pre_hook)
        model._loss_function = self.loss

    def remove(self, model: nn.Module) -> None:
        """Undo :meth:`install` on ``model`` (a deep copy's own hooks go with the copy's handles)."""
        for handle in self._handles + [self._head_handle]:
            handle.remove()
        self._handles, self._head_handle = [], None
        if self.had_loss_attr:
            model._loss_function = self.original_loss
        else:
            model.__dict__.pop("_loss_function", None)

    def _follow(self, head: nn.Module) -> None:
        """Move the head's hook to ``head``, the model's output embedding now, if it changed;
        ``NotImplementedError`` for one the loss cannot be computed from."""
        reason = head_unsupported_reason(head)
        if reason is not None:
            raise NotImplementedError(
                f"optimize_model's training loss (linear cross-entropy without logits): {reason}."
                " revert_model(model) to train with Hugging Face's loss"
            )
        if head is not self.head:
            self._head_handle.remove()
            self.head = head
            self._head_handle = head.register_forward_pre_hook(self._head_pre_hook)

    def _labels(self, args: tuple, kwargs: dict) -> Optional[Tensor]:
        if "labels" in kwargs:
            return kwargs["labels"]
        bound = self._signature.bind_partial(None, *args)
        return bound.arguments.get("labels")

    def _model_pre_hook(self, module: nn.Module, args: tuple, kwargs: dict) -> Optional[tuple[tuple, dict]]:
        """Before the model's forward: whether this call computes the loss without logits, and its
        ``head_update``, taken out of ``kwargs`` (then the call's arguments without it are returned)."""
        if getattr(module, "_is_replica", False):  # set by torch.nn.parallel.replicate
            raise NotImplementedError(
                "optimize_model's model under nn.DataParallel: its replicas run in threads and would share the "
                "training loss's per-call state; use DistributedDataParallel (one process per GPU) instead"
            )
        given = "head_update" in kwargs
        head_update = kwargs.pop("head_update", None)
        self._active = module.training and self._labels(args, kwargs) is not None
        self._hidden = None
        if head_update is not None and not self._active:
            raise ValueError(
                "head_update is for a training forward with labels, whose loss optimize_model computes without "
                "logits and which updates the head inside its backward: call model.train() and pass labels=..., "
                f"or leave head_update out (model.training={module.training}, "
                f"labels {'given' if self._labels(args, kwargs) is not None else 'not given'})"
            )
        self._head_update = head_update
        if self._active:
            self._follow(module.get_output_embeddings())
        return (args, kwargs) if given else None

    def _head_pre_hook(self, module: nn.Module, args: tuple) -> Optional[tuple]:
        if not self._active:
            return None
        (hidden,) = args
        self._hidden = hidden
        return (hidden[..., :0, :],)  # logits of no token: [B, 0, V]

    def _model_post_hook(self, module: nn.Module, args: tuple, kwargs: dict, output: Any) -> Any:
        """Drop the empty logits: ``logits=None`` in a ModelOutput; left out of a tuple
        (``return_dict=False``), as ``ModelOutput.to_tuple`` leaves out None fields."""
        active, self._active, self._hidden, self._head_update = self._active, False, None, None
        if not active:
            return None
        if isinstance(output, tuple):
            return tuple(x for x in output if not (torch.is_tensor(x) and x.dim() == 3 and x.shape[1] == 0))
        if getattr(output, "logits", None) is None:
            return None
        fields = {k: v for k, v in output.items() if k != "logits"}
        return type(output)(**fields)

    def loss(
        self,
        logits: Tensor,
        labels: Tensor,
        vocab_size: int,
        num_items_in_batch: Optional[Any] = None,
        ignore_index: int = -100,
        shift_labels: Optional[Tensor] = None,
        **kwargs: Any,
    ) -> Tensor:
        """Hugging Face's ``ForCausalLMLoss`` of the hidden states the head received, without logits
        (float32, as its upcast logits give, since ``linear_cross_entropy`` returns float32 for
        16-bit inputs; float64 stays float64)."""
        hidden, self._hidden = self._hidden, None
        head_update, self._head_update = self._head_update, None
        if hidden is None:  # eval mode, or no labels at the forward: the logits exist
            return self.original_loss(
                logits,
                labels,
                vocab_size,
                num_items_in_batch=num_items_in_batch,
                ignore_index=ignore_index,
                shift_labels=shift_labels,
                **kwargs,
            )
        if shift_labels is None:
            shift_labels = F.pad(labels, (0, 1), value=ignore_index)[..., 1:]
        if shift_labels.shape != hidden.shape[:-1]:
            raise ValueError(
                f"labels of shape {tuple(shift_labels.shape)} do not match the {tuple(hidden.shape[:-1])} "
                "positions whose hidden states reach the head (logits_to_keep must be 0 in training)"
            )
        reduction = "sum" if num_items_in_batch is not None else "mean"
        weight, bias = head_weight_and_bias(self.head)
        loss = linear_cross_entropy(
            hidden,
            weight,
            shift_labels.to(hidden.device),
            linear_bias=bias,
            reduction=reduction,
            ignore_index=ignore_index,
            softcap=self.softcap,
            head_update=head_update,
        )
        if reduction == "sum":
            if torch.is_tensor(num_items_in_batch):
                num_items_in_batch = num_items_in_batch.to(loss.device)
            loss = loss / num_items_in_batch
        return loss


__getattr__ = renamed_module_attributes(__name__, _RENAMED)
