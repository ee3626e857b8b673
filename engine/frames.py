"""Stage 2's frames: the selected frames of every candidate, from the fastest place that has them.

    frame cache (Redis or the in-process LRU; the hot layer)
      -> the index's frame store (the frame-bank pixels kept by ``indexer build --frame-store``)
      -> decoded from the source video

Per request: one batched cache read; the misses of each video read from the frame store or decoded,
one video per task in a small thread pool (decord and Pillow release the GIL); one batched cache
write. Frames are at the backbone's working size for the video (``models.backbone.working_size``),
so every layer holds the same pixels for a frame: a frame read from a lossy store (JPEG) is cached
under a key that names the codec, so a warm answer equals a cold one exactly. A stored frame that
cannot be read (damaged file, CRC mismatch) is decoded from the source instead, counted and reported.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from core.config import FrameStore
from core.errors import summarize
from engine.cache import FrameCache, frame_key
from indexer.store.frames import EXACT_CODECS, StoredFrameError
from indexer.video import VideoError, decode_frames
from models.backbone import working_size

logger = logging.getLogger(__name__)


@dataclass
class FrameStats:
    """Where this request's frames came from: the cache (``cache_hits``), or, for the misses, the
    index's frame store (``store_frames``) or the source video (``decoded_frames``)."""

    cache_hits: int = 0
    cache_misses: int = 0
    store_frames: int = 0
    decoded_frames: int = 0
    cache_errors: int = 0
    store_errors: int = 0  # stored frames that could not be read (decoded from the source instead)
    notes: list[str] = field(default_factory=list)  # one line per video whose stored frames failed


@dataclass
class _Loaded:
    frames: dict[int, np.ndarray]  # request position -> pixels
    from_store: set[int]  # positions served by the frame store
    store_errors: list[str]


class FrameSource:
    """Frames for (video record, frame indices) requests. ``store`` is the index (an
    ``IndexReader``) when its frame store can serve this source: it keeps pixels and they are at
    this source's working size (``frame_size`` equals the index's)."""

    def __init__(self, cache: FrameCache, *, frame_size: int, decode_workers: int = 4, store=None):
        self.cache = cache
        self.frame_size = int(frame_size)
        self.decode_workers = decode_workers
        self.store = store if store is not None and store.frame_store != FrameStore.NONE else None
        # frames from a lossy store differ a little from decoded ones: they get their own cache keys
        self._store_variant = (
            None
            if self.store is None or self.store.frame_store in EXACT_CODECS
            else str(self.store.frame_store)
        )
        self.decoded_frames = 0  # frames decoded from video files over this source's life
        self.store_frames = 0  # frames read from the frame store over this source's life
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()  # concurrent searches share the counters and the pool

    def frame_shape(self, record) -> tuple[int, int]:
        """(w, h) at which this video's frames reach the backbone."""
        return working_size(int(record.width), int(record.height), self.frame_size)

    def _stored_rows(self, record, indices: np.ndarray) -> np.ndarray:
        if self.store is None:
            return np.full(len(indices), -1, dtype=np.int64)
        return self.store.stored_rows(record.id, indices)

    def get(
        self, requests: list[tuple[object, np.ndarray]], stats: FrameStats
    ) -> list[np.ndarray | Exception]:
        """For each (video record, frame indices): frames [K', h, w, 3], or the exception that made
        them unreadable (that candidate keeps its stage-1 rank; the others go on)."""
        shapes = [self.frame_shape(record) for record, _ in requests]
        rows_per = [self._stored_rows(record, np.asarray(indices)) for record, indices in requests]
        keys_per = [
            [
                frame_key(record.fingerprint, i, shape, variant=self._store_variant if row >= 0 else None)
                for i, row in zip(indices, rows, strict=True)
            ]
            for (record, indices), shape, rows in zip(requests, shapes, rows_per, strict=True)
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

        def load(job) -> _Loaded | Exception:
            r, missing = job
            return self._load(requests[r][0], np.asarray(requests[r][1]), rows_per[r], missing, shapes[r])

        if len(jobs) > 1 and self.decode_workers > 1:
            loaded = list(self._decode_pool().map(load, jobs))
        else:
            loaded = [load(job) for job in jobs]
        failed: dict[int, Exception] = {}
        fresh: dict[str, np.ndarray] = {}
        for (r, missing), got in zip(jobs, loaded, strict=True):
            record = requests[r][0]
            if isinstance(got, Exception):
                logger.warning("stage 2 skipped for %s: %s", record.id, summarize(got))
                failed[r] = got
                continue
            n_store = len(got.from_store)
            with self._lock:
                self.store_frames += n_store
                self.decoded_frames += len(missing) - n_store
            stats.store_frames += n_store
            stats.decoded_frames += len(missing) - n_store
            if got.store_errors:
                stats.store_errors += len(got.store_errors)
                note = (
                    f"{record.id}: {len(got.store_errors)} stored frame(s) could not be read "
                    f"({got.store_errors[0]}); decoded from the source instead"
                )
                logger.warning("%s", note)
                stats.notes.append(note)
            for j in missing:
                frame = got.frames[j]
                per_video[r][j] = frame
                # a frame decoded after its stored copy failed is cached as a decoded frame
                key = keys_per[r][j]
                if j not in got.from_store and self._store_variant is not None and rows_per[r][j] >= 0:
                    key = frame_key(record.fingerprint, int(requests[r][1][j]), shapes[r])
                fresh[key] = frame
        if fresh:
            self.cache.set_many(fresh)
        stats.cache_errors += self.cache.errors - errors_before
        return [failed[r] if r in failed else np.stack(got) for r, got in enumerate(per_video)]

    def _load(
        self, record, indices: np.ndarray, rows: np.ndarray, missing: list[int], shape: tuple[int, int]
    ) -> _Loaded | Exception:
        """The ``missing`` positions of one video: from the frame store where it has them, the rest
        (and any stored frame that fails) decoded from the source in one decoder pass."""
        out = _Loaded({}, set(), [])
        need: list[int] = []
        w, h = shape
        for j in missing:
            if rows[j] >= 0:
                try:
                    frame = self.store.read_stored_frame(record.id, int(rows[j]))
                    if frame.shape != (h, w, 3):
                        raise StoredFrameError(f"stored frame is {frame.shape[:2]}, expected {(h, w)}")
                    out.frames[j] = frame
                    out.from_store.add(j)
                    continue
                except StoredFrameError as exc:
                    out.store_errors.append(str(exc))
            need.append(j)
        if need:
            try:
                decoded = decode_frames(record.path, indices[need], size=shape)
            except (VideoError, OSError) as exc:
                return exc
            for j, frame in zip(need, decoded, strict=True):
                out.frames[j] = frame
        return out

    def _decode_pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.decode_workers, thread_name_prefix="qaslr-decode")
            return self._pool

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)
