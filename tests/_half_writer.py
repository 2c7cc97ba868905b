"""The fault tests' writer stop (tests/tools/test_train_state.py, tests/tools/test_train.py), imported by
their subprocesses: ``ojas_ref.tools.train_state``'s ``open`` replaced so that the payload of the
chosen checkpoint reaches the disk half, then the process prints READY and sleeps until
the test SIGKILLs it."""

from __future__ import annotations

import builtins
import os
import time

from ojas_ref.tools import train_state


def hang() -> None:
    print("READY", flush=True)
    time.sleep(600)


class HalfWriter:
    """A binary file whose first large write (the payload) lands half, fsynced, then hangs."""

    def __init__(self, f) -> None:
        self.f = f

    def __enter__(self) -> "HalfWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.f.close()

    def fileno(self) -> int:
        return self.f.fileno()

    def flush(self) -> None:
        self.f.flush()

    def write(self, chunk) -> int:
        if len(chunk) > 1000:
            self.f.write(bytes(chunk)[: len(chunk) // 2])
            self.f.flush()
            os.fsync(self.f.fileno())
            hang()
        return self.f.write(chunk)


def stop_half_way(name_part: str = "") -> None:
    """Make the checkpoint files whose path contains ``name_part`` stop half-written."""
    train_state.open = lambda path, mode: (
        HalfWriter(builtins.open(path, mode)) if name_part in str(path) else builtins.open(path, mode)
    )
