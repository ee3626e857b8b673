"""The warm-up before ready: /readyz says ready only after one search has gone through every stage
(so a first query costs what later ones do: benchmarks/bench_first_query.py measures that)."""

from __future__ import annotations

import threading

from tests.service.conftest import live_server


def _spy(monkeypatch):
    from engine import Engine

    calls, release = [], threading.Event()
    original = Engine.warm_up

    def warm_up(self):
        calls.append("started")
        assert release.wait(60)
        seconds = original(self)
        calls.append("done")
        return seconds

    monkeypatch.setattr(Engine, "warm_up", warm_up)
    return calls, release


def test_ready_only_after_the_warm_up_searched_once(make_settings, monkeypatch):
    from service.app import create_app

    calls, release = _spy(monkeypatch)
    app = create_app(make_settings(warm_up=True))
    with live_server(app, wait_ready=False) as client:
        deadline = threading.Event()
        while "started" not in calls:  # the engine is loaded and warming up
            assert not deadline.wait(0.05) and len(calls) < 2
        assert client.get("/readyz").status_code == 503  # not ready while it warms up
        release.set()
        for _ in range(600):
            if client.get("/readyz").status_code == 200:
                break
            deadline.wait(0.1)
        assert calls == ["started", "done"]
        r = client.post("/search", json={"query": "a red block", "top_k": 2})
        assert r.status_code == 200 and r.json()["results"]


def test_no_warm_up_when_it_is_turned_off(make_settings, monkeypatch):
    from service.app import create_app

    calls, release = _spy(monkeypatch)
    release.set()
    with live_server(create_app(make_settings(warm_up=False))) as client:
        assert client.get("/readyz").status_code == 200
    assert calls == []
