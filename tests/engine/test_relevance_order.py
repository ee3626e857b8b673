"""engine.relevance.monotone: the relevance an answer shows never rises from one result to the next."""

from __future__ import annotations

from types import SimpleNamespace

from engine.relevance import monotone


def _items(*values):
    return [SimpleNamespace(relevance=v) for v in values]


def test_a_running_minimum_along_the_ranking():
    items = _items(0.9, 0.95, 0.7, None, 0.8, 0.2)
    assert monotone(items) == 0.2
    assert [i.relevance for i in items] == [0.9, 0.9, 0.7, None, 0.7, 0.2]


def test_a_page_that_continues_a_ranking_starts_below_its_floor():
    items = _items(0.9, 0.5)
    assert monotone(items, floor=0.6) == 0.5
    assert [i.relevance for i in items] == [0.6, 0.5]


def test_a_time_tier_result_reads_its_weakest_event_times_the_heads_confidence():
    """engine.tiers.timehead.time_relevance: each event's best frame against its own null, the least
    of them, times the time head's calibrated confidence; a head without one leaves the events'."""
    import numpy as np

    from engine.relevance import relevance
    from engine.results import Hit
    from engine.tiers.timehead import time_relevance, weakest_event_relevance

    hit = Hit("v", 1.0, 0.5, 1, events=np.eye(2, 4, dtype=np.float32), event_peaks=np.array([0.97, 0.91]))
    nulls = {0: 0.2, 1: 0.1}  # per event: its median cosine over the collection's null sample

    def null_of(e):
        return nulls[int(np.argmax(e))]

    weakest = min(relevance(0.97, 0.2), relevance(0.91, 0.1))
    assert weakest_event_relevance(hit, null_of) == weakest
    assert time_relevance(weakest_event_relevance(hit, null_of), hit) == weakest  # uncalibrated
    hit.time_confidence = 0.25  # the events show, but likely not in the order or number asked
    assert time_relevance(weakest_event_relevance(hit, null_of), hit) == weakest * 0.25
    empty = Hit("w", 0.0, 0.0, 2)
    assert (
        time_relevance(weakest_event_relevance(empty, null_of), empty) is None
    )  # an empty bank: nothing to say
    # served (engine.search.evidence): the same relevance, and the weakest event's kept beside it
    # (events_relevance: whether every event shows, which the page tells apart from "not as asked")
    from engine.search.evidence import Evidence

    evidence = Evidence(None, aggregate="max")
    evidence.null = null_of
    assert evidence.visual_relevance(np.zeros(4, np.float32), hit) == weakest * 0.25
    assert hit.events_relevance == weakest
