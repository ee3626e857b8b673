"""The README's results block and docs/results.md are what scripts/results.py makes of the benchmark
JSON in docs/bench/: nobody edits a measured number by hand."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_published_numbers_are_the_benchmarks_json():
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "results.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    readme = (ROOT / "README.md").read_text()
    assert "<!-- results:start" in readme and "| cascade, the default |" in readme
