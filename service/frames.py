"""Stage 2's frames: the selected frames of every candidate, from the fastest place that has them.

    frame cache (Redis or the in-process LRU; exact frames)  ->  decoded from the source video

Per request: one batched cache read, the misses of each video decoded in a small thread pool
(decord releases the GIL), one batched cache write. Frames are decoded at the backbone's working
size for the video (``models.backbone.working_size``), so every layer holds the same pixels and
warm scores equal cold ones exactly.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from core.errors import summarize
from indexer.video import VideoError, decode_frames
from models.backbone import working_size
from service.cache import FrameCache, frame_key

logger = logging.getLogger(__name__)


@dataclass
class FrameStats:
    """Where this request's frames came from."""

    cache_hits: int = 0
    cache_misses: int = 0
    decoded_frames: int = 0
    cache_errors: int = 0


class FrameSource:
    def __init__(self, cache: FrameCache, *, frame_size: int, decode_workers: int = 4):
        self.cache = cache
        self.frame_size = int(frame_size)
        self.decode_workers = decode_workers
        self.decoded_frames = 0  # frames decoded from video files over this source's life
        self._pool: ThreadPoolExecutor | None = None

    def frame_shape(self, record) -> tuple[int, int]:
        """(w, h) at which this video's frames reach the backbone."""
        return working_size(int(record.width), int(record.height), self.frame_size)

    def get(
        self, requests: list[tuple[object, np.ndarray]], stats: FrameStats
    ) -> list[np.ndarray | Exception]:
        """For each (video record, frame indices): frames [K', h, w, 3], or the exception that made
        them unreadable (that candidate keeps its stage-1 rank; the others go on)."""
        shapes = [self.frame_shape(record) for record, _ in requests]
        keys_per = [
            [frame_key(record.fingerprint, i, shape) for i in indices]
            for (record, indices), shape in zip(requests, shapes, strict=True)
        ]
        errors_before = self.cache.errors
        cached = self.cache.get_many([k for keys in keys_per for k in keys])
        per_video: list[list[np.ndarray | None]] = []
        jobs: list[tuple[int, list[int]]] = []  # (request, positions that missed)
        offset = 0
        for r, keys in enumerate(keys_per):
            got = cached[offset : offset + len(keys)]
            offset += len(keys)
            per_video.append(got)
            missing = [j for j, frame in enumerate(got) if frame is None]
            stats.cache_hits += len(keys) - len(missing)
            stats.cache_misses += len(missing)
            if missing:
                jobs.append((r, missing))

        def decode(job):
            r, missing = job
            record, indices = requests[r]
            try:
                return decode_frames(record.path, np.asarray(indices)[missing], size=shapes[r])
            except (VideoError, OSError) as exc:
                return exc

        if len(jobs) > 1 and self.decode_workers > 1:
            decoded = list(self._decode_pool().map(decode, jobs))
        else:
            decoded = [decode(job) for job in jobs]
        failed: dict[int, Exception] = {}
        fresh: dict[str, np.ndarray] = {}
        for (r, missing), frames in zip(jobs, decoded, strict=True):
            if isinstance(frames, Exception):
                logger.warning("stage 2 skipped for %s: %s", requests[r][0].id, summarize(frames))
                failed[r] = frames
                continue
            self.decoded_frames += len(missing)
            stats.decoded_frames += len(missing)
            for j, frame in zip(missing, frames, strict=True):
                per_video[r][j] = frame
                fresh[keys_per[r][j]] = frame
        if fresh:
            self.cache.set_many(fresh)
        stats.cache_errors += self.cache.errors - errors_before
        return [failed[r] if r in failed else np.stack(got) for r, got in enumerate(per_video)]

    def _decode_pool(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.decode_workers, thread_name_prefix="qaslr-decode")
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
