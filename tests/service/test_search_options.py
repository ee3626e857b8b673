"""The search options users of hosted video search expect, through real HTTP: min_score, group_by,
page tokens, image queries, timelines, and the streamed variant of search."""

from __future__ import annotations

import base64
import io
import json

import numpy as np
import pytest

from tests.service.conftest import NUM_VIDEOS

QUERY = "a red block slides across the sea"


def _png(width=64, height=48, seed=0) -> str:
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return base64.b64encode(out.getvalue()).decode()


def _error(r, status, field=None):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    if field is not None:
        assert err["field"] == field, err
    return err


def test_min_score_cuts_off_results_below_a_relevance(server):
    every = server.post("/search", json={"query": QUERY, "mode": "indexed", "top_k": 8}).json()["results"]
    assert all(0 <= r["relevance"] <= 1 for r in every)
    cut = sorted(r["relevance"] for r in every)[len(every) // 2]
    kept = server.post(
        "/search", json={"query": QUERY, "mode": "indexed", "top_k": 8, "min_score": cut}
    ).json()["results"]
    assert [r["video_id"] for r in kept] == [r["video_id"] for r in every if r["relevance"] >= cut]
    assert server.post("/search", json={"query": QUERY, "min_score": 1.0}).json()["results"] == []
    for bad in (1.5, -2, "0.5", True):
        _error(server.post("/search", json={"query": QUERY, "min_score": bad}), 422, "min_score")


def test_group_by_clip_returns_moments_several_per_video(server):
    body = server.post(
        "/search", json={"query": QUERY, "group_by": "clip", "top_k": 20, "shortlist": 8}
    ).json()
    assert body["group_by"] == "clip"
    results = body["results"]
    assert len(results) == 20
    scores = [r["score"] for r in results]
    assert scores == sorted(scores, reverse=True)
    ids = [r["video_id"] for r in results]
    assert max(ids.count(v) for v in set(ids)) > 1  # several moments of one video
    for r in results:
        moment = r["evidence"]["moment"]
        assert r["video_score"] is not None and 0 <= moment["start_s"] < moment["end_s"]
        frames = r["evidence"]["frames"]
        assert frames and all(moment["start_s"] <= f["timestamp_s"] < moment["end_s"] for f in frames)
        # a moment's score is the frame tier's over its frames (max): its best frame's relevance
        assert r["score"] == pytest.approx(max(f["relevance"] for f in frames), abs=1e-5)
    # moments of one video do not overlap
    for vid in set(ids):
        spans = sorted(
            (r["evidence"]["moment"]["start_s"], r["evidence"]["moment"]["end_s"])
            for r in results
            if r["video_id"] == vid
        )
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))
    assert server.post("/search", json={"query": QUERY}).json()["group_by"] == "video"
    _error(server.post("/search", json={"query": QUERY, "group_by": "scene"}), 422, "group_by")


def _walk(server, request):
    """Every page of ``request``: (pages, [(video_id, stage1_rank, relevance)], page_starts)."""
    seen, token, pages, starts = [], None, 0, []
    while True:
        body = server.post("/search", json={**request, **({"page_token": token} if token else {})}).json()
        starts.append(body["page_start"])
        assert body["page_start"] == len(seen) + 1
        seen += [(r["video_id"], r["stage1_rank"], r["relevance"]) for r in body["results"]]
        pages += 1
        token = body["next_page_token"]
        if token is None:
            return pages, seen, starts
        assert pages < 20


@pytest.mark.parametrize("mode", ["indexed", "rerank"])
def test_pages_continue_where_the_last_ended(server, mode):
    # issue 40: top_k 3 showed ranks 1-3, and its token went on at rank 11; the pages together are
    # now the one ranking a single long page shows, whatever the page size
    request = {"query": QUERY, "mode": mode, "top_k": 3, "shortlist": 5}
    everything = server.post("/search", json={**request, "top_k": 8}).json()["results"]
    assert len(everything) == NUM_VIDEOS
    pages, seen, starts = _walk(server, request)
    assert starts == [1, 4, 7] and pages == 3
    assert [s[:2] for s in seen] == [(r["video_id"], r["stage1_rank"]) for r in everything]
    # the page size may change between pages: the ranking does not
    first = server.post("/search", json={**request, "top_k": 2}).json()
    second = server.post(
        "/search", json={**request, "top_k": 4, "page_token": first["next_page_token"]}
    ).json()
    assert second["page_start"] == 3
    assert [r["video_id"] for r in first["results"] + second["results"]] == [
        r["video_id"] for r in everything[:6]
    ]


def test_the_ranking_does_not_depend_on_top_k(server):
    # issue 40: the shortlist was max(10, top_k), so rank 3 differed between top_k 6 and 15
    short = server.post("/search", json={"query": QUERY, "top_k": 2, "shortlist": 4}).json()
    long = server.post("/search", json={"query": QUERY, "top_k": 8, "shortlist": 4}).json()
    assert short["shortlist"] == long["shortlist"] == 4
    assert [r["video_id"] for r in short["results"]] == [r["video_id"] for r in long["results"][:2]]
    assert len(long["results"]) == NUM_VIDEOS  # a page larger than R runs on into the next window


def test_page_tokens_belong_to_their_request(server):
    request = {"query": QUERY, "mode": "indexed", "top_k": 3, "shortlist": 3}
    first = server.post("/search", json=request).json()
    r = server.post(
        "/search", json={**request, "query": "another query", "page_token": first["next_page_token"]}
    )
    assert "another query" in _error(r, 409, "page_token")["message"]
    assert first["next_page_token"].startswith("p3_0_4.")
    stale = "p3_0_4." + "0" * 16
    _error(server.post("/search", json={**request, "page_token": stale}), 409, "page_token")
    for bad in (
        "garbage",
        "p-1_0_1.0000000000000000",
        "p10000_0_1.0000000000000000",
        "p3.0000000000000000",
        "",
        5,
    ):
        _error(server.post("/search", json={**request, "page_token": bad}), 422, "page_token")


def test_image_queries_alone_or_with_text(server):
    image = _png()
    alone = server.post("/search", json={"image": image, "top_k": 3})
    assert alone.status_code == 200, alone.text
    assert len(alone.json()["results"]) == 3 and alone.json()["query"] == ""
    both = server.post("/search", json={"image": image, "query": QUERY, "top_k": 8, "mode": "indexed"}).json()
    text = server.post("/search", json={"query": QUERY, "top_k": 8, "mode": "indexed"}).json()
    assert [r["score"] for r in both["results"]] != [r["score"] for r in text["results"]]
    data_url = server.post(
        "/search", json={"image": "data:image/png;base64," + image, "top_k": 3, "mode": "indexed"}
    )
    assert data_url.status_code == 200


def test_image_queries_are_checked(server):
    err = _error(
        server.post("/search", json={"image": base64.b64encode(b"just some text").decode()}), 415, "image"
    )
    assert "picture" in err["message"]
    _error(server.post("/search", json={"image": "not base64!"}), 422, "image")  # not even its alphabet
    _error(server.post("/search", json={"image": ""}), 422, "image")
    _error(server.post("/search", json={"image": "QUJ"}), 415, "image")  # base64's alphabet, bad padding
    _error(server.post("/search", json={"image": "QUJD="}), 415, "image")  # base64, but not a picture
    big = base64.b64encode(b"\x89PNG" + bytes(4 * 1024 * 1024)).decode()
    err = _error(server.post("/search", json={"image": big}), 413, "image")
    assert "MiB" in err["message"]
    huge_body = server.post(
        "/search",
        content=b'{"image": "' + b"A" * (6 * 1024 * 1024) + b'"}',
        headers={"content-type": "application/json"},
    )
    assert huge_body.status_code == 413
    _error(server.post("/search", json={}), 422, "query")
    _error(server.post("/search", json={"image": 5}), 422, "image")
    # other routes keep their small body limit
    assert server.post("/admin/reload-index", content=b"x" * (65 * 1024)).status_code == 413


def test_results_carry_relevance_over_time(server):
    rerank = server.post("/search", json={"query": QUERY, "top_k": 3, "heavy": 3}).json()["results"]
    for r in rerank:
        timeline = r["timeline"]
        assert timeline["source"] == "streaming" and len(timeline["points"]) == r["clips_used"]
        assert all(p["start_s"] < p["end_s"] for p in timeline["points"])
    indexed = server.post("/search", json={"query": QUERY, "top_k": 3, "mode": "indexed"}).json()["results"]
    for r in indexed:
        timeline = r["timeline"]
        assert timeline["source"] == "relevance" and 0 < len(timeline["points"]) <= 120
        assert (
            max(p["value"] for p in timeline["points"])
            >= max(f["relevance"] for f in r["evidence"]["frames"]) - 1e-6
        )
    bare = server.post("/search", json={"query": QUERY, "top_k": 3, "include_evidence": False}).json()
    assert all(r["timeline"] is None for r in bare["results"])


def _stream(server, payload):
    with server.stream("POST", "/search/stream", json=payload) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
        return [json.loads(line) for line in r.iter_lines() if line]


def test_the_stream_sends_stage1_then_updates_then_the_answer(server):
    payload = {"query": QUERY, "top_k": 8, "shortlist": 8, "heavy": 8}
    messages = _stream(server, payload)
    kinds = [m["type"] for m in messages]
    assert (
        kinds[0] == "stage1" and kinds[-1] == "final" and kinds.count("update") == 3
    )  # the frame tier's ranking, then the heavy tier's 8 candidates, 4 at a time
    stage1 = messages[0]["results"]
    assert [r["stage1_rank"] for r in stage1] == list(range(1, 9)) and not any(r["reranked"] for r in stage1)
    assert [m["tiers"] for m in messages[1:-1]] == [{"frame": 8}, {"head": 4, "frame": 4}, {"head": 8}]
    final = messages[-1]["response"]
    plain = server.post("/search", json=payload).json()
    assert [r["video_id"] for r in final["results"]] == [r["video_id"] for r in plain["results"]]
    assert [r["score"] for r in final["results"]] == pytest.approx(
        [r["score"] for r in plain["results"]], abs=1e-4
    )
    assert [r["video_id"] for r in messages[-2]["results"]] == [r["video_id"] for r in final["results"]]


def test_stream_refusals_before_the_first_line_are_plain_errors(server):
    r = server.post("/search/stream", json={"query": QUERY, "top_k": 0})
    _error(r, 422, "top_k")
    r = server.post("/search/stream", json={"image": base64.b64encode(b"text").decode()})
    _error(r, 415, "image")


def test_new_search_options_are_documented(server):
    spec = server.get("/openapi.json").json()
    props = spec["components"]["schemas"]["SearchRequest"]["properties"]
    assert {"image", "min_score", "group_by", "page_token"} <= set(props)
    assert props["group_by"]["enum"] == ["video", "clip"]
    stream = spec["paths"]["/search/stream"]["post"]
    assert "application/x-ndjson" in stream["responses"]["200"]["content"]
    assert {"413", "415", "422"} <= set(spec["paths"]["/search"]["post"]["responses"])


def test_the_stream_ends_with_an_error_line_when_stage2_fails(server):
    from engine.errors import DeadlineExceeded

    reranker = server.app.state.qaslr.engine.searcher.reranker

    def late(*args, **kwargs):
        raise DeadlineExceeded("the request deadline passed")

    original, reranker.run = reranker.run, late
    try:
        messages = _stream(server, {"query": QUERY, "top_k": 3, "heavy": 3})
    finally:
        reranker.run = original
    # the frame tier's ranking arrives, then the heavy tier fails
    assert [m["type"] for m in messages] == ["stage1", "update", "error"]
    error = messages[-1]
    assert error["status"] == 503 and error["error"]["code"] == "deadline_exceeded" and error["request_id"]


def test_the_stream_shapes_its_answer_like_search(server):
    payload = {"query": QUERY, "top_k": 6, "shortlist": 4, "group_by": "clip", "mode": "indexed"}
    messages = _stream(server, payload)
    assert [m["type"] for m in messages] == ["stage1", "final"]  # indexed: no stage-2 updates
    final = messages[-1]["response"]
    plain = server.post("/search", json=payload).json()
    assert final["group_by"] == "clip" and final["results"] == plain["results"]
    assert final["next_page_token"] == plain["next_page_token"] is not None
    cut = server.post("/search/stream", json={**payload, "group_by": "video", "min_score": 1.0})
    lines = [json.loads(x) for x in cut.text.splitlines() if x]
    assert lines[0]["results"] == [] and lines[-1]["response"]["results"] == []


@pytest.mark.parametrize(
    "extra",
    [{"mode": "rerank", "heavy": 8}, {"mode": "indexed"}, {"mode": "frames", "group_by": "clip"}],
)
def test_relevance_never_rises_along_an_answer(server, extra):
    # issue 40: a result must not read as more relevant than the one ranked above it
    body = server.post("/search", json={"query": QUERY, "top_k": 8, "shortlist": 8, **extra}).json()
    relevance = [r["relevance"] for r in body["results"]]
    assert relevance and None not in relevance
    assert relevance == sorted(relevance, reverse=True)


def test_the_stream_filters_min_score_on_relevance_like_the_answer(server):
    # issue 40: updates filtered on the tier's score, the answer on relevance; both use relevance now
    payload = {"query": QUERY, "top_k": 8, "shortlist": 8, "heavy": 8}
    every = server.post("/search", json=payload).json()["results"]
    cut = every[len(every) // 2]["relevance"]
    messages = _stream(server, {**payload, "min_score": cut})
    final = messages[-1]["response"]["results"]
    assert [r["video_id"] for r in final] == [r["video_id"] for r in every if r["relevance"] >= cut]
    for message in messages[:-1]:
        assert message["results"], message["type"]
        relevance = [r["relevance"] for r in message["results"]]
        assert None not in relevance and min(relevance) >= cut, message["type"]
        assert relevance == sorted(relevance, reverse=True)


def test_a_filter_that_leaves_one_candidate_says_the_heavy_tier_scored_it_alone(server):
    # issue 40: a single candidate went through the heavy tier silently
    body = server.post("/search", json={"query": QUERY, "filter": {"rank": 3}, "heavy": 1}).json()
    assert [r["video_id"] for r in body["results"]] == ["vid3"]
    assert body["results"][0]["tier"] != "frame"
    assert any("only one candidate" in w for w in body["warnings"]), body["warnings"]
    frames = server.post("/search", json={"query": QUERY, "filter": {"rank": 3}, "mode": "frames"}).json()
    assert not any("only one candidate" in w for w in frames["warnings"])


@pytest.mark.parametrize("route", ["/search", "/search/stream"])
def test_a_form_body_is_told_to_send_json(server, route):
    # issue 40: `curl -d 'query=...'` (a form) got a 422 about fields of a body never read
    r = server.post(
        route, content=b"query=red+block", headers={"Content-Type": "application/x-www-form-urlencoded"}
    )
    err = _error(r, 415, "body")
    assert "Content-Type: application/json" in err["message"] and "x-www-form-urlencoded" in err["message"]
    r = server.post(route, content=b'{"query": "red block"}', headers={"Content-Type": "text/plain"})
    assert "Content-Type: application/json" in _error(r, 415, "body")["message"]
    ok = server.post(
        route, content=b'{"query": "x", "mode": "indexed"}', headers={"Content-Type": "application/json"}
    )
    assert ok.status_code == 200
    described = server.get("/openapi.json").json()["paths"][route]["post"]["responses"]["415"]["description"]
    assert "Content-Type: application/json" in described
