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
