"""Concurrent searches and the stage-2 batcher (engine.runtime.batching, engine.runtime.admission)."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from engine.errors import EncodeCancelled, QueueFull
from engine.runtime.admission import Admission
from engine.runtime.batching import EncodeBatcher

pytestmark = pytest.mark.slow  # builds an index and runs concurrent searches (about 30 s)

QUERIES = ["a red square", "a blue circle", "a green triangle", "a yellow star", "two shapes meet", "a flash"]


class FakeEncoder:
    """Records every encode call; an embedding is the clip's first pixel, so results can be checked."""

    head_seconds = 0.0

    def __init__(self, delay: float = 0.0):
        self.calls: list[list[int]] = []
        self.delay = delay

    def encode(self, videos, *, texts=None, queries=None, exit_policy=None):
        self.calls.append([len(v.frames) for v in videos])
        time.sleep(self.delay)
        return [SimpleNamespace(final=torch.tensor(float(v.frames[0, 0, 0, 0]))) for v in videos]


def clip(n: int, tag: int, shape=(4, 4)):
    frames = np.full((n, *shape, 3), tag, dtype=np.uint8)
    return SimpleNamespace(frames=frames, frame_indices=np.arange(n), fps=1.0)


def test_concurrent_requests_share_a_call_and_get_their_own_results():
    enc = FakeEncoder()
    batcher = EncodeBatcher(max_wait_s=0.2, max_frames=1000)
    try:
        with ThreadPoolExecutor(3) as pool:
            futures = [
                pool.submit(batcher.encode, enc, [clip(4 + r, 10 * r + i) for i in range(3)])
                for r in range(3)
            ]
            results = [f.result(10) for f in futures]
    finally:
        batcher.close()
    assert len(enc.calls) == 1 and sorted(enc.calls[0]) == enc.calls[0]  # one call, length-sorted
    for r, (embs, ticket) in enumerate(results):
        assert [int(e.final) for e in embs] == [10 * r + i for i in range(3)]  # unsorted back
        assert ticket.queue_s is not None and ticket.compute_s >= 0


class FakeBackbone:
    """Records its query and image calls; a query's embedding is its text's length, an image's its
    first pixel."""

    def __init__(self):
        self.calls: list[tuple[str, list]] = []

    def embed_queries(self, texts):
        self.calls.append(("queries", list(texts)))
        return torch.tensor([[float(len(t))] for t in texts])

    def embed_images(self, frames):
        self.calls.append(("images", [int(f[0, 0, 0]) for f in frames]))
        return torch.tensor([[float(f[0, 0, 0])] for f in frames])


class FakeClock:
    deadline = cancelled = None

    def __init__(self):
        self.timings = {"q_wait": 0.0, "q_work": 0.0, "refine": 0.0, "r_wait": 0.0}

    def check(self):
        pass

    def add(self, name, seconds):
        self.timings[name] += seconds * 1e3

    def move(self, source, target, seconds):
        self.timings[source] -= seconds * 1e3
        self.timings[target] += seconds * 1e3


def test_queries_and_images_of_concurrent_requests_share_calls_of_their_own_kind():
    model = FakeBackbone()
    batcher = EncodeBatcher(max_wait_s=0.2, max_frames=1000)
    texts = ["a red square moves", "a flash", "two shapes meet in the middle"]
    clocks = [FakeClock() for _ in range(6)]
    try:
        with ThreadPoolExecutor(6) as pool:
            queries = [
                pool.submit(
                    batcher.run, clocks[i], model, [t], kind="queries", queue="q_wait", compute="q_work"
                )
                for i, t in enumerate(texts)
            ]
            images = [
                pool.submit(batcher.run, clocks[3 + r], model, [np.full((4, 4, 3), 10 * r + i, np.uint8) for i in range(2)],
                            kind="images", queue="r_wait", inside="refine")
                for r in range(3)
            ]  # fmt: skip
            q_out = [f.result(10) for f in queries]
            i_out = [f.result(10) for f in images]
    finally:
        batcher.close()
    kinds = sorted(kind for kind, _ in model.calls)
    assert kinds == ["images", "queries"]  # one shared call per kind, never mixed
    (query_call,) = [items for kind, items in model.calls if kind == "queries"]
    assert query_call == sorted(texts, key=len)  # length-sorted
    assert [float(out[0][0]) for out in q_out] == [
        float(len(t)) for t in texts
    ]  # each its own, back in order
    assert [[float(e[0]) for e in out] for out in i_out] == [[0.0, 1.0], [10.0, 11.0], [20.0, 21.0]]
    for clock in clocks[:3]:  # the wait and the work are booked apart
        assert clock.timings["q_wait"] > 0 and clock.timings["q_work"] >= 0
    for clock in clocks[3:]:  # within the caller's stage: the wait moves out of it
        assert clock.timings["r_wait"] > 0 and clock.timings["refine"] == -clock.timings["r_wait"]


def test_refine_frames_and_queries_go_before_clips_that_wait():
    log = []

    class Logged(FakeBackbone):
        def encode(self, videos, **kwargs):
            log.append("clips")
            time.sleep(0.2 if len(log) == 1 else 0.0)
            return [SimpleNamespace(final=torch.tensor(0.0)) for _ in videos]

        def embed_queries(self, texts):
            log.append("queries")
            return super().embed_queries(texts)

        def embed_images(self, frames):
            log.append("images")
            return super().embed_images(frames)

    model = Logged()
    batcher = EncodeBatcher(max_wait_s=0.0, max_frames=1000)
    try:
        busy = batcher.submit(model, [clip(4, 1)])
        time.sleep(0.05)  # the only worker encodes ``busy``; meanwhile three searches queue work
        later = [
            batcher.submit(model, [clip(4, 2)]),
            batcher.submit(model, ["a red square"], kind="queries"),
            batcher.submit(model, [np.zeros((4, 4, 3), np.uint8)], kind="images"),
        ]
        for ticket in [busy, *later]:
            ticket.wait()
    finally:
        batcher.close()
    assert log == ["clips", "images", "queries", "clips"]


def test_a_batch_starts_once_every_running_search_is_in_it():
    enc = FakeEncoder()
    running = [1]
    batcher = EncodeBatcher(max_wait_s=5.0, max_frames=1000, peers=lambda: running[0])
    try:
        t0 = time.monotonic()
        batcher.encode(enc, [clip(2, 1)])  # the only running search: nobody else can join
        assert time.monotonic() - t0 < 1.0
        running[0] = 3
        first = batcher.submit(enc, [clip(2, 2)])
        time.sleep(0.2)
        assert not first.done.is_set()  # two running searches may still come
        second = batcher.submit(enc, [clip(2, 3)])
        time.sleep(0.2)
        assert not first.done.is_set()
        running[0] = 2  # the third search ended without handing anything over
        batcher.wake()
        assert [int(e.final) for e in first.wait()] == [2] and [int(e.final) for e in second.wait()] == [3]
        assert time.monotonic() - t0 < 3.0  # well before max_wait_s
    finally:
        batcher.close()
    assert enc.calls == [[2], [2, 2]]


def test_the_worker_counts_its_running_searches_and_says_when_one_ends():
    worker = Admission(4, threads=2, light_threads=1)
    seen, ended = [], []
    worker.on_search_done = lambda: ended.append(worker.running)

    async def scenario():
        await worker.run(lambda: seen.append(worker.running), timeout=5)
        await worker.run(lambda: seen.append(worker.running), timeout=5, light=True)  # not a peer

    try:
        asyncio.run(scenario())
    finally:
        worker.shutdown()
    assert seen == [1, 0] and ended == [0] and worker.running == 0


def test_a_batch_holds_at_most_the_budget_and_takes_requests_fifo():
    enc = FakeEncoder(delay=0.05)
    batcher = EncodeBatcher(max_wait_s=0.05, max_frames=8)
    try:
        first = batcher.submit(enc, [clip(4, i) for i in range(5)])  # 20 frames: split over 3 calls
        second = batcher.submit(enc, [clip(4, 100 + i) for i in range(2)])
        assert [int(e.final) for e in first.wait()] == list(range(5))
        assert [int(e.final) for e in second.wait()] == [100, 101]
    finally:
        batcher.close()
    assert all(sum(call) <= 8 for call in enc.calls)
    # the first request's clips go first; the second joins only the call with room left after it
    assert enc.calls == [[4, 4], [4, 4], [4, 4], [4]]


class SlowBackbone(FakeBackbone):
    """embed_images takes ``delay`` and records when it ran, on which thread."""

    def __init__(self, delay: float):
        super().__init__()
        self.delay, self.spans = delay, []

    def embed_images(self, frames):
        t0 = time.monotonic()
        time.sleep(self.delay)
        self.spans.append((threading.current_thread().name, t0, time.monotonic()))
        return super().embed_images(frames)


def test_a_batch_is_shared_out_among_free_workers_and_runs_side_by_side():
    model = SlowBackbone(delay=0.3)
    batcher = EncodeBatcher(max_wait_s=5.0, max_frames=128, workers=2, peers=lambda: 1)
    images = [np.full((4, 4, 3), i, np.uint8) for i in range(16)]
    try:
        out, ticket = batcher.encode(model, images, kind="images")
        small, _ = batcher.encode(model, images[:6], kind="images")  # below two shares of min_split
    finally:
        batcher.close()
    assert [float(e[0]) for e in out] == [float(i) for i in range(16)]  # every result in its place
    assert [float(e[0]) for e in small] == [float(i) for i in range(6)]
    sizes = [len(items) for _, items in model.calls]
    assert sorted(sizes[:2]) == [8, 8] and sizes[2:] == [6]  # even shares; a small batch stays whole
    (a, s0, e0), (b, s1, e1) = model.spans[:2]
    assert a != b and max(s0, s1) < min(e0, e1)  # two workers, at the same time
    # the overlapping batches' wall time counted once: their union, not their sum
    assert ticket.compute_s < max(e0, e1) - min(s0, s1) + 0.05 < (e0 - s0) + (e1 - s1)


def test_cancelled_or_expired_requests_are_dropped_before_the_backbone():
    enc = FakeEncoder(delay=0.3)
    batcher = EncodeBatcher(max_wait_s=0.0, max_frames=4)
    try:
        busy = batcher.submit(enc, [clip(4, 1)])
        time.sleep(0.05)  # the batcher is encoding ``busy``
        gone = threading.Event()
        cancelled = batcher.submit(enc, [clip(4, 2), clip(4, 3)], cancelled=gone.is_set)
        expired = batcher.submit(enc, [clip(4, 4)], deadline=time.monotonic() + 0.01)
        gone.set()
        busy.wait()
        with pytest.raises(EncodeCancelled):
            cancelled.wait()
        with pytest.raises(EncodeCancelled):
            expired.wait()
    finally:
        batcher.close()
    assert enc.calls == [[4]]


def test_a_request_dropped_from_behind_another_leaves_the_batcher_running():
    enc = FakeEncoder(delay=0.2)
    batcher = EncodeBatcher(max_wait_s=0.0, max_frames=4)
    try:
        busy = batcher.submit(enc, [clip(4, 1)])
        time.sleep(0.05)
        waiting = batcher.submit(enc, [clip(4, 2)])
        gone = threading.Event()
        dropped = batcher.submit(enc, [clip(4, 3)], cancelled=gone.is_set)  # queued behind ``waiting``
        gone.set()
        with pytest.raises(EncodeCancelled):
            dropped.wait()
        assert [int(e.final) for e in waiting.wait()] == [2] and busy.done.is_set()
        assert [int(e.final) for e in batcher.encode(enc, [clip(4, 4)])[0]] == [4]  # and it goes on
    finally:
        batcher.close()


def test_the_batcher_queue_is_bounded():
    enc = FakeEncoder(delay=0.3)
    batcher = EncodeBatcher(max_wait_s=0.0, max_frames=4, max_queued=3)
    try:
        batcher.submit(enc, [clip(4, 1)])
        time.sleep(0.05)
        batcher.submit(enc, [clip(4, 2), clip(4, 3)])
        with pytest.raises(QueueFull):
            batcher.submit(enc, [clip(4, 4), clip(4, 5)])
    finally:
        batcher.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")
def test_batcher_threads_run_at_a_lower_priority_and_leave_the_caller_alone():
    seen = []

    class NiceEncoder(FakeEncoder):
        def encode(self, videos, **kwargs):
            seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
            return super().encode(videos, **kwargs)

    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    for nice, expected in ((3, min(19, mine + 3)), (0, mine)):
        batcher = EncodeBatcher(max_wait_s=0.0, nice=nice)
        try:
            batcher.encode(NiceEncoder(), [clip(2, 1)])
        finally:
            batcher.close()
        assert seen.pop() == expected
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == mine


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")
def test_search_threads_yield_to_the_light_lane():
    def nice() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    mine = nice()
    worker = Admission(4, threads=2, light_threads=1, search_nice=4)

    async def scenario():
        return await worker.run(nice, timeout=5), await worker.run(nice, timeout=5, light=True)

    try:
        search, light = asyncio.run(scenario())
    finally:
        worker.shutdown()
    assert (search, light) == (min(19, mine + 4), mine)
    assert nice() == mine


def test_the_batcher_priority_setting():
    from engine import EngineConfig
    from engine.runtime import make_batcher
    from engine.runtime.batching import DEFAULT_NICE

    assert EncodeBatcher(max_wait_s=0.0).nice == DEFAULT_NICE == EngineConfig().batch_nice
    for given, nice in ((0, 0), (7, 7), (40, 19), (-5, 0)):
        assert EncodeBatcher(max_wait_s=0.0, nice=given).nice == nice
    batcher = make_batcher(EngineConfig(batch_nice=3), clip_len=4)
    try:
        assert batcher.nice == 3
    finally:
        batcher.close()


def test_cheap_jobs_do_not_wait_behind_running_ones_and_call_soon_is_exclusive():
    worker = Admission(4, threads=4)
    release = threading.Event()

    async def scenario():
        slow = asyncio.ensure_future(worker.run(lambda: release.wait(10), timeout=10))
        await asyncio.sleep(0.05)
        t0 = time.monotonic()
        assert await worker.run(lambda: "stage 1", timeout=5) == "stage 1"
        fast = time.monotonic() - t0
        release.set()
        await slow
        return fast

    try:
        assert asyncio.run(scenario()) < 1.0
        hold = threading.Event()
        blocker = worker.call_soon(lambda: hold.wait(10))

        async def blocked():
            return await worker.run(lambda: "ran", timeout=0.3)

        from engine.errors import WorkerTimeout

        with pytest.raises(WorkerTimeout):
            asyncio.run(blocked())  # nothing starts while call_soon's function runs
        hold.set()
        blocker.result(5)
    finally:
        worker.shutdown()


def test_a_stage_one_search_has_a_lane_of_its_own_when_every_search_thread_is_held():
    from engine.errors import WorkerTimeout

    worker = Admission(8, threads=2, light_threads=1)
    release = threading.Event()

    async def scenario():
        held = [asyncio.ensure_future(worker.run(lambda: release.wait(10), timeout=10)) for _ in range(2)]
        await asyncio.sleep(0.05)
        assert await worker.run(lambda: "stage 1", timeout=2, light=True) == "stage 1"
        with pytest.raises(WorkerTimeout):  # the same job on the search threads waits behind them
            await worker.run(lambda: "rerank", timeout=0.3)
        assert worker.depth == 3  # the abandoned one still counts until its turn comes (then skipped)
        release.set()
        await asyncio.gather(*held)

    try:
        asyncio.run(scenario())
    finally:
        worker.shutdown()


def test_cpu_slots_bound_the_searches_on_the_cpu_and_a_search_waiting_for_the_batcher_gives_its_up():
    from engine.errors import WorkerTimeout
    from engine.runtime.admission import auto_cpu_slots, off_the_cpu

    worker = Admission(8, threads=4, cpu_slots=1)
    batcher_done, busy = threading.Event(), threading.Event()

    def waits_for_the_batcher():
        with off_the_cpu():
            batcher_done.wait(10)
        return "heavy"

    async def scenario():
        heavy = asyncio.ensure_future(worker.run(waits_for_the_batcher, timeout=10))
        await asyncio.sleep(0.05)
        assert await worker.run(lambda: "cheap", timeout=2) == "cheap"  # the slot was given up
        hog = asyncio.ensure_future(worker.run(lambda: busy.wait(10), timeout=10))
        await asyncio.sleep(0.05)
        with pytest.raises(WorkerTimeout):  # the one slot is held on the CPU
            await worker.run(lambda: "waits", timeout=0.3)
        busy.set()
        await hog
        batcher_done.set()
        assert await heavy == "heavy"  # took a slot back before going on

    try:
        asyncio.run(scenario())
    finally:
        worker.shutdown()
    assert auto_cpu_slots() >= 2  # the cores + 1


def _ranking(outcome):
    return [(h.video_id, h.tier) for h in outcome.hits], [h.score for h in outcome.hits]


def test_concurrent_searches_answer_as_serial_ones(world_engine):
    searcher = world_engine.searcher
    assert searcher.reranker.batcher is not None  # batching is the default
    requests = [
        {"query": q, "mode": "rerank", "heavy": 4, "shortlist": 6, "top_k": 6, "frames": 8} for q in QUERIES
    ] + [{"query": QUERIES[0], "mode": "indexed", "top_k": 6}, {"query": QUERIES[1], "mode": "frames"}]
    serial = [searcher.search(r) for r in requests]
    with ThreadPoolExecutor(len(requests)) as pool:
        concurrent = list(pool.map(searcher.search, requests))
    for a, b in zip(serial, concurrent, strict=True):
        (ids_a, scores_a), (ids_b, scores_b) = _ranking(a), _ranking(b)
        assert ids_a == ids_b
        assert scores_b == pytest.approx(scores_a, abs=1e-4)
        assert [h.moment for h in a.hits] == [h.moment for h in b.hits]
        assert b.timings_ms["heavy_queue"] >= 0
    # and the old path (no batcher) scores the same
    from engine.assembly import searcher_for

    _, plain = searcher_for(
        world_engine.index, world_engine.config.replace(batching=False), world_engine.encoder.backbone,
        world_engine.head, world_engine.cache, rerank=world_engine.rerank,
    )  # fmt: skip
    assert plain.reranker.batcher is None
    for r, a in zip(requests, serial, strict=True):
        ids, scores = _ranking(plain.search(r))
        assert ids == _ranking(a)[0] and scores == pytest.approx(_ranking(a)[1], abs=1e-4)


def test_a_cancelled_search_stops_between_stages(world_engine):
    from engine.errors import SearchCancelled

    with pytest.raises(SearchCancelled):
        world_engine.searcher.search({"query": QUERIES[0], "mode": "rerank"}, cancelled=lambda: True)


def test_a_warm_up_runs_once_on_every_light_lane_thread():
    worker = Admission(4, threads=2, light_threads=3)
    seen = []
    try:
        assert worker.on_each_light_thread(lambda: seen.append(threading.get_ident()), timeout_s=10) == 3
        assert len(seen) == 3 and len(set(seen)) == 3
        assert worker.running == 0  # outside the queue accounting
    finally:
        worker.shutdown()
    none = Admission(4, threads=2)
    try:
        assert none.on_each_light_thread(lambda: seen.append("no lane")) == 0 and "no lane" not in seen
    finally:
        none.shutdown()
