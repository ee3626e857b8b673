"""What a search returns: a :class:`SearchOutcome` of :class:`Hit` s (one video each, with its
:class:`EvidenceItem` s) or, grouped by clip, :class:`ClipHit` s.

A leaf: it imports nothing of the engine, so every stage, tier and caller can name these types
without an import circle. The HTTP answer is shaped from them by ``service.responses``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from core.config import Sources

__all__ = ["STAGES", "ClipHit", "EvidenceItem", "Hit", "SearchOutcome", "ordered"]

# the answer's timings_ms keys, in the order a search passes them
STAGES = (
    "queue", "query_queue", "query_embed", "filter", "faiss", "spoken", "frame", "selection", "decode",
    "heavy_queue", "encode", "head", "moment", "refine_queue", "refine", "total",
)  # fmt: skip


@dataclass
class EvidenceItem:
    frame_index: int
    timestamp_s: float
    relevance: float


@dataclass
class Hit:
    """One candidate video of a search, as stage 1 found it and each later stage scored it."""

    # -- the ranking ----------------------------------------------------------------------------------
    video_id: str
    score: float
    stage1_score: float
    stage1_rank: int | None  # 1-based; None: found only through what was said (engine.spoken)
    reranked: bool = False
    record: object = None  # indexer.store.VideoRecord
    tier: str | None = None  # the stage-2 tier whose score ranks this hit (None: stage 1)
    frame_score: float | None = None  # the frame tier's score (engine.tiers.frame), when it ran
    # -- evidence and moment (engine.search.evidence) --------------------------------------------------
    evidence: list[EvidenceItem] | None = None
    moment: tuple[float, float] | None = None
    moment_source: str | None = None
    timeline: object = None  # engine.moments.Timeline: relevance over time (set for returned hits)
    relevance: float | None = None  # engine.relevance: this video holds what the query describes (0..1)
    visual_relevance: float | None = None  # ``relevance`` from the frames alone
    # -- what a heavy tier computed (engine.tiers.encoded, engine.tiers.head) ------------------------------
    step_scores: np.ndarray | None = None  # q·z_t for t = 1..T^ (streaming)
    clips_used: int | None = None  # T^: clips encoded (fewer than planned after an early exit)
    clips_planned: int | None = None  # T
    embedding: np.ndarray | None = None  # v_ij [d], for callers who compare encodings
    step_spans: list[tuple[float, float]] | None = None  # (start_s, end_s) of each streamed clip
    # q · z_T less the same moments each played backwards (models.windows.played_backwards), where the
    # cascade asked the head to read them so (a change reads as its opposite, a still shape as itself)
    change: float | None = None
    # -- what is said (engine.spoken): which rankings found it, its best cue, its visual rank and score
    source: str = "seen"  # core.config.Sources: seen, said or both
    spoken: object = None  # engine.spoken.SpokenMatch
    seen_rank: int | None = None  # its rank in the visual ranking (when fused)
    seen_score: float | None = None  # its visual score (when fused; ``score`` is then the fused one)
    # -- a query about time (engine.tiers.timehead) ----------------------------------------------------
    events: np.ndarray | None = None  # [S, d] the query's event embeddings
    event_peaks: np.ndarray | None = None  # [S] max_t p_k · f_t over the bank, for each event
    # P(it shows the order or number asked | it shows the events): the time head's calibrated
    # confidence (models.time_head.TimeHead.confidence); None where the head has none
    time_confidence: float | None = None
    # whether it shows every event the query names: its weakest event's relevance (relevance is this
    # times time_confidence: engine.tiers.timehead.time_relevance)
    events_relevance: float | None = None
    # -- computed once a search and shared by its stages -------------------------------------------------
    # v·f_c over the video's frame bank, per query vector v (q, and a selection query's q_sel where one
    # serves): engine.moments.bank_relevance
    bank_relevance: dict = field(default_factory=dict)
    peak: float | None = None  # max_c q·f_c over the video's frame bank
    moment_run: object = None  # engine.moments.RelevanceRun behind ``moment`` (for refinement)


@dataclass
class ClipHit:
    """One moment of a candidate (group_by "clip")."""

    hit: Hit  # its video's result
    score: float  # the frame tier's score over the moment's frames (engine.tiers.frame)
    moment: tuple[float, float]
    evidence: list[EvidenceItem]
    relevance: float | None = None  # engine.relevance of the moment's best frame (or its cue's coverage)
    source: str = Sources.SEEN  # found by what is seen, said, or both (engine.spoken)
    cue: dict | None = None  # the cue that matched it (said, both)
    visual_relevance: float | None = None


@dataclass
class SearchOutcome:
    query: str
    mode: str
    embedder: str
    shortlist: int
    frames: int
    hits: list[Hit]
    clips: list[ClipHit] | None = None  # group_by "clip": the moments, best first
    more: bool = False  # the stage-1 ranking goes on past this page
    offset: int = 0  # the page's first window (engine.search.searcher: pages cut one ranking)
    skip: int = 0  # ... and the results of it earlier pages showed
    next_offset: int | None = None  # where the next page starts (None: the ranking ends here)
    next_skip: int = 0
    rerank_embedder: str | None = None
    timings_ms: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STAGES, 0.0))
    cache_hits: int = 0
    cache_misses: int = 0
    store_frames: int = 0
    decoded_frames: int = 0
    cache_errors: int = 0
    store_errors: int = 0
    warnings: list[str] = field(default_factory=list)
    sources: str = Sources.SEEN  # what the ranking is by (engine.spoken)
    route: str | None = None  # which stage-2 tier ranked the answer, and the measured signals why


def ordered(hits: list[Hit]) -> list[Hit]:
    """Reranked candidates by score (ties: stage-1 order), then the rest in stage-1 order."""
    reranked = sorted((h for h in hits if h.reranked), key=lambda h: (-h.score, h.stage1_rank))
    return reranked + sorted((h for h in hits if not h.reranked), key=lambda h: h.stage1_rank)
