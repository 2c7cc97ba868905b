"""Triton kernels of ojas-ref (package ``ojas_kernels``).

The names below are :mod:`ojas_kernels.attention`'s, imported at their first use, so that
``ojas_kernels.host`` (the operators' registration, which ``ojas_ref`` imports) loads without
Triton."""

from __future__ import annotations

import importlib

__all__ = ["AttentionConfig", "KernelConfig", "default_config", "flash_attention", "flash_attention_forward"]


def __getattr__(name: str) -> object:
    if name in __all__:
        return getattr(importlib.import_module(".attention", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
