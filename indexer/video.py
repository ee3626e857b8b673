"""Probing and decoding source videos with decord (exact frames on random access; docs/architecture.md,
"Decoding").

Frames are decoded straight to the backbone's working size for each video: its aspect ratio kept,
both sides multiples of 32, within the backbone's pixel budget (``models.backbone.working_size``).
Frames are addressed by their index in the source video; nothing here writes frames to disk (the
frame store, ``indexer/store/frames.py``, keeps the frame-bank frames' pixels when a build asks for it).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from core.config import BANK_MAX_FRAMES, BANK_PER_SECOND
from core.errors import strip_paths, summarize

logger = logging.getLogger(__name__)

VIDEO_EXTENSIONS = (".mp4", ".mkv", ".avi", ".mov", ".webm", ".m4v", ".mpg", ".mpeg", ".wmv", ".flv", ".ts")
MAX_SIDE = 16384  # larger frames are refused as absurd rather than risking memory blow-up
MAX_FPS = 1000.0


class VideoError(Exception):
    """A video that cannot be indexed; ``str(exc)`` is the reason recorded for the user."""


@dataclass(frozen=True)
class VideoInfo:
    path: str
    num_frames: int
    fps: float
    width: int
    height: int

    @property
    def duration_s(self) -> float:
        return self.num_frames / self.fps


# decord bundles FFmpeg 4.1, whose decoders fill static tables the first time one opens and do so
# without a lock: two threads opening their first MPEG-4 part 2 decoder at once can abort the whole
# process ("Assertion ret >= 0 failed at libavcodec/bitstream.c"; seen once in the suite, a build's
# decode and frame-bank threads, and in 1 of 40 fresh processes opening one from 4 threads at once).
# Openings take this lock; decoding does not need it.
DECODER_OPEN_LOCK = threading.Lock()


def _reader(path: str | os.PathLike, size: tuple[int, int] | None = None):
    import decord

    kwargs = {"num_threads": 1}
    if size is not None:
        kwargs.update(width=int(size[0]), height=int(size[1]))
    try:
        with DECODER_OPEN_LOCK:
            return decord.VideoReader(str(path), ctx=decord.cpu(0), **kwargs)
    except Exception as exc:  # decord raises its own DECORDError / RuntimeError on bad input
        raise VideoError(f"cannot open as video: {strip_paths(summarize(exc))}") from exc


def probe_video(path: str | os.PathLike) -> VideoInfo:
    """Frame count, fps and size; raises :class:`VideoError` with a reason for anything unusable."""
    p = Path(path)
    if not p.is_file():
        raise VideoError("file not found")
    if p.stat().st_size == 0:
        raise VideoError("empty file (0 bytes)")
    vr = _reader(p)
    n = len(vr)
    if n <= 0:
        raise VideoError("no decodable frames")
    fps = float(vr.get_avg_fps() or 0.0)
    if not np.isfinite(fps) or fps <= 0 or fps > MAX_FPS:
        raise VideoError(f"implausible frame rate {fps}")
    height, width = vr[0].shape[:2]
    if not (0 < width <= MAX_SIDE and 0 < height <= MAX_SIDE):
        raise VideoError(f"implausible resolution {width}x{height}")
    return VideoInfo(path=str(p), num_frames=int(n), fps=fps, width=int(width), height=int(height))


def decode_frames(path: str | os.PathLike, indices, *, size: tuple[int, int]) -> np.ndarray:
    """Frames at ``indices`` resized to ``size`` = (width, height), normally the backbone's working
    size for this video (``Backbone.frame_shape``, aspect ratio kept) -> [n, height, width, 3] uint8."""
    indices = np.asarray(indices, dtype=np.int64)
    width, height = (int(x) for x in size)
    if indices.size == 0:
        return np.zeros((0, height, width, 3), dtype=np.uint8)
    vr = _reader(path, size)
    if indices.min() < 0 or indices.max() >= len(vr):
        raise VideoError(f"frame index out of range 0..{len(vr) - 1}")
    # in file order and each frame once: the decoder then moves forward through each GOP once
    # instead of seeking back to a keyframe for every out-of-order request
    wanted, inverse = np.unique(indices, return_inverse=True)
    try:
        frames = vr.get_batch(wanted.tolist()).asnumpy()
    except Exception as exc:
        raise VideoError(f"decoding failed: {strip_paths(summarize(exc))}") from exc
    if len(wanted) != len(indices) or not np.array_equal(wanted, indices):
        frames = frames[inverse.reshape(-1)]
    return np.ascontiguousarray(frames, dtype=np.uint8)


def candidate_frame_indices(
    info: VideoInfo, *, max_frames: int = BANK_MAX_FRAMES, per_second: float = BANK_PER_SECOND
) -> np.ndarray:
    """The frame bank's candidate frames: about ``per_second`` frames per second, at most ``max_frames``
    (core.config.BANK_MAX_FRAMES: 4 h at 1 fps; ReToken's K1 was 256), at segment centres; sorted and unique."""
    from models.selection import uniform_indices

    wanted = max(1, min(max_frames, int(round(info.duration_s * per_second))))
    return uniform_indices(info.num_frames, wanted)


def file_fingerprint(path: str | os.PathLike, *, chunk: int = 1 << 20) -> str:
    """Content fingerprint: size plus hashes of the first and last MiB. Cheap on hour-long files and
    changes when a file is replaced or re-encoded; used as the frame-cache key and to detect edits."""
    p = Path(path)
    size = p.stat().st_size
    h = hashlib.sha256(str(size).encode())
    with open(p, "rb") as f:
        h.update(f.read(chunk))
        if size > chunk:
            f.seek(max(chunk, size - chunk))
            h.update(f.read(chunk))
    return h.hexdigest()[:24]


def find_videos(root: str | os.PathLike) -> list[Path]:
    """Video files under ``root`` (recursive, by extension), in a stable sorted order."""
    root = Path(root)
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in VIDEO_EXTENSIONS)
