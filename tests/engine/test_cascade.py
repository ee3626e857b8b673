"""The search engine on its own (no HTTP): the frame tier, the cascade, one moment rule.

A small shapes-world collection (six 40-60 s videos, one 2-3 s event each, every event distinct) is
indexed with the shipped tiny-world backbone, so rankings and moments are real and these can fail.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from engine.errors import InvalidRequest
from engine.runtime.policy import QUERIES

pytestmark = pytest.mark.slow  # renders a shapes-world collection and indexes it (about a minute)


def _iou(moment, start, end):
    inter = max(0.0, min(moment[1], end) - max(moment[0], start))
    return inter / (max(moment[1], end) - min(moment[0], start))


def test_the_engine_searches_an_index_on_its_own(world_engine, world_corpus):
    """Loaded from an EngineConfig alone and searched through its Searcher: no HTTP involved (that
    the engine package imports no web code is tests/test_architecture.py's rule)."""
    query, right = world_corpus.queries("single")[0]
    outcome = world_engine.searcher.search({"query": query, "top_k": 3})
    assert outcome.hits[0].video_id == right
    assert outcome.hits[0].tier in ("oneshot", "frame")


def test_the_frame_tier_ranks_the_event_video_first_without_a_backbone_call(
    world_engine, world_corpus, monkeypatch
):
    # count the backbone's video calls, what any tier that re-encodes reaches (issue 40: the test
    # patched a method no tier calls, so it could not fail); query text embeddings are not counted
    backbone = world_engine.searcher.reranker.encoder.backbone
    calls = []
    for name in ("embed_videos", "encode_clips", "embed_images"):
        real = getattr(backbone, name)

        def counted(*args, _real=real, _name=name, **kwargs):
            calls.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(backbone, name, counted)
    query, _ = world_corpus.queries("single")[0]
    world_engine.searcher.search({"query": query, "mode": "rerank", "heavy": 2, "top_k": 6})
    assert calls, "the heavy tier's video calls are not the ones counted here"
    calls.clear()
    queries = world_corpus.queries("single")
    right = 0
    for query, video_id in queries:
        outcome = world_engine.searcher.search(
            {"query": query, "mode": "frames", "top_k": 6, "include_evidence": False}
        )
        assert {h.tier for h in outcome.hits} == {"frame"}
        assert outcome.timings_ms["frame"] > 0 and outcome.timings_ms["encode"] == 0
        right += outcome.hits[0].video_id == video_id
    assert right >= len(queries) - 1
    assert calls == [], f"the frame tier called the backbone: {calls}"


def test_the_cascade_reencodes_only_the_frame_tiers_top_heavy(world_engine, world_corpus):
    query, _ = world_corpus.queries("single")[1]
    frames_only = world_engine.searcher.search(
        {"query": query, "mode": "frames", "top_k": 6, "include_evidence": False}
    )
    outcome = world_engine.searcher.search({"query": query, "mode": "rerank", "heavy": 2, "top_k": 6})
    tiers = [h.tier for h in outcome.hits]
    heavy = world_engine.searcher.reranker.name  # the checkpoint's rerank head ("head"), else one-shot
    assert tiers[:2] == [heavy, heavy] and set(tiers[2:]) == {"frame"}
    # the heavy tier reorders the frame tier's top 2 among themselves; the rest keep the frame order
    assert {h.video_id for h in outcome.hits[:2]} == {h.video_id for h in frames_only.hits[:2]}
    assert [h.video_id for h in outcome.hits[2:]] == [h.video_id for h in frames_only.hits[2:]]
    assert outcome.timings_ms["frame"] > 0 and outcome.timings_ms["encode"] > 0
    assert all(h.clips_used is not None for h in outcome.hits[:2])
    zero = world_engine.searcher.search({"query": query, "mode": "rerank", "heavy": 0, "top_k": 6})
    assert [h.video_id for h in zero.hits] == [h.video_id for h in frames_only.hits]
    assert zero.timings_ms["encode"] == 0


@pytest.mark.parametrize("heavy", [-1, 11])
def test_a_heavy_count_outside_the_shortlist_is_refused(world_engine, heavy):
    with pytest.raises(InvalidRequest) as info:
        world_engine.searcher.resolve({"query": "a red square", "shortlist": 10, "heavy": heavy})
    assert info.value.field == "heavy"


@pytest.mark.parametrize("mode", ["indexed", "frames", "rerank"])
def test_every_mode_returns_a_tight_moment_on_the_event(world_engine, world_corpus, mode):
    truth = world_corpus.by_id()
    ious = []
    for query, right in world_corpus.queries("single"):
        hit = world_engine.searcher.search({"query": query, "mode": mode, "top_k": 1, "shortlist": 6}).hits[0]
        if hit.video_id != right:
            continue
        (_, start, end), *_ = truth[right].events
        assert hit.moment_source == ("relevance" if mode == "indexed" else "refined")
        assert hit.moment[1] - hit.moment[0] <= 1.5 * (end - start) + 0.5
        ious.append(_iou(hit.moment, start, end))
    if mode != "indexed":  # refined at the source's frame rate
        assert len(ious) >= 5 and float(np.mean(np.array(ious) >= 0.7)) >= 0.8


def test_clips_come_from_the_same_frame_scores_and_each_has_a_timeline(world_engine, world_corpus):
    query, right = world_corpus.queries("single")[2]
    videos = world_engine.searcher.search({"query": query, "mode": "frames", "top_k": 6})
    clips = world_engine.searcher.search(
        {"query": query, "mode": "frames", "top_k": 6, "group_by": "clip"}
    ).clips
    assert clips[0].hit.video_id == videos.hits[0].video_id == right
    assert clips[0].score == pytest.approx(videos.hits[0].frame_score)
    assert all(c.hit.timeline is not None for c in clips)
    assert [c.score for c in clips] == sorted((c.score for c in clips), reverse=True)


def test_warm_up_runs_every_stage_once(world_engine, monkeypatch):
    # issue 40: asserting only > 0 s could not fail; the warm-up's one search must pass every stage
    searcher = world_engine.searcher
    outcomes = []
    real = searcher.search

    def recorded(*args, **kwargs):
        outcomes.append(real(*args, **kwargs))
        return outcomes[-1]

    monkeypatch.setattr(searcher, "search", recorded)
    assert world_engine.warm_up() > 0
    (outcome,) = outcomes  # once
    for stage in ("query_embed", "faiss", "frame", "encode"):
        assert outcome.timings_ms[stage] > 0, (stage, outcome.timings_ms)
    (hit,) = outcome.hits
    assert hit.reranked and hit.tier == searcher.reranker.name  # the heavy tier scored it


def test_where_queries_are_padded_the_warm_up_meets_every_padded_length(world_engine, monkeypatch):
    """CUDA pads query prompts to a few lengths (models.backbone TEXT_PAD_MULTIPLE); forced here on
    the CPU: the warm-up embeds each length's text once, alone, where a search's query is embedded
    (the batcher's thread) and on every light-lane thread, and searches nothing more."""
    backbone = world_engine.encoder.backbone
    monkeypatch.setattr(backbone, "text_pad_multiple", 32)
    shapes = backbone.shape_texts(instruction=world_engine.encoder.instruction)
    assert len(shapes) == 4
    searched, embedded, batched = [], [], []
    real_search, real_embed = world_engine.searcher.search, world_engine.encoder.embed_queries
    monkeypatch.setattr(
        world_engine.searcher, "search", lambda p: searched.append(p["query"]) or real_search(p)
    )

    def embed(texts, **kwargs):
        embedded.append((threading.current_thread().name, tuple(texts)))
        return real_embed(texts, **kwargs)

    batcher = world_engine.batcher
    real_encode = batcher.encode

    def encode(encoder, items, **kwargs):
        batched.append((kwargs.get("kind"), tuple(items)))
        return real_encode(encoder, items, **kwargs)

    monkeypatch.setattr(world_engine.encoder, "embed_queries", embed)
    monkeypatch.setattr(batcher, "encode", encode)
    world_engine.warm_up()
    assert len(searched) == 1  # the one search through every stage
    alone = [(t,) for t in shapes]
    assert batched == [(QUERIES, t) for t in alone]  # the batcher's worker: where a search embeds its query
    lanes = world_engine.admission.light_threads
    on_lanes = {name for name, texts in embedded if name.startswith("qaslr-light") and texts in set(alone)}
    assert lanes >= 1 and len(on_lanes) == lanes


def test_a_filter_on_a_key_no_video_has_warns_and_names_the_known_keys(world_engine):
    outcome = world_engine.searcher.search(
        {"query": "a red square", "mode": "indexed", "filter": {"split": "test"}}
    )
    assert outcome.hits == []
    (warning,) = [w for w in outcome.warnings if w.startswith("filter:")]
    assert "'split'" in warning and "title" in warning and "duration_s" in warning
    known = world_engine.searcher.search(
        {"query": "a red square", "mode": "indexed", "filter": {"kind": "single"}}
    )
    assert known.hits and not [w for w in known.warnings if w.startswith("filter:")]


def test_a_count_or_order_no_tier_answers_is_said_not_silently_dropped(world_engine):
    # issue 40: "three times" in a query was silently searched as a description
    searcher = world_engine.searcher
    unsupported = searcher.search({"query": "a red square appears four times", "top_k": 3})
    (warning,) = [w for w in unsupported.warnings if "was ignored" in w]
    assert "a count (4 times)" in warning and "'a red square appears'" in warning
    frames = searcher.search({"query": "a red square appears twice", "mode": "frames", "top_k": 3})
    assert any("a count (2 times)" in w and "mode or heavy" in w for w in frames.warnings)
    plain = searcher.search({"query": "a red square appears", "top_k": 3})
    assert not any("was ignored" in w for w in plain.warnings)


def test_oneshot_moments_read_the_peak_moment_as_temporal_pairs(
    world_index, tiny_world_checkpoint, world_corpus
):
    """``oneshot_moments`` (engine setting): one-shot stage 2 reads each candidate's top moment as bank
    frames each followed by the source frame MOTION_PAIR_S later, around the event, not Q-Frame's K'."""
    from engine import EngineConfig, load_engine
    from models.windows import MOTION_PAIR_S

    query, right = world_corpus.queries("single")[3]
    (_, start, end), *_ = world_corpus.by_id()[right].events
    reads = {}
    for moments in (0, 1):
        engine = load_engine(  # one-shot stage 2: not the checkpoint's rerank head
            EngineConfig(index=world_index, model=str(tiny_world_checkpoint), oneshot_moments=moments,
                         checkpoint_head=False, model_processes=0)
        )  # fmt: skip
        try:
            assert engine.info["cascade"]["oneshot_moments"] == moments  # as /readyz says it
            assert engine.info["cascade"]["about_time"] is False  # no head that reads moments serves
            # reading moments one-shot answers no order or count: those still go to the time head
            assert (engine.searcher.reranker.window_plan is not None) == bool(moments)
            assert not engine.searcher.cascade.moments
            frames, seen = engine.searcher.reranker.frames, []
            get = frames.get
            frames.get = lambda items, stats, seen=seen, get=get: seen.extend(items) or get(items, stats)
            out = engine.searcher.search(
                {"query": query, "mode": "rerank", "heavy": 2, "top_k": 2, "frames": 16}
            )
            assert out.hits[0].video_id == right and out.hits[0].tier == "oneshot"
            reads[moments] = {record.id: (record, np.asarray(read)) for record, read in seen}
        finally:
            engine.close()
    record, qframe = reads[0][right]
    assert len(qframe) == 16  # K' frames by Q-Frame
    record, paired = reads[1][right]
    step = max(1, round(MOTION_PAIR_S * float(record.fps)))
    assert 2 <= len(paired) <= 16 and len(paired) % 2 == 0
    assert (paired[1::2] - paired[0::2] == step).all()  # each bank frame, then the frame a moment after
    seconds = paired / float(record.fps)
    assert start - 3.0 <= seconds.min() and seconds.max() <= end + 3.0  # the moment around the event
