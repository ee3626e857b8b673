"""The README's main job (`qaslr demo`) end to end, with its own defaults, on a machine without the
real weights: it falls back to the shipped shapes-world backbone, and the queries it suggests find
the right sample video first."""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.helpers import ServerProcess, free_port


@pytest.mark.slow
def test_demo_serves_and_its_suggested_queries_find_the_right_video(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("QASLR_") and k != "REDIS_URL"}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"), OMP_NUM_THREADS="1")
    qaslr = str(Path(sys.executable).parent / "qaslr")
    cmd = [qaslr, "demo", "--workdir", str(tmp_path / "demo"), "--port", str(port)]  # the demo's defaults
    with ServerProcess(cmd, env=env, port=port, ready_timeout=600, stop_signal=signal.SIGINT) as server:
        ready = httpx.get(f"{server.url}/readyz", timeout=5).json()
        assert ready["random_weights"] is False
        assert ready["time_head_source"] == "checkpoint"  # the shapes-world checkpoint's time head serves
        # the demo prints its ready line and the queries to try once /readyz answers (it polls it too)
        deadline = time.monotonic() + 60
        while "ready: serving" not in server.output and time.monotonic() < deadline:
            time.sleep(0.2)
        suggestions = re.findall(r'"query": "([^"]+)".*# expect (\S+) first', server.output)
        # three single events, one order, one count, one motion
        assert len(suggestions) == 6, server.output[-2000:]
        for i, (query, expected) in enumerate(suggestions):
            r = httpx.post(f"{server.url}/search", json={"query": query, "top_k": 3}, timeout=120)
            assert r.status_code == 200, r.text
            results = r.json()["results"]
            assert results[0]["video_id"] == expected, (query, [x["video_id"] for x in results])
            if i < 3:
                assert results[0]["metadata"]["title"] in query
            elif i < 5:  # order and count: ranked by the time head
                assert results[0]["tier"] == "time" and r.json()["rerank_embedder"] == "time"
            else:  # motion: the rerank head read the candidates, each forwards and played backwards
                route = r.json()["route"]
                assert results[0]["tier"] == "head" and "played backwards" in route, route
    assert "SHAPES-WORLD BACKBONE" in server.output
    assert (tmp_path / "demo" / "videos" / "videos.jsonl").exists()
