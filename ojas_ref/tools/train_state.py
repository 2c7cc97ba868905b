"""Training-state files (``ojas train``'s model, optimizer, step, RNG and loader state, in
``<out_dir>/state/``) that are written atomically and verified before they are loaded.

A state file is one file, ``MAGIC | payload | payload length (u64) | sha256(MAGIC | payload | length)``,
where the payload is ``torch.save`` of a dict. :func:`atomic_write` writes it to a temporary
file in the same directory, flushes, ``os.fsync``s it, ``os.replace``s it onto the final name
and ``fsync``s the directory: after a crash (SIGKILL, power loss) the final name holds either
the previous file or the complete new one, never a part. :func:`load_state` checks the
magic, the length and the checksum before unpickling anything (``weights_only=True``), so a
truncated or corrupted file is refused with :class:`CorruptStateError`, never loaded partly.
Saving and loading hold the whole payload in host memory (about 13 GB for a 1B-parameter
model with float32 AdamW state).

:func:`lock_directory` holds an exclusive ``fcntl.flock`` on a lock file in a run's directory
for as long as the run writes there: a second run into it fails at once with
:class:`DirectoryLocked` (naming the directory and the holder's pid) instead of interleaving
its files with the first's. The kernel drops the lock when the holder exits, killed or not.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import os
import re
import struct
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

import torch

__all__ = [
    "CorruptStateError",
    "DirectoryLocked",
    "atomic_write",
    "latest_state",
    "list_states",
    "load_state",
    "lock_directory",
    "prune_states",
    "remove_temporaries",
    "save_state",
    "state_path",
]

MAGIC = b"OJASCKP1"
_LENGTH = struct.Struct("<Q")
_DIGEST_BYTES = hashlib.sha256().digest_size
TEMP_SUFFIX = ".tmp"
_NAME = re.compile(r"step-(\d{8,})\.ckpt")
#: the lock file :func:`lock_directory` creates in the directory it locks
LOCK_NAME = ".lock"


class CorruptStateError(ValueError):
    """A training-state file that is truncated, corrupted or not a state file at all."""


class DirectoryLocked(ValueError):
    """Another process holds the lock of the directory (:func:`lock_directory`)."""


@contextlib.contextmanager
def lock_directory(directory: Path | str, what: str = "directory") -> Iterator[Path]:
    """Hold an exclusive, non-blocking ``fcntl.flock`` on ``directory/.lock`` (created if absent,
    never deleted) while the ``with`` block runs; the lock file records the holder's pid.
    Raises :class:`DirectoryLocked`, naming the directory (as ``what``, e.g. an option's name)
    and the holder's pid, at once when another process holds it. Yields the lock file's path."""
    path = Path(directory) / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise DirectoryLocked(
                f"{what} {str(directory)!r} is in use by another run (process {holder} holds {path}); "
                "wait for it to end or use another directory"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield path
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (POSIX; a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path | str, chunks: Iterable[bytes]) -> Path:
    """Write the concatenation of ``chunks`` to ``path`` atomically: temporary file in the same
    directory, flush, fsync, ``os.replace``, fsync of the directory. Returns ``path``."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}{TEMP_SUFFIX}")
    try:
        with open(tmp, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)
    return path


def save_state(path: Path | str, state: dict[str, Any]) -> Path:
    """``torch.save(state)`` into ``path`` with length and sha256, atomically. Returns ``path``."""
    if not isinstance(state, dict):
        raise TypeError(f"state must be a dict, got {type(state).__name__}")
    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getbuffer()
    length = _LENGTH.pack(len(payload))
    digest = hashlib.sha256(MAGIC)
    digest.update(payload)
    digest.update(length)
    return atomic_write(path, [MAGIC, payload, length, digest.digest()])


def load_state(path: Path | str) -> dict[str, Any]:
    """The state saved by :func:`save_state`, after checking magic, length and sha256.

    Raises :class:`CorruptStateError` (naming the file and what is wrong) for a
    truncated, corrupted or foreign file; nothing is unpickled from such a file."""
    path = Path(path)
    data = path.read_bytes()
    trailer = _LENGTH.size + _DIGEST_BYTES
    if len(data) < len(MAGIC) + trailer or not data.startswith(MAGIC):
        raise CorruptStateError(
            f"{path} is not an ojas state file or is truncated: {len(data)} bytes, without the "
            f"{MAGIC!r} header and trailer; refusing to load it (use an earlier state file)"
        )
    body_end = len(data) - _DIGEST_BYTES
    (length,) = _LENGTH.unpack_from(data, body_end - _LENGTH.size)
    held = body_end - _LENGTH.size - len(MAGIC)
    if length != held:
        raise CorruptStateError(
            f"{path} is truncated or corrupted: its trailer records {length} payload bytes, the file holds {held}; "
            "refusing to load it (use an earlier state file)"
        )
    if hashlib.sha256(memoryview(data)[:body_end]).digest() != data[body_end:]:
        raise CorruptStateError(
            f"{path} is corrupted: the sha256 of its contents does not match the one stored in it; "
            "refusing to load it (use an earlier state file)"
        )
    payload = memoryview(data)[len(MAGIC) : body_end - _LENGTH.size]
    return torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)


def state_path(directory: Path | str, step: int) -> Path:
    """The file name of the training state after ``step`` optimizer steps."""
    return Path(directory) / f"step-{step:08d}.ckpt"


def list_states(directory: Path | str) -> list[tuple[int, Path]]:
    """``(step, path)`` of the complete state files in ``directory`` (temporaries are not
    listed), by step."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := _NAME.fullmatch(p.name))]
    return sorted(found)


def latest_state(directory: Path | str) -> Optional[Path]:
    """The state file of the highest step in ``directory``, or None."""
    found = list_states(directory)
    return found[-1][1] if found else None


def prune_states(directory: Path | str, keep: int) -> list[Path]:
    """Delete all but the ``keep`` latest state files; return the deleted paths."""
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    doomed = [p for _, p in list_states(directory)[:-keep]]
    for p in doomed:
        p.unlink()
    return doomed


def remove_temporaries(directory: Path | str) -> list[Path]:
    """Delete the temporary files that a writer killed before its rename left in ``directory``."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    stale = [p for p in directory.iterdir() if p.name.startswith(".") and p.name.endswith(TEMP_SUFFIX)]
    for p in stale:
        p.unlink()
    return stale
