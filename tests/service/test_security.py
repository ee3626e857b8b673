"""Security properties, proved against real servers on 127.0.0.1:

- ids and filters cannot reach files outside the index;
- request bodies and query lengths are bounded;
- API keys are compared in constant time;
- nothing in responses or logs leaks a filesystem path or a key.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.helpers import free_port, wait_until_ready

QUERY = "a red block slides across the sea"


# -- ids and filters --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "video_id",
    [
        "../../../../etc/passwd",
        "..%2F..%2Fetc%2Fpasswd",
        "%2Fetc%2Fpasswd",
        "vid0/../../meta.sqlite",
        "bank",
        "%00",
    ],
)
def test_video_ids_cannot_reach_files(server, video_id):
    r = server.get(f"/videos/{video_id}")
    assert r.status_code in (404, 422), r.text
    assert "root:" not in r.text and "SQLite format" not in r.text


def test_filters_cannot_reach_paths_or_attributes(server):
    def ids(flt):
        r = server.post("/search", json={"query": QUERY, "mode": "indexed", "top_k": 8, "filter": flt})
        assert r.status_code == 200, r.text
        return [x["video_id"] for x in r.json()["results"]]

    # a record's path, fingerprint and Python attributes are not filter fields: nothing matches
    assert ids({"path": {"gte": "/"}}) == [] and ids({"path": {"lt": "~"}}) == []
    assert ids({"fingerprint": {"gte": ""}}) == [] and ids({"__class__": {"gte": ""}}) == []
    assert ids({"__dict__": None}) == [] and ids({"error": None}) == []
    assert len(ids({"duration_s": {"gte": 0}})) == 8  # the built-in fields do work


def test_a_store_cannot_point_the_reader_outside_the_index(qaslr_index, tmp_path):
    from indexer.maintenance import verify_index
    from indexer.store import IndexFormatError, IndexReader

    copy = shutil.copytree(qaslr_index, tmp_path / "index")
    outside = tmp_path / "secret.npy"
    outside.write_bytes((copy / "bank" / "bank-00000001.npy").read_bytes())
    with sqlite3.connect(copy / "meta.sqlite") as conn:
        conn.execute("UPDATE videos SET bank_file = ? WHERE id = 'vid0'", ("../secret.npy",))
    with pytest.raises(IndexFormatError, match="invalid frame-bank file"):
        IndexReader(copy)
    report = verify_index(copy)
    assert not report.ok and any("invalid frame bank file" in e for e in report.errors), report.errors


# -- bounded requests --------------------------------------------------------------------------------
def test_request_bodies_and_lengths_are_bounded(server):
    from core.config import MAX_BODY_BYTES
    from service.routers.search import SEARCH_BODY_BYTES  # search bodies may carry an image query

    big = b'{"query": "' + b"x" * MAX_BODY_BYTES + b'"}'
    r = server.post("/admin/reload-index", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"
    big = b'{"query": "' + b"x" * SEARCH_BODY_BYTES + b'"}'
    for route in ("/search", "/search/stream"):
        r = server.post(route, content=big, headers={"content-type": "application/json"})
        assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"

    def chunks():  # no Content-Length: counted as it streams in
        yield b'{"query": "'
        for _ in range(SEARCH_BODY_BYTES // 65536 + 2):
            yield b"x" * 65536
        yield b'"}'

    r = server.post("/search", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413, r.text
    assert server.post("/search", json={"query": "x" * 1001}).status_code == 422
    assert (
        server.post("/search", json={"query": QUERY, "filter": {f"k{i}": 1 for i in range(33)}}).status_code
        == 422
    )
    assert (
        server.post("/search", json={"query": QUERY, "filter": {"k": {"in": list(range(257))}}}).status_code
        == 422
    )
    assert server.post("/search", json={"query": QUERY, "filter": {"k" * 129: 1}}).status_code == 422
    assert server.get("/videos/" + "v" * 513).status_code == 422
    # a request line far beyond the HTTP parser's limits (raw: HTTP clients refuse to send it)
    host, port = server.base_url.host, server.base_url.port
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(b"GET /videos/" + b"v" * 200_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            head = sock.recv(64)
        except (ConnectionResetError, TimeoutError):
            head = b""
    assert head == b"" or re.match(rb"HTTP/1\.1 4\d\d", head), head
    assert server.get("/healthz").status_code == 200  # and the server is fine


# -- keys --------------------------------------------------------------------------------------------
def test_keys_are_compared_in_constant_time(monkeypatch):
    import hmac

    from service import auth

    calls = []
    real = hmac.compare_digest

    def spy(a, b):
        calls.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", spy)
    keys = ["first-key", "second-much-longer-key", "k3"]
    assert auth.key_matches("second-much-longer-key", keys)
    assert len(calls) == 3  # every configured key is compared, even after a match
    calls.clear()
    assert not auth.key_matches("x", keys) and len(calls) == 3
    assert not auth.key_matches("first-key ", keys)
    src = Path(auth.__file__).read_text()
    assert "==" not in src.split("def key_matches", 1)[1].split("async def", 1)[0]


# -- nothing leaks -----------------------------------------------------------------------------------
def test_no_path_or_key_in_responses_or_logs(qaslr_index, tiny_checkpoint, tiny_head, tmp_path):
    index = shutil.copytree(qaslr_index, tmp_path / "private-index-dir")
    with sqlite3.connect(index / "meta.sqlite") as conn:  # a source file moved: stage 2 fails to decode it
        conn.execute("UPDATE videos SET path = ? WHERE id = 'vid2'", (str(tmp_path / "moved" / "v2.mp4"),))
    key, password = "sk-test-9f8e7d6c5b4a", "hunter2-redis-secret"
    port, dead_redis = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("QASLR_") and k != "REDIS_URL"}
    env.update(
        OMP_NUM_THREADS="1", QASLR_API_KEYS=key, REDIS_URL=f"redis://:{password}@127.0.0.1:{dead_redis}/0"
    )
    cmd = [
        str(Path(sys.executable).parent / "qaslr"), "--log-level", "DEBUG", "serve", "--index", str(index),
        "--model", str(tiny_checkpoint), "--head", str(tiny_head), "--port", str(port), "--max-frames", "8",
        "--default-frames", "4",
    ]  # fmt: skip
    log = tmp_path / "server.log"
    url = f"http://127.0.0.1:{port}"
    responses = []
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until_ready(proc, url, log.read_text, 90)
        auth = {"Authorization": f"Bearer {key}"}
        calls = [
            ("GET", "/readyz", None, {}),
            ("POST", "/search", {"query": QUERY}, {}),  # 401
            ("POST", "/search", {"query": QUERY}, {"X-API-Key": key + "x"}),  # 401
            (
                "POST",
                "/search",
                {"query": QUERY, "top_k": 8, "shortlist": 8, "heavy": 8},
                auth,
            ),  # decode failure on vid2
            ("POST", "/search", {"query": QUERY, "filter": {"x": {"bad": 1}}}, auth),  # 422
            ("GET", "/videos/vid2", None, auth),
            ("GET", "/videos/../../etc", None, auth),
            ("POST", "/admin/reload-index", None, auth),
            ("GET", "/metrics", None, {}),
            ("GET", "/openapi.json", None, {}),
        ]
        for method, path, body, headers in calls:
            r = httpx.request(method, url + path, json=body, headers=headers, timeout=60)
            responses.append(r)
        assert responses[1].status_code == 401 and responses[2].status_code == 401
        assert responses[3].status_code == 200 and any("vid2" in w for w in responses[3].json()["warnings"])
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    text = log.read_text()
    assert "stage 2 skipped for vid2" in text and "Redis" in text  # the events were logged...
    secrets = [
        key,
        password,
        str(tmp_path),
        str(index),
        str(tiny_checkpoint),
        str(tiny_head),
        "/tmp/",
        "/work/",
    ]
    for r in responses:
        blob = r.text + " ".join(f"{k}: {v}" for k, v in r.headers.items())
        for secret in secrets:
            assert secret not in blob, (
                f"{secret!r} leaked in the answer to {r.request.method} {r.request.url.path}"
            )
    for secret in secrets:  # ...without a path or a key
        assert secret not in text, f"{secret!r} leaked into the log: " + text[text.find(secret) - 200 :][:400]


# -- protected by default (issue 40) ----------------------------------------------------------------
def test_a_server_beyond_loopback_without_keys_refuses_to_start(qaslr_index, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("QASLR_") and k != "REDIS_URL"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])  # this checkout's code
    qaslr = str(Path(sys.executable).parent / "qaslr")
    cmd = [qaslr, "serve", "--index", str(qaslr_index), "--host", "0.0.0.0", "--port", str(free_port())]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "refusing to serve on 0.0.0.0 without API keys" in done.stdout
    assert "--allow-unprotected" in done.stdout


def test_protected_mode_lets_through_loopback_keys_or_an_explicit_choice():
    from service.auth import is_loopback, unprotected_problem
    from service.settings import Settings

    assert all(is_loopback(h) for h in ("127.0.0.1", "::1", "[::1]", "localhost", "127.0.0.2"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "192.168.1.4", "example.org"))
    assert unprotected_problem(Settings(index=None, host="0.0.0.0")) is not None
    assert unprotected_problem(Settings(index=None, host="0.0.0.0", api_keys="k")) is None
    assert unprotected_problem(Settings(index=None, host="0.0.0.0", allow_unprotected=True)) is None
    assert unprotected_problem(Settings(index=None)) is None  # 127.0.0.1 by default


def test_admin_routes_take_an_admin_key_of_their_own(make_settings):
    from service.app import create_app
    from tests.service.conftest import live_server

    with live_server(create_app(make_settings(api_keys=["user-key"], admin_keys=["admin-key"]))) as client:
        user = {"X-API-Key": "user-key"}
        assert (
            client.post("/search", json={"query": QUERY, "mode": "indexed"}, headers=user).status_code == 200
        )
        refused = client.post("/admin/reload-index", headers=user)
        assert refused.status_code == 401 and "admin key" in refused.json()["error"]["message"]
        assert client.post("/admin/reload-index").status_code == 401
        assert client.post("/admin/reload-index", headers={"X-API-Key": "admin-key"}).status_code == 200
        responses = client.get("/openapi.json").json()["paths"]["/admin/reload-index"]["post"]["responses"]
        assert {"401", "403"} <= set(responses)


def test_without_an_admin_key_admin_routes_answer_only_on_loopback(make_settings):
    from service.app import create_app
    from tests.service.conftest import live_server

    # the settings say the server is bound beyond loopback (the test server itself listens on loopback)
    settings = make_settings(host="0.0.0.0", api_keys=["user-key"])
    with live_server(create_app(settings)) as client:
        r = client.post("/admin/reload-index", headers={"X-API-Key": "user-key"})
        assert r.status_code == 403 and "QASLR_ADMIN_KEYS" in r.json()["error"]["message"]
    with live_server(create_app(make_settings(api_keys=["user-key"]))) as client:  # loopback: the API key
        assert client.post("/admin/reload-index").status_code == 401
        assert client.post("/admin/reload-index", headers={"X-API-Key": "user-key"}).status_code == 200
