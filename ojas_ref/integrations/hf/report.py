"""What :func:`ojas_ref.optimize_model` did: :class:`OptimizationReport`, a list of the modules it
changed (:class:`Change`, with the theorems behind each and what they do not cover) and left alone
(:class:`LeftAlone`, with the reason), printed as a summary of a few lines at any depth."""

from __future__ import annotations

import dataclasses
import re
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from ojas_ref.functional.dispatch import plain_kernel_call
from ojas_ref.recipe import MemoryRecipe

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


#: ``plan``'s keywords before ``recipe=`` (deprecated), with their defaults then, and the recipe
#: field each sets; ``fused`` is ``in_backward``'s name in release 0.1
_OLD_PLAN_KEYWORDS = {
    "in_backward": (True, "in_backward"),
    "host_state": (False, "state_device"),
    "head_update": (False, "head_update"),
    "state_slice_mb": (None, "state_slice_mb"),
    "bucket_cap_mb": (64.0, "bucket_cap_mb"),
}


def _recipe_of_old_keywords(recipe: MemoryRecipe, old: dict[str, Any]) -> MemoryRecipe:
    """``recipe`` with the optimizer fields that ``plan``'s deprecated keywords set (each warns),
    with their defaults then for those not given: ``in_backward=True``; ``host_state``:
    ``state_device="cpu"``; ``state_slice_mb`` only with it."""
    if "fused" in old and "in_backward" in old:
        raise TypeError("OptimizationReport.plan() got both in_backward= and its deprecated alias fused=")
    values = {name: default for name, (default, _) in _OLD_PLAN_KEYWORDS.items()}
    for name, value in old.items():
        key = "in_backward" if name == "fused" else name
        if key not in _OLD_PLAN_KEYWORDS:
            raise TypeError(f"OptimizationReport.plan() got an unexpected keyword argument {name!r}")
        warnings.warn(
            f"OptimizationReport.plan({name}=...) is deprecated and will be removed in the next release; use "
            f"recipe=dataclasses.replace(report.recipe, {_OLD_PLAN_KEYWORDS[key][1]}=...)",
            DeprecationWarning,
            stacklevel=3,
        )
        values[key] = value
    host = values["host_state"]
    return dataclasses.replace(
        recipe,
        in_backward=values["in_backward"],
        state_device="cpu" if host else None,
        state_slice_mb=values["state_slice_mb"] if host else None,
        head_update=values["head_update"],
        bucket_cap_mb=values["bucket_cap_mb"],
    )


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
    #: the recipe the call applied (its keywords included)
    recipe: MemoryRecipe = field(default_factory=MemoryRecipe)
    #: what :meth:`plan` plans: (the planner's model, the weights' dtype, the model fields of the
    #: recipe as applied: a primitive left alone everywhere is False), or None and ``unplanned`` says why
    planned: Optional[tuple[Any, torch.dtype, dict[str, bool]]] = None
    unplanned: str = "the planner models Hugging Face Llama-shaped decoders, not plain models"
    #: (device, dtype) of the model's first parameter at the call; :meth:`runs` reads the model's
    #: own while it is alive (``_model``, a weak reference, not copied with the report)
    placement: Optional[tuple[torch.device, torch.dtype]] = None
    _model: Optional[weakref.ref] = field(default=None, repr=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_model": None}

    def plan(
        self,
        recipe: Optional[MemoryRecipe] = None,
        *,
        optimizer: str = "adamw",
        batch: int = 1,
        seq: int = 2048,
        **deprecated: Any,
    ) -> Any:
        """The peak of device memory per tensor class of a training step of the optimized model
        (:func:`ojas_ref.memory.plan`, an :class:`ojas_ref.memory.Plan`; ``.table()`` is its
        readable breakdown) in the weights' dtype, with ``recipe`` (default :attr:`recipe`, the
        call's) and ``optimizer`` (``"adamw"`` or ``"sgd"``), ``batch`` sequences of ``seq`` tokens.

        ``recipe``'s model fields must be :attr:`recipe`'s (the model is planned as the call
        optimized it; a primitive it left alone everywhere is planned as off); its optimizer
        fields are free: e.g. ``report.plan(dataclasses.replace(report.recipe, in_backward=True))``.
        The keywords before ``recipe`` (``in_backward`` / ``fused``, ``host_state``,
        ``head_update``, ``state_slice_mb``, ``bucket_cap_mb``, with ``in_backward=True`` their
        default) are deprecated aliases that warn. ``NotImplementedError`` with the reason for a
        model the planner does not model (not a Llama-shaped decoder, sparse embedding, ...)."""
        from ojas_ref import memory as P

        if recipe is not None and deprecated:
            raise TypeError(
                f"OptimizationReport.plan() got recipe= and the deprecated {', '.join(deprecated)}=: pass recipe only"
            )
        if recipe is None:
            recipe = self.recipe
            if deprecated:
                recipe = _recipe_of_old_keywords(recipe, deprecated)
        elif not isinstance(recipe, MemoryRecipe):
            raise TypeError(f"recipe must be an ojas_ref.MemoryRecipe or None, got {type(recipe).__name__}")
        differ = [
            f"{name}={value!r} (report.recipe: {self.recipe.model_options()[name]!r})"
            for name, value in recipe.model_options().items()
            if value != self.recipe.model_options()[name]
        ]
        if differ:
            raise ValueError(
                f"recipe: {', '.join(differ)}; report.plan plans the model as optimize_model optimized it, so its "
                "model fields are report.recipe's: pass dataclasses.replace(report.recipe, in_backward=..., ...), "
                "or plan another setting with ojas_ref.memory.plan"
            )
        if self.planned is None:
            raise NotImplementedError(f"report.plan(): {self.unplanned}")
        model, dtype, applied = self.planned
        if recipe.head_update and not applied["linear_cross_entropy"]:
            raise ValueError(
                "recipe: head_update=True, but optimize_model left the loss alone (report.left_alone says why): "
                "the head is updated inside ojas linear cross-entropy"
            )
        setting = P.Setting(
            recipe=dataclasses.replace(recipe, **applied), dtype=dtype, optimizer=optimizer, batch=batch, seq=seq
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
            sgd = self.recipe.head_update  # the head update is plain SGD's
            step = f"{'SGD' if sgd else 'AdamW'}{' in InBackwardOptimizer' if self.recipe.in_backward else ''}"
            try:
                p = self.plan(optimizer="sgd" if sgd else "adamw")
            except (NotImplementedError, ValueError) as err:  # a recipe field the planner does not model
                lines.append(f"  plan ({step}): none ({err})")
            else:
                lines += [
                    f"  plan (batch 1 x 2048, report.recipe, {step}): peak {p.peak / 2**30:.2f} GiB at "
                    f"{p.peak_phase.name}",
                    "        report.plan(recipe, optimizer=..., batch=..., seq=...).table(): the breakdown of "
                    "another setting",
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
