"""Logging setup shared by the console scripts (`qaslr`, `indexer`)."""

from __future__ import annotations

import logging


def configure_logging(level: str = "INFO") -> None:
    logging.basicConfig(
        level=getattr(logging, str(level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)  # its CPU-feature probing is noise
