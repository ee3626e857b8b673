"""World corpora: count pairs (one event shown once / twice over the same haystack) and what adding
them leaves as it was."""

from __future__ import annotations

import json

import numpy as np
import pytest

from world.corpus import CorpusConfig, _plan, _recorded, make_corpus
from world.render import Renderer
from world.vocab import COUNT_GAP_S

# Tiny videos that still fit three showings COUNT_GAP_S apart (35 s with 3 s events).
TINY = dict(min_duration_s=36.0, max_duration_s=40.0, fps=(2.0,), short_side=(32, 40))


def _count_pairs(config: CorpusConfig):
    plans = [(t, s) for t, s in _plan(config) if t.kind == "count"]
    assert len(plans) == 2 * config.count_pairs
    return [(plans[i], plans[i + 1]) for i in range(0, len(plans), 2)]


def test_a_count_pairs_videos_share_the_haystack_and_differ_only_in_the_extra_showing():
    config = CorpusConfig(videos=2, order_pairs=1, count_pairs=3, seed=11, **TINY)
    kinds = set()
    for (once, once_spec), (twice, twice_spec) in _count_pairs(config):
        assert once.group == twice.group and once.id != twice.id
        assert (once.duration_s, once.fps, once.width, once.height, once.codec) == (
            twice.duration_s, twice.fps, twice.width, twice.height, twice.codec,
        )  # fmt: skip
        assert once.path.rsplit(".", 1)[1] == twice.path.rsplit(".", 1)[1]
        assert (once_spec.haystack, once_spec.seed) == (twice_spec.haystack, twice_spec.seed)
        assert len(once.events) == 1 and len(twice.events) == 2
        assert once.events[0] in twice.events  # shown at one of the twice video's two times
        assert len({name for name, _, _ in twice.events}) == 1 and once.events[0][0] == twice.events[0][0]
        kinds.add(once.events[0][0])
        # The frames are the same but for the twice video's other showing.
        (extra,) = [e for e in twice_spec.events if e not in once_spec.events]
        a, b = Renderer(once_spec), Renderer(twice_spec)
        extra_frames = set(twice_spec.event_frames(extra))
        assert extra_frames
        for i in range(twice_spec.num_frames):
            same = np.array_equal(a.frame(i), b.frame(i))
            assert same == (i not in extra_frames), i
    assert len(kinds) == 3  # every pair its own event: no query matches another pair's videos


@pytest.mark.parametrize("seed", range(8))
def test_the_twice_videos_showings_are_the_gap_apart_inside_the_video(seed):
    config = CorpusConfig(videos=0, count_pairs=4, seed=seed, min_duration_s=10.0, max_duration_s=40.0)
    for _, (twice, _) in _count_pairs(config):
        (_, s1, e1), (_, s2, e2) = twice.events
        assert s2 - e1 >= COUNT_GAP_S - 1e-9  # haystack between
        assert s1 >= 5.0 and e2 <= twice.duration_s - 5.0 + 0.01
        assert 24.0 <= twice.duration_s <= 40.0  # the config's range, clamped to what fits


def test_count_pairs_refuse_videos_too_short_for_the_gap():
    with pytest.raises(ValueError, match="count pairs need videos of at least 24 s"):
        CorpusConfig(videos=0, count_pairs=1, min_duration_s=15.0, max_duration_s=20.0)
    with pytest.raises(ValueError, match="count pairs need videos of at least 35 s"):
        CorpusConfig(videos=0, count3_pairs=1, min_duration_s=20.0, max_duration_s=30.0)
    with pytest.raises(ValueError, match="at most 32 count pairs"):
        CorpusConfig(videos=0, count_pairs=33)


def test_adding_count_pairs_leaves_the_other_videos_and_the_recorded_config_as_they_were():
    base = CorpusConfig(videos=5, order_pairs=2, seed=3, **TINY)
    with_counts = CorpusConfig(videos=5, order_pairs=2, count_pairs=2, seed=3, **TINY)
    before, after = _plan(base), _plan(with_counts)
    assert [repr(p) for p in after[: len(before)]] == [repr(p) for p in before]
    assert [t.kind for t, _ in after[len(before) :]] == ["count"] * 4
    assert "count_pairs" not in _recorded(base)  # corpora made before count pairs keep their cache
    assert _recorded(with_counts)["count_pairs"] == 2


def test_a_count_corpus_queries_each_video_by_its_count_and_names_the_pair(tmp_path):
    corpus = make_corpus(tmp_path / "c", CorpusConfig(videos=0, count_pairs=1, seed=2, **TINY))
    (query_once, once), (query_twice, twice) = corpus.queries("count")
    assert query_once.endswith(("appears once", "appears only once"))
    assert query_twice.endswith(("appears twice", "appears two times"))
    assert corpus.by_id()[once].group == corpus.by_id()[twice].group
    rows = [json.loads(line) for line in corpus.manifest.read_text().splitlines()]
    assert [r["metadata"]["group"] for r in rows] == [corpus.by_id()[once].group] * 2
    assert [r["metadata"]["kind"] for r in rows] == ["count", "count"]
    assert all((corpus.root / v.path).stat().st_size > 0 for v in corpus.videos)
