"""The frame bank on long videos: about one bank frame per second at any length (the policy recorded
in the manifest), decoded and embedded in bounded chunks (peak frames in memory counted), the same
bytes as an unchunked build, old indexes extended with their own recorded cap, and progress that
counts video time. Real tiny checkpoint, real decord."""

from __future__ import annotations

import json

import numpy as np
import pytest

from core.config import BANK_LEGACY_MAX_FRAMES, BANK_MAX_FRAMES, INDEX_BANK_CHUNK
from indexer import BuildOptions, add_to_index, build_index, index_stats
from indexer.maintenance import verify_index
from indexer.pipeline import SourceItem
from indexer.store import IndexMismatchError, IndexReader, read_manifest

K = 8
LONG_S = 20 * 60  # a 20-minute video, 4 fps, 32x32


def _opts(ckpt, **kw) -> BuildOptions:
    return BuildOptions(model=str(ckpt), frames=K, clip_len=4, batch_videos=1, workers=1, **kw)


@pytest.fixture(scope="module")
def long_video(tmp_path_factory, video_factory):
    root = tmp_path_factory.mktemp("long")
    return video_factory(root / "long.mp4", num_frames=LONG_S * 4, fps=4.0, size=(32, 32), seed=11)


class SecondsRecorder:
    def __init__(self):
        self.videos, self.frames, self.seconds = 0, 0, 0.0

    def start(self, total: int) -> None:
        pass

    def advance(self, videos: int, frames: int, seconds: float = 0.0) -> None:
        self.videos += videos
        self.frames += frames
        self.seconds += seconds


def test_a_long_video_keeps_one_bank_frame_per_second_in_bounded_memory(
    long_video, tiny_checkpoint, tmp_path
):
    progress = SecondsRecorder()
    report = build_index(
        [SourceItem("long", long_video)], tmp_path / "idx", _opts(tiny_checkpoint), progress=progress
    )
    stats = report.stats
    assert stats.indexed == 1 and stats.failed == 0
    with IndexReader(tmp_path / "idx") as r:
        assert r.manifest.candidate_policy == {"per_second": 1.0, "max_frames": BANK_MAX_FRAMES}
        bank = r.frame_bank("long")
        c = len(bank.frame_indices)
        assert c == LONG_S  # one per second: the old cap kept 256
        assert np.all(np.diff(bank.timestamps) <= 1.0 + 1e-6)
        assert bank.embeddings.shape == (c, r.manifest.embed_dim)
        assert np.isfinite(np.asarray(bank.embeddings, dtype=np.float32)).all()
        np.testing.assert_array_equal(r.stored_rows("long", bank.frame_indices), np.arange(c))
        assert r.read_stored_frame("long", c - 1).shape[2] == 3  # the last chunk's pixels are kept
        edges = r.edge_frames("long")  # source frames inside the bank's largest changes (indexer.edges)
        e = 0 if edges is None else len(edges.frame_indices)
    # pixels held at once: the K frames and two bank chunks (the one embedded, the one decoded ahead)
    assert 0 < stats.peak_frames_in_memory <= K + 2 * INDEX_BANK_CHUNK < c
    assert stats.frames_decoded == c + K - len(np.intersect1d(bank.frame_indices, _uniform(long_video))) + e
    assert progress.videos == 1 and progress.seconds == pytest.approx(LONG_S)
    assert stats.video_s == pytest.approx(LONG_S) and "video: 20.0 min" in stats.summary()
    assert verify_index(tmp_path / "idx").ok
    s = index_stats(tmp_path / "idx")
    fb = s["frame_bank"]
    assert fb["frames"] == c and fb["frames_per_hour"] == pytest.approx(3600)
    d = s["manifest"]["embed_dim"]
    assert 2 * d <= fb["bytes_per_frame"] < 2 * d + 1
    assert fb["bytes_per_hour"] == pytest.approx(fb["bytes"] * 3)
    assert s["frame_store"]["bytes_per_hour"] == pytest.approx(s["frame_store"]["bytes"] * 3)


def _uniform(path):
    from indexer.video import probe_video
    from models.selection import uniform_indices

    return uniform_indices(probe_video(path).num_frames, K)


@pytest.mark.parametrize("frame_store", ["jpeg", "lz4"])
def test_a_chunked_bank_writes_the_same_bytes_as_one_decoded_at_once(
    video_factory, tiny_checkpoint, tmp_path, frame_store
):
    video = video_factory(tmp_path / "v.mp4", num_frames=4 * 70, fps=4.0, size=(32, 32), seed=3)
    items = [SourceItem("v", video)]
    whole = build_index(items, tmp_path / "whole", _opts(tiny_checkpoint, frame_store=frame_store))
    chunked = build_index(
        items, tmp_path / "chunked", _opts(tiny_checkpoint, frame_store=frame_store, bank_chunk=16)
    )
    assert whole.stats.peak_frames_in_memory > chunked.stats.peak_frames_in_memory
    assert chunked.stats.peak_frames_in_memory <= K + 2 * 16
    assert whole.stats.frames_decoded == chunked.stats.frames_decoded  # no frame decoded twice
    with IndexReader(tmp_path / "whole") as a, IndexReader(tmp_path / "chunked") as b:
        ba, bb = a.frame_bank("v"), b.frame_bank("v")
        assert len(ba.frame_indices) == 70
        np.testing.assert_array_equal(ba.frame_indices, bb.frame_indices)
        np.testing.assert_allclose(
            np.asarray(ba.embeddings, np.float32), np.asarray(bb.embeddings, np.float32), atol=2e-3
        )
        ra, rb = a.stored_rows("v", ba.frame_indices), b.stored_rows("v", bb.frame_indices)
        np.testing.assert_array_equal(ra, np.arange(70))
        np.testing.assert_array_equal(rb, np.arange(70))
    pa = sorted((tmp_path / "whole" / "frames").glob("*.bin"))
    pb = sorted((tmp_path / "chunked" / "frames").glob("*.bin"))
    assert [p.read_bytes() for p in pa] == [p.read_bytes() for p in pb]


def test_an_index_with_the_old_cap_is_extended_with_its_own_policy(
    long_video, tiny_checkpoint, tmp_path, video_factory
):
    short = video_factory(tmp_path / "short.mp4", num_frames=40, fps=4.0, size=(32, 32), seed=5)
    index = tmp_path / "old"
    build_index(
        [SourceItem("short", short)], index, _opts(tiny_checkpoint, bank_frames=BANK_LEGACY_MAX_FRAMES)
    )
    # an index of the old format records the old cap; one that records none was built with it too
    m = json.loads((index / "manifest.json").read_text())
    assert m["candidate_policy"] == {"per_second": 1.0, "max_frames": BANK_LEGACY_MAX_FRAMES}
    del m["candidate_policy"]["max_frames"]
    (index / "manifest.json").write_text(json.dumps(m))
    assert read_manifest(index).bank_max_frames == BANK_LEGACY_MAX_FRAMES
    m["candidate_policy"]["max_frames"] = BANK_LEGACY_MAX_FRAMES
    (index / "manifest.json").write_text(json.dumps(m))
    # `indexer add` with today's defaults (no bank flags) keeps the index's own policy
    report = add_to_index([SourceItem("long", long_video)], index, _opts(tiny_checkpoint))
    assert report.stats.indexed == 1
    with IndexReader(index) as r:
        assert r.manifest.bank_max_frames == BANK_LEGACY_MAX_FRAMES
        assert len(r.frame_bank("long").frame_indices) == BANK_LEGACY_MAX_FRAMES
        assert len(r.frame_bank("short").frame_indices) == 10
    assert verify_index(index).ok
    # resuming it with `indexer build` takes its policy as flags; today's default cap is refused
    with pytest.raises(IndexMismatchError):
        build_index([SourceItem("short", short)], index, _opts(tiny_checkpoint))
    again = build_index(
        [SourceItem("short", short)], index, _opts(tiny_checkpoint, bank_frames=BANK_LEGACY_MAX_FRAMES)
    )
    assert again.stats.skipped == 1 and again.stats.indexed == 0


def test_the_progress_bar_counts_video_minutes():
    from qaslr.commands.indexer import TqdmProgress

    bar = TqdmProgress(disable=True)
    bar.start(2)
    bar.advance(1, 100, seconds=90.0)
    bar.advance(1, 50)  # an old caller: no seconds
    assert bar.seconds == 90.0 and bar.frames == 150
    assert bar.postfix(60.0).startswith("1.5 video-minutes (1.5/min), 2.5 frames/s")
