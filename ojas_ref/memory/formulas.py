"""The terms of the plan: one function per tensor class, bytes of a :class:`~ojas_ref.memory.model.Model`
under a :class:`~ojas_ref.memory.model.Setting`, each docstring saying where its count comes from."""

from __future__ import annotations

import torch

from ojas_ref.memory.model import (
    LCE_WORKSPACE_FLOOR,
    LCE_WORKSPACE_FRACTION,
    SLICE_ALIGN,
    CUBLAS_HANDLES,
    CUBLAS_WORKSPACE_BYTES,
    Model,
    Setting,
)

__all__ = [
    "LCE_BLOCKS",
    "attention_backward_transient_bytes",
    "attention_saved_bytes",
    "bucket_cap_bytes",
    "bucket_state_bytes",
    "bucket_step_temporary_bytes",
    "bucketed_order",
    "checkpoint_bytes",
    "checkpoint_layer_bytes",
    "checkpoints_per_layer",
    "down_proj_gradient_bytes",
    "embedding_backward_bytes",
    "first_layer_saved_bytes",
    "gradient_order",
    "gradients_before_first_layer_bytes",
    "head_gradient_bytes",
    "head_update_backward_bytes",
    "head_update_forward_bytes",
    "head_updated_first",
    "inputs_bytes",
    "last_bucket_temporary_bytes",
    "layer_gradients_bytes",
    "layer_saved_bytes",
    "lce_gradients_bytes",
    "lce_workspace_bytes",
    "mlp_backward_transient_bytes",
    "mlp_saved_bytes",
    "norm_shared_input_bytes",
    "offloaded_checkpoints_device_bytes",
    "optimizer_state_bytes",
    "overhead_bytes",
    "pending_gradients_bytes",
    "pending_staged_bytes",
    "recomputed_attention_half_bytes",
    "recomputed_layer_bytes",
    "recomputed_mlp_half_bytes",
    "rmsnorm_saved_bytes",
    "rope_bytes",
    "slice_elements",
    "slice_state_bytes",
    "slice_temporary_bytes",
    "sliced",
    "standard_loss_backward_bytes",
    "standard_loss_forward_bytes",
    "standard_loss_logits_gradient_bytes",
    "state_per_gradient",
    "step_temporary_bytes",
    "weights_bytes",
]


def weights_bytes(m: Model, s: Setting) -> int:
    """Parameters x dtype size (:meth:`Model.params`)."""
    return m.params() * s.size


def optimizer_state_bytes(m: Model, s: Setting) -> int:
    """AdamW: exp_avg and exp_avg_sq, two parameter-sized tensors in the parameters' dtype
    (torch.optim.AdamW). SGD without momentum keeps none."""
    return 2 * m.params() * s.size if s.optimizer == "adamw" else 0


def state_per_gradient(s: Setting) -> int:
    """Optimizer state bytes per gradient byte: AdamW's two moments (2), SGD without momentum (0)."""
    return 2 if s.optimizer == "adamw" else 0


def bucket_state_bytes(m: Model, s: Setting, gradient_bytes: int) -> int:
    """With ``recipe.state_device="cpu"`` (``InBackwardOptimizer(state_device="cpu")``), the optimizer state on
    the device during the backward: the state of the parameters in the group's bucket, its
    gradients' ``gradient_bytes`` x :func:`state_per_gradient`. ``_stage`` starts copying a
    parameter's state to the device when it joins its bucket, ``_swap_in`` puts the copies in
    the state for the bucket's step, ``_swap_out`` copies them back to the host and drops them
    at ``_flush``: between updates no state is on the device, during the backward the state of
    about one bucket per group (the planner models one group). The whole
    :func:`optimizer_state_bytes` is in host memory (:attr:`Plan.host`). A prediction; no
    H200 record of it yet."""
    return state_per_gradient(s) * gradient_bytes if s.recipe.state_device == "cpu" else 0


def slice_elements(s: Setting) -> int:
    """With ``recipe.state_slice_mb``, the elements of one slice: half ``state_slice_mb`` MiB (two slices
    are in flight) over the state's bytes per element (:func:`state_per_gradient` x size), rounded
    down to a multiple of SLICE_ALIGN (``InBackwardOptimizer._slice_length`` in the steady state,
    the state existing)."""
    per_element = state_per_gradient(s) * s.size
    if s.recipe.state_slice_mb is None or per_element == 0:
        return 0
    return max(
        SLICE_ALIGN, max(1, int(s.recipe.state_slice_mb * 2**20)) // 2 // per_element // SLICE_ALIGN * SLICE_ALIGN
    )


def sliced(s: Setting, elements: int) -> bool:
    """Whether a parameter of ``elements`` is updated slice by slice (``InBackwardOptimizer(
    state_device="cpu", state_slice_mb=...)``, :meth:`InBackwardOptimizer._step_sliced`): host
    state, a slice size, state (AdamW; SGD without momentum keeps none) larger than it. It is then
    not staged with its bucket: its state is on the device one slice at a time, at its update."""
    n = slice_elements(s)
    return (
        s.recipe.state_device == "cpu"
        and n > 0
        and elements * state_per_gradient(s) * s.size > s.recipe.state_slice_mb * 2**20
        and elements > n
    )


def slice_state_bytes(m: Model, s: Setting) -> int:
    """The state on the device during a sliced update: two slices' (two device buffers per state
    tensor, the slices alternating between them: one stepped while the next is copied in),
    2 x :func:`slice_elements` x the state's bytes per element (an upper bound for a parameter of
    fewer than two whole slices)."""
    return 2 * slice_elements(s) * state_per_gradient(s) * s.size


def slice_temporary_bytes(m: Model, s: Setting) -> int:
    """One slice's step temporaries: foreach AdamW's sqrt of the slice of exp_avg_sq (one buffer of
    the slice's size). SGD: none."""
    return slice_elements(s) * s.size if s.optimizer == "adamw" else 0


def step_temporary_bytes(m: Model, s: Setting) -> int:
    """The standard loop's ``opt.step()``: foreach AdamW's ``_foreach_sqrt`` of exp_avg_sq
    (one parameter-sized buffer; the other updates are in place). SGD: none."""
    return m.params() * s.size if s.optimizer == "adamw" else 0


def rmsnorm_saved_bytes(m: Model, s: Setting) -> int:
    """What ``LlamaRMSNorm`` saves: its input in float32 (``pow`` and ``mul``; the
    ``.to(float32)`` copy, or the input itself in float32), ``rsqrt`` of the variance
    ([tokens, 1] float32), ``x * rsqrt`` in the model dtype (``weight * ...``) and its
    output (saved by the next projection): (4 + 2 size) x tokens x hidden + 4 tokens.
    The fused ``ojas_ref.rms_norm`` (``recipe.rms_norm``) saves its input as it is and the
    float32 rstd per row (``tests/functional/test_rms_norm.py`` checks what it saves), and its output
    is saved by the next projection: 2 size x tokens x hidden + 4 tokens."""
    per_element = 2 * s.size if s.recipe.rms_norm else 4 + 2 * s.size
    return per_element * s.tokens * m.hidden + 4 * s.tokens


def attention_saved_bytes(m: Model, s: Setting) -> int:
    """What attention saves: the rotated queries and keys and the values (the rotary
    ``q * cos + rotate_half(q) * sin`` saves only cos and sin: they need no gradient), the
    output, and the float32 log-sum-exp [batch, heads, seq] (SDPA's flash /
    memory-efficient kernels and the ojas kernel alike). SDPA and the ojas kernel (``seq_major``)
    return their output in the [batch, seq, heads, dim] layout, so Hugging Face's
    ``transpose(1, 2).contiguous()`` is free and o_proj saves the same tensor. (With
    ``ojas_attention_copy``, as measured before the kernel wrote that layout, the output was
    copied: one more [tokens, q width] tensor.)  The fused RoPE (``optimize_model(rope=True)``)
    saves what Hugging Face's saves (cos and sin), so it is no term of its own."""
    out_copies = 2 if s.recipe.attention and s.ojas_attention_copy else 1
    return s.size * s.tokens * ((1 + out_copies) * m.q_width + 2 * m.kv_width) + 4 * s.batch * m.heads * s.seq


def mlp_saved_bytes(m: Model, s: Setting) -> int:
    """``LlamaMLP``: gate output (SiLU's input), SiLU output and up output (the product's
    factors), the product (down_proj's input): 4 x tokens x intermediate. With
    ``recipe.swiglu`` the SiLU output is recomputed in backward, not saved
    (Ojas.SwiGLU.Backward.swiglu_backward_eq_vjp; ``tests/functional/test_swiglu.py`` checks that only
    gate and up are saved): 3 x tokens x intermediate."""
    return (3 if s.recipe.swiglu else 4) * s.size * s.tokens * m.intermediate


def layer_saved_bytes(m: Model, s: Setting) -> int:
    """Saved for backward by one ``LlamaDecoderLayer`` (two norms, attention, MLP; the
    residual additions save nothing): in float32 with SDPA, 10 x tokens x hidden + 4 x
    tokens x intermediate elements."""
    return 2 * rmsnorm_saved_bytes(m, s) + attention_saved_bytes(m, s) + mlp_saved_bytes(m, s)


def checkpoint_bytes(m: Model, s: Setting) -> int:
    """Non-reentrant checkpointing keeps each segment's input: layers x
    :func:`checkpoints_per_layer` x tokens x hidden. With ``recipe.checkpoint="offload"`` these bytes are in pinned
    host memory (:attr:`Plan.host`), not on the device."""
    return m.layers * checkpoints_per_layer(s) * checkpoint_layer_bytes(m, s)


def checkpoints_per_layer(s: Setting) -> int:
    """Checkpointed segments per layer: the layer (1), or with ``recipe.checkpoint_split`` its attention half (input
    x) and its MLP half (input h = x + attention): 2."""
    return 2 if s.recipe.checkpoint_split else 1


def checkpoint_layer_bytes(m: Model, s: Setting) -> int:
    """One checkpoint, a segment's input hidden states: size x tokens x hidden."""
    return s.size * s.tokens * m.hidden


def offloaded_checkpoints_device_bytes(m: Model, s: Setting) -> int:
    """With ``recipe.checkpoint="offload"`` (ojas_ref/nn/offload.py), the segment inputs on the device at
    a time: at most two, min(2, checkpoints) x :func:`checkpoint_layer_bytes`. In the forward, the
    input just packed, whose block ``record_stream`` keeps until its copy to the host has read
    it; in the backward, the input unpacked for the segment being recomputed and the previous
    segment's (the previous layer's, or with ``checkpoint_split`` the same layer's attention half), prefetched
    by the unpack hook. An upper bound of the copies in flight (the H200 records of
    bench_memory.py agree within 1.5%, unsplit)."""
    return min(2, m.layers * checkpoints_per_layer(s)) * checkpoint_layer_bytes(m, s)


def recomputed_layer_bytes(m: Model, s: Setting) -> int:
    """A checkpointed layer recomputed in backward saves :func:`layer_saved_bytes`, less its
    input when the first norm saves the input itself, which is then the checkpoint
    (:func:`norm_shared_input_bytes`)."""
    return layer_saved_bytes(m, s) - norm_shared_input_bytes(m, s)


def norm_shared_input_bytes(m: Model, s: Setting) -> int:
    """The bytes of a segment's input that its norm saves as itself (the checkpoint, not a
    recomputed tensor): in float32 models (the norm's ``.to(float32)`` returns it) and with the
    fused RMSNorm, size x tokens x hidden; none otherwise (a float32 copy is saved)."""
    return s.size * s.tokens * m.hidden if s.size == 4 or s.recipe.rms_norm else 0


def recomputed_mlp_half_bytes(m: Model, s: Setting) -> int:
    """With ``recipe.checkpoint_split``, the MLP half recomputed in its backward: the post-attention norm's and the
    MLP's saved tensors (:func:`rmsnorm_saved_bytes` + :func:`mlp_saved_bytes`), less the
    segment's input the norm shares; the attention half is recomputed only after it."""
    return rmsnorm_saved_bytes(m, s) + mlp_saved_bytes(m, s) - norm_shared_input_bytes(m, s)


def recomputed_attention_half_bytes(m: Model, s: Setting) -> int:
    """With ``recipe.checkpoint_split``, the attention half recomputed in its backward, after the MLP half's saved
    tensors are freed: the input norm's and attention's (:func:`rmsnorm_saved_bytes` +
    :func:`attention_saved_bytes`), less the shared input."""
    return rmsnorm_saved_bytes(m, s) + attention_saved_bytes(m, s) - norm_shared_input_bytes(m, s)


def rope_bytes(m: Model, s: Setting) -> int:
    """cos and sin [1, seq, head_dim] in the model dtype, shared by the layers (the default
    position ids are one row for the whole batch)."""
    return 2 * s.size * s.seq * m.head_dim


def inputs_bytes(m: Model, s: Setting) -> int:
    """input_ids and the shifted labels, int64."""
    return 2 * 8 * s.tokens


def overhead_bytes(m: Model, s: Setting) -> int:
    """cuBLAS workspaces: CUBLAS_HANDLES x CUBLAS_WORKSPACE_BYTES (64 MiB, the residual of
    the fp32 AdamW standard record over 5 x weights: 64.06 MiB)."""
    return CUBLAS_HANDLES * CUBLAS_WORKSPACE_BYTES


def standard_loss_forward_bytes(m: Model, s: Setting) -> int:
    """Hugging Face's ``ForCausalLMLoss`` in the forward: the logits [tokens, V] in the
    model dtype, their float32 copy (``logits.float()``, none in float32) and
    ``log_softmax``'s float32 output, which cross_entropy saves."""
    return (s.size + (4 if s.size < 4 else 0) + 4) * s.tokens * m.vocab


def standard_loss_backward_bytes(m: Model, s: Setting) -> int:
    """The standard loss's peak, in ``log_softmax``'s backward: its saved output,
    ``nll_loss``'s float32 gradient and its own float32 gradient, 3 x 4 x tokens x V."""
    return 3 * 4 * s.tokens * m.vocab


def standard_loss_logits_gradient_bytes(m: Model, s: Setting) -> int:
    """The gradient of the logits [tokens, V] in the model dtype, the head's backward input
    with the standard loss (none with the linear cross-entropy: it has no logits)."""
    return 0 if s.recipe.linear_cross_entropy else s.size * s.tokens * m.vocab


def lce_gradients_bytes(m: Model, s: Setting) -> int:
    """:func:`ojas_ref.linear_cross_entropy` (the kernel's 3-product schedule, reductions
    mean / sum) computes grad_input [tokens, hidden] and grad_weight [V, hidden] in the
    forward and holds them until backward; no logits remain
    (Ojas.LinearCrossEntropy.Gradient.ce_backward_correct: the chunked backward is the gradient)."""
    return s.size * (s.tokens + m.vocab) * m.hidden


def lce_workspace_bytes(m: Model, s: Setting) -> int:
    """One token chunk's logits [n, V] (G written over them), its gathered rows and
    grad_input rows (2 x [n, hidden]) and the float32 loss and lse [tokens]; with
    n = round_down(budget / ((V + 2 hidden) size), 8) and
    budget = max(LCE_WORKSPACE_FRACTION x gradients, 16 MiB), as ``_three_products``
    sizes it when some token is ignored (the last one, whose label is padding). That one
    block suffices is Ojas.LinearCrossEntropy.ChunkedLse.chunked_lse_chunk (lse streamed over
    chunks of any size); the kernel's stated bound, gradients + workspace <=
    LCE_PEAK_OVER_GRADIENTS x gradients, holds whenever the budget is not the floor."""
    budget = max(int(LCE_WORKSPACE_FRACTION * lce_gradients_bytes(m, s)), LCE_WORKSPACE_FLOOR)
    rows = min(max(budget // ((m.vocab + 2 * m.hidden) * s.size) // 8 * 8, 8), s.tokens)
    return rows * s.size * (m.vocab + 2 * m.hidden) + 2 * 4 * s.tokens


def head_gradient_bytes(m: Model, s: Setting) -> int:
    """The output layer's weight gradient [V, hidden] (the embedding's, when tied)."""
    return s.size * m.vocab * m.hidden


def head_updated_first(m: Model, s: Setting) -> bool:
    """Whether InBackwardOptimizer updates (and frees) the head's gradient as soon as it
    exists: the head is untied (a tied weight's hook fires once, after the embedding's
    contribution) and its gradient fills a bucket alone (at least :func:`bucket_cap_bytes`)."""
    return s.recipe.in_backward and not m.tied and head_gradient_bytes(m, s) >= bucket_cap_bytes(s)


def bucket_cap_bytes(s: Setting) -> int:
    """InBackwardOptimizer's ``_bucket_cap_bytes``: ``int(bucket_cap_mb * 2**20)``."""
    return int(s.recipe.bucket_cap_mb * 2**20)


def bucket_step_temporary_bytes(m: Model, s: Setting) -> int:
    """InBackwardOptimizer's update of the head's bucket, the first of the backward when
    :func:`head_updated_first`: foreach AdamW's step allocates one buffer of the
    gradient's size (the sqrt of exp_avg_sq); a :func:`sliced` head one of a slice's
    (:func:`slice_temporary_bytes`). SGD, or a head that waits: none."""
    if s.optimizer != "adamw" or not head_updated_first(m, s):
        return 0
    return slice_temporary_bytes(m, s) if sliced(s, m.vocab * m.hidden) else head_gradient_bytes(m, s)


def mlp_backward_transient_bytes(m: Model, s: Setting) -> int:
    """The largest point of a decoder layer's backward, in the MLP: the gradient of the
    product [tokens, I] and the gradients of its two factors (2 x [tokens, I]), less the
    product (freed with down_proj's node). down_proj's weight gradient is counted with
    the gradients (:func:`down_proj_gradient_bytes`, :func:`pending_gradients_bytes`)."""
    return 2 * s.size * s.tokens * m.intermediate


def attention_backward_transient_bytes(m: Model, s: Setting) -> int:
    """With ``recipe.checkpoint_split``, the point of a layer's attention backward: the gradient of the attention
    output (o_proj's input gradient, [tokens, q width]), the kernel's dq, dk, dv ([tokens, q + 2 kv
    width], kernels/ojas_kernels/attention_backward.py ``_backward``) and its float32 delta [batch, heads, seq]. A
    prediction from the kernel's allocations (no record isolates this phase)."""
    return s.size * s.tokens * (2 * m.q_width + 2 * m.kv_width) + 4 * s.batch * m.heads * s.seq


def layer_gradients_bytes(m: Model, s: Setting, count: int) -> int:
    """The first ``count`` weight gradients of a layer's backward (:func:`gradient_order`'s layer
    order: down, up, gate, post-attention norm, o, ...)."""
    return sum(gradient_order(m)[-1 - 9 : -1][:count]) * s.size


def down_proj_gradient_bytes(m: Model, s: Setting) -> int:
    """down_proj's weight gradient [hidden, I], the first of a layer's backward."""
    return s.size * m.hidden * m.intermediate


def gradient_order(m: Model) -> list[int]:
    """Parameter sizes (elements) in the order backward completes their gradients: the head
    (untied), the final norm, per layer from the last down, up, gate, post-attention norm,
    o, v, k, q, input norm, then the embedding (a tied weight's, summed, last)."""
    layer = [m.hidden * m.intermediate] * 3 + [
        m.hidden,
        m.q_width * m.hidden,
        m.kv_width * m.hidden,
        m.kv_width * m.hidden,
        m.q_width * m.hidden,
        m.hidden,
    ]
    return ([] if m.tied else [m.vocab * m.hidden]) + [m.hidden] + layer * m.layers + [m.vocab * m.hidden]


def bucketed_order(m: Model, s: Setting) -> list[int]:
    """:func:`gradient_order` of the gradients that go through InBackwardOptimizer's buckets:
    all of them, but the head's with ``head_update`` (updated inside the loss, it never has a
    whole gradient)."""
    order = gradient_order(m)
    return order[1:] if s.recipe.head_update and not m.tied else order


def pending_gradients_bytes(m: Model, s: Setting, count: int) -> int:
    """InBackwardOptimizer's gradients not yet updated after the first ``count`` of
    :func:`bucketed_order`: a bucket is updated and freed when its gradients reach
    :func:`bucket_cap_bytes` (the rule of Ojas.InBackward.Buckets.backprop_cap_bucketed_eq_standard).
    A model whose gradients fit in one bucket keeps them all until the end, as the
    standard loop."""
    return _pending(m, s, count)[0]


def pending_staged_bytes(m: Model, s: Setting, count: int) -> int:
    """The part of :func:`pending_gradients_bytes` whose parameters' state is staged with the
    bucket (host state): those not :func:`sliced`."""
    return _pending(m, s, count)[1]


def _pending(m: Model, s: Setting, count: int) -> tuple[int, int]:
    """(pending gradient bytes, those of parameters not :func:`sliced`) after ``count`` gradients."""
    pending = staged = 0
    for n in bucketed_order(m, s)[:count]:
        pending += n * s.size
        staged += 0 if sliced(s, n) else n * s.size
        if pending >= bucket_cap_bytes(s):
            pending = staged = 0
    return pending, staged


def gradients_before_first_layer_bytes(m: Model, s: Setting) -> int:
    """The standard loop's gradients accumulated when the first decoder layer's backward
    starts: every parameter's but the embedding's and the first layer's (a tied head's
    contribution waits in autograd's buffer for the embedding's: the same bytes)."""
    return (m.params() - m.vocab * m.hidden - m.layer_params()) * s.size + (head_gradient_bytes(m, s) if m.tied else 0)


def first_layer_saved_bytes(m: Model, s: Setting) -> int:
    """The first decoder layer's saved tensors in its backward: :func:`layer_saved_bytes`,
    or when checkpointed :func:`recomputed_layer_bytes` and its checkpoint (the
    embedding's output); with ``recipe.checkpoint_split``, :func:`recomputed_mlp_half_bytes` and both halves'
    checkpoints (on the device then, offloaded or not: the attention half's is prefetched)."""
    if (
        s.recipe.checkpoint_split
    ):  # the MLP half recomputed, its input h and the attention half's x (the embedding's output)
        return recomputed_mlp_half_bytes(m, s) + 2 * checkpoint_layer_bytes(m, s)
    if s.recipe.checkpoint:
        return recomputed_layer_bytes(m, s) + s.size * s.tokens * m.hidden
    return layer_saved_bytes(m, s)


def embedding_backward_bytes(m: Model, s: Setting) -> int:
    """The embedding's backward, last of the pass: the incoming gradient [tokens, hidden]
    in the model dtype and ``embedding_dense_backward``'s float32 per-segment partial
    sums, at most one [tokens, hidden] row per token."""
    return (s.size + 4) * s.tokens * m.hidden


def last_bucket_temporary_bytes(m: Model, s: Setting) -> int:
    """InBackwardOptimizer's last update, at the end of the backward: foreach AdamW's buffer
    over the pending gradients and the embedding's; with host state, over those of the
    parameters updated whole (the :func:`sliced` ones are stepped after them, a slice at a time:
    :func:`slice_temporary_bytes`)."""
    count = len(bucketed_order(m, s)) - 1
    embedding = m.vocab * m.hidden
    return pending_staged_bytes(m, s, count) + (0 if sliced(s, embedding) else head_gradient_bytes(m, s))


#: the tile of kernels/ojas_kernels/linear_cross_entropy_config.py's ``default_config`` on CUDA: (block_m, block_n) of
#: its forward and backward GemmConfig, per dtype
LCE_BLOCKS = {torch.float32: (64, 64), torch.bfloat16: (128, 128)}


def _round_to(x: int, multiple: int, up: bool) -> int:
    return -(-x // multiple) * multiple if up else max(multiple, x // multiple * multiple)


def head_update_forward_bytes(m: Model, s: Setting) -> int:
    """With ``recipe.head_update`` the kernel runs 4 products (kernels/ojas_kernels/linear_cross_entropy_config.py
    ``_head_update_config``): the forward computes grad_input [tokens, hidden] (the model dtype,
    held until the backward, where it is the hidden states' gradient) and no other gradient,
    over token chunks whose float32 logits and G rows [chunk, V rounded to block_n] fit
    LCE_WORKSPACE_FRACTION of the gradients' bytes (LCE_WORKSPACE_FLOOR at least)."""
    bm, bn = LCE_BLOCKS[s.dtype]
    budget = max(int(LCE_WORKSPACE_FRACTION * (s.tokens + m.vocab) * m.hidden * s.size), LCE_WORKSPACE_FLOOR)
    v_pad = _round_to(m.vocab, bn, True)
    chunk = min(_round_to(budget // (v_pad * (4 + s.size) + m.hidden * (4 + s.size)), bm, False), s.tokens)
    return s.size * s.tokens * m.hidden + chunk * v_pad * (4 + s.size) + 2 * 4 * s.tokens


def head_update_backward_bytes(m: Model, s: Setting) -> int:
    """With ``recipe.head_update``, the kernel's backward (``_backward_weight`` with ``step``) besides the
    hidden states' gradient: the kept rows gathered [tokens, hidden] (the last token's label is
    padding, so some token is ignored), one vocabulary slab's G [tokens rounded to block_m, slab]
    and its rows' gradient [slab, hidden], both in the model dtype; the slab as the kernel sizes it
    (LCE_WORKSPACE_FRACTION of the gradients' bytes less the gathered rows). No [V, hidden]
    gradient (Ojas.InBackward.ChunkedHead.chunked_head_dh_first_code_eq_standard)."""
    bm, bn = LCE_BLOCKS[s.dtype]
    gathered = s.tokens * m.hidden * s.size
    budget = max(int(LCE_WORKSPACE_FRACTION * (s.tokens + m.vocab) * m.hidden * s.size) - gathered, LCE_WORKSPACE_FLOOR)
    k_pad = _round_to(s.tokens, bm, True)
    slab = min(_round_to(budget // (k_pad * s.size), bn, False), _round_to(m.vocab, bn, True))
    return gathered + k_pad * slab * s.size + slab * m.hidden * s.size
