"""Triton kernels of ojas-ref (package ``ojas_kernels``)."""

from .attention import AttentionConfig, KernelConfig, default_config, flash_attention, flash_attention_forward

__all__ = ["AttentionConfig", "KernelConfig", "default_config", "flash_attention", "flash_attention_forward"]
