"""Client of the attention oracle extracted from the Coq spec.

The oracle (``extraction/_build/ojas-oracle``, built by ``make -C extraction``)
runs, in float64, the definitions of ``rocq/Attention/OnlineSoftmax.v``
(``attention_forward``: ``stream_row`` = ``finalize`` of ``stream`` =
``block_step`` over ``chunk``; ``attention_two_pass``: ``two_pass``;
``visibility``) and ``rocq/Attention/Backward.v`` (``attention_backward``),
extracted to OCaml.  It speaks the JSON-lines protocol of
``extraction/README.md``; this module broadcasts masks, repeats key/value heads
for grouped-query attention and sums their gradients, which the oracle does not
do itself.
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

__all__ = ["attention_oracle", "oracle_binary", "oracle_request"]

_DEFAULT_BINARY = Path(__file__).resolve().parent.parent / "extraction" / "_build" / "ojas-oracle"


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
        self.proc = subprocess.Popen(
            [str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

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
    is boolean, broadcastable to ``[B, Hq, Sq, Sk]``, ``True`` = takes part;
    ``is_causal`` keeps key ``j`` for query ``i`` iff ``j <= i`` (Coq
    ``causal``); with ``enable_gqa`` key/value head ``h // (Hq/Hkv)`` serves
    query head ``h``.  ``window`` keeps keys with ``|i - j| < window``
    (``in_window``); the requested masks are combined by conjunction
    (``visibility``; unlike torch, ``attn_mask`` and ``is_causal`` may be
    given together).  ``block_size`` is the key tile of ``chunk``.

    Returns float64 tensors on ``query.device``: ``out``/``lse`` from
    ``attention_forward`` (``rocq/Attention/OnlineSoftmax.v``; lse = -inf and
    out = 0 for a fully masked row), ``out_two_pass``/``lse_two_pass`` from
    ``attention_two_pass``, and, when ``grad_out`` is given,
    ``grad_query``/``grad_key``/``grad_value`` from ``attention_backward``
    (``rocq/Attention/Backward.v``) fed with the streamed ``out`` and ``lse``.
    Over the reals, ``out``/``lse`` equal ``out_two_pass``/``lse_two_pass``
    (``attention_forward_correct``, ``rocq/Attention/StreamCorrect.v``); here
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
    groups = 1
    if hkv != hq:
        if not enable_gqa or hq % hkv != 0:
            raise ValueError(
                f"key/value have {hkv} heads and query {hq}: pass enable_gqa=True with query heads a multiple of key heads"
            )
        groups = hq // hkv
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
    mask = None
    if attn_mask is not None:
        if attn_mask.dtype != torch.bool:
            raise TypeError(
                f"attn_mask: only boolean masks are supported by the oracle (got {attn_mask.dtype}); "
                "float (additive) masks are not"
            )
        mask = torch.broadcast_to(attn_mask, (b, hq, sq, sk)).tolist()
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
        result["grad_query"] = tensor("grad_query")
        for name in ("grad_key", "grad_value"):
            g = tensor(name)
            result[name] = g.unflatten(1, (hkv, groups)).sum(2)
    return result
