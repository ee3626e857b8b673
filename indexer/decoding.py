"""Decoding for the build: one video's K uniform frames and its frame bank, decoded once at the
working size, and the bank of a long video in bounded chunks (:func:`bank_chunks`), with a gauge of
the frames held at once. Split from :mod:`indexer.pipeline`, which re-exports these names."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from core.config import INDEX_BANK_CHUNK, FrameStore
from core.errors import describe, strip_paths, summarize
from indexer.sources import SourceItem, source_stat
from indexer.store.frames import EncodedFrames, encode_frames
from indexer.subtitles.tracks import TrackOptions, read_text_tracks, sidecar_signature, sidecars_of
from indexer.video import (
    VideoError,
    VideoInfo,
    candidate_frame_indices,
    decode_frames,
    file_fingerprint,
    probe_video,
)


class FrameGauge:
    """Counts the decoded frames a build holds at once (thread-safe) and the most it held: the memory
    bound of long videos, measured as a count of frames (not RSS)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.now = 0
        self.peak = 0

    def add(self, n: int) -> None:
        with self._lock:
            self.now += int(n)
            self.peak = max(self.peak, self.now)


@dataclass
class Decoded:
    """A probed and decoded video, or the reason it could not be (``error``)."""

    item: SourceItem
    fingerprint: str = ""
    info: VideoInfo | None = None
    frames: np.ndarray | None = None  # [U, h, w, 3] the union of uniform and candidate frames
    union: np.ndarray | None = None  # [U] source frame indices of ``frames``
    uniform: np.ndarray | None = None  # [K_V] positions of the K uniform frames in ``union``
    # [C] positions of the candidate frames in ``union``; None for a chunked (long) bank, which
    # ``frames`` does not hold: :func:`bank_chunks` decodes it ``bank_chunk`` frames at a time
    candidates: np.ndarray | None = None
    bank: np.ndarray | None = None  # [C] source frame indices of the candidate frames
    bank_chunk: int = INDEX_BANK_CHUNK
    frame_size: tuple[int, int] | None = None  # (width, height) the frames are decoded at
    frame_store: str = FrameStore.NONE
    error: str | None = None
    seconds: float = 0.0
    source_stat: str | None = None
    stored: object = None  # indexer.store.frames.EncodedFrames of the candidate frames (frame store)
    store_seconds: float = 0.0
    tracks: list | None = None  # indexer.subtitles.TextTrack s (None: not read)
    tracks_stat: str | None = None  # the sidecar signature they were read with
    tracks_seconds: float = 0.0
    gauge: FrameGauge | None = field(default=None, repr=False, compare=False)

    @property
    def chunked(self) -> bool:
        return self.bank is not None and self.candidates is None

    @property
    def decoded_frames(self) -> int:
        """Frames decoded for this video: the union, plus a chunked bank's frames outside it."""
        if self.union is None:
            return 0
        if not self.chunked:
            return len(self.union)
        return len(self.union) + int(np.count_nonzero(~np.isin(self.bank, self.union)))

    def __getstate__(self):  # the gauge stays in its process (Ray pickles decoded batches)
        state = dict(self.__dict__)
        state["gauge"] = None
        return state

    def drop_frames(self) -> None:
        """Free the pixels (and count them out of the gauge)."""
        if self.frames is not None and self.gauge is not None:
            self.gauge.add(-len(self.frames))
        self.frames = None


def bank_chunks(d: Decoded) -> Iterator[tuple[np.ndarray, EncodedFrames | None, float, float]]:
    """A chunked video's bank frames, ``d.bank_chunk`` at a time in bank order: (frames, their frame-
    store encoding or None, decode seconds, store seconds). The next chunk is decoded (and encoded for
    the store) in a helper thread while the caller embeds this one, so at most two chunks are held.
    Frames among the K uniform ones are copied from ``d.frames``, not decoded again."""
    width, height = d.frame_size
    spans = [d.bank[s : s + d.bank_chunk] for s in range(0, len(d.bank), max(1, d.bank_chunk))]

    def load(idx: np.ndarray):
        t = time.perf_counter()
        frames = np.empty((len(idx), height, width, 3), dtype=np.uint8)
        have = np.isin(idx, d.union)
        if have.any():
            frames[have] = d.frames[np.searchsorted(d.union, idx[have])]
        if not have.all():
            frames[~have] = decode_frames(d.item.path, idx[~have], size=d.frame_size)
        if d.gauge is not None:
            d.gauge.add(len(frames))
        decode_s = time.perf_counter() - t
        t = time.perf_counter()
        stored = encode_frames(frames, d.frame_store) if d.frame_store != FrameStore.NONE else None
        return frames, stored, decode_s, time.perf_counter() - t

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="bank") as pool:
        pending = pool.submit(load, spans[0]) if spans else None
        try:
            for i in range(len(spans)):
                frames, stored, decode_s, store_s = pending.result()
                pending = pool.submit(load, spans[i + 1]) if i + 1 < len(spans) else None
                try:
                    yield frames, stored, decode_s, store_s
                finally:
                    if d.gauge is not None:
                        d.gauge.add(-len(frames))
                    del frames
        finally:  # abandoned (an error while embedding): the chunk decoded ahead is counted out too
            if pending is not None and not pending.cancel():
                with contextlib.suppress(Exception):
                    ahead = len(pending.result()[0])
                    if d.gauge is not None:
                        d.gauge.add(-ahead)


def decode_video(
    item: SourceItem,
    *,
    frame_shape,
    max_frames: int,
    bank_per_second: float,
    bank_max: int,
    frame_store: str = FrameStore.NONE,
    bank_chunk: int = INDEX_BANK_CHUNK,
    gauge: FrameGauge | None = None,
    text_tracks: TrackOptions | None = None,
) -> Decoded:
    """Probe and decode one video (runs in the decode pool). Never raises for bad input. A video with
    more than ``bank_chunk`` candidate frames decodes only its K frames here (its bank: :func:`bank_chunks`).
    With ``text_tracks``, its subtitles (and speech recognition) are read too (:mod:`indexer.subtitles`):
    a track that cannot be read is reported in ``tracks``, never a failure of the video."""
    from models.selection import uniform_indices

    start = time.perf_counter()
    out = Decoded(item=item, bank_chunk=max(1, int(bank_chunk)), frame_store=frame_store, gauge=gauge)
    try:
        if not item.path.is_file():
            raise VideoError("file not found")
        out.source_stat = source_stat(item.path)
        out.fingerprint = file_fingerprint(item.path)
        info = probe_video(item.path)
        out.info = info
        uniform = uniform_indices(info.num_frames, max_frames)  # fewer than K for short videos
        cand = candidate_frame_indices(info, max_frames=bank_max, per_second=bank_per_second)
        chunked = len(cand) > out.bank_chunk
        union = np.unique(uniform) if chunked else np.union1d(uniform, cand)  # each frame decoded once
        out.frame_size = tuple(int(x) for x in frame_shape(info.width, info.height))
        out.frames = decode_frames(item.path, union, size=out.frame_size)
        if gauge is not None:
            gauge.add(len(out.frames))
        out.union = union
        out.bank = cand
        out.uniform = np.searchsorted(union, uniform)
        out.candidates = None if chunked else np.searchsorted(union, cand)
        if frame_store != FrameStore.NONE and not chunked:
            t = time.perf_counter()
            out.stored = encode_frames(out.frames[out.candidates], frame_store)
            out.store_seconds = time.perf_counter() - t
        if text_tracks is not None:
            t = time.perf_counter()
            out.tracks_stat = sidecar_signature(sidecars_of(item) if text_tracks.sidecars else [])
            out.tracks = read_text_tracks(item, duration_s=info.duration_s, options=text_tracks)
            out.tracks_seconds = time.perf_counter() - t
    except VideoError as exc:
        out.error = strip_paths(summarize(exc))  # reasons are shown to API clients: no paths
    except Exception as exc:  # noqa: BLE001 - unreadable file, decoder crash: recorded, never fatal
        out.error = strip_paths(describe(exc))
    out.seconds = time.perf_counter() - start
    return out
