"""Logging setup shared by the console scripts (`qaslr`, `indexer`), and the redaction the search
service applies to everything it logs.

``configure_logging(level)`` is the plain setup. ``configure_logging(level, redact=Redactor(...))``
additionally rewrites every formatted line (messages and tracebacks alike) so that configured
secrets (API keys, a Redis password) become ``***`` and filesystem paths lose their directories
(``/data/index/v2/meta.sqlite`` -> ``.../meta.sqlite``): the service's log never names where
things live on disk, nor a key.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable

from core.errors import strip_paths

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class Redactor:
    """Removes secrets and filesystem paths from text."""

    def __init__(self, secrets: Iterable[str] = (), paths: Iterable[str] = ()):
        self.secrets = sorted({s for s in secrets if s and len(s) >= 3}, key=len, reverse=True)
        # configured paths may be relative ("data/idx"): replace them literally, longest first
        self.paths = sorted({p.rstrip("/") for p in paths if p and p.strip("/")}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "***")
        for path in self.paths:
            text = text.replace(path, f".../{path.rstrip('/').rsplit('/', 1)[-1]}")
        return strip_paths(text)


class RedactingFormatter(logging.Formatter):
    def __init__(self, redact: Redactor, fmt: str = FORMAT):
        super().__init__(fmt)
        self.redact = redact

    def format(self, record: logging.LogRecord) -> str:
        return self.redact(super().format(record))


def configure_logging(level: str = "INFO", *, redact: Redactor | None = None) -> None:
    """Root logging at ``level``; with ``redact``, every handler of the root logger formats through
    it (installed handlers included, so a second call upgrades a plain setup)."""
    logging.basicConfig(level=getattr(logging, str(level).upper(), logging.INFO), format=FORMAT)
    root = logging.getLogger()
    root.setLevel(getattr(logging, str(level).upper(), logging.INFO))
    if redact is not None:
        for handler in root.handlers:
            handler.setFormatter(RedactingFormatter(redact))
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)  # its CPU-feature probing is noise


def redact_output(redact: Redactor, fds: tuple[int, ...] = (1, 2)):
    """Route this process's stdout and stderr *file descriptors* through ``redact``, line by line,
    so that output written below Python's logging (native libraries such as decord print errors
    with file paths straight to fd 2) is redacted too. Returns ``restore()``, which puts the
    original descriptors back and waits for the pending output to be written."""
    import os
    import sys
    import threading

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    pumps = []
    for fd in fds:
        original = os.dup(fd)
        read_end, write_end = os.pipe()
        os.dup2(write_end, fd)
        os.close(write_end)
        pump = threading.Thread(
            target=_pump, args=(read_end, original, redact), name=f"redact-fd{fd}", daemon=True
        )
        pump.start()
        pumps.append((fd, original, pump))

    def restore() -> None:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        for fd, original, _ in pumps:
            os.dup2(original, fd)  # the pipe loses its last writer: the pump sees the end
        for _, original, pump in pumps:
            pump.join(5)
            os.close(original)

    return restore


def _pump(read_end: int, out: int, redact: Redactor) -> None:
    import os
    import re

    pending = b""
    with os.fdopen(read_end, "rb", buffering=0) as src:
        while True:
            chunk = src.read(1 << 16)
            if not chunk:
                break
            pending += chunk
            parts = re.split(rb"(?<=[\r\n])", pending)
            pending = parts.pop()  # the unfinished line (b"" after a newline)
            if len(pending) > 1 << 16:  # a very long line: pass it on in pieces
                parts.append(pending)
                pending = b""
            for part in parts:
                _write(out, redact(part.decode("utf-8", "replace")).encode("utf-8"))
        if pending:
            _write(out, redact(pending.decode("utf-8", "replace")).encode("utf-8"))


def _write(fd: int, data: bytes) -> None:
    import os

    with contextlib.suppress(OSError):  # a closed terminal must not block the writers
        while data:
            data = data[os.write(fd, data) :]
