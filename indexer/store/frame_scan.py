"""Videos ranked by their best bank frame: the frame-level view of stage 1.

Stage 1's FAISS index holds one vector per video (v_j); a query whose events show in a few frames
of a long video can lie far from that one vector. The frame bank holds f_c, about one per second, and

    score_j = max_c  q · f_c    over video j's bank frames

ranks every video by the frame that shows the query best (the frame tier's ``max`` aggregate, over
the whole collection instead of a shortlist). Given several queries (the events of an order or a
count), a video scores by its weakest event, min_e max_c e · f_c: whether it shows every one. :class:`FrameScan` keeps every bank of an index in one
float32 matrix [frames, d] (built once per reader: frames × d × 4 bytes, e.g. 3.6 M frames of 1000
hour-long videos at d = 128 take 1.8 GB) and scores a query with one matrix-vector product and one
segmented max; the scan is exact.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection

import numpy as np

logger = logging.getLogger(__name__)

__all__ = ["FrameScan"]


class FrameScan:
    """Every indexed video's frame bank in one matrix, rows of one video contiguous (``starts``),
    videos in id order."""

    def __init__(self, ids: list[str], starts: np.ndarray, matrix: np.ndarray):
        self.ids = ids
        self.starts = starts  # [V] row where each video's frames begin (each video has >= 1 frame)
        self.matrix = matrix  # [frames, d] float32
        self._position = {v: i for i, v in enumerate(ids)}

    @classmethod
    def build(cls, reader) -> FrameScan:
        """Read every indexed video's bank of ``reader`` (an ``IndexReader``) into one matrix."""
        started = time.perf_counter()
        ids, banks = [], []
        indexed = {r.id for r in reader.videos()}
        for vid in sorted(reader.bank_ids()):  # by id: equal scores (a reversal pair's) rank by id
            if vid not in indexed:
                continue
            bank = np.asarray(reader.frame_bank(vid).embeddings)
            if len(bank):
                ids.append(vid)
                banks.append(bank)
        d = reader.manifest.embed_dim
        matrix = np.concatenate(banks).astype(np.float32) if banks else np.zeros((0, d), np.float32)
        starts = (
            np.cumsum([0] + [len(b) for b in banks[:-1]]).astype(np.int64) if banks else np.zeros(0, np.int64)
        )
        logger.info(
            "frame scan: %d bank frames of %d videos (%.1f MB) in %.2f s",
            len(matrix), len(ids), matrix.nbytes / 1e6, time.perf_counter() - started,
        )  # fmt: skip
        return cls(ids, starts, matrix)

    def __len__(self) -> int:
        return len(self.matrix)

    def search(self, query: np.ndarray, k: int, *, allowed_ids: Collection[str] | None = None):
        """The first ``k`` videos by max_c query · f_c (module docstring), as (video_id, score); ``query``
        [d], or [E, d] for min_e max_c e · f_c."""
        if k <= 0 or not self.ids:
            return []
        q = np.ascontiguousarray(query, dtype=np.float32).reshape(-1, self.matrix.shape[1])
        best = np.maximum.reduceat(self.matrix @ q.T, self.starts, axis=0).min(axis=1)
        if allowed_ids is not None:
            keep = np.zeros(len(self.ids), dtype=bool)
            keep[[self._position[v] for v in allowed_ids if v in self._position]] = True
            best = np.where(keep, best, -np.inf)
        k = min(k, int(np.isfinite(best).sum()))
        top = np.argsort(-best, kind="stable")[:k]  # equal scores in id order
        return [(self.ids[i], float(best[i])) for i in top]
