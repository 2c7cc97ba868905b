"""Rotary position embedding (RoPE), value-equal to Hugging Face's Llama ``apply_rotary_pos_emb``.

Hugging Face (``transformers.models.llama.modeling_llama``) rotates queries and keys with

    rotate_half(x) = cat(-x[..., E/2:], x[..., :E/2])
    q_embed = q * cos + rotate_half(q) * sin,   k_embed = k * cos + rotate_half(k) * sin

(``cos``/``sin`` ``[B or 1, S, E]`` unsqueezed at ``unsqueeze_dim``), five elementwise kernels
and a ``cat`` per tensor each way.  :func:`apply_rotary_pos_emb` gives the same values, forward
and gradients (``torch.equal``), from one Triton launch each way for ``q`` and ``k`` together
(``ojas_kernels.rope``); autograd keeps only ``cos`` and ``sin``.

Theorem (over the reals): ``Ojas.RoPE.Backward.rope_backward_eq_vjp``: with ``a = g cos`` and
``u = g sin``, ``dx[i] = a[i] + u[i + E/2]`` for ``i < E/2`` and ``a[i] - u[i - E/2]`` otherwise
is the vector-Jacobian product of the formula (rocq/RoPE/Backward.v).  No
theorem covers the rounding: the kernel rounds where torch's op-by-op evaluation of the formula
and its autograd round (every operation in float32, each result rounded to the input dtype:
``rnd(rnd(x c) + rnd(rh s))`` forward, ``rnd(rnd(g c) ± rnd(g s))`` backward; kernel module
docstring), tested bit for bit against transformers' own function (tests/functional/test_rope.py).  Only the
sign of a zero gradient may differ (autograd adds zero padding; ``torch.equal`` treats
-0.0 == 0.0).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ojas_kernels.host import define_op, dynamo_apply
from ojas_ref._deprecation import renamed_module_attributes
from ojas_ref.functional._kernel_module import KernelModule
from ojas_ref.functional.dispatch import IMPL_ENVS, kernel_runs, refuse_double_backward, resolve_impl

__all__ = ["BACKWARD_THEOREM", "IMPL_ENV", "apply_rotary_pos_emb", "fused_rope", "rope_reference", "rotate_half"]

#: deprecated names (release 0.1) of this module's functions -> their names; kept for one release
_RENAMED = {"fused_rotary": "fused_rope", "rotary_reference": "rope_reference"}

#: The theorem of the backward (cited by optimize_model's report).
BACKWARD_THEOREM = "Ojas.RoPE.Backward.rope_backward_eq_vjp"
IMPL_ENV = IMPL_ENVS["rope"]

_SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# unsqueeze_dim of a 3-D cos against 4-D q/k -> whether the heads are dim 1 ([B, H, S, E]; else [B, S, H, E])
_HEADS_FIRST = {1: True, -3: True, 2: False, -2: False}


def rotate_half(x: Tensor) -> Tensor:
    """Hugging Face's ``rotate_half``: ``cat(-x[..., E/2:], x[..., :E/2])``."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def rope_reference(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, unsqueeze_dim: int = 1) -> tuple[Tensor, Tensor]:
    """Hugging Face's Llama ``apply_rotary_pos_emb``, operation for operation."""
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


class _RoPEFunction(torch.autograd.Function):
    """The kernel both ways for 4-D ``q``/``k`` ``[B, H, S, E]`` and ``cos``/``sin`` ``[B or 1, S, E]``
    not requiring grad, checked by the caller; saves only ``cos`` and ``sin``
    (Ojas.RoPE.Backward.rope_backward_eq_vjp).  Under torch.compile the kernel runs as the
    registered ops (below), the backward op on both output gradients (zeros for an unused output)."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
        ctx.save_for_backward(cos, sin)
        if torch.compiler.is_compiling():
            return _forward_op(q, k, cos, sin)
        ctx.set_materialize_grads(False)
        return _KERNELS.load().rope_forward(q, k, cos, sin, False)

    @staticmethod
    def backward(ctx, grad_q: Optional[Tensor], grad_k: Optional[Tensor]):
        refuse_double_backward("apply_rotary_pos_emb", "rope_reference (impl='reference')")
        cos, sin = ctx.saved_tensors
        need_q, need_k = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        if torch.compiler.is_compiling():
            dq, dk = _backward_op(grad_q, grad_k, cos, sin)
            return (dq if need_q else None), (dk if need_k else None), None, None
        dq, dk = _KERNELS.load().rope_backward(grad_q if need_q else None, grad_k if need_k else None, cos, sin)
        return dq, dk, None, None


# ---------------------------------------------------------------------------
# The registered operators: what torch.compile sees
# ---------------------------------------------------------------------------
#
# Under torch.compile (and torch.export) ``_RoPEFunction`` runs the kernel as the operators
# ``ojas::rope_forward`` and ``ojas::rope_backward`` (``ojas_kernels.host.define_op``: opaque to
# Dynamo and Inductor, fake implementations ``ojas_kernels.rope.outputs_like``, no autograd kernel:
# Dynamo traces the Function, which calls the forward op in its forward and the backward op in its
# backward).  They call the eager path's ``rope_forward`` and ``rope_backward`` with the same
# arguments: the same values, the same theorem.  Eagerly ``_RoPEFunction`` calls the kernel
# without the dispatcher.  The backward op takes both output gradients (autograd gives zeros for
# an unused output) and returns both.


_KERNELS = KernelModule("rope", _RoPEFunction)


def _forward_impl(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    return _KERNELS.load().rope_forward(q, k, cos, sin)


def _outputs_like(x_q: Tensor, x_k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """The fake implementation of both ops: outputs like their first two tensors."""
    from ojas_kernels.rope import outputs_like

    return outputs_like(x_q, x_k)


_forward_op = define_op(
    "rope_forward", "(Tensor q, Tensor k, Tensor cos, Tensor sin) -> (Tensor, Tensor)", _forward_impl, _outputs_like
)


def _backward_impl(grad_q: Tensor, grad_k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    return _KERNELS.load().rope_backward(grad_q, grad_k, cos, sin)


_backward_op = define_op(
    "rope_backward",
    "(Tensor grad_q, Tensor grad_k, Tensor cos, Tensor sin) -> (Tensor, Tensor)",
    _backward_impl,
    _outputs_like,
)


def _kernel_rope(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """The kernel on ``[B, H, S, E]``: ``_RoPEFunction`` (under torch.compile its ``apply``, which
    Dynamo traces, else the C one)."""
    if torch.compiler.is_compiling():
        return dynamo_apply(_RoPEFunction, q, k, cos, sin)
    _KERNELS.load()
    return _KERNELS.apply(q, k, cos, sin)


def _check_inputs(q: object, k: object, cos: object, sin: object, unsqueeze_dim: object) -> None:
    """Raise on bad input; the message names the argument."""
    named = (("q", q), ("k", k), ("cos", cos), ("sin", sin))
    for name, x in named:
        if not isinstance(x, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__qualname__}")
        if x.dtype not in _SUPPORTED_DTYPES:
            raise TypeError(f"{name} has dtype {x.dtype}; supported: float16, bfloat16, float32, float64")
        if x.dim() == 0:
            raise ValueError(f"{name} must have at least one dimension (the head size), got a 0-d tensor")
    if not isinstance(unsqueeze_dim, int) or isinstance(unsqueeze_dim, bool):
        raise TypeError(f"unsqueeze_dim must be an int, got {type(unsqueeze_dim).__qualname__}")
    for name, x in named[1:]:
        if x.dtype != q.dtype:
            raise TypeError(
                f"{name} has dtype {x.dtype} but q has dtype {q.dtype}; q, k, cos and sin must share "
                "one dtype (cast cos/sin to q's dtype, as Hugging Face's rotary embedding does)"
            )
        if x.device != q.device:
            raise ValueError(f"{name} is on {x.device} but q is on {q.device}")
    E = q.shape[-1]
    if E % 2:
        raise ValueError(f"q's head size (last dimension) must be even, got {E}")
    for name, x in named[1:]:
        if x.shape[-1] != E:
            raise ValueError(f"{name}'s last dimension ({x.shape[-1]}) must be q's head size {E}")
    if sin.shape != cos.shape:
        raise ValueError(f"sin {tuple(sin.shape)} must have cos's shape {tuple(cos.shape)}")
    if q.dim() == 4 and k.dim() == 4 and cos.dim() == 3 and unsqueeze_dim in _HEADS_FIRST:
        seq = 2 if _HEADS_FIRST[unsqueeze_dim] else 1
        B, S = q.shape[0], q.shape[seq]
        if k.shape[0] != B:
            raise ValueError(f"k's batch ({k.shape[0]}) must be q's ({B}); k {tuple(k.shape)}, q {tuple(q.shape)}")
        if k.shape[seq] != S:
            raise ValueError(f"k's positions (dim {seq}: {k.shape[seq]}) must be q's ({S})")
        if cos.shape[1] != S:
            raise ValueError(f"cos {tuple(cos.shape)} must have q's {S} positions in dim 1")
        if cos.shape[0] not in (1, B):
            raise ValueError(f"cos's batch ({cos.shape[0]}) must be 1 or q's batch {B}")


def _kernel_runs(impl: Optional[str], q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, unsqueeze_dim: int) -> bool:
    """Whether to run the Triton kernel (True) or the reference (False): the reference when ``cos``
    or ``sin`` requires grad (the kernel gives them none), else ``dispatch.kernel_runs`` with a
    layout other than 4-D q/k and 3-D cos/sin and torch.func transforms refused."""
    impl = resolve_impl("rope", impl)
    if impl == "reference" or cos.requires_grad or sin.requires_grad:
        return False
    refused = None
    if not (q.dim() == 4 and k.dim() == 4 and cos.dim() == 3 and unsqueeze_dim in _HEADS_FIRST):
        refused = ValueError(
            f"impl='triton' needs 4-D q and k and 3-D cos/sin [B or 1, S, E] with unsqueeze_dim "
            f"1 or 2, got q {tuple(q.shape)}, k {tuple(k.shape)}, cos {tuple(cos.shape)}, "
            f"unsqueeze_dim={unsqueeze_dim}; use impl='reference'"
        )
    elif not torch.compiler.is_compiling() and torch._C._functorch.maybe_current_level() is not None:
        refused = NotImplementedError(
            "apply_rotary_pos_emb(impl='triton') does not support torch.func transforms (grad, vmap, jacrev, jvp, "
            "...): use impl='reference' (or 'auto', which runs it under a transform), or torch.autograd"
        )
    return kernel_runs("rope", impl, q, k, cos, sin, refused=refused)


def apply_rotary_pos_emb(
    q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, unsqueeze_dim: int = 1, *, impl: Optional[str] = None
) -> tuple[Tensor, Tensor]:
    """Hugging Face's Llama ``apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim)``: the same values,
    forward and gradients (``torch.equal``; module docstring).

    ``q`` ``[B, Hq, S, E]`` and ``k`` ``[B, Hkv, S, E]`` (``Hkv`` may differ: grouped-query
    attention; any strides, e.g. ``q_proj(x).view(B, S, H, E).transpose(1, 2)``), ``cos``/``sin``
    ``[B or 1, S, E]``; with ``unsqueeze_dim=2``, ``q``/``k`` are ``[B, S, H, E]``.  One dtype for
    all four (float16, bfloat16, float32, float64; not promoted), one device, ``E`` even.  The
    backward is the VJP of the formula over the reals (Ojas.RoPE.Backward.rope_backward_eq_vjp); no
    theorem covers the rounding (it is torch's, op by op).

    ``impl``: "triton" runs ``ojas_kernels.rope`` (CUDA tensors, or CPU ones under
    TRITON_INTERPRET=1; not float64), "reference" :func:`rope_reference` (Hugging Face's
    operations), "auto" the kernel for 4-D CUDA ``q``/``k`` of a kernel dtype with 3-D
    ``cos``/``sin`` and ``unsqueeze_dim`` 1 or 2 (outside torch.func transforms), the reference
    otherwise; ``None``: the setting of ``dispatch.use_impl``, else the environment variable
    OJAS_ROPE_IMPL read at import, else "auto" (``ojas_ref.functional.dispatch``).  When ``cos``
    or ``sin`` requires grad the reference runs (the kernel gives no gradient for them).  The
    kernel's gradients are first-order only: a backward with ``create_graph=True`` through it
    raises RuntimeError; under torch.func transforms "triton" raises NotImplementedError.

    Under ``torch.compile`` the kernel runs as the registered ops ``ojas::rope_forward`` /
    ``ojas::rope_backward`` (the same kernel with the same arguments, so the theorem citation
    above is unchanged; ``fullgraph=True`` works); the reference is traced as torch code.
    """
    _check_inputs(q, k, cos, sin, unsqueeze_dim)
    if not _kernel_runs(impl, q, k, cos, sin, unsqueeze_dim):
        return rope_reference(q, k, cos, sin, unsqueeze_dim)
    if _HEADS_FIRST[unsqueeze_dim]:
        return _kernel_rope(q, k, cos, sin)
    q_out, k_out = _kernel_rope(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
    return q_out.transpose(1, 2), k_out.transpose(1, 2)


def fused_rope(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """The kernel's :func:`apply_rotary_pos_emb` with ``unsqueeze_dim=1``, for arguments known to be
    plain (4-D ``q``/``k`` ``[B, H, S, E]`` and ``cos``/``sin`` ``[B or 1, S, E]`` of one kernel dtype
    and device, ``E`` even, ``cos``/``sin`` not requiring grad: ``dispatch.plain_kernel_call``).
    Theorem as :func:`apply_rotary_pos_emb`'s; under torch.compile the op ``ojas::rope_forward``."""
    return _kernel_rope(q, k, cos, sin)


__getattr__ = renamed_module_attributes(__name__, _RENAMED)
