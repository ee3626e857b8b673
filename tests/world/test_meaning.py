"""What a world query means and which videos of a collection it is true of (world.meaning)."""

from __future__ import annotations

import pytest

from world.corpus import CorpusConfig, TruthVideo, _plan
from world.meaning import Meaning, meaning_of, parse_change
from world.vocab import CHANGES, COLOURS, Change, EventKind


def _video(kind, events, change="", vid="v"):
    return TruthVideo(vid, f"{vid}.mp4", kind, 60.0, 6.0, 64, 64, "h264", tuple(events), (), "", change)


def test_every_video_of_a_corpus_is_found_by_its_own_query_and_its_partner_is_not():
    config = CorpusConfig(videos=3, order_pairs=2, count_pairs=2, count3_pairs=2, motion_pairs=4, seed=8,
                          min_duration_s=40.0, max_duration_s=70.0)  # fmt: skip
    videos = [t for t, _ in _plan(config)]
    for video in videos:
        meaning = meaning_of(video)
        assert video.queries[0] in meaning.texts()
        assert meaning.true_of(video)
        partner = [v for v in videos if video.group and v.group == video.group and v.id != video.id]
        assert not any(meaning.true_of(p) for p in partner)


def test_truth_follows_what_is_shown_not_which_video_a_query_was_written_for():
    a, b = "red square", "blue circle"
    single = _video("single", [(a, 10, 12)])
    ordered = _video("order", [(b, 5, 7), (a, 20, 22)])
    twice = _video("count", [(a, 5, 7), (a, 20, 22)])
    assert Meaning("event", (a,)).true_of(ordered) and Meaning("event", (a,)).true_of(twice)
    assert Meaning("order", (b, a)).true_of(ordered) and not Meaning("order", (a, b)).true_of(ordered)
    assert Meaning("count", (a,), count=1).true_of(single) and not Meaning("count", (a,), count=1).true_of(
        twice
    )
    assert Meaning("count", (a,), count=2).true_of(twice)
    turn = _video("motion", [("red square", 5, 9)], change="square turns red to blue")
    assert Meaning("event", ("blue square",)).true_of(turn)  # it shows both colours
    assert Meaning("change", change="square turns red to blue").true_of(turn)
    assert not Meaning("change", change="square turns blue to red").true_of(turn)


@pytest.mark.parametrize("change", CHANGES)
def test_a_change_name_parses_back(change):
    to = next(c for c in COLOURS if c != "cyan") if change == "recolour" else None
    c = Change(EventKind("cyan", "bar"), change, to)
    assert parse_change(c.name) == c and parse_change(c.reversed().name) == c.reversed()
    with pytest.raises(ValueError):
        parse_change("a cyan bar dances")
