"""A relevance a user can read: does the video hold what the query describes, or nothing like it?

Ranking scores compare candidates of one query; they do not say whether the best of them matches at
all (a query about something no video shows still gets a top result). The relevance of a video is
its best frame's cosine with the query, measured against what the same query scores on a typical
frame of this collection:

    relevance = clip(peak - w · null, 0, 1),   peak = max_c q·f_c over the video's frame bank,
                                               null = median of q·n over a fixed sample of bank frames

The null sample (about 2,000 frames drawn once from the whole collection) is mostly what videos
are between events, so a query that matches nothing lifts no frame far above it; a query whose
words lie outside what the backbone knows scores every frame alike. ``w`` and the documented
threshold (:data:`core.config.MIN_RELEVANCE`) were chosen by benchmarks/bench_quality.py.

An answer shows relevance through :func:`monotone`: never higher than the result ranked above it.
"""

from __future__ import annotations

import numpy as np

from core.config import NULL_SAMPLE_FRAMES, RELEVANCE_NULL_WEIGHT


class NullSample:
    """A fixed, seeded sample of the collection's bank frames, drawn once per index."""

    def __init__(self, index, *, size: int = NULL_SAMPLE_FRAMES, seed: int = 0):
        rng = np.random.default_rng(seed)
        ids = sorted(index.bank_ids())
        rows = []
        if ids:  # videos drawn with replacement, then that many distinct frames of each
            counts = np.bincount(rng.integers(len(ids), size=size), minlength=len(ids))
            for i in np.flatnonzero(counts):
                bank = np.asarray(index.frame_bank(ids[i]).embeddings, dtype=np.float32)
                if len(bank):
                    rows.append(
                        bank[rng.choice(len(bank), size=min(int(counts[i]), len(bank)), replace=False)]
                    )
        self.frames = np.concatenate(rows) if rows else np.zeros((0, 1), np.float32)

    def median(self, q: np.ndarray) -> float:
        """The query's median cosine over the sample (0 for an empty collection)."""
        if len(self.frames) == 0:
            return 0.0
        return float(np.median(self.frames @ np.asarray(q, dtype=np.float32)))


def relevance(peak: float, null: float, *, weight: float = RELEVANCE_NULL_WEIGHT) -> float:
    return float(np.clip(peak - weight * null, 0.0, 1.0))


def monotone(ranked, floor: float | None = None) -> float | None:
    """Make ``relevance`` non-increasing along a ranked list (a running minimum, in place), so that
    no result reads as more relevant than one ranked above it: the order is the ranking's (stage 2's,
    or the fusion's), and a result's shown relevance is the least of its own and every one above it.
    ``floor``: the relevance of the result just above the list (a page that continues a ranking).
    Items without a relevance are left as they are. Returns the last relevance (the next floor)."""
    for item in ranked:
        if item.relevance is None:
            continue
        if floor is not None and item.relevance > floor:
            item.relevance = floor
        floor = item.relevance
    return floor
