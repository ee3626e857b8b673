"""The library facade (:mod:`indexer.api`) on its own terms: options checked before anything runs,
progress reported through the small protocol, a clean stop, and the Indexer handle."""

from __future__ import annotations

import pytest

from indexer import BuildOptions, Indexer, OptionsError, build_index, prepare_build
from indexer.maintenance import verify_index
from indexer.store import IndexReader


class Recorder:
    def __init__(self):
        self.total, self.videos, self.frames = None, 0, 0

    def start(self, total: int) -> None:
        self.total = total

    def advance(self, videos: int, frames: int) -> None:
        self.videos += videos
        self.frames += frames


def _opts(ckpt, **kw) -> BuildOptions:
    return BuildOptions(model=str(ckpt), frames=8, clip_len=4, **kw)


@pytest.mark.parametrize(
    "options, message",
    [
        (BuildOptions(frames=0), "--frames must be at least 1"),
        (BuildOptions(workers=0), "--workers must be at least 1"),
        (BuildOptions(bank_per_second=0), "--bank-per-second must be positive"),
        (BuildOptions(ray_address="127.0.0.1:6390"), "need --backend ray"),
        (BuildOptions(backend="spark"), "backend must be one of local, ray"),
    ],
)
def test_options_are_checked_before_anything_is_written(options, message, sample_videos, tmp_path):
    with pytest.raises(OptionsError, match=message):
        prepare_build(sample_videos, tmp_path / "idx", options)
    assert not (tmp_path / "idx").exists()


def test_progress_stop_and_resume(sample_videos, tiny_checkpoint, tmp_path):
    index = tmp_path / "idx"
    progress = Recorder()
    report = build_index(
        sample_videos,
        index,
        _opts(tiny_checkpoint, batch_videos=1),
        progress=progress,
        stop=lambda: progress.videos >= 2,  # asked before each batch: ends after the second
    )
    assert report.stopped and progress.total == 4 and progress.videos == 2 and progress.frames > 0
    assert report.indexed_total + report.failed_total == 2 and verify_index(index).ok
    handle = Indexer(index, _opts(tiny_checkpoint, batch_videos=1))
    resumed = handle.build(sample_videos)
    assert not resumed.stopped and resumed.stats.skipped == 2 and resumed.indexed_total == 4
    assert handle.remove(["a.mp4", "nope"]).unknown == ["nope"]
    assert handle.stats(videos=True)["indexed"] == 3 and handle.verify().ok
    with IndexReader(index) as r:
        assert len(r) == 3
