"""Index building for engine tests, through the indexer facade."""

from __future__ import annotations

from pathlib import Path

from indexer import BuildOptions, build_index


def build_oneshot_index(manifest: Path, index: Path, model: Path) -> Path:
    report = build_index(manifest, index, BuildOptions(model=str(model), embedder="oneshot", workers=1))
    assert not report.stopped and not report.has_failures
    return index
