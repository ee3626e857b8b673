"""Logging setup shared by the console scripts (`qaslr`, `indexer`), and the redaction the search
service applies to everything it logs.

``configure_logging(level)`` is the plain setup. ``configure_logging(level, redact=Redactor(...))``
additionally rewrites every formatted line (messages and tracebacks alike) so that configured
secrets (API keys, a Redis password) become ``***`` and filesystem paths lose their directories
(``/data/index/v2/meta.sqlite`` -> ``.../meta.sqlite``): the service's log never names where
things live on disk, nor a key.
"""

from __future__ import annotations

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
