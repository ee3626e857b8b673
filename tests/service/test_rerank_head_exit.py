"""A rerank head for stage 2 and early exit in serving (§A.10), over HTTP.

A one-shot index is reranked by a streaming head loaded with QASLR_RERANK_HEAD; its gate
(QASLR_RERANK_GATE) stops a candidate's stream at the first step t >= t_min with p_t >= eta. The
gates here are built by code with a fixed answer (always stop / never stop) so the test can tell
an applied gate from an ignored one.
"""

from __future__ import annotations

import pytest
import torch

from tests.service.conftest import live_server

# the streaming head on every candidate (the cascade asks the heavy tier only on request by default)
QUERY = {"query": "a red square", "mode": "rerank", "top_k": 3, "shortlist": 3, "heavy": 3, "frames": 16}


def _gate(directory, embed_dim: int, stop: bool):
    from models.gate import EarlyExitGate, save_gate

    gate = EarlyExitGate(embed_dim, hidden_dim=8)
    with torch.no_grad():
        last = gate.mlp[-1]
        last.weight.zero_()
        last.bias.fill_(20.0 if stop else -20.0)  # p = sigmoid(+-20): always / never stop
    return save_gate(gate, directory)


@pytest.fixture(scope="module")
def embed_dim(tiny_head):
    from models.head import load_head

    return load_head(tiny_head).config.embed_dim


def _serve(make_settings, oneshot_index, tiny_head, gate=None, **overrides):
    from service.app import create_app

    settings = make_settings(
        index=oneshot_index, head=None, rerank_head=tiny_head, rerank_gate=gate, **overrides
    )
    return live_server(create_app(settings))


def test_a_rerank_head_streams_one_shot_candidates_and_reports_clips(make_settings, oneshot_index, tiny_head):
    with _serve(make_settings, oneshot_index, tiny_head) as client:
        ready = client.get("/readyz").json()
        body = client.post("/search", json=QUERY).json()
    hits = body["results"]
    assert hits and all(h["reranked"] for h in hits)
    for h in hits:  # streamed in full: every planned clip (the selected frames in clips of L = 4)
        selected = len(h["evidence"]["frames"])
        assert h["clips_planned"] == -(-selected // 4) and h["clips_used"] == h["clips_planned"], h
        assert h["tier"] == "head" and h["evidence"]["moment"]["source"] in ("relevance", "refined")
    assert ready["rerank"] == "streaming head" and ready["rerank_head"] and ready["early_exit_gate"] is False
    assert ready["rerank_head_source"] == "QASLR_RERANK_HEAD"  # which head streams, as the page says


def test_early_exit_stops_at_t_min_when_the_gate_says_stop(
    make_settings, oneshot_index, tiny_head, embed_dim, tmp_path
):
    gate = _gate(tmp_path / "stop", embed_dim, stop=True)
    with _serve(make_settings, oneshot_index, tiny_head, gate) as client:
        assert client.get("/readyz").json()["early_exit_gate"] is True
        full = client.post("/search", json=QUERY).json()["results"]
        early = client.post("/search", json={**QUERY, "exit_threshold": 0.5}).json()["results"]
    assert all(h["clips_used"] == h["clips_planned"] >= 3 for h in full)  # no threshold: no exit
    assert [h["clips_planned"] for h in early] == [h["clips_planned"] for h in full]
    assert all(h["clips_used"] == 2 for h in early), early  # stopped at t_min = 2


def test_early_exit_streams_in_full_when_the_gate_never_fires(
    make_settings, oneshot_index, tiny_head, embed_dim, tmp_path
):
    gate = _gate(tmp_path / "never", embed_dim, stop=False)
    with _serve(make_settings, oneshot_index, tiny_head, gate) as client:
        hits = client.post("/search", json={**QUERY, "exit_threshold": 0.5}).json()["results"]
    assert all(h["clips_used"] == h["clips_planned"] >= 3 for h in hits), hits


def test_exit_threshold_without_a_gate_is_ignored_with_a_warning(make_settings, oneshot_index, tiny_head):
    with _serve(make_settings, oneshot_index, tiny_head) as client:
        r = client.post("/search", json={**QUERY, "exit_threshold": 0.5})
        bad = client.post("/search", json={**QUERY, "exit_threshold": 1.5})
    assert r.status_code == 200
    assert any("exit_threshold" in w for w in r.json().get("warnings", [])), r.json()
    assert all(h["clips_used"] == h["clips_planned"] for h in r.json()["results"])
    assert bad.status_code == 422 and "exit_threshold" in bad.text
