"""Edge frames (indexer.edges): written at build time, read back, and refining the top result's
moment without a decode or a backbone call; an index built before them still searches.

The shapes-world collection of tests/engine/conftest.py (six 40-60 s videos, one 2-3 s event each)
is indexed with the shipped tiny-world backbone, so moments are real and these can fail.
"""

from __future__ import annotations

import shutil
import sqlite3

import numpy as np
import pytest

import engine.frames
from engine.frames import FrameStats
from engine.refine import MomentRefiner
from indexer.edges import edge_frame_indices
from indexer.store import IndexReader

pytestmark = pytest.mark.slow  # renders a shapes-world collection and indexes it (about a minute)


@pytest.fixture(scope="module")
def engine_(world_index, tiny_world_checkpoint):
    """The engine without batching, so the refiner calls its backbone here (where it is patched)."""
    from engine import EngineConfig, load_engine

    eng = load_engine(EngineConfig(index=world_index, model=str(tiny_world_checkpoint), batching=False))
    yield eng
    eng.close()


def _iou(moment, start, end):
    inter = max(0.0, min(moment[1], end) - max(moment[0], start))
    return inter / (max(moment[1], end) - min(moment[0], start))


def test_edge_frames_are_written_at_build_and_read_back(world_index, engine_):
    with IndexReader(world_index) as reader:
        for vid in reader.bank_ids():
            bank, edges = reader.frame_bank(vid), reader.edge_frames(vid)
            assert edges is not None and len(edges.frame_indices) > 0
            # the frames inside the bank's largest changes, none of them a bank frame
            assert np.array_equal(
                edges.frame_indices, edge_frame_indices(bank.frame_indices, bank.embeddings)
            )
            assert not np.isin(edges.frame_indices, bank.frame_indices).any()
            assert edges.embeddings.shape == (len(edges.frame_indices), reader.manifest.embed_dim)
        # stored as the backbone embeds those source frames at the working size
        record = reader.video(vid)
        some = edges.frame_indices[:4]
        pixels = engine_.searcher.frames.get([(record, some)], FrameStats())[0]
        fresh = engine_.encoder.backbone.embed_images(list(pixels)).float().numpy()
        assert np.allclose(edges.embeddings[:4].astype(np.float32), fresh, atol=2e-3)


def test_a_moment_refined_from_edge_frames_decodes_nothing_and_calls_no_backbone(
    engine_, world_corpus, monkeypatch
):
    refiner = engine_.searcher.evidence.refiner
    decoded, embedded = [], []
    real_decode, real_embed = engine.frames.decode_frames, refiner.backbone.embed_images
    monkeypatch.setattr(
        engine.frames, "decode_frames", lambda *a, **k: decoded.append(a) or real_decode(*a, **k)
    )
    monkeypatch.setattr(
        refiner.backbone, "embed_images", lambda *a, **k: embedded.append(a) or real_embed(*a, **k)
    )
    engine_.cache._items.clear() if hasattr(engine_.cache, "_items") else None
    served, right = 0, 0
    for query, video_id in world_corpus.queries("single"):
        decoded.clear(), embedded.clear()
        before = (refiner.stored_frames, refiner.embedded_frames)
        hit = engine_.searcher.search({"query": query, "top_k": 1}).hits[0]
        if hit.video_id != video_id:
            continue
        right += 1
        assert hit.moment_source == "refined"
        if refiner.embedded_frames == before[1]:  # every gap frame came from the edge frames
            assert refiner.stored_frames > before[0]
            assert not decoded and not embedded
            served += 1
    assert right >= 5 and served >= right - 1  # the stored edges cover (nearly) every moment


def test_edge_frames_give_the_moments_the_decode_path_gives(engine_, world_corpus):
    searcher = engine_.searcher
    decode_path = MomentRefiner(searcher.evidence.refiner.backbone, searcher.frames, edges=None)
    truth = world_corpus.by_id()
    stored_ious, decoded_ious = [], []
    for query, video_id in world_corpus.queries("single"):
        hit = searcher.search({"query": query, "top_k": 1}).hits[0]
        if hit.video_id != video_id:
            continue
        q = engine_.encoder.embed_queries([query]).float().numpy()[0]
        again = decode_path.refine(hit, engine_.index.frame_bank(video_id), hit.moment_run, q, FrameStats())
        frame_s = 1.0 / float(hit.record.fps)
        assert abs(hit.moment[0] - again[0]) <= frame_s + 1e-6
        assert abs(hit.moment[1] - again[1]) <= frame_s + 1e-6
        (_, start, end), *_ = truth[video_id].events
        stored_ious.append(_iou(hit.moment, start, end))
        decoded_ious.append(_iou(again, start, end))
    assert decode_path.embedded_frames > 0 and decode_path.stored_frames == 0
    assert len(stored_ious) >= 5
    assert np.mean(np.array(stored_ious) >= 0.7) >= np.mean(np.array(decoded_ious) >= 0.7)


def test_an_index_built_before_edge_frames_still_searches(
    world_index, world_corpus, tiny_world_checkpoint, tmp_path
):
    from engine import EngineConfig, load_engine

    old = tmp_path / "old-index"
    shutil.copytree(world_index, old)
    conn = sqlite3.connect(old / "meta.sqlite")
    with conn:  # the metadata store as it was before edge frames: no such columns
        conn.execute("ALTER TABLE videos DROP COLUMN edge_indices")
        conn.execute("ALTER TABLE videos DROP COLUMN edge_embeddings")
    conn.close()
    with IndexReader(old) as reader:
        assert all(reader.edge_frames(v) is None for v in reader.bank_ids())
    eng = load_engine(EngineConfig(index=old, model=str(tiny_world_checkpoint), batching=False))
    try:
        query, video_id = world_corpus.queries("single")[0]
        hit = eng.searcher.search({"query": query, "top_k": 1}).hits[0]
        refiner = eng.searcher.evidence.refiner
        assert hit.video_id == video_id and hit.moment_source == "refined"
        assert refiner.stored_frames == 0 and refiner.embedded_frames > 0  # the decode path, as before
    finally:
        eng.close()
