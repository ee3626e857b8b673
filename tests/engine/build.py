"""Index building for engine tests."""

from __future__ import annotations

from pathlib import Path


def build_oneshot_index(manifest: Path, index: Path, model: Path) -> Path:
    from qaslr.commands.indexer import main

    code = main(
        [
            "build",
            str(manifest),
            "--index",
            str(index),
            "--model",
            str(model),
            "--embedder",
            "oneshot",
            "--no-progress",
            "--workers",
            "1",
        ]
    )
    assert code in (0, None)
    return index
