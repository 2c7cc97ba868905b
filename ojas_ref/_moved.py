"""The module paths of release 0.1, kept for one release as deprecated aliases of their new
homes: importing one warns (``DeprecationWarning``) and gives the new module itself."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType
from typing import Optional, Sequence

#: old module path -> new module path
MOVED = {
    "ojas_ref.primitives": "ojas_ref.functional",
    **{
        f"ojas_ref.primitives.{m}": f"ojas_ref.functional.{m}"
        for m in (
            "attention",
            "linear_cross_entropy",
            "rms_norm",
            "swiglu",
            "relu",
            "rope",
            "dispatch",
            "autocast",
            "transforms",
        )
    },
    "ojas_ref.primitives.reversible": "ojas_ref.nn.reversible",
    "ojas_ref.primitives.optimizer_in_backward": "ojas_ref.optim.in_backward",
    "ojas_ref.integrations.block_coordinate": "ojas_ref.optim.block_coordinate",
    "ojas_ref.integrations.modules": "ojas_ref.nn.modules",
    "ojas_ref.integrations.offload": "ojas_ref.nn.offload",
    "ojas_ref.integrations.reversible_decoder": "ojas_ref.nn.reversible_decoder",
    "ojas_ref.integrations.optimize": "ojas_ref.integrations.hf.optimize",
    "ojas_ref.integrations.huggingface": "ojas_ref.integrations.hf",
    "ojas_ref.tools.checkpoint": "ojas_ref.tools.train_state",
    "ojas_ref.verification.lce_error": "ojas_ref.verification.linear_cross_entropy_error",
    "ojas_ref.verification.optimizer_in_backward_check": "ojas_ref.verification.in_backward_check",
}


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(
        self, fullname: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None
    ) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = MOVED[spec.name]
        warnings.warn(
            f"{spec.name} is deprecated and will be removed in the next release; import {new}",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the new module is already imported."""


def install() -> None:
    """Put the alias finder on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.insert(0, _Alias())
