"""Settings from the environment, `.env.example` coverage, the pure scoring helpers, and
`qaslr serve` as users run it (a subprocess on a free port)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.helpers import ServerProcess, free_port

ROOT = Path(__file__).resolve().parents[2]


def test_settings_from_env(monkeypatch):
    from service.settings import Settings

    monkeypatch.setenv("QASLR_API_KEYS", "k1, k2,")
    monkeypatch.setenv("REDIS_URL", "redis://:secret@cache:6379/2")
    monkeypatch.setenv("QASLR_HEAD", "")  # empty = unset, not the current directory
    monkeypatch.setenv("QASLR_QUEUE_SIZE", "3")
    s = Settings()
    assert s.api_keys == ["k1", "k2"] and s.redis_url.endswith("/2") and s.head is None and s.queue_size == 3
    assert "secret" not in repr(s) and "k1" not in repr(s)
    assert Settings(queue_size=5).queue_size == 5  # explicit values (CLI flags) win
    with pytest.raises(ValueError):
        Settings(default_frames=64, max_frames=32)


def test_env_example_documents_every_setting():
    from service.settings import Settings

    names = set()
    for line in (ROOT / ".env.example").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            names.add(line.split("=", 1)[0].strip())
    expected = {f"QASLR_{f.upper()}" for f in Settings.model_fields if f != "redis_url"} | {"REDIS_URL"}
    assert names == expected


def test_moment_is_the_run_above_half_way_from_the_median_to_the_peak():
    from engine.moments import frame_span, relevance_runs, run_span

    assert frame_span([24, 30], fps=12.0, duration=10.0) == (2.0, 31 / 12)
    assert frame_span([119], fps=12.0, duration=10.0) == (119 / 12, 10.0)
    # median 0.1, peak 0.9 -> threshold 0.5: rows 3-4 are the run around the peak; row 7 is a second run
    relevance = np.array([0.1, 0.1, 0.2, 0.9, 0.7, 0.1, 0.1, 0.6, 0.1])
    runs = relevance_runs(relevance)
    assert [(r.first, r.last, r.peak) for r in runs] == [(3, 4, 3), (7, 7, 7)]
    assert abs(runs[0].threshold - 0.5) < 1e-9
    t = np.arange(9, dtype=np.float64)  # one bank frame a second
    assert run_span(runs[0], t, 0.25, 9.0) == (2.5, 4.5)  # edges half-way to the frames outside
    # a run that reaches the last bank frame ends with the video
    assert run_span(relevance_runs(np.array([0.0, 0.0, 0.0, 1.0]))[0], t[:4], 0.25, 3.6) == (2.5, 3.6)
    assert relevance_runs(np.array([])) == []


def test_qaslr_serve_cli(qaslr_index, tiny_checkpoint, tiny_head):
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "QASLR_INDEX": str(qaslr_index)}
    env.pop("REDIS_URL", None)
    cmd = [
        sys.executable,
        "-m",
        "qaslr.cli",
        "serve",
        "--model",
        str(tiny_checkpoint),
        "--head",
        str(tiny_head),
    ]
    cmd += ["--port", str(port), "--api-key", "cli-key", "--max-frames", "8", "--default-frames", "4"]
    with ServerProcess(cmd, env=env, port=port, ready_timeout=90) as server:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            r = client.post("/search", json={"query": "a block"}, headers={"X-API-Key": "cli-key"})
            assert r.status_code == 200 and r.json()["frames"] == 4
            r = client.post(
                "/search", json={"query": "a block", "frames": 9}, headers={"X-API-Key": "cli-key"}
            )
            assert r.status_code == 422 and r.json()["error"]["field"] == "frames"
    assert "RANDOM WEIGHTS" in server.output  # the plain warning that rankings are meaningless


def test_qaslr_serve_without_index_is_a_usage_error(monkeypatch, capsys):
    from qaslr.cli import main

    for name in list(os.environ):
        if name.startswith("QASLR_"):
            monkeypatch.delenv(name)
    assert main(["serve", "--port", "0"]) == 2
    assert "--index" in capsys.readouterr().out
    assert main(["serve", "--index", "x", "--queue-size", "-1"]) == 2
    assert "queue_size" in capsys.readouterr().out
