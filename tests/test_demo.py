"""The README's main job (`qaslr demo`) end to end on a machine without the real weights."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import httpx

from tests.helpers import ServerProcess, free_port


def test_demo_indexes_samples_and_serves_search(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("QASLR_") and k != "REDIS_URL"}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"), OMP_NUM_THREADS="1")
    qaslr = str(Path(sys.executable).parent / "qaslr")
    cmd = [qaslr, "demo", "--workdir", str(tmp_path / "demo"), "--videos", "4", "--port", str(port)]
    with ServerProcess(cmd, env=env, port=port, ready_timeout=180, stop_signal=signal.SIGINT) as server:
        ready = httpx.get(f"{server.url}/readyz", timeout=5)
        assert ready.json()["random_weights"] is True
        r = httpx.post(
            f"{server.url}/search", json={"query": "a red square appears", "top_k": 3}, timeout=120
        )
        assert r.status_code == 200, r.text
        results = r.json()["results"]
        assert len(results) == 3
        assert {res["video_id"] for res in results} <= {f"sample-{i:02d}" for i in range(4)}
        assert all(res["metadata"]["title"].startswith("a ") for res in results)
    # the user is told plainly that the rankings mean nothing
    assert "RANKINGS ARE MEANINGLESS" in server.output
    assert (tmp_path / "demo" / "videos" / "videos.jsonl").exists()
