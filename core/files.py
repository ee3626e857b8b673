"""Atomic file writes: the one place that writes a file so that a reader (or a crash) never sees
half of it.

Every writer in the project goes through :func:`atomic_path` (or its two shorthands): the data goes
to a temporary file in the destination's own directory, which is flushed and fsynced, renamed over
the destination (``os.replace``, atomic on POSIX), and then the directory itself is fsynced so that
the rename survives a power loss. On any error the temporary file is removed and the destination is
left as it was.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

TMP_SUFFIX = ".tmp"  # temporary files are ".<name>.<random>.tmp"; writers may sweep leftovers


def fsync_dir(directory: str | os.PathLike) -> None:
    """Make a rename or a new file in ``directory`` durable (best effort where unsupported)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """``with atomic_path(dest) as tmp: write(tmp)``: for writers that want a path (``torch.save``,
    safetensors). On a clean exit ``tmp`` is fsynced and renamed to ``dest`` and the directory is
    fsynced; on an exception ``tmp`` is deleted and the exception propagates."""
    dest = Path(path)
    fd, name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=TMP_SUFFIX)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        _fsync_file(tmp)
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(dest.parent)


@contextlib.contextmanager
def atomic_open(
    path: str | os.PathLike, mode: str = "wb", *, encoding: str | None = None
) -> Iterator[IO[Any]]:
    """``with atomic_open(dest, "w") as f: f.write(...)``: a file object whose content replaces
    ``dest`` atomically when the block ends without an exception."""
    if not mode.startswith("w"):
        raise ValueError(f"atomic_open writes a whole file; mode must start with 'w', got {mode!r}")
    if "b" not in mode and encoding is None:
        encoding = "utf-8"
    with atomic_path(path) as tmp, open(tmp, mode, encoding=encoding) as f:
        yield f
        f.flush()


def atomic_write(path: str | os.PathLike, data: bytes | str) -> None:
    """Replace ``path`` with ``data`` (bytes, or text written as UTF-8) atomically and durably."""
    with atomic_open(path, "wb") as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)
