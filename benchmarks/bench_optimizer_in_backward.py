"""Renamed benchmarks/bench_in_backward.py (issue 31 item 2): this module re-exports what the
benchmarks that still import it by the old name use, with a ``DeprecationWarning``; delete it
once they import ``benchmarks.bench_in_backward``."""

import sys
import warnings

if __name__ == "__main__":
    sys.exit("benchmarks/bench_optimizer_in_backward.py is renamed: run benchmarks/bench_in_backward.py")

from benchmarks.bench_in_backward import (  # noqa: E402, F401
    DTYPES,
    OPTIMIZERS,
    QUICK,
    Config,
    add_common_arguments,
    gib,
    sync,
)

warnings.warn(
    "benchmarks.bench_optimizer_in_backward is deprecated: import benchmarks.bench_in_backward",
    DeprecationWarning,
    stacklevel=2,
)
