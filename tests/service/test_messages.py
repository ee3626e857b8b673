"""422 answers written for people: one message per problem, naming the field, saying what is wrong
and what is allowed; never a regular expression, never one line per branch of a union."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

REGEX_BITS = ("[^", "\\t", "{1,4}", "[A-Za-z0-9", "+$", "^(")


@pytest.fixture(scope="module")
def client():
    from service.app import create_app
    from service.settings import Settings

    return TestClient(create_app(Settings(index=None, redis_url=None)))  # validation needs no engine


def _error(r) -> dict:
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "validation_error"
    return err


@pytest.mark.parametrize(
    "payload, field, words",
    [
        ({"query": "  \t "}, "query", "white space"),
        ({"image": "not base64!"}, "image", "base64"),
        ({"query": "x", "page_token": "p1.zz"}, "page_token", "next_page_token"),
    ],
)
def test_pattern_problems_are_said_in_words(client, payload, field, words):
    err = _error(client.post("/search", json=payload))
    assert err["field"] == field and err["message"].startswith(f"{field}: ")
    assert words in err["message"]
    for text in [err["message"]] + [f["message"] for f in err["fields"]]:
        assert not any(bit in text for bit in REGEX_BITS), text
        assert "pattern" not in text


def test_a_bad_filter_operator_names_it_and_the_allowed_ones_first(client):
    err = _error(client.post("/search", json={"query": "x", "filter": {"duration_s": {"gtx": 5}}}))
    assert err["field"] == "filter"
    assert err["message"].startswith(
        "filter.duration_s: unknown operator 'gtx'; allowed operators: in, gte, gt, lte, lt"
    )
    assert len(err["fields"]) == 1  # one problem, one message (not one per union branch)
    assert "Field required" not in err["message"] and "constrained-str" not in str(err["fields"])


@pytest.mark.parametrize(
    "condition, words",
    [
        ({"in": "test"}, "takes a list"),
        (["test"], '{"in": [...]}'),
        ({"gte": 1, "in": [1]}, "cannot be combined"),
        ({}, "empty condition"),
        ({"gte": True}, "numbers or strings"),
    ],
)
def test_each_filter_problem_is_one_message(client, condition, words):
    err = _error(client.post("/search", json={"query": "x", "filter": {"split": condition}}))
    assert err["field"] == "filter" and err["message"].startswith("filter.split: ")
    assert words in err["message"], err["message"]
    assert len(err["fields"]) == 1, err["fields"]


def test_several_problems_are_each_named(client):
    err = _error(client.post("/search", json={"query": " ", "top_k": 0, "extra": 1}))
    assert [f["field"] for f in err["fields"]] == ["query", "top_k", "extra"]
    assert err["fields"][2]["message"] == "is not a field of this request"
