"""Run the real `indexer` command with a crash injected from outside the build code.

    python tests/indexer/crash_build.py N indexer-args...

The process dies abruptly (``os._exit(99)``: no cleanup, no flush, like kill -9) right after the
build's N-th batch commit, through the Builder's ``on_commit`` callback. The build code itself has no
crash hook.
"""

from __future__ import annotations

import os
import sys

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
    from qaslr.commands.indexer import main

    sys.exit(main(sys.argv[2:]))
