"""The frame tier: rank the shortlist by its stored frame bank, with no backbone call.

Every indexed video keeps per-frame embeddings f_c (the frame bank, about one frame per second).
The query's relevance to each is one dot product, q · f_c (the same scores query-aware selection
uses for Eq. 2), and a candidate's frame score aggregates them:

    max       max_c q·f_c                         the best single frame
    top2      mean of the two best q·f_c          a brief event spans a few bank frames
    z         (max_c q·f_c - median_c) / MAD_c    the peak on the video's own scale

Each of the shortlist's banks is scored in one matrix-vector product. The aggregate was chosen by
``benchmarks/bench_quality.py`` (the default: :data:`core.config.FRAME_AGGREGATE`).
"""

from __future__ import annotations

import numpy as np

from core.config import FRAME_AGGREGATE, FrameAggregate
from engine.moments import bank_relevance
from engine.results import Hit, ordered
from engine.tiers.base import Tier, TierRequest, register


def frame_score(relevance: np.ndarray, aggregate: str = FRAME_AGGREGATE, *, rows=None) -> float:
    """One candidate's frame score from its bank relevance (see the module docstring); with
    ``rows``, the score of those frames only (a moment), on the whole video's scale."""
    r = np.asarray(relevance, dtype=np.float64)
    if r.size == 0:
        return float("-inf")
    part = r if rows is None else r[rows]
    if aggregate == FrameAggregate.MAX:
        return float(part.max())
    if aggregate == FrameAggregate.TOP2:
        return float(np.sort(part)[-2:].mean())
    if aggregate == FrameAggregate.Z:
        median = np.median(r)
        mad = 1.4826 * np.median(np.abs(r - median))
        return float((part.max() - median) / max(mad, 1e-3))
    raise ValueError(f"unknown frame aggregate {aggregate!r}")


@register
class FrameTier(Tier):
    """Scores every candidate from its frame bank (zero backbone calls)."""

    name = "frame"
    heavy = False

    def __init__(self, index, *, aggregate: str = FRAME_AGGREGATE):
        self.index = index
        self.aggregate = FrameAggregate(aggregate)

    def scores(self, hits: list[Hit], q: np.ndarray) -> list[float]:
        """Each hit's frame score under another query vector ``q`` (a selection query), the hits left
        as they are."""
        return [frame_score(bank_relevance(self.index, h, q), self.aggregate) for h in hits]

    def run(self, request: TierRequest, hits: list[Hit]) -> list[Hit]:
        if not hits:
            return hits
        q = request.q_vec
        with request.clock.stage("frame"):
            # one product per bank, read from the float16 bank in place (no float32 copy of the
            # whole shortlist: with hour-long banks that copy cost more than the products)
            relevance = [bank_relevance(self.index, h, q) for h in hits]
            for hit, rel in zip(hits, relevance, strict=True):
                hit.score = frame_score(rel, self.aggregate)
                hit.frame_score = hit.score
                hit.peak = float(rel.max()) if rel.size else None
                hit.reranked = True
                hit.tier = self.name
        ranked = ordered(hits)
        if request.on_update is not None:
            request.on_update(ranked)
        return ranked
