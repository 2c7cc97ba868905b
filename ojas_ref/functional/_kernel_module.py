"""An ``ojas_kernels`` module imported at its first kernel call (``ojas_ref`` imports without
Triton), with its autograd function's ``apply`` without torch's Python wrapper."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any, Callable

import torch

__all__ = ["KernelModule"]


class KernelModule:
    """``ojas_kernels.<name>``, imported by :meth:`load`, which also sets :attr:`apply` to
    ``function``'s apply (``ojas_kernels.host.function_apply``: no Python wrapper where no
    torch.func transform is active)."""

    __slots__ = ("_name", "_function", "_module", "apply")

    def __init__(self, name: str, function: type[torch.autograd.Function]) -> None:
        self._name = name
        self._function = function
        self._module: ModuleType | None = None
        self.apply: Callable[..., Any] | None = None

    def load(self) -> ModuleType:
        """The kernel module, imported (and :attr:`apply` set) at the first call."""
        if self._module is None:
            from ojas_kernels.host import function_apply

            module = importlib.import_module(f"ojas_kernels.{self._name}")
            self.apply = function_apply(self._function)
            self._module = module
        return self._module
