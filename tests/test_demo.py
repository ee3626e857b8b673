"""The README's main job (`qaslr demo`) end to end on a machine without the real weights."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_demo_indexes_samples_and_serves_search(tmp_path):
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("QASLR_") and k != "REDIS_URL"}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"), OMP_NUM_THREADS="1")
    qaslr = str(Path(sys.executable).parent / "qaslr")
    cmd = [qaslr, "demo", "--workdir", str(tmp_path / "demo"), "--videos", "4", "--port", str(port)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stdout.read()[-3000:]
            try:
                ready = httpx.get(f"{url}/readyz", timeout=2)
                if ready.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        else:
            raise AssertionError("the demo never became ready")
        assert ready.json()["random_weights"] is True
        r = httpx.post(f"{url}/search", json={"query": "a red square appears", "top_k": 3}, timeout=120)
        assert r.status_code == 200, r.text
        results = r.json()["results"]
        assert len(results) == 3
        assert {res["video_id"] for res in results} <= {f"sample-{i:02d}" for i in range(4)}
        assert all(res["metadata"]["title"].startswith("a ") for res in results)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
    # the user is told plainly that the rankings mean nothing
    assert "RANKINGS ARE MEANINGLESS" in out
    assert (tmp_path / "demo" / "videos" / "videos.jsonl").exists()
