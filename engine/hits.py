"""What a search returns per candidate: a :class:`Hit` (one video) and its :class:`EvidenceItem` s."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class EvidenceItem:
    frame_index: int
    timestamp_s: float
    relevance: float


@dataclass
class Hit:
    video_id: str
    score: float
    stage1_score: float
    stage1_rank: int | None  # 1-based; None: found only through what was said (engine.spoken)
    reranked: bool = False
    record: object = None  # indexer.store.VideoRecord
    evidence: list[EvidenceItem] | None = None
    moment: tuple[float, float] | None = None
    moment_source: str | None = None
    step_scores: np.ndarray | None = None  # q·z_t for t = 1..T^ (streaming)
    clips_used: int | None = None  # T^: clips encoded (fewer than planned after an early exit)
    clips_planned: int | None = None  # T
    embedding: np.ndarray | None = None  # v_ij [d], for callers who compare encodings
    step_spans: list[tuple[float, float]] | None = None  # (start_s, end_s) of each streamed clip
    timeline: object = None  # engine.moments.Timeline: relevance over time (set for returned hits)
    tier: str | None = None  # the stage-2 tier whose score ranks this hit (None: stage 1)
    moment_run: object = None  # engine.moments.RelevanceRun behind ``moment`` (for refinement)
    peak: float | None = None  # max_c q·f_c over the video's frame bank
    relevance: float | None = None  # engine.relevance: this video holds what the query describes (0..1)
    frame_score: float | None = None
    bank_relevance: np.ndarray | None = (
        None  # q·f_c over the video's frame bank, computed once a search  # the frame tier's score (engine.tiers.frame), when it ran
    )
    # what is said (engine.spoken): which rankings found it, its best cue, its visual rank and score
    source: str = "seen"  # core.config.Sources: seen, said or both
    spoken: object = None  # engine.spoken.SpokenMatch
    seen_rank: int | None = None  # its rank in the visual ranking (when fused)
    seen_score: float | None = None  # its visual score (when fused; ``score`` is then the fused one)
    visual_relevance: float | None = None  # ``relevance`` from the frames alone
    events: np.ndarray | None = None  # [S, d] a time query's event embeddings (engine.tiers.timehead)
    event_peaks: np.ndarray | None = None  # [S] max_t p_k · f_t over the bank, for each event


def ordered(hits: list[Hit]) -> list[Hit]:
    """Reranked candidates by score (ties: stage-1 order), then the rest in stage-1 order."""
    reranked = sorted((h for h in hits if h.reranked), key=lambda h: (-h.score, h.stage1_rank))
    return reranked + sorted((h for h in hits if not h.reranked), key=lambda h: h.stage1_rank)


def bank_relevance(index, hit: Hit, q: np.ndarray) -> np.ndarray:
    """q·f_c over ``hit``'s frame bank: computed on first use in a search and kept on the hit, so the
    frame tier, selection, evidence, moments, timelines and clips of one search share one product."""
    if hit.bank_relevance is None:
        from engine.moments import relevance_scores

        hit.bank_relevance = relevance_scores(index.frame_bank(hit.video_id).embeddings, q)
    return hit.bank_relevance
