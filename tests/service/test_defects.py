"""Defects of the search path, each pinned by a test that failed before its fix."""

from __future__ import annotations

from tests.service.conftest import live_server


class _Silent(RuntimeError):
    def __str__(self) -> str:
        return ""


def test_a_decoder_error_without_a_message_is_not_a_500(make_settings, monkeypatch):
    """It used to raise IndexError while being summarised, failing the whole search with a 500."""
    import decord

    from service.app import create_app

    def broken(*args, **kwargs):
        raise _Silent()

    with live_server(create_app(make_settings())) as client:
        monkeypatch.setattr(decord, "VideoReader", broken)  # stage 2 decodes nothing from now on
        r = client.post("/search", json={"query": "a red block", "top_k": 3, "shortlist": 3, "heavy": 3})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [x["tier"] for x in body["results"]] == ["frame"] * 3  # the frame tier's order kept
    assert len(body["warnings"]) == 3
