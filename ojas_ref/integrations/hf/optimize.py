"""``optimize_model``: the verified primitives applied to an existing model in one call.

``model, report = optimize_model(model)`` (or ``optimize_model(model, recipe)``, a
:class:`ojas_ref.MemoryRecipe`) rewrites the model in place:

* Hugging Face causal LMs (the families of ``ojas_ref.integrations.hf.SUPPORTED_MODEL_TYPES``):
  attention through :func:`ojas_ref.attention` (registered as ``attn_implementation="ojas"``),
  the training loss through :func:`ojas_ref.linear_cross_entropy` (no ``[tokens,
  vocabulary]`` logits when ``labels`` are given in training mode), the RMSNorm modules
  through :func:`ojas_ref.functional.rms_norm.rms_norm` (the fused Triton kernel on CUDA), optionally
  per-layer activation checkpointing (``gradient_checkpointing_enable``, non-reentrant;
  ``checkpoint="offload"``: the layer inputs held in pinned host memory,
  :mod:`ojas_ref.nn.offload`; ``checkpoint_split=True``: two checkpoints per layer,
  attention half and MLP half), optionally the input embedding's gradient sparse
  (``sparse_embedding=True``: no dense ``[V, D]`` gradient, for
  :class:`ojas_ref.InBackwardOptimizer` with plain SGD).
* Plain PyTorch models: every ``nn.MultiheadAttention`` (also inside
  ``nn.TransformerEncoderLayer`` / ``DecoderLayer``) computed by :func:`ojas_ref.attention`
  (:class:`ojas_ref.nn.modules.MultiheadAttention`); the ReLU of those layers'
  feed-forward blocks with dropout by :func:`ojas_ref.functional.relu.relu` (a packed 1-bit mask
  saved instead of relu's output); for the loss use :class:`ojas_ref.LinearCrossEntropyLoss`.

Weights, ``state_dict()`` keys, ``save_pretrained`` / ``from_pretrained`` (a loaded
model is a plain one: optimize it again), ``generate()``, eval-mode inference and PEFT
adapters are unchanged. A second call with the same arguments is a no-op (with others it
raises); :func:`revert_model` undoes the call; a deep or pickled copy is optimized on its own.
"""

from __future__ import annotations

import dataclasses
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Optional, Union

import torch
from torch import nn

from ojas_ref._deprecation import renamed_keyword
from ojas_ref.functional.relu import BACKWARD_THEOREM as RELU_THEOREM, KERNEL_THEOREM as RELU_KERNEL_THEOREM
from ojas_ref.functional.rms_norm import BACKWARD_THEOREMS as RMS_NORM_THEOREMS
from ojas_ref.functional.rope import BACKWARD_THEOREM as ROPE_THEOREM
from ojas_ref.functional.swiglu import BACKWARD_THEOREMS as SWIGLU_THEOREMS
from ojas_ref.integrations.hf._checkpointing import install_checkpointing, torch_checkpoint_reentrant
from ojas_ref.integrations.hf.attention import ATTENTION_NAME, register
from ojas_ref.integrations.hf.family import family_support
from ojas_ref.integrations.hf.linear_cross_entropy import LinearCrossEntropyForCausalLM, head_weight_and_bias
from ojas_ref.integrations.hf.report import Change, LeftAlone, OptimizationReport
from ojas_ref.integrations.hf.rms_norm import _OjasRMSNorm, ojas_rms_norm_class, rms_norm_unsupported_reason
from ojas_ref.integrations.hf.rope import RopeUse, rope_unsupported_reason, scope_rope
from ojas_ref.integrations.hf.split_checkpoint import split_unsupported_reason
from ojas_ref.integrations.hf.swiglu import (
    _OjasSwiGLU,
    is_gated_mlp,
    mlp_activation,
    ojas_swiglu_class,
    swiglu_unsupported_reason,
)
from ojas_ref.recipe import MemoryRecipe

SPARSE_EMBEDDING_THEOREMS = (
    "Ojas.InBackward.SparseRows.sgd_sparse_rows_eq",
    "Ojas.InBackward.SparseRows.rows_update_eq_dense",
)

__all__ = ["Change", "LeftAlone", "OptimizationReport", "optimize_model", "revert_model"]

_STATE_ATTR = "_ojas_optimized"

ATTENTION_THEOREMS = (
    "Ojas.Attention.StreamCorrect.attention_forward_correct",
    "Ojas.Attention.Mask.stream_row_masked_keys",
    "Ojas.Attention.BackwardCorrect.attention_backward_dQ_is_derive",
)
LINEAR_CROSS_ENTROPY_THEOREMS = (
    "Ojas.LinearCrossEntropy.ChunkedLse.chunked_lse_chunk",
    "Ojas.LinearCrossEntropy.Reduction.ce_loss_correct",
    "Ojas.LinearCrossEntropy.Gradient.ce_backward_correct",
)
RMS_NORM_NOT_COVERED = (
    "the kernel's floating-point rounding; the cast to the input dtype "
    "(the backward treats it as the identity, as torch's autograd does)"
)


@dataclass
class _State:
    """What a call changed, so that :func:`revert_model` can undo it."""

    report: OptimizationReport
    #: the call's arguments (a second call with others raises)
    arguments: dict[str, Any] = field(default_factory=dict)
    attn_implementation: Optional[str] = None  # the Hugging Face implementation replaced
    loss_head: Optional[LinearCrossEntropyForCausalLM] = None
    enabled_checkpointing: bool = False
    #: (module, its ``_gradient_checkpointing_func`` before) where this call replaced the function of
    #: checkpointing the user had enabled already (checkpoint="offload", or a reentrant one)
    checkpoint_funcs: list[tuple[nn.Module, Any]] = field(default_factory=list)
    swapped: list[tuple[nn.Module, type]] = field(default_factory=list)  # (module, its class before the swap)
    rope_use: Optional[RopeUse] = None  # this model's use of the replaced apply_rotary_pos_emb
    rope_hooks: list[Any] = field(default_factory=list)  # handles of scope_rope's hooks
    sparse_embedding: Optional[nn.Module] = None  # the input embedding made sparse (sparse_embedding=True)
    activations: list[tuple[nn.Module, Any]] = field(default_factory=list)  # (layer, its activation before)
    split: bool = False  # some decoder layer checkpointed as two segments (checkpoint_split=True)
    #: (module, its checkpointing function) after this call, which :func:`_check_edits` checks
    checkpointing: list[tuple[nn.Module, Any]] = field(default_factory=list)
    guard: Any = None  # the handle of _check_edits, the model's forward pre-hook

    def __setstate__(self, state: dict[str, Any]) -> None:
        """An unpickled model (another process) gets the ``"ojas"`` attention registered there."""
        self.__dict__.update(state)
        if self.attn_implementation is not None:
            register()


def _is_hf_model(model: nn.Module) -> bool:
    try:
        from transformers import PreTrainedModel
    except ImportError:
        return False
    return isinstance(model, PreTrainedModel)


def _hf_target(model: nn.Module) -> nn.Module:
    """The ``PreTrainedModel`` inside a PEFT model, or the model itself."""
    get_base = getattr(model, "get_base_model", None)
    if callable(get_base) and not _is_hf_model(model):
        return get_base()
    return model


def _effective_recipe(recipe: Optional[MemoryRecipe], keywords: dict[str, Any]) -> MemoryRecipe:
    """``recipe`` (default ``MemoryRecipe()``) with the keywords given (not None) in place of its fields."""
    if recipe is None:
        recipe = MemoryRecipe()
    elif not isinstance(recipe, MemoryRecipe):
        raise TypeError(f"recipe must be an ojas_ref.MemoryRecipe or None, got {type(recipe).__name__}")
    given = {name: value for name, value in keywords.items() if value is not None}
    return dataclasses.replace(recipe, **given)


@renamed_keyword("cross_entropy", "linear_cross_entropy")
def optimize_model(
    model: nn.Module,
    recipe: Optional[MemoryRecipe] = None,
    *,
    attention: Optional[bool] = None,
    linear_cross_entropy: Optional[bool] = None,
    checkpoint: Union[bool, Literal["offload"], None] = None,
    rms_norm: Optional[bool] = None,
    swiglu: Optional[bool] = None,
    rope: Optional[bool] = None,
    sparse_embedding: Optional[bool] = None,
    relu_mask: Optional[bool] = None,
    checkpoint_split: Optional[bool] = None,
) -> tuple[nn.Module, OptimizationReport]:
    """Apply ojas attention, ojas linear cross-entropy, the fused RMSNorm and SwiGLU and (optionally)
    per-layer activation checkpointing to ``model`` in place; return ``(model, report)``.

    Every keyword but ``model`` and ``recipe`` is a field of :class:`ojas_ref.MemoryRecipe` and
    overrides it; None (the default): ``recipe``'s value (``MemoryRecipe()``'s defaults, given
    below, when ``recipe`` is None). ``recipe``'s optimizer fields (``in_backward``, ...) are not
    read here; ``report.recipe`` is the recipe the call applied, keywords included.

    Args:
        model: a Hugging Face ``PreTrainedModel`` (or a PEFT model around one), or any
            ``nn.Module`` (its ``nn.MultiheadAttention`` modules are changed).
        recipe: the settings (default ``MemoryRecipe()``); only
            :meth:`~ojas_ref.MemoryRecipe.model_options` are read.
        attention: (default True) compute attention by :func:`ojas_ref.attention` (the Triton kernel on CUDA).
        linear_cross_entropy: (default True) compute a Hugging Face causal LM's training loss by
            :func:`ojas_ref.linear_cross_entropy` from the hidden states and ``lm_head``
            (training mode with ``labels``: ``output.logits`` is None, as Liger-Kernel's).
            ``cross_entropy=``, its name in release 0.1, is a deprecated alias (it warns).
        checkpoint: (default False) per-layer activation checkpointing (Hugging Face models only): ``True``:
            ``gradient_checkpointing_enable(use_reentrant=False)``; ``"offload"``: the same, each
            decoder layer's input (the hidden states the checkpoint keeps) copied to pinned host
            memory on a side CUDA stream in the forward and back, prefetched one layer ahead, in
            the backward (:class:`ojas_ref.nn.offload.OffloadedCheckpoint`; on the CPU
            a plain copy, bit-identical to ``True``); ``False``: none.
        checkpoint_split: (default False; with ``checkpoint`` True or ``"offload"``) each checkpointed
            decoder layer as two checkpointed segments, (input norm + self-attention) and
            (post-attention norm + MLP), instead of one: both segments' inputs kept (or offloaded
            and prefetched with ``"offload"``), so the MLP half's backward runs without the
            attention half's recomputed activations alive (one layer input more per layer kept,
            on the host with ``"offload"``). Through the layer's checkpointing function
            (:class:`ojas_ref.integrations.hf.SplitCheckpoint`) and ``__class__`` swaps
            of the four modules (same parameters and ``state_dict``): Hugging Face's forward runs,
            and eval / ``no_grad`` / ``generate`` compute as before. The decoder layers checked:
            Llama, Mistral, Qwen2, Qwen3 (:data:`ojas_ref.integrations.hf.SPLIT_LAYERS`);
            ``NotImplementedError`` naming the family otherwise, before anything is changed.
            Exact for deterministic layers: the losses and gradients of ``checkpoint_split=False``
            bit for bit (tests/nn/test_split_checkpoint.py).
        rms_norm: (default True) compute a Hugging Face model's RMSNorm modules of the checked classes
            (Llama, Mistral, Qwen2, Qwen3, Phi-3, Gemma 2, Gemma 3; q_norm / k_norm too) by
            :func:`ojas_ref.functional.rms_norm.rms_norm`, the same formula and casts (a class swap:
            same parameters and ``state_dict``); plain models: no effect.
        swiglu: (default True) compute the gate product ``act(gate) * up`` of a Hugging Face model's gated
            MLPs of the checked classes (Llama, Mistral, Qwen2, Qwen3, Phi-3, Gemma 2, Gemma 3)
            with a SiLU activation (SwiGLU) or torch's tanh-approximated gelu (GeGLU, Gemma's
            ``gelu_pytorch_tanh``) by :func:`ojas_ref.functional.swiglu.swiglu` (gate and up
            saved, the activation recomputed in backward: one [tokens, intermediate] tensor less
            per layer); other activations are left alone with the reason; a class swap as for
            ``rms_norm``; plain models: no effect.
        rope: (default True) compute the rotary position embedding of the checked families (Llama, Mistral,
            Qwen2, Qwen3, Gemma 2, Gemma 3; not Phi-3's partial rotation) by the fused kernel of
            :mod:`ojas_ref.functional.rope` (one launch for q and k, forward and backward), which
            gives Hugging Face's values and gradients bit for bit. The modeling module's
            ``apply_rotary_pos_emb`` is replaced (until the last optimized model of the family is
            reverted) by a function that runs the kernel inside this model's attention modules
            (forward hooks mark them) and Hugging Face's own function everywhere else; plain
            models: no effect.
        sparse_embedding: (default False; Hugging Face models only) set the input embedding's
            ``sparse = True``: its backward gives a row-sparse COO gradient (the rows of the
            batch's tokens) instead of a dense ``[V, D]`` one, ``V * D * element_size`` bytes not
            allocated.  For :class:`ojas_ref.InBackwardOptimizer` with ``torch.optim.SGD``
            (momentum 0, weight decay 0, float32 / float64; Ojas.InBackward.SparseRows.
            sgd_sparse_rows_eq: the row update is the dense step, tested bit for bit on the CPU);
            AdamW, momentum, clipping or accumulation then raise (a row with zero gradient still
            changes under them).  Left alone, with the reason, when the embedding is tied to the
            output head (one tensor used twice: its summed gradient is dense), is not an
            ``nn.Embedding``, or uses ``max_norm`` / ``scale_grad_by_freq``.
        relu_mask: (default True; plain models) the ReLU activation of every ``nn.TransformerEncoderLayer`` /
            ``nn.TransformerDecoderLayer`` with feed-forward dropout (``linear2(dropout(relu(linear1(x))))``)
            computed by :func:`ojas_ref.functional.relu.relu`, which saves the mask packed 1 bit per
            element instead of relu's output: one ``[tokens, dim_feedforward]`` tensor less per
            layer in training, values and gradients bit for bit torch's
            (Ojas.ReLU.Backward.relu_packed_backward_bitwise).  Left alone, with the reason, without
            dropout (``linear2`` then keeps relu's output anyway: the mask would add ``n / 8`` bytes)
            and for other activations; Hugging Face models: no effect.

    The report lists every module changed, with the theorems behind it and what they do
    not cover, and every candidate left alone with the reason (dropout, soft-capped
    attention, untested family, not a Linear head, ...): ``print(report)`` a summary,
    ``report.details()`` each module. Calling it again on an optimized model with the same
    model fields changes nothing and returns the first report (a copy with the new
    ``report.recipe`` when only the optimizer fields differ); with other model fields it raises
    ``ValueError`` (:func:`revert_model` first). A deep copy or an unpickled copy of an
    optimized model is optimized on its own: reverting one leaves the other as it is.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    recipe = _effective_recipe(
        recipe,
        dict(
            attention=attention,
            linear_cross_entropy=linear_cross_entropy,
            checkpoint=checkpoint,
            rms_norm=rms_norm,
            swiglu=swiglu,
            rope=rope,
            sparse_embedding=sparse_embedding,
            relu_mask=relu_mask,
            checkpoint_split=checkpoint_split,
        ),
    )
    arguments = recipe.model_options()
    target = _hf_target(model)
    existing: Optional[_State] = getattr(target, _STATE_ATTR, None)
    if existing is not None:
        changed = [f"{k}={v!r} (now {arguments[k]!r})" for k, v in existing.arguments.items() if arguments[k] != v]
        if changed:
            raise ValueError(
                f"optimize_model: the model was optimized already, with {', '.join(changed)}; "
                "revert_model(model) first, then optimize_model with the new arguments"
            )
        existing.report._model = weakref.ref(target)
        if existing.report.recipe == recipe:
            return model, existing.report
        return model, dataclasses.replace(existing.report, recipe=recipe)  # other optimizer fields
    checkpoint = recipe.checkpoint
    if _is_hf_model(target):
        if recipe.checkpoint_split:
            reason = split_unsupported_reason(target)
            if reason is not None:
                raise NotImplementedError(f"checkpoint_split=True: {reason}")
        state = _optimize_hf(target, recipe)
        _make_embedding_sparse(target, recipe.sparse_embedding, state)
        if checkpoint:
            state.checkpointing = [
                (m, m.__dict__.get("_gradient_checkpointing_func"))
                for m in target.modules()
                if hasattr(m, "gradient_checkpointing")
            ]
        if state.checkpointing or state.sparse_embedding is not None:
            state.guard = target.register_forward_pre_hook(_check_edits)
        state.report.planned, state.report.unplanned = _planned(target, state)
    else:
        if recipe.sparse_embedding:
            raise NotImplementedError(
                "sparse_embedding=True is supported for Hugging Face models only; set "
                "sparse=True on the nn.Embedding of a plain model"
            )
        if checkpoint:
            raise NotImplementedError(
                f"checkpoint={checkpoint!r} is supported for Hugging Face models only; wrap "
                "the layers of a plain model in "
                "torch.utils.checkpoint.checkpoint(use_reentrant=False)"
            )
        state = _optimize_torch(target, recipe)
    state.arguments = arguments
    state.report.recipe = recipe
    param = next(target.parameters(), None)
    state.report.placement = None if param is None else (param.device, param.dtype)
    state.report._model = weakref.ref(target)
    setattr(target, _STATE_ATTR, state)
    return model, state.report


def revert_model(model: nn.Module) -> nn.Module:
    """Undo :func:`optimize_model`: the model computes as before the call. A model that was
    not optimized is returned unchanged."""
    target = _hf_target(model)
    state: Optional[_State] = target.__dict__.pop(_STATE_ATTR, None)
    if state is None:
        return model
    if state.attn_implementation is not None:
        target.set_attn_implementation(state.attn_implementation)
    if state.loss_head is not None:
        state.loss_head.remove(target)
    if state.enabled_checkpointing:
        (getattr(target, "activation_checkpointing_disable", None) or target.gradient_checkpointing_disable)()
    for module, func in state.checkpoint_funcs:
        if func is None:
            module.__dict__.pop("_gradient_checkpointing_func", None)
        else:
            module._gradient_checkpointing_func = func
    for module, cls in reversed(state.swapped):  # a module swapped twice (a split norm) gets its first class
        module.__class__ = cls
    for module, activation in state.activations:
        module.activation = activation
    if state.rope_use is not None:
        for handle in state.rope_hooks:
            handle.remove()
        state.rope_use.release()
    if state.sparse_embedding is not None:
        state.sparse_embedding.sparse = False
    if state.guard is not None:
        state.guard.remove()
    return model


def _sparse_unsupported_reason(model: nn.Module, embedding: nn.Module) -> Optional[str]:
    """Why ``embedding`` (the input embedding of ``model``) cannot be made sparse, or None."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if not isinstance(embedding, nn.Embedding):
        return f"the input embedding is {type(embedding).__name__}, not an nn.Embedding"
    if head is not None and getattr(head, "weight", None) is embedding.weight:
        return (
            "tied to the output head (tie_word_embeddings): the one tensor's gradient is the sum of both "
            "uses, and the head's part is dense in every row, so a sparse embedding gradient would not "
            "be the whole gradient; left dense"
        )
    if embedding.max_norm is not None or embedding.scale_grad_by_freq:
        return "max_norm / scale_grad_by_freq: the sparse backward with them is not checked"
    return None


def _make_embedding_sparse(model: nn.Module, enabled: bool, state: _State) -> None:
    """``sparse_embedding=True``: make the input embedding's gradient row-sparse, or report why not."""
    if not enabled:
        return
    embedding = model.get_input_embeddings()
    name = next((n for n, m in model.named_modules() if m is embedding), "(input embedding)")
    reason = _sparse_unsupported_reason(model, embedding)
    if reason is None and embedding.sparse:
        reason = "already sparse=True"
    if reason is not None:
        state.report.left_alone.append(LeftAlone(name, f"sparse_embedding: {reason}"))
        return
    embedding.sparse = True
    state.sparse_embedding = embedding
    weight = embedding.weight
    saved = weight.numel() * weight.element_size()
    state.report.changed.append(
        Change(
            name,
            f"nn.Embedding sparse=True: row-sparse gradient (the batch's token rows), the dense "
            f"{list(weight.shape)} gradient ({saved} bytes) not allocated; update it with "
            "InBackwardOptimizer(optimizer_class=torch.optim.SGD) (momentum 0, weight decay 0; AdamW raises)",
            SPARSE_EMBEDDING_THEOREMS,
            "the floats: rows summed in token order as the dense CPU backward does "
            "(tested bit for bit on the CPU; CUDA's dense backward sums in another order)",
        )
    )
    state.report.notes.append(f"sparse_embedding: {saved} bytes of embedding gradient not allocated per step")


def _check_edits(model: nn.Module, args: tuple) -> None:
    """Forward pre-hook of an optimized Hugging Face model, in training mode: what a later edit of
    the model would silently bypass. A checkpointing function replaced since in a module that
    checkpoints (e.g. by ``gradient_checkpointing_enable``, which drops the offload, the split or
    the non-reentrant one) raises ``RuntimeError``, unless it is the same plain non-reentrant
    ``torch.utils.checkpoint.checkpoint`` that ``checkpoint=True`` set (as Hugging Face's Trainer
    sets with ``gradient_checkpointing=True``); a new input embedding (``set_input_embeddings``) is
    made sparse too with ``sparse_embedding``, or raises ``NotImplementedError`` when it cannot be."""
    state: Optional[_State] = model.__dict__.get(_STATE_ATTR)
    if not model.training or state is None:
        return
    plain = state.arguments["checkpoint"] is True and not state.split
    for i, (module, func) in enumerate(state.checkpointing):
        now = module.__dict__.get("_gradient_checkpointing_func")
        if now is func or not getattr(module, "gradient_checkpointing", False):
            continue
        if plain and torch_checkpoint_reentrant(now) is False:  # the same non-reentrant checkpointing
            state.checkpointing[i] = (module, now)
        else:
            raise RuntimeError(
                f"the checkpointing function of {type(module).__name__} was replaced after "
                f"optimize_model(checkpoint={state.arguments['checkpoint']!r}"
                f"{', checkpoint_split=True' if state.split else ''}) by {now!r} (e.g. by "
                "gradient_checkpointing_enable), which would silently undo it: revert_model(model), "
                "set up the checkpointing, then optimize_model"
            )
    embedding = model.get_input_embeddings()
    if state.sparse_embedding is not None and embedding is not state.sparse_embedding:
        reason = _sparse_unsupported_reason(model, embedding)
        if reason is not None:
            raise NotImplementedError(
                f"sparse_embedding=True: the input embedding was replaced after optimize_model "
                f"and the new one cannot be made sparse: {reason}. revert_model(model)"
            )
        embedding.sparse = True
        state.sparse_embedding = embedding


# --------------------------------------------------------------------------
# Hugging Face
# --------------------------------------------------------------------------


def _attention_modules(model: nn.Module) -> list[str]:
    """Names of the modules whose forward calls the attention interface (they carry
    ``is_causal`` and a ``config`` in Hugging Face's models); reported, not changed."""
    return [
        name
        for name, m in model.named_modules()
        if hasattr(m, "is_causal") and hasattr(m, "config") and type(m).__name__.endswith("Attention")
    ]


def _optimize_hf(model: nn.Module, recipe: MemoryRecipe) -> _State:
    """Apply ``recipe``'s model fields but ``sparse_embedding`` to a Hugging Face model."""
    register()
    support = family_support(model)
    report = OptimizationReport()
    state = _State(report)
    attn_names = [(n, type(m).__name__) for n, m in model.named_modules() if n in _attention_modules(model)]
    attn_names = attn_names or [("(attention)", "attention")]
    if recipe.attention:
        if support.attention is None:
            state.attn_implementation = model.config._attn_implementation
            model.set_attn_implementation(ATTENTION_NAME)
            report.changed += [
                Change(
                    n,
                    f"{cls}: attention {state.attn_implementation} -> ojas_ref.attention",
                    ATTENTION_THEOREMS,
                    "the kernel's floating-point rounding; Hugging Face's mask and GQA layout",
                    "attention",
                )
                for n, cls in attn_names
            ]
        else:
            report.left_alone += [LeftAlone(n, support.attention) for n, _ in attn_names]
    _swap_rms_norms(model, recipe.rms_norm, support.rms_norm, state)
    _swap_swiglu_mlps(model, recipe.swiglu, support.swiglu, state)
    _replace_rope(model, recipe.rope, state)
    head_name = next((n for n, m in model.named_modules() if m is model.get_output_embeddings()), "lm_head")
    if recipe.linear_cross_entropy:
        if support.linear_cross_entropy is None:
            state.loss_head = LinearCrossEntropyForCausalLM(model, support.softcap)
            state.loss_head.install(model)
            cap = f", final soft cap {support.softcap}" if support.softcap is not None else ""
            report.changed.append(
                Change(
                    head_name,
                    f"training loss with labels: logits + cross-entropy -> ojas_ref.linear_cross_entropy{cap}",
                    LINEAR_CROSS_ENTROPY_THEOREMS,
                    "the label shift and num_items_in_batch division (Hugging Face's "
                    "ForCausalLMLoss, tested); the kernel's floating-point rounding",
                    "linear_cross_entropy",
                )
            )
            report.loss_bytes_saved_per_token = _logits_bytes_per_token(model)
        else:
            report.left_alone.append(LeftAlone(head_name, support.linear_cross_entropy))
    if recipe.checkpoint:
        install_checkpointing(model, state, recipe.checkpoint, recipe.checkpoint_split)
    return state


def _planned(model: nn.Module, state: _State) -> tuple[Optional[tuple[Any, torch.dtype, dict[str, bool]]], str]:
    """The report's ``planned`` and ``unplanned``: (the planner's model, the weights' dtype, the
    model fields of the recipe as :func:`_optimize_hf` applied them: a primitive left alone
    everywhere is False) of ``model``, or None and the reason :mod:`ojas_ref.memory` does not model it."""
    from ojas_ref import memory as P

    if state.sparse_embedding is not None:
        return None, "the sparse embedding is not modelled by the planner"
    dtypes = {p.dtype for p in model.parameters()}
    if len(dtypes) != 1 or next(iter(dtypes)) not in (torch.float32, torch.bfloat16):
        return None, f"the planner models float32 or bfloat16 weights of one dtype, not {sorted(map(str, dtypes))}"
    try:
        shape = P.Model.from_module(model)
    except (NotImplementedError, ValueError, TypeError) as err:
        return None, f"not a Llama-shaped decoder the planner models: {err}"
    applied = dict(
        attention=state.attn_implementation is not None,
        linear_cross_entropy=state.loss_head is not None,
        rms_norm=any(isinstance(m, _OjasRMSNorm) for m, _ in state.swapped),
        swiglu=any(isinstance(m, _OjasSwiGLU) for m, _ in state.swapped),
        rope=state.rope_use is not None,
        relu_mask=False,  # no effect on a Hugging Face model
        sparse_embedding=False,  # left alone (else the planner does not model it: above)
        checkpoint_split=state.split,
    )
    return (shape, next(iter(dtypes)), applied), ""


def _swap_classes(
    model: nn.Module,
    flag: str,
    enabled: bool,
    family_reason: Optional[str],
    state: _State,
    is_candidate: Callable[[nn.Module], bool],
    unsupported: Callable[[nn.Module], Optional[str]],
    swapped_class: Callable[[type], type],
    change: Callable[[str, nn.Module, type], Change],
) -> None:
    """Swap the class of every candidate module that ``unsupported`` clears (``change`` reports
    it); report the other candidates left alone with the reason (``flag=False``, the family's,
    or ``unsupported``'s)."""
    for name, module in model.named_modules():
        if not is_candidate(module):
            continue
        cls = type(module)
        reason = (f"{flag}=False" if not enabled else family_reason) or unsupported(module)
        if reason is not None:
            state.report.left_alone.append(LeftAlone(name, reason))
            continue
        module.__class__ = swapped_class(cls)
        state.swapped.append((module, cls))
        state.report.changed.append(change(name, module, cls))


def _swap_rms_norms(model: nn.Module, enabled: bool, family_reason: Optional[str], state: _State) -> None:
    """Swap the class of every checked Hugging Face RMSNorm module (report the others)."""

    def change(name: str, module: nn.Module, cls: type) -> Change:
        offset = module._ojas_offset
        return Change(
            name,
            f"{cls.__name__} -> ojas_ref.rms_norm (cast {module._ojas_cast}{', weight 1 + w' if offset else ''})",
            (RMS_NORM_THEOREMS[1] if offset else RMS_NORM_THEOREMS[0],),
            RMS_NORM_NOT_COVERED,
            "rms_norm",
        )

    _swap_classes(
        model,
        "rms_norm",
        enabled,
        family_reason,
        state,
        lambda m: type(m).__name__.endswith("RMSNorm") and not isinstance(m, _OjasRMSNorm),
        rms_norm_unsupported_reason,
        ojas_rms_norm_class,
        change,
    )


def _swap_swiglu_mlps(model: nn.Module, enabled: bool, family_reason: Optional[str], state: _State) -> None:
    """Swap the class of every checked Hugging Face gated MLP with a SiLU or tanh-gelu activation
    (report the other gated MLPs, e.g. an exact-erf gelu; an MLP without a gate, as GPT-2's, is no
    candidate)."""

    def change(name: str, module: nn.Module, cls: type) -> Change:
        act = mlp_activation(module)
        call = "ojas_ref.swiglu" if act == "silu" else f"ojas_ref.swiglu(activation={act!r})"
        return Change(
            name,
            f"{cls.__name__}: {act}(gate) * up -> {call} (gate and up saved, {act} recomputed in backward)",
            (SWIGLU_THEOREMS[act],),
            "the kernel's floating-point rounding",
            "swiglu",
        )

    _swap_classes(
        model,
        "swiglu",
        enabled,
        family_reason,
        state,
        lambda m: is_gated_mlp(m) and not isinstance(m, _OjasSwiGLU),
        swiglu_unsupported_reason,
        ojas_swiglu_class,
        change,
    )


def _replace_rope(model: nn.Module, enabled: bool, state: _State) -> None:
    """Replace the family's ``apply_rotary_pos_emb`` when its formula is the checked one (report
    it left alone otherwise; a family without one, as GPT-2, is not reported)."""
    if not any(type(m).__name__.endswith("RotaryEmbedding") for m in model.modules()):
        return
    reason, module_name = rope_unsupported_reason(model)
    name = f"{module_name}.apply_rotary_pos_emb"
    if not enabled or reason is not None:
        state.report.left_alone.append(LeftAlone(name, "rope=False" if not enabled else reason))
        return
    state.rope_use = RopeUse(module_name)
    state.rope_hooks = scope_rope([m for n, m in model.named_modules() if n in _attention_modules(model)])
    state.report.changed.append(
        Change(
            name,
            "rotary embedding (rotate-half) -> ojas_ref.functional.rope in this model's attention, bit for bit "
            "Hugging Face's",
            (ROPE_THEOREM,),
            "the rounding (the kernel repeats torch's operation-by-operation rounding; tested bit for bit)",
            "rope",
        )
    )


def _logits_bytes_per_token(model: nn.Module) -> int:
    """Bytes per token the standard loss holds at its peak: the logits in the weight's dtype,
    their float32 copy (``ForCausalLMLoss`` upcasts) when that dtype is narrower, and the
    float32 gradient of the logits. An estimate from the shapes, not a theorem."""
    weight, _ = head_weight_and_bias(model.get_output_embeddings())
    vocab = weight.shape[0]
    size = weight.element_size()
    return vocab * (size + (4 if size < 4 else 0) + 4)


# --------------------------------------------------------------------------
# Plain PyTorch
# --------------------------------------------------------------------------


def _swap_feed_forward_relu(name: str, layer: nn.Module, enabled: bool, state: _State) -> None:
    """The ReLU of an ``nn.TransformerEncoderLayer`` / ``DecoderLayer`` with feed-forward dropout ->
    :func:`ojas_ref.functional.relu.relu` (or :class:`ojas_ref.nn.ReLU` for an ``nn.ReLU``
    module); reported left alone otherwise, with the reason."""
    from torch.nn import functional as F

    from ojas_ref.functional.relu import relu
    from ojas_ref.nn.modules import ReLU

    act = getattr(layer, "activation", None)
    where = f"{name or '(model)'}.activation"
    if not (act is F.relu or (type(act) is nn.ReLU and not act.inplace)):
        what = getattr(act, "__name__", type(act).__name__)
        state.report.left_alone.append(
            LeftAlone(where, f"relu_mask: the activation is {what}, not F.relu / nn.ReLU: no packed-mask form")
        )
        return
    dropout = getattr(layer, "dropout", None)
    if not enabled:
        state.report.left_alone.append(LeftAlone(where, "relu_mask=False"))
        return
    if not isinstance(dropout, nn.Dropout) or dropout.p == 0:
        state.report.left_alone.append(
            LeftAlone(
                where,
                "relu_mask: no dropout between relu and linear2, which "
                "then keeps relu's output anyway (a mask would add n / 8 bytes)",
            )
        )
        return
    layer.activation = relu if act is F.relu else ReLU()
    state.activations.append((layer, act))
    state.report.changed.append(
        Change(
            where,
            "relu -> ojas_ref.functional.relu.relu: its mask saved packed 1 bit per element instead of relu's "
            "output (one [tokens, dim_feedforward] tensor less per layer in training); values and gradients bit for "
            "bit torch's",
            (RELU_THEOREM, RELU_KERNEL_THEOREM),
            "the sign of a zero output where torch's relu(-0.0) "
            "is +0.0 (the kernel then zeroes -0.0 too), and NaN payloads of relu's value",
            "relu",
        )
    )


def _optimize_torch(model: nn.Module, recipe: MemoryRecipe) -> _State:
    """Apply ``recipe``'s ``attention`` and ``relu_mask`` to a plain PyTorch model."""
    from ojas_ref.nn.modules import MultiheadAttention, unsupported_reason

    report = OptimizationReport()
    state = _State(report)
    for name, module in model.named_modules():
        if type(module) in (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer):
            _swap_feed_forward_relu(name, module, recipe.relu_mask, state)
        if type(module) is not nn.MultiheadAttention:
            continue
        if not recipe.attention:
            report.left_alone.append(LeftAlone(name or "(model)", "attention=False"))
            continue
        reason = unsupported_reason(module)
        if reason is not None:
            report.left_alone.append(LeftAlone(name or "(model)", reason))
            continue
        module.__class__ = MultiheadAttention
        state.swapped.append((module, nn.MultiheadAttention))
        report.changed.append(
            Change(
                name or "(model)",
                "nn.MultiheadAttention -> ojas_ref.attention",
                ATTENTION_THEOREMS,
                "the kernel's floating-point rounding",
                "attention",
            )
        )
    if not report.changed and not report.left_alone:
        report.notes.append("no nn.MultiheadAttention found")
    if recipe.linear_cross_entropy:
        report.notes.append(
            "a plain model computes its own loss: use ojas_ref.LinearCrossEntropyLoss on the hidden "
            "states and the output layer's weight"
        )
    return state
