"""Shared, cheap fixtures: a tiny random backbone checkpoint, a tiny streaming head, generated videos.

Everything is session-scoped and written under pytest's temporary directories (never committed).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session", autouse=True)
def _single_thread_torch():
    """The CI machines have 2 shared cores: one torch thread keeps tests fast and deterministic."""
    import torch

    torch.set_num_threads(1)
    yield


@pytest.fixture(autouse=True)
def _torch_threads_given_back():
    """A test leaves torch's process-wide thread count as it found it: a training run that left 2 threads
    set changed what later tests trained by the same seeds (training/threads.py)."""
    import torch

    yield
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    assert threads == 1, f"this test left torch with {threads} threads (set for a run, not given back)"


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Path:
    """A random Qwen3-VL-Embedding-shaped checkpoint (frame size 64, D = d = 64), seed 0."""
    from models.checkpoint import make_checkpoint

    return make_checkpoint(tmp_path_factory.mktemp("tiny_checkpoint"), seed=0)


@pytest.fixture(scope="session")
def tiny_head(tmp_path_factory) -> Path:
    """A random streaming head sized for ``tiny_checkpoint`` (N=8 think tokens, M=32 evidence tokens)."""
    from models.head import StreamingHeadConfig, create_head, save_head

    directory = tmp_path_factory.mktemp("tiny_head")
    config = StreamingHeadConfig(
        hidden_size=64, embed_dim=64, num_heads=4, num_think_tokens=8, max_evidence_tokens=32
    )
    save_head(create_head(config, seed=0), directory)
    return directory


def synthetic_frames(num_frames: int, *, size: tuple[int, int] = (96, 64), seed: int = 0) -> np.ndarray:
    """[n, H, W, 3] uint8 frames that change visibly over time: a seeded background colour, two
    coloured blocks moving on different paths and a brightness band that sweeps down the frame."""
    width, height = size
    rng = np.random.default_rng(seed)
    background = rng.integers(0, 256, size=3)
    colours = rng.integers(0, 256, size=(2, 3))
    speeds = rng.uniform(0.5, 3.0, size=(2, 2))
    bw, bh = max(2, width // 4), max(2, height // 4)
    frames = np.empty((num_frames, height, width, 3), dtype=np.uint8)
    for t in range(num_frames):
        frame = frames[t]
        frame[:] = background
        band = (t * 3) % height
        frame[band : band + max(1, height // 8)] = 255 - background
        for b in range(2):
            x = int(abs((speeds[b, 0] * t + b * width / 2) % (2 * (width - bw)) - (width - bw)))
            y = int(abs((speeds[b, 1] * t + b * height / 3) % (2 * (height - bh)) - (height - bh)))
            frame[y : y + bh, x : x + bw] = colours[b]
    return frames


@pytest.fixture(scope="session")
def video_factory():
    """``make(path, *, num_frames, fps=24, size=(W, H), seed=0, codec="mpeg4") -> Path``: writes a
    generated video with visually distinct frames over time (moving coloured blocks)."""
    from world.media import write_video

    def make(
        path,
        *,
        num_frames: int,
        fps: float = 24.0,
        size: tuple[int, int] = (96, 64),
        seed: int = 0,
        codec: str = "mpeg4",
    ) -> Path:
        return write_video(path, synthetic_frames(num_frames, size=size, seed=seed), fps=fps, codec=codec)

    return make


@pytest.fixture(scope="session")
def sample_videos(tmp_path_factory, video_factory) -> Path:
    """A folder of 4 short videos of different lengths, frame rates and sizes (one in a subfolder)."""
    root = tmp_path_factory.mktemp("sample_videos")
    video_factory(root / "a.mp4", num_frames=48, fps=24, size=(96, 64), seed=1)
    video_factory(root / "b.mp4", num_frames=30, fps=10, size=(64, 64), seed=2)
    video_factory(root / "c.avi", num_frames=90, fps=30, size=(128, 96), seed=3)
    video_factory(root / "sub" / "d.mp4", num_frames=20, fps=12.5, size=(80, 48), seed=4)
    return root


@pytest.fixture(scope="session")
def tiny_world_checkpoint(tmp_path_factory) -> Path:
    """The shapes-world backbone that ships with the project (trained weights), in the public layout."""
    from training.backbone import tiny_world_checkpoint as write

    return write(tmp_path_factory.mktemp("tiny_world") / "tiny-world")


# Fixtures of tests/service that build an index with the real `indexer build` (the session's
# qaslr_index alone takes about a minute on 2 shared cores). A service test that needs one is slow:
# `pytest -m "not slow"`, the fast lane, leaves it out; plain `pytest` runs it.
INDEX_BUILDING_FIXTURES = frozenset({"qaslr_index", "oneshot_index", "small_index", "web_index", "indexes"})
# What a test needs beyond Python, by the fixture that provides it (pyproject.toml registers the
# markers; tests that reach for it without such a fixture carry the marker themselves):
#   redis    a Redis server (the machine's on 127.0.0.1:6379, or redis-server to start one)
#   browser  Chromium, chromedriver and selenium
#   ray      ray[data] (the `ray` extra)
#   root     root: network or mount namespaces (`unshare`)
#   gpu      a CUDA device (skipped without one)
NEEDS_BY_FIXTURE = {
    "own_redis": ("redis",),
    "shared_redis_prefix": ("redis",),
    "driver": ("browser",),
    "ray_bin": ("ray", "root"),
}


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config, items):
    service = Path(__file__).resolve().parent / "service"
    for item in items:
        fixtures = set(item.fixturenames)
        if service in Path(item.path).parents and INDEX_BUILDING_FIXTURES & fixtures:
            item.add_marker(pytest.mark.slow)
        for name in sorted(
            {need for f in fixtures & NEEDS_BY_FIXTURE.keys() for need in NEEDS_BY_FIXTURE[f]}
        ):
            item.add_marker(getattr(pytest.mark, name))


def pytest_runtest_setup(item):
    if item.get_closest_marker("gpu") is not None:
        import torch

        if not torch.cuda.is_available():
            pytest.skip("needs a CUDA device (marker gpu)")
