"""The frame cache: value encoding, the in-process LRU, and Redis (the machine's real server for the
warm-cache test; a throwaway redis-server of our own for the outage test)."""

from __future__ import annotations

import time
import uuid

import numpy as np
import pytest

from tests.helpers import free_port
from tests.service.conftest import live_server

QUERY = "a red block slides across the sea"
SHARED_REDIS = "redis://127.0.0.1:6379/0"


def test_frame_value_roundtrip_is_exact_and_self_describing():
    from engine.cache import CODEC_RAW, CODEC_ZLIB, decode_frame, encode_frame

    frame = np.random.default_rng(0).integers(0, 256, (64, 48, 3), dtype=np.uint8)
    for codec in (None, CODEC_RAW, CODEC_ZLIB):
        back = decode_frame(encode_frame(frame, codec=codec))
        assert back.shape == frame.shape and np.array_equal(back, frame)
    value = encode_frame(frame)
    for bad in (b"", b"garbage-bytes-here", value[:-1], b"XX" + value[2:]):
        with pytest.raises(ValueError):
            decode_frame(bad)


def test_lru_evicts_least_recently_used():
    from engine.cache import InProcessLRUCache

    cache = InProcessLRUCache(max_items=2)
    a, b, c = (np.full((2, 2, 3), v, np.uint8) for v in (1, 2, 3))
    cache.set_many({"a": a, "b": b})
    assert cache.get_many(["a"])[0] is not None  # a is now the most recent
    cache.set_many({"c": c})
    got = cache.get_many(["a", "b", "c"])
    assert got[1] is None and np.array_equal(got[0], a) and np.array_equal(got[2], c)
    assert InProcessLRUCache(max_items=0).get_many(["a"]) == [None]
    cache.clear()  # a benchmark's cold query starts from nothing
    assert len(cache) == 0 and cache.get_many(["a", "c"]) == [None, None]


@pytest.fixture
def shared_redis_prefix():
    """A unique key prefix on the machine's Redis; every key under it is deleted afterwards."""
    redis = pytest.importorskip("redis")
    client = redis.Redis.from_url(SHARED_REDIS)
    try:
        client.ping()
    except redis.RedisError:
        pytest.skip("no Redis server at 127.0.0.1:6379")
    prefix = f"qaslr-test:{uuid.uuid4().hex[:10]}:"
    yield client, prefix
    keys = list(client.scan_iter(match=prefix + "*", count=500))
    if keys:
        client.delete(*keys)
    client.close()


def test_warm_second_query_decodes_nothing(make_settings, shared_redis_prefix):
    from service.app import create_app

    client, prefix = shared_redis_prefix
    # the heavy tier's frames only: no moment refinement reading more
    settings = make_settings(redis_url=SHARED_REDIS, cache_prefix=prefix, cache_ttl_s=600, refine_moments=0)
    payload = {"query": QUERY, "top_k": 4, "shortlist": 4, "heavy": 4, "frames": 6}
    app = create_app(settings)
    with live_server(app) as http:
        assert http.get("/readyz").json()["cache"] == "redis"
        cold = http.post("/search", json=payload).json()
        warm = http.post("/search", json=payload).json()
        searcher = app.state.qaslr.engine.searcher
    assert cold["cache"]["backend"] == "redis"
    assert cold["cache"]["misses"] == 24 == cold["cache"]["decoded_frames"] and cold["cache"]["hits"] == 0
    assert (
        warm["cache"]["decoded_frames"] == 0 and warm["cache"]["misses"] == 0 and warm["cache"]["hits"] == 24
    )
    assert searcher.decoded_frames == 24  # the searcher's own count of frames read from files
    # a lossless cache: warm scores are the cold scores, bit for bit
    assert [(r["video_id"], r["score"]) for r in warm["results"]] == [
        (r["video_id"], r["score"]) for r in cold["results"]
    ]
    keys = list(client.scan_iter(match=prefix + "*"))
    assert len(keys) == 24
    assert 0 < client.ttl(keys[0]) <= 600
    fingerprint, frame_index, size = keys[0].decode()[len(prefix) :].split(":")
    assert size == "64x32" and int(frame_index) >= 0 and len(fingerprint) >= 16  # 96x64 videos, 64² budget


def test_redis_stopped_mid_run_still_answers(make_settings, own_redis, caplog):
    from service.app import create_app

    proc, port = own_redis
    settings = make_settings(redis_url=f"redis://127.0.0.1:{port}/0", redis_retry_s=0.2)
    payload = {"query": QUERY, "top_k": 3, "shortlist": 3, "heavy": 3, "frames": 5}
    with live_server(create_app(settings)) as http:
        first = http.post("/search", json=payload).json()
        assert first["cache"]["misses"] == 15 and first["cache"]["errors"] == 0
        warm = http.post("/search", json=payload).json()
        assert warm["cache"]["hits"] == 15
        proc.kill()  # Redis dies while the service runs
        proc.wait(10)
        with caplog.at_level("WARNING", logger="engine.cache"):
            r = http.post("/search", json=payload)
        assert r.status_code == 200
        down = r.json()
        assert down["cache"]["decoded_frames"] == 15 and down["cache"]["errors"] >= 1
        assert [x["score"] for x in down["results"]] == [x["score"] for x in first["results"]]
        assert any("Redis frame cache" in rec.message for rec in caplog.records)
        time.sleep(0.25)  # past the retry window: Redis is tried again, fails again, still answers
        assert http.post("/search", json=payload).status_code == 200
        metrics = http.get("/metrics").text
        errors = float(
            next(
                line.split()[1]
                for line in metrics.splitlines()
                if line.startswith("qaslr_redis_errors_total")
            )
        )
        assert errors >= 2


def test_unreachable_redis_at_startup(make_settings):
    from service.app import create_app

    settings = make_settings(redis_url=f"redis://127.0.0.1:{free_port()}/0")
    with live_server(create_app(settings)) as http:
        r = http.post("/search", json={"query": QUERY, "top_k": 2, "shortlist": 2, "heavy": 2, "frames": 4})
        assert r.status_code == 200 and r.json()["cache"]["decoded_frames"] == 8
        assert "qaslr_redis_errors_total 0.0" not in http.get("/metrics").text


def test_redis_dying_between_read_and_write_of_one_request(own_redis):
    """The read succeeded, Redis dies, the write of the decoded frames fails: no exception, counted."""
    from engine.cache import RedisFrameCache

    proc, port = own_redis
    seen = []
    cache = RedisFrameCache(f"redis://127.0.0.1:{port}/0", ttl_s=60, retry_s=0.0, on_error=seen.append)
    frame = np.zeros((4, 4, 3), np.uint8)
    cache.set_many({"a": frame})
    assert np.array_equal(cache.get_many(["a", "b"])[0], frame)
    proc.kill()
    proc.wait(10)
    cache.set_many({"b": frame})  # must not raise
    assert cache.errors == 1 and len(seen) == 1
    assert cache.get_many(["a"]) == [None] and cache.errors == 2
