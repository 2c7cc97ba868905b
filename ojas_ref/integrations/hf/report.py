"""What :func:`ojas_ref.optimize_model` did: :class:`OptimizationReport`, a list of the modules it
changed (:class:`Change`, with the theorems behind each and what they do not cover) and left alone
(:class:`LeftAlone`, with the reason), printed as a summary of a few lines at any depth."""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from ojas_ref._deprecation import renamed_keyword
from ojas_ref.functional.dispatch import plain_kernel_call

__all__ = ["REPORT_WIDTH", "Change", "LeftAlone", "OptimizationReport"]


@dataclass(frozen=True)
class Change:
    """A module that :func:`ojas_ref.optimize_model` changed; ``kind``: the primitive that computes
    it now (a name of :data:`ojas_ref.functional.dispatch.PRIMITIVES`), or "" for a change without a
    kernel (checkpointing, sparse embedding)."""

    module: str
    what: str
    theorems: tuple[str, ...] = ()
    not_covered: str = ""
    kind: str = ""


@dataclass(frozen=True)
class LeftAlone:
    """A module that ``optimize_model`` did not change, and why."""

    module: str
    reason: str


#: the width that ``str(report)`` clips its lines to
REPORT_WIDTH = 120


def _clip(line: str) -> str:
    return line if len(line) <= REPORT_WIDTH else line[: REPORT_WIDTH - 3] + "..."


def _name_patterns(names: list[str]) -> str:
    """Module names with their indices as ``*`` (``model.layers.*.mlp``), each pattern once."""
    return ", ".join(dict.fromkeys(re.sub(r"(?<=\.)\d+(?=\.|$)", "*", n) for n in names))


def _grouped(items: list[tuple[str, str]]) -> list[str]:
    """``(key, module)`` pairs as two lines per key: the count and the key, the module-name patterns."""
    groups: dict[str, list[str]] = {}
    for key, module in items:
        groups.setdefault(key, []).append(module)
    return [
        line
        for key, names in groups.items()
        for line in (_clip(f"    {len(names):>4} x {key}"), _clip(f"           {_name_patterns(names)}"))
    ]


@dataclass
class OptimizationReport:
    """What :func:`ojas_ref.optimize_model` did. ``print(report)``: a summary of a few lines for any depth
    (the changes grouped, with counts; what runs on the model's device); :meth:`details`: every
    module with its theorems and what they do not cover."""

    changed: list[Change] = field(default_factory=list)
    left_alone: list[LeftAlone] = field(default_factory=list)
    #: bytes not allocated per training token by the loss (the logits, their float32
    #: copy and their gradient that the standard loss holds at its peak); 0 if unchanged
    loss_bytes_saved_per_token: int = 0
    notes: list[str] = field(default_factory=list)
    #: what :meth:`plan` plans: (the planner's model, the Setting fields this call fixed: dtype,
    #: the ojas kernels applied, checkpointing, its split), or None and ``unplanned`` says why
    planned: Optional[tuple[Any, dict]] = None
    unplanned: str = "the planner models Hugging Face Llama-shaped decoders, not plain models"
    #: (device, dtype) of the model's first parameter at the call; :meth:`runs` reads the model's
    #: own while it is alive (``_model``, a weak reference, not copied with the report)
    placement: Optional[tuple[torch.device, torch.dtype]] = None
    _model: Optional[weakref.ref] = field(default=None, repr=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_model": None}

    @renamed_keyword("fused", "in_backward", "OptimizationReport.plan")
    def plan(
        self,
        *,
        optimizer: str = "adamw",
        in_backward: bool = True,
        batch: int = 1,
        seq: int = 2048,
        host_state: bool = False,
        head_update: bool = False,
        state_slice_mb: Optional[float] = None,
        bucket_cap_mb: float = 64.0,
    ) -> Any:
        """The peak of device memory per tensor class of a training step of the optimized model
        (:func:`ojas_ref.tools.plan.plan`, an :class:`ojas_ref.tools.plan.Plan`; ``.table()`` is its
        readable breakdown), with what this call applied and the rest of the setting given here
        (``in_backward``: the update in :class:`ojas_ref.InBackwardOptimizer`, ``fused`` in release
        0.1, a deprecated alias that warns; ``host_state``: its
        ``state_device="cpu"``; ``head_update``: its ``head_weight``; ``state_slice_mb``, with
        ``host_state``: its ``state_slice_mb``, default None as its default: whole parameters;
        ``bucket_cap_mb``: its ``bucket_cap_mb``).
        ``NotImplementedError`` with the reason for a model the planner does not model (not a
        Llama-shaped decoder, sparse embedding, ...)."""
        from ojas_ref import memory as P

        if self.planned is None:
            raise NotImplementedError(f"report.plan(): {self.unplanned}")
        model, fields = self.planned
        setting = P.Setting(
            optimizer=optimizer,
            in_backward=in_backward,
            batch=batch,
            seq=seq,
            host_state=host_state,
            head_update=head_update,
            state_slice_mb=state_slice_mb if host_state else None,
            bucket_cap_mb=bucket_cap_mb,
            **fields,
        )
        return P.plan(model, setting)

    def runs(self) -> str:
        """What computes the changed modules on the model's device and dtype now: the Triton
        kernels (CUDA, float16 / bfloat16 / float32, or the CPU under ``TRITON_INTERPRET=1`` with
        ``impl="triton"``: :class:`ojas_ref.functional.dispatch.use_impl` or ``OJAS_<NAME>_IMPL``), or
        the PyTorch reference implementations, per primitive."""
        kinds = list(dict.fromkeys(c.kind for c in self.changed if c.kind))
        if not kinds:
            return "nothing that has a Triton kernel was changed"
        model = self._model() if self._model is not None else None
        param = next(model.parameters(), None) if model is not None else None
        device, dtype = (param.device, param.dtype) if param is not None else self.placement or (None, None)
        if device is None:
            return "unknown (the model has no parameters)"
        if device.type == "meta":
            return f"nothing (the model is on the meta device), {dtype}"
        probe = torch.empty(0, dtype=dtype, device=device)
        kernel = [k for k in kinds if plain_kernel_call(k, probe)]
        reference = [k for k in kinds if k not in kernel]
        where = f"on {device}, {str(dtype).removeprefix('torch.')}: "
        if not kernel:
            return where + "the PyTorch reference implementations (Triton kernels: CUDA, float16/bfloat16/float32)"
        if not reference:
            return where + "the Triton kernels"
        return where + f"Triton kernels for {', '.join(kernel)}; PyTorch reference for {', '.join(reference)}"

    def _tail(self) -> list[str]:
        lines = []
        if self.loss_bytes_saved_per_token:
            lines.append(
                f"  expected: {self.loss_bytes_saved_per_token} bytes of logits and their gradient not "
                f"allocated per training token ({self.loss_bytes_saved_per_token * 4096 / 2**20:.0f} MiB "
                "at 4096 tokens)"
            )
        lines += [f"  note: {n}" for n in self.notes]
        if self.planned is None:
            lines.append(f"  plan: none ({self.unplanned})")
        else:
            p = self.plan()
            lines += [
                f"  plan (batch 1 x 2048, AdamW in InBackwardOptimizer): peak {p.peak / 2**30:.2f} GiB "
                f"at {p.peak_phase.name}",
                "        report.plan(optimizer=..., batch=..., seq=...).table(): the breakdown of another setting",
            ]
        return lines

    def __str__(self) -> str:
        lines = [
            f"optimize_model: {len(self.changed)} module(s) changed, {len(self.left_alone)} left alone "
            "(report.details(): each, with its theorems)",
            f"  runs {self.runs()}",
        ]
        if self.changed:
            lines += ["  changed:"] + _grouped([(c.what, c.module) for c in self.changed])
        if self.left_alone:
            lines += ["  left alone:"] + _grouped([(s.reason, s.module) for s in self.left_alone])
        return "\n".join(_clip(line) for line in lines + self._tail())

    def details(self) -> str:
        """Every module changed, with the theorems behind it and what they do not cover, and every
        candidate left alone with the reason; one line each."""
        lines = [
            f"optimize_model: {len(self.changed)} module(s) changed, {len(self.left_alone)} left alone",
            f"  runs {self.runs()}",
        ]
        lines += [
            f"  changed  {c.module}: {c.what}"
            + (f" [{', '.join(c.theorems)}]" if c.theorems else "")
            + (f"; not proved: {c.not_covered}" if c.not_covered else "")
            for c in self.changed
        ]
        lines += [f"  left     {s.module}: {s.reason}" for s in self.left_alone]
        return "\n".join(lines + self._tail())
