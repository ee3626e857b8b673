"""Service fixtures: a small corpus with metadata, indexes built by the real indexer (the library
facade, in a process of its own; streaming and one-shot), and a real uvicorn server on a free
loopback port."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.helpers import free_port

NUM_VIDEOS = 8
# indexer.BuildOptions fields; these indexes keep no frame store, so stage 2 decodes from the source
# (the cache and decode paths); tests/service/test_frame_store.py builds indexes with one
BUILD_OPTIONS = {"frames": 16, "clip_len": 4, "bank_per_second": 4, "workers": 1, "frame_store": "none"}
FACADE_CHILD = Path(__file__).resolve().parents[1] / "indexer" / "facade_child.py"


@pytest.fixture(scope="session")
def service_corpus(tmp_path_factory, video_factory) -> Path:
    """8 videos of 3-6 s at 12 fps with metadata {split, rank, topic}, listed in a JSONL manifest."""
    root = tmp_path_factory.mktemp("service_corpus")
    lines = []
    for i in range(NUM_VIDEOS):
        path = video_factory(root / f"v{i}.mp4", num_frames=36 + 6 * i, fps=12, size=(96, 64), seed=20 + i)
        meta = {"split": "test" if i % 2 else "train", "rank": i, "topic": ["sea", "city", "forest"][i % 3]}
        lines.append(json.dumps({"id": f"vid{i}", "path": str(path), "metadata": meta}))
    manifest = root / "manifest.jsonl"
    manifest.write_text("\n".join(lines) + "\n")
    return manifest


def _build(source: Path, index: Path, model: Path, head: Path | None, *, options=BUILD_OPTIONS) -> Path:
    """Build through :func:`indexer.build_index` in a child process (the build seeds torch and loads
    its own model; the test process keeps its state)."""
    options = {**options, "model": str(model), "head_dir": None if head is None else str(head)}
    cmd = [sys.executable, str(FACADE_CHILD), "build", str(source), str(index), json.dumps(options)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return index


@pytest.fixture(scope="session")
def qaslr_index(tmp_path_factory, service_corpus, tiny_checkpoint, tiny_head) -> Path:
    return _build(service_corpus, tmp_path_factory.mktemp("idx") / "qaslr", tiny_checkpoint, tiny_head)


@pytest.fixture(scope="session")
def oneshot_index(tmp_path_factory, service_corpus, tiny_checkpoint) -> Path:
    return _build(service_corpus, tmp_path_factory.mktemp("idx") / "oneshot", tiny_checkpoint, None)


@pytest.fixture
def make_settings(tiny_checkpoint, tiny_head, qaslr_index):
    """Settings for the streaming index with small stage-2 budgets; keyword overrides win."""
    from service.settings import Settings

    def make(**overrides):
        values = dict(
            index=qaslr_index,
            model=str(tiny_checkpoint),
            head=tiny_head,
            default_frames=8,
            max_frames=16,
            redis_url=None,
            # tests start many servers: the warm-up before ready is tested on its own
            # (tests/service/test_warm_up.py), the others start cold
            warm_up=False,
            # ... and in one process: the model processes are tested on their own
            # (tests/engine/test_model_process.py)
            model_processes=0,
        )
        values.update(overrides)
        return Settings(**values)

    return make


@contextlib.contextmanager
def live_server(app, *, wait_ready: bool = True):
    """Run ``app`` under a real uvicorn server in a background thread; yields an httpx.Client."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
    try:
        if wait_ready:
            wait_until_ready(client)
        yield client
    finally:
        client.close()
        server.should_exit = True
        thread.join(timeout=15)


def wait_until_ready(client: httpx.Client, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        r = client.get("/readyz")
        if r.status_code == 200:
            return r.json()
        assert r.json()["status"] != "failed", r.json()
        assert time.monotonic() < deadline, "service not ready in time"
        time.sleep(0.05)


@pytest.fixture
def server(make_settings):
    """A ready server over the streaming index (in-process LRU cache)."""
    from service.app import create_app

    app = create_app(make_settings())
    with live_server(app) as client:
        client.app = app
        yield client


@pytest.fixture(scope="module")
def small_index(tmp_path_factory, service_corpus, tiny_checkpoint, tiny_head) -> Path:
    """A second streaming index over the first three videos only (same model and head)."""
    lines = service_corpus.read_text().splitlines()[:3]
    manifest = tmp_path_factory.mktemp("small") / "manifest.jsonl"
    manifest.write_text("\n".join(lines) + "\n")
    return _build(manifest, tmp_path_factory.mktemp("idx") / "small", tiny_checkpoint, tiny_head)


def start_redis(port: int, directory: Path) -> subprocess.Popen:
    """A redis-server on ``port`` (loopback only), answering before this returns."""
    import redis

    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server is not installed")
    proc = subprocess.Popen(
        [
            exe,
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(directory),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            assert proc.poll() is None and time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)
    client.close()
    return proc


@pytest.fixture
def own_redis(tmp_path):
    """A throwaway redis-server on a free port (never the shared one), killed at the end."""
    port = free_port()
    proc = start_redis(port, tmp_path)
    yield proc, port
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)
