"""The phases of one training step and what is alive at each: :func:`plan`, its :class:`Plan`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ojas_ref.memory.formulas import (
    attention_backward_transient_bytes,
    bucket_state_bytes,
    bucket_step_temporary_bytes,
    bucketed_order,
    checkpoint_bytes,
    checkpoint_layer_bytes,
    down_proj_gradient_bytes,
    embedding_backward_bytes,
    first_layer_saved_bytes,
    gradients_before_first_layer_bytes,
    head_gradient_bytes,
    head_update_backward_bytes,
    head_update_forward_bytes,
    head_updated_first,
    inputs_bytes,
    last_bucket_temporary_bytes,
    layer_gradients_bytes,
    layer_saved_bytes,
    lce_gradients_bytes,
    lce_workspace_bytes,
    mlp_backward_transient_bytes,
    offloaded_checkpoints_device_bytes,
    optimizer_state_bytes,
    overhead_bytes,
    pending_gradients_bytes,
    pending_staged_bytes,
    recomputed_attention_half_bytes,
    recomputed_layer_bytes,
    recomputed_mlp_half_bytes,
    rmsnorm_saved_bytes,
    rope_bytes,
    slice_state_bytes,
    slice_temporary_bytes,
    sliced,
    standard_loss_backward_bytes,
    standard_loss_forward_bytes,
    standard_loss_logits_gradient_bytes,
    step_temporary_bytes,
    weights_bytes,
)
from ojas_ref.memory.model import PRESETS, Model, Setting
from ojas_ref.recipe import dtype_name

__all__ = ["Phase", "Plan", "Term", "gib", "plan"]


@dataclass(frozen=True)
class Term:
    """One tensor class alive at a phase."""

    name: str
    bytes: int
    formula: str


@dataclass(frozen=True)
class Phase:
    """A point of the step and what is alive there."""

    name: str
    terms: tuple[Term, ...]

    @property
    def total(self) -> int:
        return sum(t.bytes for t in self.terms)


@dataclass(frozen=True)
class Plan:
    """The phases of one step; the peak is the largest. ``host``: what the setting keeps in
    host memory instead (``recipe.checkpoint="offload"``: the checkpoints; ``recipe.state_device="cpu"``: the
    optimizer state),
    empty otherwise; not part of any phase's device total."""

    model: Model
    setting: Setting
    phases: tuple[Phase, ...]
    host: tuple[Term, ...] = ()

    @property
    def host_bytes(self) -> int:
        """The host memory of :attr:`host` (pinned on CUDA), all of it alive at the end of the forward."""
        return sum(t.bytes for t in self.host)

    @property
    def peak_phase(self) -> Phase:
        return max(self.phases, key=lambda p: p.total)

    @property
    def peak(self) -> int:
        return self.peak_phase.total

    def table(self) -> str:
        """The breakdown at the peak and every phase's total."""
        m, s = self.model, self.setting
        peak = self.peak_phase
        lines = [
            f"ojas plan: {m.name} ({m.params() / 1e9:.2f}B parameters), {dtype_name(s.dtype)}, {s.optimizer}"
            f"{', optimizer in backward' if s.recipe.in_backward else ''}, {s.mode}, batch {s.batch} x seq {s.seq} "
            "(predicted)",
            f"peak {gib(self.peak)} GiB at: {peak.name}",
            "",
            f"{'tensor class':<50} {'GiB':>8}  formula",
        ]
        lines += [f"{t.name:<50} {gib(t.bytes):>8}  {t.formula}" for t in peak.terms if t.bytes]
        if self.host:
            lines += [
                "",
                f"host memory {gib(self.host_bytes)} GiB (predicted)",
                f"{'host memory':<50} {'GiB':>8}  formula",
            ]
            lines += [f"{t.name:<50} {gib(t.bytes):>8}  {t.formula}" for t in self.host]
        lines += ["", f"{'phase':<50} {'GiB':>8}"]
        lines += [f"{p.name:<50} {gib(p.total):>8}" + ("  <- peak" if p is peak else "") for p in self.phases]
        return "\n".join(lines)

    def __str__(self) -> str:
        """:meth:`table`: ``print(plan)`` prints the breakdown (``repr`` keeps the fields)."""
        return self.table()


def gib(n: int) -> str:
    """Bytes as GiB with three decimals."""
    return f"{n / 2**30:.3f}"


#: the recipe's fields the planner does not model, with what it would have to model
_UNMODELLED_RECIPE = {
    "sparse_embedding": "the embedding's sparse gradient, rows of the batch only",
    "overlap": "the updates on a side CUDA stream, whose buckets live until that stream has stepped them",
}


def _term(name: str, fn: Any, m: Model, s: Setting) -> Term:
    return Term(name, fn(m, s), fn.__name__)


def plan(model: Any, setting: Setting) -> Plan:
    """The predicted phases of one steady-state training step of ``model`` (a :class:`Model`,
    a preset name, or a Hugging Face Llama-style ``PreTrainedModel``, e.g. on the meta
    device) under ``setting``."""
    m = _model(model)
    s = setting
    if not isinstance(s, Setting):
        raise TypeError(f"setting must be a Setting, got {type(s).__name__}")
    r = s.recipe
    for name, what in _UNMODELLED_RECIPE.items():
        if getattr(r, name):
            raise NotImplementedError(f"recipe.{name}=True is not modelled by the planner ({what})")
    if r.head_update and m.tied:
        raise ValueError(
            f"recipe.head_update=True with a tied head ({m.name}): the loss refuses it (the tied weight's "
            "update needs the embedding's gradient too); the dense path is the one to plan"
        )
    host_state = r.state_device == "cpu"
    host = []
    if host_state:  # the state lives on the host; the device holds the buckets' in flight (the phases')
        host.append(_term("optimizer state (host, state_device='cpu')", optimizer_state_bytes, m, s))
        state = ()
    else:
        state = (_term("optimizer state", optimizer_state_bytes, m, s),)
    fixed = (
        (_term("weights", weights_bytes, m, s),)
        + state
        + (_term("cuBLAS workspaces", overhead_bytes, m, s), _term("input ids and labels", inputs_bytes, m, s))
    )

    def bucket_state(gradient_bytes: int, what: str) -> tuple[Term, ...]:
        """The in-flight state of a bucket whose gradients are ``gradient_bytes`` (host state only)."""
        if not host_state:
            return ()
        return (
            Term(
                "optimizer state: bucket in flight (host state)",
                bucket_state_bytes(m, s, gradient_bytes),
                f"bucket_state_bytes({what})",
            ),
        )

    if r.checkpoint == "offload":
        host.append(_term("layer inputs (offloaded checkpoints, pinned)", checkpoint_bytes, m, s))
        stack = _term("saved activations: layer inputs in flight (offload)", offloaded_checkpoints_device_bytes, m, s)
        below = below_attention = stack
    elif r.checkpoint:
        stack = _term("saved activations: layer inputs (checkpoints)", checkpoint_bytes, m, s)
        below = stack
        below_attention = Term(
            "saved activations: layer inputs (checkpoints) but the last MLP half's",
            stack.bytes - checkpoint_layer_bytes(m, s),
            "checkpoint_bytes - checkpoint_layer_bytes",
        )
    if r.checkpoint_split:
        last = _term("saved activations: recomputed last MLP half (split)", recomputed_mlp_half_bytes, m, s)
    elif r.checkpoint:
        last = _term("saved activations: recomputed last layer", recomputed_layer_bytes, m, s)
    else:
        stack = Term("saved activations: all layers", m.layers * layer_saved_bytes(m, s), "layers x layer_saved_bytes")
        below = Term(
            "saved activations: layers below the last",
            (m.layers - 1) * layer_saved_bytes(m, s),
            "(layers - 1) x layer_saved_bytes",
        )
        last = _term("saved activations: last layer", layer_saved_bytes, m, s)
    head_in = (
        _term("saved activations: final norm", rmsnorm_saved_bytes, m, s),
        _term("RoPE cos/sin", rope_bytes, m, s),
    )
    grad_flow = Term("gradient of the hidden states", s.size * s.tokens * m.hidden, "size x tokens x hidden")
    head_grad = _term("gradient of the head weight", head_gradient_bytes, m, s)
    if r.head_update:
        head_grad = Term("gradient of the head weight (updated inside the loss)", 0, "none: head_update")
    phases = []
    if r.head_update:
        phases.append(
            Phase(
                "end of forward (linear cross-entropy, 4 products)",
                fixed
                + (stack,)
                + head_in
                + (_term("loss: grad_input and one token chunk (head update)", head_update_forward_bytes, m, s),),
            )
        )
    elif r.linear_cross_entropy:
        phases.append(
            Phase(
                "end of forward (linear cross-entropy)",
                fixed
                + (stack,)
                + head_in
                + (
                    _term("loss: gradients computed in the forward", lce_gradients_bytes, m, s),
                    _term("loss: kernel workspace (one token chunk)", lce_workspace_bytes, m, s),
                ),
            )
        )
    else:
        phases.append(
            Phase(
                "end of forward (loss)",
                fixed
                + (stack,)
                + head_in
                + (_term("loss: logits, float32 copy, log-softmax", standard_loss_forward_bytes, m, s),),
            )
        )
        phases.append(
            Phase(
                "start of backward (loss gradient)",
                fixed
                + (stack,)
                + head_in
                + (_term("loss: log-softmax output and 2 gradients", standard_loss_backward_bytes, m, s),),
            )
        )
    head_sliced = not m.tied and sliced(s, m.vocab * m.hidden)

    def slice_terms(what: str) -> tuple[Term, ...]:
        """One slice's state and step temporaries, at the sliced update of ``what``."""
        return (
            Term(
                f"optimizer state: two slices of the {what} (host state)", slice_state_bytes(m, s), "slice_state_bytes"
            ),
            Term(
                f"bucket update temporaries (one slice of the {what})",
                slice_temporary_bytes(m, s),
                "slice_temporary_bytes",
            ),
        )

    at_head = (
        fixed
        + (stack,)
        + head_in
        + (grad_flow, head_grad)
        + bucket_state(
            0 if m.tied or head_sliced else head_grad.bytes,
            "none: the head is sliced" if head_sliced else "head gradient, untied",
        )
    )
    if r.head_update:
        phases.append(
            Phase(
                "backward: loss, head updated chunk by chunk",
                at_head + (_term("loss: one vocabulary slab (head update)", head_update_backward_bytes, m, s),),
            )
        )
    else:
        phases.append(
            Phase(
                "backward: head gradient",
                at_head + (_term("loss: gradient of the logits", standard_loss_logits_gradient_bytes, m, s),),
            )
        )
    if head_sliced and head_updated_first(m, s):
        phases.append(Phase("backward: head's bucket update, one slice at a time", at_head + slice_terms("head")))
    elif bucket_step_temporary_bytes(m, s):
        phases.append(
            Phase(
                "backward: head's bucket update",
                at_head + (_term("bucket update temporaries (head)", bucket_step_temporary_bytes, m, s),),
            )
        )
    mlp = _term("layer backward temporaries (MLP)", mlp_backward_transient_bytes, m, s)
    tied_head = Term(
        "tied head's gradient, waiting for the embedding's",
        head_gradient_bytes(m, s) if m.tied else 0,
        "head_gradient_bytes if tied",
    )
    first = len(bucketed_order(m, s)) - 1 - 9 + 1  # up to the first layer's down_proj
    head_first = not m.tied and not r.head_update  # the head's gradient is the first in the buckets
    if r.in_backward:
        in_flight_last = (
            tied_head,
            Term(
                "gradients pending in the bucket",
                pending_gradients_bytes(m, s, 2 + head_first),
                "pending_gradients_bytes(head, final norm, down_proj)"
                if head_first
                else "pending_gradients_bytes(final norm, down_proj)",
            ),
        )
        in_flight_first = (
            tied_head,
            Term(
                "gradients pending in the bucket",
                pending_gradients_bytes(m, s, first),
                "pending_gradients_bytes(..., first layer's down_proj)",
            ),
        )
    else:
        down = _term("down_proj weight gradient", down_proj_gradient_bytes, m, s)
        in_flight_last = (head_grad, down)
        in_flight_first = (_term("gradients accumulated so far", gradients_before_first_layer_bytes, m, s), down)
    staged_last = pending_staged_bytes(m, s, 2 + head_first) if r.in_backward else 0
    staged_first = pending_staged_bytes(m, s, first) if r.in_backward else 0
    phases.append(
        Phase(
            "backward: last decoder layer (MLP)",
            fixed
            + (below, last)
            + in_flight_last
            + (head_in[1], grad_flow, mlp)
            + bucket_state(staged_last, "gradients pending in the bucket, not sliced"),
        )
    )
    if r.checkpoint_split:
        phases.append(
            _split_attention_phase(
                m,
                s,
                fixed + (below_attention, tied_head if r.in_backward else head_grad, head_in[1], grad_flow),
                head_first,
                bucket_state,
            )
        )
    phases.append(
        Phase(
            "backward: first decoder layer (MLP)",
            fixed
            + in_flight_first
            + (_term("saved activations: first layer", first_layer_saved_bytes, m, s), head_in[1], grad_flow, mlp)
            + bucket_state(staged_first, "gradients pending in the bucket, not sliced"),
        )
    )
    if r.in_backward:
        before = Term(
            "gradients pending in the bucket",
            pending_gradients_bytes(m, s, len(bucketed_order(m, s)) - 1),
            "pending_gradients_bytes(all but the embedding)",
        )
    else:
        before = Term(
            "gradients of all but the embedding",
            (m.params() - m.vocab * m.hidden) * s.size,
            "(params - vocab x hidden) x size",
        )
    embedding = Term("gradient of the embedding", head_gradient_bytes(m, s), "head_gradient_bytes")
    staged = pending_staged_bytes(m, s, len(bucketed_order(m, s)) - 1) if r.in_backward else 0
    pending_state = bucket_state(staged, "gradients pending in the bucket, not sliced")
    embedding_sliced = sliced(s, m.vocab * m.hidden)
    phases.append(
        Phase(
            "end of backward (embedding)",
            fixed
            + (before, embedding, tied_head)
            + (_term("embedding backward temporaries", embedding_backward_bytes, m, s),)
            + pending_state,
        )
    )
    if m.tied:
        phases.append(
            Phase(
                "end of backward (tied gradients summed)",
                fixed
                + (before, embedding, tied_head)
                + (Term("their sum", head_gradient_bytes(m, s), "head_gradient_bytes"),)
                + pending_state,
            )
        )
    if r.in_backward and s.optimizer == "adamw":
        phases.append(
            Phase(
                "end of backward (last bucket's update)",
                fixed
                + (before, embedding)
                + (_term("bucket update temporaries (last)", last_bucket_temporary_bytes, m, s),)
                + bucket_state(
                    staged + (0 if embedding_sliced else embedding.bytes),
                    "pending gradients, not sliced" if embedding_sliced else "pending and the embedding's gradients",
                ),
            )
        )
        if embedding_sliced:  # then the embedding's slices; the whole part's copies back may be in flight
            phases.append(
                Phase(
                    "end of backward (the embedding's update, one slice at a time)",
                    fixed + (before, embedding) + pending_state + slice_terms("embedding"),
                )
            )
    if not r.in_backward:
        grads = Term("gradients (all parameters)", m.params() * s.size, "params x size")
        phases.append(
            Phase(
                "optimizer step", fixed + (grads,) + (_term("optimizer step temporaries", step_temporary_bytes, m, s),)
            )
        )
    return Plan(m, s, tuple(phases), tuple(host))


def _split_attention_phase(m: Model, s: Setting, alive: tuple[Term, ...], head_first: bool, bucket_state: Any) -> Phase:
    """With ``recipe.checkpoint_split``, the last layer's attention backward: ``alive`` (what every layer phase
    holds), its recomputed attention half, the layer's gradients so far (down, up, gate,
    post-attention norm, o: pending in the bucket when in backward, held otherwise) and the attention
    backward's temporaries."""
    count = 1 + head_first + 5  # (head,) final norm, down, up, gate, post-attention norm, o
    if s.recipe.in_backward:
        grads = Term(
            "gradients pending in the bucket",
            pending_gradients_bytes(m, s, count),
            "pending_gradients_bytes(..., last layer's o_proj)",
        )
        state = bucket_state(pending_staged_bytes(m, s, count), "gradients pending in the bucket, not sliced")
    else:
        grads = Term(
            "last layer's weight gradients (MLP, norm, o_proj)",
            layer_gradients_bytes(m, s, 5),
            "layer_gradients_bytes(5)",
        )
        state = ()
    return Phase(
        "backward: last decoder layer (attention, split)",
        alive
        + (
            _term("saved activations: recomputed last attention half (split)", recomputed_attention_half_bytes, m, s),
            grads,
            _term("layer backward temporaries (attention)", attention_backward_transient_bytes, m, s),
        )
        + state,
    )


def _model(model: Any) -> Model:
    if isinstance(model, Model):
        return model
    if isinstance(model, str):
        if model not in PRESETS:
            raise ValueError(f"unknown preset {model!r}; presets: {', '.join(PRESETS)}")
        return PRESETS[model]
    return Model.from_module(model)
