"""ReLU saving a packed 1-bit mask, and ReLU² followed by a linear map saving only ``relu(h)``.

What is saved, precisely.  torch's ``F.relu`` saves its output ``r = relu(h)`` for
``threshold_backward(g, r, 0)`` (derivatives.yaml: ``relu: threshold_backward(grad, result, 0)``).

* :func:`relu` saves ``ceil(n / 8)`` bytes instead: the mask ``not (r <= 0)`` packed 8 bits to a
  byte (1 bit per element: 32x smaller than a float32 ``r``, 16x than a 16-bit one, 8x than a bool
  mask), and the backward needs only that mask and the incoming gradient.  The saving is real
  only where nothing else keeps ``r``: an MLP ``down(relu(up(x)))`` whose down projection saves
  its input keeps ``r`` anyway (torch's ReLU then shares that very tensor, so replacing it adds
  the ``n / 8`` bytes of the mask and saves nothing).  It saves one ``[tokens, intermediate]``
  tensor per layer where another op sits between the activation and the projection, as the
  dropout of ``nn.TransformerEncoderLayer``'s and T5's feed-forward blocks in training
  (``linear2(dropout(relu(linear1(x))))``: torch keeps ``r``, the dropout's bool mask and the
  dropout's output; here ``n / 8`` bytes, the bool mask and the dropout's output).
* :func:`relu_squared_linear` is ``F.linear(torch.square(F.relu(h)), weight, bias)`` (Hugging Face's
  ``"relu2"``, ``ReLUSquaredActivation``, then the down projection).  torch keeps two
  ``[tokens, intermediate]`` tensors there: ``r`` (saved by relu and by square) and ``s = r * r``
  (saved by the linear map).  Here only ``r``: the backward recomputes ``s`` by the same
  ``torch.square(r)`` (the same bits) for the weight gradient, so one tensor of the two.  A
  1-bit mask cannot replace ``r``: the derivative ``2 relu(h)`` needs ``relu(h)`` itself, and it
  cannot be recovered exactly from the saved ``s`` (``sqrt(rnd(r * r))`` is not ``r`` once
  ``r * r`` underflows or overflows: float16 ``r`` below about 2^-7 or above 256), so the mask
  plus ``s`` would not be exact and is not done.

Theorems (rocq/ReLU/Backward.v):

* :func:`relu`: ``Ojas.ReLU.Backward.relu_packed_backward_bitwise`` (the backward from the
  packed mask is torch's ``threshold_backward`` bit for bit, every IEEE float, NaN and signed
  zeros included), ``Ojas.ReLU.Backward.unpack_pack`` (the bits read back are the bits
  written), ``Ojas.ReLU.Backward.relu_mask_backward_exact`` / ``relu_float_backward_eq_derive``
  (no rounding: exactly ``g * relu'(h)`` where relu is differentiable),
  ``Ojas.ReLU.Backward.relu_backward_at_0`` (at ``h = 0`` the gradient is 0, torch's
  convention, a subgradient; ``relu_not_ex_derive_0``: relu has no derivative there).  At NaN
  the gradient passes (``threshold_backward`` tests ``r <= 0``, false for NaN; the mask is
  ``not (r <= 0)``, not ``r > 0``).
* :func:`relu_squared_linear`: ``Ojas.ReLU.Backward.relu2_backward_eq_vjp`` (over the reals,
  ``dh = ds * 2 r`` where ``r > 0``, else 0, from ``r = relu(h)`` alone, is ``ds`` times the
  derivative of ``relu(h)^2``) and ``Ojas.ReLU.Backward.relu2_linear_backward_eq_vjp`` (with the
  linear map: ``ds = dy W``, ``dh`` as above, ``dW = dy^T r^2`` with the square recomputed from
  ``r``, ``db = dy`` are the vector-Jacobian products of ``y = W relu(h)^2 + b``).  No theorem covers its rounding: the code runs torch's
  operations in torch's order (``square``'s backward ``ds * (2 * r)``, ``threshold_backward``,
  the linear map's backward as torch's ``addmm``/``mm`` backward: ``dy @ W``, ``dy^T @ s``,
  ``dy.sum(0)``); tests/functional/test_relu.py checks it bit for bit against torch's autograd on the CPU
  (and, ``-m gpu``, on CUDA).

The reference (``impl="reference"``) packs and unpacks with torch's integer operations; the
Triton kernel (``ojas_kernels.relu``, CUDA or the CPU under TRITON_INTERPRET=1) does the relu,
the mask and the packing in one pass and the backward in one, on the floats' bits read as
integers (``Ojas.ReLU.KernelBits.kernel_packed_backward_bitwise``: those integer tests are IEEE's
comparisons; module docstring there).
:func:`relu_squared_linear` has no kernel of its own.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor
from torch.nn import functional as F

from ojas_kernels.host import define_op
from ojas_ref.functional.autocast import autocast_dtype, autocast_off
from ojas_ref.functional.dispatch import IMPL_ENVS, kernel_runs, refuse_double_backward
from ojas_ref.functional.transforms import refuse_function_transforms

__all__ = [
    "BACKWARD_THEOREM",
    "KERNEL_THEOREM",
    "RELU_SQUARED_THEOREM",
    "pack_mask",
    "relu",
    "relu_backward_reference",
    "relu_squared_linear",
    "unpack_mask",
]

#: The theorem of :func:`relu`'s backward from the packed mask (cited by optimize_model's report).
BACKWARD_THEOREM = "Ojas.ReLU.Backward.relu_packed_backward_bitwise"
#: The theorem of the Triton kernel's backward: its integer tests of the bits are IEEE's comparisons.
KERNEL_THEOREM = "Ojas.ReLU.KernelBits.kernel_packed_backward_bitwise"
#: The theorem of :func:`relu_squared_linear`'s backward from ``relu(h)`` alone.
RELU_SQUARED_THEOREM = "Ojas.ReLU.Backward.relu2_linear_backward_eq_vjp"

_SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
IMPL_ENV = IMPL_ENVS["relu"]
_SHIFTS = tuple(range(8))


def pack_mask(mask: Tensor) -> Tensor:
    """A bool tensor as ``ceil(n / 8)`` uint8 bytes, element ``8 k + j`` of the row-major flattening
    in bit ``j`` of byte ``k``, the padding bits zero (the layout of ``pack`` in rocq/ReLU/Backward.v:
    Ojas.ReLU.Backward.unpack_pack, Ojas.ReLU.Backward.unpack_pack_tail).  That these torch
    operations compute that layout is tested (tests/functional/test_relu.py), not proved."""
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor, got {mask.dtype if isinstance(mask, Tensor) else type(mask)}")
    flat = mask.reshape(-1)
    n = flat.numel()
    if n % 8:
        flat = torch.cat([flat, flat.new_zeros(8 - n % 8)])
    bits = flat.view(-1, 8)
    packed = bits[:, 0].to(torch.uint8)
    for j in _SHIFTS[1:]:
        packed |= bits[:, j].to(torch.uint8) << j
    return packed


def unpack_mask(packed: Tensor, shape: torch.Size | tuple[int, ...]) -> Tensor:
    """The bool tensor of ``shape`` that :func:`pack_mask` packed (bit ``i mod 8`` of byte ``i / 8``,
    ``unpack`` in rocq/ReLU/Backward.v: Ojas.ReLU.Backward.unpack_pack; these torch operations are
    tested against it, not proved)."""
    n = 1
    for d in shape:
        n *= d
    if not isinstance(packed, Tensor) or packed.dtype != torch.uint8 or packed.dim() != 1:
        raise TypeError("packed must be a 1-D uint8 tensor (what pack_mask returns)")
    if packed.numel() != -(-n // 8):
        raise ValueError(f"packed has {packed.numel()} bytes; a mask of shape {tuple(shape)} needs {-(-n // 8)}")
    shifts = torch.arange(8, dtype=torch.uint8, device=packed.device)
    return ((packed.unsqueeze(1) >> shifts) & 1).view(-1)[:n].view(shape).bool()


def relu_backward_reference(grad: Tensor, packed: Tensor) -> Tensor:
    """``grad`` where the packed bit is set, ``+0`` elsewhere: a selection, no arithmetic
    (Ojas.ReLU.Backward.relu_packed_backward_bitwise: torch's ``threshold_backward`` bit for bit)."""
    return torch.where(unpack_mask(packed, grad.shape), grad, grad.new_zeros(()))


def _check_input(name: str, x: object) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__qualname__}")
    if x.dtype not in _SUPPORTED_DTYPES:
        raise TypeError(
            f"{name} has dtype {x.dtype}; relu with a packed mask needs float16, bfloat16, float32 "
            "or float64 (use torch.nn.functional.relu for other dtypes)"
        )


class _ReLUFunction(torch.autograd.Function):
    """Saves only the packed mask (Ojas.ReLU.Backward.relu_packed_backward_bitwise).  Under
    torch.compile the kernels run as the registered ops (below)."""

    @staticmethod
    def forward(ctx, x: Tensor, use_triton: bool) -> Tensor:
        if use_triton and torch.compiler.is_compiling():
            r, packed = _forward_op(x)
        elif use_triton:
            from ojas_kernels.relu import relu_forward

            r, packed = relu_forward(x)
        else:
            r = F.relu(x)
            packed = pack_mask(~(r <= 0))  # threshold_backward's test, on the same bits
        ctx.save_for_backward(packed)
        ctx.use_triton = use_triton
        return r

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Optional[Tensor], None]:
        refuse_double_backward("relu", "torch.nn.functional.relu")
        (packed,) = ctx.saved_tensors
        if ctx.use_triton and torch.compiler.is_compiling():
            return _backward_op(grad, packed), None
        if ctx.use_triton:
            from ojas_kernels.relu import relu_backward

            return relu_backward(grad, packed), None
        return relu_backward_reference(grad, packed), None


# ---------------------------------------------------------------------------
# The registered operators: what torch.compile sees
# ---------------------------------------------------------------------------
#
# Under torch.compile (and torch.export) ``_ReLUFunction`` runs the kernels as the operators
# ``ojas::relu_forward`` (``relu(h)`` and the packed mask, an integer output that is not
# differentiated) and ``ojas::relu_backward`` (``ojas_kernels.host.define_op``: opaque to Dynamo
# and Inductor, fake implementations, no autograd kernel: Dynamo traces the Function, which calls
# the forward op in its forward and the backward op in its backward).  They call the eager path's
# ``relu_forward`` and ``relu_backward`` with the same arguments: the same bits, the same
# theorems.  Eagerly ``_ReLUFunction`` calls the kernels without the dispatcher.


def _forward_impl(h: Tensor) -> tuple[Tensor, Tensor]:
    from ojas_kernels.relu import relu_forward

    return relu_forward(h)


def _forward_fake(h: Tensor) -> tuple[Tensor, Tensor]:
    from ojas_kernels.relu import packed_numel

    return (
        torch.empty_like(h, memory_format=torch.contiguous_format),
        h.new_empty(packed_numel(h.numel()), dtype=torch.uint8),
    )


_forward_op = define_op("relu_forward", "(Tensor h) -> (Tensor, Tensor)", _forward_impl, _forward_fake)


def _backward_impl(grad: Tensor, packed: Tensor) -> Tensor:
    from ojas_kernels.relu import relu_backward

    return relu_backward(grad, packed)


def _backward_fake(grad: Tensor, packed: Tensor) -> Tensor:
    return torch.empty_like(grad, memory_format=torch.contiguous_format)


_backward_op = define_op("relu_backward", "(Tensor grad, Tensor packed) -> Tensor", _backward_impl, _backward_fake)


def relu(input: Tensor, inplace: bool = False, *, impl: Optional[str] = None) -> Tensor:
    """``F.relu(input)``, differentiable, saving only its mask packed 1 bit per element.

    ``input``: float16, bfloat16, float32 or float64, any shape (non-contiguous allowed; the
    kernel's output is contiguous, the reference's has ``F.relu``'s layout).  The values are
    ``F.relu``'s bit for bit (the reference calls it; the kernel's signed zeros and NaN: ojas_kernels.relu);
    the backward is ``threshold_backward(g, relu(input), 0)`` bit for bit from the mask
    ``not (relu(input) <= 0)`` alone (Ojas.ReLU.Backward.relu_packed_backward_bitwise,
    Ojas.ReLU.Backward.relu_mask_backward_exact; at 0 the gradient is 0,
    Ojas.ReLU.Backward.relu_backward_at_0).  Saved for backward: ``ceil(numel / 8)`` bytes (module
    docstring: where that saves memory and where it does not).  Without autograd (no grad mode or
    an input that does not require grad) it is ``F.relu`` itself, whatever ``impl``: nothing is packed.  Autocast
    changes nothing (relu is not an autocast op).

    ``inplace=True`` raises NotImplementedError (the packed-mask function returns a new tensor).
    ``impl``: "triton" runs ``ojas_kernels.relu`` (CUDA tensors, or CPU tensors under
    TRITON_INTERPRET=1; not float64), "reference" torch's operations, "auto" the kernel for CUDA
    tensors that are not float64; ``None``: the setting of ``dispatch.use_impl``, else the
    environment variable OJAS_RELU_IMPL read at import, else "auto" (``ojas_ref.functional.dispatch``).
    First-order gradients only: a backward with ``create_graph=True`` raises RuntimeError;
    torch.func transforms raise NotImplementedError.

    Under ``torch.compile`` the kernel runs as the registered ops ``ojas::relu_forward`` /
    ``ojas::relu_backward`` (the same kernels with the same arguments, so the theorem
    citations above are unchanged; ``fullgraph=True`` works); the reference is traced as torch
    code.
    """
    refuse_function_transforms("relu")
    if inplace is not False:
        raise NotImplementedError(
            "relu(inplace=True) is not supported: the packed-mask relu returns a new tensor "
            "(use inplace=False, or torch.nn.functional.relu for an in-place relu)"
        )
    _check_input("input", input)
    use_triton = kernel_runs("relu", impl, input)
    if not (torch.is_grad_enabled() and input.requires_grad):
        return F.relu(input)  # nothing to save, nothing to pack
    return _ReLUFunction.apply(input, use_triton)


# ---------------------------------------------------------------------------
# ReLU² and the linear map after it
# ---------------------------------------------------------------------------


class _ReLUSquaredLinearFunction(torch.autograd.Function):
    """``F.linear(square(relu(h)), W, b)`` saving ``relu(h)`` (and ``W``), not the square
    (Ojas.ReLU.Backward.relu2_linear_backward_eq_vjp; rounding: torch's operations, module docstring)."""

    @staticmethod
    def forward(ctx, h: Tensor, weight: Tensor, bias: Optional[Tensor], linear_dtype: torch.dtype) -> Tensor:
        r = F.relu(h)
        s = torch.square(r)
        y = F.linear(s.to(linear_dtype), weight, bias)
        ctx.save_for_backward(r, weight)
        ctx.has_bias, ctx.linear_dtype = bias is not None, linear_dtype
        return y

    @staticmethod
    def backward(ctx, dy: Tensor) -> tuple[Optional[Tensor], Optional[Tensor], Optional[Tensor], None]:
        refuse_double_backward(
            "relu_squared_linear", "torch.nn.functional.linear(torch.square(torch.nn.functional.relu(h)), weight, bias)"
        )
        r, weight = ctx.saved_tensors
        dy2 = dy.reshape(-1, dy.shape[-1])
        grad_w = grad_b = grad_h = None
        if ctx.needs_input_grad[1]:
            s = torch.square(r).to(ctx.linear_dtype)  # the forward's square, recomputed: the same bits
            grad_w = dy2.t().mm(s.reshape(-1, s.shape[-1]))  # addmm's mat2 backward for weight.t()
            del s
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = dy2.sum(0)
        if ctx.needs_input_grad[0]:
            grad_s = dy.matmul(weight).to(r.dtype)  # addmm's mat1 backward, then the cast's
            grad_h = torch.ops.aten.threshold_backward(grad_s * (2.0 * r), r, 0)  # square's, then relu's
        return grad_h, grad_w, grad_b, None


def relu_squared_linear(h: Tensor, weight: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    """``F.linear(torch.square(F.relu(h)), weight, bias)`` saving ``relu(h)`` but not its square.

    The down projection of a ReLU² MLP (Hugging Face's ``hidden_act="relu2"``): torch saves both
    ``relu(h)`` and ``relu(h)^2``; this saves ``relu(h)`` and recomputes the square in the backward
    for the weight gradient (one ``[..., in_features]`` tensor of two).  ``h``: ``[..., in_features]``,
    float16, bfloat16, float32 or float64; ``weight``: ``[out_features, in_features]``; ``bias``:
    ``[out_features]`` or None; one dtype and device for all (no promotion).  Under autocast the
    linear map runs at the autocast dtype as torch's ``F.linear`` would (the square cast to it,
    ``weight`` and ``bias`` cast outside, their gradients cast back by autograd); relu and square
    stay in ``h``'s dtype, as torch's.  Values and gradients: torch's operations in torch's order
    (bit for bit on the CPU, tests/functional/test_relu.py); over the reals the backward is the VJP
    (Ojas.ReLU.Backward.relu2_linear_backward_eq_vjp, Ojas.ReLU.Backward.relu2_backward_eq_vjp); no
    theorem covers the rounding.  Reference only
    (no Triton kernel).  First-order gradients only (``create_graph=True`` raises RuntimeError);
    torch.func transforms raise NotImplementedError.
    """
    refuse_function_transforms("relu_squared_linear")
    _check_input("h", h)
    for name, t in (("weight", weight), ("bias", bias)):
        if t is None and name == "bias":
            continue
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__qualname__}")
        if t.dtype != h.dtype:
            raise TypeError(
                f"{name} has dtype {t.dtype} but h has dtype {h.dtype}; they must share one dtype "
                "(relu_squared_linear does not promote)"
            )
        if t.device != h.device:
            raise ValueError(f"{name} is on {t.device} but h is on {h.device}")
    if h.dim() < 1:
        raise ValueError("h must have at least one dimension, [..., in_features]")
    if weight.dim() != 2 or weight.shape[1] != h.shape[-1]:
        raise ValueError(f"weight must be [out_features, in_features={h.shape[-1]}], got {tuple(weight.shape)}")
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise ValueError(f"bias must be [out_features={weight.shape[0]}], got {tuple(bias.shape)}")
    linear_dtype = h.dtype
    cast = autocast_dtype(h.device.type)
    if cast is not None and h.dtype != torch.float64:
        linear_dtype = cast
        weight = weight.to(cast)
        bias = None if bias is None else bias.to(cast)
    with autocast_off(h.device.type):
        return _ReLUSquaredLinearFunction.apply(h, weight, bias, linear_dtype)
