"""Moment edges at the source's frame rate.

The frame bank holds about one frame per second, so a moment found in it (engine.moments) knows
each edge only to within the gap between two bank frames. For the top results the refiner reads
the source frames inside each edge's gap (from the frame cache, else decoded), embeds them as the
bank's frames were embedded (``Backbone.embed_images`` at the working size), and moves the edge to
where relevance crosses the moment's own threshold: the first frame at or above it opens the moment,
the last one closes it, each edge half-way to its neighbour below.

Where the index stores edge frames (indexer.edges: the source frames inside each video's largest
bank changes, embedded at build time) the gap's frames are read from there: no decode and no
backbone call, so a first query costs what a warm one does. Only frames the index does not store
(an edge outside those gaps, an index built before edge frames) are read and embedded as above.
"""

from __future__ import annotations

import threading

import numpy as np
import torch

from core.config import EDGE_FRAMES_PER_GAP
from engine.frames import FrameSource, FrameStats
from engine.moments import RelevanceRun, duration_of
from engine.runtime.policy import IMAGES
from indexer.edges import gap_frames, lookup

FRAMES_PER_EDGE = EDGE_FRAMES_PER_GAP  # at most this many source frames scored inside each edge's gap


class MomentRefiner:
    def __init__(
        self, backbone, frames: FrameSource, *, per_edge: int = FRAMES_PER_EDGE, batcher=None, edges=None
    ):
        self.backbone = backbone
        self.frames = frames
        self.per_edge = int(per_edge)
        # engine.runtime.batching.EncodeBatcher shared by concurrent searches (None: embed here)
        self.batcher = batcher
        # video id -> its indexer.edges.EdgeFrames or None (IndexReader.edge_frames); None: never stored
        self.edges = edges
        self.stored_frames = 0  # gap frames read from the index's edge frames over this refiner's life
        self.embedded_frames = 0  # gap frames read from the frame cache or source and embedded
        self._lock = threading.Lock()

    def _embed(self, frames: list, clock) -> torch.Tensor:
        """[B, d] for the source frames: in a backbone call shared with other searches' frames when
        there is a batcher (its wait booked as ``refine_queue``, the work left in ``refine``)."""
        if self.batcher is None or clock is None:
            return self.backbone.embed_images(frames)
        return torch.stack(
            self.batcher.run(clock, self.backbone, frames, kind=IMAGES, queue="refine_queue", inside="refine")
        )

    def _gap(self, lo: int, hi: int) -> np.ndarray:
        """Source frame indices strictly between bank frames ``lo`` and ``hi`` (at most per_edge)."""
        return gap_frames(lo, hi, self.per_edge)

    def _relevance(self, hit, wanted: np.ndarray, q: np.ndarray, stats: FrameStats, clock):
        """q·f of the ``wanted`` source frames: the index's edge frames where it stores them, the
        rest read (frame cache, else decoded) and embedded; None when those cannot be read."""
        q = np.asarray(q, dtype=np.float32)
        rel = np.empty(len(wanted), dtype=np.float32)
        edges = self.edges(hit.video_id) if self.edges is not None and len(wanted) else None
        rows = lookup(edges, wanted)
        stored = rows >= 0
        if stored.any():
            rel[stored] = np.asarray(edges.embeddings[rows[stored]], dtype=np.float32) @ q
        need = wanted[~stored]
        if len(need):
            got = self.frames.get([(hit.record, need)], stats)[0]
            if isinstance(got, Exception):
                return None
            rel[~stored] = self._embed(list(got), clock).float().cpu().numpy() @ q
        with self._lock:
            self.stored_frames += int(stored.sum())
            self.embedded_frames += len(need)
        return rel

    @torch.inference_mode()
    def refine(self, hit, bank, run: RelevanceRun, q: np.ndarray, stats: FrameStats, *, clock=None):
        """The refined (start_s, end_s) of ``run`` in ``hit``'s video, or None when the source
        frames cannot be read (the bank-resolution moment stands). ``clock``: the search's stage
        clock, for the batcher (called within its ``refine`` stage)."""
        record = hit.record
        fps = float(record.fps)
        duration = duration_of(record)
        idx = np.asarray(bank.frame_indices, dtype=np.int64)
        n = len(idx)
        left = self._gap(idx[run.first - 1], idx[run.first]) if run.first > 0 else np.empty(0, np.int64)
        right = self._gap(idx[run.last], idx[run.last + 1]) if run.last + 1 < n else np.empty(0, np.int64)
        rel = self._relevance(hit, np.concatenate([left, right]), q, stats, clock)
        if rel is None:
            return None
        rel_left, rel_right = rel[: len(left)], rel[len(left) :]
        tau = run.threshold
        # the left edge: the sequence bank[first-1] (below), the gap's frames, bank[first] (above)
        if run.first > 0:
            seq = np.concatenate([[idx[run.first - 1]], left, [idx[run.first]]])
            ok = np.concatenate([[False], rel_left >= tau, [True]])
            k = int(np.argmax(ok))  # the first frame at or above the threshold
            start = 0.5 * (seq[k - 1] + seq[k]) / fps
        else:
            start = 0.0
        if run.last + 1 < n:
            seq = np.concatenate([[idx[run.last]], right, [idx[run.last + 1]]])
            ok = np.concatenate([[True], rel_right >= tau, [False]])
            k = len(ok) - 1 - int(np.argmax(ok[::-1]))  # the last frame at or above it
            end = 0.5 * (seq[k] + seq[k + 1]) / fps
        else:
            end = duration if duration is not None else (idx[-1] + 1) / fps
        if duration is not None:
            end = min(end, duration)
        return float(start), float(max(start, end))
