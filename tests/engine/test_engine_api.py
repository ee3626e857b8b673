"""The engine object (engine.api.Engine): the one way in for the service, `qaslr search`, the
benchmarks and a notebook; async and synchronous searches go through the same runtime."""

from __future__ import annotations

import asyncio
import time

import pytest

from engine.errors import DeadlineExceeded, EngineError, InvalidRequest

pytestmark = pytest.mark.slow  # the shapes-world index of tests/engine/conftest.py (about a minute)

REQUEST = {"query": "a red square appears", "mode": "frames", "top_k": 3}


def _ranking(outcome):
    return [(h.video_id, round(h.score, 5)) for h in outcome.hits]


def test_sync_and_async_searches_answer_as_the_searcher_does(world_engine):
    direct = world_engine.searcher.search(REQUEST)
    sync = world_engine.search_sync(REQUEST)
    async_ = asyncio.run(world_engine.search(REQUEST))
    assert _ranking(sync) == _ranking(async_) == _ranking(direct)
    for outcome in (sync, async_):  # admitted by the runtime: its wait is the answer's queue time
        assert outcome.timings_ms["queue"] > 0 and outcome.timings_ms["total"] >= outcome.timings_ms["queue"]
    assert direct.timings_ms["queue"] == 0


def test_a_request_is_resolved_once_and_searched_as_resolved(world_engine):
    params = world_engine.resolve({**REQUEST, "shortlist": 4, "heavy": 9}, clamp_heavy=True)
    assert params.heavy == 4 and params.notes and "re-encodes all 4" in params.notes[0]
    outcome = world_engine.search_sync(params)
    assert outcome.shortlist == 4 and params.notes[0] in outcome.warnings
    with pytest.raises(InvalidRequest) as refused:  # without clamping the engine refuses it
        world_engine.resolve({**REQUEST, "shortlist": 4, "heavy": 9})
    assert refused.value.field == "heavy" and isinstance(refused.value, EngineError)


def test_a_deadline_that_passed_is_an_engine_error(world_engine):
    with pytest.raises(DeadlineExceeded):
        world_engine.search_sync(REQUEST, deadline=time.monotonic() - 1)
