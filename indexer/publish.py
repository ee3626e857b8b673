"""Point a stable path (e.g. ``/data/index/current``) at a finished index directory, atomically.

The API reads the stable path; upgrading an index is: build a new directory beside the old one,
``indexer publish NEW --link current``, then SIGHUP or ``POST /admin/reload-index`` the API. The
symlink is replaced by one ``rename`` (atomic on POSIX), so a reader sees the old index or the new
one, never a mix. The link target is stored relative when both live in one tree, so it stays valid
when the volume is mounted elsewhere (containers)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

logger = logging.getLogger(__name__)


class PublishError(RuntimeError):
    """The index cannot be published at that link."""


def publish(index_dir: str | os.PathLike, link: str | os.PathLike) -> Path:
    """Check that ``index_dir`` opens as an index, then make ``link`` a symlink to it."""
    from indexer.store import IndexReader

    index_dir = Path(index_dir).resolve()
    IndexReader(index_dir).close()  # refuses a missing, incomplete or corrupt index
    link = Path(link)
    if link.exists() and not link.is_symlink():
        raise PublishError(
            f"{link} exists and is not a symlink; move it aside (e.g. to {link.name}-v1), publish it, then publish the new index"
        )
    link.parent.mkdir(parents=True, exist_ok=True)
    parent = link.parent.resolve()
    target = os.path.relpath(index_dir, parent) if index_dir.is_relative_to(parent.parent) else str(index_dir)
    tmp = parent / f".{link.name}.publish-{os.getpid()}"
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    os.symlink(target, tmp, target_is_directory=True)
    os.replace(tmp, link)
    logger.info("published %s as %s", index_dir, link)
    return index_dir
