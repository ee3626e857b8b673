"""The API contract that a schemathesis run against the OpenAPI document found gaps in: request
fields are strictly typed, every status the service answers is documented, and the document tells
the truth about what the server accepts (so valid data is never refused)."""

from __future__ import annotations

import pytest

QUERY = "a red block slides across the sea"


@pytest.mark.parametrize(
    "payload, field",
    [
        ({"query": QUERY, "seed": False}, "seed"),  # a bool is not a number
        ({"query": QUERY, "seed": True}, "seed"),
        ({"query": QUERY, "seed": "3"}, "seed"),
        ({"query": QUERY, "seed": 1.5}, "seed"),
        ({"query": QUERY, "seed": -1}, "seed"),
        ({"query": QUERY, "top_k": True}, "top_k"),
        ({"query": QUERY, "top_k": "5"}, "top_k"),
        ({"query": QUERY, "shortlist": False}, "shortlist"),
        ({"query": QUERY, "frames": 2.5}, "frames"),
        ({"query": QUERY, "include_evidence": 1}, "include_evidence"),
        ({"query": QUERY, "include_evidence": "true"}, "include_evidence"),
        ({"query": 5}, "query"),
        ({"query": QUERY, "filter": {"split": {"gte": True}}}, "filter"),
        ({"query": QUERY, "filter": {"split": {"in": "test"}}}, "filter"),
        ({"query": QUERY, "filter": {"split": ["test"]}}, "filter"),
        ({"query": QUERY, "filter": {"split": {"gte": 1, "in": [1]}}}, "filter"),
        ({"query": QUERY, "filter": {"split": {}}}, "filter"),
    ],
)
def test_request_fields_are_strict(server, payload, field):
    r = server.post("/search", json=payload)
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "validation_error" and err["field"].split(".")[0] == field


def test_unparsable_body_is_a_documented_answer(server):
    spec = server.get("/openapi.json").json()
    documented = set(spec["paths"]["/search"]["post"]["responses"])
    for body in (b"\xff\xfe{not utf-8", b"{not json", b'{"query": "x"'):
        r = server.post("/search", content=body, headers={"content-type": "application/json"})
        assert str(r.status_code) in documented, (body, r.status_code, sorted(documented))
        assert r.status_code == 422 and r.json()["error"]["code"] == "validation_error"
        assert r.json()["error"]["field"] == "body"


def test_the_schema_tells_the_truth(server):
    """Constraints the server enforces are in the document, so schema-valid requests succeed."""
    spec = server.get("/openapi.json").json()
    props = spec["components"]["schemas"]["SearchRequest"]["properties"]
    frames = next(s for s in props["frames"]["anyOf"] if s.get("type") == "integer")
    assert frames["maximum"] == 16  # this server's max_frames (conftest)
    seed = next(s for s in props["seed"]["anyOf"] if s.get("type") == "integer")
    assert seed["minimum"] == 0
    assert "pattern" in props["query"]
    # shortlist below top_k stays R (documented): the page runs on into the next windows
    r = server.post("/search", json={"query": QUERY, "top_k": 5, "shortlist": 2, "mode": "indexed"})
    assert r.status_code == 200, r.text
    assert r.json()["shortlist"] == 2 and len(r.json()["results"]) == 5
    r = server.post(
        "/search", json={"query": QUERY, "frames": 16, "seed": 2**52, "mode": "rerank", "top_k": 1}
    )
    assert r.status_code == 200, r.text
    # a filter with a null equality value and a range over strings are valid and answered
    r = server.post(
        "/search", json={"query": QUERY, "mode": "indexed", "filter": {"topic": {"gte": "a"}, "x": None}}
    )
    assert r.status_code == 200 and r.json()["results"] == []


def test_every_answer_status_is_documented(server):
    spec = server.get("/openapi.json").json()
    search = set(spec["paths"]["/search"]["post"]["responses"])
    assert {"200", "401", "413", "422", "429", "503"} <= search
    assert spec["info"]["version"] and spec["info"]["version"] != "0.1.0-unset"


def test_both_search_routes_document_every_status_they_answer():
    """Each status the search routes can answer is on both operations, and the repository's
    schemathesis.toml lets schema-valid requests be refused only with statuses documented there
    (what JSON Schema cannot say: the image is a picture of a bounded size)."""
    import tomllib
    from pathlib import Path

    from fastapi.testclient import TestClient

    from service.app import create_app
    from service.settings import Settings

    spec = TestClient(create_app(Settings(index=None, redis_url=None))).get("/openapi.json").json()
    answered = {"200", "401", "409", "413", "415", "422", "429", "500", "503"}
    for path in ("/search", "/search/stream"):
        assert answered <= set(spec["paths"][path]["post"]["responses"]), path
    config = tomllib.loads((Path(__file__).resolve().parents[2] / "schemathesis.toml").read_text())
    names = set()
    for op in config["operations"]:
        method, path = op["include-name"].split()
        names.add(op["include-name"])
        documented = set(spec["paths"][path][method.lower()]["responses"])
        extra = set(op["checks"]["positive_data_acceptance"]["expected-statuses"])
        extra -= {"2xx", "3xx", "401", "403", "404", "409", "429", "5xx"}  # schemathesis's defaults
        assert extra == {"413", "415"} and extra <= documented, op
    assert names == {"POST /search", "POST /search/stream"}
