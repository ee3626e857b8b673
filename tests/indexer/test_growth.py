"""Indexes that keep growing and shrinking: `add` switches the FAISS type when the corpus crosses the
build's thresholds (small ones, set by --faiss-exact-max), `compact` reclaims what `remove` left, and
the API answers searches while an index is switched under it. Real tiny checkpoint, decord, FAISS."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from indexer import BuildOptions, add_to_index, build_index, compact_index, remove_from_index
from indexer.maintenance import verify_index
from indexer.store import IndexReader
from qaslr.commands.indexer import main

FACADE_CHILD = Path(__file__).with_name("facade_child.py")


def _build(source, index, ckpt, **kw):
    report = build_index(source, index, BuildOptions(model=str(ckpt), frames=8, clip_len=4, **kw))
    assert not report.stopped
    return report


FLAT = "IDMap2,Flat"
ANN = "IDMap2,IVF1(Flat),Flat"  # the automatic IVF for 5 videos (one list: too few to train more)


@pytest.fixture
def videos(tmp_path, video_factory):
    """Two folders: ``first`` (3 videos) and ``more`` (2 others)."""
    first, more = tmp_path / "first", tmp_path / "more"
    for i in range(3):
        video_factory(first / f"v{i}.mp4", num_frames=24 + 6 * i, fps=12, seed=20 + i)
    for i in range(3, 5):
        video_factory(more / f"v{i}.mp4", num_frames=24 + 6 * i, fps=12, seed=20 + i)
    return first, more


def _answers(directory, k=5):
    """Every indexed video's own embedding as a query: the ranked ids and scores, and its frame bank."""
    with IndexReader(directory) as r:
        ids = sorted(v.id for v in r.videos())
        queries = np.stack([r.embedding(i) for i in ids])
        hits = r.search(queries, k)
        banks = {
            i: (r.frame_bank(i).frame_indices.tolist(), np.asarray(r.frame_bank(i).embeddings).tobytes())
            for i in ids
        }
        return ids, [[(vid, round(s, 5)) for vid, s in row] for row in hits], banks


def _factory(directory) -> str:
    with IndexReader(directory) as r:
        return r.manifest.faiss_factory


def test_add_switches_faiss_type_when_the_corpus_crosses_the_threshold(videos, tiny_checkpoint, tmp_path):
    first, more = videos
    index = tmp_path / "idx"
    _build(first, index, tiny_checkpoint, faiss_exact_max=4)
    assert _factory(index) == FLAT

    out = add_to_index(more, index, BuildOptions(faiss_exact_max=4)).summary()
    assert "switched from IDMap2,Flat" in out
    assert _factory(index) == ANN
    assert verify_index(index).ok
    ids, hits, _ = _answers(index)
    assert len(ids) == 5 and [row[0][0] for row in hits] == ids  # each video finds itself first

    # shrinking below the threshold and compacting switches back to exact search
    assert remove_from_index(index, ["v3.mp4", "v4.mp4"]).unknown == []
    assert f"switched from {ANN}" in compact_index(index, exact_max=4).summary()
    assert _factory(index) == FLAT and verify_index(index).ok


def test_add_keeps_a_faiss_type_forced_at_build(videos, tiny_checkpoint, tmp_path):
    first, more = videos
    index = tmp_path / "idx"
    _build(first, index, tiny_checkpoint, faiss_factory="HNSW16,Flat")
    added = add_to_index(more, index, BuildOptions(faiss_exact_max=1))
    assert not added.stopped
    assert "switched" not in added.summary()
    assert _factory(index) == "IDMap2,HNSW16,Flat"


def test_compact_reclaims_removed_frames_and_keeps_answers(videos, tiny_checkpoint, tmp_path):
    first, _ = videos
    index = tmp_path / "idx"
    _build(first, index, tiny_checkpoint, batch_videos=3)  # one bank file for all three
    assert remove_from_index(index, ["v1.mp4"]).unknown == []
    (bank_file,) = (index / "bank").glob("bank-*.npy")
    rows_before = np.load(bank_file, mmap_mode="r").shape[0]
    (frames_file,) = (index / "frames").glob("frames-*.bin")  # the default build keeps a frame store
    frames_bytes_before = frames_file.stat().st_size
    before, pixels_before = _answers(index), _stored_pixels(index)

    out = compact_index(index).summary()
    assert "frame bank: 1 file(s) rewritten" in out and "frame store: 1 file(s) rewritten" in out
    (new_frames,) = (index / "frames").glob("frames-*.bin")
    assert new_frames.name != frames_file.name and new_frames.stat().st_size < frames_bytes_before
    assert _stored_pixels(index) == pixels_before  # the surviving videos' stored frames, bit for bit
    (new_file,) = (index / "bank").glob("bank-*.npy")
    assert new_file.name != bank_file.name and not bank_file.exists()
    with IndexReader(index) as r:
        live = sum(len(r.frame_bank(v.id).frame_indices) for v in r.videos())
    assert np.load(new_file, mmap_mode="r").shape[0] == live < rows_before
    assert _answers(index) == before  # same rankings, scores and frame banks
    report = verify_index(index)
    assert report.ok and not report.warnings, (report.errors, report.warnings)

    out = compact_index(index).summary()  # nothing left to do: a no-op
    assert "0 file(s) rewritten" in out and _answers(index) == before
    assert _stored_pixels(index) == pixels_before


def _stored_pixels(index) -> dict[str, list[bytes]]:
    """Every indexed video's stored frame-bank pixels."""
    with IndexReader(index) as r:
        return {
            v.id: [
                r.read_stored_frame(v.id, row).tobytes()
                for row in range(len(r.frame_bank(v.id).frame_indices))
            ]
            for v in r.videos()
        }


CRASH_IN_COMPACT = """
import os, sys
from indexer.store import db
def crash(self, moves, state):
    os._exit(99)  # like kill -9: after the new bank file is written, before its commit point
db.MetadataStore.move_banks = crash
from indexer import compact_index
compact_index(sys.argv[1])
"""


def test_compact_killed_mid_way_leaves_a_valid_index_and_finishes_when_run_again(
    videos, tiny_checkpoint, tmp_path
):
    first, _ = videos
    index = tmp_path / "idx"
    _build(first, index, tiny_checkpoint, batch_videos=3)
    assert remove_from_index(index, ["v0.mp4"]).unknown == []
    before = _answers(index)

    proc = subprocess.run(
        [sys.executable, "-c", CRASH_IN_COMPACT, str(index)],
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 99, proc.stderr[-2000:]
    assert len(list((index / "bank").glob("bank-*.npy"))) == 2  # the new file exists, uncommitted
    assert verify_index(index).ok and _answers(index) == before  # the old file still serves

    compact_index(index)
    assert len(list((index / "bank").glob("bank-*.npy"))) == 1
    report = verify_index(index)
    assert report.ok and not report.warnings
    assert _answers(index) == before


@pytest.mark.slow
def test_search_answers_while_add_switches_the_index_type(videos, tiny_checkpoint, tmp_path):
    """A running API keeps answering while `indexer add` (another process) grows its index past the
    threshold and switches FAISS; a reload then serves the switched index with the new videos."""
    from service.app import create_app
    from service.settings import Settings
    from tests.service.conftest import live_server

    first, more = videos
    index = tmp_path / "idx"
    _build(first, index, tiny_checkpoint, faiss_exact_max=4)
    app = create_app(Settings(index=index, model=str(tiny_checkpoint), redis_url=None, default_frames=8))
    query = {"query": "moving blocks", "top_k": 10, "mode": "indexed"}
    with live_server(app) as client:
        assert client.get("/readyz").json()["faiss"]["factory"] == FLAT
        statuses, stop = [], threading.Event()

        def keep_searching():
            while not stop.is_set():
                statuses.append(client.post("/search", json=query).status_code)

        searcher = threading.Thread(target=keep_searching)
        searcher.start()
        try:
            cmd = ["add", str(more), str(index), '{"faiss_exact_max": 4}']
            proc = subprocess.run(
                [sys.executable, str(FACADE_CHILD), *cmd], capture_output=True, text=True, timeout=300,
                env=dict(os.environ, OMP_NUM_THREADS="1"),
            )  # fmt: skip
            assert proc.returncode == 0, proc.stderr[-2000:]
            seen_during = len(statuses)
            assert client.post("/admin/reload-index").status_code == 200
            after = client.post("/search", json=query)
        finally:
            stop.set()
            searcher.join(timeout=60)
        assert seen_during > 0 and set(statuses) == {200}
        assert after.status_code == 200 and len(after.json()["results"]) == 5
        assert client.get("/readyz").json()["faiss"]["factory"] == ANN


# -- the `indexer` command itself: messages and exit statuses -------------------------------------


def test_compact_of_a_missing_index_is_a_usage_error(tmp_path, capsys):
    assert main(["compact", "--index", str(tmp_path / "nope")]) == 2
    assert "indexer: error" in capsys.readouterr().err
