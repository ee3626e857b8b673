"""Zero-downtime index upgrades: publish a new directory behind a symlink, hot-swap it in."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import httpx
import pytest

from indexer.publish import PublishError, publish
from tests.helpers import ServerProcess, free_port
from tests.service.conftest import live_server


def _ids(client, **extra) -> set[str]:
    r = client.post("/search", json={"query": "moving blocks", "top_k": 10, "mode": "indexed", **extra})
    assert r.status_code == 200, r.text
    return {hit["video_id"] for hit in r.json()["results"]}


def test_publish_refuses_a_real_directory_and_a_broken_index(tmp_path, qaslr_index):
    real = tmp_path / "current"
    real.mkdir()
    with pytest.raises(PublishError, match="not a symlink"):
        publish(qaslr_index, real)
    with pytest.raises(Exception, match="manifest|index"):
        publish(tmp_path / "empty-dir-that-is-no-index", tmp_path / "link")
    assert not (tmp_path / "link").exists()


def test_reload_swaps_index_and_refuses_a_mismatched_one(
    tmp_path, make_settings, qaslr_index, small_index, oneshot_index
):
    from service.app import create_app

    current = tmp_path / "current"
    publish(qaslr_index, current)
    assert os.readlink(current) != str(qaslr_index)  # relative target inside one tree (volumes move)
    app = create_app(make_settings(index=current, api_keys=["adm"]))
    headers = {"X-API-Key": "adm"}
    with live_server(app) as client:
        client.headers.update(headers)
        assert client.get("/readyz").json()["videos"] == 8
        before = _ids(client)
        assert len(before) == 8
        old_searcher = app.state.qaslr.engine.searcher

        assert client.post("/admin/reload-index", headers={"X-API-Key": "wrong"}).status_code == 401
        publish(small_index, current)
        r = client.post("/admin/reload-index")
        assert r.status_code == 200, r.text
        assert r.json()["videos"] == 3
        assert client.get("/readyz").json()["index"] == "small"
        assert _ids(client) == {"vid0", "vid1", "vid2"}
        # a search that started before the swap (it holds the old searcher) still finishes on the old index
        hits = old_searcher.search({"query": "moving blocks", "top_k": 8, "mode": "indexed"}).hits
        assert len(hits) == 8

        # a one-shot index does not match the loaded streaming head: refused, old index keeps serving
        publish(oneshot_index, current)
        r = client.post("/admin/reload-index")
        assert r.status_code == 409
        assert "still serving" in r.json()["error"]["message"]
        assert str(tmp_path) not in r.text
        assert _ids(client) == {"vid0", "vid1", "vid2"}
        metrics = client.get("/metrics").text
        assert "qaslr_index_reloads_total 1.0" in metrics


@pytest.mark.slow
def test_sighup_reloads_under_qaslr_serve(tmp_path, tiny_checkpoint, tiny_head, qaslr_index, small_index):
    current = tmp_path / "current"
    publish(qaslr_index, current)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("QASLR_") and k != "REDIS_URL"}
    env["OMP_NUM_THREADS"] = "1"
    cmd = [
        str(Path(sys.executable).parent / "qaslr"), "serve", "--index", str(current), "--model", str(tiny_checkpoint),
        "--head", str(tiny_head), "--port", str(port),
    ]  # fmt: skip
    with ServerProcess(cmd, env=env, port=port, ready_timeout=90) as server:
        url = server.url
        assert httpx.get(f"{url}/readyz").json()["videos"] == 8
        publish(small_index, current)
        server.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while httpx.get(f"{url}/readyz").json()["videos"] != 3:
            assert time.monotonic() < deadline, "SIGHUP did not reload the index"
            time.sleep(0.2)
        body = json.loads(
            httpx.post(f"{url}/search", json={"query": "x", "mode": "indexed"}, timeout=30).text
        )
        assert {h["video_id"] for h in body["results"]} == {"vid0", "vid1", "vid2"}
