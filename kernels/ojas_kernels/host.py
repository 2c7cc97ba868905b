"""Host-side integer helpers for the kernels' launch code.

``triton.cdiv`` and ``triton.next_power_of_2`` are Triton constexpr functions in recent
releases: called from Python each goes through Triton's argument unwrapping (several
microseconds a call, measured with cProfile on the CPU, triton 3.9), and the launch code
calls them at every forward and backward.  These are the same integer functions in plain
Python.
"""

from __future__ import annotations

__all__ = ["cdiv", "next_power_of_2"]


def cdiv(x: int, y: int) -> int:
    """``ceil(x / y)`` for ints, ``y > 0``."""
    return -(-x // y)


def next_power_of_2(n: int) -> int:
    """The smallest power of two ``>= n`` for ``n >= 1`` (0 for 0), as ``triton.next_power_of_2``."""
    return 0 if n == 0 else 1 << (n - 1).bit_length()
