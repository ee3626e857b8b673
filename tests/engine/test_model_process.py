"""The backbone in model processes of its own (engine.runtime.model_process), and searches through them."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from engine.errors import ModelProcessDied
from engine.runtime.model_process import ModelProcess, auto_model_processes, weights_bytes

pytestmark = pytest.mark.slow  # starts child interpreters that load the backbone (a few seconds each)

QUERIES = ["a red triangle shows up briefly", "a blue circle", "first a green square, then a red star"]


@pytest.fixture(scope="module")
def backbone(tiny_world_checkpoint):
    from models.backbone import load_backbone

    return load_backbone(tiny_world_checkpoint, device="cpu")


def _frames(n: int, size: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return list(rng.integers(0, 256, size=(n, size, size, 3), dtype=np.uint8))


def _nice(pid: int) -> int:
    return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[16])


def _wait_dead(proc: ModelProcess, timeout_s: float = 10.0) -> None:
    """Until ``proc``'s child has exited (its threads torn down: waitable, not just a zombie leader)."""
    stop = time.monotonic() + timeout_s
    while proc.alive:
        assert time.monotonic() < stop, f"process {proc.pid} did not exit"
        time.sleep(0.02)


def test_a_model_process_embeds_texts_and_images_as_the_server_backbone_does(backbone, tiny_world_checkpoint):
    proc = ModelProcess(backbone, str(tiny_world_checkpoint), nice=3).start()
    try:
        texts = ["a red circle", "two shapes collide", None]
        frames = _frames(5, backbone.frame_size)
        with torch.inference_mode():
            want_t = backbone.embed_texts(texts, instruction="find the video").float()
            want_i = backbone.embed_images(frames).float()
        got_t = proc.embed_texts(texts, instruction="find the video")
        got_i = proc.embed_images(frames)
        assert proc.pid != os.getpid() and proc.calls == 2
        torch.testing.assert_close(got_t, want_t, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(got_i, want_i, atol=1e-5, rtol=1e-4)
        if sys.platform.startswith("linux"):  # it runs at the batcher's priority
            assert _nice(proc.pid) == min(19, _nice(os.getpid()) + 3)
    finally:
        proc.close()
    assert proc.pid is None


def test_a_model_process_that_died_is_started_again_for_the_next_batch(backbone, tiny_world_checkpoint):
    proc = ModelProcess(backbone, str(tiny_world_checkpoint))
    try:
        frame = _frames(1, backbone.frame_size)
        first = proc.embed_images(frame)
        os.kill(proc.pid, signal.SIGKILL)
        _wait_dead(proc)
        torch.testing.assert_close(proc.embed_images(frame), first)
        assert proc.starts == 2
    finally:
        proc.close()


def test_a_batch_whose_model_process_dies_fails_with_a_clear_error_and_the_next_one_runs(
    backbone, tiny_world_checkpoint
):
    proc = ModelProcess(backbone, str(tiny_world_checkpoint))
    try:
        proc.embed_texts(["ready"])
        errors: list[BaseException] = []
        big = _frames(512, backbone.frame_size)  # seconds of work on a CPU

        def call():
            try:
                proc.embed_images(big)
            except BaseException as exc:  # noqa: BLE001 - the test looks at it
                errors.append(exc)

        thread = threading.Thread(target=call)
        thread.start()
        time.sleep(0.3)
        os.kill(proc.pid, signal.SIGKILL)
        thread.join(30)
        assert len(errors) == 1 and isinstance(errors[0], ModelProcessDied)
        assert "restarts" in str(errors[0])
        assert proc.embed_texts(["again"]).shape == (1, backbone.embed_dim)
        assert proc.starts == 2
    finally:
        proc.close()


def test_a_model_process_that_loads_another_checkpoint_is_refused(backbone, tiny_world_checkpoint):
    other = SimpleNamespace(
        fingerprint="another-checkpoint",
        dtype=backbone.dtype,
        embed_dim=backbone.embed_dim,
        frame_size=backbone.frame_size,
    )
    proc = ModelProcess(other, str(tiny_world_checkpoint))
    try:
        with pytest.raises(RuntimeError, match="fingerprint differs"):
            proc.embed_texts(["anything"])
    finally:
        proc.close()


def test_model_processes_are_one_per_core_on_a_cpu_as_far_as_memory_allows_and_none_on_a_gpu(backbone):
    assert auto_model_processes("cuda:0", cores=16) == 0
    gb = 2**30
    assert auto_model_processes("cpu", cores=1, available_bytes=64 * gb) == 0
    assert auto_model_processes("cpu", cores=2, available_bytes=64 * gb) == 2
    assert auto_model_processes("cpu", cores=64, available_bytes=64 * gb) == 4
    # each process's interpreter and libraries count too (tiny weights, 2 GB free: one fits, so none)
    assert auto_model_processes("cpu", cores=8, weights_bytes=10 * 2**20, available_bytes=2 * gb) == 0
    # copies of the weights in at most half the available memory; fewer than two copies: none
    assert auto_model_processes("cpu", cores=8, weights_bytes=8 * gb, available_bytes=40 * gb) == 2
    assert auto_model_processes("cpu", cores=8, weights_bytes=8 * gb, available_bytes=20 * gb) == 0
    assert auto_model_processes("cpu", cores=8, weights_bytes=gb, available_bytes=64 * gb) == 4
    size = weights_bytes(backbone)  # the tiny-world backbone's parameters, float32
    assert size == 4 * sum(p.numel() for p in backbone.model.parameters()) > 0


def test_searches_through_model_processes_answer_as_searches_in_one_process(
    world_engine, world_index, tiny_world_checkpoint
):
    from engine import EngineConfig, load_engine

    backends = world_engine.batcher.backends  # the default: model processes on a CPU of 2+ cores
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: no model processes by default")
    assert len(backends) == auto_model_processes("cpu") and world_engine.info["batching"]["model_processes"]
    one = load_engine(EngineConfig(index=world_index, model=str(tiny_world_checkpoint), model_processes=0))
    try:
        assert one.batcher.backends == []
        before = sum(b.calls for b in backends)
        for query in QUERIES:
            request = {"query": query, "mode": "rerank", "top_k": 4}
            a, b = world_engine.searcher.search(request), one.searcher.search(request)
            assert [h.video_id for h in a.hits] == [h.video_id for h in b.hits]
            np.testing.assert_allclose([h.score for h in a.hits], [h.score for h in b.hits], atol=1e-5)
            for x, y in zip(a.hits, b.hits, strict=True):  # the refined moments, from the refine frames
                assert (x.moment is None) == (y.moment is None)
                if x.moment is not None:
                    assert x.moment == pytest.approx(y.moment, abs=1e-3)
        assert sum(b.calls for b in backends) > before  # their query and refine frames ran there
    finally:
        one.close()


def test_a_model_process_closed_before_it_is_ready_exits_quietly(backbone, tiny_world_checkpoint, capfd):
    proc = ModelProcess(backbone, str(tiny_world_checkpoint)).start()
    child = proc._proc
    proc.close()  # at once: the child is still loading, holds no work, and is ended rather than waited for
    assert not proc.alive and child.returncode == -signal.SIGKILL
    err = capfd.readouterr().err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_a_model_process_closed_once_ready_exits_by_itself(backbone, tiny_world_checkpoint):
    proc = ModelProcess(backbone, str(tiny_world_checkpoint)).start()
    child = proc._proc
    assert proc._conn.poll(300)  # its "ready" has arrived (not yet read)
    proc.close()
    assert not proc.alive and child.returncode == 0
