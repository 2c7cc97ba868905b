"""Client of the attention oracle extracted from the Coq spec.

The oracle (``extraction/_build/ojas-oracle``, built by ``make -C extraction``)
runs, in float64, the definitions of ``rocq/Attention/OnlineSoftmax.v``
(``attention_forward``: ``stream_row`` = ``finalize`` of ``stream`` =
``block_step`` over ``chunk``; ``attention_two_pass``: ``two_pass``;
``visibility``) and ``rocq/Attention/Backward.v`` (``attention_backward``),
extracted to OCaml, and grouped-query attention by ``gqa_forward`` /
``gqa_backward`` of ``rocq/Attention/GroupedQuery.v`` (query head ``h`` reads
key/value head ``h // G``; dK and dV summed over the group's query heads in the
kernel's order).  It speaks the JSON-lines protocol of
``extraction/README.md``; this module broadcasts boolean masks, which the oracle
does not do itself.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import subprocess
import threading
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "attention_oracle",
    "coupling_stack_oracle",
    "linear_cross_entropy_oracle",
    "optimizer_update_oracle",
    "oracle_binary",
    "oracle_request",
]

_DEFAULT_BINARY = Path(__file__).resolve().parents[2] / "extraction" / "_build" / "ojas-oracle"


def oracle_binary() -> Path:
    """Path of the oracle executable: ``$OJAS_ORACLE`` or ``extraction/_build/ojas-oracle``."""
    path = Path(os.environ.get("OJAS_ORACLE", _DEFAULT_BINARY))
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise RuntimeError(
            f"attention oracle not found at {path}: build it with `make -C extraction` "
            "(or point OJAS_ORACLE at the executable)"
        )
    return path


class _OracleProcess:
    """One running oracle: a request is a JSON line written, the answer a JSON line read."""

    def __init__(self, path: Path) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.proc = subprocess.Popen([str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def alive(self) -> bool:
        return self.pid == os.getpid() and self.proc.poll() is None

    def request(self, req: dict[str, Any]) -> dict[str, Any]:
        line = json.dumps(req, allow_nan=False) + "\n"
        with self.lock:
            assert self.proc.stdin is not None and self.proc.stdout is not None
            try:
                self.proc.stdin.write(line)
                self.proc.stdin.flush()
            except BrokenPipeError as e:
                raise RuntimeError(f"attention oracle exited (status {self.proc.poll()})") from e
            answer = self.proc.stdout.readline()
        if not answer:
            raise RuntimeError(f"attention oracle exited (status {self.proc.wait()})")
        return json.loads(answer)

    def close(self) -> None:
        if self.pid == os.getpid() and self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait()


_process: _OracleProcess | None = None
_process_lock = threading.Lock()


def _oracle() -> _OracleProcess:
    """The oracle process of this Python process, started on first use."""
    global _process
    with _process_lock:
        if _process is None or not _process.alive():
            _process = _OracleProcess(oracle_binary())
            atexit.register(_process.close)
        return _process


def oracle_request(req: dict[str, Any]) -> dict[str, Any]:
    """Send one raw protocol request (``extraction/README.md``) and return the raw answer."""
    return _oracle().request(req)


def _as_list(t: torch.Tensor, name: str) -> list:
    if not torch.isfinite(t).all():
        raise ValueError(f"{name}: NaN or infinite values cannot be sent to the oracle (JSON cannot carry them)")
    return t.detach().to("cpu", torch.float64).tolist()


def _lse_tensor(rows: list, device: torch.device) -> torch.Tensor:
    """lse rows from the oracle, ``null`` (Coq ``None``, fully masked row) read as -inf."""
    return torch.tensor(
        [[[-math.inf if x is None else x for x in r] for r in h] for h in rows],
        dtype=torch.float64,
        device=device,
    )


def attention_oracle(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    window: int | None = None,
    block_size: int = 16,
    grad_out: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Attention computed by the oracle extracted from the Coq definitions.

    Arguments as in ``torch.nn.functional.scaled_dot_product_attention`` for
    ``[B, H, S, E]`` tensors: ``scale`` defaults to ``1/sqrt(E)``; ``attn_mask``
    broadcastable to ``[B, Hq, Sq, Sk]``, boolean (``True`` = takes part) or
    floating point (added to the scores, ``-inf`` masks the entry: ``float_mask``
    of ``rocq/Attention/AdditiveMask.v``, see below);
    ``is_causal`` keeps key ``j`` for query ``i`` iff ``j <= i`` (Coq
    ``causal``); with ``enable_gqa`` key/value head ``h // (Hq/Hkv)`` serves
    query head ``h``.  ``window`` keeps keys with ``|i - j| < window``
    (``in_window``); the requested masks are combined by conjunction
    (``visibility``; unlike torch, ``attn_mask`` and ``is_causal`` may be
    given together).  ``block_size`` is the key tile of ``chunk``.

    Returns float64 tensors on ``query.device``: ``out``/``lse`` from
    ``gqa_forward`` (``attention_forward`` of ``rocq/Attention/OnlineSoftmax.v``
    per query head with key/value head ``h // G``; lse = -inf and out = 0 for a
    fully masked row), ``out_two_pass``/``lse_two_pass`` from ``mha_two_pass``
    (``attention_two_pass`` on the key/value heads repeated ``G`` times,
    ``repeat_kv``: the specification of ``gqa_forward_correct``), and, when
    ``grad_out`` is given,
    ``grad_query``/``grad_key``/``grad_value`` from ``gqa_backward``
    (``attention_backward`` of ``rocq/Attention/Backward.v`` per query head, fed
    with the streamed ``out`` and ``lse``; ``grad_key``/``grad_value`` per
    key/value head, the sums over its query heads: ``gqa_backward_dK`` /
    ``gqa_backward_dV`` / ``gqa_backward_dQ`` equate them with the derivatives of
    ``gqa_dK_is_derive`` / ``gqa_dV_is_derive`` / ``gqa_dQ_is_derive``).
    With a floating-point ``attn_mask``: ``out``/``lse`` from ``float_mask`` per
    query head, ``out_two_pass``/``lse_two_pass`` from ``attention_two_pass_bias``
    over the finite entries (``attention_forward_float_mask_correct``), and with
    ``grad_out`` only ``grad_attn_mask`` [B, Hq, Sq, Sk] (``attention_dbias``,
    ``attention_dbias_is_derive``; 0 at ``-inf`` entries, not summed over the
    dimensions the mask was broadcast in): no theorem states the whole-head
    dQ / dK / dV under a float mask, so the oracle does not return them.
    Over the reals, ``out``/``lse`` equal ``out_two_pass``/``lse_two_pass``
    (``attention_forward_correct``, ``rocq/Attention/StreamCorrect.v``, and
    ``gqa_forward_correct``); here
    both are float64 runs of the extracted definitions.
    """
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.dim() != 4:
            raise ValueError(f"{name}: expected a [B, H, S, E] tensor, got shape {tuple(t.shape)}")
        if t.numel() == 0:
            raise ValueError(f"{name}: every dimension must be >= 1, got shape {tuple(t.shape)}")
    b, hq, sq, e = query.shape
    hkv, sk = key.shape[1], key.shape[2]
    if key.shape[0] != b or value.shape[:3] != key.shape[:3] or key.shape[3] != e:
        raise ValueError(
            f"shapes do not match: query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}"
        )
    if hkv != hq and (not enable_gqa or hq % hkv != 0):
        raise ValueError(
            f"key/value have {hkv} heads and query {hq}: pass enable_gqa=True with query heads a multiple of key heads"
        )
    mask = bias = None
    if attn_mask is not None:
        full = torch.broadcast_to(attn_mask, (b, hq, sq, sk))
        if attn_mask.dtype == torch.bool:
            mask = full.tolist()
        elif attn_mask.is_floating_point():
            if bool((torch.isnan(full) | (full == math.inf)).any()):
                raise ValueError("attn_mask: a float mask must be finite or -inf (no NaN, no +inf)")
            bias = [
                [[[None if x == -math.inf else x for x in row] for row in h] for h in bb]
                for bb in full.to(torch.float64).tolist()
            ]
        else:
            raise TypeError(f"attn_mask: expected a boolean or floating-point mask, got {attn_mask.dtype}")
    if grad_out is not None and grad_out.shape != (b, hq, sq, value.shape[3]):
        raise ValueError(f"grad_out: expected shape {(b, hq, sq, value.shape[3])}, got {tuple(grad_out.shape)}")
    scale = 1.0 / math.sqrt(e) if scale is None else float(scale)
    if not math.isfinite(scale):
        raise ValueError("scale: must be finite (JSON cannot carry NaN or infinities)")

    answer = oracle_request(
        {
            "op": "attention",
            "query": _as_list(query, "query"),
            "key": _as_list(key, "key"),
            "value": _as_list(value, "value"),
            "scale": scale,
            "is_causal": bool(is_causal),
            "window": window,
            "attn_mask": mask,
            "attn_bias": bias,
            "block_size": block_size,
            "grad_out": None if grad_out is None else _as_list(grad_out, "grad_out"),
        }
    )
    if "error" in answer:
        raise ValueError(f"attention oracle: {answer['error']}")

    device = query.device

    def tensor(name: str) -> torch.Tensor:
        return torch.tensor(answer[name], dtype=torch.float64, device=device)

    result = {
        "out": tensor("out"),
        "lse": _lse_tensor(answer["lse"], device),
        "out_two_pass": tensor("out_two_pass"),
        "lse_two_pass": _lse_tensor(answer["lse_two_pass"], device),
    }
    if grad_out is not None:
        for name in ("grad_query", "grad_key", "grad_value", "grad_attn_mask"):
            if name in answer:
                result[name] = tensor(name)
    return result


def linear_cross_entropy_oracle(
    input: torch.Tensor,
    linear_weight: torch.Tensor,
    target: torch.Tensor,
    *,
    linear_bias: torch.Tensor | None = None,
    reduction: str = "mean",
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    z_loss: float = 0.0,
    softcap: float | None = None,
    token_chunk: int = 4,
    vocab_chunk: int = 4,
    grad_output: torch.Tensor | float | None = None,
) -> dict[str, torch.Tensor]:
    """Chunked linear cross-entropy computed by the oracle extracted from the Coq definitions.

    Arguments as in ``ojas_ref.functional.linear_cross_entropy.linear_cross_entropy``: input
    ``[N, D]`` or ``[B, S, D]`` (flattened to ``[N, D]`` for the oracle), target of the
    input's shape without ``D``, linear_weight ``[V, D]``, linear_bias ``[V]`` or None;
    ``token_chunk`` / ``vocab_chunk`` are the ``bt`` / ``bv`` of ``ce_forward``.
    ``grad_output`` is the upstream gradient (target-shaped for ``reduction="none"``,
    a scalar otherwise); None means ones.

    Returns float64 tensors on ``input.device``: ``loss`` (``ce_output`` of
    ``ce_forward``, rocq/LinearCrossEntropy/Definitions.v: target-shaped for "none", a
    scalar otherwise; "mean" over no kept token is 0: the spec divides by the kept
    count only when it is positive), ``lse`` (target-shaped, for every token, ignored
    ones included) and
    ``grad_input`` / ``grad_weight`` / ``grad_bias`` (``ce_backward`` fed with the
    forward's accumulators; ``grad_bias`` is the column sums of G, returned also when
    ``linear_bias`` is None).
    """
    if input.dim() not in (2, 3) or input.numel() == 0:
        raise ValueError(f"input: expected a non-empty [N, D] or [B, S, D] tensor, got shape {tuple(input.shape)}")
    if tuple(target.shape) != tuple(input.shape[:-1]):
        raise ValueError(f"target: expected shape {tuple(input.shape[:-1])}, got {tuple(target.shape)}")
    if linear_weight.dim() != 2 or linear_weight.numel() == 0:
        raise ValueError(f"linear_weight: expected a non-empty [V, D] tensor, got shape {tuple(linear_weight.shape)}")
    flat_target = target.reshape(-1)
    if grad_output is not None:
        if reduction == "none":
            grad_output = _as_list(torch.as_tensor(grad_output).reshape(flat_target.shape), "grad_output")
        else:
            grad_output = float(grad_output)
    answer = oracle_request(
        {
            "op": "linear_cross_entropy",
            "input": _as_list(input.reshape(-1, input.shape[-1]), "input"),
            "linear_weight": _as_list(linear_weight, "linear_weight"),
            "linear_bias": None if linear_bias is None else _as_list(linear_bias, "linear_bias"),
            "target": flat_target.tolist(),
            "ignore_index": int(ignore_index),
            "reduction": reduction,
            "label_smoothing": float(label_smoothing),
            "z_loss": float(z_loss),
            "softcap": None if softcap is None else float(softcap),
            "token_chunk": token_chunk,
            "vocab_chunk": vocab_chunk,
            "grad_output": grad_output,
        }
    )
    if "error" in answer:
        raise ValueError(f"linear_cross_entropy oracle: {answer['error']}")

    def tensor(name: str) -> torch.Tensor:
        return torch.tensor(answer[name], dtype=torch.float64, device=input.device)

    loss = tensor("loss")
    return {
        "loss": loss.view(target.shape) if reduction == "none" else loss,
        "lse": tensor("lse").view(target.shape),
        "grad_input": tensor("grad_input").view(input.shape),
        "grad_weight": tensor("grad_weight"),
        "grad_bias": tensor("grad_bias"),
    }


def coupling_stack_oracle(
    x1: torch.Tensor,
    x2: torch.Tensor,
    layers: list[tuple[list[torch.Tensor], list[torch.Tensor]]],
    *,
    fraction_bits: int | None = None,
    grad_y1: torch.Tensor | None = None,
    grad_y2: torch.Tensor | None = None,
) -> dict[str, Any]:
    """A stack of additive coupling layers computed by the oracle extracted from the Coq definitions.

    ``x1``, ``x2``: the halves, ``[d]`` or ``[N, d]``. ``layers``: per layer
    ``(f, g)``, each the weights ``[W1 [h, d], b1 [h], W2 [d, h], b2 [d]]`` of the tanh
    MLP ``x -> W2 tanh(W1 x + b1) + b2`` (the oracle's only residual function, written
    in its glue). A layer is ``y1 = x1 + f(x2)``, ``y2 = x2 + g(y1)``
    (``coupling_forward``, rocq/Reversible/Coupling.v).

    Float mode (``fraction_bits`` None): float64. Returns ``y1``, ``y2``
    (``stack_forward``, rocq/Reversible/Stack.v) and ``x1``, ``x2`` (``stack_inverse`` of
    that output, the reconstructed input); with ``grad_y1`` and ``grad_y2`` also
    ``grad_x1``, ``grad_x2`` and ``grad_layers`` (per layer ``(f grads, g grads)``, each
    ``[dW1, db1, dW2, db2]`` summed over the rows) from ``coupling_stack_backward``
    (rocq/Reversible/Gradient.v), which reconstructs every layer's input from the output.

    Int mode (``fraction_bits`` = k): ``x1``, ``x2`` are int64 fixed-point states
    (values times 2^k) below 2^60 in magnitude; f and g become
    ``fixed_residual 2^k round (mlp)`` (rocq/Reversible/FixedPoint.v: dequantise,
    apply in float64, scale, round half to even) and the group is Z. Returns int64
    ``y1``, ``y2``, ``x1``, ``x2``; no gradients.
    """
    exact = fraction_bits is not None
    if x1.shape != x2.shape or x1.dim() not in (1, 2) or x1.numel() == 0:
        raise ValueError(
            f"x1, x2: expected two non-empty [d] or [N, d] tensors of one shape, got "
            f"{tuple(x1.shape)} and {tuple(x2.shape)}"
        )
    if exact and (x1.dtype != torch.int64 or x2.dtype != torch.int64):
        raise TypeError("x1, x2: int mode (fraction_bits given) takes int64 fixed-point states")
    if exact and (grad_y1 is not None or grad_y2 is not None):
        raise ValueError("grad_y1, grad_y2: the oracle gives gradients in float mode only")
    if (grad_y1 is None) != (grad_y2 is None):
        raise ValueError("grad_y1, grad_y2: give both or neither")
    rows = (lambda t: t.reshape(1, -1)) if x1.dim() == 1 else (lambda t: t)

    def halves(t: torch.Tensor, name: str) -> list:
        return rows(t).tolist() if exact else _as_list(rows(t), name)

    def weights(ws: list[torch.Tensor], name: str) -> list:
        if len(ws) != 4:
            raise ValueError(f"{name}: expected [W1, b1, W2, b2], got {len(ws)} tensors")
        return [_as_list(w, f"{name}[{i}]") for i, w in enumerate(ws)]

    req: dict[str, Any] = {
        "op": "reversible",
        "mode": "int" if exact else "float",
        "x1": halves(x1, "x1"),
        "x2": halves(x2, "x2"),
        "layers": [
            {"f": weights(f, f"layers[{i}].f"), "g": weights(g, f"layers[{i}].g")} for i, (f, g) in enumerate(layers)
        ],
    }
    if exact:
        req["fraction_bits"] = int(fraction_bits)
    if grad_y1 is not None:
        req["grad_y1"] = _as_list(rows(grad_y1), "grad_y1")
        req["grad_y2"] = _as_list(rows(grad_y2), "grad_y2")
    answer = oracle_request(req)
    if "error" in answer:
        raise ValueError(f"reversible oracle: {answer['error']}")

    def tensor(value: Any) -> torch.Tensor:
        return torch.tensor(value, dtype=torch.int64 if exact else torch.float64, device=x1.device)

    result: dict[str, Any] = {name: tensor(answer[name]).view(x1.shape) for name in ("y1", "y2", "x1", "x2")}
    if grad_y1 is not None:
        result["grad_x1"] = tensor(answer["grad_x1"]).view(x1.shape)
        result["grad_x2"] = tensor(answer["grad_x2"]).view(x1.shape)
        result["grad_layers"] = [
            tuple([tensor(w) for w in layer[fn]] for fn in ("f", "g")) for layer in answer["grad_layers"]
        ]
    return result


def optimizer_update_oracle(
    rule: str,
    param: torch.Tensor,
    grad: torch.Tensor,
    *,
    lr: float,
    weight_decay: float = 0.0,
    momentum: float = 0.0,
    dampening: float = 0.0,
    nesterov: bool = False,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    state: dict[str, Any] | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """One optimizer update of one parameter computed by the oracle extracted from Coq.

    ``rule`` is ``"sgd"`` (``sgd_update`` of rocq/InBackward/UpdateRules.v:
    ``torch.optim.SGD`` with ``lr``, ``momentum``, ``dampening``, ``weight_decay``,
    ``nesterov``) or ``"adamw"`` (``adamw_update``: ``torch.optim.AdamW`` with ``lr``,
    ``betas``, ``eps``, ``weight_decay``; no amsgrad, no maximize), applied to every
    element. ``state`` is the parameter's ``torch.optim`` state (``optimizer.state[p]``):
    ``{"momentum_buffer": Tensor}`` for SGD, ``{"step", "exp_avg", "exp_avg_sq"}`` for
    AdamW; None or ``{}`` before the first step. ``momentum=0`` keeps no buffer, as torch.

    Returns the new parameter (float64, on ``param.device``) and the new state in the
    same format (``"step"`` an int; no ``"momentum_buffer"`` when ``momentum == 0``).
    """
    if rule not in ("sgd", "adamw"):
        raise ValueError(f"rule: expected 'sgd' or 'adamw', got {rule!r}")
    if param.numel() == 0 or grad.shape != param.shape:
        raise ValueError(
            f"param and grad: expected one non-empty shape, got {tuple(param.shape)} and {tuple(grad.shape)}"
        )
    state = state or {}

    def vector(name: str, t: torch.Tensor) -> list:
        if t.shape != param.shape:
            raise ValueError(f"state[{name!r}]: expected shape {tuple(param.shape)}, got {tuple(t.shape)}")
        return _as_list(t.reshape(-1), f"state[{name!r}]")

    req: dict[str, Any] = {
        "op": "in_backward",
        "rule": rule,
        "lr": float(lr),
        "weight_decay": float(weight_decay),
        "param": _as_list(param.reshape(-1), "param"),
        "grad": _as_list(grad.reshape(-1), "grad"),
    }
    if rule == "sgd":
        buf = state.get("momentum_buffer")
        req.update(
            momentum=float(momentum) if momentum != 0 else None,
            dampening=float(dampening),
            nesterov=bool(nesterov),
            state=None if buf is None else {"momentum_buffer": vector("momentum_buffer", buf)},
        )
    else:
        req.update(betas=[float(betas[0]), float(betas[1])], eps=float(eps))
        if state:
            req["state"] = {
                "step": int(state["step"]),
                "exp_avg": vector("exp_avg", state["exp_avg"]),
                "exp_avg_sq": vector("exp_avg_sq", state["exp_avg_sq"]),
            }
    answer = oracle_request(req)
    if "error" in answer:
        raise ValueError(f"in_backward oracle: {answer['error']}")

    def tensor(values: list) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.float64, device=param.device).view(param.shape)

    new_state: dict[str, Any] = {}
    for key, value in answer["state"].items():
        if value is not None:
            new_state[key] = value if key == "step" else tensor(value)
    return tensor(answer["param"]), new_state
