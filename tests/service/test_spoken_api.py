"""``POST /search`` by what is seen, said or both, over HTTP (a real uvicorn server over an index
whose videos have subtitle sidecars): the schema and its 422s, the spoken snippet and its cue
moment, clips, streaming, pages, filters and min_score."""

from __future__ import annotations

import json

import pytest

from tests.service.conftest import _build, live_server

pytestmark = pytest.mark.slow  # builds an index with `indexer build` (tests/conftest.py)

CUES = {
    0: "1\n00:00:00,500 --> 00:00:01,500\nThe lighthouse keeper counts seven herons\n\n"
    "2\n00:00:02,000 --> 00:00:02,800\nthe harbour bell rings\n",
    1: "WEBVTT\n\n00:01.000 --> 00:02.000 align:start\nharbour lights glow over the water\n",
    2: "1\r\n00:00:00,200 --> 00:00:01,000\r\nthe ferry leaves the harbour\r\n",
    3: None,
}


@pytest.fixture(scope="module")
def spoken_index(tmp_path_factory, video_factory, tiny_checkpoint):
    root = tmp_path_factory.mktemp("spoken_api")
    lines = []
    for i, cues in CUES.items():
        path = video_factory(root / f"s{i}.mp4", num_frames=36, fps=12, size=(96, 64), seed=60 + i)
        if cues is not None:
            (root / f"s{i}.{'vtt' if cues.startswith('WEBVTT') else 'srt'}").write_text(cues)
        meta = {"topic": "sea" if i < 2 else "land"}
        lines.append(json.dumps({"id": f"s{i}", "path": str(path), "metadata": meta}))
    manifest = root / "manifest.jsonl"
    manifest.write_text("\n".join(lines) + "\n")
    return _build(manifest, tmp_path_factory.mktemp("idx") / "spoken", tiny_checkpoint, None)


@pytest.fixture(scope="module")
def client(spoken_index, tiny_checkpoint):
    from service.app import create_app
    from service.settings import Settings

    settings = Settings(
        index=spoken_index, model=str(tiny_checkpoint), default_frames=8, max_frames=16, redis_url=None,
        warm_up=False,
    )  # fmt: skip
    with live_server(create_app(settings)) as c:
        yield c


def _search(client, **body):
    r = client.post("/search", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_said_answers_with_the_source_the_snippet_and_the_cue_as_moment(client):
    body = _search(client, query="lighthouse keeper herons", sources="said")
    assert body["sources"] == "said"
    top = body["results"][0]
    assert top["video_id"] == "s0" and top["source"] == "said" and top["stage1_rank"] is None
    spoken = top["spoken"]
    assert spoken["text"] == "The lighthouse keeper counts seven herons"
    assert [spoken["snippet"][a:b] for a, b in spoken["highlights"]] == ["lighthouse keeper", "herons"]
    assert spoken["start_s"] == 0.5 and spoken["end_s"] == 1.5 and spoken["rank"] == 1
    assert 0.99 <= spoken["coverage"] <= 1.0 and top["relevance"] >= 0.99
    assert top["evidence"]["moment"] == {"start_s": 0.5, "end_s": 1.5, "source": "cue"}
    assert body["timings_ms"]["spoken"] > 0


def test_both_is_the_default_and_fuses_what_was_said(client):
    body = _search(client, query="harbour")
    assert body["sources"] == "both"
    assert {r["video_id"] for r in body["results"] if r["source"] in ("said", "both")} == {"s0", "s1", "s2"}
    fused = [r for r in body["results"] if r["spoken"]]
    assert all(r["seen_score"] is not None for r in fused if r["source"] == "both")
    scores = [r["score"] for r in body["results"]]
    assert scores == sorted(scores, reverse=True)


def test_a_query_nothing_says_answers_both_as_seen(client):
    seen = _search(client, query="a zebra crossing", sources="seen", mode="frames")
    both = _search(client, query="a zebra crossing", sources="both", mode="frames")

    def strip(b):
        return [(r["video_id"], r["score"], r["evidence"]["moment"], r["source"]) for r in b["results"]]

    assert strip(both) == strip(seen) and all(r["spoken"] is None for r in both["results"])


@pytest.mark.parametrize(
    "body, field",
    [
        ({"query": "harbour", "sources": "heard"}, "sources"),
        ({"query": "harbour", "sources": 1}, "sources"),
        ({"query": "harbour", "sources": ["said"]}, "sources"),
        ({"image": "iVBORw0KGgo=", "sources": "said"}, None),  # 415 or 422: never a 500
    ],
)
def test_bad_sources_are_422s_that_name_the_field(client, body, field):
    r = client.post("/search", json=body)
    if field is None:
        assert r.status_code in (415, 422), r.text
        return
    assert r.status_code == 422 and r.json()["error"]["field"] == field, r.text


def test_said_without_words_is_a_422_on_sources(client):
    import base64
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (32, 24), (200, 30, 30)).save(buf, format="PNG")
    r = client.post("/search", json={"image": base64.b64encode(buf.getvalue()).decode(), "sources": "said"})
    assert r.status_code == 422 and r.json()["error"]["field"] == "sources"
    assert "needs query text" in r.json()["error"]["message"]


def test_the_openapi_document_states_sources_and_the_spoken_answer(client):
    doc = client.get("/openapi.json").json()
    schemas = doc["components"]["schemas"]
    request = schemas["SearchRequest"]["properties"]["sources"]
    ref = request.get("$ref") or next((x["$ref"] for x in request.get("allOf", []) if "$ref" in x), None)
    enum = schemas[ref.split("/")[-1]]["enum"] if ref else request["enum"]
    assert set(enum) == {"seen", "said", "both"} and request["default"] == "both"
    result = schemas["SearchResult"]["properties"]
    assert {"source", "spoken", "seen_score"} <= set(result)
    assert "cue" in schemas["Moment"]["properties"]["source"]["enum"]
    assert {"snippet", "highlights", "start_s", "end_s", "coverage"} <= set(schemas["Spoken"]["properties"])


def test_clips_by_what_is_said_carry_their_cues(client):
    body = _search(client, query="harbour", sources="said", group_by="clip")
    assert body["group_by"] == "clip"
    moments = {(r["video_id"], r["evidence"]["moment"]["start_s"]) for r in body["results"]}
    assert moments == {("s0", 2.0), ("s1", 1.0), ("s2", 0.2)}
    assert all(r["evidence"]["moment"]["source"] == "cue" and r["spoken"]["text"] for r in body["results"])
    both = _search(client, query="harbour", sources="both", group_by="clip", mode="frames")
    assert {r["source"] for r in both["results"]} & {"said", "both"}


def test_the_stream_ends_with_the_same_answer_as_search(client):
    request = {"query": "harbour ferry", "sources": "both", "mode": "frames"}
    lines = []
    with client.stream("POST", "/search/stream", json=request) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.strip():
                lines.append(json.loads(line))
    assert lines[0]["type"] == "stage1" and lines[-1]["type"] == "final"
    assert any(res["source"] != "seen" for res in lines[0]["results"])  # fused from the first line
    final = lines[-1]["response"]["results"]
    direct = _search(client, **request)["results"]
    assert [(r["video_id"], r["source"]) for r in final] == [(r["video_id"], r["source"]) for r in direct]
    said = []
    with client.stream("POST", "/search/stream", json={**request, "sources": "said"}) as r:
        said = [json.loads(x) for x in r.iter_lines() if x.strip()]
    assert said[-1]["type"] == "final" and said[-1]["response"]["results"][0]["video_id"] == "s2"


def test_pages_filters_and_min_score_work_with_what_is_said(client):
    first = _search(client, query="harbour", sources="said", shortlist=1, top_k=1)
    token = first["next_page_token"]
    assert token and len(first["results"]) == 1
    second = _search(client, query="harbour", sources="said", shortlist=1, top_k=1, page_token=token)
    assert second["results"][0]["video_id"] != first["results"][0]["video_id"]
    stale = client.post(
        "/search",
        json={"query": "harbour", "sources": "both", "shortlist": 1, "top_k": 1, "page_token": token},
    )
    assert stale.status_code == 409  # a token of the said ranking does not page the fused one
    sea = _search(client, query="harbour", sources="said", filter={"topic": "land"})
    assert [r["video_id"] for r in sea["results"]] == ["s2"]
    strict = _search(client, query="harbour ferry", sources="said", min_score=0.9)
    assert [r["video_id"] for r in strict["results"]] == ["s2"]  # says both words


def test_a_heavy_count_above_the_shortlist_reencodes_the_shortlist_and_says_so(client):
    """The schema cannot bound `heavy` by `shortlist` (schemathesis found `heavy: 54` refused), so the
    API answers it: the heavy tier re-encodes the whole shortlist, and a warning says so."""
    body = _search(client, query="harbour", sources="seen", mode="rerank", shortlist=3, top_k=3, heavy=54)
    assert any("heavy 54 is more than the shortlist (3)" in w for w in body["warnings"])
    assert [r["tier"] for r in body["results"]] == ["oneshot"] * 3
    r = client.post("/search", json={"query": "harbour", "heavy": -1})
    assert r.status_code == 422 and r.json()["error"]["field"] == "heavy"


def test_score_means_one_thing_per_tier_and_relevance_reads_across(client):
    # issue 40: a said-only result showed score 0.000 beside relevance 1.0, with nothing saying why
    body = _search(client, query="harbour", sources="said")
    assert body["results"]
    for r in body["results"]:
        assert r["source"] == "said" and r["score"] == pytest.approx(r["spoken"]["score"])  # the cue's BM25
    relevance = [r["relevance"] for r in body["results"]]
    assert relevance == sorted(relevance, reverse=True)
    schema = client.get("/openapi.json").json()["components"]["schemas"]["SearchResult"]["properties"]
    assert "one thing per tier" in schema["score"]["description"] and "BM25" in schema["score"]["description"]
    assert "only cross-tier number" in schema["score"]["description"]
    assert "never rises" in schema["relevance"]["description"]
    js = client.get("/static/app.js").text
    assert "BM25 ${result.score.toPrecision(3)}" in js  # the page labels a said score as what it is
