"""A reversible Llama-style decoder for training from scratch.

Every decoder layer is an :class:`~ojas_ref.nn.reversible.AdditiveCoupling` on a
residual stream of two halves ``x = cat(x1, x2)`` (each of width ``hidden``, so the stream
is ``[B, S, 2 hidden]``, the layout :class:`~ojas_ref.ReversibleSequence` expects), with
the attention block as F and the MLP block as G, each normalising its own input:

    y1 = x1 + F(x2),  F(a) = o_proj(attention(rope(q_proj(n)), rope(k_proj(n)), v_proj(n))),
                           n = RMSNorm_attn(a), causal, grouped-query when kv_heads < heads
    y2 = x2 + G(y1),  G(b) = down_proj(swiglu(gate_proj(m), up_proj(m))), m = RMSNorm_mlp(b)

The two streams are formed by duplicating the token embedding ``e`` (``x = cat(e, e)``,
as RevViT / Reformer do) and merged at the output by averaging, ``h = (y1 + y2) / 2``,
followed by the final RMSNorm and the LM head (tied to the embedding or not). Nothing
else is changed from Llama: no biases, RoPE of Hugging Face's rotate-half
form on ``arange(S)`` positions (``rope_theta``), SwiGLU MLP, RMSNorm with ``eps``.

The pieces are the project's own: :func:`ojas_ref.attention` (``is_causal=True``; the
Triton kernel on CUDA, the reference recurrence on the CPU and for float64),
:func:`ojas_ref.rms_norm`, :func:`ojas_ref.swiglu`,
:func:`ojas_ref.functional.rope.apply_rotary_pos_emb` and
:func:`ojas_ref.linear_cross_entropy` for the loss (Hugging Face's shift: the hidden state
at position t predicts ``labels[:, t + 1]``; ``ignore_index=-100``; the mean over the kept
tokens, 0 when none is kept where Hugging Face gives NaN). F and G are deterministic
functions of their input half (no dropout, no RNG; the RoPE tables depend only on the
sequence length, which is the input's shape), which the reconstruction needs, so the stack
runs with ``preserve_rng_state=False`` (no per-call RNG snapshots, which would otherwise
grow with depth).

Modes (``mode=``, a constructor argument and attribute, overridable per call): the SAME
blocks (same parameters, same arithmetic) are run

* ``"reversible"`` (default): by :class:`~ojas_ref.ReversibleSequence`: only the stack's
  output is saved for backward, each layer's input is reconstructed from its output in
  backward, so activation memory does not grow with depth;
* ``"stored"``: one block after the other with ordinary autograd (every activation saved),
  the reference the reversible backward is compared to;
* ``"checkpointed"``: as ``"stored"`` with ``torch.utils.checkpoint`` around each block
  (the block inputs saved, each block recomputed in backward), for the benchmark.

What the reversible backward rests on (rocq/Reversible/):

* ``Ojas.Reversible.Coupling.coupling_inverse_forward`` (``coupling_inverse_forward_list``
  for vectors): over any commutative group, in particular the reals, the coupling inverse
  x2 = y2 - G(y1), x1 = y1 - F(x2) undoes the coupling exactly, for arbitrary F and G (no
  Lipschitz or invertibility assumption: attention and the MLP need none).
* ``Ojas.Reversible.Stack.stack_inverse_forward`` (``stack_inverse_forward_list``): the
  layers' inverses run last to first undo the whole stack.
* ``Ojas.Reversible.Gradient.backprop_reversible_correct`` (with ``backprop_coupling``,
  ``coupling_stack_backward_correct``): backprop that reconstructs each layer's input with
  the inverse and applies the layer's local vector-Jacobian product there returns exactly
  the input and parameter gradients of stored-activation backprop, *under the premise that
  every layer is inverted exactly*; ``coupling_vjp_derive``: the RevNet backward of one
  coupling is its derivative. Over the reals the premise is discharged by the two theorems
  above, so the reversible and stored gradients are equal.

What no theorem covers: in floating point the premise fails, ``(x + F(a)) - F(a)`` is not
``x``: each reconstructed input differs from the one the forward pass computed by
rounding, amplified by F's and G's Lipschitz constants, and the reversible gradients are
the stored ones evaluated at slightly perturbed activations (tests/nn/test_reversible_decoder.py
measures the difference: up to ~5e-14 relative in float64 at depth 8, ~6e-7 in float32 at depth 4, small sizes).
``Ojas.Reversible.FloatError.vec_stack_recon_error`` (``vec_stack_recon_error_flx`` for
round-to-nearest binary32/64, u = 2^-p) bounds the max-norm error of layer l's
reconstructed input by the recurrence e_l = K e_(l+1) + delta_l with
K = (1 + u)^2 (1 + LF) (1 + LG), for computed F, G that are LF-, LG-Lipschitz up to
additive slacks dF, dG (delta_l collects u times the magnitudes of the halves and of F, G
there, plus the slacks); closed form K^N e0 + sum_k K^k delta_k. It is a worst case that
grows like ((1 + LF)(1 + LG))^N; no theorem gives LF, LG for attention or the MLP (they
depend on the weights and, for attention, on the softmax), and none bounds how the
reconstruction error moves the gradients. ``ojas_ref.verification.reversible_check.
reconstruction_bounds`` evaluates the recurrence for given constants;
``ReversibleSequence(check_reconstruction=True)`` measures the error (``reconstruct_check``
below).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F_
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from ojas_ref._deprecation import renamed_attribute, renamed_keyword, renamed_module_attributes
from ojas_ref.functional.attention import attention
from ojas_ref.functional.linear_cross_entropy import linear_cross_entropy
from ojas_ref.nn.reversible import AdditiveCoupling, ReversibleSequence
from ojas_ref.functional.rms_norm import rms_norm
from ojas_ref.functional.rope import apply_rotary_pos_emb
from ojas_ref.functional.swiglu import swiglu

__all__ = [
    "ReversibleDecoderConfig",
    "ReversibleDecoder",
    "DecoderAttention",
    "DecoderMLP",
    "RopeCache",
    "MODES",
    "rope_tables",
]

#: deprecated names (release 0.1) of this module's function and class -> their names; kept for one release
_RENAMED = {"rotary_tables": "rope_tables", "RotaryCache": "RopeCache"}

MODES = ("reversible", "stored", "checkpointed")
IGNORE_INDEX = -100


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"ReversibleDecoderConfig.{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"ReversibleDecoderConfig.{name} must be >= 1, got {value}")
    return value


def _positive_float(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"ReversibleDecoderConfig.{name} must be a finite positive number, got {value!r}")
    return float(value)


@dataclass
class ReversibleDecoderConfig:
    """Shape of a :class:`ReversibleDecoder` (Llama's names in brackets).

    ``vocab`` [vocab_size], ``hidden`` [hidden_size: the width of each of the two streams,
    the model's d_model], ``layers`` [num_hidden_layers: couplings], ``heads``
    [num_attention_heads], ``kv_heads`` [num_key_value_heads; None = heads; must divide
    heads: grouped-query attention], ``intermediate`` [intermediate_size], ``max_seq``
    [max_position_embeddings: longest sequence accepted], ``rope_theta``, ``eps``
    [rms_norm_eps], ``tie_embeddings`` [tie_word_embeddings], ``init_std``
    [initializer_range]. head_dim = hidden / heads, which must be an even integer (the
    RoPE rotates pairs). Checked on construction; errors name the field.
    """

    vocab: int = 32000
    hidden: int = 2048
    layers: int = 18
    heads: int = 16
    kv_heads: Optional[int] = None
    intermediate: int = 5632
    max_seq: int = 2048
    rope_theta: float = 10000.0
    eps: float = 1e-5
    tie_embeddings: bool = False
    init_std: float = 0.02

    def __post_init__(self) -> None:
        for name in ("vocab", "hidden", "layers", "heads", "intermediate", "max_seq"):
            _positive_int(name, getattr(self, name))
        if self.kv_heads is None:
            self.kv_heads = self.heads
        _positive_int("kv_heads", self.kv_heads)
        if self.hidden % self.heads:
            raise ValueError(
                f"ReversibleDecoderConfig.hidden ({self.hidden}) must be divisible by heads "
                f"({self.heads}): head_dim = hidden / heads"
            )
        if self.head_dim % 2:
            raise ValueError(
                f"ReversibleDecoderConfig: head_dim = hidden / heads = {self.hidden} / {self.heads} = "
                f"{self.head_dim} is odd; RoPE needs an even head_dim (change hidden "
                "or heads)"
            )
        if self.heads % self.kv_heads:
            raise ValueError(
                f"ReversibleDecoderConfig.kv_heads ({self.kv_heads}) must divide heads ({self.heads}) "
                "(grouped-query attention)"
            )
        self.rope_theta = _positive_float("rope_theta", self.rope_theta)
        self.eps = _positive_float("eps", self.eps)
        self.init_std = _positive_float("init_std", self.init_std)
        if not isinstance(self.tie_embeddings, bool):
            raise TypeError(
                f"ReversibleDecoderConfig.tie_embeddings must be a bool, got {type(self.tie_embeddings).__name__}"
            )

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def rope_tables(
    seq: int, head_dim: int, theta: float, device: torch.device, dtype: torch.dtype
) -> tuple[Tensor, Tensor]:
    """cos, sin ``[1, seq, head_dim]`` for positions ``arange(seq)``, as Hugging Face's default
    ``LlamaRotaryEmbedding`` computes them (inverse frequencies and angles in float32, then cast
    to ``dtype``), except in float64 for float64 (so the float64 tests are float64 end to end)."""
    work = torch.float64 if dtype == torch.float64 else torch.float32
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).to(work) / head_dim))
    freqs = torch.outer(torch.arange(seq, device=device, dtype=work), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype)[None], emb.sin().to(dtype)[None]


class RopeCache:
    """The RoPE tables per (seq, device, dtype), shared by a model's attention blocks (a plain
    object, not a module: the tables are neither parameters nor state to save)."""

    def __init__(self, head_dim: int, theta: float) -> None:
        self.head_dim, self.theta = head_dim, theta
        self._tables: dict = {}

    def __call__(self, seq: int, device: torch.device, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        key = (seq, device, dtype)
        if key not in self._tables:
            if len(self._tables) >= 8:
                self._tables.clear()
            self._tables[key] = rope_tables(seq, self.head_dim, self.theta, device, dtype)
        return self._tables[key]


class DecoderAttention(nn.Module):
    """F of a decoder layer: RMSNorm, q/k/v projections, RoPE, causal (grouped-query)
    :func:`ojas_ref.attention`, output projection; no residual (the coupling adds it).
    Input and output ``[B, S, hidden]``. Deterministic: no dropout; the RoPE tables are a
    function of S (``rope``, a :class:`RopeCache` shared by the model's blocks, or a
    private one; the tables never require grad). ``rotary=`` and ``.rotary`` are deprecated
    aliases of ``rope=`` and ``.rope`` (release 0.1)."""

    rotary = renamed_attribute("DecoderAttention", "rotary", "rope")

    @renamed_keyword("rotary", "rope", "DecoderAttention")
    def __init__(self, config: ReversibleDecoderConfig, rope: Optional[RopeCache] = None) -> None:
        super().__init__()
        c = config
        self.hidden, self.heads, self.kv_heads, self.head_dim = c.hidden, c.heads, c.kv_heads, c.head_dim
        self.eps, self.rope_theta, self.max_seq = c.eps, c.rope_theta, c.max_seq
        self.norm_weight = nn.Parameter(torch.ones(c.hidden))
        self.q_proj = nn.Linear(c.hidden, c.heads * c.head_dim, bias=False)
        self.k_proj = nn.Linear(c.hidden, c.kv_heads * c.head_dim, bias=False)
        self.v_proj = nn.Linear(c.hidden, c.kv_heads * c.head_dim, bias=False)
        self.o_proj = nn.Linear(c.heads * c.head_dim, c.hidden, bias=False)
        self.rope = RopeCache(c.head_dim, c.rope_theta) if rope is None else rope

    def forward(self, x: Tensor) -> Tensor:
        b, s, _ = x.shape
        n = rms_norm(x, (self.hidden,), self.norm_weight, self.eps)
        q = self.q_proj(n).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(n).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(n).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = self.rope(s, q.device, q.dtype)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        o = attention(q, k, v, is_causal=True, enable_gqa=self.kv_heads != self.heads)
        return self.o_proj(o.transpose(1, 2).reshape(b, s, self.heads * self.head_dim))


class DecoderMLP(nn.Module):
    """G of a decoder layer: RMSNorm, then ``down_proj(swiglu(gate_proj(.), up_proj(.)))``
    (:func:`ojas_ref.swiglu`); no residual. Input and output ``[B, S, hidden]``."""

    def __init__(self, config: ReversibleDecoderConfig) -> None:
        super().__init__()
        c = config
        self.hidden, self.eps = c.hidden, c.eps
        self.norm_weight = nn.Parameter(torch.ones(c.hidden))
        self.gate_proj = nn.Linear(c.hidden, c.intermediate, bias=False)
        self.up_proj = nn.Linear(c.hidden, c.intermediate, bias=False)
        self.down_proj = nn.Linear(c.intermediate, c.hidden, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        m = rms_norm(x, (self.hidden,), self.norm_weight, self.eps)
        return self.down_proj(swiglu(self.gate_proj(m), self.up_proj(m)))


def _check_mode(mode: object) -> str:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    return mode  # type: ignore[return-value]


class ReversibleDecoder(nn.Module):
    """A Llama-style causal LM whose decoder layers are additive couplings (module docstring).

    ``ReversibleDecoder(config, mode="reversible")``; ``forward(input_ids, labels=None, *,
    mode=None)``: ``input_ids`` int ``[B, S]`` (S <= ``max_seq``); without ``labels`` the
    logits ``[B, S, vocab]``; with ``labels`` (``[B, S]``, -100 = ignored, e.g. padding)
    the mean next-token cross-entropy, Hugging Face's shift (position t predicts
    ``labels[:, t + 1]``), by :func:`ojas_ref.linear_cross_entropy` (no logits
    materialised). ``mode`` (default ``self.mode``): ``"reversible"``, ``"stored"`` or
    ``"checkpointed"``, the same blocks run three ways. ``self.stack`` is the
    :class:`~ojas_ref.ReversibleSequence` of the couplings (``self.stack.blocks``, each an
    :class:`~ojas_ref.AdditiveCoupling` with ``f`` a :class:`DecoderAttention` and ``g`` a
    :class:`DecoderMLP`).

    Streams: ``x = cat(e, e)`` from the embedding ``e`` [B, S, hidden]; output
    ``(y1 + y2) / 2``, then the final RMSNorm and the LM head (``embed.weight`` when
    ``tie_embeddings``). Initialisation: Llama's (normal(0, ``init_std``) for the
    projections and the embedding, ones for the norm weights). ``self.rope``: the
    :class:`RopeCache` the attention blocks share (``.rotary``: its deprecated alias, release 0.1).
    """

    rotary = renamed_attribute("ReversibleDecoder", "rotary", "rope")

    def __init__(self, config: ReversibleDecoderConfig, *, mode: str = "reversible") -> None:
        super().__init__()
        if not isinstance(config, ReversibleDecoderConfig):
            raise TypeError(f"config must be a ReversibleDecoderConfig, got {type(config).__name__}")
        self.config = config
        self.mode = _check_mode(mode)
        self.embed = nn.Embedding(config.vocab, config.hidden)
        self.rope = RopeCache(config.head_dim, config.rope_theta)
        blocks = [
            AdditiveCoupling(DecoderAttention(config, self.rope), DecoderMLP(config)) for _ in range(config.layers)
        ]
        # F and G use no randomness: no RNG snapshots (they would cost memory per block call).
        self.stack = ReversibleSequence(blocks, preserve_rng_state=False)
        self.norm_weight = nn.Parameter(torch.ones(config.hidden))
        self.lm_head = None if config.tie_embeddings else nn.Linear(config.hidden, config.vocab, bias=False)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        std = self.config.init_std
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                m.weight.normal_(0.0, std)
        for name, p in self.named_parameters():
            if name.endswith("norm_weight"):
                p.fill_(1.0)

    @property
    def output_weight(self) -> Tensor:
        """The LM head's weight ``[vocab, hidden]`` (the embedding's when tied)."""
        return self.embed.weight if self.lm_head is None else self.lm_head.weight

    def _check_ids(self, input_ids: object, labels: object) -> None:
        if (
            not isinstance(input_ids, Tensor)
            or input_ids.dim() != 2
            or input_ids.dtype not in (torch.int64, torch.int32)
        ):
            raise TypeError(
                "input_ids must be an int64/int32 tensor [batch, seq], got "
                + (
                    f"{input_ids.dtype} of shape {tuple(input_ids.shape)}"
                    if isinstance(input_ids, Tensor)
                    else type(input_ids).__name__
                )
            )
        if input_ids.shape[1] > self.config.max_seq:
            raise ValueError(
                f"sequence length {input_ids.shape[1]} exceeds ReversibleDecoderConfig.max_seq ({self.config.max_seq})"
            )
        if labels is not None and (not isinstance(labels, Tensor) or labels.shape != input_ids.shape):
            raise ValueError(
                "labels must be a tensor of input_ids' shape "
                f"{tuple(input_ids.shape)}, got "
                + (str(tuple(labels.shape)) if isinstance(labels, Tensor) else type(labels).__name__)
            )

    def hidden_states(self, input_ids: Tensor, *, mode: Optional[str] = None) -> Tensor:
        """The final normalised hidden state ``[B, S, hidden]`` (before the LM head)."""
        mode = self.mode if mode is None else _check_mode(mode)
        e = self.embed(input_ids)
        x = torch.cat((e, e), dim=-1)  # the two streams x1 = x2 = e
        if mode == "reversible":
            y = self.stack(x)
        else:
            y = x
            for block in self.stack.blocks:
                y = checkpoint(block, y, use_reentrant=False) if mode == "checkpointed" else block(y)
        h = self.config.hidden
        merged = (y[..., :h] + y[..., h:]) * 0.5
        return rms_norm(merged, (h,), self.norm_weight, self.config.eps)

    def forward(self, input_ids: Tensor, labels: Optional[Tensor] = None, *, mode: Optional[str] = None) -> Tensor:
        self._check_ids(input_ids, labels)
        hs = self.hidden_states(input_ids, mode=mode)
        w = self.output_weight
        if labels is None:
            return F_.linear(hs, w)
        # Hugging Face's ForCausalLMLoss: pad with -100 and shift left, so position t is scored
        # against labels[:, t + 1] and the last position against nothing.
        target = F_.pad(labels.long(), (0, 1), value=IGNORE_INDEX)[:, 1:]
        return linear_cross_entropy(hs, w, target, ignore_index=IGNORE_INDEX, reduction="mean")

    def reconstruct_check(self, input_ids: Tensor, labels: Tensor) -> list[float]:
        """One forward + backward in reversible mode with the stack's ``check_reconstruction``
        on: the per-layer max |reconstructed input - forward's input| (stores the activations
        for the comparison; debugging only). Gradients accumulate into ``.grad``."""
        self.stack.check_reconstruction = True
        try:
            self(input_ids, labels, mode="reversible").backward()
            return list(self.stack.reconstruction_errors)
        finally:
            self.stack.check_reconstruction = False

    def extra_repr(self) -> str:
        return f"mode={self.mode!r}"


__getattr__ = renamed_module_attributes(__name__, _RENAMED)
