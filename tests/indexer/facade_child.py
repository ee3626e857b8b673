"""Build or add through the library facade in a process of its own (for tests that kill, stop or
isolate the build process; tests about the `indexer` command run the command instead).

    python tests/indexer/facade_child.py build|add SOURCE INDEX '{"model": ..., "frames": 8}'

The options are :class:`indexer.BuildOptions` fields as JSON. Logs at INFO and prints the build
summary like the command; exits 0 when the run finished, 143 when it was stopped (SIGTERM).
"""

from __future__ import annotations

import json
import sys


def options(text: str | None):
    from indexer import BuildOptions

    return BuildOptions(**json.loads(text or "{}"))


def run(argv: list[str]) -> int:
    import signal
    import threading

    from core.logs import configure_logging
    from indexer import add_to_index, build_index

    command, source, index = argv[:3]
    configure_logging("INFO")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    facade = {"build": build_index, "add": add_to_index}[command]
    report = facade(source, index, options(argv[3] if len(argv) > 3 else None), stop=stop.is_set)
    print(report.summary())
    return 143 if report.stopped else 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
