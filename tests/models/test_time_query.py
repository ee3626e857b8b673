"""Reading order and count out of a query's words (models.time_query)."""

from __future__ import annotations

import pytest

from models.time_query import TimeQuery, parse_time_query
from world.vocab import EVENTS, count_text, order_text


@pytest.mark.parametrize("phrasing", [0, 1])
def test_every_world_order_phrasing_names_both_events_in_order(phrasing):
    a, b = EVENTS[0], EVENTS[13]
    parsed = parse_time_query(order_text(a, b, phrasing))
    assert parsed == TimeQuery("order", (f"{a.article} {a.name} appears", f"{b.article} {b.name} appears"))
    assert parsed.condition == "order"


@pytest.mark.parametrize("times,phrasing", [(1, 0), (1, 1), (2, 0), (2, 1)])
def test_every_world_count_phrasing_names_the_event_and_its_count(times, phrasing):
    kind = EVENTS[22]
    parsed = parse_time_query(count_text(kind, times, phrasing))
    assert parsed == TimeQuery("count", (f"{kind.article} {kind.name} appears",), times)
    assert parsed.condition == f"count:{times}"


@pytest.mark.parametrize(
    "text,events",
    [
        ("a red square appears before a blue circle", ("a red square appears", "a blue circle")),
        ("a red square appears after a blue circle", ("a blue circle", "a red square appears")),
        (
            "After a blue circle appears, a red square appears.",
            ("a blue circle appears", "a red square appears"),
        ),
        ("a red square, followed by a blue circle", ("a red square", "a blue circle")),
        ("red square then blue circle then green bar", ("red square", "blue circle", "green bar")),
        # the phrasings issue 39 found falling through to a plain description
        (
            "a red square appears and afterwards a blue circle appears",
            ("a red square appears", "a blue circle appears"),
        ),
        (
            "a red square appears, next a blue circle appears",
            ("a red square appears", "a blue circle appears"),
        ),
        ("first a red square appears, after that a blue circle", ("a red square appears", "a blue circle")),
        ("a blue circle appears, preceded by a red square", ("a red square", "a blue circle appears")),
        ("a blue circle appears preceded by a red square", ("a red square", "a blue circle appears")),
        ("a blue circle appears, following a red square", ("a red square", "a blue circle appears")),
        (
            "a red square appears, and a blue circle appears later on",
            ("a red square appears", "a blue circle appears"),
        ),
        (
            "a red square appears and a blue circle appears afterwards",
            ("a red square appears", "a blue circle appears"),
        ),
        (
            "a red square appears, then a blue circle appears later on",
            ("a red square appears", "a blue circle appears"),
        ),
        # more ways to say it, read alike
        ("a blue circle appears following a red square", ("a red square", "a blue circle appears")),
        ("a red square is followed by a blue circle", ("a red square", "a blue circle")),
        ("a red square appears prior to a blue circle", ("a red square appears", "a blue circle")),
        ("a red square appears earlier than a blue circle", ("a red square appears", "a blue circle")),
        ("a blue circle appears later than a red square", ("a red square", "a blue circle appears")),
    ],
)
def test_other_order_words_read_in_time_order(text, events):
    assert parse_time_query(text) == TimeQuery("order", events)


@pytest.mark.parametrize(
    "text",
    [
        "a red square appears",
        "there is a red square",
        "the first goal",
        "",
        None,
        "a red square next to a blue circle",
        "the next video shows a red square",
        "the following video shows a red square",
        "next, a red square",
        "a red square on the following slide",
    ],
)
def test_a_plain_description_asks_nothing_about_time(text):
    assert parse_time_query(text) is None


@pytest.mark.parametrize(
    "text,times",
    [
        ("a red square appears two separate times", 2),
        ("a red square appears on two occasions", 2),
        ("a red square appears on three separate occasions", 3),
        ("a red square appears three different times", 3),
    ],
)
def test_other_count_words_read_as_the_count(text, times):
    assert parse_time_query(text) == TimeQuery("count", ("a red square appears",), times)


def test_counts_beyond_two_parse_so_a_head_can_decline_them():
    assert parse_time_query("a cat appears three times") == TimeQuery("count", ("a cat appears",), 3)
