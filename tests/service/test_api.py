"""The search API through real HTTP (uvicorn on loopback) over indexes built by `indexer build`."""

from __future__ import annotations

import json
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tests.service.conftest import NUM_VIDEOS, live_server, wait_until_ready

QUERY = "a red block slides across the sea"
STAGES = ("query_embed", "faiss", "selection", "decode", "encode", "head", "total")


def _no_internals(text: str) -> None:
    for marker in ("Traceback", "/tmp", "/work", ".py", 'File "'):
        assert marker not in text, f"{marker!r} leaked into a response: {text[:300]}"


def test_readiness_before_load_then_ready(make_settings):
    from engine.loader import load_engine
    from service.app import create_app

    settings = make_settings()
    gate = threading.Event()

    def slow_loader():
        assert gate.wait(30)
        return load_engine(settings.engine_config())

    app = create_app(settings, engine=slow_loader)
    with live_server(app, wait_ready=False) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        r = client.get("/readyz")
        assert r.status_code == 503 and r.json()["status"] == "loading"
        r = client.post("/search", json={"query": QUERY})
        assert r.status_code == 503 and r.json()["error"]["code"] == "not_ready"
        assert r.headers["x-request-id"] == r.json()["request_id"]
        assert client.get("/videos/vid0").status_code == 503
        gate.set()
        body = wait_until_ready(client)
        assert body["status"] == "ready" and body["embedder"] == "qaslr" and body["videos"] == NUM_VIDEOS
        assert body["random_weights"] is True and "meaningless" in body["warning"]
        assert client.post("/search", json={"query": QUERY}).status_code == 200


def test_failed_load_is_reported_without_internals(make_settings, tmp_path):
    from service.app import create_app

    app = create_app(make_settings(index=tmp_path / "no-such-index"))
    with live_server(app, wait_ready=False) as client:
        deadline = time.monotonic() + 30
        while (body := client.get("/readyz").json())["status"] == "loading" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert body["status"] == "failed" and "index" in body["error"]
        r = client.post("/search", json={"query": QUERY})
        assert r.status_code == 503
        _no_internals(r.text + client.get("/readyz").text)


def test_indexed_vs_rerank(server):
    indexed = server.post(
        "/search", json={"query": QUERY, "mode": "indexed", "top_k": 8, "shortlist": 8}
    ).json()
    rerank = server.post(  # the heavy tier on every candidate (the cascade's heavy = R)
        "/search", json={"query": QUERY, "mode": "rerank", "top_k": 8, "shortlist": 8, "heavy": 8}
    ).json()
    assert indexed["mode"] == "indexed" and rerank["mode"] == "rerank"

    # stage 1: FAISS order, score == stage-1 score, ranks 1..n
    s1 = [r["stage1_score"] for r in indexed["results"]]
    assert [r["stage1_rank"] for r in indexed["results"]] == list(range(1, NUM_VIDEOS + 1))
    assert s1 == sorted(s1, reverse=True)
    assert all(r["score"] == r["stage1_score"] and not r["reranked"] for r in indexed["results"])

    # stage 2: the same candidates with the same stage-1 facts, ordered by the new score
    by_id = {r["video_id"]: r for r in indexed["results"]}
    assert {r["video_id"] for r in rerank["results"]} == set(by_id)
    for r in rerank["results"]:
        assert r["reranked"] and r["tier"] == "head"
        assert r["stage1_rank"] == by_id[r["video_id"]]["stage1_rank"]
        assert r["stage1_score"] == pytest.approx(by_id[r["video_id"]]["stage1_score"], abs=1e-6)
    scores = [r["score"] for r in rerank["results"]]
    assert scores == sorted(scores, reverse=True)
    assert any(r["score"] != pytest.approx(r["stage1_score"], abs=1e-6) for r in rerank["results"])

    for stage in STAGES:
        assert rerank["timings_ms"][stage] > 0, stage
    assert indexed["timings_ms"]["encode"] == 0 and indexed["timings_ms"]["decode"] == 0
    assert rerank["cache"]["misses"] == 8 * rerank["frames"] == rerank["cache"]["decoded_frames"]


def test_stage1_miss_stays_a_miss(server):
    indexed = server.post("/search", json={"query": QUERY, "mode": "indexed", "top_k": 3}).json()
    rerank = server.post("/search", json={"query": QUERY, "top_k": 3, "shortlist": 3}).json()
    assert {r["video_id"] for r in rerank["results"]} == {r["video_id"] for r in indexed["results"]}
    assert max(r["stage1_rank"] for r in rerank["results"]) == 3


def test_evidence_maps_to_real_frames(server, qaslr_index):
    from indexer.store import IndexReader

    body = server.post("/search", json={"query": QUERY, "top_k": 4, "frames": 6}).json()
    with IndexReader(qaslr_index) as index:
        for r in body["results"]:
            rec = index.video(r["video_id"])
            bank = index.frame_bank(r["video_id"])
            frames = r["evidence"]["frames"]
            assert len(frames) == 6
            idx = [f["frame_index"] for f in frames]
            assert idx == sorted(idx) and len(set(idx)) == 6  # chronological, no repeats
            assert set(idx) <= set(bank.frame_indices.tolist())  # chosen among the bank's candidates
            for f in frames:
                assert 0 <= f["frame_index"] < rec.num_frames
                assert f["timestamp_s"] == pytest.approx(f["frame_index"] / rec.fps)
            moment = r["evidence"]["moment"]
            assert moment["source"] in ("relevance", "refined")  # one rule for every tier
            assert 0 <= moment["start_s"] < moment["end_s"] <= rec.duration_s + 1e-9
            if r["tier"] == "frame":  # its evidence is the bank's top frames: the moment holds the best
                best = max(frames, key=lambda f: f["relevance"])
                assert moment["start_s"] - 1e-9 <= best["timestamp_s"] < moment["end_s"]
    off = server.post("/search", json={"query": QUERY, "include_evidence": False}).json()
    assert all(r["evidence"] is None for r in off["results"])


@pytest.mark.parametrize("kind", ["qaslr", "oneshot"])
def test_stage2_score_equals_recomputation(
    kind, make_settings, tiny_checkpoint, tiny_head, qaslr_index, oneshot_index
):
    """Recompute s_ij outside the service: the same selection (Q-Frame over the stored bank, seeded
    by (7, the query, the video) as training seeds it), frames decoded straight from the file, the
    public VideoEncoder, q·v."""
    import torch

    from indexer.store import IndexReader
    from indexer.video import decode_frames
    from models.backbone import VideoClip, load_backbone
    from models.head import load_head
    from models.selection import query_aware_positions, query_key, selection_seed
    from models.streaming import StreamingConfig, VideoEncoder
    from service.app import create_app

    index_dir = qaslr_index if kind == "qaslr" else oneshot_index
    settings = make_settings(index=index_dir, head=tiny_head if kind == "qaslr" else None)
    with live_server(create_app(settings)) as client:
        body = client.post(  # the heavy tier on the frame tier's top 3 (only on request by default)
            "/search", json={"query": QUERY, "top_k": 3, "frames": 8, "seed": 7, "heavy_margin": 2}
        ).json()
    assert body["embedder"] == kind

    backbone = load_backbone(tiny_checkpoint)
    with IndexReader(index_dir) as index:
        m = index.manifest
        head = load_head(tiny_head) if kind == "qaslr" else None
        config = StreamingConfig(max_frames=m.max_frames, clip_len=m.clip_len, max_evidence=m.max_evidence)
        encoder = VideoEncoder(backbone, head, config=config, instruction=m.instruction)
        q = encoder.embed_queries([QUERY])[0]
        for r in body["results"]:
            rec, bank = index.video(r["video_id"]), index.frame_bank(r["video_id"])
            relevance = np.asarray(bank.embeddings, dtype=np.float32) @ q.numpy()
            positions = query_aware_positions(
                relevance, 8, seed=selection_seed(7, query_key(QUERY), r["video_id"])
            )
            chosen = bank.frame_indices[positions]
            assert [f["frame_index"] for f in r["evidence"]["frames"]] == chosen.tolist()
            assert [f["relevance"] for f in r["evidence"]["frames"]] == pytest.approx(
                relevance[positions], abs=1e-5
            )
            frames = decode_frames(rec.path, chosen, size=backbone.frame_shape(rec.width, rec.height))
            (emb,) = encoder.encode([VideoClip(frames, chosen, rec.fps)], texts=[QUERY])
            expected = float(torch.dot(emb.final, q))
            assert r["score"] == pytest.approx(expected, abs=1e-4)


def test_filters(server):
    def ids(flt, **extra):
        r = server.post("/search", json={"query": QUERY, "top_k": 8, "filter": flt, **extra})
        assert r.status_code == 200, r.text
        return [(x["video_id"], x["metadata"]) for x in r.json()["results"]]

    got = ids({"split": "test"})
    assert len(got) == 4 and all(meta["split"] == "test" for _, meta in got)
    got = ids({"rank": {"gte": 5}}, mode="indexed")
    assert sorted(v for v, _ in got) == ["vid5", "vid6", "vid7"]
    got = ids({"topic": {"in": ["sea", "forest"]}, "split": "train"})
    assert sorted(v for v, _ in got) == ["vid0", "vid2", "vid6"]
    got = ids({"duration_s": {"lt": 3.6}})  # 36 and 42 frames at 12 fps
    assert sorted(v for v, _ in got) == ["vid0", "vid1"]
    assert ids({"split": "nope"}) == []
    r = server.post("/search", json={"query": QUERY, "filter": {"rank": {"between": [1, 2]}}})
    assert r.status_code == 422 and r.json()["error"]["field"] == "filter"


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"query": "   "}, "query"),
        ({}, "query"),
        ({"query": "x" * 1001}, "query"),
        ({"query": "ok", "top_k": 0}, "top_k"),
        ({"query": "ok", "top_k": 101}, "top_k"),
        ({"query": "ok", "shortlist": 201}, "shortlist"),
        ({"query": "ok", "mode": "fast"}, "mode"),
        ({"query": "ok", "frames": 17}, "frames"),  # the server's max_frames is 16
        ({"query": "ok", "frames": 0}, "frames"),
        ({"query": "ok", "filter": ["split"]}, "filter"),
        ({"query": "ok", "include_evidence": "maybe"}, "include_evidence"),
        ({"query": "ok", "topk": 3}, "topk"),
    ],
)
def test_validation_errors_name_the_field(server, payload, field):
    r = server.post("/search", json=payload)
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "validation_error" and err["field"] == field and field in err["message"]
    assert r.headers["x-request-id"] == r.json()["request_id"]
    _no_internals(r.text)


def test_bad_json_and_unknown_routes(server):
    r = server.post("/search", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422 and "request_id" in r.json()
    r = server.get("/videos/does-not-exist")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    assert server.get("/nowhere").status_code == 404
    assert server.get("/search").status_code == 405


def test_video_metadata(server):
    r = server.get("/videos/vid3")
    assert r.status_code == 200
    body = r.json()
    assert body["metadata"] == {"split": "test", "rank": 3, "topic": "sea"}
    assert body["fps"] == pytest.approx(12) and body["num_frames"] == 54 and "path" not in body
    _no_internals(r.text)


def test_request_id_is_echoed_or_generated(server):
    r = server.get("/healthz", headers={"X-Request-ID": "client-42"})
    assert r.headers["x-request-id"] == "client-42"
    r = server.get("/healthz", headers={"X-Request-ID": "bad id; with spaces"})
    assert r.headers["x-request-id"] != "bad id; with spaces" and len(r.headers["x-request-id"]) == 16
    r = server.post("/search", json={"query": QUERY, "mode": "indexed"}, headers={"X-Request-ID": "abc"})
    assert r.json()["request_id"] == "abc" == r.headers["x-request-id"]


def test_queue_full_returns_429(make_settings):
    from service.app import create_app

    app = create_app(make_settings(queue_size=1, request_timeout_s=60))
    with live_server(app) as client:
        state = app.state.qaslr
        release = threading.Event()
        blocker = state.engine.admission.call_soon(lambda: release.wait(60))  # the worker is busy elsewhere
        with ThreadPoolExecutor(2) as pool:
            admitted = [
                pool.submit(client.post, "/search", json={"query": QUERY, "mode": "indexed"})
                for _ in range(2)
            ]
            deadline = time.monotonic() + 10
            while state.engine.admission.depth < 2:  # capacity = queue_size + 1 = 2
                assert time.monotonic() < deadline
                time.sleep(0.01)
            r = client.post("/search", json={"query": QUERY, "mode": "indexed"})
            assert r.status_code == 429 and r.json()["error"]["code"] == "queue_full"
            assert r.headers["retry-after"] == "1"
            metrics = client.get("/metrics").text
            assert "qaslr_queue_depth 2.0" in metrics
            release.set()
            assert [f.result().status_code for f in admitted] == [200, 200]
        blocker.result(5)
        assert 'qaslr_rejected_total{reason="queue_full"} 1.0' in client.get("/metrics").text


def test_deadline_returns_503(make_settings):
    from service.app import create_app

    app = create_app(make_settings(request_timeout_s=0.3))
    with live_server(app) as client:
        release = threading.Event()
        blocker = app.state.qaslr.engine.admission.call_soon(lambda: release.wait(60))
        t0 = time.monotonic()
        r = client.post("/search", json={"query": QUERY})
        assert time.monotonic() - t0 < 10  # answered, not hung
        assert r.status_code == 503 and r.json()["error"]["code"] == "deadline_exceeded"
        assert "0.3 s deadline" in r.json()["error"]["message"]
        release.set()
        blocker.result(5)
        deadline = time.monotonic() + 10
        while app.state.qaslr.engine.admission.depth:  # the abandoned job is skipped, not run
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert client.post("/search", json={"query": QUERY, "mode": "indexed"}).status_code == 200


def test_api_keys(make_settings):
    from service.app import create_app

    app = create_app(make_settings(api_keys="alpha-key, beta-key"))
    with live_server(app) as client:
        payload = {"query": QUERY, "mode": "indexed"}
        r = client.post("/search", json=payload)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert (
            client.post("/search", json=payload, headers={"Authorization": "Bearer wrong"}).status_code == 401
        )
        assert client.post("/search", json=payload, headers={"X-API-Key": "alpha-key-"}).status_code == 401
        assert (
            client.post("/search", json=payload, headers={"Authorization": "Bearer beta-key"}).status_code
            == 200
        )
        assert client.post("/search", json=payload, headers={"X-API-Key": "alpha-key"}).status_code == 200
        assert client.get("/videos/vid1").status_code == 401
        assert client.get("/videos/vid1", headers={"X-API-Key": "beta-key"}).status_code == 200
        assert client.get("/healthz").status_code == 200 and client.get("/readyz").status_code == 200


def test_metrics_after_searches(server):
    server.post("/search", json={"query": QUERY, "top_k": 2, "shortlist": 2, "heavy": 2})
    server.post("/search", json={"query": QUERY, "top_k": 2, "shortlist": 2, "heavy": 2})  # warm: LRU hits
    server.post("/search", json={"query": QUERY, "mode": "indexed"})
    server.post("/search", json={"query": ""})
    text = server.get("/metrics").text
    assert 'qaslr_http_requests_total{mode="rerank",route="/search",status="200"} 2.0' in text
    assert 'qaslr_http_requests_total{mode="indexed",route="/search",status="200"} 1.0' in text
    assert 'route="/search",status="422"' in text
    assert 'qaslr_search_stage_seconds_count{stage="encode"} 2.0' in text
    assert "qaslr_frame_cache_hit_ratio 0.5" in text
    assert "qaslr_redis_errors_total 0.0" in text and "qaslr_ready 1.0" in text


def test_internal_error_is_generic(make_settings, qaslr_index, tmp_path):
    """A corrupt index discovered mid-request: a 500 with the request id and nothing internal."""
    from service.app import create_app

    copy = shutil.copytree(qaslr_index, tmp_path / "index")
    app = create_app(make_settings(index=copy))
    with live_server(app) as client:
        for bank in (copy / "bank").glob("*.npy"):
            bank.unlink()
        r = client.post("/search", json={"query": QUERY}, headers={"X-Request-ID": "boom-1"})
        assert r.status_code == 500
        assert r.json()["error"]["code"] == "internal_error" and r.json()["request_id"] == "boom-1"
        _no_internals(r.text)
        assert client.get("/healthz").status_code == 200


def test_openapi_documents_the_surface(server):
    spec = server.get("/openapi.json").json()
    assert {"/search", "/videos/{video_id}", "/healthz", "/readyz", "/metrics"} <= set(spec["paths"])
    req = spec["components"]["schemas"]["SearchRequest"]
    assert req["examples"][0]["query"] and req["properties"]["query"]["maxLength"] == 1000
    assert "429" in spec["paths"]["/search"]["post"]["responses"]


def test_candidate_whose_file_vanished_keeps_its_frame_tier_rank(make_settings, qaslr_index, tmp_path):
    """A source file moved after indexing: stage 2 skips that candidate, says so, and still answers."""
    import sqlite3

    from service.app import create_app

    copy = shutil.copytree(qaslr_index, tmp_path / "index")
    with sqlite3.connect(copy / "meta.sqlite") as conn:
        conn.execute("UPDATE videos SET path = ? WHERE id = 'vid2'", (str(tmp_path / "moved.mp4"),))
    with live_server(create_app(make_settings(index=copy))) as client:
        r = client.post("/search", json={"query": QUERY, "top_k": 8, "shortlist": 8, "heavy": 8})
        assert r.status_code == 200
        body = r.json()
    assert [x["video_id"] for x in body["results"]][-1] == "vid2"
    last = body["results"][
        -1
    ]  # the frame tier (its bank is in the index) ranked it; the heavy tier could not
    assert last["tier"] == "frame"
    assert all(x["tier"] == "head" for x in body["results"][:-1])
    assert any("vid2" in w for w in body["warnings"])
    _no_internals(json.dumps(body["warnings"]))
