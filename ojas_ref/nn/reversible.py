"""Reversible coupling layers: activation memory that does not grow with depth.

A reversible block keeps a residual stream split in two halves ``(x1, x2)`` along
the last dimension (``x = cat(x1, x2)``, so the stream has width ``2 d``) and
changes it only by *additive half-updates*

    x_t <- x_t + c * fn(x_{1-t})        (t = 0 or 1, c a constant)

whose inverse ``x_t <- x_t - c * fn(x_{1-t})`` evaluates ``fn`` on a value it
already has (the other half is not changed by the update). :class:`AdditiveCoupling`
is two of them (y1 = x1 + f(x2), y2 = x2 + g(y1), as RevNet / Reformer / RevViT,
with f = attention block and g = MLP block for a transformer);
:class:`SymplecticCoupling` is a leapfrog step, three of them.

:class:`ReversibleSequence` runs a stack of such blocks as a chain of autograd nodes
(one per block, between an input and an output node) of which only the output node
saves a tensor, the stack's output: backward walks the blocks from the last, and for
each half-update, from the last, evaluates ``fn`` with grad enabled on the
reconstructed other half, back-propagates the update's local gradient to the other
half and to ``fn``'s parameters, and subtracts the increment (the inverse: the half's
value before the update). Each ``fn`` runs once in forward and once in backward, as
with activation checkpointing, but no activation of any block is kept between the
passes, and backward's working memory does not depend on depth: the reconstructed
stream and its gradient live in two buffers updated in place, and each block node
returns its parameters' gradients as soon as its block is done.

Theorems (``rocq/Reversible/``) this code implements:

* ``Ojas.Reversible.Coupling.coupling_inverse_forward`` (``coupling_inverse_forward_list``
  for vectors): over any commutative group, ``coupling_inverse`` undoes
  ``coupling_forward`` exactly, for arbitrary f and g (no continuity or
  invertibility assumption). A half-update is a coupling layer with one function
  zero, so it is covered too.
* ``Ojas.Reversible.Stack.stack_inverse_forward`` (``stack_inverse_forward_list``): the
  layer inverses run last to first undo the stack exactly; backward walks the
  half-updates in that order.
* ``Ojas.Reversible.Stack.leapfrog_step_R`` and ``leapfrog_inverse_steps``: the
  leapfrog step is the coupling stack ``leapfrog_layers`` (:class:`SymplecticCoupling`).
* ``Ojas.Reversible.Gradient.backprop_reversible_correct`` (``backprop_coupling``,
  ``coupling_stack_backward_correct``): backprop that reconstructs each layer's input
  with the inverse and then calls the layer's local vector-Jacobian product on it
  returns exactly the input and parameter gradients of ordinary backprop from stored
  activations, whenever each layer is inverted exactly; the layers here are the
  half-updates and the local VJP is autograd's on ``x_t + c fn(x_o)``.
  ``Ojas.Reversible.Gradient.coupling_vjp_derive``: the RevNet backward of a coupling
  layer (dz = dy1 + g'(y1)^T dy2, dx1 = dz, dx2 = dy2 + f'(x2)^T dz), which is what the
  two half-updates' VJPs compose to, is the derivative.
* ``Ojas.Reversible.FixedPoint.fixed_point_stack_inverse_exact_list`` (and
  ``fixed_point_quantized_exact``): over Z (exact mode's int64 fixed point) the inverse
  is exact for arbitrary integer-valued functions, here
  ``fixed_residual 2^k round F``: dequantise, evaluate, scale, round.

In floating point ``(x + f(a)) - f(a)`` is not ``x``: each half-update loses up to
half an ulp of the updated half, and an error already in the reconstructed other
half is amplified by the Lipschitz constant of ``fn``; the gradients are then the
ordinary ones at slightly perturbed activations. ``Ojas.Reversible.FloatError.
vec_stack_recon_error`` (``vec_stack_recon_error_flx`` for round-to-nearest
binary32/64) bounds the error of each block's reconstructed input by the recurrence
e_l = K e_(l+1) + delta_l, K = (1 + u)^2 (1 + LF) (1 + LG), for f, g that are
LF-, LG-Lipschitz up to dF, dG (``ojas_ref.verification.reversible_check.reconstruction_bounds``
evaluates it). That worst case grows like ((1 + LF)(1 + LG))^N; the a-posteriori
``Ojas.Reversible.APosteriori.vec_stack_recon_error_apost`` bounds the same error by
E_l = (1 + LF_l)(1 + LG_l) E_(l+1) + e_l with per-block constants measured on the run
(LF_l, LG_l only at the points visited; e_l = the step's distance to the exact inverse
plus the forward's defect) and no rounding assumption
(``ojas_ref.verification.bounds.reversible.reversible_reconstruction_error_bound``;
tests/nn/test_reversible.py measures the inputs in float32 against float64). The
resulting gradient error is bounded only by the a-posteriori
``vec_stack_grad_error_apost``, from measured constants of each block's backward
that nothing in the package computes. ``check_reconstruction=True`` measures
the error; exact mode removes it.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from typing import Iterable, NamedTuple, Optional, Sequence

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable
from torch.utils.checkpoint import get_device_states, set_device_states

from ojas_ref.functional.transforms import refuse_function_transforms

if torch.distributed.is_available():
    from torch.distributed.tensor import DTensor
else:  # a build without torch.distributed: no FSDP2
    DTensor = ()

__all__ = ["AdditiveCoupling", "HalfUpdate", "ReversibleBlock", "ReversibleSequence", "SymplecticCoupling"]

# Fixed-point states, increments and inputs must stay below 2^62 in magnitude, so
# that the sum of a state and an increment (< 2^63) never wraps around in int64.
_STATE_LIMIT = 2**62
_MAX_FRACTION_BITS = 62


# --------------------------------------------------------------------------
# Half-updates and blocks
# --------------------------------------------------------------------------


class HalfUpdate(NamedTuple):
    """``x[target] <- x[target] + scale * fn(x[1 - target])``; ``name`` is used in errors."""

    target: int
    fn: nn.Module
    scale: float
    name: str


def split_halves(x: Tensor, name: str = "x") -> tuple[Tensor, Tensor]:
    """The two halves (x1, x2) of x's last dimension (views), with clear errors."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() == 0 or x.shape[-1] % 2 != 0 or x.shape[-1] == 0:
        raise ValueError(
            f"{name} must have an even, nonzero last dimension (the halves x1, x2 of the residual "
            f"stream), got shape {tuple(x.shape)}"
        )
    d = x.shape[-1] // 2
    return x[..., :d], x[..., d:]


def _call(update: HalfUpdate, inp: Tensor, where: str, params: Optional[dict[str, Tensor]] = None) -> Tensor:
    """``update.fn(inp)`` (with the parameters ``params``, by name, in place of fn's own),
    checked: a floating tensor of inp's shape, inp not modified in place (not checked for an
    inference tensor, made under ``torch.inference_mode()``, which has no version counter)."""
    version = None if inp.is_inference() else inp._version  # inference tensors have no version counter
    out = torch.func.functional_call(update.fn, params, (inp,)) if params else update.fn(inp)
    if version is not None and inp._version != version:
        raise RuntimeError(f"{where}: {update.name} modified its input in place; the reconstruction needs it unchanged")
    if not isinstance(out, Tensor):
        raise TypeError(
            f"{where}: {update.name} must return a torch.Tensor, got {type(out).__name__} (wrap "
            "modules that return tuples, e.g. nn.MultiheadAttention, in a module returning the tensor)"
        )
    if out.shape != inp.shape:
        raise ValueError(
            f"{where}: {update.name} changed the shape: input {tuple(inp.shape)}, output "
            f"{tuple(out.shape)}; it must map a half of the stream to a tensor of the same shape"
        )
    if not out.is_floating_point():
        raise TypeError(f"{where}: {update.name} returned dtype {out.dtype}; a floating dtype is needed")
    return out


def _foreign_leaf(out: Tensor, known: Iterable[Tensor]) -> Optional[Tensor]:
    """A leaf tensor requiring grad that ``out``'s autograd graph reaches, other than ``known``
    (None if there is none): the graph is walked back to its leaves (AccumulateGrad nodes)."""
    known_ids = {id(t) for t in known}
    seen, todo = set(), [out.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        leaf = getattr(node, "variable", None)
        if leaf is not None and id(leaf) not in known_ids:
            return leaf
        todo.extend(next_node for next_node, _ in node.next_functions)
    return None


def _float_increment(out: Tensor, scale: float) -> Tensor:
    """``scale * out`` (``out`` itself for scale 1, so that x + f(x2) is bit-for-bit an ordinary residual)."""
    return out if scale == 1.0 else out * scale


class ReversibleBlock(nn.Module):
    """A block of additive half-updates on the two halves of the last dimension.

    Subclasses define :meth:`half_updates`. Called directly (``block(x)``), the block
    runs with ordinary autograd (activations saved): ``nn.Sequential(*blocks)`` is the
    ordinary stack that :class:`ReversibleSequence` computes with constant activation
    memory.
    """

    def half_updates(self) -> tuple[HalfUpdate, ...]:
        raise NotImplementedError

    def forward(self, x: Tensor) -> Tensor:
        h = list(split_halves(x))
        for u in self.half_updates():
            h[u.target] = h[u.target] + _float_increment(_call(u, h[1 - u.target], type(self).__name__), u.scale)
        return torch.cat(h, dim=-1)

    @torch.no_grad()
    def inverse(self, y: Tensor) -> Tensor:
        """The input x with ``self(x) = y`` (up to float rounding), from the half-updates in reverse.

        Dropout or other randomness in the functions is not replayed here (see
        :class:`ReversibleSequence`, which records the RNG states): call it in eval mode.
        """
        h = list(split_halves(y, "y"))
        for u in reversed(self.half_updates()):
            h[u.target] = h[u.target] - _float_increment(_call(u, h[1 - u.target], type(self).__name__), u.scale)
        return torch.cat(h, dim=-1)


def _check_module(name: str, m: object) -> None:
    if not isinstance(m, nn.Module):
        raise TypeError(f"{name} must be an nn.Module, got {type(m).__name__}")


class AdditiveCoupling(ReversibleBlock):
    """y1 = x1 + f(x2), y2 = x2 + g(y1) on x = cat(x1, x2) along the last dimension.

    ``coupling_forward`` of rocq/Reversible/Coupling.v; its inverse x2 = y2 - g(y1),
    x1 = y1 - f(x2) is ``coupling_inverse`` (Ojas.Reversible.Coupling.coupling_inverse_forward).
    f and g are any modules mapping a half ``[..., d]`` to a tensor of the same shape.
    For a reversible transformer (RevViT, Reformer) the stream is doubled, x1 = x2 = the
    embedding [..., d_model] (so ``x = cat(e, e)``), f is the attention block
    (LayerNorm + attention) and g the MLP block (LayerNorm + MLP), without their own
    residual additions.
    """

    def __init__(self, f: nn.Module, g: nn.Module) -> None:
        super().__init__()
        _check_module("f", f)
        _check_module("g", g)
        self.f = f
        self.g = g

    def half_updates(self) -> tuple[HalfUpdate, ...]:
        return HalfUpdate(0, self.f, 1.0, "f"), HalfUpdate(1, self.g, 1.0, "g")


class SymplecticCoupling(ReversibleBlock):
    """One leapfrog (velocity Verlet) step on x = cat(p, q): momenta p, positions q.

        p <- p + (h/2) force(q)
        q <- q + h velocity(p)
        p <- p + (h/2) force(q)

    ``force`` maps positions to forces (-dV/dq for a Hamiltonian T(p) + V(q); any
    module here), ``velocity`` maps momenta to velocities (dT/dp; default the
    identity, unit mass), ``step_size`` = h. These are the two coupling layers
    ``leapfrog_layers kick drift`` = [(kick, drift); (kick, 0)] of
    rocq/Reversible/Stack.v with kick = (h/2) force and drift = h velocity (the zero
    update of the second layer is skipped): Ojas.Reversible.Stack.leapfrog_step_R
    (over R this is the textbook leapfrog step) and
    Ojas.Reversible.Stack.leapfrog_inverse_steps (``stack_inverse`` undoes any number
    of steps exactly, over any commutative group). Both ``force`` calls are the same
    module, so its parameters get the sum of both gradients.
    """

    def __init__(self, force: nn.Module, *, step_size: float = 1.0, velocity: Optional[nn.Module] = None) -> None:
        super().__init__()
        _check_module("force", force)
        if velocity is not None:
            _check_module("velocity", velocity)
        if isinstance(step_size, bool) or not isinstance(step_size, (int, float)) or not math.isfinite(step_size):
            raise ValueError(f"step_size must be a finite float, got {step_size!r}")
        self.force = force
        self.velocity = nn.Identity() if velocity is None else velocity
        self.step_size = float(step_size)

    def half_updates(self) -> tuple[HalfUpdate, ...]:
        h = self.step_size
        return (
            HalfUpdate(0, self.force, h / 2, "force"),
            HalfUpdate(1, self.velocity, h, "velocity"),
            HalfUpdate(0, self.force, h / 2, "force"),
        )


# --------------------------------------------------------------------------
# Fixed point (exact mode)
# --------------------------------------------------------------------------


def _to_fixed(v: Tensor, fraction_bits: int, what: str) -> Tensor:
    """round(v * 2^fraction_bits) as int64 (round half to even), computed in float64;
    OverflowError if a value is not finite or reaches 2^62."""
    s = torch.round(v.detach().to(torch.float64) * 2.0**fraction_bits)
    if s.numel() and not bool((s.abs() < _STATE_LIMIT).all()):
        raise OverflowError(
            f"{what}: a value is not finite or |value| * 2^{fraction_bits} >= 2^62, outside the "
            f"int64 fixed-point range; lower fraction_bits (range is |x| < "
            f"2^{62 - fraction_bits})"
        )
    return s.to(torch.int64)


def _from_fixed(s: Tensor, fraction_bits: int, dtype: torch.dtype) -> Tensor:
    """s * 2^-fraction_bits in dtype (through float64: exact while |s| < 2^53, then one rounding)."""
    return (s.to(torch.float64) * 2.0**-fraction_bits).to(dtype)


def _fixed_add(state: Tensor, delta: Tensor, fraction_bits: int, where: str, *, inplace: bool = False) -> Tensor:
    """state + delta in int64 (into ``state`` if ``inplace``), OverflowError if the sum
    reaches 2^62 (both are below 2^62, so the sum itself cannot wrap)."""
    s = state.add_(delta) if inplace else state + delta
    if s.numel() and not bool((s.abs() < _STATE_LIMIT).all()):
        raise OverflowError(
            f"{where}: the fixed-point state reached 2^62 (|x| >= 2^{62 - fraction_bits}); lower fraction_bits"
        )
    return s


# --------------------------------------------------------------------------
# RNG and autocast state, recorded in forward and replayed in backward
# --------------------------------------------------------------------------


class _RngState:
    """The CPU RNG state and that of x's accelerator, as torch.utils.checkpoint records them."""

    def __init__(self, x: Tensor) -> None:
        self.cpu = torch.get_rng_state()
        self.devices, self.device_states = get_device_states(x)

    def restore(self, device_type: str) -> None:
        torch.set_rng_state(self.cpu)
        if self.devices:
            set_device_states(self.devices, self.device_states, device_type=device_type)


def _autocast_kwargs(device_type: str) -> list[tuple[str, dict]]:
    """Autocast settings in force for x's device type and for the CPU."""
    kinds = [device_type] + (["cpu"] if device_type != "cpu" else [])
    return [
        (
            t,
            {
                "enabled": torch.is_autocast_enabled(t),
                "dtype": torch.get_autocast_dtype(t),
                "cache_enabled": torch.is_autocast_cache_enabled(),
            },
        )
        for t in kinds
        if torch.amp.is_autocast_available(t)
    ]


def _recompute_context(autocast: Sequence[tuple[str, dict]]) -> contextlib.ExitStack:
    """Grad enabled and forward's autocast settings, entered around one recomputation only:
    leaving the outermost autocast context empties its cast cache, so casts of one
    function's parameters do not pile up over the backward pass, and the vector-Jacobian
    product runs outside autocast."""
    stack = contextlib.ExitStack()
    stack.enter_context(torch.enable_grad())
    for device_type, kwargs in autocast:
        stack.enter_context(torch.amp.autocast(device_type, **kwargs))
    return stack


# --------------------------------------------------------------------------
# The stack
# --------------------------------------------------------------------------


class _Plan(NamedTuple):
    """One half-update of the stack: its block, whether it is the block's first, and the
    names in fn and indices in the stack's parameter list of fn's trainable parameters."""

    layer: int
    first: bool
    update: HalfUpdate
    params: tuple[tuple[str, int], ...]


class _Tape:
    """What the nodes of one ``ReversibleSequence`` call share: the stack, its plan and
    trainable parameters, forward's autocast settings; in forward the current halves
    ``h``; in backward the reconstructed stream ``state`` and its gradient ``grad`` (two
    full-width buffers that the block nodes update in place, ``h`` and ``g`` their
    halves) and the per-block reconstruction errors."""

    def __init__(self, stack: "ReversibleSequence", plan: list[_Plan], params: Sequence[Tensor], x: Tensor) -> None:
        self.stack, self.plan, self.params = stack, plan, params
        self.x_dtype, self.device_type = x.dtype, x.device.type
        self.autocast = _autocast_kwargs(self.device_type)
        self.h: Optional[list[Tensor]] = None
        self.g: Optional[list[Tensor]] = None
        self.state: Optional[Tensor] = None
        self.grad: Optional[Tensor] = None
        self.errors: Optional[list[float]] = None

    def release(self) -> None:
        self.h = self.g = self.state = self.grad = None


class _StackInput(torch.autograd.Function):
    """First node: puts x's halves (int64 fixed point in exact mode) on the tape and returns
    an empty link tensor; backward returns the gradient buffer as x's gradient."""

    @staticmethod
    def forward(ctx, x, tape):
        ctx.tape = tape
        stack = tape.stack
        halves = split_halves(x)
        tape.h = [_to_fixed(v, stack.fraction_bits, "x") for v in halves] if stack.exact else list(halves)
        return x.new_empty(0)

    @staticmethod
    @once_differentiable
    def backward(ctx, _link):
        tape = ctx.tape
        grad_x = tape.grad.to(tape.x_dtype)
        tape.release()
        return grad_x, None


class _BlockFunction(torch.autograd.Function):
    """One block's half-updates: forward without autograd on the tape's halves (RNG states
    recorded before every function call); backward per half-update from the last on the
    tape's buffers (``ReversibleSequence._backward_step``), returning the gradients of the
    block's trainable parameters, so that autograd accumulates (and frees) them block by
    block rather than at the end of backward.

    Why per half-update rather than "invert the whole block without grad, then re-run its
    forward with grad": that evaluates every fn twice in backward. The half-update's other
    half is already known when it is inverted, so one evaluation of fn with grad gives
    both the local graph and the increment to subtract (the same value, fn being
    deterministic given the replayed RNG state); each fn runs once in backward, as with
    activation checkpointing. Ojas.Reversible.Gradient.backprop_reversible_correct covers
    this order: its layers are the half-updates."""

    @staticmethod
    def forward(ctx, link, tape, steps, param_ids, *params):
        stack = tape.stack
        ctx.tape, ctx.steps, ctx.param_pos = tape, steps, {j: i for i, j in enumerate(param_ids)}
        ctx.stored = [v.clone() for v in tape.h] if stack.check_reconstruction else None
        ctx.rng = []
        for step in steps:
            if stack.preserve_rng_state:
                ctx.rng.append(_RngState(tape.h[0]))
            tape.h = stack._update(tape.h, step, tape.x_dtype, forward=True)
        return link.new_empty(0)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_link):
        """Reconstruct the block's input from its output (the half-updates in reverse) and
        back-propagate through the recomputation. Float error of the reconstruction:
        Ojas.Reversible.FloatError.vec_stack_recon_error (a priori) and
        Ojas.Reversible.APosteriori.vec_stack_recon_error_apost (from measured per-block
        constants); the gradient error it causes: vec_stack_grad_error_apost of the same
        file, given measured constants of each block's backward (not evaluated here)."""
        tape, stack = ctx.tape, ctx.tape.stack
        grads: list[Optional[Tensor]] = [None] * len(ctx.param_pos)
        rng_devices = ctx.rng[0].devices if ctx.rng else []
        with torch.random.fork_rng(devices=rng_devices, enabled=bool(ctx.rng), device_type=tape.device_type):
            for i in reversed(range(len(ctx.steps))):
                if ctx.rng:
                    ctx.rng[i].restore(tape.device_type)
                step = ctx.steps[i]
                for (_, j), gj in zip(step.params, stack._backward_step(tape, step)):
                    k = ctx.param_pos[j]
                    if gj is not None:
                        grads[k] = gj if grads[k] is None else grads[k] + gj
        if ctx.stored is not None:
            tape.errors[ctx.steps[0].layer] = stack._distance(tape.h, ctx.stored)
            ctx.stored = None
        if not ctx.needs_input_grad[0]:  # no node below runs
            tape.release()
        return (grad_link, None, None, None, *grads)


class _StackOutput(torch.autograd.Function):
    """Last node: concatenates the tape's halves into the output y and saves y only (the
    int64 state in exact mode; the output is then y 2^-k in x's dtype); backward copies y
    and the output gradient into the tape's buffers for the block nodes."""

    @staticmethod
    def forward(ctx, link, tape):
        ctx.tape = tape
        y = torch.cat(tape.h, dim=-1)
        tape.h = None
        ctx.save_for_backward(y)
        return _from_fixed(y, tape.stack.fraction_bits, tape.x_dtype) if tape.stack.exact else y

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_y):
        tape = ctx.tape
        (y,) = ctx.saved_tensors
        tape.state = y.clone(memory_format=torch.contiguous_format)
        tape.grad = grad_y.clone(memory_format=torch.contiguous_format)
        tape.h, tape.g = list(split_halves(tape.state)), list(split_halves(tape.grad))
        if tape.stack.check_reconstruction:
            tape.errors = [math.nan] * len(tape.stack.blocks)
            tape.stack.reconstruction_errors = tape.errors
        return grad_y.new_empty(0), None


class ReversibleSequence(nn.Module):
    """A stack of reversible blocks whose activations are reconstructed in backward.

    ``blocks``: a non-empty sequence of :class:`ReversibleBlock` (e.g.
    :class:`AdditiveCoupling`, :class:`SymplecticCoupling`). ``forward(x)`` takes the
    stream ``x = cat(x1, x2)`` [..., 2 d] and returns the same as
    ``nn.Sequential(*blocks)(x)``; autograd keeps only the output (and the recorded RNG
    states), not the activations of any block, so activation memory does not grow with
    depth. Backward evaluates each function once more, on the reconstructed input, and
    returns the gradients of ``x`` and of the blocks' parameters (``.grad`` accumulates
    as with ordinary autograd; optimizers, hooks and ``torch.autograd.grad`` work).
    Gradients reach the parameters of the half-updates' functions (``fn.parameters()``)
    only: backward raises if a function's recomputation depends on another tensor that
    requires grad (reached through a closure, a global, a plain tensor attribute; the
    recomputed graph is searched for such leaves), which would otherwise silently get no
    gradient. Double backward is not supported. Under
    ``torch.no_grad()`` or ``torch.inference_mode()`` only the forward runs.
    Data parallel (tested, no theorem: tests/optim/test_distributed.py): under DDP as any
    module; under FSDP2, ``fully_shard`` the stack or a module above it, not its
    blocks (the stack calls the functions itself, so a block's FSDP hooks would never
    all-gather its parameters; a sharded parameter with a plain ``x`` raises).
    Theorems: the stack is inverted by the reversed inverses
    (Ojas.Reversible.Stack.stack_inverse_forward), and backward through reconstructed
    inputs gives the gradients of stored-activation backprop
    (Ojas.Reversible.Gradient.backprop_reversible_correct); float drift is bounded by
    Ojas.Reversible.FloatError.vec_stack_recon_error (a priori, worst case) and, from
    measured per-block constants and local errors, by
    Ojas.Reversible.APosteriori.vec_stack_recon_error_apost; the gradient error they
    cause by Ojas.Reversible.APosteriori.vec_stack_grad_error_apost, given measured
    constants of each block's backward (not computed or evaluated here).

    The functions must be deterministic given the RNG state and must not modify their
    input in place. With ``preserve_rng_state`` (default), the CPU RNG state and that of
    x's device are recorded before every function call in forward and restored for its
    recomputation (as torch.utils.checkpoint does), so dropout masks match; the autocast
    state of forward is re-entered in backward. Modules with state updated by calls
    (BatchNorm running statistics) are updated again by the recomputation.

    Float mode (``exact=False``): the stream is computed in x's dtype (functions under
    autocast may return lower precision; the sums take x's dtype by type promotion,
    so keep x in float32 with bf16 autocast). The reconstructed inputs differ from the
    true ones by float rounding, amplified by the functions' Lipschitz constants, and
    the gradients are the ordinary ones evaluated at the reconstructed activations.

    Exact mode (``exact=True``): the stream is carried in int64 fixed point,
    s = round(x 2^k) with k = ``fraction_bits``; a half-update adds
    round(c fn(s_other 2^-k) 2^k) (fn evaluated in x's dtype on the dequantised other
    half, rounded half to even in float64). The inverse subtracts the same integers,
    so the reconstruction is bit-exact for any functions (the group is Z:
    Ojas.Reversible.Coupling.coupling_inverse_forward). The output is s 2^-k in x's
    dtype, so it is quantised to a multiple of 2^-k (and rounded again to x's dtype);
    the input is quantised likewise. Range: the input, every increment and every
    state must be below 2^(62-k) in magnitude (OverflowError otherwise; one host sync
    per half-update, in forward and in backward, checks it; float mode has none). Gradients are straight-through: rounding is treated
    as the identity, i.e. the ordinary gradients of the float updates at the
    (dequantised) fixed-point activations. The saved output is the int64 state.

    ``check_reconstruction=True`` (debugging): forward also stores every block's input,
    and backward sets ``reconstruction_errors`` to the per-block maximum of
    |reconstructed input - stored input| (float units; in exact mode 0.0 means
    bit-exact; NaN for a block that backward did not reach, when nothing below it
    needs a gradient), which costs the activation memory the stack otherwise saves.

    Backward memory: two stream-sized buffers (the reconstructed stream and its
    gradient, copied from the output and the output gradient and then updated in
    place), one function's recomputation graph and one block's parameter gradients
    (each block is its own autograd node, so autograd accumulates a block's gradients
    before the next block runs), whatever the depth.
    """

    def __init__(
        self,
        blocks: Iterable[ReversibleBlock],
        *,
        exact: bool = False,
        fraction_bits: int = 32,
        check_reconstruction: bool = False,
        preserve_rng_state: bool = True,
    ) -> None:
        super().__init__()
        if isinstance(blocks, nn.Module) and not isinstance(blocks, (nn.ModuleList, nn.Sequential)):
            raise TypeError(
                "blocks must be a sequence of ReversibleBlock modules, got a single "
                f"{type(blocks).__name__}; pass [block]"
            )
        blocks = list(blocks)
        if not blocks:
            raise ValueError("blocks must hold at least one ReversibleBlock")
        for i, b in enumerate(blocks):
            if not isinstance(b, ReversibleBlock):
                raise TypeError(
                    f"blocks[{i}] must be a ReversibleBlock (AdditiveCoupling, SymplecticCoupling or "
                    f"a subclass), got {type(b).__name__}"
                )
        for name, flag in (
            ("exact", exact),
            ("check_reconstruction", check_reconstruction),
            ("preserve_rng_state", preserve_rng_state),
        ):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be a bool, got {type(flag).__name__}")
        if isinstance(fraction_bits, bool) or not isinstance(fraction_bits, int):
            raise TypeError(f"fraction_bits must be an int, got {type(fraction_bits).__name__}")
        if not 0 <= fraction_bits <= _MAX_FRACTION_BITS:
            raise ValueError(f"fraction_bits must be in [0, {_MAX_FRACTION_BITS}], got {fraction_bits}")
        self.blocks = nn.ModuleList(blocks)
        self.exact = exact
        self.fraction_bits = fraction_bits
        self.check_reconstruction = check_reconstruction
        self.preserve_rng_state = preserve_rng_state
        self.reconstruction_errors: Optional[list[float]] = None

    def forward(self, x: Tensor) -> Tensor:
        refuse_function_transforms("ReversibleSequence")
        split_halves(x)
        if not x.is_floating_point():
            raise TypeError(f"x must have a floating dtype, got {x.dtype}")
        params = [p for p in self.parameters() if p.requires_grad]
        sharded = [name for name, p in self.named_parameters() if isinstance(p, DTensor)]
        if sharded and not isinstance(x, DTensor):
            raise RuntimeError(
                f"parameter {sharded[0]} of the ReversibleSequence is a DTensor (still sharded) while x is a plain "
                "tensor: with FSDP2, apply fully_shard to the ReversibleSequence or to a module above it, not to "
                "its blocks or their functions (the stack calls the functions itself, so the blocks' FSDP "
                "forward hooks that all-gather their parameters never run)"
            )
        plan = self._plan(params)
        tape = _Tape(self, plan, params, x)
        link = _StackInput.apply(x, tape)
        for _, group in itertools.groupby(plan, key=lambda step: step.layer):
            steps = tuple(group)
            param_ids = tuple(dict.fromkeys(j for step in steps for _, j in step.params))
            link = _BlockFunction.apply(link, tape, steps, param_ids, *(params[j] for j in param_ids))
        return _StackOutput.apply(link, tape)

    # -- no-grad access to the stack's maps (oracle comparisons, debugging) -------

    def quantize(self, x: Tensor) -> Tensor:
        """The int64 fixed-point state round(x 2^k) of a float stream x (k = ``fraction_bits``)."""
        split_halves(x)
        return _to_fixed(x, self.fraction_bits, "x")

    def dequantize(self, state: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
        """The float stream state 2^-k in ``dtype`` of an int64 fixed-point state."""
        return _from_fixed(state, self.fraction_bits, dtype)

    @torch.no_grad()
    def stack_forward(self, state: Tensor, dtype: Optional[torch.dtype] = None) -> Tensor:
        """The blocks' half-updates first to last, without autograd (``stack_forward`` of
        rocq/Reversible/Stack.v). Float mode: ``state`` is a float stream. Exact mode: an
        int64 fixed-point state, the functions run in ``dtype`` (default float32), and
        the result is the int64 state. Randomness is not replayed: use eval mode."""
        return self._run(state, dtype, inverse=False)

    @torch.no_grad()
    def stack_inverse(self, state: Tensor, dtype: Optional[torch.dtype] = None) -> Tensor:
        """The half-updates' inverses last to first (``stack_inverse`` of
        rocq/Reversible/Stack.v), without autograd; states as in :meth:`stack_forward`.
        In exact mode ``stack_inverse(stack_forward(s)) == s`` bit for bit for any
        functions (Ojas.Reversible.FixedPoint.fixed_point_stack_inverse_exact_list)."""
        return self._run(state, dtype, inverse=True)

    def _run(self, state: Tensor, dtype: Optional[torch.dtype], *, inverse: bool) -> Tensor:
        h = list(split_halves(state, "state"))
        if self.exact != (state.dtype == torch.int64):
            want = "an int64 fixed-point state (see quantize)" if self.exact else "a float stream"
            raise TypeError(
                f"state must be {want} in {'exact' if self.exact else 'float'} mode, got dtype {state.dtype}"
            )
        dtype = dtype or (torch.float32 if self.exact else state.dtype)
        plan = self._plan(())
        for step in reversed(plan) if inverse else plan:
            h = self._update(h, step, dtype, forward=not inverse)
        return torch.cat(h, dim=-1)

    # -- pieces shared by forward, backward and the no-grad helpers --------------

    def _plan(self, params: Sequence[Tensor]) -> list[_Plan]:
        for i, block in enumerate(self.blocks):
            for u in block.half_updates():
                if not (isinstance(u, HalfUpdate) and u.target in (0, 1) and isinstance(u.fn, nn.Module)):
                    raise TypeError(
                        f"blocks[{i}].half_updates() must return HalfUpdate(target 0 or 1, an "
                        f"nn.Module, scale, name) tuples, got {u!r}"
                    )
        index = {id(p): i for i, p in enumerate(params)}
        return [
            _Plan(
                layer, k == 0, u, tuple((name, index[id(p)]) for name, p in u.fn.named_parameters() if id(p) in index)
            )
            for layer, block in enumerate(self.blocks)
            for k, u in enumerate(block.half_updates())
        ]

    def _where(self, step: _Plan) -> str:
        return f"blocks[{step.layer}] ({type(self.blocks[step.layer]).__name__})"

    def _other(self, h: Sequence[Tensor], step: _Plan, dtype: torch.dtype) -> Tensor:
        """The half fn reads (dequantised to dtype in exact mode)."""
        other = h[1 - step.update.target]
        return _from_fixed(other, self.fraction_bits, dtype) if self.exact else other

    @torch.no_grad()
    def _apply_increment(self, state: Tensor, inc: Tensor, step: _Plan, *, forward: bool, inplace: bool) -> Tensor:
        """state + inc (forward) or state - inc (inverse); in exact mode the increment is
        rounded to fixed point first. In place (into ``state``) if ``inplace``."""
        if self.exact:
            where = self._where(step)
            delta = _to_fixed(inc.to(torch.float64), self.fraction_bits, f"{where}: {step.update.name}'s increment")
            return _fixed_add(state, delta if forward else -delta, self.fraction_bits, where, inplace=inplace)
        if inplace:
            return state.add_(inc) if forward else state.sub_(inc)
        return state + inc if forward else state - inc

    def _update(self, h: list[Tensor], step: _Plan, dtype: torch.dtype, *, forward: bool) -> list[Tensor]:
        """One half-update on the halves h (float, or int64 in exact mode), forward or
        inverse, without autograd: the new halves (h is not modified)."""
        u = step.update
        inc = _float_increment(_call(u, self._other(h, step, dtype), self._where(step)), u.scale)
        h = list(h)
        h[u.target] = self._apply_increment(h[u.target], inc, step, forward=forward, inplace=False)
        return h

    def _backward_step(self, tape: _Tape, step: _Plan) -> tuple[Optional[Tensor], ...]:
        """Backward through one half-update, in place on the tape's buffers: fn evaluated with
        grad (forward's autocast settings) on the other half; the vector-Jacobian product of
        x_t + c fn(x_o) with the gradient of the updated half, taken w.r.t. x_o (added into
        its gradient) and fn's parameters (fn runs on detached aliases of them, so that
        tensor hooks on the parameters fire once, for the gradient autograd receives, as
        with ordinary autograd); then the increment subtracted from the updated half
        (after the product, which may read the other half: both halves share one buffer
        and its version counter). Returns the parameter gradients in ``step.params`` order."""
        u, t = step.update, step.update.target
        h, g = tape.h, tape.g
        other = self._other(h, step, tape.x_dtype).detach().requires_grad_(True)
        aliases = {name: tape.params[j].detach().requires_grad_(True) for name, j in step.params}
        with _recompute_context(tape.autocast):
            inc = _float_increment(_call(u, other, self._where(step), aliases), u.scale)
        if inc.requires_grad:
            foreign = _foreign_leaf(inc, [other, *aliases.values()])
            if foreign is not None:
                raise RuntimeError(
                    f"{self._where(step)}: {u.name} uses a tensor that requires grad (shape "
                    f"{tuple(foreign.shape)}) and is not one of its parameters (a closure, a global, a plain "
                    "tensor attribute, or a parameter of another module?). ReversibleSequence back-propagates "
                    f"only to the stream and to {u.name}.parameters(), so that tensor would silently get no "
                    "gradient: make it an nn.Parameter of the module (or of a submodule), or detach it"
                )
            vjp = torch.autograd.grad(inc, [other, *aliases.values()], g[t].to(inc.dtype), allow_unused=True)
        else:  # fn ignores its input and has no trainable parameters
            vjp = (None,) * (1 + len(aliases))
        del other
        self._apply_increment(h[t], inc, step, forward=False, inplace=True)
        if vjp[0] is not None:
            g[1 - t].add_(vjp[0])
        buffers = {tape.state.untyped_storage().data_ptr(), tape.grad.untyped_storage().data_ptr()}
        # a gradient aliasing a buffer (fn = x + bias with a bias of x's shape) would change with it
        return tuple(v.clone() if v is not None and v.untyped_storage().data_ptr() in buffers else v for v in vjp[1:])

    def _distance(self, h: list[Tensor], stored: list[Tensor]) -> float:
        diff = max(
            float((a.to(torch.float64) - b.to(torch.float64)).abs().max()) if a.numel() else 0.0
            for a, b in zip(h, stored)
        )
        return diff * 2.0**-self.fraction_bits if self.exact else diff
