"""ojas_ref.tools.train_state: atomic writes, verified loads, SIGKILL in the middle of a write."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from ojas_ref.tools import train_state


def _state(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"step": seed, "model": {"w": torch.randn(64, 64, generator=g)}, "nested": [1, 2.5, "x", (3, None)]}


def _equal(a: dict, b: dict) -> bool:
    return a["step"] == b["step"] and torch.equal(a["model"]["w"], b["model"]["w"]) and a["nested"] == b["nested"]


def test_round_trip(tmp_path: Path) -> None:
    path = train_state.save_state(tmp_path / "a.ckpt", _state(1))
    assert _equal(train_state.load_state(path), _state(1))
    assert not _equal(train_state.load_state(path), _state(2))  # the comparison can fail
    assert list(tmp_path.iterdir()) == [path]  # no temporary left


@pytest.mark.parametrize("keep", [0, 7, 100, -1])
def test_truncated_is_refused(tmp_path: Path, keep: int, monkeypatch: pytest.MonkeyPatch) -> None:
    path = train_state.save_state(tmp_path / "a.ckpt", _state(1))
    data = path.read_bytes()
    path.write_bytes(data[:keep] if keep >= 0 else data[: len(data) // 2])
    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("a corrupt file reached torch.load"))
    with pytest.raises(train_state.CorruptStateError, match="truncated") as info:
        train_state.load_state(path)
    assert str(path) in str(info.value)


def test_flipped_byte_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = train_state.save_state(tmp_path / "a.ckpt", _state(1))
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("a corrupt file reached torch.load"))
    with pytest.raises(train_state.CorruptStateError, match="sha256"):
        train_state.load_state(path)


def test_foreign_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "a.ckpt"
    torch.save(_state(1), path)  # a plain torch file: no header
    with pytest.raises(train_state.CorruptStateError, match="not an ojas state file"):
        train_state.load_state(path)


def test_failed_write_keeps_previous(tmp_path: Path) -> None:
    path = train_state.save_state(tmp_path / "a.ckpt", _state(1))

    def chunks():
        yield b"partial"
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        train_state.atomic_write(path, chunks())
    assert _equal(train_state.load_state(path), _state(1))
    assert list(tmp_path.iterdir()) == [path]


def test_listing_and_pruning(tmp_path: Path) -> None:
    for step in (3, 10, 7):
        train_state.save_state(train_state.state_path(tmp_path, step), _state(step))
    (tmp_path / ".step-00000011.train_state.123.tmp").write_bytes(b"half")
    assert [s for s, _ in train_state.list_states(tmp_path)] == [3, 7, 10]
    assert train_state.latest_state(tmp_path) == train_state.state_path(tmp_path, 10)
    assert train_state.prune_states(tmp_path, 2) == [train_state.state_path(tmp_path, 3)]
    assert [p.name for p in train_state.remove_temporaries(tmp_path)] == [".step-00000011.train_state.123.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000007.ckpt", "step-00000010.ckpt"]
    with pytest.raises(ValueError, match="keep"):
        train_state.prune_states(tmp_path, 0)


# The writer, in a subprocess: checkpoint 1 written whole, then checkpoint 2 stopped (it prints
# READY and sleeps until killed) either half-way through writing the temporary file, or after
# its fsync and before the rename.
_WRITER = textwrap.dedent("""
    import sys
    import torch
    from ojas_ref.tools import train_state

    directory, where = sys.argv[1], sys.argv[2]
    sys.path.insert(0, sys.argv[3])
    from _half_writer import hang, stop_half_way
    def state(seed):
        w = torch.randn(64, 64, generator=torch.Generator().manual_seed(seed))
        return {"step": seed, "model": {"w": w}, "nested": [1, 2.5, "x", (3, None)]}
    train_state.save_state(train_state.state_path(directory, 1), state(1))

    if where == "mid-write":  # the payload: half of it reaches the disk
        stop_half_way()
    else:
        train_state.os.replace = lambda src, dst: hang()
    train_state.save_state(train_state.state_path(directory, 2), state(2))
""")


@pytest.mark.parametrize("where", ["mid-write", "before-rename"])
def test_sigkill_while_writing_keeps_previous(tmp_path: Path, where: str) -> None:
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(tmp_path), where, str(Path(__file__).parents[1])],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout.readline().strip() == "READY"
        temporaries = [p for p in tmp_path.iterdir() if p.name.endswith(train_state.TEMP_SUFFIX)]
        assert len(temporaries) == 1 and temporaries[0].stat().st_size > 0  # killed with a partial file there
        os.kill(writer.pid, signal.SIGKILL)
    finally:
        writer.kill()
        writer.wait(timeout=30)
    assert writer.returncode == -signal.SIGKILL
    assert train_state.latest_state(tmp_path) == train_state.state_path(tmp_path, 1)
    assert _equal(train_state.load_state(train_state.latest_state(tmp_path)), _state(1))
    if where == "mid-write":  # the temporary is half a file, refused if loaded by name
        with pytest.raises(train_state.CorruptStateError, match="truncated"):
            train_state.load_state(temporaries[0])
    else:  # complete but never renamed: not picked, though it is checkpoint 2
        assert _equal(train_state.load_state(temporaries[0]), _state(2))
    assert train_state.remove_temporaries(tmp_path) == temporaries


def test_lock_directory_refuses_a_second_holder(tmp_path: Path) -> None:
    """One holder at a time, in this process or another; the lock file names the holder, and the
    lock goes with the holder (released on exit, also when the holder is killed)."""
    with train_state.lock_directory(tmp_path, what="--out-dir") as lock:
        assert lock == tmp_path / ".lock" and lock.read_text() == f"{os.getpid()}\n"
        with pytest.raises(
            train_state.DirectoryLocked,
            match=rf"^--out-dir {re.escape(repr(str(tmp_path)))} is in use by "
            rf"another run \(process {os.getpid()} holds",
        ):
            with train_state.lock_directory(tmp_path, what="--out-dir"):
                pass
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import time
        from ojas_ref.tools import train_state
        with train_state.lock_directory({str(tmp_path)!r}):
            print("READY", flush=True)
            time.sleep(600)
        """),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "READY"
        with pytest.raises(train_state.DirectoryLocked, match=f"process {holder.pid} holds"):
            with train_state.lock_directory(tmp_path):
                pass
    finally:
        holder.kill()  # SIGKILL: the kernel releases the lock
        holder.wait(timeout=30)
    with train_state.lock_directory(tmp_path):
        assert [p.name for p in tmp_path.iterdir()] == [".lock"]
