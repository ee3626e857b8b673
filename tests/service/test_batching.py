"""Many users at once: search threads, the stage-2 batcher, queue timings and metrics over HTTP."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.service.conftest import live_server

QUERY = "a bright object moving"


def _metric(text: str, name: str) -> float:
    found = re.search(rf"^{re.escape(name)} ([0-9.e+-]+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def test_concurrent_searches_are_batched_and_timed(make_settings):
    from service.app import create_app

    app = create_app(make_settings(batch_max_wait_ms=300, batch_max_frames=1024, batch_workers=1))
    with live_server(app) as client:
        state = app.state.qaslr
        assert state.engine.admission.threads == state.settings.queue_size + 1
        body = {"mode": "rerank", "shortlist": 4, "heavy": 4, "top_k": 4}
        with ThreadPoolExecutor(4) as pool:
            answers = list(
                pool.map(lambda i: client.post("/search", json={**body, "query": f"{QUERY} {i}"}), range(4))
            )
        assert [r.status_code for r in answers] == [200] * 4
        for r in answers:
            t = r.json()["timings_ms"]
            assert t["encode"] > 0 and t["heavy_queue"] >= 0 and t["queue"] >= 0
            assert t["total"] >= t["queue"] + t["heavy_queue"] + t["encode"]
        metrics = client.get("/metrics").text
        assert _metric(metrics, 'qaslr_batch_clips_count{kind="clips"}') >= 1
        # four requests of four clips each in fewer calls than one per request
        clips = 'qaslr_batch_requests_{}{{kind="clips"}}'
        assert _metric(metrics, clips.format("sum")) > _metric(metrics, clips.format("count"))
        assert _metric(metrics, 'qaslr_queue_seconds_count{queue="admission"}') == 4
        assert _metric(metrics, 'qaslr_queue_seconds_count{queue="heavy"}') >= 1
        # their queries, and the source frames of their top moments, in shared calls of their own
        for kind in ("queries", "images"):
            calls, searches = (
                _metric(metrics, f'qaslr_batch_requests_{s}{{kind="{kind}"}}') for s in ("count", "sum")
            )
            assert 1 <= calls < searches <= 4
        assert _metric(metrics, 'qaslr_batch_clips_sum{kind="queries"}') == 4
        for r in answers:
            t = r.json()["timings_ms"]
            assert t["query_queue"] > 0 and t["query_embed"] > 0 and t["refine_queue"] >= 0
        # a stage-1-only search embeds its own query: it never waits in the batcher
        r = client.post("/search", json={"query": QUERY, "mode": "indexed"})
        assert r.status_code == 200 and r.json()["timings_ms"]["query_queue"] == 0
        assert _metric(client.get("/metrics").text, 'qaslr_batch_clips_sum{kind="queries"}') == 4


def test_batching_off_is_the_single_model_thread(make_settings):
    from service.app import create_app

    app = create_app(make_settings(batching=False))
    with live_server(app) as client:
        state = app.state.qaslr
        assert state.engine.admission.threads == 1 and state.engine.batcher is None
        r = client.post("/search", json={"query": QUERY, "shortlist": 3, "heavy": 3})
        assert r.status_code == 200 and r.json()["timings_ms"]["heavy_queue"] == 0
        assert r.json()["timings_ms"]["encode"] > 0


def test_a_client_that_goes_away_stops_its_search(make_settings):
    from service.app import create_app

    app = create_app(make_settings(request_timeout_s=60))
    with live_server(app) as client:
        state = app.state.qaslr
        release = threading.Event()
        blocker = state.engine.admission.call_soon(lambda: release.wait(60))  # the search waits for admission
        with pytest.raises(httpx.TimeoutException):
            client.post("/search", json={"query": QUERY, "heavy": 3}, timeout=0.5)  # gives up
        time.sleep(0.5)  # the server notices the closed connection
        release.set()
        blocker.result(5)
        deadline = time.monotonic() + 15
        while 'qaslr_rejected_total{reason="cancelled"} 1.0' not in client.get("/metrics").text:
            assert time.monotonic() < deadline, "the abandoned search was not stopped"
            time.sleep(0.05)
        assert (
            _metric(client.get("/metrics").text, 'qaslr_batch_clips_count{kind="clips"}') == 0
        )  # never encoded
        assert client.post("/search", json={"query": QUERY, "mode": "indexed"}).status_code == 200


@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs POSIX signals")
def test_a_search_whose_model_process_dies_gets_a_503_and_the_next_one_is_answered(make_settings):
    from service.app import create_app

    app = create_app(make_settings(model_processes=1))
    with live_server(app) as client:
        body = {"query": QUERY, "mode": "rerank", "shortlist": 2, "top_k": 2}
        assert client.post("/search", json=body).status_code == 200
        (backend,) = app.state.qaslr.engine.batcher.backends
        pid = backend.pid
        os.kill(pid, signal.SIGSTOP)  # it holds the next batch until it is killed
        answer = {}
        search = threading.Thread(target=lambda: answer.update(r=client.post("/search", json=body)))
        search.start()
        stop = time.monotonic() + 30
        while not backend._lock.locked() and time.monotonic() < stop:  # the search's batch is in it
            time.sleep(0.02)
        time.sleep(0.2)
        os.kill(pid, signal.SIGKILL)
        search.join(30)
        r = answer["r"]
        assert r.status_code == 503 and r.json()["error"]["code"] == "model_restarting"
        assert "Traceback" not in r.text and r.headers["Retry-After"]
        again = client.post("/search", json=body)  # a fresh model process answers it
        assert again.status_code == 200 and backend.pid != pid and backend.starts == 2
