"""Fuzzing: schemathesis over the service's own OpenAPI document, every check on, a bounded number
of examples per operation, against a real server on 127.0.0.1. Zero failures required.

The examples are bounded (``QASLR_FUZZ_EXAMPLES``, default 200 per operation; ``QASLR_FUZZ_SEED``, fixed by default), so the run
stops by itself in a minute or two on the CI machines.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.service.conftest import live_server

EXAMPLES = int(os.environ.get("QASLR_FUZZ_EXAMPLES", "200"))


def test_schemathesis_all_checks_zero_failures(make_settings, tmp_path):
    from service.app import create_app

    st = Path(sys.executable).parent / "schemathesis"
    assert st.exists(), "schemathesis is a dev dependency (pip install -e '.[dev]')"
    # small stage-2 budgets keep each rerank fast; a generous deadline and queue: the fuzzer must
    # see the service's answers, not its load shedding
    settings = make_settings(max_frames=4, default_frames=2, request_timeout_s=120, queue_size=64)
    app = create_app(settings)
    # what JSON Schema cannot say: whether a base64 string decodes to a picture (415) of at most
    # 4 MiB (413); every other schema-valid request must still be accepted
    (tmp_path / "schemathesis.toml").write_text(
        '[checks.positive_data_acceptance]\nexpected-statuses = ["2xx", "3xx", "401", "403", "404", "409", '
        '"413", "415", "429", "5xx"]\n'
    )
    with live_server(app) as client:
        base = str(client.base_url).rstrip("/")
        assert base.startswith("http://127.0.0.1:")
        cmd = [
            str(st),
            "run",
            f"{base}/openapi.json",
            "--checks",
            "all",
            "--max-examples",
            str(EXAMPLES),
            "--seed",
            os.environ.get("QASLR_FUZZ_SEED", "20261130"),
            "--workers",
            "1",
            "--generation-database",
            "none",
            "--request-timeout",
            "120",
            "--suppress-health-check",
            "too_slow",
            "--no-color",
        ]
        done = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=900,
            cwd=tmp_path,
            env=dict(os.environ, NO_COLOR="1", SCHEMATHESIS_TELEMETRY="false"),
        )
    out = done.stdout + done.stderr
    print(out[-4000:])
    assert done.returncode == 0, out[-8000:]
    assert "No issues found" in out or " 0 failures" in out or "passed" in out, out[-3000:]
