"""Run a real build (through the library facade) with a crash injected from outside the build code.

    python tests/indexer/crash_build.py N build|add SOURCE INDEX OPTIONS_JSON

The process dies abruptly (``os._exit(99)``: no cleanup, no flush, like kill -9) right after the
build's N-th batch commit, through the Builder's ``on_commit`` callback. The build code itself has no
crash hook. The arguments after N are those of tests/indexer/facade_child.py.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

CRASH_STATUS = 99


def install(after: int) -> None:
    from indexer import pipeline

    real = pipeline.Builder.run

    def run(self, items, **kwargs):
        chained = kwargs.pop("on_commit", None)

        def on_commit(committed: int) -> None:
            if chained is not None:
                chained(committed)
            if committed >= after:
                os._exit(CRASH_STATUS)

        return real(self, items, on_commit=on_commit, **kwargs)

    pipeline.Builder.run = run


if __name__ == "__main__":
    install(int(sys.argv[1]))
    sys.path.insert(0, str(Path(__file__).parent))
    from facade_child import run as run_child

    sys.exit(run_child(sys.argv[2:]))
