"""Moment edges at the source's frame rate.

The frame bank holds about one frame per second, so a moment found in it (engine.moments) knows
each edge only to within the gap between two bank frames. For the top results the refiner reads
the source frames inside each edge's gap (from the frame cache, else decoded), embeds them as the
bank's frames were embedded (``Backbone.embed_images`` at the working size), and moves the edge to
where relevance crosses the moment's own threshold: the first frame at or above it opens the moment,
the last one closes it, each edge half-way to its neighbour below.
"""

from __future__ import annotations

import numpy as np
import torch

from engine.frames import FrameSource, FrameStats
from engine.moments import RelevanceRun, duration_of
from engine.runtime.policy import IMAGES

FRAMES_PER_EDGE = 8  # at most this many source frames scored inside each edge's gap


class MomentRefiner:
    def __init__(self, backbone, frames: FrameSource, *, per_edge: int = FRAMES_PER_EDGE, batcher=None):
        self.backbone = backbone
        self.frames = frames
        self.per_edge = int(per_edge)
        # engine.runtime.batching.EncodeBatcher shared by concurrent searches (None: embed here)
        self.batcher = batcher

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
        inside = np.arange(lo + 1, hi, dtype=np.int64)
        if len(inside) > self.per_edge:
            inside = inside[np.linspace(0, len(inside) - 1, self.per_edge).round().astype(int)]
        return np.unique(inside)

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
        wanted = np.concatenate([left, right])
        if len(wanted):
            got = self.frames.get([(record, wanted)], stats)[0]
            if isinstance(got, Exception):
                return None
            emb = self._embed(list(got), clock).float().cpu().numpy()
            rel = emb @ np.asarray(q, dtype=np.float32)
        else:
            rel = np.empty(0, np.float32)
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
